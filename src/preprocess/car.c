/*
 * car.c - per-channel mean removal and the common median reference.
 *
 * Mean removal: each channel's mean over the window is summed in double (8
 * interleaved partial sums in sample order, added pairwise: bs_row_sum) and
 * subtracted as a float (parallel over channels).
 *
 * Median reference: the window is cut into tiles of CAR_TILE samples; a
 * thread copies one tile transposed into its scratch ([sample][channel], so
 * each sample's n_chan values are contiguous and the copy reads contiguous
 * runs of every row; 8 x 8 at a time in AVX registers where the CPU has
 * AVX2), mapping each float to an order-preserving int32 key.
 * The median is then an exact selection on the keys by bisection on their
 * bits: the top CAR_TOP_BITS bits come from vectorized counting passes over
 * all keys (branch-free; four samples' passes in one loop, so that their
 * reductions overlap), the rest from the few keys
 * that share those bits (3x faster than a quickselect on 384 channels, and
 * exact: the result is one of the input values, bit for bit). For an even
 * count the median is numpy's: the upper middle value hi is selected, the
 * lower middle value is the largest key below hi (or hi itself when it is
 * repeated), and the median is (lo + hi) / 2 in float32. The medians of a
 * tile are subtracted row by row. Tiles are independent and the arithmetic
 * per sample does not depend on which thread does it, so the result is
 * identical for any thread count.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../common/transpose8.h"
#include "pp_internal.h"
#include "preprocess.h"

#define CAR_TILE 64 /* samples per tile */

static int64_t car_tile(int64_t n_t) { return n_t < CAR_TILE ? (n_t > 0 ? n_t : 1) : CAR_TILE; }

size_t bs_car_scratch_bytes(int n_chan, int64_t n_t, int n_threads)
{
    if (n_chan < 1 || n_t < 1)
        return 0;
    if (n_threads < 1)
        n_threads = 1;
    return (size_t)n_threads * (size_t)n_chan * (size_t)(car_tile(n_t) + 1) * sizeof(float);
}

/* Order-preserving map of a float to a signed integer: for the sign bit
 * set, flip the other 31 bits (so more negative floats get smaller keys).
 * It is its own inverse. */
static inline int32_t fkey(float f)
{
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i ^ (int32_t)((uint32_t)(i >> 31) & 0x7fffffffu);
}

static inline float funkey(int32_t k)
{
    int32_t i = k ^ (int32_t)((uint32_t)(k >> 31) & 0x7fffffffu);
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

#define CAR_TOP_BITS 12 /* bits found on all keys before narrowing to the candidates */
#define CAR_LOW_SPAN ((int32_t)1 << (32 - CAR_TOP_BITS)) /* keys sharing a prefix of CAR_TOP_BITS bits */

/* The keys in [start, start + CAR_LOW_SPAN) (those sharing its top bits) into
 * cand, in order; *below = the keys under start. Returns their count. */
static int collect_scalar(const int32_t *restrict key, int n, int32_t start, int32_t *restrict cand, int *below)
{
    const int32_t end = start + (CAR_LOW_SPAN - 1);
    int b = 0, m = 0;
    for (int i = 0; i < n; i++) {
        b += key[i] < start;
        cand[m] = key[i];
        m += key[i] >= start && key[i] <= end;
    }
    *below = b;
    return m;
}

#ifdef BS_HAVE_TRANSPOSE8
/* collect_scalar, 8 keys per compare; the few groups holding a candidate
 * are copied key by key (the same keys in the same order). */
__attribute__((target("avx2"))) static int collect_avx2(const int32_t *restrict key, int n, int32_t start,
                                                         int32_t *restrict cand, int *below)
{
    const int32_t end = start + (CAR_LOW_SPAN - 1);
    const __m256i vs = _mm256_set1_epi32(start), ve = _mm256_set1_epi32(end);
    int b = 0, m = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i k = _mm256_loadu_si256((const __m256i *)(key + i));
        const __m256i lt = _mm256_cmpgt_epi32(vs, k), gt = _mm256_cmpgt_epi32(k, ve);
        b += __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(lt)));
        unsigned in = ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_or_si256(lt, gt))) & 0xffu;
        while (in) {
            cand[m++] = key[i + __builtin_ctz(in)];
            in &= in - 1;
        }
    }
    int tail_below;
    m += collect_scalar(key + i, n - i, start, cand + m, &tail_below);
    *below = b + tail_below;
    return m;
}
#endif

