/*
 * templates.c - channel-sparse low-rank templates and their matched-filter
 * scores.
 *
 * A template set is copied and validated once (bs_match_templates_create):
 * supports must be ascending unique channel lists, the weights are rescaled so
 * every waveform W_k = U_k * basis has unit L2 norm (the norm is computed as
 * sum_i U_k[i,:] G U_k[i,:]^T with G = basis basis^T, in double), and the
 * lagged basis products WtW used by the pair table are tabulated. Templates
 * with the same support are grouped into blocks of at most BS_MATCH_BLOCK, in
 * order of first appearance, members ascending.
 *
 * Scores are computed tile by tile over time (BS_MATCH_TILE samples):
 *   1. projection of every channel on the basis by direct convolution,
 *      proj[(c*P + p)][u] = sum_s basis[p, s] * X[c, t0 + u + s - nt_before]
 *      (zero outside the window), parallel over channels (each value is one
 *      thread's fixed-order sum, so bits do not depend on the thread count);
 *   2. per block: gather the n_sup*P rows of its support into a contiguous
 *      matrix and one SGEMM, blk (nb x L) = U_block (nb x n_sup*P) * gather.
 *      Rows of templates inside the requested range are copied to B.
 * The GEMM calls are the same whatever range is requested, so any split of
 * the templates into chunks reproduces the all-at-once scores bit for bit.
 * Cost per sample: C*P*nt*2 FLOP (projection) + K*n_sup*P*2 FLOP (GEMMs).
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "match/match.h"
#include "mem/mem.h"

size_t bs_match_templates_bytes(int n_chan, int nt, int n_pc, int K, int n_sup)
{
    (void)n_chan;
    size_t k = (size_t)K;
    size_t b = 0;
    b += sizeof(float) * (size_t)n_pc * (size_t)nt;                             /* basis */
    b += sizeof(float) * (size_t)n_pc * (size_t)n_pc * (size_t)(2 * nt - 1);  /* wtw */
    b += sizeof(int32_t) * k * (size_t)n_sup;                                 /* support */
    b += sizeof(float) * k * (size_t)n_sup * (size_t)n_pc;                    /* U */
    b += sizeof(float) * k;                                                   /* norm_in */
    b += sizeof(int32_t) * (k + 1);                                           /* block_start (K + 1, the most blocks) */
    b += sizeof(int32_t) * k * 2;                                             /* members, block_of */
    return b;
}

void bs_match_templates_free(bs_match_templates *t)
{
    if (!t)
        return;
    bs_mem_free(t->basis);
    bs_mem_free(t->wtw);
    bs_mem_free(t->support);
    bs_mem_free(t->U);
    bs_mem_free(t->norm_in);
    bs_mem_free(t->block_start);
    bs_mem_free(t->block_members);
    bs_mem_free(t->block_of);
    memset(t, 0, sizeof *t);
}

static int same_support(const int32_t *a, const int32_t *b, int n)
{
    return memcmp(a, b, sizeof(int32_t) * (size_t)n) == 0;
}

