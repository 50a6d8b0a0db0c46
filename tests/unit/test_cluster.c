/*
 * test_cluster.c - per-center graph clustering on synthetic feature clouds:
 * exact kNN against a naive search (ties to the smaller landmark), recovery
 * of Gaussian clusters in 60 dimensions, a unimodal cloud stays one cluster,
 * the bimodality score, two well-separated clouds whose spike times come
 * from one refractory unit are collapsed by the refractory test (and kept
 * apart without it or with independent trains), small centers, identical
 * labels for 1 and 2 threads, the memory peak equal to the size
 * function, and a rare unit of 15 spikes clustered apart by the orphan
 * landmarks. And the two tiers of a center (bs_drop_low_tier_copies): a
 * low-tier cluster like a high-tier one makes no template, unless it holds
 * at least low_tier_majority times its spikes and a mean waveform that can
 * make a template, when the high-tier one makes none; a low-tier cluster like
 * none stays.
 */
#include "test.h"

#include <omp.h>

#include "cluster/cluster.h"
#include "cluster/stage_cluster.h"
#include "common/rng.h"
#include "mem/mem.h"

#include "common/lsan_options.h"

#define D 60

/* Refractory Poisson train (2 ms dead time) of n spikes at ~rate_hz, 30 kHz. */
static void train(bs_rng *r, int64_t *t, int64_t n, double rate_hz)
{
    double time = 0;
    for (int64_t i = 0; i < n; i++) {
        time += 0.002 - log(1.0 - bs_rng_uniform(r)) / rate_hz;
        t[i] = (int64_t)(time * 30000.0);
    }
}

/* n spikes: unit u = truth[i] drawn at random among K; mean sep·e_u (+ a shared offset), unit noise. */
static void clouds(bs_rng *r, int K, double sep, int64_t n, float *X, int32_t *truth)
{
    for (int64_t i = 0; i < n; i++) {
        int u = (int)(bs_rng_next(r) % (uint64_t)K);
        truth[i] = u;
        for (int d = 0; d < D; d++)
            X[i * D + d] = (float)((d == u ? sep : 0.0) + (d == D - 1 ? 3.0 : 0.0) + bs_rng_normal(r));
    }
}

/* Times for spikes labelled by truth: one refractory train per unit, merged in
 * spike order (spike i gets the next time of its unit's train). */
static void unit_times(bs_rng *r, const int32_t *truth, int64_t n, int K, int64_t *t)
{
    int64_t *tr = malloc((size_t)n * sizeof *tr);
    for (int u = 0; u < K; u++) {
        int64_t cnt = 0;
        for (int64_t i = 0; i < n; i++)
            cnt += truth[i] == u;
        train(r, tr, cnt, 5.0);
        int64_t q = 0;
        for (int64_t i = 0; i < n; i++)
            if (truth[i] == u)
                t[i] = tr[q++];
    }
    free(tr);
}

/* Worst over true units of the fraction of its spikes in its most common label. */
static double agreement(const int32_t *truth, const int32_t *lab, int64_t n, int K, int L)
{
    double worst = 1.0;
    int *cnt = calloc((size_t)L, sizeof *cnt);
    for (int u = 0; u < K; u++) {
        memset(cnt, 0, (size_t)L * sizeof *cnt);
        int64_t tot = 0;
        for (int64_t i = 0; i < n; i++)
            if (truth[i] == u) {
                cnt[lab[i]]++;
                tot++;
            }
        int best = 0;
        for (int c = 0; c < L; c++)
            best = cnt[c] > best ? cnt[c] : best;
        double f = tot ? (double)best / (double)tot : 1.0;
        worst = f < worst ? f : worst;
    }
    free(cnt);
    return worst;
}

/* n spikes against m landmarks; with m = 4000 the sgemm runs in two blocks */
/* 1 if the spikes of unit u all carry one label that no other spike carries. */
static int rare_alone(const int32_t *truth, const int32_t *lab, int64_t n, int u)
{
    int32_t l = -1;
    for (int64_t i = 0; i < n; i++)
        if (truth[i] == u) {
            if (l >= 0 && lab[i] != l)
                return 0;
            l = lab[i];
        }
    for (int64_t i = 0; i < n; i++)
        if (truth[i] != u && lab[i] == l)
            return 0;
    return l >= 0;
}

