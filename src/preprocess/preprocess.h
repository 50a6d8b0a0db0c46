/*
 * preprocess.h - the preprocessing stage: per-batch kernels that turn a raw
 * window (µV) into the whitened, zero-phase high-passed signal every later
 * stage works on (docs/ALGORITHM.md §3).
 *
 * DATA LAYOUT. Every kernel works in place on one batch window as the batch
 * reader gives it: float32, channel-major, n_chan rows x n_t columns (row c =
 * channel c's samples, contiguous), in µV. A window is batch + 2*halo samples
 * with the recording's first/last sample replicated into the halo at the
 * edges of the recording.
 *
 * ORDER (bs_preprocess_batch, as Kilosort 4's reader; docs/ALGORITHM.md §3.1):
 *   1. per-channel mean removal over the whole window (KS4 step 3), then,
 *      for Neuropixels, the ADC phase shift (below; KS4 has none), then the
 *      bad channels' interpolation (bad_channels.h);
 *   2. common median reference: at every time sample subtract the median of
 *      the n_chan values (KS4 step 4), or of each channel's ring of
 *      neighbours (local_ref);
 *   3. zero-phase high-pass (KS4 step 5), then with destripe (and no step 2)
 *      the spatial high-pass with automatic gain control;
 *   4. optional artifact check: if any |x| >= artifact_uv the whole window
 *      becomes zeros and whitening is skipped (KS4 step 6; off by default);
 *   5. local whitening X <- W X (KS4 step 7).
 * The covariance pass for the whitening matrix runs steps 1-4 only.
 *
 * MEDIAN. For an even channel count the median is numpy's (the mean of the
 * two middle values, (a + b) / 2 in float32), as the issue asks. Kilosort 4
 * uses torch.median, which returns the LOWER middle value; the difference is
 * half the gap between the two middle channels at each sample. The mean of
 * step 1 is accumulated in double and subtracted as a float.
 *
 * HIGH-PASS: WHICH BEHAVIOUR AND WHY. Kilosort 4 designs the same 3rd-order
 * Butterworth, but applies it per batch as a circular FFT convolution with a
 * kernel obtained by running filtfilt on a 30122-sample impulse
 * (docs/ALGORITHM.md §3.2 and §12). We implement the filter itself: scipy.signal.sosfiltfilt semantics on
 * the window (forward-backward second-order sections, odd extension of
 * padlen samples at both ends, steady-state initial conditions from
 * sosfilt_zi), computed in double, stored as float32. Reasons: it is what
 * the issue asks for and can be checked against SciPy to ~1e-6 µV; it costs
 * 2 x 2 sections x 9 FLOP per sample (no FFT, no large-prime FFT lengths,
 * no complex buffers: measured at ~100x real time for this on 2 cores);
 * and it has no circular wrap-around, so the window edges see an odd
 * extension instead of the other end of the window. The two agree in the
 * window's interior (same magnitude response |H|^2, zero phase) up to the
 * edge transients, which the halo absorbs.
 *
 * HALO. Filtering a window is not filtering the whole recording: near the
 * window's ends the odd extension replaces the true neighbouring samples and
 * the error decays like the filter's impulse response (slowest pole radius
 * ~0.969 per sample at 300 Hz / 30 kHz). test_highpass measures the max
 * error of the window's central part against whole-signal filtering as a
 * function of the halo H (white noise of 100 µV RMS plus a 5 Hz, 200 µV
 * LFP-like sine): see BS_PREPROCESS_HALO_DEFAULT for the numbers and the
 * chosen default.
 *
 * WHITENING. Local ZCA as Kilosort 4's whitening_local: the covariance CC
 * (µV^2) is the mean over a subset of batches of X Xᵀ / NT over each batch's
 * central NT samples (accumulated with cblas_ssyrk, summed in double). For
 * channel j, ix = its n_neighbors nearest channels by Euclidean probe
 * distance (j first, ties broken by channel index), restricted to channels
 * on j's shank (never across shanks: Kilosort relies on the shank offset in
 * x, we check the shank id); a shank with fewer channels uses all of them.
 * CC[ix,ix] = E diag(D) Eᵀ (Jacobi eigen-decomposition in double), W_loc =
 * E diag(1/sqrt(D + eps)) Eᵀ, and W[j, ix] = scale * W_loc[row of j].
 * Kilosort uses eps = 1e-6 and no global scale (scale = 1): whitened data
 * have ~unit variance and every later threshold is in those units.
 * W is stored sparsely (n_neighbors entries per row) and applied as a direct
 * sparse product (each output channel = fixed-order sum of its <= k
 * neighbours, time-tiled, parallel over time tiles): that is 2*k*C FLOP per
 * sample instead of the dense sgemm's 2*C*C (12x fewer at k=32, C=384) and
 * its summation order never depends on the thread count.
 * bs_whitener_dense/bs_whitener_inverse give the dense C x C W (Phy's
 * whitening_mat.npy) and its inverse by Gauss-Jordan elimination with partial
 * pivoting in double (no LAPACKE on the target systems). Kilosort exports
 * inv(W + 1e-5 I); pass ridge = 1e-5 to reproduce that, 0 for the exact
 * inverse.
 *
 * SCRATCH AND MEMORY. Each kernel has a pure size function giving the bytes
 * of scratch it needs for (n_chan, n_t, n_threads). A kernel given
 * scratch == NULL allocates exactly that many bytes for
 * omp_get_max_threads() threads under its tag ("preprocess/car",
 * "preprocess/highpass", "preprocess/whiten", "preprocess/batch") and frees
 * them before returning; given a caller's buffer (allocate it once per run:
 * fresh pages fault in slowly) it uses as many threads as that buffer was
 * sized for. Scratch is per-thread and every sample's arithmetic is the same
 * whatever thread handles it, so output bytes do not depend on the thread
 * count.
 */
