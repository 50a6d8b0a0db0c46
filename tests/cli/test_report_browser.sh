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
# curation, draws every tab, and takes screenshots (into BS_TMP, and into
# BS_SCREENSHOTS when set). Skipped (77) only when Chromium is not installed.
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
timeout 300 "$BS_VPY" "$SRC/tests/browser/report_browser.py" "${args[@]}"
