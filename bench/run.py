#!/usr/bin/env python3
"""
run.py - boundsort and Kilosort 4 side by side on the ground-truth cases of cases.py.

For each case (generated or taken from the cache by cases.ensure_case):
  1. boundsort: `boundsort sort DIR/recording.bin --probe DIR/probe.json --fs FS --n-chan C
     --dtype int16 --uv-per-bit X -o OUT` under /usr/bin/time -v. While `boundsort sort` says it is
     not available, its row says so and carries no numbers.
  2. Kilosort 4: ks4_driver.py (default settings, device cpu, torch threads = cores) under
     `nice -n 10 /usr/bin/time -v`. One sorter at a time, never two.
  3. Scoring, for each sorter that produced a Phy folder:
       * SpikeInterface compare_sorter_to_ground_truth (exhaustive GT, default delta 0.4 ms, match
         score 0.5); well-detected = accuracy >= 0.8; false-positive units = count_false_positive_units().
       * `boundsort compare OUT GT --json` when that command is available; its per-unit accuracies
         must agree with SpikeInterface's within 0.01 (else the row is flagged "DISAGREE"). It also gives
         each GT unit's SNR (from the case's templates and recording) and the "well-det SNR>=5" column:
         well-detected units among the GT units with SNR >= 5, and "SNR>=5 lost as": where the others
         went (split, missed, absorbed, merged, partial; see src/sim/compare.h).
  4. One table on stdout (and bench/results/<date>-<cases>-table.txt) and bench/results/<date>-<case>.json
     with machine info (cores, CPU model, RAM), versions and every number.

Work folders: bench/work/<case>/<sorter>/ (Phy output), <sorter>.log, <sorter>.time (time -v).
--reuse takes an existing finished run (time file with exit status 0 and the Phy folder) instead of
sorting again: the numbers are still those of that earlier run of this script or of ks4_driver.py.

--bs-variant LABEL=ARGS (repeatable) runs boundsort once per variant with ARGS appended to `sort`, e.g.
  --bs-variant "boundsort=--no-qc" --bs-variant "boundsort-nodrift=--no-qc --no-drift"
Default: one variant, boundsort=--no-qc (quality metrics off, so sorting is timed against sorting).

Usage: python bench/run.py [--reuse] [--only boundsort|ks4] [--bs-variant LABEL=ARGS ...] [CASE ... | all]
       (default cases: smoke si-32ch-60s-20u; `all`: every case of cases.py, in its order)
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata as md
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent / "python"))  # boundsort_si (score_si), whichever venv runs this
import cases as casesmod  # noqa: E402

WORK = HERE / "work"
RESULTS = HERE / "results"
WELL = 0.8
AGREE_TOL = 0.01
# boundsort's default bench run: sorting only (quality metrics skipped, as Kilosort 4 computes none)
DEFAULT_VARIANT = ("boundsort", ["--no-qc"])
PY = sys.executable
# SpikeInterface's own sorters and MountainSort 5 (bench/si_sorter_driver.py) need SpikeInterface >= 0.105,
# which needs numpy >= 2: they run in their own venv (bench/README.md, "Peer sorters")
PEER_PY = os.environ.get("BS_PEER_PYTHON", str(HERE / ".venv-si" / "bin" / "python"))
PEER_LABELS = {"spykingcircus2": "SC2", "tridesclous2": "TDC2", "lupin": "lupin", "mountainsort5": "MS5"}


# ------------------------------------------------------------------------------------------ machine
def machine_info():
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return dict(cores=os.cpu_count(), cpu_model=cpu, ram_gib=round(mem_kib / 2**20, 1) if mem_kib else None,
                loadavg_at_start=load, platform=platform.platform(), python=platform.python_version())


def versions(bs_exe):
    v = {}
    for pkg in ("kilosort", "torch", "spikeinterface", "probeinterface", "numpy", "scipy", "scikit-learn"):
        try:
            v[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            v[pkg] = None
    try:
        import torch

        v["torch"] = torch.__version__
    except ImportError:
        pass
    v["boundsort_binary"] = bs_exe
    try:
        p = subprocess.run([bs_exe, "--version"], capture_output=True, text=True, timeout=30)
        v["boundsort"] = p.stdout.strip() if p.returncode == 0 else None
    except OSError:
        v["boundsort"] = None
    try:
        v["bench_git"] = subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
                                            capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    return v


# ------------------------------------------------------------------------------------------ timing
def parse_time_v(path: Path):
    """Wall seconds, peak RSS MiB and exit status from a `/usr/bin/time -v -o path` file."""
    txt = path.read_text()
    wall = rss = status = None
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", txt)
    if m:
        parts = [float(x) for x in m.group(1).split(":")]
        wall = 0.0
        for p in parts:
            wall = wall * 60 + p
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", txt)
    if m:
        rss = int(m.group(1)) / 1024.0
    m = re.search(r"Exit status: (\d+)", txt)
    if m:
        status = int(m.group(1))
    if status is None and "Command terminated by signal" in txt:
        status = -1
    return wall, rss, status


def timed(cmd, log: Path, tfile: Path, nice=True):
    full = (["nice", "-n", "10"] if nice else []) + ["/usr/bin/time", "-v", "-o", str(tfile)] + cmd
    with open(log, "w") as f:
        f.write("$ " + " ".join(map(str, cmd)) + "\n")
        f.flush()
        subprocess.run(full, stdout=f, stderr=subprocess.STDOUT)
    return parse_time_v(tfile)


# ------------------------------------------------------------------------------------------ sorters
def run_boundsort(case: Path, meta: dict, wd: Path, bs_exe: str, reuse: bool, label="boundsort", extra=()):
    """One `boundsort sort` run with the variant's extra arguments; work files are named by its label.
    --reuse takes an earlier run only if it was made with the same extra arguments (label.args)."""
    out, log, tfile, afile = wd / label, wd / f"{label}.log", wd / f"{label}.time", wd / f"{label}.args"
    extra = list(extra)
    if reuse and tfile.exists() and (out / "spike_times.npy").exists():
        wall, rss, st = parse_time_v(tfile)
        same = afile.exists() and json.loads(afile.read_text()) == extra
        if st == 0 and same:
            return dict(status="ok", reused=True, wall_s=wall, peak_rss_mib=rss, out=str(out), extra_args=extra)
    if not os.path.isfile(bs_exe):
        return dict(status="not available", note=f"no boundsort binary at {bs_exe}")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [bs_exe, "sort", str(case / "recording.bin"), "--probe", str(case / "probe.json"),
           "--fs", str(meta["fs_hz"]), "--n-chan", str(meta["n_chan"]), "--dtype", "int16",
           "--uv-per-bit", str(meta["uv_per_bit"]), "-o", str(out)] + extra
    afile.unlink(missing_ok=True)
    wall, rss, st = timed(cmd, log, tfile, nice=True)
    text = log.read_text()
    if st != 0:
        if "not available" in text:
            return dict(status="not available", note="boundsort sort: not available yet in this version")
        return dict(status="failed", exit=st, note=text.strip().splitlines()[-1] if text.strip() else "",
                    wall_s=wall, peak_rss_mib=rss)
    afile.write_text(json.dumps(extra))
    return dict(status="ok", wall_s=wall, peak_rss_mib=rss, out=str(out), command=cmd, extra_args=extra)


def parse_variant(text: str):
    """'LABEL=ARGS' -> (LABEL, [ARGS...]) for --bs-variant; LABEL must start with 'boundsort'."""
    label, sep, args = text.partition("=")
    if not sep or not re.fullmatch(r"boundsort[A-Za-z0-9_.-]*", label):
        raise argparse.ArgumentTypeError(f"--bs-variant: expected LABEL=ARGS with LABEL like boundsort-nodrift, "
                                         f"got '{text}'")
    return label, shlex.split(args)


def run_driver(cmd, out: Path, log: Path, tfile: Path, meta_name: str, reuse: bool):
    """A sorter driver (ks4_driver.py, si_sorter_driver.py) under time -v, or its earlier finished run with
    --reuse; the driver's own record out/meta_name, when written, goes into the result as "driver"."""
    r = None
    if reuse and tfile.exists() and (out / "spike_times.npy").exists():
        wall, rss, st = parse_time_v(tfile)
        if st == 0:
            r = dict(status="ok", reused=True, wall_s=wall, peak_rss_mib=rss, out=str(out))
    if r is None:
        shutil.rmtree(out, ignore_errors=True)
        wall, rss, st = timed(cmd, log, tfile, nice=True)
        if st != 0:
            lines = log.read_text().strip().splitlines()
            return dict(status="failed", exit=st, note=lines[-1] if lines else "", wall_s=wall, peak_rss_mib=rss)
        r = dict(status="ok", wall_s=wall, peak_rss_mib=rss, out=str(out), command=cmd)
    if (out / meta_name).exists():
        r["driver"] = json.loads((out / meta_name).read_text())
    return r


