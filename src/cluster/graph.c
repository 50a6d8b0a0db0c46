/*
 * graph.c - graph clustering of one center (docs/ALGORITHM.md §7.3–7.4); the
 * mechanism is summarised in cluster.h. Implementation notes:
 *
 * - All buffers of one call are carved from one "cluster/graph" block whose
 *   size is bs_cluster_graph_bytes() (plus the kNN scratch under
 *   "cluster/knn"): persistent arrays (landmarks, kNN lists, the reverse
 *   landmark→spike lists, degrees) and a scratch region shared by the phases
 *   (initialisation, sweeps, tree + splits), sized by the largest.
 * - The assignment sweeps never build the dense n × clusters score matrix:
 *   for a spike only the ≤ k labels of its landmarks have non-zero counts,
 *   and the best label among all others is the one with the fewest landmarks
 *   (smallest id on ties), found by walking the labels sorted by landmark
 *   count. Landmarks are scored from their reverse lists with a per-thread
 *   count array. This equals the dense argmax (ties to the smaller label).
 * - The greedy initialisation draws 100 candidates in each of 200 steps
 *   from a center's n spikes: the same spikes again and again. Each
 *   candidate's row of dot products with all spikes is computed once (own
 *   kernel, terms in feature order: the same bits for any batch of
 *   candidates) and cached, n·n floats where that fits init_cache_floats,
 *   otherwise one slot per spike index modulo the rows that fit.
 * - The planned size grows with n (bs_cluster_graph_bytes), so that a
 *   stage's plan for its largest center covers every smaller one.
 * - Sweeps stop at a fixed point (the next sweeps would change nothing).
 * - Every floating-point reduction has a fixed order: column sums over rows
 *   in row order, dsyrk/dgemv products per block with blocks added in order.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "cluster.h"
#include "common/rng.h"
#include "common/select.h"
#include "common/simd.h"
#include "mem/mem.h"

#define KNN_BLOCK_FLOATS ((int64_t)4 << 20) /* 16 MiB of dot products per kNN block */
#define INIT_BLOCK 8192                      /* spikes per block of the greedy initialisation's sums */
#define INIT_GROUPS 8                        /* kernel calls of four candidate rows the initialisation makes at once */
#define LDA_BLOCK 1024                       /* spikes per block of the discriminant */
#define HIST_BINS 400

void bs_cluster_default_params(bs_cluster_params *p)
{
    p->n_neighbors = 10;
    p->downsampling = 20;
    p->max_subset = 25000;
    p->n_init = 200;
    p->n_init_candidates = 100;
    p->n_iter = 200;
    p->lam = 1.0;
    p->min_spikes = 200;
    p->modularity_split = 0.2;
    p->bimodality_merge = 0.6;
    p->ridge = 0.01;
    p->ccg_threshold = 0.25;
    p->refractory_test = 1;
    p->fs_hz = 30000.0;
    p->seed = 5;
    p->dmin_um = 0;
    p->x_step_um = 200.0;
    p->orphan_factor = 2.0;
    p->orphan_min_group = 12;
    p->orphan_max_landmarks = 80;
    p->par_min_work = (int64_t)1 << 20;
    p->init_cache_floats = (int64_t)8 << 20;
}

int64_t bs_cluster_n_landmarks(int64_t n, const bs_cluster_params *p)
{
    int64_t ds = p->downsampling > 0 ? p->downsampling : 1;
    int64_t n1 = (n + ds - 1) / ds;
    return p->max_subset > 0 && n1 > p->max_subset ? p->max_subset : n1;
}

int64_t bs_cluster_knn_block_rows(int64_t m)
{
    int64_t b = m > 0 ? KNN_BLOCK_FLOATS / m : 4096;
    return b < 1 ? 1 : b > 4096 ? 4096 : b;
}

size_t bs_cluster_knn_scratch_bytes(int64_t n, int64_t m, int D)
{
    (void)D;
    int64_t b = bs_cluster_knn_block_rows(m);
    if (b > n)
        b = n;
    return (size_t)(b * m + m) * sizeof(float);
}

/* ---------------------------------------------------------------- kNN */

/* kn: each spike's k nearest landmarks; dist (if not NULL): their squared
 * distances; dk (if not NULL): the k-th one's alone. scr: the caller's
 * scratch of bs_cluster_knn_scratch_bytes(n, m, D) at least, or NULL (then
 * its own, tagged "cluster/knn"). */
static bs_status knn(const float *X, int64_t n, int D, const float *L, int64_t m, int k, int32_t *kn, float *dist,
                     float *dk, float *scr_in, int64_t par_min)
{
    if (k < 1 || k > m || D < 1)
        return bs_error(BS_ERR_INTERNAL, "cluster kNN: k = %d must be in 1..%lld landmarks", k, (long long)m);
    if (n == 0)
        return BS_OK;
    int64_t B = bs_cluster_knn_block_rows(m);
    if (B > n)
        B = n;
    float *scr = scr_in ? scr_in : bs_mem_alloc("cluster/knn", bs_cluster_knn_scratch_bytes(n, m, D));
    if (!scr)
        return BS_ERR_MEMORY;
    float *G = scr, *ln = scr + B * m;
    for (int64_t j = 0; j < m; j++) {
        float s = 0;
        for (int d = 0; d < D; d++)
            s += L[j * D + d] * L[j * D + d];
        ln[j] = s;
    }
    for (int64_t r0 = 0; r0 < n; r0 += B) {
        int64_t nb = n - r0 < B ? n - r0 : B;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nb, (int)m, D, 1.0f, X + r0 * D, D, L, D, 0.0f,
                    G, (int)m);
#pragma omp parallel for schedule(static) if (nb * m > par_min)
        for (int64_t r = 0; r < nb; r++) {
            const float *x = X + (r0 + r) * D;
            float xn = 0;
            for (int d = 0; d < D; d++)
                xn += x[d] * x[d];
            float bd[64];
            int32_t bi[64];
            float *bdp = bd;
            int32_t *bip = bi;
            float *bdh = NULL;
            int32_t *bih = NULL;
            if (k > 64) {
                bdh = malloc((size_t)k * sizeof *bdh);
                bih = malloc((size_t)k * sizeof *bih);
                bdp = bdh;
                bip = bih;
            }
            int cnt = 0;
            const float *g = G + r * m;
            for (int64_t j = 0; j < m; j++) {
                float d = (xn + ln[j]) - 2.0f * g[j];
                if (cnt == k && !(d < bdp[k - 1]))
                    continue; /* ties keep the smaller index (seen first) */
                int q = cnt < k ? cnt++ : k - 1;
                while (q > 0 && d < bdp[q - 1]) {
                    bdp[q] = bdp[q - 1];
                    bip[q] = bip[q - 1];
                    q--;
                }
                bdp[q] = d;
                bip[q] = (int32_t)j;
            }
            for (int q = 0; q < k; q++) {
                kn[(r0 + r) * k + q] = bip[q];
                if (dist)
                    dist[(r0 + r) * k + q] = bdp[q];
            }
            if (dk)
                dk[r0 + r] = bdp[k - 1];
            free(bdh);
            free(bih);
        }
    }
    if (!scr_in)
        bs_mem_free(scr);
    return BS_OK;
}

