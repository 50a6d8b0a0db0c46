/*
 * match.h - template matching: channel-sparse low-rank templates, the sparse
 * template-pair table and per-batch peeling (docs/ALGORITHM.md §8; the
 * storage strategies in docs/ARCHITECTURE.md §3; written from the
 * description, not ported).
 *
 * Representation (chosen, and every number below is exact for it):
 *   A template k lives on n_sup channels S_k (sorted ascending channel
 *   indices, the same count for every template of a set) and is stored
 *   low-rank, as Kilosort stores it: spatial weights U_k (n_sup x P) on a
 *   shared temporal basis (P x nt), so its waveform is
 *       W_k[i, s] = sum_p U_k[i, p] * basis[p, s]   (i-th support channel, s in 0..nt-1).
 *   The basis need not be orthonormal; U_k is scaled at creation so that
 *   ||W_k|| = 1 (computed through the Gram matrix of the basis). A template's
 *   trough is at sample nt_before.
 *
 * Data: X is a whitened batch window, float32, channel-major, row c at
 * X + c*ldx, n_t samples. Samples outside [0, n_t) count as zero.
 *
 * Scores: B[k, t] = sum_{i} sum_s W_k[i, s] * X[S_k[i], t + s - nt_before],
 * computed in frequency over tiles of the basis's filter bank (templates.c):
 * each channel's spectrum of a tile, each template's spectrum as the sum over
 * its support of the channel's spectrum times the template's waveform there
 * in frequency (its weights on the basis filters' spectra), and one inverse
 * transform per 16 templates. Tiles lie on a fixed grid of the window and the
 * templates go through the inverse transforms in fixed groups of 16, so scores
 * are the same bits whatever template range ("chunks over templates") or
 * thread count is used.
 *
 * Pair table: for templates j, k and lag d in [-(nt-1), nt-1],
 *     UtU[j, k, d] = sum_{c in S_j and S_k} sum_s W_j[c, s] * W_k[c, s + d]
 * (W_k[c, s'] = 0 for s' outside 0..nt-1). Subtracting an amplitude-a copy of
 * template k placed at time t (X[c, t - nt_before + s] -= a W_k[c, s]) changes
 * the score B[j, t + d] by exactly -a * UtU[j, k, d]. UtU[j, k, d] =
 * UtU[k, j, -d]. Pairs whose supports are disjoint are exactly zero and are not
 * stored: the table is CSR over the subtracted template k, listing every j
 * whose support shares a channel with S_k (k itself included), each with a row
 * of 2nt-1 floats v[d + nt - 1] = UtU[j, k, d]. A row is computed as
 * sum_{p,q} M[p,q] * WtW[p,q,d] with M = U_j^T U_k over the shared channels
 * (ascending channel order) and WtW the lagged basis products (j > k: the
 * (k, j) row reversed, so the symmetry is exact); the same function fills the
 * table and computes rows on demand, so the three storage strategies (full,
 * half by symmetry, on the fly) give identical bits and identical peeling.
 *
 * Sizes (nt = 61, 32-channel supports, 384-channel 2-column probe, templates
 * spread evenly): K = 500: dense 121 MB, full 19.9 MB, half 10.5 MB;
 * K = 2000: 1.94 GB, 319 MB, 166 MB; K = 17000: 140 GB, 23.0 GB, 12.0 GB.
 *
 * Peeling (per batch): see bs_peel_batch below.
 */
#ifndef BS_MATCH_H
#define BS_MATCH_H

#include <stddef.h>
#include <stdint.h>

#include "../common/firbank.h"
#include "../common/status.h"

#define BS_MATCH_MAX_SUP 64     /* channels per template support, at most */
#define BS_MATCH_MAX_PC 16      /* temporal components, at most */

/* ---------------------------------------------------------------- templates */

typedef struct {
    int n_chan;        /* channels C of the data (rows of X) */
    int nt;            /* samples per template */
    int nt_before;     /* trough index within the template, samples */
    int n_pc;          /* temporal components P */
    int K;             /* templates */
    int n_sup;         /* channels per support */
    float *basis;      /* P x nt temporal basis (whitened units per unit weight) */
    float *wtw;        /* P x P x (2nt-1): wtw[(p*P+q)*(2nt-1) + d+nt-1] = sum_s basis[p,s] basis[q,s+d] */
    int32_t *support;  /* K x n_sup channel indices, ascending per template */
    float *U;          /* K x n_sup x P spatial weights, scaled so ||W_k|| = 1 */
    float *norm_in;    /* K: ||W_k|| of the weights as given (before scaling) */
    bs_firbank fir;    /* the basis as a filter bank (its transforms, templates.c) */
    float *hspec;      /* P x n: the basis filters' spectra / 2n in slots (templates.c), n = fir.n */
} bs_match_templates;

