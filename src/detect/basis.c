/*
 * basis.c - learning the temporal bases from isolated single-channel peaks
 * (see detect.h, part 1).
 */
#include <math.h>
#include <string.h>

#include "../common/eigen.h"
#include "../common/rng.h"
#include "../mem/mem.h"
#include "detect.h"

int bs_detect_low_tier(const bs_detect_params *p) { return p->th_low > 0 && p->th_low < p->th_universal; }

int bs_detect_low_stride(const bs_detect_params *p, int64_t n_samples, double fs_hz)
{
    const double cap = p->low_max_s * fs_hz; /* samples */
    if (!(cap >= 1.0) || (double)n_samples <= cap * p->low_stride)
        return p->low_stride;
    const double s = ceil((double)n_samples / cap);
    return s < 1e9 ? (int)s : 1000000000;
}

void bs_detect_default_params(bs_detect_params *p)
{
    memset(p, 0, sizeof *p);
    p->nt = 61;
    p->nt_before = 20;
    p->n_pcs = 6;
    p->n_shapes = 6;
    p->th_single_ch = 6.0f;
    p->th_universal = 9.0f;
    p->th_low = 6.75f;
    p->low_stride = 3;
    p->low_max_s = 20.0;
    p->n_chans = 10;
    p->n_sizes = 5;
    p->min_template_size_um = 10.0f;
    p->n_neighbors = 100;
    p->dmin_um = 0.0f;
    p->dminx_um = 32.0f;
    p->max_channel_distance_um = 32.0f;
    p->max_snippets = 50000;
    p->min_sample_snippets = 1000;
    p->seed = 5;
    p->chunk_candidates_per_pos = 64; /* simulated NP1: at most 25 per position with artifacts removed */
    p->chunk_spikes_per_pos = 1;
    p->lane_spikes = 0; /* from the plan */
}

bs_status bs_snippets_init(bs_snippet_set *s, const bs_detect_params *p)
{
    memset(s, 0, sizeof *s);
    s->nt = p->nt;
    s->nt_before = p->nt_before;
    s->cap = p->max_snippets;
    s->snippets = bs_mem_alloc("detect/snippets", (size_t)s->cap * (size_t)s->nt * sizeof(float));
    return s->snippets ? BS_OK : BS_ERR_MEMORY;
}

void bs_snippets_free(bs_snippet_set *s)
{
    bs_mem_free(s->snippets);
    memset(s, 0, sizeof *s);
}

/* |x[c,t]| is the largest within ±dc channels × ±dt samples (ties: the
 * earliest (c, t) wins) */
static int is_local_peak(const float *x, int n_chan, int64_t n_t, int c, int64_t t, int dc, int dt)
{
    float v = fabsf(x[(size_t)c * (size_t)n_t + (size_t)t]);
    for (int cc = c - dc; cc <= c + dc; cc++) {
        if (cc < 0 || cc >= n_chan)
            continue;
        const float *row = x + (size_t)cc * (size_t)n_t;
        for (int64_t tt = t - dt; tt <= t + dt; tt++) {
            if (tt < 0 || tt >= n_t || (cc == c && tt == t))
                continue;
            float w = fabsf(row[tt]);
            if (w > v || (w == v && (cc < c || (cc == c && tt < t))))
                return 0;
        }
    }
    return 1;
}

/* number of samples above threshold that are local peaks in a ±dc × ±dt box */
static int peaks_in_box(const float *x, int n_chan, int64_t n_t, int c, int64_t t, int dc, int dt, float th)
{
    int n = 0;
    for (int cc = c - dc; cc <= c + dc; cc++) {
        if (cc < 0 || cc >= n_chan)
            continue;
        const float *row = x + (size_t)cc * (size_t)n_t;
        for (int64_t tt = t - dt; tt <= t + dt; tt++)
            if (tt >= 0 && tt < n_t && fabsf(row[tt]) > th && is_local_peak(x, n_chan, n_t, cc, tt, 4, 5))
                n++;
    }
    return n;
}

/* 1 when (c, t) starts a snippet: above th, the largest of its ±4 channels × ±5 samples, and the only such
 * peak within ±6 channels × ±30 samples. */
static int is_snippet_peak(const float *x, int n_chan, int64_t n_t, int c, int64_t t, float th)
{
    return fabsf(x[(size_t)c * (size_t)n_t + (size_t)t]) > th && is_local_peak(x, n_chan, n_t, c, t, 4, 5) &&
           peaks_in_box(x, n_chan, n_t, c, t, 6, 30, th) == 1;
}

/* Append the unit-norm snippet of channel c starting nt_before before t (a flat one is skipped). */
static void add_snippet(bs_snippet_set *s, const float *x, int64_t n_t, int c, int64_t t)
{
    int nt = s->nt;
    float *dst = s->snippets + (size_t)s->n * (size_t)nt;
    const float *src = x + (size_t)c * (size_t)n_t + (size_t)(t - s->nt_before);
    double norm = 0;
    for (int u = 0; u < nt; u++)
        norm += (double)src[u] * src[u];
    if (norm <= 0)
        return;
    float inv = (float)(1.0 / sqrt(norm));
    for (int u = 0; u < nt; u++)
        dst[u] = src[u] * inv;
    s->n++;
}

