/*
 * universal.c - matched filtering with the universal templates, exact
 * pruning, and spatio-temporal non-maximum suppression (see detect.h, part 3).
 * The filter outputs come from the shapes' filter bank (src/common/firbank.h)
 * over tiles of FILTER_TILE columns. With a GPU detector (src/gpu/gpu.h)
 * the filtering (direct sums there) and scoring of a batch happen there, and
 * each chunk here takes its columns' candidates from that list instead
 * (detect_chunk's `pre`).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/simd.h"
#include "../common/firbank.h"
#include "../common/transpose8.h"
#include "../gpu/gpu.h"
#include "../mem/mem.h"
#include "detect.h"

#define OUTPUT_MIN_CAP 64  /* first capacity of a spike list, rows */
#define VL 8               /* lanes of the per-candidate vectors, floats */
#define MAX_SCORE_VECTORS 64 /* sizes x shape vectors one score holds */
#define SCORE_BLOCK 64       /* columns scored together over all positions */
#define FILTER_TILE 192      /* columns filtered together (3 score blocks; at most a filter bank tile's T) */
#define WAVE_PER_THREAD 16   /* work items per thread held at once before they are handed on in order */
#define SUB_GROUP 8          /* positions of a set given the subspace bound together (their sums in registers) */

typedef float vfloat __attribute__((vector_size(VL * sizeof(float))));
typedef int32_t vint __attribute__((vector_size(VL * sizeof(int32_t))));

static int padded_shapes(int n_shapes) { return (n_shapes + VL - 1) / VL * VL; }

/* The AVX-512 kernels (the tight and subspace bounds' subspace_group16, the
 * paired scores' score_position2, the loose bound's loose_bound_block512) are compiled
 * where GCC's vector extensions and target attributes are, and used when
 * the CPU has AVX-512F (and VL for the loose bound's) and the tests have
 * not asked for the portable ones (bs_detect_force_portable). */
#ifdef BS_X86_KERNELS
#define BS_HAVE_AVX512_KERNELS 1
#endif
static int filter_level_cap = 1; /* 0: neither AVX-512 kernels nor emit_shapes8_avx2 (bs_detect_force_portable) */

void bs_detect_force_portable(int on) { filter_level_cap = !on; }

#ifdef BS_HAVE_AVX512_KERNELS
static int use_avx512(void) { return filter_level_cap && __builtin_cpu_supports("avx512f"); }
#endif

/* Sub-blocks of VL columns: a score block's are one vector. */
_Static_assert(SCORE_BLOCK == VL * VL, "a score block is one vector of sub-blocks");

/* One thread's filtering scratch for a filter tile of FILTER_TILE columns,
 * floats: the filter outputs (fs), their max over shapes² (mx), the tile's
 * maxima of mx over its sub-blocks of VL columns (mt), a score block's
 * sub-block maxima when its sub-blocks are not the tile's (mb), one loose
 * bound (lb), the filter bank's scratch and output tile (firbank.h). Whole
 * vectors of 8 each. */
static size_t bank_tile_floats(int nt, int n_shapes)
{
    return bs_firbank_scratch_floats(nt) + (size_t)n_shapes * (size_t)(bs_firbank_n(nt) - nt + 1) * BS_FIRBANK_LANES;
}

static size_t scratch_floats(int n_chan, int n_shapes, int nt)
{
    return (size_t)n_chan * FILTER_TILE * (size_t)padded_shapes(n_shapes) + (size_t)n_chan * FILTER_TILE +
           (size_t)n_chan * (FILTER_TILE / VL) + (size_t)n_chan * VL + SCORE_BLOCK + bank_tile_floats(nt, n_shapes);
}

typedef bs_detect_candidate candidate; /* t: window column; q: size * n_shapes + shape */

typedef struct {
    candidate *c;
    int64_t n, cap;
    int64_t limit; /* most rows it may hold (0: no limit) */
    int full;      /* a push past the limit was refused */
} cand_list;

static bs_status cand_push(cand_list *l, candidate c)
{
    if (l->n == l->cap) {
        if (l->limit && l->cap >= l->limit) {
            l->full = 1;
            return BS_OK;
        }
        int64_t cap = l->cap ? 2 * l->cap : 256;
        if (l->limit && cap > l->limit)
            cap = l->limit;
        candidate *nc = bs_mem_realloc(l->c, "detect/candidates", (size_t)cap * sizeof *nc);
        if (!nc)
            return BS_ERR_MEMORY;
        l->c = nc;
        l->cap = cap;
    }
    l->c[l->n++] = c;
    return BS_OK;
}

bs_status bs_detect_output_init(bs_detect_output *o, int n_chans, int n_pcs)
{
    memset(o, 0, sizeof *o);
    o->feat_len = n_chans * n_pcs;
    return BS_OK;
}

void bs_detect_output_clear(bs_detect_output *o)
{
    o->n = 0;
    o->full = 0;
}

void bs_detect_output_free(bs_detect_output *o)
{
    bs_mem_free(o->spikes);
    bs_mem_free(o->features);
    memset(o, 0, sizeof *o);
}

/* Room for n rows; past o->limit (when set) only o->full is set. */
static bs_status output_reserve(bs_detect_output *o, int64_t n)
{
    if (n <= o->cap)
        return BS_OK;
    if (o->limit && n > o->limit) {
        o->full = 1;
        return BS_OK;
    }
    int64_t cap = o->cap ? o->cap : OUTPUT_MIN_CAP;
    while (cap < n)
        cap *= 2;
    if (o->limit && cap > o->limit)
        cap = o->limit;
    bs_detected_spike *s = bs_mem_realloc(o->spikes, "detect/spikes", (size_t)cap * sizeof *s);
    if (!s)
        return BS_ERR_MEMORY;
    o->spikes = s;
    float *f = bs_mem_realloc(o->features, "detect/features", (size_t)cap * (size_t)o->feat_len * sizeof *f);
    if (!f)
        return BS_ERR_MEMORY;
    o->features = f;
    o->cap = cap;
    return BS_OK;
}

/* The limits of one work item's lists, per grid position: the parameters,
 * raised to what one column can yield (every position a candidate in each of
 * the 2 nb + 1 columns around it; one spike per position), so that splitting
 * always ends. */
static void chunk_limits(const bs_detect_params *p, int n_pos, int64_t *cands, int64_t *spikes)
{
    int c1 = 2 * p->nt_before + 1;
    *cands = (int64_t)n_pos * (p->chunk_candidates_per_pos > c1 ? p->chunk_candidates_per_pos : c1);
    *spikes = (int64_t)n_pos * (p->chunk_spikes_per_pos > 1 ? p->chunk_spikes_per_pos : 1);
}

static int wave_chunks(int n_threads) { return WAVE_PER_THREAD * n_threads; }

size_t bs_detect_batch_bytes(const bs_detect_params *p, int n_pos, int n_chans, int n_threads, int64_t n_t,
                             int on_gpu)
{
    int64_t lc, ls;
    chunk_limits(p, n_pos, &lc, &ls);
    size_t L = BS_DETECT_CHUNK + 2 * (size_t)p->nt_before;
    size_t nms_fixed = ((size_t)n_pos + 1) * sizeof(int64_t) + (size_t)n_pos * sizeof(float);
    /* per thread: its candidate list, then either the sort's copy and counts
     * (columns or positions, the more) or the suppression's keep flags and order */
    size_t keys = L > (size_t)n_pos ? L : (size_t)n_pos;
    size_t sort = (size_t)lc * sizeof(candidate) + (keys + 1) * sizeof(int64_t);
    size_t nms = (size_t)lc * (1 + sizeof(int64_t)) + nms_fixed;
    size_t per_thread = (size_t)lc * sizeof(candidate) + (sort > nms ? sort : nms) + (size_t)n_pos * sizeof(int);
    size_t row = sizeof(bs_detected_spike) + (size_t)n_chans * p->n_pcs * sizeof(float);
    size_t bytes = (size_t)n_threads * per_thread + (size_t)wave_chunks(n_threads) * (size_t)ls * row;
    if (on_gpu) /* the batch's candidates from the GPU and their sort; each chunk's suppression of its share */
        bytes += (size_t)BS_GPU_DETECT_CAP * (2 * sizeof(candidate) + 1 + sizeof(int64_t)) +
                 ((size_t)(n_t > n_pos ? n_t : n_pos) + 1) * sizeof(int64_t) + (size_t)n_threads * nms_fixed;
    return bytes;
}

