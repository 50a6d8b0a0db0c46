/*
 * template_features.c - each spike's projections on its template's nearest
 * templates, for Phy's template-feature view (template_features.npy and
 * template_feature_ind.npy; the definitions are in match.h).
 *
 * Mechanism. Neighbours: the support entries of every template are listed
 * per channel (K x n_sup entries in all); for template k, the entries on
 * each of k's pc channels are visited once and their similarity with k on
 * that channel, U_k[c]^T G U_j[c] (G the basis Gram matrix, the zero-lag
 * slice of wtw), is added to an accumulator per template, reset through the
 * list of templates it touched; the touched templates are then ranked. The
 * sums run in a fixed order (k's pc channels in their order, entries by
 * template id), so the result does not depend on anything but the templates.
 * Features: per spike and neighbour, a binary search of each pc channel in
 * the neighbour's (ascending) support and a P-term dot product with the
 * spike's pc features, the spikes over the threads. Nothing here grows
 * with the recording.
 */
#include <stdlib.h>
#include <string.h>

#include "../common/status.h"
#include "../mem/mem.h"
#include "match.h"

/* Index of channel c in template j's support, -1 if absent. */
static int support_index(const bs_match_templates *t, int j, int c)
{
    const int32_t *s = t->support + (size_t)j * t->n_sup;
    int lo = 0, hi = t->n_sup - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (s[mid] == c)
            return mid;
        if (s[mid] < c)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

typedef struct {
    double score;
    int32_t j;
} ranked;

static int ranked_cmp(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return (x->j > y->j) - (x->j < y->j);
}

size_t bs_template_neighbors_bytes(int K, int n_sup, int n_chan)
{
    size_t k = (size_t)(K > 0 ? K : 1);
    return ((size_t)n_chan + 1) * sizeof(int32_t) /* per-channel list starts */
           + k * (size_t)n_sup * sizeof(int32_t) /* list entries */
           + k * (sizeof(double) + sizeof(int32_t) + 1 + sizeof(ranked)); /* accumulator, touched, marks, ranks */
}

bs_status bs_template_neighbors(const bs_match_templates *t, const int32_t *pc_chan, int npc, int n_tf, int32_t *ind)
{
    int K = t->K, S = t->n_sup, P = t->n_pc, C = t->n_chan, L = 2 * t->nt - 1;
    if (n_tf < 1 || n_tf > K)
        return bs_error(BS_ERR_INTERNAL, "template neighbours: %d per template of %d templates", n_tf, K);
    int m = n_tf;
    int32_t *start = bs_mem_calloc("finish/template-neighbours", (size_t)C + 1, sizeof *start);
    int32_t *ent = bs_mem_alloc("finish/template-neighbours", (size_t)K * S * sizeof *ent);
    double *acc = bs_mem_calloc("finish/template-neighbours", (size_t)K, sizeof *acc);
    int32_t *touched = bs_mem_alloc("finish/template-neighbours", (size_t)K * sizeof *touched);
    unsigned char *mark = bs_mem_calloc("finish/template-neighbours", (size_t)K, 1);
    ranked *r = bs_mem_alloc("finish/template-neighbours", (size_t)K * sizeof *r);
    if (!start || !ent || !acc || !touched || !mark || !r) {
        bs_mem_free(start), bs_mem_free(ent), bs_mem_free(acc), bs_mem_free(touched), bs_mem_free(mark),
            bs_mem_free(r);
        return BS_ERR_MEMORY;
    }
    /* entries (k * S + i) grouped by channel, by template id within a channel */
    for (int64_t e = 0; e < (int64_t)K * S; e++)
        start[t->support[e] + 1]++;
    for (int c = 0; c < C; c++)
        start[c + 1] += start[c];
    for (int64_t e = 0; e < (int64_t)K * S; e++)
        ent[start[t->support[e]]++] = (int32_t)e;
    for (int c = C; c > 0; c--) /* start[c] advanced to c's end: shift back */
        start[c] = start[c - 1];
    start[0] = 0;
    float G[BS_MATCH_MAX_PC * BS_MATCH_MAX_PC];
    for (int p = 0; p < P; p++)
        for (int q = 0; q < P; q++)
            G[p * P + q] = t->wtw[((size_t)p * P + q) * L + (t->nt - 1)];
    for (int k = 0; k < K; k++) {
        int n_touched = 0;
        for (int i = 0; i < npc; i++) {
            int c = pc_chan[(size_t)k * npc + i], si = support_index(t, k, c);
            if (si < 0)
                continue;
            double gu[BS_MATCH_MAX_PC];
            const float *uk = t->U + ((size_t)k * S + si) * P;
            for (int q = 0; q < P; q++) {
                double v = 0;
                for (int p = 0; p < P; p++)
                    v += (double)uk[p] * G[p * P + q];
                gu[q] = v;
            }
            for (int32_t x = start[c]; x < start[c + 1]; x++) {
                int j = ent[x] / S;
                const float *uj = t->U + (size_t)ent[x] * P;
                double d = 0;
                for (int q = 0; q < P; q++)
                    d += gu[q] * uj[q];
                if (!mark[j]) {
                    mark[j] = 1;
                    acc[j] = 0;
                    touched[n_touched++] = j;
                }
                acc[j] += d;
            }
        }
        int n_r = 0;
        for (int x = 0; x < n_touched; x++)
            if (touched[x] != k)
                r[n_r++] = (ranked){acc[touched[x]], touched[x]};
        qsort(r, (size_t)n_r, sizeof *r, ranked_cmp);
        int32_t *row = ind + (size_t)k * n_tf;
        int n = 0;
        row[n++] = k;
        for (int x = 0; x < n_r && n < m; x++)
            row[n++] = r[x].j;
        mark[k] = 1; /* the fill below skips every template already in the row */
        for (int j = 0; j < K && n < m; j++)
            if (!mark[j])
                row[n++] = j;
        for (int x = 0; x < n_touched; x++)
            mark[touched[x]] = 0;
        mark[k] = 0;
    }
    bs_mem_free(start), bs_mem_free(ent), bs_mem_free(acc), bs_mem_free(touched), bs_mem_free(mark), bs_mem_free(r);
    return BS_OK;
}

void bs_template_features(const bs_match_templates *t, const int32_t *pc_chan, int npc, const int32_t *ind, int n_tf,
                          int64_t n, const int32_t *tmpl, const float *pcf, float *out)
{
    int S = t->n_sup, P = t->n_pc;
#pragma omp parallel for schedule(static) if (n > 256) /* each spike's row on its own: any thread count */
    for (int64_t s = 0; s < n; s++) {
        int k = tmpl[s];
        const int32_t *ch = pc_chan + (size_t)k * npc;
        const float *f = pcf + (size_t)s * P * npc;
        for (int x = 0; x < n_tf; x++) {
            int j = ind[(size_t)k * n_tf + x];
            double v = 0;
            for (int i = 0; i < npc; i++) {
                int si = support_index(t, j, ch[i]);
                if (si < 0)
                    continue;
                const float *uj = t->U + ((size_t)j * S + si) * P;
                for (int q = 0; q < P; q++)
                    v += (double)uj[q] * f[q * npc + i];
            }
            out[(size_t)s * n_tf + x] = (float)v;
        }
    }
}
