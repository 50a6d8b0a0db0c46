/*
 * test_cluster_e2e.c - detection then clustering on synthetic whitened data
 * with known units (made as in test_detect.c): learn the bases, build the
 * grid, detect batch by batch, build the centers, stream the spikes center by
 * center through bs_cluster_center, and check that every true unit maps to
 * one cluster holding >= 90% of its detected spikes, that each cluster is
 * mostly one unit, that templates peak near their unit and have the
 * expected trough, and that the memory of one center equals its size
 * function. Two units share each of two centers (same depth, opposite
 * columns, different shapes), so the graph clustering has to split them.
 */
#include "test.h"

#include <omp.h>

#include "cluster/cluster.h"
#include "common/rng.h"
#include "detect/detect.h"
#include "io/probe.h"
#include "mem/mem.h"

#include "common/lsan_options.h"

#define C 20
#define T 90000
#define NU 4
#define HALO 61
#define NB 15000
#define MAXGT 20000

static float *signal_;
static int64_t gt_t[MAXGT];
static int gt_u[MAXGT], n_gt;
static double unit_x[NU], unit_y[NU];

static void add_spike(int64_t t, int u, double amp)
{
    for (int c = 0; c < C; c++) {
        double dx = (c % 2) * 32.0 - unit_x[u], dy = (c / 2) * 20.0 - unit_y[u];
        double a = amp * exp(-(dx * dx + dy * dy) / (2 * 25.0 * 25.0));
        if (a < 0.05)
            continue;
        for (int s = -20; s <= 40; s++) {
            double w = -exp(-(s * s) / (2.0 * (2.0 + 0.5 * u) * (2.0 + 0.5 * u))) +
                       0.35 * exp(-((s - 10.0 - 2 * u) * (s - 10.0 - 2 * u)) / (2.0 * 36.0));
            signal_[(size_t)c * T + (size_t)(t + s)] += (float)(a * w);
        }
    }
}

