/*
 * templates.c - channel-sparse low-rank templates and their matched-filter
 * scores.
 *
 * A template set is copied and validated once (bs_match_templates_create):
 * supports must be ascending unique channel lists, the weights are rescaled so
 * every waveform W_k = U_k * basis has unit L2 norm (the norm is computed as
 * sum_i U_k[i,:] G U_k[i,:]^T with G = basis basis^T, in double), and the
 * lagged basis products WtW used by the pair table are tabulated. Templates
 * are grouped into score blocks (build_blocks): sorted by lowest support
 * channel, up to BS_MATCH_BLOCK consecutive templates whose supports fit in a
 * window of 1.5 n_sup consecutive channels share one product, with weights
 * stored padded to the window (exact zeros off each support, so the scores
 * are those of the sparse templates).
 *
 * Scores are computed tile by tile over time (BS_MATCH_TILE samples), each
 * tile in sub-tiles of the filter bank's output length (whole panels; 192
 * samples for 61-sample waveforms) on a fixed grid from the tile's start:
 *   1. projection of every channel on the basis,
 *      proj[(c*P + p)][u] = sum_s basis[p, s] * X[c, t0 + u + s - nt_before],
 *      by the basis's filter bank (src/common/firbank.h: one transform of
 *      16 channels per sub-tile), stored in panels of PANEL samples (PIDX
 *      below) (zero outside the window), parallel over channel groups (each
 *      value comes from one transform, so bits do not depend on the thread
 *      count);
 *   2. per block one matrix product, blk (nb x L) = Wpad (nb x w*P) * proj
 *      rows of the window (w*P x L, contiguous: rows c*P + p), by
 *      block_scores (blocks hold 1-2 templates on average, too few for a
 *      BLAS GEMM to repay packing its operands); a template too wide for a
 *      window has its support's rows gathered first. Rows of templates inside
 *      the requested range are written into B in place, the others into a
 *      scratch row.
 * A sub-tile's projection (1.8 MB for 384 channels) is still in the cache
 * when the products read it; a whole tile's (9.4 MB) was not, and writing it
 * cost nearly as much as computing it.
 * The block products are the same whatever range is requested, so any split of
 * the templates into chunks reproduces the all-at-once scores bit for bit.
 * Cost per sample: about C*160 FLOP (projection by FFT at P = 6, nt = 61:
 * P + 1 transforms of 256 points per tile of 196 outputs and channel pair;
 * C*P*nt*2 = C*732 directly) + about K*w*P*2 FLOP (products, w <= 1.5 n_sup).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/simd.h"
#include "common/transpose8.h"
#include "match/match.h"
#include "mem/mem.h"

/* Widest channel window of a block: 1.5 supports (the slack lets templates
 * with nearby supports share one product). */
static int window_max(int n_chan, int n_sup)
{
    int w = n_sup + n_sup / 2;
    return w < n_chan ? w : n_chan;
}

size_t bs_match_templates_bytes(int n_chan, int nt, int n_pc, int K, int n_sup)
{
    size_t k = (size_t)K;
    size_t b = 0;
    b += sizeof(float) * (size_t)n_pc * (size_t)nt;                             /* basis */
    b += sizeof(float) * (size_t)n_pc * (size_t)n_pc * (size_t)(2 * nt - 1);  /* wtw */
    b += sizeof(int32_t) * k * (size_t)n_sup;                                 /* support */
    b += sizeof(float) * k * (size_t)n_sup * (size_t)n_pc;                    /* U */
    b += sizeof(float) * k;                                                   /* norm_in */
    b += sizeof(int32_t) * (k + 1);                                           /* block_start (K + 1, the most blocks) */
    b += sizeof(int32_t) * k * 4;                                             /* members, of, c0, w */
    b += sizeof(int64_t) * k;                                                 /* block_woff */
    b += sizeof(float) * k * (size_t)window_max(n_chan, n_sup) * (size_t)n_pc; /* bw (the most) */
    b += bs_firbank_bytes(n_pc, nt);                                          /* the projection's filter bank */
    return b;
}

