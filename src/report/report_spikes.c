/*
 * report_spikes.c - similar units, and one streamed pass over the per-spike
 * files that fills everything drawn per unit.
 *
 * Similar units: for unit u with template t, the n_similar other units v
 * with the largest similar_templates[t][template of v] (ties: lower index).
 * Without similar_templates.npy, the nearest units by template position.
 * Every (u, v) becomes an unordered pair (a < b) whose cross-correlogram is
 * computed.
 *
 * The pass reads spike_times, the cluster ids, amplitudes and spike_positions
 * in blocks of RP_BLOCK rows and, per spike:
 *   - sums amplitude and position per unit (means in the table);
 *   - keeps every stride-th spike of its unit, stride = ceil(n / cap), so at
 *     most `spikes_per_unit` spikes evenly spread over the unit's train are
 *     drawn (offsets are known from the counts, no reallocation);
 *   - correlograms: each unit keeps a ring of its last RP_RING spike times.
 *     A new spike of u at t pairs with the ring of u (autocorrelogram, |lag|
 *     bins of 0.5 ms over [0, 50) ms) and with the rings of u's partner units
 *     (lag = t_b - t_a for pair (a, b), bins of 1 ms over [-50, 50) ms:
 *     bin = floor((lag + 50 ms) / 1 ms), in samples at fs). Each pair of
 *     spikes is counted once, when its later spike arrives. The pass is
 *     O(spikes x partners x spikes within 50 ms) and needs no spike train in
 *     RAM. A unit that fires more than RP_RING spikes within 50 ms would lose
 *     pairs: that is detected and listed on the page;
 *   - without driftmap.npy, adds the spike to the drift map (report_drift.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../mem/mem.h"
#include "report_internal.h"

/* Insert (v, s) into the top-n list (descending s, ties to the lower v). */
static void top_insert(int32_t *unit, float *score, int n, int32_t v, float s)
{
    if (n == 0 || (unit[n - 1] >= 0 && !(s > score[n - 1])))
        return;
    int k = n - 1;
    while (k > 0 && (unit[k - 1] < 0 || s > score[k - 1])) {
        unit[k] = unit[k - 1];
        score[k] = score[k - 1];
        k--;
    }
    unit[k] = v;
    score[k] = s;
}

static bs_status similar_from_file(rp_data *d, int *used)
{
    *used = 0;
    if (!bs_phy_has(d->dir, BS_PHY_SIMILAR_TEMPLATES))
        return BS_OK;
    bs_phy_col c = BS_PHY_COL_INIT;
    BS_TRY(rp_col_open(&c, d->dir, BS_PHY_SIMILAR_TEMPLATES, 0, 1));
    bs_status st = BS_OK;
    double *row = NULL;
    int64_t K = c.n_rows;
    if (c.n_cols != K || (d->n_templates && K != d->n_templates)) {
        rp_note(d, "similar_templates.npy is %lld x %lld, expected %lld x %lld: similar units by position instead",
                (long long)c.n_rows, (long long)c.n_cols, (long long)d->n_templates, (long long)d->n_templates);
        goto done;
    }
    row = bs_mem_alloc("report/similar", (size_t)K * sizeof *row);
    if (!row) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    for (int64_t u = 0; u < d->n_units; u++) {
        int32_t t = d->tmpl[u];
        if (t < 0 || t >= K)
            continue;
        if ((st = bs_phy_col_f64(&c, t, 1, row)) != BS_OK)
            goto done;
        for (int64_t v = 0; v < d->n_units; v++) {
            int32_t tv = d->tmpl[v];
            if (v != u && tv >= 0 && tv < K && isfinite(row[tv]))
                top_insert(d->sim_unit + u * d->n_sim, d->sim_score + u * d->n_sim, d->n_sim, (int32_t)v,
                           (float)row[tv]);
        }
    }
    *used = 1;
    d->sim_source = BS_PHY_SIMILAR_TEMPLATES;
done:
    bs_phy_col_close(&c);
    bs_mem_free(row);
    return st;
}

static int cmp_pair(const void *a, const void *b)
{
    const int32_t *x = a, *y = b;
    return x[0] != y[0] ? (x[0] > y[0]) - (x[0] < y[0]) : (x[1] > y[1]) - (x[1] < y[1]);
}

