/*
 * stage.h - what a stage of `boundsort sort` is, and the run context its
 * state passes through (docs/ARCHITECTURE.md).
 *
 * A stage is one bs_stage value, defined in its own folder (the whitening
 * stage in src/preprocess, drift in src/drift, shapes and detection in
 * src/detect, clustering and finishing in src/cluster, matching in
 * src/match) and listed once in the table of stages.h. The table drives
 * everything that used to name a stage by hand:
 *   - `plan` (plan.h): plan() sizes the stage's buffers from the plan's
 *     shapes; the stage's row of the plan is named after it;
 *   - `sort` (sort.c): for each stage in order, replan() (re-plan with real
 *     counts and refuse a stage that no longer fits), then the run summary's
 *     row opens, prepare(), then either load() (--resume: the stage's
 *     checkpoint files are complete) or run() (which writes the checkpoint
 *     files), the checkpoint entry is recorded with `files`, then finish();
 *   - resume (checkpoint.h): the manifest entry of a stage is its name and
 *     its `files`;
 *   - OUT/params.json: each stage lists the parameter groups it reads.
 * Hooks that a stage does not need are NULL. A stage with no files (finish)
 * is not checkpointed: it always runs.
 *
 * The run context (bs_run_ctx) carries the recording, the parameters, the
 * thread count and memory budget of the run (set once by the caller before
 * the run: sort.h), the batch reader and preprocessing shared by every
 * batch loop, and each stage's output for the later stages (whitener, drift
 * estimate, temporal basis, detection grid, templates, counts). A stage
 * reads the fields of earlier stages and fills its own; sort.c releases
 * them all at the end.
 */
#ifndef BS_STAGE_H
#define BS_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "../cluster/stage_cluster.h"
#include "../common/status.h"
#include "../detect/detect.h"
#include "../drift/drift.h"
#include "../io/batch.h"
#include "../io/npy.h"
#include "../io/recording.h"
#include "../match/match.h"
#include "../preprocess/preprocess.h"
#include "checkpoint.h"
#include "plan.h"
#include "run_summary.h"
#include "sort.h"

/* What reading one batch needs (read_lane.c): a batch reader (its own file
 * descriptor and window), the preprocessing scratch, the artifact arrays and
 * the drift-corrected whitener of the batch last read. */
typedef struct {
    bs_batch_reader reader;
    void *scratch;             /* preprocessing scratch */
    size_t scratch_bytes;      /* bytes */
    /* artifacts (preprocess.h): blanked in every whitened batch unless p->no_artifact_removal */
    int32_t *art_count;        /* width columns of scratch (NULL: removal off) */
    float *art_scale;          /* per channel: 1 / noise scale of an unwhitened batch */
    bs_artifact_period *art;   /* the periods of the last batch read (whitened or not), window columns */
    int art_n;                 /* periods found */
    int scales_own;            /* 1: art_scale holds the noise scales of the window last read, unwhitened, in
                                  which the artifact check blanked nothing (bs_run_read_noise_scales) */
    bs_drift_corrector corr;   /* per-batch drift-corrected whitening (once the drift stage ran) */
    int have_corr;
    int pre;                   /* 1: the reader reads the preprocessed recording (c->pre_rec), so a window only
                                  needs its whitening and artifact blanking */
    double railed;             /* railed fraction of the raw window last read by bs_run_read_preprocessed */
} bs_read_lane;

struct bs_read_ahead; /* read_lane.c */
typedef struct bs_pre_stream bs_pre_stream; /* pre_stream.c */

