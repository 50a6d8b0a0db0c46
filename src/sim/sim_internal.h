/*
 * sim_internal.h - shared pieces of the simulator (src/sim/sim_*.c and
 * simulate.c); not part of the public interface.
 *
 * RNG: splitmix64 (bs_sim_mix64) is used as a hash to derive independent
 * stream seeds and as a counter-based generator for noise: the white-noise
 * value of source k at sample t is a pure function of (key_k, t). Sequential
 * draws (unit parameters, spike trains) use xoshiro256** seeded from
 * (seed, stream id), one stream per unit and purpose.
 */
#ifndef BS_SIM_INTERNAL_H
#define BS_SIM_INTERNAL_H

#include <stdint.h>

#include "simulate.h"

/* ---- random numbers (sim_rng.c) ---- */
static inline uint64_t bs_sim_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Key of stream (purpose, index) under seed. */
static inline uint64_t bs_sim_key(uint64_t seed, uint64_t purpose, uint64_t index)
{
    return bs_sim_mix64(bs_sim_mix64(seed ^ 0x5eed5eed5eed5eedULL) ^ bs_sim_mix64(purpose * 0x100000001b3ULL + index));
}

/* Counter-based approximately standard normal value: Irwin-Hall sum of four
 * 16-bit uniforms, scaled to unit variance (bounded at +-3.46; the FIR
 * filtering that follows makes the sum Gaussian). */
static inline float bs_sim_counter_normal(uint64_t key, uint64_t counter)
{
    uint64_t h = bs_sim_mix64(key ^ (counter * 0xd1342543de82ef95ULL));
    uint32_t s = (uint32_t)(h & 0xffff) + (uint32_t)((h >> 16) & 0xffff) + (uint32_t)((h >> 32) & 0xffff) +
                 (uint32_t)(h >> 48);
    /* mean of s is 4 * 32767.5, variance 4 * (65536^2 - 1) / 12 */
    return ((float)s - 131070.0f) * (1.0f / 37837.23f);
}

typedef struct {
    uint64_t s[4];
} bs_sim_rng;

void bs_sim_rng_seed(bs_sim_rng *r, uint64_t seed, uint64_t purpose, uint64_t index);
uint64_t bs_sim_rng_next(bs_sim_rng *r);
double bs_sim_rng_uniform(bs_sim_rng *r);              /* [0, 1) */
double bs_sim_rng_range(bs_sim_rng *r, double lo, double hi);
double bs_sim_rng_normal(bs_sim_rng *r);               /* standard normal (Box-Muller) */
double bs_sim_rng_exp(bs_sim_rng *r);                  /* exponential, mean 1 */

/* stream purposes */
enum { BS_SIM_STREAM_UNIT = 1, BS_SIM_STREAM_TRAIN = 2, BS_SIM_STREAM_HASH = 3, BS_SIM_STREAM_HASH_TRAIN = 4,
       BS_SIM_STREAM_NOISE_CHAN = 5, BS_SIM_STREAM_NOISE_LOCAL = 6, BS_SIM_STREAM_NOISE_COMMON = 7,
       BS_SIM_STREAM_LFP = 8, BS_SIM_STREAM_ARTIFACT = 9,
       BS_SIM_STREAM_BAD_CHAN = 10, BS_SIM_STREAM_COUPLE = 11 };

/* ---- probe layouts (sim_probes.c) ---- */
typedef struct {
    int n_chan;
    int n_shanks;
    double shank_pitch_um;   /* 0 for single shank */
    double shank_width_um;
    const char *part_number; /* "NP1000", "NP2003", "NP2013", "linear32" */
    int type_code;           /* imDatPrb_type, -1 if not Neuropixels */
    int *electrode;          /* [n_chan] electrode index on its shank */
    double y_min_um, y_max_um; /* depth span of the contacts */
    double x_min_um, x_max_um; /* x span of one shank (relative to its left edge) */
    int mux_cycles;          /* ADC sampling slots per sample period (13 NP1, 16 NP2, 0 none) */
    int mux_groups, mux_adcs; /* ~muxTbl shape: groups (time slots used) and ADCs */
    int *mux_order;          /* [n_chan] slot in which the channel is sampled (0..mux_groups-1) */
} bs_sim_layout;

/* Fills probe and layout (layout->electrode from bs_mem_alloc). */
bs_status bs_sim_layout_make(bs_sim_probe_kind kind, bs_probe *probe, bs_sim_layout *layout);
void bs_sim_layout_free(bs_sim_layout *layout);

/* ---- units, waveforms, spike trains (sim_units.c) ---- */
#define BS_SIM_NPHASE 9          /* sub-sample phases: offsets (k - 4) / 8 samples */
#define BS_SIM_DIST_STEP_UM 10.0 /* distance grid of the shape table, µm */

