/*
 * compare.c - ground-truth comparison with SpikeInterface's definitions (see
 * compare.h for the mechanism and every definition), plus the loaders for
 * ground-truth and Phy folders and the table / JSON writers.
 */
#include "compare.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../export/phy.h"
#include "../export/phy_read.h"
#include "../io/npy.h"
#include "../mem/mem.h"
#include "hungarian.h"

/* ------------------------------------------------------------------ sorting */

typedef struct {
    int64_t t; /* samples */
    int32_t u; /* unit index */
} spike_rec;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_spike(const void *a, const void *b)
{
    const spike_rec *x = a, *y = b;
    if (x->t != y->t)
        return (x->t > y->t) - (x->t < y->t);
    return (x->u > y->u) - (x->u < y->u);
}

void bs_sorting_free(bs_sorting *s)
{
    if (!s)
        return;
    bs_mem_free(s->times);
    bs_mem_free(s->units);
    bs_mem_free(s->unit_ids);
    bs_mem_free(s->counts);
    memset(s, 0, sizeof *s);
}

static int32_t find_id(const int64_t *ids, int32_t n, int64_t id)
{
    int32_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (ids[mid] < id)
            lo = mid + 1;
        else if (ids[mid] > id)
            hi = mid - 1;
        else
            return mid;
    }
    return -1;
}

bs_status bs_sorting_from_arrays(const int64_t *times, const int64_t *ids, int64_t n, const int64_t *extra_ids,
                                 int32_t n_extra, const char *what, bs_sorting *out)
{
    memset(out, 0, sizeof *out);
    if (n < 0 || n_extra < 0)
        return bs_error(BS_ERR_INTERNAL, "%s: negative spike count", what);
    for (int64_t i = 0; i < n; i++)
        if (times[i] < 0 || times[i] > BS_COMPARE_MAX_TIME)
            return bs_error(BS_ERR_INPUT, "%s: spike time [%" PRId64 "] is %" PRId64 ", expected 0..2^60 samples", what,
                            i, times[i]);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0)
            return bs_error(BS_ERR_INPUT, "%s: unit id of spike %" PRId64 " is %" PRId64 ", expected >= 0", what, i,
                            ids[i]);
    for (int32_t k = 0; k < n_extra; k++)
        if (extra_ids[k] < 0)
            return bs_error(BS_ERR_INPUT, "%s: unit id %" PRId64 " is negative, expected >= 0", what, extra_ids[k]);

    /* distinct unit ids, ascending */
    size_t n_all = (size_t)n + (size_t)n_extra;
    int64_t *all = bs_mem_alloc("compare/unit_ids", n_all * sizeof(int64_t));
    if (!all)
        return BS_ERR_MEMORY;
    if (n)
        memcpy(all, ids, (size_t)n * sizeof(int64_t));
    if (n_extra)
        memcpy(all + n, extra_ids, (size_t)n_extra * sizeof(int64_t));
    qsort(all, n_all, sizeof(int64_t), cmp_i64);
    size_t n_units = 0;
    for (size_t k = 0; k < n_all; k++)
        if (n_units == 0 || all[k] != all[n_units - 1])
            all[n_units++] = all[k];
    if (n_units > (size_t)INT32_MAX / 2) {
        bs_mem_free(all);
        return bs_error(BS_ERR_INPUT, "%s: %zu distinct unit ids, at most %d supported", what, n_units,
                        INT32_MAX / 2);
    }

    bs_status st = BS_OK;
    spike_rec *rec = bs_mem_alloc("compare/spikes_tmp", (size_t)n * sizeof(spike_rec));
    out->times = bs_mem_alloc("compare/spike_times", (size_t)n * sizeof(int64_t));
    out->units = bs_mem_alloc("compare/spike_units", (size_t)n * sizeof(int32_t));
    out->unit_ids = bs_mem_alloc("compare/unit_ids", n_units * sizeof(int64_t));
    out->counts = bs_mem_calloc("compare/unit_counts", n_units ? n_units : 1, sizeof(int64_t));
    if (!rec || !out->times || !out->units || !out->unit_ids || !out->counts) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    memcpy(out->unit_ids, all, n_units * sizeof(int64_t));
    out->n_units = (int32_t)n_units;
    out->n_spikes = n;
    int sorted = 1;
    for (int64_t i = 0; i < n; i++) {
        rec[i].t = times[i];
        rec[i].u = find_id(out->unit_ids, out->n_units, ids[i]);
        if (i > 0 && cmp_spike(&rec[i - 1], &rec[i]) > 0)
            sorted = 0;
    }
    if (!sorted)
        qsort(rec, (size_t)n, sizeof(spike_rec), cmp_spike);
    for (int64_t i = 0; i < n; i++) {
        out->times[i] = rec[i].t;
        out->units[i] = rec[i].u;
        out->counts[rec[i].u]++;
    }
done:
    bs_mem_free(all);
    bs_mem_free(rec);
    if (st != BS_OK)
        bs_sorting_free(out);
    return st;
}

/* ------------------------------------------------------------------ loaders */