static void test_knn(int n, int m)
{
    /* integer-valued features: every float operation is exact, so ties are real ties */
    bs_rng r;
    bs_rng_seed(&r, 3);
    int k = 10, d = 8;
    float *X = malloc((size_t)n * d * sizeof *X), *L = malloc((size_t)m * d * sizeof *L);
    for (int i = 0; i < n * d; i++)
        X[i] = (float)((int)(bs_rng_next(&r) % 5) - 2);
    for (int i = 0; i < m * d; i++)
        L[i] = (float)((int)(bs_rng_next(&r) % 5) - 2);
    int32_t *kn = malloc((size_t)n * k * sizeof *kn);
    float *dist = malloc((size_t)n * k * sizeof *dist);
    CHECK(bs_cluster_knn(X, n, d, L, m, k, kn, dist) == BS_OK);
    int equal = 1, ties = 0;
    for (int i = 0; i < n; i++) {
        /* naive: selection by (distance, index) */
        double *dd = malloc((size_t)m * sizeof *dd);
        char *used = calloc((size_t)m, 1);
        for (int j = 0; j < m; j++) {
            double s = 0;
            for (int q = 0; q < d; q++)
                s += ((double)X[i * d + q] - L[j * d + q]) * ((double)X[i * d + q] - L[j * d + q]);
            dd[j] = s;
        }
        for (int q = 0; q < k; q++) {
            int best = -1;
            for (int j = 0; j < m; j++)
                if (!used[j] && (best < 0 || dd[j] < dd[best]))
                    best = j;
            used[best] = 1;
            equal &= kn[i * k + q] == best && dist[i * k + q] == (float)dd[best];
            if (q > 0)
                ties += dist[i * k + q] == dist[i * k + q - 1];
        }
        free(dd);
        free(used);
    }
    CHECK(equal);
    CHECK(ties > 100); /* the tie rule was exercised */
    free(X);
    free(L);
    free(kn);
    free(dist);
}

/* One high-tier cluster of 93 spikes along feature 0; low-tier clusters of n_like spikes at cosine 0.95 with
 * it and of 50 along feature 1 (cosine 0). Returns the counts left: hi, like, other. */
static void tiers(int64_t n_like, double majority, float like_norm, int64_t *out)
{
    float a = like_norm, fh[4] = {10, 0, 0, 0}, fl[8] = {0.95f * a, 0.3122f * a, 0, 0, 0, 5, 0, 0};
    int64_t nh[1] = {93}, nl[2] = {n_like, 50};
    bs_center_templates hi = {.n_clusters = 1, .n_chans = 2, .n_pcs = 2, .n_spikes = nh, .feat = fh};
    bs_center_templates lo = {.n_clusters = 2, .n_chans = 2, .n_pcs = 2, .n_spikes = nl, .feat = fl};
    bs_drop_low_tier_copies(&hi, &lo, 0.8, majority, 6);
    out[0] = nh[0], out[1] = nl[0], out[2] = nl[1];
}

static void test_tiers(void)
{
    int64_t c[3];
    tiers(255, 2, 8, c); /* the unit mostly under th_universal: its low-tier cluster makes the template */
    CHECK(c[0] == 0 && c[1] == 255 && c[2] == 50);
    tiers(186, 2, 8, c); /* exactly twice */
    CHECK(c[0] == 0 && c[1] == 186 && c[2] == 50);
    tiers(185, 2, 8, c); /* under twice: the low-tier cluster is the unit's tail */
    CHECK(c[0] == 93 && c[1] == 0 && c[2] == 50);
    tiers(255, 0, 8, c); /* majority 0: never */
    CHECK(c[0] == 93 && c[1] == 0 && c[2] == 50);
    tiers(7000, 2, 5.9f, c); /* many low-tier crossings whose mean leans to the unit's shape, under the norm 6 */
    CHECK(c[0] == 93 && c[1] == 0 && c[2] == 50);
    tiers(255, 2, 6.1f, c); /* just over it */
    CHECK(c[0] == 0 && c[1] == 255 && c[2] == 50);
}

