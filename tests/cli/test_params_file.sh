#!/usr/bin/env bash
# test_params_file.sh - parameters files (`sort --params FILE`, `boundsort params`, src/pipeline/params.h)
# and sorting a part of a recording (tmin / tmax):
#  - `params --defaults` (a file with a comment per key) reads back as the defaults: same resume key;
#    `params --defaults --json` is the SpikeInterface wrapper's copy (python/boundsort_si/params_table.json);
#  - a run's OUT/params.json given back repeats it byte for byte, and --resume takes its checkpoints;
#  - every Kilosort 4 name the table knows lands on its field and is recorded in OUT/params.json;
#  - the command line's options override the file, before or after --params;
#  - bad files (unknown key, with the nearest name; out of range; not whole; a field twice; a key that
#    describes the recording; malformed JSON; a group that is not an object) exit 1 with the reason, a
#    missing file exits 2, and none of them creates OUT;
#  - tmin / tmax: sorting [4 s, 12 s) gives the same spike files, byte for byte, as sorting a copy of
#    those bytes; params.py's offset points Phy at the part sorted; source.json records it, and qc
#    reopens it to the same metrics;
#  - parameters at either end of their range sort, or stop with a message (exit 1-3): never a crash.
# Under the sanitizers (a sort is ~20x slower): a 6-s recording, sorted over [1 s, 5 s) only (the other
# runs stop after drift; no second sort of params.json, resume or nblocks 0), and two range ends.
. "$(dirname "$0")/lib.sh"

dur=16 tmin=4 tmax=12 refonly=() n_ends=50
[ -n "${BS_SANITIZED:-}" ] && dur=6 tmin=1 tmax=5 refonly=(--drift-only) n_ends=2
"$BS" simulate -o "$T/sim" --probe linear32 --duration $dur --units 8 --seed 11 -q || { echo "simulate failed"; exit 1; }
REC=("$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000)
"$BS" sort "${REC[@]}" -o "$T/ref" -q --no-qc "${refonly[@]}" 2>/dev/null && ok || bad "reference sort failed"
key() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['resume_key'])" "$1/params.json"; }

# the defaults file, and params.json given back
"$BS" params --defaults >"$T/defaults.json" && ok || bad "params --defaults failed"
grep -q '^    // .*Kilosort: Th_universal$' "$T/defaults.json" && ok || bad "the defaults file has no Kilosort names"
[ "$(grep -c '^    // ' "$T/defaults.json")" = "$("$BS" params --defaults --json | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)))')" ] \
  && ok || bad "not one comment per parameter"
"$BS" params --defaults --json | cmp -s - "$SRC/python/boundsort_si/params_table.json" && ok \
  || bad "python/boundsort_si/params_table.json is not \`boundsort params --defaults --json\`: regenerate it"
expect 0 "" "$BS" params "$T/defaults.json"
grep -q "0 parameters changed" "$T/out.txt" && ok || bad "params FILE on the defaults: $(cat "$T/out.txt")"
"$BS" sort "${REC[@]}" -o "$T/def" -q --no-qc --drift-only --params "$T/defaults.json" 2>/dev/null
"$BS" sort "${REC[@]}" -o "$T/def0" -q --no-qc --drift-only 2>/dev/null
[ "$(key "$T/def")" = "$(key "$T/ref")" ] && [ "$(key "$T/def0")" = "$(key "$T/ref")" ] && ok \
  || bad "the defaults file does not give the defaults' resume key"
