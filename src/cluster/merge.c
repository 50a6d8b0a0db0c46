/*
 * merge.c - merges after template matching (docs/ALGORITHM.md §9.2–9.6).
 *
 * Similarity. For channel-sparse waveforms a, b (each on its own ascending
 * channel list), s(τ) = Σ_{c common} Σ_u a[c,u]·b[c,u+τ] / ((1e-6 + ‖a‖)(1e-6 + ‖b‖))
 * for |τ| ≤ max_lag (terms with u+τ outside the window are dropped). The
 * best τ is searched in the order 0, −1, +1, −2, ... and only a strictly
 * larger value replaces the best, so ties go to the smaller |τ|. A positive
 * τ means b is a delayed by τ samples. Templates without a common channel
 * have similarity exactly 0 (lag 0) and cost nothing more than the channel
 * comparison.
 *
 * CCG-guided merge. Clusters are visited by decreasing spike count (smaller
 * id on ties). A cluster k whose own train passes the ACG test may absorb
 * any other live cluster j with s ≥ r_thresh, tried by decreasing s, whose
 * train is cross-refractory with k's, when (with amplitudes) their mean
 * amplitudes are within a factor max_amp_ratio (3) of each other: matching
 * fits a small unit's spike that overlaps a large unit's badly or not at all
 * (the large one's residual hides it), so a small unit beside a large one of
 * similar shape shows a dip in their correlogram that is no refractoriness
 * (on the dense 384-channel bench case a unit of amplitude 7 was merged into
 * one of 24). Where the CCG cannot show cross-
 * refractoriness for lack of spikes (bs_ccg_underpowered: a fragment of a few
 * dozen spikes, or two pieces of one unit that drift made fire in different
 * periods) or shows it without significance (Q12 >= 0.05: two pieces of one
 * unit split by drift state, whose trains overlap in time too little for the
 * test's power), a pair with s ≥ r_thresh_underpowered (0.8) merges when the
 * central window holds no more violations than the rate test allows
 * (R12 < ccg_threshold) and the two mean spike amplitudes agree within 20 %
 * (|2(a_k − a_j)/(a_k + a_j)| < 0.2, Kilosort's template-norm rule; a
 * cluster of noise crossings beside a unit has a similar shape but about
 * half its amplitude). A pair with s ≥ r_thresh_underpowered whose trains
 * fire in different periods (bs_time_overlap: the histogram intersection of
 * their spike times over 20 bins of their common span is at most
 * max_time_overlap) merges whatever its correlogram and amplitudes: noise
 * crossings come throughout the recording as the unit does, while drift's
 * pieces of one unit, whose amplitudes on their own templates can differ by
 * more than 20 %, come in turns, and their correlogram cannot judge them
 * (its baseline, the other train's rate around each spike, is near zero
 * when the trains barely overlap, so the few spikes that both templates
 * caught where the drift passed between them make R12 large). Kilosort 4 keeps such fragments as separate units,
 * which the ground truth scores as false positives. With the same evidence
 * standard a cluster k too small for its own ACG to show refractoriness
 * (the ACG underpowered in the same sense) counts as passing the ACG test
 * when its central window holds no more violations than the ACG test allows
 * (R12 < acg_threshold): two fragments of a unit of a few dozen spikes each
 * can then merge. These rules need the amplitudes (p->amp) and are off
 * without them; a merge makes a_k the
 * spike-count-weighted mean. On a merge j's spikes are shifted by
 * +τ samples (onto k's alignment: a spike that j's template catches at t_j
 * is k's template at t_j + τ), relabelled k, and k's template becomes the
 * spike-count-weighted mean of k and j shifted by τ (samples shifted in from
 * outside the window repeat the nearest valid sample) on the union of their
 * channels; then k is tried again with its new template. Per-cluster spike
 * lists stay in time order (a constant shift keeps j's order; the two lists
 * are merged), so each CCG costs O(n_k + n_j + pairs), never O(N).
 *
 * Duplicates (docs/ALGORITHM.md §9.4): in time order, a spike is dropped if a kept spike of
 * its cluster lies less than dup_samples earlier. Labels (§9.6): the ACG test
 * per cluster.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "common/simd.h"
#include "mem/mem.h"

bs_status bs_sparse_templates_alloc(bs_sparse_templates *T, int K, int nt, const int *n_sup)
{
    memset(T, 0, sizeof *T);
    T->K = K;
    T->nt = nt;
    T->off = bs_mem_alloc("cluster/templates", (size_t)(K + 1) * sizeof(int64_t));
    if (!T->off)
        return BS_ERR_MEMORY;
    T->off[0] = 0;
    for (int k = 0; k < K; k++)
        T->off[k + 1] = T->off[k] + n_sup[k];
    T->chans = bs_mem_alloc("cluster/templates", (size_t)T->off[K] * sizeof(int));
    T->wave = bs_mem_calloc("cluster/templates", (size_t)T->off[K] * nt, sizeof(float));
    if (!T->chans || !T->wave) {
        bs_sparse_templates_free(T);
        return BS_ERR_MEMORY;
    }
    return BS_OK;
}

void bs_sparse_templates_free(bs_sparse_templates *T)
{
    bs_mem_free(T->off);
    bs_mem_free(T->chans);
    bs_mem_free(T->wave);
    memset(T, 0, sizeof *T);
}

void bs_merge_default_params(bs_merge_params *p, double fs_hz)
{
    p->r_thresh = 0.5;
    p->acg_threshold = 0.2;
    p->ccg_threshold = 0.25;
    p->r_thresh_underpowered = 0.8;
    p->ccg_threshold_underpowered = 0.45;
    p->amp = NULL;
    p->max_amp_ratio = 3.0;
    p->max_time_overlap = 0.3;
    p->max_lag = 0;
    p->max_rate_hz = 100.0;
    p->duration_s = 0;
    p->fs_hz = fs_hz;
}

int64_t bs_merge_max_train(const bs_merge_params *p)
{
    double m = p->max_rate_hz * p->duration_s;
    return m > 0 && m < 9e18 ? (int64_t)m : INT64_MAX;
}

/* One template as a view: n channels, ids, waveform [n × nt]. */
typedef struct {
    int n;
    int *chans;
    float *wave;
} tview;

