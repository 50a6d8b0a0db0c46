#!/usr/bin/env bash
# test_raw_folder.sh - a raw folder (recording.bin + recording.json + probe.json, what `boundsort
# simulate` writes) is a recording for info, plan and sort, read by the one opener (src/io/raw.c):
#   - info and plan of the folder equal those of recording.bin with the options recording.json holds;
#   - sorting the folder gives byte-identical .npy and .tsv files to sorting recording.bin --probe
#     probe.json --fs F --uv-per-bit X;
#   - options on the command line override the folder's files (--fs, --uv-per-bit, --probe), and a
#     probe.prb is read when there is no probe.json;
#   - a malformed folder (recording.json missing, without fs_hz, with a field of the wrong type,
#     n_chan smaller than the probe needs, truncated; recording.bin shorter than n_samples or cut
#     mid-row; no probe file) is exit 2 with a message naming the file and the field.
. "$(dirname "$0")/lib.sh"
DATA=${BS_TEST_DATA:?BS_TEST_DATA not set}

S="$T/sim"
"$BS" simulate -o "$S" --probe linear32 --duration 3 --units 5 --seed 7 -q || { echo "simulate failed"; exit 1; }
UV=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['uv_per_bit'])" "$S/recording.json")
RAW=("$S/recording.bin" --probe "$S/probe.json" --fs 30000 --uv-per-bit "$UV" --n-chan 32)

# info: the folder reads as recording.bin with recording.json's options
"$BS" info "$S" >"$T/info.txt" 2>"$T/err" && ok || bad "info FOLDER: $(cat "$T/err")"
grep -q "^recording      $S (raw)$" "$T/info.txt" && ok || bad "info: recording line: $(head -1 "$T/info.txt")"
grep -q "^data file      $S/recording.bin$" "$T/info.txt" && ok || bad "info: data file line"
grep -q "^samples        90000$" "$T/info.txt" && ok || bad "info: samples"
grep -q "^µV/bit         0.195$" "$T/info.txt" && ok || bad "info: µV/bit"
"$BS" info "$S" --json >"$T/folder.json" 2>"$T/err" && ok || bad "info FOLDER --json: $(cat "$T/err")"
"$BS" info "${RAW[@]}" --json >"$T/raw.json" 2>"$T/err" && ok || bad "info recording.bin --json: $(cat "$T/err")"
$PY - "$T/folder.json" "$T/raw.json" <<'PY' && ok || bad "info FOLDER --json differs from info recording.bin --json"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a.pop("path") != b.pop("path")
assert a == b, (a, b)
assert a["n_chan"] == 32 and a["n_samples"] == 90000 and a["fs_hz"] == 30000 and a["format"] == "raw"
PY

# plan: the same memory plan
"$BS" plan "$S" --json >"$T/plan_folder.json" 2>"$T/err" && ok || bad "plan FOLDER: $(cat "$T/err")"
"$BS" plan "${RAW[@]}" --json >"$T/plan_raw.json" 2>"$T/err" && ok || bad "plan recording.bin: $(cat "$T/err")"
cmp -s "$T/plan_folder.json" "$T/plan_raw.json" && ok || bad "plan FOLDER --json differs from plan recording.bin --json"

