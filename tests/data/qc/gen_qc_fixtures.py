#!/usr/bin/env python3
"""gen_qc_fixtures.py - reference values for tests/unit/test_qc_metrics.c.

    python3 tests/data/qc/gen_qc_fixtures.py   # rewrites tests/data/qc/qc_fixtures.json

An independent transcription of the quality-metric definitions boundsort follows (SpikeInterface
0.105 metrics/quality, docs/FORMATS.md §7; Allen ecephys_spike_sorting for max/cumulative drift)
in numpy / scipy, with scikit-learn for the parts SpikeInterface delegates to it (IncrementalPCA,
LinearDiscriminantAnalysis, NearestNeighbors). Inputs are drawn from fixed seeds and include the
boundary cases (ISIs on the threshold, spikes on the last histogram edge, too few spikes, singular
covariances, nearest-neighbour subsampling). NaN is stored as null.

Deliberate differences from SpikeInterface, also made by boundsort (qc.h):
  * isolation_distance / l_ratio are NaN when the unit's covariance is singular (fewer spikes than
    features + 1), where numpy's inverse returns meaningless huge values.
  * max_drift / cumulative_drift are not rounded to 0.01 µm, and cumulative_drift is NaN (not 0)
    when no interval has enough spikes.
Needs numpy, scipy and scikit-learn (Debian: python3-numpy python3-scipy python3-sklearn).
"""
import json
import math
from pathlib import Path

import numpy as np
from scipy import special, stats
from scipy.ndimage import gaussian_filter1d
from scipy.spatial.distance import cdist
from sklearn.decomposition import IncrementalPCA
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.neighbors import NearestNeighbors

OUT = Path(__file__).resolve().parent / "qc_fixtures.json"