bs_status bs_cluster_knn(const float *X, int64_t n, int D, const float *L, int64_t m, int k, int32_t *kn,
                         float *dist)
{
    return knn(X, n, D, L, m, k, kn, dist, NULL, NULL, (int64_t)1 << 20);
}

/* ---------------------------------------------------------------- layout */

typedef struct {
    int64_t n, m, m_cap; /* landmarks (regular, then with the orphans'), and room for them */
    int D, k, nc, C;
    /* persistent, byte offsets */
    size_t o_lmk, o_L, o_kn, o_roff, o_ridx, o_ki, o_kj, o_isub, o_scratch;
    /* init scratch */
    size_t i_vexp, i_vtot, i_cum, i_cand, i_G, i_XT, i_rows, i_tag, i_end;
    int64_t n16, R; /* the initialisation's row stride (n rounded up to 16) and cached rows */
    /* sweep scratch */
    size_t s_N, s_S, s_order, s_old, s_end;
    /* tree + split scratch */
    size_t t_cc, t_cn, t_cr, t_Ki, t_Kj, t_left, t_right, t_lam, t_nodeof, t_leafside, t_group, t_stack,
        t_side, t_A, t_b, t_blk, t_ta, t_tb, t_end;
    size_t total;
} layout;

static size_t al(size_t x) { return (x + 63) & ~(size_t)63; }

/* The kNN scratch of a center's graph: for any count of landmarks up to m_cap (with room for orphans, m_cap >
 * m): a block's dot products are at most max(KNN_BLOCK_FLOATS, m_cap) and n·m_cap floats. This bound, not the
 * exact block, is allocated: it grows with n (the exact one drops by up to m floats where a block's rows do). */
static size_t knn_room_bytes(int64_t n, int64_t m_cap)
{
    int64_t g = m_cap > KNN_BLOCK_FLOATS ? m_cap : KNN_BLOCK_FLOATS;
    g = n * m_cap < g ? n * m_cap : g;
    return (size_t)(g + m_cap) * sizeof(float);
}

/* Landmarks the orphans may add to m regular ones of n spikes: as many again, within the spikes. */
static int64_t orphan_room(const bs_cluster_params *p, int64_t n, int64_t m)
{
    if (!(p->orphan_factor > 0) || m > p->orphan_max_landmarks)
        return 0;
    return n - m < m ? n - m : m;
}

static void make_layout(layout *l, int64_t n, int D, const bs_cluster_params *p)
{
    memset(l, 0, sizeof *l);
    l->n = n;
    l->D = D;
    l->m = bs_cluster_n_landmarks(n, p);
    l->k = p->n_neighbors < l->m ? p->n_neighbors : (int)l->m;
    l->m_cap = l->m + orphan_room(p, n, l->m);
    l->nc = p->n_init > 1 ? p->n_init : 1;
    l->C = p->n_init_candidates > 0 ? p->n_init_candidates : 1;
    int64_t m = l->m_cap, k = l->k, nc = l->nc, C = l->C;
    size_t o = 0;
    l->o_lmk = o; o += al((size_t)m * 8);
    l->o_L = o; o += al((size_t)m * D * 4);
    l->o_kn = o; o += al((size_t)n * k * 4);
    l->o_roff = o; o += al((size_t)(m + 1) * 8);
    l->o_ridx = o; o += al((size_t)n * k * 4);
    l->o_ki = o; o += al((size_t)n * 4);
    l->o_kj = o; o += al((size_t)m * 4);
    l->o_isub = o; o += al((size_t)m * 4);
    l->o_scratch = o;
    size_t s = 0;
    int64_t n16 = (n + 15) / 16 * 16, cf = p->init_cache_floats, cache = n16 * n16 < cf ? n16 * n16 : cf;
    cache = cache > n16 ? cache : n16;
    l->n16 = n16;
    l->R = cache / n16 < n ? cache / n16 : n;
    l->i_vexp = s; s += al((size_t)n * 4);
    l->i_vtot = s; s += al((size_t)n * 4);
    l->i_cum = s; s += al((size_t)n * 8);
    l->i_cand = s; s += al((size_t)C * 8);
    l->i_G = s; s += al((size_t)n16 * 4 * (C < 4 * INIT_GROUPS ? (C + 3) / 4 : INIT_GROUPS) * 4);
    l->i_XT = s; s += al((size_t)n16 * D * 4);
    l->i_rows = s; s += al((size_t)cache * 4); /* monotone in n, and >= R rows of n16 */
    l->i_tag = s; s += al((size_t)n * 8); /* R <= n */
    l->i_end = s;
    s = 0;
    l->s_N = s; s += al((size_t)nc * 8);
    l->s_S = s; s += al((size_t)nc * 8);
    l->s_order = s; s += al((size_t)nc * 4);
    l->s_old = s; s += al((size_t)m * 4);
    l->s_end = s;
    s = 0;
    int64_t nn = 2 * nc;
    int64_t lb = n < LDA_BLOCK ? n : LDA_BLOCK;
    l->t_cc = s; s += al((size_t)nc * nc * 8);
    l->t_cn = s; s += al((size_t)nc * nc * 8);
    l->t_cr = s; s += al((size_t)nc * nc * 8);
    l->t_Ki = s; s += al((size_t)nc * 8);
    l->t_Kj = s; s += al((size_t)nc * 8);
    l->t_left = s; s += al((size_t)nn * 4);
    l->t_right = s; s += al((size_t)nn * 4);
    l->t_lam = s; s += al((size_t)nn * 8);
    l->t_nodeof = s; s += al((size_t)nc * 4);
    l->t_leafside = s; s += al((size_t)nc);
    l->t_group = s; s += al((size_t)nc * 4);
    l->t_stack = s; s += al((size_t)nn * 4);
    l->t_side = s; s += al((size_t)n);
    l->t_A = s; s += al((size_t)D * D * 8);
    l->t_b = s; s += al((size_t)D * 2 * 8);
    l->t_blk = s; s += al((size_t)lb * D * 8 + (size_t)lb * 8);
    l->t_ta = s; s += al((size_t)n * 8);
    l->t_tb = s; s += al((size_t)n * 8);
    l->t_end = s;
    size_t mx = l->i_end > l->s_end ? l->i_end : l->s_end;
    mx = mx > l->t_end ? mx : l->t_end;
    l->total = o + mx;
}

