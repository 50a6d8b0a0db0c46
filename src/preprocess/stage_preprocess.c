/*
 * stage_preprocess.c - the stage after `channels` (the table: src/pipeline/
 * stages.h): the recording read once through the preprocessing chain up to
 * the whitening (mean removal, ADC phase shift, bad channels, median
 * reference or destriping, high-pass: preprocess.h) and written to
 * OUT/.stages/preprocess/recording.f16, so that the later passes (whitening,
 * drift, shapes, detect, match) read it instead of the raw file and do not
 * filter and reference every batch again (docs/ALGORITHM.md §3.7).
 *
 * The file: float16 µV (src/common/half.h: 11 significant bits, a relative
 * error of at most 4.9e-4, far under the noise), time-major like a raw
 * recording: sample t of sorted channel c at byte (t * C + c) * 2, C the
 * sorted channels (after the channels stage dropped any), n_samples rows. It
 * is read as a float16 recording (c->pre_rec) through the ordinary batch
 * reader, so a window's context columns are the neighbouring batches' own
 * samples (the recording's first and last sample repeated past its ends)
 * rather than the raw window's filtered edges. The whitening and the drift
 * correction, which differ per batch, and the artifact blanking are applied
 * to each window as it is read (read_lane.c). Every run reads its windows
 * this way, so the result depends on neither threads nor budget, and a
 * resumed run reads the same bytes.
 *
 * Also kept per batch: the railed fraction of its raw window (batch.h), which
 * the sampled statistics use to pass over flat or saturated batches
 * (stage.h: bs_sample_batches), since the preprocessed window no longer shows
 * it.
 *
 * Checkpoint (OUT/.stages/preprocess/): railed.npy float64 (n_batches,). The
 * float16 file is not a checkpoint file: it is removed when the sort ends
 * (`--keep-preprocessed` makes it the Phy folder's OUT/preprocessed.dat, with
 * the raw file's columns, which params.py names: src/export/raw_copy.c), so
 * a completed run resumed skips this stage; when it is absent and a later
 * stage must run again, that stage writes it first (bs_preprocessed_ensure:
 * the same bytes, being the same computation). Disk: C x n_samples x 2
 * bytes while the sort runs (planned).
 *
 * Streamed. When the run does not fit the disk with that file (plan.h,
 * pre_stream: the free space or --disk), it is not written: the stage reads
 * each raw batch only for its railed fraction, and pre_rec becomes a
 * float16 recording whose rows src/pipeline/pre_stream.c computes again from
 * the raw recording as the lanes read them, the same bytes as the file's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "../common/half_tiles.h"
#include "../common/log.h"
#include "../common/progress.h"
#include "../export/phy.h"
#include "../io/npy.h"
#include "../mem/mem.h"
#include "../pipeline/stage.h"
#include "../pipeline/stages.h"

static const char *const files[1] = {"preprocess/railed.npy"};
#define PRE_FILE "preprocess/recording.f16"

/* Bytes of a batch's float16 rows. */
static size_t rows_bytes(int64_t nb, int n_chan)
{
    return (size_t)nb * (size_t)n_chan * 2;
}