#ifndef BS_PREPROCESS_H
#define BS_PREPROCESS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../io/recording.h"

/* Halo (samples at 30 kHz, each side) recommended for the batch reader.
 * Measured max |error| of a 3000-sample window's central part vs
 * whole-signal high-pass, on white noise (100 µV RMS) + a 5 Hz 200 µV sine
 * (test_highpass prints the table): H = 61 (KS4's nt): 22 µV; H = 150:
 * 1.1 µV; H = 300: 0.013 µV; H = 600: 1.5e-5 µV, i.e. the float32 rounding
 * of the values themselves; H = 1200: 0. With H = 600 (20 ms, 2% extra
 * reading for a 60000-sample batch) a batched run filters as the whole
 * recording would, to float precision. Scale it with fs / 30000 at other
 * rates (the transient lasts a fixed time). */
#define BS_PREPROCESS_HALO_DEFAULT 600

/* ---------------------------------------------------------------- CAR --- */

/* Bytes of scratch bs_car needs with n_threads threads. */
size_t bs_car_scratch_bytes(int n_chan, int64_t n_t, int n_threads);

/* In place: if remove_mean, subtract each channel's mean over the n_t
 * samples; then, if car, subtract at every sample the median across the
 * n_chan channels. scratch: NULL or scratch_bytes of caller memory. */
bs_status bs_car(float *x, int n_chan, int64_t n_t, int remove_mean, int car, void *scratch,
                 size_t scratch_bytes);

/* numpy's median of v[0..n) (n >= 1; v unchanged), exactly as the median reference takes it; work: 2 n
 * int32 of caller memory. */
float bs_median_f32(const float *v, int n, int32_t *work);
/* Σ_t row[t], Σ_t a[t] b[t] and Σ_t (row[t] - mu)² over t < n, in double, as
 * 8 interleaved partial sums added pairwise (car.c): fast, and the same bits
 * on every CPU. */
double bs_row_sum(const float *row, int64_t n);
double bs_row_dot(const float *a, const float *b, int64_t n);
double bs_row_dev2(const float *row, int64_t n, double mu);

/* --------------------------------------------------------- phase shift --- */
/* PHASE SHIFT (phase_shift.c; docs/ALGORITHM.md §3.8). A Neuropixels probe
 * digitises its channels through shared ADCs one after another, so in one
 * sample period channel c is sampled d_c periods after the first ones
 * (0 <= d_c < 1; the probe's adc_shift, recording.h: slot / cycles of the
 * probe's multiplexing table, up to 12/13 of a sample on NP1.0 and 15/16 on
 * NP2.0). Left in, a spike reaches the channels of one probe column at
 * times that differ by up to 30 µs (at 30 kHz) and the common median
 * reference subtracts a skewed copy of itself. Each channel is resampled
 * on the common clock, y[n] = x(n - d_c), by a BS_PHASE_TAPS-tap
 * Kaiser-windowed sinc (the delay SpikeInterface's phase_shift and IBL's
 * destriping apply through the FFT, without the FFT's circular wrap). */