bs_status bs_match_templates_create(const char *what, int n_chan, int nt, int nt_before, int n_pc,
                                    const float *basis, int K, int n_sup, const int32_t *support,
                                    const float *U, bs_match_templates *out)
{
    memset(out, 0, sizeof *out);
    if (!what)
        what = "templates";
    if (n_chan < 1)
        return bs_error(BS_ERR_INPUT, "%s: field 'n_chan': expected >= 1, got %d", what, n_chan);
    if (nt < 3 || nt > 1000)
        return bs_error(BS_ERR_INPUT, "%s: field 'nt': expected 3..1000 samples, got %d", what, nt);
    if (nt_before < 0 || nt_before >= nt)
        return bs_error(BS_ERR_INPUT, "%s: field 'nt_before': expected 0..%d, got %d", what, nt - 1, nt_before);
    if (n_pc < 1 || n_pc > BS_MATCH_MAX_PC || n_pc > nt)
        return bs_error(BS_ERR_INPUT, "%s: field 'n_pc': expected 1..%d, got %d", what,
                        nt < BS_MATCH_MAX_PC ? nt : BS_MATCH_MAX_PC, n_pc);
    if (K < 1)
        return bs_error(BS_ERR_INPUT, "%s: field 'K': expected >= 1 templates, got %d", what, K);
    if (n_sup < 1 || n_sup > BS_MATCH_MAX_SUP || n_sup > n_chan)
        return bs_error(BS_ERR_INPUT, "%s: field 'n_sup': expected 1..%d channels, got %d", what,
                        n_chan < BS_MATCH_MAX_SUP ? n_chan : BS_MATCH_MAX_SUP, n_sup);
    for (int i = 0; i < n_pc * nt; i++)
        if (!isfinite(basis[i]))
            return bs_error(BS_ERR_INPUT, "%s: field 'basis': expected finite values, got %g at component %d sample %d",
                            what, (double)basis[i], i / nt, i % nt);
    for (int k = 0; k < K; k++) {
        const int32_t *s = support + (size_t)k * n_sup;
        for (int i = 0; i < n_sup; i++) {
            if (s[i] < 0 || s[i] >= n_chan)
                return bs_error(BS_ERR_INPUT, "%s: field 'support' of template %d: expected channels 0..%d, got %d",
                                what, k, n_chan - 1, (int)s[i]);
            if (i > 0 && s[i] <= s[i - 1])
                return bs_error(BS_ERR_INPUT,
                                "%s: field 'support' of template %d: expected strictly ascending channels, got %d after %d",
                                what, k, (int)s[i], (int)s[i - 1]);
        }
        for (int i = 0; i < n_sup * n_pc; i++)
            if (!isfinite(U[(size_t)k * n_sup * n_pc + i]))
                return bs_error(BS_ERR_INPUT, "%s: field 'U' of template %d: expected finite weights", what, k);
    }

    out->n_chan = n_chan;
    out->nt = nt;
    out->nt_before = nt_before;
    out->n_pc = n_pc;
    out->K = K;
    out->n_sup = n_sup;
    const int P = n_pc, L = 2 * nt - 1;
    out->basis = bs_mem_alloc("match/templates", sizeof(float) * (size_t)P * nt);
    out->wtw = bs_mem_alloc("match/templates", sizeof(float) * (size_t)P * P * L);
    out->support = bs_mem_alloc("match/templates", sizeof(int32_t) * (size_t)K * n_sup);
    out->U = bs_mem_alloc("match/templates", sizeof(float) * (size_t)K * n_sup * P);
    out->norm_in = bs_mem_alloc("match/templates", sizeof(float) * (size_t)K);
    out->block_members = bs_mem_alloc("match/templates", sizeof(int32_t) * (size_t)K);
    out->block_of = bs_mem_alloc("match/templates", sizeof(int32_t) * (size_t)K);
    if (!out->basis || !out->wtw || !out->support || !out->U || !out->norm_in || !out->block_members ||
        !out->block_of) {
        bs_match_templates_free(out);
        return BS_ERR_MEMORY;
    }
    memcpy(out->basis, basis, sizeof(float) * (size_t)P * nt);
    memcpy(out->support, support, sizeof(int32_t) * (size_t)K * n_sup);

    /* Gram matrix of the basis and lagged products, in double then rounded. */
    double G[BS_MATCH_MAX_PC][BS_MATCH_MAX_PC];
    for (int p = 0; p < P; p++)
        for (int q = 0; q < P; q++) {
            for (int d = -(nt - 1); d <= nt - 1; d++) {
                double acc = 0;
                for (int s = 0; s < nt; s++) {
                    int s2 = s + d;
                    if (s2 >= 0 && s2 < nt)
                        acc += (double)basis[p * nt + s] * basis[q * nt + s2];
                }
                out->wtw[((size_t)p * P + q) * L + (d + nt - 1)] = (float)acc;
                if (d == 0)
                    G[p][q] = acc;
            }
        }

    /* Unit-norm waveforms. */
    for (int k = 0; k < K; k++) {
        const float *u = U + (size_t)k * n_sup * P;
        double n2 = 0;
        for (int i = 0; i < n_sup; i++)
            for (int p = 0; p < P; p++)
                for (int q = 0; q < P; q++)
                    n2 += (double)u[i * P + p] * G[p][q] * u[i * P + q];
        if (!(n2 > 1e-20)) {
            bs_match_templates_free(out);
            return bs_error(BS_ERR_INPUT, "%s: field 'U' of template %d: expected a non-zero waveform, got norm %g",
                            what, k, sqrt(n2 > 0 ? n2 : 0));
        }
        double inv = 1.0 / sqrt(n2);
        out->norm_in[k] = (float)sqrt(n2);
        float *dst = out->U + (size_t)k * n_sup * P;
        for (int i = 0; i < n_sup * P; i++)
            dst[i] = (float)(u[i] * inv);
    }

    /* Blocks: identical supports, in order of first appearance. */
    int32_t *first = bs_mem_alloc("match/templates_scratch", sizeof(int32_t) * (size_t)K);
    int32_t *cnt = bs_mem_alloc("match/templates_scratch", sizeof(int32_t) * (size_t)K);
    if (!first || !cnt) {
        bs_mem_free(first);
        bs_mem_free(cnt);
        bs_match_templates_free(out);
        return BS_ERR_MEMORY;
    }
    /* group[k] = representative (first template with the same support); a hash
     * on the support keeps this O(K n_sup) for typical sets. */
    int n_groups = 0;
    {
        size_t nh = 1;
        while (nh < (size_t)K * 2)
            nh <<= 1;
        int32_t *head = bs_mem_alloc("match/templates_scratch", sizeof(int32_t) * nh);
        int32_t *next = bs_mem_alloc("match/templates_scratch", sizeof(int32_t) * (size_t)K);
        int32_t *gid = bs_mem_alloc("match/templates_scratch", sizeof(int32_t) * (size_t)K);
        if (!head || !next || !gid) {
            bs_mem_free(head);
            bs_mem_free(next);
            bs_mem_free(gid);
            bs_mem_free(first);
            bs_mem_free(cnt);
            bs_match_templates_free(out);
            return BS_ERR_MEMORY;
        }
        for (size_t h = 0; h < nh; h++)
            head[h] = -1;
        for (int k = 0; k < K; k++) {
            const int32_t *s = support + (size_t)k * n_sup;
            uint64_t h = 1469598103934665603ull;
            for (int i = 0; i < n_sup; i++)
                h = (h ^ (uint64_t)(uint32_t)s[i]) * 1099511628211ull;
            size_t b = (size_t)(h & (nh - 1));
            int g = -1;
            for (int r = head[b]; r >= 0; r = next[r])
                if (same_support(support + (size_t)r * n_sup, s, n_sup)) {
                    g = gid[r];
                    break;
                }
            if (g < 0) {
                g = n_groups++;
                first[g] = k;
                cnt[g] = 0;
                next[k] = head[b];
                head[b] = k;
            }
            gid[k] = g;
            cnt[g]++;
        }
        /* members ordered by group, ascending template id within a group */
        int32_t *pos = head; /* reuse: group offsets (nh >= K + 1 > n_groups) */
        int32_t acc = 0;
        for (int g = 0; g < n_groups; g++) {
            pos[g] = acc;
            acc += cnt[g];
        }
        for (int k = 0; k < K; k++)
            out->block_members[pos[gid[k]]++] = k;
        /* blocks: split groups into runs of <= BS_MATCH_BLOCK */
        int nb = 0;
        for (int g = 0; g < n_groups; g++)
            nb += (cnt[g] + BS_MATCH_BLOCK - 1) / BS_MATCH_BLOCK;
        out->n_blocks = nb;
        out->block_start = bs_mem_alloc("match/templates", sizeof(int32_t) * ((size_t)K + 1));
        if (!out->block_start) {
            bs_mem_free(head);
            bs_mem_free(next);
            bs_mem_free(gid);
            bs_mem_free(first);
            bs_mem_free(cnt);
            bs_match_templates_free(out);
            return BS_ERR_MEMORY;
        }
        int b = 0;
        acc = 0;
        for (int g = 0; g < n_groups; g++) {
            for (int o = 0; o < cnt[g]; o += BS_MATCH_BLOCK) {
                out->block_start[b++] = acc + o;
            }
            acc += cnt[g];
        }
        out->block_start[nb] = acc;
        for (int bb = 0; bb < nb; bb++)
            for (int m = out->block_start[bb]; m < out->block_start[bb + 1]; m++)
                out->block_of[out->block_members[m]] = bb;
        bs_mem_free(head);
        bs_mem_free(next);
        bs_mem_free(gid);
    }
    bs_mem_free(first);
    bs_mem_free(cnt);
    return BS_OK;
}

