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
 * The first pass also counts each template's amplitudes and each batch's
 * spikes (truncated.h); when that finds templates whose threshold truncates
 * their unit, a second pass peels every batch again with only those
 * templates (at their own, lower thresholds) and the templates sharing a
 * channel with them, after subtracting the other templates' first-pass
 * spikes (read back from the first pass's files, renamed first_*.npy and
 * removed at the end), with the amplitude prior (match.h) centred at
 * match.amp_prior_of_amplitude times each template's amplitude; its files
 * replace the first's. The first pass uses the prior only when
 * match.amp_prior is set.
 * With --device cuda the peeling windows' scores are computed on the GPU
 * (src/gpu/gpu.h), whose buffers the plan lists against --gpu-mem.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../common/progress.h"
#include "../common/samples.h"
#include "../io/npy.h"
#include "../mem/mem.h"
#include "../pipeline/stage.h"
#include "../pipeline/stage_io.h"
#include "../gpu/gpu.h"
#include "../pipeline/stages.h"
#include "match.h"
#include "truncated.h"

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

/* What one batch is worked on with: the lane it is read through (the run's
 * own, or one of the stage's: stage.h), the peeling workspace, the GPU
 * scorer, and the batch's spikes and features until they are written. */
typedef struct {
    bs_read_lane own;  /* a lane of the stage's (lanes 1..L-1 of several) */
    bs_read_lane *rd;  /* the lane batches are read through (bs_run_lane_for), or NULL (one lane:
                          bs_run_read_batch, which may read ahead) */
    bs_peel_ws ws;
    bs_gpu_scorer *gpu;
    bs_spike *spk;
    int64_t *times;
    int32_t *tmpl;
    float *amp, *feat;
    int64_t n_out;     /* spikes of the batch last matched */
    double read_s;     /* seconds spent reading its batches */
    int64_t max_spk;   /* spikes bs_peel_span reports for a batch, at most (the outputs' rows) */
    bs_spike *keep;    /* second pass: the batch's first-pass spikes of templates not re-peeled (max_spk; then
                          the residual rule's scratch of 2 max_spk ints) */
    bs_spike *all;     /* second pass: those and the re-peeled ones, merged (2 max_spk), given their features
                          and written max_spk at a time when the batch is written (lane_done) */
    const float *x;    /* second pass: the batch's residual window until then, from sample t0_abs */
    int64_t t0_abs;
} match_lane;

static bs_status lane_open(bs_run_ctx *ctx, match_lane *l, int i, int n_lanes, int n_threads)
{
    const bs_match_templates *mt = &ctx->mt;
    memset(l, 0, sizeof *l);
    l->own.reader.fd = -1;
    if (n_lanes > 1)
        BS_TRY(bs_run_lane_for(ctx, i, &l->own, &l->rd, "sort/match-lanes"));
    BS_TRY(bs_peel_ws_alloc(mt, bs_peel_window_n_t(bs_sort_peel_window(ctx->p, ctx->nb), mt->nt), ctx->p->match_max_iter,
                            n_threads, &l->ws));
    if (ctx->p->device >= 0) {
        BS_TRY(bs_gpu_scorer_create(ctx->p->device, mt, l->ws.n_t, &l->gpu));
        l->ws.gpu = l->gpu;
    }
    size_t max_spk = (size_t)bs_peel_span_max_spikes(&l->ws, mt->nt, ctx->nb);
    l->max_spk = (int64_t)max_spk;
    l->spk = bs_mem_alloc("sort/match-spikes", max_spk * sizeof *l->spk);
    l->times = bs_mem_alloc("sort/match-spikes", max_spk * sizeof *l->times);
    l->tmpl = bs_mem_alloc("sort/match-spikes", max_spk * sizeof *l->tmpl);
    l->amp = bs_mem_alloc("sort/match-spikes", max_spk * sizeof *l->amp);
    l->feat = bs_mem_alloc("sort/match-features", max_spk * (size_t)mt->n_pc * (size_t)ctx->n_pc_chan * sizeof *l->feat);
    return l->spk && l->times && l->tmpl && l->amp && l->feat ? BS_OK : BS_ERR_MEMORY;
}

static void lane_close(match_lane *l)
{
    bs_mem_free(l->keep);
    bs_mem_free(l->all);
    bs_mem_free(l->spk);
    bs_mem_free(l->times);
    bs_mem_free(l->tmpl);
    bs_mem_free(l->amp);
    bs_mem_free(l->feat);
    bs_peel_ws_free(&l->ws);
    bs_gpu_scorer_free(l->gpu);
    bs_read_lane_close(&l->own);
}

