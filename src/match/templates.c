/*
 * templates.c - channel-sparse low-rank templates and their matched-filter
 * scores.
 *
 * A template set is copied and validated once (bs_match_templates_create):
 * supports must be ascending unique channel lists, the weights are rescaled so
 * every waveform W_k = U_k * basis has unit L2 norm (the norm is computed as
 * sum_i U_k[i,:] G U_k[i,:]^T with G = basis basis^T, in double), and the
 * lagged basis products WtW used by the pair table are tabulated, and the
 * basis filters' spectra kept in slots (pack_spectra) for the scores.
 *
 * Scores, per sub-tile of the filter bank's T columns rounded down to whole
 * vectors of 8 (192 columns for 61-sample waveforms) on a fixed grid from
 * the window's first sample, four sub-tiles at a time:
 *   1. each channel's spectrum of the sub-tile (the filter bank's forward
 *      transform of 16 channels, the pairs of channels that share a lane
 *      separated by conjugate symmetry), parallel over channel groups;
 *   2. each template's spectrum, S_k = sum_j G_kj X_{S_k[j]}, with G_kj =
 *      sum_p U_k[j, p] H_p its waveform on support channel j in frequency
 *      (H_p: basis filter p's spectrum), computed once for the four
 *      sub-tiles, parallel over templates;
 *   3. the scores: 16 templates per inverse transform (8 as its real part, 8
 *      as its imaginary part, their spectra extended by conjugate symmetry),
 *      parallel over groups and sub-tiles.
 * Per template and sample this is about 4 n_sup (n/2) / T multiply-adds in
 * the products (n = 256, T = 192: 2.7 n_sup) and P n_sup n / (4 T) forming G
 * (2 n_sup), against P n_sup or more (6 n_sup) for a product of the weights
 * with the channels' projections on the basis; per channel and sample, a
 * forward transform instead of a forward and P inverse ones. Each value is a
 * fixed sequence of float multiplies and adds (lane-wise, -ffp-contract=off),
 * so no CPU, vector width or thread count changes the bits; templates are grouped by index (k / 16),
 * so a range of templates is computed with its whole groups and gives the
 * bits of the all-at-once scores.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/simd.h"
#include "match/match.h"
#include "mem/mem.h"

size_t bs_match_templates_bytes(int nt, int n_pc, int K, int n_sup)
{
    size_t k = (size_t)K;
    size_t b = 0;
    b += sizeof(float) * (size_t)n_pc * (size_t)nt;                             /* basis */
    b += sizeof(float) * (size_t)n_pc * (size_t)n_pc * (size_t)(2 * nt - 1);  /* wtw */
    b += sizeof(int32_t) * k * (size_t)n_sup;                                 /* support */
    b += sizeof(float) * k * (size_t)n_sup * (size_t)n_pc;                    /* U */
    b += sizeof(float) * k;                                                   /* norm_in */
    b += sizeof(float) * (size_t)n_pc * (size_t)bs_firbank_n(nt);              /* hspec */
    b += bs_firbank_bytes(n_pc, nt);                                          /* the basis's filter bank (its transforms) */
    return b;
}

void bs_match_templates_free(bs_match_templates *t)
{
    if (!t)
        return;
    bs_firbank_free(&t->fir);
    bs_mem_free(t->basis);
    bs_mem_free(t->wtw);
    bs_mem_free(t->support);
    bs_mem_free(t->U);
    bs_mem_free(t->norm_in);
    bs_mem_free(t->hspec);
    memset(t, 0, sizeof *t);
}


static void pack_spectra(bs_match_templates *t);

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
    out->hspec = bs_mem_alloc("match/templates", sizeof(float) * (size_t)P * bs_firbank_n(nt));
    if (!out->basis || !out->wtw || !out->support || !out->U || !out->norm_in || !out->hspec) {
        bs_match_templates_free(out);
        return BS_ERR_MEMORY;
    }
    memcpy(out->basis, basis, sizeof(float) * (size_t)P * nt);
    memcpy(out->support, support, sizeof(int32_t) * (size_t)K * n_sup);
    if (bs_firbank_init(&out->fir, "match/templates", out->basis, P, nt) != BS_OK) {
        bs_match_templates_free(out);
        return BS_ERR_MEMORY;
    }

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

    pack_spectra(out);
    return BS_OK;
}