bs_status rp_find_similar(rp_data *d)
{
    int64_t U = d->n_units;
    d->n_sim = U > 1 ? (d->p.n_similar < U - 1 ? d->p.n_similar : (int)(U - 1)) : 0;
    size_t ns = (size_t)U * d->n_sim + 1;
    d->sim_unit = bs_mem_alloc("report/similar", ns * sizeof(int32_t));
    d->sim_score = bs_mem_alloc("report/similar", ns * sizeof(float));
    if (!d->sim_unit || !d->sim_score)
        return BS_ERR_MEMORY;
    for (size_t i = 0; i < ns; i++) {
        d->sim_unit[i] = -1;
        d->sim_score[i] = 0;
    }
    int used = 0;
    if (d->n_sim)
        BS_TRY(similar_from_file(d, &used));
    if (d->n_sim && !used) {
        /* nearest by template position; score = -distance (µm) so larger is closer */
        for (int64_t u = 0; u < U; u++) {
            if (!isfinite(d->tpos[2 * u]))
                continue;
            for (int64_t v = 0; v < U; v++) {
                if (v == u || !isfinite(d->tpos[2 * v]))
                    continue;
                float dx = d->tpos[2 * u] - d->tpos[2 * v], dy = d->tpos[2 * u + 1] - d->tpos[2 * v + 1];
                top_insert(d->sim_unit + u * d->n_sim, d->sim_score + u * d->n_sim, d->n_sim, (int32_t)v,
                           -sqrtf(dx * dx + dy * dy));
            }
        }
        d->sim_source = "nearest template positions (score = -distance in µm)";
        rp_note(d, "similar_templates.npy absent or unusable: similar units are the nearest ones");
    }
    /* unordered pairs */
    d->pair = bs_mem_alloc("report/ccg", ns * 2 * sizeof(int32_t));
    if (!d->pair)
        return BS_ERR_MEMORY;
    int64_t P = 0;
    for (int64_t u = 0; u < U; u++)
        for (int k = 0; k < d->n_sim; k++) {
            int32_t v = d->sim_unit[u * d->n_sim + k];
            if (v < 0)
                continue;
            d->pair[2 * P] = (int32_t)(u < v ? u : v);
            d->pair[2 * P + 1] = (int32_t)(u < v ? v : u);
            P++;
        }
    qsort(d->pair, (size_t)P, 2 * sizeof(int32_t), cmp_pair);
    int64_t m = 0;
    for (int64_t i = 0; i < P; i++)
        if (m == 0 || cmp_pair(d->pair + 2 * i, d->pair + 2 * (m - 1)) != 0) {
            d->pair[2 * m] = d->pair[2 * i];
            d->pair[2 * m + 1] = d->pair[2 * i + 1];
            m++;
        }
    d->n_pairs = m;
    d->pair_score = bs_mem_alloc("report/ccg", ((size_t)m + 1) * sizeof(float));
    d->ccg = bs_mem_calloc("report/ccg", (size_t)m * RP_CCG_BINS + 1, sizeof(uint32_t));
    d->acg = bs_mem_calloc("report/ccg", (size_t)U * RP_ACG_BINS + 1, sizeof(uint32_t));
    d->ring_full = bs_mem_calloc("report/ccg", (size_t)U + 1, 1);
    if (!d->pair_score || !d->ccg || !d->acg || !d->ring_full)
        return BS_ERR_MEMORY;
    for (int64_t i = 0; i < m; i++) {
        int32_t a = d->pair[2 * i], b = d->pair[2 * i + 1];
        d->pair_score[i] = NAN;
        for (int k = 0; k < d->n_sim; k++) {
            if (d->sim_unit[a * d->n_sim + k] == b)
                d->pair_score[i] = d->sim_score[a * d->n_sim + k];
            if (d->sim_unit[b * d->n_sim + k] == a && isnan(d->pair_score[i]))
                d->pair_score[i] = d->sim_score[b * d->n_sim + k];
        }
    }
    return BS_OK;
}

/* ---- the pass ---- */

