/*
 * car_local.c - the local median reference: each channel minus the median of
 * the channels in an annulus around it (see preprocess.h, LOCAL MEDIAN
 * REFERENCE).
 *
 * Neighbourhoods (bs_local_ref_build): for channel i, the distances to every
 * other channel in double, sqrt(dx^2 + dy^2) (numpy's norm of a 2-vector);
 * the annulus r_in < d <= r_out if it holds at least min_nbr channels, else
 * the min_nbr nearest with d > r_in, ordered by (distance, channel index).
 * Each neighbourhood is stored in increasing channel index (the median does
 * not depend on the order).
 *
 * Medians (bs_car_local): the window is cut into tiles of CL_LANES samples.
 * For a channel with n <= CL_NET_MAX neighbours, the neighbours' values of
 * the tile (contiguous in each row) are loaded into n vectors of CL_LANES
 * samples and sorted by Batcher's merge-exchange network, compiled for each
 * n (16 compare-exchanges for n = 7, each a vector min and max), so every
 * sample of the tile is sorted at once without branches; the middle
 * value(s) are then read off.
 * Larger neighbourhoods (dense probes, wide annuli) and the last, partial
 * tile use an exact selection (quickselect) per sample on a copy. Both give
 * the same value: the median is one of the inputs (odd n) or (a + b) / 2 in
 * float32 of the two middle inputs (even n), as numpy's np.median of float32
 * data. The tile's results for every channel are kept in per-thread scratch
 * and written back only after all its medians are taken, so each median
 * sees the input, never a channel already referenced. Tiles are independent
 * and a sample's arithmetic does not depend on the thread, so the output is
 * the same bytes for any thread count. NaN inputs are not supported (the
 * networks' min/max and numpy order them differently).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/select.h"
#include "pp_internal.h"
#include "preprocess.h"

#define CL_TAG "preprocess/car_local"
#define CL_LANES 16   /* samples per tile */
#define CL_NET_MAX 24 /* largest neighbourhood sorted by the network (n^2 / 2 compare-exchanges) */

/* ---------------------------------------------------------- neighbours --- */

typedef struct {
    double d;
    int idx;
} dist_key;

