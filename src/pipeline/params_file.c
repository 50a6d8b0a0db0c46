/*
 * params_file.c - parameters files: `sort --params FILE` and
 * `boundsort params --defaults` (params.h).
 *
 * Mechanism. The file is read whole (it is small: at most 1 MiB), its
 * comments removed with cJSON_Minify, and parsed. Each top-level key is
 * resolved to one or more fields of the table in params.c (a group object,
 * "group.name", or a Kilosort 4 name) and each value set through
 * bs_param_set, which checks the field's range, so nothing outside the
 * ranges the stages were written for reaches them. A bitmap of the fields set
 * catches a field named twice. Unknown keys are reported with the known
 * spelling nearest to them by edit distance (case-insensitive), over every
 * accepted spelling: group names, "group.name", names within the group, and
 * Kilosort names.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/boundsort.h"
#include "../common/fileio.h"
#include "params.h"

#define MAX_FILE_BYTES ((size_t)1 << 20)
#define MAX_FIELDS 256

/* Keys of OUT/params.json that are not parameters: ignored when it is given back. */
static const char *const RUN_KEYS[] = {"boundsort_version", "resume_key", "stages"};
/* Kilosort 4 settings that describe the recording, not the sort: the recording options carry them. */
static const char *const RECORDING_KEYS[] = {"fs", "n_chan_bin", "data_dtype", "filename", "data_dir", "probe",
                                             "probe_name", "probe_path", "shift", "scale"};
/* Kilosort 4 names that set something other than one field (params.h). */
static const char *const SPECIAL_KS[] = {"nblocks", "nskip", "drift_smoothing"};

typedef struct {
    const char *name;          /* file name, for messages */
    bs_sort_params *p;
    bs_sort_params defaults;   /* what null restores */
    const char *set_by[MAX_FIELDS]; /* key that set each field, NULL while unset */
} loader;

static int field_index(const bs_param_field *f)
{
    return (int)(f - bs_sort_param_fields);
}

static int lower(int c)
{
    return tolower((unsigned char)c);
}

