/*
 * estimate.c - per-shank depth × amplitude histograms and their registration
 * into a motion estimate (drift.h parts 2-4).
 *
 * Layout. A shank's histogram is hist[t][y][a] (a fastest): n_bins time bins
 * × n_y depth bins × n_amp amplitude bins of uint8 counts (saturating; a
 * quarter of float storage, since this is the only part of the drift stage
 * that grows with the recording). Registration reads it as F = log2(1 +
 * count) minus the depth mean of each (t, a) column, one time bin at a time
 * into a per-thread float plane, so a depth shift of F[t] by s bins is a
 * shift of its rows, and the score of shift s over depth rows [y0, y1) is
 * one dot product of two contiguous float vectors (rows y - s of F[t]
 * against rows y of R).
 *
 * Determinism. Every dot product accumulates in 8 fixed float lanes summed
 * in double; every time bin's search is independent (OpenMP over t); the
 * reference is summed over t in index order for each of its elements. So the
 * result is identical for any thread count.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../mem/mem.h"
#include "drift.h"

/* ------------------------------------------------------------ geometry --- */

typedef struct {
    int n_chan;
    double y_min, y_max;
} shank_geom;

/* Contacts and depth range of shank s. */
static shank_geom geom_of(const bs_probe *pr, int s)
{
    shank_geom g = {0, 0, 0};
    for (int c = 0; c < pr->n_chan; c++) {
        if (pr->shank[c] != s)
            continue;
        if (g.n_chan == 0 || pr->y_um[c] < g.y_min)
            g.y_min = pr->y_um[c];
        if (g.n_chan == 0 || pr->y_um[c] > g.y_max)
            g.y_max = pr->y_um[c];
        g.n_chan++;
    }
    return g;
}

/* Mode, blocks and depth bins of one shank before any data is seen. */
static void plan_shank(const bs_probe *pr, const bs_drift_params *p, int s, bs_drift_shank *sh)
{
    memset(sh, 0, sizeof *sh);
    shank_geom g = geom_of(pr, s);
    double height = g.y_max - g.y_min;
    sh->shank = s;
    sh->n_chan = g.n_chan;
    sh->y_min_um = g.y_min;
    sh->y_max_um = g.y_max;
    sh->n_blocks = 1;
    if (p->n_blocks < 1) {
        sh->mode = BS_DRIFT_NONE;
        snprintf(sh->note, sizeof sh->note, "drift correction is off");
        return;
    }
    if (g.n_chan < p->min_channels) {
        sh->mode = BS_DRIFT_NONE;
        snprintf(sh->note, sizeof sh->note, "shank %d has %d contacts, fewer than the %d a drift estimate needs: not corrected",
                 s, g.n_chan, p->min_channels);
        return;
    }
    if (height < p->min_height_um) {
        sh->mode = BS_DRIFT_NONE;
        snprintf(sh->note, sizeof sh->note, "shank %d spans %.0f µm, less than the %.0f µm a drift estimate needs: not corrected",
                 s, height, p->min_height_um);
        return;
    }
    int nb = p->n_blocks;
    int fit = p->min_block_um > 0 ? (int)floor(height / p->min_block_um) : nb;
    if (fit < 1)
        fit = 1;
    if (nb > fit) {
        snprintf(sh->note, sizeof sh->note,
                 "shank %d spans %.0f µm: %d nonrigid blocks need %.0f µm each; using %s",
                 s, height, nb, p->min_block_um, fit > 1 ? "fewer blocks" : "rigid correction");
        if (fit > 1) {
            char more[64];
            snprintf(more, sizeof more, " (%d)", fit);
            strncat(sh->note, more, sizeof sh->note - strlen(sh->note) - 1);
        }
        nb = fit;
    }
    sh->mode = nb > 1 ? BS_DRIFT_NONRIGID : BS_DRIFT_RIGID;
    sh->y0_um = g.y_min - p->bin_um;
    sh->n_y = (int)ceil((g.y_max - sh->y0_um) / p->bin_um) + 1;
    sh->n_blocks = nb > 1 ? 2 * nb - 1 : 1;
    sh->block_bins = sh->n_y / nb;
}

