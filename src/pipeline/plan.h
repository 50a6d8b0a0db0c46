/*
 * plan.h - the memory planner of `boundsort sort` / `boundsort plan`
 * (docs/ARCHITECTURE.md §3).
 *
 * For each stage the planner lists its large host buffers, sized by the same
 * functions the stages use to allocate them (bs_batch_reader_bytes,
 * bs_preprocess_scratch_bytes, bs_whitener_bytes, bs_detect_scratch_bytes,
 * bs_cluster_center_bytes, bs_match_templates_bytes, bs_pair_table_bytes,
 * bs_peel_ws_bytes, ...), plus an allowance for small tracked buffers
 * (grids, per-center templates, file writers), and the strategy chosen. The
 * stage peak is the sum of what is live at once; the run's peak is the
 * largest stage peak.
 *
 * Strategies change how, never what: today the template-pair table of the
 * matching stage is stored full, half (by its symmetry) or computed on the
 * fly; all three give the same bits. The planner picks the fastest that
 * fits the budget. Batch length is a parameter (it shapes the result), so it
 * is never changed to fit; the refusal names it instead.
 *
 * Some sizes depend on the data: the number of templates K, the spikes per
 * batch and in total. Before sorting they are assumptions, printed with the
 * plan (K defaults to 1.5 per channel, `--templates K` sets it; spikes at
 * 10 Hz per template). `sort` re-plans the later stages with the real K and
 * spike counts when it knows them, and stops with BS_ERR_MEMORY (exit 3),
 * naming the stage, when even the smallest strategy no longer fits.
 * Per-center clustering is bounded by max_center_spikes whatever the data.
 *
 * With --device cuda a second budget (--gpu-mem) is planned the same way:
 * each stage lists its tracked GPU bytes (today the matcher's scorer,
 * src/gpu/gpu.h), and a stage over the GPU budget is refused like one over
 * the host budget (exit 3, naming the stage, the bytes and what reduces them).
 *
 * Disk is planned too: each stage states the bytes of the files it leaves in
 * OUT (checkpoint files under OUT/.stages and outputs), from the same counts
 * (spikes detected and matched, templates, channels, batches). `sort` checks
 * the free space of OUT's file system against what the stages still write
 * before reading any data, and again before each stage with the counts known
 * by then; it refuses (exit 3, with the bytes) rather than fill the disk
 * hours into a run. Spike counts are assumptions until detection and
 * matching have run, so the early checks can be off by the assumption;
 * `sort --no-disk-check` turns the refusal into a warning.
 *
 * The stages are those of the table (stages.h): the planner computes the
 * shapes every stage shares (bs_plan_shapes: reader, scratch, whitener,
 * grid, centers, drift sizes), then calls each stage's plan function, which
 * lists that stage's buffers; re-planning with real counts calls them again
 * from a given stage on.
 */
#ifndef BS_PLAN_H
#define BS_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../cluster/cluster.h"
#include "../common/status.h"
#include "../io/recording.h"
#include "../match/match.h"
#include "sort.h"

#define BS_PLAN_MAX_BUFFERS 12

#define BS_PLAN_MAX_STAGES 12
#define BS_PLAN_SMALL_BYTES ((size_t)1 << 20) /* allowance for a stage's small tracked buffers, bytes */
#define BS_PLAN_ASSUMED_RATE_HZ 10.0          /* spikes per second per template, before the data says */

typedef struct {
    const char *what;   /* buffer description, e.g. "batch reader" */
    size_t bytes;
} bs_plan_buffer;

