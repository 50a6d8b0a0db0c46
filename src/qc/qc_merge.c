/*
 * qc_merge.c - merge proposals: pairs of units that look like one neuron,
 * with their evidence, in OUT/merge_proposals.tsv. The steps follow
 * SpikeInterface's compute_merge_unit_groups presets ("x_contaminations"
 * and "temporal_splits"), in one pass each over the templates and the spikes:
 *
 *   1. candidates (while qc holds the template sums, pass A): both units have
 *      at least merge_min_spikes (100) spikes, their main channels are at
 *      most merge_max_distance_um (100) apart, and their µV templates are
 *      alike: SpikeInterface's "l1" similarity 1 - sum |a - b| / sum (|a| +
 *      |b|) (lag 0) is at least merge_min_similarity (0.75; SpikeInterface's
 *      template_diff_thresh 0.25). It is taken over a's sparse channels,
 *      each compared with b's channel at the same place moved by -2 .. 2
 *      rows (the probe's vertical spacing; the nearest column of that row),
 *      the best of the five: a neuron that drift moved by a row between the
 *      two pieces still matches itself;
 *   2. spike timing (one pass over spike_times in order, a ring of the last
 *      merge_window_ms (50) of spikes): per candidate pair the number of
 *      cross-unit spike pairs within the window (n_window) and within the
 *      refractory period merge_rp_ms (1 ms, n_refractory), less those
 *      within the censored period merge_censored_ms (0.3 ms, as
 *      SpikeInterface's cross-contamination test): a spike found twice, by
 *      both templates a few samples apart, is the sorter's duplicate, not a
 *      violation. Two pieces of one neuron share its refractory period:
 *      their cross-correlogram is empty near 0. The refractory ratio
 *      n_refractory / expected, expected = n_window x (rp - censored) /
 *      window (the flat correlogram's share), is ~0 for one neuron and ~1
 *      for two independent ones. Each unit's presence is
 *      its spike count in merge_presence_bins (100) equal bins of the
 *      recording; the overlap of two units is sum over bins of min(p_a, p_b)
 *      of the normalised histograms (1: same times, 0: disjoint, a unit
 *      split in time by drift);
 *   3. decision (qc_write.c, with the finished metrics): neither unit is
 *      contaminated (rp_contamination <= merge_max_contamination, 0.2;
 *      SpikeInterface's remove_contaminated), the amplitudes continue
 *      (|amplitude_median| ratio, smaller over larger, >= merge_min_amp_ratio
 *      0.5), and one of
 *        "temporal split": they hardly coexist (overlap <= merge_max_overlap,
 *          0.3), as a unit cut in two by drift;
 *        "refractory": the ratio is at most merge_max_refractory_ratio (0.2)
 *          and so few coincidences would happen by chance with probability
 *          at most merge_max_chance (0.2: Poisson, mean expected), as
 *          SpikeInterface's cross-contamination test (p-value 0.2);
 *        "alike, timing inconclusive": no more coincidences than expected,
 *          too few spikes for the test (even none would not pass it:
 *          exp(-expected) > 0.2, i.e. expected < ln 5), and templates very
 *          alike (similarity >= merge_min_similarity_alone, 0.8).
 *
 * Memory: the candidate pairs (a few per unit: neighbours within 100 µm
 * with alike templates), a ring of recent spikes, and units x presence bins
 * counts; all from the accountant under "qc/merge". Deterministic: pairs in
 * (a, b) order, counts are integers.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../io/probe.h"
#include "../mem/mem.h"
#include "qc_run.h"

static int cmp_partner(const void *x, const void *y)
{
    const int *a = x, *b = y; /* (partner, pair) */
    return (a[0] > b[0]) - (a[0] < b[0]);
}

#define SHIFTS 5 /* vertical shifts -2 .. 2 rows */

/* map[ch * SHIFTS + k]: the channel at ch's position moved by (k - 2) rows
 * (the probe's median spacing between distinct depths) within 1 µm in depth
 * and the closest in x within one row spacing, else -1. */