static size_t graph_bytes_at(int64_t n, int D, const bs_cluster_params *p)
{
    layout l;
    make_layout(&l, n, D, p);
    return l.total + knn_room_bytes(n, l.m_cap);
}

/* The most spikes whose landmarks still get room for orphans (0: none has). */
static int64_t orphan_last_n(const bs_cluster_params *p)
{
    if (!(p->orphan_factor > 0))
        return 0;
    int64_t lo = 0, hi = (int64_t)1 << 40; /* landmarks grow with n: bisect for the last n with orphan room */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (bs_cluster_n_landmarks(mid, p) <= p->orphan_max_landmarks)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The layout's size drops where a center's landmarks outgrow orphan_max_landmarks (no room for orphans): past
 * that count of spikes the size is at least the last one with room, so that the size grows with n and the plan
 * of the largest center covers every smaller one. */
size_t bs_cluster_graph_bytes(int64_t n, int D, const bs_cluster_params *p)
{
    if (n < p->min_spikes || n < 2)
        return 0;
    size_t b = graph_bytes_at(n, D, p);
    int64_t no = orphan_last_n(p);
    if (no >= 2 && no >= p->min_spikes && n > no) {
        size_t bo = graph_bytes_at(no, D, p);
        b = bo > b ? bo : b;
    }
    return b;
}

/* ---------------------------------------------------------------- orphan landmarks */

/* The orphans of m regular landmarks lmk / L (rows of D floats) that become landmarks too, appended to
 * lmk and L (room for `room` more); dk: each spike's squared distance to its k-th nearest landmark;
 * score: room floats of scratch, sel: n floats. Returns how many were appended. */
static int64_t add_orphans(const bs_cluster_params *p, const float *X, int64_t n, int D, const float *dk, int64_t m,
                           int64_t room, int64_t *lmk, float *L, float *score, float *sel)
{
    memcpy(sel, dk, (size_t)n * sizeof *sel);
    const float lim = (float)(p->orphan_factor * p->orphan_factor) * bs_select_f(sel, n, n / 2);
    int64_t no = 0; /* the first orphans, in spike order, as candidates */
    for (int64_t i = 0; i < n && no < room; i++)
        if (dk[i] > lim)
            lmk[m + no++] = i;
    /* each one's orphans closer than half its own k-th distance (a quarter of the square) */
    for (int64_t a = 0; a < no; a++) {
        const float *xa = X + lmk[m + a] * D;
        int close = 0;
        for (int64_t b = 0; b < no; b++) {
            if (b == a)
                continue;
            const float *xb = X + lmk[m + b] * D;
            float d2 = 0;
            for (int d = 0; d < D; d++)
                d2 += (xa[d] - xb[d]) * (xa[d] - xb[d]);
            close += d2 < 0.25f * dk[lmk[m + a]];
        }
        score[a] = (float)close;
    }
    int64_t added = 0;
    for (int64_t a = 0; a < no; a++)
        if (score[a] >= p->orphan_min_group) {
            int64_t i = lmk[m + a];
            lmk[m + added] = i;
            memcpy(L + (m + added) * D, X + i * D, (size_t)D * sizeof *L);
            added++;
        }
    return added;
}

/* ---------------------------------------------------------------- bimodality */

static void gauss_smooth(const double *h, double *out, int n, double sigma)
{
    int rad = (int)(4.0 * sigma + 0.5);
    double w[64], ws = 0;
    for (int j = -rad; j <= rad; j++)
        ws += w[j + rad] = exp(-0.5 * j * j / (sigma * sigma));
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = -rad; j <= rad; j++) {
            int q = i + j;
            while (q < 0 || q >= n) /* reflect: d c b a | a b c d */
                q = q < 0 ? -q - 1 : 2 * n - q - 1;
            s += w[j + rad] * h[q];
        }
        out[i] = s / ws;
    }
}

/* Cholesky solve of a (D × D SPD, destroyed) x = b in place. */
static int chol_solve(double *a, double *b, int D)
{
    for (int j = 0; j < D; j++) {
        double s = a[j * D + j];
        for (int q = 0; q < j; q++)
            s -= a[j * D + q] * a[j * D + q];
        if (!(s > 0))
            return -1;
        double d = sqrt(s);
        a[j * D + j] = d;
        for (int i = j + 1; i < D; i++) {
            double t = a[i * D + j];
            for (int q = 0; q < j; q++)
                t -= a[i * D + q] * a[j * D + q];
            a[i * D + j] = t / d;
        }
    }
    for (int i = 0; i < D; i++) {
        double s = b[i];
        for (int q = 0; q < i; q++)
            s -= a[i * D + q] * b[q];
        b[i] = s / a[i * D + i];
    }
    for (int i = D - 1; i >= 0; i--) {
        double s = b[i];
        for (int q = i + 1; q < D; q++)
            s -= a[q * D + i] * b[q];
        b[i] = s / a[i * D + i];
    }
    return 0;
}

