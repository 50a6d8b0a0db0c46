/*
 * test_whiten.c - local whitening: neighbour selection on a 2-column probe
 * (ties, own channel first, never across shanks), W and W^-1 against an
 * independent NumPy computation (fixture), the covariance accumulator
 * against a double-precision sum, whitened covariance of correlated noise
 * (identity when the neighbourhood is the whole probe, unit variance
 * locally), the sparse application against a dense product, bad input,
 * scratch accounting and thread-count independence; then the one-batch entry
 * point (order of steps, scratch, identical bytes for 1 and 2 threads).
 */
#include "test.h"

#include <omp.h>
#include <stdint.h>

#include "io/npy.h"
#include "mem/mem.h"
#include "preprocess/preprocess.h"

static uint64_t rng_state = 777;
static double urand(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}
static double nrand(void) { return sqrt(-2.0 * log(urand())) * cos(2.0 * M_PI * urand()); }

static void *load(const char *name, bs_npy_dtype dt, int ndim, bs_npy_header *h)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/preprocess/%s", test_env("BS_TEST_DATA", "tests/data"), name);
    void *data = NULL;
    if (bs_npy_load_expect(path, "test/fixture", dt, ndim, h, &data) != BS_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, bs_last_error());
        return NULL;
    }
    return data;
}

/* 2-column probe: channel c at x = 32 * (c % 2), y = 20 * (c / 2), one shank */
static void two_column(bs_probe *p, int C)
{
    bs_probe_alloc(p, C);
    for (int c = 0; c < C; c++) {
        p->x_um[c] = 32.0 * (c % 2);
        p->y_um[c] = 20.0 * (c / 2);
        p->column[c] = c;
    }
}

static void test_neighbours(void)
{
    bs_probe p;
    two_column(&p, 12);
    double cov[144];
    for (int i = 0; i < 144; i++)
        cov[i] = (i % 13 == 0) ? 100.0 : 0.0; /* identity x 100 µV^2 */
    bs_whitener wh;
    CHECK(bs_whitener_build(cov, &p, 6, 1e-6, 1.0, &wh) == BS_OK);
    CHECK(wh.k == 6 && wh.n_nbr[0] == 6);
    const int n0[6] = {0, 2, 1, 3, 4, 5};  /* d = 0, 20, 32, 37.7, 40, 47.2 */
    const int n2[6] = {2, 0, 4, 3, 1, 5};  /* 0 and 4 tie at 20 µm, 1 and 5 at 37.7 µm: by index */
    const int n11[6] = {11, 9, 10, 8, 7, 6};
    CHECK(memcmp(wh.nbr, n0, sizeof n0) == 0);
    CHECK(memcmp(wh.nbr + 2 * 6, n2, sizeof n2) == 0);
    CHECK(memcmp(wh.nbr + 11 * 6, n11, sizeof n11) == 0);
    /* identity covariance of 100 µV^2: W = I / 10 */
    CHECK_NEAR(wh.w[0], 1.0 / sqrt(100.0 + 1e-6), 1e-7);
    CHECK_NEAR(wh.w[1], 0.0, 1e-12);
    bs_whitener_free(&wh);
    /* more neighbours than channels: clipped to the probe */
    CHECK(bs_whitener_build(cov, &p, 32, 1e-6, 2.0, &wh) == BS_OK);
    CHECK(wh.k == 12 && wh.n_nbr[5] == 12);
    CHECK_NEAR(wh.w[5 * 12], 2.0 / sqrt(100.0 + 1e-6), 1e-6); /* scale */
    bs_whitener_free(&wh);
    /* bad input */
    CHECK(bs_whitener_build(cov, &p, 0, 1e-6, 1.0, &wh) == BS_ERR_INPUT && strstr(bs_last_error(), "whitening_range"));
    CHECK(bs_whitener_build(cov, &p, 4, -1, 1.0, &wh) == BS_ERR_INPUT && strstr(bs_last_error(), "eps"));
    CHECK(bs_whitener_build(cov, &p, 4, 1e-6, 0, &wh) == BS_ERR_INPUT && strstr(bs_last_error(), "scale"));
    cov[13 * 3] = NAN;
    CHECK(bs_whitener_build(cov, &p, 4, 1e-6, 1.0, &wh) == BS_ERR_INPUT && strstr(bs_last_error(), "not finite"));
    cov[13 * 3] = -5.0; /* negative variance on channel 3 */
    CHECK(bs_whitener_build(cov, &p, 4, 1e-6, 1.0, &wh) == BS_ERR_INPUT &&
          strstr(bs_last_error(), "positive definite"));
    CHECK(wh.w == NULL);
    bs_probe_free(&p);
}