static void plan(bs_sort_plan *pl, bs_plan_stage *s)
{
    size_t stream = pl->pre_stream ? pl->pre_stream_bytes : 0; /* in `resident`, opened at the stage's end */
    bs_plan_add(s, "batch reader + preprocessing", pl->resident - stream);
    bs_plan_add(s, "railed fraction per batch", (size_t)pl->n_batches * sizeof(double));
    bs_plan_add(s, "small buffers", BS_PLAN_SMALL_BYTES);
    /* batches at once (fill): as many as threads and budget allow, each with a lane and its rows; not on
       2 threads, where one batch at a time with the next read ahead was faster (120 s of simulated NP1 on this
       project's 2-core machine: 8.6 s against 9.7-10.8 s with 2 lanes, which each preprocess a whole window on
       one thread) */
    size_t lane = pl->read_ahead + rows_bytes(pl->batch_samples, pl->n_chan);
    int lanes = s->lanes = pl->n_threads > 2 ? bs_plan_lanes(pl, bs_plan_sum(s), lane, 0, 0) : 1;
    if (lanes == 1) /* run: the run's lane reads ahead */
        bs_plan_add(s, "the raw window read ahead", pl->raw_ahead_bytes);
    if (pl->pre_stream) {
        snprintf(s->strategy, sizeof s->strategy, "streamed: not written, each pass preprocesses again (disk)");
    } else if (lanes > 1) {
        bs_plan_add(s, "lanes: a batch read and preprocessed, and its float16 rows, on each", (size_t)lanes * lane);
        snprintf(s->strategy, sizeof s->strategy, "float16, %d batches at once", lanes);
    } else {
        snprintf(s->strategy, sizeof s->strategy, "float16, every batch");
    }
    s->reduce = "--batch-seconds";
    bs_plan_stage_total(s);
    if (lanes > 1) /* the lanes are the budget's choice: one batch at a time needs none, but reads ahead */
        s->min_peak = s->sure_min = s->peak - (size_t)lanes * lane + pl->raw_ahead_bytes;
    else
        bs_plan_read_ahead(pl, s, pl->raw_ahead_bytes); /* its lane reads ahead too */
    if (stream) { /* opened after the pass, its read-ahead lane closed: listed as what it adds to that */
        size_t ra = s->read_ahead ? pl->read_ahead : 0, add = stream > ra ? stream - ra : 0;
        bs_plan_add(s, "then the preprocessed recording streamed: cache, raw lane (beyond any read-ahead lane)", add);
        s->peak += add;
        s->min_peak = s->sure_min = s->min_peak + stream;
    }
    bs_plan_disk(s, pl->pre_stream ? 1 : 2,
                 (pl->pre_stream ? 0 : (double)pl->pre_file_bytes) + (double)pl->n_batches * sizeof(double));
}

/* Columns [halo, halo + n_valid) of window x (C rows of width) as float16 rows, appended to f, through the
 * lane's preprocessing scratch (free once the batch is preprocessed). */
static bs_status write_rows(bs_run_ctx *c, const bs_atomic_file *f, const float *x, int64_t n_valid)
{
    const int C = c->rec->probe.n_chan;
    uint16_t *buf = c->rd.scratch;
    int64_t cap = (int64_t)(c->rd.scratch_bytes / (2 * (size_t)C));
    if (cap < 1)
        return bs_error(BS_ERR_INTERNAL, "preprocess: scratch of %zu bytes holds no row", c->rd.scratch_bytes);
    for (int64_t t0 = 0; t0 < n_valid; t0 += cap) {
        int64_t n = n_valid - t0 < cap ? n_valid - t0 : cap;
        bs_floats_to_half_rows_par(x + c->halo + t0, (size_t)c->width, C, n, buf);
        errno = 0;
        if (fwrite(buf, 2 * (size_t)C, (size_t)n, f->fp) != (size_t)n)
            return bs_error(BS_ERR_IO, "%s: write failed: %s", f->path, strerror(errno ? errno : EIO));
    }
    /* the batch on its way to disk now rather than all at the commit's fsync */
    errno = 0;
    if (fflush(f->fp) != 0)
        return bs_error(BS_ERR_IO, "%s: write failed: %s", f->path, strerror(errno ? errno : EIO));
    off_t end = ftello(f->fp);
    size_t len = (size_t)n_valid * 2 * (size_t)C;
    if (end >= (off_t)len)
        bs_writeback_start(fileno(f->fp), end - (off_t)len, len);
    return BS_OK;
}

