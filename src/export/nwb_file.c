/*
 * nwb_file.c - the skeleton of a new NWB file and its electrodes table (see
 * nwb_write.h for the layout).
 *
 * The electrodes table is a DynamicTable group: every column is a 1-D
 * dataset of one value per electrode, listed in order in the group's
 * `colnames` attribute (the `id` dataset is not a column). `group` holds
 * HDF5 object references to the ElectrodeGroup of each electrode and
 * `group_name` that group's name, which is what readers use to split
 * channels into shanks.
 */
#include "nwb_write.h"

#ifdef BS_HAVE_HDF5
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../io/nwb_h5.h"
#include "../mem/mem.h"

void bs_nwb_iso_time(long long unix_s, char out[32])
{
    time_t t = (time_t)unix_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%S+00:00", &tm);
}

bs_status bs_nwb_mark_column(hid_t obj, const char *type, const char *description, uint64_t seed)
{
    BS_TRY(bs_nwb_mark(obj, "hdmf-common", type, seed));
    return description ? bs_h5_attr_str(obj, "description", description) : BS_OK;
}

static bs_status empty_group(hid_t loc, const char *name)
{
    hid_t g = bs_h5_group(loc, name);
    if (g < 0)
        return BS_ERR_INPUT;
    H5Gclose(g);
    return BS_OK;
}

bs_status bs_nwb_write_skeleton(hid_t file, const bs_nwb_file_desc *d)
{
    hid_t root = H5Gopen2(file, "/", H5P_DEFAULT);
    if (root < 0)
        return bs_h5_fail(BS_ERR_INPUT, "cannot open the root group");
    bs_status st = bs_nwb_mark(root, "core", "NWBFile", d->seed);
    if (st == BS_OK)
        st = bs_h5_attr_str(root, "nwb_version", BS_NWB_VERSION);
    H5Gclose(root);
    BS_TRY(st);
    BS_TRY(bs_h5_str_dataset(file, "identifier", d->identifier));
    BS_TRY(bs_h5_str_dataset(file, "session_description", d->session_description));
    BS_TRY(bs_h5_str_dataset(file, "session_start_time", d->session_start_time));
    BS_TRY(bs_h5_str_dataset(file, "timestamps_reference_time", d->session_start_time));
    const char *dates[1] = {d->file_create_date};
    BS_TRY(bs_h5_strs_dataset(file, "file_create_date", dates, 1));
    static const char *groups[] = {"acquisition", "analysis", "processing", "stimulus", "stimulus/presentation",
                                   "stimulus/templates", "general"};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
        BS_TRY(empty_group(file, groups[i]));
    return BS_OK;
}

/* A 1-D float32 column from doubles. */
static bs_status float_column(hid_t table, const char *name, const double *v, int n, const char *desc, uint64_t seed)
{
    float *f = bs_mem_alloc("export/nwb-electrodes", (size_t)(n > 0 ? n : 1) * sizeof *f);
    if (!f)
        return BS_ERR_MEMORY;
    for (int i = 0; i < n; i++)
        f[i] = (float)v[i];
    hsize_t dims = (hsize_t)n;
    hid_t d = bs_h5_dataset(table, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, &dims, 0, f);
    bs_mem_free(f);
    if (d < 0)
        return BS_ERR_INPUT;
    bs_status st = bs_nwb_mark_column(d, "VectorData", desc, seed);
    H5Dclose(d);
    return st;
}

static bs_status text_column(hid_t table, const char *name, const char *const *v, int n, const char *desc,
                             uint64_t seed)
{
    BS_TRY(bs_h5_strs_dataset(table, name, v, n));
    hid_t d = H5Dopen2(table, name, H5P_DEFAULT);
    bs_status st = d >= 0 ? bs_nwb_mark_column(d, "VectorData", desc, seed) : BS_ERR_INPUT;
    if (d >= 0)
        H5Dclose(d);
    return st;
}

