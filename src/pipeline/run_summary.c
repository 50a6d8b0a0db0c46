/*
 * run_summary.c - per-stage resource report (see run_summary.h).
 */
#include "run_summary.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../../include/boundsort.h"
#include "../common/blas_threads.h"
#include "../common/fileio.h"
#include "../common/progress.h"
#include "../mem/mem.h"

size_t bs_process_peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (size_t)ru.ru_maxrss * 1024; /* KiB on Linux */
}

/* VmHWM from /proc/self/status, bytes (0 if unavailable). */
static size_t current_hwm(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %zu kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

/* CPU seconds (user + system) of the whole process so far: every thread's. */
static double process_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static void reset_hwm(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return;
    fputs("5", f);
    fclose(f);
}

void bs_run_summary_init(bs_run_summary *r, size_t budget)
{
    memset(r, 0, sizeof *r);
    r->budget = budget;
    r->t0_s = bs_now_s();
}

void bs_run_stage_begin(bs_run_summary *r, const char *name, size_t planned_peak, const char *strategy)
{
    if (r->n >= BS_RUN_MAX_STAGES)
        return;
    bs_run_stage *s = &r->stage[r->n];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->strategy, sizeof s->strategy, "%s", strategy ? strategy : "");
    s->planned_peak = planned_peak;
    size_t hwm = current_hwm();
    if (hwm > r->peak_rss)
        r->peak_rss = hwm;
    reset_hwm();
    bs_mem_reset_peaks();
    r->t_stage_s = bs_now_s();
    r->cpu_stage_s = process_cpu_s();
}

void bs_run_stage_resumed(bs_run_summary *r)
{
    if (r->n < BS_RUN_MAX_STAGES)
        snprintf(r->stage[r->n].strategy, sizeof r->stage[r->n].strategy, "resumed from checkpoint");
}

void bs_run_stage_replan(bs_run_summary *r, size_t planned_peak)
{
    if (r->n < BS_RUN_MAX_STAGES)
        r->stage[r->n].planned_peak = planned_peak;
}

void bs_run_stage_read(bs_run_summary *r, double seconds)
{
    if (r->n < BS_RUN_MAX_STAGES)
        r->stage[r->n].read_s += seconds;
}

void bs_run_stage_read_ahead(bs_run_summary *r)
{
    if (r->n < BS_RUN_MAX_STAGES)
        r->stage[r->n].read_ahead = 1;
}

void bs_run_stage_disk(bs_run_summary *r, size_t planned, int64_t written)
{
    if (r->n < BS_RUN_MAX_STAGES) {
        r->stage[r->n].disk_planned = planned;
        r->stage[r->n].disk_written = written;
    }
}

void bs_run_stage_end(bs_run_summary *r)
{
    if (r->n >= BS_RUN_MAX_STAGES)
        return;
    bs_run_stage *s = &r->stage[r->n++];
    double now = bs_now_s();
    s->wall_s = now - r->t_stage_s;
    s->cpu_s = process_cpu_s() - r->cpu_stage_s;
    s->tracked_peak = bs_mem_peak(BS_DEV_HOST);
    s->gpu_peak = bs_mem_peak(BS_DEV_GPU);
    s->rss_peak = current_hwm();
    if (!s->rss_peak)
        s->rss_peak = bs_process_peak_rss();
    if (s->rss_peak > r->peak_rss)
        r->peak_rss = s->rss_peak;
    r->total_wall_s = now - r->t0_s;
}

