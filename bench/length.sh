#!/usr/bin/env bash
# bench/length.sh - memory and time against the recording's length (issue 16): 384-channel NP1 simulations
# of each length in minutes (100 units, rigid drift, seed 1) sorted within one budget; per length, the wall
# time as a ratio to the data, the peak RSS (the larger of run_summary.json's, the stages' high-water mark, and
# GNU time's, which sees only what follows the last stage's reset of that mark: the finish stage, qc and the
# report), each stage's planned / tracked / RSS peak and its
# disk planned / written (run_summary.json), and the accuracy against the ground truth.
#   bash bench/length.sh [MINUTES (default "2 10 30")] [MEM (default 2G)] [THREADS (default 2)]
# STREAM=1: each sort gets a disk budget (--disk) halfway between what it writes with and without the
# preprocessed recording's file, so that it streams that recording (plan.h, pre_stream), as a sort whose
# disk is short does by itself.
# Work folder: $BENCH_TMP or /tmp/bs-bench-length (a 30-minute recording is 41.5 GB; its float16 file would
# be as large again). Needs numpy (/usr/bin/python3 on Debian with python3-numpy).
set -eu
BS=${BOUNDSORT:-build/boundsort}
BS=$(cd "$(dirname "$BS")" && pwd)/$(basename "$BS")
MINUTES=${1:-2 10 30}; MEM=${2:-2G}; THREADS=${3:-2}
W=${BENCH_TMP:-/tmp/bs-bench-length}
PY=${BS_PYTHON:-/usr/bin/python3}
mkdir -p "$W"; cd "$W"
for m in $MINUTES; do
  rec="np1_${m}min"
  [ -e "$rec/recording.bin" ] || "$BS" simulate -o "$rec" --probe np1 --duration $((m * 60)) --units 100 --seed 1 \
    --drift rigid -q >/dev/null 2>&1
  rm -rf "out_$rec"
  disk=()
  if [ "${STREAM:-0}" = 1 ]; then
    b=$("$BS" plan "$rec" --mem "$MEM" --threads "$THREADS" --json |
      "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d["disk_bytes"] - d["preprocessed_file_bytes"] // 2)')
    disk=(--disk "$b")
  fi
  /usr/bin/time -f "%e %M" -o "time_$rec.txt" "$BS" sort "$rec" -o "out_$rec" --mem "$MEM" --threads "$THREADS" \
    "${disk[@]}" -q 2>"log_$rec.txt"
  "$BS" compare "out_$rec" "$rec" --json >"cmp_$rec.json"
  du -sb "out_$rec" | cut -f1 >"du_$rec.txt"
done
echo "| minutes | wall / data | peak RSS MiB | budget | well-detected | false positive | mean acc | disk planned MB | du MB |"
echo "|---|---|---|---|---|---|---|---|---|"
for m in $MINUTES; do
  "$PY" - "np1_${m}min" "$m" "$MEM" <<'PYEOF'
import json, sys
rec, m, mem = sys.argv[1], float(sys.argv[2]), sys.argv[3]
wall, kb = open(f"time_{rec}.txt").read().split()
peak = max(int(kb) * 1024, json.load(open(f"out_{rec}/run_summary.json"))["peak_rss_bytes"])
c = json.load(open(f"cmp_{rec}.json"))
s = json.load(open(f"out_{rec}/run_summary.json"))
disk = sum(x.get("disk_planned_bytes", 0) for x in s["stages"])
du = int(open(f"du_{rec}.txt").read())
print(f"| {m:g} | {float(wall) / (60 * m):.2f} | {peak / 2**20:.0f} | {mem} | {c['n_well_detected']} | "
      f"{c['n_false_positive']} | {c['mean_accuracy']:.3f} | {disk / 1e6:.0f} | {du / 1e6:.0f} |")
PYEOF
done
echo
echo "| minutes | stage | wall s | planned MiB | tracked MiB | RSS MiB | disk planned MB | disk written MB |"
echo "|---|---|---|---|---|---|---|---|"
for m in $MINUTES; do
  "$PY" - "np1_${m}min" "$m" <<'PYEOF'
import json, sys
rec, m = sys.argv[1], sys.argv[2]
for x in json.load(open(f"out_{rec}/run_summary.json"))["stages"]:
    g = lambda k: x.get(k, 0) or 0
    print(f"| {m} | {x['name']} | {g('wall_s'):.1f} | {g('planned_peak_bytes') / 2**20:.0f} | "
          f"{g('tracked_peak_bytes') / 2**20:.0f} | {g('rss_peak_bytes') / 2**20:.0f} | "
          f"{g('disk_planned_bytes') / 1e6:.1f} | {g('disk_written_bytes') / 1e6:.1f} |")
PYEOF
done