static void shift_map(const bs_probe *pr, int *map)
{
    double row = bs_probe_median_depth_step(pr);
    for (int ch = 0; ch < pr->n_chan; ch++)
        for (int k = 0; k < SHIFTS; k++) {
            double ty = pr->y_um[ch] + (k - SHIFTS / 2) * row, best = row + 1e-6;
            int arg = -1;
            for (int j = 0; j < pr->n_chan; j++) {
                if (fabs(pr->y_um[j] - ty) > 1.0 || pr->shank[j] != pr->shank[ch])
                    continue;
                double dx = fabs(pr->x_um[j] - pr->x_um[ch]);
                if (dx < best) {
                    best = dx;
                    arg = j;
                }
            }
            map[ch * SHIFTS + k] = arg;
        }
}

/* SpikeInterface's l1 similarity of the templates of units a and b (µV, from the sums) over a's sparse
 * channels compared with b's channels `shift` rows away; channels without a counterpart are left out, and
 * fewer than half of a's channels with one gives 0. */
static double l1_similarity(const qc_ctx *c, const float *sum, const int *map, int a, int b, int shift)
{
    const float *sa = sum + (size_t)a * c->nt * c->C, *sb = sum + (size_t)b * c->nt * c->C;
    double ia = 1.0 / (double)c->m[a], ib = 1.0 / (double)c->m[b], diff = 0, tot = 0;
    int used = 0;
    for (int j = 0; j < c->n_sp[a]; j++) {
        int ch = c->sp[(size_t)a * c->C + j], cb = map[ch * SHIFTS + shift];
        if (cb < 0)
            continue;
        used++;
        for (int i = 0; i < c->nt; i++) {
            double va = sa[(size_t)i * c->C + ch] * ia, vb = sb[(size_t)i * c->C + cb] * ib;
            diff += fabs(va - vb);
            tot += fabs(va) + fabs(vb);
        }
    }
    return 2 * used >= c->n_sp[a] && tot > 0 ? 1.0 - diff / tot : 0.0;
}

bs_status qc_merge_candidates(qc_ctx *c, const float *sum)
{
    const bs_probe *pr = &c->rec->probe;
    const bs_qc_params *p = c->p;
    int cap = 0;
    c->n_pairs = 0;
    c->pairs = NULL;
    int *map = bs_mem_alloc("qc/merge", sizeof *map * (size_t)c->C * SHIFTS);
    if (!map)
        return BS_ERR_MEMORY;
    shift_map(pr, map);
    bs_status st = BS_OK;
    for (int a = 0; a < c->K && st == BS_OK; a++) {
        if (c->count[a] < p->merge_min_spikes || c->main_ch[a] < 0)
            continue;
        for (int b = a + 1; b < c->K && st == BS_OK; b++) {
            if (c->count[b] < p->merge_min_spikes || c->main_ch[b] < 0)
                continue;
            int ma = c->main_ch[a], mb = c->main_ch[b];
            double dx = pr->x_um[ma] - pr->x_um[mb], dy = pr->y_um[ma] - pr->y_um[mb];
            double dist = sqrt(dx * dx + dy * dy);
            if (dist > p->merge_max_distance_um || pr->shank[ma] != pr->shank[mb])
                continue;
            /* the best over small vertical shifts of b against a: drift moves a neuron along the probe */
            double sim = 0;
            for (int k = 0; k < SHIFTS; k++)
                sim = fmax(sim, l1_similarity(c, sum, map, a, b, k));
            if (sim < p->merge_min_similarity)
                continue;
            if (c->n_pairs == cap) {
                int ncap = cap ? 2 * cap : 64;
                qc_pair *np = bs_mem_realloc(c->pairs, "qc/merge", sizeof *np * (size_t)ncap);
                if (!np) {
                    st = BS_ERR_MEMORY;
                    break;
                }
                c->pairs = np;
                cap = ncap;
            }
            c->pairs[c->n_pairs++] = (qc_pair){a, b, dist, sim, 0, 0, NAN};
        }
    }
    bs_mem_free(map);
    return st;
}

