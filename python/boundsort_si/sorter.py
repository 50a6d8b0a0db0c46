"""
sorter.py - BoundsortSorter: the SpikeInterface wrapper around the `boundsort sort` command.

Mechanism (SpikeInterface's folder-based protocol for external command-line sorters; every method
is a classmethod working on `<folder>/sorter_output/` so a run can be restarted elsewhere):

* The sorting parameters are boundsort's own table (`boundsort params --defaults --json`, kept beside this
  file as params_table.json; the C suite checks that it equals the program's): each is a parameter of the
  sorter, named as Kilosort 4 names it where it has such a name (`Th_universal`, `Th_learned`, `nblocks`,
  `batch_size`, `tmin`, ...) and `<group>_<name>` otherwise (`cluster_n_init`), with the table's
  description. Those that differ from the table's defaults go into `boundsort_params.json` under their
  group, passed with --params (the program checks each value's range).
* `_setup_recording` writes what `boundsort sort` reads:
    - the raw binary: the user's own int16 file is re-used when the recording is exactly one int16
      file, samples x channels, with no header (`binary_compatible_with`); otherwise
      `recording.dat` is written as int16 with `write_binary_recording`. A float recording (µV)
      is first scaled by 1/`uv_per_bit` so it keeps its precision; an int16 recording keeps its
      values and its own gain.
    - `probe.json`: the recording's probe as probeinterface JSON, with device_channel_indices
      0..C-1 = the columns of the binary.
    - `boundsort_params.json` when a sorting parameter differs from its default or `sort_params` is given
      (passed with --params).
    - `boundsort_cmd.json`: the exact command line (argv list) and the binary path it uses.
* `_run_from_folder` runs that command line with subprocess, writes everything it prints to
  `sorter_output/boundsort.log` (SpikeInterface copies that file into spikeinterface_log.json) and
  raises `BoundsortError` carrying boundsort's own message when the exit code is not 0.
* `_get_result_from_folder` reads the Phy folder `sorter_output/phy` with SpikeInterface's
  Kilosort/Phy reader. That reader merges every .tsv file of the folder on `cluster_id` unless one
  file named cluster_info exists, and boundsort's folder also holds tables that are not per cluster
  (bad_channels.tsv, artifacts.tsv); so the per-cluster tables (cluster_<name>.tsv) are first joined
  into cluster_info.tsv (the file Phy itself writes on saving), unless the folder has one already.

The `boundsort` program is found through, in order: `BoundsortSorter.set_boundsort_path(path)`,
the BOUNDSORT environment variable, the program installed with the `boundsort` Python package (pip install
boundsort), `boundsort` on PATH.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from spikeinterface.sorters.basesorter import BaseSorter, get_job_kwargs


def _load_table():
    """The sorting parameters: {sorter parameter name: table row}, in the table's order."""
    with open(Path(__file__).with_name("params_table.json"), "r", encoding="utf8") as f:
        rows = json.load(f)
    table = {}
    for row in rows:
        if row["key"] == "drift.no_drift":
            continue  # the `no_drift` option (--no-drift), or nblocks = 0
        table[row["kilosort"] or f"{row['group']}_{row['name']}"] = row
    return table


SORT_PARAMS = _load_table()


class BoundsortError(RuntimeError):
    """`boundsort sort` exited with a non-zero code; the message holds what it printed."""


