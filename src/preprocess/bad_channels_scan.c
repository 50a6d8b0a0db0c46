/*
 * bad_channels_scan.c - bad-channel detection over a whole recording: which
 * chunks are read, how each is prepared, and the vote (bad_channels.h).
 *
 * The recording is cut into chunks of chunk_s (the batch reader's batches of
 * that length, read with a halo on each side); when there are more than
 * n_chunks, n_chunks of them are taken evenly spread (chunk
 * floor((i + 0.5) * n / n_chunks) for i < n_chunks), otherwise all of them,
 * less a last one shorter than half a chunk. A chunk whose railed fraction
 * (batch.h: flat or saturated samples) is over max_railed_fraction is passed
 * over: a flat stretch would make every channel look dead or out of the
 * brain. So is a chunk holding a broadband artifact (art given: the sort's
 * artifact detector, preprocess.h, on a median-referenced copy of the
 * high-passed chunk in units of each channel's noise scale): its transient is on most channels and would make
 * them all noisy, or those it misses out of the brain. Each other window has its channels'
 * means removed, the ADC phase shift (if given) and a zero-phase 5th-order
 * Butterworth high-pass at highpass_hz (SpikeInterface's highpass_filter
 * defaults) before the chunk is labelled on its own samples. The choice
 * depends on the recording's length alone, so a sort and `info
 * --detect-bad-channels` see the same chunks.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../io/batch.h"
#include "../mem/mem.h"
#include "bad_channels.h"
#include "preprocess.h"

#define SCAN_HP_ORDER 5

static int64_t chunk_samples(const bs_recording *rec, const bs_bad_channel_params *prm)
{
    int64_t n = (int64_t)(prm->chunk_s * rec->fs_hz + 0.5);
    if (n > rec->n_samples)
        n = rec->n_samples;
    return n < 1 ? 1 : n;
}

/* The chunks read: their batch indices (n_used of them). */
static int64_t pick_chunks(const bs_recording *rec, const bs_bad_channel_params *prm, int64_t *idx)
{
    int64_t nb = chunk_samples(rec, prm), n = bs_batch_count(rec->n_samples, nb);
    if (n > 1 && rec->n_samples - (n - 1) * nb < nb / 2)
        n--; /* a last chunk under half the length */
    int64_t m = n < prm->n_chunks ? n : prm->n_chunks;
    for (int64_t i = 0; idx && i < m; i++)
        idx[i] = n <= prm->n_chunks ? i : (int64_t)(((double)i + 0.5) * (double)n / (double)prm->n_chunks);
    return m;
}

size_t bs_bad_scan_bytes(const bs_recording *rec, const bs_bad_channel_params *prm, int64_t halo,
                         const bs_artifact_params *art, int n_threads)
{
    const int C = rec->probe.n_chan;
    int64_t nb = chunk_samples(rec, prm), width = nb + 2 * halo, m = pick_chunks(rec, prm, NULL);
    bs_highpass hp;
    if (bs_highpass_design(SCAN_HP_ORDER, prm->highpass_hz, rec->fs_hz, &hp) != BS_OK)
        return 0;
    bs_preprocess pp = {.remove_mean = 1, .phase_shift = rec->probe.adc_shift, .hp = &hp};
    bs_bad_detector shape = {.n_chan = C, .max_group = C, .prm = *prm};
    shape.nperseg = (int)(prm->welch_ms * rec->fs_hz / 1000.0);
    shape.nperseg -= shape.nperseg & 1;
    shape.nperseg = shape.nperseg < 8 ? 8 : shape.nperseg;
    shape.n_bins = shape.nperseg / 2 + 1; /* at most */
    return bs_batch_reader_bytes_ex(C, rec->n_cols, rec->dtype, nb, halo, bs_batch_ahead_block(rec, nb, halo)) +
           rec->source_bytes +
           bs_preprocess_scratch_bytes(&pp, C, width, n_threads) + bs_bad_detector_bytes(C, rec->fs_hz, prm) +
           bs_bad_chunk_scratch_bytes(&shape, nb, n_threads) + (size_t)m * (size_t)C * (1 + 3 * sizeof(float)) +
           (size_t)m * 3 * sizeof(float) +
           (art ? (size_t)width * sizeof(int32_t) + (size_t)C * sizeof(float) +
                      (size_t)C * (size_t)width * sizeof(float) + bs_car_scratch_bytes(C, width, n_threads) +
                      (size_t)bs_artifact_max_periods(art, rec->fs_hz, width) * sizeof(bs_artifact_period) +
                      (size_t)(n_threads > 0 ? n_threads : 1) * (size_t)(nb / 8 + 1) * sizeof(float)
                : 0);
}

