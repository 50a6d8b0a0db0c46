/*
 * motion_si.c - the drift estimate written as SpikeInterface's Motion
 * object (spikeinterface.core.motion.Motion.save / Motion.load), so
 * SpikeInterface can load it (e.g. interpolate_motion on the recording).
 *
 * A Motion folder holds spikeinterface_info.json ({"object": "Motion",
 * "num_segments": 1, "direction": "y", "interpolation_method": "linear",
 * ...}), spatial_bins_um.npy (blocks,), temporal_bins_s_seg0.npy (time bins,)
 * and displacement_seg0.npy (time bins, blocks), µm. Its sign is
 * boundsort's (docs/ALGORITHM.md §4: a unit at depth y appears at y + d),
 * which is SpikeInterface's (its corrections subtract the displacement from
 * the observed position). A Motion has no shanks: a one-shank estimate goes
 * to OUT/motion/, each estimated shank of a probe with several to
 * OUT/motion/shank<id>/ (SpikeInterface users split the recording by shank
 * group first). Shanks without an estimate (mode none) get no folder.
 *
 * Reading one (sort --motion FOLDER, bs_drift_read_si_motion): for each
 * shank the folder FOLDER/shank<id> when it exists, else FOLDER itself (one
 * Motion for the whole probe); its displacement is evaluated at the
 * shank's time-bin centres and block centres by bilinear interpolation,
 * the end values held outside its bins (as SpikeInterface clips), then the
 * shank's mean is taken away (boundsort's reference). The result replaces
 * the estimate; the correction is the same as for an estimate.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../include/boundsort.h"
#include "../common/fileio.h"
#include "../common/log.h"
#include "../io/npy.h"
#include "../mem/mem.h"
#include "drift.h"

bs_status bs_drift_remove_si_motion(const char *out_dir)
{
    char dir[4200];
    BS_TRY(bs_path_join(dir, sizeof dir, out_dir, BS_DRIFT_SI_MOTION));
    if (bs_remove_tree(dir) != 0)
        return bs_error(BS_ERR_IO, "%s: cannot remove an earlier run's motion folder: %s", dir, strerror(errno));
    return BS_OK;
}

/* One Motion folder: the blocks [b0, b0 + nb) of every time bin. */
static bs_status write_one(const bs_drift *d, const char *dir, int b0, int nb)
{
    BS_TRY(bs_mkdir_p(dir));
    float *disp = bs_mem_alloc("drift/si-motion", (size_t)d->n_bins * (size_t)nb * sizeof *disp);
    if (!disp)
        return BS_ERR_MEMORY;
    for (int t = 0; t < d->n_bins; t++)
        for (int j = 0; j < nb; j++)
            disp[(size_t)t * nb + j] = d->motion_um[(size_t)t * d->n_blocks + b0 + j];
    char path[4300];
    int64_t s2[2] = {d->n_bins, nb}, sb[1] = {nb}, st1[1] = {d->n_bins};
    bs_status st = bs_path_join(path, sizeof path, dir, "displacement_seg0.npy");
    if (st == BS_OK)
        st = bs_npy_save(path, BS_NPY_F32, 2, s2, disp);
    bs_mem_free(disp);
    if (st == BS_OK)
        st = bs_path_join(path, sizeof path, dir, "spatial_bins_um.npy");
    if (st == BS_OK)
        st = bs_npy_save(path, BS_NPY_F32, 1, sb, d->depths_um + b0);
    if (st == BS_OK)
        st = bs_path_join(path, sizeof path, dir, "temporal_bins_s_seg0.npy");
    if (st == BS_OK)
        st = bs_npy_save(path, BS_NPY_F32, 1, st1, d->times_s);
    if (st != BS_OK)
        return st;
    cJSON *info = cJSON_CreateObject();
    cJSON_AddStringToObject(info, "version", "boundsort " BOUNDSORT_VERSION);
    cJSON_AddBoolToObject(info, "dev_mode", 0);
    cJSON_AddStringToObject(info, "object", "Motion");
    cJSON_AddNumberToObject(info, "num_segments", 1);
    cJSON_AddStringToObject(info, "direction", "y");
    cJSON_AddStringToObject(info, "interpolation_method", "linear");
    char *text = cJSON_Print(info);
    cJSON_Delete(info);
    if (!text)
        return BS_ERR_MEMORY;
    st = bs_path_join(path, sizeof path, dir, "spikeinterface_info.json");
    if (st == BS_OK)
        st = bs_write_file_atomic(path, text, strlen(text));
    free(text);
    return st;
}

