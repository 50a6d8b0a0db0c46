#!/usr/bin/env python3
"""
si_sorter_driver.py - one SpikeInterface sorter on one bench case, for bench/run.py's peer rows.

    python bench/si_sorter_driver.py SORTER CASE_DIR OUT_DIR [--jobs 2]

SORTER is one of SpikeInterface's internal sorters (spykingcircus2, tridesclous2, lupin) or mountainsort5,
each with its default parameters (`n_jobs` = --jobs where the sorter takes job_kwargs). The case's recording.bin (int16, µV per bit from
recording.json) and probe.json are opened as a SpikeInterface recording. The internal sorters preprocess
the recording themselves; MountainSort 5 gets what its documentation asks for (bandpass 300-6000 Hz and
whitening) first. The sorting is written into OUT_DIR as a minimal Phy folder (spike_times.npy,
spike_clusters.npy, params.py), which is what bench/run.py's scorers read, and OUT_DIR/driver.json
records the sorter, its version and parameters.

Needs SpikeInterface >= 0.105 with the sorter's dependencies (hdbscan for spykingcircus2 and tridesclous2,
torch for lupin, the mountainsort5 package), e.g. in bench/.venv-si (see bench/README.md).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

PEERS = ("spykingcircus2", "tridesclous2", "lupin", "mountainsort5")


def open_case(case: Path):
    import spikeinterface.core as si
    from probeinterface import read_probeinterface

    meta = json.loads((case / "recording.json").read_text())
    rec = si.read_binary(case / "recording.bin", sampling_frequency=meta["fs_hz"], dtype=meta.get("dtype", "int16"),
                         num_channels=meta["n_chan"], gain_to_uV=meta["uv_per_bit"], offset_to_uV=0.0)
    withprobe = rec.set_probegroup(read_probeinterface(case / "probe.json"))
    return (withprobe if withprobe is not None else rec), meta


def write_phy(sorting, out: Path, fs: float):
    """spike_times.npy / spike_clusters.npy (one segment) and params.py."""
    sv = sorting.to_spike_vector()
    order = np.lexsort((sv["unit_index"], sv["sample_index"]))
    ids = np.asarray(sorting.unit_ids)
    ids = ids.astype(np.int64) if np.issubdtype(ids.dtype, np.integer) else np.arange(len(ids))
    np.save(out / "spike_times.npy", sv["sample_index"][order].astype(np.int64))
    np.save(out / "spike_clusters.npy", ids[sv["unit_index"][order]].astype(np.int32))
    (out / "params.py").write_text(f"dat_path = ''\nn_channels_dat = 0\ndtype = 'int16'\noffset = 0\n"
                                   f"sample_rate = {fs}\nhp_filtered = False\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description="one SpikeInterface sorter on one bench case")
    ap.add_argument("sorter", choices=PEERS)
    ap.add_argument("case", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args(argv)
    import spikeinterface
    import spikeinterface.sorters as ss

    rec, meta = open_case(a.case)
    shutil.rmtree(a.out, ignore_errors=True)
    a.out.mkdir(parents=True)
    params = ss.get_default_sorter_params(a.sorter)
    if "job_kwargs" in params:
        params["job_kwargs"] = dict(params.get("job_kwargs") or {}, n_jobs=a.jobs)
    if a.sorter == "mountainsort5":
        import spikeinterface.preprocessing as spre

        rec = spre.whiten(spre.bandpass_filter(rec, freq_min=300, freq_max=6000), dtype="float32")
    sorting = ss.run_sorter(a.sorter, rec, folder=a.out / "sorter_output", remove_existing_folder=True,
                            verbose=False, **params)
    write_phy(sorting, a.out, meta["fs_hz"])
    version = ss.sorter_dict[a.sorter].get_sorter_version() if hasattr(ss, "sorter_dict") else None
    (a.out / "driver.json").write_text(json.dumps(dict(sorter=a.sorter, sorter_version=str(version),
                                                       spikeinterface=spikeinterface.__version__, n_jobs=a.jobs,
                                                       n_units=int(sorting.get_num_units())), indent=1, default=str))
    print(f"{a.sorter}: {sorting.get_num_units()} units")
    return 0


if __name__ == "__main__":
    sys.exit(main())
