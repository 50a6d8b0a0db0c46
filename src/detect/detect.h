/*
 * detect.h - temporal basis and universal-template spike detection
 * (docs/ALGORITHM.md §5 and §6).
 *
 * Mechanism, in three parts:
 *
 * 1. Temporal bases (basis.c). Isolated single-channel peaks of the whitened
 *    data (|x| above th_single_ch, the largest within ±4 channels × ±5
 *    samples, the only one within ±6 channels × ±30 samples) give unit-norm
 *    snippets of nt samples with the peak at nt_before. Their uncentred
 *    second-moment matrix (nt × nt) is eigen-decomposed: the top n_pcs
 *    eigenvectors are the feature basis `wpca`. k-means (k-means++ seeded,
 *    deterministic) on the snippets gives n_shapes unit-norm prototype shapes
 *    `wtemp`.
 *
 * 2. A grid of candidate spike positions (grid.c): per shank, rows every
 *    dmin/2 µm and columns every ~dminx/2 µm over the shank's contacts, kept
 *    when a contact of that shank lies within max_channel_distance. Each
 *    position f has its n_chans nearest channels of the same shank (ichan),
 *    n_sizes Gaussian spatial envelopes exp(-d²/σ_s²), σ_s =
 *    min_template_size·(s+1), normalised to unit norm over those channels,
 *    and its n_neighbors nearest positions of the same shank (for spatial
 *    non-maximum suppression). Shanks are never mixed.
 *
 * 3. Matched filtering per batch (universal.c). Each channel is filtered with
 *    each prototype shape: B[c,k,t] = Σ_u x[c, t - nt_before + u]·wtemp[k,u]
 *    (so a spike's trough at t gives the peak score at t), computed by the
 *    shapes' filter bank (src/common/firbank.h: FFTs over tiles of 192
 *    columns on a fixed grid of each chunk, 16 channels a transform). The score of
 *    position f at t is A[f,t] = max over (s,k) of |Σ_j w[s,j,f]·B[ichan[j,f],k,t]|.
 *    A spike is detected at (f,t) if A[f,t] > th_universal and no position
 *    g among f's neighbours has a larger score within ±nt_before samples
 *    (ties go to the smaller (t, f)).
 *
 *    Exact pruning: since each envelope has unit norm, Cauchy–Schwarz gives
 *    A[f,t]² ≤ max_k Σ_j B[ichan[j,f],k,t]² ≤ Σ_j max_k B[ichan[j,f],k,t]².
 *    A position whose bound does not exceed th_universal² (less 1e-5 of it,
 *    for float rounding) cannot be detected nor suppress a detection, so it
 *    is skipped. The looser bound is computed for 64 columns at a time over
 *    every position (vectorised over time, from the per-channel maxima);
 *    the tighter one is computed before the exact score, from the same
 *    filter outputs (kept with the shapes of a column side by side); with
 *    AVX-512, a per-position bound from the plane nearest its envelopes
 *    (grid.c's subspace_bound, `sub`) prunes further before the score. The
 *    result is identical to the exhaustive evaluation (a test checks this),
 *    at a small fraction of the cost, because spikes are sparse.
 *
 * Per detected spike: its trough sample, position index, the winning
 * (size, shape) and sign, score, a centre-of-mass (x, y) in µm, and features
 * on the position's n_chans channels: feat[j,p] = Σ_u x[ichan[j], t -
 * nt_before + u]·wpca[p,u].
 *
 * Batches are float32 windows, channel-major (n_chan rows × n_t samples), in
 * whitened units, with `halo` samples of context on each side of the
 * `n_valid` samples the batch owns. Only spikes whose trough lies in the
 * owned part are reported, so each spike is reported by exactly one batch.
 * Work is split in time chunks of 1,024 owned samples over OpenMP
 * threads, in waves of a few chunks per thread whose outputs go to the
 * caller's sink in chunk order: the output does not depend on the thread
 * count. Memory is bounded whatever the data: a chunk's candidate and spike
 * lists have hard limits (chunk_candidates_per_pos and chunk_spikes_per_pos
 * times the grid positions, raised to what a single column can yield); a
 * chunk that would pass them (an artifact storm: every position above
 * threshold) is done again in halves, recursively, each part handed on
 * before the next. Detection at a column depends only on the
 * samples within nt of it, so the parts give exactly the chunk's spikes, and
 * bs_detect_batch_bytes is a bound that no recording can exceed.
 */
#ifndef BS_DETECT_H
#define BS_DETECT_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../io/recording.h"

