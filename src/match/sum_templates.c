/*
 * sum_templates.c - templates that are the sum of two others, or a copy of
 * one (docs/ALGORITHM.md §7.6): where two units' spikes often overlap,
 * clustering can learn the sum as a template of its own, which the matcher
 * then prefers to the pair; and a unit split into two clusters a sample
 * apart gives two copies of one template, which share its spikes.
 *
 * Mechanism: template k (unit norm, like every matching template) is fitted
 * by least squares with one, then two other templates placed at lags; all
 * the inner products involved are pair-table rows (match.h): template j
 * delayed by d samples has inner product UtU[j, k, d] with k, and two
 * templates a, b delayed by la, lb have UtU[a, b, la - lb] with each other.
 * For unit-norm a and b at lags with inner products ca, cb with k and g with
 * each other, the least-squares fit α·a + β·b leaves the residual share
 *     r2² = 1 - (ca² + cb² - 2 g ca cb) / (1 - g²)
 * of |k|² (0 when k is exactly such a sum), and a single template leaves
 * r1² = 1 - ca². The search is greedy and exact within it:
 *   1. every neighbour j (support overlapping k's) gets its row UtU[j, k, .];
 *      its best lag is the one of largest inner product;
 *   2. for each of the n_first neighbours with the largest best inner
 *      product (a, at its best lag), every other neighbour b at every lag at
 *      least min_lag from a's completes the pair; b needs an inner product of
 *      at least min_part with k somewhere (a component of a sum correlates
 *      with it). Parts at the same sample, or nearly, are not searched: that
 *      is also how a real unit's spatial footprint decomposes into its
 *      neighbours', while overlapping spikes are a lag apart;
 *   3. the best pair's first lag is then searched again with b fixed.
 * Both weights must be positive (a sum, not a difference). The weights times
 * k's norm before scaling (norm_in, the cluster's mean amplitude) are the
 * amplitudes that a and b would need in the sum; bs_sum_templates_select
 * requires each to be within a factor max_amp_ratio of that template's own
 * mean amplitude, so a unit whose shape happens to resemble a sum, at the
 * wrong amplitudes, is kept. A copy is a template that its best single fit
 * leaves with at most max_copy_resid, at a mean amplitude within
 * max_copy_amp_ratio.
 *
 * Each k is fitted independently (threads over k, fixed order inside), so
 * the result does not depend on the thread count. Cost per template: its
 * neighbours' rows, plus n_first rows per neighbour for the pairs.
 */
#include "sum_templates.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../mem/mem.h"

#define SUM_N_FIRST 3     /* first templates tried per k */
#define SUM_MIN_PART 0.2f /* inner product with k a component needs at some lag */

void bs_sum_template_params_default(bs_sum_template_params *p)
{
    p->max_resid = 0.35;
    p->min_single_resid = 0.35;
    p->min_lag_ms = 0.1;
    p->max_amp_ratio = 2.0;
    p->max_copy_resid = 0.15;
    p->max_copy_amp_ratio = 1.2;
}

/* One thread's workspace, in 4-byte words: max_row rows of nl lags, one scratch row, and per neighbour its best
   inner product (float) and best lag (int32). */
static size_t per_thread_words(int max_row, int nl)
{
    return (size_t)max_row * (size_t)nl + (size_t)nl + 2 * (size_t)max_row;
}

size_t bs_sum_templates_ws_bytes(int max_row, int nt, int n_threads)
{
    return (size_t)(n_threads > 0 ? n_threads : 1) * per_thread_words(max_row, 2 * nt - 1) * sizeof(float);
}

/* UtU[a, b, e] from the row (a, b) (row[e + h]); 0 beyond the lags where the two waveforms overlap */
static double lagged(const float *row, int e, int h)
{
    return (e >= -h && e <= h) ? row[e + h] : 0.0;
}

/* explained share of |k|² by two unit-norm templates with inner products ca, cb with k and g with each other;
   -1 when the weights are not both positive or the pair is degenerate */
static double pair_explained(double ca, double cb, double g, double *wa, double *wb)
{
    double det = 1.0 - g * g;
    if (det < 1e-6)
        return -1;
    double alpha = (ca - g * cb) / det, beta = (cb - g * ca) / det;
    if (alpha <= 0 || beta <= 0)
        return -1;
    *wa = alpha;
    *wb = beta;
    return (ca * ca + cb * cb - 2 * g * ca * cb) / det;
}

/* The fit of template k; rows: the thread's n_nbr x nl rows UtU[j, k, .], best/best_lag per neighbour, row: one
   scratch row. */