typedef struct bs_run_ctx {
    /* the run */
    bs_recording *rec;         /* the channels stage drops the bad channels it removes from its probe */
    const bs_sort_params *p;
    int n_threads;             /* OpenMP threads of the run (the process's setting, read once) */
    size_t budget;             /* bytes of tracked host memory (0: unlimited) */
    char stage_dir[4096];      /* OUT/.stages */
    double t0_s;               /* wall clock at the first stage, s */
    int stage;                 /* index of the running stage in the table */
    int stop;                  /* 1: a stage asked to stop after it (--drift-only) */
    bs_sort_plan *plan;
    bs_run_summary *summary;
    bs_checkpoint *ck;
    int disk_warned;           /* --no-disk-check: the disk warning was given */
    /* the preprocessed recording (src/preprocess/stage_preprocess.c) */
    bs_recording pre_rec;      /* OUT/.stages/preprocess/recording.f16 as a float16 recording of the sorted
                                  channels (what the lanes read once the preprocess stage is done) */
    int pre_ready;             /* 1: lanes read pre_rec */
    int raw_ahead;             /* 1 (the preprocess stage): lanes on the raw recording hold a whole window's rows,
                                  and read the next one ahead (read_lane.c; planned: raw_ahead_bytes) */
    int pre_missing;           /* 1: the stage was resumed but its file is gone (bs_preprocessed_ensure) */
    bs_pre_stream *pre_stream; /* the plan streams pre_rec (plan.h, pre_stream): its rows' source, else NULL */
    double *railed;            /* [n_batches] railed fraction of each batch's raw window (batch.h) */
    /* batches: every batch loop reads through these */
    int64_t nb;                /* samples per batch */
    int64_t halo;              /* samples of context each side */
    int64_t width;             /* window columns = nb + 2 halo, samples */
    int64_t n_batches;
    bs_highpass hp;
    bs_preprocess pp;          /* mean removal, median reference, high-pass; whitening once built */
    bs_read_lane rd;           /* the lane batches are read through (its art: the last batch's artifacts) */
    int art_max;               /* room in a lane's art */
    struct bs_read_ahead *ra;  /* the second lane and its thread, in a stage that reads ahead (NULL: none) */
    /* stage outputs, in stage order */
    float *bad;                /* channels: [C x 4] label, coherence, psd_hf (µV²/Hz), rms (µV) of each channel
                                  as opened */
    int bad_n_chan;            /* C: the channels as opened */
    bs_bad_interp interp;      /* channels: the interpolated channels' weights (n_bad 0: none) */
    bs_local_ref local_ref;    /* channels: --denoise cmr-local's neighbourhoods (n_chan 0: not built) */
    bs_destripe destripe;      /* channels: --denoise destripe's tables (n_chan 0: not built) */
    bs_whitener wh;            /* whitening */
    int have_wh;
    bs_drift drift;            /* drift: the motion estimate */
    bs_temporal_basis basis;   /* basis: temporal PCs and detection shapes */
    bs_detect_grid grid;       /* detect: the grid of positions */
    int64_t n_detected;        /* detect: spikes in .stages/detect/ */
    bs_learned_templates lt;   /* cluster: channel-sparse low-rank templates */
    bs_match_templates mt;     /* match: the templates as the peeler uses them */
    int have_mt;
    int n_pc_chan;             /* match: channels per spike in pc_features.npy (capped by the support) */
    int32_t *pc_idx;           /* match: K × n_pc_chan indices into each template's support */
    int32_t *pc_chan;          /* match: K × n_pc_chan probe channels (pc_feature_ind.npy) */
    int64_t n_matched;         /* match: spikes in .stages/match/ */
    int n_units;               /* finish: units in the Phy folder */
    int64_t n_final;           /* finish: spikes in the Phy folder */
} bs_run_ctx;

typedef struct {
    const char *name;                           /* plan row, summary row, checkpoint entry, .stages/<name>/ */
    void (*plan)(bs_sort_plan *pl, bs_plan_stage *s); /* the stage's buffers from the plan's shapes */
    int (*off)(const bs_sort_params *p);        /* 1: the stage does not run with these parameters */
    bs_status (*when_off)(bs_run_ctx *c);       /* instead of the stage when off (remove stale outputs) */
    bs_status (*replan)(bs_run_ctx *c);         /* before the summary row opens: re-plan, refuse */
    bs_status (*prepare)(bs_run_ctx *c);        /* after the row opens, whether run or loaded */
    bs_status (*run)(bs_run_ctx *c);            /* compute; writes the checkpoint files */
    bs_status (*load)(bs_run_ctx *c);           /* --resume: read the checkpoint files back */
    bs_status (*finish)(bs_run_ctx *c);         /* after run or load */
    const char *const *files;                   /* checkpoint files, relative to OUT/.stages */
    int n_files;                                /* 0: not checkpointed, always runs */
    const char *const *params;                  /* params.json groups the stage reads, NULL-terminated */
    int reads_batches;                          /* 1: run() reads batches through the lanes (which need the
                                                   preprocessed recording: bs_preprocessed_ensure) */
} bs_stage;

/* Batch b read and preprocessed as the context is configured: whitened once
 * the whitening stage ran, drift-corrected once the drift stage did. The
 * window stays valid (and writable) until the next read. In a stage that
 * reads ahead, batch b + 1 is then read on the helper thread (read_lane.c). */
