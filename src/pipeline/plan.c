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
#include "../export/phy.h"
#include "../io/batch.h"
#include "../preprocess/preprocess.h"
#include "../qc/qc.h"
#include "../report/report.h"
#include "stage.h"
#include "stages.h"

#define MIB ((size_t)1 << 20)

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

void bs_plan_add(bs_plan_stage *s, const char *what, size_t bytes)
{
    if (s->n_buf < BS_PLAN_MAX_BUFFERS)
        s->buf[s->n_buf++] = (bs_plan_buffer){what, bytes};
}

void bs_plan_read_ahead(const bs_sort_plan *pl, bs_plan_stage *s, size_t extra)
{
    if (pl->n_threads < 2 || (pl->budget && s->peak + pl->read_ahead + extra > pl->budget))
        return;
    bs_plan_add(s, "read-ahead: the next batch, read and preprocessed on a second thread", pl->read_ahead + extra);
    s->peak += pl->read_ahead + extra;
    s->read_ahead = 1;
}

int bs_plan_lanes(const bs_sort_plan *pl, size_t base, size_t per_lane, size_t credit, size_t gpu_lane)
{
    if (pl->pre_stream) /* one batch computed at a time on the stream's raw lane (pre_stream.c): lanes would queue */
        return 1;
    for (int l = pl->n_threads < pl->n_batches ? pl->n_threads : (int)pl->n_batches; l >= 2; l--) {
        size_t all = (size_t)l * per_lane, need = base + (all > credit ? all - credit : 0);
        if ((!pl->budget || need <= pl->budget) && (!pl->gpu_budget || (size_t)l * gpu_lane <= pl->gpu_budget))
            return l;
    }
    return 1;
}

size_t bs_plan_sum(const bs_plan_stage *s)
{
    size_t b = 0;
    for (int i = 0; i < s->n_buf; i++)
        b += s->buf[i].bytes;
    return b;
}

void bs_plan_stage_total(bs_plan_stage *s)
{
    s->peak = s->min_peak = s->sure_min = bs_plan_sum(s);
}

void bs_plan_disk(bs_plan_stage *s, int n_files, double payload_bytes)
{
    s->disk += (size_t)ceil(payload_bytes) + (size_t)(n_files > 0 ? n_files : 0) * 8192;
}

size_t bs_sort_plan_disk_need(const bs_sort_plan *pl, int from, const int *done)
{
    size_t need = 0;
    for (int i = from > 0 ? from : 0; i < pl->n_stages; i++)
        if (!done || !done[i])
            need += pl->stage[i].disk;
    return need + pl->disk_qc + pl->disk_report + pl->disk_keep;
}

static void plan_from(bs_sort_plan *pl, int from);

size_t bs_sort_plan_fit_disk(bs_sort_plan *pl, int from, const int *done, int pre_missing, int64_t free_bytes)
{
    pl->disk_budgeted = pl->p.disk_budget && (free_bytes < 0 || (uint64_t)free_bytes > pl->p.disk_budget);
    pl->disk_free = pl->disk_budgeted ? (int64_t)pl->p.disk_budget : free_bytes;
    size_t file = pre_missing && !pl->pre_stream ? pl->pre_file_bytes : 0;
    size_t need = bs_sort_plan_disk_need(pl, from, done) + file;
    int pre = 0;
    while (pre < pl->n_stages && strcmp(pl->stage[pre].name, "preprocess") != 0)
        pre++;
    if (pl->disk_free < 0 || (uint64_t)pl->disk_free >= need || pl->pre_stream || pl->p.keep_preprocessed ||
        (from > pre && !pre_missing))
        return need;
    pl->pre_stream = 1;
    pl->resident += pl->pre_stream_bytes;
    pl->cluster_fixed += pl->pre_stream_bytes;
    plan_from(pl, from);
    return bs_sort_plan_disk_need(pl, from, done);
}