/* Scratch: A (D×D), rhs (2D), blk (lb × D + lb doubles, lb = min(n, LDA_BLOCK): the layout's t_blk). */
static bs_status bimodality(const float *X, int64_t n, int D, const int8_t *side, double ridge, double *A,
                            double *rhs, double *blk, double *score)
{
    int64_t na = 0, nb = 0;
    for (int64_t i = 0; i < n; i++) {
        na += side[i] > 0;
        nb += side[i] < 0;
    }
    *score = 0;
    if (na == 0 || nb == 0)
        return BS_OK;
    double wa = (double)nb / (double)(na + nb), wb = (double)na / (double)(na + nb);
    memset(A, 0, (size_t)D * D * sizeof *A);
    memset(rhs, 0, (size_t)D * sizeof *rhs);
    const int lb = n < LDA_BLOCK ? (int)n : LDA_BLOCK; /* rows of blk; the weighted targets follow them */
    double *yw = blk + (size_t)lb * D;
    int64_t i = 0;
    while (i < n) {
        int r = 0;
        for (; i < n && r < lb; i++) {
            if (!side[i])
                continue;
            double w = side[i] > 0 ? wa : wb, sw = sqrt(w);
            for (int d = 0; d < D - 1; d++)
                blk[(size_t)r * D + d] = sw * X[i * D + d];
            blk[(size_t)r * D + D - 1] = sw; /* bias column */
            yw[r] = sw * (side[i] > 0 ? 1.0 : -1.0);
            r++;
        }
        if (r == 0)
            break;
        cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, D, r, 1.0, blk, D, 1.0, A, D);
        cblas_dgemv(CblasRowMajor, CblasTrans, r, D, 1.0, blk, D, yw, 1, 1.0, rhs, 1);
    }
    for (int d = 0; d < D; d++)
        A[d * D + d] += ridge;
    if (chol_solve(A, rhs, D) != 0)
        return bs_error(BS_ERR_INTERNAL, "cluster: bimodality system is not positive definite");
    double h[HIST_BINS] = {0}, hs[HIST_BINS];
    for (int64_t q = 0; q < n; q++) {
        if (!side[q])
            continue;
        double z = rhs[D - 1];
        for (int d = 0; d < D - 1; d++)
            z += rhs[d] * X[q * D + d];
        if (z < -2.0 || z > 2.0)
            continue;
        int bin = (int)floor((z + 2.0) / (4.0 / HIST_BINS));
        if (bin >= HIST_BINS)
            bin = HIST_BINS - 1;
        h[bin] += 1;
    }
    gauss_smooth(h, hs, HIST_BINS, 4.0);
    int imin = 175;
    for (int b = 176; b <= 224; b++)
        if (hs[b] < hs[imin])
            imin = b;
    double xm1 = 0, xm2 = 0;
    for (int b = 0; b <= imin; b++)
        xm1 = fmax(xm1, hs[b]);
    for (int b = imin; b < HIST_BINS; b++)
        xm2 = fmax(xm2, hs[b]);
    double xmin = hs[imin];
    double r1 = xm1 > 0 ? xmin / xm1 : 1.0, r2 = xm2 > 0 ? xmin / xm2 : 1.0;
    *score = 1.0 - fmax(r1, r2);
    return BS_OK;
}

bs_status bs_cluster_bimodality(const float *X, int64_t n, int D, const int8_t *side, double ridge, double *score)
{
    double *A = bs_mem_alloc("cluster/graph", ((size_t)D * D + 2 * (size_t)D + (size_t)LDA_BLOCK * (D + 1)) * 8);
    if (!A)
        return BS_ERR_MEMORY;
    bs_status st = bimodality(X, n, D, side, ridge, A, A + (size_t)D * D, A + (size_t)D * D + 2 * D, score);
    bs_mem_free(A);
    return st;
}

/* ---------------------------------------------------------------- helpers */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void sort_times(int64_t *t, int64_t n)
{
    for (int64_t i = 1; i < n; i++)
        if (t[i] < t[i - 1]) {
            qsort(t, (size_t)n, sizeof *t, cmp_i64);
            return;
        }
}

/* Relabel to 0..L-1 in order of first appearance; returns L. */
static int relabel_first(int32_t *lab, int64_t n, int nmax, int32_t *map)
{
    for (int c = 0; c < nmax; c++)
        map[c] = -1;
    int L = 0;
    for (int64_t i = 0; i < n; i++) {
        if (map[lab[i]] < 0)
            map[lab[i]] = L++;
        lab[i] = map[lab[i]];
    }
    return L;
}

typedef struct {
    const layout *l;
    const float *X;
    const int32_t *kn;
    const int64_t *roff;
    const int32_t *ridx;
    const int32_t *ki, *kj;
    const int64_t *lmk;
    double pen; /* lam / m */
    int64_t par_min; /* see bs_cluster_params.par_min_work */
} graph;

/* Landmark step: isub[s] = argmax_c count(s, c) - pen·kj[s]·N_c. */
static void landmark_step(const graph *g, const int32_t *lab, const int64_t *N, int nc, int32_t *isub)
{
    int64_t m = g->l->m;
#pragma omp parallel if (m * nc + g->roff[m] > g->par_min)
    {
        int32_t *cnt = calloc((size_t)nc, sizeof *cnt);
#pragma omp for schedule(static)
        for (int64_t s = 0; s < m; s++) {
            for (int64_t q = g->roff[s]; q < g->roff[s + 1]; q++)
                cnt[lab[g->ridx[q]]]++;
            double pk = g->pen * g->kj[s];
            int best = 0;
            double bs = -INFINITY;
            for (int c = 0; c < nc; c++) {
                double sc = cnt[c] - pk * (double)N[c];
                if (sc > bs) {
                    bs = sc;
                    best = c;
                }
            }
            isub[s] = best;
            for (int64_t q = g->roff[s]; q < g->roff[s + 1]; q++)
                cnt[lab[g->ridx[q]]] = 0;
        }
        free(cnt);
    }
}