bs_status bs_run_read_batch(bs_run_ctx *c, int64_t b, float **x, int64_t *n_valid);

/* The run's lane (sort.c) and a stage's second lane: open with the
 * preprocessing scratch for n_threads, allocations under tag; close is safe
 * on a zeroed lane whose reader.fd is -1. */
bs_status bs_read_lane_open(bs_read_lane *l, const bs_run_ctx *c, int n_threads, const char *scratch_tag,
                            const char *art_tag);
void bs_read_lane_close(bs_read_lane *l);
/* A stage that works on several batches at once (bs_plan_stage.lanes):
 * its lane i reads through *rd, which bs_run_lane_for sets: the run's own
 * lane (c->rd) for i = 0, else `own`, opened like the run's (its own reader,
 * a drift-corrected whitener where the run's lane has one; one thread's
 * scratch, allocations under tag). `own` is left closable either way
 * (bs_read_lane_close). bs_run_read_batch_on reads batch b through lane l as
 * bs_run_read_batch reads it through c->rd, from any thread, one thread per
 * lane at a time (no read-ahead; the caller counts the time). */
bs_status bs_run_lane_for(bs_run_ctx *c, int i, bs_read_lane *own, bs_read_lane **rd, const char *tag);
bs_status bs_run_read_batch_on(const bs_run_ctx *c, bs_read_lane *l, int64_t b, float **x, int64_t *n_valid);
/* Likewise bs_run_read_preprocessed through lane l (its `railed` set). */
bs_status bs_run_read_preprocessed_on(const bs_run_ctx *c, bs_read_lane *l, int64_t b, float **x, int64_t *n_valid);
/* Batches 0..n_batches-1 on L threads, one lane each (lanes.c): work(ctx,
 * lane, b) on the lane's thread, batches taken in turn, with one OpenMP
 * thread inside; write(ctx, lane, b) in batch order, one at a time, after
 * batch b's work (L = 1: in order on the calling thread, with all its
 * threads). The first error is returned (with its message); the batches left
 * are skipped. */
typedef bs_status (*bs_lane_fn)(void *ctx, int lane, int64_t b);
bs_status bs_run_lanes(int L, int64_t n_batches, bs_lane_fn work, bs_lane_fn write, void *ctx);
/* The window of batch b, just read through c->rd, preprocessed in place as
 * the context is configured (the sampler's reads, stage.c). */
bs_status bs_run_preprocess_read(bs_run_ctx *c, int64_t b, float *x);
/* Around a stage's run (sort.c): when its plan holds a second lane
 * (bs_plan_stage.read_ahead), open it and start the helper thread; after the
 * run, wait for the helper, stop it and close the lane. */
bs_status bs_run_read_ahead_begin(bs_run_ctx *c);
void bs_run_read_ahead_end(bs_run_ctx *c);
/* The batches a statistic is estimated from (the whitening covariance, the
 * spike shapes of the basis stage): the recording is cut into
 * ceil(n_batches / stride) segments of consecutive batches, and from each
 * segment the usable batch nearest its middle is taken (middle, middle + 1,
 * middle - 1, ...), so that the sample spreads over the whole recording and
 * a bad stretch at the start (a probe settling, a headstage switched on)
 * weighs no more than anywhere else. A batch is usable when its railed
 * fraction (batch.h) is at most p->max_railed_fraction: flat or saturated
 * batches are passed over, and a segment with no usable batch gives none.
 * When the sample is not enough (a short or quiet recording: too few spikes
 * for the shapes), the caller may ask for more: the batches not handed out
 * yet, in order. The choice depends on the data alone, never on threads or
 * budget. */
typedef struct {
    int64_t n_seg;     /* segments: the spread sample holds at most this many batches */
    int64_t seg;       /* the next segment */
    int64_t rest;      /* after the segments: the next batch to consider for more */
    int64_t n_used;    /* batches handed out */
    int64_t n_skipped; /* batches read and passed over (flat or saturated) */
    uint8_t *seen;     /* 1 bit per batch: read already (n_batches / 8 bytes, tracked) */
    const char *what;  /* the statistic, for messages ("whitening") */
} bs_sample_batches;