static int collect(const int32_t *restrict key, int n, int32_t start, int32_t *restrict cand, int *below)
{
#ifdef BS_HAVE_TRANSPOSE8
    if (__builtin_cpu_supports("avx2"))
        return collect_avx2(key, n, start, cand, below);
#endif
    return collect_scalar(key, n, start, cand, below);
}

/* k-th smallest key (0-based), built bit by bit from the top in the unsigned
 * (offset) order, keeping the largest `ans` with count(key < ans) <= k. The
 * first CAR_TOP_BITS bits are found with vectorized counting passes over all
 * n keys (top_bits; top_bits4 does four samples' keys at once, their passes
 * interleaved, each sample's bits the same as alone); then only the keys
 * sharing those bits with the answer (few, for real data) are collected into
 * `cand` (8 keys per compare where the CPU has AVX2) and the remaining bits
 * are found on them (finish_kth). No data-dependent branches in the full
 * passes. */
BS_VECTORIZED
static uint32_t top_bits(const int32_t *restrict key, int n, int k)
{
    uint32_t ans = 0;
    for (int bit = 31; bit >= 32 - CAR_TOP_BITS; bit--) {
        const uint32_t try_ = ans | (1u << bit);
        const int32_t c = (int32_t)(try_ ^ 0x80000000u);
        int cnt = 0;
#pragma omp simd reduction(+ : cnt)
        for (int i = 0; i < n; i++)
            cnt += key[i] < c;
        if (cnt <= k)
            ans = try_;
    }
    return ans;
}

/* top_bits of the four key rows key + q * n (q < 4): one counting loop for
 * the four, so that their reductions overlap. */
BS_VECTORIZED
static void top_bits4(const int32_t *restrict key, int n, int k, uint32_t ans[4])
{
    const int32_t *k0 = key, *k1 = key + n, *k2 = key + 2 * (size_t)n, *k3 = key + 3 * (size_t)n;
    uint32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int bit = 31; bit >= 32 - CAR_TOP_BITS; bit--) {
        const uint32_t b = 1u << bit;
        const int32_t c0 = (int32_t)((a0 | b) ^ 0x80000000u), c1 = (int32_t)((a1 | b) ^ 0x80000000u);
        const int32_t c2 = (int32_t)((a2 | b) ^ 0x80000000u), c3 = (int32_t)((a3 | b) ^ 0x80000000u);
        int n0 = 0, n1 = 0, n2 = 0, n3 = 0;
#pragma omp simd reduction(+ : n0, n1, n2, n3)
        for (int i = 0; i < n; i++) {
            n0 += k0[i] < c0;
            n1 += k1[i] < c1;
            n2 += k2[i] < c2;
            n3 += k3[i] < c3;
        }
        a0 |= n0 <= k ? b : 0;
        a1 |= n1 <= k ? b : 0;
        a2 |= n2 <= k ? b : 0;
        a3 |= n3 <= k ? b : 0;
    }
    ans[0] = a0, ans[1] = a1, ans[2] = a2, ans[3] = a3;
}

/* select_kth's bits after the first CAR_TOP_BITS (ans: those). */
BS_VECTORIZED
static int32_t finish_kth(const int32_t *restrict key, int n, int k, uint32_t ans, int32_t *restrict cand)
{
    int below;
    const int m = collect(key, n, (int32_t)(ans ^ 0x80000000u), cand, &below);
    k -= below;
    for (int bit = 31 - CAR_TOP_BITS; bit >= 0; bit--) {
        const uint32_t try_ = ans | (1u << bit);
        const int32_t c = (int32_t)(try_ ^ 0x80000000u);
        int cnt = 0;
        for (int i = 0; i < m; i++)
            cnt += cand[i] < c;
        if (cnt <= k)
            ans = try_;
    }
    return (int32_t)(ans ^ 0x80000000u);
}

/* numpy's median of n keys, as a float, from the upper middle key hi (the
 * n/2-th smallest). */