void bs_match_templates_free(bs_match_templates *t)
{
    if (!t)
        return;
    bs_firbank_free(&t->fir);
    bs_mem_free(t->basis);
    bs_mem_free(t->wtw);
    bs_mem_free(t->support);
    bs_mem_free(t->U);
    bs_mem_free(t->norm_in);
    bs_mem_free(t->block_start);
    bs_mem_free(t->block_members);
    bs_mem_free(t->block_of);
    bs_mem_free(t->block_c0);
    bs_mem_free(t->block_w);
    bs_mem_free(t->block_woff);
    bs_mem_free(t->bw);
    memset(t, 0, sizeof *t);
}


typedef struct {
    int32_t lo, k;
} lo_key;

static int cmp_lo(const void *a, const void *b)
{
    const lo_key *x = a, *y = b;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    return (x->k > y->k) - (x->k < y->k);
}

/*
 * Blocks: templates sorted by their lowest support channel (then id); a block
 * takes consecutive templates while they fit in a window of at most
 * window_max channels starting at the block's lowest channel, up to
 * BS_MATCH_BLOCK templates. Its weights are stored padded to the window
 * (zeros on channels outside a member's support), so its scores are one product
 * on contiguous projection rows. A template whose support spans more than
 * window_max channels gets a block of its own that gathers its rows.
 */
static bs_status build_blocks(bs_match_templates *t)
{
    const int K = t->K, ns = t->n_sup, P = t->n_pc, wmax = window_max(t->n_chan, ns);
    lo_key *keys = bs_mem_alloc("match/templates_scratch", sizeof(lo_key) * (size_t)K);
    uint8_t *placed = bs_mem_calloc("match/templates_scratch", (size_t)K, 1);
    if (!keys || !placed) {
        bs_mem_free(keys);
        bs_mem_free(placed);
        return BS_ERR_MEMORY;
    }
    for (int k = 0; k < K; k++) {
        keys[k].lo = t->support[(size_t)k * ns];
        keys[k].k = k;
    }
    qsort(keys, (size_t)K, sizeof(lo_key), cmp_lo);
#define HI_OF(i) (t->support[(size_t)keys[i].k * ns + ns - 1])
#define WIDE(i) (HI_OF(i) - keys[i].lo + 1 > wmax)
    int nb = 0, m = 0;
    int64_t woff = 0;
    /* windowed blocks, in order of lowest channel */
    for (int i = 0; i < K; i++) {
        if (placed[i] || WIDE(i))
            continue;
        const int c0 = keys[i].lo;
        int hi = HI_OF(i), cnt = 0, members[BS_MATCH_BLOCK];
        for (int j = i; j < K && cnt < BS_MATCH_BLOCK; j++) {
            if (placed[j] || WIDE(j))
                continue;
            int h = HI_OF(j) > hi ? HI_OF(j) : hi;
            if (h - c0 + 1 > wmax)
                break;
            hi = h;
            members[cnt++] = keys[j].k;
            placed[j] = 1;
        }
        const int w = hi - c0 + 1;
        t->block_start[nb] = m;
        t->block_woff[nb] = woff;
        t->block_c0[nb] = c0;
        t->block_w[nb] = w;
        float *bw = t->bw + woff;
        memset(bw, 0, sizeof(float) * (size_t)cnt * w * P);
        for (int q = 0; q < cnt; q++) {
            const int kk = members[q];
            t->block_members[m++] = kk;
            const int32_t *sq = t->support + (size_t)kk * ns;
            for (int ci = 0; ci < ns; ci++)
                memcpy(bw + ((size_t)q * w + (sq[ci] - c0)) * P, t->U + ((size_t)kk * ns + ci) * P,
                       sizeof(float) * (size_t)P);
        }
        woff += (int64_t)cnt * w * P;
        nb++;
    }
    /* templates wider than a window: one gather block each */
    for (int i = 0; i < K; i++) {
        if (!WIDE(i))
            continue;
        const int k = keys[i].k;
        t->block_start[nb] = m;
        t->block_woff[nb] = woff;
        t->block_c0[nb] = -1;
        t->block_w[nb] = ns;
        t->block_members[m++] = k;
        memcpy(t->bw + woff, t->U + (size_t)k * ns * P, sizeof(float) * (size_t)ns * P);
        woff += (int64_t)ns * P;
        nb++;
    }
#undef HI_OF
#undef WIDE
    t->n_blocks = nb;
    t->block_start[nb] = m;
    bs_mem_free(keys);
    bs_mem_free(placed);
    if (m != K)
        return bs_error(BS_ERR_INTERNAL, "match templates: %d of %d templates placed in blocks", m, K);
    for (int b = 0; b < nb; b++)
        for (int q = t->block_start[b]; q < t->block_start[b + 1]; q++)
            t->block_of[t->block_members[q]] = b;
    return BS_OK;
}

