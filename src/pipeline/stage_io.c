/*
 * stage_io.c - a stage's set of streamed .npy files and bucket files (see
 * stage_io.h); row access to .npy files is src/io/npy_rows.c.
 */
#include "stage_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "../mem/mem.h"

bs_status bs_npy_set_open(bs_npy_set *s, const char *dir, int n, const bs_npy_file_spec *spec)
{
    s->n_open = 0;
    if (n > BS_NPY_SET_MAX)
        return bs_error(BS_ERR_INTERNAL, "%s: %d stage files, at most %d", dir, n, BS_NPY_SET_MAX);
    for (int i = 0; i < n; i++) {
        char path[4200];
        BS_TRY(bs_path_join(path, sizeof path, dir, spec[i].name));
        BS_TRY(bs_npy_writer_open(&s->w[i], path, spec[i].dtype, spec[i].ndim, spec[i].row_shape));
        s->n_open = i + 1;
    }
    return BS_OK;
}

bs_status bs_npy_set_finish(bs_npy_set *s, bs_status st)
{
    for (int i = 0; i < s->n_open; i++) {
        if (st == BS_OK)
            st = bs_npy_writer_close(&s->w[i]);
        else
            bs_npy_writer_abort(&s->w[i]);
    }
    s->n_open = 0;
    return st;
}

static int64_t bucket_per_key(int n_keys, size_t item_bytes, size_t buf_bytes)
{
    int64_t per = n_keys > 0 ? (int64_t)(buf_bytes / item_bytes) / n_keys : 16;
    return per < 16 ? 16 : per > 4096 ? 4096 : per;
}

size_t bs_bucket_bytes(int n_keys, size_t item_bytes, size_t buf_bytes)
{
    size_t k = (size_t)(n_keys > 0 ? n_keys : 1);
    return 3 * (k + 1) * sizeof(int64_t) + k * (size_t)bucket_per_key(n_keys, item_bytes, buf_bytes) * item_bytes;
}

bs_status bs_bucket_open(bs_bucket_file *b, const char *path, int n_keys, const int64_t *counts, size_t item_bytes,
                         size_t buf_bytes)
{
    memset(b, 0, sizeof *b);
    b->fd = -1;
    snprintf(b->path, sizeof b->path, "%s", path);
    b->n_keys = n_keys;
    b->item = item_bytes;
    b->per = bucket_per_key(n_keys, item_bytes, buf_bytes);
    b->off = bs_mem_calloc("stage/bucket", (size_t)n_keys + 1, sizeof *b->off);
    b->done = bs_mem_calloc("stage/bucket", (size_t)n_keys + 1, sizeof *b->done);
    b->fill = bs_mem_calloc("stage/bucket", (size_t)n_keys + 1, sizeof *b->fill);
    b->buf = bs_mem_alloc("stage/bucket", (size_t)(n_keys > 0 ? n_keys : 1) * b->per * item_bytes);
    if (!b->off || !b->done || !b->fill || !b->buf) {
        bs_bucket_close(b);
        return BS_ERR_MEMORY;
    }
    for (int k = 0; k < n_keys; k++)
        b->off[k + 1] = b->off[k] + counts[k];
    b->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (b->fd < 0) {
        bs_status st = bs_error(BS_ERR_INPUT, "%s: cannot create: %s", path, strerror(errno));
        bs_bucket_close(b);
        return st;
    }
    return BS_OK;
}

static bs_status bucket_flush(bs_bucket_file *b, int k)
{
    if (!b->fill[k])
        return BS_OK;
    if (b->done[k] + b->fill[k] > b->off[k + 1] - b->off[k])
        return bs_error(BS_ERR_INTERNAL, "%s: key %d has more items than counted", b->path, k);
    off_t at = (off_t)((b->off[k] + b->done[k]) * (int64_t)b->item);
    if (bs_pwrite_all(b->fd, b->buf + (size_t)k * b->per * b->item, (size_t)b->fill[k] * b->item, at) != 0)
        return bs_error(BS_ERR_IO, "%s: cannot write: %s", b->path, strerror(errno));
    b->done[k] += b->fill[k];
    b->fill[k] = 0;
    return BS_OK;
}

bs_status bs_bucket_add(bs_bucket_file *b, int key, const void *item)
{
    if (b->fill[key] == b->per)
        BS_TRY(bucket_flush(b, key));
    memcpy(b->buf + ((size_t)key * b->per + b->fill[key]++) * b->item, item, b->item);
    return BS_OK;
}

bs_status bs_bucket_finish(bs_bucket_file *b)
{
    for (int k = 0; k < b->n_keys; k++)
        BS_TRY(bucket_flush(b, k));
    bs_mem_free(b->buf);
    b->buf = NULL;
    return BS_OK;
}

bs_status bs_bucket_read(const bs_bucket_file *b, int key, int64_t first, int64_t n, void *dst)
{
    if (first < 0 || n < 0 || first + n > b->off[key + 1] - b->off[key])
        return bs_error(BS_ERR_INTERNAL, "%s: items %lld..%lld of key %d outside its %lld", b->path,
                        (long long)first, (long long)(first + n), key, (long long)(b->off[key + 1] - b->off[key]));
    if (n && bs_pread_all(b->fd, dst, (size_t)n * b->item, (off_t)((b->off[key] + first) * (int64_t)b->item)) != 0)
        return bs_error(BS_ERR_INPUT, "%s: cannot read: %s", b->path, errno ? strerror(errno) : "unexpected end of file");
    return BS_OK;
}

void bs_bucket_close(bs_bucket_file *b)
{
    if (b->fd >= 0)
        close(b->fd);
    bs_mem_free(b->off);
    bs_mem_free(b->done);
    bs_mem_free(b->fill);
    bs_mem_free(b->buf);
    b->off = b->done = b->fill = NULL;
    b->buf = NULL;
    b->fd = -1;
}
