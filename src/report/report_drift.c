/*
 * report_drift.c - the drift map and the estimated motion.
 *
 * Drift map: spikes binned by time (drift_time_bins columns over the
 * recording) and depth (rows of at least 2 µm over the probe's depth range
 * plus 100 µm each side, at most drift_depth_bins). Each cell holds a spike
 * count and the sum of |amplitude|; the page colours a cell by its mean
 * |amplitude| (scale: 2nd to 98th percentile of the non-empty cells' means,
 * quantized to 8 bits) and fades it by its count. A map with fewer than a
 * third of its cells filled is sent as a list of cells (7 bytes per filled
 * cell), otherwise whole (3 bytes per cell): at most ~0.7 MB in base64
 * whatever the number of spikes. Sources, first present wins:
 * driftmap.npy (N, 3: time s, depth µm, amplitude; detected spikes, not
 * drift-corrected), else every spike at its spike_positions.npy depth with
 * amplitudes.npy, else every spike at its unit's template depth. Spikes
 * outside the depth range are counted and reported.
 *
 * Motion: drift.npy (time bins, blocks) in µm with drift_times_s.npy and
 * drift_depths_um.npy (and drift_shanks.npy) when present; more than 2,000
 * time bins are thinned to every k-th.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../mem/mem.h"
#include "report_internal.h"

#define MOTION_MAX_T 2000

bs_status rp_drift_setup(rp_data *d)
{
    float ylo = d->chan_y[0], yhi = d->chan_y[0];
    for (int c = 1; c < d->n_chan; c++) {
        ylo = d->chan_y[c] < ylo ? d->chan_y[c] : ylo;
        yhi = d->chan_y[c] > yhi ? d->chan_y[c] : yhi;
    }
    d->dmap_d0 = ylo - 100.0; /* also the motion's default block range */
    d->dmap_d1 = yhi + 100.0;
    int have_tpos = 0;
    for (int64_t u = 0; u < d->n_units && !have_tpos; u++)
        have_tpos = isfinite(d->tpos[2 * u + 1]);
    if (bs_phy_has(d->dir, "driftmap.npy")) {
        d->dmap_source = "driftmap.npy (detected spikes, uncorrected depth)";
    } else if (d->have_positions) {
        d->dmap_source = "spike_positions.npy (sorted spikes)";
        d->dmap_fill_in_pass = 1;
    } else if (have_tpos) {
        d->dmap_source = "template positions (each spike at its unit's depth)";
        d->dmap_fill_in_pass = 1;
        rp_note(d, "driftmap.npy and spike_positions.npy absent: the drift map puts each spike at its unit's "
                   "template depth, so it shows no drift within a unit");
    } else {
        rp_note(d, "no drift map: driftmap.npy, spike_positions.npy and templates are all absent");
        return BS_OK;
    }
    int nd = (int)ceil((d->dmap_d1 - d->dmap_d0) / 2.0);
    d->dmap_nd = nd < d->p.drift_depth_bins ? nd : d->p.drift_depth_bins;
    d->dmap_nt = d->p.drift_time_bins;
    d->dmap_t0 = 0;
    d->dmap_t1 = d->duration_s > 0 ? d->duration_s : 1;
    size_t cells = (size_t)d->dmap_nd * d->dmap_nt;
    d->dmap_count = bs_mem_calloc("report/driftmap", cells, sizeof(uint32_t));
    d->dmap_amp = bs_mem_calloc("report/driftmap", cells, sizeof(float));
    if (!d->dmap_count || !d->dmap_amp)
        return BS_ERR_MEMORY;
    return BS_OK;
}

void rp_drift_add(rp_data *d, double t_s, double depth_um, double amp)
{
    if (!d->dmap_count || !isfinite(t_s) || !isfinite(depth_um))
        return;
    double ft = (t_s - d->dmap_t0) / (d->dmap_t1 - d->dmap_t0) * d->dmap_nt;
    double fd = (depth_um - d->dmap_d0) / (d->dmap_d1 - d->dmap_d0) * d->dmap_nd;
    if (!(ft >= 0 && ft <= d->dmap_nt && fd >= 0 && fd < d->dmap_nd)) {
        d->dmap_outside++;
        return;
    }
    int ti = ft >= d->dmap_nt ? d->dmap_nt - 1 : (int)ft, di = (int)fd;
    size_t cell = (size_t)di * d->dmap_nt + ti;
    if (d->dmap_count[cell] < UINT32_MAX)
        d->dmap_count[cell]++;
    if (isfinite(amp))
        d->dmap_amp[cell] += (float)fabs(amp);
}

