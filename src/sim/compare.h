/*
 * compare.h - scoring a sorting against a ground truth, with exactly the
 * definitions of SpikeInterface's compare_sorter_to_ground_truth
 * (GroundTruthComparison, agreement_method="count", match_mode="hungarian",
 * exhaustive_gt=True), reimplemented from its documented behaviour.
 *
 * Mechanism.
 * 1. Both sortings are spike vectors sorted by time (samples), each spike
 *    carrying a dense unit index (units are the distinct ids, ascending).
 * 2. Match counts: one sweep over the GT spikes in time order; for each GT
 *    spike i the sorted spikes j with |t_i - t_j| <= delta are visited in time
 *    order (a left pointer into the sorted train only moves forward, so the
 *    sweep is linear after sorting, times the few spikes inside a window).
 *    The pair (i, j) counts one match for the unit pair (u_i, v_j) unless i or
 *    j is the spike that was counted last for that same unit pair. So each GT
 *    spike counts at most once per sorted unit; a sorted spike can count twice
 *    in rare bursts, and, like SpikeInterface, the count of a pair is finally
 *    clipped to the sorted unit's spike count. delta = int(delta_ms / 1000 *
 *    fs_hz) samples, inclusive (0.4 ms at 30 kHz = 12 samples).
 * 3. Agreement(u, v) = m / (n_gt(u) + n_sorted(v) - m) (0 when the
 *    denominator is 0).
 * 4. Hungarian match: scores below match_score (0.5) are zeroed, the
 *    assignment maximizing the total is computed (hungarian.h; on the rows
 *    and columns holding a non-zero score, the others add 0 to any
 *    assignment), and a pair is kept only if its agreement >= match_score.
 *    Where two assignments tie (e.g. two identical sorted units) the one
 *    chosen may differ from scipy's; the totals are equal. Best match (per unit,
 *    independently): the first maximum of a row / column, kept if >=
 *    chance_score (0.1).
 * 5. Per GT unit u with Hungarian partner v: tp = m(u,v), fn = n_gt - tp,
 *    fp = n_sorted(v) - tp; accuracy = tp/(tp+fn+fp), recall = tp/(tp+fn),
 *    precision = tp/(tp+fp), false discovery rate = fp/(tp+fp), miss rate =
 *    fn/n_gt; all 0 when the unit is unmatched, tp = 0 or n_gt = 0.
 * 6. Unit categories over the sorted units:
 *    well detected  Hungarian-matched with agreement >= well_detected (0.8);
 *    bad            not Hungarian-matched;
 *    false positive bad and (no best GT match >= chance_score, or that best
 *                   agreement < redundant_score (0.2));
 *    redundant      bad, has a best GT match u, is not u's own best match,
 *                   and agreement >= redundant_score;
 *    overmerged     agreement > overmerged_score (0.2) with 2 or more GT units.
 * 7. Where a GT unit that is not well detected went (`loss`), from the
 *    match counts m(u, v), recall r = m / n_gt(u), precision p = m /
 *    n_sorted(v); the first that holds:
 *      split     two or more sorted units with p >= 0.5 and r >= 0.1;
 *      missed    no sorted unit holds r >= 0.2 (v* = the unit with the most
 *                of u's spikes, the first of ties);
 *      absorbed  u's spikes are the minority of v* (p < 0.5);
 *      merged    another GT unit supplies >= 0.2 of v*'s spikes;
 *      partial   v* is u's own but misses or adds too many spikes.
 * 8. SNR (gt_snr.c, when the ground-truth folder holds gt_templates.npy and
 *    its recording): per GT unit |most negative template value| over the
 *    noise of its channel (SpikeInterface's compute_snrs, peak_sign "neg"),
 *    and the well-detected count among the units with snr >= snr_threshold
 *    (5): a GT unit is well detected when its Hungarian partner's agreement
 *    is >= well_detected_score (the sorted units counted in step 6, seen
 *    from the GT side).
 *
 * Memory, all through the accountant under "compare/...": 12 bytes per spike
 * for each sorting (plus 16 bytes per spike while it is sorted), and five
 * n_gt_units x n_sorted_units matrices of 8-byte cells (counts, agreement,
 * its thresholded copy, and the two "last counted spike" tables).
 */
