/*
 * jobs.h - `boundsort batch`: many recordings, sorted one `boundsort sort`
 * child process each, locally or as one SLURM job array.
 *
 * Names: in the code this module is "jobs" (src/jobs, bs_jobs_*, bs_job),
 * because "batch" means one thing here: a batch of samples, the unit the
 * sorter reads and processes (src/io/batch.h, --batch-seconds; Kilosort's
 * word). The command stays `boundsort batch`, the HPC term users know for
 * running many jobs (its state folder stays OUTROOT/.batch).
 *
 * Mechanism, in four parts:
 *
 *   1. Discovery (discover.c). ROOT is walked depth-first in name order
 *      (hidden folders, symbolic links to folders and OUTROOT itself are
 *      skipped). A recording is:
 *        - SpikeGLX: every `*.ap.bin` (a run folder `RUN_g0/RUN_g0_imec0/` with
 *          several probes gives one job per probe); its `.meta` must be beside;
 *        - Open Ephys: a folder holding `structure.oebin` (a Record Node's
 *          recordingN): one job per neural (spike-band) stream, opened with
 *          --stream; the folder is not searched further;
 *        - NWB: every `*.nwb` file (needs a build with HDF5);
 *        - raw folder: a folder holding `recording.bin`, `recording.json`
 *          (fs_hz; optional n_chan = columns, dtype, uv_per_bit, offset,
 *          header_bytes) and `probe.json` (or `probe.prb`): what `boundsort
 *          simulate` writes. The folder is the job's REC, read by
 *          bs_raw_folder_open (src/io/raw.c) as `sort FOLDER` reads it. A
 *          `recording.bin` without the two others is listed as not
 *          sortable, with the reason.
 *      Each one is opened with bs_recording_open() and planned with
 *      bs_sort_plan_make() (no data read): bytes of its data file, duration,
 *      channels and the planned peak of tracked memory. One that cannot be
 *      opened is kept in the list with the reason (it is not run).
 *      Outputs mirror the input tree: OUTROOT/<path of the data file under
 *      ROOT without ".ap.bin" / ".bin" / ".nwb">, and for Open Ephys
 *      OUTROOT/<recording folder>/<stream name>.
 *
 *   2. Memory. A job's sort budget (`sort --mem`) is its planned peak times
 *      (1 + margin), rounded up to a MiB, or the fixed --mem-per-task; its
 *      whole need (`job_mem`) adds the untracked overhead of a run
 *      (bs_plan_overhead_bytes: code, libraries, thread stacks). Locally,
 *      jobs start in list order while the running jobs' job_mem sum stays
 *      within the total budget (and at most `max_jobs` at once); a job's
 *      budget is capped at total - overhead, so a job that cannot fit is
 *      refused by boundsort itself (exit 3) with the stage that does not fit.
 *      On SLURM all tasks of an array share one --mem: the largest job_mem.
 *
 *   3. State (state.c), in OUTROOT/.batch/: state.json (the jobs, their sort
 *      arguments and budgets, the mode and the SLURM submissions; written
 *      atomically by the batch command only), logs/<id>.log (each sort's
 *      stdout and stderr), and per task, written by the task itself when it
 *      starts and ends: tasks/<id>.start ("start <unix s> <slurm job id or
 *      pid> <host>") and tasks/<id>.status ("exit <code>", written to a
 *      temporary name and renamed). `--status` joins these with the
 *      scheduler's view (squeue, then scontrol, then `sacct -c`) for tasks
 *      that never wrote a status (pending, running, or killed by SLURM).
 *      The reason of a failure is the last "boundsort: ..." line of its log.
 *
 *   4. Runners: local.c forks /proc/self/exe per job (`boundsort sort REC -o
 *      OUT --mem BUDGET --resume ...`); slurm.c writes OUTROOT/.batch/
 *      submit-<n>.sbatch and tasks-<n>.tsv (line i = array task i: the job
 *      id, then the sort arguments, tab-separated) and submits it with
 *      sbatch. `--resume` is always passed, so a rerun of a completed or
 *      interrupted job costs only the stages that are not checkpointed.
 */
#ifndef BS_JOBS_H
#define BS_JOBS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"
#include "../pipeline/sort.h"

