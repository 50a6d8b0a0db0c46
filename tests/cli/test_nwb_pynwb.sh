#!/usr/bin/env bash
# test_nwb_pynwb.sh - our NWB files as the NWB tools see them. pynwb and
# nwbinspector are installed from PyPI into a venv kept in a cache folder
# (BS_PY_CACHE, default ~/.cache/boundsort; later runs reuse it), then:
#   - pynwb reads the simulated recording.nwb: shape, rate, rel_x/rel_y,
#     group_name, and get_data_in_units() equals recording.bin x µV/bit;
#   - pynwb reads the Units table of `sort --nwb` (a copy of the input) and
#     of `export-nwb` (a new file) with one row per cluster, the right spike
#     count per unit and spike times = samples / rate, and index columns in the
#     smallest unsigned width that holds them (as pynwb writes them);
#   - export-nwb's metadata options (--subject-json, --experimenter, ...)
#     read back through pynwb, in a new file and in a copy; a copy whose input
#     has a subject, and malformed subjects, are refused with exit 2;
#   - nwbinspector (with pynwb's validation) reports nothing of importance
#     CRITICAL, ERROR or PYNWB_VALIDATION on the five files, and no all-NaN
#     column, except check_subject_exists where no subject was given: neither
#     a simulation nor a Phy folder says who the subject was.
# Skipped (77) when the venv cannot be set up (no python3 venv module, or
# PyPI unreachable) or the build has no HDF5.
. "$(dirname "$0")/lib.sh"

dur=12; units=16
[ -n "${BS_SANITIZED:-}" ] && { dur=5; units=24; } # about 20x slower under the sanitizers
if ! "$BS" simulate -o "$T/sim" --probe linear32 --duration $dur --units $units --seed 3 --nwb -q >"$T/sim.txt" 2>&1; then
  if grep -q "built without HDF5" "$T/sim.txt"; then echo "no HDF5 in this build: skipped"; exit 77; fi
  cat "$T/sim.txt"; echo "simulate --nwb failed"; exit 1
fi
py_venv nwb-venv "pynwb==4.2.0 nwbinspector==0.7.2" || { echo "skipped"; exit 77; }
PY=$VPY

"$BS" sort "$T/sim/recording.nwb" -o "$T/out" --threads 2 -q --nwb && ok || bad "sort --nwb failed"
"$BS" export-nwb "$T/out" -o "$T/new.nwb" >/dev/null && ok || bad "export-nwb (new file) failed"
# the file's metadata: a subject (nwbinspector's only CRITICAL check on our files), experimenters, ...
printf '{"subject_id": "M12", "species": "Mus musculus", "sex": "M", "age": "P90D", "description": "simulated"}' \
  >"$T/subject.json"
META=(--subject-json "$T/subject.json" --experimenter "Doe, Jane" --experimenter "Roe, Rick" --institution "Example U"
      --lab "Ephys lab" --experiment-description "a simulated recording" --keywords "spike sorting, simulation")
"$BS" export-nwb "$T/out" -o "$T/meta.nwb" "${META[@]}" --session-description "sorted test" >/dev/null && ok \
  || bad "export-nwb with metadata (new file) failed"
"$BS" export-nwb "$T/out" --input-nwb "$T/sim/recording.nwb" -o "$T/meta_copy.nwb" "${META[@]}" >/dev/null && ok \
  || bad "export-nwb with metadata (copy) failed"
expect 2 "already has /general/subject" "$BS" export-nwb "$T/out" --input-nwb "$T/meta_copy.nwb" -o "$T/x.nwb" "${META[@]}"
[ ! -e "$T/x.nwb" ] && ok || bad "a refused export left $T/x.nwb"
printf '{"subject_id": "M1", "sex": "male"}' >"$T/bad_sex.json"
expect 2 '"sex" must be one of M, F, U' "$BS" export-nwb "$T/out" -o "$T/x.nwb" --subject-json "$T/bad_sex.json"
printf '{"subject_id": "M1", "specie": "Mus musculus"}' >"$T/bad_key.json"
expect 2 '"specie" is not a field of NWB' "$BS" export-nwb "$T/out" -o "$T/x.nwb" --subject-json "$T/bad_key.json"
printf '{"subject_id": "M1", "age": "90 days"}' >"$T/bad_age.json"
expect 2 '"age" must be an ISO 8601 duration' "$BS" export-nwb "$T/out" -o "$T/x.nwb" --subject-json "$T/bad_age.json"