bs_status bs_match_templates_subset(const bs_match_templates *t, const int32_t *idx, int n, bs_match_templates *out)
{
    memset(out, 0, sizeof *out);
    const int P = t->n_pc, ns = t->n_sup;
    int32_t *sup = bs_mem_alloc("match/templates", sizeof(int32_t) * (size_t)(n > 0 ? n : 1) * ns);
    float *U = bs_mem_alloc("match/templates", sizeof(float) * (size_t)(n > 0 ? n : 1) * ns * P);
    bs_status st = sup && U ? BS_OK : BS_ERR_MEMORY;
    for (int i = 0; i < n && st == BS_OK; i++) {
        memcpy(sup + (size_t)i * ns, t->support + (size_t)idx[i] * ns, sizeof(int32_t) * (size_t)ns);
        memcpy(U + (size_t)i * ns * P, t->U + (size_t)idx[i] * ns * P, sizeof(float) * (size_t)ns * P);
    }
    if (st == BS_OK)
        st = bs_match_templates_create("templates (a subset)", t->n_chan, t->nt, t->nt_before, P, t->basis, n, ns, sup,
                                       U, out);
    if (st == BS_OK) { /* the set's own weights and amplitudes, not those of its unit-norm copies */
        if (n > 0)
            memcpy(out->U, U, sizeof(float) * (size_t)n * ns * P);
        for (int i = 0; i < n; i++)
            out->norm_in[i] = t->norm_in[idx[i]];
    }
    bs_mem_free(sup);
    bs_mem_free(U);
    return st;
}

int bs_match_thresholds(const bs_match_templates *t, const uint8_t *low_tier, float threshold, double of_amp,
                        float floor, float *thk)
{
    int n_low = 0;
    for (int k = 0; k < t->K; k++) {
        thk[k] = threshold;
        if (!low_tier || !low_tier[k] || !(of_amp > 0))
            continue;
        n_low++;
        float v = (float)(of_amp * t->norm_in[k]);
        v = v < floor ? floor : v;
        thk[k] = v < threshold ? v : threshold;
    }
    return n_low;
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

/*
 * Scores in frequency (the header's mechanism). Sub-tiles of sub_cols
 * columns on a fixed grid from the window's first sample, TILES of them at a
 * time: each channel's spectrum of each sub-tile (spectra_of_group, into
 * ws->X), then every template's spectrum of each (template_spectra, into
 * ws->S, KCHUNK templates at a time, from their weights in frequency in ws->G,
 * made once per call where all templates fit one chunk), then the scores of SCORE_GROUP
 * templates per inverse transform (group_scores). Slots: a spectrum of
 * n real samples is held as n floats, slot s < n/2 holding bin s (real part
 * at s, imaginary at n/2 + s), except slot 0, which holds the two real bins 0
 * and n/2 (at 0 and n/2).
 */
#define SCORE_GROUP 16 /* templates per inverse transform: the filter bank's 16 lanes */
#define TILES 4        /* sub-tiles whose spectra are held at once (a template's weights reused over them) */
#define KCHUNK 256     /* templates whose spectra are held at once, a multiple of SCORE_GROUP */

typedef float v8f __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));

static void pack_spectra(bs_match_templates *t)
{
    const int n = t->fir.n, h = n / 2;
    for (int p = 0; p < t->n_pc; p++) {
        const float *hr = t->fir.h + (size_t)p * 2 * n, *hi = hr + n;
        float *d = t->hspec + (size_t)p * n;
        for (int s = 1; s < h; s++) {
            d[s] = 0.5f * hr[t->fir.bin[s]];
            d[h + s] = 0.5f * hi[t->fir.bin[s]];
        }
        d[0] = 0.5f * hr[0];
        d[h] = 0.5f * hr[t->fir.bin[h]];
    }
}

/* Columns of a score sub-tile: the filter bank's T, whole vectors of 8. */
static int sub_cols(const bs_match_templates *t) { return t->fir.T / 8 * 8; }

/* The filter bank's transform length, from nt alone (bs_firbank_init makes the same n, and T = n - nt + 1),
 * so that a template set of shape only (the memory plan's, whose bank is not made) sizes the workspace as
 * the real one does. */
static size_t fir_n(const bs_match_templates *t)
{
    return (size_t)bs_firbank_n(t->nt);
}

