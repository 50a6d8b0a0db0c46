#!/usr/bin/env bash
# test_report.sh - boundsort report on a sorted short simulation.
#   - sort writes the page by default, --no-report does not (and removes an old one);
#   - the page holds the right units (count, ids, spike counts), correlograms
#     equal to ones computed here with numpy from the Phy files (every pair and
#     every unit), the spike subsample at the promised stride; it references
#     nothing outside itself and two runs give the same bytes; without the
#     optional inputs, each absence is a note on the page;
#   - with the optional files (written synthetically by report_fixtures.py):
#     every qc_metrics.tsv column, the qc label, the drift map from
#     driftmap.npy, the motion, the run summary and the memory timeline match
#     their files;
#   - not a Phy folder or malformed files: exit 2 with a message naming the
#     file, and a previous report.html is left as it was; bad usage: exit 1.
. "$(dirname "$0")/lib.sh"
FIX=$SRC/tests/browser/report_fixtures.py

duration=12
[ -n "${BS_SANITIZED:-}" ] && duration=6  # sorting is ~20x slower under the sanitizers
"$BS" simulate -o "$T/sim" --probe linear32 --duration $duration --units 12 --seed 4 -q || { echo "simulate failed"; exit 1; }
"$BS" sort "$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000 -o "$T/out" --threads 2 -q \
  || { echo "sort failed"; exit 1; }

# 0. sort writes the page last by default (the same bytes as the command's); --no-report writes none and
#    removes an earlier run's page, which would show other units
[ -s "$T/out/report.html" ] && ok || bad "sort wrote no report.html"
"$BS" sort "$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000 -o "$T/out" --threads 2 -q --resume \
  --no-report && [ ! -e "$T/out/report.html" ] && ok || bad "sort --no-report left a report.html"
"$BS" sort "$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000 -o "$T/out" --threads 2 -q --resume \
  && cp "$T/out/report.html" "$T/by_sort.html" && ok || bad "sort --resume wrote no report.html"

# 1. the plain sort output
expect 0 "" "$BS" report "$T/out"
cmp -s "$T/out/report.html" "$T/by_sort.html" && ok || bad "sort's page differs from boundsort report's"
[ -s "$T/out/report.html" ] && ok || bad "no report.html"
ls "$T/out" | grep -q "report.html.tmp" && bad "a temporary file was left" || ok
cp "$T/out/report.html" "$T/first.html"
"$BS" report "$T/out" -q && cmp -s "$T/out/report.html" "$T/first.html" && ok || bad "two runs differ"
grep -Eq "(src|href)=[\"']?(https?:)?//|@import|url\(" "$T/out/report.html" && bad "the page references outside files" || ok
$PY - "$T/out" "$FIX" <<'PYEOF' && ok || bad "embedded data of the plain folder"
import sys, os, json, numpy as np
sys.path.insert(0, os.path.dirname(sys.argv[2]))
from report_fixtures import load_report, decode
out = sys.argv[1]
d, html = load_report(os.path.join(out, "report.html"))
st = np.load(os.path.join(out, "spike_times.npy")).astype(np.int64)
cl = np.load(os.path.join(out, "spike_clusters.npy")).astype(np.int64)
fs = d["fs_hz"]
errors = []
def want(cond, what):
    if not cond:
        errors.append(what)
ids = decode(d["unit_ids"])
uniq, counts = np.unique(cl, return_counts=True)
want(d["n_units"] == len(uniq) and np.array_equal(ids, uniq), f"unit ids {ids} vs {uniq}")
want(d["n_spikes"] == len(st), "spike count")
col = {c["key"]: c for c in d["columns"]}
want(col["n_spikes"]["values"] == counts.tolist(), "n_spikes column")
want(np.allclose(col["fr_hz"]["values"], counts / d["duration_s"]), "fr_hz column")
amp = np.load(os.path.join(out, "amplitudes.npy")).astype(np.float64)
want(np.allclose(col["amp_mean"]["values"], [amp[cl == i].mean() for i in uniq], rtol=1e-5), "amp_mean column")
want(d["duration_s"] == os.path.getsize(os.path.join(out, "..", "sim", "recording.bin")) / (32 * 2) / fs, "duration")
for k in ("group", "KSLabel", "Amplitude", "ContamPct"):
    want(k in col, f"column {k} from the cluster tables")
