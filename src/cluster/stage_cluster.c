/*
 * stage_cluster.c - a stage of `boundsort sort` (the table:
 * src/pipeline/stages.h): per spatial center, its detected spikes read back
 * from .stages/detect/, graph clustering (graph.c, centers.c), and the
 * clusters that pass the acceptance rule become channel-sparse low-rank
 * templates (see stage_cluster.h).
 *
 * Mechanism, in bounded memory:
 *   1. Center index: one pass over spike_pos.npy counts the spikes of each
 *      center, a second writes every spike's (index, position) into
 *      .stages/cluster/center_index.bin grouped by center (a bucket file,
 *      src/pipeline/stage_io.h), in time order within a center. The stage is
 *      then re-planned with the real count of its largest center.
 *   2. Per center: at most max_center_spikes of its spikes (more are
 *      subsampled evenly in time: item i·m/cap for i < cap, a parameter
 *      since it shapes the result), their times and features gathered by
 *      index, clustered (bs_cluster_center). Centers are independent, so W
 *      of them are clustered at once, one per thread (W = the plan's
 *      cluster_width: the threads, fewer when the budget holds fewer
 *      centers' buffers), and their clusters are then taken in center order:
 *      the templates do not depend on W, the threads or the budget.
 *      With a low tier (detect.h, th_low: some batches detected at a lower
 *      threshold), a center's spikes scoring above th_universal are
 *      clustered first, as without it, then those scoring at most
 *      th_universal apart; a low-tier cluster whose mean features are like a
 *      high-tier cluster's of the center (cosine >= low_tier_max_cos) is that
 *      unit's low amplitudes and makes no template, unless it holds at least
 *      low_tier_majority times that cluster's spikes and a mean waveform
 *      that passes the acceptance rule's norm (3.): the unit then lives
 *      mostly under th_universal, and the low-tier cluster makes its template
 *      instead of the high-tier one (a weaker one is a cloud of crossings
 *      whose mean only leans towards the unit's shape). The rest are units
 *      seen only under th_universal: their templates follow the center's
 *      others, flagged low_tier (the matcher's per-template thresholds apply
 *      to them).
 *   3. Acceptance: a cluster makes a template when it has at least
 *      min_template_spikes spikes and its mean waveform's norm (the norm of
 *      its mean features: the PC basis is orthonormal) is at least
 *      min_template_norm × match_threshold; a weaker template would mostly
 *      catch noise crossings that it happens to fit. A cluster of fewer
 *      spikes, down to small_template_spikes, makes one when its norm is at
 *      least small_template_norm × match_threshold: a unit that large and
 *      rare (a few spikes a minute) is no noise crossing, and the orphan
 *      landmarks (cluster.h) give it a cluster of its own.
 *   4. The template's support: its n_sup channels of largest mean-feature
 *      norm, padded with the channels nearest its peak channel (same shank
 *      first, zero weight) when the center has fewer, ascending.
 *   5. Templates that are the sum of two others at some lags (learned where
 *      two units' spikes often overlap) or a copy of another (a unit split
 *      a sample apart) are removed (src/match/sum_templates.h), so the
 *      matcher peels those spikes as the pair, or with the one template.
 * Checkpoint (.stages/cluster/): support.npy int32 (K, n_sup), U.npy
 * float32 (K, n_sup, n_pcs), n_spikes.npy int64 (K): the spikes each
 * template was learned from (the matcher keeps the busiest one's pair rows),
 * low_tier.npy uint8 (K): 1 for a template of the low tier.
 */
#include "stage_cluster.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "../common/progress.h"
#include "../common/log.h"
#include "../common/samples.h"
#include "../io/npy.h"
#include "../match/sum_templates.h"
#include "../mem/mem.h"
#include "../pipeline/stage.h"
#include "../pipeline/stage_io.h"
#include "../pipeline/stages.h"
#include "cluster.h"

static const char *const files[4] = {"cluster/support.npy", "cluster/U.npy", "cluster/n_spikes.npy",
                                     "cluster/low_tier.npy"};

void bs_learned_templates_free(bs_learned_templates *lt)
{
    bs_mem_free(lt->support);
    bs_mem_free(lt->U);
    bs_mem_free(lt->n_spikes);
    bs_mem_free(lt->low_tier);
    memset(lt, 0, sizeof *lt);
}

static int int_asc(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Norm of cluster j's mean waveform, whitened units: its mean features over
 * the center's channels (the PC basis is orthonormal, so this is the norm of
 * the waveform itself). */
static double centroid_norm(const bs_center_templates *ct, int j, int P)
{
    const float *f = ct->feat + (size_t)j * ct->n_chans * P;
    double e = 0;
    for (int i = 0; i < ct->n_chans * P; i++)
        e += (double)f[i] * f[i];
    return sqrt(e);
}

/* The acceptance rule's floor on a cluster's mean-waveform norm, whitened units. */
static double template_norm_floor(const bs_sort_params *p)
{
    return p->min_template_norm * p->match_threshold;
}

/* 1 if cluster j makes a template (acceptance, above): enough spikes, or fewer (down to
 * small_template_spikes) with a mean waveform too large to be noise crossings, and a norm over the floor. */
