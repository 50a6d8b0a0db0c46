"""report_fixtures.py - test inputs and a reader for `boundsort report`.

    python3 report_fixtures.py optional DIR   # add the optional files of a sorting folder, synthetically
    python3 report_fixtures.py scale DIR [UNITS SPIKES]  # a synthetic Phy folder (default 1,000 units, 1,000,000 spikes)

The optional files (spike_positions.npy, qc_metrics.tsv, cluster_qc_label.tsv,
drift*.npy, driftmap.npy, run_summary.json and its memory trace) are written by
other parts of boundsort (qc, drift estimation, the run summary); the report
only reads them, so its tests write them here with the layouts of the shared
output contract, from the folder's own spikes where that is easy (counts,
rates, positions near each template's peak channel) and from a fixed-seed
generator otherwise. load_report() extracts the data a report embeds and
decodes its base64 typed arrays into numpy arrays.
"""
import base64
import json
import os
import re
import sys

import numpy as np

QC_METRICS = ["num_spikes", "firing_rate", "presence_ratio", "isi_violations_ratio", "isi_violations_count",
              "rp_contamination", "rp_violations", "sliding_rp_violation", "amplitude_cutoff", "amplitude_median",
              "snr", "isolation_distance", "l_ratio", "d_prime", "nn_hit_rate", "nn_miss_rate", "silhouette",
              "drift_ptp", "drift_std", "drift_mad", "max_drift", "cumulative_drift"]

DTYPES = {"u8": "<u1", "i8": "<i1", "u16": "<u2", "i16": "<i2", "u32": "<u4", "i32": "<i4", "f32": "<f4"}


def decode(o):
    """A {"dtype", "n", "b64"} block as a numpy array."""
    a = np.frombuffer(base64.b64decode(o["b64"]), dtype=DTYPES[o["dtype"]])
    assert a.size == o["n"], (a.size, o["n"])
    return a


def load_report(path):
    html = open(path, encoding="utf-8").read()
    m = re.search(r'<script id="bs-data" type="application/json">(.*?)</script>', html, re.S)
    if not m:
        raise ValueError(f"{path}: no <script id=\"bs-data\">")
    return json.loads(m.group(1)), html


def read_params(folder):
    env = {}
    exec(open(os.path.join(folder, "params.py")).read(), {}, env)
    return env


def unit_positions(folder):
    """Per template: position of the peak channel of template @ whitening_mat_inv (µm)."""
    tpl = np.load(os.path.join(folder, "templates.npy"))
    pos = np.load(os.path.join(folder, "channel_positions.npy")).astype(np.float64)
    winv_path = os.path.join(folder, "whitening_mat_inv.npy")
    if os.path.exists(winv_path):
        tpl = tpl @ np.load(winv_path)
    peak = np.argmax(tpl.max(1) - tpl.min(1), axis=1)
    return pos[peak]


def write_tsv(path, header, rows):
    with open(path, "w") as f:
        f.write("\t".join(header) + "\n")
        for r in rows:
            f.write("\t".join(r) + "\n")


