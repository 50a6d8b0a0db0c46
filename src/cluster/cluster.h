/*
 * cluster.h - clustering per spatial center and the merges, shadows and
 * labels of the finishing stage (docs/ALGORITHM.md §7 and §9).
 *
 * Three layers:
 *
 * 1. Per-center graph clustering (graph.c), docs/ALGORITHM.md §7.3–7.4, on one
 *    center's feature matrix X (n spikes × D float32):
 *    - landmarks = every `downsampling`-th spike, thinned evenly to at most
 *      `max_subset`;
 *    - exact kNN from every spike to the landmarks (squared L2 as
 *      ‖x‖² + ‖l‖² − 2·x·l in float32, the dot products from sgemm on blocks
 *      of spikes so that scratch stays bounded); ties go to the smaller
 *      landmark index;
 *    - orphan landmarks (a center of at most orphan_max_landmarks regular
 *      ones): a unit of fewer spikes than a few strides has no landmark of
 *      its own, and its spikes would join other units' landmarks. A spike
 *      whose k-th nearest landmark is over orphan_factor times the
 *      center's median of that distance is an orphan; the first orphans in
 *      spike order (as many as the regular landmarks, at most) that have at
 *      least orphan_min_group others closer than half their own k-th
 *      distance (a compact group, not a big unit's scattered tail) are
 *      appended to the landmarks, and the kNN is done again;
 *    - bipartite graph spike→landmark (a landmark's edge to its own spike is
 *      ignored for the degrees m, ki, kj and the tree);
 *    - greedy k-means++-like initialisation into ≤ n_init clusters (seeded;
 *      candidate draws from the unexplained variance; a candidate's dot
 *      products with every spike, summed in the order of the features by
 *      the code's own kernel, are computed once and cached), then alternating
 *      landmark / spike assignment sweeps maximising
 *      edges − (lam/m)·degree·cluster size, until nothing changes or n_iter;
 *    - agglomerative tree over the graph clusters: greedily merge the pair
 *      with the largest observed/expected edge ratio;
 *    - from the root down: a merge whose ratio is < modularity_split stays
 *      split; one whose two sides are cross-refractory (ccg.h, when spike
 *      times are given) is collapsed; otherwise a class-balanced regularised
 *      linear discriminant projects both sides and the smoothed histogram's
 *      dip score decides (< bimodality_merge collapses).
 *    Centers with fewer than min_spikes spikes become one cluster. Labels are
 *    0..L−1 in order of each cluster's first spike.
 *
 * 2. Centers (centers.c): detected spikes (grid positions) are grouped into
 *    spatial centers, per shank (never mixing shanks): y-centers every
 *    2·dmin µm from the shank's lowest grid row, x-centers one per shank when
 *    its positions span ≤ 2·x_step µm horizontally, else every x_step µm.
 *    Each grid position belongs to the nearest center of its shank. A
 *    center's channels are the union (ascending) of its positions' channel
 *    lists. The caller streams: it hands one center's spikes (times, grid
 *    positions, features) and gets labels and templates back; RAM is
 *    O(one center), given by bs_cluster_center_bytes().
 *    Templates: the mean feature over a cluster's spikes on the union
 *    channels, and its waveform wave[c,u] = Σ_p feat[c,p]·wpca[p,u]. The
 *    support of a template is the union channels of its center (all of
 *    them: the mean is non-zero only there); its peak channel is the one
 *    with the largest waveform L2 norm (smaller index on ties).
 *
 * 3. Merges after template matching (merge.c), docs/ALGORITHM.md §9.2–9.6:
 *    template similarity (max over lags of the normalised cross-correlation
 *    of channel-sparse waveforms), CCG-guided merges with time alignment,
 *    same-cluster duplicate removal, good/mua labels.
 *
 * 4. Shadows (shadow.c). Peeling subtracts a unit's template, not its exact
 *    waveform; the residual of a large unit's spike can pass the matching
 *    threshold for a smaller, overlapping template a fixed fraction of a
 *    millisecond later or earlier, on a large share of the large unit's
 *    spikes. Those spikes are copies, not firings: no neuron fires at one
 *    exact lag after another on a tenth of its spikes. bs_shadow_test takes
 *    the lag from each spike of B to the nearest spike of A (|lag| <=
 *    max_lag), finds the window of 2·half_width + 1 lags that holds the most,
 *    and calls B a shadow of A at that lag when the window holds at least
 *    min_count spikes, min_fraction of B's spikes and min_ratio times what
 *    two independent trains would put there (na·nb·width / n_samples). The
 *    caller then drops the spikes of B that lie in that window of an A spike
 *    (finish.c), and keeps B's other spikes. A template window shorter than
 *    A's waveform leaves the rest of the waveform unsubtracted: those
 *    residuals come up to a waveform's length from A's spike, and are small
 *    beside A. So a unit B of at most tail_max_amp of A's mean amplitude is
 *    examined at lags up to tail_max_lag (a tail shadow); a neighbour that
 *    really fires at such a lag after A is a neuron of its own size, which
 *    the amplitude bound keeps. Such a residual is a slow wave, matched at
 *    lags spread over the tail rather than at one: a tail shadow B is also
 *    one whole when its spikes within tail_spread_lag of A's, at any lags,
 *    exceed chance by tail_spread_excess (bs_collision_excess below).
 *
 * 5. Collisions (shadow.c; docs/ALGORITHM.md §9.7). A template learned where
 *    two units overlapped fires almost only when a unit beside it fires.
 *    bs_mark_coincident marks a train's spikes that have a spike of another
 *    train within ±w (O(n + m), both ascending); bs_collision_excess turns the
 *    marked share f into its excess over the share f0 an independent train
 *    would have, (f − f0) / (1 − f0). The finish stage drops the spikes of a
 *    unit whose excess against its neighbours is high and which has a much
 *    larger, similar neighbour.
 *
 * Determinism: fixed seeds, integer counts or fixed-order double sums for
 * every reduction; OpenMP loops only over independent items. The output is
 * identical for any thread count.
 */
