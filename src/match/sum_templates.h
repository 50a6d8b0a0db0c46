/*
 * sum_templates.h - templates that are the sum of two others at some lags,
 * or a copy of one (sum_templates.c; docs/ALGORITHM.md §7.6): found after
 * clustering and removed before matching, so that two units' overlapping
 * spikes are peeled as a pair instead of as a third unit, and a unit's
 * spikes are not shared between two copies of its template.
 */
#ifndef BS_SUM_TEMPLATES_H
#define BS_SUM_TEMPLATES_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "match.h"

typedef struct {
    double max_resid;        /* a sum leaves at most this share of the template's norm (0.35; 0: off) */
    double min_single_resid; /* ...and the best single template at least this share (0.35) */
    double min_lag_ms;       /* ...with its two parts at least this far apart, ms (0.1) */
    double max_amp_ratio;    /* each part's amplitude in the sum within this factor of its own (2) */
    double max_copy_resid;   /* a template that one other fits leaving at most this share of its norm is a copy
                                and is removed too (0.15; 0: off)... */
    double max_copy_amp_ratio; /* ...when their mean amplitudes are within this factor (1.2) */
} bs_sum_template_params;

void bs_sum_template_params_default(bs_sum_template_params *p);

/* The best fit of template k by one, then two other templates (unit norm each). */
typedef struct {
    int32_t a, b;   /* the two templates (-1: no pair with positive weights) */
    int32_t la, lb; /* their delays relative to k, samples */
    float wa, wb;   /* their least-squares weights (k has unit norm) */
    int32_t a1, l1; /* the best single template (-1: none) and its delay, samples */
    float w1;       /* its weight */
    float r1;       /* residual norm share left by the best single template (1: none correlates) */
    float r2;       /* residual norm share left by the pair a, b */
} bs_sum_fit;

/* Bytes of the fitting workspace: max_row = the most overlapping templates of one template (pair-table row). */
size_t bs_sum_templates_ws_bytes(int max_row, int nt, int n_threads);

/* fit[k] for every template, its two parts at least min_lag samples apart; pt needs only its neighbour lists
 * (any storage mode). */
bs_status bs_sum_templates_fit(const bs_match_templates *t, const bs_pair_table *pt, int min_lag, int n_threads,
                               bs_sum_fit *fit);

enum { BS_SUM_KEEP = 0, BS_SUM_SUM = 1, BS_SUM_COPY = 2 };

/* drop[k] = BS_SUM_SUM or BS_SUM_COPY for the templates taken as sums or copies, else BS_SUM_KEEP (lowest
 * residual first; a part of one already taken is kept, and so is one whose part was taken); returns their
 * count, -1 without memory. */
int bs_sum_templates_select(const bs_match_templates *t, const bs_sum_fit *fit, const bs_sum_template_params *p,
                            uint8_t *drop);

#endif