/* Load an integer vector ((n,) or (n, 1)) of any integer dtype into int64. */
static bs_status load_int_vector(const char *path, const char *field, int64_t **out, int64_t *n)
{
    *out = NULL;
    *n = 0;
    bs_npy_header h;
    void *raw = NULL;
    BS_TRY(bs_npy_read_header(path, &h));
    switch (h.dtype) {
    case BS_NPY_F32:
    case BS_NPY_F64:
    case BS_NPY_BOOL:
        return bs_error(BS_ERR_INPUT, "%s: %s has dtype %s, expected an integer dtype (int64, uint64, int32, ...)",
                        path, field, bs_npy_dtype_descr(h.dtype));
    default:
        break;
    }
    if (!(h.ndim == 1 || (h.ndim == 2 && h.shape[1] == 1)))
        return bs_error(BS_ERR_INPUT, "%s: %s has %d dimensions (shape[1] = %" PRId64 "), expected shape (n,) or (n, 1)",
                        path, field, h.ndim, h.ndim >= 2 ? h.shape[1] : (int64_t)0);
    BS_TRY(bs_npy_load(path, "compare/npy", &h, &raw));
    int64_t count = h.shape[0];
    int64_t *v = bs_mem_alloc("compare/npy_i64", (size_t)count * sizeof(int64_t));
    if (!v) {
        bs_mem_free(raw);
        return BS_ERR_MEMORY;
    }
    for (int64_t i = 0; i < count; i++) {
        switch (h.dtype) {
        case BS_NPY_I8: v[i] = ((const int8_t *)raw)[i]; break;
        case BS_NPY_U8: v[i] = ((const uint8_t *)raw)[i]; break;
        case BS_NPY_I16: v[i] = ((const int16_t *)raw)[i]; break;
        case BS_NPY_U16: v[i] = ((const uint16_t *)raw)[i]; break;
        case BS_NPY_I32: v[i] = ((const int32_t *)raw)[i]; break;
        case BS_NPY_U32: v[i] = ((const uint32_t *)raw)[i]; break;
        case BS_NPY_I64: v[i] = ((const int64_t *)raw)[i]; break;
        case BS_NPY_U64: {
            uint64_t x = ((const uint64_t *)raw)[i];
            if (x > (uint64_t)INT64_MAX) {
                bs_mem_free(raw);
                bs_mem_free(v);
                return bs_error(BS_ERR_INPUT, "%s: %s[%" PRId64 "] = %" PRIu64 " does not fit in int64", path, field,
                                i, x);
            }
            v[i] = (int64_t)x;
            break;
        }
        default: break;
        }
    }
    bs_mem_free(raw);
    *out = v;
    *n = count;
    return BS_OK;
}

/* Next tab-separated field of a line (modifies the line), NULL at its end. */
static char *next_field(char **cursor)
{
    char *s = *cursor;
    if (!s)
        return NULL;
    char *tab = strchr(s, '\t');
    if (tab) {
        *tab = '\0';
        *cursor = tab + 1;
    } else {
        *cursor = NULL;
    }
    size_t len = strlen(s);
    while (len && (s[len - 1] == '\r' || s[len - 1] == ' '))
        s[--len] = '\0';
    return s;
}

/* Cluster ids whose "group" is one of exclude_groups, from a Phy TSV. */
static bs_status read_excluded_clusters(const char *folder, const char *const *groups, int n_groups, int64_t **ids,
                                        int32_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    char path[4096];
    BS_TRY(bs_path_join(path, sizeof path, folder, "cluster_info.tsv"));
    if (!bs_is_file(path))
        BS_TRY(bs_path_join(path, sizeof path, folder, BS_PHY_CLUSTER_GROUP));
    if (!bs_is_file(path)) {
        bs_log_warn("%s: no cluster_info.tsv or cluster_group.tsv; no cluster is excluded", folder);
        return BS_OK;
    }
    char *text = NULL;
    size_t len = 0;
    BS_TRY(bs_read_text_file(path, (size_t)1 << 28, &text, &len));
    char *line_save = NULL;
    char *line = strtok_r(text, "\n", &line_save);
    int col_id = -1, col_group = -1, n_cols = 0;
    if (line) {
        char *cur = line;
        for (char *f; (f = next_field(&cur)) != NULL; n_cols++) {
            if (strcmp(f, "cluster_id") == 0 || (col_id < 0 && strcmp(f, "id") == 0))
                col_id = n_cols;
            else if (strcmp(f, "group") == 0)
                col_group = n_cols;
        }
    }
    if (col_id < 0 || col_group < 0) {
        free(text);
        return bs_error(BS_ERR_INPUT, "%s: header: expected tab-separated columns 'cluster_id' and 'group'", path);
    }
    size_t cap = 64, n = 0;
    int64_t *list = malloc(cap * sizeof(int64_t));
    bs_status st = list ? BS_OK : bs_error(BS_ERR_MEMORY, "out of memory reading %s", path);
    int row = 1;
    while (st == BS_OK && (line = strtok_r(NULL, "\n", &line_save)) != NULL) {
        row++;
        if (line[0] == '\0' || (line[0] == '\r' && line[1] == '\0'))
            continue;
        char *cur = line, *f, *id_text = NULL, *group = NULL;
        for (int c = 0; (f = next_field(&cur)) != NULL; c++) {
            if (c == col_id)
                id_text = f;
            if (c == col_group)
                group = f;
        }
        char *end = NULL;
        long long id = id_text ? strtoll(id_text, &end, 10) : -1;
        if (!id_text || end == id_text || *end != '\0' || id < 0) {
            st = bs_error(BS_ERR_INPUT, "%s: line %d: field 'cluster_id' is '%s', expected an integer >= 0", path, row,
                          id_text ? id_text : "");
            break;
        }
        if (!group)
            continue;
        for (int g = 0; g < n_groups; g++)
            if (strcmp(group, groups[g]) == 0) {
                if (n == cap) {
                    int64_t *grown = realloc(list, 2 * cap * sizeof(int64_t));
                    if (!grown) {
                        st = bs_error(BS_ERR_MEMORY, "out of memory reading %s", path);
                        break;
                    }
                    list = grown;
                    cap *= 2;
                }
                list[n++] = id;
                break;
            }
    }
    free(text);
    if (st != BS_OK) {
        free(list);
        return st;
    }
    qsort(list, n, sizeof(int64_t), cmp_i64);
    *ids = list;
    *n_ids = (int32_t)n;
    return BS_OK;
}

