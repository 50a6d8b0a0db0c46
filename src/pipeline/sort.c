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
#include "../export/phy.h"
#include "stage_drift.h"
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
    p->match_threshold = 8.0f;
    p->match_max_iter = 50;
    p->n_pc_chan = 10;
    p->duplicate_ms = 0.25;
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

/* Stage 1b: motion estimate from the high-passed batches, then the
 * corrector every later read goes through. */
static bs_status stage_drift(sort_ctx *ctx)
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
    BS_TRY(bs_stage_drift(&a, &ctx->drift));
    if (!bs_drift_any(&ctx->drift))
        return BS_OK;
    BS_TRY(bs_drift_corrector_init(&ctx->corr, &ctx->drift, &ctx->rec->probe, &ctx->wh));
    ctx->have_corr = 1;
    return BS_OK;
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
enum { DET_TIMES, DET_POS, DET_XY, DET_SCORE, DET_FEATURES, DET_N };

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

/* Stage 4: per spatial center, read its detected spikes back from disk,
 * cluster them, and keep every cluster of at least min_spikes as a template. */
static bs_status stage_cluster(sort_ctx *ctx, const bs_temporal_basis *basis, const bs_detect_grid *grid,
                               learned_templates *lt)
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
    int64_t *idx = NULL, *first = NULL;
    int32_t *pos = NULL;
    bs_status st = bs_centers_build(probe, grid, &cp, &centers);
    if (st == BS_OK)
        st = bs_npy_rows_open(&r_t, dir, "spike_times.npy", BS_NPY_I64);
    if (st == BS_OK)
        st = bs_npy_rows_open(&r_pos, dir, "spike_pos.npy", BS_NPY_I32);
    if (st == BS_OK)
        st = bs_npy_rows_open(&r_feat, dir, "spike_features.npy", BS_NPY_F32);
    int64_t n = st == BS_OK ? r_pos.h.shape[0] : 0;
    if (st == BS_OK) { /* spike indices grouped by center (counting sort keeps time order) */
        pos = bs_mem_alloc("sort/center-index", (size_t)(n ? n : 1) * sizeof *pos);
        idx = bs_mem_alloc("sort/center-index", (size_t)(n ? n : 1) * sizeof *idx);
        first = bs_mem_calloc("sort/center-index", (size_t)centers.n_centers + 1, sizeof *first);
        st = pos && idx && first ? bs_npy_rows_read(&r_pos, 0, n, pos) : BS_ERR_MEMORY;
    }
    if (st == BS_OK) {
        for (int64_t i = 0; i < n; i++)
            first[centers.pos_center[pos[i]] + 1]++;
        for (int k = 0; k < centers.n_centers; k++)
            first[k + 1] += first[k];
        int64_t *fill = calloc((size_t)centers.n_centers, sizeof *fill);
        if (!fill)
            st = BS_ERR_MEMORY;
        for (int64_t i = 0; i < n && fill; i++) {
            int k = centers.pos_center[pos[i]];
            idx[first[k] + fill[k]++] = i;
        }
        free(fill);
    }
    lt->n_sup = probe->n_chan < 32 ? probe->n_chan : 32;
    lt->P = basis->n_pcs;
    double t0 = now_s();
    for (int k = 0; k < centers.n_centers && st == BS_OK; k++) {
        int64_t m = first[k + 1] - first[k];
        if (m == 0)
            continue;
        bs_detected_spike *spk = bs_mem_calloc("sort/center-spikes", (size_t)m, sizeof *spk);
        int64_t *times = bs_mem_alloc("sort/center-spikes", (size_t)m * sizeof *times);
        float *feat = bs_mem_alloc("sort/center-features", (size_t)m * r_feat.row_bytes);
        int32_t *labels = bs_mem_alloc("sort/center-labels", (size_t)m * sizeof *labels);
        bs_center_templates ct = {0};
        st = spk && times && feat && labels ? bs_npy_rows_gather(&r_t, idx + first[k], m, times) : BS_ERR_MEMORY;
        if (st == BS_OK)
            st = bs_npy_rows_gather(&r_feat, idx + first[k], m, feat);
        if (st == BS_OK) {
            for (int64_t i = 0; i < m; i++) {
                spk[i].t = times[i];
                spk[i].pos = pos[idx[first[k] + i]];
            }
            st = bs_cluster_center(&cp, &centers, k, grid, basis, spk, feat, m, labels, &ct);
        }
        for (int j = 0; j < ct.n_clusters && st == BS_OK; j++)
            if (ct.n_spikes[j] >= ctx->p->min_template_spikes)
                st = append_template(lt, probe, &ct, j);
        bs_center_templates_free(&ct);
        bs_mem_free(spk);
        bs_mem_free(times);
        bs_mem_free(feat);
        bs_mem_free(labels);
        progress(ctx, "cluster", k + 1, centers.n_centers, t0);
    }
    if (st == BS_OK && lt->K == 0)
        st = bs_error(BS_ERR_INPUT, "%s: no unit with at least %d spikes was found (%lld spikes detected)",
                      ctx->rec->data_path, ctx->p->min_template_spikes, (long long)n);
    bs_mem_free(pos);
    bs_mem_free(idx);
    bs_mem_free(first);
    bs_npy_rows_close(&r_t);
    bs_npy_rows_close(&r_pos);
    bs_npy_rows_close(&r_feat);
    bs_centers_free(&centers);
    return st;
}

