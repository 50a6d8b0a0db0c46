/*
 * samples.h - seconds to samples, in one place.
 *
 * A duration or time in seconds becomes a whole number of samples at fs_hz
 * by rounding s * fs_hz to the nearest integer, halves away from zero
 * (llround): 2 s at 30 kHz is 60000 samples, 0.05 s at 29999.5 Hz is 1500.
 * The product is formed first (s * fs_hz, not s / (1 / fs_hz)), so the
 * result is the same number the code computed before this helper existed.
 *
 * A window in milliseconds goes through it as ms * 1e-3 seconds (that is the
 * product the code always formed); one written as ms * fs / 1000 keeps its
 * own expression, whose floating-point result can differ in the last bit.
 * Sites that round otherwise do so on purpose and say why next to the code:
 * qc's spike-train metrics truncate or round half to even as SpikeInterface
 * does (int(), round()), compare's delta truncates as SpikeInterface's
 * delta_frames.
 */
#ifndef BS_SAMPLES_H
#define BS_SAMPLES_H

#include <math.h>
#include <stdint.h>

/* Samples in s seconds at fs_hz: llround(s * fs_hz). */
static inline int64_t bs_seconds_to_samples(double s, double fs_hz)
{
    return (int64_t)llround(s * fs_hz);
}

#endif