typedef struct {
    const char *name;       /* "whitening", "basis", ... */
    char strategy[64];
    bs_plan_buffer buf[BS_PLAN_MAX_BUFFERS];
    int n_buf;
    size_t peak;            /* bytes with the chosen strategy */
    size_t min_peak;        /* bytes with the smallest strategy */
    size_t sure_min;        /* the part of min_peak that no data-dependent assumption enters */
    const char *reduce;     /* the parameter that would reduce min_peak */
    size_t gpu;             /* bytes of tracked GPU memory (--device cuda; 0 on the CPU): one strategy, so its
                               own min */
    size_t gpu_sure;        /* the part of gpu that no assumption enters (an assumed K never refuses a run) */
    size_t disk;            /* bytes of the files the stage leaves in OUT (its checkpoint files and outputs),
                               with the plan's counts (bs_plan_disk) */
    int read_ahead;         /* 1: the stage reads the next batch on a second lane while it works on one
                               (bs_plan_read_ahead; stage.h) */
    int lanes;              /* batches the stage works on at once, each on its own thread and lane (stage.h:
                               bs_run_lane_for, bs_run_lanes); 0 or 1: one at a time, on all the threads */
} bs_plan_stage;

/* Bytes of what stays allocated through the batch loops, and the sizes the
 * stages' plan functions need that come from the probe (no data read). */
typedef struct {
    size_t reader, scratch, whitener, grid, centers, basis, drift; /* bytes */
    size_t artifact;       /* artifact counts and periods of one window (0: removal off), bytes */
    size_t drift_hist;     /* drift histograms, bytes (0: no shank qualifies or --no-drift) */
    size_t drift_detector; /* drift peak detector, bytes */
    size_t drift_estimate; /* drift registration, bytes */
    size_t drift_motion;   /* the motion estimate alone (what the drift stage's files hold), bytes */
    int whiten_k;          /* channels per whitening neighbourhood */
    int center_chans;      /* union channels of the widest clustering center */
    int grid_pos, grid_chans; /* detection grid: positions, channels per position */
    size_t qc_spill_spike;    /* disk of one spike of the quality metrics' waveform subset, bytes (qc.h) */
    size_t bad_scan;          /* the bad-channel scan's buffers (bad_channels.h: bs_bad_scan_bytes), bytes */
    size_t bad_interp;        /* the bad channels' interpolation weights, at most, bytes (resident) */
    size_t denoiser;          /* --denoise cmr-local / destripe: its tables, bytes (resident) */
} bs_plan_shapes;