bs_status bs_sort_plan_disk_check(const bs_sort_plan *pl, int from, size_t need, int64_t free_bytes,
                                  const char *out_dir)
{
    if (free_bytes < 0 || (uint64_t)free_bytes >= need)
        return BS_OK;
    char assumed[160] = "";
    if (pl->k_assumed || pl->spikes_assumed)
        snprintf(assumed, sizeof assumed, "; with %s%s%s assumed (%d templates, %lld spikes)",
                 pl->k_assumed ? "the template count" : "", pl->k_assumed && pl->spikes_assumed ? " and " : "",
                 pl->spikes_assumed ? "the spike count" : "", pl->K, (long long)pl->n_spikes);
    /* what `sort` writes after the stages, in its order */
    const char *after[3] = {pl->disk_qc ? "the quality metrics" : NULL, pl->disk_report ? "the report" : NULL,
                            pl->disk_keep ? "the kept preprocessed recording" : NULL};
    int n_after = 0;
    for (int i = 0; i < 3; i++)
        n_after += after[i] != NULL;
    char extras[128] = ""; /* " and A", " and A and B", " and A, B and C" */
    for (int i = 0, n = 0; i < 3; i++)
        if (after[i]) {
            size_t l = strlen(extras);
            snprintf(extras + l, sizeof extras - l, "%s%s", n == 0 || n == n_after - 1 ? " and " : ", ", after[i]);
            n++;
        }
    char what[96];
    snprintf(what, sizeof what, "stage%s '%s'%s%s%s", from < pl->n_stages - 1 ? "s" : "", pl->stage[from].name,
             from < pl->n_stages - 1 ? " to '" : "", from < pl->n_stages - 1 ? pl->stage[pl->n_stages - 1].name : "",
             from < pl->n_stages - 1 ? "'" : "");
    return bs_error(BS_ERR_MEMORY,
                    "does not fit the disk: %s%s write about %.1f MiB (%zu bytes) in %s%s%s; %s %.1f MiB%s. "
                    "%s at least %.0f MiB more%s (--no-disk-check runs anyway: a full disk stops the run with "
                    "exit 6, and --resume continues it)",
                    what, extras, (double)need / MIB, need, out_dir,
                    pl->pre_stream ? " even with the preprocessed recording streamed (not written)" : "", assumed,
                    pl->disk_budgeted ? "the disk budget (--disk) is" : "its file system has",
                    (double)free_bytes / MIB, pl->disk_budgeted ? "" : " free",
                    pl->disk_budgeted ? "Raise --disk by" : "Free", ceil((double)(need - (size_t)free_bytes) / MIB),
                    pl->disk_budgeted ? "" : " there or choose another -o");
}

static size_t grid_bytes(const bs_detect_grid *g, int n_sizes)
{
    size_t F = (size_t)g->n_pos;
    return F * (2 * sizeof(float) + sizeof(int)) + F * (size_t)g->n_chans * sizeof(int) +
           F * (size_t)n_sizes * (size_t)g->n_chans * sizeof(float) + F * (size_t)g->n_neighbors * sizeof(int) +
           (size_t)g->n_sets * (size_t)g->n_chans * sizeof(int) + ((size_t)g->n_sets + 1 + F) * sizeof(int) +
           F * (size_t)BS_GRID_SUB_FLOATS(g->n_chans, n_sizes) * sizeof(float);
}

static void finalize(bs_sort_plan *pl)
{
    pl->peak = 0;
    pl->gpu_peak = 0;
    pl->fits = 1;
    pl->failing = -1;
    pl->gpu_short = 0;
    pl->may_not_fit = 0;
    pl->disk = pl->disk_qc + pl->disk_report + pl->disk_keep;
    for (int i = 0; i < pl->n_stages; i++) {
        const bs_plan_stage *s = &pl->stage[i];
        pl->disk += s->disk;
        if (s->peak > pl->peak)
            pl->peak = s->peak;
        if (s->gpu > pl->gpu_peak)
            pl->gpu_peak = s->gpu;
        int gpu_over = pl->gpu_budget && s->gpu_sure > pl->gpu_budget;
        if (pl->fits && ((pl->budget && s->sure_min > pl->budget) || gpu_over)) {
            pl->fits = 0;
            pl->failing = i;
            pl->gpu_short = !(pl->budget && s->sure_min > pl->budget);
        }
        if (pl->budget && s->min_peak > pl->budget)
            pl->may_not_fit = 1;
    }
}

