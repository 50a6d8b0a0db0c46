#!/usr/bin/env bash
# test_nwb_sort.sh - NWB input and output end to end: `simulate --nwb` writes
# the recording as an NWB file (gzip-chunked int16, conversion x
# channel_conversion = µV/bit, rel_x/rel_y, group_name); `info` reads it
# like the raw binary + probe.json; sorting the NWB file and the raw binary
# gives identical outputs (every .npy and .tsv byte for byte); `sort --nwb`
# and `export-nwb` write units.nwb; a four-shank probe gets its shanks from
# group_name; `export-raw` and `sort --export-raw` write recording.dat (the
# samples, the sorted window's rows) and point params.py at it; bad
# invocations exit with clear messages. Skipped (77) when the build has no HDF5.
. "$(dirname "$0")/lib.sh"

# Under the sanitizers (BS_SANITIZED=1, about 20x slower) a shorter recording is sorted from NWB only;
# the NWB = raw comparison runs in the normal build.
dur=12; units=16
[ -n "${BS_SANITIZED:-}" ] && { dur=5; units=24; }
if ! "$BS" simulate -o "$T/sim" --probe linear32 --duration $dur --units $units --seed 3 --nwb -q >"$T/sim.txt" 2>&1; then
  if grep -q "built without HDF5" "$T/sim.txt"; then echo "no HDF5 in this build: skipped"; exit 77; fi
  cat "$T/sim.txt"; echo "simulate --nwb failed"; exit 1
fi
[ -s "$T/sim/recording.nwb" ] && ok || bad "no recording.nwb"
# same seed, same bytes
"$BS" simulate -o "$T/sim2" --probe linear32 --duration $dur --units $units --seed 3 --nwb -q >/dev/null 2>&1
cmp -s "$T/sim/recording.nwb" "$T/sim2/recording.nwb" && ok || bad "recording.nwb differs between two runs"
rm -rf "$T/sim2"

# info: the same channels, rate, scale and geometry as the raw binary
UV=$($PY -c "import json; print(json.load(open('$T/sim/recording.json'))['uv_per_bit'])")
"$BS" info "$T/sim/recording.nwb" --json >"$T/info_nwb.json" && ok || bad "info on the NWB file failed"
"$BS" info "$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000 --uv-per-bit "$UV" --json \
  >"$T/info_raw.json" && ok || bad "info on the raw binary failed"
$PY - "$T/info_nwb.json" "$T/info_raw.json" <<'EOF' && ok || bad "info differs between NWB and raw"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["format"] == "nwb" and a["series"] == "/acquisition/ElectricalSeries", a
assert a["series_list"] == ["/acquisition/ElectricalSeries"], a
for k in ("n_chan", "n_samples", "fs_hz", "dtype", "uv_per_bit_min", "uv_per_bit_max", "channels"):
    assert a[k] == b[k], (k, a[k], b[k])
assert a["probe"]["n_shanks"] == b["probe"]["n_shanks"] == 1
EOF
"$BS" info "$T/sim/recording.nwb" | grep -q "^series         /acquisition/ElectricalSeries$" && ok \
  || bad "info text lacks the series line"

# sort both: identical outputs
"$BS" sort "$T/sim/recording.nwb" -o "$T/o_nwb" --threads 2 -q --nwb && ok || bad "sort of the NWB file failed"
if [ -z "${BS_SANITIZED:-}" ]; then
  "$BS" sort "$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000 --uv-per-bit "$UV" -o "$T/o_raw" \
    --threads 2 -q && ok || bad "sort of the raw binary failed"
