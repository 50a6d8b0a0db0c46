/*
 * ccg.c - correlograms and refractoriness metrics (see ccg.h for the
 * definitions). The CCG is a two-pointer sweep: for each spike of train 2
 * the first spike of train 1 that can lie within the ±500 ms window only
 * moves forward, so the cost is linear in the spikes plus the pairs counted.
 * Counts are integers, so the result does not depend on any order.
 */
#include "ccg.h"

#include <math.h>
#include <string.h>

#include "../mem/mem.h"

static int64_t window_samples(double fs_hz);

void bs_ccg_counts(const int64_t *t1, int64_t n1, const int64_t *t2, int64_t n2, double fs_hz, int64_t *counts)
{
    for (int b = 0; b < BS_CCG_BINS; b++)
        counts[b] = 0;
    if (n1 <= 0 || n2 <= 0 || !(fs_hz > 0))
        return;
    double ms_per_sample = 1000.0 / fs_hz;
    int64_t w = window_samples(fs_hz);
    int64_t lo = 0;
    for (int64_t i = 0; i < n2; i++) {
        int64_t b = t2[i];
        while (lo < n1 && t1[lo] < b - w)
            lo++;
        for (int64_t j = lo; j < n1 && t1[j] <= b + w; j++) {
            long long bin = llround((double)(b - t1[j]) * ms_per_sample);
            if (bin >= -BS_CCG_HALF && bin <= BS_CCG_HALF)
                counts[bin + BS_CCG_HALF]++;
        }
    }
}

static double window_sum(const int64_t *k, int lag_lo, int lag_hi)
{
    double s = 0;
    for (int l = lag_lo; l <= lag_hi; l++)
        s += (double)k[l + BS_CCG_HALF];
    return s;
}

bs_ccg_metrics bs_ccg_metrics_from_counts(const int64_t *counts, int64_t n1, int64_t n2, double span_s)
{
    bs_ccg_metrics m = {0, 0, 0, 1.0, 1.0};
    if (n1 <= 0 || n2 <= 0 || !(span_s > 0))
        return m;
    double lam = 0.001 * (double)n1 * (double)n2 / span_s; /* expected count per 1-ms bin */
    /* baseline: |lag| in 251..500 ms, 500 bins */
    double base = (window_sum(counts, -BS_CCG_HALF, -251) + window_sum(counts, 251, BS_CCG_HALF)) / 500.0;
    double sh1 = window_sum(counts, -49, -10) / 40.0, sh2 = window_sum(counts, 10, 49) / 40.0;
    m.R00 = base / lam;
    m.R01 = fmax(sh1, sh2) / lam;
    m.Q00 = fmax(base, fmax(sh1, sh2));
    double denom = fmax(m.R00, m.R01);
    if (!(denom > 0) || !(m.Q00 > 0))
        return m; /* no baseline: cannot show refractoriness */
    double rmin = INFINITY, pmin = INFINITY;
    for (int i = 1; i <= 10; i++) {
        /* central window -i..+i without the zero-lag bin */
        double n = window_sum(counts, -i, i) - (double)counts[BS_CCG_HALF];
        double r = n / (2.0 * i * lam);
        double l = m.Q00 * i;
        double p = 0.5 * (1.0 + erf((n / 2.0 - l) / sqrt(2.0 * l)));
        rmin = fmin(rmin, r);
        pmin = fmin(pmin, p);
    }
    m.R12 = rmin / denom;
    m.Q12 = pmin;
    return m;
}

static double span_of(const int64_t *t1, int64_t n1, const int64_t *t2, int64_t n2, double fs_hz)
{
    int64_t lo = t1[0] < t2[0] ? t1[0] : t2[0];
    int64_t hi = t1[n1 - 1] > t2[n2 - 1] ? t1[n1 - 1] : t2[n2 - 1];
    return (double)(hi - lo) / fs_hz;
}

bs_ccg_metrics bs_ccg_metrics_of(const int64_t *t1, int64_t n1, const int64_t *t2, int64_t n2, double fs_hz)
{
    bs_ccg_metrics m = {0, 0, 0, 1.0, 1.0};
    if (n1 <= 0 || n2 <= 0 || !(fs_hz > 0))
        return m;
    int64_t counts[BS_CCG_BINS];
    bs_ccg_counts(t1, n1, t2, n2, fs_hz, counts);
    return bs_ccg_metrics_from_counts(counts, n1, n2, span_of(t1, n1, t2, n2, fs_hz));
}