/* One thread's filter-bank scratch and inverse output, floats (whole vectors of 16). */
static size_t fft_floats(const bs_match_templates *t)
{
    return bs_firbank_scratch_floats(t->nt) + (fir_n(t) - (size_t)t->nt + 1) * BS_FIRBANK_LANES;
}

/* Templates whose spectra ws->S holds. */
static size_t chunk_templates(const bs_match_templates *t)
{
    size_t k = ((size_t)t->K + SCORE_GROUP - 1) / SCORE_GROUP * SCORE_GROUP;
    return k < KCHUNK ? k : KCHUNK;
}

size_t bs_match_scores_ws_bytes(const bs_match_templates *t, int n_threads)
{
    const size_t n = fir_n(t);
    return sizeof(float) * (TILES * (size_t)t->n_chan * n + chunk_templates(t) * (TILES + (size_t)t->n_sup) * n +
                            (size_t)n_threads * fft_floats(t));
}

bs_status bs_match_scores_ws_alloc(const bs_match_templates *t, int n_threads, bs_match_scores_ws *ws)
{
    const size_t n = fir_n(t);
    ws->n_threads = n_threads;
    ws->X = bs_mem_alloc("match/score_ws", sizeof(float) * TILES * (size_t)t->n_chan * n);
    ws->S = bs_mem_alloc("match/score_ws", sizeof(float) * chunk_templates(t) * TILES * n);
    ws->G = bs_mem_alloc("match/score_ws", sizeof(float) * chunk_templates(t) * (size_t)t->n_sup * n);
    ws->fft = bs_mem_alloc("match/score_ws", sizeof(float) * fft_floats(t) * n_threads);
    if (!ws->X || !ws->S || !ws->G || !ws->fft) {
        bs_match_scores_ws_free(ws);
        return BS_ERR_MEMORY;
    }
    return BS_OK;
}

void bs_match_scores_ws_free(bs_match_scores_ws *ws)
{
    bs_mem_free(ws->X);
    bs_mem_free(ws->S);
    bs_mem_free(ws->G);
    bs_mem_free(ws->fft);
    ws->X = ws->S = ws->G = ws->fft = NULL;
}

/* a[q] (row q) -> a[q] (column q) of an 8 x 8 tile, in generic vector
 * shuffles (so the functions using it can be cloned per vector ISA): the
 * usual unpack, shuffle and 128-bit swap rounds (vunpck, vshufps, vperm2f128
 * under AVX). Compilers without __builtin_shufflevector (GCC before 12) move
 * the lanes one by one. Exact either way. */
