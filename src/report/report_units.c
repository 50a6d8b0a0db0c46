/*
 * report_units.c - the folder's basics: params.py, the probe, and the units.
 *
 * params.py is read for sample_rate (required, Hz) and, to know the
 * recording's length, dat_path / n_channels_dat / dtype / offset: the length
 * is the raw files' size in samples when they are there, otherwise the last
 * spike time (the page says which). Only the `key = value` lines with a
 * number, a quoted string or a list of quoted strings are understood; other
 * lines are ignored (Phy executes the file as Python; we do not).
 *
 * Units. One streamed pass over spike_clusters.npy (else spike_templates.npy)
 * with spike_times.npy checks that the times are non-negative and sorted
 * and the ids are integers in [0, 2^24), and counts spikes per cluster id in
 * tables indexed by id that grow as larger ids appear. The same pass finds
 * each cluster's template with the Boyer-Moore majority vote over
 * spike_templates.npy: one candidate and one counter per cluster, exact when
 * one template holds more than half of the cluster's spikes (always so for a
 * cluster that a curator did not merge). Units are the ids with spikes, in
 * ascending order.
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/fileio.h"
#include "../mem/mem.h"
#include "report_internal.h"

/* ---- params.py ---- */

typedef struct {
    double sample_rate;
    double n_channels_dat;
    double offset;
    char dtype[32];
    char dat_path[8][1024]; /* first 8 files of a list */
    int n_dat;
} py_params;

static const char *skip_sp(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* A quoted string starting at s (optional r/b prefix); returns the end or NULL. */
static const char *py_string(const char *s, char *out, size_t outlen)
{
    if (*s == 'r' || *s == 'R' || *s == 'b' || *s == 'B')
        s++;
    char q = *s;
    if (q != '\'' && q != '"')
        return NULL;
    s++;
    size_t n = 0;
    while (*s && *s != q && *s != '\n') {
        if (n + 1 < outlen)
            out[n++] = *s;
        s++;
    }
    out[n] = '\0';
    return *s == q ? s + 1 : NULL;
}

static bs_status read_params(const char *dir, py_params *pp)
{
    memset(pp, 0, sizeof *pp);
    pp->sample_rate = NAN;
    pp->n_channels_dat = NAN;
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, dir, "params.py"));
    struct stat sb;
    if (stat(path, &sb) != 0)
        return bs_error(BS_ERR_INPUT,
                        "%s: not a Phy folder: params.py is missing (expected the output folder of boundsort sort)",
                        dir);
    char *text;
    size_t len;
    BS_TRY(bs_read_text_file(path, 1 << 20, &text, &len));
    int line_no = 0;
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        line_no++;
        const char *s = skip_sp(line);
        char key[64];
        size_t k = 0;
        while ((isalnum((unsigned char)*s) || *s == '_') && k + 1 < sizeof key)
            key[k++] = *s++;
        key[k] = '\0';
        s = skip_sp(s);
        if (k == 0 || *s != '=')
            continue;
        s = skip_sp(s + 1);
        char *end;
        double v = strtod(s, &end);
        int is_num = end != s;
        if (strcmp(key, "sample_rate") == 0) {
            if (!is_num || !(v > 0) || !isfinite(v)) {
                free(text);
                return bs_error(BS_ERR_INPUT, "%s: line %d: field 'sample_rate': expected a number > 0 (Hz)", path,
                                line_no);
            }
            pp->sample_rate = v;
        } else if (strcmp(key, "n_channels_dat") == 0 && is_num) {
            pp->n_channels_dat = v;
        } else if (strcmp(key, "offset") == 0 && is_num) {
            pp->offset = v;
        } else if (strcmp(key, "dtype") == 0) {
            py_string(s, pp->dtype, sizeof pp->dtype);
        } else if (strcmp(key, "dat_path") == 0) {
            if (*s == '[') {
                s = skip_sp(s + 1);
                while (pp->n_dat < 8 && (s = py_string(s, pp->dat_path[pp->n_dat], sizeof pp->dat_path[0]))) {
                    pp->n_dat++;
                    s = skip_sp(s);
                    if (*s != ',')
                        break;
                    s = skip_sp(s + 1);
                }
            } else if (py_string(s, pp->dat_path[0], sizeof pp->dat_path[0])) {
                pp->n_dat = 1;
            }
        }
    }
    free(text);
    if (!isfinite(pp->sample_rate))
        return bs_error(BS_ERR_INPUT, "%s: field 'sample_rate': expected a line 'sample_rate = <Hz>', found none",
                        path);
    return BS_OK;
}