/* Spike step: lab[i] = argmax_c #{j: isub[kn[i,j]] = c} - pen·ki[i]·S_c.
 * order: labels sorted by (S_c, c). Returns the number of changed labels. */
static int64_t spike_step(const graph *g, const int32_t *isub, const int64_t *S, const int32_t *order, int nc,
                          int32_t *lab)
{
    int64_t n = g->l->n, changed = 0;
    int k = g->l->k;
#pragma omp parallel for schedule(static) reduction(+ : changed) if (n * k > g->par_min / 4)
    for (int64_t i = 0; i < n; i++) {
        int32_t labs[64];
        int cnts[64], nl = 0;
        for (int j = 0; j < k && j < 64; j++) {
            int32_t c = isub[g->kn[i * k + j]];
            int q = 0;
            while (q < nl && labs[q] != c)
                q++;
            if (q == nl) {
                labs[nl] = c;
                cnts[nl++] = 0;
            }
            cnts[q]++;
        }
        double pk = g->pen * g->ki[i];
        int best = -1;
        double bs = -INFINITY;
        for (int q = 0; q < nl; q++) {
            double sc = cnts[q] - pk * (double)S[labs[q]];
            if (sc > bs || (sc == bs && labs[q] < best)) {
                bs = sc;
                best = labs[q];
            }
        }
        for (int o = 0; o < nc; o++) { /* best label without landmarks among i's neighbours */
            int32_t c = pk > 0 ? order[o] : o, in = 0; /* pk = 0: all score 0, the smallest id wins */
            for (int q = 0; q < nl && !in; q++)
                in = labs[q] == c;
            if (in)
                continue;
            double sc = -pk * (double)S[c];
            if (sc > bs || (sc == bs && c < best)) {
                bs = sc;
                best = c;
            }
            break;
        }
        if (lab[i] != best) {
            lab[i] = best;
            changed++;
        }
    }
    return changed;
}

static _Thread_local const int64_t *sort_key_;
static int cmp_order(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (sort_key_[x] != sort_key_[y])
        return sort_key_[x] < sort_key_[y] ? -1 : 1;
    return (x > y) - (x < y);
}

/* ---------------------------------------------------------------- init */

/* Σ_i max(0, (g[i] - cn) - v[i]) over ≤ INIT_BLOCK terms, as 16 interleaved
 * float partial sums combined in a fixed order: vectorisable, and the same
 * result for every SIMD variant and thread count. */
BS_VECTORIZED static double relu_sum(const float *restrict g, const float *restrict v, float cn, int64_t nb)
{
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= nb; i += 16)
        for (int u = 0; u < 16; u++) {
            float imp = (g[i + u] - cn) - v[i + u];
            acc[u] += imp > 0.0f ? imp : 0.0f;
        }
    for (; i < nb; i++) {
        float imp = (g[i] - cn) - v[i];
        acc[i % 16] += imp > 0.0f ? imp : 0.0f;
    }
    double s = 0;
    for (int u = 0; u < 16; u++)
        s += (double)acc[u];
    return s;
}

/* Σ_i max(0, (g[i] - cn) - v[i]) over n terms: relu_sum on blocks of INIT_BLOCK, added in order. */
static double row_gain_sum(const float *g, const float *v, float cn, int64_t n)
{
    double cs = 0;
    for (int64_t r0 = 0; r0 < n; r0 += INIT_BLOCK)
        cs += relu_sum(g + r0, v + r0, cn, n - r0 < INIT_BLOCK ? n - r0 : INIT_BLOCK);
    return cs;
}

/* o_q[i] = 2 Σ_d XT[d][i]·c_q[d] for q < 4, i < n16 (XT: D rows of stride n16): each element's terms added
 * in the order of d, one rounding each (no fused multiply-add, simd.h), so an element's bits depend on neither
 * the vector width nor which other candidates or rows share the call. */
BS_VECTORIZED static void dot_rows4(const float *restrict XT, int64_t n16, int D, const float *c0, const float *c1,
                                    const float *c2, const float *c3, float *o0, float *o1, float *o2, float *o3)
{
    for (int64_t i0 = 0; i0 < n16; i0 += 16) {
        float a0[16] = {0}, a1[16] = {0}, a2[16] = {0}, a3[16] = {0};
        for (int d = 0; d < D; d++) {
            const float *x = XT + (int64_t)d * n16 + i0;
            float w0 = c0[d], w1 = c1[d], w2 = c2[d], w3 = c3[d];
            for (int u = 0; u < 16; u++) {
                a0[u] += x[u] * w0;
                a1[u] += x[u] * w1;
                a2[u] += x[u] * w2;
                a3[u] += x[u] * w3;
            }
        }
        for (int u = 0; u < 16; u++) {
            o0[i0 + u] = 2.0f * a0[u];
            o1[i0 + u] = 2.0f * a1[u];
            o2[i0 + u] = 2.0f * a2[u];
            o3[i0 + u] = 2.0f * a3[u];
        }
    }
}

/* The greedy initialisation: n_init steps, each drawing up to C candidate spikes (in proportion to the variance
 * the chosen ones leave unexplained) and keeping the one whose 2·x_i·x_c row explains most. A candidate's row
 * is computed by dot_rows4 (into G, at most 4·INIT_GROUPS rows) and kept in a cache of R rows (slot: the spike's
 * index modulo R; R = n where n16·n16 floats fit init_cache_floats); a row is the same bits whether it was cached
 * or computed again, so the cache's size changes only the time. */
