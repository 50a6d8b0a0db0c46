/*
 * bad_channels.h - dead, noisy and out-of-brain channels: found on a sample
 * of short chunks of the recording, then interpolated from their neighbours
 * or dropped (docs/ALGORITHM.md §3.9).
 *
 * DETECTION (bad_channels.c; the International Brain Laboratory's method as
 * SpikeInterface's detect_bad_channels(method="coherence+psd") describes
 * it, run on each shank separately). A chunk (chunk_s of the recording,
 * high-passed at 300 Hz) is labelled channel by channel:
 *   - each channel's mean over the chunk is removed; the reference r(t) is
 *     the median over the shank's channels at each sample (numpy's median:
 *     the mean of the two middle values for an even count), less its mean;
 *   - the similarity of channel c is xcorr_c = <x_c, r> / <r, r> (about 1 for
 *     a channel that carries the shank's common signal, 0 for a flat one);
 *   - along the shank in depth order (y, then x) the trend is a shrinking
 *     median filter of xcorr over n_neighbors channels (the window is cut at
 *     the shank's ends, not padded), and coherence_c = xcorr_c - trend_c;
 *   - the high-frequency power psd_hf_c is the mean of Welch's power
 *     spectral density (µV²/Hz; Hann window of welch_ms, half overlap,
 *     one-sided density as scipy.signal.welch) over the frequencies above
 *     nyquist_fraction of the Nyquist frequency;
 *   - labels: dead when coherence < dead_threshold; noisy (over dead) when
 *     psd_hf > psd_hf_uv2_hz or coherence > noisy_threshold; out of the
 *     brain (over both) for the channels of the contiguous run at the top of
 *     the shank (largest y) whose trend is below outside_threshold + 1.
 * When more than half of a shank's channels come out dead or noisy in a
 * chunk, the chunk says something about itself (a transient on every
 * channel), not about the channels: the shank abstains in that chunk
 * (BS_CHAN_ABSTAIN). A channel's label is the most frequent over the chunks
 * it votes in (ties: the smaller label, good first; no vote: good), and its coherence and psd_hf are the medians over the
 * chunks (reported in OUT/bad_channels.tsv). Shanks with fewer than
 * min_shank_channels channels are not examined (their channels are good):
 * the method needs a dense column of contacts.
 *
 * The Welch spectrum of the high band is computed as a product: for each
 * channel the overlapping segments of the chunk are the rows of a matrix read
 * in place (leading dimension = the hop), multiplied (sgemm) by the Hann
 * window times the cosines and sines of the band's frequency bins. The
 * segment's mean (scipy's detrend) only moves bins 0 and 1 of a Hann-windowed
 * segment, so it is not subtracted for the bins above 0.4 x the segment
 * length that enter psd_hf.
 *
 * INTERPOLATION (bs_bad_interp): a channel to interpolate gets
 * x_b = sum_j w_bj x_j over the good channels j, with IBL's kriging weights
 * as SpikeInterface's interpolate_bad_channels: w = exp(-(d / sigma)^p),
 * p = 1.3, d the distance in µm, sigma the most common gap between
 * consecutive distinct depths of the probe; weights under 0.005 are
 * dropped, the rest divided by their sum, and those still under 0.005
 * dropped again. Applied per batch after the phase shift and before the
 * common reference (preprocess.h), so a dead or noisy channel never enters
 * the median.
 *
 * Everything here depends on the data alone (fixed summation orders,
 * per-channel work), never on the thread count.
 */
#ifndef BS_BAD_CHANNELS_H
#define BS_BAD_CHANNELS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../io/recording.h"
#include "preprocess.h"

enum { BS_CHAN_GOOD = 0, BS_CHAN_DEAD = 1, BS_CHAN_NOISY = 2, BS_CHAN_OUT = 3, BS_CHAN_N_LABELS = 4,
       BS_CHAN_ABSTAIN = -1 /* a chunk's label that does not vote */ };
/* "good", "dead", "noisy", "out" */
const char *bs_chan_label_name(int label);

/* What the sort does with the channels found (--bad-channels). */
enum { BS_BAD_INTERPOLATE = 0, BS_BAD_REMOVE = 1, BS_BAD_KEEP = 2 };
/* "interpolate", "remove", "keep"; parse: -1 for anything else */
const char *bs_bad_mode_name(int mode);
int bs_bad_mode_parse(const char *text);

typedef struct {
    int mode;                  /* BS_BAD_INTERPOLATE: dead and noisy interpolated, out-of-brain dropped;
                                  BS_BAD_REMOVE: all dropped; BS_BAD_KEEP: listed only */
    double max_fraction;       /* more than this fraction of the channels bad: the run is refused (0.5) */
    int n_chunks;              /* chunks examined, at most (100), spread evenly over the recording */
    double chunk_s;            /* chunk length, s (0.3) */
    double highpass_hz;        /* the chunks' high-pass cutoff, Hz (300; Butterworth order 5, zero phase) */
    double psd_hf_uv2_hz;      /* noisy above this high-band power, µV²/Hz (0.02) */
    double dead_threshold;     /* dead below this coherence (-0.5) */
    double noisy_threshold;    /* noisy above this coherence (1) */
    double outside_threshold;  /* out of the brain: trend below this + 1 at the shank's top (-0.75) */
    int n_neighbors;           /* channels of the trend's median filter (11) */
    double nyquist_fraction;   /* the high band starts at this fraction of the Nyquist frequency (0.8) */
    double welch_ms;           /* Welch segment, ms (10) */
    int min_shank_channels;    /* shanks with fewer channels are not examined (32) */
} bs_bad_channel_params;

