/*
 * stage_match.c - a stage of `boundsort sort` (the table:
 * src/pipeline/stages.h): template matching by peeling (peel.c) over every
 * batch with the clustering stage's templates.
 *
 * Before the stage the plan is re-made with the real template count and
 * the exact number of overlapping template pairs (bs_pair_count), which
 * picks how the pair table is stored (full, half, on the fly: the same
 * bits); a stage that no longer fits is refused there. Each template's
 * n_pc_chan channels for pc_features.npy are the support entries with the
 * largest low-rank weights (pc_feature_ind.npy). Per batch, the matched
 * spikes and their PC features (the residual projected on the temporal PCs
 * plus the spike's own fitted template) stream to .stages/match/:
 * spike_times.npy int64 (samples), spike_templates.npy int32,
 * amplitudes.npy float32, pc_features.npy float32 (n, n_pcs, n_pc_chan).
 * These files are the checkpoint; on --resume only their row count is read.
 * With --device cuda the peeling windows' scores are computed on the GPU
 * (src/gpu/gpu.h), whose buffers the plan lists against --gpu-mem.
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
#include "match.h"

/* Output files in .stages/match/. */
enum { MAT_TIMES, MAT_TEMPLATES, MAT_AMPS, MAT_FEATURES, MAT_N };
static const char *const match_files[MAT_N] = {"match/spike_times.npy", "match/spike_templates.npy",
                                               "match/amplitudes.npy", "match/pc_features.npy"};

/* Per template, the n_pc_chan support entries with the largest weights
 * (pc_feature_ind), as indices into its support. */
static void choose_pc_channels(const bs_match_templates *mt, int n_pc_chan, int32_t *sup_idx, int32_t *chan)
{
    int P = mt->n_pc;
    bs_chan_rank r[BS_MATCH_MAX_SUP];
    for (int k = 0; k < mt->K; k++) {
        for (int i = 0; i < mt->n_sup; i++) {
            const float *u = mt->U + ((size_t)k * mt->n_sup + i) * P;
            double e = 0;
            for (int q = 0; q < P; q++)
                e += (double)u[q] * u[q];
            r[i] = (bs_chan_rank){i, e};
        }
        qsort(r, (size_t)mt->n_sup, sizeof r[0], bs_chan_rank_desc);
        for (int j = 0; j < n_pc_chan; j++) {
            sup_idx[(size_t)k * n_pc_chan + j] = r[j].ch;
            chan[(size_t)k * n_pc_chan + j] = mt->support[(size_t)k * mt->n_sup + r[j].ch];
        }
    }
}

/* Peel every batch with the learned templates; spikes and their PC
 * features (residual plus the spike's own fitted template, on the template's
 * pc channels) stream to .stages/match/. */