static bs_status load_driftmap(rp_data *d)
{
    bs_phy_col c = BS_PHY_COL_INIT;
    double *b = NULL;
    bs_status st = rp_col_open(&c, d->dir, "driftmap.npy", 3, RP_BLOCK);
    if (st != BS_OK)
        return st;
    b = bs_mem_alloc("report/block", (size_t)RP_BLOCK * 3 * sizeof *b);
    if (!b) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    for (int64_t r0 = 0; r0 < c.n_rows; r0 += RP_BLOCK) {
        int64_t n = c.n_rows - r0 < RP_BLOCK ? c.n_rows - r0 : RP_BLOCK;
        if ((st = bs_phy_col_f64(&c, r0, n, b)) != BS_OK)
            goto done;
        for (int64_t i = 0; i < n; i++)
            rp_drift_add(d, b[3 * i], b[3 * i + 1], b[3 * i + 2]);
    }
done:
    bs_phy_col_close(&c);
    bs_mem_free(b);
    return st;
}

/* A whole small float vector (n values expected; 0 = any). */
static bs_status load_vec(rp_data *d, const char *name, int64_t want, float **out, int64_t *n_out)
{
    bs_phy_col c = BS_PHY_COL_INIT;
    BS_TRY(rp_col_open(&c, d->dir, name, 1, 1));
    bs_status st = BS_OK;
    if (want && c.n_rows != want) {
        st = bs_error(BS_ERR_INPUT, "%s: expected %lld values (as drift.npy), got %lld", c.r.path, (long long)want,
                      (long long)c.n_rows);
        goto done;
    }
    *out = bs_mem_alloc("report/motion", ((size_t)c.n_rows + 1) * sizeof(float)); /* caller frees, even on error */
    if (!*out) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    for (int64_t i = 0; i < c.n_rows && st == BS_OK; i++) {
        double v;
        st = bs_phy_col_f64(&c, i, 1, &v);
        (*out)[i] = (float)v;
    }
    *n_out = c.n_rows;
done:
    bs_phy_col_close(&c);
    return st;
}

static bs_status load_motion(rp_data *d)
{
    if (!bs_phy_has(d->dir, "drift.npy")) {
        rp_note(d, "drift.npy absent: no estimated motion (sorted without drift correction, or by a sorter that "
                   "does not write it)");
        return BS_OK;
    }
    bs_phy_col c = BS_PHY_COL_INIT;
    BS_TRY(rp_col_open(&c, d->dir, "drift.npy", 0, 1));
    bs_status st = BS_OK;
    double *row = NULL;
    int64_t T = c.n_rows, B = c.n_cols, n;
    if (T < 1 || B < 1 || B > 10000) {
        st = bs_error(BS_ERR_INPUT, "%s: shape: expected (time bins, 1..10000 blocks), got %lld x %lld", c.r.path,
                      (long long)T, (long long)B);
        goto done;
    }
    int64_t step = (T + MOTION_MAX_T - 1) / MOTION_MAX_T;
    d->mot_nt = (int)((T + step - 1) / step);
    d->mot_nb = (int)B;
    d->mot = bs_mem_alloc("report/motion", (size_t)d->mot_nt * B * sizeof(float));
    row = bs_mem_alloc("report/motion", (size_t)B * sizeof *row);
    if (!d->mot || !row) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    for (int i = 0; i < d->mot_nt; i++) {
        if ((st = bs_phy_col_f64(&c, i * step, 1, row)) != BS_OK)
            goto done;
        for (int64_t k = 0; k < B; k++)
            d->mot[(size_t)i * B + k] = (float)row[k];
    }
    if (bs_phy_has(d->dir, "drift_times_s.npy")) {
        if ((st = load_vec(d, "drift_times_s.npy", T, &d->mot_t, &n)) != BS_OK)
            goto done;
        for (int i = 0; i < d->mot_nt; i++)
            d->mot_t[i] = d->mot_t[i * step];
    } else {
        rp_note(d, "drift_times_s.npy absent: motion time bins assumed evenly spread over the recording");
        d->mot_t = bs_mem_alloc("report/motion", (size_t)d->mot_nt * sizeof(float));
        if (!d->mot_t) {
            st = BS_ERR_MEMORY;
            goto done;
        }
        for (int i = 0; i < d->mot_nt; i++)
            d->mot_t[i] = (float)((i * step + 0.5) * d->duration_s / T);
    }
    if (bs_phy_has(d->dir, "drift_depths_um.npy")) {
        if ((st = load_vec(d, "drift_depths_um.npy", B, &d->mot_depth, &n)) != BS_OK)
            goto done;
    } else {
        rp_note(d, "drift_depths_um.npy absent: motion blocks assumed evenly spread over the probe");
        d->mot_depth = bs_mem_alloc("report/motion", (size_t)B * sizeof(float));
        if (!d->mot_depth) {
            st = BS_ERR_MEMORY;
            goto done;
        }
        for (int64_t k = 0; k < B; k++)
            d->mot_depth[k] = (float)(d->dmap_d0 + 100 + (k + 0.5) * (d->dmap_d1 - d->dmap_d0 - 200) / B);
    }
    d->mot_shank = bs_mem_calloc("report/motion", (size_t)B, sizeof(int32_t));
    if (!d->mot_shank) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    if (bs_phy_has(d->dir, "drift_shanks.npy")) {
        float *sh = NULL;
        st = load_vec(d, "drift_shanks.npy", B, &sh, &n);
        for (int64_t k = 0; st == BS_OK && k < B; k++)
            d->mot_shank[k] = (int32_t)sh[k];
        bs_mem_free(sh);
    }
done:
    bs_phy_col_close(&c);
    bs_mem_free(row);
    return st;
}

