/*
 * peel.c - per-batch template matching by peeling (docs/ALGORITHM.md §8.4, our
 * variant; the contract is in match.h above bs_peel_batch).
 *
 * Mechanism, one window:
 *   1. B = scores of every template at every sample (templates.c).
 *   2. Column scan: bmax[t] = max_k B[k, t], imax[t] its template (lowest k on
 *      ties), scanned row by row over time segments in parallel; every column
 *      is reduced in the same order whatever the thread count. With the
 *      amplitude prior (weight w > 0, amplitudes a_k) each score counts as
 *      e = B^2 - w (B - a_k)^2 (B where B <= 0), and step 3 compares e with
 *      squared thresholds; the amplitude kept is B itself. With per-template
 *      thresholds th_k a score not over its own template's threshold counts
 *      as UNDER_OWN (scan_rows_own), so that a template over its own
 *      threshold wins the column from any template under its own: a low-tier
 *      unit's spike, which scores 6-8 on its own template, is taken where a
 *      larger unit's template fits the same samples at, say, 7.5 against its
 *      threshold of 8 (without this the column's best template is the larger
 *      unit's, under its threshold, and the sample is passed over). Such a
 *      column then suppresses no neighbour either (step 3): only scores over
 *      their own thresholds compete.
 *   3. Accept every valid t with bmax[t] > threshold that is the maximum in
 *      [t - nt, t + nt] (strict towards earlier samples, non-strict towards
 *      later ones). Accepted spikes are then more than nt apart, so their
 *      waveforms do not overlap and their amplitudes a = B[k, t] (the
 *      least-squares fit of a unit-norm template) do not depend on each other.
 *      Threshold rule: with unit-norm templates on whitened data, B[k,t] is in
 *      noise standard deviations, so "a > threshold" equals Kilosort's
 *      relu(B)^2/|T|^2 > Th^2.
 *   4. Subtract: X[S_k, t - nt_before + s] -= a W_k (windows disjoint, in
 *      parallel over spikes); B[j, t + d] -= a UtU[j, k, d] for the stored
 *      neighbours j of k, first for the even-indexed spikes then the odd ones:
 *      within one group spikes are more than 2nt apart, so their update windows
 *      [t - nt + 1, t + nt - 1] are disjoint and each B element gets its
 *      updates in a fixed order (even group, then odd group).
 *   5. Rescan only the merged column ranges touched in 4 (the others did not
 *      change), and with many templates only the groups of rows holding a
 *      neighbour of a subtracted template (PEEL_GROUP below); repeat until
 *      no spike is accepted or max_iter.
 *   6. When nothing is accepted, a collision pass (collision_pass below)
 *      refits overlapping spikes as least-squares pairs, in time order,
 *      sequentially; only spikes near a change since the previous pass are
 *      examined (ws->mark, +-3 nt around every change). If it changed
 *      anything, the marked columns are rescanned and 3-5 resume.
 * The workspace is sized once per run: max_iter * (n_t / (nt+1) + 1) spikes
 * per window (plain iterations cannot exceed it; collision passes stop adding
 * at it), so there is no growth and no overflow.
 *
 * Halo rule: every spike found is subtracted, only those whose trough lies in
 * the central part [c_begin, c_end) are reported. With central parts tiling
 * the recording and a halo >= 2 nt, a spike near a border sees the same data
 * in both windows and is reported by the one window that owns its sample.
 * Known limit: the two windows peel independently, so if a far-away
 * difference (beyond the halo) changed a border spike's time by one sample it
 * could be reported twice or not at all; the tests place spikes at, before,
 * after and across borders and get each exactly once.
 */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/simd.h"
#include "gpu/gpu.h"
#include "match/match.h"
#include "mem/mem.h"

#define SCAN_SEG 2048 /* columns per parallel scan segment */
/* Many templates: the column scan keeps each group of PEEL_GROUP templates'
 * best score per sample (gmax, gimax), so that after a subtraction only the
 * groups holding a neighbour of the subtracted template are rescanned, then
 * the n_groups group maxima; with K = 17,345 that is a few thousand rows and
 * 272 groups per column instead of 17,345 rows. The groups are scanned in
 * ascending order with a strict comparison, as the rows within a group, so
 * the best template of a column is the same (lowest k on ties; scores are
 * finite: the data and the templates are). */
#define PEEL_GROUP 64
/* What a score under its own template's threshold counts as in the column
 * scan (with per-template thresholds): below any score over its own threshold
 * (thresholds are positive), and finite, as the group scan needs; which of
 * several such templates a column keeps is never used. */
#define UNDER_OWN (-FLT_MAX)
#define PEEL_GROUP_MIN_K 2048

static int forced_group_rows; /* bs_peel_force_groups (tests) */

void bs_peel_force_groups(int rows)
{
    forced_group_rows = rows > 0 ? rows : 0;
}

static int group_rows(void)
{
    return forced_group_rows ? forced_group_rows : PEEL_GROUP;
}

static int groups_of(int K)
{
    const int g = group_rows();
    return K >= PEEL_GROUP_MIN_K || forced_group_rows ? (K + g - 1) / g : 0;
}

void bs_peel_params_default(bs_peel_params *p)
{
    p->threshold = 8.0f;
    p->max_iter = 50;
    p->tmpl_threshold = NULL;
    p->amp_mu = NULL;
    p->amp_prior = 0.0f;
}

static int64_t max_cand_of(int64_t n_t, int nt)
{
    return n_t / (nt + 1) + 1;
}

