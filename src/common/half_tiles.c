/*
 * half_tiles.c - the transposing float16 (and int16) conversions (see half_tiles.h).
 *
 * The 8 x 8 tile: eight 8-wide rows are converted (vcvtph2ps, or vcvtps2ph
 * with round-to-nearest-even), transposed (transpose8.h) and stored as eight
 * 8-wide rows of the other layout. Rows and channels past the last whole tile go one value at a
 * time through half.h.
 */
#include "half_tiles.h"

#include <string.h>

#include "half.h"
#include "transpose8.h"

/* Rows converted together by floats_to_rows_hw: 384 KB of float16 rows at 384 channels. */
#define TO_ROWS_TILE 512

static float half_at(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return bs_half_to_float(h);
}

/* Rows [k0, k1) of one int16 column, scaled. */
static void i16_rows_one(const unsigned char *raw, size_t rb, int col, float gain, int64_t k0, int64_t k1, float *dst)
{
    for (int64_t k = k0; k < k1; k++) {
        int16_t v;
        memcpy(&v, raw + (size_t)k * rb + 2 * (size_t)col, sizeof v);
        dst[k] = (float)v * gain;
    }
}

#ifdef BS_HAVE_TRANSPOSE8
#include <cpuid.h>
#define HAVE_HW_TILES 1

/* Eight channels at a time, down the rows: each output row is written in one
 * ascending run (k0..k1), which measured 1.4x (128 rows) to 2.4x (1,024
 * rows, 384 channels) the rate of going across the channels row block by
 * row block; the values are the same either way. */
__attribute__((target("avx2,f16c"))) static void rows_to_floats_hw(const unsigned char *raw, size_t rb, int n_chan,
                                                                    int64_t k0, int64_t k1, float *out, size_t ldo)
{
    const int64_t k8 = k0 + (k1 - k0) / 8 * 8;
    int c = 0;
    for (; c + 8 <= n_chan; c += 8) {
        for (int64_t k = k0; k < k8; k += 8) {
            __m256 a[8];
            for (int q = 0; q < 8; q++)
                a[q] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(raw + (size_t)(k + q) * rb + 2 * (size_t)c)));
            bs_transpose8(a);
            for (int q = 0; q < 8; q++)
                _mm256_storeu_ps(out + (size_t)(c + q) * ldo + k, a[q]);
        }
        for (int q = 0; q < 8; q++)
            for (int64_t k = k8; k < k1; k++)
                out[(size_t)(c + q) * ldo + k] = half_at(raw + (size_t)k * rb + 2 * (size_t)(c + q));
    }
    for (; c < n_chan; c++)
        for (int64_t k = k0; k < k1; k++)
            out[(size_t)c * ldo + k] = half_at(raw + (size_t)k * rb + 2 * (size_t)c);
}

/* Eight channels whose file columns follow each other at a time: eight rows of 8 int16 widened to int32,
 * converted (exact), transposed and scaled by each channel's gain (one float product, correctly rounded:
 * the exact product of a 16-bit integer and a float fits a double, so rounding it once to float gives
 * these bits too). Any other channel goes one value at a time. */
__attribute__((target("avx2"))) static void i16_rows_to_floats_hw(const unsigned char *raw, size_t rb,
                                                                   const int *col, const float *gain, int n_chan,
                                                                   int64_t k0, int64_t k1, float *out, size_t ldo)
{
    const int64_t k8 = k0 + (k1 - k0) / 8 * 8;
    int c = 0;
    while (c < n_chan) {
        int run = c + 8 <= n_chan;
        for (int q = 1; run && q < 8; q++)
            run = col[c + q] == col[c] + q;
        if (!run) {
            i16_rows_one(raw, rb, col[c], gain[c], k0, k1, out + (size_t)c * ldo);
            c++;
            continue;
        }
        const unsigned char *src = raw + 2 * (size_t)col[c];
        for (int64_t k = k0; k < k8; k += 8) {
            __m256 a[8];
            for (int q = 0; q < 8; q++)
                a[q] = _mm256_cvtepi32_ps(
                    _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(src + (size_t)(k + q) * rb))));
            bs_transpose8(a);
            for (int q = 0; q < 8; q++)
                _mm256_storeu_ps(out + (size_t)(c + q) * ldo + k, _mm256_mul_ps(a[q], _mm256_set1_ps(gain[c + q])));
        }
        for (int q = 0; q < 8; q++)
            i16_rows_one(raw, rb, col[c + q], gain[c + q], k8, k1, out + (size_t)(c + q) * ldo);
        c += 8;
    }
}

/* Eight channels at a time, down the rows (as rows_to_floats_hw): each
 * channel's run k0..k1 is read in one ascending stream, which the hardware
 * prefetchers follow, where going across all the channels for every eight
 * rows kept hundreds of streams open at once (each row of a batch window
 * is read from memory, not the cache). The rows written, 16 bytes per
 * channel group, stay in the cache for a tile of TO_ROWS_TILE rows. */
