/*
 * npy_rows.c - pread access to rows of .npy files (see npy_rows.h).
 */
#include "npy_rows.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/fileio.h"

static bs_status read_header(bs_npy_rows *r, const char *dir, const char *name)
{
    memset(r, 0, sizeof *r);
    r->fd = -1;
    BS_TRY(bs_path_join(r->path, sizeof r->path, dir, name));
    return bs_npy_read_header(r->path, &r->h);
}

static bs_status open_data(bs_npy_rows *r)
{
    r->row_bytes = bs_npy_dtype_size(r->h.dtype);
    for (int i = 1; i < r->h.ndim; i++)
        r->row_bytes *= (size_t)r->h.shape[i];
    return bs_open_input(r->path, &r->fd);
}

bs_status bs_npy_rows_open(bs_npy_rows *r, const char *dir, const char *name, bs_npy_dtype dtype)
{
    BS_TRY(read_header(r, dir, name));
    if (r->h.dtype != dtype || r->h.ndim < 1)
        return bs_error(BS_ERR_INTERNAL, "%s: stage file has dtype %s and %d dimensions, expected %s rows",
                        r->path, bs_npy_dtype_descr(r->h.dtype), r->h.ndim, bs_npy_dtype_descr(dtype));
    return open_data(r);
}

bs_status bs_npy_rows_open_any(bs_npy_rows *r, const char *dir, const char *name)
{
    BS_TRY(read_header(r, dir, name));
    if (r->h.ndim < 1)
        return bs_error(BS_ERR_INPUT, "%s: shape: expected an array with rows, got a scalar", r->path);
    return open_data(r);
}

static bs_status read_at(const bs_npy_rows *r, int64_t row, int64_t n, char *dst)
{
    off_t off = (off_t)(r->h.data_offset + (uint64_t)row * r->row_bytes);
    errno = 0;
    if (bs_pread_all(r->fd, dst, (size_t)n * r->row_bytes, off) != 0)
        return bs_error(BS_ERR_INPUT, "%s: read failed at row %lld: %s", r->path, (long long)row,
                        errno ? strerror(errno) : "unexpected end of file");
    return BS_OK;
}

bs_status bs_npy_rows_read(const bs_npy_rows *r, int64_t r0, int64_t n, void *dst)
{
    if (r0 < 0 || n < 0 || r0 + n > r->h.shape[0])
        return bs_error(BS_ERR_INTERNAL, "%s: rows %lld..%lld outside 0..%lld", r->path, (long long)r0,
                        (long long)(r0 + n), (long long)r->h.shape[0]);
    return n ? read_at(r, r0, n, dst) : BS_OK;
}

bs_status bs_npy_rows_gather(const bs_npy_rows *r, const int64_t *idx, int64_t n, void *dst)
{
    char *d = dst;
    for (int64_t i = 0; i < n;) {
        int64_t j = i + 1; /* coalesce runs of consecutive rows */
        while (j < n && idx[j] == idx[j - 1] + 1)
            j++;
        BS_TRY(bs_npy_rows_read(r, idx[i], j - i, d));
        d += (size_t)(j - i) * r->row_bytes;
        i = j;
    }
    return BS_OK;
}

void bs_npy_rows_close(bs_npy_rows *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
}