bs_status bs_match_templates_create(const char *what, int n_chan, int nt, int nt_before, int n_pc,
                                    const float *basis, int K, int n_sup, const int32_t *support,
                                    const float *U, bs_match_templates *out)
{
    memset(out, 0, sizeof *out);
    if (!what)
        what = "templates";
    if (n_chan < 1)
        return bs_error(BS_ERR_INPUT, "%s: field 'n_chan': expected >= 1, got %d", what, n_chan);
    if (nt < 3 || nt > 1000)
        return bs_error(BS_ERR_INPUT, "%s: field 'nt': expected 3..1000 samples, got %d", what, nt);
    if (nt_before < 0 || nt_before >= nt)
        return bs_error(BS_ERR_INPUT, "%s: field 'nt_before': expected 0..%d, got %d", what, nt - 1, nt_before);
    if (n_pc < 1 || n_pc > BS_MATCH_MAX_PC || n_pc > nt)
        return bs_error(BS_ERR_INPUT, "%s: field 'n_pc': expected 1..%d, got %d", what,
                        nt < BS_MATCH_MAX_PC ? nt : BS_MATCH_MAX_PC, n_pc);
    if (K < 1)
        return bs_error(BS_ERR_INPUT, "%s: field 'K': expected >= 1 templates, got %d", what, K);
    if (n_sup < 1 || n_sup > BS_MATCH_MAX_SUP || n_sup > n_chan)
        return bs_error(BS_ERR_INPUT, "%s: field 'n_sup': expected 1..%d channels, got %d", what,
                        n_chan < BS_MATCH_MAX_SUP ? n_chan : BS_MATCH_MAX_SUP, n_sup);
    for (int i = 0; i < n_pc * nt; i++)
        if (!isfinite(basis[i]))
            return bs_error(BS_ERR_INPUT, "%s: field 'basis': expected finite values, got %g at component %d sample %d",
                            what, (double)basis[i], i / nt, i % nt);
    for (int k = 0; k < K; k++) {
        const int32_t *s = support + (size_t)k * n_sup;
        for (int i = 0; i < n_sup; i++) {
            if (s[i] < 0 || s[i] >= n_chan)
                return bs_error(BS_ERR_INPUT, "%s: field 'support' of template %d: expected channels 0..%d, got %d",
                                what, k, n_chan - 1, (int)s[i]);
            if (i > 0 && s[i] <= s[i - 1])
                return bs_error(BS_ERR_INPUT,
                                "%s: field 'support' of template %d: expected strictly ascending channels, got %d after %d",
                                what, k, (int)s[i], (int)s[i - 1]);
        }
        for (int i = 0; i < n_sup * n_pc; i++)
            if (!isfinite(U[(size_t)k * n_sup * n_pc + i]))
                return bs_error(BS_ERR_INPUT, "%s: field 'U' of template %d: expected finite weights", what, k);
    }

    out->n_chan = n_chan;
    out->nt = nt;
    out->nt_before = nt_before;
    out->n_pc = n_pc;
    out->K = K;
    out->n_sup = n_sup;
    const int P = n_pc, L = 2 * nt - 1;
    out->basis = bs_mem_alloc("match/templates", sizeof(float) * (size_t)P * nt);
    out->wtw = bs_mem_alloc("match/templates", sizeof(float) * (size_t)P * P * L);
    out->support = bs_mem_alloc("match/templates", sizeof(int32_t) * (size_t)K * n_sup);
    out->U = bs_mem_alloc("match/templates", sizeof(float) * (size_t)K * n_sup * P);
    out->norm_in = bs_mem_alloc("match/templates", sizeof(float) * (size_t)K);
    out->block_members = bs_mem_alloc("match/templates", sizeof(int32_t) * (size_t)K);
    out->block_of = bs_mem_alloc("match/templates", sizeof(int32_t) * (size_t)K);
    out->block_start = bs_mem_alloc("match/templates", sizeof(int32_t) * ((size_t)K + 1));
    out->block_c0 = bs_mem_alloc("match/templates", sizeof(int32_t) * (size_t)K);
    out->block_w = bs_mem_alloc("match/templates", sizeof(int32_t) * (size_t)K);
    out->block_woff = bs_mem_alloc("match/templates", sizeof(int64_t) * (size_t)K);
    out->bw = bs_mem_alloc("match/templates", sizeof(float) * (size_t)K * window_max(n_chan, n_sup) * n_pc);
    if (!out->basis || !out->wtw || !out->support || !out->U || !out->norm_in || !out->block_members ||
        !out->block_of || !out->block_start || !out->block_c0 || !out->block_w || !out->block_woff || !out->bw) {
        bs_match_templates_free(out);
        return BS_ERR_MEMORY;
    }
    memcpy(out->basis, basis, sizeof(float) * (size_t)P * nt);
    memcpy(out->support, support, sizeof(int32_t) * (size_t)K * n_sup);
    if (bs_firbank_init(&out->fir, "match/templates", out->basis, P, nt) != BS_OK) {
        bs_match_templates_free(out);
        return BS_ERR_MEMORY;
    }

    /* Gram matrix of the basis and lagged products, in double then rounded. */
    double G[BS_MATCH_MAX_PC][BS_MATCH_MAX_PC];
    for (int p = 0; p < P; p++)
        for (int q = 0; q < P; q++) {
            for (int d = -(nt - 1); d <= nt - 1; d++) {
                double acc = 0;
                for (int s = 0; s < nt; s++) {
                    int s2 = s + d;
                    if (s2 >= 0 && s2 < nt)
                        acc += (double)basis[p * nt + s] * basis[q * nt + s2];
                }
                out->wtw[((size_t)p * P + q) * L + (d + nt - 1)] = (float)acc;
                if (d == 0)
                    G[p][q] = acc;
            }
        }

    /* Unit-norm waveforms. */
    for (int k = 0; k < K; k++) {
        const float *u = U + (size_t)k * n_sup * P;
        double n2 = 0;
        for (int i = 0; i < n_sup; i++)
            for (int p = 0; p < P; p++)
                for (int q = 0; q < P; q++)
                    n2 += (double)u[i * P + p] * G[p][q] * u[i * P + q];
        if (!(n2 > 1e-20)) {
            bs_match_templates_free(out);
            return bs_error(BS_ERR_INPUT, "%s: field 'U' of template %d: expected a non-zero waveform, got norm %g",
                            what, k, sqrt(n2 > 0 ? n2 : 0));
        }
        double inv = 1.0 / sqrt(n2);
        out->norm_in[k] = (float)sqrt(n2);
        float *dst = out->U + (size_t)k * n_sup * P;
        for (int i = 0; i < n_sup * P; i++)
            dst[i] = (float)(u[i] * inv);
    }

    bs_status st = build_blocks(out);
    if (st != BS_OK)
        bs_match_templates_free(out);
    return st;
}

