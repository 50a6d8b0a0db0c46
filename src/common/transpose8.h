/*
 * transpose8.h - an 8 x 8 float transpose in AVX registers (x86-64 with
 * GCC or clang only: BS_HAVE_TRANSPOSE8), for the kernels that turn
 * channel-major rows into time-major ones or back (common/half_tiles.c,
 * preprocess/car.c). The usual three rounds: unpack pairs, shuffle quads,
 * swap 128-bit halves. Callers compile it into functions with
 * __attribute__((target("avx2"))) and check the CPU first.
 */
#ifndef BS_TRANSPOSE8_H
#define BS_TRANSPOSE8_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define BS_HAVE_TRANSPOSE8 1

/* a[q] (row q) -> a[q] (column q) of an 8 x 8 float tile */
__attribute__((target("avx2"), always_inline)) static inline void bs_transpose8(__m256 a[8])
{
    __m256 t[8];
    for (int q = 0; q < 8; q += 2) {
        t[q] = _mm256_unpacklo_ps(a[q], a[q + 1]);
        t[q + 1] = _mm256_unpackhi_ps(a[q], a[q + 1]);
    }
    for (int q = 0; q < 8; q += 4) {
        a[q] = _mm256_shuffle_ps(t[q], t[q + 2], _MM_SHUFFLE(1, 0, 1, 0));
        a[q + 1] = _mm256_shuffle_ps(t[q], t[q + 2], _MM_SHUFFLE(3, 2, 3, 2));
        a[q + 2] = _mm256_shuffle_ps(t[q + 1], t[q + 3], _MM_SHUFFLE(1, 0, 1, 0));
        a[q + 3] = _mm256_shuffle_ps(t[q + 1], t[q + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int q = 0; q < 4; q++) {
        t[q] = _mm256_permute2f128_ps(a[q], a[q + 4], 0x20);
        t[q + 4] = _mm256_permute2f128_ps(a[q], a[q + 4], 0x31);
    }
    for (int q = 0; q < 8; q++)
        a[q] = t[q];
}
#endif

#endif