def add_optional(folder, seed=5):
    rng = np.random.default_rng(seed)
    fs = float(read_params(folder)["sample_rate"])
    st = np.load(os.path.join(folder, "spike_times.npy")).astype(np.int64)
    cl = np.load(os.path.join(folder, "spike_clusters.npy")).astype(np.int64)
    tm = np.load(os.path.join(folder, "spike_templates.npy")).astype(np.int64)
    amp = np.load(os.path.join(folder, "amplitudes.npy")).astype(np.float64)
    t_s = st / fs
    T = max(float(t_s[-1]) + 1.0, 1.0) if len(t_s) else 1.0
    # a slow rigid motion of the tissue: 12 µm peak, one period over the recording
    motion = lambda t: 12.0 * np.sin(2 * np.pi * t / T)
    upos = unit_positions(folder)
    xy = upos[tm] + rng.normal(0, 4.0, (len(st), 2))
    xy[:, 1] += motion(t_s)
    np.save(os.path.join(folder, "spike_positions.npy"), xy.astype(np.float32))

    ids = np.unique(cl)
    rows, labels = [], []
    for i in ids:
        n = int((cl == i).sum())
        v = {"num_spikes": n, "firing_rate": n / T, "presence_ratio": rng.uniform(0.5, 1.0),
             "isi_violations_ratio": rng.exponential(0.4), "isi_violations_count": int(rng.integers(0, 20)),
             "rp_contamination": rng.uniform(0, 0.5), "rp_violations": int(rng.integers(0, 10)),
             "sliding_rp_violation": float("nan") if i % 3 == 0 else rng.uniform(0, 0.3),
             "amplitude_cutoff": rng.uniform(0, 0.2), "amplitude_median": float(np.median(amp[cl == i])),
             "snr": rng.uniform(2, 20), "isolation_distance": rng.uniform(5, 80), "l_ratio": rng.uniform(0, 0.5),
             "d_prime": rng.uniform(1, 8), "nn_hit_rate": rng.uniform(0.5, 1), "nn_miss_rate": rng.uniform(0, 0.1),
             "silhouette": rng.uniform(-0.2, 0.8), "drift_ptp": rng.uniform(0, 30), "drift_std": rng.uniform(0, 8),
             "drift_mad": rng.uniform(0, 6), "max_drift": rng.uniform(0, 30), "cumulative_drift": rng.uniform(0, 60)}
        rows.append([str(i)] + ["nan" if isinstance(v[k], float) and np.isnan(v[k]) else
                                (str(v[k]) if isinstance(v[k], int) else f"{v[k]:.6g}") for k in QC_METRICS])
        ok = v["isi_violations_ratio"] < 0.5 and v["presence_ratio"] > 0.8 and v["amplitude_cutoff"] < 0.1
        labels.append([str(i), "good" if ok else "fail"])
    os.makedirs(os.path.join(folder, "qc"), exist_ok=True)
    write_tsv(os.path.join(folder, "qc", "qc_metrics.tsv"), ["cluster_id"] + QC_METRICS, rows)
    write_tsv(os.path.join(folder, "cluster_qc_label.tsv"), ["cluster_id", "qc_label"], labels)
    # two merge proposals among the last four units (qc's merge_proposals.tsv columns)
    if len(ids) >= 4:
        a, b, c, d = (int(x) for x in ids[-4:])
        write_tsv(os.path.join(folder, "merge_proposals.tsv"),
                  ["unit_a", "unit_b", "template_similarity", "distance_um", "refractory_ratio", "expected_refractory",
                   "presence_overlap", "amplitude_ratio", "evidence"],
                  [[str(a), str(b), "0.91", "20", "0", "3.5", "0.8", "0.95", "refractory"],
                   [str(c), str(d), "0.82", "0", "nan", "0", "0", "0.9", "temporal split"]])

    # estimated motion: 2 s bins, 3 blocks over the probe, each following the true motion with an offset
    chan_y = np.load(os.path.join(folder, "channel_positions.npy"))[:, 1]
    nb, bin_s = 3, 2.0
    times = (np.arange(int(np.ceil(T / bin_s))) + 0.5) * bin_s
    depths = np.linspace(chan_y.min(), chan_y.max(), nb + 2)[1:-1]
    drift = np.stack([motion(times) + 2.0 * k for k in range(nb)], axis=1)
    np.save(os.path.join(folder, "drift.npy"), drift.astype(np.float32))
    np.save(os.path.join(folder, "drift_times_s.npy"), times.astype(np.float32))
    np.save(os.path.join(folder, "drift_depths_um.npy"), depths.astype(np.float32))
    np.save(os.path.join(folder, "drift_shanks.npy"), np.zeros(nb, np.int32))
    dm = np.stack([t_s, xy[:, 1], amp], axis=1)
    np.save(os.path.join(folder, "driftmap.npy"), dm.astype(np.float32))

    # run summary and a memory trace: each stage allocates a few buffers, frees them at its end
    stages = [("preprocess", 2.1, 300e6), ("drift", 1.2, 120e6), ("detect", 5.5, 700e6), ("cluster", 3.0, 900e6),
              ("match", 9.8, 1.4e9), ("export", 0.8, 200e6)]
    trace, t, summary = [], 0.0, []
    for name, wall, planned in stages:
        bufs = [(f"{name}/{b}", planned * f) for b, f in (("batch", 0.45), ("work", 0.3), ("scratch", 0.15))]
        for k, (tag, b) in enumerate(bufs):
            trace.append({"t_s": round(t + wall * 0.1 * (k + 1), 4), "op": "alloc", "tag": tag, "bytes": int(b),
                          "device": "host"})
        for k, (tag, b) in enumerate(bufs):
            trace.append({"t_s": round(t + wall * (0.7 + 0.1 * k), 4), "op": "free", "tag": tag, "bytes": int(b),
                          "device": "host"})
        tracked = sum(b for _, b in bufs)
        summary.append({"name": name, "wall_s": wall, "planned_peak_bytes": int(planned),
                        "tracked_peak_bytes": int(tracked), "rss_peak_bytes": int(tracked + 150e6),
                        "strategy": "dense" if name != "match" else "sparse pair table"})
        t += wall
    with open(os.path.join(folder, "mem_trace.jsonl"), "w") as f:
        for e in trace:
            f.write(json.dumps(e) + "\n")
    with open(os.path.join(folder, "run_summary.json"), "w") as f:
        json.dump({"boundsort_version": "0.1.0", "total_wall_s": t, "peak_rss_bytes": int(1.6e9),
                   "budget_bytes": 2 * 1024 ** 3, "stages": summary, "mem_trace": "mem_trace.jsonl"}, f, indent=1)