typedef struct {
    bs_sort_params p;        /* the parameters planned for (a copy) */
    bs_plan_shapes shapes;
    /* shapes */
    int n_chan, n_threads, K, n_sup, nt, n_pc;
    int64_t n_samples, batch_samples, width, n_batches;
    int64_t n_spikes;        /* total spikes (assumed or measured) */
    int64_t pair_nnz;        /* overlapping template pairs (estimated or exact) */
    int k_assumed, spikes_assumed, nnz_assumed; /* 1 where the value is an assumption */
    int max_iter, n_pc_chan; /* matching parameters that size buffers */
    int64_t peel_n_t;        /* samples of a peeling window with its halos (match.h) */
    int64_t n_detected;      /* detected spikes (assumed until detection ran) */
    int64_t center_spikes;   /* spikes of the largest center, after the cap (assumed until known) */
    int64_t cluster_k_bound; /* templates the clustering can make, at most: per center, the fewer of its clusters
                                and its clustered spikes / min_template_spikes (K until detection ran) */
    int64_t cluster_max_l;   /* clusters of one center, at most (cluster.n_init until detection ran) */
    int center_chans, feat_len; /* union channels of the widest center; floats per detected spike */
    int n_centers;
    double fs_hz;
    size_t cluster_fixed;    /* bytes of the clustering stage besides the index and one center */
    bs_cluster_params cp;     /* p.cluster with the recording's rate and detect.dmin_um: what the clustering stage runs with */
    size_t resident;         /* bytes live through every batch loop: reader, scratch, whitener */
    size_t read_ahead;       /* bytes of a second lane (stage.h): what `resident` holds for reading (reader,
                                scratch, artifact arrays) and a drift-corrected whitener */
    size_t budget;           /* bytes of tracked host memory (0: none) */
    size_t gpu_budget;       /* bytes of tracked GPU memory (--gpu-mem; 0: none or the CPU) */
    size_t gpu_peak;         /* max over stages of their GPU bytes */
    int gpu_short;           /* 1: the failing stage fails the GPU budget (not the host's) */
    bs_pair_mode pair_mode;
    size_t pair_keep;        /* on the fly: bytes of the busiest templates' pair rows kept (bs_pair_table_keep; 0:
                                none), what the budget leaves the matching stage */
    int cluster_width;       /* centers the clustering stage clusters at once: as many as threads and budget allow */
    int finish_k1;           /* templates after the finishing stage's amplitude and feature splits, once they ran
                                (0 before: 2K, the bound) */
    bs_plan_stage stage[BS_PLAN_MAX_STAGES]; /* one per stage of the table (stages.h), in run order */
    int n_stages;
    size_t peak;             /* max over stages */
    int fits;                /* every stage's sure_min <= budget: the run can start */
    int machine_short;       /* set by the caller: the budget fits, but not with the threads' overhead in
                                this machine's RAM (`plan` refuses it after printing) */
    int failing;             /* first stage whose sure_min does not fit, or -1 */
    int may_not_fit;         /* some stage's min_peak (with assumptions) exceeds the budget */
    size_t disk;             /* bytes every stage's files take in OUT (sum of stage[].disk) + disk_qc + disk_report
                                + disk_keep */
    size_t disk_qc;          /* bytes of the quality metrics `sort` runs after the stages (0 with p.no_qc) */
    size_t disk_report;      /* bytes of the report page `sort` writes last (0 with p.no_report) */
    size_t disk_keep;        /* bytes of --keep-preprocessed's copy into the Phy folder, made while the stage
                                file still exists (0 without the flag or when the file is moved: raw_copy.c) */
    int64_t disk_free;       /* bytes the run may write in OUT: its file system's free space, or p.disk_budget
                                when smaller (bs_sort_plan_fit_disk; -1: not known or not asked) */
    int disk_budgeted;       /* 1: disk_free is p.disk_budget (--disk), not the free space */
    size_t pre_file_bytes;   /* bytes of the preprocessed recording's float16 file (C x n_samples x 2) */
    size_t raw_ahead_bytes;  /* what a lane's reader on the raw file adds to hold a whole window's rows, so that
                                the next one is read ahead (batch.h; the preprocess stage's lanes) */
    size_t pre_stream_bytes; /* bytes streaming it adds to `resident` (cache and raw lane: pre_stream.c) */
    int pre_stream;          /* 1: the preprocessed recording is streamed, not written: every pass preprocesses
                                its batches again (stage.h, bs_pre_stream; the same bytes), chosen by
                                bs_sort_plan_fit_disk when the run does not fit the disk otherwise */
} bs_sort_plan;

/* Default memory budget: 3/4 of the machine's physical memory, bytes. */
size_t bs_plan_default_budget(void);

/* Fixed untracked overhead of a run (code, libraries, thread stacks, BLAS
 * buffers, stdio), bytes: peak RSS stays under the budget plus this. */
size_t bs_plan_overhead_bytes(int n_threads);

/* Plan a sort of `rec` with parameters `p` on n_threads under `budget` bytes
 * (0: unlimited). K <= 0 assumes 1.5 templates per channel. Builds the
 * detection grid and the clustering centers (cheap, no data read). */
bs_status bs_sort_plan_make(const bs_recording *rec, const bs_sort_params *p, int n_threads, size_t budget,
                            int K, bs_sort_plan *plan);

/* Re-plan stage `from` and every later one once detection has run:
 * n_detected spikes, the largest center holding `largest_center` of them
 * (before the cap), at most k_bound templates out of the clustering and
 * max_l clusters out of one center. */
void bs_sort_plan_detected(bs_sort_plan *plan, int from, int64_t n_detected, int64_t largest_center,
                           int64_t k_bound, int64_t max_l);

/* Re-plan stage `from` and every later one once K, the pair count and the
 * spike count are known (pair_nnz < 0 estimates it; n_spikes < 0 keeps the
 * current value). */