void bs_match_template_waveform(const bs_match_templates *t, int k, float *w)
{
    const int P = t->n_pc, nt = t->nt;
    const float *u = t->U + (size_t)k * t->n_sup * P;
    for (int i = 0; i < t->n_sup; i++)
        for (int s = 0; s < nt; s++) {
            float acc = 0;
            for (int p = 0; p < P; p++)
                acc += u[i * P + p] * t->basis[p * nt + s];
            w[(size_t)i * nt + s] = acc;
        }
}

size_t bs_match_scores_bytes(int K, int64_t n_t)
{
    return sizeof(float) * (size_t)K * (size_t)n_t;
}

/* The projection of a sub-tile is stored in panels of PANEL columns: panel
 * u / PANEL holds every row (c*P + p) of its columns side by side,
 * proj[(u / PANEL) * rows * PANEL + (c*P + p) * PANEL + u % PANEL], so the
 * rows of a block's channel window are one contiguous run of each panel
 * (read from L1 by every template of the block, block_scores) and a
 * channel's outputs for PANEL samples are written together. PIDX is the
 * offset of (row, u) from the sub-tile's start with `pstride` = rows * PANEL. */
#define PANEL 16
#define PIDX(row, u, pstride) ((size_t)((u) / PANEL) * (pstride) + (size_t)(row) * PANEL + (size_t)((u) % PANEL))