bs_status qc_merge_trains(qc_ctx *c)
{
    const bs_qc_params *p = c->p;
    if (c->n_pairs == 0)
        return BS_OK;
    int K = c->K, nb = p->merge_presence_bins > 0 ? p->merge_presence_bins : 1;
    /* partners of each unit, CSR of (partner, pair) sorted by partner */
    int *start = bs_mem_calloc("qc/merge", (size_t)K + 1, sizeof *start);
    int *part = bs_mem_alloc("qc/merge", sizeof *part * 4 * (size_t)c->n_pairs);
    int *fill = bs_mem_calloc("qc/merge", (size_t)K, sizeof *fill);
    int64_t *pres = bs_mem_calloc("qc/merge", (size_t)K * nb, sizeof *pres);
    int64_t W = (int64_t)llround(p->merge_window_ms * c->fs / 1000.0), R = (int64_t)llround(p->merge_rp_ms * c->fs / 1000.0);
    int64_t Rc = (int64_t)llround(p->merge_censored_ms * c->fs / 1000.0);
    int ring_cap = 1024;
    int64_t *rt = bs_mem_alloc("qc/merge", sizeof *rt * (size_t)ring_cap);
    int32_t *ru = bs_mem_alloc("qc/merge", sizeof *ru * (size_t)ring_cap);
    int64_t *t = bs_mem_alloc("qc/merge", QC_BLOCK * sizeof *t);
    int64_t *id = bs_mem_alloc("qc/merge", QC_BLOCK * sizeof *id);
    bs_status st = start && part && fill && pres && rt && ru && t && id ? BS_OK : BS_ERR_MEMORY;
    if (st == BS_OK) {
        for (int q = 0; q < c->n_pairs; q++) {
            start[c->pairs[q].a + 1]++;
            start[c->pairs[q].b + 1]++;
        }
        for (int u = 0; u < K; u++)
            start[u + 1] += start[u];
        for (int q = 0; q < c->n_pairs; q++) {
            int a = c->pairs[q].a, b = c->pairs[q].b;
            int *e = part + 2 * (start[a] + fill[a]++);
            e[0] = b, e[1] = q;
            e = part + 2 * (start[b] + fill[b]++);
            e[0] = a, e[1] = q;
        }
        for (int u = 0; u < K; u++)
            qsort(part + 2 * start[u], (size_t)(start[u + 1] - start[u]), 2 * sizeof *part, cmp_partner);
    }
    int head = 0, n_ring = 0; /* ring: entries head .. head + n_ring - 1 (mod cap), oldest first */
    double bin_len = (double)c->T / nb;
    for (int64_t r0 = 0; r0 < c->S && st == BS_OK; r0 += QC_BLOCK) {
        int64_t n = c->S - r0 < QC_BLOCK ? c->S - r0 : QC_BLOCK;
        st = bs_phy_col_i64(&c->times, r0, n, t);
        if (st == BS_OK)
            st = bs_phy_col_i64(&c->clus, r0, n, id);
        for (int64_t i = 0; i < n && st == BS_OK; i++) {
            int u = qc_unit_index(c, id[i]);
            if (u < 0)
                continue;
            int bin = (int)((double)t[i] / bin_len);
            pres[(size_t)u * nb + (bin < nb ? bin : nb - 1)]++;
            while (n_ring > 0 && t[i] - rt[head] > W) {
                head = (head + 1) % ring_cap;
                n_ring--;
            }
            int lo = start[u], hi = start[u + 1];
            if (hi > lo) {
                for (int k = 0; k < n_ring; k++) {
                    int e = (head + k) % ring_cap, v = ru[e];
                    if (v == u)
                        continue;
                    int key[2] = {v, 0};
                    const int *f = bsearch(key, part + 2 * lo, (size_t)(hi - lo), 2 * sizeof *part, cmp_partner);
                    if (!f)
                        continue;
                    qc_pair *q = &c->pairs[f[1]];
                    q->n_window++;
                    q->n_refractory += t[i] - rt[e] <= R && t[i] - rt[e] > Rc;
                }
            }
            if (n_ring == ring_cap) { /* grow, keeping the order */
                int ncap = 2 * ring_cap;
                int64_t *nt2 = bs_mem_alloc("qc/merge", sizeof *nt2 * (size_t)ncap);
                int32_t *nu2 = bs_mem_alloc("qc/merge", sizeof *nu2 * (size_t)ncap);
                if (!nt2 || !nu2) {
                    bs_mem_free(nt2);
                    bs_mem_free(nu2);
                    st = BS_ERR_MEMORY;
                    break;
                }
                for (int k = 0; k < n_ring; k++) {
                    nt2[k] = rt[(head + k) % ring_cap];
                    nu2[k] = ru[(head + k) % ring_cap];
                }
                bs_mem_free(rt);
                bs_mem_free(ru);
                rt = nt2, ru = nu2, ring_cap = ncap, head = 0;
            }
            int e = (head + n_ring) % ring_cap;
            rt[e] = t[i];
            ru[e] = u;
            n_ring++;
        }
    }
    for (int q = 0; st == BS_OK && q < c->n_pairs; q++) {
        const int64_t *ha = pres + (size_t)c->pairs[q].a * nb, *hb = pres + (size_t)c->pairs[q].b * nb;
        double na = 0, nbs = 0, ov = 0;
        for (int k = 0; k < nb; k++) {
            na += (double)ha[k];
            nbs += (double)hb[k];
        }
        for (int k = 0; k < nb && na > 0 && nbs > 0; k++)
            ov += fmin(ha[k] / na, hb[k] / nbs);
        c->pairs[q].overlap = ov;
    }
    bs_mem_free(start);
    bs_mem_free(part);
    bs_mem_free(fill);
    bs_mem_free(pres);
    bs_mem_free(rt);
    bs_mem_free(ru);
    bs_mem_free(t);
    bs_mem_free(id);
    return st;
}

