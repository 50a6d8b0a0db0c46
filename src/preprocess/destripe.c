/*
 * destripe.c - SpikeInterface's highpass_spatial_filter (IBL's kfilt): an
 * automatic gain control, then a zero-phase Butterworth high-pass along the
 * channels of each shank at every sample (see preprocess.h, DESTRIPE).
 *
 * AGC BY RUNNING SUMS. The gain is the convolution of a = |x| with numpy's
 * Hann window of N = 2h + 1 taps, w_k = 0.5 - 0.5 cos(2 pi k / (N - 1)),
 * normalised by its sum, which is exactly (N - 1) / 2 = h (the cosines over
 * a full period sum to 0 and the last tap adds cos(2 pi) = 1). Centred
 * ("same" mode), tap k multiplies a[t + h - k]; with j = t + h - k,
 *     cos(2 pi k / 2h) = cos(pi (t - j) / h + pi) = -cos(pi (j - t) / h),
 * so, with theta = pi / h and the two end taps (exactly 0) left out,
 *     gain[t] = (1 / 2h) sum_{|j - t| < h} a[j] (1 + cos(theta (j - t)))
 *             = (1 / 2h) [ B(t) + cos(theta t) C(t) + sin(theta t) S(t) ],
 *     B(t) = sum a[j],  C(t) = sum a[j] cos(theta j),  S(t) = sum a[j] sin(theta j)
 * over the window's samples j in (t - h, t + h) (samples outside the window
 * count as zeros, as in scipy's "same" convolution). B, C and S are
 * differences of three running (prefix) sums over the row, accumulated in
 * double from sample 0; cos(theta j), sin(theta j) repeat every 2h samples
 * and come from tables computed once with libm. That is O(1) per sample
 * instead of N = 3001 multiply-adds at 30 kHz, and exact up to rounding:
 * each prefix sum of n terms carries at most ~n u |P| of rounding error (u =
 * 2^-53, |P| the row's total sum of |x|; ~sqrt(n) u |P| in practice), so for
 * a 63000-sample window whose |x| is of the same size throughout, the gain's
 * relative error is at most ~2 n u (n / 2h) ~ 3e-10 (1e-12 typically):
 * far below the float32 rounding (6e-8) of the values it divides and
 * multiplies. test_denoise checks it against the direct convolution in double.
 * A channel whose |x| sums to 0 (then every running sum is exactly 0) is
 * "dead" and is not divided (its output is 0).
 *
 * Pass 1 (parallel over channels): the gains of a row (per-thread running
 * sums, two samples per step so that the chain of dependent additions is
 * half as long; the interior, where the window is not clipped, vectorised),
 * the row divided by max(eps_c, gain) in double and rounded to float32 in
 * place (numpy divides in float64 and stores into the float32 traces), the
 * gain kept as float32 in the gain buffer of the scratch.
 *
 * Pass 2 (parallel over (shank, block of DS_BLOCK = 64 samples)): each
 * block's columns of the shank's channels are gathered in depth order into
 * [channel][lane] double buffers of DS_LANES = 16 columns with the mirrored
 * channels and the odd extension around them, filtered forward and backward
 * along the channels by the second-order sections (direct form II
 * transposed, as highpass.c, with sosfilt_zi states scaled by the first
 * value; a first-order section skips its zero terms), the time columns in
 * the vector lanes; the shank's channels are then written back as float32
 * of (filtered value x gain). The odd extension 2 y0 - y_k is formed in
 * float32, as scipy's odd_ext does on float32 traces, before the double
 * filter. Pass 2 reads and writes only its own block's columns, so blocks
 * are independent. Gathering 64 columns (four cache lines) of a row at once
 * rather than 16 keeps the 384 strided row streams cheap.
 *
 * Each sample's arithmetic is the same whichever thread or lane does it, so
 * the output bytes do not depend on the thread count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pp_internal.h"
#include "../io/probe.h"
#include "preprocess.h"

#define DS_TAG "preprocess/destripe"
#define DS_LANES 16       /* time columns filtered together in pass 2 (four AVX2 vectors of doubles) */
#define DS_SUB 4          /* lane groups per block of pass 2 */
#define DS_BLOCK (DS_LANES * DS_SUB) /* time columns per block of pass 2 */
#define DS_PAD 60         /* SpikeInterface's n_channel_pad */
#define DS_AGC_S 0.1      /* agc_window_length_s, s */
#define DS_EPS 0.003f     /* epsilon (float32, as numpy multiplies it with the float32 RMS values) */
#define DS_ORDER 3        /* highpass_butter_order */
#define DS_WN 0.01        /* highpass_butter_wn, of the spatial Nyquist frequency */

