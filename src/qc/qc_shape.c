/*
 * qc_shape.c - waveform-shape ("template") metrics of one unit, as
 * SpikeInterface 0.105's template_metrics extension defines them (the
 * definitions Bombcell's classification rules were ported onto).
 *
 * MECHANISM
 *   1. Upsampling. The unit's mean waveform (µV) on its main channel, and on
 *      each of its sparse channels for the spatial decay, is upsampled by
 *      upsampling_factor (10) as scipy.signal.resample_poly(x, 10, 1) does:
 *      a 201-tap low-pass FIR (cutoff 1/10 of Nyquist, Kaiser window beta 5,
 *      unit DC gain, times 10) applied to the zero-stuffed signal, zero
 *      outside the window, output sample m = sum_k x[k] h[m - 10 k + 100].
 *      The taps are rounded to float32 as scipy does for a float32 template.
 *   2. Extrema (SpikeInterface's get_trough_and_peak_idx). Prominence floor
 *      = min_thresh (0.3) x max|template|; edge_exclusion_ms (0.09) is left
 *      out at both ends. The main trough is the most prominent local maximum
 *      of -template (scipy.signal.find_peaks semantics: plateaus give their
 *      middle sample, prominences from the lowest points before a higher
 *      sample or the window's edge, widths at half the prominence with
 *      linear interpolation); none at that floor: the most prominent at half
 *      the floor; none either: the window's minimum (no width). The peak
 *      before and the peak after are found the same way on +template, in
 *      the windows that end / start min(3, 0.2 x the trough's half-width)
 *      samples from the trough. The counts of peaks and troughs are those
 *      found at the full floor.
 *   3. Metrics (seconds are of the original sampling rate):
 *        peak_to_trough_duration       (peak after - trough) / fs_up
 *        trough_half_width, peak_half_width  between the threshold crossings
 *                                      at half the extremum's value (the
 *                                      larger of the two peaks)
 *        repolarization_slope          least-squares slope, µV/s, from the
 *                                      trough to the first sample >= 0
 *                                      (NaN if fewer than 3 samples)
 *        recovery_slope                slope over recovery_window_ms (0.7)
 *                                      after the peak after
 *        main_to_next_extremum_duration  from the largest |extremum| to the
 *                                      next one
 *        *_ratio                       |amplitude| ratios of peak before,
 *                                      peak after, the larger peak, trough
 *        trough_width, peak_*_width    find_peaks widths at half prominence
 *        waveform_baseline_flatness    max |baseline - its mean| / max
 *                                      |template - baseline mean|, baseline =
 *                                      the first baseline_window_ms (0.5)
 *        exp_decay                     spatial decay, 1/µm: the peak-to-peak
 *                                      amplitude a(d) of each sparse channel
 *                                      at distance d from the largest one
 *                                      fitted by A exp(-k d) + o with
 *                                      k in [1e-5, 2], A within 50 % of the
 *                                      largest amplitude, o in [0, 2 min a];
 *                                      NaN when R^2 < exp_min_r2 (0.2) or the
 *                                      bounds are empty. Only on probes of
 *                                      at least multi_channel_min (64)
 *                                      channels, as SpikeInterface does.
 *   The fit: for a fixed k the model is linear in (A, o), so the box-bounded
 *   least squares in (A, o) is solved exactly (the unconstrained optimum, or
 *   the best clamped optimum along the four edges of the box); the residual
 *   as a function of k is minimised on a log grid of 241 points from 1e-5
 *   to 2, then by golden-section search between the best point's
 *   neighbours. SpikeInterface runs scipy's trust-region least squares from
 *   k = 1e-3; both reach the same minimum when it is the only one.
 *
 * Where SpikeInterface indexes with -1 (a search window that was empty),
 * Python's "last sample" is reproduced, so the values agree there too.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/special.h"
#include "qc.h"
#include "qc_internal.h"

#define FIR_HALF_PER_UP 10 /* scipy: half_len = 10 x max(up, down) */

/* ---------------------------------------------------------- resample_poly */

int qc_upsample_taps(int up, float *h)
{
    int half = FIR_HALF_PER_UP * up, n = 2 * half + 1;
    double fc = 1.0 / up, s = 0.0, beta = 5.0, i0b = bs_bessel_i0(beta);
    double *hd = malloc(sizeof *hd * (size_t)n);
    if (!hd)
        return -1;
    for (int i = 0; i < n; i++) {
        double m = i - 0.5 * (n - 1), a = fc * m;
        double sinc = a == 0.0 ? 1.0 : sin(M_PI * a) / (M_PI * a);
        double r = 2.0 * i / (n - 1) - 1.0;
        double w = bs_bessel_i0(beta * sqrt(fmax(0.0, 1.0 - r * r))) / i0b;
        hd[i] = fc * sinc * w;
        s += hd[i];
    }
    for (int i = 0; i < n; i++)
        h[i] = (float)((float)(hd[i] / s) * (float)up);
    free(hd);
    return n;
}

