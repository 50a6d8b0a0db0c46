/*
 * probe_json.c - probeinterface and Kilosort probe JSON -> bs_probe.
 *
 * The text is parsed with cJSON into a tree; the format is chosen by its keys
 * ("probes" or a top-level "contact_positions" -> probeinterface, "chanMap" ->
 * Kilosort). Each reader walks the tree once, checking every element's type
 * and range as it goes and reporting the first problem with its JSON path,
 * then fills a bs_probe with the connected contacts in file order. Shank ids
 * are kept as text (numbers formatted with %.17g) and numbered by ascending
 * order of their distinct values (see probe_json.h). The tree and the per-
 * contact scratch arrays are released before returning; the probe arrays come
 * from the accountant (tag "io/probe"), scratch under "io/probe-parse".
 */
#include "probe_json.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "../mem/mem.h"
#include "json_msg.h"
#include "probe.h"

#define SCRATCH_TAG "io/probe-parse"

/* Short description of a JSON value for messages. */
static const char *describe(const cJSON *v, char *buf, size_t n)
{
    if (!v)
        snprintf(buf, n, "nothing");
    else if (cJSON_IsNull(v))
        snprintf(buf, n, "null");
    else if (cJSON_IsBool(v))
        snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNumber(v))
        snprintf(buf, n, "%.17g", v->valuedouble);
    else if (cJSON_IsString(v))
        snprintf(buf, n, "the string \"%.40s\"", v->valuestring);
    else if (cJSON_IsArray(v))
        snprintf(buf, n, "an array");
    else if (cJSON_IsObject(v))
        snprintf(buf, n, "an object");
    else
        snprintf(buf, n, "an invalid value");
    return buf;
}

/* Array member `key` of obj. Missing: error if required, else *out = NULL. */
static bs_status get_array(const cJSON *obj, const char *key, int required, const char *name, const char *where,
                           cJSON **out)
{
    cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!a) {
        if (required)
            return bs_error(BS_ERR_INPUT, "%s: %s%s: missing, expected an array", name, where, key);
        return BS_OK;
    }
    if (!cJSON_IsArray(a)) {
        char d[64];
        return bs_error(BS_ERR_INPUT, "%s: %s%s: expected an array, got %s", name, where, key, describe(a, d, sizeof d));
    }
    *out = a;
    return BS_OK;
}

static bs_status get_number(const cJSON *v, const char *name, const char *where, const char *key, int i, int j,
                            double *out)
{
    if (!cJSON_IsNumber(v)) {
        char d[64], idx[48];
        if (j >= 0)
            snprintf(idx, sizeof idx, "[%d][%d]", i, j);
        else
            snprintf(idx, sizeof idx, "[%d]", i);
        return bs_error(BS_ERR_INPUT, "%s: %s%s%s: expected a number, got %s", name, where, key, idx,
                        describe(v, d, sizeof d));
    }
    *out = v->valuedouble;
    return BS_OK;
}

/* An integer in [lo, INT_MAX - 1]. */
static bs_status get_int(const cJSON *v, const char *name, const char *where, const char *key, int i, int lo,
                         int *out)
{
    double d = 0;
    BS_TRY(get_number(v, name, where, key, i, -1, &d));
    if (!(d == floor(d)) || d < lo || d > (double)INT_MAX - 1) {
        char buf[64];
        return bs_error(BS_ERR_INPUT, "%s: %s%s[%d]: expected an integer >= %d, got %s", name, where, key, i, lo,
                        describe(v, buf, sizeof buf));
    }
    *out = (int)d;
    return BS_OK;
}

/* ---- shank ids ------------------------------------------------------------ */

typedef struct {
    const char *text; /* points into the cJSON tree or at num */
    char num[32];
    double value;     /* numeric value when is_int */
    int is_int;
    int contact;      /* index among the connected contacts */
} shank_id;

static _Thread_local int g_numeric_ids; /* set before qsort; qsort has no context argument */

