/*
 * sort.c - the stage order and batch loops of `boundsort sort` (see sort.h).
 */
#include "sort.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../io/batch.h"
#include "../io/npy.h"
#include "../mem/mem.h"
#include "../preprocess/preprocess.h"
#include "../cluster/cluster.h"
#include "../match/match.h"
#include "../common/progress.h"
#include "checkpoint.h"
#include "../cluster/stage_finish.h"
#include "plan.h"
#include "run_summary.h"
#include "../drift/stage_drift.h"
#include "stage_io.h"

void bs_sort_default_params(bs_sort_params *p)
{
    memset(p, 0, sizeof *p);
    p->highpass_hz = 300.0;
    p->highpass_order = 3;
    p->whiten_neighbors = BS_WHITEN_DEFAULT_NEIGHBORS;
    p->whiten_stride = 10;
    p->basis_stride = 5;
    bs_detect_default_params(&p->detect);
    p->min_template_spikes = 20;
    p->min_template_norm = 0.75;
    p->match_threshold = 8.0f;
    p->match_max_iter = 50;
    p->n_pc_chan = 10;
    p->duplicate_ms = 0.25;
    p->max_center_spikes = 200000;
    bs_drift_default_params(&p->drift);
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
    bs_drift drift;            /* the motion estimate (stage 1b) */
    bs_drift_corrector corr;   /* per-batch drift-corrected whitening */
    int have_corr;
    char stage_dir[4096];
} sort_ctx;

/* Read batch b and run the preprocessing configured in ctx->pp. */
static bs_status read_preprocessed(sort_ctx *ctx, int64_t b, float **x, int64_t *n_valid)
{
    BS_TRY(bs_batch_read(&ctx->reader, b, x, n_valid));
    bs_preprocess pp = ctx->pp;
    if (ctx->have_corr)
        BS_TRY(bs_drift_corrector_whitener(&ctx->corr, b, &pp.wh));
    return bs_preprocess_batch(&pp, *x, ctx->rec->probe.n_chan, ctx->width, ctx->scratch, ctx->scratch_bytes, NULL);
}

/* Batch b high-passed but not whitened (the drift peaks' input). */
static bs_status read_unwhitened(void *vctx, int64_t b, float **x, int64_t *n_valid)
{
    sort_ctx *ctx = vctx;
    BS_TRY(bs_batch_read(&ctx->reader, b, x, n_valid));
    bs_preprocess pp = ctx->pp;
    pp.wh = NULL;
    return bs_preprocess_batch(&pp, *x, ctx->rec->probe.n_chan, ctx->width, ctx->scratch, ctx->scratch_bytes, NULL);
}

/* Stage 1b: motion estimate from the high-passed batches (or, on resume,
 * the stored one), then the corrector every later read goes through. */
static bs_status stage_drift(sort_ctx *ctx, bs_checkpoint *ck, bs_run_summary *run)
{
    bs_stage_drift_args a = {.rec = ctx->rec,
                             .p = &ctx->p->drift,
                             .batch_samples = ctx->nb,
                             .width = ctx->width,
                             .halo = ctx->halo,
                             .n_batches = ctx->n_batches,
                             .read = read_unwhitened,
                             .read_ctx = ctx,
                             .out_dir = ctx->p->out_dir,
                             .quiet = ctx->p->quiet};
    const char *names[3];
    if (bs_checkpoint_done(ck, "drift")) {
        BS_TRY(bs_stage_drift_load(&a, ctx->stage_dir, &ctx->drift));
        bs_run_stage_resumed(run);
    } else {
        BS_TRY(bs_stage_drift(&a, &ctx->drift));
        BS_TRY(bs_stage_drift_store(ctx->stage_dir, &ctx->drift, names));
        BS_TRY(bs_checkpoint_mark(ck, "drift", 3, names));
        bs_checkpoint_test_kill("drift", BS_CKPT_END);
    }
    if (!bs_drift_any(&ctx->drift))
        return BS_OK;
    BS_TRY(bs_drift_corrector_init(&ctx->corr, &ctx->drift, &ctx->rec->probe, &ctx->wh));
    ctx->have_corr = 1;
    return BS_OK;
}

