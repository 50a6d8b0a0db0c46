/*
 * qc_train.c - the per-unit metrics computed from one unit's spike train,
 * amplitudes and depths (declared in qc.h), plus the defaults, the metric
 * names and the Allen label rule.
 *
 * Each function follows SpikeInterface 0.105 (metrics/quality/misc_metrics.py)
 * operation for operation where the order decides a boundary case: spike
 * times are divided by fs before the ISI differences are compared with the
 * threshold in seconds, sample counts are rounded half to even (Python's
 * round), bins are numpy.histogram's (last edge inclusive) or searchsorted's
 * (left-closed) as the original uses them.
 *
 * Sliding refractory period (IBL, Llobet et al. 2022), as SpikeInterface:
 * the autocorrelogram has bins of b = round(fs * bin_ms / 1000) samples over
 * +-W, W = round(fs * window_s) rounded down to a multiple of b; only its
 * positive half up to max_rp_ms is used: bin k counts the ordered pairs of
 * distinct spikes with lag in [k b, (k+1) b) samples (a zero lag counts twice,
 * once per order). For each refractory period rp_k = (k+1) b / fs (the bin's
 * upper edge, k < int(max_rp / (b / fs))) and contamination c in {0.5 %,
 * 1 %, ..., 35 %}: expected violations Ve = 2 rp / D * Nc (Nb + (Nc - 1) / 2)
 * with Nc = c N, Nb = (1 - c) N, D = N / (N / T); confidence = 1 -
 * PoissonCDF(cumulative count up to bin k; Ve). The result is the smallest c
 * with confidence > 0.9 at some k whose bin centre exceeds
 * exclude_below_ms, else NaN.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../mem/mem.h"
#include "qc.h"
#include "qc_internal.h"

const char *const bs_qc_metric_names[BS_QC_N_METRICS] = {
    "num_spikes",         "firing_rate",        "presence_ratio", "isi_violations_ratio", "isi_violations_count",
    "rp_contamination",   "rp_violations",      "sliding_rp_violation", "amplitude_cutoff", "amplitude_median",
    "snr",                "isolation_distance", "l_ratio",        "d_prime",              "nn_hit_rate",
    "nn_miss_rate",       "silhouette",         "drift_ptp",      "drift_std",            "drift_mad",
    "max_drift",          "cumulative_drift",
    "num_positive_peaks", "num_negative_peaks", "peak_to_trough_duration", "trough_half_width", "peak_half_width",
    "repolarization_slope", "recovery_slope", "main_to_next_extremum_duration", "peak_before_to_trough_ratio",
    "peak_after_to_trough_ratio", "peak_before_to_peak_after_ratio", "main_peak_to_trough_ratio", "trough_width",
    "peak_before_width", "peak_after_width", "waveform_baseline_flatness", "exp_decay"};

int bs_qc_metric_is_count(int m)
{
    return m == BS_QC_NUM_SPIKES || m == BS_QC_ISI_COUNT || m == BS_QC_RP_VIOLATIONS || m == BS_QC_NUM_POSITIVE_PEAKS ||
           m == BS_QC_NUM_NEGATIVE_PEAKS;
}

void bs_qc_default_params(bs_qc_params *p)
{
    memset(p, 0, sizeof *p);
    p->max_spikes_per_unit = 500;
    p->seed = 0;
    p->ms_before = 1.0;
    p->ms_after = 2.0;
    p->peak_sign = BS_QC_PEAK_BOTH;
    p->sparsity_radius_um = 100.0;
    p->n_components = 5;
    p->highpass_hz = 300.0;
    p->highpass_order = 3;
    p->batch_s = 2.0;
    p->n_noise_chunks = 20;
    p->noise_chunk_s = 0.5;
    p->presence_bin_s = 60.0;
    p->presence_fr_ratio = 0.0;
    p->isi_threshold_ms = 1.5;
    p->isi_min_ms = 0.0;
    p->rp_ms = 1.0;
    p->rp_censored_ms = 0.0;
    p->srp_bin_ms = 0.25;
    p->srp_window_s = 1.0;
    p->srp_exclude_below_ms = 0.5;
    p->srp_max_rp_ms = 10.0;
    p->srp_min_spikes = 0;
    p->cutoff_bins = 100;
    p->cutoff_smoothing = 3.0;
    p->cutoff_min_ratio = 5.0;
    p->drift_interval_s = 60.0;
    p->drift_min_spikes = 100;
    p->drift_max_nan_fraction = 0.5;
    p->drift_min_bins = 2;
    p->allen_drift_interval_s = 100.0;
    p->allen_drift_min_spikes = 10;
    p->nn_max_spikes = 10000;
    p->nn_neighbors = 5;
    p->label_isi_max = 0.5;
    p->label_presence_min = 0.8;
    p->label_cutoff_max = 0.1;
    p->shape_upsampling = 10;
    p->shape_min_prominence = 0.3;
    p->shape_edge_exclusion_ms = 0.09;
    p->shape_min_peak_trough_ratio = 0.2;
    p->shape_min_extremum_distance = 3;
    p->shape_recovery_window_ms = 0.7;
    p->shape_baseline_ms = 0.5;
    p->shape_exp_min_r2 = 0.2;
    p->shape_multi_min_channels = 64;
    p->merge_min_spikes = 100;
    p->merge_max_distance_um = 100.0;
    p->merge_min_similarity = 0.75;
    p->merge_max_contamination = 0.2;
    p->merge_min_amp_ratio = 0.5;
    p->merge_window_ms = 50.0;
    p->merge_rp_ms = 1.0;
    p->merge_censored_ms = 0.3;
    p->merge_max_chance = 0.2;
    p->merge_max_refractory_ratio = 0.2;
    p->merge_min_similarity_alone = 0.8;
    p->merge_max_overlap = 0.3;
    p->merge_presence_bins = 100;
}

bs_qc_label bs_qc_label_of(const double *m, const bs_qc_params *p)
{
    double isi = m[BS_QC_ISI_RATIO], pr = m[BS_QC_PRESENCE_RATIO], cut = m[BS_QC_AMPLITUDE_CUTOFF];
    if ((!isnan(isi) && !(isi < p->label_isi_max)) || (!isnan(pr) && !(pr > p->label_presence_min)) ||
        (!isnan(cut) && !(cut < p->label_cutoff_max)))
        return BS_QC_LABEL_FAIL;
    return isnan(isi) || isnan(pr) || isnan(cut) ? BS_QC_LABEL_UNKNOWN : BS_QC_LABEL_GOOD;
}

const char *const bs_qc_label_names[BS_QC_N_LABELS] = {"good", "fail", "unknown"};

double bs_qc_presence_ratio(const int64_t *t, int64_t n, int64_t total_samples, double fs_hz, double bin_s,
                            double fr_ratio)
{
    int64_t B = (int64_t)(bin_s * fs_hz); /* truncated, as SpikeInterface's int(bin_duration_s * fs) */
    if (B <= 0 || total_samples < B || n <= 0)
        return NAN;
    int64_t nb = total_samples / B, end = nb * B;
    double fr = (double)n / ((double)total_samples / fs_hz);
    double thr = floor(fr * bin_s * fr_ratio);
    int64_t active = 0, i = 0;
    for (int64_t k = 0; k < nb; k++) {
        int64_t hi = (k + 1) * B, cnt = 0;
        while (i < n && t[i] < k * B)
            i++;
        while (i < n && (t[i] < hi || (k == nb - 1 && t[i] == end))) {
            cnt++;
            i++;
        }
        if ((double)cnt > thr)
            active++;
    }
    return (double)active / (double)nb;
}