static void fit_one(const bs_match_templates *t, const bs_pair_table *pt, int k, int min_lag, float *rows, float *best,
                    int32_t *best_lag, float *row, bs_sum_fit *f)
{
    const int nl = 2 * t->nt - 1, h = t->nt - 1;
    const int64_t r0 = pt->row_start[k], nn = pt->row_start[k + 1] - r0;
    memset(f, 0, sizeof *f);
    f->a = f->b = f->a1 = -1;
    f->r1 = f->r2 = 1;
    for (int64_t m = 0; m < nn; m++) {
        int j = pt->nbr[r0 + m];
        float *rj = rows + (size_t)m * nl;
        best[m] = 0;
        best_lag[m] = 0;
        if (j == k)
            continue;
        bs_pair_row(t, j, k, rj);
        for (int d = 0; d < nl; d++)
            if (rj[d] > best[m]) {
                best[m] = rj[d];
                best_lag[m] = d;
            }
    }
    /* single best, and the n_first best neighbours (largest best, then smaller index) */
    int64_t first[SUM_N_FIRST];
    int n_first = 0;
    for (int i = 0; i < SUM_N_FIRST; i++) {
        int64_t pick = -1;
        for (int64_t m = 0; m < nn; m++) {
            if (best[m] < SUM_MIN_PART)
                continue;
            int used = 0;
            for (int q = 0; q < n_first; q++)
                used |= first[q] == m;
            if (!used && (pick < 0 || best[m] > best[pick]))
                pick = m;
        }
        if (pick < 0)
            break;
        first[n_first++] = pick;
    }
    if (n_first == 0)
        return;
    f->a1 = pt->nbr[r0 + first[0]];
    f->l1 = best_lag[first[0]] - h;
    f->w1 = best[first[0]];
    f->r1 = (float)sqrt(fmax(0.0, 1.0 - (double)best[first[0]] * best[first[0]]));
    double best_ex = -1;
    int64_t bm_a = -1, bm_b = -1;
    int b_la = 0, b_lb = 0;
    for (int i = 0; i < n_first; i++) {
        int64_t ma = first[i];
        int a = pt->nbr[r0 + ma], la = best_lag[ma] - h;
        double ca = rows[(size_t)ma * nl + best_lag[ma]];
        for (int64_t mb = 0; mb < nn; mb++) {
            int b = pt->nbr[r0 + mb];
            if (mb == ma || b == k || best[mb] < SUM_MIN_PART)
                continue;
            bs_pair_row(t, a, b, row); /* row[e + h] = UtU[a, b, e]: a and b placed e = la - lb apart */
            const float *rb = rows + (size_t)mb * nl;
            for (int dl = 0; dl < nl; dl++) {
                int lb = dl - h, e = la - lb;
                if (e < min_lag && e > -min_lag)
                    continue;
                double xa, xb, ex = pair_explained(ca, rb[dl], lagged(row, e, h), &xa, &xb);
                if (ex > best_ex) {
                    best_ex = ex;
                    bm_a = ma;
                    bm_b = mb;
                    b_la = la;
                    b_lb = lb;
                }
            }
        }
    }
    if (bm_a < 0)
        return;
    /* the first template's lag again, with the second fixed */
    int a = pt->nbr[r0 + bm_a], b = pt->nbr[r0 + bm_b];
    bs_pair_row(t, a, b, row);
    const float *ra = rows + (size_t)bm_a * nl;
    double cb = rows[(size_t)bm_b * nl + b_lb + h], wa = 0, wb = 0;
    for (int dl = 0; dl < nl; dl++) { /* la = b_la itself gives best_ex again, so its weights are taken */
        int la = dl - h, e = la - b_lb;
        if (e < min_lag && e > -min_lag)
            continue;
        double xa = 0, xb = 0, ex = pair_explained(ra[dl], cb, lagged(row, e, h), &xa, &xb);
        if (ex > best_ex || (la == b_la && ex == best_ex)) {
            best_ex = ex;
            b_la = la;
            wa = xa;
            wb = xb;
        }
    }
    f->a = a;
    f->b = b;
    f->la = b_la;
    f->lb = b_lb;
    f->wa = (float)wa;
    f->wb = (float)wb;
    f->r2 = (float)sqrt(fmax(0.0, 1.0 - best_ex));
}