static double norm_of(const tview *a, int nt)
{
    double s = 0;
    for (int64_t i = 0; i < (int64_t)a->n * nt; i++)
        s += (double)a->wave[i] * a->wave[i];
    return sqrt(s);
}

/* Lags summed at once by lag_dots: templates of at most LAG_MAX_NT samples
 * and lags of at most LAG_MAX_LAG (others take the plain loop). */
#define LAG_MAX_NT 1000
#define LAG_MAX_LAG 1000

/* s[tau + max_lag] += Σ_u x[u] y[u + tau] for every |tau| <= max_lag, u
 * ascending over 0..nt-1, y taken as 0 outside 0..nt-1: the lags are the
 * vector lanes. A term with a zero factor is ±0 and adding it to a sum that
 * starts at +0 changes nothing (round to nearest never makes -0 from a
 * non-zero sum), so each lag's sum has the bits of the loop over only its
 * overlapping samples, in the same order. ypad: nt + 2 max_lag floats. */
BS_VECTORIZED static void lag_dots(const float *restrict x, const float *restrict y, int nt, int max_lag,
                                   double *restrict s, float *restrict ypad)
{
    const int nl = 2 * max_lag + 1;
    for (int i = 0; i < max_lag; i++)
        ypad[i] = ypad[max_lag + nt + i] = 0.0f;
    memcpy(ypad + max_lag, y, sizeof(float) * (size_t)nt);
    for (int u = 0; u < nt; u++) {
        const double xu = (double)x[u];
        const float *yu = ypad + u;
        for (int l = 0; l < nl; l++)
            s[l] += xu * (double)yu[l];
    }
}