#define BS_PHASE_TAPS 16
/* The taps for a delay of d samples (0 <= d < 1): taps[j] multiplies x[n - (j - 7)]. */
void bs_phase_shift_taps(double d, float *taps);
size_t bs_phase_shift_scratch_bytes(int64_t n_t, int n_threads);
/* In place on every row c whose shift[c] (samples, in [0, 1)) is not 0. */
bs_status bs_phase_shift_apply(const float *shift, float *x, int n_chan, int64_t n_t, void *scratch,
                               size_t scratch_bytes);

/* ----------------------------------------------------------- high-pass --- */

#define BS_HP_MAX_ORDER 8
#define BS_HP_MAX_SECTIONS ((BS_HP_MAX_ORDER + 1) / 2)

typedef struct {
    int order;                        /* Butterworth order */
    double cutoff_hz;                 /* -3 dB frequency, Hz */
    double fs_hz;                     /* sampling rate, Hz */
    int n_sections;                   /* second-order sections */
    double sos[BS_HP_MAX_SECTIONS][6]; /* b0 b1 b2 a0 a1 a2 (a0 = 1), scipy's order and gain placement */
    double zi[BS_HP_MAX_SECTIONS][2]; /* sosfilt_zi: DF-II-transposed state for a unit step input */
    int padlen;                       /* samples of odd extension at each end (scipy's default) */
} bs_highpass;

/* Digital Butterworth high-pass as scipy.signal.butter(order, cutoff_hz,
 * btype='highpass', fs=fs_hz, output='sos'): analog prototype poles,
 * low-pass to high-pass transform at the prewarped frequency, bilinear
 * transform, then zpk2sos's 'nearest' pairing and section order.
 * Requires 1 <= order <= BS_HP_MAX_ORDER and 0 < cutoff_hz < fs_hz/2. */
bs_status bs_highpass_design(int order, double cutoff_hz, double fs_hz, bs_highpass *hp);

size_t bs_highpass_scratch_bytes(const bs_highpass *hp, int n_chan, int64_t n_t, int n_threads);

/* sosfiltfilt on every row, in place. Needs n_t > hp->padlen (as scipy). */
bs_status bs_highpass_apply(const bs_highpass *hp, float *x, int n_chan, int64_t n_t, void *scratch,
                            size_t scratch_bytes);