/* One thread's filter-bank scratch and output tile, floats (whole vectors of 16). */
static size_t fft_floats(const bs_match_templates *t)
{
    return bs_firbank_scratch_floats(t->nt) + (size_t)t->n_pc * t->fir.T * BS_FIRBANK_LANES;
}

/* Columns of a score sub-tile: whole panels, at most the filter bank's T
 * (the projection, gather and product buffers hold one sub-tile). */
static size_t sub_cols(const bs_match_templates *t) { return (size_t)t->fir.T / PANEL * PANEL; }

size_t bs_match_scores_ws_bytes(const bs_match_templates *t, int n_threads)
{
    size_t L = sub_cols(t);
    return sizeof(float) * L *
               ((size_t)t->n_chan * t->n_pc + (size_t)n_threads * ((size_t)t->n_sup * t->n_pc + BS_MATCH_BLOCK)) +
           sizeof(float) * fft_floats(t) * (size_t)n_threads;
}

bs_status bs_match_scores_ws_alloc(const bs_match_templates *t, int n_threads, bs_match_scores_ws *ws)
{
    size_t L = sub_cols(t);
    ws->n_threads = n_threads;
    ws->proj = bs_mem_alloc("match/score_ws", sizeof(float) * L * (size_t)t->n_chan * t->n_pc);
    ws->gather = bs_mem_alloc("match/score_ws", sizeof(float) * L * (size_t)t->n_sup * t->n_pc * n_threads);
    ws->blk = bs_mem_alloc("match/score_ws", sizeof(float) * L * BS_MATCH_BLOCK * n_threads);
    ws->fft = bs_mem_alloc("match/score_ws", sizeof(float) * fft_floats(t) * n_threads);
    if (!ws->proj || !ws->gather || !ws->blk || !ws->fft) {
        bs_match_scores_ws_free(ws);
        return BS_ERR_MEMORY;
    }
    return BS_OK;
}

void bs_match_scores_ws_free(bs_match_scores_ws *ws)
{
    bs_mem_free(ws->proj);
    bs_mem_free(ws->gather);
    bs_mem_free(ws->blk);
    bs_mem_free(ws->fft);
    ws->proj = ws->gather = ws->blk = ws->fft = NULL;
}

