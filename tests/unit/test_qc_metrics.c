/*
 * test_qc_metrics.c - every quality-metric function of src/qc against the
 * independent Python reference in tests/data/qc/qc_fixtures.json (made by
 * tests/data/qc/gen_qc_fixtures.py: numpy / scipy / scikit-learn
 * transcriptions of SpikeInterface's and Allen's definitions), plus
 * the top-k eigen-solver against the Jacobi solver, and hand-derived cases: empty units, an ISI exactly on the threshold, the Allen
 * label rule with NaN, the numpy histogram on bin edges, scipy's truncating
 * Gaussian smoothing of an integer histogram.
 *
 * Tolerances: metrics computed from integers (counts, bins) must agree to
 * rounding (1e-12 relative); medians of float32 values exactly; PCA metrics
 * to 1e-7 relative (both sides in double; the references solve the same
 * linear algebra by other routes: LAPACK SVD, inverse, ball tree).
 */
#include "test.h"

#include <cjson/cJSON.h>
#include <stdint.h>

#include "common/eigen.h"
#include "common/fileio.h"
#include "mem/mem.h"
#include "qc/qc.h"
#include "qc/qc_internal.h"

static double num(const cJSON *o, const char *k)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    return it && cJSON_IsNumber(it) ? it->valuedouble : NAN;
}

static int64_t arr_len(const cJSON *a) { return a ? cJSON_GetArraySize(a) : 0; }

static double *arr_d(const cJSON *a)
{
    int64_t n = arr_len(a);
    double *v = malloc(sizeof *v * (size_t)(n + 1));
    int64_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a) v[i++] = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    return v;
}

static float *arr_f(const cJSON *a)
{
    int64_t n = arr_len(a);
    float *v = malloc(sizeof *v * (size_t)(n + 1));
    int64_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a) v[i++] = (float)it->valuedouble;
    return v;
}

static int64_t *arr_i(const cJSON *a)
{
    int64_t n = arr_len(a);
    int64_t *v = malloc(sizeof *v * (size_t)(n + 1));
    int64_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a) v[i++] = (int64_t)it->valuedouble;
    return v;
}

/* a and b equal within rel (relative) or both NaN */
static int same(double a, double b, double rel)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return fabs(a - b) <= rel * fmax(fmax(fabs(a), fabs(b)), 1e-300) || a == b;
}

#define CHECK_SAME(a, b, rel, what, i) CHECK_MSG(same((a), (b), (rel)), "%s case %d: got %.17g, expected %.17g", what, i, \
                                                 (double)(a), (double)(b))

static void test_trains(const cJSON *arr)
{
    int ci = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, arr)
    {
        const cJSON *tj = cJSON_GetObjectItem(c, "t");
        int64_t n = arr_len(tj), *t = arr_i(tj), T = (int64_t)num(c, "T");
        double fs = num(c, "fs");
        static const double pres[3][2] = {{60.0, 0.0}, {10.0, 0.5}, {7.5, 0.0}};
        for (int k = 0; k < 3; k++) {
            char key[64];
            snprintf(key, sizeof key, "presence_%.1f_%.1f", pres[k][0], pres[k][1]);
            CHECK_SAME(bs_qc_presence_ratio(t, n, T, fs, pres[k][0], pres[k][1]), num(c, key), 1e-12, key, ci);
        }
        static const double isi[2][2] = {{1.5, 0.0}, {2.0, 0.5}};
        for (int k = 0; k < 2; k++) {
            char key[64];
            snprintf(key, sizeof key, "isi_%.1f_%.1f", isi[k][0], isi[k][1]);
            const cJSON *e = cJSON_GetObjectItem(c, key);
            double r;
            int64_t cnt;
            bs_qc_isi_violations(t, n, T, fs, isi[k][0], isi[k][1], &r, &cnt);
            CHECK_SAME(r, cJSON_GetArrayItem(e, 0)->valuedouble, 1e-12, key, ci);
            CHECK_MSG(cnt == (int64_t)cJSON_GetArrayItem(e, 1)->valuedouble, "%s case %d count %lld", key, ci,
                      (long long)cnt);
        }
        static const double rp[2][2] = {{1.0, 0.0}, {2.0, 0.3}};
        for (int k = 0; k < 2; k++) {
            char key[64];
            snprintf(key, sizeof key, "rp_%.1f_%.1f", rp[k][0], rp[k][1]);
            const cJSON *e = cJSON_GetObjectItem(c, key);
            double r;
            int64_t cnt;
            bs_qc_rp_violations(t, n, T, fs, rp[k][0], rp[k][1], &r, &cnt);
            CHECK_SAME(r, cJSON_GetArrayItem(e, 0)->valuedouble, 1e-12, key, ci);
            CHECK_MSG(cnt == (int64_t)cJSON_GetArrayItem(e, 1)->valuedouble, "%s case %d count %lld", key, ci,
                      (long long)cnt);
        }
        bs_qc_params p;
        bs_qc_default_params(&p);
        CHECK_SAME(bs_qc_sliding_rp(t, n, T, fs, &p), num(c, "sliding_rp"), 1e-12, "sliding_rp", ci);
        free(t);
        ci++;
    }
    CHECK(ci >= 5);
}

