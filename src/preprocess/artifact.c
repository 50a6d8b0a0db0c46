/*
 * artifact.c - finding and blanking broadband artifacts in a whitened
 * window (see preprocess.h, "ARTIFACTS").
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "../common/select.h"
#include "../common/simd.h"
#include "../mem/mem.h"
#include "preprocess.h"

#define NOISE_SAMPLE 256 /* values whose order statistics bracket the median */
#define NOISE_SPREAD 24  /* sample ranks each side of the median's: about 3 standard deviations */

#ifdef BS_X86_KERNELS
/* abs_kth's counting pass over whole vectors of 16 values (the values from
 * 0 to the returned index): sixteen |row[i step]| gathered at a time, those
 * in [lo, hi] appended to v in order (compressed), those under lo
 * and the NaNs counted: the scalar loop's results exactly. */
__attribute__((target("avx512f"))) static int64_t bracket_avx512(const float *row, int64_t m, int step, float lo,
                                                                 float hi, float *v, int64_t *below, int64_t *n_in,
                                                                 int64_t *nan)
{
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(step));
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    int64_t i = 0, nb = 0, ni = 0, nn = 0;
    for (; i + 16 <= m; i += 16) {
        const __m512 a = _mm512_abs_ps(_mm512_i32gather_ps(idx, row + i * step, 4));
        const __mmask16 in = _mm512_cmp_ps_mask(a, vlo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(a, vhi, _CMP_LE_OQ);
        /* compressed in a register and stored whole (a compressing store to memory is microcoded on some
           CPUs: about 140 cycles on AMD Zen 4); the 16 lanes fit: ni <= i and i + 16 <= m */
        _mm512_storeu_ps(v + ni, _mm512_maskz_compress_ps(in, a));
        ni += __builtin_popcount(in);
        nb += __builtin_popcount(_mm512_cmp_ps_mask(a, vlo, _CMP_LT_OQ));
        nn += __builtin_popcount(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q));
    }
    *below = nb, *n_in = ni, *nan = nn;
    return i;
}
#endif

/* The k-th smallest of the m values |row[i step]| (i < m), exactly (the
 * value is unique whatever the method): two order statistics of an evenly
 * spaced sample of NOISE_SAMPLE of them bracket it; one pass counts the
 * values under the bracket and copies those inside it into v; when the k-th
 * falls inside (nearly always) it is selected among those few, otherwise
 * among all of them. Data holding a NaN take the full selection too. v: m
 * floats. */
static float abs_kth(const float *row, int64_t m, int step, int64_t k, float *v)
{
    if (m > 4 * NOISE_SAMPLE) {
        float s[NOISE_SAMPLE];
        for (int i = 0; i < NOISE_SAMPLE; i++)
            s[i] = fabsf(row[(int64_t)i * (m / NOISE_SAMPLE) * step]);
        int64_t r = k * NOISE_SAMPLE / m;
        int64_t rlo = r - NOISE_SPREAD < 0 ? 0 : r - NOISE_SPREAD;
        int64_t rhi = r + NOISE_SPREAD > NOISE_SAMPLE - 1 ? NOISE_SAMPLE - 1 : r + NOISE_SPREAD;
        const float lo = bs_select_f(s, NOISE_SAMPLE, rlo), hi = bs_select_f(s, NOISE_SAMPLE, rhi);
        int64_t below = 0, n_in = 0, nan = 0, i = 0;
#ifdef BS_X86_KERNELS
        if (__builtin_cpu_supports("avx512f"))
            i = bracket_avx512(row, m, step, lo, hi, v, &below, &n_in, &nan);
#endif
        for (; i < m; i++) {
            const float a = fabsf(row[i * step]);
            below += a < lo;
            nan += a != a;
            v[n_in] = a;
            n_in += a >= lo && a <= hi;
        }
        if (!nan && below <= k && k < below + n_in)
            return bs_select_f(v, n_in, k - below);
    }
    for (int64_t i = 0; i < m; i++)
        v[i] = fabsf(row[i * step]);
    return bs_select_f(v, m, k);
}

