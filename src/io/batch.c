/*
 * batch.c - the batch reader (see batch.h for the window layout and the
 * ownership rule).
 *
 * For batch b the window starts at sample w0 = b*NB - halo. The file rows
 * actually read are [lo, hi) = [max(0, w0), min(T, w0 + W)); they are read in
 * blocks of block_rows whole rows with pread() (retrying short reads) and
 * each block is converted in tiles of TILE_ROWS rows (small enough to stay
 * in cache), column by column: for sorted channel c the values of file column
 * probe.column[c] are gathered with a stride of one row and written
 * contiguously into row c of the window as
 *     (float)(((double)raw - offset) * uv_per_bit[c]).
 * A float32 (or float16) value that is not finite, or whose scaled value is not, is
 * refused. Performance (NP1 shape, 385 int16 columns, page cache hot, one
 * core of the development machine): ~0.8 GB/s of raw data, ~35x real time.
 * Window columns before lo and from hi on are then filled by copying the
 * first / last converted column (edge replication). Since lo <= b*NB < hi for
 * every valid batch, at least one column is always read.
 *
 * Reading ahead (Linux): bs_batch_prefetch submits one O_DIRECT read of the
 * aligned span around batch b's rows (the span read_rows would read) into the
 * raw buffer through a one-entry AIO context, and remembers b; the next
 * bs_batch_read reaps it (io_getevents waits for what is left) and converts
 * from the buffer when it was batch b and the whole span arrived, else
 * discards it and reads as usual. Nothing else touches the raw buffer while
 * a read ahead is in flight: every read and the close reap it first.
 */
#include "batch.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/aio_abi.h>
#include <sys/syscall.h>
#endif

#include "../common/half.h"
#include "../common/half_tiles.h"
#include "../common/simd.h"
#include "../mem/mem.h"

int64_t bs_batch_count(int64_t n_samples, int64_t nb)
{
    if (n_samples <= 0 || nb <= 0)
        return 0;
    return (n_samples - 1) / nb + 1;
}

static int shape_ok(int n_cols, bs_sample_type t, int64_t nb, int64_t halo)
{
    return n_cols >= 1 && nb >= 1 && halo >= 0 && bs_sample_bytes(t) > 0 && nb <= INT64_MAX / 4 &&
           halo <= INT64_MAX / 4;
}

int64_t bs_batch_block_rows(int n_cols, bs_sample_type t, int64_t nb, int64_t halo, size_t block_bytes)
{
    if (!shape_ok(n_cols, t, nb, halo))
        return 0;
    if (block_bytes == 0)
        block_bytes = BS_BATCH_BLOCK_BYTES;
    size_t row = (size_t)n_cols * bs_sample_bytes(t);
    int64_t rows = (int64_t)(block_bytes / row);
    if (rows < 1)
        rows = 1;
    int64_t width = nb + 2 * halo;
    return rows < width ? rows : width;
}

size_t bs_batch_reader_bytes_ex(int n_chan, int n_cols, bs_sample_type t, int64_t nb, int64_t halo,
                                size_t block_bytes)
{
    if (n_chan < 1 || !shape_ok(n_cols, t, nb, halo))
        return SIZE_MAX;
    uint64_t width = (uint64_t)nb + 2 * (uint64_t)halo;
    uint64_t rows = (uint64_t)bs_batch_block_rows(n_cols, t, nb, halo, block_bytes);
    uint64_t row = (uint64_t)n_cols * bs_sample_bytes(t);
    if (width > SIZE_MAX / sizeof(float) / (uint64_t)n_chan || rows > SIZE_MAX / 2 / row)
        return SIZE_MAX;
    uint64_t raw = rows * row + BS_BATCH_DIO_SLACK, out = width * (uint64_t)n_chan * sizeof(float);
    if (raw > SIZE_MAX - out)
        return SIZE_MAX;
    return (size_t)(raw + out);
}

size_t bs_batch_ahead_block(const bs_recording *rec, int64_t nb, int64_t halo)
{
    if (rec->read_rows || !shape_ok(rec->n_cols, rec->dtype, nb, halo))
        return 0;
    uint64_t w = ((uint64_t)nb + 2 * (uint64_t)halo) * (uint64_t)rec->n_cols * bs_sample_bytes(rec->dtype);
    return w < BS_BATCH_BLOCK_BYTES ? BS_BATCH_BLOCK_BYTES : w > SIZE_MAX / 4 ? SIZE_MAX / 4 : (size_t)w;
}