/* Bytes held by a template set of this shape (all its tagged buffers). */
size_t bs_match_templates_bytes(int nt, int n_pc, int K, int n_sup);

/* Copy and validate: basis (P x nt), support (K x n_sup, ascending, unique,
 * in [0, n_chan)), U (K x n_sup x P, non-zero). U is rescaled to unit-norm
 * waveforms. `what` names the source in error messages (a path or "templates").
 * Bad input gives BS_ERR_INPUT naming the field. */
bs_status bs_match_templates_create(const char *what, int n_chan, int nt, int nt_before, int n_pc,
                                    const float *basis, int K, int n_sup, const int32_t *support,
                                    const float *U, bs_match_templates *out);
void bs_match_templates_free(bs_match_templates *t);
/* The n templates idx[0..n) (ascending) of t as a set of their own: the same basis, supports and weights (the
 * same bits), their amplitudes norm_in kept. */
bs_status bs_match_templates_subset(const bs_match_templates *t, const int32_t *idx, int n, bs_match_templates *out);

/* Each template's matching threshold, whitened units, into thk (K): threshold for a template of the high
 * tier; for one of the low tier (low_tier[k], docs/ALGORITHM.md §8.4) of_amp times its amplitude
 * norm_in[k], at least floor and at most threshold. The match stage peels with them, the finish stage
 * reads a low-tier template's amplitudes against its own. Returns the low-tier templates (0 with of_amp 0
 * or low_tier NULL: then thk is every template's threshold). */
int bs_match_thresholds(const bs_match_templates *t, const uint8_t *low_tier, float threshold, double of_amp,
                        float floor, float *thk);

/* Expand template k's waveform into w (n_sup x nt floats). */
void bs_match_template_waveform(const bs_match_templates *t, int k, float *w);

/* ------------------------------------------- template features (Phy's view) */

/* Phy's template-feature view plots, for two clusters, each spike's
 * projection on their two templates. template_features.npy holds, per spike
 * of template k, its projection on the n_tf templates of row k of
 * template_feature_ind.npy:
 *     f[s, n] = sum over k's pc channels c of <x_s[c], W_j[c]>,  j = ind[k, n],
 * with x_s the spike's data (residual plus its fitted template) on channel c.
 * Because W_j[c] = sum_p U_j[c, p] basis[p], this is exactly
 * sum_c sum_p U_j[c, p] pcf[s, p, c] with pcf the spike's pc features
 * (projections of x_s on the basis rows), so no data is read again; a
 * channel outside j's support contributes 0. For j = k and a unit-norm
 * template, f is the amplitude times the share of the template on those
 * channels.
 *
 * The neighbours of k: k itself first, then the templates with the largest
 * zero-lag similarity sum_c <W_k[c], W_j[c]> over k's pc channels (ties: the
 * smaller id), then, if fewer than n_tf overlap k at all, the smallest ids
 * not chosen; 1 <= n_tf <= K. Only templates sharing one of k's pc
 * channels are visited, through per-channel lists. */
size_t bs_template_neighbors_bytes(int K, int n_sup, int n_chan);
/* ind: K x n_tf; pc_chan: K x npc probe channels, each in k's support. */
bs_status bs_template_neighbors(const bs_match_templates *t, const int32_t *pc_chan, int npc, int n_tf, int32_t *ind);
/* out[s * n_tf + n] for n spikes of templates tmpl[s] with pc features
 * pcf (n x P x npc, as pc_features.npy). */
void bs_template_features(const bs_match_templates *t, const int32_t *pc_chan, int npc, const int32_t *ind, int n_tf,
                          int64_t n, const int32_t *tmpl, const float *pcf, float *out);

/* --------------------------------------------------------------- scores */

/* Bytes of a full score buffer: K x n_t floats. */
size_t bs_match_scores_bytes(int K, int64_t n_t);
/* Bytes of the score workspace (projection tile; gather and block buffers per thread). */
size_t bs_match_scores_ws_bytes(const bs_match_templates *t, int n_threads);

