/*
 * simulate.h - the ground-truth simulator behind `boundsort simulate`.
 *
 * A recording is the sum of (1) spikes of U ground-truth units, (2) spikes of
 * many distant tiny "hash" units that are not in the ground truth, (3)
 * band-limited noise that is partly independent per channel, partly shared by
 * nearby channels (spatially smooth sources) and partly common to a whole
 * shank, (4) a small low-frequency LFP-like wave and (5) optionally, large
 * broadband artifacts on most channels (sim_artifacts.c). Units sit in 3-D near
 * the probe and move with the requested drift; every spike is rendered from
 * its unit's position at its own time, with a per-unit waveform whose
 * amplitude decays with distance and whose shape widens and lags far away.
 *
 * Determinism: every random quantity is a pure function of the seed. Unit
 * parameters and spike trains come from per-unit xoshiro256** streams; noise
 * samples come from a counter-based generator keyed by (seed, source, sample
 * index). The recording is rendered in time blocks in parallel (OpenMP), and
 * each output sample depends only on those pure functions, so the files are
 * byte-identical for any thread count and any block size.
 *
 * The output folder is the ground-truth folder of docs/CONVENTIONS.md; with
 * spikeglx set, DIR/spikeglx/sim_g0_t0.imec0.ap.{bin,meta} is written too;
 * with openephys set, an Open Ephys Record Node folder DIR/openephys/Record
 * Node 101/ (sim_openephys.c) whose sample numbers start at
 * BS_SIM_OE_FIRST_SAMPLE.
 */
#ifndef BS_SIMULATE_H
#define BS_SIMULATE_H

#include <stdint.h>

#include "../common/status.h"
#include "../io/recording.h"

#define BS_SIM_OE_FIRST_SAMPLE 1234567 /* first sample number of the Open Ephys copy (acquisition clock) */

typedef enum {
    BS_SIM_PROBE_NP1 = 0,       /* Neuropixels 1.0 (NP1000): 384 ch, staggered, 20 µm rows */
    BS_SIM_PROBE_NP2 = 1,       /* Neuropixels 2.0 single shank (NP2003): 2 columns, 15 µm rows */
    BS_SIM_PROBE_NP2_4SHANK = 2, /* Neuropixels 2.0 four shanks (NP2013): 96 ch per shank, 250 µm apart */
    BS_SIM_PROBE_LINEAR32 = 3   /* 32 contacts in one column, 25 µm pitch */
} bs_sim_probe_kind;

typedef enum {
    BS_SIM_DRIFT_NONE = 0,
    BS_SIM_DRIFT_RIGID = 1,    /* drift_um * sin(2 pi t / duration), same for every depth */
    BS_SIM_DRIFT_NONRIGID = 2, /* rigid sinusoid scaled from 0.3x (deepest block) to 1.7x (top block) */
    BS_SIM_DRIFT_STEP = 3      /* 0 before step_time_s, drift_um after */
} bs_sim_drift_kind;

typedef struct {
    bs_sim_probe_kind probe;
    double duration_s;       /* recording length, s (> 0) */
    int n_units;             /* ground-truth units (1..2000) */
    bs_sim_drift_kind drift;
    double drift_um;         /* amplitude of the sinusoid / size of the step, µm (0: default per kind) */
    double step_time_s;      /* time of the step, s (< 0: the drift bin boundary nearest mid-recording) */
    double drift_bin_s;      /* drift time bin, s: positions are constant within a bin */
    int n_drift_blocks;      /* depth blocks of the drift table (>= 1) */
    uint64_t seed;
    double fs_hz;            /* sampling rate, Hz */
    int spikeglx;            /* also write a SpikeGLX .ap.bin/.meta pair (Neuropixels probes only) */
    int openephys;           /* also write an Open Ephys Record Node folder */
    double noise_uv;         /* rms of the background noise per channel, µV (hash and LFP excluded) */
    double hash_per_100um;   /* hash units per 100 µm of shank length */
    double lfp_uv;           /* amplitude of each of the 3 LFP-like components, µV */
    int block_samples;       /* samples per rendering block (speed only, never changes the output) */
    int adc_mux;             /* Neuropixels ADC multiplexing: channels sampled at staggered sub-sample times */
    double artifact_rate_hz; /* broadband transients per second (0: none; sim_artifacts.c), in gt_artifacts.tsv */
    int n_dead;              /* dead channels planted: the signal x 0.02 (below one bit: flat) */
    int n_noisy;             /* noisy channels planted: white noise of 50 µV rms added, up to the Nyquist frequency */
    int n_out;               /* out-of-brain channels planted at the top of each shank: no spikes, no shared noise,
                                only white noise of 0.8 x noise_uv rms */
    int n_noise_units;       /* the last n_noise_units of the n_units are artifact-like (sim_units.c) */
    int n_coupled;           /* pairs (2i, 2i + 1), i < n_coupled, of neighbouring GT units where 2i + 1 fires
                                coupled_lag_ms after half of 2i's spikes (sim_internal.h, BS_SIM_COUPLE_*) */
    double coupled_lag_ms;   /* ms (0.6; -2..2) */
} bs_sim_params;

typedef struct {
    int n_chan;
    int64_t n_samples;
    int64_t n_spikes;         /* ground-truth spikes */
    int64_t n_hash_spikes;    /* background (not ground-truth) spikes */
    int64_t n_collisions;     /* GT spike pairs within 1 ms whose peak channels are within 100 µm */
    int64_t n_artifacts;      /* artifact events (gt_artifacts.tsv) */
    double uv_per_bit;        /* µV per int16 unit in recording.bin */
    int nt, nt_before;        /* template length and trough index, samples */
} bs_sim_summary;

void bs_sim_params_default(bs_sim_params *p);

/* "np1", "np2", "np2-4shank", "linear32" (BS_ERR_USAGE with the list otherwise). */
bs_status bs_sim_parse_probe(const char *text, bs_sim_probe_kind *kind);
/* "none", "rigid", "nonrigid", "step". */
bs_status bs_sim_parse_drift(const char *text, bs_sim_drift_kind *kind);
const char *bs_sim_probe_name(bs_sim_probe_kind kind);
const char *bs_sim_drift_name(bs_sim_drift_kind kind);

/* The probe layout (positions in µm, column i = channel i). Free with bs_probe_free. */
bs_status bs_sim_make_probe(bs_sim_probe_kind kind, bs_probe *p);
/* µV per int16 unit that the probe's SpikeGLX .meta implies (linear32: 0.195, Intan). */
double bs_sim_uv_per_bit(bs_sim_probe_kind kind);

/* Checks the parameters (BS_ERR_USAGE naming the bad one). */
bs_status bs_sim_check_params(const bs_sim_params *p);

/* Simulate into out_dir (created if needed). summary may be NULL. */
bs_status bs_simulate(const bs_sim_params *p, const char *out_dir, bs_sim_summary *summary);

/* After bs_simulate: out_dir/recording.nwb, the same samples as an NWB file
 * (src/sim/sim_nwb.c; needs HDF5, BS_ERR_INPUT otherwise). */
bs_status bs_sim_write_nwb(const char *out_dir, const bs_sim_params *p, const bs_sim_summary *s);

#endif
