#!/usr/bin/env python3
"""
cases.py - the benchmark's reproducible case suite.

Every case is generated from a fixed seed and written in the ground-truth folder format of
docs/CONVENTIONS.md, under bench/cases/<name>-s<seed>/ (ignored by git; a folder is reused when its
case.json, written last, says it is complete for the same definition):

    recording.bin         int16, samples x channels interleaved
    probe.json            probeinterface JSON (µm; device_channel_indices = columns of recording.bin)
    recording.json        fs_hz, n_chan, n_samples, dtype, uv_per_bit, seed, drift, generator settings
    gt_spike_times.npy    int64 (n,), sample of each spike (the template's trough), ascending
    gt_spike_units.npy    int32 (n,), unit index 0..U-1
    gt_unit_positions.npy float32 (U, 3), x, y (depth), z in µm at t = 0       (SpikeInterface cases)
    gt_templates.npy      float32 (U, nt, C), µV, trough at recording.json's nt_before
    gt_drift_um.npy       float32 (n_bins, n_blocks), probe motion in µm (zeros when no drift)

Generators:
  * "si"        SpikeInterface's generate_ground_truth_recording (static; a multi-column probe or a
                custom one such as the 4-shank NP2 layout).
  * "si-drift"  SpikeInterface's generation.generate_drifting_recording (zigzag drift from t = 30 s,
                rigid or non-rigid), on SpikeInterface's "Neuropixel-384"/"-128" toy probes (NP1
                layout) or a probe of DRIFT_PROBES (e.g. "2col-64": 64 channels, 2 columns, 620 µm).
  * "boundsort" `boundsort simulate` (binary from $BOUNDSORT or ../build/boundsort); when that command
                is not available the case is skipped with a clear line, never faked.

SpikeInterface recordings are float µV; they are written as int16 with uv_per_bit = 0.195 µV
(Neuropixels 1.0 gain), raised automatically (and the whole case rewritten) if any sample would clip.

Usage: python bench/cases.py [--list] [CASE ...]     (no CASE: the smoke case)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CASES_DIR = Path(os.environ.get("BS_BENCH_CASES", HERE / "cases"))
FS = 30000.0
UV_PER_BIT = 0.195

# name -> definition. Keep definitions stable: the cache key is name + seed + this dict.
CASES = {
    "smoke": dict(gen="si", n_chan=16, columns=2, duration=20.0, units=8, seed=11),
    "si-32ch-60s-20u": dict(gen="si", n_chan=32, columns=2, duration=60.0, units=20, seed=12),
    "si-64ch-300s-50u": dict(gen="si", n_chan=64, columns=2, duration=300.0, units=50, seed=13),
    # dense static 384 channels (issue 18's target case: <= 3 false-positive and <= 3 redundant units): 150 units
    # at 15 Hz on 4 columns (96 rows of 20 um, 1.9 mm), 2 minutes
    "si-384ch-120s-150u-dense": dict(gen="si", n_chan=384, columns=4, duration=120.0, units=150, seed=25,
                                     rate_hz=15.0),
    "np1-300s-100u-rigid": dict(gen="si-drift", probe="Neuropixel-384", duration=300.0, units=100,
                                drift="rigid", seed=14),
    "np1-300s-100u-nonrigid": dict(gen="si-drift", probe="Neuropixel-384", duration=300.0, units=100,
                                   drift="nonrigid", seed=15),
    "np2-4shank-300s-100u": dict(gen="si", probe="np2-4shank", duration=300.0, units=100, seed=16),
    # reduced drifting cases (SpikeInterface's 128-channel toy probe, 1260 µm): what a 2-core machine can sort
    # with and without drift correction in minutes
    "np128-90s-40u-rigid": dict(gen="si-drift", probe="Neuropixel-128", duration=90.0, units=40, drift="rigid",
                                seed=17),
    "np128-90s-40u-nonrigid": dict(gen="si-drift", probe="Neuropixel-128", duration=90.0, units=40,
                                   drift="nonrigid", seed=18),
    # small drifting cases that Kilosort 4 can sort on a 2-core CPU in ~20-30 min each (the 384-channel ones
    # above would take many hours): 64 channels in 2 columns (32 µm apart, 20 µm rows: 620 µm tall, so both
    # sorters estimate drift), 60 s, 24 units, the same zigzag ±20 µm and noise as the np1 cases
    "si64-60s-24u-rigid": dict(gen="si-drift", probe="2col-64", duration=60.0, units=24, drift="rigid", seed=19),
    "si64-60s-24u-nonrigid": dict(gen="si-drift", probe="2col-64", duration=60.0, units=24, drift="nonrigid",
                                  seed=20),
    # a drifting Neuropixels 1.0 case Kilosort 4 can sort on a 2-core CPU in about an hour (issue 17's time
    # ratio on 384 channels): the np1 cases' generator, probe, zigzag and noise, 60 s
    "np1-60s-100u-rigid": dict(gen="si-drift", probe="Neuropixel-384", duration=60.0, units=100, drift="rigid",
                               seed=26),
    # the same families from boundsort's own simulator
    "bs-linear32-60s-20u": dict(gen="boundsort", probe="linear32", duration=60.0, units=20, drift="none", seed=21),
    "bs-np1-300s-100u-rigid": dict(gen="boundsort", probe="np1", duration=300.0, units=100, drift="rigid", seed=22),
    "bs-np1-300s-100u-nonrigid": dict(gen="boundsort", probe="np1", duration=300.0, units=100,
                                      drift="nonrigid", seed=23),
    "bs-np2-4shank-300s-100u": dict(gen="boundsort", probe="np2-4shank", duration=300.0, units=100,
                                    drift="none", seed=24),
}


# probes of the "si-drift" cases that are not among SpikeInterface's toy probes: keyword arguments of
# probeinterface's generate_multi_columns_probe (µm)
DRIFT_PROBES = {
    "2col-64": dict(num_columns=2, num_contact_per_column=[32, 32], xpitch=32, ypitch=20,
                    y_shift_per_column=[0, 0], contact_shapes="square", contact_shape_params={"width": 12}),
}


class CaseSkipped(Exception):
    """The case cannot be generated here (e.g. `boundsort simulate` is not available)."""


def boundsort_binary() -> str:
    b = os.environ.get("BOUNDSORT")
    if b:
        return b
    for cand in (ROOT / "build" / "boundsort", HERE.parent.parent / "build" / "boundsort"):
        if cand.is_file():
            return str(cand)
    return shutil.which("boundsort") or str(ROOT / "build" / "boundsort")


def case_dir(name: str) -> Path:
    return CASES_DIR / f"{name}-s{CASES[name]['seed']}"


def is_complete(folder: Path, name: str) -> bool:
    try:
        info = json.loads((folder / "case.json").read_text())
    except (OSError, ValueError):
        return False
    return info.get("name") == name and info.get("definition") == CASES[name] and info.get("complete") is True


# ------------------------------------------------------------------------------------------ probes
def np2_4shank_probe():
    """Neuropixels 2.0 4-shank layout: 4 shanks 250 µm apart, 2 columns 32 µm apart, 15 µm rows,
    96 contacts per shank (384 channels); shank ids 0..3."""
    from probeinterface import Probe

    xs, ys, shank = [], [], []
    for s in range(4):
        for row in range(48):
            for col in range(2):
                xs.append(s * 250.0 + col * 32.0)
                ys.append(row * 15.0)
                shank.append(s)
    probe = Probe(ndim=2, si_units="um")
    probe.set_contacts(positions=np.c_[xs, ys], shapes="square", shape_params={"width": 12},
                       shank_ids=np.array(shank).astype(str))
    probe.set_device_channel_indices(np.arange(len(xs)))
    probe.create_auto_shape()
    return probe


# ------------------------------------------------------------------------------------------ writers
def write_int16(recording, path: Path, uv_per_bit: float, chunk_s: float = 1.0):
    """Write a float-µV SpikeInterface recording as int16; returns (uv_per_bit, clipped samples)."""
    n = recording.get_num_samples()
    step = int(chunk_s * recording.get_sampling_frequency())
    clipped = 0
    with open(path, "wb") as f:
        for s0 in range(0, n, step):
            x = recording.get_traces(start_frame=s0, end_frame=min(n, s0 + step)).astype(np.float64)
            q = np.round(x / uv_per_bit)
            clipped += int(np.count_nonzero(np.abs(q) > 32767))
            np.clip(q, -32768, 32767, out=q)
            f.write(q.astype("<i2").tobytes())
    return clipped


def write_si_case(folder: Path, name: str, d: dict, recording, sorting, templates, nt_before, drift, extra):
    import probeinterface

    folder.mkdir(parents=True, exist_ok=True)
    uvpb = UV_PER_BIT
    while True:
        clipped = write_int16(recording, folder / "recording.bin", uvpb)
        if clipped == 0:
            break
        uvpb *= 2.0
        print(f"  {name}: {clipped} samples would clip, rewriting with uv_per_bit = {uvpb}", flush=True)

    pg = recording.get_probegroup()
    probeinterface.write_probeinterface(folder / "probe.json", pg)

    sv = sorting.to_spike_vector()
    order = np.lexsort((sv["unit_index"], sv["sample_index"]))
    np.save(folder / "gt_spike_times.npy", sv["sample_index"][order].astype(np.int64))
    np.save(folder / "gt_spike_units.npy", sv["unit_index"][order].astype(np.int32))
    loc = sorting.get_property("gt_unit_locations")
    if loc is not None:
        np.save(folder / "gt_unit_positions.npy", np.asarray(loc, dtype=np.float32))
    if templates is not None:
        np.save(folder / "gt_templates.npy", np.asarray(templates, dtype=np.float32))
    np.save(folder / "gt_drift_um.npy", drift.astype(np.float32))

    meta = dict(fs_hz=float(recording.get_sampling_frequency()), n_chan=int(recording.get_num_channels()),
                n_samples=int(recording.get_num_samples()), dtype="int16", uv_per_bit=uvpb,
                seed=int(d["seed"]), drift=d.get("drift", "none"), nt_before=int(nt_before),
                n_units=int(sorting.get_num_units()), n_spikes=int(sv.size),
                simulator="spikeinterface", spikeinterface_version=_si_version(), settings=extra)
    (folder / "recording.json").write_text(json.dumps(meta, indent=2))


def _si_version():
    import spikeinterface

    return spikeinterface.__version__


# ------------------------------------------------------------------------------------------ generators
def gen_si(folder: Path, name: str, d: dict):
    from spikeinterface.core import generate_ground_truth_recording

    kw = dict(durations=[d["duration"]], sampling_frequency=FS, num_units=d["units"], seed=d["seed"],
              ms_before=1.0, ms_after=3.0)
    if d.get("probe") == "np2-4shank":
        kw["probe"] = np2_4shank_probe()
    else:
        kw["num_channels"] = d["n_chan"]
        kw["generate_probe_kwargs"] = dict(num_columns=d["columns"], xpitch=20, ypitch=20,
                                           contact_shapes="circle", contact_shape_params={"radius": 6})
    if "rate_hz" in d:
        kw["generate_sorting_kwargs"] = dict(firing_rates=d["rate_hz"], refractory_period_ms=4.0)
    rec, sorting = generate_ground_truth_recording(**kw)
    templates = getattr(rec, "templates", None)
    if templates is not None and templates.ndim == 4:  # upsampled variants: keep the first
        templates = templates[..., 0]
    nbefore = int(1.0 * FS / 1000.0)
    write_si_case(folder, name, d, rec, sorting, templates, nbefore, np.zeros((1, 1)),
                  dict(generator="generate_ground_truth_recording",
                       **{k: v for k, v in kw.items() if k not in ("probe", "durations")},
                       probe=d.get("probe", f"multi-column {d.get('columns')}"), noise_levels_uv=5.0))


def gen_si_drift(folder: Path, name: str, d: dict):
    from spikeinterface.generation import generate_drifting_recording

    nonrigid = d["drift"] == "nonrigid"
    disp_kw = dict(displacement_sampling_frequency=5.0, drift_start_um=[0, 20], drift_stop_um=[0, -20],
                   drift_step_um=1,
                   motion_list=[dict(drift_mode="zigzag", non_rigid_gradient=0.4 if nonrigid else None,
                                     t_start_drift=min(30.0, d["duration"] / 4), t_end_drift=None,
                                     period_s=min(200.0, d["duration"]))])
    static, drifting, sorting, info = generate_drifting_recording(
        num_units=d["units"], duration=d["duration"], sampling_frequency=FS, probe_name=d["probe"],
        generate_probe_kwargs=DRIFT_PROBES.get(d["probe"]),
        generate_displacement_vector_kwargs=disp_kw, extra_outputs=True, seed=d["seed"])
    # probe motion along depth: displacement vectors (t, xy, motion) times each unit's factor; rigid ->
    # one block; non-rigid -> 8 depth blocks, the factor interpolated at each block's centre depth.
    dv = info["displacement_vectors"][:, 1, :]  # (t, n_motion) µm
    fac = info["displacement_unit_factor"]  # (units, n_motion)
    uy = info["unit_locations"][:, 1]
    if nonrigid:
        ys = drifting.get_channel_locations()[:, 1]
        centres = np.linspace(ys.min(), ys.max(), 8)
        order = np.argsort(uy)
        f_blocks = np.stack([np.interp(centres, uy[order], fac[order, i]) for i in range(fac.shape[1])], 1)
        drift = dv @ f_blocks.T  # (t, blocks)
    else:
        drift = dv.sum(1, keepdims=True)
    tpl = info["templates"]
    write_si_case(folder, name, d, drifting, sorting, tpl.templates_array, tpl.nbefore, drift,
                  dict(generator="generate_drifting_recording", probe_name=d["probe"], duration=d["duration"],
                       num_units=d["units"], drift=d["drift"], drift_bin_s=1.0 / 5.0,
                       displacement_kwargs=disp_kw))


def gen_boundsort(folder: Path, name: str, d: dict):
    exe = boundsort_binary()
    if not os.path.isfile(exe):
        raise CaseSkipped(f"skipped: boundsort simulate not available (no binary at {exe})")
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [exe, "simulate", "-o", str(tmp), "--probe", d["probe"], "--duration", str(d["duration"]),
           "--units", str(d["units"]), "--drift", d["drift"], "--seed", str(d["seed"])]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        msg = (p.stderr or p.stdout).strip().splitlines()
        shutil.rmtree(tmp, ignore_errors=True)
        if any("not available" in line for line in msg):
            raise CaseSkipped("skipped: boundsort simulate not available")
        raise RuntimeError(f"boundsort simulate failed (exit {p.returncode}): {' | '.join(msg[-5:])}")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


GENERATORS = {"si": gen_si, "si-drift": gen_si_drift, "boundsort": gen_boundsort}


def ensure_case(name: str, verbose: bool = True) -> Path:
    """Generate the case (or reuse the cached folder); returns its folder. Raises CaseSkipped."""
    if name not in CASES:
        raise KeyError(f"unknown case '{name}'; known: {', '.join(CASES)}")
    folder = case_dir(name)
    if is_complete(folder, name):
        return folder
    d = CASES[name]
    if folder.exists():
        shutil.rmtree(folder)
    t0 = time.time()
    if verbose:
        print(f"generating {name} ({d['gen']}, seed {d['seed']}) -> {folder}", flush=True)
    GENERATORS[d["gen"]](folder, name, d)
    (folder / "case.json").write_text(json.dumps(dict(name=name, definition=d, complete=True,
                                                      generated_s=round(time.time() - t0, 2)), indent=2))
    if verbose:
        print(f"  {name}: done in {time.time() - t0:.1f} s", flush=True)
    return folder


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="*", help="case names (default: smoke)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    a = ap.parse_args(argv)
    if a.list:
        for n, d in CASES.items():
            print(f"{n:28s} {json.dumps(d)}")
        return 0
    rc = 0
    for n in a.cases or ["smoke"]:
        try:
            print(ensure_case(n))
        except CaseSkipped as e:
            print(f"{n}: {e}")
        except Exception as e:  # report and go on with the next case
            print(f"{n}: FAILED: {e}", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