/* First depth bin of block j of a shank. */
static int block_start(const bs_drift_shank *sh, int j)
{
    if (sh->n_blocks == 1)
        return 0;
    return (int)lround((double)j * (sh->n_y - sh->block_bins) / (sh->n_blocks - 1));
}

size_t bs_drift_hist_bytes(const bs_probe *probe, const bs_drift_params *p, int64_t n_bins)
{
    size_t b = 0;
    for (int s = 0; s < probe->n_shanks; s++) {
        bs_drift_shank sh;
        plan_shank(probe, p, s, &sh);
        if (sh.mode != BS_DRIFT_NONE)
            b += (size_t)n_bins * (size_t)sh.n_y * (size_t)p->n_amp; /* uint8 counts */
    }
    return b;
}

size_t bs_drift_motion_bytes(const bs_probe *probe, const bs_drift_params *p, int64_t n_bins)
{
    size_t n_blocks = 0;
    for (int s = 0; s < probe->n_shanks; s++) {
        bs_drift_shank sh;
        plan_shank(probe, p, s, &sh);
        n_blocks += (size_t)sh.n_blocks;
    }
    return (size_t)probe->n_shanks * sizeof(bs_drift_shank) + (size_t)n_bins * (n_blocks + 1) * sizeof(float) +
           n_blocks * (sizeof(float) + sizeof(int32_t));
}

size_t bs_drift_estimate_bytes(const bs_probe *probe, const bs_drift_params *p, int64_t n_bins)
{
    int S = probe->n_shanks;
    size_t worst = 0;
    size_t n_shift = 2 * (size_t)(p->block_max_shift > 0 ? p->block_max_shift : 0) + 1;
    for (int s = 0; s < S; s++) {
        bs_drift_shank sh;
        plan_shank(probe, p, s, &sh);
        if (sh.mode == BS_DRIFT_NONE)
            continue;
        size_t b = (size_t)sh.n_y * (size_t)p->n_amp * sizeof(float) * (1 + (size_t)omp_get_max_threads()) /* R, F[t] */
                   + (size_t)n_bins * (size_t)p->n_amp * sizeof(float)                  /* column means */
                   + (size_t)n_bins * (sizeof(int) + sizeof(float) + sh.n_blocks * sizeof(double)) /* totals, counts, m */
                   + 2 * (size_t)n_bins * (size_t)sh.n_blocks * n_shift * sizeof(double); /* scores + smoothing */
        if (b > worst)
            worst = b;
    }
    return worst;
}

void bs_drift_free(bs_drift *d)
{
    for (int s = 0; s < d->n_shanks && d->sh; s++)
        bs_mem_free(d->sh[s].hist);
    bs_mem_free(d->sh);
    bs_mem_free(d->motion_um);
    bs_mem_free(d->times_s);
    bs_mem_free(d->depths_um);
    bs_mem_free(d->block_shank);
    memset(d, 0, sizeof *d);
}

