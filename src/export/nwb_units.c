/*
 * nwb_units.c - bs_nwb_export: a Phy folder's units as an NWB Units table
 * (what is written, and the memory bound, are in nwb_export.h).
 *
 * Steps:
 *   1. params.py's sample_rate; spike_times.npy (int64/uint64 samples) and
 *      spike_clusters.npy (int32; spike_templates.npy when absent).
 *   2. Pass 1 over the spikes: count per cluster id (ids < 2^24; the count
 *      array grows to the largest id), hash the
 *      content (the new file's identifier and object ids derive from it, so
 *      the same sorting gives the same ids).
 *   3. Templates of each unit: a pass over spike_clusters + spike_templates
 *      counts (cluster, template) pairs in an open-addressing hash table;
 *      a unit's mean waveform is sum_k n_k T_k / n in whitened space, times
 *      whitening_mat_inv (one matrix product per unit), µV.
 *   4. The output file: a copy of the input NWB file (streamed) or a new
 *      skeleton + electrodes table, under a temporary name.
 *   5. The Units group: id, waveform_mean / electrodes (unit by unit),
 *      spike_times in unit groups (nwb_export.h), the indexes, the quality
 *      columns, then colnames; close, fsync, rename.
 */
#include "nwb_export.h"

#ifndef BS_HAVE_HDF5
bs_status bs_nwb_export(const bs_nwb_export_opts *o, bs_nwb_export_summary *summary)
{
    (void)summary;
    return bs_error(BS_ERR_INPUT,
                    "%s: this boundsort was built without HDF5, so it cannot write NWB files: install libhdf5-dev and "
                    "rebuild",
                    o->phy_dir);
}
#else
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../io/npy.h"
#include "../io/nwb.h"
#include "../io/nwb_h5.h"
#include "../io/npy_rows.h"
#include "../mem/mem.h"
#include "nwb_write.h"
#include "phy_read.h"
#include "source.h"

#define BLOCK 65536          /* spikes per read */
#define MAX_CLUSTER (1 << 24) /* cluster ids must be below this */

typedef struct {
    const bs_nwb_export_opts *o;
    char dir[4096];
    double fs;                   /* Hz */
    bs_npy_rows rt, rc, rk;      /* spike_times, spike_clusters, spike_templates */
    int have_k;
    int64_t S;                   /* spikes */
    int64_t *count;              /* [MAX id + 1] spikes per cluster id */
    int32_t n_ids;               /* max id + 1 */
    int32_t *unit_of;            /* [n_ids] unit index or -1 */
    int32_t *unit_id;            /* [U] cluster id of each unit */
    int64_t *offset;             /* [U + 1] first spike of each unit in spike_times */
    int64_t U;
    uint64_t hash;
    /* channels */
    int C, nt, K, E;             /* channels, template samples, templates, electrodes per unit */
    int32_t *chan_map;           /* [C] file column of each channel */
    int64_t *el_row;             /* [C] electrodes table row of each channel */
    float *winv;                 /* [C*C] or NULL (identity) */
    bs_npy_rows rtm;             /* templates.npy */
    int have_templates;
    /* NWB input */
    bs_recording rec;
    int have_rec;
    int64_t window0;             /* the file sample spike time 0 is (a sort of a part: source.json's window) */
    char table[1024];            /* electrodes table path */
    char units[64];              /* Units group path */
} exporter;

/* ------------------------------------------------------------ inputs */

/* Open dir/name as a 1-D array of one of two dtypes; *which = 0 or 1. */
static bs_status open_vector(exporter *x, bs_npy_rows *r, const char *name, bs_npy_dtype a, bs_npy_dtype b,
                             int *which)
{
    char path[4200];
    bs_npy_header h;
    BS_TRY(bs_path_join(path, sizeof path, x->dir, name));
    BS_TRY(bs_npy_read_header(path, &h));
    if (h.ndim != 1 || (h.dtype != a && h.dtype != b))
        return bs_error(BS_ERR_INPUT, "%s: expected a 1-D array of %s%s%s, got %s with %d dimensions", path,
                        bs_npy_dtype_descr(a), a != b ? " or " : "", a != b ? bs_npy_dtype_descr(b) : "",
                        bs_npy_dtype_descr(h.dtype), h.ndim);
    if (which)
        *which = h.dtype == b && a != b;
    return bs_npy_rows_open(r, x->dir, name, h.dtype);
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= h >> 31;
    return h * 0xbf58476d1ce4e5b9ULL;
}

/* Spikes [s0, s0 + *n) of spike_times and spike_clusters; *n = min(BLOCK, S - s0). */
static bs_status read_block(const exporter *x, int64_t s0, int64_t *n, int64_t *t, int32_t *c)
{
    *n = x->S - s0 < BLOCK ? x->S - s0 : BLOCK;
    BS_TRY(bs_npy_rows_read(&x->rt, s0, *n, t));
    return bs_npy_rows_read(&x->rc, s0, *n, c);
}