BS_VECTORIZED
static float median_from(const int32_t *restrict key, int n, int32_t hi)
{
    if (n & 1)
        return funkey(hi);
    /* lower middle: the largest key below hi, or hi itself if fewer than
     * n/2 keys are below it */
    int below = 0;
    int32_t lo = INT32_MIN;
#pragma omp simd reduction(+ : below) reduction(max : lo)
    for (int i = 0; i < n; i++) {
        int lt = key[i] < hi;
        below += lt;
        int32_t v = lt ? key[i] : INT32_MIN;
        lo = v > lo ? v : lo;
    }
    if (below < n / 2)
        lo = hi;
    return (funkey(lo) + funkey(hi)) / 2.0f;
}

/* numpy's median of n keys, as a float. */
static float median_keys(const int32_t *restrict key, int n, int32_t *restrict cand)
{
    return median_from(key, n, finish_kth(key, n, n / 2, top_bits(key, n, n / 2), cand));
}

/* median_keys of the four key rows key + q * n (q < 4) into med[q]. */
static void median_keys4(const int32_t *restrict key, int n, int32_t *restrict cand, float *med)
{
    uint32_t top[4];
    top_bits4(key, n, n / 2, top);
    for (int q = 0; q < 4; q++) {
        const int32_t *kq = key + (size_t)q * n;
        med[q] = median_from(kq, n, finish_kth(kq, n, n / 2, top[q], cand));
    }
}

float bs_median_f32(const float *v, int n, int32_t *work)
{
    for (int i = 0; i < n; i++)
        work[i] = fkey(v[i]);
    return median_keys(work, n, work + n);
}

/* The row sums below: 8 interleaved partial sums in double (lane l: the
 * samples t ≡ l mod 8, in time order) added pairwise at the end, so that
 * they vectorise (a single running sum waits on each add); the same bits on
 * every CPU. */
#define ROW_SUM8(TERM)                                                                                               \
    double s[8] = {0};                                                                                               \
    int64_t t = 0;                                                                                                   \
    for (; t + 8 <= n; t += 8)                                                                                       \
        for (int l = 0; l < 8; l++)                                                                                  \
            s[l] += TERM(t + l);                                                                                     \
    for (int l = 0; t < n; t++, l++)                                                                                 \
        s[l] += TERM(t);                                                                                             \
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))

#define SUM_TERM(i) ((double)row[i])
#define DOT_TERM(i) ((double)a[i] * (double)b[i])
#define DEV2_TERM(i) (((double)row[i] - mu) * ((double)row[i] - mu))

/* multi-versioned functions stay static (clang names an exported one's
 * versions apart from callers that lack the attribute) */
BS_VECTORIZED static double row_sum(const float *restrict row, int64_t n) { ROW_SUM8(SUM_TERM); }

BS_VECTORIZED static double row_dot(const float *restrict a, const float *restrict b, int64_t n) { ROW_SUM8(DOT_TERM); }

BS_VECTORIZED static double row_dev2(const float *restrict row, int64_t n, double mu) { ROW_SUM8(DEV2_TERM); }

double bs_row_sum(const float *row, int64_t n) { return row_sum(row, n); }

double bs_row_dot(const float *a, const float *b, int64_t n) { return row_dot(a, b, n); }

double bs_row_dev2(const float *row, int64_t n, double mu) { return row_dev2(row, n, mu); }

#undef ROW_SUM8
#undef SUM_TERM
#undef DOT_TERM
#undef DEV2_TERM

/* buf[i * n_chan + c] = fkey(x[c * n_t + t0 + i]) for i < len, c < n_chan:
 * the tile transposed into keys. */
static void keys_tile_scalar(const float *x, int64_t n_t, int64_t t0, int len, int n_chan, int32_t *buf)
{
    for (int c = 0; c < n_chan; c++) {
        const float *src = x + (size_t)c * (size_t)n_t + t0;
        for (int i = 0; i < len; i++)
            buf[(size_t)i * (size_t)n_chan + (size_t)c] = fkey(src[i]);
    }
}

#ifdef BS_HAVE_TRANSPOSE8
/* keys_tile_scalar, 8 samples x 8 channels at a time through AVX registers
 * (the same keys); the edges one by one. */