bs_status bs_sum_templates_fit(const bs_match_templates *t, const bs_pair_table *pt, int min_lag, int n_threads,
                               bs_sum_fit *fit)
{
    const int K = t->K, nl = 2 * t->nt - 1;
    int max_row = 1;
    for (int k = 0; k < K; k++)
        if (pt->row_start[k + 1] - pt->row_start[k] > max_row)
            max_row = (int)(pt->row_start[k + 1] - pt->row_start[k]);
    n_threads = n_threads < 1 ? 1 : n_threads;
    size_t per = per_thread_words(max_row, nl);
    float *ws = bs_mem_alloc("sort/sum-templates", bs_sum_templates_ws_bytes(max_row, t->nt, n_threads));
    if (!ws)
        return BS_ERR_MEMORY;
#pragma omp parallel for schedule(dynamic, 4) num_threads(n_threads)
    for (int k = 0; k < K; k++) {
        float *w = ws + per * (size_t)omp_get_thread_num();
        float *rows = w, *row = w + (size_t)max_row * nl, *best = row + nl;
        int32_t *best_lag = (int32_t *)(best + max_row);
        fit_one(t, pt, k, min_lag, rows, best, best_lag, row, &fit[k]);
    }
    bs_mem_free(ws);
    return BS_OK;
}

/* candidates: lower r2 first, then lower index */
typedef struct {
    float r2; /* the residual share of the fit */
    int k;
    int copy; /* 1: a copy of one template, 0: a sum of two */
} sum_cand;

static int cand_asc(const void *x, const void *y)
{
    const sum_cand *a = x, *b = y;
    if (a->r2 != b->r2)
        return a->r2 < b->r2 ? -1 : 1;
    return (a->k > b->k) - (a->k < b->k);
}

/* the amplitude a part has in template k (its weight w times k's mean amplitude nk) is within a factor ratio of
   the part's own mean amplitude n_part */
static int amp_ok(double w, double nk, double n_part, double ratio)
{
    double amp = w * nk;
    return n_part > 0 && amp <= ratio * n_part && amp * ratio >= n_part;
}

int bs_sum_templates_select(const bs_match_templates *t, const bs_sum_fit *fit, const bs_sum_template_params *p,
                            uint8_t *drop)
{
    const int K = t->K;
    memset(drop, 0, (size_t)K);
    if (p->max_resid <= 0 && p->max_copy_resid <= 0)
        return 0;
    sum_cand *c = malloc((size_t)(K > 0 ? K : 1) * sizeof *c);
    if (!c)
        return -1;
    int n = 0;
    for (int k = 0; k < K; k++) {
        const bs_sum_fit *f = &fit[k];
        if (f->a1 >= 0 && f->r1 <= p->max_copy_resid &&
            amp_ok(1.0, t->norm_in[k], t->norm_in[f->a1], p->max_copy_amp_ratio)) {
            c[n++] = (sum_cand){f->r1, k, 1};
            continue;
        }
        if (f->a < 0 || f->r2 > p->max_resid || f->r1 < p->min_single_resid)
            continue;
        if (!amp_ok(f->wa, t->norm_in[k], t->norm_in[f->a], p->max_amp_ratio) ||
            !amp_ok(f->wb, t->norm_in[k], t->norm_in[f->b], p->max_amp_ratio))
            continue;
        c[n++] = (sum_cand){f->r2, k, 0};
    }
    qsort(c, (size_t)n, sizeof *c, cand_asc);
    /* drop[] while deciding: BS_SUM_KEEP open, BS_SUM_SUM / BS_SUM_COPY dropped, PART kept as the part of a
       dropped one */
    enum { PART = 3 };
    int n_drop = 0;
    for (int i = 0; i < n; i++) {
        const bs_sum_fit *f = &fit[c[i].k];
        int pa = c[i].copy ? f->a1 : f->a, pb = c[i].copy ? f->a1 : f->b;
        int gone_a = drop[pa] == BS_SUM_SUM || drop[pa] == BS_SUM_COPY;
        int gone_b = drop[pb] == BS_SUM_SUM || drop[pb] == BS_SUM_COPY;
        if (drop[c[i].k] != BS_SUM_KEEP || gone_a || gone_b)
            continue; /* k is a part of one already dropped, or one of its parts is itself dropped */
        drop[c[i].k] = c[i].copy ? BS_SUM_COPY : BS_SUM_SUM;
        drop[pa] = drop[pb] = PART;
        n_drop++;
    }
    for (int k = 0; k < K; k++)
        drop[k] = drop[k] == PART ? BS_SUM_KEEP : drop[k];
    free(c);
    return n_drop;
}