#ifndef BS_CLUSTER_H
#define BS_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../detect/detect.h"
#include "../io/recording.h"
#include "ccg.h"

typedef struct {
    int n_neighbors;        /* k of the kNN graph (10) */
    int downsampling;       /* every k-th spike is a landmark (20) */
    int max_subset;         /* cap on landmarks per center (25000) */
    int n_init;             /* clusters of the initialisation (200) */
    int n_init_candidates;  /* candidates drawn per greedy step (100) */
    int n_iter;             /* maximum assignment sweeps (200) */
    double lam;             /* modularity penalty (1) */
    int64_t min_spikes;     /* centers with fewer spikes become one cluster (200: 10 landmarks, as many
                             * as the neighbours; Kilosort 4 uses 1000, which lumps every unit of a
                             * sparse center together in short recordings. 400 lost 4 of 17 SNR >= 5
                             * units of a 60 s drifting case (bench/README.md, "Small centers")) */
    double modularity_split; /* tree ratio below which a split is kept (0.2) */
    double bimodality_merge; /* dip score below which the sides collapse (0.6) */
    double ridge;           /* regulariser of the discriminant (0.01) */
    double ccg_threshold;   /* R12 bound of the cross-refractory test (0.25) */
    int refractory_test;    /* 1: collapse cross-refractory sides when times are given */
    double fs_hz;           /* sampling rate for spike times, Hz */
    uint64_t seed;          /* initialisation seed (5) */
    double dmin_um;         /* vertical contact spacing, µm (0 = median spacing of the probe) */
    double x_step_um;       /* horizontal spacing of x-centers on wide shanks, µm (200) */
    double orphan_factor;   /* a spike whose k-th nearest landmark is farther than this times the center's
                               median of that distance is an orphan (2; 0: no orphan landmarks) */
    int orphan_min_group;   /* an orphan with at least this many other orphans closer than half its k-th
                               landmark distance becomes a landmark (12) */
    int64_t orphan_max_landmarks; /* only centers with at most this many regular landmarks get them (80) */
    int64_t par_min_work;   /* loops of fewer operations run on one thread (2^20); results never
                               depend on it nor on the thread count (tests set 0 to force threads) */
    int64_t init_cache_floats; /* the greedy initialisation keeps the rows of its candidates in at most this
                                  many floats (8 Mi: 32 MiB; all n·n of a center of up to 2,896 spikes); results
                                  never depend on it (tests set it small) */
} bs_cluster_params;

