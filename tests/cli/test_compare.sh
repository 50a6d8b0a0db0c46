#!/usr/bin/env bash
# test_compare.sh - `boundsort compare` end to end: the JSON summary on a
# SpikeInterface fixture (numbers from tests/data/compare/mixed/expected.json),
# the table, a GT folder scored against itself, --exclude-group, --delta-ms,
# each GT unit's SNR against numpy's on a simulated folder (and --snr),
# and the exit codes: 1 for bad usage, 2 for unreadable or malformed input.
. "$(dirname "$0")/lib.sh"
DATA=${BS_TEST_DATA:?BS_TEST_DATA is not set}/compare
has() { grep -q -- "$2" "$1" && ok || bad "$1 lacks '$2': $(head -c 400 "$1")"; }

M=$DATA/mixed
# JSON summary: SpikeInterface gives 6 GT, 8 sorted, 1 well detected, 1 false
# positive, 2 redundant, 1 overmerged, 3 bad units for this case.
expect 0 "" "$BS" compare "$M/sorted" "$M/gt" --json
[ "$(wc -l <"$T/out.txt")" -eq 1 ] && ok || bad "json output is not one line"
for kv in '"n_gt_units":6' '"n_sorted_units":8' '"n_well_detected":1' '"n_false_positive":1' \
          '"n_redundant":2' '"n_overmerged":1' '"n_bad":3' '"delta_samples":12' \
          '"mean_accuracy":0.58677913785594' '"units":\[{"gt_unit":0,"n_gt":60,"sorted_unit":3,' \
          '"gt_unit":2,"n_gt":56,"sorted_unit":null'; do
    has "$T/out.txt" "$kv"
done

[ ! -s "$T/err.txt" ] && ok || bad "warnings on a matching pair: $(cat "$T/err.txt")"

# folders that do not describe the same recording: scored, with a warning on stderr
cp -r "$M/sorted" "$T/rate" && sed -i 's/^sample_rate = .*/sample_rate = 20000.0/' "$T/rate/params.py"
expect_fixed 0 "warning: $T/rate: sampling rate 20000 Hz, but the ground truth $M/gt is sampled at 30000 Hz" \
    "$BS" compare "$T/rate" "$M/gt" --json
cp -r "$M/sorted" "$T/part" && $PY -c "
import numpy as np
t = np.load('$T/part/spike_times.npy'); c = np.load('$T/part/spike_clusters.npy'); keep = t.ravel() < 60000
np.save('$T/part/spike_times.npy', t[keep]); np.save('$T/part/spike_clusters.npy', c[keep])"
expect 0 "warning: $T/part: the sorted spikes end at 1\.99.* s, the ground truth's at 7\.9.* s: was only part" \
    "$BS" compare "$T/part" "$M/gt"
head -c $((60000 * 4 * 2)) /dev/zero >"$T/part/recording.bin"   # params.py: dat_path = 'recording.bin', 4 x int16
expect_fixed 0 "the sorted recording lasts 2 s (60000 samples), the ground truth $M/gt 8 s (240000 samples)" \
    "$BS" compare "$T/part" "$M/gt"
mkdir -p "$T/none" && $PY -c "
import numpy as np; np.save('$T/none/spike_times.npy', np.zeros(0, np.int64)); np.save('$T/none/spike_clusters.npy', np.zeros(0, np.int32))"
expect_fixed 0 "the sorting has no spikes" "$BS" compare "$T/none" "$M/gt"

# the table
expect 0 "" "$BS" compare "$M/sorted" "$M/gt"
has "$T/out.txt" "well detected: *1$"
has "$T/out.txt" "redundant units: *2$"
grep -Eq '^ +2 +56 +- +0 +0\.0000' "$T/out.txt" && ok || bad "unmatched GT unit 2 not shown with '-'"

# --well-detected lowers the bar: units with agreement >= 0.5 (the 5 matched ones here)
expect 0 "" "$BS" compare "$M/sorted" "$M/gt" --json --well-detected 0.5
has "$T/out.txt" '"n_well_detected":5'

# a GT folder against itself
expect 0 "" "$BS" compare "$M/gt" "$M/gt" --json
has "$T/out.txt" '"mean_accuracy":1,'
has "$T/out.txt" '"n_false_positive":0'
has "$T/out.txt" '"n_well_detected":6'

# --exclude-group noise drops the pure-noise cluster (SpikeInterface: 7 units, 0 FP)
expect 0 "" "$BS" compare "$M/sorted" "$M/gt" --json --exclude-group noise
has "$T/out.txt" '"n_sorted_units":7'
has "$T/out.txt" '"n_false_positive":0'

# --delta-ms 0 : 0 samples, only exact coincidences
expect 0 "" "$BS" compare "$M/sorted" "$M/gt" --json --delta-ms 0
has "$T/out.txt" '"delta_samples":0'

# no templates or recording in the fixture's GT folder: no SNR
expect 0 "" "$BS" compare "$M/sorted" "$M/gt" --json
has "$T/out.txt" '"n_gt_snr":null'
has "$T/out.txt" '"snr":null'

