/*
 * plan.c - stage-by-stage memory plan (see plan.h).
 */
#include "plan.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../cluster/cluster.h"
#include "../common/log.h"
#include "../detect/detect.h"
#include "../io/batch.h"
#include "../preprocess/preprocess.h"
#include "../cluster/stage_finish.h"
#include "../drift/stage_drift.h"
#include "stage_io.h"

#define MIB ((size_t)1 << 20)
#define ASSUMED_RATE_HZ 10.0   /* spikes per second per template, before the data says */

static const char *const stage_names[BS_STAGE_COUNT] = {"whitening", "drift", "basis", "detect", "cluster",
                                                        "match", "finish"};

size_t bs_plan_default_budget(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0)
        return (size_t)4 << 30;
    return (size_t)((double)pages * (double)page * 0.75);
}

size_t bs_plan_overhead_bytes(int n_threads)
{
    /* code and libraries (~40 MiB), OpenBLAS per-thread buffers (32 MiB each),
     * thread stacks and stdio (8 MiB each) */
    return 64 * MIB + (size_t)(n_threads > 0 ? n_threads : 1) * 40 * MIB;
}

static void add(bs_plan_stage *s, const char *what, size_t bytes)
{
    if (s->n_buf < BS_PLAN_MAX_BUFFERS)
        s->buf[s->n_buf++] = (bs_plan_buffer){what, bytes};
}

static void finalize(bs_sort_plan *pl);

static size_t sum(const bs_plan_stage *s)
{
    size_t b = 0;
    for (int i = 0; i < s->n_buf; i++)
        b += s->buf[i].bytes;
    return b;
}

/* Everything that stays allocated through the batch loops. */
typedef struct {
    size_t reader, scratch, whitener, grid, centers, basis, drift;
    int whiten_k, center_chans;
} resident;

static size_t grid_bytes(const bs_detect_grid *g, int n_sizes)
{
    size_t F = (size_t)g->n_pos;
    return F * (2 * sizeof(float) + sizeof(int)) + F * (size_t)g->n_chans * sizeof(int) +
           F * (size_t)n_sizes * (size_t)g->n_chans * sizeof(float) + F * (size_t)g->n_neighbors * sizeof(int);
}

/* The matching stage's buffers for K templates (match.h size functions on a
 * shape-only template set). */
static void plan_match(bs_sort_plan *pl)
{
    bs_plan_stage *s = &pl->stage[BS_STAGE_MATCH];
    s->n_buf = 0;
    bs_match_templates shape = {0};
    shape.K = pl->K;
    shape.n_chan = pl->n_chan;
    shape.nt = pl->nt;
    shape.n_pc = pl->n_pc;
    shape.n_sup = pl->n_sup;
    size_t tpl = bs_match_templates_bytes(pl->n_chan, pl->nt, pl->n_pc, pl->K, pl->n_sup);
    size_t ws = bs_peel_ws_bytes(&shape, pl->width, pl->max_iter, pl->n_threads);
    int64_t max_cand = pl->width / (pl->nt + 1) + 1;
    size_t max_spikes = (size_t)pl->max_iter * (size_t)max_cand;
    int npc = pl->n_pc_chan < pl->n_sup ? pl->n_pc_chan : pl->n_sup;
    size_t spikes = max_spikes * (sizeof(bs_spike) + 8 + 4 + 4 + (size_t)pl->n_pc * npc * sizeof(float));
    size_t fixed = pl->resident + tpl + ws + spikes + 2 * MIB;
    add(s, "batch reader + preprocessing", pl->resident);
    add(s, "templates (channel-sparse, low-rank)", tpl);
    add(s, "peeling workspace (K x batch scores)", ws);
    add(s, "matched spikes of one batch", spikes);
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
    add(s, names[pick], bs_pair_table_bytes(pl->K, pl->pair_nnz, pl->nt, order[pick]));
    add(s, "small buffers", 2 * MIB);
    snprintf(s->strategy, sizeof s->strategy, "%s", names[pick]);
    s->peak = sum(s);
    s->min_peak = fixed + bs_pair_table_bytes(pl->K, pl->pair_nnz, pl->nt, BS_PAIR_ON_THE_FLY);
    s->sure_min = pl->k_assumed ? pl->resident : s->min_peak;
    s->reduce = "--batch-seconds (the K x batch score buffer)";
}