static int dtype_itemsize(const char *t)
{
    static const struct {
        const char *name;
        int bytes;
    } tab[] = {{"int16", 2}, {"uint16", 2}, {"<i2", 2}, {"<u2", 2}, {"int32", 4}, {"uint32", 4}, {"<i4", 4},
               {"float32", 4}, {"<f4", 4}, {"float64", 8}, {"<f8", 8}, {"int8", 1}, {"uint8", 1}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(t, tab[i].name) == 0)
            return tab[i].bytes;
    return 0;
}

/* Samples in the raw files, or -1 when they cannot be measured. */
static double raw_samples(const char *dir, const py_params *pp)
{
    int item = dtype_itemsize(pp->dtype);
    if (pp->n_dat == 0 || item == 0 || !(pp->n_channels_dat >= 1))
        return -1;
    double bytes = 0;
    for (int i = 0; i < pp->n_dat; i++) {
        char path[4200];
        const char *p = pp->dat_path[i];
        if (p[0] != '/') {
            if (bs_path_join(path, sizeof path, dir, p) != BS_OK)
                return -1;
            p = path;
        }
        struct stat sb;
        if (stat(p, &sb) != 0 || (double)sb.st_size < pp->offset)
            return -1;
        bytes += (double)sb.st_size - pp->offset;
    }
    return floor(bytes / (pp->n_channels_dat * item));
}

/* ---- probe ---- */

static bs_status load_probe(rp_data *d)
{
    rp_col c = RP_COL_INIT;
    if (!rp_exists(d->dir, "channel_positions.npy"))
        return bs_error(BS_ERR_INPUT, "%s: not a Phy folder: channel_positions.npy is missing", d->dir);
    BS_TRY(rp_col_open(&c, d->dir, "channel_positions.npy", 2, 4096));
    bs_status st = BS_OK;
    double *xy = NULL;
    if (c.n_rows < 1 || c.n_rows > 4096) {
        st = bs_error(BS_ERR_INPUT, "%s: shape: expected 1 to 4096 channels, got %lld", c.r.path,
                      (long long)c.n_rows);
        goto done;
    }
    d->n_chan = (int)c.n_rows;
    xy = bs_mem_alloc("report/channels", (size_t)d->n_chan * 2 * sizeof *xy);
    d->chan_x = bs_mem_alloc("report/channels", (size_t)d->n_chan * sizeof(float));
    d->chan_y = bs_mem_alloc("report/channels", (size_t)d->n_chan * sizeof(float));
    d->chan_shank = bs_mem_calloc("report/channels", (size_t)d->n_chan, sizeof(int32_t));
    if (!xy || !d->chan_x || !d->chan_y || !d->chan_shank) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    if ((st = rp_col_read(&c, 0, d->n_chan, xy)) != BS_OK)
        goto done;
    for (int i = 0; i < d->n_chan; i++) {
        if (!isfinite(xy[2 * i]) || !isfinite(xy[2 * i + 1])) {
            st = bs_error(BS_ERR_INPUT, "%s: row %d: expected finite x, y in µm", c.r.path, i);
            goto done;
        }
        d->chan_x[i] = (float)xy[2 * i];
        d->chan_y[i] = (float)xy[2 * i + 1];
    }
    rp_col_close(&c);
    if (rp_exists(d->dir, "channel_shanks.npy")) {
        if ((st = rp_col_open(&c, d->dir, "channel_shanks.npy", 1, 4096)) != BS_OK)
            goto done;
        if (c.n_rows != d->n_chan) {
            st = bs_error(BS_ERR_INPUT, "%s: shape: expected %d rows (one per channel), got %lld", c.r.path,
                          d->n_chan, (long long)c.n_rows);
            goto done;
        }
        if ((st = rp_col_read(&c, 0, d->n_chan, xy)) != BS_OK)
            goto done;
        for (int i = 0; i < d->n_chan; i++)
            d->chan_shank[i] = isfinite(xy[i]) && fabs(xy[i]) < 1e6 ? (int32_t)xy[i] : 0;
    }
done:
    rp_col_close(&c);
    bs_mem_free(xy);
    return st;
}

/* ---- units ---- */

typedef struct {
    int64_t cap;     /* ids the tables hold */
    int64_t *count;  /* spikes per id */
    int32_t *cand;   /* majority-vote candidate template per id */
    int64_t *votes;  /* its vote counter */
} id_tables;