$PY -W ignore - "$T" <<'EOF' && ok || bad "pynwb checks failed"
import json, sys
import numpy as np
from pynwb import NWBHDF5IO
T = sys.argv[1]
rec = json.load(open(f"{T}/sim/recording.json"))
probe = json.load(open(f"{T}/sim/probe.json"))["probes"][0]
C, fs, uv = rec["n_chan"], rec["fs_hz"], rec["uv_per_bit"]
raw = np.fromfile(f"{T}/sim/recording.bin", dtype="<i2").reshape(-1, C)
with NWBHDF5IO(f"{T}/sim/recording.nwb", "r") as io:
    nwb = io.read()
    es = nwb.acquisition["ElectricalSeries"]
    assert es.data.shape == raw.shape, es.data.shape
    assert es.rate == fs and es.starting_time == 0.0
    assert es.data.compression == "gzip" and es.data.chunks is not None
    assert abs(es.conversion * es.channel_conversion[0] * 1e6 - uv) < 1e-12
    volts = es.get_data_in_units()[:3000]
    assert np.allclose(volts, raw[:3000] * uv * 1e-6, rtol=1e-6, atol=1e-12)
    el = nwb.electrodes.to_dataframe()
    pos = np.array(probe["contact_positions"])
    assert np.allclose(el["rel_x"], pos[:, 0]) and np.allclose(el["rel_y"], pos[:, 1])
    assert set(el["group_name"]) == {"shank0"}
print("recording.nwb: pynwb reads", raw.shape, "with the simulated values")
st = np.load(f"{T}/out/spike_times.npy")
cl = np.load(f"{T}/out/spike_clusters.npy")
ids, counts = np.unique(cl, return_counts=True)
for name in ("out/units.nwb", "new.nwb"):
    with NWBHDF5IO(f"{T}/{name}", "r") as io:
        nwb = io.read()
        u = nwb.units
        assert list(u.id[:]) == list(ids), (u.id[:], ids)
        for i, (cid, n) in enumerate(zip(ids, counts)):
            t = u.get_unit_spike_times(i)
            assert len(t) == n, (name, cid, len(t), n)
            assert np.allclose(t, st[cl == cid] / fs, rtol=0, atol=1e-12)
        wm = u["waveform_mean"][0]
        assert wm.ndim == 2 and np.isfinite(wm).all() and 1e-6 < np.ptp(wm) < 1e-2, np.ptp(wm)  # volts
        assert len(u["electrodes"][0]) == wm.shape[1]
        assert "KSLabel" in u.colnames, u.colnames
        # index columns in the smallest unsigned width that holds them, as pynwb writes them (SpikeInterface's
        # NWB sorting reader needs that)
        def width(m):
            return np.uint8 if m <= 255 else np.uint16 if m <= 65535 else np.uint32 if m < 2**32 else np.uint64
        for col, m in (("spike_times_index", counts.sum()), ("electrodes_index", len(u["electrodes"].data))):
            assert u[col].data.dtype == width(m), (name, col, u[col].data.dtype, m)
        if name == "out/units.nwb":
            assert "ElectricalSeries" in nwb.acquisition
    print(f"{name}: {len(ids)} units, {counts.sum()} spikes, columns {list(u.colnames)}")
for name in ("meta.nwb", "meta_copy.nwb"):
    with NWBHDF5IO(f"{T}/{name}", "r") as io:
        nwb = io.read()
        s = nwb.subject
        assert (s.subject_id, s.species, s.sex, s.age, s.age__reference) == ("M12", "Mus musculus", "M", "P90D", "birth"), s
        assert tuple(nwb.experimenter) == ("Doe, Jane", "Roe, Rick"), nwb.experimenter
        assert (nwb.institution, nwb.lab, nwb.experiment_description) == ("Example U", "Ephys lab", "a simulated recording")
        assert tuple(nwb.keywords[:]) == ("spike sorting", "simulation"), nwb.keywords[:]
        assert name != "meta.nwb" or nwb.session_description == "sorted test", nwb.session_description
        assert len(nwb.units.id[:]) > 0
EOF

for f in "$T/sim/recording.nwb" "$T/out/units.nwb" "$T/new.nwb" "$T/meta.nwb" "$T/meta_copy.nwb"; do
  "$(dirname "$PY")/nwbinspector" "$f" --json-file-path "$T/inspect.json" --overwrite >"$T/inspect.txt" 2>&1
  $PY - "$T/inspect.json" "$f" <<'EOF' && ok || bad "nwbinspector: $f has CRITICAL/ERROR-level issues"
import json, sys
msgs = json.load(open(sys.argv[1]))["messages"]
# a subject only where export-nwb was given one; no all-NaN column anywhere
serious = [m for m in msgs if (m["importance"] in ("CRITICAL", "ERROR", "PYNWB_VALIDATION")
           and (m["check_function_name"] != "check_subject_exists" or "meta" in sys.argv[2]))
           or m["check_function_name"] == "check_col_not_nan"]
for m in serious:
    print(m["importance"], m["check_function_name"], m["location"], m["message"])
print(f"{sys.argv[2]}: {len(msgs)} inspector messages, {len(serious)} serious")
sys.exit(1 if serious else 0)
EOF
done

finish