void bs_qc_isi_violations(const int64_t *t, int64_t n, int64_t total_samples, double fs_hz, double threshold_ms,
                          double min_isi_ms, double *ratio, int64_t *count)
{
    if (n <= 0) {
        *ratio = NAN;
        *count = -1;
        return;
    }
    double thr = threshold_ms / 1000, min_isi = min_isi_ms / 1000;
    int64_t v = 0;
    for (int64_t i = 1; i < n; i++)
        if ((double)t[i] / fs_hz - (double)t[i - 1] / fs_hz < thr)
            v++;
    double violation_time = 2.0 * (double)n * (thr - min_isi);
    double total_rate = (double)n / ((double)total_samples / fs_hz);
    *ratio = ((double)v / violation_time) / total_rate;
    *count = v;
}

void bs_qc_rp_violations(const int64_t *t, int64_t n, int64_t total_samples, double fs_hz, double rp_ms,
                         double censored_ms, double *contamination, int64_t *violations)
{
    if (n <= 0) {
        *contamination = NAN;
        *violations = -1;
        return;
    }
    /* round half to even (numpy's round), not bs_seconds_to_samples: SpikeInterface's rule */
    int64_t t_c = (int64_t)nearbyint(censored_ms * fs_hz * 1e-3);
    int64_t t_r = (int64_t)nearbyint(rp_ms * fs_hz * 1e-3);
    int64_t v = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i + 1; j < n && t[j] - t[i] <= t_r; j++)
            v++;
    *violations = v;
    if (n <= 1 || t_r == t_c) {
        *contamination = NAN;
        return;
    }
    double D = 1.0 - ((double)v * (double)(total_samples - 2 * n * t_c)) / ((double)n * (double)n * (double)(t_r - t_c));
    *contamination = D < 0 ? 1.0 : 1.0 - sqrt(D);
}