static size_t round64(size_t b) { return (b + 63) & ~(size_t)63; }

/* ------------------------------------------------------------- set up --- */

void bs_destripe_free(bs_destripe *d)
{
    bs_mem_free(d->order);
    bs_mem_free(d->shank_start);
    bs_mem_free(d->eps_uv);
    bs_mem_free(d->hann_cos);
    bs_mem_free(d->hann_sin);
    memset(d, 0, sizeof *d);
}

bs_status bs_destripe_init(const bs_probe *probe, double fs_hz, const float *rms_uv, bs_destripe *d)
{
    memset(d, 0, sizeof *d);
    const int C = probe->n_chan, S = probe->n_shanks;
    if (C < 1 || S < 1)
        return bs_error(BS_ERR_INPUT, "destripe: probe has %d channels on %d shanks, expected at least 1", C, S);
    if (!(fs_hz > 0) || !isfinite(fs_hz))
        return bs_error(BS_ERR_INPUT, "destripe: field 'fs': expected a positive sampling rate in Hz, got %g", fs_hz);
    for (int c = 0; c < C; c++) {
        if (probe->shank[c] < 0 || probe->shank[c] >= S)
            return bs_error(BS_ERR_INPUT, "destripe: channel %d is on shank %d, expected 0..%d", c, probe->shank[c],
                            S - 1);
        if (!(rms_uv[c] >= 0) || !isfinite(rms_uv[c]))
            return bs_error(BS_ERR_INPUT, "destripe: RMS of channel %d is %g µV, expected a finite value >= 0", c,
                            (double)rms_uv[c]);
    }
    /* SpikeInterface: int(np.round(0.1 / (1 / fs) / 2) * 2 + 1); rint rounds half to even, as np.round */
    double half = rint(DS_AGC_S / (1.0 / fs_hz) / 2.0);
    if (!(half < 1e8))
        return bs_error(BS_ERR_INPUT, "destripe: sampling rate %g Hz gives an AGC window too long", fs_hz);
    d->n_chan = C;
    d->n_shanks = S;
    d->hann_h = (int)half;
    d->hann_n = 2 * d->hann_h + 1;
    d->n_pad = DS_PAD;
    BS_TRY(bs_highpass_design(DS_ORDER, DS_WN / 2.0, 1.0, &d->spatial));
    const size_t period = d->hann_h > 0 ? 2 * (size_t)d->hann_h : 1;
    d->order = bs_mem_alloc(DS_TAG, (size_t)C * sizeof(int));
    d->shank_start = bs_mem_calloc(DS_TAG, (size_t)S + 1, sizeof(int));
    d->eps_uv = bs_mem_alloc(DS_TAG, (size_t)C * sizeof(float));
    d->hann_cos = bs_mem_alloc(DS_TAG, period * sizeof(double));
    d->hann_sin = bs_mem_alloc(DS_TAG, period * sizeof(double));
    if (!d->order || !d->shank_start || !d->eps_uv || !d->hann_cos || !d->hann_sin) {
        bs_destripe_free(d);
        return BS_ERR_MEMORY;
    }
    for (size_t m = 0; m < period; m++) {
        double a = d->hann_h > 0 ? M_PI * (double)m / (double)d->hann_h : 0.0;
        d->hann_cos[m] = cos(a);
        d->hann_sin[m] = sin(a);
    }
    for (int c = 0; c < C; c++)
        d->eps_uv[c] = DS_EPS * rms_uv[c];
    /* shank by shank (every shank: group s is shank s), each in channel order unless its depth decreases
     * somewhere, then by depth (as SpikeInterface's highpass_spatial_filter) */
    if (bs_probe_depth_order(probe, 0, 1, d->order, d->shank_start) < 0) {
        bs_destripe_free(d);
        return BS_ERR_MEMORY;
    }
    for (int s = 0; s < S; s++)
        if (d->shank_start[s + 1] - d->shank_start[s] > d->max_shank)
            d->max_shank = d->shank_start[s + 1] - d->shank_start[s];
    return BS_OK;
}

/* ------------------------------------------------------------- scratch --- */

/* Pass 2's buffer: (n + 2 pad + 2 padlen) channels x DS_BLOCK columns for the largest shank. */
static int64_t block_rows(const bs_destripe *d)
{
    int n = d->max_shank, pad = n < d->n_pad ? n : d->n_pad;
    return (int64_t)n + 2 * pad + 2 * (int64_t)d->spatial.padlen;
}