size_t bs_batch_reader_bytes(int n_chan, int n_cols, bs_sample_type t, int64_t nb, int64_t halo)
{
    return bs_batch_reader_bytes_ex(n_chan, n_cols, t, nb, halo, 0);
}

bs_status bs_batch_reader_open(bs_batch_reader *r, const bs_recording *rec, int64_t nb, int64_t halo,
                               size_t block_bytes)
{
    memset(r, 0, sizeof *r);
    r->fd = -1;
    r->ahead = -1;
    size_t total = bs_batch_reader_bytes_ex(rec->probe.n_chan, rec->n_cols, rec->dtype, nb, halo, block_bytes);
    if (total == SIZE_MAX)
        return bs_error(BS_ERR_INPUT,
                        "%s: batch reader: invalid shape (%d channels, %d columns, batch %lld samples, halo %lld "
                        "samples): expected channels, columns and batch >= 1, halo >= 0, and a window that fits in "
                        "memory",
                        rec->data_path, rec->probe.n_chan, rec->n_cols, (long long)nb, (long long)halo);
    r->rec = rec;
    r->nb = nb;
    r->halo = halo;
    r->width = nb + 2 * halo;
    r->n_batches = bs_batch_count(rec->n_samples, nb);
    r->block_rows = bs_batch_block_rows(rec->n_cols, rec->dtype, nb, halo, block_bytes);
    r->row_bytes = (size_t)rec->n_cols * bs_sample_bytes(rec->dtype);
    r->f16_direct = rec->dtype == BS_SAMPLE_F16 && rec->offset == 0;
    for (int c = 0; c < rec->probe.n_chan && r->f16_direct; c++)
        r->f16_direct = rec->probe.column[c] == c && rec->uv_per_bit[c] == 1.0;
    if (!rec->read_rows) { /* formats with their own row reader (NWB) need no descriptor */
#ifdef O_DIRECT
        if (rec->direct_io) { /* a file system without O_DIRECT (tmpfs) refuses the flag: read it cached */
            r->fd = open(rec->data_path, O_RDONLY | O_CLOEXEC | O_DIRECT);
            r->direct = r->fd >= 0;
        }
#endif
        if (r->fd < 0)
            r->fd = open(rec->data_path, O_RDONLY | O_CLOEXEC);
        if (r->fd < 0)
            return bs_error(BS_ERR_INPUT, "%s: cannot open for reading: %s", rec->data_path, strerror(errno));
#ifdef POSIX_FADV_SEQUENTIAL
        if (!r->direct)
            (void)posix_fadvise(r->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
    }
    r->raw = bs_mem_alloc("io/batch-raw", (size_t)r->block_rows * r->row_bytes + BS_BATCH_DIO_SLACK);
    r->out = bs_mem_alloc("io/batch-out", (size_t)r->width * (size_t)rec->probe.n_chan * sizeof(float));
    if (!r->raw || !r->out) {
        bs_batch_reader_close(r);
        return BS_ERR_MEMORY;
    }
    return BS_OK;
}

void bs_batch_reader_close(bs_batch_reader *r)
{
#ifdef __linux__
    if (r->aio) /* waits for a read ahead still in flight before its buffer goes */
        (void)syscall(SYS_io_destroy, (aio_context_t)r->aio);
#endif
    if (r->fd >= 0)
        close(r->fd);
    bs_mem_free(r->raw);
    bs_mem_free(r->out);
    memset(r, 0, sizeof *r);
    r->fd = -1;
    r->ahead = -1;
}

/* The rows of the block are read into r->raw from its first aligned byte on (r->src: the first row's
 * byte). O_DIRECT reads whole aligned blocks [a, e) of the file around the rows' bytes [off, off + want)
 * into an aligned buffer; the end of the file ends the last one early. A read the file system refuses
 * (EINVAL: an alignment it does not take) turns the descriptor's O_DIRECT off and the rest is read
 * through the page cache. */
static unsigned char *raw_start(const bs_batch_reader *r)
{
    return (unsigned char *)(((uintptr_t)r->raw + BS_BATCH_DIO_ALIGN - 1) & ~(uintptr_t)(BS_BATCH_DIO_ALIGN - 1));
}

/* The file bytes of rows [row0, row0 + nrows) of the window's source, [off, off + want), and the span read for
 * them, [a, end): whole aligned blocks when the descriptor is O_DIRECT. */
static void row_span(const bs_batch_reader *r, int64_t row0, int64_t nrows, uint64_t *off, uint64_t *want,
                     uint64_t *a, uint64_t *end)
{
    *want = (uint64_t)nrows * r->row_bytes;
    *off = r->rec->data_offset + (uint64_t)(row0 + r->rec->row0) * r->row_bytes;
    *a = *off;
    *end = *off + *want;
    if (r->direct) {
        *a = *off & ~(uint64_t)(BS_BATCH_DIO_ALIGN - 1);
        *end = (*off + *want + BS_BATCH_DIO_ALIGN - 1) & ~(uint64_t)(BS_BATCH_DIO_ALIGN - 1);
    }
}

static bs_status read_rows(bs_batch_reader *r, int64_t row0, int64_t nrows)
{
    const bs_recording *rec = r->rec;
    unsigned char *buf = raw_start(r);
    r->src = buf;
    if (rec->read_rows)
        return rec->read_rows(rec, row0 + rec->row0, nrows, buf);
    uint64_t off, want, a, end, got = 0;
    row_span(r, row0, nrows, &off, &want, &a, &end);
    r->src = buf + (off - a);
    while (a + got < off + want) {
        ssize_t k = pread(r->fd, buf + got, (size_t)(end - a - got), (off_t)(a + got));
        if (k < 0 && errno == EINVAL && r->direct) {
            r->direct = 0;
            int fl = fcntl(r->fd, F_GETFL);
#ifdef O_DIRECT
            if (fl == -1 || fcntl(r->fd, F_SETFL, fl & ~O_DIRECT) == -1)
#else
            if (fl == -1)
#endif
                return bs_error(BS_ERR_INPUT, "%s: cannot read it without O_DIRECT: %s", rec->data_path,
                                strerror(errno));
            memmove(buf, buf + (off - a), (size_t)(a + got > off ? a + got - off : 0));
            got = a + got > off ? a + got - off : 0;
            a = off;
            end = off + want;
            r->src = buf;
            continue;
        }
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return bs_error(BS_ERR_INPUT, "%s: read failed at byte %llu: %s", rec->data_path,
                            (unsigned long long)(a + got), strerror(errno));
        }
        if (k == 0)
            return bs_error(BS_ERR_INPUT,
                            "%s: file ends at byte %llu, expected %lld samples (%llu bytes): did it shrink after "
                            "opening?",
                            rec->data_path, (unsigned long long)(a + got), (long long)rec->n_samples,
                            (unsigned long long)(rec->data_offset + (uint64_t)rec->n_samples * r->row_bytes));
        got += (uint64_t)k;
    }
    return BS_OK;
}