size_t bs_peel_ws_bytes(const bs_match_templates *t, int64_t n_t, int max_iter, int n_threads)
{
    if (n_threads <= 0)
        n_threads = omp_get_max_threads();
    int64_t mc = max_cand_of(n_t, t->nt);
    size_t b = bs_match_scores_bytes(t->K, n_t);
    b += sizeof(float) * (size_t)n_t;                                   /* bmax */
    b += sizeof(int32_t) * (size_t)n_t;                                 /* imax */
    b += sizeof(int64_t) * (size_t)mc * 3;                              /* cand, ivl */
    b += (sizeof(int32_t) + sizeof(float)) * (size_t)mc;                /* ctmpl, camp */
    b += sizeof(bs_spike) * (size_t)max_iter * (size_t)mc;              /* spk */
    b += (size_t)n_t;                                                   /* mark */
    b += sizeof(float) * (size_t)(n_threads + 2) * (size_t)(2 * t->nt - 1); /* rowbuf */
    const int ng = groups_of(t->K);
    b += (sizeof(float) + sizeof(int32_t)) * (size_t)ng * (size_t)n_t; /* gmax, gimax */
    b += (size_t)n_threads * (size_t)ng;                                /* gsel */
    b += sizeof(int64_t) * (size_t)(mc + 1);                            /* ivs */
    b += bs_match_scores_ws_bytes(t, n_threads);
    b += sizeof(float) * (size_t)t->n_chan * (size_t)n_t;              /* Y */
    return b;
}

void bs_peel_ws_free(bs_peel_ws *ws)
{
    if (!ws)
        return;
    bs_mem_free(ws->B);
    bs_mem_free(ws->bmax);
    bs_mem_free(ws->imax);
    bs_mem_free(ws->cand);
    bs_mem_free(ws->ivl);
    bs_mem_free(ws->spk);
    bs_mem_free(ws->mark);
    bs_mem_free(ws->ctmpl);
    bs_mem_free(ws->camp);
    bs_mem_free(ws->rowbuf);
    bs_mem_free(ws->gmax);
    bs_mem_free(ws->gimax);
    bs_mem_free(ws->gsel);
    bs_mem_free(ws->ivs);
    bs_mem_free(ws->Y);
    bs_match_scores_ws_free(&ws->sws);
    memset(ws, 0, sizeof *ws);
}

bs_status bs_peel_ws_alloc(const bs_match_templates *t, int64_t n_t, int max_iter, int n_threads, bs_peel_ws *ws)
{
    memset(ws, 0, sizeof *ws);
    if (n_t < 1 || max_iter < 1)
        return bs_error(BS_ERR_INTERNAL, "peel workspace: expected n_t >= 1 and max_iter >= 1, got %lld and %d",
                        (long long)n_t, max_iter);
    if (n_threads <= 0)
        n_threads = omp_get_max_threads();
    ws->n_t = n_t;
    ws->max_iter = max_iter;
    ws->n_threads = n_threads;
    ws->max_cand = max_cand_of(n_t, t->nt);
    ws->max_spikes = (int64_t)max_iter * ws->max_cand;
    ws->B = bs_mem_alloc("match/scores", bs_match_scores_bytes(t->K, n_t));
    ws->bmax = bs_mem_alloc("match/peel", sizeof(float) * (size_t)n_t);
    ws->imax = bs_mem_alloc("match/peel", sizeof(int32_t) * (size_t)n_t);
    ws->cand = bs_mem_alloc("match/peel", sizeof(int64_t) * (size_t)ws->max_cand);
    ws->ivl = bs_mem_alloc("match/peel", sizeof(int64_t) * (size_t)ws->max_cand * 2);
    ws->spk = bs_mem_alloc("match/peel", sizeof(bs_spike) * (size_t)ws->max_spikes);
    ws->mark = bs_mem_alloc("match/peel", (size_t)n_t);
    ws->ctmpl = bs_mem_alloc("match/peel", sizeof(int32_t) * (size_t)ws->max_cand);
    ws->camp = bs_mem_alloc("match/peel", sizeof(float) * (size_t)ws->max_cand);
    ws->rowbuf = bs_mem_alloc("match/peel", sizeof(float) * (size_t)(n_threads + 2) * (size_t)(2 * t->nt - 1));
    ws->Y = bs_mem_alloc("match/peel", sizeof(float) * (size_t)t->n_chan * (size_t)n_t);
    ws->n_groups = groups_of(t->K);
    ws->group_rows = group_rows();
    ws->ivs = bs_mem_alloc("match/peel", sizeof(int64_t) * (size_t)(ws->max_cand + 1));
    int gfail = 0;
    if (ws->n_groups) {
        ws->gmax = bs_mem_alloc("match/peel", sizeof(float) * (size_t)ws->n_groups * (size_t)n_t);
        ws->gimax = bs_mem_alloc("match/peel", sizeof(int32_t) * (size_t)ws->n_groups * (size_t)n_t);
        ws->gsel = bs_mem_alloc("match/peel", (size_t)n_threads * (size_t)ws->n_groups);
        gfail = !ws->gmax || !ws->gimax || !ws->gsel;
    }
    if (!ws->B || !ws->bmax || !ws->imax || !ws->cand || !ws->ivl || !ws->ctmpl || !ws->camp || !ws->rowbuf ||
        !ws->spk || !ws->mark || !ws->Y || !ws->ivs || gfail) {
        bs_peel_ws_free(ws);
        return BS_ERR_MEMORY;
    }
    bs_status st = bs_match_scores_ws_alloc(t, n_threads, &ws->sws);
    if (st != BS_OK) {
        bs_peel_ws_free(ws);
        return st;
    }
    return BS_OK;
}

/* best/ibest over columns [lo, hi) of rows [k0, k1) of B (row stride n_t):
 * the largest score of each column and its first template. Branch-free, so
 * that it vectorises. */