/* Pass 1: spikes per cluster id, units, offsets, content hash. */
static bs_status count_spikes(exporter *x)
{
    int64_t *t = bs_mem_alloc("export/nwb-block", BLOCK * sizeof *t);
    int32_t *c = bs_mem_alloc("export/nwb-block", BLOCK * sizeof *c);
    int64_t cap = 1024; /* count[] grows to the largest id seen */
    x->count = bs_mem_calloc("export/nwb-units", (size_t)cap, sizeof *x->count);
    if (!t || !c || !x->count) {
        bs_mem_free(t), bs_mem_free(c);
        return BS_ERR_MEMORY;
    }
    bs_status st = BS_OK;
    int32_t max_id = -1;
    x->hash = 0x243f6a8885a308d3ULL;
    for (int64_t s0 = 0; s0 < x->S && st == BS_OK; s0 += BLOCK) {
        int64_t n = 0;
        st = read_block(x, s0, &n, t, c);
        for (int64_t i = 0; i < n && st == BS_OK; i++) {
            if (c[i] < 0 || c[i] >= MAX_CLUSTER)
                st = bs_error(BS_ERR_INPUT, "%s: spike %lld: cluster id %d: expected 0..%d", x->rc.path,
                              (long long)(s0 + i), c[i], MAX_CLUSTER - 1);
            else if (t[i] < 0 || (x->have_rec && t[i] >= x->rec.n_samples))
                st = bs_error(BS_ERR_INPUT, "%s: spike %lld: time %lld samples: expected 0..%lld", x->rt.path,
                              (long long)(s0 + i), (long long)t[i],
                              x->have_rec ? (long long)x->rec.n_samples - 1 : (long long)INT64_MAX);
            else {
                if (c[i] >= cap) {
                    int64_t nc = 2 * cap > c[i] + 1 ? 2 * cap : c[i] + 1;
                    int64_t *g = bs_mem_realloc(x->count, "export/nwb-units", (size_t)nc * sizeof *g);
                    if (!g) {
                        st = BS_ERR_MEMORY;
                        break;
                    }
                    memset(g + cap, 0, (size_t)(nc - cap) * sizeof *g);
                    x->count = g;
                    cap = nc;
                }
                x->count[c[i]]++;
                max_id = c[i] > max_id ? c[i] : max_id;
                x->hash = mix(mix(x->hash, (uint64_t)t[i]), (uint64_t)c[i]);
            }
        }
    }
    bs_mem_free(t), bs_mem_free(c);
    BS_TRY(st);
    x->n_ids = max_id + 1;
    for (int32_t k = 0; k < x->n_ids; k++)
        x->U += x->count[k] > 0;
    x->unit_of = bs_mem_alloc("export/nwb-units", (size_t)(x->n_ids ? x->n_ids : 1) * sizeof *x->unit_of);
    x->unit_id = bs_mem_alloc("export/nwb-units", (size_t)(x->U ? x->U : 1) * sizeof *x->unit_id);
    x->offset = bs_mem_alloc("export/nwb-units", (size_t)(x->U + 1) * sizeof *x->offset);
    if (!x->unit_of || !x->unit_id || !x->offset)
        return BS_ERR_MEMORY;
    int64_t u = 0;
    x->offset[0] = 0;
    for (int32_t k = 0; k < x->n_ids; k++) {
        x->unit_of[k] = x->count[k] > 0 ? (int32_t)u : -1;
        if (x->count[k] > 0) {
            x->unit_id[u] = k;
            x->offset[u + 1] = x->offset[u] + x->count[k];
            u++;
        }
    }
    return BS_OK;
}

/* ------------------------------------------------- templates per unit */

typedef struct {
    uint64_t key; /* unit << 32 | template, +1 (0 = empty) */
    int64_t n;
} pair_slot;

static int pair_cmp(const void *a, const void *b)
{
    uint64_t x = ((const pair_slot *)a)->key, y = ((const pair_slot *)b)->key;
    return x < y ? -1 : x > y;
}

/* (unit, template, count) for every pair present, sorted by unit. */
static bs_status template_pairs(exporter *x, pair_slot **out, int64_t *n_out)
{
    size_t cap = 1024, n = 0;
    pair_slot *tab = bs_mem_calloc("export/nwb-pairs", cap, sizeof *tab);
    int32_t *c = bs_mem_alloc("export/nwb-block", BLOCK * sizeof *c);
    int32_t *k = bs_mem_alloc("export/nwb-block", BLOCK * sizeof *k);
    bs_status st = tab && c && k ? BS_OK : BS_ERR_MEMORY;
    for (int64_t s0 = 0; s0 < x->S && st == BS_OK; s0 += BLOCK) {
        int64_t m = x->S - s0 < BLOCK ? x->S - s0 : BLOCK;
        st = bs_npy_rows_read(&x->rc, s0, m, c);
        if (st == BS_OK && x->have_k)
            st = bs_npy_rows_read(&x->rk, s0, m, k);
        for (int64_t i = 0; i < m && st == BS_OK; i++) {
            int32_t tk = x->have_k ? k[i] : c[i];
            if (tk < 0 || tk >= x->K) {
                st = bs_error(BS_ERR_INPUT, "%s: spike %lld: template %d: expected 0..%d (rows of templates.npy)",
                              x->have_k ? x->rk.path : x->rc.path, (long long)(s0 + i), tk, x->K - 1);
                break;
            }
            uint64_t key = ((uint64_t)x->unit_of[c[i]] << 32 | (uint32_t)tk) + 1;
            if (2 * (n + 1) > cap) { /* grow: rehash into twice the slots */
                if (cap >= ((size_t)1 << 26)) {
                    st = bs_error(BS_ERR_INPUT, "%s: more than %zu distinct (cluster, template) pairs", x->rc.path,
                                  cap / 2);
                    break;
                }
                pair_slot *nt = bs_mem_calloc("export/nwb-pairs", 2 * cap, sizeof *nt);
                if (!nt) {
                    st = BS_ERR_MEMORY;
                    break;
                }
                for (size_t j = 0; j < cap; j++)
                    if (tab[j].key) {
                        size_t h = (size_t)(mix(0, tab[j].key) & (2 * cap - 1));
                        while (nt[h].key)
                            h = (h + 1) & (2 * cap - 1);
                        nt[h] = tab[j];
                    }
                bs_mem_free(tab);
                tab = nt;
                cap *= 2;
            }
            size_t h = (size_t)(mix(0, key) & (cap - 1));
            while (tab[h].key && tab[h].key != key)
                h = (h + 1) & (cap - 1);
            if (!tab[h].key) {
                tab[h].key = key;
                n++;
            }
            tab[h].n++;
        }
    }
    bs_mem_free(c), bs_mem_free(k);
    if (st != BS_OK) {
        bs_mem_free(tab);
        return st;
    }
    size_t w = 0;
    for (size_t j = 0; j < cap; j++)
        if (tab[j].key)
            tab[w++] = tab[j];
    qsort(tab, w, sizeof *tab, pair_cmp);
    *out = tab;
    *n_out = (int64_t)w;
    return BS_OK;
}