#ifndef BS_COMPARE_H
#define BS_COMPARE_H

#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"

/* Input limits that keep every window computation inside int64. */
#define BS_COMPARE_MAX_TIME ((int64_t)1 << 60) /* samples */
#define BS_COMPARE_MAX_FS_HZ 1e9               /* Hz */

/* A spike train of several units, sorted by time. */
typedef struct {
    int64_t n_spikes;
    int64_t *times;    /* samples, ascending (ties in unit order) */
    int32_t *units;    /* unit index of each spike, 0..n_units-1 */
    int32_t n_units;
    int64_t *unit_ids; /* n_units original ids (cluster / GT unit ids), ascending, >= 0 */
    int64_t *counts;   /* n_units spikes per unit */
} bs_sorting;

/* Build from raw arrays (copied). ids must be >= 0 and times within
 * 0..BS_COMPARE_MAX_TIME (checked, `what` names the source in messages).
 * extra_ids (may be NULL): unit ids that exist even without spikes (e.g. the
 * simulator's U units). times need not be sorted. */
bs_status bs_sorting_from_arrays(const int64_t *times, const int64_t *ids, int64_t n, const int64_t *extra_ids,
                                 int32_t n_extra, const char *what, bs_sorting *out);
void bs_sorting_free(bs_sorting *s);

/* Load a sorting folder: a ground-truth folder (gt_spike_times.npy +
 * gt_spike_units.npy; gt_unit_positions.npy, when present, declares U units
 * 0..U-1) or a Phy folder (spike_times.npy + spike_clusters.npy, or
 * spike_templates.npy when there is no spike_clusters.npy; (n,) or (n, 1),
 * any integer dtype). exclude_groups (may be NULL / 0): Phy cluster groups
 * ("noise", "mua", ...) whose clusters are dropped, read from
 * cluster_info.tsv or else cluster_group.tsv (column "group"). Like
 * SpikeInterface's read_phy, nothing is excluded by default. */
bs_status bs_sorting_load(const char *folder, const char *const *exclude_groups, int n_exclude, bs_sorting *out);

/* fs_hz from <gt_folder>/recording.json. */
bs_status bs_gt_read_fs(const char *gt_folder, double *fs_hz);

/* Warnings on stderr (bs_log_warn) when the sorting folder and the
 * ground-truth folder do not describe the same recording, as far as the
 * folders say: the sorting's sampling rate (a Phy folder's params.py
 * sample_rate, a ground-truth folder's recording.json fs_hz) differs from
 * gt_folder/recording.json fs_hz; its length (dat_path's raw files, or
 * recording.json n_samples) differs from the ground truth's n_samples by
 * more than 0.1 %; or its last spike comes before half of the ground truth's
 * last spike time (a sort of part of the recording: the rest counts as
 * misses), or it has no spikes. Returns the number of warnings. */
int bs_compare_warn(const char *sorted_folder, const char *gt_folder, const bs_sorting *gt, const bs_sorting *sorted);

typedef struct {
    double delta_ms;            /* coincidence window, ms (0.4) */
    double match_score;         /* Hungarian pair threshold on agreement (0.5) */
    double chance_score;        /* best-match threshold (0.1) */
    double well_detected_score; /* (0.8) */
    double redundant_score;     /* (0.2) */
    double overmerged_score;    /* (0.2) */
    double snr_threshold;       /* GT units with SNR >= this are counted apart (5) */
} bs_compare_params;

void bs_compare_params_default(bs_compare_params *p);

/* Step 7's categories, in the order they are tested (WELL: well detected). */
typedef enum {
    BS_LOSS_WELL = 0,
    BS_LOSS_SPLIT,
    BS_LOSS_MISSED,
    BS_LOSS_ABSORBED,
    BS_LOSS_MERGED,
    BS_LOSS_PARTIAL,
    BS_LOSS_N
} bs_compare_loss;
extern const char *const bs_compare_loss_names[BS_LOSS_N]; /* "well", "split", ... */