typedef struct {
    int nt;                     /* waveform length, samples (odd) */
    int nt_before;              /* samples before the trough */
    int n_pcs;                  /* temporal feature components */
    int n_shapes;               /* prototype shapes for detection */
    float th_single_ch;         /* snippet peak threshold, whitened units */
    float th_universal;         /* detection threshold on A, whitened units */
    float th_low;               /* the low tier's threshold in one chunk of 1,024 samples in low_stride, whitened
                                   units (0: none) */
    int low_stride;             /* chunks per low-tier chunk (the first of every low_stride of a batch) */
    double low_max_s;           /* the low tier covers at most this much of a recording, seconds: on a longer one
                                   its stride grows (bs_detect_low_stride; 0: no cap) */
    int n_chans;                /* channels per position / features */
    int n_sizes;                /* spatial envelope sizes */
    float min_template_size_um; /* σ of the smallest envelope, µm */
    int n_neighbors;            /* positions in the spatial suppression */
    float dmin_um;              /* vertical grid step ×2, µm (0 = median contact spacing) */
    float dminx_um;             /* horizontal grid step ×2, µm */
    float max_channel_distance_um;
    int max_snippets;           /* cap on snippets for learning the bases */
    int min_sample_snippets;    /* fewer from the spread sample of batches: read more batches (1000) */
    uint64_t seed;              /* k-means++ seed */
    int exhaustive;             /* 1 = evaluate every (position, time): for tests */
    /* workspace limits, not parameters of the result (any values give the same spikes) */
    int chunk_candidates_per_pos; /* candidates one chunk may hold, per grid position */
    int chunk_spikes_per_pos;     /* detected spikes one chunk may hold, per grid position */
    int lane_spikes;              /* spikes a batch's list holds while it waits its turn, when the detect
                                     stage works on several batches at once (src/detect/stage_detect.c); a
                                     batch with more is detected again, streamed (0: four times a batch's
                                     expected detections, at least 8192) */
} bs_detect_params;

void bs_detect_default_params(bs_detect_params *p);

/* Owned columns of one work item of a batch (a chunk), from the batch's first owned column: the low tier's
 * unit, whose candidate columns reach nt_before further on each side. */
#define BS_DETECT_CHUNK 1024

/* 1 when some chunks are detected at th_low, under th_universal (the low tier); the detector, the plan and
 * the clustering all ask this. */
int bs_detect_low_tier(const bs_detect_params *p);

/* The low tier's stride on a recording of n_samples at fs_hz: low_stride, or, where that would detect more
 * than low_max_s seconds of it at th_low, ceil(n_samples / (low_max_s fs_hz)) chunks, so that its cost stops
 * growing with the recording's length (what the detect stage runs with; the clustering scales its majority
 * rule by low_stride over it: its counts compare the tiers' spikes per second). */
int bs_detect_low_stride(const bs_detect_params *p, int64_t n_samples, double fs_hz);

/* ---- 1. temporal bases ---- */

typedef struct {
    int nt, nt_before, n_pcs, n_shapes;
    float *wpca;  /* [n_pcs × nt], orthonormal rows */
    float *wtemp; /* [n_shapes × nt], unit-norm rows, trough-aligned */
} bs_temporal_basis;

typedef struct {
    int nt, nt_before, cap, n; /* snippets held / capacity */
    float *snippets;           /* [cap × nt], unit norm */
} bs_snippet_set;

bs_status bs_snippets_init(bs_snippet_set *s, const bs_detect_params *p);
void bs_snippets_free(bs_snippet_set *s);
/* Add the isolated peaks of one whitened window (owned part only) until full. */
void bs_snippets_collect(bs_snippet_set *s, const bs_detect_params *p, const float *x, int n_chan, int64_t n_t,
                         int64_t halo, int64_t n_valid);
/* Learn the bases; fails with BS_ERR_INPUT when there are fewer snippets than
 * max(n_pcs, n_shapes) (too few spikes in the recording to learn shapes). */
bs_status bs_basis_learn(const bs_snippet_set *s, const bs_detect_params *p, bs_temporal_basis *b);
void bs_basis_free(bs_temporal_basis *b);

/* ---- 2. grid of positions ---- */

typedef struct {
    int n_pos;        /* positions kept */
    int n_chans;      /* channels per position */
    int n_sizes;
    int n_neighbors;  /* neighbours per position (≤ positions on the shank) */
    float *x_um, *y_um; /* [n_pos] */
    int *shank;       /* [n_pos] */
    int *ichan;       /* [n_pos × n_chans] nearest channels, by distance */
    float *weights;   /* [n_pos × n_sizes × n_chans] unit-norm envelopes */
    int *neighbors;   /* [n_pos × n_neighbors] nearest positions (self first), -1 padded */
    /* positions with the same set of channels share their score bounds (universal.c): */
    int n_sets;       /* distinct channel sets */
    int *set_chans;   /* [n_sets × n_chans] each set's channels, ascending */
    int *set_start;   /* [n_sets + 1] its positions are set_pos[set_start[s] .. set_start[s + 1]) */
    int *set_pos;     /* [n_pos] positions grouped by set, ascending within a set */
    /* each position's subspace bound (universal.c): [n_pos × BS_GRID_SUB_FLOATS(n_chans, n_sizes)], the two
       orthonormal directions over its channels (ascending: its set's order) nearest its envelopes
       (2 × n_chans), then per size the envelope's two coordinates on them and the norm of its remainder,
       rounded up (3 × n_sizes) */
    float *sub;
} bs_detect_grid;