fi
if [ -z "${BS_SANITIZED:-}" ]; then
  n=0
  for f in "$T"/o_raw/*.npy "$T"/o_raw/*.tsv; do
    n=$((n + 1))
    cmp -s "$f" "$T/o_nwb/$(basename "$f")" && ok || bad "$(basename "$f") differs between NWB and raw input"
  done
  [ "$n" -ge 15 ] && ok || bad "only $n output files compared"
else
  cp -r "$T/o_nwb" "$T/o_raw" # the checks below run on the NWB sort
fi
units=$($PY -c "import numpy as np; print(len(np.unique(np.load('$T/o_raw/spike_clusters.npy'))))")
[ "$units" -ge 1 ] && ok || bad "no units sorted"
grep -q "^dat_path = \[\]" "$T/o_nwb/params.py" && ok || bad "params.py of an NWB sort should have dat_path = []"
"$BS" validate "$T/o_nwb" >/dev/null && ok || bad "validate failed on the NWB sort"

# sort --nwb wrote a copy of the input with the units; export-nwb of the raw sort writes a new file
[ -s "$T/o_nwb/units.nwb" ] && ok || bad "sort --nwb wrote no units.nwb"
"$BS" export-nwb "$T/o_raw" -o "$T/new.nwb" >"$T/out.txt" && ok || bad "export-nwb failed"
grep -q "$units units" "$T/out.txt" && ok || bad "export-nwb summary: $(cat "$T/out.txt")"
"$BS" export-nwb "$T/o_raw" --input-nwb "$T/sim/recording.nwb" -o "$T/copy.nwb" >/dev/null && ok \
  || bad "export-nwb --input-nwb failed"
# the copy still holds the recording: it reads as the same recording
"$BS" info "$T/copy.nwb" --json >"$T/info_copy.json" && cmp -s <(grep -v '"path"' "$T/info_copy.json" | grep -v data_path) \
  <(grep -v '"path"' "$T/info_nwb.json" | grep -v data_path) && ok || bad "the copy does not read as the recording"

# an input that already has /units: the sorting goes to /processing/boundsort/units; a third time is refused
"$BS" export-nwb "$T/o_nwb" --input-nwb "$T/o_nwb/units.nwb" -o "$T/twice.nwb" >/dev/null 2>"$T/err.txt" && ok \
  || bad "export-nwb into a file with /units failed: $(cat "$T/err.txt")"
grep -q "already has a /units table: writing the sorting to /processing/boundsort/units" "$T/err.txt" && ok \
  || bad "no warning about /units: $(cat "$T/err.txt")"
expect_line 2 "boundsort: $T/twice.nwb: /units and /processing/boundsort already exist: expected room for the sorted units (write a new file: omit --input-nwb)" \
  "$BS" export-nwb "$T/o_nwb" --input-nwb "$T/twice.nwb" -o "$T/thrice.nwb"
[ ! -e "$T/thrice.nwb" ] && ok || bad "a refused export left $T/thrice.nwb"

# four shanks: shanks from group_name, positions from rel_x / rel_y
"$BS" simulate -o "$T/sim4" --probe np2-4shank --duration 0.2 --units 4 --seed 5 --nwb -q >/dev/null 2>&1 \
  && ok || bad "simulate np2-4shank --nwb failed"
"$BS" info "$T/sim4/recording.nwb" --json >"$T/i4n.json" && ok || bad "info np2-4shank NWB failed"
"$BS" info "$T/sim4/recording.bin" --probe "$T/sim4/probe.json" --fs 30000 --json >"$T/i4r.json" && ok \
  || bad "info np2-4shank raw failed"
$PY - "$T/i4n.json" "$T/i4r.json" <<'EOF' && ok || bad "np2-4shank geometry differs"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["probe"]["n_shanks"] == 4 == b["probe"]["n_shanks"]
for ca, cb in zip(a["channels"], b["channels"]):
    assert (ca["x_um"], ca["y_um"], ca["shank"]) == (cb["x_um"], cb["y_um"], cb["shank"]), (ca, cb)
EOF

# the raw copy for Phy (sort --export-raw, export-raw): every column, int16, the sorted window's rows
"$BS" export-raw "$T/o_nwb" >/dev/null && ok || bad "export-raw failed"
grep -qx "dat_path = 'recording.dat'" "$T/o_nwb/params.py" && grep -qx "offset = 0" "$T/o_nwb/params.py" \
  && grep -qx "n_channels_dat = 32" "$T/o_nwb/params.py" && grep -qx "dtype = 'int16'" "$T/o_nwb/params.py" && ok \
  || bad "params.py after export-raw: $(head -4 "$T/o_nwb/params.py")"
cmp -s "$T/o_nwb/recording.dat" "$T/sim/recording.bin" && ok || bad "recording.dat is not the recording's samples"
"$BS" validate "$T/o_nwb" >/dev/null 2>&1 && ok || bad "the folder with recording.dat does not validate"
printf '{"tmin": 1, "tmax": 3}' >"$T/window.json"
"$BS" sort "$T/sim/recording.nwb" -o "$T/o_win" --params "$T/window.json" --threads 2 -q --no-qc --export-raw && ok \
  || bad "sort --export-raw of a window failed"
$PY - "$T/sim/recording.bin" "$T/o_win/recording.dat" <<'EOF' && ok || bad "the window's raw copy is not rows [1 s, 3 s)"
import sys
import numpy as np
a = np.fromfile(sys.argv[1], dtype="<i2").reshape(-1, 32)[30000:90000]
b = np.fromfile(sys.argv[2], dtype="<i2").reshape(-1, 32)
assert a.shape == b.shape and (a == b).all(), (a.shape, b.shape)
EOF
expect 2 "source.json" "$BS" export-raw "$T/nowhere"
expect 1 "missing the folder OUT" "$BS" export-raw

# bad invocations
expect_line 1 "boundsort: $T/sim/recording.nwb: an NWB file carries its own geometry (electrodes table rel_x/rel_y): --probe is for raw binaries" \
  "$BS" info "$T/sim/recording.nwb" --probe "$T/sim/probe.json"
expect_line 2 "boundsort: $T/sim/recording.nwb: --series 'lfp': no such ElectricalSeries; the file has: /acquisition/ElectricalSeries" \
  "$BS" info "$T/sim/recording.nwb" --series lfp
echo "not hdf5" >"$T/fake.nwb"
expect_line 2 "boundsort: $T/fake.nwb: not an HDF5 file (no HDF5 signature): expected an NWB 2.x file" \
  "$BS" sort "$T/fake.nwb" -o "$T/o_fake"
expect_line 2 "boundsort: $T/o_raw/params.py: sample_rate: expected a line 'sample_rate = HZ' with HZ > 0" \
  bash -c "sed -i 's/^sample_rate.*//' '$T/o_raw/params.py' && '$BS' export-nwb '$T/o_raw'"
expect_line 1 "boundsort export-nwb: missing the sorting folder OUT" "$BS" export-nwb

finish
