/*
 * grid.c - the grid of candidate spike positions and their channel
 * neighbourhoods and spatial envelopes (see detect.h, part 2), and the
 * positions grouped by their set of channels (build_sets: positions of one
 * set share their score bounds in universal.c), and each position's
 * subspace bound (subspace_bound).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/eigen.h"
#include "../io/probe.h"
#include "../mem/mem.h"
#include "detect.h"

typedef struct {
    double d2;
    int idx;
} ranked;

static int ranked_cmp(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->d2 != y->d2)
        return x->d2 < y->d2 ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Bounding box (µm) of a shank's contacts; 0 if the shank has none. */
static int shank_extent(const bs_probe *probe, int sh, double *x0, double *x1, double *y0, double *y1)
{
    *x0 = *y0 = INFINITY;
    *x1 = *y1 = -INFINITY;
    for (int c = 0; c < probe->n_chan; c++)
        if (probe->shank[c] == sh) {
            *x0 = fmin(*x0, probe->x_um[c]);
            *x1 = fmax(*x1, probe->x_um[c]);
            *y0 = fmin(*y0, probe->y_um[c]);
            *y1 = fmax(*y1, probe->y_um[c]);
        }
    return *x0 <= *x1;
}

void bs_grid_free(bs_detect_grid *g)
{
    bs_mem_free(g->x_um);
    bs_mem_free(g->y_um);
    bs_mem_free(g->shank);
    bs_mem_free(g->ichan);
    bs_mem_free(g->weights);
    bs_mem_free(g->neighbors);
    bs_mem_free(g->set_chans);
    bs_mem_free(g->set_start);
    bs_mem_free(g->set_pos);
    bs_mem_free(g->sub);
    memset(g, 0, sizeof *g);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

typedef struct {
    const int *l; /* the position's channels, ascending */
    int f, n;     /* the position; channels per position */
} chan_set;

static int set_cmp(const void *a, const void *b)
{
    const chan_set *x = a, *y = b;
    int c = memcmp(x->l, y->l, sizeof(int) * (size_t)x->n);
    return c ? c : (x->f > y->f) - (x->f < y->f);
}

/* Group the positions by their set of channels (g->set_*). */
static bs_status build_sets(bs_detect_grid *g)
{
    int F = g->n_pos, nC = g->n_chans;
    int *sorted = malloc(sizeof(int) * (size_t)F * nC);
    chan_set *order = malloc(sizeof(chan_set) * (size_t)F);
    g->set_pos = bs_mem_alloc("detect/grid", sizeof(int) * (size_t)F);
    if (!sorted || !order || !g->set_pos) {
        free(sorted);
        free(order);
        bs_grid_free(g);
        return BS_ERR_MEMORY;
    }
    for (int f = 0; f < F; f++) {
        memcpy(sorted + (size_t)f * nC, g->ichan + (size_t)f * nC, sizeof(int) * (size_t)nC);
        qsort(sorted + (size_t)f * nC, (size_t)nC, sizeof(int), cmp_int);
        order[f] = (chan_set){sorted + (size_t)f * nC, f, nC};
    }
    qsort(order, (size_t)F, sizeof(chan_set), set_cmp);
    int n = 0;
    for (int i = 0; i < F; i++)
        n += i == 0 || memcmp(order[i].l, order[i - 1].l, sizeof(int) * (size_t)nC) != 0;
    g->n_sets = n;
    g->set_chans = bs_mem_alloc("detect/grid", sizeof(int) * (size_t)n * nC);
    g->set_start = bs_mem_alloc("detect/grid", sizeof(int) * ((size_t)n + 1));
    if (!g->set_chans || !g->set_start) {
        free(sorted);
        free(order);
        bs_grid_free(g);
        return BS_ERR_MEMORY;
    }
    int s = -1;
    for (int i = 0; i < F; i++) {
        if (i == 0 || memcmp(order[i].l, order[i - 1].l, sizeof(int) * (size_t)nC) != 0) {
            s++;
            g->set_start[s] = i;
            memcpy(g->set_chans + (size_t)s * nC, order[i].l, sizeof(int) * (size_t)nC);
        }
        g->set_pos[i] = order[i].f;
    }
    g->set_start[n] = F;
    free(sorted);
    free(order);
    return BS_OK;
}

/*
 * The subspace bound of a position with envelopes w_s (S unit vectors over
 * its nC channels): q1, q2, the top two eigenvectors of Σ_s w_s w_sᵀ, and per
 * size a_s = (w_s·q1, w_s·q2) and r_s >= |w_s - a_s1 q1 - a_s2 q2|. For any
 * vector b of filter outputs on those channels, with p = (b·q1, b·q2),
 *     |w_s·b| <= |a_s·p| + r_s sqrt(|b|² - |p|²)
 * (Cauchy–Schwarz on the part of w_s outside the plane). Envelopes of one
 * centre and growing widths lie close to such a plane, so the bound is far
 * below |b| where b does not look like them (noise, a spike of another
 * position). out: BS_GRID_SUB_FLOATS(nC, S) floats, computed in double;
 * r_s is rounded up, by more than the float rounding of q and a.
 */
static bs_status subspace_bound(const float *w, int S, int nC, float *out)
{
    double *a = malloc(sizeof(double) * (size_t)nC * nC * 2), *ev = malloc(sizeof(double) * (size_t)nC);
    if (!a || !ev) {
        free(a);
        free(ev);
        return BS_ERR_MEMORY;
    }
    double *vec = a + (size_t)nC * nC;
    for (int i = 0; i < nC; i++)
        for (int j = 0; j < nC; j++) {
            double v = 0;
            for (int s = 0; s < S; s++)
                v += (double)w[s * nC + i] * w[s * nC + j];
            a[i * nC + j] = v;
        }
    bs_status st = bs_eigh_jacobi(a, nC, ev, vec);
    for (int d = 0; d < 2 && st == BS_OK; d++)
        for (int j = 0; j < nC; j++)
            out[d * nC + j] = d < nC ? (float)vec[d * nC + j] : 0.0f;
    for (int s = 0; s < S && st == BS_OK; s++) {
        double c[2] = {0, 0}, r = 0;
        for (int d = 0; d < 2; d++)
            for (int j = 0; j < nC; j++)
                c[d] += (double)w[s * nC + j] * out[d * nC + j];
        for (int j = 0; j < nC; j++) {
            double e = w[s * nC + j] - c[0] * out[j] - c[1] * out[nC + j];
            r += e * e;
        }
        out[2 * nC + 3 * s] = (float)c[0];
        out[2 * nC + 3 * s + 1] = (float)c[1];
        out[2 * nC + 3 * s + 2] = (float)(sqrt(r) + 1e-6);
    }
    free(a);
    free(ev);
    return st;
}

bs_status bs_grid_build(const bs_probe *probe, const bs_detect_params *p, bs_detect_grid *g)
{
    memset(g, 0, sizeof *g);
    int C = probe->n_chan;
    double dmin = p->dmin_um > 0 ? p->dmin_um : bs_probe_median_depth_step(probe);
    double dy = dmin / 2, dx_target = p->dminx_um / 2;
    /* count candidate positions per shank to size the arrays */
    size_t cap = 0;
    for (int sh = 0; sh < probe->n_shanks; sh++) {
        double x0, x1, y0, y1;
        if (!shank_extent(probe, sh, &x0, &x1, &y0, &y1))
            continue;
        size_t ny = (size_t)floor((y1 - y0) / dy + 1e-9) + 1;
        size_t nx = (size_t)lround((x1 - x0) / dx_target) + 1;
        cap += nx * ny;
    }
    int nC = p->n_chans < C ? p->n_chans : C;
    g->n_chans = nC;
    g->n_sizes = p->n_sizes;
    g->x_um = bs_mem_alloc("detect/grid", cap * sizeof(float));
    g->y_um = bs_mem_alloc("detect/grid", cap * sizeof(float));
    g->shank = bs_mem_alloc("detect/grid", cap * sizeof(int));
    ranked *rank = malloc((size_t)(C > 1 ? C : 1) * sizeof *rank);
    if (!g->x_um || !g->y_um || !g->shank || !rank) {
        free(rank);
        bs_grid_free(g);
        return BS_ERR_MEMORY;
    }
    double maxd2 = (double)p->max_channel_distance_um * p->max_channel_distance_um;
    for (int sh = 0; sh < probe->n_shanks; sh++) {
        double x0, x1, y0, y1;
        if (!shank_extent(probe, sh, &x0, &x1, &y0, &y1))
            continue;
        int ny = (int)floor((y1 - y0) / dy + 1e-9) + 1;
        int nx = (int)lround((x1 - x0) / dx_target) + 1;
        for (int ix = 0; ix < nx; ix++)
            for (int iy = 0; iy < ny; iy++) {
                double x = nx > 1 ? x0 + (x1 - x0) * ix / (nx - 1) : x0, y = y0 + dy * iy;
                double best = INFINITY;
                for (int c = 0; c < C; c++)
                    if (probe->shank[c] == sh) {
                        double ddx = probe->x_um[c] - x, ddy = probe->y_um[c] - y;
                        best = fmin(best, ddx * ddx + ddy * ddy);
                    }
                if (best > maxd2)
                    continue;
                g->x_um[g->n_pos] = (float)x;
                g->y_um[g->n_pos] = (float)y;
                g->shank[g->n_pos] = sh;
                g->n_pos++;
            }
    }
    if (g->n_pos == 0) {
        free(rank);
        bs_grid_free(g);
        return bs_error(BS_ERR_INPUT, "no spike positions within %.0f µm of a contact: check the probe geometry",
                        p->max_channel_distance_um);
    }
    int F = g->n_pos;
    g->ichan = bs_mem_alloc("detect/grid", (size_t)F * nC * sizeof(int));
    g->weights = bs_mem_alloc("detect/grid", (size_t)F * p->n_sizes * nC * sizeof(float));
    int max_on_shank = 0;
    for (int sh = 0; sh < probe->n_shanks; sh++) {
        int n = 0;
        for (int f = 0; f < F; f++)
            n += g->shank[f] == sh;
        if (n > max_on_shank)
            max_on_shank = n;
    }
    g->n_neighbors = p->n_neighbors < max_on_shank ? p->n_neighbors : max_on_shank;
    g->neighbors = bs_mem_alloc("detect/grid", (size_t)F * g->n_neighbors * sizeof(int));
    ranked *prank = malloc((size_t)F * sizeof *prank);
    if (!g->ichan || !g->weights || !g->neighbors || !prank) {
        free(rank);
        free(prank);
        bs_grid_free(g);
        return BS_ERR_MEMORY;
    }
    for (int f = 0; f < F; f++) {
        int n = 0;
        for (int c = 0; c < C; c++) {
            double ddx = probe->x_um[c] - g->x_um[f], ddy = probe->y_um[c] - g->y_um[f];
            /* other shanks sort after every channel of this shank */
            rank[n++] = (ranked){ddx * ddx + ddy * ddy + (probe->shank[c] != g->shank[f] ? 1e30 : 0), c};
        }
        qsort(rank, (size_t)n, sizeof *rank, ranked_cmp);
        for (int j = 0; j < nC; j++)
            g->ichan[(size_t)f * nC + j] = rank[j].idx;
        for (int s = 0; s < p->n_sizes; s++) {
            double sigma = p->min_template_size_um * (s + 1), norm = 0;
            float *w = g->weights + ((size_t)f * p->n_sizes + s) * nC;
            for (int j = 0; j < nC; j++) {
                double d2 = rank[j].d2 >= 1e30 ? INFINITY : rank[j].d2;
                w[j] = (float)exp(-d2 / (sigma * sigma));
                norm += (double)w[j] * w[j];
            }
            norm = norm > 0 ? 1.0 / sqrt(norm) : 0;
            for (int j = 0; j < nC; j++)
                w[j] = (float)(w[j] * norm);
        }
        int m = 0;
        for (int h = 0; h < F; h++)
            if (g->shank[h] == g->shank[f]) {
                double ddx = g->x_um[h] - g->x_um[f], ddy = g->y_um[h] - g->y_um[f];
                prank[m++] = (ranked){ddx * ddx + ddy * ddy, h};
            }
        qsort(prank, (size_t)m, sizeof *prank, ranked_cmp);
        for (int j = 0; j < g->n_neighbors; j++)
            g->neighbors[(size_t)f * g->n_neighbors + j] = j < m ? prank[j].idx : -1;
    }
    free(rank);
    free(prank);
    /* each position's subspace bound, over its channels in ascending order (its set's, build_sets) */
    const int S = p->n_sizes;
    const size_t nsub = BS_GRID_SUB_FLOATS(nC, S);
    g->sub = bs_mem_alloc("detect/grid", (size_t)F * nsub * sizeof(float));
    ranked *asc = malloc((size_t)nC * sizeof *asc);
    float *wa = malloc((size_t)S * nC * sizeof *wa);
    bs_status st = g->sub && asc && wa ? BS_OK : BS_ERR_MEMORY;
    for (int f = 0; f < F && st == BS_OK; f++) {
        for (int j = 0; j < nC; j++)
            asc[j] = (ranked){g->ichan[(size_t)f * nC + j], j};
        qsort(asc, (size_t)nC, sizeof *asc, ranked_cmp);
        for (int s = 0; s < S; s++)
            for (int j = 0; j < nC; j++)
                wa[s * nC + j] = g->weights[((size_t)f * S + s) * nC + asc[j].idx];
        st = subspace_bound(wa, S, nC, g->sub + (size_t)f * nsub);
    }
    free(asc);
    free(wa);
    if (st != BS_OK) {
        bs_grid_free(g);
        return st;
    }
    return build_sets(g);
}