typedef struct {
    int64_t *t;      /* (U, RP_RING) recent spike times, samples */
    int32_t *n;      /* (U) entries filled */
    int32_t *head;   /* (U) next slot */
    int64_t *poff;   /* (U + 1) partner offsets */
    int32_t *pv;     /* partner unit */
    int32_t *pidx;   /* pair index */
    uint8_t *pis_a;  /* 1: u is the pair's a (lag = t_v - t_u) */
    int64_t *seen;   /* (U) spikes of the unit so far */
    int64_t *stride; /* (U) subsampling stride */
} pass_state;

static void free_state(pass_state *s)
{
    bs_mem_free(s->t);
    bs_mem_free(s->n);
    bs_mem_free(s->head);
    bs_mem_free(s->poff);
    bs_mem_free(s->pv);
    bs_mem_free(s->pidx);
    bs_mem_free(s->pis_a);
    bs_mem_free(s->seen);
    bs_mem_free(s->stride);
}

static bs_status init_state(rp_data *d, pass_state *s)
{
    memset(s, 0, sizeof *s);
    size_t U = (size_t)d->n_units + 1, P = (size_t)d->n_pairs + 1;
    s->t = bs_mem_alloc("report/ccg_ring", U * RP_RING * sizeof(int64_t));
    s->n = bs_mem_calloc("report/ccg_ring", U, sizeof(int32_t));
    s->head = bs_mem_calloc("report/ccg_ring", U, sizeof(int32_t));
    s->poff = bs_mem_calloc("report/ccg_ring", U + 1, sizeof(int64_t));
    s->pv = bs_mem_alloc("report/ccg_ring", 2 * P * sizeof(int32_t));
    s->pidx = bs_mem_alloc("report/ccg_ring", 2 * P * sizeof(int32_t));
    s->pis_a = bs_mem_alloc("report/ccg_ring", 2 * P);
    s->seen = bs_mem_calloc("report/subsample", U, sizeof(int64_t));
    s->stride = bs_mem_alloc("report/subsample", U * sizeof(int64_t));
    d->sub_off = bs_mem_alloc("report/subsample", (U + 1) * sizeof(uint32_t));
    if (!s->t || !s->n || !s->head || !s->poff || !s->pv || !s->pidx || !s->pis_a || !s->seen || !s->stride ||
        !d->sub_off)
        return BS_ERR_MEMORY;
    /* partner lists (CSR) */
    for (int64_t i = 0; i < d->n_pairs; i++) {
        s->poff[d->pair[2 * i] + 1]++;
        s->poff[d->pair[2 * i + 1] + 1]++;
    }
    for (int64_t u = 0; u < d->n_units; u++)
        s->poff[u + 1] += s->poff[u];
    int64_t *fill = s->seen; /* zero, reused as a cursor then cleared */
    for (int64_t i = 0; i < d->n_pairs; i++)
        for (int side = 0; side < 2; side++) {
            int32_t u = d->pair[2 * i + side], v = d->pair[2 * i + 1 - side];
            int64_t k = s->poff[u] + fill[u]++;
            s->pv[k] = v;
            s->pidx[k] = (int32_t)i;
            s->pis_a[k] = side == 0;
        }
    memset(fill, 0, (size_t)d->n_units * sizeof(int64_t));
    /* subsample slots */
    int64_t cap = d->p.spikes_per_unit, total = 0;
    for (int64_t u = 0; u < d->n_units; u++) {
        s->stride[u] = (d->count[u] + cap - 1) / cap;
        if (s->stride[u] < 1)
            s->stride[u] = 1;
        d->sub_off[u] = (uint32_t)total;
        total += (d->count[u] + s->stride[u] - 1) / s->stride[u];
    }
    d->sub_off[d->n_units] = (uint32_t)total;
    size_t nsub = (size_t)total + 1;
    d->sub_t = bs_mem_alloc("report/subsample", nsub * sizeof(float));
    d->sub_amp = bs_mem_alloc("report/subsample", nsub * sizeof(float));
    d->sub_x = bs_mem_alloc("report/subsample", nsub * sizeof(float));
    d->sub_y = bs_mem_alloc("report/subsample", nsub * sizeof(float));
    if (!d->sub_t || !d->sub_amp || !d->sub_x || !d->sub_y)
        return BS_ERR_MEMORY;
    /* every spike, for splits */
    if (!d->have_amplitudes) {
        rp_note(d, "amplitudes.npy absent: units cannot be split in the page");
    } else if (d->n_spikes > d->p.split_max_spikes) {
        rp_note(d, "%lld spikes, more than the %lld the page holds for splitting (boundsort report --split-spikes): "
                "units cannot be split in the page", (long long)d->n_spikes, (long long)d->p.split_max_spikes);
    } else {
        d->all_off = bs_mem_alloc("report/split", (U + 1) * sizeof(uint32_t));
        d->all_t = bs_mem_alloc("report/split", ((size_t)d->n_spikes + 1) * sizeof(uint16_t));
        d->all_amp = bs_mem_alloc("report/split", ((size_t)d->n_spikes + 1) * sizeof(float));
        if (!d->all_off || !d->all_t || !d->all_amp) { /* optional: the page works without it */
            bs_mem_free(d->all_off);
            bs_mem_free(d->all_t);
            bs_mem_free(d->all_amp);
            d->all_off = NULL;
            d->all_t = NULL;
            d->all_amp = NULL;
            rp_note(d, "every spike (%.1f MB) does not fit the memory budget (--mem): units cannot be split in the page",
                    (double)d->n_spikes * (sizeof(uint16_t) + sizeof(float)) / 1e6);
            return BS_OK;
        }
        d->all_off[0] = 0;
        for (int64_t u = 0; u < d->n_units; u++)
            d->all_off[u + 1] = d->all_off[u] + (uint32_t)d->count[u];
    }
    return BS_OK;
}