size_t bs_detect_scratch_bytes(int n_chan, const bs_detect_params *p, int n_threads)
{
    return scratch_floats(n_chan, p->n_shapes, p->nt) * sizeof(float) * (size_t)n_threads +
           bs_firbank_bytes(p->n_shapes, p->nt);
}

/* The interleaved copy of the filter outputs (interleave_shapes) holds each
 * channel's shapes of one column in KP = n_shapes rounded up to a multiple
 * of VL lanes (the pad lanes are 0), so the per-candidate sums below run on
 * whole vectors. Each lane sums its own shape in channel order, as a scalar
 * loop would: the results do not depend on the vector width. VLOAD is an
 * unaligned load of VL floats. */
#define VLOAD(v, ptr) memcpy(&(v), (ptr), sizeof(vfloat))

/*
 * The Cauchy–Schwarz bound max_k Σ_j B[j,k]² on the squared score of
 * position f (channels ich) at each column idx[e] of the filtered data, laid
 * out fs[(c * L + i) * KP + k]: tb[e]. The columns are independent, so their
 * loads overlap; the channels are summed in two interleaved halves (the
 * bound only prunes, with a margin far above the rounding of the order).
 * Inlined with constant nv.
 */
static inline __attribute__((always_inline)) void tight_at(int nv, const float *fs, size_t L, const int *ich, int nC,
                                                           const int *idx, int n, float *tb)
{
    const int KP = nv * VL;
    for (int e = 0; e < n; e++) {
        vfloat sq0[MAX_SCORE_VECTORS], sq1[MAX_SCORE_VECTORS];
        for (int v = 0; v < nv; v++)
            sq0[v] = sq1[v] = (vfloat){0};
        const float *fi = fs + (size_t)idx[e] * KP;
        int j = 0;
        for (; j + 1 < nC; j += 2) {
            const float *f0 = fi + (size_t)ich[j] * L * KP, *f1 = fi + (size_t)ich[j + 1] * L * KP;
            for (int v = 0; v < nv; v++) {
                vfloat x0, x1;
                VLOAD(x0, f0 + v * VL);
                VLOAD(x1, f1 + v * VL);
                sq0[v] += x0 * x0;
                sq1[v] += x1 * x1;
            }
        }
        if (j < nC)
            for (int v = 0; v < nv; v++) {
                vfloat x;
                VLOAD(x, fi + (size_t)ich[j] * L * KP + v * VL);
                sq0[v] += x * x;
            }
        float m = 0;
        for (int v = 0; v < nv; v++) {
            vfloat t = sq0[v] + sq1[v];
            for (int l = 0; l < VL; l++)
                m = t[l] > m ? t[l] : m;
        }
        tb[e] = m;
    }
}

BS_VECTORIZED static void tight_bounds(int K, const float *fs, size_t L, const int *ich, int nC, const int *idx, int n,
                                       float *tb)
{
    int nv = padded_shapes(K) / VL;
    if (nv == 1)
        tight_at(1, fs, L, ich, nC, idx, n, tb);
    else
        tight_at(nv, fs, L, ich, nC, idx, n, tb);
}

/*
 * Score of position f at column i of the filtered data (layout as above):
 * best |projection| over sizes and shapes, ties to the smaller (size,
 * shape). When no squared projection exceeds bound2 (under the threshold's
 * square by more than the rounding of a square), score 0 is returned before
 * the search for the best one: the caller keeps only scores above the
 * threshold. Inlined with constant S and nv so that the sums stay in
 * registers.
 */
static inline __attribute__((always_inline)) candidate score_at(const bs_detect_grid *g, int K, int S, int nv,
                                                                const float *fs, size_t L, size_t i, int f,
                                                                float bound2)
{
    int nC = g->n_chans, KP = nv * VL;
    const int *ich = g->ichan + (size_t)f * nC;
    const float *w = g->weights + (size_t)f * S * nC;
    vfloat acc[MAX_SCORE_VECTORS];
    candidate best = {0, f, 0, 1, 0.0f};
    for (int q = 0; q < S * nv; q++)
        acc[q] = (vfloat){0};
    for (int j = 0; j < nC; j++) {
        const float *fc = fs + ((size_t)ich[j] * L + i) * KP;
        for (int v = 0; v < nv; v++) {
            vfloat x;
            VLOAD(x, fc + v * VL);
            for (int s = 0; s < S; s++)
                acc[s * nv + v] += w[(size_t)s * nC + j] * x;
        }
    }
    /* the largest squared projection first */
    vfloat a2 = (vfloat){0};
    for (int q = 0; q < S * nv; q++) {
        vfloat e = acc[q] * acc[q];
        vint gt = e > a2;
        a2 = (vfloat)((gt & (vint)e) | (~gt & (vint)a2));
    }
    float m = 0;
    for (int l = 0; l < VL; l++)
        m = a2[l] > m ? a2[l] : m;
    if (m <= bound2)
        return best;
    for (int s = 0; s < S; s++)
        for (int k = 0; k < K; k++) {
            float a = acc[s * nv + k / VL][k % VL];
            if (fabsf(a) > best.score) {
                best.score = fabsf(a);
                best.q = (int16_t)(s * K + k);
                best.sign = a < 0 ? -1 : 1;
            }
        }
    return best;
}

/* score_at, specialised for one vector of shapes and up to 6 sizes */
BS_VECTORIZED static candidate score_position(const bs_detect_grid *g, int K, const float *fs, size_t L, size_t i,
                                              int f, float bound2)
{
    int S = g->n_sizes, nv = padded_shapes(K) / VL;
    if (nv == 1)
        switch (S) {
        case 1: return score_at(g, K, 1, 1, fs, L, i, f, bound2);
        case 2: return score_at(g, K, 2, 1, fs, L, i, f, bound2);
        case 3: return score_at(g, K, 3, 1, fs, L, i, f, bound2);
        case 4: return score_at(g, K, 4, 1, fs, L, i, f, bound2);
        case 5: return score_at(g, K, 5, 1, fs, L, i, f, bound2);
        case 6: return score_at(g, K, 6, 1, fs, L, i, f, bound2);
        default: break;
        }
    return score_at(g, K, S, nv, fs, L, i, f, bound2);
}

#ifdef BS_HAVE_AVX512_KERNELS
typedef float v16f __attribute__((vector_size(16 * sizeof(float))));
typedef int32_t v16i __attribute__((vector_size(16 * sizeof(int32_t))));

/* The 8 floats of columns i0 and i1 (element offsets) of one channel's filter outputs fc, as lanes 0-7
 * and 8-15 of one vector. */
static inline __attribute__((always_inline, target("avx512f"))) __m512 load_pair16(const float *fc, size_t i0,
                                                                                  size_t i1)
{
    const __m512 lo = _mm512_castps256_ps512(_mm256_loadu_ps(fc + i0));
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(lo), _mm256_castps_pd(_mm256_loadu_ps(fc + i1)), 1));
}

/* score_at for one vector of shapes (KP = 8) at two columns i0 and i1 at
 * once, on AVX-512: lanes 0-7 hold column i0's shapes, lanes 8-15 column
 * i1's, and each weight multiplies both. Every lane does score_at's
 * operations in its order, so out[0] and out[1] are score_at's candidates
 * bit for bit. Inlined with constant S. */
