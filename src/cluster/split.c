/*
 * split.c - a template's matched spikes split in two by amplitude or by
 * their features (docs/ALGORITHM.md §9.8; declared in cluster.h,
 * "amplitude splits").
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
 *     is noise, not a cell). A cut failing only this rule is a noise cut
 *     (bs_amp_split returns 2 when noise_cut is set): the finish stage makes
 *     it and removes the low part. Its time rule is not the one below but
 *     that the low part fire where the high part does, bs_time_overlap at
 *     least noise_min_overlap: crossings of the background come all along,
 *     also in the periods where drift brings the unit to this template,
 *     while a unit that drift takes down to the threshold has its low
 *     spikes in other periods than its high ones;
 *   - the two parts fire over the same period: the largest difference of the
 *     distribution functions of their spike times (the Kolmogorov–Smirnov
 *     distance) is at most max_time_ks. Drift makes one cell's amplitude
 *     change with time; its two "modes" then lie in different periods. With
 *     high_own (the caller gives a smaller high part a waveform of its own)
 *     this rule is waived for a cut whose high part is the smaller: a few
 *     spikes of a large cell on the template of another that drift brings
 *     and takes away fire all the time while the other's do not, and if the
 *     part is the same cell in another drift state the merges join it back
 *     (similar waveforms firing in different periods, docs/ALGORITHM.md §9.3).
 * A split of one cell's spikes (the high tail of spikes that overlap
 * another's) is undone by the CCG-guided merge that follows (§9.3): the two
 * parts have the same waveform and a refractory cross-correlogram.
 *
 * Feature splits (bs_feature_split) run the same cut search on another
 * value per spike: the projection of its pc features (residual plus its own
 * fitted template) on their first principal axis, the top eigenvector of the
 * features' covariance (cyclic Jacobi, sign fixed by its largest entry). Two
 * units' spikes on one template differ in shape, which that axis picks up
 * when their amplitudes alone do not separate them. No low-part bound
 * applies to the projection (its caller bounds the part's mean spike); the
 * axis is turned so that the smaller part lies under the cut.
 *
 * An amplitude cut whose high part is the smaller sends that part to the new
 * template (a rule of kind 2) instead of the low part: its waveform is then
 * its own mean features, not the template's.
 *
 * The finish stage may cut a train, then each of its parts again. It keeps
 * the cuts as rules (bs_split_rules): each makes one template and chains on
 * the template it cut, in order, so that walking a spike through its
 * matching template's chain (and then the chain of the template it fell
 * into) repeats exactly the cuts its train went through.
 *
 * The result depends only on the values and times given, in any order of
 * equal values (ties are ordered by index), so it is the same for every
 * thread count and memory budget.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/eigen.h"
#include "cluster.h"

void bs_split_default_params(bs_split_params *p)
{
    p->min_dprime = 4.0;
    p->min_spikes = 20;
    p->min_fraction = 0.05;
    p->low_amp_of_threshold = 1.375;
    p->min_low_amp = 0;
    p->max_time_ks = 0.3;
    p->noise_min_overlap = 0.5;
    p->burst_min_ms = 2.0;
    p->burst_max_ms = 15.0;
    p->burst_min_ratio = 4.0;
    p->feature_min_dprime = 5.0;
    p->noise_cut = 1;
    p->high_own = 0;
    p->pile_ratio = 1.5;
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

/* The best cut of the n values x (times t ascending) into a part under *thr
 * and one at or over it, scored on log(x) (log_scale) or on x, under the
 * rules of the file comment with the bound min_dprime; min_low bounds the low
 * part's median value. */
