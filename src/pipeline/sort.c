/*
 * sort.c - `boundsort sort`: the run context, then the stages of the table
 * (stages.h) in order (see sort.h and stage.h).
 */
#include "sort.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../common/progress.h"
#include "../common/samples.h"
#include "../mem/mem.h"
#include "params.h"
#include "stages.h"

void bs_sort_default_params(bs_sort_params *p)
{
    memset(p, 0, sizeof *p);
    p->highpass_hz = 300.0;
    p->highpass_order = 3;
    p->whiten_neighbors = BS_WHITEN_DEFAULT_NEIGHBORS;
    p->whiten_stride = 10;
    p->basis_stride = 5;
    p->max_railed_fraction = 0.25;
    bs_artifact_default_params(&p->artifact);
    bs_bad_channel_default_params(&p->bad);
    bs_detect_default_params(&p->detect);
    p->min_template_spikes = 20;
    p->small_template_spikes = 10;
    p->small_template_norm = 12.0;
    p->min_template_norm = 0.75;
    bs_sum_template_params_default(&p->sum);
    p->match_threshold = 8.0f;
    p->match_threshold_of_amp = 0.7;
    p->low_tier_max_cos = 0.8;
    p->low_tier_majority = 2.0;
    p->match_threshold_floor = 5.0f;
    p->match_amp_prior = 0.0f;
    p->match_amp_prior_of_amp = 0.8;
    bs_trunc_params_default(&p->match_trunc);
    p->match_max_iter = 50;
    p->match_window_samples = 4096;
    p->n_pc_chan = 10;
    bs_cluster_default_params(&p->cluster);
    bs_finish_default_params(&p->finish);
    p->max_center_spikes = 200000;
    bs_drift_default_params(&p->drift);
    p->device = -1;
}

void bs_sort_batch_geometry(const bs_sort_params *p, double fs_hz, int64_t *batch_samples, int64_t *halo)
{
    *batch_samples = p->batch_samples > 0 ? p->batch_samples : bs_seconds_to_samples(2.0, fs_hz);
    /* the default halo scales with the rate from its 30-kHz value, rounded up */
    *halo = p->halo_samples > 0 ? p->halo_samples : (int64_t)ceil(BS_PREPROCESS_HALO_DEFAULT * fs_hz / 30000.0);
    if (p->denoise == BS_DENOISE_DESTRIPE && p->halo_samples <= 0) /* the gain control reaches 0.05 s each side */
        *halo += (int64_t)ceil(0.05 * fs_hz) + 1;
    if (*halo < p->detect.nt)
        *halo = p->detect.nt;
    int64_t w = bs_seconds_to_samples(p->drift.nms_ms * 1e-3, fs_hz) + 1; /* the drift peaks' suppression */
    if (!p->no_drift && *halo < w)
        *halo = w;
}

int64_t bs_sort_peel_window(const bs_sort_params *p, int64_t batch_samples)
{
    int64_t w = p->match_window_samples;
    return w > 0 && w < batch_samples ? w : batch_samples;
}

bs_status bs_sort_window(bs_recording *rec, const bs_sort_params *p)
{
    if (p->tmin_s <= 0 && p->tmax_s <= 0)
        return BS_OK;
    int64_t n = rec->n_samples, a = bs_seconds_to_samples(p->tmin_s, rec->fs_hz);
    int64_t b = p->tmax_s > 0 ? bs_seconds_to_samples(p->tmax_s, rec->fs_hz) : n;
    if (b > n)
        b = n;
    if (a >= b)
        return bs_error(BS_ERR_INPUT, "%s: tmin_s = %g s is not before the end of the part to sort (%g s; the "
                        "recording lasts %g s)",
                        rec->data_path, p->tmin_s, (double)b / rec->fs_hz, (double)n / rec->fs_hz);
    return bs_recording_window(rec, a, b);
}

const float *bs_sort_phase_shift(const bs_recording *rec, const bs_sort_params *p)
{
    return p->no_phase_shift ? NULL : rec->probe.adc_shift;
}

/* A Neuropixels recording (a SpikeGLX or Open Ephys probe by its part number) whose ADC layout boundsort
 * does not know is sorted without the phase shift: say so once. (A raw binary's probe file carries the
 * delays itself, contact_annotations.inter_sample_shift, or has none.) */
