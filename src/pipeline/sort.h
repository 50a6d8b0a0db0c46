/*
 * sort.h - `boundsort sort`: the stages in order (docs/ARCHITECTURE.md).
 * The stages are the table of stages.h, each defined in its own folder;
 * this module only runs them in order (bs_sort_run is a loop over the
 * table, stage.h says what one step of it does):
 *
 *   0. channels   chunks spread over the recording, high-passed: dead, noisy
 *                 and out-of-brain channels (src/preprocess/stage_channels.c);
 *                 interpolated from their neighbours in every batch from here
 *                 on, or dropped from the probe (--bad-channels)
 *   1. whitening  1 batch in whiten_stride (spread, flat and saturated ones
 *                 passed over: stage.h, bs_sample_batches): mean removal, median
 *                 reference, high-pass; channel covariance -> local whitening
 *                 (src/preprocess/stage_whitening.c)
 *   1b. drift     every batch, high-passed: threshold peaks -> per-shank motion
 *                 (src/drift/stage_drift.c); from here on each batch is
 *                 whitened with its drift-corrected matrix (off with no_drift,
 *                 or when no shank is tall enough)
 *   2. basis      1 batch in basis_stride (chosen the same way), whitened:
 *                 isolated peaks -> temporal PCs and detection shapes
 *                 (src/detect/stage_detect.c)
 *   3. detect     every batch: universal-template detection; spikes and
 *                 features stream to OUT/.stages/detect/ in batch order
 *                 (src/detect/stage_detect.c)
 *   4. cluster    per spatial center, the detected spikes read back from
 *                 disk: graph clustering -> channel-sparse templates
 *                 (src/cluster/stage_cluster.c)
 *   5. match      every batch: peeling with the templates; spikes stream to
 *                 disk (src/match/stage_match.c)
 *   6. finish     merges, shadows, duplicate removal, labels, the Phy folder
 *                 (src/cluster/stage_finish.c)
 *
 * Before reading data, the planner (plan.h) sizes every stage against the
 * memory budget and refuses a run that cannot fit (BS_ERR_MEMORY); stages
 * re-plan with the real template and spike counts. Every stage is timed and
 * its tracked and RSS peaks measured (run_summary.h): the table is printed
 * at the end and written to OUT/run_summary.json.
 *
 * Each stage checkpoints its outputs under OUT/.stages with a manifest
 * entry; `resume` skips the stages already complete (checkpoint.h).
 *
 * Every algorithm parameter is a field of bs_sort_params (nested: detect,
 * drift, cluster, finish), built once by bs_sort_default_params and the
 * options, and given as is to the plan and to every stage. params.h lists
 * each one with its group and unit: the same table puts them all in the
 * resume key and in OUT/params.json.
 *
 * Threads and memory budget are settings of the process, made once by the
 * caller before any run (`boundsort sort` does it at start:
 * omp_set_num_threads, bs_mem_set_budget); bs_sort_run never changes them:
 * it reads them once into its run context (stage.h), from which the plan,
 * the scratch sizes and the stages take them, and refuses to start when
 * p->threads or p->mem_budget disagree with what the process was given.
 *
 * Batches are read with a halo of `halo_samples` on each side (enough for
 * the high-pass to equal whole-recording filtering to float precision), and
 * every stage reports only what lies in a batch's own samples, so batch
 * boundaries never duplicate or drop a spike. Each batch is processed by all
 * threads (OpenMP inside the kernels) and batches run in order, so outputs do
 * not depend on the thread count.
 */
#ifndef BS_SORT_H
#define BS_SORT_H

#include <stdint.h>

#include "../cluster/cluster.h"
#include "../cluster/stage_finish.h"
#include "../common/status.h"
#include "../detect/detect.h"
#include "../drift/drift.h"
#include "../io/recording.h"
#include "../match/sum_templates.h"
#include "../match/truncated.h"
#include "../preprocess/bad_channels.h"
#include "../preprocess/preprocess.h"

