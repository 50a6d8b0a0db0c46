#!/usr/bin/env bash
# test_real_spikeglx.sh - real Neuropixels data: the two 0.5-s NP2.0 four-shank SpikeGLX recordings
# (385 channels, recorded by Steve Lenzi, Sainsbury Wellcome Centre) that the PyPI package
# spikewrap==0.4.0 (BSD-3-Clause) ships as examples, fetched at that pinned version into a cache
# (BS_PY_CACHE, default ~/.cache/boundsort) with SpikeInterface 0.105.3 in a venv beside it:
#   - boundsort's reader against SpikeInterface's read_spikeglx: the same samples (export-raw's copy
#     against get_traces), the same µV per bit, contact positions (up to one translation: x from the
#     shank's edge) and ADC sampling delays of the sorted channels (channel_map.npy,
#     channel_positions.npy, info --json);
#   - the phase shift (tests/tools/preprocess_dump) against SpikeInterface's apply_frequency_shift on
#     the same samples: in 300 Hz - 8 kHz the difference is under 1 % of the correction's RMS (measured:
#     below 0.05 %; above ~10 kHz boundsort's 16-tap filter rolls off, where the FFT shift does not);
#   - a sort of each completes, validates, and records the phase shift (15/16 of a sample at most);
#   - bad channels: none on either recording (SpikeInterface's detect_bad_channels per shank calls only
#     AP127 dead, the reference channel boundsort does not sort); then on a copy of run 001 with a dead
#     (zeroed), a noisy (50 µV of white noise added) channel and the 8 highest channels of a shank
#     replaced by independent noise, boundsort's labels (info --detect-bad-channels) equal
#     SpikeInterface's (detect_bad_channels per shank, coherence+psd, after its phase_shift), and the
#     dead and noisy ones interpolated (preprocess_dump --interpolate) equal SpikeInterface's
#     interpolate_bad_channels on the same phase-shifted traces to float rounding (1e-4 of their RMS).
# Skipped (77) with a message when the venv or the data cannot be fetched (offline).
. "$(dirname "$0")/lib.sh"
si_python || { echo "skipped"; exit 77; }
PYV=$SIPY
spikewrap_ephys || { echo "skipped"; exit 77; }