/* Edit distance, case-insensitive; both at most 63 characters compared. */
static int distance(const char *a, const char *b)
{
    int n = (int)strnlen(a, 63), m = (int)strnlen(b, 63);
    int row[64];
    for (int j = 0; j <= m; j++)
        row[j] = j;
    for (int i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= m; j++) {
            int up = row[j];
            int best = diag + (lower(a[i - 1]) != lower(b[j - 1]));
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[m];
}

static void consider(const char *key, const char *cand, const char *report, int *best_d, char *buf, size_t len)
{
    int d = cand ? distance(key, cand) : 1 << 30;
    if (d < *best_d) {
        *best_d = d;
        snprintf(buf, len, "%s", report);
    }
}

/* The accepted spelling nearest to key, written to buf: a field as "group.name" (whether the key resembles its
 * name or its full spelling), a Kilosort name or a group as it is. Within a group (group != NULL) only that
 * group's fields are candidates. */
static const char *nearest(const char *key, const char *group, char *buf, size_t len)
{
    int best_d = 1 << 30;
    buf[0] = '\0';
    for (int i = 0; i < bs_n_sort_param_fields; i++) {
        const bs_param_field *f = &bs_sort_param_fields[i];
        if (group && strcmp(f->group, group) != 0)
            continue;
        char full[128];
        snprintf(full, sizeof full, "%s.%s", f->group, f->name);
        consider(key, f->name, full, &best_d, buf, len);
        if (group)
            continue;
        consider(key, full, full, &best_d, buf, len);
        consider(key, f->kilosort, f->kilosort, &best_d, buf, len);
        consider(key, f->group, f->group, &best_d, buf, len);
    }
    for (size_t k = 0; !group && k < sizeof SPECIAL_KS / sizeof SPECIAL_KS[0]; k++)
        consider(key, SPECIAL_KS[k], SPECIAL_KS[k], &best_d, buf, len);
    return buf;
}

static bs_status unknown(const loader *L, const char *key, const char *group)
{
    char buf[160];
    return bs_error(BS_ERR_USAGE, "%s: unknown parameter '%s%s%s'; the nearest known one is '%s' "
                    "(boundsort params --defaults lists them all)",
                    L->name, group ? group : "", group ? "." : "", key, nearest(key, group, buf, sizeof buf));
}

/* The number a JSON value gives field f: numbers, true/false as 1/0, null the default. */
static bs_status value_of(const loader *L, const bs_param_field *f, const cJSON *v, const char *key, double *x)
{
    if (cJSON_IsNumber(v)) {
        *x = v->valuedouble;
    } else if (cJSON_IsBool(v) && bs_param_is_int(f)) {
        *x = cJSON_IsTrue(v) ? 1.0 : 0.0;
    } else if (cJSON_IsNull(v)) {
        *x = bs_param_real(&L->defaults, f);
    } else {
        return bs_error(BS_ERR_USAGE, "%s: '%s': expected a number%s", L->name, key,
                        bs_param_is_int(f) && f->lo == 0 && f->hi == 1 ? " or true / false" : "");
    }
    return BS_OK;
}

static bs_status set(loader *L, const bs_param_field *f, double x, const char *key)
{
    int i = field_index(f);
    if (L->set_by[i]) { /* a name within its group is shown as group.name */
        const char *a = L->set_by[i], *ga = strcmp(a, f->name) == 0 ? f->group : "";
        const char *gb = strcmp(key, f->name) == 0 ? f->group : "";
        return bs_error(BS_ERR_USAGE, "%s: %s.%s is given twice ('%s%s%s' and '%s%s%s')", L->name, f->group,
                        f->name, ga, *ga ? "." : "", a, gb, *gb ? "." : "", key);
    }
    L->set_by[i] = key;
    char where[1100];
    snprintf(where, sizeof where, "%s: '%s' sets ", L->name, key);
    return bs_param_set(L->p, f, x, where);
}

static bs_status set_json(loader *L, const bs_param_field *f, const cJSON *v, const char *key)
{
    double x = 0;
    BS_TRY(value_of(L, f, v, key, &x));
    return set(L, f, x, key);
}

/* nblocks, nskip, drift_smoothing: 1 if key was one of them. */
static int special(loader *L, const char *key, const cJSON *v, bs_status *st)
{
    if (strcmp(key, "nblocks") == 0) {
        double x = 0;
        const bs_param_field *nb = bs_param_find("drift", "n_blocks"), *off = bs_param_find("drift", "no_drift");
        *st = value_of(L, nb, v, key, &x);
        if (*st == BS_OK && x == 0) { /* Kilosort: no drift correction */
            *st = set(L, off, 1, key);
        } else if (*st == BS_OK) {
            *st = set(L, off, 0, key);
            if (*st == BS_OK)
                *st = set(L, nb, x, key);
        }
        return 1;
    }
    if (strcmp(key, "nskip") == 0) {
        *st = set_json(L, bs_param_find("preprocess", "whiten_stride_batches"), v, key);
        if (*st == BS_OK)
            *st = set_json(L, bs_param_find("detect", "basis_stride_batches"), v, key);
        return 1;
    }
    if (strcmp(key, "drift_smoothing") == 0) {
        static const char *const names[3] = {"smooth_sigma_shift_bins", "smooth_sigma_time_bins",
                                             "smooth_sigma_blocks"};
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 3) {
            *st = bs_error(BS_ERR_USAGE, "%s: 'drift_smoothing': expected 3 numbers [shift, time, blocks]", L->name);
            return 1;
        }
        *st = BS_OK;
        for (int k = 0; k < 3 && *st == BS_OK; k++)
            *st = set_json(L, bs_param_find("drift", names[k]), cJSON_GetArrayItem(v, k), key);
        return 1;
    }
    return 0;
}

