/*
 * params.c - the table of parameters and OUT/params.json (see params.h).
 */
#include "params.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/boundsort.h"
#include "../common/fileio.h"
#include "stages.h"

#define P_(g, n, t, field, lo, hi, z, ks, d) {g, n, t, offsetof(bs_sort_params, field), lo, hi, z, ks, d}
#define INT(g, n, f, lo, hi, ks, d) P_(g, n, BS_PARAM_INT, f, lo, hi, 0, ks, d)
#define I64(g, n, f, lo, hi, ks, d) P_(g, n, BS_PARAM_I64, f, lo, hi, 0, ks, d)
#define U64(g, n, f, lo, hi, ks, d) P_(g, n, BS_PARAM_U64, f, lo, hi, 0, ks, d)
#define F32(g, n, f, lo, hi, ks, d) P_(g, n, BS_PARAM_F32, f, lo, hi, 0, ks, d)
#define F64(g, n, f, lo, hi, ks, d) P_(g, n, BS_PARAM_F64, f, lo, hi, 0, ks, d)
#define FLAG(g, n, f, d) P_(g, n, BS_PARAM_INT, f, 0, 1, 0, NULL, d)
/* 0 is accepted besides [lo, hi]: "automatic" */
#define I64Z(g, n, f, lo, hi, ks, d) P_(g, n, BS_PARAM_I64, f, lo, hi, 1, ks, d)
#define INTZ(g, n, f, lo, hi, ks, d) P_(g, n, BS_PARAM_INT, f, lo, hi, 1, ks, d)
#define F32Z(g, n, f, lo, hi, ks, d) P_(g, n, BS_PARAM_F32, f, lo, hi, 1, ks, d)
#define F64Z(g, n, f, lo, hi, ks, d) P_(g, n, BS_PARAM_F64, f, lo, hi, 1, ks, d)
#define SEED_MAX 9007199254740992.0 /* 2^53: every integer up to it is exact in JSON */