typedef struct {
    int n_threads; /* threads */
    float *X;      /* 4 sub-tiles x C channels x n: the channels' spectra (templates.c) */
    float *S;      /* up to 256 templates x 4 sub-tiles x n: the templates' spectra */
    float *G;      /* up to 256 templates x n_sup x n: the templates' weights in frequency */
    float *fft;    /* per thread: the filter bank's scratch and output tile */
} bs_match_scores_ws;

bs_status bs_match_scores_ws_alloc(const bs_match_templates *t, int n_threads, bs_match_scores_ws *ws);
void bs_match_scores_ws_free(bs_match_scores_ws *ws);

/* Scores of templates k0..k1-1 for every t in [0, n_t): row k of the
 * output is at B + (k - k0) * ldb. Bits do not depend on k0, k1 (a block that
 * straddles the range is computed whole and only the rows asked for are kept). */
bs_status bs_match_scores(const bs_match_templates *t, const float *X, size_t ldx, int64_t n_t, int k0,
                          int k1, float *B, size_t ldb, bs_match_scores_ws *ws);

/* ----------------------------------------------------------- pair table */

/* Storage strategies of the pair table (same values, bit for bit). */
typedef enum {
    BS_PAIR_ON_THE_FLY = 0, /* neighbour lists only; rows computed when needed */
    BS_PAIR_FULL = 1,       /* a row per stored pair (j, k) */
    BS_PAIR_HALF = 2,       /* a row per pair with j <= k; (j, k), j > k, reads row (k, j) reversed */
    BS_PAIR_SOME = 3        /* on the fly, but the rows of some subtracted templates kept (bs_pair_table_keep:
                               those with the most spikes, within a byte budget) */
} bs_pair_mode;

typedef struct {
    int K;
    int n_lag;          /* 2nt - 1 */
    bs_pair_mode mode;
    int64_t nnz;        /* stored pairs (ordered, (k, k) included) */
    int64_t n_rows;     /* value rows held: nnz (full), (nnz + K) / 2 (half), 0 */
    int64_t *row_start; /* K + 1: pairs of subtracted template k are row_start[k]..row_start[k+1]-1 */
    int32_t *nbr;       /* nnz: template j of each pair, ascending within a row */
    int64_t *vrow;      /* nnz (half only): value row r of the pair, or -1 - r when read reversed */
    int64_t *kval;      /* K (some only): value row of pair row_start[k] when template k's rows are kept, else -1 */
    int n_kept;         /* templates whose rows are kept (some) */
    float *val;         /* n_rows x n_lag, NULL on the fly */
} bs_pair_table;

/* Pairs (j, k) with overlapping supports, counting (k, k), for K templates
 * whose supports are given (K x n_sup, ascending); -1 on bad sizes. */
int64_t bs_pair_count(int K, int n_sup, const int32_t *support, int n_chan);
/* Bytes of the sparse table for `nnz` pairs under a storage mode. */
size_t bs_pair_table_bytes(int K, int64_t nnz, int nt, bs_pair_mode mode);
/* Bytes of the dense K x K x (2nt-1) float table, for comparison. */
double bs_pair_dense_bytes(int64_t K, int nt);

bs_status bs_pair_table_build(const bs_match_templates *t, bs_pair_mode mode, bs_pair_table *pt);
void bs_pair_table_free(bs_pair_table *pt);
/* An on-the-fly table (built BS_PAIR_ON_THE_FLY) keeps the rows of the templates it subtracts most: the
 * templates in order of weight (descending; ties: the lower index), each whose rows (row_start[k+1] -
 * row_start[k] of them) still fit in value_bytes, are computed now, in parallel (the same bits as on the
 * fly), plus 8 bytes per template of index; the table becomes BS_PAIR_SOME (when none fits it stays on the
 * fly). A spike of a kept template is then subtracted without computing its rows: with weights such as
 * each template's spike count, most of them when a few templates have most spikes. */
bs_status bs_pair_table_keep(const bs_match_templates *t, bs_pair_table *pt, const int64_t *weight,
                             size_t value_bytes);

/* UtU[nbr[m], k, .] of pair m (in row k): a pointer into the table, or the
 * row written into buf (2nt-1 floats) when computed or reversed. */
const float *bs_pair_get(const bs_match_templates *t, const bs_pair_table *pt, int k, int64_t m, float *buf);