/* Each stage's plan function, from stage `from` on (bs_stages order). */
static void plan_from(bs_sort_plan *pl, int from)
{
    for (int i = from; i < pl->n_stages; i++) {
        bs_plan_stage *s = &pl->stage[i];
        memset(s, 0, sizeof *s);
        s->name = bs_stages[i]->name;
        bs_stages[i]->plan(pl, s);
    }
    bs_qc_params qp;
    bs_qc_default_params(&qp);
    pl->disk_qc = pl->p.no_qc ? 0 : bs_qc_disk_bytes(&qp, pl->shapes.qc_spill_spike, pl->n_spikes, pl->K);
    bs_report_params rp;
    bs_report_params_default(&rp);
    pl->disk_report = pl->p.no_report ? 0 : bs_report_page_bytes(&rp, pl->K, pl->n_chan, pl->fs_hz);
    finalize(pl);
}

/* Templates spread evenly: a template overlaps those whose support lies
 * within two supports of its own on the probe. */
static void estimate_pairs(bs_sort_plan *pl)
{
    pl->nnz_assumed = 1;
    double frac = pl->n_chan > 0 ? 2.0 * pl->n_sup / pl->n_chan : 1.0;
    pl->pair_nnz = (int64_t)((double)pl->K * pl->K * (frac < 1 ? frac : 1.0));
    if (pl->pair_nnz < pl->K)
        pl->pair_nnz = pl->K;
}

void bs_sort_plan_detected(bs_sort_plan *pl, int from, int64_t n_detected, int64_t largest_center,
                           int64_t k_bound, int64_t max_l)
{
    pl->n_detected = n_detected;
    pl->center_spikes = largest_center;
    pl->cluster_k_bound = k_bound;
    pl->cluster_max_l = max_l;
    if (pl->spikes_assumed) /* matching finds about as many as detection did (still an assumption) */
        pl->n_spikes = n_detected;
    plan_from(pl, from);
}

void bs_sort_plan_update(bs_sort_plan *pl, int from, int K, int64_t pair_nnz, int64_t n_spikes)
{
    pl->K = K;
    pl->k_assumed = 0;
    if (pair_nnz >= 0) {
        pl->pair_nnz = pair_nnz;
        pl->nnz_assumed = 0;
    } else {
        estimate_pairs(pl);
    }
    if (n_spikes >= 0) {
        pl->n_spikes = n_spikes;
        pl->spikes_assumed = 0;
    }
    plan_from(pl, from);
}

/* The shapes every stage shares: what stays allocated through the batch
 * loops, the grid and the clustering centers (exact channel counts per
 * center, no data needed). */