/* ------------------------------------------------------------ destripe --- */
/* DESTRIPE (destripe.c): SpikeInterface 0.105.3's highpass_spatial_filter
 * with its defaults (the IBL destriping's kfilt), shank by shank. Stripes
 * are fluctuations shared by many channels that change slowly along the
 * shank; a median reference removes only their constant part. Per shank, at
 * every sample, the channels in depth order (below) are high-passed ALONG
 * THE CHANNEL AXIS, after an automatic gain control (AGC) that puts every
 * channel on the same scale:
 *   1. AGC: gain[c,t] = sum_j w_j |x[c, t + j]| (|j| <= h), the Hann window
 *      of numpy's np.hanning(N), N = 2h + 1, h = round(0.1 s * fs / 2)
 *      (1500 at 30 kHz), normalised to sum 1, zeros outside the window given
 *      (scipy's fftconvolve "same"); x <- x / max(eps_c, gain) with eps_c =
 *      0.003 * rms_c (rms_c: the channel's RMS, µV, given by the caller). A
 *      channel that is zero over the whole window (its gain sums to 0) is
 *      left as it is;
 *   2. mirror padding: P = min(60, shank channels) channels each side, the
 *      first/last P channels in reverse order (no taper);
 *   3. zero-phase 3rd-order Butterworth high-pass along the padded channels,
 *      Wn = 0.01 of the spatial Nyquist frequency (bs_highpass_design(3,
 *      0.005, 1.0): scipy's sos, sosfiltfilt with odd extension of padlen =
 *      12 channels, clipped to the padded length - 1 for shanks of 4 or fewer
 *      channels, where scipy would refuse);
 *   4. unpad, multiply back by gain (not by the floored one).
 * Depth order: SpikeInterface keeps the shank's channel order when y_um is
 * non-decreasing in it, else it sorts by (y, then x, then channel index)
 * (order_channels_by_depth, np.lexsort((x, y))); the same here.
 * Differences from SpikeInterface, all at float32 rounding: the AGC sums
 * are exact sliding sums instead of an FFT convolution (destripe.c), and the
 * gain kept for step 4 is stored as float32 (SpikeInterface: float64), so
 * an output can differ by about one float32 unit in its last place.
 * SpikeInterface refuses shanks of fewer than 60 channels (the pad must not
 * exceed the channel count); here the pad shrinks instead.
 * HALO: the AGC reaches h samples each side (1500 at 30 kHz, 0.05 s) and is
 * computed from the window given, with zeros outside it (as SpikeInterface
 * at the ends of a recording). A batched run filters as the whole recording
 * would when every kept sample has h samples of correctly high-passed
 * context on each side: halo >= h + BS_PREPROCESS_HALO_DEFAULT (2100 at
 * 30 kHz). A shorter halo is not a small error: test_denoise measures the
 * central part of a window against the whole signal (noise of 10 µV RMS and
 * a 30 µV stripe): halo h: identical; h / 2: 9 µV; h / 8: 9 µV (a gain that
 * misses part of its window is wrong on every channel differently).
 * Cost (384 channels x 60000 samples = 2 s at 30 kHz, 2 threads of a shared
 * 2-core AMD EPYC, best of several): 0.073 s, ~27x real time (1 thread:
 * 0.13 s); the local median reference below: 0.046 s, ~40x real time. */
typedef struct {
    int n_chan;        /* channels of the probe */
    int n_shanks;      /* shanks (each filtered on its own) */
    int *order;        /* [n_chan] the channels shank by shank, each shank's in depth order */
    int *shank_start;  /* [n_shanks + 1] shank s is order[shank_start[s] .. shank_start[s + 1]) */
    float *eps_uv;     /* [n_chan] AGC floor of each channel, µV (0.003 * rms, float32 as numpy's) */
    int hann_n;        /* AGC window length N = 2 * hann_h + 1, samples */
    int hann_h;        /* the AGC's reach on each side, samples */
    double *hann_cos;  /* [2 * hann_h] cos(pi m / hann_h), m = 0 .. 2 hann_h - 1 (unitless) */
    double *hann_sin;  /* [2 * hann_h] sin(pi m / hann_h) */
    bs_highpass spatial; /* the along-channel Butterworth (fs = 1 per channel, cutoff 0.005 per channel) */
    int n_pad;         /* mirrored channels at each end of a shank of >= n_pad channels (60) */
    int max_shank;     /* channels on the largest shank */
} bs_destripe;

/* Set up for a probe at fs_hz with each channel's RMS rms_uv[n_chan] (µV,
 * finite, >= 0). Holds its tables under "preprocess/destripe". */
bs_status bs_destripe_init(const bs_probe *probe, double fs_hz, const float *rms_uv, bs_destripe *d);
void bs_destripe_free(bs_destripe *d);
/* Bytes of scratch bs_destripe_apply needs: the gains (n_chan x n_t
 * float32, 92 MB for 384 x 60000) and, per thread, the larger of 4 n_t + 3
 * doubles (one row's running sums and gains) and one block of 64 columns of
 * the largest shank, padded (~270 kB for 384 channels). */
size_t bs_destripe_scratch_bytes(const bs_destripe *d, int64_t n_t, int n_threads);
/* In place on x (n_chan x n_t, channel-major, µV, high-passed in time). */
bs_status bs_destripe_apply(const bs_destripe *d, float *x, int n_chan, int64_t n_t, void *scratch,
                            size_t scratch_bytes);
/* Step 1's gain of one row (n_t samples, µV) into gain[n_t] (µV), using
 * sums[3 * (n_t + 1)] of work space: what bs_destripe_apply divides by
 * (after the eps floor) and multiplies back by. */
void bs_destripe_gain(const bs_destripe *d, const float *row, int64_t n_t, double *sums, double *gain);