bs_status bs_drift_init(bs_drift *d, const bs_probe *probe, const bs_drift_params *p, int64_t n_samples,
                        int64_t bin_samples, double fs_hz)
{
    memset(d, 0, sizeof *d);
    if (n_samples < 1 || bin_samples < 1 || !(fs_hz > 0))
        return bs_error(BS_ERR_INPUT, "drift: expected samples >= 1, a time bin >= 1 sample and fs > 0, got %lld, "
                                      "%lld and %g Hz",
                        (long long)n_samples, (long long)bin_samples, fs_hz);
    if (!(p->bin_um > 0) || p->n_amp < 1 || !(p->amp_max > p->th) || p->rigid_max_shift < 0 ||
        p->block_max_shift < 0 || p->rigid_iters < 1)
        return bs_error(BS_ERR_INPUT, "drift: histogram parameters: expected bin > 0 µm, n_amp >= 1, amp_max > th, "
                                      "shifts >= 0 and iterations >= 1");
    for (int c = 0; c < probe->n_chan; c++)
        if (probe->shank[c] < 0 || probe->shank[c] >= probe->n_shanks)
            return bs_error(BS_ERR_INPUT, "drift: channel %d: shank %d outside [0, %d)", c, probe->shank[c],
                            probe->n_shanks);
    int64_t nb = (n_samples + bin_samples - 1) / bin_samples;
    if (nb > INT32_MAX / 2)
        return bs_error(BS_ERR_INPUT, "drift: %lld time bins: too many", (long long)nb);
    d->p = *p;
    d->n_bins = (int)nb;
    d->n_shanks = probe->n_shanks;
    d->sh = bs_mem_calloc("drift/motion", (size_t)d->n_shanks, sizeof *d->sh);
    if (!d->sh)
        return BS_ERR_MEMORY;
    for (int s = 0; s < d->n_shanks; s++) {
        plan_shank(probe, p, s, &d->sh[s]);
        d->sh[s].block0 = d->n_blocks;
        d->n_blocks += d->sh[s].n_blocks;
        if (d->sh[s].note[0] && p->n_blocks >= 1)
            bs_log_warn("drift: %s", d->sh[s].note);
    }
    d->motion_um = bs_mem_calloc("drift/motion", (size_t)d->n_bins * (size_t)d->n_blocks, sizeof(float));
    d->times_s = bs_mem_calloc("drift/motion", (size_t)d->n_bins, sizeof(float));
    d->depths_um = bs_mem_calloc("drift/motion", (size_t)d->n_blocks, sizeof(float));
    d->block_shank = bs_mem_calloc("drift/motion", (size_t)d->n_blocks, sizeof(int32_t));
    if (!d->motion_um || !d->times_s || !d->depths_um || !d->block_shank) {
        bs_drift_free(d);
        return BS_ERR_MEMORY;
    }
    for (int b = 0; b < d->n_bins; b++) {
        int64_t s0 = (int64_t)b * bin_samples, len = n_samples - s0 < bin_samples ? n_samples - s0 : bin_samples;
        d->times_s[b] = (float)(((double)s0 + 0.5 * (double)len) / fs_hz);
    }
    for (int s = 0; s < d->n_shanks; s++) {
        bs_drift_shank *sh = &d->sh[s];
        for (int j = 0; j < sh->n_blocks; j++) {
            d->block_shank[sh->block0 + j] = s;
            d->depths_um[sh->block0 + j] =
                sh->mode == BS_DRIFT_NONE
                    ? (float)(0.5 * (sh->y_min_um + sh->y_max_um))
                    : (float)(sh->y0_um + (block_start(sh, j) + 0.5 * sh->block_bins) * p->bin_um);
        }
        if (sh->mode == BS_DRIFT_NONE)
            continue;
        sh->hist = bs_mem_calloc("drift/histogram", (size_t)d->n_bins * (size_t)sh->n_y * (size_t)p->n_amp,
                                 sizeof *sh->hist);
        if (!sh->hist) {
            bs_drift_free(d);
            return BS_ERR_MEMORY;
        }
    }
    return BS_OK;
}

int bs_drift_any(const bs_drift *d)
{
    for (int s = 0; s < d->n_shanks; s++)
        if (d->sh[s].mode != BS_DRIFT_NONE)
            return 1;
    return 0;
}

