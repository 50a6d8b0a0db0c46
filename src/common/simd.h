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
 * (the detection filter and paired scores, detect/universal.c; the matching
 * projection, match/templates.c), chosen at run time with
 * __builtin_cpu_supports. Each lane does the same operations in the same
 * order, so they too give the same bits; tests force the portable kernels
 * (bs_detect_force_portable, bs_match_force_portable) and compare.
 */
#ifndef BS_SIMD_H
#define BS_SIMD_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(BS_NO_CLONES)
#define BS_VECTORIZED __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define BS_VECTORIZED
#endif

#endif
