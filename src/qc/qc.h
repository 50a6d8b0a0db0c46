/*
 * qc.h - quality metrics of a sorting (`boundsort qc OUT`, also run at the
 * end of `sort`): SpikeInterface's metric definitions and defaults
 * (docs/FORMATS.md §7; SpikeInterface 0.105's metrics/quality, which is
 * what bench/qc_crosscheck.py compares against), the Allen Institute's
 * max_drift and cumulative_drift, and the Allen pass/fail rule.
 *
 * WHAT IS MEASURED ON WHAT
 *   - Spike trains (spike_times.npy, spike_clusters.npy or spike_templates.npy)
 *     give num_spikes, firing_rate, presence_ratio, isi_violations_*,
 *     rp_contamination / rp_violations and sliding_rp_violation.
 *   - The recording, reopened through OUT/source.json (or given by the
 *     caller), preprocessed as SpikeInterface users usually do for metrics:
 *     zero-phase Butterworth high-pass (300 Hz, order 3: scipy sosfiltfilt
 *     semantics, src/preprocess) then a global median reference at every
 *     sample, in µV, NOT whitened. On it:
 *       * templates: the mean waveform (1 ms before, 2 ms after the spike
 *         sample, all channels) of a random subset of each unit's spikes
 *         (at most max_spikes_per_unit, 500 like SpikeInterface's
 *         random_spikes; chosen by selection sampling with a per-unit
 *         seeded generator, so a unit's subset does not depend on the
 *         others);
 *       * main channel = the channel whose template reaches the largest
 *         |value| (peak_sign "both", SpikeInterface >= 0.104's analyzer
 *         default; "neg" and "pos" are options); peak shift = sample of that
 *         extremum minus the spike sample; sparsity = channels within
 *         sparsity_radius_um (100 µm) of the main channel;
 *       * spike amplitude = the trace at spike sample + peak shift on the
 *         main channel, signed, for every spike (SpikeInterface's
 *         spike_amplitudes) -> amplitude_median, amplitude_cutoff;
 *       * noise level per channel = MAD / 0.6745 of n_noise_chunks random
 *         chunks of noise_chunk_s (seeded; the chunks are distinct,
 *         chunk-aligned pieces of the recording), averaged over chunks ->
 *         snr = |template extremum on the main channel| / noise there.
 *   - Spike positions (OUT/spike_positions.npy, y in µm) give drift_ptp,
 *     drift_std, drift_mad (SpikeInterface) and max_drift, cumulative_drift
 *     (Allen). Without that file the depth of each spike is the Allen
 *     estimate: centre of mass of the squared positive first-PC features
 *     (pc_features.npy) over the template's pc_feature_ind channels, using
 *     the real channel depths (channel_positions.npy) instead of Allen's
 *     "index x 10 µm". Without either, the five drift metrics are NaN.
 *
 * PCA FEATURES: WHICH SPACE AND WHY. The PCA metrics (isolation_distance,
 * l_ratio, d_prime, nn_hit_rate, nn_miss_rate, silhouette) use
 * SpikeInterface's "by_channel_local" principal components of the µV
 * waveforms of the random subset, not Phy's pc_features.npy. Reasons:
 *   1. The metrics are defined in that space. pc_features.npy holds each
 *      spike's projections on its own template's 10 nearest channels in the
 *      sorter's whitened space; two units' features live on different
 *      channels, so comparing a unit with its neighbours needs ad hoc
 *      channel intersections (Allen's approach), and the numbers would not
 *      be comparable with anyone else's SpikeInterface metrics.
 *   2. It works on any Phy folder, also ones whose pc_features are absent
 *      or were written by another sorter.
 *   3. It is cheap: the subset is at most max_spikes_per_unit spikes per
 *      unit, and the waveforms are extracted during the same pass that reads
 *      the amplitudes.
 * The model is SpikeInterface's exactly: one IncrementalPCA (n_components =
 * 5, whitened) per channel, partial-fitted unit after unit (in cluster-id
 * order) with the unit's subset waveforms on that channel, for units with at
 * least n_components spikes and channels in their sparsity; each spike is
 * projected on the channels of its unit's sparsity (0 elsewhere). For unit
 * u the points are the subset spikes of the units whose main channel lies in
 * u's sparsity (u included), the features those spikes' projections on u's
 * sparse channels, flattened (n_components x channels). bs_ipca reproduces
 * sklearn's IncrementalPCA.partial_fit (an SVD of the stacked previous
 * components, the centred batch and the mean correction, truncated to k
 * components), computed in double through the eigen-decomposition of the
 * stack's Gram matrix; SpikeInterface computes it in float32.
 *
 * MEMORY. Nothing grows with the recording: the recording is read in
 * batches (src/io/batch.h) twice; spikes are read in blocks; per-spike
 * results (amplitudes, depths) stream to OUT/.stages/qc/; the subset
 * waveforms (sparse channels only) are spilled to a temporary file there and
 * read back one unit at a time; per-unit spike arrays are gathered in groups
 * of units whose spikes fit group_spikes. RAM is O(batch + units x
 * (nt x channels) for the template sums + subset projections). All bulk
 * buffers come from the accountant under "qc/...".
 *
 * DETERMINISM. Fixed seeds, one pass order, per-unit work in unit order:
 * the same folder and recording give the same bytes for any thread count
 * and any --group-spikes.
 *
 * WHICH SPIKEINTERFACE. The definitions are those of SpikeInterface >= 0.104
 * (docs/FORMATS.md §7). SpikeInterface 0.102 differed in amplitude_cutoff
 * (Allen's density-histogram version, without the sign flip), the sliding
 * refractory period (contaminations up to 34.5 %, an expected-violation
 * count of Nc N), nn_hit/miss_rate (4 neighbours: the point itself was one of
 * the 5) and drift_std / drift_mad (std of |diff| when a bin is NaN, MAD
 * around the mean); bench/README.md shows both comparisons.
 *
 * DELIBERATE DIFFERENCES. isolation_distance and l_ratio are NaN when the
 * unit's covariance is singular (no more subset spikes than features), where
 * numpy's inverse gives SpikeInterface meaningless values (~1e16). max_drift
 * and cumulative_drift are not rounded to 0.01 µm as Allen's code does, and
 * cumulative_drift is NaN (Allen: 0) when no interval has enough spikes.
 * Spikes whose depth is unknown (NaN) are left out of the drift metrics.
 */