/* Where v lies in [lo, hi], clamped to [0, 1] (0.5 for an empty range): the page quantizes every value
   as lo + q / levels * (hi - lo), q = round(frac x levels). */
static double frac_of(double v, double lo, double hi)
{
    double r = hi > lo ? (v - lo) / (hi - lo) : 0.5;
    return r < 0 ? 0 : r > 1 ? 1 : r;
}

/* t (s) quantized over [0, hi] to 0..65534 (65535: not finite), as emit_q16 and the page's deq() */
static uint16_t q16(double t, double hi)
{
    return isfinite(t) ? (uint16_t)lrint(frac_of(t, 0, hi) * 65534) : 65535;
}

/* Correlogram updates for a spike of unit u at ts (samples). */
static void correlate(rp_data *d, pass_state *s, int32_t u, int64_t ts, double acg_bw, double ccg_bw, double half)
{
    int64_t *ring = s->t + (size_t)u * RP_RING;
    int n = s->n[u], h = s->head[u];
    int k = 0;
    for (; k < n; k++) {
        int64_t lag = ts - ring[(h - 1 - k + 2 * RP_RING) % RP_RING];
        double x = (double)lag / acg_bw;
        if (x >= RP_ACG_BINS)
            break;
        d->acg[(size_t)u * RP_ACG_BINS + (int)x]++;
    }
    if (k == RP_RING)
        d->ring_full[u] = 1;
    for (int64_t e = s->poff[u]; e < s->poff[u + 1]; e++) {
        int32_t v = s->pv[e];
        const int64_t *rv = s->t + (size_t)v * RP_RING;
        int nv = s->n[v], hv = s->head[v];
        uint32_t *hist = d->ccg + (size_t)s->pidx[e] * RP_CCG_BINS;
        for (k = 0; k < nv; k++) {
            int64_t back = ts - rv[(hv - 1 - k + 2 * RP_RING) % RP_RING];
            if ((double)back > half)
                break;
            int64_t lag = s->pis_a[e] ? -back : back;
            double x = ((double)lag + half) / ccg_bw;
            if (x >= 0 && x < RP_CCG_BINS)
                hist[(int)x]++;
        }
        if (k == RP_RING)
            d->ring_full[v] = 1;
    }
    ring[h] = ts;
    s->head[u] = (h + 1) % RP_RING;
    if (n < RP_RING)
        s->n[u] = n + 1;
}

