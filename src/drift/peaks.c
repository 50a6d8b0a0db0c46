/*
 * peaks.c - the threshold peak detector that feeds drift estimation (see
 * drift.h part 1).
 *
 * Input: a batch window after mean removal, median reference and high-pass,
 * NOT whitened (whitening sharpens a spike's spatial footprint to a channel
 * or two, which makes any depth estimate lock onto contact positions).
 *
 * Noise scale. Each channel's noise σ_c is the median absolute value of
 * every BS_NOISE_STEP-th own sample / 0.6745 (exact selection on a copy). All
 * amplitudes below are in units of σ_c: v(c, t) = -x[c, t] / σ_c. A channel
 * with σ_c = 0 (flat) never contributes.
 *
 * Peaks. The batch's own columns are cut into tiles of PK_TILE samples (a
 * function of n_valid alone). In each tile every channel row is scanned for
 * samples with v >= th; such a sample is kept if it is the strict maximum of
 * v over its suppression neighbourhood (same channel and the same-shank
 * channels within nms_radius_um, ±w samples), a tie with an earlier (t, c)
 * in lexicographic order losing. The neighbourhood reads up to w samples
 * into the halo, so the decision never depends on the tile or batch.
 *
 * Depth. a_e = max of v(e, .) over ±AMP_HALF samples of t (channels sampled
 * at staggered sub-sample times see the trough a sample apart) for the
 * same-shank channels e within pos_radius_um of the peak contact with a_e >=
 * max(FIT_FLOOR·v, 1). A weighted (a_e²) least-squares fit of
 *     log a_e = c0 + c1·dy + c2·dy² + c3·dx + c4·dx²
 * (dx, dy relative to the peak contact, in units of the radius, a small
 * ridge keeping the x terms determined on one- or two-column probes) gives
 * the depth of the vertex, y = y_c - c1 / (2 c2): exact for a Gaussian
 * footprint and nearly unbiased for the power-law footprints of real and
 * simulated units, where a centre of mass is pulled toward its window's
 * centre. Fewer than 4 such channels, a non-concave fit (c2 >= 0) or a
 * vertex outside the radius fall back to the centre of mass of those
 * channels' depths weighted by a_e.
 *
 * Order. Tiles run in parallel (OpenMP, fixed contents) in waves of
 * PEAK_WAVE per thread; each list is sorted by (t, chan) and handed on in
 * tile order, so the output is identical for any thread count.
 *
 * Memory. A peak is the strict maximum of its channel over ±w samples, so a
 * channel holds at most one per w + 1 samples: a tile's list is capped at
 * that, and a wave's lists (bs_drift_peaks_bytes) are a bound no data can
 * pass. A tile's list is allocated at that cap on its first peak (never
 * grown by doubling), so the bytes held at once do not depend on which
 * thread reallocates when; only the last tile is shorter, so a list is never
 * reallocated while others are full.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../common/samples.h"
#include "../common/simd.h"
#include "../mem/mem.h"
#include "drift.h"

#define PK_TILE 4096   /* samples per tile */
#define PEAK_WAVE 4     /* tiles per thread held at once */
#define AMP_HALF_MS 0.07 /* per-channel amplitude: max over ± this around the peak, ms */
#define FIT_FLOOR 0.1f /* channels below this fraction of the peak are left out of the fit */

void bs_drift_default_params(bs_drift_params *p)
{
    memset(p, 0, sizeof *p);
    p->th = 5.0f;
    p->nms_radius_um = 50.0f;
    p->nms_ms = 0.5f;
    p->pos_radius_um = 50.0f;
    p->bin_um = 5.0f;
    p->n_amp = 20;
    p->amp_max = 99.0f;
    p->n_blocks = 5;
    p->rigid_max_shift = 15;
    p->rigid_iters = 10;
    p->block_max_shift = 5;
    p->smooth_sigma[0] = p->smooth_sigma[1] = p->smooth_sigma[2] = 0.5;
    p->min_channels = 8;
    p->min_height_um = 200.0f;
    p->min_block_um = 400.0f;
    p->min_spikes_per_bin = 10.0f;
    p->sig_interp_um = 20.0f;
    p->krige_radius_um = 80.0f;
    p->ridge = 0.01;
}

const char *bs_drift_mode_name(bs_drift_mode m)
{
    switch (m) {
    case BS_DRIFT_NONE: return "none";
    case BS_DRIFT_RIGID: return "rigid";
    case BS_DRIFT_NONRIGID: return "nonrigid";
    }
    return "?";
}

