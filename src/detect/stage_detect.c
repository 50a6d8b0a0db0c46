/*
 * stage_detect.c - stages 2 (shapes, "basis") and 3 (detect) of `boundsort
 * sort` (the table: src/pipeline/stages.h).
 *
 * basis: one batch in basis_stride, spread over the recording and never a
 *   flat or saturated one (stage.h: bs_sample_batches), preprocessed and
 *   whitened, gives its
 *   isolated single-channel peaks (snippets, up to max_snippets); their
 *   temporal PCs and k-means prototype shapes (basis.c) are the feature
 *   basis and the universal templates. Checkpoint (.stages/basis/):
 *   wpca.npy float32 (n_pcs, nt), wtemp.npy float32 (n_shapes, nt).
 * detect: every batch, universal-template detection on the grid of
 *   positions (universal.c, grid.c); each batch's spikes stream to
 *   .stages/detect/ in batch order: spike_times.npy int64 (samples),
 *   spike_pos.npy int32 (grid position), spike_xy.npy float32 (n, 2) µm,
 *   spike_score.npy float32, spike_features.npy float32 (n, grid channels,
 *   n_pcs). These files are the checkpoint; on --resume only their row
 *   count is read. With --device cuda the filtering and scoring run on the
 *   GPU (src/gpu/gpu.h), with the same detections.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../common/progress.h"
#include "../io/npy.h"
#include "../mem/mem.h"
#include "../pipeline/stage.h"
#include "../pipeline/stage_io.h"
#include "../gpu/gpu.h"
#include "../pipeline/stages.h"
#include "detect.h"

/* ------------------------------------------------------------ basis */

static const char *const basis_files[2] = {"basis/wpca.npy", "basis/wtemp.npy"};

static void basis_plan(bs_sort_plan *pl, bs_plan_stage *s)
{
    const bs_detect_params *d = &pl->p.detect;
    bs_plan_add(s, "batch reader + preprocessing", pl->resident);
    bs_plan_add(s, "snippets", (size_t)d->max_snippets * d->nt * sizeof(float));
    bs_plan_add(s, "k-means and PCA work",
                (size_t)d->max_snippets * (sizeof(double) + sizeof(int)) + (size_t)d->nt * d->nt * sizeof(double) +
                    BS_PLAN_SMALL_BYTES);
    snprintf(s->strategy, sizeof s->strategy, "up to %d snippets", d->max_snippets);
    s->reduce = "--batch-seconds";
    bs_plan_add(s, "small buffers", BS_PLAN_SMALL_BYTES);
    bs_plan_stage_total(s);
    bs_plan_disk(s, 2, (double)(d->n_pcs + d->n_shapes) * d->nt * sizeof(float)); /* basis_files */
}

static bs_status basis_store(const char *stage_dir, const bs_temporal_basis *b)
{
    char path[4200];
    int64_t s1[2] = {b->n_pcs, b->nt}, s2[2] = {b->n_shapes, b->nt};
    BS_TRY(bs_stage_file(stage_dir, basis_files[0], path, sizeof path));
    BS_TRY(bs_npy_save(path, BS_NPY_F32, 2, s1, b->wpca));
    BS_TRY(bs_stage_file(stage_dir, basis_files[1], path, sizeof path));
    return bs_npy_save(path, BS_NPY_F32, 2, s2, b->wtemp);
}

static bs_status basis_load(bs_run_ctx *c)
{
    const bs_detect_params *p = &c->p->detect;
    bs_temporal_basis *b = &c->basis;
    memset(b, 0, sizeof *b);
    void *pc = NULL, *tp = NULL;
    int64_t s1[2] = {p->n_pcs, p->nt}, s2[2] = {p->n_shapes, p->nt};
    bs_status st = bs_stage_load_exact(c->stage_dir, basis_files[0], "detect/basis", BS_NPY_F32, 2, s1, &pc);
    if (st == BS_OK)
        st = bs_stage_load_exact(c->stage_dir, basis_files[1], "detect/basis", BS_NPY_F32, 2, s2, &tp);
    if (st != BS_OK) {
        bs_mem_free(pc), bs_mem_free(tp);
        return st;
    }
    b->nt = p->nt;
    b->nt_before = p->nt_before;
    b->n_pcs = p->n_pcs;
    b->n_shapes = p->n_shapes;
    b->wpca = pc;
    b->wtemp = tp;
    return BS_OK;
}

