#!/usr/bin/env bash
# test_denoise_si.sh - the two denoising kernels (preprocess.h, DESTRIPE and LOCAL MEDIAN REFERENCE)
# against SpikeInterface 0.105.3 (from the cache's venv, lib.sh si_python) on the same samples, for three
# recordings: the two real 0.5-s NP2.0 four-shank SpikeGLX examples of spikewrap==0.4.0 (lib.sh
# spikewrap_ephys; 383 sorted channels on two shanks) and a simulated 2-s Neuropixels 1.0 raw folder
# (`boundsort simulate`, 384 channels, one shank). tests/tools/preprocess_dump writes boundsort's result of
#   --destripe: mean removal, the 300 Hz 3rd-order zero-phase high-pass, then bs_destripe_apply with each
#     channel's RMS of the high-passed samples (written with --rms);
#   --car-local: mean removal, then the local median reference ((30, 55] µm, at least 5 neighbours).
# SpikeInterface is given the same samples (se.read_spikeglx, or recording.bin + probe.json read with
# numpy), the same mean removal in float32, scipy's sosfiltfilt(butter(3, 300, 'highpass', fs,
# output='sos')), then per shank (split_by("group")) highpass_spatial_filter(rec, rms_values=boundsort's
# RMS of that shank's channels), and for the other step common_reference(reference="local",
# operator="median") on the mean-removed traces, with the recording's contact positions and shanks.
# Compared 0.1 s away from either end of the window (the whole window for the local reference), one line per
# recording and step: max |boundsort - SpikeInterface| in µV (and over the whole window, for information:
# both treat the window's ends the same way, zeros outside for the AGC) and the RMS of SpikeInterface's
# output there ("noise RMS": the traces are mostly noise).
# TOLERANCES: destripe: max |diff| <= 1e-4 x noise RMS. The two compute the same thing in the same float32
# and float64 steps; they differ only by rounding: SpikeInterface's AGC is an FFT convolution and keeps the
# gain in float64, ours is running sums and keeps it in float32 (one float32 unit of the output, ~6e-8
# relative), and the temporal high-pass forms its odd extension in float64 here, float32 in scipy. Those
# give differences of a few float32 units of the largest values (measured: 3e-5 to 6e-5 µV, at most 6.3e-6
# of the noise RMS); a real mistake (a wrong window, order, pad or cut-off) gives differences of the order
# of the RMS itself.
# Local reference: the medians are of the same float32 values, so the outputs are equal but for the mean
# removal's summation order (numpy's pairwise sum against ours): max |diff| <= 1e-5 x noise RMS (measured:
# 0 on all three).
# Skipped (77) with a message when the venv or the real data cannot be fetched (offline).
. "$(dirname "$0")/lib.sh"
si_python || { echo "skipped"; exit 77; }
spikewrap_ephys || { echo "skipped"; exit 77; }

"$BS" simulate -o "$T/sim" --probe np1 --duration 2 --units 20 --seed 5 >/dev/null 2>"$T/err.txt" && ok ||
  bad "simulate failed: $(cat "$T/err.txt")"

