/*
 * whiten.c - local (per-channel neighbourhood) ZCA whitening.
 *
 * Covariance: each batch's central columns X (C x NT) give X Xᵀ (upper
 * triangle, float) in blocks of WH_COV_BLOCK channels, one BLAS call per
 * block (cblas_ssyrk on the diagonal, cblas_sgemm above it), the blocks
 * spread over the threads: the blocks are fixed by C alone and each is one
 * single-threaded call, so the sums do not depend on the thread count. The
 * float result divided by NT is added
 * into a double accumulator, so the sum over many batches loses nothing to
 * float rounding. finalize divides by the number of batches and mirrors the
 * upper triangle.
 *
 * Matrix: for channel j the neighbourhood is the n_neighbors channels of j's
 * shank nearest to it (squared Euclidean distance, channel index breaks ties,
 * j first). The sub-covariance is decomposed with the cyclic Jacobi
 * eigenvalue method in double, with the neighbourhood taken in ascending
 * channel order so that the decomposition depends only on the set of
 * channels; consecutive channels with the same set (e.g. n_neighbors >= the
 * shank size: dense whitening) reuse it. Row j of E diag(1/sqrt(D + eps)) Eᵀ
 * times `scale` is W's row j, stored on j's neighbours (nearest first).
 *
 * Application: time tiles of WH_TILE samples; a thread copies the tile of all
 * channels into its scratch and writes each output row as the sum over its
 * neighbours, in the stored order, of weight x input row (float). Tiles are
 * fixed by n_t alone, so the output is identical for any thread count.
 *
 * Inverse: Gauss-Jordan elimination with partial pivoting on the dense
 * (W + ridge I) in double.
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pp_internal.h"

#define WHITEN_RANK_FLOOR 1e-7 /* of the largest eigenvalue: what a rank-deficient direction gets */
#define WHITEN_RANK_NEG 1e-5   /* of the largest: an eigenvalue below -this is not rounding */
#include "preprocess.h"

#define WH_TILE 128     /* samples per tile */
#define WH_COV_BLOCK 64 /* channels per block of the covariance product */

/* ---------------------------------------------------------- covariance --- */

size_t bs_whiten_cov_bytes(int n_chan)
{
    return n_chan < 1 ? 0 : (size_t)n_chan * (size_t)n_chan * (sizeof(double) + sizeof(float));
}

bs_status bs_whiten_cov_init(bs_whiten_cov *acc, int n_chan)
{
    memset(acc, 0, sizeof *acc);
    if (n_chan < 1)
        return bs_error(BS_ERR_INPUT, "whitening: field 'n_chan': expected >= 1, got %d", n_chan);
    acc->n_chan = n_chan;
    acc->sum = bs_mem_calloc("preprocess/whiten_cov", (size_t)n_chan * (size_t)n_chan, sizeof(double));
    acc->tmp = bs_mem_alloc("preprocess/whiten_cov", (size_t)n_chan * (size_t)n_chan * sizeof(float));
    if (!acc->sum || !acc->tmp) {
        bs_whiten_cov_free(acc);
        return BS_ERR_MEMORY;
    }
    return BS_OK;
}