bs_status bs_noise_inv_scales(const float *x, int n_chan, int64_t n_t, int64_t first, int64_t n, int step,
                              const char *tag, float *inv_scale)
{
    const int64_t m = (n + step - 1) / step;
    if (m <= 0) {
        for (int c = 0; c < n_chan; c++)
            inv_scale[c] = 0;
        return BS_OK;
    }
    int nth = omp_get_max_threads();
    float *buf = bs_mem_alloc(tag, (size_t)nth * (size_t)m * sizeof *buf);
    if (!buf)
        return BS_ERR_MEMORY;
#pragma omp parallel for schedule(static) num_threads(nth)
    for (int c = 0; c < n_chan; c++) {
        float *v = buf + (size_t)omp_get_thread_num() * (size_t)m;
        float med = abs_kth(x + (size_t)c * (size_t)n_t + first, m, step, m / 2, v);
        inv_scale[c] = med > 0 ? (float)(0.6745 / med) : 0.0f;
    }
    bs_mem_free(buf);
    return BS_OK;
}

void bs_artifact_default_params(bs_artifact_params *p)
{
    p->threshold = 3.0;
    p->channel_fraction = 0.25;
    p->min_channels = 24;
    p->extend_fraction = 0.1;
    p->margin_ms = 2.0;
    p->taper_ms = 0.5;
}

static int64_t margin_samples(const bs_artifact_params *ap, double fs_hz)
{
    return (int64_t)ceil(ap->margin_ms * fs_hz / 1000.0);
}

int bs_artifact_max_periods(const bs_artifact_params *ap, double fs_hz, int64_t n_t)
{
    return (int)(n_t / (2 * margin_samples(ap, fs_hz) + 1) + 1);
}

/* Gain of column t near a blanked span [a, b): 0 inside, a raised-cosine ramp
 * to 1 over `taper` columns on each side. */
static float ramp(int64_t t, int64_t a, int64_t b, int64_t taper)
{
    int64_t d = t < a ? a - t : t - b + 1; /* columns from the span, 1 = adjacent */
    if (t >= a && t < b)
        return 0.0f;
    if (d > taper)
        return 1.0f;
    return (float)(0.5 - 0.5 * cos(M_PI * (double)d / (double)(taper + 1)));
}

/* Channels needed at a column to start a period (*need) and to extend one (*need_ext); 0 when the
 * window has too few channels to tell an artifact from a spike. */
static int thresholds(const bs_artifact_params *ap, int n_chan, int *need, int *need_ext)
{
    *need = (int)ceil(ap->channel_fraction * n_chan);
    *need = *need < ap->min_channels ? ap->min_channels : *need;
    *need_ext = (int)ceil(ap->extend_fraction * n_chan);
    *need_ext = *need_ext < (ap->min_channels + 3) / 4 ? (ap->min_channels + 3) / 4 : *need_ext;
    return *need <= n_chan;
}

static bs_status blank_from_counts(const bs_artifact_params *ap, double fs_hz, float *x, int n_chan, int64_t n_t,
                                   const int32_t *count, int need, int need_ext, bs_artifact_period *periods,
                                   int max_periods, int *n_periods);

BS_VECTORIZED static void count_row(int32_t *restrict count, const float *restrict v, int64_t len, float thr)
{
    for (int64_t i = 0; i < len; i++)
        count[i] += !(fabsf(v[i]) < thr);
}

void bs_artifact_count_row(int32_t *count, const float *v, int64_t len, float thr)
{
    count_row(count, v, len, thr);
}