printf '%-34s %-10s %14s %14s %14s\n' recording step "max|diff| uV" "(whole, uV)" "noise RMS uV"
for name in run-001 run-002 sim; do
  case $name in
    sim) REC=$T/sim; SEC=2 ;;
    *) REC=$(ls "$EPHYS"/${name}_g0_imec0/*.ap.bin); SEC=0.5 ;;
  esac
  "$BS" info "$REC" --json >"$T/info_$name.json" 2>"$T/err.txt" && ok || bad "$name: info failed: $(cat "$T/err.txt")"
  "$BS_PREPROCESS_DUMP" "$REC" --seconds $SEC --destripe --rms "$T/rms_$name.npy" "$T/ds_$name.npy" 2>"$T/err.txt" &&
    "$BS_PREPROCESS_DUMP" "$REC" --seconds $SEC --car-local "$T/cl_$name.npy" 2>>"$T/err.txt" && ok ||
    bad "$name: preprocess_dump failed: $(cat "$T/err.txt")"
  "$SIPY" - "$REC" "$name" "$T/info_$name.json" "$T/ds_$name.npy" "$T/rms_$name.npy" "$T/cl_$name.npy" \
    <<'PYEOF' && ok || bad "$name: against SpikeInterface"
import json, os, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
import spikeinterface as si
import spikeinterface.extractors as se
from scipy.signal import butter, sosfiltfilt
from spikeinterface.preprocessing import common_reference, highpass_spatial_filter
rec_path, name, info_path, ds_path, rms_path, cl_path = sys.argv[1:]
info = json.load(open(info_path))
ch = info["channels"]
if os.path.isdir(rec_path):  # a raw folder: recording.bin + probe.json
    from probeinterface import read_probeinterface
    meta = json.load(open(f"{rec_path}/recording.json"))
    probe = read_probeinterface(f"{rec_path}/probe.json").probes[0]
    dci = np.asarray(probe.device_channel_indices)
    raw = np.fromfile(f"{rec_path}/recording.bin", dtype="<i2").reshape(-1, int(meta["n_chan"]))
    x = raw[:, dci].astype(np.float32) * np.float32(meta["uv_per_bit"])
    fs = float(meta["fs_hz"])
    locs = np.asarray(probe.contact_positions, dtype=np.float64)
    sid = np.asarray(probe.shank_ids)
    groups = np.zeros(len(dci), dtype=int) if sid.size == 0 or np.all(sid == "") else np.unique(sid, return_inverse=True)[1]
else:
    rec = se.read_spikeglx(os.path.dirname(rec_path), stream_id="imec0.ap")
    cols = np.array([c["column"] for c in ch])  # the sorted channels' file columns = SpikeInterface's channels
    x = rec.get_traces(return_in_uV=True)[:, cols].astype(np.float32)
    fs = rec.get_sampling_frequency()
    locs = rec.get_channel_locations()[cols]
    groups = np.asarray(rec.get_channel_groups())[cols]
ours_ds, ours_cl, rms = np.load(ds_path), np.load(cl_path), np.load(rms_path)
n, C = ours_ds.shape
assert C == len(ch) == x.shape[1] and ours_cl.shape == (n, C), (ours_ds.shape, x.shape)
x = x[:n]
# the same layout: positions up to one translation, shanks the same partition of the channels
pos = np.array([[c["x_um"], c["y_um"]] for c in ch], dtype=np.float64)
assert np.allclose(pos - locs, (pos - locs)[0], atol=1e-3), "positions differ"
sh = np.array([c["shank"] for c in ch])
assert len(set(zip(sh, groups))) == len(set(sh)) == len(set(groups)), "shanks differ"

def numpy_rec(traces):
    r = si.NumpyRecording([traces], sampling_frequency=fs)
    r.set_channel_locations(locs)
    r.set_property("group", groups)
    return r

xm = x - x.mean(axis=0, dtype=np.float64).astype(np.float32)  # mean removal, float32
sos = butter(3, 300, btype="highpass", fs=fs, output="sos")
xh = sosfiltfilt(sos, xm, axis=0).astype(np.float32)
rms_si = np.sqrt((xh.astype(np.float64) ** 2).mean(axis=0))
assert np.allclose(rms, rms_si, rtol=1e-5), np.abs(rms / rms_si - 1).max()
hp = numpy_rec(xh)
si_ds = np.zeros_like(xh)
for g, sub in hp.split_by("group").items():
    idx = hp.ids_to_indices(sub.channel_ids)
    si_ds[:, idx] = highpass_spatial_filter(sub, rms_values=rms[idx]).get_traces()
si_cl = common_reference(numpy_rec(xm), reference="local", operator="median").get_traces()
edge = int(0.1 * fs)
sl = slice(edge, n - edge)
ok = True
for step, ours, theirs, s, tol in (("destripe", ours_ds, si_ds, sl, 1e-4), ("cmr-local", ours_cl, si_cl, slice(0, n), 1e-5)):
    d = np.abs(ours[s].astype(np.float64) - theirs[s]).max()
    whole = np.abs(ours.astype(np.float64) - theirs).max()
    noise = np.sqrt((theirs[s].astype(np.float64) ** 2).mean())
    print(f"{name + f' ({C} ch, {n} samples)':34s} {step:10s} {d:14.3g} {whole:14.3g} {noise:14.3f}")
    if not d <= tol * noise:
        print(f"{name} {step}: max |diff| {d:.3g} uV exceeds {tol:g} x the noise RMS {noise:.3f} uV", file=sys.stderr)
        ok = False
sys.exit(0 if ok else 1)
PYEOF
done
finish
