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
#include <stdio.h>
#include <stdint.h>

#include "../common/status.h"
#include "sort.h"

typedef enum { BS_PARAM_INT, BS_PARAM_I64, BS_PARAM_U64, BS_PARAM_F32, BS_PARAM_F64 } bs_param_type;

typedef struct {
    const char *group;    /* params.json group */
    const char *name;     /* name in the group, with its unit */
    bs_param_type type;
    size_t offset;        /* bytes from the start of bs_sort_params */
    double lo, hi;        /* valid values, inclusive (integers: whole numbers only) */
    int zero_auto;        /* 1: 0 is valid too and means "automatic" (desc says what it becomes) */
    const char *kilosort; /* Kilosort 4's name of the same parameter in the same unit, NULL if none */
    const char *desc;     /* one line: `boundsort params --defaults`, the SpikeInterface wrapper */
} bs_param_field;

extern const bs_param_field bs_sort_param_fields[];
extern const int bs_n_sort_param_fields;

/* The value of field f in p: integers as int64 (is_int = 1); any field as double (bs_param_real). */
int64_t bs_param_int(const bs_sort_params *p, const bs_param_field *f);
double bs_param_real(const bs_sort_params *p, const bs_param_field *f);
int bs_param_is_int(const bs_param_field *f);
/* The field of group.name, or NULL. */
const bs_param_field *bs_param_find(const char *group, const char *name);
/* Set field f of p to v after checking it: BS_ERR_USAGE "<where><group>.<name> = v: expected ..." when v is
 * outside [lo, hi] (and not an allowed 0) or not a whole number for an integer field. */
bs_status bs_param_set(bs_sort_params *p, const bs_param_field *f, double v, const char *where);
/* Every field in its range, and the rules between fields: nt_samples odd, nt_before_samples <= nt - 2,
 * merge max_lag < nt, tmax_s > tmin_s (or 0). bs_sort_run checks it; the commands check it before
 * opening anything, so a bad option or parameters file is a usage error (exit 1). */
bs_status bs_sort_params_check(const bs_sort_params *p);

/* OUT/params.json (written atomically): the parameters of a run with
 * batches of batch_samples and halos of halo_samples (as resolved from the
 * recording's rate), its resume key, and the stages that read them. */
bs_status bs_sort_params_write(const bs_sort_params *p, int64_t batch_samples, int64_t halo_samples, uint64_t key,
                               const char *out_dir);

/* ---- parameters files (params_file.c) ----
 *
 * `sort --params FILE`: a JSON object (comments // and block comments allowed)
 * whose values replace p's, key by key; anything not named keeps its value.
 * A key is one of
 *   - a group holding {"<name>": value, ...}, as OUT/params.json writes them
 *     (its "boundsort_version", "resume_key" and "stages" are ignored, so a
 *     run's params.json can be given back to repeat it);
 *   - "<group>.<name>";
 *   - Kilosort 4's name (the table's `kilosort`), and four that are not one
 *     field: nblocks (0: no_drift = 1; n: n_blocks = n, no_drift = 0), nskip
 *     (both batch strides), drift_smoothing ([shift, time, blocks]), and
 *     tmin / tmax (tmax null or 0: the end).
 * A value is a number, true/false for 1/0, or null for the default. Unknown
 * keys are a usage error naming the key and the nearest known one; so is a
 * field given twice (under two names) and any value outside its range. */
bs_status bs_sort_params_read(const char *path, bs_sort_params *p);
/* The same from text; `name` is used in messages. */
bs_status bs_sort_params_parse(const char *text, const char *name, bs_sort_params *p);
/* `boundsort params --defaults`: every parameter with its default, range, Kilosort name and description, as a
 * parameters file with a comment per key (json = 0; readable back by bs_sort_params_read) or as a JSON array
 * of {"group", "name", "key", "type", "default", "min", "max", "zero_auto", "kilosort", "description"}
 * (json = 1). */
bs_status bs_sort_params_print_defaults(FILE *out, int json);

#endif