int qc_merge_decide(const qc_ctx *c, const qc_pair *q, double *expected, double *ratio, double *amp_ratio,
                    const char **why)
{
    const bs_qc_params *p = c->p;
    const double *ma = c->metrics + (size_t)q->a * BS_QC_N_METRICS, *mb = c->metrics + (size_t)q->b * BS_QC_N_METRICS;
    *expected = (double)q->n_window * (p->merge_rp_ms - p->merge_censored_ms) / p->merge_window_ms;
    *ratio = *expected > 0 ? (double)q->n_refractory / *expected : NAN;
    double aa = fabs(ma[BS_QC_AMPLITUDE_MEDIAN]), ab = fabs(mb[BS_QC_AMPLITUDE_MEDIAN]);
    *amp_ratio = fmax(aa, ab) > 0 ? fmin(aa, ab) / fmax(aa, ab) : NAN;
    if (ma[BS_QC_RP_CONTAMINATION] > p->merge_max_contamination ||
        mb[BS_QC_RP_CONTAMINATION] > p->merge_max_contamination)
        return *why = "contaminated", 0;
    if (!(*amp_ratio >= p->merge_min_amp_ratio))
        return *why = "amplitudes differ", 0;
    if (q->overlap <= p->merge_max_overlap)
        return *why = "temporal split", 1;
    /* chance of seeing this few refractory coincidences if the two fired independently */
    double chance = bs_qc_poisson_cdf((double)q->n_refractory, *expected);
    int few = !(*ratio > p->merge_max_refractory_ratio); /* NaN (nothing expected): none seen */
    if (few && chance <= p->merge_max_chance)
        return *why = "refractory", 1;
    /* inconclusive: even no coincidence at all would not pass the test (P(0) = exp(-expected) > max chance) */
    if (q->n_refractory <= *expected && exp(-*expected) > p->merge_max_chance &&
        q->similarity >= p->merge_min_similarity_alone)
        return *why = "alike, timing inconclusive", 1;
    return *why = few ? "timing inconclusive" : "not refractory", 0;
}