static double mib(size_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

/* A stage's CPU time over what its threads could have used in its wall time (0..1, a little over with
 * the kernel's own threads). */
static double cpu_use(const bs_run_summary *r, const bs_run_stage *s)
{
    return s->wall_s > 0 ? s->cpu_s / s->wall_s / (r->n_threads > 0 ? r->n_threads : 1) : 0;
}

void bs_run_summary_print(const bs_run_summary *r, FILE *out)
{
    fprintf(out, "%-10s %9s %9s %7s %12s %12s %12s %12s  %s\n", "stage", "wall s", "read s", "CPU %", "planned MiB",
            "tracked MiB", "RSS MiB", "disk MiB", "strategy");
    for (int i = 0; i < r->n; i++) {
        const bs_run_stage *s = &r->stage[i];
        char planned[32] = "-";
        if (s->planned_peak)
            snprintf(planned, sizeof planned, "%.1f", mib(s->planned_peak));
        char disk[32] = "-";
        if (s->disk_written >= 0)
            snprintf(disk, sizeof disk, "%.1f", (double)s->disk_written / (1024.0 * 1024.0));
        fprintf(out, "%-10s %9.2f %9.2f %7.0f %12s %12.1f %12.1f %12s  %s", s->name, s->wall_s, s->read_s,
                100.0 * cpu_use(r, s), planned, mib(s->tracked_peak), mib(s->rss_peak), disk, s->strategy);
        if (s->read_ahead)
            fputs("; read ahead", out);
        if (s->gpu_peak)
            fprintf(out, "; GPU tracked peak %.1f MiB", mib(s->gpu_peak));
        fputc('\n', out);
    }
    double read_s = 0;
    for (int i = 0; i < r->n; i++)
        read_s += r->stage[i].read_s;
    fprintf(out, "%-10s %9.2f %9.2f %7s %12s %12s %12.1f\n", "total", r->total_wall_s, read_s, "", "", "",
            mib(r->peak_rss));
    fprintf(out, "CPU %%: CPU time (user + system) / wall time / %d threads\n", r->n_threads > 0 ? r->n_threads : 1);
    if (r->budget)
        fprintf(out, "budget: %.1f MiB of tracked host memory\n", mib(r->budget));
    if (r->phase_shift)
        fprintf(out, "phase shift: each channel's ADC sampling delay removed (up to %.3f samples)\n",
                r->phase_shift_max);
    else
        fprintf(out, "phase shift: none (%s)\n", r->phase_shift_why ? r->phase_shift_why : "");
    if (r->denoise)
        fprintf(out, "denoising: %s\n", r->denoise);
    if (r->bad_done)
        fprintf(out, "bad channels: %d dead, %d noisy, %d out of the brain of %d examined; %d interpolated, %d "
                     "removed (--bad-channels %s; OUT/bad_channels.tsv)\n",
                r->bad_n[1], r->bad_n[2], r->bad_n[3], r->bad_examined, r->bad_interpolated, r->bad_removed,
                r->bad_mode ? r->bad_mode : "");
    if (r->artifact_removal)
        fprintf(out, "artifacts: %lld periods blanked, %.3f s in all (OUT/artifacts.tsv); about %.0f spikes of the "
                     "sorted units fell in them and are lost\n",
                (long long)r->n_artifacts, r->artifact_blanked_s, r->artifact_lost_spikes);
    else
        fprintf(out, "artifacts: not removed (--no-artifact-removal)\n");
}

bs_status bs_run_summary_write(const bs_run_summary *r, const char *out_dir)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *stages = cJSON_CreateArray();
    bs_status st = root && stages ? BS_OK : BS_ERR_MEMORY;
    if (st == BS_OK) {
        cJSON_AddStringToObject(root, "boundsort_version", BOUNDSORT_VERSION);
        cJSON_AddNumberToObject(root, "total_wall_s", r->total_wall_s);
        cJSON_AddNumberToObject(root, "peak_rss_bytes", (double)r->peak_rss);
        cJSON_AddNumberToObject(root, "budget_bytes", (double)r->budget);
        cJSON_AddNumberToObject(root, "threads", r->n_threads);
        const char *core = bs_blas_corename(); /* the BLAS kernels: float summation orders depend on them */
        if (core)
            cJSON_AddStringToObject(root, "blas_core", core);
        for (int i = 0; i < r->n; i++) {
            const bs_run_stage *s = &r->stage[i];
            cJSON *o = cJSON_CreateObject();
            if (!o) {
                st = BS_ERR_MEMORY;
                break;
            }
            cJSON_AddStringToObject(o, "name", s->name);
            cJSON_AddNumberToObject(o, "wall_s", s->wall_s);
            cJSON_AddNumberToObject(o, "read_preprocess_s", s->read_s);
            cJSON_AddBoolToObject(o, "read_ahead", s->read_ahead);
            cJSON_AddNumberToObject(o, "cpu_s", s->cpu_s);
            cJSON_AddNumberToObject(o, "cpu_utilisation", cpu_use(r, s));
            cJSON_AddNumberToObject(o, "planned_peak_bytes", (double)s->planned_peak);
            cJSON_AddNumberToObject(o, "tracked_peak_bytes", (double)s->tracked_peak);
            cJSON_AddNumberToObject(o, "rss_peak_bytes", (double)s->rss_peak);
            cJSON_AddNumberToObject(o, "disk_planned_bytes", (double)s->disk_planned);
            cJSON_AddNumberToObject(o, "disk_written_bytes", (double)s->disk_written);
            cJSON_AddStringToObject(o, "strategy", s->strategy);
            if (s->gpu_peak)
                cJSON_AddNumberToObject(o, "gpu_peak_bytes", (double)s->gpu_peak);
            cJSON_AddItemToArray(stages, o);
        }
        cJSON_AddItemToObject(root, "stages", stages);
        stages = NULL;
        if (r->mem_trace[0])
            cJSON_AddStringToObject(root, "mem_trace", r->mem_trace);
        cJSON *ps = cJSON_AddObjectToObject(root, "phase_shift");
        if (ps) {
            cJSON_AddBoolToObject(ps, "applied", r->phase_shift);
            if (r->phase_shift)
                cJSON_AddNumberToObject(ps, "max_delay_samples", r->phase_shift_max);
            else
                cJSON_AddStringToObject(ps, "why_not", r->phase_shift_why ? r->phase_shift_why : "");
        }
        if (r->denoise)
            cJSON_AddStringToObject(root, "denoise", r->denoise);
        cJSON *bc = r->bad_done ? cJSON_AddObjectToObject(root, "bad_channels") : NULL;
        if (bc) {
            cJSON_AddStringToObject(bc, "mode", r->bad_mode ? r->bad_mode : "");
            cJSON_AddNumberToObject(bc, "chunks", r->bad_chunks);
            cJSON_AddNumberToObject(bc, "examined", r->bad_examined);
            cJSON_AddNumberToObject(bc, "dead", r->bad_n[1]);
            cJSON_AddNumberToObject(bc, "noisy", r->bad_n[2]);
            cJSON_AddNumberToObject(bc, "out", r->bad_n[3]);
            cJSON_AddNumberToObject(bc, "interpolated", r->bad_interpolated);
            cJSON_AddNumberToObject(bc, "removed", r->bad_removed);
        }
        cJSON *art = cJSON_AddObjectToObject(root, "artifacts");
        if (art) {
            cJSON_AddBoolToObject(art, "removal", r->artifact_removal);
            cJSON_AddNumberToObject(art, "periods", (double)r->n_artifacts);
            cJSON_AddNumberToObject(art, "blanked_s", r->artifact_blanked_s);
            cJSON_AddNumberToObject(art, "expected_lost_spikes", r->artifact_lost_spikes);
        }
        cJSON *plan = r->plan_json ? cJSON_Parse(r->plan_json) : NULL;
        if (plan)
            cJSON_AddItemToObject(root, "plan", plan);
    }
    char *text = st == BS_OK ? cJSON_Print(root) : NULL;
    if (st == BS_OK && !text)
        st = BS_ERR_MEMORY;
    char path[4200];
    if (st == BS_OK)
        st = bs_path_join(path, sizeof path, out_dir, "run_summary.json");
    if (st == BS_OK)
        st = bs_write_file_atomic(path, text, strlen(text));
    free(text);
    cJSON_Delete(stages);
    cJSON_Delete(root);
    if (st == BS_ERR_MEMORY)
        return bs_error(BS_ERR_MEMORY, "out of memory writing run_summary.json");
    return st;
}