static bs_status plan_shapes(bs_sort_plan *pl, const bs_recording *rec, const bs_sort_params *p, int64_t halo)
{
    const bs_probe *probe = &rec->probe;
    int C = probe->n_chan;
    bs_plan_shapes *r = &pl->shapes;
    r->whiten_k = p->whiten_neighbors < C ? p->whiten_neighbors : C;
    const size_t plain = bs_batch_reader_bytes(C, rec->n_cols, rec->dtype, pl->batch_samples, halo);
    const size_t ahead = bs_batch_ahead_block(rec, pl->batch_samples, halo);
    r->reader = plain + rec->source_bytes;
    pl->raw_ahead_bytes =
        ahead ? bs_batch_reader_bytes_ex(C, rec->n_cols, rec->dtype, pl->batch_samples, halo, ahead) - plain : 0;
    bs_highpass hp;
    BS_TRY(bs_highpass_design(p->highpass_order, p->highpass_hz, rec->fs_hz, &hp));
    bs_whitener wh_shape = {0};
    bs_preprocess pp = {.remove_mean = 1, .car = p->denoise != BS_DENOISE_DESTRIPE, .hp = &hp, .wh = &wh_shape,
                        .phase_shift = bs_sort_phase_shift(rec, p)};
    /* the denoiser of the probe as opened (dropping bad channels only shrinks it) */
    bs_local_ref lr = {0};
    bs_destripe ds = {0};
    if (p->denoise == BS_DENOISE_CMR_LOCAL) {
        BS_TRY(bs_local_ref_build(probe, BS_LOCAL_REF_R_IN_UM, BS_LOCAL_REF_R_OUT_UM, BS_LOCAL_REF_MIN, &lr));
        pp.local_ref = &lr;
        r->denoiser = (size_t)C * (1 + (size_t)lr.k) * sizeof(int);
    } else if (p->denoise == BS_DENOISE_DESTRIPE) {
        float *ones = malloc((size_t)C * sizeof(float));
        if (!ones)
            return bs_error(BS_ERR_MEMORY, "plan: out of memory");
        for (int c = 0; c < C; c++)
            ones[c] = 1.0f;
        bs_status st = bs_destripe_init(probe, rec->fs_hz, ones, &ds);
        free(ones);
        BS_TRY(st);
        pp.destripe = &ds;
        r->denoiser = (size_t)C * (2 * sizeof(int) + sizeof(float)) + 4 * (size_t)ds.hann_h * sizeof(double) + 64;
    }
    r->scratch = bs_preprocess_scratch_bytes(&pp, C, pl->width, pl->n_threads);
    bs_local_ref_free(&lr);
    bs_destripe_free(&ds);
    r->whitener = bs_whitener_bytes(C, r->whiten_k);
    r->basis = ((size_t)p->detect.n_pcs + p->detect.n_shapes) * p->detect.nt * sizeof(float);
    /* drift: the estimate and, when some shank is corrected, the per-batch whitener */
    if (!p->no_drift) {
        r->drift = r->drift_motion = bs_drift_motion_bytes(probe, &p->drift, pl->n_batches);
        r->drift_hist = bs_drift_hist_bytes(probe, &p->drift, pl->n_batches);
        if (r->drift_hist) /* some shank qualifies before the data is seen */
            r->drift += bs_drift_corrector_bytes(probe);
        r->drift_detector = bs_drift_detector_bytes(probe, &p->drift);
        r->drift_estimate = bs_drift_estimate_bytes(probe, &p->drift, pl->n_batches);
    }
    if (!p->no_artifact_removal)
        r->artifact = (size_t)pl->width * sizeof(int32_t) + (size_t)C * sizeof(float) +
                      (size_t)pl->n_threads * (size_t)(pl->batch_samples / 8 + 1) * sizeof(float) +
                      (size_t)bs_artifact_max_periods(&p->artifact, rec->fs_hz, pl->width) * sizeof(bs_artifact_period);
    r->bad_scan = bs_bad_scan_bytes(rec, &p->bad, halo, p->no_artifact_removal ? NULL : &p->artifact, pl->n_threads);
    if (p->bad.mode == BS_BAD_INTERPOLATE) { /* at most max_fraction of the channels, each from all the others */
        size_t nb = (size_t)(p->bad.max_fraction * C) + 1;
        r->bad_interp = nb * (size_t)C * (sizeof(int) + sizeof(float)) + 2 * (nb + 1) * sizeof(int);
    }
    pl->resident = r->reader + r->scratch + r->whitener + r->basis + r->drift + r->artifact + r->bad_interp +
                   r->denoiser;
    /* the helper's team is as large as the stage's (read_lane.c), so its lane is the run's reading buffers */
    pl->read_ahead = r->reader + r->scratch + r->artifact + (r->drift_hist ? bs_drift_corrector_bytes(probe) : 0);
    bs_qc_params qp;
    bs_qc_default_params(&qp);
    r->qc_spill_spike = bs_qc_spill_spike_bytes(&qp, probe, rec->fs_hz);
    /* streamed (pre_stream.c): its cache entries and its lane on the raw recording (reader, scratch for the
       run's threads, artifact arrays) */
    pl->pre_file_bytes = (size_t)C * (size_t)rec->n_samples * 2;
    pl->pre_stream_bytes = BS_PRE_STREAM_ENTRIES * bs_pre_stream_entry_bytes(pl->batch_samples, C) + r->reader +
                           r->scratch + r->artifact;

    bs_detect_grid grid = {0};
    bs_cluster_centers centers = {0};
    pl->cp = p->cluster; /* with the recording's rate and the grid's spacing */
    pl->cp.fs_hz = rec->fs_hz;
    pl->cp.dmin_um = p->detect.dmin_um;
    bs_status st = bs_grid_build(probe, &p->detect, &grid);
    if (st == BS_OK)
        st = bs_centers_build(probe, &grid, &pl->cp, &centers);
    if (st == BS_OK) {
        r->grid = grid_bytes(&grid, p->detect.n_sizes);
        r->grid_pos = grid.n_pos;
        r->grid_chans = grid.n_chans;
        for (int k = 0; k < centers.n_centers; k++)
            if (bs_center_n_chans(&centers, k) > r->center_chans)
                r->center_chans = bs_center_n_chans(&centers, k);
        pl->n_centers = centers.n_centers;
        r->centers = (size_t)centers.n_centers * 64 + (size_t)centers.chan_off[centers.n_centers] * sizeof(int) +
                     (size_t)grid.n_pos * sizeof(int);
    }
    pl->feat_len = grid.n_chans * p->detect.n_pcs;
    bs_centers_free(&centers);
    bs_grid_free(&grid);
    return st;
}

