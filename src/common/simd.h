/*
 * simd.h - function multi-versioning for hot kernels.
 *
 * BS_VECTORIZED before a function compiles it for AVX-512, AVX2 and baseline
 * x86-64 and picks the best at load time (GCC/clang target_clones). The build
 * passes -ffp-contract=off (CMakeLists.txt), so no compiler fuses a*b+c into
 * a multiply-add in one variant and not another, and the kernels only
 * vectorise independent elements (no reassociated reductions): every variant
 * computes bit-identical results.
 */
#ifndef BS_SIMD_H
#define BS_SIMD_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(BS_NO_CLONES)
#define BS_VECTORIZED __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define BS_VECTORIZED
#endif

#endif