void bs_cluster_default_params(bs_cluster_params *p);

/* ---- 1. per-center clustering ---- */

/* Landmark count for n spikes. */
int64_t bs_cluster_n_landmarks(int64_t n, const bs_cluster_params *p);
/* Spikes per kNN block (the sgemm block is rows × landmarks float32, ≤ 16 MiB). */
int64_t bs_cluster_knn_block_rows(int64_t n_landmarks);

/* Exact kNN: for each of n rows of X (n × D), the k nearest of the m rows of
 * L (m × D) by squared L2 (float32 formula above), ascending (distance,
 * index). kn: n × k int32, dist (optional): n × k float32. k <= m. Scratch
 * under "cluster/knn" = bs_cluster_knn_scratch_bytes(n, m, D). */
bs_status bs_cluster_knn(const float *X, int64_t n, int D, const float *L, int64_t m, int k, int32_t *kn,
                         float *dist);
size_t bs_cluster_knn_scratch_bytes(int64_t n, int64_t m, int D);

/* Peak bytes bs_cluster_graph allocates for n spikes of D features
 * (tags "cluster/graph" and "cluster/knn"), X and labels not included. */
size_t bs_cluster_graph_bytes(int64_t n, int D, const bs_cluster_params *p);

/* Cluster one center: X n × D (row-major float32), t (optional, n sample
 * times at p->fs_hz, any order) for the refractory test; labels[n] out,
 * *n_labels = L. The discriminant replaces the last feature column by a bias
 * (as Kilosort does), so D >= 2; n < min_spikes or D < 2 gives one cluster. */
bs_status bs_cluster_graph(const bs_cluster_params *p, const float *X, int64_t n, int D, const int64_t *t,
                           int32_t *labels, int *n_labels);

/* The bimodality score (docs/ALGORITHM.md §7.4) for rows with side[i] = +1 (A) / -1 (B) / 0
 * (ignored); exposed for tests. Returns BS_OK and *score in [0, 1]. */
bs_status bs_cluster_bimodality(const float *X, int64_t n, int D, const int8_t *side, double ridge, double *score);

/* ---- 2. centers ---- */

typedef struct {
    int n_centers;
    int *shank;       /* [n_centers] */
    float *x_um;      /* [n_centers] center x, µm */
    float *y_um;      /* [n_centers] center y (depth), µm */
    int n_pos;        /* grid positions */
    int *pos_center;  /* [n_pos] center of each grid position */
    int64_t *chan_off; /* [n_centers + 1] offsets into chans */
    int *chans;       /* union channels of each center, ascending probe channel ids */
} bs_cluster_centers;

bs_status bs_centers_build(const bs_probe *probe, const bs_detect_grid *g, const bs_cluster_params *p,
                           bs_cluster_centers *c);
void bs_centers_free(bs_cluster_centers *c);
static inline int bs_center_n_chans(const bs_cluster_centers *c, int k)
{
    return (int)(c->chan_off[k + 1] - c->chan_off[k]);
}

/* Templates of one center's clusters (small: L × n_chans × (P + nt)). */
typedef struct {
    int n_clusters;    /* L */
    int n_chans;       /* support channels per template (the center's union) */
    int n_pcs, nt;
    int *chans;        /* [n_chans] probe channel ids (shared by all L templates) */
    int64_t *n_spikes; /* [L] */
    int *peak_chan;    /* [L] probe channel id with the largest waveform norm */
    float *feat;       /* [L × n_chans × n_pcs] mean features, whitened units */
    float *wave;       /* [L × n_chans × nt] waveform, whitened units */
} bs_center_templates;