void bs_bad_channel_default_params(bs_bad_channel_params *p);

typedef struct {
    int n_chan;
    int n_groups;      /* shanks examined */
    int *order;        /* [n_chan] the examined channels, shank by shank, each shank in depth order */
    int *start;        /* [n_groups + 1] group g is order[start[g] .. start[g + 1]) */
    int max_group;     /* channels of the largest group */
    int nperseg;       /* Welch segment, samples */
    int k0;            /* first frequency bin of the high band */
    int n_bins;        /* bins k0 .. nperseg / 2 */
    double psd_scale;  /* 1 / (fs * sum(window^2)), 1/Hz */
    float *basis;      /* [nperseg x 2 n_bins] window x cos, window x sin of the band's bins */
    bs_bad_channel_params prm;
} bs_bad_detector;

/* Bytes a detector holds ("preprocess/bad_detector"). */
size_t bs_bad_detector_bytes(int n_chan, double fs_hz, const bs_bad_channel_params *prm);
bs_status bs_bad_detector_init(const bs_probe *probe, double fs_hz, const bs_bad_channel_params *prm,
                               bs_bad_detector *d);
void bs_bad_detector_free(bs_bad_detector *d);

/* Scratch bytes for a chunk of n samples with n_threads threads. */
size_t bs_bad_chunk_scratch_bytes(const bs_bad_detector *d, int64_t n, int n_threads);
/* Label one chunk: columns [off, off + n) of x (rows of `stride` floats, µV, high-passed; each row's
 * mean is removed in place). label[c], coherence[c] and psd_hf[c] (µV²/Hz) for every channel (good,
 * 0 and 0 for channels not examined). scratch: NULL (allocated under "preprocess/bad_chunk") or
 * scratch_bytes of caller memory. */
bs_status bs_bad_channels_chunk(const bs_bad_detector *d, float *x, int64_t stride, int64_t off, int64_t n,
                                void *scratch, size_t scratch_bytes, int8_t *label, float *coherence, float *psd_hf);

/* The channels' labels from n_chunks chunks' labels (chunk-major: labels[k * n_chan + c]): the most
 * frequent, ties to the smaller label; BS_CHAN_ABSTAIN does not vote (no vote at all: good). */
void bs_bad_channels_vote(const int8_t *labels, int n_chunks, int n_chan, int8_t *label);

/* ------------------------------------------- a whole recording (scan) --- */
/* bad_channels_scan.c: up to n_chunks chunks of chunk_s spread over the recording, each read with `halo`
 * samples of context, its channels' means removed, the phase shift (phase_shift: NULL for none) and a
 * zero-phase 5th-order high-pass at highpass_hz applied, then labelled; label[c] is the vote, coherence[c]
 * and psd_hf[c] (µV²/Hz) the medians over the chunks (the lower middle value for an even count), and
 * rms_uv[c] (NULL: not wanted) the median of the channel's RMS in each chunk (µV, high-passed);
 * *n_chunks the chunks labelled: those whose railed fraction (io/batch.h) is over max_railed_fraction, and
 * with art (NULL: no check) those holding a broadband artifact, are passed over (none left: every channel
 * good). All arrays have rec->probe.n_chan entries. */
bs_status bs_bad_channels_scan(const bs_recording *rec, const bs_bad_channel_params *prm, const float *phase_shift,
                               int64_t halo, double max_railed_fraction, const bs_artifact_params *art,
                               int8_t *label, float *coherence, float *psd_hf, float *rms_uv, int *n_chunks);
/* Tracked bytes the scan allocates at most with n_threads threads. */
size_t bs_bad_scan_bytes(const bs_recording *rec, const bs_bad_channel_params *prm, int64_t halo,
                         const bs_artifact_params *art, int n_threads);

/* ------------------------------------------------------- interpolation --- */

typedef struct bs_bad_interp {
    int n_bad;       /* channels interpolated */
    int *bad;        /* [n_bad] their channels */
    int *start;      /* [n_bad + 1] bad[i]'s weights are src/w[start[i] .. start[i + 1]) */
    int *src;        /* good channels */
    float *w;        /* their weights */
} bs_bad_interp;

/* Weights for the channels with interp[c] set from those with good[c] set. */
bs_status bs_bad_interp_build(const bs_probe *probe, const uint8_t *interp, const uint8_t *good, double p,
                              bs_bad_interp *ip);
void bs_bad_interp_free(bs_bad_interp *ip);
/* The kriging sigma: the most common gap between consecutive distinct depths, µm (ties: the smaller;
 * 0 for a single depth). */
double bs_bad_interp_sigma_um(const bs_probe *probe);
/* x (n_chan rows of n_t): each interpolated row rewritten from the good rows. */
void bs_bad_interp_apply(const bs_bad_interp *ip, float *x, int64_t n_t);

#endif