static void test_fixture(void)
{
    bs_npy_header hp, hc, hw, hi, hn;
    double *pos = load("wh_pos.npy", BS_NPY_F64, 2, &hp);
    double *cov = load("wh_cov.npy", BS_NPY_F64, 2, &hc);
    double *Wref = load("wh_W.npy", BS_NPY_F64, 2, &hw);
    double *Iref = load("wh_Winv.npy", BS_NPY_F64, 2, &hi);
    int32_t *nref = load("wh_nbr.npy", BS_NPY_I32, 2, &hn);
    CHECK(pos && cov && Wref && Iref && nref);
    if (!pos || !cov || !Wref || !Iref || !nref)
        return;
    const int C = (int)hp.shape[0], K = (int)hn.shape[1];
    CHECK(C == 28 && K == 8);
    bs_probe p;
    bs_probe_alloc(&p, C);
    for (int c = 0; c < C; c++) {
        p.x_um[c] = pos[c * 3];
        p.y_um[c] = pos[c * 3 + 1];
        p.shank[c] = (int)pos[c * 3 + 2];
        p.column[c] = c;
    }
    p.n_shanks = 2;
    bs_whitener wh;
    bs_mem_reset_peaks();
    CHECK(bs_whitener_build(cov, &p, K, 1e-6, 1.0, &wh) == BS_OK);
    CHECK(bs_mem_tag_current("preprocess/whitener", BS_DEV_HOST) == bs_whitener_bytes(C, K));
    CHECK(bs_mem_tag_peak("preprocess/whitener_build", BS_DEV_HOST) == bs_whitener_build_bytes(C, K));
    CHECK(bs_mem_tag_current("preprocess/whitener_build", BS_DEV_HOST) == 0);
    int nbr_bad = 0, cross = 0;
    for (int j = 0; j < C; j++)
        for (int i = 0; i < K; i++) {
            nbr_bad += wh.nbr[j * K + i] != nref[j * K + i];
            cross += p.shank[wh.nbr[j * K + i]] != p.shank[j];
        }
    CHECK_MSG(nbr_bad == 0, "%d neighbour entries differ from numpy", nbr_bad);
    CHECK(cross == 0);
    float *W = bs_mem_alloc("test/wh", (size_t)C * C * sizeof(float));
    float *Wi = bs_mem_alloc("test/wh", (size_t)C * C * sizeof(float));
    bs_whitener_dense(&wh, W);
    double wmax = 0, imax = 0, werr = 0, ierr = 0;
    for (int i = 0; i < C * C; i++) {
        wmax = fabs(Wref[i]) > wmax ? fabs(Wref[i]) : wmax;
        imax = fabs(Iref[i]) > imax ? fabs(Iref[i]) : imax;
    }
    int zeros_ok = 1;
    for (int i = 0; i < C * C; i++) {
        double e = fabs(W[i] - Wref[i]) / (fabs(Wref[i]) > 1e-3 * wmax ? fabs(Wref[i]) : 1e-3 * wmax);
        werr = e > werr ? e : werr;
        zeros_ok &= (Wref[i] == 0.0) == (W[i] == 0.0f);
    }
    CHECK(zeros_ok);
    CHECK_MSG(werr <= 1e-4, "W relative error %g", werr);
    CHECK(bs_whitener_inverse(&wh, 0.0, Wi) == BS_OK);
    CHECK(bs_mem_tag_peak("preprocess/whiten_inv", BS_DEV_HOST) == bs_whitener_inverse_bytes(C));
    CHECK(bs_whitener_inverse_bytes(C) == 2 * 28 * 28 * sizeof(double));
    for (int i = 0; i < C * C; i++) {
        double e = fabs(Wi[i] - Iref[i]) / (fabs(Iref[i]) > 1e-3 * imax ? fabs(Iref[i]) : 1e-3 * imax);
        ierr = e > ierr ? e : ierr;
    }
    CHECK_MSG(ierr <= 1e-4, "W^-1 relative error %g", ierr);
    printf("fixture (28 ch, 2 shanks, k = 8): W rel err %.3g, W^-1 rel err %.3g\n", werr, ierr);
    bs_whitener_free(&wh);
    bs_probe_free(&p);
    bs_mem_free(W);
    bs_mem_free(Wi);
    bs_mem_free(pos);
    bs_mem_free(cov);
    bs_mem_free(Wref);
    bs_mem_free(Iref);
    bs_mem_free(nref);

    /* a singular matrix has no inverse */
    bs_whitener z;
    int nn[2] = {1, 1}, nb[2] = {0, 1};
    float w[2] = {1.0f, 0.0f};
    z.n_chan = 2;
    z.k = 1;
    z.n_nbr = nn;
    z.nbr = nb;
    z.w = w;
    float inv[4];
    CHECK(bs_whitener_inverse(&z, 0.0, inv) == BS_ERR_INPUT && strstr(bs_last_error(), "singular"));
    CHECK(bs_whitener_inverse(&z, 0.5, inv) == BS_OK && fabs(inv[3] - 2.0f) < 1e-6 && fabs(inv[0] - 1 / 1.5f) < 1e-6);
}