void bs_center_templates_free(bs_center_templates *t);

/* Peak bytes bs_cluster_center needs for a center of n spikes and n_chans
 * union channels (features D = n_chans·n_pcs): the feature matrix, the
 * labels, and bs_cluster_graph_bytes; the templates are O(L) extra. */
size_t bs_cluster_center_bytes(int64_t n, int n_chans, int n_pcs, const bs_cluster_params *p);

/* Cluster the spikes of center k: spk[n] (their pos must belong to k),
 * feat [n × g->n_chans × n_pcs] as in bs_detect_output. labels[n] out. */
bs_status bs_cluster_center(const bs_cluster_params *p, const bs_cluster_centers *c, int k,
                            const bs_detect_grid *g, const bs_temporal_basis *b, const bs_detected_spike *spk,
                            const float *feat, int64_t n, int32_t *labels, bs_center_templates *out);

/* ---- 3. merges, duplicates, labels ---- */

/* Channel-sparse waveform templates: template j lives on chans[off[j]..off[j+1])
 * with wave [n_sup_j × nt] starting at wave + off[j]·nt. */
typedef struct {
    int K, nt;
    int64_t *off;   /* [K + 1] */
    int *chans;     /* [off[K]] probe channel ids, ascending within each template */
    float *wave;    /* [off[K] × nt] whitened units */
} bs_sparse_templates;

bs_status bs_sparse_templates_alloc(bs_sparse_templates *T, int K, int nt, const int *n_sup);
void bs_sparse_templates_free(bs_sparse_templates *T);

/* max_{|τ| ≤ max_lag} Σ_c Σ_u a[c,u]·b[c,u+τ] / (‖a‖·‖b‖) over common
 * channels; *lag = the best τ (smallest |τ|, then negative first, on ties):
 * b is a delayed by τ samples. */
double bs_template_similarity(const bs_sparse_templates *T, int a, int b, int max_lag, int *lag);

typedef struct {
    double r_thresh;      /* similarity needed to test a pair (0.5) */
    double acg_threshold; /* 0.2 */
    double ccg_threshold; /* 0.25 */
    double r_thresh_underpowered; /* similarity that merges without CCG evidence when the CCG cannot give any (0.8) */
    double ccg_threshold_underpowered; /* R12 bound of that rule, a ratio of rates: the central window's over
                                          the baseline's (0.45; on the bench cases one unit's pieces with a few
                                          other cells' spikes reached 0.34, two units 0.58) */
    const double *amp;    /* [K] mean spike amplitude per template (any unit, e.g. whitened); NULL: that rule off */
    double max_amp_ratio; /* with amp: a pair whose mean amplitudes differ by more than this factor does not
                             merge on its cross-correlogram (3; 0: no bound): matching masks a small unit's
                             spikes under a large one's, a dip that is not refractoriness */
    double max_time_overlap; /* two trains whose spike times overlap at most this much (histogram intersection
                                over 20 bins of their common span) merge at r_thresh_underpowered whatever
                                their correlogram and amplitudes: pieces of one unit split by drift state fire
                                in different periods (0.3; 0: off) */
    int max_lag;          /* lags searched, samples (nt/2 when 0) */
    double max_rate_hz;   /* a train of more than max_rate_hz x duration_s spikes, or a merge that would make
                             one, takes no part in merges: no neuron fires that fast on average, and the two
                             trains a merge compares stay bounded (100 Hz; 0: no limit) */
    double duration_s;    /* the recording's length, s (0: no limit) */
    double fs_hz;
} bs_merge_params;

/* The overlap in time of two spike trains (times ascending): the histogram
 * intersection sum_b min(n_a,b / n_a, n_b,b / n_b) over 20 equal bins of the
 * span from the earlier first spike to the later last one; 1 when either is
 * empty. Drift's pieces of one unit score near 0, trains firing all along
 * near 1. */
double bs_time_overlap(const int64_t *a, int64_t na, const int64_t *b, int64_t nb);

void bs_merge_default_params(bs_merge_params *p, double fs_hz);

