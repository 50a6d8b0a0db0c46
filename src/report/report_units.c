/*
 * report_units.c - the folder's basics: params.py, the probe, and the units.
 *
 * params.py (parsed by src/export/phy_read.h) is read for sample_rate
 * (required, Hz) and, to know the recording's length, dat_path /
 * n_channels_dat / dtype / offset: the length is the raw files' size in
 * samples when they are there, otherwise the last spike time (the page says
 * which). Lines that are not `NAME = value` are ignored (Phy executes the
 * file as Python; we do not), unless they assign sample_rate.
 *
 * Units. One streamed pass over spike_clusters.npy (else spike_templates.npy)
 * with spike_times.npy checks the times with the rules qc applies too
 * (bs_phy_times_next, phy_read.h: integers >= 0, sorted, inside the
 * recording, or within a year when the raw files are not there) and that
 * the ids are integers in [0, 2^24), and counts spikes per cluster id in
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

/* dir/params.py parsed (phy_read.h), with sample_rate checked. */
static bs_status read_params(const char *dir, bs_phy_params *pp, double *fs_hz)
{
    char path[4200];
    memset(pp, 0, sizeof *pp);
    BS_TRY(bs_path_join(path, sizeof path, dir, BS_PHY_PARAMS));
    if (!bs_phy_has(dir, BS_PHY_PARAMS))
        return bs_error(BS_ERR_INPUT,
                        "%s: not a Phy folder: params.py is missing (expected the output folder of boundsort sort)",
                        dir);
    BS_TRY(bs_phy_params_read(dir, pp));
    const bs_py_value *v = bs_phy_params_get(pp, "sample_rate");
    int bad = bs_phy_params_bad_key(pp, "sample_rate");
    if (!bad && v && !(v->type == BS_PY_NUM && v->num > 0))
        bad = v->line;
    if (bad) {
        bs_phy_params_free(pp);
        return bs_error(BS_ERR_INPUT, "%s: line %d: field 'sample_rate': expected a number > 0 (Hz)", path, bad);
    }
    if (!v) {
        bs_phy_params_free(pp);
        return bs_error(BS_ERR_INPUT, "%s: field 'sample_rate': expected a line 'sample_rate = <Hz>', found none",
                        path);
    }
    *fs_hz = v->num;
    return BS_OK;
}

/* ---- probe ---- */