static void test_amplitudes(const cJSON *arr)
{
    int ci = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, arr)
    {
        const cJSON *aj = cJSON_GetObjectItem(c, "a");
        int64_t n = arr_len(aj);
        float *a = arr_f(aj), *work = malloc(sizeof *work * (size_t)n);
        double cut = bs_qc_amplitude_cutoff(a, n, (int)num(c, "bins"), num(c, "sigma"), num(c, "min_ratio"), work);
        CHECK_SAME(cut, num(c, "cutoff"), 1e-12, "amplitude_cutoff", ci);
        CHECK_SAME(bs_qc_median_f(a, n, work), num(c, "median"), 0, "median", ci);
        free(a);
        free(work);
        ci++;
    }
    CHECK(ci >= 4);
}

static void test_drift(const cJSON *arr)
{
    int ci = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, arr)
    {
        const cJSON *tj = cJSON_GetObjectItem(c, "t");
        int64_t n = arr_len(tj), *t = arr_i(tj);
        float *y = arr_f(cJSON_GetObjectItem(c, "y")), *work = malloc(sizeof *work * (size_t)n);
        double ptp, sd, mad, md, cd;
        bs_qc_drift(t, y, n, (int64_t)num(c, "T"), num(c, "fs"), 60.0, 100, 0.5, 2, work, &ptp, &sd, &mad);
        CHECK_SAME(ptp, num(c, "ptp"), 1e-12, "drift_ptp", ci);
        CHECK_SAME(sd, num(c, "std"), 1e-12, "drift_std", ci);
        CHECK_SAME(mad, num(c, "mad"), 1e-12, "drift_mad", ci);
        bs_qc_allen_drift(t, y, n, (int64_t)num(c, "t0"), (int64_t)num(c, "t1"), num(c, "fs"), 100.0, 10, work, &md,
                          &cd);
        CHECK_SAME(md, num(c, "max_drift"), 1e-12, "max_drift", ci);
        CHECK_SAME(cd, num(c, "cumulative_drift"), 1e-12, "cumulative_drift", ci);
        free(t);
        free(y);
        free(work);
        ci++;
    }
    CHECK(ci >= 3);
}

static void test_pca(const cJSON *arr)
{
    int ci = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, arr)
    {
        const cJSON *Xj = cJSON_GetObjectItem(c, "X");
        int64_t n = arr_len(Xj);
        int d = (int)arr_len(cJSON_GetArrayItem(Xj, 0));
        double *X = malloc(sizeof *X * (size_t)(n * d));
        int64_t i = 0;
        const cJSON *row;
        cJSON_ArrayForEach(row, Xj)
        {
            const cJSON *v;
            cJSON_ArrayForEach(v, row) X[i++] = (double)(float)v->valuedouble;
        }
        int64_t *l64 = arr_i(cJSON_GetObjectItem(c, "lab"));
        int32_t *lab = malloc(sizeof *lab * (size_t)n);
        for (i = 0; i < n; i++)
            lab[i] = (int32_t)l64[i];
        const cJSON *r;
        cJSON_ArrayForEach(r, cJSON_GetObjectItem(c, "results"))
        {
            int32_t s = (int32_t)num(r, "self");
            double iso, lr, dp, hit, miss, sil;
            CHECK(bs_qc_mahalanobis(X, lab, n, d, s, &iso, &lr) == BS_OK);
            CHECK_SAME(iso, num(r, "isolation_distance"), 1e-7, "isolation_distance", ci);
            CHECK_MSG((isnan(lr) && isnan(num(r, "l_ratio"))) || fabs(lr - num(r, "l_ratio")) <= 1e-12 + 1e-6 * lr,
                      "l_ratio case %d: %.17g vs %.17g", ci, lr, num(r, "l_ratio"));
            CHECK(bs_qc_d_prime(X, lab, n, d, s, &dp) == BS_OK);
            CHECK_SAME(dp, num(r, "d_prime"), 1e-7, "d_prime", ci);
            CHECK(bs_qc_nn_rates(X, lab, n, d, s, (int)num(c, "max_spikes"), (int)num(c, "k"), &hit, &miss) == BS_OK);
            CHECK_SAME(hit, num(r, "nn_hit_rate"), 1e-12, "nn_hit_rate", ci);
            CHECK_SAME(miss, num(r, "nn_miss_rate"), 1e-12, "nn_miss_rate", ci);
            CHECK(bs_qc_silhouette(X, lab, n, d, s, &sil) == BS_OK);
            CHECK_SAME(sil, num(r, "silhouette"), 1e-9, "silhouette", ci);
            ci++;
        }
        free(X);
        free(l64);
        free(lab);
    }
    CHECK(ci >= 10);
}

