#!/usr/bin/env bash
# test_report_browser.sh - the report page in a real browser: headless
# Chromium (Debian's) driven by Selenium (tests/browser/report_browser.py) on
# the report of a sorted short simulation with the optional files (under the
# sanitizers, where sorting is ~20x slower and the page is the same, on a
# small synthetic Phy folder instead; test_report.sh covers the C side there
# on a sorted simulation): loads the
# page, selects a unit, relabels units (button and keyboard), marks merge
# groups, filters and sorts the table, exports the curation JSON (v2) and
# cluster_group.tsv and checks their content, checks a reload keeps the
# curation, splits a unit by a box on its amplitude plot (undo, redo,
# reload), draws every tab, and takes screenshots (into BS_TMP, and into
# BS_SCREENSHOTS when set); then applies the page's export with
# SpikeInterface's apply_curation and checks the units it gives (skipped
# when SpikeInterface cannot be installed). Skipped (77) only when Chromium is not installed.
. "$(dirname "$0")/lib.sh"
. "$SRC/tests/browser/browser_env.sh"
bs_browser_setup; rc=$?
[ "$rc" = 0 ] || exit $rc

if [ -n "${BS_SANITIZED:-}" ]; then
  /usr/bin/python3 "$SRC/tests/browser/report_fixtures.py" scale "$T/out" 14 20000 || { echo "fixtures failed"; exit 1; }
else
  "$BS" simulate -o "$T/sim" --probe linear32 --duration 8 --units 12 --seed 9 -q || { echo "simulate failed"; exit 1; }
  "$BS" sort "$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000 -o "$T/out" --threads 2 -q \
    || { echo "sort failed"; exit 1; }
fi
/usr/bin/python3 "$SRC/tests/browser/report_fixtures.py" optional "$T/out" || { echo "fixtures failed"; exit 1; }
"$BS" report "$T/out" -q || { echo "report failed"; exit 1; }
args=(curate "$T/out/report.html" "$T/browser")
[ -n "${BS_SCREENSHOTS:-}" ] && args+=(--screenshots "$BS_SCREENSHOTS")
timeout 300 "$BS_VPY" "$SRC/tests/browser/report_browser.py" "${args[@]}" && ok || bad "the page in Chromium"

# The page's last export (a merge and a split) through SpikeInterface's apply_curation: the units it gives are
# the folder's, less the merged and split ones, plus the merge (the union of its trains) and the split's two
# parts (the box's spikes and the rest of the unit's train).
if [ ! -s "$T/browser/curation-final.json" ]; then
  bad "the browser part wrote no curation-final.json"
elif ! si_python; then
  echo "skipped: SpikeInterface cannot be installed here (offline?): no apply_curation round trip"
else
  "$SIPY" - "$T/out" "$T/browser/curation-final.json" <<'PYEOF' && ok || bad "apply_curation on the page's export"
import json, sys
import numpy as np
import spikeinterface.core as sc
from spikeinterface.curation import apply_curation
out, cur = sys.argv[1], json.load(open(sys.argv[2]))
st, cl = np.load(f"{out}/spike_times.npy").ravel(), np.load(f"{out}/spike_clusters.npy").ravel()
sorting = sc.NumpySorting.from_samples_and_labels([st], [cl], 30000.0)
ids = [int(i) for i in sorting.unit_ids]
assert ids == cur["unit_ids"], (ids, cur["unit_ids"])
res = apply_curation(sorting, cur)
train = lambda s, u: s.get_unit_spike_train(u)
want = set(ids)
for m in cur["merges"]:
    want -= set(m["unit_ids"])
    want.add(m["new_unit_id"])
    got = train(res, m["new_unit_id"])
    exp = np.sort(np.concatenate([train(sorting, u) for u in m["unit_ids"]]))
    assert np.array_equal(got, exp), f"merge {m}: {len(got)} spikes, expected {len(exp)}"
for s in cur["splits"]:
    want -= {s["unit_id"]}
    want |= set(s["new_unit_ids"])
    t = train(sorting, s["unit_id"])
    box = np.asarray(s["indices"][0])
    rest = np.setdiff1d(np.arange(len(t)), box)
    assert np.array_equal(train(res, s["new_unit_ids"][0]), t[box]), "the box's part"
    assert np.array_equal(train(res, s["new_unit_ids"][1]), t[rest]), "the rest"
    print(f"split of unit {s['unit_id']}: {len(box)} + {len(rest)} spikes as units {s['new_unit_ids']}")
assert set(int(u) for u in res.unit_ids) == want, (sorted(res.unit_ids), sorted(want))
print(f"apply_curation: {len(ids)} units -> {len(res.unit_ids)}, {len(cur['merges'])} merges, {len(cur['splits'])} split")
PYEOF
fi
finish
