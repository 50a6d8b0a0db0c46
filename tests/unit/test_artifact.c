/*
 * test_artifact.c - the artifact detector (preprocess.h, ARTIFACTS) on
 * synthetic windows: pure noise is never blanked; a broad transient is found
 * with its times, zeroed with tapered edges, and everything outside the
 * period is left bit for bit; a large spike on a few channels is not an
 * artifact; spans merge and clip at the window's edges; NaN columns count;
 * unwhitened data in units of each channel's noise scale give the periods of
 * the same data rescaled; bs_noise_inv_scales equals a sort-based median;
 * the result does not depend on the thread count.
 */
#include "test.h"

#include <omp.h>
#include <stdint.h>

#include "common/rng.h"
#include "mem/mem.h"
#include "preprocess/preprocess.h"

#define FS 30000.0

static bs_rng rng_ = {777};
static float nrand(void)
{
    return (float)bs_rng_normal(&rng_);
}

static float *noise(int C, int64_t T)
{
    float *x = bs_mem_alloc("test/x", (size_t)C * T * sizeof *x);
    for (int64_t i = 0; i < (int64_t)C * T; i++)
        x[i] = nrand();
    return x;
}

/* a ringing transient on channels [c0, c1) from t0 for len samples, peak amp */
static void add_transient(float *x, int C, int64_t T, int c0, int c1, int64_t t0, int len, float amp)
{
    for (int c = c0; c < c1 && c < C; c++)
        for (int i = 0; i < len && t0 + i < T; i++)
            x[(size_t)c * T + t0 + i] +=
                amp * (0.6f + 0.8f * (float)(c % 7) / 6.0f) * expf(-(float)i / (len / 3.0f)) * cosf(0.4f * i);
}

typedef struct {
    bs_artifact_period p[64];
    int n;
} found;

static bs_status run(const bs_artifact_params *ap, float *x, int C, int64_t T, const float *inv, found *f)
{
    int32_t *count = bs_mem_alloc("test/count", (size_t)T * sizeof *count);
    int max = bs_artifact_max_periods(ap, FS, T);
    CHECK(max <= 64 || T > 20000);
    bs_status st = bs_artifact_blank(ap, FS, x, C, T, inv, count, f->p, max < 64 ? max : 64, &f->n);
    bs_mem_free(count);
    return st;
}

static void test_noise_and_spike(void)
{
    bs_artifact_params ap;
    bs_artifact_default_params(&ap);
    const int C = 96;
    const int64_t T = 30000;
    float *x = noise(C, T);
    /* a large spike: 12 neighbouring channels at up to 40 sd, 1 ms */
    for (int c = 40; c < 52; c++)
        for (int i = 0; i < 30; i++)
            x[(size_t)c * T + 12000 + i] -= 40.0f * expf(-(float)((c - 46) * (c - 46)) / 8.0f) * sinf(M_PI * i / 30.0f);
    float *copy = bs_mem_alloc("test/x", (size_t)C * T * sizeof *copy);
    memcpy(copy, x, (size_t)C * T * sizeof *x);
    found f;
    CHECK(run(&ap, x, C, T, NULL, &f) == BS_OK);
    CHECK_MSG(f.n == 0, "%d periods in noise with a spike", f.n);
    CHECK(memcmp(x, copy, (size_t)C * T * sizeof *x) == 0);
    bs_mem_free(x);
    bs_mem_free(copy);
}