typedef float v4f __attribute__((vector_size(16)));
typedef float v8f __attribute__((vector_size(32)));

/* Rows [0, MM) of one block's scores over L columns: C[m][u] = Σ_r A[m][r] *
 * Bm[r][u], r ascending from 0, a multiply then an add for every term. Bm is
 * in panels (PIDX; its rows kd consecutive rows of each panel, panel stride
 * pstride), so one panel's kd x PANEL values are contiguous and stay in L1
 * while the block's templates go over them SCORE_ROWS at a time. Each column
 * is its own fixed-order sum, so vector width and CPU do not change the bits.
 * Inlined with constant MM. */
#define SCORE_ROWS 4   /* templates per pass over a panel */
#define SCORE_PANELS 4 /* panels at once: with blocks of 1-2 templates, enough sums in flight */
typedef float v16f __attribute__((vector_size(64)));
_Static_assert(PANEL == 16 && BS_MATCH_TILE % PANEL == 0, "one vector of 16 columns per panel, whole panels per tile");
/* Columns [u, u + NQ PANEL) of block_rows: NQ panels' MM x NQ chains of sums at once. */
static inline __attribute__((always_inline)) void panels_rows(const float *restrict A, int MM, int NQ, int kd,
                                                             const float *restrict Bm, size_t pstride, int u,
                                                             float *const *C)
{
    const float *pan = Bm + (size_t)(u / PANEL) * pstride;
    v16f acc[SCORE_ROWS][SCORE_PANELS];
    for (int m = 0; m < MM; m++)
        for (int q = 0; q < NQ; q++)
            acc[m][q] = (v16f){0};
    for (int r = 0; r < kd; r++)
        for (int q = 0; q < NQ; q++) {
            v16f b;
            memcpy(&b, pan + (size_t)q * pstride + (size_t)r * PANEL, sizeof b);
            for (int m = 0; m < MM; m++)
                acc[m][q] += A[(size_t)m * kd + r] * b;
        }
    for (int m = 0; m < MM; m++)
        for (int q = 0; q < NQ; q++)
            memcpy(C[m] + u + q * PANEL, &acc[m][q], sizeof(v16f));
}

static inline __attribute__((always_inline)) void block_rows(const float *restrict A, int MM, int kd,
                                                            const float *restrict Bm, size_t pstride, int L,
                                                            float *const *C)
{
    int u = 0;
    for (; u + SCORE_PANELS * PANEL <= L; u += SCORE_PANELS * PANEL)
        panels_rows(A, MM, SCORE_PANELS, kd, Bm, pstride, u, C);
    for (; u + PANEL <= L; u += PANEL)
        panels_rows(A, MM, 1, kd, Bm, pstride, u, C);
    for (; u < L; u++)
        for (int m = 0; m < MM; m++) {
            float acc = 0.0f;
            for (int r = 0; r < kd; r++)
                acc += A[(size_t)m * kd + r] * Bm[PIDX(r, u, pstride)];
            C[m][u] = acc;
        }
}

/* C (nbk rows of L, row m at C[m]) = A (nbk x kd) * Bm (kd rows in
 * panels): block_rows for SCORE_ROWS templates at a time, SCORE_PANELS
 * panels at a time. */
BS_VECTORIZED static void block_scores(const float *restrict A, int nbk, int kd, const float *restrict Bm,
                                       size_t pstride, int L, float *const *C)
{
    for (int u = 0; u < L; u += SCORE_PANELS * PANEL) { /* every template over the panels while they are in L1 */
        const int n = L - u < SCORE_PANELS * PANEL ? L - u : SCORE_PANELS * PANEL;
        const float *pan = Bm + (size_t)(u / PANEL) * pstride;
        for (int m0 = 0; m0 < nbk; m0 += SCORE_ROWS) {
            const float *a = A + (size_t)m0 * kd;
            float *c[SCORE_ROWS];
            for (int m = 0; m < SCORE_ROWS && m0 + m < nbk; m++)
                c[m] = C[m0 + m] + u;
            switch (nbk - m0) {
            case 1: block_rows(a, 1, kd, pan, pstride, n, c); break;
            case 2: block_rows(a, 2, kd, pan, pstride, n, c); break;
            case 3: block_rows(a, 3, kd, pan, pstride, n, c); break;
            default: block_rows(a, 4, kd, pan, pstride, n, c); break;
            }
        }
    }
}