#ifndef BS_QC_H
#define BS_QC_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../io/recording.h"
#include "../preprocess/preprocess.h"

typedef enum { BS_QC_PEAK_BOTH = 0, BS_QC_PEAK_NEG, BS_QC_PEAK_POS } bs_qc_peak_sign;

typedef struct {
    /* random subset and waveforms */
    int max_spikes_per_unit;     /* subset cap per unit (SpikeInterface random_spikes: 500) */
    uint64_t seed;               /* subset and noise-chunk seed */
    double ms_before, ms_after;  /* waveform window around the spike sample, ms (1, 2) */
    bs_qc_peak_sign peak_sign;   /* main channel / peak shift / amplitudes (both) */
    double sparsity_radius_um;   /* µm (100) */
    int n_components;            /* PCs per channel (5) */
    /* preprocessing */
    double highpass_hz;          /* Hz (300) */
    int highpass_order;          /* Butterworth order (3) */
    double batch_s;              /* batch length, s (2) */
    int n_noise_chunks;          /* chunks for the noise levels (20) */
    double noise_chunk_s;        /* s (0.5) */
    /* metric parameters: SpikeInterface's metric_params defaults */
    double presence_bin_s;       /* s (60) */
    double presence_fr_ratio;    /* mean_fr_ratio_thresh (0) */
    double isi_threshold_ms;     /* ms (1.5) */
    double isi_min_ms;           /* ms (0) */
    double rp_ms;                /* refractory period, ms (1) */
    double rp_censored_ms;       /* ms (0) */
    double srp_bin_ms;           /* sliding RP correlogram bin, ms (0.25) */
    double srp_window_s;         /* s (1) */
    double srp_exclude_below_ms; /* ms (0.5) */
    double srp_max_rp_ms;        /* ms (10) */
    int srp_min_spikes;          /* NaN at or below this many spikes (0) */
    int cutoff_bins;             /* amplitude histogram bins (100) */
    double cutoff_smoothing;     /* Gaussian sigma, bins (3) */
    double cutoff_min_ratio;     /* NaN if spikes / bins < this (5) */
    double drift_interval_s;     /* s (60) */
    int drift_min_spikes;        /* per interval (100) */
    double drift_max_nan_fraction; /* NaN if more intervals than this fraction lack spikes (0.5) */
    int drift_min_bins;          /* (2) */
    double allen_drift_interval_s; /* Allen max/cumulative drift interval, s (100) */
    int allen_drift_min_spikes;  /* (10) */
    int nn_max_spikes;           /* (10000) */
    int nn_neighbors;            /* (5) */
    /* labels: pass iff isi_violations_ratio < isi_max, presence_ratio >
     * presence_min and amplitude_cutoff < cutoff_max (NaN fails) */
    double label_isi_max;        /* 0.5 */
    double label_presence_min;   /* 0.8 */
    double label_cutoff_max;     /* 0.1 */
    /* waveform-shape metrics: SpikeInterface 0.105 template_metrics defaults */
    int shape_upsampling;        /* upsampling factor of the templates (10) */
    double shape_min_prominence; /* extremum prominence floor, fraction of max |template| (0.3) */
    double shape_edge_exclusion_ms;  /* ms left out at both ends when finding extrema (0.09) */
    double shape_min_peak_trough_ratio; /* peaks this fraction of the trough half-width away at least (0.2) */
    int shape_min_extremum_distance; /* upsampled samples between extrema at least (3) */
    double shape_recovery_window_ms; /* recovery_slope window, ms (0.7) */
    double shape_baseline_ms;    /* baseline flatness window from the waveform start, ms (0.5) */
    double shape_exp_min_r2;     /* exp_decay: NaN below this R^2 (0.2) */
    int shape_multi_min_channels; /* exp_decay only on probes of at least this many channels (64) */
    /* merge proposals (qc_merge.c) */
    int merge_min_spikes;        /* both units at least (100, SpikeInterface's num_spikes step) */
    double merge_max_distance_um; /* main channels at most this far apart, µm (100) */
    double merge_min_similarity; /* l1 template similarity at least (0.75) */
    double merge_max_contamination; /* rp_contamination of each unit at most (0.2) */
    double merge_min_amp_ratio;  /* |amplitude_median| smaller / larger at least (0.5) */
    double merge_window_ms;      /* cross-correlogram window, ms (50) */
    double merge_rp_ms;          /* refractory period, ms (1) */
    double merge_censored_ms;    /* coincidences this close are duplicates, not violations, ms (0.3) */
    double merge_max_chance;     /* refractoriness: P(so few coincidences | independent) at most (0.2) */
    double merge_max_refractory_ratio; /* observed / expected at most (0.2) */
    double merge_min_similarity_alone; /* similarity that proposes a pair whose timing is inconclusive (0.8) */
    double merge_max_overlap;    /* presence overlap of a temporal split at most (0.3) */
    int merge_presence_bins;     /* presence histogram bins over the recording (100) */
    /* unit types (qc_unit_type.c): thresholds, NULL = Bombcell's defaults */
    const struct bs_unit_type_rules *unit_type_rules;
    /* run */
    int64_t group_spikes;        /* spikes held per group of units (0: 8M, or the largest unit); 16 bytes each */
    int quiet;                   /* no progress lines */
} bs_qc_params;

