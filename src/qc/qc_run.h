/*
 * qc_run.h - the state of one bs_qc_run shared by qc_run.c (folder, spikes,
 * recording passes), qc_units.c (PCA and per-unit metrics) and qc_write.c
 * (outputs). Internal to src/qc.
 */
#ifndef BS_QC_RUN_H
#define BS_QC_RUN_H

#include <stdint.h>

#include "../preprocess/preprocess.h"
#include "qc.h"
#include "qc_internal.h"

#define QC_AMP_FILE "spike_amplitudes_uv.npy" /* in OUT/.stages/qc: float32 (S,), µV */

/* A merge candidate (qc_merge.c): units a < b (indices). */
typedef struct {
    int a, b;
    double dist_um;        /* between the main channels */
    double similarity;     /* SpikeInterface's l1 template similarity, union of sparse channels */
    int64_t n_refractory;  /* cross-unit spike pairs within merge_rp_ms, farther apart than merge_censored_ms */
    int64_t n_window;      /* within merge_window_ms */
    double overlap;        /* presence overlap, 0..1 */
} qc_pair;

typedef struct {
    const char *dir;
    const bs_recording *rec;
    const bs_qc_params *p;
    double fs;               /* Hz */
    int C;                   /* channels */
    int64_t T;               /* recording length, samples */
    int64_t S;               /* spikes */
    int64_t t_first, t_last; /* first and last spike, samples */
    bs_phy_col times, clus;      /* spike_times.npy, spike_clusters.npy (or spike_templates.npy) */
    qc_groups groups;        /* cluster_group.tsv */
    /* units, ascending id */
    int K;
    int32_t *ids;            /* [K] cluster ids */
    int64_t *count;          /* [K] spikes */
    int32_t *lut;            /* [lut_n] id -> index (-1), or NULL: binary search */
    int32_t lut_n;
    /* waveform window and batches */
    int nbefore, nafter, nt; /* samples */
    int64_t nb, halo, width; /* batch, context each side, window = nb + 2 halo (samples) */
    bs_highpass hp;
    void *scratch;           /* preprocessing scratch */
    size_t scratch_bytes;
    /* per unit, from the templates */
    int64_t *m;              /* [K] subset spikes */
    int *main_ch;            /* [K] main channel (-1: no spikes) */
    int *shift;              /* [K] peak shift, samples */
    double *tamp;            /* [K] |template extremum| on the main channel, µV */
    int *n_sp;               /* [K] sparse channels */
    int *sp;                 /* [K * C] sparse channels of unit u: sp[u * C + j], ascending */
    double *noise;           /* [C] µV */
    /* random subset, in spike order */
    int64_t n_sel;
    int64_t n_sel_max;       /* sum over units of min(count, max_spikes_per_unit) */
    int64_t *sel_g;          /* global spike index */
    int64_t *sel_t;          /* sample */
    int32_t *sel_u;          /* unit index */
    int64_t *sel_off;        /* record offset in the spill file, floats */
    char stage[4200];        /* OUT/.stages/qc */
    char spill_path[4400];
    int spill_fd;            /* subset waveforms: per spike n_sp x nt floats, channel-major */
    /* results */
    double *metrics;         /* [K * BS_QC_N_METRICS] */
    int n_pairs;             /* merge candidates */
    qc_pair *pairs;
} qc_ctx;

int32_t qc_unit_index(const qc_ctx *c, int64_t id);
/* High-pass then median reference, in place, on a channel-major window. */
bs_status qc_preprocess(qc_ctx *c, float *x, int64_t n_t);
/* Subset spikes of the units whose main channel lies in unit u's sparsity (u included). */
int64_t qc_neighbourhood_points(const qc_ctx *c, int u);
/* PCA fit, projections and the PCA metrics (qc_units.c). */
bs_status qc_pca_metrics(qc_ctx *c);
/* Spike-train, amplitude, SNR and drift metrics per unit group (qc_units.c). */
bs_status qc_unit_metrics(qc_ctx *c);
/* Merge proposals (qc_merge.c): the candidates from the template sums of
 * pass A, their spike-timing evidence (one pass over the spikes), and the
 * decision on one candidate (1: proposed) with its derived evidence and the
 * reason. */
bs_status qc_merge_candidates(qc_ctx *c, const float *sum);
bs_status qc_merge_trains(qc_ctx *c);
int qc_merge_decide(const qc_ctx *c, const qc_pair *q, double *expected, double *ratio, double *amp_ratio,
                    const char **why);
/* qc/qc_metrics.tsv, cluster_<metric>.tsv, cluster_qc_label.tsv, cluster_unit_type.tsv, merge_proposals.tsv,
 * curation.json. */
bs_status qc_write_outputs(qc_ctx *c, bs_qc_summary *summary);

#endif