static int cut_split(const bs_split_params *p, double min_dprime, const float *x, const int64_t *t, int64_t n,
                     int log_scale, double min_low, void *work, float *thr, double *dprime)
{
    *dprime = 0;
    int64_t minn = (int64_t)ceil(p->min_fraction * (double)n);
    if (minn < p->min_spikes)
        minn = p->min_spikes;
    if (minn < 2 || n < 2 * minn || !(min_dprime > 0))
        return 0;
    amp_idx *s = work;
    double *c1 = (double *)(s + n), *c2 = c1 + n; /* prefix sums of the (log) value and its square */
    for (int64_t i = 0; i < n; i++) {
        if (log_scale ? !(x[i] > 0) : !isfinite(x[i]))
            return 0;
        s[i] = (amp_idx){x[i], i};
    }
    qsort(s, (size_t)n, sizeof *s, amp_idx_cmp);
    double a1 = 0, a2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double l = log_scale ? log((double)s[i].a) : (double)s[i].a;
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
    if (best < 0 || bd < min_dprime)
        return 0;
    if (best == minn || best == n - minn) /* pinned to the smallest part allowed: a tail, not a mode */
        return 0;
    int noise = (double)s[(best - 1) / 2].a < min_low; /* the low part's median (the lower middle one) */
    if (noise && !p->noise_cut)
        return 0;
    *thr = s[best].a;
    if (!noise && p->high_own && log_scale && n - best < best) /* a smaller high part, own waveform: no time test */
        return 1;
    if (noise) { /* the crossings come wherever the unit does: the parts' times overlap (the prefix sums' room) */
        int64_t *tl = (int64_t *)c1, *th = tl + best, nl = 0, nh = 0;
        for (int64_t i = 0; i < n; i++)
            if (x[i] < *thr)
                tl[nl++] = t[i];
            else
                th[nh++] = t[i];
        return bs_time_overlap(tl, nl, th, nh) >= p->noise_min_overlap ? 2 : 0;
    }
    return time_ks(x, t, n, *thr, best) <= p->max_time_ks;
}

int bs_amp_split(const bs_split_params *p, const float *amp, const int64_t *t, int64_t n, void *work, float *thr,
                 double *dprime)
{
    return cut_split(p, p->min_dprime, amp, t, n, 1, p->min_low_amp, work, thr, dprime);
}

/* |a - b| at least three standard deviations of two counts: (a - b)^2 >= 9 (a + b). */
static int counts_differ(int64_t a, int64_t b) { return (double)(a - b) * (double)(a - b) >= 9.0 * (double)(a + b); }

void bs_pile_count(const float *amp, int64_t n, float th, int64_t *c)
{
    for (int64_t i = 0; th > 0 && i < n; i++) {
        double b = ((double)amp[i] / (double)th - 1.0) * 16.0;
        if (b >= 0 && b < BS_PILE_BINS)
            c[(int)b]++;
    }
}

int bs_threshold_pile(const bs_split_params *p, const int64_t *c, float th, float *cut)
{
    if (!(p->pile_ratio > 0) || !(th > 0))
        return 0;
    int mode = 1, valley = -1;
    for (int j = 2; j < BS_PILE_BINS; j++)
        if (c[j] > c[mode])
            mode = j;
    for (int j = 1; j < mode; j++)
        if (valley < 0 || c[j] < c[valley])
            valley = j;
    if (valley < 0 || c[0] < p->min_spikes)
        return 0;
    double r = p->pile_ratio, v = (double)c[valley];
    if ((double)c[0] < r * v || (double)c[mode] < r * v || !counts_differ(c[0], c[valley]) ||
        !counts_differ(c[mode], c[valley]))
        return 0;
    *cut = (float)((double)th * (1.0 + valley / 16.0));
    return 1;
}

float bs_feature_projection(const float *f, const float *v, int D)
{
    double s = 0;
    for (int d = 0; d < D; d++)
        s += (double)f[d] * (double)v[d];
    return (float)s;
}

size_t bs_feature_split_bytes(int64_t n, int D)
{
    return (size_t)n * (bs_split_bytes_per_spike() + sizeof(float)) + (size_t)D * (size_t)D * 2 * sizeof(double) +
           (size_t)D * 2 * sizeof(double);
}