for run in 001 002; do
  AP=$(ls "$EPHYS"/run-${run}_g0_imec0/*.ap.bin)
  O=$T/out$run
  "$BS" sort "$AP" -o "$O" --threads 2 -q --no-report 2>"$T/err.txt" && ok || bad "run $run: sort failed: $(cat "$T/err.txt")"
  "$BS" validate "$O" >"$T/val.txt" 2>&1 && ok || bad "run $run: validate: $(cat "$T/val.txt")"
  "$BS" export-raw "$O" >/dev/null 2>&1 && ok || bad "run $run: export-raw failed"
  "$BS" info "$AP" --json >"$T/info$run.json" && ok || bad "run $run: info failed"
  "$BS_PREPROCESS_DUMP" "$AP" --seconds 0.5 --phase "$T/ps$run.npy" && "$BS_PREPROCESS_DUMP" "$AP" --seconds 0.5 \
    "$T/plain$run.npy" && ok || bad "run $run: preprocess_dump failed"
  "$PYV" - "$AP" "$O" "$T/info$run.json" "$T/ps$run.npy" "$T/plain$run.npy" <<'PYEOF' && ok || bad "run $run: against SpikeInterface"
import json, os, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
import spikeinterface.extractors as se
from scipy.signal import butter, sosfiltfilt
from spikeinterface.preprocessing.phase_shift import apply_frequency_shift
ap, out, info_path, ps_path, plain_path = sys.argv[1:]
rec = se.read_spikeglx(os.path.dirname(ap), stream_id="imec0.ap")
info = json.load(open(info_path))
n, fs = rec.get_num_samples(), rec.get_sampling_frequency()
cmap = np.load(f"{out}/channel_map.npy")            # file column of each sorted channel
pos = np.load(f"{out}/channel_positions.npy")
assert info["n_samples"] == n and info["fs_hz"] == fs and info["n_chan"] == len(cmap), info
# SpikeInterface's channels are the 384 AP columns in file order
raw_si = rec.get_traces(return_in_uV=False)
dat = np.fromfile(f"{out}/recording.dat", dtype=np.int16).reshape(n, -1)
assert dat.shape[1] == 385 and np.array_equal(dat[:, :384], raw_si), "samples differ"
gain = rec.get_channel_gains()[cmap]
assert np.allclose(gain, info["uv_per_bit_min"], rtol=1e-6) and np.allclose(gain, info["uv_per_bit_max"], rtol=1e-6)
si_pos = rec.get_channel_locations()[cmap]
# the same layout up to one translation: boundsort's x counts from each shank's left edge (27 µm to the
# first column on NP2.0), probeinterface's from the first column
off = (pos - si_pos)[0]
assert np.allclose(pos - si_pos, off, atol=1e-3) and abs(off[1]) < 1e-3, np.abs(pos - si_pos - off).max()
shift_si = np.asarray(rec.get_property("inter_sample_shift"))[cmap]
assert np.allclose(info["probe"]["inter_sample_shift"], shift_si, atol=1e-6)
# the phase shift on the same samples, 50 ms from either end
b, b0 = np.load(ps_path).astype(np.float64), np.load(plain_path).astype(np.float64)
x = rec.get_traces(return_in_uV=True).astype(np.float64)[:, cmap]
x -= x.mean(axis=0)
si = apply_frequency_shift(x, shift_si, axis=0)
edge = int(0.05 * fs)
sl = slice(edge, n - edge)
for a in (b, b0, si):
    a -= a[sl].mean(axis=0)
sos = butter(8, [300, 8000], btype="bandpass", fs=fs, output="sos")
corr = sosfiltfilt(sos, b - b0, axis=0)[sl]
diff = sosfiltfilt(sos, b - si, axis=0)[sl]
rc, rd = np.sqrt((corr ** 2).mean()), np.sqrt((diff ** 2).mean())
full = np.sqrt(((b - si)[sl] ** 2).mean())
print(f"{os.path.basename(ap)}: {len(cmap)} channels, {n} samples; traces RMS {np.sqrt((b[sl] ** 2).mean()):.2f} uV; "
      f"phase-shift correction RMS {rc:.3f} uV (300 Hz - 8 kHz); boundsort - SpikeInterface RMS {rd:.5f} uV there, "
      f"max {np.abs(diff).max():.4f} uV; whole band RMS {full:.4f} uV")
assert rd < 0.01 * rc, (rd, rc)
r = json.load(open(f"{out}/run_summary.json"))["phase_shift"]
assert r["applied"] and abs(r["max_delay_samples"] - 15 / 16) < 1e-6, r
PYEOF
done

# bad channels against SpikeInterface's, on the recordings and on a copy with planted ones
AP1=$(ls "$EPHYS"/run-001_g0_imec0/*.ap.bin)
mkdir -p "$T/planted"
cp "$AP1" "${AP1%.bin}.meta" "$T/planted/"
PAP=$T/planted/$(basename "$AP1")
"$PYV" - "$PAP" <<'PYEOF' && ok || bad "planting bad channels in a copy of run 001"
import os, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
import spikeinterface.extractors as se
ap = sys.argv[1]
rec = se.read_spikeglx(os.path.dirname(ap), stream_id="imec0.ap")
gain = rec.get_channel_gains()[0]
loc, grp = rec.get_channel_locations(), rec.get_channel_groups()
x = np.memmap(ap, dtype=np.int16, mode="r+").reshape(rec.get_num_samples(), 385)
rng = np.random.default_rng(3)
x[:, 40] = 0                                                                    # dead
x[:, 300] = np.clip(x[:, 300] + rng.normal(0, 50 / gain, len(x)), -32768, 32767)  # noisy
g = grp[0]
top = [c for c in np.argsort(-loc[:, 1], kind="stable") if grp[c] == g and c != 127][:8]
for c in top:                                                                   # out of the brain
    x[:, c] = rng.normal(0, 8 / gain, len(x))
x.flush()
PYEOF
for AP in "$EPHYS"/run-00{1,2}_g0_imec0/*.ap.bin "$PAP"; do
  "$BS" info "$AP" --detect-bad-channels --json >"$T/bad.json" || bad "$AP: info --detect-bad-channels"
  "$PYV" - "$AP" "$T/bad.json" <<'PYEOF' && ok || bad "$AP: bad channels differ from SpikeInterface's"
import json, os, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
import spikeinterface.extractors as se
import spikeinterface.preprocessing as spre
ap, js = sys.argv[1:]
rec = spre.phase_shift(se.read_spikeglx(os.path.dirname(ap), stream_id="imec0.ap"))
si = {}
for g, sub in rec.split_by("group").items():
    ids, lab = spre.detect_bad_channels(sub, seed=0, num_random_chunks=20, job_kwargs=dict(progress_bar=False))
    for i, l in zip(sub.channel_ids, lab):
        c = int(str(i).split("AP")[-1])
        if l != "good" and c != 127:  # AP127: the reference channel, not sorted by boundsort
            si[c] = {"noise": "noisy"}.get(str(l), str(l))
ours = {ch["column"]: ch["label"] for ch in json.load(open(js))["bad_channels"]["channels"]}
print(f"{os.path.basename(os.path.dirname(ap))}: boundsort {sorted(ours.items())}; SpikeInterface {sorted(si.items())}")
assert ours == si
PYEOF
done
# the interpolation of the planted copy's dead and noisy channels against SpikeInterface's
# interpolate_bad_channels given the same bad channels and boundsort's phase-shifted traces
"$BS_PREPROCESS_DUMP" "$PAP" --seconds 0.5 --phase "$T/pl_ps.npy" && "$BS_PREPROCESS_DUMP" "$PAP" --seconds 0.5 \
  --phase --interpolate "$T/pl_interp.npy" && ok || bad "preprocess_dump --interpolate failed"
"$BS" info "$PAP" --json >"$T/pl_info.json" || bad "info of the planted copy"
"$PYV" - "$PAP" "$T/pl_info.json" "$T/bad.json" "$T/pl_ps.npy" "$T/pl_interp.npy" <<'PYEOF' && ok || bad "interpolation differs from SpikeInterface's"
import json, os, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
import spikeinterface.extractors as se
import spikeinterface.preprocessing as spre
from probeinterface import Probe
from spikeinterface.core import NumpyRecording
ap, info_p, bad_p, ps_p, in_p = sys.argv[1:]
info, bad = json.load(open(info_p)), json.load(open(bad_p))["bad_channels"]["channels"]
cols = [ch["column"] for ch in info["channels"]]
loc = se.read_spikeglx(os.path.dirname(ap), stream_id="imec0.ap").get_channel_locations()[cols]
ps, ours = np.load(ps_p), np.load(in_p)
out = {b["channel"] for b in bad if b["label"] == "out"}
keep = [i for i in range(len(cols)) if i not in out]
fix = [keep.index(b["channel"]) for b in bad if b["label"] in ("dead", "noisy")]
assert len(fix) == 2, bad
nr = NumpyRecording(ps[:, keep].copy(), info["fs_hz"])
pr = Probe(ndim=2, si_units="um")
pr.set_contacts(positions=loc[keep], shapes="square", shape_params={"width": 12})
pr.set_device_channel_indices(np.arange(len(keep)))
nr.set_probe(pr, in_place=True)
si = spre.interpolate_bad_channels(nr, bad_channel_ids=nr.channel_ids[fix]).get_traces().astype(np.float64)
d = np.abs(si[:, fix] - ours[:, keep][:, fix]).max()
rms = np.sqrt((si[:, fix] ** 2).mean())
same = np.array_equal(ours[:, keep][:, [i for i in range(len(keep)) if i not in fix]],
                      ps[:, keep][:, [i for i in range(len(keep)) if i not in fix]])
print(f"interpolation of channels {[keep[i] for i in fix]}: max |boundsort - SpikeInterface| {d:.2e} uV, "
      f"their RMS {rms:.2f} uV; other channels unchanged: {same}")
assert d < 1e-4 * rms and same
PYEOF
finish