__attribute__((target("avx2,f16c"))) static void floats_to_rows_hw(const float *x, size_t ldx, int n_chan, int64_t k0,
                                                                    int64_t k1, uint16_t *out)
{
    const __m128i expo = _mm_set1_epi16(0x7c00);
    const int64_t k8 = k0 + (k1 - k0) / 8 * 8;
    int c = 0;
    for (; c + 8 <= n_chan; c += 8) {
        for (int64_t k = k0; k < k8; k += 8) {
            __m256 a[8];
            for (int q = 0; q < 8; q++)
                a[q] = _mm256_loadu_ps(x + (size_t)(c + q) * ldx + k);
            bs_transpose8(a); /* a[q]: row k + q, channels c..c+7 */
            for (int q = 0; q < 8; q++) {
                __m128i h = _mm256_cvtps_ph(a[q], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                uint16_t *d = out + (size_t)(k + q) * n_chan + c;
                _mm_storeu_si128((__m128i *)d, h);
                if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, expo), expo))) /* infinity or NaN: half.h's */
                    for (int l = 0; l < 8; l++)
                        d[l] = bs_float_to_half(x[(size_t)(c + l) * ldx + k + q]);
            }
        }
        for (int64_t k = k8; k < k1; k++)
            for (int l = 0; l < 8; l++)
                out[(size_t)k * n_chan + c + l] = bs_float_to_half(x[(size_t)(c + l) * ldx + k]);
    }
    for (; c < n_chan; c++)
        for (int64_t k = k0; k < k1; k++)
            out[(size_t)k * n_chan + c] = bs_float_to_half(x[(size_t)c * ldx + k]);
}
#endif

int bs_half_tiles_hw(void)
{
#ifdef HAVE_HW_TILES
    static int known = -1;
    if (known < 0) {
        unsigned a, b, c, d; /* F16C from CPUID leaf 1 (not every compiler's __builtin_cpu_supports knows it) */
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    }
    return known;
#else
    return 0;
#endif
}

void bs_half_rows_to_floats(const unsigned char *raw, size_t row_bytes, int n_chan, int64_t k0, int64_t k1,
                            float *out, size_t ldo)
{
#ifdef HAVE_HW_TILES
    if (bs_half_tiles_hw()) {
        rows_to_floats_hw(raw, row_bytes, n_chan, k0, k1, out, ldo);
        return;
    }
#endif
    for (int c = 0; c < n_chan; c++)
        for (int64_t k = k0; k < k1; k++)
            out[(size_t)c * ldo + k] = half_at(raw + (size_t)k * row_bytes + 2 * (size_t)c);
}

void bs_floats_to_half_rows(const float *x, size_t ldx, int n_chan, int64_t k0, int64_t k1, uint16_t *out)
{
#ifdef HAVE_HW_TILES
    if (bs_half_tiles_hw()) { /* in tiles of rows, so the rows written stay in the cache while they fill */
        for (int64_t r0 = k0; r0 < k1; r0 += TO_ROWS_TILE)
            floats_to_rows_hw(x, ldx, n_chan, r0, r0 + TO_ROWS_TILE < k1 ? r0 + TO_ROWS_TILE : k1, out);
        return;
    }
#endif
    for (int64_t k = k0; k < k1; k++)
        for (int c = 0; c < n_chan; c++)
            out[(size_t)k * n_chan + c] = bs_float_to_half(x[(size_t)c * ldx + k]);
}

/* Rows per tile of bs_floats_to_half_rows_par: a tile of the window's columns for every channel. */
#define PAR_TILE_ROWS TO_ROWS_TILE

void bs_floats_to_half_rows_par(const float *x, size_t ldx, int n_chan, int64_t n, uint16_t *out)
{
#pragma omp parallel for schedule(static)
    for (int64_t r0 = 0; r0 < n; r0 += PAR_TILE_ROWS)
        bs_floats_to_half_rows(x, ldx, n_chan, r0, r0 + PAR_TILE_ROWS < n ? r0 + PAR_TILE_ROWS : n, out);
}

void bs_i16_rows_to_floats(const unsigned char *raw, size_t row_bytes, const int *col, const float *gain, int n_chan,
                           int64_t k0, int64_t k1, float *out, size_t ldo)
{
#ifdef HAVE_HW_TILES
    if (bs_half_tiles_hw()) {
        i16_rows_to_floats_hw(raw, row_bytes, col, gain, n_chan, k0, k1, out, ldo);
        return;
    }
#endif
    for (int c = 0; c < n_chan; c++)
        i16_rows_one(raw, row_bytes, col[c], gain[c], k0, k1, out + (size_t)c * ldo);
}
