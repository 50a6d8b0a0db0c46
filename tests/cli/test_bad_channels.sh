#!/usr/bin/env bash
# test_bad_channels.sh - bad channels on simulations (preprocess/bad_channels.h, stage_channels.c):
#   - planted dead, noisy and out-of-brain channels (simulate --dead-channels / --noisy-channels /
#     --out-channels) on a Neuropixels 1.0 and a four-shank 2.0 probe: `info --detect-bad-channels` finds
#     every planted one with its label and nothing else;
#   - 10 clean simulations (different seeds, probes and drifts): no channel is called bad;
#   - sort --bad-channels interpolate | remove | keep: OUT/bad_channels.tsv lists them with the action,
#     run_summary.json counts them, the dropped ones are not in channel_map.npy, source.json names
#     them and a later `qc` reopens the recording without them, the folder validates, and --resume
#     gives the same spikes;
#   - more bad channels than --max-bad-channel-fraction: exit 2 naming the count and the threshold,
#     OUT/bad_channels.tsv written; bad values of the options: exit 1.
# Under the sanitizers (BS_SANITIZED, ~20x slower) the NP1.0 recording is 3 s, 2 clean simulations are
# checked, and only --bad-channels remove is sorted (with its resume and qc): the code paths, not the sweep.
. "$(dirname "$0")/lib.sh"
san=${BS_SANITIZED:-}
dur=6; n_clean=10; modes="interpolate remove keep"
[ -n "$san" ] && { dur=3; n_clean=2; modes=remove; }

# planted: label per channel from recording.json against info's JSON
planted_vs_found() { # DIR
  "$BS" info "$1" --detect-bad-channels --json >"$T/info.json" || { bad "$1: info --detect-bad-channels failed"; return; }
  "$PY" - "$1/recording.json" "$T/info.json" <<'PYEOF' && ok || bad "$1: planted and found bad channels differ"
import json, sys
gt = json.load(open(sys.argv[1]))["bad_channels"]
want = {c: l for l in ("dead", "noisy", "out") for c in gt[l]}
found = {ch["channel"]: ch["label"] for ch in json.load(open(sys.argv[2]))["bad_channels"]["channels"]}
print(f"planted {len(want)}, found {len(found)}")
assert found == want, (sorted(want.items()), sorted(found.items()))
PYEOF
}

"$BS" simulate -o "$T/np1" --probe np1 --duration $dur --units 30 --seed 11 --dead-channels 4 --noisy-channels 3 \
  --out-channels 10 -q >/dev/null || bad "simulate np1 with bad channels"
planted_vs_found "$T/np1"
"$BS" simulate -o "$T/np24" --probe np2-4shank --duration $dur --units 30 --seed 12 --dead-channels 3 \
  --noisy-channels 3 --out-channels 6 -q >/dev/null || bad "simulate np2-4shank with bad channels"
planted_vs_found "$T/np24"

# clean simulations: no false alarm
n_false=0
for i in $(seq 1 $n_clean); do
  case $((i % 3)) in 0) probe=np1 ;; 1) probe=np2 ;; 2) probe=np2-4shank ;; esac
  drift=none; [ $((i % 2)) = 0 ] && drift=rigid
  "$BS" simulate -o "$T/clean$i" --probe $probe --duration 3 --units 40 --seed $((100 + i)) --drift $drift -q \
    >/dev/null || bad "simulate clean $i"
  n=$("$BS" info "$T/clean$i" --detect-bad-channels --json | "$PY" -c \
    'import json,sys; b=json.load(sys.stdin)["bad_channels"]; print(b["dead"]+b["noisy"]+b["out"])')
  [ "$n" = 0 ] && ok || { bad "clean simulation $i ($probe, drift $drift): $n channels called bad"; n_false=$((n_false + n)); }
  rm -rf "$T/clean$i"
done
echo "clean simulations: $n_false false alarms in $n_clean"

