# test_artifacts.sh - broadband artifacts (docs/ALGORITHM.md §3.7): the simulator's `--artifacts RATE`
# and the sorter's blanking.
#  1. simulate: gt_artifacts.tsv lists the events; the units and their spikes are those of the same seed
#     without artifacts, and the recording differs from it only inside the listed events.
#  2. sort: OUT/artifacts.tsv finds the simulated artifacts with their times (every event of 1000 µV or
#     more, 80 % of all) and nothing else (every period overlaps an event); run_summary.json counts them,
#     and the report's run summary shows them.
#  3. the same recording without artifacts: no period (unit test_artifact checks noise and spikes too).
#  4. --no-artifact-removal: no artifacts.tsv, recorded in params.json and the run summary, and more
#     templates than with the removal (6 events a second: 14 templates with the removal, 36 without; at 3
#     a second the 8 s gave 13 and 11 once the phase shift aligned the channels, too few events to tell);
#     --resume keeps the list.
#  5. a recording that is all artifact (a 32-channel raw file of broadband bursts every 10 ms): a warning
#     that most of it was blanked, exit 2 "no unit ... was found", and no Phy folder.
# Under the sanitizers (a 384-channel sort is ~80x slower there): 1 s of recording and parts 1-2 only.
. "$(dirname "$0")/lib.sh"

