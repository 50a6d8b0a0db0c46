/*
 * run_summary.h - the resource report of a run (docs/ARCHITECTURE.md §3):
 * per stage its wall time, planned peak, measured peak of tracked memory and
 * the process's peak RSS, printed at the end of `sort` and written to
 * OUT/run_summary.json.
 *
 * Mechanism. bs_run_stage_begin() resets the accountant's peaks
 * (bs_mem_reset_peaks) and the kernel's peak-RSS counter (writing "5" to
 * /proc/self/clear_refs resets VmHWM on Linux >= 4.0; where that fails the
 * RSS column is the process peak so far), and notes the time;
 * bs_run_stage_end() reads the tracked peak (host), VmHWM, the time and the
 * process's CPU time (getrusage: user + system of every thread).
 * So every stage's numbers are its own.
 *
 * JSON (written atomically): {"boundsort_version", "total_wall_s",
 * "peak_rss_bytes", "budget_bytes", "threads", "stages": [{"name", "wall_s",
 * "read_preprocess_s", "read_ahead", "cpu_s", "cpu_utilisation" (cpu_s / wall_s / threads), "planned_peak_bytes", "tracked_peak_bytes",
 * "rss_peak_bytes", "strategy",
 * "gpu_peak_bytes" where a GPU was used}],
 * "mem_trace": the trace file as given (only when a trace was recorded),
 * "plan": the plan re-made with the real counts (plan.h JSON)}.
 */
#ifndef BS_RUN_SUMMARY_H
#define BS_RUN_SUMMARY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"

#define BS_RUN_MAX_STAGES 16

typedef struct {
    char name[24];
    char strategy[64];
    double wall_s;
    double read_s;        /* wall seconds of wall_s spent reading and preprocessing batches (stage.h) */
    double cpu_s;         /* CPU seconds (user + system, all threads) the process used during the stage */
    int read_ahead;       /* 1: the stage read its next batch on a second thread (stage.h) */
    size_t planned_peak;  /* bytes, host, from the plan (0: not planned) */
    size_t tracked_peak;  /* bytes, host, measured by the accountant */
    size_t gpu_peak;      /* bytes, GPU (--device cuda), measured by the accountant; 0 on the CPU */
    size_t rss_peak;      /* bytes, process peak RSS during the stage */
    size_t disk_planned;  /* bytes of files the plan says the stage writes in OUT */
    int64_t disk_written; /* bytes OUT's files grew by during the stage (du; -1: not measured) */
} bs_run_stage;

typedef struct {
    bs_run_stage stage[BS_RUN_MAX_STAGES];
    int n;
    double t0_s, t_stage_s, total_wall_s;
    double cpu_stage_s;   /* process CPU seconds at the running stage's start */
    int n_threads;        /* OpenMP threads of the run (the CPU utilisation's denominator) */
    size_t budget;        /* bytes, host (0: none) */
    size_t peak_rss;      /* bytes, whole run */
    char mem_trace[4096]; /* trace file path as given, "" when none */
    const char *plan_json; /* the final plan (plan.h JSON), written as "plan"; not owned; may be NULL */
    /* the ADC phase shift (preprocess.h): set when the run starts */
    int phase_shift;           /* 1: the channels' sampling skew was removed */
    const char *phase_shift_why; /* when not: why ("--no-phase-shift", "no ADC layout known for the probe") */
    double phase_shift_max;    /* largest delay removed, samples */
    /* bad channels (bad_channels.h): set by the channels stage */
    int bad_done;              /* 1: the channels were examined (the stage ran or was loaded) */
    const char *bad_mode;      /* "interpolate", "remove" or "keep" */
    int bad_chunks;            /* chunks examined (0 when resumed) */
    int bad_examined;          /* channels on the shanks examined */
    int bad_n[4];              /* channels per label: good, dead, noisy, out */
    int bad_interpolated;      /* channels rewritten from their neighbours */
    int bad_removed;           /* channels dropped from the sort */
    const char *denoise;       /* "cmr", "cmr-local", "destripe" (--denoise) */
    /* artifacts (preprocess.h): set by the finish stage */
    int artifact_removal;      /* 1: artifacts were blanked */
    int64_t n_artifacts;       /* periods in OUT/artifacts.tsv */
    double artifact_blanked_s; /* seconds they cover */
    double artifact_lost_spikes; /* spikes of the sorted units expected in them: every unit's rate outside
                                    the periods times their length */
} bs_run_summary;

void bs_run_summary_init(bs_run_summary *r, size_t budget);
void bs_run_stage_begin(bs_run_summary *r, const char *name, size_t planned_peak, const char *strategy);
void bs_run_stage_end(bs_run_summary *r);
/* The running stage was skipped: its checkpoint was loaded (--resume). */
void bs_run_stage_resumed(bs_run_summary *r);
/* The running stage's plan changed (re-planned with real counts). */
void bs_run_stage_replan(bs_run_summary *r, size_t planned_peak);

/* Seconds the running stage spent reading and preprocessing a batch, added
 * to its read_s. */
void bs_run_stage_read(bs_run_summary *r, double seconds);

/* The running stage reads ahead. */
void bs_run_stage_read_ahead(bs_run_summary *r);

/* The running stage's disk: planned and written (bytes; see bs_run_stage). */
void bs_run_stage_disk(bs_run_summary *r, size_t planned, int64_t written);

/* Process peak RSS since start (bytes), and the current VmHWM (bytes). */
size_t bs_process_peak_rss(void);

/* The table, one row per stage, to `out`. */
void bs_run_summary_print(const bs_run_summary *r, FILE *out);
/* OUT/run_summary.json. */
bs_status bs_run_summary_write(const bs_run_summary *r, const char *out_dir);

#endif
