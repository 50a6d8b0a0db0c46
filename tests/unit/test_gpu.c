/*
 * test_gpu.c - the CUDA score backend (src/gpu/gpu.h) against the CPU path.
 *
 * Always checked: the scorer's size function against its buffers' sum; a
 * build without the backend refuses with BS_ERR_DEVICE. With a GPU (else the
 * test exits 77, skipped):
 *   - GPU scores equal the CPU scores (bs_match_scores) to float rounding,
 *     relative error < 1e-5, and a naive double-precision matched filter,
 *     on noise with a row stride larger than the window, for the shared-block
 *     set, a set with a too-wide template and one with 4 temporal components;
 *     every element written (the output is poisoned with NaN first); the
 *     same bits on a second call and on a shorter window;
 *   - the accountant holds exactly bs_gpu_scorer_bytes under "match/gpu" on
 *     device BS_DEV_GPU, and nothing once freed; a GPU budget below it is
 *     refused with BS_ERR_MEMORY before any device allocation;
 *   - peeling a noisy window with the GPU scores recovers >= 95% of the
 *     planted spikes and reports the same spikes as the CPU path up to float
 *     rounding (the count of differing spikes is printed; at most 1% may
 *     differ in time or template, amplitudes of the others within 1e-3).
 */
#include "test.h"

#include "gpu/gpu.h"
#include "match/match.h"
#include "match_synth.h"
#include "mem/mem.h"

enum { C = 64, NS = 12, P = 6, NT = 61, NB = 20 };

static void add_noise(float *X, size_t n, uint64_t seed, double sd)
{
    synth_rng r = {seed};
    for (size_t i = 0; i < n; i++)
        X[i] += (float)(sd * synth_normal(&r));
}

static void test_scores(const bs_match_templates *t, const char *what)
{
    const int64_t n_t = 5000, ldx = 5123;
    float *X = calloc((size_t)C * ldx, sizeof(float));
    add_noise(X, (size_t)C * ldx, 31, 1.0);
    size_t nB = (size_t)t->K * n_t;
    float *Bc = malloc(sizeof(float) * nB), *Bg = malloc(sizeof(float) * nB), *Bg2 = malloc(sizeof(float) * nB);
    bs_match_scores_ws ws;
    CHECK(bs_match_scores_ws_alloc(t, 2, &ws) == BS_OK);
    CHECK(bs_match_scores(t, X, (size_t)ldx, n_t, 0, t->K, Bc, (size_t)n_t, &ws) == BS_OK);
    bs_gpu_scorer *g = NULL;
    bs_mem_reset_peaks();
    CHECK(bs_gpu_scorer_create(0, t, n_t, &g) == BS_OK);
    CHECK(bs_mem_tag_current("match/gpu", BS_DEV_GPU) == bs_gpu_scorer_bytes(C, NT, t->n_pc, t->K, t->n_sup, n_t));
    for (size_t i = 0; i < nB; i++)
        Bg[i] = NAN;
    CHECK(g && bs_gpu_scores(g, X, (size_t)ldx, n_t, Bg) == BS_OK);
    double d2 = 0, r2 = 0;
    size_t n_nan = 0;
    for (size_t i = 0; i < nB; i++) {
        n_nan += isnan(Bg[i]);
        d2 += ((double)Bg[i] - Bc[i]) * ((double)Bg[i] - Bc[i]);
        r2 += (double)Bc[i] * Bc[i];
    }
    CHECK_MSG(n_nan == 0, "%s: %zu scores not written", what, n_nan);
    double rel = sqrt(d2 / r2);
    printf("%s: K = %d, GPU vs CPU scores: relative error %.2e\n", what, t->K, rel);
    CHECK_MSG(rel < 1e-5, "%s: relative error %g", what, rel);
    /* a naive double-precision filter at every 13th sample */
    float w[BS_MATCH_MAX_SUP * NT];
    double max_err = 0;
    for (int k = 0; k < t->K; k++) {
        bs_match_template_waveform(t, k, w);
        for (int64_t tt = 0; tt < n_t; tt += 13) {
            double acc = 0;
            for (int i = 0; i < t->n_sup; i++)
                for (int s = 0; s < NT; s++) {
                    int64_t u = tt + s - NB;
                    if (u >= 0 && u < n_t)
                        acc += (double)w[i * NT + s] * X[(size_t)t->support[k * t->n_sup + i] * ldx + u];
                }
            double e = fabs(acc - Bg[(size_t)k * n_t + tt]);
            max_err = e > max_err ? e : max_err;
        }
    }
    CHECK_MSG(max_err < 2e-5, "%s: GPU scores vs naive: %g", what, max_err);
    /* the same bits again, and on a shorter window */
    CHECK(bs_gpu_scores(g, X, (size_t)ldx, n_t, Bg2) == BS_OK);
    CHECK(memcmp(Bg, Bg2, sizeof(float) * nB) == 0);
    const int64_t n_s = 1700;
    float *Bs = malloc(sizeof(float) * (size_t)t->K * n_s), *Bcs = malloc(sizeof(float) * (size_t)t->K * n_s);
    CHECK(bs_gpu_scores(g, X, (size_t)ldx, n_s, Bs) == BS_OK);
    CHECK(bs_match_scores(t, X, (size_t)ldx, n_s, 0, t->K, Bcs, (size_t)n_s, &ws) == BS_OK);
    double ds = 0, rs = 0;
    for (size_t i = 0; i < (size_t)t->K * n_s; i++) {
        ds += ((double)Bs[i] - Bcs[i]) * ((double)Bs[i] - Bcs[i]);
        rs += (double)Bcs[i] * Bcs[i];
    }
    CHECK_MSG(sqrt(ds / rs) < 1e-5, "%s: short window: relative error %g", what, sqrt(ds / rs));
    /* a window longer than the scorer was made for is refused */
    CHECK(bs_gpu_scores(g, X, (size_t)ldx, n_t + 1, Bg2) == BS_ERR_INTERNAL);
    bs_gpu_scorer_free(g);
    CHECK(bs_mem_tag_current("match/gpu", BS_DEV_GPU) == 0);
    bs_match_scores_ws_free(&ws);
    free(Bs);
    free(Bcs);
    free(Bc);
    free(Bg);
    free(Bg2);
    free(X);
}