static inline __attribute__((always_inline, target("avx512f"))) void score2_at(const bs_detect_grid *g, int K, int S,
                                                                              const float *fs, size_t L, size_t i0,
                                                                              size_t i1, int f, float bound2,
                                                                              candidate out[2])
{
    int nC = g->n_chans;
    const int *ich = g->ichan + (size_t)f * nC;
    const float *w = g->weights + (size_t)f * S * nC;
    v16f acc[MAX_SCORE_VECTORS];
    for (int s = 0; s < S; s++)
        acc[s] = (v16f){0};
    for (int j = 0; j < nC; j++) {
        const __m512 x = load_pair16(fs + (size_t)ich[j] * L * VL, i0 * VL, i1 * VL);
        v16f xv;
        memcpy(&xv, &x, sizeof xv);
        for (int s = 0; s < S; s++)
            acc[s] += w[(size_t)s * nC + j] * xv;
    }
    /* score_at's test that the largest squared projection exceeds bound2,
       as a mask: some lane's square exceeds it (the squares are >= 0, and a
       NaN passes neither test) */
    const __m512 b2 = _mm512_set1_ps(bound2);
    __mmask16 pass = 0;
    for (int s = 0; s < S; s++) {
        __m512 a = (__m512)acc[s];
        pass |= _mm512_cmp_ps_mask(_mm512_mul_ps(a, a), b2, _CMP_GT_OQ);
    }
    /* score_at's search, with vectors: the largest |projection| M over the
       column's sizes and shapes (a NaN never wins: max_ps returns its second
       operand then), then the first (size, shape) that holds it; M = 0 (or
       only NaNs) leaves score_at's {score 0, size 0, shape 0, +}. */
    __m512 mabs = _mm512_setzero_ps();
    for (int s = 0; s < S; s++)
        mabs = _mm512_max_ps(_mm512_abs_ps((__m512)acc[s]), mabs);
    for (int h = 0; h < 2; h++) {
        candidate best = {0, f, 0, 1, 0.0f};
        const __mmask16 lanes = (__mmask16)((((1u << K) - 1u)) << (h * VL));
        if ((pass >> (h * VL)) & 0xff) {
            float m = 0;
            for (int k = 0; k < K; k++) {
                float v = mabs[h * VL + k];
                m = v > m ? v : m;
            }
            const __m512 mv = _mm512_set1_ps(m);
            for (int s = 0; m > 0 && s < S; s++) {
                __mmask16 at = _mm512_mask_cmp_ps_mask(lanes, _mm512_abs_ps((__m512)acc[s]), mv, _CMP_EQ_OQ);
                if (at) {
                    int k = __builtin_ctz((unsigned)at) - h * VL;
                    float a = acc[s][h * VL + k];
                    best.score = m;
                    best.q = (int16_t)(s * K + k);
                    best.sign = a < 0 ? -1 : 1;
                    break;
                }
            }
        }
        out[h] = best;
    }
}

/* score_position at columns i0 and i1 (one vector of shapes, 1 to 6 sizes: pairs_ok). */
static int pairs_ok(const bs_detect_grid *g, int K) { return padded_shapes(K) == VL && g->n_sizes >= 1 && g->n_sizes <= 6; }

__attribute__((target("avx512f"))) static void score_position2(const bs_detect_grid *g, int K, const float *fs,
                                                              size_t L, size_t i0, size_t i1, int f, float bound2,
                                                              candidate out[2])
{
    switch (g->n_sizes) {
    case 1: score2_at(g, K, 1, fs, L, i0, i1, f, bound2, out); break;
    case 2: score2_at(g, K, 2, fs, L, i0, i1, f, bound2, out); break;
    case 3: score2_at(g, K, 3, fs, L, i0, i1, f, bound2, out); break;
    case 4: score2_at(g, K, 4, fs, L, i0, i1, f, bound2, out); break;
    case 5: score2_at(g, K, 5, fs, L, i0, i1, f, bound2, out); break;
    case 6: score2_at(g, K, 6, fs, L, i0, i1, f, bound2, out); break;
    default: break;
    }
}

/* subspace_group_at's test of one column pair (columns c0 and c1, c1 < 0:
 * none) whose |b|² and p are summed: each position's bound, and the columns
 * that pass appended to its list. */
static inline __attribute__((always_inline, target("avx512f"))) void
subspace_pass_at(int NP, int S, int nC, const float *const *q, __m512 b2, const __m512 *p1, const __m512 *p2, float th,
                 float th2, int c0, int c1, int *cnt, int (*cols)[SCORE_BLOCK])
{
    const __m512 t2 = _mm512_set1_ps(th2), eps = _mm512_set1_ps(1e-5f), zero = _mm512_setzero_ps();
    const __m512 m1 = _mm512_set1_ps(5e-6f / th), m0 = _mm512_set1_ps(5e-6f * th), up = _mm512_set1_ps(1.0f + 0x1p-12f);
    if (!_mm512_cmp_ps_mask(b2, t2, _CMP_GT_OQ)) /* the tight bound: no position's column passes */
        return;
    const __m512 margin = _mm512_fmadd_ps(m1, b2, m0);
    for (int k = 0; k < NP; k++) {
        const float *coef = q[k] + 2 * nC;
        __m512 r2 = _mm512_fnmadd_ps(p2[k], p2[k], _mm512_fnmadd_ps(p1[k], p1[k], b2));
        /* R from the reciprocal root's estimate (relative error under 2^-14), raised by 2^-12: at least
           the root (0 * inf = NaN where |b|² = 0: max_ps below then keeps 0, and the column has score 0) */
        r2 = _mm512_fmadd_ps(eps, b2, _mm512_max_ps(r2, zero));
        const __m512 R = _mm512_mul_ps(_mm512_mul_ps(r2, _mm512_rsqrt14_ps(r2)), up);
        __m512 best = zero;
        for (int s = 0; s < S; s++) {
            const float *c = coef + 3 * s;
            __m512 a = _mm512_fmadd_ps(_mm512_set1_ps(c[1]), p2[k], _mm512_mul_ps(_mm512_set1_ps(c[0]), p1[k]));
            best = _mm512_max_ps(_mm512_fmadd_ps(_mm512_set1_ps(c[2]), R, _mm512_abs_ps(a)), best);
        }
        best = _mm512_add_ps(margin, best);
        const __mmask16 pass = _mm512_cmp_ps_mask(_mm512_mul_ps(best, best), t2, _CMP_GT_OQ);
        cols[k][cnt[k]] = c0;
        cnt[k] += (pass & 0xff) != 0;
        if (c1 >= 0) {
            cols[k][cnt[k]] = c1;
            cnt[k] += (pass >> VL) != 0;
        }
    }
}

/* The columns idx[0 .. n) whose tight bound |b|² exceeds th2 in some shape,
 * in order, into out; returns their count. Two column pairs at a time (their
 * sums' chains side by side); each lane's sum is subspace_group_at's. */
static inline __attribute__((always_inline, target("avx512f"))) int
tight_columns(int nC, const int *ich, const float *fs, size_t L, const int *idx, int n, float th2, int *out)
{
    const __m512 t2 = _mm512_set1_ps(th2), zero = _mm512_setzero_ps();
    int e = 0, m = 0;
    for (; e + 3 < n; e += 4) {
        const size_t i0 = (size_t)idx[e] * VL, i1 = (size_t)idx[e + 1] * VL;
        const size_t i2 = (size_t)idx[e + 2] * VL, i3 = (size_t)idx[e + 3] * VL;
        __m512 b2 = zero, c2 = zero;
        for (int j = 0; j < nC; j++) {
            const float *fc = fs + (size_t)ich[j] * L * VL;
            const __m512 x = load_pair16(fc, i0, i1), y = load_pair16(fc, i2, i3);
            b2 = _mm512_fmadd_ps(x, x, b2);
            c2 = _mm512_fmadd_ps(y, y, c2);
        }
        const unsigned a = _mm512_cmp_ps_mask(b2, t2, _CMP_GT_OQ), b = _mm512_cmp_ps_mask(c2, t2, _CMP_GT_OQ);
        out[m] = idx[e];
        m += (a & 0xff) != 0;
        out[m] = idx[e + 1];
        m += (a >> VL) != 0;
        out[m] = idx[e + 2];
        m += (b & 0xff) != 0;
        out[m] = idx[e + 3];
        m += (b >> VL) != 0;
    }
    for (; e < n; e++) { /* the column in both halves */
        const size_t i0 = (size_t)idx[e] * VL;
        __m512 b2 = zero;
        for (int j = 0; j < nC; j++) {
            const __m512 x = load_pair16(fs + (size_t)ich[j] * L * VL, i0, i0);
            b2 = _mm512_fmadd_ps(x, x, b2);
        }
        out[m] = idx[e];
        m += (_mm512_cmp_ps_mask(b2, t2, _CMP_GT_OQ) & 0xff) != 0;
    }
    return m;
}

/*
 * The tight bound and the subspace bound (grid.c's subspace_bound) of NP
 * positions of one set together, for one vector of shapes (KP = 8), two
 * columns to a 16-lane vector. The columns all[0 .. n_all) whose tight bound
 * passes (tight_columns) are loaded once per channel (the set's channels,
 * ascending: the order of the positions' directions in g->sub) for their
 * sums of squares |b|² per shape and each position's p = (b·q1, b·q2).
 * Position k keeps, in order, the columns
 * where some shape's bound, max over sizes of |a_s·p| + r_s R with R² =
 * max(|b|² - |p|², 0), exceeds th2: cols[k][0 .. cnt[k]). The bound is at
 * most the tight bound |b| (|a_s|² + r_s² = |w_s|² = 1).
 * Only a prune: the score (score2_at) decides. Margins of
 * 1e-5 |b|² on R² and 5e-6 (|b|² / th + th) >= 1e-5 |b| on the bound exceed
 * the float rounding of |b|², p and the projections (about 1e-6 of |b| or
 * |b|² with 10 to 64 channels), so a column pruned here has a float score
 * under the threshold th. With up to 4 positions two column pairs are summed
 * together (twice the independent chains of multiply-adds: a set has 1.6
 * positions on average, and one pair's sums alone wait on their latency);
 * each lane's operations are the same. Inlined with constant NP.
 */