static int shank_id_cmp(const void *a, const void *b)
{
    const shank_id *s = a, *t = b;
    int c;
    if (g_numeric_ids)
        c = (s->value > t->value) - (s->value < t->value);
    else
        c = strcmp(s->text, t->text);
    if (c)
        return c;
    return (s->contact > t->contact) - (s->contact < t->contact);
}

static int shank_id_same(const shank_id *s, const shank_id *t)
{
    return g_numeric_ids ? s->value == t->value : strcmp(s->text, t->text) == 0;
}

static bs_status shank_id_set(shank_id *s, const cJSON *v, const char *name, const char *where, const char *key,
                              int i)
{
    char d[64];
    s->is_int = 0;
    if (cJSON_IsString(v)) {
        s->text = v->valuestring;
        char *end;
        double x = strtod(v->valuestring, &end);
        if (end != v->valuestring && *end == '\0' && isfinite(x) && x == floor(x)) {
            s->is_int = 1;
            s->value = x;
        }
    } else if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) {
        snprintf(s->num, sizeof s->num, "%.17g", v->valuedouble);
        s->text = s->num;
        if (v->valuedouble == floor(v->valuedouble)) {
            s->is_int = 1;
            s->value = v->valuedouble;
        }
    } else {
        return bs_error(BS_ERR_INPUT, "%s: %s%s[%d]: expected a string or a number, got %s", name, where, key, i,
                        describe(v, d, sizeof d));
    }
    return BS_OK;
}

/* Number the ids 0..n_shanks-1 by ascending distinct value; ids[k].contact is k. */
static bs_status number_shanks(shank_id *ids, int n, bs_probe *p)
{
    g_numeric_ids = 1;
    for (int k = 0; k < n; k++)
        if (!ids[k].is_int)
            g_numeric_ids = 0;
    qsort(ids, (size_t)n, sizeof *ids, shank_id_cmp);
    int rank = 0;
    for (int k = 0; k < n; k++) {
        if (k > 0 && !shank_id_same(&ids[k - 1], &ids[k]))
            rank++;
        p->shank[ids[k].contact] = rank;
    }
    p->n_shanks = rank + 1;
    return BS_OK;
}

/* ---- probeinterface --------------------------------------------------------- */

/* Largest column (device index) of a probe, -1 if none is connected. Checks
 * the indices' types and the length against contact_positions. */
static bs_status pi_max_column(const cJSON *probe, const char *name, const char *where, int *max_col)
{
    cJSON *pos, *dci;
    BS_TRY(get_array(probe, "contact_positions", 1, name, where, &pos));
    BS_TRY(get_array(probe, "device_channel_indices", 0, name, where, &dci));
    int n = cJSON_GetArraySize(pos);
    *max_col = -1;
    if (!dci) {
        *max_col = n - 1;
        return BS_OK;
    }
    int nd = cJSON_GetArraySize(dci);
    if (nd != n)
        return bs_error(BS_ERR_INPUT,
                        "%s: %sdevice_channel_indices has %d entries but contact_positions has %d: expected one "
                        "per contact",
                        name, where, nd, n);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, dci)
    {
        int c = 0;
        bs_status st = get_int(v, name, where, "device_channel_indices", i, -1, &c);
        if (st != BS_OK) {
            double d;
            if (cJSON_IsNumber(v) && (d = v->valuedouble) < -1 && d == floor(d))
                return bs_error(BS_ERR_INPUT,
                                "%s: %sdevice_channel_indices[%d]: expected -1 (not connected) or a column >= 0, "
                                "got %.17g",
                                name, where, i, d);
            return st;
        }
        if (c > *max_col)
            *max_col = c;
        i++;
    }
    return BS_OK;
}

/* contact_annotations.inter_sample_shift (SpikeInterface's name for the ADC sampling delay, samples; one
 * number per contact, as boundsort simulate and bs_probe_write_json write it): p->adc_shift of the n
 * contacts' connected ones. Absent: none. */
