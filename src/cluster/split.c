/*
 * split.c - a template's matched spikes split in two by amplitude
 * (docs/ALGORITHM.md §9.8; declared in cluster.h, "amplitude splits").
 *
 * Two neurons whose waveforms have the same shape on the same channels but
 * different sizes (two cells a few µm apart, one nearer the contacts) give
 * one template: matching fits each spike's amplitude to the unit-norm shape,
 * so both cells' spikes land on it, at two amplitudes. The split looks for
 * that second mode in the spikes' log amplitudes: with the amplitudes
 * sorted, every cut between two different values that leaves both parts at
 * least max(min_spikes, min_fraction · n) spikes is scored by
 * d' = (m_hi − m_lo) / sqrt((v_lo + v_hi) / 2) (means and variances of the
 * log amplitudes of each part, from prefix sums); the best cut (the lowest on
 * ties) is taken when
 *   - d' ≥ min_dprime (one Gaussian cloud's best cut, at a 5 % tail, scores
 *     about 3.2; a uniform spread about 3.5);
 *   - the cut is not at the edge of the allowed range (a part of exactly the
 *     smallest size allowed): there d' grows only because the part shrinks
 *     into the tail of one cell's amplitudes, where a second cell's mode
 *     gives a maximum inside the range;
 *   - the low part's median amplitude is at least min_low_amp (the matching
 *     threshold's noise crossings pile up just above it: a low part of them
 *     is noise, not a cell);
 *   - the two parts fire over the same period: the largest difference of the
 *     distribution functions of their spike times (the Kolmogorov–Smirnov
 *     distance) is at most max_time_ks. Drift makes one cell's amplitude
 *     change with time; its two "modes" then lie in different periods.
 * A split of one cell's spikes (the high tail of spikes that overlap
 * another's) is undone by the CCG-guided merge that follows (§9.3): the two
 * parts have the same waveform and a refractory cross-correlogram.
 *
 * The result depends only on the amplitudes and times given, in any order
 * of equal values (ties are ordered by index), so it is the same for every
 * thread count and memory budget.
 */
#include <math.h>
#include <stdlib.h>

#include "cluster.h"

void bs_split_default_params(bs_split_params *p)
{
    p->min_dprime = 4.0;
    p->min_spikes = 20;
    p->min_fraction = 0.05;
    p->low_amp_of_threshold = 1.375;
    p->min_low_amp = 0;
    p->max_time_ks = 0.3;
}

typedef struct {
    float a;
    int64_t i;
} amp_idx;

static int amp_idx_cmp(const void *x, const void *y)
{
    const amp_idx *p = x, *q = y;
    if (p->a != q->a)
        return p->a < q->a ? -1 : 1;
    return (p->i > q->i) - (p->i < q->i);
}

size_t bs_split_bytes_per_spike(void) { return sizeof(amp_idx) + 2 * sizeof(double); }

/* The Kolmogorov–Smirnov distance between the times of the spikes under thr
 * and those at or over it (t ascending). */
static double time_ks(const float *amp, const int64_t *t, int64_t n, float thr, int64_t n_lo)
{
    int64_t n_hi = n - n_lo, c_lo = 0, c_hi = 0;
    double d = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        for (; j < n && t[j] == t[i]; j++) /* equal times step together */
            amp[j] < thr ? c_lo++ : c_hi++;
        double e = fabs((double)c_lo / (double)n_lo - (double)c_hi / (double)n_hi);
        d = e > d ? e : d;
        i = j;
    }
    return d;
}

int bs_amp_split(const bs_split_params *p, const float *amp, const int64_t *t, int64_t n, void *work, float *thr,
                 double *dprime)
{
    *dprime = 0;
    int64_t minn = (int64_t)ceil(p->min_fraction * (double)n);
    if (minn < p->min_spikes)
        minn = p->min_spikes;
    if (minn < 2 || n < 2 * minn || !(p->min_dprime > 0))
        return 0;
    amp_idx *s = work;
    double *c1 = (double *)(s + n), *c2 = c1 + n; /* prefix sums of log amplitude and its square */
    for (int64_t i = 0; i < n; i++) {
        if (!(amp[i] > 0))
            return 0;
        s[i] = (amp_idx){amp[i], i};
    }
    qsort(s, (size_t)n, sizeof *s, amp_idx_cmp);
    double a1 = 0, a2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double l = log((double)s[i].a);
        a1 += l, a2 += l * l;
        c1[i] = a1, c2[i] = a2;
    }
    int64_t best = -1;
    double bd = 0;
    for (int64_t k = minn; k <= n - minn; k++) { /* parts s[0..k) and s[k..n) */
        if (!(s[k - 1].a < s[k].a))
            continue;
        double nl = (double)k, nh = (double)(n - k);
        double ml = c1[k - 1] / nl, mh = (c1[n - 1] - c1[k - 1]) / nh;
        double vl = c2[k - 1] / nl - ml * ml, vh = (c2[n - 1] - c2[k - 1]) / nh - mh * mh;
        double v = 0.5 * ((vl > 0 ? vl : 0) + (vh > 0 ? vh : 0));
        double d = (mh - ml) / sqrt(v > 1e-12 ? v : 1e-12);
        if (d > bd) {
            bd = d;
            best = k;
        }
    }
    *dprime = bd;
    if (best < 0 || bd < p->min_dprime)
        return 0;
    if (best == minn || best == n - minn) /* pinned to the smallest part allowed: a tail, not a mode */
        return 0;
    if ((double)s[(best - 1) / 2].a < p->min_low_amp) /* the low part's median (the lower middle one) */
        return 0;
    *thr = s[best].a;
    return time_ks(amp, t, n, *thr, best) <= p->max_time_ks;
}