/* What a batch is worked on with (fill). */
typedef struct {
    bs_read_lane own;  /* lanes 1..L-1 read through their own; lane 0 through the run's */
    bs_read_lane *rd;  /* (bs_run_lane_for) */
    uint16_t *rows;    /* the batch's own samples as float16 rows (rows_bytes; several lanes only) */
    double read_s;     /* seconds spent reading and preprocessing */
} pre_lane;

/* fill's lanes as bs_run_lanes sees them. */
typedef struct {
    bs_run_ctx *c;
    int one_lane;      /* 1: one lane: each batch through the run's lane (reading ahead) and write_rows */
    pre_lane *lanes;
    const bs_atomic_file *f; /* NULL: the plan streams the preprocessed recording: railed fractions only */
    bs_progress *pb;
} lanes_job;

/* Batch b read and preprocessed through the lane, its float16 rows written
 * at the batch's place in the file (nothing else writes there) and started on
 * their way to disk; with no file (streamed), only read for its railed
 * fraction. */
static bs_status lane_work(void *job, int lane, int64_t b)
{
    lanes_job *j = job;
    bs_run_ctx *c = j->c;
    pre_lane *l = &j->lanes[lane];
    const int C = c->rec->probe.n_chan;
    float *x = NULL;
    int64_t n_valid = 0;
    double t0 = bs_now_s();
    bs_status st = !j->f        ? (j->one_lane ? bs_run_read_raw(c, b, &x, &n_valid)
                                               : bs_run_read_raw_on(c, l->rd, b, &x, &n_valid))
                   : j->one_lane ? bs_run_read_preprocessed(c, b, &x, &n_valid)
                                 : bs_run_read_preprocessed_on(c, l->rd, b, &x, &n_valid);
    l->read_s += bs_now_s() - t0;
    BS_TRY(st);
    c->railed[b] = l->rd->railed;
    if (!j->f)
        return BS_OK;
    if (j->one_lane)
        return write_rows(c, j->f, x, n_valid);
    bs_floats_to_half_rows(x + c->halo, (size_t)c->width, C, 0, n_valid, l->rows);
    int fd = fileno(j->f->fp);
    off_t off = (off_t)rows_bytes(b * c->nb, C);
    errno = 0;
    if (bs_pwrite_all(fd, l->rows, rows_bytes(n_valid, C), off) != 0)
        return bs_error(BS_ERR_IO, "%s: write failed: %s", j->f->path, strerror(errno ? errno : EIO));
    bs_writeback_start(fd, off, rows_bytes(n_valid, C));
    return BS_OK;
}

static bs_status lane_done(void *job, int lane, int64_t b)
{
    lanes_job *j = job;
    (void)lane;
    bs_progress_update(j->pb, b + 1);
    bs_checkpoint_test_kill("preprocess", b + 1);
    return BS_OK;
}

/* Every batch through the raw lane: the float16 file written and committed (write_file), the railed
 * fractions filled; through bs_run_lanes, one batch at a time (L = 1: also when another stage writes the file
 * again, bs_preprocessed_ensure) or L at once (the preprocess stage's plan), each lane with its own reader and
 * rows: the file is the same bytes for any L. */