bs_status bs_drift_add(bs_drift *d, int64_t bin, const bs_drift_spike *s, int64_t n)
{
    if (bin < 0 || bin >= d->n_bins)
        return bs_error(BS_ERR_INTERNAL, "drift: time bin %lld outside [0, %d)", (long long)bin, d->n_bins);
    const bs_drift_params *p = &d->p;
    const double la = log10(p->th), lb = log10(p->amp_max);
    for (int64_t i = 0; i < n; i++) {
        if (s[i].shank < 0 || s[i].shank >= d->n_shanks)
            continue;
        bs_drift_shank *sh = &d->sh[s[i].shank];
        if (sh->mode == BS_DRIFT_NONE || !sh->hist)
            continue;
        double fy = floor((s[i].y_um - sh->y0_um) / p->bin_um);
        if (!(fy >= 0 && fy < sh->n_y))
            continue;
        double amp = s[i].amp < p->amp_max ? s[i].amp : p->amp_max;
        int col = amp > p->th ? (int)floor(p->n_amp * (log10(amp) - la) / (lb - la)) : 0;
        if (col >= p->n_amp)
            col = p->n_amp - 1;
        uint8_t *cell = &sh->hist[((size_t)bin * sh->n_y + (size_t)fy) * p->n_amp + col];
        *cell += *cell < 255; /* saturating: log2(1 + count) barely moves beyond */
        sh->n_spikes++;
    }
    return BS_OK;
}

/* -------------------------------------------------------- registration --- */