const bs_param_field bs_sort_param_fields[] = {
    /* batches and the part of the recording sorted */
    I64Z("batch", "batch_samples", batch_samples, 1000, 36000000, "batch_size",
         "samples per batch; 0: 2 s at the recording's rate"),
    I64Z("batch", "halo_samples", halo_samples, 1, 1000000, NULL,
         "samples of context read on each side of a batch; 0: 20 ms (at least one waveform)"),
    F64("batch", "tmin_s", tmin_s, 0, 1e9, "tmin", "start of the part of the recording sorted, s"),
    F64Z("batch", "tmax_s", tmax_s, 1e-3, 1e9, "tmax",
         "end of the part of the recording sorted, s; 0: the end of the recording (Kilosort: inf)"),
    /* preprocessing and whitening */
    F64("preprocess", "highpass_hz", highpass_hz, 1, 20000, "highpass_cutoff",
        "high-pass cutoff, Hz (below the Nyquist frequency)"),
    INT("preprocess", "highpass_order", highpass_order, 1, 8, NULL, "Butterworth order of the high-pass filter"),
    INT("preprocess", "whiten_neighbors", whiten_neighbors, 1, 4096, "whitening_range",
        "channels in each channel's local whitening neighbourhood"),
    INT("preprocess", "whiten_stride_batches", whiten_stride, 1, 100000, NULL,
        "one batch in this many feeds the whitening covariance (Kilosort: nskip)"),
    F64("preprocess", "max_railed_fraction", max_railed_fraction, 0, 1, NULL,
        "batches with more of their samples flat or saturated feed neither the covariance nor the bases"),
    FLAG("preprocess", "no_artifact_removal", no_artifact_removal,
         "1: keep broadband artifacts (--no-artifact-removal)"),
    FLAG("preprocess", "no_phase_shift", no_phase_shift,
         "1: keep the ADC sampling skew between Neuropixels channels (--no-phase-shift)"),
    INT("preprocess", "denoise", denoise, 0, 2, NULL,
        "0 cmr: median reference over all channels; 1 cmr-local: over each channel's ring 30-55 µm away; 2 "
        "destripe: IBL's high-pass along depth with automatic gain control, after the temporal one (--denoise)"),
    INT("bad_channels", "mode", bad.mode, 0, 2, NULL,
        "what the sort does with the bad channels: 0 interpolate (dead and noisy; out-of-brain ones "
        "dropped), 1 remove, 2 keep (--bad-channels)"),
    F64("bad_channels", "max_fraction", bad.max_fraction, 0, 1, NULL,
        "more than this fraction of the channels bad: the run is refused (--max-bad-channel-fraction)"),
    INT("bad_channels", "n_chunks", bad.n_chunks, 1, 100000, NULL, "chunks examined, at most, spread over the recording"),
    F64("bad_channels", "chunk_s", bad.chunk_s, 0.01, 60, NULL, "chunk length, s"),
    F64("bad_channels", "highpass_hz", bad.highpass_hz, 1, 20000, NULL,
        "the chunks' high-pass cutoff, Hz (Butterworth order 5, zero phase)"),
    F64("bad_channels", "psd_hf_uv2_hz", bad.psd_hf_uv2_hz, 0, 1e9, NULL,
        "noisy above this mean power of the high band, µV²/Hz"),
    F64("bad_channels", "dead_threshold", bad.dead_threshold, -100, 100, NULL,
        "dead below this coherence with the shank's median (less its trend along depth)"),
    F64("bad_channels", "noisy_threshold", bad.noisy_threshold, -100, 100, NULL, "noisy above this coherence"),
    F64("bad_channels", "outside_threshold", bad.outside_threshold, -100, 100, NULL,
        "out of the brain: the run at the shank's top whose trend is below this + 1"),
    INT("bad_channels", "n_neighbors", bad.n_neighbors, 1, 1023, NULL, "channels of the trend's median filter"),
    F64("bad_channels", "nyquist_fraction", bad.nyquist_fraction, 0.01, 0.99, NULL,
        "the high band starts at this fraction of the Nyquist frequency"),
    F64("bad_channels", "welch_ms", bad.welch_ms, 0.5, 1000, NULL, "Welch segment of the high band's power, ms"),
    INT("bad_channels", "min_shank_channels", bad.min_shank_channels, 3, 100000, NULL,
        "shanks with fewer channels are not examined"),
    F64("preprocess", "artifact_threshold", artifact.threshold, 0.5, 10000, NULL,
        "|x| a channel must reach to count towards an artifact, whitened units"),
    F64("preprocess", "artifact_extend_fraction", artifact.extend_fraction, 0, 1, NULL,
        "an artifact period extends while this fraction of the channels crosses"),
    F64("preprocess", "artifact_channel_fraction", artifact.channel_fraction, 0, 1, NULL,
        "fraction of the channels crossing at one sample that starts an artifact period"),
    INT("preprocess", "artifact_min_channels", artifact.min_channels, 1, 100000, NULL,
        "and at least this many channels"),
    F64("preprocess", "artifact_margin_ms", artifact.margin_ms, 0, 1000, NULL,
        "blanked before and after an artifact period, ms"),
    F64("preprocess", "artifact_taper_ms", artifact.taper_ms, 0, 1000, NULL,
        "raised-cosine ramp on each side of a blanked span, ms"),
    /* drift */
    FLAG("drift", "no_drift", no_drift, "1: no drift estimation or correction (Kilosort: nblocks = 0)"),
    F32("drift", "th_noise_units", drift.th, 1, 1000, NULL, "peak threshold of the drift detector, noise units"),
    F32("drift", "nms_radius_um", drift.nms_radius_um, 0, 10000, NULL, "spatial suppression radius of peaks, µm"),
    F32("drift", "nms_ms", drift.nms_ms, 0, 20, NULL, "temporal suppression half-window of peaks, ms"),
    F32("drift", "pos_radius_um", drift.pos_radius_um, 1, 10000, NULL, "channels used for a peak's depth, µm"),
    F32("drift", "bin_um", drift.bin_um, 0.5, 1000, "binning_depth", "depth bin of the drift histograms, µm"),
    INT("drift", "n_amp_bins", drift.n_amp, 1, 1000, NULL, "log-amplitude bins of the drift histograms"),
    F32("drift", "amp_max_noise_units", drift.amp_max, 2, 100000, NULL, "top of the amplitude bins, noise units"),
    INT("drift", "n_blocks", drift.n_blocks, 1, 100, "nblocks",
        "nonrigid blocks requested (2n-1 half-overlapping); 1: rigid"),
    INT("drift", "rigid_max_shift_bins", drift.rigid_max_shift, 1, 1000, NULL,
        "rigid search range, depth bins each way"),
    INT("drift", "rigid_iters", drift.rigid_iters, 1, 1000, NULL, "rigid registration rounds, at most"),
    INT("drift", "block_max_shift_bins", drift.block_max_shift, 1, 1000, NULL,
        "block search range, depth bins each way"),
    F64("drift", "smooth_sigma_shift_bins", drift.smooth_sigma[0], 0, 100, NULL,
        "Gaussian smoothing of the block scores along the shift (Kilosort: drift_smoothing[0])"),
    F64("drift", "smooth_sigma_time_bins", drift.smooth_sigma[1], 0, 100, NULL,
        "along time (Kilosort: drift_smoothing[1])"),
    F64("drift", "smooth_sigma_blocks", drift.smooth_sigma[2], 0, 100, NULL,
        "along the blocks (Kilosort: drift_smoothing[2])"),
    INT("drift", "min_channels", drift.min_channels, 1, 100000, NULL, "contacts a shank needs for any estimate"),
    F32("drift", "min_height_um", drift.min_height_um, 0, 100000, NULL, "shank height needed for any estimate, µm"),
    F32("drift", "min_block_um", drift.min_block_um, 1, 100000, NULL, "shank height per nonrigid block, µm"),
    F32("drift", "min_spikes_per_bin", drift.min_spikes_per_bin, 0, 1e9, NULL,
        "median peaks per time bin a shank needs for an estimate"),
    F32("drift", "sig_interp_um", drift.sig_interp_um, 0.1, 1000, "sig_interp",
        "σ of the kriging kernel of drift correction, µm"),
    F32("drift", "krige_radius_um", drift.krige_radius_um, 1, 10000, NULL, "channels used per kriging estimate, µm"),
    F64("drift", "ridge", drift.ridge, 0, 1000, NULL, "ridge of the kriging (kernel diagonal = 1)"),
    /* shapes and detection */
    INT("detect", "basis_stride_batches", basis_stride, 1, 100000, NULL,
        "one batch in this many feeds the temporal bases (Kilosort: nskip)"),
    INT("detect", "nt_samples", detect.nt, 11, 301, "nt", "waveform length, samples (odd)"),
    INT("detect", "nt_before_samples", detect.nt_before, 1, 299, "nt0min", "samples of a waveform before its trough"),
    INT("detect", "n_pcs", detect.n_pcs, 1, 16, "n_pcs", "temporal principal components of the features"),
    INT("detect", "n_shapes", detect.n_shapes, 1, 32, "n_templates", "universal shapes of detection"),
    F32("detect", "th_single_ch_whitened", detect.th_single_ch, 0.5, 1000, "Th_single_ch",
        "peak threshold of the snippets that learn the shapes, whitened units"),
    F32("detect", "th_universal_whitened", detect.th_universal, 0.5, 1000, "Th_universal",
        "detection threshold with the universal templates, whitened units"),
    F32Z("detect", "th_low_whitened", detect.th_low, 0.5, 1000, NULL,
         "a lower detection threshold in one chunk of every low_stride_chunks: the low tier of clustering (0: off)"),
    INT("detect", "low_stride_chunks", detect.low_stride, 1, 100000, NULL, "detection chunks (1,024 samples) per low-tier chunk"),
    F64Z("detect", "low_tier_max_s", detect.low_max_s, 1, 1e9, NULL,
         "the low tier covers at most this much of a recording, seconds: its stride grows on a longer one (0: no cap)"),
    INT("detect", "n_chans", detect.n_chans, 1, 64, "nearest_chans", "channels per detection position and feature"),
    INT("detect", "n_sizes", detect.n_sizes, 1, 20, "template_sizes", "spatial envelope sizes of detection"),
    F32("detect", "min_template_size_um", detect.min_template_size_um, 1, 1000, "min_template_size",
        "σ of the smallest spatial envelope, µm"),
    INT("detect", "n_neighbors", detect.n_neighbors, 1, 1000, "nearest_templates",
        "positions in the spatial suppression of detection"),
    F32Z("detect", "dmin_um", detect.dmin_um, 5, 1000, "dmin",
         "vertical step of the detection grid x 2, µm; 0: the median contact spacing"),
    F32("detect", "dminx_um", detect.dminx_um, 5, 1000, "dminx", "horizontal step of the detection grid x 2, µm"),
    F32("detect", "max_channel_distance_um", detect.max_channel_distance_um, 1, 10000, "max_channel_distance",
        "grid positions farther than this from every contact are dropped, µm"),
    INT("detect", "max_snippets", detect.max_snippets, 100, 10000000, NULL, "snippets that learn the shapes, at most"),
    INT("detect", "min_sample_snippets", detect.min_sample_snippets, 0, 10000000, NULL,
        "fewer snippets in the sampled batches: read more batches"),
    U64("detect", "seed", detect.seed, 0, SEED_MAX, NULL, "k-means++ seed of the shapes"),
    FLAG("detect", "exhaustive", detect.exhaustive, "1: score every position and time (slow; for tests)"),
    INT("detect", "lane_spikes", detect.lane_spikes, 0, 1000000000, NULL,
        "spikes one batch's list holds when batches are detected several at once (0: 4x the expected; any value "
        "gives the same spikes)"),
    /* clustering and template acceptance */
    INT("cluster", "n_neighbors", cluster.n_neighbors, 1, 64, "cluster_neighbors", "k of the kNN graph"),
    INT("cluster", "downsampling", cluster.downsampling, 1, 100000, "cluster_downsampling",
        "every k-th spike is a landmark of the graph"),
    INT("cluster", "max_subset", cluster.max_subset, 100, 10000000, "max_cluster_subset",
        "landmarks per center, at most"),
    INT("cluster", "n_init", cluster.n_init, 1, 1024, NULL, "clusters of the initialisation"),
    INT("cluster", "n_init_candidates", cluster.n_init_candidates, 1, 1024, NULL,
        "candidates drawn per greedy initialisation step"),
    INT("cluster", "n_iter", cluster.n_iter, 1, 10000, NULL, "assignment sweeps, at most"),
    F64("cluster", "lam", cluster.lam, 0, 100, NULL, "modularity penalty"),
    I64("cluster", "min_spikes", cluster.min_spikes, 1, 1000000000, NULL,
        "centers with fewer spikes make one cluster"),
    F64("cluster", "modularity_split", cluster.modularity_split, 0, 10, NULL,
        "tree ratio below which a split is kept"),
    F64("cluster", "bimodality_merge", cluster.bimodality_merge, 0, 1, NULL,
        "dip score below which the two sides of a split collapse"),
    F64("cluster", "ridge", cluster.ridge, 0, 100, NULL, "regulariser of the split discriminant"),
    F64("cluster", "ccg_threshold", cluster.ccg_threshold, 0, 10, NULL,
        "bound of the cross-refractory test that collapses a split"),
    FLAG("cluster", "refractory_test", cluster.refractory_test, "1: collapse cross-refractory sides of a split"),
    U64("cluster", "seed", cluster.seed, 0, SEED_MAX, NULL, "seed of the initialisation"),
    F64("cluster", "x_step_um", cluster.x_step_um, 1, 100000, NULL,
        "horizontal spacing of the spatial centers on wide shanks, µm"),
    I64("cluster", "max_center_spikes", max_center_spikes, 1000, 1000000000, NULL,
        "spikes clustered per center; more are subsampled evenly"),
    INT("cluster", "min_template_spikes", min_template_spikes, 1, 1000000000, NULL,
        "clusters with fewer spikes make no template (but see small_template_spikes)"),
    INT("cluster", "small_template_spikes", small_template_spikes, 1, 1000000000, NULL,
        "clusters of fewer than min_template_spikes spikes, down to this many, make a template when their mean "
        "waveform's norm is at least small_template_norm_of_threshold x the matching threshold"),
    F64("cluster", "small_template_norm_of_threshold", small_template_norm, 0, 1000, NULL,
        "...this many times the matching threshold (0: no small templates)"),
    F64("cluster", "orphan_factor", cluster.orphan_factor, 0, 1000, NULL,
        "a spike whose k-th nearest landmark is farther than this times its center's median is an orphan (0: no "
        "orphan landmarks)"),
    INT("cluster", "orphan_min_group", cluster.orphan_min_group, 0, 1000000, NULL,
        "an orphan with this many other orphans closer than half its k-th landmark distance becomes a landmark"),
    I64("cluster", "orphan_max_landmarks", cluster.orphan_max_landmarks, 0, 1000000000, NULL,
        "only centers with at most this many regular landmarks get orphan landmarks"),
    F64("cluster", "low_tier_max_cos", low_tier_max_cos, -1, 1, NULL,
        "a low-tier cluster this similar (cosine of mean features) to a high-tier one of its center makes no template"),
    F64Z("cluster", "low_tier_majority", low_tier_majority, 1, 1e9, NULL,
         "...unless it holds at least this many times that cluster's spikes and its mean waveform passes the "
         "acceptance floor (min_template_norm_of_threshold): the low-tier cluster then makes the unit's template "
         "and the high-tier one none (0: never)"),
    F64("cluster", "min_template_norm_of_threshold", min_template_norm, 0, 100, NULL,
        "clusters whose mean waveform's norm is under this fraction of the matching threshold make no template"),
    F64("cluster", "sum_max_residual", sum.max_resid, 0, 1, NULL,
        "a template fitted by two others with at most this share of its norm left is a sum and is removed (0: off)"),
    F64("cluster", "sum_min_single_residual", sum.min_single_resid, 0, 1, NULL,
        "...when the best single template leaves at least this share (near-copies are left to the merges)"),
    F64("cluster", "sum_min_lag_ms", sum.min_lag_ms, 0, 10, NULL,
        "...and its two parts are at least this far apart, ms"),
    F64("cluster", "sum_max_amp_ratio", sum.max_amp_ratio, 1, 1000, NULL,
        "...and each part's amplitude in the sum is within this factor of the part's own"),
    F64("cluster", "copy_max_residual", sum.max_copy_resid, 0, 1, NULL,
        "a template fitted by one other with at most this share of its norm left is a copy and is removed (0: off)"),
    F64("cluster", "copy_max_amp_ratio", sum.max_copy_amp_ratio, 1, 1000, NULL,
        "...when the two templates' mean amplitudes are within this factor"),
    /* matching */
    F32("match", "threshold_whitened", match_threshold, 0.5, 1000, "Th_learned",
        "template-matching threshold, whitened units (--threshold)"),
    F64("match", "threshold_of_amplitude", match_threshold_of_amp, 0, 1, NULL,
        "a low-tier template's own threshold: this times its amplitude where that is under threshold_whitened (0: off)"),
    F32("match", "threshold_floor", match_threshold_floor, 0.5, 1000, NULL,
        "...but never under this, whitened units"),
    F32("match", "amp_prior", match_amp_prior, 0, 0.99, NULL,
        "weight w of the amplitude prior in the first pass: a template's score B counts as B^2 - w (B - mu_k)^2 "
        "(0: off)"),
    F64("match", "amp_prior_of_amplitude", match_amp_prior_of_amp, 0.05, 2, NULL,
        "the prior's centre mu_k: this times the template's amplitude (its mean waveform's norm)"),
    F32Z("match", "truncated_floor", match_trunc.floor, 0.5, 1000, NULL,
         "templates their threshold truncates are matched again at their own, at least this (0: one pass)"),
    F64("match", "truncated_median_of_threshold", match_trunc.median_of_th, 1, 100, NULL,
        "...a template whose matched amplitudes' median is under this times threshold_whitened..."),
    F64("match", "truncated_median_of_amplitude", match_trunc.median_of_amp, 0.01, 10, NULL,
        "...and under this times its amplitude..."),
    F64("match", "truncated_max_amplitude", match_trunc.max_amp_of_th, 0.01, 100, NULL,
        "...with its amplitude under this times threshold_whitened..."),
    INT("match", "truncated_min_spikes", match_trunc.min_spikes, 1, 1000000000, NULL,
        "...and at least this many matched spikes"),
    F64("match", "truncated_min_drop", match_trunc.min_drop, 0, 100, NULL,
        "...when the fitted threshold is at least this far under threshold_whitened"),
    F64("match", "truncated_overlap", match_trunc.overlap, 0, 1, NULL,
        "the second pass re-peels them and the templates overlapping one of them by at least this (the others "
        "keep their spikes)"),
    F32("match", "truncated_amp_prior", match_trunc.amp_prior, 0, 0.99, NULL,
        "weight of the amplitude prior in the second pass (0: none)"),
    F64("match", "truncated_dup_ms", match_trunc.dup_ms, 0, 10, NULL,
        "a lowered template's spike under threshold_whitened within this of a larger spike of another template is "
        "dropped (0: none)"),
    INT("match", "max_iter", match_max_iter, 1, 10000, "max_peels", "peeling iterations per window"),
    I64Z("match", "window_samples", match_window_samples, 64, 100000000, NULL,
         "central samples of a peeling window (memory, not the result, when >= 4 waveforms); 0: the batch"),
    INT("match", "n_pc_chan", n_pc_chan, 1, 64, NULL, "channels per spike in pc_features.npy"),
    /* amplitude splits */
    F64("split", "min_dprime", finish.split.min_dprime, 0, 1000, NULL,
        "a template's spikes split in two when their log amplitudes separate by this d' (0: off)"),
    I64("split", "min_spikes", finish.split.min_spikes, 1, 1000000000, NULL, "spikes in each part, at least"),
    F64("split", "min_fraction", finish.split.min_fraction, 0, 0.5, NULL,
        "share of the template's spikes in each part, at least"),
    F64("split", "low_amp_of_threshold", finish.split.low_amp_of_threshold, 0, 1000, NULL,
        "the low part's median amplitude, at least this times the matching threshold"),
    FLAG("split", "noise_cut", finish.split.noise_cut,
         "1: a cut whose low part's median amplitude is under low_amp_of_threshold times the threshold is made and "
         "that part removed as the threshold's noise crossings (unless a merge joins it to another template)"),
    F64("split", "noise_min_overlap", finish.split.noise_min_overlap, 0, 1, NULL,
        "a noise cut's parts' spike times overlap at least this much (histogram intersection over 20 bins)"),
    F64("split", "burst_min_ms", finish.split.burst_min_ms, 0, 1000, NULL,
        "a noise cut keeps a low-part spike that comes at least this long after the latest high-part spike of "
        "its train, ms"),
    F64("split", "burst_max_ms", finish.split.burst_max_ms, 0, 1000, NULL,
        "...and at most this long: a burst's later, smaller spikes (0: none kept), ms"),
    F64("split", "burst_min_ratio", finish.split.burst_min_ratio, 0, 1e9, NULL,
        "...when the low part holds at least this many times the spikes chance would put in those windows"),
    F64("split", "max_time_ks", finish.split.max_time_ks, 0, 1, NULL,
        "the parts' spike times differ by at most this Kolmogorov-Smirnov distance"),
    F64("split", "feature_min_dprime", finish.split.feature_min_dprime, 0, 1000, NULL,
        "a template no amplitude split took splits when its spikes' features separate by this d' along their "
        "first principal axis (0: off)"),
    F64Z("split", "pile_ratio", finish.split.pile_ratio, 1, 1000, NULL,
         "a low-tier unit's amplitudes pile at its own threshold when a valley between the threshold's sixteenth "
         "and their mode is this many times under both: its spikes under the valley are removed as noise (0: off)"),
    /* merges */
    F64("merge", "r_thresh", finish.merge.r_thresh, 0, 1, NULL, "template similarity needed to test a merge"),
    F64("merge", "acg_threshold", finish.merge.acg_threshold, 0, 10, "acg_threshold",
        "refractory bound of the merged autocorrelogram"),
    F64("merge", "ccg_threshold", finish.merge.ccg_threshold, 0, 10, "ccg_threshold",
        "refractory bound of the cross-correlogram"),
    F64("merge", "r_thresh_underpowered", finish.merge.r_thresh_underpowered, 0, 1, NULL,
        "similarity that merges without correlogram evidence when the trains are too short for any"),
    F64("merge", "ccg_threshold_underpowered", finish.merge.ccg_threshold_underpowered, 0, 10, NULL,
        "refractory bound of the cross-correlogram when it shows no significant dip (merges at "
        "r_thresh_underpowered with mean amplitudes within 20 %)"),
    F64Z("merge", "max_amp_ratio", finish.merge.max_amp_ratio, 1, 1000, NULL,
         "templates whose mean amplitudes differ by more than this factor do not merge on their "
         "cross-correlogram: matching hides a small unit's spikes under a large one's (0: no bound)"),
    F64("merge", "max_time_overlap", finish.merge.max_time_overlap, 0, 1, NULL,
        "trains whose spike times overlap at most this much (histogram intersection over 20 bins) merge at "
        "r_thresh_underpowered whatever their correlogram and amplitudes: pieces of one unit split by drift "
        "state (0: off)"),
    INTZ("merge", "max_lag_samples", finish.merge.max_lag, 1, 300, NULL,
         "lags of the template similarity, samples; 0: half a waveform"),
    F64("merge", "max_rate_hz", finish.merge.max_rate_hz, 1, 1000000, NULL,
        "trains faster than this on average take no part in merges, Hz"),
    /* shadows */
    F64("shadow", "max_lag_ms", finish.shadow_max_lag_ms, 0, 100, NULL, "lags examined for shadow units, ms"),
    INT("shadow", "half_width_samples", finish.shadow.half_width, 0, 1000, NULL,
        "the lag window is 2 x this + 1 samples"),
    I64("shadow", "min_count", finish.shadow.min_count, 0, 1000000000, NULL, "spikes in the window"),
    F64("shadow", "min_fraction", finish.shadow.min_fraction, 0, 1, NULL, "of the shadow's spikes in the window"),
    F64("shadow", "min_ratio", finish.shadow.min_ratio, 0, 1000000, NULL, "window count over chance"),
    I64("shadow", "max_rest_spikes", finish.shadow.max_rest, -1, 1000000000, NULL,
        "a shadow unit with at most this many spikes outside the window is removed whole (-1: never)"),
    F64("shadow", "tail_max_lag_ms", finish.shadow_tail_max_lag_ms, 0, 100, NULL,
        "lags examined for a tail shadow (a unit of at most tail_max_amp of the other's amplitude), ms"),
    F64("shadow", "tail_max_amp", finish.shadow.tail_max_amp, 0, 1, NULL,
        "a unit whose mean amplitude is at most this fraction of a neighbour's is examined as its tail shadow "
        "(0: never)"),
    F64("shadow", "tail_spread_lag_ms", finish.shadow_tail_spread_lag_ms, 0, 100, NULL,
        "a tail shadow whole: its spikes within this of the other unit's, at any lags, ms"),
    F64("shadow", "tail_spread_excess", finish.shadow.tail_spread_excess, 0, 1, NULL,
        "a tail shadow whole: the excess over chance of its spikes within tail_spread_lag_ms of the other "
        "unit's, at least (0: never)"),
    /* collision units */
    F64("collision", "window_ms", finish.collision.window_ms, 0.01, 5, NULL,
        "coincidence window of the collision-unit test, +/- ms"),
    F64("collision", "radius_um", finish.collision.radius_um, 0, 10000, NULL,
        "neighbours: peak channels at most this far apart, um"),
    F64("collision", "min_excess", finish.collision.min_excess, 0, 2, NULL,
        "coincidences above chance that make a collision unit, 0-1 (above 1: off)"),
    F64("collision", "count_ratio", finish.collision.count_ratio, 1, 1000, NULL,
        "a collision unit has a similar neighbour with at least this many times its spikes"),
    /* duplicates and labels */
    F64("finish", "duplicate_ms", finish.duplicate_ms, 0, 100, "duplicate_spike_ms",
        "same-unit spikes closer than this are duplicates, ms"),
    F64("finish", "label_acg_threshold", finish.label_acg_threshold, 0, 10, NULL,
        "a unit is good when its autocorrelogram passes the refractory test at this bound"),
    INTZ("finish", "n_template_features", finish.n_template_features, 1, 4096, NULL,
         "templates each spike is projected on in template_features.npy (Phy's template-feature view); 0: none"),
    F64("finish", "noise_median_of_threshold", finish.noise_median_of_threshold, 0, 1000, NULL,
        "a unit of the high tier half of whose spikes have amplitudes under this multiple of the matching "
        "threshold is made of noise crossings and removed, when its amplitudes also pile up against the threshold "
        "(noise_edge_ratio; 0: off)"),
    F64("finish", "noise_edge_ratio", finish.noise_edge_ratio, 0, 1000, NULL,
        "...that is, its amplitudes in the sixteenth of the threshold just above it outnumber those in the next "
        "sixteenth by more than this ratio (0: the median alone)"),
};
const int bs_n_sort_param_fields = (int)(sizeof bs_sort_param_fields / sizeof bs_sort_param_fields[0]);

