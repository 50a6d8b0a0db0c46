/*
 * qc_run.c - bs_qc_run: the passes over the Phy folder and the recording
 * that feed the metric functions (the mechanism is described in qc.h).
 *
 *   1. spikes        spike_times + spike_clusters (or spike_templates), in
 *                    blocks: validity (sorted, inside the recording, ids
 *                    >= 0), the unit ids (ascending) and their spike counts;
 *                    units listed in cluster_group.tsv without spikes are
 *                    added with 0 spikes (their metrics are NaN).
 *   2. noise         MAD / 0.6745 per channel on random chunks.
 *   3. recording A   batches holding spikes only: the random subset is drawn
 *                    (per-unit selection sampling) and its waveforms summed
 *                    into per-unit templates (all channels).
 *   -> main channel, peak shift, template extremum, sparsity per unit.
 *   4. recording B   every spike's amplitude (-> .stages/qc/
 *                    spike_amplitudes_uv.npy) and the subset's waveforms on
 *                    their unit's sparse channels (-> a temporary spill file).
 *   5. PCA           per unit, its spilled waveforms: partial fits of the
 *                    per-channel models, then the projections (RAM).
 *   6. PCA metrics   per unit, on its neighbourhood's projections.
 *   7. unit groups   spike times, amplitudes and depths gathered for groups
 *                    of units: the train, amplitude and drift metrics.
 *   8. outputs       qc/qc_metrics.tsv, cluster_<metric>.tsv,
 *                    cluster_qc_label.tsv, curation.json (qc_write.c).
 */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../common/progress.h"
#include "../common/rng.h"
#include "../common/samples.h"
#include "../io/batch.h"
#include "../mem/mem.h"
#include "../preprocess/preprocess.h"
#include "qc.h"
#include "qc_internal.h"
#include "qc_run.h"

#define LUT_MAX_ID (1 << 22) /* id -> index table up to this id, binary search above */

