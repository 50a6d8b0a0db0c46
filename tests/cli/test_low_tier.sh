#!/usr/bin/env bash
# test_low_tier.sh - the low tier (docs/ALGORITHM.md §6.7, §7.7, §8.4) on a recording of SpikeInterface's
# generator (generate_ground_truth_recording as bench/cases.py "si" makes it: 64 channels in 2 columns,
# 60 s, 30 units, seed 4; SpikeInterface 0.105.3 from the cache's venv, lib.sh si_python). One of its
# units scores under detect.th_universal_whitened (9) on the universal templates: without the low tier
# (detect.th_low_whitened 0) no template holds it, with it (the defaults) the low tier's clustering makes
# one and the unit is well detected. Measured: 28 well detected (28 of the 29 with SNR >= 5), 0 false
# positive units without; 29 (29 of 29), 0 with, and the log counts 1 low-tier template. The test asks
# for a low-tier template, one more well-detected unit and no more false positives, and for the same
# bytes on 1 and 2 threads with the low tier. Under the sanitizers only the low-tier sort runs, on the
# first 20 s (tmax_s), for memory errors. Skipped (77) when the venv cannot be made (offline).
. "$(dirname "$0")/lib.sh"

si_python >"$T/venv.txt" || { cat "$T/venv.txt"; echo "skipped: no SpikeInterface venv"; exit 77; }
"$SIPY" - "$SRC/bench" "$T/rec" <<'PYEOF' || { echo "generation failed"; exit 1; }
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import cases
cases.gen_si(Path(sys.argv[2]), "low-tier", dict(gen="si", n_chan=64, columns=2, duration=60.0, units=30, seed=4))
PYEOF

if [ -n "${BS_SANITIZED:-}" ]; then
  echo '{"batch": {"tmax_s": 20}}' >"$T/short.json"
  "$BS" sort "$T/rec" -o "$T/short" --params "$T/short.json" --threads 2 --no-qc --no-report -q && ok ||
    bad "the low-tier sort failed"
  finish; exit
fi

echo '{"detect": {"th_low_whitened": 0}}' >"$T/off.json"
"$BS" sort "$T/rec" -o "$T/on" --threads 2 --no-qc --no-report 2>"$T/on.log" && ok || bad "sort with the low tier failed"
"$BS" sort "$T/rec" -o "$T/off" --params "$T/off.json" --threads 2 --no-qc --no-report -q && ok ||
  bad "sort without the low tier failed"
grep "from the low tier" "$T/on.log"
n_lo=$(sed -n 's/.*cluster: \([0-9]*\) of [0-9]* templates from the low tier.*/\1/p' "$T/on.log")
[ "${n_lo:-0}" -ge 1 ] && ok || bad "no template from the low tier (${n_lo:-none})"
"$BS" compare "$T/on" "$T/rec" --json >"$T/on.json" && "$BS" compare "$T/off" "$T/rec" --json >"$T/off.json" && ok ||
  bad "compare failed"
$PY - "$T/on.json" "$T/off.json" <<'PYEOF' && ok || bad "the low tier did not find the unit"
import json, sys
on, off = (json.loads(open(p).readline()) for p in sys.argv[1:3])
for name, d in (("with the low tier", on), ("without", off)):
    print(f"{name}: {d['n_well_detected']} well detected ({d['n_well_detected_snr']} of {d['n_gt_snr']} with SNR >= 5), "
          f"{d['n_false_positive']} false positive units, mean accuracy {d['mean_accuracy']:.3f}")
sys.exit(0 if on["n_well_detected"] >= off["n_well_detected"] + 1 and
         on["n_false_positive"] <= off["n_false_positive"] else 1)
PYEOF

"$BS" sort "$T/rec" -o "$T/on1" --threads 1 --no-qc --no-report -q && ok || bad "sort --threads 1 failed"
for f in spike_times.npy spike_clusters.npy amplitudes.npy templates.npy; do
  cmp -s "$T/on/$f" "$T/on1/$f" && ok || bad "$f differs between 1 and 2 threads with the low tier"
done
finish
