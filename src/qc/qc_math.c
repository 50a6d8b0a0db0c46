/*
 * qc_math.c - numerical helpers of the quality metrics: the regularized
 * incomplete gamma function (Poisson CDF for the sliding refractory period,
 * chi-square survival for the L-ratio), order statistics, and the exact
 * numpy / scipy operations amplitude_cutoff is built from (qc_internal.h).
 *
 * Incomplete gamma: Q(a, x) = Gamma(a, x) / Gamma(a). For x < a + 1 the
 * power series of P = 1 - Q converges fast (terms x^n / (a+1)...(a+n));
 * otherwise the continued fraction of Q (modified Lentz). The prefactor
 * x^a e^-x / Gamma(a) is computed in logs (lgamma). Relative accuracy is a
 * few 1e-15 for moderate a, 1e-12 for a ~ 1e4; the metrics compare it with
 * 0.9 and sum it, so that is far more than enough.
 *
 * numpy.histogram on float32 input (np_histogram_f32): numpy computes the
 * bin edges with linspace in float64 then stores them as float32, and maps
 * each value in float32 arithmetic, ((a - lo) / (hi - lo)) * bins, then
 * corrects the index against the stored edges. Reproducing that order makes
 * our counts equal numpy's also for values on an edge.
 *
 * scipy.ndimage.gaussian_filter1d (gaussian_smooth_counts): weights
 * exp(-x^2 / (2 sigma^2)) for x in [-r, r], r = int(4 sigma + 0.5),
 * normalised by their numpy (pairwise) sum; the symmetric-kernel loop of
 * ndimage (centre term, then pairs from the farthest in); mode "nearest"
 * repeats the edge bins. On an integer histogram scipy writes the result
 * into an integer array, i.e. truncates toward zero; SpikeInterface's
 * amplitude_cutoff works on those integers, and so do we.
 */
#include <math.h>
#include <string.h>

#include "qc.h"
#include "qc_internal.h"
#include "../common/select.h"

static double gamma_prefactor(double a, double x)
{
    return exp(a * log(x) - x - lgamma(a));
}

/* P(a, x) by the series; valid for x < a + 1. */
static double gamma_p_series(double a, double x)
{
    double term = 1.0 / a, sum = term, ap = a;
    for (int i = 0; i < 100000; i++) {
        ap += 1.0;
        term *= x / ap;
        sum += term;
        if (fabs(term) < fabs(sum) * 1e-17)
            break;
    }
    return sum * gamma_prefactor(a, x);
}

/* Q(a, x) by the continued fraction (modified Lentz); valid for x >= a + 1. */
static double gamma_q_cf(double a, double x)
{
    const double tiny = 1e-300;
    double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
    for (int i = 1; i < 100000; i++) {
        double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (fabs(d) < tiny)
            d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny)
            c = tiny;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1.0) < 1e-17)
            break;
    }
    return h * gamma_prefactor(a, x);
}

double bs_qc_gammaincc(double a, double x)
{
    if (!(a > 0) || !(x >= 0))
        return NAN;
    if (x == 0)
        return 1.0;
    if (isinf(x))
        return 0.0;
    if (x < a + 1.0)
        return 1.0 - gamma_p_series(a, x);
    return gamma_q_cf(a, x);
}

double bs_qc_poisson_cdf(double k, double mu)
{
    if (isnan(k) || isnan(mu) || mu < 0)
        return NAN;
    k = floor(k);
    if (k < 0)
        return 0.0;
    if (mu == 0)
        return 1.0;
    return bs_qc_gammaincc(k + 1.0, mu);
}

double bs_qc_chi2_sf(double x, double dof)
{
    if (isnan(x) || !(dof > 0))
        return NAN;
    if (x <= 0)
        return 1.0;
    return bs_qc_gammaincc(0.5 * dof, 0.5 * x);
}

/* ------------------------------------------------------------- order stats */

double qc_median_inplace_f(float *a, int64_t n)
{
    if (n <= 0)
        return NAN;
    int64_t h = n / 2;
    double hi = bs_select_f(a, n, h);
    if (n % 2)
        return hi;
    /* the lower middle is the largest of a[0..h) */
    float lo = a[0];
    for (int64_t i = 1; i < h; i++)
        if (a[i] > lo)
            lo = a[i];
    return 0.5 * ((double)lo + hi);
}