#define BS_JOBS_STATE_DIR ".batch"
#define BS_JOBS_MAX_ARGS 48

typedef struct {
    int id;                /* index in the list, 0-based (array task ids are separate) */
    char rec[4096];        /* REC given to sort: absolute path (a raw folder: the folder) */
    char rel[1024];        /* output folder relative to OUTROOT */
    char out[4096];        /* OUTROOT/rel */
    char kind[16];         /* "spikeglx", "openephys", "nwb", "raw" */
    char stream[256];      /* Open Ephys stream name, "" otherwise */
    int ok;                /* 1: opened and planned; 0: not sortable (reason) */
    char reason[1024];     /* why not sortable, or why the plan refuses it, "" otherwise */
    uint64_t bytes;        /* size of the data file, bytes */
    double duration_s;     /* seconds */
    int n_chan;            /* sorted channels */
    double fs_hz;          /* Hz */
    size_t plan_peak;      /* planned peak of tracked memory, bytes */
    int plan_fits;         /* 1: the plan fits sort_mem (else boundsort will refuse it, exit 3) */
    size_t sort_mem;       /* --mem given to sort, bytes */
    size_t job_mem;        /* sort_mem + untracked overhead, bytes: what the job may use in all */
} bs_job;

typedef struct {
    const char *root;        /* ROOT as given */
    const char *outroot;     /* OUTROOT (NULL: ROOT's sibling "<ROOT>_sorted") */
    bs_sort_params sp;       /* threads, batch length, drift, cap: as sort takes them */
    double batch_s;          /* --batch-seconds, 0 = default */
    const char *params_path; /* --params FILE as an absolute path (sp holds what it sets), or NULL */
    int threads;             /* threads per job (planned and passed to sort) */
    size_t total_mem;        /* local: bytes all running jobs may use together */
    size_t mem_per_task;     /* fixed sort budget per job, bytes (0: from the plan) */
    double margin;           /* fraction added to the planned peak (0.25) */
    int no_qc;               /* pass --no-qc */
    int no_report;           /* pass --no-report */
    int n_extra;             /* extra sort arguments (after `--`) */
    char **extra;
} bs_jobs_opts;

typedef struct {
    char root[4096];     /* absolute */
    char outroot[4096];  /* absolute */
    char state_dir[4200];
    int n;
    bs_job *jobs;  /* [n] (bs_mem "jobs/list") */
} bs_jobs;

/* OUTROOT for ROOT when none is given: "<parent of ROOT>/<name of ROOT>_sorted". */
bs_status bs_jobs_default_outroot(const char *root, char *out, size_t len);

/* Walk ROOT, open and plan every recording (part 1 and 2 above). */
bs_status bs_jobs_discover(const bs_jobs_opts *o, bs_jobs *b);
void bs_jobs_free(bs_jobs *b);

/* The listing: a table, or JSON (caller frees). */
void bs_jobs_print_table(const bs_jobs *b, FILE *out);
char *bs_jobs_json(const bs_jobs *b);

/* ---- state (state.c) ---- */
typedef enum { BS_TASK_NOT_RUN = 0, BS_TASK_PENDING, BS_TASK_RUNNING, BS_TASK_DONE, BS_TASK_FAILED,
               BS_TASK_SKIPPED } bs_task_state;

typedef struct {
    int id;
    char rec[4096], out[4096], stream[256];
    int ok;
    char reason[1024];      /* skipped: why not sortable */
    size_t sort_mem;        /* bytes */
    int n_args;
    char **args;            /* sort arguments (argv[0] = "sort"), malloc'ed */
    char slurm_id[64];      /* "<array job id>_<index>" of its last submission, "" when local */
    /* filled by bs_jobs_state_poll */
    bs_task_state state;
    int exit_code;          /* from tasks/<id>.status, -1 if none */
    char why[1024];         /* failure reason (log line or scheduler state) */
} bs_jobs_task;