bs_status rp_spike_pass(rp_data *d)
{
    pass_state s;
    bs_phy_col ct = BS_PHY_COL_INIT, cc = BS_PHY_COL_INIT, ca = BS_PHY_COL_INIT, cp = BS_PHY_COL_INIT;
    double *bt = NULL, *bc = NULL, *ba = NULL, *bp = NULL;
    bs_status st = init_state(d, &s);
    if (st != BS_OK)
        goto done;
    const char *ids_name = d->have_clusters ? BS_PHY_SPIKE_CLUSTERS : BS_PHY_SPIKE_TEMPLATES;
    if ((st = rp_col_open(&ct, d->dir, BS_PHY_SPIKE_TIMES, 1, RP_BLOCK)) != BS_OK ||
        (st = rp_col_open(&cc, d->dir, ids_name, 1, RP_BLOCK)) != BS_OK)
        goto done;
    if (d->have_amplitudes) {
        if ((st = rp_col_open(&ca, d->dir, BS_PHY_AMPLITUDES, 1, RP_BLOCK)) != BS_OK)
            goto done;
        if (ca.n_rows != d->n_spikes) {
            st = bs_error(BS_ERR_INPUT, "%s: expected %lld rows (one per spike), got %lld", ca.r.path,
                          (long long)d->n_spikes, (long long)ca.n_rows);
            goto done;
        }
    }
    if (d->have_positions) {
        if ((st = rp_col_open(&cp, d->dir, BS_PHY_SPIKE_POSITIONS, 0, RP_BLOCK)) != BS_OK)
            goto done;
        if (cp.n_rows != d->n_spikes || cp.n_cols < 2) {
            st = bs_error(BS_ERR_INPUT, "%s: expected %lld rows (one per spike) of x, y in µm, got %lld x %lld",
                          cp.r.path, (long long)d->n_spikes, (long long)cp.n_rows, (long long)cp.n_cols);
            goto done;
        }
    }
    bt = bs_mem_alloc("report/block", RP_BLOCK * sizeof *bt);
    bc = bs_mem_alloc("report/block", RP_BLOCK * sizeof *bc);
    ba = bs_mem_alloc("report/block", RP_BLOCK * sizeof *ba);
    bp = bs_mem_alloc("report/block", RP_BLOCK * (size_t)(cp.n_cols > 2 ? cp.n_cols : 2) * sizeof *bp);
    if (!bt || !bc || !ba || !bp) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    double acg_bw = RP_ACG_BIN_MS * 1e-3 * d->fs_hz, ccg_bw = RP_CCG_BIN_MS * 1e-3 * d->fs_hz;
    double half = RP_CCG_HALF_MS * 1e-3 * d->fs_hz;
    for (int64_t r0 = 0; r0 < d->n_spikes; r0 += RP_BLOCK) {
        int64_t n = d->n_spikes - r0 < RP_BLOCK ? d->n_spikes - r0 : RP_BLOCK;
        if ((st = bs_phy_col_f64(&ct, r0, n, bt)) != BS_OK || (st = bs_phy_col_f64(&cc, r0, n, bc)) != BS_OK ||
            (d->have_amplitudes && (st = bs_phy_col_f64(&ca, r0, n, ba)) != BS_OK) ||
            (d->have_positions && (st = bs_phy_col_f64(&cp, r0, n, bp)) != BS_OK))
            goto done;
        for (int64_t i = 0; i < n; i++) {
            int64_t id = (int64_t)bc[i];
            int32_t u = id >= 0 && id <= d->max_id ? d->id_to_unit[id] : -1;
            if (u < 0) { /* the first pass checked every id: the file changed since */
                st = bs_error(BS_ERR_INPUT, "%s: row %lld: cluster id %lld was not there in the first pass (file "
                              "changed while reading?)", cc.r.path, (long long)(r0 + i), (long long)id);
                goto done;
            }
            double amp = d->have_amplitudes ? ba[i] : NAN;
            double x = NAN, y = NAN;
            if (d->have_positions) {
                x = bp[i * cp.n_cols];
                y = bp[i * cp.n_cols + 1];
            }
            if (isfinite(amp))
                d->amp_sum[u] += amp;
            if (isfinite(x) && isfinite(y)) {
                d->pos_sum[2 * u] += x;
                d->pos_sum[2 * u + 1] += y;
                d->pos_n[u]++;
            }
            int64_t k = s.seen[u]++;
            if (k >= d->count[u]) { /* the subsample slots were sized from the first pass */
                st = bs_error(BS_ERR_INPUT, "%s: cluster id %lld has more spikes than in the first pass (file changed "
                              "while reading?)", cc.r.path, (long long)id);
                goto done;
            }
            if (k % s.stride[u] == 0) {
                size_t slot = d->sub_off[u] + (size_t)(k / s.stride[u]);
                d->sub_t[slot] = (float)(bt[i] / d->fs_hz);
                d->sub_amp[slot] = (float)amp;
                d->sub_x[slot] = (float)x;
                d->sub_y[slot] = (float)y;
            }
            if (d->all_t) {
                d->all_t[d->all_off[u] + k] = q16(bt[i] / d->fs_hz, (float)d->duration_s); /* the page's t_hi */
                d->all_amp[d->all_off[u] + k] = (float)amp;
            }
            if (d->dmap_fill_in_pass) {
                double depth = d->have_positions ? y : d->tpos[2 * u + 1];
                rp_drift_add(d, bt[i] / d->fs_hz, depth, d->have_amplitudes ? amp : 1.0);
            }
            if (d->tr_n)
                rp_traces_add(d, (int64_t)bt[i], u);
            correlate(d, &s, u, (int64_t)bt[i], acg_bw, ccg_bw, half);
        }
    }
    int64_t n_full = 0;
    for (int64_t u = 0; u < d->n_units; u++)
        n_full += d->ring_full[u];
    if (n_full)
        rp_note(d, "%lld unit%s fire more than %d spikes within 50 ms: their correlograms miss some pairs",
                (long long)n_full, n_full == 1 ? "" : "s", RP_RING);
done:
    free_state(&s);
    bs_phy_col_close(&ct);
    bs_phy_col_close(&cc);
    bs_phy_col_close(&ca);
    bs_phy_col_close(&cp);
    bs_mem_free(bt);
    bs_mem_free(bc);
    bs_mem_free(ba);
    bs_mem_free(bp);
    return st;
}