static bs_status read_adc_shift(const cJSON *probe, const cJSON *dci, int n, const char *name, const char *where,
                                bs_probe *p)
{
    const cJSON *ca = cJSON_GetObjectItemCaseSensitive(probe, "contact_annotations");
    const cJSON *sh = cJSON_IsObject(ca) ? cJSON_GetObjectItemCaseSensitive(ca, "inter_sample_shift") : NULL;
    if (!sh)
        return BS_OK;
    char d[64];
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) != n)
        return bs_error(BS_ERR_INPUT, "%s: %scontact_annotations.inter_sample_shift: expected %d numbers (one per "
                                      "contact), got %s",
                        name, where, n, describe(sh, d, sizeof d));
    double *v = bs_mem_alloc(SCRATCH_TAG, (size_t)p->n_chan * sizeof *v);
    if (!v)
        return BS_ERR_MEMORY;
    bs_status st = BS_OK;
    const cJSON *e = sh->child, *dv = dci ? dci->child : NULL;
    for (int i = 0, k = 0; i < n && st == BS_OK; i++, e = e->next, dv = dv ? dv->next : NULL) {
        double x = 0;
        st = get_number(e, name, where, "contact_annotations.inter_sample_shift", i, -1, &x);
        if (st == BS_OK && (!dv || dv->valuedouble >= 0))
            v[k++] = x;
    }
    if (st == BS_OK) {
        char what[600];
        snprintf(what, sizeof what, "%s: %scontact_annotations.inter_sample_shift", name, where);
        st = bs_probe_set_adc_shift(p, v, what);
    }
    bs_mem_free(v);
    return st;
}