/* Channels: channel_map.npy, whitening_mat_inv.npy, templates.npy shape. */
static bs_status load_channels(exporter *x)
{
    char path[4200];
    bs_npy_header h;
    void *data = NULL;
    BS_TRY(bs_path_join(path, sizeof path, x->dir, BS_PHY_CHANNEL_MAP));
    BS_TRY(bs_npy_load(path, "export/nwb-channels", &h, &data));
    int64_t n = h.ndim >= 1 ? h.shape[0] : 0;
    if (h.ndim < 1 || h.ndim > 2 || (h.ndim == 2 && h.shape[1] != 1) || n < 1 || n > 1000000 ||
        (h.dtype != BS_NPY_I32 && h.dtype != BS_NPY_I64)) {
        bs_mem_free(data);
        return bs_error(BS_ERR_INPUT, "%s: expected a vector of int32/int64 file columns, got %s with %d dimensions",
                        path, bs_npy_dtype_descr(h.dtype), h.ndim);
    }
    x->C = (int)n;
    x->chan_map = bs_mem_alloc("export/nwb-channels", (size_t)n * sizeof *x->chan_map);
    x->el_row = bs_mem_alloc("export/nwb-channels", (size_t)n * sizeof *x->el_row);
    if (!x->chan_map || !x->el_row) {
        bs_mem_free(data);
        return BS_ERR_MEMORY;
    }
    for (int64_t c = 0; c < n; c++) {
        int64_t v = h.dtype == BS_NPY_I32 ? ((int32_t *)data)[c] : ((int64_t *)data)[c];
        if (v < 0 || v > INT32_MAX || (x->have_rec && v >= x->rec.n_cols)) {
            bs_mem_free(data);
            return bs_error(BS_ERR_INPUT, "%s: channel %lld: file column %lld: expected 0..%d%s", path, (long long)c,
                            (long long)v, x->have_rec ? x->rec.n_cols - 1 : INT32_MAX,
                            x->have_rec ? " (the NWB series' columns)" : "");
        }
        x->chan_map[c] = (int32_t)v;
        x->el_row[c] = x->have_rec ? bs_nwb_get_info(&x->rec)->electrode_row[v] : c;
    }
    bs_mem_free(data);
    /* templates */
    BS_TRY(bs_path_join(path, sizeof path, x->dir, BS_PHY_TEMPLATES));
    BS_TRY(bs_npy_read_header(path, &h));
    if (h.ndim != 3 || h.dtype != BS_NPY_F32 || h.shape[2] != x->C || h.shape[1] < 1 || h.shape[1] > 100000)
        return bs_error(BS_ERR_INPUT, "%s: expected float32 (templates, samples, %d channels), got %s with %d dimensions",
                        path, x->C, bs_npy_dtype_descr(h.dtype), h.ndim);
    x->K = (int)h.shape[0];
    x->nt = (int)h.shape[1];
    BS_TRY(bs_npy_rows_open(&x->rtm, x->dir, BS_PHY_TEMPLATES, BS_NPY_F32));
    x->have_templates = 1;
    x->E = x->C < BS_NWB_UNIT_ELECTRODES ? x->C : BS_NWB_UNIT_ELECTRODES;
    /* whitening inverse */
    BS_TRY(bs_path_join(path, sizeof path, x->dir, BS_PHY_WHITENING_MAT_INV));
    if (!bs_phy_has(x->dir, BS_PHY_WHITENING_MAT_INV)) {
        bs_log_warn("%s: absent: mean waveforms are the templates as they are (whitened units, not µV)", path);
        return BS_OK;
    }
    BS_TRY(bs_npy_load(path, "export/nwb-channels", &h, &data));
    if (h.ndim != 2 || h.shape[0] != x->C || h.shape[1] != x->C || (h.dtype != BS_NPY_F32 && h.dtype != BS_NPY_F64)) {
        bs_mem_free(data);
        return bs_error(BS_ERR_INPUT, "%s: expected a float32/float64 %d x %d matrix, got %s with %d dimensions", path,
                        x->C, x->C, bs_npy_dtype_descr(h.dtype), h.ndim);
    }
    x->winv = bs_mem_alloc("export/nwb-channels", (size_t)x->C * x->C * sizeof *x->winv);
    if (!x->winv) {
        bs_mem_free(data);
        return BS_ERR_MEMORY;
    }
    for (size_t i = 0; i < (size_t)x->C * x->C; i++)
        x->winv[i] = h.dtype == BS_NPY_F32 ? ((float *)data)[i] : (float)((double *)data)[i];
    bs_mem_free(data);
    return BS_OK;
}

/* ------------------------------------------------------------ writing */

static hid_t make_vector(hid_t g, const char *name, hid_t ftype, int rank, const hsize_t *dims, hsize_t chunk0)
{
    return bs_h5_dataset(g, name, ftype, ftype, rank, dims, chunk0, NULL);
}

/* The file type of an index column whose largest entry is max: the smallest unsigned integer that holds it,
 * as pynwb writes them (SpikeInterface's NWB sorting reader expects those widths). */
static hid_t index_type(uint64_t max)
{
    return max <= UINT8_MAX ? H5T_STD_U8LE : max <= UINT16_MAX ? H5T_STD_U16LE
           : max <= UINT32_MAX ? H5T_STD_U32LE : H5T_STD_U64LE;
}

