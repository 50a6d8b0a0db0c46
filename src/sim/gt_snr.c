/*
 * gt_snr.c - the signal-to-noise ratio of each ground-truth unit, for the
 * scorer's table (compare.h): SpikeInterface's compute_snrs definition
 * (peak_sign "neg", peak_mode "extremum") applied to the ground truth's own
 * templates and recording, so that "units with SNR >= 5" means the same set
 * whatever sorter is scored.
 *
 * Mechanism.
 * 1. Noise per probe channel, µV: the ground-truth folder's recording as
 *    stored (recording.bin through the raw-folder reader, scaled to µV, not
 *    filtered: the generators add spikes to noise without slow content) is cut
 *    into whole chunks of BS_GT_SNR_CHUNK_SAMPLES; BS_GT_SNR_CHUNKS of the
 *    `avail` = T / chunk of them, evenly spaced (chunk k * avail / n, k =
 *    0..n-1; every chunk when fewer, one chunk of all T samples when T is
 *    shorter than a chunk), are read. Per chunk and channel the level is
 *    MAD / 0.6745 (bs_qc_noise_sigma_f); a channel's noise is the mean over
 *    chunks. SpikeInterface draws its chunks at random; these are fixed, so
 *    the scorer's numbers do not change between runs.
 * 2. Per GT unit with id u: the template gt_templates.npy[u] (nt x C float32
 *    µV, C = the file's columns). Its most negative value over samples and
 *    over the columns on the probe is the amplitude, that column's channel
 *    the main channel, and snr = |amplitude| / noise[main channel]. NaN when
 *    the template has no negative value or that noise is 0.
 *
 * Memory, accounted under "compare/snr": one batch reader of one chunk (the
 * raw block and the µV window), one channel's chunk of floats as median
 * work, the per-channel noise, and one template at a time.
 */
#include <math.h>
#include <string.h>

#include "../common/fileio.h"
#include "../io/batch.h"
#include "../io/npy_rows.h"
#include "../io/recording.h"
#include "../mem/mem.h"
#include "../qc/qc.h"
#include "compare.h"

/* Mean over the chosen chunks of each channel's MAD noise, noise[rec->probe.n_chan], µV. */
static bs_status channel_noise(const bs_recording *rec, double *noise)
{
    const int C = rec->probe.n_chan;
    const int64_t T = rec->n_samples;
    int64_t len = T < BS_GT_SNR_CHUNK_SAMPLES ? T : BS_GT_SNR_CHUNK_SAMPLES;
    if (len < 1)
        return bs_error(BS_ERR_INPUT, "ground truth: the recording has no samples, so no SNR");
    int64_t avail = T / len, n = avail < BS_GT_SNR_CHUNKS ? avail : BS_GT_SNR_CHUNKS;
    bs_batch_reader rd = {.fd = -1};
    bs_status st = bs_batch_reader_open(&rd, rec, len, 0, 0);
    float *work = st == BS_OK ? bs_mem_alloc("compare/snr", sizeof *work * (size_t)len) : NULL;
    if (st == BS_OK && !work)
        st = BS_ERR_MEMORY;
    for (int c = 0; c < C; c++)
        noise[c] = 0;
    for (int64_t k = 0; k < n && st == BS_OK; k++) {
        float *x;
        int64_t n_valid;
        st = bs_batch_read(&rd, k * avail / n, &x, &n_valid);
        for (int c = 0; c < C && st == BS_OK; c++)
            noise[c] += bs_qc_noise_sigma_f(x + (size_t)c * (size_t)rd.width, n_valid, work);
    }
    for (int c = 0; c < C; c++)
        noise[c] /= (double)n;
    bs_mem_free(work);
    bs_batch_reader_close(&rd);
    return st;
}

bs_status bs_gt_unit_snr(const char *gt_folder, const bs_sorting *gt, double *snr, int *have)
{
    *have = 0;
    char tpl_path[4200];
    if (bs_path_join(tpl_path, sizeof tpl_path, gt_folder, "gt_templates.npy") != BS_OK || !bs_is_file(tpl_path) ||
        !bs_raw_folder_detect(gt_folder))
        return BS_OK;
    bs_open_options opt;
    memset(&opt, 0, sizeof opt);
    bs_recording rec;
    memset(&rec, 0, sizeof rec);
    bs_npy_rows tf = {.fd = -1};
    float *tpl = NULL;
    double *noise = NULL;
    bs_status st = bs_recording_open(gt_folder, &opt, &rec);
    if (st == BS_OK)
        st = bs_npy_rows_open_any(&tf, gt_folder, "gt_templates.npy");
    int64_t n_tpl = 0, nt = 0;
    if (st == BS_OK) {
        const bs_npy_header *h = &tf.h;
        n_tpl = h->shape[0];
        nt = h->ndim == 3 ? h->shape[1] : 0;
        if (h->dtype != BS_NPY_F32 || h->ndim != 3 || h->fortran_order || nt < 1 || h->shape[2] != rec.n_cols)
            st = bs_error(BS_ERR_INPUT,
                          "%s/gt_templates.npy: expected float32 (units, samples, %d channels) in C order, as the "
                          "recording has %d channels",
                          gt_folder, rec.n_cols, rec.n_cols);
    }
    for (int32_t a = 0; st == BS_OK && a < gt->n_units; a++)
        if (gt->unit_ids[a] >= n_tpl)
            st = bs_error(BS_ERR_INPUT, "%s/gt_templates.npy: %lld templates, but the ground truth has unit %lld",
                          gt_folder, (long long)n_tpl, (long long)gt->unit_ids[a]);
    if (st == BS_OK) {
        noise = bs_mem_alloc("compare/snr", sizeof *noise * (size_t)rec.probe.n_chan);
        tpl = bs_mem_alloc("compare/snr", tf.row_bytes);
        if (!noise || !tpl)
            st = BS_ERR_MEMORY;
    }
    if (st == BS_OK)
        st = channel_noise(&rec, noise);
    for (int32_t a = 0; st == BS_OK && a < gt->n_units; a++) {
        st = bs_npy_rows_read(&tf, gt->unit_ids[a], 1, tpl);
        double amp = 0;
        int main_ch = -1;
        for (int c = 0; st == BS_OK && c < rec.probe.n_chan; c++) {
            const int col = rec.probe.column[c];
            for (int64_t t = 0; t < nt; t++) {
                double v = tpl[t * rec.n_cols + col];
                if (v < amp) {
                    amp = v;
                    main_ch = c;
                }
            }
        }
        snr[a] = main_ch >= 0 && noise[main_ch] > 0 ? -amp / noise[main_ch] : NAN;
    }
    if (st == BS_OK)
        *have = 1;
    bs_mem_free(tpl);
    bs_mem_free(noise);
    bs_npy_rows_close(&tf);
    bs_recording_close(&rec);
    return st;
}
