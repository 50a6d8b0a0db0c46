/* blas_threads.c - see blas_threads.h. */
#include "blas_threads.h"

extern void openblas_set_num_threads(int n) __attribute__((weak));

void bs_blas_single_thread(void)
{
    if (openblas_set_num_threads)
        openblas_set_num_threads(1);
}
