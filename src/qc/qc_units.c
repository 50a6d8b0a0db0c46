/*
 * qc_units.c - the per-unit stages of bs_qc_run (qc.h): the per-channel
 * PCA of the spilled subset waveforms and the PCA metrics of each unit's
 * neighbourhood, then the train / amplitude / drift metrics on spike arrays
 * gathered for groups of units.
 *
 * Neighbourhood points are ordered like SpikeInterface's random-spike
 * vector (sample, then unit), which matters only for the nearest-neighbour
 * subsampling. Units are processed in id order; OpenMP runs over the
 * channels of one unit's PCA fit and over the units of a group, and every
 * result depends only on its own unit's data, so the output does not depend
 * on the thread count.
 */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../common/progress.h"
#include "../mem/mem.h"
#include "qc_run.h"

/* ------------------------------------------------------------------ PCA */

typedef struct {
    int64_t *ustart; /* [K + 1] start of unit u's subset in ulist */
    int64_t *ulist;  /* [n_sel] subset indices grouped by unit, spike order inside */
    int64_t *rank;   /* [n_sel] position of a subset spike inside its unit */
    int64_t *order;  /* [n_sel] subset indices sorted by (sample, unit) */
    int64_t *pbase;  /* [K] start of unit u's projections in proj, floats */
    float *proj;     /* per subset spike: n_components x n_sp(u) */
    bs_ipca *model;  /* [C] */
} pca_state;

typedef struct {
    int64_t t;  /* sample */
    int32_t u;  /* unit index */
    int64_t i;  /* subset index */
} order_key;