/* Same-shank neighbours within r (self included iff with_self): counts into
 * off (CSR, may be NULL) and, when idx is given, the channels. */
static int64_t within(const bs_probe *pr, double r, int with_self, int *off, int *idx)
{
    int64_t n = 0;
    for (int c = 0; c < pr->n_chan; c++) {
        if (off)
            off[c] = (int)n;
        for (int e = 0; e < pr->n_chan; e++) {
            if (pr->shank[e] != pr->shank[c] || (e == c && !with_self))
                continue;
            double dx = pr->x_um[e] - pr->x_um[c], dy = pr->y_um[e] - pr->y_um[c];
            if (dx * dx + dy * dy <= r * r) {
                if (idx)
                    idx[n] = e;
                n++;
            }
        }
    }
    if (off)
        off[pr->n_chan] = (int)n;
    return n;
}

/* The temporal suppression half-window w, samples: the halo check covers the
 * amplitude window too, so it is at least that. */
static int suppress_half_window(const bs_drift_params *p, double fs_hz)
{
    int w = (int)bs_seconds_to_samples(p->nms_ms * 1e-3, fs_hz);
    int wa = (int)bs_seconds_to_samples(AMP_HALF_MS * 1e-3, fs_hz);
    return wa > w ? wa : w;
}

/* Most peaks of one channel in `len` columns: a peak is the strict maximum
 * of its channel over ±w samples (ties to the earlier one), so two are more
 * than w apart. */
static int64_t tile_peaks_max(int64_t len, int w) { return (len + w) / (w + 1); }

size_t bs_drift_detector_bytes(const bs_probe *probe, const bs_drift_params *p)
{
    size_t C = (size_t)probe->n_chan;
    size_t n = (size_t)within(probe, p->nms_radius_um, 0, NULL, NULL) +
               (size_t)within(probe, p->pos_radius_um, 1, NULL, NULL);
    return (2 * (C + 1) + n + 1 + C) * sizeof(int) + 3 * C * sizeof(float);
}

void bs_drift_detector_free(bs_drift_detector *d)
{
    bs_mem_free(d->nms_off);
    bs_mem_free(d->nms);
    bs_mem_free(d->pos_off);
    bs_mem_free(d->pos);
    bs_mem_free(d->x_um);
    bs_mem_free(d->y_um);
    bs_mem_free(d->shank);
    bs_mem_free(d->scale);
    memset(d, 0, sizeof *d);
}

bs_status bs_drift_detector_init(bs_drift_detector *d, const bs_probe *probe, const bs_drift_params *p,
                                 double fs_hz)
{
    memset(d, 0, sizeof *d);
    int C = probe->n_chan;
    if (C < 1)
        return bs_error(BS_ERR_INPUT, "drift: probe has %d channels, expected >= 1", C);
    if (!(p->th > 0) || !(p->nms_radius_um >= 0) || !(p->pos_radius_um > 0) || !(p->nms_ms >= 0))
        return bs_error(BS_ERR_INPUT, "drift: peak parameters: expected th > 0, radii > 0 and a window >= 0, got "
                                      "th %g, nms %g µm, position %g µm, window %g ms",
                        p->th, p->nms_radius_um, p->pos_radius_um, p->nms_ms);
    if (!(fs_hz > 0))
        return bs_error(BS_ERR_INPUT, "drift: sampling rate: expected > 0 Hz, got %g", fs_hz);
    d->n_chan = C;
    d->th = p->th;
    d->pos_r = p->pos_radius_um;
    d->w = suppress_half_window(p, fs_hz);
    d->wa = (int)bs_seconds_to_samples(AMP_HALF_MS * 1e-3, fs_hz);
    int64_t n_nms = within(probe, p->nms_radius_um, 0, NULL, NULL);
    int64_t n_pos = within(probe, p->pos_radius_um, 1, NULL, NULL);
    const char *T = "drift/detector";
    d->nms_off = bs_mem_alloc(T, (size_t)(C + 1) * sizeof(int));
    d->pos_off = bs_mem_alloc(T, (size_t)(C + 1) * sizeof(int));
    d->nms = bs_mem_alloc(T, (size_t)(n_nms + 1) * sizeof(int));
    d->pos = bs_mem_alloc(T, (size_t)n_pos * sizeof(int));
    d->x_um = bs_mem_alloc(T, (size_t)C * sizeof(float));
    d->y_um = bs_mem_alloc(T, (size_t)C * sizeof(float));
    d->shank = bs_mem_alloc(T, (size_t)C * sizeof(int));
    d->scale = bs_mem_alloc(T, (size_t)C * sizeof(float));
    if (!d->nms_off || !d->pos_off || !d->nms || !d->pos || !d->x_um || !d->y_um || !d->shank || !d->scale) {
        bs_drift_detector_free(d);
        return BS_ERR_MEMORY;
    }
    within(probe, p->nms_radius_um, 0, d->nms_off, d->nms);
    within(probe, p->pos_radius_um, 1, d->pos_off, d->pos);
    for (int c = 0; c < C; c++) {
        d->x_um[c] = (float)probe->x_um[c];
        d->y_um[c] = (float)probe->y_um[c];
        d->shank[c] = probe->shank[c];
    }
    return BS_OK;
}