bs_status bs_nwb_write_electrodes(hid_t file, const bs_nwb_electrodes *e, uint64_t seed)
{
    char dev_path[512], tmp[600];
    snprintf(dev_path, sizeof dev_path, "/general/devices/%s", e->device);
    if (!bs_h5_exists(file, "/general/devices"))
        BS_TRY(empty_group(file, "/general/devices"));
    if (!bs_h5_exists(file, "/general/extracellular_ephys"))
        BS_TRY(empty_group(file, "/general/extracellular_ephys"));
    hid_t g = bs_h5_group(file, dev_path);
    if (g < 0)
        return BS_ERR_INPUT;
    bs_status st = bs_nwb_mark(g, "core", "Device", seed);
    if (st == BS_OK)
        st = bs_h5_attr_str(g, "description", e->device_description);
    H5Gclose(g);
    BS_TRY(st);
    for (int k = 0; k < e->n_groups; k++) {
        snprintf(tmp, sizeof tmp, "/general/extracellular_ephys/shank%d", k);
        g = bs_h5_group(file, tmp);
        if (g < 0)
            return BS_ERR_INPUT;
        char desc[64];
        snprintf(desc, sizeof desc, "shank %d of %s", k, e->device);
        st = bs_nwb_mark(g, "core", "ElectrodeGroup", seed);
        if (st == BS_OK)
            st = bs_h5_attr_str(g, "description", desc);
        if (st == BS_OK)
            st = bs_h5_attr_str(g, "location", "unknown");
        if (st == BS_OK && H5Lcreate_soft(dev_path, g, "device", H5P_DEFAULT, H5P_DEFAULT) < 0)
            st = bs_h5_fail(BS_ERR_INPUT, "%s: cannot link the device", tmp);
        H5Gclose(g);
        BS_TRY(st);
    }
    hid_t t = bs_h5_group(file, BS_NWB_ELECTRODES);
    if (t < 0)
        return BS_ERR_INPUT;
    static const char *cols[] = {"location", "group", "group_name", "rel_x", "rel_y"};
    st = bs_nwb_mark(t, "hdmf-common", "DynamicTable", seed);
    if (st == BS_OK)
        st = bs_h5_attr_str(t, "description", "metadata about extracellular electrodes");
    if (st == BS_OK)
        st = bs_h5_attr_strs(t, "colnames", cols, 5);
    int64_t *ids = bs_mem_alloc("export/nwb-electrodes", (size_t)(e->n > 0 ? e->n : 1) * sizeof *ids);
    const char **loc = calloc((size_t)(e->n > 0 ? e->n : 1), sizeof *loc);
    const char **gp = calloc((size_t)(e->n > 0 ? e->n : 1), sizeof *gp);
    const char **gn = calloc((size_t)(e->n > 0 ? e->n : 1), sizeof *gn);
    char(*names)[64] = calloc((size_t)(e->n_groups > 0 ? e->n_groups : 1), 2 * sizeof *names);
    if (st == BS_OK && !(ids && loc && gp && gn && names))
        st = bs_error(BS_ERR_MEMORY, "electrodes table: out of memory");
    for (int k = 0; k < e->n_groups && st == BS_OK; k++) {
        snprintf(names[2 * k], 64, "shank%d", k);
        snprintf(names[2 * k + 1], 64, "/general/extracellular_ephys/shank%d", k);
    }
    for (int i = 0; i < e->n && st == BS_OK; i++) {
        if (e->group[i] < 0 || e->group[i] >= e->n_groups) {
            st = bs_error(BS_ERR_INTERNAL, "electrode %d: group %d outside 0..%d", i, e->group[i], e->n_groups - 1);
            break;
        }
        ids[i] = i;
        loc[i] = "unknown";
        gn[i] = names[2 * e->group[i]];
        gp[i] = names[2 * e->group[i] + 1];
    }
    hsize_t dims = (hsize_t)e->n;
    if (st == BS_OK) {
        hid_t d = bs_h5_dataset(t, "id", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &dims, 0, ids);
        st = d < 0 ? BS_ERR_INPUT : bs_nwb_mark_column(d, "ElementIdentifiers", NULL, seed);
        if (d >= 0)
            H5Dclose(d);
    }
    if (st == BS_OK)
        st = text_column(t, "location", loc, e->n, "the location of channel within the subject e.g. brain region",
                         seed);
    if (st == BS_OK)
        st = bs_h5_refs_dataset(t, "group", gp, e->n);
    if (st == BS_OK) {
        hid_t d = H5Dopen2(t, "group", H5P_DEFAULT);
        st = d >= 0 ? bs_nwb_mark_column(d, "VectorData", "a reference to the ElectrodeGroup this electrode is a part of",
                                         seed)
                    : BS_ERR_INPUT;
        if (d >= 0)
            H5Dclose(d);
    }
    if (st == BS_OK)
        st = text_column(t, "group_name", gn, e->n, "the name of the ElectrodeGroup this electrode is a part of", seed);
    if (st == BS_OK)
        st = float_column(t, "rel_x", e->rel_x_um, e->n, "x position of the contact on the probe, in micrometers", seed);
    if (st == BS_OK)
        st = float_column(t, "rel_y", e->rel_y_um, e->n, "y position (depth) of the contact on the probe, in micrometers",
                          seed);
    bs_mem_free(ids);
    free(loc), free(gp), free(gn), free(names);
    H5Gclose(t);
    return st;
}
#endif