static int makes_template(const bs_sort_params *p, const bs_center_templates *ct, int j, int P)
{
    const double norm = centroid_norm(ct, j, P), thr = p->match_threshold;
    const int enough = ct->n_spikes[j] >= p->min_template_spikes ||
                       (p->small_template_norm > 0 && ct->n_spikes[j] >= p->small_template_spikes &&
                        norm >= p->small_template_norm * thr);
    return enough && norm >= template_norm_floor(p);
}

/* Append cluster j of a center as a template: its n_sup channels with the
 * largest mean-feature norm, padded with the channels nearest its peak
 * channel (zero weight) when the center has fewer, in ascending order. */
static bs_status append_template(bs_learned_templates *lt, const bs_probe *probe, const bs_center_templates *ct,
                                 int j, int low_tier)
{
    int n_sup = lt->n_sup, P = lt->P, C = probe->n_chan;
    bs_chan_rank *r = malloc((size_t)C * sizeof *r);
    int *pick = malloc((size_t)n_sup * sizeof *pick);
    uint8_t *used = calloc((size_t)C, 1);
    if (!r || !pick || !used) {
        free(r);
        free(pick);
        free(used);
        return bs_error(BS_ERR_MEMORY, "out of memory choosing template channels");
    }
    int n = 0;
    for (int i = 0; i < ct->n_chans; i++) {
        const float *f = ct->feat + ((size_t)j * ct->n_chans + i) * P;
        double e = 0;
        for (int q = 0; q < P; q++)
            e += (double)f[q] * f[q];
        r[n++] = (bs_chan_rank){ct->chans[i], e};
    }
    qsort(r, (size_t)n, sizeof *r, bs_chan_rank_desc);
    int m = 0;
    for (int i = 0; i < n && m < n_sup; i++) {
        pick[m++] = r[i].ch;
        used[r[i].ch] = 1;
    }
    if (m < n_sup) { /* pad with the nearest channels to the peak, same shank first */
        int pk = ct->peak_chan[j];
        n = 0;
        for (int c = 0; c < C; c++)
            if (!used[c]) {
                double dx = probe->x_um[c] - probe->x_um[pk], dy = probe->y_um[c] - probe->y_um[pk];
                double d2 = dx * dx + dy * dy + (probe->shank[c] != probe->shank[pk] ? 1e12 : 0);
                r[n++] = (bs_chan_rank){c, -d2};
            }
        qsort(r, (size_t)n, sizeof *r, bs_chan_rank_desc);
        for (int i = 0; i < n && m < n_sup; i++)
            pick[m++] = r[i].ch;
    }
    qsort(pick, (size_t)m, sizeof *pick, int_asc);
    int K = lt->K;
    int32_t *sup = bs_mem_realloc(lt->support, "sort/templates", (size_t)(K + 1) * n_sup * sizeof *sup);
    if (sup)
        lt->support = sup;
    float *U = sup ? bs_mem_realloc(lt->U, "sort/templates", (size_t)(K + 1) * n_sup * P * sizeof *U) : NULL;
    if (U)
        lt->U = U;
    int64_t *ns = U ? bs_mem_realloc(lt->n_spikes, "sort/templates", (size_t)(K + 1) * sizeof *ns) : NULL;
    if (ns)
        lt->n_spikes = ns;
    uint8_t *lo = ns ? bs_mem_realloc(lt->low_tier, "sort/templates", (size_t)(K + 1)) : NULL;
    if (lo)
        lt->low_tier = lo;
    bs_status st = (sup && U && ns && lo) ? BS_OK : BS_ERR_MEMORY;
    if (st == BS_OK) {
        lt->n_spikes[K] = ct->n_spikes[j];
        lt->low_tier[K] = (uint8_t)low_tier;
        for (int i = 0; i < n_sup; i++) {
            lt->support[(size_t)K * n_sup + i] = pick[i];
            float *dst = lt->U + ((size_t)K * n_sup + i) * P;
            for (int q = 0; q < P; q++)
                dst[q] = 0;
            for (int u = 0; u < ct->n_chans; u++)
                if (ct->chans[u] == pick[i])
                    memcpy(dst, ct->feat + ((size_t)j * ct->n_chans + u) * P, (size_t)P * sizeof *dst);
        }
        lt->K++;
    }
    free(r);
    free(pick);
    free(used);
    return st;
}

/* The clustering stage's checkpoint: supports (K × n_sup), low-rank
 * weights (K × n_sup × P) and spike counts (K) of the learned templates. */
