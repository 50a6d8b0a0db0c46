/*
 * sort.c - the stage order and batch loops of `boundsort sort` (see sort.h).
 */
#include "sort.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../io/batch.h"
#include "../io/npy.h"
#include "../mem/mem.h"
#include "../preprocess/preprocess.h"

void bs_sort_default_params(bs_sort_params *p)
{
    memset(p, 0, sizeof *p);
    p->highpass_hz = 300.0;
    p->highpass_order = 3;
    p->whiten_neighbors = BS_WHITEN_DEFAULT_NEIGHBORS;
    p->whiten_stride = 10;
    p->basis_stride = 5;
    bs_detect_default_params(&p->detect);
}

/* Everything the batch loops share. */
typedef struct {
    const bs_recording *rec;
    const bs_sort_params *p;
    int64_t nb, halo, width, n_batches;
    bs_batch_reader reader;
    bs_highpass hp;
    bs_whitener wh;
    int have_wh;
    bs_preprocess pp;
    void *scratch; /* preprocessing scratch, allocated once */
    size_t scratch_bytes;
    char stage_dir[4096];
} sort_ctx;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Read batch b and run the preprocessing configured in ctx->pp. */
static bs_status read_preprocessed(sort_ctx *ctx, int64_t b, float **x, int64_t *n_valid)
{
    BS_TRY(bs_batch_read(&ctx->reader, b, x, n_valid));
    return bs_preprocess_batch(&ctx->pp, *x, ctx->rec->probe.n_chan, ctx->width, ctx->scratch, ctx->scratch_bytes,
                               NULL);
}

static void progress(const sort_ctx *ctx, const char *stage, int64_t done, int64_t total, double t0)
{
    if (ctx->p->quiet || total <= 0)
        return;
    if (done != total && done % 10 != 0)
        return;
    double el = now_s() - t0;
    bs_log_info("%-9s %5.1f%%  batch %lld/%lld  %.1f s", stage, 100.0 * (double)done / (double)total,
                (long long)done, (long long)total, el);
}

/* Stage 1: channel covariance of high-passed data -> local whitening. */
static bs_status stage_whitening(sort_ctx *ctx)
{
    int C = ctx->rec->probe.n_chan;
    bs_whiten_cov acc;
    BS_TRY(bs_whiten_cov_init(&acc, C));
    bs_status st = BS_OK;
    double t0 = now_s();
    for (int64_t b = 0; b < ctx->n_batches && st == BS_OK; b += ctx->p->whiten_stride) {
        float *x;
        int64_t n_valid;
        st = read_preprocessed(ctx, b, &x, &n_valid);
        if (st == BS_OK)
            st = bs_whiten_cov_add(&acc, x, ctx->width, ctx->halo, ctx->halo + n_valid);
        progress(ctx, "whitening", b + 1, ctx->n_batches, t0);
    }
    double *cov = st == BS_OK ? bs_mem_alloc("sort/covariance", (size_t)C * C * sizeof(double)) : NULL;
    if (st == BS_OK && !cov)
        st = BS_ERR_MEMORY;
    if (st == BS_OK)
        st = bs_whiten_cov_finalize(&acc, cov);
    if (st == BS_OK)
        st = bs_whitener_build(cov, &ctx->rec->probe, ctx->p->whiten_neighbors, BS_WHITEN_DEFAULT_EPS, 1.0,
                               &ctx->wh);
    if (st == BS_OK) {
        ctx->have_wh = 1;
        ctx->pp.wh = &ctx->wh;
    }
    bs_mem_free(cov);
    bs_whiten_cov_free(&acc);
    return st;
}

/* Stage 2: temporal bases from isolated peaks of the whitened data. */
static bs_status stage_basis(sort_ctx *ctx, bs_temporal_basis *basis)
{
    bs_snippet_set snips;
    BS_TRY(bs_snippets_init(&snips, &ctx->p->detect));
    bs_status st = BS_OK;
    double t0 = now_s();
    for (int64_t b = 0; b < ctx->n_batches && st == BS_OK && snips.n < snips.cap; b += ctx->p->basis_stride) {
        float *x;
        int64_t n_valid;
        st = read_preprocessed(ctx, b, &x, &n_valid);
        if (st == BS_OK)
            bs_snippets_collect(&snips, &ctx->p->detect, x, ctx->rec->probe.n_chan, ctx->width, ctx->halo, n_valid);
        progress(ctx, "shapes", b + 1, ctx->n_batches, t0);
    }
    if (st == BS_OK)
        st = bs_basis_learn(&snips, &ctx->p->detect, basis);
    bs_snippets_free(&snips);
    return st;
}

