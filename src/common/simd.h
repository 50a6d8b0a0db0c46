/*
 * simd.h - function multi-versioning for hot kernels.
 *
 * BS_VECTORIZED before a function compiles it for AVX-512, AVX2 and baseline
 * x86-64 and picks the best at load time (GCC/clang target_clones). The build
 * passes -ffp-contract=off (CMakeLists.txt), so no compiler fuses a*b+c into
 * a multiply-add in one variant and not another, and the kernels only
 * vectorise independent elements (no reassociated reductions): every variant
 * computes bit-identical results.
 *
 * A clone keeps its source's vector width: an 8-lane kernel's AVX-512 clone
 * uses 256-bit registers. Where the kernels dominate a sort they also have a
 * version written with 16-lane vectors under __attribute__((target("avx512f")))
 * (the detection's bounds and paired scores, detect/universal.c; the
 * whitening, preprocess/whiten.c), chosen at run time with
 * __builtin_cpu_supports. Each lane does the same operations in the same
 * order, so they too give the same bits; tests force the portable kernels
 * (bs_detect_force_portable) and compare.
 *
 * The whitening and the direct filter of a detected spike (detect/universal.c,
 * filter_at) sum their terms with fused multiply-adds: fmaf's one rounding
 * per term, which every path computes alike (IEEE 754 defines it exactly).
 * The 16-lane AVX-512 kernels call the intrinsic (BS_FMA16); the 8-lane
 * portable kernels are BS_FMA_CLONES and use BS_VFMA, a lane-wise fmaf loop
 * that the "fma" clone compiles to one vector FMA (the callers unroll their
 * loops with a pragma so that the vectoriser sees them whole; checked in the
 * disassembly) and the other to calls of fmaf, correct but slow (only x86
 * CPUs older than 2013 have no FMA). The filter banks of detection and
 * matching (six 61-tap filters over every channel and sample) are FFTs
 * (common/firbank.c), plain multiplies and adds in 8-lane vectors.
 */
#ifndef BS_SIMD_H
#define BS_SIMD_H

/* Where kernels built with target("avx512f") or target("avx2,fma") and
 * chosen at run time (__builtin_cpu_supports) can exist. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BS_X86_KERNELS 1
#include <immintrin.h>
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(BS_NO_CLONES)
#define BS_VECTORIZED __attribute__((target_clones("avx512f", "avx2", "default")))
#define BS_FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define BS_VECTORIZED
#define BS_FMA_CLONES
#endif

/* acc = w * x + acc, rounded once, for a 16-float GCC vector acc and x in a
 * function built for AVX-512 (BS_X86_KERNELS). */
#define BS_FMA16(acc, w, x) ((acc) = (__typeof__(acc))_mm512_fmadd_ps(_mm512_set1_ps(w), (__m512)(x), (__m512)(acc)))

/* acc[l] = fmaf(w, x[l], acc[l]) for the n lanes of the vectors acc and x
 * (w a float). A macro, not a function: a function taking AVX vectors by
 * value would change its ABI where the caller's target has no AVX. */
#define BS_VFMA(acc, w, x, n)                                                                                    \
    do {                                                                                                         \
        _Pragma("GCC unroll 16") for (int bs_l_ = 0; bs_l_ < (n); bs_l_++)                                       \
            (acc)[bs_l_] = __builtin_fmaf((w), (x)[bs_l_], (acc)[bs_l_]);                                        \
    } while (0)

#endif