void bs_qc_default_params(bs_qc_params *p);

/* Metric columns, in qc_metrics.tsv order. */
enum {
    BS_QC_NUM_SPIKES, BS_QC_FIRING_RATE, BS_QC_PRESENCE_RATIO, BS_QC_ISI_RATIO, BS_QC_ISI_COUNT,
    BS_QC_RP_CONTAMINATION, BS_QC_RP_VIOLATIONS, BS_QC_SLIDING_RP, BS_QC_AMPLITUDE_CUTOFF,
    BS_QC_AMPLITUDE_MEDIAN, BS_QC_SNR, BS_QC_ISOLATION_DISTANCE, BS_QC_L_RATIO, BS_QC_D_PRIME,
    BS_QC_NN_HIT_RATE, BS_QC_NN_MISS_RATE, BS_QC_SILHOUETTE, BS_QC_DRIFT_PTP, BS_QC_DRIFT_STD,
    BS_QC_DRIFT_MAD, BS_QC_MAX_DRIFT, BS_QC_CUMULATIVE_DRIFT,
    /* waveform shape (qc_shape.c): counts, seconds, µV/s, ratios, 1/µm */
    BS_QC_NUM_POSITIVE_PEAKS, BS_QC_NUM_NEGATIVE_PEAKS, BS_QC_PEAK_TO_TROUGH_DURATION, BS_QC_TROUGH_HALF_WIDTH,
    BS_QC_PEAK_HALF_WIDTH, BS_QC_REPOLARIZATION_SLOPE, BS_QC_RECOVERY_SLOPE, BS_QC_MAIN_TO_NEXT_EXTREMUM_DURATION,
    BS_QC_PEAK_BEFORE_TO_TROUGH_RATIO, BS_QC_PEAK_AFTER_TO_TROUGH_RATIO, BS_QC_PEAK_BEFORE_TO_PEAK_AFTER_RATIO,
    BS_QC_MAIN_PEAK_TO_TROUGH_RATIO, BS_QC_TROUGH_WIDTH, BS_QC_PEAK_BEFORE_WIDTH, BS_QC_PEAK_AFTER_WIDTH,
    BS_QC_WAVEFORM_BASELINE_FLATNESS, BS_QC_EXP_DECAY, BS_QC_N_METRICS
};
#define BS_QC_SHAPE_FIRST BS_QC_NUM_POSITIVE_PEAKS
extern const char *const bs_qc_metric_names[BS_QC_N_METRICS];
/* 1 for the integer-valued columns (counts). */
int bs_qc_metric_is_count(int m);

