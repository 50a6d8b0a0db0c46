/*
 * centers.c - spatial centers, per-center feature matrices and templates
 * (docs/ALGORITHM.md §7.1: shanks are never mixed).
 *
 * Centers. Per shank, over the grid positions of that shank: y-centers at
 * ymin + dmin − 1 + 2·dmin·j (j = 0, 1, ... while below ymax + dmin + 1),
 * with dmin the vertical contact spacing (median spacing of distinct contact
 * depths unless given); x-centers: one at the middle of the shank's
 * positions when they span at most 2·x_step µm horizontally (every 1-, 2- and
 * 4-column Neuropixels shank), else ceil(span / x_step) evenly spread over
 * the span (2-D arrays). Every position goes to the nearest center of its
 * shank (squared distance, lower index on ties); centers with no positions
 * are dropped. A center's channels are the ascending union of the channel
 * lists (grid->ichan) of its positions.
 *
 * One center at a time. The caller hands the spikes of one center (from the
 * disk store) with their features on their position's n_chans channels; the
 * features are scattered into an n × D matrix on the union channels (D =
 * n_union·n_pcs, zeros where a spike's channels do not reach), clustered by
 * bs_cluster_graph (with the spike times for the refractory test), and the
 * mean feature of each cluster becomes a template on the union channels,
 * with its waveform wave[c,u] = Σ_p feat[c,p]·wpca[p,u]. Host memory is
 * bs_cluster_center_bytes(n, n_union, n_pcs): the matrix and the times under
 * "cluster/center", the graph's buffers, and O(L) for the templates.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "io/probe.h"
#include "mem/mem.h"

/* Bounding box (µm) of a shank's grid positions; 0 if the shank has none. */
static int grid_shank_extent(const bs_detect_grid *g, int s, double *x0, double *x1, double *y0, double *y1)
{
    *x0 = *y0 = INFINITY;
    *x1 = *y1 = -INFINITY;
    for (int f = 0; f < g->n_pos; f++)
        if (g->shank[f] == s) {
            *x0 = fmin(*x0, g->x_um[f]);
            *x1 = fmax(*x1, g->x_um[f]);
            *y0 = fmin(*y0, g->y_um[f]);
            *y1 = fmax(*y1, g->y_um[f]);
        }
    return *x0 <= *x1;
}

void bs_centers_free(bs_cluster_centers *c)
{
    bs_mem_free(c->shank);
    bs_mem_free(c->x_um);
    bs_mem_free(c->y_um);
    bs_mem_free(c->pos_center);
    bs_mem_free(c->chan_off);
    bs_mem_free(c->chans);
    memset(c, 0, sizeof *c);
}