double bs_qc_sliding_rp(const int64_t *t, int64_t n, int64_t total_samples, double fs_hz, const bs_qc_params *p)
{
    if (n <= p->srp_min_spikes || n <= 0)
        return NAN;
    double window_ms = 2.0 * p->srp_window_s * 1000.0;
    /* round half to even (numpy's round), not bs_seconds_to_samples: SpikeInterface's rule */
    int64_t W = (int64_t)nearbyint(fs_hz * window_ms / 2 * 1e-3);
    int64_t b = (int64_t)nearbyint(fs_hz * p->srp_bin_ms * 1e-3);
    if (b <= 0)
        return NAN;
    W -= W % b;
    int64_t num_half = W / b;
    if (num_half < 1)
        return NAN;
    double edge1 = ((double)b * 1e3 / fs_hz) / 1000.0; /* upper edge of the first positive bin, s */
    int64_t n_rp = (int64_t)(p->srp_max_rp_ms / 1000 / edge1);
    if (n_rp > num_half)
        n_rp = num_half;
    if (n_rp < 1)
        return NAN;
    int64_t span = n_rp * b;
    int64_t *acg = calloc((size_t)n_rp, sizeof *acg);
    if (!acg)
        return NAN;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i - 1; j >= 0 && t[i] - t[j] < span; j--) {
            int64_t d = t[i] - t[j];
            acg[d / b] += d == 0 ? 2 : 1;
        }
    double T = (double)total_samples / fs_hz;
    double fr = (double)n / T, duration = (double)n / fr;
    double thr_s = p->srp_exclude_below_ms / 1000.0;
    double result = NAN;
    for (int ci = 0; ci < 70 && isnan(result); ci++) {
        double c = (0.5 + ci * 0.5) / 100;
        double nc = (double)n * c, nb = (double)n * (1 - c);
        int64_t cum = 0;
        for (int64_t k = 0; k < n_rp; k++) {
            cum += acg[k];
            double lo = ((double)(k * b) * 1e3 / fs_hz) / 1000.0, hi = ((double)((k + 1) * b) * 1e3 / fs_hz) / 1000.0;
            if (!((lo + hi) / 2 > thr_s))
                continue;
            double ve = 2 * hi / duration * nc * (nb + (nc - 1) / 2);
            double conf = 1.0 - bs_qc_poisson_cdf((double)cum, ve);
            if (conf > 0.9) {
                result = c;
                break;
            }
        }
    }
    free(acg);
    return result;
}

double bs_qc_amplitude_cutoff(const float *amps, int64_t n, int bins, double sigma, double min_ratio, float *work)
{
    if (n <= 0 || bins <= 0 || (double)n / bins < min_ratio)
        return NAN;
    int negate = bs_qc_median_f(amps, n, work) < 0;
    int64_t *h = malloc((size_t)bins * 2 * sizeof *h);
    float *edges = malloc(((size_t)bins + 1) * sizeof *edges);
    double r = NAN;
    if (h && edges) {
        int64_t *pdf = h + bins;
        np_histogram_f32(amps, n, negate, bins, h, edges);
        if (gaussian_smooth_counts(h, bins, sigma, pdf) == 0) {
            int64_t cut = pdf[0];
            int g = 0;
            for (int i = 0; i < bins; i++)
                if (pdf[i] >= cut)
                    g = i;
            int64_t missed = 0;
            for (int i = g + 1; i < bins; i++)
                missed += pdf[i];
            r = (double)missed / (double)(n + missed);
            if (r > 0.5)
                r = 0.5;
        }
    }
    free(h);
    free(edges);
    return r;
}

