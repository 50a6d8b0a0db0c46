/*
 * params.c - the table of parameters and OUT/params.json (see params.h).
 */
#include "params.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/boundsort.h"
#include "../common/fileio.h"
#include "stages.h"

#define P_(g, n, t, field) {g, n, t, offsetof(bs_sort_params, field)}
#define INT(g, n, field) P_(g, n, BS_PARAM_INT, field)
#define I64(g, n, field) P_(g, n, BS_PARAM_I64, field)
#define U64(g, n, field) P_(g, n, BS_PARAM_U64, field)
#define F32(g, n, field) P_(g, n, BS_PARAM_F32, field)
#define F64(g, n, field) P_(g, n, BS_PARAM_F64, field)

const bs_param_field bs_sort_param_fields[] = {
    /* batches */
    I64("batch", "batch_samples", batch_samples),
    I64("batch", "halo_samples", halo_samples),
    /* preprocessing and whitening */
    F64("preprocess", "highpass_hz", highpass_hz),
    INT("preprocess", "highpass_order", highpass_order),
    INT("preprocess", "whiten_neighbors", whiten_neighbors),
    INT("preprocess", "whiten_stride_batches", whiten_stride),
    F64("preprocess", "max_railed_fraction", max_railed_fraction),
    INT("preprocess", "no_artifact_removal", no_artifact_removal),
    F64("preprocess", "artifact_threshold", artifact.threshold),
    F64("preprocess", "artifact_extend_fraction", artifact.extend_fraction),
    F64("preprocess", "artifact_channel_fraction", artifact.channel_fraction),
    INT("preprocess", "artifact_min_channels", artifact.min_channels),
    F64("preprocess", "artifact_margin_ms", artifact.margin_ms),
    F64("preprocess", "artifact_taper_ms", artifact.taper_ms),
    /* drift */
    INT("drift", "no_drift", no_drift),
    F32("drift", "th_noise_units", drift.th),
    F32("drift", "nms_radius_um", drift.nms_radius_um),
    F32("drift", "nms_ms", drift.nms_ms),
    F32("drift", "pos_radius_um", drift.pos_radius_um),
    F32("drift", "bin_um", drift.bin_um),
    INT("drift", "n_amp_bins", drift.n_amp),
    F32("drift", "amp_max_noise_units", drift.amp_max),
    INT("drift", "n_blocks", drift.n_blocks),
    INT("drift", "rigid_max_shift_bins", drift.rigid_max_shift),
    INT("drift", "rigid_iters", drift.rigid_iters),
    INT("drift", "block_max_shift_bins", drift.block_max_shift),
    F64("drift", "smooth_sigma_shift_bins", drift.smooth_sigma[0]),
    F64("drift", "smooth_sigma_time_bins", drift.smooth_sigma[1]),
    F64("drift", "smooth_sigma_blocks", drift.smooth_sigma[2]),
    INT("drift", "min_channels", drift.min_channels),
    F32("drift", "min_height_um", drift.min_height_um),
    F32("drift", "min_block_um", drift.min_block_um),
    F32("drift", "min_spikes_per_bin", drift.min_spikes_per_bin),
    F32("drift", "sig_interp_um", drift.sig_interp_um),
    F32("drift", "krige_radius_um", drift.krige_radius_um),
    F64("drift", "ridge", drift.ridge),
    /* shapes and detection */
    INT("detect", "basis_stride_batches", basis_stride),
    INT("detect", "nt_samples", detect.nt),
    INT("detect", "nt_before_samples", detect.nt_before),
    INT("detect", "n_pcs", detect.n_pcs),
    INT("detect", "n_shapes", detect.n_shapes),
    F32("detect", "th_single_ch_whitened", detect.th_single_ch),
    F32("detect", "th_universal_whitened", detect.th_universal),
    INT("detect", "n_chans", detect.n_chans),
    INT("detect", "n_sizes", detect.n_sizes),
    F32("detect", "min_template_size_um", detect.min_template_size_um),
    INT("detect", "n_neighbors", detect.n_neighbors),
    F32("detect", "dmin_um", detect.dmin_um),
    F32("detect", "dminx_um", detect.dminx_um),
    F32("detect", "max_channel_distance_um", detect.max_channel_distance_um),
    INT("detect", "max_snippets", detect.max_snippets),
    INT("detect", "min_sample_snippets", detect.min_sample_snippets),
    U64("detect", "seed", detect.seed),
    INT("detect", "exhaustive", detect.exhaustive),
    /* clustering and template acceptance */
    INT("cluster", "n_neighbors", cluster.n_neighbors),
    INT("cluster", "downsampling", cluster.downsampling),
    INT("cluster", "max_subset", cluster.max_subset),
    INT("cluster", "n_init", cluster.n_init),
    INT("cluster", "n_init_candidates", cluster.n_init_candidates),
    INT("cluster", "n_iter", cluster.n_iter),
    F64("cluster", "lam", cluster.lam),
    I64("cluster", "min_spikes", cluster.min_spikes),
    F64("cluster", "modularity_split", cluster.modularity_split),
    F64("cluster", "bimodality_merge", cluster.bimodality_merge),
    F64("cluster", "ridge", cluster.ridge),
    F64("cluster", "ccg_threshold", cluster.ccg_threshold),
    INT("cluster", "refractory_test", cluster.refractory_test),
    U64("cluster", "seed", cluster.seed),
    F64("cluster", "x_step_um", cluster.x_step_um),
    I64("cluster", "max_center_spikes", max_center_spikes),
    INT("cluster", "min_template_spikes", min_template_spikes),
    F64("cluster", "min_template_norm_of_threshold", min_template_norm),
    /* matching */
    F32("match", "threshold_whitened", match_threshold),
    INT("match", "max_iter", match_max_iter),
    I64("match", "window_samples", match_window_samples),
    INT("match", "n_pc_chan", n_pc_chan),
    /* merges */
    F64("merge", "r_thresh", finish.merge.r_thresh),
    F64("merge", "acg_threshold", finish.merge.acg_threshold),
    F64("merge", "ccg_threshold", finish.merge.ccg_threshold),
    F64("merge", "r_thresh_underpowered", finish.merge.r_thresh_underpowered),
    INT("merge", "max_lag_samples", finish.merge.max_lag),
    F64("merge", "max_rate_hz", finish.merge.max_rate_hz),
    /* shadows */
    F64("shadow", "max_lag_ms", finish.shadow_max_lag_ms),
    INT("shadow", "half_width_samples", finish.shadow.half_width),
    I64("shadow", "min_count", finish.shadow.min_count),
    F64("shadow", "min_fraction", finish.shadow.min_fraction),
    F64("shadow", "min_ratio", finish.shadow.min_ratio),
    /* duplicates and labels */
    F64("finish", "duplicate_ms", finish.duplicate_ms),
    F64("finish", "label_acg_threshold", finish.label_acg_threshold),
};
const int bs_n_sort_param_fields = (int)(sizeof bs_sort_param_fields / sizeof bs_sort_param_fields[0]);