static double similarity(const tview *a, const tview *b, int nt, int max_lag, int *lag)
{
    if (lag)
        *lag = 0;
    /* common channels, found once (lists are ascending) */
    int np = 0, cap = a->n < b->n ? a->n : b->n;
    int pa_stack[64], pb_stack[64];
    int *pa = pa_stack, *pb = pb_stack;
    if (cap > 64) {
        pa = malloc((size_t)cap * sizeof *pa);
        pb = malloc((size_t)cap * sizeof *pb);
        if (!pa || !pb) {
            free(pa);
            free(pb);
            return 0.0; /* cannot compare: treated as dissimilar */
        }
    }
    for (int i = 0, j = 0; i < a->n && j < b->n;) {
        if (a->chans[i] < b->chans[j])
            i++;
        else if (a->chans[i] > b->chans[j])
            j++;
        else {
            pa[np] = i++;
            pb[np++] = j++;
        }
    }
    double best = 0.0;
    if (np > 0) {
        double na = norm_of(a, nt), nb = norm_of(b, nt);
        best = -INFINITY;
        int best_lag = 0;
        const int by_lanes = nt <= LAG_MAX_NT && max_lag <= LAG_MAX_LAG && max_lag < nt;
        double sl[2 * LAG_MAX_LAG + 1];
        if (by_lanes) {
            float ypad[LAG_MAX_NT + 2 * LAG_MAX_LAG];
            for (int l = 0; l <= 2 * max_lag; l++)
                sl[l] = 0;
            for (int c = 0; c < np; c++)
                lag_dots(a->wave + (int64_t)pa[c] * nt, b->wave + (int64_t)pb[c] * nt, nt, max_lag, sl, ypad);
        }
        for (int q = 0; q <= 2 * max_lag; q++) {
            int tau = q == 0 ? 0 : (q % 2 ? -(q + 1) / 2 : q / 2);
            int u0 = tau < 0 ? -tau : 0, u1 = tau > 0 ? nt - tau : nt;
            double s = 0;
            if (by_lanes)
                s = sl[tau + max_lag];
            else
                for (int c = 0; c < np; c++) {
                    const float *x = a->wave + (int64_t)pa[c] * nt, *y = b->wave + (int64_t)pb[c] * nt;
                    for (int u = u0; u < u1; u++)
                        s += (double)x[u] * y[u + tau];
                }
            if (s > best) {
                best = s;
                best_lag = tau;
            }
        }
        if (lag)
            *lag = best_lag;
        best /= (1e-6 + na) * (1e-6 + nb);
    }
    if (pa != pa_stack) {
        free(pa);
        free(pb);
    }
    return best;
}

static tview view_of(const bs_sparse_templates *T, int k)
{
    tview v = {(int)(T->off[k + 1] - T->off[k]), T->chans + T->off[k], T->wave + T->off[k] * T->nt};
    return v;
}

double bs_template_similarity(const bs_sparse_templates *T, int a, int b, int max_lag, int *lag)
{
    tview va = view_of(T, a), vb = view_of(T, b);
    return similarity(&va, &vb, T->nt, max_lag, lag);
}

/* ---------------------------------------------------------------- merge */

typedef struct {
    int K, nt;
    tview *tv;       /* [K] current templates */
    uint8_t *owned;  /* [K] 1: tv[k] buffers are bs_mem blocks of their own */
} mstate;

static void free_tview(mstate *s, int k)
{
    if (s->owned[k]) {
        bs_mem_free(s->tv[k].chans);
        bs_mem_free(s->tv[k].wave);
    }
    s->owned[k] = 0;
}