/* Bounded by K (src/cluster/stage_finish.h), plus the two spike trains the merge compares:
 * 96 bytes per spike of the largest unit (read buffers of both slots and the
 * merged list), assumed to fire at most 100 Hz until the spikes are known. */
static void plan_finish(bs_sort_plan *pl)
{
    bs_plan_stage *s = &pl->stage[BS_STAGE_FINISH];
    s->n_buf = 0;
    int npc = pl->n_pc_chan < pl->n_sup ? pl->n_pc_chan : pl->n_sup;
    double dur_s = (double)pl->n_samples / pl->fs_hz;
    int64_t largest = (int64_t)(100.0 * dur_s);
    if (largest > pl->n_spikes)
        largest = pl->n_spikes;
    add(s, "batch reader + preprocessing", pl->resident);
    add(s, "templates (channel-sparse, low-rank)",
        bs_match_templates_bytes(pl->n_chan, pl->nt, pl->n_pc, pl->K, pl->n_sup));
    add(s, "merges, unit state, reorder and export blocks",
        bs_finish_bytes(pl->K, pl->nt, pl->n_sup, pl->n_chan, pl->n_pc, npc));
    add(s, "the two largest units' trains (96 B/spike, <= 100 Hz)", (size_t)largest * 96);
    snprintf(s->strategy, sizeof s->strategy, "streamed, trains on disk");
    s->peak = s->min_peak = sum(s);
    s->sure_min = pl->k_assumed ? pl->resident : s->min_peak - (size_t)largest * 96;
    s->reduce = "--mem";
}

/* One center at a time: its spikes' rows and the graph clustering, for the
 * largest center (capped), plus the index of every detected spike. */
static void plan_cluster(bs_sort_plan *pl)
{
    bs_plan_stage *s = &pl->stage[BS_STAGE_CLUSTER];
    s->n_buf = 0;
    int64_t m = pl->center_spikes;
    if (pl->max_center_spikes > 0 && m > pl->max_center_spikes)
        m = pl->max_center_spikes;
    add(s, "batch reader, grid, centers", pl->cluster_fixed);
    size_t staging = bs_bucket_bytes(pl->n_centers, 16, (size_t)4 << 20) + (size_t)65536 * (16 + 4);
    add(s, "center index staging (index on disk)", staging);
    add(s, "one center: spikes and features",
        (size_t)m * ((size_t)pl->feat_len * sizeof(float) + sizeof(bs_detected_spike) + 8 + 4 + 8 + 12));
    add(s, "one center: graph clustering", bs_cluster_center_bytes(m, pl->center_chans, pl->n_pc, &pl->cp));
    add(s, "templates so far", (size_t)pl->K * pl->n_sup * (4 + (size_t)pl->n_pc * 4) +
                                   (size_t)pl->center_chans * pl->n_pc * 64 * 16);
    snprintf(s->strategy, sizeof s->strategy, "one center at a time, <= %lld spikes",
             (long long)pl->max_center_spikes);
    s->peak = s->min_peak = sum(s);
    s->sure_min = pl->spikes_assumed ? pl->cluster_fixed + staging : s->min_peak;
    s->reduce = "--max-center-spikes";
}

void bs_sort_plan_detected(bs_sort_plan *pl, int64_t n_detected, int64_t largest_center)
{
    pl->n_detected = n_detected;
    pl->center_spikes = largest_center;
    plan_cluster(pl);
    finalize(pl);
}

static void finalize(bs_sort_plan *pl)
{
    pl->peak = 0;
    pl->fits = 1;
    pl->failing = -1;
    pl->may_not_fit = 0;
    for (int i = 0; i < BS_STAGE_COUNT; i++) {
        if (pl->stage[i].peak > pl->peak)
            pl->peak = pl->stage[i].peak;
        if (pl->budget && pl->stage[i].sure_min > pl->budget && pl->fits) {
            pl->fits = 0;
            pl->failing = i;
        }
        if (pl->budget && pl->stage[i].min_peak > pl->budget)
            pl->may_not_fit = 1;
    }
}