void bs_drift_spikes_free(bs_drift_spikes *s)
{
    bs_mem_free(s->s);
    memset(s, 0, sizeof *s);
}

static int spike_cmp(const void *a, const void *b)
{
    const bs_drift_spike *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return (x->chan > y->chan) - (x->chan < y->chan);
}

/* scale[c] = 1 / σ_c (0 for a flat channel): preprocess.h's noise scale. */
static bs_status noise_scales(bs_drift_detector *d, const float *x, int64_t n_t, int64_t halo, int64_t n_valid)
{
    return bs_noise_inv_scales(x, d->n_chan, n_t, halo, n_valid, BS_NOISE_STEP, "drift/noise", d->scale);
}

/* Is (c, t) the peak of its neighbourhood? v = -x[c, t]·scale[c]. */
static int is_peak(const bs_drift_detector *d, const float *x, int64_t n_t, int c, int64_t t, float v)
{
    const int w = d->w;
    const float *row = x + (size_t)c * (size_t)n_t;
    const float sc = d->scale[c];
    for (int64_t u = t - w; u <= t + w; u++) {
        float vu = -row[u] * sc;
        if (vu > v || (vu == v && u < t))
            return 0;
    }
    for (int k = d->nms_off[c]; k < d->nms_off[c + 1]; k++) {
        int e = d->nms[k];
        const float *r = x + (size_t)e * (size_t)n_t;
        const float se = d->scale[e];
        for (int64_t u = t - w; u <= t + w; u++) {
            float vu = -r[u] * se;
            if (vu > v || (vu == v && (u < t || (u == t && e < c))))
                return 0;
        }
    }
    return 1;
}

/* Solve the n × n symmetric positive definite system A z = b in place
 * (Cholesky); 0 if it is not positive definite. */
static int spd_solve(double *A, double *b, int n)
{
    for (int j = 0; j < n; j++) {
        double s = A[j * n + j];
        for (int k = 0; k < j; k++)
            s -= A[j * n + k] * A[j * n + k];
        if (!(s > 0))
            return 0;
        A[j * n + j] = sqrt(s);
        for (int i = j + 1; i < n; i++) {
            double t = A[i * n + j];
            for (int k = 0; k < j; k++)
                t -= A[i * n + k] * A[j * n + k];
            A[i * n + j] = t / A[j * n + j];
        }
    }
    for (int i = 0; i < n; i++) {
        double t = b[i];
        for (int k = 0; k < i; k++)
            t -= A[i * n + k] * b[k];
        b[i] = t / A[i * n + i];
    }
    for (int i = n - 1; i >= 0; i--) {
        double t = b[i];
        for (int k = i + 1; k < n; k++)
            t -= A[k * n + i] * b[k];
        b[i] = t / A[i * n + i];
    }
    return 1;
}