# what sort writes besides the Phy files (when it does): the run summary and the spike positions
if os.path.exists(os.path.join(out, "run_summary.json")):
    rs = json.load(open(os.path.join(out, "run_summary.json")))
    want([s["name"] for s in d["run"]["stages"]] == [s["name"] for s in rs["stages"]], "stages of run_summary.json")
if os.path.exists(os.path.join(out, "spike_positions.npy")):
    xy = np.load(os.path.join(out, "spike_positions.npy")).astype(np.float64)
    want(np.allclose(col["y_um"]["values"], [xy[cl == i, 1].mean() for i in uniq], atol=1e-3), "y_um = mean spike depth")
# the drift map: the drift stage's driftmap.npy (detected spikes) when sort wrote one, else the spike positions
dmap = "driftmap.npy" if os.path.exists(os.path.join(out, "driftmap.npy")) else "spike_positions"
want(d["drift_map"]["source"].startswith(dmap), f"drift map from {dmap}, not {d['drift_map']['source']}")
# cross-correlograms: every pair, computed independently (lag = t_b - t_a, 1 ms bins over [-50, 50) ms)
pairs = decode(d["ccg"]["pairs"]).reshape(-1, 2)
cc = decode(d["ccg"]["counts"]).reshape(-1, d["ccg"]["n_bins"])
want(len(pairs) >= len(uniq), f"{len(pairs)} pairs")
half, bw = 0.05 * fs, 0.001 * fs
for p, (a, b) in enumerate(pairs):
    ta, tb = st[cl == ids[a]], st[cl == ids[b]]
    x = ((tb[None, :] - ta[:, None]).ravel().astype(np.float64) + half) / bw
    h = np.bincount(x[(x >= 0) & (x < 100)].astype(int), minlength=100)
    want(np.array_equal(h, cc[p]), f"CCG of units {ids[a]}, {ids[b]}: {h.sum()} pairs expected, {cc[p].sum()} embedded")
print(f"{len(pairs)} cross-correlograms equal numpy's; e.g. units {ids[pairs[0][0]]}, {ids[pairs[0][1]]}: {cc[0].sum()} pairs")
# autocorrelograms: |lag| in 0.5 ms bins over [0, 50) ms, each pair once
acg = decode(d["acg"]["counts"]).reshape(-1, d["acg"]["n_bins"])
for u, i in enumerate(ids):
    t = st[cl == i]
    lag = (t[None, :] - t[:, None])[np.triu_indices(len(t), 1)].astype(np.float64) / (0.0005 * fs)
    h = np.bincount(lag[lag < 100].astype(int), minlength=100)
    want(np.array_equal(h, acg[u]), f"ACG of unit {i}")