static void test_ipca(const cJSON *arr)
{
    int ci = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, arr)
    {
        int nt = (int)num(c, "nt"), k = (int)num(c, "k");
        bs_ipca m;
        CHECK(bs_ipca_init(&m, nt, k) == BS_OK);
        void *scratch = malloc(bs_ipca_scratch_bytes(nt, k));
        const cJSON *b;
        cJSON_ArrayForEach(b, cJSON_GetObjectItem(c, "batches"))
        {
            int64_t n = arr_len(b);
            float *X = malloc(sizeof *X * (size_t)(n * nt));
            int64_t i = 0;
            const cJSON *row, *v;
            cJSON_ArrayForEach(row, b) cJSON_ArrayForEach(v, row) X[i++] = (float)v->valuedouble;
            CHECK(bs_ipca_partial_fit(&m, X, n, nt, scratch) == BS_OK);
            free(X);
        }
        double *mean = arr_d(cJSON_GetObjectItem(c, "mean")), *ev = arr_d(cJSON_GetObjectItem(c, "ev"));
        for (int t = 0; t < nt; t++)
            CHECK_SAME(m.mean[t], mean[t], 1e-12, "ipca mean", ci);
        for (int q = 0; q < k; q++)
            CHECK_SAME(m.ev[q], ev[q], 1e-9, "ipca explained variance", ci);
        const cJSON *pj = cJSON_GetObjectItem(c, "probe"), *ej = cJSON_GetObjectItem(c, "proj");
        for (int r = 0; r < arr_len(pj); r++) {
            float *x = arr_f(cJSON_GetArrayItem(pj, r)), out[16];
            double *e = arr_d(cJSON_GetArrayItem(ej, r));
            bs_ipca_transform(&m, x, out);
            /* sklearn's svd_flip and our eigenvector sign rule are the same; allow 1e-5 for float32 output */
            for (int q = 0; q < k; q++)
                CHECK_MSG(fabs(out[q] - e[q]) <= 1e-5 * fmax(1.0, fabs(e[q])), "ipca case %d row %d pc %d: %.9g vs %.9g",
                          ci, r, q, out[q], e[q]);
            free(x);
            free(e);
        }
        free(mean);
        free(ev);
        free(scratch);
        bs_ipca_free(&m);
        ci++;
    }
    CHECK(ci >= 2);
}

static void test_special(const cJSON *root)
{
    const cJSON *c;
    int ci = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "special"))
    {
        double a = num(c, "a");
        CHECK_SAME(bs_qc_gammaincc(a, num(c, "x")), num(c, "q"), a > 100 ? 1e-10 : 1e-13, "gammaincc", ci);
        ci++;
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "poisson"))
    {
        CHECK_SAME(bs_qc_poisson_cdf(num(c, "k"), num(c, "mu")), num(c, "cdf"), 1e-12, "poisson", ci);
        ci++;
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "chi2"))
    {
        CHECK_SAME(bs_qc_chi2_sf(num(c, "x"), num(c, "dof")), num(c, "sf"), 1e-11, "chi2_sf", ci);
        ci++;
    }
    CHECK(ci >= 15);
}

