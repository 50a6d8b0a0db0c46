/*
 * bad_channels.c - detection of dead, noisy and out-of-brain channels on a
 * chunk, the vote over chunks, and kriging interpolation (bad_channels.h
 * explains the method).
 *
 * A chunk's work is per channel (mean removal, similarity, Welch band power:
 * parallel over channels, sums in double as bs_row_sum's 8 interleaved
 * partial sums) and per sample (the shank's median: parallel over samples,
 * an exact selection on a copy of the shank's values). The Welch product is
 * two single-threaded sgemms per channel (blas_threads.h keeps the BLAS on
 * the calling thread): with half overlap and an even segment length a
 * segment is two consecutive hops, so its transform is the first half of
 * the basis applied to the hops from the first plus the second half applied
 * to the hops from the second, each a matrix read in place with the hop as
 * leading dimension.
 */
#include "bad_channels.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../io/probe.h"
#include "../mem/mem.h"
#include "pp_internal.h"
#include "preprocess.h"

static const char *const label_names[BS_CHAN_N_LABELS] = {"good", "dead", "noisy", "out"};
static const char *const mode_names[3] = {"interpolate", "remove", "keep"};

const char *bs_chan_label_name(int label)
{
    return label >= 0 && label < BS_CHAN_N_LABELS ? label_names[label] : "?";
}

const char *bs_bad_mode_name(int mode) { return mode >= 0 && mode < 3 ? mode_names[mode] : "?"; }

int bs_bad_mode_parse(const char *text)
{
    for (int m = 0; m < 3; m++)
        if (text && strcmp(text, mode_names[m]) == 0)
            return m;
    return -1;
}

void bs_bad_channel_default_params(bs_bad_channel_params *p)
{
    p->mode = BS_BAD_INTERPOLATE;
    p->max_fraction = 0.5;
    p->n_chunks = 100;
    p->chunk_s = 0.3;
    p->highpass_hz = 300.0;
    p->psd_hf_uv2_hz = 0.02;
    p->dead_threshold = -0.5;
    p->noisy_threshold = 1.0;
    p->outside_threshold = -0.75;
    p->n_neighbors = 11;
    p->nyquist_fraction = 0.8;
    p->welch_ms = 10.0;
    p->min_shank_channels = 32;
}

/* ----------------------------------------------------------- detector --- */

static int welch_nperseg(double fs_hz, const bs_bad_channel_params *prm)
{
    int n = (int)(prm->welch_ms * fs_hz / 1000.0); /* scipy: int(welch_window_ms * fs / 1000) */
    n -= n & 1; /* even, so that a half-overlapping segment is two whole hops (300 at 30 kHz) */
    return n < 8 ? 8 : n;
}

/* First bin k with k fs / N > nyquist_fraction fs / 2, and the bins from it to N / 2. */
static void band_bins(int nperseg, double frac, int *k0, int *n_bins)
{
    int k = (int)floor(frac * nperseg / 2.0) + 1;
    if (k > nperseg / 2)
        k = nperseg / 2;
    *k0 = k;
    *n_bins = nperseg / 2 - k + 1;
}

size_t bs_bad_detector_bytes(int n_chan, double fs_hz, const bs_bad_channel_params *prm)
{
    int N = welch_nperseg(fs_hz, prm), k0, nb;
    band_bins(N, prm->nyquist_fraction, &k0, &nb);
    return (size_t)(2 * n_chan + 1) * sizeof(int) + (size_t)N * 2 * (size_t)nb * sizeof(float); /* order, start
                                                                           (shanks <= channels in use), basis */
}

void bs_bad_detector_free(bs_bad_detector *d)
{
    bs_mem_free(d->order);
    bs_mem_free(d->start);
    bs_mem_free(d->basis);
    memset(d, 0, sizeof *d);
}

