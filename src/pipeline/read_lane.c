/*
 * read_lane.c - reading a batch through the run's preprocessing (stage.h:
 * bs_run_read_batch, bs_run_read_unwhitened), and reading ahead.
 *
 * A lane (bs_read_lane) is what reading one batch needs: a batch reader (its
 * own file descriptor and window), the preprocessing scratch, the artifact
 * arrays and, once the drift stage ran, a drift-corrected whitener. The run
 * context holds one (c->rd).
 *
 * Read-ahead. In a stage whose plan holds a second lane
 * (bs_plan_stage.read_ahead: at least 2 threads and room in the budget),
 * bs_run_read_ahead_begin opens it and starts a helper thread with its own
 * OpenMP team, as large as the stage's (on 2 cores a team of half the
 * threads made the helper the bottleneck where the stage computes little, as
 * drift does; a full team measured even with no read-ahead there, the two
 * teams sharing the cores). Each time the stage takes
 * batch b, the helper is given batch b + 1 (same kind of read) to read and
 * preprocess into the second lane while the stage works on b; when the stage
 * asks for b + 1, the two lanes are swapped (the windows do not move, so the
 * pointer handed out stays valid until the next read, as without
 * read-ahead). Any other read (another batch, another kind) first waits for
 * the helper, then reads on the current lane. Only one of the two threads
 * ever reads the recording at a time: the stage's thread reads only after
 * the helper's batch is done. A lane on a raw file read with O_DIRECT also
 * has the disk read its next batch (b + 2 with the helper, whose lane takes
 * the batches between; b + 1 without) into its raw buffer asynchronously
 * while batch b is preprocessed and worked on (src/io/batch.h, "Reading
 * ahead"; in the preprocess stage the lanes' readers hold a whole window's
 * rows for it: c->raw_ahead); the page cache reads ahead for the float16
 * file itself. Preprocessing does not depend on the thread
 * count, so the windows, and every output, are the same bytes with or
 * without read-ahead; what changes is the time the stage waits for its
 * batches (the run summary's read_preprocess_s counts that wait).
 */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/progress.h"
#include "../mem/mem.h"
#include "stage.h"

enum { READ_WHITENED, READ_UNWHITENED, READ_PREPROCESSED, READ_RAW };
enum { RA_IDLE, RA_PENDING, RA_DONE };

struct bs_read_ahead {
    bs_read_lane lane; /* the lane the helper fills */
    bs_run_ctx *c;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state, quit, swaps;
    /* the job (set by the stage's thread while RA_IDLE) and its result (set by the helper before RA_DONE) */
    int kind;
    int64_t b;
    float *x;
    int64_t n_valid;
    bs_status st;
    char msg[1024]; /* the helper's error message (bs_error's is per thread) */
};

bs_status bs_read_lane_open(bs_read_lane *l, const bs_run_ctx *c, int n_threads, const char *scratch_tag,
                            const char *art_tag)
{
    const bs_recording *rec = c->rec;
    memset(l, 0, sizeof *l);
    l->reader.fd = -1;
    bs_preprocess with_wh = c->pp;
    with_wh.wh = &c->wh; /* size for the whitening step too (set for real by the whitening stage) */
    BS_TRY(bs_batch_reader_open(&l->reader, c->pre_ready ? &c->pre_rec : rec, c->nb, c->halo,
                                c->raw_ahead && !c->pre_ready ? bs_batch_ahead_block(rec, c->nb, c->halo) : 0));
    l->pre = c->pre_ready;
    l->scratch_bytes = bs_preprocess_scratch_bytes(&with_wh, rec->probe.n_chan, c->width, n_threads);
    l->scratch = bs_mem_alloc(scratch_tag, l->scratch_bytes ? l->scratch_bytes : 1);
    if (!l->scratch)
        return BS_ERR_MEMORY;
    if (!c->p->no_artifact_removal) {
        l->art_count = bs_mem_alloc(art_tag, (size_t)c->width * sizeof *l->art_count);
        l->art = bs_mem_alloc(art_tag, (size_t)c->art_max * sizeof *l->art);
        l->art_scale = bs_mem_alloc(art_tag, (size_t)rec->probe.n_chan * sizeof *l->art_scale);
        if (!l->art_count || !l->art || !l->art_scale)
            return BS_ERR_MEMORY;
    }
    return BS_OK;
}