/* Median of y over spikes [i0, i1) (copied into work). */
static double median_range(const float *y, int64_t i0, int64_t i1, float *work)
{
    memcpy(work, y + i0, (size_t)(i1 - i0) * sizeof *work);
    return qc_median_inplace_f(work, i1 - i0);
}

void bs_qc_drift(const int64_t *t, const float *y, int64_t n, int64_t total_samples, double fs_hz,
                 double interval_s, int min_spikes, double max_nan_fraction, int min_bins, float *work, double *ptp,
                 double *std, double *mad)
{
    *ptp = *std = *mad = NAN;
    int64_t B = (int64_t)(interval_s * fs_hz); /* truncated, as SpikeInterface's int(interval_s * fs) */
    if (n <= 0 || B <= 0)
        return;
    int64_t nb = total_samples / B;
    if (nb < min_bins || nb < 1)
        return;
    double ref = median_range(y, 0, n, work);
    double *d = malloc((size_t)nb * 2 * sizeof *d);
    if (!d)
        return;
    double *tmp = d + nb;
    int64_t i = 0, n_nan = 0;
    for (int64_t k = 0; k < nb; k++) {
        while (i < n && t[i] < k * B)
            i++;
        int64_t i0 = i;
        while (i < n && t[i] < (k + 1) * B)
            i++;
        d[k] = i - i0 >= min_spikes ? median_range(y, i0, i, work) - ref : NAN;
        n_nan += isnan(d[k]);
    }
    if ((double)n_nan > max_nan_fraction * (double)nb) {
        free(d);
        return;
    }
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    int64_t m = 0;
    for (int64_t k = 0; k < nb; k++)
        if (!isnan(d[k])) {
            mn = d[k] < mn ? d[k] : mn;
            mx = d[k] > mx ? d[k] : mx;
            sum += d[k];
            tmp[m++] = d[k];
        }
    if (m == 0) {
        free(d);
        return;
    }
    double mean = sum / (double)m, ss = 0;
    for (int64_t k = 0; k < m; k++)
        ss += (tmp[k] - mean) * (tmp[k] - mean);
    *ptp = mx - mn;
    *std = sqrt(ss / (double)m);
    double med = qc_median_d(tmp, m);
    for (int64_t k = 0; k < m; k++)
        tmp[k] = fabs(tmp[k] - med);
    *mad = qc_median_d(tmp, m);
    free(d);
}

void bs_qc_allen_drift(const int64_t *t, const float *y, int64_t n, int64_t t0, int64_t t1, double fs_hz,
                       double interval_s, int min_spikes, float *work, double *max_drift, double *cumulative_drift)
{
    *max_drift = *cumulative_drift = NAN;
    if (n <= 0 || !(interval_s > 0))
        return;
    /* numpy.arange(start, stop, step): ceil((stop - start) / step) values start + i * ((start + step) - start) */
    double s0 = (double)t0 / fs_hz, s1 = (double)t1 / fs_hz;
    double len = ceil((s1 - s0) / interval_s);
    if (!(len >= 1))
        return;
    int64_t nb = (int64_t)len;
    double delta = (s0 + interval_s) - s0;
    double mn = INFINITY, mx = -INFINITY, cum = 0, prev = NAN;
    int any = 0;
    int64_t i = 0;
    for (int64_t k = 0; k < nb; k++) {
        double a = s0 + (double)k * delta, b = a + interval_s;
        while (i < n && !((double)t[i] / fs_hz > a))
            i++;
        int64_t i0 = i, cnt = 0;
        while (i0 + cnt < n && (double)t[i0 + cnt] / fs_hz < b)
            cnt++;
        double med = NAN;
        if (cnt >= min_spikes && cnt > 0)
            med = median_range(y, i0, i0 + cnt, work);
        if (!isnan(med)) {
            any = 1;
            mn = med < mn ? med : mn;
            mx = med > mx ? med : mx;
            if (!isnan(prev))
                cum += fabs(med - prev);
        }
        prev = med;
    }
    if (any) {
        *max_drift = mx - mn;
        *cumulative_drift = cum;
    }
}