typedef struct {
    int n_units;        /* rows written (clusters with spikes + empty ones listed in the TSVs) */
    int n_good;         /* qc_label == good */
    int n_unknown;      /* qc_label == unknown (a metric of the rule could not be computed) */
    int n_unit_type[4]; /* units per bs_unit_type: noise, non-somatic, mua, good */
    int n_merge_proposals; /* pairs in merge_proposals.tsv */
    int64_t n_spikes;
} bs_qc_summary;

/* BS_OK if dir is a folder holding params.py and spike_times.npy, else
 * BS_ERR_INPUT saying what is missing. */
bs_status bs_qc_check_folder(const char *dir);

/* Compute every metric for the Phy folder `out_dir` on the recording `rec`
 * and write qc/qc_metrics.tsv, cluster_<metric>.tsv, cluster_qc_label.tsv and
 * curation.json there (atomically). summary may be NULL. */
bs_status bs_qc_run(const char *out_dir, const bs_recording *rec, const bs_qc_params *p, bs_qc_summary *summary);

/* qc's preprocessing, the signal its metrics and the report's traces see: the
 * order-`highpass_order` Butterworth high-pass at `highpass_hz`, forward and
 * backward over the window, then the median across channels subtracted at
 * each sample (bs_car). x is C rows of n_t float samples (µV), filtered in
 * place; the centre of the window is exact when at least
 * bs_qc_preprocess_halo(fs_hz) samples of context lie on each side.
 * scratch may be NULL (then allocated per call). */
int64_t bs_qc_preprocess_halo(double fs_hz);
bs_status bs_qc_preprocess(const bs_highpass *hp, float *x, int C, int64_t n_t, void *scratch, size_t scratch_bytes);

/* Remove the files bs_qc_run writes from out_dir (absent ones are fine):
 * `sort --no-qc` calls it so no earlier run's tables outlive its clusters. */
bs_status bs_qc_remove_outputs(const char *out_dir);

/* Disk, for `plan` (plan.h): bs_qc_run's subset of spikes is spilled to a
 * temporary file, each spike's waveform on its unit's sparse channels;
 * bs_qc_spill_spike_bytes is the bound for one spike on `probe` at fs_hz
 * (the widest unit's channels). bs_qc_disk_bytes bounds what bs_qc_run
 * writes in (or passes through) the Phy folder for n_spikes spikes of
 * n_units units: every spike's amplitude (4 B), the spill
 * (max_spikes_per_unit a unit) and the tables. */