double bs_qc_median_f(const float *x, int64_t n, float *work)
{
    if (n <= 0)
        return NAN;
    memcpy(work, x, (size_t)n * sizeof *work);
    return qc_median_inplace_f(work, n);
}

double bs_qc_noise_sigma_f(const float *x, int64_t n, float *work)
{
    double med = bs_qc_median_f(x, n, work);
    for (int64_t i = 0; i < n; i++)
        work[i] = (float)fabs((double)x[i] - med);
    return qc_median_inplace_f(work, n) / 0.6744897501960817;
}

double qc_median_d(double *a, int64_t n)
{
    /* small arrays (per-bin medians of drift): insertion sort */
    if (n <= 0)
        return NAN;
    for (int64_t i = 1; i < n; i++) {
        double v = a[i];
        int64_t j = i - 1;
        while (j >= 0 && a[j] > v) {
            a[j + 1] = a[j];
            j--;
        }
        a[j + 1] = v;
    }
    return n % 2 ? a[n / 2] : 0.5 * (a[n / 2 - 1] + a[n / 2]);
}

/* ------------------------------------------------------- numpy / scipy ops */

void np_histogram_f32(const float *a, int64_t n, int negate, int bins, int64_t *counts, float *edges)
{
    memset(counts, 0, (size_t)bins * sizeof *counts);
    if (n <= 0 || bins <= 0)
        return;
    float mn = negate ? -a[0] : a[0], mx = mn;
    for (int64_t i = 1; i < n; i++) {
        float v = negate ? -a[i] : a[i];
        if (v < mn)
            mn = v;
        if (v > mx)
            mx = v;
    }
    double first = mn, last = mx;
    if (first == last) {
        first -= 0.5;
        last += 0.5;
    }
    double step = (last - first) / bins;
    for (int k = 0; k < bins; k++)
        edges[k] = (float)((double)k * step + first);
    edges[bins] = (float)last;
    float denom = (float)(last - first), firstf = (float)first, nb = (float)bins;
    for (int64_t i = 0; i < n; i++) {
        float v = negate ? -a[i] : a[i];
        float diff = v - firstf;
        float q = diff / denom;
        float f = q * nb;
        int64_t idx = (int64_t)f;
        if (idx == bins)
            idx--;
        if (v < edges[idx])
            idx--;
        if (idx != bins - 1 && v >= edges[idx + 1])
            idx++;
        if (idx >= 0 && idx < bins)
            counts[idx]++;
    }
}

/* numpy's pairwise sum for 8 <= n <= 128 (eight partial sums). */
static double np_pairwise_sum(const double *a, int n)
{
    if (n < 8) {
        double s = 0.0;
        for (int i = 0; i < n; i++)
            s += a[i];
        return s;
    }
    double r[8];
    for (int j = 0; j < 8; j++)
        r[j] = a[j];
    int i;
    for (i = 8; i < n - (n % 8); i += 8)
        for (int j = 0; j < 8; j++)
            r[j] += a[i + j];
    double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++)
        s += a[i];
    return s;
}

int gaussian_smooth_counts(const int64_t *h, int n, double sigma, int64_t *out)
{
    int r = (int)(4.0 * sigma + 0.5);
    if (r > 60 || !(sigma > 0))
        return -1;
    double w[121];
    int nw = 2 * r + 1;
    double c = -0.5 / (sigma * sigma);
    for (int i = 0; i < nw; i++) {
        double x = (double)(i - r);
        w[i] = exp(c * (x * x));
    }
    double s = np_pairwise_sum(w, nw);
    for (int i = 0; i < nw; i++)
        w[i] /= s;
    for (int i = 0; i < n; i++) {
        double acc = (double)h[i] * w[r];
        for (int j = -r; j < 0; j++) {
            int lo = i + j, hi = i - j;
            if (lo < 0)
                lo = 0;
            if (hi > n - 1)
                hi = n - 1;
            acc += ((double)h[lo] + (double)h[hi]) * w[r + j];
        }
        out[i] = (int64_t)acc;
    }
    return 0;
}