want(d["acg"]["ring_full"] == [], "no unit overflows the correlogram ring")
# the subsample: every stride-th spike of the unit, stride = ceil(n / cap), times within the u16 step
sp = d["spikes"]
off, tq = decode(sp["off"]), decode(sp["t"])
cap = sp["cap"]
for u, i in enumerate(ids):
    t = st[cl == i] / fs
    stride = -(-len(t) // cap)
    sel = t[::stride]
    got = tq[off[u]:off[u + 1]] / 65534 * sp["t_hi"]
    want(len(sel) == len(got) and len(got) <= cap and np.all(np.abs(sel - got) <= sp["t_hi"] / 65534),
         f"subsample of unit {i}")
# the template of each unit peaks where the table says
pk = decode(d["templates"]["peak_ch"])
want(col["peak_ch"]["values"] == pk.tolist() and (pk >= 0).all(), "peak channels")
# the traces view: each stretch equals the recording high-passed forward and backward (scipy, qc's filter: order-3
# Butterworth at 300 Hz) over the stretch and a 600-sample halo, less the median across channels, within its
# int8 step; its spikes are exactly the sorting's spikes in the stretch
from scipy.signal import butter, sosfiltfilt
tr = d["traces"]
want(tr is not None and tr["n"] == 4 and tr["n_t"] == 3000, f"4 stretches of 100 ms ({tr and tr['n']})")
raw = np.fromfile(os.path.join(out, "..", "sim", "recording.bin"), dtype=np.int16).reshape(-1, 32).T.astype(np.float64)
uvb = json.load(open(os.path.join(out, "source.json")))["uv_per_bit"]  # what the sort read it with
sos = butter(3, 300, btype="highpass", fs=fs, output="sos")
data, scale = decode(tr["data"]).reshape(tr["n"], 32, tr["n_t"]), decode(tr["scale"])
ss, stt, su = decode(tr["spike_stretch"]), decode(tr["spike_t"]), decode(tr["spike_unit"])
L, H = tr["n_t"], 600
for i, s0 in enumerate(tr["start_s"]):
    a = int(round(s0 * fs))
    x = sosfiltfilt(sos, raw[:, a - H:a + L + H] * uvb, axis=1)
    x = (x - np.median(x, axis=0))[:, H:H + L]
    err = np.abs(data[i] * scale[i] - x).max()
    want(err <= scale[i] * 0.5 + 1e-3 * np.abs(x).max(), f"stretch {i} at {s0:.3f} s: off by {err:.3f} µV (step {scale[i]:.3f})")
    m = (st >= a) & (st < a + L)
    got = sorted(zip(stt[ss == i].tolist(), ids[su[ss == i]].tolist()))
    want(got == sorted(zip((st[m] - a).tolist(), cl[m].tolist())), f"spikes of stretch {i}")
print(f"traces: {tr['n']} stretches of {L} samples equal scipy's within their int8 step; {len(ss)} spikes marked")
for e in errors:
    print("  " + e)
sys.exit(1 if errors else 0)
PYEOF

# 1b. without any optional file: each absence is a note on the page
cp -r "$T/out" "$T/bare"
rm -f "$T/bare"/{spike_positions.npy,run_summary.json,qc/qc_metrics.tsv,cluster_qc_label.tsv,drift.npy,driftmap.npy,amplitudes.npy,similar_templates.npy}
expect 0 "" "$BS" report "$T/bare" -q
$PY - "$T/bare/report.html" "$FIX" <<'PYEOF' && ok || bad "notes of the bare folder"
import sys, os
sys.path.insert(0, os.path.dirname(sys.argv[2]))
from report_fixtures import load_report
d, html = load_report(sys.argv[1])
notes = " ".join(d["notes"])
missing = [k for k in ("qc_metrics.tsv absent", "run_summary.json absent", "drift.npy absent", "spike_positions.npy absent",
                       "amplitudes.npy absent", "similar units are the nearest ones") if k not in notes]
src = d["drift_map"]["source"]
print(f"{len(d['notes'])} notes; drift map from {src}")
ok = not missing and src.startswith("template positions") and d["motion"] is None and d["run"] is None and d["mem"] is None
ok = ok and d["similar"]["source"].startswith("nearest") and d["spikes"]["have_amp"] is False
if missing:
    print("missing notes:", missing)
sys.exit(0 if ok else 1)
PYEOF

# 1c. the recording moved away (source.json names a missing file) or --traces 0: the page is written
#     without traces, a note says why
cp -r "$T/out" "$T/moved"
sed -i "s|$T/sim/recording.bin|$T/gone/recording.bin|g" "$T/moved/source.json"
expect 0 "" "$BS" report "$T/moved" -q
expect 0 "" "$BS" report "$T/out" -o "$T/notraces.html" --traces 0 -q
$PY - "$T/moved/report.html" "$T/notraces.html" "$FIX" <<'PYEOF' && ok || bad "pages without traces"
import sys, os
sys.path.insert(0, os.path.dirname(sys.argv[3]))
from report_fixtures import load_report
d, _ = load_report(sys.argv[1])
e, _ = load_report(sys.argv[2])
ok = d["traces"] is None and any("cannot be opened" in n for n in d["notes"]) and e["traces"] is None
print("moved recording: traces", d["traces"], [n for n in d["notes"] if "traces" in n])
sys.exit(0 if ok else 1)
PYEOF
expect 1 "--traces: expected 0 to 16" "$BS" report "$T/out" --traces 17

# 2. with the optional files
cp -r "$T/out" "$T/full"
rm -f "$T/full/report.html"
$PY "$FIX" optional "$T/full" || bad "writing the optional files"
expect 0 "" "$BS" report "$T/full" -o "$T/full-report.html" --spikes-per-unit 50 --similar 3
[ -e "$T/full/report.html" ] && bad "-o still wrote OUT/report.html" || ok
$PY - "$T/full" "$T/full-report.html" "$FIX" <<'PYEOF' && ok || bad "embedded data with the optional files"
import sys, os, json, numpy as np
sys.path.insert(0, os.path.dirname(sys.argv[3]))
from report_fixtures import load_report, decode, QC_METRICS
out = sys.argv[1]
d, html = load_report(sys.argv[2])
errors = []
def want(cond, what):
    if not cond:
        errors.append(what)
ids = decode(d["unit_ids"]).tolist()
col = {c["key"]: c for c in d["columns"]}
lines = [l.split("\t") for l in open(os.path.join(out, "qc", "qc_metrics.tsv")).read().splitlines()]
for k, name in enumerate(lines[0][1:], 1):
    want(name in col and col[name]["kind"] == "num", f"qc column {name}")
    if name not in col:
        continue
    file_vals = {int(r[0]): float(r[k]) for r in lines[1:]}
    for u, i in enumerate(ids):
        a, b = col[name]["values"][u], file_vals[i]
        want((a is None and np.isnan(b)) or (a is not None and abs(a - b) <= 1e-6 * max(1, abs(b))),
             f"{name} of unit {i}: {a} vs {b}")
want(len(lines[0]) - 1 == len(QC_METRICS), "all qc metrics")
qcl = dict(l.split("\t") for l in open(os.path.join(out, "cluster_qc_label.tsv")).read().splitlines()[1:])
want(col["qc_label"]["values"] == [qcl[str(i)] for i in ids], "qc_label column")
want(d["notes"] == [], f"no notes: {d['notes']}")
# positions: mean of spike_positions per unit
cl = np.load(os.path.join(out, "spike_clusters.npy"))
xy = np.load(os.path.join(out, "spike_positions.npy")).astype(np.float64)
want(np.allclose(col["y_um"]["values"], [xy[cl == i, 1].mean() for i in ids], atol=1e-3), "y_um = mean spike depth")
off = decode(d["spikes"]["off"])
want(np.diff(off).max() <= 50, "--spikes-per-unit 50 caps the subsample")
want(d["similar"]["n"] == 3, "--similar 3")
# drift map from driftmap.npy: every row lands in a cell or is counted outside
dm = d["drift_map"]
dmf = np.load(os.path.join(out, "driftmap.npy"))
cnt = decode(dm["count"])
want(dm["source"].startswith("driftmap.npy"), "drift map source")
want(int(cnt.sum()) + dm["outside"] == len(dmf), f"drift map holds {cnt.sum()} + {dm['outside']} of {len(dmf)} spikes")
# motion = drift.npy
mo = d["motion"]
drift = np.load(os.path.join(out, "drift.npy"))
want((mo["nt"], mo["nb"]) == drift.shape and np.allclose(decode(mo["um"]).reshape(drift.shape), drift), "motion")
want(np.allclose(mo["t_s"], np.load(os.path.join(out, "drift_times_s.npy"))), "motion times")
# run summary and memory timeline
rs = json.load(open(os.path.join(out, "run_summary.json")))
want([s["name"] for s in d["run"]["stages"]] == [s["name"] for s in rs["stages"]], "stages")
want(all(abs(a["wall_s"] - b["wall_s"]) < 1e-9 for a, b in zip(d["run"]["stages"], rs["stages"])), "stage times")
total, peak = 0, 0
for l in open(os.path.join(out, "mem_trace.jsonl")):
    e = json.loads(l)
    total += e["bytes"] if e["op"] == "alloc" else -e["bytes"]
    peak = max(peak, total)
mem = d["mem"]
want(mem["peak_bytes"] == peak, f"memory peak {mem['peak_bytes']} vs {peak}")
stack = np.sum([s["bytes"] for s in mem["series"]], axis=0)
tags = [s["tag"] for s in mem["series"]]
want(stack.max() == peak, "the stacked timeline reaches the peak")
want(len(tags) == 11 and tags[0] == "match/batch" and tags[-1] == "other", f"series: the 10 largest tags, then other: {tags}")
print(f"qc columns {len(lines[0]) - 1}, drift map {cnt.sum()} spikes, motion {drift.shape}, "
      f"{len(mem['series'])} memory series, peak {peak / 2**20:.0f} MiB")
for e in errors:
    print("  " + e)
sys.exit(1 if errors else 0)
PYEOF

# 3. required inputs and malformed files: exit 2 naming the file, a previous page untouched
mkdir -p "$T/empty"
expect 2 "not a Phy folder: params.py is missing" "$BS" report "$T/empty"
expect 2 "not a folder" "$BS" report "$T/nowhere"
cp -r "$T/out" "$T/bad"
rm "$T/bad/spike_times.npy"
expect 2 "spike_times.npy is missing" "$BS" report "$T/bad"
cp "$T/out/spike_times.npy" "$T/bad/"
$PY -c "
import numpy as np
t = np.load('$T/bad/spike_times.npy'); t[5], t[6] = t[6] + 1, t[5]; np.save('$T/bad/spike_times.npy', t)"
expect 2 "ascending order" "$BS" report "$T/bad"
# a spike at sample 2^62: report and qc refuse the folder with the one shared check (phy_read.h); without
# the raw file the report bounds the times by a year at the folder's rate instead of drawing 1.5e14 s
$PY -c "
import numpy as np
t = np.load('$T/out/spike_times.npy'); t[-1] = 2**62; np.save('$T/bad/spike_times.npy', t)"
last=$(($($PY -c "import numpy as np; print(len(np.load('$T/out/spike_times.npy')))") - 1))
ns=$(($(stat -c %s "$T/sim/recording.bin") / 64))
msg="spike_times.npy: spike $last at sample 4611686018427387904 is outside the recording's $ns samples"
expect_fixed 2 "$msg" "$BS" report "$T/bad"
expect_fixed 2 "$msg" "$BS" qc "$T/bad" --recording "$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000 -q
cp "$T/bad/params.py" "$T/params.keep"
sed -i "s#^dat_path *=.*#dat_path = ['gone.bin']#" "$T/bad/params.py"
expect_fixed 2 "spike $last at sample 4611686018427387904 is outside the recording: 1.54e+14 s at 30000 Hz" "$BS" report "$T/bad"
cp "$T/params.keep" "$T/bad/params.py"
cp "$T/out/spike_times.npy" "$T/bad/"
$PY -c "
import numpy as np
c = np.load('$T/bad/spike_clusters.npy'); c[3] = -4; np.save('$T/bad/spike_clusters.npy', c)"
expect 2 "spike_clusters.npy: row 3: expected an integer id" "$BS" report "$T/bad"
cp "$T/out/spike_clusters.npy" "$T/bad/"
cp "$T/first.html" "$T/bad/report.html"
mkdir -p "$T/bad/qc"; printf 'id\tsnr\n1\t2\n' >"$T/bad/qc/qc_metrics.tsv"
expect 2 "qc_metrics.tsv: line 1: expected a header starting with 'cluster_id'" "$BS" report "$T/bad"
cmp -s "$T/bad/report.html" "$T/first.html" && ok || bad "a failed run changed the previous report.html"
printf 'cluster_id\tsnr\nx\t2\n' >"$T/bad/qc/qc_metrics.tsv"
expect 2 "line 2: field 'cluster_id'" "$BS" report "$T/bad"
rm "$T/bad/qc/qc_metrics.tsv"
printf '{"stages": [{"name": "x", "wall_s": "slow"}]}' >"$T/bad/run_summary.json"
expect 2 "run_summary.json: field 'stages\[0\].wall_s': expected a number" "$BS" report "$T/bad"
printf '{"stages": ' >"$T/bad/run_summary.json"
expect 2 "run_summary.json: expected a JSON object" "$BS" report "$T/bad"
printf '{"mem_trace": "trace.jsonl"}' >"$T/bad/run_summary.json"
printf '{"t_s": 0, "op": "alloc", "tag": "a/b", "bytes": 10, "device": "host"}\nnot json\n' >"$T/bad/trace.jsonl"
expect 2 "trace.jsonl: line 2" "$BS" report "$T/bad"
rm "$T/bad/run_summary.json"
printf 'sample_rate = fast\n' >"$T/bad/params.py"
expect 2 "params.py: line 1: field 'sample_rate'" "$BS" report "$T/bad"

# 4. usage
expect 1 "missing the output folder" "$BS" report
expect 1 "unknown option" "$BS" report "$T/out" --bogus
expect 1 "--similar: expected 0 to 50" "$BS" report "$T/out" --similar 99
expect 1 "needs a value" "$BS" report "$T/out" -o
"$BS" report --help | grep -q "curation JSON" && ok || bad "--help"

finish