bs_status bs_sort_plan_make(const bs_recording *rec, const bs_sort_params *p, int n_threads, size_t budget, int K,
                            bs_sort_plan *pl)
{
    memset(pl, 0, sizeof *pl);
    pl->p = *p;
    pl->disk_free = -1;
    int C = rec->probe.n_chan;
    pl->n_chan = C;
    pl->n_threads = n_threads > 0 ? n_threads : 1;
    pl->budget = budget;
    pl->gpu_budget = p->device >= 0 ? p->gpu_mem_budget : 0;
    pl->nt = p->detect.nt;
    pl->n_pc = p->detect.n_pcs;
    pl->n_sup = C < 32 ? C : 32;
    pl->n_samples = rec->n_samples;
    pl->fs_hz = rec->fs_hz;
    int64_t halo;
    bs_sort_batch_geometry(p, rec->fs_hz, &pl->batch_samples, &halo);
    pl->width = pl->batch_samples + 2 * halo;
    pl->n_batches = bs_batch_count(rec->n_samples, pl->batch_samples);
    pl->K = K > 0 ? K : (int)ceil(1.5 * C);
    pl->k_assumed = K <= 0;
    double dur_s = (double)rec->n_samples / rec->fs_hz;
    pl->n_spikes = (int64_t)(pl->K * BS_PLAN_ASSUMED_RATE_HZ * dur_s);
    pl->spikes_assumed = 1;
    pl->max_iter = p->match_max_iter;
    pl->peel_n_t = bs_peel_window_n_t(bs_sort_peel_window(p, pl->batch_samples), p->detect.nt);
    pl->n_pc_chan = p->n_pc_chan;
    if (p->keep_preprocessed)
        pl->disk_keep = (size_t)bs_export_preprocessed_copy_bytes(rec->probe.column, C, rec->n_cols, rec->n_samples);
    BS_TRY(bs_finish_shadow_params(&p->finish, rec->fs_hz, NULL)); /* a shadow lag the finish cannot examine */
    BS_TRY(plan_shapes(pl, rec, p, halo));
    pl->center_chans = pl->shapes.center_chans;
    pl->cluster_fixed = pl->resident + pl->shapes.centers + pl->shapes.grid + MIB;
    pl->n_detected = pl->n_spikes;
    pl->center_spikes = pl->n_spikes;
    pl->cluster_k_bound = pl->K;
    /* with a low tier (detect.h, th_low) a center is clustered twice: up to twice the clusters */
    pl->cluster_max_l = (p->cluster.n_init > 1 ? p->cluster.n_init : 1) * (bs_detect_low_tier(&p->detect) ? 2 : 1);
    estimate_pairs(pl);
    pl->n_stages = bs_n_stages;
    plan_from(pl, 0);
    return BS_OK;
}