/* Temporal bases from isolated peaks of the whitened data. */
static bs_status basis_run(bs_run_ctx *c)
{
    bs_snippet_set snips;
    BS_TRY(bs_snippets_init(&snips, &c->p->detect));
    bs_status st = BS_OK;
    bs_progress pb;
    bs_sample_batches sb;
    st = bs_sample_batches_init(&sb, c, c->p->basis_stride, "shapes");
    bs_progress_start(&pb, "shapes", "segments", c->p->quiet ? 0 : sb.n_seg);
    for (int64_t b = 0; st == BS_OK && snips.n < snips.cap;) {
        float *x;
        int64_t n_valid;
        /* a short or quiet recording: more batches than the spread sample (stage.h) */
        st = bs_sample_batches_next(c, &sb, snips.n < c->p->detect.min_sample_snippets, &b, &x, &n_valid);
        if (st != BS_OK || b < 0)
            break;
        bs_snippets_collect(&snips, &c->p->detect, x, c->rec->probe.n_chan, c->width, c->halo, n_valid);
        bs_progress_update(&pb, sb.seg);
    }
    bs_progress_finish(&pb);
    st = bs_sample_batches_end(c, &sb, st);
    if (st == BS_OK)
        st = bs_basis_learn(&snips, &c->p->detect, &c->basis);
    bs_snippets_free(&snips);
    return st == BS_OK ? basis_store(c->stage_dir, &c->basis) : st;
}

static const char *const basis_params[] = {"batch", "preprocess", "bad_channels", "drift", "detect", NULL};

const bs_stage bs_basis_stage = {.name = "basis", .plan = basis_plan, .run = basis_run, .load = basis_load,
    .files = basis_files, .n_files = 2, .params = basis_params, .reads_batches = 1};

/* ------------------------------------------------------------ detect */

/* Streamed per-spike outputs of detection, in .stages/detect/. */
enum { DET_TIMES, DET_POS, DET_XY, DET_SCORE, DET_FEATURES, DET_N };
/* Checkpoint files: the streamed spike files and the artifact periods. */
static const char *const detect_ckpt_files[DET_N + 1] = {
    "detect/spike_times.npy", "detect/spike_pos.npy", "detect/spike_xy.npy", "detect/spike_score.npy",
    "detect/spike_features.npy", ("detect/" BS_ARTIFACTS_TSV)};

/* The artifact periods blanked in the batches' own samples (stage.h: a lane's art),
 * as rows of BS_ARTIFACTS_TSV in recording samples; a period that runs on into
 * the next batch is merged with its continuation there. */
typedef struct {
    bs_atomic_file f;
    int open;
    int pending;             /* a period waits for its end */
    int64_t t0, t1;          /* its samples [t0, t1) */
    int n_chan;
    int64_t blanked;         /* samples of the periods written */
} artifact_writer;

static bs_status artifact_flush(artifact_writer *w, double fs_hz)
{
    if (!w->pending)
        return BS_OK;
    w->pending = 0;
    w->blanked += w->t1 - w->t0;
    if (fprintf(w->f.fp, "%lld\t%lld\t%.6f\t%.6f\t%d\n", (long long)w->t0, (long long)w->t1, (double)w->t0 / fs_hz,
                (double)w->t1 / fs_hz, w->n_chan) < 0)
        return bs_error(BS_ERR_IO, "%s: write failed", w->f.path);
    return BS_OK;
}

