/*
 * pair_table.c - the sparse template-pair table UtU[j, k, d] (docs/ALGORITHM.md
 * §8.3; the convention is in match.h).
 *
 * Two templates whose channel supports share no channel have an exactly zero
 * cross-correlation at every lag, so only overlapping pairs are stored. The
 * neighbour lists come from an inverted index channel -> templates whose
 * support holds it: for each template k, walking its support's channels and
 * stamping every template seen once gives the overlapping set in
 * O(n_sup * templates per channel). Rows are CSR over the subtracted template
 * k, neighbours j ascending, each with 2nt-1 float lags.
 *
 * A value is computed in the low-rank form: M[p][q] = sum over the shared
 * channels (ascending) of U_j[c,p] U_k[c,q] in double, then
 * v[d] = sum_{p,q} M[p][q] * WtW[p][q][d] in double, rounded to float once.
 * bs_pair_row is the only place this happens, so the stored table and the
 * on-the-fly strategy return identical bits. Rows are filled in parallel over
 * k, each by one thread, so the table does not depend on the thread count.
 *
 * Memory: dense 4 K^2 (2nt-1) bytes; sparse (K+1) 8 + nnz 4 bytes of lists
 * plus the values: nnz (2nt-1) 4 bytes (BS_PAIR_FULL, one contiguous row per
 * subtracted spike and neighbour), or, using UtU[j,k,d] = UtU[k,j,-d], rows
 * only for j <= k ((nnz + K) / 2 of them) plus an 8-byte row index per pair
 * (BS_PAIR_HALF), or none (BS_PAIR_ON_THE_FLY), or the rows of some
 * subtracted templates, chosen by weight within a byte budget, plus an 8-byte
 * index per template (BS_PAIR_SOME, bs_pair_table_keep: a budget between the
 * on-the-fly table and the half one). bs_pair_row computes j > k as the
 * reversed (k, j) row, so all four modes give the same bits.
 */
#include <stdlib.h>
#include <string.h>

#include "common/simd.h"
#include "match/match.h"
#include "mem/mem.h"

double bs_pair_dense_bytes(int64_t K, int nt)
{
    return 4.0 * (double)K * (double)K * (double)(2 * nt - 1);
}

static int64_t rows_of(int K, int64_t nnz, bs_pair_mode mode)
{
    return mode == BS_PAIR_FULL ? nnz : mode == BS_PAIR_HALF ? (nnz + K) / 2 : 0;
}

