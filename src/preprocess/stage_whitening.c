/*
 * stage_whitening.c - the stage after `preprocess` (the table: src/pipeline/
 * stages.h): one batch in whiten_stride, spread over the recording and
 * never a flat or saturated one (stage.h: bs_sample_batches), read from the
 * preprocessed recording (mean removal, median reference and high-pass done:
 * stage_preprocess.c); their channel covariance accumulated in double; then the
 * local whitener (whiten.c) over each channel's whiten_neighbors nearest
 * channels of its shank. From here on every batch read through the run
 * context is whitened.
 *
 * Checkpoint (OUT/.stages/whitening/): n_nbr.npy int32 (C,) neighbours per
 * channel, nbr.npy int32 (C, k) their channel ids, w.npy float32 (C, k)
 * the whitening weights; loaded back on --resume under the whitener's tag.
 */
#include <stdio.h>
#include <string.h>

#include "../common/progress.h"
#include "../io/npy.h"
#include "../mem/mem.h"
#include "../pipeline/stage.h"
#include "../pipeline/stages.h"
#include "preprocess.h"

static const char *const files[3] = {"whitening/n_nbr.npy", "whitening/nbr.npy", "whitening/w.npy"};

static bs_status store_whitener(const char *stage_dir, const bs_whitener *wh)
{
    char path[4200];
    int64_t shape1[1] = {wh->n_chan}, shape2[2] = {wh->n_chan, wh->k};
    BS_TRY(bs_stage_file(stage_dir, files[0], path, sizeof path));
    BS_TRY(bs_npy_save(path, BS_NPY_I32, 1, shape1, wh->n_nbr));
    BS_TRY(bs_stage_file(stage_dir, files[1], path, sizeof path));
    BS_TRY(bs_npy_save(path, BS_NPY_I32, 2, shape2, wh->nbr));
    BS_TRY(bs_stage_file(stage_dir, files[2], path, sizeof path));
    return bs_npy_save(path, BS_NPY_F32, 2, shape2, wh->w);
}

static bs_status load_whitener(const char *stage_dir, int n_chan, bs_whitener *wh)
{
    memset(wh, 0, sizeof *wh);
    void *a = NULL, *b = NULL, *w = NULL;
    int64_t d1[1] = {n_chan}, d2[2] = {n_chan, -1};
    bs_status st = bs_stage_load_exact(stage_dir, files[0], "preprocess/whitener", BS_NPY_I32, 1, d1, &a);
    if (st == BS_OK)
        st = bs_stage_load_exact(stage_dir, files[1], "preprocess/whitener", BS_NPY_I32, 2, d2, &b);
    if (st == BS_OK)
        st = bs_stage_load_exact(stage_dir, files[2], "preprocess/whitener", BS_NPY_F32, 2, d2, &w);
    char path[4200];
    bs_npy_header h;
    if (st == BS_OK)
        st = bs_path_join(path, sizeof path, stage_dir, files[2]);
    if (st == BS_OK)
        st = bs_npy_read_header(path, &h);
    if (st != BS_OK) {
        bs_mem_free(a), bs_mem_free(b), bs_mem_free(w);
        return st;
    }
    wh->n_chan = n_chan;
    wh->k = (int)h.shape[1];
    wh->n_nbr = a;
    wh->nbr = b;
    wh->w = w;
    return BS_OK;
}

static void plan(bs_sort_plan *pl, bs_plan_stage *s)
{
    int C = pl->n_chan;
    bs_plan_add(s, "batch reader", pl->shapes.reader);
    bs_plan_add(s, "preprocessing scratch", pl->shapes.scratch);
    if (pl->pre_stream)
        bs_plan_add(s, "the preprocessed recording streamed (cache, raw lane)", pl->pre_stream_bytes);
    bs_plan_add(s, "covariance accumulator", bs_whiten_cov_bytes(C) + (size_t)C * C * sizeof(double));
    bs_plan_add(s, "local whitener and its build",
                pl->shapes.whitener + bs_whitener_build_bytes(C, pl->shapes.whiten_k));
    snprintf(s->strategy, sizeof s->strategy, "1 batch in %d", pl->p.whiten_stride);
    s->reduce = "--batch-seconds";
    bs_plan_add(s, "small buffers", BS_PLAN_SMALL_BYTES);
    bs_plan_stage_total(s);
    bs_plan_disk(s, 3, (double)C * (sizeof(int32_t) + 2.0 * pl->shapes.whiten_k * sizeof(float))); /* files[] */
}

static void use_whitener(bs_run_ctx *c)
{
    c->have_wh = 1;
    c->pp.wh = &c->wh;
}

static bs_status run(bs_run_ctx *c)
{
    int C = c->rec->probe.n_chan;
    bs_whiten_cov acc;
    BS_TRY(bs_whiten_cov_init(&acc, C));
    bs_status st = BS_OK;
    bs_progress pb;
    bs_sample_batches sb;
    st = bs_sample_batches_init(&sb, c, c->p->whiten_stride, "whitening");
    bs_progress_start(&pb, "whitening", "segments", c->p->quiet ? 0 : sb.n_seg);
    for (int64_t b = 0; st == BS_OK;) {
        float *x;
        int64_t n_valid;
        st = bs_sample_batches_next(c, &sb, 0, &b, &x, &n_valid);
        if (st != BS_OK || b < 0)
            break;
        st = bs_whiten_cov_add(&acc, x, c->width, c->halo, c->halo + n_valid);
        bs_progress_update(&pb, sb.seg);
    }
    bs_progress_finish(&pb);
    st = bs_sample_batches_end(c, &sb, st);
    double *cov = st == BS_OK ? bs_mem_alloc("sort/covariance", (size_t)C * C * sizeof(double)) : NULL;
    if (st == BS_OK && !cov)
        st = BS_ERR_MEMORY;
    if (st == BS_OK)
        st = bs_whiten_cov_finalize(&acc, cov);
    if (st == BS_OK)
        st = bs_whitener_build(cov, &c->rec->probe, c->p->whiten_neighbors, BS_WHITEN_DEFAULT_EPS, 1.0, &c->wh);
    if (st == BS_OK)
        use_whitener(c);
    bs_mem_free(cov);
    bs_whiten_cov_free(&acc);
    return st == BS_OK ? store_whitener(c->stage_dir, &c->wh) : st;
}

static bs_status load(bs_run_ctx *c)
{
    BS_TRY(load_whitener(c->stage_dir, c->rec->probe.n_chan, &c->wh));
    use_whitener(c);
    return BS_OK;
}

static const char *const params[] = {"batch", "preprocess", "bad_channels", NULL};

const bs_stage bs_whitening_stage = {
    .name = "whitening", .plan = plan, .run = run, .load = load, .files = files, .n_files = 3, .params = params, .reads_batches = 1};