/* The n spikes spk (sorted) to the lane's outputs, each with its PC features: the residual x (window from
 * sample t0_abs) projected on the temporal PCs on the template's pc channels, plus the spike's own fitted
 * template. */
static void batch_features(const bs_run_ctx *ctx, match_lane *l, const bs_spike *spk, int64_t n, const float *x,
                           int64_t t0_abs)
{
    const bs_temporal_basis *basis = &ctx->basis;
    const bs_match_templates *mt = &ctx->mt;
    const int32_t *pc_sup_idx = ctx->pc_idx;
    int P = mt->n_pc, nt = mt->nt, nb = mt->nt_before, npc = ctx->n_pc_chan;
#pragma omp parallel for schedule(static) num_threads(l->ws.n_threads)
    for (int64_t i = 0; i < n; i++) {
        const bs_spike *sp = &spk[i];
        int k = sp->tmpl;
        int64_t tw = sp->time - t0_abs - nb;
        l->times[i] = sp->time;
        l->tmpl[i] = k;
        l->amp[i] = sp->amp;
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
                l->feat[((size_t)i * P + q) * npc + j] = acc + sp->amp * u[q];
            }
        }
    }
}

/* Batch b's window through lane l (or the run's lane, with its read-ahead), the time counted. */
static bs_status read_batch(bs_run_ctx *ctx, match_lane *l, int64_t b, float **x, int64_t *n_valid)
{
    double t0 = bs_now_s();
    BS_TRY(l->rd ? bs_run_read_batch_on(ctx, l->rd, b, x, n_valid) : bs_run_read_batch(ctx, b, x, n_valid));
    l->read_s += bs_now_s() - t0;
    return BS_OK;
}

/* Batch b read through lane l (or the run's lane, with its read-ahead), peeled,
 * and each spike's PC features (the residual projected on the temporal PCs
 * on the template's pc channels, plus the spike's own fitted template). The
 * result depends on the batch alone, not on the lane or the threads. */
static bs_status match_batch(bs_run_ctx *ctx, const bs_pair_table *pt, const bs_peel_params *pp, match_lane *l,
                             int64_t b)
{
    const bs_match_templates *mt = &ctx->mt;
    float *x;
    int64_t n_valid, n_out = 0, t0_abs = b * ctx->nb - ctx->halo;
    l->n_out = 0;
    BS_TRY(read_batch(ctx, l, b, &x, &n_valid));
    BS_TRY(bs_peel_span(mt, pt, x, (size_t)ctx->width, ctx->width, t0_abs, ctx->halo, ctx->halo + n_valid, pp, &l->ws,
                        l->spk, &n_out));
    batch_features(ctx, l, l->spk, n_out, x, t0_abs);
    l->n_out = n_out;
    return BS_OK;
}

/* The second pass (truncated.h): the templates it re-peels as a set of their own, with their pair table,
 * thresholds and prior centres, and the first pass's spikes, read back from its files a batch at a time. */
enum { FIRST_TIMES, FIRST_TEMPLATES, FIRST_AMPS, FIRST_N };
static const char *const first_files[FIRST_N] = {"match/first_spike_times.npy", "match/first_spike_templates.npy",
                                                 "match/first_amplitudes.npy"};
typedef struct {
    bs_match_templates sub; /* the re-peeled templates */
    bs_pair_table pt;       /* their pair table */
    int32_t *of;            /* sub.K: each one's index in the whole set, ascending */
    uint8_t *in;            /* K: 1 for a re-peeled template */
    uint8_t *low;           /* K: 1 for a lowered one */
    int64_t dup;            /* samples: a lowered template's spike under the threshold this near a larger spike
                               of another template is dropped (0: none) */
    float *thk, *mu;        /* sub.K: their thresholds and prior centres (whitened units) */
    int64_t *first;         /* n_batches + 1: the first pass's rows of batch b are first[b]..first[b+1]-1 */
    int fd[FIRST_N];        /* the first pass's times, templates and amplitudes, or -1 */
    size_t off[FIRST_N];    /* bytes before their data */
} second_pass;

#define FIRST_CHUNK 1024 /* first-pass rows read at once */

/* Batch b of the second pass: the first pass's spikes of the templates not re-peeled whose waveform reaches
 * the batch window are subtracted from it (in row order), the window is peeled with the re-peeled
 * templates only, and the batch's spikes are its first-pass spikes of the others and the new ones, sorted
 * as bs_peel_span sorts (bs_spike_cmp), their PC features taken from the window's residual when the batch
 * is written. */