bs_status rp_drift_load(rp_data *d)
{
    if (d->dmap_count && !d->dmap_fill_in_pass)
        BS_TRY(load_driftmap(d));
    if (d->dmap_outside)
        rp_note(d, "drift map: %lld spike%s outside the probe's depth range +- 100 µm not drawn",
                (long long)d->dmap_outside, d->dmap_outside == 1 ? "" : "s");
    return load_motion(d);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void rp_emit_drift(rp_json *j, const rp_data *d)
{
    if (!d->dmap_count) {
        rpj_null(j, "drift_map");
    } else {
        size_t cells = (size_t)d->dmap_nd * d->dmap_nt, n = 0;
        float *means = bs_mem_alloc("report/emit", (cells + 1) * sizeof(float));
        uint8_t *q = bs_mem_alloc("report/emit", cells + 1);
        float lo = 0, hi = 1;
        if (means && q) {
            for (size_t i = 0; i < cells; i++)
                if (d->dmap_count[i])
                    means[n++] = d->dmap_amp[i] / d->dmap_count[i];
            qsort(means, n, sizeof(float), cmp_float);
            if (n) {
                lo = means[(size_t)(0.02 * (n - 1))];
                hi = means[(size_t)(0.98 * (n - 1))];
            }
            if (!(hi > lo))
                hi = lo + 1;
            for (size_t i = 0; i < cells; i++) {
                double m = d->dmap_count[i] ? d->dmap_amp[i] / d->dmap_count[i] : lo;
                double r = (m - lo) / (hi - lo);
                q[i] = (uint8_t)lrint((r < 0 ? 0 : r > 1 ? 1 : r) * 255);
            }
        }
        rpj_obj(j, "drift_map");
        rpj_str(j, "source", d->dmap_source);
        rpj_int(j, "nt", d->dmap_nt);
        rpj_int(j, "nd", d->dmap_nd);
        rpj_num(j, "t0", d->dmap_t0);
        rpj_num(j, "t1", d->dmap_t1);
        rpj_num(j, "d0", d->dmap_d0);
        rpj_num(j, "d1", d->dmap_d1);
        rpj_num(j, "amp_lo", lo);
        rpj_num(j, "amp_hi", hi);
        rpj_int(j, "outside", d->dmap_outside);
        if (means && q && 3 * n < cells) {
            /* sparse: the non-empty cells' indices (row-major, depth rows), counts and colours, packed in
               place over the quantized map, which is no longer needed */
            uint32_t *idx = (uint32_t *)(void *)means, *cnt = bs_mem_alloc("report/emit", (n + 1) * 4);
            if (cnt) {
                size_t k = 0;
                for (size_t i = 0; i < cells; i++)
                    if (d->dmap_count[i]) {
                        idx[k] = (uint32_t)i;
                        cnt[k] = d->dmap_count[i];
                        q[k++] = q[i];
                    }
                rpj_str(j, "layout", "sparse");
                rpj_typed(j, "cells", "u32", idx, n);
                rpj_counts(j, "count", cnt, n);
                rpj_typed(j, "amp", "u8", q, n);
                bs_mem_free(cnt);
            } else {
                rpj_null(j, "count");
            }
        } else {
            rpj_str(j, "layout", "dense");
            rpj_counts(j, "count", d->dmap_count, cells);
            if (means && q)
                rpj_typed(j, "amp", "u8", q, cells);
            else
                rpj_null(j, "amp");
        }
        rpj_end_obj(j);
        bs_mem_free(means);
        bs_mem_free(q);
    }
    if (!d->mot) {
        rpj_null(j, "motion");
        return;
    }
    rpj_obj(j, "motion");
    rpj_int(j, "nt", d->mot_nt);
    rpj_int(j, "nb", d->mot_nb);
    rpj_floats(j, "t_s", d->mot_t, (size_t)d->mot_nt);
    rpj_floats(j, "depth_um", d->mot_depth, (size_t)d->mot_nb);
    rpj_arr(j, "shank");
    for (int k = 0; k < d->mot_nb; k++)
        rpj_int(j, NULL, d->mot_shank[k]);
    rpj_end_arr(j);
    rpj_typed(j, "um", "f32", d->mot, (size_t)d->mot_nt * d->mot_nb);
    rpj_end_obj(j);
}