BS_VECTORIZED
static void scan_rows(const float *restrict B, int k0, int k1, int64_t n_t, int64_t lo, int64_t hi,
                      float *restrict best, int32_t *restrict ibest)
{
    const float *restrict r0 = B + (size_t)k0 * n_t;
    for (int64_t c = lo; c < hi; c++) {
        best[c] = r0[c];
        ibest[c] = k0;
    }
    for (int k = k0 + 1; k < k1; k++) {
        const float *restrict row = B + (size_t)k * n_t;
        for (int64_t c = lo; c < hi; c++) {
            const int gt = row[c] > best[c];
            best[c] = gt ? row[c] : best[c];
            ibest[c] = gt ? k : ibest[c];
        }
    }
}

/* scan_rows with the amplitude prior: each score B is compared as
 * e = B^2 - w (B - mu_k)^2 where B > 0, B itself otherwise (never above a
 * positive threshold's square); with per-template thresholds th (or NULL),
 * e counts as UNDER_OWN where it is not over th_k^2 (scan_rows_own). */
BS_VECTORIZED
static void scan_rows_prior(const float *restrict B, int k0, int k1, int64_t n_t, int64_t lo, int64_t hi,
                            float *restrict best, int32_t *restrict ibest, const float *restrict mu, float w,
                            const float *restrict th)
{
    for (int k = k0; k < k1; k++) {
        const float *restrict row = B + (size_t)k * n_t;
        const float m = mu[k], t = th ? th[k] * th[k] : -FLT_MAX; /* -FLT_MAX: every finite e stays */
        for (int64_t c = lo; c < hi; c++) {
            const float v = row[c], d = v - m;
            const float e0 = v > 0.0f ? v * v - w * d * d : v;
            const float e = e0 > t ? e0 : UNDER_OWN;
            const int gt = k == k0 || e > best[c];
            best[c] = gt ? e : best[c];
            ibest[c] = gt ? k : ibest[c];
        }
    }
}

/* scan_rows with per-template thresholds th: a score counts as itself where
 * it is over its template's threshold, UNDER_OWN where not. */
BS_VECTORIZED
static void scan_rows_own(const float *restrict B, int k0, int k1, int64_t n_t, int64_t lo, int64_t hi,
                          float *restrict best, int32_t *restrict ibest, const float *restrict th)
{
    for (int k = k0; k < k1; k++) {
        const float *restrict row = B + (size_t)k * n_t;
        const float t = th[k];
        for (int64_t c = lo; c < hi; c++) {
            const float e = row[c] > t ? row[c] : UNDER_OWN;
            const int gt = k == k0 || e > best[c];
            best[c] = gt ? e : best[c];
            ibest[c] = gt ? k : ibest[c];
        }
    }
}

/* scan_rows, or scan_rows_prior when the window has an amplitude prior (with
 * its per-template thresholds, if any), or scan_rows_own when it has only
 * per-template thresholds */
static void scan_rows_ws(const float *B, int k0, int k1, int64_t n_t, int64_t lo, int64_t hi, float *best,
                         int32_t *ibest, const bs_peel_ws *ws)
{
    if (ws->amp_mu)
        scan_rows_prior(B, k0, k1, n_t, lo, hi, best, ibest, ws->amp_mu, ws->amp_prior, ws->thk);
    else if (ws->thk)
        scan_rows_own(B, k0, k1, n_t, lo, hi, best, ibest, ws->thk);
    else
        scan_rows(B, k0, k1, n_t, lo, hi, best, ibest);
}

/* A threshold on bmax's scale: squared when the scan holds e (the prior). */
static inline float on_scale(float th, int sq) { return sq ? th * th : th; }

/* bmax/imax over [lo, hi) from the groups' maxima, groups ascending. */
BS_VECTORIZED
static void merge_groups(const float *restrict gmax, const int32_t *restrict gimax, int ng, int64_t n_t, int64_t lo,
                         int64_t hi, float *restrict bmax, int32_t *restrict imax)
{
    for (int64_t c = lo; c < hi; c++) {
        bmax[c] = gmax[c];
        imax[c] = gimax[c];
    }
    for (int g = 1; g < ng; g++) {
        const float *restrict m = gmax + (size_t)g * n_t;
        const int32_t *restrict im = gimax + (size_t)g * n_t;
        for (int64_t c = lo; c < hi; c++) {
            const int gt = m[c] > bmax[c];
            bmax[c] = gt ? m[c] : bmax[c];
            imax[c] = gt ? im[c] : imax[c];
        }
    }
}

/* One group's maxima over [lo, hi). */
static void scan_group(const float *B, int K, int64_t n_t, int g, int64_t lo, int64_t hi, bs_peel_ws *ws)
{
    const int k0 = g * ws->group_rows, k1 = k0 + ws->group_rows < K ? k0 + ws->group_rows : K;
    scan_rows_ws(B, k0, k1, n_t, lo, hi, ws->gmax + (size_t)g * n_t, ws->gimax + (size_t)g * n_t, ws);
}

/* bmax/imax over columns [lo, hi) of every row (and every group's maxima). */
static void scan_cols(const float *B, int K, int64_t n_t, int64_t lo, int64_t hi, bs_peel_ws *ws)
{
    if (!ws->n_groups) {
        scan_rows_ws(B, 0, K, n_t, lo, hi, ws->bmax, ws->imax, ws);
        return;
    }
    for (int g = 0; g < ws->n_groups; g++)
        scan_group(B, K, n_t, g, lo, hi, ws);
    merge_groups(ws->gmax, ws->gimax, ws->n_groups, n_t, lo, hi, ws->bmax, ws->imax);
}

/* After subtracting the spikes [i0, i1) (templates tk), whose score updates
 * all lie in [lo, hi): rescan the groups holding a neighbour of one of them,
 * then the group maxima; sel is the calling thread's n_groups flags. */
