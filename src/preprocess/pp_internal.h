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

/* PP_SOS_PASS(NAME, LANES) defines
 *   static void NAME(const bs_highpass *hp, double *buf, int64_t n, int backward)
 * one pass of hp's second-order sections (direct form II transposed, in
 * double) over buf[0..n): n steps of LANES interleaved lanes ([step][lane]),
 * in place, forward or backward, from the state zi x the first step's value,
 * the recurrence serial along the steps and vectorised across the lanes. A
 * first-order section (b2 = a2 = 0, odd orders) keeps its second state at 0
 * and skips those terms. The temporal high-pass runs it along time with 8
 * channels as lanes (highpass.c), the destriper along the channels with 16
 * time columns as lanes (destripe.c).
 *
 * The designs of orders 1 to 6 (their section count and which sections are
 * first-order) are compiled with both as constants, so the coefficients and
 * states stay in registers and no section tests its kind at each step; any
 * other goes through the same code with them as variables. Each lane's
 * operations and their order are the same in every version. */
#define PP_SOS_PASS(NAME, LANES)                                                                              \
    static inline __attribute__((always_inline)) void NAME##_k(const bs_highpass *hp, double *buf, int64_t n, \
                                                               int backward, const int S, const unsigned fo)  \
    {                                                                                                         \
        double z0[BS_HP_MAX_SECTIONS][LANES], z1[BS_HP_MAX_SECTIONS][LANES];                                  \
        double b0[BS_HP_MAX_SECTIONS], b1[BS_HP_MAX_SECTIONS], b2[BS_HP_MAX_SECTIONS];                        \
        double a1[BS_HP_MAX_SECTIONS], a2[BS_HP_MAX_SECTIONS];                                                \
        const int64_t first = backward ? n - 1 : 0, step = backward ? -1 : 1;                                 \
        for (int s = 0; s < S; s++) {                                                                         \
            b0[s] = hp->sos[s][0], b1[s] = hp->sos[s][1], b2[s] = hp->sos[s][2];                              \
            a1[s] = hp->sos[s][4], a2[s] = hp->sos[s][5];                                                     \
            for (int l = 0; l < LANES; l++) {                                                                 \
                z0[s][l] = hp->zi[s][0] * buf[first * LANES + l];                                             \
                z1[s][l] = hp->zi[s][1] * buf[first * LANES + l];                                             \
            }                                                                                                 \
        }                                                                                                     \
        double *row = buf + first * LANES;                                                                    \
        for (int64_t cnt = 0; cnt < n; cnt++, row += step * LANES) {                                          \
            double v[LANES];                                                                                  \
            for (int l = 0; l < LANES; l++)                                                                   \
                v[l] = row[l];                                                                                \
            for (int s = 0; s < S; s++) {                                                                     \
                if (fo >> s & 1u) {                                                                           \
                    _Pragma("omp simd") for (int l = 0; l < LANES; l++)                                       \
                    {                                                                                         \
                        double y = b0[s] * v[l] + z0[s][l];                                                   \
                        z0[s][l] = b1[s] * v[l] - a1[s] * y;                                                  \
                        v[l] = y;                                                                             \
                    }                                                                                         \
                    continue;                                                                                 \
                }                                                                                             \
                _Pragma("omp simd") for (int l = 0; l < LANES; l++)                                           \
                {                                                                                             \
                    double y = b0[s] * v[l] + z0[s][l];                                                       \
                    z0[s][l] = b1[s] * v[l] - a1[s] * y + z1[s][l];                                           \
                    z1[s][l] = b2[s] * v[l] - a2[s] * y;                                                      \
                    v[l] = y;                                                                                 \
                }                                                                                             \
            }                                                                                                 \
            for (int l = 0; l < LANES; l++)                                                                   \
                row[l] = v[l];                                                                                \
        }                                                                                                     \
    }                                                                                                         \
    BS_VECTORIZED                                                                                             \
    static void NAME(const bs_highpass *hp, double *buf, int64_t n, int backward)                            \
    {                                                                                                         \
        const int S = hp->n_sections;                                                                         \
        unsigned fo = 0; /* bit s: section s is first-order */                                               \
        for (int s = 0; s < S; s++)                                                                           \
            fo |= (unsigned)(hp->sos[s][2] == 0 && hp->sos[s][5] == 0) << s;                                  \
        switch (S << 8 | (int)fo) {                                                                           \
        case 1 << 8 | 1: NAME##_k(hp, buf, n, backward, 1, 1); break;                                         \
        case 1 << 8 | 0: NAME##_k(hp, buf, n, backward, 1, 0); break;                                         \
        case 2 << 8 | 1: NAME##_k(hp, buf, n, backward, 2, 1); break;                                         \
        case 2 << 8 | 0: NAME##_k(hp, buf, n, backward, 2, 0); break;                                         \
        case 3 << 8 | 1: NAME##_k(hp, buf, n, backward, 3, 1); break;                                         \
        case 3 << 8 | 0: NAME##_k(hp, buf, n, backward, 3, 0); break;                                         \
        default: NAME##_k(hp, buf, n, backward, S, fo); break;                                                \
        }                                                                                                     \
    }

#endif