static size_t per_thread_bytes(const bs_destripe *d, int64_t n_t)
{
    size_t sums = 3 * (size_t)(n_t + 1) * sizeof(double) + (size_t)n_t * sizeof(double); /* running sums, gain */
    size_t block = (size_t)block_rows(d) * DS_BLOCK * sizeof(double);
    return round64(sums > block ? sums : block);
}

static size_t gain_bytes(const bs_destripe *d, int64_t n_t)
{
    return round64((size_t)d->n_chan * (size_t)n_t * sizeof(float));
}

size_t bs_destripe_scratch_bytes(const bs_destripe *d, int64_t n_t, int n_threads)
{
    if (d->n_chan < 1 || n_t < 1)
        return 0;
    if (n_threads < 1)
        n_threads = 1;
    return gain_bytes(d, n_t) + (size_t)n_threads * per_thread_bytes(d, n_t);
}

/* ----------------------------------------------------------------- AGC --- */

/* gain[t] for t in [t0, t1) from the running sums (pb, pc, ps: n_t + 1 each):
 * the window (t - h, t + h) clipped to the row. In the interior (no
 * clipping) the table index m = t mod 2h advances with t, so the loop runs in
 * stretches without wrap-around and vectorises. */
BS_VECTORIZED
static void gain_range(const bs_destripe *d, const double *restrict pb, const double *restrict pc,
                       const double *restrict ps, int64_t n_t, int64_t t0, int64_t t1, double *restrict gain)
{
    const int64_t h = d->hann_h, period = 2 * h;
    const double *restrict cs = d->hann_cos, *restrict sn = d->hann_sin;
    const double inv = 1.0 / (double)period;
    int64_t t = t0;
    while (t < t1) {
        const int64_t m0 = t % period;
        int64_t end = t + (period - m0);
        end = end < t1 ? end : t1;
        if (t - h + 1 >= 0 && end - 1 + h <= n_t) {
            const int64_t len = end - t, lo = t - h + 1, hi = t + h;
#pragma omp simd
            for (int64_t i = 0; i < len; i++)
                gain[t + i] = ((pb[hi + i] - pb[lo + i]) + cs[m0 + i] * (pc[hi + i] - pc[lo + i]) +
                               sn[m0 + i] * (ps[hi + i] - ps[lo + i])) *
                              inv;
        } else {
            for (int64_t i = t; i < end; i++) {
                const int64_t lo = i - h + 1 > 0 ? i - h + 1 : 0, hi = i + h < n_t ? i + h : n_t;
                const int64_t m = m0 + (i - t);
                gain[i] = ((pb[hi] - pb[lo]) + cs[m] * (pc[hi] - pc[lo]) + sn[m] * (ps[hi] - ps[lo])) * inv;
            }
        }
        t = end;
    }
}

void bs_destripe_gain(const bs_destripe *d, const float *row, int64_t n_t, double *sums, double *gain)
{
    const int64_t h = d->hann_h;
    if (h == 0) { /* a one-tap window: the gain is |x| */
        for (int64_t t = 0; t < n_t; t++)
            gain[t] = fabs((double)row[t]);
        return;
    }
    const int64_t period = 2 * h;
    const double *cs = d->hann_cos, *sn = d->hann_sin;
    /* pb[j], pc[j], ps[j] = sums over samples i < j of a[i], a[i] cos(theta i), a[i] sin(theta i) */
    double *pb = sums, *pc = sums + (n_t + 1), *ps = sums + 2 * (n_t + 1);
    double b = 0, c = 0, s = 0;
    pb[0] = pc[0] = ps[0] = 0;
    /* two samples per step (the period 2h is even, so a pair never wraps the tables): the running sums advance
     * by the pair's sum, which halves the chain of dependent additions; the odd entries hang off it */
    int64_t j = 0, m = 0;
    for (; j + 1 < n_t; j += 2) {
        const double a0 = fabs((double)row[j]), a1 = fabs((double)row[j + 1]);
        const double c0 = a0 * cs[m], c1 = a1 * cs[m + 1], s0 = a0 * sn[m], s1 = a1 * sn[m + 1];
        pb[j + 1] = b + a0;
        pc[j + 1] = c + c0;
        ps[j + 1] = s + s0;
        b += a0 + a1;
        c += c0 + c1;
        s += s0 + s1;
        pb[j + 2] = b;
        pc[j + 2] = c;
        ps[j + 2] = s;
        m += 2;
        if (m == period)
            m = 0;
    }
    if (j < n_t) {
        const double a = fabs((double)row[j]);
        pb[j + 1] = b + a;
        pc[j + 1] = c + a * cs[m];
        ps[j + 1] = s + a * sn[m];
    }
    gain_range(d, pb, pc, ps, n_t, 0, n_t, gain);
}