/* Stage 1: channel covariance of high-passed data -> local whitening. */
static bs_status stage_whitening(sort_ctx *ctx)
{
    int C = ctx->rec->probe.n_chan;
    bs_whiten_cov acc;
    BS_TRY(bs_whiten_cov_init(&acc, C));
    bs_status st = BS_OK;
    bs_progress pb;
    bs_progress_start(&pb, "whitening", "batches", ctx->p->quiet ? 0 : ctx->n_batches);
    for (int64_t b = 0; b < ctx->n_batches && st == BS_OK; b += ctx->p->whiten_stride) {
        float *x;
        int64_t n_valid;
        st = read_preprocessed(ctx, b, &x, &n_valid);
        if (st == BS_OK)
            st = bs_whiten_cov_add(&acc, x, ctx->width, ctx->halo, ctx->halo + n_valid);
        bs_progress_update(&pb, b + 1);
    }
    bs_progress_finish(&pb);
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
    bs_progress pb;
    bs_progress_start(&pb, "shapes", "batches", ctx->p->quiet ? 0 : ctx->n_batches);
    for (int64_t b = 0; b < ctx->n_batches && st == BS_OK && snips.n < snips.cap; b += ctx->p->basis_stride) {
        float *x;
        int64_t n_valid;
        st = read_preprocessed(ctx, b, &x, &n_valid);
        if (st == BS_OK)
            bs_snippets_collect(&snips, &ctx->p->detect, x, ctx->rec->probe.n_chan, ctx->width, ctx->halo, n_valid);
        bs_progress_update(&pb, b + 1);
    }
    bs_progress_finish(&pb);
    if (st == BS_OK)
        st = bs_basis_learn(&snips, &ctx->p->detect, basis);
    bs_snippets_free(&snips);
    return st;
}

/* Streamed per-spike outputs of detection, in .stages/detect/. */
enum { DET_TIMES, DET_POS, DET_XY, DET_SCORE, DET_FEATURES, DET_N };
static const char *const detect_files[DET_N] = {"detect/spike_times.npy", "detect/spike_pos.npy",
                                                "detect/spike_xy.npy", "detect/spike_score.npy",
                                                "detect/spike_features.npy"};

/* Rows of a stage's .npy file (a resumed stage's spike count). */
static bs_status stage_rows(const char *stage_dir, const char *rel, int64_t *n)
{
    char path[4200];
    bs_npy_header h;
    BS_TRY(bs_path_join(path, sizeof path, stage_dir, rel));
    BS_TRY(bs_npy_read_header(path, &h));
    *n = h.shape[0];
    return BS_OK;
}

static bs_status detect_files_append(bs_npy_set *f, const bs_detect_output *o)
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
        BS_TRY(bs_npy_writer_append(&f->w[DET_TIMES], t, n));
        BS_TRY(bs_npy_writer_append(&f->w[DET_POS], pos, n));
        BS_TRY(bs_npy_writer_append(&f->w[DET_XY], xy, n));
        BS_TRY(bs_npy_writer_append(&f->w[DET_SCORE], score, n));
        BS_TRY(bs_npy_writer_append(&f->w[DET_FEATURES], o->features + (size_t)s0 * o->feat_len, n));
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
    const bs_npy_file_spec spec[DET_N] = {
        {"spike_times.npy", BS_NPY_I64, 1, {0}},
        {"spike_pos.npy", BS_NPY_I32, 1, {0}},
        {"spike_xy.npy", BS_NPY_F32, 2, {2}},
        {"spike_score.npy", BS_NPY_F32, 1, {0}},
        {"spike_features.npy", BS_NPY_F32, 3, {grid->n_chans, basis->n_pcs}},
    };
    bs_npy_set files;
    bs_status st = bs_npy_set_open(&files, dir, DET_N, spec);
    bs_detect_output out;
    bs_detect_output_init(&out, grid->n_chans, basis->n_pcs);
    bs_progress pb;
    bs_progress_start(&pb, "detect", "batches", ctx->p->quiet ? 0 : ctx->n_batches);
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
        bs_progress_update(&pb, b + 1);
        bs_checkpoint_test_kill("detect", b + 1);
    }
    bs_progress_finish(&pb);
    bs_detect_output_free(&out);
    return bs_npy_set_finish(&files, st);
}

/* Learned templates for matching: channel-sparse, low-rank on the temporal
 * basis (see match.h). */
typedef struct {
    int K, n_sup, P;
    int32_t *support; /* K × n_sup, ascending */
    float *U;         /* K × n_sup × P */
} learned_templates;

static void learned_free(learned_templates *lt)
{
    bs_mem_free(lt->support);
    bs_mem_free(lt->U);
    memset(lt, 0, sizeof *lt);
}

typedef struct {
    int ch;
    double key;
} chan_rank;

static int rank_desc(const void *a, const void *b)
{
    const chan_rank *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return (x->ch > y->ch) - (x->ch < y->ch);
}

static int int_asc(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Norm of cluster j's mean waveform, whitened units: its mean features over
 * the center's channels (the PC basis is orthonormal, so this is the norm of
 * the waveform itself). */
static double centroid_norm(const bs_center_templates *ct, int j, int P)
{
    const float *f = ct->feat + (size_t)j * ct->n_chans * P;
    double e = 0;
    for (int i = 0; i < ct->n_chans * P; i++)
        e += (double)f[i] * f[i];
    return sqrt(e);
}