bs_status bs_drift_write_si_motion(const bs_drift *d, const char *out_dir)
{
    BS_TRY(bs_drift_remove_si_motion(out_dir));
    char dir[4200], sub[4300];
    BS_TRY(bs_path_join(dir, sizeof dir, out_dir, BS_DRIFT_SI_MOTION));
    for (int s = 0; s < d->n_shanks; s++) {
        const bs_drift_shank *sh = &d->sh[s];
        if (sh->mode == BS_DRIFT_NONE)
            continue;
        if (d->n_shanks > 1) {
            snprintf(sub, sizeof sub, "%s/shank%d", dir, sh->shank);
            BS_TRY(write_one(d, sub, sh->block0, sh->n_blocks));
        } else {
            BS_TRY(write_one(d, dir, sh->block0, sh->n_blocks));
        }
    }
    return BS_OK;
}

/* ------------------------------------------------------------ reading --- */

/* A 1-D or 2-D float32/float64 array as doubles (tracked under "drift/si-motion"). */
static bs_status load_doubles(const char *dir, const char *name, int ndim, bs_npy_header *h, double **out)
{
    char path[4300];
    BS_TRY(bs_path_join(path, sizeof path, dir, name));
    void *raw = NULL;
    BS_TRY(bs_npy_load(path, "drift/si-motion", h, &raw));
    int64_t n = 1;
    for (int i = 0; i < h->ndim; i++)
        n *= h->shape[i];
    bs_status st = BS_OK;
    if (h->ndim != ndim || (h->dtype != BS_NPY_F32 && h->dtype != BS_NPY_F64) || n < 1)
        st = bs_error(BS_ERR_INPUT, "%s: expected a non-empty %d-D float32 or float64 array, got %d-D %s", path, ndim,
                      h->ndim, bs_npy_dtype_descr(h->dtype));
    double *v = st == BS_OK ? bs_mem_alloc("drift/si-motion", (size_t)n * sizeof *v) : NULL;
    if (st == BS_OK && !v)
        st = BS_ERR_MEMORY;
    for (int64_t i = 0; st == BS_OK && i < n; i++) {
        v[i] = h->dtype == BS_NPY_F32 ? (double)((const float *)raw)[i] : ((const double *)raw)[i];
        if (!isfinite(v[i]))
            st = bs_error(BS_ERR_INPUT, "%s: element %lld is not finite", path, (long long)i);
    }
    bs_mem_free(raw);
    if (st != BS_OK) {
        bs_mem_free(v);
        return st;
    }
    *out = v;
    return BS_OK;
}

/* Index i with a[i] <= x < a[i + 1] in an ascending array of n >= 2, clamped to [0, n - 2], and the weight
 * of a[i + 1] (0 or 1 outside the range: the end values hold, as SpikeInterface clips times and depths). */
static void bracket(const double *a, int64_t n, double x, int64_t *i, double *w)
{
    int64_t lo = 0, hi = n - 1;
    while (hi - lo > 1) {
        int64_t mid = (lo + hi) / 2;
        if (a[mid] <= x)
            lo = mid;
        else
            hi = mid;
    }
    *i = lo;
    double t = (x - a[lo]) / (a[lo + 1] - a[lo]);
    *w = t < 0 ? 0 : t > 1 ? 1 : t;
}