/* Σ a[i]·b[i] in 8 fixed float lanes, summed in double. */
static double dot8(const float *a, const float *b, int64_t n)
{
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            l[k] += a[i + k] * b[i + k];
    double s = 0;
    for (int k = 0; k < 8; k++)
        s += l[k];
    for (; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* Score of F[t] shifted up by `shift` rows against R, over rows [y0, y1). */
static double shift_score(const float *Ft, const float *R, int n_y, int n_a, int shift, int y0, int y1)
{
    int lo = y0 > shift ? y0 : shift;               /* need y - shift >= 0 */
    int hi = y1 < n_y + shift ? y1 : n_y + shift;   /* need y - shift < n_y */
    if (hi <= lo)
        return 0;
    return dot8(Ft + (size_t)(lo - shift) * n_a, R + (size_t)lo * n_a, (int64_t)(hi - lo) * n_a);
}

/* Shift order 0, -1, +1, -2, +2, ...: the first strict maximum wins, so ties go to the smallest |s|. */
static int nth_shift(int k) { return k % 2 ? -(k + 1) / 2 : k / 2; }

/* The registration's view of a shank's counts: F[t][y][a] = lut[count] -
 * mean[t][a], with lut[k] = log2(1 + k) and mean[t][a] the depth mean of
 * lut[count] in column (t, a). */
typedef struct {
    const uint8_t *h; /* [B × n_y × n_a] */
    const float *mean; /* [B × n_a] */
    float lut[256];
    int n_y, n_a;
} fview;

/* F[t] as floats into out[n_y × n_a]. */
static void load_F(const fview *v, int t, float *out)
{
    const size_t plane = (size_t)v->n_y * v->n_a;
    const uint8_t *h = v->h + (size_t)t * plane;
    const float *mu = v->mean + (size_t)t * v->n_a;
    for (int y = 0; y < v->n_y; y++)
        for (int a = 0; a < v->n_a; a++)
            out[(size_t)y * v->n_a + a] = v->lut[h[(size_t)y * v->n_a + a]] - mu[a];
}

/* R = mean over t of F[t] shifted by tot[t]. */
static void update_reference(const fview *v, const int *tot, int B, float *R)
{
    const int n_y = v->n_y, n_a = v->n_a;
#pragma omp parallel for schedule(static)
    for (int y = 0; y < n_y; y++) {
        for (int a = 0; a < n_a; a++) {
            double s = 0;
            for (int t = 0; t < B; t++) {
                int src = y - tot[t];
                if (src >= 0 && src < n_y)
                    s += v->lut[v->h[((size_t)t * n_y + src) * n_a + a]] - v->mean[(size_t)t * n_a + a];
            }
            R[(size_t)y * n_a + a] = (float)(s / B);
        }
    }
}

/* Reflected index (scipy.ndimage 'reflect': d c b a | a b c d | d c b a). */
static int reflect(int i, int n)
{
    int m = 2 * n;
    i %= m;
    if (i < 0)
        i += m;
    return i < n ? i : m - 1 - i;
}

/* Normalised Gaussian taps w[0..2r] for offsets -r..r, r = round(4σ) (at
 * most 31); σ <= 0 gives the single tap 1. Returns r. */
static int gauss_taps(double sigma, double *w)
{
    if (!(sigma > 0)) {
        w[0] = 1.0;
        return 0;
    }
    int r = (int)(4.0 * sigma + 0.5);
    if (r > 31)
        r = 31;
    double ws = 0;
    for (int k = -r; k <= r; k++)
        ws += w[k + r] = exp(-0.5 * k * k / (sigma * sigma));
    for (int k = 0; k <= 2 * r; k++)
        w[k] /= ws;
    return r;
}

/* Separable Gaussian smoothing of a (n0 × n1 × n2) array along one axis. */
static void smooth_axis(double *v, double *tmp, const int dims[3], int axis, double sigma)
{
    if (!(sigma > 0))
        return;
    double w[64];
    int r = gauss_taps(sigma, w);
    const int n0 = dims[0], n1 = dims[1], n2 = dims[2];
    const int n = dims[axis];
    const size_t stride = axis == 0 ? (size_t)n1 * n2 : axis == 1 ? (size_t)n2 : 1;
    memcpy(tmp, v, (size_t)n0 * n1 * n2 * sizeof *v);
#pragma omp parallel for schedule(static)
    for (int i0 = 0; i0 < n0; i0++)
        for (int i1 = 0; i1 < n1; i1++)
            for (int i2 = 0; i2 < n2; i2++) {
                int idx[3] = {i0, i1, i2};
                int c = idx[axis];
                idx[axis] = 0;
                size_t base = ((size_t)idx[0] * n1 + idx[1]) * n2 + idx[2];
                double s = 0;
                for (int k = -r; k <= r; k++)
                    s += w[k + r] * tmp[base + (size_t)reflect(c + k, n) * stride];
                v[((size_t)i0 * n1 + i1) * n2 + i2] = s;
            }
}

/* Registration of one shank: motion in bins (before sign and mean) into m[t × n_blocks]. */
static bs_status register_shank(const bs_drift_params *p, int B, bs_drift_shank *sh, double *m)
{
    const int n_y = sh->n_y, n_a = p->n_amp, nb = sh->n_blocks;
    const size_t plane = (size_t)n_y * n_a;
    const int nth = omp_get_max_threads();
    const int S2 = p->block_max_shift, n_s = 2 * S2 + 1;
    fview fv = {.h = sh->hist, .n_y = n_y, .n_a = n_a};
    for (int k = 0; k < 256; k++)
        fv.lut[k] = (float)log2(1.0 + k);
    float *mean = bs_mem_alloc("drift/register", (size_t)B * n_a * sizeof *mean);
    float *R = bs_mem_alloc("drift/register", plane * sizeof *R);
    float *Fs = bs_mem_alloc("drift/register", (size_t)nth * plane * sizeof *Fs); /* one F[t] per thread */
    int *tot = bs_mem_calloc("drift/register", (size_t)B, sizeof *tot);
    double *dcs = bs_mem_alloc("drift/register", (size_t)B * nb * n_s * sizeof *dcs);
    double *tmp = bs_mem_alloc("drift/register", (size_t)B * nb * n_s * sizeof *tmp);
    if (!mean || !R || !Fs || !tot || !dcs || !tmp) {
        bs_mem_free(mean), bs_mem_free(R), bs_mem_free(Fs), bs_mem_free(tot), bs_mem_free(dcs), bs_mem_free(tmp);
        return BS_ERR_MEMORY;
    }
    fv.mean = mean;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < B; t++)
        for (int a = 0; a < n_a; a++) {
            double sum = 0;
            for (int y = 0; y < n_y; y++)
                sum += fv.lut[sh->hist[((size_t)t * n_y + y) * n_a + a]];
            mean[(size_t)t * n_a + a] = (float)(sum / n_y);
        }
    /* rigid rounds */
    load_F(&fv, B / 2, R);
    const int S = p->rigid_max_shift;
    for (int it = 0; it < p->rigid_iters; it++) {
        int changed = 0;
#pragma omp parallel for schedule(dynamic, 4) reduction(| : changed) num_threads(nth)
        for (int t = 0; t < B; t++) {
            float *Ft = Fs + (size_t)omp_get_thread_num() * plane;
            load_F(&fv, t, Ft);
            double best = -INFINITY;
            int bs = 0;
            for (int k = 0; k <= 2 * S; k++) {
                int s = nth_shift(k);
                double v = shift_score(Ft, R, n_y, n_a, tot[t] + s, 0, n_y);
                if (v > best) {
                    best = v;
                    bs = s;
                }
            }
            if (bs != 0) {
                tot[t] += bs;
                changed = 1;
            }
        }
        update_reference(&fv, tot, B, R);
        if (!changed)
            break;
    }
    /* block scores around each bin's rigid alignment, dcs[t][j][i] for the
     * absolute shift tot[t] + i - S2, smoothed over time at that same
     * absolute shift (neighbouring bins may have other rigid totals) */
    double wt[64];
    int rt = gauss_taps(p->smooth_sigma[1], wt);
#pragma omp parallel for schedule(dynamic, 4) num_threads(nth)
    for (int t = 0; t < B; t++) {
        float *Fk = Fs + (size_t)omp_get_thread_num() * plane;
        double *out = dcs + (size_t)t * nb * n_s;
        for (int q = 0; q < nb * n_s; q++)
            out[q] = 0;
        for (int k = -rt; k <= rt; k++) {
            load_F(&fv, reflect(t + k, B), Fk);
            for (int j = 0; j < nb; j++) {
                int y0 = block_start(sh, j), y1 = y0 + (nb == 1 ? n_y : sh->block_bins);
                for (int i = 0; i < n_s; i++)
                    out[j * n_s + i] +=
                        wt[k + rt] * shift_score(Fk, R, n_y, n_a, tot[t] + i - S2, y0, y1) / ((double)(y1 - y0) * n_a);
            }
        }
    }
    int dims[3] = {B, nb, n_s};
    smooth_axis(dcs, tmp, dims, 2, p->smooth_sigma[0]); /* shift */
    smooth_axis(dcs, tmp, dims, 1, p->smooth_sigma[2]); /* block */
    /* sub-bin refinement: Gaussian (1 bin) upsampling on a 0.1-bin grid, ties to the smallest |u| */
    const int n_u = 20 * S2 + 1;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < B; t++)
        for (int j = 0; j < nb; j++) {
            const double *v = dcs + ((size_t)t * nb + j) * n_s;
            double best = -INFINITY, bu = 0;
            for (int k = 0; k < n_u; k++) {
                double u = 0.1 * nth_shift(k);
                double s = 0;
                for (int i = 0; i < n_s; i++) {
                    double e = (i - S2) - u;
                    s += exp(-0.5 * e * e) * v[i];
                }
                if (s > best) {
                    best = s;
                    bu = u;
                }
            }
            m[(size_t)t * nb + j] = tot[t] + bu;
        }
    bs_mem_free(mean), bs_mem_free(R), bs_mem_free(Fs), bs_mem_free(tot), bs_mem_free(dcs), bs_mem_free(tmp);
    return BS_OK;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

bs_status bs_drift_estimate(bs_drift *d)
{
    const bs_drift_params *p = &d->p;
    const int B = d->n_bins;
    bs_status st = BS_OK;
    for (int s = 0; s < d->n_shanks && st == BS_OK; s++) {
        bs_drift_shank *sh = &d->sh[s];
        if (sh->mode == BS_DRIFT_NONE)
            continue;
        const size_t plane = (size_t)sh->n_y * p->n_amp;
        /* spike-count check */
        float *cnt = bs_mem_alloc("drift/register", (size_t)B * sizeof *cnt);
        if (!cnt) {
            st = BS_ERR_MEMORY;
            break;
        }
        for (int t = 0; t < B; t++) {
            double c = 0;
            for (size_t i = 0; i < plane; i++)
                c += sh->hist[(size_t)t * plane + i];
            cnt[t] = (float)c;
        }
        qsort(cnt, (size_t)B, sizeof *cnt, cmp_float);
        float med = B % 2 ? cnt[B / 2] : 0.5f * (cnt[B / 2 - 1] + cnt[B / 2]);
        bs_mem_free(cnt);
        char why[200] = "";
        if (B < 2)
            snprintf(why, sizeof why, "shank %d: the recording is one time bin long: no motion to estimate", s);
        else if (med < p->min_spikes_per_bin)
            snprintf(why, sizeof why,
                     "shank %d: a median of %.0f spikes per time bin, fewer than the %.0f a drift estimate needs: not "
                     "corrected",
                     s, med, p->min_spikes_per_bin);
        if (why[0]) { /* after any geometry note */
            sh->mode = BS_DRIFT_NONE;
            size_t used = strlen(sh->note);
            snprintf(sh->note + used, sizeof sh->note - used, "%s%s", used ? "; " : "", why);
            bs_log_warn("drift: %s", why);
            bs_mem_free(sh->hist);
            sh->hist = NULL;
            continue;
        }
        const int nb = sh->n_blocks;
        double *m = bs_mem_alloc("drift/register", (size_t)B * nb * sizeof *m);
        if (!m) {
            st = BS_ERR_MEMORY;
            break;
        }
        st = register_shank(p, B, sh, m);
        if (st == BS_OK) {
            double mean = 0;
            for (size_t i = 0; i < (size_t)B * nb; i++)
                mean += m[i];
            mean /= (double)B * nb;
            for (int t = 0; t < B; t++)
                for (int j = 0; j < nb; j++)
                    d->motion_um[(size_t)t * d->n_blocks + sh->block0 + j] =
                        (float)(-(m[(size_t)t * nb + j] - mean) * p->bin_um);
        }
        bs_mem_free(m);
        bs_mem_free(sh->hist);
        sh->hist = NULL;
    }
    d->estimated = st == BS_OK;
    return st;
}

bs_status bs_drift_restore(bs_drift *d, const bs_probe *probe, const bs_drift_params *p, int64_t n_samples,
                           int64_t bin_samples, double fs_hz, const int32_t *modes, int n_modes,
                           const float *motion, int64_t n_bins, int64_t n_blocks)
{
    BS_TRY(bs_drift_init(d, probe, p, n_samples, bin_samples, fs_hz));
    bs_status st = BS_OK;
    if (n_modes != d->n_shanks || n_bins != d->n_bins || n_blocks != d->n_blocks)
        st = bs_error(BS_ERR_INPUT, "drift: a stored estimate of %d shanks, %lld time bins and %lld blocks does not "
                                    "fit this run (%d, %d, %d)",
                      n_modes, (long long)n_bins, (long long)n_blocks, d->n_shanks, d->n_bins, d->n_blocks);
    for (int s = 0; s < d->n_shanks && st == BS_OK; s++) {
        bs_drift_shank *sh = &d->sh[s];
        if (modes[s] != (int32_t)sh->mode && modes[s] != BS_DRIFT_NONE)
            st = bs_error(BS_ERR_INPUT, "drift: stored mode %d of shank %d: expected %d or %d", modes[s], s,
                          (int)sh->mode, (int)BS_DRIFT_NONE);
        sh->mode = (bs_drift_mode)modes[s];
        bs_mem_free(sh->hist);
        sh->hist = NULL;
    }
    if (st != BS_OK) {
        bs_drift_free(d);
        return st;
    }
    memcpy(d->motion_um, motion, (size_t)n_bins * (size_t)n_blocks * sizeof *motion);
    d->estimated = 1;
    return BS_OK;
}