def run_ks4(case: Path, meta: dict, wd: Path, reuse: bool):
    cmd = [PY, str(HERE / "ks4_driver.py"), str(case), str(wd / "ks4"), "--threads", str(os.cpu_count()),
           "--device", "cpu"]
    return run_driver(cmd, wd / "ks4", wd / "ks4.log", wd / "ks4.time", "ks4_driver.json", reuse)


def run_peer(case: Path, wd: Path, sorter: str, reuse: bool, jobs: int = 2):
    """One SpikeInterface sorter (si_sorter_driver.py) with default parameters and `jobs` jobs."""
    if not os.path.isfile(PEER_PY):
        return dict(status="not available", note=f"no python at {PEER_PY} (set BS_PEER_PYTHON)")
    out = wd / sorter
    cmd = [PEER_PY, str(HERE / "si_sorter_driver.py"), sorter, str(case), str(out), "--jobs", str(jobs)]
    return run_driver(cmd, out, wd / f"{sorter}.log", wd / f"{sorter}.time", "driver.json", reuse)


def gt_sorting(case: Path, fs: float):
    from spikeinterface.core import NumpySorting

    t = np.load(case / "gt_spike_times.npy")
    u = np.load(case / "gt_spike_units.npy")
    n_units = int(json.loads((case / "recording.json").read_text()).get("n_units", u.max() + 1))
    return NumpySorting.from_samples_and_labels([t], [u], fs, unit_ids=np.arange(n_units))