static void warn_no_phase_shift(const bs_recording *rec, const bs_sort_params *p)
{
    const char *m = rec->probe.model;
    if (p->no_phase_shift || rec->probe.adc_shift || strcmp(rec->format, "raw") == 0 || strcmp(rec->format, "nwb") == 0)
        return;
    if (strncmp(m, "NP", 2) == 0 || strncmp(m, "PRB", 3) == 0 || strcmp(m, "phase3A") == 0)
        bs_log_warn("%s: no ADC multiplexing layout is known for probe part %s: the channels' sampling skew is "
                    "not corrected (no phase shift)", rec->data_path, m);
}

/* The run's batch geometry, and the checks that need the recording. */
static bs_status ctx_geometry(bs_run_ctx *c, const bs_recording *rec, const bs_sort_params *p)
{
    if (rec->n_samples <= 0)
        return bs_error(BS_ERR_INPUT, "%s: the recording is empty (0 samples)", rec->data_path);
    if (rec->probe.n_chan < 2)
        return bs_error(BS_ERR_INPUT, "%s: sorting needs at least 2 channels, the probe has %d", rec->data_path,
                        rec->probe.n_chan);
    bs_sort_batch_geometry(p, rec->fs_hz, &c->nb, &c->halo);
    c->width = c->nb + 2 * c->halo;
    c->n_batches = bs_batch_count(rec->n_samples, c->nb);
    if (rec->n_samples < 2 * (int64_t)p->detect.nt)
        return bs_error(BS_ERR_INPUT, "%s: the recording has %lld samples, too short to sort (at least %d needed)",
                        rec->data_path, (long long)rec->n_samples, 2 * p->detect.nt);
    if (p->highpass_hz >= rec->fs_hz / 2)
        return bs_error(BS_ERR_INPUT, "high-pass cutoff %.1f Hz is not below the Nyquist frequency %.1f Hz",
                        p->highpass_hz, rec->fs_hz / 2);
    return BS_OK;
}

/* The thread count and the budget are the process's, set by the caller
 * before the run; the run reads them once into its context. */
static bs_status ctx_resources(bs_run_ctx *c, const bs_sort_params *p)
{
    c->n_threads = omp_get_max_threads();
    c->budget = p->mem_budget;
    if (p->threads > 0 && p->threads != c->n_threads)
        return bs_error(BS_ERR_INTERNAL,
                        "the run asks for %d threads but the process runs %d: set the OpenMP thread count before "
                        "the run (omp_set_num_threads), as `boundsort sort` does at start", p->threads,
                        c->n_threads);
    if (p->mem_budget && bs_mem_budget(BS_DEV_HOST) != p->mem_budget)
        return bs_error(BS_ERR_INTERNAL,
                        "the run plans for a budget of %zu bytes but the accountant enforces %zu: set it before the "
                        "run (bs_mem_set_budget), as `boundsort sort` does at start", p->mem_budget,
                        bs_mem_budget(BS_DEV_HOST));
    if (p->device >= 0 && bs_mem_budget(BS_DEV_GPU) != p->gpu_mem_budget)
        return bs_error(BS_ERR_INTERNAL,
                        "the run plans for a GPU budget of %zu bytes but the accountant enforces %zu: set it before "
                        "the run (bs_mem_set_budget(BS_DEV_GPU, ...)), as `boundsort sort` does at start",
                        p->gpu_mem_budget, bs_mem_budget(BS_DEV_GPU));
    return BS_OK;
}

/* The preprocessing every batch loop shares. The lane the batches are read through is opened by the
 * channels stage (stage_channels.c) once it knows which channels are sorted and how they are referenced. */
static bs_status ctx_open(bs_run_ctx *c)
{
    const bs_recording *rec = c->rec;
    const bs_sort_params *p = c->p;
    BS_TRY(bs_highpass_design(p->highpass_order, p->highpass_hz, rec->fs_hz, &c->hp));
    c->pp = (bs_preprocess){.remove_mean = 1, .car = p->denoise != BS_DENOISE_DESTRIPE, .hp = &c->hp,
                            .phase_shift = bs_sort_phase_shift(rec, p)};
    if (!p->no_artifact_removal)
        c->art_max = bs_artifact_max_periods(&p->artifact, rec->fs_hz, c->width);
    return BS_OK;
}