typedef struct {
    /* geometry, µm (position at t = 0 before drift) */
    double x, y, z;
    int shank;
    int is_hash;         /* 1: background unit, not in the ground truth */
    int is_noise;        /* 1: artifact-like ground-truth unit (ringing waveform, flat footprint) */
    double ring_khz, ring_decay_ms; /* its waveform: -sin(2 pi f (tau - t0)) exp(-(tau - t0) / decay), tau >= t0 */
    /* footprint: amplitude(d) = amp_norm * |g_min| ... see sim_units.c */
    double peak_uv;      /* trough amplitude on the nearest channel at t = 0, µV */
    double d0_um;        /* footprint length scale, µm */
    double expo;         /* footprint exponent p */
    double d_ref_um;     /* 3-D distance to the nearest channel at t = 0, µm */
    double d_cut_um;     /* channels farther than this get nothing, µm */
    double amp_norm;     /* µV per unit of footprint * shape */
    /* waveform, ms */
    double sig_l_ms, sig_r_ms;   /* trough half-widths before / after the trough */
    double rep_ratio, rep_t_ms, rep_sig_ms; /* repolarization peak: height / trough, time, width */
    double pre_ratio, pre_t_ms, pre_sig_ms; /* pre-trough peak (triphasic units) */
    double widen_per_100um;      /* relative widening per 100 µm of distance */
    double delay_ms_per_100um;   /* lag per 100 µm of distance */
    double tau_star_ms;          /* trough time of the raw shape at d_ref */
    /* firing */
    double rate_hz;
    double refractory_ms;
    int bursting;
    double burst_prob;           /* probability that an event starts a burst */
    /* tables */
    int n_dist;                  /* shape table rows */
    double d_lo_um;              /* distance of row 0 (rows every BS_SIM_DIST_STEP_UM, one falls on d_ref) */
    float *shape;                /* [n_dist][BS_SIM_NPHASE][nt], unit trough magnitude at d_ref */
    int n_cand;
    int *cand;                   /* candidate channels (within d_cut + max drift in the plane) */
    int peak_chan;               /* nearest channel at t = 0 */
    int dq_peak;                 /* ADC delay of the peak channel, 1/8 samples */
} bs_sim_unit;

typedef struct {
    int64_t t;     /* sample of the trough */
    int32_t unit;  /* index into the unit table (GT units first, then hash units) */
    int8_t phase;  /* sub-sample phase index 0..BS_SIM_NPHASE-1 */
    float scale;   /* amplitude factor of this spike */
} bs_sim_spike;

typedef struct {
    double fs_hz;
    int nt, nt_before;
    const bs_probe *probe;
    const bs_sim_layout *layout;
    /* drift table */
    int n_bins, n_blocks;
    int64_t bin_samples;
    float *drift;          /* [n_bins][n_blocks] µm: apparent unit depth = y0 + drift */
    double *block_depth;   /* [n_blocks] µm */
    double max_abs_drift;  /* µm */
    const int *chan_dq;    /* [n_chan] ADC sampling delay of each channel in 1/8 samples, or NULL (no mux) */
    int8_t *chan_bad;      /* [n_chan] planted bad channel: 0 none, 1 dead, 2 noisy, 3 out of the brain (the
                              labels of bad_channels.h); NULL when none is planted */
} bs_sim_world;

/* Draw GT unit u's parameters (hash = 0) or hash unit u's (hash = 1). */
void bs_sim_unit_draw(const bs_sim_params *p, const bs_sim_world *w, int hash, int u, bs_sim_unit *unit);
/* Builds the shape table and candidate channels. */
bs_status bs_sim_unit_build(const bs_sim_world *w, bs_sim_unit *unit);
void bs_sim_unit_free(bs_sim_unit *unit);
/* Footprint factor (before amp_norm) at 3-D distance d, tapered to 0 at d_cut. */
double bs_sim_footprint(const bs_sim_unit *unit, double d_um);
/* Spike train of a unit on [t_lo, t_hi) samples: appends to *sp (bs_mem_realloc'ed). */
bs_status bs_sim_unit_train(const bs_sim_params *p, const bs_sim_world *w, const bs_sim_unit *unit, int hash,
                            int u, int32_t unit_index, int64_t t_lo, int64_t t_hi, bs_sim_spike **sp,
                            int64_t *n, int64_t *cap);
/* Coupled pairs (--coupled-pairs N): GT unit 2i + 1 (the follower) sits BS_SIM_COUPLE_DY_UM from unit 2i
 * (the leader) at the same x, and fires p->coupled_lag_ms (+-1 sample) after a BS_SIM_COUPLE_PROB share of
 * the leader's spikes, besides its own train. */
#define BS_SIM_COUPLE_PROB 0.5
#define BS_SIM_COUPLE_DY_UM 30.0
/* Moves follower beside leader (before bs_sim_unit_build): leader's shank and x, depth leader's +
 * BS_SIM_COUPLE_DY_UM (- when that leaves the contacts' depth span). */