/* CCG-guided merge (docs/ALGORITHM.md §9.3). t[n] sample times (sorted ascending), clu[n]
 * cluster ids 0..K−1, T the K templates with n_spikes from the counts of clu.
 * Merged clusters' spikes are shifted in time to the surviving template and
 * relabelled; templates become spike-count-weighted means on the union of
 * supports. On return clu holds consecutive ids 0..K'−1 (in order of the
 * surviving old ids), T holds the K' templates, t the aligned times (the
 * caller re-sorts with bs_spike_order when it needs time order). */
bs_status bs_merge_ccg(const bs_merge_params *p, int64_t *t, int32_t *clu, int64_t n, bs_sparse_templates *T,
                       int *n_merges);

/* Where bs_merge_ccg_store finds the spike trains: get() returns cluster k's
 * spike times (ascending) and their original spike indices (the tie-break:
 * equal times order by index), valid until the next get() with the same
 * slot (0 or 1); put() replaces k's train by the merged list (times already
 * shifted) after j merged into it, and empties j's. */
typedef struct {
    bs_status (*get)(void *ctx, int k, int slot, const int64_t **t, const int64_t **idx, int64_t *n);
    bs_status (*put)(void *ctx, int k, int j, const int64_t *t, const int64_t *idx, int64_t n);
    int64_t (*count)(void *ctx, int k); /* spikes of k's train, without reading it */
    void *ctx;
} bs_train_store;

/* The most spikes of a train that bs_merge_ccg_store reads or makes (INT64_MAX: no limit). */
int64_t bs_merge_max_train(const bs_merge_params *p);

/* The merge of bs_merge_ccg over a train store (RAM or disk): T becomes the
 * K' surviving templates; for every original cluster k, shift[k] is the
 * total time shift of its spikes (samples) and final_id[k] its surviving id
 * (0..K'-1). So a spike of k at t ends at t + shift[k] in final_id[k]. */
bs_status bs_merge_ccg_store(const bs_merge_params *p, bs_train_store *ts, bs_sparse_templates *T, int64_t *shift,
                             int32_t *final_id, int *n_merges);

/* Stable order of spikes by time (then original index): perm[n]. */
bs_status bs_spike_order(const int64_t *t, int64_t n, int64_t *perm);

/* Duplicate removal (docs/ALGORITHM.md §9.4): keep[i] = 1 unless a kept spike of the same
 * cluster lies less than dup_samples earlier. t sorted ascending. Returns
 * the number kept in *n_kept. */
bs_status bs_remove_duplicates(const int64_t *t, const int32_t *clu, int64_t n, int K, int64_t dup_samples,
                               uint8_t *keep, int64_t *n_kept);

/* good/mua (docs/ALGORITHM.md §9.6): good[k] = ACG test, contam[k] = R12 (0 for clusters with
 * ≤ 10 spikes, which are mua). t sorted ascending. */
bs_status bs_cluster_labels(const int64_t *t, const int32_t *clu, int64_t n, int K, double fs_hz,
                            double acg_threshold, uint8_t *good, double *contam);

/* ------------------------------------------------------------- shadows */

typedef struct {
    int max_lag;         /* lags examined, samples (0.5 ms) */
    int half_width;      /* the lag window is 2·half_width + 1 samples (2) */
    int64_t min_count;   /* spikes in the window (20) */
    double min_fraction; /* of B's spikes in the window (0.05) */
    double min_ratio;    /* window count over chance (10) */
    int64_t max_rest;    /* a shadow unit with at most this many spikes outside the window is removed whole (10) */
    int tail_max_lag;    /* lags examined when B is a tail shadow (tail below), samples (2 ms) */
    double tail_max_amp; /* B is a tail shadow of A when B's mean amplitude is at most this fraction of A's
                            (0.2; 0: never) */
    int tail_spread_lag;       /* a tail shadow whole: B's spikes within this of an A spike, samples (4 ms) */
    double tail_spread_excess; /* ... at this excess over chance or more (bs_collision_excess; 0.8; 0: never) */
} bs_shadow_params;