int bs_param_is_int(const bs_param_field *f)
{
    return f->type == BS_PARAM_INT || f->type == BS_PARAM_I64 || f->type == BS_PARAM_U64;
}

int64_t bs_param_int(const bs_sort_params *p, const bs_param_field *f)
{
    const char *a = (const char *)p + f->offset;
    int v;
    int64_t l;
    uint64_t u;
    switch (f->type) {
    case BS_PARAM_INT:
        memcpy(&v, a, sizeof v);
        return v;
    case BS_PARAM_I64:
        memcpy(&l, a, sizeof l);
        return l;
    case BS_PARAM_U64:
        memcpy(&u, a, sizeof u);
        return (int64_t)u;
    default:
        return 0;
    }
}

double bs_param_real(const bs_sort_params *p, const bs_param_field *f)
{
    const char *a = (const char *)p + f->offset;
    float x;
    double d;
    if (f->type == BS_PARAM_F32) {
        memcpy(&x, a, sizeof x);
        return x;
    }
    if (f->type == BS_PARAM_F64) {
        memcpy(&d, a, sizeof d);
        return d;
    }
    return (double)bs_param_int(p, f);
}

const bs_param_field *bs_param_find(const char *group, const char *name)
{
    for (int i = 0; i < bs_n_sort_param_fields; i++)
        if (strcmp(bs_sort_param_fields[i].group, group) == 0 && strcmp(bs_sort_param_fields[i].name, name) == 0)
            return &bs_sort_param_fields[i];
    return NULL;
}