typedef struct {
    const char *out_dir;       /* output folder */
    int64_t batch_samples;     /* samples per batch (0: 2 s) */
    int64_t halo_samples;      /* samples of context each side (0: 20 ms) */
    double tmin_s, tmax_s;     /* the part of the recording sorted, s (tmax_s 0: to its end); spike times
                                  count from tmin_s (bs_sort_window) */
    int threads;               /* OpenMP threads the process was set to (0: whatever it runs with) */
    double highpass_hz;        /* high-pass cutoff, Hz */
    int highpass_order;        /* Butterworth order */
    int whiten_neighbors;      /* channels per local whitening neighbourhood */
    int whiten_stride;         /* one batch in n feeds the covariance (stage.h: bs_sample_batches) */
    int basis_stride;          /* one batch in n feeds the temporal bases */
    double max_railed_fraction; /* batches with more of their samples at their channel's extremes (flat
                                   or saturated; batch.h) feed neither (0.25) */
    bs_artifact_params artifact; /* artifact blanking of every whitened batch (preprocess.h) */
    int no_artifact_removal;   /* 1: no artifact blanking (--no-artifact-removal) */
    int no_phase_shift;        /* 1: keep the ADC sampling skew of Neuropixels channels (--no-phase-shift) */
    int denoise;               /* BS_DENOISE_CMR (global median reference), _CMR_LOCAL, _DESTRIPE (--denoise;
                                  preprocess.h) */
    bs_bad_channel_params bad; /* dead, noisy and out-of-brain channels: found, then interpolated or dropped
                                  (--bad-channels, --max-bad-channel-fraction; bad_channels.h) */
    bs_detect_params detect;
    int min_template_spikes;   /* clusters with fewer spikes make no template (but see small_template_*) */
    int small_template_spikes; /* ...down to this many when their mean waveform's norm is at least
                                  small_template_norm x match_threshold (10) */
    double small_template_norm; /* (12): a unit that large is not the threshold's noise crossings */
    double min_template_norm;  /* clusters whose mean waveform's norm is under this fraction of
                                  match_threshold make no template (0.75) */
    bs_sum_template_params sum; /* templates that are the sum of two others, removed before matching
                                  (src/match/sum_templates.h) */
    float match_threshold;     /* peeling threshold, whitened units */
    double match_threshold_of_amp; /* a low-tier template's threshold: this times its amplitude (the norm
                                  of its mean waveform, whitened units) when under match_threshold (0: off) */
    float match_threshold_floor; /* ...but never under this, whitened units */
    float match_amp_prior;     /* weight w of the first matching pass's amplitude prior, [0, 0.99] (0: off; the
                                  second pass's: match_trunc.amp_prior): a template's
                                  score B is compared as B^2 - w (B - mu_k)^2 (match.h) */
    double match_amp_prior_of_amp; /* mu_k: this times a_k (the learned mean waveform's norm, which
                                  detection's threshold biases high) */
    bs_trunc_params match_trunc; /* templates the threshold truncates, matched again at their own threshold
                                  (src/match/truncated.h) */
    int match_max_iter;        /* peeling iterations per peeling window */
    int64_t match_window_samples; /* central samples of a peeling window (match.h, bs_peel_span): the
                                  matcher holds K x (this + 4 nt) scores, whatever the batch length */
    int n_pc_chan;             /* channels per spike in pc_features.npy */
    bs_cluster_params cluster; /* per-center graph clustering and centers (src/cluster/cluster.h); its fs_hz
                                  and dmin_um are not parameters: the recording's rate and detect.dmin_um */
    bs_finish_params finish;   /* merges, shadows, duplicates, labels (src/cluster/stage_finish.h) */
    int64_t max_center_spikes; /* spikes clustered per center: more are subsampled evenly (200000) */
    double low_tier_max_cos;   /* with a low tier (detect.th_low): a low-tier cluster whose mean features have
                                  at least this cosine with a high-tier cluster of its center makes no template */
    double low_tier_majority;  /* ...unless it holds at least this many times that cluster's spikes and its
                                  mean features' norm is at least min_template_norm x match_threshold: then the
                                  high-tier cluster makes none and the low-tier one the unit's (2; 0: never) */
    size_t mem_budget;         /* bytes of tracked host memory the accountant was set to (0: unlimited);
                                  never changes the result */
    const char *mem_trace;     /* path of the JSON-lines allocation trace being recorded, or NULL */
    int device;                /* -1: the CPU; N >= 0: the matcher's scores on CUDA device N (--device cuda:N,
                                  src/gpu/gpu.h); the rest of the run stays on the CPU */
    int no_qc;                 /* 1: `sort --no-qc`: no quality metrics after the stages (their disk is not planned) */
    int no_report;             /* 1: `sort --no-report`: no report.html after the stages (its disk is not planned) */
    uint64_t disk_budget;      /* bytes the run may write in OUT (--disk; 0: its file system's free space): when
                                  the run does not fit, the preprocessed recording is streamed, not written
                                  (plan.h, pre_stream); never changes the result */
    int no_disk_check;         /* 1: OUT's file system having less free space than the plan's disk is a warning,
                                  not a refusal (plan.h) */
    int keep_preprocessed;     /* 1: `sort --keep-preprocessed`: the preprocessed recording is kept at the end as
                                  OUT/preprocessed.dat, which params.py names (src/export/raw_copy.c); never
                                  changes the sorting */
    size_t gpu_mem_budget;     /* bytes of tracked GPU memory the accountant was set to (--gpu-mem; 0: none) */
    int resume;                /* skip stages whose checkpoints match (checkpoint.h) */
    int no_drift;              /* 1: no drift estimation or correction */
    int drift_only;            /* 1: stop after the drift stage (its files written) */
    const char *motion_dir;    /* --motion FOLDER: SpikeInterface's Motion folder applied instead of the drift
                                  estimate (stage_drift.h), or NULL; in the resume key with its files */
    bs_drift_params drift;
    int quiet;                 /* no progress lines */
} bs_sort_params;