static bs_status store_templates(const char *stage_dir, const bs_learned_templates *lt)
{
    const char *const *n = files;
    char path[4200], dir[4200];
    int64_t s1[2] = {lt->K, lt->n_sup}, s2[3] = {lt->K, lt->n_sup, lt->P}, s3[1] = {lt->K};
    BS_TRY(bs_path_join(dir, sizeof dir, stage_dir, "cluster"));
    BS_TRY(bs_mkdir_p(dir));
    BS_TRY(bs_path_join(path, sizeof path, stage_dir, n[0]));
    BS_TRY(bs_npy_save(path, BS_NPY_I32, 2, s1, lt->support));
    BS_TRY(bs_path_join(path, sizeof path, stage_dir, n[1]));
    BS_TRY(bs_npy_save(path, BS_NPY_F32, 3, s2, lt->U));
    BS_TRY(bs_path_join(path, sizeof path, stage_dir, n[2]));
    BS_TRY(bs_npy_save(path, BS_NPY_I64, 1, s3, lt->n_spikes));
    BS_TRY(bs_path_join(path, sizeof path, stage_dir, n[3]));
    return bs_npy_save(path, BS_NPY_U8, 1, s3, lt->low_tier);
}

static bs_status load_templates(const char *stage_dir, int n_chan, int P, bs_learned_templates *lt)
{
    char path[4200];
    bs_npy_header hs, hu, hn, hl;
    void *sup = NULL, *U = NULL, *ns = NULL, *lo = NULL;
    BS_TRY(bs_path_join(path, sizeof path, stage_dir, files[0]));
    BS_TRY(bs_npy_load_expect(path, "sort/templates", BS_NPY_I32, 2, &hs, &sup));
    bs_status st = bs_path_join(path, sizeof path, stage_dir, files[1]);
    if (st == BS_OK)
        st = bs_npy_load_expect(path, "sort/templates", BS_NPY_F32, 3, &hu, &U);
    if (st == BS_OK)
        st = bs_path_join(path, sizeof path, stage_dir, files[2]);
    if (st == BS_OK)
        st = bs_npy_load_expect(path, "sort/templates", BS_NPY_I64, 1, &hn, &ns);
    if (st == BS_OK)
        st = bs_path_join(path, sizeof path, stage_dir, files[3]);
    if (st == BS_OK)
        st = bs_npy_load_expect(path, "sort/templates", BS_NPY_U8, 1, &hl, &lo);
    if (st == BS_OK && (hu.shape[0] != hs.shape[0] || hu.shape[1] != hs.shape[1] || hu.shape[2] != P ||
                        hn.shape[0] != hs.shape[0] || hl.shape[0] != hs.shape[0] || hs.shape[1] > n_chan ||
                        hs.shape[0] < 1))
        st = bs_error(BS_ERR_INPUT, "%s: checkpoint shapes disagree", path);
    if (st != BS_OK) {
        bs_mem_free(sup), bs_mem_free(U), bs_mem_free(ns), bs_mem_free(lo);
        return st;
    }
    lt->n_spikes = ns;
    lt->low_tier = lo;
    lt->K = (int)hs.shape[0];
    lt->n_sup = (int)hs.shape[1];
    lt->P = P;
    lt->support = sup;
    lt->U = U;
    return BS_OK;
}

/* An entry of the per-center spike index (.stages/cluster/center_index.bin). */
typedef struct {
    int64_t i;   /* detected spike index */
    int32_t pos; /* its grid position */
    int32_t pad;
} center_item;
#define CENTER_READ 65536 /* index entries per read */

/* What every center's clustering reads (shared, read-only: the files by pread). */
typedef struct {
    const bs_cluster_params *cp;     /* the high tier's (all spikes', with one tier) */
    const bs_cluster_params *cp_low; /* the low tier's: no orphan landmarks (cluster.h) */
    const bs_cluster_centers *centers;
    const bs_detect_grid *grid;
    const bs_temporal_basis *basis;
    const bs_bucket_file *bk; /* the spike index grouped by center */
    const bs_npy_rows *r_t, *r_feat, *r_score;
    const int64_t *count; /* spikes per center */
    int64_t cap;          /* max_center_spikes (0: none) */
    float score_min;      /* with a low tier (detect.th_low), th_universal: the two tiers' bound (0: one tier) */
    double max_cos;       /* low_tier_max_cos */
    double majority;      /* low_tier_majority */
    double majority_min_norm; /* template_norm_floor: the norm a low-tier cluster that takes the unit's
                                 template needs (it must pass the acceptance rule) */
} center_src;

/* Centers per wave when W are clustered at once: CENTER_QUEUE a thread, so that a thread done with its
 * center takes the wave's next one instead of waiting for the slowest (their clusters are held until the
 * wave's templates are appended in center order); one with one thread. */
#define CENTER_QUEUE 8
static int queue_len(int W) { return W > 1 ? CENTER_QUEUE * W : 1; }

/* One center's clustering and its status (message copied: bs_error's is per thread). */
typedef struct {
    bs_center_templates ct, lo; /* the high tier's clusters (all, with one tier) and the low tier's */
    bs_status st;
    char msg[512];
} center_result;

/* The m spikes sel[] (grid positions pos_of[]) of center k, their times and features gathered, clustered
 * with cp into *ct. */