static bs_status run(bs_run_ctx *ctx)
{
    const bs_temporal_basis *basis = &ctx->basis;
    const bs_match_templates *mt = &ctx->mt;
    const int32_t *pc_sup_idx = ctx->pc_idx;
    int64_t *n_matched = &ctx->n_matched;
    char dir[4200];
    BS_TRY(bs_path_join(dir, sizeof dir, ctx->stage_dir, "match"));
    BS_TRY(bs_mkdir_p(dir));
    int P = mt->n_pc, nt = mt->nt, nb = mt->nt_before, npc = ctx->n_pc_chan;
    bs_pair_table pt = {0};
    bs_peel_ws ws = {0};
    bs_peel_params pp;
    bs_peel_params_default(&pp);
    pp.threshold = ctx->p->match_threshold;
    pp.max_iter = ctx->p->match_max_iter;
    bs_npy_set files = {.n_open = 0};
    bs_status st = bs_pair_table_build(mt, ctx->plan->pair_mode, &pt);
    if (st == BS_OK)
        st = bs_peel_ws_alloc(mt, bs_peel_window_n_t(bs_sort_peel_window(ctx->p, ctx->nb), nt), pp.max_iter,
                              ctx->n_threads, &ws);
    bs_gpu_scorer *gpu = NULL;
    if (st == BS_OK && ctx->p->device >= 0 && (st = bs_gpu_scorer_create(ctx->p->device, mt, ws.n_t, &gpu)) == BS_OK)
        ws.gpu = gpu;
    size_t max_spk = st == BS_OK ? (size_t)bs_peel_span_max_spikes(&ws, nt, ctx->nb) : 0;
    bs_spike *spk = st == BS_OK ? bs_mem_alloc("sort/match-spikes", max_spk * sizeof *spk) : NULL;
    int64_t *times = spk ? bs_mem_alloc("sort/match-spikes", max_spk * sizeof *times) : NULL;
    int32_t *tmpl = times ? bs_mem_alloc("sort/match-spikes", max_spk * sizeof *tmpl) : NULL;
    float *amp = tmpl ? bs_mem_alloc("sort/match-spikes", max_spk * sizeof *amp) : NULL;
    float *feat = amp ? bs_mem_alloc("sort/match-features", max_spk * P * npc * sizeof *feat) : NULL;
    if (st == BS_OK && !feat)
        st = BS_ERR_MEMORY;
    const bs_npy_file_spec spec[MAT_N] = {
        {"spike_times.npy", BS_NPY_I64, 1, {0}},
        {"spike_templates.npy", BS_NPY_I32, 1, {0}},
        {"amplitudes.npy", BS_NPY_F32, 1, {0}},
        {"pc_features.npy", BS_NPY_F32, 3, {P, npc}},
    };
    if (st == BS_OK)
        st = bs_npy_set_open(&files, dir, MAT_N, spec);
    bs_progress pb;
    bs_progress_start(&pb, "match", "batches", ctx->p->quiet ? 0 : ctx->n_batches);
    *n_matched = 0;
    for (int64_t b = 0; b < ctx->n_batches && st == BS_OK; b++) {
        float *x;
        int64_t n_valid, n_out = 0, t0_abs = b * ctx->nb - ctx->halo;
        st = bs_run_read_batch(ctx, b, &x, &n_valid);
        if (st == BS_OK)
            st = bs_peel_span(mt, &pt, x, (size_t)ctx->width, ctx->width, t0_abs, ctx->halo, ctx->halo + n_valid,
                              &pp, &ws, spk, &n_out);
#pragma omp parallel for schedule(static) num_threads(ctx->n_threads)
        for (int64_t i = 0; i < (st == BS_OK ? n_out : 0); i++) {
            int k = spk[i].tmpl;
            int64_t tw = spk[i].time - t0_abs - nb;
            times[i] = spk[i].time;
            tmpl[i] = k;
            amp[i] = spk[i].amp;
            for (int j = 0; j < npc; j++) {
                int si = pc_sup_idx[(size_t)k * npc + j];
                int c = mt->support[(size_t)k * mt->n_sup + si];
                const float *xc = x + (size_t)c * ctx->width + tw;
                const float *u = mt->U + ((size_t)k * mt->n_sup + si) * P;
                for (int q = 0; q < P; q++) {
                    const float *w = basis->wpca + (size_t)q * nt;
                    float acc = 0;
                    for (int v = 0; v < nt; v++)
                        acc += w[v] * xc[v];
                    feat[((size_t)i * P + q) * npc + j] = acc + spk[i].amp * u[q];
                }
            }
        }
        if (st == BS_OK && n_out) {
            st = bs_npy_writer_append(&files.w[MAT_TIMES], times, n_out);
            if (st == BS_OK)
                st = bs_npy_writer_append(&files.w[MAT_TEMPLATES], tmpl, n_out);
            if (st == BS_OK)
                st = bs_npy_writer_append(&files.w[MAT_AMPS], amp, n_out);
            if (st == BS_OK)
                st = bs_npy_writer_append(&files.w[MAT_FEATURES], feat, n_out);
        }
        *n_matched += n_out;
        bs_progress_update(&pb, b + 1);
        bs_checkpoint_test_kill("match", b + 1);
    }
    bs_progress_finish(&pb);
    st = bs_npy_set_finish(&files, st);
    bs_mem_free(spk);
    bs_mem_free(times);
    bs_mem_free(tmpl);
    bs_mem_free(amp);
    bs_mem_free(feat);
    bs_peel_ws_free(&ws);
    bs_gpu_scorer_free(gpu);
    bs_pair_table_free(&pt);
    return st;
}

/* The matching stage's buffers for K templates (match.h size functions on a
 * shape-only template set); the pair table's storage is the fastest that fits. */
