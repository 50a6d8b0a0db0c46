/*
 * batch.h - the batch reader: a recording cut into batches of NB samples,
 * each handed out as a float32 µV window with `halo` samples of context on
 * either side.
 *
 * Batch b owns samples [b*NB, min((b+1)*NB, T)) (T = n_samples); there are
 * ceil(T / NB) batches (none when T = 0). Its window has n_chan rows of
 * W = NB + 2*halo floats, channel-major (row c = sorted channel c, contiguous
 * in time): window[c*W + j] = µV of channel c at sample
 *     clamp(b*NB - halo + j, 0, T - 1),
 * i.e. edge replication outside [0, T): before the first sample the first
 * sample is repeated, after the last one the last (this also pads the last,
 * short batch past its end). Columns [halo, halo + n_valid) are the batch's
 * own samples; everything else is context only, so a detector that reports
 * events only in the central part sees each sample in exactly one batch.
 * µV = (raw - rec->offset) * rec->uv_per_bit[c].
 *
 * Reading: the file rows covering [max(0, b*NB - halo), min(T, (b+1)*NB +
 * halo)) are read with pread() (or the recording's read_rows hook, e.g. NWB
 * hyperslabs) in blocks of whole rows through one raw buffer
 * of at most block_bytes (default BS_BATCH_BLOCK_BYTES, at least one row),
 * and only the probe's columns are converted. A recording with direct_io set
 * (the sort's raw recording, read once per pass) is read with O_DIRECT where
 * the file system allows it: the disk's blocks go straight into the raw
 * buffer, with no page cache filled and copied from (on a virtual machine
 * that cache's new pages cost more to touch than the data costs to read). The reader owns both buffers,
 * allocated once at open from the accountant: the raw block (tag
 * "io/batch-raw") and the window (tag "io/batch-out"); their sum is exactly
 * bs_batch_reader_bytes_ex(). The window returned by bs_batch_read() belongs
 * to the reader and stays valid (and writable: filter it in place) until the
 * next read or close.
 *
 * Reading ahead. A reader whose raw buffer holds a whole window's rows (opened
 * with bs_batch_ahead_block's block size) on a file read with O_DIRECT can
 * be told the batch it will read next (bs_batch_prefetch): its rows are then
 * read into the raw buffer asynchronously (Linux native AIO, which is
 * asynchronous for O_DIRECT files) while the caller works on the window it
 * has, and the read of that batch only waits for what is left of the
 * transfer. The window's values are the same bytes either way; a read ahead
 * that failed, or a read of another batch, falls back to the ordinary reads
 * (which give the same errors). Where AIO is missing or refused, or the file
 * is read through the page cache (whose own read-ahead serves it), the hint
 * does nothing.
 *
 * Threads: the conversion of a block spreads its tiles of rows over the
 * OpenMP threads (each tile's arithmetic is the same on any thread). A
 * reader is not shared between threads. To read batches in
 * parallel, open one reader per thread on the same (read-only) bs_recording;
 * each has its own file descriptor and buffers and pread() has no shared file
 * position, so any batches can be read concurrently.
 *
 * float32 and float16 files: a NaN or infinite sample in a probe channel is refused
 * (BS_ERR_INPUT naming the file, the sample and the channel).
 */
#ifndef BS_BATCH_H
#define BS_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "recording.h"

/* Default raw block size, bytes (8 MiB: large sequential reads). */
#define BS_BATCH_BLOCK_BYTES ((size_t)8 << 20)
/* O_DIRECT's alignment of file offsets, lengths and the buffer (bytes; the largest logical block of
 * common disks), and the raw buffer's room for it: the buffer's own alignment and the aligned blocks
 * read before and after a block's rows. */
#define BS_BATCH_DIO_ALIGN 4096
#define BS_BATCH_DIO_SLACK (3 * (size_t)BS_BATCH_DIO_ALIGN)