# sort: byte-identical outputs
"$BS" sort "$S" -o "$T/outF" --threads 2 --no-qc -q 2>"$T/err" && ok || bad "sort FOLDER: $(cat "$T/err")"
"$BS" sort "${RAW[@]}" -o "$T/outR" --threads 2 --no-qc -q 2>"$T/err" && ok || bad "sort recording.bin: $(cat "$T/err")"
n=0
for f in "$T/outR"/*.npy "$T/outR"/*.tsv; do
    n=$((n + 1))
    cmp -s "$f" "$T/outF/${f##*/}" || bad "sort FOLDER: ${f##*/} differs from sort recording.bin"
done
[ "$n" -ge 20 ] && [ -s "$T/outF/spike_times.npy" ] && ok || bad "sort FOLDER: only $n .npy/.tsv files compared"
$PY -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['recording'].endswith('/sim') and j['probe'] is None, j" \
    "$T/outF/source.json" && ok || bad "source.json of a folder sort names the folder"

# command-line options override recording.json and probe.json
"$BS" info "$S" --fs 20000 --uv-per-bit 0.5 --json >"$T/over.json" 2>"$T/err" && ok || bad "info FOLDER --fs: $(cat "$T/err")"
$PY -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['fs_hz']==20000 and j['duration_s']==4.5 and j['uv_per_bit_min']==0.5, j" \
    "$T/over.json" && ok || bad "--fs / --uv-per-bit override recording.json"
"$BS" info "$S" --probe "$DATA/probes/ks_probe.json" --json >"$T/ks.json" 2>"$T/err" && ok || bad "info FOLDER --probe: $(cat "$T/err")"
$PY -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['n_chan']==6 and j['n_cols']==32 and j['n_samples']==90000, j" \
    "$T/ks.json" && ok || bad "--probe overrides probe.json (n_chan from recording.json stays)"
# probe.prb when there is no probe.json
P="$T/prb"; mkdir -p "$P"; ln -s "$S/recording.bin" "$P/recording.bin"; cp "$S/recording.json" "$P/"
$PY - "$S/probe.json" "$P/probe.prb" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["probes"][0]
ch = p["device_channel_indices"]
geo = {c: tuple(xy) for c, xy in zip(ch, p["contact_positions"])}
open(sys.argv[2], "w").write("channel_groups = {0: {'channels': %r, 'geometry': %r}}\n" % (ch, geo))
PY
"$BS" info "$P" --json >"$T/prb.json" 2>"$T/err" && ok || bad "info FOLDER with probe.prb: $(cat "$T/err")"
$PY -c "import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); assert a['channels']==b['channels'], 'channels'" \
    "$T/prb.json" "$T/folder.json" && ok || bad "probe.prb gives probe.json's channels"

# malformed folders: exit 2 naming the file and the field, for info, plan and sort alike
mk() { # mk NAME: a copy of the folder (recording.bin linked) in $T/NAME
    rm -rf "$T/$1"; mkdir -p "$T/$1"
    ln -s "$S/recording.bin" "$T/$1/recording.bin"; cp "$S/recording.json" "$S/probe.json" "$T/$1/"
}
edit() { # edit NAME PYTHON: rewrite recording.json (j is the dict)
    $PY - "$T/$1/recording.json" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(j, open(sys.argv[1], "w"))
PY
}
mk nofs; edit nofs 'del j["fs_hz"]'
for cmd in info plan; do
    expect_fixed 2 "recording.json: field 'fs_hz': missing" -- "$BS" $cmd "$T/nofs"
done
expect_fixed 2 "recording.json: field 'fs_hz': missing" -- "$BS" sort "$T/nofs" -o "$T/out_nofs" -q
mk fsstr; edit fsstr 'j["fs_hz"] = "30000"'
expect_fixed 2 "field 'fs_hz': expected a sampling rate > 0 Hz, got the string '30000'" -- "$BS" info "$T/fsstr"
mk ncfrac; edit ncfrac 'j["n_chan"] = 32.5'
expect_fixed 2 "field 'n_chan': expected a whole number of columns >= 1, got 32.5" -- "$BS" info "$T/ncfrac"
mk dtnum; edit dtnum 'j["dtype"] = 16'
expect_fixed 2 "field 'dtype': expected int16, uint16, int32, float32 or float16, got 16" -- "$BS" info "$T/dtnum"
mk uvneg; edit uvneg 'j["uv_per_bit"] = -1'
expect_fixed 2 "field 'uv_per_bit': expected a number > 0" -- "$BS" plan "$T/uvneg"
mk nc16; edit nc16 'j["n_chan"] = 16'
expect_fixed 2 "recording.json: field 'n_chan': expected at least 32 columns per sample" -- \
    "$BS" info "$T/nc16"
expect_fixed 2 "field 'n_chan': expected at least 32 columns" -- \
    "$BS" sort "$T/nc16" -o "$T/out_nc16" -q
mk trunc; head -c 60 "$S/recording.json" >"$T/trunc/recording.json"
expect_fixed 2 "recording.json: expected a JSON object (with fs_hz): the file is not valid JSON" -- \
    "$BS" info "$T/trunc"
mk short; rm "$T/short/recording.bin"; head -c $((89000 * 64)) "$S/recording.bin" >"$T/short/recording.bin"
expect_fixed 2 "holds 89000 samples per channel, but $T/short/recording.json says n_samples 90000" -- \
    "$BS" info "$T/short"
mk cut; rm "$T/cut/recording.bin"; head -c $((89000 * 64 + 10)) "$S/recording.bin" >"$T/cut/recording.bin"
expect_fixed 2 "is not a multiple of the sample size 32 columns x 2 bytes" -- "$BS" info "$T/cut"
mk nojson; rm "$T/nojson/recording.json"
expect_fixed 2 "recording.json: missing: a raw recording.bin needs recording.json (fs_hz)" -- \
    "$BS" info "$T/nojson"
mk noprobe; rm "$T/noprobe/probe.json"
expect_fixed 2 "needs probe.json or probe.prb beside it (or --probe P)" -- "$BS" plan "$T/noprobe"
# a folder holding neither recording.bin nor an .ap.bin is still refused as before
mkdir -p "$T/empty"
expect_fixed 2 "holds no *.ap.bin file" -- "$BS" info "$T/empty"

finish