/* ---------------------------------------------- local median reference --- */
/* LOCAL MEDIAN REFERENCE (car_local.c): SpikeInterface 0.105.3's
 * common_reference(reference="local", operator="median", local_radius=
 * (r_in, r_out), min_local_neighbors=m), defaults (30, 55) µm and 5. Each
 * channel's neighbours are the channels at a distance d (µm, Euclidean in
 * (x_um, y_um), shank offsets included, so on real probes no neighbour is on
 * another shank; shank ids are not consulted, as in SpikeInterface) with
 * r_in < d <= r_out; when there are fewer than m, the m closest with d >
 * r_in instead (nearest first, equal distances by channel index:
 * SpikeInterface's np.argsort is not stable, so where the m-th place falls
 * among equidistant channels it may choose others); when none is beyond
 * r_in, the channel is left unreferenced. At every sample each channel
 * loses the median of its neighbours' values at that sample, all medians
 * taken from the input (numpy's median: for an even count the mean of the
 * two middle values, (a + b) / 2 in float32). */
typedef struct {
    int n_chan;  /* channels */
    int k;       /* entries per row: the largest neighbourhood */
    int *n_nbr;  /* [n_chan] neighbours of channel c (0: left unreferenced) */
    int *nbr;    /* [n_chan * k] the neighbours of channel c, in increasing channel index */
} bs_local_ref;

/* Neighbourhoods of probe's channels for radii r_in_um <= r_out_um (µm,
 * r_in_um >= 0) and min_nbr >= 0, held under "preprocess/local_ref". */
bs_status bs_local_ref_build(const bs_probe *p, double r_in_um, double r_out_um, int min_nbr, bs_local_ref *r);
void bs_local_ref_free(bs_local_ref *r);
size_t bs_car_local_scratch_bytes(const bs_local_ref *r, int64_t n_t, int n_threads);
/* In place on x (r->n_chan x n_t, channel-major). */
bs_status bs_car_local(const bs_local_ref *r, float *x, int64_t n_t, void *scratch, size_t scratch_bytes);

/* ----------------------------------------------------------- whitening --- */

#define BS_WHITEN_DEFAULT_NEIGHBORS 32
#define BS_WHITEN_DEFAULT_EPS 1e-6 /* µV^2, added to every eigenvalue */

/* Covariance accumulator: sum over batches of X Xᵀ / NT. */
typedef struct {
    int n_chan;
    int n_batches;  /* batches added */
    double *sum;    /* [n_chan * n_chan] µV^2, upper triangle (row <= col) valid */
    float *tmp;     /* [n_chan * n_chan] one batch's ssyrk output */
} bs_whiten_cov;

/* Bytes the accumulator holds ("preprocess/whiten_cov"): C*C doubles + C*C floats. */
size_t bs_whiten_cov_bytes(int n_chan);
bs_status bs_whiten_cov_init(bs_whiten_cov *acc, int n_chan);
/* Add the central columns [t0, t1) of a window (n_chan x n_t). */
bs_status bs_whiten_cov_add(bs_whiten_cov *acc, const float *x, int64_t n_t, int64_t t0, int64_t t1);
/* cov (n_chan x n_chan, full symmetric, µV^2) = sum / n_batches. */
bs_status bs_whiten_cov_finalize(const bs_whiten_cov *acc, double *cov);
void bs_whiten_cov_free(bs_whiten_cov *acc);

typedef struct {
    int n_chan;
    int k;       /* entries per row (max over rows of the neighbourhood size) */
    int *n_nbr;  /* [n_chan] neighbourhood size of each row (<= k) */
    int *nbr;    /* [n_chan * k] neighbour channels of row c, nearest first (row c itself first) */
    float *w;    /* [n_chan * k] W[c, nbr[c*k+i]] (unitless: whitened = W · µV / µV) */
} bs_whitener;

/* Build W from a covariance (n_chan x n_chan, µV^2, symmetric) and the
 * probe's positions and shanks. n_neighbors >= 1 (clipped to the shank
 * size), eps >= 0, scale > 0. Fails with BS_ERR_INPUT on a non-finite or
 * non-positive-semidefinite neighbourhood (eigenvalue + eps <= 0). */
/* Bytes a built whitener holds ("preprocess/whitener") for k entries per row
 * (k = min(n_neighbors, channels on the largest shank)), and the transient
 * bytes bs_whitener_build works in ("preprocess/whitener_build"). */