#ifdef BS_HAVE_TRANSPOSE8
/* emit_tile's columns [0, returned) of all 16 lanes, a panel's 16 columns of
 * eight channels at a time (u0 a multiple of PANEL): two 8 x 8 transposes,
 * then each channel's row of the panel written whole. */
__attribute__((target("avx2"))) static int emit_tile_avx2(const float *y, int T, int P, int nu, float *proj,
                                                          size_t pstride, int c0, int u0)
{
    int i = 0;
    for (; i + PANEL <= nu; i += PANEL)
        for (int p = 0; p < P; p++)
            for (int h = 0; h < 2; h++) {
                __m256 r[8], r2[8];
                for (int j = 0; j < 8; j++) {
                    r[j] = _mm256_loadu_ps(y + ((size_t)p * T + i + j) * BS_FIRBANK_LANES + 8 * h);
                    r2[j] = _mm256_loadu_ps(y + ((size_t)p * T + i + 8 + j) * BS_FIRBANK_LANES + 8 * h);
                }
                bs_transpose8(r);
                bs_transpose8(r2);
                for (int l = 0; l < 8; l++) {
                    float *d = proj + PIDX((size_t)(c0 + 8 * h + l) * P + p, u0 + i, pstride);
                    _mm256_storeu_ps(d, r[l]);
                    _mm256_storeu_ps(d + 8, r2[l]);
                }
            }
    return i;
}
#endif

/* proj[PIDX((c0 + l) * P + p, u0 + i)] = y[(p * T + i) * 16 + l] for l < nch,
 * p < P, i < nu (the filter bank's output tile, channels in lanes, into
 * the panels): 8 x 8 transposes where the CPU has AVX2, element by element
 * past them (the same values either way). */
static void emit_tile(const float *y, int T, int P, int nch, int nu, float *proj, size_t pstride, int c0, int u0)
{
    int i0 = 0;
#ifdef BS_HAVE_TRANSPOSE8
    if (nch == BS_FIRBANK_LANES && __builtin_cpu_supports("avx2"))
        i0 = emit_tile_avx2(y, T, P, nu, proj, pstride, c0, u0);
#endif
    for (int p = 0; p < P; p++)
        for (int l = 0; l < nch; l++)
            for (int i = i0; i < nu; i++)
                proj[PIDX((size_t)(c0 + l) * P + p, u0 + i, pstride)] = y[((size_t)p * T + i) * BS_FIRBANK_LANES + l];
}

/* proj rows (c*P + p) of the sub-tile of columns [u0, u0 + nu) of the tile
 * starting at window sample t0, into proj's panels from its start: the
 * basis's filter bank over groups of 16 channels (nu at most the bank's T,
 * u0 on the tile's grid of sub-tiles, so a column is always computed in the
 * same transform, whatever the thread count). Samples outside the window
 * count as 0. */
static void project_sub(const bs_match_templates *t, const float *X, size_t ldx, int64_t n_t, int64_t t0, int u0,
                        int nu, const bs_match_scores_ws *ws)
{
    const int P = t->n_pc, nb = t->nt_before, C = t->n_chan, T = t->fir.T;
    const int n_grp = (C + BS_FIRBANK_LANES - 1) / BS_FIRBANK_LANES;
    const size_t pstride = (size_t)C * P * PANEL;
#pragma omp parallel for schedule(static) num_threads(ws->n_threads)
    for (int g = 0; g < n_grp; g++) {
        const int c0 = g * BS_FIRBANK_LANES, nch = C - c0 < BS_FIRBANK_LANES ? C - c0 : BS_FIRBANK_LANES;
        float *scratch = ws->fft + (size_t)omp_get_thread_num() * fft_floats(t);
        float *y = scratch + bs_firbank_scratch_floats(t->nt);
        bs_firbank_tile(&t->fir, X + (size_t)c0 * ldx, ldx, nch, t0 + u0 - nb, n_t, y, scratch);
        emit_tile(y, T, P, nch, nu, ws->proj, pstride, c0, 0);
    }
}

