/*
 * probe.c - the bs_probe structure: allocation, validation, and writing it as
 * a probeinterface JSON ProbeGroup (one probe, µm, device_channel_indices =
 * file columns) that probeinterface, SpikeInterface and boundsort itself read.
 * Also the small bs_recording helpers shared by every reader.
 */
#include "probe.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "../mem/mem.h"

bs_status bs_probe_alloc(bs_probe *p, int n_chan)
{
    memset(p, 0, sizeof *p);
    if (n_chan < 1)
        return bs_error(BS_ERR_INPUT, "a probe needs at least one channel (got %d)", n_chan);
    p->n_chan = n_chan;
    p->column = bs_mem_calloc("io/probe", (size_t)n_chan, sizeof *p->column);
    p->x_um = bs_mem_calloc("io/probe", (size_t)n_chan, sizeof *p->x_um);
    p->y_um = bs_mem_calloc("io/probe", (size_t)n_chan, sizeof *p->y_um);
    p->shank = bs_mem_calloc("io/probe", (size_t)n_chan, sizeof *p->shank);
    if (!p->column || !p->x_um || !p->y_um || !p->shank) {
        bs_probe_free(p);
        return BS_ERR_MEMORY;
    }
    p->n_shanks = 1;
    return BS_OK;
}

void bs_probe_free(bs_probe *p)
{
    bs_mem_free(p->column);
    bs_mem_free(p->x_um);
    bs_mem_free(p->y_um);
    bs_mem_free(p->shank);
    bs_mem_free(p->adc_shift);
    memset(p, 0, sizeof *p);
}

bs_status bs_probe_set_adc_shift(bs_probe *p, const double *shift, const char *what)
{
    for (int c = 0; c < p->n_chan; c++)
        if (!(shift[c] >= 0 && shift[c] < 1))
            return bs_error(BS_ERR_INPUT, "%s: the ADC sampling delay of channel %d is %g samples, expected 0 <= d < 1",
                            what, c, shift[c]);
    bs_mem_free(p->adc_shift);
    p->adc_shift = bs_mem_alloc("io/probe", (size_t)p->n_chan * sizeof *p->adc_shift);
    if (!p->adc_shift)
        return BS_ERR_MEMORY;
    for (int c = 0; c < p->n_chan; c++)
        p->adc_shift[c] = (float)shift[c];
    return BS_OK;
}

typedef struct {
    double x, y;
    int shank, ch;
} site;

static int site_cmp(const void *a, const void *b)
{
    const site *s = a, *t = b;
    if (s->shank != t->shank)
        return s->shank < t->shank ? -1 : 1;
    if (s->x != t->x)
        return s->x < t->x ? -1 : 1;
    if (s->y != t->y)
        return s->y < t->y ? -1 : 1;
    return 0;
}

static int double_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bs_probe_median_depth_step(const bs_probe *probe)
{
    int n = probe->n_chan;
    double *y = malloc((size_t)(n > 0 ? n : 1) * sizeof *y);
    if (!y)
        return 1.0;
    memcpy(y, probe->y_um, (size_t)n * sizeof *y);
    qsort(y, (size_t)n, sizeof *y, double_cmp);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (m == 0 || y[i] != y[m - 1])
            y[m++] = y[i];
    double step = 1.0;
    if (m > 1) {
        for (int i = 0; i + 1 < m; i++)
            y[i] = y[i + 1] - y[i];
        qsort(y, (size_t)(m - 1), sizeof *y, double_cmp);
        step = (m - 1) % 2 ? y[(m - 1) / 2] : 0.5 * (y[(m - 1) / 2 - 1] + y[(m - 1) / 2]);
    }
    free(y);
    return step;
}

typedef struct {
    double y, x;
    int ch;
} depth_key;

