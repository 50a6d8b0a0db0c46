/*
 * correct.c - drift correction folded into whitening (drift.h part 5).
 *
 * Per time bin: each channel's shift is the shank's block motion
 * interpolated in depth; the corrected channel i is the kriging estimate of
 * the whitened field at q_i = (x_i, y_i + shift_i) from the same-shank
 * channels within krige_radius_um of q_i (weights from a Cholesky solve in
 * double). Since whitening is linear, corrected = M·(W·X) = (M·W)·X: row i of
 * the composed matrix is Σ_j a_j · (row j of W), accumulated in double in
 * the order of j and W's stored entries, then stored (float) on the channels
 * it touches in ascending order. The rows are written into a bs_whitener
 * whose row stride is the largest shank's channel count, so the existing
 * sparse whitening kernel applies it unchanged. Everything is sequential and
 * in fixed order: the matrix is identical for any thread count.
 */
#include <math.h>
#include <string.h>

#include "../mem/mem.h"
#include "drift.h"

void bs_drift_channel_shifts(const bs_drift *d, const bs_probe *probe, int64_t bin, float *shift_um)
{
    if (bin < 0)
        bin = 0;
    if (bin >= d->n_bins)
        bin = d->n_bins - 1;
    const float *row = d->motion_um + (size_t)bin * d->n_blocks;
    for (int c = 0; c < probe->n_chan; c++) {
        int s = probe->shank[c];
        shift_um[c] = 0;
        if (s < 0 || s >= d->n_shanks || d->sh[s].mode == BS_DRIFT_NONE)
            continue;
        const bs_drift_shank *sh = &d->sh[s];
        const float *m = row + sh->block0, *yb = d->depths_um + sh->block0;
        int nb = sh->n_blocks;
        double y = probe->y_um[c];
        if (nb == 1 || y <= yb[0]) {
            shift_um[c] = m[0];
        } else if (y >= yb[nb - 1]) {
            shift_um[c] = m[nb - 1];
        } else {
            int j = 0;
            while (j < nb - 2 && y > yb[j + 1])
                j++;
            double f = (y - yb[j]) / (yb[j + 1] - yb[j]);
            shift_um[c] = (float)((1.0 - f) * m[j] + f * m[j + 1]);
        }
    }
}

bs_status bs_drift_krige(const double *x_um, const double *y_um, const int *cand, int n, double qx, double qy,
                         double sigma_um, double ridge, double *work, double *a)
{
    if (n == 0)
        return BS_OK;
    const double g = -0.5 / (sigma_um * sigma_um);
    double *L = work; /* n × n, lower triangle */
    for (int r = 0; r < n; r++) {
        double dx = qx - x_um[cand[r]], dy = qy - y_um[cand[r]];
        a[r] = exp(g * (dx * dx + dy * dy));
        for (int c = 0; c <= r; c++) {
            double ex = x_um[cand[r]] - x_um[cand[c]], ey = y_um[cand[r]] - y_um[cand[c]];
            L[(size_t)r * n + c] = exp(g * (ex * ex + ey * ey)) + (r == c ? ridge : 0.0);
        }
    }
    /* Cholesky L·Lᵀ in place */
    for (int j = 0; j < n; j++) {
        double s = L[(size_t)j * n + j];
        for (int k = 0; k < j; k++)
            s -= L[(size_t)j * n + k] * L[(size_t)j * n + k];
        if (!(s > 0))
            return bs_error(BS_ERR_INTERNAL, "drift: kriging system of %d channels is not positive definite "
                                             "(ridge %g)",
                            n, ridge);
        double dj = sqrt(s);
        L[(size_t)j * n + j] = dj;
        for (int i = j + 1; i < n; i++) {
            double t = L[(size_t)i * n + j];
            for (int k = 0; k < j; k++)
                t -= L[(size_t)i * n + k] * L[(size_t)j * n + k];
            L[(size_t)i * n + j] = t / dj;
        }
    }
    for (int i = 0; i < n; i++) { /* L z = k */
        double t = a[i];
        for (int k = 0; k < i; k++)
            t -= L[(size_t)i * n + k] * a[k];
        a[i] = t / L[(size_t)i * n + i];
    }
    for (int i = n - 1; i >= 0; i--) { /* Lᵀ a = z */
        double t = a[i];
        for (int k = i + 1; k < n; k++)
            t -= L[(size_t)k * n + i] * a[k];
        a[i] = t / L[(size_t)i * n + i];
    }
    return BS_OK;
}