/* The longest lag bs_shadow_test examines, samples (its lag histogram of
 * 2·BS_SHADOW_MAX_LAG + 1 bins lives on the stack): 136 ms at 30 kHz.
 * Callers refuse longer max_lag or tail_max_lag up front
 * (bs_finish_shadow_params). */
#define BS_SHADOW_MAX_LAG 4095

void bs_shadow_default_params(bs_shadow_params *p, double fs_hz);

/* 1 when train B (tb, ascending) is a shadow of train A (ta, ascending) in a
 * recording of n_samples: *lag is the centre of the window (B time minus A
 * time, samples), *count the B spikes in it (both set either way). tail:
 * B's mean amplitude is at most p->tail_max_amp of A's (bs_shadow_is_tail),
 * and lags up to p->tail_max_lag are examined (where that is longer); a tail
 * shadow is also one whole (*count = nb, *lag 0) when B's spikes within
 * p->tail_spread_lag of an A spike, at any lags, are at least min_count and
 * their excess over chance (bs_collision_excess) at least
 * p->tail_spread_excess: the residual of a waveform longer than the
 * template, matched at lags spread over the tail. A lag bound over
 * BS_SHADOW_MAX_LAG (or negative) finds no shadow. */
int bs_shadow_test(const bs_shadow_params *p, const int64_t *ta, int64_t na, const int64_t *tb, int64_t nb,
                   int64_t n_samples, int tail, int *lag, int64_t *count);

/* 1 when a unit of mean amplitude amp_b may be a tail shadow of one of mean amplitude amp_a. */
int bs_shadow_is_tail(const bs_shadow_params *p, double amp_a, double amp_b);

/* ------------------------------------------------------------ amplitude splits */

/* A template's matched spikes split in two by amplitude or by features (split.c; docs/ALGORITHM.md §9.8). */
typedef struct {
    double min_dprime;           /* separation of the two parts' log amplitudes that splits (4) */
    int64_t min_spikes;          /* spikes in each part, at least (20) */
    double min_fraction;         /* share of the template's spikes in each part, at least (0.05) */
    double low_amp_of_threshold; /* the low part's median amplitude, at least this times the matching
                                    threshold (1.375) */
    double min_low_amp;          /* that bound in whitened units; set by the stage */
    int noise_cut;               /* 1: a cut whose low part's median is under min_low_amp is made (a noise
                                    cut) and that part removed as noise crossings (1) */
    int high_own;                /* 1: the caller gives a smaller high part a waveform of its own (its mean
                                    features), and the time rule is waived for such a cut; set by the stage */
    double max_time_ks;          /* the two parts' spike times: Kolmogorov–Smirnov distance at most (0.3) */
    double noise_min_overlap;    /* a noise cut's parts' spike times: bs_time_overlap at least (0.5) */
    double burst_min_ms;         /* a noise cut keeps a low-part spike that comes at least this long ... (2) */
    double burst_max_ms;         /* ... and at most this long after the latest high-part spike of its train:
                                    a burst's later, smaller spikes (15; 0: none kept), ms */
    double burst_min_ratio;      /* ... when the low part has at least this many times the spikes in those
                                    windows that chance would put there, and at least 3 (4) */
    double feature_min_dprime;   /* separation of the two parts along the spikes' first principal axis of
                                    features that splits a template no amplitude split took (5; 0: off) */
    double pile_ratio;           /* a low-tier unit's amplitudes pile at its own threshold when a valley
                                    between the threshold and their mode is this many times under both:
                                    its spikes under the valley are removed (bs_threshold_pile; 1.5; 0: off) */
} bs_split_params;

void bs_split_default_params(bs_split_params *p);

/* Bytes of work bs_amp_split needs per spike. */
size_t bs_split_bytes_per_spike(void);

/* 1 when the n spikes (amplitudes amp, times t ascending) of one template
 * split in two: the spikes with amplitude >= *thr form the high part; 2 when
 * the cut passes every rule but the low part's median is under min_low_amp
 * and p->noise_cut is set (a noise cut: the low part is the threshold's noise
 * crossings); else 0. *dprime is the best cut's separation (0 when none was
 * scored). work holds n × bs_split_bytes_per_spike() bytes. */