static void greedy_init(const graph *g, const bs_cluster_params *p, char *scr, int32_t *lab)
{
    const layout *l = g->l;
    int64_t n = l->n, n16 = l->n16, R = l->R;
    int D = l->D, C = l->C;
    float *vexp = (float *)(scr + l->i_vexp), *vtot = (float *)(scr + l->i_vtot);
    double *cum = (double *)(scr + l->i_cum);
    int64_t *cand = (int64_t *)(scr + l->i_cand), *tag = (int64_t *)(scr + l->i_tag);
    float *G = (float *)(scr + l->i_G), *XT = (float *)(scr + l->i_XT), *rows = (float *)(scr + l->i_rows);
    const float *X = g->X;
    int miss[1024];
    for (int64_t i = 0; i < n; i++) {
        float s = 0;
        for (int d = 0; d < D; d++)
            s += X[i * D + d] * X[i * D + d];
        vtot[i] = s;
        vexp[i] = 0;
        lab[i] = 0;
    }
    for (int d = 0; d < D; d++) {
        for (int64_t i = 0; i < n; i++)
            XT[(int64_t)d * n16 + i] = X[i * D + d];
        for (int64_t i = n; i < n16; i++)
            XT[(int64_t)d * n16 + i] = 0;
    }
    for (int64_t s = 0; s < R; s++)
        tag[s] = -1;
    bs_rng r;
    bs_rng_seed(&r, p->seed);
    double colsum[1024];
    for (int step = 0; step < l->nc; step++) {
        double tot = 0;
        int64_t npos = 0;
        for (int64_t i = 0; i < n; i++) {
            double w = vtot[i] - vexp[i];
            if (w > 0) {
                tot += w;
                npos++;
            }
            cum[i] = tot;
        }
        if (!(tot > 0))
            break;
        int nc = 0, want = npos < C ? (int)npos : C;
        for (int tries = 0; nc < want && tries < 50 * C; tries++) {
            double u = bs_rng_uniform(&r) * tot;
            int64_t lo = 0, hi = n - 1;
            while (lo < hi) {
                int64_t mid = (lo + hi) / 2;
                if (cum[mid] > u)
                    hi = mid;
                else
                    lo = mid + 1;
            }
            int dup = 0;
            for (int q = 0; q < nc && !dup; q++)
                dup = cand[q] == lo;
            if (!dup)
                cand[nc++] = lo;
        }
        if (nc == 0)
            break;
        /* the cached candidates' sums first (a miss's row may take a cached one's slot below) */
        int nm = 0;
        for (int q = 0; q < nc; q++)
            if (tag[cand[q] % R] != cand[q])
                miss[nm++] = q;
#pragma omp parallel for schedule(static) if ((int64_t)nc * n > g->par_min)
        for (int q = 0; q < nc; q++) {
            int64_t s = cand[q] % R;
            if (tag[s] == cand[q])
                colsum[q] = row_gain_sum(rows + s * n16, vexp, vtot[cand[q]], n);
        }
        /* the misses: four a kernel call, INIT_GROUPS calls at once into G, then cached in miss order (of two
           misses with one slot the later stays) */
        const int ng = (nm + 3) / 4;
        for (int b0 = 0; b0 < ng; b0 += INIT_GROUPS) {
            const int nb = ng - b0 < INIT_GROUPS ? ng - b0 : INIT_GROUPS;
#pragma omp parallel for schedule(static) if (nb > 1 && (int64_t)nb * 4 * n16 * D > g->par_min)
            for (int b = 0; b < nb; b++) {
                int q[4];
                float *o = G + (int64_t)b * 4 * n16;
                for (int k = 0; k < 4; k++)
                    q[k] = miss[4 * (b0 + b) + k < nm ? 4 * (b0 + b) + k : nm - 1];
                dot_rows4(XT, n16, D, X + cand[q[0]] * D, X + cand[q[1]] * D, X + cand[q[2]] * D,
                          X + cand[q[3]] * D, o, o + n16, o + 2 * n16, o + 3 * n16);
                for (int k = 0; k < 4 && 4 * (b0 + b) + k < nm; k++)
                    colsum[q[k]] = row_gain_sum(o + k * n16, vexp, vtot[cand[q[k]]], n);
            }
            for (int j = 4 * b0; j < nm && j < 4 * (b0 + nb); j++) {
                int64_t s = cand[miss[j]] % R;
                memcpy(rows + s * n16, G + (int64_t)(j - 4 * b0) * n16, (size_t)n16 * sizeof *rows);
                tag[s] = cand[miss[j]];
            }
        }
        int best = 0;
        for (int q = 1; q < nc; q++)
            if (colsum[q] > colsum[best])
                best = q;
        /* the chosen candidate's row: cached, or (its slot taken in this step) computed again, the same bits */
        const float *g2 = rows + (cand[best] % R) * n16;
        if (tag[cand[best] % R] != cand[best]) {
            const float *xc = X + cand[best] * D;
            dot_rows4(XT, n16, D, xc, xc, xc, xc, G, G + n16, G + 2 * n16, G + 3 * n16);
            g2 = G;
        }
        /* the chosen candidate's gains 2·x_i·x_c - |x_c|^2 */
        float cn = vtot[cand[best]];
#pragma omp parallel for schedule(static) if (n > g->par_min)
        for (int64_t i = 0; i < n; i++) {
            float gain = g2[i] - cn;
            if (gain - vexp[i] > 0) {
                vexp[i] = gain;
                lab[i] = step;
            }
        }
    }
}

/* ---------------------------------------------------------------- main */

/* Leaves under node v (leaves < nc) get side value s. */
static void mark_leaves(const int32_t *left, const int32_t *right, int nc, int v, int8_t s, int8_t *leafside,
                        int32_t *stack)
{
    int sp = 0;
    stack[sp++] = v;
    while (sp) {
        int u = stack[--sp];
        if (u < nc)
            leafside[u] = s;
        else {
            stack[sp++] = left[u];
            stack[sp++] = right[u];
        }
    }
}

