/*
 * stages.h - the table of stages of `boundsort sort`, in run order
 * (docs/ARCHITECTURE.md). Each entry is a bs_stage (stage.h) defined in the
 * stage's own folder; this table is the one place that orders them, and
 * plan, sort, resume, the run summary and OUT/params.json all walk it.
 *
 * Adding a stage: write its bs_stage in its folder (name, plan, run, load,
 * checkpoint files, parameter groups), declare it here and put it in the
 * table at its place in the order.
 */
#ifndef BS_STAGES_H
#define BS_STAGES_H

#include "stage.h"

extern const bs_stage bs_channels_stage;  /* src/preprocess/stage_channels.c */
extern const bs_stage bs_preprocess_stage; /* src/preprocess/stage_preprocess.c */
extern const bs_stage bs_whitening_stage; /* src/preprocess/stage_whitening.c */
extern const bs_stage bs_drift_stage;     /* src/drift/stage_drift.c */
extern const bs_stage bs_basis_stage;     /* src/detect/stage_detect.c */
extern const bs_stage bs_detect_stage;    /* src/detect/stage_detect.c */
extern const bs_stage bs_cluster_stage;   /* src/cluster/stage_cluster.c */
extern const bs_stage bs_match_stage;     /* src/match/stage_match.c */
extern const bs_stage bs_finish_stage;    /* src/cluster/stage_finish.c */

/* The stages in run order; bs_n_stages of them (<= BS_PLAN_MAX_STAGES). */
extern const bs_stage *const bs_stages[];
extern const int bs_n_stages;

#endif
