/* blas_threads.c - see blas_threads.h. */
#include "blas_threads.h"

#include <stdlib.h>
#include <strings.h>

extern void openblas_set_num_threads(int n) __attribute__((weak));
extern char *openblas_get_corename(void) __attribute__((weak));

void bs_blas_single_thread(void)
{
    if (openblas_set_num_threads)
        openblas_set_num_threads(1);
}

const char *bs_blas_corename(void) { return openblas_get_corename ? openblas_get_corename() : NULL; }

const char *bs_blas_coretype_for(const char *corename, const char *env, int avx512, int avx2_fma)
{
    if (!corename || env || strcasecmp(corename, "prescott") != 0)
        return NULL;
    return avx512 ? "SKYLAKEX" : avx2_fma ? "HASWELL" : NULL;
}

const char *bs_blas_better_coretype(void)
{
    int avx512 = 0, avx2_fma = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return bs_blas_coretype_for(bs_blas_corename(), getenv("OPENBLAS_CORETYPE"), avx512, avx2_fma);
}