static int cmp_order_key(const void *a, const void *b)
{
    const order_key *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    if (x->u != y->u)
        return x->u < y->u ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* Unit u's subset waveforms from the spill file into W (m x n_sp x nt). */
static bs_status read_unit(const qc_ctx *c, const pca_state *s, int u, float *W)
{
    size_t rec = (size_t)c->n_sp[u] * c->nt;
    for (int64_t r = 0; r < c->m[u]; r++) {
        int64_t i = s->ulist[s->ustart[u] + r];
        size_t want = rec * sizeof(float), got = 0;
        off_t off = (off_t)c->sel_off[i] * (off_t)sizeof(float);
        while (got < want) {
            ssize_t k = pread(c->spill_fd, (char *)(W + (size_t)r * rec) + got, want - got, off + (off_t)got);
            if (k <= 0)
                return bs_error(BS_ERR_INPUT, "%s: read failed: %s", c->spill_path,
                                k == 0 ? "unexpected end of file" : strerror(errno));
            got += (size_t)k;
        }
    }
    return BS_OK;
}

static bs_status fit_and_project(qc_ctx *c, pca_state *s, float *W)
{
    int k = c->p->n_components, nth = omp_get_max_threads();
    size_t sb = bs_ipca_scratch_bytes(c->nt, k);
    char *scratch = bs_mem_alloc("qc/pca-scratch", sb * (size_t)nth);
    bs_status *tst = bs_mem_alloc("qc/pca-scratch", sizeof *tst * (size_t)c->C);
    if (!scratch || !tst) {
        bs_mem_free(scratch);
        bs_mem_free(tst);
        return BS_ERR_MEMORY;
    }
    bs_status st = BS_OK;
    /* Each fit eigen-decomposes an nt x nt Gram matrix (O(nt^3)); nt grows with the sampling rate
     * (3 ms of samples: 90 at 30 kHz, 1500 at 500 kHz, about 4600 times the work): above 256 samples
     * say so and show progress by unit. */
    int slow = c->nt > 256;
    if (slow)
        bs_log_warn("qc: waveforms of %d samples at %.6g Hz: each PCA fit solves a %d x %d eigenproblem "
                    "(work grows with the cube of the sampling rate); the PCA metrics will be slow",
                    c->nt, c->fs, c->nt, c->nt);
    bs_progress pg;
    bs_progress_start(&pg, "qc pca", "units", slow && !c->p->quiet ? c->K : 0);
    /* fit: units in id order, those with at least n_components subset spikes */
    for (int u = 0; u < c->K && st == BS_OK; u++) {
        bs_progress_update(&pg, u);
        if (c->m[u] < k)
            continue;
        st = read_unit(c, s, u, W);
        if (st != BS_OK)
            break;
        int n_sp = c->n_sp[u];
        int64_t stride = (int64_t)n_sp * c->nt;
#pragma omp parallel for schedule(static)
        for (int j = 0; j < n_sp; j++) {
            void *scr = scratch + sb * (size_t)omp_get_thread_num();
            tst[j] = bs_ipca_partial_fit(&s->model[c->sp[(size_t)u * c->C + j]], W + (size_t)j * c->nt, c->m[u],
                                         stride, scr);
        }
        for (int j = 0; j < n_sp && st == BS_OK; j++)
            st = tst[j];
    }
    if (st == BS_OK)
        bs_progress_finish(&pg);
    /* project every subset spike on its unit's channels */
    for (int u = 0; u < c->K && st == BS_OK; u++) {
        if (c->m[u] == 0)
            continue;
        st = read_unit(c, s, u, W);
        int n_sp = c->n_sp[u];
        float out[64];
        for (int64_t r = 0; r < c->m[u] && st == BS_OK; r++)
            for (int j = 0; j < n_sp; j++) {
                const bs_ipca *m = &s->model[c->sp[(size_t)u * c->C + j]];
                float *dst = s->proj + s->pbase[u] + (size_t)r * k * n_sp;
                if (m->n_seen > 0)
                    bs_ipca_transform(m, W + ((size_t)r * n_sp + j) * c->nt, out);
                else
                    memset(out, 0, sizeof out);
                for (int kk = 0; kk < k; kk++)
                    dst[(size_t)kk * n_sp + j] = out[kk];
            }
    }
    bs_mem_free(scratch);
    bs_mem_free(tst);
    return st;
}

int64_t qc_neighbourhood_points(const qc_ctx *c, int u)
{
    int64_t n = 0;
    for (int v = 0; v < c->K && c->m[u]; v++)
        for (int j = 0; j < c->n_sp[u] && c->m[v]; j++)
            if (c->sp[(size_t)u * c->C + j] == c->main_ch[v]) {
                n += c->m[v];
                break;
            }
    return n;
}

/* The PCA metrics of unit u. */
static bs_status unit_pca_metrics(qc_ctx *c, const pca_state *s, int u, int32_t *vpos, int *jmap, double *X,
                                  int32_t *lab)
{
    int k = c->p->n_components, n_sp = c->n_sp[u], d = k * n_sp;
    const int *spu = c->sp + (size_t)u * c->C;
    int nv = 0;
    int64_t n = 0;
    for (int v = 0; v < c->K; v++) {
        vpos[v] = -1;
        if (c->m[v] == 0)
            continue;
        int in = 0;
        for (int j = 0; j < n_sp && !in; j++)
            in = spu[j] == c->main_ch[v];
        if (!in)
            continue;
        vpos[v] = nv;
        const int *spv = c->sp + (size_t)v * c->C;
        for (int j = 0; j < n_sp; j++) {
            jmap[(size_t)nv * n_sp + j] = -1;
            for (int q = 0; q < c->n_sp[v]; q++)
                if (spv[q] == spu[j])
                    jmap[(size_t)nv * n_sp + j] = q;
        }
        nv++;
        n += c->m[v];
    }
    int64_t i = 0;
    for (int64_t o = 0; o < c->n_sel; o++) {
        int64_t sidx = s->order[o];
        int v = c->sel_u[sidx];
        if (vpos[v] < 0)
            continue;
        const int *jm = jmap + (size_t)vpos[v] * n_sp;
        const float *src = s->proj + s->pbase[v] + (size_t)s->rank[sidx] * k * c->n_sp[v];
        double *row = X + (size_t)i * d;
        for (int kk = 0; kk < k; kk++)
            for (int j = 0; j < n_sp; j++)
                row[kk * n_sp + j] = jm[j] >= 0 ? (double)src[(size_t)kk * c->n_sp[v] + jm[j]] : 0.0;
        lab[i++] = v;
    }
    double *m = c->metrics + (size_t)u * BS_QC_N_METRICS;
    BS_TRY(bs_qc_mahalanobis(X, lab, n, d, u, &m[BS_QC_ISOLATION_DISTANCE], &m[BS_QC_L_RATIO]));
    BS_TRY(bs_qc_d_prime(X, lab, n, d, u, &m[BS_QC_D_PRIME]));
    BS_TRY(bs_qc_nn_rates(X, lab, n, d, u, c->p->nn_max_spikes, c->p->nn_neighbors, &m[BS_QC_NN_HIT_RATE],
                          &m[BS_QC_NN_MISS_RATE]));
    return bs_qc_silhouette(X, lab, n, d, u, &m[BS_QC_SILHOUETTE]);
}

bs_status qc_pca_metrics(qc_ctx *c)
{
    int k = c->p->n_components;
    if (k > 64)
        return bs_error(BS_ERR_USAGE, "qc: at most 64 principal components, got %d", k);
    pca_state s = {0};
    int64_t n_sel = c->n_sel, proj_n = 0, max_rec = 0, max_pts = 0;
    int max_sp = 0;
    s.ustart = bs_mem_calloc("qc/pca-index", (size_t)c->K + 1, sizeof *s.ustart);
    s.ulist = bs_mem_alloc("qc/pca-index", sizeof *s.ulist * (size_t)(n_sel + 1));
    s.rank = bs_mem_alloc("qc/pca-index", sizeof *s.rank * (size_t)(n_sel + 1));
    s.order = bs_mem_alloc("qc/pca-index", sizeof *s.order * (size_t)(n_sel + 1));
    s.pbase = bs_mem_alloc("qc/pca-index", sizeof *s.pbase * (size_t)(c->K + 1));
    s.model = bs_mem_calloc("qc/pca-model", (size_t)c->C, sizeof *s.model);
    bs_status st = s.ustart && s.ulist && s.rank && s.order && s.pbase && s.model ? BS_OK : BS_ERR_MEMORY;
    for (int ch = 0; ch < c->C && st == BS_OK; ch++)
        st = bs_ipca_init(&s.model[ch], c->nt, k);
    if (st == BS_OK) {
        for (int64_t i = 0; i < n_sel; i++)
            s.ustart[c->sel_u[i] + 1]++;
        for (int u = 0; u < c->K; u++)
            s.ustart[u + 1] += s.ustart[u];
        int64_t *fill = s.pbase; /* temporarily: per-unit fill counts */
        memset(fill, 0, sizeof *fill * (size_t)c->K);
        for (int64_t i = 0; i < n_sel; i++) {
            int u = c->sel_u[i];
            s.rank[i] = fill[u];
            s.ulist[s.ustart[u] + fill[u]++] = i;
        }
        order_key *key = bs_mem_alloc("qc/pca-index", sizeof *key * (size_t)(n_sel + 1));
        if (!key)
            st = BS_ERR_MEMORY;
        for (int64_t i = 0; key && i < n_sel; i++)
            key[i] = (order_key){c->sel_t[i], c->sel_u[i], i};
        if (key)
            qsort(key, (size_t)n_sel, sizeof *key, cmp_order_key);
        for (int64_t i = 0; key && i < n_sel; i++)
            s.order[i] = key[i].i;
        bs_mem_free(key);
        for (int u = 0; u < c->K; u++) {
            s.pbase[u] = proj_n;
            proj_n += c->m[u] * k * c->n_sp[u];
            int64_t r = c->m[u] * c->n_sp[u] * c->nt;
            max_rec = r > max_rec ? r : max_rec;
            max_sp = c->n_sp[u] > max_sp ? c->n_sp[u] : max_sp;
        }
        s.proj = st == BS_OK ? bs_mem_alloc("qc/pca-projections", sizeof *s.proj * (size_t)(proj_n + 1)) : NULL;
        if (!s.proj)
            st = BS_ERR_MEMORY;
    }
    float *W = st == BS_OK ? bs_mem_alloc("qc/pca-waveforms", sizeof *W * (size_t)(max_rec + 1)) : NULL;
    if (st == BS_OK && !W)
        st = BS_ERR_MEMORY;
    if (st == BS_OK)
        st = fit_and_project(c, &s, W);
    bs_mem_free(W);
    /* the largest neighbourhood bounds the point buffers */
    int32_t *vpos = NULL;
    int *jmap = NULL;
    double *X = NULL;
    int32_t *lab = NULL;
    if (st == BS_OK) {
        for (int u = 0; u < c->K; u++) {
            int64_t n = qc_neighbourhood_points(c, u);
            max_pts = n > max_pts ? n : max_pts;
        }
        vpos = bs_mem_alloc("qc/pca-points", sizeof *vpos * (size_t)c->K);
        jmap = bs_mem_alloc("qc/pca-points", sizeof *jmap * (size_t)c->K * (size_t)(max_sp + 1));
        X = bs_mem_alloc("qc/pca-points", sizeof *X * (size_t)(max_pts + 1) * (size_t)(k * max_sp + 1));
        lab = bs_mem_alloc("qc/pca-points", sizeof *lab * (size_t)(max_pts + 1));
        if (!vpos || !jmap || !X || !lab)
            st = BS_ERR_MEMORY;
    }
    for (int u = 0; u < c->K && st == BS_OK; u++)
        if (c->m[u] > 0)
            st = unit_pca_metrics(c, &s, u, vpos, jmap, X, lab);
    bs_mem_free(vpos);
    bs_mem_free(jmap);
    bs_mem_free(X);
    bs_mem_free(lab);
    for (int ch = 0; s.model && ch < c->C; ch++)
        bs_ipca_free(&s.model[ch]);
    bs_mem_free(s.model);
    bs_mem_free(s.ustart);
    bs_mem_free(s.ulist);
    bs_mem_free(s.rank);
    bs_mem_free(s.order);
    bs_mem_free(s.pbase);
    bs_mem_free(s.proj);
    return st;
}

/* ------------------------------------------------------------- depths */

enum { DEPTH_NONE, DEPTH_POSITIONS, DEPTH_PC };

typedef struct {
    int kind;
    bs_phy_col pos, feat, tmpl;
    int32_t *ind;   /* [n_tmpl * npc] pc_feature_ind */
    int64_t n_tmpl;
    int npc, P;     /* channels and PCs per spike in pc_features */
    float *fbuf;    /* QC_BLOCK rows of positions or features */
    int64_t *tbuf;  /* QC_BLOCK template ids */
} depth_src;

static void depth_close(depth_src *d)
{
    bs_phy_col_close(&d->pos);
    bs_phy_col_close(&d->feat);
    bs_phy_col_close(&d->tmpl);
    bs_mem_free(d->ind);
    bs_mem_free(d->fbuf);
    bs_mem_free(d->tbuf);
}

static bs_status depth_open(const qc_ctx *c, depth_src *d)
{
    memset(d, 0, sizeof *d);
    d->pos.r.fd = d->feat.r.fd = d->tmpl.r.fd = -1;
    if (bs_phy_has(c->dir, BS_PHY_SPIKE_POSITIONS)) {
        BS_TRY(qc_col_open(&d->pos, c->dir, BS_PHY_SPIKE_POSITIONS, 1));
        if (d->pos.n_rows != c->S || d->pos.n_cols < 2)
            return bs_error(BS_ERR_INPUT, "%s: expected %lld rows of (x, y) µm, got shape (%lld, %lld)", d->pos.r.path,
                            (long long)c->S, (long long)d->pos.n_rows, (long long)d->pos.n_cols);
        d->fbuf = bs_mem_alloc("qc/depth-block", sizeof *d->fbuf * QC_BLOCK * (size_t)d->pos.n_cols);
        if (!d->fbuf)
            return BS_ERR_MEMORY;
        d->kind = DEPTH_POSITIONS;
        return BS_OK;
    }
    if (!bs_phy_has(c->dir, BS_PHY_PC_FEATURES) || !bs_phy_has(c->dir, BS_PHY_PC_FEATURE_IND) ||
        !bs_phy_has(c->dir, BS_PHY_SPIKE_TEMPLATES))
        return BS_OK;
    BS_TRY(qc_col_open(&d->feat, c->dir, BS_PHY_PC_FEATURES, 1));
    BS_TRY(qc_col_open(&d->tmpl, c->dir, BS_PHY_SPIKE_TEMPLATES, 0));
    if (d->feat.n_rows != c->S || d->feat.r.h.ndim != 3 || d->tmpl.n_rows != c->S)
        return bs_error(BS_ERR_INPUT, "%s: expected shape (%lld, n_pc, n_chan)", d->feat.r.path, (long long)c->S);
    d->P = (int)d->feat.r.h.shape[1];
    d->npc = (int)d->feat.r.h.shape[2];
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, c->dir, BS_PHY_PC_FEATURE_IND));
    bs_npy_header h;
    void *raw = NULL;
    BS_TRY(bs_npy_load(path, "qc/depth-ind", &h, &raw));
    bs_status st = BS_OK;
    if (h.ndim != 2 || h.shape[1] != d->npc || h.dtype > BS_NPY_U64)
        st = bs_error(BS_ERR_INPUT, "%s: expected integer shape (n_templates, %d)", path, d->npc);
    d->n_tmpl = h.shape[0];
    d->ind = st == BS_OK ? bs_mem_alloc("qc/depth-ind", sizeof *d->ind * (size_t)(d->n_tmpl * d->npc + 1)) : NULL;
    if (st == BS_OK && !d->ind)
        st = BS_ERR_MEMORY;
    for (int64_t i = 0; st == BS_OK && i < d->n_tmpl * d->npc; i++) {
        int64_t v;
        size_t es = bs_npy_dtype_size(h.dtype);
        const uint8_t *p = (const uint8_t *)raw + (size_t)i * es;
        if (es == 4) {
            int32_t x;
            memcpy(&x, p, 4);
            v = h.dtype == BS_NPY_U32 ? (int64_t)(uint32_t)x : x;
        } else if (es == 8) {
            memcpy(&v, p, 8);
        } else {
            v = -1;
        }
        if (v < 0 || v >= c->C)
            st = bs_error(BS_ERR_INPUT, "%s: channel index %lld outside [0, %d)", path, (long long)v, c->C);
        else
            d->ind[i] = (int32_t)v;
    }
    bs_mem_free(raw);
    BS_TRY(st);
    d->fbuf = bs_mem_alloc("qc/depth-block", sizeof *d->fbuf * QC_BLOCK * (size_t)d->feat.n_cols);
    d->tbuf = bs_mem_alloc("qc/depth-block", sizeof *d->tbuf * QC_BLOCK);
    if (!d->fbuf || !d->tbuf)
        return BS_ERR_MEMORY;
    d->kind = DEPTH_PC;
    return BS_OK;
}