static void rescan_after(const bs_pair_table *pt, const float *B, int K, int64_t n_t, int64_t lo, int64_t hi,
                         const int32_t *tk, int64_t i0, int64_t i1, uint8_t *sel, bs_peel_ws *ws)
{
    if (!ws->n_groups) {
        scan_cols(B, K, n_t, lo, hi, ws);
        return;
    }
    memset(sel, 0, (size_t)ws->n_groups);
    for (int64_t i = i0; i < i1; i++)
        for (int64_t m = pt->row_start[tk[i]]; m < pt->row_start[tk[i] + 1]; m++)
            sel[pt->nbr[m] / ws->group_rows] = 1;
    for (int g = 0; g < ws->n_groups; g++)
        if (sel[g])
            scan_group(B, K, n_t, g, lo, hi, ws);
    merge_groups(ws->gmax, ws->gimax, ws->n_groups, n_t, lo, hi, ws->bmax, ws->imax);
}

int bs_spike_cmp(const void *a, const void *b)
{
    const bs_spike *x = a, *y = b;
    if (x->time != y->time)
        return x->time < y->time ? -1 : 1;
    if (x->tmpl != y->tmpl)
        return x->tmpl < y->tmpl ? -1 : 1;
    return (x->amp > y->amp) - (x->amp < y->amp);
}

/* Subtract spikes cand[i0], cand[i0+2], ... from B through the pair table. */
static void update_scores(const bs_match_templates *t, const bs_pair_table *pt, float *B, int64_t n_t,
                          const int64_t *cand, const int32_t *tk, const float *ta, int64_t n_c, int64_t i0,
                          float *rowbuf, int n_threads)
{
    const int nt = t->nt, nl = 2 * nt - 1;
#pragma omp parallel for schedule(dynamic, 4) num_threads(n_threads)
    for (int64_t i = i0; i < n_c; i += 2) {
        float *rb = rowbuf + (size_t)omp_get_thread_num() * nl;
        const int64_t tc = cand[i];
        const int k = tk[i];
        const float a = ta[i];
        int64_t d_lo = -(nt - 1), d_hi = nt - 1;
        if (tc + d_lo < 0)
            d_lo = -tc;
        if (tc + d_hi > n_t - 1)
            d_hi = n_t - 1 - tc;
        for (int64_t m = pt->row_start[k]; m < pt->row_start[k + 1]; m++) {
            const int j = pt->nbr[m];
            const float *v = bs_pair_get(t, pt, k, m, rb);
            float *row = B + (size_t)j * n_t + tc;
            for (int64_t d = d_lo; d <= d_hi; d++)
                row[d] -= a * v[d + nt - 1];
        }
    }
}

/* X[S_k, tc - nt_before + s] -= a W_k[., s] for s in [lo, hi) (of [0, nt)), W_k[c, s] = Σ_q U_k[c, q]
 * basis[q, s] summed over q ascending from 0; 64 samples at a time, each sum built across the samples (one
 * component per sweep, the same order), so that it vectorises. */
#define SUB_CHUNK 64
BS_VECTORIZED
static void subtract_part(const bs_match_templates *t, float *X, size_t ldx, int k, int64_t tc, float a, int lo, int hi)
{
    const int nt = t->nt, P = t->n_pc, ns = t->n_sup;
    const float *u = t->U + (size_t)k * ns * P;
    const int32_t *sup = t->support + (size_t)k * ns;
    const int64_t s0 = tc - t->nt_before;
    float w[SUB_CHUNK];
    for (int ci = 0; ci < ns; ci++) {
        float *x = X + (size_t)sup[ci] * ldx;
        for (int c0 = lo; c0 < hi; c0 += SUB_CHUNK) {
            const int len = hi - c0 < SUB_CHUNK ? hi - c0 : SUB_CHUNK;
            for (int s = 0; s < len; s++)
                w[s] = 0.0f;
            for (int q = 0; q < P; q++) {
                const float uq = u[ci * P + q], *b = t->basis + (size_t)q * nt + c0;
                for (int s = 0; s < len; s++)
                    w[s] += uq * b[s];
            }
            for (int s = 0; s < len; s++)
                x[s0 + c0 + s] -= a * w[s];
        }
    }
}

/* The whole waveform (it lies inside the window). */
static void subtract_residual(const bs_match_templates *t, float *X, size_t ldx, int k, int64_t tc, float a)
{
    subtract_part(t, X, ldx, k, tc, a, 0, t->nt);
}

void bs_peel_subtract(const bs_match_templates *t, float *X, size_t ldx, int64_t n_t, int k, int64_t tc, float a)
{
    const int nt = t->nt;
    const int64_t s0 = tc - t->nt_before;
    if (s0 + nt <= 0 || s0 >= n_t)
        return;
    subtract_part(t, X, ldx, k, tc, a, s0 < 0 ? (int)-s0 : 0, s0 + nt > n_t ? (int)(n_t - s0) : nt);
}

/* One spike's score update, rows in neighbour order (sequential). */
static void update_one(const bs_match_templates *t, const bs_pair_table *pt, float *B, int64_t n_t, int k,
                       int64_t tc, float a, float *rb)
{
    const int nt = t->nt;
    int64_t d_lo = -(nt - 1), d_hi = nt - 1;
    if (tc + d_lo < 0)
        d_lo = -tc;
    if (tc + d_hi > n_t - 1)
        d_hi = n_t - 1 - tc;
    for (int64_t m = pt->row_start[k]; m < pt->row_start[k + 1]; m++) {
        const float *v = bs_pair_get(t, pt, k, m, rb);
        float *row = B + (size_t)pt->nbr[m] * n_t + tc;
        for (int64_t d = d_lo; d <= d_hi; d++)
            row[d] -= a * v[d + nt - 1];
    }
}

/* Row UtU[j, k, .] of pair m: from the table or computed into rb. */
static const float *pair_vals(const bs_match_templates *t, const bs_pair_table *pt, int64_t m, int k, float *rb)
{
    return bs_pair_get(t, pt, k, m, rb);
}
#define COLL_SHIFT 2 /* samples a spike may move when refitted as a pair */