bs_status bs_centers_build(const bs_probe *probe, const bs_detect_grid *g, const bs_cluster_params *p,
                           bs_cluster_centers *c)
{
    memset(c, 0, sizeof *c);
    if (g->n_pos < 1)
        return bs_error(BS_ERR_INPUT, "cluster centers: the detection grid has no positions");
    double dmin = p->dmin_um > 0 ? p->dmin_um : bs_probe_median_depth_step(probe);
    double xstep = p->x_step_um > 0 ? p->x_step_um : 200.0;
    int n_shanks = 0;
    for (int f = 0; f < g->n_pos; f++)
        n_shanks = g->shank[f] + 1 > n_shanks ? g->shank[f] + 1 : n_shanks;
    /* count candidate centers */
    int cap = 0;
    for (int s = 0; s < n_shanks; s++) {
        double x0, x1, y0, y1;
        if (!grid_shank_extent(g, s, &x0, &x1, &y0, &y1))
            continue;
        int ny = (int)ceil(((y1 + dmin + 1) - (y0 + dmin - 1)) / (2 * dmin));
        int nx = x1 - x0 <= 2 * xstep ? 1 : (int)ceil((x1 - x0) / xstep);
        cap += (ny > 0 ? ny : 1) * nx;
    }
    float *cx = bs_mem_alloc("cluster/centers", (size_t)cap * sizeof(float));
    float *cy = bs_mem_alloc("cluster/centers", (size_t)cap * sizeof(float));
    int *cs = bs_mem_alloc("cluster/centers", (size_t)cap * sizeof(int));
    int *used = bs_mem_calloc("cluster/centers", (size_t)cap, sizeof(int));
    c->pos_center = bs_mem_alloc("cluster/centers", (size_t)g->n_pos * sizeof(int));
    int *mark = bs_mem_alloc("cluster/centers", (size_t)probe->n_chan * sizeof(int));
    bs_status st = BS_OK;
    if (!cx || !cy || !cs || !used || !c->pos_center || !mark) {
        st = BS_ERR_MEMORY;
        goto fail;
    }
    int nc = 0;
    for (int s = 0; s < n_shanks; s++) {
        double x0, x1, y0, y1;
        if (!grid_shank_extent(g, s, &x0, &x1, &y0, &y1))
            continue;
        int nx = x1 - x0 <= 2 * xstep ? 1 : (int)ceil((x1 - x0) / xstep);
        for (int ix = 0; ix < nx; ix++)
            for (double y = y0 + dmin - 1; y < y1 + dmin + 1 && nc < cap; y += 2 * dmin) {
                cx[nc] = (float)(x0 + (x1 - x0) * (ix + 0.5) / nx);
                cy[nc] = (float)y;
                cs[nc++] = s;
            }
    }
    for (int f = 0; f < g->n_pos; f++) {
        int best = -1;
        double bd = INFINITY;
        for (int k = 0; k < nc; k++) {
            if (cs[k] != g->shank[f])
                continue;
            double dx = g->x_um[f] - cx[k], dy = g->y_um[f] - cy[k], d = dx * dx + dy * dy;
            if (d < bd) {
                bd = d;
                best = k;
            }
        }
        c->pos_center[f] = best;
        used[best]++;
    }
    /* compact: drop empty centers */
    int n = 0;
    for (int k = 0; k < nc; k++)
        used[k] = used[k] ? n++ : -1;
    for (int f = 0; f < g->n_pos; f++)
        c->pos_center[f] = used[c->pos_center[f]];
    c->n_centers = n;
    c->n_pos = g->n_pos;
    c->shank = bs_mem_alloc("cluster/centers", (size_t)n * sizeof(int));
    c->x_um = bs_mem_alloc("cluster/centers", (size_t)n * sizeof(float));
    c->y_um = bs_mem_alloc("cluster/centers", (size_t)n * sizeof(float));
    c->chan_off = bs_mem_alloc("cluster/centers", (size_t)(n + 1) * sizeof(int64_t));
    if (!c->shank || !c->x_um || !c->y_um || !c->chan_off) {
        st = BS_ERR_MEMORY;
        goto fail;
    }
    for (int k = 0; k < nc; k++)
        if (used[k] >= 0) {
            c->shank[used[k]] = cs[k];
            c->x_um[used[k]] = cx[k];
            c->y_um[used[k]] = cy[k];
        }
    /* union channels: two passes (count, fill) */
    for (int pass = 0; pass < 2; pass++) {
        int64_t off = 0;
        for (int k = 0; k < n; k++) {
            for (int ch = 0; ch < probe->n_chan; ch++)
                mark[ch] = 0;
            for (int f = 0; f < g->n_pos; f++)
                if (c->pos_center[f] == k)
                    for (int j = 0; j < g->n_chans; j++)
                        mark[g->ichan[(size_t)f * g->n_chans + j]] = 1;
            c->chan_off[k] = off;
            for (int ch = 0; ch < probe->n_chan; ch++)
                if (mark[ch]) {
                    if (pass == 1)
                        c->chans[off] = ch;
                    off++;
                }
        }
        c->chan_off[n] = off;
        if (pass == 0) {
            c->chans = bs_mem_alloc("cluster/centers", (size_t)(off > 0 ? off : 1) * sizeof(int));
            if (!c->chans) {
                st = BS_ERR_MEMORY;
                goto fail;
            }
        }
    }
    bs_mem_free(cx);
    bs_mem_free(cy);
    bs_mem_free(cs);
    bs_mem_free(used);
    bs_mem_free(mark);
    return BS_OK;
fail:
    bs_mem_free(cx);
    bs_mem_free(cy);
    bs_mem_free(cs);
    bs_mem_free(used);
    bs_mem_free(mark);
    bs_centers_free(c);
    return st;
}

void bs_center_templates_free(bs_center_templates *t)
{
    bs_mem_free(t->chans);
    bs_mem_free(t->n_spikes);
    bs_mem_free(t->peak_chan);
    bs_mem_free(t->feat);
    bs_mem_free(t->wave);
    memset(t, 0, sizeof *t);
}

static size_t center_block_bytes(int64_t n, int D)
{
    return (size_t)n * (size_t)D * sizeof(float) + (size_t)n * sizeof(int64_t);
}

size_t bs_cluster_center_bytes(int64_t n, int n_chans, int n_pcs, const bs_cluster_params *p)
{
    int D = n_chans * n_pcs;
    return center_block_bytes(n, D) + bs_cluster_graph_bytes(n, D, p);
}