void qc_upsample(const float *x, int n, int up, const float *h, double *y)
{
    int half = FIR_HALF_PER_UP * up;
    for (int m = 0; m < n * up; m++) {
        /* k with 0 <= m - up k + half <= 2 half */
        int k_lo = (m - half + up - 1) / up, k_hi = (m + half) / up;
        if (m - half < 0)
            k_lo = 0;
        if (k_hi > n - 1)
            k_hi = n - 1;
        double acc = 0.0;
        for (int k = k_lo; k <= k_hi; k++)
            acc += (double)x[k] * (double)h[m - up * k + half];
        y[m] = acc;
    }
}

/* ------------------------------------------------------------- find_peaks */

typedef struct {
    int n;          /* peaks */
    int *loc;       /* [n] sample of each peak (in the searched array) */
    double *prom;   /* [n] */
    double *width;  /* [n] samples, at half prominence */
} fp_result;

/* scipy.signal.find_peaks(x[0..n), prominence=pmin, width=0): local maxima
 * (plateau middles), their prominences, those >= pmin kept, with widths. */
static void find_peaks(const double *x, int n, double pmin, fp_result *r)
{
    r->n = 0;
    int i = 1, last = n - 1;
    while (i < last) {
        if (x[i - 1] < x[i]) {
            int ahead = i + 1;
            while (ahead < last && x[ahead] == x[i])
                ahead++;
            if (x[ahead] < x[i]) {
                int peak = (i + ahead - 1) / 2;
                /* prominence */
                double lmin = x[peak], rmin = x[peak];
                int lb = peak, rb = peak;
                for (int j = peak; j >= 0 && x[j] <= x[peak]; j--)
                    if (x[j] < lmin) {
                        lmin = x[j];
                        lb = j;
                    }
                for (int j = peak; j <= last && x[j] <= x[peak]; j++)
                    if (x[j] < rmin) {
                        rmin = x[j];
                        rb = j;
                    }
                double prom = x[peak] - (lmin > rmin ? lmin : rmin);
                if (prom >= pmin) {
                    double h = x[peak] - prom * 0.5;
                    int j = peak;
                    while (lb < j && h < x[j])
                        j--;
                    double lip = j;
                    if (x[j] < h)
                        lip += (h - x[j]) / (x[j + 1] - x[j]);
                    j = peak;
                    while (j < rb && h < x[j])
                        j++;
                    double rip = j;
                    if (x[j] < h)
                        rip -= (h - x[j]) / (x[j - 1] - x[j]);
                    r->loc[r->n] = peak;
                    r->prom[r->n] = prom;
                    r->width[r->n] = rip - lip;
                    r->n++;
                }
                i = ahead;
            }
        }
        i++;
    }
}

typedef struct {
    int n_main;   /* extrema at the full prominence floor */
    int index;    /* main extremum, -1 when the window is empty */
    double width; /* samples, NaN without one */
} extremum;

/* SpikeInterface's detect_peaks_on_templates on x[start..end). */
static extremum detect(const double *x, double prom, int start, int end, fp_result *r)
{
    extremum e = {0, -1, NAN};
    if (!(end > start && start > 0))
        return e;
    find_peaks(x + start, end - start, prom, r);
    e.n_main = r->n;
    if (r->n == 0)
        find_peaks(x + start, end - start, 0.5 * prom, r);
    if (r->n == 0) {
        int best = start;
        for (int i = start; i < end; i++)
            if (x[i] > x[best])
                best = i;
        e.index = best;
        return e;
    }
    int b = 0;
    for (int q = 1; q < r->n; q++)
        if (r->prom[q] > r->prom[b])
            b = q;
    e.index = start + r->loc[b];
    e.width = r->width[b];
    return e;
}

/* SpikeInterface's _compute_halfwidth(sign x, idx): the last crossing of
 * half the value before idx and the first at or after it. */
static double halfwidth(const double *x, int n, double sign, int idx, int *left, int *right)
{
    *left = *right = -1;
    if (idx < 0)
        idx += n;
    double thr = 0.5 * sign * x[idx];
    for (int i = 0; i + 1 < n; i++) {
        int crosses = (sign * x[i] >= thr) != (sign * x[i + 1] >= thr);
        if (!crosses)
            continue;
        if (i < idx)
            *left = i;
        else if (*right < 0)
            *right = i;
    }
    if (*left < 0 || *right < 0) {
        *left = *right = -1;
        return NAN;
    }
    return (double)(*right - *left);
}