/* mark[t - r .. t + r] = v, clipped to the window */
static void mark_range(uint8_t *mark, int64_t n_t, int64_t tc, int64_t r, uint8_t v)
{
    int64_t lo = tc - r < 0 ? 0 : tc - r, hi = tc + r >= n_t ? n_t - 1 : tc + r;
    for (int64_t u = lo; u <= hi; u++)
        mark[u] = v;
}

typedef struct {
    int j, e;      /* partner template, shift of the spike itself (samples) */
    int64_t t2;    /* partner time, window-relative */
    double a1, a2; /* least-squares amplitudes of the spike and the partner */
} pair_fit;

#define PAIR_CHUNK 64 /* partner lags screened together */

/* Screening of the pair fits of one partner (row: its scores; vpad: its pair
 * row with COLL_SHIFT zeros each side) at lags d0 .. d0 + len - 1 and shifts
 * e: hit[e + COLL_SHIFT][d - d0] = 1 unless best_pair's search passes the fit
 * over (partner or spike outside the window, c2 <= 0, 1 - rho^2 < 0.05, an
 * amplitude <= 0: (c - rho c') / den <= 0 exactly when c - rho c' <= 0, as
 * den > 0) or its gain cannot exceed gain_min: explained = N / den with
 * N <= (gain_min + e1) den (1 - 1e-9), a margin far above the rounding of
 * the division and subtraction. No division, lanes independent, so it
 * vectorises. Returns the number of hits. */
BS_VECTORIZED
static int pair_screen(const float *restrict row, const float *restrict vpad, int nt, int64_t t1, int d0, int len,
                       int64_t v0, int64_t v1, double a, const double *c1e, double e1, double gain_min,
                       uint8_t hit[2 * COLL_SHIFT + 1][PAIR_CHUNK])
{
    double c2v[PAIR_CHUNK];
    int ok2[PAIR_CHUNK];
    for (int i = 0; i < len; i++) {
        const int64_t t2 = t1 + d0 + i;
        const int in = t2 >= v0 && t2 <= v1;
        const double c2 = (in ? row[t2] : 0.0f) + a * vpad[d0 + i + nt - 1 + COLL_SHIFT];
        c2v[i] = c2;
        ok2[i] = in & (c2 > 0);
    }
    const double need = (gain_min + e1) * (1.0 - 1e-9);
    int n = 0;
    for (int e = -COLL_SHIFT; e <= COLL_SHIFT; e++) {
        const int64_t tt = t1 + e;
        const int ok1 = tt >= v0 && tt <= v1;
        const double c1 = c1e[e + COLL_SHIFT];
        uint8_t *he = hit[e + COLL_SHIFT];
        for (int i = 0; i < len; i++) {
            const double c2 = c2v[i];
            const double rho = vpad[d0 + i - e + nt - 1 + COLL_SHIFT];
            const double den = 1.0 - rho * rho;
            const int ok = ok1 & ok2[i] & !(den < 0.05) & (c1 - rho * c2 > 0) & (c2 - rho * c1 > 0) &
                           (c1 * c1 + c2 * c2 - 2 * rho * c1 * c2 > need * den);
            he[i] = (uint8_t)ok;
            n += ok;
        }
    }
    return n;
}

/* Best pair fit for spike s = (k, t1, a) with s put back (see collision_pass).
 * Returns 1 and fills *f if its gain over the best single fit exceeds gmin. */
static int best_pair(const bs_match_templates *t, const bs_pair_table *pt, const float *B, int64_t n_t, int64_t v0,
                     int64_t v1, int k, int64_t t1, double a, double gmin, float *rb, float *rb2, pair_fit *f)
{
    const int nt = t->nt;
    const float *vkk = NULL;
    for (int64_t m = pt->row_start[k]; m < pt->row_start[k + 1]; m++)
        if (pt->nbr[m] == k)
            vkk = pair_vals(t, pt, m, k, rb2);
    if (!vkk)
        return 0;
    double c1e[2 * COLL_SHIFT + 1], e1 = 0;
    for (int e = -COLL_SHIFT; e <= COLL_SHIFT; e++) {
        const int64_t tt = t1 + e;
        c1e[e + COLL_SHIFT] = 0;
        if (tt < v0 || tt > v1)
            continue;
        double c = B[(size_t)k * n_t + tt] + a * vkk[e + nt - 1];
        c1e[e + COLL_SHIFT] = c;
        if (c > 0 && c * c > e1)
            e1 = c * c;
    }
    double best_gain = gmin;
    int found = 0;
    float vpad[2 * 1000 - 1 + 2 * COLL_SHIFT]; /* v with COLL_SHIFT zeros each side (nt <= 1000) */
    for (int i = 0; i < COLL_SHIFT; i++)
        vpad[i] = vpad[2 * nt - 1 + COLL_SHIFT + i] = 0.0f;
    for (int64_t m = pt->row_start[k]; m < pt->row_start[k + 1]; m++) {
        const int j = pt->nbr[m];
        if (j == k)
            continue;
        const float *v = pair_vals(t, pt, m, k, rb); /* UtU[j, k, .] */
        memcpy(vpad + COLL_SHIFT, v, sizeof(float) * (size_t)(2 * nt - 1));
        const float *row = B + (size_t)j * n_t;
        for (int d0 = -(nt - 1); d0 <= nt - 1; d0 += PAIR_CHUNK) {
            const int len = nt - 1 - d0 + 1 < PAIR_CHUNK ? nt - 1 - d0 + 1 : PAIR_CHUNK;
            uint8_t hit[2 * COLL_SHIFT + 1][PAIR_CHUNK];
            if (!pair_screen(row, vpad, nt, t1, d0, len, v0, v1, a, c1e, e1, best_gain, hit))
                continue;
            /* the fits that passed, exactly as the search in (d, e) order takes them */
            for (int i = 0; i < len; i++)
                for (int e = -COLL_SHIFT; e <= COLL_SHIFT; e++) {
                    if (!hit[e + COLL_SHIFT][i])
                        continue;
                    const int d = d0 + i;
                    const double c2 = row[t1 + d] + a * v[d + nt - 1];
                    const double rho = vpad[d - e + nt - 1 + COLL_SHIFT];
                    const double den = 1.0 - rho * rho, c1 = c1e[e + COLL_SHIFT];
                    const double x1 = (c1 - rho * c2) / den, x2 = (c2 - rho * c1) / den;
                    const double gain = (c1 * c1 + c2 * c2 - 2 * rho * c1 * c2) / den - e1;
                    if (gain > best_gain) {
                        best_gain = gain;
                        f->j = j;
                        f->t2 = t1 + d;
                        f->e = e;
                        f->a1 = x1;
                        f->a2 = x2;
                        found = 1;
                    }
                }
        }
    }
    return found;
}