void bs_read_lane_close(bs_read_lane *l)
{
    if (l->have_corr)
        bs_drift_corrector_free(&l->corr);
    bs_mem_free(l->scratch);
    bs_mem_free(l->art_count);
    bs_mem_free(l->art);
    bs_mem_free(l->art_scale);
    bs_batch_reader_close(&l->reader);
    memset(l, 0, sizeof *l);
    l->reader.fd = -1;
}

/* Artifacts (preprocess.h), unless the removal is off: blanked in the window
 * of batch b, whitened (the threshold in whitened units) or not (in units of
 * each channel's noise scale in this batch: the whitening covariance and the
 * drift peaks are estimated without them too). */
static bs_status blank_artifacts(const bs_run_ctx *c, bs_read_lane *l, float *x, int64_t b, int whitened)
{
    l->art_n = 0;
    if (!l->art_count)
        return BS_OK;
    int C = c->rec->probe.n_chan;
    if (!whitened) {
        int64_t n_valid = c->rec->n_samples - b * c->nb < c->nb ? c->rec->n_samples - b * c->nb : c->nb;
        BS_TRY(bs_noise_inv_scales(x, C, c->width, c->halo, n_valid, BS_NOISE_STEP, "sort/artifacts",
                                   l->art_scale));
    }
    BS_TRY(bs_artifact_blank(&c->p->artifact, c->rec->fs_hz, x, C, c->width, whitened ? NULL : l->art_scale,
                             l->art_count, l->art, c->art_max, &l->art_n));
    l->scales_own = !whitened && l->art_n == 0;
    return BS_OK;
}

/* The window of batch b, just read through lane l, preprocessed in place:
 * whitened (drift-corrected where the lane has the correction) or not, and
 * its artifacts blanked; READ_PREPROCESSED: neither. A lane on the
 * preprocessed recording only whitens (the rest was done once). */
static bs_status preprocess(const bs_run_ctx *c, bs_read_lane *l, int kind, int64_t b, float *x)
{
    bs_preprocess pp = c->pp;
    if (kind != READ_WHITENED)
        pp.wh = NULL;
    else if (l->have_corr)
        BS_TRY(bs_drift_corrector_whitener(&l->corr, b, &pp.wh));
    if (l->pre && pp.wh && l->art_count) {
        /* READ_WHITENED on the preprocessed file: whitened, the artifact detector's crossings counted
           on the way */
        l->art_n = 0;
        BS_TRY(bs_whiten_apply_count(pp.wh, x, c->width, l->scratch, l->scratch_bytes, (float)c->p->artifact.threshold,
                                     l->art_count));
        return bs_artifact_blank_counted(&c->p->artifact, c->rec->fs_hz, x, c->rec->probe.n_chan, c->width,
                                         l->art_count, l->art, c->art_max, &l->art_n);
    }
    if (!l->pre)
        BS_TRY(bs_preprocess_batch(&pp, x, c->rec->probe.n_chan, c->width, l->scratch, l->scratch_bytes, NULL));
    else if (pp.wh)
        BS_TRY(bs_whiten_apply(pp.wh, x, c->width, l->scratch, l->scratch_bytes));
    return kind == READ_PREPROCESSED ? BS_OK : blank_artifacts(c, l, x, b, pp.wh != NULL);
}

static bs_status lane_read(const bs_run_ctx *c, bs_read_lane *l, int kind, int64_t b, float **x, int64_t *n_valid)
{
    l->scales_own = 0;
    BS_TRY(bs_batch_read(&l->reader, b, x, n_valid));
    if (kind == READ_PREPROCESSED || kind == READ_RAW)
        l->railed = bs_batch_railed_fraction(*x, c->rec->probe.n_chan, c->width, c->halo, c->halo + *n_valid);
    return kind == READ_RAW ? BS_OK : preprocess(c, l, kind, b, *x);
}

