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
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../include/boundsort.h"
#include "../common/fileio.h"
#include "../io/npy.h"
#include "../mem/mem.h"
#include "drift.h"

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

bs_status bs_drift_remove_si_motion(const char *out_dir)
{
    char dir[4200];
    BS_TRY(bs_path_join(dir, sizeof dir, out_dir, BS_DRIFT_SI_MOTION));
    struct stat sb;
    if (lstat(dir, &sb) == 0 && nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
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