static double at(const double *x, int n, int i) { return x[i < 0 ? i + n : i]; }

/* Least-squares slope of y against i / fs over i in [a, b). */
static double slope(const double *y, int a, int b, double fs)
{
    int n = b - a;
    if (n < 2)
        return NAN;
    double mx = 0, my = 0;
    for (int i = a; i < b; i++) {
        mx += i / fs;
        my += y[i];
    }
    mx /= n;
    my /= n;
    double sxy = 0, sxx = 0;
    for (int i = a; i < b; i++) {
        double dx = i / fs - mx;
        sxy += dx * (y[i] - my);
        sxx += dx * dx;
    }
    return sxx > 0 ? sxy / sxx : NAN;
}

static double ratio(double a, double b) { return isnan(a) || isnan(b) || b == 0 ? NAN : a / b; }

/* ------------------------------------------------------------- exp_decay */

/* min over A in [alo, ahi], o in [olo, ohi] of sum (A e_i + o - y_i)^2 */
static double box_ls(const double *e, const double *y, int n, double alo, double ahi, double olo, double ohi,
                     double *A, double *o)
{
    double see = 0, se = 0, sey = 0, sy = 0, syy = 0;
    for (int i = 0; i < n; i++) {
        see += e[i] * e[i];
        se += e[i];
        sey += e[i] * y[i];
        sy += y[i];
        syy += y[i] * y[i];
    }
#define COST(a, b) (a * a * see + 2 * a * b * se + n * b * b - 2 * a * sey - 2 * b * sy + syy)
    double det = see * n - se * se;
    if (det > 1e-300 * fabs(see * n)) {
        double a = (sey * n - se * sy) / det, b = (see * sy - se * sey) / det;
        if (a >= alo && a <= ahi && b >= olo && b <= ohi) {
            *A = a;
            *o = b;
            return fmax(0.0, COST(a, b));
        }
    }
    double best = INFINITY;
    double fa[2] = {alo, ahi}, fo[2] = {olo, ohi};
    for (int s = 0; s < 2; s++) {
        /* A fixed: o = (sy - A se) / n, clamped */
        double a = fa[s], b = fmin(ohi, fmax(olo, (sy - a * se) / n)), c = COST(a, b);
        if (c < best) {
            best = c;
            *A = a;
            *o = b;
        }
        /* o fixed: A = (sey - o se) / see, clamped */
        b = fo[s];
        a = see > 0 ? fmin(ahi, fmax(alo, (sey - b * se) / see)) : alo;
        c = COST(a, b);
        if (c < best) {
            best = c;
            *A = a;
            *o = b;
        }
    }
#undef COST
    return fmax(0.0, best);
}

static double decay_cost(double k, const double *d, const double *y, int n, double *e, const double bounds[4],
                         double *A, double *o)
{
    for (int i = 0; i < n; i++)
        e[i] = exp(-k * d[i]);
    return box_ls(e, y, n, bounds[0], bounds[1], bounds[2], bounds[3], A, o);
}

