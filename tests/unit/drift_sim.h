/*
 * drift_sim.h - helpers of the simulator-based drift tests: simulate a
 * drifting recording, run `sort` up to the drift stage, and compare the
 * estimate (OUT/drift*.npy) with the simulator's true motion.
 *
 * Comparison. The true motion gt_drift_um.npy is given per simulator time
 * bin (drift_bin_samples) and per depth block (drift_block_depths_um, linear
 * in between, constant beyond the end blocks). For each estimated time bin
 * (a batch) and block, the truth is averaged over the simulator bins whose
 * centres fall inside the batch and interpolated at the block's depth. The
 * estimate is defined up to a constant (its reference is the shank's mean
 * position), so one constant per shank, the mean difference, is removed
 * before the RMS error is taken over all its time bins and blocks.
 */
#ifndef BS_TEST_DRIFT_SIM_H
#define BS_TEST_DRIFT_SIM_H

#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/lsan_options.h" /* sanitized builds: LeakSanitizer scans no TLS (one test, one program) */
#include "io/npy.h"
#include "mem/mem.h"
#include "pipeline/sort.h"
#include "sim/simulate.h"

/* Paths of a case `name` under the test's scratch folder: the ground-truth
 * folder, the sort output, its recording and probe (4200 bytes each). */
typedef struct {
    char gt[4200], out[4200], rec[4200], probe[4200];
} dsim_paths;

static inline void dsim_paths_for(dsim_paths *p, const char *tmp, const char *name)
{
    snprintf(p->gt, sizeof p->gt, "%.4000s/%.100s", tmp, name);
    snprintf(p->out, sizeof p->out, "%.4000s/%.100s_out", tmp, name);
    snprintf(p->rec, sizeof p->rec, "%.4000s/recording.bin", p->gt);
    snprintf(p->probe, sizeof p->probe, "%.4000s/probe.json", p->gt);
}

/* Simulate into dir. */
static inline int dsim_make(const char *dir, bs_sim_probe_kind probe, bs_sim_drift_kind drift, double duration_s,
                            int units, uint64_t seed)
{
    bs_sim_params sp;
    bs_sim_params_default(&sp);
    sp.probe = probe;
    sp.drift = drift;
    sp.duration_s = duration_s;
    sp.n_units = units;
    sp.seed = seed;
    bs_status st = bs_simulate(&sp, dir, NULL);
    if (st != BS_OK)
        fprintf(stderr, "simulate %s: %s\n", dir, bs_last_error());
    return st == BS_OK;
}

/* `sort REC --probe P --drift-only -o out` with the given threads; params
 * may be NULL (defaults). */
static inline int dsim_drift_only(const char *rec_path, const char *probe_path, const char *out, int threads,
                                  const bs_drift_params *dp)
{
    bs_open_options o = {0};
    o.probe_path = probe_path;
    o.fs_hz = 30000;
    bs_recording rec;
    if (bs_recording_open(rec_path, &o, &rec) != BS_OK) {
        fprintf(stderr, "open %s: %s\n", rec_path, bs_last_error());
        return 0;
    }
    bs_sort_params p;
    bs_sort_default_params(&p);
    p.out_dir = out;
    p.drift_only = 1;
    p.threads = threads;
    p.quiet = 1;
    if (threads > 0) /* the process's thread count, set before the run (pipeline/sort.h) */
        omp_set_num_threads(threads);
    if (dp)
        p.drift = *dp;
    bs_status st = bs_sort_run(&rec, &p);
    if (st != BS_OK)
        fprintf(stderr, "sort %s: %s\n", rec_path, bs_last_error());
    bs_recording_close(&rec);
    return st == BS_OK;
}

static inline void *dsim_load(const char *dir, const char *name, bs_npy_dtype dt, int ndim, bs_npy_header *h)
{
    char path[4200];
    void *data = NULL;
    if (bs_path_join(path, sizeof path, dir, name) != BS_OK ||
        bs_npy_load_expect(path, "test/drift", dt, ndim, h, &data) != BS_OK) {
        fprintf(stderr, "load %s/%s: %s\n", dir, name, bs_last_error());
        return NULL;
    }
    return data;
}

/* The truth of a ground-truth folder at (time range [t0, t1) s, depth y). */
typedef struct {
    float *g;       /* [n_bins × n_blocks] */
    int n_bins, n_blocks;
    double bin_s;
    double depth[64];
} dsim_truth;