void bs_sort_default_params(bs_sort_params *p);

/* The batch geometry of a run at fs_hz, samples: p->batch_samples (default
 * 2 s) per batch and p->halo_samples (default BS_PREPROCESS_HALO_DEFAULT at
 * 30 kHz, scaled to the rate, at least one template length and the drift
 * peaks' suppression window) of context on
 * each side. The planner and the run both take it from here. */
void bs_sort_batch_geometry(const bs_sort_params *p, double fs_hz, int64_t *batch_samples, int64_t *halo);

/* Central samples of a peeling window: match_window_samples, at most one
 * batch (a larger window would only hold more empty scores). */
int64_t bs_sort_peel_window(const bs_sort_params *p, int64_t batch_samples);

/* Narrow rec to the part p sorts, [tmin_s, tmax_s) rounded to samples (tmax_s 0 or past the end: to the
 * end); nothing when tmin_s = tmax_s = 0. BS_ERR_INPUT when tmin_s is at or past the end. Every command that
 * sorts or plans calls it right after opening the recording. */
bs_status bs_sort_window(bs_recording *rec, const bs_sort_params *p);

/* The per-channel ADC sampling delays the preprocessing removes (the probe's adc_shift), or NULL with
 * p->no_phase_shift or a probe without them. */
const float *bs_sort_phase_shift(const bs_recording *rec, const bs_sort_params *p);

/* Sort rec into p->out_dir. The channels stage drops the bad channels it removes (--bad-channels remove,
 * and the out-of-brain ones with interpolate) from rec's probe (bs_recording_drop_channels), so what the
 * caller does next with rec (quality metrics, OUT/source.json) sees the channels sorted. */
bs_status bs_sort_run(bs_recording *rec, const bs_sort_params *p);

#endif