static bs_status match_batch2(bs_run_ctx *ctx, const second_pass *sp2, const bs_peel_params *pp, match_lane *l,
                              int64_t b)
{
    const bs_match_templates *mt = &ctx->mt;
    float *x;
    int64_t n_valid, n_s = 0, n_keep = 0, t0_abs = b * ctx->nb - ctx->halo, W = ctx->width;
    l->n_out = 0;
    BS_TRY(read_batch(ctx, l, b, &x, &n_valid));
    int64_t lo_t = t0_abs - mt->nt, hi_t = t0_abs + W + mt->nt; /* spikes whose waveform may reach the window */
    int64_t b0 = lo_t > 0 ? lo_t / ctx->nb : 0, b1 = (hi_t - 1) / ctx->nb;
    b1 = b1 < ctx->n_batches ? b1 : ctx->n_batches - 1;
    int64_t times[FIRST_CHUNK];
    int32_t tmpl[FIRST_CHUNK];
    float amp[FIRST_CHUNK];
    for (int64_t r0 = sp2->first[b0]; r0 < sp2->first[b1 + 1]; r0 += FIRST_CHUNK) {
        int64_t n = sp2->first[b1 + 1] - r0 < FIRST_CHUNK ? sp2->first[b1 + 1] - r0 : FIRST_CHUNK;
        if (bs_pread_all(sp2->fd[FIRST_TIMES], times, (size_t)n * 8, (off_t)(sp2->off[FIRST_TIMES] + (size_t)r0 * 8)) ||
            bs_pread_all(sp2->fd[FIRST_TEMPLATES], tmpl, (size_t)n * 4,
                         (off_t)(sp2->off[FIRST_TEMPLATES] + (size_t)r0 * 4)) ||
            bs_pread_all(sp2->fd[FIRST_AMPS], amp, (size_t)n * 4, (off_t)(sp2->off[FIRST_AMPS] + (size_t)r0 * 4)))
            return bs_error(BS_ERR_IO, "match: reading the first pass's spikes back: %s", strerror(errno));
        for (int64_t i = 0; i < n; i++) {
            if (tmpl[i] < 0 || tmpl[i] >= mt->K)
                return bs_error(BS_ERR_INTERNAL, "match: first-pass spike %lld has template %d of %d",
                                (long long)(r0 + i), tmpl[i], mt->K);
            if (sp2->in[tmpl[i]])
                continue;
            bs_peel_subtract(mt, x, (size_t)W, W, tmpl[i], times[i] - t0_abs, amp[i]);
            if (r0 + i >= sp2->first[b] && r0 + i < sp2->first[b + 1]) {
                if (n_keep == l->max_spk)
                    return bs_error(BS_ERR_INTERNAL, "match: batch %lld had more first-pass spikes than %lld",
                                    (long long)b, (long long)l->max_spk);
                l->keep[n_keep++] = (bs_spike){times[i], tmpl[i], amp[i]};
            }
        }
    }
    BS_TRY(bs_peel_span(&sp2->sub, &sp2->pt, x, (size_t)W, W, t0_abs, ctx->halo, ctx->halo + n_valid, pp, &l->ws,
                        l->spk, &n_s));
    /* merge: both lists are sorted, and the re-peeled templates' indices keep their order */
    int64_t i = 0, j = 0, n = 0;
    while (i < n_keep || j < n_s) {
        bs_spike s2 = {0};
        if (j < n_s)
            s2 = (bs_spike){l->spk[j].time, sp2->of[l->spk[j].tmpl], l->spk[j].amp};
        if (j >= n_s || (i < n_keep && bs_spike_cmp(&l->keep[i], &s2) <= 0))
            l->all[n++] = l->keep[i++];
        else {
            l->all[n++] = s2;
            j++;
        }
    }
    if (sp2->dup > 0) /* a lowered template's spikes that are another spike's residual */
        n = bs_trunc_drop_residuals(l->all, n, sp2->low, pp->threshold, sp2->dup, (int32_t *)l->keep);
    l->x = x;
    l->t0_abs = t0_abs;
    l->n_out = n;
    return BS_OK;
}

_Static_assert(sizeof(bs_spike) >= 2 * sizeof(int32_t), "a lane's keep list holds twice its rows in ints");