#if defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define HAVE_SHUFFLEVECTOR 1
#endif
#endif
static inline __attribute__((always_inline)) void tr8(v8f *a)
{
#ifndef HAVE_SHUFFLEVECTOR
    v8f c[8];
    for (int q = 0; q < 8; q++)
        for (int l = 0; l < 8; l++)
            c[l][q] = a[q][l];
    for (int q = 0; q < 8; q++)
        a[q] = c[q];
#else
    v8f t[8];
    for (int q = 0; q < 8; q += 2) {
        t[q] = __builtin_shufflevector(a[q], a[q + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[q + 1] = __builtin_shufflevector(a[q], a[q + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int q = 0; q < 8; q += 4) {
        a[q] = __builtin_shufflevector(t[q], t[q + 2], 0, 1, 8, 9, 4, 5, 12, 13);
        a[q + 1] = __builtin_shufflevector(t[q], t[q + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        a[q + 2] = __builtin_shufflevector(t[q + 1], t[q + 3], 0, 1, 8, 9, 4, 5, 12, 13);
        a[q + 3] = __builtin_shufflevector(t[q + 1], t[q + 3], 2, 3, 10, 11, 6, 7, 14, 15);
    }
    for (int q = 0; q < 4; q++) {
        t[q] = __builtin_shufflevector(a[q], a[q + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        t[q + 4] = __builtin_shufflevector(a[q], a[q + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
    for (int q = 0; q < 8; q++)
        a[q] = t[q];
#endif
}

/* Rows l in [l0, l1) (row l at dst + (l - l0) * ld) get lane l of the eight vectors v[0..7] (v is overwritten). */
static inline __attribute__((always_inline)) void put_cols(v8f *v, int l0, int l1, float *dst, size_t ld)
{
    tr8(v);
    for (int l = l0; l < l1; l++)
        memcpy(dst + (size_t)(l - l0) * ld, &v[l], sizeof v[l]);
}

/* Lane l of v[i] = src[l * ld + i] for rows l < nl, 0 for the others (i < 8). */
static inline __attribute__((always_inline)) void get_cols(const float *src, size_t ld, int nl, v8f *v)
{
    for (int l = 0; l < 8; l++) {
        v[l] = (v8f){0};
        if (l < nl)
            memcpy(&v[l], src + (size_t)l * ld, sizeof v[l]);
    }
    tr8(v);
}

/* Channels [c0, c0 + nch) (nch <= 16) of the sub-tile whose first sample
 * (the tile's, a template's start) is `first`: their spectra, in slots, at
 * xs + c * n. Times 2: the factor 1/2 of separating the pair of channels
 * that share a lane of the transform is in hspec. */
BS_VECTORIZED static void spectra_of_group(const bs_match_templates *t, const float *X, size_t ldx, int64_t n_t,
                                           int64_t first, int c0, int nch, float *scratch, float *xs)
{
    const int n = t->fir.n, h = n / 2;
    const int32_t *bin = t->fir.bin;
    bs_firbank_forward(&t->fir, X + (size_t)c0 * ldx, ldx, nch, first, n_t, scratch);
    const v8f *zr = (const v8f *)scratch, *zi = zr + n;
    const int na = nch < 8 ? nch : 8, nb = nch - na;
    for (int s0 = 0; s0 < h; s0 += 8) {
        v8f ar[8], ai[8], br[8], bi[8]; /* lanes: the channel pairs (c0 + l, c0 + 8 + l) */
        for (int i = 0; i < 8; i++) {
            const int s = s0 + i;
            if (s == 0) { /* bins 0 and n/2: real for each channel */
                const int r = bin[h];
                ar[0] = zr[0] + zr[0], ai[0] = zr[r] + zr[r];
                br[0] = zi[0] + zi[0], bi[0] = zi[r] + zi[r];
                continue;
            }
            /* Z_s + conj Z_{n-s} and -i (Z_s - conj Z_{n-s}): twice the two channels' bins s */
            const int i1 = bin[s], i2 = bin[n - s];
            ar[i] = zr[i1] + zr[i2], ai[i] = zi[i1] - zi[i2];
            br[i] = zi[i1] + zi[i2], bi[i] = zr[i2] - zr[i1];
        }
        put_cols(ar, 0, na, xs + (size_t)c0 * n + s0, (size_t)n);
        put_cols(ai, 0, na, xs + (size_t)c0 * n + h + s0, (size_t)n);
        if (nb > 0) {
            put_cols(br, 0, nb, xs + (size_t)(c0 + 8) * n + s0, (size_t)n);
            put_cols(bi, 0, nb, xs + (size_t)(c0 + 8) * n + h + s0, (size_t)n);
        }
    }
}

/* Template k's weight on each support channel in frequency, g_j = sum_p
 * U[k, j, p] hspec_p, into G (n_sup x n): the same for every window and
 * sub-tile, so bs_match_scores computes it once per chunk of templates. */
BS_VECTORIZED static void template_weights(const bs_match_templates *t, int k, float *G)
{
    const int n = t->fir.n, ns = t->n_sup, P = t->n_pc;
    const float *u = t->U + (size_t)k * ns * P;
    for (int j = 0; j < ns; j++)
        for (int v0 = 0; v0 < n; v0 += 64) { /* n is a multiple of 64 */
            v16f acc[4];
            for (int w = 0; w < 4; w++) {
                memcpy(&acc[w], t->hspec + v0 + 16 * w, sizeof acc[w]);
                acc[w] *= u[j * P];
            }
            for (int p = 1; p < P; p++)
                for (int w = 0; w < 4; w++) {
                    v16f hp;
                    memcpy(&hp, t->hspec + (size_t)p * n + v0 + 16 * w, sizeof hp);
                    acc[w] += u[j * P + p] * hp;
                }
            for (int w = 0; w < 4; w++)
                memcpy(G + (size_t)j * n + v0 + 16 * w, &acc[w], sizeof acc[w]);
        }
}

/* Template k's spectra of the nq sub-tiles whose channel spectra are in X
 * (TILES sub-tiles of C channels), into S + q * n, from its weights G
 * (template_weights): for every slot sum_j g_j x_{S_k[j]}, j ascending
 * (slot 0: bins 0 and n/2 as the real products they are). */
BS_VECTORIZED static void template_spectra(const bs_match_templates *t, int k, const float *X, int nq,
                                           const float *G, float *S)
{
    const int n = t->fir.n, h = n / 2, ns = t->n_sup;
    const int32_t *sup = t->support + (size_t)k * ns;
    for (int q = 0; q < nq; q++) {
        const float *xq = X + (size_t)q * t->n_chan * n;
        float *sr = S + (size_t)q * n, *si = sr + h;
        float e = 0, f = 0; /* slot 0: the real products of bins 0 and n/2, summed over the support in order */
        for (int j = 0; j < ns; j++) {
            const float *gj = G + (size_t)j * n, *xj = xq + (size_t)sup[j] * n;
            e += gj[0] * xj[0];
            f += gj[h] * xj[h];
        }
        for (int v0 = 0; v0 < h; v0 += 128) { /* h is a multiple of 128: n >= 256 */
            v16f ar[8] = {0}, ai[8] = {0};
            for (int j = 0; j < ns; j++) {
                const float *gr = G + (size_t)j * n + v0, *gi = gr + h;
                const float *xr = xq + (size_t)sup[j] * n + v0, *xi = xr + h;
                for (int w = 0; w < 8; w++) {
                    v16f a, b, c, d;
                    memcpy(&a, gr + 16 * w, sizeof a);
                    memcpy(&b, gi + 16 * w, sizeof b);
                    memcpy(&c, xr + 16 * w, sizeof c);
                    memcpy(&d, xi + 16 * w, sizeof d);
                    ar[w] += a * c;
                    ar[w] -= b * d;
                    ai[w] += a * d;
                    ai[w] += b * c;
                }
            }
            for (int w = 0; w < 8; w++) {
                memcpy(sr + v0 + 16 * w, &ar[w], sizeof ar[w]);
                memcpy(si + v0 + 16 * w, &ai[w], sizeof ai[w]);
            }
        }
        sr[0] = e;
        si[0] = f;
    }
}

/* The scores of templates [g0, g0 + 16) (those under K) on sub-tile q, whose
 * first column is window column `col` (nu columns kept): their spectra (S,
 * template k at S + ((k - kc0) * TILES + q) * n) as one transform, the real
 * parts templates g0..g0+7 and the imaginary parts g0+8..g0+15 (each
 * extended by conjugate symmetry to the n bins), back to samples; the rows
 * of templates in [k0, k1) written to B. */
BS_VECTORIZED static void group_scores(const bs_match_templates *t, const float *S, int kc0, int g0, int q,
                                       int64_t col, int nu, float *scratch, float *B, size_t ldb, int k0, int k1)
{
    const int n = t->fir.n, h = n / 2;
    const int32_t *bin = t->fir.bin;
    v8f *re = (v8f *)scratch, *im = re + n;
    const int na = t->K - g0 < 8 ? t->K - g0 : 8, nb = t->K - g0 - 8 < 0 ? 0 : (t->K - g0 - 8 < 8 ? t->K - g0 - 8 : 8);
    const size_t ld = (size_t)TILES * n;
    const float *sa = S + ((size_t)(g0 - kc0) * TILES + q) * n, *sb = sa + 8 * ld;
    for (int s0 = 0; s0 < h; s0 += 8) {
        v8f ar[8], ai[8], br[8], bi[8];
        get_cols(sa + s0, ld, na, ar);
        get_cols(sa + h + s0, ld, na, ai);
        get_cols(sb + s0, ld, nb, br);
        get_cols(sb + h + s0, ld, nb, bi);
        for (int i = 0; i < 8; i++) {
            const int s = s0 + i;
            if (s == 0) {
                re[0] = ar[0], im[0] = br[0];
                re[bin[h]] = ai[0], im[bin[h]] = bi[0];
                continue;
            }
            re[bin[s]] = ar[i] - bi[i], im[bin[s]] = ai[i] + br[i];
            re[bin[n - s]] = ar[i] + bi[i], im[bin[n - s]] = br[i] - ai[i];
        }
    }
    float *y = scratch + bs_firbank_scratch_floats(t->nt);
    bs_firbank_inverse(&t->fir, scratch, y);
    for (int hh = 0; hh < 2; hh++) {
        const int base = g0 + 8 * hh;
        const int la = k0 - base > 0 ? k0 - base : 0;
        int lb = (k1 < t->K ? k1 : t->K) - base;
        lb = lb < 8 ? lb : 8;
        if (la >= lb)
            continue;
        float *row = B + (size_t)(base + la - k0) * ldb + col;
        int i = 0;
        for (; i + 8 <= nu; i += 8) {
            v8f v[8];
            for (int j = 0; j < 8; j++)
                memcpy(&v[j], y + (size_t)(i + j) * BS_FIRBANK_LANES + 8 * hh, sizeof v[j]);
            put_cols(v, la, lb, row + i, ldb);
        }
        for (; i < nu; i++)
            for (int l = la; l < lb; l++)
                row[(size_t)(l - la) * ldb + i] = y[(size_t)i * BS_FIRBANK_LANES + 8 * hh + l];
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
    const int n = t->fir.n, C = t->n_chan, step = sub_cols(t), nb = t->nt_before;
    const int n_grp = (C + BS_FIRBANK_LANES - 1) / BS_FIRBANK_LANES;
    const int kch = (int)chunk_templates(t);
    /* whole groups of SCORE_GROUP templates: a template's bits depend on its partner in the transform */
    const int g_lo = k0 / SCORE_GROUP * SCORE_GROUP;
    const int g_hi = (k1 + SCORE_GROUP - 1) / SCORE_GROUP * SCORE_GROUP < t->K
                         ? (k1 + SCORE_GROUP - 1) / SCORE_GROUP * SCORE_GROUP
                         : t->K;
    int held = -1; /* the chunk of templates (its first) whose weights ws->G holds */
    for (int64_t u0 = 0; u0 < n_t; u0 += (int64_t)TILES * step) {
        const int nq = (int)((n_t - u0 + step - 1) / step < TILES ? (n_t - u0 + step - 1) / step : TILES);
#pragma omp parallel for schedule(static) num_threads(ws->n_threads)
        for (int it = 0; it < nq * n_grp; it++) {
            const int q = it / n_grp, c0 = (it % n_grp) * BS_FIRBANK_LANES;
            const int nch = C - c0 < BS_FIRBANK_LANES ? C - c0 : BS_FIRBANK_LANES;
            float *scratch = ws->fft + (size_t)omp_get_thread_num() * fft_floats(t);
            spectra_of_group(t, X, ldx, n_t, u0 + (int64_t)q * step - nb, c0, nch, scratch,
                             ws->X + (size_t)q * C * n);
        }
        for (int kc0 = g_lo; kc0 < g_hi; kc0 += kch) {
            const int kc1 = kc0 + kch < g_hi ? kc0 + kch : g_hi;
            if (held != kc0) { /* once per call when the templates fit one chunk */
#pragma omp parallel for schedule(dynamic, 1) num_threads(ws->n_threads)
                for (int k = kc0; k < kc1; k++)
                    template_weights(t, k, ws->G + (size_t)(k - kc0) * t->n_sup * n);
                held = kc0;
            }
#pragma omp parallel for schedule(dynamic, 1) num_threads(ws->n_threads)
            for (int k = kc0; k < kc1; k++)
                template_spectra(t, k, ws->X, nq, ws->G + (size_t)(k - kc0) * t->n_sup * n,
                                 ws->S + (size_t)(k - kc0) * TILES * n);
            const int ng = (kc1 - kc0 + SCORE_GROUP - 1) / SCORE_GROUP;
#pragma omp parallel for schedule(dynamic, 1) num_threads(ws->n_threads)
            for (int it = 0; it < ng * nq; it++) {
                const int q = it % nq, g0 = kc0 + (it / nq) * SCORE_GROUP;
                const int64_t col = u0 + (int64_t)q * step;
                const int nu = (int)(n_t - col < step ? n_t - col : step);
                group_scores(t, ws->S, kc0, g0, q, col, nu,
                             ws->fft + (size_t)omp_get_thread_num() * fft_floats(t), B, ldb, k0, k1);
            }
        }
    }
    return BS_OK;
}