int bs_amp_split(const bs_split_params *p, const float *amp, const int64_t *t, int64_t n, void *work, float *thr,
                 double *dprime);

/* A low-tier unit's noise crossings (docs/ALGORITHM.md §9.9): its amplitudes
 * counted in sixteenths of its matching threshold th, from th to 3 th.
 * bs_pile_count adds n amplitudes to c (BS_PILE_BINS counts). */
#define BS_PILE_BINS 32
void bs_pile_count(const float *amp, int64_t n, float th, int64_t *c);

/* 1 when those counts c pile up at th: the first sixteenth c[0] and the
 * highest later one (the mode) are each at least p->pile_ratio times the
 * lowest sixteenth between them (the valley), by at least three standard
 * deviations of the two counts (|c - c_valley| >= 3 sqrt(c + c_valley)), and
 * c[0] holds at least p->min_spikes. *cut is then the valley's lower edge:
 * the amplitudes under it are the threshold's noise crossings, those over it
 * the unit's. 0 with p->pile_ratio 0. */
int bs_threshold_pile(const bs_split_params *p, const int64_t *c, float th, float *cut);

/* A spike's feature vector f (D values) projected on the axis v: the one
 * computation the split and the finish stage's stream both use, so that a
 * spike lands on the same side in each. */
float bs_feature_projection(const float *f, const float *v, int D);

/* Bytes of work bs_feature_split needs for n spikes of D features. */
size_t bs_feature_split_bytes(int64_t n, int D);

/* The n spikes (features f, n × D; times t ascending) of one template split
 * along their first principal axis of features: the projections
 * bs_feature_projection(f_i, v) are cut by the rules of bs_amp_split (on the
 * values themselves, bound feature_min_dprime, no low-part bound). On a split
 * (*split = 1) the axis v (D) is turned so that the smaller part is the one
 * under *thr (*n_low spikes). work holds bs_feature_split_bytes(n, D) bytes.
 * Fails only if the eigen-decomposition does. */
bs_status bs_feature_split(const bs_split_params *p, const float *f, int D, const int64_t *t, int64_t n, void *work,
                           float *v, float *thr, int64_t *n_low, double *dprime, int *split);

/* The splits of one finish stage as rules. Rule r (0..n) cut template
 * from's train and made template K + r of its spikes whose value is under
 * thr[r]: their amplitude (kind 0), or their features' projection on fv[r]
 * (kind 1, bs_feature_projection); or, kind 2, of those whose amplitude is at
 * or over thr[r] (an amplitude cut whose high part is the smaller). A
 * template's rules chain in the order they were made (first[k], next[r]), so
 * a template's later rule cuts what its earlier ones left, and a made
 * template's rules cut what it received. */
typedef struct {
    int K, n;       /* matching templates; rules made (at most K) */
    int32_t *first; /* [2K] a template's first rule, -1: none */
    int32_t *next;  /* [K] the same template's next rule, -1: none */
    float *thr;     /* [K] the cut: amplitude (whitened units) or projection */
    uint8_t *kind;  /* [K] 0: by amplitude, the low part made; 1: by features; 2: by amplitude, the high part */
    float *fv;      /* [K x D] a feature rule's axis */
    float *fmean;   /* [K x D] a kind 1 or 2 rule's split-off part's mean features (set by the caller) */
    uint8_t *noise; /* [K] 1: a noise cut (kind 0), whose low spikes in a burst stay (bs_noise_cut_stays);
                       NULL: none */
    int64_t burst_lo, burst_hi; /* that burst window after the train's latest high spike, samples (hi 0: off) */
    int64_t n_samples;          /* the recording's length, samples (bs_noise_cut_bursts: the windows' share) */
    int64_t *last_hi; /* [K] the walk's state: each noise rule's latest high spike, INT64_MIN before any */
} bs_split_rules;