typedef struct {
    int64_t gt_id;        /* GT unit id */
    int64_t n_gt;         /* spikes of the GT unit */
    int32_t sorted_index; /* Hungarian partner (index into the sorting's units) or -1 */
    int64_t sorted_id;    /* its id, or -1 */
    int64_t n_sorted;     /* spikes of the partner (0 if none) */
    int64_t tp, fn, fp;   /* spikes */
    double agreement;     /* with the partner (0 if none) */
    double accuracy, precision, recall, false_discovery_rate, miss_rate;
    double snr;           /* of the GT unit (step 8); NaN when unknown */
    bs_compare_loss loss; /* step 7 */
    int64_t loss_sorted;  /* id of v* (the sorted unit with most of its spikes), -1 if none */
    int64_t loss_gt;      /* merged: the GT unit that supplies most of v*'s other spikes; absorbed: v*'s
                             majority GT unit; else -1 */
} bs_compare_unit;

typedef struct {
    int32_t n_gt_units, n_sorted_units;
    int64_t delta_samples; /* inclusive window, samples */
    double fs_hz;
    uint64_t *match_counts; /* n_gt_units x n_sorted_units, row-major */
    double *agreement;      /* n_gt_units x n_sorted_units */
    int32_t *hungarian_12;  /* n_gt_units: sorted index or -1 */
    int32_t *hungarian_21;  /* n_sorted_units: GT index or -1 */
    int32_t *best_12;       /* n_gt_units */
    int32_t *best_21;       /* n_sorted_units */
    bs_compare_unit *units; /* n_gt_units */
    int32_t n_well_detected, n_false_positive, n_redundant, n_overmerged, n_bad;
    double mean_accuracy, mean_precision, mean_recall; /* over GT units, unmatched count as 0 */
    int32_t n_loss[BS_LOSS_N];     /* GT units per step-7 category */
    double snr_threshold;          /* step 8 */
    int32_t n_gt_snr;              /* GT units with snr >= snr_threshold; -1 when no SNR is known */
    int32_t n_well_detected_snr;   /* of those, well detected; -1 when no SNR is known */
    int32_t n_loss_snr[BS_LOSS_N]; /* of those, per step-7 category (valid when n_gt_snr >= 0) */
} bs_compare_result;

/* Window in samples for delta_ms at fs_hz: int(delta_ms / 1000 * fs_hz). */
int64_t bs_compare_delta_samples(double delta_ms, double fs_hz);

/* Match count matrix (step 2), counts[n_gt_units * n_sorted_units], clipped. */
bs_status bs_compare_match_counts(const bs_sorting *gt, const bs_sorting *sorted, int64_t delta_samples,
                                  uint64_t *counts);

bs_status bs_compare(const bs_sorting *gt, const bs_sorting *sorted, double fs_hz, const bs_compare_params *p,
                     bs_compare_result *r);
void bs_compare_result_free(bs_compare_result *r);

/* Step 8. Chunks of the noise estimate: BS_GT_SNR_CHUNKS evenly spaced
 * chunks of BS_GT_SNR_CHUNK_SAMPLES samples (SpikeInterface's
 * get_noise_levels defaults, without its random draw). */
#define BS_GT_SNR_CHUNKS 20
#define BS_GT_SNR_CHUNK_SAMPLES 10000
/* snr[a] of each GT unit a of gt (gt->n_units values). *have = 0 and snr
 * untouched when gt_folder lacks gt_templates.npy or a recording
 * (recording.bin): then there is no SNR to report. BS_ERR_INPUT when the
 * templates do not fit the recording (not float32 (U, nt, file columns), or
 * a unit id >= U). */
bs_status bs_gt_unit_snr(const char *gt_folder, const bs_sorting *gt, double *snr, int *have);
/* Store snr (r->n_gt_units values, from bs_gt_unit_snr) in r and count the
 * SNR >= p->snr_threshold units and the well detected among them. */
void bs_compare_set_snr(bs_compare_result *r, const double *snr, const bs_compare_params *p);

/* Human-readable table and summary. */
void bs_compare_print_table(const bs_compare_result *r, FILE *out);
/* One-line JSON summary with the per-unit list under "units"; malloc'ed
 * string (free with free()), NULL on allocation failure. */
char *bs_compare_json(const bs_compare_result *r, const char *sorting_path, const char *gt_path);

#endif