/* A lane like the run's: reader, scratch for n_threads, and a drift-corrected whitener where the run's has one. */
static bs_status lane_like_run(const bs_run_ctx *c, bs_read_lane *l, int n_threads, const char *tag)
{
    BS_TRY(bs_read_lane_open(l, c, n_threads, tag, tag));
    if (c->rd.have_corr) {
        BS_TRY(bs_drift_corrector_init(&l->corr, &c->drift, &c->rec->probe, &c->wh));
        l->have_corr = 1;
    }
    return BS_OK;
}

bs_status bs_run_lane_for(bs_run_ctx *c, int i, bs_read_lane *own, bs_read_lane **rd, const char *tag)
{
    memset(own, 0, sizeof *own);
    own->reader.fd = -1;
    *rd = i > 0 ? own : &c->rd;
    return i > 0 ? lane_like_run(c, own, 1, tag) : BS_OK;
}

bs_status bs_run_read_batch_on(const bs_run_ctx *c, bs_read_lane *l, int64_t b, float **x, int64_t *n_valid)
{
    return lane_read(c, l, READ_WHITENED, b, x, n_valid);
}

bs_status bs_run_read_preprocessed_on(const bs_run_ctx *c, bs_read_lane *l, int64_t b, float **x, int64_t *n_valid)
{
    return lane_read(c, l, READ_PREPROCESSED, b, x, n_valid);
}

bs_status bs_run_read_raw_on(const bs_run_ctx *c, bs_read_lane *l, int64_t b, float **x, int64_t *n_valid)
{
    return lane_read(c, l, READ_RAW, b, x, n_valid);
}

bs_status bs_run_preprocess_read(bs_run_ctx *c, int64_t b, float *x)
{
    return preprocess(c, &c->rd, READ_WHITENED, b, x);
}

static void *helper_main(void *arg)
{
    struct bs_read_ahead *ra = arg;
    omp_set_num_threads(ra->c->n_threads); /* this thread's team (a new thread starts from the defaults) */
    pthread_mutex_lock(&ra->mu);
    for (;;) {
        while (ra->state != RA_PENDING && !ra->quit)
            pthread_cond_wait(&ra->cv, &ra->mu);
        if (ra->quit)
            break;
        pthread_mutex_unlock(&ra->mu);
        float *x = NULL;
        int64_t n_valid = 0;
        bs_status st = lane_read(ra->c, &ra->lane, ra->kind, ra->b, &x, &n_valid);
        pthread_mutex_lock(&ra->mu);
        if (st != BS_OK)
            snprintf(ra->msg, sizeof ra->msg, "%s", bs_last_error());
        ra->x = x;
        ra->n_valid = n_valid;
        ra->st = st;
        ra->state = RA_DONE;
        pthread_cond_broadcast(&ra->cv);
    }
    pthread_mutex_unlock(&ra->mu);
    return NULL;
}

/* Wait for the helper's job, if any; 1 (and its result, the lanes swapped) when it was batch b of this kind. */
static int take_ahead(bs_run_ctx *c, int kind, int64_t b, float **x, int64_t *n_valid, bs_status *st)
{
    struct bs_read_ahead *ra = c->ra;
    pthread_mutex_lock(&ra->mu);
    while (ra->state == RA_PENDING)
        pthread_cond_wait(&ra->cv, &ra->mu);
    int hit = ra->state == RA_DONE && ra->kind == kind && ra->b == b;
    ra->state = RA_IDLE;
    pthread_mutex_unlock(&ra->mu);
    if (!hit)
        return 0;
    bs_read_lane t = c->rd;
    c->rd = ra->lane;
    ra->lane = t;
    ra->swaps++;
    *x = ra->x;
    *n_valid = ra->n_valid;
    *st = ra->st == BS_OK ? BS_OK : bs_error(ra->st, "%s", ra->msg);
    return 1;
}