/* Depth of the peak (c, t) with amplitude v (see the header comment). */
static float peak_depth(const bs_drift_detector *d, const float *x, int64_t n_t, int c, int64_t t, float v)
{
    const double R = d->pos_r, floor_a = FIT_FLOOR * v > 1.0f ? FIT_FLOOR * v : 1.0f;
    const double xc = d->x_um[c], yc = d->y_um[c];
    double A[25], b[5];
    memset(A, 0, sizeof A);
    memset(b, 0, sizeof b);
    double ws = 0, ys = 0;
    int n = 0;
    for (int q = d->pos_off[c]; q < d->pos_off[c + 1]; q++) {
        int e = d->pos[q];
        const float *r = x + (size_t)e * (size_t)n_t;
        float a = 0;
        for (int64_t u = t - d->wa; u <= t + d->wa; u++)
            a = -r[u] > a ? -r[u] : a;
        a *= d->scale[e];
        if (!(a >= floor_a))
            continue;
        double dy = (d->y_um[e] - yc) / R, dx = (d->x_um[e] - xc) / R, w2 = (double)a * a, la = log(a);
        const double f[5] = {1.0, dy, dy * dy, dx, dx * dx};
        for (int i = 0; i < 5; i++) {
            b[i] += w2 * f[i] * la;
            for (int k = 0; k <= i; k++)
                A[i * 5 + k] += w2 * f[i] * f[k];
        }
        ws += a;
        ys += (double)a * d->y_um[e];
        n++;
    }
    const float com = (float)(ys / ws); /* the peak contact itself always passes the floor */
    if (n < 4)
        return com;
    double tr = 0;
    for (int i = 0; i < 5; i++) {
        for (int k = i + 1; k < 5; k++)
            A[i * 5 + k] = A[k * 5 + i];
        tr += A[i * 5 + i];
    }
    for (int i = 0; i < 5; i++)
        A[i * 5 + i] += 1e-6 * tr;
    if (!spd_solve(A, b, 5) || !(b[2] < 0))
        return com;
    double vy = -b[1] / (2.0 * b[2]);
    if (!(fabs(vy) <= 1.0))
        return com;
    return (float)(yc + vy * R);
}

#ifdef BS_X86_KERNELS
__attribute__((target("avx512f"))) static int64_t next_at_most_avx512(const float *row, int64_t a, int64_t b,
                                                                      float lim)
{
    const __m512 l = _mm512_set1_ps(lim);
    for (; a + 16 <= b; a += 16) {
        const __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(row + a), l, _CMP_LE_OQ);
        if (m)
            return a + __builtin_ctz(m);
    }
    return a; /* no crossing before a, and fewer than 16 samples after it */
}
#endif

/* The first t in [a, b) with row[t] <= lim (a NaN is not), else b: sixteen
 * samples a compare where the CPU has AVX-512 (the scan of every sample for
 * the rare crossings is most of the detector's time). */
static int64_t next_at_most(const float *row, int64_t a, int64_t b, float lim)
{
#ifdef BS_X86_KERNELS
    if (__builtin_cpu_supports("avx512f")) /* a crossing, or the last 0-15 samples for the loop below */
        a = next_at_most_avx512(row, a, b, lim);
#endif
    while (a < b && !(row[a] <= lim))
        a++;
    return a;
}

typedef struct {
    bs_drift_spike *s;
    int64_t n, cap;
    int failed;
} tile_list;

/* Tiles held at once: PEAK_WAVE per thread. */
static int64_t wave_tiles(int n_threads) { return (int64_t)PEAK_WAVE * n_threads; }

size_t bs_drift_peaks_bytes(int n_chan, const bs_drift_params *p, double fs_hz, int64_t n_valid, int n_threads)
{
    int64_t n_tiles = (n_valid + PK_TILE - 1) / PK_TILE, wave = wave_tiles(n_threads);
    int64_t per_tile = (int64_t)n_chan * tile_peaks_max(n_valid < PK_TILE ? n_valid : PK_TILE,
                                                         suppress_half_window(p, fs_hz));
    return (size_t)(wave < n_tiles ? wave : n_tiles) * (size_t)per_tile * sizeof(bs_drift_spike);
}