static int max_shank_size(const bs_probe *probe)
{
    int best = 0;
    for (int c = 0; c < probe->n_chan; c++) {
        int n = 0;
        for (int e = 0; e < probe->n_chan; e++)
            n += probe->shank[e] == probe->shank[c];
        if (n > best)
            best = n;
    }
    return best;
}

size_t bs_drift_corrector_bytes(const bs_probe *probe)
{
    size_t C = (size_t)probe->n_chan, cap = (size_t)max_shank_size(probe), S = (size_t)probe->n_shanks;
    return C * sizeof(int) + C * cap * (sizeof(int) + sizeof(float)) /* composed whitener */
           + C * (3 * sizeof(double) + 4 * sizeof(int) + sizeof(float)) + (S + 1) * sizeof(int) +
           (cap * cap + cap) * sizeof(double);
}

void bs_drift_corrector_free(bs_drift_corrector *c)
{
    bs_mem_free(c->x_um), bs_mem_free(c->y_um), bs_mem_free(c->shank), bs_mem_free(c->shank_chans);
    bs_mem_free(c->shank_off), bs_mem_free(c->acc), bs_mem_free(c->mark), bs_mem_free(c->cand);
    bs_mem_free(c->kmat), bs_mem_free(c->rhs), bs_mem_free(c->shift_um);
    bs_mem_free(c->wh.n_nbr), bs_mem_free(c->wh.nbr), bs_mem_free(c->wh.w);
    memset(c, 0, sizeof *c);
}

bs_status bs_drift_corrector_init(bs_drift_corrector *c, const bs_drift *d, const bs_probe *probe,
                                  const bs_whitener *base)
{
    memset(c, 0, sizeof *c);
    const int C = probe->n_chan, cap = max_shank_size(probe), S = probe->n_shanks;
    if (base->n_chan != C)
        return bs_error(BS_ERR_INTERNAL, "drift: whitener for %d channels, probe has %d", base->n_chan, C);
    for (int i = 0; i < C; i++)
        if (probe->shank[i] < 0 || probe->shank[i] >= S)
            return bs_error(BS_ERR_INTERNAL, "drift: channel %d: shank %d outside [0, %d)", i, probe->shank[i], S);
    if (S != d->n_shanks)
        return bs_error(BS_ERR_INTERNAL, "drift: estimate for %d shanks, probe has %d", d->n_shanks, S);
    c->d = d;
    c->base = base;
    c->n_chan = C;
    c->bin = -1;
    const char *T = "drift/correct";
    c->x_um = bs_mem_alloc(T, (size_t)C * sizeof(double));
    c->y_um = bs_mem_alloc(T, (size_t)C * sizeof(double));
    c->shank = bs_mem_alloc(T, (size_t)C * sizeof(int));
    c->shank_chans = bs_mem_alloc(T, (size_t)C * sizeof(int));
    c->shank_off = bs_mem_calloc(T, (size_t)S + 1, sizeof(int));
    c->acc = bs_mem_calloc(T, (size_t)C, sizeof(double));
    c->mark = bs_mem_calloc(T, (size_t)C, sizeof(int));
    c->cand = bs_mem_alloc(T, (size_t)C * sizeof(int));
    c->kmat = bs_mem_alloc(T, (size_t)cap * cap * sizeof(double));
    c->rhs = bs_mem_alloc(T, (size_t)cap * sizeof(double));
    c->shift_um = bs_mem_alloc(T, (size_t)C * sizeof(float));
    c->wh.n_nbr = bs_mem_calloc(T, (size_t)C, sizeof(int));
    c->wh.nbr = bs_mem_calloc(T, (size_t)C * cap, sizeof(int));
    c->wh.w = bs_mem_calloc(T, (size_t)C * cap, sizeof(float));
    if (!c->x_um || !c->y_um || !c->shank || !c->shank_chans || !c->shank_off || !c->acc || !c->mark || !c->cand ||
        !c->kmat || !c->rhs || !c->shift_um || !c->wh.n_nbr || !c->wh.nbr || !c->wh.w) {
        bs_drift_corrector_free(c);
        return BS_ERR_MEMORY;
    }
    c->wh.n_chan = C;
    c->wh.k = cap;
    for (int i = 0; i < C; i++) {
        c->x_um[i] = probe->x_um[i];
        c->y_um[i] = probe->y_um[i];
        c->shank[i] = probe->shank[i];
        c->shank_off[probe->shank[i] + 1]++;
    }
    for (int s = 0; s < S; s++)
        c->shank_off[s + 1] += c->shank_off[s];
    int *fill = c->cand; /* scratch: next free slot per shank */
    for (int s = 0; s < S; s++)
        fill[s] = c->shank_off[s];
    for (int i = 0; i < C; i++)
        c->shank_chans[fill[c->shank[i]]++] = i;
    return BS_OK;
}