bs_status bs_bad_detector_init(const bs_probe *probe, double fs_hz, const bs_bad_channel_params *prm,
                               bs_bad_detector *d)
{
    memset(d, 0, sizeof *d);
    int C = probe->n_chan;
    d->n_chan = C;
    d->prm = *prm;
    d->nperseg = welch_nperseg(fs_hz, prm);
    band_bins(d->nperseg, prm->nyquist_fraction, &d->k0, &d->n_bins);
    int N = d->nperseg, nb = d->n_bins;
    d->order = bs_mem_alloc("preprocess/bad_detector", (size_t)C * sizeof(int));
    d->start = bs_mem_alloc("preprocess/bad_detector", (size_t)(probe->n_shanks + 1) * sizeof(int));
    d->basis = bs_mem_alloc("preprocess/bad_detector", (size_t)N * 2 * (size_t)nb * sizeof(float));
    if (!d->order || !d->start || !d->basis) {
        bs_bad_detector_free(d);
        return bs_error(BS_ERR_MEMORY, "bad-channel detector: out of memory for %d channels", C);
    }
    /* shanks with enough channels, each in depth order (always sorted, as SpikeInterface's detection) */
    int min = prm->min_shank_channels > 3 ? prm->min_shank_channels : 3;
    d->n_groups = bs_probe_depth_order(probe, min, 0, d->order, d->start);
    if (d->n_groups < 0) {
        bs_bad_detector_free(d);
        return bs_error(BS_ERR_MEMORY, "bad-channel detector: out of memory for %d channels", C);
    }
    for (int g = 0; g < d->n_groups; g++)
        if (d->start[g + 1] - d->start[g] > d->max_group)
            d->max_group = d->start[g + 1] - d->start[g];
    /* periodic Hann (scipy's get_window('hann', N)) times the band's cosines and sines */
    double s2 = 0;
    for (int t = 0; t < N; t++) {
        double w = 0.5 - 0.5 * cos(2.0 * M_PI * t / N);
        s2 += w * w;
        for (int b = 0; b < nb; b++) {
            double ph = 2.0 * M_PI * (double)((int64_t)(d->k0 + b) * t % N) / N;
            d->basis[(size_t)t * 2 * nb + b] = (float)(w * cos(ph));
            d->basis[(size_t)t * 2 * nb + nb + b] = (float)(w * sin(ph));
        }
    }
    d->psd_scale = 1.0 / (fs_hz * s2);
    return BS_OK;
}

/* ------------------------------------------------------------- a chunk --- */

static int64_t n_segments(const bs_bad_detector *d, int64_t n)
{
    int hop = d->nperseg / 2; /* noverlap = nperseg // 2 = the hop (nperseg is even) */
    return n < d->nperseg ? 0 : (n - hop) / hop;
}

#define MED_TILE 64 /* samples whose medians one thread takes at once */

/* per thread: a tile of the group's values (MED_TILE x max_group floats), the Welch product (segments x 2 bins) */
static size_t per_thread_bytes(const bs_bad_detector *d, int64_t n)
{
    size_t a = (size_t)(MED_TILE + 2) * (size_t)d->max_group * sizeof(float); /* and the median's work */
    size_t b = (size_t)n_segments(d, n) * 2 * (size_t)d->n_bins * sizeof(float);
    return a + b + 64;
}

size_t bs_bad_chunk_scratch_bytes(const bs_bad_detector *d, int64_t n, int n_threads)
{
    if (n_threads < 1)
        n_threads = 1;
    /* shared: the reference (n floats) and xcorr / trend (2 C doubles); then per thread */
    return (size_t)n * sizeof(float) + 2 * (size_t)d->n_chan * sizeof(double) + 64 +
           (size_t)n_threads * per_thread_bytes(d, n);
}