/* The periods of batch b, read through lane rd. */
static bs_status artifact_add(artifact_writer *w, const bs_run_ctx *c, const bs_read_lane *rd, int64_t b,
                              int64_t n_valid)
{
    for (int i = 0; i < rd->art_n; i++) {
        int64_t s = rd->art[i].t0 > c->halo ? rd->art[i].t0 : c->halo;
        int64_t e = rd->art[i].t1 < c->halo + n_valid ? rd->art[i].t1 : c->halo + n_valid;
        if (s >= e)
            continue; /* in the halo only: the neighbouring batch owns it */
        int64_t t0 = b * c->nb + s - c->halo, t1 = b * c->nb + e - c->halo;
        if (w->pending && t0 <= w->t1) {
            w->t1 = t1 > w->t1 ? t1 : w->t1;
            w->n_chan = rd->art[i].n_chan > w->n_chan ? rd->art[i].n_chan : w->n_chan;
            continue;
        }
        BS_TRY(artifact_flush(w, c->rec->fs_hz));
        *w = (artifact_writer){.f = w->f, .open = w->open, .pending = 1, .t0 = t0, .t1 = t1,
                               .n_chan = rd->art[i].n_chan, .blanked = w->blanked};
    }
    return BS_OK;
}

/* Rows a lane's list holds (stage detect with several lanes): detect.lane_spikes,
 * or four times a batch's expected detections, at least 8192; a batch with
 * more is detected again, streamed, on the writer's turn. */
static int64_t lane_cap(const bs_sort_plan *pl)
{
    if (pl->p.detect.lane_spikes > 0)
        return pl->p.detect.lane_spikes;
    int64_t e = pl->n_batches > 0 ? 4 * (pl->n_detected / pl->n_batches + 1) : 0;
    return e > 8192 ? e : 8192;
}

/* No buffer follows the data: the spikes stream to the files in parts of
 * bounded lists (detect.h), whatever a batch holds. With several lanes
 * (detect_run) each holds one batch's spikes up to lane_cap. */
static void detect_plan(bs_sort_plan *pl, bs_plan_stage *s)
{
    const bs_detect_params *d = &pl->p.detect;
    int gpu = pl->p.device >= 0;
    size_t scratch = bs_detect_scratch_bytes(pl->n_chan, d, pl->n_threads);
    size_t lists = bs_detect_batch_bytes(d, pl->shapes.grid_pos, pl->shapes.grid_chans, pl->n_threads, pl->width, gpu);
    size_t gpu1 = gpu ? bs_gpu_detector_bytes(pl->n_chan, pl->width, d->n_shapes, pl->nt, pl->shapes.grid_pos,
                                              pl->shapes.grid_chans, d->n_sizes)
                      : 0;
    /* a lane: its reading, one thread's scratch and lists, and a batch's spikes */
    size_t lane = pl->read_ahead + bs_detect_scratch_bytes(pl->n_chan, d, 1) +
                  bs_detect_batch_bytes(d, pl->shapes.grid_pos, pl->shapes.grid_chans, 1, pl->width, gpu) +
                  (size_t)lane_cap(pl) * (sizeof(bs_detected_spike) + (size_t)pl->feat_len * sizeof(float));
    size_t base = pl->resident + pl->shapes.grid + scratch + lists + 2 * BS_PLAN_SMALL_BYTES;
    int lanes = s->lanes = bs_plan_lanes(pl, base, lane, 0, gpu1);
    bs_plan_add(s, "batch reader + preprocessing", pl->resident);
    bs_plan_add(s, "detection grid", pl->shapes.grid);
    bs_plan_add(s, "detection scratch", scratch);
    bs_plan_add(s, "candidate and spike lists (bounded, any data)", lists);
    if (lanes > 1)
        bs_plan_add(s, "lanes: a batch read, its scratch and lists, and its spikes (bounded) on each",
                    (size_t)lanes * lane);
    bs_plan_add(s, "stage files", 2 * BS_PLAN_SMALL_BYTES);
    if (lanes > 1)
        snprintf(s->strategy, sizeof s->strategy, "spikes streamed to disk, %d batches at once", lanes);
    else
        snprintf(s->strategy, sizeof s->strategy, "spikes streamed to disk");
    s->reduce = "--threads (lists per thread)";
    bs_plan_stage_total(s);
    if (lanes > 1) /* the lanes are the budget's choice: one batch at a time needs none */
        s->min_peak = s->sure_min = s->peak - (size_t)lanes * lane;
    else
        bs_plan_read_ahead(pl, s, 0);
    /* detect_ckpt_files: time, position, x/y, score and features of every detected spike; the artifact
       periods (one row per 2 ms at most: small next to the spikes) */
    bs_plan_disk(s, DET_N + 1, (double)pl->n_detected * (sizeof(int64_t) + sizeof(int32_t) + 3 * sizeof(float) +
                                                      (double)pl->feat_len * sizeof(float)));
    if (gpu) /* the GPU detectors (src/gpu/gpu.h), one per lane: no assumption enters them */
        s->gpu = s->gpu_sure = (size_t)lanes * gpu1;
}

