/*
 * stage_drift.c - the drift stage (see stage_drift.h): read every batch
 * through the caller's reader, detect threshold peaks, count them into the
 * per-shank histograms and the driftmap subsample, register, write files.
 */
#include "stage_drift.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../common/progress.h"
#include "../io/npy.h"
#include "../mem/mem.h"
#include "../pipeline/stage.h"
#include "../pipeline/stages.h"

/* Every stride-th row of a stream, in at most cap rows. */
typedef struct {
    float *rows; /* [cap × 3] */
    int64_t n, cap, stride, seen;
} subsample;

static void subsample_add(subsample *s, float t, float y, float a)
{
    if (s->seen++ % s->stride != 0)
        return;
    if (s->n == s->cap) { /* keep the even rows, double the stride */
        int64_t m = 0;
        for (int64_t i = 0; i < s->n; i += 2, m++)
            memcpy(s->rows + 3 * m, s->rows + 3 * i, 3 * sizeof *s->rows);
        s->n = m;
        s->stride *= 2;
        if ((s->seen - 1) % s->stride != 0)
            return;
    }
    float *r = s->rows + 3 * s->n++;
    r[0] = t, r[1] = y, r[2] = a;
}

/* bs_drift_detect_to's sink: a batch's peaks into its time bin's histograms
 * and the driftmap subsample, part by part. */
typedef struct {
    bs_drift *d;
    subsample *ss;
    int64_t bin;  /* the batch */
    double fs_hz;
    int64_t n;    /* peaks so far */
} peak_sink;

static bs_status add_peaks(void *ctx, const bs_drift_spike *s, int64_t n)
{
    peak_sink *p = ctx;
    BS_TRY(bs_drift_add(p->d, p->bin, s, n));
    for (int64_t i = 0; i < n; i++)
        subsample_add(p->ss, (float)((double)s[i].t / p->fs_hz), s[i].y_um, s[i].amp);
    p->n += n;
    return BS_OK;
}

static bs_status save_npy(const char *dir, const char *name, bs_npy_dtype dt, int ndim, const int64_t *shape,
                          const void *data)
{
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, dir, name));
    return bs_npy_save(path, dt, ndim, shape, data);
}

/* Smallest and largest motion of shank s (0 included), µm. */
static void motion_range(const bs_drift *d, int s, double *lo, double *hi)
{
    const bs_drift_shank *sh = &d->sh[s];
    *lo = *hi = 0;
    for (int t = 0; t < d->n_bins && d->motion_um; t++)
        for (int j = 0; j < sh->n_blocks; j++) {
            double v = d->motion_um[(size_t)t * d->n_blocks + sh->block0 + j];
            *lo = v < *lo ? v : *lo;
            *hi = v > *hi ? v : *hi;
        }
}

static bs_status write_json(const bs_stage_drift_args *a, const bs_drift *d, int64_t n_peaks, int64_t stride)
{
    char dir[4200], path[4300];
    BS_TRY(bs_path_join(dir, sizeof dir, a->out_dir, ".stages/drift"));
    BS_TRY(bs_mkdir_p(dir));
    BS_TRY(bs_path_join(path, sizeof path, dir, "drift.json"));
    cJSON *r = cJSON_CreateObject(), *sa = cJSON_AddArrayToObject(r, "shanks"), *wa = cJSON_AddArrayToObject(r, "warnings");
    cJSON_AddBoolToObject(r, "corrected", d->estimated && bs_drift_any(d));
    cJSON_AddNumberToObject(r, "time_bin_s", (double)a->batch_samples / a->rec->fs_hz);
    cJSON_AddNumberToObject(r, "n_time_bins", d->n_bins);
    cJSON_AddNumberToObject(r, "n_blocks", d->n_blocks);
    cJSON_AddNumberToObject(r, "requested_blocks", d->p.n_blocks);
    cJSON_AddNumberToObject(r, "n_peaks", (double)n_peaks);
    cJSON_AddNumberToObject(r, "driftmap_stride", (double)stride);
    if (a->motion_dir)
        cJSON_AddStringToObject(r, "imported_motion", a->motion_dir);
    for (int s = 0; s < d->n_shanks; s++) {
        const bs_drift_shank *sh = &d->sh[s];
        double lo, hi;
        motion_range(d, s, &lo, &hi);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "shank", s);
        cJSON_AddStringToObject(o, "mode", bs_drift_mode_name(sh->mode));
        cJSON_AddNumberToObject(o, "n_blocks", sh->mode == BS_DRIFT_NONE ? 0 : sh->n_blocks);
        cJSON_AddNumberToObject(o, "n_channels", sh->n_chan);
        cJSON_AddNumberToObject(o, "height_um", sh->y_max_um - sh->y_min_um);
        cJSON_AddNumberToObject(o, "n_peaks", (double)sh->n_spikes);
        cJSON_AddNumberToObject(o, "motion_min_um", lo);
        cJSON_AddNumberToObject(o, "motion_max_um", hi);
        cJSON_AddStringToObject(o, "note", sh->note);
        cJSON_AddItemToArray(sa, o);
        if (sh->note[0])
            cJSON_AddItemToArray(wa, cJSON_CreateString(sh->note));
    }
    char *text = cJSON_Print(r);
    cJSON_Delete(r);
    if (!text)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", path);
    bs_status st = bs_write_file_atomic(path, text, strlen(text));
    free(text);
    return st;
}

