#!/usr/bin/env python3
"""Recurring multi-template events in a sort: where an unlearned unit hides (issue 18).

A unit that never got a template of its own (too few spikes to form a cluster) is still matched: each
of its spikes is fitted by a combination of other templates at fixed lags. Such a combination recurs
far more often than the templates' trains would coincide by chance, and at each of its events no
single fitted template explains most of the fitted waveform. This script finds them in a Phy folder:

1. every ordered pair of sorted spikes (unit u at t, unit v at t + d, 0 <= d <= --window samples) is
   counted per (u, v, d // --lag-bin); a pair is recurring when it occurs at least --min-events times
   and more than --excess times its chance count n_u n_v lag_bin / n_samples (plus 2);
2. at each event of a recurring pair, the fitted waveform is the sum of amplitude x template of every
   sorted spike within --window of the pair, on the channels where either template of the pair reaches
   a tenth of its peak (spikes with under 5 % of their energy there left out); the event's share is
   the largest fraction of that waveform's energy that one of its spikes explains alone
   (<w, p>^2 / (|p|^2 |w|^2));
3. a pair whose median share is under --share is a motif: the unit it points at is not the pair's.
   Motifs whose events share spikes are one candidate unit; its spike times are the events'
   energy-weighted mean times.

With --gt the events are attributed to ground-truth units (those within 30 samples whose peak channel
is among the event's channels); with --write DIR a copy of the sort is written there with each
candidate unit's events as a new cluster and the spikes of its events removed from their units
(spike_times.npy and spike_clusters.npy rewritten, the other files linked), for `boundsort compare`:
a prototype of the rule, not a sorter's output (the new clusters have no templates).

    bench/.venv-si/bin/python bench/motifs.py OUT [--gt CASE_DIR] [--write DIR]
"""
import argparse
import json
import os
import shutil
from collections import Counter, defaultdict

import numpy as np


def load_sort(out):
    st = np.load(os.path.join(out, "spike_times.npy")).astype(np.int64).ravel()
    order = np.argsort(st, kind="stable")
    get = lambda name: np.load(os.path.join(out, name)).ravel()[order]
    return (st[order], get("spike_clusters.npy"), get("spike_templates.npy"), get("amplitudes.npy"),
            np.load(os.path.join(out, "templates.npy")))


def n_samples_of(out, st):
    src = os.path.join(out, "source.json")
    if os.path.exists(src):
        with open(src) as f:
            n = json.load(f).get("n_samples")
        if n:
            return int(n)
    return int(st[-1]) + 1


