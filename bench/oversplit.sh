#!/bin/bash
# bench/oversplit.sh - a recording whose own clustering yields over 10,000 templates, sorted end to end within
# a memory budget (issue 16). A dense Neuropixels 1.0 simulation (384 channels, UNITS units, rigid drift) is
# sorted with bench/params/oversplit.json: every split kept (cluster.modularity_split 10, the bimodality and
# refractory tests off), a sparse graph (3 neighbours, every spike a landmark) under a heavy modularity
# penalty (lam 100), every cluster a template (min_template_spikes 1, no norm floor), sums, copies and merges
# off. That is how Kilosort 4 behaves on a motion-artifact session (a template per few detections); the
# stages, their plans and the budget are the default ones. Prints the template count, the wall time, the
# peak RSS and, per stage, the wall time, the planned, tracked and RSS peaks and the disk planned and written
# (run_summary.json).
#   BOUNDSORT=build/boundsort bash bench/oversplit.sh [UNITS] [DURATION_S] [MEM] [SEED]
# defaults: 400 20 4G 8. Work folder: $BENCH_TMP or /tmp/bs-bench-oversplit.
set -eu
BS=${BOUNDSORT:-build/boundsort}
BS=$(cd "$(dirname "$BS")" && pwd)/$(basename "$BS")
PARAMS=$(cd "$(dirname "$0")" && pwd)/params/oversplit.json
UNITS=${1:-400}; DUR=${2:-20}; MEM=${3:-4G}; SEED=${4:-8}
W=${BENCH_TMP:-/tmp/bs-bench-oversplit}
mkdir -p "$W"; cd "$W"
rec=np1_${UNITS}u_${DUR}s
[ -e "$rec/recording.bin" ] || "$BS" simulate -o "$rec" --probe np1 --duration "$DUR" --units "$UNITS" --seed "$SEED" \
  --drift rigid --threads 2 -q
rm -rf "out_$rec"
/usr/bin/time -f "%e %M" -o "time_$rec.txt" "$BS" sort "$rec" -o "out_$rec" --threads 2 --mem "$MEM" --no-qc --no-report \
  --params "$PARAMS" 2>"log_$rec.txt"
grep "bug in the plan" "log_$rec.txt" || true
python3 - "out_$rec/run_summary.json" "time_$rec.txt" "$DUR" "$MEM" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
wall, maxrss_kib = open(sys.argv[2]).read().split()
M = 2 ** 20
print(f"templates {d['plan']['templates']}, matched spikes {d['plan']['spikes']}, wall {float(wall):.1f} s "
      f"({float(wall) / float(sys.argv[3]):.1f}x the data), peak RSS {d['peak_rss_bytes'] / M:.0f} MiB, budget {sys.argv[4]}")
print("| stage | wall s | planned MiB | tracked MiB | RSS MiB | disk planned MB | disk written MB | strategy |")
print("|---|---|---|---|---|---|---|---|")
for s in d["stages"]:
    print(f"| {s['name']} | {s['wall_s']:.1f} | {s['planned_peak_bytes'] / M:.1f} | {s['tracked_peak_bytes'] / M:.1f} | "
          f"{s['rss_peak_bytes'] / M:.1f} | {s['disk_planned_bytes'] / 1e6:.1f} | {s['disk_written_bytes'] / 1e6:.1f} | "
          f"{s['strategy']} |")
PYEOF
