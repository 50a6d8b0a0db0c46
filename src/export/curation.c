/*
 * curation.c - write the SpikeInterface curation JSON v2 (see curation.h).
 */
#include "curation.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"

static cJSON *label_definition(const char *name, const char *const *options, int n)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "name", name);
    cJSON_AddItemToObject(d, "label_options", cJSON_CreateStringArray(options, n));
    cJSON_AddBoolToObject(d, "exclusive", 1);
    return d;
}

static int known(const char *v, const char *const *options, int n)
{
    for (int i = 0; v && i < n; i++)
        if (strcmp(v, options[i]) == 0)
            return 1;
    return 0;
}

static int cmp_unit(const void *a, const void *b)
{
    int32_t x = ((const bs_curation_unit *)a)->unit_id, y = ((const bs_curation_unit *)b)->unit_id;
    return (x > y) - (x < y);
}

bs_status bs_curation_write(const char *path, int n, const bs_curation_unit *units)
{
    static const char *const quality[] = {"good", "mua", "noise"};
    static const char *const qc[] = {"good", "fail", "unknown"};
    static const char *const types[] = {"noise", "non-somatic", "mua", "good"};
    bs_curation_unit *u = malloc(sizeof *u * (size_t)(n > 0 ? n : 1));
    if (!u)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", path);
    if (n > 0)
        memcpy(u, units, sizeof *u * (size_t)n);
    qsort(u, (size_t)n, sizeof *u, cmp_unit);
    for (int i = 1; i < n; i++)
        if (u[i].unit_id == u[i - 1].unit_id) {
            free(u);
            return bs_error(BS_ERR_INTERNAL, "%s: unit id %d listed twice", path, (int)u[i].unit_id);
        }

    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format_version", "2");
    cJSON *ids = cJSON_AddArrayToObject(root, "unit_ids");
    cJSON *defs = cJSON_AddObjectToObject(root, "label_definitions");
    cJSON_AddItemToObject(defs, "quality", label_definition("quality", quality, 3));
    cJSON_AddItemToObject(defs, "qc_label", label_definition("qc_label", qc, 3));
    cJSON_AddItemToObject(defs, "unit_type", label_definition("unit_type", types, 4));
    cJSON *labels = cJSON_AddArrayToObject(root, "manual_labels");
    for (int i = 0; i < n; i++) {
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(u[i].unit_id));
        int has_q = known(u[i].quality, quality, 3), has_l = known(u[i].qc_label, qc, 3);
        int has_t = known(u[i].unit_type, types, 4);
        if (!has_q && !has_l && !has_t)
            continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "unit_id", u[i].unit_id);
        cJSON *l = cJSON_AddObjectToObject(e, "labels");
        if (has_q)
            cJSON_AddItemToObject(l, "quality", cJSON_CreateStringArray(&u[i].quality, 1));
        if (has_l)
            cJSON_AddItemToObject(l, "qc_label", cJSON_CreateStringArray(&u[i].qc_label, 1));
        if (has_t)
            cJSON_AddItemToObject(l, "unit_type", cJSON_CreateStringArray(&u[i].unit_type, 1));
        cJSON_AddItemToArray(labels, e);
    }
    cJSON_AddArrayToObject(root, "merges");
    cJSON_AddArrayToObject(root, "splits");
    cJSON_AddArrayToObject(root, "removed");
    free(u);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory printing the JSON", path);
    bs_status st = bs_write_file_atomic(path, text, strlen(text));
    free(text);
    return st;
}