bs_status bs_feature_split(const bs_split_params *p, const float *f, int D, const int64_t *t, int64_t n, void *work,
                           float *v, float *thr, int64_t *n_low, double *dprime, int *split)
{
    *split = 0;
    *dprime = 0;
    *n_low = 0;
    if (!(p->feature_min_dprime > 0) || n < 2 || D < 1)
        return BS_OK;
    void *cw = work; /* the cut's work, then the moments, then the projections */
    double *mu = (double *)((char *)cw + (size_t)n * bs_split_bytes_per_spike());
    double *cov = mu + D, *evals = cov + (size_t)D * D, *evecs = evals + D;
    float *x = (float *)(evecs + (size_t)D * D);
    for (int d = 0; d < D; d++)
        mu[d] = 0;
    for (int64_t i = 0; i < n; i++)
        for (int d = 0; d < D; d++)
            mu[d] += f[(size_t)i * D + d];
    for (int d = 0; d < D; d++)
        mu[d] /= (double)n;
    for (size_t e = 0; e < (size_t)D * D; e++)
        cov[e] = 0;
    for (int64_t i = 0; i < n; i++) { /* upper triangle, then mirrored */
        const float *fi = f + (size_t)i * D;
        for (int a = 0; a < D; a++) {
            double da = fi[a] - mu[a];
            for (int b = a; b < D; b++)
                cov[(size_t)a * D + b] += da * (fi[b] - mu[b]);
        }
    }
    for (int a = 0; a < D; a++)
        for (int b = a + 1; b < D; b++)
            cov[(size_t)b * D + a] = cov[(size_t)a * D + b];
    BS_TRY(bs_eigh_jacobi(cov, D, evals, evecs));
    for (int d = 0; d < D; d++) /* the first principal axis, largest entry positive */
        v[d] = (float)evecs[d];
    for (int64_t i = 0; i < n; i++)
        x[i] = bs_feature_projection(f + (size_t)i * D, v, D);
    float th;
    if (!cut_split(p, p->feature_min_dprime, x, t, n, 0, -INFINITY, cw, &th, dprime))
        return BS_OK;
    int64_t nl = 0;
    for (int64_t i = 0; i < n; i++)
        nl += x[i] < th;
    if (nl > n - nl) { /* the smaller part goes under the cut: the axis turned round */
        for (int d = 0; d < D; d++)
            v[d] = -v[d];
        th = nextafterf(-th, INFINITY); /* x >= th  <=>  -x <= -th  <=>  -x < next float above -th */
        nl = n - nl;
    }
    *thr = th;
    *n_low = nl;
    *split = 1;
    return BS_OK;
}

/* ------------------------------------------------------------ split rules */

void bs_split_rules_clear(bs_split_rules *R)
{
    for (int k = 0; k < 2 * R->K; k++)
        R->first[k] = -1;
    R->n = 0;
}

int32_t bs_split_rules_add(bs_split_rules *R, int32_t k, int kind, float thr, const float *v, int D)
{
    int32_t r = R->n++;
    R->thr[r] = thr;
    R->kind[r] = (uint8_t)kind;
    R->next[r] = -1;
    if (R->noise)
        R->noise[r] = 0;
    if (R->last_hi)
        R->last_hi[r] = INT64_MIN;
    if (kind == 1)
        memcpy(R->fv + (size_t)r * D, v, (size_t)D * sizeof *v);
    int32_t *link = &R->first[k];
    while (*link >= 0)
        link = &R->next[*link];
    *link = r;
    return R->K + r;
}

int bs_noise_cut_stays(int64_t *last_hi, int64_t t, int high, int64_t lo, int64_t hi)
{
    if (high) {
        *last_hi = t;
        return 1;
    }
    return hi > 0 && *last_hi != INT64_MIN && t - *last_hi >= lo && t - *last_hi <= hi;
}

int bs_noise_cut_bursts(const int64_t *t, const float *a, int64_t n, float thr, int64_t lo, int64_t hi,
                        int64_t n_samples, double min_ratio)
{
    if (hi <= 0 || hi < lo || n_samples <= 0)
        return 0;
    int64_t last = INT64_MIN, n_low = 0, n_in = 0, covered = 0, end = INT64_MIN; /* end: the windows' union so far */
    for (int64_t i = 0; i < n; i++) {
        int high = a[i] >= thr;
        int stays = bs_noise_cut_stays(&last, t[i], high, lo, hi); /* called for every spike: the state */
        n_in += !high && stays;
        n_low += !high;
        if (high) {
            int64_t w0 = t[i] + lo > end ? t[i] + lo : end, w1 = t[i] + hi + 1;
            covered += w1 > w0 ? w1 - w0 : 0;
            end = w1 > end ? w1 : end;
        }
    }
    double expected = (double)n_low * (double)(covered < n_samples ? covered : n_samples) / (double)n_samples;
    return n_in >= 3 && (double)n_in >= min_ratio * expected;
}

int bs_split_rule_takes(const bs_split_rules *R, int32_t r, float x, int64_t t, int64_t *last)
{
    int under = R->kind[r] == 2 ? x >= R->thr[r] : x < R->thr[r];
    if (R->noise && R->noise[r] && last)
        under = !bs_noise_cut_stays(last, t, !under, R->burst_lo, R->burst_hi);
    return under;
}

int32_t bs_split_rules_walk(const bs_split_rules *R, int32_t k, int64_t t, float amp, const float *f, int D)
{
    for (int32_t r = R->first[k]; r >= 0;) {
        float x = R->kind[r] == 1 ? bs_feature_projection(f, R->fv + (size_t)r * D, D) : amp;
        if (bs_split_rule_takes(R, r, x, t, R->last_hi ? &R->last_hi[r] : NULL))
            k = R->K + r, r = R->first[k];
        else
            r = R->next[r];
    }
    return k;
}