int bs_param_is_int(const bs_param_field *f)
{
    return f->type == BS_PARAM_INT || f->type == BS_PARAM_I64 || f->type == BS_PARAM_U64;
}

int64_t bs_param_int(const bs_sort_params *p, const bs_param_field *f)
{
    const char *a = (const char *)p + f->offset;
    int v;
    int64_t l;
    uint64_t u;
    switch (f->type) {
    case BS_PARAM_INT:
        memcpy(&v, a, sizeof v);
        return v;
    case BS_PARAM_I64:
        memcpy(&l, a, sizeof l);
        return l;
    case BS_PARAM_U64:
        memcpy(&u, a, sizeof u);
        return (int64_t)u;
    default:
        return 0;
    }
}

double bs_param_real(const bs_sort_params *p, const bs_param_field *f)
{
    const char *a = (const char *)p + f->offset;
    float x;
    double d;
    if (f->type == BS_PARAM_F32) {
        memcpy(&x, a, sizeof x);
        return x;
    }
    if (f->type == BS_PARAM_F64) {
        memcpy(&d, a, sizeof d);
        return d;
    }
    return (double)bs_param_int(p, f);
}

static cJSON *group_of(cJSON *root, const char *name)
{
    cJSON *g = cJSON_GetObjectItemCaseSensitive(root, name);
    return g ? g : cJSON_AddObjectToObject(root, name);
}

static cJSON *string_array(const char *const *s, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && (n < 0 ? s[i] != NULL : i < n); i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(s[i]));
    return a;
}

bs_status bs_sort_params_write(const bs_sort_params *p, int64_t batch_samples, int64_t halo_samples, uint64_t key,
                               const char *out_dir)
{
    bs_sort_params q = *p; /* the batch and halo as resolved */
    q.batch_samples = batch_samples;
    q.halo_samples = halo_samples;
    char hex[32], path[4200];
    snprintf(hex, sizeof hex, "%016" PRIx64, key);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "boundsort_version", BOUNDSORT_VERSION);
    cJSON_AddStringToObject(root, "resume_key", hex);
    for (int i = 0; i < bs_n_sort_param_fields; i++) {
        const bs_param_field *f = &bs_sort_param_fields[i];
        cJSON *g = group_of(root, f->group);
        double v = bs_param_is_int(f) ? (double)bs_param_int(&q, f) : bs_param_real(&q, f);
        if (f->type == BS_PARAM_F32) { /* the float's own digits, not its double expansion */
            char num[32];
            snprintf(num, sizeof num, "%.7g", v);
            v = strtod(num, NULL);
        }
        cJSON_AddNumberToObject(g, f->name, v);
    }
    cJSON *stages = cJSON_AddArrayToObject(root, "stages");
    for (int i = 0; i < bs_n_stages; i++) {
        const bs_stage *s = bs_stages[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", s->name);
        cJSON_AddItemToObject(o, "params", string_array(s->params, -1));
        cJSON_AddItemToObject(o, "files", string_array(s->files, s->n_files));
        cJSON_AddItemToArray(stages, o);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return bs_error(BS_ERR_MEMORY, "out of memory writing params.json");
    bs_status st = bs_path_join(path, sizeof path, out_dir, "params.json");
    if (st == BS_OK)
        st = bs_write_file_atomic(path, text, strlen(text));
    free(text);
    return st;
}