int bs_ccg_is_good(const int64_t *t, int64_t n, double fs_hz, double acg_threshold, bs_ccg_metrics *m)
{
    bs_ccg_metrics mm = {0, 0, 0, 0.0, 1.0};
    int good = 0;
    if (n > 10 && t[n - 1] > t[0] && fs_hz > 0) {
        mm = bs_ccg_metrics_of(t, n, t, n, fs_hz);
        good = mm.R12 < acg_threshold && mm.Q12 < 0.2;
    }
    if (m)
        *m = mm;
    return good;
}

int bs_ccg_cross_refractory(const int64_t *t1, int64_t n1, const int64_t *t2, int64_t n2, double fs_hz,
                            double ccg_threshold, bs_ccg_metrics *m)
{
    bs_ccg_metrics mm = bs_ccg_metrics_of(t1, n1, t2, n2, fs_hz);
    if (m)
        *m = mm;
    return mm.R12 < ccg_threshold && mm.Q12 < 0.05;
}

int bs_ccg_underpowered(const bs_ccg_metrics *m)
{
    double l = m->Q00 * 10.0; /* the widest central window, i = 10 */
    if (!(l > 0))
        return 1;
    return 0.5 * (1.0 + erf(-l / sqrt(2.0 * l))) >= 0.05;
}

/* widest lag (samples) that can still round into ±500 ms, plus a margin */
static int64_t window_samples(double fs_hz)
{
    return (int64_t)ceil((BS_CCG_HALF + 0.5) * fs_hz / 1000.0) + 1;
}

static void count_lag(int64_t *counts, int64_t d, double ms_per_sample)
{
    long long bin = llround((double)d * ms_per_sample);
    if (bin >= -BS_CCG_HALF && bin <= BS_CCG_HALF)
        counts[bin + BS_CCG_HALF]++;
}

bs_status bs_acg_stream_add(bs_acg_stream *a, int64_t t, double fs_hz)
{
    double ms = 1000.0 / fs_hz;
    int64_t w = window_samples(fs_hz);
    while (a->len > 0 && a->ring[a->head] < t - w) { /* drop spikes out of the window */
        a->head = (a->head + 1) % a->cap;
        a->len--;
    }
    for (int64_t i = 0; i < a->len; i++) {
        int64_t d = t - a->ring[(a->head + i) % a->cap];
        count_lag(a->counts, d, ms);
        count_lag(a->counts, -d, ms);
    }
    count_lag(a->counts, 0, ms);
    if (a->len == a->cap) { /* grow, unrolling the ring */
        int64_t cap = a->cap ? 2 * a->cap : 16;
        int64_t *r = bs_mem_alloc("cluster/acg", (size_t)cap * sizeof *r);
        if (!r)
            return BS_ERR_MEMORY;
        for (int64_t i = 0; i < a->len; i++)
            r[i] = a->ring[(a->head + i) % a->cap];
        bs_mem_free(a->ring);
        a->ring = r;
        a->cap = cap;
        a->head = 0;
    }
    a->ring[(a->head + a->len) % a->cap] = t;
    a->len++;
    if (a->n == 0)
        a->first = t;
    a->last = t;
    a->n++;
    return BS_OK;
}

int bs_acg_stream_is_good(const bs_acg_stream *a, double fs_hz, double acg_threshold, bs_ccg_metrics *m)
{
    bs_ccg_metrics mm = {0, 0, 0, 0.0, 1.0};
    int good = 0;
    if (a->n > 10 && a->last > a->first && fs_hz > 0) {
        mm = bs_ccg_metrics_from_counts(a->counts, a->n, a->n, (double)(a->last - a->first) / fs_hz);
        good = mm.R12 < acg_threshold && mm.Q12 < 0.2;
    }
    if (m)
        *m = mm;
    return good;
}

void bs_acg_stream_free(bs_acg_stream *a)
{
    bs_mem_free(a->ring);
    memset(a, 0, sizeof *a);
}
