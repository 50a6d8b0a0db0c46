/*
 * params.h - every algorithm parameter of `boundsort sort`, listed once
 * (docs/ARCHITECTURE.md, docs/ALGORITHM.md).
 *
 * bs_sort_params (sort.h) holds them, nested by the part of the algorithm
 * that reads them; this table names each one with its group and its unit
 * (in the name) and where it lives in the struct. The same table makes the
 * parameters part of the resume key (checkpoint.c: a changed default or
 * option means the checkpoints are stale) and writes OUT/params.json, so a
 * parameter added to the table is in both, and one left out of it is in
 * neither. Settings that never change the output (threads, memory budget,
 * trace, verbosity, resume itself, par_min_work) are not parameters.
 *
 * OUT/params.json: {"boundsort_version", "resume_key" (16 hex digits),
 * "<group>": {"<name>": value, ...} for each group, "stages": [{"name",
 * "params": [groups the stage reads], "files": [its checkpoint files]}]}.
 * Groups: batch, preprocess, drift (with "no_drift"; its other values are
 * not in the key when drift is off), detect, cluster, match, merge, shadow,
 * finish.
 */
#ifndef BS_PARAMS_H
#define BS_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "sort.h"

typedef enum { BS_PARAM_INT, BS_PARAM_I64, BS_PARAM_U64, BS_PARAM_F32, BS_PARAM_F64 } bs_param_type;

typedef struct {
    const char *group;  /* params.json group */
    const char *name;   /* name in the group, with its unit */
    bs_param_type type;
    size_t offset;      /* bytes from the start of bs_sort_params */
} bs_param_field;

extern const bs_param_field bs_sort_param_fields[];
extern const int bs_n_sort_param_fields;

/* The value of field f in p: integers as int64 (is_int = 1), floats as double. */
int64_t bs_param_int(const bs_sort_params *p, const bs_param_field *f);
double bs_param_real(const bs_sort_params *p, const bs_param_field *f);
int bs_param_is_int(const bs_param_field *f);

/* OUT/params.json (written atomically): the parameters of a run with
 * batches of batch_samples and halos of halo_samples (as resolved from the
 * recording's rate), its resume key, and the stages that read them. */
bs_status bs_sort_params_write(const bs_sort_params *p, int64_t batch_samples, int64_t halo_samples, uint64_t key,
                               const char *out_dir);

#endif