bs_status bs_cluster_center(const bs_cluster_params *p, const bs_cluster_centers *c, int k,
                            const bs_detect_grid *g, const bs_temporal_basis *b, const bs_detected_spike *spk,
                            const float *feat, int64_t n, int32_t *labels, bs_center_templates *out)
{
    memset(out, 0, sizeof *out);
    if (k < 0 || k >= c->n_centers)
        return bs_error(BS_ERR_INTERNAL, "cluster: center %d out of range 0..%d", k, c->n_centers - 1);
    int nch = bs_center_n_chans(c, k), P = b->n_pcs, nt = b->nt, nC = g->n_chans;
    const int *uch = c->chans + c->chan_off[k];
    int max_ch = 0;
    for (int j = 0; j < nch; j++)
        max_ch = uch[j] + 1 > max_ch ? uch[j] + 1 : max_ch;
    for (int64_t f = 0; f < (int64_t)g->n_pos * nC; f++)
        max_ch = g->ichan[f] + 1 > max_ch ? g->ichan[f] + 1 : max_ch;
    int *map = malloc((size_t)max_ch * sizeof *map); /* probe channel -> union index (small) */
    if (!map)
        return bs_error(BS_ERR_MEMORY, "cluster: no memory for a channel map");
    for (int ch = 0; ch < max_ch; ch++)
        map[ch] = -1;
    for (int j = 0; j < nch; j++)
        map[uch[j]] = j;
    int D = nch * P;
    char *blk = bs_mem_alloc("cluster/center", center_block_bytes(n, D));
    if (!blk) {
        free(map);
        return BS_ERR_MEMORY;
    }
    float *X = (float *)blk;
    int64_t *t = (int64_t *)(blk + (size_t)n * D * sizeof(float));
    bs_status st = BS_OK;
    memset(X, 0, (size_t)n * D * sizeof *X);
    for (int64_t i = 0; i < n; i++) {
        int pos = spk[i].pos;
        if (pos < 0 || pos >= g->n_pos || c->pos_center[pos] != k) {
            st = bs_error(BS_ERR_INPUT, "cluster: spike %lld (grid position %d) does not belong to center %d",
                          (long long)i, pos, k);
            goto done;
        }
        t[i] = spk[i].t;
        for (int j = 0; j < nC; j++) {
            int u = map[g->ichan[(size_t)pos * nC + j]];
            for (int q = 0; q < P; q++)
                X[i * D + (int64_t)u * P + q] = feat[(i * nC + j) * P + q];
        }
    }
    int L = 0;
    st = bs_cluster_graph(p, X, n, D, t, labels, &L);
    if (st != BS_OK)
        goto done;
    /* templates */
    out->n_clusters = L;
    out->n_chans = nch;
    out->n_pcs = P;
    out->nt = nt;
    out->chans = bs_mem_alloc("cluster/templates", (size_t)nch * sizeof(int));
    out->n_spikes = bs_mem_calloc("cluster/templates", (size_t)(L > 0 ? L : 1), sizeof(int64_t));
    out->peak_chan = bs_mem_alloc("cluster/templates", (size_t)(L > 0 ? L : 1) * sizeof(int));
    out->feat = bs_mem_alloc("cluster/templates", (size_t)L * D * sizeof(float));
    out->wave = bs_mem_alloc("cluster/templates", (size_t)L * nch * nt * sizeof(float));
    double *acc = bs_mem_calloc("cluster/templates", (size_t)(L > 0 ? L : 1) * D, sizeof(double));
    if (!out->chans || !out->n_spikes || !out->peak_chan || !out->feat || !out->wave || !acc) {
        bs_mem_free(acc);
        bs_center_templates_free(out);
        st = BS_ERR_MEMORY;
        goto done;
    }
    memcpy(out->chans, uch, (size_t)nch * sizeof(int));
    for (int64_t i = 0; i < n; i++) {
        int l = labels[i];
        out->n_spikes[l]++;
        for (int d = 0; d < D; d++)
            acc[(int64_t)l * D + d] += X[i * D + d];
    }
    for (int l = 0; l < L; l++) {
        float *fm = out->feat + (int64_t)l * D, *w = out->wave + (int64_t)l * nch * nt;
        for (int d = 0; d < D; d++)
            fm[d] = (float)(acc[(int64_t)l * D + d] / (double)out->n_spikes[l]);
        double best = -1;
        out->peak_chan[l] = uch[0];
        for (int j = 0; j < nch; j++) {
            double nrm = 0;
            for (int u = 0; u < nt; u++) {
                double s = 0;
                for (int q = 0; q < P; q++)
                    s += (double)fm[j * P + q] * b->wpca[q * nt + u];
                w[j * nt + u] = (float)s;
                nrm += s * s;
            }
            if (nrm > best) {
                best = nrm;
                out->peak_chan[l] = uch[j];
            }
        }
    }
    bs_mem_free(acc);
done:
    bs_mem_free(blk);
    free(map);
    return st;
}