/* ---- emission ---- */

/* Quantize v[i] (i in [0, n)) to 0..65534 over [lo, hi]; 65535 = missing. */
static void emit_q16(rp_json *j, const char *key, const float *v, size_t n, const float *lo, const float *hi,
                     const uint32_t *off, int64_t n_units)
{
    uint16_t *q = bs_mem_alloc("report/emit", (n + 1) * sizeof *q);
    if (!q) { /* the page still loads; the plot says the data is missing */
        rpj_null(j, key);
        return;
    }
    int64_t u = 0;
    for (size_t i = 0; i < n; i++) {
        while (off && u + 1 < n_units && i >= off[u + 1])
            u++;
        float l = off ? lo[u] : lo[0], h = off ? hi[u] : hi[0];
        q[i] = isfinite(v[i]) ? (uint16_t)lrint(frac_of(v[i], l, h) * 65534) : 65535;
    }
    rpj_typed(j, key, "u16", q, n);
    bs_mem_free(q);
}

static void range_of(const float *v, size_t n, float *lo, float *hi)
{
    *lo = INFINITY;
    *hi = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) {
            *lo = v[i] < *lo ? v[i] : *lo;
            *hi = v[i] > *hi ? v[i] : *hi;
        }
    if (!(*lo <= *hi))
        *lo = *hi = 0;
}

/* Every spike for splits: "all": {off (u32, n_units + 1), t (u16 over [0, t_hi]), amp (u8: 0..254 over
   [amp_lo[u], amp_hi[u]], the unit's own range; 255 = not finite), amp_lo, amp_hi}, or null. */
static void emit_all(rp_json *j, const rp_data *d)
{
    size_t U = (size_t)d->n_units, n = (size_t)d->n_spikes;
    float *lo = d->all_t ? bs_mem_alloc("report/emit", (U + 1) * sizeof(float)) : NULL;
    float *hi = lo ? bs_mem_alloc("report/emit", (U + 1) * sizeof(float)) : NULL;
    uint8_t *q = hi ? bs_mem_alloc("report/emit", n + 1) : NULL;
    if (!q) { /* the page then offers no split */
        rpj_null(j, "all");
        goto done;
    }
    for (size_t u = 0; u < U; u++) {
        uint32_t a = d->all_off[u], b = d->all_off[u + 1];
        range_of(d->all_amp + a, b - a, &lo[u], &hi[u]);
        for (uint32_t k = a; k < b; k++) {
            float v = d->all_amp[k];
            q[k] = isfinite(v) ? (uint8_t)lrint(frac_of(v, lo[u], hi[u]) * 254) : 255;
        }
    }
    rpj_obj(j, "all");
    rpj_typed(j, "off", "u32", d->all_off, U + 1);
    rpj_typed(j, "t", "u16", d->all_t, n);
    rpj_typed(j, "amp", "u8", q, n);
    rpj_typed(j, "amp_lo", "f32", lo, U);
    rpj_typed(j, "amp_hi", "f32", hi, U);
    rpj_end_obj(j);
done:
    bs_mem_free(lo);
    bs_mem_free(hi);
    bs_mem_free(q);
}