static int listed(const char *key, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(key, list[i]) == 0)
            return 1;
    return 0;
}

static int is_group(const char *key)
{
    for (int i = 0; i < bs_n_sort_param_fields; i++)
        if (strcmp(bs_sort_param_fields[i].group, key) == 0)
            return 1;
    return 0;
}

static bs_status top_key(loader *L, const cJSON *it)
{
    const char *key = it->string;
    if (listed(key, RUN_KEYS, sizeof RUN_KEYS / sizeof RUN_KEYS[0]))
        return BS_OK;
    if (is_group(key)) {
        if (!cJSON_IsObject(it))
            return bs_error(BS_ERR_USAGE, "%s: '%s' is a group of parameters: expected an object {\"name\": value}",
                            L->name, key);
        for (const cJSON *m = it->child; m; m = m->next) {
            const bs_param_field *f = bs_param_find(key, m->string);
            if (!f)
                return unknown(L, m->string, key);
            BS_TRY(set_json(L, f, m, m->string));
        }
        return BS_OK;
    }
    const char *dot = strchr(key, '.');
    if (dot && (size_t)(dot - key) < 32) {
        char group[32];
        memcpy(group, key, (size_t)(dot - key));
        group[dot - key] = '\0';
        const bs_param_field *f = bs_param_find(group, dot + 1);
        if (f)
            return set_json(L, f, it, key);
    }
    bs_status st;
    if (special(L, key, it, &st))
        return st;
    for (int i = 0; i < bs_n_sort_param_fields; i++) {
        const bs_param_field *f = &bs_sort_param_fields[i];
        if (f->kilosort && strcmp(f->kilosort, key) == 0)
            return set_json(L, f, it, key);
    }
    if (listed(key, RECORDING_KEYS, sizeof RECORDING_KEYS / sizeof RECORDING_KEYS[0]))
        return bs_error(BS_ERR_USAGE, "%s: '%s' describes the recording, not the sort: boundsort reads it from the "
                        "recording's own files, or from the recording options (--fs, --n-chan, --dtype, --probe)",
                        L->name, key);
    return unknown(L, key, NULL);
}

bs_status bs_sort_params_parse(const char *text, const char *name, bs_sort_params *p)
{
    size_t n = strlen(text);
    char *copy = malloc(n + 1);
    if (!copy)
        return bs_error(BS_ERR_MEMORY, "out of memory reading %s", name);
    memcpy(copy, text, n + 1);
    cJSON_Minify(copy); /* drops the comments */
    cJSON *root = cJSON_Parse(copy);
    bs_status st = BS_OK;
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        st = bs_error(BS_ERR_USAGE, "%s: not valid JSON (comments removed) near '%.40s'", name, at ? at : "");
    } else if (!cJSON_IsObject(root)) {
        st = bs_error(BS_ERR_USAGE, "%s: expected a JSON object of parameters", name);
    }
    if (st == BS_OK && bs_n_sort_param_fields > MAX_FIELDS)
        st = bs_error(BS_ERR_INTERNAL, "params_file.c: MAX_FIELDS %d < %d parameters", MAX_FIELDS,
                      bs_n_sort_param_fields);
    if (st == BS_OK) {
        loader *L = calloc(1, sizeof *L);
        if (!L) {
            st = bs_error(BS_ERR_MEMORY, "out of memory reading %s", name);
        } else {
            L->name = name;
            L->p = p;
            bs_sort_default_params(&L->defaults);
            for (const cJSON *it = root->child; it && st == BS_OK; it = it->next)
                st = top_key(L, it);
            free(L);
        }
    }
    if (st == BS_OK) {
        st = bs_sort_params_check(p);
        if (st != BS_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", bs_last_error());
            st = bs_error(BS_ERR_USAGE, "%s: %s", name, why);
        }
    }
    cJSON_Delete(root);
    free(copy);
    return st;
}