/* The sink of bs_detect_batch_on: one part of a batch's spikes to the files. */
static bs_status detect_files_append(void *ctx, const bs_detect_output *o)
{
    bs_npy_set *f = ctx;
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
        BS_TRY(bs_npy_writer_append(&f->w[DET_TIMES], t, n));
        BS_TRY(bs_npy_writer_append(&f->w[DET_POS], pos, n));
        BS_TRY(bs_npy_writer_append(&f->w[DET_XY], xy, n));
        BS_TRY(bs_npy_writer_append(&f->w[DET_SCORE], score, n));
        BS_TRY(bs_npy_writer_append(&f->w[DET_FEATURES], o->features + (size_t)s0 * o->feat_len, n));
    }
    return BS_OK;
}

/* The grid is built whether the stage runs or resumes (clustering needs it). */
static bs_status detect_prepare(bs_run_ctx *c)
{
    return bs_grid_build(&c->rec->probe, &c->p->detect, &c->grid);
}

/* What a batch is worked on with (detect_batches). */
typedef struct {
    bs_read_lane own;        /* lanes 1..L-1 read through their own; lane 0 through the run's */
    bs_read_lane *rd;        /* (bs_run_lane_for) */
    bs_gpu_detector *gpu;
    bs_detect_output out;    /* the batch's spikes until its turn to be written (limit: lane_cap; unused with one
                                lane, which streams) */
    float *x;                /* its window (the lane's until it reads again) */
    int64_t n_valid;
    double read_s;           /* seconds spent reading and preprocessing */
} detect_lane;

/* detect_batches' lanes as bs_run_lanes sees them. */
typedef struct {
    bs_run_ctx *c;
    const bs_detect_params *d; /* the sort's, with the low tier's stride for this recording (bs_detect_low_stride) */
    int streamed;     /* 1: one lane, each batch streamed to the files as it is detected */
    detect_lane *lanes;
    bs_npy_set *files;
    artifact_writer *aw;
    bs_progress *pb;
    int64_t n_again;  /* batches detected again (more spikes than a list holds) */
} lanes_job;

/* Batch b read through the lane and detected into its list (one lane: read
 * through the run's lane, reading ahead where the plan says, and streamed to
 * the files). */
