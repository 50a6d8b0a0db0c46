# test_info.sh - `boundsort info` on a tiny raw recording with a probeinterface
# probe (tests/data/probes/pi_2shank.json: 11 of 12 columns, 2 shanks) and a
# Kilosort probe: text and --json output values, and exit codes for bad input
# (2, with the message) and bad usage (1).
. "$(dirname "$0")/lib.sh"
DATA=${BS_TEST_DATA:?BS_TEST_DATA not set}

# 3000 samples x 12 int16 columns; 2999 x 12 + 5 bytes for the bad-size case
$PY - "$T" <<'EOF'
import sys
import numpy as np
d = sys.argv[1]
np.arange(3000 * 12, dtype=np.int64).astype(np.int16).tofile(d + "/rec.bin")
with open(d + "/odd.bin", "wb") as f:
    f.write(b"\0" * (2999 * 12 * 2 + 5))
open(d + "/empty.bin", "wb").close()
with open(d + "/broken.json", "w") as f:
    f.write('{"probes": [{"contact_positions": [[0, 0], [0, "nan"]]}]}')
EOF
PROBE=$DATA/probes/pi_2shank.json
KS=$DATA/probes/ks_probe.json

# text output
"$BS" info "$T/rec.bin" --probe "$PROBE" --fs 30000 --uv-per-bit 0.195 >"$T/info.txt" 2>"$T/err"
check "info exits 0" test $? -eq 0
check "channels line" grep -q "^channels       11 (of 12 columns in the file)$" "$T/info.txt"
check "rate line" grep -q "^sampling rate  30000 Hz$" "$T/info.txt"
check "duration line" grep -q "^duration       0.100000 s$" "$T/info.txt"
check "samples line" grep -q "^samples        3000$" "$T/info.txt"
check "dtype line" grep -q "^dtype          int16 (header 0 bytes)$" "$T/info.txt"
check "uV/bit line" grep -q "^µV/bit         0.195$" "$T/info.txt"
check "shanks line" grep -q "^shanks         2$" "$T/info.txt"
check "x range" grep -q "^x range        0 .. 166 µm$" "$T/info.txt"
check "y range" grep -q "^y range        0 .. 40 µm$" "$T/info.txt"
check "pitch" grep -q "^vertical pitch 20 µm$" "$T/info.txt"
check "columns" grep -q "^columns        11,10,8,7,6,5,4,3,2,1,0$" "$T/info.txt"
check "model" grep -q "^probe          test-2shank$" "$T/info.txt"

# JSON output
"$BS" info "$T/rec.bin" --probe "$PROBE" --fs 30000 --uv-per-bit 0.195 --json >"$T/info.json" 2>"$T/err"
check "info --json exits 0" test $? -eq 0
check "JSON values" $PY - "$T/info.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["n_chan"] == 11 and j["n_cols"] == 12, j
assert j["fs_hz"] == 30000 and j["n_samples"] == 3000 and abs(j["duration_s"] - 0.1) < 1e-12
assert j["dtype"] == "int16" and j["header_bytes"] == 0 and j["format"] == "raw"
assert j["uv_per_bit_min"] == 0.195 and j["uv_per_bit_max"] == 0.195
p = j["probe"]
assert p["n_shanks"] == 2 and p["x_min_um"] == 0 and p["x_max_um"] == 166, p
assert p["y_min_um"] == 0 and p["y_max_um"] == 40 and p["vertical_pitch_um"] == 20, p
assert p["model"] == "test-2shank"
ch = j["channels"]
assert [c["column"] for c in ch] == [11, 10, 8, 7, 6, 5, 4, 3, 2, 1, 0]
assert [c["x_um"] for c in ch] == [0, 0, 16, 16, 16, 150, 150, 150, 166, 166, 166]
assert [c["y_um"] for c in ch] == [0, 20, 0, 20, 40, 0, 20, 40, 0, 20, 40]
assert [c["shank"] for c in ch] == [0] * 5 + [1] * 6
EOF

# Kilosort probe: 6 channels of 8 columns -> 3000*12/8 = 4500 samples; uint16 offset
"$BS" info "$T/rec.bin" --probe "$KS" --fs 20000 --dtype uint16 --json >"$T/ks.json" 2>"$T/err"
check "KS info exits 0" test $? -eq 0
check "KS JSON values" $PY - "$T/ks.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["n_chan"] == 6 and j["n_cols"] == 8 and j["n_samples"] == 4500, j
assert j["dtype"] == "uint16" and j["offset"] == 32768 and j["duration_s"] == 0.225
assert j["probe"]["n_shanks"] == 2 and j["probe"]["vertical_pitch_um"] == 15
assert [c["column"] for c in j["channels"]] == [0, 1, 2, 3, 5, 6]
assert [c["shank"] for c in j["channels"]] == [0, 0, 0, 0, 1, 1]
EOF
# --n-chan overrides the probe's column count; an empty file has 0 samples
"$BS" info "$T/rec.bin" --probe "$KS" --fs 20000 --n-chan 16 --json >"$T/n16.json" 2>"$T/err"
check "--n-chan 16" $PY -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['n_cols']==16 and j['n_samples']==2250" "$T/n16.json"
"$BS" info "$T/empty.bin" --probe "$KS" --fs 20000 >"$T/empty.txt" 2>"$T/err"
check "empty file exits 0" test $? -eq 0
check "empty file: 0 samples" grep -q "^samples        0$" "$T/empty.txt"

# bad input: exit 2 with the message
expect_fixed 2 "odd.bin: 71981 data bytes is not a multiple of the sample size 12 columns x 2 bytes" -- \
    "$BS" info "$T/odd.bin" --probe "$PROBE" --fs 30000
expect_fixed 2 "nope.json: cannot open" -- "$BS" info "$T/rec.bin" --probe "$T/nope.json" --fs 30000
expect_fixed 2 "contact_positions[1][1]: expected a number" -- \
    "$BS" info "$T/rec.bin" --probe "$T/broken.json" --fs 30000
expect_fixed 2 "sampling rate (--fs)" -- "$BS" info "$T/rec.bin" --probe "$PROBE"
expect_fixed 2 "cannot open the recording" -- "$BS" info "$T/none.bin" --probe "$PROBE" --fs 30000
expect_fixed 2 "unrecognised recording" -- "$BS" info "$T/rec.bin" --fs 30000
expect_fixed 2 "maps to data column 11, expected 0..9" -- \
    "$BS" info "$T/rec.bin" --probe "$PROBE" --fs 30000 --n-chan 10
# bad usage: exit 1
expect_fixed 1 "missing the recording" -- "$BS" info
expect_fixed 1 "unknown option --frobnicate" -- "$BS" info "$T/rec.bin" --frobnicate 2
expect_fixed 1 "--dtype: expected int16" -- "$BS" info "$T/rec.bin" --probe "$PROBE" --fs 30000 --dtype int8
expect_fixed 1 "--fs: expected a sampling rate" -- "$BS" info "$T/rec.bin" --probe "$PROBE" --fs abc
expect_fixed 1 "--n-chan: expected" -- "$BS" info "$T/rec.bin" --probe "$PROBE" --fs 3e4 --n-chan -3
expect_fixed 1 "needs a value" -- "$BS" info "$T/rec.bin" --probe
expect_fixed 1 "second one" -- "$BS" info "$T/rec.bin" "$T/rec.bin"
"$BS" info --help >"$T/out" 2>&1
check "--help exits 0" test $? -eq 0
check "--help prints usage" grep -q "usage: boundsort info REC" "$T/out"

finish
