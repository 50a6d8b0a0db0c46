/*
 * stage_finish.h - stages 6 and 7 of `boundsort sort`: CCG-guided merges,
 * duplicate removal, good/mua labels and the Phy folder, in memory that does
 * not grow with the recording.
 *
 * Why in src/cluster: the decisions this stage makes (which units merge, which
 * are shadows of another, which spikes are duplicates, good or mua) are the
 * last steps of clustering and use only src/cluster (merge.c, shadow.c,
 * ccg.c); the Phy folder itself is written by src/export/phy.h, so this file
 * only orders the spikes for it.
 *
 * Mechanism (the matched spikes are in .stages/match/, in time order):
 *   1. Trains: one pass counts each template's spikes, a second writes every
 *      spike's (time, index) into .stages/finish/trains.bin grouped by
 *      template (per-template write buffers of bounded total size).
 *   1b. Amplitude and feature splits (split.c): each template's train is
 *      read with its spikes' amplitudes; a template whose amplitudes have
 *      two modes (bs_amp_split) keeps its high part and gives its low part
 *      to a new template K + j with the same waveform (appended to
 *      .stages/finish/merged.bin like a merged train). A template with no
 *      amplitude split is read again with its spikes' pc features; one whose
 *      projections on their first principal axis have two modes
 *      (bs_feature_split) gives its smaller part to a new template whose
 *      waveform is that part's mean features. Each part is then tested
 *      once more by features (at most two cuts along a spike's path); the
 *      cuts are kept as rules (bs_split_rules), and the stream later walks
 *      each spike through its matching template's rules. From here on
 *      "template" means one of these K + S; spike_templates.npy keeps the
 *      matching template.
 *   1c. Template shadows: the shadow test of 2b on the templates' own
 *      trains; a template that shadows another's spikes loses those spikes
 *      from its train (rewritten to merged.bin), so that the merges judge its
 *      refractoriness on the spikes it keeps: a unit's fragment carrying
 *      another unit's shadows otherwise fails the refractory tests and stays
 *      a unit of its own (docs/ALGORITHM.md §9.5).
 *   2. Merges: bs_merge_ccg_store over a disk-backed train store: a train is
 *      read when a test needs it; a merged train is appended to
 *      .stages/finish/merged.bin. The result is, per template, its final unit
 *      and its total time shift.
 *   2b. Shadows and collision units, from the merged trains: which units
 *      cast spikes at a fixed lag after another's (bs_shadow_test), and
 *      which fire almost only together with a neighbour and beside a much
 *      larger, similar one (bs_mark_coincident, bs_collision_excess;
 *      docs/ALGORITHM.md §9.5, §9.7); then noise units, whose median
 *      amplitude is barely over the matching threshold and whose
 *      amplitudes pile up against it (§9.9): their trains' amplitudes read
 *      back by index.
 *   3. One streaming pass in time order: every spike's final time is its
 *      time plus its template's shift, so a small reorder buffer (spikes
 *      within the largest |shift| of the read frontier) restores the order by
 *      (final time, spike index) exactly; spikes outside the recording and
 *      template shadow spikes (tested on the templates' matched times, the
 *      last one of each template kept for the look-back), same-unit
 *      duplicates, unit shadow spikes and collision and noise units' spikes are
 *      dropped on the fly; the rest go to the Phy
 *      writer in blocks, with their amplitudes and PC features read back by
 *      index, their positions, per-template and per-unit amplitude sums, and
 *      each unit's autocorrelogram accumulated as a stream (bs_acg_stream),
 *      and their template features (match.h: projections on the nearest
 *      templates, from the PC features just read).
 *   4. Labels from the streamed autocorrelograms; templates and unit tables.
 *
 * RAM: O(K) per-template state (K units × 8 KiB of autocorrelogram counts),
 * the two largest trains the merge compares, and fixed blocks; never
 * O(spikes). The result is identical to dropping the template shadows,
 * merging, ordering and labelling the whole spike list in RAM (bs_merge_ccg, bs_spike_order,
 * bs_remove_duplicates, bs_cluster_labels; a test compares them).
 */
#ifndef BS_STAGE_FINISH_H
#define BS_STAGE_FINISH_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "cluster.h"
#include "../io/recording.h"
#include "../match/match.h"
#include "../preprocess/preprocess.h"