static bs_status fill(bs_run_ctx *c, int L, int write_file)
{
    const int C = c->rec->probe.n_chan;
    char path[4200];
    bs_atomic_file f;
    if (write_file) {
        BS_TRY(bs_stage_file(c->stage_dir, PRE_FILE, path, sizeof path));
        BS_TRY(bs_atomic_open(&f, path));
    }
    bs_progress pb;
    bs_progress_start(&pb, "preprocess", "batches", c->p->quiet ? 0 : c->n_batches);
    if (L > c->n_batches)
        L = (int)c->n_batches;
    if (L < 1)
        L = 1;
    pre_lane *lanes = calloc((size_t)L, sizeof *lanes);
    bs_status st = lanes ? BS_OK : bs_error(BS_ERR_MEMORY, "preprocess: out of memory");
    int n_open = 0;
    for (; st == BS_OK && n_open < L; n_open++) {
        pre_lane *l = &lanes[n_open];
        st = bs_run_lane_for(c, n_open, &l->own, &l->rd, "sort/preprocess-lanes");
        if (st == BS_OK && L > 1 && write_file &&
            !(l->rows = bs_mem_alloc("sort/preprocess-lanes", rows_bytes(c->nb, C))))
            st = BS_ERR_MEMORY;
    }
    lanes_job job = {c, L == 1, lanes, write_file ? &f : NULL, &pb};
    if (st == BS_OK)
        st = bs_run_lanes(L, c->n_batches, lane_work, lane_done, &job);
    double read_s = 0;
    for (int i = 0; i < n_open; i++) {
        read_s += lanes[i].read_s;
        bs_mem_free(lanes[i].rows);
        bs_read_lane_close(&lanes[i].own);
    }
    if (L > 1 && c->summary) /* the lanes' reading, as wall time shared by the lanes (one: counted as read) */
        bs_run_stage_read(c->summary, read_s / L);
    free(lanes);
    bs_progress_finish(&pb);
    if (!write_file)
        return st;
    if (st != BS_OK) {
        bs_atomic_abort(&f);
        return st;
    }
    return bs_atomic_commit(&f);
}

/* From now on every lane reads the preprocessed recording (the run's lane reopened on it; read-ahead lanes
 * open on it): the float16 file, or (streamed) rows that pre_stream.c computes as they are read. */
static bs_status use_pre_rec(bs_run_ctx *c, int streamed)
{
    const bs_recording *rec = c->rec;
    bs_recording *r = &c->pre_rec;
    const int C = rec->probe.n_chan;
    memset(r, 0, sizeof *r);
    BS_TRY(bs_stage_file(c->stage_dir, PRE_FILE, r->data_path, sizeof r->data_path));
    if (streamed) { /* opened before the lanes switch: its own lane reads the raw recording */
        BS_TRY(bs_pre_stream_open(c, &c->pre_stream));
        r->read_rows = bs_pre_stream_rows;
        r->source = c->pre_stream;
        size_t l = strlen(r->data_path);
        snprintf(r->data_path + l, sizeof r->data_path - l, " (streamed)");
    }
    snprintf(r->format, sizeof r->format, "float16");
    r->dtype = BS_SAMPLE_F16;
    r->n_cols = C;
    r->n_samples = rec->n_samples;
    r->fs_hz = rec->fs_hz;
    r->probe.n_chan = C;
    r->probe.column = bs_mem_alloc("sort/preprocessed", (size_t)C * sizeof *r->probe.column);
    r->uv_per_bit = bs_mem_alloc("sort/preprocessed", (size_t)C * sizeof *r->uv_per_bit);
    if (!r->probe.column || !r->uv_per_bit)
        return BS_ERR_MEMORY;
    for (int ch = 0; ch < C; ch++) {
        r->probe.column[ch] = ch;
        r->uv_per_bit[ch] = 1.0f;
    }
    bs_batch_reader_close(&c->rd.reader);
    BS_TRY(bs_batch_reader_open(&c->rd.reader, r, c->nb, c->halo, 0));
    c->rd.pre = 1;
    c->pre_ready = 1;
    c->pre_missing = 0;
    return BS_OK;
}

/* The run's lane's reader on the raw recording opened again, its raw buffer of `block` bytes (0: the default;
 * bs_batch_ahead_block: a whole window's rows, so that it reads its next batch ahead, read_lane.c). */
static bs_status reopen_raw(bs_run_ctx *c, size_t block)
{
    bs_batch_reader_close(&c->rd.reader);
    return bs_batch_reader_open(&c->rd.reader, c->rec, c->nb, c->halo, block);
}

/* One batch at a time, the lanes read ahead: the read-ahead lane (opened before run) sees the flag. */
static bs_status prepare(bs_run_ctx *c)
{
    c->railed = bs_mem_alloc("sort/railed", (size_t)(c->n_batches + 1) * sizeof *c->railed);
    c->raw_ahead = c->plan->stage[c->stage].lanes == 1 && !c->pre_ready;
    return c->railed ? BS_OK : BS_ERR_MEMORY;
}