def score_si(case: Path, fs: float, phy: Path):
    from spikeinterface.comparison import compare_sorter_to_ground_truth
    from spikeinterface.extractors import read_kilosort

    gt = gt_sorting(case, fs)
    # boundsort's folder also holds tables that are not per cluster (bad_channels.tsv, artifacts.tsv), which the
    # reader would join on cluster_id: the sorter wrapper's cluster_info.tsv first, as run_sorter does
    from boundsort_si.sorter import BoundsortSorter

    BoundsortSorter._write_cluster_info(Path(phy))
    tested = read_kilosort(phy, keep_good_only=False)
    comp = compare_sorter_to_ground_truth(gt, tested, exhaustive_gt=True)
    perf = comp.get_performance(method="by_unit")
    acc = perf["accuracy"].astype(float)
    good_label = None
    try:
        good_label = int(np.sum(np.asarray(tested.get_property("KSLabel")) == "good"))
    except Exception:
        pass
    return dict(gt_units=int(gt.get_num_units()), sorted_units=int(tested.get_num_units()),
                good_labelled_units=good_label,
                well_detected=int(np.sum(acc.values >= WELL)), mean_accuracy=float(acc.mean()),
                median_accuracy=float(acc.median()), false_positive_units=int(comp.count_false_positive_units()),
                redundant_units=int(comp.count_redundant_units()),
                per_unit_accuracy={str(k): float(v) for k, v in acc.items()},
                per_unit_recall={str(k): float(v) for k, v in perf["recall"].astype(float).items()},
                per_unit_precision={str(k): float(v) for k, v in perf["precision"].astype(float).items()})