static bs_status cluster_sel(const center_src *c, const bs_cluster_params *cp, int k, const int64_t *sel,
                             const int32_t *pos_of, int64_t m, bs_center_templates *ct)
{
    memset(ct, 0, sizeof *ct);
    if (m == 0)
        return BS_OK;
    bs_detected_spike *spk = bs_mem_calloc("sort/center-spikes", (size_t)m, sizeof *spk);
    int64_t *times = bs_mem_alloc("sort/center-spikes", (size_t)m * sizeof *times);
    float *feat = bs_mem_alloc("sort/center-features", (size_t)m * c->r_feat->row_bytes);
    int32_t *labels = bs_mem_alloc("sort/center-labels", (size_t)m * sizeof *labels);
    bs_status st = spk && times && feat && labels ? bs_npy_rows_gather(c->r_t, sel, m, times) : BS_ERR_MEMORY;
    if (st == BS_OK)
        st = bs_npy_rows_gather(c->r_feat, sel, m, feat);
    if (st == BS_OK) {
        for (int64_t i = 0; i < m; i++) {
            spk[i].t = times[i];
            spk[i].pos = pos_of[i];
        }
        st = bs_cluster_center(cp, c->centers, k, c->grid, c->basis, spk, feat, m, labels, ct);
    }
    bs_mem_free(spk);
    bs_mem_free(times);
    bs_mem_free(feat);
    bs_mem_free(labels);
    return st;
}

/* (stage_cluster.h) */
void bs_drop_low_tier_copies(bs_center_templates *hi, bs_center_templates *lo, double max_cos, double majority,
                             double min_norm)
{
    int D = lo->n_chans * lo->n_pcs;
    for (int j = 0; j < lo->n_clusters; j++) {
        const float *a = lo->feat + (int64_t)j * D;
        double na = 0;
        for (int d = 0; d < D; d++)
            na += (double)a[d] * a[d];
        for (int i = 0; i < hi->n_clusters && lo->n_spikes[j] > 0; i++) {
            const float *b = hi->feat + (int64_t)i * D;
            double ab = 0, nb = 0;
            for (int d = 0; d < D; d++)
                ab += (double)a[d] * b[d], nb += (double)b[d] * b[d];
            if (!(na > 0 && nb > 0 && ab >= max_cos * sqrt(na * nb)))
                continue;
            if (majority > 0 && (double)lo->n_spikes[j] >= majority * (double)hi->n_spikes[i] &&
                na >= min_norm * min_norm)
                hi->n_spikes[i] = 0;
            else
                lo->n_spikes[j] = 0;
        }
    }
}

/* Center k: its spikes read back (at most cap, evenly in time) and clustered into *ct (empty for a center
 * without spikes); with two tiers, those scoring at most score_min apart into *lo. Allocates and frees its
 * own buffers, so centers can run at once. */
static bs_status cluster_one(const center_src *c, int k, bs_center_templates *ct, bs_center_templates *lo)
{
    memset(ct, 0, sizeof *ct);
    memset(lo, 0, sizeof *lo);
    int64_t m_all = c->count[k], m = m_all;
    if (m == 0)
        return BS_OK;
    /* a center with more than max_center_spikes spikes is subsampled
     * evenly in time (a parameter: it shapes the result, like the batch):
     * item i*m/cap for i < cap, picked while its index is read in blocks */
    if (c->cap > 0 && m > c->cap)
        m = c->cap;
    int64_t *sel = bs_mem_alloc("sort/center-index", (size_t)m * sizeof *sel);
    int32_t *pos_of = bs_mem_alloc("sort/center-index", (size_t)m * sizeof *pos_of);
    center_item *items = bs_mem_alloc("sort/center-index", CENTER_READ * sizeof *items);
    bs_status st = sel && pos_of && items ? BS_OK : BS_ERR_MEMORY;
    int64_t want = 0;
    for (int64_t s0 = 0; s0 < m_all && st == BS_OK && want < m; s0 += CENTER_READ) {
        int64_t n = m_all - s0 < CENTER_READ ? m_all - s0 : CENTER_READ;
        st = bs_bucket_read(c->bk, k, s0, n, items);
        while (st == BS_OK && want < m) {
            int64_t j = m == m_all ? want : (int64_t)((double)want * (double)m_all / (double)m);
            if (j >= s0 + n)
                break;
            sel[want] = items[j - s0].i;
            pos_of[want++] = items[j - s0].pos;
        }
    }
    bs_mem_free(items);
    int64_t nh = m;
    if (st == BS_OK && c->score_min > 0) {
        /* two tiers: a stable partition of the spikes, those scoring above score_min (detected in every
           batch) first */
        float *score = bs_mem_alloc("sort/center-index", (size_t)m * sizeof *score);
        int64_t *sel2 = bs_mem_alloc("sort/center-index", (size_t)m * sizeof *sel2);
        int32_t *pos2 = bs_mem_alloc("sort/center-index", (size_t)m * sizeof *pos2);
        st = score && sel2 && pos2 ? bs_npy_rows_gather(c->r_score, sel, m, score) : BS_ERR_MEMORY;
        if (st == BS_OK) {
            nh = 0;
            for (int64_t i = 0; i < m; i++)
                nh += score[i] > c->score_min;
            for (int64_t i = 0, a = 0, b = nh; i < m; i++) {
                int64_t to = score[i] > c->score_min ? a++ : b++;
                sel2[to] = sel[i];
                pos2[to] = pos_of[i];
            }
            memcpy(sel, sel2, (size_t)m * sizeof *sel);
            memcpy(pos_of, pos2, (size_t)m * sizeof *pos_of);
        }
        bs_mem_free(score);
        bs_mem_free(sel2);
        bs_mem_free(pos2);
    }
    if (st == BS_OK)
        st = cluster_sel(c, c->cp, k, sel, pos_of, nh, ct);
    if (st == BS_OK && nh < m) {
        st = cluster_sel(c, c->cp_low, k, sel + nh, pos_of + nh, m - nh, lo);
        if (st == BS_OK && ct->n_clusters > 0 && lo->n_clusters > 0)
            bs_drop_low_tier_copies(ct, lo, c->max_cos, c->majority, c->majority_min_norm);
    }
    bs_mem_free(sel);
    bs_mem_free(pos_of);
    return st;
}

