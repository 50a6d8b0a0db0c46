#!/usr/bin/env python3
"""boundsort's ADC phase shift against SpikeInterface's phase_shift on the same SpikeGLX recording.

    python bench/preprocess_si.py AP_BIN [SECONDS]     (a venv with spikeinterface; bench/README.md)

Runs build/tests/preprocess_dump (tests/tools/preprocess_dump.c, built with the tests) with
and without --phase on the first SECONDS (default 1) of AP_BIN, and SpikeInterface's read_spikeglx ->
phase_shift on the same samples; removes each channel's mean over the compared samples from all three,
and SpikeInterface's apply_frequency_shift on the same samples (one FFT, no margins), and prints, for the
samples 50 ms from either end (SpikeInterface tapers a 40-ms margin at the
recording's start), the largest and RMS difference between the two shifted traces, in µV, next to the
size of the correction itself (shifted minus unshifted) and the traces' RMS, over the whole band and in
300 Hz - 10 kHz (the Neuropixels AP band). Both are band-limited
interpolations; they differ where boundsort's 16-tap filter departs from the exact delay (above 10 kHz at
30 kHz) and by float32 rounding.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import spikeinterface.extractors as se
from scipy.signal import butter, sosfiltfilt
import spikeinterface.preprocessing as spre
from spikeinterface.preprocessing.phase_shift import apply_frequency_shift

ap, seconds = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
tool = os.path.join(root, "build", "tests", "preprocess_dump")
with tempfile.TemporaryDirectory() as tmp:
    ours, plain = os.path.join(tmp, "ps.npy"), os.path.join(tmp, "plain.npy")
    subprocess.run([tool, ap, "--seconds", str(seconds), "--phase", ours], check=True)
    subprocess.run([tool, ap, "--seconds", str(seconds), plain], check=True)
    b, b0 = np.load(ours).astype(np.float64), np.load(plain).astype(np.float64)
folder = os.path.dirname(ap)
stream = [s for s in se.get_neo_streams("spikeglx", folder)[0] if s.endswith(".ap")][0]
rec = se.read_spikeglx(folder, stream_id=stream)
n = b.shape[0]
si = spre.phase_shift(rec).get_traces(start_frame=0, end_frame=n, return_in_uV=True).astype(np.float64)
# SpikeInterface's shift function itself on the same samples (one FFT over them, no margins)
raw = rec.get_traces(start_frame=0, end_frame=n, return_in_uV=True).astype(np.float64)
si_fn = apply_frequency_shift(raw - raw.mean(axis=0), np.asarray(rec.get_property("inter_sample_shift")), axis=0)
# boundsort sorts the channels that are not reference channels: keep SpikeInterface's columns of those
chan_ids = list(rec.channel_ids)
keep = [i for i, c in enumerate(chan_ids) if not c.endswith("AP191")] if si.shape[1] == b.shape[1] + 1 else None
if keep is not None:
    si, si_fn = si[:, keep], si_fn[:, keep]
assert si.shape == b.shape, (si.shape, b.shape)
edge = int(0.05 * rec.get_sampling_frequency())
sl = slice(edge, n - edge)
for a in (b, b0, si, si_fn):
    a -= a[sl].mean(axis=0)
d = (b - si)[sl]
corr = (b - b0)[sl]
print(f"{ap}: {b.shape[1]} channels, {n - 2 * edge} samples compared")
print(f"traces RMS {np.sqrt((b[sl] ** 2).mean()):.3f} µV; the correction (shifted - unshifted): "
      f"RMS {np.sqrt((corr ** 2).mean()):.3f} µV, max {np.abs(corr).max():.3f} µV")
print(f"boundsort - SpikeInterface's phase_shift recording: RMS {np.sqrt((d ** 2).mean()):.4f} µV, "
      f"max {np.abs(d).max():.4f} µV")
df = (b - si_fn)[sl]
print(f"boundsort - SpikeInterface's apply_frequency_shift on the same samples: RMS {np.sqrt((df ** 2).mean()):.4f} µV, "
      f"max {np.abs(df).max():.4f} µV")
# the same in 300 Hz - 8 kHz (8th-order Butterworth, zero phase), below the band where the 16 taps depart
sos = butter(8, [300, 8000], btype="bandpass", fs=rec.get_sampling_frequency(), output="sos")
db = sosfiltfilt(sos, b - si, axis=0)[sl]
dfb = sosfiltfilt(sos, b - si_fn, axis=0)[sl]
cb = sosfiltfilt(sos, b - b0, axis=0)[sl]
print(f"in 300 Hz - 8 kHz: the correction RMS {np.sqrt((cb ** 2).mean()):.3f} µV; boundsort - the recording: "
      f"RMS {np.sqrt((db ** 2).mean()):.4f} µV; boundsort - the function: RMS {np.sqrt((dfb ** 2).mean()):.4f} µV, "
      f"max {np.abs(dfb).max():.4f} µV")