/* Append cluster j of a center as a template: its n_sup channels with the
 * largest mean-feature norm, padded with the channels nearest its peak
 * channel (zero weight) when the center has fewer, in ascending order. */
static bs_status append_template(learned_templates *lt, const bs_probe *probe, const bs_center_templates *ct,
                                 int j)
{
    int n_sup = lt->n_sup, P = lt->P, C = probe->n_chan;
    chan_rank *r = malloc((size_t)C * sizeof *r);
    int *pick = malloc((size_t)n_sup * sizeof *pick);
    uint8_t *used = calloc((size_t)C, 1);
    if (!r || !pick || !used) {
        free(r);
        free(pick);
        free(used);
        return bs_error(BS_ERR_MEMORY, "out of memory choosing template channels");
    }
    int n = 0;
    for (int i = 0; i < ct->n_chans; i++) {
        const float *f = ct->feat + ((size_t)j * ct->n_chans + i) * P;
        double e = 0;
        for (int q = 0; q < P; q++)
            e += (double)f[q] * f[q];
        r[n++] = (chan_rank){ct->chans[i], e};
    }
    qsort(r, (size_t)n, sizeof *r, rank_desc);
    int m = 0;
    for (int i = 0; i < n && m < n_sup; i++) {
        pick[m++] = r[i].ch;
        used[r[i].ch] = 1;
    }
    if (m < n_sup) { /* pad with the nearest channels to the peak, same shank first */
        int pk = ct->peak_chan[j];
        n = 0;
        for (int c = 0; c < C; c++)
            if (!used[c]) {
                double dx = probe->x_um[c] - probe->x_um[pk], dy = probe->y_um[c] - probe->y_um[pk];
                double d2 = dx * dx + dy * dy + (probe->shank[c] != probe->shank[pk] ? 1e12 : 0);
                r[n++] = (chan_rank){c, -d2};
            }
        qsort(r, (size_t)n, sizeof *r, rank_desc);
        for (int i = 0; i < n && m < n_sup; i++)
            pick[m++] = r[i].ch;
    }
    qsort(pick, (size_t)m, sizeof *pick, int_asc);
    int K = lt->K;
    int32_t *sup = bs_mem_realloc(lt->support, "sort/templates", (size_t)(K + 1) * n_sup * sizeof *sup);
    if (sup)
        lt->support = sup;
    float *U = sup ? bs_mem_realloc(lt->U, "sort/templates", (size_t)(K + 1) * n_sup * P * sizeof *U) : NULL;
    if (U)
        lt->U = U;
    bs_status st = (sup && U) ? BS_OK : BS_ERR_MEMORY;
    if (st == BS_OK) {
        for (int i = 0; i < n_sup; i++) {
            lt->support[(size_t)K * n_sup + i] = pick[i];
            float *dst = lt->U + ((size_t)K * n_sup + i) * P;
            for (int q = 0; q < P; q++)
                dst[q] = 0;
            for (int u = 0; u < ct->n_chans; u++)
                if (ct->chans[u] == pick[i])
                    memcpy(dst, ct->feat + ((size_t)j * ct->n_chans + u) * P, (size_t)P * sizeof *dst);
        }
        lt->K++;
    }
    free(r);
    free(pick);
    free(used);
    return st;
}

/* The clustering stage's checkpoint: supports (K × n_sup) and low-rank
 * weights (K × n_sup × P) of the learned templates. */
static bs_status store_templates(const char *stage_dir, const learned_templates *lt, const char **names)
{
    static const char *const n[2] = {"cluster/support.npy", "cluster/U.npy"};
    char path[4200], dir[4200];
    int64_t s1[2] = {lt->K, lt->n_sup}, s2[3] = {lt->K, lt->n_sup, lt->P};
    BS_TRY(bs_path_join(dir, sizeof dir, stage_dir, "cluster"));
    BS_TRY(bs_mkdir_p(dir));
    BS_TRY(bs_path_join(path, sizeof path, stage_dir, n[0]));
    BS_TRY(bs_npy_save(path, BS_NPY_I32, 2, s1, lt->support));
    BS_TRY(bs_path_join(path, sizeof path, stage_dir, n[1]));
    BS_TRY(bs_npy_save(path, BS_NPY_F32, 3, s2, lt->U));
    names[0] = n[0];
    names[1] = n[1];
    return BS_OK;
}