/* Streamed per-spike outputs of detection, in .stages/detect/. */
typedef struct {
    bs_npy_writer times, pos, xy, score, features;
    int open;
} detect_files;

static bs_status detect_files_open(detect_files *f, const char *dir, int n_chans, int n_pcs)
{
    char path[4200];
    int64_t two[1] = {2}, feat[2] = {n_chans, n_pcs};
    memset(f, 0, sizeof *f);
    BS_TRY(bs_path_join(path, sizeof path, dir, "spike_times.npy"));
    BS_TRY(bs_npy_writer_open(&f->times, path, BS_NPY_I64, 1, NULL));
    f->open = 1;
    BS_TRY(bs_path_join(path, sizeof path, dir, "spike_pos.npy"));
    BS_TRY(bs_npy_writer_open(&f->pos, path, BS_NPY_I32, 1, NULL));
    f->open = 2;
    BS_TRY(bs_path_join(path, sizeof path, dir, "spike_xy.npy"));
    BS_TRY(bs_npy_writer_open(&f->xy, path, BS_NPY_F32, 2, two));
    f->open = 3;
    BS_TRY(bs_path_join(path, sizeof path, dir, "spike_score.npy"));
    BS_TRY(bs_npy_writer_open(&f->score, path, BS_NPY_F32, 1, NULL));
    f->open = 4;
    BS_TRY(bs_path_join(path, sizeof path, dir, "spike_features.npy"));
    BS_TRY(bs_npy_writer_open(&f->features, path, BS_NPY_F32, 3, feat));
    f->open = 5;
    return BS_OK;
}

static void detect_files_abort(detect_files *f)
{
    bs_npy_writer *w[5] = {&f->times, &f->pos, &f->xy, &f->score, &f->features};
    for (int i = 0; i < f->open; i++)
        bs_npy_writer_abort(w[i]);
    f->open = 0;
}

static bs_status detect_files_close(detect_files *f)
{
    bs_npy_writer *w[5] = {&f->times, &f->pos, &f->xy, &f->score, &f->features};
    bs_status st = BS_OK;
    for (int i = 0; i < 5; i++) {
        if (st == BS_OK)
            st = bs_npy_writer_close(w[i]);
        else
            bs_npy_writer_abort(w[i]);
    }
    f->open = 0;
    return st;
}

static bs_status detect_files_append(detect_files *f, const bs_detect_output *o)
{
    enum { BLOCK = 4096 };
    int64_t t[BLOCK];
    int32_t pos[BLOCK];
    float xy[2 * BLOCK], score[BLOCK];
    for (int64_t s0 = 0; s0 < o->n; s0 += BLOCK) {
        int64_t n = o->n - s0 < BLOCK ? o->n - s0 : BLOCK;
        for (int64_t i = 0; i < n; i++) {
            const bs_detected_spike *sp = &o->spikes[s0 + i];
            t[i] = sp->t;
            pos[i] = sp->pos;
            xy[2 * i] = sp->x_um;
            xy[2 * i + 1] = sp->y_um;
            score[i] = sp->score;
        }
        BS_TRY(bs_npy_writer_append(&f->times, t, n));
        BS_TRY(bs_npy_writer_append(&f->pos, pos, n));
        BS_TRY(bs_npy_writer_append(&f->xy, xy, n));
        BS_TRY(bs_npy_writer_append(&f->score, score, n));
        BS_TRY(bs_npy_writer_append(&f->features, o->features + (size_t)s0 * o->feat_len, n));
    }
    return BS_OK;
}

/* Stage 3: universal detection over every batch, streamed to disk. */
static bs_status stage_detect(sort_ctx *ctx, const bs_temporal_basis *basis, const bs_detect_grid *grid,
                              int64_t *n_spikes)
{
    char dir[4200];
    BS_TRY(bs_path_join(dir, sizeof dir, ctx->stage_dir, "detect"));
    BS_TRY(bs_mkdir_p(dir));
    detect_files files;
    bs_status st = detect_files_open(&files, dir, grid->n_chans, basis->n_pcs);
    bs_detect_output out;
    bs_detect_output_init(&out, grid->n_chans, basis->n_pcs);
    double t0 = now_s();
    *n_spikes = 0;
    for (int64_t b = 0; b < ctx->n_batches && st == BS_OK; b++) {
        float *x;
        int64_t n_valid;
        st = read_preprocessed(ctx, b, &x, &n_valid);
        bs_detect_output_clear(&out);
        if (st == BS_OK)
            st = bs_detect_batch(&ctx->p->detect, basis, grid, &ctx->rec->probe, x, ctx->width, ctx->halo, n_valid,
                                 b * ctx->nb, &out);
        if (st == BS_OK)
            st = detect_files_append(&files, &out);
        *n_spikes += out.n;
        progress(ctx, "detect", b + 1, ctx->n_batches, t0);
    }
    bs_detect_output_free(&out);
    if (st == BS_OK)
        return detect_files_close(&files);
    detect_files_abort(&files);
    return st;
}