/* Depth (µm) of spikes [r0, r0 + n), NaN where unknown. */
static bs_status depth_read(const qc_ctx *c, depth_src *d, int64_t r0, int64_t n, float *y)
{
    if (d->kind == DEPTH_POSITIONS) {
        BS_TRY(bs_phy_col_f32(&d->pos, r0, n, d->fbuf));
        for (int64_t i = 0; i < n; i++)
            y[i] = d->fbuf[(size_t)i * d->pos.n_cols + 1];
        return BS_OK;
    }
    if (d->kind == DEPTH_NONE) {
        for (int64_t i = 0; i < n; i++)
            y[i] = NAN;
        return BS_OK;
    }
    BS_TRY(bs_phy_col_f32(&d->feat, r0, n, d->fbuf));
    BS_TRY(bs_phy_col_i64(&d->tmpl, r0, n, d->tbuf));
    const double *ych = c->rec->probe.y_um;
    for (int64_t i = 0; i < n; i++) {
        y[i] = NAN;
        int64_t tk = d->tbuf[i];
        if (tk < 0 || tk >= d->n_tmpl)
            continue;
        const float *f = d->fbuf + (size_t)i * d->feat.n_cols; /* first PC: f[0..npc) */
        double num = 0, den = 0;
        for (int j = 0; j < d->npc; j++) {
            double v = f[j] > 0 ? (double)f[j] : 0.0, pw = v * v;
            num += ych[d->ind[tk * d->npc + j]] * pw;
            den += pw;
        }
        if (den > 0)
            y[i] = (float)(num / den);
    }
    return BS_OK;
}