void bs_sort_plan_update(bs_sort_plan *plan, int from, int K, int64_t pair_nnz, int64_t n_spikes);

/* For the stages' plan functions: a buffer of the stage, the sum of its
 * buffers, and peak = min_peak = sure_min = that sum (a stage with one
 * strategy and nothing assumed). */
void bs_plan_add(bs_plan_stage *s, const char *what, size_t bytes);
size_t bs_plan_sum(const bs_plan_stage *s);
/* A batch stage's last plan step, after its peak is set: with at least 2
 * threads, and when the peak plus a second lane fits the budget (or there is
 * none), the stage reads ahead: the lane is added to its buffers and its
 * peak (not to min_peak: without it the stage still runs). extra: bytes the
 * stage's second lane holds beyond the run's reading buffers (pl->read_ahead). */
void bs_plan_read_ahead(const bs_sort_plan *pl, bs_plan_stage *s, size_t extra);
/* How many batches a stage works on at once (bs_plan_stage.lanes): the
 * largest L, at most the threads and the batches, whose host bytes
 * base + max(0, L * per_lane - credit) fit the budget and whose L x gpu_lane
 * GPU bytes fit the GPU budget (credit: the one-lane buffers that L lanes
 * replace); 1 when no L from 2 up does, or when the preprocessed recording
 * is streamed (pre_stream). */
int bs_plan_lanes(const bs_sort_plan *pl, size_t base, size_t per_lane, size_t credit, size_t gpu_lane);
void bs_plan_stage_total(bs_plan_stage *s);

/* The refusal (BS_ERR_MEMORY, exit 3, naming the stage, its bytes and the
 * parameter that would reduce them). stage < 0: before the run, the first
 * stage whose sure part does not fit (assumptions never refuse a run);
 * stage >= 0: that stage's min_peak, once re-planned with real counts. */
bs_status bs_sort_plan_check(const bs_sort_plan *plan, int stage);

/* Disk. Each stage's plan function lists the files it leaves in OUT:
 * n_files files holding payload_bytes in all, each counted with 8 KiB for its
 * header, its partly used last block and its share of the folders and the
 * manifest, so the sum bounds what `du` reports. */
void bs_plan_disk(bs_plan_stage *s, int n_files, double payload_bytes);
/* Bytes stages [from, n_stages) and the quality metrics still write in OUT; a
 * stage with done[i] set is left out (resumed: its files are there already;
 * done may be NULL). */
size_t bs_sort_plan_disk_need(const bs_sort_plan *pl, int from, const int *done);
/* The disk of stages [from, n_stages) (done: as bs_sort_plan_disk_need) against what the run may write in
 * OUT: free_bytes (its file system's free space, -1: unknown) or p.disk_budget (--disk) when smaller, which
 * becomes disk_free. pre_missing: a resumed run must write the preprocessed recording's file again (counted).
 * When the need does not fit and the file is still to be written (from <= the preprocess stage, or
 * pre_missing) and not kept (--keep-preprocessed needs it), the plan streams the preprocessed recording
 * instead (pre_stream, re-planned from `from`: more memory, no file). Returns the need, after any switch. */
size_t bs_sort_plan_fit_disk(bs_sort_plan *pl, int from, const int *done, int pre_missing, int64_t free_bytes);
/* The disk refusal: BS_ERR_MEMORY (exit 3) when free_bytes >= 0 is less than
 * need, naming the stages from `from` on, the bytes, the free space and the
 * counts that were assumed; BS_OK otherwise. */
bs_status bs_sort_plan_disk_check(const bs_sort_plan *pl, int from, size_t need, int64_t free_bytes,
                                  const char *out_dir);

void bs_sort_plan_print(const bs_sort_plan *plan, FILE *out);
/* JSON text (caller frees with free()); NULL when out of memory. */
char *bs_sort_plan_json(const bs_sort_plan *plan);

#endif