static int flt_cmp(const void *a, const void *b)
{
    float p = *(const float *)a, q = *(const float *)b;
    return p < q ? -1 : p > q;
}

bs_status bs_bad_channels_scan(const bs_recording *rec, const bs_bad_channel_params *prm, const float *phase_shift,
                               int64_t halo, double max_railed_fraction, const bs_artifact_params *art,
                               int8_t *label, float *coherence, float *psd_hf, float *rms_uv, int *n_chunks)
{
    const int C = rec->probe.n_chan;
    int64_t nb = chunk_samples(rec, prm), m = pick_chunks(rec, prm, NULL);
    if (m < 1)
        return bs_error(BS_ERR_INPUT, "%s: the recording is empty: no chunk to find bad channels in", rec->data_path);
    bs_highpass hp;
    BS_TRY(bs_highpass_design(SCAN_HP_ORDER, prm->highpass_hz, rec->fs_hz, &hp));
    if (nb + 2 * halo <= hp.padlen)
        halo = hp.padlen;
    bs_preprocess pp = {.remove_mean = 1, .phase_shift = phase_shift, .hp = &hp};
    bs_batch_reader rd;
    memset(&rd, 0, sizeof rd);
    rd.fd = -1;
    bs_bad_detector det;
    memset(&det, 0, sizeof det);
    int64_t *idx = bs_mem_alloc("preprocess/bad_scan", (size_t)m * sizeof *idx);
    int8_t *lab = bs_mem_alloc("preprocess/bad_scan", (size_t)m * (size_t)C);
    float *coh = bs_mem_alloc("preprocess/bad_scan", (size_t)m * (size_t)C * sizeof(float));
    float *psd = bs_mem_alloc("preprocess/bad_scan", (size_t)m * (size_t)C * sizeof(float));
    float *col = bs_mem_alloc("preprocess/bad_scan", (size_t)m * 3 * sizeof(float));
    float *rms = bs_mem_alloc("preprocess/bad_scan", (size_t)m * (size_t)C * sizeof(float));
    const int64_t width = nb + 2 * halo;
    const int max_art = art ? bs_artifact_max_periods(art, rec->fs_hz, width) : 0;
    int32_t *art_count = art ? bs_mem_alloc("preprocess/bad_scan", (size_t)width * sizeof(int32_t)) : NULL;
    float *art_scale = art ? bs_mem_alloc("preprocess/bad_scan", (size_t)C * sizeof(float)) : NULL;
    bs_artifact_period *periods = art ? bs_mem_alloc("preprocess/bad_scan", (size_t)(max_art > 0 ? max_art : 1) *
                                                                                  sizeof(bs_artifact_period))
                                      : NULL;
    float *ref_copy = art ? bs_mem_alloc("preprocess/bad_scan", (size_t)C * (size_t)width * sizeof(float)) : NULL;
    bs_status st = idx && lab && coh && psd && col && rms && (!art || (art_count && art_scale && periods && ref_copy))
                       ? BS_OK
                       : BS_ERR_MEMORY;
    if (st == BS_OK)
        st = bs_bad_detector_init(&rec->probe, rec->fs_hz, prm, &det);
    if (st == BS_OK)
        st = bs_batch_reader_open(&rd, rec, nb, halo, bs_batch_ahead_block(rec, nb, halo));
    if (st == BS_OK)
        pick_chunks(rec, prm, idx);
    int64_t used = 0; /* chunks labelled: flat or saturated ones say nothing about the channels */
    for (int64_t k = 0; st == BS_OK && k < m; k++) {
        float *x;
        int64_t n_valid;
        st = bs_batch_read(&rd, idx[k], &x, &n_valid);
        if (k + 1 < m) /* the next chunk from the disk while this one is worked on (batch.h) */
            bs_batch_prefetch(&rd, idx[k + 1]);
        if (st != BS_OK || bs_batch_railed_fraction(x, C, rd.width, halo, halo + n_valid) > max_railed_fraction)
            continue;
        st = bs_preprocess_batch(&pp, x, C, rd.width, NULL, 0, NULL);
        if (st == BS_OK && art) { /* a broadband artifact in the chunk: passed over as well. The check runs on
                                     a median-referenced copy, as the sort's passes see the data */
            int n_art = 0;
            memcpy(ref_copy, x, (size_t)C * (size_t)rd.width * sizeof(float));
            st = bs_car(ref_copy, C, rd.width, 0, 1, NULL, 0);
            if (st == BS_OK)
                st = bs_noise_inv_scales(ref_copy, C, rd.width, halo, n_valid, 8, "preprocess/bad_scan", art_scale);
            if (st == BS_OK)
                st = bs_artifact_blank(art, rec->fs_hz, ref_copy, C, rd.width, art_scale, art_count, periods, max_art,
                                       &n_art);
            if (st == BS_OK && n_art > 0)
                continue;
        }
        float *rms_k = rms + (size_t)used * C;
        const int64_t w = rd.width;
#pragma omp parallel for schedule(static) if (st == BS_OK)
        for (int c = 0; c < C; c++) { /* each channel's RMS in the chunk (mean removed) */
            const float *row = x + (size_t)c * (size_t)w + halo;
            const double mu = bs_row_sum(row, n_valid) / (double)n_valid;
            rms_k[c] = (float)sqrt(bs_row_dev2(row, n_valid, mu) / (double)n_valid);
        }
        if (st == BS_OK)
            st = bs_bad_channels_chunk(&det, x, rd.width, halo, n_valid, NULL, 0, lab + (size_t)used * C,
                                       coh + (size_t)used * C, psd + (size_t)used * C);
        used++;
    }
    m = used;
    if (st == BS_OK && m == 0) { /* every chunk flat or saturated: nothing to go on, every channel good */
        memset(label, 0, (size_t)C);
        memset(coherence, 0, (size_t)C * sizeof(float));
        memset(psd_hf, 0, (size_t)C * sizeof(float));
        if (rms_uv)
            memset(rms_uv, 0, (size_t)C * sizeof(float));
        if (n_chunks)
            *n_chunks = 0;
    } else if (st == BS_OK) {
        bs_bad_channels_vote(lab, (int)m, C, label);
        for (int c = 0; c < C; c++) { /* medians over the chunks (the lower middle value for an even count) */
            for (int64_t k = 0; k < m; k++) {
                col[k] = coh[(size_t)k * C + c];
                col[m + k] = psd[(size_t)k * C + c];
                col[2 * m + k] = rms[(size_t)k * C + c];
            }
            for (int q = 0; q < 3; q++)
                qsort(col + q * m, (size_t)m, sizeof *col, flt_cmp);
            coherence[c] = col[(m - 1) / 2];
            psd_hf[c] = col[m + (m - 1) / 2];
            if (rms_uv)
                rms_uv[c] = col[2 * m + (m - 1) / 2];
        }
        if (n_chunks)
            *n_chunks = (int)m;
    }
    bs_batch_reader_close(&rd);
    bs_bad_detector_free(&det);
    bs_mem_free(idx);
    bs_mem_free(lab);
    bs_mem_free(coh);
    bs_mem_free(psd);
    bs_mem_free(col);
    bs_mem_free(rms);
    bs_mem_free(art_count);
    bs_mem_free(art_scale);
    bs_mem_free(periods);
    bs_mem_free(ref_copy);
    return st;
}