/*
 * Collision pass (after the plain peel has converged). A spike fitted alone
 * on two overlapping spikes absorbs part of its neighbour (and may sit a
 * sample or two off, the neighbour then being missed, or found late with the
 * wrong template or time). For every spike s = (k, t1, a), in time order:
 * if the next spike n overlaps it in time (closer than nt) and space, n is
 * put back into the residual; then s is put back and the best single fit
 * (template k at t1 + e, |e| <= COLL_SHIFT) is compared with the best pair
 * fit (k at t1 + e plus any neighbour template j != k at any t2 with the whole
 * template inside the window). With c1, c2 the scores of the residual with
 * both put back and rho = UtU[j, k, t2 - t1 - e], the pair explains
 * (c1^2 + c2^2 - 2 rho c1 c2) / (1 - rho^2) of the squared norm, one spike
 * c1^2. If the gain exceeds threshold^2 (for e = 0 the gain is z^2 with
 * z = (c2 - rho c1) / sqrt(1 - rho^2), a unit normal under noise alone, so
 * the false-positive rate is that of a plain score), both amplitudes are
 * positive and 1 - rho^2 >= 0.05, s is replaced by the least-squares pair
 * (the partner takes n's slot if n was put back); otherwise n is subtracted
 * again as it was. Only spikes near a change since the previous pass are
 * examined (ws->mark). Sequential, so deterministic. Returns the number of
 * spikes added or changed.
 */
static int64_t collision_pass(const bs_match_templates *t, const bs_pair_table *pt, float *X, size_t ldx, float *B,
                              int64_t n_t, int64_t v0, int64_t v1, float th, bs_spike *spk, int64_t *n_spk,
                              bs_peel_ws *ws)
{
    const int nt = t->nt, nl = 2 * nt - 1;
    float *rb = ws->rowbuf, *rb2 = ws->rowbuf + nl;
    qsort(spk, (size_t)*n_spk, sizeof(bs_spike), bs_spike_cmp);
    const int64_t n0 = *n_spk;
    int64_t changed = 0;
    uint8_t *mark = ws->mark;
    const int64_t reach = 3 * (int64_t)nt; /* scores a change can reach through a search */
    for (int64_t i = 0; i < n0; i++) {
        const int k = spk[i].tmpl;
        const int64_t t1 = spk[i].time;
        const double a = spk[i].amp;
        if (!mark[t1])
            continue; /* nothing near it changed since it was last examined */
        int64_t in = -1; /* the overlapping next spike, put back */
        if (i + 1 < n0 && spk[i + 1].time - t1 < nt && spk[i + 1].tmpl != k) {
            for (int64_t m = pt->row_start[k]; m < pt->row_start[k + 1]; m++)
                if (pt->nbr[m] == spk[i + 1].tmpl)
                    in = i + 1;
        }
        if (in < 0 && *n_spk >= ws->max_spikes)
            continue;
        if (in >= 0) {
            subtract_residual(t, X, ldx, spk[in].tmpl, spk[in].time, -spk[in].amp);
            update_one(t, pt, B, n_t, spk[in].tmpl, spk[in].time, -spk[in].amp, rb);
        }
        pair_fit f;
        if (!best_pair(t, pt, B, n_t, v0, v1, k, t1, a, (double)th * th, rb, rb2, &f)) {
            if (in >= 0) {
                subtract_residual(t, X, ldx, spk[in].tmpl, spk[in].time, spk[in].amp);
                update_one(t, pt, B, n_t, spk[in].tmpl, spk[in].time, spk[in].amp, rb);
            }
            continue;
        }
        /* put s back, then subtract the pair */
        subtract_residual(t, X, ldx, k, t1, (float)-a);
        update_one(t, pt, B, n_t, k, t1, (float)-a, rb);
        subtract_residual(t, X, ldx, k, t1 + f.e, (float)f.a1);
        update_one(t, pt, B, n_t, k, t1 + f.e, (float)f.a1, rb);
        subtract_residual(t, X, ldx, f.j, f.t2, (float)f.a2);
        update_one(t, pt, B, n_t, f.j, f.t2, (float)f.a2, rb);
        int moved = f.e != 0;
        spk[i].time = t1 + f.e;
        spk[i].amp = (float)f.a1;
        int64_t slot = in >= 0 ? in : (*n_spk)++;
        if (in < 0 || spk[slot].tmpl != f.j || spk[slot].time != f.t2)
            moved = 1;
        spk[slot].time = f.t2;
        spk[slot].tmpl = f.j;
        spk[slot].amp = (float)f.a2;
        changed += moved;
        if (moved) {
            mark_range(mark, n_t, t1, reach, 2);
            mark_range(mark, n_t, f.t2, reach, 2);
        }
        if (in >= 0)
            i++; /* the pair is settled */
    }
    /* what changed in this pass is what the next pass examines */
    for (int64_t u = 0; u < n_t; u++)
        mark[u] = mark[u] == 2;
    return changed;
}

