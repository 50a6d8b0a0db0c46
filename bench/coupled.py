#!/usr/bin/env python3
"""
coupled.py - planted collisions: how boundsort sorts pairs of neighbouring units that fire together.

For each lag and seed, `boundsort simulate --coupled-pairs N --coupled-lag-ms LAG` writes a recording in
which GT units 2i and 2i+1 (i < N) sit 30 um apart and unit 2i+1 also fires LAG ms after half of unit
2i's spikes. The recording is sorted (`boundsort sort --no-qc --no-report`, extra `sort` arguments after
--) and scored (`boundsort compare --json`). Per case it prints:

  * each pair's accuracy and SNR ("leader acc/snr  follower acc/snr");
  * collision units: sorted units that are nobody's Hungarian match and hold >= 50 % of their spikes
    (and >= 20 spikes) at the pair's coupled events (from 0.5 ms before the leader's spike to 0.5 ms
    after the follower's): templates learned from the sum of the two waveforms;
  * the false-positive and redundant unit counts of the whole sorting.

Usage: python bench/coupled.py [--lags 0.3,0.6,1.0] [--seeds 1,2] [--probe linear32] [--duration 120]
                               [--units 20] [--pairs 4] [--work DIR] [-- SORT_ARGS...]
Needs numpy and the boundsort binary ($BOUNDSORT or build/boundsort).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BS = os.environ.get("BOUNDSORT", str(ROOT / "build" / "boundsort"))


def coupled_events(gt_t, gt_u, a, b, lag):
    """Times of unit a's spikes followed by a unit-b spike lag +- 1 samples later."""
    ta, tb = gt_t[gt_u == a], gt_t[gt_u == b]
    if len(ta) == 0 or len(tb) == 0:
        return ta[:0]
    j = np.clip(np.searchsorted(tb, ta + lag - 1), 0, len(tb) - 1)
    return ta[np.abs(tb[j] - ta - lag) <= 1]


def share_at_events(times, ev, lag, pad):
    """Share of sorted spike times within [event - pad, event + lag + pad] of an event."""
    if len(times) == 0 or len(ev) == 0:
        return 0.0, 0
    j = np.searchsorted(ev, times)
    near = np.zeros(len(times), bool)
    for q in (j - 1, j):
        ok = (q >= 0) & (q < len(ev))
        d = times - ev[np.clip(q, 0, len(ev) - 1)]
        near |= ok & (d >= -pad) & (d <= lag + pad)
    return float(near.mean()), int(near.sum())


def score(case: Path, out: Path):
    p = subprocess.run([BS, "compare", str(out), str(case), "--json"], capture_output=True, text=True, check=True)
    c = json.loads(p.stdout)
    meta = json.loads((case / "recording.json").read_text())
    fs = meta["fs_hz"]
    lag = int(round(meta["coupled_lag_ms"] * fs / 1000.0))
    pad = int(round(0.5e-3 * fs))
    gt_t, gt_u = np.load(case / "gt_spike_times.npy"), np.load(case / "gt_spike_units.npy")
    st = np.load(out / "spike_times.npy").ravel().astype(np.int64)
    sc = np.load(out / "spike_clusters.npy").ravel()
    units = {u["gt_unit"]: u for u in c["units"]}
    matched = {u["sorted_unit"] for u in c["units"] if u["sorted_unit"] is not None}
    pairs, collision = [], []
    for a, b in meta["coupled_pairs"]:
        ev = coupled_events(gt_t, gt_u, a, b, lag)
        pairs.append(dict(pair=[a, b], events=int(len(ev)),
                          accuracy=[units[a]["accuracy"], units[b]["accuracy"]],
                          snr=[units[a].get("snr"), units[b].get("snr")]))
        for k in np.unique(sc):
            if int(k) in matched:
                continue
            t = np.sort(st[sc == k])
            f, n = share_at_events(t, ev, lag, pad)
            if f >= 0.5 and len(t) >= 20:
                collision.append(dict(sorted_unit=int(k), pair=[a, b], at_events=n, spikes=int(len(t))))
    return dict(pairs=pairs, collision_units=collision, false_positive=c["n_false_positive"],
                redundant=c["n_redundant"], sorted_units=c["n_sorted_units"])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    sort_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, sort_args = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lags", default="0.3,0.6,1.0")
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--probe", default="linear32")
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--units", type=int, default=20)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--work", default=str(ROOT / "bench" / "work" / "coupled"))
    a = ap.parse_args(argv)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    n_pairs = n_well = n_coll = n_snr = n_snr_well = 0
    for lag in a.lags.split(","):
        for seed in a.seeds.split(","):
            case = work / f"lag{lag}-s{seed}"
            subprocess.run([BS, "simulate", "-o", str(case), "--probe", a.probe, "--duration", str(a.duration),
                            "--units", str(a.units), "--coupled-pairs", str(a.pairs), "--coupled-lag-ms", lag,
                            "--seed", seed, "-q"], check=True, stdout=subprocess.DEVNULL)
            out = case / "out"
            with open(case / "sort.log", "w") as log:
                subprocess.run([BS, "sort", str(case), "--no-qc", "--no-report", "-o", str(out), *sort_args],
                               check=True, stdout=log, stderr=subprocess.STDOUT)
            r = score(case, out)
            (case / "coupled.json").write_text(json.dumps(r, indent=1))
            cells = [f"{p['pair'][0]}-{p['pair'][1]} {p['accuracy'][0]:.2f}/{p['snr'][0]:.0f} "
                     f"{p['accuracy'][1]:.2f}/{p['snr'][1]:.0f}" for p in r["pairs"]]
            coll = "; ".join(f"unit {u['sorted_unit']}: {u['at_events']}/{u['spikes']} at {u['pair'][0]}-"
                             f"{u['pair'][1]}" for u in r["collision_units"]) or "none"
            print(f"lag {lag} ms seed {seed} | " + " | ".join(cells) + f" | collision units: {coll} | "
                  f"FP {r['false_positive']} redundant {r['redundant']}", flush=True)
            for p in r["pairs"]:
                n_pairs += 2
                n_well += sum(x >= 0.8 for x in p["accuracy"])
                snr5 = [x >= 0.8 for x, q in zip(p["accuracy"], p["snr"]) if q is not None and q >= 5]
                n_snr += len(snr5)
                n_snr_well += sum(snr5)
            n_coll += len(r["collision_units"])
    print(f"pair units well detected: {n_well} of {n_pairs} ({n_snr_well} of the {n_snr} with SNR >= 5); "
          f"collision units: {n_coll}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
