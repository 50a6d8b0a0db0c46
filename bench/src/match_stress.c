/*
 * match_stress.c - template matching with many templates under a memory
 * budget (issue "never out of memory": K >= 17,000 within 4 GiB).
 *
 * Feeds K synthetic channel-sparse templates (tests/unit/match_synth.h: a
 * 2-column probe with 20 µm pitch, 32-channel supports, 6 temporal
 * components) to the matching stage exactly as `sort` runs it: the pair
 * table strategy is the fastest of full / half / on-the-fly whose bytes fit
 * the budget next to the templates and the peeling workspace (the planner's
 * rule, plan.c), the accountant enforces the budget, and whitened batches of
 * Gaussian noise with spikes of every template at --rate Hz (10) are peeled
 * in peeling windows of --window samples (4096, the sort default; 0: one
 * window per batch) as the match stage does (bs_peel_span). Prints, per K:
 * overlapping pairs, strategy, the bytes of each buffer, the seconds of the
 * cluster stage's check for sums and copies of templates, seconds per batch,
 * tracked peak and process peak RSS. With --gpu-mem SIZE the scores are
 * computed on CUDA device 0 (src/gpu/gpu.h) under that GPU budget, as
 * `sort --device cuda --gpu-mem SIZE` does, and the GPU's tracked peak is
 * printed too.
 *
 * Busy templates: with --busy N, N templates spread over the probe fire at
 * --rate and the others at --rest-rate HZ (default: --rate), as in a session
 * whose artifacts made thousands of templates beside the real units. On the
 * fly, three quarters of what the budget leaves keep the pair rows of the
 * templates expected to fire most (bs_pair_table_keep, as the match stage
 * keeps those with the most clustered spikes); --no-keep computes every row.
 * --no-sum-check skips the timing of the sum-template check (about 600 s on
 * one thread at K = 17,345).
 *
 *   bench_match_stress [--budget 4G] [--gpu-mem SIZE] [--channels 384] [--batch-seconds 0.5] [--batches 3]
 *                      [--rate HZ] [--busy N] [--rest-rate HZ] [--no-keep] [--no-sum-check]
 *                      [--window 4096] K...
 *
 * Not a test: timings depend on the machine (bench/README.md).
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../../src/common/progress.h"
#include "../../src/gpu/gpu.h"
#include "../../src/match/match.h"
#include "../../src/match/sum_templates.h"
#include "../../src/mem/mem.h"
#include "../../tests/unit/match_synth.h"

static double mib(double b)
{
    return b / 1048576.0;
}

static size_t peak_rss(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024;
}

typedef struct {
    double rate_hz;      /* spikes per second of a busy template */
    int busy;            /* busy templates (0: all of them) */
    double rest_rate_hz; /* spikes per second of the others */
    int keep;            /* 1: on the fly, keep the busy templates' rows within the budget */
    int sum_check;       /* 1: time the cluster stage's check for sums and copies of templates */
} stress_rates;

/* Template k is busy when it is one of `busy` spread evenly (every K / busy-th). */
static int is_busy(const stress_rates *sr, int K, int k)
{
    return sr->busy <= 0 || sr->busy >= K || (int64_t)k * sr->busy % K < sr->busy;
}