/* What the context owns (safe on a zeroed context). */
static void ctx_release(bs_run_ctx *c)
{
    bs_mem_free(c->bad);
    bs_bad_interp_free(&c->interp);
    bs_local_ref_free(&c->local_ref);
    bs_destripe_free(&c->destripe);
    bs_mem_free(c->pc_idx);
    bs_mem_free(c->pc_chan);
    if (c->have_mt)
        bs_match_templates_free(&c->mt);
    bs_learned_templates_free(&c->lt);
    bs_grid_free(&c->grid);
    bs_basis_free(&c->basis);
    bs_run_read_ahead_end(c);
    bs_read_lane_close(&c->rd);
    bs_drift_free(&c->drift);
    if (c->have_wh)
        bs_whitener_free(&c->wh);
}

/* Disk: the stages from `from` on (all of them run once one does) against
 * the free space of OUT's file system, with the plan's counts so far. */
static bs_status check_disk(bs_run_ctx *c, int from)
{
    int skip[BS_PLAN_MAX_STAGES] = {0}; /* --drift-only: nothing after the drift stage runs */
    for (int i = 1; i < c->plan->n_stages; i++)
        skip[i] = skip[i - 1] || (c->p->drift_only && strcmp(bs_stages[i - 1]->name, "drift") == 0);
    int was_streamed = c->plan->pre_stream;
    size_t need = bs_sort_plan_fit_disk(c->plan, from, skip, c->pre_missing, bs_disk_free_bytes(c->p->out_dir));
    if (c->plan->pre_stream && !was_streamed) { /* streaming needs more memory: the budget must still hold it */
        if (bs_sort_plan_check(c->plan, -1) != BS_OK) {
            char why[1024];
            snprintf(why, sizeof why, "%s", bs_last_error());
            return bs_error(BS_ERR_MEMORY, "the run does not fit the disk with the preprocessed recording's file "
                            "(%.1f MiB), and streaming that recording instead %s",
                            (double)c->plan->pre_file_bytes / (1 << 20), why);
        }
        if (!c->p->quiet)
            bs_log_info("the run does not fit the disk with the preprocessed recording's file (%.1f MiB): it is "
                        "streamed instead, each pass preprocessing its batches again (the same results, slower)",
                        (double)c->plan->pre_file_bytes / (1 << 20));
    }
    bs_status st = bs_sort_plan_disk_check(c->plan, from, need, c->plan->disk_free, c->p->out_dir);
    if (st == BS_OK || !c->p->no_disk_check)
        return st;
    if (!c->disk_warned)
        bs_log_warn("--no-disk-check: %s", bs_last_error());
    c->disk_warned = 1;
    return BS_OK;
}

/* One stage of the table: re-plan, open its summary row, then its
 * checkpoint or its run (after the disk check), and record the checkpoint. */
static bs_status run_stage(bs_run_ctx *c, const bs_stage *s)
{
    if (s->off && s->off(c->p))
        return s->when_off ? s->when_off(c) : BS_OK;
    if (s->replan)
        BS_TRY(s->replan(c));
    const bs_plan_stage *ps = &c->plan->stage[c->stage];
    bs_run_stage_begin(c->summary, ps->name, ps->peak, ps->strategy);
    int64_t du0 = bs_dir_disk_bytes(c->p->out_dir);
    bs_status st = s->prepare ? s->prepare(c) : BS_OK;
    if (st == BS_OK && s->n_files && bs_checkpoint_done(c->ck, s->name)) {
        st = s->load(c);
        bs_run_stage_resumed(c->summary);
    } else if (st == BS_OK && (st = check_disk(c, c->stage)) == BS_OK &&
               (!s->reads_batches || (st = bs_preprocessed_ensure(c)) == BS_OK) &&
               (st = bs_run_read_ahead_begin(c)) == BS_OK) {
        st = s->run(c);
        bs_run_read_ahead_end(c);
        if (st == BS_OK && s->n_files) {
            st = bs_checkpoint_mark(c->ck, s->name, s->n_files, s->files);
            bs_checkpoint_test_kill(s->name, BS_CKPT_END);
        }
    }
    if (st == BS_OK && s->finish)
        st = s->finish(c);
    int64_t du1 = bs_dir_disk_bytes(c->p->out_dir);
    bs_run_stage_disk(c->summary, ps->disk, du0 >= 0 && du1 >= 0 ? du1 - du0 : -1);
    bs_run_stage_end(c->summary);
    return st;
}