if [ -z "${BS_SANITIZED:-}" ]; then
  "$BS" sort "${REC[@]}" -o "$T/again" -q --no-qc --params "$T/ref/params.json" 2>/dev/null && ok || bad "sort --params params.json failed"
  for f in "$T"/ref/*.npy "$T"/ref/*.tsv "$T"/ref/params.py "$T"/ref/params.json; do
    cmp -s "$f" "$T/again/$(basename "$f")" || bad "params.json given back: $(basename "$f") differs"
  done
  "$BS" sort "${REC[@]}" -o "$T/ref" --no-qc --resume --params "$T/ref/params.json" 2>"$T/resume.log"
  [ "$(grep -c "resume: stage .* is complete" "$T/resume.log")" = 8 ] && ok || bad "--resume with params.json given back did not skip the 8 stages"
fi

# Kilosort 4's names, each to its field, recorded in params.json (a drift-only run writes it)
cat >"$T/ks.json" <<'EOF'
{"Th_universal": 8.5, "Th_learned": 7.5, "Th_single_ch": 5.5, "whitening_range": 16, "highpass_cutoff": 250,
 "nblocks": 1, "batch_size": 45000, "tmin": 1, "tmax": 15, "dmin": 20, "dminx": 30, "nt": 81, "nt0min": 25,
 "nskip": 4, "drift_smoothing": [0.25, 1, 2], "binning_depth": 4, "sig_interp": 15, "n_pcs": 5, "n_templates": 7,
 "template_sizes": 4, "min_template_size": 12, "nearest_chans": 9, "nearest_templates": 90,
 "max_channel_distance": 40, "max_peels": 60, "cluster_downsampling": 10, "max_cluster_subset": 20000,
 "cluster_neighbors": 12, "acg_threshold": 0.3, "ccg_threshold": 0.35, "duplicate_spike_ms": 0.5}
EOF
"$BS" sort "${REC[@]}" -o "$T/ks" -q --no-qc --drift-only --params "$T/ks.json" 2>/dev/null && ok || bad "sort with Kilosort names failed"
"$PY" - "$T/ks/params.json" <<'EOF' && ok || bad "Kilosort names not recorded as given"
import json, sys
p = json.load(open(sys.argv[1]))
want = {"detect.th_universal_whitened": 8.5, "match.threshold_whitened": 7.5, "detect.th_single_ch_whitened": 5.5,
        "preprocess.whiten_neighbors": 16, "preprocess.highpass_hz": 250, "drift.n_blocks": 1, "drift.no_drift": 0,
        "batch.batch_samples": 45000, "batch.tmin_s": 1, "batch.tmax_s": 15, "detect.dmin_um": 20,
        "detect.dminx_um": 30, "detect.nt_samples": 81, "detect.nt_before_samples": 25,
        "preprocess.whiten_stride_batches": 4, "detect.basis_stride_batches": 4,
        "drift.smooth_sigma_shift_bins": 0.25, "drift.smooth_sigma_time_bins": 1, "drift.smooth_sigma_blocks": 2,
        "drift.bin_um": 4, "drift.sig_interp_um": 15, "detect.n_pcs": 5, "detect.n_shapes": 7, "detect.n_sizes": 4,
        "detect.min_template_size_um": 12, "detect.n_chans": 9, "detect.n_neighbors": 90,
        "detect.max_channel_distance_um": 40, "match.max_iter": 60, "cluster.downsampling": 10,
        "cluster.max_subset": 20000, "cluster.n_neighbors": 12, "merge.acg_threshold": 0.3,
        "merge.ccg_threshold": 0.35, "finish.duplicate_ms": 0.5}
bad = [f"{k}: {p[k.split('.')[0]][k.split('.')[1]]} != {v}" for k, v in want.items()
       if p[k.split('.')[0]][k.split('.')[1]] != v]
sys.exit(print("\n".join(bad)) or 1 if bad else 0)
EOF
if [ -z "${BS_SANITIZED:-}" ]; then
  echo '{"nblocks": 0}' >"$T/nb0.json"
  "$BS" sort "${REC[@]}" -o "$T/nb0" -q --no-qc --params "$T/nb0.json" 2>/dev/null
  "$PY" -c "import json,sys; sys.exit(json.load(open(sys.argv[1]))['drift']['no_drift'] != 1)" "$T/nb0/params.json" \
    && ok || bad "nblocks 0 did not turn drift correction off"
fi

# the options override the file, before or after it
echo '{"Th_learned": 9, "batch_size": 45000}' >"$T/th.json"
for order in before after; do
  if [ $order = before ]; then a=(--threshold 7 --batch-seconds 1 --params "$T/th.json"); else a=(--params "$T/th.json" --threshold 7 --batch-seconds 1); fi
  "$BS" sort "${REC[@]}" -o "$T/ov_$order" -q --no-qc --drift-only "${a[@]}" 2>/dev/null
  "$PY" -c "import json,sys; p=json.load(open(sys.argv[1])); sys.exit(not (p['match']['threshold_whitened'] == 7 and p['batch']['batch_samples'] == 30000))" \
    "$T/ov_$order/params.json" && ok || bad "--threshold / --batch-seconds $order --params did not override the file"
done

# bad files: a clear message, exit 1 (2 when unreadable), no OUT
bad_file() { # bad_file CODE PHRASE JSON
  printf '%s\n' "$3" >"$T/bad.json"
  expect_fixed "$1" "$2" "$BS" sort "${REC[@]}" -o "$T/bad_out" --params "$T/bad.json"
  [ ! -e "$T/bad_out" ] && ok || bad "a refused parameters file ($3) created OUT"
  rm -rf "$T/bad_out"
}
bad_file 1 "unknown parameter 'Th_universl'; the nearest known one is 'Th_universal'" '{"Th_universl": 9}'
bad_file 1 "unknown parameter 'detect.nchans'; the nearest known one is 'detect.n_chans'" '{"detect": {"nchans": 9}}'
bad_file 1 "the nearest known one is 'cluster.n_neighbors'" '{"cluster.n_neighbour": 9}'
bad_file 1 "'whitening_range' sets preprocess.whiten_neighbors = -3: expected an integer in [1, 4096]" '{"whitening_range": -3}'
bad_file 1 "expected 0 (automatic) or an integer in [1000, 36000000]" '{"batch_size": 60000.5}'
bad_file 1 "detect.nt_samples = 60: expected an odd number" '{"nt": 60}'
bad_file 1 "match.threshold_whitened is given twice ('Th_learned' and 'match.threshold_whitened')" \
  '{"Th_learned": 8, "match": {"threshold_whitened": 7}}'
bad_file 1 "'fs' describes the recording" '{"fs": 30000}'
bad_file 1 "'Th_single_ch': expected a number" '{"Th_single_ch": "6"}'
bad_file 1 "'drift_smoothing': expected 3 numbers" '{"drift_smoothing": [1, 2]}'
bad_file 1 "'detect' is a group of parameters" '{"detect": 5}'
bad_file 1 "not valid JSON" '{"Th_learned": 8,'
bad_file 1 "expected tmax_s > tmin_s" '{"tmin": 5, "tmax": 3}'
expect_fixed 2 "cannot open" "$BS" sort "${REC[@]}" -o "$T/bad_out" --params "$T/none.json"
[ ! -e "$T/bad_out" ] && ok || bad "a missing parameters file created OUT"
echo '{"Th_universl": 9}' >"$T/bad.json"
expect_fixed 1 "unknown parameter" "$BS" plan "${REC[@]}" --params "$T/bad.json" # plan reads it too
expect_fixed 1 "expected a number in [0.5, 1000]" "$BS" sort "${REC[@]}" -o "$T/bad_out" --threshold 0.01

# tmin / tmax: [4 s, 12 s) sorted in place against a copy of those bytes (32 int16 channels: 1,920,000 bytes/s)
echo "{\"tmin\": $tmin, \"tmax\": $tmax}" >"$T/win.json"
"$BS" sort "${REC[@]}" -o "$T/win" -q --params "$T/win.json" 2>/dev/null && ok || bad "sort of [$tmin s, $tmax s) failed"
dd if="$T/sim/recording.bin" of="$T/cut.bin" bs=1920000 skip=$tmin count=$((tmax - tmin)) status=none
"$BS" sort "$T/cut.bin" --probe "$T/sim/probe.json" --fs 30000 -o "$T/cut" -q 2>/dev/null && ok || bad "sort of the cut copy failed"
n=0
for f in "$T"/cut/*.npy "$T"/cut/*.tsv; do
  n=$((n + 1)); cmp -s "$f" "$T/win/$(basename "$f")" || bad "tmin/tmax: $(basename "$f") differs from the cut copy's"
done
[ "$n" -ge 10 ] && ok || bad "only $n files compared"
grep -qx "offset = $((tmin * 1920000))" "$T/win/params.py" && ok || bad "params.py offset: $(grep offset "$T/win/params.py")"
"$PY" -c "import json,sys; s=json.load(open(sys.argv[1])); a,b=int(sys.argv[2])*30000,int(sys.argv[3])*30000; sys.exit(not (s['window'] == [a, b] and s['n_samples'] == b - a))" \
  "$T/win/source.json" $tmin $tmax && ok || bad "source.json does not record the window"
cp "$T/win/cluster_KSLabel.tsv" "$T/kslabel.tsv"; cp "$T/win/qc/qc_metrics.tsv" "$T/qc_before.tsv"
"$BS" qc "$T/win" -q && ok || bad "qc of the windowed sort failed"
cmp -s "$T/qc_before.tsv" "$T/win/qc/qc_metrics.tsv" && ok || bad "qc reopened another part of the recording"
"$BS" validate "$T/win" >/dev/null && ok || bad "validate of the windowed sort failed"
echo '{"tmin": 20}' >"$T/late.json" # past the end
expect_fixed 2 "is not before the end of the part to sort" "$BS" sort "${REC[@]}" -o "$T/late" --params "$T/late.json"

# the ends of the ranges, on a 4-s recording: sorts or a message, never a crash (exit >= 4 or a signal).
# The fields that size buffers and loops (under the sanitizers, three range ends).
"$BS" simulate -o "$T/tiny" --probe linear32 --duration 4 --units 4 --seed 3 -q
"$BS" params --defaults --json >"$T/fields.json"
"$PY" - "$T/fields.json" "${BS_SANITIZED:+sanitized}" >"$T/cases.txt" <<'EOF'
import json, sys
fields = json.load(open(sys.argv[1]))
# the fields that size buffers or loops (all of them are swept by hand: no crash; that takes minutes)
if len(sys.argv) > 2 and sys.argv[2]:
    ends = {("detect.n_chans", "max"), ("detect.n_pcs", "max")}
else:
    ends = {(k, e) for e in ("min", "max") for k in (
        "detect.nt_samples", "detect.n_pcs", "detect.n_chans", "cluster.n_neighbors", "match.n_pc_chan",
        "match.window_samples", "detect.nt_before_samples", "detect.n_shapes", "detect.n_sizes",
        "detect.n_neighbors", "preprocess.whiten_neighbors", "preprocess.highpass_order",
        "merge.max_lag_samples", "shadow.half_width_samples", "drift.n_blocks", "drift.n_amp_bins",
        "drift.rigid_max_shift_bins", "drift.block_max_shift_bins", "cluster.n_init", "cluster.n_init_candidates",
        "detect.max_snippets", "cluster.max_subset", "detect.dmin_um", "detect.dminx_um", "drift.bin_um",
        "match.max_iter")}
for f in fields:
    for end in ("min", "max"):
        if (f["key"], end) not in ends:
            continue
        v = f[end]
        if f["key"] == "detect.nt_samples":
            v = v if v % 2 else v - 1
        g, n = f["key"].split(".")
        obj = {g: {n: v}}
        if f["key"] == "detect.nt_samples":
            obj["detect"]["nt_before_samples"] = min(20, int(v) - 2)
        if f["key"] == "detect.nt_before_samples":
            obj["detect"]["nt_samples"] = 301 if v > 59 else 61
        if f["key"] == "merge.max_lag_samples":
            obj["merge"][n] = min(v, 60)
        print(json.dumps(obj))
EOF
i=0
while read -r line; do
  i=$((i + 1)); echo "$line" >"$T/edge.json"
  "$BS" sort "$T/tiny/recording.bin" --probe "$T/tiny/probe.json" --fs 30000 -o "$T/edge" -q --no-qc \
    --params "$T/edge.json" >/dev/null 2>"$T/edge.log"; rc=$?
  case $rc in
    0) ok ;;
    1|2|3) grep -q "^boundsort: " "$T/edge.log" && ok || bad "$line: exit $rc without a message" ;;
    *) bad "$line: exit $rc: $(tail -3 "$T/edge.log")" ;;
  esac
  rm -rf "$T/edge"
done <"$T/cases.txt"
[ "$i" -ge "$n_ends" ] && ok || bad "only $i range ends tried"
finish