/* ------------------------------------------------------ per-unit metrics */

static void train_metrics(const qc_ctx *c, int u, const int64_t *t, const float *a, const float *y, int64_t n,
                          int64_t *ty, float *yy, float *work)
{
    const bs_qc_params *p = c->p;
    double *m = c->metrics + (size_t)u * BS_QC_N_METRICS;
    double T_s = (double)c->T / c->fs;
    int64_t cnt;
    m[BS_QC_NUM_SPIKES] = (double)n;
    if (n == 0)
        return;
    m[BS_QC_FIRING_RATE] = (double)n / T_s;
    m[BS_QC_PRESENCE_RATIO] = bs_qc_presence_ratio(t, n, c->T, c->fs, p->presence_bin_s, p->presence_fr_ratio);
    bs_qc_isi_violations(t, n, c->T, c->fs, p->isi_threshold_ms, p->isi_min_ms, &m[BS_QC_ISI_RATIO], &cnt);
    m[BS_QC_ISI_COUNT] = (double)cnt;
    bs_qc_rp_violations(t, n, c->T, c->fs, p->rp_ms, p->rp_censored_ms, &m[BS_QC_RP_CONTAMINATION], &cnt);
    m[BS_QC_RP_VIOLATIONS] = (double)cnt;
    m[BS_QC_SLIDING_RP] = bs_qc_sliding_rp(t, n, c->T, c->fs, p);
    m[BS_QC_AMPLITUDE_CUTOFF] =
        bs_qc_amplitude_cutoff(a, n, p->cutoff_bins, p->cutoff_smoothing, p->cutoff_min_ratio, work);
    m[BS_QC_AMPLITUDE_MEDIAN] = bs_qc_median_f(a, n, work);
    if (c->main_ch[u] >= 0 && c->noise[c->main_ch[u]] > 0)
        m[BS_QC_SNR] = c->tamp[u] / c->noise[c->main_ch[u]];
    /* drift on the spikes whose depth is known */
    int64_t ny = 0;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(y[i])) {
            ty[ny] = t[i];
            yy[ny++] = y[i];
        }
    if (ny > 0) {
        bs_qc_drift(ty, yy, ny, c->T, c->fs, p->drift_interval_s, p->drift_min_spikes, p->drift_max_nan_fraction,
                    p->drift_min_bins, work, &m[BS_QC_DRIFT_PTP], &m[BS_QC_DRIFT_STD], &m[BS_QC_DRIFT_MAD]);
        bs_qc_allen_drift(ty, yy, ny, c->t_first, c->t_last, c->fs, p->allen_drift_interval_s,
                          p->allen_drift_min_spikes, work, &m[BS_QC_MAX_DRIFT], &m[BS_QC_CUMULATIVE_DRIFT]);
    }
}