bs_status bs_sort_plan_make(const bs_recording *rec, const bs_sort_params *p, int n_threads, size_t budget, int K,
                            bs_sort_plan *pl)
{
    memset(pl, 0, sizeof *pl);
    const bs_probe *probe = &rec->probe;
    int C = probe->n_chan;
    pl->n_chan = C;
    pl->n_threads = n_threads > 0 ? n_threads : 1;
    pl->budget = budget;
    pl->nt = p->detect.nt;
    pl->n_pc = p->detect.n_pcs;
    pl->n_sup = C < 32 ? C : 32;
    pl->n_samples = rec->n_samples;
    pl->fs_hz = rec->fs_hz;
    pl->batch_samples = p->batch_samples > 0 ? p->batch_samples : (int64_t)llround(2.0 * rec->fs_hz);
    int64_t halo = p->halo_samples > 0 ? p->halo_samples
                                       : (int64_t)ceil(BS_PREPROCESS_HALO_DEFAULT * rec->fs_hz / 30000.0);
    if (halo < p->detect.nt)
        halo = p->detect.nt;
    pl->width = pl->batch_samples + 2 * halo;
    pl->n_batches = bs_batch_count(rec->n_samples, pl->batch_samples);
    pl->K = K > 0 ? K : (int)ceil(1.5 * C);
    pl->k_assumed = K <= 0;
    double dur_s = (double)rec->n_samples / rec->fs_hz;
    pl->n_spikes = (int64_t)(pl->K * ASSUMED_RATE_HZ * dur_s);
    pl->spikes_assumed = 1;

    resident r = {0};
    r.whiten_k = p->whiten_neighbors < C ? p->whiten_neighbors : C;
    r.reader = bs_batch_reader_bytes(C, rec->n_cols, rec->dtype, pl->batch_samples, halo) + rec->source_bytes;
    bs_highpass hp;
    BS_TRY(bs_highpass_design(p->highpass_order, p->highpass_hz, rec->fs_hz, &hp));
    bs_whitener wh_shape = {0};
    bs_preprocess pp = {.remove_mean = 1, .car = 1, .hp = &hp, .wh = &wh_shape};
    r.scratch = bs_preprocess_scratch_bytes(&pp, C, pl->width, pl->n_threads);
    r.whitener = bs_whitener_bytes(C, r.whiten_k);
    r.basis = ((size_t)p->detect.n_pcs + p->detect.n_shapes) * p->detect.nt * sizeof(float);
    /* drift: the estimate and, when some shank is corrected, the per-batch whitener */
    size_t drift_hist = 0;
    if (!p->no_drift) {
        r.drift = bs_drift_motion_bytes(probe, &p->drift, pl->n_batches);
        drift_hist = bs_drift_hist_bytes(probe, &p->drift, pl->n_batches);
        if (drift_hist) /* some shank qualifies before the data is seen */
            r.drift += bs_drift_corrector_bytes(probe);
    }
    pl->resident = r.reader + r.scratch + r.whitener + r.basis + r.drift;
    pl->max_iter = p->match_max_iter;
    pl->n_pc_chan = p->n_pc_chan;

    /* grid and centers: exact channel counts per center, no data needed */
    bs_detect_grid grid = {0};
    bs_cluster_centers centers = {0};
    bs_cluster_params cp;
    bs_cluster_default_params(&cp);
    cp.fs_hz = rec->fs_hz;
    cp.dmin_um = p->detect.dmin_um;
    bs_status st = bs_grid_build(probe, &p->detect, &grid);
    if (st == BS_OK)
        st = bs_centers_build(probe, &grid, &cp, &centers);
    if (st == BS_OK) {
        r.grid = grid_bytes(&grid, p->detect.n_sizes);
        for (int k = 0; k < centers.n_centers; k++)
            if (bs_center_n_chans(&centers, k) > r.center_chans)
                r.center_chans = bs_center_n_chans(&centers, k);
        pl->n_centers = centers.n_centers;
        r.centers = (size_t)centers.n_centers * 64 + (size_t)centers.chan_off[centers.n_centers] * sizeof(int) +
                    (size_t)grid.n_pos * sizeof(int);
    }
    int feat_len = grid.n_chans * p->detect.n_pcs;
    bs_centers_free(&centers);
    bs_grid_free(&grid);
    if (st != BS_OK)
        return st;

    /* 1. whitening */
    bs_plan_stage *s = &pl->stage[BS_STAGE_WHITENING];
    add(s, "batch reader", r.reader);
    add(s, "preprocessing scratch", r.scratch);
    add(s, "covariance accumulator", bs_whiten_cov_bytes(C) + (size_t)C * C * sizeof(double));
    add(s, "local whitener and its build", r.whitener + bs_whitener_build_bytes(C, r.whiten_k));
    snprintf(s->strategy, sizeof s->strategy, "every %d-th batch", p->whiten_stride);
    s->reduce = "--batch-seconds";

    /* 1b. drift: the histograms grow with the recording (uint8 counts); the
     * peaks of one batch are data-dependent: planned at one peak per channel
     * per 100 samples (24 B each, twice: tile lists and the batch's list) */
    s = &pl->stage[BS_STAGE_DRIFT];
    size_t drift_peaks = p->no_drift ? 0 : (size_t)C * (size_t)(pl->batch_samples / 100 + 1) * 24 * 2;
    if (p->no_drift) {
        snprintf(s->strategy, sizeof s->strategy, "off (--no-drift)");
    } else {
        add(s, "batch reader + preprocessing", pl->resident);
        add(s, "depth x amplitude histograms (uint8, per batch)", drift_hist);
        add(s, "peak detector, noise scales", bs_drift_detector_bytes(probe, &p->drift) +
                                                  (size_t)pl->n_threads * (size_t)pl->batch_samples / 2);
        add(s, "peaks of one batch (data-dependent)", drift_peaks);
        add(s, "driftmap subsample", (size_t)BS_DRIFTMAP_MAX_ROWS * 3 * sizeof(float));
        add(s, "registration", bs_drift_estimate_bytes(probe, &p->drift, pl->n_batches));
        snprintf(s->strategy, sizeof s->strategy, drift_hist ? "threshold peaks, every batch" : "no shank qualifies");
    }
    s->reduce = "--no-drift (the histograms grow with the recording)";

    /* 2. basis */
    s = &pl->stage[BS_STAGE_BASIS];
    add(s, "batch reader + preprocessing", pl->resident);
    size_t snips = (size_t)p->detect.max_snippets * p->detect.nt * sizeof(float);
    add(s, "snippets", snips);
    add(s, "k-means and PCA work", (size_t)p->detect.max_snippets * (sizeof(double) + sizeof(int)) +
                                       (size_t)p->detect.nt * p->detect.nt * sizeof(double) + MIB);
    snprintf(s->strategy, sizeof s->strategy, "up to %d snippets", p->detect.max_snippets);
    s->reduce = "--batch-seconds";

    /* 3. detect: per-batch spike lists are data-dependent; planned at 4x the
     * assumed rate over every channel's templates */
    s = &pl->stage[BS_STAGE_DETECT];
    add(s, "batch reader + preprocessing", pl->resident);
    add(s, "detection grid", r.grid);
    add(s, "detection scratch", bs_detect_scratch_bytes(C, &p->detect, pl->n_threads));
    double batch_s = (double)pl->batch_samples / rec->fs_hz;
    size_t per_batch = (size_t)(4.0 * pl->K * ASSUMED_RATE_HZ * batch_s) + 1024;
    size_t det_data = bs_detect_output_bytes(pl->batch_samples, feat_len, (int64_t)per_batch) + per_batch * 64;
    add(s, "detected spikes of one batch (data-dependent)", det_data);
    add(s, "stage files", 2 * MIB);
    snprintf(s->strategy, sizeof s->strategy, "features streamed to disk");
    s->reduce = "--batch-seconds";

    /* 4. cluster (planned by plan_cluster) */
    pl->cp = cp;
    pl->max_center_spikes = p->max_center_spikes;
    pl->center_chans = r.center_chans;
    pl->feat_len = feat_len;
    pl->cluster_fixed = pl->resident + r.centers + r.grid + MIB;
    pl->n_detected = pl->n_spikes;
    pl->center_spikes = pl->n_spikes;
    plan_cluster(pl);

    for (int i = BS_STAGE_WHITENING; i < BS_STAGE_CLUSTER; i++) {
        if (i != BS_STAGE_DETECT && !(i == BS_STAGE_DRIFT && p->no_drift))
            add(&pl->stage[i], "small buffers", MIB);
        pl->stage[i].peak = pl->stage[i].min_peak = pl->stage[i].sure_min = sum(&pl->stage[i]);
    }
    /* detection's spike lists are data-dependent */
    pl->stage[BS_STAGE_DETECT].sure_min = pl->stage[BS_STAGE_DETECT].min_peak - det_data;
    pl->stage[BS_STAGE_DRIFT].sure_min = pl->stage[BS_STAGE_DRIFT].min_peak - drift_peaks;
    for (int i = 0; i < BS_STAGE_COUNT; i++)
        pl->stage[i].name = stage_names[i];

    bs_sort_plan_update(pl, pl->K, -1, -1);
    pl->k_assumed = K <= 0;
    plan_match(pl); /* again: the sure parts depend on what is assumed */
    plan_finish(pl);
    finalize(pl);
    return BS_OK;
}