/* Rows per conversion tile: a tile of the raw block (tile * row bytes, e.g.
 * 96 KiB for 385 int16 columns) stays in L2 while every channel gathers its
 * column from it, so each raw byte is fetched from memory once. */
#define TILE_ROWS 128
/* Rows per tile of a float16 file read directly (the preprocessed recording):
 * bs_half_rows_to_floats writes each channel's rows in one run, faster the
 * longer the run (768 KiB of raw rows at 384 channels, still within L2). */
#define F16_TILE_ROWS 1024

/* Gather one column of rows [k0, k1) of the raw block into dst[k0..k1). */
#define GATHER(type)                                                                                         \
    do {                                                                                                     \
        const unsigned char *src = raw + (size_t)rec->probe.column[c] * sizeof(type);                        \
        for (int64_t k = k0; k < k1; k++) {                                                                  \
            type v;                                                                                          \
            memcpy(&v, src + (size_t)k * rb, sizeof v);                                                      \
            dst[k] = (float)(((double)v - off) * g);                                                         \
        }                                                                                                    \
    } while (0)

/* The float32 or float16 sample at p (exact). */
static inline float load_float(const unsigned char *p, int f16)
{
    if (f16) {
        uint16_t h;
        memcpy(&h, p, sizeof h);
        return bs_half_to_float(h);
    }
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The first non-finite value of rows [k0, k1) of the window rows, channel by
 * channel, then row: 1 and *bad_c, *bad_k where; 0 if none. */
static int find_nonfinite(const bs_batch_reader *r, int64_t k0, int64_t k1, int64_t j0, int *bad_c, int64_t *bad_k)
{
    for (int c = 0; c < r->rec->probe.n_chan; c++) {
        const float *dst = r->out + (size_t)c * (size_t)r->width + j0;
        for (int64_t k = k0; k < k1; k++)
            if (!isfinite(dst[k])) {
                *bad_c = c;
                *bad_k = k;
                return 1;
            }
    }
    return 0;
}

/* 1 if rows [k0, k1) of a raw block of n float16 columns hold an infinity or a NaN (every exponent bit
 * set): a branch-free scan of the halves that vectorises, so that the window need not be scanned when,
 * as nearly always, there is none. */
BS_VECTORIZED static int any_half_nonfinite(const unsigned char *raw, size_t rb, int n, int64_t k0, int64_t k1)
{
    unsigned bad = 0;
    for (int64_t k = k0; k < k1; k++) {
        const unsigned char *row = raw + (size_t)k * rb;
        for (int c = 0; c < n; c++) {
            uint16_t h;
            memcpy(&h, row + 2 * (size_t)c, sizeof h);
            bad |= (h & 0x7c00u) == 0x7c00u;
        }
    }
    return bad != 0;
}

/* Convert rows [k0, k1) of the raw block into window columns [j0 + k0, j0 + k1).
 * float32 and float16 files: the first non-finite value (channel by channel, then row)
 * stops the tile; *bad_c and *bad_k say where (-1: none). */
static void convert_tile(const bs_batch_reader *r, int64_t k0, int64_t k1, int64_t j0, int *bad_c, int64_t *bad_k)
{
    const bs_recording *rec = r->rec;
    const unsigned char *raw = r->src;
    const size_t rb = r->row_bytes;
    const double off = rec->offset;
    *bad_c = -1;
    *bad_k = -1;
    if (r->f16_direct) { /* 8 x 8 by F16C where the CPU has it (half_tiles.h) */
        bs_half_rows_to_floats(raw, rb, rec->probe.n_chan, k0, k1, r->out + j0, (size_t)r->width);
        if (any_half_nonfinite(raw, rb, rec->probe.n_chan, k0, k1)) /* exact: unscaled halves */
            find_nonfinite(r, k0, k1, j0, bad_c, bad_k);
        return;
    }
    if (rec->dtype == BS_SAMPLE_I16 && off == 0) { /* exact as GATHER's: half_tiles.h */
        bs_i16_rows_to_floats(raw, rb, rec->probe.column, rec->uv_per_bit, rec->probe.n_chan, k0, k1, r->out + j0,
                              (size_t)r->width);
        return;
    }
    for (int c = 0; c < rec->probe.n_chan; c++) {
        const double g = rec->uv_per_bit[c];
        float *dst = r->out + (size_t)c * (size_t)r->width + j0;
        switch (rec->dtype) {
        case BS_SAMPLE_I16: GATHER(int16_t); break;
        case BS_SAMPLE_U16: GATHER(uint16_t); break;
        case BS_SAMPLE_I32: GATHER(int32_t); break;
        case BS_SAMPLE_F16:
        case BS_SAMPLE_F32: {
            const int f16 = rec->dtype == BS_SAMPLE_F16;
            const unsigned char *src = raw + (size_t)rec->probe.column[c] * (f16 ? 2 : 4);
            if (f16 && off == 0 && g == 1.0) { /* e.g. the preprocessed recording (stage_preprocess.c): exact */
                for (int64_t k = k0; k < k1; k++)
                    dst[k] = load_float(src + (size_t)k * rb, 1);
            } else {
                for (int64_t k = k0; k < k1; k++)
                    dst[k] = (float)(((double)load_float(src + (size_t)k * rb, f16) - off) * g);
            }
            break;
        }
        }
    }
    if (rec->dtype == BS_SAMPLE_F16 || rec->dtype == BS_SAMPLE_F32)
        find_nonfinite(r, k0, k1, j0, bad_c, bad_k);
}

/* Convert rows [0, nrows) of the raw block into window columns [j0, j0+nrows);
 * row k is file sample s0 + k. The tiles are spread over the threads (each
 * writes its own columns, with the same arithmetic on any thread); a
 * non-finite float32 is reported for the first tile that has one, as a
 * single thread going through the tiles in order would find it. */
static bs_status convert_block(bs_batch_reader *r, int64_t nrows, int64_t j0, int64_t s0)
{
    const bs_recording *rec = r->rec;
    const int64_t tr = r->f16_direct ? F16_TILE_ROWS : TILE_ROWS;
    const int64_t n_tiles = (nrows + tr - 1) / tr;
    int64_t first_bad = n_tiles; /* tile */
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (n_tiles > 1)
    for (int64_t t = 0; t < n_tiles; t++) {
        int64_t k0 = t * tr, k1 = k0 + tr < nrows ? k0 + tr : nrows, bad_k;
        int bad_c;
        convert_tile(r, k0, k1, j0, &bad_c, &bad_k);
        if (bad_c >= 0 && t < first_bad)
            first_bad = t;
    }
    if (first_bad == n_tiles)
        return BS_OK;
    int64_t k0 = first_bad * tr, k1 = k0 + tr < nrows ? k0 + tr : nrows, k;
    int c;
    convert_tile(r, k0, k1, j0, &c, &k); /* again, for where */
    const int f16 = rec->dtype == BS_SAMPLE_F16;
    float v = load_float(r->src + (size_t)k * r->row_bytes +
                             (size_t)rec->probe.column[c] * (f16 ? 2 : 4),
                         f16);
    return bs_error(BS_ERR_INPUT, "%s: sample %lld, channel %d (file column %d): expected a finite %s value%s, got %g",
                    rec->data_path, (long long)(s0 + k), c, rec->probe.column[c], bs_sample_type_name(rec->dtype),
                    isfinite(v) ? " whose scaled value fits a float32" : "", (double)v);
}

/* The file rows [lo, hi) of batch b's window (b a batch). */
static void window_rows(const bs_batch_reader *r, int64_t b, int64_t *lo, int64_t *hi)
{
    const int64_t T = r->rec->n_samples, w0 = b * r->nb - r->halo;
    *lo = w0 > 0 ? w0 : 0;
    *hi = w0 + r->width < T ? w0 + r->width : T;
}

/* The read ahead in flight, if any, waited for; 1 when it was batch b's rows [lo, hi) and all of them arrived
 * (r->src set on them), else 0 (the buffer free for the ordinary reads). */
static int take_ahead(bs_batch_reader *r, int64_t b, int64_t lo, int64_t hi)
{
    if (r->ahead < 0)
        return 0;
    const int64_t was = r->ahead;
    r->ahead = -1;
#ifdef __linux__
    struct io_event ev;
    long k;
    do
        k = syscall(SYS_io_getevents, (aio_context_t)r->aio, 1L, 1L, &ev, NULL);
    while (k < 0 && errno == EINTR);
    if (k != 1) { /* not reaped: the context's end waits for it */
        (void)syscall(SYS_io_destroy, (aio_context_t)r->aio);
        r->aio = 0;
        r->aio_off = 1;
        return 0;
    }
    if (ev.res < 0) /* refused (an alignment the file system does not take): the ordinary reads from now on */
        r->aio_off = 1;
    if (ev.res < 0 || was != b)
        return 0;
    uint64_t off, want, a, end;
    row_span(r, lo, hi - lo, &off, &want, &a, &end);
    if ((uint64_t)ev.res < off + want - a) /* short (the file shrank?): read again, which says why */
        return 0;
    r->src = raw_start(r) + (off - a);
    r->ahead_hits++;
    return 1;
#else
    (void)b, (void)lo, (void)hi, (void)was;
    return 0;
#endif
}

void bs_batch_prefetch(bs_batch_reader *r, int64_t b)
{
    if (!r->rec || !r->direct || r->aio_off || r->rec->read_rows || b < 0 || b >= r->n_batches || r->ahead == b)
        return;
    int64_t lo, hi;
    window_rows(r, b, &lo, &hi);
    if (hi - lo > r->block_rows)
        return;
    take_ahead(r, -1, 0, 0); /* another batch's: dropped */
#ifdef __linux__
    if (!r->aio) {
        aio_context_t ctx = 0;
        if (syscall(SYS_io_setup, 1L, &ctx) != 0) { /* no AIO here (a kernel without it, a sandbox's filter) */
            r->aio_off = 2;
            return;
        }
        r->aio = ctx;
    }
    uint64_t off, want, a, end;
    row_span(r, lo, hi - lo, &off, &want, &a, &end);
    struct iocb cb;
    memset(&cb, 0, sizeof cb);
    cb.aio_fildes = (uint32_t)r->fd;
    cb.aio_lio_opcode = IOCB_CMD_PREAD;
    cb.aio_buf = (uint64_t)(uintptr_t)raw_start(r);
    cb.aio_nbytes = end - a;
    cb.aio_offset = (int64_t)a;
    struct iocb *list[1] = {&cb};
    if (syscall(SYS_io_submit, (aio_context_t)r->aio, 1L, list) != 1) {
        r->aio_off = 1;
        return;
    }
    r->ahead = b;
#endif
}

bs_status bs_batch_read(bs_batch_reader *r, int64_t b, float **window, int64_t *n_valid)
{
    const bs_recording *rec = r->rec;
    if (!rec || b < 0 || b >= r->n_batches)
        return bs_error(BS_ERR_INTERNAL, "%s: batch %lld requested, the recording has %lld batches",
                        rec ? rec->data_path : "batch reader", (long long)b, (long long)r->n_batches);
    const int64_t T = rec->n_samples, W = r->width;
    const int64_t start = b * r->nb, end = start + r->nb < T ? start + r->nb : T;
    const int64_t w0 = start - r->halo;
    int64_t lo, hi;
    window_rows(r, b, &lo, &hi);
    const int ahead = take_ahead(r, b, lo, hi); /* then the rows are in the one block */
    for (int64_t s = lo; s < hi; s += r->block_rows) {
        int64_t n = hi - s < r->block_rows ? hi - s : r->block_rows;
        if (!ahead)
            BS_TRY(read_rows(r, s, n));
        BS_TRY(convert_block(r, n, s - w0, s));
    }
    const int64_t jlo = lo - w0, jhi = hi - w0; /* window columns that were read */
    for (int c = 0; c < rec->probe.n_chan; c++) {
        float *row = r->out + (size_t)c * (size_t)W;
        for (int64_t j = 0; j < jlo; j++)
            row[j] = row[jlo];
        for (int64_t j = jhi; j < W; j++)
            row[j] = row[jhi - 1];
    }
    *window = r->out;
    *n_valid = end - start;
    return BS_OK;
}

/* The fraction of x[lo, hi) equal to its smallest or largest value. The
 * extremes are kept in RAILED_LANES lanes that all start from x[lo]; a lane
 * takes a value only when it is strictly smaller (larger), as the one
 * sequential loop does, and the lanes are combined the same way: so a NaN
 * never replaces an extreme, and x[lo]'s own NaN stays. The extremes found
 * are those of the sequential loop up to the sign of a zero, which the
 * count does not see (-0 == +0): the fraction is the same. */
#define RAILED_LANES 16
typedef float railed_vf __attribute__((vector_size(RAILED_LANES * sizeof(float))));
typedef int32_t railed_vi __attribute__((vector_size(RAILED_LANES * sizeof(int32_t))));
BS_VECTORIZED
static double railed_one(const float *restrict x, int64_t lo, int64_t hi)
{
    railed_vf vmn, vmx;
    for (int l = 0; l < RAILED_LANES; l++)
        vmn[l] = vmx[l] = x[lo];
    int64_t t = lo;
    for (; t + RAILED_LANES <= hi; t += RAILED_LANES) {
        railed_vf v;
        memcpy(&v, x + t, sizeof v);
        railed_vi lt = v < vmn, gt = v > vmx;
        vmn = (railed_vf)((lt & (railed_vi)v) | (~lt & (railed_vi)vmn));
        vmx = (railed_vf)((gt & (railed_vi)v) | (~gt & (railed_vi)vmx));
    }
    float mn = x[lo], mx = x[lo];
    for (int l = 0; l < RAILED_LANES; l++) {
        mn = vmn[l] < mn ? vmn[l] : mn;
        mx = vmx[l] > mx ? vmx[l] : mx;
    }
    for (; t < hi; t++) {
        mn = x[t] < mn ? x[t] : mn;
        mx = x[t] > mx ? x[t] : mx;
    }
    int64_t n = 0;
    for (t = lo; t < hi; t++)
        n += x[t] == mn || x[t] == mx;
    return (double)n / (double)(hi - lo);
}

#define RAILED_CHUNK 256 /* channels whose fractions are found in parallel, then added in order */

double bs_batch_railed_fraction(const float *window, int n_chan, int64_t width, int64_t lo, int64_t hi)
{
    if (n_chan <= 0 || hi <= lo)
        return 1.0;
    double sum = 0.0, f[RAILED_CHUNK];
    for (int c0 = 0; c0 < n_chan; c0 += RAILED_CHUNK) {
        const int n = n_chan - c0 < RAILED_CHUNK ? n_chan - c0 : RAILED_CHUNK;
#pragma omp parallel for schedule(static)
        for (int i = 0; i < n; i++)
            f[i] = railed_one(window + (size_t)(c0 + i) * (size_t)width, lo, hi);
        for (int i = 0; i < n; i++)
            sum += f[i];
    }
    return sum / n_chan;
}