static void plan(bs_sort_plan *pl, bs_plan_stage *s)
{
    bs_match_templates shape = {0};
    shape.K = pl->K;
    shape.n_chan = pl->n_chan;
    shape.nt = pl->nt;
    shape.n_pc = pl->n_pc;
    shape.n_sup = pl->n_sup;
    size_t tpl = bs_match_templates_bytes(pl->n_chan, pl->nt, pl->n_pc, pl->K, pl->n_sup);
    size_t ws = bs_peel_ws_bytes(&shape, pl->peel_n_t, pl->max_iter, pl->n_threads);
    size_t max_spikes = (size_t)bs_peel_max_spikes(pl->peel_n_t, pl->nt, pl->max_iter, pl->batch_samples);
    int npc = pl->n_pc_chan < pl->n_sup ? pl->n_pc_chan : pl->n_sup;
    size_t spikes = max_spikes * (sizeof(bs_spike) + 8 + 4 + 4 + (size_t)pl->n_pc * npc * sizeof(float));
    size_t fixed = pl->resident + tpl + ws + spikes + 2 * BS_PLAN_SMALL_BYTES;
    bs_plan_add(s, "batch reader + preprocessing", pl->resident);
    bs_plan_add(s, "templates (channel-sparse, low-rank)", tpl);
    bs_plan_add(s, "peeling workspace (K x window scores)", ws);
    bs_plan_add(s, "matched spikes of one batch", spikes);
    static const bs_pair_mode order[3] = {BS_PAIR_FULL, BS_PAIR_HALF, BS_PAIR_ON_THE_FLY};
    static const char *const names[3] = {"pair table full", "pair table half (symmetry)", "pair table on the fly"};
    int pick = 2;
    for (int i = 0; i < 3; i++) {
        size_t b = fixed + bs_pair_table_bytes(pl->K, pl->pair_nnz, pl->nt, order[i]);
        if (!pl->budget || b <= pl->budget) {
            pick = i;
            break;
        }
    }
    pl->pair_mode = order[pick];
    bs_plan_add(s, names[pick], bs_pair_table_bytes(pl->K, pl->pair_nnz, pl->nt, order[pick]));
    bs_plan_add(s, "small buffers", 2 * BS_PLAN_SMALL_BYTES);
    snprintf(s->strategy, sizeof s->strategy, "%s", names[pick]);
    s->peak = bs_plan_sum(s);
    s->min_peak = fixed + bs_pair_table_bytes(pl->K, pl->pair_nnz, pl->nt, BS_PAIR_ON_THE_FLY);
    s->sure_min = pl->k_assumed ? pl->resident : s->min_peak;
    s->reduce = "match.window_samples (the K x window score buffer)";
    bs_plan_read_ahead(pl, s);
    /* match_files: time, template, amplitude and pc features of every matched spike */
    bs_plan_disk(s, MAT_N, (double)pl->n_spikes * (sizeof(int64_t) + sizeof(int32_t) + sizeof(float) +
                                                    (double)pl->n_pc * npc * sizeof(float)));
    if (pl->p.device >= 0) {
        s->gpu = bs_gpu_scorer_bytes(pl->n_chan, pl->nt, pl->n_pc, pl->K, pl->n_sup, pl->peel_n_t);
        s->gpu_sure = pl->k_assumed ? 0 : s->gpu;
    }
}

/* The real template count and pair count: re-plan, refuse if it no longer fits. */
static bs_status replan(bs_run_ctx *c)
{
    const bs_learned_templates *lt = &c->lt;
    int64_t nnz = bs_pair_count(lt->K, lt->n_sup, lt->support, c->rec->probe.n_chan);
    bs_sort_plan_update(c->plan, c->stage, lt->K, nnz, -1);
    return bs_sort_plan_check(c->plan, c->stage);
}

/* The peeler's templates and each template's pc channels (run or resumed:
 * the finishing stage needs both). */
static bs_status prepare(bs_run_ctx *c)
{
    const bs_learned_templates *lt = &c->lt;
    const bs_detect_params *d = &c->p->detect;
    BS_TRY(bs_match_templates_create("learned templates", c->rec->probe.n_chan, d->nt, d->nt_before, c->basis.n_pcs,
                                     c->basis.wpca, lt->K, lt->n_sup, lt->support, lt->U, &c->mt));
    c->have_mt = 1;
    int npc = c->p->n_pc_chan < lt->n_sup ? c->p->n_pc_chan : lt->n_sup;
    c->n_pc_chan = npc;
    c->pc_idx = bs_mem_alloc("sort/pc-channels", (size_t)c->mt.K * npc * sizeof *c->pc_idx);
    c->pc_chan = bs_mem_alloc("sort/pc-channels", (size_t)c->mt.K * npc * sizeof *c->pc_chan);
    if (!c->pc_idx || !c->pc_chan)
        return BS_ERR_MEMORY;
    choose_pc_channels(&c->mt, npc, c->pc_idx, c->pc_chan);
    return BS_OK;
}

static bs_status load(bs_run_ctx *c)
{
    return bs_stage_rows(c->stage_dir, match_files[MAT_TIMES], &c->n_matched);
}

static bs_status finish(bs_run_ctx *c)
{
    if (!c->p->quiet)
        bs_log_info("matched %lld spikes with %d templates", (long long)c->n_matched, c->mt.K);
    return BS_OK;
}

static const char *const params[] = {"batch", "preprocess", "bad_channels", "drift", "detect", "match", NULL};

const bs_stage bs_match_stage = {.name = "match", .plan = plan, .replan = replan, .prepare = prepare, .run = run,
    .load = load, .finish = finish, .files = match_files, .n_files = MAT_N, .params = params, .reads_batches = 1};