size_t bs_qc_spill_spike_bytes(const bs_qc_params *p, const bs_probe *probe, double fs_hz);
size_t bs_qc_disk_bytes(const bs_qc_params *p, size_t spill_spike_bytes, int64_t n_spikes, int n_units);

/* The Allen rule on one unit's metric row: fail when a metric that could be
 * computed is outside its bound (isi_violations_ratio < label_isi_max,
 * presence_ratio > label_presence_min, amplitude_cutoff < label_cutoff_max);
 * otherwise unknown when one could not be computed (NaN: presence ratio on a
 * recording shorter than its bin, amplitude cutoff with too few spikes, no
 * ISI for a unit of one spike); good when all three pass. */
typedef enum { BS_QC_LABEL_GOOD, BS_QC_LABEL_FAIL, BS_QC_LABEL_UNKNOWN, BS_QC_N_LABELS } bs_qc_label;
extern const char *const bs_qc_label_names[BS_QC_N_LABELS]; /* "good", "fail", "unknown" */
bs_qc_label bs_qc_label_of(const double *metrics, const bs_qc_params *p);

/* ---------------------------------------------------------------------------
 * Waveform-shape metrics of one unit (qc_shape.c): main_tmpl[nt], the mean
 * waveform on the main channel (µV); chan_tmpl[n_ch][nt] on the sparse
 * channels at x_um/y_um (used when multi != 0, for exp_decay). Writes
 * out[BS_QC_SHAPE_FIRST .. BS_QC_N_METRICS) of a metric row. work:
 * bs_qc_shape_work_bytes(nt, n_ch, p->shape_upsampling) bytes, prepared
 * once by bs_qc_shape_work_init(work, p->shape_upsampling) (the filter taps; -1 when out
 * of memory) and then used for any number of units of that nt and n_ch.
 * ------------------------------------------------------------------------- */
size_t bs_qc_shape_work_bytes(int nt, int n_ch, int up);
int bs_qc_shape_work_init(void *work, int up);
void bs_qc_shape_metrics(const float *main_tmpl, int nt, const float *chan_tmpl, int n_ch, const double *x_um,
                         const double *y_um, int multi, double fs_hz, const bs_qc_params *p, double *out, void *work);

/* ---------------------------------------------------------------------------
 * Unit types (qc_unit_type.c): noise / non-somatic / mua / good by
 * Bombcell's rules as SpikeInterface's bombcell_label_units applies them.
 * A rule bounds one metric column: value >= greater and value <= less
 * (NaN bound: none), on |value| when abs. Sections: 0 noise (a unit failing
 * any rule, NaN failing too, is noise), 1 mua (failing any: mua; NaN passes
 * except for sliding_rp_violation), 2 non-somatic (applied to units that
 * are not noise: (a narrow peak before AND narrow trough, both failing their
 * width rule) and (either ratio rule failing), or main_peak_to_trough_ratio
 * failing, or any other rule of the section failing; NaN never counts).
 * ------------------------------------------------------------------------- */
enum { BS_UT_NOISE, BS_UT_MUA, BS_UT_NON_SOMATIC, BS_UT_N_SECTIONS };
typedef enum { BS_UNIT_NOISE, BS_UNIT_NON_SOMATIC, BS_UNIT_MUA, BS_UNIT_GOOD, BS_UNIT_N_TYPES } bs_unit_type;
extern const char *const bs_unit_type_names[BS_UNIT_N_TYPES]; /* "noise", "non-somatic", "mua", "good" */
typedef struct {
    int section; /* BS_UT_* */
    int metric;  /* BS_QC_* column */
    double greater, less; /* inclusive bounds, NaN = none */
    int abs;
} bs_unit_type_rule;
typedef struct bs_unit_type_rules {
    int n;
    bs_unit_type_rule rule[64];
} bs_unit_type_rules;
/* Bombcell's default thresholds (SpikeInterface's bombcell_get_default_thresholds). */
void bs_unit_type_default_rules(bs_unit_type_rules *r);
/* Rules from a JSON file in SpikeInterface's format: {"noise": {"metric":
 * {"greater": x|null, "less": y|null, "abs": bool}}, "mua": {...},
 * "non-somatic": {...}}; a section left out is empty. BS_ERR_INPUT with the
 * reason for a malformed file or an unknown metric. */