/* No rules yet: first[0..2K) = -1, n = 0. */
void bs_split_rules_clear(bs_split_rules *R);

/* Add a rule to template k's chain (k < K + n; the caller holds n < K):
 * kind, cut thr and, for a feature rule, axis v (D, copied). Returns the
 * template it makes, K + r. */
int32_t bs_split_rules_add(bs_split_rules *R, int32_t k, int kind, float thr, const float *v, int D);

/* A spike at sample t reaching a noise cut: 1 when it stays on the train: it is of the high part (then
 * *last_hi = t), or of the low part at lo..hi samples (inclusive) after *last_hi, the latest high spike
 * before it (INT64_MIN: none; hi 0: no low spike stays). A burst's later spikes are smaller (the cell's
 * sodium channels have not recovered) and come a few ms after its first; the threshold's crossings of the
 * background come at any time. The split and the walk both decide with it, over the same train in time
 * order. */
int bs_noise_cut_stays(int64_t *last_hi, int64_t t, int high, int64_t lo, int64_t hi);

/* 1 when a noise cut of the n spikes (times t ascending, amplitudes a) at thr keeps its low spikes in bursts:
 * the low spikes that bs_noise_cut_stays keeps are at least 3 and at least min_ratio times what chance
 * would put in the windows (the low spikes times the share of the n_samples the windows after the high
 * spikes cover). A unit that bursts has many more there; a template whose unit fires fast has its windows
 * cover much of the recording, and the background's crossings in them are no burst. */
int bs_noise_cut_bursts(const int64_t *t, const float *a, int64_t n, float thr, int64_t lo, int64_t hi,
                        int64_t n_samples, double min_ratio);

/* 1 when rule r takes a spike of value x (its amplitude, or its features' projection on fv[r] for a feature
 * rule) at sample t: x under thr[r] (kind 2: at or over it), except that a noise cut with a burst window
 * (noise[r]; *last: the train's latest high spike, walked in time order from INT64_MIN) leaves the low spikes
 * that bs_noise_cut_stays keeps. The split that makes the rule and the walk decide with it. */
int bs_split_rule_takes(const bs_split_rules *R, int32_t r, float x, int64_t t, int64_t *last);

/* The template (0..K + n) of a spike of matching template k at sample t, amplitude amp and pc features f
 * (D; read only by a feature rule): k's rules in order until the spike falls under one, then that rule's
 * template's rules, and so on. Spikes are walked in time order when a rule is a noise cut with a burst
 * window (R->noise, R->last_hi). */
int32_t bs_split_rules_walk(const bs_split_rules *R, int32_t k, int64_t t, float amp, const float *f, int D);

/* ------------------------------------------------------------ collisions */

typedef struct {
    double window_ms;   /* coincidence window, ± ms (2) */
    double radius_um;   /* neighbours: peak channels at most this far apart, µm (100) */
    double min_excess;  /* coincidences above chance, (f − f0) / (1 − f0), that make a collision unit (0.3;
                           above 1: never) */
    double count_ratio; /* a collision unit has a similar neighbour with at least this many times its
                           spikes (2) */
} bs_collision_params;

void bs_collision_default_params(bs_collision_params *p);

/* hit[i] = 1 for every spike i of t (ascending, n) with a spike of o (ascending, m) at o[j] + off within
 * [t[i] − w, t[i] + w]; other entries are left as they are. O(n + m). */
void bs_mark_coincident(const int64_t *t, int64_t n, const int64_t *o, int64_t m, int64_t off, int64_t w,
                        uint8_t *hit);

/* The excess of coincidences over chance: (f − f0) / (1 − f0) with f = n_hit / n, the share of a unit's n
 * spikes with a neighbour's spike within ±w samples, and f0 = 1 − exp(−n_nb (2w + 1) / n_samples), that
 * share for a train independent of the neighbours' n_nb spikes. −1 when n or n_samples is 0 or f0 = 1. */
double bs_collision_excess(int64_t n_hit, int64_t n, int64_t n_nb, int64_t w, int64_t n_samples);

#endif