/* Clusters a center of m clustered spikes (after the cap) can make, at most: one when it is too small
 * to cluster, else no more than the initialisation's (the sweeps and splits only merge and regroup them)
 * nor than its spikes. */
static int64_t center_clusters_max(int64_t m, const bs_cluster_params *cp)
{
    if (m == 0)
        return 0;
    if (m < cp->min_spikes || m < 2)
        return 1;
    int64_t l = cp->n_init > 1 ? cp->n_init : 1;
    return l < m ? l : m;
}

/* Per spatial center, read its detected spikes back from disk, cluster them,
 * and keep every cluster that passes the acceptance rule as a template. */
static bs_status cluster_templates(bs_run_ctx *ctx)
{
    const bs_probe *probe = &ctx->rec->probe;
    const bs_temporal_basis *basis = &ctx->basis;
    const bs_detect_grid *grid = &ctx->grid;
    bs_sort_plan *plan = ctx->plan;
    bs_learned_templates *lt = &ctx->lt;
    const bs_cluster_params cp = plan->cp;
    char dir[4200];
    BS_TRY(bs_path_join(dir, sizeof dir, ctx->stage_dir, "detect"));
    bs_cluster_centers centers = {0};
    bs_npy_rows r_t, r_pos, r_feat, r_score;
    memset(&r_t, 0, sizeof r_t);
    memset(&r_pos, 0, sizeof r_pos);
    memset(&r_feat, 0, sizeof r_feat);
    memset(&r_score, 0, sizeof r_score);
    r_t.fd = r_pos.fd = r_feat.fd = r_score.fd = -1;
    bs_bucket_file bk = {.fd = -1};
    int64_t *count = NULL;
    int32_t *spos = NULL;
    bs_status st = bs_centers_build(probe, grid, &cp, &centers);
    if (st == BS_OK)
        st = bs_npy_rows_open(&r_t, dir, "spike_times.npy", BS_NPY_I64);
    if (st == BS_OK)
        st = bs_npy_rows_open(&r_pos, dir, "spike_pos.npy", BS_NPY_I32);
    if (st == BS_OK)
        st = bs_npy_rows_open(&r_feat, dir, "spike_features.npy", BS_NPY_F32);
    if (st == BS_OK && bs_detect_low_tier(&ctx->p->detect))
        st = bs_npy_rows_open(&r_score, dir, "spike_score.npy", BS_NPY_F32);
    int64_t n = st == BS_OK ? r_pos.h.shape[0] : 0, cap = ctx->p->max_center_spikes;
    if (st == BS_OK) { /* spike indices grouped by center on disk (in time order within a center) */
        count = bs_mem_calloc("sort/center-index", (size_t)centers.n_centers + 1, sizeof *count);
        spos = bs_mem_alloc("sort/center-index", CENTER_READ * sizeof *spos);
        st = count && spos ? BS_OK : BS_ERR_MEMORY;
        for (int64_t s0 = 0; s0 < n && st == BS_OK; s0 += CENTER_READ) {
            int64_t c = n - s0 < CENTER_READ ? n - s0 : CENTER_READ;
            st = bs_npy_rows_read(&r_pos, s0, c, spos);
            for (int64_t i = 0; i < c && st == BS_OK; i++)
                count[centers.pos_center[spos[i]]]++;
        }
        char path[4200], cdir[4200];
        if (st == BS_OK)
            st = bs_path_join(cdir, sizeof cdir, ctx->stage_dir, "cluster");
        if (st == BS_OK)
            st = bs_mkdir_p(cdir);
        if (st == BS_OK)
            st = bs_path_join(path, sizeof path, cdir, "center_index.bin");
        if (st == BS_OK)
            st = bs_bucket_open(&bk, path, centers.n_centers, count, sizeof(center_item), (size_t)4 << 20);
        for (int64_t s0 = 0; s0 < n && st == BS_OK; s0 += CENTER_READ) {
            int64_t c = n - s0 < CENTER_READ ? n - s0 : CENTER_READ;
            st = bs_npy_rows_read(&r_pos, s0, c, spos);
            for (int64_t i = 0; i < c && st == BS_OK; i++) {
                center_item it = {s0 + i, spos[i], 0};
                st = bs_bucket_add(&bk, centers.pos_center[spos[i]], &it);
            }
        }
        if (st == BS_OK)
            st = bs_bucket_finish(&bk);
    }
    if (st == BS_OK) { /* the real counts: re-plan this stage before the centers are read */
        int64_t largest = 0, k_bound = 0, max_l = 0;
        int64_t mts = ctx->p->min_template_spikes; /* the fewest spikes a template is learned from */
        if (ctx->p->small_template_norm > 0 && ctx->p->small_template_spikes < mts)
            mts = ctx->p->small_template_spikes;
        mts = mts > 1 ? mts : 1;
        const int tiers = bs_detect_low_tier(&ctx->p->detect) ? 2 : 1; /* each tier's clusters bounded alike */
        for (int k = 0; k < centers.n_centers; k++) {
            if (count[k] > largest)
                largest = count[k];
            /* each template of a center holds at least mts of its clustered spikes */
            int64_t m = cap > 0 && count[k] > cap ? cap : count[k], l = tiers * center_clusters_max(m, &cp);
            max_l = l > max_l ? l : max_l;
            k_bound += l < m / mts ? l : m / mts;
        }
        bs_sort_plan_detected(plan, ctx->stage, n, largest, k_bound, max_l);
        bs_run_stage_replan(ctx->summary, plan->stage[ctx->stage].peak);
        st = bs_sort_plan_check(plan, ctx->stage);
    }
    lt->n_sup = probe->n_chan < 32 ? probe->n_chan : 32;
    lt->P = basis->n_pcs;
    bs_cluster_params cp_low = cp;
    cp_low.orphan_factor = 0;
    const bs_detect_params *dp = &ctx->p->detect;
    /* the majority rule counts spikes per second of each tier: the low tier's chunks grew apart on a long
       recording (bs_detect_low_stride) */
    const double majority = ctx->p->low_tier_majority * dp->low_stride /
                            bs_detect_low_stride(dp, ctx->rec->n_samples, ctx->rec->fs_hz);
    const center_src src = {&cp, &cp_low, &centers, grid, basis, &bk, &r_t, &r_feat, &r_score, count, cap,
                            bs_detect_low_tier(dp) ? dp->th_universal : 0, ctx->p->low_tier_max_cos, majority,
                            template_norm_floor(ctx->p)};
    int W = plan->cluster_width > 0 ? plan->cluster_width : 1, Q = queue_len(W);
    center_result *res = bs_mem_calloc("sort/center-results", (size_t)Q, sizeof *res);
    if (st == BS_OK && !res)
        st = BS_ERR_MEMORY;
    bs_progress pb;
    bs_progress_start(&pb, "cluster", "centers", ctx->p->quiet ? 0 : centers.n_centers);
    /* waves of Q centers, W clustered at once (each alone: inner loops run on the center's thread when W > 1;
       a thread takes the wave's next center when its own is done, so that one slow center does not hold the
       others), their templates then appended in center order, so the result does not depend on W */
    for (int k0 = 0; k0 < centers.n_centers && st == BS_OK; k0 += Q) {
        int nw = centers.n_centers - k0 < Q ? centers.n_centers - k0 : Q;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nw < W ? nw : W) if (nw > 1 && W > 1)
        for (int w = 0; w < nw; w++) {
            res[w].st = cluster_one(&src, k0 + w, &res[w].ct, &res[w].lo);
            if (res[w].st != BS_OK)
                snprintf(res[w].msg, sizeof res[w].msg, "%s", bs_last_error());
        }
        for (int w = 0; w < nw; w++) {
            if (st == BS_OK && res[w].st != BS_OK)
                st = bs_error(res[w].st, "%s", res[w].msg);
            /* a cluster too small, or whose mean waveform is well under the matching threshold (its matched
               spikes would be mostly noise crossings that the template happens to fit), makes no template;
               the high tier's clusters first, then the low tier's */
            for (int tier = 0; tier < 2; tier++) {
                const bs_center_templates *ct = tier ? &res[w].lo : &res[w].ct;
                for (int j = 0; j < ct->n_clusters && st == BS_OK; j++)
                    if (makes_template(ctx->p, ct, j, lt->P))
                        st = append_template(lt, probe, ct, j, tier);
            }
            bs_center_templates_free(&res[w].ct);
            bs_center_templates_free(&res[w].lo);
            bs_progress_update(&pb, k0 + w + 1);
            bs_checkpoint_test_kill("cluster", k0 + w + 1);
        }
    }
    bs_mem_free(res);
    bs_progress_finish(&pb);
    if (st == BS_OK && lt->K == 0)
        st = bs_error(BS_ERR_INPUT,
                      "%s: no unit with at least %d spikes and a mean waveform of norm >= %g was found "
                      "(%lld spikes detected)",
                      ctx->rec->data_path, ctx->p->min_template_spikes,
                      ctx->p->min_template_norm * ctx->p->match_threshold, (long long)n);
    bs_mem_free(count);
    bs_mem_free(spos);
    bs_bucket_close(&bk);
    bs_npy_rows_close(&r_t);
    bs_npy_rows_close(&r_pos);
    bs_npy_rows_close(&r_feat);
    bs_npy_rows_close(&r_score);
    bs_centers_free(&centers);
    return st;
}