/* The run summary: printed, and OUT/run_summary.json with the final plan. */
static bs_status write_summary(bs_run_ctx *c)
{
    bs_run_summary *run = c->summary;
    for (int i = 0; i < run->n; i++)
        if (run->stage[i].tracked_peak > run->stage[i].planned_peak)
            bs_log_warn("stage %s used %zu bytes of tracked memory, more than the %zu it planned (a bug in the plan)",
                        run->stage[i].name, run->stage[i].tracked_peak, run->stage[i].planned_peak);
    if (!c->p->quiet)
        bs_run_summary_print(run, stderr);
    char *plan_json = bs_sort_plan_json(c->plan);
    run->plan_json = plan_json;
    bs_status st = bs_run_summary_write(run, c->p->out_dir);
    free(plan_json);
    return st;
}

bs_status bs_sort_run(bs_recording *rec, const bs_sort_params *p)
{
    bs_run_ctx ctx = {0};
    ctx.rd.reader.fd = -1; /* closing a reader that was never opened is a no-op */
    ctx.rec = rec;
    ctx.p = p;
    BS_TRY(bs_sort_params_check(p));
    BS_TRY(ctx_geometry(&ctx, rec, p));
    warn_no_phase_shift(rec, p);
    BS_TRY(ctx_resources(&ctx, p));
    /* plan before touching the data or the output folder */
    bs_sort_plan plan;
    BS_TRY(bs_sort_plan_make(rec, p, ctx.n_threads, ctx.budget, 0, &plan));
    BS_TRY(bs_sort_plan_check(&plan, -1));
    ctx.plan = &plan;
    if (!p->resume) /* with --resume, the first stage that runs checks what is still to write */
        BS_TRY(check_disk(&ctx, 0));
    if (!p->quiet) {
        double gib = (double)((size_t)1 << 30);
        bs_log_info("memory plan: predicted peak %.2f GiB of tracked memory (budget %.2f GiB), %lld batches; about "
                    "%.2f GiB written in OUT; `boundsort plan` shows the details",
                    (double)plan.peak / gib, (double)ctx.budget / gib, (long long)plan.n_batches,
                    (double)plan.disk / gib);
    }
    BS_TRY(bs_mkdir_p(p->out_dir));
    BS_TRY(bs_path_join(ctx.stage_dir, sizeof ctx.stage_dir, p->out_dir, ".stages"));
    BS_TRY(bs_mkdir_p(ctx.stage_dir));
    bs_run_summary run;
    bs_run_summary_init(&run, ctx.budget);
    run.n_threads = ctx.n_threads;
    const float *shift = bs_sort_phase_shift(rec, p);
    run.phase_shift = shift != NULL;
    run.phase_shift_why = p->no_phase_shift ? "--no-phase-shift" : "no ADC layout known for the probe";
    for (int ch = 0; shift && ch < rec->probe.n_chan; ch++)
        run.phase_shift_max = fmax(run.phase_shift_max, shift[ch]);
    if (p->mem_trace)
        snprintf(run.mem_trace, sizeof run.mem_trace, "%s", p->mem_trace);
    bs_checkpoint ck = {.manifest = NULL};
    ctx.summary = &run;
    ctx.ck = &ck;
    /* each of the sort's passes reads the raw file once, straight from the disk where it can (batch.h);
     * the quality metrics after the sort read it through the page cache again */
    const int direct_io = rec->direct_io;
    rec->direct_io = 1;
    bs_status st = ctx_open(&ctx);
    ctx.t0_s = bs_now_s();
    if (st == BS_OK)
        st = bs_checkpoint_open(&ck, ctx.stage_dir, rec, p, p->resume);
    if (st == BS_OK)
        st = bs_sort_params_write(p, ctx.nb, ctx.halo, ck.key, p->out_dir);
    for (ctx.stage = 0; ctx.stage < bs_n_stages && st == BS_OK && !ctx.stop; ctx.stage++)
        st = run_stage(&ctx, bs_stages[ctx.stage]);
    if (st == BS_OK && !ctx.stop)
        st = write_summary(&ctx);
    if (st == BS_OK && !ctx.stop && p->keep_preprocessed)
        st = bs_preprocessed_keep(&ctx); /* moved or copied into the Phy folder */
    bs_checkpoint_close(&ck);
    /* kept for --resume after a failure, and by --drift-only --keep-preprocessed (no Phy folder) */
    bs_preprocessed_release(&ctx, st == BS_OK && (!p->keep_preprocessed || !ctx.stop));
    ctx_release(&ctx);
    rec->direct_io = direct_io;
    return st;
}