static bs_status write_slice(hid_t d, int rank, const hsize_t *start, const hsize_t *count, hid_t mtype,
                             const void *buf)
{
    for (int i = 0; i < rank; i++)
        if (count[i] == 0)
            return BS_OK;
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(rank, count, NULL);
    herr_t e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    if (e >= 0)
        e = H5Dwrite(d, mtype, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(fs);
    H5Sclose(ms);
    return e < 0 ? bs_h5_fail(BS_ERR_INPUT, "cannot write to an HDF5 dataset") : BS_OK;
}

static const char *target_path(const exporter *x, const char *col, char path[1100])
{
    snprintf(path, 1100, "%s/%s", x->units, col);
    return path;
}

/* waveform_mean + electrodes (+ index), unit by unit. */
static bs_status write_waveforms(exporter *x, hid_t g)
{
    char path[1100];
    const int C = x->C, nt = x->nt, E = x->E;
    pair_slot *pairs = NULL;
    int64_t n_pairs = 0;
    BS_TRY(template_pairs(x, &pairs, &n_pairs));
    hsize_t wd[3] = {(hsize_t)x->U, (hsize_t)nt, (hsize_t)E}, ed = (hsize_t)(x->U * E), id = (hsize_t)x->U;
    hid_t dw = make_vector(g, "waveform_mean", H5T_IEEE_F32LE, 3, wd, 64);
    hid_t de = dw >= 0 ? make_vector(g, "electrodes", H5T_STD_I64LE, 1, &ed, 65536) : -1;
    hid_t di = de >= 0 ? make_vector(g, "electrodes_index", index_type((uint64_t)ed), 1, &id, 65536) : -1;
    float *tm = bs_mem_alloc("export/nwb-waveform", (size_t)nt * C * sizeof *tm);
    float *acc = bs_mem_alloc("export/nwb-waveform", (size_t)nt * C * sizeof *acc);
    float *uv = bs_mem_alloc("export/nwb-waveform", (size_t)nt * C * sizeof *uv);
    float *wv = bs_mem_alloc("export/nwb-waveform", (size_t)nt * E * sizeof *wv);
    double *ptp = bs_mem_alloc("export/nwb-waveform", (size_t)C * sizeof *ptp);
    int *pick = bs_mem_alloc("export/nwb-waveform", (size_t)C * sizeof *pick);
    bs_status st = di >= 0 ? BS_OK : BS_ERR_INPUT;
    if (st == BS_OK && !(tm && acc && uv && wv && ptp && pick))
        st = BS_ERR_MEMORY;
    int64_t p = 0;
    for (int64_t u = 0; u < x->U && st == BS_OK; u++) {
        memset(acc, 0, (size_t)nt * C * sizeof *acc);
        double total = (double)x->count[x->unit_id[u]];
        for (; p < n_pairs && (int64_t)((pairs[p].key - 1) >> 32) == u && st == BS_OK; p++) {
            int32_t k = (int32_t)((pairs[p].key - 1) & 0xffffffffu);
            st = bs_npy_rows_read(&x->rtm, k, 1, tm);
            float w = (float)((double)pairs[p].n / total);
            for (size_t i = 0; i < (size_t)nt * C && st == BS_OK; i++)
                acc[i] += w * tm[i];
        }
        if (st != BS_OK)
            break;
        if (x->winv) /* row vectors: uv[t, :] = acc[t, :] @ Winv */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nt, C, C, 1.0f, acc, C, x->winv, C, 0.0f, uv, C);
        else
            memcpy(uv, acc, (size_t)nt * C * sizeof *uv);
        for (int c = 0; c < C; c++) {
            float lo = INFINITY, hi = -INFINITY;
            for (int t = 0; t < nt; t++) {
                float v = uv[(size_t)t * C + c];
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
            ptp[c] = (double)hi - (double)lo;
            pick[c] = c;
        }
        /* the E channels of largest peak-to-peak, largest first (ties: lower channel) */
        for (int j = 0; j < E; j++) {
            int best = j;
            for (int c = j + 1; c < C; c++)
                if (ptp[pick[c]] > ptp[pick[best]] || (ptp[pick[c]] == ptp[pick[best]] && pick[c] < pick[best]))
                    best = c;
            int tmp = pick[j];
            pick[j] = pick[best];
            pick[best] = tmp;
        }
        int64_t rows[BS_NWB_UNIT_ELECTRODES];
        for (int j = 0; j < E; j++) {
            rows[j] = x->el_row[pick[j]];
            for (int t = 0; t < nt; t++)
                wv[(size_t)t * E + j] = (float)(uv[(size_t)t * C + pick[j]] * 1e-6); /* µV -> V */
        }
        uint64_t end = (uint64_t)((u + 1) * E);
        hsize_t s3[3] = {(hsize_t)u, 0, 0}, c3[3] = {1, (hsize_t)nt, (hsize_t)E};
        hsize_t s1 = (hsize_t)(u * E), c1 = (hsize_t)E, su = (hsize_t)u, one = 1;
        st = write_slice(dw, 3, s3, c3, H5T_NATIVE_FLOAT, wv);
        if (st == BS_OK)
            st = write_slice(de, 1, &s1, &c1, H5T_NATIVE_INT64, rows);
        if (st == BS_OK)
            st = write_slice(di, 1, &su, &one, H5T_NATIVE_UINT64, &end);
    }
    if (st == BS_OK)
        st = bs_nwb_mark_column(dw, "VectorData", "mean waveform of each unit on its electrodes (volts)", x->hash);
    if (st == BS_OK)
        st = bs_h5_attr_num(dw, "sampling_rate", H5T_IEEE_F32LE, x->fs);
    if (st == BS_OK)
        st = bs_h5_attr_str(dw, "unit", "volts");
    if (st == BS_OK)
        st = bs_nwb_mark_column(de, "DynamicTableRegion",
                                "electrodes of each unit, largest mean-waveform peak-to-peak first", x->hash);
    if (st == BS_OK)
        st = bs_h5_attr_ref(de, "table", x->table);
    if (st == BS_OK)
        st = bs_nwb_mark_column(di, "VectorIndex", "Index for VectorData 'electrodes'", x->hash);
    if (st == BS_OK)
        st = bs_h5_attr_ref(di, "target", target_path(x, "electrodes", path));
    if (dw >= 0)
        H5Dclose(dw);
    if (de >= 0)
        H5Dclose(de);
    if (di >= 0)
        H5Dclose(di);
    bs_mem_free(pairs), bs_mem_free(tm), bs_mem_free(acc), bs_mem_free(uv), bs_mem_free(wv), bs_mem_free(ptp),
        bs_mem_free(pick);
    return st;
}

/* Samples (int64 in 8-byte slots) -> seconds (double, same slots). */
static bs_status to_seconds(exporter *x, int64_t *slots, int64_t n)
{
    double tmp[4096];
    for (int64_t i0 = 0; i0 < n; i0 += 4096) {
        int64_t m = n - i0 < 4096 ? n - i0 : 4096;
        if (x->have_rec)
            BS_TRY(bs_nwb_sample_times(&x->rec, slots + i0, m, tmp));
        else
            for (int64_t i = 0; i < m; i++)
                tmp[i] = (double)(x->window0 + slots[i0 + i]) / x->fs;
        memcpy(slots + i0, tmp, (size_t)m * sizeof *tmp);
    }
    return BS_OK;
}

/* spike_times in unit groups (nwb_export.h), then spike_times_index. */
static bs_status write_spike_times(exporter *x, hid_t g, int *passes)
{
    char path[1100];
    const int64_t cap = (int64_t)(x->o->spike_buffer ? x->o->spike_buffer : BS_NWB_SPIKE_BUFFER);
    hsize_t n = (hsize_t)x->S, nu = (hsize_t)x->U;
    hid_t d = make_vector(g, "spike_times", H5T_IEEE_F64LE, 1, &n, 65536);
    if (d < 0)
        return BS_ERR_INPUT;
    int64_t want = x->S < cap ? x->S : cap;
    int64_t *buf = bs_mem_alloc("export/nwb-spike-buffer", (size_t)(want > 0 ? want : 1) * sizeof *buf);
    int64_t *fill = bs_mem_alloc("export/nwb-units", (size_t)(x->U ? x->U : 1) * sizeof *fill);
    int64_t *t = bs_mem_alloc("export/nwb-block", BLOCK * sizeof *t);
    int32_t *c = bs_mem_alloc("export/nwb-block", BLOCK * sizeof *c);
    bs_status st = buf && fill && t && c ? BS_OK : BS_ERR_MEMORY;
    *passes = 0;
    for (int64_t u = 0; u < x->U && st == BS_OK;) {
        int64_t u1 = u + 1, base = x->offset[u];
        int big = x->offset[u + 1] - base > cap;
        while (!big && u1 < x->U && x->offset[u1 + 1] - base <= cap)
            u1++;
        for (int64_t v = u; v < u1; v++)
            fill[v] = 0;
        int64_t held = 0, written = base; /* big unit: spikes in buf, next output position */
        (*passes)++;
        for (int64_t s0 = 0; s0 < x->S && st == BS_OK; s0 += BLOCK) {
            int64_t m = 0;
            st = read_block(x, s0, &m, t, c);
            for (int64_t i = 0; i < m && st == BS_OK; i++) {
                int64_t v = x->unit_of[c[i]];
                if (v < u || v >= u1)
                    continue;
                if (!big) {
                    buf[x->offset[v] - base + fill[v]++] = t[i];
                    continue;
                }
                buf[held++] = t[i];
                if (held == cap) {
                    hsize_t s1 = (hsize_t)written, c1 = (hsize_t)held;
                    st = to_seconds(x, buf, held);
                    if (st == BS_OK)
                        st = write_slice(d, 1, &s1, &c1, H5T_NATIVE_DOUBLE, buf);
                    written += held;
                    held = 0;
                }
            }
        }
        if (!big)
            held = x->offset[u1] - base;
        if (st == BS_OK && held) {
            hsize_t s1 = (hsize_t)written, c1 = (hsize_t)held;
            st = to_seconds(x, buf, held);
            if (st == BS_OK)
                st = write_slice(d, 1, &s1, &c1, H5T_NATIVE_DOUBLE, buf);
        }
        u = u1;
    }
    if (st == BS_OK)
        st = bs_nwb_mark_column(d, "VectorData", "the spike times for each unit in seconds", x->hash);
    if (st == BS_OK)
        st = bs_h5_attr_num(d, "resolution", H5T_IEEE_F64LE, 1.0 / x->fs);
    H5Dclose(d);
    bs_mem_free(buf), bs_mem_free(t), bs_mem_free(c);
    if (st == BS_OK) {
        for (int64_t u = 0; u < x->U; u++)
            fill[u] = x->offset[u + 1];
        hid_t di = make_vector(g, "spike_times_index", index_type((uint64_t)x->S), 1, &nu, 0);
        if (di < 0)
            st = BS_ERR_INPUT;
        hsize_t z = 0;
        if (st == BS_OK)
            st = write_slice(di, 1, &z, &nu, H5T_NATIVE_INT64, fill);
        if (st == BS_OK)
            st = bs_nwb_mark_column(di, "VectorIndex", "Index for VectorData 'spike_times'", x->hash);
        if (st == BS_OK)
            st = bs_h5_attr_ref(di, "target", target_path(x, "spike_times", path));
        if (di >= 0)
            H5Dclose(di);
    }
    bs_mem_free(fill);
    return st;
}

/* Quality columns from the per-cluster tables; names appended to cols. */
static bs_status write_quality(exporter *x, hid_t g, const char **cols, int *n_cols, char (*store)[64], int *n_q)
{
    static const char *files[] = {BS_PHY_QC_METRICS,     BS_PHY_CLUSTER_QC_LABEL,  BS_PHY_CLUSTER_UNIT_TYPE,
                                  BS_PHY_CLUSTER_KSLABEL, BS_PHY_CLUSTER_GROUP,     BS_PHY_CLUSTER_AMPLITUDE,
                                  BS_PHY_CLUSTER_CONTAMPCT};
    static const char *reserved[] = {"id", "spike_times", "spike_times_index", "electrodes", "electrodes_index",
                                     "waveform_mean"};
    hsize_t nu = (hsize_t)x->U;
    *n_q = 0;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        if (!bs_phy_has(x->dir, files[f]))
            continue;
        char path[4200];
        bs_tsv_table tab;
        BS_TRY(bs_path_join(path, sizeof path, x->dir, files[f]));
        BS_TRY(bs_tsv_read(path, &tab));
        int64_t *row = bs_mem_alloc("export/nwb-quality", (size_t)(x->U ? x->U : 1) * sizeof *row);
        double *num = bs_mem_alloc("export/nwb-quality", (size_t)(x->U ? x->U : 1) * sizeof *num);
        const char **txt = calloc((size_t)(x->U ? x->U : 1), sizeof *txt);
        bs_status st = row && num && txt ? BS_OK : BS_ERR_MEMORY;
        for (int64_t u = 0; u < x->U && st == BS_OK; u++)
            row[u] = bs_tsv_find(&tab, x->unit_id[u]);
        for (int c = 0; c < tab.n_cols && st == BS_OK && *n_cols < BS_TSV_MAX_COLS; c++) {
            const bs_tsv_col *col = &tab.cols[c];
            int used = 0;
            for (size_t r = 0; r < sizeof reserved / sizeof reserved[0]; r++)
                used |= strcmp(reserved[r], col->name) == 0;
            for (int j = 0; j < *n_cols; j++)
                used |= strcmp(cols[j], col->name) == 0;
            if (used)
                continue;
            hid_t d;
            if (col->numeric) {
                int64_t n_val = 0;
                for (int64_t u = 0; u < x->U; u++) {
                    num[u] = row[u] >= 0 ? col->num[row[u]] : NAN;
                    n_val += !isnan(num[u]);
                }
                if (n_val == 0 && x->U > 0)
                    continue; /* no value at all: nwbinspector's check_col_not_nan */
                d = bs_h5_dataset(g, col->name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &nu, 0, num);
            } else {
                for (int64_t u = 0; u < x->U; u++)
                    txt[u] = row[u] >= 0 ? col->text[row[u]] : "";
                st = bs_h5_strs_dataset(g, col->name, txt, x->U);
                d = st == BS_OK ? H5Dopen2(g, col->name, H5P_DEFAULT) : -1;
            }
            if (d < 0) {
                st = st != BS_OK ? st : BS_ERR_INPUT;
                break;
            }
            char desc[256];
            snprintf(desc, sizeof desc, "%s from %s", col->name, files[f]);
            st = bs_nwb_mark_column(d, "VectorData", desc, x->hash);
            H5Dclose(d);
            snprintf(store[*n_cols], 64, "%s", col->name);
            cols[*n_cols] = store[*n_cols];
            (*n_cols)++;
            (*n_q)++;
        }
        bs_mem_free(row), bs_mem_free(num);
        free(txt);
        bs_tsv_free(&tab);
        BS_TRY(st);
    }
    return BS_OK;
}