void bs_sort_plan_update(bs_sort_plan *pl, int K, int64_t pair_nnz, int64_t n_spikes)
{
    pl->K = K;
    pl->k_assumed = 0;
    if (pair_nnz >= 0) {
        pl->pair_nnz = pair_nnz;
        pl->nnz_assumed = 0;
    } else {
        /* templates spread evenly: a template overlaps those whose support
         * lies within two supports of its own on the probe */
        pl->nnz_assumed = 1;
        double frac = pl->n_chan > 0 ? 2.0 * pl->n_sup / pl->n_chan : 1.0;
        pl->pair_nnz = (int64_t)((double)K * K * (frac < 1 ? frac : 1.0));
        if (pl->pair_nnz < K)
            pl->pair_nnz = K;
    }
    if (n_spikes >= 0) {
        pl->n_spikes = n_spikes;
        pl->spikes_assumed = 0;
    }
    plan_match(pl);
    plan_finish(pl);
    finalize(pl);
}

bs_status bs_sort_plan_check(const bs_sort_plan *pl, int stage)
{
    int i = stage >= 0 ? stage : pl->failing;
    if (i < 0 || !pl->budget)
        return BS_OK;
    const bs_plan_stage *s = &pl->stage[i];
    size_t need = stage >= 0 ? s->min_peak : s->sure_min;
    if (need <= pl->budget)
        return BS_OK;
    return bs_error(BS_ERR_MEMORY,
                    "does not fit the memory budget: stage '%s' needs at least %.1f MiB (%zu bytes) with its "
                    "smallest strategy, the budget is %.1f MiB; raise --mem to at least %.0f MiB, or reduce %s",
                    s->name, (double)need / MIB, need, (double)pl->budget / MIB, ceil((double)need / MIB),
                    s->reduce);
}