int main(void)
{
    test_tiers();
    test_knn(500, 60);
    CHECK(bs_cluster_knn_block_rows(4000) < 1100);
    test_knn(1100, 4000);
    bs_cluster_params p;
    bs_cluster_default_params(&p);
    bs_rng r;

    /* 1. five clusters, refractory trains: recovered */
    bs_rng_seed(&r, 11);
    int64_t n = 2500, n2 = 1500;
    float *X = malloc((size_t)n * D * sizeof *X);
    int32_t *truth = malloc((size_t)n * sizeof *truth), *lab = malloc((size_t)n * sizeof *lab),
            *lab1 = malloc((size_t)n * sizeof *lab1);
    int64_t *t = malloc((size_t)n * sizeof *t);
    clouds(&r, 5, 8.0, n, X, truth);
    unit_times(&r, truth, n, 5, t);
    int L = 0;
    omp_set_num_threads(1);
    bs_mem_reset_peaks();
    size_t live0 = bs_mem_current(BS_DEV_HOST);
    double t0 = omp_get_wtime();
    CHECK(bs_cluster_graph(&p, X, n, D, t, lab, &L) == BS_OK);
    double agr = agreement(truth, lab, n, 5, L);
    printf("5 clusters: %d labels, worst agreement %.4f (%.2f s)\n", L, agr, omp_get_wtime() - t0);
    CHECK(agr >= 0.95);
    CHECK(L >= 5 && L <= 6);
    /* memory: the peak of the graph's tags equals the size function, nothing left */
    size_t peak = bs_mem_tag_peak("cluster/graph", BS_DEV_HOST) + bs_mem_tag_peak("cluster/knn", BS_DEV_HOST);
    CHECK_MSG(peak == bs_cluster_graph_bytes(n, D, &p), "peak %zu, planned %zu", peak, bs_cluster_graph_bytes(n, D, &p));
    CHECK(bs_mem_current(BS_DEV_HOST) == live0);
    /* 2 threads with every loop on threads (par_min_work 0): identical labels to 1 thread */
    omp_set_num_threads(2);
    bs_cluster_params pt = p;
    pt.par_min_work = 0;
    int L2 = 0;
    CHECK(bs_cluster_graph(&pt, X, n, D, t, lab1, &L2) == BS_OK);
    CHECK(L2 == L && memcmp(lab, lab1, (size_t)n * sizeof *lab) == 0);
    /* the initialisation's row cache: one row, or 40 rows (slots shared), the same labels as all n rows */
    for (int64_t cf = 1; cf <= 40 * 2512; cf += 40 * 2512 - 1) {
        bs_cluster_params pc = p;
        pc.init_cache_floats = cf;
        int L3 = 0;
        CHECK(bs_cluster_graph(&pc, X, n, D, t, lab1, &L3) == BS_OK);
        CHECK_MSG(L3 == L && memcmp(lab, lab1, (size_t)n * sizeof *lab) == 0, "cache of %lld floats", (long long)cf);
    }
    /* the planned size grows with the spike count (the plan of a stage's largest center covers the others),
       across the count where landmarks outgrow orphan_max_landmarks and the kNN blocks' rows drop */
    for (int64_t m = p.min_spikes, ok = 1; m <= 24000 && ok; m++) {
        ok = bs_cluster_graph_bytes(m + 1, D, &p) >= bs_cluster_graph_bytes(m, D, &p);
        CHECK_MSG(ok, "%lld spikes: %zu bytes, %lld: %zu", (long long)m, bs_cluster_graph_bytes(m, D, &p),
                  (long long)m + 1, bs_cluster_graph_bytes(m + 1, D, &p));
    }

    /* 2. one anisotropic unimodal cloud is not split (no times: bimodality only) */
    bs_rng_seed(&r, 12);
    n = n2;
    for (int64_t i = 0; i < n; i++)
        for (int d = 0; d < D; d++)
            X[i * D + d] = (float)(bs_rng_normal(&r) * (d < 3 ? 3.0 : 1.0));
    CHECK(bs_cluster_graph(&p, X, n, D, NULL, lab, &L) == BS_OK);
    printf("unimodal cloud: %d labels\n", L);
    CHECK(L == 1);

    /* 3. bimodality score: two clouds 8 apart vs one cloud cut in half along d0 */
    int8_t *side = malloc((size_t)n);
    bs_rng_seed(&r, 13);
    clouds(&r, 2, 8.0, n, X, truth);
    for (int64_t i = 0; i < n; i++)
        side[i] = truth[i] == 0 ? 1 : -1;
    double score;
    CHECK(bs_cluster_bimodality(X, n, D, side, 0.01, &score) == BS_OK);
    printf("bimodality: separated %.3f", score);
    CHECK(score > 0.9);
    for (int64_t i = 0; i < n; i++)
        for (int d = 0; d < D; d++)
            X[i * D + d] = (float)bs_rng_normal(&r);
    for (int64_t i = 0; i < n; i++)
        side[i] = X[i * D] > 0 ? 1 : -1;
    CHECK(bs_cluster_bimodality(X, n, D, side, 0.01, &score) == BS_OK);
    printf(", one cloud cut in half %.3f\n", score);
    CHECK(score < 0.6);
    free(side);

    /* 4. two separated clouds whose times are one refractory unit split in two:
     * collapsed by the refractory test. The modularity cut is disabled here
     * (0) so the tree reaches the refractory and bimodality tests. */
    bs_rng_seed(&r, 14);
    clouds(&r, 2, 10.0, n, X, truth);
    train(&r, t, n, 10.0); /* spike i is the i-th spike of one unit */
    bs_cluster_params q = p;
    q.modularity_split = 0.0;
    CHECK(bs_cluster_graph(&q, X, n, D, t, lab, &L) == BS_OK);
    printf("two clouds, one refractory unit: %d labels", L);
    CHECK(L == 1);
    q.refractory_test = 0;
    CHECK(bs_cluster_graph(&q, X, n, D, t, lab, &L) == BS_OK);
    printf("; without the refractory test: %d", L);
    CHECK(L == 2 && agreement(truth, lab, n, 2, L) > 0.99);
    q.refractory_test = 1;
    unit_times(&r, truth, n, 2, t); /* independent units */
    CHECK(bs_cluster_graph(&q, X, n, D, t, lab, &L) == BS_OK);
    printf("; independent units: %d\n", L);
    CHECK(L == 2 && agreement(truth, lab, n, 2, L) > 0.99);

    /* 4b. the same with fewer spikes than one block of the discriminant (its scratch rows are then the
     * spike count): split, and the discriminant stays inside the graph's scratch (ASan checks the bounds;
     * it used to write the weighted targets a full block further on, past the scratch of a small center) */
    {
        const int64_t n_few = 400;
        clouds(&r, 2, 10.0, n_few, X, truth);
        unit_times(&r, truth, n_few, 2, t);
        CHECK(bs_cluster_graph(&q, X, n_few, D, t, lab, &L) == BS_OK);
        printf("400 spikes, two clouds: %d labels\n", L);
        CHECK(L == 2 && agreement(truth, lab, n_few, 2, L) > 0.99);
    }

    /* 5. a center below min_spikes is one cluster */
    const int n_small = (int)p.min_spikes - 1;
    CHECK(bs_cluster_graph(&p, X, n_small, D, t, lab, &L) == BS_OK);
    int all0 = 1;
    for (int i = 0; i < n_small; i++)
        all0 &= lab[i] == 0;
    CHECK(L == 1 && all0);
    CHECK(bs_cluster_graph_bytes(n_small, D, &p) == 0);

    /* 6. orphan landmarks: a rare, large unit (15 spikes beside 585 of three common ones: 30 landmarks, so
     * it has none of its own) is a cluster of its own, within the size function's memory, with the
     * same labels on 2 threads */
    {
        const int64_t n6 = 600;
        bs_rng_seed(&r, 16);
        clouds(&r, 3, 10.0, n6, X, truth);
        for (int64_t i = 7; i < n6; i += 40) { /* 15 spikes of unit 3, far along its own axis, none of them
                                                   a regular landmark (every 20th spike) */
            truth[i] = 3;
            for (int d = 0; d < D; d++)
                X[i * D + d] = (float)((d == 3 ? 30.0 : 0.0) + (d == D - 1 ? 3.0 : 0.0) + bs_rng_normal(&r));
        }
        unit_times(&r, truth, n6, 4, t);
        bs_cluster_params po = p, p0 = p;
        p0.orphan_factor = 0;
        CHECK(bs_cluster_graph(&p0, X, n6, D, t, lab, &L) == BS_OK);
        int own0 = rare_alone(truth, lab, n6, 3);
        omp_set_num_threads(1);
        bs_mem_reset_peaks();
        CHECK(bs_cluster_graph(&po, X, n6, D, t, lab, &L) == BS_OK);
        size_t pk = bs_mem_tag_peak("cluster/graph", BS_DEV_HOST) + bs_mem_tag_peak("cluster/knn", BS_DEV_HOST);
        CHECK_MSG(pk == bs_cluster_graph_bytes(n6, D, &po), "peak %zu, planned %zu", pk,
                  bs_cluster_graph_bytes(n6, D, &po)); /* room for as many orphans as landmarks */
        CHECK(bs_cluster_graph_bytes(n6, D, &po) > bs_cluster_graph_bytes(n6, D, &p0));
        int own = rare_alone(truth, lab, n6, 3);
        printf("a rare unit of 15 spikes (none a regular landmark): its own cluster %s orphan landmarks (%d "
               "labels), %s without\n", own ? "with" : "NOT with", L, own0 ? "also" : "not");
        CHECK(own && !own0 && L == 4);
        CHECK(agreement(truth, lab, n6, 3, L) >= 0.95);
        omp_set_num_threads(2);
        po.par_min_work = 0;
        CHECK(bs_cluster_graph(&po, X, n6, D, t, lab1, &L2) == BS_OK);
        CHECK(L2 == L && memcmp(lab, lab1, (size_t)n6 * sizeof *lab) == 0);
        /* a center of more regular landmarks than orphan_max_landmarks gets none: the plan says so too */
        po.orphan_max_landmarks = 29;
        CHECK(bs_cluster_graph_bytes(n6, D, &po) == bs_cluster_graph_bytes(n6, D, &p0));
    }

    free(X);
    free(truth);
    free(lab);
    free(lab1);
    free(t);
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
