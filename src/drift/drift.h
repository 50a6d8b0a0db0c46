/*
 * drift.h - drift estimation and correction (docs/ARCHITECTURE.md §2,
 * docs/ALGORITHM.md §4): where the tissue moved relative to the probe, per
 * time bin and depth block, and a per-batch whitening matrix that undoes it.
 *
 * SIGN. Motion values follow the simulator's gt_drift_um.npy (CONVENTIONS.md):
 * motion[t, j] = d µm means a unit at reference depth y appears at y + d in
 * time bin t (near block j). The reference is the shank's mean position: the
 * estimate of each shank has zero mean over all time bins and blocks.
 *
 * 1. PEAKS (peaks.c). A cheap threshold detector supplies the spikes whose
 *    depth distribution is tracked. It reads batches after mean removal,
 *    median reference and high-pass but before whitening (whitening sharpens
 *    footprints to a channel or two and depth estimates then lock onto
 *    contacts), in units of each channel's robust noise σ. A spike is a
 *    sample (c, t) of a batch's own columns with v = -x[c,t]/σ_c >= th that
 *    is the largest over the same-shank channels within nms_radius_um of c
 *    and the samples within ±nms_ms of t (ties go to the smaller (t, c)). Its
 *    depth is the vertex of a log-quadratic fit of the amplitudes of the
 *    channels within pos_radius_um (centre of mass as the fallback); its
 *    amplitude is v. Work is split in fixed time tiles (never by thread
 *    count) and merged in tile order: identical output for any thread count.
 *    Why not the universal-template detection (detect.h)? It needs the learned
 *    temporal bases, and on this project's machines it is the most expensive
 *    pass of a sort (about 4x slower than real time for 384 channels on 2
 *    cores); a second full pass only to learn depths would double that. The
 *    threshold detector reads each sample about once and lets the drift stage
 *    run before the bases are learned, so they are learned on corrected data.
 *
 * 2. HISTOGRAMS (estimate.c). Per shank, per time bin (a batch), counts of
 *    spikes by depth (bins of bin_um from just below the shank's lowest
 *    contact) and log-amplitude (n_amp bins over [th, amp_max]). Spikes are
 *    counted only on their own shank: shanks are never mixed.
 *
 * 3. REGISTRATION (estimate.c). F = log2(1 + counts), minus its mean over
 *    depth per (time bin, amplitude) column. Rigid: the reference R starts as
 *    the middle time bin; each round, every bin's integer depth shift s in
 *    [-rigid_max_shift, rigid_max_shift] maximising Σ F[t](y - s - S_t)·R(y)
 *    (zero outside the histogram, no wrap-around) is added to its total S_t,
 *    then R = mean over t of the shifted F; rounds repeat (at most
 *    rigid_iters) until no shift changes. Blocks: n_eff = 2·n_blocks - 1
 *    half-overlapping blocks of n_y / n_blocks depth bins (one block of all
 *    bins when rigid); for each bin t, block j and absolute shift S_t + i,
 *    i in ±block_max_shift, the same score restricted to block j's depth
 *    bins, averaged over neighbouring time bins with Gaussian weights
 *    (smooth_sigma[1], reflected at the ends) at that same absolute shift
 *    (a neighbour's rigid total may differ, e.g. across a step); the scores
 *    are then smoothed along the shift and block axes (smooth_sigma[0],
 *    [2]; reflected, truncated at 4σ) and upsampled on a 0.1-bin grid by a
 *    Gaussian kernel of 1 bin; the argmax (ties to the smallest |shift|) is
 *    the fractional shift f[t,j]. motion[t, j] = -(S_t + f[t,j])·bin_um,
 *    minus the shank's mean.
 *
 * 4. QUALITY CHECK (estimate.c). Per shank, before any work: fewer than
 *    min_channels contacts or a height below min_height_um -> no estimate
 *    (mode NONE); otherwise the block count is reduced so each block spans at
 *    least min_block_um, and a single block is RIGID. After the histograms:
 *    a median below min_spikes_per_bin spikes per time bin -> NONE. Each
 *    fallback leaves a note (bs_drift_shank.note; the stage also writes it to
 *    .stages/drift/drift.json) and is logged as a warning.
 *
 * 5. CORRECTION (correct.c). For time bin b each channel's shift d_c is the
 *    shank's block motion interpolated linearly in depth between block
 *    centres (constant beyond the end blocks). The corrected channel c is the
 *    kriging estimate of the whitened field at q_c = (x_c, y_c + d_c) from the
 *    same-shank channels within krige_radius_um of q_c:
 *    a = (K_NN + ridge·I)^-1 k_N(q_c), K(p, p') = exp(-|p - p'|² / 2σ²),
 *    σ = sig_interp_um. The kriging matrix M_b (sparse) is folded into the
 *    whitening matrix, W_b = M_b·W (same sparse format, bs_whitener), so every
 *    later pass applies one sparse product per sample. Every batch goes
 *    through kriging, also with zero shifts, so all batches see the same
 *    spatial smoothing. Shanks with mode NONE keep W's rows unchanged.
 *
 * MEMORY. The histograms are O(time bins × depth bins × n_amp) bytes
 * ("drift/histogram", uint8 counts: 28 MB per hour of a 3840 µm Neuropixels
 * 1.0 shank at the defaults, the only part that grows with the recording);
 * the registration works in O(time bins × (n_amp + blocks × shifts)) plus
 * one float histogram plane per thread ("drift/register"); the corrector
 * holds one composed whitener and its kriging scratch ("drift/correct").
 * Each has a size function.
 */