dur=8; [ -n "${BS_SANITIZED:-}" ] && dur=1
for x in clean:0 art:6; do
  "$BS" simulate -o "$T/${x%%:*}" --probe np1 --duration $dur --units 12 --seed 5 --artifacts ${x#*:} -q \
    >/dev/null 2>&1 || bad "simulate ${x%%:*} failed"
done

# 1. the simulator
check "simulated artifacts match the clean recording outside their events" "$PY" - "$T" <<'PYEOF'
import csv, sys, numpy as np
T = sys.argv[1]
rows = list(csv.DictReader(open(f"{T}/art/gt_artifacts.tsv"), delimiter="\t"))
assert rows and set(rows[0]) == {"start_sample", "end_sample", "kind", "amplitude_uv", "n_channels"}, rows[:1]
assert {r["kind"] for r in rows} <= {"stimulation", "chewing", "movement"}
for f in ("gt_spike_times.npy", "gt_spike_units.npy"):
    assert np.array_equal(np.load(f"{T}/clean/{f}"), np.load(f"{T}/art/{f}")), f
a = np.fromfile(f"{T}/art/recording.bin", np.int16).reshape(-1, 384)
b = np.fromfile(f"{T}/clean/recording.bin", np.int16).reshape(-1, 384)
inside = np.zeros(len(a), bool)
for r in rows:
    s, e = int(r["start_sample"]), int(r["end_sample"])
    assert 0 <= s < e <= len(a) and 300 <= float(r["amplitude_uv"]) <= 3000, r
    inside[s:e] = True
diff = np.any(a != b, axis=1)
assert not diff[~inside].any(), "the recording differs outside the events"
assert diff[inside].mean() > 0.9, diff[inside].mean()
print(len(rows), "events,", inside.sum(), "samples")
PYEOF

# 2. sorted with the removal (the default)
expect 0 "" -- "$BS" sort "$T/art" -o "$T/o_art" --threads 2 --no-qc -q
check "artifacts.tsv finds the simulated events and nothing else" "$PY" - "$T" <<'PYEOF'
import csv, json, sys
T = sys.argv[1]
gt = [(int(r["start_sample"]), int(r["end_sample"]), float(r["amplitude_uv"]))
      for r in csv.DictReader(open(f"{T}/art/gt_artifacts.tsv"), delimiter="\t")]
found = [(int(r["start_sample"]), int(r["end_sample"]), int(r["n_channels"]))
         for r in csv.DictReader(open(f"{T}/o_art/artifacts.tsv"), delimiter="\t")]
assert found, "no period"
pad = 60  # 2 ms: the margin blanked around an event
hit = lambda s, e: any(s < fe and e > fs for fs, fe, _ in found)
missed = [g for g in gt if not hit(g[0], g[1])]
print(len(gt), "events,", len(found), "periods, missed:", missed)
assert all(a < 1000 for _, _, a in missed), missed
assert len(missed) <= 0.2 * len(gt), missed
for fs, fe, n in found:
    assert fe > fs and 96 <= n <= 384, (fs, fe, n)
    assert any(fs < e + pad and fe > s - pad for s, e, _ in gt), ("a period with no event", fs, fe)
assert all(found[i][1] <= found[i + 1][0] for i in range(len(found) - 1)), "periods overlap or are unsorted"
r = json.load(open(f"{T}/o_art/run_summary.json"))["artifacts"]
fs_hz = 30000.0
assert r["removal"] and r["periods"] == len(found), r
assert abs(r["blanked_s"] - sum(e - s for s, e, _ in found) / fs_hz) < 1e-9, r
assert r["expected_lost_spikes"] >= 0, r
PYEOF

expect 0 "" -- "$BS" report "$T/o_art" -o "$T/report.html"
check "the report's run summary shows the periods" \
  grep -q "\"artifacts\":{\"removal\":true,\"periods\":$(($(wc -l <"$T/o_art/artifacts.tsv") - 1))," "$T/report.html"

if [ -z "${BS_SANITIZED:-}" ]; then
  # 3. no artifacts, no period
  expect 0 "" -- "$BS" sort "$T/clean" -o "$T/o_clean" --threads 2 --no-qc -q
  check "a clean recording has no artifact period" test "$(wc -l <"$T/o_clean/artifacts.tsv")" = 1
  check "clean: run summary counts none" grep -q '"periods":[[:space:]]*0' "$T/o_clean/run_summary.json"

  # 4. removal off
  expect 0 "" -- "$BS" sort "$T/art" -o "$T/o_off" --threads 2 --no-qc -q --no-artifact-removal
  check "--no-artifact-removal writes no artifacts.tsv" test ! -e "$T/o_off/artifacts.tsv"
  check "--no-artifact-removal is in params.json" grep -q '"no_artifact_removal":[[:space:]]*1' "$T/o_off/params.json"
  check "--no-artifact-removal is in the run summary" grep -q '"removal":[[:space:]]*false' "$T/o_off/run_summary.json"
  check "without the removal, artifacts make more templates" "$PY" -c "
import numpy as np, sys
on, off = (np.load(f'$T/{o}/templates.npy', mmap_mode='r').shape[0] for o in ('o_art', 'o_off'))
print('templates with removal', on, 'without', off)
sys.exit(0 if off > on else 1)"
  cp "$T/o_art/artifacts.tsv" "$T/art_first.tsv"
  expect 0 "" -- "$BS" sort "$T/art" -o "$T/o_art" --threads 2 --no-qc -q --resume
  check "--resume keeps artifacts.tsv" cmp -s "$T/art_first.tsv" "$T/o_art/artifacts.tsv"

  # 5. all artifact
  "$BS" simulate -o "$T/lin" --probe linear32 --duration 0.2 --units 1 -q >/dev/null 2>&1 || bad "simulate lin failed"
  "$PY" - "$T/allart.bin" <<'PYEOF' || bad "could not write the all-artifact recording"
import sys, numpy as np
r = np.random.default_rng(1)
C, T = 32, 6 * 30000
g = r.uniform(0.3, 1.5, C)  # a gain per channel, so the median reference leaves most of it
s = np.zeros(T)
for t0 in range(0, T, 300):  # a 6-ms burst every 10 ms
    s[t0:t0 + 180] = r.normal(0, 400, 180) * np.hanning(180)
x = g[:, None] * s[None, :] + r.normal(0, 5, (C, T))
np.clip(x.T, -32000, 32000).astype(np.int16).tofile(sys.argv[1])
PYEOF
  expect 2 "no unit with at least .* was found" -- "$BS" sort "$T/allart.bin" --probe "$T/lin/probe.json" --fs 30000 \
    -o "$T/o_allart" --threads 2 --no-qc -q
  check "all artifact: the warning says how much was blanked" \
    grep -q "warning: detect: 9[0-9.]* % of the recording .* was blanked as broadband artifacts" "$T/err.txt"
  check "all artifact: no Phy folder" test ! -e "$T/o_allart/spike_times.npy" -a ! -e "$T/o_allart/params.py"
fi
finish
