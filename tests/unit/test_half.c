/*
 * test_half.c - float16 conversions (src/common/half.h): every half round
 * trips exactly; every midpoint between neighbouring halves goes to the even
 * one and the floats just beside it to the nearer; magnitudes past the
 * largest half become ±65504; and, on an x86 CPU with F16C (all AVX2 ones),
 * 2^22 random floats convert to the same bits as the hardware's
 * round-to-nearest-even conversion (an independent reference). The
 * transposing conversions (half_tiles.h: F16C tiles where the CPU has them)
 * give the same bits as the scalar ones, NaN, infinities and clamping
 * included; and int16 rows scaled to floats the bits of the double product.
 */
#include "test.h"

#include <math.h>
#include <stdint.h>

#include "common/half.h"
#include "common/half_tiles.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
__attribute__((target("f16c"))) static uint16_t hw_half(float f)
{
    return (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set1_ps(f), _MM_FROUND_TO_NEAREST_INT), 0);
}
#define HAVE_HW 1
#else
#define HAVE_HW 0
#endif

static int is_nan_half(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu); }

int main(void)
{
    /* every half (NaNs aside) round trips; finite halves give finite floats */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if (is_nan_half((uint16_t)h)) {
            bad += !isnan(bs_half_to_float((uint16_t)h));
            continue;
        }
        float f = bs_half_to_float((uint16_t)h);
        int inf = (h & 0x7fffu) == 0x7c00u;
        bad += inf ? !isinf(f) : bs_float_to_half(f) != h;
    }
    CHECK_MSG(bad == 0, "%d halves do not round trip", bad);
    CHECK(bs_half_to_float(0x3c00) == 1.0f && bs_half_to_float(0xc000) == -2.0f);
    CHECK(bs_half_to_float(0x7bff) == 65504.0f && bs_half_to_float(0x0001) == 0x1p-24f);

    /* between neighbours a < b (both finite, positive): the midpoint goes to the even code, floats just
       below it to a, just above it to b; the same mirrored for negative values */
    bad = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        float a = bs_half_to_float((uint16_t)h), b = bs_half_to_float((uint16_t)(h + 1));
        float mid = (float)(((double)a + (double)b) / 2); /* 12 significant bits: exact */
        uint16_t even = (h % 2 == 0) ? (uint16_t)h : (uint16_t)(h + 1);
        bad += bs_float_to_half(mid) != even;
        bad += bs_float_to_half(nextafterf(mid, 0.0f)) != h;
        bad += bs_float_to_half(nextafterf(mid, 1e9f)) != h + 1;
        bad += bs_float_to_half(-mid) != (0x8000u | even);
        bad += bs_float_to_half(-nextafterf(mid, 1e9f)) != (0x8000u | (h + 1));
    }
    CHECK_MSG(bad == 0, "%d rounding cases wrong", bad);

    /* past the largest half: clamped, not infinite; NaN stays NaN */
    CHECK(bs_float_to_half(65519.0f) == 0x7bff && bs_float_to_half(65520.0f) == 0x7bff);
    CHECK(bs_float_to_half(1e30f) == 0x7bff && bs_float_to_half(-INFINITY) == 0xfbff);
    CHECK(is_nan_half(bs_float_to_half(NAN)));
    CHECK(bs_float_to_half(-0.0f) == 0x8000 && bs_float_to_half(1e-30f) == 0);

#if HAVE_HW
    if (__builtin_cpu_supports("avx2")) {
        uint64_t s = 0x9e3779b97f4a7c15ull;
        int diff = 0;
        for (int i = 0; i < (1 << 22); i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            uint32_t bits = (uint32_t)(s >> 32);
            bits = (bits & 0x807fffffu) | ((uint32_t)(100 + (s & 31)) << 23); /* magnitudes 2^-27 .. 2^4 */
            if (i % 2)
                bits = (uint32_t)s; /* any float */
            float f;
            memcpy(&f, &bits, sizeof f);
            if (isnan(f) || fabsf(f) >= 65520.0f)
                continue;
            diff += bs_float_to_half(f) != hw_half(f);
        }
        CHECK_MSG(diff == 0, "%d of 2^22 random floats differ from F16C's conversion", diff);
    } else {
        printf("# no AVX2/F16C: the hardware comparison is skipped\n");
    }