static int cmp_dist(const void *pa, const void *pb)
{
    const dist_key *a = pa, *b = pb;
    if (a->d != b->d)
        return a->d < b->d ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

static int cmp_int(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    return (a > b) - (a < b);
}

void bs_local_ref_free(bs_local_ref *r)
{
    bs_mem_free(r->n_nbr);
    bs_mem_free(r->nbr);
    memset(r, 0, sizeof *r);
}

/* The neighbours of channel i into out (returns their count), keys[C] as work. */
static int neighbours(const bs_probe *p, int i, double r_in, double r_out, int min_nbr, dist_key *keys, int *out)
{
    const int C = p->n_chan;
    int n = 0, in_ring = 0;
    for (int j = 0; j < C; j++) {
        if (j == i)
            continue;
        double dx = p->x_um[i] - p->x_um[j], dy = p->y_um[i] - p->y_um[j];
        double d = sqrt(dx * dx + dy * dy);
        if (!(d > r_in))
            continue;
        keys[n++] = (dist_key){d, j};
        in_ring += d <= r_out;
    }
    int m = 0;
    if (in_ring >= min_nbr) {
        for (int a = 0; a < n; a++)
            if (keys[a].d <= r_out)
                out[m++] = keys[a].idx;
    } else {
        qsort(keys, (size_t)n, sizeof *keys, cmp_dist);
        m = n < min_nbr ? n : min_nbr;
        for (int a = 0; a < m; a++)
            out[a] = keys[a].idx;
        qsort(out, (size_t)m, sizeof *out, cmp_int);
    }
    return m;
}

bs_status bs_local_ref_build(const bs_probe *p, double r_in_um, double r_out_um, int min_nbr, bs_local_ref *r)
{
    memset(r, 0, sizeof *r);
    const int C = p->n_chan;
    if (C < 1)
        return bs_error(BS_ERR_INPUT, "local reference: probe has %d channels, expected >= 1", C);
    if (!(r_in_um >= 0) || !(r_out_um >= r_in_um) || !isfinite(r_out_um))
        return bs_error(BS_ERR_INPUT,
                        "local reference: radii (%g, %g) µm: expected 0 <= inner radius <= outer radius, finite",
                        r_in_um, r_out_um);
    if (min_nbr < 0)
        return bs_error(BS_ERR_INPUT, "local reference: field 'min_neighbors': expected >= 0, got %d", min_nbr);
    dist_key *keys = bs_mem_alloc("preprocess/local_ref_build", (size_t)C * sizeof *keys);
    int *set = bs_mem_alloc("preprocess/local_ref_build", (size_t)C * sizeof *set);
    r->n_nbr = bs_mem_calloc("preprocess/local_ref", (size_t)C, sizeof(int));
    if (!keys || !set || !r->n_nbr) {
        bs_mem_free(keys);
        bs_mem_free(set);
        bs_local_ref_free(r);
        return BS_ERR_MEMORY;
    }
    int k = 0;
    for (int i = 0; i < C; i++) {
        r->n_nbr[i] = neighbours(p, i, r_in_um, r_out_um, min_nbr, keys, set);
        if (r->n_nbr[i] > k)
            k = r->n_nbr[i];
    }
    r->n_chan = C;
    r->k = k;
    r->nbr = bs_mem_calloc("preprocess/local_ref", (size_t)C * (size_t)(k > 0 ? k : 1), sizeof(int));
    if (!r->nbr) {
        bs_mem_free(keys);
        bs_mem_free(set);
        bs_local_ref_free(r);
        return BS_ERR_MEMORY;
    }
    for (int i = 0; i < C; i++)
        neighbours(p, i, r_in_um, r_out_um, min_nbr, keys, r->nbr + (size_t)i * (size_t)k);
    bs_mem_free(keys);
    bs_mem_free(set);
    return BS_OK;
}

/* ------------------------------------------------------------- medians --- */

static size_t per_thread_floats(const bs_local_ref *r) { return (size_t)r->n_chan * CL_LANES + (size_t)r->k; }

size_t bs_car_local_scratch_bytes(const bs_local_ref *r, int64_t n_t, int n_threads)
{
    if (r->n_chan < 1 || n_t < 1)
        return 0;
    if (n_threads < 1)
        n_threads = 1;
    return (size_t)n_threads * per_thread_floats(r) * sizeof(float);
}

/* numpy's median of v[0..n) (n >= 1), reordering v. */
static float median_select(float *v, int n)
{
    float hi = bs_select_f(v, n, n / 2);
    if (n & 1)
        return hi;
    /* v[0 .. n/2) now holds the n/2 smallest values: the lower middle is their largest */
    float lo = v[0];
    for (int i = 1; i < n / 2; i++)
        lo = v[i] > lo ? v[i] : lo;
    return (lo + hi) / 2.0f;
}

/* Compare-exchange of rows i < j in every lane: v[i] gets the smaller value.
 * Written as two selects on one comparison so that it compiles to a vector
 * min and max (a < b ? a : b is exactly minps(a, b), b > a ? b : a maxps(b, a)). */
static inline __attribute__((always_inline)) void cmp_exchange(float (*v)[CL_LANES], int i, int j)
{
#pragma omp simd
    for (int l = 0; l < CL_LANES; l++) {
        float a = v[i][l], b = v[j][l];
        float lo = a < b ? a : b, hi = b > a ? b : a;
        v[i][l] = lo;
        v[j][l] = hi;
    }
}

/* Sort rows v[0..n) lane by lane with Batcher's merge-exchange network (Knuth,
 * TAOCP 5.2.2, algorithm M: any n, ~n log^2 n / 4 compare-exchanges). With n
 * a constant the loops unroll into straight-line vector code. */
static inline __attribute__((always_inline)) void sort_network(float (*v)[CL_LANES], const int n)
{
    if (n < 2)
        return;
    int t = 0;
    while ((1 << t) < n)
        t++;
#pragma GCC unroll 8
    for (int p = 1 << (t - 1); p > 0; p >>= 1) {
        int q = 1 << (t - 1), r = 0, d = p;
        for (;;) {
#pragma GCC unroll 32
            for (int i = 0; i < n - d; i++)
                if ((i & p) == r)
                    cmp_exchange(v, i, i + d);
            if (q == p)
                break;
            d = q - p;
            q >>= 1;
            r = p;
        }
    }
}

static inline __attribute__((always_inline)) void median_n(const float *const *src, float *med, const int n)
{
    float v[CL_NET_MAX][CL_LANES];
    for (int j = 0; j < n; j++)
        memcpy(v[j], src[j], sizeof v[j]);
    sort_network(v, n);
    if (n & 1) {
        memcpy(med, v[n / 2], sizeof v[0]);
    } else {
#pragma omp simd
        for (int l = 0; l < CL_LANES; l++)
            med[l] = (v[n / 2 - 1][l] + v[n / 2][l]) / 2.0f;
    }
}

/* The medians of CL_LANES samples of the n rows src[0..n) (1 <= n <= CL_NET_MAX): one network per n. */
BS_VECTORIZED
static void median_network(const float *const *src, int n, float *med)
{
#if defined(__clang__)
    /* clang (14, -O1 and up) spends ~25 minutes unrolling 24 constant-n copies of the always-inline network; the
     * run-time-n network does the same compare-exchanges in the same order, so the medians are the same values. */
    median_n(src, med, n);
#else
    switch (n) {
#define CL_CASE(k)                                                                                                     \
    case k:                                                                                                            \
        median_n(src, med, k);                                                                                         \
        break;
        CL_CASE(1) CL_CASE(2) CL_CASE(3) CL_CASE(4) CL_CASE(5) CL_CASE(6) CL_CASE(7) CL_CASE(8)
        CL_CASE(9) CL_CASE(10) CL_CASE(11) CL_CASE(12) CL_CASE(13) CL_CASE(14) CL_CASE(15) CL_CASE(16)
        CL_CASE(17) CL_CASE(18) CL_CASE(19) CL_CASE(20) CL_CASE(21) CL_CASE(22) CL_CASE(23) CL_CASE(24)
#undef CL_CASE
    default:
        break;
    }
#endif
}

bs_status bs_car_local(const bs_local_ref *r, float *x, int64_t n_t, void *scratch, size_t scratch_bytes)
{
    const int C = r->n_chan;
    if (C < 1 || !r->n_nbr || !r->nbr)
        return bs_error(BS_ERR_INTERNAL, "local reference: neighbourhoods not built");
    if (n_t < 1)
        return bs_error(BS_ERR_INPUT, "local reference: window of %lld samples: expected at least 1", (long long)n_t);
    const size_t per = per_thread_floats(r) * sizeof(float);
    pp_scratch s;
    BS_TRY(pp_scratch_get(CL_TAG, per, scratch, scratch_bytes, &s));
    const int64_t n_tiles = (n_t + CL_LANES - 1) / CL_LANES;
    const int k = r->k;
#pragma omp parallel num_threads(s.n_threads)
    {
        float *out = (float *)(s.buf + (size_t)omp_get_thread_num() * per); /* [C][CL_LANES] */
        float *tmp = out + (size_t)C * CL_LANES;                             /* [k] */
        const float *src_rows[CL_NET_MAX];
#pragma omp for schedule(static)
        for (int64_t b = 0; b < n_tiles; b++) {
            const int64_t t0 = b * CL_LANES;
            const int len = (int)(n_t - t0 < CL_LANES ? n_t - t0 : CL_LANES);
            for (int c = 0; c < C; c++) {
                const int n = r->n_nbr[c];
                const int *nb = r->nbr + (size_t)c * (size_t)k;
                const float *src = x + (size_t)c * (size_t)n_t + t0;
                float *dst = out + (size_t)c * CL_LANES;
                float med[CL_LANES];
                if (n == 0) {
                    memcpy(dst, src, (size_t)len * sizeof *dst);
                    continue;
                }
                if (n <= CL_NET_MAX && len == CL_LANES) {
                    for (int j = 0; j < n; j++)
                        src_rows[j] = x + (size_t)nb[j] * (size_t)n_t + t0;
                    median_network(src_rows, n, med);
                } else {
                    for (int l = 0; l < len; l++) {
                        for (int j = 0; j < n; j++)
                            tmp[j] = x[(size_t)nb[j] * (size_t)n_t + (size_t)(t0 + l)];
                        med[l] = median_select(tmp, n);
                    }
                }
                for (int l = 0; l < len; l++)
                    dst[l] = src[l] - med[l];
            }
            for (int c = 0; c < C; c++)
                memcpy(x + (size_t)c * (size_t)n_t + t0, out + (size_t)c * CL_LANES, (size_t)len * sizeof(float));
        }
    }
    pp_scratch_release(&s);
    return BS_OK;
}
