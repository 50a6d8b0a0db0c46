"""
test_wrapper.py - tests of the SpikeInterface wrapper (boundsort_si.BoundsortSorter).

Installs nothing. Needs spikeinterface (skipped otherwise) and the boundsort program: $BOUNDSORT,
else <repo>/build/boundsort, else `boundsort` on PATH (skipped when none is found).

* registration: run_sorter's tables know "boundsort", with its default parameters.
* files and command line: run_sorter("boundsort", ...) writes the int16 binary (values = µV / uv_per_bit),
  probe.json (same contact positions), boundsort_params.json, and the exact `boundsort sort` argv.
* errors: a failing `boundsort sort` raises, and the error carries boundsort's own message (checked with
  a small failing program, and with the real one while `boundsort sort` is not available).
* result: only when `boundsort sort --help` exits 0: the sort runs and the Phy folder loads as a Sorting.
"""
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import numpy as np
import pytest

si = pytest.importorskip("spikeinterface")
from spikeinterface.core import generate_ground_truth_recording  # noqa: E402
from spikeinterface.sorters import run_sorter, available_sorters, get_default_sorter_params  # noqa: E402
from spikeinterface.sorters.utils import SpikeSortingError  # noqa: E402

import boundsort_si  # noqa: E402  (registers the sorter)
from boundsort_si import BoundsortSorter  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _boundsort():
    for cand in (os.environ.get("BOUNDSORT"), str(REPO / "build" / "boundsort"), shutil.which("boundsort")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return str(Path(cand).absolute())
    return None


BOUNDSORT = _boundsort()
needs_boundsort = pytest.mark.skipif(BOUNDSORT is None, reason="boundsort program not found (build it first)")


def _sort_available():
    if BOUNDSORT is None:
        return False
    return subprocess.run([BOUNDSORT, "sort", "--help"], capture_output=True).returncode == 0


SORT_AVAILABLE = _sort_available()


@pytest.fixture(autouse=True)
def _use_boundsort(monkeypatch):
    if BOUNDSORT is not None:
        monkeypatch.setenv("BOUNDSORT", BOUNDSORT)
    monkeypatch.setattr(BoundsortSorter, "boundsort_path", None)


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    rec, _ = generate_ground_truth_recording(durations=[3.0], sampling_frequency=30000.0, num_channels=8,
                                             num_units=3, seed=7)
    # saved as float32 (µV): newer SpikeInterface sorts only recordings it can serialize
    return rec.save(folder=tmp_path_factory.mktemp("gt") / "rec", dtype="float32", progress_bar=False)


PARAMS = dict(threads=2, batch_seconds=2.0, uv_per_bit=0.25)


def test_registered():
    assert "boundsort" in available_sorters()
    p = get_default_sorter_params("boundsort")
    for k in ("mem", "threads", "no_drift", "batch_seconds", "device", "uv_per_bit"):
        assert k in p
    assert set(BoundsortSorter._default_params) == set(BoundsortSorter._params_description)
    boundsort_si.register()  # idempotent
    assert available_sorters().count("boundsort") == 1


@needs_boundsort
def test_files_and_command_line(recording, tmp_path):
    folder = tmp_path / "bs"
    run_sorter("boundsort", recording, folder=folder, raise_error=False, with_output=False, **PARAMS)
    so = folder / "sorter_output"
    c, n = recording.get_num_channels(), recording.get_num_samples()

    # the binary: int16, samples x channels, µV / uv_per_bit rounded
    dat = so / "recording.dat"
    assert dat.stat().st_size == n * c * 2
    raw = np.fromfile(dat, dtype="<i2").reshape(n, c)
    uv = recording.get_traces(start_frame=0, end_frame=3000).astype(np.float64)
    assert np.max(np.abs(raw[:3000] * 0.25 - uv)) <= 0.25 / 2 + 1e-3

    # the probe: same contact positions, device channel = column of the binary
    import probeinterface

    pg = probeinterface.read_probeinterface(so / "probe.json")
    pos = np.concatenate([p.contact_positions for p in pg.probes])
    dci = np.concatenate([p.device_channel_indices for p in pg.probes])
    np.testing.assert_allclose(pos[np.argsort(dci)], recording.get_channel_locations())

    # the exact command line
    cmd = json.loads((so / "boundsort_cmd.json").read_text())
    assert cmd["argv"] == ["sort", str(dat), "--probe", str(so / "probe.json"), "--fs", "30000.0",
                           "--n-chan", "8", "--dtype", "int16", "--uv-per-bit", "0.25", "-o", str(so / "phy"),
                           "--batch-seconds", "2.0", "--threads", "2"]
    log = json.loads((folder / "spikeinterface_log.json").read_text())
    assert log["sorter_name"] == "boundsort"
    assert (so / "boundsort.log").read_text().startswith("$ " + BOUNDSORT + " sort ")
    assert log["error"] is (not SORT_AVAILABLE)


def test_failure_carries_message(recording, tmp_path, monkeypatch):
    fake = tmp_path / "boundsort"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'boundsort 9.9'; exit 0; }\n"
                    "echo \"boundsort: $3: field 'contacts': expected 8 contacts, got 0\" >&2\nexit 2\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("BOUNDSORT", str(fake))
    assert BoundsortSorter.get_sorter_version() == "9.9"
    with pytest.raises(SpikeSortingError) as e:
        run_sorter("boundsort", recording, folder=tmp_path / "bs", **PARAMS)
    msg = str(e.value)
    assert "exited with code 2" in msg and "field 'contacts': expected 8 contacts, got 0" in msg