/* k ← (n_k·k + n_j·shift(j, τ)) / (n_k + n_j) on the union of channels. */
static bs_status merge_templates(mstate *s, int k, int j, int tau, int64_t nk, int64_t nj)
{
    int nt = s->nt;
    tview *a = &s->tv[k], *b = &s->tv[j];
    int nu = 0, i = 0, q = 0;
    while (i < a->n || q < b->n) {
        if (q >= b->n || (i < a->n && a->chans[i] < b->chans[q]))
            i++;
        else if (i >= a->n || a->chans[i] > b->chans[q])
            q++;
        else {
            i++;
            q++;
        }
        nu++;
    }
    int *ch = bs_mem_alloc("cluster/merge", (size_t)nu * sizeof(int));
    float *w = bs_mem_calloc("cluster/merge", (size_t)nu * nt, sizeof(float));
    if (!ch || !w) {
        bs_mem_free(ch);
        bs_mem_free(w);
        return BS_ERR_MEMORY;
    }
    double wk = (double)nk / (double)(nk + nj), wj = (double)nj / (double)(nk + nj);
    int r = 0;
    i = q = 0;
    while (i < a->n || q < b->n) {
        int ta = q >= b->n || (i < a->n && a->chans[i] <= b->chans[q]);
        int tb = i >= a->n || (q < b->n && b->chans[q] <= a->chans[i]);
        float *out = w + (int64_t)r * nt;
        if (ta) {
            ch[r] = a->chans[i];
            for (int u = 0; u < nt; u++)
                out[u] += (float)(wk * a->wave[(int64_t)i * nt + u]);
        }
        if (tb) {
            ch[r] = b->chans[q];
            for (int u = 0; u < nt; u++) {
                int v = u + tau;
                v = v < 0 ? 0 : v >= nt ? nt - 1 : v;
                out[u] += (float)(wj * b->wave[(int64_t)q * nt + v]);
            }
        }
        i += ta;
        q += tb;
        r++;
    }
    free_tview(s, k);
    free_tview(s, j);
    s->tv[k].n = nu;
    s->tv[k].chans = ch;
    s->tv[k].wave = w;
    s->owned[k] = 1;
    s->tv[j].n = 0;
    return BS_OK;
}

/* The histogram intersection of two time-ordered trains' spike times over TIME_BINS equal bins of their
 * common span: 1 for trains spread alike over the recording, near 0 for trains that fire in different
 * periods. */
#define TIME_BINS 20
static int time_bin(int64_t t, int64_t lo, double span)
{
    const double x = (double)(t - lo) * TIME_BINS / span;
    return x < 0 ? 0 : x >= TIME_BINS ? TIME_BINS - 1 : (int)x; /* inside for ordered trains; kept inside anyway */
}

double bs_time_overlap(const int64_t *a, int64_t na, const int64_t *b, int64_t nb)
{
    if (na < 1 || nb < 1)
        return 1.0;
    const int64_t lo = a[0] < b[0] ? a[0] : b[0], hi = a[na - 1] > b[nb - 1] ? a[na - 1] : b[nb - 1];
    const double span = (double)(hi - lo) + 1.0;
    int64_t ha[TIME_BINS] = {0}, hb[TIME_BINS] = {0};
    for (int64_t i = 0; i < na; i++)
        ha[time_bin(a[i], lo, span)]++;
    for (int64_t i = 0; i < nb; i++)
        hb[time_bin(b[i], lo, span)]++;
    double o = 0;
    for (int i = 0; i < TIME_BINS; i++)
        o += fmin((double)ha[i] / (double)na, (double)hb[i] / (double)nb);
    return o;
}

typedef struct {
    double s;
    int j, lag;
} cand;

/* Whether templates k and j may merge on their cross-correlogram by their
 * mean amplitudes: within a factor r of each other (always without amplitudes
 * or without a bound). */
static int amps_close(const double *amp, int k, int j, double r)
{
    if (!amp || !(r > 0))
        return 1;
    double a = fabs(amp[k]), b = fabs(amp[j]);
    return (a < b ? a : b) * r >= (a < b ? b : a);
}

static int cand_cmp(const void *x, const void *y)
{
    const cand *a = x, *b = y;
    if (a->s != b->s)
        return a->s > b->s ? -1 : 1;
    return (a->j > b->j) - (a->j < b->j);
}

static _Thread_local const int64_t *cnt_key_;
static int count_cmp(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    if (cnt_key_[a] != cnt_key_[b])
        return cnt_key_[a] > cnt_key_[b] ? -1 : 1;
    return (a > b) - (a < b);
}