# per-unit SNR of a simulated GT folder: numpy's value from the same 20 evenly spaced chunks of 10000
# samples (MAD / 0.6745 per chunk and channel, mean over chunks; |most negative template value| / noise)
"$BS" simulate -o "$T/sim" --probe linear32 --duration 10 --units 12 --seed 3 -q >/dev/null 2>&1 || bad "simulate failed"
expect 0 "" "$BS" compare "$T/sim" "$T/sim" --json
cp "$T/out.txt" "$T/sim.json"
check "GT SNR equals numpy's" $PY - "$T/sim" "$T/sim.json" <<'EOF2'
import json, sys
import numpy as np
d, res = sys.argv[1], json.load(open(sys.argv[2]))
meta = json.load(open(d + "/recording.json"))
C, T = meta["n_chan"], meta["n_samples"]
x = np.fromfile(d + "/recording.bin", dtype=np.int16).reshape(T, C)
L = min(T, 10000); avail = T // L; n = min(avail, 20)
noise = np.zeros(C)
for k in range(n):
    b = k * avail // n
    ch = x[b * L:(b + 1) * L].astype(np.float32) * np.float32(meta["uv_per_bit"])
    noise += np.median(np.abs(ch - np.median(ch, axis=0)), axis=0) / 0.6744897501960817
noise /= n
mn = np.load(d + "/gt_templates.npy").min(axis=1)
main = mn.argmin(axis=1)
ref = -mn[np.arange(len(main)), main] / noise[main]
got = np.array([u["snr"] for u in res["units"]], dtype=float)
ids = np.array([u["gt_unit"] for u in res["units"]])
assert np.allclose(got, ref[ids], rtol=1e-5), (got, ref[ids])
assert res["n_gt_snr"] == int(np.sum(ref[ids] >= 5)) == res["n_well_detected_snr"], res
assert 0 < res["n_gt_snr"] < len(ids), res  # the case has units on both sides of 5
EOF2
expect 0 "" "$BS" compare "$T/sim" "$T/sim" --json --snr 1000
has "$T/out.txt" '"n_gt_snr":0,"n_well_detected_snr":0'
expect 0 "" "$BS" compare "$T/sim" "$T/sim"
grep -Eq '^well detected, SNR >= 5: ([0-9]+) of \1$' "$T/out.txt" && ok || bad "no SNR summary line: $(cat "$T/out.txt")"
# templates that do not fit the recording: exit 2 naming the file
cp -r "$T/sim" "$T/simbad" && $PY -c "
import numpy as np; t = np.load('$T/simbad/gt_templates.npy'); np.save('$T/simbad/gt_templates.npy', t[:, :, :-1])"
expect 2 "gt_templates.npy: expected float32 (units, samples, 32 channels)" "$BS" compare "$T/sim" "$T/simbad"
$PY -c "
import numpy as np; t = np.load('$T/sim/gt_templates.npy'); np.save('$T/simbad/gt_templates.npy', t[:3])"
expect 2 "gt_templates.npy: 3 templates, but the ground truth has unit" "$BS" compare "$T/sim" "$T/simbad"
expect 1 "" "$BS" compare "$T/sim" "$T/sim" --snr -1

# usage errors: exit 1
expect 1 "" "$BS" compare
expect 1 "" "$BS" compare "$M/sorted"
expect 1 "" "$BS" compare "$M/sorted" "$M/gt" extra
expect 1 "" "$BS" compare "$M/sorted" "$M/gt" --frobnicate
expect 1 "" "$BS" compare "$M/sorted" "$M/gt" --delta-ms abc
has "$T/err.txt" "delta-ms"
expect 1 "" "$BS" compare "$M/sorted" "$M/gt" --well-detected 2
expect 1 "" "$BS" compare "$M/sorted" "$M/gt" --delta-ms
expect 0 "" "$BS" compare --help
has "$T/out.txt" "usage: boundsort compare"

# bad input: exit 2 with a message naming the file
expect 2 "" "$BS" compare "$M/sorted" "$T/nowhere"
has "$T/err.txt" "recording.json"
expect 2 "" "$BS" compare "$T/nowhere" "$M/gt"
has "$T/err.txt" "not a folder"
# GT folder without recording.json
mkdir -p "$T/nojson" && cp "$M/gt/"*.npy "$T/nojson/"
expect 2 "" "$BS" compare "$M/sorted" "$T/nojson"
# mismatched lengths: clusters of another case
mkdir -p "$T/mismatch" && cp "$M/sorted/spike_times.npy" "$T/mismatch/" \
    && cp "$DATA/random0/sorted/spike_clusters.npy" "$T/mismatch/"
expect 2 "" "$BS" compare "$T/mismatch" "$M/gt"
has "$T/err.txt" "expected the same length"
# a truncated .npy
mkdir -p "$T/trunc" && cp "$M/sorted/spike_clusters.npy" "$T/trunc/" \
    && head -c 100 "$M/sorted/spike_times.npy" >"$T/trunc/spike_times.npy"
expect 2 "" "$BS" compare "$T/trunc" "$M/gt"
has "$T/err.txt" "spike_times.npy"
# not an npy at all
mkdir -p "$T/garbage" && echo "hello" >"$T/garbage/spike_times.npy" \
    && cp "$M/sorted/spike_clusters.npy" "$T/garbage/"
expect 2 "" "$BS" compare "$T/garbage" "$M/gt"

finish