size_t bs_pair_table_bytes(int K, int64_t nnz, int nt, bs_pair_mode mode)
{
    size_t b = sizeof(int64_t) * ((size_t)K + 1) + sizeof(int32_t) * (size_t)nnz;
    if (mode == BS_PAIR_HALF)
        b += sizeof(int64_t) * (size_t)nnz;
    b += sizeof(float) * (size_t)rows_of(K, nnz, mode) * (size_t)(2 * nt - 1);
    return b;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Count (and when row_start/nbr are given, list) the overlapping pairs. */
static int64_t pair_list(int K, int n_sup, const int32_t *support, int n_chan, int64_t *row_start,
                         int32_t *nbr)
{
    if (K < 1 || n_sup < 1 || n_chan < 1)
        return -1;
    int64_t *cstart = bs_mem_calloc("match/pair_scratch", (size_t)n_chan + 1, sizeof(int64_t));
    int32_t *ctm = bs_mem_alloc("match/pair_scratch", sizeof(int32_t) * (size_t)K * n_sup);
    int32_t *stamp = bs_mem_alloc("match/pair_scratch", sizeof(int32_t) * (size_t)K);
    if (!cstart || !ctm || !stamp) {
        bs_mem_free(cstart);
        bs_mem_free(ctm);
        bs_mem_free(stamp);
        return -1;
    }
    for (size_t i = 0; i < (size_t)K * n_sup; i++) {
        int32_t c = support[i];
        if (c < 0 || c >= n_chan) {
            bs_mem_free(cstart);
            bs_mem_free(ctm);
            bs_mem_free(stamp);
            return -1;
        }
        cstart[c + 1]++;
    }
    for (int c = 0; c < n_chan; c++)
        cstart[c + 1] += cstart[c];
    for (int k = 0; k < K; k++) {
        stamp[k] = -1;
        for (int i = 0; i < n_sup; i++) {
            int32_t c = support[(size_t)k * n_sup + i];
            ctm[cstart[c]++] = k; /* cstart[c] moves to the end of c's list */
        }
    }
    for (int c = n_chan; c > 0; c--)
        cstart[c] = cstart[c - 1];
    cstart[0] = 0;

    int64_t nnz = 0;
    for (int k = 0; k < K; k++) {
        if (row_start)
            row_start[k] = nnz;
        int64_t r0 = nnz;
        for (int i = 0; i < n_sup; i++) {
            int32_t c = support[(size_t)k * n_sup + i];
            for (int64_t m = cstart[c]; m < cstart[c + 1]; m++) {
                int32_t j = ctm[m];
                if (stamp[j] != k) {
                    stamp[j] = k;
                    if (nbr)
                        nbr[nnz] = j;
                    nnz++;
                }
            }
        }
        if (nbr)
            qsort(nbr + r0, (size_t)(nnz - r0), sizeof(int32_t), cmp_i32);
    }
    if (row_start)
        row_start[K] = nnz;
    bs_mem_free(cstart);
    bs_mem_free(ctm);
    bs_mem_free(stamp);
    return nnz;
}

int64_t bs_pair_count(int K, int n_sup, const int32_t *support, int n_chan)
{
    return pair_list(K, n_sup, support, n_chan, NULL, NULL);
}

/* Lags summed per register block: 32 doubles are four AVX-512 registers. */
#define PAIR_LAG_BLOCK 32

/* acc[i] += m * w[i] for one block of lags; the fixed trip count lets the
 * compiler keep the sums in registers. Each element's additions stay in pq
 * order, so every vector width gives the same bits. */
BS_VECTORIZED static void pair_lag_block(const double *M, int PP, const float *wtw, int nl, int d0, int n,
                                         float *out)
{
    double acc[PAIR_LAG_BLOCK];
    for (int i = 0; i < PAIR_LAG_BLOCK; i++)
        acc[i] = 0;
    if (n == PAIR_LAG_BLOCK) {
        for (int pq = 0; pq < PP; pq++) {
            const float *w = wtw + (size_t)pq * nl + d0;
            const double m = M[pq];
            for (int i = 0; i < PAIR_LAG_BLOCK; i++)
                acc[i] += m * (double)w[i];
        }
    } else {
        for (int pq = 0; pq < PP; pq++) {
            const float *w = wtw + (size_t)pq * nl + d0;
            const double m = M[pq];
            for (int i = 0; i < n; i++)
                acc[i] += m * (double)w[i];
        }
    }
    for (int i = 0; i < n; i++)
        out[d0 + i] = (float)acc[i];
}

static void pair_row_direct(const bs_match_templates *t, int j, int k, float *out)
{
    const int P = t->n_pc, ns = t->n_sup, nl = 2 * t->nt - 1;
    const int32_t *sj = t->support + (size_t)j * ns, *sk = t->support + (size_t)k * ns;
    const float *uj = t->U + (size_t)j * ns * P, *uk = t->U + (size_t)k * ns * P;
    double M[BS_MATCH_MAX_PC * BS_MATCH_MAX_PC];
    memset(M, 0, sizeof(double) * (size_t)P * P);
    int a = 0, b = 0, shared = 0;
    while (a < ns && b < ns) {
        if (sj[a] < sk[b]) {
            a++;
        } else if (sj[a] > sk[b]) {
            b++;
        } else {
            for (int p = 0; p < P; p++)
                for (int q = 0; q < P; q++)
                    M[p * P + q] += (double)uj[a * P + p] * uk[b * P + q];
            shared++;
            a++;
            b++;
        }
    }
    if (!shared) {
        memset(out, 0, sizeof(float) * (size_t)nl);
        return;
    }
    for (int d0 = 0; d0 < nl; d0 += PAIR_LAG_BLOCK)
        pair_lag_block(M, P * P, t->wtw, nl, d0, nl - d0 < PAIR_LAG_BLOCK ? nl - d0 : PAIR_LAG_BLOCK, out);
}

void bs_pair_row(const bs_match_templates *t, int j, int k, float *out)
{
    if (j <= k) {
        pair_row_direct(t, j, k, out);
        return;
    }
    const int nl = 2 * t->nt - 1;
    float tmp[2 * 1000 - 1];
    pair_row_direct(t, k, j, tmp);
    for (int d = 0; d < nl; d++)
        out[d] = tmp[nl - 1 - d];
}

const float *bs_pair_get(const bs_match_templates *t, const bs_pair_table *pt, int k, int64_t m, float *buf)
{
    const int nl = pt->n_lag;
    if (pt->mode == BS_PAIR_FULL)
        return pt->val + (size_t)m * nl;
    if (pt->mode == BS_PAIR_HALF) {
        int64_t r = pt->vrow[m];
        if (r >= 0)
            return pt->val + (size_t)r * nl;
        const float *src = pt->val + (size_t)(-1 - r) * nl;
        for (int d = 0; d < nl; d++)
            buf[d] = src[nl - 1 - d];
        return buf;
    }
    if (pt->mode == BS_PAIR_SOME && pt->kval[k] >= 0)
        return pt->val + (size_t)(pt->kval[k] + m - pt->row_start[k]) * nl;
    bs_pair_row(t, pt->nbr[m], k, buf);
    return buf;
}

void bs_pair_table_free(bs_pair_table *pt)
{
    if (!pt)
        return;
    bs_mem_free(pt->row_start);
    bs_mem_free(pt->nbr);
    bs_mem_free(pt->val);
    bs_mem_free(pt->vrow);
    bs_mem_free(pt->kval);
    memset(pt, 0, sizeof *pt);
}

/* Templates by weight, descending, ties by index (qsort on indices through a file-scope pointer would not be
 * reentrant: pairs of (weight, index) instead). */
typedef struct {
    int64_t w;
    int k;
} weighted;

static int weighted_desc(const void *a, const void *b)
{
    const weighted *x = a, *y = b;
    if (x->w != y->w)
        return x->w < y->w ? 1 : -1;
    return (x->k > y->k) - (x->k < y->k);
}

bs_status bs_pair_table_keep(const bs_match_templates *t, bs_pair_table *pt, const int64_t *weight,
                             size_t value_bytes)
{
    if (pt->mode != BS_PAIR_ON_THE_FLY)
        return bs_error(BS_ERR_INTERNAL, "match pair table: rows are kept only in an on-the-fly table");
    const int K = pt->K;
    const size_t row_bytes = (size_t)pt->n_lag * sizeof(float);
    size_t index = sizeof(int64_t) * (size_t)K;
    if (K < 1 || value_bytes <= index)
        return BS_OK;
    weighted *order = malloc((size_t)K * sizeof *order);
    int64_t *kval = bs_mem_alloc("match/pair_table", index);
    if (!order || !kval) {
        free(order);
        bs_mem_free(kval);
        return BS_ERR_MEMORY;
    }
    for (int k = 0; k < K; k++)
        order[k] = (weighted){weight ? weight[k] : 0, k};
    qsort(order, (size_t)K, sizeof *order, weighted_desc);
    size_t left = value_bytes - index;
    int64_t rows = 0;
    int n = 0;
    for (int k = 0; k < K; k++)
        kval[k] = -1;
    for (int i = 0; i < K; i++) {
        int k = order[i].k;
        size_t need = (size_t)(pt->row_start[k + 1] - pt->row_start[k]) * row_bytes;
        if (need > left)
            continue;
        left -= need;
        kval[k] = rows;
        rows += pt->row_start[k + 1] - pt->row_start[k];
        n++;
    }
    free(order);
    float *val = n ? bs_mem_alloc("match/pair_table", (size_t)rows * row_bytes) : NULL;
    if (n == 0 || !val) {
        bs_mem_free(kval);
        return n == 0 ? BS_OK : BS_ERR_MEMORY;
    }
#pragma omp parallel for schedule(dynamic, 16)
    for (int k = 0; k < K; k++)
        if (kval[k] >= 0)
            for (int64_t m = pt->row_start[k]; m < pt->row_start[k + 1]; m++)
                bs_pair_row(t, pt->nbr[m], k, val + (size_t)(kval[k] + m - pt->row_start[k]) * pt->n_lag);
    pt->kval = kval;
    pt->val = val;
    pt->n_rows = rows;
    pt->n_kept = n;
    pt->mode = BS_PAIR_SOME;
    return BS_OK;
}

bs_status bs_pair_table_build(const bs_match_templates *t, bs_pair_mode mode, bs_pair_table *pt)
{
    memset(pt, 0, sizeof *pt);
    if (mode != BS_PAIR_ON_THE_FLY && mode != BS_PAIR_FULL && mode != BS_PAIR_HALF)
        return bs_error(BS_ERR_INTERNAL, "match pair table: unknown storage mode %d", (int)mode);
    int64_t nnz = bs_pair_count(t->K, t->n_sup, t->support, t->n_chan);
    if (nnz < 0)
        return bs_error(BS_ERR_MEMORY, "match pair table: cannot count the overlapping pairs of %d templates", t->K);
    const int K = t->K;
    pt->K = K;
    pt->n_lag = 2 * t->nt - 1;
    pt->mode = mode;
    pt->nnz = nnz;
    pt->n_rows = rows_of(K, nnz, mode);
    pt->row_start = bs_mem_alloc("match/pair_table", sizeof(int64_t) * ((size_t)K + 1));
    pt->nbr = bs_mem_alloc("match/pair_table", sizeof(int32_t) * (size_t)nnz);
    if (mode == BS_PAIR_HALF)
        pt->vrow = bs_mem_alloc("match/pair_table", sizeof(int64_t) * (size_t)nnz);
    if (mode != BS_PAIR_ON_THE_FLY)
        pt->val = bs_mem_alloc("match/pair_table", sizeof(float) * (size_t)pt->n_rows * (size_t)pt->n_lag);
    if (!pt->row_start || !pt->nbr || (mode == BS_PAIR_HALF && !pt->vrow) || (mode != BS_PAIR_ON_THE_FLY && !pt->val)) {
        bs_pair_table_free(pt);
        return BS_ERR_MEMORY;
    }
    if (pair_list(K, t->n_sup, t->support, t->n_chan, pt->row_start, pt->nbr) != nnz) {
        bs_pair_table_free(pt);
        return bs_error(BS_ERR_INTERNAL, "match pair table: pair count changed between passes");
    }
    if (mode == BS_PAIR_FULL) {
#pragma omp parallel for schedule(dynamic, 16)
        for (int k = 0; k < K; k++)
            for (int64_t m = pt->row_start[k]; m < pt->row_start[k + 1]; m++)
                bs_pair_row(t, pt->nbr[m], k, pt->val + (size_t)m * pt->n_lag);
    } else if (mode == BS_PAIR_HALF) {
        /* rows for j <= k in (k, m) order; j > k points at row (k, j) of row j */
        int64_t r = 0;
        for (int k = 0; k < K; k++)
            for (int64_t m = pt->row_start[k]; m < pt->row_start[k + 1]; m++)
                if (pt->nbr[m] <= k)
                    pt->vrow[m] = r++;
        if (r != pt->n_rows) {
            bs_pair_table_free(pt);
            return bs_error(BS_ERR_INTERNAL, "match pair table: %lld half rows, expected %lld", (long long)r,
                            (long long)pt->n_rows);
        }
        for (int k = 0; k < K; k++)
            for (int64_t m = pt->row_start[k]; m < pt->row_start[k + 1]; m++) {
                const int j = pt->nbr[m];
                if (j <= k)
                    continue;
                /* find k in row j (ascending): binary search */
                int64_t lo = pt->row_start[j], hi = pt->row_start[j + 1] - 1;
                while (lo < hi) {
                    int64_t mid = lo + (hi - lo) / 2;
                    if (pt->nbr[mid] < k)
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                pt->vrow[m] = -1 - pt->vrow[lo];
            }
#pragma omp parallel for schedule(dynamic, 16)
        for (int k = 0; k < K; k++)
            for (int64_t m = pt->row_start[k]; m < pt->row_start[k + 1]; m++)
                if (pt->nbr[m] <= k)
                    bs_pair_row(t, pt->nbr[m], k, pt->val + (size_t)pt->vrow[m] * pt->n_lag);
    }
    return BS_OK;
}