bs_status bs_merge_ccg_store(const bs_merge_params *p, bs_train_store *ts, bs_sparse_templates *T, int64_t *shift,
                             int32_t *final_id, int *n_merges)
{
    int K = T->K, nt = T->nt, max_lag = p->max_lag > 0 ? p->max_lag : nt / 2;
    const int64_t max_train = bs_merge_max_train(p);
    *n_merges = 0;
    mstate s = {K, nt, NULL, NULL};
    bs_status st = BS_OK;
    size_t kb = (size_t)(K > 0 ? K : 1);
    s.tv = bs_mem_calloc("cluster/merge", kb, sizeof *s.tv);
    s.owned = bs_mem_calloc("cluster/merge", kb, 1);
    int64_t *len = bs_mem_alloc("cluster/merge", kb * sizeof(int64_t));
    int32_t *parent = bs_mem_alloc("cluster/merge", kb * sizeof(int32_t)); /* j -> the k it merged into */
    int64_t *tau_of = bs_mem_calloc("cluster/merge", kb, sizeof(int64_t)); /* j's shift onto its parent */
    int64_t *mt = NULL, *mi = NULL;  /* merged list being built */
    int64_t mcap = 0;
    cand *cd = bs_mem_alloc("cluster/merge", kb * sizeof(cand));
    int *order = bs_mem_alloc("cluster/merge", kb * sizeof(int));
    uint8_t *alive = bs_mem_alloc("cluster/merge", kb);
    uint8_t *isref = bs_mem_alloc("cluster/merge", kb);
    double *amp = p->amp ? bs_mem_alloc("cluster/merge", kb * sizeof(double)) : NULL; /* current mean amplitudes */
    if (!s.tv || !s.owned || !len || !parent || !tau_of || !cd || !order || !alive || !isref || (p->amp && !amp)) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    for (int k = 0; k < K && st == BS_OK; k++) {
        const int64_t *tk, *ik;
        s.tv[k] = view_of(T, k);
        if (amp)
            amp[k] = p->amp[k];
        alive[k] = 1;
        order[k] = k;
        parent[k] = -1;
        len[k] = ts->count(ts->ctx, k);
        isref[k] = 0;
        if (len[k] > max_train)
            continue; /* faster than any neuron: neither read nor merged */
        st = ts->get(ts->ctx, k, 0, &tk, &ik, &len[k]);
        if (st == BS_OK) {
            bs_ccg_metrics m;
            isref[k] = (uint8_t)bs_ccg_is_good(tk, len[k], p->fs_hz, p->acg_threshold, &m);
            if (!isref[k] && amp && len[k] > 10 && bs_ccg_underpowered(&m) && m.R12 < p->acg_threshold)
                isref[k] = 1; /* too few spikes to show refractoriness, and no violation */
        }
    }
    if (st != BS_OK)
        goto done;
    cnt_key_ = len;
    qsort(order, (size_t)K, sizeof *order, count_cmp);
    for (int oi = 0; oi < K; oi++) {
        int k = order[oi];
        if (!alive[k] || !isref[k])
            continue;
        int merged = 1;
        while (merged) {
            merged = 0;
            int nc = 0;
            for (int j = 0; j < K; j++) {
                if (j == k || !alive[j] || len[k] + len[j] > max_train)
                    continue;
                int lag;
                double sim = similarity(&s.tv[k], &s.tv[j], nt, max_lag, &lag);
                if (sim >= p->r_thresh)
                    cd[nc++] = (cand){sim, j, lag};
            }
            qsort(cd, (size_t)nc, sizeof *cd, cand_cmp);
            for (int c = 0; c < nc && !merged; c++) {
                int j = cd[c].j, tau = cd[c].lag;
                const int64_t *tk, *ik, *tj, *ij;
                int64_t nk, nj;
                st = ts->get(ts->ctx, k, 0, &tk, &ik, &nk);
                if (st == BS_OK)
                    st = ts->get(ts->ctx, j, 1, &tj, &ij, &nj);
                if (st != BS_OK)
                    goto done;
                bs_ccg_metrics m;
                const int refractory = bs_ccg_cross_refractory(tk, nk, tj, nj, p->fs_hz, p->ccg_threshold, &m);
                if (!(refractory && amps_close(amp, k, j, p->max_amp_ratio)) &&
                    !(amp && cd[c].s >= p->r_thresh_underpowered &&
                      (((bs_ccg_underpowered(&m) || m.Q12 >= 0.05) && m.R12 < p->ccg_threshold_underpowered &&
                        fabs(2.0 * (amp[k] - amp[j])) < 0.2 * fabs(amp[k] + amp[j])) ||
                       (p->max_time_overlap > 0 && bs_time_overlap(tk, nk, tj, nj) <= p->max_time_overlap))))
                    continue;
                if (amp && nk + nj > 0)
                    amp[k] = ((double)nk * amp[k] + (double)nj * amp[j]) / (double)(nk + nj);
                /* merge j into k: j's spikes move by +tau, the lists merge by (time, index) */
                st = merge_templates(&s, k, j, tau, nk, nj);
                if (st != BS_OK)
                    goto done;
                if (nk + nj > mcap) {
                    bs_mem_free(mt), bs_mem_free(mi);
                    mcap = nk + nj;
                    mt = bs_mem_alloc("cluster/merge", (size_t)mcap * sizeof(int64_t));
                    mi = bs_mem_alloc("cluster/merge", (size_t)mcap * sizeof(int64_t));
                    if (!mt || !mi) {
                        st = BS_ERR_MEMORY;
                        goto done;
                    }
                }
                int64_t a = 0, b = 0, r = 0;
                while (a < nk || b < nj) {
                    int64_t tb_ = b < nj ? tj[b] + tau : 0;
                    if (b >= nj || (a < nk && (tk[a] < tb_ || (tk[a] == tb_ && ik[a] < ij[b])))) {
                        mt[r] = tk[a];
                        mi[r++] = ik[a++];
                    } else {
                        mt[r] = tb_;
                        mi[r++] = ij[b++];
                    }
                }
                st = ts->put(ts->ctx, k, j, mt, mi, r);
                if (st != BS_OK)
                    goto done;
                len[k] = r;
                len[j] = 0;
                alive[j] = 0;
                parent[j] = k;
                tau_of[j] = tau;
                merged = 1;
                (*n_merges)++;
            }
        }
    }
    /* consecutive ids; every original template's cumulative shift and final id */
    {
        int K2 = 0;
        int32_t *newid = (int32_t *)order; /* reuse: int and int32_t have the same size here */
        for (int k = 0; k < K; k++)
            newid[k] = alive[k] ? K2++ : -1;
        for (int k = 0; k < K; k++) {
            int64_t sh = 0;
            int r = k;
            while (parent[r] >= 0) {
                sh += tau_of[r];
                r = parent[r];
            }
            shift[k] = sh;
            final_id[k] = newid[r];
        }
        int *nsup = (int *)cd; /* reuse: K2 ints fit in K cands */
        for (int k = 0; k < K; k++)
            if (alive[k])
                nsup[newid[k]] = s.tv[k].n;
        bs_sparse_templates NT;
        st = bs_sparse_templates_alloc(&NT, K2, nt, nsup);
        if (st != BS_OK)
            goto done;
        for (int k = 0; k < K; k++)
            if (alive[k]) {
                int q = newid[k];
                memcpy(NT.chans + NT.off[q], s.tv[k].chans, (size_t)s.tv[k].n * sizeof(int));
                memcpy(NT.wave + NT.off[q] * nt, s.tv[k].wave, (size_t)s.tv[k].n * nt * sizeof(float));
            }
        for (int k = 0; k < K; k++)
            free_tview(&s, k);
        bs_sparse_templates_free(T);
        *T = NT;
    }
done:
    if (s.owned)
        for (int k = 0; k < K; k++)
            free_tview(&s, k);
    bs_mem_free(s.tv);
    bs_mem_free(s.owned);
    bs_mem_free(len);
    bs_mem_free(parent);
    bs_mem_free(tau_of);
    bs_mem_free(mt);
    bs_mem_free(mi);
    bs_mem_free(cd);
    bs_mem_free(order);
    bs_mem_free(alive);
    bs_mem_free(isref);
    bs_mem_free(amp);
    return st;
}

