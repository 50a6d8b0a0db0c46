/*
 * stage_cluster.h - the clustering stage of `boundsort sort`
 * (stage_cluster.c; its entry in the table of stages is bs_cluster_stage,
 * src/pipeline/stages.h): detected spikes, per spatial center, to the
 * templates the matching stage peels with.
 */
#ifndef BS_STAGE_CLUSTER_H
#define BS_STAGE_CLUSTER_H

#include <stdint.h>

#include "cluster.h"

/* Learned templates for matching: channel-sparse, low-rank on the temporal
 * basis (match.h). */
typedef struct {
    int K;            /* templates */
    int n_sup;        /* channels per template */
    int P;            /* temporal PCs per channel */
    int32_t *support; /* K × n_sup probe channels, ascending (released once the matcher has its copy) */
    float *U;         /* K × n_sup × P weights, whitened units (likewise) */
    int64_t *n_spikes; /* K: spikes of the cluster each template was learned from (after the center's cap); the
                          matcher keeps the pair rows of the busiest (match.h, bs_pair_table_keep) */
    uint8_t *low_tier; /* K: 1 for a template of the low tier's clusters (detect.h, th_low) */
} bs_learned_templates;

void bs_learned_templates_free(bs_learned_templates *lt);

/* The two tiers' clusters of one center (docs/ALGORITHM.md §7.7): a low-tier cluster like a high-tier one
 * (cosine of the mean features >= max_cos) is the tail of that unit's amplitudes: its spike count is set to
 * 0, so that it makes no template. When it holds at least majority times the high-tier cluster's spikes
 * (majority > 0) and its mean features' norm is at least min_norm (whitened units: the acceptance rule's
 * floor, so that it can make a template), the unit is mostly under th_universal and the high-tier cluster's
 * count is set to 0 instead: the unit's template is the low tier's. */
void bs_drop_low_tier_copies(bs_center_templates *hi, bs_center_templates *lo, double max_cos, double majority,
                             double min_norm);

#endif
