/*
 * ccg.h - cross- and auto-correlograms and the refractoriness metrics of
 * docs/ALGORITHM.md §9.1.
 *
 * Correlogram. Two spike trains of sample times (int64, sorted ascending) at
 * fs Hz. For every pair (a in train 1, b in train 2) the lag b - a, in ms, is
 * rounded to the nearest integer (half away from zero); pairs with |lag| <=
 * 500 ms are counted in bin lag + 500 of 1001 one-millisecond bins. A two-
 * pointer sweep keeps the window of train 1 that lies within ±500.5 ms of the
 * current spike of train 2, so the cost is O(n1 + n2 + pairs counted). An
 * autocorrelogram is the CCG of a train with itself: its zero-lag bin holds
 * the n self-pairs (the metrics ignore that bin).
 *
 * Metrics. With T the span (s) of both trains together and λ = 0.001·n1·n2/T
 * the count per bin expected for independent trains:
 *   R00 = mean count over |lag| in 251..500 ms, divided by λ (baseline);
 *   R01 = max of the same over lags -49..-10 ms and +10..+49 ms (shoulders);
 *   Q00 = the largest of those three mean counts (counts per bin);
 *   for i = 1..10, with the zero-lag bin set to 0 and n_i the count over lags
 *   -i..+i: R_i = n_i / (2i·λ) and p_i = ½(1 + erf((n_i/2 - Q00·i) / sqrt(2·Q00·i)))
 *   (a normal approximation of the probability of so few counts under the
 *   shoulder/baseline rate);
 *   R12 = min_i R_i / max(R00, R01), Q12 = min_i p_i.
 * A train with no baseline (R00 = R01 = 0) or no pairs gives R12 = 1, Q12 = 1:
 * refractoriness cannot be shown.
 *
 * A unit is "good" if its ACG has R12 < acg_threshold (0.2) and Q12 < 0.2.
 * Two units are cross-refractory if their CCG has R12 < ccg_threshold (0.25)
 * and Q12 < 0.05: the intended test of Kilosort's splitter (the reference
 * disables it by a bug, docs/ALGORITHM.md §12; we do not).
 */
#ifndef BS_CCG_H
#define BS_CCG_H

#include <stdint.h>

#include "../common/status.h"

#define BS_CCG_HALF 500                     /* bins each side of zero lag */
#define BS_CCG_BINS (2 * BS_CCG_HALF + 1)   /* 1001 bins of 1 ms */

typedef struct {
    double R00;  /* baseline / λ, unitless */
    double R01;  /* max shoulder / λ, unitless */
    double Q00;  /* largest mean count per bin among baseline and shoulders, counts */
    double R12;  /* refractory-violation ratio, unitless */
    double Q12;  /* probability-like significance of the refractory dip, 0..1 */
} bs_ccg_metrics;

/* counts[BS_CCG_BINS]: bin b holds pairs with rounded lag (b - 500) ms,
 * lag = t2 - t1. Both trains sorted ascending (sample times at fs_hz). */
void bs_ccg_counts(const int64_t *t1, int64_t n1, const int64_t *t2, int64_t n2, double fs_hz, int64_t *counts);

/* Metrics from counts; span_s = time span of both trains, seconds. */
bs_ccg_metrics bs_ccg_metrics_from_counts(const int64_t *counts, int64_t n1, int64_t n2, double span_s);

/* CCG + metrics of two sorted trains (t1 == t2 and n1 == n2 for an ACG). */
bs_ccg_metrics bs_ccg_metrics_of(const int64_t *t1, int64_t n1, const int64_t *t2, int64_t n2, double fs_hz);

/* ACG test: R12 < acg_threshold and Q12 < 0.2. Trains with <= 10 spikes or
 * zero span are not good (metrics, if wanted, get R12 = 0, Q12 = 1). */
int bs_ccg_is_good(const int64_t *t, int64_t n, double fs_hz, double acg_threshold, bs_ccg_metrics *m);

/* The same ACG test on a train that arrives one spike at a time, in time
 * order, without keeping it: each new spike b counts its pairs with the
 * earlier spikes a that lie within the ±500 ms window (both lags b - a and
 * a - b, and the zero-lag self pair), exactly the integers bs_ccg_counts
 * gives on the whole train; only the spikes of the last window are kept
 * (a ring under the tag "cluster/acg"). */
typedef struct {
    int64_t counts[BS_CCG_BINS];
    int64_t n, first, last; /* spikes, first and last sample */
    int64_t *ring;          /* the spikes of the last window, oldest at head */
    int64_t cap, head, len;
} bs_acg_stream;

bs_status bs_acg_stream_add(bs_acg_stream *a, int64_t t, double fs_hz);
int bs_acg_stream_is_good(const bs_acg_stream *a, double fs_hz, double acg_threshold, bs_ccg_metrics *m);
void bs_acg_stream_free(bs_acg_stream *a);

/* CCG test: R12 < ccg_threshold and Q12 < 0.05. */
int bs_ccg_cross_refractory(const int64_t *t1, int64_t n1, const int64_t *t2, int64_t n2, double fs_hz,
                            double ccg_threshold, bs_ccg_metrics *m);

/* Whether the CCG test above could not pass whatever the trains hold: even an
 * empty central window gives p_10 >= 0.05, i.e. Q00·10/2 <= 1.645², a
 * baseline under about 0.54 pairs per 1-ms bin (a train of a few dozen
 * spikes, or two trains that barely overlap in time, as the two halves of a
 * unit split by drift do). */
int bs_ccg_underpowered(const bs_ccg_metrics *m);

#endif