class BoundsortSorter(BaseSorter):
    """SpikeInterface wrapper for boundsort, a spike sorter written in C with a memory budget."""

    sorter_name = "boundsort"
    compiled_name = "boundsort"
    boundsort_path = None  # set with set_boundsort_path(); else $BOUNDSORT; else PATH

    requires_locations = True
    gpu_capability = "nvidia-optional"
    requires_binary_data = True  # adds n_jobs / chunk_duration / progress_bar for the binary copy
    compatible_with_parallel = {"loky": True, "multiprocessing": True, "threading": True}
    handle_multi_segment = False

    _default_params = {
        **{name: row["default"] for name, row in SORT_PARAMS.items()},
        "mem": None,
        "gpu_mem": None,
        "disk": None,
        "device": "cpu",
        "threads": None,
        "no_drift": False,
        "resume": False,
        "quiet": False,
        "batch_seconds": None,
        "sort_params": None,
        "params_file": None,
        "uv_per_bit": 0.195,
        "delete_recording_dat": False,
    }

    _params_description = {
        **{name: f"{row['description']} ({row['type']} in [{row['min']:g}, {row['max']:g}]"
           + (", or 0" if row["zero_auto"] else "") + f"; boundsort {row['key']})" for name, row in SORT_PARAMS.items()},
        "mem": "Host memory budget, e.g. '4G' (boundsort sort --mem). None: boundsort's default.",
        "gpu_mem": "GPU memory budget with a cuda device, e.g. '10G' (--gpu-mem). None: the GPU's memory less 1 GiB.",
        "disk": "What the sort may write in its output folder, e.g. '100G' (--disk); short of it the preprocessed "
        "recording is streamed, not written (slower, the same result). None: the free space there.",
        "device": "'cpu', 'cuda' or 'cuda:N' (--device): detection and matching scores on that GPU.",
        "threads": "Number of CPU threads (--threads). None: boundsort's default (all cores).",
        "no_drift": "Skip drift estimation and correction (--no-drift).",
        "resume": "Skip stages whose outputs are already in the output folder (--resume).",
        "quiet": "Print only warnings and errors (-q).",
        "batch_seconds": "Batch length in seconds (--batch-seconds). None: boundsort's default (2 s). "
        "The batch length is part of the result.",
        "sort_params": "dict of sorting parameters in boundsort's own spelling ({'group': {'name': value}} or "
        "{'group.name': value}), written into the --params JSON file over the parameters above.",
        "params_file": "An existing parameters JSON file passed with --params (merged with "
        "sort_params into boundsort_params.json when that is set too).",
        "uv_per_bit": "µV per int16 step used when the recording is float (µV) and has to be written "
        "as int16; passed as --uv-per-bit. Ignored for int16 recordings (their gain is used).",
        "delete_recording_dat": "Delete the copied recording.dat after sorting.",
    }

    sorter_description = """boundsort is a Kilosort4-class spike sorter written in C11 that plans every large
    buffer against a memory budget, so it never runs out of memory. It writes a Phy folder."""

    installation_mesg = """pip install "boundsort[spikeinterface]" (the program and this sorter), or build
    it (bash scripts/build.sh in the boundsort repository) and put `boundsort` on PATH, set the BOUNDSORT
    environment variable to its path, or call BoundsortSorter.set_boundsort_path(path)."""

    # ---------------------------------------------------------------- the program
    @classmethod
    def set_boundsort_path(cls, path):
        path = str(Path(path).absolute())
        cls.boundsort_path = path
        os.environ["BOUNDSORT"] = path  # so that a run in another process finds it too

    @classmethod
    def executable(cls):
        """Absolute path of the boundsort program, or None when it cannot be found."""
        for cand in (cls.boundsort_path, os.environ.get("BOUNDSORT")):
            if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
                return str(Path(cand).absolute())
        try:
            from boundsort import binary  # the program a pip install put beside this package
        except ImportError:
            binary = None
        return (binary and binary()) or shutil.which("boundsort")

    @classmethod
    def is_installed(cls):
        return cls.executable() is not None

    @classmethod
    def get_sorter_version(cls):
        exe = cls.executable()
        if exe is None:
            return "unknown"
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
        except OSError:
            return "unknown"
        words = out.stdout.split()
        return words[-1] if out.returncode == 0 and words else "unknown"

    @classmethod
    def use_gpu(cls, params):
        return str(params.get("device", "cpu")).startswith("cuda")

    @classmethod
    def _check_params(cls, recording, output_folder, params):
        if params["threads"] is not None and int(params["threads"]) < 1:
            raise ValueError("boundsort: 'threads' must be >= 1 or None")
        if params["batch_seconds"] is not None and float(params["batch_seconds"]) <= 0:
            raise ValueError("boundsort: 'batch_seconds' must be > 0 or None")
        if params["sort_params"] is not None and not isinstance(params["sort_params"], dict):
            raise ValueError("boundsort: 'sort_params' must be a dict or None")
        if not float(params["uv_per_bit"]) > 0:
            raise ValueError("boundsort: 'uv_per_bit' must be > 0")
        for name, row in SORT_PARAMS.items():  # the program checks them too; this says so before any copy
            v = params.get(name)
            if v is None:
                continue
            ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) or \
                (isinstance(v, bool) and row["type"] == "flag")
            if ok:
                x = float(v)
                whole = x == int(x) if np.isfinite(x) else False
                ok = (row["type"] == "number" or whole) and (
                    row["min"] <= x <= row["max"] or (x == 0 and (row["zero_auto"] or name == "nblocks")))
            if not ok:
                raise ValueError(f"boundsort: '{name}' = {v!r}: expected {'0 or ' if row['zero_auto'] else ''}"
                                 f"{'an integer' if row['type'] != 'number' else 'a number'} in "
                                 f"[{row['min']:g}, {row['max']:g}] ({row['description']})")
        return params

    @classmethod
    def _check_apply_filter_in_params(cls, params):
        return True  # boundsort always high-pass filters

    # ---------------------------------------------------------------- setup
    @classmethod
    def _setup_recording(cls, recording, sorter_output_folder, params, verbose):
        import probeinterface
        from spikeinterface.core import write_binary_recording

        out = Path(sorter_output_folder).absolute()
        n_chan = recording.get_num_channels()
        fs = float(recording.get_sampling_frequency())

        if recording.get_dtype() == np.dtype("int16"):
            gains = recording.get_channel_gains() if recording.has_scaleable_traces() else None
            uv_per_bit = float(np.median(gains)) if gains is not None else 1.0
            to_write = recording
        else:
            uv_per_bit = float(params["uv_per_bit"])
            from spikeinterface.preprocessing import scale

            to_write = scale(recording, gain=1.0 / uv_per_bit, offset=0.0, dtype="int16")

        reuse = recording.get_dtype() == np.dtype("int16") and recording.binary_compatible_with(
            dtype="int16", time_axis=0, file_paths_length=1, file_offset=0
        )
        if reuse:
            bin_path = Path(recording.get_binary_description()["file_paths"][0]).absolute()
        else:
            bin_path = out / "recording.dat"
            write_binary_recording(to_write, file_paths=[bin_path], dtype="int16", **get_job_kwargs(params, verbose))

        # probe: the recording's probe, columns of the binary = 0..C-1
        # (SpikeInterface keeps contacts sorted so that device_channel_indices = recording channel index)
        probegroup = recording.get_probegroup()
        probeinterface.write_probeinterface(out / "probe.json", probegroup)

        # parameters file for --params: params_file, then the table's parameters that differ from their
        # defaults (by group), then sort_params
        params_path = None
        extra = cls.params_file_content(params)
        if extra:
            params_path = out / "boundsort_params.json"
            with open(params_path, "w", encoding="utf8") as f:
                json.dump(extra, f, indent=2)
        elif params["params_file"]:
            params_path = Path(params["params_file"]).absolute()

        argv = cls.command_line(bin_path, out / "probe.json", fs, n_chan, uv_per_bit, out / "phy", params, params_path)
        with open(out / "boundsort_cmd.json", "w", encoding="utf8") as f:
            json.dump({"argv": argv, "binary": str(bin_path), "reused_binary": bool(reuse),
                       "fs_hz": fs, "n_chan": n_chan, "uv_per_bit": uv_per_bit}, f, indent=2)

    @classmethod
    def params_file_content(cls, params):
        """What boundsort_params.json holds for these parameters ({} when it is not needed)."""
        changed = {}
        for name, row in SORT_PARAMS.items():
            v = params.get(name, row["default"])
            if v is None or v == row["default"]:
                continue
            v = v.item() if hasattr(v, "item") else v
            if name == "nblocks" and v == 0:  # Kilosort's "no drift correction": boundsort reads it as such
                changed.setdefault("", {})["nblocks"] = 0
                continue
            changed.setdefault(row["group"], {})[row["name"]] = v
        if not changed and not params.get("sort_params"):
            return {}
        extra = {}
        if params.get("params_file"):
            with open(params["params_file"], "r", encoding="utf8") as f:
                extra.update(json.load(f))
        extra.update(changed.pop("", {}))
        for group, values in changed.items():  # over params_file's group, field by field
            extra.setdefault(group, {}).update(values)
        extra.update(params.get("sort_params") or {})
        return extra

    @classmethod
    def command_line(cls, bin_path, probe_path, fs, n_chan, uv_per_bit, phy_dir, params, params_path=None):
        """The `boundsort sort` argv (without the program itself) for these files and parameters."""
        argv = ["sort", str(bin_path), "--probe", str(probe_path), "--fs", repr(float(fs)),
                "--n-chan", str(int(n_chan)), "--dtype", "int16", "--uv-per-bit", repr(float(uv_per_bit)),
                "-o", str(phy_dir)]
        if params.get("mem"):
            argv += ["--mem", str(params["mem"])]
        if params.get("gpu_mem"):
            argv += ["--gpu-mem", str(params["gpu_mem"])]
        if params.get("disk"):
            argv += ["--disk", str(params["disk"])]
        if params.get("device") and params["device"] != "cpu":
            argv += ["--device", str(params["device"])]
        if params.get("batch_seconds") is not None:
            argv += ["--batch-seconds", repr(float(params["batch_seconds"]))]
        if params.get("threads") is not None:
            argv += ["--threads", str(int(params["threads"]))]
        if params.get("resume"):
            argv.append("--resume")
        if params_path is not None:
            argv += ["--params", str(params_path)]
        if params.get("no_drift"):
            argv.append("--no-drift")
        if params.get("quiet"):
            argv.append("-q")
        return argv

    # ---------------------------------------------------------------- run
    @classmethod
    def _run_from_folder(cls, sorter_output_folder, params, verbose):
        out = Path(sorter_output_folder).absolute()
        with open(out / "boundsort_cmd.json", "r", encoding="utf8") as f:
            cmd = json.load(f)
        exe = cls.executable()
        if exe is None:
            raise BoundsortError("boundsort: program not found. " + cls.installation_mesg)
        full = [exe] + cmd["argv"]
        log_path = out / f"{cls.sorter_name}.log"
        with open(log_path, "w", encoding="utf8") as log:
            log.write("$ " + " ".join(full) + "\n")
            log.flush()
            proc = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=out)
            lines = []
            for line in proc.stdout:
                log.write(line)
                lines.append(line)
                if verbose:
                    print(line, end="")
            rc = proc.wait()
        if rc != 0:
            tail = "".join(lines[-40:]).strip()
            raise BoundsortError(f"boundsort sort exited with code {rc}:\n{tail}")
        if params.get("delete_recording_dat") and not cmd.get("reused_binary"):
            rec = out / "recording.dat"
            if rec.exists():
                rec.unlink()

    # ---------------------------------------------------------------- result
    @staticmethod
    def _write_cluster_info(phy: Path) -> None:
        """Join the folder's cluster_<name>.tsv tables (cluster_id, <name>) into cluster_info.tsv."""
        if any(p.suffix in (".tsv", ".csv") and "cluster_info" in p.name for p in phy.iterdir()):
            return
        columns, rows = [], {}
        for path in sorted(phy.glob("cluster_*.tsv")):
            with open(path, "r", encoding="utf8") as f:
                lines = [ln.rstrip("\n").split("\t") for ln in f if ln.strip()]
            if not lines or len(lines[0]) != 2 or lines[0][0] != "cluster_id":
                continue
            name = lines[0][1]
            columns.append(name)
            for cid, value in lines[1:]:
                rows.setdefault(int(cid), {})[name] = value
        if not columns:
            return
        tmp = phy / "cluster_info.tsv.tmp"
        with open(tmp, "w", encoding="utf8") as f:
            f.write("\t".join(["cluster_id"] + columns) + "\n")
            for cid in sorted(rows):
                f.write("\t".join([str(cid)] + [rows[cid].get(c, "") for c in columns]) + "\n")
        os.replace(tmp, phy / "cluster_info.tsv")

    @classmethod
    def _get_result_from_folder(cls, sorter_output_folder):
        from spikeinterface.extractors import read_kilosort

        phy = Path(sorter_output_folder) / "phy"
        cls._write_cluster_info(phy)
        return read_kilosort(phy, keep_good_only=False)