/* Gather units [u0, u1) (total spikes n_tot) and compute their metrics. */
static bs_status unit_group(qc_ctx *c, bs_phy_col *amp, depth_src *dep, int u0, int u1, int64_t n_tot, int64_t max_n,
                            int64_t *blk_t, int64_t *blk_id, float *blk_a, float *blk_y)
{
    int nth = omp_get_max_threads();
    int64_t *gt = bs_mem_alloc("qc/group-spikes", sizeof *gt * (size_t)(n_tot + 1));
    float *ga = bs_mem_alloc("qc/group-spikes", sizeof *ga * (size_t)(n_tot + 1));
    float *gy = bs_mem_alloc("qc/group-spikes", sizeof *gy * (size_t)(n_tot + 1));
    int64_t *off = bs_mem_alloc("qc/group-spikes", sizeof *off * (size_t)(u1 - u0 + 1));
    int64_t *fill = bs_mem_calloc("qc/group-spikes", (size_t)(u1 - u0 + 1), sizeof *fill);
    int64_t *tyw = bs_mem_alloc("qc/group-work", sizeof *tyw * (size_t)nth * (size_t)(max_n + 1));
    float *yyw = bs_mem_alloc("qc/group-work", sizeof *yyw * (size_t)nth * (size_t)(max_n + 1));
    float *work = bs_mem_alloc("qc/group-work", sizeof *work * (size_t)nth * (size_t)(max_n + 1));
    bs_status st = gt && ga && gy && off && fill && tyw && yyw && work ? BS_OK : BS_ERR_MEMORY;
    if (st == BS_OK) {
        off[0] = 0;
        for (int u = u0; u < u1; u++)
            off[u - u0 + 1] = off[u - u0] + c->count[u];
    }
    for (int64_t r0 = 0; r0 < c->S && st == BS_OK; r0 += QC_BLOCK) {
        int64_t n = c->S - r0 < QC_BLOCK ? c->S - r0 : QC_BLOCK;
        st = bs_phy_col_i64(&c->times, r0, n, blk_t);
        if (st == BS_OK)
            st = bs_phy_col_i64(&c->clus, r0, n, blk_id);
        if (st == BS_OK)
            st = bs_phy_col_f32(amp, r0, n, blk_a);
        if (st == BS_OK)
            st = depth_read(c, dep, r0, n, blk_y);
        for (int64_t i = 0; i < n && st == BS_OK; i++) {
            int u = qc_unit_index(c, blk_id[i]);
            if (u < u0 || u >= u1)
                continue;
            int64_t k = off[u - u0] + fill[u - u0]++;
            gt[k] = blk_t[i];
            ga[k] = blk_a[i];
            gy[k] = blk_y[i];
        }
    }
    if (st == BS_OK) {
#pragma omp parallel for schedule(dynamic)
        for (int u = u0; u < u1; u++) {
            size_t w = (size_t)omp_get_thread_num() * (size_t)(max_n + 1);
            int64_t o = off[u - u0];
            train_metrics(c, u, gt + o, ga + o, gy + o, c->count[u], tyw + w, yyw + w, work + w);
        }
    }
    bs_mem_free(gt);
    bs_mem_free(ga);
    bs_mem_free(gy);
    bs_mem_free(off);
    bs_mem_free(fill);
    bs_mem_free(tyw);
    bs_mem_free(yyw);
    bs_mem_free(work);
    return st;
}