bs_status bs_drift_corrector_whitener(bs_drift_corrector *c, int64_t bin, const bs_whitener **wh)
{
    if (bin == c->bin) {
        *wh = &c->wh;
        return BS_OK;
    }
    const bs_drift *d = c->d;
    const bs_whitener *W = c->base;
    const int C = c->n_chan, cap = c->wh.k;
    const double sig = d->p.sig_interp_um, R2 = (double)d->p.krige_radius_um * d->p.krige_radius_um;
    bs_probe pr = {.n_chan = C, .x_um = c->x_um, .y_um = c->y_um, .shank = c->shank};
    bs_drift_channel_shifts(d, &pr, bin, c->shift_um);
    c->bin = -1;
    for (int i = 0; i < C; i++) {
        int s = c->shank[i];
        int *onbr = c->wh.nbr + (size_t)i * cap;
        float *ow = c->wh.w + (size_t)i * cap;
        if (d->sh[s].mode == BS_DRIFT_NONE) { /* W's row as it is */
            int n = W->n_nbr[i];
            memcpy(onbr, W->nbr + (size_t)i * W->k, (size_t)n * sizeof *onbr);
            memcpy(ow, W->w + (size_t)i * W->k, (size_t)n * sizeof *ow);
            c->wh.n_nbr[i] = n;
            continue;
        }
        const double qx = c->x_um[i], qy = c->y_um[i] + c->shift_um[i];
        const int *chans = c->shank_chans + c->shank_off[s];
        const int n_sh = c->shank_off[s + 1] - c->shank_off[s];
        int n = 0;
        for (int k = 0; k < n_sh; k++) {
            int j = chans[k];
            double dx = qx - c->x_um[j], dy = qy - c->y_um[j];
            if (dx * dx + dy * dy <= R2)
                c->cand[n++] = j;
        }
        BS_TRY(bs_drift_krige(c->x_um, c->y_um, c->cand, n, qx, qy, sig, d->p.ridge, c->kmat, c->rhs));
        for (int m = 0; m < n; m++) {
            int j = c->cand[m];
            const int *nb = W->nbr + (size_t)j * W->k;
            const float *wj = W->w + (size_t)j * W->k;
            for (int e = 0; e < W->n_nbr[j]; e++) {
                c->acc[nb[e]] += c->rhs[m] * wj[e];
                c->mark[nb[e]] = 1;
            }
        }
        int k = 0;
        for (int q = 0; q < n_sh; q++) { /* W never leaves a shank: the touched channels are on shank s */
            int e = chans[q];
            if (!c->mark[e])
                continue;
            onbr[k] = e;
            ow[k++] = (float)c->acc[e];
            c->acc[e] = 0;
            c->mark[e] = 0;
        }
        c->wh.n_nbr[i] = k;
    }
    c->bin = bin;
    *wh = &c->wh;
    return BS_OK;
}