/* W centers at a time (cluster_width: as many as threads allow and the
 * budget holds, at least one), each with its spikes' rows and the graph
 * clustering of the largest center (capped), the clusters of a wave of
 * queue_len(W) centers, plus the index of every detected spike. */
static void plan(bs_sort_plan *pl, bs_plan_stage *s)
{
    int64_t m = pl->center_spikes, cap = pl->p.max_center_spikes;
    if (cap > 0 && m > cap)
        m = cap;
    size_t staging = bs_bucket_bytes(pl->n_centers, 16, (size_t)4 << 20) + (size_t)CENTER_READ * sizeof(int32_t);
    size_t rows = (size_t)m * ((size_t)pl->feat_len * sizeof(float) + sizeof(bs_detected_spike) + 8 + 4 + 8 + 4) +
                  (size_t)CENTER_READ * sizeof(center_item);
    size_t graph = bs_cluster_center_bytes(m, pl->center_chans, pl->n_pc, &pl->cp);
    /* a center's clusters (bs_center_templates: mean features and waveform per channel), and the templates
       of every center: their bounds from the centers' spike counts (the initialisation's count before them) */
    size_t result = (size_t)pl->cluster_max_l * ((size_t)pl->center_chans * (pl->n_pc + (size_t)pl->nt) * sizeof(float) + 32) +
                    sizeof(center_result);
    size_t templates = (size_t)pl->cluster_k_bound * (pl->n_sup * (4 + (size_t)pl->n_pc * 4) + sizeof(int64_t));
    /* the sum-template check after clustering (drop_sum_templates): the templates as the matcher holds them, the
       pair table's neighbour lists, a row of every neighbour per thread (at most K) and the fits */
    size_t sums = pl->p.sum.max_resid <= 0 && pl->p.sum.max_copy_resid <= 0
                      ? 0
                      : bs_match_templates_bytes(pl->nt, pl->n_pc, pl->K, pl->n_sup) +
                            bs_pair_table_bytes(pl->K, pl->pair_nnz, pl->nt, BS_PAIR_ON_THE_FLY) +
                            bs_sum_templates_ws_bytes(pl->K, pl->nt, pl->n_threads) +
                            (size_t)pl->K * (sizeof(bs_sum_fit) + 1);
    size_t fixed = pl->cluster_fixed + staging + templates + sums + BS_PLAN_SMALL_BYTES, per = rows + graph;
    int W = pl->n_threads < pl->n_centers ? pl->n_threads : pl->n_centers;
    while (W > 1 && pl->budget && fixed + (size_t)W * per + (size_t)queue_len(W) * result > pl->budget)
        W--;
    W = W < 1 ? 1 : W;
    pl->cluster_width = W;
    bs_plan_add(s, "batch reader, grid, centers", pl->cluster_fixed);
    bs_plan_add(s, "center index staging (index on disk)", staging);
    bs_plan_add(s, "centers at once (the strategy's count): spikes and features", (size_t)W * rows);
    bs_plan_add(s, "centers at once: graph clustering", (size_t)W * graph);
    bs_plan_add(s, "a wave of centers' clusters", (size_t)queue_len(W) * result);
    bs_plan_add(s, "templates so far", templates);
    bs_plan_add(s, "sum-template check (matcher's templates, neighbour lists, fits)", sums);
    bs_plan_add(s, "small buffers", BS_PLAN_SMALL_BYTES);
    snprintf(s->strategy, sizeof s->strategy, "%d center%s at a time, <= %lld spikes", W, W > 1 ? "s" : "",
             (long long)cap);
    s->peak = bs_plan_sum(s);
    s->min_peak = fixed + per + result;
    s->sure_min = pl->spikes_assumed ? pl->cluster_fixed + staging : s->min_peak;
    s->reduce = "--max-center-spikes";
    /* center_index.bin (every detected spike), then files[]: supports, low-rank templates, spike counts, tiers */
    bs_plan_disk(s, 5, (double)pl->n_detected * sizeof(center_item) +
                           (double)pl->cluster_k_bound * (pl->n_sup * (sizeof(int32_t) + (double)pl->n_pc * sizeof(float)) +
                                            sizeof(int64_t) + 1));
}