static bs_status load_templates(const char *stage_dir, int n_chan, int P, learned_templates *lt)
{
    char path[4200];
    bs_npy_header hs, hu;
    void *sup = NULL, *U = NULL;
    BS_TRY(bs_path_join(path, sizeof path, stage_dir, "cluster/support.npy"));
    BS_TRY(bs_npy_load_expect(path, "sort/templates", BS_NPY_I32, 2, &hs, &sup));
    bs_status st = bs_path_join(path, sizeof path, stage_dir, "cluster/U.npy");
    if (st == BS_OK)
        st = bs_npy_load_expect(path, "sort/templates", BS_NPY_F32, 3, &hu, &U);
    if (st == BS_OK && (hu.shape[0] != hs.shape[0] || hu.shape[1] != hs.shape[1] || hu.shape[2] != P ||
                        hs.shape[1] > n_chan || hs.shape[0] < 1))
        st = bs_error(BS_ERR_INPUT, "%s: checkpoint shapes disagree", path);
    if (st != BS_OK) {
        bs_mem_free(sup), bs_mem_free(U);
        return st;
    }
    lt->K = (int)hs.shape[0];
    lt->n_sup = (int)hs.shape[1];
    lt->P = P;
    lt->support = sup;
    lt->U = U;
    return BS_OK;
}

/* An entry of the per-center spike index (.stages/cluster/center_index.bin). */
typedef struct {
    int64_t i;   /* detected spike index */
    int32_t pos; /* its grid position */
    int32_t pad;
} center_item;
#define CENTER_READ 65536 /* index entries per read */

/* Stage 4: per spatial center, read its detected spikes back from disk,
 * cluster them, and keep every cluster of at least min_spikes as a template. */