bs_status bs_cluster_graph(const bs_cluster_params *p, const float *X, int64_t n, int D, const int64_t *t,
                           int32_t *labels, int *n_labels)
{
    if (n < p->min_spikes || n < 2 || D < 2) {
        for (int64_t i = 0; i < n; i++)
            labels[i] = 0;
        *n_labels = n > 0;
        return BS_OK;
    }
    if (p->n_init > 1024 || p->n_init_candidates > 1024 || p->n_neighbors > 64)
        return bs_error(BS_ERR_USAGE, "cluster: n_init, candidates <= 1024 and n_neighbors <= 64 required");
    layout l;
    make_layout(&l, n, D, p);
    /* the planned size, which can exceed this layout's (bs_cluster_graph_bytes) */
    char *base = bs_mem_alloc("cluster/graph", bs_cluster_graph_bytes(n, D, p) - knn_room_bytes(n, l.m_cap));
    if (!base)
        return BS_ERR_MEMORY;
    bs_status st = BS_OK;
    int64_t m = l.m;
    int k = l.k, nc = l.nc;
    int64_t *lmk = (int64_t *)(base + l.o_lmk);
    float *L = (float *)(base + l.o_L);
    int32_t *kn = (int32_t *)(base + l.o_kn), *ridx = (int32_t *)(base + l.o_ridx);
    int64_t *roff = (int64_t *)(base + l.o_roff);
    int32_t *ki = (int32_t *)(base + l.o_ki), *kj = (int32_t *)(base + l.o_kj), *isub = (int32_t *)(base + l.o_isub);
    char *scr = base + l.o_scratch;

    /* 1. landmarks: every ds-th spike, dropping n1 - max_sub of them evenly */
    int64_t ds = p->downsampling > 0 ? p->downsampling : 1, n1 = (n + ds - 1) / ds, ndrop = n1 - m;
    int64_t q = 0, di = 0;
    for (int64_t j = 0; j < n1; j++) {
        if (di < ndrop) {
            int64_t drop = ndrop == 1 ? 0 : llround((double)di * (double)(n1 - 1) / (double)(ndrop - 1));
            if (drop == j) {
                di++;
                continue;
            }
        }
        lmk[q] = j * ds;
        memcpy(L + q * D, X + j * ds * D, (size_t)D * sizeof *L);
        q++;
    }
    /* 2. kNN; with orphans that become landmarks, again with them */
    const int64_t room = l.m_cap - m;
    float *dk = (float *)(scr + l.i_vexp), *sel = (float *)(scr + l.i_vtot), *score = (float *)(scr + l.i_cum);
    float *kscr = bs_mem_alloc("cluster/knn", knn_room_bytes(n, l.m_cap)); /* for both passes */
    st = kscr ? knn(X, n, D, L, m, k, kn, NULL, room > 0 ? dk : NULL, kscr, p->par_min_work) : BS_ERR_MEMORY;
    if (st == BS_OK && room > 0) {
        int64_t added = add_orphans(p, X, n, D, dk, m, room, lmk, L, score, sel);
        if (added) {
            m += added;
            l.m = m;
            st = knn(X, n, D, L, m, k, kn, NULL, NULL, kscr, p->par_min_work);
        }
    }
    bs_mem_free(kscr);
    if (st != BS_OK)
        goto done;
    /* 3. reverse lists and degrees (self-edges excluded from degrees) */
    for (int64_t s = 0; s <= m; s++)
        roff[s] = 0;
    for (int64_t i = 0; i < n * k; i++)
        roff[kn[i] + 1]++;
    for (int64_t s = 0; s < m; s++)
        roff[s + 1] += roff[s];
    {
        int64_t *fill = (int64_t *)scr; /* m + 1 int64 fit in the init scratch (n ≥ m) */
        memcpy(fill, roff, (size_t)(m + 1) * sizeof *fill);
        for (int64_t i = 0; i < n; i++)
            for (int j = 0; j < k; j++)
                ridx[fill[kn[i * k + j]]++] = (int32_t)i;
    }
    int64_t medges = 0;
    for (int64_t s = 0; s < m; s++)
        kj[s] = (int32_t)(roff[s + 1] - roff[s]);
    for (int64_t i = 0; i < n; i++) {
        ki[i] = k;
        for (int j = 0; j < k; j++) {
            int32_t s = kn[i * k + j];
            if (lmk[s] == i) {
                ki[i]--;
                kj[s]--;
            }
        }
        medges += ki[i];
    }
    if (medges == 0) {
        for (int64_t i = 0; i < n; i++)
            labels[i] = 0;
        *n_labels = 1;
        goto done;
    }
    graph g = {&l, X, kn, roff, ridx, ki, kj, lmk, p->lam / (double)medges, p->par_min_work};

    /* 4. initialisation */
    greedy_init(&g, p, scr, labels);

    /* 5. sweeps */
    int64_t *N = (int64_t *)(scr + l.s_N), *S = (int64_t *)(scr + l.s_S);
    int32_t *order = (int32_t *)(scr + l.s_order), *old = (int32_t *)(scr + l.s_old);
    for (int it = 0; it < p->n_iter; it++) {
        memset(N, 0, (size_t)nc * sizeof *N);
        for (int64_t i = 0; i < n; i++)
            N[labels[i]]++;
        if (it > 0)
            memcpy(old, isub, (size_t)m * sizeof *old);
        landmark_step(&g, labels, N, nc, isub);
        int sub_changed = it == 0 || memcmp(old, isub, (size_t)m * sizeof *old) != 0;
        memset(S, 0, (size_t)nc * sizeof *S);
        for (int64_t s = 0; s < m; s++)
            S[isub[s]]++;
        for (int c = 0; c < nc; c++)
            order[c] = c;
        sort_key_ = S;
        qsort(order, (size_t)nc, sizeof *order, cmp_order);
        int64_t changed = spike_step(&g, isub, S, order, nc, labels);
        if (!changed && !sub_changed)
            break;
    }
    /* 6. consecutive labels, isub once more */
    int32_t *map = (int32_t *)(scr + l.s_order);
    int ncl = relabel_first(labels, n, nc, map);
    memset(N, 0, (size_t)nc * sizeof *N);
    for (int64_t i = 0; i < n; i++)
        N[labels[i]]++;
    landmark_step(&g, labels, N, ncl, isub);
    if (ncl == 1) {
        *n_labels = 1;
        goto done;
    }

    /* 7. tree */
    {
        double *cc = (double *)(scr + l.t_cc), *cn = (double *)(scr + l.t_cn), *cr = (double *)(scr + l.t_cr);
        double *Ki = (double *)(scr + l.t_Ki), *Kj = (double *)(scr + l.t_Kj), *tlam = (double *)(scr + l.t_lam);
        int32_t *left = (int32_t *)(scr + l.t_left), *right = (int32_t *)(scr + l.t_right);
        int32_t *nodeof = (int32_t *)(scr + l.t_nodeof), *group = (int32_t *)(scr + l.t_group);
        int32_t *stack = (int32_t *)(scr + l.t_stack);
        int8_t *leafside = (int8_t *)(scr + l.t_leafside), *side = (int8_t *)(scr + l.t_side);
        int C = ncl;
        memset(cc, 0, (size_t)C * C * sizeof *cc);
        memset(Ki, 0, (size_t)C * sizeof *Ki);
        memset(Kj, 0, (size_t)C * sizeof *Kj);
        for (int64_t i = 0; i < n; i++) {
            Ki[labels[i]] += ki[i];
            for (int j = 0; j < k; j++) {
                int32_t s = kn[i * k + j];
                if (lmk[s] != i)
                    cc[labels[i] * C + isub[s]] += 1;
            }
        }
        for (int64_t s = 0; s < m; s++)
            Kj[isub[s]] += kj[s];
        for (int a = 0; a < C; a++)
            for (int b = 0; b < C; b++)
                cn[a * C + b] = 0.001 + Ki[a] * Kj[b] / (double)medges;
        for (int a = 0; a < C; a++)
            for (int b = a; b < C; b++) {
                double x = cc[a * C + b] + cc[b * C + a], y = cn[a * C + b] + cn[b * C + a];
                cc[a * C + b] = cc[b * C + a] = x;
                cn[a * C + b] = cn[b * C + a] = y;
            }
        for (int a = 0; a < C; a++)
            for (int b = 0; b < C; b++)
                cr[a * C + b] = a == b ? -1.0 : cc[a * C + b] / cn[a * C + b];
        for (int c = 0; c < C; c++)
            nodeof[c] = c;
        for (int stp = 0; stp < C - 1; stp++) {
            int y = 0, x = 1;
            double best = -INFINITY;
            for (int a = 0; a < C; a++)
                for (int b = 0; b < C; b++)
                    if (cr[a * C + b] > best) {
                        best = cr[a * C + b];
                        y = a;
                        x = b;
                    }
            for (int b = 0; b < C; b++) {
                cc[y * C + b] += cc[x * C + b];
                cn[y * C + b] += cn[x * C + b];
            }
            for (int a = 0; a < C; a++) {
                cc[a * C + y] += cc[a * C + x];
                cn[a * C + y] += cn[a * C + x];
            }
            for (int b = 0; b < C; b++) {
                cc[x * C + b] = cc[b * C + x] = -1;
                cn[x * C + b] = cn[b * C + x] = -1;
                cr[x * C + b] = cr[b * C + x] = -1;
            }
            for (int b = 0; b < C; b++)
                if (b != y && cn[y * C + b] > 0)
                    cr[y * C + b] = cr[b * C + y] = cc[y * C + b] / cn[y * C + b];
            cr[y * C + y] = -1;
            int node = C + stp;
            left[node] = nodeof[x];
            right[node] = nodeof[y];
            tlam[node] = best;
            nodeof[y] = node;
        }
        /* 8. splits from the root */
        int ngroups = 0, sp = 0;
        int32_t *work = (int32_t *)(scr + l.t_cc); /* cc no longer needed: C*C doubles ≥ 2C ints */
        work[sp++] = 2 * C - 2;
        int64_t *ta = (int64_t *)(scr + l.t_ta), *tb = (int64_t *)(scr + l.t_tb);
        double *A = (double *)(scr + l.t_A), *rhs = (double *)(scr + l.t_b), *blk = (double *)(scr + l.t_blk);
        while (sp) {
            int v = work[--sp];
            int collapse = 0;
            if (v >= C && tlam[v] >= p->modularity_split) {
                memset(leafside, 0, (size_t)C);
                mark_leaves(left, right, C, left[v], 1, leafside, stack);
                mark_leaves(left, right, C, right[v], -1, leafside, stack);
                if (p->refractory_test && t && p->fs_hz > 0) {
                    int64_t na = 0, nb = 0;
                    for (int64_t i = 0; i < n; i++) {
                        int8_t s = leafside[labels[i]];
                        if (s > 0)
                            ta[na++] = t[i];
                        else if (s < 0)
                            tb[nb++] = t[i];
                    }
                    sort_times(ta, na);
                    sort_times(tb, nb);
                    collapse = bs_ccg_cross_refractory(ta, na, tb, nb, p->fs_hz, p->ccg_threshold, NULL);
                }
                if (!collapse) {
                    for (int64_t i = 0; i < n; i++)
                        side[i] = leafside[labels[i]];
                    double score;
                    st = bimodality(X, n, D, side, p->ridge, A, rhs, blk, &score);
                    if (st != BS_OK)
                        goto done;
                    collapse = score < p->bimodality_merge;
                }
            }
            if (v < C || collapse) {
                memset(leafside, 0, (size_t)C);
                mark_leaves(left, right, C, v, 1, leafside, stack);
                for (int c = 0; c < C; c++)
                    if (leafside[c])
                        group[c] = ngroups;
                ngroups++;
            } else {
                work[sp++] = right[v];
                work[sp++] = left[v];
            }
        }
        for (int64_t i = 0; i < n; i++)
            labels[i] = group[labels[i]];
        *n_labels = relabel_first(labels, n, ngroups, map);
    }
done:
    bs_mem_free(base);
    return st;
}