/* Correlated noise: x = M g with M banded by probe distance. */
static void make_noise(float *x, int C, int64_t T)
{
    double *g = malloc((size_t)C * sizeof(double));
    for (int64_t t = 0; t < T; t++) {
        for (int c = 0; c < C; c++)
            g[c] = nrand();
        for (int c = 0; c < C; c++) {
            double v = 0;
            for (int j = 0; j < C; j++) {
                double dy = 20.0 * (c / 2 - j / 2), dx = 32.0 * (c % 2 - j % 2);
                double d2 = dx * dx + dy * dy;
                if (d2 < 2500)
                    v += (j == c ? 30.0 : 12.0) * exp(-d2 / 1600.0) * g[j];
            }
            x[c * T + t] = (float)v;
        }
    }
    free(g);
}

static void whitened_cov(const float *x, int C, int64_t T, double *out)
{
    for (int a = 0; a < C; a++)
        for (int b = 0; b < C; b++) {
            double s = 0;
            for (int64_t t = 0; t < T; t++)
                s += (double)x[a * T + t] * x[b * T + t];
            out[a * C + b] = s / T;
        }
}

static void test_noise(void)
{
    const int C = 16;
    const int64_t H = 100, B = 10000, T = B + 2 * H;
    float *x1 = bs_mem_alloc("test/wh", (size_t)C * T * sizeof(float));
    float *x2 = bs_mem_alloc("test/wh", (size_t)C * T * sizeof(float));
    double *cov = bs_mem_alloc("test/wh", (size_t)C * C * sizeof(double));
    double *ref = bs_mem_alloc("test/wh", (size_t)C * C * sizeof(double));
    double *wc = bs_mem_alloc("test/wh", (size_t)C * C * sizeof(double));
    make_noise(x1, C, T);
    make_noise(x2, C, T);

    bs_whiten_cov acc;
    CHECK(bs_whiten_cov_init(&acc, C) == BS_OK);
    CHECK(bs_mem_tag_current("preprocess/whiten_cov", BS_DEV_HOST) == bs_whiten_cov_bytes(C));
    CHECK(bs_whiten_cov_bytes(C) == 16 * 16 * 12);
    CHECK(bs_whiten_cov_finalize(&acc, cov) == BS_ERR_INPUT); /* nothing added yet */
    CHECK(bs_whiten_cov_add(&acc, x1, T, H, H + B) == BS_OK);
    CHECK(bs_whiten_cov_add(&acc, x2, T, H, H + B) == BS_OK);
    CHECK(bs_whiten_cov_add(&acc, x2, T, H, T + 1) == BS_ERR_INPUT && strstr(bs_last_error(), "central part"));
    CHECK(bs_whiten_cov_finalize(&acc, cov) == BS_OK && acc.n_batches == 2);
    bs_whiten_cov_free(&acc);
    double err = 0;
    for (int a = 0; a < C; a++)
        for (int b = 0; b < C; b++) {
            double s = 0;
            for (int64_t t = H; t < H + B; t++)
                s += (double)x1[a * T + t] * x1[b * T + t] + (double)x2[a * T + t] * x2[b * T + t];
            ref[a * C + b] = s / (2.0 * B);
        }
    double scale = ref[0];
    for (int i = 0; i < C * C; i++)
        err = fabs(cov[i] - ref[i]) / scale > err ? fabs(cov[i] - ref[i]) / scale : err;
    CHECK_MSG(err < 1e-5, "covariance error %g (relative to the variance)", err);
    CHECK(cov[1] == cov[C]); /* symmetric */

    bs_probe p;
    two_column(&p, C);
    /* neighbourhood = whole probe: exactly ZCA, whitened covariance = I */
    bs_whitener wh;
    CHECK(bs_whitener_build(cov, &p, C, 1e-6, 1.0, &wh) == BS_OK);
    float *y = bs_mem_alloc("test/wh", (size_t)C * B * sizeof(float));
    for (int c = 0; c < C; c++)
        memcpy(y + c * B, x1 + c * T + H, (size_t)B * sizeof(float));
    float *y2 = bs_mem_alloc("test/wh", (size_t)C * B * sizeof(float));
    for (int c = 0; c < C; c++)
        memcpy(y2 + c * B, x2 + c * T + H, (size_t)B * sizeof(float));
    /* whiten both halves; the covariance of their union is what W whitens */
    float *yy = bs_mem_alloc("test/wh", (size_t)C * 2 * B * sizeof(float));
    for (int c = 0; c < C; c++) {
        memcpy(yy + c * 2 * B, y + c * B, (size_t)B * sizeof(float));
        memcpy(yy + c * 2 * B + B, y2 + c * B, (size_t)B * sizeof(float));
    }
    float *orig = bs_mem_alloc("test/wh", (size_t)C * 2 * B * sizeof(float));
    memcpy(orig, yy, (size_t)C * 2 * B * sizeof(float));
    CHECK(bs_whiten_apply(&wh, yy, 2 * B, NULL, 0) == BS_OK);
    whitened_cov(yy, C, 2 * B, wc);
    double dev = 0;
    for (int a = 0; a < C; a++)
        for (int b = 0; b < C; b++)
            dev = fabs(wc[a * C + b] - (a == b)) > dev ? fabs(wc[a * C + b] - (a == b)) : dev;
    printf("dense ZCA (k = C = 16): max |cov(Wx) - I| = %.3g\n", dev);
    CHECK_MSG(dev < 1e-3, "dense whitening leaves %g", dev);
    bs_whitener_free(&wh);

    /* local, k = 6: unit variance on every channel, small correlations */
    CHECK(bs_whitener_build(cov, &p, 6, 1e-6, 1.0, &wh) == BS_OK);
    memcpy(yy, orig, (size_t)C * 2 * B * sizeof(float));
    CHECK(bs_whiten_apply(&wh, yy, 2 * B, NULL, 0) == BS_OK);
    whitened_cov(yy, C, 2 * B, wc);
    double dvar = 0, doff = 0, raw_off = 0;
    for (int a = 0; a < C; a++)
        for (int i = 1; i < wh.n_nbr[a]; i++) {
            int b = wh.nbr[a * wh.k + i];
            doff = fabs(wc[a * C + b]) > doff ? fabs(wc[a * C + b]) : doff;
            double r = ref[a * C + b] / sqrt(ref[a * C + a] * ref[b * C + b]);
            raw_off = fabs(r) > raw_off ? fabs(r) : raw_off;
        }
    for (int a = 0; a < C; a++)
        dvar = fabs(wc[a * C + a] - 1) > dvar ? fabs(wc[a * C + a] - 1) : dvar;
    printf("local ZCA (k = 6): max |var - 1| = %.3g, max |neighbour cov| = %.3g (raw correlation up to %.3g)\n",
           dvar, doff, raw_off);
    CHECK(dvar < 1e-3);
    CHECK(raw_off > 0.5 && doff < 0.15);

    /* sparse application = dense product W x */
    float *Wd = bs_mem_alloc("test/wh", (size_t)C * C * sizeof(float));
    bs_whitener_dense(&wh, Wd);
    double aerr = 0;
    for (int a = 0; a < C; a++)
        for (int64_t t = 0; t < 2 * B; t += 7) {
            double s = 0;
            for (int b = 0; b < C; b++)
                s += (double)Wd[a * C + b] * orig[b * 2 * B + t];
            aerr = fabs(yy[a * 2 * B + t] - s) > aerr ? fabs(yy[a * 2 * B + t] - s) : aerr;
        }
    CHECK_MSG(aerr < 1e-5, "sparse product error %g", aerr);

    /* scratch: peak = size function; caller scratch for one thread gives the same bytes */
    omp_set_num_threads(2);
    memcpy(yy, orig, (size_t)C * 2 * B * sizeof(float));
    bs_mem_reset_peaks();
    CHECK(bs_whiten_apply(&wh, yy, 2 * B, NULL, 0) == BS_OK);
    CHECK(bs_mem_tag_peak("preprocess/whiten", BS_DEV_HOST) == bs_whiten_scratch_bytes(C, 2 * B, 2));
    CHECK(bs_whiten_scratch_bytes(C, 2 * B, 2) == 2 * 16 * 128 * sizeof(float)); /* tiles of 128 samples */
    omp_set_num_threads(1);
    memcpy(y2, orig, (size_t)C * B * sizeof(float)); /* reuse as a check buffer below */
    float *zz = bs_mem_alloc("test/wh", (size_t)C * 2 * B * sizeof(float));
    memcpy(zz, orig, (size_t)C * 2 * B * sizeof(float));
    CHECK(bs_whiten_apply(&wh, zz, 2 * B, NULL, 0) == BS_OK);
    CHECK(memcmp(zz, yy, (size_t)C * 2 * B * sizeof(float)) == 0);
    omp_set_num_threads(2);

    /* whitening with the artifact crossings counted on the way, then blanking from those counts: the
       same counts, periods and bytes as whitening, then bs_artifact_blank (a broadband transient on
       every channel, a NaN, a last tile shorter than the others) */
    {
        const int64_t N = 2 * B - 37;
        bs_artifact_params ap;
        bs_artifact_default_params(&ap);
        ap.min_channels = 4;
        for (int c = 0; c < C; c++) {
            for (int i = 0; i < 30; i++)
                orig[(size_t)c * N + 5000 + i] += (float)(200.0 * (i % 2 ? 1 : -1) * (1.0 + 0.1 * c));
            if (c == 3)
                orig[(size_t)c * N + 12345] = NAN;
        }
        float *a1 = bs_mem_alloc("test/wh", (size_t)C * N * sizeof(float));
        float *a2 = bs_mem_alloc("test/wh", (size_t)C * N * sizeof(float));
        int32_t *n1 = bs_mem_alloc("test/wh", (size_t)N * sizeof(int32_t));
        int32_t *n2 = bs_mem_alloc("test/wh", (size_t)N * sizeof(int32_t));
        bs_artifact_period p1[64], p2[64];
        int np1 = -1, np2 = -1;
        memcpy(a1, orig, (size_t)C * N * sizeof(float));
        memcpy(a2, orig, (size_t)C * N * sizeof(float));
        CHECK(bs_whiten_apply(&wh, a1, N, NULL, 0) == BS_OK);
        CHECK(bs_artifact_blank(&ap, 30000.0, a1, C, N, NULL, n1, p1, 64, &np1) == BS_OK);
        CHECK(bs_whiten_apply_count(&wh, a2, N, NULL, 0, (float)ap.threshold, n2) == BS_OK);
        CHECK(memcmp(n1, n2, (size_t)N * sizeof(int32_t)) == 0);
        CHECK(bs_artifact_blank_counted(&ap, 30000.0, a2, C, N, n2, p2, 64, &np2) == BS_OK);
        CHECK_MSG(np1 == np2 && np1 >= 2, "%d and %d periods", np1, np2);
        for (int i = 0; i < np1 && i < np2; i++)
            CHECK(p1[i].t0 == p2[i].t0 && p1[i].t1 == p2[i].t1 && p1[i].n_chan == p2[i].n_chan);
        CHECK(memcmp(a1, a2, (size_t)C * N * sizeof(float)) == 0);
        bs_mem_free(a1), bs_mem_free(a2), bs_mem_free(n1), bs_mem_free(n2);
    }

    bs_whitener_free(&wh);
    bs_probe_free(&p);
    bs_mem_free(zz);
    bs_mem_free(Wd);
    bs_mem_free(orig);
    bs_mem_free(yy);
    bs_mem_free(y);
    bs_mem_free(y2);
    bs_mem_free(x1);
    bs_mem_free(x2);
    bs_mem_free(cov);
    bs_mem_free(ref);
    bs_mem_free(wc);
}