void bs_match_template_waveform(const bs_match_templates *t, int k, float *w)
{
    const int P = t->n_pc, nt = t->nt;
    const float *u = t->U + (size_t)k * t->n_sup * P;
    for (int i = 0; i < t->n_sup; i++)
        for (int s = 0; s < nt; s++) {
            float acc = 0;
            for (int p = 0; p < P; p++)
                acc += u[i * P + p] * t->basis[p * nt + s];
            w[(size_t)i * nt + s] = acc;
        }
}

size_t bs_match_scores_bytes(int K, int64_t n_t)
{
    return sizeof(float) * (size_t)K * (size_t)n_t;
}

size_t bs_match_scores_ws_bytes(const bs_match_templates *t)
{
    size_t L = BS_MATCH_TILE;
    return sizeof(float) * L *
               ((size_t)t->n_chan * t->n_pc + (size_t)t->n_sup * t->n_pc + (size_t)BS_MATCH_BLOCK) +
           sizeof(float) * (size_t)BS_MATCH_BLOCK * t->n_sup * t->n_pc;
}

bs_status bs_match_scores_ws_alloc(const bs_match_templates *t, bs_match_scores_ws *ws)
{
    size_t L = BS_MATCH_TILE;
    ws->proj = bs_mem_alloc("match/score_ws", sizeof(float) * L * (size_t)t->n_chan * t->n_pc);
    ws->gather = bs_mem_alloc("match/score_ws", sizeof(float) * L * (size_t)t->n_sup * t->n_pc);
    ws->blk = bs_mem_alloc("match/score_ws", sizeof(float) * L * BS_MATCH_BLOCK);
    ws->ublk = bs_mem_alloc("match/score_ws", sizeof(float) * BS_MATCH_BLOCK * (size_t)t->n_sup * t->n_pc);
    if (!ws->proj || !ws->gather || !ws->blk || !ws->ublk) {
        bs_match_scores_ws_free(ws);
        return BS_ERR_MEMORY;
    }
    return BS_OK;
}