bs_status bs_match_scores(const bs_match_templates *t, const float *X, size_t ldx, int64_t n_t, int k0, int k1,
                          float *B, size_t ldb, bs_match_scores_ws *ws)
{
    if (k0 < 0 || k1 > t->K || k0 > k1 || n_t < 0)
        return bs_error(BS_ERR_INTERNAL, "match scores: bad template range %d..%d of %d or n_t %lld", k0, k1, t->K,
                        (long long)n_t);
    if (k0 == k1 || n_t == 0)
        return BS_OK;
    const int P = t->n_pc, ns = t->n_sup;
    const size_t pstride = (size_t)t->n_chan * P * PANEL;
    const int step = (int)sub_cols(t);
    for (int64_t t0 = 0; t0 < n_t; t0 += BS_MATCH_TILE) {
        const int L = (int)(n_t - t0 < BS_MATCH_TILE ? n_t - t0 : BS_MATCH_TILE);
        for (int u0 = 0; u0 < L; u0 += step) { /* a sub-tile's projection, then every block's product on it */
            const int nu = L - u0 < step ? L - u0 : step;
            project_sub(t, X, ldx, n_t, t0, u0, nu, ws);
            /* blocks write disjoint rows of B: one thread per block, each with its
             * own gather and product buffers */
#pragma omp parallel for schedule(dynamic, 1) num_threads(ws->n_threads)
            for (int b = 0; b < t->n_blocks; b++) {
                int m0 = t->block_start[b], m1 = t->block_start[b + 1];
                int need = 0;
                for (int m = m0; m < m1; m++)
                    if (t->block_members[m] >= k0 && t->block_members[m] < k1)
                        need = 1;
                if (!need)
                    continue;
                int tid = omp_get_thread_num();
                float *gather = ws->gather + (size_t)tid * ns * P * step;
                float *blk = ws->blk + (size_t)tid * BS_MATCH_BLOCK * step;
                const int nbk = m1 - m0, c0 = t->block_c0[b];
                const float *A = t->bw + t->block_woff[b], *Bm;
                int kd;
                size_t bstride = pstride;
                if (c0 >= 0) { /* windowed: contiguous projection rows */
                    kd = t->block_w[b] * P;
                    Bm = ws->proj + (size_t)c0 * P * PANEL;
                } else { /* gather the support's rows, in panels of their own */
                    const int32_t *sup = t->support + (size_t)t->block_members[m0] * ns;
                    bstride = (size_t)ns * P * PANEL;
                    for (int u = 0; u < nu; u += PANEL)
                        for (int i = 0; i < ns; i++)
                            memcpy(gather + PIDX(i * P, u, bstride), ws->proj + PIDX(sup[i] * P, u, pstride),
                                   sizeof(float) * P * PANEL);
                    kd = ns * P;
                    Bm = gather;
                }
                /* rows of templates in the requested range straight into B, the others into blk */
                float *rows[BS_MATCH_BLOCK];
                for (int m = 0; m < nbk; m++) {
                    int k = t->block_members[m0 + m];
                    rows[m] = k >= k0 && k < k1 ? B + (size_t)(k - k0) * ldb + t0 + u0 : blk + (size_t)m * step;
                }
                block_scores(A, nbk, kd, Bm, bstride, nu, rows);
            }
        }
    }
    return BS_OK;
}