#ifndef BS_DRIFT_H
#define BS_DRIFT_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../io/recording.h"
#include "../preprocess/preprocess.h"

typedef struct {
    /* peaks */
    float th;               /* peak threshold, noise units (robust σ per channel) */
    float nms_radius_um;    /* spatial suppression radius, µm */
    float nms_ms;           /* temporal suppression half-window, ms */
    float pos_radius_um;    /* channels used for a peak's depth, µm around its contact */
    /* histograms */
    float bin_um;           /* depth bin, µm */
    int n_amp;              /* log-amplitude bins */
    float amp_max;          /* upper end of the amplitude bins, noise units */
    /* registration */
    int n_blocks;           /* requested nonrigid blocks (2n-1 half-overlapping); 1 = rigid */
    int rigid_max_shift;    /* rigid search, depth bins each way */
    int rigid_iters;        /* rigid rounds (at most) */
    int block_max_shift;    /* block search, depth bins each way */
    double smooth_sigma[3]; /* Gaussian σ of the block scores along (shift, time, block) */
    /* quality check */
    int min_channels;       /* contacts per shank for any estimate */
    float min_height_um;    /* shank height for any estimate, µm */
    float min_block_um;     /* height per nonrigid block, µm */
    float min_spikes_per_bin; /* median spikes per time bin per shank for any estimate */
    /* correction */
    float sig_interp_um;    /* kriging kernel σ, µm */
    float krige_radius_um;  /* channels used per kriging estimate, µm around the target */
    double ridge;           /* kriging ridge (kernel diagonal = 1) */
} bs_drift_params;

void bs_drift_default_params(bs_drift_params *p);

typedef enum { BS_DRIFT_NONE = 0, BS_DRIFT_RIGID = 1, BS_DRIFT_NONRIGID = 2 } bs_drift_mode;
const char *bs_drift_mode_name(bs_drift_mode m); /* "none", "rigid", "nonrigid" */

/* ---------------------------------------------------------------- peaks --- */

typedef struct {
    int64_t t;     /* sample, absolute */
    float y_um;    /* depth (log-quadratic fit), µm (uncorrected) */
    float amp;     /* -x / σ at the peak, noise units */
    int32_t chan;  /* peak channel */
    int32_t shank; /* its shank */
} bs_drift_spike;

typedef struct {
    int n_chan;
    int w;              /* temporal suppression half-window, samples (>= wa) */
    int wa;             /* per-channel amplitude half-window, samples */
    float th;           /* threshold, noise units */
    float pos_r;        /* depth-fit radius, µm */
    int *nms_off, *nms; /* CSR [n_chan + 1], neighbours within nms_radius (self excluded) */
    int *pos_off, *pos; /* CSR [n_chan + 1], channels within pos_radius (self included) */
    float *x_um, *y_um; /* [n_chan] contact positions, µm */
    int *shank;         /* [n_chan] */
    float *scale;       /* [n_chan] 1 / noise σ of the current batch, 1/µV (0: flat channel) */
} bs_drift_detector;

