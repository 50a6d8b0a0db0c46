#!/usr/bin/env bash
# test_bad_start.sh - recordings with flat or saturated stretches (a probe settling, a headstage
# switched on; issue 24 item 2). The whitening covariance and the spike shapes are estimated from
# batches spread over the recording, passing over flat or saturated ones (docs/ALGORITHM.md §3.6):
#   - a 10-s recording whose first 2 s are zeros sorts (it used to exit 2: "only 1 isolated spikes");
#   - a 10-s recording flat from 2 s to 8 s, and one saturated there (clipped at the int16 rails),
#     sort and say that 3 batches were passed over;
#   - (normal build) on a 40-s recording, a flat or a saturated first 2 s leaves the well-detected
#     units within one of the clean recording's and the mean accuracy within 0.05.
# An all-zero recording (no usable batch) is test_sort_e2e's.
. "$(dirname "$0")/lib.sh"

# plant SRC DST KIND FROM_S TO_S: a copy of a simulated folder with samples [FROM_S, TO_S) s replaced:
# flat (zeros) or sat (a 10-Hz square wave between the int16 rails)
plant() {
  mkdir -p "$2" && cp "$1/probe.json" "$1/recording.json" "$1"/gt_* "$2/" || return 1
  $PY - "$1" "$2" "$3" "$4" "$5" <<'PY'
import json, sys
import numpy as np
src, dst, kind, t0, t1 = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
r = json.load(open(f"{src}/recording.json"))
x = np.fromfile(f"{src}/recording.bin", dtype="<i2").reshape(-1, r["n_chan"])
a, b = int(t0 * r["fs_hz"]), int(t1 * r["fs_hz"])
if kind == "flat":
    x[a:b] = 0
else:
    t = np.arange(b - a)
    x[a:b] = np.where((t // 1500) % 2 == 0, 32767, -32768)[:, None]
x.tofile(f"{dst}/recording.bin")
PY
}
sort_q() { "$BS" sort "$1/recording.bin" --probe "$1/probe.json" --fs 30000 -o "$2" --no-qc 2>"$2.log" >/dev/null; }
score() { "$BS" compare "$1" "$2" --json | $PY -c "
import json, sys; d = json.loads(sys.stdin.readline()); print(d['n_well_detected'], round(d['mean_accuracy'], 4))"; }

"$BS" simulate -o "$T/c10" --probe linear32 --duration 10 --units 10 --seed 1 -q || { echo "simulate failed"; exit 1; }
# under the sanitizers (~20x slower) only the saturated middle: it runs every path of the sampler (passing
# over batches, then the fill)
if [ -z "${BS_SANITIZED:-}" ]; then
  plant "$T/c10" "$T/flat_start" flat 0 2 || { echo "plant failed"; exit 1; }
  sort_q "$T/flat_start" "$T/o_flat_start" && ok || bad "flat first 2 s of 10: $(tail -2 "$T/o_flat_start.log")"
  "$BS" validate "$T/o_flat_start" >/dev/null 2>&1 && ok || bad "flat first 2 s: the Phy folder does not validate"
fi

kinds=(flat sat); [ -n "${BS_SANITIZED:-}" ] && kinds=(sat)
for kind in "${kinds[@]}"; do
  plant "$T/c10" "$T/${kind}_mid" $kind 2 8 || { echo "plant failed"; exit 1; }
  sort_q "$T/${kind}_mid" "$T/o_${kind}_mid" && ok || bad "$kind 2-8 s of 10: $(tail -2 "$T/o_${kind}_mid.log")"
  grep -q "whitening: 3 flat or saturated batches of 2 s passed over; estimated from 1 others" "$T/o_${kind}_mid.log" \
    && ok || bad "$kind 2-8 s: no note of the batches passed over: $(cat "$T/o_${kind}_mid.log")"
done

if [ -z "${BS_SANITIZED:-}" ]; then
  seed=3; dur=40
  "$BS" simulate -o "$T/c" --probe linear32 --duration $dur --units 12 --seed $seed -q >/dev/null || exit 1
  sort_q "$T/c" "$T/o_c" && ok || bad "clean sort failed: $(tail -2 "$T/o_c.log")"
  clean=$(score "$T/o_c" "$T/c")
  echo "clean $dur s: well detected, mean accuracy = $clean"
  for kind in flat sat; do
    plant "$T/c" "$T/$kind" $kind 0 2 || exit 1
    sort_q "$T/$kind" "$T/o_$kind" && ok || bad "$kind first 2 s: sort failed: $(tail -2 "$T/o_$kind.log")"
    got=$(score "$T/o_$kind" "$T/$kind")
    echo "$kind first 2 s: well detected, mean accuracy = $got"
    $PY -c "
import sys; c, g = [float(v) for v in sys.argv[1].split()], [float(v) for v in sys.argv[2].split()]
sys.exit(0 if g[0] >= c[0] - 1 and g[1] >= c[1] - 0.05 else 1)" "$clean" "$got" \
      && ok || bad "$kind first 2 s: $got against the clean recording's $clean"
  done
fi
finish