def clean(x):
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if isinstance(x, np.ndarray) and x.dtype == np.float32:
        # shortest decimal that reads back as the same float32 (the C test parses doubles and casts)
        if x.ndim > 1:
            return [clean(r) for r in x]
        return [None if math.isnan(v) else float(str(v)) for v in x]
    if isinstance(x, np.ndarray):
        return clean(x.tolist())
    if isinstance(x, (np.floating, float)):
        return None if math.isnan(x) else float(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    return x


# ---------------------------------------------------------------- spike trains

def presence_ratio(t, T, fs, bin_s, ratio):
    B = int(bin_s * fs)
    if T < B or len(t) == 0:
        return np.nan
    edges = np.arange(0, T // B * B + 1, B)
    fr = len(t) / (T / fs)
    thr = math.floor(fr * bin_s * ratio)
    h, _ = np.histogram(t, bins=edges)
    return np.sum(h > thr) / (len(edges) - 1)


def isi_violations(t, T, fs, thr_ms, min_ms):
    if len(t) == 0:
        return np.nan, -1
    thr, mn = thr_ms / 1000, min_ms / 1000
    count = int(np.sum(np.diff(t / fs) < thr))
    return (count / (2 * len(t) * (thr - mn))) / (len(t) / (T / fs)), count


def rp_violations(t, T, fs, rp_ms, c_ms):
    n = len(t)
    if n == 0:
        return np.nan, -1
    t_c, t_r = int(round(c_ms * fs * 1e-3)), int(round(rp_ms * fs * 1e-3))
    d = t[None, :] - t[:, None]
    nv = int(np.sum(np.triu(d <= t_r, 1)))
    if n <= 1:
        return np.nan, nv
    D = 1 - nv * (T - 2 * n * t_c) / (n ** 2 * (t_r - t_c))
    return (1.0 if D < 0 else 1 - math.sqrt(D)), nv


def sliding_rp(t, T, fs, bin_ms=0.25, window_s=1.0, exclude_ms=0.5, max_rp_ms=10.0, min_spikes=0):
    n = len(t)
    if n <= min_spikes or n == 0:
        return np.nan
    window_ms = 2 * window_s * 1000
    W = int(round(fs * window_ms / 2 * 1e-3))
    b = int(round(fs * bin_ms * 1e-3))
    W -= W % b
    half = W // b
    # positive half of the autocorrelogram by brute force over ordered pairs i != j
    d = (t[:, None] - t[None, :]).ravel()
    self_pair = np.eye(n, dtype=bool).ravel()
    d = d[~self_pair]
    d = d[(d >= 0) & (d < W)]
    acg = np.bincount(d // b, minlength=half)[:half]
    edges_s = (np.arange(0, half + 1) * b * 1e3 / fs) / 1000
    n_rp = int(max_rp_ms / 1000 / edges_s[1])
    rp_edges = edges_s[: n_rp + 1]
    centres = (rp_edges[:-1] + rp_edges[1:]) / 2
    obs = np.cumsum(acg[:n_rp])
    fr = n / (T / fs)
    dur = n / fr
    conts = np.arange(0.5, 35.5, 0.5) / 100
    for c in conts:
        nc, nb = n * c, n * (1 - c)
        ve = 2 * rp_edges[1:] / dur * nc * (nb + (nc - 1) / 2)
        conf = 1 - stats.poisson.cdf(obs, ve)
        if np.any(conf[centres > exclude_ms / 1000] > 0.9):
            return c
    return np.nan


def amplitude_cutoff(a, bins=100, sigma=3, min_ratio=5):
    a = np.asarray(a, dtype=np.float32)
    if len(a) / bins < min_ratio:
        return np.nan
    if np.median(a) < 0:
        a = -a
    h = np.histogram(a, bins)[0]
    pdf = gaussian_filter1d(h, sigma, mode="nearest")
    G = np.where(pdf >= pdf[0])[0][-1]
    missed = np.sum(pdf[G + 1:])
    return min(missed / (len(a) + missed), 0.5)


def drift(t, y, T, fs, interval_s=60, min_spikes=100, max_nan=0.5, min_bins=2):
    B = int(interval_s * fs)
    edges = np.arange(0, T // B * B + 1, B)
    if len(edges) - 1 < min_bins or len(t) == 0:
        return np.nan, np.nan, np.nan
    ref = np.median(y)
    bounds = np.searchsorted(t, edges, side="left")
    med = np.full(len(edges) - 1, np.nan)
    for k, (i0, i1) in enumerate(zip(bounds[:-1], bounds[1:])):
        if i1 - i0 >= min_spikes:
            med[k] = np.median(y[i0:i1])
    d = med - ref
    if np.sum(np.isnan(d)) > max_nan * len(d):
        return np.nan, np.nan, np.nan
    return (np.nanmax(d) - np.nanmin(d), np.nanstd(d), np.nanmedian(np.abs(d - np.nanmedian(d))))


def allen_drift(t, y, t0, t1, fs, interval=100.0, min_spikes=10):
    ts = t / fs
    starts = np.arange(t0 / fs, t1 / fs, interval)
    med = []
    for a in starts:
        r = (ts > a) & (ts < a + interval)
        med.append(np.median(y[r]) if np.sum(r) >= min_spikes and np.sum(r) > 0 else np.nan)
    med = np.array(med)
    if len(med) == 0 or np.all(np.isnan(med)):
        return np.nan, np.nan
    return np.nanmax(med) - np.nanmin(med), np.nansum(np.abs(np.diff(med)))


def refractory_train(rng, rate, T, fs, refr_s, contamination=0.0):
    """Poisson train with a dead time, plus an independent Poisson contamination."""
    isi = rng.exponential(1 / rate, int(rate * T / fs * 1.5) + 10) + refr_s
    s = np.cumsum(isi)
    s = s[s < T / fs]
    if contamination > 0:
        c = rng.uniform(0, T / fs, int(len(s) * contamination))
        s = np.concatenate([s, c])
    return np.unique(np.floor(np.sort(s) * fs).astype(np.int64))


# ---------------------------------------------------------------- PCA metrics

def mahalanobis(X, lab, s):
    me, ot = X[lab == s], X[lab != s]
    n = min(len(me), len(ot))
    if n < 2 or len(me) <= X.shape[1]:
        return np.nan, np.nan
    mu = me.mean(0, keepdims=True)
    VI = np.linalg.inv(np.cov(me.T))
    d_o = np.sort(cdist(mu, ot, "mahalanobis", VI=VI)[0])
    return d_o[n - 1] ** 2, np.sum(1 - stats.chi2.cdf(d_o ** 2, X.shape[1])) / len(me)


def d_prime(X, lab, s):
    y = lab == s
    if y.all() or (~y).all():
        return np.nan
    p = LinearDiscriminantAnalysis(n_components=1).fit_transform(X, y)
    return (p[y].mean() - p[~y].mean()) / np.sqrt((p[y].var() + p[~y].var()) / 2)


def nn_rates(X, lab, s, max_spikes, k):
    if len(np.unique(lab)) == 1:
        return 1.0, 0.0
    me = lab == s
    Z = np.concatenate([X[me], X[~me]])
    n_me = int(np.sum(me))
    ratio = max_spikes / len(X)
    if ratio < 1:
        Z = Z[np.arange(0, Z.shape[0] - 1, 1 / ratio).astype(int)]
        n_me = int(n_me * ratio)
    idx = NearestNeighbors(n_neighbors=k).fit(Z).kneighbors(return_distance=False)
    return np.mean(idx[:n_me].ravel() < n_me), np.mean(idx[n_me:].ravel() < n_me)


def silhouette(X, lab, s):
    me = X[lab == s]
    a = cdist(me.mean(0, keepdims=True), me)[0]
    best, bd = np.inf, None
    for l in np.unique(lab):
        if l == s:
            continue
        d = cdist(X[lab == l].mean(0, keepdims=True), me)[0]
        if d.mean() < best:
            best, bd = d.mean(), d
    if bd is None:
        return np.nan
    return np.mean((bd - a) / np.maximum(bd, a))


def clusters(rng, sizes, d, spread=3.0, scale=None):
    X, lab = [], []
    for i, n in enumerate(sizes):
        c = rng.normal(0, spread, d)
        A = rng.normal(0, 1, (d, d)) * (scale if scale is not None else 0.3) + np.eye(d)
        X.append(rng.normal(0, 1, (n, d)) @ A + c)
        lab += [i] * n
    X = np.concatenate(X)
    lab = np.array(lab, dtype=np.int32)
    perm = rng.permutation(len(lab))
    return X[perm], lab[perm]


def main():
    rng = np.random.default_rng(20261122)
    fx = {"train": [], "amplitude_cutoff": [], "drift": [], "pca": [], "ipca": [], "special": []}

    # ---- spike trains: rate, dead time, contamination, duration, fs
    trains = [(8.0, 0.002, 0.0, 150.0, 30000.0), (15.0, 0.0016, 0.05, 200.0, 30000.0), (3.0, 0.0, 0.0, 130.0, 30000.0),
              (30.0, 0.0012, 0.2, 61.0, 30000.0), (5.0, 0.0025, 0.0, 45.0, 25000.0), (50.0, 0.0008, 0.5, 70.0, 30000.0),
              (0.5, 0.002, 0.0, 100.0, 30000.0)]
    for rate, refr, cont, dur, fs in trains:
        T = int(dur * fs) + int(rng.integers(0, 1000))
        t = refractory_train(rng, rate, T, fs, refr, cont)
        t = t[t < T]
        if len(t) > 3:  # pairs exactly on the ISI threshold (1.5 ms) and on the refractory period (1 ms)
            t = np.unique(np.concatenate([t, [t[1] + int(round(1.5e-3 * fs)), t[2] + int(round(1e-3 * fs))]]))
            t = t[t < T]
        if rate == 3.0:  # a spike exactly on the last presence-ratio edge
            B = int(60 * fs)
            t = np.unique(np.concatenate([t, [T // B * B]]))
        case = {"t": t, "T": T, "fs": fs}
        for bin_s, ratio in [(60.0, 0.0), (10.0, 0.5), (7.5, 0.0)]:
            case[f"presence_{bin_s}_{ratio}"] = presence_ratio(t, T, fs, bin_s, ratio)
        for thr, mn in [(1.5, 0.0), (2.0, 0.5)]:
            r, c = isi_violations(t, T, fs, thr, mn)
            case[f"isi_{thr}_{mn}"] = [r, c]
        for rp, cm in [(1.0, 0.0), (2.0, 0.3)]:
            r, c = rp_violations(t, T, fs, rp, cm)
            case[f"rp_{rp}_{cm}"] = [r, c]
        case["sliding_rp"] = sliding_rp(t, T, fs)
        fx["train"].append(case)

    # ---- amplitudes: Gaussian around -mu, some cut at the detection threshold, sizes around 500
    for n, mu, sd, cut, bins in [(3000, -80.0, 12.0, -65.0, 100), (800, -40.0, 9.0, -38.0, 100), (499, -60.0, 5.0, None, 100),
                                 (5000, 120.0, 20.0, 100.0, 500), (2600, -200.0, 40.0, None, 500), (1200, -30.0, 6.0, -28.0, 100)]:
        a = rng.normal(mu, sd, n).astype(np.float32)
        if cut is not None:
            a = a[(a <= cut) if mu < 0 else (a >= cut)]
        fx["amplitude_cutoff"].append({"a": a, "bins": bins, "sigma": 3.0, "min_ratio": 5.0,
                                       "cutoff": amplitude_cutoff(a, bins, 3.0, 5.0),
                                       "median": float(np.median(a.astype(np.float64)))})

    # ---- drift: depths with a slow trend and noise; some sparse intervals
    for dur, rate, trend, gap in [(400.0, 6.0, 20.0, False), (300.0, 2.0, 5.0, False), (250.0, 10.0, -30.0, True),
                                  (100.0, 20.0, 10.0, False)]:
        fs = 30000.0
        T = int(dur * fs) + 777
        t = refractory_train(rng, rate, T, fs, 0.002)
        if gap:  # few spikes in the middle
            keep = (t < T * 0.3) | (t > T * 0.7) | (rng.uniform(size=len(t)) < 0.05)
            t = t[keep]
        y = (500 + trend * t / T + rng.normal(0, 4, len(t))).astype(np.float32)
        ptp, std, mad = drift(t, y.astype(np.float64), T, fs)
        t0, t1 = int(max(0, t[0] - 12345)), int(t[-1] + 999)
        md, cd = allen_drift(t, y.astype(np.float64), t0, t1, fs)
        fx["drift"].append({"t": t, "y": y, "T": T, "fs": fs, "t0": t0, "t1": t1,
                            "ptp": ptp, "std": std, "mad": mad, "max_drift": md, "cumulative_drift": cd})

    # ---- PCA metrics on synthetic clusters
    for sizes, d, max_spikes, scale in [([120, 300, 80], 8, 10000, None), ([250, 90, 200, 60], 10, 400, None),
                                        ([20, 150], 25, 10000, None), ([150], 6, 10000, None),
                                        ([200, 200, 200], 5, 10000, 0.0)]:
        X, lab = clusters(rng, sizes, d, scale=scale)
        X = X.astype(np.float32).astype(np.float64)
        res = []
        Xj = X.astype(np.float32)  # stored as float32 decimals, which read back as exactly X
        for s in range(len(sizes)):
            iso, lr = mahalanobis(X, lab, s)
            hit, miss = nn_rates(X, lab, s, max_spikes, 5)
            res.append({"self": s, "isolation_distance": iso, "l_ratio": lr, "d_prime": d_prime(X, lab, s),
                        "nn_hit_rate": hit, "nn_miss_rate": miss, "silhouette": silhouette(X, lab, s)})
        fx["pca"].append({"X": Xj, "lab": lab, "max_spikes": max_spikes, "k": 5, "results": res})

    # ---- incremental PCA: batches like SpikeInterface's per-unit partial fits on one channel
    for nt, k, sizes in [(20, 5, [40, 12, 300, 5]), (30, 3, [8, 8, 8])]:
        basis = rng.normal(0, 1, (4, nt))
        batches = []
        for n in sizes:
            w = rng.normal(0, 1, (n, 4)) * [5, 3, 2, 1] + rng.normal(0, 2, 4)
            batches.append((w @ basis + rng.normal(0, 0.5, (n, nt))).astype(np.float32))
        m = IncrementalPCA(n_components=k, whiten=True)
        for b in batches:
            m.partial_fit(b.astype(np.float64))
        probe = rng.normal(0, 3, (6, nt)).astype(np.float32)
        fx["ipca"].append({"nt": nt, "k": k, "batches": batches, "probe": probe, "proj": m.transform(probe.astype(np.float64)),
                           "mean": m.mean_, "ev": m.explained_variance_})

    # ---- special functions
    for a, x in [(0.5, 0.1), (1.0, 1.0), (3.0, 2.5), (10.0, 12.0), (25.0, 10.0), (150.0, 160.0), (2.5, 40.0),
                 (1000.0, 950.0)]:
        fx["special"].append({"a": a, "x": x, "q": special.gammaincc(a, x)})
    fx["poisson"] = [{"k": k, "mu": mu, "cdf": stats.poisson.cdf(k, mu)} for k, mu in
                     [(0, 0.3), (3, 2.0), (17, 9.5), (40, 60.0), (2, 1e-6), (200, 180.0)]]
    fx["chi2"] = [{"x": x, "dof": dof, "sf": stats.chi2.sf(x, dof)} for x, dof in
                  [(1.0, 1), (30.0, 20), (150.0, 45), (3.0, 10), (500.0, 60)]]
    OUT.write_text(json.dumps(clean(fx), separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