static void test_transient(void)
{
    bs_artifact_params ap;
    bs_artifact_default_params(&ap);
    const int C = 96;
    const int64_t T = 30000;
    const int64_t margin = (int64_t)ceil(ap.margin_ms * FS / 1000), taper = (int64_t)ceil(ap.taper_ms * FS / 1000);
    float *x = noise(C, T);
    add_transient(x, C, T, 10, 90, 5000, 150, 30.0f);  /* 80 of 96 channels */
    add_transient(x, C, T, 0, 96, 20000, 60, 15.0f);   /* all channels */
    add_transient(x, C, T, 0, 96, 20300, 60, 15.0f);   /* 10 ms later: a span of its own */
    add_transient(x, C, T, 0, 96, 20400, 60, 15.0f);   /* close to the previous: merged with it */
    add_transient(x, C, T, 0, 96, T - 40, 40, 25.0f);  /* runs off the window's end */
    float *copy = bs_mem_alloc("test/x", (size_t)C * T * sizeof *copy);
    memcpy(copy, x, (size_t)C * T * sizeof *x);
    found f;
    CHECK(run(&ap, x, C, T, NULL, &f) == BS_OK);
    CHECK_MSG(f.n == 4, "%d periods, expected 4", f.n);
    if (f.n == 4) {
        /* each period holds its transient's onset, starts before it by the margin and taper (plus at most
           the few samples its rise stays over the threshold), and ends after the ringing */
        const int64_t on[4] = {5000, 20000, 20300, T - 40};
        for (int i = 0; i < 4; i++) {
            CHECK_MSG(f.p[i].t0 <= on[i] - margin - taper && f.p[i].t0 >= on[i] - margin - taper - 10,
                      "period %d starts at %lld (onset %lld)", i, (long long)f.p[i].t0, (long long)on[i]);
            CHECK(f.p[i].n_chan >= 72);
        }
        CHECK(f.p[0].t1 >= 5000 + 20 && f.p[0].t1 <= 5000 + 150 + margin + taper);
        CHECK(f.p[2].t1 >= 20400 + 20 + margin); /* the third and fourth are one span */
        CHECK(f.p[3].t1 == T);                    /* clipped at the end */
        /* inside: zero on every channel; outside the periods: untouched */
        for (int64_t t = 0; t < T; t++) {
            int in = -1;
            for (int i = 0; i < f.n; i++)
                if (t >= f.p[i].t0 && t < f.p[i].t1)
                    in = i;
            int bad = 0;
            for (int c = 0; c < C; c++) {
                float v = x[(size_t)c * T + t], o = copy[(size_t)c * T + t];
                if (in < 0)
                    bad |= memcmp(&v, &o, sizeof v) != 0;
                else if (t >= f.p[in].t0 + taper && t < f.p[in].t1 - taper)
                    bad |= v != 0.0f;
                else
                    bad |= !(fabsf(v) <= fabsf(o)); /* the ramps only shrink */
            }
            if (bad) {
                CHECK_MSG(0, "column %lld (period %d) blanked wrongly", (long long)t, in);
                break;
            }
        }
    }
    /* threads: the same bits */
    float *y = bs_mem_alloc("test/x", (size_t)C * T * sizeof *y);
    memcpy(y, copy, (size_t)C * T * sizeof *y);
    omp_set_num_threads(1);
    found g;
    CHECK(run(&ap, y, C, T, NULL, &g) == BS_OK);
    omp_set_num_threads(2);
    CHECK(g.n == f.n);
    for (int i = 0; i < g.n && i < f.n; i++)
        CHECK(g.p[i].t0 == f.p[i].t0 && g.p[i].t1 == f.p[i].t1 && g.p[i].n_chan == f.p[i].n_chan);
    CHECK(memcmp(x, y, (size_t)C * T * sizeof *x) == 0);

    /* unwhitened: each channel scaled by its own factor, counted in units of its noise scale */
    float *z = bs_mem_alloc("test/x", (size_t)C * T * sizeof *z);
    float inv[96];
    for (int c = 0; c < C; c++)
        for (int64_t t = 0; t < T; t++)
            z[(size_t)c * T + t] = copy[(size_t)c * T + t] * (1.0f + 9.0f * (float)c / C);
    CHECK(bs_noise_inv_scales(z, C, T, 0, T, 8, "test/noise", inv) == BS_OK);
    for (int c = 0; c < C; c++)
        CHECK_MSG(fabs(inv[c] * (1.0 + 9.0 * c / C) - 1.0) < 0.1, "channel %d scale %g", c, inv[c]);
    found h;
    CHECK(run(&ap, z, C, T, inv, &h) == BS_OK);
    CHECK_MSG(h.n == f.n, "unwhitened: %d periods, whitened %d", h.n, f.n);
    for (int i = 0; i < h.n && i < f.n; i++)
        CHECK(llabs(h.p[i].t0 - f.p[i].t0) <= 2 && llabs(h.p[i].t1 - f.p[i].t1) <= 2);
    bs_mem_free(x), bs_mem_free(y), bs_mem_free(z), bs_mem_free(copy);
}