void rp_emit_spikes(rp_json *j, const rp_data *d)
{
    size_t U = (size_t)d->n_units, n = d->sub_off[U];
    rpj_obj(j, "spikes");
    rpj_int(j, "cap", d->p.spikes_per_unit);
    rpj_bool(j, "have_amp", d->have_amplitudes);
    rpj_bool(j, "have_pos", d->have_positions);
    rpj_typed(j, "off", "u32", d->sub_off, U + 1);
    float t_lo = 0, t_hi = (float)d->duration_s;
    rpj_num(j, "t_hi", t_hi);
    emit_q16(j, "t", d->sub_t, n, &t_lo, &t_hi, NULL, 0);
    float *alo = bs_mem_alloc("report/emit", (U + 1) * sizeof(float));
    float *ahi = bs_mem_alloc("report/emit", (U + 1) * sizeof(float));
    if (alo && ahi) {
        for (size_t u = 0; u < U; u++)
            range_of(d->sub_amp + d->sub_off[u], d->sub_off[u + 1] - d->sub_off[u], &alo[u], &ahi[u]);
        rpj_typed(j, "amp_lo", "f32", alo, U);
        rpj_typed(j, "amp_hi", "f32", ahi, U);
        emit_q16(j, "amp", d->sub_amp, n, alo, ahi, d->sub_off, d->n_units);
    }
    bs_mem_free(alo);
    bs_mem_free(ahi);
    float xlo, xhi, ylo, yhi;
    range_of(d->sub_x, n, &xlo, &xhi);
    range_of(d->sub_y, n, &ylo, &yhi);
    rpj_num(j, "x_lo", xlo);
    rpj_num(j, "x_hi", xhi);
    rpj_num(j, "y_lo", ylo);
    rpj_num(j, "y_hi", yhi);
    emit_q16(j, "x", d->sub_x, n, &xlo, &xhi, NULL, 0);
    emit_q16(j, "y", d->sub_y, n, &ylo, &yhi, NULL, 0);
    emit_all(j, d);
    rpj_end_obj(j);

    rpj_obj(j, "acg");
    rpj_num(j, "bin_ms", RP_ACG_BIN_MS);
    rpj_int(j, "n_bins", RP_ACG_BINS);
    rpj_counts(j, "counts", d->acg, U * RP_ACG_BINS);
    rpj_arr(j, "ring_full");
    for (size_t u = 0; u < U; u++)
        if (d->ring_full[u])
            rpj_int(j, NULL, (int64_t)u);
    rpj_end_arr(j);
    rpj_end_obj(j);

    rpj_obj(j, "similar");
    rpj_str(j, "source", d->sim_source);
    rpj_int(j, "n", d->n_sim);
    rpj_typed(j, "unit", "i32", d->sim_unit, U * d->n_sim);
    rpj_typed(j, "score", "f32", d->sim_score, U * d->n_sim);
    rpj_end_obj(j);

    rpj_obj(j, "ccg");
    rpj_num(j, "bin_ms", RP_CCG_BIN_MS);
    rpj_num(j, "half_ms", RP_CCG_HALF_MS);
    rpj_int(j, "n_bins", RP_CCG_BINS);
    rpj_typed(j, "pairs", "i32", d->pair, (size_t)d->n_pairs * 2);
    rpj_typed(j, "score", "f32", d->pair_score, (size_t)d->n_pairs);
    rpj_counts(j, "counts", d->ccg, (size_t)d->n_pairs * RP_CCG_BINS);
    rpj_end_obj(j);
}