static double median_d(double *v, int n)
{
    /* small (n_neighbors values): insertion sort */
    for (int i = 1; i < n; i++) {
        double t = v[i];
        int j = i - 1;
        for (; j >= 0 && v[j] > t; j--)
            v[j + 1] = v[j];
        v[j + 1] = t;
    }
    return n & 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bs_status bs_bad_channels_chunk(const bs_bad_detector *d, float *x, int64_t stride, int64_t off, int64_t n,
                                void *scratch, size_t scratch_bytes, int8_t *label, float *coherence, float *psd_hf)
{
    const int C = d->n_chan;
    const bs_bad_channel_params *prm = &d->prm;
    for (int c = 0; c < C; c++) {
        label[c] = BS_CHAN_GOOD;
        coherence[c] = 0.0f;
        psd_hf[c] = 0.0f;
    }
    if (d->n_groups == 0)
        return BS_OK;
    if (n < 2)
        return bs_error(BS_ERR_INPUT, "bad-channel detection: a chunk of %lld samples is too short", (long long)n);
    const int nth_max = omp_get_max_threads() < 1 ? 1 : omp_get_max_threads();
    size_t need = bs_bad_chunk_scratch_bytes(d, n, nth_max);
    char *buf = scratch;
    int owned = 0, nth = nth_max;
    if (!buf) {
        buf = bs_mem_alloc("preprocess/bad_chunk", need);
        if (!buf)
            return BS_ERR_MEMORY;
        owned = 1;
    } else {
        size_t shared = bs_bad_chunk_scratch_bytes(d, n, 0) - per_thread_bytes(d, n);
        if (scratch_bytes < shared + per_thread_bytes(d, n))
            return bs_error(BS_ERR_INTERNAL, "bad-channel detection: scratch of %zu bytes, %zu needed",
                            scratch_bytes, shared + per_thread_bytes(d, n));
        size_t fit = (scratch_bytes - shared) / per_thread_bytes(d, n);
        nth = fit < (size_t)nth_max ? (int)fit : nth_max;
    }
    float *ref = (float *)buf;
    double *xcorr = (double *)(buf + (((size_t)n * sizeof(float) + 63) / 64) * 64);
    double *trend = xcorr + C;
    char *thr_base = (char *)(trend + C);
    const size_t ptb = per_thread_bytes(d, n);
    const int64_t n_seg = n_segments(d, n);
    const int hop = d->nperseg / 2, nb = d->n_bins;

    /* each channel's mean over the chunk, removed */
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int i = 0; i < d->start[d->n_groups]; i++) {
        float *row = x + (size_t)d->order[i] * (size_t)stride + off;
        float m = (float)(bs_row_sum(row, n) / (double)n);
        for (int64_t t = 0; t < n; t++)
            row[t] -= m;
    }

    for (int g = 0; g < d->n_groups; g++) {
        const int *ch = d->order + d->start[g];
        const int m = d->start[g + 1] - d->start[g];
        /* the reference: the median over the shank at each sample, less its mean */
#pragma omp parallel num_threads(nth)
        {
            float *v = (float *)(thr_base + (size_t)omp_get_thread_num() * ptb);
            const int64_t n_tiles = (n + MED_TILE - 1) / MED_TILE;
#pragma omp for schedule(static)
            for (int64_t b = 0; b < n_tiles; b++) { /* a tile copied sample-major, each row read contiguously */
                int64_t t0 = b * MED_TILE, len = t0 + MED_TILE <= n ? MED_TILE : n - t0;
                for (int i = 0; i < m; i++) {
                    const float *src = x + (size_t)ch[i] * (size_t)stride + off + t0;
                    for (int64_t j = 0; j < len; j++)
                        v[(size_t)j * m + i] = src[j];
                }
                int32_t *work = (int32_t *)(v + (size_t)MED_TILE * m);
                for (int64_t j = 0; j < len; j++)
                    ref[t0 + j] = bs_median_f32(v + (size_t)j * m, m, work);
            }
        }
        float rm = (float)(bs_row_sum(ref, n) / (double)n);
        for (int64_t t = 0; t < n; t++)
            ref[t] -= rm;
        const double rr = bs_row_dot(ref, ref, n);
        /* similarity and the high band's power, per channel */
#pragma omp parallel num_threads(nth)
        {
            char *mine = thr_base + (size_t)omp_get_thread_num() * ptb;
            float *prod = (float *)(mine + (((size_t)(MED_TILE + 2) * d->max_group * sizeof(float) + 63) / 64) * 64);
#pragma omp for schedule(static)
            for (int i = 0; i < m; i++) {
                const float *row = x + (size_t)ch[i] * (size_t)stride + off;
                const double s = bs_row_dot(row, ref, n);
                xcorr[i] = rr > 0 ? s / rr : 0.0;
                double p = 0;
                if (n_seg > 0) {
                    /* segment s = hops s and s + 1: the first half of the basis on the hops from 0, the
                     * second half on the hops from 1 (rows of a matrix with leading dimension hop) */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n_seg, 2 * nb, hop, 1.0f, row, hop,
                                d->basis, 2 * nb, 0.0f, prod, 2 * nb);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n_seg, 2 * nb, hop, 1.0f, row + hop,
                                hop, d->basis + (size_t)hop * 2 * nb, 2 * nb, 1.0f, prod, 2 * nb);
                    for (int b = 0; b < nb; b++) {
                        double pb = 0;
                        for (int64_t sg = 0; sg < n_seg; sg++) {
                            double re = prod[sg * 2 * nb + b], im = prod[sg * 2 * nb + nb + b];
                            pb += re * re + im * im;
                        }
                        int k = d->k0 + b; /* one-sided: every bin but DC and Nyquist counts twice */
                        p += pb * ((k == 0 || 2 * k == d->nperseg) ? 1.0 : 2.0);
                    }
                    p *= d->psd_scale / ((double)n_seg * nb);
                }
                psd_hf[ch[i]] = (float)p;
            }
        }
        /* the trend: a median filter along depth that shrinks at the shank's ends */
        const int half = prm->n_neighbors / 2;
        double win[1024];
        for (int i = 0; i < m; i++) {
            int lo = i - half < 0 ? 0 : i - half, hi = i + half + 1 > m ? m : i + half + 1;
            if (hi - lo > 1024)
                hi = lo + 1024;
            memcpy(win, xcorr + lo, (size_t)(hi - lo) * sizeof(double));
            trend[i] = median_d(win, hi - lo);
        }
        for (int i = 0; i < m; i++) {
            double coh = xcorr[i] - trend[i];
            int8_t l = BS_CHAN_GOOD;
            if (coh < prm->dead_threshold)
                l = BS_CHAN_DEAD;
            if (psd_hf[ch[i]] > prm->psd_hf_uv2_hz || coh > prm->noisy_threshold)
                l = BS_CHAN_NOISY;
            label[ch[i]] = l;
            coherence[ch[i]] = (float)coh;
        }
        /* out of the brain: the run of low trend that reaches the top of the shank */
        for (int i = m - 1; i >= 0 && trend[i] < prm->outside_threshold + 1.0; i--)
            label[ch[i]] = BS_CHAN_OUT;
        /* most of the shank dead or noisy at once is an event of the chunk (a transient on every
         * channel), not of the channels: the shank abstains in this chunk */
        int n_dn = 0;
        for (int i = 0; i < m; i++)
            n_dn += label[ch[i]] == BS_CHAN_DEAD || label[ch[i]] == BS_CHAN_NOISY;
        if (2 * n_dn > m)
            for (int i = 0; i < m; i++)
                label[ch[i]] = BS_CHAN_ABSTAIN;
    }
    if (owned)
        bs_mem_free(buf);
    return BS_OK;
}