static inline __attribute__((always_inline, target("avx512f"))) void
subspace_group_at(int NP, const bs_detect_grid *g, const int *ich, const int *pos, const float *fs, size_t L,
                  const int *all, int n_all, float th, float th2, int *cnt, int (*cols)[SCORE_BLOCK])
{
    const int nC = g->n_chans, S = g->n_sizes;
    const size_t sub = (size_t)BS_GRID_SUB_FLOATS(nC, S);
    const float *q[SUB_GROUP];
    for (int k = 0; k < NP; k++) {
        q[k] = g->sub + (size_t)pos[k] * sub;
        cnt[k] = 0;
    }
    /* the columns past the tight bound first (about half of the loose bound's are not, in either tier's
       chunks): the projections only for them */
    int idx[SCORE_BLOCK];
    const int n = tight_columns(nC, ich, fs, L, all, n_all, th2, idx);
    const __m512 zero = _mm512_setzero_ps();
    int e = 0;
    for (; NP <= 4 && e + 3 < n; e += 4) {
        const size_t i0 = (size_t)idx[e] * VL, i1 = (size_t)idx[e + 1] * VL;
        const size_t i2 = (size_t)idx[e + 2] * VL, i3 = (size_t)idx[e + 3] * VL;
        __m512 b2 = zero, c2 = zero, p1[4], p2[4], r1[4], r2[4];
        for (int k = 0; k < NP; k++)
            p1[k] = p2[k] = r1[k] = r2[k] = zero;
        for (int j = 0; j < nC; j++) {
            const float *fc = fs + (size_t)ich[j] * L * VL;
            const __m512 x = load_pair16(fc, i0, i1), y = load_pair16(fc, i2, i3);
            b2 = _mm512_fmadd_ps(x, x, b2);
            c2 = _mm512_fmadd_ps(y, y, c2);
            for (int k = 0; k < NP; k++) {
                const __m512 u = _mm512_set1_ps(q[k][j]), v = _mm512_set1_ps(q[k][nC + j]);
                p1[k] = _mm512_fmadd_ps(u, x, p1[k]);
                p2[k] = _mm512_fmadd_ps(v, x, p2[k]);
                r1[k] = _mm512_fmadd_ps(u, y, r1[k]);
                r2[k] = _mm512_fmadd_ps(v, y, r2[k]);
            }
        }
        subspace_pass_at(NP, S, nC, q, b2, p1, p2, th, th2, idx[e], idx[e + 1], cnt, cols);
        subspace_pass_at(NP, S, nC, q, c2, r1, r2, th, th2, idx[e + 2], idx[e + 3], cnt, cols);
    }
    for (; e < n; e += 2) {
        const int e1 = e + 1 < n ? e + 1 : e;
        const size_t i0 = (size_t)idx[e] * VL, i1 = (size_t)idx[e1] * VL;
        __m512 b2 = zero, p1[SUB_GROUP], p2[SUB_GROUP];
        for (int k = 0; k < NP; k++)
            p1[k] = p2[k] = zero;
        for (int j = 0; j < nC; j++) {
            const __m512 x = load_pair16(fs + (size_t)ich[j] * L * VL, i0, i1);
            b2 = _mm512_fmadd_ps(x, x, b2);
            for (int k = 0; k < NP; k++) {
                p1[k] = _mm512_fmadd_ps(_mm512_set1_ps(q[k][j]), x, p1[k]);
                p2[k] = _mm512_fmadd_ps(_mm512_set1_ps(q[k][nC + j]), x, p2[k]);
            }
        }
        subspace_pass_at(NP, S, nC, q, b2, p1, p2, th, th2, idx[e], e1 != e ? idx[e1] : -1, cnt, cols);
    }
}

/* subspace_group_at for np (1 to SUB_GROUP) positions */
__attribute__((target("avx512f"))) static void subspace_group16(int np, const bs_detect_grid *g, const int *ich,
                                                               const int *pos, const float *fs, size_t L,
                                                               const int *idx, int n, float th, float th2, int *cnt,
                                                               int (*cols)[SCORE_BLOCK])
{
    switch (np) {
    case 1: subspace_group_at(1, g, ich, pos, fs, L, idx, n, th, th2, cnt, cols); break;
    case 2: subspace_group_at(2, g, ich, pos, fs, L, idx, n, th, th2, cnt, cols); break;
    case 3: subspace_group_at(3, g, ich, pos, fs, L, idx, n, th, th2, cnt, cols); break;
    case 4: subspace_group_at(4, g, ich, pos, fs, L, idx, n, th, th2, cnt, cols); break;
    case 5: subspace_group_at(5, g, ich, pos, fs, L, idx, n, th, th2, cnt, cols); break;
    case 6: subspace_group_at(6, g, ich, pos, fs, L, idx, n, th, th2, cnt, cols); break;
    case 7: subspace_group_at(7, g, ich, pos, fs, L, idx, n, th, th2, cnt, cols); break;
    default: subspace_group_at(SUB_GROUP, g, ich, pos, fs, L, idx, n, th, th2, cnt, cols); break;
    }
}
#endif

/* lb[i] = Σ_j m[ich[j] * stride + i] for i < n, summed in j order. */
BS_VECTORIZED static void loose_bound(const float *restrict m, size_t stride, const int *ich, int nC, size_t n,
                                      float *restrict lb)
{
    const float *r0 = m + (size_t)ich[0] * stride;
    for (size_t i = 0; i < n; i++)
        lb[i] = r0[i];
    for (int j = 1; j < nC; j++) {
        const float *r = m + (size_t)ich[j] * stride;
        for (size_t i = 0; i < n; i++)
            lb[i] += r[i];
    }
}

/* The columns i0 + i (i < SCORE_BLOCK) of a block whose loose bound
 * (loose_bound's sums, the same bits) exceeds th2, in order, into idx; returns
 * their count. mb holds each channel's maxima of m over sub-blocks of VL
 * columns (row stride mstride): Σ_j mb[ich[j], s] >= the loose bound of every
 * column of sub-block s, in floats too (each term is at least the column's,
 * summed in the same order, and rounded addition is monotone), so a
 * sub-block whose sum does not exceed th2 is passed over whole. */
BS_VECTORIZED static int loose_bound_block(const float *restrict m, size_t stride, const float *restrict mb,
                                           size_t mstride, const int *ich, int nC, float th2, int i0,
                                           int *restrict idx)
{
    vfloat sb;
    VLOAD(sb, mb + (size_t)ich[0] * mstride);
    for (int j = 1; j < nC; j++) {
        vfloat y;
        VLOAD(y, mb + (size_t)ich[j] * mstride);
        sb += y;
    }
    int n = 0;
    for (int s = 0; s < VL; s++) {
        if (!(sb[s] > th2))
            continue;
        vfloat acc;
        VLOAD(acc, m + (size_t)ich[0] * stride + (size_t)s * VL);
        for (int j = 1; j < nC; j++) {
            vfloat y;
            VLOAD(y, m + (size_t)ich[j] * stride + (size_t)s * VL);
            acc += y;
        }
        for (int l = 0; l < VL; l++) {
            idx[n] = i0 + s * VL + l;
            n += acc[l] > th2;
        }
    }
    return n;
}

#ifdef BS_HAVE_AVX512_KERNELS
/* loose_bound_block on AVX-512 (with VL): the same sums in the same order,
 * the sub-blocks that pass taken from a mask, and each one's passing
 * columns compressed into idx. The same columns. */
