/*
 * truncated.h - templates whose matching threshold cuts their unit's
 * amplitudes off (truncated.c; docs/ALGORITHM.md §8.4, "Templates the
 * threshold truncates"): found from the amplitudes of a first matching pass
 * and given a lower threshold of their own for a second.
 *
 * A unit whose spikes score about the threshold on its own template keeps
 * only the top of its amplitudes: they pile against the threshold, and its
 * learned amplitude a_k (the norm of the mean waveform it was learned from,
 * detections over th_universal, the top of the top) lies well above their
 * median. Such a template's amplitudes, seen over the threshold only, are
 * fitted by a normal distribution truncated there (maximum likelihood on
 * their histogram, on a fixed grid of means and spreads, so the same counts
 * give the same bits), and its threshold becomes mu - sigma, at least
 * `floor`. The second pass re-peels such templates together with the
 * templates that overlap them (bs_trunc_partners; stage_match.c).
 */
#ifndef BS_TRUNCATED_H
#define BS_TRUNCATED_H

#include <stddef.h>
#include <stdint.h>

#include "match.h"

typedef struct {
    float floor;          /* a truncated template's threshold is at least this, whitened units (6; 0: no second
                             matching pass) */
    double median_of_th;  /* a template is truncated when its matched amplitudes' median is under this times
                             the threshold (1.25)... */
    double median_of_amp; /* ...and under this times its amplitude a_k (0.85)... */
    double max_amp_of_th; /* ...its a_k under this times the threshold (2: a larger unit's template taking small
                             spikes is not one)... */
    int min_spikes;       /* ...and it has at least this many matched spikes (30); */
    double min_drop;      /* its fitted threshold counts when at least this far under the threshold, whitened
                             units (1.5) */
    double overlap;       /* the second pass re-peels the lowered templates and every template whose waveform
                             overlaps one of them by at least this (the largest |UtU| over lags, unit-norm
                             templates; 0, the default: every template sharing a channel); the others keep
                             their first-pass spikes */
    float amp_prior;      /* weight of the amplitude prior (match.h) in the second pass, its centres
                             match.amp_prior_of_amplitude times a_k (0.1; 0: none) */
    double dup_ms;        /* in the second pass a lowered template's spike under the threshold within this of
                             a larger spike of another template is that spike's residual and is dropped (0.2;
                             0: none; bs_trunc_drop_residuals) */
} bs_trunc_params;

void bs_trunc_params_default(bs_trunc_params *p);

/* Histogram bins per template: BS_TRUNC_BINS of threshold / 160 over [threshold, 3 threshold), then one bin
 * for every amplitude above. */
#define BS_TRUNC_BINS 320
size_t bs_trunc_hist_bytes(int K);

/* Adds n matched spikes (template tmpl[i], amplitude amp[i]) to hist (K x (BS_TRUNC_BINS + 1), zeroed by the
 * caller); amplitudes under threshold (a template of its own, lower threshold) are not counted. */
void bs_trunc_hist_add(int32_t *hist, float threshold, const int32_t *tmpl, const float *amp, int64_t n);

/* Thresholds for the second pass into thk (K): each template whose threshold own[k] (NULL: all at
 * threshold) is threshold and whose histogram shows it truncated (bs_trunc_params) gets
 * max(floor, mu - sigma) where that is at least min_drop under threshold, every other one own[k] (or
 * threshold). norm_in: the templates'
 * amplitudes a_k. Returns the templates given a threshold under `threshold`. */
int bs_trunc_thresholds(const bs_trunc_params *p, const int32_t *hist, int K, float threshold,
                        const float *norm_in, const float *own, float *thk);

/* The templates a second pass re-peels, into in (K, 0/1): each lowered one (lowered[k]) and each template j
 * of the pair table's row of a lowered k whose pair row UtU[j, k, .] reaches min_overlap in absolute value.
 * Returns how many (-1: out of memory). */
int bs_trunc_partners(const bs_match_templates *t, const bs_pair_table *pt, const uint8_t *lowered,
                      double min_overlap, uint8_t *in);

/* Of the n spikes s (sorted by time), those of a lowered template (lowered[tmpl]) with an amplitude under
 * threshold that lie within dup samples of a spike of another template with a larger amplitude are removed
 * (the rest keep their order): a lowered threshold lets in the residual a larger spike leaves beside it.
 * scratch holds n ints. Returns the spikes left. */
int64_t bs_trunc_drop_residuals(bs_spike *s, int64_t n, const uint8_t *lowered, float threshold, int64_t dup,
                                int32_t *scratch);

#endif
