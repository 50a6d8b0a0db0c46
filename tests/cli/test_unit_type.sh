#!/usr/bin/env bash
# test_unit_type.sh - waveform-shape metrics and unit types (noise / non-somatic / mua / good) against
# SpikeInterface 0.105.3, and on planted noise units.
#  A. bench/qc_crosscheck.py on a 384-channel simulation: every quality metric and every waveform-shape
#     metric (SpikeInterface's template_metrics, upsampled x10, exp_decay on the sparse channels) within
#     the script's tolerances, and cluster_unit_type.tsv equal to bombcell_label_units on
#     SpikeInterface's own metrics for every unit (the script's exit status).
#  B. the rules alone: bombcell_label_units(external_metrics=qc_metrics.tsv) with the default
#     thresholds and with a thresholds file (which makes units non-somatic, and moves the mua bounds)
#     that `boundsort qc --unit-type-thresholds` reads too: the same label for every unit; the reason
#     column names a failing rule of the label's section.
#  C. a simulation with 4 planted noise units (ringing waveform, flat footprint): every sorted unit
#     matched to one is noise; >= 90 % of the well-detected neurons are good or mua and none is noise.
#  D. bad thresholds files (unknown metric, unknown section, not JSON, missing) exit 2 with the reason,
#     in qc and up front in sort.
. "$(dirname "$0")/lib.sh"
$PY -c "import numpy" 2>/dev/null || { echo "skipped: python3 with numpy is needed (scripts/deps.sh installs it)"; exit 77; }
# Under the sanitizers (BS_SANITIZED=1, ~20x slower) the comparison of every metric with SpikeInterface (A)
# is left out (it checks numbers, not memory; SpikeInterface's side is Python), C runs on a short recording
# without its accuracy floors, and B uses C's sorting.
dur_a=20; dur_c=30
[ -n "${BS_SANITIZED:-}" ] && dur_c=8

# ---------------------------------------------------------------- D. bad thresholds files (no venv needed)
"$BS" simulate -o "$T/tiny" --probe linear32 --duration 4 --units 4 --seed 2 -q || { echo "simulate failed"; exit 1; }
TINY=("$T/tiny/recording.bin" --probe "$T/tiny/probe.json" --fs 30000 --uv-per-bit 0.195)
echo '{"noise": {"no_such_metric": {"less": 1}}}' >"$T/bad_metric.json"
echo '{"noize": {}}' >"$T/bad_section.json"
echo '{"noise": {"snr": {"lesser": 1}}}' >"$T/bad_key.json"
echo '{"noise": ' >"$T/bad_json.json"
"$BS" sort "${TINY[@]}" -o "$T/tiny_out" -q --no-report && ok || bad "tiny sort failed"
expect_fixed 2 "unknown metric 'no_such_metric'" "$BS" qc "$T/tiny_out" --unit-type-thresholds "$T/bad_metric.json" -q
expect_fixed 2 "unknown section 'noize'" "$BS" qc "$T/tiny_out" --unit-type-thresholds "$T/bad_section.json" -q
expect_fixed 2 "unknown key 'lesser'" "$BS" qc "$T/tiny_out" --unit-type-thresholds "$T/bad_key.json" -q
expect_fixed 2 "not valid JSON" "$BS" qc "$T/tiny_out" --unit-type-thresholds "$T/bad_json.json" -q
expect 2 "absent.json" "$BS" qc "$T/tiny_out" --unit-type-thresholds "$T/absent.json" -q
# sort refuses before sorting: no Phy folder is written
expect_fixed 2 "unknown metric 'no_such_metric'" "$BS" sort "${TINY[@]}" -o "$T/never" --unit-type-thresholds "$T/bad_metric.json" -q
check "sort wrote a folder despite a bad thresholds file" test ! -e "$T/never/spike_times.npy"
# linear32 (< 64 channels): no exp_decay, as SpikeInterface; every unit has a type and a reason
$PY - "$T/tiny_out" <<'PYEOF' && ok || bad "unit types of the linear32 sort"
import sys
out = sys.argv[1]
h, *rows = [l.split("\t") for l in open(f"{out}/qc/qc_metrics.tsv").read().splitlines()]
col = h.index("exp_decay")
assert all(r[col] == "nan" for r in rows), "exp_decay on a 32-channel probe"
t = [l.split("\t") for l in open(f"{out}/cluster_unit_type.tsv").read().splitlines()]
assert t[0] == ["cluster_id", "unit_type", "reason"], t[0]
assert [r[0] for r in t[1:]] == [r[0] for r in rows], "unit rows differ from qc_metrics.tsv"
for r in t[1:]:
    assert r[1] in ("noise", "non-somatic", "mua", "good") and r[2], r
    assert (r[1] == "good") == (r[2] == "passes"), r
PYEOF

if ! si_python; then echo "skipped: SpikeInterface cannot be installed here (offline?)"; finish; exit 77; fi

# ---------------------------------------------------------------- A. everything against SpikeInterface
if [ -z "${BS_SANITIZED:-}" ]; then
  "$BS" simulate -o "$T/sim" --probe np1 --duration $dur_a --units 20 --seed 5 -q || { echo "simulate failed"; exit 1; }
  BOUNDSORT="$BS" "$SIPY" "$SRC/bench/qc_crosscheck.py" "$T/sim" --work "$T/cc" >"$T/cc.log" 2>&1 \
    && ok || bad "qc_crosscheck: $(grep -E ' NO$| NO |agreement|Error' "$T/cc.log" | head -20)"
  grep -q "agreement: .* (100.0 %)" "$T/cc.log" && ok || bad "unit types differ from bombcell_label_units: $(grep -A12 'unit types' "$T/cc.log")"