/* amp[n], dist[n] (µm) with dist of the largest amp = 0; work: n doubles. */
static double exp_decay(const double *dist, const double *amp, int n, double min_r2, double *work)
{
    int top = 0;
    double lo = INFINITY;
    for (int i = 0; i < n; i++) {
        if (amp[i] > amp[top])
            top = i;
        lo = fmin(lo, amp[i]);
    }
    double a0 = amp[top];
    double bounds[4] = {a0 - 0.5 * a0, a0 + 0.5 * a0, 0.0, 2 * lo};
    if (n < 3 || !(bounds[0] < bounds[1]) || !(bounds[2] < bounds[3]))
        return NAN; /* scipy refuses empty bounds; SpikeInterface catches it as NaN */
    const double kmin = 1e-5, kmax = 2.0;
    enum { GRID = 241 };
    double A, o, best_k = kmin, best_c = INFINITY;
    int best_i = 0;
    for (int g = 0; g < GRID; g++) {
        double k = kmin * pow(kmax / kmin, (double)g / (GRID - 1));
        double c = decay_cost(k, dist, amp, n, work, bounds, &A, &o);
        if (c < best_c) {
            best_c = c;
            best_k = k;
            best_i = g;
        }
    }
    double a = log(kmin) + log(kmax / kmin) * (best_i > 0 ? best_i - 1 : 0) / (GRID - 1);
    double b = log(kmin) + log(kmax / kmin) * (best_i < GRID - 1 ? best_i + 1 : GRID - 1) / (GRID - 1);
    const double gr = 0.5 * (sqrt(5.0) - 1.0);
    double x1 = b - gr * (b - a), x2 = a + gr * (b - a);
    double f1 = decay_cost(exp(x1), dist, amp, n, work, bounds, &A, &o);
    double f2 = decay_cost(exp(x2), dist, amp, n, work, bounds, &A, &o);
    for (int it = 0; it < 200 && b - a > 1e-12; it++) {
        if (f1 < f2) {
            b = x2;
            x2 = x1;
            f2 = f1;
            x1 = b - gr * (b - a);
            f1 = decay_cost(exp(x1), dist, amp, n, work, bounds, &A, &o);
        } else {
            a = x1;
            x1 = x2;
            f1 = f2;
            x2 = a + gr * (b - a);
            f2 = decay_cost(exp(x2), dist, amp, n, work, bounds, &A, &o);
        }
    }
    double k = exp(0.5 * (a + b));
    double c = decay_cost(k, dist, amp, n, work, bounds, &A, &o);
    if (best_c < c) {
        k = best_k;
        c = decay_cost(k, dist, amp, n, work, bounds, &A, &o);
    }
    double mean = 0, tot = 0;
    for (int i = 0; i < n; i++)
        mean += amp[i];
    mean /= n;
    for (int i = 0; i < n; i++)
        tot += (amp[i] - mean) * (amp[i] - mean);
    double r2 = tot > 0 ? 1.0 - c / tot : (c == 0 ? 1.0 : 0.0); /* sklearn r2_score, force_finite */
    return r2 < min_r2 ? NAN : k;
}

/* ------------------------------------------------------------ the metrics */

/* work: the taps first (padded to whole doubles, so they stay put whatever n_ch a call passes), then the
   doubles, then the peak locations */
static size_t taps_bytes(int up)
{
    size_t n = (size_t)(up > 1 ? 2 * FIR_HALF_PER_UP * up + 1 : 0);
    return (n * sizeof(float) + sizeof(double) - 1) / sizeof(double) * sizeof(double);
}

size_t bs_qc_shape_work_bytes(int nt, int n_ch, int up)
{
    size_t N = (size_t)nt * (size_t)(up > 1 ? up : 1);
    return taps_bytes(up) + sizeof(double) * (4 * N + 3 * (size_t)n_ch) + sizeof(int) * N;
}

int bs_qc_shape_work_init(void *work, int up)
{
    return up > 1 && qc_upsample_taps(up, work) < 0 ? -1 : 0;
}