/* Templates that are the sum of two others at some lags, or a copy of one (sum_templates.h), are removed: the
 * matcher then peels their spikes as the pair, or with the one. The remaining templates keep their order. */
static bs_status drop_sum_templates(bs_run_ctx *ctx)
{
    bs_learned_templates *lt = &ctx->lt;
    const bs_detect_params *d = &ctx->p->detect;
    if ((ctx->p->sum.max_resid <= 0 && ctx->p->sum.max_copy_resid <= 0) || lt->K < 2)
        return BS_OK;
    bs_match_templates mt = {0};
    bs_pair_table pt = {0};
    bs_sum_fit *fit = NULL;
    uint8_t *drop = NULL;
    bs_status st = bs_match_templates_create("learned templates", ctx->rec->probe.n_chan, d->nt, d->nt_before,
                                             ctx->basis.n_pcs, ctx->basis.wpca, lt->K, lt->n_sup, lt->support, lt->U,
                                             &mt);
    if (st == BS_OK)
        st = bs_pair_table_build(&mt, BS_PAIR_ON_THE_FLY, &pt);
    if (st == BS_OK) {
        fit = bs_mem_alloc("sort/sum-templates", (size_t)lt->K * sizeof *fit);
        drop = bs_mem_alloc("sort/sum-templates", (size_t)lt->K);
        st = fit && drop ? BS_OK : BS_ERR_MEMORY;
    }
    if (st == BS_OK)
        st = bs_sum_templates_fit(&mt, &pt, (int)bs_seconds_to_samples(ctx->p->sum.min_lag_ms * 1e-3, ctx->rec->fs_hz),
                                  ctx->n_threads, fit);
    int n_drop = st == BS_OK ? bs_sum_templates_select(&mt, fit, &ctx->p->sum, drop) : 0;
    if (n_drop < 0)
        st = BS_ERR_MEMORY;
    for (int k = 0, shown = 0; k < (st == BS_OK && !ctx->p->quiet ? lt->K : 0) && shown < 10; k++) {
        const bs_sum_fit *f = &fit[k];
        shown += drop[k] != BS_SUM_KEEP; /* the first 10 in the log; the count below */
        if (drop[k] == BS_SUM_SUM)
            bs_log_info("template %d: the sum of %d (lag %d, weight %.3f) and %d (lag %d, %.3f) leaves %.3f of its "
                        "norm, %d alone %.3f; mean amplitudes %.2f, %.2f, %.2f: removed",
                        k, f->a, f->la, f->wa, f->b, f->lb, f->wb, f->r2, f->a1, f->r1, mt.norm_in[k],
                        mt.norm_in[f->a], mt.norm_in[f->b]);
        else if (drop[k] == BS_SUM_COPY)
            bs_log_info("template %d: a copy of %d (lag %d, weight %.3f) leaves %.3f of its norm; mean amplitudes "
                        "%.2f, %.2f: removed",
                        k, f->a1, f->l1, f->w1, f->r1, mt.norm_in[k], mt.norm_in[f->a1]);
    }
    if (st == BS_OK && n_drop > 0) {
        int K = 0, n_sum = 0;
        const size_t ns = (size_t)lt->n_sup, nu = ns * (size_t)lt->P;
        for (int k = 0; k < lt->K; k++) {
            n_sum += drop[k] == BS_SUM_SUM;
            if (drop[k])
                continue;
            memmove(lt->support + (size_t)K * ns, lt->support + (size_t)k * ns, ns * sizeof *lt->support);
            memmove(lt->U + (size_t)K * nu, lt->U + (size_t)k * nu, nu * sizeof *lt->U);
            lt->n_spikes[K] = lt->n_spikes[k];
            if (lt->low_tier)
                lt->low_tier[K] = lt->low_tier[k];
            K++;
        }
        if (!ctx->p->quiet)
            bs_log_info("removed %d templates that are the sum of two others and %d copies of one (%d left)", n_sum,
                        n_drop - n_sum, K);
        lt->K = K;
    }
    bs_mem_free(fit);
    bs_mem_free(drop);
    bs_pair_table_free(&pt);
    bs_match_templates_free(&mt);
    return st;
}

