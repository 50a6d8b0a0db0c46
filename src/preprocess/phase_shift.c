/*
 * phase_shift.c - the Neuropixels ADC sampling skew removed by a
 * fractional-delay filter per channel (see preprocess.h, PHASE SHIFT).
 *
 * Mechanism. Channel c was sampled d_c periods after the probe's first
 * channel, so its sample n holds the signal at time n + d_c; the channel is
 * interpolated at n - d_c instead, y[n] = x(n - d_c), with a windowed-sinc
 * filter of BS_PHASE_TAPS taps:
 *     y[n] = sum_j h_j x[n - o_j],  o_j = j - H + 1 (j = 0..2H-1, H = taps / 2),
 *     h_j = sinc(o_j - d) * kaiser((o_j - d) / H),  then scaled so sum h_j = 1,
 * the band-limited interpolation of the samples truncated to 2H of them
 * (d = 0 is the identity; such channels are not touched). With the Kaiser
 * window (beta 8) the response is within 2e-4 of the exact delay up to 2/3
 * of the Nyquist frequency (10 kHz at 30 kHz: the upper edge of the
 * Neuropixels AP band's hardware filter) and rolls off above it (6e-2 at
 * 0.8); 32 taps would reach 1.5e-4 at 0.8 for twice the work
 * (test_phase_shift measures the error against the DFT shift). Samples past the window's ends repeat its first and last sample;
 * the batch halo absorbs that, as for the high-pass.
 *
 * Each row is copied with its padding into per-thread scratch, then the
 * row is rebuilt eight samples at a time, each a sum over the taps in tap
 * order held in a vector register, so a sample's arithmetic is the same on
 * every thread count and machine.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "../common/special.h"
#include "../common/simd.h"
#include "pp_internal.h"
#include "preprocess.h"

#define H (BS_PHASE_TAPS / 2)
#define VL 8 /* samples per vector */
#define KAISER_BETA 8.0

void bs_phase_shift_taps(double d, float *taps)
{
    double h[BS_PHASE_TAPS], sum = 0, i0b = bs_bessel_i0(KAISER_BETA);
    for (int j = 0; j < BS_PHASE_TAPS; j++) {
        double t = (double)(j - H + 1) - d; /* o_j - d */
        double sinc = d == 0 ? (j == H - 1) : sin(M_PI * t) / (M_PI * t); /* d = 0: exactly the identity */
        double r = t / H;
        double w = fabs(r) >= 1 ? 0.0 : bs_bessel_i0(KAISER_BETA * sqrt(1 - r * r)) / i0b;
        h[j] = sinc * w;
        sum += h[j];
    }
    for (int j = 0; j < BS_PHASE_TAPS; j++)
        taps[j] = (float)(h[j] / sum);
}

size_t bs_phase_shift_scratch_bytes(int64_t n_t, int n_threads)
{
    return (size_t)(n_threads > 0 ? n_threads : 1) * (size_t)(n_t + BS_PHASE_TAPS) * sizeof(float);
}


typedef float vfloat __attribute__((vector_size(VL * sizeof(float))));

/* row[n] = sum_j taps[j] * x[n - o_j] with pad[i] = x[i - H] (edges repeated): x[n - o_j] = pad[n + 2H - 1 - j].
 * VL samples at a time, the taps accumulated in registers in tap order (0 + t0 x0 + t1 x1 + ...), the
 * same operations for every sample in every variant and for the tail. */
BS_VECTORIZED static void shift_row(const float *restrict taps, const float *restrict pad, float *restrict row,
                                    int64_t n_t)
{
    int64_t n = 0;
    for (; n + VL <= n_t; n += VL) {
        vfloat acc = {0};
        for (int j = 0; j < BS_PHASE_TAPS; j++) {
            vfloat v;
            memcpy(&v, pad + n + 2 * H - 1 - j, sizeof v);
            acc += taps[j] * v;
        }
        memcpy(row + n, &acc, sizeof acc);
    }
    for (; n < n_t; n++) {
        float acc = 0;
        for (int j = 0; j < BS_PHASE_TAPS; j++)
            acc += taps[j] * pad[n + 2 * H - 1 - j];
        row[n] = acc;
    }
}

bs_status bs_phase_shift_apply(const float *shift, float *x, int n_chan, int64_t n_t, void *scratch,
                               size_t scratch_bytes)
{
    for (int c = 0; c < n_chan; c++)
        if (!(shift[c] >= 0 && shift[c] < 1))
            return bs_error(BS_ERR_INTERNAL, "phase shift of channel %d is %g samples, expected 0 <= d < 1", c,
                            (double)shift[c]);
    size_t per = (size_t)(n_t + BS_PHASE_TAPS) * sizeof(float);
    pp_scratch sc;
    BS_TRY(pp_scratch_get("preprocess/phase_shift", per, scratch, scratch_bytes, &sc));
#pragma omp parallel for schedule(dynamic, 4) num_threads(sc.n_threads)
    for (int c = 0; c < n_chan; c++) {
        if (shift[c] == 0)
            continue;
        float taps[BS_PHASE_TAPS];
        bs_phase_shift_taps(shift[c], taps);
        float *pad = (float *)(sc.buf + per * (size_t)omp_get_thread_num());
        float *row = x + (size_t)c * (size_t)n_t;
        for (int i = 0; i < H; i++) {
            pad[i] = row[0];
            pad[H + n_t + i] = row[n_t - 1];
        }
        memcpy(pad + H, row, (size_t)n_t * sizeof *row);
        shift_row(taps, pad, row, n_t);
    }
    pp_scratch_release(&sc);
    return BS_OK;
}
