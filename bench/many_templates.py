#!/usr/bin/env python3
"""Many templates through the real match and finish stages (issue 16's K = 17,345 and 20,000).

    python bench/many_templates.py OUT K [--seed S]
    boundsort sort REC -o OUT --resume --mem 4G ...

OUT is a finished sort of REC (any flags; the resumed run must use the same ones). This script
replaces the cluster stage's checkpoint (OUT/.stages/cluster: support.npy int32 (K, n_sup), U.npy
float32 (K, n_sup, n_pcs), n_spikes.npy int64 (K)) by the sort's own templates plus copies of them
moved along the probe and perturbed, K in all, and removes the stages after clustering from
OUT/.stages/manifest.json, so that `sort --resume` runs matching and the finish stage (merges,
splits, the Phy folder) with K templates on the real recording, within the memory plan. This is
how a session over-split by artifacts looks to the matcher: a few busy templates among thousands
that rarely fire.

The copies: template i (i >= the sort's K0) is template (i mod K0) with its support moved by an
even number of channels (a whole row of a two-column probe) to a random place inside the probe and
each weight multiplied by 1 + 0.2 N(0, 1); it is said to have been learned from 20 spikes (the
matcher keeps the pair rows of the templates learned from most spikes first). All templates are
then put in order of their support's mean channel, as the cluster stage emits them (center order).
Needs numpy only.
"""
import argparse
import json
import os
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("K", type=int)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    cdir = os.path.join(a.out, ".stages", "cluster")
    man_path = os.path.join(a.out, ".stages", "manifest.json")
    sup = np.load(os.path.join(cdir, "support.npy"))
    U = np.load(os.path.join(cdir, "U.npy"))
    ns = np.load(os.path.join(cdir, "n_spikes.npy"))
    n_chan = len(np.load(os.path.join(a.out, "channel_map.npy")))
    K0, n_sup = sup.shape
    if a.K < K0:
        sys.exit("K = %d is below the sort's own %d templates" % (a.K, K0))
    rng = np.random.default_rng(a.seed)
    src = np.arange(a.K - K0) % K0
    sup_new = np.empty((a.K - K0, n_sup), dtype=np.int32)
    for i, s in enumerate(src):
        lo, hi = -int(sup[s].min()), n_chan - 1 - int(sup[s].max())
        shift = 2 * rng.integers(-(-lo // 2), hi // 2 + 1) if hi >= lo else 0
        sup_new[i] = sup[s] + shift
    U_new = (U[src] * (1.0 + 0.2 * rng.standard_normal(U[src].shape))).astype(np.float32)
    sup_all = np.concatenate([sup, sup_new])
    U_all = np.concatenate([U, U_new])
    ns_all = np.concatenate([ns.astype(np.int64), np.full(a.K - K0, 20, dtype=np.int64)])
    order = np.argsort(sup_all.mean(axis=1), kind="stable")
    files = {"cluster/support.npy": sup_all[order].astype(np.int32),
             "cluster/U.npy": U_all[order].astype(np.float32),
             "cluster/n_spikes.npy": ns_all[order]}
    for name, arr in files.items():
        np.save(os.path.join(a.out, ".stages", name), arr)
    with open(man_path) as f:
        man = json.load(f)
    kept = []
    for st in man["stages"]:
        if st["stage"] == "cluster":
            for fe in st["files"]:
                if fe["name"] in files:
                    fe["bytes"] = os.path.getsize(os.path.join(a.out, ".stages", fe["name"]))
            kept.append(st)
            break
        kept.append(st)
    man["stages"] = kept
    with open(man_path, "w") as f:
        json.dump(man, f, indent="\t")
    print("%s: %d templates (%d of the sort, %d moved copies), supports of %d of %d channels" %
          (a.out, a.K, K0, a.K - K0, n_sup, n_chan))


if __name__ == "__main__":
    main()