size_t bs_whitener_bytes(int n_chan, int k);
size_t bs_whitener_build_bytes(int n_chan, int k);
bs_status bs_whitener_build(const double *cov, const bs_probe *probe, int n_neighbors, double eps, double scale,
                            bs_whitener *wh);
void bs_whitener_free(bs_whitener *wh);

/* Dense W (n_chan x n_chan, row-major, zeros off the neighbourhoods). */
void bs_whitener_dense(const bs_whitener *wh, float *W);
/* Winv = inverse of (W + ridge I) (n_chan x n_chan). BS_ERR_INPUT if singular.
 * Works in bs_whitener_inverse_bytes(n_chan) = 2*C*C doubles ("preprocess/whiten_inv"). */
size_t bs_whitener_inverse_bytes(int n_chan);
bs_status bs_whitener_inverse(const bs_whitener *wh, double ridge, float *Winv);

size_t bs_whiten_scratch_bytes(int n_chan, int64_t n_t, int n_threads);
/* x (wh->n_chan x n_t) <- W x, in place. */
bs_status bs_whiten_apply(const bs_whitener *wh, float *x, int64_t n_t, void *scratch, size_t scratch_bytes);
/* The same, also setting count[t] (n_t int32) to the number of channels whose whitened value v at
 * column t has !(|v| < thr) (NaN counts): the artifact detector's crossings (bs_artifact_blank_counted),
 * taken while each row is in cache. */
bs_status bs_whiten_apply_count(const bs_whitener *wh, float *x, int64_t n_t, void *scratch, size_t scratch_bytes,
                                float thr, int32_t *count);

/* ------------------------------------------------------- one batch -------- */

typedef struct {
    int remove_mean;          /* 1: per-channel mean removal (KS4 default) */
    const float *phase_shift; /* [n_chan] ADC sampling delay of each channel, samples (0 <= d < 1), removed
                                 after the mean and before the median reference; NULL: none */
    const struct bs_bad_interp *interp; /* bad channels rewritten from their neighbours after the phase shift and
                                           before the median reference (bad_channels.h); NULL: none */
    int car;                  /* 1: median common reference (KS4 do_CAR default): over all channels, or with
                                 local_ref over each channel's ring of neighbours */
    const bs_local_ref *local_ref; /* --denoise cmr-local: the local median reference's neighbourhoods; NULL: global */
    const bs_destripe *destripe;   /* --denoise destripe: applied after the high-pass (car is then 0); NULL: none */
    const bs_highpass *hp;    /* NULL: no high-pass */
    double artifact_uv;       /* > 0: zero the window if any |x| >= this after the high-pass; 0: off */
    const bs_whitener *wh;    /* NULL: stop before whitening (covariance pass) */
} bs_preprocess;

/* The denoising choice (--denoise): the global median reference (Kilosort's), the local one (a ring of
 * neighbours, SpikeInterface's reference="local"), or IBL's destriping (high-pass along depth with
 * automatic gain control, after the temporal high-pass, instead of a median reference). */
enum { BS_DENOISE_CMR = 0, BS_DENOISE_CMR_LOCAL = 1, BS_DENOISE_DESTRIPE = 2 };
const char *bs_denoise_name(int denoise); /* "cmr", "cmr-local", "destripe" */
int bs_denoise_parse(const char *text);   /* -1 for anything else */
/* The local reference's ring, µm, and the neighbours it needs at least (SpikeInterface's defaults). */
#define BS_LOCAL_REF_R_IN_UM 30.0
#define BS_LOCAL_REF_R_OUT_UM 55.0
#define BS_LOCAL_REF_MIN 5

size_t bs_preprocess_scratch_bytes(const bs_preprocess *pp, int n_chan, int64_t n_t, int n_threads);

/* Run the enabled steps in the order above, in place. *zeroed (may be NULL)
 * is set to 1 if the artifact check zeroed the window. */
bs_status bs_preprocess_batch(const bs_preprocess *pp, float *x, int n_chan, int64_t n_t, void *scratch,
                              size_t scratch_bytes, int *zeroed);