/* Copy the input NWB file into the open temporary file. */
static bs_status copy_file(const char *src, bs_atomic_file *dst)
{
    FILE *in = fopen(src, "rb");
    if (!in)
        return bs_error(BS_ERR_INPUT, "%s: cannot open: %s", src, strerror(errno));
    char *buf = bs_mem_alloc("export/nwb-copy", (size_t)1 << 20);
    bs_status st = buf ? BS_OK : BS_ERR_MEMORY;
    size_t k;
    while (st == BS_OK && (k = fread(buf, 1, (size_t)1 << 20, in)) > 0)
        if (fwrite(buf, 1, k, dst->fp) != k)
            st = bs_error(BS_ERR_INPUT, "%s: write failed: %s", dst->path, strerror(errno));
    if (st == BS_OK && ferror(in))
        st = bs_error(BS_ERR_INPUT, "%s: read failed", src);
    if (st == BS_OK && fflush(dst->fp) != 0)
        st = bs_error(BS_ERR_INPUT, "%s: write failed: %s", dst->path, strerror(errno));
    fclose(in);
    bs_mem_free(buf);
    return st;
}

/* A new file: skeleton + electrodes from the Phy folder's channels. */
static bs_status new_file(exporter *x, hid_t file)
{
    char path[4200], id[37], desc[4400], start[32], now[32];
    struct stat sb;
    BS_TRY(bs_path_join(path, sizeof path, x->dir, BS_PHY_SPIKE_TIMES));
    bs_nwb_iso_time(stat(path, &sb) == 0 ? (long long)sb.st_mtime : 0, start);
    bs_nwb_iso_time((long long)time(NULL), now);
    bs_nwb_uuid(x->hash, "identifier", id);
    snprintf(desc, sizeof desc,
             "units sorted by boundsort from %s (session_start_time is when the sorting was written: the "
             "recording's start is not known from a Phy folder)",
             x->dir);
    const bs_nwb_general *m = x->o->meta;
    bs_nwb_file_desc fd = {id, m && m->session_description ? m->session_description : desc, start, now, x->hash};
    BS_TRY(bs_nwb_write_skeleton(file, &fd));
    /* positions and shanks */
    bs_npy_header h;
    void *pos = NULL, *sh = NULL;
    BS_TRY(bs_path_join(path, sizeof path, x->dir, BS_PHY_CHANNEL_POSITIONS));
    BS_TRY(bs_npy_load(path, "export/nwb-channels", &h, &pos));
    if (h.ndim != 2 || h.shape[0] != x->C || h.shape[1] != 2 || (h.dtype != BS_NPY_F32 && h.dtype != BS_NPY_F64)) {
        bs_mem_free(pos);
        return bs_error(BS_ERR_INPUT, "%s: expected float32/float64 (%d channels, 2), got %s with %d dimensions", path,
                        x->C, bs_npy_dtype_descr(h.dtype), h.ndim);
    }
    int is64 = h.dtype == BS_NPY_F64;
    double *xy = bs_mem_alloc("export/nwb-channels", (size_t)x->C * 2 * sizeof *xy);
    int *grp = bs_mem_alloc("export/nwb-channels", (size_t)x->C * sizeof *grp);
    int32_t *shank_id = bs_mem_alloc("export/nwb-channels", (size_t)x->C * sizeof *shank_id);
    bs_status st = xy && grp && shank_id ? BS_OK : BS_ERR_MEMORY;
    for (int c = 0; c < x->C && st == BS_OK; c++) {
        xy[c] = is64 ? ((double *)pos)[2 * c] : ((float *)pos)[2 * c];
        xy[x->C + c] = is64 ? ((double *)pos)[2 * c + 1] : ((float *)pos)[2 * c + 1];
        shank_id[c] = 0;
    }
    if (st == BS_OK && bs_phy_has(x->dir, BS_PHY_CHANNEL_SHANKS)) {
        st = bs_path_join(path, sizeof path, x->dir, BS_PHY_CHANNEL_SHANKS);
        if (st == BS_OK)
            st = bs_npy_load(path, "export/nwb-channels", &h, &sh);
        if (st == BS_OK && (h.ndim != 1 || h.shape[0] != x->C || (h.dtype != BS_NPY_I32 && h.dtype != BS_NPY_I64)))
            st = bs_error(BS_ERR_INPUT, "%s: expected int32/int64 (%d channels), got %s with %d dimensions", path, x->C,
                          bs_npy_dtype_descr(h.dtype), h.ndim);
        for (int c = 0; c < x->C && st == BS_OK; c++)
            shank_id[c] = h.dtype == BS_NPY_I32 ? ((int32_t *)sh)[c] : (int32_t)((int64_t *)sh)[c];
    }
    int n_groups = 0; /* shank ids -> groups in order of first appearance */
    for (int c = 0; c < x->C && st == BS_OK; c++) {
        int k = 0;
        while (k < c && shank_id[k] != shank_id[c])
            k++;
        grp[c] = k < c ? grp[k] : n_groups++;
    }
    if (st == BS_OK) {
        bs_nwb_electrodes e = {x->C, xy, xy + x->C, grp, n_groups, "probe",
                               "the probe of the sorted recording (positions from channel_positions.npy)"};
        st = bs_nwb_write_electrodes(file, &e, x->hash);
    }
    bs_mem_free(pos), bs_mem_free(sh), bs_mem_free(xy), bs_mem_free(grp), bs_mem_free(shank_id);
    snprintf(x->table, sizeof x->table, "%s", BS_NWB_ELECTRODES);
    return st;
}