def pair_counts(st, sc, window, lag_bin):
    counts, events = Counter(), defaultdict(list)
    for i in range(len(st)):
        for j in range(i + 1, len(st)):
            d = st[j] - st[i]
            if d > window:
                break
            key = (int(sc[i]), int(sc[j]), int(d // lag_bin))
            counts[key] += 1
            events[key].append((i, j))
    return counts, events


def event_parts(st, stt, amp, tm, tpeak, i, j, window):
    """The event's spikes (index, energy on the channels) and its best single-spike share."""
    nt = tm.shape[1]
    chans = (tpeak[stt[i]] > 0.1 * tpeak[stt[i]].max()) | (tpeak[stt[j]] > 0.1 * tpeak[stt[j]].max())
    lo, hi = np.searchsorted(st, st[i] - window), np.searchsorted(st, st[j] + window + 1)
    t0 = st[i] - window
    length = int(st[j] - st[i]) + 2 * window + nt
    wave = np.zeros((length, int(chans.sum())))
    parts = []
    for q in range(lo, hi):
        p = np.zeros_like(wave)
        off = int(st[q] - t0)
        p[off:off + nt] = amp[q] * tm[stt[q]][:, chans]
        e = float((p ** 2).sum())
        if e <= 0.05 * float(amp[q] ** 2 * (tm[stt[q]] ** 2).sum()):
            continue
        parts.append((q, p, e))
        wave += p
    energy = float((wave ** 2).sum())
    share = max(float((wave * p).sum()) ** 2 / (e * energy) for _, p, e in parts) if energy > 0 else 1.0
    return chans, [(q, e) for q, _, e in parts], share


def union_find():
    """A disjoint-set forest: its parent map and its find (path halving); union is parent[find(a)] = find(b)."""
    parent = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    return parent, find


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="a boundsort (Phy) output folder")
    ap.add_argument("--gt", help="a ground-truth case folder (gt_spike_times.npy, gt_spike_units.npy, gt_templates.npy)")
    ap.add_argument("--write", help="write the prototype's relabelled sort here")
    ap.add_argument("--window", type=int, default=25, help="samples between a pair's spikes, at most")
    ap.add_argument("--lag-bin", type=int, default=3, help="samples per lag bin")
    ap.add_argument("--min-events", type=int, default=8)
    ap.add_argument("--excess", type=float, default=8.0)
    ap.add_argument("--share", type=float, default=0.6)
    a = ap.parse_args()

    st, sc, stt, amp, tm = load_sort(a.out)
    n_samples = n_samples_of(a.out, st)
    tpeak = np.abs(tm).max(axis=1)  # templates x channels
    n = Counter(sc.tolist())
    counts, events = pair_counts(st, sc, a.window, a.lag_bin)
    gt = None
    if a.gt:
        gt_t = np.load(os.path.join(a.gt, "gt_spike_times.npy")).astype(np.int64).ravel()
        gt_u = np.load(os.path.join(a.gt, "gt_spike_units.npy")).ravel()
        gt_peak = np.abs(np.load(os.path.join(a.gt, "gt_templates.npy"))).max(axis=1).argmax(axis=1)
        gt = (gt_t, gt_u, gt_peak)

    motifs = []
    for key, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        chance = n[key[0]] * n[key[1]] * a.lag_bin / n_samples
        if c < a.min_events or c <= a.excess * chance + 2:
            continue
        shares, evs, attrib = [], [], Counter()
        for i, j in events[key]:
            chans, parts, share = event_parts(st, stt, amp, tm, tpeak, i, j, a.window)
            shares.append(share)
            evs.append(parts)
            if gt:
                lo, hi = np.searchsorted(gt[0], st[i] - 30), np.searchsorted(gt[0], st[i] + 31)
                attrib[tuple(sorted({int(u) for u in gt[1][lo:hi] if chans[gt[2][u]]}))] += 1
        med = float(np.median(shares))
        tag = "motif" if med < a.share else "pair"
        line = "%-5s units %d (%d spikes) and %d (%d) at lag %d-%d: %d events (chance %.2f), share median %.2f" % (
            tag, key[0], n[key[0]], key[1], n[key[1]], key[2] * a.lag_bin, key[2] * a.lag_bin + a.lag_bin - 1, c,
            chance, med)
        if gt:
            line += ", ground truth " + ", ".join("%s x%d" % (list(k), v) for k, v in attrib.most_common(3))
        print(line)
        if med < a.share:
            motifs.append(evs)

    # candidate units: events that share spikes are one event; motifs that share spikes one unit
    parent, find = union_find()
    energy = {}
    for m, evs in enumerate(motifs):
        for parts in evs:
            qs = [q for q, _ in parts]
            for q, e in parts:
                energy[q] = e
                parent[find(q)] = find(qs[0])
            parent[find(("motif", m))] = find(qs[0])
    new_times, new_units, unit_of_root = [], [], {}
    next_unit = int(sc.max()) + 1
    # one event per set of spikes linked by events alone (motifs link the events into units)
    ev_parent, efind = union_find()

    for evs in motifs:
        for parts in evs:
            for q, _ in parts[1:]:
                ev_parent[efind(q)] = efind(parts[0][0])
    ev_groups = defaultdict(list)
    for q in energy:
        ev_groups[efind(q)].append(q)
    for qs in ev_groups.values():
        root = find(qs[0])
        if root not in unit_of_root:
            unit_of_root[root] = next_unit
            next_unit += 1
        e = np.array([energy[q] for q in qs])
        new_times.append(int(round(float((e * st[qs]).sum() / e.sum()))))
        new_units.append(unit_of_root[root])
    removed = np.zeros(len(st), bool)
    removed[list(energy)] = True
    print("candidate units: %d, events: %d, spikes of their events: %d" % (len(unit_of_root), len(new_times),
                                                                         int(removed.sum())))
    if a.write:
        keep = ~removed
        t2 = np.concatenate([st[keep], np.array(new_times, np.int64)])
        c2 = np.concatenate([sc[keep], np.array(new_units, sc.dtype)])
        order = np.argsort(t2, kind="stable")
        shutil.rmtree(a.write, ignore_errors=True)
        os.makedirs(a.write)
        for f in os.listdir(a.out):
            if f not in ("spike_times.npy", "spike_clusters.npy") and os.path.isfile(os.path.join(a.out, f)):
                os.symlink(os.path.abspath(os.path.join(a.out, f)), os.path.join(a.write, f))
        np.save(os.path.join(a.write, "spike_times.npy"), t2[order].astype(np.uint64))
        np.save(os.path.join(a.write, "spike_clusters.npy"), c2[order].astype(np.int32))


if __name__ == "__main__":
    main()