static bs_status pi_read_probe(const cJSON *probe, const char *name, const char *where, bs_probe *p)
{
    char d[64];
    if (!cJSON_IsObject(probe))
        return bs_error(BS_ERR_INPUT, "%s: %s: expected a probe object, got %s", name, where,
                        describe(probe, d, sizeof d));
    int max_col;
    BS_TRY(pi_max_column(probe, name, where, &max_col));
    cJSON *pos, *dci, *shanks;
    BS_TRY(get_array(probe, "contact_positions", 1, name, where, &pos));
    BS_TRY(get_array(probe, "device_channel_indices", 0, name, where, &dci));
    BS_TRY(get_array(probe, "shank_ids", 0, name, where, &shanks));
    int n = cJSON_GetArraySize(pos);
    if (n == 0)
        return bs_error(BS_ERR_INPUT, "%s: %scontact_positions: expected at least one contact, got none", name, where);

    int ndim = 0;
    const cJSON *jnd = cJSON_GetObjectItemCaseSensitive(probe, "ndim");
    if (jnd) {
        if (!cJSON_IsNumber(jnd) || (jnd->valuedouble != 2 && jnd->valuedouble != 3))
            return bs_error(BS_ERR_INPUT, "%s: %sndim: expected 2 or 3, got %s", name, where,
                            describe(jnd, d, sizeof d));
        ndim = (int)jnd->valuedouble;
    }
    double scale = 1.0;
    const cJSON *units = cJSON_GetObjectItemCaseSensitive(probe, "si_units");
    if (units) {
        if (cJSON_IsString(units) && strcmp(units->valuestring, "um") == 0)
            scale = 1.0;
        else if (cJSON_IsString(units) && strcmp(units->valuestring, "mm") == 0)
            scale = 1000.0;
        else
            return bs_error(BS_ERR_INPUT, "%s: %ssi_units: expected \"um\" or \"mm\", got %s", name, where,
                            describe(units, d, sizeof d));
    }
    if (shanks && cJSON_GetArraySize(shanks) != n)
        return bs_error(BS_ERR_INPUT, "%s: %sshank_ids has %d entries but contact_positions has %d: expected one per "
                                      "contact",
                        name, where, cJSON_GetArraySize(shanks), n);

    /* connected contacts */
    int n_used = 0;
    if (dci) {
        const cJSON *v;
        cJSON_ArrayForEach(v, dci)
            n_used += v->valuedouble >= 0;
    } else {
        n_used = n;
    }
    if (n_used == 0)
        return bs_error(BS_ERR_INPUT,
                        "%s: %sdevice_channel_indices: every entry is -1, expected at least one connected contact",
                        name, where);
    BS_TRY(bs_probe_alloc(p, n_used));
    shank_id *ids = bs_mem_calloc(SCRATCH_TAG, (size_t)n_used, sizeof *ids);
    if (!ids) {
        bs_probe_free(p);
        return BS_ERR_MEMORY;
    }
    bs_status st = BS_OK;
    const cJSON *row = pos->child, *dv = dci ? dci->child : NULL, *sv = shanks ? shanks->child : NULL;
    int k = 0;
    for (int i = 0; i < n && st == BS_OK; i++) {
        int col = dv ? (int)dv->valuedouble : i;
        if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) < 2 || (ndim && cJSON_GetArraySize(row) != ndim)) {
            st = bs_error(BS_ERR_INPUT, "%s: %scontact_positions[%d]: expected %d numbers (x, y%s), got %s", name,
                          where, i, ndim ? ndim : 2, ndim == 3 ? ", z" : "", describe(row, d, sizeof d));
            break;
        }
        double x = 0, y = 0;
        st = get_number(row->child, name, where, "contact_positions", i, 0, &x);
        if (st == BS_OK)
            st = get_number(row->child->next, name, where, "contact_positions", i, 1, &y);
        if (st == BS_OK && col >= 0) {
            p->column[k] = col;
            p->x_um[k] = x * scale;
            p->y_um[k] = y * scale;
            if (sv) {
                st = shank_id_set(&ids[k], sv, name, where, "shank_ids", i);
            } else {
                ids[k].text = "";
                ids[k].is_int = 0;
            }
            ids[k].contact = k;
            k++;
        }
        row = row->next;
        if (dv)
            dv = dv->next;
        if (sv)
            sv = sv->next;
    }
    if (st == BS_OK)
        number_shanks(ids, n_used, p);
    bs_mem_free(ids);
    if (st == BS_OK)
        st = read_adc_shift(probe, dci, n, name, where, p);
    if (st == BS_OK) {
        const cJSON *ann = cJSON_GetObjectItemCaseSensitive(probe, "annotations");
        const cJSON *model = cJSON_IsObject(ann) ? cJSON_GetObjectItemCaseSensitive(ann, "model_name") : NULL;
        if (cJSON_IsString(model))
            snprintf(p->model, sizeof p->model, "%s", model->valuestring);
    } else {
        bs_probe_free(p);
    }
    return st;
}

static bs_status pi_read_group(const cJSON *root, const char *name, int probe_index, bs_probe *p, int *required)
{
    cJSON *probes = cJSON_GetObjectItemCaseSensitive(root, "probes");
    char d[64];
    if (!probes) { /* a bare probe object */
        if (probe_index != 0)
            return bs_error(BS_ERR_INPUT, "%s: holds a single probe, probe index %d does not exist", name,
                            probe_index);
        int max_col;
        BS_TRY(pi_max_column(root, name, "", &max_col));
        *required = max_col + 1;
        return pi_read_probe(root, name, "", p);
    }
    if (!cJSON_IsArray(probes))
        return bs_error(BS_ERR_INPUT, "%s: probes: expected an array of probe objects, got %s", name,
                        describe(probes, d, sizeof d));
    int n = cJSON_GetArraySize(probes);
    if (n == 0)
        return bs_error(BS_ERR_INPUT, "%s: probes: expected at least one probe, got an empty array", name);
    if (probe_index < 0 || probe_index >= n)
        return bs_error(BS_ERR_INPUT, "%s: probes: probe index %d requested, expected 0..%d", name, probe_index,
                        n - 1);
    int max_col = -1, i = 0;
    const cJSON *pr;
    cJSON_ArrayForEach(pr, probes)
    {
        char where[48];
        snprintf(where, sizeof where, "probes[%d].", i);
        if (!cJSON_IsObject(pr))
            return bs_error(BS_ERR_INPUT, "%s: probes[%d]: expected a probe object, got %s", name, i,
                            describe(pr, d, sizeof d));
        int m;
        BS_TRY(pi_max_column(pr, name, where, &m));
        if (m > max_col)
            max_col = m;
        i++;
    }
    *required = max_col + 1;
    char where[48];
    snprintf(where, sizeof where, "probes[%d].", probe_index);
    return pi_read_probe(cJSON_GetArrayItem(probes, probe_index), name, where, p);
}

