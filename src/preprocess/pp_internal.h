/*
 * pp_internal.h - scratch handling shared by the preprocessing kernels (not
 * part of the module interface).
 *
 * Every kernel's scratch is `per_thread` bytes for each thread it runs. A
 * kernel either gets a caller buffer (and runs as many threads as fit in it,
 * at most omp_get_max_threads()) or allocates per_thread *
 * omp_get_max_threads() bytes under its tag and frees them on return, so the
 * tag's measured peak equals the size function.
 */
#ifndef BS_PP_INTERNAL_H
#define BS_PP_INTERNAL_H

#include <omp.h>
#include <stddef.h>

#include "../common/status.h"
#include "../mem/mem.h"

/* Hot loops are multi-versioned with BS_VECTORIZED (common/simd.h). */
#include "../common/simd.h"

typedef struct {
    char *buf;     /* n_threads * per_thread bytes */
    int n_threads; /* threads the kernel may run */
    int owned;     /* 1: allocated here, free with pp_scratch_release */
} pp_scratch;

static inline bs_status pp_scratch_get(const char *tag, size_t per_thread, void *scratch, size_t scratch_bytes,
                                       pp_scratch *s)
{
    int max_threads = omp_get_max_threads();
    if (max_threads < 1)
        max_threads = 1;
    s->owned = 0;
    s->buf = scratch;
    if (per_thread == 0) {
        s->n_threads = max_threads;
        s->buf = NULL;
        return BS_OK;
    }
    if (scratch) {
        size_t fit = scratch_bytes / per_thread;
        if (fit < 1)
            return bs_error(BS_ERR_INTERNAL, "%s: scratch of %zu bytes is smaller than one thread's %zu bytes", tag,
                            scratch_bytes, per_thread);
        s->n_threads = fit < (size_t)max_threads ? (int)fit : max_threads;
        return BS_OK;
    }
    s->n_threads = max_threads;
    s->buf = bs_mem_alloc(tag, per_thread * (size_t)max_threads);
    if (!s->buf)
        return BS_ERR_MEMORY;
    s->owned = 1;
    return BS_OK;
}

static inline void pp_scratch_release(pp_scratch *s)
{
    if (s->owned)
        bs_mem_free(s->buf);
    s->buf = NULL;
    s->owned = 0;
}

#endif