__attribute__((target("avx512f,avx512vl"))) static int loose_bound_block512(const float *restrict m, size_t stride,
                                                                           const float *restrict mb, size_t mstride,
                                                                           const int *ich, int nC, float th2, int i0,
                                                                           int *restrict idx)
{
    const __m256 t2 = _mm256_set1_ps(th2);
    __m256 sb = _mm256_loadu_ps(mb + (size_t)ich[0] * mstride);
    for (int j = 1; j < nC; j++)
        sb = _mm256_add_ps(sb, _mm256_loadu_ps(mb + (size_t)ich[j] * mstride));
    unsigned pass = _mm256_cmp_ps_mask(sb, t2, _CMP_GT_OQ);
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int n = 0;
    while (pass) {
        const int s = __builtin_ctz(pass);
        pass &= pass - 1;
        __m256 acc = _mm256_loadu_ps(m + (size_t)ich[0] * stride + (size_t)s * VL);
        for (int j = 1; j < nC; j++)
            acc = _mm256_add_ps(acc, _mm256_loadu_ps(m + (size_t)ich[j] * stride + (size_t)s * VL));
        const __mmask8 k = _mm256_cmp_ps_mask(acc, t2, _CMP_GT_OQ);
        /* compressed in a register, then stored whole: a compressing store to memory is microcoded on
           some CPUs (about 140 cycles on AMD Zen 4). The 8 lanes fit: n <= 8 s, so n + 8 <= 8 (s + 1) */
        _mm256_storeu_si256((__m256i *)(idx + n),
                            _mm256_maskz_compress_epi32(k, _mm256_add_epi32(_mm256_set1_epi32(i0 + s * VL), iota)));
        n += __builtin_popcount(k);
    }
    return n;
}
#endif

/* Σ_u w[u]·x[u], u ascending from 0, one fused multiply-add per tap: the
 * direct filter output of one column (a detected spike's position and
 * features; the scores use the filter bank's, which differ by rounding). */
BS_FMA_CLONES static float filter_at(const float *x, const float *w, int nt)
{
    float o = 0;
    for (int u = 0; u < nt; u++)
        o = __builtin_fmaf(w[u], x[u], o);
    return o;
}

/* 1 if candidate a beats b: higher score, ties to the earlier time, then the smaller position. */
static int beats(const candidate *a, const candidate *b)
{
    return a->score > b->score || (a->score == b->score && (a->t < b->t || (a->t == b->t && a->f < b->f)));
}

/*
 * Marks keep[e] = 1 for each candidate e owned by this chunk (ta <= t < tb)
 * that no other candidate beats within ±nb samples at a neighbouring position.
 * Exact, in three passes that each discard only candidates that cannot be
 * detections, so the final box test runs on few candidates:
 *   1. same position, ±nb samples (candidates grouped per position);
 *   2. same sample, neighbouring positions (a dense score row per sample);
 *   3. the full box, for the survivors, through the per-position groups.
 * Every candidate still acts as a suppressor in each pass.
 */