void bs_qc_shape_metrics(const float *main_tmpl, int nt, const float *chan_tmpl, int n_ch, const double *x_um,
                         const double *y_um, int multi, double fs_hz, const bs_qc_params *p, double *out, void *work)
{
    int up = p->shape_upsampling > 1 ? p->shape_upsampling : 1, N = nt * up;
    double fs = fs_hz * up;
    const float *h = work;
    double *t = (double *)((char *)work + taps_bytes(up)), *neg = t + N, *prom_buf = neg + N, *width_buf = prom_buf + N;
    double *chan_amp = width_buf + N, *chan_d = chan_amp + n_ch, *scratch = chan_d + n_ch;
    int *loc_buf = (int *)(scratch + n_ch);
    if (up > 1) {
        qc_upsample(main_tmpl, nt, up, h, t);
    } else {
        for (int i = 0; i < N; i++)
            t[i] = main_tmpl[i];
    }
    double amax = 0.0;
    for (int i = 0; i < N; i++) {
        neg[i] = -t[i];
        amax = fmax(amax, fabs(t[i]));
    }
    fp_result r = {0, loc_buf, prom_buf, width_buf};
    double prom = p->shape_min_prominence * amax;
    int edge = p->shape_edge_exclusion_ms > 0 ? (int)(p->shape_edge_exclusion_ms / 1000 * fs) : 0;
    int left = edge, right = edge > 0 ? N - edge : N;

    extremum tr = detect(neg, prom, left, right, &r);
    int hl, hr;
    double trough_hw = halfwidth(t, N, -1.0, tr.index, &hl, &hr); /* samples; also spaces the peaks from it */
    int dist = p->shape_min_extremum_distance;
    if (hl >= 0 && hr >= 0) {
        int d = (int)(p->shape_min_peak_trough_ratio * (hr - hl));
        dist = d > dist ? d : dist;
    }
    extremum pb = detect(t, prom, left, tr.index - dist, &r);
    extremum pa = detect(t, prom, tr.index + dist, right, &r);

    double *m = out;
    m[BS_QC_NUM_POSITIVE_PEAKS] = pb.n_main + pa.n_main;
    m[BS_QC_NUM_NEGATIVE_PEAKS] = tr.n_main;
    m[BS_QC_PEAK_TO_TROUGH_DURATION] = (pa.index - tr.index) / fs;
    m[BS_QC_TROUGH_HALF_WIDTH] = trough_hw / fs;
    int peak = at(t, N, pa.index) >= at(t, N, pb.index) ? pa.index : pb.index;
    m[BS_QC_PEAK_HALF_WIDTH] = halfwidth(t, N, 1.0, peak, &hl, &hr) / fs;
    /* repolarisation: trough to the first sample >= 0 */
    m[BS_QC_REPOLARIZATION_SLOPE] = NAN;
    if (tr.index > 0) {
        int ret = -1;
        for (int i = tr.index; i < N && ret < 0; i++)
            if (t[i] >= 0)
                ret = i;
        if (ret >= 0 && ret - tr.index >= 3)
            m[BS_QC_REPOLARIZATION_SLOPE] = slope(t, tr.index, ret, fs);
    }
    m[BS_QC_RECOVERY_SLOPE] = NAN;
    if (pa.index > 0) {
        int end = (int)(pa.index + p->shape_recovery_window_ms / 1000 * fs);
        m[BS_QC_RECOVERY_SLOPE] = slope(t, pa.index, end < N ? end : N, fs);
    }
    /* main extremum to the next one (ties: trough, peak before, peak after) */
    double a_tr = fabs(at(t, N, tr.index)), a_pb = fabs(at(t, N, pb.index)), a_pa = fabs(at(t, N, pa.index));
    int span;
    if (a_tr >= a_pb && a_tr >= a_pa)
        span = abs(pa.index - tr.index);
    else if (a_pb >= a_pa)
        span = abs(tr.index - pb.index);
    else
        span = abs(pa.index - tr.index);
    m[BS_QC_MAIN_TO_NEXT_EXTREMUM_DURATION] = span / fs;
    m[BS_QC_PEAK_BEFORE_TO_TROUGH_RATIO] = ratio(a_pb, a_tr);
    m[BS_QC_PEAK_AFTER_TO_TROUGH_RATIO] = ratio(a_pa, a_tr);
    m[BS_QC_PEAK_BEFORE_TO_PEAK_AFTER_RATIO] = ratio(a_pb, a_pa);
    m[BS_QC_MAIN_PEAK_TO_TROUGH_RATIO] = ratio(fmax(a_pb, a_pa), a_tr);
    m[BS_QC_TROUGH_WIDTH] = tr.width / fs;
    m[BS_QC_PEAK_BEFORE_WIDTH] = pb.width / fs;
    m[BS_QC_PEAK_AFTER_WIDTH] = pa.width / fs;
    /* baseline flatness */
    int bend = (int)(p->shape_baseline_ms / 1000 * fs);
    bend = bend < N ? bend : N;
    m[BS_QC_WAVEFORM_BASELINE_FLATNESS] = NAN;
    if (bend > 0) {
        double mean = 0, dev = 0, all = 0;
        for (int i = 0; i < bend; i++)
            mean += t[i];
        mean /= bend;
        for (int i = 0; i < N; i++) {
            double q = fabs(t[i] - mean);
            all = fmax(all, q);
            if (i < bend)
                dev = fmax(dev, q);
        }
        if (all > 0)
            m[BS_QC_WAVEFORM_BASELINE_FLATNESS] = dev / all;
    }
    /* spatial decay over the sparse channels */
    m[BS_QC_EXP_DECAY] = NAN;
    if (multi && n_ch > 0) {
        int top = 0;
        for (int j = 0; j < n_ch; j++) {
            const float *x = chan_tmpl + (size_t)j * nt;
            if (up > 1)
                qc_upsample(x, nt, up, h, neg);
            else
                for (int i = 0; i < N; i++)
                    neg[i] = x[i];
            double lo = neg[0], hi = neg[0];
            for (int i = 1; i < N; i++) {
                lo = fmin(lo, neg[i]);
                hi = fmax(hi, neg[i]);
            }
            chan_amp[j] = hi - lo;
            if (chan_amp[j] > chan_amp[top])
                top = j;
        }
        for (int j = 0; j < n_ch; j++) {
            double dx = x_um[j] - x_um[top], dy = y_um[j] - y_um[top];
            chan_d[j] = sqrt(dx * dx + dy * dy);
        }
        m[BS_QC_EXP_DECAY] = exp_decay(chan_d, chan_amp, n_ch, p->shape_exp_min_r2, scratch);
    }
}