/* ---- Kilosort ------------------------------------------------------------------ */

static bs_status ks_read(const cJSON *root, const char *name, bs_probe *p, int *required)
{
    cJSON *cm, *xc, *yc, *kc;
    BS_TRY(get_array(root, "chanMap", 1, name, "", &cm));
    BS_TRY(get_array(root, "xc", 1, name, "", &xc));
    BS_TRY(get_array(root, "yc", 1, name, "", &yc));
    BS_TRY(get_array(root, "kcoords", 0, name, "", &kc));
    int n = cJSON_GetArraySize(cm);
    if (n == 0)
        return bs_error(BS_ERR_INPUT, "%s: chanMap: expected at least one channel, got an empty array", name);
    const char *keys[3] = {"xc", "yc", "kcoords"};
    const cJSON *arrs[3] = {xc, yc, kc};
    for (int a = 0; a < 3; a++)
        if (arrs[a] && cJSON_GetArraySize(arrs[a]) != n)
            return bs_error(BS_ERR_INPUT, "%s: %s has %d entries but chanMap has %d: expected one per channel", name,
                            keys[a], cJSON_GetArraySize(arrs[a]), n);
    int n_chan_file = 0;
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(root, "n_chan");
    if (jn) {
        double v = cJSON_IsNumber(jn) ? jn->valuedouble : -1;
        if (!(v >= 1 && v == floor(v) && v <= INT_MAX - 1)) {
            char d[64];
            return bs_error(BS_ERR_INPUT, "%s: n_chan: expected a positive integer (columns in the binary), got %s",
                            name, describe(jn, d, sizeof d));
        }
        n_chan_file = (int)v;
    }
    BS_TRY(bs_probe_alloc(p, n));
    shank_id *ids = bs_mem_calloc(SCRATCH_TAG, (size_t)n, sizeof *ids);
    if (!ids) {
        bs_probe_free(p);
        return BS_ERR_MEMORY;
    }
    bs_status st = BS_OK;
    int max_col = -1;
    const cJSON *c = cm->child, *x = xc->child, *y = yc->child, *s = kc ? kc->child : NULL;
    for (int i = 0; i < n && st == BS_OK; i++) {
        st = get_int(c, name, "", "chanMap", i, 0, &p->column[i]);
        if (st == BS_OK && n_chan_file > 0 && p->column[i] >= n_chan_file)
            st = bs_error(BS_ERR_INPUT, "%s: chanMap[%d] = %d: expected a column in 0..%d (n_chan = %d)", name, i,
                          p->column[i], n_chan_file - 1, n_chan_file);
        if (st == BS_OK)
            st = get_number(x, name, "", "xc", i, -1, &p->x_um[i]);
        if (st == BS_OK)
            st = get_number(y, name, "", "yc", i, -1, &p->y_um[i]);
        if (st == BS_OK) {
            if (s)
                st = shank_id_set(&ids[i], s, name, "", "kcoords", i);
            else
                ids[i].text = "";
            ids[i].contact = i;
        }
        if (st == BS_OK && p->column[i] > max_col)
            max_col = p->column[i];
        c = c->next;
        x = x->next;
        y = y->next;
        if (s)
            s = s->next;
    }
    if (st == BS_OK)
        number_shanks(ids, n, p);
    bs_mem_free(ids);
    if (st != BS_OK) {
        bs_probe_free(p);
        return st;
    }
    *required = n_chan_file > 0 ? n_chan_file : max_col + 1;
    return BS_OK;
}