/* "expected an integer in [1, 64]" (with "0 (automatic) or"), for messages. */
static void range_text(const bs_param_field *f, char *buf, size_t len)
{
    if (bs_param_is_int(f) && f->lo == 0 && f->hi == 1)
        snprintf(buf, len, "expected 0 or 1 (or false / true)");
    else
        snprintf(buf, len, "expected %s%s in [%.10g, %.10g]", f->zero_auto ? "0 (automatic) or " : "",
                 bs_param_is_int(f) ? "an integer" : "a number", f->lo, f->hi);
}

static int in_range(const bs_param_field *f, double v)
{
    if (!isfinite(v))
        return 0;
    if (bs_param_is_int(f) && v != floor(v))
        return 0;
    if (f->zero_auto && v == 0)
        return 1;
    if (f->type == BS_PARAM_F32) /* compared as stored: 0.1 given is the float 0.1 the limit is */
        return (float)v >= (float)f->lo && (float)v <= (float)f->hi;
    return v >= f->lo && v <= f->hi;
}

bs_status bs_param_set(bs_sort_params *p, const bs_param_field *f, double v, const char *where)
{
    if (!in_range(f, v)) {
        char r[96];
        range_text(f, r, sizeof r);
        return bs_error(BS_ERR_USAGE, "%s%s.%s = %.10g: %s%s%s%s", where ? where : "", f->group, f->name, v, r,
                        f->kilosort ? " (Kilosort: " : "", f->kilosort ? f->kilosort : "", f->kilosort ? ")" : "");
    }
    char *a = (char *)p + f->offset;
#define STORE(type) do { type x_ = (type)v; memcpy(a, &x_, sizeof x_); } while (0)
    switch (f->type) {
    case BS_PARAM_INT: STORE(int); break;
    case BS_PARAM_I64: STORE(int64_t); break;
    case BS_PARAM_U64: STORE(uint64_t); break;
    case BS_PARAM_F32: STORE(float); break;
    case BS_PARAM_F64: STORE(double); break;
    }
#undef STORE
    return BS_OK;
}