/* The lane's outputs, n rows, to the files. */
static bs_status lane_write(bs_npy_set *files, const match_lane *l, int64_t n)
{
    if (!n)
        return BS_OK;
    BS_TRY(bs_npy_writer_append(&files->w[MAT_TIMES], l->times, n));
    BS_TRY(bs_npy_writer_append(&files->w[MAT_TEMPLATES], l->tmpl, n));
    BS_TRY(bs_npy_writer_append(&files->w[MAT_AMPS], l->amp, n));
    return bs_npy_writer_append(&files->w[MAT_FEATURES], l->feat, n);
}

/* The stage's lanes as bs_run_lanes sees them. */
typedef struct {
    bs_run_ctx *ctx;
    const bs_pair_table *pt;
    const bs_peel_params *pp;
    match_lane *lanes;
    bs_npy_set *files;
    bs_progress *pb;
    int32_t *hist;   /* the first pass: its amplitudes per template (truncated.h), else NULL */
    int64_t *first;  /* the first pass: each batch's first row (n_batches + 1), else NULL */
    const second_pass *sp2; /* the second pass, else NULL */
} lanes_job;

static bs_status lane_work(void *job, int lane, int64_t b)
{
    lanes_job *j = job;
    if (j->sp2)
        return match_batch2(j->ctx, j->sp2, j->pp, &j->lanes[lane], b);
    return match_batch(j->ctx, j->pt, j->pp, &j->lanes[lane], b);
}

/* Batch b's spikes, matched on `lane`, to the files (in batch order). */
static bs_status lane_done(void *job, int lane, int64_t b)
{
    lanes_job *j = job;
    match_lane *l = &j->lanes[lane];
    if (j->sp2) /* the merged spikes, with their features, max_spk at a time */
        for (int64_t i = 0; i < l->n_out; i += l->max_spk) {
            int64_t n = l->n_out - i < l->max_spk ? l->n_out - i : l->max_spk;
            batch_features(j->ctx, l, l->all + i, n, l->x, l->t0_abs);
            BS_TRY(lane_write(j->files, l, n));
        }
    else
        BS_TRY(lane_write(j->files, l, l->n_out));
    if (j->hist)
        bs_trunc_hist_add(j->hist, j->pp->threshold, l->tmpl, l->amp, l->n_out);
    if (j->first)
        j->first[b + 1] = j->first[b] + l->n_out;
    j->ctx->n_matched += l->n_out;
    bs_progress_update(j->pb, b + 1);
    bs_checkpoint_test_kill(j->sp2 ? "match-again" : "match", b + 1);
    return BS_OK;
}

/* A lane's buffers for the second pass: its workspace (and GPU scorer) for the re-peeled templates, and
 * spike lists for a batch's first-pass spikes and the merged ones (the outputs stay as they are). */
static bs_status lane_second(bs_run_ctx *ctx, match_lane *l, const bs_match_templates *sub)
{
    const int64_t n_t = l->ws.n_t;
    const int n_threads = l->ws.n_threads;
    bs_peel_ws_free(&l->ws);
    BS_TRY(bs_peel_ws_alloc(sub, n_t, ctx->p->match_max_iter, n_threads, &l->ws));
    if (ctx->p->device >= 0) {
        bs_gpu_scorer_free(l->gpu);
        l->gpu = NULL;
        BS_TRY(bs_gpu_scorer_create(ctx->p->device, sub, l->ws.n_t, &l->gpu));
        l->ws.gpu = l->gpu;
    }
    const size_t m = (size_t)l->max_spk;
    l->keep = bs_mem_alloc("sort/match-spikes", m * sizeof *l->keep);
    l->all = bs_mem_alloc("sort/match-spikes", 2 * m * sizeof *l->all);
    return l->keep && l->all ? BS_OK : BS_ERR_MEMORY;
}

static void second_pass_free(second_pass *sp2)
{
    for (int i = 0; i < FIRST_N; i++)
        if (sp2->fd[i] >= 0)
            close(sp2->fd[i]);
    bs_match_templates_free(&sp2->sub);
    bs_pair_table_free(&sp2->pt);
    bs_mem_free(sp2->of);
    bs_mem_free(sp2->in);
    bs_mem_free(sp2->low);
    bs_mem_free(sp2->thk);
    bs_mem_free(sp2->mu);
}

/* After the first pass (its files written, hist and first filled): the templates the threshold truncates
 * get their own thresholds (bs_trunc_thresholds); when there are any, they and the templates overlapping
 * them (bs_trunc_partners) are peeled again over every batch with the others' first-pass spikes
 * subtracted, with the amplitude prior of match.truncated_amp_prior, and the files are rewritten. The
 * whole set's pair table *pt is freed before the re-peeled templates' own is built. */
