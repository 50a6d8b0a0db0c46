/*
 * blas_threads.h - the BLAS library's run-time setup: one thread, and a
 * kernel for the CPU.
 *
 * One thread. boundsort parallelises its own loops (OpenMP over batches,
 * chunks and template blocks) and calls BLAS from inside them. A threaded
 * BLAS (OpenBLAS's pthreads build starts one worker per core) would
 * oversubscribe the cores, spin in sched_yield between calls, and split sums
 * differently with the core count: OpenBLAS's ssyrk and sgemm gave different
 * bits with 1 and 2 of its threads. bs_blas_single_thread() sets OpenBLAS to
 * one thread when the linked BLAS is OpenBLAS (a weak reference to
 * openblas_set_num_threads, so any other CBLAS links as well), which makes
 * results independent of the machine's core count.
 *
 * A kernel for the CPU. A DYNAMIC_ARCH OpenBLAS picks its kernels by the
 * CPU's family and model when the library loads; a model newer than the
 * library (Debian 12's 0.3.21 on an Emerald Rapids Xeon, model 207: a
 * virtual machine in 2026) gets its generic fallback, "Prescott", SSE3
 * kernels. There the bad-channel scan's Welch products took 16 s instead of
 * 6 s on a 2-minute Neuropixels recording. OpenBLAS reads OPENBLAS_CORETYPE
 * at load time only, so bs_blas_coretype_for() says which core to ask for
 * (SKYLAKEX where the CPU has AVX-512 F/BW/DQ/VL, HASWELL where it has AVX2
 * and FMA) when the library fell back to Prescott and the user did not set
 * OPENBLAS_CORETYPE, and the command line program runs itself again with
 * it set (main.c; once: the variable is then set). Setting OPENBLAS_CORETYPE
 * (any value) keeps OpenBLAS's own choice. The kernel changes float
 * summation orders, so outputs are byte-identical across thread counts and
 * budgets on one machine and one kernel, as before.
 */
#ifndef BS_BLAS_THREADS_H
#define BS_BLAS_THREADS_H

void bs_blas_single_thread(void);
/* The kernels the linked OpenBLAS runs ("SkylakeX", "Prescott", ...; NULL for
 * another BLAS): run_summary.json records it. */
const char *bs_blas_corename(void);

/* The OPENBLAS_CORETYPE to run with, or NULL to keep the library's choice:
 * corename is what the library picked (NULL: not OpenBLAS), env the user's
 * OPENBLAS_CORETYPE (NULL: unset), avx512 = the CPU has AVX-512 F, BW, DQ
 * and VL, avx2_fma = AVX2 and FMA. */
const char *bs_blas_coretype_for(const char *corename, const char *env, int avx512, int avx2_fma);
/* bs_blas_coretype_for for this process: the linked library, the
 * environment and the CPU. */
const char *bs_blas_better_coretype(void);

#endif
