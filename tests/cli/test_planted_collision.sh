#!/usr/bin/env bash
# test_planted_collision.sh - a planted collision case (issue: no third unit made of two units' sum).
# `boundsort simulate --coupled-pairs 2 --coupled-lag-ms 0.6` (linear32, 60 s, 8 units, seed 1) makes GT
# unit 1 fire 0.6 ms after half of unit 0's spikes (and unit 3 after unit 2's), 30 um apart. Clustering
# learns templates of those sums; they are removed before matching (docs/ALGORITHM.md §7.6), so:
#   - the run log names a template removed as the sum of two others;
#   - no sorted unit is a collision unit: nobody's Hungarian match holding >= 50 % of its spikes at a
#     pair's coupled events (bench/coupled.py's score, the planted-collision bench);
#   - both units of the first pair (SNR 7.5 and 19.8) are well detected (accuracy >= 0.8).
# With the rule off (`cluster.sum_max_residual` 0) this recording gives a collision unit of 110 spikes, all
# at the first pair's events, and pair accuracies 0.70 / 0.73.
. "$(dirname "$0")/lib.sh"
$PY -c "import numpy" 2>/dev/null || { echo "numpy missing: skipped"; exit 77; }
C=$T/case
check "simulate" "$BS" simulate -o "$C" --probe linear32 --duration 60 --units 8 --coupled-pairs 2 \
    --coupled-lag-ms 0.6 --seed 1 -q
"$BS" sort "$C" --no-qc --no-report -o "$C/out" >"$T/sort.log" 2>&1 && ok || bad "sort failed: $(tail -5 "$T/sort.log")"
grep -q "the sum of .* leaves .*: removed" "$T/sort.log" && ok || bad "no template removed as a sum: $(grep -i removed "$T/sort.log")"
BOUNDSORT=$BS $PY - "$SRC/bench" "$C" >"$T/score.txt" 2>&1 <<'PY' && ok || bad "$(cat "$T/score.txt")"
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import coupled
case = Path(sys.argv[2])
r = coupled.score(case, case / "out")
print(r)
assert not r["collision_units"], f"collision units: {r['collision_units']}"
acc = r["pairs"][0]["accuracy"]
assert min(acc) >= 0.8, f"pair 0-1 accuracies {acc}"
PY
finish