static bs_status lane_work(void *job, int lane, int64_t b)
{
    lanes_job *j = job;
    bs_run_ctx *c = j->c;
    detect_lane *l = &j->lanes[lane];
    double t0 = bs_now_s();
    bs_detect_output_clear(&l->out);
    bs_status st = j->streamed ? bs_run_read_batch(c, b, &l->x, &l->n_valid)
                               : bs_run_read_batch_on(c, l->rd, b, &l->x, &l->n_valid);
    l->read_s += bs_now_s() - t0;
    BS_TRY(st);
    return bs_detect_batch_on(j->d, &c->basis, &c->grid, &c->rec->probe, l->x, c->width, c->halo, l->n_valid,
                              b * c->nb, l->gpu, j->streamed ? detect_files_append : bs_detect_output_append,
                              j->streamed ? (void *)j->files : (void *)&l->out);
}

/* Batch b's spikes to the files (in batch order): the list, or, when the
 * batch had more spikes than it holds, the batch detected again from its
 * window (still the lane's), streamed; then its artifact periods. */
static bs_status lane_done(void *job, int lane, int64_t b)
{
    lanes_job *j = job;
    bs_run_ctx *c = j->c;
    detect_lane *l = &j->lanes[lane];
    if (l->out.full) {
        j->n_again++;
        BS_TRY(bs_detect_batch_on(j->d, &c->basis, &c->grid, &c->rec->probe, l->x, c->width, c->halo,
                                  l->n_valid, b * c->nb, l->gpu, detect_files_append, j->files));
    } else if (!j->streamed) {
        BS_TRY(detect_files_append(j->files, &l->out));
    }
    BS_TRY(artifact_add(j->aw, c, l->rd, b, l->n_valid));
    c->n_detected = j->files->w[DET_TIMES].shape[0];
    bs_progress_update(j->pb, b + 1);
    bs_checkpoint_test_kill("detect", b + 1);
    return BS_OK;
}

/* The batches through bs_run_lanes: one at a time on all the threads, each
 * streamed to the files as it is detected, or L at once, each lane with its
 * own reader, GPU detector and list. A batch's spikes do not depend on the
 * lane or the threads, so the files are the same bytes for any L. */
static bs_status detect_batches(bs_run_ctx *c, int L, bs_npy_set *files, artifact_writer *aw, bs_progress *pb)
{
    bs_detect_params dp = c->p->detect;
    dp.low_stride = bs_detect_low_stride(&dp, c->rec->n_samples, c->rec->fs_hz);
    if (bs_detect_low_tier(&dp) && dp.low_stride != c->p->detect.low_stride && !c->p->quiet)
        bs_log_info("detect: the low tier in one chunk of %d (detect.low_tier_max_s: %g s of the recording)",
                    dp.low_stride, dp.low_max_s);
    int64_t cap = lane_cap(c->plan);
    detect_lane *lanes = calloc((size_t)L, sizeof *lanes);
    bs_status st = lanes ? BS_OK : bs_error(BS_ERR_MEMORY, "detect: out of memory");
    int n_open = 0;
    for (; st == BS_OK && n_open < L; n_open++) {
        detect_lane *l = &lanes[n_open];
        bs_detect_output_init(&l->out, c->grid.n_chans, c->basis.n_pcs);
        l->out.limit = cap;
        st = bs_run_lane_for(c, n_open, &l->own, &l->rd, "sort/detect-lanes");
        if (st == BS_OK && c->p->device >= 0)
            st = bs_gpu_detector_create(c->p->device, &dp, &c->basis, &c->grid, c->rec->probe.n_chan, c->width,
                                        &l->gpu);
    }
    lanes_job job = {c, &dp, L == 1, lanes, files, aw, pb, 0};
    if (st == BS_OK)
        st = bs_run_lanes(L, c->n_batches, lane_work, lane_done, &job);
    double read_s = 0;
    for (int i = 0; i < n_open; i++) {
        read_s += lanes[i].read_s;
        bs_detect_output_free(&lanes[i].out);
        bs_gpu_detector_free(lanes[i].gpu);
        bs_read_lane_close(&lanes[i].own);
    }
    if (L > 1 && c->summary) /* the lanes' reading, as wall time shared by the lanes (one: counted as read) */
        bs_run_stage_read(c->summary, read_s / L);
    if (job.n_again && !c->p->quiet)
        bs_log_info("detect: %lld of %lld batches held more than %lld spikes (detect.lane_spikes) and were detected "
                    "again, streamed", (long long)job.n_again, (long long)c->n_batches, (long long)cap);
    free(lanes);
    return st;
}