static int gt_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int main(void)
{
    signal_ = malloc((size_t)C * T * sizeof(float));
    bs_rng r;
    bs_rng_seed(&r, 42);
    for (size_t i = 0; i < (size_t)C * T; i++)
        signal_[i] = (float)bs_rng_normal(&r);
    bs_probe probe;
    bs_probe_alloc(&probe, C);
    for (int c = 0; c < C; c++) {
        probe.column[c] = c;
        probe.x_um[c] = (c % 2) * 32.0;
        probe.y_um[c] = (c / 2) * 20.0;
    }
    /* units in pairs at depths 60 and 140 µm, one per column */
    for (int u = 0; u < NU; u++) {
        unit_x[u] = (u % 2) * 32.0;
        unit_y[u] = 60.0 + 80.0 * (u / 2);
    }
    /* independent refractory (2 ms) Poisson trains, 85 Hz */
    int64_t (*ev)[2] = malloc(MAXGT * sizeof *ev);
    for (int u = 0; u < NU; u++) {
        double time = 0.01;
        for (;;) {
            time += 0.002 - log(1.0 - bs_rng_uniform(&r)) / 85.0;
            int64_t t = (int64_t)(time * 30000.0);
            if (t > T - 100 || n_gt >= MAXGT)
                break;
            ev[n_gt][0] = t;
            ev[n_gt][1] = u;
            n_gt++;
        }
    }
    qsort(ev, (size_t)n_gt, sizeof *ev, gt_cmp);
    for (int i = 0; i < n_gt; i++) {
        gt_t[i] = ev[i][0];
        gt_u[i] = (int)ev[i][1];
        add_spike(gt_t[i], gt_u[i], 13.0 + (i % 4));
    }
    free(ev);

    /* detection */
    bs_detect_params dp;
    bs_detect_default_params(&dp);
    dp.n_neighbors = 20; /* spatial suppression over ~±30 µm, not the whole small probe */
    bs_snippet_set snips;
    CHECK(bs_snippets_init(&snips, &dp) == BS_OK);
    bs_snippets_collect(&snips, &dp, signal_, C, T, HALO, T - 2 * HALO);
    bs_temporal_basis basis;
    CHECK(bs_basis_learn(&snips, &dp, &basis) == BS_OK);
    bs_snippets_free(&snips);
    bs_detect_grid grid;
    CHECK(bs_grid_build(&probe, &dp, &grid) == BS_OK);
    bs_detect_output out;
    bs_detect_output_init(&out, grid.n_chans, dp.n_pcs);
    int64_t W = NB + 2 * HALO;
    float *win = malloc((size_t)C * W * sizeof(float));
    omp_set_num_threads(2);
    double t0 = omp_get_wtime();
    for (int64_t start = 0; start < T; start += NB) {
        int64_t n_valid = start + NB <= T ? NB : T - start;
        for (int c = 0; c < C; c++)
            for (int64_t i = 0; i < W; i++) {
                int64_t t = start - HALO + i;
                t = t < 0 ? 0 : t >= T ? T - 1 : t;
                win[(size_t)c * W + i] = signal_[(size_t)c * T + t];
            }
        CHECK(bs_detect_batch(&dp, &basis, &grid, &probe, win, W, HALO, n_valid, start, &out) == BS_OK);
    }
    free(win);
    printf("%d ground-truth spikes, %lld detected (%.2f s)\n", n_gt, (long long)out.n, omp_get_wtime() - t0);

    /* truth of each detection: the ground-truth spike within 2 samples, else -1 */
    int *det_u = malloc((size_t)out.n * sizeof *det_u);
    {
        int j = 0;
        for (int64_t s = 0; s < out.n; s++) {
            while (j < n_gt && gt_t[j] < out.spikes[s].t - 2)
                j++;
            det_u[s] = -1;
            for (int q = j; q < n_gt && gt_t[q] <= out.spikes[s].t + 2; q++)
                det_u[s] = gt_u[q];
        }
    }

    /* centers and streaming clustering */
    bs_cluster_params cp;
    bs_cluster_default_params(&cp);
    cp.min_spikes = 300; /* a short recording: let the graph clustering run on every center */
    bs_cluster_centers cen;
    CHECK(bs_centers_build(&probe, &grid, &cp, &cen) == BS_OK);
    printf("%d centers\n", cen.n_centers);
    CHECK(cen.n_centers == 5); /* depths 19, 59, ..., 179 µm on one shank, one x-center */
    CHECK(cen.n_centers > 0 && fabsf(cen.y_um[1] - 59.0f) < 1e-3f);
    int32_t *glob = malloc((size_t)out.n * sizeof *glob);
    bs_detected_spike *sk = malloc((size_t)out.n * sizeof *sk);
    float *fk = malloc((size_t)out.n * out.feat_len * sizeof *fk);
    int32_t *lk = malloc((size_t)out.n * sizeof *lk);
    int64_t *ik = malloc((size_t)out.n * sizeof *ik);
    int n_clusters = 0, tmpl_ok = 1;
    size_t worst_over = 0;
    for (int k = 0; k < cen.n_centers; k++) {
        int64_t nk = 0;
        for (int64_t s = 0; s < out.n; s++)
            if (cen.pos_center[out.spikes[s].pos] == k) {
                sk[nk] = out.spikes[s];
                memcpy(fk + nk * out.feat_len, out.features + s * out.feat_len, (size_t)out.feat_len * sizeof *fk);
                ik[nk++] = s;
            }
        if (nk == 0)
            continue;
        bs_center_templates tm;
        bs_mem_reset_peaks();
        size_t before = bs_mem_current(BS_DEV_HOST);
        CHECK(bs_cluster_center(&cp, &cen, k, &grid, &basis, sk, fk, nk, lk, &tm) == BS_OK);
        size_t peak = bs_mem_tag_peak("cluster/center", BS_DEV_HOST) + bs_mem_tag_peak("cluster/graph", BS_DEV_HOST) +
                      bs_mem_tag_peak("cluster/knn", BS_DEV_HOST);
        size_t plan = bs_cluster_center_bytes(nk, bs_center_n_chans(&cen, k), dp.n_pcs, &cp);
        CHECK_MSG(peak == plan, "center %d: peak %zu, planned %zu", k, peak, plan);
        worst_over = bs_mem_peak(BS_DEV_HOST) - before > worst_over ? bs_mem_peak(BS_DEV_HOST) - before : worst_over;
        printf("center %d (y %.0f µm): %lld spikes, %d channels, %d clusters\n", k, cen.y_um[k], (long long)nk,
               tm.n_chans, tm.n_clusters);
        for (int64_t i = 0; i < nk; i++)
            glob[ik[i]] = n_clusters + lk[i];
        /* templates: a clear trough at nt_before on the peak channel */
        for (int l = 0; l < tm.n_clusters; l++) {
            int j = 0;
            while (tm.chans[j] != tm.peak_chan[l])
                j++;
            const float *w = tm.wave + ((int64_t)l * tm.n_chans + j) * tm.nt;
            int imin = 0;
            for (int u = 1; u < tm.nt; u++)
                imin = w[u] < w[imin] ? u : imin;
            tmpl_ok &= abs(imin - basis.nt_before) <= 2 && w[imin] < -3.0f;
        }
        n_clusters += tm.n_clusters;
        bs_center_templates_free(&tm);
    }
    CHECK(tmpl_ok);
    printf("%d clusters in all\n", n_clusters);

    /* accuracy: per true unit, the share of its detected spikes in its main cluster */
    int *cnt = calloc((size_t)n_clusters, sizeof *cnt);
    int *main_of = malloc(NU * sizeof *main_of);
    for (int u = 0; u < NU; u++) {
        memset(cnt, 0, (size_t)n_clusters * sizeof *cnt);
        int tot = 0, ngt = 0;
        for (int64_t s = 0; s < out.n; s++)
            if (det_u[s] == u) {
                cnt[glob[s]]++;
                tot++;
            }
        for (int i = 0; i < n_gt; i++)
            ngt += gt_u[i] == u;
        int best = 0;
        for (int c = 1; c < n_clusters; c++)
            best = cnt[c] > cnt[best] ? c : best;
        main_of[u] = best;
        /* purity of that cluster */
        int in = 0, of_u = 0;
        for (int64_t s = 0; s < out.n; s++)
            if (glob[s] == best) {
                in++;
                of_u += det_u[s] == u;
            }
        double frac = tot ? (double)cnt[best] / tot : 0, pur = in ? (double)of_u / in : 0;
        printf("unit %d (x %.0f, y %.0f µm): %d spikes, %d detected, %.1f%% in cluster %d (purity %.1f%%)\n", u,
               unit_x[u], unit_y[u], ngt, tot, 100 * frac, best, 100 * pur);
        CHECK(frac >= 0.90);
        CHECK(pur >= 0.90);
    }
    for (int u = 0; u < NU; u++)
        for (int v = u + 1; v < NU; v++)
            CHECK(main_of[u] != main_of[v]);

    free(cnt);
    free(main_of);
    free(glob);
    free(sk);
    free(fk);
    free(lk);
    free(ik);
    free(det_u);
    bs_centers_free(&cen);
    bs_detect_output_free(&out);
    bs_grid_free(&grid);
    bs_basis_free(&basis);
    bs_probe_free(&probe);
    free(signal_);
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