static int cmpf(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void test_scales_and_nan(void)
{
    /* bs_noise_inv_scales: 0.6745 / the median of |x| at every step-th sample of [first, first + n) */
    const int C = 3;
    const int64_t T = 1001;
    float *x = noise(C, T);
    for (int64_t t = 0; t < T; t++)
        x[2 * T + t] = 0; /* a flat channel */
    float inv[3], v[200];
    CHECK(bs_noise_inv_scales(x, C, T, 5, 990, 5, "test/noise", inv) == BS_OK);
    for (int c = 0; c < 2; c++) {
        int m = 0;
        for (int64_t i = 0; i < 990; i += 5)
            v[m++] = fabsf(x[c * T + 5 + i]);
        qsort(v, (size_t)m, sizeof *v, cmpf);
        CHECK_NEAR(inv[c], 0.6745 / v[m / 2], 1e-6);
    }
    CHECK(inv[2] == 0);
    bs_mem_free(x);

    /* a batch's worth (7,500 values a channel: the bracketed selection) equals the sort-based median
       exactly: noise, coarse values with many ties, a channel nearly all one value, noise with a few
       huge outliers, noise with a DC step in its second half */
    const int C3 = 5;
    const int64_t T3 = 60000;
    float *z = noise(C3, T3), *u = bs_mem_alloc("test/noise", (size_t)(T3 / 8) * sizeof *u), inv3[5];
    for (int64_t t = 0; t < T3; t++) {
        z[1 * T3 + t] = (float)floor(z[1 * T3 + t] * 2.0f);
        z[2 * T3 + t] = t % 97 == 0 ? z[2 * T3 + t] : 3.0f;
        z[3 * T3 + t] = t % 1000 == 0 ? 1e6f : z[3 * T3 + t];
        z[4 * T3 + t] += t >= T3 / 2 ? 5.0f : 0.0f;
    }
    CHECK(bs_noise_inv_scales(z, C3, T3, 0, T3, 8, "test/noise", inv3) == BS_OK);
    for (int c = 0; c < C3; c++) {
        int64_t m = 0;
        for (int64_t i = 0; i < T3; i += 8)
            u[m++] = fabsf(z[c * T3 + i]);
        qsort(u, (size_t)m, sizeof *u, cmpf);
        CHECK_MSG(inv3[c] == (u[m / 2] > 0 ? (float)(0.6745 / u[m / 2]) : 0.0f), "channel %d: %g, median %g", c,
                  inv3[c], u[m / 2]);
    }
    bs_mem_free(z), bs_mem_free(u);

    /* NaN counts as crossing; too few channels: never an artifact */
    bs_artifact_params ap;
    bs_artifact_default_params(&ap);
    const int C2 = 32;
    const int64_t T2 = 3000;
    float *y = noise(C2, T2);
    for (int c = 0; c < C2; c++)
        y[(size_t)c * T2 + 1500] = NAN;
    found f;
    CHECK(run(&ap, y, C2, T2, NULL, &f) == BS_OK);
    CHECK(f.n == 1 && f.p[0].t0 < 1500 && f.p[0].t1 > 1500 && f.p[0].n_chan == C2);
    CHECK(y[5 * T2 + 1500] == 0.0f); /* NaN times 0 is NaN: the blanked value must be set, not scaled */
    bs_mem_free(y);
    float *w = noise(16, T2); /* 16 channels < min_channels */
    for (int c = 0; c < 16; c++)
        w[(size_t)c * T2 + 1500] = 50.0f;
    CHECK(run(&ap, w, 16, T2, NULL, &f) == BS_OK);
    CHECK(f.n == 0);
    bs_mem_free(w);
}

int main(void)
{
    omp_set_num_threads(2);
    test_noise_and_spike();
    test_transient();
    test_scales_and_nan();
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