bs_status bs_sort_params_check(const bs_sort_params *p)
{
    for (int i = 0; i < bs_n_sort_param_fields; i++) {
        const bs_param_field *f = &bs_sort_param_fields[i];
        double v = bs_param_real(p, f);
        if (!in_range(f, v)) {
            char r[96];
            range_text(f, r, sizeof r);
            return bs_error(BS_ERR_USAGE, "parameter %s.%s = %.10g: %s", f->group, f->name, v, r);
        }
    }
    const bs_detect_params *d = &p->detect;
    if (d->nt % 2 == 0)
        return bs_error(BS_ERR_USAGE, "parameter detect.nt_samples = %d: expected an odd number of samples (Kilosort: nt)",
                        d->nt);
    if (d->nt_before > d->nt - 2)
        return bs_error(BS_ERR_USAGE,
                        "parameter detect.nt_before_samples = %d: expected at most nt_samples - 2 = %d (Kilosort: nt0min)",
                        d->nt_before, d->nt - 2);
    if (p->finish.merge.max_lag >= d->nt)
        return bs_error(BS_ERR_USAGE, "parameter merge.max_lag_samples = %d: expected less than nt_samples = %d",
                        p->finish.merge.max_lag, d->nt);
    if (p->tmax_s > 0 && p->tmax_s <= p->tmin_s)
        return bs_error(BS_ERR_USAGE, "parameters batch.tmin_s = %g and tmax_s = %g: expected tmax_s > tmin_s (or 0: the end)",
                        p->tmin_s, p->tmax_s);
    return BS_OK;
}