bs_status bs_peel_batch(const bs_match_templates *t, const bs_pair_table *pt, float *X, size_t ldx, int64_t n_t,
                        int64_t t0_abs, int64_t c_begin, int64_t c_end, const bs_peel_params *p, bs_peel_ws *ws,
                        bs_spike *out, int64_t *n_out, int *n_iter)
{
    *n_out = 0;
    if (n_iter)
        *n_iter = 0;
    if (n_t < 1 || n_t > ws->n_t)
        return bs_error(BS_ERR_INTERNAL, "peel: window of %lld samples, workspace sized for %lld", (long long)n_t,
                        (long long)ws->n_t);
    if (c_begin < 0 || c_end > n_t || c_begin > c_end)
        return bs_error(BS_ERR_INTERNAL, "peel: central part [%lld, %lld) outside the window of %lld samples",
                        (long long)c_begin, (long long)c_end, (long long)n_t);
    if (!(p->threshold > 0) || !isfinite(p->threshold))
        return bs_error(BS_ERR_INPUT, "peel parameters: field 'threshold': expected a positive number, got %g",
                        (double)p->threshold);
    if (p->max_iter < 1 || p->max_iter > ws->max_iter)
        return bs_error(BS_ERR_INPUT, "peel parameters: field 'max_iter': expected 1..%d, got %d", ws->max_iter,
                        p->max_iter);
    if (!pt || pt->K != t->K || pt->n_lag != 2 * t->nt - 1)
        return bs_error(BS_ERR_INTERNAL, "peel: pair table does not match the %d templates", t->K);
    if ((int64_t)ldx < n_t)
        return bs_error(BS_ERR_INTERNAL, "peel: row stride %zu below the window length %lld", ldx, (long long)n_t);

    const int K = t->K, nt = t->nt, nb = t->nt_before;
    const float th = p->threshold, *thk = p->tmpl_threshold;
    float th_lo = th;
    if (thk)
        for (int k = 0; k < K; k++)
            th_lo = thk[k] < th_lo ? thk[k] : th_lo;
    /* with the amplitude prior bmax holds e (scan_rows_prior), compared with squared thresholds */
    ws->amp_mu = p->amp_mu && p->amp_prior > 0 ? p->amp_mu : NULL;
    ws->amp_prior = p->amp_prior;
    ws->thk = thk;
    const int sq = ws->amp_mu != NULL;
    const float th_lo_c = on_scale(th_lo, sq);
    float *B = ws->B;
    if (ws->gpu)
        BS_TRY(bs_gpu_scores(ws->gpu, X, ldx, n_t, B));
    else
        BS_TRY(bs_match_scores(t, X, ldx, n_t, 0, K, B, (size_t)n_t, &ws->sws));

    /* Valid trough samples: the whole template inside the window. */
    const int64_t v0 = nb, v1 = n_t - nt + nb; /* inclusive */
    if (v1 < v0)
        return BS_OK;

    int64_t nseg = (n_t + SCAN_SEG - 1) / SCAN_SEG;
#pragma omp parallel for schedule(static) num_threads(ws->n_threads)
    for (int64_t sgi = 0; sgi < nseg; sgi++) {
        int64_t lo = sgi * SCAN_SEG, hi = lo + SCAN_SEG < n_t ? lo + SCAN_SEG : n_t;
        scan_cols(B, K, n_t, lo, hi, ws);
    }

    int32_t *tk = ws->ctmpl;
    float *ta = ws->camp;
    const float *bmax = ws->bmax;
    bs_spike *spk = ws->spk; /* every spike of the window, window-relative times */
    int64_t n_spk = 0;
    int it, full = 0;
    memset(ws->mark, 0, (size_t)n_t);
    for (it = 0; it < p->max_iter; it++) {
        /* 3. accept local maxima above threshold */
        int64_t n_c = 0;
        for (int64_t tc = v0; tc <= v1; tc++) {
            const float m = bmax[tc];
            if (!(m > th_lo_c) || (thk && !(m > on_scale(thk[ws->imax[tc]], sq))))
                continue;
            int ok = 1;
            int64_t lo = tc - nt < v0 ? v0 : tc - nt, hi = tc + nt > v1 ? v1 : tc + nt;
            for (int64_t u = lo; u < tc && ok; u++)
                if (bmax[u] >= m)
                    ok = 0;
            for (int64_t u = tc + 1; u <= hi && ok; u++)
                if (bmax[u] > m)
                    ok = 0;
            if (!ok)
                continue;
            if (n_c >= ws->max_cand)
                return bs_error(BS_ERR_INTERNAL, "peel: more than %lld spikes in one iteration",
                                (long long)ws->max_cand);
            if (n_spk + n_c >= ws->max_spikes) {
                full = 1;
                break;
            }
            ws->cand[n_c] = tc;
            tk[n_c] = ws->imax[tc];
            ta[n_c] = sq ? B[(size_t)tk[n_c] * n_t + tc] : m; /* the least-squares amplitude */
            n_c++;
            tc += nt; /* the next nt samples cannot be maxima */
        }
        if (n_c == 0) {
            /* converged: look for partners of collisions, then go on if any */
            if (full || n_spk >= ws->max_spikes)
                break;
            int64_t added = collision_pass(t, pt, X, ldx, B, n_t, v0, v1, th, spk, &n_spk, ws);
            if (added == 0)
                break;
            /* rescan the marked runs (they cover every changed score) */
            for (int64_t u = 0; u < n_t;) {
                if (!ws->mark[u]) {
                    u++;
                    continue;
                }
                int64_t e = u;
                while (e < n_t && ws->mark[e])
                    e++;
                scan_cols(B, K, n_t, u, e, ws);
                u = e;
            }
            continue;
        }
        for (int64_t i = 0; i < n_c; i++) {
            mark_range(ws->mark, n_t, ws->cand[i], 3 * (int64_t)nt, 1);
            spk[n_spk].time = ws->cand[i];
            spk[n_spk].tmpl = tk[i];
            spk[n_spk].amp = ta[i];
            n_spk++;
        }

        /* 4a. residual: disjoint windows, parallel over spikes */
#pragma omp parallel for schedule(dynamic, 4) num_threads(ws->n_threads)
        for (int64_t i = 0; i < n_c; i++)
            subtract_residual(t, X, ldx, tk[i], ws->cand[i], ta[i]);
        /* 4b. scores: even group, then odd group */
        update_scores(t, pt, B, n_t, ws->cand, tk, ta, n_c, 0, ws->rowbuf, ws->n_threads);
        update_scores(t, pt, B, n_t, ws->cand, tk, ta, n_c, 1, ws->rowbuf, ws->n_threads);

        /* 5. rescan the merged touched ranges */
        int64_t n_iv = 0;
        for (int64_t i = 0; i < n_c; i++) {
            int64_t lo = ws->cand[i] - (nt - 1), hi = ws->cand[i] + nt;
            if (lo < 0)
                lo = 0;
            if (hi > n_t)
                hi = n_t;
            if (n_iv > 0 && lo <= ws->ivl[2 * n_iv - 1]) {
                ws->ivl[2 * n_iv - 1] = hi;
            } else {
                ws->ivl[2 * n_iv] = lo;
                ws->ivl[2 * n_iv + 1] = hi;
                ws->ivs[n_iv] = i;
                n_iv++;
            }
        }
        ws->ivs[n_iv] = n_c;
#pragma omp parallel for schedule(dynamic, 1) num_threads(ws->n_threads)
        for (int64_t v = 0; v < n_iv; v++)
            rescan_after(pt, B, K, n_t, ws->ivl[2 * v], ws->ivl[2 * v + 1], tk, ws->ivs[v], ws->ivs[v + 1],
                         ws->gsel ? ws->gsel + (size_t)omp_get_thread_num() * ws->n_groups : NULL, ws);
    }
    if (it == p->max_iter)
        bs_log_debug("peel: stopped after max_iter = %d iterations in the window at sample %lld", p->max_iter,
                     (long long)t0_abs);
    if (full)
        bs_log_warn("peel: the window at sample %lld reached its bound of %lld spikes", (long long)t0_abs,
                    (long long)ws->max_spikes);
    int64_t n_rep = 0;
    for (int64_t i = 0; i < n_spk; i++)
        if (spk[i].time >= c_begin && spk[i].time < c_end) {
            out[n_rep] = spk[i];
            out[n_rep].time += t0_abs;
            n_rep++;
        }
    qsort(out, (size_t)n_rep, sizeof(bs_spike), bs_spike_cmp);
    *n_out = n_rep;
    if (n_iter)
        *n_iter = it;
    return BS_OK;
}

