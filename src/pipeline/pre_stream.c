/*
 * pre_stream.c - the preprocessed recording without its file: each pass
 * preprocesses the batches it reads again (stage.h, bs_pre_stream).
 *
 * The preprocess stage normally writes OUT/.stages/preprocess/recording.f16
 * (2 bytes per channel and sample: as large as an int16 recording) and the
 * later passes read it. When the disk cannot hold it (the free space of
 * OUT's file system, or --disk, is less than the run writes: plan.c,
 * bs_sort_plan_fit_disk), the plan streams it instead: the preprocessed
 * recording (c->pre_rec) becomes a float16 recording whose rows come from
 * this module's read_rows hook (recording.h) rather than from a file, so
 * every lane reads it through the ordinary batch reader as before.
 *
 * The same bytes. A row of the file is the float16 of the sample of the
 * batch that owns it, preprocessed from that batch's raw window
 * (stage_preprocess.c: a window's context columns are the neighbouring
 * batches' own samples). The hook computes exactly that: batch k's rows are
 * its raw window read and preprocessed through a lane on the raw recording
 * (bs_run_read_preprocessed_on, the computation the stage writes the file
 * with) and converted by bs_floats_to_half_rows_par (the same conversion), so a
 * window read from the stream equals one read from the file, bit for bit,
 * and every output is the same whichever the plan chose.
 *
 * The cache. A window of batch b covers the last `halo` samples of batch
 * b - 1, batch b and the first `halo` of batch b + 1, and a stage that reads
 * ahead reads b + 1 on a second thread while it works on b: the rows of the
 * last BS_PRE_STREAM_ENTRIES batches computed are kept (least recently used
 * out), so a pass in batch order preprocesses each batch once; a sampled
 * statistic (whitening, shapes) reads scattered batches and preprocesses up
 * to three per window. Entries are claimed under a mutex; one batch is
 * computed at a time, on the raw lane (its scratch sized for the run's
 * threads; the computing thread's OpenMP team does the work), and a thread
 * that needs a batch another is computing waits for it. Rows are copied out
 * under the mutex, so an entry is never replaced while it is read.
 *
 * Memory (planned: plan.c, pre_stream_bytes): the entries (nb x C x 2 bytes
 * each) and the raw lane (reader, preprocessing scratch, artifact arrays).
 * Disk: none. Time: the preprocessing of every batch again in each pass that
 * reads the recording in full (drift, detect, match), about what the
 * preprocess stage costs, per pass.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/half_tiles.h"
#include "../common/log.h"
#include "../mem/mem.h"
#include "stage.h"

enum { E_EMPTY, E_BUSY, E_READY };

typedef struct {
    int64_t b;      /* batch held (-1: none) */
    int state;      /* E_EMPTY, E_BUSY (being computed), E_READY */
    uint64_t used;  /* last use, in ticks of the stream */
    uint16_t *rows; /* nb x C float16, time-major, the batch's own samples */
} pre_entry;

struct bs_pre_stream {
    const bs_run_ctx *c;
    bs_read_lane raw; /* on the raw recording: computes the entries, one batch at a time (`compute`) */
    pthread_mutex_t mu, compute;
    pthread_cond_t cv;
    pre_entry e[BS_PRE_STREAM_ENTRIES];
    uint64_t tick;
    int64_t computed; /* batches preprocessed so far */
};

size_t bs_pre_stream_entry_bytes(int64_t nb, int n_chan)
{
    return (size_t)nb * (size_t)n_chan * 2;
}