bs_status bs_sort_params_read(const char *path, bs_sort_params *p)
{
    char *text = NULL;
    size_t len = 0;
    bs_status st = bs_read_text_file(path, MAX_FILE_BYTES, &text, &len);
    if (st != BS_OK)
        return st;
    st = bs_sort_params_parse(text, path, p);
    free(text);
    return st;
}

static const char *type_name(const bs_param_field *f)
{
    if (!bs_param_is_int(f))
        return "number";
    return f->lo == 0 && f->hi == 1 ? "flag" : "integer";
}

bs_status bs_sort_params_print_defaults(FILE *out, int json)
{
    bs_sort_params d;
    bs_sort_default_params(&d);
    if (json) {
        cJSON *a = cJSON_CreateArray();
        for (int i = 0; a && i < bs_n_sort_param_fields; i++) {
            const bs_param_field *f = &bs_sort_param_fields[i];
            char key[128], num[32];
            snprintf(key, sizeof key, "%s.%s", f->group, f->name);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "group", f->group);
            cJSON_AddStringToObject(o, "name", f->name);
            cJSON_AddStringToObject(o, "key", key);
            cJSON_AddStringToObject(o, "type", type_name(f));
            snprintf(num, sizeof num, f->type == BS_PARAM_F32 ? "%.7g" : "%.17g", bs_param_real(&d, f));
            cJSON_AddNumberToObject(o, "default", strtod(num, NULL));
            cJSON_AddNumberToObject(o, "min", f->lo);
            cJSON_AddNumberToObject(o, "max", f->hi);
            cJSON_AddBoolToObject(o, "zero_auto", f->zero_auto);
            if (f->kilosort)
                cJSON_AddStringToObject(o, "kilosort", f->kilosort);
            else
                cJSON_AddNullToObject(o, "kilosort");
            cJSON_AddStringToObject(o, "description", f->desc);
            cJSON_AddItemToArray(a, o);
        }
        char *text = a ? cJSON_Print(a) : NULL;
        cJSON_Delete(a);
        if (!text)
            return bs_error(BS_ERR_MEMORY, "out of memory printing the parameters");
        int bad = fprintf(out, "%s\n", text) < 0;
        free(text);
        return bad ? bs_error(BS_ERR_IO, "cannot write the parameters") : BS_OK;
    }
    fprintf(out, "// boundsort %s parameters: `boundsort sort REC -o OUT --params FILE` reads a file like this one.\n"
                 "// Keep only the lines you change. Kilosort 4's names (in the comments) are accepted too, as\n"
                 "// top-level keys: {\"Th_universal\": 9, \"nblocks\": 0}. null restores a default.\n"
                 "// Every run writes the values it used to OUT/params.json, which --params reads back.\n{\n",
            BOUNDSORT_VERSION);
    const char *group = NULL;
    for (int i = 0; i < bs_n_sort_param_fields; i++) {
        const bs_param_field *f = &bs_sort_param_fields[i];
        if (!group || strcmp(group, f->group) != 0) {
            if (group)
                fprintf(out, "\n  },\n");
            fprintf(out, "  \"%s\": {", f->group);
            group = f->group;
        } else {
            fprintf(out, ",");
        }
        char num[32], range[96];
        snprintf(num, sizeof num, f->type == BS_PARAM_F32 ? "%.7g" : "%.17g", bs_param_real(&d, f));
        snprintf(range, sizeof range, "%s%s [%.10g, %.10g]", f->zero_auto ? "0 or " : "", type_name(f), f->lo,
                 f->hi);
        fprintf(out, "\n    // %s; %s%s%s\n    \"%s\": %s", f->desc, range, f->kilosort ? "; Kilosort: " : "",
                f->kilosort ? f->kilosort : "", f->name, num);
    }
    if (fprintf(out, "\n  }\n}\n") < 0)
        return bs_error(BS_ERR_IO, "cannot write the parameters");
    return BS_OK;
}
