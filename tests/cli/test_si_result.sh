#!/usr/bin/env bash
# test_si_result.sh - the SpikeInterface sorter's result (python/boundsort_si/sorter.py) on a real
# output folder. SpikeInterface's Kilosort/Phy reader merges every .tsv of the folder on cluster_id
# unless a cluster_info table exists, and boundsort's folder also holds tables that are not per
# cluster (bad_channels.tsv, artifacts.tsv): the wrapper first joins the cluster_<name>.tsv tables into
# cluster_info.tsv. Checks, on a sort of a short simulation (with its quality metrics, whose tables
# are cluster_<metric>.tsv too): whether the reader itself reads the folder as sorted is printed
# (SpikeInterface 0.102.2 fails there with KeyError 'cluster_id', and this test with it when the join
# is removed; 0.105.3 reads it), the wrapper's result has every unit of spike_clusters.npy with its spike count and the KSLabel and
# quality-metric properties, and a second call keeps the cluster_info.tsv it wrote; the wrapper's budgets
# (mem, gpu_mem, disk) reach the sort's command line.
# SpikeInterface from PyPI (lib.sh's si_python, pinned; skipped offline), or BS_SI_PYTHON's.
. "$(dirname "$0")/lib.sh"
if [ -n "${BS_SI_PYTHON:-}" ]; then SIPY=$BS_SI_PYTHON; else si_python || { echo "skipped"; exit 77; }; fi

"$BS" simulate -o "$T/sim" --probe linear32 --duration 12 --units 6 --seed 5 -q || { echo "simulate failed"; exit 1; }
mkdir -p "$T/so"
"$BS" sort "$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000 --uv-per-bit 0.195 -o "$T/so/phy" \
  --threads 2 -q && ok || bad "sort failed"
[ -f "$T/so/phy/bad_channels.tsv" ] && [ ! -e "$T/so/phy/cluster_info.tsv" ] && ok \
  || bad "expected bad_channels.tsv and no cluster_info.tsv in the folder as sorted"
"$SIPY" - "$T/so" "$(cd "$(dirname "$0")/../../python" && pwd)" <<'PYEOF' && ok || bad "the wrapper's result is wrong"
import sys, shutil
from pathlib import Path
import numpy as np
so, pkg = Path(sys.argv[1]), sys.argv[2]
sys.path.insert(0, pkg)
from spikeinterface.extractors import read_kilosort
from boundsort_si.sorter import BoundsortSorter

try:  # SpikeInterface's reader on the folder as sorted: the non-cluster tables break it
    read_kilosort(so / "phy", keep_good_only=False)
    print("note: this SpikeInterface reads the folder as sorted")
except Exception as e:
    print(f"SpikeInterface's reader on the folder as sorted: {type(e).__name__}: {e}")
s = BoundsortSorter._get_result_from_folder(so)
clu = np.load(so / "phy" / "spike_clusters.npy").ravel()
ids, counts = np.unique(clu, return_counts=True)
assert sorted(int(u) for u in s.unit_ids) == [int(u) for u in ids], (s.unit_ids, ids)
per = s.count_num_spikes_per_unit()
assert all(per[u] == c for u, c in zip(s.unit_ids, counts[np.searchsorted(ids, s.unit_ids)])), per
keys = s.get_property_keys()
assert "KSLabel" in keys and "Amplitude" in keys, keys
info = (so / "phy" / "cluster_info.tsv").read_text().splitlines()
assert info[0].split("\t")[0] == "cluster_id" and len(info) == len(ids) + 1, info[:2]
before = (so / "phy" / "cluster_info.tsv").stat().st_mtime_ns
BoundsortSorter._get_result_from_folder(so)
assert (so / "phy" / "cluster_info.tsv").stat().st_mtime_ns == before
print(f"{len(ids)} units, properties {keys}")
PYEOF
# the budgets reach the command line (--mem, --gpu-mem, --disk)
"$SIPY" - "$(cd "$(dirname "$0")/../../python" && pwd)" <<'PYEOF' && ok || bad "the wrapper's budgets"
import sys
sys.path.insert(0, sys.argv[1])
from boundsort_si.sorter import BoundsortSorter
argv = BoundsortSorter.command_line("r.dat", "p.json", 30000, 8, 0.25, "phy",
                                    {"mem": "2G", "gpu_mem": "8G", "disk": "100G", "device": "cuda:1"})
for flag, value in (("--mem", "2G"), ("--gpu-mem", "8G"), ("--disk", "100G"), ("--device", "cuda:1")):
    assert argv[argv.index(flag) + 1] == value, argv
PYEOF
finish