void bs_match_scores_ws_free(bs_match_scores_ws *ws)
{
    bs_mem_free(ws->proj);
    bs_mem_free(ws->gather);
    bs_mem_free(ws->blk);
    bs_mem_free(ws->ublk);
    ws->proj = ws->gather = ws->blk = ws->ublk = NULL;
}

/* proj rows (c*P + p) of the tile starting at window sample t0, L samples. */
static void project_tile(const bs_match_templates *t, const float *X, size_t ldx, int64_t n_t, int64_t t0,
                         int L, float *proj)
{
    const int P = t->n_pc, nt = t->nt, nb = t->nt_before, C = t->n_chan;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        const float *x = X + (size_t)c * ldx;
        for (int p = 0; p < P; p++) {
            float *o = proj + ((size_t)c * P + p) * BS_MATCH_TILE;
            const float *bp = t->basis + (size_t)p * nt;
            for (int u = 0; u < L; u++)
                o[u] = 0.0f;
            /* o[u] = sum_s bp[s] * x[t0 + u + s - nb], s ascending */
            for (int s = 0; s < nt; s++) {
                const float w = bp[s];
                int64_t off = t0 + s - nb; /* window index of u = 0 */
                int u_lo = 0, u_hi = L;
                if (off < 0)
                    u_lo = (int)(-off < L ? -off : L);
                if (off + L > n_t)
                    u_hi = (int)(n_t - off > 0 ? n_t - off : 0);
                const float *xs = x + off;
                for (int u = u_lo; u < u_hi; u++)
                    o[u] += w * xs[u];
            }
        }
    }
}

bs_status bs_match_scores(const bs_match_templates *t, const float *X, size_t ldx, int64_t n_t, int k0, int k1,
                          float *B, size_t ldb, bs_match_scores_ws *ws)
{
    if (k0 < 0 || k1 > t->K || k0 > k1 || n_t < 0)
        return bs_error(BS_ERR_INTERNAL, "match scores: bad template range %d..%d of %d or n_t %lld", k0, k1, t->K,
                        (long long)n_t);
    if (k0 == k1 || n_t == 0)
        return BS_OK;
    const int P = t->n_pc, ns = t->n_sup, kd = ns * P;
    for (int64_t t0 = 0; t0 < n_t; t0 += BS_MATCH_TILE) {
        int L = (int)(n_t - t0 < BS_MATCH_TILE ? n_t - t0 : BS_MATCH_TILE);
        project_tile(t, X, ldx, n_t, t0, L, ws->proj);
        for (int b = 0; b < t->n_blocks; b++) {
            int m0 = t->block_start[b], m1 = t->block_start[b + 1];
            int need = 0;
            for (int m = m0; m < m1; m++)
                if (t->block_members[m] >= k0 && t->block_members[m] < k1)
                    need = 1;
            if (!need)
                continue;
            const int32_t *sup = t->support + (size_t)t->block_members[m0] * ns;
            for (int i = 0; i < ns; i++)
                memcpy(ws->gather + (size_t)i * P * BS_MATCH_TILE,
                       ws->proj + (size_t)sup[i] * P * BS_MATCH_TILE, sizeof(float) * (size_t)P * BS_MATCH_TILE);
            /* A operand: the members' weight rows, copied contiguous. */
            float *Ublk = ws->ublk;
            int nbk = m1 - m0;
            for (int m = 0; m < nbk; m++)
                memcpy(Ublk + (size_t)m * kd, t->U + (size_t)t->block_members[m0 + m] * kd,
                       sizeof(float) * (size_t)kd);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nbk, L, kd, 1.0f, Ublk, kd, ws->gather,
                        BS_MATCH_TILE, 0.0f, ws->blk, BS_MATCH_TILE);
            for (int m = 0; m < nbk; m++) {
                int k = t->block_members[m0 + m];
                if (k < k0 || k >= k1)
                    continue;
                memcpy(B + (size_t)(k - k0) * ldb + t0, ws->blk + (size_t)m * BS_MATCH_TILE,
                       sizeof(float) * (size_t)L);
            }
        }
    }
    return BS_OK;
}