static bs_status run(bs_run_ctx *c)
{
    if (c->raw_ahead)
        BS_TRY(reopen_raw(c, bs_batch_ahead_block(c->rec, c->nb, c->halo)));
    BS_TRY(fill(c, c->plan->stage[c->stage].lanes, !c->plan->pre_stream));
    char path[4200];
    int64_t shape[1] = {c->n_batches};
    BS_TRY(bs_stage_file(c->stage_dir, files[0], path, sizeof path));
    return bs_npy_save(path, BS_NPY_F64, 1, shape, c->railed);
}

static bs_status load(bs_run_ctx *c)
{
    void *a = NULL;
    int64_t d[1] = {c->n_batches};
    BS_TRY(bs_stage_load_exact(c->stage_dir, files[0], "sort/railed-load", BS_NPY_F64, 1, d, &a));
    memcpy(c->railed, a, (size_t)c->n_batches * sizeof *c->railed);
    bs_mem_free(a);
    char path[4200];
    uint64_t bytes = 0;
    BS_TRY(bs_path_join(path, sizeof path, c->stage_dir, PRE_FILE));
    c->pre_missing = !(bs_file_size(path, &bytes) == BS_OK &&
                       bytes == 2 * (uint64_t)c->rec->probe.n_chan * (uint64_t)c->rec->n_samples);
    return BS_OK;
}

static bs_status finish(bs_run_ctx *c)
{
    const int ahead = c->raw_ahead;
    c->raw_ahead = 0; /* the later stages' lanes (the streamed recording's raw lane too) have the default reader */
    if (c->plan->pre_stream)
        return use_pre_rec(c, 1);
    if (!c->pre_missing)
        return use_pre_rec(c, 0);
    return ahead ? reopen_raw(c, 0) : BS_OK; /* still on the raw recording: the reader the later stages planned */
}

bs_status bs_preprocessed_ensure(bs_run_ctx *c)
{
    if (c->pre_ready || !c->pre_missing)
        return BS_OK;
    if (c->plan->pre_stream) /* a resumed run whose disk has no room for the file any more */
        return use_pre_rec(c, 1);
    if (!c->p->quiet)
        bs_log_info("preprocess: %s is absent (removed at the end of the run that wrote it): written again",
                    PRE_FILE);
    BS_TRY(fill(c, 1, 1));
    return use_pre_rec(c, 0);
}

bs_status bs_preprocessed_keep(bs_run_ctx *c)
{
    BS_TRY(bs_preprocessed_ensure(c));
    return bs_export_preprocessed(c->p->out_dir, &c->pre_rec, c->rec->probe.column, c->rec->n_cols);
}

void bs_preprocessed_release(bs_run_ctx *c, int remove_file)
{
    if (c->pre_stream) {
        int64_t n = bs_pre_stream_close(c->pre_stream);
        c->pre_stream = NULL;
        if (!c->p->quiet)
            bs_log_info("preprocess: streamed: %lld batch preprocessings for %lld batches", (long long)n,
                        (long long)c->n_batches);
    } else if (remove_file && c->pre_rec.data_path[0]) {
        remove(c->pre_rec.data_path);
    }
    bs_mem_free(c->pre_rec.probe.column);
    bs_mem_free(c->pre_rec.uv_per_bit);
    bs_mem_free(c->railed);
    memset(&c->pre_rec, 0, sizeof c->pre_rec);
    c->railed = NULL;
}

static const char *const params[] = {"batch", "preprocess", "bad_channels", NULL};

const bs_stage bs_preprocess_stage = {.name = "preprocess", .plan = plan, .prepare = prepare, .run = run,
    .load = load, .finish = finish, .files = files, .n_files = 1, .params = params};