bs_status bs_sample_batches_init(bs_sample_batches *s, const bs_run_ctx *c, int stride, const char *what);
/* The next batch, read and preprocessed like bs_run_read_batch(); *b = its
 * index, or -1 when every segment has been visited and `more` is 0 (or no
 * batch is left). With `more` set, once the segments are done, the usable
 * batches not read yet follow in order. */
bs_status bs_sample_batches_next(bs_run_ctx *c, bs_sample_batches *s, int more, int64_t *b, float **x,
                                 int64_t *n_valid);
/* After the loop, with its status st: frees the sampler and returns st if it
 * is an error; else BS_ERR_INPUT when no batch was usable, or BS_OK after a
 * note of how many were passed over (if any). */
bs_status bs_sample_batches_end(const bs_run_ctx *c, bs_sample_batches *s, bs_status st);

/* Batch b high-passed but never whitened (the drift peaks' input). */
bs_status bs_run_read_unwhitened(bs_run_ctx *c, int64_t b, float **x, int64_t *n_valid);
/* Batch b read from the recording itself through the preprocessing before the whitening, no artifact
 * blanked (the preprocess stage's input); the lane's `railed` is then the raw window's railed fraction. */
bs_status bs_run_read_preprocessed(bs_run_ctx *c, int64_t b, float **x, int64_t *n_valid);
/* Batch b as read from the recording itself, nothing done to it; the lane's `railed` is its railed fraction
 * (the preprocess stage's pass when the plan streams the preprocessed recording). */
bs_status bs_run_read_raw(bs_run_ctx *c, int64_t b, float **x, int64_t *n_valid);
/* The inverse noise scales (bs_noise_inv_scales, step BS_NOISE_STEP over the own columns) of the window the
 * run's last read returned, when it was read unwhitened and its artifact check, which computed them, blanked
 * nothing: the window's own scales. NULL otherwise (whitened, artifact removal off, or a period blanked). */
const float *bs_run_read_noise_scales(const bs_run_ctx *c);
bs_status bs_run_read_raw_on(const bs_run_ctx *c, bs_read_lane *l, int64_t b, float **x, int64_t *n_valid);

/* The preprocessed recording streamed (pre_stream.c): rows computed again from the raw recording on each
 * read, the same bytes as the float16 file, the last BS_PRE_STREAM_ENTRIES batches' rows kept. Open before
 * the lanes switch to pre_rec (it opens a lane on the raw recording, with the run's threads); its
 * bs_pre_stream_rows is pre_rec's read_rows hook (recording.h; any thread); close returns the number of
 * batches it preprocessed. */
#define BS_PRE_STREAM_ENTRIES 4
size_t bs_pre_stream_entry_bytes(int64_t nb, int n_chan);
bs_status bs_pre_stream_open(const bs_run_ctx *c, bs_pre_stream **s);
bs_status bs_pre_stream_rows(const bs_recording *rec, int64_t row0, int64_t n_rows, void *dst);
int64_t bs_pre_stream_close(bs_pre_stream *s);
/* Before a stage that reads batches runs: when the preprocess stage was resumed without its float16 file,
 * write it again and switch the lanes to it (src/preprocess/stage_preprocess.c). */
bs_status bs_preprocessed_ensure(bs_run_ctx *c);
/* At the end of a run with --keep-preprocessed: the float16 file (written again if a resumed run had none)
 * becomes the Phy folder's OUT/preprocessed.dat, which params.py names (bs_export_preprocessed). */
bs_status bs_preprocessed_keep(bs_run_ctx *c);
/* At the end of the run: free what the preprocess stage holds, and remove its file when remove_file. */
void bs_preprocessed_release(bs_run_ctx *c, int remove_file);

/* Rows of stage_dir/rel, an .npy file (a resumed stage's spike count). */
bs_status bs_stage_rows(const char *stage_dir, const char *rel, int64_t *n);
/* stage_dir/rel into buf, creating its folder. */
bs_status bs_stage_file(const char *stage_dir, const char *rel, char *buf, size_t len);
/* Load stage_dir/rel as dtype with ndim dims whose leading dims equal dims[]
 * (-1: any), under the accountant's tag. */
bs_status bs_stage_load_exact(const char *stage_dir, const char *rel, const char *tag, bs_npy_dtype dtype, int ndim,
                              const int64_t *dims, void **data);

/* Channels ranked by a key, largest first (then the smaller channel):
 * template supports and pc channels are chosen this way. */
typedef struct {
    int ch;
    double key;
} bs_chan_rank;
int bs_chan_rank_desc(const void *a, const void *b);

#endif