static bs_status load_probe(rp_data *d)
{
    bs_phy_col c = BS_PHY_COL_INIT;
    if (!bs_phy_has(d->dir, BS_PHY_CHANNEL_POSITIONS))
        return bs_error(BS_ERR_INPUT, "%s: not a Phy folder: channel_positions.npy is missing", d->dir);
    BS_TRY(rp_col_open(&c, d->dir, BS_PHY_CHANNEL_POSITIONS, 2, 4096));
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
    if ((st = bs_phy_col_f64(&c, 0, d->n_chan, xy)) != BS_OK)
        goto done;
    for (int i = 0; i < d->n_chan; i++) {
        if (!isfinite(xy[2 * i]) || !isfinite(xy[2 * i + 1])) {
            st = bs_error(BS_ERR_INPUT, "%s: row %d: expected finite x, y in µm", c.r.path, i);
            goto done;
        }
        d->chan_x[i] = (float)xy[2 * i];
        d->chan_y[i] = (float)xy[2 * i + 1];
    }
    bs_phy_col_close(&c);
    if (bs_phy_has(d->dir, BS_PHY_CHANNEL_SHANKS)) {
        if ((st = rp_col_open(&c, d->dir, BS_PHY_CHANNEL_SHANKS, 1, 4096)) != BS_OK)
            goto done;
        if (c.n_rows != d->n_chan) {
            st = bs_error(BS_ERR_INPUT, "%s: shape: expected %d rows (one per channel), got %lld", c.r.path,
                          d->n_chan, (long long)c.n_rows);
            goto done;
        }
        if ((st = bs_phy_col_f64(&c, 0, d->n_chan, xy)) != BS_OK)
            goto done;
        for (int i = 0; i < d->n_chan; i++)
            d->chan_shank[i] = isfinite(xy[i]) && fabs(xy[i]) < 1e6 ? (int32_t)xy[i] : 0;
    }
done:
    bs_phy_col_close(&c);
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

static bs_status check_id(const bs_phy_col *c, int64_t row, double v)
{
    if (!(v >= 0) || v > RP_MAX_CLUSTER_ID || v != floor(v))
        return bs_error(BS_ERR_INPUT, "%s: row %lld: expected an integer id in [0, %d], got %g", c->r.path,
                        (long long)row, RP_MAX_CLUSTER_ID, v);
    return BS_OK;
}

static bs_status count_units(rp_data *d, double n_samples, double *last_time)
{
    const char *ids_name = d->have_clusters ? BS_PHY_SPIKE_CLUSTERS : BS_PHY_SPIKE_TEMPLATES;
    int vote = d->have_clusters && d->have_templates_ids;
    bs_phy_col ct = BS_PHY_COL_INIT, cc = BS_PHY_COL_INIT, cm = BS_PHY_COL_INIT;
    id_tables t = {0};
    int64_t *bt = NULL;
    double *bc = NULL, *bm = NULL;
    bs_status st = bs_phy_col_open(&ct, d->dir, BS_PHY_SPIKE_TIMES, BS_PHY_COL_INT, 1, RP_BLOCK, "report/read_block");
    if (st != BS_OK)
        return st;
    if ((st = rp_col_open(&cc, d->dir, ids_name, 1, RP_BLOCK)) != BS_OK)
        goto done;
    if (vote && (st = rp_col_open(&cm, d->dir, BS_PHY_SPIKE_TEMPLATES, 1, RP_BLOCK)) != BS_OK)
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
    bs_phy_times_check tc; /* the spike-time rules qc shares (phy_read.h) */
    bs_phy_times_begin(&tc, ct.r.path, n_samples >= 0 ? (int64_t)n_samples : -1, d->fs_hz);
    for (int64_t r0 = 0; r0 < ct.n_rows; r0 += RP_BLOCK) {
        int64_t n = ct.n_rows - r0 < RP_BLOCK ? ct.n_rows - r0 : RP_BLOCK;
        if ((st = bs_phy_col_i64(&ct, r0, n, bt)) != BS_OK || (st = bs_phy_col_f64(&cc, r0, n, bc)) != BS_OK ||
            (vote && (st = bs_phy_col_f64(&cm, r0, n, bm)) != BS_OK) || (st = bs_phy_times_next(&tc, r0, bt, n)) != BS_OK)
            goto done;
        for (int64_t i = 0; i < n; i++) {
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
    *last_time = (double)(tc.prev > 0 ? tc.prev : 0);
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
    bs_phy_col_close(&ct);
    bs_phy_col_close(&cc);
    bs_phy_col_close(&cm);
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
    bs_phy_params pp;
    BS_TRY(read_params(d->dir, &pp, &d->fs_hz));
    double ns = bs_phy_raw_samples(d->dir, &pp);
    bs_phy_params_free(&pp);
    if (!bs_phy_has(d->dir, BS_PHY_SPIKE_TIMES))
        return bs_error(BS_ERR_INPUT, "%s: not a Phy folder: spike_times.npy is missing", d->dir);
    d->have_clusters = bs_phy_has(d->dir, BS_PHY_SPIKE_CLUSTERS);
    d->have_templates_ids = bs_phy_has(d->dir, BS_PHY_SPIKE_TEMPLATES);
    if (!d->have_clusters && !d->have_templates_ids)
        return bs_error(BS_ERR_INPUT, "%s: not a Phy folder: neither spike_clusters.npy nor spike_templates.npy",
                        d->dir);
    BS_TRY(load_probe(d));
    double last = 0;
    BS_TRY(count_units(d, ns, &last));
    if (d->n_spikes == 0)
        rp_note(d, "the folder has no spikes");
    if (ns > last) {
        d->duration_s = ns / d->fs_hz;
        d->duration_source = "raw file size (params.py dat_path)";
    } else {
        d->duration_s = (last + 1) / d->fs_hz;
        d->duration_source = "last spike time (raw file of params.py dat_path not found)";
        rp_note(d, "recording length taken from the last spike (%.1f s): the raw file named in params.py is not "
                   "readable, so firing rates may be slightly high", d->duration_s);
    }
    d->have_amplitudes = bs_phy_has(d->dir, BS_PHY_AMPLITUDES);
    d->have_positions = bs_phy_has(d->dir, BS_PHY_SPIKE_POSITIONS);
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