void bs_bad_channels_vote(const int8_t *labels, int n_chunks, int n_chan, int8_t *label)
{
    for (int c = 0; c < n_chan; c++) {
        int cnt[BS_CHAN_N_LABELS] = {0};
        for (int k = 0; k < n_chunks; k++) {
            int l = labels[(size_t)k * n_chan + c];
            if (l >= 0 && l < BS_CHAN_N_LABELS)
                cnt[l]++;
        }
        int best = 0;
        for (int l = 1; l < BS_CHAN_N_LABELS; l++)
            if (cnt[l] > cnt[best])
                best = l;
        label[c] = (int8_t)best;
    }
}

/* ------------------------------------------------------- interpolation --- */

static int dbl_cmp(const void *a, const void *b)
{
    double p = *(const double *)a, q = *(const double *)b;
    return p < q ? -1 : p > q;
}

double bs_bad_interp_sigma_um(const bs_probe *probe)
{
    int C = probe->n_chan;
    double *y = malloc((size_t)C * sizeof *y);
    if (!y)
        return 0;
    memcpy(y, probe->y_um, (size_t)C * sizeof *y);
    qsort(y, (size_t)C, sizeof *y, dbl_cmp);
    int u = 0; /* distinct depths */
    for (int i = 0; i < C; i++)
        if (u == 0 || y[i] != y[u - 1])
            y[u++] = y[i];
    for (int i = 0; i + 1 < u; i++) /* gaps */
        y[i] = y[i + 1] - y[i];
    int ng = u - 1;
    qsort(y, (size_t)(ng > 0 ? ng : 0), sizeof *y, dbl_cmp);
    double best = 0;
    int best_n = 0;
    for (int i = 0; i < ng;) { /* the most common gap, the smaller on ties (runs in increasing order) */
        int j = i;
        while (j < ng && y[j] == y[i])
            j++;
        if (j - i > best_n) {
            best_n = j - i;
            best = y[i];
        }
        i = j;
    }
    free(y);
    return best;
}

