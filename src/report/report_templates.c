/*
 * report_templates.c - each unit's template, as drawn on the probe layout.
 *
 * templates.npy (K, nt, C) is in whitened space; like Phy, the waveform shown
 * is template @ whitening_mat_inv (identity when that file is absent), one
 * template row read at a time. The peak channel has the largest peak-to-peak
 * amplitude; the channels drawn are the RP_TEMPLATE_CHANS nearest to it on
 * the same shank (distance in µm, ties by index). Their waveforms are
 * quantized to int8 with one scale per unit (largest |value| -> 127), which
 * keeps a unit's drawing under 1 KB. The template's position is the centre of
 * mass of those channels weighted by peak-to-peak amplitude, counting only
 * channels above 30% of the peak's (used when spike_positions.npy is absent).
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../mem/mem.h"
#include "report_internal.h"

typedef struct {
    int ch;
    float dist;
} near_ch;

static int cmp_near(const void *a, const void *b)
{
    const near_ch *x = a, *y = b;
    if (x->dist != y->dist)
        return x->dist < y->dist ? -1 : 1;
    return x->ch - y->ch;
}

static void no_templates(rp_data *d)
{
    for (int64_t u = 0; u < d->n_units; u++) {
        d->peak_ch[u] = -1;
        d->tpos[2 * u] = d->tpos[2 * u + 1] = NAN;
        for (int k = 0; k < RP_TEMPLATE_CHANS; k++)
            d->tchan[u * RP_TEMPLATE_CHANS + k] = -1;
    }
}

/* The whitening inverse as float (C x C), or NULL for the identity. */
static bs_status load_winv(rp_data *d, float **winv)
{
    *winv = NULL;
    if (!bs_phy_has(d->dir, BS_PHY_WHITENING_MAT_INV))
        return BS_OK;
    bs_phy_col c = BS_PHY_COL_INIT;
    BS_TRY(rp_col_open(&c, d->dir, BS_PHY_WHITENING_MAT_INV, 0, 1));
    bs_status st = BS_OK;
    double *row = NULL;
    if (c.n_rows != d->n_chan || c.n_cols != d->n_chan) {
        rp_note(d, "whitening_mat_inv.npy is %lld x %lld, expected %d x %d: templates drawn whitened",
                (long long)c.n_rows, (long long)c.n_cols, d->n_chan, d->n_chan);
        goto done;
    }
    row = bs_mem_alloc("report/whitening", (size_t)d->n_chan * sizeof *row);
    *winv = bs_mem_alloc("report/whitening", (size_t)d->n_chan * d->n_chan * sizeof(float));
    if (!row || !*winv) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    for (int i = 0; i < d->n_chan && st == BS_OK; i++) {
        st = bs_phy_col_f64(&c, i, 1, row);
        for (int k = 0; k < d->n_chan; k++)
            (*winv)[(size_t)i * d->n_chan + k] = isfinite(row[k]) ? (float)row[k] : 0.f;
    }
done:
    bs_phy_col_close(&c);
    bs_mem_free(row);
    if (st != BS_OK) {
        bs_mem_free(*winv);
        *winv = NULL;
    }
    return st;
}