static void info(const qc_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void info(const qc_ctx *c, const char *fmt, ...)
{
    if (c->p->quiet)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    bs_log_info("qc: %s", buf);
}

/* ------------------------------------------------------------------ units */

int32_t qc_unit_index(const qc_ctx *c, int64_t id)
{
    if (id < 0)
        return -1;
    if (c->lut)
        return id < c->lut_n ? c->lut[id] : -1;
    int lo = 0, hi = c->K - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c->ids[mid] == id)
            return mid;
        if (c->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* Insert id (with count 0) into the sorted id list if absent; returns its index. */
static int add_unit(qc_ctx *c, int32_t id, int *cap)
{
    int lo = 0, hi = c->K;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (c->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < c->K && c->ids[lo] == id)
        return lo;
    if (c->K == *cap) {
        int nc = *cap ? 2 * *cap : 1024;
        int32_t *ni = bs_mem_realloc(c->ids, "qc/units", sizeof *ni * (size_t)nc);
        if (!ni)
            return -1;
        c->ids = ni;
        int64_t *nn = bs_mem_realloc(c->count, "qc/units", sizeof *nn * (size_t)nc);
        if (!nn)
            return -1;
        c->count = nn;
        *cap = nc;
    }
    memmove(c->ids + lo + 1, c->ids + lo, sizeof *c->ids * (size_t)(c->K - lo));
    memmove(c->count + lo + 1, c->count + lo, sizeof *c->count * (size_t)(c->K - lo));
    c->ids[lo] = id;
    c->count[lo] = 0;
    c->K++;
    return lo;
}

/* Pass 1: validate the spikes, collect unit ids and counts. */
static bs_status scan_spikes(qc_ctx *c)
{
    int cap = 0;
    int64_t *t = bs_mem_alloc("qc/spike-block", QC_BLOCK * sizeof *t);
    int64_t *id = bs_mem_alloc("qc/spike-block", QC_BLOCK * sizeof *id);
    if (!t || !id) {
        bs_mem_free(t);
        bs_mem_free(id);
        return BS_ERR_MEMORY;
    }
    bs_status st = BS_OK;
    int64_t last_id = -1;
    int last_idx = -1;
    bs_phy_times_check tc; /* the spike-time rules the report shares (phy_read.h) */
    bs_phy_times_begin(&tc, c->times.r.path, c->T, c->fs);
    for (int64_t r0 = 0; r0 < c->S && st == BS_OK; r0 += QC_BLOCK) {
        int64_t n = c->S - r0 < QC_BLOCK ? c->S - r0 : QC_BLOCK;
        st = bs_phy_col_i64(&c->times, r0, n, t);
        if (st == BS_OK)
            st = bs_phy_col_i64(&c->clus, r0, n, id);
        if (st == BS_OK)
            st = bs_phy_times_next(&tc, r0, t, n);
        for (int64_t i = 0; i < n && st == BS_OK; i++) {
            if (id[i] < 0 || id[i] > INT32_MAX)
                st = bs_error(BS_ERR_INPUT, "%s: spike %lld: cluster id %lld, expected 0..%d", c->clus.r.path,
                              (long long)(r0 + i), (long long)id[i], INT32_MAX);
            if (st != BS_OK)
                break;
            if (id[i] != last_id) {
                last_idx = add_unit(c, (int32_t)id[i], &cap);
                if (last_idx < 0)
                    st = BS_ERR_MEMORY;
                last_id = id[i];
            }
            /* insertions happen only when the id changes, so the cached index stays valid */
            if (st == BS_OK)
                c->count[last_idx]++;
        }
        if (r0 == 0 && n > 0)
            c->t_first = t[0];
        if (n > 0)
            c->t_last = t[n - 1];
    }
    bs_mem_free(t);
    bs_mem_free(id);
    if (st != BS_OK)
        return st;
    /* units named in cluster_group.tsv without spikes */
    for (int i = 0; i < c->groups.n; i++)
        if (add_unit(c, c->groups.id[i], &cap) < 0)
            return BS_ERR_MEMORY;
    if (c->K > 0 && c->ids[c->K - 1] < LUT_MAX_ID) {
        c->lut_n = c->ids[c->K - 1] + 1;
        c->lut = bs_mem_alloc("qc/units", sizeof *c->lut * (size_t)c->lut_n);
        if (!c->lut)
            return BS_ERR_MEMORY;
        for (int32_t i = 0; i < c->lut_n; i++)
            c->lut[i] = -1;
        for (int u = 0; u < c->K; u++)
            c->lut[c->ids[u]] = u;
    }
    return BS_OK;
}

/* ----------------------------------------------------------- spike cursor */

typedef struct {
    qc_ctx *c;
    int64_t next;  /* global index of the next spike */
    int64_t blk0;  /* global index of t[0] */
    int64_t blk_n; /* spikes in the block */
    int64_t *t;
    int32_t *u;
    int64_t *tmp;
} cursor;

static bs_status cursor_open(cursor *k, qc_ctx *c)
{
    memset(k, 0, sizeof *k);
    k->c = c;
    k->t = bs_mem_alloc("qc/spike-block", QC_BLOCK * sizeof *k->t);
    k->u = bs_mem_alloc("qc/spike-block", QC_BLOCK * sizeof *k->u);
    k->tmp = bs_mem_alloc("qc/spike-block", QC_BLOCK * sizeof *k->tmp);
    return k->t && k->u && k->tmp ? BS_OK : BS_ERR_MEMORY;
}

static void cursor_close(cursor *k)
{
    bs_mem_free(k->t);
    bs_mem_free(k->u);
    bs_mem_free(k->tmp);
}

/* Time of the next spike (INT64_MAX after the last); loads blocks as needed. */
static bs_status cursor_peek(cursor *k, int64_t *t)
{
    if (k->next >= k->c->S) {
        *t = INT64_MAX;
        return BS_OK;
    }
    if (k->next >= k->blk0 + k->blk_n) {
        int64_t n = k->c->S - k->next < QC_BLOCK ? k->c->S - k->next : QC_BLOCK;
        BS_TRY(bs_phy_col_i64(&k->c->times, k->next, n, k->t));
        BS_TRY(bs_phy_col_i64(&k->c->clus, k->next, n, k->tmp));
        for (int64_t i = 0; i < n; i++)
            k->u[i] = qc_unit_index(k->c, k->tmp[i]);
        k->blk0 = k->next;
        k->blk_n = n;
    }
    *t = k->t[k->next - k->blk0];
    return BS_OK;
}

/* --------------------------------------------------------- recording pass */

typedef bs_status (*spike_fn)(qc_ctx *c, const float *x, int64_t s0, int64_t g, int64_t t, int u, void *arg);

/* Read (and preprocess) every batch that holds spikes, in order, and call fn
 * for each spike of the batch. x is the preprocessed window, channel-major,
 * c->width samples per channel; sample t is column c->halo + t - s0. */
static bs_status recording_pass(qc_ctx *c, const char *name, spike_fn fn, void *arg)
{
    bs_batch_reader rd = {.fd = -1};
    BS_TRY(bs_batch_reader_open(&rd, c->rec, c->nb, c->halo, 0));
    cursor k;
    bs_status st = cursor_open(&k, c);
    bs_progress pg;
    bs_progress_start(&pg, name, "batches", c->p->quiet ? 0 : rd.n_batches);
    for (int64_t b = 0; b < rd.n_batches && st == BS_OK; b++) {
        int64_t s0 = b * c->nb, s1 = s0 + c->nb, t;
        st = cursor_peek(&k, &t);
        if (st == BS_OK && t < s1) {
            float *x;
            int64_t n_valid;
            st = bs_batch_read(&rd, b, &x, &n_valid);
            if (st == BS_OK)
                st = qc_preprocess(c, x, c->width);
            while (st == BS_OK) {
                st = cursor_peek(&k, &t);
                if (st != BS_OK || t >= s1)
                    break;
                int u = k.u[k.next - k.blk0];
                st = fn(c, x, s0, k.next, t, u, arg);
                k.next++;
            }
        }
        bs_progress_update(&pg, b + 1);
    }
    if (st == BS_OK)
        bs_progress_finish(&pg);
    cursor_close(&k);
    bs_batch_reader_close(&rd);
    return st;
}

int64_t bs_qc_preprocess_halo(double fs_hz)
{
    return (int64_t)ceil(BS_PREPROCESS_HALO_DEFAULT * fs_hz / 30000.0);
}

bs_status bs_qc_preprocess(const bs_highpass *hp, float *x, int C, int64_t n_t, void *scratch, size_t scratch_bytes)
{
    BS_TRY(bs_highpass_apply(hp, x, C, n_t, scratch, scratch_bytes));
    return bs_car(x, C, n_t, 0, 1, scratch, scratch_bytes);
}

bs_status qc_preprocess(qc_ctx *c, float *x, int64_t n_t)
{
    return bs_qc_preprocess(&c->hp, x, c->C, n_t, c->scratch, c->scratch_bytes);
}

/* ------------------------------------------------------------ noise levels */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static bs_status noise_levels(qc_ctx *c)
{
    int64_t len = bs_seconds_to_samples(c->p->noise_chunk_s, c->fs);
    if (len < 1)
        len = 1;
    if (len > c->T)
        len = c->T;
    int64_t avail = c->T / len;
    int64_t nch = c->p->n_noise_chunks < avail ? c->p->n_noise_chunks : avail;
    if (nch < 1)
        nch = 1;
    /* distinct chunk indices: a seeded partial Fisher-Yates shuffle, then ascending */
    int64_t *pick = bs_mem_alloc("qc/noise", sizeof *pick * (size_t)avail);
    if (!pick)
        return BS_ERR_MEMORY;
    for (int64_t i = 0; i < avail; i++)
        pick[i] = i;
    bs_rng rng;
    bs_rng_seed(&rng, c->p->seed ^ 0x6e6f697365ULL);
    for (int64_t i = 0; i < nch; i++) {
        int64_t j = i + (int64_t)(bs_rng_uniform(&rng) * (double)(avail - i));
        int64_t tmp = pick[i];
        pick[i] = pick[j];
        pick[j] = tmp;
    }
    qsort(pick, (size_t)nch, sizeof *pick, cmp_i64);
    bs_batch_reader rd = {.fd = -1};
    bs_status st = bs_batch_reader_open(&rd, c->rec, len, c->halo, 0);
    float *work = st == BS_OK ? bs_mem_alloc("qc/noise", sizeof *work * (size_t)len) : NULL;
    if (st == BS_OK && !work)
        st = BS_ERR_MEMORY;
    for (int ch = 0; ch < c->C; ch++)
        c->noise[ch] = 0;
    for (int64_t k = 0; k < nch && st == BS_OK; k++) {
        float *x;
        int64_t n_valid;
        st = bs_batch_read(&rd, pick[k], &x, &n_valid);
        if (st == BS_OK)
            st = qc_preprocess(c, x, rd.width);
        for (int ch = 0; ch < c->C && st == BS_OK; ch++) {
            c->noise[ch] += bs_qc_noise_sigma_f(x + (size_t)ch * rd.width + c->halo, n_valid, work);
        }
    }
    for (int ch = 0; ch < c->C; ch++)
        c->noise[ch] /= (double)nch;
    bs_mem_free(work);
    bs_mem_free(pick);
    bs_batch_reader_close(&rd);
    if (st == BS_OK)
        info(c, "noise levels from %lld chunks of %lld samples", (long long)nch, (long long)len);
    return st;
}

/* --------------------------------------------------- pass A: subset, sums */

typedef struct {
    int64_t *need;   /* [K] subset spikes still to choose */
    int64_t *seen;   /* [K] spikes of the unit visited */
    bs_rng *rng;     /* [K] per-unit generators */
    float *sum;      /* [K * nt * C] waveform sums, µV */
} pass_a;

static bs_status pass_a_spike(qc_ctx *c, const float *x, int64_t s0, int64_t g, int64_t t, int u, void *arg)
{
    pass_a *a = arg;
    int64_t remaining = c->count[u] - a->seen[u]++;
    if (a->need[u] <= 0)
        return BS_OK;
    double pr = (double)a->need[u] / (double)remaining;
    if (!(bs_rng_uniform(&a->rng[u]) < pr))
        return BS_OK;
    a->need[u]--;
    c->sel_g[c->n_sel] = g;
    c->sel_t[c->n_sel] = t;
    c->sel_u[c->n_sel] = u;
    c->n_sel++;
    int64_t col = c->halo + (t - s0) - c->nbefore;
    float *s = a->sum + (size_t)u * c->nt * c->C;
    for (int ch = 0; ch < c->C; ch++) {
        const float *row = x + (size_t)ch * c->width + col;
        for (int i = 0; i < c->nt; i++)
            s[(size_t)i * c->C + ch] += row[i];
    }
    return BS_OK;
}

static double peak_value(bs_qc_peak_sign s, float v)
{
    return s == BS_QC_PEAK_BOTH ? fabs(v) : s == BS_QC_PEAK_NEG ? -(double)v : (double)v;
}

/* Templates -> main channel, peak shift, extremum amplitude, sparsity. */
static void unit_geometry(qc_ctx *c, const float *sum)
{
    const bs_probe *pr = &c->rec->probe;
    for (int u = 0; u < c->K; u++) {
        c->n_sp[u] = 0;
        c->main_ch[u] = -1;
        if (c->m[u] == 0)
            continue;
        const float *s = sum + (size_t)u * c->nt * c->C;
        float inv = 1.0f / (float)c->m[u];
        int best = 0;
        double best_v = -INFINITY;
        for (int ch = 0; ch < c->C; ch++) {
            double v = -INFINITY;
            for (int i = 0; i < c->nt; i++) {
                double q = peak_value(c->p->peak_sign, s[(size_t)i * c->C + ch] * inv);
                v = q > v ? q : v;
            }
            if (v > best_v) {
                best_v = v;
                best = ch;
            }
        }
        int pos = 0;
        double pv = -INFINITY;
        for (int i = 0; i < c->nt; i++) {
            double q = peak_value(c->p->peak_sign, s[(size_t)i * c->C + best] * inv);
            if (q > pv) {
                pv = q;
                pos = i;
            }
        }
        c->main_ch[u] = best;
        c->shift[u] = pos - c->nbefore;
        c->tamp[u] = fabs((double)(s[(size_t)pos * c->C + best] * inv));
        for (int ch = 0; ch < c->C; ch++) {
            double dx = pr->x_um[ch] - pr->x_um[best], dy = pr->y_um[ch] - pr->y_um[best];
            if (sqrt(dx * dx + dy * dy) <= c->p->sparsity_radius_um)
                c->sp[(size_t)u * c->C + c->n_sp[u]++] = ch;
        }
    }
}

/* The waveform-shape metrics of every unit from its template (qc_shape.c). */
static bs_status shape_metrics(qc_ctx *c, const float *sum)
{
    const bs_probe *pr = &c->rec->probe;
    int multi = c->C >= c->p->shape_multi_min_channels;
    size_t wb = bs_qc_shape_work_bytes(c->nt, c->C, c->p->shape_upsampling);
    void *work = bs_mem_alloc("qc/shape", wb);
    float *tm = bs_mem_alloc("qc/shape", sizeof *tm * (size_t)c->nt * (size_t)(c->C + 1));
    double *xy = bs_mem_alloc("qc/shape", sizeof *xy * 2 * (size_t)c->C);
    bs_status st = work && tm && xy ? BS_OK : BS_ERR_MEMORY;
    if (st == BS_OK && bs_qc_shape_work_init(work, c->p->shape_upsampling) != 0)
        st = bs_error(BS_ERR_MEMORY, "qc: out of memory for the upsampling filter");
    for (int u = 0; st == BS_OK && u < c->K; u++) {
        if (c->m[u] == 0)
            continue;
        const float *s = sum + (size_t)u * c->nt * c->C;
        float inv = 1.0f / (float)c->m[u];
        int n = c->n_sp[u];
        float *main_t = tm, *chan_t = tm + c->nt;
        for (int i = 0; i < c->nt; i++)
            main_t[i] = s[(size_t)i * c->C + c->main_ch[u]] * inv;
        for (int j = 0; j < n; j++) {
            int ch = c->sp[(size_t)u * c->C + j];
            for (int i = 0; i < c->nt; i++)
                chan_t[(size_t)j * c->nt + i] = s[(size_t)i * c->C + ch] * inv;
            xy[j] = pr->x_um[ch];
            xy[c->C + j] = pr->y_um[ch];
        }
        bs_qc_shape_metrics(main_t, c->nt, chan_t, n, xy, xy + c->C, multi, c->fs, c->p,
                            c->metrics + (size_t)u * BS_QC_N_METRICS, work);
    }
    bs_mem_free(work);
    bs_mem_free(tm);
    bs_mem_free(xy);
    return st;
}

size_t bs_qc_spill_spike_bytes(const bs_qc_params *p, const bs_probe *probe, double fs_hz)
{
    int wide = 0; /* most channels within the radius of one channel */
    for (int a = 0; a < probe->n_chan; a++) {
        int n = 0;
        for (int b = 0; b < probe->n_chan; b++) {
            double dx = probe->x_um[b] - probe->x_um[a], dy = probe->y_um[b] - probe->y_um[a];
            n += sqrt(dx * dx + dy * dy) <= p->sparsity_radius_um;
        }
        wide = n > wide ? n : wide;
    }
    int64_t nt = (int64_t)(p->ms_before * fs_hz / 1000.0) + (int64_t)(p->ms_after * fs_hz / 1000.0);
    return (size_t)wide * (size_t)nt * sizeof(float);
}

size_t bs_qc_disk_bytes(const bs_qc_params *p, size_t spill_spike_bytes, int64_t n_spikes, int n_units)
{
    int64_t subset = (int64_t)n_units * p->max_spikes_per_unit;
    subset = subset < n_spikes ? subset : n_spikes;
    return (size_t)n_spikes * sizeof(float) + (size_t)subset * spill_spike_bytes +
           (size_t)n_units * (BS_QC_N_METRICS + 8) * 32 + (size_t)(BS_QC_N_METRICS + 8) * 4096;
}

static bs_status run_pass_a(qc_ctx *c)
{
    pass_a a = {0};
    size_t sum_bytes = (size_t)c->K * (size_t)c->nt * (size_t)c->C * sizeof(float);
    a.need = bs_mem_alloc("qc/subset", sizeof *a.need * (size_t)c->K);
    a.seen = bs_mem_calloc("qc/subset", (size_t)c->K, sizeof *a.seen);
    a.rng = bs_mem_alloc("qc/subset", sizeof *a.rng * (size_t)c->K);
    a.sum = bs_mem_calloc("qc/template-sums", sum_bytes / sizeof(float), sizeof(float));
    bs_status st = a.need && a.seen && a.rng && a.sum ? BS_OK : BS_ERR_MEMORY;
    if (st == BS_OK) {
        for (int u = 0; u < c->K; u++) {
            a.need[u] = c->count[u] < c->p->max_spikes_per_unit ? c->count[u] : c->p->max_spikes_per_unit;
            bs_rng_seed(&a.rng[u], c->p->seed * 0x9E3779B97F4A7C15ULL + (uint64_t)c->ids[u] + 1);
        }
        st = recording_pass(c, "qc subset", pass_a_spike, &a);
    }
    if (st == BS_OK) {
        for (int64_t i = 0; i < c->n_sel; i++)
            c->m[c->sel_u[i]]++;
        unit_geometry(c, a.sum);
        st = shape_metrics(c, a.sum);
        if (st == BS_OK)
            st = qc_merge_candidates(c, a.sum);
    }
    bs_mem_free(a.need);
    bs_mem_free(a.seen);
    bs_mem_free(a.rng);
    bs_mem_free(a.sum);
    return st;
}

/* ----------------------------------------- pass B: amplitudes, waveforms */

typedef struct {
    bs_npy_writer amp;
    float *amp_buf;
    int64_t amp_n;
    FILE *spill;
    int64_t next_sel;
    int64_t spill_off; /* floats written */
    float *wf;         /* one record */
} pass_b;

static bs_status pass_b_spike(qc_ctx *c, const float *x, int64_t s0, int64_t g, int64_t t, int u, void *arg)
{
    pass_b *b = arg;
    int64_t ts = t + c->shift[u];
    if (ts < 0)
        ts = 0;
    if (ts > c->T - 1)
        ts = c->T - 1;
    b->amp_buf[b->amp_n++] = x[(size_t)c->main_ch[u] * c->width + c->halo + (ts - s0)];
    if (b->amp_n == QC_BLOCK) {
        BS_TRY(bs_npy_writer_append(&b->amp, b->amp_buf, b->amp_n));
        b->amp_n = 0;
    }
    if (b->next_sel < c->n_sel && c->sel_g[b->next_sel] == g) {
        int64_t col = c->halo + (t - s0) - c->nbefore;
        int n_sp = c->n_sp[u];
        for (int j = 0; j < n_sp; j++) {
            const float *row = x + (size_t)c->sp[(size_t)u * c->C + j] * c->width + col;
            memcpy(b->wf + (size_t)j * c->nt, row, sizeof(float) * (size_t)c->nt);
        }
        size_t nf = (size_t)n_sp * c->nt;
        if (fwrite(b->wf, sizeof(float), nf, b->spill) != nf)
            return bs_error(BS_ERR_IO, "%s: write failed: %s", c->spill_path, strerror(errno));
        c->sel_off[b->next_sel++] = b->spill_off;
        b->spill_off += (int64_t)nf;
    }
    return BS_OK;
}

static bs_status run_pass_b(qc_ctx *c)
{
    pass_b b = {0};
    char path[4400];
    BS_TRY(bs_path_join(path, sizeof path, c->stage, QC_AMP_FILE));
    int64_t row_shape[1] = {0};
    BS_TRY(bs_npy_writer_open(&b.amp, path, BS_NPY_F32, 1, row_shape));
    b.amp_buf = bs_mem_alloc("qc/amplitude-block", QC_BLOCK * sizeof *b.amp_buf);
    b.wf = bs_mem_alloc("qc/waveform-record", sizeof *b.wf * (size_t)c->C * c->nt);
    bs_status st = b.amp_buf && b.wf ? BS_OK : BS_ERR_MEMORY;
    if (st == BS_OK) {
        b.spill = fopen(c->spill_path, "w+b");
        if (!b.spill)
            st = bs_error(BS_ERR_INPUT, "%s: cannot create: %s", c->spill_path, strerror(errno));
    }
    if (st == BS_OK)
        st = recording_pass(c, "qc amplitude", pass_b_spike, &b);
    if (st == BS_OK && b.amp_n)
        st = bs_npy_writer_append(&b.amp, b.amp_buf, b.amp_n);
    if (st == BS_OK && b.next_sel != c->n_sel)
        st = bs_error(BS_ERR_INTERNAL, "qc: %lld subset spikes extracted, %lld expected", (long long)b.next_sel,
                      (long long)c->n_sel);
    if (b.spill && fflush(b.spill) != 0 && st == BS_OK)
        st = bs_error(BS_ERR_IO, "%s: write failed: %s", c->spill_path, strerror(errno));
    if (b.spill) {
        c->spill_fd = dup(fileno(b.spill));
        fclose(b.spill);
        if (c->spill_fd < 0 && st == BS_OK)
            st = bs_error(BS_ERR_INPUT, "%s: %s", c->spill_path, strerror(errno));
    }
    if (st == BS_OK)
        st = bs_npy_writer_close(&b.amp);
    else
        bs_npy_writer_abort(&b.amp);
    bs_mem_free(b.amp_buf);
    bs_mem_free(b.wf);
    return st;
}

/* ------------------------------------------------------------ memory plan */

/* Refuse before the work starts when `bytes` more would exceed the host
 * budget (the accountant would refuse the allocation later anyway). */
static bs_status fits(const qc_ctx *c, const char *what, size_t bytes)
{
    size_t budget = bs_mem_budget(BS_DEV_HOST), cur = bs_mem_current(BS_DEV_HOST);
    if (!budget || cur + bytes <= budget)
        return BS_OK;
    char a[32], b[32], d[32];
    return bs_error(BS_ERR_MEMORY,
                    "qc: %s needs %s, but only %s of the %s budget is left (%d units, %lld spikes): give more "
                    "memory (--mem) or lower --max-spikes-per-unit / --group-spikes",
                    what, bs_mem_format(bytes, a, sizeof a), bs_mem_format(budget > cur ? budget - cur : 0, b, sizeof b),
                    bs_mem_format(budget, d, sizeof d), c->K, (long long)c->S);
}

/* Bytes of the buffers held while the recording is read (template sums,
 * subset tables, two batch readers) and of the per-unit group pass. */
static size_t plan_passes(const qc_ctx *c, int64_t n_sel)
{
    int nth = omp_get_max_threads();
    int64_t max_n = 0;
    for (int u = 0; u < c->K; u++)
        max_n = c->count[u] > max_n ? c->count[u] : max_n;
    int64_t cap = c->p->group_spikes > 0 ? c->p->group_spikes : (int64_t)1 << 23;
    cap = cap < max_n ? max_n : cap;
    cap = cap > c->S ? c->S : cap;
    int64_t chunk = bs_seconds_to_samples(c->p->noise_chunk_s, c->fs);
    size_t b = (size_t)c->K * (size_t)c->nt * (size_t)c->C * sizeof(float);
    b += (size_t)n_sel * 28 + (size_t)c->K * (40 + (size_t)c->C * 4);
    b += bs_qc_shape_work_bytes(c->nt, c->C, c->p->shape_upsampling) + (size_t)c->nt * (c->C + 1) * sizeof(float) +
         (size_t)c->C * 2 * sizeof(double); /* shape_metrics, while the template sums are held */
    b += bs_batch_reader_bytes(c->C, c->rec->n_cols, c->rec->dtype, c->nb, c->halo);
    b += bs_batch_reader_bytes(c->C, c->rec->n_cols, c->rec->dtype, chunk < c->T ? chunk : c->T, c->halo);
    size_t groups = (size_t)cap * 16 + (size_t)nth * (size_t)max_n * 16 + (size_t)QC_BLOCK * 24;
    return b > groups ? b : groups;
}

/* Bytes of the PCA stage once the sparsity is known. */
static size_t plan_pca(const qc_ctx *c)
{
    size_t proj = 0, max_rec = 0, max_pts = 0;
    int max_sp = 0, k = c->p->n_components;
    for (int u = 0; u < c->K; u++) {
        proj += (size_t)c->m[u] * k * c->n_sp[u];
        size_t r = (size_t)c->m[u] * c->n_sp[u] * c->nt;
        max_rec = r > max_rec ? r : max_rec;
        max_sp = c->n_sp[u] > max_sp ? c->n_sp[u] : max_sp;
        size_t pts = (size_t)qc_neighbourhood_points(c, u);
        max_pts = pts > max_pts ? pts : max_pts;
    }
    return proj * 4 + max_rec * 4 + (size_t)c->n_sel * 40 + max_pts * ((size_t)k * max_sp * 8 + 4) +
           (size_t)c->C * (bs_ipca_scratch_bytes(c->nt, k) + 8 * (size_t)c->nt * (k + 1)) +
           bs_qc_nn_bytes((int64_t)max_pts, k * max_sp, c->p->nn_max_spikes, c->p->nn_neighbors,
                          omp_get_max_threads());
}

/* ------------------------------------------------------------------ run */

bs_status bs_qc_check_folder(const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return bs_error(BS_ERR_INPUT, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return bs_error(BS_ERR_INPUT, "%s: expected a Phy output folder, got a file", dir);
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, dir, BS_PHY_PARAMS));
    if (stat(path, &sb) != 0)
        return bs_error(BS_ERR_INPUT, "%s: not a Phy folder (params.py is missing)", dir);
    BS_TRY(bs_path_join(path, sizeof path, dir, BS_PHY_SPIKE_TIMES));
    if (stat(path, &sb) != 0)
        return bs_error(BS_ERR_INPUT, "%s: not a Phy folder (spike_times.npy is missing)", dir);
    return BS_OK;
}

static bs_status check_folder(qc_ctx *c)
{
    struct stat sb;
    char path[4200];
    BS_TRY(bs_qc_check_folder(c->dir));
    BS_TRY(bs_path_join(path, sizeof path, c->dir, BS_PHY_PARAMS));
    double fs;
    BS_TRY(bs_phy_read_sample_rate(c->dir, &fs));
    if (fabs(fs - c->rec->fs_hz) > 1e-9 * fs)
        return bs_error(BS_ERR_INPUT, "%s: sample_rate %.6g Hz, but the recording %s is sampled at %.6g Hz", path,
                        fs, c->rec->data_path, c->rec->fs_hz);
    BS_TRY(qc_col_open(&c->times, c->dir, BS_PHY_SPIKE_TIMES, 0));
    BS_TRY(qc_col_open(&c->clus, c->dir, bs_phy_spike_ids_name(c->dir), 0));
    if (c->times.n_cols != 1 || c->clus.n_cols != 1)
        return bs_error(BS_ERR_INPUT, "%s: expected one value per spike", c->times.n_cols != 1 ? c->times.r.path
                                                                                              : c->clus.r.path);
    if (c->clus.n_rows != c->times.n_rows)
        return bs_error(BS_ERR_INPUT, "%s: %lld spikes, but spike_times.npy has %lld", c->clus.r.path,
                        (long long)c->clus.n_rows, (long long)c->times.n_rows);
    c->S = c->times.n_rows;
    if (c->S == 0)
        return bs_error(BS_ERR_INPUT, "%s: the sorting has no spikes: nothing to measure", c->times.r.path);
    bs_npy_header h;
    BS_TRY(bs_path_join(path, sizeof path, c->dir, BS_PHY_CHANNEL_POSITIONS));
    if (stat(path, &sb) == 0) {
        BS_TRY(bs_npy_read_header(path, &h));
        if (h.ndim != 2 || h.shape[0] != c->C)
            return bs_error(BS_ERR_INPUT, "%s: %lld channels, but the recording's probe has %d: is this the "
                            "recording that was sorted?", path, (long long)h.shape[0], c->C);
    }
    return BS_OK;
}

static void ctx_free(qc_ctx *c)
{
    bs_phy_col_close(&c->times);
    bs_phy_col_close(&c->clus);
    qc_groups_free(&c->groups);
    if (c->spill_fd >= 0)
        close(c->spill_fd);
    if (c->spill_path[0])
        unlink(c->spill_path);
    void *bufs[] = {c->ids,    c->count, c->lut,  c->m,     c->main_ch, c->shift, c->tamp,  c->n_sp,
                    c->sp,     c->sel_g, c->sel_t, c->sel_u, c->sel_off, c->noise, c->metrics, c->scratch,
                    c->pairs};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        bs_mem_free(bufs[i]);
}

bs_status bs_qc_run(const char *out_dir, const bs_recording *rec, const bs_qc_params *p, bs_qc_summary *summary)
{
    qc_ctx c;
    memset(&c, 0, sizeof c);
    c.dir = out_dir;
    c.rec = rec;
    c.p = p;
    c.fs = rec->fs_hz;
    c.C = rec->probe.n_chan;
    c.T = rec->n_samples;
    c.spill_fd = -1;
    c.times.r.fd = c.clus.r.fd = -1;
    double t_start = bs_now_s();
    bs_status st = check_folder(&c);
    if (st == BS_OK && (p->max_spikes_per_unit < 1 || p->n_components < 1 || c.C < 1))
        st = bs_error(BS_ERR_INPUT, "qc: invalid parameters or no channels");
    if (st == BS_OK)
        st = qc_read_groups(out_dir, &c.groups);
    if (st == BS_OK)
        st = scan_spikes(&c);
    if (st == BS_OK)
        info(&c, "%d units, %lld spikes, %d channels, %.1f s of recording", c.K, (long long)c.S, c.C,
             (double)c.T / c.fs);
    /* shapes */
    /* truncated, not bs_seconds_to_samples: SpikeInterface's int(ms_before * fs / 1000) */
    c.nbefore = (int)(p->ms_before * c.fs / 1000.0);
    c.nafter = (int)(p->ms_after * c.fs / 1000.0);
    c.nt = c.nbefore + c.nafter;
    c.nb = bs_seconds_to_samples(p->batch_s, c.fs);
    if (c.nb < 1)
        c.nb = 1;
    c.halo = bs_qc_preprocess_halo(c.fs);
    if (c.halo < c.nbefore + c.nafter + 1)
        c.halo = c.nbefore + c.nafter + 1;
    c.width = c.nb + 2 * c.halo;
    if (st == BS_OK && (c.nt < 1 || c.nt < p->n_components))
        st = bs_error(BS_ERR_INPUT, "qc: the waveform window (%d samples at %.6g Hz) must hold at least %d samples",
                      c.nt, c.fs, p->n_components);
    if (st == BS_OK)
        st = bs_highpass_design(p->highpass_order, p->highpass_hz, c.fs, &c.hp);
    if (st == BS_OK) {
        int nth = omp_get_max_threads();
        int64_t wmax = c.width > bs_seconds_to_samples(p->noise_chunk_s, c.fs) + 2 * c.halo
                           ? c.width
                           : bs_seconds_to_samples(p->noise_chunk_s, c.fs) + 2 * c.halo;
        size_t a = bs_highpass_scratch_bytes(&c.hp, c.C, wmax, nth), b = bs_car_scratch_bytes(c.C, wmax, nth);
        c.scratch_bytes = a > b ? a : b;
        c.scratch = bs_mem_alloc("qc/preprocess-scratch", c.scratch_bytes ? c.scratch_bytes : 1);
        if (!c.scratch)
            st = BS_ERR_MEMORY;
    }
    /* per-unit arrays */
    if (st == BS_OK) {
        size_t K = (size_t)c.K;
        c.m = bs_mem_calloc("qc/units", K, sizeof *c.m);
        c.main_ch = bs_mem_calloc("qc/units", K, sizeof *c.main_ch);
        c.shift = bs_mem_calloc("qc/units", K, sizeof *c.shift);
        c.tamp = bs_mem_calloc("qc/units", K, sizeof *c.tamp);
        c.n_sp = bs_mem_calloc("qc/units", K, sizeof *c.n_sp);
        c.sp = bs_mem_calloc("qc/sparsity", K * (size_t)c.C, sizeof *c.sp);
        c.noise = bs_mem_calloc("qc/noise", (size_t)c.C, sizeof *c.noise);
        c.metrics = bs_mem_alloc("qc/metrics", K * BS_QC_N_METRICS * sizeof *c.metrics);
        int64_t n_sel = 0;
        for (int u = 0; u < c.K; u++)
            n_sel += c.count[u] < p->max_spikes_per_unit ? c.count[u] : p->max_spikes_per_unit;
        c.n_sel_max = n_sel;
        c.sel_g = bs_mem_alloc("qc/subset", sizeof *c.sel_g * (size_t)(n_sel + 1));
        c.sel_t = bs_mem_alloc("qc/subset", sizeof *c.sel_t * (size_t)(n_sel + 1));
        c.sel_u = bs_mem_alloc("qc/subset", sizeof *c.sel_u * (size_t)(n_sel + 1));
        c.sel_off = bs_mem_alloc("qc/subset", sizeof *c.sel_off * (size_t)(n_sel + 1));
        if (!(c.m && c.main_ch && c.shift && c.tamp && c.n_sp && c.sp && c.noise && c.metrics && c.sel_g &&
              c.sel_t && c.sel_u && c.sel_off))
            st = BS_ERR_MEMORY;
        for (size_t i = 0; c.metrics && i < K * BS_QC_N_METRICS; i++)
            c.metrics[i] = NAN;
    }
    if (st == BS_OK) {
        char qc_dir[4200];
        st = bs_path_join(qc_dir, sizeof qc_dir, out_dir, ".stages");
        if (st == BS_OK)
            st = bs_path_join(c.stage, sizeof c.stage, qc_dir, "qc");
        if (st == BS_OK)
            st = bs_mkdir_p(c.stage);
        if (st == BS_OK)
            st = bs_path_join(c.spill_path, sizeof c.spill_path, c.stage, "subset_waveforms.tmp");
    }
    if (st == BS_OK)
        st = fits(&c, "reading the recording", plan_passes(&c, c.n_sel_max));
    if (st == BS_OK)
        st = noise_levels(&c);
    if (st == BS_OK)
        st = run_pass_a(&c);
    if (st == BS_OK)
        st = fits(&c, "the PCA metrics", plan_pca(&c));
    if (st == BS_OK)
        st = run_pass_b(&c);
    if (st == BS_OK)
        st = qc_pca_metrics(&c);
    if (st == BS_OK)
        st = qc_unit_metrics(&c);
    if (st == BS_OK) /* presence counts, partner lists, spike blocks, a ring of recent spikes (grows if needed) */
        st = fits(&c, "the merge proposals",
                  (size_t)c.K * ((size_t)(p->merge_presence_bins > 0 ? p->merge_presence_bins : 1) * 8 + 8) +
                      (size_t)c.n_pairs * 16 + (size_t)QC_BLOCK * 16 + 1024 * 12);
    if (st == BS_OK)
        st = qc_merge_trains(&c);
    if (st == BS_OK)
        st = qc_write_outputs(&c, summary);
    if (st == BS_OK)
        info(&c, "done in %.1f s", bs_now_s() - t_start);
    ctx_free(&c);
    return st;
}