# the sort's handling
for mode in $modes; do
  O=$T/out_$mode
  "$BS" sort "$T/np1" -o "$O" --threads 2 -q --no-report --bad-channels $mode 2>"$T/err.txt" \
    && ok || bad "sort --bad-channels $mode: $(cat "$T/err.txt")"
  "$BS" validate "$O" >"$T/val.txt" 2>&1 && ok || bad "validate after --bad-channels $mode: $(cat "$T/val.txt")"
  "$PY" - "$T/np1/recording.json" "$O" $mode <<'PYEOF' && ok || bad "--bad-channels $mode: outputs"
import csv, json, sys
import numpy as np
gt, out, mode = json.load(open(sys.argv[1]))["bad_channels"], sys.argv[2], sys.argv[3]
rows = list(csv.DictReader(open(f"{out}/bad_channels.tsv"), delimiter="\t"))
want = {c: l for l in ("dead", "noisy", "out") for c in gt[l]}
assert {int(r["channel"]): r["label"] for r in rows} == want, rows
act = {"interpolate": {"dead": "interpolated", "noisy": "interpolated", "out": "removed"},
       "remove": {"dead": "removed", "noisy": "removed", "out": "removed"},
       "keep": {"dead": "kept", "noisy": "kept", "out": "kept"}}[mode]
assert all(r["action"] == act[r["label"]] for r in rows), rows
dropped = sorted(int(r["column"]) for r in rows if r["action"] == "removed")
cmap = np.load(f"{out}/channel_map.npy")
assert len(cmap) == 384 - len(dropped) and not set(dropped) & set(cmap.tolist()), (len(cmap), dropped)
assert np.load(f"{out}/channel_positions.npy").shape == (len(cmap), 2)
src = json.load(open(f"{out}/source.json"))
assert sorted(src.get("dropped_columns", [])) == dropped and src["n_chan"] == len(cmap), src
s = json.load(open(f"{out}/run_summary.json"))["bad_channels"]
n = {l: sum(1 for v in want.values() if v == l) for l in ("dead", "noisy", "out")}
assert s["mode"] == mode and s["examined"] == 384 and all(s[l] == n[l] for l in n), s
assert s["removed"] == len(dropped) and s["interpolated"] == sum(1 for r in rows if r["action"] == "interpolated"), s
PYEOF
done
# a later qc reopens the recording without the dropped channels
"$BS" qc "$T/out_remove" -q >"$T/qc.txt" 2>&1 && ok || bad "qc after --bad-channels remove: $(cat "$T/qc.txt")"
# --resume: the channels stage is loaded, its handling redone, the same spikes
cp "$T/out_remove/spike_times.npy" "$T/st_before.npy"
"$BS" sort "$T/np1" -o "$T/out_remove" --threads 2 -q --no-report --bad-channels remove --resume 2>"$T/err.txt" \
  && cmp -s "$T/st_before.npy" "$T/out_remove/spike_times.npy" && ok || bad "resume after remove: $(cat "$T/err.txt")"
grep -q '"channels"' "$T/out_remove/run_summary.json" && ok || bad "no channels stage in run_summary.json"

# too many bad channels: refused after the table is written
expect 2 "17 of 384 channels are bad (4 dead, 3 noisy, 10 out of the brain), more than the --max-bad-channel-fraction of 0.01" \
  -- "$BS" sort "$T/np1" -o "$T/out_many" --threads 2 -q --max-bad-channel-fraction 0.01
[ "$(wc -l <"$T/out_many/bad_channels.tsv")" = 18 ] && ok || bad "the refused run's bad_channels.tsv"
expect 1 "--bad-channels: expected interpolate, remove or keep, got 'drop'" -- "$BS" sort "$T/np1" -o "$T/x" --bad-channels drop
expect 1 "--max-bad-channel-fraction: expected a fraction in \[0, 1\], got '2'" \
  -- "$BS" sort "$T/np1" -o "$T/x" --max-bad-channel-fraction 2
finish
