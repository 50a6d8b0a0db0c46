/*
 * stage_finish.c - merges, duplicates, labels and the Phy folder in bounded memory
 * (see stage_finish.h).
 */
#include "stage_finish.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "../common/fileio.h"
#include "../common/log.h"
#include "../common/select.h"
#include "../common/samples.h"
#include "../export/phy.h"
#include "../mem/mem.h"
#include "../common/progress.h"
#include "../pipeline/stage.h"
#include "../pipeline/stages.h"
#include "../pipeline/stage_io.h"

#define READ_BLOCK 16384               /* spikes per read of the match files */
#define OUT_BLOCK 8192                 /* spikes per block handed to the Phy writer */
#define TRAIN_BUF_BYTES ((size_t)8 << 20) /* all per-template write buffers together */
#define NOISE_BLOCK 4096                  /* amplitudes read at once by the noise-unit test */
#define TSHADOW_ROUNDS 3               /* rounds of template shadows before the merges, at most */

typedef struct {
    int64_t t, i; /* sample, spike index in the match files */
} tpair;

/* ------------------------------------------------------------ disk trains */

typedef struct {
    bs_bucket_file tr;      /* trains.bin: (time, index) grouped by template */
    int fd_mg;              /* merged.bin: merged trains, appended */
    char path_mg[4200];
    int K;
    int64_t *moff;          /* [K] entry of k's merged train in merged.bin, -1: not merged */
    int64_t *len;           /* [K] entries of k's current train */
    int64_t mend;           /* entries in merged.bin */
    tpair *rd[2];           /* read buffers of the two slots */
    int64_t *t[2], *ix[2];
    int64_t cap[2];
} disk_store;

/* Template k's train stored at moff (-1: its bucket in trains.bin) with m
 * spikes, read into slot. */
static bs_status store_read(disk_store *d, int k, int64_t moff, int64_t m, int slot, const int64_t **t,
                            const int64_t **idx, int64_t *n)
{
    if (m > d->cap[slot]) {
        bs_mem_free(d->rd[slot]), bs_mem_free(d->t[slot]), bs_mem_free(d->ix[slot]);
        d->rd[slot] = bs_mem_alloc("finish/train", (size_t)m * sizeof(tpair));
        d->t[slot] = bs_mem_alloc("finish/train", (size_t)m * sizeof(int64_t));
        d->ix[slot] = bs_mem_alloc("finish/train", (size_t)m * sizeof(int64_t));
        d->cap[slot] = d->rd[slot] && d->t[slot] && d->ix[slot] ? m : 0;
        if (!d->cap[slot])
            return BS_ERR_MEMORY;
    }
    if (moff < 0) {
        BS_TRY(bs_bucket_read(&d->tr, k, 0, m, d->rd[slot]));
    } else if (m && bs_pread_all(d->fd_mg, d->rd[slot], (size_t)m * sizeof(tpair),
                                 (off_t)(moff * (int64_t)sizeof(tpair))) != 0) {
        return bs_error(BS_ERR_INPUT, "%s: cannot read a merged spike train: %s", d->path_mg,
                        errno ? strerror(errno) : "unexpected end of file");
    }
    for (int64_t i = 0; i < m; i++) {
        d->t[slot][i] = d->rd[slot][i].t;
        d->ix[slot][i] = d->rd[slot][i].i;
    }
    *t = d->t[slot];
    *idx = d->ix[slot];
    *n = m;
    return BS_OK;
}

/* Template k's current train, read into slot (the merges' train store get). */
static bs_status store_get(void *ctx, int k, int slot, const int64_t **t, const int64_t **idx, int64_t *n)
{
    disk_store *d = ctx;
    return store_read(d, k, d->moff[k], d->len[k], slot, t, idx, n);
}

/* Append a train to merged.bin as template k's. */
static bs_status store_write(disk_store *d, int k, const int64_t *t, const int64_t *idx, int64_t n)
{
    enum { CHUNK = 4096 };
    tpair buf[CHUNK];
    for (int64_t s = 0; s < n; s += CHUNK) {
        int64_t c = n - s < CHUNK ? n - s : CHUNK;
        for (int64_t i = 0; i < c; i++)
            buf[i] = (tpair){t[s + i], idx[s + i]};
        if (bs_pwrite_all(d->fd_mg, buf, (size_t)c * sizeof(tpair), (off_t)((d->mend + s) * (int64_t)sizeof(tpair))) != 0)
            return bs_error(BS_ERR_IO, "%s: cannot write a merged spike train: %s", d->path_mg, strerror(errno));
    }
    d->moff[k] = d->mend;
    d->len[k] = n;
    d->mend += n;
    return BS_OK;
}

static bs_status store_put(void *ctx, int k, int j, const int64_t *t, const int64_t *idx, int64_t n)
{
    disk_store *d = ctx;
    BS_TRY(store_write(d, k, t, idx, n));
    d->len[j] = 0;
    return BS_OK;
}

static int64_t store_count(void *ctx, int k) { return ((disk_store *)ctx)->len[k]; }

static void store_close(disk_store *d)
{
    bs_bucket_close(&d->tr);
    if (d->fd_mg >= 0)
        close(d->fd_mg);
    bs_mem_free(d->moff), bs_mem_free(d->len);
    for (int s = 0; s < 2; s++)
        bs_mem_free(d->rd[s]), bs_mem_free(d->t[s]), bs_mem_free(d->ix[s]);
    memset(d, 0, sizeof *d);
    d->tr.fd = d->fd_mg = -1;
}

/* Group the matched spikes by template into trains.bin: count (and sum each
 * template's amplitudes, in file order, into amp[K] as means), then fill. */