static bs_status grow(id_tables *t, int64_t need)
{
    int64_t cap = t->cap ? t->cap : 1024;
    while (cap < need)
        cap *= 2;
    if (cap == t->cap)
        return BS_OK;
    int64_t *c = bs_mem_realloc(t->count, "report/id_tables", (size_t)cap * sizeof *c);
    if (!c)
        return BS_ERR_MEMORY;
    t->count = c;
    int32_t *a = bs_mem_realloc(t->cand, "report/id_tables", (size_t)cap * sizeof *a);
    if (!a)
        return BS_ERR_MEMORY;
    t->cand = a;
    int64_t *v = bs_mem_realloc(t->votes, "report/id_tables", (size_t)cap * sizeof *v);
    if (!v)
        return BS_ERR_MEMORY;
    t->votes = v;
    for (int64_t i = t->cap; i < cap; i++) {
        t->count[i] = 0;
        t->cand[i] = -1;
        t->votes[i] = 0;
    }
    t->cap = cap;
    return BS_OK;
}

static bs_status check_id(const rp_col *c, int64_t row, double v)
{
    if (!(v >= 0) || v > RP_MAX_CLUSTER_ID || v != floor(v))
        return bs_error(BS_ERR_INPUT, "%s: row %lld: expected an integer id in [0, %d], got %g", c->r.path,
                        (long long)row, RP_MAX_CLUSTER_ID, v);
    return BS_OK;
}

static bs_status count_units(rp_data *d, double *last_time)
{
    const char *ids_name = d->have_clusters ? "spike_clusters.npy" : "spike_templates.npy";
    int vote = d->have_clusters && d->have_templates_ids;
    rp_col ct = RP_COL_INIT, cc = RP_COL_INIT, cm = RP_COL_INIT;
    id_tables t = {0};
    double *bt = NULL, *bc = NULL, *bm = NULL;
    bs_status st = rp_col_open(&ct, d->dir, "spike_times.npy", 1, RP_BLOCK);
    if (st != BS_OK)
        return st;
    if ((st = rp_col_open(&cc, d->dir, ids_name, 1, RP_BLOCK)) != BS_OK)
        goto done;
    if (vote && (st = rp_col_open(&cm, d->dir, "spike_templates.npy", 1, RP_BLOCK)) != BS_OK)
        goto done;
    d->n_spikes = ct.n_rows;
    if (cc.n_rows != ct.n_rows || (vote && cm.n_rows != ct.n_rows)) {
        st = bs_error(BS_ERR_INPUT, "%s: expected %lld rows (one per spike, as spike_times.npy), got %lld",
                      cc.n_rows != ct.n_rows ? cc.r.path : cm.r.path, (long long)ct.n_rows,
                      (long long)(cc.n_rows != ct.n_rows ? cc.n_rows : cm.n_rows));
        goto done;
    }
    bt = bs_mem_alloc("report/block", RP_BLOCK * sizeof *bt);
    bc = bs_mem_alloc("report/block", RP_BLOCK * sizeof *bc);
    bm = bs_mem_alloc("report/block", RP_BLOCK * sizeof *bm);
    if (!bt || !bc || !bm || (st = grow(&t, 1)) != BS_OK) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    double prev = 0;
    for (int64_t r0 = 0; r0 < ct.n_rows; r0 += RP_BLOCK) {
        int64_t n = ct.n_rows - r0 < RP_BLOCK ? ct.n_rows - r0 : RP_BLOCK;
        if ((st = rp_col_read(&ct, r0, n, bt)) != BS_OK || (st = rp_col_read(&cc, r0, n, bc)) != BS_OK ||
            (vote && (st = rp_col_read(&cm, r0, n, bm)) != BS_OK))
            goto done;
        for (int64_t i = 0; i < n; i++) {
            if (!(bt[i] >= prev) || !isfinite(bt[i])) {
                st = bs_error(BS_ERR_INPUT, "%s: row %lld: expected non-negative sample times in ascending order, "
                              "got %g after %g", ct.r.path, (long long)(r0 + i), bt[i], prev);
                goto done;
            }
            prev = bt[i];
            if ((st = check_id(&cc, r0 + i, bc[i])) != BS_OK)
                goto done;
            int64_t id = (int64_t)bc[i];
            if (id >= t.cap && (st = grow(&t, id + 1)) != BS_OK)
                goto done;
            t.count[id]++;
            int32_t tm = (int32_t)id;
            if (vote) {
                if ((st = check_id(&cm, r0 + i, bm[i])) != BS_OK)
                    goto done;
                tm = (int32_t)bm[i];
            }
            if (t.votes[id] == 0) {
                t.cand[id] = tm;
                t.votes[id] = 1;
            } else {
                t.votes[id] += t.cand[id] == tm ? 1 : -1;
            }
        }
    }
    *last_time = prev;
    d->n_units = 0;
    d->max_id = -1;
    for (int64_t i = 0; i < t.cap; i++)
        if (t.count[i]) {
            d->n_units++;
            d->max_id = (int32_t)i;
        }
    size_t U = (size_t)d->n_units;
    d->unit_id = bs_mem_alloc("report/units", (U + 1) * sizeof(int32_t));
    d->count = bs_mem_alloc("report/units", (U + 1) * sizeof(int64_t));
    d->tmpl = bs_mem_alloc("report/units", (U + 1) * sizeof(int32_t));
    d->id_to_unit = bs_mem_alloc("report/units", ((size_t)d->max_id + 2) * sizeof(int32_t));
    if (!d->unit_id || !d->count || !d->tmpl || !d->id_to_unit) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    int64_t u = 0;
    for (int64_t i = 0; i <= d->max_id; i++) {
        d->id_to_unit[i] = t.count[i] ? (int32_t)u : -1;
        if (t.count[i]) {
            d->unit_id[u] = (int32_t)i;
            d->count[u] = t.count[i];
            d->tmpl[u] = t.cand[i];
            u++;
        }
    }
done:
    rp_col_close(&ct);
    rp_col_close(&cc);
    rp_col_close(&cm);
    bs_mem_free(bt);
    bs_mem_free(bc);
    bs_mem_free(bm);
    bs_mem_free(t.count);
    bs_mem_free(t.cand);
    bs_mem_free(t.votes);
    return st;
}