bs_status bs_whiten_cov_add(bs_whiten_cov *acc, const float *x, int64_t n_t, int64_t t0, int64_t t1)
{
    if (!acc->sum)
        return bs_error(BS_ERR_INTERNAL, "whitening: covariance accumulator not initialised");
    if (t0 < 0 || t1 > n_t || t1 <= t0)
        return bs_error(BS_ERR_INPUT, "whitening: central part [%lld, %lld) of a %lld-sample window: expected "
                        "0 <= t0 < t1 <= n_t", (long long)t0, (long long)t1, (long long)n_t);
    const int C = acc->n_chan;
    const int64_t nt = t1 - t0;
    if (nt > 0x7fffffff || n_t > 0x7fffffff)
        return bs_error(BS_ERR_INPUT, "whitening: window of %lld samples: expected < 2^31", (long long)n_t);
    const int nb = (C + WH_COV_BLOCK - 1) / WH_COV_BLOCK, n_pairs = nb * (nb + 1) / 2;
    float *tmp = acc->tmp;
#pragma omp parallel for schedule(dynamic, 1) if (n_pairs > 1)
    for (int q = 0; q < n_pairs; q++) {
        int bi = 0, r = q; /* q -> block pair (bi, bj), bi <= bj, row by row */
        while (r >= nb - bi)
            r -= nb - bi++;
        int bj = bi + r, i0 = bi * WH_COV_BLOCK, j0 = bj * WH_COV_BLOCK;
        int ni = C - i0 < WH_COV_BLOCK ? C - i0 : WH_COV_BLOCK, nj = C - j0 < WH_COV_BLOCK ? C - j0 : WH_COV_BLOCK;
        const float *xi = x + (size_t)i0 * (size_t)n_t + t0, *xj = x + (size_t)j0 * (size_t)n_t + t0;
        if (bi == bj)
            cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, ni, (int)nt, 1.0f, xi, (int)n_t, 0.0f,
                        tmp + (size_t)i0 * C + i0, C);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ni, nj, (int)nt, 1.0f, xi, (int)n_t, xj, (int)n_t,
                        0.0f, tmp + (size_t)i0 * C + j0, C);
    }
    const double inv = 1.0 / (double)nt;
    for (int i = 0; i < C; i++)
        for (int j = i; j < C; j++)
            acc->sum[(size_t)i * C + j] += (double)acc->tmp[(size_t)i * C + j] * inv;
    acc->n_batches++;
    return BS_OK;
}

bs_status bs_whiten_cov_finalize(const bs_whiten_cov *acc, double *cov)
{
    if (acc->n_batches < 1)
        return bs_error(BS_ERR_INPUT, "whitening: no batch was added to the covariance");
    const int C = acc->n_chan;
    for (int i = 0; i < C; i++)
        for (int j = i; j < C; j++) {
            double v = acc->sum[(size_t)i * C + j] / acc->n_batches;
            cov[(size_t)i * C + j] = v;
            cov[(size_t)j * C + i] = v;
        }
    return BS_OK;
}

void bs_whiten_cov_free(bs_whiten_cov *acc)
{
    bs_mem_free(acc->sum);
    bs_mem_free(acc->tmp);
    memset(acc, 0, sizeof *acc);
}

/* ------------------------------------------------------------- build --- */

typedef struct {
    double d2; /* squared distance, µm^2 (-1 for the channel itself) */
    int idx;
} nbr_key;