static bs_status write_units(exporter *x, hid_t file, bs_nwb_export_summary *sum)
{
    snprintf(x->units, sizeof x->units, "/units");
    if (bs_h5_exists(file, "/units")) {
        bs_log_warn("%s already has a /units table: writing the sorting to /processing/boundsort/units",
                    x->o->input_nwb);
        snprintf(x->units, sizeof x->units, "/processing/boundsort/units");
        if (bs_h5_exists(file, "/processing/boundsort"))
            return bs_error(BS_ERR_INPUT, "%s: /units and /processing/boundsort already exist: expected room for the "
                                          "sorted units (write a new file: omit --input-nwb)",
                            x->o->input_nwb);
        if (!bs_h5_exists(file, "/processing")) {
            hid_t p = bs_h5_group(file, "/processing");
            if (p < 0)
                return BS_ERR_INPUT;
            H5Gclose(p);
        }
        hid_t m = bs_h5_group(file, "/processing/boundsort");
        if (m < 0)
            return BS_ERR_INPUT;
        bs_status st = bs_nwb_mark(m, "core", "ProcessingModule", x->hash);
        if (st == BS_OK)
            st = bs_h5_attr_str(m, "description", "spike sorting by boundsort");
        H5Gclose(m);
        BS_TRY(st);
    }
    hid_t g = bs_h5_group(file, x->units);
    if (g < 0)
        return BS_ERR_INPUT;
    bs_status st = bs_nwb_mark(g, "core", "Units", x->hash);
    if (st == BS_OK)
        st = bs_h5_attr_str(g, "description", "units sorted by boundsort (cluster ids of the Phy folder)");
    /* id */
    if (st == BS_OK) {
        hsize_t nu = (hsize_t)x->U;
        int64_t *ids = bs_mem_alloc("export/nwb-units", (size_t)(x->U ? x->U : 1) * sizeof *ids);
        if (!ids)
            st = BS_ERR_MEMORY;
        for (int64_t u = 0; u < x->U && st == BS_OK; u++)
            ids[u] = x->unit_id[u];
        hid_t d = st == BS_OK ? bs_h5_dataset(g, "id", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &nu, 0, ids) : -1;
        if (st == BS_OK)
            st = d >= 0 ? bs_nwb_mark_column(d, "ElementIdentifiers", NULL, x->hash) : BS_ERR_INPUT;
        if (d >= 0)
            H5Dclose(d);
        bs_mem_free(ids);
    }
    if (st == BS_OK)
        st = write_spike_times(x, g, &sum->n_passes);
    if (st == BS_OK)
        st = write_waveforms(x, g);
    const char *cols[BS_TSV_MAX_COLS + 3] = {"spike_times", "electrodes", "waveform_mean"};
    char store[BS_TSV_MAX_COLS + 3][64];
    int n_cols = 3;
    if (st == BS_OK)
        st = write_quality(x, g, cols, &n_cols, store, &sum->n_quality_columns);
    if (st == BS_OK)
        st = bs_h5_attr_strs(g, "colnames", cols, n_cols);
    H5Gclose(g);
    return st;
}