/* Stage 5 output files in .stages/match/. */
enum { MAT_TIMES, MAT_TEMPLATES, MAT_AMPS, MAT_FEATURES, MAT_N };

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
                             const int32_t *pc_sup_idx, int64_t *n_matched)
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
    bs_status st = bs_pair_table_build(mt, BS_PAIR_FULL, &pt);
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
    double t0 = now_s();
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
        progress(ctx, "match", b + 1, ctx->n_batches, t0);
    }
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

/* Stages 6 and 7: CCG-guided merges of the templates' spike trains,
 * duplicate removal, good/mua labels, and the Phy folder. spike_templates are
 * the matching templates (their pc_feature_ind describe each spike's
 * features); spike_clusters the merged units. */
static bs_status stage_finish_export(sort_ctx *ctx, const bs_match_templates *mt, const int32_t *pc_chan,
                                     int *n_units, int64_t *n_spikes_out)
{
    const bs_recording *rec = ctx->rec;
    const bs_probe *probe = &rec->probe;
    int K = mt->K, C = probe->n_chan, nt = mt->nt, P = mt->n_pc, npc = ctx->p->n_pc_chan;
    char dir[4200];
    BS_TRY(bs_path_join(dir, sizeof dir, ctx->stage_dir, "match"));
    bs_npy_rows r_t, r_k, r_a, r_f;
    memset(&r_t, 0, sizeof r_t), memset(&r_k, 0, sizeof r_k), memset(&r_a, 0, sizeof r_a), memset(&r_f, 0, sizeof r_f);
    r_t.fd = r_k.fd = r_a.fd = r_f.fd = -1;
    bs_status st = bs_npy_rows_open(&r_t, dir, "spike_times.npy", BS_NPY_I64);
    if (st == BS_OK)
        st = bs_npy_rows_open(&r_k, dir, "spike_templates.npy", BS_NPY_I32);
    if (st == BS_OK)
        st = bs_npy_rows_open(&r_a, dir, "amplitudes.npy", BS_NPY_F32);
    if (st == BS_OK)
        st = bs_npy_rows_open(&r_f, dir, "pc_features.npy", BS_NPY_F32);
    int64_t n = st == BS_OK ? r_t.h.shape[0] : 0;
    size_t nn = (size_t)(n ? n : 1);
    int64_t *t = bs_mem_alloc("sort/final-spikes", nn * sizeof *t);
    int64_t *ta = bs_mem_alloc("sort/final-spikes", nn * sizeof *ta);
    int32_t *k0 = bs_mem_alloc("sort/final-spikes", nn * sizeof *k0);
    int32_t *clu = bs_mem_alloc("sort/final-spikes", nn * sizeof *clu);
    int64_t *order = bs_mem_alloc("sort/final-spikes", nn * sizeof *order);
    if (st == BS_OK && !(t && ta && k0 && clu && order))
        st = BS_ERR_MEMORY;
    if (st == BS_OK)
        st = bs_npy_rows_read(&r_t, 0, n, t);
    if (st == BS_OK)
        st = bs_npy_rows_read(&r_k, 0, n, k0);
    /* sparse waveforms of the matching templates, for similarity and merges */
    bs_sparse_templates T = {0};
    int *nsup = malloc((size_t)K * sizeof *nsup);
    if (st == BS_OK && !nsup)
        st = BS_ERR_MEMORY;
    for (int k = 0; k < K && nsup; k++)
        nsup[k] = mt->n_sup;
    if (st == BS_OK)
        st = bs_sparse_templates_alloc(&T, K, nt, nsup);
    free(nsup);
    for (int k = 0; k < K && st == BS_OK; k++) {
        for (int i = 0; i < mt->n_sup; i++)
            T.chans[T.off[k] + i] = mt->support[(size_t)k * mt->n_sup + i];
        bs_match_template_waveform(mt, k, T.wave + T.off[k] * nt);
    }
    int n_merges = 0, K2 = K;
    if (st == BS_OK) {
        memcpy(ta, t, (size_t)n * sizeof *t);
        memcpy(clu, k0, (size_t)n * sizeof *clu);
        bs_merge_params mp;
        bs_merge_default_params(&mp, rec->fs_hz);
        st = bs_merge_ccg(&mp, ta, clu, n, &T, &n_merges);
        K2 = T.K;
    }
    if (st == BS_OK)
        st = bs_spike_order(ta, n, order);
    /* sorted, inside the recording, without same-unit duplicates */
    uint8_t *keep = bs_mem_alloc("sort/final-spikes", nn);
    int64_t *ts = bs_mem_alloc("sort/final-spikes", nn * sizeof *ts);
    int32_t *cs = bs_mem_alloc("sort/final-spikes", nn * sizeof *cs);
    if (st == BS_OK && !(keep && ts && cs))
        st = BS_ERR_MEMORY;
    int64_t m = 0, n_kept = 0;
    for (int64_t i = 0; i < n && st == BS_OK; i++) {
        int64_t j = order[i];
        if (ta[j] < 0 || ta[j] >= rec->n_samples)
            continue;
        order[m] = j;
        ts[m] = ta[j];
        cs[m++] = clu[j];
    }
    if (st == BS_OK)
        st = bs_remove_duplicates(ts, cs, m, K2, (int64_t)llround(ctx->p->duplicate_ms * rec->fs_hz / 1000.0), keep,
                                  &n_kept);
    int64_t w = 0;
    for (int64_t i = 0; i < m && st == BS_OK; i++)
        if (keep[i]) {
            order[w] = order[i];
            ts[w] = ts[i];
            cs[w++] = cs[i];
        }
    uint8_t *good = bs_mem_calloc("sort/final-units", (size_t)K2 + 1, 1);
    double *contam = bs_mem_calloc("sort/final-units", (size_t)K2 + 1, sizeof *contam);
    double *amp_sum = bs_mem_calloc("sort/final-units", (size_t)K + K2 + 1, sizeof *amp_sum);
    int64_t *amp_n = bs_mem_calloc("sort/final-units", (size_t)K + K2 + 1, sizeof *amp_n);
    if (st == BS_OK && !(good && contam && amp_sum && amp_n))
        st = BS_ERR_MEMORY;
    if (st == BS_OK)
        st = bs_cluster_labels(ts, cs, w, K2, rec->fs_hz, 0.2, good, contam);

    /* the Phy folder */
    bs_phy_writer *pw = NULL;
    char dat[4096];
    if (st == BS_OK)
        st = bs_phy_resolve_dat_path(rec->data_path, dat, sizeof dat);
    static const char *dtype_names[] = {"int16", "uint16", "int32", "float32"};
    bs_phy_header h = {.dat_path = dat,
                       .n_channels_dat = rec->n_cols,
                       .dtype = dtype_names[rec->dtype],
                       .offset_bytes = rec->data_offset,
                       .sample_rate_hz = rec->fs_hz,
                       .hp_filtered = 0,
                       .n_samples = rec->n_samples,
                       .n_chan = C,
                       .nt = nt,
                       .n_templates = K,
                       .n_pc = P,
                       .n_pc_chan = npc};
    if (st == BS_OK)
        st = bs_phy_writer_open(&pw, ctx->p->out_dir, &h);
    if (st == BS_OK)
        st = bs_phy_writer_set_probe(pw, probe);
    float *W = NULL, *Winv = NULL;
    if (st == BS_OK) {
        W = bs_mem_alloc("sort/export-whitening", (size_t)C * C * sizeof *W);
        Winv = bs_mem_alloc("sort/export-whitening", (size_t)C * C * sizeof *Winv);
        st = W && Winv ? BS_OK : BS_ERR_MEMORY;
    }
    if (st == BS_OK) {
        bs_whitener_dense(&ctx->wh, W);
        st = bs_whitener_inverse(&ctx->wh, 1e-5, Winv);
    }
    if (st == BS_OK)
        st = bs_phy_writer_set_whitening(pw, W, Winv);
    /* spikes, streamed in blocks; amplitudes and features gathered by index */
    enum { BLOCK = 8192 };
    int32_t *bk = bs_mem_alloc("sort/export-block", BLOCK * sizeof *bk);
    float *ba = bs_mem_alloc("sort/export-block", BLOCK * sizeof *ba);
    float *bf = bs_mem_alloc("sort/export-block", (size_t)BLOCK * P * npc * sizeof *bf);
    if (st == BS_OK && !(bk && ba && bf))
        st = BS_ERR_MEMORY;
    for (int64_t s0 = 0; s0 < w && st == BS_OK; s0 += BLOCK) {
        int64_t cnt = w - s0 < BLOCK ? w - s0 : BLOCK;
        /* spikes are nearly in matching order: gather coalesces the runs into single reads */
        st = bs_npy_rows_gather(&r_a, order + s0, cnt, ba);
        if (st == BS_OK)
            st = bs_npy_rows_gather(&r_f, order + s0, cnt, bf);
        for (int64_t i = 0; i < cnt && st == BS_OK; i++) {
            bk[i] = k0[order[s0 + i]];
            amp_sum[bk[i]] += ba[i];
            amp_n[bk[i]]++;
            amp_sum[K + cs[s0 + i]] += ba[i];
            amp_n[K + cs[s0 + i]]++;
        }
        if (st == BS_OK)
            st = bs_phy_writer_append_spikes(pw, cnt, ts + s0, bk, cs + s0, ba, bf);
    }
    /* templates: unit-norm waveforms scaled by their spikes' mean amplitude */
    float *dense = bs_mem_alloc("sort/export-template", (size_t)nt * C * sizeof *dense);
    float *wave = bs_mem_alloc("sort/export-template", (size_t)mt->n_sup * nt * sizeof *wave);
    if (st == BS_OK && !(dense && wave))
        st = BS_ERR_MEMORY;
    for (int k = 0; k < K && st == BS_OK; k++) {
        double a = amp_n[k] ? amp_sum[k] / (double)amp_n[k] : 1.0;
        memset(dense, 0, (size_t)nt * C * sizeof *dense);
        bs_match_template_waveform(mt, k, wave);
        for (int i = 0; i < mt->n_sup; i++) {
            int c = mt->support[(size_t)k * mt->n_sup + i];
            for (int u = 0; u < nt; u++)
                dense[(size_t)u * C + c] = (float)(a * wave[(size_t)i * nt + u]);
        }
        st = bs_phy_writer_append_templates(pw, 1, dense, pc_chan + (size_t)k * npc);
    }
    /* units */
    bs_phy_cluster *rows = st == BS_OK ? calloc((size_t)K2 + 1, sizeof *rows) : NULL;
    int n_rows = 0;
    for (int k = 0; k < K2 && rows; k++) {
        if (!amp_n[K + k])
            continue;
        rows[n_rows++] = (bs_phy_cluster){k, good[k] ? "good" : "mua", good[k] ? "good" : "mua",
                                           amp_sum[K + k] / (double)amp_n[K + k], 100.0 * contam[k]};
    }
    if (st == BS_OK && !rows)
        st = BS_ERR_MEMORY;
    if (st == BS_OK)
        st = bs_phy_writer_set_clusters(pw, n_rows, rows);
    free(rows);
    if (pw)
        st = st == BS_OK ? bs_phy_writer_close(pw) : (bs_phy_writer_abort(pw), st);
    *n_units = n_rows;
    *n_spikes_out = w;
    if (st == BS_OK && !ctx->p->quiet)
        bs_log_info("%d templates, %d merges, %d units, %lld spikes (%lld duplicates removed)", K, n_merges, n_rows,
                    (long long)w, (long long)(m - w));
    bs_mem_free(bk), bs_mem_free(ba), bs_mem_free(bf), bs_mem_free(dense), bs_mem_free(wave);
    bs_mem_free(W), bs_mem_free(Winv), bs_mem_free(good), bs_mem_free(contam), bs_mem_free(amp_sum),
        bs_mem_free(amp_n);
    bs_mem_free(keep), bs_mem_free(ts), bs_mem_free(cs), bs_mem_free(t), bs_mem_free(ta), bs_mem_free(k0),
        bs_mem_free(clu), bs_mem_free(order);
    bs_sparse_templates_free(&T);
    bs_npy_rows_close(&r_t), bs_npy_rows_close(&r_k), bs_npy_rows_close(&r_a), bs_npy_rows_close(&r_f);
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
    if (st == BS_OK && !p->no_drift)
        st = stage_drift(&ctx);
    if (st != BS_OK || p->drift_only) {
        ctx_release(&ctx);
        return st;
    }
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
    learned_templates lt = {0};
    if (st == BS_OK)
        st = stage_cluster(&ctx, &basis, &grid, &lt);
    bs_match_templates mt = {0};
    int have_mt = 0;
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
    if (st == BS_OK)
        st = stage_match(&ctx, &basis, &mt, pc_idx, &n_matched);
    if (st == BS_OK && !p->quiet)
        bs_log_info("matched %lld spikes with %d templates", (long long)n_matched, mt.K);
    if (st == BS_OK)
        st = stage_finish_export(&ctx, &mt, pc_chan, &n_units, &n_final);
    if (st == BS_OK && !p->quiet)
        bs_log_info("sorted in %.1f s: %d units, %lld spikes, Phy folder %s", now_s() - t, n_units,
                    (long long)n_final, p->out_dir);
    bs_mem_free(pc_idx);
    bs_mem_free(pc_chan);
    if (have_mt)
        bs_match_templates_free(&mt);
    learned_free(&lt);
    bs_grid_free(&grid);
    bs_basis_free(&basis);
    ctx_release(&ctx);
    return st;
}