static bs_status stage_cluster(sort_ctx *ctx, const bs_temporal_basis *basis, const bs_detect_grid *grid,
                               bs_sort_plan *plan, bs_run_summary *run, learned_templates *lt)
{
    const bs_probe *probe = &ctx->rec->probe;
    char dir[4200];
    BS_TRY(bs_path_join(dir, sizeof dir, ctx->stage_dir, "detect"));
    bs_cluster_params cp;
    bs_cluster_default_params(&cp);
    cp.fs_hz = ctx->rec->fs_hz;
    cp.dmin_um = ctx->p->detect.dmin_um;
    bs_cluster_centers centers = {0};
    bs_npy_rows r_t, r_pos, r_feat;
    memset(&r_t, 0, sizeof r_t);
    memset(&r_pos, 0, sizeof r_pos);
    memset(&r_feat, 0, sizeof r_feat);
    r_t.fd = r_pos.fd = r_feat.fd = -1;
    bs_bucket_file bk = {.fd = -1};
    int64_t *count = NULL;
    int64_t *sel = NULL;
    int32_t *spos = NULL;
    center_item *items = NULL;
    bs_status st = bs_centers_build(probe, grid, &cp, &centers);
    if (st == BS_OK)
        st = bs_npy_rows_open(&r_t, dir, "spike_times.npy", BS_NPY_I64);
    if (st == BS_OK)
        st = bs_npy_rows_open(&r_pos, dir, "spike_pos.npy", BS_NPY_I32);
    if (st == BS_OK)
        st = bs_npy_rows_open(&r_feat, dir, "spike_features.npy", BS_NPY_F32);
    int64_t n = st == BS_OK ? r_pos.h.shape[0] : 0, cap = ctx->p->max_center_spikes;
    if (st == BS_OK) { /* spike indices grouped by center on disk (in time order within a center) */
        count = bs_mem_calloc("sort/center-index", (size_t)centers.n_centers + 1, sizeof *count);
        spos = bs_mem_alloc("sort/center-index", CENTER_READ * sizeof *spos);
        items = bs_mem_alloc("sort/center-index", CENTER_READ * sizeof *items);
        st = count && spos && items ? BS_OK : BS_ERR_MEMORY;
        for (int64_t s0 = 0; s0 < n && st == BS_OK; s0 += CENTER_READ) {
            int64_t c = n - s0 < CENTER_READ ? n - s0 : CENTER_READ;
            st = bs_npy_rows_read(&r_pos, s0, c, spos);
            for (int64_t i = 0; i < c && st == BS_OK; i++)
                count[centers.pos_center[spos[i]]]++;
        }
        char path[4200], cdir[4200];
        if (st == BS_OK)
            st = bs_path_join(cdir, sizeof cdir, ctx->stage_dir, "cluster");
        if (st == BS_OK)
            st = bs_mkdir_p(cdir);
        if (st == BS_OK)
            st = bs_path_join(path, sizeof path, cdir, "center_index.bin");
        if (st == BS_OK)
            st = bs_bucket_open(&bk, path, centers.n_centers, count, sizeof(center_item), (size_t)4 << 20);
        for (int64_t s0 = 0; s0 < n && st == BS_OK; s0 += CENTER_READ) {
            int64_t c = n - s0 < CENTER_READ ? n - s0 : CENTER_READ;
            st = bs_npy_rows_read(&r_pos, s0, c, spos);
            for (int64_t i = 0; i < c && st == BS_OK; i++) {
                center_item it = {s0 + i, spos[i], 0};
                st = bs_bucket_add(&bk, centers.pos_center[spos[i]], &it);
            }
        }
        if (st == BS_OK)
            st = bs_bucket_finish(&bk);
    }
    if (st == BS_OK) { /* the real counts: re-plan this stage before the centers are read */
        int64_t largest = 0;
        for (int k = 0; k < centers.n_centers; k++)
            if (count[k] > largest)
                largest = count[k];
        bs_sort_plan_detected(plan, n, largest);
        bs_run_stage_replan(run, plan->stage[BS_STAGE_CLUSTER].peak);
        st = bs_sort_plan_check(plan, BS_STAGE_CLUSTER);
    }
    lt->n_sup = probe->n_chan < 32 ? probe->n_chan : 32;
    lt->P = basis->n_pcs;
    bs_progress pb;
    bs_progress_start(&pb, "cluster", "centers", ctx->p->quiet ? 0 : centers.n_centers);
    for (int k = 0; k < centers.n_centers && st == BS_OK; k++) {
        int64_t m_all = count[k], m = m_all;
        if (m == 0)
            continue;
        /* a center with more than max_center_spikes spikes is subsampled
         * evenly in time (a parameter: it shapes the result, like the batch):
         * item i*m/cap for i < cap, picked while its index is read in blocks */
        if (cap > 0 && m > cap)
            m = cap;
        sel = bs_mem_alloc("sort/center-index", (size_t)m * sizeof *sel);
        int32_t *pos_of = bs_mem_alloc("sort/center-index", (size_t)m * sizeof *pos_of);
        if (!sel || !pos_of) {
            bs_mem_free(pos_of);
            st = BS_ERR_MEMORY;
            break;
        }
        int64_t want = 0;
        for (int64_t s0 = 0; s0 < m_all && st == BS_OK && want < m; s0 += CENTER_READ) {
            int64_t c = m_all - s0 < CENTER_READ ? m_all - s0 : CENTER_READ;
            st = bs_bucket_read(&bk, k, s0, c, items);
            while (st == BS_OK && want < m) {
                int64_t j = m == m_all ? want : (int64_t)((double)want * (double)m_all / (double)m);
                if (j >= s0 + c)
                    break;
                sel[want] = items[j - s0].i;
                pos_of[want++] = items[j - s0].pos;
            }
        }
        bs_detected_spike *spk = bs_mem_calloc("sort/center-spikes", (size_t)m, sizeof *spk);
        int64_t *times = bs_mem_alloc("sort/center-spikes", (size_t)m * sizeof *times);
        float *feat = bs_mem_alloc("sort/center-features", (size_t)m * r_feat.row_bytes);
        int32_t *labels = bs_mem_alloc("sort/center-labels", (size_t)m * sizeof *labels);
        bs_center_templates ct = {0};
        st = spk && times && feat && labels ? bs_npy_rows_gather(&r_t, sel, m, times) : BS_ERR_MEMORY;
        if (st == BS_OK)
            st = bs_npy_rows_gather(&r_feat, sel, m, feat);
        if (st == BS_OK) {
            for (int64_t i = 0; i < m; i++) {
                spk[i].t = times[i];
                spk[i].pos = pos_of[i];
            }
            st = bs_cluster_center(&cp, &centers, k, grid, basis, spk, feat, m, labels, &ct);
        }
        /* a cluster too small, or whose mean waveform is well under the matching threshold (its matched
           spikes would be mostly noise crossings that the template happens to fit), makes no template */
        for (int j = 0; j < ct.n_clusters && st == BS_OK; j++)
            if (ct.n_spikes[j] >= ctx->p->min_template_spikes &&
                centroid_norm(&ct, j, lt->P) >= ctx->p->min_template_norm * ctx->p->match_threshold)
                st = append_template(lt, probe, &ct, j);
        bs_center_templates_free(&ct);
        bs_mem_free(spk);
        bs_mem_free(times);
        bs_mem_free(feat);
        bs_mem_free(labels);
        bs_mem_free(sel);
        bs_mem_free(pos_of);
        sel = NULL;
        bs_progress_update(&pb, k + 1);
        bs_checkpoint_test_kill("cluster", k + 1);
    }
    bs_progress_finish(&pb);
    if (st == BS_OK && lt->K == 0)
        st = bs_error(BS_ERR_INPUT,
                      "%s: no unit with at least %d spikes and a mean waveform of norm >= %g was found "
                      "(%lld spikes detected)",
                      ctx->rec->data_path, ctx->p->min_template_spikes,
                      ctx->p->min_template_norm * ctx->p->match_threshold, (long long)n);
    bs_mem_free(sel);
    bs_mem_free(count);
    bs_mem_free(spos);
    bs_mem_free(items);
    bs_bucket_close(&bk);
    bs_npy_rows_close(&r_t);
    bs_npy_rows_close(&r_pos);
    bs_npy_rows_close(&r_feat);
    bs_centers_free(&centers);
    return st;
}