/* The in-memory train store behind bs_merge_ccg: per-cluster lists of spike
 * indices into t[] (CSR); a merged cluster gets blocks of its own holding
 * its (shifted) times and indices. get() hands out a merged cluster's
 * arrays, or gathers an unmerged one's times into the slot's buffer. */
typedef struct {
    const int64_t *t;
    int64_t **list, *len;
    int64_t **mtime;  /* [K] times of a merged cluster, NULL: unmerged */
    int64_t *buf_t[2];
    int64_t cap[2];
} ram_store;

static bs_status ram_get(void *ctx, int k, int slot, const int64_t **t, const int64_t **idx, int64_t *n)
{
    ram_store *r = ctx;
    int64_t m = r->len[k];
    *idx = r->list[k];
    *n = m;
    if (r->mtime[k]) {
        *t = r->mtime[k];
        return BS_OK;
    }
    if (m > r->cap[slot]) {
        bs_mem_free(r->buf_t[slot]);
        r->buf_t[slot] = bs_mem_alloc("cluster/merge", (size_t)m * sizeof(int64_t));
        r->cap[slot] = r->buf_t[slot] ? m : 0;
        if (!r->buf_t[slot])
            return BS_ERR_MEMORY;
    }
    for (int64_t i = 0; i < m; i++)
        r->buf_t[slot][i] = r->t[r->list[k][i]];
    *t = r->buf_t[slot];
    return BS_OK;
}