#define SNIPPET_BLOCK 512 /* columns one thread scans for peaks at a time */

/* The peaks are found over the threads, each block of SNIPPET_BLOCK columns
 * listing its own in (t, c) order, then added block by block in order until
 * the set is full: the snippets of one thread's scan in (t, c) order, which
 * the one-thread scan below also gives (it serves when a list cannot grow). */
void bs_snippets_collect(bs_snippet_set *s, const bs_detect_params *p, const float *x, int n_chan, int64_t n_t,
                         int64_t halo, int64_t n_valid)
{
    int nt = p->nt, nb = p->nt_before;
    int64_t lo = halo > nb ? halo : nb, hi = halo + n_valid;
    if (hi > n_t - (nt - nb))
        hi = n_t - (nt - nb);
    if (hi <= lo || s->n >= s->cap)
        return;
    const int64_t n_blk = (hi - lo + SNIPPET_BLOCK - 1) / SNIPPET_BLOCK;
    int64_t **found = bs_mem_calloc("detect/snippets", (size_t)n_blk, sizeof *found); /* (t - lo) n_chan + c */
    int64_t *n_found = bs_mem_calloc("detect/snippets", (size_t)n_blk, sizeof *n_found);
    int failed = !found || !n_found;
    if (!failed) {
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed)
        for (int64_t b = 0; b < n_blk; b++) {
            int64_t cap = 0, t1 = lo + (b + 1) * SNIPPET_BLOCK < hi ? lo + (b + 1) * SNIPPET_BLOCK : hi;
            for (int64_t t = lo + b * SNIPPET_BLOCK; t < t1 && !failed; t++)
                for (int c = 0; c < n_chan && !failed; c++) {
                    if (!is_snippet_peak(x, n_chan, n_t, c, t, p->th_single_ch))
                        continue;
                    if (n_found[b] == cap) {
                        int64_t *g = bs_mem_realloc(found[b], "detect/snippets", (size_t)(cap + 64) * sizeof *g);
                        if (!g) {
                            failed = 1;
                            break;
                        }
                        found[b] = g, cap += 64;
                    }
                    found[b][n_found[b]++] = (t - lo) * n_chan + c;
                }
        }
    }
    for (int64_t b = 0; !failed && b < n_blk; b++)
        for (int64_t e = 0; e < n_found[b] && s->n < s->cap; e++)
            add_snippet(s, x, n_t, (int)(found[b][e] % n_chan), lo + found[b][e] / n_chan);
    for (int64_t b = 0; found && b < n_blk; b++)
        bs_mem_free(found[b]);
    bs_mem_free(found);
    bs_mem_free(n_found);
    for (int64_t t = lo; failed && t < hi && s->n < s->cap; t++)
        for (int c = 0; c < n_chan && s->n < s->cap; c++)
            if (is_snippet_peak(x, n_chan, n_t, c, t, p->th_single_ch))
                add_snippet(s, x, n_t, c, t);
}

/* k-means on unit-norm rows with k-means++ initialisation. Each point's
 * distances and label are computed on its own (over the threads), every sum
 * over points in point order on one thread, so the centers do not depend on
 * the thread count. */