bs_status bs_unit_type_load_rules(const char *path, bs_unit_type_rules *r);
/* The type of one unit's metric row; with have_multi == 0 the rules on
 * exp_decay are skipped (SpikeInterface computes it only on probes of 64
 * channels or more). reason (may be NULL) gets the first failing rule, e.g.
 * "noise: exp_decay=nan (nan fails)", or "passes". */
bs_unit_type bs_unit_type_of(const double *metrics, const bs_unit_type_rules *r, int have_multi, char *reason,
                             size_t reason_len);

/* ---------------------------------------------------------------------------
 * Per-unit metric functions (pure; tested one by one against a Python
 * reference in tests/unit/test_qc_metrics.c). Times are sample indices of one
 * unit, sorted ascending; total_samples is the recording length; fs_hz the
 * sampling rate. NaN follows SpikeInterface.
 * ------------------------------------------------------------------------- */

/* Fraction of presence_bin_s bins (edges 0, B, 2B, ... floor(T/B)*B; the
 * last edge inclusive as numpy.histogram) holding more than
 * floor(fr * bin_s * fr_ratio) spikes. NaN if T < one bin or n == 0. */
double bs_qc_presence_ratio(const int64_t *t, int64_t n, int64_t total_samples, double fs_hz, double bin_s,
                            double fr_ratio);

/* Hill / UMS: count = #consecutive ISIs < threshold (ISIs in seconds, as
 * t/fs differences); ratio = (count / (2 n (thr - min_isi))) / (n / T).
 * n == 0: ratio NaN, count -1. */
void bs_qc_isi_violations(const int64_t *t, int64_t n, int64_t total_samples, double fs_hz, double threshold_ms,
                          double min_isi_ms, double *ratio, int64_t *count);

/* Llobet et al. 2022: violations = pairs (i < j) with t_j - t_i <= t_r
 * samples (t_r = round(rp_ms fs / 1000)); contamination = 1 - sqrt(1 -
 * v (T - 2 n t_c) / (n^2 (t_r - t_c))), 1 if the root's argument is < 0, NaN
 * for n <= 1. n == 0: violations -1. */
void bs_qc_rp_violations(const int64_t *t, int64_t n, int64_t total_samples, double fs_hz, double rp_ms,
                         double censored_ms, double *contamination, int64_t *violations);

/* IBL sliding refractory period: smallest contamination in 0.5 %..35 %
 * whose Poisson confidence exceeds 0.9 at some refractory period in
 * (exclude_below_ms, max_rp_ms], else NaN (see qc_train.c). */
double bs_qc_sliding_rp(const int64_t *t, int64_t n, int64_t total_samples, double fs_hz, const bs_qc_params *p);

/* SpikeInterface's amplitude_cutoff (>= 0.103): flip if the median < 0,
 * numpy histogram of `bins` bins, Gaussian smoothing (sigma bins, mode
 * "nearest") stored back as integer counts (truncated, as scipy does for the
 * integer histogram), missed = sum of the smoothed counts after the last bin
 * >= the first bin's, fraction = missed / (n + missed) capped at 0.5. NaN if
 * n / bins < min_ratio. `work` holds n floats. */
double bs_qc_amplitude_cutoff(const float *amps, int64_t n, int bins, double sigma, double min_ratio, float *work);

/* Median (numpy: mean of the two middle values for even n); NaN if n == 0.
 * `work` holds n floats. */
double bs_qc_median_f(const float *x, int64_t n, float *work);
/* Noise level of samples x (µV): the median absolute deviation from the
 * median over 0.6744897501960817 (the standard deviation of Gaussian noise);
 * NaN if n == 0. `work` holds n floats. Used for qc's per-channel noise and
 * the scorer's ground-truth SNR (compare.h). */
double bs_qc_noise_sigma_f(const float *x, int64_t n, float *work);