static bs_status second_pass_run(bs_run_ctx *ctx, bs_pair_table *pt, const bs_peel_params *pp, const float *thk,
                                 const float *mu, const int32_t *hist, int64_t *first, match_lane *lanes, int L,
                                 const bs_npy_file_spec *spec)
{
    const bs_match_templates *mt = &ctx->mt;
    const bs_trunc_params *tp = &ctx->p->match_trunc;
    const int K = mt->K;
    second_pass sp2 = {.fd = {-1, -1, -1}, .first = first};
    float *own = bs_mem_alloc("match/thresholds", (size_t)K * sizeof *own);
    uint8_t *lowered = sp2.low = bs_mem_alloc("match/truncation", (size_t)K);
    sp2.in = bs_mem_alloc("match/truncation", (size_t)K);
    sp2.dup = tp->dup_ms > 0 ? bs_seconds_to_samples(tp->dup_ms * 1e-3, ctx->rec->fs_hz) : 0;
    bs_status st = own && lowered && sp2.in ? BS_OK : BS_ERR_MEMORY;
    int n_low = 0, n_sub = 0;
    if (st == BS_OK) {
        n_low = bs_trunc_thresholds(tp, hist, K, pp->threshold, mt->norm_in, thk, own);
        for (int k = 0; k < K; k++)
            lowered[k] = own[k] < (thk ? thk[k] : pp->threshold);
        if (n_low > 0 && (n_sub = bs_trunc_partners(mt, pt, lowered, tp->overlap, sp2.in)) < 0)
            st = BS_ERR_MEMORY;
    }
    if (st == BS_OK && n_low > 0) {
        sp2.of = bs_mem_alloc("match/truncation", (size_t)n_sub * sizeof *sp2.of);
        sp2.thk = bs_mem_alloc("match/thresholds", (size_t)n_sub * sizeof *sp2.thk);
        sp2.mu = bs_mem_alloc("match/prior", (size_t)n_sub * sizeof *sp2.mu);
        st = sp2.of && sp2.thk && sp2.mu ? BS_OK : BS_ERR_MEMORY;
    }
    if (st == BS_OK && n_low > 0) {
        for (int k = 0, i = 0; k < K; k++)
            if (sp2.in[k]) {
                sp2.of[i] = k;
                sp2.thk[i] = own[k];
                sp2.mu[i++] = mu ? mu[k] : 0.0f;
            }
        if (!ctx->p->quiet)
            bs_log_info("match: %d templates the threshold truncates; they and %d templates overlapping them "
                        "matched again", n_low, n_sub - n_low);
        bs_pair_table_free(pt);
        st = bs_match_templates_subset(mt, sp2.of, n_sub, &sp2.sub);
        if (st == BS_OK)
            st = bs_pair_table_build(&sp2.sub, ctx->plan->pair_mode, &sp2.pt);
    }
    bs_mem_free(own);
    if (st != BS_OK || n_low == 0) {
        second_pass_free(&sp2);
        return st;
    }
    /* the first pass's times, templates and amplitudes renamed to be read back, its features removed */
    char path[4200], to[4200];
    for (int i = 0; i < MAT_N && st == BS_OK; i++) {
        st = bs_path_join(path, sizeof path, ctx->stage_dir, match_files[i]);
        if (st == BS_OK && i == MAT_FEATURES)
            remove(path);
        else if (st == BS_OK && (st = bs_path_join(to, sizeof to, ctx->stage_dir, first_files[i])) == BS_OK &&
                 rename(path, to) != 0)
            st = bs_error(BS_ERR_IO, "%s: cannot rename to %s: %s", path, to, strerror(errno));
        bs_npy_header h;
        if (st == BS_OK && i != MAT_FEATURES && (st = bs_npy_read_header(to, &h)) == BS_OK) {
            sp2.off[i] = h.data_offset;
            st = bs_open_input(to, &sp2.fd[i]);
        }
    }
    for (int i = 0; i < L && st == BS_OK; i++)
        st = lane_second(ctx, &lanes[i], &sp2.sub);
    bs_peel_params pp2 = *pp;
    pp2.tmpl_threshold = sp2.thk;
    pp2.amp_prior = tp->amp_prior > 0 ? tp->amp_prior : pp->amp_prior;
    pp2.amp_mu = pp2.amp_prior > 0 && mu ? sp2.mu : NULL;
    char dir[4200];
    bs_npy_set files = {.n_open = 0};
    if (st == BS_OK && (st = bs_path_join(dir, sizeof dir, ctx->stage_dir, "match")) == BS_OK)
        st = bs_npy_set_open(&files, dir, MAT_N, spec);
    bs_progress pb;
    bs_progress_start(&pb, "match (again)", "batches", ctx->p->quiet || st != BS_OK ? 0 : ctx->n_batches);
    ctx->n_matched = 0;
    lanes_job job = {ctx, NULL, &pp2, lanes, &files, &pb, NULL, NULL, &sp2};
    if (st == BS_OK)
        st = bs_run_lanes(L, ctx->n_batches, lane_work, lane_done, &job);
    bs_progress_finish(&pb);
    st = bs_npy_set_finish(&files, st);
    second_pass_free(&sp2);
    for (int i = 0; i < FIRST_N; i++)
        if (bs_path_join(path, sizeof path, ctx->stage_dir, first_files[i]) == BS_OK)
            remove(path);
    return st;
}