def write_scale(folder, n_units=1000, n_spikes=1_000_000, n_chan=64, nt=61, fs=30000.0, seed=7):
    """A Phy folder as large as a long Neuropixels session's sorting: written with numpy, not sorted."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    T = 600.0
    pos = np.stack([np.where(np.arange(n_chan) % 2, 32.0, 0.0), (np.arange(n_chan) // 2) * 20.0], axis=1)
    np.save(os.path.join(folder, "channel_positions.npy"), pos.astype(np.float32))
    np.save(os.path.join(folder, "channel_map.npy"), np.arange(n_chan, dtype=np.int32))
    np.save(os.path.join(folder, "channel_shanks.npy"), np.zeros(n_chan, np.int32))
    rate = rng.lognormal(0, 1, n_units)
    unit = rng.choice(n_units, size=n_spikes, p=rate / rate.sum()).astype(np.int32)
    times = np.sort(rng.integers(0, int(T * fs), n_spikes)).astype(np.int64)
    np.save(os.path.join(folder, "spike_times.npy"), times)
    np.save(os.path.join(folder, "spike_clusters.npy"), unit)
    np.save(os.path.join(folder, "spike_templates.npy"), unit)
    peak = rng.integers(0, n_chan, n_units)
    amp = rng.uniform(5, 40, n_units)
    np.save(os.path.join(folder, "amplitudes.npy"), (amp[unit] * rng.lognormal(0, 0.15, n_spikes)).astype(np.float32))
    xy = pos[peak][unit] + rng.normal(0, 6, (n_spikes, 2))
    np.save(os.path.join(folder, "spike_positions.npy"), xy.astype(np.float32))
    s = np.arange(nt) - 20
    wave = -np.exp(-0.5 * (s / 3.0) ** 2) + 0.4 * np.exp(-0.5 * ((s - 10) / 6.0) ** 2)
    dist = np.abs(pos[None, :, 1] - pos[peak][:, None, 1]) + np.abs(pos[None, :, 0] - pos[peak][:, None, 0])
    tpl = (amp[:, None, None] * wave[None, :, None] * np.exp(-dist / 40.0)[:, None, :]).astype(np.float32)
    np.save(os.path.join(folder, "templates.npy"), tpl)
    flat = tpl.reshape(n_units, -1)
    flat = flat / np.linalg.norm(flat, axis=1, keepdims=True)
    np.save(os.path.join(folder, "similar_templates.npy"), (flat @ flat.T).astype(np.float32))
    with open(os.path.join(folder, "params.py"), "w") as f:
        f.write(f"dat_path = []\nn_channels_dat = {n_chan}\ndtype = 'int16'\noffset = 0\n"
                f"sample_rate = {fs}\nhp_filtered = False\n")
    write_tsv(os.path.join(folder, "cluster_group.tsv"), ["cluster_id", "group"],
              [[str(i), "good" if i % 3 else "mua"] for i in range(n_units)])


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("optional", "scale") or (sys.argv[1] == "optional" and len(sys.argv) != 3):
        sys.exit(__doc__)
    if sys.argv[1] == "optional":
        add_optional(sys.argv[2])
    else:
        write_scale(sys.argv[2], *[int(v) for v in sys.argv[3:5]])