bs_status bs_artifact_blank(const bs_artifact_params *ap, double fs_hz, float *x, int n_chan, int64_t n_t,
                            const float *inv_scale, int32_t *count, bs_artifact_period *periods, int max_periods,
                            int *n_periods)
{
    *n_periods = 0;
    int need, need_ext;
    if (!thresholds(ap, n_chan, &need, &need_ext) || n_t < 1)
        return BS_OK; /* too few channels to tell an artifact from a spike */
    const float thr = (float)ap->threshold;
    /* channels crossing at each column: each thread owns a range of columns, so the counts are exact */
#pragma omp parallel for schedule(static)
    for (int64_t t0 = 0; t0 < n_t; t0 += 1024) {
        int64_t t1 = t0 + 1024 < n_t ? t0 + 1024 : n_t;
        memset(count + t0, 0, (size_t)(t1 - t0) * sizeof *count);
        for (int c = 0; c < n_chan; c++) {
            const float *row = x + (size_t)c * (size_t)n_t;
            const float th = inv_scale ? (inv_scale[c] > 0 ? thr / inv_scale[c] : INFINITY) : thr;
            count_row(count + t0, row + t0, t1 - t0, th); /* NaN counts as crossing */
        }
    }
    return blank_from_counts(ap, fs_hz, x, n_chan, n_t, count, need, need_ext, periods, max_periods, n_periods);
}

bs_status bs_artifact_blank_counted(const bs_artifact_params *ap, double fs_hz, float *x, int n_chan, int64_t n_t,
                                    const int32_t *count, bs_artifact_period *periods, int max_periods,
                                    int *n_periods)
{
    *n_periods = 0;
    int need, need_ext;
    if (!thresholds(ap, n_chan, &need, &need_ext) || n_t < 1)
        return BS_OK;
    return blank_from_counts(ap, fs_hz, x, n_chan, n_t, count, need, need_ext, periods, max_periods, n_periods);
}

/* The periods of a window from its per-column crossing counts (need, need_ext: thresholds'), blanked. */
static bs_status blank_from_counts(const bs_artifact_params *ap, double fs_hz, float *x, int n_chan, int64_t n_t,
                                   const int32_t *count, int need, int need_ext, bs_artifact_period *periods,
                                   int max_periods, int *n_periods)
{
    int64_t margin = margin_samples(ap, fs_hz);
    int64_t taper = (int64_t)ceil(ap->taper_ms * fs_hz / 1000.0);
    /* spans: an artifact column extended both ways while need_ext channels cross, then widened by the
       margin; spans closer than two tapers are one */
    int np = 0;
    for (int64_t t = 0; t < n_t;) {
        if (count[t] < need) {
            t++;
            continue;
        }
        int64_t a = t, b = t + 1;
        int peak = count[t];
        while (a > 0 && count[a - 1] >= need_ext)
            a--;
        while (b < n_t && count[b] >= need_ext) {
            peak = count[b] > peak ? count[b] : peak;
            b++;
        }
        t = b;
        a = a - margin < 0 ? 0 : a - margin;
        b = b + margin > n_t ? n_t : b + margin;
        if (np > 0 && a <= periods[np - 1].t1 + 2 * taper) {
            bs_artifact_period *q = &periods[np - 1];
            q->t1 = b > q->t1 ? b : q->t1;
            q->n_chan = peak > q->n_chan ? peak : q->n_chan;
            continue;
        }
        if (np == max_periods)
            return bs_error(BS_ERR_INTERNAL, "artifacts: more than %d periods in a window of %lld samples",
                            max_periods, (long long)n_t);
        periods[np++] = (bs_artifact_period){a, b, peak};
    }
    /* blank: every channel times the gain of the nearest span */
    for (int i = 0; i < np; i++) {
        bs_artifact_period *q = &periods[i];
        int64_t lo = q->t0 - taper < 0 ? 0 : q->t0 - taper, hi = q->t1 + taper > n_t ? n_t : q->t1 + taper;
#pragma omp parallel for schedule(static)
        for (int c = 0; c < n_chan; c++) {
            float *row = x + (size_t)c * (size_t)n_t;
            for (int64_t t = lo; t < hi; t++) {
                float g = ramp(t, q->t0, q->t1, taper);
                row[t] = g == 0.0f ? 0.0f : row[t] * g; /* set, not scaled: a NaN becomes 0 too */
            }
        }
        q->t0 = lo, q->t1 = hi; /* reported with the ramps: every column the blanking touched */
    }
    *n_periods = np;
    return BS_OK;
}
