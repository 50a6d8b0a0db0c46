/*
 * test_peel.c - scores and per-batch peeling on synthetic data.
 *
 * Templates are random smooth low-rank waveforms with spatial decay on a
 * 64-channel 2-column probe (match_synth.h); spikes are placed at known times
 * with known amplitudes in white noise of unit variance. Checked:
 *   - scores equal a naive double-precision matched filter, and any split of
 *     the templates into chunks gives the same bits;
 *   - noise-free isolated spikes: exact times and amplitudes, zero residual;
 *   - recovery >= 95% (template and time within 1 sample) at SNR 9-12 with
 *     few false positives;
 *   - collisions of two units with overlapping supports at lags 3..30 samples:
 *     both spikes found;
 *   - consecutive batches with halos: spikes at and across the batch borders
 *     reported exactly once;
 *   - peeling windows within a batch (bs_peel_span): spikes straddling window
 *     edges found once, a small residual on noise-free data;
 *   - identical output for 1 and 2 threads and for the full, half and
 *     on-the-fly pair tables;
 *   - the amplitude prior (match.h): a spike goes to the template whose
 *     score and amplitude fit it best, at its least-squares amplitude; weight
 *     0 gives the same spikes as none; far from every template's amplitude
 *     a spike passes no threshold;
 *   - allocated bytes equal the size functions; bad parameters are refused.
 */
#include "test.h"

#include <omp.h>

#include "match/match.h"
#include "match_synth.h"
#include "mem/mem.h"

enum { C = 64, NS = 12, P = 6, NT = 61, NB = 20 };

typedef struct {
    int64_t t;
    int k;
    float a;
} gt_spike;

static void add_noise(float *X, size_t n, uint64_t seed, double sd)
{
    synth_rng r = {seed};
    for (size_t i = 0; i < n; i++)
        X[i] += (float)(sd * synth_normal(&r));
}

/* Match reported spikes to ground truth (same template, |dt| <= 1). */
static int count_found(const gt_spike *gt, int n_gt, const bs_spike *sp, int64_t n_sp, int64_t *n_false)
{
    int found = 0;
    char *used = calloc((size_t)n_sp + 1, 1);
    for (int g = 0; g < n_gt; g++) {
        for (int64_t i = 0; i < n_sp; i++)
            if (!used[i] && sp[i].tmpl == gt[g].k && llabs(sp[i].time - gt[g].t) <= 1) {
                used[i] = 1;
                found++;
                break;
            }
    }
    int64_t nf = 0;
    for (int64_t i = 0; i < n_sp; i++)
        nf += !used[i];
    *n_false = nf;
    free(used);
    return found;
}

/* bs_peel_batch on a window with per-template thresholds thk and the amplitude prior (mu, w) (either NULL),
 * max_iter iterations (0: the default) */
static int peel_opts(const bs_match_templates *t, const bs_pair_table *pt, float *X, int64_t n_t, int64_t t0,
                     int64_t cb, int64_t ce, float th, const float *thk, const float *mu, float w, int max_iter,
                     int n_threads, bs_spike **out, int64_t *n_out)
{
    bs_peel_params p;
    bs_peel_params_default(&p);
    p.threshold = th;
    p.tmpl_threshold = thk;
    p.amp_mu = mu;
    p.amp_prior = w;
    if (max_iter > 0)
        p.max_iter = max_iter;
    bs_peel_ws ws;
    *out = NULL;
    *n_out = 0;
    if (bs_peel_ws_alloc(t, n_t, p.max_iter, n_threads, &ws) != BS_OK)
        return -1;
    *out = malloc(sizeof(bs_spike) * (size_t)ws.max_spikes);
    int it = 0;
    bs_status st = bs_peel_batch(t, pt, X, (size_t)n_t, n_t, t0, cb, ce, &p, &ws, *out, n_out, &it);
    bs_peel_ws_free(&ws);
    return st == BS_OK ? it : -1;
}

static int peel_thk(const bs_match_templates *t, const bs_pair_table *pt, float *X, int64_t n_t, int64_t t0,
                    int64_t cb, int64_t ce, float th, const float *thk, int n_threads, bs_spike **out,
                    int64_t *n_out)
{
    return peel_opts(t, pt, X, n_t, t0, cb, ce, th, thk, NULL, 0.0f, 0, n_threads, out, n_out);
}

/* One peeling iteration (no collision pass) with the amplitude prior (mu, w) */
static int peel_prior(const bs_match_templates *t, const bs_pair_table *pt, float *X, int64_t n_t, float th,
                      const float *mu, float w, int n_threads, bs_spike **out, int64_t *n_out)
{
    return peel_opts(t, pt, X, n_t, 0, 0, n_t, th, NULL, mu, w, 1, n_threads, out, n_out);
}