bs_status bs_sorting_load(const char *folder, const char *const *exclude_groups, int n_exclude, bs_sorting *out)
{
    memset(out, 0, sizeof *out);
    char p_times[4096], p_units[4096], p_pos[4096];
    struct stat sb;
    if (stat(folder, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return bs_error(BS_ERR_INPUT, "%s: not a folder (expected a Phy folder or a ground-truth folder)", folder);
    BS_TRY(bs_path_join(p_times, sizeof p_times, folder, "gt_spike_times.npy"));
    int is_gt = bs_is_file(p_times);
    int64_t *extra = NULL;
    int32_t n_extra = 0;
    const char *units_field;
    if (is_gt) {
        BS_TRY(bs_path_join(p_units, sizeof p_units, folder, "gt_spike_units.npy"));
        units_field = "gt_spike_units";
        BS_TRY(bs_path_join(p_pos, sizeof p_pos, folder, "gt_unit_positions.npy"));
        if (bs_is_file(p_pos)) {
            bs_npy_header h;
            BS_TRY(bs_npy_read_header(p_pos, &h));
            if (h.ndim < 1 || h.shape[0] > INT32_MAX / 2)
                return bs_error(BS_ERR_INPUT, "%s: shape: expected (U, 3) with a reasonable U", p_pos);
            n_extra = (int32_t)h.shape[0];
            extra = bs_mem_alloc("compare/unit_ids", (size_t)n_extra * sizeof(int64_t));
            if (!extra)
                return BS_ERR_MEMORY;
            for (int32_t k = 0; k < n_extra; k++)
                extra[k] = k;
        }
    } else {
        BS_TRY(bs_path_join(p_times, sizeof p_times, folder, BS_PHY_SPIKE_TIMES));
        if (!bs_is_file(p_times))
            return bs_error(BS_ERR_INPUT,
                            "%s: neither gt_spike_times.npy nor spike_times.npy found (expected a ground-truth "
                            "folder or a Phy folder)",
                            folder);
        BS_TRY(bs_path_join(p_units, sizeof p_units, folder, BS_PHY_SPIKE_CLUSTERS));
        units_field = "spike_clusters";
        if (!bs_is_file(p_units)) {
            BS_TRY(bs_path_join(p_units, sizeof p_units, folder, BS_PHY_SPIKE_TEMPLATES));
            units_field = "spike_templates";
            if (!bs_is_file(p_units))
                return bs_error(BS_ERR_INPUT, "%s: neither spike_clusters.npy nor spike_templates.npy found", folder);
        }
    }
    int64_t *times = NULL, *ids = NULL, *excluded = NULL;
    int64_t n_t = 0, n_u = 0;
    int32_t n_excluded = 0;
    bs_status st = load_int_vector(p_times, is_gt ? "gt_spike_times" : "spike_times", &times, &n_t);
    if (st == BS_OK)
        st = load_int_vector(p_units, units_field, &ids, &n_u);
    if (st == BS_OK && n_t != n_u)
        st = bs_error(BS_ERR_INPUT, "%s: %s has %" PRId64 " spikes but %s has %" PRId64 ", expected the same length",
                      folder, is_gt ? "gt_spike_times.npy" : "spike_times.npy", n_t, units_field, n_u);
    for (int64_t i = 0; st == BS_OK && i < n_t; i++)
        if (times[i] < 0)
            st = bs_error(BS_ERR_INPUT, "%s: spike time [%" PRId64 "] is %" PRId64 ", expected >= 0 samples", p_times, i,
                          times[i]);
    if (st == BS_OK && !is_gt && n_exclude > 0)
        st = read_excluded_clusters(folder, exclude_groups, n_exclude, &excluded, &n_excluded);
    if (st == BS_OK && n_excluded > 0) { /* drop the excluded clusters' spikes in place */
        int64_t k = 0;
        for (int64_t i = 0; i < n_t; i++)
            if (find_id(excluded, n_excluded, ids[i]) < 0) {
                times[k] = times[i];
                ids[k] = ids[i];
                k++;
            }
        n_t = n_u = k;
    }
    if (st == BS_OK) {
        char what[4200];
        snprintf(what, sizeof what, "%s", p_units);
        st = bs_sorting_from_arrays(times, ids, n_t, extra, n_extra, what, out);
    }
    if (st == BS_OK && n_extra > 0 && out->n_units != n_extra)
        st = bs_error(BS_ERR_INPUT, "%s: unit ids go up to %" PRId64 ", expected 0..%d (gt_unit_positions.npy has %d rows)",
                      p_units, out->unit_ids[out->n_units - 1], (int)n_extra - 1, (int)n_extra);
    if (st != BS_OK)
        bs_sorting_free(out);
    bs_mem_free(times);
    bs_mem_free(ids);
    bs_mem_free(extra);
    free(excluded);
    return st;
}

/* fs_hz and n_samples (-1 when absent or not a count) of <folder>/recording.json. */
static bs_status read_recording_json(const char *folder, double *fs_hz, int64_t *n_samples)
{
    char path[4096];
    BS_TRY(bs_path_join(path, sizeof path, folder, "recording.json"));
    char *text = NULL;
    size_t len = 0;
    BS_TRY(bs_read_text_file(path, (size_t)1 << 24, &text, &len));
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root)
        return bs_error(BS_ERR_INPUT, "%s: not valid JSON", path);
    const cJSON *fs = cJSON_GetObjectItemCaseSensitive(root, "fs_hz");
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(root, "n_samples");
    bs_status st = BS_OK;
    if (!cJSON_IsNumber(fs) || !(fs->valuedouble > 0 && fs->valuedouble <= BS_COMPARE_MAX_FS_HZ))
        st = bs_error(BS_ERR_INPUT, "%s: field 'fs_hz': expected a number in (0, 1e9] (Hz)", path);
    else
        *fs_hz = fs->valuedouble;
    *n_samples = cJSON_IsNumber(ns) && ns->valuedouble >= 0 && ns->valuedouble < 9e18 ? (int64_t)ns->valuedouble : -1;
    cJSON_Delete(root);
    return st;
}

bs_status bs_gt_read_fs(const char *gt_folder, double *fs_hz)
{
    int64_t n_samples;
    return read_recording_json(gt_folder, fs_hz, &n_samples);
}

/* The sampling rate (Hz, 0 when unknown) and length (samples, -1 when unknown) that a sorting folder
 * states: recording.json of a ground-truth folder, else params.py's sample_rate and dat_path's raw files. */
static void folder_rate_length(const char *folder, double *fs_hz, int64_t *n_samples)
{
    *fs_hz = 0;
    *n_samples = -1;
    char path[4096];
    if (bs_path_join(path, sizeof path, folder, "recording.json") == BS_OK && bs_is_file(path)) {
        if (read_recording_json(folder, fs_hz, n_samples) != BS_OK)
            *fs_hz = 0;
        return;
    }
    bs_phy_params pp;
    if (bs_phy_params_read(folder, &pp) != BS_OK)
        return;
    const bs_py_value *v = bs_phy_params_get(&pp, "sample_rate");
    if (v && v->type == BS_PY_NUM && v->num > 0)
        *fs_hz = v->num;
    double ns = bs_phy_raw_samples(folder, &pp);
    *n_samples = ns >= 0 && ns < 9e18 ? (int64_t)ns : -1;
    bs_phy_params_free(&pp);
}

int bs_compare_warn(const char *sorted_folder, const char *gt_folder, const bs_sorting *gt, const bs_sorting *sorted)
{
    double gt_fs = 0, s_fs = 0;
    int64_t gt_n = -1, s_n = -1;
    int n_warn = 0;
    bs_status st = read_recording_json(gt_folder, &gt_fs, &gt_n);
    bs_clear_error();
    if (st != BS_OK)
        return 0; /* the caller reports an unreadable recording.json */
    folder_rate_length(sorted_folder, &s_fs, &s_n);
    if (s_fs > 0 && fabs(s_fs - gt_fs) > 1e-6 * gt_fs) {
        bs_log_warn("%s: sampling rate %.9g Hz, but the ground truth %s is sampled at %.9g Hz: the spike times are "
                    "compared as samples of %.9g Hz", sorted_folder, s_fs, gt_folder, gt_fs, gt_fs);
        n_warn++;
    }
    if (s_fs > 0 && s_n >= 0 && gt_n >= 0 && fabs(s_n / s_fs - gt_n / gt_fs) > 1e-3 * fmax(s_n / s_fs, gt_n / gt_fs)) {
        bs_log_warn("%s: the sorted recording lasts %.6g s (%" PRId64 " samples), the ground truth %s %.6g s (%" PRId64
                    " samples): is this the recording that was sorted?", sorted_folder, s_n / s_fs, s_n, gt_folder,
                    gt_n / gt_fs, gt_n);
        n_warn++;
    }
    int64_t gt_last = gt->n_spikes ? gt->times[gt->n_spikes - 1] : 0;
    if (gt->n_spikes && !sorted->n_spikes) {
        bs_log_warn("%s: the sorting has no spikes: every ground-truth spike counts as missed", sorted_folder);
        n_warn++;
    } else if (gt->n_spikes && (double)sorted->times[sorted->n_spikes - 1] < 0.5 * (double)gt_last) {
        bs_log_warn("%s: the sorted spikes end at %.6g s, the ground truth's at %.6g s: was only part of the "
                    "recording sorted? The ground-truth spikes after it count as missed", sorted_folder,
                    sorted->times[sorted->n_spikes - 1] / gt_fs, gt_last / gt_fs);
        n_warn++;
    }
    return n_warn;
}

/* --------------------------------------------------------------- comparison */

void bs_compare_params_default(bs_compare_params *p)
{
    p->delta_ms = 0.4;
    p->match_score = 0.5;
    p->chance_score = 0.1;
    p->well_detected_score = 0.8;
    p->redundant_score = 0.2;
    p->overmerged_score = 0.2;
    p->snr_threshold = 5.0;
}

int64_t bs_compare_delta_samples(double delta_ms, double fs_hz)
{
    /* Same operations, in the same order, as int(delta_time / 1000 * fs). */
    return (int64_t)(delta_ms / 1000.0 * fs_hz);
}

bs_status bs_compare_match_counts(const bs_sorting *gt, const bs_sorting *sorted, int64_t delta, uint64_t *counts)
{
    const size_t n1 = (size_t)gt->n_units, n2 = (size_t)sorted->n_units, cells = n1 * n2;
    for (size_t k = 0; k < cells; k++)
        counts[k] = 0;
    if (cells == 0)
        return BS_OK;
    /* last GT spike and last sorted spike counted for each unit pair */
    int64_t *last1 = bs_mem_alloc("compare/last_match", cells * sizeof(int64_t));
    int64_t *last2 = bs_mem_alloc("compare/last_match", cells * sizeof(int64_t));
    if (!last1 || !last2) {
        bs_mem_free(last1);
        bs_mem_free(last2);
        return BS_ERR_MEMORY;
    }
    for (size_t k = 0; k < cells; k++)
        last1[k] = last2[k] = -1;
    int64_t start = 0;
    const int64_t n_a = gt->n_spikes, n_b = sorted->n_spikes;
    for (int64_t i = 0; i < n_a; i++) {
        const int64_t t1 = gt->times[i];
        while (start < n_b && sorted->times[start] < t1 - delta)
            start++;
        const size_t row = (size_t)gt->units[i] * n2;
        for (int64_t j = start; j < n_b && sorted->times[j] <= t1 + delta; j++) {
            size_t cell = row + (size_t)sorted->units[j];
            if (last1[cell] != i && last2[cell] != j) {
                last1[cell] = i;
                last2[cell] = j;
                counts[cell]++;
            }
        }
    }
    bs_mem_free(last1);
    bs_mem_free(last2);
    /* a sorted spike may count twice in a GT burst: clip to the sorted count */
    for (size_t a = 0; a < n1; a++)
        for (size_t b = 0; b < n2; b++)
            if (counts[a * n2 + b] > (uint64_t)sorted->counts[b])
                counts[a * n2 + b] = (uint64_t)sorted->counts[b];
    return BS_OK;
}

void bs_compare_result_free(bs_compare_result *r)
{
    if (!r)
        return;
    bs_mem_free(r->match_counts);
    bs_mem_free(r->agreement);
    bs_mem_free(r->hungarian_12);
    bs_mem_free(r->hungarian_21);
    bs_mem_free(r->best_12);
    bs_mem_free(r->best_21);
    bs_mem_free(r->units);
    memset(r, 0, sizeof *r);
}

/* Assignment maximizing the total of thr (n1 x n2, zeros below threshold),
 * solved on the rows and columns that hold a non-zero score. row_to_col gets
 * the column of each row or -1; col_scratch (n2 entries) is overwritten. */
static bs_status hungarian_on_support(const double *thr, int32_t n1, int32_t n2, int32_t *row_to_col,
                                      int32_t *col_scratch)
{
    int32_t *rows = bs_mem_alloc("compare/hungarian_support", (size_t)n1 * sizeof(int32_t));
    double *sub = NULL;
    int32_t *sub_r2c = NULL;
    bs_status st = BS_OK;
    if (!rows)
        return BS_ERR_MEMORY;
    int32_t nr = 0, nc = 0;
    for (int32_t b = 0; b < n2; b++)
        col_scratch[b] = -1;
    for (int32_t a = 0; a < n1; a++) {
        int any = 0;
        for (int32_t b = 0; b < n2; b++)
            if (thr[(size_t)a * (size_t)n2 + (size_t)b] != 0.0) {
                any = 1;
                if (col_scratch[b] < 0)
                    col_scratch[b] = 0;
            }
        if (any)
            rows[nr++] = a;
        row_to_col[a] = -1;
    }
    for (int32_t b = 0; b < n2; b++) /* column b -> its position in the submatrix */
        if (col_scratch[b] == 0)
            col_scratch[b] = nc++;
    if (nr == 0)
        goto done;
    sub = bs_mem_alloc("compare/hungarian_support", (size_t)nr * (size_t)nc * sizeof(double));
    sub_r2c = bs_mem_alloc("compare/hungarian_support", (size_t)nr * sizeof(int32_t));
    if (!sub || !sub_r2c) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    for (int32_t i = 0; i < nr; i++)
        for (int32_t b = 0; b < n2; b++)
            if (col_scratch[b] >= 0)
                sub[(size_t)i * (size_t)nc + (size_t)col_scratch[b]] = thr[(size_t)rows[i] * (size_t)n2 + (size_t)b];
    st = bs_hungarian_max(sub, nr, nc, sub_r2c, NULL);
    if (st == BS_OK) {
        /* reuse sub_r2c's columns: col_scratch becomes submatrix column -> b */
        for (int32_t b = 0, c = 0; b < n2; b++)
            if (col_scratch[b] >= 0)
                col_scratch[c++] = b;
        for (int32_t i = 0; i < nr; i++)
            if (sub_r2c[i] >= 0)
                row_to_col[rows[i]] = col_scratch[sub_r2c[i]];
    }
done:
    bs_mem_free(rows);
    bs_mem_free(sub);
    bs_mem_free(sub_r2c);
    return st;
}

/* Index of the first maximum of n agreements v[0], v[stride], ...; -1 when
 * n is 0 or the maximum is below `chance`. */
static int32_t best_match(const double *v, int32_t n, size_t stride, double chance)
{
    int32_t best = -1;
    double bv = 0;
    for (int32_t i = 0; i < n; i++)
        if (best < 0 || v[(size_t)i * stride] > bv) {
            best = i;
            bv = v[(size_t)i * stride];
        }
    return best >= 0 && bv >= chance ? best : -1;
}


const char *const bs_compare_loss_names[BS_LOSS_N] = {"well", "split", "missed", "absorbed", "merged", "partial"};

/* Step 7 for GT unit a (after its Hungarian partner and agreement are set). */
static bs_compare_loss classify_loss(const bs_compare_result *r, const bs_sorting *gt, const bs_sorting *sorted,
                                     int32_t a, const bs_compare_params *p, int64_t *v_id, int64_t *w_id)
{
    const int32_t n1 = r->n_gt_units, n2 = r->n_sorted_units;
    const uint64_t *row = r->match_counts + (size_t)a * (size_t)n2;
    const double n_gt = (double)gt->counts[a];
    *v_id = *w_id = -1;
    if (r->units[a].sorted_index >= 0 && r->units[a].agreement >= p->well_detected_score)
        return BS_LOSS_WELL;
    int32_t pure = 0, vs = -1;
    for (int32_t b = 0; b < n2; b++) {
        double m = (double)row[b];
        if (sorted->counts[b] > 0 && m >= 0.5 * (double)sorted->counts[b] && m >= 0.1 * n_gt)
            pure++;
        if (row[b] > 0 && (vs < 0 || row[b] > row[vs]))
            vs = b;
    }
    if (vs >= 0)
        *v_id = sorted->unit_ids[vs];
    if (pure >= 2)
        return BS_LOSS_SPLIT;
    if (vs < 0 || (double)row[vs] < 0.2 * n_gt)
        return BS_LOSS_MISSED;
    /* the GT unit other than a with the most spikes in v* */
    int32_t w = -1;
    for (int32_t g = 0; g < n1; g++) {
        uint64_t m = r->match_counts[(size_t)g * (size_t)n2 + (size_t)vs];
        if (g != a && m > 0 && (w < 0 || m > r->match_counts[(size_t)w * (size_t)n2 + (size_t)vs]))
            w = g;
    }
    const double n_v = (double)sorted->counts[vs];
    if (w >= 0)
        *w_id = gt->unit_ids[w];
    if ((double)row[vs] < 0.5 * n_v)
        return BS_LOSS_ABSORBED;
    if (w >= 0 && (double)r->match_counts[(size_t)w * (size_t)n2 + (size_t)vs] >= 0.2 * n_v)
        return BS_LOSS_MERGED;
    *w_id = -1;
    return BS_LOSS_PARTIAL;
}

bs_status bs_compare(const bs_sorting *gt, const bs_sorting *sorted, double fs_hz, const bs_compare_params *p,
                     bs_compare_result *r)
{
    memset(r, 0, sizeof *r);
    if (!(fs_hz > 0 && fs_hz <= BS_COMPARE_MAX_FS_HZ))
        return bs_error(BS_ERR_INPUT, "sampling rate %g Hz: expected a number in (0, 1e9]", fs_hz);
    if (!(p->delta_ms >= 0 && p->delta_ms <= 1000.0))
        return bs_error(BS_ERR_USAGE, "--delta-ms %g: expected a number in [0, 1000] (ms)", p->delta_ms);
    const int32_t n1 = gt->n_units, n2 = sorted->n_units;
    const size_t cells = (size_t)n1 * (size_t)n2;
    r->n_gt_units = n1;
    r->n_sorted_units = n2;
    r->fs_hz = fs_hz;
    r->delta_samples = bs_compare_delta_samples(p->delta_ms, fs_hz);
    r->match_counts = bs_mem_alloc("compare/match_counts", cells * sizeof(uint64_t));
    r->agreement = bs_mem_alloc("compare/agreement", cells * sizeof(double));
    r->hungarian_12 = bs_mem_alloc("compare/match", (size_t)n1 * sizeof(int32_t));
    r->best_12 = bs_mem_alloc("compare/match", (size_t)n1 * sizeof(int32_t));
    r->hungarian_21 = bs_mem_alloc("compare/match", (size_t)n2 * sizeof(int32_t));
    r->best_21 = bs_mem_alloc("compare/match", (size_t)n2 * sizeof(int32_t));
    r->units = bs_mem_calloc("compare/units", n1 ? (size_t)n1 : 1, sizeof(bs_compare_unit));
    r->n_gt_snr = r->n_well_detected_snr = -1;
    r->snr_threshold = p->snr_threshold;
    double *thr = bs_mem_alloc("compare/agreement_thresholded", cells * sizeof(double));
    bs_status st = BS_OK;
    if (!r->match_counts || !r->agreement || !r->hungarian_12 || !r->best_12 || !r->hungarian_21 || !r->best_21 ||
        !r->units || !thr) {
        st = BS_ERR_MEMORY;
        goto fail;
    }
    st = bs_compare_match_counts(gt, sorted, r->delta_samples, r->match_counts);
    if (st != BS_OK)
        goto fail;

    /* agreement, and the matrix thresholded at match_score for the assignment */
    for (int32_t a = 0; a < n1; a++)
        for (int32_t b = 0; b < n2; b++) {
            size_t c = (size_t)a * (size_t)n2 + (size_t)b;
            double m = (double)r->match_counts[c];
            double denom = (double)gt->counts[a] + (double)sorted->counts[b] - m;
            r->agreement[c] = denom == 0 ? 0.0 : m / denom;
            thr[c] = r->agreement[c] < p->match_score ? 0.0 : r->agreement[c];
        }

    /* Hungarian match, kept where agreement >= match_score. Rows and columns
     * that hold no score >= match_score add 0 to any assignment, so the
     * solver runs on the submatrix of the others (usually a few hundred). */
    st = hungarian_on_support(thr, n1, n2, r->hungarian_12, r->hungarian_21);
    if (st != BS_OK)
        goto fail;
    for (int32_t b = 0; b < n2; b++)
        r->hungarian_21[b] = -1;
    for (int32_t a = 0; a < n1; a++) {
        int32_t b = r->hungarian_12[a];
        if (b >= 0 && r->agreement[(size_t)a * (size_t)n2 + (size_t)b] >= p->match_score)
            r->hungarian_21[b] = a;
        else
            r->hungarian_12[a] = -1;
    }

    /* best matches: first maximum, kept where >= chance_score */
    for (int32_t a = 0; a < n1; a++)
        r->best_12[a] = best_match(r->agreement + (size_t)a * (size_t)n2, n2, 1, p->chance_score);
    for (int32_t b = 0; b < n2; b++)
        r->best_21[b] = best_match(r->agreement + (size_t)b, n1, (size_t)n2, p->chance_score);

    /* per GT unit performance ("by_unit") */
    double sum_acc = 0, sum_prec = 0, sum_rec = 0;
    for (int32_t a = 0; a < n1; a++) {
        bs_compare_unit *u = &r->units[a];
        int32_t b = r->hungarian_12[a];
        u->gt_id = gt->unit_ids[a];
        u->snr = NAN;
        u->n_gt = gt->counts[a];
        u->sorted_index = b;
        u->sorted_id = b >= 0 ? sorted->unit_ids[b] : -1;
        if (b >= 0) {
            size_t c = (size_t)a * (size_t)n2 + (size_t)b;
            u->n_sorted = sorted->counts[b];
            u->tp = (int64_t)r->match_counts[c];
            u->fn = u->n_gt - u->tp;
            u->fp = u->n_sorted - u->tp;
            u->agreement = r->agreement[c];
        } else {
            u->fn = u->n_gt;
        }
        if (u->n_gt > 0 && u->tp > 0) {
            double tp = (double)u->tp, fn = (double)u->fn, fp = (double)u->fp;
            u->accuracy = tp / (tp + fn + fp);
            u->recall = tp / (tp + fn);
            u->precision = tp / (tp + fp);
            u->false_discovery_rate = fp / (tp + fp);
            u->miss_rate = fn / (double)u->n_gt;
        }
        sum_acc += u->accuracy;
        sum_prec += u->precision;
        sum_rec += u->recall;
    }
    if (n1 > 0) {
        r->mean_accuracy = sum_acc / n1;
        r->mean_precision = sum_prec / n1;
        r->mean_recall = sum_rec / n1;
    }

    for (int32_t a = 0; a < n1; a++) {
        bs_compare_unit *u = &r->units[a];
        u->loss = classify_loss(r, gt, sorted, a, p, &u->loss_sorted, &u->loss_gt);
        r->n_loss[u->loss]++;
    }

    /* unit categories over the sorted units */
    for (int32_t b = 0; b < n2; b++) {
        int32_t a = r->hungarian_21[b];
        if (a >= 0) {
            if (r->agreement[(size_t)a * (size_t)n2 + (size_t)b] >= p->well_detected_score)
                r->n_well_detected++;
        } else {
            r->n_bad++;
            int32_t best = r->best_21[b];
            double score = best >= 0 ? r->agreement[(size_t)best * (size_t)n2 + (size_t)b] : 0.0;
            if (best < 0 || score < p->redundant_score)
                r->n_false_positive++;
            else if (r->best_12[best] != b)
                r->n_redundant++;
        }
        int over = 0;
        for (int32_t g = 0; g < n1; g++)
            if (r->agreement[(size_t)g * (size_t)n2 + (size_t)b] > p->overmerged_score)
                over++;
        if (over > 1)
            r->n_overmerged++;
    }
    bs_mem_free(thr);
    return BS_OK;
fail:
    bs_mem_free(thr);
    bs_compare_result_free(r);
    return st;
}

void bs_compare_set_snr(bs_compare_result *r, const double *snr, const bs_compare_params *p)
{
    r->snr_threshold = p->snr_threshold;
    r->n_gt_snr = r->n_well_detected_snr = 0;
    memset(r->n_loss_snr, 0, sizeof r->n_loss_snr);
    for (int32_t a = 0; a < r->n_gt_units; a++) {
        bs_compare_unit *u = &r->units[a];
        u->snr = snr[a];
        if (snr[a] >= p->snr_threshold) {
            r->n_gt_snr++;
            r->n_loss_snr[u->loss]++;
            if (u->sorted_index >= 0 && u->agreement >= p->well_detected_score)
                r->n_well_detected_snr++;
        }
    }
}

/* ------------------------------------------------------------------ output */

void bs_compare_print_table(const bs_compare_result *r, FILE *out)
{
    const int with_snr = r->n_gt_snr >= 0;
    fprintf(out, "%8s %9s %8s %9s %9s %9s %9s %-9s%s\n", "gt_unit", "n_gt", "sorted", "n_sorted", "accuracy",
            "precision", "recall", "loss", with_snr ? "       snr" : "");
    for (int32_t a = 0; a < r->n_gt_units; a++) {
        const bs_compare_unit *u = &r->units[a];
        char sid[32];
        if (u->sorted_id >= 0)
            snprintf(sid, sizeof sid, "%" PRId64, u->sorted_id);
        else
            snprintf(sid, sizeof sid, "-");
        fprintf(out, "%8" PRId64 " %9" PRId64 " %8s %9" PRId64 " %9.4f %9.4f %9.4f %-9s", u->gt_id, u->n_gt, sid,
                u->n_sorted, u->accuracy, u->precision, u->recall, bs_compare_loss_names[u->loss]);
        if (with_snr)
            fprintf(out, " %9.2f", u->snr);
        fputc('\n', out);
    }
    fprintf(out, "\nGT units:             %d\n", (int)r->n_gt_units);
    fprintf(out, "sorted units:         %d\n", (int)r->n_sorted_units);
    fprintf(out, "well detected:        %d\n", (int)r->n_well_detected);
    fprintf(out, "not well detected:   ");
    for (int k = 1; k < BS_LOSS_N; k++)
        fprintf(out, " %d %s%s", (int)r->n_loss[k], bs_compare_loss_names[k], k + 1 < BS_LOSS_N ? "," : "\n");
    if (with_snr) {
        fprintf(out, "well detected, SNR >= %g: %d of %d\n", r->snr_threshold, (int)r->n_well_detected_snr,
                (int)r->n_gt_snr);
        fprintf(out, "not well detected, SNR >= %g:", r->snr_threshold);
        for (int k = 1; k < BS_LOSS_N; k++)
            fprintf(out, " %d %s%s", (int)r->n_loss_snr[k], bs_compare_loss_names[k], k + 1 < BS_LOSS_N ? "," : "\n");
    }
    fprintf(out, "false positive units: %d\n", (int)r->n_false_positive);
    fprintf(out, "redundant units:      %d\n", (int)r->n_redundant);
    fprintf(out, "overmerged units:     %d\n", (int)r->n_overmerged);
    fprintf(out, "bad units:            %d\n", (int)r->n_bad);
    fprintf(out, "mean accuracy:        %.4f (precision %.4f, recall %.4f)\n", r->mean_accuracy, r->mean_precision,
            r->mean_recall);
    fprintf(out, "window:               %" PRId64 " samples (fs %.6g Hz)\n", r->delta_samples, r->fs_hz);
}

char *bs_compare_json(const bs_compare_result *r, const char *sorting_path, const char *gt_path)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    cJSON_AddStringToObject(root, "sorting", sorting_path ? sorting_path : "");
    cJSON_AddStringToObject(root, "gt", gt_path ? gt_path : "");
    cJSON_AddNumberToObject(root, "fs_hz", r->fs_hz);
    cJSON_AddNumberToObject(root, "delta_samples", (double)r->delta_samples);
    cJSON_AddNumberToObject(root, "n_gt_units", r->n_gt_units);
    cJSON_AddNumberToObject(root, "n_sorted_units", r->n_sorted_units);
    cJSON_AddNumberToObject(root, "n_well_detected", r->n_well_detected);
    cJSON_AddNumberToObject(root, "n_false_positive", r->n_false_positive);
    cJSON_AddNumberToObject(root, "n_redundant", r->n_redundant);
    cJSON_AddNumberToObject(root, "n_overmerged", r->n_overmerged);
    cJSON_AddNumberToObject(root, "n_bad", r->n_bad);
    cJSON_AddNumberToObject(root, "mean_accuracy", r->mean_accuracy);
    cJSON_AddNumberToObject(root, "mean_precision", r->mean_precision);
    cJSON_AddNumberToObject(root, "mean_recall", r->mean_recall);
    cJSON *loss = cJSON_AddObjectToObject(root, "n_loss");
    for (int k = 0; loss && k < BS_LOSS_N; k++)
        cJSON_AddNumberToObject(loss, bs_compare_loss_names[k], r->n_loss[k]);
    cJSON_AddNumberToObject(root, "snr_threshold", r->snr_threshold);
    if (r->n_gt_snr >= 0) {
        cJSON_AddNumberToObject(root, "n_gt_snr", r->n_gt_snr);
        cJSON_AddNumberToObject(root, "n_well_detected_snr", r->n_well_detected_snr);
        cJSON *ls = cJSON_AddObjectToObject(root, "n_loss_snr");
        for (int k = 0; ls && k < BS_LOSS_N; k++)
            cJSON_AddNumberToObject(ls, bs_compare_loss_names[k], r->n_loss_snr[k]);
    } else {
        cJSON_AddNullToObject(root, "n_gt_snr");
        cJSON_AddNullToObject(root, "n_well_detected_snr");
        cJSON_AddNullToObject(root, "n_loss_snr");
    }
    cJSON *units = cJSON_AddArrayToObject(root, "units");
    for (int32_t a = 0; units && a < r->n_gt_units; a++) {
        const bs_compare_unit *u = &r->units[a];
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        cJSON_AddNumberToObject(o, "gt_unit", (double)u->gt_id);
        cJSON_AddNumberToObject(o, "n_gt", (double)u->n_gt);
        if (u->sorted_id >= 0)
            cJSON_AddNumberToObject(o, "sorted_unit", (double)u->sorted_id);
        else
            cJSON_AddNullToObject(o, "sorted_unit");
        cJSON_AddNumberToObject(o, "n_sorted", (double)u->n_sorted);
        cJSON_AddNumberToObject(o, "tp", (double)u->tp);
        cJSON_AddNumberToObject(o, "fn", (double)u->fn);
        cJSON_AddNumberToObject(o, "fp", (double)u->fp);
        cJSON_AddNumberToObject(o, "agreement", u->agreement);
        cJSON_AddNumberToObject(o, "accuracy", u->accuracy);
        cJSON_AddNumberToObject(o, "precision", u->precision);
        cJSON_AddNumberToObject(o, "recall", u->recall);
        cJSON_AddNumberToObject(o, "false_discovery_rate", u->false_discovery_rate);
        cJSON_AddNumberToObject(o, "miss_rate", u->miss_rate);
        cJSON_AddStringToObject(o, "loss", bs_compare_loss_names[u->loss]);
        if (u->loss_sorted >= 0)
            cJSON_AddNumberToObject(o, "loss_sorted_unit", (double)u->loss_sorted);
        else
            cJSON_AddNullToObject(o, "loss_sorted_unit");
        if (u->loss_gt >= 0)
            cJSON_AddNumberToObject(o, "loss_gt_unit", (double)u->loss_gt);
        else
            cJSON_AddNullToObject(o, "loss_gt_unit");
        if (isfinite(u->snr))
            cJSON_AddNumberToObject(o, "snr", u->snr);
        else
            cJSON_AddNullToObject(o, "snr");
        cJSON_AddItemToArray(units, o);
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}