bs_status rp_load_units(rp_data *d)
{
    py_params pp;
    BS_TRY(read_params(d->dir, &pp));
    d->fs_hz = pp.sample_rate;
    if (!rp_exists(d->dir, "spike_times.npy"))
        return bs_error(BS_ERR_INPUT, "%s: not a Phy folder: spike_times.npy is missing", d->dir);
    d->have_clusters = rp_exists(d->dir, "spike_clusters.npy");
    d->have_templates_ids = rp_exists(d->dir, "spike_templates.npy");
    if (!d->have_clusters && !d->have_templates_ids)
        return bs_error(BS_ERR_INPUT, "%s: not a Phy folder: neither spike_clusters.npy nor spike_templates.npy",
                        d->dir);
    BS_TRY(load_probe(d));
    double last = 0;
    BS_TRY(count_units(d, &last));
    if (d->n_spikes == 0)
        rp_note(d, "the folder has no spikes");
    double ns = raw_samples(d->dir, &pp);
    if (ns > last) {
        d->duration_s = ns / d->fs_hz;
        d->duration_source = "raw file size (params.py dat_path)";
    } else {
        d->duration_s = (last + 1) / d->fs_hz;
        d->duration_source = "last spike time (raw file of params.py dat_path not found)";
        rp_note(d, "recording length taken from the last spike (%.1f s): the raw file named in params.py is not "
                   "readable, so firing rates may be slightly high", d->duration_s);
    }
    d->have_amplitudes = rp_exists(d->dir, "amplitudes.npy");
    d->have_positions = rp_exists(d->dir, "spike_positions.npy");
    if (!d->have_amplitudes)
        rp_note(d, "amplitudes.npy absent: no amplitude plots");
    if (!d->have_positions)
        rp_note(d, "spike_positions.npy absent: unit positions come from the templates, no spike position plot");
    size_t U = (size_t)d->n_units;
    d->amp_sum = bs_mem_calloc("report/units", U + 1, sizeof(double));
    d->pos_sum = bs_mem_calloc("report/units", 2 * U + 2, sizeof(double));
    d->pos_n = bs_mem_calloc("report/units", U + 1, sizeof(int64_t));
    if (!d->amp_sum || !d->pos_sum || !d->pos_n)
        return BS_ERR_MEMORY;
    return BS_OK;
}

void rp_emit_units(rp_json *j, const rp_data *d)
{
    rpj_num(j, "fs_hz", d->fs_hz);
    rpj_num(j, "duration_s", d->duration_s);
    rpj_str(j, "duration_source", d->duration_source);
    rpj_int(j, "n_spikes", d->n_spikes);
    rpj_int(j, "n_units", d->n_units);
    rpj_obj(j, "channels");
    rpj_int(j, "n", d->n_chan);
    rpj_floats(j, "x", d->chan_x, (size_t)d->n_chan);
    rpj_floats(j, "y", d->chan_y, (size_t)d->n_chan);
    rpj_arr(j, "shank");
    for (int i = 0; i < d->n_chan; i++)
        rpj_int(j, NULL, d->chan_shank[i]);
    rpj_end_arr(j);
    rpj_end_obj(j);
    rpj_typed(j, "unit_ids", "i32", d->unit_id, (size_t)d->n_units);
}