void bs_sim_couple_place(const bs_sim_world *w, const bs_sim_unit *leader, bs_sim_unit *follower);
/* sp[a0, b0) is the leader's train, sp[b0, *n) the follower's own (the last one drawn): adds the coupled
 * follower spikes (unit index follower_index; seeded by pair) and drops the follower's own spikes that fall
 * within its refractory period of an added one, so its train stays refractory. */
bs_status bs_sim_couple_train(const bs_sim_params *p, const bs_sim_world *w, const bs_sim_unit *follower,
                              int32_t follower_index, int pair, int64_t a0, int64_t b0, int64_t t_lo, int64_t t_hi,
                              bs_sim_spike **sp, int64_t *n, int64_t *cap);
/* Apparent depth shift of a unit at depth y_um during drift bin `bin`, µm. */
double bs_sim_drift_at(const bs_sim_world *w, int64_t bin, double y_um);
/* Adds spike sp (of unit) into buf[ch * stride + (t - t0)], for t in [t0, t1). */
void bs_sim_render_spike(const bs_sim_world *w, const bs_sim_unit *unit, const bs_sim_spike *sp, float *buf,
                         int64_t stride, int64_t t0, int64_t t1);

/* ---- noise (sim_noise.c) ---- */
typedef struct {
    int n_chan;
    int half_taps;       /* FIR half length */
    float *taps;         /* [2 * half_taps + 1], unit-energy low-pass */
    float sigma_ind_uv, sigma_local_uv, sigma_common_uv;
    int n_local;         /* spatially smooth sources */
    int *local_start;    /* [n_chan + 1] CSR offsets into local_src / local_w */
    int *local_src;
    float *local_w;
    int n_common;        /* one common source per shank, filtered at 8 sub-sample delays */
    float *taps_delayed; /* [8][2 * half_taps + 1]: the low-pass delayed by d / 8 samples */
    const int *chan_dq;  /* [n_chan] ADC delay in 1/8 samples, or NULL */
    const int *chan_shank; /* [n_chan] shank of each channel (the probe's array) */
    double lfp_uv;
    double lfp_freq_hz[3], lfp_phase[3];
    float *lfp_w;        /* [3][n_chan] spatial profile of each LFP component */
    uint64_t seed;
} bs_sim_noise;

bs_status bs_sim_noise_init(bs_sim_noise *nz, const bs_sim_params *p, const bs_probe *probe, const int *chan_dq);
void bs_sim_noise_free(bs_sim_noise *nz);
/* Scratch floats needed by bs_sim_noise_block for a block of B samples. */
size_t bs_sim_noise_scratch(const bs_sim_noise *nz, int64_t B);
/* Writes noise for samples [t0, t0 + B) into buf[ch * B + i] (overwrites). */
void bs_sim_noise_block(const bs_sim_noise *nz, double fs_hz, int64_t t0, int64_t B, float *buf, float *scratch);

/* ---- SpikeGLX output (sim_spikeglx.c) ---- */
bs_status bs_sim_write_meta(const char *meta_path, const char *bin_name, const bs_sim_layout *layout,
                            const bs_probe *probe, double fs_hz, int64_t n_samples, uint64_t seed);

/* ---- Open Ephys output (sim_openephys.c): DIR/openephys/ from DIR/recording.bin ---- */
bs_status bs_sim_write_openephys(const char *out_dir, const bs_sim_layout *layout, const bs_probe *probe, double fs_hz,
                                 int64_t n_samples, double uv_per_bit);

/* ---- artifacts (sim_artifacts.c) ---- */
typedef struct {
    int64_t t0, t1;     /* first sample, one past the last */
    int kind;           /* 0 stimulation, 1 chewing, 2 movement */
    double amp_uv;      /* peak amplitude, µV */
    double p1, p2;      /* shape: stimulation phase ms / recovery tau ms; chewing Hz / tau ms; movement - / tau ms */
    double y_lo, y_hi;  /* depth range it covers, µm */
    double g_lo, g_hi;  /* gain at y_lo and at y_hi (before the per-channel jitter) */
    int n_chan;         /* channels with gain >= 0.25 */
} bs_sim_artifact;

/* The events of p->artifact_rate_hz over n_samples, in start order (*out
 * from the accountant, NULL when none). */
bs_status bs_sim_artifacts_draw(const bs_sim_params *p, const bs_probe *probe, int64_t n_samples,
                                bs_sim_artifact **out, int64_t *n_out);
/* Samples of the longest event. */
int64_t bs_sim_artifacts_max_len(double fs_hz);
/* Add every event overlapping [t0, t1) to buf (channel-major, row stride B). */
void bs_sim_artifacts_render(const bs_sim_artifact *a, int64_t n, uint64_t seed, const bs_probe *probe, double fs_hz,
                             float *buf, int64_t B, int64_t t0, int64_t t1);
/* out_dir/gt_artifacts.tsv (written even with no events: the header alone). */
bs_status bs_sim_artifacts_write(const char *out_dir, const bs_sim_artifact *a, int64_t n);

#endif