static int depth_cmp(const void *a, const void *b)
{
    const depth_key *p = a, *q = b;
    if (p->y != q->y)
        return p->y < q->y ? -1 : 1;
    if (p->x != q->x)
        return p->x < q->x ? -1 : 1;
    return (p->ch > q->ch) - (p->ch < q->ch);
}

int bs_probe_depth_order(const bs_probe *p, int min_channels, int keep_if_sorted, int *order, int *start)
{
    depth_key *k = malloc((size_t)(p->n_chan > 0 ? p->n_chan : 1) * sizeof *k);
    if (!k)
        return -1;
    int n = 0, g = 0;
    start[0] = 0;
    for (int s = 0; s < p->n_shanks; s++) {
        int m = 0, sorted = 1;
        for (int c = 0; c < p->n_chan; c++) {
            if (p->shank[c] != s)
                continue;
            k[m] = (depth_key){p->y_um[c], p->x_um[c], c};
            sorted &= m == 0 || k[m].y >= k[m - 1].y;
            m++;
        }
        if (m < min_channels)
            continue;
        if (!(keep_if_sorted && sorted))
            qsort(k, (size_t)m, sizeof *k, depth_cmp);
        for (int i = 0; i < m; i++)
            order[n + i] = k[i].ch;
        n += m;
        start[++g] = n;
    }
    free(k);
    return g;
}

int bs_probe_shanks_in_use(const bs_probe *p, int *ids)
{
    int n = 0;
    for (int s = 0; s < p->n_shanks; s++) {
        int used = 0;
        for (int c = 0; c < p->n_chan && !used; c++)
            used = p->shank[c] == s;
        if (used && ids)
            ids[n] = s;
        n += used;
    }
    return n;
}