typedef struct {
    int64_t n, cap;
    bs_drift_spike *s; /* [cap], sorted by (t, chan) */
} bs_drift_spikes;

/* Bytes a detector holds ("drift/detector"). */
size_t bs_drift_detector_bytes(const bs_probe *probe, const bs_drift_params *p);
/* Most bytes of the peak lists bs_drift_detect_to holds ("drift/peaks") for a
 * batch of n_valid samples on n_threads threads, for any data (peaks.c). */
size_t bs_drift_peaks_bytes(int n_chan, const bs_drift_params *p, double fs_hz, int64_t n_valid, int n_threads);
bs_status bs_drift_detector_init(bs_drift_detector *d, const bs_probe *probe, const bs_drift_params *p,
                                 double fs_hz);
void bs_drift_detector_free(bs_drift_detector *d);

/* Peaks of one window (n_chan × n_t, channel-major, high-passed, µV) in its
 * own columns [halo, halo + n_valid); t0 = absolute sample of column halo.
 * Requires halo >= d->w. Sets d->scale for this window: to `scale` when it
 * is given (the window's scales as bs_noise_inv_scales gives them with step
 * BS_NOISE_STEP over its own columns, computed by the caller for its artifact
 * check), computed otherwise. Replaces the contents of out. */
bs_status bs_drift_detect_batch(bs_drift_detector *d, const float *x, int64_t n_t, int64_t halo, int64_t n_valid,
                                int64_t t0, const float *scale, bs_drift_spikes *out);
void bs_drift_spikes_free(bs_drift_spikes *s);
/* The same peaks handed to sink(ctx, peaks, n) part by part in (t, chan)
 * order (a part is valid during the call only), in bounded memory. */
typedef bs_status (*bs_drift_sink)(void *ctx, const bs_drift_spike *s, int64_t n);
bs_status bs_drift_detect_to(bs_drift_detector *d, const float *x, int64_t n_t, int64_t halo, int64_t n_valid,
                             int64_t t0, const float *scale, bs_drift_sink sink, void *sink_ctx);

/* ------------------------------------------------------------ estimate --- */

typedef struct {
    int shank;          /* shank id */
    bs_drift_mode mode; /* after the quality checks */
    int n_chan;         /* contacts */
    double y_min_um, y_max_um; /* contact depth range */
    double y0_um;       /* lower edge of depth bin 0 */
    int n_y;            /* depth bins */
    int n_blocks;       /* output blocks of this shank (>= 1; 1 when NONE) */
    int block0;         /* index of its first block in the concatenated output */
    int block_bins;     /* depth bins per block */
    uint8_t *hist;      /* [n_bins × n_y × n_amp] spike counts, saturating at 255 (NULL when NONE) */
    int64_t n_spikes;   /* spikes counted */
    char note[384];     /* why the mode is lower than requested, "; "-separated ("" if it is not) */
} bs_drift_shank;

typedef struct {
    bs_drift_params p;
    int n_bins;           /* time bins */
    int n_shanks;
    bs_drift_shank *sh;   /* [n_shanks] */
    int n_blocks;         /* all shanks */
    float *motion_um;     /* [n_bins × n_blocks], see SIGN */
    float *times_s;       /* [n_bins] time-bin centres, s */
    float *depths_um;     /* [n_blocks] block centres, µm */
    int32_t *block_shank; /* [n_blocks] */
    int estimated;        /* bs_drift_estimate ran */
} bs_drift;

/* Bytes of bs_drift_init's arrays for n_bins time bins: the histograms
 * ("drift/histogram", freed by bs_drift_estimate) and the rest, which lives
 * as long as the estimate ("drift/motion"); and the peak transient bytes of
 * bs_drift_estimate ("drift/register"). */
size_t bs_drift_hist_bytes(const bs_probe *probe, const bs_drift_params *p, int64_t n_bins);
size_t bs_drift_motion_bytes(const bs_probe *probe, const bs_drift_params *p, int64_t n_bins);
size_t bs_drift_estimate_bytes(const bs_probe *probe, const bs_drift_params *p, int64_t n_bins);

/* Geometry, the quality checks that need no data, and zeroed histograms.
 * Time bin b covers samples [b·bin_samples, min((b+1)·bin_samples, n_samples)). */