static bs_status read_next(bs_run_ctx *c, int kind, int64_t b, float **x, int64_t *n_valid)
{
    double t0 = bs_now_s();
    bs_status st = BS_OK;
    if (!c->ra || !take_ahead(c, kind, b, x, n_valid, &st))
        st = lane_read(c, &c->rd, kind, b, x, n_valid);
    if (st == BS_OK) /* this lane's next batch read from the disk meanwhile (raw files read with O_DIRECT) */
        bs_batch_prefetch(&c->rd.reader, b + (c->ra ? 2 : 1));
    if (st == BS_OK && c->ra && b + 1 < c->n_batches) { /* the next batch on the helper while b is worked on */
        struct bs_read_ahead *ra = c->ra;
        pthread_mutex_lock(&ra->mu);
        ra->kind = kind;
        ra->b = b + 1;
        ra->state = RA_PENDING;
        pthread_cond_broadcast(&ra->cv);
        pthread_mutex_unlock(&ra->mu);
    }
    if (c->summary)
        bs_run_stage_read(c->summary, bs_now_s() - t0);
    return st;
}

bs_status bs_run_read_batch(bs_run_ctx *c, int64_t b, float **x, int64_t *n_valid)
{
    return read_next(c, READ_WHITENED, b, x, n_valid);
}

bs_status bs_run_read_unwhitened(bs_run_ctx *c, int64_t b, float **x, int64_t *n_valid)
{
    return read_next(c, READ_UNWHITENED, b, x, n_valid);
}

bs_status bs_run_read_preprocessed(bs_run_ctx *c, int64_t b, float **x, int64_t *n_valid)
{
    return read_next(c, READ_PREPROCESSED, b, x, n_valid);
}

const float *bs_run_read_noise_scales(const bs_run_ctx *c)
{
    return c->rd.scales_own ? c->rd.art_scale : NULL;
}

bs_status bs_run_read_raw(bs_run_ctx *c, int64_t b, float **x, int64_t *n_valid)
{
    return read_next(c, READ_RAW, b, x, n_valid);
}

bs_status bs_run_read_ahead_begin(bs_run_ctx *c)
{
    if (c->ra || !c->plan || !c->plan->stage[c->stage].read_ahead)
        return BS_OK;
    struct bs_read_ahead *ra = calloc(1, sizeof *ra);
    if (!ra)
        return bs_error(BS_ERR_MEMORY, "read-ahead: out of memory");
    ra->c = c;
    bs_status st = lane_like_run(c, &ra->lane, c->n_threads, "sort/read-ahead");
    if (st == BS_OK) {
        pthread_mutex_init(&ra->mu, NULL);
        pthread_cond_init(&ra->cv, NULL);
        if (pthread_create(&ra->thread, NULL, helper_main, ra) != 0) {
            pthread_cond_destroy(&ra->cv);
            pthread_mutex_destroy(&ra->mu);
            st = bs_error(BS_ERR_INTERNAL, "read-ahead: cannot start a thread");
        }
    }
    if (st != BS_OK) {
        bs_read_lane_close(&ra->lane);
        free(ra);
        return st;
    }
    c->ra = ra;
    if (c->summary)
        bs_run_stage_read_ahead(c->summary);
    return BS_OK;
}

void bs_run_read_ahead_end(bs_run_ctx *c)
{
    struct bs_read_ahead *ra = c->ra;
    if (!ra)
        return;
    pthread_mutex_lock(&ra->mu);
    while (ra->state == RA_PENDING)
        pthread_cond_wait(&ra->cv, &ra->mu);
    ra->quit = 1;
    pthread_cond_broadcast(&ra->cv);
    pthread_mutex_unlock(&ra->mu);
    pthread_join(ra->thread, NULL);
    pthread_cond_destroy(&ra->cv);
    pthread_mutex_destroy(&ra->mu);
    if (ra->swaps % 2) { /* the run's own lane back (the window's contents do not matter after the stage) */
        bs_read_lane t = c->rd;
        c->rd = ra->lane;
        ra->lane = t;
    }
    bs_read_lane_close(&ra->lane);
    free(ra);
    c->ra = NULL;
}