/* The top-k eigen-solver of the incremental PCA against the Jacobi solver on
 * Gram matrices of sizes 5..104 (some with nearly equal small eigenvalues):
 * same eigenvalues (1e-13 of the largest), small residuals, and the same
 * vectors where the eigenvalue is separated from its neighbours. */
static void test_eigen(void)
{
    uint64_t st = 12345;
    for (int trial = 0; trial < 40; trial++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        int n = 5 + (int)((st >> 33) % 100), k = 1 + (int)((st >> 20) % 5), r = 3 + (int)((st >> 40) % 200);
        k = k > n ? n : k;
        double *A = calloc((size_t)n * n, sizeof *A), *B = malloc(sizeof *B * (size_t)n * n),
               *C = malloc(sizeof *C * (size_t)n * n), *row = malloc(sizeof *row * (size_t)n);
        for (int t = 0; t < r; t++) {
            for (int i = 0; i < n; i++) {
                st = st * 6364136223846793005ULL + 1442695040888963407ULL;
                row[i] = ((double)(st >> 11) * 0x1.0p-53 - 0.5) * (i < 3 ? 10 : 1) * (trial % 7 ? 1 + i % 4 : 1);
            }
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++)
                    A[(size_t)i * n + j] += row[i] * row[j];
        }
        memcpy(B, A, sizeof *A * (size_t)n * n);
        memcpy(C, A, sizeof *A * (size_t)n * n);
        double *ev = malloc(sizeof *ev * (size_t)n), *V = malloc(sizeof *V * (size_t)n * n);
        double ev2[5], *V2 = malloc(sizeof *V2 * 5 * (size_t)n), *w = malloc(qc_eigh_top_work(n));
        CHECK(bs_eigh_jacobi(B, n, ev, V) == BS_OK);
        qc_eigh_top(A, n, k, ev2, V2, w);
        for (int q = 0; q < k; q++) {
            CHECK_MSG(fabs(ev[q] - ev2[q]) <= 1e-13 * ev[0], "trial %d eigenvalue %d: %g vs %g", trial, q, ev2[q], ev[q]);
            double res = 0, dot = 0;
            for (int i = 0; i < n; i++) {
                double sum = 0;
                for (int j = 0; j < n; j++)
                    sum += C[(size_t)i * n + j] * V2[(size_t)q * n + j];
                sum -= ev2[q] * V2[(size_t)q * n + i];
                res += sum * sum;
                dot += V[(size_t)q * n + i] * V2[(size_t)q * n + i];
            }
            CHECK_MSG(sqrt(res) <= 1e-10 * ev[0], "trial %d vector %d residual %g", trial, q, sqrt(res));
            int separated = (q + 1 >= n || ev[q] - ev[q + 1] > 1e-6 * ev[0]) && (q == 0 || ev[q - 1] - ev[q] > 1e-6 * ev[0]);
            if (separated)
                CHECK_MSG(fabs(dot - 1) <= 1e-8, "trial %d vector %d: dot with Jacobi's %.12f", trial, q, dot);
        }
        free(A), free(B), free(C), free(row), free(ev), free(V), free(V2), free(w);
    }
}

/* Hand-derived cases. */
/* The nearest-neighbour rates on 3,000 points (a unit of 700 in a cloud of three others, 12 features, some
 * points repeated so that distances tie), no subsample, against a plain reference: every exact squared
 * distance of the mean-centred points (self first, then the others, each in their order), the k nearest of
 * each (ties: lower index), the point itself excluded. The library screens each row 64 columns at a time;
 * the subsample's rule is SpikeInterface's fixtures' (test_pca). */
