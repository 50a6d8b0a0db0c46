#!/bin/bash
# bench/artifacts.sh - artifact removal on simulated recordings (docs/ALGORITHM.md §3.7): for each seed,
# the same recording without artifacts, with `--artifacts RATE` sorted with the removal (the default), and
# sorted with --no-artifact-removal. Prints one markdown row per sort: templates, artifact periods,
# well-detected units (accuracy >= 0.8), false-positive units, units made of artifacts (not matched to a
# ground-truth unit, half or more of their spikes within 2 ms of a simulated event), mean accuracy, wall
# time and peak RSS.
#   BOUNDSORT=build/boundsort bash bench/artifacts.sh [SEEDS] [DURATION_S] [RATE] [UNITS] [DRIFT]
# defaults: "1 2 3" 30 2 40 rigid, NP1 (384 channels), 2 threads, --no-qc. Work folder: $BENCH_TMP or
# /tmp/bs-bench-artifacts. Needs numpy (/usr/bin/python3 on Debian with python3-numpy).
set -eu
BS=${BOUNDSORT:-build/boundsort}
BS=$(cd "$(dirname "$BS")" && pwd)/$(basename "$BS")
SEEDS=${1:-1 2 3}; DUR=${2:-30}; RATE=${3:-2}; UNITS=${4:-40}; DRIFT=${5:-rigid}
W=${BENCH_TMP:-/tmp/bs-bench-artifacts}
PY=${BS_PYTHON:-/usr/bin/python3}
mkdir -p "$W"; cd "$W"
echo "| seed | recording | templates | periods | well-detected | FP units | units of artifacts | mean acc | wall s | peak RSS MiB |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for seed in $SEEDS; do
  common=(--probe np1 --duration "$DUR" --units "$UNITS" --seed "$seed" --drift "$DRIFT" -q)
  [ -e "clean$seed/recording.bin" ] || "$BS" simulate -o "clean$seed" "${common[@]}" >/dev/null 2>&1
  [ -e "art$seed/recording.bin" ] || "$BS" simulate -o "art$seed" "${common[@]}" --artifacts "$RATE" >/dev/null 2>&1
  for run in "clean$seed:clean$seed:" "art$seed:art$seed:" "art$seed:artoff$seed:--no-artifact-removal"; do
    IFS=: read -r rec out opt <<<"$run"
    rm -rf "out_$out"
    /usr/bin/time -f "%e %M" -o "time_$out.txt" "$BS" sort "$rec" -o "out_$out" --threads 2 -q --no-qc $opt 2>/dev/null
    "$BS" compare "out_$out" "$rec" --json >"cmp_$out.json"
    "$PY" - "$rec" "out_$out" "cmp_$out.json" "time_$out.txt" "$seed" "${opt:-removal}" <<'PYEOF'
import csv, json, os, sys
import numpy as np
rec, out, cmpf, timef, seed, how = sys.argv[1:7]
c = json.load(open(cmpf))
K = np.load(f"{out}/templates.npy", mmap_mode="r").shape[0]
periods = sum(1 for _ in open(f"{out}/artifacts.tsv")) - 1 if os.path.exists(f"{out}/artifacts.tsv") else 0
art_fp = "-"
if os.path.exists(f"{rec}/gt_artifacts.tsv"):
    n = json.load(open(f"{rec}/recording.json"))["n_samples"]
    inside = np.zeros(n + 1, bool)
    for r in csv.DictReader(open(f"{rec}/gt_artifacts.tsv"), delimiter="\t"):
        inside[max(0, int(r["start_sample"]) - 60):int(r["end_sample"]) + 60] = True
    st, cl = np.load(f"{out}/spike_times.npy"), np.load(f"{out}/spike_clusters.npy")
    matched = {u["sorted_unit"] for u in c["units"] if u["sorted_unit"] is not None and u["accuracy"] > 0.2}
    art_fp = sum(1 for u in np.unique(cl) if int(u) not in matched and inside[st[cl == u]].mean() >= 0.5)
wall, kb = open(timef).read().split()
name = rec if how == "removal" else f"{rec} {how}"
print(f"| {seed} | {name} | {K} | {periods} | {c['n_well_detected']} | {c['n_false_positive']} | {art_fp} | "
      f"{c['mean_accuracy']:.3f} | {float(wall):.1f} | {int(kb) / 1024:.0f} |")
PYEOF
  done
done