/* The whole chain on one window. */
static void test_batch(void)
{
    const int C = 40;
    const int64_t T = 4000;
    float *x = bs_mem_alloc("test/batch", (size_t)C * T * sizeof(float));
    float *a = bs_mem_alloc("test/batch", (size_t)C * T * sizeof(float));
    float *b = bs_mem_alloc("test/batch", (size_t)C * T * sizeof(float));
    for (int c = 0; c < C; c++) {
        double common = 0;
        for (int64_t t = 0; t < T; t++) {
            common = 0.99 * common + 5.0 * nrand(); /* shared slow wander */
            x[c * T + t] = (float)(20.0 * nrand() + common + 50.0 * c);
        }
    }
    bs_probe p;
    two_column(&p, C);
    bs_highpass hp;
    CHECK(bs_highpass_design(3, 300, 30000, &hp) == BS_OK);

    /* covariance pass: steps 1-3 */
    bs_preprocess pre = {.remove_mean = 1, .car = 1, .hp = &hp, .artifact_uv = 0, .wh = NULL};
    memcpy(a, x, (size_t)C * T * sizeof(float));
    CHECK(bs_preprocess_batch(&pre, a, C, T, NULL, 0, NULL) == BS_OK);
    bs_whiten_cov acc;
    CHECK(bs_whiten_cov_init(&acc, C) == BS_OK);
    CHECK(bs_whiten_cov_add(&acc, a, T, 600, T - 600) == BS_OK);
    double *cov = bs_mem_alloc("test/batch", (size_t)C * C * sizeof(double));
    CHECK(bs_whiten_cov_finalize(&acc, cov) == BS_OK);
    bs_whiten_cov_free(&acc);
    bs_whitener wh;
    /* CAR makes the channels sum-constrained; eps keeps the 32-neighbour problems regular */
    CHECK(bs_whitener_build(cov, &p, 32, 1e-6, 1.0, &wh) == BS_OK);

    /* full chain = the kernels one after another, same bytes */
    bs_preprocess full = {.remove_mean = 1, .car = 1, .hp = &hp, .artifact_uv = 0, .wh = &wh};
    memcpy(a, x, (size_t)C * T * sizeof(float));
    memcpy(b, x, (size_t)C * T * sizeof(float));
    omp_set_num_threads(2);
    bs_mem_reset_peaks();
    CHECK(bs_preprocess_batch(&full, a, C, T, NULL, 0, NULL) == BS_OK);
    size_t want = bs_preprocess_scratch_bytes(&full, C, T, 2);
    CHECK(want == bs_highpass_scratch_bytes(&hp, C, T, 2)); /* the largest of the three here */
    CHECK_MSG(bs_mem_tag_peak("preprocess/batch", BS_DEV_HOST) == want, "peak %zu, size %zu",
              bs_mem_tag_peak("preprocess/batch", BS_DEV_HOST), want);
    CHECK(bs_mem_tag_peak("preprocess/car", BS_DEV_HOST) == 0 && bs_mem_tag_peak("preprocess/highpass", BS_DEV_HOST) == 0);
    CHECK(bs_car(b, C, T, 1, 1, NULL, 0) == BS_OK);
    CHECK(bs_highpass_apply(&hp, b, C, T, NULL, 0) == BS_OK);
    CHECK(bs_whiten_apply(&wh, b, T, NULL, 0) == BS_OK);
    CHECK(memcmp(a, b, (size_t)C * T * sizeof(float)) == 0);
    /* whitened central part has ~unit variance */
    double v = 0;
    for (int c = 0; c < C; c++)
        for (int64_t t = 600; t < T - 600; t++)
            v += (double)a[c * T + t] * a[c * T + t];
    v /= (double)C * (T - 1200);
    CHECK_MSG(fabs(v - 1.0) < 0.05, "whitened variance %g", v);

    /* identical bytes with one thread and a caller buffer */
    omp_set_num_threads(1);
    size_t one = bs_preprocess_scratch_bytes(&full, C, T, 1);
    void *scr = bs_mem_alloc("test/batch_scratch", one);
    memcpy(b, x, (size_t)C * T * sizeof(float));
    CHECK(bs_preprocess_batch(&full, b, C, T, scr, one, NULL) == BS_OK);
    CHECK(memcmp(a, b, (size_t)C * T * sizeof(float)) == 0);
    bs_mem_free(scr);
    omp_set_num_threads(2);

    /* artifact check zeroes the window and skips whitening */
    bs_preprocess art = full;
    art.artifact_uv = 50.0;
    memcpy(b, x, (size_t)C * T * sizeof(float));
    b[7 * T + 2000] += 5000.0f;
    int zeroed = 0;
    CHECK(bs_preprocess_batch(&art, b, C, T, NULL, 0, &zeroed) == BS_OK && zeroed == 1);
    CHECK(b[7 * T + 2000] == 0.0f && b[0] == 0.0f && b[C * T - 1] == 0.0f);
    art.artifact_uv = 1e6;
    memcpy(b, x, (size_t)C * T * sizeof(float));
    CHECK(bs_preprocess_batch(&art, b, C, T, NULL, 0, &zeroed) == BS_OK && zeroed == 0);
    CHECK(memcmp(a, b, (size_t)C * T * sizeof(float)) == 0);

    /* bad windows */
    CHECK(bs_preprocess_batch(&full, b, C - 1, T, NULL, 0, NULL) == BS_ERR_INPUT &&
          strstr(bs_last_error(), "whitening matrix is for 40 channels"));
    CHECK(bs_preprocess_batch(&full, b, C, 12, NULL, 0, NULL) == BS_ERR_INPUT &&
          strstr(bs_last_error(), "padding"));

    bs_whitener_free(&wh);
    bs_probe_free(&p);
    bs_mem_free(cov);
    bs_mem_free(x);
    bs_mem_free(a);
    bs_mem_free(b);
}