static void nn_reference(const double *X, const int32_t *lab, int64_t n, int d, int32_t self, int k, double *hit,
                         double *miss)
{
    double *P = calloc((size_t)n * d, sizeof *P), *mean = calloc((size_t)d, sizeof *mean);
    int64_t m = 0, m_self = 0;
    for (int pass = 0; pass < 2; pass++) /* self first */
        for (int64_t i = 0; i < n; i++)
            if ((lab[i] == self) == (pass == 0)) {
                memcpy(P + m * d, X + i * d, sizeof(double) * (size_t)d);
                m_self += pass == 0;
                m++;
            }
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < d; j++)
            mean[j] += P[i * d + j];
    for (int j = 0; j < d; j++)
        mean[j] /= (double)n;
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < d; j++)
            P[i * d + j] -= mean[j];
    double *dist = malloc(sizeof *dist * (size_t)n);
    int64_t hs = 0, ho = 0;
    for (int64_t q = 0; q < n; q++) {
        for (int64_t j = 0; j < n; j++) {
            double s2 = 0;
            for (int c = 0; c < d; c++)
                s2 += (P[q * d + c] - P[j * d + c]) * (P[q * d + c] - P[j * d + c]);
            dist[j] = j == q ? INFINITY : s2;
        }
        for (int r = 0; r < k; r++) { /* the r-th nearest: smallest distance, then lowest index */
            int64_t best = -1;
            for (int64_t j = 0; j < n; j++)
                if (best < 0 || dist[j] < dist[best])
                    best = j;
            if (q < m_self)
                hs += best < m_self;
            else
                ho += best < m_self;
            dist[best] = INFINITY;
        }
    }
    *hit = (double)hs / (double)(m_self * k);
    *miss = (double)ho / (double)((n - m_self) * k);
    free(P), free(mean), free(dist);
}

static void test_nn_large(void)
{
    enum { N = 3000, D = 12 };
    static double X[N * D];
    static int32_t lab[N];
    uint64_t st = 99;
    for (int i = 0; i < N; i++) {
        lab[i] = i % 4 == 1 && i < 2800 ? 0 : 1 + i % 3;
        for (int j = 0; j < D; j++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(st >> 11) / 9007199254740992.0 - 0.5;
            X[i * D + j] = 3.0 * u + (j == lab[i] ? 1.5 : 0.0);
        }
        if (i % 97 == 5) /* a repeat of an earlier point: tied distances */
            memcpy(X + i * D, X + (i - 3) * D, sizeof(double) * D);
    }
    double hit, miss, rh, rm;
    CHECK(bs_qc_nn_rates(X, lab, N, D, 0, 10000, 5, &hit, &miss) == BS_OK);
    nn_reference(X, lab, N, D, 0, 5, &rh, &rm);
    CHECK_MSG(hit == rh && miss == rm, "hit %.17g vs %.17g, miss %.17g vs %.17g", hit, rh, miss, rm);
    CHECK(hit > 0.1 && hit < 1.0);
}