__attribute__((target("avx2"))) static void keys_tile_avx2(const float *x, int64_t n_t, int64_t t0, int len,
                                                            int n_chan, int32_t *buf)
{
    const __m256i mag = _mm256_set1_epi32(0x7fffffff);
    int c = 0;
    for (; c + 8 <= n_chan; c += 8) {
        int i = 0;
        for (; i + 8 <= len; i += 8) {
            __m256 a[8];
            for (int q = 0; q < 8; q++)
                a[q] = _mm256_loadu_ps(x + (size_t)(c + q) * (size_t)n_t + t0 + i);
            bs_transpose8(a); /* a[q]: sample i + q, channels c..c+7 */
            for (int q = 0; q < 8; q++) {
                __m256i k = _mm256_castps_si256(a[q]);
                k = _mm256_xor_si256(k, _mm256_and_si256(_mm256_srai_epi32(k, 31), mag));
                _mm256_storeu_si256((__m256i *)(buf + (size_t)(i + q) * (size_t)n_chan + (size_t)c), k);
            }
        }
        for (; i < len; i++)
            for (int q = 0; q < 8; q++)
                buf[(size_t)i * (size_t)n_chan + (size_t)(c + q)] = fkey(x[(size_t)(c + q) * (size_t)n_t + t0 + i]);
    }
    for (; c < n_chan; c++)
        for (int i = 0; i < len; i++)
            buf[(size_t)i * (size_t)n_chan + (size_t)c] = fkey(x[(size_t)c * (size_t)n_t + t0 + i]);
}
#endif

static void keys_tile(const float *x, int64_t n_t, int64_t t0, int len, int n_chan, int32_t *buf)
{
#ifdef BS_HAVE_TRANSPOSE8
    if (__builtin_cpu_supports("avx2")) {
        keys_tile_avx2(x, n_t, t0, len, n_chan, buf);
        return;
    }
#endif
    keys_tile_scalar(x, n_t, t0, len, n_chan, buf);
}

bs_status bs_car(float *x, int n_chan, int64_t n_t, int remove_mean, int car, void *scratch, size_t scratch_bytes)
{
    if (n_chan < 1 || n_t < 1)
        return bs_error(BS_ERR_INPUT, "common reference: window of %d channels x %lld samples: expected at least 1 x 1",
                        n_chan, (long long)n_t);
    if (!remove_mean && !car)
        return BS_OK;
    int64_t tile = car_tile(n_t);
    pp_scratch s;
    const size_t per_thread = (size_t)n_chan * (size_t)(tile + 1) * sizeof(int32_t); /* tile + candidates */
    BS_TRY(pp_scratch_get("preprocess/car", car ? per_thread : 0, scratch, scratch_bytes, &s));
    int nth = s.n_threads;

    if (remove_mean) {
#pragma omp parallel for num_threads(nth) schedule(static)
        for (int c = 0; c < n_chan; c++) {
            float *row = x + (size_t)c * (size_t)n_t;
            float mean = (float)(row_sum(row, n_t) / (double)n_t);
            for (int64_t t = 0; t < n_t; t++)
                row[t] -= mean;
        }
    }

    if (car) {
        int64_t n_tiles = (n_t + tile - 1) / tile;
#pragma omp parallel num_threads(nth)
        {
            int32_t *buf = (int32_t *)(s.buf + (size_t)omp_get_thread_num() * per_thread);
            int32_t *cand = buf + (size_t)n_chan * (size_t)tile;
            float med[CAR_TILE];
#pragma omp for schedule(static)
            for (int64_t b = 0; b < n_tiles; b++) {
                int64_t t0 = b * tile;
                int len = (int)(t0 + tile <= n_t ? tile : n_t - t0);
                keys_tile(x, n_t, t0, len, n_chan, buf);
                int i = 0;
                for (; i + 4 <= len; i += 4)
                    median_keys4(buf + (size_t)i * (size_t)n_chan, n_chan, cand, med + i);
                for (; i < len; i++)
                    med[i] = median_keys(buf + (size_t)i * (size_t)n_chan, n_chan, cand);
                for (int c = 0; c < n_chan; c++) {
                    float *dst = x + (size_t)c * (size_t)n_t + t0;
                    for (int i = 0; i < len; i++)
                        dst[i] -= med[i];
                }
            }
        }
    }
    pp_scratch_release(&s);
    return BS_OK;
}
