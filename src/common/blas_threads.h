/*
 * blas_threads.h - keep the BLAS library on the calling thread.
 *
 * boundsort parallelises its own loops (OpenMP over batches, chunks and
 * template blocks) and calls BLAS from inside them. A threaded BLAS
 * (OpenBLAS's pthreads build starts one worker per core) would oversubscribe
 * the cores, spin in sched_yield between calls, and split sums differently
 * with the core count: OpenBLAS's ssyrk and sgemm gave different bits with 1
 * and 2 of its threads. bs_blas_single_thread() sets OpenBLAS to one thread
 * when the linked BLAS is OpenBLAS (a weak reference to
 * openblas_set_num_threads, so any other CBLAS links as well), which makes
 * results independent of the machine's core count.
 */
#ifndef BS_BLAS_THREADS_H
#define BS_BLAS_THREADS_H

void bs_blas_single_thread(void);

#endif
