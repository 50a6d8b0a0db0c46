#!/usr/bin/env python3
"""
ks4_driver.py - run Kilosort 4 with its default settings on one ground-truth case folder.

Mechanism: reads the case's recording.json (fs, channels) and probe.json (probeinterface), builds
Kilosort's probe dictionary (chanMap = columns of recording.bin, xc/yc in µm, kcoords = shank index),
and calls kilosort.run_kilosort on recording.bin (int16) with only n_chan_bin and fs set (every other
setting at Kilosort's default), on the CPU with torch using THREADS threads. run.py starts this
script under /usr/bin/time -v, so wall time and peak RSS include Python and torch start-up.
Writes OUT/ (Kilosort's Phy folder) and OUT/ks4_driver.json (versions, settings, in-process time).

Usage: python bench/ks4_driver.py CASE_DIR OUT_DIR [--threads N] [--device cpu]
"""
import argparse
import importlib.metadata as md
import json
import os
import resource
import sys
import time
from pathlib import Path


def ks_probe(case: Path):
    """Kilosort's probe dict from probe.json, read as plain JSON (so files without optional
    probeinterface fields such as contact_plane_axes are accepted)."""
    import numpy as np

    d = json.loads((case / "probe.json").read_text())
    xs, ys, chans, shanks = [], [], [], []
    for probe in d["probes"]:
        pos = probe["contact_positions"]
        n = len(pos)
        dci = probe.get("device_channel_indices") or list(range(len(chans), len(chans) + n))
        sids = probe.get("shank_ids") or [""] * n
        for i in range(n):
            if dci[i] < 0:  # not connected
                continue
            xs.append(float(pos[i][0]))
            ys.append(float(pos[i][1]))
            chans.append(int(dci[i]))
            shanks.append(str(sids[i]))
    uniq = {s: k for k, s in enumerate(sorted(set(shanks)))}
    order = np.argsort(chans)
    return {
        "chanMap": np.asarray(chans, dtype=np.int64)[order],
        "xc": np.asarray(xs, dtype=np.float32)[order],
        "yc": np.asarray(ys, dtype=np.float32)[order],
        "kcoords": np.asarray([uniq[s] for s in shanks], dtype=np.float32)[order],
        "n_chan": len(chans),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("out")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    case, out = Path(a.case).resolve(), Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.time()
    import torch
    from kilosort import run_kilosort

    torch.set_num_threads(a.threads)
    meta = json.loads((case / "recording.json").read_text())
    probe = ks_probe(case)
    settings = {"n_chan_bin": int(meta["n_chan"]), "fs": float(meta["fs_hz"])}
    t1 = time.time()
    run_kilosort(settings=settings, probe=probe, filename=case / "recording.bin", results_dir=out,
                 data_dtype="int16", device=torch.device(a.device), torch_thread_lim=a.threads)
    t2 = time.time()
    info = dict(kilosort_version=md.version("kilosort"), torch_version=torch.__version__,
                torch_threads=torch.get_num_threads(), device=a.device, settings=settings,
                import_s=round(t1 - t0, 3), run_kilosort_s=round(t2 - t1, 3),
                peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    if a.device.startswith("cuda"):
        # torch's peak counters since their last reset: Kilosort resets them between its steps, so these are its
        # last steps' peaks; its log's "Memory usage by step" table gives every step's
        info["gpu_peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        info["gpu_peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        info["gpu_name"] = torch.cuda.get_device_name()
    (out / "ks4_driver.json").write_text(json.dumps(info, indent=2))
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