static bs_status run(bs_run_ctx *c)
{
    BS_TRY(cluster_templates(c));
    if (c->p->sum.max_resid > 0 || c->p->sum.max_copy_resid > 0) {
        /* the sum-template check's buffers grow with K and its pairs: re-plan with the real counts */
        const bs_learned_templates *lt = &c->lt;
        int64_t nnz = bs_pair_count(lt->K, lt->n_sup, lt->support, c->rec->probe.n_chan);
        size_t before = c->plan->stage[c->stage].peak; /* the clustering's own peak is past, with its width */
        bs_sort_plan_update(c->plan, c->stage, lt->K, nnz, -1);
        size_t after = c->plan->stage[c->stage].peak;
        bs_run_stage_replan(c->summary, after > before ? after : before);
        BS_TRY(bs_sort_plan_check(c->plan, c->stage));
    }
    BS_TRY(drop_sum_templates(c));
    if (bs_detect_low_tier(&c->p->detect) && !c->p->quiet) {
        int n_lo = 0;
        for (int k = 0; k < c->lt.K; k++)
            n_lo += c->lt.low_tier[k];
        bs_log_info("cluster: %d of %d templates from the low tier (detections scoring %g-%g)", n_lo, c->lt.K,
                    (double)c->p->detect.th_low, (double)c->p->detect.th_universal);
    }
    return store_templates(c->stage_dir, &c->lt);
}

static bs_status load(bs_run_ctx *c)
{
    return load_templates(c->stage_dir, c->rec->probe.n_chan, c->p->detect.n_pcs, &c->lt);
}

static const char *const params[] = {"detect", "cluster", "match", NULL};

const bs_stage bs_cluster_stage = {
    .name = "cluster", .plan = plan, .run = run, .load = load, .files = files, .n_files = 4, .params = params};