typedef struct {
    char state_dir[4200];
    char root[4096], outroot[4096];
    char mode[16];          /* "local" or "slurm" */
    /* SLURM options of the first submission, kept for --retry-failed */
    int cpus_per_task;
    char time[64], partition[128], account[128], gres[64], job_name[128];
    int max_running;        /* --max-running: at most this many array tasks at once (%N), 0: no limit */
    char *sbatch_extra;     /* --sbatch-extra's text (heap; NULL: none): #SBATCH lines and setup lines */
    size_t overhead;        /* bytes, untracked per-task overhead added to the array's --mem */
    int n_submissions;
    int n;
    bs_jobs_task *tasks;   /* [n] */
} bs_jobs_state;

/* Build the state of a discovered batch (every sortable job gets its sort
 * arguments) and write it. */
bs_status bs_jobs_state_from(const bs_jobs *b, const bs_jobs_opts *o, const char *mode, bs_jobs_state *s);
bs_status bs_jobs_state_write(const bs_jobs_state *s);
/* The text of state.json (caller frees); NULL when out of memory. */
char *bs_jobs_state_json(const bs_jobs_state *s);
/* Read OUTROOT/.batch/state.json. BS_ERR_INPUT naming the file when absent or malformed. */
bs_status bs_jobs_state_read(const char *outroot, bs_jobs_state *s);
void bs_jobs_state_free(bs_jobs_state *s);

/* Per-task files. */
bs_status bs_jobs_task_mark_start(const bs_jobs_state *s, int id, const char *who);
bs_status bs_jobs_task_mark_exit(const bs_jobs_state *s, int id, int code);
void bs_jobs_task_clear(const bs_jobs_state *s, int id);
void bs_jobs_log_path(const bs_jobs_state *s, int id, char *buf, size_t len);

/* Fill every task's state, exit code and reason from its files and, for
 * SLURM tasks without a status, from the scheduler. */
void bs_jobs_state_poll(bs_jobs_state *s);
const char *bs_task_state_name(bs_task_state st);
/* The summary: one line per task and the counts; returns the number of
 * tasks not done (skipped ones included). */
int bs_jobs_print_status(const bs_jobs_state *s, FILE *out, int json);

/* ---- runners ---- */
/* Run tasks `which` (n_which ids) locally, at most max_jobs at once, the
 * running tasks' sort_mem + overhead within total_mem bytes. Returns the
 * number of tasks that failed. */
int bs_jobs_run_local(bs_jobs_state *s, const int *which, int n_which, int max_jobs, size_t total_mem,
                       int threads, int quiet);

typedef struct {
    int cpus_per_task;
    const char *time;        /* --time, NULL: the partition's default */
    const char *partition;
    const char *account;
    const char *gres;        /* e.g. "gpu:1", NULL: none */
    const char *job_name;    /* default "boundsort-batch" */
    int max_running;         /* array throttle (--array=0-N%max_running), 0: none */
    const char *extra;       /* --sbatch-extra text (bs_jobs_sbatch_extra_check'ed), NULL: none */
    size_t overhead;         /* untracked bytes per task added to the largest sort budget */
} bs_slurm_opts;

/* Write the sbatch script and task list of submission number s->n_submissions + 1
 * for tasks `which`; *script gets the script text (caller frees). With
 * submit, run sbatch, record the job id per task and write the state. */
bs_status bs_jobs_slurm(bs_jobs_state *s, const int *which, int n_which, const bs_slurm_opts *so, int submit,
                         char **script);

/* Check the text of an --sbatch-extra file (named path in messages): lines starting "#SBATCH" are
 * sbatch directives, added after boundsort's own; every other line (module load, conda activate,
 * export, comments) runs before the sort. Refused (BS_ERR_USAGE): a NUL byte, more than 64 KiB, and
 * directives boundsort sets from its plan or needs: --array/-a (use --max-running), --output/-o,
 * --mem/--mem-per-cpu/--mem-per-gpu (the plan's; use --mem-per-task). */
bs_status bs_jobs_sbatch_extra_check(const char *text, size_t len, const char *path);

/* Run argv (argv[0] looked up on PATH) and capture up to len-1 bytes of its
 * stdout into buf; returns its exit code, or -1 if it could not run. */
int bs_jobs_capture(const char *const *argv, char *buf, size_t len);
/* The same, with its stderr (lines joined with "; ") in err (err_len bytes; NULL: discarded). */
int bs_jobs_capture_err(const char *const *argv, char *buf, size_t len, char *err, size_t err_len);

#endif
