/*
 * stage_drift.h - the drift stage of `boundsort sort` (src/drift/drift.h):
 * one pass over every batch, high-passed but not whitened, through the
 * threshold peak detector; per-batch depth × amplitude histograms; the
 * registration; the output files; and the corrector that later passes use
 * to whiten each batch with its drift-corrected matrix.
 *
 * Files written (docs: the output-folder contract):
 *   OUT/drift.npy           float32 (n_time_bins, n_blocks) motion, µm (drift.h SIGN)
 *   OUT/drift_times_s.npy   float32 (n_time_bins,) time-bin (batch) centres, s
 *   OUT/drift_depths_um.npy float32 (n_blocks,) block centres, µm
 *   OUT/drift_shanks.npy    int32 (n_blocks,) each block's shank
 *   OUT/driftmap.npy        float32 (N, 3) time_s, depth_um (uncorrected), amplitude
 *                           (noise units) of every stride-th detected peak, N <= 200000
 *   OUT/.stages/drift/drift.json  per-shank mode, blocks and fallback notes (for the manifest)
 *   OUT/.stages/drift/motion.npy, modes.npy  the checkpoint: the motion and each
 *                           shank's final mode (float32, int32), restored on --resume
 * The stage's entry in the table of stages (src/pipeline/stages.h) is
 * bs_drift_stage, defined at the end of stage_drift.c.
 * The time bins are the batches. The driftmap keeps every stride-th peak in
 * time order, the stride doubling whenever 200000 rows are full, so it is a
 * uniform subsample whatever the recording length.
 */
#ifndef BS_STAGE_DRIFT_H
#define BS_STAGE_DRIFT_H

#include <stdint.h>

#include "../common/status.h"
#include "drift.h"
#include "../io/recording.h"

#define BS_DRIFTMAP_MAX_ROWS 200000

/* Reads batch b after mean removal, median reference and high-pass (no
 * whitening, no drift correction) into *x, µV. */
typedef bs_status (*bs_stage_read_fn)(void *ctx, int64_t b, float **x, int64_t *n_valid);

typedef struct {
    const bs_recording *rec;
    const bs_drift_params *p;
    int64_t batch_samples;  /* samples per batch = per time bin */
    int64_t width, halo;    /* window columns, halo columns each side */
    int64_t n_batches;
    bs_stage_read_fn read;
    void *read_ctx;
    /* NULL, or the noise scales of the window `read` returned last (bs_drift_detect_to's `scale`), NULL when
       it has none to give */
    const float *(*scales)(void *read_ctx);
    const char *out_dir;    /* OUT; NULL: write nothing */
    const char *motion_dir; /* a SpikeInterface Motion folder applied instead of an estimate (sort --motion),
                               or NULL; no data is read then and the driftmap is empty */
    int quiet;
} bs_stage_drift_args;

/* Estimate the motion into d (initialised here; free with bs_drift_free).
 * When no shank qualifies (bs_drift_any(d) == 0 after the geometry check),
 * no data is read and only drift.json is written. */
bs_status bs_stage_drift(const bs_stage_drift_args *a, bs_drift *d);

/* Remove the OUT/drift*.npy and driftmap.npy of an earlier run (a sort
 * with --no-drift, or without an estimate, into the same folder). */
bs_status bs_stage_drift_remove(const char *out_dir);

#endif