typedef struct {
    const bs_recording *rec;
    int64_t nb;          /* batch length, samples */
    int64_t halo;        /* context on each side, samples */
    int64_t width;       /* window length NB + 2*halo, samples */
    int64_t n_batches;   /* ceil(n_samples / nb) */
    int64_t block_rows;  /* file rows per raw block */
    size_t row_bytes;    /* bytes per file row (n_cols * sample size) */
    int fd;
    int f16_direct;      /* float16, unscaled, file column c = channel c (the preprocessed recording):
                            converted by bs_half_rows_to_floats (common/half_tiles.h) */
    int direct;          /* 1: fd is open with O_DIRECT (rec->direct_io and the file system takes it) */
    void *raw;           /* [block_rows * row_bytes + BS_BATCH_DIO_SLACK] bytes, tag io/batch-raw */
    const unsigned char *src; /* the block's first row within raw (after an aligned read's head) */
    unsigned long aio;   /* the read-ahead's AIO context (0: none yet) */
    int aio_off;         /* no reading ahead: 1 (a read ahead failed or was refused), 2 (no AIO context) */
    int64_t ahead;       /* the batch whose rows are being read ahead into raw (-1: none) */
    int64_t ahead_hits;  /* batches read from a read ahead (for the tests) */
    float *out;          /* [n_chan * width] µV, tag io/batch-out */
} bs_batch_reader;

/* Number of batches of nb samples covering n_samples (0 if n_samples <= 0). */
int64_t bs_batch_count(int64_t n_samples, int64_t nb);

/* Rows of the raw block for these shapes: min(NB + 2*halo, max(1,
 * block_bytes / row_bytes)); block_bytes 0 = BS_BATCH_BLOCK_BYTES. */
int64_t bs_batch_block_rows(int n_cols, bs_sample_type t, int64_t nb, int64_t halo, size_t block_bytes);

/* Block size of a reader that can read ahead (bs_batch_prefetch): a whole
 * window's rows (at least the default) for a file read by pread; 0 (the
 * default) for a recording with its own row reader (NWB). */
size_t bs_batch_ahead_block(const bs_recording *rec, int64_t nb, int64_t halo);

/* Bytes a reader allocates (raw block + window); SIZE_MAX if the shape is
 * invalid (n_chan, n_cols or nb < 1, halo < 0) or overflows. */
size_t bs_batch_reader_bytes_ex(int n_chan, int n_cols, bs_sample_type t, int64_t nb, int64_t halo,
                                size_t block_bytes);
/* Same with the default block size. */
size_t bs_batch_reader_bytes(int n_chan, int n_cols, bs_sample_type t, int64_t nb, int64_t halo);

/* Open a reader (block_bytes 0 = default). The recording must outlive it. */
bs_status bs_batch_reader_open(bs_batch_reader *r, const bs_recording *rec, int64_t nb, int64_t halo,
                               size_t block_bytes);

/* Read batch b (0 <= b < n_batches) into the reader's window; *window points
 * at it, *n_valid is the number of central samples that belong to the batch
 * (NB, or fewer for the last batch). */
bs_status bs_batch_read(bs_batch_reader *r, int64_t b, float **window, int64_t *n_valid);

/* Start reading batch b's rows ahead (see "Reading ahead"; a hint: nothing
 * happens when the reader cannot, or b is not a batch). */
void bs_batch_prefetch(bs_batch_reader *r, int64_t b);

void bs_batch_reader_close(bs_batch_reader *r);

/* Railed fraction of a window's columns [lo, hi): the mean over channels of
 * the fraction of samples that equal their channel's smallest or largest
 * value in [lo, hi). Noise reaches its extremes at a few samples (≈ 0); a
 * flat channel is 1; a channel clipped at the amplifier's rails for a
 * fraction f of the time is about f. Statistics sampled from a few batches
 * skip batches above a limit (stage.h, bs_sample_batches;
 * docs/ALGORITHM.md §3.6). */
double bs_batch_railed_fraction(const float *window, int n_chan, int64_t width, int64_t lo, int64_t hi);

#endif