static int peel(const bs_match_templates *t, const bs_pair_table *pt, float *X, int64_t n_t, int64_t t0,
                int64_t cb, int64_t ce, float th, int n_threads, bs_spike **out, int64_t *n_out)
{
    return peel_thk(t, pt, X, n_t, t0, cb, ce, th, NULL, n_threads, out, n_out);
}

/* A window of n_t samples holding one noise-free spike of template k at t0 and amplitude a: *X the
 * data, *X0 a copy, *B every template's scores (K x n_t) */
static void one_spike(const bs_match_templates *t, int k, int64_t t0, float a, int64_t n_t, float **X, float **X0,
                      float **B)
{
    *X = calloc((size_t)C * n_t, sizeof(float));
    *X0 = malloc(sizeof(float) * (size_t)C * n_t);
    *B = malloc(sizeof(float) * (size_t)t->K * n_t);
    synth_add_spike(t, *X, n_t, k, t0, a);
    memcpy(*X0, *X, sizeof(float) * (size_t)C * n_t);
    bs_match_scores_ws sws;
    CHECK(bs_match_scores_ws_alloc(t, 1, &sws) == BS_OK);
    CHECK(bs_match_scores(t, *X, (size_t)n_t, n_t, 0, t->K, *B, (size_t)n_t, &sws) == BS_OK);
    bs_match_scores_ws_free(&sws);
}

/* Scores against a naive matched filter; chunked = all at once, bit for bit;
 * every thread count the same bits. */
static void test_scores(const bs_match_templates *t)
{
    const int64_t n_t = 2300; /* three tiles: edge, interior, partial edge */
    float *X = calloc((size_t)C * n_t, sizeof(float));
    add_noise(X, (size_t)C * n_t, 11, 1.0);
    float *B = malloc(sizeof(float) * (size_t)t->K * n_t), *B2 = malloc(sizeof(float) * (size_t)t->K * n_t);
    bs_match_scores_ws ws;
    bs_mem_reset_peaks();
    CHECK(bs_match_scores_ws_alloc(t, 2, &ws) == BS_OK);
    CHECK(bs_mem_tag_peak("match/score_ws", BS_DEV_HOST) == bs_match_scores_ws_bytes(t, 2));
    CHECK(bs_match_scores(t, X, (size_t)n_t, n_t, 0, t->K, B, (size_t)n_t, &ws) == BS_OK);
    float w[BS_MATCH_MAX_SUP * NT];
    const int ns = t->n_sup;
    double max_err = 0;
    for (int k = 0; k < t->K; k++) {
        bs_match_template_waveform(t, k, w);
        for (int64_t tt = 0; tt < n_t; tt += 7) {
            double acc = 0;
            for (int i = 0; i < ns; i++)
                for (int s = 0; s < NT; s++) {
                    int64_t u = tt + s - NB;
                    if (u >= 0 && u < n_t)
                        acc += (double)w[i * NT + s] * X[(size_t)t->support[k * ns + i] * n_t + u];
                }
            double e = fabs(acc - B[(size_t)k * n_t + tt]);
            max_err = e > max_err ? e : max_err;
        }
    }
    CHECK_MSG(max_err < 2e-5, "scores vs naive: %g", max_err);
    printf("scores: %d templates, max |error| against the direct sums %.2g\n", t->K, max_err);
    /* chunks of 3 and 7 templates: their borders cut the groups of 16 that share an inverse transform */
    const int chunk[2] = {3, 7};
    for (int ci = 0; ci < 2; ci++) {
        memset(B2, 0xff, sizeof(float) * (size_t)t->K * n_t);
        for (int k0 = 0; k0 < t->K; k0 += chunk[ci]) {
            int k1 = k0 + chunk[ci] < t->K ? k0 + chunk[ci] : t->K;
            CHECK(bs_match_scores(t, X, (size_t)n_t, n_t, k0, k1, B2 + (size_t)k0 * n_t, (size_t)n_t, &ws) == BS_OK);
        }
        CHECK(memcmp(B, B2, sizeof(float) * (size_t)t->K * n_t) == 0);
    }
    bs_match_scores_ws_free(&ws);
    /* one thread and three give the same bits */
    for (int nth = 1; nth <= 3; nth += 2) {
        memset(B2, 0xff, sizeof(float) * (size_t)t->K * n_t);
        CHECK(bs_match_scores_ws_alloc(t, nth, &ws) == BS_OK);
        CHECK(bs_match_scores(t, X, (size_t)n_t, n_t, 0, t->K, B2, (size_t)n_t, &ws) == BS_OK);
        bs_match_scores_ws_free(&ws);
        CHECK(memcmp(B, B2, sizeof(float) * (size_t)t->K * n_t) == 0);
    }
    free(B);
    free(B2);
    free(X);
}