/* One Motion folder evaluated at the shank's time bins and block centres, into motion (d's layout). */
static bs_status read_one(const bs_drift *d, const bs_drift_shank *sh, const char *dir, float *motion)
{
    char path[4300];
    BS_TRY(bs_path_join(path, sizeof path, dir, "spikeinterface_info.json"));
    char *text = NULL;
    if (bs_read_text_file(path, 1 << 20, &text, NULL) != BS_OK)
        return bs_error(BS_ERR_INPUT, "%s: not a SpikeInterface Motion folder (no readable spikeinterface_info.json; "
                        "Motion.save(folder) writes one)", dir);
    cJSON *info = cJSON_Parse(text);
    free(text);
    const cJSON *obj = cJSON_GetObjectItemCaseSensitive(info, "object");
    const cJSON *seg = cJSON_GetObjectItemCaseSensitive(info, "num_segments");
    const cJSON *dirn = cJSON_GetObjectItemCaseSensitive(info, "direction");
    bs_status st = BS_OK;
    if (!cJSON_IsString(obj) || strcmp(obj->valuestring, "Motion") != 0)
        st = bs_error(BS_ERR_INPUT, "%s: not a SpikeInterface Motion (\"object\" is not \"Motion\")", path);
    else if (!cJSON_IsNumber(seg) || seg->valuedouble != 1)
        st = bs_error(BS_ERR_INPUT, "%s: a Motion of %g segments; boundsort sorts one segment", path,
                      cJSON_IsNumber(seg) ? seg->valuedouble : 0.0);
    else if (dirn && (!cJSON_IsString(dirn) || strcmp(dirn->valuestring, "y") != 0))
        st = bs_error(BS_ERR_INPUT, "%s: a Motion along '%s'; boundsort corrects motion along the shank (y)", path,
                      cJSON_IsString(dirn) ? dirn->valuestring : "?");
    cJSON_Delete(info);
    BS_TRY(st);
    bs_npy_header hs, ht, hd;
    double *ys = NULL, *ts = NULL, *disp = NULL;
    st = load_doubles(dir, "spatial_bins_um.npy", 1, &hs, &ys);
    if (st == BS_OK)
        st = load_doubles(dir, "temporal_bins_s_seg0.npy", 1, &ht, &ts);
    if (st == BS_OK)
        st = load_doubles(dir, "displacement_seg0.npy", 2, &hd, &disp);
    int64_t ny = st == BS_OK ? hs.shape[0] : 0, nt = st == BS_OK ? ht.shape[0] : 0;
    if (st == BS_OK && (hd.shape[0] != nt || hd.shape[1] != ny))
        st = bs_error(BS_ERR_INPUT, "%s: displacement_seg0.npy is %lld x %lld, expected %lld time bins x %lld spatial "
                      "bins", dir, (long long)hd.shape[0], (long long)hd.shape[1], (long long)nt, (long long)ny);
    for (int64_t i = 1; st == BS_OK && i < nt; i++)
        if (!(ts[i] > ts[i - 1]))
            st = bs_error(BS_ERR_INPUT, "%s: temporal_bins_s_seg0.npy is not increasing at %lld", dir, (long long)i);
    for (int64_t i = 1; st == BS_OK && i < ny; i++)
        if (!(ys[i] > ys[i - 1]))
            st = bs_error(BS_ERR_INPUT, "%s: spatial_bins_um.npy is not increasing at %lld", dir, (long long)i);
    for (int b = 0; st == BS_OK && b < d->n_bins; b++) {
        int64_t it = 0, iy = 0;
        double wt = 0, wy = 0;
        if (nt > 1)
            bracket(ts, nt, d->times_s[b], &it, &wt);
        for (int j = 0; j < sh->n_blocks; j++) {
            if (ny > 1)
                bracket(ys, ny, d->depths_um[sh->block0 + j], &iy, &wy);
            int64_t t1 = nt > 1 ? it + 1 : it, y1 = ny > 1 ? iy + 1 : iy;
            double v = (1 - wt) * ((1 - wy) * disp[it * ny + iy] + wy * disp[it * ny + y1]) +
                       wt * ((1 - wy) * disp[t1 * ny + iy] + wy * disp[t1 * ny + y1]);
            motion[(size_t)b * d->n_blocks + sh->block0 + j] = (float)v;
        }
    }
    bs_mem_free(ys), bs_mem_free(ts), bs_mem_free(disp);
    return st;
}

bs_status bs_drift_read_si_motion(const bs_drift *d, const char *folder, float *motion)
{
    memset(motion, 0, (size_t)d->n_bins * (size_t)d->n_blocks * sizeof *motion);
    char sub[4300];
    struct stat sb;
    for (int s = 0; s < d->n_shanks; s++) {
        const bs_drift_shank *sh = &d->sh[s];
        if (sh->mode == BS_DRIFT_NONE) {
            bs_log_warn("drift: shank %d is not corrected (%s): the imported motion is not applied there", sh->shank,
                        sh->note[0] ? sh->note : "no estimate planned");
            continue;
        }
        snprintf(sub, sizeof sub, "%s/shank%d", folder, sh->shank);
        int per_shank = stat(sub, &sb) == 0 && S_ISDIR(sb.st_mode);
        BS_TRY(read_one(d, sh, per_shank ? sub : folder, motion));
        /* boundsort's reference: each shank's motion has zero mean (docs/ALGORITHM.md §4) */
        double sum = 0;
        for (int b = 0; b < d->n_bins; b++)
            for (int j = 0; j < sh->n_blocks; j++)
                sum += motion[(size_t)b * d->n_blocks + sh->block0 + j];
        float mean = (float)(sum / ((double)d->n_bins * sh->n_blocks));
        for (int b = 0; b < d->n_bins; b++)
            for (int j = 0; j < sh->n_blocks; j++)
                motion[(size_t)b * d->n_blocks + sh->block0 + j] -= mean;
    }
    return BS_OK;
}