/* ------------------------------------------------- the spatial high-pass --- */

/* One pass of the sections (pp_internal.h): DS_LANES lanes. */
PP_SOS_PASS(chan_pass, DS_LANES)

/* Columns [t0, t0 + cols) (cols <= DS_BLOCK) of the shank whose depth-ordered
 * channels are ord[0..n): DS_SUB groups of DS_LANES lanes, group b in
 * buf + b * len * DS_LANES. A row's DS_BLOCK columns are gathered and
 * scattered together (four cache lines per row instead of one). Inlined with
 * cols = DS_BLOCK for full blocks (fixed-length loops: vector conversions)
 * and with a variable count for the last. */
static inline __attribute__((always_inline)) void block_cols(const bs_destripe *d, const int *ord, int n, float *x,
                                                             const float *gain, int64_t n_t, int64_t t0,
                                                             const int cols, double *buf)
{
    const int pad = n < d->n_pad ? n : d->n_pad;
    const int64_t m = (int64_t)n + 2 * pad;                                  /* padded channels */
    const int64_t q = d->spatial.padlen < m - 1 ? d->spatial.padlen : m - 1; /* odd extension */
    const int64_t len = m + 2 * q;
    const int n_sub = (cols + DS_LANES - 1) / DS_LANES;
    if (cols < DS_BLOCK)
        memset(buf, 0, (size_t)n_sub * (size_t)len * DS_LANES * sizeof(double));
    for (int i = 0; i < n; i++) {
        const float *src = x + (size_t)ord[i] * (size_t)n_t + t0;
        for (int b = 0; b < n_sub; b++) {
            double *dst = buf + ((size_t)b * (size_t)len + (size_t)(q + pad + i)) * DS_LANES;
            const int lim = cols - b * DS_LANES < DS_LANES ? cols - b * DS_LANES : DS_LANES;
            for (int l = 0; l < lim; l++)
                dst[l] = src[b * DS_LANES + l];
        }
    }
    for (int b = 0; b < n_sub; b++) {
        double *e = buf + (size_t)b * (size_t)len * DS_LANES, *y = e + q * DS_LANES; /* the padded channels */
        for (int k = 0; k < pad; k++)
            for (int l = 0; l < DS_LANES; l++) {
                y[(pad - 1 - k) * DS_LANES + l] = y[(pad + k) * DS_LANES + l];
                y[(pad + n + k) * DS_LANES + l] = y[(pad + n - 1 - k) * DS_LANES + l];
            }
        /* odd extension, in float32 as scipy's odd_ext on float32 data */
        for (int64_t k = 0; k < q; k++)
            for (int l = 0; l < DS_LANES; l++) {
                float y0 = (float)y[l], yk = (float)y[(q - k) * DS_LANES + l];
                float ye = (float)y[(m - 1) * DS_LANES + l], yr = (float)y[(m - 2 - k) * DS_LANES + l];
                e[k * DS_LANES + l] = 2.0f * y0 - yk;
                e[(q + m + k) * DS_LANES + l] = 2.0f * ye - yr;
            }
        chan_pass(&d->spatial, e, len, 0);
        chan_pass(&d->spatial, e, len, 1);
    }
    for (int i = 0; i < n; i++) {
        const size_t off = (size_t)ord[i] * (size_t)n_t + (size_t)t0;
        for (int b = 0; b < n_sub; b++) {
            const double *res = buf + ((size_t)b * (size_t)len + (size_t)(q + pad + i)) * DS_LANES;
            const int lim = cols - b * DS_LANES < DS_LANES ? cols - b * DS_LANES : DS_LANES;
            float *out = x + off + (size_t)b * DS_LANES;
            const float *g = gain + off + (size_t)b * DS_LANES;
            for (int l = 0; l < lim; l++)
                out[l] = (float)(res[l] * (double)g[l]);
        }
    }
}

BS_VECTORIZED
static void filter_block(const bs_destripe *d, const int *ord, int n, float *x, const float *gain, int64_t n_t,
                         int64_t t0, int cols, double *buf)
{
    if (cols == DS_BLOCK)
        block_cols(d, ord, n, x, gain, n_t, t0, DS_BLOCK, buf);
    else
        block_cols(d, ord, n, x, gain, n_t, t0, cols, buf);
}