void bs_bad_interp_free(bs_bad_interp *ip)
{
    bs_mem_free(ip->bad);
    bs_mem_free(ip->start);
    bs_mem_free(ip->src);
    bs_mem_free(ip->w);
    memset(ip, 0, sizeof *ip);
}

bs_status bs_bad_interp_build(const bs_probe *probe, const uint8_t *interp, const uint8_t *good, double p,
                              bs_bad_interp *ip)
{
    memset(ip, 0, sizeof *ip);
    const int C = probe->n_chan;
    const double thr = 0.005;
    int nb = 0, ng = 0;
    for (int c = 0; c < C; c++) {
        nb += interp[c] != 0;
        ng += good[c] != 0;
    }
    if (nb == 0)
        return BS_OK;
    double sigma = bs_bad_interp_sigma_um(probe);
    if (!(sigma > 0))
        sigma = 1.0;
    ip->bad = bs_mem_alloc("preprocess/bad_interp", (size_t)nb * sizeof(int));
    ip->start = bs_mem_alloc("preprocess/bad_interp", (size_t)(nb + 1) * sizeof(int));
    ip->src = bs_mem_alloc("preprocess/bad_interp", (size_t)nb * (size_t)(ng ? ng : 1) * sizeof(int));
    ip->w = bs_mem_alloc("preprocess/bad_interp", (size_t)nb * (size_t)(ng ? ng : 1) * sizeof(float));
    double *wd = malloc((size_t)(ng ? ng : 1) * sizeof *wd);
    if (!ip->bad || !ip->start || !ip->src || !ip->w || !wd) {
        free(wd);
        bs_bad_interp_free(ip);
        return bs_error(BS_ERR_MEMORY, "bad-channel interpolation: out of memory");
    }
    int q = 0;
    ip->start[0] = 0;
    for (int b = 0; b < C; b++) {
        if (!interp[b])
            continue;
        double sum = 0;
        int j = 0;
        for (int c = 0; c < C; c++) {
            if (!good[c])
                continue;
            double dx = probe->x_um[c] - probe->x_um[b], dy = probe->y_um[c] - probe->y_um[b];
            double w = exp(-pow(sqrt(dx * dx + dy * dy) / sigma, p));
            wd[j++] = w < thr ? 0.0 : w;
            sum += w < thr ? 0.0 : w;
        }
        j = 0;
        for (int c = 0; c < C; c++) {
            if (!good[c])
                continue;
            double w = sum > 0 ? wd[j] / sum : 0.0;
            j++;
            if (w < thr)
                continue;
            ip->src[q] = c;
            ip->w[q] = (float)w;
            q++;
        }
        ip->bad[ip->n_bad++] = b;
        ip->start[ip->n_bad] = q;
    }
    free(wd);
    return BS_OK;
}

void bs_bad_interp_apply(const bs_bad_interp *ip, float *x, int64_t n_t)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < ip->n_bad; i++) {
        float *dst = x + (size_t)ip->bad[i] * (size_t)n_t;
        memset(dst, 0, (size_t)n_t * sizeof *dst);
        for (int q = ip->start[i]; q < ip->start[i + 1]; q++) {
            const float *s = x + (size_t)ip->src[q] * (size_t)n_t;
            const float w = ip->w[q];
#pragma omp simd
            for (int64_t t = 0; t < n_t; t++)
                dst[t] += w * s[t];
        }
    }
}
