#!/usr/bin/env python3
"""Generate the SpikeInterface cross-check fixtures for boundsort compare.

Needs spikeinterface (tested with 0.105.3), numpy, scipy, pandas, numba, e.g.
    python3 -m venv /tmp/sivenv && /tmp/sivenv/bin/pip install spikeinterface numba pandas
    /tmp/sivenv/bin/python tests/data/compare/make_fixtures.py

Each case folder holds
    gt/       a boundsort ground-truth folder (gt_spike_times.npy int64,
              gt_spike_units.npy int32, recording.json with fs_hz)
    sorted/   a Phy folder (spike_times.npy, spike_clusters.npy, params.py,
              cluster_group.tsv) that SpikeInterface reads with read_phy
    expected.json   SpikeInterface's compare_sorter_to_ground_truth results
              (exhaustive_gt=True, defaults otherwise): per GT unit
              tested_id, tp, fn, fp, num_gt, num_tested, accuracy, precision,
              recall, false_discovery_rate, miss_rate; the unit counts; the
              match-count and agreement matrices; and the same again with
              read_phy(exclude_cluster_groups=["noise"]) under "exclude_noise".
The sortings are random (Poisson GT units at 30 kHz) with sorted units built
as jittered copies, partial detections, splits, merges, noisy units, pure
noise units and bursts shorter than the window (which exercise
SpikeInterface's counting rule and its final clip).
"""
import json
import os
import shutil
import sys

import numpy as np
import spikeinterface.core as si
import spikeinterface.comparison as sc
import spikeinterface.extractors as se

HERE = os.path.dirname(os.path.abspath(__file__))
FS = 30000.0


def poisson(rng, rate_hz, dur_s):
    n = rng.poisson(rate_hz * dur_s)
    return np.sort(rng.integers(100, int(dur_s * FS) - 100, n))


def jitter(rng, t, max_samples):
    return t + rng.integers(-max_samples, max_samples + 1, t.size)


def keep(rng, t, frac):
    return t[rng.random(t.size) < frac]


def make_case(seed, kind):
    rng = np.random.default_rng(seed)
    dur = 8.0
    n_gt = 6 if kind != "random" else int(rng.integers(3, 9))
    gt = [poisson(rng, rng.uniform(5, 25), dur) for _ in range(n_gt)]
    if kind == "burst":
        # unit 0 fires doublets 4..8 samples apart (inside the 12-sample window)
        base = poisson(rng, 8, dur)
        gt[0] = np.sort(np.concatenate([base, base + rng.integers(4, 9, base.size)]))
    sorted_units = []  # list of (cluster_id, times, group)
    cid = 3
    if kind in ("mixed", "burst"):
        sorted_units.append((cid, keep(rng, jitter(rng, gt[0], 5), 0.9), "good")); cid += 2
        idx = rng.random(gt[1].size) < 0.6
        sorted_units.append((cid, gt[1][idx], "good")); cid += 1
        sorted_units.append((cid, gt[1][~idx], "mua")); cid += 1
        sorted_units.append((cid, np.concatenate([gt[2], keep(rng, gt[3], 0.8)]), "good")); cid += 1
        sorted_units.append((cid, np.concatenate([jitter(rng, gt[4], 3), poisson(rng, 6, dur)]), "good")); cid += 1
        sorted_units.append((cid, poisson(rng, 20, dur), "noise")); cid += 1
        sorted_units.append((cid, jitter(rng, gt[5], 15), "good")); cid += 4
        sorted_units.append((cid, keep(rng, gt[0], 0.35), "mua")); cid += 1
        if kind == "burst":
            # sorted spikes between the two spikes of each doublet
            sorted_units.append((cid, gt[0][::2] + 3, "good")); cid += 1
    else:
        for u in range(n_gt):
            r = rng.random()
            if r < 0.15:
                continue  # missed unit
            elif r < 0.35:  # split
                idx = rng.random(gt[u].size) < rng.uniform(0.3, 0.7)
                sorted_units.append((cid, jitter(rng, gt[u][idx], 6), "good")); cid += 1
                sorted_units.append((cid, jitter(rng, gt[u][~idx], 6), "mua")); cid += 1
            elif r < 0.5 and u + 1 < n_gt:  # merged with the next one
                sorted_units.append((cid, np.concatenate([gt[u], keep(rng, gt[u + 1], 0.7)]), "good")); cid += 1
            else:  # noisy partial detection
                t = np.concatenate([keep(rng, jitter(rng, gt[u], 8), rng.uniform(0.5, 1.0)),
                                    poisson(rng, rng.uniform(0, 10), dur)])
                sorted_units.append((cid, t, "good")); cid += 1
        for _ in range(int(rng.integers(0, 3))):
            sorted_units.append((cid, poisson(rng, rng.uniform(2, 30), dur), "noise")); cid += 1
    gt_times = np.concatenate(gt).astype(np.int64)
    gt_units = np.concatenate([np.full(t.size, u, np.int32) for u, t in enumerate(gt)])
    order = np.lexsort((gt_units, gt_times))
    gt_times, gt_units = gt_times[order], gt_units[order]
    s_times = np.concatenate([t for _, t, _ in sorted_units]).astype(np.int64)
    s_clu = np.concatenate([np.full(t.size, c, np.int32) for c, t, _ in sorted_units])
    s_times = np.clip(s_times, 0, None)
    order = np.argsort(s_times, kind="stable")  # Phy files are time-ordered
    s_times, s_clu = s_times[order], s_clu[order]
    return gt_times, gt_units, s_times, s_clu, [(c, g) for c, _, g in sorted_units]