bs_status bs_drift_init(bs_drift *d, const bs_probe *probe, const bs_drift_params *p, int64_t n_samples,
                        int64_t bin_samples, double fs_hz);
void bs_drift_free(bs_drift *d);
/* 1 if some shank still has mode RIGID or NONRIGID. */
int bs_drift_any(const bs_drift *d);
/* Count spikes of time bin `bin` (spikes on shanks with mode NONE or outside
 * their shank's depth bins are ignored). */
bs_status bs_drift_add(bs_drift *d, int64_t bin, const bs_drift_spike *s, int64_t n);
/* Spike-count check, registration, motion_um. Shanks with mode NONE get
 * zero motion. Logs a warning for every fallback. Frees the histograms. */
bs_status bs_drift_estimate(bs_drift *d);
/* An estimate made earlier (resume): the geometry of bs_drift_init, then
 * each shank's mode after estimation (modes[n_shanks]: the planned mode or
 * NONE) and the motion (n_bins × n_blocks). BS_ERR_INPUT if they do not fit
 * this probe and these parameters. */
bs_status bs_drift_restore(bs_drift *d, const bs_probe *probe, const bs_drift_params *p, int64_t n_samples,
                           int64_t bin_samples, double fs_hz, const int32_t *modes, int n_modes,
                           const float *motion, int64_t n_bins, int64_t n_blocks);

/* The estimate as SpikeInterface's Motion object (motion_si.c): OUT/motion/ for one shank,
 * OUT/motion/shank<id>/ for each estimated shank of several; an earlier run's folder is replaced. */
#define BS_DRIFT_SI_MOTION "motion"
bs_status bs_drift_write_si_motion(const bs_drift *d, const char *out_dir);
bs_status bs_drift_remove_si_motion(const char *out_dir);
/* A motion estimated elsewhere (SpikeInterface's Motion folder, or one per shank as above) evaluated on
 * d's grid (bs_drift_init's shanks, modes, time bins and blocks) into motion (n_bins x n_blocks, µm, each
 * corrected shank's mean removed); BS_ERR_INPUT naming the file when a folder is not a Motion boundsort
 * can apply (several segments, another direction, malformed arrays). */
bs_status bs_drift_read_si_motion(const bs_drift *d, const char *folder, float *motion);

/* ------------------------------------------------------------- correct --- */

typedef struct {
    const bs_drift *d;
    const bs_whitener *base;
    int n_chan;
    double *x_um, *y_um; /* [n_chan] contact positions */
    int *shank;          /* [n_chan] */
    int *shank_chans;    /* channels grouped by shank, ascending within a shank */
    int *shank_off;      /* [n_shanks + 1] */
    int64_t bin;         /* time bin the current whitener is for (-1: none) */
    bs_whitener wh;      /* the composed whitener of `bin` */
    double *acc;         /* [n_chan] one composed row */
    int *mark;           /* [n_chan] */
    int *cand;           /* [n_chan] kriging candidates of one row */
    double *kmat;        /* [n_chan × n_chan] worst-case kriging system */
    double *rhs;         /* [n_chan] */
    float *shift_um;     /* [n_chan] current per-channel shifts */
} bs_drift_corrector;

size_t bs_drift_corrector_bytes(const bs_probe *probe);
bs_status bs_drift_corrector_init(bs_drift_corrector *c, const bs_drift *d, const bs_probe *probe,
                                  const bs_whitener *base);
void bs_drift_corrector_free(bs_drift_corrector *c);

/* Per-channel shift (µm, SIGN above) for time bin `bin`, from the motion. */
void bs_drift_channel_shifts(const bs_drift *d, const bs_probe *probe, int64_t bin, float *shift_um);

/* The whitener for time bin `bin` (M_b·W); *wh stays valid until the next
 * call or free. Calls with the same bin return the cached matrix. */
bs_status bs_drift_corrector_whitener(bs_drift_corrector *c, int64_t bin, const bs_whitener **wh);

/* Kriging weights for a target point from channels `cand[0..n)`:
 * (K + ridge·I) a = k(q). Exposed for tests. work: n*n + n doubles. */
bs_status bs_drift_krige(const double *x_um, const double *y_um, const int *cand, int n, double qx, double qy,
                         double sigma_um, double ridge, double *work, double *a);

#endif