/* ---- entry points ------------------------------------------------------------- */

bs_status bs_probe_json_parse(const char *text, size_t len, const char *name, int probe_index, bs_probe *p,
                              int *required_cols)
{
    memset(p, 0, sizeof *p);
    if (required_cols)
        *required_cols = 0;
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root)
        return bs_json_parse_error(text, len, name, "a probe file");
    bs_status st;
    int required = 0;
    if (!cJSON_IsObject(root)) {
        st = bs_error(BS_ERR_INPUT, "%s: expected a JSON object (a probeinterface ProbeGroup or a Kilosort probe)",
                      name);
    } else if (cJSON_HasObjectItem(root, "probes") || cJSON_HasObjectItem(root, "contact_positions")) {
        st = pi_read_group(root, name, probe_index, p, &required);
    } else if (cJSON_HasObjectItem(root, "chanMap")) {
        st = ks_read(root, name, p, &required);
    } else {
        st = bs_error(BS_ERR_INPUT,
                      "%s: unknown probe format: expected the key 'probes' (probeinterface) or 'chanMap' (Kilosort)",
                      name);
    }
    cJSON_Delete(root);
    if (st == BS_OK) {
        st = bs_probe_validate(p, required, name);
        if (st != BS_OK)
            bs_probe_free(p);
    }
    if (st == BS_OK && required_cols)
        *required_cols = required;
    return st;
}

bs_status bs_probe_json_load(const char *path, int probe_index, bs_probe *p, int *required_cols)
{
    memset(p, 0, sizeof *p);
    char *text = NULL;
    size_t len = 0;
    bs_status st = bs_read_text_file(path, BS_PROBE_JSON_MAX_BYTES, &text, &len);
    if (st != BS_OK)
        return bs_error_context(st, "probe file");
    st = bs_probe_json_parse(text, len, path, probe_index, p, required_cols);
    free(text);
    return st;
}

/* ---- geometry ------------------------------------------------------------------ */

typedef struct {
    int shank;
    double x, y;
} xy_site;

static int xy_site_cmp(const void *a, const void *b)
{
    const xy_site *s = a, *t = b;
    if (s->shank != t->shank)
        return s->shank < t->shank ? -1 : 1;
    if (s->x != t->x)
        return s->x < t->x ? -1 : 1;
    return (s->y > t->y) - (s->y < t->y);
}

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bs_probe_vertical_pitch_um(const bs_probe *p)
{
    if (p->n_chan < 2)
        return 0.0;
    size_t n = (size_t)p->n_chan;
    xy_site *s = bs_mem_alloc(SCRATCH_TAG, n * sizeof *s);
    double *dy = bs_mem_alloc(SCRATCH_TAG, n * sizeof *dy);
    double best = 0.0;
    if (!s || !dy)
        goto done;
    for (size_t i = 0; i < n; i++)
        s[i] = (xy_site){p->shank[i], p->x_um[i], p->y_um[i]};
    qsort(s, n, sizeof *s, xy_site_cmp);
    size_t m = 0;
    for (size_t i = 1; i < n; i++)
        if (s[i].shank == s[i - 1].shank && fabs(s[i].x - s[i - 1].x) <= 1e-6 && s[i].y - s[i - 1].y > 1e-6)
            dy[m++] = s[i].y - s[i - 1].y;
    qsort(dy, m, sizeof *dy, dbl_cmp);
    size_t best_count = 0;
    for (size_t i = 0; i < m;) {
        size_t j = i;
        while (j < m && dy[j] - dy[i] <= 1e-6)
            j++;
        if (j - i > best_count) { /* strictly more: ties keep the smaller spacing */
            best_count = j - i;
            best = dy[i];
        }
        i = j;
    }
done:
    bs_mem_free(s);
    bs_mem_free(dy);
    return best;
}