static bs_status select_maxima(const cand_list *cl, const bs_detect_grid *g, int nb,
                               int64_t ta, int64_t tb, int *scratch_f, uint8_t **keep_out)
{
    int64_t n = cl->n;
    int F = g->n_pos, nN = g->n_neighbors;
    const candidate *c = cl->c;
    uint8_t *keep = bs_mem_alloc("detect/nms", (size_t)n);
    int64_t *order = bs_mem_alloc("detect/nms", (size_t)n * sizeof(int64_t)); /* by (f, t) */
    int64_t *first = bs_mem_calloc("detect/nms", (size_t)F + 1, sizeof(int64_t));
    float *row = bs_mem_alloc("detect/nms", (size_t)F * sizeof(float));
    if (!keep || !order || !first || !row) {
        bs_mem_free(keep);
        bs_mem_free(order);
        bs_mem_free(first);
        bs_mem_free(row);
        return BS_ERR_MEMORY;
    }
    /* counting sort by position keeps time order inside each group */
    for (int64_t e = 0; e < n; e++)
        first[c[e].f + 1]++;
    for (int f = 0; f < F; f++)
        first[f + 1] += first[f];
    for (int f = 0; f < F; f++)
        scratch_f[f] = 0;
    for (int64_t e = 0; e < n; e++)
        order[first[c[e].f] + scratch_f[c[e].f]++] = e;
    /* pass 1 */
    for (int64_t e = 0; e < n; e++)
        keep[e] = c[e].t >= ta && c[e].t < tb;
    for (int f = 0; f < F; f++)
        for (int64_t a = first[f], lo = first[f]; a < first[f + 1]; a++) {
            const candidate *ca = &c[order[a]];
            while (c[order[lo]].t < ca->t - nb)
                lo++;
            if (!keep[order[a]])
                continue;
            /* the next and previous candidates first: on a peak's flanks one of them beats it */
            if ((a + 1 < first[f + 1] && c[order[a + 1]].t <= ca->t + nb && beats(&c[order[a + 1]], ca)) ||
                (a > lo && beats(&c[order[a - 1]], ca))) {
                keep[order[a]] = 0;
                continue;
            }
            for (int64_t o = lo; o < first[f + 1] && c[order[o]].t <= ca->t + nb; o++)
                if (o != a && beats(&c[order[o]], ca)) {
                    keep[order[a]] = 0;
                    break;
                }
        }
    /* pass 2: one time slice at a time */
    for (int f = 0; f < F; f++)
        row[f] = -1.0f;
    for (int64_t s0 = 0; s0 < n;) {
        int64_t s1 = s0;
        while (s1 < n && c[s1].t == c[s0].t)
            s1++;
        for (int64_t e = s0; e < s1; e++)
            row[c[e].f] = c[e].score;
        for (int64_t e = s0; e < s1; e++) {
            if (!keep[e])
                continue;
            const int *nbr = g->neighbors + (size_t)c[e].f * nN;
            for (int j = 0; j < nN && keep[e]; j++) {
                int h = nbr[j];
                if (h < 0 || h == c[e].f)
                    continue;
                /* same sample: ties go to the smaller position */
                if (row[h] > c[e].score || (row[h] == c[e].score && h < c[e].f))
                    keep[e] = 0;
            }
        }
        for (int64_t e = s0; e < s1; e++)
            row[c[e].f] = -1.0f;
        s0 = s1;
    }
    /* pass 3: the whole box */
    for (int64_t e = 0; e < n; e++) {
        if (!keep[e])
            continue;
        const int *nbr = g->neighbors + (size_t)c[e].f * nN;
        for (int j = 0; j < nN && keep[e]; j++) {
            int h = nbr[j];
            if (h < 0)
                continue;
            int64_t lo = first[h], hi = first[h + 1];
            while (lo < hi) { /* first candidate of h at t >= t_e - nb */
                int64_t mid = lo + (hi - lo) / 2;
                if (c[order[mid]].t < c[e].t - nb)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            for (int64_t o = lo; o < first[h + 1] && c[order[o]].t <= c[e].t + nb; o++)
                if (order[o] != e && beats(&c[order[o]], &c[e])) {
                    keep[e] = 0;
                    break;
                }
        }
    }
    bs_mem_free(order);
    bs_mem_free(first);
    bs_mem_free(row);
    *keep_out = keep;
    return BS_OK;
}

/* First candidate of the (t-sorted) list at column >= t. */
static int64_t first_at(const candidate *c, int64_t n, int64_t t)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (c[mid].t < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* What every work item of one window shares. */
typedef struct {
    const bs_detect_params *p;
    const bs_temporal_basis *b;
    const bs_detect_grid *g;
    const bs_probe *probe;
    const float *x;
    int64_t n_t, t_abs0;  /* window length; absolute sample of column 0 */
    const candidate *pre; /* the GPU's candidates of the window, (t, f) order */
    int64_t n_pre;        /* their count; -1: all on the CPU */
    int64_t cand_limit;   /* candidates one work item may hold (chunk_limits) */
    int64_t own0;         /* window column of the batch's first owned sample */
    const bs_firbank *fir; /* the shapes as a filter bank (NULL where the GPU filters) */
    bs_detect_sink sink;
    void *sink_ctx;
} detect_job;

/* One thread's share of the filtering scratch (NULL where the GPU filters). */
typedef struct {
    float *fs, *mx, *mt, *mb, *lb, *bank;
    int *pos_f;
} thread_scratch;

/* fs[c][i][k] (k < KP, pads 0), mx[c][i] = max over shapes of fs² (0 to
 * start, a NaN never taken) for i < FILTER_TILE and mt[c][i / VL] = max of
 * mx[c] over the sub-block of VL columns holding i, channels c0 + l (l <
 * nch), from the filter bank's output tile y (firbank.h): element by
 * element. */
static void emit_shapes(const float *y, int T, int K, int KP, int nch, int c0, float *fs, float *mx, float *mt)
{
    for (int l = 0; l < nch; l++)
        for (int i = 0; i < FILTER_TILE; i++) {
            float *d = fs + ((size_t)(c0 + l) * FILTER_TILE + i) * KP, mm = 0;
            for (int k = 0; k < KP; k++) {
                const float a = k < K ? y[((size_t)k * T + i) * BS_FIRBANK_LANES + l] : 0.0f;
                d[k] = a;
                mm = a * a > mm ? a * a : mm;
            }
            mx[(size_t)(c0 + l) * FILTER_TILE + i] = mm;
            float *b = mt + (size_t)(c0 + l) * (FILTER_TILE / VL) + i / VL;
            *b = i % VL == 0 || mm > *b ? mm : *b;
        }
}

#ifdef BS_HAVE_TRANSPOSE8
/* emit_shapes for 16 channels and KP = 8, eight columns at a time: each
 * column's shapes (channels in lanes) transposed into the channels' rows,
 * eight columns' maxima into each channel's mx and their maximum into mt.
 * The same values. */
_Static_assert(VL == 8, "a sub-block is the eight columns emit_shapes8_avx2 emits together");
__attribute__((target("avx2"))) static void emit_shapes8_avx2(const float *y, int T, int K, int c0, float *fs,
                                                              float *mx, float *mt)
{
    for (int i = 0; i < FILTER_TILE; i += 8)
        for (int h = 0; h < 2; h++) {
            __m256 mv[8], sub = _mm256_setzero_ps();
            for (int q = 0; q < 8; q++) {
                __m256 r[8], mm = _mm256_setzero_ps();
                for (int k = 0; k < 8; k++) {
                    r[k] = k < K ? _mm256_loadu_ps(y + ((size_t)k * T + i + q) * BS_FIRBANK_LANES + 8 * h)
                                 : _mm256_setzero_ps();
                    mm = _mm256_max_ps(_mm256_mul_ps(r[k], r[k]), mm); /* the square if larger, else mm */
                }
                mv[q] = mm;
                sub = _mm256_max_ps(mm, sub); /* squares and 0: no NaN */
                bs_transpose8(r);
                for (int l = 0; l < 8; l++)
                    _mm256_storeu_ps(fs + ((size_t)(c0 + 8 * h + l) * FILTER_TILE + i + q) * 8, r[l]);
            }
            float sl[8];
            _mm256_storeu_ps(sl, sub);
            for (int l = 0; l < 8; l++)
                mt[(size_t)(c0 + 8 * h + l) * (FILTER_TILE / VL) + i / 8] = sl[l];
            bs_transpose8(mv);
            for (int l = 0; l < 8; l++)
                _mm256_storeu_ps(mx + (size_t)(c0 + 8 * h + l) * FILTER_TILE + i, mv[l]);
        }
}
#endif

/* The filter outputs of window columns [first + nb, first + nb + FILTER_TILE)
 * of every channel into the thread's fs and mx (emit_shapes' layout): the
 * shapes' filter bank over groups of 16 channels, samples outside the
 * window counting as 0. */
static void filter_tile(const detect_job *j, int64_t first, const thread_scratch *ts)
{
    const bs_firbank *fb = j->fir;
    const int C = j->probe->n_chan, K = j->p->n_shapes, KP = padded_shapes(K);
    float *y = ts->bank + bs_firbank_scratch_floats(fb->nt);
    for (int c0 = 0; c0 < C; c0 += BS_FIRBANK_LANES) {
        const int nch = C - c0 < BS_FIRBANK_LANES ? C - c0 : BS_FIRBANK_LANES;
        bs_firbank_tile(fb, j->x + (size_t)c0 * (size_t)j->n_t, (size_t)j->n_t, nch, first, j->n_t, y, ts->bank);
#ifdef BS_HAVE_TRANSPOSE8
        if (nch == BS_FIRBANK_LANES && KP == 8 && filter_level_cap && __builtin_cpu_supports("avx2")) {
            emit_shapes8_avx2(y, fb->T, K, c0, ts->fs, ts->mx, ts->mt);
            continue;
        }
#endif
        emit_shapes(y, fb->T, K, KP, nch, c0, ts->fs, ts->mx, ts->mt);
    }
}

/* The threshold of the work item whose owned columns start at ta: th_low in the first chunk of every
 * low_stride of the batch (the low tier, detect.h), else th_universal. A part of a chunk done again
 * (hand_on) keeps its chunk's. */
static float chunk_threshold(const detect_job *j, int64_t ta)
{
    const bs_detect_params *p = j->p;
    if (bs_detect_low_tier(p) && ((ta - j->own0) / BS_DETECT_CHUNK) % p->low_stride == 0)
        return p->th_low;
    return p->th_universal;
}

/* One work item: owned columns [ta, tb) of the window, appended to out. With
 * the GPU's candidates (j->n_pre >= 0) the filtering and scoring are skipped
 * and the spikes' filter values recomputed. More candidates than
 * j->cand_limit or more spikes than out->limit: out->full is set and the item
 * must be done again in parts (its output is then incomplete). */
static bs_status detect_chunk(const detect_job *j, int64_t ta, int64_t tb, const thread_scratch *ts,
                              bs_detect_output *out)
{
    float *fs = ts->fs, *mx = ts->mx, *mb = ts->mb, *lb = ts->lb;
    int *pos_scratch = ts->pos_f;
    const bs_detect_params *p = j->p;
    const bs_temporal_basis *b = j->b;
    const bs_detect_grid *g = j->g;
    const bs_probe *probe = j->probe;
    const float *x = j->x;
    int64_t n_t = j->n_t, t_abs0 = j->t_abs0, n_pre = j->n_pre;
    int C = probe->n_chan, K = p->n_shapes, nt = p->nt, nb = p->nt_before, nC = g->n_chans;
    int64_t ca = ta - nb, cb = tb + nb; /* candidate columns */
    /* the bounds hold exactly in real arithmetic; pruning at a threshold a
     * few float roundings lower keeps a position whose float bound rounds
     * just under its float score */
    const float th = chunk_threshold(j, ta), th2 = th * th * (1.0f - 1e-5f);
    const int exhaustive = p->exhaustive;
#ifdef BS_HAVE_AVX512_KERNELS
    const int pair_scores = use_avx512() && pairs_ok(g, K);
    const int loose512 = use_avx512() && __builtin_cpu_supports("avx512vl");
#endif
    cand_list found = {.limit = j->cand_limit}, cands = {0};
    bs_status st = BS_OK;
    if (n_pre >= 0) { /* a view of this item's columns: not freed here */
        int64_t lo = first_at(j->pre, n_pre, ca), n = first_at(j->pre, n_pre, cb) - lo;
        cands = (cand_list){n ? (candidate *)j->pre + lo : NULL, n, n, 0, 0};
        if (bs_detect_low_tier(p)) { /* the GPU's list is at th_low: this item's own threshold, in a copy */
            for (int64_t e = 0; e < n && st == BS_OK; e++)
                if (cands.c[e].score > th)
                    st = cand_push(&found, cands.c[e]);
            if (found.full) {
                out->full = 1;
                bs_mem_free(found.c);
                return st;
            }
            cands = found;
        }
        goto suppress;
    }
    /* tiles of FILTER_TILE columns on a grid from the first candidate column of the item's chunk (its
       halves share it, so a column is filtered in the same transform whatever the split), each
       filtered for every channel, then scored in blocks of SCORE_BLOCK columns over all positions */
    const int KP = padded_shapes(K);
    enum { BL = SCORE_BLOCK, W = FILTER_TILE };
    const int64_t origin = j->own0 + (ta - j->own0) / BS_DETECT_CHUNK * BS_DETECT_CHUNK - nb;
    for (int64_t g0 = origin + (ca - origin) / W * W; g0 < cb && st == BS_OK && !found.full; g0 += W) {
        filter_tile(j, g0 - nb, ts);
        const int64_t lo = ca > g0 ? ca : g0, hi = cb < g0 + W ? cb : g0 + W;
        for (int64_t b0 = lo; b0 < hi && st == BS_OK && !found.full; b0 += BL) {
            const size_t n = hi - b0 < BL ? (size_t)(hi - b0) : BL, off = (size_t)(b0 - g0);
            const float *fsb = fs + off * KP, *mxb = mx + off;
            /* each channel's maxima of mx over the block's sub-blocks of VL columns: the tile's (mt) when
               the block is whole and on their grid, else computed here (mb[c][s], 0 past n) */
            const float *mbk = ts->mt + off / VL;
            size_t mstride = W / VL;
            if (!exhaustive && (n != BL || off % VL)) {
                for (int c = 0; c < C; c++)
                    for (int sb = 0; sb < VL; sb++) {
                        float v = 0;
                        for (size_t i = (size_t)sb * VL; i < (size_t)sb * VL + VL && i < n; i++)
                            v = mxb[(size_t)c * W + i] > v ? mxb[(size_t)c * W + i] : v;
                        mb[(size_t)c * VL + sb] = v;
                    }
                mbk = mb;
                mstride = VL;
            }
            for (int set = 0; set < g->n_sets && st == BS_OK && !found.full; set++) {
                /* two exact bounds, cheap first: Σ_j max_k B² >= max_k Σ_j B² >= A². Both depend on
                   the channels only, so the positions of one channel set share them (summed in the
                   set's ascending channel order: they only prune, with a margin far above the rounding
                   of the order). The loose bound (lb[i] = Σ_j max_k B[ichan[j], k, i]²) for the
                   block's columns at once; the columns past it go to the tight bound together, then to
                   the projections of each position of the set */
                const int *ich = g->set_chans + (size_t)set * nC;
                int idx[BL], m = 0;
                float tb[BL];
                if (exhaustive)
                    for (size_t i = 0; i < n; i++)
                        idx[m++] = (int)i;
                else if (n == BL) {
#ifdef BS_HAVE_AVX512_KERNELS
                    if (loose512)
                        m = loose_bound_block512(mxb, W, mbk, mstride, ich, nC, th2, 0, idx);
                    else
#endif
                        m = loose_bound_block(mxb, W, mbk, mstride, ich, nC, th2, 0, idx);
                }
                else {
                    loose_bound(mxb, W, ich, nC, n, lb);
                    for (size_t i = 0; i < n; i++) {
                        idx[m] = (int)i;
                        m += lb[i] > th2;
                    }
                }
#ifdef BS_HAVE_AVX512_KERNELS
                const int subspace = pair_scores && !exhaustive;
                int cnt[SUB_GROUP], cols[SUB_GROUP][BL];
#else
                const int subspace = 0;
#endif
                if (!exhaustive && !subspace) { /* the columns past the tight bound */
                    tight_bounds(K, fsb, W, ich, nC, idx, m, tb);
                    int q = 0;
                    for (int e = 0; e < m; e++) {
                        idx[q] = idx[e];
                        q += tb[e] > th2;
                    }
                    m = q;
                }
                const float bound2 = exhaustive ? -1.0f : th2;
                for (int pi = g->set_start[set]; pi < g->set_start[set + 1] && st == BS_OK; pi++) {
                    const int f = g->set_pos[pi];
                    const int *col = idx;
                    int e = 0, mf = m;
#ifdef BS_HAVE_AVX512_KERNELS
                    if (subspace) { /* each position's columns past the tight and subspace bounds, SUB_GROUP
                                       positions of the set at a time */
                        const int k = (pi - g->set_start[set]) % SUB_GROUP;
                        if (k == 0) {
                            const int np = g->set_start[set + 1] - pi;
                            subspace_group16(np < SUB_GROUP ? np : SUB_GROUP, g, ich, g->set_pos + pi, fsb, W, idx, m,
                                             th, th2, cnt, cols);
                        }
                        col = cols[k];
                        mf = cnt[k];
                    }
                    for (candidate two[2]; pair_scores && e + 1 < mf && st == BS_OK; e += 2) {
                        score_position2(g, K, fsb, W, (size_t)col[e], (size_t)col[e + 1], f, bound2, two);
                        for (int h = 0; h < 2 && st == BS_OK; h++)
                            if (two[h].score > th) {
                                two[h].t = b0 + col[e + h];
                                st = cand_push(&found, two[h]);
                            }
                    }
#endif
                    for (; e < mf && st == BS_OK; e++) {
                        candidate cd = score_position(g, K, fsb, W, (size_t)col[e], f, bound2);
                        if (cd.score > th) {
                            cd.t = b0 + col[e];
                            st = cand_push(&found, cd);
                        }
                    }
                }
            }
        }
    }
    if (found.full) { /* to be done again in parts */
        out->full = 1;
        bs_mem_free(found.c);
        return st;
    }
    /* to time order (position order inside a column), in place: the sort the GPU's candidates get too */
    if (st == BS_OK)
        st = bs_detect_sort_candidates(found.c, found.n, ca, cb);
    cands = found;
suppress:;
    /* candidates are in time order; keep the local maxima of (±nb samples × neighbouring positions) */
    uint8_t *keep = NULL;
    if (st == BS_OK && cands.n)
        st = select_maxima(&cands, g, nb, ta, tb, pos_scratch, &keep);
    for (int64_t e = 0; e < cands.n && st == BS_OK; e++) {
        if (!keep[e])
            continue;
        candidate cd = cands.c[e];
        st = output_reserve(out, out->n + 1);
        if (st != BS_OK || out->full)
            break;
        int k = cd.q % K;
        bs_detected_spike *sp = &out->spikes[out->n];
        memset(sp, 0, sizeof *sp); /* padding bytes too: outputs compare and hash bytewise */
        float *feat = out->features + (size_t)out->n * (size_t)out->feat_len;
        double wsum = 0, xs = 0, ys = 0;
        for (int j = 0; j < nC; j++) {
            int c = g->ichan[(size_t)cd.f * nC + j];
            const float *xc = x + (size_t)c * (size_t)n_t + (size_t)(cd.t - nb);
            float a = cd.sign * filter_at(xc, b->wtemp + (size_t)k * nt, nt);
            if (a > 0) {
                wsum += a;
                xs += a * probe->x_um[c];
                ys += a * probe->y_um[c];
            }
            for (int q = 0; q < b->n_pcs; q++) {
                const float *w = b->wpca + (size_t)q * nt;
                float acc = 0;
                for (int u = 0; u < nt; u++)
                    acc += w[u] * xc[u];
                feat[j * b->n_pcs + q] = acc;
            }
        }
        sp->t = t_abs0 + cd.t;
        sp->pos = cd.f;
        sp->size = (int16_t)(cd.q / K);
        sp->shape = (int16_t)k;
        sp->sign = cd.sign;
        sp->score = cd.score;
        sp->x_um = wsum > 0 ? (float)(xs / wsum) : g->x_um[cd.f];
        sp->y_um = wsum > 0 ? (float)(ys / wsum) : g->y_um[cd.f];
        out->n++;
    }
    bs_mem_free(keep);
    if (n_pre < 0 || bs_detect_low_tier(p))
        bs_mem_free(cands.c);
    return st;
}

/* A candidate's key in a counting pass: its column less c0 (by_column), or its position. */
static inline size_t cand_key(const candidate *e, int by_column, int64_t c0)
{
    return by_column ? (size_t)(e->t - c0) : (size_t)e->f;
}

/* src to dst in ascending key, stable: a counting sort over nk keys, with
 * start[nk + 1] zeroed by the caller. */
static void counting_pass(const candidate *src, candidate *dst, int64_t n, int by_column, int64_t c0,
                          int64_t *start, size_t nk)
{
    for (int64_t e = 0; e < n; e++)
        start[cand_key(src + e, by_column, c0) + 1]++;
    for (size_t i = 0; i < nk; i++)
        start[i + 1] += start[i];
    for (int64_t e = 0; e < n; e++)
        dst[start[cand_key(src + e, by_column, c0)]++] = src[e];
}

bs_status bs_detect_sort_candidates(candidate *c, int64_t n, int64_t c0, int64_t c1)
{
    if (n <= 1)
        return BS_OK;
    /* two stable counting passes, the less significant key first: by position
     * into a copy, then by column back. (t, f) is unique, so this is the one
     * (t, f) order whatever the input's */
    size_t L = (size_t)(c1 - c0), nf = 0;
    for (int64_t e = 0; e < n; e++)
        nf = (size_t)c[e].f + 1 > nf ? (size_t)c[e].f + 1 : nf;
    size_t nk = L > nf ? L : nf;
    candidate *tmp = bs_mem_alloc("detect/candidates", (size_t)n * sizeof *tmp);
    int64_t *start = bs_mem_calloc("detect/candidates", nk + 1, sizeof(int64_t));
    if (!tmp || !start) {
        bs_mem_free(tmp);
        bs_mem_free(start);
        return BS_ERR_MEMORY;
    }
    counting_pass(c, tmp, n, 0, 0, start, nf);
    memset(start, 0, (nk + 1) * sizeof *start);
    counting_pass(tmp, c, n, 1, c0, start, L);
    bs_mem_free(tmp);
    bs_mem_free(start);
    return BS_OK;
}

static thread_scratch scratch_of(const detect_job *j, float *scratch, int *pos_scratch, int tid)
{
    const size_t C = (size_t)j->probe->n_chan;
    thread_scratch t = {.pos_f = pos_scratch + (size_t)tid * j->g->n_pos};
    if (scratch) {
        t.fs = scratch + (size_t)tid * scratch_floats(j->probe->n_chan, j->p->n_shapes, j->p->nt);
        t.mx = t.fs + C * FILTER_TILE * (size_t)padded_shapes(j->p->n_shapes);
        t.mt = t.mx + C * FILTER_TILE;
        t.mb = t.mt + C * (FILTER_TILE / VL);
        t.lb = t.mb + C * VL;
        t.bank = t.lb + SCORE_BLOCK;
    }
    return t;
}

static bs_status detect_range(const detect_job *j, int64_t ta, int64_t tb, const thread_scratch *ts,
                              bs_detect_output *out);

/* `out` holds detect_chunk's result for owned columns [ta, tb): to the sink,
 * or, when it overflowed its lists, the columns again in halves (one column
 * always fits: chunk_limits). */
static bs_status hand_on(const detect_job *j, int64_t ta, int64_t tb, const thread_scratch *ts, bs_detect_output *out)
{
    if (!out->full)
        return out->n ? j->sink(j->sink_ctx, out) : BS_OK;
    if (tb - ta <= 1)
        return bs_error(BS_ERR_INTERNAL, "detect: column %lld alone overflows its lists", (long long)ta);
    int64_t mid = ta + (tb - ta) / 2;
    BS_TRY(detect_range(j, ta, mid, ts, out));
    return detect_range(j, mid, tb, ts, out);
}

/* Owned columns [ta, tb) through `out` to the sink. */
static bs_status detect_range(const detect_job *j, int64_t ta, int64_t tb, const thread_scratch *ts,
                              bs_detect_output *out)
{
    bs_detect_output_clear(out);
    BS_TRY(detect_chunk(j, ta, tb, ts, out));
    return hand_on(j, ta, tb, ts, out);
}

/* Owned columns [*ta, *tb) of work item c of a window with `halo` and n_valid own samples. */
static void chunk_columns(int64_t halo, int64_t n_valid, int c, int64_t *ta, int64_t *tb)
{
    *ta = halo + (int64_t)c * BS_DETECT_CHUNK;
    *tb = *ta + BS_DETECT_CHUNK < halo + n_valid ? *ta + BS_DETECT_CHUNK : halo + n_valid;
}

bs_status bs_detect_output_append(void *ctx, const bs_detect_output *part)
{
    bs_detect_output *out = ctx;
    BS_TRY(output_reserve(out, out->n + part->n));
    if (out->full) /* past its limit: the part is refused, the contents incomplete */
        return BS_OK;
    memcpy(out->spikes + out->n, part->spikes, (size_t)part->n * sizeof *out->spikes);
    memcpy(out->features + (size_t)out->n * out->feat_len, part->features,
           (size_t)part->n * out->feat_len * sizeof(float));
    out->n += part->n;
    return BS_OK;
}

bs_status bs_detect_batch_on(const bs_detect_params *p, const bs_temporal_basis *b, const bs_detect_grid *g,
                             const bs_probe *probe, const float *x, int64_t n_t, int64_t halo, int64_t n_valid,
                             int64_t t0, struct bs_gpu_detector *gpu, bs_detect_sink sink, void *sink_ctx)
{
    if (halo < p->nt || n_t < 2 * halo + n_valid)
        return bs_error(BS_ERR_INTERNAL, "detect: window of %lld samples with halo %lld cannot hold %lld samples",
                        (long long)n_t, (long long)halo, (long long)n_valid);
    if (g->n_sizes * (padded_shapes(p->n_shapes) / VL) > MAX_SCORE_VECTORS)
        return bs_error(BS_ERR_INTERNAL, "detect: %d sizes x %d shapes is more than the scorer holds", g->n_sizes,
                        p->n_shapes);
    if (n_valid <= 0)
        return BS_OK;
    candidate *pre = NULL;
    int64_t n_pre = 0;
    int on_gpu = 0;
    if (gpu && !p->exhaustive) {
        int nb = p->nt_before;
        BS_TRY(bs_gpu_detect_candidates(gpu, x, n_t, halo - nb, halo + n_valid + nb, &pre, &n_pre));
        bs_status st = n_pre > 0 ? bs_detect_sort_candidates(pre, n_pre, halo - nb, halo + n_valid + nb) : BS_OK;
        if (st != BS_OK) {
            bs_mem_free(pre);
            return st;
        }
        on_gpu = n_pre >= 0;
        if (n_pre < 0)
            bs_log_warn("detect: a batch at sample %lld has more than %lld candidates (an artifact?): "
                        "it is evaluated on the CPU", (long long)t0, (long long)BS_GPU_DETECT_CAP);
    }
    int n_chunks = (int)((n_valid + BS_DETECT_CHUNK - 1) / BS_DETECT_CHUNK);
    int n_threads = omp_get_max_threads();
    if (n_threads > n_chunks)
        n_threads = n_chunks;
    int wave = wave_chunks(n_threads) < n_chunks ? wave_chunks(n_threads) : n_chunks;
    int64_t spike_limit;
    bs_firbank fir = {0};
    detect_job job = {p, b, g, probe, x, n_t, t0 - halo, pre, on_gpu ? n_pre : -1, 0, halo, &fir, sink, sink_ctx};
    chunk_limits(p, g->n_pos, &job.cand_limit, &spike_limit);
    /* the filtering scratch and the shapes' filter bank only where the CPU filters
       (bs_detect_scratch_bytes: both, under one tag) */
    float *scratch = NULL;
    if (!on_gpu) {
        scratch = bs_mem_alloc("detect/scratch",
                               scratch_floats(probe->n_chan, p->n_shapes, p->nt) * sizeof(float) * (size_t)n_threads);
        if (scratch && bs_firbank_init(&fir, "detect/scratch", b->wtemp, p->n_shapes, p->nt) != BS_OK) {
            bs_mem_free(scratch);
            scratch = NULL;
        }
    }
    int *pos_scratch = bs_mem_alloc("detect/nms", (size_t)n_threads * g->n_pos * sizeof(int));
    bs_detect_output *parts = calloc((size_t)wave, sizeof *parts);
    bs_status st = ((scratch || on_gpu) && pos_scratch && parts) ? BS_OK : BS_ERR_MEMORY;
    for (int w = 0; w < wave && parts; w++) {
        bs_detect_output_init(&parts[w], g->n_chans, b->n_pcs);
        parts[w].limit = spike_limit;
    }
    /* waves of work items: each wave's items run in parallel, then go to the
     * sink in order; an item that overflowed its lists is done again here in
     * halves (hand_on), with the same result */
    for (int w0 = 0; w0 < n_chunks && st == BS_OK; w0 += wave) {
        int nw = n_chunks - w0 < wave ? n_chunks - w0 : wave;
        bs_status thread_st = BS_OK;
#pragma omp parallel num_threads(n_threads)
        {
            thread_scratch ts = scratch_of(&job, scratch, pos_scratch, omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
            for (int w = 0; w < nw; w++) {
                int64_t ta, tb;
                chunk_columns(halo, n_valid, w0 + w, &ta, &tb);
                bs_detect_output_clear(&parts[w]);
                bs_status s = detect_chunk(&job, ta, tb, &ts, &parts[w]);
                if (s != BS_OK) {
#pragma omp critical
                    thread_st = s;
                }
            }
        }
        st = thread_st;
        thread_scratch ts0 = scratch_of(&job, scratch, pos_scratch, 0);
        for (int w = 0; w < nw && st == BS_OK; w++) {
            int64_t ta, tb;
            chunk_columns(halo, n_valid, w0 + w, &ta, &tb);
            st = hand_on(&job, ta, tb, &ts0, &parts[w]);
        }
    }
    for (int w = 0; w < wave && parts; w++)
        bs_detect_output_free(&parts[w]);
    free(parts);
    bs_mem_free(pre);
    bs_firbank_free(&fir);
    bs_mem_free(scratch);
    bs_mem_free(pos_scratch);
    return st;
}

bs_status bs_detect_batch(const bs_detect_params *p, const bs_temporal_basis *b, const bs_detect_grid *g,
                          const bs_probe *probe, const float *x, int64_t n_t, int64_t halo, int64_t n_valid,
                          int64_t t0, bs_detect_output *out)
{
    return bs_detect_batch_on(p, b, g, probe, x, n_t, halo, n_valid, t0, NULL, bs_detect_output_append, out);
}
