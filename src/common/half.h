/*
 * half.h - IEEE 754 binary16 ("float16") conversions, in integer arithmetic
 * so that every build and CPU gives the same bits (no F16C needed).
 *
 * bs_half_to_float is exact (every half is a float). bs_float_to_half rounds
 * to the nearest half, ties to even, as IEEE and F16C do, except past the
 * largest half: a magnitude of 65520 or more (infinity included) becomes
 * ±65504 instead of infinity, so that a stored sample never turns into an
 * infinity that would make NaNs downstream. NaN stays NaN (0x7e00).
 *
 * Precision: 11 significant bits, a relative error of at most 2^-11
 * (4.9e-4) for normal values (magnitudes from 6.1e-5 to 65504); below,
 * an absolute error of at most 2^-25. The preprocessed recording
 * (src/preprocess/stage_preprocess.c) is stored this way, in µV.
 */
#ifndef BS_HALF_H
#define BS_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float bs_half_to_float(uint16_t h)
{
    /* the three cases computed and selected without branches, so that loops over halves vectorise */
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = h & 0x7c00u, m = h & 0x3ffu;
    uint32_t normal = (((uint32_t)h & 0x7fffu) << 13) + (112u << 23); /* exponent bias 15 -> 127 */
    uint32_t special = 0x7f800000u | (m << 13);                        /* infinity or NaN */
    float sub = (float)m * 0x1p-24f;                                   /* zero or subnormal: exact */
    uint32_t subbits;
    memcpy(&subbits, &sub, sizeof subbits);
    uint32_t bits = sign | (e == 0 ? subbits : e == 0x7c00u ? special : normal);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t bs_float_to_half(float f)
{
    /* every case computed and one selected without branches, so that loops over floats vectorise */
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    int tiny = a < 0x38800000u; /* under 2^-14: a multiple of 2^-24 (1024 of them is the smallest normal) */
    float t;
    memcpy(&t, &a, sizeof t);
    t = tiny ? t * 0x1p24f : 0.0f;             /* exact, under 1024 */
    t = (t + 0x1p23f) - 0x1p23f;               /* rounded to an integer, ties to even */
    uint32_t sub = (uint32_t)t;
    uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13; /* 13 bits rounded to nearest even;
                                                                             exponent bias 127 -> 15 */
    uint32_t h = a > 0x7f800000u ? 0x7e00u       /* NaN */
               : a >= 0x477ff000u ? 0x7bffu      /* 65520 or more: the largest half, not infinity */
               : tiny ? sub : normal;
    return (uint16_t)(sign | h);
}

#endif
