/*
 * stages.c - the order of the stages (see stages.h).
 */
#include "stages.h"

const bs_stage *const bs_stages[] = {&bs_channels_stage, &bs_preprocess_stage, &bs_whitening_stage, &bs_drift_stage, &bs_basis_stage, &bs_detect_stage,
                                     &bs_cluster_stage,   &bs_match_stage, &bs_finish_stage};
const int bs_n_stages = (int)(sizeof bs_stages / sizeof bs_stages[0]);
