#!/usr/bin/env bash
# test_spikeglx_sort.sh - `boundsort sort` on a SpikeGLX .ap.bin (simulated NP1,
# 385 saved channels: 384 probe channels + sync): the run succeeds with the
# probe taken from the .meta alone, the Phy folder validates, params.py
# points at the .ap.bin with its 385 columns, channel_map.npy holds the 383
# sorted channels (reference channel 191 excluded, as SpikeGLX marks it),
# and spikes are found in the recording's range; the ADC phase shift is on by
# default (recorded in run_summary.json and params.json) and --no-phase-shift
# turns it off.
. "$(dirname "$0")/lib.sh"

# Under the sanitizers (BS_SANITIZED=1, detection of 384 channels is ~80x slower) 1 s is sorted: the
# same reading, geometry and export paths (seed 4 finds one unit in 1 s; 3 s take ~6 minutes there)
dur=3; units=10; seed=3; min_spikes=20
[ -n "${BS_SANITIZED:-}" ] && { dur=1; units=20; seed=4; min_spikes=10; }
"$BS" simulate -o "$T/sim" --probe np1 --duration $dur --units $units --seed $seed --spikeglx -q >/dev/null 2>&1 \
  || { echo "simulate --spikeglx failed"; exit 1; }
AP="$T/sim/spikeglx/sim_g0_t0.imec0.ap.bin"
"$BS" sort "$AP" -o "$T/out" --no-qc --threads 2 -q 2>"$T/err.txt" && ok || bad "sort failed: $(cat "$T/err.txt")"
"$BS" validate "$T/out" >"$T/val.txt" 2>&1 && ok || bad "validate: $(cat "$T/val.txt")"
$PY - "$T/out" "$AP" $dur $min_spikes <<'PYEOF' && ok || bad "Phy folder of the SpikeGLX sort"
import ast, array, os, sys
out, ap, dur, min_spikes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def npy(name, code):
    with open(os.path.join(out, name), "rb") as f:
        assert f.read(6) == b"\x93NUMPY", name
        major = f.read(2)[0]
        hlen = int.from_bytes(f.read(2 if major == 1 else 4), "little")
        hdr = ast.literal_eval(f.read(hlen).decode("latin1"))
        a = array.array(code)
        a.frombytes(f.read())
        return hdr, a
params = {}
exec(open(os.path.join(out, "params.py")).read(), {}, params)
assert params["n_channels_dat"] == 385, params
assert params["dtype"] == "int16", params
dat = params["dat_path"]
assert os.path.realpath(dat if isinstance(dat, str) else dat[0]) == os.path.realpath(ap), params
hdr, cmap = npy("channel_map.npy", "i")
assert len(cmap) == 383 and 191 not in cmap and list(cmap) == [c for c in range(384) if c != 191], list(cmap)[:5]
hdr, st = npy("spike_times.npy", "q")
assert len(st) > min_spikes, len(st)
assert all(0 <= t < dur * 30000 for t in st)
PYEOF

# the ADC phase shift: from the .meta's ~muxTbl (NP1.0: slot / 13), recorded in run_summary.json and
# params.json; --no-phase-shift turns it off and is recorded too
$PY - "$T/out" <<'PYEOF' && ok || bad "phase shift not recorded"
import json, sys
r = json.load(open(sys.argv[1] + "/run_summary.json"))["phase_shift"]
p = json.load(open(sys.argv[1] + "/params.json"))
assert r["applied"] is True and abs(r["max_delay_samples"] - 11 / 13) < 1e-6, r
assert p["preprocess"]["no_phase_shift"] == 0, p["preprocess"]
PYEOF
"$BS" info "$AP" | grep -q "ADC skew       0 .. 0.8462 samples" && ok || bad "info shows no ADC skew"
if [ -z "${BS_SANITIZED:-}" ]; then
  "$BS" sort "$AP" -o "$T/nops" --no-qc --no-report --threads 2 -q --no-phase-shift 2>"$T/err.txt" && ok \
    || bad "sort --no-phase-shift failed: $(cat "$T/err.txt")"
  $PY - "$T/nops" <<'PYEOF' && ok || bad "--no-phase-shift not recorded"
import json, sys
r = json.load(open(sys.argv[1] + "/run_summary.json"))["phase_shift"]
p = json.load(open(sys.argv[1] + "/params.json"))
assert r == {"applied": False, "why_not": "--no-phase-shift"}, r
assert p["preprocess"]["no_phase_shift"] == 1, p["preprocess"]
PYEOF
  cmp -s "$T/out/spike_times.npy" "$T/nops/spike_times.npy" && bad "the phase shift changed nothing" || ok
fi
# a part whose ADC layout is not known (NP2020, 1536 readout channels, without its ~muxTbl): no shift, and
# sort says so naming the part (the run then stops on the flat file)
mkdir -p "$T/np2020"
grep -v '^~muxTbl' "$SRC/tests/data/spikeglx/meta/NP2020_sample_g0_t0.imec0.ap.meta" |
  sed 's/^fileSizeBytes=.*/fileSizeBytes=6160000/' >"$T/np2020/x_g0_t0.imec0.ap.meta"
head -c 6160000 /dev/zero >"$T/np2020/x_g0_t0.imec0.ap.bin"
"$BS" info "$T/np2020/x_g0_t0.imec0.ap.bin" | grep -q "ADC skew       unknown" && ok || bad "info: NP2020 without ~muxTbl has a skew"
"$BS" sort "$T/np2020/x_g0_t0.imec0.ap.bin" -o "$T/o2020" -q --no-qc >/dev/null 2>"$T/err2020.txt"
grep -q "no ADC multiplexing layout is known for probe part NP2020" "$T/err2020.txt" && ok \
  || bad "no warning for an unknown ADC layout: $(head -3 "$T/err2020.txt")"

finish