/* A noisy window peeled with CPU and GPU scores. */
static void test_peel(const bs_match_templates *t)
{
    const int64_t n_t = 6000;
    enum { NG = 90 };
    int64_t gt_t[NG];
    int gt_k[NG];
    synth_rng r = {99};
    float *X = calloc((size_t)C * n_t, sizeof(float));
    for (int i = 0; i < NG; i++) {
        gt_t[i] = 100 + (int64_t)(synth_uniform(&r) * (double)(n_t - 200));
        gt_k[i] = (int)(synth_uniform(&r) * t->K);
        synth_add_spike(t, X, n_t, gt_k[i], gt_t[i], (float)(9.0 + 3.0 * synth_uniform(&r)));
    }
    add_noise(X, (size_t)C * n_t, 5, 1.0);
    float *X2 = malloc(sizeof(float) * (size_t)C * n_t);
    memcpy(X2, X, sizeof(float) * (size_t)C * n_t);
    bs_pair_table pt;
    CHECK(bs_pair_table_build(t, BS_PAIR_FULL, &pt) == BS_OK);
    bs_peel_params p;
    bs_peel_params_default(&p);
    p.threshold = 6.0f;
    bs_peel_ws wc, wg;
    CHECK(bs_peel_ws_alloc(t, n_t, p.max_iter, 2, &wc) == BS_OK);
    CHECK(bs_peel_ws_alloc(t, n_t, p.max_iter, 2, &wg) == BS_OK);
    bs_gpu_scorer *g = NULL;
    CHECK(bs_gpu_scorer_create(0, t, n_t, &g) == BS_OK);
    wg.gpu = g;
    bs_spike *sc = malloc(sizeof(bs_spike) * (size_t)wc.max_spikes), *sg = malloc(sizeof(bs_spike) * (size_t)wg.max_spikes);
    int64_t nc = 0, ng = 0;
    int ic = 0, ig = 0;
    CHECK(bs_peel_batch(t, &pt, X, (size_t)n_t, n_t, 0, 0, n_t, &p, &wc, sc, &nc, &ic) == BS_OK);
    CHECK(bs_peel_batch(t, &pt, X2, (size_t)n_t, n_t, 0, 0, n_t, &p, &wg, sg, &ng, &ig) == BS_OK);
    int found = 0;
    for (int i = 0; i < NG; i++)
        for (int64_t j = 0; j < ng; j++)
            if (sg[j].tmpl == gt_k[i] && llabs(sg[j].time - gt_t[i]) <= 1) {
                found++;
                break;
            }
    int64_t differ = 0;
    double amp_err = 0;
    for (int64_t j = 0; j < (nc < ng ? nc : ng); j++) {
        if (sc[j].time != sg[j].time || sc[j].tmpl != sg[j].tmpl)
            differ++;
        else if (fabs((double)sc[j].amp - sg[j].amp) > amp_err)
            amp_err = fabs((double)sc[j].amp - sg[j].amp);
    }
    printf("peel: GPU %lld spikes (%d of %d planted found, %d iterations), CPU %lld (%d iterations); %lld differ in "
           "time or template, amplitudes within %.1e\n",
           (long long)ng, found, NG, ig, (long long)nc, ic, (long long)differ, amp_err);
    CHECK(found >= (int)(0.95 * NG));
    /* float rounding may flip a near-tie: at most 1% of the spikes, and the count within one */
    CHECK(llabs(nc - ng) <= 1 && differ <= (nc / 100 > 1 ? nc / 100 : 1) && amp_err < 1e-3);
    bs_gpu_scorer_free(g);
    bs_peel_ws_free(&wc);
    bs_peel_ws_free(&wg);
    bs_pair_table_free(&pt);
    free(sc);
    free(sg);
    free(X);
    free(X2);
}