int main(void)
{
    /* 16 templates: pairs with centres 4 channels (2 rows, 40 um) apart */
    enum { K = 16 };
    int centers[K] = {4, 8, 14, 18, 24, 28, 34, 38, 44, 48, 54, 58, 6, 21, 41, 60};
    bs_match_templates t;
    CHECK(synth_templates(2024, C, K, NS, P, NT, NB, centers, &t) == BS_OK);
    bs_pair_table pt, pt_fly, pt_half;
    CHECK(bs_pair_table_build(&t, BS_PAIR_FULL, &pt) == BS_OK);
    CHECK(bs_pair_table_build(&t, BS_PAIR_ON_THE_FLY, &pt_fly) == BS_OK);
    CHECK(bs_pair_table_build(&t, BS_PAIR_HALF, &pt_half) == BS_OK);

    test_scores(&t);
    {
        /* a set with a template whose support is two separate channel groups */
        bs_match_templates tw;
        CHECK(synth_wide_templates(C, NS, P, NT, NB, &tw) == BS_OK);
        test_scores(&tw);
        bs_match_templates_free(&tw);
        /* four temporal components */
        CHECK(synth_templates(77, C, 5, NS, 4, NT, NB, centers, &tw) == BS_OK);
        test_scores(&tw);
        bs_match_templates_free(&tw);
        /* 300 templates: more than the 256 whose spectra are held at once, the last group partial */
        int *many = malloc(300 * sizeof *many);
        for (int k = 0; k < 300; k++)
            many[k] = (k * 37) % C;
        CHECK(synth_templates(78, C, 300, NS, P, NT, NB, many, &tw) == BS_OK);
        test_scores(&tw);
        bs_match_templates_free(&tw);
        free(many);
    }

    /* --- noise-free isolated spikes: exact times, amplitudes, zero residual */
    {
        const int64_t n_t = 3000;
        float *X = calloc((size_t)C * n_t, sizeof(float));
        gt_spike gt[8];
        for (int i = 0; i < 8; i++) {
            gt[i].t = 150 + 350 * i;
            gt[i].k = (i * 5) % K;
            gt[i].a = 10.0f + (float)i;
            synth_add_spike(&t, X, n_t, gt[i].k, gt[i].t, gt[i].a);
        }
        bs_spike *sp;
        int64_t n = 0;
        int it = peel(&t, &pt, X, n_t, 1000, 0, n_t, 6.0f, 0, &sp, &n);
        CHECK(it == 1);
        CHECK(n == 8);
        for (int i = 0; i < 8 && i < n; i++) {
            CHECK(sp[i].time == 1000 + gt[i].t);
            CHECK(sp[i].tmpl == gt[i].k);
            CHECK_NEAR(sp[i].amp, gt[i].a, 1e-4);
        }
        float rmax = 0;
        for (size_t i = 0; i < (size_t)C * n_t; i++)
            rmax = fabsf(X[i]) > rmax ? fabsf(X[i]) : rmax;
        CHECK_MSG(rmax < 1e-5, "residual max %g", rmax);
        free(sp);
        free(X);
    }

    /* --- per-template thresholds: spikes of amplitude 7 on templates 0 and 5
     * under a threshold of 8; template 0's own threshold of 6.5 takes its
     * spikes (exact times and amplitudes), template 5's stay in the data */
    {
        const int64_t n_t = 3000;
        float *X = calloc((size_t)C * n_t, sizeof(float)), *X0 = malloc(sizeof(float) * (size_t)C * n_t);
        for (int i = 0; i < 8; i++)
            synth_add_spike(&t, X, n_t, i % 2 ? 5 : 0, 150 + 350 * i, 7.0f);
        memcpy(X0, X, sizeof(float) * (size_t)C * n_t);
        float thk[K];
        for (int k = 0; k < K; k++)
            thk[k] = 8.0f;
        thk[0] = 6.5f;
        bs_spike *sp;
        int64_t n = 0;
        CHECK(peel(&t, &pt, X, n_t, 0, 0, n_t, 8.0f, 1, &sp, &n) >= 0 && n == 0);
        free(sp);
        CHECK(peel_thk(&t, &pt, X, n_t, 0, 0, n_t, 8.0f, thk, 1, &sp, &n) >= 0);
        CHECK(n == 4);
        for (int i = 0; i < 4 && i < n; i++) {
            CHECK(sp[i].time == 150 + 700 * i && sp[i].tmpl == 0);
            CHECK_NEAR(sp[i].amp, 7.0, 1e-4);
        }
        free(sp);
        /* what is left is template 5's four spikes, untouched */
        double left = 0, all = 0;
        for (size_t i = 0; i < (size_t)C * n_t; i++)
            left += (double)X[i] * X[i], all += (double)X0[i] * X0[i];
        CHECK_NEAR(left, all / 2, 1e-3 * all);
        free(X);
        free(X0);
    }

    /* --- per-template thresholds choose the template too: a noise-free spike of template k at
     * amplitude 7.5, under k's threshold of 8, scores at most b_j on its best other template j
     * (b_j < 7.5). With every threshold 8 nothing is taken; with j's own threshold under b_j, j
     * (over its own threshold) wins the columns from k (under its own): one spike of j, at j's
     * largest score near the spike, its least-squares amplitude */
    {
        const int64_t n_t = 600, t0 = 300;
        const int k = 12;
        float *X, *X0, *B;
        one_spike(&t, k, t0, 7.5f, n_t, &X, &X0, &B);
        int j = -1;
        int64_t tj = 0;
        for (int q = 0; q < K; q++)
            for (int64_t u = NB; q != k && u <= n_t - NT + NB; u++)
                if (j < 0 || B[(size_t)q * n_t + u] > B[(size_t)j * n_t + tj])
                    j = q, tj = u;
        const float bj = B[(size_t)j * n_t + tj];
        printf("own thresholds: template %d's spike scores at most %.3f on template %d (sample %lld)\n", k,
               (double)bj, j, (long long)tj);
        CHECK(bj > 2.0f && bj < 7.5f);
        float thk[K];
        for (int q = 0; q < K; q++)
            thk[q] = 8.0f;
        bs_spike *sp;
        int64_t n = 0;
        CHECK(peel_thk(&t, &pt, X, n_t, 0, 0, n_t, 8.0f, thk, 1, &sp, &n) >= 0 && n == 0);
        free(sp);
        thk[j] = bj - 1.0f;
        for (int nth = 1; nth <= 2; nth++) {
            memcpy(X, X0, sizeof(float) * (size_t)C * n_t);
            CHECK(peel_thk(&t, &pt, X, n_t, 0, 0, n_t, 8.0f, thk, nth, &sp, &n) >= 0);
            CHECK(n >= 1 && sp[0].tmpl == j && sp[0].time == tj);
            CHECK(n >= 1 && fabsf(sp[0].amp - bj) < 1e-4f);
            for (int64_t i = 1; i < n; i++) /* whatever else is taken is j's too, over its threshold */
                CHECK(sp[i].tmpl == j && sp[i].amp > thk[j]);
            free(sp);
        }
        free(B);
        free(X);
        free(X0);
    }

    /* --- the amplitude prior: a noise-free spike of template k at amplitude 10, whose best other
     * template j scores B_j < 10 there. Without the prior (or at weight 0) k takes it; with a_k = 30
     * and a_j = B_j at weight 0.5 (k: 100 - 0.5 * 400 < 0, j: B_j^2) j takes it, at its own
     * least-squares amplitude B_j; with a_j far too, nothing passes a threshold of 3; a spike of
     * amplitude 9 on its own template passes 8 when a_k = 9 (81 > 64), not when a_k = 20 */
    {
        const int64_t n_t = 600, t0 = 300;
        const int k = 12;
        float *X, *X0, *B;
        one_spike(&t, k, t0, 10.0f, n_t, &X, &X0, &B);
        int j = -1;
        for (int q = 0; q < K; q++)
            if (q != k && (j < 0 || B[(size_t)q * n_t + t0] > B[(size_t)j * n_t + t0]))
                j = q;
        const float bj = B[(size_t)j * n_t + t0];
        printf("prior: template %d's spike scores %.3f on template %d\n", k, (double)bj, j);
        CHECK(bj > 3.0f && bj < 9.5f);
        float mu[K];
        for (int q = 0; q < K; q++)
            mu[q] = 100.0f; /* every other template far from its score */
        mu[k] = 30.0f;
        mu[j] = bj;
        bs_spike *sp, *sp0;
        int64_t n = 0, n0 = 0;
        CHECK(peel_prior(&t, &pt, X, n_t, 3.0f, NULL, 0.0f, 1, &sp0, &n0) >= 0);
        CHECK(n0 == 1 && sp0[0].time == t0 && sp0[0].tmpl == k && fabsf(sp0[0].amp - 10.0f) < 1e-4f);
        memcpy(X, X0, sizeof(float) * (size_t)C * n_t);
        CHECK(peel_prior(&t, &pt, X, n_t, 3.0f, mu, 0.0f, 1, &sp, &n) >= 0); /* weight 0: no prior */
        int same = n == n0;
        for (int64_t i = 0; same && i < n; i++)
            same = sp[i].time == sp0[i].time && sp[i].tmpl == sp0[i].tmpl && sp[i].amp == sp0[i].amp;
        CHECK(same);
        free(sp), free(sp0);
        memcpy(X, X0, sizeof(float) * (size_t)C * n_t);
        CHECK(peel_prior(&t, &pt, X, n_t, 3.0f, mu, 0.5f, 1, &sp, &n) >= 0);
        CHECK_MSG(n == 1 && sp[0].time == t0 && sp[0].tmpl == j && sp[0].amp == bj, "n %lld tmpl %d amp %g",
                  (long long)n, n ? sp[0].tmpl : -1, n ? (double)sp[0].amp : 0.0);
        free(sp);
        mu[j] = 100.0f;
        memcpy(X, X0, sizeof(float) * (size_t)C * n_t);
        CHECK(peel_prior(&t, &pt, X, n_t, 3.0f, mu, 0.5f, 2, &sp, &n) >= 0 && n == 0);
        free(sp);
        memset(X, 0, sizeof(float) * (size_t)C * n_t);
        synth_add_spike(&t, X, n_t, k, t0, 9.0f);
        memcpy(X0, X, sizeof(float) * (size_t)C * n_t);
        mu[k] = 9.0f;
        CHECK(peel_prior(&t, &pt, X, n_t, 8.0f, mu, 0.5f, 1, &sp, &n) >= 0 && n == 1 && sp[0].tmpl == k);
        free(sp);
        mu[k] = 20.0f;
        memcpy(X, X0, sizeof(float) * (size_t)C * n_t);
        CHECK(peel_prior(&t, &pt, X, n_t, 8.0f, mu, 0.5f, 1, &sp, &n) >= 0 && n == 0);
        free(sp);
        free(X), free(X0), free(B);
    }

    /* --- recovery in noise + thread and strategy invariance + memory */
    {
        const int64_t n_t = 4000;
        enum { NG = 60 };
        gt_spike gt[NG];
        synth_rng r = {99};
        float *X = calloc((size_t)C * n_t, sizeof(float));
        for (int i = 0; i < NG; i++) {
            gt[i].t = 100 + (int64_t)(synth_uniform(&r) * (double)(n_t - 200));
            gt[i].k = (int)(synth_uniform(&r) * K);
            gt[i].a = (float)(9.0 + 3.0 * synth_uniform(&r));
            synth_add_spike(&t, X, n_t, gt[i].k, gt[i].t, gt[i].a);
        }
        add_noise(X, (size_t)C * n_t, 5, 1.0);
        float *X2 = malloc(sizeof(float) * (size_t)C * n_t), *X3 = malloc(sizeof(float) * (size_t)C * n_t);
        float *X0 = malloc(sizeof(float) * (size_t)C * n_t);
        memcpy(X2, X, sizeof(float) * (size_t)C * n_t);
        memcpy(X3, X, sizeof(float) * (size_t)C * n_t);
        memcpy(X0, X, sizeof(float) * (size_t)C * n_t);

        bs_spike *s1, *s2, *s3;
        int64_t n1, n2, n3;
        omp_set_num_threads(1);
        bs_mem_reset_peaks();
        int it1 = peel(&t, &pt, X, n_t, 0, 0, n_t, 6.0f, 1, &s1, &n1);
        size_t peak_peel = bs_mem_tag_peak("match/peel", BS_DEV_HOST) + bs_mem_tag_peak("match/scores", BS_DEV_HOST) +
                           bs_mem_tag_peak("match/score_ws", BS_DEV_HOST);
        CHECK(peak_peel == bs_peel_ws_bytes(&t, n_t, 50, 1));
        /* the memory plan sizes it from the shape alone (stage_match.c: no filter bank made) */
        bs_match_templates shape = {.K = t.K, .n_chan = t.n_chan, .nt = t.nt, .n_pc = t.n_pc, .n_sup = t.n_sup};
        CHECK(bs_peel_ws_bytes(&shape, n_t, 50, 1) == peak_peel);
        CHECK(bs_match_scores_ws_bytes(&shape, 2) == bs_match_scores_ws_bytes(&t, 2));
        CHECK(bs_mem_tag_peak("match/scores", BS_DEV_HOST) == bs_match_scores_bytes(K, n_t));
        omp_set_num_threads(2);
        int it2 = peel(&t, &pt, X2, n_t, 0, 0, n_t, 6.0f, 2, &s2, &n2);
        int it3 = peel(&t, &pt_half, X3, n_t, 0, 0, n_t, 6.0f, 2, &s3, &n3);
        CHECK(it1 >= 2 && it1 == it2 && it1 == it3);
        CHECK(n1 == n2 && n1 == n3);
        CHECK(n1 == n2 && memcmp(s1, s2, sizeof(bs_spike) * (size_t)n1) == 0);
        CHECK(n1 == n3 && memcmp(s1, s3, sizeof(bs_spike) * (size_t)n1) == 0);
        CHECK(memcmp(X, X2, sizeof(float) * (size_t)C * n_t) == 0);
        CHECK(memcmp(X, X3, sizeof(float) * (size_t)C * n_t) == 0);
        /* the column scan in groups of templates (rescanning only the groups
         * of a subtracted template's neighbours): the same bits */
        for (int rows = 1; rows <= 5; rows += 2) {
            bs_spike *s4;
            int64_t n4;
            memcpy(X3, X0, sizeof(float) * (size_t)C * n_t);
            bs_peel_force_groups(rows);
            int it4 = peel(&t, rows == 3 ? &pt_fly : &pt, X3, n_t, 0, 0, n_t, 6.0f, 2, &s4, &n4);
            bs_peel_force_groups(0);
            CHECK(it4 == it1 && n4 == n1);
            CHECK(n4 == n1 && memcmp(s1, s4, sizeof(bs_spike) * (size_t)n1) == 0);
            CHECK(memcmp(X, X3, sizeof(float) * (size_t)C * n_t) == 0);
            free(s4);
        }

        int64_t nf = 0;
        int found = count_found(gt, NG, s1, n1, &nf);
        printf("recovery: %d of %d found, %lld false positives, %lld reported, %d iterations\n", found, NG,
               (long long)nf, (long long)n1, it1);
        CHECK(found >= (int)(0.95 * NG));
        CHECK(nf <= 3);
        /* the residual is about noise: its variance is near 1 */
        double v = 0;
        for (size_t i = 0; i < (size_t)C * n_t; i++)
            v += (double)X[i] * X[i];
        v /= (double)C * n_t;
        CHECK_NEAR(v, 1.0, 0.03);
        free(s1);
        free(s2);
        free(s3);
        free(X);
        free(X2);
        free(X3);
        free(X0);
    }

    /* --- collisions: two units with overlapping supports at small lags */
    {
        const int lags[] = {3, 4, 5, 10, 20, 30, -3, -5, -12};
        const int NL_ = (int)(sizeof lags / sizeof lags[0]);
        const int pairs[][2] = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 1}, {3, 13}, {14, 9}};
        const int NP_ = (int)(sizeof pairs / sizeof pairs[0]);
        const int64_t n_t = 400 + (int64_t)NL_ * NP_ * 160;
        gt_spike *gt = malloc(sizeof(gt_spike) * (size_t)NL_ * NP_ * 2);
        float *X = calloc((size_t)C * n_t, sizeof(float));
        synth_rng r = {3};
        int ng = 0;
        for (int pi = 0; pi < NP_; pi++)
            for (int li = 0; li < NL_; li++) {
                int64_t t1 = 300 + (int64_t)(pi * NL_ + li) * 160;
                gt[ng].t = t1;
                gt[ng].k = pairs[pi][0];
                gt[ng].a = (float)(10.0 + 4.0 * synth_uniform(&r));
                gt[ng + 1].t = t1 + lags[li];
                gt[ng + 1].k = pairs[pi][1];
                gt[ng + 1].a = (float)(10.0 + 4.0 * synth_uniform(&r));
                synth_add_spike(&t, X, n_t, gt[ng].k, gt[ng].t, gt[ng].a);
                synth_add_spike(&t, X, n_t, gt[ng + 1].k, gt[ng + 1].t, gt[ng + 1].a);
                ng += 2;
            }
        add_noise(X, (size_t)C * n_t, 17, 1.0);
        /* the pairs do overlap in space and time: UtU at their lag is large */
        float row[2 * NT - 1];
        bs_pair_row(&t, 0, 1, row);
        float mx = 0;
        for (int d = 0; d < 2 * NT - 1; d++)
            mx = fabsf(row[d]) > mx ? fabsf(row[d]) : mx;
        printf("collisions: max |UtU[0,1,d]| = %.3f\n", mx);
        CHECK(mx > 0.2f);
        bs_spike *sp, *sp2;
        int64_t n, n2;
        float *X2 = malloc(sizeof(float) * (size_t)C * n_t);
        memcpy(X2, X, sizeof(float) * (size_t)C * n_t);
        omp_set_num_threads(1);
        int it = peel(&t, &pt, X, n_t, 0, 0, n_t, 6.0f, 1, &sp, &n);
        CHECK(it >= 2);
        /* the collision refits too: 2 threads, pair rows on the fly, same bits */
        omp_set_num_threads(2);
        int it2 = peel(&t, &pt_fly, X2, n_t, 0, 0, n_t, 6.0f, 2, &sp2, &n2);
        CHECK(it2 == it && n2 == n && memcmp(sp, sp2, sizeof(bs_spike) * (size_t)n) == 0);
        CHECK(memcmp(X, X2, sizeof(float) * (size_t)C * n_t) == 0);
        free(sp2);
        free(X2);
        int64_t nf;
        int found = count_found(gt, ng, sp, n, &nf);
        int both = 0, both_far = 0, n_far = 0;
        for (int g = 0; g < ng; g += 2) {
            int64_t nf2;
            int f = count_found(gt + g, 2, sp, n, &nf2);
            /* pairs 0..5 have centres 2 rows (40 um) apart, 6..8 one row */
            int far = g / 2 / NL_ < 6;
            n_far += far;
            if (f == 2) {
                both++;
                both_far += far;
            }
            else {
                fprintf(stderr, "collision missed: templates %d,%d lag %lld (t %lld a %.1f %.1f):", gt[g].k, gt[g + 1].k,
                        (long long)(gt[g + 1].t - gt[g].t), (long long)gt[g].t, gt[g].a, gt[g+1].a);
                for (int64_t i = 0; i < n; i++)
                    if (llabs(sp[i].time - gt[g].t) < 80)
                        fprintf(stderr, " [%lld k%d a%.1f]", (long long)sp[i].time, sp[i].tmpl, sp[i].amp);
                fprintf(stderr, "\n");
            }
        }
        printf("collisions: %d of %d pairs both found, %d of %d spikes, %lld false positives\n", both, ng / 2,
               found, ng, (long long)nf);
        printf("collisions: centres 40 um apart: %d of %d pairs; 20 um apart: %d of %d pairs\n", both_far, n_far,
               both - both_far, ng / 2 - n_far);
        CHECK(both_far == n_far);
        CHECK(both - both_far >= (ng / 2 - n_far) - 2);
        CHECK(nf <= 2);
        free(sp);
        free(X);
        free(gt);
    }

    /* --- consecutive batches with halos: spikes near borders reported once.
     * Eight batches of 600 central samples, halo 2 nt; one spike per border
     * region, at the border, one sample before or after it, or with its
     * waveform straddling it, plus one in the middle of the first batch and
     * one in the last 40 samples of the recording. */
    {
        const int64_t NBAT = 8, NC = 600, H = 2 * NT, NTOT = NBAT * NC;
        float *rec = calloc((size_t)C * NTOT, sizeof(float));
        const int64_t times[] = {300, 599, 1200, 1801, 2390, 3010, 3599, 4200, 4780};
        enum { NSP = 9 };
        gt_spike gt[NSP];
        for (int i = 0; i < NSP; i++) {
            gt[i].t = times[i];
            gt[i].k = (i * 5) % K;
            gt[i].a = 11.0f;
            synth_add_spike(&t, rec, NTOT, gt[i].k, gt[i].t, gt[i].a);
        }
        add_noise(rec, (size_t)C * NTOT, 23, 1.0);
        bs_spike all[256];
        int64_t n_all = 0;
        for (int64_t b = 0; b < NBAT; b++) {
            int64_t a0 = b * NC - H, a1 = (b + 1) * NC + H; /* window in absolute samples */
            int64_t n_t = a1 - a0;
            float *W = calloc((size_t)C * n_t, sizeof(float)); /* zeros outside the recording */
            for (int c = 0; c < C; c++)
                for (int64_t u = 0; u < n_t; u++) {
                    int64_t s = a0 + u;
                    if (s >= 0 && s < NTOT)
                        W[(size_t)c * n_t + u] = rec[(size_t)c * NTOT + s];
                }
            bs_spike *sp;
            int64_t n;
            CHECK(peel(&t, &pt, W, n_t, a0, H, H + NC, 6.0f, 0, &sp, &n) >= 1);
            for (int64_t i = 0; i < n; i++) {
                CHECK(sp[i].time >= b * NC && sp[i].time < (b + 1) * NC);
                if (n_all < 256)
                    all[n_all++] = sp[i];
            }
            free(sp);
            free(W);
        }
        int64_t nf;
        int found = count_found(gt, NSP, all, n_all, &nf);
        int exact = 0;
        for (int i = 0; i < NSP; i++)
            for (int64_t j = 0; j < n_all; j++)
                exact += all[j].time == gt[i].t && all[j].tmpl == gt[i].k;
        printf("halo: %d of %d found (%d at the exact sample), %lld extra, %lld reported\n", found, NSP, exact,
               (long long)nf, (long long)n_all);
        CHECK(found == NSP);
        CHECK(exact >= NSP - 1);
        CHECK(nf == 0);
        CHECK(n_all == NSP);
        free(rec);
    }

    /* --- peeling windows (bs_peel_span): the same spikes, one batch of 4800 central samples peeled in
     * windows of 600; a spike straddling two windows is found once, and the residual of noise-free
     * data is zero (each reported spike subtracted from X once, none twice). Also with windows of 1000
     * (edges elsewhere) and a window longer than the batch. */
    {
        const int64_t NC = 4800, H = 2 * NT, NTOT = NC + 2 * H;
        const int64_t times[] = {300, 599, 1200, 1801, 2390, 3010, 3599, 4200, 4780, 1790, 2400};
        enum { NSP = 11 };
        const int64_t wins[] = {600, 1000, 8000};
        for (int noise = 0; noise < 2; noise++)
            for (int wi = 0; wi < 3; wi++) {
                float *X = calloc((size_t)C * NTOT, sizeof(float));
                gt_spike gt[NSP];
                for (int i = 0; i < NSP; i++) {
                    gt[i].t = times[i];
                    gt[i].k = (i * 5 + 2 * (i >= 9)) % K;
                    gt[i].a = 11.0f;
                    synth_add_spike(&t, X, NTOT, gt[i].k, gt[i].t + H, gt[i].a);
                }
                if (noise)
                    add_noise(X, (size_t)C * NTOT, 29, 1.0);
                bs_peel_params p;
                bs_peel_params_default(&p);
                p.threshold = 6.0f;
                bs_peel_ws ws;
                CHECK(bs_peel_ws_alloc(&t, bs_peel_window_n_t(wins[wi], NT), p.max_iter, 0, &ws) == BS_OK);
                int64_t cap = bs_peel_span_max_spikes(&ws, NT, NC);
                CHECK(cap == (NC + wins[wi] - 1) / wins[wi] * ws.max_spikes);
                bs_spike *sp = malloc(sizeof(bs_spike) * (size_t)cap);
                int64_t n = 0, nf = 0;
                CHECK(bs_peel_span(&t, &pt, X, (size_t)NTOT, NTOT, -H, H, H + NC, &p, &ws, sp, &n) == BS_OK);
                int sorted = 1;
                for (int64_t i = 1; i < n; i++)
                    sorted &= sp[i - 1].time < sp[i].time || (sp[i - 1].time == sp[i].time && sp[i - 1].tmpl <= sp[i].tmpl);
                int found = count_found(gt, NSP, sp, n, &nf);
                double resid = 0;
                for (size_t i = 0; i < (size_t)C * NTOT; i++)
                    resid = fmax(resid, fabs(X[i]));
                printf("peel windows of %lld (%s): %d of %d found, %lld extra, %lld reported, max |residual| %.2g\n",
                       (long long)wins[wi], noise ? "noise" : "noise-free", found, NSP, (long long)nf, (long long)n,
                       resid);
                CHECK(found == NSP && nf == 0 && n == NSP && sorted);
                if (!noise) /* overlapping pairs (1790/1801, 2390/2400) leave a little; a spike subtracted
                               twice or not at all would leave its whole waveform (peak > 2) */
                    CHECK_MSG(resid < 0.5, "residual %g", resid);
                free(sp);
                bs_peel_ws_free(&ws);
                free(X);
            }
    }

    /* --- bad parameters */
    {
        bs_peel_ws ws;
        bs_peel_params p;
        bs_peel_params_default(&p);
        CHECK(p.threshold == 8.0f && p.max_iter == 50);
        CHECK(bs_peel_ws_alloc(&t, 500, 10, 1, &ws) == BS_OK);
        CHECK(ws.max_spikes == 10 * (500 / 62 + 1));
        float *X = calloc((size_t)C * 500, sizeof(float));
        bs_spike out[128];
        int64_t n;
        p.threshold = -1.0f;
        p.max_iter = 10;
        CHECK(bs_peel_batch(&t, &pt, X, 500, 500, 0, 0, 500, &p, &ws, out, &n, NULL) == BS_ERR_INPUT);
        CHECK(strstr(bs_last_error(), "'threshold'") != NULL);
        p.threshold = 8.0f;
        p.max_iter = 11;
        CHECK(bs_peel_batch(&t, &pt, X, 500, 500, 0, 0, 500, &p, &ws, out, &n, NULL) == BS_ERR_INPUT);
        CHECK(strstr(bs_last_error(), "'max_iter'") != NULL);
        p.max_iter = 10;
        CHECK(bs_peel_batch(&t, &pt, X, 500, 501, 0, 0, 500, &p, &ws, out, &n, NULL) == BS_ERR_INTERNAL);
        /* an all-zero window yields nothing */
        CHECK(bs_peel_batch(&t, &pt, X, 500, 500, 0, 0, 500, &p, &ws, out, &n, NULL) == BS_OK && n == 0);
        free(X);
        bs_peel_ws_free(&ws);
    }

    bs_pair_table_free(&pt);
    bs_pair_table_free(&pt_fly);
    bs_pair_table_free(&pt_half);
    bs_match_templates_free(&t);
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