static bs_status kmeans(const float *data, int n, int d, int k, uint64_t seed, float *centers)
{
    bs_rng rng;
    bs_rng_seed(&rng, seed);
    double *dist = bs_mem_alloc("detect/kmeans", (size_t)n * sizeof(double));
    int *label = bs_mem_alloc("detect/kmeans", (size_t)n * sizeof(int));
    double *acc = bs_mem_alloc("detect/kmeans", (size_t)k * (size_t)(d + 1) * sizeof(double));
    if (!dist || !label || !acc) {
        bs_mem_free(dist);
        bs_mem_free(label);
        bs_mem_free(acc);
        return BS_ERR_MEMORY;
    }
    int first = (int)(bs_rng_uniform(&rng) * n);
    memcpy(centers, data + (size_t)first * d, (size_t)d * sizeof(float));
    for (int i = 0; i < n; i++)
        dist[i] = INFINITY;
    for (int c = 1; c <= k; c++) {
        double total = 0;
        const float *prev = centers + (size_t)(c - 1) * d;
#pragma omp parallel for schedule(static)
        for (int i = 0; i < n; i++) {
            double e = 0;
            for (int u = 0; u < d; u++) {
                double diff = (double)data[(size_t)i * d + u] - prev[u];
                e += diff * diff;
            }
            if (e < dist[i])
                dist[i] = e;
        }
        for (int i = 0; i < n; i++)
            total += dist[i];
        if (c == k)
            break;
        double r = bs_rng_uniform(&rng) * total, run = 0;
        int pick = n - 1;
        for (int i = 0; i < n; i++) {
            run += dist[i];
            if (run > r) {
                pick = i;
                break;
            }
        }
        memcpy(centers + (size_t)c * d, data + (size_t)pick * d, (size_t)d * sizeof(float));
    }
    for (int iter = 0; iter < 100; iter++) {
        int changed = 0;
#pragma omp parallel for schedule(static) reduction(+ : changed)
        for (int i = 0; i < n; i++) {
            int best = 0;
            double best_e = INFINITY;
            for (int c = 0; c < k; c++) {
                double e = 0;
                for (int u = 0; u < d; u++) {
                    double diff = (double)data[(size_t)i * d + u] - centers[(size_t)c * d + u];
                    e += diff * diff;
                }
                if (e < best_e) {
                    best_e = e;
                    best = c;
                }
            }
            changed += iter == 0 || label[i] != best;
            label[i] = best;
        }
        if (!changed)
            break;
        memset(acc, 0, (size_t)k * (size_t)(d + 1) * sizeof(double));
        for (int i = 0; i < n; i++) {
            double *a = acc + (size_t)label[i] * (d + 1);
            for (int u = 0; u < d; u++)
                a[u] += data[(size_t)i * d + u];
            a[d] += 1;
        }
        for (int c = 0; c < k; c++) {
            double *a = acc + (size_t)c * (d + 1);
            if (a[d] == 0)
                continue; /* empty cluster keeps its centre */
            for (int u = 0; u < d; u++)
                centers[(size_t)c * d + u] = (float)(a[u] / a[d]);
        }
    }
    bs_mem_free(dist);
    bs_mem_free(label);
    bs_mem_free(acc);
    return BS_OK;
}

bs_status bs_basis_learn(const bs_snippet_set *s, const bs_detect_params *p, bs_temporal_basis *b)
{
    memset(b, 0, sizeof *b);
    int nt = p->nt, need = p->n_pcs > p->n_shapes ? p->n_pcs : p->n_shapes;
    if (s->n < need)
        return bs_error(BS_ERR_INPUT,
                        "only %d isolated spikes above %.1f (whitened units) were found, at least %d are needed to learn "
                        "spike shapes: the recording is too short, too quiet or has no spikes",
                        s->n, p->th_single_ch, need);
    b->nt = nt;
    b->nt_before = p->nt_before;
    b->n_pcs = p->n_pcs;
    b->n_shapes = p->n_shapes;
    b->wpca = bs_mem_alloc("detect/basis", (size_t)p->n_pcs * nt * sizeof(float));
    b->wtemp = bs_mem_alloc("detect/basis", (size_t)p->n_shapes * nt * sizeof(float));
    double *g = bs_mem_calloc("detect/basis-work", (size_t)nt * nt, sizeof(double));
    double *evals = bs_mem_alloc("detect/basis-work", (size_t)nt * sizeof(double));
    double *evecs = bs_mem_alloc("detect/basis-work", (size_t)nt * nt * sizeof(double));
    bs_status st = (b->wpca && b->wtemp && g && evals && evecs) ? BS_OK : BS_ERR_MEMORY;
    if (st == BS_OK) {
        for (int i = 0; i < s->n; i++) {
            const float *v = s->snippets + (size_t)i * nt;
            for (int a = 0; a < nt; a++)
                for (int c = a; c < nt; c++)
                    g[a * nt + c] += (double)v[a] * v[c];
        }
        for (int a = 0; a < nt; a++)
            for (int c = 0; c < a; c++)
                g[a * nt + c] = g[c * nt + a];
        st = bs_eigh_jacobi(g, nt, evals, evecs);
    }
    if (st == BS_OK) {
        for (int q = 0; q < p->n_pcs; q++) {
            /* sign: the value at the trough sample is negative */
            double sign = evecs[q * nt + p->nt_before] > 0 ? -1.0 : 1.0;
            for (int u = 0; u < nt; u++)
                b->wpca[q * nt + u] = (float)(sign * evecs[q * nt + u]);
        }
        st = kmeans(s->snippets, s->n, nt, p->n_shapes, p->seed, b->wtemp);
    }
    if (st == BS_OK)
        for (int k = 0; k < p->n_shapes; k++) {
            float *w = b->wtemp + (size_t)k * nt;
            double norm = 0;
            for (int u = 0; u < nt; u++)
                norm += (double)w[u] * w[u];
            double sign = w[p->nt_before] > 0 ? -1.0 : 1.0; /* troughs negative */
            double inv = norm > 0 ? sign / sqrt(norm) : 0;
            for (int u = 0; u < nt; u++)
                w[u] = (float)(w[u] * inv);
        }
    bs_mem_free(g);
    bs_mem_free(evals);
    bs_mem_free(evecs);
    if (st != BS_OK)
        bs_basis_free(b);
    return st;
}

void bs_basis_free(bs_temporal_basis *b)
{
    bs_mem_free(b->wpca);
    bs_mem_free(b->wtemp);
    memset(b, 0, sizeof *b);
}