/* ------------------------------------------------------- artifacts ------- */
/* ARTIFACTS (artifact.c; docs/ALGORITHM.md §3.7). Licking, chewing, movement
 * and stimulation put large transients on most channels at once; left in,
 * they are detected as spikes on every position and learned as templates
 * (the 17,345-template sessions). In a whitened window (unit noise variance)
 * a column is an artifact column when at least max(min_channels,
 * ceil(channel_fraction x C)) channels reach |x| >= threshold at once:
 * Gaussian noise puts 0.3 % of the channels there, and a unit's spike a few
 * neighbouring channels (measured on simulated recordings: at most 20 of 384
 * Neuropixels channels, 10 of 32 on a linear probe, against the 96 and 24
 * needed). From each such column the period extends both ways while
 * max(min_channels / 4, ceil(extend_fraction x C)) channels still cross (the
 * transient's rise and ringing tail; it starts only from an artifact column,
 * so spikes elsewhere are never blanked), then by margin_ms on both sides;
 * spans closer than two tapers merge. Every channel is set to zero over a
 * span and ramps back with a raised cosine over taper_ms on each side. The
 * result depends on the window's data alone (per-column counts, fixed
 * order), never on threads. */
typedef struct {
    double threshold;        /* |x| a channel must reach, whitened units (3) */
    double channel_fraction; /* of the channels, at one column (0.25) */
    int min_channels;        /* and at least this many (24) */
    double extend_fraction;  /* the period extends while this fraction (and min_channels / 4) cross (0.1) */
    double margin_ms;        /* blanked before and after, ms (2) */
    double taper_ms;         /* raised-cosine ramp on each side of the blanked span, ms (0.5) */
} bs_artifact_params;

/* The periods a sort blanked (OUT/artifacts.tsv; docs/FORMATS.md): one row
 * per period in recording samples, end exclusive, and the most channels that
 * crossed the threshold at one sample of it. */
#define BS_ARTIFACTS_TSV "artifacts.tsv"
#define BS_ARTIFACTS_HEADER "start_sample\tend_sample\tstart_s\tend_s\tn_channels"

typedef struct {
    int64_t t0, t1; /* window columns [t0, t1) the blanking touched (ramps included) */
    int n_chan;     /* most channels crossing at one column of the period */
} bs_artifact_period;

void bs_artifact_default_params(bs_artifact_params *p);
/* Most periods one window of n_t columns can hold (the size of `periods`). */
int bs_artifact_max_periods(const bs_artifact_params *ap, double fs_hz, int64_t n_t);
/* Find and blank the artifact periods of the window x (n_chan rows of n_t
 * columns) in place. Whitened data: inv_scale NULL; otherwise channel c's
 * values count in units of 1 / inv_scale[c] (bs_noise_inv_scales; a channel
 * with 0 never crosses). count: n_t int32 of scratch; periods: room for
 * max_periods (bs_artifact_max_periods); the periods found are returned in
 * column order. */
bs_status bs_artifact_blank(const bs_artifact_params *ap, double fs_hz, float *x, int n_chan, int64_t n_t,
                            const float *inv_scale, int32_t *count, bs_artifact_period *periods, int max_periods,
                            int *n_periods);
/* count[i] += 1 where !(|v[i]| < thr), i < len (a NaN counts): one row's crossings, as
 * bs_artifact_blank counts them. */
void bs_artifact_count_row(int32_t *count, const float *v, int64_t len, float thr);
/* bs_artifact_blank of a whitened window whose crossings of ap->threshold are already in count
 * (bs_whiten_apply_count). */
bs_status bs_artifact_blank_counted(const bs_artifact_params *ap, double fs_hz, float *x, int n_chan, int64_t n_t,
                                    const int32_t *count, bs_artifact_period *periods, int max_periods,
                                    int *n_periods);

/* Every BS_NOISE_STEP-th own sample of a window feeds the noise scales of the sort's passes (the artifact
 * check of an unwhitened window, the drift peaks): the same values, so a pass can reuse the other's. */
#define BS_NOISE_STEP 8
/* Robust noise scale of each channel of a window that is not whitened:
 * inv_scale[c] = 0.6745 / median |x[c, first + i step]| over the n columns
 * from `first` (0 for a flat channel), by exact selection on a copy (tracked
 * under `tag`: threads x n / step floats). */
bs_status bs_noise_inv_scales(const float *x, int n_chan, int64_t n_t, int64_t first, int64_t n, int step,
                              const char *tag, float *inv_scale);

#endif