def results(cmp):
    perf = cmp.get_performance(method="by_unit")
    cnt = cmp.count_score
    units = []
    for u1 in cmp.unit1_ids:
        tid = cnt.at[u1, "tested_id"]
        units.append(dict(gt_unit=int(u1), sorted_unit=None if tid == -1 else int(tid),
                          tp=int(cnt.at[u1, "tp"]), fn=int(cnt.at[u1, "fn"]), fp=int(cnt.at[u1, "fp"]),
                          n_gt=int(cnt.at[u1, "num_gt"]), n_sorted=int(cnt.at[u1, "num_tested"]),
                          **{k: float(perf.at[u1, k]) for k in
                             ("accuracy", "precision", "recall", "false_discovery_rate", "miss_rate")}))
    c = cmp.count_units_categories()
    return dict(n_gt_units=int(c["num_gt"]), n_sorted_units=int(c["num_sorter"]),
                n_well_detected=int(c["num_well_detected"]), n_overmerged=int(c["num_overmerged"]),
                n_redundant=int(c["num_redundant"]), n_false_positive=int(c["num_false_positive"]),
                n_bad=int(c["num_bad"]), delta_samples=int(cmp.delta_frames),
                sorted_unit_ids=[int(u) for u in cmp.unit2_ids],
                match_counts=np.asarray(cmp.match_event_count.values, dtype=np.int64).tolist(),
                agreement=np.asarray(cmp.agreement_scores.values, dtype=np.float64).tolist(),
                units=units)


def main():
    cases = [("mixed", 11, "mixed"), ("burst", 12, "burst")] + [(f"random{k}", 100 + k, "random") for k in range(4)]
    for name, seed, kind in cases:
        d = os.path.join(HERE, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.join(d, "gt"))
        os.makedirs(os.path.join(d, "sorted"))
        gt_times, gt_units, s_times, s_clu, groups = make_case(seed, kind)
        np.save(os.path.join(d, "gt", "gt_spike_times.npy"), gt_times)
        np.save(os.path.join(d, "gt", "gt_spike_units.npy"), gt_units)
        with open(os.path.join(d, "gt", "recording.json"), "w") as f:
            json.dump({"fs_hz": FS, "n_chan": 4, "n_samples": int(8 * FS), "dtype": "int16"}, f)
        sd = os.path.join(d, "sorted")
        # the "random" cases store uint64 (n, 1) times, like some Kilosort versions
        if kind == "random":
            np.save(os.path.join(sd, "spike_times.npy"), s_times.astype(np.uint64)[:, None])
        else:
            np.save(os.path.join(sd, "spike_times.npy"), s_times)
        np.save(os.path.join(sd, "spike_clusters.npy"), s_clu)
        with open(os.path.join(sd, "params.py"), "w") as f:
            f.write(f"dat_path = 'recording.bin'\nn_channels_dat = 4\ndtype = 'int16'\noffset = 0\n"
                    f"sample_rate = {FS}\nhp_filtered = True\n")
        with open(os.path.join(sd, "cluster_group.tsv"), "w") as f:
            f.write("cluster_id\tgroup\n")
            for c, g in sorted(groups):
                f.write(f"{c}\t{g}\n")
        gt_sorting = si.NumpySorting.from_samples_and_labels([gt_times], [gt_units.astype(np.int64)], FS)
        expected = {}
        for key, excl in (("all", None), ("exclude_noise", ["noise"])):
            tested = se.read_phy(sd, exclude_cluster_groups=excl)
            cmp = sc.compare_sorter_to_ground_truth(gt_sorting, tested, exhaustive_gt=True)
            expected[key] = results(cmp)
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(expected, f, indent=1)
        a = expected["all"]
        print(name, "gt", a["n_gt_units"], "sorted", a["n_sorted_units"], "well", a["n_well_detected"],
              "fp", a["n_false_positive"], "red", a["n_redundant"], "over", a["n_overmerged"], "bad", a["n_bad"],
              file=sys.stderr)


if __name__ == "__main__":
    main()