/* Peaks of one tile (columns [a, b) of the window) into L, sorted by (t, chan). */
static void tile_peaks(const bs_drift_detector *d, const float *x, int64_t n_t, int64_t halo, int64_t t0, int64_t a,
                       int64_t b, tile_list *L)
{
    const int C = d->n_chan;
    const float th = d->th;
    const int64_t limit = (int64_t)C * tile_peaks_max(b - a, d->w); /* no data holds more */
    L->n = 0;
    for (int c = 0; c < C && !L->failed; c++) {
        const float *row = x + (size_t)c * (size_t)n_t;
        const float sc = d->scale[c];
        if (!(sc > 0))
            continue;
        const float lim = -th / sc; /* v >= th  <=>  x <= lim */
        for (int64_t t = next_at_most(row, a, b, lim); t < b; t = next_at_most(row, t + 1, b, lim)) {
            float v = -row[t] * sc;
            if (!(v >= th) || !is_peak(d, x, n_t, c, t, v))
                continue;
            if (L->n == L->cap) {
                /* straight to the bound: a list that grew by doubling would briefly hold its old and new
                   blocks, and how many lists did so at once would depend on the threads' timing */
                bs_drift_spike *ns = L->cap < limit ? bs_mem_realloc(L->s, "drift/peaks", (size_t)limit * sizeof *ns)
                                                    : NULL; /* past the bound: cannot happen */
                if (!ns) {
                    L->failed = 1;
                    break;
                }
                L->s = ns;
                L->cap = limit;
            }
            L->s[L->n++] = (bs_drift_spike){.t = t - halo + t0,
                                            .y_um = peak_depth(d, x, n_t, c, t, v),
                                            .amp = v,
                                            .chan = c,
                                            .shank = d->shank[c]};
        }
    }
    if (!L->failed && L->n > 1)
        qsort(L->s, (size_t)L->n, sizeof *L->s, spike_cmp);
}

bs_status bs_drift_detect_to(bs_drift_detector *d, const float *x, int64_t n_t, int64_t halo, int64_t n_valid,
                             int64_t t0, const float *scale, bs_drift_sink sink, void *sink_ctx)
{
    if (n_valid < 0 || halo < d->w || halo + n_valid + d->w > n_t)
        return bs_error(BS_ERR_INTERNAL, "drift: window of %lld samples with halo %lld and %lld own samples: "
                                         "expected a halo of at least %d samples",
                        (long long)n_t, (long long)halo, (long long)n_valid, d->w);
    if (scale)
        memcpy(d->scale, scale, (size_t)d->n_chan * sizeof *d->scale);
    else
        BS_TRY(noise_scales(d, x, n_t, halo, n_valid));
    const int64_t n_tiles = (n_valid + PK_TILE - 1) / PK_TILE;
    if (n_tiles == 0)
        return BS_OK;
    int64_t wave = wave_tiles(omp_get_max_threads());
    wave = wave < n_tiles ? wave : n_tiles;
    tile_list *tl = calloc((size_t)wave, sizeof *tl);
    if (!tl)
        return bs_error(BS_ERR_MEMORY, "drift: out of memory for %lld peak lists", (long long)wave);
    bs_status st = BS_OK;
    /* waves of tiles in parallel (fixed contents), handed on in tile order */
    for (int64_t k0 = 0; k0 < n_tiles && st == BS_OK; k0 += wave) {
        int64_t nw = n_tiles - k0 < wave ? n_tiles - k0 : wave;
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t i = 0; i < nw; i++) {
            int64_t a = halo + (k0 + i) * PK_TILE, b = a + PK_TILE < halo + n_valid ? a + PK_TILE : halo + n_valid;
            tile_peaks(d, x, n_t, halo, t0, a, b, &tl[i]);
        }
        for (int64_t i = 0; i < nw && st == BS_OK; i++)
            st = tl[i].failed ? bs_error(BS_ERR_MEMORY, "drift: out of memory for the peaks of a batch")
                 : tl[i].n    ? sink(sink_ctx, tl[i].s, tl[i].n)
                              : BS_OK;
    }
    for (int64_t i = 0; i < wave; i++)
        bs_mem_free(tl[i].s);
    free(tl);
    return st;
}

static bs_status append_peaks(void *ctx, const bs_drift_spike *s, int64_t n)
{
    bs_drift_spikes *out = ctx;
    if (out->n + n > out->cap) {
        int64_t cap = out->cap ? out->cap : 256;
        while (cap < out->n + n)
            cap *= 2;
        bs_drift_spike *ns = bs_mem_realloc(out->s, "drift/peak-list", (size_t)cap * sizeof *ns);
        if (!ns)
            return bs_error(BS_ERR_MEMORY, "drift: out of memory for the peaks of a batch");
        out->s = ns;
        out->cap = cap;
    }
    memcpy(out->s + out->n, s, (size_t)n * sizeof *s);
    out->n += n;
    return BS_OK;
}

bs_status bs_drift_detect_batch(bs_drift_detector *d, const float *x, int64_t n_t, int64_t halo, int64_t n_valid,
                                int64_t t0, const float *scale, bs_drift_spikes *out)
{
    out->n = 0;
    return bs_drift_detect_to(d, x, n_t, halo, n_valid, t0, scale, append_peaks, out);
}