#endif

    /* the transposing conversions (half_tiles.h) against the scalar ones, for 21 channels x 1203 samples
       (neither a multiple of 8; the float16 rows in three tiles of rows), values of every kind: random bits
       (NaN and infinities among them), ±65520, subnormal halves, ±0 */
    {
        enum { C = 21, T = 1203, LD = 1211 };
        static float x[C * LD], back[C * LD];
        static uint16_t rows[T * C];
        uint64_t s = 0x2545f4914f6cdd1dull;
        for (int i = 0; i < C * LD; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            uint32_t bits = (uint32_t)(s >> 32);
            if (i % 3 == 0)
                bits = (bits & 0x807fffffu) | ((uint32_t)(97 + (s & 31)) << 23); /* magnitudes 2^-30 .. 2^1 */
            memcpy(&x[i], &bits, sizeof bits);
        }
        x[5] = 65520.0f, x[6] = -1e30f, x[7] = INFINITY, x[8] = NAN, x[9] = -0.0f, x[10] = 0x1p-24f;
        x[LD + 3] = 65519.0f, x[2 * LD + 100] = -INFINITY;
        bs_floats_to_half_rows(x, LD, C, 0, T, rows);
        int bad = 0;
        for (int k = 0; k < T; k++)
            for (int c = 0; c < C; c++)
                bad += rows[k * C + c] != bs_float_to_half(x[c * LD + k]);
        CHECK_MSG(bad == 0, "%d values of bs_floats_to_half_rows differ from bs_float_to_half (hardware path %d)", bad,
                  bs_half_tiles_hw());
        bs_half_rows_to_floats((const unsigned char *)rows, 2 * C, C, 2, T, back, LD); /* 1201 rows: 150 x 8 + 1 */
        bad = 0;
        for (int k = 2; k < T; k++)
            for (int c = 0; c < C; c++) {
                float want = bs_half_to_float(rows[k * C + c]), got = back[c * LD + k];
                bad += isnan(want) ? !isnan(got) : memcmp(&want, &got, sizeof want) != 0;
            }
        CHECK_MSG(bad == 0, "%d values of bs_half_rows_to_floats differ from bs_half_to_float", bad);
    }

    /* int16 rows to scaled floats (half_tiles.h) against (float)((double)v * gain): 21 channels, two runs of 8
       consecutive columns (the 8 x 8 path) among scattered ones, rows 3..202 of 203, the int16 extremes, gains
       of every size and sign */
    {
        enum { C = 21, NCOL = 40, T = 203, LD = 211 };
        static int16_t raw[T * NCOL];
        static float out[C * LD];
        const int col[C] = {3, 4, 5, 6, 7, 8, 9, 10, 0, 39, 20, 21, 22, 23, 24, 25, 26, 27, 12, 14, 13};
        float gain[C];
        uint64_t s = 0x853c49e6748fea9bull;
        for (int i = 0; i < T * NCOL; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            raw[i] = (int16_t)(s >> 48);
        }
        raw[3 * NCOL + 3] = INT16_MIN, raw[4 * NCOL + 4] = INT16_MAX, raw[5 * NCOL + 20] = 0;
        for (int c = 0; c < C; c++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            uint32_t bits = ((uint32_t)(s >> 32) & 0x807fffffu) | ((uint32_t)(110 + (s & 31)) << 23);
            memcpy(&gain[c], &bits, sizeof bits); /* magnitudes 2^-17 .. 2^14, either sign */
        }
        gain[0] = 2.34375f, gain[1] = 0.195f, gain[11] = -0.0f;
        bs_i16_rows_to_floats((const unsigned char *)raw, 2 * NCOL, col, gain, C, 3, T, out, LD);
        int bad = 0;
        for (int k = 3; k < T; k++)
            for (int c = 0; c < C; c++) {
                float want = (float)((double)raw[k * NCOL + col[c]] * (double)gain[c]), got = out[c * LD + k];
                bad += memcmp(&want, &got, sizeof want) != 0;
            }
        CHECK_MSG(bad == 0, "%d values of bs_i16_rows_to_floats differ from the double product (hardware path %d)",
                  bad, bs_half_tiles_hw());
    }
    TEST_MAIN_END();
}