static void test_by_hand(void)
{
    bs_qc_params p;
    bs_qc_default_params(&p);
    double r;
    int64_t cnt;
    /* empty unit */
    bs_qc_isi_violations(NULL, 0, 30000, 30000.0, 1.5, 0, &r, &cnt);
    CHECK(isnan(r) && cnt == -1);
    bs_qc_rp_violations(NULL, 0, 30000, 30000.0, 1.0, 0, &r, &cnt);
    CHECK(isnan(r) && cnt == -1);
    CHECK(isnan(bs_qc_presence_ratio(NULL, 0, 3000000, 30000.0, 60, 0)));
    CHECK(isnan(bs_qc_sliding_rp(NULL, 0, 3000000, 30000.0, &p)));
    /* three spikes, ISIs of 44 and 45 samples at 30 kHz. 45 samples is exactly 1.5 ms, but SpikeInterface
     * compares differences of t / fs: 30089 / 30000 - 30044 / 30000 = 0.0014999999999998348 < 0.0015, so
     * both ISIs count (a plain integer comparison would count one) */
    int64_t t3[3] = {30000, 30044, 30089};
    bs_qc_isi_violations(t3, 3, 3000000, 30000.0, 1.5, 0, &r, &cnt);
    CHECK(cnt == 2);
    /* ratio = (2 / (2 * 3 * 0.0015)) / (3 / 100) */
    CHECK_NEAR(r, (2.0 / (2 * 3 * 0.0015)) / (3.0 / 100.0), 1e-9);
    /* rp: pairs within 30 samples: (0,1) only; 1 - sqrt(1 - 1 * T / (9 * 30)) < 0 -> 1 */
    int64_t t4[3] = {1000, 1030, 1100};
    bs_qc_rp_violations(t4, 3, 300000, 30000.0, 1.0, 0, &r, &cnt);
    CHECK(cnt == 1 && r == 1.0);
    /* presence: 3 bins of 60 s at 1 kHz (T = 185000 samples: the last 5 s are dropped); spikes in bins 0 and 2 */
    int64_t tp[3] = {10, 130000, 180000};
    CHECK_NEAR(bs_qc_presence_ratio(tp, 3, 185000, 1000.0, 60, 0), 2.0 / 3.0, 1e-15);
    /* labels: the Allen rule, strict inequalities; a metric that could not be computed (NaN) gives unknown
     * unless another one fails */
    double m[BS_QC_N_METRICS];
    for (int i = 0; i < BS_QC_N_METRICS; i++)
        m[i] = NAN;
    CHECK(bs_qc_label_of(m, &p) == BS_QC_LABEL_UNKNOWN);
    m[BS_QC_ISI_RATIO] = 0.1;
    m[BS_QC_PRESENCE_RATIO] = 0.95;
    m[BS_QC_AMPLITUDE_CUTOFF] = 0.05;
    CHECK(bs_qc_label_of(m, &p) == BS_QC_LABEL_GOOD);
    m[BS_QC_PRESENCE_RATIO] = 0.8;
    CHECK(bs_qc_label_of(m, &p) == BS_QC_LABEL_FAIL);
    m[BS_QC_PRESENCE_RATIO] = 0.9;
    m[BS_QC_AMPLITUDE_CUTOFF] = NAN;
    CHECK(bs_qc_label_of(m, &p) == BS_QC_LABEL_UNKNOWN);
    m[BS_QC_ISI_RATIO] = 0.7; /* a failing metric decides whatever the others are */
    CHECK(bs_qc_label_of(m, &p) == BS_QC_LABEL_FAIL);
    m[BS_QC_PRESENCE_RATIO] = NAN;
    CHECK(bs_qc_label_of(m, &p) == BS_QC_LABEL_FAIL);
    m[BS_QC_PRESENCE_RATIO] = 0.9;
    m[BS_QC_AMPLITUDE_CUTOFF] = 0.0;
    m[BS_QC_ISI_RATIO] = 0.5;
    CHECK(bs_qc_label_of(m, &p) == BS_QC_LABEL_FAIL);
    p.label_isi_max = 0.6;
    CHECK(bs_qc_label_of(m, &p) == BS_QC_LABEL_GOOD);
    CHECK(strcmp(bs_qc_label_names[BS_QC_LABEL_UNKNOWN], "unknown") == 0);
    /* numpy histogram: values 0..10 in 10 bins: value 10 goes to the last bin, each other value to its own */
    float v[11];
    for (int i = 0; i <= 10; i++)
        v[i] = (float)i;
    int64_t h[10];
    float edges[11];
    np_histogram_f32(v, 11, 0, 10, h, edges);
    for (int i = 0; i < 9; i++)
        CHECK(h[i] == 1);
    CHECK(h[9] == 2);
    /* scipy gaussian_filter1d on an integer array truncates: [0,0,0,5,9,0,0,0,3,1], sigma 1 ->
     * [0,0,1,4,4,2,0,0,1,1] (floats 0.023 0.31 1.696 4.172 4.801 2.461 0.675 0.825 1.499 1.425) */
    int64_t hin[10] = {0, 0, 0, 5, 9, 0, 0, 0, 3, 1}, hout[10], want[10] = {0, 0, 1, 4, 4, 2, 0, 0, 1, 1};
    CHECK(gaussian_smooth_counts(hin, 10, 1.0, hout) == 0);
    for (int i = 0; i < 10; i++)
        CHECK_MSG(hout[i] == want[i], "smooth[%d] = %lld", i, (long long)hout[i]);
    /* median */
    float w[4], x4[4] = {3, 1, 4, 2};
    CHECK_NEAR(bs_qc_median_f(x4, 4, w), 2.5, 0);
    CHECK_NEAR(bs_qc_median_f(x4, 3, w), 3.0, 0);
}

int main(void)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/qc/qc_fixtures.json", test_env("BS_TEST_DATA", "tests/data"));
    char *text = NULL;
    size_t len = 0;
    CHECK(bs_read_text_file(path, 64u << 20, &text, &len) == BS_OK);
    cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
    CHECK(root != NULL);
    if (root) {
        test_trains(cJSON_GetObjectItem(root, "train"));
        test_amplitudes(cJSON_GetObjectItem(root, "amplitude_cutoff"));
        test_drift(cJSON_GetObjectItem(root, "drift"));
        test_pca(cJSON_GetObjectItem(root, "pca"));
        test_ipca(cJSON_GetObjectItem(root, "ipca"));
        test_special(root);
    }
    test_eigen();
    test_nn_large();
    test_by_hand();
    cJSON_Delete(root);
    free(text);
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