static void exporter_free(exporter *x)
{
    bs_npy_rows_close(&x->rt), bs_npy_rows_close(&x->rc);
    if (x->have_k)
        bs_npy_rows_close(&x->rk);
    if (x->have_templates)
        bs_npy_rows_close(&x->rtm);
    bs_mem_free(x->count), bs_mem_free(x->unit_of), bs_mem_free(x->unit_id), bs_mem_free(x->offset);
    bs_mem_free(x->chan_map), bs_mem_free(x->el_row), bs_mem_free(x->winv);
    if (x->have_rec)
        bs_recording_close(&x->rec);
}

bs_status bs_nwb_export(const bs_nwb_export_opts *o, bs_nwb_export_summary *sum)
{
    bs_nwb_export_summary dummy;
    if (!sum)
        sum = &dummy;
    memset(sum, 0, sizeof *sum);
    exporter *x = calloc(1, sizeof *x);
    if (!x)
        return bs_error(BS_ERR_MEMORY, "export-nwb: out of memory");
    x->o = o;
    x->rt.fd = x->rc.fd = x->rk.fd = x->rtm.fd = -1;
    snprintf(x->dir, sizeof x->dir, "%s", o->phy_dir);
    bs_h5_quiet();
    bs_status st = bs_nwb_general_check(o->meta);
    if (st == BS_OK)
        st = bs_phy_read_sample_rate(x->dir, &x->fs);
    bs_source src;
    if (bs_source_read(x->dir, &src) == BS_OK && src.window[0] > 0)
        x->window0 = src.window[0]; /* a Phy folder boundsort did not write has no source.json: from 0 */
    if (st == BS_OK && o->input_nwb) {
        st = bs_nwb_open(o->input_nwb, o->series, &x->rec);
        x->have_rec = st == BS_OK;
        if (st == BS_OK && x->window0 > 0)
            st = bs_recording_window(&x->rec, x->window0, x->rec.n_samples);
        if (st == BS_OK && fabs(x->rec.fs_hz - x->fs) > 1e-6 * x->fs)
            st = bs_error(BS_ERR_INPUT, "%s: sampling rate %.9g Hz, but %s/params.py says %.9g Hz: is this the "
                                        "recording that was sorted?",
                          o->input_nwb, x->rec.fs_hz, x->dir, x->fs);
        if (st == BS_OK) {
            const bs_nwb_info *info = bs_nwb_get_info(&x->rec);
            snprintf(x->table, sizeof x->table, "%s", info->electrodes);
        }
    }
    if (st == BS_OK)
        st = open_vector(x, &x->rt, BS_PHY_SPIKE_TIMES, BS_NPY_I64, BS_NPY_U64, NULL);
    const char *clu = bs_phy_spike_ids_name(x->dir);
    if (st == BS_OK)
        st = open_vector(x, &x->rc, clu, BS_NPY_I32, BS_NPY_I32, NULL);
    if (st == BS_OK && strcmp(clu, BS_PHY_SPIKE_CLUSTERS) == 0 && bs_phy_has(x->dir, BS_PHY_SPIKE_TEMPLATES)) {
        st = open_vector(x, &x->rk, BS_PHY_SPIKE_TEMPLATES, BS_NPY_I32, BS_NPY_I32, NULL);
        x->have_k = st == BS_OK;
    }
    if (st == BS_OK) {
        x->S = x->rt.h.shape[0];
        if (x->rc.h.shape[0] != x->S || (x->have_k && x->rk.h.shape[0] != x->S))
            st = bs_error(BS_ERR_INPUT, "%s: %lld spikes in spike_times.npy but %lld in %s: expected one row per spike",
                          x->dir, (long long)x->S,
                          (long long)(x->rc.h.shape[0] != x->S ? x->rc.h.shape[0] : x->rk.h.shape[0]),
                          x->rc.h.shape[0] != x->S ? clu : BS_PHY_SPIKE_TEMPLATES);
    }
    if (st == BS_OK)
        st = count_spikes(x);
    if (st == BS_OK)
        st = load_channels(x);
    /* the file */
    char out[4200];
    if (st == BS_OK) {
        if (o->out_path)
            snprintf(out, sizeof out, "%s", o->out_path);
        else
            st = bs_path_join(out, sizeof out, x->dir, "units.nwb");
    }
    bs_atomic_file af = {0};
    int af_open = 0;
    hid_t file = -1;
    if (st == BS_OK) {
        st = bs_atomic_open(&af, out);
        af_open = st == BS_OK;
    }
    if (st == BS_OK && o->input_nwb) {
        st = copy_file(o->input_nwb, &af);
        if (st == BS_OK && (file = H5Fopen(af.tmp_path, H5F_ACC_RDWR, H5P_DEFAULT)) < 0)
            st = bs_h5_fail(BS_ERR_INPUT, "%s: cannot open the copy of %s for writing", out, o->input_nwb);
    } else if (st == BS_OK) {
        if ((file = H5Fcreate(af.tmp_path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)) < 0)
            st = bs_h5_fail(BS_ERR_INPUT, "%s: cannot create the HDF5 file", out);
        if (st == BS_OK)
            st = new_file(x, file);
    }
    if (st == BS_OK)
        st = bs_nwb_write_general(file, o->meta, x->hash);
    if (st == BS_OK)
        st = write_units(x, file, sum);
    if (file >= 0 && H5Fclose(file) < 0 && st == BS_OK)
        st = bs_h5_fail(BS_ERR_INPUT, "%s: cannot close the HDF5 file", out);
    if (af_open) {
        if (st == BS_OK)
            st = bs_atomic_commit(&af);
        else
            bs_atomic_abort(&af);
    }
    if (st == BS_OK) {
        sum->n_units = x->U;
        sum->n_spikes = x->S;
        snprintf(sum->path, sizeof sum->path, "%s", out);
    }
    exporter_free(x);
    free(x);
    return st;
}
#endif
