/*
 * test_ccg.c - correlograms and refractoriness metrics: exact counts on a
 * hand-built case and against a naive all-pairs count, a refractory Poisson
 * train is good and one without a refractory period is not, two random
 * halves of a refractory unit are cross-refractory and two independent units
 * are not.
 */
#include "test.h"

#include "cluster/ccg.h"
#include "common/rng.h"

/* Poisson train at rate_hz for dur_s seconds with a dead time of ref_ms. */
static int64_t poisson(bs_rng *r, double rate_hz, double dur_s, double ref_ms, double fs, int64_t *t, int64_t cap)
{
    int64_t n = 0;
    double time = 0;
    for (;;) {
        time += ref_ms / 1000.0 - log(1.0 - bs_rng_uniform(r)) / rate_hz;
        if (time >= dur_s || n == cap)
            break;
        t[n++] = (int64_t)(time * fs);
    }
    return n;
}

int main(void)
{
    /* hand-built: fs = 1 kHz, so one sample = one bin */
    int64_t a[] = {0, 10, 600}, b[] = {5, 12};
    int64_t k[BS_CCG_BINS];
    bs_ccg_counts(a, 3, b, 2, 1000.0, k);
    int64_t total = 0;
    for (int i = 0; i < BS_CCG_BINS; i++)
        total += k[i];
    CHECK(total == 4);
    CHECK(k[500 + 5] == 1 && k[500 - 5] == 1 && k[500 + 12] == 1 && k[500 + 2] == 1);
    /* fs = 30 kHz: a lag of 45 samples = 1.5 ms rounds away from zero to 2; 15 samples = 0.5 ms -> 1;
     * 14 samples -> 0; exactly 500 ms (15000 samples) is in, 500.5 ms (15015) rounds to 501 and is out */
    int64_t c1[] = {1000};
    int64_t c2s[6] = {1000 - 45, 1000 + 14, 1000 + 15, 1000 + 45, 1000 + 15000, 1000 + 15015};
    bs_ccg_counts(c1, 1, c2s, 6, 30000.0, k);
    CHECK(k[502] == 1 && k[498] == 1 && k[501] == 1 && k[500] == 1 && k[1000] == 1);
    total = 0;
    for (int i = 0; i < BS_CCG_BINS; i++)
        total += k[i];
    CHECK(total == 5);

    /* random trains: two-pointer counts equal the naive all-pairs counts */
    bs_rng r;
    bs_rng_seed(&r, 7);
    const double fs = 30000.0;
    static int64_t t1[40000], t2[40000], h1[40000], h2[40000];
    int64_t n1 = poisson(&r, 30, 20, 0, fs, t1, 40000), n2 = poisson(&r, 20, 20, 0, fs, t2, 40000);
    int64_t naive[BS_CCG_BINS] = {0};
    for (int64_t i = 0; i < n2; i++)
        for (int64_t j = 0; j < n1; j++) {
            double ms = (double)(t2[i] - t1[j]) * 1000.0 / fs;
            long long bin = llround(ms);
            if (bin >= -500 && bin <= 500)
                naive[bin + 500]++;
        }
    bs_ccg_counts(t1, n1, t2, n2, fs, k);
    CHECK(memcmp(k, naive, sizeof k) == 0);

    /* refractory vs not (10 Hz, 600 s) */
    static int64_t ref[8000], noref[8000];
    int64_t nr = poisson(&r, 10, 600, 2.0, fs, ref, 8000);
    int64_t nn = poisson(&r, 10, 600, 0.0, fs, noref, 8000);
    bs_ccg_metrics m;
    int good = bs_ccg_is_good(ref, nr, fs, 0.2, &m);
    printf("refractory train: %lld spikes, R12 %.4f Q12 %.3g\n", (long long)nr, m.R12, m.Q12);
    CHECK(good);
    CHECK(m.R12 < 0.05);
    CHECK_NEAR(m.R00, 1.0, 0.1);
    good = bs_ccg_is_good(noref, nn, fs, 0.2, &m);
    printf("poisson train:    %lld spikes, R12 %.4f Q12 %.3g\n", (long long)nn, m.R12, m.Q12);
    CHECK(!good);
    CHECK(m.R12 > 0.5);
    /* too few spikes: never good */
    CHECK(!bs_ccg_is_good(ref, 10, fs, 0.2, &m) && m.R12 == 0);

    /* two random halves of one refractory unit are cross-refractory */
    int64_t m1 = 0, m2 = 0;
    for (int64_t i = 0; i < nr; i++) {
        if (bs_rng_uniform(&r) < 0.5)
            h1[m1++] = ref[i];
        else
            h2[m2++] = ref[i];
    }
    int cr = bs_ccg_cross_refractory(h1, m1, h2, m2, fs, 0.25, &m);
    printf("halves:           R12 %.4f Q12 %.3g\n", m.R12, m.Q12);
    CHECK(cr);
    /* two independent refractory units are not */
    int64_t nr2 = poisson(&r, 8, 600, 2.0, fs, h2, 8000);
    cr = bs_ccg_cross_refractory(ref, nr, h2, nr2, fs, 0.25, &m);
    printf("independent:      R12 %.4f Q12 %.3g\n", m.R12, m.Q12);
    CHECK(!cr);
    CHECK(m.R12 > 0.5);
    /* empty train: nothing shown */
    m = bs_ccg_metrics_of(ref, 0, h2, nr2, fs);
    CHECK(m.R12 == 1.0 && m.Q12 == 1.0);
    TEST_MAIN_END();
}