static inline int dsim_truth_load(const char *gt, dsim_truth *T)
{
    memset(T, 0, sizeof *T);
    bs_npy_header h;
    T->g = dsim_load(gt, "gt_drift_um.npy", BS_NPY_F32, 2, &h);
    if (!T->g)
        return 0;
    T->n_bins = (int)h.shape[0];
    T->n_blocks = (int)h.shape[1];
    char path[4200], *text = NULL;
    size_t len;
    if (bs_path_join(path, sizeof path, gt, "recording.json") != BS_OK ||
        bs_read_text_file(path, 1 << 24, &text, &len) != BS_OK)
        return 0;
    cJSON *r = cJSON_Parse(text);
    free(text);
    const cJSON *bs = cJSON_GetObjectItem(r, "drift_bin_samples"), *fs = cJSON_GetObjectItem(r, "fs_hz"),
                *bd = cJSON_GetObjectItem(r, "drift_block_depths_um");
    int ok = cJSON_IsNumber(bs) && cJSON_IsNumber(fs) && cJSON_IsArray(bd) && cJSON_GetArraySize(bd) == T->n_blocks &&
             T->n_blocks <= 64;
    if (ok) {
        T->bin_s = bs->valuedouble / fs->valuedouble;
        for (int k = 0; k < T->n_blocks; k++)
            T->depth[k] = cJSON_GetArrayItem(bd, k)->valuedouble;
    }
    cJSON_Delete(r);
    return ok;
}

static inline double dsim_truth_at(const dsim_truth *T, double t0, double t1, double y)
{
    double s = 0;
    int n = 0;
    for (int b = 0; b < T->n_bins; b++) {
        double tc = (b + 0.5) * T->bin_s;
        if (tc < t0 || tc >= t1)
            continue;
        const float *row = T->g + (size_t)b * T->n_blocks;
        double v;
        int nb = T->n_blocks;
        if (nb == 1 || y <= T->depth[0])
            v = row[0];
        else if (y >= T->depth[nb - 1])
            v = row[nb - 1];
        else {
            int k = 0;
            while (k < nb - 2 && y > T->depth[k + 1])
                k++;
            double f = (y - T->depth[k]) / (T->depth[k + 1] - T->depth[k]);
            v = (1 - f) * row[k] + f * row[k + 1];
        }
        s += v;
        n++;
    }
    return n ? s / n : NAN;
}

/* RMS error (µm) of the estimate in `out` for one shank against the truth
 * of `gt` (batch_s = the sort's time bin); also the truth's own RMS around
 * its mean (how much motion there was) and the largest |estimate|. */
static inline double dsim_rms(const char *out, const char *gt, int shank, double batch_s, double *truth_rms,
                              double *est_max)
{
    bs_npy_header hm, ht, hd, hs;
    float *m = dsim_load(out, "drift.npy", BS_NPY_F32, 2, &hm);
    float *ts = dsim_load(out, "drift_times_s.npy", BS_NPY_F32, 1, &ht);
    float *dep = dsim_load(out, "drift_depths_um.npy", BS_NPY_F32, 1, &hd);
    int32_t *sh = dsim_load(out, "drift_shanks.npy", BS_NPY_I32, 1, &hs);
    dsim_truth T = {0};
    int ok = m && ts && dep && sh && dsim_truth_load(gt, &T);
    double rms = NAN;
    if (ok) {
        int B = (int)hm.shape[0], K = (int)hm.shape[1];
        double sd = 0, n = 0, st = 0;
        for (int t = 0; t < B; t++)
            for (int k = 0; k < K; k++)
                if (sh[k] == shank) {
                    double g = dsim_truth_at(&T, t * batch_s, (t + 1) * batch_s, dep[k]);
                    sd += m[(size_t)t * K + k] - g;
                    st += g;
                    n++;
                }
        double off = sd / n, gm = st / n, se = 0, sg = 0, mx = 0;
        for (int t = 0; t < B; t++)
            for (int k = 0; k < K; k++)
                if (sh[k] == shank) {
                    double g = dsim_truth_at(&T, t * batch_s, (t + 1) * batch_s, dep[k]);
                    double e = m[(size_t)t * K + k] - g - off;
                    se += e * e;
                    sg += (g - gm) * (g - gm);
                    mx = fabs(m[(size_t)t * K + k]) > mx ? fabs(m[(size_t)t * K + k]) : mx;
                }
        rms = n > 0 ? sqrt(se / n) : NAN;
        if (truth_rms)
            *truth_rms = sqrt(sg / n);
        if (est_max)
            *est_max = mx;
    }
    bs_mem_free(m), bs_mem_free(ts), bs_mem_free(dep), bs_mem_free(sh), bs_mem_free(T.g);
    return rms;
}

/* Remove two folders (the simulated recording and the sort output are
 * hundreds of MB): called when a test passed, so a failure keeps them. */
static inline void dsim_cleanup(const char *a, const char *b)
{
    char cmd[8600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", a, b);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s and %s\n", a, b);
}

/* Is the test running under the sanitizers (about 20x slower)? */
static inline int dsim_sanitized(void) { return getenv("BS_SANITIZED") && getenv("BS_SANITIZED")[0]; }

#endif