bs_status bs_pre_stream_open(const bs_run_ctx *c, bs_pre_stream **out)
{
    *out = NULL;
    if (c->pre_ready)
        return bs_error(BS_ERR_INTERNAL, "pre_stream: the lanes read the preprocessed recording already");
    bs_pre_stream *s = calloc(1, sizeof *s);
    if (!s)
        return bs_error(BS_ERR_MEMORY, "pre_stream: out of memory");
    s->c = c;
    s->raw.reader.fd = -1;
    bs_status st = bs_read_lane_open(&s->raw, c, c->n_threads, "sort/pre-stream", "sort/pre-stream");
    for (int i = 0; i < BS_PRE_STREAM_ENTRIES && st == BS_OK; i++) {
        s->e[i].b = -1;
        s->e[i].rows = bs_mem_alloc("sort/pre-stream", bs_pre_stream_entry_bytes(c->nb, c->rec->probe.n_chan));
        if (!s->e[i].rows)
            st = BS_ERR_MEMORY;
    }
    if (st != BS_OK) {
        for (int i = 0; i < BS_PRE_STREAM_ENTRIES; i++)
            bs_mem_free(s->e[i].rows);
        bs_read_lane_close(&s->raw);
        free(s);
        return st;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->compute, NULL);
    pthread_cond_init(&s->cv, NULL);
    *out = s;
    return BS_OK;
}

int64_t bs_pre_stream_close(bs_pre_stream *s)
{
    if (!s)
        return 0;
    int64_t n = s->computed;
    for (int i = 0; i < BS_PRE_STREAM_ENTRIES; i++)
        bs_mem_free(s->e[i].rows);
    bs_read_lane_close(&s->raw);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->compute);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return n;
}

/* Batch k's rows into entry e (claimed E_BUSY by the caller, mu not held). */
static bs_status compute(bs_pre_stream *s, pre_entry *e, int64_t k)
{
    const bs_run_ctx *c = s->c;
    const int C = c->rec->probe.n_chan;
    pthread_mutex_lock(&s->compute);
    float *x = NULL;
    int64_t n_valid = 0;
    bs_status st = bs_run_read_preprocessed_on(c, &s->raw, k, &x, &n_valid);
    if (st == BS_OK)
        bs_floats_to_half_rows_par(x + c->halo, (size_t)c->width, C, n_valid, e->rows);
    pthread_mutex_unlock(&s->compute);
    return st;
}

/* Rows [r0, r1) of batch k (relative to the batch's first sample) into dst. */
static bs_status copy_rows(bs_pre_stream *s, int64_t k, int64_t r0, int64_t r1, uint16_t *dst)
{
    const size_t row = (size_t)s->c->rec->probe.n_chan;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        pre_entry *hit = NULL, *victim = NULL;
        for (int i = 0; i < BS_PRE_STREAM_ENTRIES; i++) {
            pre_entry *e = &s->e[i];
            if (e->b == k && e->state != E_EMPTY) {
                hit = e;
                break;
            }
            if (e->state == E_BUSY)
                continue;
            if (!victim || e->state == E_EMPTY || (victim->state != E_EMPTY && e->used < victim->used))
                victim = e;
        }
        if (hit && hit->state == E_READY) {
            hit->used = ++s->tick;
            memcpy(dst, hit->rows + (size_t)r0 * row, (size_t)(r1 - r0) * row * sizeof *dst);
            pthread_mutex_unlock(&s->mu);
            return BS_OK;
        }
        if (hit || !victim) { /* being computed by another thread, or every entry is */
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        victim->b = k;
        victim->state = E_BUSY;
        pthread_mutex_unlock(&s->mu);
        bs_status st = compute(s, victim, k);
        pthread_mutex_lock(&s->mu);
        victim->state = st == BS_OK ? E_READY : E_EMPTY;
        if (st != BS_OK)
            victim->b = -1;
        else
            s->computed++;
        pthread_cond_broadcast(&s->cv);
        if (st != BS_OK) {
            pthread_mutex_unlock(&s->mu);
            return st;
        }
    }
}

bs_status bs_pre_stream_rows(const bs_recording *rec, int64_t row0, int64_t n_rows, void *dst)
{
    bs_pre_stream *s = rec->source;
    const int64_t nb = s->c->nb;
    uint16_t *out = dst;
    const size_t row = (size_t)rec->probe.n_chan;
    for (int64_t t = row0; t < row0 + n_rows;) {
        int64_t k = t / nb, end = (k + 1) * nb < row0 + n_rows ? (k + 1) * nb : row0 + n_rows;
        BS_TRY(copy_rows(s, k, t - k * nb, end - k * nb, out + (size_t)(t - row0) * row));
        t = end;
    }
    return BS_OK;
}