/* Row UtU[j, k, .] (2nt-1 floats, index d + nt - 1) computed from the
 * templates; identical bits to the stored table entry. For j > k it is the
 * row (k, j) reversed, so UtU[j, k, d] == UtU[k, j, -d] exactly. */
void bs_pair_row(const bs_match_templates *t, int j, int k, float *out);

/* ----------------------------------------------------------- peeling */

typedef struct {
    float threshold; /* whitened units; a spike needs B[k,t] > threshold (default 8) */
    int max_iter;    /* peeling iterations per batch (default 50) */
    const float *tmpl_threshold; /* K per-template thresholds (whitened units, each <= threshold), or NULL;
                                    with them a template under its own threshold at a sample loses the choice
                                    of template there to any template over its own (bs_peel_batch, step 2) */
    const float *amp_mu; /* K centres mu_k of the amplitude prior, a template's typical amplitude (whitened
                            units; the match stage's: match.amp_prior_of_amplitude times a_k), or NULL: none */
    float amp_prior;     /* weight w of the amplitude prior, [0, 1): a template's score B counts as
                            B^2 - w (B - mu_k)^2 in the choice of template and against threshold^2 (the cost
                            saved by the spike under a Gaussian prior on its amplitude centred on mu_k, of
                            weight w / (1 - w)); the spike's amplitude stays B (0: off) */
} bs_peel_params;

void bs_peel_params_default(bs_peel_params *p);

typedef struct {
    int64_t time;   /* absolute sample of the trough */
    int32_t tmpl;   /* template id */
    float amp;      /* amplitude, whitened units (template unit norm) */
} bs_spike;

typedef struct {
    int64_t n_t;        /* window length the workspace was sized for, samples */
    int max_iter;
    int64_t max_spikes; /* max_iter * (n_t / (nt + 1) + 1): the most one window can yield */
    float *B;           /* K x n_t scores */
    float *bmax;        /* n_t best score per sample */
    int32_t *imax;      /* n_t template of the best score */
    int64_t max_cand;   /* n_t / (nt + 1) + 1: accepted spikes of one iteration, at most */
    int64_t *cand;      /* max_cand accepted times of one iteration */
    int64_t *ivl;       /* 2 x max_cand: merged [lo, hi) column ranges to rescan */
    int32_t *ctmpl;     /* max_cand templates of the accepted spikes */
    float *camp;        /* max_cand amplitudes of the accepted spikes */
    float *rowbuf;      /* (n_threads + 2) x (2nt-1): on-the-fly pair rows */
    bs_spike *spk;      /* max_spikes: the window's spikes, window-relative times */
    uint8_t *mark;      /* n_t: samples near a change since the last collision pass */
    int n_groups;       /* row groups of the column scan (0: one group, K below PEEL_GROUP_MIN_K) */
    int group_rows;     /* templates per group */
    float *gmax;        /* n_groups x n_t: best score of each group of PEEL_GROUP templates per sample */
    int32_t *gimax;     /* n_groups x n_t: its template */
    uint8_t *gsel;      /* n_threads x n_groups: groups a rescan interval must rescan */
    int64_t *ivs;       /* max_cand + 1: first accepted spike of each rescan interval */
    float *Y;           /* n_chan x n_t: a peeling window's copy of the data (bs_peel_span) */
    int n_threads;
    const float *amp_mu; /* the window's amplitude prior (bs_peel_params), NULL without one */
    float amp_prior;
    const float *thk;    /* the window's per-template thresholds (bs_peel_params), NULL without them */
    bs_match_scores_ws sws;
    struct bs_gpu_scorer *gpu; /* set by the caller (src/gpu/gpu.h): step 1's scores are computed there
                                  instead of by bs_match_scores; not owned by the workspace */
} bs_peel_ws;

/* Bytes of the peel workspace (including the score buffer and score
 * workspace) for a window of n_t samples. */
size_t bs_peel_ws_bytes(const bs_match_templates *t, int64_t n_t, int max_iter, int n_threads);
/* n_threads <= 0 means omp_get_max_threads(). */
bs_status bs_peel_ws_alloc(const bs_match_templates *t, int64_t n_t, int max_iter, int n_threads,
                           bs_peel_ws *ws);
void bs_peel_ws_free(bs_peel_ws *ws);
/* Tests: workspaces allocated after this scan their columns in groups of
 * `rows` templates whatever K (0: the default rule, groups of 64 from 2,048
 * templates); the results are the same bits. */
void bs_peel_force_groups(int rows);