bs_status rp_load_templates(rp_data *d)
{
    size_t U = (size_t)d->n_units + 1;
    d->peak_ch = bs_mem_alloc("report/templates", U * sizeof(int32_t));
    d->tchan = bs_mem_alloc("report/templates", U * RP_TEMPLATE_CHANS * sizeof(int16_t));
    d->tscale = bs_mem_calloc("report/templates", U, sizeof(float));
    d->tpos = bs_mem_alloc("report/templates", 2 * U * sizeof(float));
    if (!d->peak_ch || !d->tchan || !d->tscale || !d->tpos)
        return BS_ERR_MEMORY;
    no_templates(d);
    if (!bs_phy_has(d->dir, BS_PHY_TEMPLATES)) {
        rp_note(d, "templates.npy absent: no template drawings or template similarity");
        return BS_OK;
    }
    char path[4200];
    bs_npy_header h;
    BS_TRY(bs_path_join(path, sizeof path, d->dir, BS_PHY_TEMPLATES));
    BS_TRY(bs_npy_read_header(path, &h));
    if (h.ndim != 3 || (h.dtype != BS_NPY_F32 && h.dtype != BS_NPY_F64) || h.fortran_order)
        return bs_error(BS_ERR_INPUT, "%s: expected float32 or float64 (templates, samples, channels) in C order, "
                        "got %d dimensions of %s", path, h.ndim, bs_npy_dtype_descr(h.dtype));
    d->n_templates = h.shape[0];
    if (h.shape[2] != d->n_chan) {
        rp_note(d, "templates.npy has %lld channels, channel_positions.npy %d: no template drawings",
                (long long)h.shape[2], d->n_chan);
        return BS_OK;
    }
    if (h.shape[1] < 1 || h.shape[1] > 1000)
        return bs_error(BS_ERR_INPUT, "%s: shape: expected 1 to 1000 samples per template, got %lld", path,
                        (long long)h.shape[1]);
    d->nt = (int)h.shape[1];
    int C = d->n_chan, nt = d->nt;
    d->twave = bs_mem_calloc("report/templates", U * RP_TEMPLATE_CHANS * (size_t)nt, 1);
    float *winv = NULL, *w = NULL, *uw = NULL, *ptp = NULL;
    double *w64 = NULL; /* one float64 template row */
    near_ch *near = NULL;
    bs_npy_rows rows = {.fd = -1};
    bs_status st = load_winv(d, &winv);
    if (st != BS_OK)
        goto done;
    w = bs_mem_alloc("report/templates", (size_t)nt * C * sizeof(float));
    uw = bs_mem_alloc("report/templates", (size_t)nt * C * sizeof(float));
    ptp = bs_mem_alloc("report/templates", (size_t)C * sizeof(float));
    near = bs_mem_alloc("report/templates", (size_t)C * sizeof(near_ch));
    if (h.dtype == BS_NPY_F64)
        w64 = bs_mem_alloc("report/templates", (size_t)nt * C * sizeof(double));
    if (!d->twave || !w || !uw || !ptp || !near || (h.dtype == BS_NPY_F64 && !w64)) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    if ((st = bs_npy_rows_open(&rows, d->dir, BS_PHY_TEMPLATES, h.dtype)) != BS_OK)
        goto done;
    int64_t missing = 0;
    for (int64_t u = 0; u < d->n_units; u++) {
        int32_t t = d->tmpl[u];
        if (t < 0 || t >= d->n_templates) {
            missing++;
            continue;
        }
        if (h.dtype == BS_NPY_F32) {
            st = bs_npy_rows_read(&rows, t, 1, w);
        } else {
            st = bs_npy_rows_read(&rows, t, 1, w64);
            for (size_t i = 0; i < (size_t)nt * C; i++)
                w[i] = (float)w64[i];
        }
        if (st != BS_OK)
            goto done;
        for (size_t i = 0; i < (size_t)nt * C; i++)
            if (!isfinite(w[i]))
                w[i] = 0;
        if (winv)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nt, C, C, 1.f, w, C, winv, C, 0.f, uw, C);
        else
            memcpy(uw, w, (size_t)nt * C * sizeof(float));
        int peak = 0;
        for (int c = 0; c < C; c++) {
            float lo = uw[c], hi = uw[c];
            for (int s = 1; s < nt; s++) {
                float v = uw[(size_t)s * C + c];
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
            ptp[c] = hi - lo;
            if (ptp[c] > ptp[peak])
                peak = c;
        }
        int n_near = 0;
        for (int c = 0; c < C; c++) {
            if (d->chan_shank[c] != d->chan_shank[peak])
                continue;
            float dx = d->chan_x[c] - d->chan_x[peak], dy = d->chan_y[c] - d->chan_y[peak];
            near[n_near].ch = c;
            near[n_near++].dist = sqrtf(dx * dx + dy * dy);
        }
        qsort(near, (size_t)n_near, sizeof *near, cmp_near);
        int n_show = n_near < RP_TEMPLATE_CHANS ? n_near : RP_TEMPLATE_CHANS;
        float mx = 0;
        double wx = 0, wy = 0, ws = 0;
        for (int k = 0; k < n_show; k++) {
            int c = near[k].ch;
            for (int s = 0; s < nt; s++)
                mx = fmaxf(mx, fabsf(uw[(size_t)s * C + c]));
            if (ptp[c] >= 0.3f * ptp[peak]) {
                wx += (double)ptp[c] * d->chan_x[c];
                wy += (double)ptp[c] * d->chan_y[c];
                ws += ptp[c];
            }
        }
        d->peak_ch[u] = peak;
        d->tscale[u] = mx > 0 ? mx / 127.f : 1.f;
        d->tpos[2 * u] = ws > 0 ? (float)(wx / ws) : d->chan_x[peak];
        d->tpos[2 * u + 1] = ws > 0 ? (float)(wy / ws) : d->chan_y[peak];
        for (int k = 0; k < n_show; k++) {
            int c = near[k].ch;
            d->tchan[u * RP_TEMPLATE_CHANS + k] = (int16_t)c;
            int8_t *q = d->twave + ((size_t)u * RP_TEMPLATE_CHANS + k) * nt;
            for (int s = 0; s < nt; s++)
                q[s] = (int8_t)lrintf(uw[(size_t)s * C + c] / d->tscale[u]);
        }
    }
    if (missing)
        rp_note(d, "%lld unit%s without a template in templates.npy (id >= %lld): not drawn", (long long)missing,
                missing == 1 ? "" : "s", (long long)d->n_templates);
done:
    bs_npy_rows_close(&rows);
    bs_mem_free(winv);
    bs_mem_free(w);
    bs_mem_free(uw);
    bs_mem_free(ptp);
    bs_mem_free(near);
    bs_mem_free(w64);
    return st;
}

void rp_emit_templates(rp_json *j, const rp_data *d)
{
    rpj_obj(j, "templates");
    rpj_int(j, "nt", d->nt);
    rpj_int(j, "n_chan", RP_TEMPLATE_CHANS);
    rpj_int(j, "n_templates", d->n_templates);
    rpj_typed(j, "peak_ch", "i32", d->peak_ch, (size_t)d->n_units);
    rpj_typed(j, "chans", "i16", d->tchan, (size_t)d->n_units * RP_TEMPLATE_CHANS);
    rpj_typed(j, "scale", "f32", d->tscale, (size_t)d->n_units);
    rpj_typed(j, "pos", "f32", d->tpos, (size_t)d->n_units * 2);
    if (d->twave)
        rpj_typed(j, "wave", "i8", d->twave, (size_t)d->n_units * RP_TEMPLATE_CHANS * d->nt);
    else
        rpj_null(j, "wave");
    rpj_end_obj(j);
}
