#!/usr/bin/env bash
# test_plan.sh - the memory planner and the resource report:
#  - `plan` prints every stage with its buffers (text and --json);
#  - a budget below the minimum is refused up front, with exit 3, in under a
#    second, naming the stage, its bytes and the parameter, before the output
#    folder is touched;
#  - budget equivalence: the same recording sorted under four budgets that
#    make the matching stage store its pair table full, half, on the fly with
#    the busiest templates' rows kept, and on the fly gives byte-identical
#    output files;
#  - run_summary.json: every stage's tracked peak within its planned peak,
#    peak RSS under the budget plus the stated overhead;
#  - --mem-trace writes balanced JSON lines; progress lines with an ETA.
. "$(dirname "$0")/lib.sh"

duration=16
[ -n "${BS_SANITIZED:-}" ] && duration=12
"$BS" simulate -o "$T/sim" --probe linear32 --duration $duration --units 8 --seed 11 -q || { echo "simulate failed"; exit 1; }
REC=("$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000)
# the sorts skip qc (--no-qc): qc checks its own budget (test_qc)

# plan: text and JSON
"$BS" plan "${REC[@]}" --mem 2G >"$T/plan.txt" && ok || bad "plan failed"
for stage in channels preprocess whitening drift basis detect cluster match finish; do
  grep -q "^  $stage " "$T/plan.txt" && ok || bad "plan lacks stage $stage"
done
grep -q "pair table full" "$T/plan.txt" && ok || bad "plan lacks the pair-table strategy"
"$BS" plan "${REC[@]}" --mem 2G --templates 300 --json >"$T/plan.json" && ok || bad "plan --json failed"
$PY - "$T/plan.json" <<'PYEOF' && ok || bad "plan JSON wrong"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["templates"] == 300 and not d["templates_assumed"], d["templates"]
assert [s["name"] for s in d["stages"]] == ["channels", "preprocess", "whitening", "drift", "basis", "detect", "cluster",
                                         "match", "finish"]
for s in d["stages"]:
    assert s["peak_bytes"] == sum(b["bytes"] for b in s["buffers"]), s["name"]
    assert s["min_peak_bytes"] <= s["peak_bytes"]
assert d["peak_bytes"] == max(s["peak_bytes"] for s in d["stages"]) and d["fits"]
PYEOF

# refusal before anything is read or written
start=$(date +%s.%N)
"$BS" sort "${REC[@]}" --no-qc -o "$T/refused" --mem 20M -q 2>"$T/refuse.err"; rc=$?
end=$(date +%s.%N)
[ "$rc" = 3 ] && ok || bad "sort --mem 20M exited $rc, expected 3"
grep -Eq "does not fit the memory budget: stage '(preprocess|drift|basis)' needs at least .* MiB .*raise --mem to at least .* or reduce (--no-drift|--batch-seconds)" \
  "$T/refuse.err" && ok || bad "refusal message: $(cat "$T/refuse.err")"
[ ! -e "$T/refused" ] && ok || bad "a refused sort created its output folder"
$PY -c "import sys; sys.exit(0 if $end - $start < 1.0 else 1)" && ok || bad "refusal took $(echo "$end - $start" | bc) s"
"$BS" plan "${REC[@]}" --mem 20M >/dev/null 2>&1; [ $? = 3 ] && ok || bad "plan --mem 20M should exit 3"

# generous budget first; the summary's final plan gives the matching stage's sizes
"$BS" sort "${REC[@]}" --no-qc -o "$T/o_gen" --mem 4G --mem-trace "$T/trace.jsonl" 2>"$T/sort.err" && ok || bad "sort --mem 4G failed"
grep -q "detect .*%.*ETA" "$T/sort.err" && ok || bad "no progress line with an ETA"
grep -q "^stage .*planned MiB.*tracked MiB" "$T/sort.err" && ok || bad "no resource table at the end"
read -r half_budget fly_budget some_budget < <($PY - "$T/o_gen/run_summary.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
m = [s for s in d["plan"]["stages"] if s["name"] == "match"][0]
assert m["strategy"] == "pair table full, 2 batches at once", m["strategy"]
# the full table's peak without the optional lanes or read-ahead lane (which a tighter budget drops first)
ahead = sum(b["bytes"] for b in m["buffers"] if b["what"].startswith(("read-ahead", "lanes")))
assert ahead > 0 and m["lanes"] == 2, m  # 2 threads and 4 GiB: the stage matches 2 batches at once
full = [b["bytes"] for b in m["buffers"] if b["what"] == "pair table full"][0]
# on the fly, and a fifth of the full table's rows more: not enough for the half table (half the rows and an
# index), room to keep some rows
print(m["peak_bytes"] - ahead - 1, m["min_peak_bytes"], m["min_peak_bytes"] + full // 5)
PYEOF
)
[ -n "${fly_budget:-}" ] && ok || bad "could not read the matching stage's plan"
# (under the sanitizers, ~20x slower, the medium budget is left out: the half table's code is in test_pair_table)
runs=(o_gen:full o_half:half o_some:"on the fly, busiest rows kept" o_fly:"on the fly\"")
[ -n "${BS_SANITIZED:-}" ] && runs=(o_gen:full o_fly:"on the fly\"")
[ -z "${BS_SANITIZED:-}" ] && { "$BS" sort "${REC[@]}" --no-qc -o "$T/o_half" --mem "${half_budget:-1}" -q && ok || bad "sort at the medium budget failed"; }
[ -z "${BS_SANITIZED:-}" ] && { "$BS" sort "${REC[@]}" --no-qc -o "$T/o_some" --mem "${some_budget:-1}" -q && ok || bad "sort at the budget that keeps some rows failed"; }
"$BS" sort "${REC[@]}" --no-qc -o "$T/o_fly" --mem "${fly_budget:-1}" -q && ok || bad "sort at the minimum budget failed"
for o in "${runs[@]}"; do
  grep -q "\"strategy\":.*\"pair table ${o#*:}" "$T/${o%%:*}/run_summary.json" && ok || bad "${o%%:*} did not use pair table ${o#*:}"
done
for f in "$T"/o_gen/*.npy "$T"/o_gen/*.tsv; do
  n=$(basename "$f")
  { [ -n "${BS_SANITIZED:-}" ] || { cmp -s "$f" "$T/o_half/$n" && cmp -s "$f" "$T/o_some/$n"; }; } && cmp -s "$f" "$T/o_fly/$n" &&
    ok || bad "$n differs between budgets"
done
( cd "$T/o_gen" && sha256sum spike_times.npy spike_clusters.npy templates.npy ) | sed 's/^/budget-equivalence hash: /'

# the resource report
$PY - "$T" <<'PYEOF' && ok || bad "run_summary.json wrong"
import json, os, sys
T = sys.argv[1]
for o, budget in (("o_gen", 4 << 30), ("o_fly", None)):
    d = json.load(open(f"{T}/{o}/run_summary.json"))
    names = [s["name"] for s in d["stages"]]
    assert names == ["channels", "preprocess", "whitening", "drift", "basis", "detect", "cluster", "match",
                     "finish"], names
    for s in d["stages"]:
        assert 0 < s["tracked_peak_bytes"] <= s["planned_peak_bytes"], (o, s)
        assert s["wall_s"] >= 0 and s["rss_peak_bytes"] > 0
        # reading and preprocessing is part of the stage's wall time; the batch stages read, clustering does not
        assert 0 <= s["read_preprocess_s"] <= s["wall_s"], (o, s)
        assert (s["read_preprocess_s"] > 0) == (s["name"] in ("preprocess", "whitening", "drift", "basis", "detect",
                                                              "match")), s
        # CPU time over the threads' wall time: at most 1, with a little slack for the kernel's accounting
        # (whose ticks make a stage of a few milliseconds, e.g. clustering 8 units, read anything: CI saw 1.31
        # for 2.5 ms)
        assert s["cpu_s"] >= 0 and 0 <= s["cpu_utilisation"] and (s["wall_s"] < 0.1 or s["cpu_utilisation"] <= 1.2), (o, s)
        assert abs(s["cpu_utilisation"] - s["cpu_s"] / max(s["wall_s"], 1e-9) / d["threads"]) < 1e-6, s
        # the batch loops work on 2 batches at once (detect, match) or read ahead (preprocess, drift) where the
        # budget has room (so the outputs compared above across budgets cover both and neither); at the minimum
        # budget the matching stage does neither
        lanes = "batches at once" in s["strategy"]
        if o == "o_gen":
            assert s["read_ahead"] == (s["name"] in ("preprocess", "drift")), s
            assert lanes == (s["name"] in ("detect", "match")), s
        elif s["name"] == "match":
            assert not s["read_ahead"] and not lanes, s
    b = d["budget_bytes"]
    overhead = d["plan"]["overhead_bytes"]
    # under the sanitizers ASan's shadow memory, quarantine and per-thread caches add RSS that is not the
    # program's (measured: 29 MiB over at the smallest budget, 38 MiB): 64 MiB of slack there, none otherwise
    slack = (64 << 20) if os.environ.get("BS_SANITIZED") else 0
    assert d["peak_rss_bytes"] <= b + overhead + slack, (d["peak_rss_bytes"], b, overhead, slack)
    print(o, "peak RSS", d["peak_rss_bytes"] >> 20, "MiB, budget", b >> 20, "MiB + overhead", overhead >> 20, "MiB")
PYEOF

# a clustering that makes many more templates than the plan assumes before it runs (1.5 per channel): every
# split kept and small clusters made templates, as a motion-artifact session makes Kilosort split. The
# clustering's plan bounds its templates from the centers' spike counts (at most n_init clusters per center,
# each of at least min_template_spikes), and the sum-template check is planned with the real count
cat >"$T/oversplit.json" <<'EOF2'
{"cluster": {"lam": 100, "n_neighbors": 3, "downsampling": 1, "modularity_split": 10, "bimodality_merge": 0,
             "refractory_test": 0, "min_template_spikes": 1, "min_template_norm_of_threshold": 0, "min_spikes": 1},
 "merge": {"r_thresh": 1}}
EOF2
"$BS" sort "${REC[@]}" --no-qc --no-report -o "$T/o_split" --params "$T/oversplit.json" --mem 1G -q 2>"$T/split.err" \
  && ok || bad "sort with every split kept failed: $(tail -3 "$T/split.err")"
grep -q "bug in the plan" "$T/split.err" && bad "$(grep 'bug in the plan' "$T/split.err")" || ok
$PY - "$T/o_split/run_summary.json" <<'PYEOF' && ok || bad "the clustering's plan does not hold its templates"
import json, sys
d = json.load(open(sys.argv[1]))
K = d["plan"]["templates"]
c = [s for s in d["plan"]["stages"] if s["name"] == "cluster"][0]
held = [b["bytes"] for b in c["buffers"] if b["what"] == "templates so far"][0]
per = 32 * (4 + 4 * 6) + 8  # a template's 32 support channels, 6 pcs per channel (float32), its spike count
print("templates", K, "(assumed before clustering:", 32 * 3 // 2, ") planned for", held // per)
assert K > 48 and held >= K * per, (K, held)
for s in d["stages"]:
    assert 0 < s["tracked_peak_bytes"] <= s["planned_peak_bytes"], s
c = [s for s in d["stages"] if s["name"] == "cluster"][0]
assert c["disk_written_bytes"] <= c["disk_planned_bytes"], c
PYEOF

# the memory trace: JSON lines, every allocation freed, tags of every stage
$PY - "$T/trace.jsonl" <<'PYEOF' && ok || bad "memory trace wrong"
import json, sys
live, tags, n = {}, set(), 0
for line in open(sys.argv[1]):
    e = json.loads(line); n += 1
    assert e["op"] in ("alloc", "free") and e["device"] == "host" and e["bytes"] >= 0 and e["t_s"] >= 0
    tags.add(e["tag"].split("/")[0])
    live[e["tag"]] = live.get(e["tag"], 0) + (e["bytes"] if e["op"] == "alloc" else -e["bytes"])
left = {t: b for t, b in live.items() if b and not t.startswith("io/")}
assert not left, left
assert {"sort", "detect", "match", "cluster", "preprocess"} <= tags, tags
print(n, "trace lines")
PYEOF

# the scale of a motion-artifact session (issue 16): a 1-hour 384-channel recording (a sparse file, never
# read) with 17,345 and 20,000 templates fits 4 GiB with the default settings; the matcher's score
# buffer is K x one peeling window (docs/ALGORITHM.md 8.4), whatever the batch length; the pair table is
# computed on the fly, and most of what the budget leaves keeps the busiest templates' rows
"$BS" simulate -o "$T/np1" --probe np1 --duration 0.2 --units 2 -q >/dev/null 2>&1 || bad "simulate np1 failed"
truncate -s $((384 * 2 * 30000 * 3600)) "$T/np1h.bin"
for K in 17345 20000; do
  "$BS" plan "$T/np1h.bin" --probe "$T/np1/probe.json" --fs 30000 --templates $K --mem 4G --json >"$T/planK.json" 2>&1 \
    && ok || bad "plan --templates $K --mem 4G: $(tail -3 "$T/planK.json")"
  $PY - "$T/planK.json" $K <<'PYEOF' && ok || bad "plan at K = $K does not fit 4 GiB"
import json, sys
d = json.load(open(sys.argv[1]))
m = [s for s in d["stages"] if s["name"] == "match"][0]
scores = 4 * int(sys.argv[2]) * (4096 + 4 * 61)
keep = sum(b["bytes"] for b in m["buffers"] if b["what"].startswith("the busiest templates' pair rows"))
print(f"K = {sys.argv[2]}: predicted peak {d['peak_bytes'] / 2**30:.2f} GiB, match {m['peak_bytes'] / 2**30:.2f} GiB "
      f"of which kept pair rows {keep / 2**30:.2f} GiB")
assert d["fits"] and d["peak_bytes"] <= 4 << 30, d["peak_bytes"]
assert scores <= m["peak_bytes"] - keep < scores + (1 << 30), (scores, m["peak_bytes"], keep)
assert "pair table on the fly, busiest rows kept" in m["strategy"] and keep > 1 << 30, (m["strategy"], keep)
PYEOF
done
for bs in 1 4; do   # the peeling workspace does not grow with the batch
  "$BS" plan "$T/np1h.bin" --probe "$T/np1/probe.json" --fs 30000 --templates 20000 --batch-seconds $bs --json \
    | $PY -c "
import json, sys
m = [s for s in json.load(sys.stdin)['stages'] if s['name'] == 'match'][0]
print([b['bytes'] for b in m['buffers'] if b['what'].startswith('peeling workspace')][0])" >"$T/match_$bs.txt" \
    || bad "plan --batch-seconds $bs"
done
$PY -c "import sys; a, b = (int(open(f).read()) for f in sys.argv[1:]); print('peeling workspace at 1 s and 4 s batches:', a, b); sys.exit(0 if a == b else 1)" \
  "$T/match_1.txt" "$T/match_4.txt" && ok || bad "the peeling workspace grows with the batch length"
rm -f "$T/np1h.bin"
# disk (plan.h): each stage's bytes in OUT follow the counts; -o compares the total with the free space of the
# file system that will hold OUT (its nearest existing folder when OUT does not exist yet). Thirty seconds of
# 384 channels (a sparse file): the preprocessed recording alone is 384 x 9e5 float16 values, unless the file
# system has less room than the run needs (a crowded CI disk), when the plan streams it instead (written: 0)
truncate -s $((384 * 2 * 30000 * 30)) "$T/np1m.bin"
for K in 100 200; do
  "$BS" plan "$T/np1m.bin" --probe "$T/np1/probe.json" --fs 30000 --templates $K -o "$T/not/yet/out" --json \
    >"$T/planD$K.json" 2>"$T/planD.err" && ok || bad "plan -o at K = $K: $(cat "$T/planD.err")"
done
avail=$(df -B1 --output=avail "$T" | tail -1)
$PY - "$T/planD100.json" "$T/planD200.json" "$avail" <<'PYEOF' && ok || bad "plan disk wrong"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
avail = int(sys.argv[3])
st = lambda d, n: [s for s in d["stages"] if s["name"] == n][0]["disk_bytes"]
print("disk at K = 100 / 200:", a["disk_bytes"], b["disk_bytes"], "free", a["disk_free_bytes"], "df", avail)
assert abs(a["disk_free_bytes"] - avail) <= 0.05 * avail + (64 << 20), (a["disk_free_bytes"], avail)
assert a["disk_bytes"] == sum(s["disk_bytes"] for s in a["stages"]) + a["disk_qc_bytes"] + a["disk_report_bytes"] + a["disk_keep_bytes"]
assert b["disk_report_bytes"] - a["disk_report_bytes"] == 100 * 7000  # the page's bound per unit
for n in ("detect", "match"):  # per spike: twice the spikes, twice the bytes (plus the fixed 8 KiB a file)
    assert 1.99 < (st(b, n) - 65536) / (st(a, n) - 65536) < 2.01, (n, st(a, n), st(b, n))
# the Phy folder holds the dense templates (K x 61 x 384 float32) and the K x K similarity
assert st(b, "finish") - st(a, "finish") > 100 * 61 * 384 * 4 + (200 * 200 - 100 * 100) * 4
assert st(a, "whitening") < (1 << 20) and st(a, "basis") < (1 << 20)
pre = 384 * 900000 * 2
if a["preprocessed_streamed"]:  # not written: only then may the free space lie under what writing it needs
    assert st(a, "preprocess") < (1 << 20) and a["disk_free_bytes"] < a["disk_bytes"] + pre, (st(a, "preprocess"), a)
else:
    assert 0 <= st(a, "preprocess") - pre < (1 << 20), st(a, "preprocess")  # plus railed.npy
PYEOF
rm -f "$T/np1m.bin"

finish