static bs_status store_build(disk_store *d, const char *dir, int K, const bs_npy_rows *r_t, const bs_npy_rows *r_k,
                             const bs_npy_rows *r_a, double *amp)
{
    int64_t n = r_t->h.shape[0];
    d->K = K;
    d->moff = bs_mem_alloc("finish/trains", (size_t)(2 * K) * sizeof(int64_t)); /* 2K: room for the splits */
    d->len = bs_mem_calloc("finish/trains", (size_t)(2 * K), sizeof(int64_t));
    int64_t *bt = bs_mem_alloc("finish/read", READ_BLOCK * sizeof(int64_t));
    int32_t *bk = bs_mem_alloc("finish/read", READ_BLOCK * sizeof(int32_t));
    float *ba = bs_mem_alloc("finish/read", READ_BLOCK * sizeof(float));
    bs_status st = d->moff && d->len && bt && bk && ba ? BS_OK : BS_ERR_MEMORY;
    for (int k = 0; k < K; k++)
        amp[k] = 0;
    char path[4200];
    if (st == BS_OK)
        st = bs_path_join(d->path_mg, sizeof d->path_mg, dir, "merged.bin");
    if (st == BS_OK)
        st = bs_path_join(path, sizeof path, dir, "trains.bin");
    if (st == BS_OK) {
        d->fd_mg = open(d->path_mg, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (d->fd_mg < 0)
            st = bs_error(BS_ERR_INPUT, "%s: cannot create: %s", d->path_mg, strerror(errno));
    }
    for (int64_t s0 = 0; s0 < n && st == BS_OK; s0 += READ_BLOCK) { /* counts */
        int64_t c = n - s0 < READ_BLOCK ? n - s0 : READ_BLOCK;
        st = bs_npy_rows_read(r_k, s0, c, bk);
        if (st == BS_OK)
            st = bs_npy_rows_read(r_a, s0, c, ba);
        for (int64_t i = 0; i < c && st == BS_OK; i++) {
            if (bk[i] < 0 || bk[i] >= K) {
                st = bs_error(BS_ERR_INTERNAL, "%s: spike %lld has template %d, expected 0..%d", r_k->path,
                              (long long)(s0 + i), bk[i], K - 1);
            } else {
                d->len[bk[i]]++;
                amp[bk[i]] += ba[i];
            }
        }
    }
    for (int k = 0; k < K && st == BS_OK; k++)
        if (d->len[k])
            amp[k] /= (double)d->len[k];
    if (st == BS_OK)
        st = bs_bucket_open(&d->tr, path, K, d->len, sizeof(tpair), TRAIN_BUF_BYTES);
    for (int64_t s0 = 0; s0 < n && st == BS_OK; s0 += READ_BLOCK) { /* fill */
        int64_t c = n - s0 < READ_BLOCK ? n - s0 : READ_BLOCK;
        st = bs_npy_rows_read(r_k, s0, c, bk);
        if (st == BS_OK)
            st = bs_npy_rows_read(r_t, s0, c, bt);
        for (int64_t i = 0; i < c && st == BS_OK; i++) {
            tpair e = {bt[i], s0 + i};
            st = bs_bucket_add(&d->tr, bk[i], &e);
        }
    }
    if (st == BS_OK)
        st = bs_bucket_finish(&d->tr);
    for (int k = 0; k < 2 * K && d->moff; k++)
        d->moff[k] = -1;
    bs_mem_free(bt), bs_mem_free(bk), bs_mem_free(ba);
    return st;
}

/* ------------------------------------------------------------ amplitude and feature splits */

/* Splits along one path of templates: a spike's train is cut at most this
 * often (a matching template by amplitude or features, then each part once
 * more by features), so each spike is rewritten at most twice. */
#define SPLIT_DEPTH 2

/* The mean features (D) of the n spikes' (features f, n × D) part whose value
 * x[i] is under thr (high = 0) or at or over it (high = 1); returns its
 * squared norm. The part is not empty. */
static double part_mean(const float *f, int D, const float *x, int64_t n, float thr, int high, float *mean)
{
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        m += (x[i] >= thr) == high;
    double norm2 = 0;
    for (int q = 0; q < D; q++) {
        double acc = 0;
        for (int64_t i = 0; i < n; i++)
            acc += (x[i] >= thr) == high ? f[(size_t)i * D + q] : 0;
        mean[q] = (float)(acc / (double)m);
        norm2 += (double)mean[q] * mean[q];
    }
    return norm2;
}

/* An amplitude cut at thr of the n spikes (amplitudes a, features f, n × D)
 * refined by their features: the axis v (D, unit norm) from the low part's
 * mean features to the high part's, each spike's projection px[i] on it
 * (bs_feature_projection), cut at the midpoint of the two means'
 * projections. Two cells' spikes on one template differ in shape as well as
 * size, and the amplitudes of the two overlap where the features do not.
 * As a feature split's, the axis is turned so that the smaller side lies
 * under the cut (*cut); fmean (D) gets that side's mean features. Returns 0
 * (nothing set but scratch) when a side would hold fewer than min_spikes.
 * m: 2D doubles of scratch. */
static int refine_cut(const float *a, float thr, const float *f, int D, int64_t n, int64_t min_spikes, double *m,
                      float *v, float *px, float *cut, float *fmean)
{
    double *mlo = m, *mhi = m + D, nv = 0, plo = 0, phi = 0;
    int64_t nlo = 0;
    for (int q = 0; q < 2 * D; q++)
        m[q] = 0;
    for (int64_t i = 0; i < n; i++) {
        double *mu = a[i] < thr ? mlo : mhi;
        nlo += a[i] < thr;
        for (int q = 0; q < D; q++)
            mu[q] += f[(size_t)i * D + q];
    }
    if (nlo < 1 || nlo >= n)
        return 0;
    for (int q = 0; q < D; q++) {
        mlo[q] /= (double)nlo, mhi[q] /= (double)(n - nlo);
        nv += (mhi[q] - mlo[q]) * (mhi[q] - mlo[q]);
    }
    if (!(nv > 0))
        return 0;
    for (int q = 0; q < D; q++) {
        v[q] = (float)((mhi[q] - mlo[q]) / sqrt(nv));
        plo += mlo[q] * v[q], phi += mhi[q] * v[q];
    }
    float c = (float)(0.5 * (plo + phi));
    int64_t nl = 0;
    for (int64_t i = 0; i < n; i++) {
        px[i] = bs_feature_projection(f + (size_t)i * D, v, D);
        nl += px[i] < c;
    }
    if (nl > n - nl) { /* the smaller side under the cut: the axis turned round (negation is exact) */
        for (int q = 0; q < D; q++)
            v[q] = -v[q];
        for (int64_t i = 0; i < n; i++)
            px[i] = -px[i];
        c = nextafterf(-c, INFINITY); /* px >= c  <=>  -px < next float above -c */
        nl = n - nl;
    }
    if (nl < min_spikes || n - nl < min_spikes)
        return 0;
    part_mean(f, D, px, n, c, 0, fmean);
    *cut = c;
    return 1;
}

/* Each template's train, in order of template (those made by splits after
 * the K matching ones, so they are tested too), is cut while its spikes have
 * been cut fewer than SPLIT_DEPTH times (depth[k]): a matching template's
 * untouched train (with its spikes' amplitudes) first through bs_amp_split,
 * and when that finds no split, and for every later cut, (with its spikes' pc
 * features, D = n_pcs × n_pc_chan per spike) through bs_feature_split. A cut
 * adds rule r to R: the spikes under the cut become template j = K + r, the
 * others stay, both trains rewritten to merged.bin; amp[k] and amp[j] become
 * the parts' mean amplitudes, matching[j] = matching[k]. A feature split
 * is not made when its split-off part's mean spike, the norm of its mean
 * features (fmean[r], the template's waveform later), is under the low-part
 * bound min_low_amp: matched noise crossings average to about the template's
 * shape at their amplitude, while another unit's spikes keep their own.
 * An amplitude cut whose high part is the smaller makes that part template j
 * instead (a kind 2 rule, fmean[r] its mean features). A noise cut (bs_amp_split
 * returned 2; not on a low-tier template, low_tier[matching[k]]) is made when
 * no feature split takes the train, at any depth: its low part j is flagged
 * (noise_part[j] = 1) and cut no further. *K1 = K + R->n (*n_feat cuts by
 * features); d->moff, d->len, *amp, matching, depth and noise_part grow to K1
 * (capacity 2K, reserved by the caller; splitting stops at K cuts). A train
 * longer than max_train (the merges' bound, which the plan holds) is not cut. */
static bs_status split_templates(disk_store *d, const bs_npy_rows *r_a, const bs_npy_rows *r_f, int D,
                                 const bs_split_params *sp, const uint8_t *low_tier, int64_t max_train, double *amp,
                                 bs_split_rules *R, int32_t *matching, uint8_t *depth, uint8_t *noise_part, int *K1,
                                 int *n_feat)
{
    int64_t cap = 0;
    float *a = NULL, *f = NULL, *px = NULL, *v = bs_mem_alloc("finish/split", (size_t)(D > 0 ? D : 1) * sizeof *v);
    void *work = NULL;
    int64_t *lt = NULL, *li = NULL;
    bs_status st = v ? BS_OK : BS_ERR_MEMORY;
    int feat = sp->feature_min_dprime > 0, K = R->K;
    bs_split_params spa = *sp; /* a smaller high part gets its own waveform when features are read */
    spa.high_own = feat;
    *K1 = K;
    *n_feat = 0;
    bs_split_rules_clear(R);
    for (int k = 0; k < K; k++)
        matching[k] = k, depth[k] = 0, noise_part[k] = 0;
    for (int k = 0; k < *K1 && st == BS_OK; k++) {
        while (depth[k] < SPLIT_DEPTH && R->n < K && st == BS_OK) {
            const int64_t *t, *ix;
            int64_t n;
            if (d->len[k] < 2 * sp->min_spikes || d->len[k] > max_train)
                break;
            if ((st = store_get(d, k, 0, &t, &ix, &n)) != BS_OK)
                break;
            if (n > cap) {
                bs_mem_free(a), bs_mem_free(work), bs_mem_free(lt), bs_mem_free(li), bs_mem_free(f), bs_mem_free(px);
                size_t wb = n * bs_split_bytes_per_spike();
                if (feat && bs_feature_split_bytes(n, D) > wb)
                    wb = bs_feature_split_bytes(n, D);
                a = bs_mem_alloc("finish/split", (size_t)n * sizeof *a);
                work = bs_mem_alloc("finish/split", wb);
                lt = bs_mem_alloc("finish/split", (size_t)n * sizeof *lt);
                li = bs_mem_alloc("finish/split", (size_t)n * sizeof *li);
                f = feat ? bs_mem_alloc("finish/split-features", (size_t)n * D * sizeof *f) : NULL;
                px = feat ? bs_mem_alloc("finish/split-features", (size_t)n * sizeof *px) : NULL;
                cap = a && work && lt && li && ((f && px) || !feat) ? n : 0;
                if (!cap) {
                    st = BS_ERR_MEMORY;
                    break;
                }
            }
            if ((st = bs_npy_rows_gather(r_a, ix, n, a)) != BS_OK)
                break;
            float th, *x = a; /* x: the values the cut applies to */
            double dp;
            int kind = 0;
            /* an amplitude cut: any on a matching template's untouched train; later, only a noise cut */
            float th_amp = 0;
            int cut = 0;
            if (depth[k] == 0 && k < K)
                cut = bs_amp_split(&spa, a, t, n, work, &th_amp, &dp);
            else if (sp->noise_cut && !noise_part[k])
                cut = bs_amp_split(&spa, a, t, n, work, &th_amp, &dp) == 2 ? 2 : 0;
            if (cut == 2 && low_tier && low_tier[matching[k]]) /* a low-tier unit's spikes lie under the bound */
                cut = 0;
            th = th_amp;
            if (cut != 1) { /* a feature split before a noise cut: another unit's spikes go apart, not away */
                int split = 0;
                int64_t nl = 0;
                if (feat && (st = bs_npy_rows_gather(r_f, ix, n, f)) == BS_OK)
                    st = bs_feature_split(sp, f, D, t, n, work, v, &th, &nl, &dp, &split);
                if (st != BS_OK)
                    break;
                if (split) {
                    for (int64_t i = 0; i < n; i++)
                        px[i] = bs_feature_projection(f + (size_t)i * D, v, D);
                    /* the split-off part's mean features (its waveform); a noise crossing's size: no split */
                    split = sqrt(part_mean(f, D, px, n, th, 0, R->fmean + (size_t)R->n * D)) >= sp->min_low_amp;
                }
                if (split) {
                    x = px;
                    kind = 1;
                    cut = 1;
                    (*n_feat)++;
                } else if (cut == 2) {
                    th = th_amp;
                } else {
                    break;
                }
            }
            if (cut == 1 && kind == 0 && feat) { /* an amplitude cut, with the spikes' features */
                if ((st = bs_npy_rows_gather(r_f, ix, n, f)) != BS_OK)
                    break;
                float *fm = R->fmean + (size_t)R->n * D;
                if (refine_cut(a, th, f, D, n, sp->min_spikes, (double *)work, v, px, &th, fm)) {
                    x = px, kind = 1; /* refined along the axis between its parts' mean features */
                } else {
                    int64_t nlow = 0;
                    for (int64_t i = 0; i < n; i++)
                        nlow += a[i] < th;
                    if (n - nlow < nlow) { /* the high part, the smaller, goes off with its mean features */
                        kind = 2;
                        part_mean(f, D, a, n, th, 1, fm);
                    }
                }
            }
            int32_t j = bs_split_rules_add(R, k, kind, th, v, D);
            /* a noise cut whose low part holds a bursting unit's later spikes keeps those (bs_split_rule_takes,
               as the walk decides) */
            if (cut == 2 && R->noise)
                R->noise[j - K] = (uint8_t)bs_noise_cut_bursts(t, a, n, th, R->burst_lo, R->burst_hi, R->n_samples,
                                                               sp->burst_min_ratio);
            int64_t nl = 0, nh = 0, last = INT64_MIN;
            double sl = 0, sh = 0;
            for (int64_t i = 0; i < n; i++) /* the part split off first, at the front of lt/li */
                if (bs_split_rule_takes(R, j - K, x[i], t[i], &last))
                    lt[nl] = t[i], li[nl++] = ix[i], sl += a[i];
            st = store_write(d, j, lt, li, nl);
            last = INT64_MIN;
            for (int64_t i = 0; i < n && st == BS_OK; i++) /* then the part kept (t, ix stay valid: slot 0) */
                if (!bs_split_rule_takes(R, j - K, x[i], t[i], &last))
                    lt[nh] = t[i], li[nh++] = ix[i], sh += a[i];
            if (st == BS_OK)
                st = store_write(d, k, lt, li, nh);
            (*K1)++;
            amp[j] = sl / (double)nl;
            amp[k] = sh / (double)nh;
            matching[j] = matching[k];
            depth[j] = ++depth[k];
            noise_part[j] = cut == 2;
            if (cut == 2)
                depth[j] = SPLIT_DEPTH;
        }
    }
    bs_mem_free(a), bs_mem_free(work), bs_mem_free(lt), bs_mem_free(li), bs_mem_free(f), bs_mem_free(px);
    bs_mem_free(v);
    return st;
}

/* ------------------------------------------------------------ ordered stream */

typedef struct {
    int64_t ta, i; /* final time (time + template shift), spike index */
    int32_t k;     /* template (0..K1: after the amplitude and feature splits) */
    float a;       /* amplitude, whitened units */
} rec_t;

static int rec_cmp(const void *x, const void *y)
{
    const rec_t *a = x, *b = y;
    if (a->ta != b->ta)
        return a->ta < b->ta ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

/* Each spike's position (x, y in µm): the centre of mass of its pc_features
 * energy (sum of squares over the temporal components) over its template's
 * pc channels. A spike with no energy gets its template's first pc channel. */
static void spike_positions(const bs_probe *probe, const int32_t *tmpl, const float *feat, int64_t n, int P, int npc,
                            const int32_t *pc_chan, float *xy)
{
    for (int64_t i = 0; i < n; i++) {
        const float *f = feat + (size_t)i * P * npc;
        const int32_t *ch = pc_chan + (size_t)tmpl[i] * npc;
        double sw = 0, sx = 0, sy = 0;
        for (int j = 0; j < npc; j++) {
            double e = 0;
            for (int q = 0; q < P; q++)
                e += (double)f[q * npc + j] * f[q * npc + j];
            sw += e;
            sx += e * probe->x_um[ch[j]];
            sy += e * probe->y_um[ch[j]];
        }
        xy[2 * i] = (float)(sw > 0 ? sx / sw : probe->x_um[ch[0]]);
        xy[2 * i + 1] = (float)(sw > 0 ? sy / sw : probe->y_um[ch[0]]);
    }
}

/* State of the export pass. */
typedef struct {
    const bs_finish_input *in;
    bs_phy_writer *pw;
    const bs_npy_rows *r_a, *r_f;
    int K, K2, P, npc;
    const int32_t *matching; /* [K1] the matching template of each template (itself below K) */
    int n_tf;               /* template features per spike, 0: none */
    const int32_t *tf_ind;  /* [K x n_tf] their templates */
    /* per template (K) and per unit (K2) */
    double *amp_sum; /* [K + K2] */
    int64_t *amp_n;  /* [K + K2] */
    bs_acg_stream *acg; /* [K2] */
    int64_t *last;   /* [K2] last kept sample, -1: none */
    const int32_t *shadow_of; /* [K2] unit whose shadow the unit is, -1: none */
    const int32_t *shadow_lag; /* [K2] its lag, samples (unit time minus the other's) */
    const uint8_t *shadow_whole; /* [K2] 1: a shadow unit with too few spikes left, removed whole */
    const int32_t *collision_of; /* [K2] the neighbour a collision unit was found beside, -1: none */
    const uint8_t *noise;        /* [K2] 1: a noise unit (find_noise_units) */
    const float *pile_cut;       /* [K2] a low-tier unit's spikes under this amplitude are its threshold's
                                    pile of noise crossings (find_noise_units; 0: none) */
    int half_width;  /* shadow lag window half-width, samples */
    /* template shadows, found before the merges (per template, K1) */
    int K1, n_rounds;            /* templates after the splits; rounds of template shadows */
    const int32_t *tshadow_of;   /* [n_rounds x K1] template whose shadow the template is, -1: none */
    const int32_t *tshadow_lag;  /* [n_rounds x K1] its lag, samples (matched time minus the other's) */
    const uint8_t *tshadow_whole; /* [n_rounds x K1] 1: removed whole */
    const int64_t *shift;        /* [K1] each template's time shift onto its unit, samples */
    int64_t smax;                /* largest |shift|, samples */
    int64_t *tlast;              /* [K1] matched time of the template's last spike streamed, INT64_MIN: none */
    /* the block being filled */
    int64_t n_blk, *ts, *ix;
    int32_t *bk, *cs;
    float *ba, *bf, *bxy, *btf;
    int64_t n_out, n_dup, n_shadow, n_collision, n_noise, n_pile, n_blocks;
} export_state;

static bs_status flush_block(export_state *e)
{
    int64_t c = e->n_blk;
    if (!c)
        return BS_OK;
    BS_TRY(bs_npy_rows_gather(e->r_a, e->ix, c, e->ba));
    BS_TRY(bs_npy_rows_gather(e->r_f, e->ix, c, e->bf));
    for (int64_t i = 0; i < c; i++) {
        e->amp_sum[e->bk[i]] += e->ba[i];
        e->amp_n[e->bk[i]]++;
        e->amp_sum[e->K + e->cs[i]] += e->ba[i];
        e->amp_n[e->K + e->cs[i]]++;
        BS_TRY(bs_acg_stream_add(&e->acg[e->cs[i]], e->ts[i], e->in->rec->fs_hz));
    }
    BS_TRY(bs_phy_writer_append_spikes(e->pw, c, e->ts, e->bk, e->cs, e->ba, e->bf));
    spike_positions(&e->in->rec->probe, e->bk, e->bf, c, e->P, e->npc, e->in->pc_chan, e->bxy);
    BS_TRY(bs_phy_writer_append_positions(e->pw, c, e->bxy));
    if (e->n_tf) {
        bs_template_features(e->in->mt, e->in->pc_chan, e->npc, e->tf_ind, e->n_tf, c, e->bk, e->bf, e->btf);
        BS_TRY(bs_phy_writer_append_template_features(e->pw, c, e->btf));
    }
    e->n_out += c;
    e->n_blk = 0;
    bs_checkpoint_test_kill("finish", ++e->n_blocks);
    return BS_OK;
}

/* 1 if a spike of unit a lies in [lo, hi]: the last kept one (a unit does
 * not fire twice within a lag window) or one among the next spikes,
 * next[0..n_next) in final order, inside the recording. */
static int unit_spike_in(const export_state *e, int a, int64_t lo, int64_t hi, const rec_t *next, int64_t n_next,
                         const int32_t *final_id)
{
    if (e->last[a] >= lo && e->last[a] <= hi)
        return 1;
    for (int64_t j = 0; j < n_next && next[j].ta <= hi; j++)
        if (next[j].ta >= lo && next[j].ta >= 0 && next[j].ta < e->in->rec->n_samples && final_id[next[j].k] == a)
            return 1;
    return 0;
}

/* 1 if a spike of template a has its matched time (final time minus the
 * template's shift) in [lo, hi]: the last one streamed or one among next. */
static int template_spike_in(const export_state *e, int a, int64_t lo, int64_t hi, const rec_t *next, int64_t n_next)
{
    if (e->tlast[a] >= lo && e->tlast[a] <= hi)
        return 1;
    for (int64_t j = 0; j < n_next && next[j].ta <= hi + e->smax; j++)
        if (next[j].k == a && next[j].ta - e->shift[a] >= lo && next[j].ta - e->shift[a] <= hi)
            return 1;
    return 0;
}

/* One spike in final order: drop it outside the recording, as a same-unit
 * duplicate or as a shadow of another unit's spike (next: the spikes after
 * it, every one up to its time + the largest shadow lag + half-width), or as
 * a spike of a collision unit (after the other tests, so that it removes the
 * shadows it casts as before), else add it to the block. */
static bs_status emit(export_state *e, const rec_t *r, const rec_t *next, int64_t n_next, const int32_t *final_id,
                      int64_t dup_samples)
{
    int64_t t0 = r->ta - e->shift[r->k]; /* matched time */
    e->tlast[r->k] = t0;
    if (r->ta < 0 || r->ta >= e->in->rec->n_samples)
        return BS_OK;
    for (int q = 0; q < e->n_rounds; q++) {
        size_t x = (size_t)q * e->K1 + r->k;
        int sa = e->tshadow_of[x];
        if (sa >= 0 && (e->tshadow_whole[x] || template_spike_in(e, sa, t0 - e->tshadow_lag[x] - e->half_width,
                                                                 t0 - e->tshadow_lag[x] + e->half_width, next,
                                                                 n_next))) {
            e->n_shadow++;
            return BS_OK;
        }
    }
    int u = final_id[r->k];
    if (e->last[u] >= 0 && r->ta < e->last[u] + dup_samples) {
        e->n_dup++;
        return BS_OK;
    }
    int a = e->shadow_of[u];
    if (a >= 0) {
        int64_t c = r->ta - e->shadow_lag[u];
        if (unit_spike_in(e, a, c - e->half_width, c + e->half_width, next, n_next, final_id)) {
            e->n_shadow++;
            return BS_OK;
        }
        if (e->shadow_whole[u]) {
            e->n_shadow++;
            return BS_OK;
        }
    }
    e->last[u] = r->ta;
    if (e->collision_of[u] >= 0) { /* kept as a unit's spike until here: it still casts its shadows */
        e->n_collision++;
        return BS_OK;
    }
    if (e->noise[u]) { /* the same */
        e->n_noise++;
        return BS_OK;
    }
    if (e->pile_cut[u] > 0 && r->a < e->pile_cut[u]) {
        e->n_pile++;
        return BS_OK;
    }
    int64_t b = e->n_blk++;
    e->ts[b] = r->ta;
    e->ix[b] = r->i;
    e->bk[b] = e->matching[r->k];
    e->cs[b] = u;
    return e->n_blk == OUT_BLOCK ? flush_block(e) : BS_OK;
}

/* Stream the matched spikes in (final time, index) order through emit();
 * each spike's template is where the split rules R send it (bs_split_rules_walk;
 * D features a spike), K1 templates in all. */
static bs_status stream_spikes(export_state *e, const bs_npy_rows *r_t, const bs_npy_rows *r_k, const bs_split_rules *R,
                               int D, int K1, const int64_t *shift, const int32_t *final_id)
{
    int any_feat = 0;
    for (int r = 0; r < R->n; r++)
        any_feat |= R->kind[r] == 1;
    int64_t n = r_t->h.shape[0], smax = 0, ahead = 0;
    for (int k = 0; k < K1; k++)
        smax = llabs(shift[k]) > smax ? llabs(shift[k]) : smax;
    for (int u = 0; u < e->K2; u++)
        if (e->shadow_of[u] >= 0 && -e->shadow_lag[u] + e->half_width > ahead)
            ahead = -e->shadow_lag[u] + e->half_width;
    for (int64_t x = 0; x < (int64_t)e->n_rounds * K1; x++) /* a matched time is its final time within smax */
        if (e->tshadow_of[x] >= 0 && -e->tshadow_lag[x] + e->half_width + 2 * smax > ahead)
            ahead = -e->tshadow_lag[x] + e->half_width + 2 * smax;
    e->smax = smax;
    for (int k = 0; k < K1; k++)
        e->tlast[k] = INT64_MIN;
    int64_t dup = (int64_t)llround(e->in->fp->duplicate_ms * e->in->rec->fs_hz / 1000.0);
    int64_t cap = 2 * READ_BLOCK, len = 0;
    rec_t *buf = bs_mem_alloc("finish/reorder", (size_t)cap * sizeof *buf);
    int64_t *bt = bs_mem_alloc("finish/read", READ_BLOCK * sizeof(int64_t));
    int32_t *bk = bs_mem_alloc("finish/read", READ_BLOCK * sizeof(int32_t));
    float *ba = bs_mem_alloc("finish/read", READ_BLOCK * sizeof(float));
    float *bf = any_feat ? bs_mem_alloc("finish/read", (size_t)READ_BLOCK * D * sizeof(float)) : NULL;
    bs_status st = buf && bt && bk && ba && (bf || !any_feat) ? BS_OK : BS_ERR_MEMORY;
    int64_t prev_t = INT64_MIN;
    for (int64_t s0 = 0; s0 < n && st == BS_OK; s0 += READ_BLOCK) {
        int64_t c = n - s0 < READ_BLOCK ? n - s0 : READ_BLOCK;
        st = bs_npy_rows_read(r_t, s0, c, bt);
        if (st == BS_OK)
            st = bs_npy_rows_read(r_k, s0, c, bk);
        if (st == BS_OK)
            st = bs_npy_rows_read(e->r_a, s0, c, ba);
        if (st == BS_OK && any_feat)
            st = bs_npy_rows_read(e->r_f, s0, c, bf);
        if (st == BS_OK && len + c > cap) {
            while (len + c > cap)
                cap *= 2;
            rec_t *nb = bs_mem_realloc(buf, "finish/reorder", (size_t)cap * sizeof *nb);
            if (!nb)
                st = BS_ERR_MEMORY;
            else
                buf = nb;
        }
        for (int64_t i = 0; i < c && st == BS_OK; i++) {
            if (bt[i] < prev_t)
                st = bs_error(BS_ERR_INTERNAL, "%s: matched spike %lld goes back in time", r_t->path,
                              (long long)(s0 + i));
            prev_t = bt[i];
            int32_t k0 = bk[i];
            int32_t k = bs_split_rules_walk(R, k0, bt[i], ba[i], any_feat ? bf + (size_t)i * D : NULL, D);
            buf[len++] = (rec_t){bt[i] + shift[k], s0 + i, k, ba[i]};
        }
        if (st != BS_OK)
            break;
        qsort(buf, (size_t)len, sizeof *buf, rec_cmp);
        /* every later spike has time >= prev_t, so final time >= prev_t - smax;
         * a spike is emitted once every spike up to `ahead` after it is here */
        int64_t frontier = s0 + c < n ? prev_t - smax - ahead : INT64_MAX, m = 0;
        while (m < len && buf[m].ta < frontier && st == BS_OK) {
            st = emit(e, &buf[m], buf + m + 1, len - m - 1, final_id, dup);
            m++;
        }
        memmove(buf, buf + m, (size_t)(len - m) * sizeof *buf);
        len -= m;
    }
    if (st == BS_OK)
        st = flush_block(e);
    bs_mem_free(buf), bs_mem_free(bt), bs_mem_free(bk), bs_mem_free(ba), bs_mem_free(bf);
    return st;
}

/* ------------------------------------------------------------ shadows */

/* For every unit u (0..K2-1, templates T after the merges): root[u], the template whose train in the store
 * holds all its spikes (-1: none), and peak[u], its channel of largest waveform energy (the smaller channel
 * on ties). */
static void unit_roots_peaks(const disk_store *d, const bs_sparse_templates *T, int K, const int32_t *final_id,
                             int32_t *root, int32_t *peak)
{
    int K2 = T->K, nt = T->nt;
    for (int u = 0; u < K2; u++)
        root[u] = -1;
    for (int k = 0; k < K; k++) /* a unit's spikes are all in its root's train */
        if (d->len[k] > 0)
            root[final_id[k]] = k;
    for (int u = 0; u < K2; u++) {
        double best = -1;
        peak[u] = 0;
        for (int64_t i = T->off[u]; i < T->off[u + 1]; i++) {
            double e = 0;
            for (int q = 0; q < nt; q++)
                e += (double)T->wave[i * nt + q] * T->wave[i * nt + q];
            if (e > best) {
                best = e;
                peak[u] = T->chans[i];
            }
        }
    }
}

/* Units by channel, a counting sort: list[first[c] .. first[c + 1]) are the
 * units u < n, in order, whose channels (chans[off[u] .. off[u + 1]), or
 * without off the one channel chans[u]) include c. first holds n_chan + 1
 * zeros on entry. */
static void units_by_channel(int n, const int64_t *off, const int32_t *chans, int n_chan, int32_t *first,
                             int32_t *list)
{
    for (int64_t i = 0, m = off ? off[n] : n; i < m; i++)
        first[chans[i] + 1]++;
    for (int c = 0; c < n_chan; c++)
        first[c + 1] += first[c];
    for (int u = 0; u < n; u++) /* first[c] advances to c's end ... */
        for (int64_t i = off ? off[u] : u; i < (off ? off[u + 1] : u + 1); i++)
            list[first[chans[i]]++] = u;
    for (int c = n_chan; c > 0; c--) /* ... so shift back by one channel */
        first[c] = first[c - 1];
    first[0] = 0;
}

/* For every unit B (0..K2-1, templates T after the merges, trains in the
 * store under their root template), the unit A with a larger mean amplitude,
 * its peak channel on B's support or B's peak channel on A's support, whose
 * train B shadows
 * (bs_shadow_test), the one with the most shadow spikes: shadow_of[B] = A
 * and shadow_lag[B], or -1; whole[B] = 1 when at most sp->max_rest of B's
 * spikes lie outside that window (B is removed whole). */
static bs_status find_shadows(disk_store *d, const bs_sparse_templates *T, const int32_t *root, const int32_t *peak,
                              const double *amp, int n_chan, int64_t n_samples, const bs_shadow_params *sp,
                              int32_t *shadow_of, int32_t *shadow_lag, uint8_t *whole, int *n_shadowed,
                              int *n_whole)
{
    int K2 = T->K;
    int32_t *by_peak = bs_mem_alloc("finish/shadows", (size_t)(K2 + 1) * sizeof *by_peak); /* units by peak channel */
    int32_t *first = bs_mem_calloc("finish/shadows", (size_t)n_chan + 1, sizeof *first);
    /* units by the channels of their support, and B's support as flags */
    int32_t *by_sup = bs_mem_alloc("finish/shadows", (size_t)T->off[K2] * sizeof *by_sup + 1);
    int32_t *sfirst = bs_mem_calloc("finish/shadows", (size_t)n_chan + 1, sizeof *sfirst);
    uint8_t *on_b = bs_mem_calloc("finish/shadows", (size_t)n_chan, 1);
    bs_status st = by_peak && first && by_sup && sfirst && on_b ? BS_OK : BS_ERR_MEMORY;
    if (st == BS_OK) {
        units_by_channel(K2, NULL, peak, n_chan, first, by_peak);
        units_by_channel(K2, T->off, T->chans, n_chan, sfirst, by_sup);
    }
    *n_shadowed = *n_whole = 0;
    for (int u = 0; u < K2 && st == BS_OK; u++) {
        shadow_of[u] = -1;
        shadow_lag[u] = 0;
        whole[u] = 0;
    }
    for (int b = 0; b < K2 && st == BS_OK; b++) {
        if (root[b] < 0)
            continue;
        const int64_t *tb = NULL, *ib = NULL, *ta = NULL, *ia = NULL;
        int64_t nb = 0, na = 0, best = 0;
        st = store_get(d, root[b], 0, &tb, &ib, &nb);
        for (int64_t i = T->off[b]; i < T->off[b + 1]; i++)
            on_b[T->chans[i]] = 1;
        /* the units peaking on B's support (one support channel after another), then those whose support
         * holds B's peak and that peak elsewhere */
        int64_t n_near = T->off[b + 1] - T->off[b];
        for (int64_t i = 0; i <= n_near && st == BS_OK; i++) {
            int c = i < n_near ? T->chans[T->off[b] + i] : peak[b];
            const int32_t *list = i < n_near ? by_peak + first[c] : by_sup + sfirst[c];
            int32_t n_list = i < n_near ? first[c + 1] - first[c] : sfirst[c + 1] - sfirst[c];
            for (int32_t q = 0; q < n_list && st == BS_OK; q++) {
                int a = list[q];
                if (a == b || root[a] < 0 || !(amp[root[a]] > amp[root[b]]) || (i == n_near && on_b[peak[a]]))
                    continue;
                st = store_get(d, root[a], 1, &ta, &ia, &na);
                int lag;
                int64_t cnt;
                if (st == BS_OK &&
                    bs_shadow_test(sp, ta, na, tb, nb, n_samples, bs_shadow_is_tail(sp, amp[root[a]], amp[root[b]]),
                                   &lag, &cnt) &&
                    cnt > best) {
                    best = cnt;
                    shadow_of[b] = a;
                    shadow_lag[b] = lag;
                }
            }
        }
        for (int64_t i = T->off[b]; i < T->off[b + 1]; i++)
            on_b[T->chans[i]] = 0;
        *n_shadowed += shadow_of[b] >= 0;
        whole[b] = shadow_of[b] >= 0 && nb - best <= sp->max_rest;
        *n_whole += whole[b];
    }
    bs_mem_free(by_peak), bs_mem_free(first), bs_mem_free(by_sup), bs_mem_free(sfirst), bs_mem_free(on_b);
    return st;
}

/* Template shadows (before the merges): every template B that find_shadows
 * made a shadow of template A (of_[B] = A, lag[B]) loses the spikes within
 * ±half_width of an A spike at that lag, or all of them when whole[B], in
 * its train in the store, so that the merges judge refractoriness on the
 * spikes B keeps. A's spikes are those it was matched with (moff0, len0:
 * its train before any template shadow went; the stream tests the same,
 * emit). */
static bs_status drop_template_shadows(disk_store *d, int K1, const int64_t *moff0, const int64_t *len0,
                                       const int32_t *of_, const int32_t *lag, const uint8_t *whole, int half_width)
{
    uint8_t *hit = NULL;
    int64_t *lt = NULL, *li = NULL, cap = 0;
    bs_status st = BS_OK;
    for (int b = 0; b < K1 && st == BS_OK; b++) {
        int a = of_[b];
        if (a < 0)
            continue;
        const int64_t *tb, *ib, *ta, *ia;
        int64_t nb, na;
        st = store_read(d, a, moff0[a], len0[a], 1, &ta, &ia, &na); /* a's matched train */
        if (st == BS_OK)
            st = store_get(d, b, 0, &tb, &ib, &nb);
        if (st != BS_OK)
            break;
        if (nb > cap) {
            bs_mem_free(hit), bs_mem_free(lt), bs_mem_free(li);
            hit = bs_mem_alloc("finish/shadows", (size_t)nb);
            lt = bs_mem_alloc("finish/shadows", (size_t)nb * sizeof *lt);
            li = bs_mem_alloc("finish/shadows", (size_t)nb * sizeof *li);
            cap = hit && lt && li ? nb : 0;
            if (!cap) {
                st = BS_ERR_MEMORY;
                break;
            }
        }
        memset(hit, whole[b], (size_t)nb);
        bs_mark_coincident(tb, nb, ta, na, lag[b], half_width, hit);
        int64_t m = 0;
        for (int64_t i = 0; i < nb; i++)
            if (!hit[i])
                lt[m] = tb[i], li[m++] = ib[i];
        st = store_write(d, b, lt, li, m);
    }
    bs_mem_free(hit), bs_mem_free(lt), bs_mem_free(li);
    return st;
}

/* ------------------------------------------------------------ collisions */

typedef struct {
    int64_t n;
    int u;
} unit_len;

static int unit_len_cmp(const void *x, const void *y)
{
    const unit_len *a = x, *b = y;
    if (a->n != b->n)
        return a->n < b->n ? -1 : 1;
    return (a->u > b->u) - (a->u < b->u);
}

/* Collision units (docs/ALGORITHM.md §9.7), from the fewest spikes up: unit u's spikes that are not shadows
 * (§9.5) coincide within ±window_ms with spikes of its neighbours (units whose peak channel lies within
 * radius_um of u's, other than collision units and u's own shadows) at an excess over chance
 * (bs_collision_excess) of at least min_excess, and a neighbour with template similarity >= r_thresh has at
 * least count_ratio times u's spikes: collision_of[u] = that neighbour (the most similar), else -1. */
static bs_status find_collisions(disk_store *d, const bs_sparse_templates *T, const int32_t *root,
                                 const int32_t *peak, const bs_probe *probe, const int32_t *shadow_of,
                                 const int32_t *shadow_lag, int half_width, int64_t n_samples, double fs_hz,
                                 const bs_collision_params *cp, double r_thresh, int max_lag, int32_t *collision_of,
                                 int *n_collision)
{
    int K2 = T->K;
    *n_collision = 0;
    for (int u = 0; u < K2; u++)
        collision_of[u] = -1;
    if (!(cp->min_excess <= 1.0))
        return BS_OK;
    int64_t w = bs_seconds_to_samples(cp->window_ms * 1e-3, fs_hz), cap = 0;
    double r2 = cp->radius_um * cp->radius_um;
    unit_len *ord = bs_mem_alloc("finish/collisions", (size_t)(K2 + 1) * sizeof *ord);
    uint8_t *shadow = NULL, *hit = NULL;
    if (!ord)
        return BS_ERR_MEMORY;
    for (int u = 0; u < K2; u++)
        ord[u] = (unit_len){root[u] >= 0 ? d->len[root[u]] : 0, u};
    qsort(ord, (size_t)K2, sizeof *ord, unit_len_cmp);
    bs_status st = BS_OK;
    for (int oi = 0; oi < K2 && st == BS_OK; oi++) {
        int u = ord[oi].u;
        if (root[u] < 0)
            continue;
        const int64_t *tu, *iu, *to, *io;
        int64_t nu, no;
        if ((st = store_get(d, root[u], 0, &tu, &iu, &nu)) != BS_OK)
            break;
        if (nu > cap) {
            bs_mem_free(shadow), bs_mem_free(hit);
            shadow = bs_mem_alloc("finish/collisions", (size_t)nu);
            hit = bs_mem_alloc("finish/collisions", (size_t)nu);
            cap = shadow && hit ? nu : 0;
            if (!cap) {
                st = BS_ERR_MEMORY;
                break;
            }
        }
        memset(shadow, 0, (size_t)nu);
        memset(hit, 0, (size_t)nu);
        if (shadow_of[u] >= 0 && root[shadow_of[u]] >= 0) { /* u's shadow spikes do not count */
            if ((st = store_get(d, root[shadow_of[u]], 1, &to, &io, &no)) != BS_OK)
                break;
            bs_mark_coincident(tu, nu, to, no, shadow_lag[u], half_width, shadow);
        }
        int64_t n_own = 0, n_hit = 0, n_nb = 0;
        for (int64_t i = 0; i < nu; i++)
            n_own += !shadow[i];
        int best = -1;
        double best_sim = r_thresh;
        for (int v = 0; v < K2 && st == BS_OK && n_own > 0; v++) {
            double dx = probe->x_um[peak[v]] - probe->x_um[peak[u]], dy = probe->y_um[peak[v]] - probe->y_um[peak[u]];
            /* a unit that casts shadows of u's spikes holds copies of them: not a neighbour */
            if (v == u || root[v] < 0 || collision_of[v] >= 0 || shadow_of[v] == u || dx * dx + dy * dy > r2)
                continue;
            if ((st = store_get(d, root[v], 1, &to, &io, &no)) != BS_OK)
                break;
            n_nb += no;
            bs_mark_coincident(tu, nu, to, no, 0, w, hit);
            double sim;
            if ((double)no >= cp->count_ratio * (double)n_own &&
                (sim = bs_template_similarity(T, v, u, max_lag, NULL)) >= best_sim && (sim > best_sim || best < 0)) {
                best_sim = sim;
                best = v;
            }
        }
        if (st != BS_OK || best < 0)
            continue;
        for (int64_t i = 0; i < nu; i++)
            n_hit += hit[i] && !shadow[i];
        if (bs_collision_excess(n_hit, n_own, n_nb, w, n_samples) >= cp->min_excess) {
            collision_of[u] = best;
            (*n_collision)++;
        }
    }
    bs_mem_free(ord), bs_mem_free(shadow), bs_mem_free(hit);
    return st;
}

/* Noise units (docs/ALGORITHM.md §9.9): first the units made only of noise cuts' low parts (noise_part[k]
 * for all their templates k < K1, final_id[k] == u); then unit u (not already a collision unit, and with no
 * template of the low tier, low_tier[matching[k]] for its templates k < K1, final_id[k] == u) whose median
 * spike amplitude is under fp->noise_median_of_threshold · th and, when fp->noise_edge_ratio > 0, whose
 * amplitudes in [th, th·17/16) outnumber those in [th·17/16, th·18/16) by more than that ratio
 * (th = fp->noise_threshold): its amplitudes pile up against the threshold. They are read back by index, in
 * blocks. noise[u] = 1 for those, else 0. A unit exempt as a low-tier one is tested instead for a pile at
 * its own threshold (the lowest thk[matching[k]] of its low-tier templates; bs_threshold_pile with
 * fp->split.pile_ratio): pile_cut[u] is then the valley's amplitude, under which its spikes are removed,
 * else 0 (*n_pile: units with a cut). */
static bs_status find_noise_units(disk_store *d, const bs_npy_rows *r_a, int K2, int K1, const int32_t *root,
                                  const int32_t *final_id, const int32_t *matching, const uint8_t *low_tier,
                                  const int32_t *collision_of, const uint8_t *noise_part, const float *thk,
                                  const bs_finish_params *fp, uint8_t *noise, int *n_noise, float *pile_cut,
                                  int *n_pile)
{
    *n_noise = *n_pile = 0;
    memset(noise, 0, (size_t)K2);
    for (int u = 0; u < K2; u++)
        pile_cut[u] = 0;
    for (int k = 0; k < K1; k++) /* a noise part no merge joined to another template (nor a collision unit) */
        if (noise_part[k] && collision_of[final_id[k]] < 0)
            noise[final_id[k]] = 3;
    for (int k = 0; k < K1; k++)
        if (!noise_part[k] && noise[final_id[k]] == 3)
            noise[final_id[k]] = 0;
    for (int u = 0; u < K2; u++)
        if (noise[u] == 3)
            noise[u] = 1, (*n_noise)++;
    double th = fp->noise_threshold, max_median = fp->noise_median_of_threshold * th;
    if (!(max_median > 0) && !(thk && fp->split.pile_ratio > 0))
        return BS_OK;
    for (int k = 0; low_tier && k < K1; k++) /* 2: exempt, a unit holding a low-tier template's spikes */
        if (low_tier[matching[k]] && noise[final_id[k]] != 1) {
            int u = final_id[k];
            float t_k = thk ? thk[matching[k]] : 0;
            pile_cut[u] = noise[u] == 2 && pile_cut[u] < t_k ? pile_cut[u] : t_k; /* its lowest threshold, for now */
            noise[u] = 2;
        }
    float *a = bs_mem_alloc("finish/noise", NOISE_BLOCK * sizeof *a);
    if (!a)
        return BS_ERR_MEMORY;
    double e1 = th * 17.0 / 16.0, e2 = th * 18.0 / 16.0;
    bs_status st = BS_OK;
    for (int u = 0; u < K2 && st == BS_OK; u++) {
        float th_u = pile_cut[u];
        pile_cut[u] = 0;
        int lowt = noise[u] == 2 && th_u > 0;
        if ((noise[u] && !lowt) || root[u] < 0 || collision_of[u] >= 0)
            continue;
        const int64_t *t, *idx;
        int64_t n, low = 0, n1 = 0, n2 = 0, c16[BS_PILE_BINS] = {0};
        if ((st = store_get(d, root[u], 0, &t, &idx, &n)) != BS_OK)
            break;
        for (int64_t s = 0; s < n && st == BS_OK; s += NOISE_BLOCK) {
            int64_t c = n - s < NOISE_BLOCK ? n - s : NOISE_BLOCK;
            st = bs_npy_rows_gather(r_a, idx + s, c, a);
            if (lowt)
                bs_pile_count(a, c, th_u, c16);
            for (int64_t i = 0; i < c && st == BS_OK; i++) {
                low += a[i] < max_median;
                n1 += a[i] >= th && a[i] < e1;
                n2 += a[i] >= e1 && a[i] < e2;
            }
        }
        if (lowt) {
            if (st == BS_OK && bs_threshold_pile(&fp->split, c16, th_u, &pile_cut[u]))
                (*n_pile)++;
            continue;
        }
        if (st == BS_OK && n > 0 && 2 * low > n &&
            (!(fp->noise_edge_ratio > 0) || (double)n1 > fp->noise_edge_ratio * (double)n2)) {
            noise[u] = 1;
            (*n_noise)++;
        }
    }
    for (int u = 0; u < K2; u++)
        noise[u] = noise[u] == 1;
    bs_mem_free(a);
    return st;
}

/* ------------------------------------------------------------ the stage */

size_t bs_finish_bytes(int K, int K1, int nt, int n_sup, int n_chan, int n_pc, int n_pc_chan, int n_tf)
{
    size_t k = (size_t)K, k1 = (size_t)(K1 > K ? K1 : K), C = (size_t)n_chan;
    /* what lives through the whole stage: the per-template state, reserved for the 2K templates the amplitude
       and feature splits may leave, the trains' buffers and the reads */
    size_t b = 0;
    b += 2 * k * (3 * sizeof(int64_t) + 2 * sizeof(int32_t) + 2 * sizeof(double) + 64); /* offsets, shifts, ids,
                                                                                   amplitudes, merge state */
    b += 2 * k * (sizeof(float) + 3 * sizeof(int32_t) + sizeof(int64_t) + 4); /* split rules (cut, first, next,
                                                   kind, noise, latest high spike), matching templates, depths,
                                                   noise parts */
    b += 2 * k * (size_t)n_pc * n_pc_chan * sizeof(float);     /* feature splits' axes and parts' means */
    b += 2 * (size_t)n_pc * n_pc_chan * ((size_t)n_pc * n_pc_chan + 1) * sizeof(double); /* their moments */
    b += (2 * k + 1) * (5 * sizeof(int32_t) + 1) + (C + 1) * sizeof(int32_t); /* shadows: partner, lag, whole, root,
                                                                               peak, index */
    b += 2 * k * (size_t)n_sup * sizeof(int32_t) + (C + 1) * sizeof(int32_t) + C; /* units by support channel,
                                                                                     one unit's support flags */
    b += (k1 + 1) * (sizeof(int32_t) + 16 + 1 + sizeof(float)) + NOISE_BLOCK * sizeof(float); /* collisions:
                                                  partner, visiting order; noise units: flags, pile cuts, amplitudes */
    b += bs_bucket_bytes(K, sizeof(tpair), TRAIN_BUF_BYTES); /* train write buffers */
    b += 4 * (size_t)READ_BLOCK * sizeof(rec_t) + (size_t)READ_BLOCK * 12; /* reorder buffer (may double), reads */
    b += (size_t)READ_BLOCK * n_pc * n_pc_chan * sizeof(float); /* the reads' features, for the feature splits */
    /* then two phases, one after the other. The splits' templates' waveforms (allocated once the splits ran,
       for the K1 there are; 2K before) through the shadows, merges and collision units, with the merges'
       averaged templates and the merged set they make (each on the union of its parts' channels: three
       copies' worth, as a bound): */
    size_t merges = (size_t)K1 * (size_t)n_sup * (size_t)nt * sizeof(float) * 3;
    /* and, once they are freed, the Phy folder's export: the units' state (at most K1 units), the blocks of
       spikes written, the dense templates and their similarities */
    size_t out = k1 * (sizeof(bs_acg_stream) + 2 * sizeof(double) + 2 * sizeof(int64_t) + 64 * sizeof(int64_t)) +
                 k * (2 * sizeof(double));
    out += (size_t)OUT_BLOCK * (2 * sizeof(int64_t) + 2 * sizeof(int32_t) + 3 * sizeof(float) +
                                (size_t)n_pc * n_pc_chan * sizeof(float));
    out += C * C * 2 * sizeof(float) + bs_whitener_inverse_bytes(n_chan); /* export whitening */
    out += (size_t)nt * C * sizeof(float) + (size_t)n_sup * nt * sizeof(float); /* one dense template */
    out += (size_t)OUT_BLOCK * (size_t)n_tf * sizeof(float);                      /* a block's template features */
    out += k * (size_t)n_tf * sizeof(int32_t) + bs_template_neighbors_bytes(K, n_sup, n_chan); /* their rows */
    out += bs_phy_writer_bytes(K, nt, n_chan);
    return b + (merges > out ? merges : out) + ((size_t)1 << 20);
}

int bs_finish_n_tf(const bs_finish_params *p, int K)
{
    return p->n_template_features < K ? p->n_template_features : K;
}

void bs_finish_default_params(bs_finish_params *p)
{
    memset(p, 0, sizeof *p);
    p->duplicate_ms = 0.25;
    p->label_acg_threshold = 0.2;
    bs_merge_default_params(&p->merge, 0);
    p->shadow_max_lag_ms = 0.5;
    p->shadow_tail_max_lag_ms = 2.0;
    p->shadow_tail_spread_lag_ms = 4.0;
    bs_shadow_default_params(&p->shadow, 0);
    bs_split_default_params(&p->split);
    bs_collision_default_params(&p->collision);
    p->n_template_features = 32;
    p->noise_median_of_threshold = 1.2;
    p->noise_edge_ratio = 1.0;
}

bs_status bs_finish_shadow_params(const bs_finish_params *p, double fs_hz, bs_shadow_params *sp)
{
    const char *name[3] = {"max_lag_ms", "tail_max_lag_ms", "tail_spread_lag_ms"};
    double ms[3] = {p->shadow_max_lag_ms, p->shadow_tail_max_lag_ms, p->shadow_tail_spread_lag_ms};
    int64_t lag[3];
    for (int i = 0; i < 3; i++) {
        lag[i] = bs_seconds_to_samples(ms[i] * 1e-3, fs_hz);
        if (lag[i] > BS_SHADOW_MAX_LAG)
            return bs_error(BS_ERR_USAGE,
                            "parameter shadow.%s = %g: %lld samples at %g Hz, expected at most %d samples (%.1f ms)",
                            name[i], ms[i], (long long)lag[i], fs_hz, BS_SHADOW_MAX_LAG,
                            1e3 * BS_SHADOW_MAX_LAG / fs_hz);
    }
    if (sp) {
        *sp = p->shadow;
        sp->max_lag = (int)lag[0];
        sp->tail_max_lag = (int)lag[1];
        sp->tail_spread_lag = (int)lag[2];
    }
    return BS_OK;
}

bs_status bs_finish_run(const bs_finish_input *in, int *n_units, int64_t *n_spikes)
{
    const bs_recording *rec = in->rec;
    const bs_match_templates *mt = in->mt;
    const bs_probe *probe = &rec->probe;
    int K = mt->K, C = probe->n_chan, nt = mt->nt, P = mt->n_pc, npc = in->n_pc_chan;
    char mdir[4200], fdir[4200];
    BS_TRY(bs_path_join(mdir, sizeof mdir, in->stage_dir, "match"));
    BS_TRY(bs_path_join(fdir, sizeof fdir, in->stage_dir, "finish"));
    BS_TRY(bs_mkdir_p(fdir));
    bs_npy_rows r_t, r_k, r_a, r_f;
    memset(&r_t, 0, sizeof r_t), memset(&r_k, 0, sizeof r_k), memset(&r_a, 0, sizeof r_a), memset(&r_f, 0, sizeof r_f);
    r_t.fd = r_k.fd = r_a.fd = r_f.fd = -1;
    disk_store ds;
    memset(&ds, 0, sizeof ds);
    ds.tr.fd = ds.fd_mg = -1;
    bs_status st = bs_npy_rows_open(&r_t, mdir, "spike_times.npy", BS_NPY_I64);
    if (st == BS_OK)
        st = bs_npy_rows_open(&r_k, mdir, "spike_templates.npy", BS_NPY_I32);
    if (st == BS_OK)
        st = bs_npy_rows_open(&r_a, mdir, "amplitudes.npy", BS_NPY_F32);
    if (st == BS_OK)
        st = bs_npy_rows_open(&r_f, mdir, "pc_features.npy", BS_NPY_F32);
    size_t kb = (size_t)(K > 0 ? 2 * K : 1); /* K templates and at most K split off them */
    double *amp_mean = bs_mem_alloc("finish/merge-result", kb * sizeof *amp_mean); /* per template */
    int D = P * npc; /* features of a spike */
    size_t nr = (size_t)(K > 0 ? K : 1); /* at most K split rules */
    bs_split_rules R = {.K = K};
    R.first = bs_mem_alloc("finish/split", kb * sizeof *R.first);
    R.next = bs_mem_alloc("finish/split", nr * sizeof *R.next);
    R.thr = bs_mem_alloc("finish/split", nr * sizeof *R.thr);
    R.kind = bs_mem_alloc("finish/split", nr);
    R.fv = bs_mem_alloc("finish/split", nr * D * sizeof *R.fv);
    R.fmean = bs_mem_alloc("finish/split", nr * D * sizeof *R.fmean);
    R.noise = bs_mem_alloc("finish/split", nr);
    R.last_hi = bs_mem_alloc("finish/split", nr * sizeof *R.last_hi);
    R.burst_lo = (int64_t)llround(in->fp->split.burst_min_ms * rec->fs_hz / 1000.0);
    R.burst_hi = (int64_t)llround(in->fp->split.burst_max_ms * rec->fs_hz / 1000.0);
    R.n_samples = rec->n_samples;
    int32_t *matching = bs_mem_alloc("finish/split", kb * sizeof *matching);
    uint8_t *depth = bs_mem_alloc("finish/split", kb);
    uint8_t *noise_part = bs_mem_alloc("finish/split", kb);
    if (st == BS_OK &&
        !(amp_mean && R.first && R.next && R.thr && R.kind && R.fv && R.fmean && R.noise && R.last_hi && matching &&
          depth && noise_part))
        st = BS_ERR_MEMORY;
    if (st == BS_OK)
        st = store_build(&ds, fdir, K, &r_t, &r_k, &r_a, amp_mean);
    bs_merge_params mp = in->fp->merge; /* the merges' parameters; max_train also bounds the splits */
    mp.fs_hz = rec->fs_hz;
    mp.duration_s = (double)rec->n_samples / rec->fs_hz;
    mp.amp = amp_mean;
    int K1 = K, n_fsplit = 0, n_ncut = 0; /* templates after the amplitude and feature splits; feature splits;
                                              noise cuts */
    if (st == BS_OK)
        st = split_templates(&ds, &r_a, &r_f, D, &in->fp->split, in->low_tier, bs_merge_max_train(&mp), amp_mean, &R,
                             matching, depth, noise_part, &K1, &n_fsplit);
    for (int k = K; k < K1 && st == BS_OK; k++)
        n_ncut += noise_part[k];
    if (st == BS_OK && in->splits_done)
        st = in->splits_done(in->splits_arg, K1);

    /* merges over the disk trains, on the matching templates' waveforms */
    bs_sparse_templates T = {0};
    int64_t *shift = bs_mem_calloc("finish/merge-result", kb, sizeof *shift);
    int32_t *final_id = bs_mem_alloc("finish/merge-result", kb * sizeof *final_id);
    int *nsup = malloc(kb * sizeof *nsup);
    if (st == BS_OK && !(shift && final_id && nsup))
        st = BS_ERR_MEMORY;
    for (int k = 0; k < K1 && nsup; k++)
        nsup[k] = mt->n_sup;
    if (st == BS_OK)
        st = bs_sparse_templates_alloc(&T, K1, nt, nsup);
    free(nsup);
    /* a template split off by amplitude has its matching template's waveform; one split off by features, its
     * mean features' waveform on the pc channels (zero on the support's others) */
    for (int k = 0; k < K1 && st == BS_OK; k++) {
        int m = matching[k];
        float *w = T.wave + T.off[k] * nt;
        for (int i = 0; i < mt->n_sup; i++)
            T.chans[T.off[k] + i] = mt->support[(size_t)m * mt->n_sup + i];
        if (k < K || !R.kind[k - K]) {
            bs_match_template_waveform(mt, m, w);
            continue;
        }
        memset(w, 0, (size_t)mt->n_sup * nt * sizeof *w);
        for (int j = 0; j < npc; j++) {
            int i = 0;
            while (i < mt->n_sup && T.chans[T.off[k] + i] != in->pc_chan[(size_t)m * npc + j])
                i++;
            for (int s = 0; s < nt && i < mt->n_sup; s++) {
                double acc = 0;
                for (int q = 0; q < P; q++)
                    acc += (double)R.fmean[(size_t)(k - K) * D + (size_t)q * npc + j] * mt->basis[(size_t)q * nt + s];
                w[(size_t)i * nt + s] = (float)acc;
            }
        }
    }
    /* template shadows, dropped from the trains before the merges test them */
    int32_t *root = bs_mem_alloc("finish/shadows", (kb + 1) * sizeof *root);
    int32_t *peak = bs_mem_alloc("finish/shadows", (kb + 1) * sizeof *peak);
    size_t kr = (kb + 1) * TSHADOW_ROUNDS;
    int32_t *tshadow_of = bs_mem_alloc("finish/shadows", kr * sizeof *tshadow_of);
    int32_t *tshadow_lag = bs_mem_alloc("finish/shadows", kr * sizeof *tshadow_lag);
    uint8_t *tshadow_whole = bs_mem_alloc("finish/shadows", kr);
    int64_t *moff0 = bs_mem_alloc("finish/shadows", (kb + 1) * sizeof *moff0); /* the matched trains */
    int64_t *len0 = bs_mem_alloc("finish/shadows", (kb + 1) * sizeof *len0);
    int64_t *tlast = bs_mem_alloc("finish/shadows", (kb + 1) * sizeof *tlast);
    bs_shadow_params sp = {0};
    if (st == BS_OK)
        st = bs_finish_shadow_params(in->fp, rec->fs_hz, &sp);
    int n_tshadowed = 0, n_twhole = 0, n_rounds = 0;
    if (st == BS_OK && !(root && peak && tshadow_of && tshadow_lag && tshadow_whole && tlast && moff0 && len0))
        st = BS_ERR_MEMORY;
    for (int k = 0; k < K1 && st == BS_OK; k++)
        moff0[k] = ds.moff[k], len0[k] = ds.len[k], final_id[k] = k;
    /* a template may shadow several others' spikes: rounds until one finds no shadow (each test sees the
     * trains the rounds before left) */
    while (st == BS_OK && n_rounds < TSHADOW_ROUNDS) {
        int32_t *of_ = tshadow_of + (size_t)n_rounds * K1, *lag_ = tshadow_lag + (size_t)n_rounds * K1;
        uint8_t *wh_ = tshadow_whole + (size_t)n_rounds * K1;
        int ns = 0, nw = 0;
        unit_roots_peaks(&ds, &T, K1, final_id, root, peak);
        st = find_shadows(&ds, &T, root, peak, amp_mean, C, rec->n_samples, &sp, of_, lag_, wh_, &ns, &nw);
        if (st != BS_OK || ns == 0)
            break;
        st = drop_template_shadows(&ds, K1, moff0, len0, of_, lag_, wh_, sp.half_width);
        n_tshadowed += ns, n_twhole += nw, n_rounds++;
    }
    int n_merges = 0, n_collisions = 0, K2 = K;
    if (st == BS_OK) {
        bs_train_store ts = {store_get, store_put, store_count, &ds};
        st = bs_merge_ccg_store(&mp, &ts, &T, shift, final_id, &n_merges);
        K2 = T.K;
    }
    int32_t *shadow_of = bs_mem_alloc("finish/shadows", ((size_t)K2 + 1) * sizeof *shadow_of);
    int32_t *shadow_lag = bs_mem_alloc("finish/shadows", ((size_t)K2 + 1) * sizeof *shadow_lag);
    uint8_t *shadow_whole = bs_mem_alloc("finish/shadows", (size_t)K2 + 1);
    int32_t *collision_of = bs_mem_alloc("finish/collisions", ((size_t)K2 + 1) * sizeof *collision_of);
    uint8_t *noise = bs_mem_alloc("finish/noise", (size_t)K2 + 1);
    float *pile_cut = bs_mem_alloc("finish/noise", ((size_t)K2 + 1) * sizeof *pile_cut);
    int n_shadowed = 0, n_whole = 0, n_noise = 0, n_pile = 0;
    if (st == BS_OK && !(shadow_of && shadow_lag && shadow_whole && collision_of && noise && pile_cut && root && peak))
        st = BS_ERR_MEMORY;
    if (st == BS_OK) {
        unit_roots_peaks(&ds, &T, K1, final_id, root, peak);
        st = find_shadows(&ds, &T, root, peak, amp_mean, C, rec->n_samples, &sp, shadow_of, shadow_lag,
                          shadow_whole, &n_shadowed, &n_whole);
    }
    if (st == BS_OK)
        st = find_collisions(&ds, &T, root, peak, probe, shadow_of, shadow_lag, sp.half_width, rec->n_samples,
                             rec->fs_hz, &in->fp->collision, in->fp->merge.r_thresh,
                             in->fp->merge.max_lag > 0 ? in->fp->merge.max_lag : nt / 2, collision_of,
                             &n_collisions);
    if (st == BS_OK)
        st = find_noise_units(&ds, &r_a, K2, K1, root, final_id, matching, in->low_tier, collision_of, noise_part,
                              in->threshold, in->fp, noise, &n_noise, pile_cut, &n_pile);
    bs_sparse_templates_free(&T);
    store_close(&ds);

    /* the Phy folder */
    export_state e;
    memset(&e, 0, sizeof e);
    e.in = in, e.r_a = &r_a, e.r_f = &r_f, e.K = K, e.K2 = K2, e.P = P, e.npc = npc, e.matching = matching;
    e.shadow_of = shadow_of, e.shadow_lag = shadow_lag, e.shadow_whole = shadow_whole, e.half_width = sp.half_width;
    e.collision_of = collision_of, e.noise = noise, e.pile_cut = pile_cut;
    e.K1 = K1, e.n_rounds = n_rounds;
    e.tshadow_of = tshadow_of, e.tshadow_lag = tshadow_lag, e.tshadow_whole = tshadow_whole, e.shift = shift;
    e.tlast = tlast;
    e.n_tf = bs_finish_n_tf(in->fp, K);
    int32_t *tf_ind = NULL;
    if (st == BS_OK) {
        e.amp_sum = bs_mem_calloc("finish/units", (size_t)K + K2 + 1, sizeof *e.amp_sum);
        e.amp_n = bs_mem_calloc("finish/units", (size_t)K + K2 + 1, sizeof *e.amp_n);
        e.acg = bs_mem_calloc("finish/units", (size_t)K2 + 1, sizeof *e.acg);
        e.last = bs_mem_alloc("finish/units", ((size_t)K2 + 1) * sizeof *e.last);
        e.ts = bs_mem_alloc("finish/block", OUT_BLOCK * sizeof *e.ts);
        e.ix = bs_mem_alloc("finish/block", OUT_BLOCK * sizeof *e.ix);
        e.bk = bs_mem_alloc("finish/block", OUT_BLOCK * sizeof *e.bk);
        e.cs = bs_mem_alloc("finish/block", OUT_BLOCK * sizeof *e.cs);
        e.ba = bs_mem_alloc("finish/block", OUT_BLOCK * sizeof *e.ba);
        e.bf = bs_mem_alloc("finish/block", (size_t)OUT_BLOCK * P * npc * sizeof *e.bf);
        e.bxy = bs_mem_alloc("finish/block", (size_t)OUT_BLOCK * 2 * sizeof *e.bxy);
        e.btf = bs_mem_alloc("finish/block", (size_t)OUT_BLOCK * (e.n_tf ? e.n_tf : 1) * sizeof *e.btf);
        tf_ind = bs_mem_alloc("finish/template-neighbours", (size_t)K * (e.n_tf ? e.n_tf : 1) * sizeof *tf_ind);
        if (!(e.amp_sum && e.amp_n && e.acg && e.last && e.ts && e.ix && e.bk && e.cs && e.ba && e.bf && e.bxy &&
              e.btf && tf_ind))
            st = BS_ERR_MEMORY;
        e.tf_ind = tf_ind;
        for (int u = 0; u <= K2 && e.last; u++)
            e.last[u] = -1;
    }
    char dat[4096];
    dat[0] = '\0'; /* a recording that is not a plain binary (NWB) gets dat_path = [] */
    if (st == BS_OK && !rec->read_rows)
        st = bs_phy_resolve_dat_path(rec->data_path, dat, sizeof dat);
    bs_phy_header h = {.dat_path = dat,
                       .n_channels_dat = rec->n_cols,
                       .dtype = bs_sample_type_name(rec->dtype),
                       /* Phy reads a window (tmin_s) from its first sample, like the sort */
                       .offset_bytes = rec->data_offset + (uint64_t)rec->row0 * (uint64_t)rec->n_cols *
                                                              bs_sample_bytes(rec->dtype),
                       .sample_rate_hz = rec->fs_hz,
                       .hp_filtered = 0,
                       .n_samples = rec->n_samples,
                       .n_chan = C,
                       .nt = nt,
                       .n_templates = K,
                       .n_pc = P,
                       .n_pc_chan = npc};
    if (st == BS_OK)
        st = bs_phy_writer_open(&e.pw, in->out_dir, &h);
    if (st == BS_OK)
        st = bs_phy_writer_set_probe(e.pw, probe);
    if (st == BS_OK && e.n_tf)
        st = bs_template_neighbors(mt, in->pc_chan, npc, e.n_tf, tf_ind);
    if (st == BS_OK && e.n_tf)
        st = bs_phy_writer_set_template_feature_ind(e.pw, e.n_tf, tf_ind);
    float *W = NULL, *Winv = NULL;
    if (st == BS_OK) {
        W = bs_mem_alloc("finish/export-whitening", (size_t)C * C * sizeof *W);
        Winv = bs_mem_alloc("finish/export-whitening", (size_t)C * C * sizeof *Winv);
        st = W && Winv ? BS_OK : BS_ERR_MEMORY;
    }
    if (st == BS_OK) {
        bs_whitener_dense(in->wh, W);
        st = bs_whitener_inverse(in->wh, 1e-5, Winv);
    }
    if (st == BS_OK)
        st = bs_phy_writer_set_whitening(e.pw, W, Winv);
    bs_mem_free(W), bs_mem_free(Winv);
    if (st == BS_OK)
        st = stream_spikes(&e, &r_t, &r_k, &R, D, K1, shift, final_id);

    /* templates: unit-norm waveforms scaled by their spikes' mean amplitude */
    float *dense = bs_mem_alloc("finish/export-template", (size_t)nt * C * sizeof *dense);
    float *wave = bs_mem_alloc("finish/export-template", (size_t)mt->n_sup * nt * sizeof *wave);
    if (st == BS_OK && !(dense && wave))
        st = BS_ERR_MEMORY;
    for (int k = 0; k < K && st == BS_OK; k++) {
        double a = e.amp_n[k] ? e.amp_sum[k] / (double)e.amp_n[k] : 1.0;
        memset(dense, 0, (size_t)nt * C * sizeof *dense);
        bs_match_template_waveform(mt, k, wave);
        for (int i = 0; i < mt->n_sup; i++) {
            int c = mt->support[(size_t)k * mt->n_sup + i];
            for (int u = 0; u < nt; u++)
                dense[(size_t)u * C + c] = (float)(a * wave[(size_t)i * nt + u]);
        }
        st = bs_phy_writer_append_templates(e.pw, 1, dense, in->pc_chan + (size_t)k * npc);
    }
    bs_mem_free(dense), bs_mem_free(wave);
    /* units: good/mua from the streamed autocorrelograms */
    bs_phy_cluster *rows = st == BS_OK ? calloc((size_t)K2 + 1, sizeof *rows) : NULL;
    int n_rows = 0;
    for (int u = 0; u < K2 && rows; u++) {
        if (!e.amp_n[K + u])
            continue;
        bs_ccg_metrics m;
        int good = bs_acg_stream_is_good(&e.acg[u], rec->fs_hz, in->fp->label_acg_threshold, &m);
        rows[n_rows++] = (bs_phy_cluster){u, good ? "good" : "mua", good ? "good" : "mua",
                                          e.amp_sum[K + u] / (double)e.amp_n[K + u], 100.0 * m.R12};
    }
    if (st == BS_OK && !rows)
        st = BS_ERR_MEMORY;
    if (st == BS_OK)
        st = bs_phy_writer_set_clusters(e.pw, n_rows, rows);
    free(rows);
    if (e.pw)
        st = st == BS_OK ? bs_phy_writer_close(e.pw) : (bs_phy_writer_abort(e.pw), st);
    *n_units = n_rows;
    *n_spikes = e.n_out;
    if (st == BS_OK && !in->quiet)
        bs_log_info("%d templates, %d split by amplitude (%d of them noise cuts) and %d by features, %d merges, "
                    "%d units, %lld spikes (%lld duplicates removed; %lld shadow spikes of %d templates and %d units "
                    "removed, %d and %d of them whole; %d collision units of %lld spikes and %d noise units of %lld "
                    "removed; %d low-tier units' piles at their thresholds, %lld spikes, removed)",
                    K, K1 - K - n_fsplit, n_ncut, n_fsplit, n_merges, n_rows, (long long)e.n_out, (long long)e.n_dup,
                    (long long)e.n_shadow, n_tshadowed, n_shadowed, n_twhole, n_whole, n_collisions,
                    (long long)e.n_collision, n_noise, (long long)e.n_noise, n_pile, (long long)e.n_pile);
    for (int u = 0; u <= K2 && e.acg; u++)
        bs_acg_stream_free(&e.acg[u]);
    bs_mem_free(e.amp_sum), bs_mem_free(e.amp_n), bs_mem_free(e.acg), bs_mem_free(e.last);
    bs_mem_free(e.ts), bs_mem_free(e.ix), bs_mem_free(e.bk), bs_mem_free(e.cs), bs_mem_free(e.ba),
        bs_mem_free(e.bf), bs_mem_free(e.bxy), bs_mem_free(e.btf), bs_mem_free(tf_ind);
    bs_mem_free(shift), bs_mem_free(final_id), bs_mem_free(amp_mean), bs_mem_free(shadow_of), bs_mem_free(shadow_lag),
        bs_mem_free(shadow_whole);
    bs_mem_free(collision_of), bs_mem_free(noise), bs_mem_free(pile_cut), bs_mem_free(root), bs_mem_free(peak),
        bs_mem_free(tshadow_of), bs_mem_free(tshadow_lag), bs_mem_free(tshadow_whole), bs_mem_free(tlast),
        bs_mem_free(moff0), bs_mem_free(len0), bs_mem_free(matching), bs_mem_free(depth), bs_mem_free(noise_part);
    bs_mem_free(R.first), bs_mem_free(R.next), bs_mem_free(R.thr), bs_mem_free(R.kind), bs_mem_free(R.fv),
        bs_mem_free(R.fmean), bs_mem_free(R.noise), bs_mem_free(R.last_hi);
    bs_npy_rows_close(&r_t), bs_npy_rows_close(&r_k), bs_npy_rows_close(&r_a), bs_npy_rows_close(&r_f);
    return st;
}

/* ------------------------------------------------------------ the stage */

/* Bounded by K (bs_finish_bytes), plus the two spike trains the merge
 * compares: 96 bytes per spike of the longest train it reads or makes (read
 * buffers of both slots and the merged list), which merge.max_rate_hz bounds
 * (bs_merge_max_train), and which the spikes bound too. The amplitude split,
 * before the merges, holds one slot (32) and its own 52 bytes per spike
 * (amplitudes, sort keys and prefix sums, the two parts' lists), and the
 * template shadows two slots (64) and their own 17 (flags and the kept
 * list), within the same 96. A feature split holds one slot and 56 bytes
 * like the amplitude split (with its projections' 4 for sorting), and
 * besides the 96 the train's features (n_pcs × n_pc_chan floats per spike)
 * and their projections (4). */
static void plan(bs_sort_plan *pl, bs_plan_stage *s)
{
    int npc = pl->n_pc_chan < pl->n_sup ? pl->n_pc_chan : pl->n_sup;
    bs_merge_params mp = pl->p.finish.merge;
    mp.duration_s = (double)pl->n_samples / pl->fs_hz;
    int64_t largest = bs_merge_max_train(&mp);
    if (largest > pl->n_spikes)
        largest = pl->n_spikes;
    bs_plan_add(s, "batch reader + preprocessing", pl->resident);
    bs_plan_add(s, "templates (channel-sparse, low-rank)",
                bs_match_templates_bytes(pl->nt, pl->n_pc, pl->K, pl->n_sup));
    bs_plan_add(s, "merges, unit state, reorder and export blocks",
                bs_finish_bytes(pl->K, pl->finish_k1 > 0 ? pl->finish_k1 : 2 * pl->K, pl->nt, pl->n_sup, pl->n_chan,
                                pl->n_pc, npc,
                                bs_finish_n_tf(&pl->p.finish, pl->K)));
    /* two read slots (32 B/spike each), the merged list (16) and the collision test's two flags (2) fit in 96 */
    bs_plan_add(s, "the two trains a merge compares (96 B/spike, <= merge.max_rate_hz)", (size_t)largest * 96);
    size_t fbytes = pl->p.finish.split.feature_min_dprime > 0 ? ((size_t)pl->n_pc * npc + 1) * sizeof(float) : 0;
    if (fbytes)
        bs_plan_add(s, "the features of the train a feature split reads", (size_t)largest * fbytes);
    snprintf(s->strategy, sizeof s->strategy, "streamed, trains on disk");
    s->peak = s->min_peak = bs_plan_sum(s);
    /* the bound is sure once K is known, unless the spike count that lowered it is an assumption */
    int trains_assumed = pl->spikes_assumed && largest == pl->n_spikes;
    s->sure_min = pl->k_assumed ? pl->resident : s->min_peak - (trains_assumed ? (size_t)largest * (96 + fbytes) : 0);
    s->reduce = "--mem";
    /* trains.bin and merged.bin (every matched spike, again for each of the SPLIT_DEPTH cuts a spike's train
     * may have, and for the template shadows' rewrites), then the Phy folder */
    bs_plan_disk(s, 2, (double)pl->n_spikes * (2 + SPLIT_DEPTH) * sizeof(tpair));
    s->disk += bs_phy_folder_bytes(pl->n_spikes, pl->K, pl->nt, pl->n_chan, pl->n_pc, npc,
                                   bs_finish_n_tf(&pl->p.finish, pl->K));
}

/* The real spike count: re-plan, refuse if it no longer fits. */
static bs_status replan(bs_run_ctx *c)
{
    bs_sort_plan_update(c->plan, c->stage, c->plan->K, c->plan->pair_nnz, c->n_matched);
    return bs_sort_plan_check(c->plan, c->stage);
}

/* OUT/artifacts.tsv: the detect stage's periods (its checkpoint), copied
 * whole; *n_periods and *n_samples count them and the samples they cover.
 * Removed with the removal off, so no earlier run's list outlives its sort. */
static bs_status publish_artifacts(const bs_run_ctx *c, int64_t *n_periods, int64_t *n_samples)
{
    char src[4300], dst[4300];
    BS_TRY(bs_path_join(dst, sizeof dst, c->p->out_dir, BS_ARTIFACTS_TSV));
    *n_periods = *n_samples = 0;
    if (c->p->no_artifact_removal) {
        if (unlink(dst) != 0 && errno != ENOENT)
            return bs_error(BS_ERR_IO, "%s: cannot remove an earlier run's file: %s", dst, strerror(errno));
        return BS_OK;
    }
    BS_TRY(bs_path_join(src, sizeof src, c->stage_dir, "detect/" BS_ARTIFACTS_TSV));
    FILE *in;
    BS_TRY(bs_fopen_input(src, &in));
    bs_atomic_file out;
    bs_status st = bs_atomic_open(&out, dst);
    if (st != BS_OK) {
        fclose(in);
        return st;
    }
    char line[256];
    int row = 0;
    while (st == BS_OK && fgets(line, sizeof line, in)) {
        long long t0, t1;
        if (row++ > 0) {
            if (sscanf(line, "%lld %lld", &t0, &t1) != 2 || t1 <= t0)
                st = bs_error(BS_ERR_INPUT, "%s: line %d: expected start and end samples", src, row);
            else
                (*n_periods)++, *n_samples += t1 - t0;
        }
        if (st == BS_OK && fputs(line, out.fp) == EOF)
            st = bs_error(BS_ERR_IO, "%s: write failed: %s", dst, strerror(errno));
    }
    if (st == BS_OK && ferror(in))
        st = bs_error(BS_ERR_INPUT, "%s: read failed", src);
    fclose(in);
    if (st != BS_OK) {
        bs_atomic_abort(&out);
        return st;
    }
    return bs_atomic_commit(&out);
}

/* The splits ran: re-plan with the template count they left (the waveforms' bytes), refuse if it no longer fits. */
static bs_status splits_done(void *arg, int K1)
{
    bs_run_ctx *c = arg;
    c->plan->finish_k1 = K1;
    BS_TRY(replan(c));
    bs_run_stage_replan(c->summary, c->plan->stage[c->stage].peak);
    return BS_OK;
}

static bs_status run(bs_run_ctx *c)
{
    bs_finish_params fp = c->p->finish;
    fp.split.min_low_amp = fp.split.low_amp_of_threshold * c->p->match_threshold;
    fp.noise_threshold = c->p->match_threshold;
    float *thk = NULL;
    if (c->lt.low_tier) {
        if (!(thk = bs_mem_alloc("finish/thresholds", (size_t)c->mt.K * sizeof *thk)))
            return BS_ERR_MEMORY;
        bs_match_thresholds(&c->mt, c->lt.low_tier, c->p->match_threshold, c->p->match_threshold_of_amp,
                            c->p->match_threshold_floor, thk);
    }
    bs_finish_input fin = {.rec = c->rec,
                           .stage_dir = c->stage_dir,
                           .out_dir = c->p->out_dir,
                           .wh = &c->wh,
                           .mt = &c->mt,
                           .pc_chan = c->pc_chan,
                           .n_pc_chan = c->n_pc_chan,
                           .fp = &fp,
                           .low_tier = c->lt.low_tier,
                           .threshold = thk,
                           .quiet = c->p->quiet,
                           .splits_done = splits_done,
                           .splits_arg = c};
    bs_status st = bs_finish_run(&fin, &c->n_units, &c->n_final);
    bs_mem_free(thk);
    BS_TRY(st);
    int64_t n_periods, n_blanked;
    BS_TRY(publish_artifacts(c, &n_periods, &n_blanked));
    bs_run_summary *r = c->summary;
    double fs = c->rec->fs_hz, blanked_s = (double)n_blanked / fs;
    double clear_s = (double)c->rec->n_samples / fs - blanked_s;
    r->artifact_removal = !c->p->no_artifact_removal;
    r->n_artifacts = n_periods;
    r->artifact_blanked_s = blanked_s;
    r->artifact_lost_spikes = clear_s > 0 ? (double)c->n_final * blanked_s / clear_s : 0;
    if (!c->p->quiet && n_periods)
        bs_log_info("artifacts: %lld periods blanked (%.3f s, %.2f %% of the recording), listed in %s/%s",
                    (long long)n_periods, blanked_s, 100.0 * blanked_s * fs / (double)c->rec->n_samples,
                    c->p->out_dir, BS_ARTIFACTS_TSV);
    return BS_OK;
}

static bs_status finish(bs_run_ctx *c)
{
    if (!c->p->quiet)
        bs_log_info("sorted in %.1f s: %d units, %lld spikes, Phy folder %s", bs_now_s() - c->t0_s, c->n_units,
                    (long long)c->n_final, c->p->out_dir);
    return BS_OK;
}

static const char *const params[] = {"match", "split", "merge", "shadow", "finish", NULL};

/* Not checkpointed (no files): the Phy folder is written whole each run. */
const bs_stage bs_finish_stage = {
    .name = "finish", .plan = plan, .replan = replan, .run = run, .finish = finish, .params = params};