fi

# ---------------------------------------------------------------- C. planted noise units
"$BS" simulate -o "$T/nsim" --probe np1 --duration $dur_c --units 30 --noise-units 4 --seed 5 -q \
  || { echo "simulate failed"; exit 1; }
"$BS" sort "$T/nsim/recording.bin" --probe "$T/nsim/probe.json" --fs 30000 --uv-per-bit 2.34375 -o "$T/nout" \
  --no-report -q && ok || bad "sort of the noise-unit simulation failed"
"$BS" compare "$T/nout" "$T/nsim" --json >"$T/cmp.json" && ok || bad "compare failed"
$PY - "$T/nout" "$T/nsim" "$T/cmp.json" "${BS_SANITIZED:-}" <<'PYEOF' && ok || bad "noise units"
import json, sys
out, sim, cmp, sanitized = sys.argv[1:]
noise = set(json.load(open(f"{sim}/recording.json"))["noise_units"])
types = {int(l.split("\t")[0]): l.split("\t")[1] for l in open(f"{out}/cluster_unit_type.tsv").read().splitlines()[1:]}
units = json.loads(open(cmp).read())["units"]
found = [u for u in units if u["gt_unit"] in noise and u["sorted_unit"] is not None]
if sanitized:  # a short recording: the code ran, the floors are for the full-size case
    sys.exit(0)
assert len(found) >= 2, f"only {len(found)} of the planted noise units were sorted"
assert all(types[u["sorted_unit"]] == "noise" for u in found), [(u["gt_unit"], types[u["sorted_unit"]]) for u in found]
well = [u for u in units if u["gt_unit"] not in noise and u["agreement"] >= 0.8]
neuron = [u for u in well if types[u["sorted_unit"]] in ("good", "mua")]
assert len(well) >= 8, f"{len(well)} well-detected neurons"
assert not [u for u in well if types[u["sorted_unit"]] == "noise"], "a well-detected neuron labelled noise"
assert len(neuron) >= 0.9 * len(well), (len(neuron), len(well))
print(f"noise units sorted {len(found)}, all noise; well-detected neurons {len(well)}, good or mua {len(neuron)}")
PYEOF

# ---------------------------------------------------------------- B. the rules on our metrics, two threshold sets
cat >"$T/thresholds.json" <<'EOF'
{"noise": {"num_positive_peaks": {"greater": null, "less": 2},
           "num_negative_peaks": {"greater": null, "less": 1},
           "peak_to_trough_duration": {"greater": 0.0001, "less": 0.00115},
           "waveform_baseline_flatness": {"greater": null, "less": 0.5},
           "exp_decay": {"greater": 0.005, "less": 0.2}},
 "mua": {"amplitude_median": {"greater": 50, "less": null, "abs": true},
         "num_spikes": {"greater": 100, "less": null},
         "sliding_rp_violation": {"greater": null, "less": 0.2},
         "isolation_distance": {"greater": 10, "less": null}},
 "non-somatic": {"peak_before_to_trough_ratio": {"greater": null, "less": 0.1},
                 "peak_before_width": {"greater": 0.0003, "less": null},
                 "trough_width": {"greater": 0.0004, "less": null},
                 "main_peak_to_trough_ratio": {"greater": null, "less": 0.5},
                 "recovery_slope": {"greater": -1e9, "less": null}}}
EOF
OUT=$T/cc/out
[ -n "${BS_SANITIZED:-}" ] && OUT=$T/nout
cp "$OUT/cluster_unit_type.tsv" "$T/types_default.tsv"
"$BS" qc "$OUT" --unit-type-thresholds "$T/thresholds.json" -q && ok || bad "qc with a thresholds file failed"
"$SIPY" - "$OUT" "$T/types_default.tsv" "$T/thresholds.json" <<'PYEOF' >"$T/rules.log" 2>&1 && ok || bad "rules differ from SpikeInterface: $(cat "$T/rules.log")"
import sys, warnings
import pandas as pd
from spikeinterface.curation import bombcell_label_units
warnings.simplefilter("ignore")
out, default_types, thr = sys.argv[1:]
m = pd.read_csv(f"{out}/qc/qc_metrics.tsv", sep="\t", index_col="cluster_id")
m = m[m["num_spikes"] > 0]
name = {"non_soma": "non-somatic"}
seen = {}
for types, thresholds in ((default_types, None), (f"{out}/cluster_unit_type.tsv", thr)):
    ours = pd.read_csv(types, sep="\t", index_col="cluster_id", keep_default_na=False)
    si = bombcell_label_units(external_metrics=m, thresholds=thresholds)["bombcell_label"].map(lambda v: name.get(v, v))
    diff = [(u, ours.loc[u, "unit_type"], si[u], ours.loc[u, "reason"]) for u in m.index if ours.loc[u, "unit_type"] != si[u]]
    assert not diff, f"thresholds {thresholds}: {diff}"
    for u in m.index:
        t, why = ours.loc[u, "unit_type"], ours.loc[u, "reason"]
        assert why == "passes" if t == "good" else why.startswith(t + ": "), (u, t, why)
    seen[thresholds] = ours["unit_type"].value_counts().to_dict()
    print(thresholds, seen[thresholds])
assert seen[None] != seen[thr], "the thresholds file changed nothing"
assert seen[thr].get("non-somatic", 0) > 0, "no unit is non-somatic under the test thresholds"
PYEOF

finish