static int int_cmp(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

bs_status bs_probe_validate(const bs_probe *p, int n_cols, const char *name)
{
    if (p->n_chan < 1)
        return bs_error(BS_ERR_INPUT, "%s: the probe has no channels", name);
    int max_shank = 0;
    for (int i = 0; i < p->n_chan; i++) {
        if (!isfinite(p->x_um[i]) || !isfinite(p->y_um[i]))
            return bs_error(BS_ERR_INPUT, "%s: channel %d has a non-finite position (%g, %g) µm", name, i,
                            p->x_um[i], p->y_um[i]);
        if (p->shank[i] < 0)
            return bs_error(BS_ERR_INPUT, "%s: channel %d has a negative shank index %d", name, i, p->shank[i]);
        if (p->column[i] < 0 || (n_cols > 0 && p->column[i] >= n_cols))
            return bs_error(BS_ERR_INPUT, "%s: channel %d maps to data column %d, expected 0..%d", name, i,
                            p->column[i], n_cols - 1);
        if (p->shank[i] > max_shank)
            max_shank = p->shank[i];
    }
    if (p->n_shanks != max_shank + 1)
        return bs_error(BS_ERR_INPUT, "%s: n_shanks is %d but shank indices reach %d", name, p->n_shanks, max_shank);
    site *s = malloc((size_t)p->n_chan * sizeof *s);
    int *cols = malloc((size_t)p->n_chan * sizeof *cols);
    if (!s || !cols) {
        free(s);
        free(cols);
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
    }
    for (int i = 0; i < p->n_chan; i++) {
        s[i] = (site){p->x_um[i], p->y_um[i], p->shank[i], i};
        cols[i] = p->column[i];
    }
    qsort(s, (size_t)p->n_chan, sizeof *s, site_cmp);
    qsort(cols, (size_t)p->n_chan, sizeof *cols, int_cmp);
    bs_status st = BS_OK;
    for (int i = 1; i < p->n_chan && st == BS_OK; i++) {
        if (site_cmp(&s[i - 1], &s[i]) == 0)
            st = bs_error(BS_ERR_INPUT, "%s: channels %d and %d share the position (%g, %g) µm on shank %d", name,
                          s[i - 1].ch, s[i].ch, s[i].x, s[i].y, s[i].shank);
        else if (cols[i - 1] == cols[i])
            st = bs_error(BS_ERR_INPUT, "%s: two channels read the same data column %d", name, cols[i]);
    }
    free(s);
    free(cols);
    return st;
}

bs_status bs_probe_write_json(const bs_probe *p, const char *path)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "specification", "probeinterface");
    cJSON_AddStringToObject(root, "version", "0.3.0");
    cJSON *probes = cJSON_AddArrayToObject(root, "probes");
    cJSON *probe = cJSON_CreateObject();
    cJSON_AddItemToArray(probes, probe);
    cJSON_AddNumberToObject(probe, "ndim", 2);
    cJSON_AddStringToObject(probe, "si_units", "um");
    cJSON *ann = cJSON_AddObjectToObject(probe, "annotations");
    cJSON_AddStringToObject(ann, "model_name", p->model[0] ? p->model : "unknown");
    cJSON_AddStringToObject(ann, "manufacturer", "");
    cJSON *pos = cJSON_AddArrayToObject(probe, "contact_positions");
    cJSON *shapes = cJSON_AddArrayToObject(probe, "contact_shapes");
    cJSON *params = cJSON_AddArrayToObject(probe, "contact_shape_params");
    cJSON *ids = cJSON_AddArrayToObject(probe, "contact_ids");
    cJSON *shank = cJSON_AddArrayToObject(probe, "shank_ids");
    cJSON *dev = cJSON_AddArrayToObject(probe, "device_channel_indices");
    cJSON *axes = cJSON_AddArrayToObject(probe, "contact_plane_axes"); /* probeinterface requires it */
    for (int i = 0; i < p->n_chan; i++) {
        cJSON *xy = cJSON_CreateArray();
        cJSON_AddItemToArray(xy, cJSON_CreateNumber(p->x_um[i]));
        cJSON_AddItemToArray(xy, cJSON_CreateNumber(p->y_um[i]));
        cJSON_AddItemToArray(pos, xy);
        cJSON_AddItemToArray(shapes, cJSON_CreateString("square"));
        cJSON *sp = cJSON_CreateObject();
        cJSON_AddNumberToObject(sp, "width", 12);
        cJSON_AddItemToArray(params, sp);
        char id[32], sh[16];
        snprintf(id, sizeof id, "e%d", i);
        snprintf(sh, sizeof sh, "%d", p->shank[i]);
        cJSON_AddItemToArray(ids, cJSON_CreateString(id));
        cJSON_AddItemToArray(shank, cJSON_CreateString(sh));
        cJSON_AddItemToArray(dev, cJSON_CreateNumber(p->column[i]));
        const double unit_axes[2][2] = {{1, 0}, {0, 1}};
        cJSON *ax = cJSON_CreateArray();
        for (int a = 0; a < 2; a++)
            cJSON_AddItemToArray(ax, cJSON_CreateDoubleArray(unit_axes[a], 2));
        cJSON_AddItemToArray(axes, ax);
    }
    if (p->adc_shift) { /* SpikeInterface's property name for the ADC sampling delay */
        cJSON *ca = cJSON_AddObjectToObject(probe, "contact_annotations");
        cJSON *sh = cJSON_AddArrayToObject(ca, "inter_sample_shift");
        for (int i = 0; i < p->n_chan; i++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber(p->adc_shift[i]));
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory formatting the probe", path);
    bs_status st = bs_write_file_atomic(path, text, strlen(text));
    free(text);
    return st;
}

size_t bs_sample_bytes(bs_sample_type t)
{
    switch (t) {
    case BS_SAMPLE_I16:
    case BS_SAMPLE_U16:
    case BS_SAMPLE_F16: return 2;
    case BS_SAMPLE_I32:
    case BS_SAMPLE_F32: return 4;
    }
    return 0;
}

double bs_recording_duration_s(const bs_recording *rec)
{
    return rec->fs_hz > 0 ? (double)rec->n_samples / rec->fs_hz : 0.0;
}