/* More channels than one block of the covariance product (whiten.c: 64): the
 * blocks' sums are X Xᵀ within float rounding of a double reference, and the
 * same bytes on 1 and 3 threads. */
static void test_cov_blocks(void)
{
    const int C = 150; /* blocks of 64, 64 and 22 channels */
    const int64_t H = 50, B = 3000, T = B + 2 * H;
    float *x = bs_mem_alloc("test/wh", (size_t)C * T * sizeof(float));
    double *cov1 = bs_mem_alloc("test/wh", (size_t)C * C * sizeof(double));
    double *cov3 = bs_mem_alloc("test/wh", (size_t)C * C * sizeof(double));
    for (size_t i = 0; i < (size_t)C * T; i++)
        x[i] = (float)nrand() + (float)(i / T % 7); /* channel offsets: not a diagonal matrix */
    double *cov[2] = {cov1, cov3};
    int threads[2] = {1, 3};
    for (int r = 0; r < 2; r++) {
        omp_set_num_threads(threads[r]);
        bs_whiten_cov acc;
        CHECK(bs_whiten_cov_init(&acc, C) == BS_OK);
        CHECK(bs_whiten_cov_add(&acc, x, T, H, H + B) == BS_OK);
        CHECK(bs_whiten_cov_finalize(&acc, cov[r]) == BS_OK);
        bs_whiten_cov_free(&acc);
    }
    omp_set_num_threads(2);
    CHECK(memcmp(cov1, cov3, (size_t)C * C * sizeof(double)) == 0);
    double err = 0;
    for (int a = 0; a < C; a++)
        for (int b = 0; b < C; b++) {
            double s = 0;
            for (int64_t t = H; t < H + B; t++)
                s += (double)x[a * T + t] * x[b * T + t];
            s /= (double)B;
            double e = fabs(cov1[a * C + b] - s) / sqrt(cov1[a * C + a] * cov1[b * C + b]);
            err = e > err ? e : err;
        }
    CHECK_MSG(err < 1e-5, "block covariance error %g (relative to the variances)", err);
    bs_mem_free(x);
    bs_mem_free(cov1);
    bs_mem_free(cov3);
}

int main(void)
{
    test_neighbours();
    test_cov_blocks();
    test_fixture();
    test_noise();
    test_batch();
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