static int run_one(int K, int C, int64_t nb, int n_batches, size_t budget, const stress_rates *sr, int64_t window,
                   size_t gpu_budget)
{
    const double rate_hz = sr->rate_hz;
    const int P = 6, nt = 61, nbf = 20, n_sup = 32, halo = 2 * nt;
    int64_t n_t = nb + 2 * halo;
    int64_t peel_n_t = bs_peel_window_n_t(window > 0 && window < nb ? window : nb, nt);
    int *centers = malloc(sizeof(int) * (size_t)K);
    for (int k = 0; k < K; k++)
        centers[k] = (int)((int64_t)k * C / K);
    bs_mem_reset_peaks();
    double t0 = bs_now_s();
    bs_match_templates mt;
    bs_status st = synth_templates(7, C, K, n_sup, P, nt, nbf, centers, &mt);
    free(centers);
    if (st != BS_OK) {
        fprintf(stderr, "K=%d: templates: %s\n", K, bs_last_error());
        return 1;
    }
    double t_tpl = bs_now_s() - t0;
    int64_t nnz = bs_pair_count(K, n_sup, mt.support, C);
    size_t ws_bytes = bs_peel_ws_bytes(&mt, peel_n_t, 50, omp_get_max_threads());
    size_t x_bytes = sizeof(float) * (size_t)C * n_t;
    size_t fixed = bs_match_templates_bytes(C, nt, P, K, n_sup) + ws_bytes + x_bytes;
    static const bs_pair_mode modes[3] = {BS_PAIR_FULL, BS_PAIR_HALF, BS_PAIR_ON_THE_FLY};
    static const char *const names[3] = {"full", "half", "on the fly"};
    int pick = -1;
    for (int i = 0; i < 3 && pick < 0; i++)
        if (fixed + bs_pair_table_bytes(K, nnz, nt, modes[i]) <= budget)
            pick = i;
    printf("K=%d: %lld overlapping pairs; pair table full %.0f MiB, half %.0f MiB (dense would be %.0f MiB); "
           "peeling workspace %.0f MiB; templates %.1f s\n",
           K, (long long)nnz, mib((double)bs_pair_table_bytes(K, nnz, nt, BS_PAIR_FULL)),
           mib((double)bs_pair_table_bytes(K, nnz, nt, BS_PAIR_HALF)), mib(bs_pair_dense_bytes(K, nt)),
           mib((double)ws_bytes), t_tpl);
    if (pick < 0) {
        printf("K=%d: does not fit %.0f MiB even on the fly (needs %.0f MiB): reduce --window\n", K,
               mib((double)budget), mib((double)fixed));
        bs_match_templates_free(&mt);
        return 0;
    }
    bs_pair_table pt = {0};
    bs_peel_ws ws = {0};
    t0 = bs_now_s();
    st = bs_pair_table_build(&mt, modes[pick], &pt);
    int n_busy = 0;
    int64_t *weight = malloc(sizeof(int64_t) * (size_t)K);
    for (int k = 0; k < K && weight; k++) {
        n_busy += is_busy(sr, K, k);
        weight[k] = (int64_t)(1000.0 * (is_busy(sr, K, k) ? sr->rate_hz : sr->rest_rate_hz));
    }
    if (st == BS_OK && !weight)
        st = BS_ERR_MEMORY;
    if (st == BS_OK && modes[pick] == BS_PAIR_ON_THE_FLY && sr->keep) { /* the match stage's rule (stage_match.c) */
        size_t used = fixed + bs_pair_table_bytes(K, nnz, nt, BS_PAIR_ON_THE_FLY);
        st = bs_pair_table_keep(&mt, &pt, weight, budget > used ? (budget - used) / 4 * 3 : 0);
    }
    free(weight);
    double t_pairs = bs_now_s() - t0;
    if (st == BS_OK && pt.mode == BS_PAIR_SOME)
        printf("K=%d: on the fly, the rows of %d templates kept (%.0f MiB; %d busy templates)\n", K, pt.n_kept,
               mib((double)pt.n_rows * pt.n_lag * 4), n_busy);
    /* the cluster stage's check for sums and copies of templates (its defaults: 3 samples at 30 kHz) */
    bs_sum_fit *fit = st == BS_OK && sr->sum_check ? malloc(sizeof *fit * (size_t)K) : NULL;
    uint8_t *drop = fit ? malloc((size_t)K) : NULL;
    double t_sumfit = 0;
    int n_drop = 0;
    if (drop) {
        bs_sum_template_params sp;
        bs_sum_template_params_default(&sp);
        t0 = bs_now_s();
        st = bs_sum_templates_fit(&mt, &pt, 3, omp_get_max_threads(), fit);
        n_drop = st == BS_OK ? bs_sum_templates_select(&mt, fit, &sp, drop) : 0;
        t_sumfit = bs_now_s() - t0;
    }
    free(fit);
    free(drop);
    if (st == BS_OK && sr->sum_check)
        printf("K=%d: sums and copies check %.1f s (%d removed)\n", K, t_sumfit, n_drop);
    if (st == BS_OK)
        st = bs_peel_ws_alloc(&mt, peel_n_t, 50, 0, &ws);
    bs_gpu_scorer *gpu = NULL;
    if (st == BS_OK && gpu_budget && (st = bs_gpu_scorer_create(0, &mt, peel_n_t, &gpu)) == BS_OK)
        ws.gpu = gpu;
    float *X = st == BS_OK ? bs_mem_alloc("bench/batch", x_bytes) : NULL;
    bs_spike *out = X ? bs_mem_alloc("bench/spikes", sizeof(bs_spike) * (size_t)bs_peel_span_max_spikes(&ws, nt, nb))
                      : NULL;
    if (!out) {
        fprintf(stderr, "K=%d: %s\n", K, bs_last_error());
        bs_mem_free(X);
        bs_peel_ws_free(&ws);
        bs_gpu_scorer_free(gpu);
        bs_pair_table_free(&pt);
        bs_match_templates_free(&mt);
        return 1;
    }
    synth_rng r = {11};
    bs_peel_params pp;
    bs_peel_params_default(&pp);
    double t_sum = 0;
    int64_t found = 0, injected = 0;
    for (int b = 0; b < n_batches && st == BS_OK; b++) {
        for (size_t i = 0; i < (size_t)C * n_t; i++)
            X[i] = (float)synth_normal(&r);
        double busy_hz = n_busy * rate_hz, rest_hz = (K - n_busy) * sr->rest_rate_hz;
        int64_t n_spk = (int64_t)((busy_hz + rest_hz) * (double)nb / 30000.0);
        for (int64_t s = 0; s < n_spk; s++) {
            /* a busy template with probability busy_hz / (busy_hz + rest_hz), then one of its kind uniformly */
            int want = synth_uniform(&r) * (busy_hz + rest_hz) < busy_hz, k;
            do
                k = (int)(synth_uniform(&r) * K);
            while (n_busy < K && is_busy(sr, K, k) != want);
            int64_t tt = halo + (int64_t)(synth_uniform(&r) * (double)nb);
            synth_add_spike(&mt, X, n_t, k, tt, (float)(12.0 + 8.0 * synth_uniform(&r)));
        }
        injected += n_spk;
        int64_t n_out = 0;
        t0 = bs_now_s();
        st = bs_peel_span(&mt, &pt, X, (size_t)n_t, n_t, 0, halo, halo + nb, &pp, &ws, out, &n_out);
        t_sum += bs_now_s() - t0;
        found += n_out;
    }
    printf("K=%d: strategy %s%s (built in %.1f s); %.2f s per batch of %lld samples (%d batches, %d threads); "
           "%lld of %lld injected spikes found; tracked peak %.0f MiB; peak RSS %.0f MiB; budget %.0f MiB\n",
           K, names[pick], pt.mode == BS_PAIR_SOME ? ", busiest rows kept" : "", t_pairs, t_sum / n_batches,
           (long long)nb, n_batches, omp_get_max_threads(),
           (long long)found, (long long)injected, mib((double)bs_mem_peak(BS_DEV_HOST)), mib((double)peak_rss()),
           mib((double)budget));
    if (gpu)
        printf("K=%d: scores on the GPU: tracked GPU peak %.0f MiB, GPU budget %.0f MiB\n", K,
               mib((double)bs_mem_peak(BS_DEV_GPU)), mib((double)gpu_budget));
    fflush(stdout);
    bs_mem_free(X);
    bs_mem_free(out);
    bs_gpu_scorer_free(gpu);
    bs_peel_ws_free(&ws);
    bs_pair_table_free(&pt);
    bs_match_templates_free(&mt);
    return st == BS_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    size_t budget = (size_t)4 << 30, gpu_budget = 0;
    int C = 384, n_batches = 3;
    double batch_s = 0.5;
    stress_rates sr = {10.0, 0, -1.0, 1, 1};
    int64_t window = 4096;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--budget") == 0 && i + 1 < argc) {
            if (bs_mem_parse_size(argv[++i], &budget) != BS_OK)
                return 1;
        } else if (strcmp(argv[i], "--gpu-mem") == 0 && i + 1 < argc) {
            if (bs_mem_parse_size(argv[++i], &gpu_budget) != BS_OK)
                return 1;
        } else if (strcmp(argv[i], "--channels") == 0 && i + 1 < argc) {
            C = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--batch-seconds") == 0 && i + 1 < argc) {
            batch_s = atof(argv[++i]);
        } else if (strcmp(argv[i], "--rate") == 0 && i + 1 < argc) {
            sr.rate_hz = atof(argv[++i]);
        } else if (strcmp(argv[i], "--busy") == 0 && i + 1 < argc) {
            sr.busy = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--rest-rate") == 0 && i + 1 < argc) {
            sr.rest_rate_hz = atof(argv[++i]);
        } else if (strcmp(argv[i], "--no-keep") == 0) {
            sr.keep = 0;
        } else if (strcmp(argv[i], "--no-sum-check") == 0) {
            sr.sum_check = 0;
        } else if (strcmp(argv[i], "--window") == 0 && i + 1 < argc) {
            window = atoll(argv[++i]);
        } else if (strcmp(argv[i], "--batches") == 0 && i + 1 < argc) {
            n_batches = atoi(argv[++i]);
        } else {
            int K = atoi(argv[i]);
            if (K <= 0) {
                fprintf(stderr, "usage: %s [--budget 4G] [--gpu-mem SIZE] [--channels 384] [--batch-seconds 0.5] "
                                "[--batches 3] [--rate HZ] [--busy N] [--rest-rate HZ] [--no-keep] [--no-sum-check] "
                                "[--window 4096] K...\n",
                        argv[0]);
                return 1;
            }
            bs_mem_set_budget(BS_DEV_HOST, budget);
            bs_mem_set_budget(BS_DEV_GPU, gpu_budget);
            stress_rates r = sr;
            if (r.rest_rate_hz < 0)
                r.rest_rate_hz = r.rate_hz;
            rc |= run_one(K, C, (int64_t)(batch_s * 30000), n_batches, budget, &r, window, gpu_budget);
        }
    }
    return rc;
}