/* Peel every batch with the learned templates; spikes and their PC features
 * stream to .stages/match/ in batch order. With one lane the batches are
 * done one after the other on all the threads (reading ahead where the plan
 * says); with L lanes (the plan's choice: threads, --mem and --gpu-mem),
 * L threads, each with its own lane (reader, workspace, GPU scorer), take the
 * batches in turn, and each writes its batch once the one before is written
 * (an ordered region): batches do not depend on each other (each is peeled
 * from its own window), so the files are the same bytes for any L. */
static bs_status run(bs_run_ctx *ctx)
{
    const bs_match_templates *mt = &ctx->mt;
    char dir[4200];
    BS_TRY(bs_path_join(dir, sizeof dir, ctx->stage_dir, "match"));
    BS_TRY(bs_mkdir_p(dir));
    int P = mt->n_pc, npc = ctx->n_pc_chan;
    int L = ctx->plan->stage[ctx->stage].lanes > 1 ? ctx->plan->stage[ctx->stage].lanes : 1;
    if (L > ctx->n_batches)
        L = ctx->n_batches > 1 ? (int)ctx->n_batches : 1;
    bs_pair_table pt = {0};
    bs_peel_params pp;
    bs_peel_params_default(&pp);
    pp.threshold = ctx->p->match_threshold;
    pp.max_iter = ctx->p->match_max_iter;
    float *thk = NULL, *mu = NULL;
    if (ctx->p->match_amp_prior > 0 || ctx->p->match_trunc.amp_prior > 0) { /* the prior's centres */
        if (!(mu = bs_mem_alloc("match/prior", (size_t)mt->K * sizeof *mu)))
            return BS_ERR_MEMORY;
        for (int k = 0; k < mt->K; k++)
            mu[k] = (float)(ctx->p->match_amp_prior_of_amp * mt->norm_in[k]);
    }
    if (ctx->p->match_amp_prior > 0) {
        pp.amp_mu = mu;
        pp.amp_prior = ctx->p->match_amp_prior;
    }
    /* without low-tier templates every threshold is pp.threshold: the peeler needs none */
    if (ctx->lt.low_tier) {
        thk = bs_mem_alloc("match/thresholds", (size_t)mt->K * sizeof *thk);
        if (!thk) {
            bs_mem_free(mu);
            return BS_ERR_MEMORY;
        }
        if (bs_match_thresholds(mt, ctx->lt.low_tier, pp.threshold, ctx->p->match_threshold_of_amp,
                                ctx->p->match_threshold_floor, thk) > 0)
            pp.tmpl_threshold = thk;
    }
    bs_npy_set files = {.n_open = 0};
    match_lane *lanes = calloc((size_t)L, sizeof *lanes);
    int n_open = 0;
    bs_status st = lanes ? bs_pair_table_build(mt, ctx->plan->pair_mode, &pt) : BS_ERR_MEMORY;
    if (st == BS_OK && ctx->plan->pair_keep)
        st = bs_pair_table_keep(mt, &pt, ctx->lt.n_spikes, ctx->plan->pair_keep);
    if (st == BS_OK && pt.mode == BS_PAIR_SOME && !ctx->p->quiet)
        bs_log_info("match: the pair rows of the %d busiest of %d templates kept (%.1f MiB), the others computed "
                    "when a spike is subtracted", pt.n_kept, pt.K,
                    (double)((size_t)pt.n_rows * pt.n_lag * sizeof(float) + (size_t)pt.K * 8) / (1 << 20));
    for (; st == BS_OK && n_open < L; n_open++)
        st = lane_open(ctx, &lanes[n_open], n_open, L, L > 1 ? 1 : ctx->n_threads);
    const bs_npy_file_spec spec[MAT_N] = {
        {"spike_times.npy", BS_NPY_I64, 1, {0}},
        {"spike_templates.npy", BS_NPY_I32, 1, {0}},
        {"amplitudes.npy", BS_NPY_F32, 1, {0}},
        {"pc_features.npy", BS_NPY_F32, 3, {P, npc}},
    };
    /* with the truncation rule, the first pass's amplitudes per template and rows per batch; a second pass
       when it lowers a template's threshold (truncated.h), whose files replace the first's */
    int32_t *hist = NULL;
    int64_t *first = NULL;
    if (st == BS_OK && ctx->p->match_trunc.floor > 0 &&
        (!(hist = bs_mem_calloc("match/truncation", (size_t)mt->K * (BS_TRUNC_BINS + 1), sizeof *hist)) ||
         !(first = bs_mem_calloc("match/truncation", (size_t)ctx->n_batches + 1, sizeof *first))))
        st = BS_ERR_MEMORY;
    if (st == BS_OK)
        st = bs_npy_set_open(&files, dir, MAT_N, spec);
    bs_progress pb;
    bs_progress_start(&pb, "match", "batches", ctx->p->quiet ? 0 : ctx->n_batches);
    ctx->n_matched = 0;
    lanes_job job = {ctx, &pt, &pp, lanes, &files, &pb, hist, first, NULL};
    if (st == BS_OK)
        st = bs_run_lanes(L, ctx->n_batches, lane_work, lane_done, &job);
    bs_progress_finish(&pb);
    st = bs_npy_set_finish(&files, st);
    if (st == BS_OK && hist)
        st = second_pass_run(ctx, &pt, &pp, thk, mu, hist, first, lanes, L, spec);
    bs_mem_free(hist);
    bs_mem_free(first);
    if (L > 1 && ctx->summary) { /* the lanes' reading, as wall time shared by the lanes */
        double r = 0;
        for (int i = 0; i < n_open; i++)
            r += lanes[i].read_s;
        bs_run_stage_read(ctx->summary, r / L);
    }
    for (int i = 0; i < n_open; i++)
        lane_close(&lanes[i]);
    free(lanes);
    bs_pair_table_free(&pt);
    bs_mem_free(thk);
    bs_mem_free(mu);
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
    size_t tpl = bs_match_templates_bytes(pl->nt, pl->n_pc, pl->K, pl->n_sup);
    size_t ws = bs_peel_ws_bytes(&shape, pl->peel_n_t, pl->max_iter, pl->n_threads);
    size_t max_spikes = (size_t)bs_peel_max_spikes(pl->peel_n_t, pl->nt, pl->max_iter, pl->batch_samples);
    int npc = pl->n_pc_chan < pl->n_sup ? pl->n_pc_chan : pl->n_sup;
    size_t spikes = max_spikes * (sizeof(bs_spike) + 8 + 4 + 4 + (size_t)pl->n_pc * npc * sizeof(float));
    /* the prior's centres and the thresholds (K floats each, two sets at the second pass); with the
       truncation rule the first pass's amplitude histograms and rows per batch, the second pass's choice of
       templates (two flags, an index, a threshold and a centre each) and their own set (at most the whole
       set's bytes, and its supports and weights copied once more while it is made; its pair table replaces
       the whole set's), and per lane a batch's first-pass spikes and
       the merged list (bs_spike each) with outputs for twice the spikes */
    const int two = pl->p.match_trunc.floor > 0;
    size_t per_k = (size_t)pl->K * 3 * sizeof(float) +
                   (two ? bs_trunc_hist_bytes(pl->K) + (size_t)(pl->n_batches + 1) * sizeof(int64_t) +
                              (size_t)pl->K * (2 + 3 * sizeof(float))
                        : 0);
    size_t spikes2 = two ? max_spikes * 3 * sizeof(bs_spike) : 0;
    size_t tpl2 = two ? tpl + (size_t)pl->K * pl->n_sup * (sizeof(int32_t) + (size_t)pl->n_pc * sizeof(float)) : 0;
    size_t fixed = pl->resident + tpl + tpl2 + ws + spikes + spikes2 + per_k + 2 * BS_PLAN_SMALL_BYTES;
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
    size_t pairs = bs_pair_table_bytes(pl->K, pl->pair_nnz, pl->nt, order[pick]);
    size_t all_rows = bs_pair_table_bytes(pl->K, pl->pair_nnz, pl->nt, BS_PAIR_FULL) - pairs;
    size_t gpu1 = pl->p.device >= 0 ? bs_gpu_scorer_bytes(pl->n_chan, pl->nt, pl->n_pc, pl->K, pl->n_sup, pl->peel_n_t)
                                    : 0;
    /* batches at once (run()): one per thread, each with a workspace, spike lists, a lane and a GPU scorer of
       its own, as many as the threads, the budget and the GPU budget allow; listed as what they need beyond
       the one-lane buffers (which they replace), like the read-ahead lane they make unnecessary */
    size_t lane = bs_peel_ws_bytes(&shape, pl->peel_n_t, pl->max_iter, 1) + spikes + spikes2 + pl->read_ahead;
    size_t credit = ws + spikes + spikes2 + pl->read_ahead; /* lane 0 reads through the run's lane */
    int lanes = s->lanes = bs_plan_lanes(pl, fixed + pairs, lane, credit, gpu1);
    size_t extra = (size_t)lanes * lane > credit ? (size_t)lanes * lane - credit : 0;
    /* on the fly: three quarters of what the budget leaves after the lanes keep the rows of the busiest
       templates (bs_pair_table_keep: the same bits, fewer rows computed per subtraction; before a read-ahead
       lane, which saves far less at the K where tables do not fit) */
    pl->pair_keep = 0;
    if (order[pick] == BS_PAIR_ON_THE_FLY && pl->budget) {
        size_t used = fixed + pairs + extra;
        size_t left = pl->budget > used ? (pl->budget - used) / 4 * 3 : 0; /* a quarter left as slack */
        size_t index = (size_t)pl->K * sizeof(int64_t);
        size_t most = all_rows + index;
        pl->pair_keep = left > index + (size_t)(2 * pl->nt - 1) * sizeof(float) ? (left < most ? left : most) : 0;
    }
    bs_plan_add(s, "batch reader + preprocessing", pl->resident);
    bs_plan_add(s, "templates (channel-sparse, low-rank)", tpl);
    bs_plan_add(s, "peeling workspace (K x window scores)", ws);
    bs_plan_add(s, "matched spikes of one batch", spikes);
    if (two) {
        bs_plan_add(s, "second pass: a batch's first-pass spikes and the merged ones", spikes2);
        bs_plan_add(s, "second pass: the templates matched again (at most)", tpl2);
    }
    if (lanes > 1)
        bs_plan_add(s, "lanes: more batches at once, each read, peeled and its spikes kept on its own", extra);
    bs_plan_add(s, names[pick], pairs);
    if (pl->pair_keep)
        bs_plan_add(s, "the busiest templates' pair rows, kept (at most)", pl->pair_keep);
    bs_plan_add(s, "per-template thresholds, prior centres, amplitude histograms, rows per batch", per_k);
    bs_plan_add(s, "small buffers", 2 * BS_PLAN_SMALL_BYTES);
    char keep[64] = "";
    if (pl->pair_keep)
        snprintf(keep, sizeof keep, ", busiest rows kept (%.1f MiB)", (double)pl->pair_keep / (1 << 20));
    if (lanes > 1)
        snprintf(s->strategy, sizeof s->strategy, "%s%s, %d batches at once", names[pick], keep, lanes);
    else
        snprintf(s->strategy, sizeof s->strategy, "%s%s", names[pick], keep);
    s->peak = bs_plan_sum(s);
    s->min_peak = fixed + bs_pair_table_bytes(pl->K, pl->pair_nnz, pl->nt, BS_PAIR_ON_THE_FLY);
    s->sure_min = pl->k_assumed ? pl->resident : s->min_peak;
    s->reduce = "match.window_samples (the K x window score buffer)";
    if (lanes == 1)
        bs_plan_read_ahead(pl, s, 0);
    /* match_files: time, template, amplitude and pc features of every matched spike; during a second pass
       also the first pass's times, templates and amplitudes (first_files) */
    bs_plan_disk(s, two ? MAT_N + FIRST_N : MAT_N,
                 (double)pl->n_spikes * (sizeof(int64_t) + sizeof(int32_t) + sizeof(float) +
                                         (double)pl->n_pc * npc * sizeof(float) +
                                         (two ? sizeof(int64_t) + sizeof(int32_t) + sizeof(float) : 0)));
    s->gpu = (size_t)lanes * gpu1;
    s->gpu_sure = pl->k_assumed ? 0 : s->gpu;
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
    /* the matcher holds its own copy from here on; only the spike counts (the pair rows kept) stay */
    bs_mem_free(c->lt.support);
    bs_mem_free(c->lt.U);
    c->lt.support = NULL;
    c->lt.U = NULL;
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