/* Stage 5 output files in .stages/match/. */
enum { MAT_TIMES, MAT_TEMPLATES, MAT_AMPS, MAT_FEATURES, MAT_N };
static const char *const match_files[MAT_N] = {"match/spike_times.npy", "match/spike_templates.npy",
                                               "match/amplitudes.npy", "match/pc_features.npy"};

/* Per template, the n_pc_chan support entries with the largest weights
 * (pc_feature_ind), as indices into its support. */
static void choose_pc_channels(const bs_match_templates *mt, int n_pc_chan, int32_t *sup_idx, int32_t *chan)
{
    int P = mt->n_pc;
    chan_rank r[BS_MATCH_MAX_SUP];
    for (int k = 0; k < mt->K; k++) {
        for (int i = 0; i < mt->n_sup; i++) {
            const float *u = mt->U + ((size_t)k * mt->n_sup + i) * P;
            double e = 0;
            for (int q = 0; q < P; q++)
                e += (double)u[q] * u[q];
            r[i] = (chan_rank){i, e};
        }
        qsort(r, (size_t)mt->n_sup, sizeof r[0], rank_desc);
        for (int j = 0; j < n_pc_chan; j++) {
            sup_idx[(size_t)k * n_pc_chan + j] = r[j].ch;
            chan[(size_t)k * n_pc_chan + j] = mt->support[(size_t)k * mt->n_sup + r[j].ch];
        }
    }
}

/* Stage 5: peel every batch with the learned templates; spikes and their PC
 * features (residual plus the spike's own fitted template, on the template's
 * pc channels) stream to .stages/match/. */
static bs_status stage_match(sort_ctx *ctx, const bs_temporal_basis *basis, const bs_match_templates *mt,
                             const int32_t *pc_sup_idx, bs_pair_mode pair_mode, int64_t *n_matched)
{
    char dir[4200];
    BS_TRY(bs_path_join(dir, sizeof dir, ctx->stage_dir, "match"));
    BS_TRY(bs_mkdir_p(dir));
    int P = mt->n_pc, nt = mt->nt, nb = mt->nt_before, npc = ctx->p->n_pc_chan;
    bs_pair_table pt = {0};
    bs_peel_ws ws = {0};
    bs_peel_params pp;
    bs_peel_params_default(&pp);
    pp.threshold = ctx->p->match_threshold;
    pp.max_iter = ctx->p->match_max_iter;
    bs_npy_set files = {.n_open = 0};
    bs_status st = bs_pair_table_build(mt, pair_mode, &pt);
    if (st == BS_OK)
        st = bs_peel_ws_alloc(mt, ctx->width, pp.max_iter, 0, &ws);
    bs_spike *spk = st == BS_OK ? bs_mem_alloc("sort/match-spikes", (size_t)ws.max_spikes * sizeof *spk) : NULL;
    int64_t *times = spk ? bs_mem_alloc("sort/match-spikes", (size_t)ws.max_spikes * sizeof *times) : NULL;
    int32_t *tmpl = times ? bs_mem_alloc("sort/match-spikes", (size_t)ws.max_spikes * sizeof *tmpl) : NULL;
    float *amp = tmpl ? bs_mem_alloc("sort/match-spikes", (size_t)ws.max_spikes * sizeof *amp) : NULL;
    float *feat = amp ? bs_mem_alloc("sort/match-features", (size_t)ws.max_spikes * P * npc * sizeof *feat) : NULL;
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
        int iters = 0;
        st = read_preprocessed(ctx, b, &x, &n_valid);
        if (st == BS_OK)
            st = bs_peel_batch(mt, &pt, x, (size_t)ctx->width, ctx->width, t0_abs, ctx->halo, ctx->halo + n_valid,
                               &pp, &ws, spk, &n_out, &iters);
#pragma omp parallel for schedule(static)
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
    bs_pair_table_free(&pt);
    return st;
}