static cJSON *group_of(cJSON *root, const char *name)
{
    cJSON *g = cJSON_GetObjectItemCaseSensitive(root, name);
    return g ? g : cJSON_AddObjectToObject(root, name);
}

static cJSON *string_array(const char *const *s, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && (n < 0 ? s[i] != NULL : i < n); i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(s[i]));
    return a;
}

bs_status bs_sort_params_write(const bs_sort_params *p, int64_t batch_samples, int64_t halo_samples, uint64_t key,
                               const char *out_dir)
{
    bs_sort_params q = *p; /* the batch and halo as resolved */
    q.batch_samples = batch_samples;
    q.halo_samples = halo_samples;
    char hex[32], path[4200];
    snprintf(hex, sizeof hex, "%016" PRIx64, key);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "boundsort_version", BOUNDSORT_VERSION);
    cJSON_AddStringToObject(root, "resume_key", hex);
    for (int i = 0; i < bs_n_sort_param_fields; i++) {
        const bs_param_field *f = &bs_sort_param_fields[i];
        cJSON *g = group_of(root, f->group);
        double v = bs_param_real(&q, f);
        if (f->type == BS_PARAM_F32) { /* the float's own digits, not its double expansion */
            char num[32];
            snprintf(num, sizeof num, "%.7g", v);
            v = strtod(num, NULL);
        }
        cJSON_AddNumberToObject(g, f->name, v);
    }
    cJSON *stages = cJSON_AddArrayToObject(root, "stages");
    for (int i = 0; i < bs_n_stages; i++) {
        const bs_stage *s = bs_stages[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", s->name);
        cJSON_AddItemToObject(o, "params", string_array(s->params, -1));
        cJSON_AddItemToObject(o, "files", string_array(s->files, s->n_files));
        cJSON_AddItemToArray(stages, o);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return bs_error(BS_ERR_MEMORY, "out of memory writing params.json");
    bs_status st = bs_path_join(path, sizeof path, out_dir, "params.json");
    if (st == BS_OK)
        st = bs_write_file_atomic(path, text, strlen(text));
    free(text);
    return st;
}