/* --------------------------------------------------------------- apply --- */

static int all_zero(const float *row, int64_t n)
{
    for (int64_t t = 0; t < n; t++)
        if (row[t] != 0)
            return 0;
    return 1;
}

/* row <- row / max(eps, g) rounded to float32, grow <- g as float32. With eps = 0 (a channel of RMS 0 that is
 * not all zeros) the divisor can be 0 where x = 0: those samples stay 0 (numpy would give NaN). */
BS_VECTORIZED
static void agc_divide(float *restrict row, float *restrict grow, const double *restrict g, double eps, int64_t n)
{
    if (eps > 0) {
#pragma omp simd
        for (int64_t t = 0; t < n; t++) {
            double den = g[t] > eps ? g[t] : eps;
            row[t] = (float)((double)row[t] / den);
            grow[t] = (float)g[t];
        }
        return;
    }
    for (int64_t t = 0; t < n; t++) {
        if (g[t] > 0)
            row[t] = (float)((double)row[t] / g[t]);
        else
            row[t] = 0.0f;
        grow[t] = (float)g[t];
    }
}

bs_status bs_destripe_apply(const bs_destripe *d, float *x, int n_chan, int64_t n_t, void *scratch,
                            size_t scratch_bytes)
{
    if (n_chan != d->n_chan || n_t < 1)
        return bs_error(BS_ERR_INPUT, "destripe: window of %d channels x %lld samples: expected %d x at least 1",
                        n_chan, (long long)n_t, d->n_chan);
    if (!d->order || d->spatial.n_sections < 1)
        return bs_error(BS_ERR_INTERNAL, "destripe: not initialised");
    const size_t gb = gain_bytes(d, n_t), per = per_thread_bytes(d, n_t);
    float *gain;
    pp_scratch s;
    if (scratch) {
        if (scratch_bytes < gb + per)
            return bs_error(BS_ERR_INTERNAL, "%s: scratch of %zu bytes is smaller than the %zu bytes of one thread",
                            DS_TAG, scratch_bytes, gb + per);
        gain = scratch;
        BS_TRY(pp_scratch_get(DS_TAG, per, (char *)scratch + gb, scratch_bytes - gb, &s));
    } else {
        gain = bs_mem_alloc(DS_TAG, gb);
        if (!gain)
            return BS_ERR_MEMORY;
        bs_status st = pp_scratch_get(DS_TAG, per, NULL, 0, &s);
        if (st != BS_OK) {
            bs_mem_free(gain);
            return st;
        }
    }
    const int nth = s.n_threads;

    /* pass 1: the gains, and each row divided by its floored gain */
    const int h = d->hann_h;
#pragma omp parallel num_threads(nth)
    {
        double *sums = (double *)(s.buf + (size_t)omp_get_thread_num() * per);
        double *g = sums + 3 * (size_t)(n_t + 1);
#pragma omp for schedule(dynamic, 4)
        for (int c = 0; c < n_chan; c++) {
            float *row = x + (size_t)c * (size_t)n_t;
            float *grow = gain + (size_t)c * (size_t)n_t;
            bs_destripe_gain(d, row, n_t, sums, g);
            if (h > 0 ? sums[n_t] == 0 : all_zero(row, n_t)) { /* dead: all |x| are 0 */
                memset(grow, 0, (size_t)n_t * sizeof *grow);
                continue;
            }
            agc_divide(row, grow, g, (double)d->eps_uv[c], n_t);
        }
    }

    /* pass 2: along the channels, block by block */
    const int64_t n_blocks = (n_t + DS_BLOCK - 1) / DS_BLOCK;
    const int64_t n_items = n_blocks * d->n_shanks;
#pragma omp parallel num_threads(nth)
    {
        double *buf = (double *)(s.buf + (size_t)omp_get_thread_num() * per);
#pragma omp for schedule(static)
        for (int64_t it = 0; it < n_items; it++) {
            const int sh = (int)(it / n_blocks);
            const int64_t t0 = (it % n_blocks) * DS_BLOCK;
            const int first = d->shank_start[sh], n = d->shank_start[sh + 1] - first;
            if (n == 0)
                continue;
            const int cols = (int)(n_t - t0 < DS_BLOCK ? n_t - t0 : DS_BLOCK);
            filter_block(d, d->order + first, n, x, gain, n_t, t0, cols, buf);
        }
    }
    pp_scratch_release(&s);
    if (!scratch)
        bs_mem_free(gain);
    return BS_OK;
}
