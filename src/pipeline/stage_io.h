/*
 * stage_io.h - a stage's streamed .npy files and bucket files.
 *
 * Stages stream per-spike arrays to disk in batch order; later stages read
 * back only the rows they need (one center's spikes, a block of spikes) with
 * pread (bs_npy_rows, src/io/npy_rows.h), so RAM holds what is being worked
 * on, not the whole recording.
 */
#ifndef BS_STAGE_IO_H
#define BS_STAGE_IO_H

#include <stdint.h>

#include "../common/status.h"
#include "../io/npy.h"
#include "../io/npy_rows.h"

/* bs_npy_rows (random access to rows of an .npy file) lives in src/io/npy_rows.h. */

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

/* Items grouped by key in one file, written in any key order and read back
 * one key's run at a time: the counts per key are known first (a counting
 * pass), so key k's items occupy [off[k], off[k+1]) of the file; items are
 * staged in per-key buffers (buf_bytes in all, at least 16 items per key)
 * and flushed with pwrite. Within a key, items keep the order they were
 * added in. RAM: O(keys + buf_bytes), whatever the number of items. */
typedef struct {
    int fd;
    char path[4200];
    int n_keys;
    size_t item;      /* bytes per item */
    int64_t *off;     /* [n_keys + 1] first item of each key */
    int64_t *done;    /* [n_keys] items written to the file */
    int64_t *fill;    /* [n_keys] items staged in buf */
    int64_t per;      /* staging slots per key */
    char *buf;        /* [n_keys × per × item] */
} bs_bucket_file;

/* Bytes a bucket file allocates for n_keys keys (its staging buffer is
 * freed by bs_bucket_finish). */
size_t bs_bucket_bytes(int n_keys, size_t item_bytes, size_t buf_bytes);
bs_status bs_bucket_open(bs_bucket_file *b, const char *path, int n_keys, const int64_t *counts, size_t item_bytes,
                         size_t buf_bytes);
bs_status bs_bucket_add(bs_bucket_file *b, int key, const void *item);
/* Flush the staging buffers (and free them); reads are allowed after it. */
bs_status bs_bucket_finish(bs_bucket_file *b);
/* Items [first, first + n) of key into dst. */
bs_status bs_bucket_read(const bs_bucket_file *b, int key, int64_t first, int64_t n, void *dst);
static inline int64_t bs_bucket_count(const bs_bucket_file *b, int key)
{
    return b->off[key + 1] - b->off[key];
}
void bs_bucket_close(bs_bucket_file *b);

#endif