/*
 * Peel one window. X (C x n_t, row stride ldx) covers absolute samples
 * [t0_abs, t0_abs + n_t) and is turned into the residual in place. The
 * window's central part is [c_begin, c_end) (window-relative); consecutive
 * windows must have central parts that tile the recording, and a halo of at
 * least 2*nt on each side where data exist.
 *
 * Each iteration: best score over templates per sample (lowest k on ties);
 * accept every sample t whose best score exceeds the threshold and is the
 * maximum within [t - nt, t + nt] (strictly greater than earlier samples,
 * at least equal to later ones), so accepted spikes are more than nt apart and
 * their waveforms do not overlap; record amplitude a = B[k, t]; subtract them
 * from X and update B through the pair table (any storage mode). Only t with the whole template
 * inside the window (nt_before <= t <= n_t - nt + nt_before) can be accepted.
 * When nothing exceeds the threshold, a collision pass (peel.c) refits
 * overlapping spikes as least-squares pairs (a spike fitted alone on two
 * overlapping waveforms absorbs its neighbour); if it changes anything the
 * plain iterations resume. Stops when neither finds anything or after
 * max_iter iterations (each plain iteration and each collision pass counts);
 * a window never yields more than ws->max_spikes spikes (a warning says so).
 *
 * Every spike found is subtracted; those with c_begin <= t < c_end are
 * appended to out (time = t0_abs + t), sorted by time then template. So a
 * spike is reported by the one window whose central part holds its time.
 * Output does not depend on the thread count. out must hold ws->max_spikes.
 */
bs_status bs_peel_batch(const bs_match_templates *t, const bs_pair_table *pt, float *X, size_t ldx,
                        int64_t n_t, int64_t t0_abs, int64_t c_begin, int64_t c_end,
                        const bs_peel_params *p, bs_peel_ws *ws, bs_spike *out, int64_t *n_out,
                        int *n_iter);

/*
 * Peeling windows: the memory of peeling is K x n_t scores, so a batch is
 * peeled in consecutive windows of `window` central samples (the last one
 * shorter), each with BS_PEEL_HALO(nt) = 2 nt samples of context on either
 * side where X has them; the workspace is sized for
 * bs_peel_window_n_t(window, nt) samples whatever the batch length.
 *
 * bs_peel_span peels the central part [c_begin, c_end) of X (C x n_t, row
 * stride ldx; absolute samples [t0_abs, t0_abs + n_t)) window by window, in
 * time order: each window's samples are copied to ws->Y and peeled there
 * (bs_peel_batch), and only the spikes it reports (those in its central part)
 * are then subtracted from X, in output order. The next window copies X after
 * that subtraction, so a spike whose waveform crosses a window edge is found
 * by the window that holds its trough, once, and its neighbour across the
 * edge sees it removed; a spike a window finds in its halo is neither
 * reported nor subtracted there. X ends as the residual of every reported
 * spike. Spikes go to out (sorted by time, then template), at most
 * bs_peel_span_max_spikes(ws, c_end - c_begin). Output does not depend on the
 * thread count.
 */
#define BS_PEEL_HALO(nt) (2 * (int64_t)(nt))
/* X[S_k, tc - nt_before + s] -= a W_k[., s] (X: n_chan x n_t, row stride ldx), the samples outside [0, n_t)
 * left out: a spike found elsewhere, subtracted from a window that holds part of it. */
void bs_peel_subtract(const bs_match_templates *t, float *X, size_t ldx, int64_t n_t, int k, int64_t tc, float a);
/* The order of a batch's spikes (qsort's comparator on bs_spike): time, then template, then amplitude. */
int bs_spike_cmp(const void *a, const void *b);
int64_t bs_peel_window_n_t(int64_t window, int nt);
/* The most spikes bs_peel_span reports for `span` central samples, with
 * windows of peel_n_t samples (halos included) and max_iter iterations; the
 * second form for a workspace's window and iterations. */
int64_t bs_peel_max_spikes(int64_t peel_n_t, int nt, int max_iter, int64_t span);
int64_t bs_peel_span_max_spikes(const bs_peel_ws *ws, int nt, int64_t span);
bs_status bs_peel_span(const bs_match_templates *t, const bs_pair_table *pt, float *X, size_t ldx, int64_t n_t,
                       int64_t t0_abs, int64_t c_begin, int64_t c_end, const bs_peel_params *p, bs_peel_ws *ws,
                       bs_spike *out, int64_t *n_out);

#endif