/* SpikeInterface drift metrics from per-spike depths y (µm): medians per
 * interval_s bin with >= min_spikes spikes minus the unit's overall median;
 * ptp, std (ddof 0) and median absolute deviation from the median, NaN
 * ignored; all NaN if fewer than min_bins bins or more than
 * max_nan_fraction of the bins are NaN. `work` holds n floats. */
void bs_qc_drift(const int64_t *t, const float *y, int64_t n, int64_t total_samples, double fs_hz,
                 double interval_s, int min_spikes, double max_nan_fraction, int min_bins, float *work, double *ptp,
                 double *std, double *mad);

/* Allen ecephys max_drift and cumulative_drift: intervals of interval_s from
 * the first spike of the whole sorting (t0) up to its last (t1), strictly
 * inside each interval, median depth where >= min_spikes spikes; max - min
 * and sum |diff| of those medians (NaN ones skipped). NaN when no interval
 * qualifies. `work` holds n floats. */
void bs_qc_allen_drift(const int64_t *t, const float *y, int64_t n, int64_t t0, int64_t t1, double fs_hz,
                       double interval_s, int min_spikes, float *work, double *max_drift, double *cumulative_drift);

/* ---- PCA metrics. X: n points x d features (row-major, double); lab: the
 * unit of each point; self: the unit measured. ---- */

/* isolation distance and L-ratio (Mahalanobis, this unit's covariance;
 * NaN when it is singular or min(n_self, n_other) < 2). */
bs_status bs_qc_mahalanobis(const double *X, const int32_t *lab, int64_t n, int d, int32_t self, double *iso,
                            double *l_ratio);
/* d' of the two-class Fisher discriminant (sklearn LDA, svd solver); NaN
 * without other points. */
bs_status bs_qc_d_prime(const double *X, const int32_t *lab, int64_t n, int d, int32_t self, double *d_prime);
/* nearest-neighbour hit and miss rates (Chung et al.; SpikeInterface's
 * subsampling to max_spikes points, k neighbours excluding the point
 * itself); (1, 0) when all points are the unit's. */
bs_status bs_qc_nn_rates(const double *X, const int32_t *lab, int64_t n, int d, int32_t self, int max_spikes,
                         int k, double *hit, double *miss);
/* Bytes bs_qc_nn_rates allocates for n points of d features with n_threads threads, at most. */
size_t bs_qc_nn_bytes(int64_t n, int d, int max_spikes, int k, int n_threads);
/* simplified silhouette (centroids); NaN without other units. */
bs_status bs_qc_silhouette(const double *X, const int32_t *lab, int64_t n, int d, int32_t self, double *score);

/* ---- incremental PCA (sklearn IncrementalPCA semantics, whiten=True) ---- */
typedef struct {
    int nt;          /* features (waveform samples) */
    int k;           /* components */
    int64_t n_seen;  /* samples fitted so far; 0 = not fitted */
    double *mean;    /* [nt] */
    double *comp;    /* [k * nt] rows = components */
    double *sv;      /* [k] singular values */
    double *ev;      /* [k] explained variance = sv^2 / (n_seen - 1) */
} bs_ipca;

bs_status bs_ipca_init(bs_ipca *m, int nt, int k);
void bs_ipca_free(bs_ipca *m);
/* Scratch bytes bs_ipca_partial_fit needs. */
size_t bs_ipca_scratch_bytes(int nt, int k);
/* Fit one batch of n >= k rows (row r at X + r * stride floats). */
bs_status bs_ipca_partial_fit(bs_ipca *m, const float *X, int64_t n, int64_t stride, void *scratch);
/* out[k] = (x - mean) . comp / sqrt(ev) */
void bs_ipca_transform(const bs_ipca *m, const float *x, float *out);

/* ---- special functions (qc_math.c) ---- */
/* Regularized upper incomplete gamma Q(a, x), a > 0, x >= 0. */
double bs_qc_gammaincc(double a, double x);
/* Poisson CDF P(X <= k; mu) and chi-square survival P(X > x; dof). */
double bs_qc_poisson_cdf(double k, double mu);
double bs_qc_chi2_sf(double x, double dof);

#endif