@needs_boundsort
@pytest.mark.skipif(SORT_AVAILABLE, reason="boundsort sort is available: test_sort_result_loads covers it")
def test_not_available_message(recording, tmp_path):
    with pytest.raises(SpikeSortingError) as e:
        run_sorter("boundsort", recording, folder=tmp_path / "bs", **PARAMS)
    assert "not available yet" in str(e.value)


@needs_boundsort
@pytest.mark.skipif(not SORT_AVAILABLE, reason="boundsort sort is not available in this build yet")
def test_sort_result_loads(recording, tmp_path):
    sorting = run_sorter("boundsort", recording, folder=tmp_path / "bs", threads=2)
    assert sorting.get_sampling_frequency() == recording.get_sampling_frequency()
    assert sorting.get_num_units() >= 1
    n = sum(sorting.get_unit_spike_train(u).size for u in sorting.unit_ids)
    assert n > 0


@needs_boundsort
def test_reuses_int16_binary(recording, tmp_path):
    saved = recording.save(folder=tmp_path / "rec16", dtype="int16", progress_bar=False)
    run_sorter("boundsort", saved, folder=tmp_path / "bs", raise_error=False, with_output=False, threads=1)
    so = tmp_path / "bs" / "sorter_output"
    cmd = json.loads((so / "boundsort_cmd.json").read_text())
    assert cmd["reused_binary"] is True and not (so / "recording.dat").exists()
    src = Path(saved.get_binary_description()["file_paths"][0]).absolute()
    assert cmd["argv"][1] == str(src)
    assert cmd["argv"][cmd["argv"].index("--uv-per-bit") + 1] == "1.0"  # the recording's own gain
    assert "--params" not in cmd["argv"] and "--no-drift" not in cmd["argv"]


def test_kilosort_named_parameters_exposed():
    p = get_default_sorter_params("boundsort")
    desc = BoundsortSorter._params_description
    table = json.loads((REPO / "python" / "boundsort_si" / "params_table.json").read_text())
    for name in ("Th_universal", "Th_learned", "Th_single_ch", "whitening_range", "highpass_cutoff", "nblocks",
                 "batch_size", "tmin", "tmax", "dmin", "dminx", "nt", "nt0min", "max_peels"):
        assert name in p and name in desc, name
        row = next(r for r in table if r["kilosort"] == name)
        assert p[name] == row["default"] and row["key"] in desc[name]
    assert p["Th_learned"] == 8 and p["cluster_n_init"] == 200  # a field without a Kilosort name: group_name
    with pytest.raises(ValueError, match="Th_learned"):
        BoundsortSorter._check_params(None, None, {**p, "Th_learned": 0.01})
    with pytest.raises(ValueError, match="'nt' = 60.5"):
        BoundsortSorter._check_params(None, None, {**p, "nt": 60.5})
    BoundsortSorter._check_params(None, None, {**p, "nblocks": 0})  # Kilosort's "no drift correction"


@needs_boundsort
def test_parameters_file(recording, tmp_path):
    folder = tmp_path / "bs"
    run_sorter("boundsort", recording, folder=folder, raise_error=False, with_output=False, threads=1,
               Th_learned=7.5, nblocks=0, cluster_n_init=150, tmax=2.5, sort_params={"finish.duplicate_ms": 0.3})
    so = folder / "sorter_output"
    written = json.loads((so / "boundsort_params.json").read_text())
    assert written == {"nblocks": 0, "match": {"threshold_whitened": 7.5}, "cluster": {"n_init": 150},
                       "batch": {"tmax_s": 2.5}, "finish.duplicate_ms": 0.3}
    argv = json.loads((so / "boundsort_cmd.json").read_text())["argv"]
    assert argv[argv.index("--params") + 1] == str(so / "boundsort_params.json")
    if SORT_AVAILABLE:  # what the sort used, from its own record
        used = json.loads((so / "phy" / "params.json").read_text())
        assert used["match"]["threshold_whitened"] == 7.5 and used["drift"]["no_drift"] == 1
        assert used["cluster"]["n_init"] == 150 and used["batch"]["tmax_s"] == 2.5
        assert used["finish"]["duplicate_ms"] == 0.3
