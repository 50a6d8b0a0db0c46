#!/usr/bin/env python3
"""qc_crosscheck.py - compare `boundsort qc` with SpikeInterface's quality metrics, unit by unit.

    python bench/qc_crosscheck.py SIM_DIR [--work DIR] [--boundsort BIN] [--reuse]

SIM_DIR is a `boundsort simulate` folder (recording.bin, probe.json, recording.json). The script
  1. sorts it with `boundsort sort ... --no-qc` into WORK/out (reused with --reuse),
  2. runs `boundsort qc WORK/out --max-spikes-per-unit 1000000000`: every spike in the "random"
     subset, so both sides average and fit the PCA on exactly the same spikes,
  3. builds the same analysis in SpikeInterface: the sorting read with read_kilosort(WORK/out), the
     recording as float32 µV with SpikeInterface's own highpass_filter (300 Hz, order 3,
     forward-backward, 100 ms margins so chunked filtering equals whole-trace filtering) then
     common_reference (global median); main channels from SpikeInterface's
     estimate_main_channel_from_recording on all spikes (peak_sign "both", 1 ms before / 2 ms
     after); radius sparsity 100 µm; random_spikes "all"; waveforms 1 / 2 ms; templates;
     noise_levels; spike_amplitudes; principal_components (5, by_channel_local, whitened);
     spike_locations whose y is replaced by the spike depths boundsort used (spike_positions.npy,
     or the Allen pc_features estimate recomputed here in numpy), so the drift formulas get the
     same input; then compute_quality_metrics,
  4. compares per unit and prints the table (metric, n units, NaN agreement, max abs diff, max rel
     diff, tolerance, pass). max_drift / cumulative_drift (Allen; not in SpikeInterface) are
     compared with a numpy transcription of Allen's ecephys code.

Run it with a SpikeInterface >= 0.104 environment (the definitions boundsort follows, docs/FORMATS.md §7):
    python3 -m venv bench/.venv-si
    bench/.venv-si/bin/pip install spikeinterface==0.105.3 scikit-learn pandas numba
With SpikeInterface 0.102 (bench/.venv) the script also runs, but several metrics were defined
differently then (see bench/README.md); it reports them as such instead of failing.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

METRICS = ["num_spikes", "firing_rate", "presence_ratio", "isi_violations_ratio", "isi_violations_count",
           "rp_contamination", "rp_violations", "sliding_rp_violation", "amplitude_cutoff", "amplitude_median",
           "snr", "isolation_distance", "l_ratio", "d_prime", "nn_hit_rate", "nn_miss_rate", "silhouette",
           "drift_ptp", "drift_std", "drift_mad", "max_drift", "cumulative_drift"]
# waveform-shape metrics: SpikeInterface's template_metrics (>= 0.105 names)
SHAPE = ["num_positive_peaks", "num_negative_peaks", "peak_to_trough_duration", "trough_half_width",
         "peak_half_width", "repolarization_slope", "recovery_slope", "main_to_next_extremum_duration",
         "peak_before_to_trough_ratio", "peak_after_to_trough_ratio", "peak_before_to_peak_after_ratio",
         "main_peak_to_trough_ratio", "trough_width", "peak_before_width", "peak_after_width",
         "waveform_baseline_flatness", "exp_decay"]
ONE_UP = 1 / 300000.0  # one upsampled sample (30 kHz x 10), s

# (kind, value, why). kind "rel": |a-b| <= tol * max(|a|, |b|, floor); "abs": |a-b| <= tol.
TOLERANCE = {
    "num_spikes": ("abs", 0, "integer count, same spikes"),
    "firing_rate": ("rel", 1e-10, "same formula on the same counts (TSV values have 12 digits)"),
    "presence_ratio": ("abs", 1e-12, "same bins, same spikes"),
    "isi_violations_ratio": ("rel", 1e-9, "same formula, same ISIs"),
    "isi_violations_count": ("abs", 0, "integer count"),
    "rp_contamination": ("rel", 1e-9, "same formula, integer violation counts"),
    "rp_violations": ("abs", 0, "integer count"),
    "sliding_rp_violation": ("abs", 1e-12, "same correlogram and Poisson test; a value on the 0.5 % grid"),
    "amplitude_cutoff": ("abs", 1e-6, "same amplitudes (to ~1e-4 µV) through the same integer histogram"),
    "amplitude_median": ("abs", 2e-3, "µV; filtered traces agree to ~1e-4 µV (float32, filter edges)"),
    "snr": ("rel", 0.03, "noise levels come from different random 0.5 s chunks (MAD sampling error ~1 %)"),
    "isolation_distance": ("rel", 1e-4, "PCA fitted in float32 (SI) vs float64 (boundsort); Mahalanobis "
                                        "distances amplify it by the covariance's condition number"),
    "l_ratio": ("rel", 1e-3, "as isolation_distance, on chi-square tails"),
    "d_prime": ("rel", 1e-4, "float32 vs float64 PCA and LDA"),
    "nn_hit_rate": ("abs", 1e-3, "k-NN on float32 vs float64 features: near-ties may swap a neighbour"),
    "nn_miss_rate": ("abs", 1e-3, "as nn_hit_rate"),
    "silhouette": ("abs", 1e-5, "float32 vs float64 PCA"),
    "drift_ptp": ("abs", 1e-4, "µm; same depths (float32 in boundsort), same bins"),
    "drift_std": ("abs", 1e-4, "µm"),
    "drift_mad": ("abs", 1e-4, "µm"),
    "max_drift": ("abs", 1e-4, "µm; numpy transcription of Allen's code"),
    "cumulative_drift": ("abs", 1e-4, "µm"),
    # the templates agree to float32 rounding; scipy upsamples in float32, boundsort in double
    "num_positive_peaks": ("abs", 0, "integer count"),
    "num_negative_peaks": ("abs", 0, "integer count"),
    "peak_to_trough_duration": ("abs", 1.01 * ONE_UP, "s; an extremum may move by one upsampled sample"),
    "trough_half_width": ("abs", 1.01 * ONE_UP, "s; threshold crossings, one upsampled sample"),
    "peak_half_width": ("abs", 1.01 * ONE_UP, "s"),
    "repolarization_slope": ("rel", 1e-3, "µV/s; least squares over the same samples"),
    "recovery_slope": ("rel", 1e-3, "µV/s"),
    "main_to_next_extremum_duration": ("abs", 1.01 * ONE_UP, "s"),
    # both sides sum the templates in float32, in different orders: ~1e-3 µV on a peak of a few µV
    "peak_before_to_trough_ratio": ("abs", 1e-3, "|amplitude| ratio; float32 template sums"),
    "peak_after_to_trough_ratio": ("abs", 1e-3, "|amplitude| ratio; float32 template sums"),
    "peak_before_to_peak_after_ratio": ("abs", 1e-3, "|amplitude| ratio; float32 template sums"),
    "main_peak_to_trough_ratio": ("abs", 1e-3, "|amplitude| ratio; float32 template sums"),
    "trough_width": ("abs", 1e-7, "s; find_peaks widths, interpolated"),
    "peak_before_width": ("abs", 1e-7, "s"),
    "peak_after_width": ("abs", 1e-7, "s"),
    "waveform_baseline_flatness": ("abs", 1e-3, "ratio; float32 template sums"),
    "exp_decay": ("abs", 1e-5, "1/µm; scipy's trust-region fit vs a profiled exact search of the same bounded "
                               "least squares (on flat footprints, k < 1e-3, the residual hardly depends on k)"),
}
REL_FLOOR = 1e-12


def run(cmd):
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True)


def read_tsv(path):
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    return header, rows


def allen_depths(out, n_chan_y):
    feats = np.load(out / "pc_features.npy", mmap_mode="r")
    ind = np.load(out / "pc_feature_ind.npy")
    tmpl = np.load(out / "spike_templates.npy").astype(np.int64).ravel()
    f0 = np.array(feats[:, 0, :], dtype=np.float64)
    f0[f0 < 0] = 0
    pw = f0 ** 2
    ych = n_chan_y[ind[tmpl]]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(ych * pw, axis=1) / np.sum(pw, axis=1)


def allen_drift(times_s, depths, t_first_s, t_last_s, interval=100.0, min_spikes=10):
    """Allen ecephys_spike_sorting calculate_drift_metrics (one unit), without its 2-decimal rounding."""
    starts = np.arange(t_first_s, t_last_s, interval)
    ends = starts + interval
    med = []
    for a, b in zip(starts, ends):
        r = (times_s > a) & (times_s < b)
        med.append(np.median(depths[r]) if np.sum(r) >= min_spikes else np.nan)
    med = np.array(med)
    if np.all(np.isnan(med)):
        return np.nan, np.nan
    return np.nanmax(med) - np.nanmin(med), np.nansum(np.abs(np.diff(med)))


def si_metrics(sim, out, work, si_version):
    import spikeinterface as si
    import spikeinterface.extractors as se
    import spikeinterface.preprocessing as spre
    from probeinterface import read_probeinterface

    meta = json.loads((sim / "recording.json").read_text())
    fs, n_chan, uv = float(meta["fs_hz"]), int(meta["n_chan"]), float(meta["uv_per_bit"])
    pg = read_probeinterface(sim / "probe.json")
    probe = pg.probes[0]
    dci = np.asarray(probe.device_channel_indices)
    raw = np.fromfile(sim / "recording.bin", dtype="<i2").reshape(-1, n_chan)
    data = (raw[:, dci].astype(np.float32) * np.float32(uv)).astype(np.float32)
    probe.set_device_channel_indices(np.arange(len(dci)))
    rec = si.NumpyRecording([data], sampling_frequency=fs)
    r = rec.set_probe(probe)  # returns None (in place) in SpikeInterface >= 0.104, a new recording before
    rec = r if r is not None else rec
    rec = spre.highpass_filter(rec, freq_min=300.0, filter_order=3, margin_ms=100.0)
    rec = spre.common_reference(rec, reference="global", operator="median")
    sorting = se.read_kilosort(out)
    job = dict(n_jobs=1, chunk_duration="1s", progress_bar=False)

    new_api = tuple(int(x) for x in si_version.split(".")[:2]) >= (0, 104)
    if new_api:
        from spikeinterface.core.template_tools import estimate_main_channel_from_recording
        main = estimate_main_channel_from_recording(rec, sorting, peak_sign="both", peak_mode="extremum",
                                                    num_spikes_for_main_channel=10 ** 9, ms_before=1.0,
                                                    ms_after=2.0, seed=0, **job)
        an = si.create_sorting_analyzer(sorting, rec, format="memory", main_channel_indices=np.asarray(main),
                                        peak_sign="both", sparse=True,
                                        sparsity_kwargs=dict(method="radius", radius_um=100.0), job_kwargs=job)
    else:
        dense = si.create_sorting_analyzer(sorting, rec, format="memory", sparse=False)
        dense.compute("random_spikes", method="all")
        dense.compute("templates", ms_before=1.0, ms_after=2.0, **job)
        sp = si.compute_sparsity(dense, method="radius", radius_um=100.0, peak_sign="neg")
        an = si.create_sorting_analyzer(sorting, rec, format="memory", sparsity=sp)
    an.compute("random_spikes", method="all")
    an.compute("waveforms", ms_before=1.0, ms_after=2.0, **job)
    an.compute("templates")
    an.compute("noise_levels", **({"random_slices_kwargs": {"seed": 0}} if new_api else {}))
    an.compute("spike_amplitudes", **job)
    an.compute("principal_components", n_components=5, mode="by_channel_local", whiten=True, **job)
    an.compute("spike_locations", method="center_of_mass", **job)

    # the depths boundsort used, in SpikeInterface's spike order (sample, then unit)
    times = np.load(out / "spike_times.npy").astype(np.int64).ravel()
    clus_file = out / "spike_clusters.npy"
    clus = np.load(clus_file if clus_file.exists() else out / "spike_templates.npy").astype(np.int64).ravel()
    ych = np.array([c[1] for c in probe.contact_positions], dtype=np.float64)
    if (out / "spike_positions.npy").exists():
        depth = np.load(out / "spike_positions.npy")[:, 1].astype(np.float64)
    else:
        depth = allen_depths(out, ych)
    sv = sorting.to_spike_vector()
    # match spikes by (sample, unit): the order of same-sample spikes differs between versions
    uidx = np.searchsorted(sorting.unit_ids, clus)
    ours_sorted = np.lexsort((uidx, times))
    si_sorted = np.lexsort((sv["unit_index"], sv["sample_index"]))
    assert np.array_equal(times[ours_sorted], sv["sample_index"][si_sorted])
    assert np.array_equal(uidx[ours_sorted], sv["unit_index"][si_sorted]), "spikes differ from SpikeInterface's"
    ext = an.get_extension("spike_locations")
    loc = np.zeros(len(sv), dtype=[("x", "float64"), ("y", "float64")])
    loc["y"][si_sorted] = depth[ours_sorted]
    ext.data["spike_locations"] = loc

    names = ["num_spikes", "firing_rate", "presence_ratio", "snr", "isi_violation", "rp_violation",
             "sliding_rp_violation", "amplitude_cutoff", "amplitude_median", "drift"]
    names += ["mahalanobis", "d_prime", "nearest_neighbor", "silhouette"] if new_api else \
        ["isolation_distance", "l_ratio", "d_prime", "nearest_neighbor", "silhouette"]
    qm = an.compute("quality_metrics", metric_names=names, skip_pc_metrics=False, **job).get_data()
    tm = an.compute("template_metrics").get_data() if new_api else None
    types = {}
    if new_api:
        from spikeinterface.curation import bombcell_label_units
        lab = bombcell_label_units(an)
        types = {int(u): str(v) for u, v in zip(lab.index, lab["bombcell_label"])}

    res = {}
    t_s = times / fs
    for uid in sorting.unit_ids:
        row = {m: float(qm.loc[uid, m]) if m in qm.columns and qm.loc[uid, m] is not None else np.nan
               for m in METRICS if m not in ("max_drift", "cumulative_drift")}
        sel = clus == uid
        ok = ~np.isnan(depth[sel])
        row["max_drift"], row["cumulative_drift"] = allen_drift(t_s[sel][ok], depth[sel][ok], t_s.min(), t_s.max())
        for m in SHAPE:
            row[m] = float(tm.loc[uid, m]) if tm is not None and m in tm.columns else np.nan
        row["_unit_type"] = types.get(int(uid), "")
        row["_subset"] = int(np.sum(sel))
        row["_features"] = 5 * int(np.sum(an.sparsity.mask[sorting.id_to_index(uid)]))
        res[int(uid)] = row
    noise = an.get_extension("noise_levels").get_data()
    return res, noise


def compare(ours, theirs, changed):
    lines = []
    header = f"{'metric':22s} {'units':>5s} {'finite':>6s} {'NaN ok':>6s} {'max abs diff':>13s} " \
             f"{'max rel diff':>13s}  {'tolerance':>10s}  pass"
    lines.append(header)
    all_pass = True
    for m in METRICS + SHAPE:
        kind, tol, why = TOLERANCE[m]
        n = nan_bad = finite = 0
        mad = mrd = 0.0
        ok = True
        singular = 0
        for uid, row in theirs.items():
            if uid not in ours:
                continue
            a, b = ours[uid][m], row[m]
            n += 1
            if np.isnan(a) or np.isnan(b):
                if m == "isolation_distance" and np.isnan(a) and row["_subset"] <= row["_features"]:
                    singular += 1  # SpikeInterface inverts a singular covariance (result ~1e16); we say NaN
                elif np.isnan(a) != np.isnan(b):
                    nan_bad += 1
                    ok = False
                continue
            finite += 1
            d = abs(a - b)
            r = d / max(abs(a), abs(b), REL_FLOOR)
            mad, mrd = max(mad, d), max(mrd, r)
            ok &= (d <= tol) if kind == "abs" else (r <= tol or d <= REL_FLOOR)
        verdict = "yes" if ok else ("definition differs" if m in changed else "NO")
        all_pass &= ok or m in changed
        tol_s = f"{kind} {tol:g}"
        nan_s = "all" if nan_bad == 0 else f"{nan_bad} bad"
        lines.append(f"{m:22s} {n:5d} {finite:6d} {nan_s:>6s} {mad:13.3g} {mrd:13.3g}  {tol_s:>10s}  {verdict}"
                     + (f"  ({singular} units with <= as many spikes as features: SpikeInterface inverts the "
                        f"singular covariance, boundsort gives NaN)" if singular else ""))
    return lines, all_pass


SI_TYPE = {"non_soma": "non-somatic"}  # SpikeInterface's name for the class


def unit_type_table(ours, theirs):
    """Counts per class by both, and every unit whose class differs with the deciding rule."""
    classes = ["noise", "non-somatic", "mua", "good"]
    lines = ["", "unit types (Bombcell's default thresholds): boundsort (rows) vs SpikeInterface "
                 "bombcell_label_units (columns)", f"{'':12s}" + "".join(f"{c:>12s}" for c in classes)]
    n = {(a, b): 0 for a in classes for b in classes}
    diff = []
    for u, r in theirs.items():
        a, b = ours[u]["_unit_type"], SI_TYPE.get(r["_unit_type"], r["_unit_type"])
        n[(a, b)] = n.get((a, b), 0) + 1
        if a != b:
            diff.append(f"  unit {u}: boundsort {a} ({ours[u]['_reason']}), SpikeInterface {b}")
    for a in classes:
        lines.append(f"{a:12s}" + "".join(f"{n[(a, b)]:12d}" for b in classes))
    agree = sum(n[(c, c)] for c in classes)
    lines.append(f"agreement: {agree} of {len(theirs)} units ({100.0 * agree / max(1, len(theirs)):.1f} %)")
    return lines + diff


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sim", type=Path)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--boundsort", default=os.environ.get("BOUNDSORT", str(ROOT / "build" / "boundsort")))
    ap.add_argument("--reuse", action="store_true", help="reuse WORK/out if it holds a sorting")
    args = ap.parse_args()
    import spikeinterface
    si_version = spikeinterface.__version__
    sim = args.sim.resolve()
    work = (args.work or HERE / "work" / f"qc-{sim.name}").resolve()
    out = work / "out"
    meta = json.loads((sim / "recording.json").read_text())
    rec_args = [sim / "recording.bin", "--probe", sim / "probe.json", "--fs", meta["fs_hz"], "--uv-per-bit",
                meta["uv_per_bit"]]
    if not (args.reuse and (out / "params.py").exists()):
        shutil.rmtree(out, ignore_errors=True)
        run([args.boundsort, "sort", *rec_args, "-o", out, "--no-qc", "-q"])
    old = tuple(int(x) for x in si_version.split(".")[:2]) < (0, 104)
    # SpikeInterface < 0.104 finds main channels and amplitudes on the negative peak only
    run([args.boundsort, "qc", out, "--max-spikes-per-unit", 1000000000, "-q"] + (["--peak-sign", "neg"] if old else []))
    h, rows = read_tsv(out / "qc" / "qc_metrics.tsv")
    ours = {int(r[0]): {m: float(v) for m, v in zip(h[1:], r[1:])} for r in rows}
    _, trows = read_tsv(out / "cluster_unit_type.tsv")
    for r in trows:
        ours[int(r[0])]["_unit_type"], ours[int(r[0])]["_reason"] = r[1], r[2]
    theirs, noise = si_metrics(sim, out, work, si_version)
    # definitions that changed after 0.102 (bench/README.md): not failures of boundsort
    changed = {"amplitude_cutoff", "drift_std", "drift_mad", "nn_hit_rate", "nn_miss_rate",
               "sliding_rp_violation"} if old else set()
    lines, ok = compare(ours, theirs, changed)
    if not old:  # unit types against bombcell_label_units on SpikeInterface's own metrics
        lines += unit_type_table(ours, theirs)
        agree = sum(ours[u]["_unit_type"] == SI_TYPE.get(r["_unit_type"], r["_unit_type"])
                    for u, r in theirs.items())
        ok &= agree == len(theirs)
    if not old:  # curation.json through SpikeInterface's own curation model (format v2 needs >= 0.104)
        import spikeinterface.extractors as se
        from spikeinterface.curation import apply_curation
        cur = json.loads((out / "curation.json").read_text())
        cs = apply_curation(se.read_kilosort(out), cur)
        _, lrows = read_tsv(out / "cluster_qc_label.tsv")
        want = {int(r[0]): r[1] for r in lrows}
        got = dict(zip((int(u) for u in cs.unit_ids), cs.get_property("qc_label")))
        cur_ok = all(want[u] == str(v) for u, v in got.items())
        ok &= cur_ok
        lines.append(f"curation.json: accepted by apply_curation (format v2), qc_label of {len(got)} units "
                     f"{'matches' if cur_ok else 'DIFFERS from'} cluster_qc_label.tsv")
    title = (f"boundsort qc vs SpikeInterface {si_version} on {sim.name}: {len(theirs)} units, "
             f"{int(sum(r['num_spikes'] for r in theirs.values()))} spikes")
    print()
    print(title)
    print("\n".join(lines))
    (work / "crosscheck.txt").write_text(title + "\n" + "\n".join(lines) + "\n")
    json.dump({"si_version": si_version, "ours": ours, "si": theirs, "si_noise_uv": noise.tolist()},
              open(work / "crosscheck.json", "w"), indent=1, default=float)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
