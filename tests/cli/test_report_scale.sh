#!/usr/bin/env bash
# test_report_scale.sh - the report of a large sorting: a synthetic Phy folder
# with 1,000 units and 1,000,000 spikes (tests/browser/report_fixtures.py).
# The report builds within a 20 MiB budget for its buffers (--mem 20M), less
# than the 27 MiB of per-spike files it reads (they are streamed), the page
# stays under its size bound (src/report/report.h: 0.9 MB + 7 KB per unit +
# 4 bytes per spike held for splitting), every spike's time and amplitude
# held for splits equals numpy's within its quantization (and --split-spikes
# below the count holds none), a cross-correlogram equals numpy's, and
# the page is ready in headless Chromium within 15 s and stays responsive
# (tests/browser/report_browser.py scale). The browser part is skipped (77)
# only when Chromium is not installed; the rest has run by then.
. "$(dirname "$0")/lib.sh"

$PY "$SRC/tests/browser/report_fixtures.py" scale "$T/big" || { echo "writing the synthetic folder failed"; exit 1; }
$PY - "$BS" "$T/big" "$SRC/tests/browser" <<'PYEOF' && ok || bad "report of 1,000 units and 1,000,000 spikes"
import os, resource, subprocess, sys, time
import numpy as np
sys.path.insert(0, sys.argv[3])
from report_fixtures import load_report, decode
bs, big = sys.argv[1], sys.argv[2]
t0 = time.time()
r = subprocess.run([bs, "report", big, "--mem", "20M"], stderr=subprocess.PIPE, text=True)
print(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "")
wall = time.time() - t0
rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
size = os.path.getsize(os.path.join(big, "report.html"))
spikes_mb = sum(os.path.getsize(os.path.join(big, f)) for f in os.listdir(big) if f.startswith(("spike_", "amplitudes"))) / 1e6
print(f"report: exit {r.returncode}, {wall:.1f} s, peak RSS {rss_mb:.0f} MB (per-spike files: {spikes_mb:.0f} MB), "
      f"page {size / 1e6:.2f} MB")
errors = []
def want(cond, what):
    if not cond:
        errors.append(what)
want(r.returncode == 0, f"exit code {r.returncode} with --mem 20M")
want(size <= 0.9e6 + 7e3 * 1000 + 4 * 1000000,
     f"page size {size / 1e6:.2f} MB over the bound of 0.9 MB + 7 KB per unit + 4 bytes per spike")
if not os.environ.get("BS_SANITIZED"):  # ASan's shadow memory inflates RSS
    want(rss_mb < 150, f"peak RSS {rss_mb:.0f} MB: per-spike data should be streamed")
d, html = load_report(os.path.join(big, "report.html"))
want(d["n_units"] == 1000 and d["n_spikes"] == 1000000, "units and spikes")
ids = decode(d["unit_ids"])
want(np.array_equal(ids, np.arange(1000)), "unit ids 0..999")
off = decode(d["spikes"]["off"])
want(np.diff(off).max() <= d["spikes"]["cap"], "subsample cap")
st = np.load(os.path.join(big, "spike_times.npy")); cl = np.load(os.path.join(big, "spike_clusters.npy"))
pairs = decode(d["ccg"]["pairs"]).reshape(-1, 2); cc = decode(d["ccg"]["counts"]).reshape(-1, 100)
fs = d["fs_hz"]
p = int(np.argmax(cc.sum(1)))
a, b = pairs[p]
ta, tb = st[cl == ids[a]], st[cl == ids[b]]
lag = (tb[None, :] - ta[:, None]).ravel().astype(np.float64)
x = (lag + 0.05 * fs) / (0.001 * fs)
h = np.bincount(x[(x >= 0) & (x < 100)].astype(int), minlength=100)
want(np.array_equal(h, cc[p]), f"CCG of units {ids[a]}, {ids[b]}")
print(f"{len(pairs)} cross-correlograms; units {ids[a]}, {ids[b]}: {cc[p].sum()} pairs, equal to numpy's")
# every spike, for splits: unit u's k-th spike in file order, time u16 over [0, t_hi], amplitude u8 over its range
al = d["spikes"]["all"]
amps = np.load(os.path.join(big, "amplitudes.npy")).ravel()
aoff = decode(al["off"]).astype(np.int64)
want(np.array_equal(np.diff(aoff), np.bincount(cl, minlength=1000)), "held spikes: offsets are the unit counts")
qt, qa, lo, hi = decode(al["t"]), decode(al["amp"]), decode(al["amp_lo"]), decode(al["amp_hi"])
for u in (0, 500, 999):
    m = cl == ids[u]
    t = qt[aoff[u]:aoff[u + 1]] / 65534 * d["spikes"]["t_hi"]
    want(np.abs(t - st[m] / fs).max() <= d["spikes"]["t_hi"] / 65534 * 0.51, f"held times of unit {ids[u]}")
    am = lo[u] + qa[aoff[u]:aoff[u + 1]] / 254 * (hi[u] - lo[u])
    want(np.abs(am - amps[m]).max() <= (hi[u] - lo[u]) / 254 * 0.501 + 1e-4 * abs(hi[u]),
         f"held amplitudes of unit {ids[u]}")
r = subprocess.run([bs, "report", big, "-o", big + "/nosplit.html", "--split-spikes", "999999"], stderr=subprocess.PIPE, text=True)
d2, _ = load_report(big + "/nosplit.html")
want(r.returncode == 0 and d2["spikes"]["all"] is None and any("cannot be split" in n for n in d2["notes"]),
     "--split-spikes under the spike count: no spikes held, a note says so")
for e in errors:
    print("  " + e)
sys.exit(1 if errors else 0)
PYEOF

. "$SRC/tests/browser/browser_env.sh"
bs_browser_setup; rc=$?
if [ "$rc" = 0 ]; then
  timeout 300 "$BS_VPY" "$SRC/tests/browser/report_browser.py" scale "$T/big/report.html" "$T/browser" --max-load-s 15 \
    && ok || bad "the large page in Chromium"
fi
finish || exit 1
[ "$rc" = 0 ] || exit 77