bs_status bs_sort_plan_check(const bs_sort_plan *pl, int stage)
{
    int i = stage >= 0 ? stage : pl->failing;
    if (i < 0)
        return BS_OK;
    const bs_plan_stage *s = &pl->stage[i];
    if (pl->gpu_budget && s->gpu > pl->gpu_budget && (stage >= 0 || pl->gpu_short))
        return bs_error(BS_ERR_MEMORY,
                        "does not fit the GPU memory budget: stage '%s' needs %.1f MiB (%zu bytes) of GPU memory, the "
                        "budget is %.1f MiB; raise --gpu-mem to at least %.0f MiB, or reduce %s",
                        s->name, (double)s->gpu / MIB, s->gpu, (double)pl->gpu_budget / MIB,
                        ceil((double)s->gpu / MIB), s->reduce);
    if (!pl->budget)
        return BS_OK;
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
    for (int i = 0; i < pl->n_stages; i++) {
        const bs_plan_stage *s = &pl->stage[i];
        fmt_bytes(s->peak, a, sizeof a);
        fmt_bytes(s->min_peak, b, sizeof b);
        char d[32];
        fmt_bytes(s->disk, d, sizeof d);
        fprintf(out, "  %-10s peak %10s  (smallest %10s)  disk %10s  strategy: %s\n", s->name, a, b, d,
                s->strategy);
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
                !pl->fits && !pl->gpu_short ? "DOES NOT FIT"
                : pl->machine_short ? "fits the budget, but NOT THIS MACHINE with the threads' overhead (below)"
                : pl->may_not_fit   ? "may not fit (depends on the assumed counts)"
                                    : "fits");
        if (!pl->fits)
            fprintf(out, "  stage '%s' needs more than the %s budget even with its smallest strategy (reduce %s)\n",
                    pl->stage[pl->failing].name, pl->gpu_short ? "GPU" : "host", pl->stage[pl->failing].reduce);
        for (int i = 0; pl->fits && i < pl->n_stages; i++)
            if (pl->stage[i].min_peak > pl->budget)
                fprintf(out, "  stage '%s' would not fit with the assumed counts; the run re-plans it with the "
                             "real ones and stops there if it still does not (reduce %s)\n",
                        pl->stage[i].name, pl->stage[i].reduce);
    } else {
        fprintf(out, "; no budget\n");
    }
    if (pl->p.device >= 0) {
        fmt_bytes(pl->gpu_peak, a, sizeof a);
        fmt_bytes(pl->gpu_budget, b, sizeof b);
        fprintf(out, "  GPU cuda:%d: predicted peak of tracked GPU memory %s (", pl->p.device, a);
        for (int i = 0, first = 1; i < pl->n_stages; i++)
            if (pl->stage[i].gpu) {
                fmt_bytes(pl->stage[i].gpu, a, sizeof a);
                fprintf(out, "%s%s %s", first ? "" : ", ", pl->stage[i].name, a);
                first = 0;
            }
        fprintf(out, "); budget %s: %s\n", pl->gpu_budget ? b : "none",
                !pl->gpu_budget || pl->gpu_peak <= pl->gpu_budget ? "fits"
                : pl->gpu_short ? "DOES NOT FIT"
                                : "may not fit (depends on the assumed K)");
    }
    fmt_bytes(pl->disk_qc, a, sizeof a);
    if (pl->disk_qc)
        fprintf(out, "  %-10s disk %10s  (after the stages; the waveform subset is a temporary file)\n", "qc", a);
    fmt_bytes(pl->disk_report, a, sizeof a);
    if (pl->disk_report)
        fprintf(out, "  %-10s disk %10s  (report.html, last)\n", "report", a);
    fmt_bytes(pl->disk_keep, a, sizeof a);
    if (pl->disk_keep)
        fprintf(out, "  %-10s disk %10s  (--keep-preprocessed: the stage file copied with the raw file's columns)\n",
                "keep", a);
    fmt_bytes(pl->disk, a, sizeof a);
    fprintf(out, "  disk: the run writes about %s in OUT%s", a,
            pl->k_assumed || pl->spikes_assumed ? " (with the assumed counts)" : "");
    if (pl->disk_free >= 0) {
        fmt_bytes((size_t)pl->disk_free, b, sizeof b);
        fprintf(out, "; %s %s: %s\n", b, pl->disk_budgeted ? "the budget (--disk)" : "free there",
                (uint64_t)pl->disk_free >= pl->disk ? "fits" : "DOES NOT FIT");
    } else {
        fprintf(out, " (-o OUT compares it with the free space there)\n");
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
    cJSON_AddBoolToObject(root, "fits_machine", !pl->machine_short);
    cJSON_AddBoolToObject(root, "may_not_fit", pl->may_not_fit);
    cJSON_AddNumberToObject(root, "disk_bytes", (double)pl->disk);
    cJSON_AddNumberToObject(root, "disk_qc_bytes", (double)pl->disk_qc);
    cJSON_AddNumberToObject(root, "disk_report_bytes", (double)pl->disk_report);
    cJSON_AddNumberToObject(root, "disk_keep_bytes", (double)pl->disk_keep);
    if (pl->disk_free >= 0)
        cJSON_AddNumberToObject(root, "disk_free_bytes", (double)pl->disk_free);
    cJSON_AddBoolToObject(root, "disk_budgeted", pl->disk_budgeted);
    cJSON_AddBoolToObject(root, "preprocessed_streamed", pl->pre_stream);
    cJSON_AddNumberToObject(root, "preprocessed_file_bytes", (double)pl->pre_file_bytes);
    if (pl->p.device >= 0) {
        cJSON_AddNumberToObject(root, "gpu_device", pl->p.device);
        cJSON_AddNumberToObject(root, "gpu_budget_bytes", (double)pl->gpu_budget);
        cJSON_AddNumberToObject(root, "gpu_peak_bytes", (double)pl->gpu_peak);
    }
    cJSON *stages = cJSON_AddArrayToObject(root, "stages");
    for (int i = 0; stages && i < pl->n_stages; i++) {
        const bs_plan_stage *s = &pl->stage[i];
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        cJSON_AddStringToObject(o, "name", s->name);
        cJSON_AddStringToObject(o, "strategy", s->strategy);
        cJSON_AddBoolToObject(o, "read_ahead", s->read_ahead);
        cJSON_AddNumberToObject(o, "lanes", s->lanes > 1 ? s->lanes : 1);
        cJSON_AddNumberToObject(o, "peak_bytes", (double)s->peak);
        cJSON_AddNumberToObject(o, "min_peak_bytes", (double)s->min_peak);
        cJSON_AddNumberToObject(o, "sure_min_bytes", (double)s->sure_min);
        cJSON_AddNumberToObject(o, "disk_bytes", (double)s->disk);
        if (pl->p.device >= 0)
            cJSON_AddNumberToObject(o, "gpu_bytes", (double)s->gpu);
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