int64_t bs_peel_window_n_t(int64_t window, int nt)
{
    return window + 2 * BS_PEEL_HALO(nt);
}

int64_t bs_peel_max_spikes(int64_t peel_n_t, int nt, int max_iter, int64_t span)
{
    int64_t w = peel_n_t - 2 * BS_PEEL_HALO(nt);
    return w > 0 && span > 0 ? (span + w - 1) / w * (int64_t)max_iter * max_cand_of(peel_n_t, nt) : 0;
}

int64_t bs_peel_span_max_spikes(const bs_peel_ws *ws, int nt, int64_t span)
{
    return bs_peel_max_spikes(ws->n_t, nt, ws->max_iter, span);
}

bs_status bs_peel_span(const bs_match_templates *t, const bs_pair_table *pt, float *X, size_t ldx, int64_t n_t,
                       int64_t t0_abs, int64_t c_begin, int64_t c_end, const bs_peel_params *p, bs_peel_ws *ws,
                       bs_spike *out, int64_t *n_out)
{
    const int64_t h = BS_PEEL_HALO(t->nt), w = ws->n_t - 2 * h;
    *n_out = 0;
    if (w < 1)
        return bs_error(BS_ERR_INTERNAL, "peel: workspace of %lld samples leaves no central part", (long long)ws->n_t);
    if (c_begin < 0 || c_end > n_t || c_begin > c_end)
        return bs_error(BS_ERR_INTERNAL, "peel: central part [%lld, %lld) outside the window of %lld samples",
                        (long long)c_begin, (long long)c_end, (long long)n_t);
    for (int64_t c0 = c_begin; c0 < c_end; c0 += w) {
        int64_t c1 = c0 + w < c_end ? c0 + w : c_end;
        int64_t lo = c0 - h > 0 ? c0 - h : 0, hi = c1 + h < n_t ? c1 + h : n_t;
#pragma omp parallel for schedule(static) num_threads(ws->n_threads)
        for (int c = 0; c < t->n_chan; c++)
            memcpy(ws->Y + (size_t)c * (size_t)ws->n_t, X + (size_t)c * ldx + lo, sizeof(float) * (size_t)(hi - lo));
        int64_t n = 0;
        BS_TRY(bs_peel_batch(t, pt, ws->Y, (size_t)ws->n_t, hi - lo, t0_abs + lo, c0 - lo, c1 - lo, p, ws,
                             out + *n_out, &n, NULL));
        for (int64_t i = *n_out; i < *n_out + n; i++) /* in order: overlapping waveforms, fixed sums */
            subtract_residual(t, X, ldx, out[i].tmpl, out[i].time - t0_abs, out[i].amp);
        *n_out += n;
    }
    return BS_OK;
}