static void fmt_bytes(size_t b, char *buf, size_t len)
{
    if (b >= ((size_t)1 << 30))
        snprintf(buf, len, "%.2f GiB", (double)b / (double)((size_t)1 << 30));
    else
        snprintf(buf, len, "%.1f MiB", (double)b / MIB);
}

void bs_sort_plan_print(const bs_sort_plan *pl, FILE *out)
{
    char a[32], b[32];
    fprintf(out, "memory plan: %d channels, %lld samples in %lld batches of %lld samples, %d threads\n", pl->n_chan,
            (long long)pl->n_samples, (long long)pl->n_batches, (long long)pl->batch_samples, pl->n_threads);
    fprintf(out, "  templates K = %d%s, spikes = %lld%s, overlapping template pairs = %lld%s\n", pl->K,
            pl->k_assumed ? " (assumed: 1.5 per channel; --templates K)" : "", (long long)pl->n_spikes,
            pl->spikes_assumed ? " (assumed: 10 Hz per template)" : "", (long long)pl->pair_nnz,
            pl->nnz_assumed ? " (estimated)" : "");
    for (int i = 0; i < BS_STAGE_COUNT; i++) {
        const bs_plan_stage *s = &pl->stage[i];
        fmt_bytes(s->peak, a, sizeof a);
        fmt_bytes(s->min_peak, b, sizeof b);
        fprintf(out, "  %-10s peak %10s  (smallest %10s)  strategy: %s\n", s->name, a, b, s->strategy);
        for (int j = 0; j < s->n_buf; j++) {
            fmt_bytes(s->buf[j].bytes, a, sizeof a);
            fprintf(out, "      %10s  %s\n", a, s->buf[j].what);
        }
    }
    fmt_bytes(pl->peak, a, sizeof a);
    fprintf(out, "  predicted peak of tracked memory: %s", a);
    if (pl->budget) {
        fmt_bytes(pl->budget, b, sizeof b);
        fprintf(out, "; budget %s: %s\n", b,
                !pl->fits ? "DOES NOT FIT" : pl->may_not_fit ? "may not fit (depends on the assumed counts)" : "fits");
        if (!pl->fits)
            fprintf(out, "  stage '%s' needs more than the budget even with its smallest strategy (reduce %s)\n",
                    pl->stage[pl->failing].name, pl->stage[pl->failing].reduce);
        for (int i = 0; pl->fits && i < BS_STAGE_COUNT; i++)
            if (pl->stage[i].min_peak > pl->budget)
                fprintf(out, "  stage '%s' would not fit with the assumed counts; the run re-plans it with the "
                             "real ones and stops there if it still does not (reduce %s)\n",
                        pl->stage[i].name, pl->stage[i].reduce);
    } else {
        fprintf(out, "; no budget\n");
    }
    fmt_bytes(bs_plan_overhead_bytes(pl->n_threads), a, sizeof a);
    fprintf(out, "  untracked overhead (code, libraries, thread buffers): about %s more RSS\n", a);
}

