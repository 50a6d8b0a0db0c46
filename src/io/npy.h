/*
 * npy.h - NumPy .npy v1.0 files: header parser, whole-array load/save, and a
 * streaming writer.
 *
 * Layout: magic "\x93NUMPY", version 1.0, little-endian uint16 header length,
 * then an ASCII Python dict {'descr': '<f4', 'fortran_order': False,
 * 'shape': (n, m), } padded with spaces and ending in '\n' so the data starts
 * at a multiple of 64 bytes. The streaming writer reserves room for the
 * widest possible shape (20 digits per dimension), so the first dimension can
 * be rewritten in place when the row count is known at close, without moving
 * the data. Files are written atomically (fileio.h).
 *
 * Only little-endian (or byte-order-free) numeric dtypes in C order are
 * supported; anything else is refused with a message.
 */
#ifndef BS_NPY_H
#define BS_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "../common/fileio.h"
#include "../common/status.h"

#define BS_NPY_MAX_DIMS 8

typedef enum {
    BS_NPY_I8, BS_NPY_U8, BS_NPY_I16, BS_NPY_U16, BS_NPY_I32, BS_NPY_U32,
    BS_NPY_I64, BS_NPY_U64, BS_NPY_F32, BS_NPY_F64, BS_NPY_BOOL
} bs_npy_dtype;

typedef struct {
    bs_npy_dtype dtype;
    int ndim;                       /* 0 = scalar */
    int64_t shape[BS_NPY_MAX_DIMS]; /* elements per dimension */
    int fortran_order;
    size_t data_offset;             /* bytes from file start to the data */
} bs_npy_header;

size_t bs_npy_dtype_size(bs_npy_dtype dtype);
const char *bs_npy_dtype_descr(bs_npy_dtype dtype); /* "<f4" etc. */
/* Total number of elements; fails on overflow. */
bs_status bs_npy_count(const bs_npy_header *h, uint64_t *count);

/* Parse a header from the first `len` bytes of a file (`name` is used in
 * messages). Never reads beyond len. */
bs_status bs_npy_parse_header(const uint8_t *buf, size_t len, const char *name, bs_npy_header *h);

/* Read the header of a file and check that the file holds all its data. */
bs_status bs_npy_read_header(const char *path, bs_npy_header *h);

/* Load a whole array; the data buffer comes from the accountant under `tag`
 * (free with bs_mem_free). */
bs_status bs_npy_load(const char *path, const char *tag, bs_npy_header *h, void **data);

/* Load and require the given dtype and ndim (ndim < 0: any). */
bs_status bs_npy_load_expect(const char *path, const char *tag, bs_npy_dtype dtype, int ndim, bs_npy_header *h,
                             void **data);

/* Write a whole array atomically. */
bs_status bs_npy_save(const char *path, bs_npy_dtype dtype, int ndim, const int64_t *shape, const void *data);

/* Streaming writer: rows are appended along the first dimension. */
typedef struct {
    bs_atomic_file file;
    bs_npy_dtype dtype;
    int ndim;
    int64_t shape[BS_NPY_MAX_DIMS]; /* shape[0] counts rows written */
    size_t row_bytes;
    size_t header_bytes;
} bs_npy_writer;

/* row_shape: the ndim-1 trailing dimensions. */
bs_status bs_npy_writer_open(bs_npy_writer *w, const char *path, bs_npy_dtype dtype, int ndim,
                             const int64_t *row_shape);
bs_status bs_npy_writer_append(bs_npy_writer *w, const void *rows, int64_t n_rows);
bs_status bs_npy_writer_close(bs_npy_writer *w); /* rewrites shape[0], commits */
void bs_npy_writer_abort(bs_npy_writer *w);

#endif
