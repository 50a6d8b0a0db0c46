/*
 * truncated.c - templates whose matching threshold truncates their
 * amplitudes, and their own thresholds (truncated.h explains the rule).
 *
 * The fit: amplitudes x over the threshold th, binned (bin centres), under a
 * normal N(mu, sigma^2) truncated at th, have the log-likelihood
 *   sum_b n_b (-(x_b - mu)^2 / (2 sigma^2)) - N log sigma - N log Q((th - mu) / sigma)
 * (Q the normal's upper tail, 0.5 erfc(z / sqrt 2)), up to a constant. It
 * is maximised over a fixed grid, mu in [0, 3 th] by th / 160 and sigma in
 * [1, 3] by 0.05 (whitened units: a spike's amplitude on a unit-norm
 * template has the noise's standard deviation 1, and more with the unit's
 * own variation), the first maximum in grid order kept: the same histogram
 * gives the same threshold on every machine and thread count. A pile
 * against th with a long upper side pulls mu under th and sigma up; a
 * unit well over th gives mu about its mean and a small sigma.
 * Also here: which templates the second pass re-peels (bs_trunc_partners:
 * the lowered ones and their pair-table partners) and its rule for the
 * residuals a lowered threshold lets in (bs_trunc_drop_residuals).
 */
#include "truncated.h"

#include <math.h>

#include "../mem/mem.h"

#define SIGMA_LO 1.0
#define SIGMA_HI 3.0
#define SIGMA_STEP 0.05

void bs_trunc_params_default(bs_trunc_params *p)
{
    p->floor = 6.0f;
    p->median_of_th = 1.25;
    p->median_of_amp = 0.85;
    p->max_amp_of_th = 2.0;
    p->min_spikes = 30;
    p->min_drop = 1.5;
    p->overlap = 0.0;
    p->amp_prior = 0.1f;
    p->dup_ms = 0.2;
}

size_t bs_trunc_hist_bytes(int K) { return (size_t)(K > 0 ? K : 0) * (BS_TRUNC_BINS + 1) * sizeof(int32_t); }

void bs_trunc_hist_add(int32_t *hist, float threshold, const int32_t *tmpl, const float *amp, int64_t n)
{
    const double w = threshold / 160.0;
    for (int64_t i = 0; i < n; i++) {
        if (!(amp[i] >= threshold))
            continue;
        double b = ((double)amp[i] - threshold) / w;
        int bin = b < BS_TRUNC_BINS ? (int)b : BS_TRUNC_BINS;
        hist[(size_t)tmpl[i] * (BS_TRUNC_BINS + 1) + (size_t)bin]++;
    }
}

/* mu - sigma of the truncated normal's best fit to the n_nz non-empty bins (centres x, counts c). */
static double fit_low_edge(const double *x, const double *c, int n_nz, double th)
{
    double N = 0;
    for (int i = 0; i < n_nz; i++)
        N += c[i];
    const double w = th / 160.0;
    const int n_mu = 3 * 160 + 1, n_sig = (int)((SIGMA_HI - SIGMA_LO) / SIGMA_STEP + 0.5) + 1;
    double best = -INFINITY, best_mu = th, best_sig = SIGMA_LO;
    for (int a = 0; a < n_mu; a++) {
        double mu = a * w, s2 = 0;
        for (int i = 0; i < n_nz; i++)
            s2 += c[i] * (x[i] - mu) * (x[i] - mu);
        for (int b = 0; b < n_sig; b++) {
            double sig = SIGMA_LO + b * SIGMA_STEP;
            double q = 0.5 * erfc((th - mu) / (sig * sqrt(2.0)));
            if (!(q > 0))
                continue;
            double ll = -s2 / (2.0 * sig * sig) - N * log(sig) - N * log(q);
            if (ll > best)
                best = ll, best_mu = mu, best_sig = sig;
        }
    }
    return best_mu - best_sig;
}

int bs_trunc_thresholds(const bs_trunc_params *p, const int32_t *hist, int K, float threshold,
                        const float *norm_in, const float *own, float *thk)
{
    const double th = threshold, w = th / 160.0;
    double x[BS_TRUNC_BINS], c[BS_TRUNC_BINS];
    int n_low = 0;
    for (int k = 0; k < K; k++) {
        thk[k] = own ? own[k] : threshold;
        if (!(p->floor > 0) || thk[k] != threshold || !(norm_in[k] < p->max_amp_of_th * th))
            continue;
        const int32_t *h = hist + (size_t)k * (BS_TRUNC_BINS + 1);
        int64_t n = 0;
        for (int b = 0; b <= BS_TRUNC_BINS; b++)
            n += h[b];
        if (n < p->min_spikes || n < 1)
            continue;
        int64_t r = (n - 1) / 2, cum = 0; /* the lower middle spike's bin */
        int mb = 0;
        while (mb < BS_TRUNC_BINS && cum + h[mb] <= r)
            cum += h[mb++];
        double med = mb < BS_TRUNC_BINS ? th + (mb + 0.5) * w : 3.0 * th;
        if (!(med < p->median_of_th * th && med < p->median_of_amp * norm_in[k]))
            continue;
        int n_nz = 0;
        for (int b = 0; b < BS_TRUNC_BINS; b++)
            if (h[b] > 0) {
                x[n_nz] = th + (b + 0.5) * w;
                c[n_nz++] = h[b];
            }
        double v = fit_low_edge(x, c, n_nz, th);
        v = v < p->floor ? p->floor : v;
        if (v <= th - p->min_drop) {
            thk[k] = (float)v;
            n_low++;
        }
    }
    return n_low;
}

int bs_trunc_partners(const bs_match_templates *t, const bs_pair_table *pt, const uint8_t *lowered,
                      double min_overlap, uint8_t *in)
{
    const int n_lag = 2 * t->nt - 1;
    float *buf = bs_mem_alloc("match/truncation", sizeof(float) * (size_t)n_lag);
    if (!buf)
        return -1;
    for (int k = 0; k < t->K; k++)
        in[k] = lowered[k] ? 1 : 0;
    for (int k = 0; k < t->K; k++) {
        if (!lowered[k])
            continue;
        for (int64_t m = pt->row_start[k]; m < pt->row_start[k + 1]; m++) {
            const float *r = bs_pair_get(t, pt, k, m, buf);
            float mx = 0.0f;
            for (int d = 0; d < n_lag; d++)
                mx = fabsf(r[d]) > mx ? fabsf(r[d]) : mx;
            if (mx >= min_overlap)
                in[pt->nbr[m]] = 1;
        }
    }
    bs_mem_free(buf);
    int n = 0;
    for (int k = 0; k < t->K; k++)
        n += in[k];
    return n;
}

int64_t bs_trunc_drop_residuals(bs_spike *s, int64_t n, const uint8_t *lowered, float threshold, int64_t dup,
                                int32_t *scratch)
{
    for (int64_t q = 0; q < n; q++) { /* decided on the whole list first, then compacted */
        const bs_spike *a = &s[q];
        int drop = 0;
        if (lowered[a->tmpl] && a->amp < threshold) {
            for (int64_t r = q - 1; r >= 0 && a->time - s[r].time <= dup && !drop; r--)
                drop = s[r].tmpl != a->tmpl && s[r].amp > a->amp;
            for (int64_t r = q + 1; r < n && s[r].time - a->time <= dup && !drop; r++)
                drop = s[r].tmpl != a->tmpl && s[r].amp > a->amp;
        }
        scratch[q] = drop;
    }
    int64_t m = 0;
    for (int64_t q = 0; q < n; q++)
        if (!scratch[q])
            s[m++] = s[q];
    return m;
}
