/*
 * npy_rows.h - random access to the rows of an .npy file.
 *
 * Mechanism: the header is parsed once (npy.h: dtype, shape, where the data
 * starts, and that the file holds all of it); rows along the first dimension
 * are then read with pread at data_offset + row * row_bytes, so a caller
 * holds only the rows it works on, whatever the file's size. Gathering a
 * sorted list of row indices coalesces runs of consecutive rows into one
 * read. The descriptor is read-only; several threads may read one file at
 * once (pread has no shared file position).
 *
 * Used by the pipeline's stages (per-spike files streamed to disk and read
 * back by later stages) and by the readers of a Phy folder
 * (src/export/phy_read.h), which add dtype conversion on top.
 */
#ifndef BS_NPY_ROWS_H
#define BS_NPY_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "npy.h"

typedef struct {
    int fd;                /* -1 when closed */
    bs_npy_header h;       /* h.shape[0] = rows */
    size_t row_bytes;      /* bytes of one row (product of the trailing dimensions × item size) */
    char path[4200];
} bs_npy_rows;

/* Open dir/name and check its dtype (and that it has rows). A wrong dtype is
 * BS_ERR_INTERNAL: the caller wrote the file itself (a stage file). */
bs_status bs_npy_rows_open(bs_npy_rows *r, const char *dir, const char *name, bs_npy_dtype dtype);
/* Open dir/name whatever its dtype (at least one dimension, else
 * BS_ERR_INPUT); the caller checks r->h.dtype. */
bs_status bs_npy_rows_open_any(bs_npy_rows *r, const char *dir, const char *name);
/* Rows [r0, r0 + n) into dst. */
bs_status bs_npy_rows_read(const bs_npy_rows *r, int64_t r0, int64_t n, void *dst);
/* Rows idx[0..n) (ascending gives sequential reads) into dst. */
bs_status bs_npy_rows_gather(const bs_npy_rows *r, const int64_t *idx, int64_t n, void *dst);
void bs_npy_rows_close(bs_npy_rows *r); /* idempotent once opened or zeroed with fd = -1 */

#endif