bs_status bs_sort_run(const bs_recording *rec, const bs_sort_params *p)
{
    if (rec->n_samples <= 0)
        return bs_error(BS_ERR_INPUT, "%s: the recording is empty (0 samples)", rec->data_path);
    if (rec->probe.n_chan < 2)
        return bs_error(BS_ERR_INPUT, "%s: sorting needs at least 2 channels, the probe has %d", rec->data_path,
                        rec->probe.n_chan);
    sort_ctx ctx = {0};
    ctx.reader.fd = -1; /* closing a reader that was never opened is a no-op */
    ctx.rec = rec;
    ctx.p = p;
    ctx.nb = p->batch_samples > 0 ? p->batch_samples : (int64_t)llround(2.0 * rec->fs_hz);
    ctx.halo = p->halo_samples > 0 ? p->halo_samples
                                   : (int64_t)ceil(BS_PREPROCESS_HALO_DEFAULT * rec->fs_hz / 30000.0);
    if (ctx.halo < p->detect.nt)
        ctx.halo = p->detect.nt;
    ctx.width = ctx.nb + 2 * ctx.halo;
    ctx.n_batches = bs_batch_count(rec->n_samples, ctx.nb);
    if (rec->n_samples < 2 * (int64_t)p->detect.nt)
        return bs_error(BS_ERR_INPUT, "%s: the recording has %lld samples, too short to sort (at least %d needed)",
                        rec->data_path, (long long)rec->n_samples, 2 * p->detect.nt);
    if (p->highpass_hz >= rec->fs_hz / 2)
        return bs_error(BS_ERR_INPUT, "high-pass cutoff %.1f Hz is not below the Nyquist frequency %.1f Hz",
                        p->highpass_hz, rec->fs_hz / 2);
    BS_TRY(bs_mkdir_p(p->out_dir));
    BS_TRY(bs_path_join(ctx.stage_dir, sizeof ctx.stage_dir, p->out_dir, ".stages"));
    BS_TRY(bs_mkdir_p(ctx.stage_dir));
    if (p->threads > 0)
        omp_set_num_threads(p->threads);

    bs_status st = bs_highpass_design(p->highpass_order, p->highpass_hz, rec->fs_hz, &ctx.hp);
    ctx.pp = (bs_preprocess){.remove_mean = 1, .car = 1, .hp = &ctx.hp};
    bs_preprocess with_wh = ctx.pp;
    with_wh.wh = &ctx.wh; /* size for the whitening step too; set for real after stage 1 */
    if (st == BS_OK)
        st = bs_batch_reader_open(&ctx.reader, rec, ctx.nb, ctx.halo, 0);
    if (st == BS_OK) {
        ctx.scratch_bytes =
            bs_preprocess_scratch_bytes(&with_wh, rec->probe.n_chan, ctx.width, omp_get_max_threads());
        ctx.scratch = bs_mem_alloc("sort/preprocess-scratch", ctx.scratch_bytes ? ctx.scratch_bytes : 1);
        if (!ctx.scratch)
            st = BS_ERR_MEMORY;
    }
    double t = now_s();
    if (st == BS_OK)
        st = stage_whitening(&ctx);
    bs_temporal_basis basis = {0};
    bs_detect_grid grid = {0};
    if (st == BS_OK)
        st = stage_basis(&ctx, &basis);
    if (st == BS_OK)
        st = bs_grid_build(&rec->probe, &p->detect, &grid);
    int64_t n_detected = 0;
    if (st == BS_OK)
        st = stage_detect(&ctx, &basis, &grid, &n_detected);
    if (st == BS_OK && !p->quiet)
        bs_log_info("detected %lld spikes in %.1f s", (long long)n_detected, now_s() - t);
    bs_grid_free(&grid);
    bs_basis_free(&basis);
    if (ctx.have_wh)
        bs_whitener_free(&ctx.wh);
    bs_mem_free(ctx.scratch);
    bs_batch_reader_close(&ctx.reader);
    return st;
}