int main(void)
{
    enum { K = 16 };
    int centers[K] = {4, 8, 14, 18, 24, 28, 34, 38, 44, 48, 54, 58, 6, 21, 41, 60};
    bs_match_templates t;
    CHECK(synth_templates(2024, C, K, NS, P, NT, NB, centers, &t) == BS_OK);
    /* the size function is the sum of the buffers (gpu.h) */
    CHECK(bs_gpu_scorer_bytes(C, NT, P, K, NS, 1000) ==
          4u * (P * NT + K * NS + K * NS * P + C * 1000 + C * P * 1000 + K * 1000));
    char name[256];
    size_t total = 0;
    bs_status st = bs_gpu_device_info(0, name, sizeof name, &total);
    if (!bs_gpu_compiled()) {
        bs_gpu_scorer *g = NULL;
        CHECK(bs_gpu_scorer_create(0, &t, 1000, &g) == BS_ERR_DEVICE && g == NULL);
        CHECK(strstr(bs_last_error(), "without the CUDA backend") != NULL);
        bs_match_templates_free(&t);
        printf("skipped: this build has no CUDA backend\n");
        return test_failed_ ? 1 : 77;
    }
    if (st != BS_OK) {
        bs_match_templates_free(&t);
        printf("skipped: no CUDA device (%s)\n", bs_last_error());
        return test_failed_ ? 1 : 77;
    }
    printf("device cuda:0: %s, %.1f GiB\n", name, (double)total / (1 << 30));

    /* a GPU budget below the scorer is refused before any device allocation */
    bs_mem_set_budget(BS_DEV_GPU, bs_gpu_scorer_bytes(C, NT, P, K, NS, 5000) - 1);
    bs_gpu_scorer *g = NULL;
    CHECK(bs_gpu_scorer_create(0, &t, 5000, &g) == BS_ERR_MEMORY && g == NULL);
    CHECK(bs_mem_current(BS_DEV_GPU) == 0);
    bs_mem_set_budget(BS_DEV_GPU, 0);

    test_scores(&t, "shared blocks");
    {
        /* a template too wide for a window (two separate channel groups) */
        bs_match_templates tw;
        CHECK(synth_wide_templates(C, NS, P, NT, NB, &tw) == BS_OK);
        test_scores(&tw, "a wide template");
        bs_match_templates_free(&tw);
        CHECK(synth_templates(77, C, 5, NS, 4, NT, NB, centers, &tw) == BS_OK);
        test_scores(&tw, "four components");
        bs_match_templates_free(&tw);
    }
    test_peel(&t);
    bs_match_templates_free(&t);
    TEST_MAIN_END();
}