bs_status qc_unit_metrics(qc_ctx *c)
{
    bs_phy_col amp;
    amp.r.fd = -1;
    amp.raw = NULL;
    depth_src dep;
    bs_status st = qc_col_open(&amp, c->stage, QC_AMP_FILE, 1);
    if (st == BS_OK && amp.n_rows != c->S)
        st = bs_error(BS_ERR_INTERNAL, "%s: %lld amplitudes for %lld spikes", amp.r.path, (long long)amp.n_rows,
                      (long long)c->S);
    bs_status sd = depth_open(c, &dep);
    if (st == BS_OK)
        st = sd;
    if (st == BS_OK && !c->p->quiet)
        bs_log_info("qc: spike depths %s", dep.kind == DEPTH_POSITIONS ? "from spike_positions.npy"
                                           : dep.kind == DEPTH_PC      ? "from pc_features.npy (Allen estimate)"
                                                                       : "unknown: drift metrics are NaN");
    int64_t max_n = 0;
    for (int u = 0; u < c->K; u++)
        max_n = c->count[u] > max_n ? c->count[u] : max_n;
    int64_t cap = c->p->group_spikes > 0 ? c->p->group_spikes : (int64_t)1 << 23;
    if (cap < max_n)
        cap = max_n;
    int64_t *blk_t = bs_mem_alloc("qc/spike-block", sizeof *blk_t * QC_BLOCK);
    int64_t *blk_id = bs_mem_alloc("qc/spike-block", sizeof *blk_id * QC_BLOCK);
    float *blk_a = bs_mem_alloc("qc/spike-block", sizeof *blk_a * QC_BLOCK);
    float *blk_y = bs_mem_alloc("qc/spike-block", sizeof *blk_y * QC_BLOCK);
    if (st == BS_OK && !(blk_t && blk_id && blk_a && blk_y))
        st = BS_ERR_MEMORY;
    for (int u0 = 0; u0 < c->K && st == BS_OK;) {
        int u1 = u0;
        int64_t n_tot = 0;
        while (u1 < c->K && (u1 == u0 || n_tot + c->count[u1] <= cap))
            n_tot += c->count[u1++];
        st = unit_group(c, &amp, &dep, u0, u1, n_tot, max_n, blk_t, blk_id, blk_a, blk_y);
        u0 = u1;
    }
    bs_mem_free(blk_t);
    bs_mem_free(blk_id);
    bs_mem_free(blk_a);
    bs_mem_free(blk_y);
    bs_phy_col_close(&amp);
    depth_close(&dep);
    return st;
}
