/*
 * stage_io.h - random access to rows of a stage's .npy files.
 *
 * Stages stream per-spike arrays to disk in batch order; later stages read
 * back only the rows they need (one center's spikes, a block of spikes) with
 * pread, so RAM holds what is being worked on, not the whole recording.
 */
#ifndef BS_STAGE_IO_H
#define BS_STAGE_IO_H

#include <stdint.h>

#include "../common/status.h"
#include "../io/npy.h"

typedef struct {
    int fd;
    bs_npy_header h;
    size_t row_bytes; /* bytes of one row (first dimension) */
    char path[4200];
} bs_npy_rows;

/* Open dir/name and check its dtype (and that it has rows). */
bs_status bs_npy_rows_open(bs_npy_rows *r, const char *dir, const char *name, bs_npy_dtype dtype);
/* Rows [r0, r0 + n) into dst. */
bs_status bs_npy_rows_read(const bs_npy_rows *r, int64_t r0, int64_t n, void *dst);
/* Rows idx[0..n) (ascending gives sequential reads) into dst. */
bs_status bs_npy_rows_gather(const bs_npy_rows *r, const int64_t *idx, int64_t n, void *dst);
void bs_npy_rows_close(bs_npy_rows *r);

/* A stage's set of streamed per-spike .npy files, opened and committed (or
 * all removed) together. */
#define BS_NPY_SET_MAX 8

typedef struct {
    const char *name;     /* file name inside the stage folder */
    bs_npy_dtype dtype;
    int ndim;             /* 1..3 */
    int64_t row_shape[2]; /* the ndim-1 trailing dimensions */
} bs_npy_file_spec;

typedef struct {
    bs_npy_writer w[BS_NPY_SET_MAX];
    int n_open; /* writers opened so far */
} bs_npy_set;

bs_status bs_npy_set_open(bs_npy_set *s, const char *dir, int n, const bs_npy_file_spec *spec);
/* Commit every file when st is BS_OK, otherwise remove them all; returns the
 * first failure (st itself when it already is one). */
bs_status bs_npy_set_finish(bs_npy_set *s, bs_status st);

#endif