static int64_t ram_count(void *ctx, int k) { return ((ram_store *)ctx)->len[k]; }

static void ram_drop(ram_store *r, int k)
{
    if (r->mtime[k]) { /* list[k] is then a block of its own too */
        bs_mem_free(r->mtime[k]);
        bs_mem_free(r->list[k]);
        r->mtime[k] = NULL;
    }
    r->list[k] = NULL;
    r->len[k] = 0;
}

static bs_status ram_put(void *ctx, int k, int j, const int64_t *t, const int64_t *idx, int64_t n)
{
    ram_store *r = ctx;
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(int64_t);
    int64_t *ml = bs_mem_alloc("cluster/merge", bytes), *mt = bs_mem_alloc("cluster/merge", bytes);
    if (!ml || !mt) {
        bs_mem_free(ml);
        bs_mem_free(mt);
        return BS_ERR_MEMORY;
    }
    memcpy(ml, idx, (size_t)n * sizeof(int64_t));
    memcpy(mt, t, (size_t)n * sizeof(int64_t));
    ram_drop(r, k);
    ram_drop(r, j);
    r->list[k] = ml;
    r->mtime[k] = mt;
    r->len[k] = n;
    return BS_OK;
}

bs_status bs_merge_ccg(const bs_merge_params *p, int64_t *t, int32_t *clu, int64_t n, bs_sparse_templates *T,
                       int *n_merges)
{
    int K = T->K;
    *n_merges = 0;
    for (int64_t i = 0; i < n; i++)
        if (clu[i] < 0 || clu[i] >= K)
            return bs_error(BS_ERR_INPUT, "merge: spike %lld has cluster %d, expected 0..%d", (long long)i, clu[i],
                            K - 1);
    for (int64_t i = 1; i < n; i++)
        if (t[i] < t[i - 1])
            return bs_error(BS_ERR_INPUT, "merge: spike times must be sorted ascending (spike %lld)", (long long)i);
    size_t kb = (size_t)(K > 0 ? K : 1);
    ram_store r = {t, NULL, NULL, NULL, {NULL, NULL}, {0, 0}};
    r.list = bs_mem_calloc("cluster/merge", kb, sizeof *r.list);
    r.len = bs_mem_calloc("cluster/merge", kb, sizeof *r.len);
    r.mtime = bs_mem_calloc("cluster/merge", kb, sizeof *r.mtime);
    int64_t *csr = bs_mem_alloc("cluster/merge", (size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    int64_t *shift = bs_mem_alloc("cluster/merge", kb * sizeof(int64_t));
    int32_t *fid = bs_mem_alloc("cluster/merge", kb * sizeof(int32_t));
    bs_status st = r.list && r.len && r.mtime && csr && shift && fid ? BS_OK : BS_ERR_MEMORY;
    if (st == BS_OK) { /* per-cluster lists in time order (counting sort) */
        for (int64_t i = 0; i < n; i++)
            r.len[clu[i]]++;
        int64_t off = 0;
        for (int k = 0; k < K; k++) {
            r.list[k] = csr + off;
            off += r.len[k];
            r.len[k] = 0;
        }
        for (int64_t i = 0; i < n; i++)
            r.list[clu[i]][r.len[clu[i]]++] = i;
        bs_train_store ts = {ram_get, ram_put, ram_count, &r};
        st = bs_merge_ccg_store(p, &ts, T, shift, fid, n_merges);
    }
    if (st == BS_OK)
        for (int64_t i = 0; i < n; i++) {
            t[i] += shift[clu[i]];
            clu[i] = fid[clu[i]];
        }
    if (r.mtime && r.list)
        for (int k = 0; k < K; k++)
            ram_drop(&r, k);
    bs_mem_free(r.list);
    bs_mem_free(r.len);
    bs_mem_free(r.mtime);
    bs_mem_free(r.buf_t[0]);
    bs_mem_free(r.buf_t[1]);
    bs_mem_free(csr);
    bs_mem_free(shift);
    bs_mem_free(fid);
    return st;
}

/* ---------------------------------------------------------------- order, duplicates, labels */

typedef struct {
    int64_t t, i;
} tkey;

static int tkey_cmp(const void *x, const void *y)
{
    const tkey *a = x, *b = y;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

bs_status bs_spike_order(const int64_t *t, int64_t n, int64_t *perm)
{
    tkey *k = bs_mem_alloc("cluster/order", (size_t)(n > 0 ? n : 1) * sizeof *k);
    if (!k)
        return BS_ERR_MEMORY;
    for (int64_t i = 0; i < n; i++)
        k[i] = (tkey){t[i], i};
    qsort(k, (size_t)n, sizeof *k, tkey_cmp);
    for (int64_t i = 0; i < n; i++)
        perm[i] = k[i].i;
    bs_mem_free(k);
    return BS_OK;
}

bs_status bs_remove_duplicates(const int64_t *t, const int32_t *clu, int64_t n, int K, int64_t dup_samples,
                               uint8_t *keep, int64_t *n_kept)
{
    int64_t *last = bs_mem_alloc("cluster/dups", (size_t)(K > 0 ? K : 1) * sizeof *last);
    uint8_t *seen = bs_mem_calloc("cluster/dups", (size_t)(K > 0 ? K : 1), 1);
    if (!last || !seen) {
        bs_mem_free(last);
        bs_mem_free(seen);
        return BS_ERR_MEMORY;
    }
    bs_status st = BS_OK;
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        int c = clu[i];
        if (c < 0 || c >= K || (i > 0 && t[i] < t[i - 1])) {
            st = bs_error(BS_ERR_INPUT, "duplicates: spike %lld: expected cluster 0..%d and times ascending",
                          (long long)i, K - 1);
            break;
        }
        keep[i] = !seen[c] || t[i] >= last[c] + dup_samples;
        if (keep[i]) {
            seen[c] = 1;
            last[c] = t[i];
            kept++;
        }
    }
    *n_kept = kept;
    bs_mem_free(last);
    bs_mem_free(seen);
    return st;
}

bs_status bs_cluster_labels(const int64_t *t, const int32_t *clu, int64_t n, int K, double fs_hz,
                            double acg_threshold, uint8_t *good, double *contam)
{
    int64_t *off = bs_mem_calloc("cluster/labels", (size_t)K + 1, sizeof *off);
    int64_t *tt = bs_mem_alloc("cluster/labels", (size_t)(n > 0 ? n : 1) * sizeof *tt);
    int64_t *fill = bs_mem_alloc("cluster/labels", ((size_t)K + 1) * sizeof *fill);
    bs_status st = BS_OK;
    if (!off || !tt || !fill) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        if (clu[i] < 0 || clu[i] >= K || (i > 0 && t[i] < t[i - 1])) {
            st = bs_error(BS_ERR_INPUT, "labels: spike %lld: expected cluster 0..%d and times ascending",
                          (long long)i, K - 1);
            goto done;
        }
        off[clu[i] + 1]++;
    }
    for (int k = 0; k < K; k++)
        off[k + 1] += off[k];
    memcpy(fill, off, ((size_t)K + 1) * sizeof *fill);
    for (int64_t i = 0; i < n; i++)
        tt[fill[clu[i]]++] = t[i];
    for (int k = 0; k < K; k++) {
        bs_ccg_metrics m;
        good[k] = (uint8_t)bs_ccg_is_good(tt + off[k], off[k + 1] - off[k], fs_hz, acg_threshold, &m);
        contam[k] = m.R12;
    }
done:
    bs_mem_free(off);
    bs_mem_free(tt);
    bs_mem_free(fill);
    return st;
}