/* What the context owns (safe on a zeroed context). */
static void ctx_release(sort_ctx *ctx)
{
    if (ctx->have_corr)
        bs_drift_corrector_free(&ctx->corr);
    bs_drift_free(&ctx->drift);
    if (ctx->have_wh)
        bs_whitener_free(&ctx->wh);
    bs_mem_free(ctx->scratch);
    bs_batch_reader_close(&ctx->reader);
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
    if (p->threads > 0)
        omp_set_num_threads(p->threads);
    /* plan before touching the data or the output folder */
    bs_sort_plan plan;
    BS_TRY(bs_sort_plan_make(rec, p, omp_get_max_threads(), p->mem_budget, 0, &plan));
    BS_TRY(bs_sort_plan_check(&plan, -1));
    if (!p->quiet) {
        double gib = (double)((size_t)1 << 30);
        bs_log_info("memory plan: predicted peak %.2f GiB of tracked memory (budget %.2f GiB), %lld batches; "
                    "`boundsort plan` shows the details",
                    (double)plan.peak / gib, (double)p->mem_budget / gib, (long long)plan.n_batches);
    }
    BS_TRY(bs_mkdir_p(p->out_dir));
    BS_TRY(bs_path_join(ctx.stage_dir, sizeof ctx.stage_dir, p->out_dir, ".stages"));
    BS_TRY(bs_mkdir_p(ctx.stage_dir));
    size_t old_budget = bs_mem_budget(BS_DEV_HOST);
    if (p->mem_budget)
        bs_mem_set_budget(BS_DEV_HOST, p->mem_budget);
    bs_run_summary run;
    bs_run_summary_init(&run, p->mem_budget);
    if (p->mem_trace)
        snprintf(run.mem_trace, sizeof run.mem_trace, "%s", p->mem_trace);

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
    double t = bs_now_s();
#define STAGE_BEGIN(id) bs_run_stage_begin(&run, plan.stage[id].name, plan.stage[id].peak, plan.stage[id].strategy)
    bs_checkpoint ck = {.manifest = NULL};
    if (st == BS_OK)
        st = bs_checkpoint_open(&ck, ctx.stage_dir, rec, p, p->resume);
    const char *names[BS_NPY_SET_MAX];
    STAGE_BEGIN(BS_STAGE_WHITENING);
    if (st == BS_OK && bs_checkpoint_done(&ck, "whitening")) {
        st = bs_load_whitener(ctx.stage_dir, rec->probe.n_chan, &ctx.wh);
        if (st == BS_OK) {
            ctx.have_wh = 1;
            ctx.pp.wh = &ctx.wh;
            bs_run_stage_resumed(&run);
        }
    } else if (st == BS_OK) {
        st = stage_whitening(&ctx);
        if (st == BS_OK)
            st = bs_store_whitener(ctx.stage_dir, &ctx.wh, names);
        if (st == BS_OK)
            st = bs_checkpoint_mark(&ck, "whitening", 3, names);
        bs_checkpoint_test_kill("whitening", BS_CKPT_END);
    }
    bs_run_stage_end(&run);
    if (!p->no_drift) {
        STAGE_BEGIN(BS_STAGE_DRIFT);
        if (st == BS_OK)
            st = stage_drift(&ctx, &ck, &run);
        bs_run_stage_end(&run);
    } else if (st == BS_OK) {
        st = bs_stage_drift_remove(p->out_dir);
    }
    if (st != BS_OK || p->drift_only) {
        bs_checkpoint_close(&ck);
        bs_mem_set_budget(BS_DEV_HOST, old_budget);
        ctx_release(&ctx);
        return st;
    }
    bs_temporal_basis basis = {0};
    bs_detect_grid grid = {0};
    STAGE_BEGIN(BS_STAGE_BASIS);
    if (st == BS_OK && bs_checkpoint_done(&ck, "basis")) {
        st = bs_load_basis(ctx.stage_dir, &p->detect, &basis);
        bs_run_stage_resumed(&run);
    } else if (st == BS_OK) {
        st = stage_basis(&ctx, &basis);
        if (st == BS_OK)
            st = bs_store_basis(ctx.stage_dir, &basis, names);
        if (st == BS_OK)
            st = bs_checkpoint_mark(&ck, "basis", 2, names);
    }
    bs_run_stage_end(&run);
    STAGE_BEGIN(BS_STAGE_DETECT);
    if (st == BS_OK)
        st = bs_grid_build(&rec->probe, &p->detect, &grid);
    int64_t n_detected = 0;
    if (st == BS_OK && bs_checkpoint_done(&ck, "detect")) {
        st = stage_rows(ctx.stage_dir, "detect/spike_times.npy", &n_detected);
        bs_run_stage_resumed(&run);
    } else if (st == BS_OK) {
        st = stage_detect(&ctx, &basis, &grid, &n_detected);
        if (st == BS_OK)
            st = bs_checkpoint_mark(&ck, "detect", DET_N, detect_files);
        bs_checkpoint_test_kill("detect", BS_CKPT_END);
    }
    bs_run_stage_end(&run);
    if (st == BS_OK && !p->quiet)
        bs_log_info("detected %lld spikes in %.1f s", (long long)n_detected, bs_now_s() - t);
    learned_templates lt = {0};
    STAGE_BEGIN(BS_STAGE_CLUSTER);
    if (st == BS_OK && bs_checkpoint_done(&ck, "cluster")) {
        st = load_templates(ctx.stage_dir, rec->probe.n_chan, p->detect.n_pcs, &lt);
        bs_run_stage_resumed(&run);
    } else if (st == BS_OK) {
        st = stage_cluster(&ctx, &basis, &grid, &plan, &run, &lt);
        if (st == BS_OK)
            st = store_templates(ctx.stage_dir, &lt, names);
        if (st == BS_OK)
            st = bs_checkpoint_mark(&ck, "cluster", 2, names);
        bs_checkpoint_test_kill("cluster", BS_CKPT_END);
    }
    bs_run_stage_end(&run);
    bs_match_templates mt = {0};
    int have_mt = 0;
    if (st == BS_OK) { /* the real template count and pair count: re-plan matching */
        int64_t nnz = bs_pair_count(lt.K, lt.n_sup, lt.support, rec->probe.n_chan);
        bs_sort_plan_update(&plan, lt.K, nnz, -1);
        st = bs_sort_plan_check(&plan, BS_STAGE_MATCH);
    }
    STAGE_BEGIN(BS_STAGE_MATCH);
    if (st == BS_OK) {
        st = bs_match_templates_create("learned templates", rec->probe.n_chan, p->detect.nt, p->detect.nt_before,
                                       basis.n_pcs, basis.wpca, lt.K, lt.n_sup, lt.support, lt.U, &mt);
        have_mt = st == BS_OK;
    }
    int npc = p->n_pc_chan < lt.n_sup ? p->n_pc_chan : lt.n_sup;
    bs_sort_params p2 = *p; /* the pc channel count is capped by the support */
    p2.n_pc_chan = npc;
    ctx.p = &p2;
    int32_t *pc_idx = NULL, *pc_chan = NULL;
    if (st == BS_OK) {
        pc_idx = bs_mem_alloc("sort/pc-channels", (size_t)mt.K * npc * sizeof *pc_idx);
        pc_chan = bs_mem_alloc("sort/pc-channels", (size_t)mt.K * npc * sizeof *pc_chan);
        if (!pc_idx || !pc_chan)
            st = BS_ERR_MEMORY;
        else
            choose_pc_channels(&mt, npc, pc_idx, pc_chan);
    }
    int64_t n_matched = 0, n_final = 0;
    int n_units = 0;
    if (st == BS_OK && bs_checkpoint_done(&ck, "match")) {
        st = stage_rows(ctx.stage_dir, "match/spike_times.npy", &n_matched);
        bs_run_stage_resumed(&run);
    } else if (st == BS_OK) {
        st = stage_match(&ctx, &basis, &mt, pc_idx, plan.pair_mode, &n_matched);
        if (st == BS_OK)
            st = bs_checkpoint_mark(&ck, "match", MAT_N, match_files);
        bs_checkpoint_test_kill("match", BS_CKPT_END);
    }
    bs_run_stage_end(&run);
    if (st == BS_OK && !p->quiet)
        bs_log_info("matched %lld spikes with %d templates", (long long)n_matched, mt.K);
    if (st == BS_OK) { /* the real spike count: re-plan the finishing stage */
        bs_sort_plan_update(&plan, lt.K, plan.pair_nnz, n_matched);
        st = bs_sort_plan_check(&plan, BS_STAGE_FINISH);
    }
    STAGE_BEGIN(BS_STAGE_FINISH);
    if (st == BS_OK) {
        bs_finish_input fin = {.rec = rec,
                               .stage_dir = ctx.stage_dir,
                               .out_dir = p->out_dir,
                               .wh = &ctx.wh,
                               .mt = &mt,
                               .pc_chan = pc_chan,
                               .n_pc_chan = npc,
                               .duplicate_ms = p->duplicate_ms,
                               .quiet = p->quiet};
        st = bs_finish_run(&fin, &n_units, &n_final);
    }
    bs_run_stage_end(&run);
#undef STAGE_BEGIN
    if (st == BS_OK && !p->quiet)
        bs_log_info("sorted in %.1f s: %d units, %lld spikes, Phy folder %s", bs_now_s() - t, n_units,
                    (long long)n_final, p->out_dir);
    if (st == BS_OK) {
        for (int i = 0; i < run.n; i++)
            if (run.stage[i].tracked_peak > run.stage[i].planned_peak)
                bs_log_warn("stage %s used %zu bytes of tracked memory, more than the %zu it planned (a bug in "
                            "the plan)", run.stage[i].name, run.stage[i].tracked_peak, run.stage[i].planned_peak);
        if (!p->quiet)
            bs_run_summary_print(&run, stderr);
        char *plan_json = bs_sort_plan_json(&plan);
        run.plan_json = plan_json;
        st = bs_run_summary_write(&run, p->out_dir);
        free(plan_json);
    }
    bs_mem_free(pc_idx);
    bs_mem_free(pc_chan);
    if (have_mt)
        bs_match_templates_free(&mt);
    learned_free(&lt);
    bs_grid_free(&grid);
    bs_basis_free(&basis);
    bs_checkpoint_close(&ck);
    bs_mem_set_budget(BS_DEV_HOST, old_budget);
    ctx_release(&ctx);
    return st;
}