static const char *const out_files[5] = {"drift.npy", "drift_times_s.npy", "drift_depths_um.npy",
                                         "drift_shanks.npy", "driftmap.npy"};

bs_status bs_stage_drift_remove(const char *out_dir)
{
    for (int i = 0; i < 5; i++) {
        char path[4300];
        BS_TRY(bs_path_join(path, sizeof path, out_dir, out_files[i]));
        if (unlink(path) != 0 && errno != ENOENT)
            return bs_error(BS_ERR_INPUT, "%s: cannot remove an earlier run's drift file: %s", path, strerror(errno));
    }
    return bs_drift_remove_si_motion(out_dir);
}

/* --motion FOLDER: the motion SpikeInterface's Motion folder gives on d's grid (motion_si.c), in place of an
 * estimate; d keeps bs_drift_init's geometry and shank modes. */
static bs_status import_motion(const bs_stage_drift_args *a, bs_drift *d)
{
    const bs_recording *rec = a->rec;
    size_t n = (size_t)d->n_bins * (size_t)d->n_blocks;
    float *motion = bs_mem_alloc("drift/motion-import", n * sizeof *motion);
    int32_t *modes = bs_mem_alloc("drift/motion-import", (size_t)d->n_shanks * sizeof *modes);
    bs_status st = motion && modes ? BS_OK : BS_ERR_MEMORY;
    int n_bins = d->n_bins, n_blocks = d->n_blocks, n_shanks = d->n_shanks;
    for (int s = 0; st == BS_OK && s < n_shanks; s++)
        modes[s] = (int32_t)d->sh[s].mode;
    if (st == BS_OK)
        st = bs_drift_read_si_motion(d, a->motion_dir, motion);
    if (st == BS_OK) {
        bs_drift_free(d);
        st = bs_drift_restore(d, &rec->probe, a->p, rec->n_samples, a->batch_samples, rec->fs_hz, modes, n_shanks,
                              motion, n_bins, n_blocks);
    }
    if (st == BS_OK && !a->quiet)
        bs_log_info("drift: the motion of %s (SpikeInterface Motion), on %d time bins x %d blocks", a->motion_dir,
                    n_bins, n_blocks);
    bs_mem_free(motion), bs_mem_free(modes);
    return st;
}