char *bs_sort_plan_json(const bs_sort_plan *pl)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    cJSON_AddNumberToObject(root, "n_chan", pl->n_chan);
    cJSON_AddNumberToObject(root, "n_samples", (double)pl->n_samples);
    cJSON_AddNumberToObject(root, "batch_samples", (double)pl->batch_samples);
    cJSON_AddNumberToObject(root, "n_batches", (double)pl->n_batches);
    cJSON_AddNumberToObject(root, "threads", pl->n_threads);
    cJSON_AddNumberToObject(root, "templates", pl->K);
    cJSON_AddBoolToObject(root, "templates_assumed", pl->k_assumed);
    cJSON_AddNumberToObject(root, "spikes", (double)pl->n_spikes);
    cJSON_AddBoolToObject(root, "spikes_assumed", pl->spikes_assumed);
    cJSON_AddNumberToObject(root, "pair_nnz", (double)pl->pair_nnz);
    cJSON_AddNumberToObject(root, "budget_bytes", (double)pl->budget);
    cJSON_AddNumberToObject(root, "peak_bytes", (double)pl->peak);
    cJSON_AddNumberToObject(root, "overhead_bytes", (double)bs_plan_overhead_bytes(pl->n_threads));
    cJSON_AddBoolToObject(root, "fits", pl->fits);
    cJSON_AddBoolToObject(root, "may_not_fit", pl->may_not_fit);
    cJSON *stages = cJSON_AddArrayToObject(root, "stages");
    for (int i = 0; stages && i < BS_STAGE_COUNT; i++) {
        const bs_plan_stage *s = &pl->stage[i];
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        cJSON_AddStringToObject(o, "name", s->name);
        cJSON_AddStringToObject(o, "strategy", s->strategy);
        cJSON_AddNumberToObject(o, "peak_bytes", (double)s->peak);
        cJSON_AddNumberToObject(o, "min_peak_bytes", (double)s->min_peak);
        cJSON_AddNumberToObject(o, "sure_min_bytes", (double)s->sure_min);
        cJSON *bufs = cJSON_AddArrayToObject(o, "buffers");
        for (int j = 0; bufs && j < s->n_buf; j++) {
            cJSON *b = cJSON_CreateObject();
            if (!b)
                break;
            cJSON_AddStringToObject(b, "what", s->buf[j].what);
            cJSON_AddNumberToObject(b, "bytes", (double)s->buf[j].bytes);
            cJSON_AddItemToArray(bufs, b);
        }
        cJSON_AddItemToArray(stages, o);
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}