/* The parameters of the finishing stage (defaults in parentheses). */
typedef struct {
    double duplicate_ms;        /* same-unit spikes closer than this are duplicates, ms (0.25) */
    double label_acg_threshold; /* a unit is good when its autocorrelogram passes the refractory test at
                                   this bound (ccg.h), ratio (0.2) */
    bs_split_params split;      /* amplitude and feature splits before the merges (cluster.h); min_low_amp
                                   is set by the stage from the sort's matching threshold */
    bs_merge_params merge;      /* CCG-guided merges (cluster.h); max_lag in samples (0: nt/2); amp and
                                   fs_hz are set by the stage */
    double shadow_max_lag_ms;   /* lags examined for shadows, ms (0.5): shadow.max_lag at the recording's rate */
    double shadow_tail_max_lag_ms; /* lags examined for tail shadows, ms (2): shadow.tail_max_lag */
    double shadow_tail_spread_lag_ms; /* a tail shadow whole within this, ms (4): shadow.tail_spread_lag */
    bs_shadow_params shadow;    /* half_width (samples), min_count, min_fraction, min_ratio, max_rest,
                                   tail_max_amp, tail_spread_excess (cluster.h); max_lag, tail_max_lag and
                                   tail_spread_lag are set by the stage */
    bs_collision_params collision; /* units made of other units' overlapping spikes (cluster.h) */
    int n_template_features;    /* templates per spike in template_features.npy, Phy's template-feature
                                   view (32, as Kilosort 2 and 3; capped at the template count; 0: none) */
    double noise_median_of_threshold; /* a unit of the high tier half of whose spikes have amplitudes under
                                   this multiple of the matching threshold (1.2; 0: off)... */
    double noise_edge_ratio;    /* ...and whose amplitudes in the sixteenth of the threshold just above it
                                   outnumber those of the next sixteenth by more than this ratio (1; 0: the
                                   median alone) is made of noise crossings and removed (docs/ALGORITHM.md
                                   §9.9) */
    double noise_threshold;     /* the matching threshold, whitened units; set by the stage (0: no noise
                                   units) */
} bs_finish_params;

void bs_finish_default_params(bs_finish_params *p);
/* p->shadow with its lags in samples at fs_hz (sp may be NULL: the check
 * alone); BS_ERR_USAGE naming the parameter when a lag is over
 * BS_SHADOW_MAX_LAG samples. The plan calls it, so a run is refused before
 * it starts. */
bs_status bs_finish_shadow_params(const bs_finish_params *p, double fs_hz, bs_shadow_params *sp);

typedef struct {
    const bs_recording *rec;
    const char *stage_dir;        /* OUT/.stages: reads match/, writes finish/ */
    const char *out_dir;          /* the Phy folder */
    const bs_whitener *wh;        /* for whitening_mat(_inv).npy */
    const bs_match_templates *mt; /* the matching templates */
    const int32_t *pc_chan;       /* K × n_pc_chan channels of each template's pc features */
    int n_pc_chan;
    const bs_finish_params *fp;   /* merges, shadows, duplicates, labels */
    const uint8_t *low_tier;      /* K: 1 for a template of the low tier, whose own matching threshold is
                                     lower: its units are not tested as noise units (NULL: none) */
    const float *threshold;       /* K: each template's matching threshold, whitened units (bs_match_thresholds;
                                     NULL: none of the low tier); a low-tier unit whose amplitudes pile at
                                     its own loses the pile as noise (bs_threshold_pile) */
    int quiet;
    /* called once the splits ran, with the template count after them, before the templates' waveforms
       (which it sizes) are allocated: the caller re-plans (NULL: none) */
    bs_status (*splits_done)(void *arg, int K1);
    void *splits_arg;
} bs_finish_input;

/* Bytes the stage allocates for K templates of n_sup channels, K1 of them
 * after the splits (at most 2K; 2K when not yet known), besides the trains
 * the merge holds (2 × 32 bytes per spike of the two largest units
 * compared). */
size_t bs_finish_bytes(int K, int K1, int nt, int n_sup, int n_chan, int n_pc, int n_pc_chan, int n_tf);
/* Template features per spike for K templates: n_template_features capped at K. */
int bs_finish_n_tf(const bs_finish_params *p, int K);

bs_status bs_finish_run(const bs_finish_input *in, int *n_units, int64_t *n_spikes);

#endif