bs_status bs_stage_drift(const bs_stage_drift_args *a, bs_drift *d)
{
    const bs_recording *rec = a->rec;
    BS_TRY(bs_drift_init(d, &rec->probe, a->p, rec->n_samples, a->batch_samples, rec->fs_hz));
    if (d->n_bins != a->n_batches)
        return bs_error(BS_ERR_INTERNAL, "drift: %d time bins for %lld batches", d->n_bins, (long long)a->n_batches);
    if (!bs_drift_any(d)) {
        if (a->motion_dir)
            bs_log_warn("drift: no shank qualifies for correction; the motion of %s is not applied", a->motion_dir);
        else if (!a->quiet)
            bs_log_info("drift: no shank qualifies for an estimate; drift is not corrected");
        if (a->out_dir)
            BS_TRY(bs_stage_drift_remove(a->out_dir));
        return a->out_dir ? write_json(a, d, 0, 1) : BS_OK;
    }
    subsample ss = {.cap = BS_DRIFTMAP_MAX_ROWS, .stride = 1};
    ss.rows = bs_mem_alloc("drift/driftmap", (size_t)ss.cap * 3 * sizeof(float));
    bs_status st = ss.rows ? BS_OK : BS_ERR_MEMORY;
    peak_sink ps = {d, &ss, 0, rec->fs_hz, 0};
    if (st == BS_OK && a->motion_dir) {
        st = import_motion(a, d);
    } else if (st == BS_OK) {
        bs_drift_detector det;
        memset(&det, 0, sizeof det);
        st = bs_drift_detector_init(&det, &rec->probe, a->p, rec->fs_hz);
        bs_progress pb;
        bs_progress_start(&pb, "drift", "batches", a->quiet || st != BS_OK ? 0 : a->n_batches);
        for (int64_t b = 0; b < a->n_batches && st == BS_OK; b++) {
            float *x;
            int64_t n_valid;
            st = a->read(a->read_ctx, b, &x, &n_valid);
            ps.bin = b;
            if (st == BS_OK)
                st = bs_drift_detect_to(&det, x, a->width, a->halo, n_valid, b * a->batch_samples,
                                        a->scales ? a->scales(a->read_ctx) : NULL, add_peaks, &ps);
            bs_progress_update(&pb, b + 1);
        }
        bs_progress_finish(&pb);
        bs_drift_detector_free(&det);
        if (st == BS_OK)
            st = bs_drift_estimate(d);
    }
    int64_t n_peaks = ps.n;
    if (st == BS_OK && a->out_dir) {
        int64_t sh2[2] = {d->n_bins, d->n_blocks}, sb[1] = {d->n_blocks}, st1[1] = {d->n_bins},
                sm[2] = {ss.n, 3};
        st = save_npy(a->out_dir, out_files[0], BS_NPY_F32, 2, sh2, d->motion_um);
        if (st == BS_OK)
            st = save_npy(a->out_dir, out_files[1], BS_NPY_F32, 1, st1, d->times_s);
        if (st == BS_OK)
            st = save_npy(a->out_dir, out_files[2], BS_NPY_F32, 1, sb, d->depths_um);
        if (st == BS_OK)
            st = save_npy(a->out_dir, out_files[3], BS_NPY_I32, 1, sb, d->block_shank);
        if (st == BS_OK)
            st = save_npy(a->out_dir, out_files[4], BS_NPY_F32, 2, sm, ss.rows);
        if (st == BS_OK)
            st = bs_drift_write_si_motion(d, a->out_dir);
        if (st == BS_OK)
            st = write_json(a, d, n_peaks, ss.stride);
    }
    if (st == BS_OK && !a->quiet) {
        for (int s = 0; s < d->n_shanks; s++) {
            const bs_drift_shank *sh = &d->sh[s];
            double lo, hi;
            motion_range(d, s, &lo, &hi);
            bs_log_info("drift: shank %d %s (%d block%s, %lld peaks), motion %.1f .. %.1f µm", s,
                        bs_drift_mode_name(sh->mode), sh->n_blocks, sh->n_blocks == 1 ? "" : "s",
                        (long long)sh->n_spikes, lo, hi);
        }
    }
    bs_mem_free(ss.rows);
    return st;
}

static const char *const ckpt_files[3] = {"drift/motion.npy", "drift/modes.npy", "drift/drift.json"};

static bs_status drift_store(const char *stage_dir, const bs_drift *d)
{
    char dir[4200];
    BS_TRY(bs_path_join(dir, sizeof dir, stage_dir, "drift"));
    BS_TRY(bs_mkdir_p(dir));
    int32_t modes[256];
    if (d->n_shanks > 256)
        return bs_error(BS_ERR_INPUT, "drift: %d shanks: at most 256 are supported", d->n_shanks);
    for (int s = 0; s < d->n_shanks; s++)
        modes[s] = (int32_t)d->sh[s].mode;
    int64_t sm[2] = {d->n_bins, d->n_blocks}, ss[1] = {d->n_shanks};
    BS_TRY(save_npy(dir, "motion.npy", BS_NPY_F32, 2, sm, d->motion_um));
    return save_npy(dir, "modes.npy", BS_NPY_I32, 1, ss, modes);
}

static bs_status drift_load(const bs_stage_drift_args *a, const char *stage_dir, bs_drift *d)
{
    char pm[4300], pd[4300];
    BS_TRY(bs_path_join(pm, sizeof pm, stage_dir, ckpt_files[0]));
    BS_TRY(bs_path_join(pd, sizeof pd, stage_dir, ckpt_files[1]));
    bs_npy_header hm, hd;
    void *motion = NULL, *modes = NULL;
    bs_status st = bs_npy_load_expect(pm, "drift/motion", BS_NPY_F32, 2, &hm, &motion);
    if (st == BS_OK)
        st = bs_npy_load_expect(pd, "drift/motion", BS_NPY_I32, 1, &hd, &modes);
    if (st == BS_OK)
        st = bs_drift_restore(d, &a->rec->probe, a->p, a->rec->n_samples, a->batch_samples, a->rec->fs_hz, modes,
                              (int)hd.shape[0], motion, hm.shape[0], hm.shape[1]);
    bs_mem_free(motion);
    bs_mem_free(modes);
    if (st == BS_OK && !a->quiet)
        bs_log_info("drift: the estimate of the previous run (%s)", pm);
    return st;
}