#define BS_GRID_SUB_FLOATS(n_chans, n_sizes) (2 * (n_chans) + 3 * (n_sizes))

bs_status bs_grid_build(const bs_probe *probe, const bs_detect_params *p, bs_detect_grid *g);
void bs_grid_free(bs_detect_grid *g);

/* ---- 3. detection ---- */

typedef struct {
    int64_t t;       /* trough sample, absolute */
    int32_t pos;     /* grid position */
    int16_t size;    /* winning envelope index */
    int16_t shape;   /* winning prototype shape; negative deflection if sign < 0 */
    int8_t sign;     /* +1 / -1: sign of the projection */
    float score;     /* A[f,t], whitened units */
    float x_um, y_um; /* centre of mass of the positive per-channel projections */
} bs_detected_spike;

typedef struct {
    int64_t n, cap;
    bs_detected_spike *spikes; /* [cap] */
    float *features;           /* [cap × n_chans × n_pcs] */
    int feat_len;              /* n_chans × n_pcs */
    int64_t limit;             /* most rows it may grow to (0: no limit) */
    int full;                  /* a row past the limit was refused: the contents are incomplete */
} bs_detect_output;

bs_status bs_detect_output_init(bs_detect_output *o, int n_chans, int n_pcs);
void bs_detect_output_clear(bs_detect_output *o); /* n = 0, memory kept */
void bs_detect_output_free(bs_detect_output *o);

/* A candidate of the matched filter (universal.c; the GPU detector of
 * src/gpu/gpu.h returns the same): column t of the window, position f,
 * winning (size * n_shapes + shape) q and sign, score A[f, t]. */
typedef struct {
    int64_t t;
    int32_t f;
    int16_t q;
    int8_t sign;
    float score;
} bs_detect_candidate;

/* Sort n candidates of columns [c0, c1) into (t, f) order (counting sorts by
 * position, then by column: the CPU finds a column's candidates channel set
 * by set, the GPU in any order). Deterministic: the result does not
 * depend on the input order. BS_ERR_MEMORY if its scratch cannot be had. */
bs_status bs_detect_sort_candidates(bs_detect_candidate *c, int64_t n, int64_t c0, int64_t c1);

/* Most bytes one bs_detect_batch_on call holds besides the filtering scratch,
 * for any data: the chunks' candidate and spike lists at their limits, and
 * with on_gpu the window's candidates from the GPU (a window of n_t samples). */
size_t bs_detect_batch_bytes(const bs_detect_params *p, int n_pos, int n_chans, int n_threads, int64_t n_t,
                             int on_gpu);

/* Receives the spikes of consecutive parts of a window, in time order. */
typedef bs_status (*bs_detect_sink)(void *ctx, const bs_detect_output *part);
/* A sink that appends each part to the bs_detect_output ctx (up to its
 * limit: a part past it is refused and `full` set). */
bs_status bs_detect_output_append(void *ctx, const bs_detect_output *part);

/* on = 1: the scoring leaves its AVX-512 kernels for the portable ones
 * (tests check that both give the same bits); 0: the best the CPU has. */
void bs_detect_force_portable(int on);

/* Scratch bytes bs_detect_batch allocates for one call (all threads). */
size_t bs_detect_scratch_bytes(int n_chan, const bs_detect_params *p, int n_threads);

/* Detect in one window; `t0` is the absolute sample of column `halo`.
 * Requires halo >= nt. Appends to `out` in time order (unbounded: for tests
 * and short windows; the sort streams through bs_detect_batch_on's sink). */
bs_status bs_detect_batch(const bs_detect_params *p, const bs_temporal_basis *b, const bs_detect_grid *g,
                          const bs_probe *probe, const float *x, int64_t n_t, int64_t halo, int64_t n_valid,
                          int64_t t0, bs_detect_output *out);
/* The same, handing the spikes to sink(sink_ctx, part) part by part in
 * time order (a part is valid during the call only), in bounded memory
 * (bs_detect_batch_bytes); with gpu != NULL (src/gpu/gpu.h) the filtering and
 * the scores of every (position, column) run there (a window whose
 * candidates overflow it is evaluated on the CPU). The GPU filters directly,
 * the CPU by its filter bank: their scores differ by float rounding, so a
 * near-tie may go the other way there. */
struct bs_gpu_detector;
bs_status bs_detect_batch_on(const bs_detect_params *p, const bs_temporal_basis *b, const bs_detect_grid *g,
                             const bs_probe *probe, const float *x, int64_t n_t, int64_t halo, int64_t n_valid,
                             int64_t t0, struct bs_gpu_detector *gpu, bs_detect_sink sink, void *sink_ctx);

#endif