def score_boundsort_compare(bs_exe: str, phy: Path, case: Path):
    """Per-unit accuracies and the SNR summary from `boundsort compare OUT GT --json`, or a note why there are
    none. Returns ((accuracies, snr), note); snr = dict(threshold, gt_units, well_detected, per_unit) or None
    when the case folder gives no SNR."""
    if not os.path.isfile(bs_exe):
        return None, "boundsort compare: no binary"
    p = subprocess.run([bs_exe, "compare", str(phy), str(case), "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        msg = (p.stderr or p.stdout).strip()
        if "not available" in msg:
            return None, "skipped: boundsort compare not available"
        return None, f"boundsort compare failed (exit {p.returncode}): {msg.splitlines()[-1] if msg else ''}"
    try:
        data = json.loads(p.stdout)
    except ValueError as e:
        return None, f"boundsort compare: output is not JSON ({e})"
    units = data.get("units", data) if isinstance(data, dict) else data
    acc = {}
    if isinstance(units, list):
        for row in units:
            uid = row.get("gt_unit", row.get("unit", row.get("unit_id")))
            if uid is not None and "accuracy" in row:
                acc[str(int(uid))] = float(row["accuracy"])
    elif isinstance(units, dict):
        for k, row in units.items():
            if isinstance(row, dict) and "accuracy" in row:
                acc[str(int(k))] = float(row["accuracy"])
    if not acc:
        return None, "boundsort compare: no per-unit 'accuracy' found in its JSON"
    snr = None
    if isinstance(data, dict) and data.get("n_gt_snr") is not None:
        snr = dict(threshold=data["snr_threshold"], gt_units=data["n_gt_snr"],
                   well_detected=data["n_well_detected_snr"], loss=data.get("n_loss_snr"),
                   per_unit={str(int(u["gt_unit"])): u.get("snr") for u in units if isinstance(u, dict)})
    return (acc, snr), "ok"


def agreement(si_acc: dict, bs_acc: dict):
    keys = sorted(set(si_acc) | set(bs_acc), key=int)
    diffs = {k: abs(si_acc.get(k, np.nan) - bs_acc.get(k, np.nan)) for k in keys}
    bad = {k: d for k, d in diffs.items() if not (d <= AGREE_TOL)}
    return dict(max_abs_diff=float(np.nanmax(list(diffs.values()))) if diffs else None,
                disagreeing_units=sorted(bad, key=int), agree=not bad)


# ------------------------------------------------------------------------------------------ table
def fmt(x, f="{:.0f}"):
    return "-" if x is None else f.format(x)


def table(rows):
    hdr = ["case", "sorter", "GT units", "well-det (acc>=0.8)", "well-det SNR>=5", "SNR>=5 lost as", "mean acc", "FP units", "wall s",
           "peak RSS MiB", "time bs/KS4", "mem bs/KS4", "check"]
    lines = [hdr]
    for r in rows:
        snr = r.get("snr")
        lines.append([r["case"], r["sorter"], fmt(r.get("gt_units")), fmt(r.get("well_detected")),
                      f"{snr['well_detected']} of {snr['gt_units']}" if snr else "-",
                      ", ".join(f"{v} {k}" for k, v in (snr.get("loss") or {}).items() if k != "well" and v) or "-"
                      if snr else "-",
                      fmt(r.get("mean_accuracy"), "{:.3f}"), fmt(r.get("false_positive_units")),
                      fmt(r.get("wall_s"), "{:.1f}"), fmt(r.get("peak_rss_mib"), "{:.0f}"),
                      fmt(r.get("time_ratio"), "{:.2f}"), fmt(r.get("mem_ratio"), "{:.2f}"), r.get("check", "")])
    w = [max(len(str(l[i])) for l in lines) for i in range(len(hdr))]
    out = []
    for i, l in enumerate(lines):
        out.append("| " + " | ".join(str(c).ljust(w[j]) for j, c in enumerate(l)) + " |")
        if i == 0:
            out.append("|" + "|".join("-" * (w[j] + 2) for j in range(len(hdr))) + "|")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description="boundsort vs Kilosort 4 on ground-truth cases")
    ap.add_argument("cases", nargs="*", default=["smoke", "si-32ch-60s-20u"])
    ap.add_argument("--reuse", action="store_true", help="reuse finished runs found in bench/work/")
    ap.add_argument("--only", choices=["boundsort", "ks4", "peers"],
                    help="run only this sorter (boundsort: all its variants; peers: those of --peers)")
    ap.add_argument("--peers", default="", help="comma-separated peer sorters run on every case with default "
                    f"parameters and 2 jobs: {', '.join(PEER_LABELS)} (bench/si_sorter_driver.py)")
    ap.add_argument("--bs-variant", action="append", type=parse_variant, metavar="LABEL=ARGS",
                    help="a boundsort run with extra `sort` arguments, labelled LABEL in the table and work folder; "
                         f"repeatable (default: {DEFAULT_VARIANT[0]}={' '.join(DEFAULT_VARIANT[1])})")
    a = ap.parse_args(argv)
    variants = a.bs_variant or [DEFAULT_VARIANT]
    peers = [x for x in a.peers.split(",") if x]
    for x in peers:
        if x not in PEER_LABELS:
            ap.error(f"--peers: unknown sorter '{x}' (one of {', '.join(PEER_LABELS)})")
    if a.cases == ["all"]:
        a.cases = list(casesmod.CASES)

    bs_exe = casesmod.boundsort_binary()
    mach, vers = machine_info(), versions(bs_exe)
    today = datetime.date.today().isoformat()
    RESULTS.mkdir(parents=True, exist_ok=True)
    rows, notes = [], []
    for name in a.cases:
        try:
            case = casesmod.ensure_case(name)
        except casesmod.CaseSkipped as e:
            print(f"{name}: {e}", flush=True)
            notes.append(f"{name}: {e}")
            rows.append(dict(case=name, sorter="-", check=str(e)))
            continue
        meta = json.loads((case / "recording.json").read_text())
        wd = WORK / name
        wd.mkdir(parents=True, exist_ok=True)
        res = {}
        jobs = [] if a.only in ("ks4", "peers") else [(lab, ex) for lab, ex in variants]
        if a.only in (None, "ks4"):
            jobs.append(("ks4", None))
        if a.only in (None, "peers"):
            jobs += [(x, None) for x in peers]
        for sorter, extra in jobs:
            t0 = time.time()
            print(f"{name}: running {sorter} ...", flush=True)
            r = run_ks4(case, meta, wd, a.reuse) if sorter == "ks4" else \
                run_peer(case, wd, sorter, a.reuse) if sorter in PEER_LABELS else \
                run_boundsort(case, meta, wd, bs_exe, a.reuse, sorter, extra)
            print(f"{name}: {sorter}: {r['status']}{' (reused)' if r.get('reused') else ''}"
                  f" in {time.time() - t0:.1f} s {r.get('note', '')}", flush=True)
            if r["status"] == "ok":
                r["si"] = score_si(case, meta["fs_hz"], Path(r["out"]))
                scored, note = score_boundsort_compare(bs_exe, Path(r["out"]), case)
                r["boundsort_compare"] = note
                if scored is not None:
                    r["agreement"] = agreement(r["si"]["per_unit_accuracy"], scored[0])
                    r["snr"] = scored[1]
            res[sorter] = r
        ks = res.get("ks4")
        for sorter, r in res.items():
            row = dict(case=name, sorter="KS4" if sorter == "ks4" else PEER_LABELS.get(sorter, sorter))
            if r["status"] != "ok":
                row["check"] = r["status"] + (f" (exit {r['exit']}: {r.get('note', '')})" if r["status"] == "failed" else "")
                if r["status"] == "failed":
                    row.update(wall_s=r.get("wall_s"), peak_rss_mib=r.get("peak_rss_mib"))
            else:
                s = r["si"]
                row.update(gt_units=s["gt_units"], well_detected=s["well_detected"], mean_accuracy=s["mean_accuracy"],
                           false_positive_units=s["false_positive_units"], wall_s=r["wall_s"],
                           peak_rss_mib=r["peak_rss_mib"], snr=r.get("snr"))
                ag = r.get("agreement")
                row["check"] = ("SI/bs-compare agree" if ag["agree"] else f"DISAGREE units {ag['disagreeing_units']}") \
                    if ag else r["boundsort_compare"].replace("skipped: ", "no check: ")
                if r.get("reused"):
                    row["check"] += " [reused run]"
            if sorter.startswith("boundsort") and r["status"] == "ok" and ks and ks["status"] == "ok":
                row["time_ratio"] = r["wall_s"] / ks["wall_s"]
                row["mem_ratio"] = r["peak_rss_mib"] / ks["peak_rss_mib"]
            rows.append(row)
        out = dict(case=name, case_dir=str(case), recording=meta, date=today, machine=mach, versions=vers,
                   settings=dict(well_detected_accuracy=WELL, agree_tolerance=AGREE_TOL, ks4_threads=os.cpu_count(),
                                 ks4_device="cpu", nice=10, match="SpikeInterface defaults: delta_time 0.4 ms, "
                                 "match_score 0.5, exhaustive_gt True; all KS4 clusters (not only 'good')",
                                 boundsort_variants={lab: ex for lab, ex in variants}),
                   results=res)
        # the file is named by the runs it holds when that is not the default boundsort + KS4 pair
        tag = "" if sorted(res) == ["boundsort", "ks4"] else "-" + "-".join(res)
        (RESULTS / f"{today}-{name}{tag}.json").write_text(json.dumps(out, indent=2, default=str))
    t = table(rows)
    head = (f"boundsort vs Kilosort {vers.get('kilosort')} (torch {vers.get('torch')}, CPU, {mach['cores']} threads) "
            f"on {mach['cpu_model']}, {mach['ram_gib']} GiB; SpikeInterface {vers.get('spikeinterface')}; {today}")
    print("\n" + head + "\n" + t)
    for n in notes:
        print(n)
    # one table file per run, named by the cases it holds, so runs of other cases never overwrite it
    # (and by its runs when they are not the default boundsort + KS4 pair, as for the JSON files)
    runs = [lab for lab, _ in variants] if a.only in (None, "boundsort") else []
    runs += ["ks4"] if a.only in (None, "ks4") else []
    runs += peers if a.only in (None, "peers") else []
    tag = "" if runs == ["boundsort", "ks4"] and variants == [DEFAULT_VARIANT] else "-" + "-".join(runs)
    (RESULTS / f"{today}-{'-'.join(a.cases)}{tag}-table.txt").write_text(head + "\n" + t + "\n" + "\n".join(notes) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