/* ------------------------------------------------------------ the stage */

/* The histograms grow with the recording (uint8 counts); the peaks of one
 * batch are planned at their bound for any data (bs_drift_peaks_bytes). */
static void plan(bs_sort_plan *pl, bs_plan_stage *s)
{
    s->reduce = "--no-drift (the histograms grow with the recording)";
    if (pl->p.no_drift) {
        snprintf(s->strategy, sizeof s->strategy, "off (--no-drift)");
        bs_plan_stage_total(s);
        return;
    }
    size_t peaks = bs_drift_peaks_bytes(pl->n_chan, &pl->p.drift, pl->fs_hz, pl->batch_samples, pl->n_threads);
    bs_plan_add(s, "batch reader + preprocessing", pl->resident);
    bs_plan_add(s, "depth x amplitude histograms (uint8, per batch)", pl->shapes.drift_hist);
    bs_plan_add(s, "peak detector, noise scales",
                pl->shapes.drift_detector + (size_t)pl->n_threads * (size_t)pl->batch_samples / 2);
    bs_plan_add(s, "peaks of one batch (bounded, any data)", peaks);
    bs_plan_add(s, "driftmap subsample", (size_t)BS_DRIFTMAP_MAX_ROWS * 3 * sizeof(float));
    bs_plan_add(s, "registration", pl->shapes.drift_estimate);
    snprintf(s->strategy, sizeof s->strategy,
             pl->shapes.drift_hist ? "threshold peaks, every batch" : "no shank qualifies");
    bs_plan_add(s, "small buffers", BS_PLAN_SMALL_BYTES);
    bs_plan_stage_total(s);
    bs_plan_read_ahead(pl, s, 0);
    /* out_files and ckpt_files: the motion twice (OUT and checkpoint), bin times, the driftmap */
    bs_plan_disk(s, 8, 2.0 * pl->shapes.drift_motion + (double)pl->n_batches * sizeof(double) +
                           (double)BS_DRIFTMAP_MAX_ROWS * 3 * sizeof(float));
}

static bs_status read_unwhitened(void *ctx, int64_t b, float **x, int64_t *n_valid)
{
    return bs_run_read_unwhitened(ctx, b, x, n_valid);
}

static const float *read_scales(void *ctx)
{
    return bs_run_read_noise_scales(ctx);
}

static bs_stage_drift_args args_of(bs_run_ctx *c)
{
    return (bs_stage_drift_args){.rec = c->rec,
                                 .p = &c->p->drift,
                                 .batch_samples = c->nb,
                                 .width = c->width,
                                 .halo = c->halo,
                                 .n_batches = c->n_batches,
                                 .read = read_unwhitened,
                                 .read_ctx = c,
                                 .scales = read_scales,
                                 .out_dir = c->p->out_dir,
                                 .motion_dir = c->p->motion_dir,
                                 .quiet = c->p->quiet};
}

static int off(const bs_sort_params *p)
{
    return p->no_drift;
}

static bs_status when_off(bs_run_ctx *c)
{
    c->stop = c->p->drift_only;
    return bs_stage_drift_remove(c->p->out_dir);
}

static bs_status run(bs_run_ctx *c)
{
    bs_stage_drift_args a = args_of(c);
    BS_TRY(bs_stage_drift(&a, &c->drift));
    return drift_store(c->stage_dir, &c->drift);
}

static bs_status load(bs_run_ctx *c)
{
    bs_stage_drift_args a = args_of(c);
    return drift_load(&a, c->stage_dir, &c->drift);
}

/* Every later read of a batch goes through the corrector; --drift-only stops here. */
static bs_status finish(bs_run_ctx *c)
{
    c->stop = c->p->drift_only;
    if (!bs_drift_any(&c->drift))
        return BS_OK;
    BS_TRY(bs_drift_corrector_init(&c->rd.corr, &c->drift, &c->rec->probe, &c->wh));
    c->rd.have_corr = 1;
    return BS_OK;
}

static const char *const params[] = {"batch", "preprocess", "bad_channels", "drift", NULL};

const bs_stage bs_drift_stage = {.name = "drift", .plan = plan, .off = off, .when_off = when_off, .run = run,
    .load = load, .finish = finish, .files = ckpt_files, .n_files = 3, .params = params, .reads_batches = 1};