static int cmp_nbr(const void *a, const void *b)
{
    const nbr_key *x = a, *y = b;
    if (x->d2 != y->d2)
        return x->d2 < y->d2 ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Cyclic Jacobi: a (n x n, symmetric, destroyed) -> eigenvalues d, vectors v
 * (columns). */
static void jacobi_eig(double *a, int n, double *d, double *v)
{
    for (int i = 0; i < n * n; i++)
        v[i] = 0.0;
    for (int i = 0; i < n; i++)
        v[i * n + i] = 1.0;
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0.0, diag = 0.0;
        for (int i = 0; i < n; i++) {
            diag += a[i * n + i] * a[i * n + i];
            for (int j = i + 1; j < n; j++)
                off += a[i * n + j] * a[i * n + j];
        }
        if (off <= 1e-30 * diag || off == 0.0)
            break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                double apq = a[p * n + q];
                if (apq == 0.0)
                    continue;
                double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
                double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
                double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
                for (int k = 0; k < n; k++) {
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int k = 0; k < n; k++) {
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                a[p * n + q] = a[q * n + p] = 0.0;
                for (int k = 0; k < n; k++) {
                    double vkp = v[k * n + p], vkq = v[k * n + q];
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
    }
    for (int i = 0; i < n; i++)
        d[i] = a[i * n + i];
}

size_t bs_whitener_bytes(int n_chan, int k)
{
    if (n_chan < 1 || k < 1)
        return 0;
    return (size_t)n_chan * sizeof(int) + (size_t)n_chan * (size_t)k * (sizeof(int) + sizeof(float));
}

/* keys[C], then ints (set[k], prev[k], pos[C]) rounded up to 8 bytes, then
 * doubles (sub k*k, V k*k, D k) */
static size_t build_int_bytes(int n_chan, int k) { return ((2 * (size_t)k + (size_t)n_chan) * sizeof(int) + 7) / 8 * 8; }

size_t bs_whitener_build_bytes(int n_chan, int k)
{
    if (n_chan < 1 || k < 1)
        return 0;
    return (size_t)n_chan * sizeof(nbr_key) + build_int_bytes(n_chan, k) +
           (2 * (size_t)k * (size_t)k + (size_t)k) * sizeof(double);
}

size_t bs_whitener_inverse_bytes(int n_chan) { return n_chan < 1 ? 0 : 2 * (size_t)n_chan * (size_t)n_chan * sizeof(double); }

void bs_whitener_free(bs_whitener *wh)
{
    bs_mem_free(wh->n_nbr);
    bs_mem_free(wh->nbr);
    bs_mem_free(wh->w);
    memset(wh, 0, sizeof *wh);
}

bs_status bs_whitener_build(const double *cov, const bs_probe *probe, int n_neighbors, double eps, double scale,
                            bs_whitener *wh)
{
    memset(wh, 0, sizeof *wh);
    const int C = probe->n_chan;
    if (C < 1)
        return bs_error(BS_ERR_INPUT, "whitening: probe has %d channels, expected >= 1", C);
    if (n_neighbors < 1)
        return bs_error(BS_ERR_INPUT, "whitening: field 'whitening_range': expected >= 1, got %d", n_neighbors);
    if (!(eps >= 0) || !isfinite(eps))
        return bs_error(BS_ERR_INPUT, "whitening: field 'eps': expected a finite value >= 0, got %g", eps);
    if (!(scale > 0) || !isfinite(scale))
        return bs_error(BS_ERR_INPUT, "whitening: field 'scale': expected a finite value > 0, got %g", scale);
    for (size_t i = 0; i < (size_t)C * C; i++)
        if (!isfinite(cov[i]))
            return bs_error(BS_ERR_INPUT, "whitening: covariance entry (%zu, %zu) is not finite", i / C, i % C);

    /* k = the largest neighbourhood */
    int k = 0;
    for (int j = 0; j < C; j++) {
        int same = 0;
        for (int i = 0; i < C; i++)
            same += probe->shank[i] == probe->shank[j];
        int kj = same < n_neighbors ? same : n_neighbors;
        if (kj > k)
            k = kj;
    }
    wh->n_chan = C;
    wh->k = k;
    wh->n_nbr = bs_mem_calloc("preprocess/whitener", (size_t)C, sizeof(int));
    wh->nbr = bs_mem_calloc("preprocess/whitener", (size_t)C * k, sizeof(int));
    wh->w = bs_mem_calloc("preprocess/whitener", (size_t)C * k, sizeof(float));
    /* work: keys[C], sorted set + previous set, pos[C], sub matrix, V, D */
    const size_t int_bytes = build_int_bytes(C, k); /* keeps the doubles aligned */
    const size_t work_bytes = bs_whitener_build_bytes(C, k);
    char *work = bs_mem_alloc("preprocess/whitener_build", work_bytes);
    if (!wh->n_nbr || !wh->nbr || !wh->w || !work) {
        bs_mem_free(work);
        bs_whitener_free(wh);
        return BS_ERR_MEMORY;
    }
    nbr_key *keys = (nbr_key *)work;
    int *set = (int *)(keys + C);
    int *prev = set + k;
    int *pos = prev + k;
    double *sub = (double *)((char *)set + int_bytes);
    double *V = sub + (size_t)k * k;
    double *D = V + (size_t)k * k;
    int n_prev = 0;
    bs_status st = BS_OK;

    for (int j = 0; j < C && st == BS_OK; j++) {
        int n = 0;
        for (int i = 0; i < C; i++) {
            if (probe->shank[i] != probe->shank[j])
                continue;
            double dx = probe->x_um[i] - probe->x_um[j], dy = probe->y_um[i] - probe->y_um[j];
            keys[n].d2 = i == j ? -1.0 : dx * dx + dy * dy;
            keys[n].idx = i;
            n++;
        }
        qsort(keys, (size_t)n, sizeof *keys, cmp_nbr);
        int m = n < n_neighbors ? n : n_neighbors;
        for (int i = 0; i < m; i++)
            set[i] = keys[i].idx;
        qsort(set, (size_t)m, sizeof *set, cmp_int);
        int same = m == n_prev && memcmp(set, prev, (size_t)m * sizeof *set) == 0;
        if (!same) {
            for (int a = 0; a < m; a++)
                for (int b = 0; b < m; b++)
                    sub[a * m + b] = cov[(size_t)set[a] * C + set[b]];
            jacobi_eig(sub, m, D, V);
            /* A rank-deficient neighbourhood (an interpolated bad channel is a combination of its
             * neighbours: an eigenvalue at rounding level, possibly just below 0) gets the floor
             * WHITEN_RANK_FLOOR x the largest eigenvalue: the null direction, which carries only
             * rounding, is amplified by at most 1 / sqrt(that) instead of failing. A clearly negative
             * eigenvalue (beyond WHITEN_RANK_NEG x the largest) is still an error. */
            double dmax = 0;
            for (int a = 0; a < m; a++)
                dmax = D[a] > dmax ? D[a] : dmax;
            for (int a = 0; a < m; a++)
                if (D[a] < WHITEN_RANK_FLOOR * dmax && D[a] >= -WHITEN_RANK_NEG * dmax)
                    D[a] = WHITEN_RANK_FLOOR * dmax;
            for (int a = 0; a < m; a++) {
                if (!(D[a] + eps > 0)) {
                    st = bs_error(BS_ERR_INPUT,
                                  "whitening: covariance around channel %d has eigenvalue %g (+ eps %g): expected a "
                                  "positive definite matrix (a dead or constant channel?)",
                                  j, D[a], eps);
                    break;
                }
                D[a] = 1.0 / sqrt(D[a] + eps);
            }
            memcpy(prev, set, (size_t)m * sizeof *set);
            n_prev = m;
            for (int a = 0; a < m; a++)
                pos[set[a]] = a;
        }
        if (st != BS_OK)
            break;
        int pj = pos[j];
        wh->n_nbr[j] = m;
        for (int i = 0; i < m; i++) {
            int ch = keys[i].idx;
            int pc = pos[ch];
            double s = 0.0;
            for (int e = 0; e < m; e++)
                s += V[pj * m + e] * D[e] * V[pc * m + e];
            wh->nbr[(size_t)j * k + i] = ch;
            wh->w[(size_t)j * k + i] = (float)(scale * s);
        }
        for (int i = m; i < k; i++) {
            wh->nbr[(size_t)j * k + i] = j;
            wh->w[(size_t)j * k + i] = 0.0f;
        }
    }
    bs_mem_free(work);
    if (st != BS_OK)
        bs_whitener_free(wh);
    return st;
}

void bs_whitener_dense(const bs_whitener *wh, float *W)
{
    const int C = wh->n_chan, k = wh->k;
    memset(W, 0, (size_t)C * C * sizeof *W);
    for (int j = 0; j < C; j++)
        for (int i = 0; i < wh->n_nbr[j]; i++)
            W[(size_t)j * C + wh->nbr[(size_t)j * k + i]] = wh->w[(size_t)j * k + i];
}

bs_status bs_whitener_inverse(const bs_whitener *wh, double ridge, float *Winv)
{
    const int C = wh->n_chan, k = wh->k;
    const size_t n = (size_t)C;
    double *a = bs_mem_calloc("preprocess/whiten_inv", 2 * n * n, sizeof(double));
    if (!a)
        return BS_ERR_MEMORY;
    double *b = a + n * n; /* becomes the inverse */
    double amax = 0.0;
    for (int j = 0; j < C; j++) {
        for (int i = 0; i < wh->n_nbr[j]; i++)
            a[(size_t)j * n + wh->nbr[(size_t)j * k + i]] = wh->w[(size_t)j * k + i];
        a[(size_t)j * n + j] += ridge;
        b[(size_t)j * n + j] = 1.0;
    }
    for (size_t i = 0; i < n * n; i++)
        if (fabs(a[i]) > amax)
            amax = fabs(a[i]);
    for (size_t col = 0; col < n; col++) {
        size_t piv = col;
        for (size_t r = col + 1; r < n; r++)
            if (fabs(a[r * n + col]) > fabs(a[piv * n + col]))
                piv = r;
        double pv = a[piv * n + col];
        if (!(fabs(pv) > 1e-13 * amax) || !isfinite(pv)) {
            bs_mem_free(a);
            return bs_error(BS_ERR_INPUT, "whitening: the whitening matrix is singular (column %zu): no inverse",
                            col);
        }
        if (piv != col)
            for (size_t c = 0; c < n; c++) {
                double t = a[col * n + c];
                a[col * n + c] = a[piv * n + c];
                a[piv * n + c] = t;
                t = b[col * n + c];
                b[col * n + c] = b[piv * n + c];
                b[piv * n + c] = t;
            }
        double inv = 1.0 / pv;
        for (size_t c = 0; c < n; c++) {
            a[col * n + c] *= inv;
            b[col * n + c] *= inv;
        }
        for (size_t r = 0; r < n; r++) {
            if (r == col)
                continue;
            double f = a[r * n + col];
            if (f == 0.0)
                continue;
            for (size_t c = 0; c < n; c++) {
                a[r * n + c] -= f * a[col * n + c];
                b[r * n + c] -= f * b[col * n + c];
            }
        }
    }
    for (size_t i = 0; i < n * n; i++)
        Winv[i] = (float)b[i];
    bs_mem_free(a);
    return BS_OK;
}

/* ------------------------------------------------------------- apply --- */

static int64_t wh_tile(int64_t n_t) { return n_t < WH_TILE ? (n_t > 0 ? n_t : 1) : WH_TILE; }

size_t bs_whiten_scratch_bytes(int n_chan, int64_t n_t, int n_threads)
{
    if (n_chan < 1 || n_t < 1)
        return 0;
    if (n_threads < 1)
        n_threads = 1;
    return (size_t)n_threads * (size_t)n_chan * (size_t)wh_tile(n_t) * sizeof(float);
}

/* acc[0..len) = sum over i, in order, of w[i] * row nb[i] of the tile.
 * Blocks of WH_COLS columns keep their running sums in registers while every
 * neighbour goes by (one load per product, no stores of partial sums; eight
 * vectors, so that eight fused adds are in flight, not two: whitening's
 * share of the match stage halved against blocks of 32); each
 * column's terms are added in neighbour order from 0, each by a fused
 * multiply-add (src/common/simd.h), so the result is that of the plain loop
 * of whiten_tail. WH_ROW(FMA) is the body: whiten_row16 for AVX-512
 * (BS_FMA16), whiten_row for the rest (BS_VFMA in BS_FMA_CLONES), all giving the
 * same bytes. */
typedef float wh_vec __attribute__((vector_size(64)));
#define WH_COLS 128 /* columns per block: 8 vectors of 16, eight independent chains of fused adds */
#define WH_NV (WH_COLS / 16)

/* The columns from t0 on, one at a time. */
BS_FMA_CLONES static void whiten_tail(float *restrict acc, const float *restrict buf, size_t tile, const int *nb,
                                      const float *w, int n, int t0, int len)
{
    for (int t = t0; t < len; t++)
        acc[t] = 0.0f;
    for (int i = 0; i < n && t0 < len; i++) {
        const float wi = w[i];
        const float *restrict src = buf + (size_t)nb[i] * tile;
        for (int t = t0; t < len; t++)
            acc[t] = __builtin_fmaf(wi, src[t], acc[t]);
    }
}

#define WH_ROW(FMA)                                                                                              \
    int t0 = 0;                                                                                                  \
    for (; t0 + WH_COLS <= len; t0 += WH_COLS) {                                                                 \
        wh_vec a[WH_NV];                                                                                         \
        for (int v = 0; v < WH_NV; v++)                                                                          \
            a[v] = (wh_vec){0};                                                                                  \
        for (int i = 0; i < n; i++) {                                                                            \
            const float *src = buf + (size_t)nb[i] * tile + t0;                                                  \
            for (int v = 0; v < WH_NV; v++) {                                                                    \
                wh_vec x;                                                                                        \
                memcpy(&x, src + 16 * v, sizeof x);                                                              \
                FMA(a[v], w[i], x);                                                                              \
            }                                                                                                    \
        }                                                                                                        \
        memcpy(acc + t0, a, sizeof a);                                                                           \
    }                                                                                                            \
    whiten_tail(acc, buf, tile, nb, w, n, t0, len)

#define WH_VFMA(acc, w, x) BS_VFMA(acc, w, x, 16)
BS_FMA_CLONES static void whiten_row(float *restrict acc, const float *restrict buf, size_t tile, const int *nb,
                                     const float *w, int n, int len)
{
    WH_ROW(WH_VFMA);
}

#ifdef BS_X86_KERNELS
__attribute__((target("avx512f"))) static void whiten_row16(float *restrict acc, const float *restrict buf,
                                                            size_t tile, const int *nb, const float *w, int n,
                                                            int len)
{
    WH_ROW(BS_FMA16);
}
#endif

/* whiten_row16 where the CPU has AVX-512, else whiten_row: the same bytes. */
static void whiten_row_best(float *restrict acc, const float *restrict buf, size_t tile, const int *nb,
                            const float *w, int n, int len)
{
#ifdef BS_X86_KERNELS
    if (__builtin_cpu_supports("avx512f")) {
        whiten_row16(acc, buf, tile, nb, w, n, len);
        return;
    }
#endif
    whiten_row(acc, buf, tile, nb, w, n, len);
}

bs_status bs_whiten_apply_count(const bs_whitener *wh, float *x, int64_t n_t, void *scratch, size_t scratch_bytes,
                                float thr, int32_t *count)
{
    const int C = wh->n_chan, k = wh->k;
    if (C < 1 || !wh->w)
        return bs_error(BS_ERR_INTERNAL, "whitening: whitener was not built");
    if (n_t < 1)
        return bs_error(BS_ERR_INPUT, "whitening: window of %lld samples: expected >= 1", (long long)n_t);
    const int64_t tile = wh_tile(n_t);
    pp_scratch s;
    BS_TRY(pp_scratch_get("preprocess/whiten", (size_t)C * (size_t)tile * sizeof(float), scratch, scratch_bytes, &s));
    const int64_t n_tiles = (n_t + tile - 1) / tile;
#pragma omp parallel num_threads(s.n_threads)
    {
        float *buf = (float *)(s.buf + (size_t)omp_get_thread_num() * (size_t)C * (size_t)tile * sizeof(float));
        float acc[WH_TILE];
#pragma omp for schedule(static)
        for (int64_t b = 0; b < n_tiles; b++) {
            const int64_t t0 = b * tile;
            const int len = (int)(t0 + tile <= n_t ? tile : n_t - t0);
            for (int c = 0; c < C; c++)
                memcpy(buf + (size_t)c * (size_t)tile, x + (size_t)c * (size_t)n_t + t0, (size_t)len * sizeof(float));
            if (count)
                memset(count + t0, 0, (size_t)len * sizeof *count);
            for (int c = 0; c < C; c++) {
                const int *nb = wh->nbr + (size_t)c * k;
                const float *w = wh->w + (size_t)c * k;
                whiten_row_best(acc, buf, (size_t)tile, nb, w, wh->n_nbr[c], len);
                memcpy(x + (size_t)c * (size_t)n_t + t0, acc, (size_t)len * sizeof(float));
                if (count) /* while the row is in cache: the artifact detector's crossings */
                    bs_artifact_count_row(count + t0, acc, len, thr);
            }
        }
    }
    pp_scratch_release(&s);
    return BS_OK;
}

bs_status bs_whiten_apply(const bs_whitener *wh, float *x, int64_t n_t, void *scratch, size_t scratch_bytes)
{
    return bs_whiten_apply_count(wh, x, n_t, scratch, scratch_bytes, 0.0f, NULL);
}