/* Universal detection over every batch, streamed to disk. */
static bs_status detect_run(bs_run_ctx *c)
{
    const bs_detect_grid *grid = &c->grid;
    char dir[4200];
    BS_TRY(bs_path_join(dir, sizeof dir, c->stage_dir, "detect"));
    BS_TRY(bs_mkdir_p(dir));
    const bs_npy_file_spec spec[DET_N] = {
        {"spike_times.npy", BS_NPY_I64, 1, {0}},
        {"spike_pos.npy", BS_NPY_I32, 1, {0}},
        {"spike_xy.npy", BS_NPY_F32, 2, {2}},
        {"spike_score.npy", BS_NPY_F32, 1, {0}},
        {"spike_features.npy", BS_NPY_F32, 3, {grid->n_chans, c->basis.n_pcs}},
    };
    bs_npy_set files;
    bs_status st = bs_npy_set_open(&files, dir, DET_N, spec);
    bs_progress pb;
    bs_progress_start(&pb, "detect", "batches", c->p->quiet ? 0 : c->n_batches);
    c->n_detected = 0;
    artifact_writer aw = {.pending = 0};
    char apath[4300];
    if (st == BS_OK)
        st = bs_path_join(apath, sizeof apath, dir, BS_ARTIFACTS_TSV);
    if (st == BS_OK && (st = bs_atomic_open(&aw.f, apath)) == BS_OK) {
        aw.open = 1;
        if (fprintf(aw.f.fp, "%s\n", BS_ARTIFACTS_HEADER) < 0)
            st = bs_error(BS_ERR_IO, "%s: write failed", apath);
    }
    int L = c->plan->stage[c->stage].lanes;
    if (L > c->n_batches)
        L = (int)c->n_batches;
    if (st == BS_OK)
        st = detect_batches(c, L > 1 ? L : 1, &files, &aw, &pb);
    bs_progress_finish(&pb);
    if (st == BS_OK)
        st = artifact_flush(&aw, c->rec->fs_hz);
    if (st == BS_OK && 2 * aw.blanked > c->rec->n_samples) /* the sort will likely find nothing: say why */
        bs_log_warn("detect: %.1f %% of the recording (%.1f s) was blanked as broadband artifacts (listed in "
                    "%s/detect/%s); if that is the signal itself, sort with --no-artifact-removal",
                    100.0 * (double)aw.blanked / (double)c->rec->n_samples, (double)aw.blanked / c->rec->fs_hz,
                    c->stage_dir, BS_ARTIFACTS_TSV);
    if (aw.open)
        st = st == BS_OK ? bs_atomic_commit(&aw.f) : (bs_atomic_abort(&aw.f), st);
    return bs_npy_set_finish(&files, st);
}

static bs_status detect_load(bs_run_ctx *c)
{
    return bs_stage_rows(c->stage_dir, detect_ckpt_files[DET_TIMES], &c->n_detected);
}

static bs_status detect_finish(bs_run_ctx *c)
{
    if (!c->p->quiet)
        bs_log_info("detected %lld spikes in %.1f s", (long long)c->n_detected, bs_now_s() - c->t0_s);
    return BS_OK;
}

static const char *const detect_params[] = {"batch", "preprocess", "bad_channels", "drift", "detect", NULL};

const bs_stage bs_detect_stage = {.name = "detect", .plan = detect_plan, .prepare = detect_prepare, .run = detect_run,
    .load = detect_load, .finish = detect_finish, .files = detect_ckpt_files, .n_files = DET_N + 1,
    .params = detect_params, .reads_batches = 1};
