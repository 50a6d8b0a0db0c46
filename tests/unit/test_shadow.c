/*
 * test_shadow.c - bs_shadow_test: a train that holds copies of 20 % of
 * another's spikes 7 samples (±1) later is a shadow at a lag whose window
 * holds all the copies (6..8), and at -6..-4 when they come 5 samples early;
 * copies 55 or -57 samples away only as a tail shadow (bs_shadow_is_tail:
 * a unit of at most a fifth of the other's amplitude); a tail shadow whole
 * when 90 % of its spikes are copies at lags spread over -95..-55 samples,
 * but not with half of them copies, nor as a shadow of a neighbour it is
 * not the tail of, nor with tail_spread_excess 0; not a shadow: an independent train, one with
 * only 4 % of its spikes copied (under min_fraction), one whose copies
 * number fewer than min_count, and a sparse train against a dense
 * non-refractory one (coincidences at chance, under min_ratio).
 *
 * Collisions: bs_mark_coincident against a brute-force count (with and
 * without an offset), bs_collision_excess on its closed form, and the
 * excess of a train whose spikes all lie within 5 samples of two other
 * units' spikes (near 1) against an independent train (near 0, within
 * three standard errors of a binomial share).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "common/rng.h"
#include "spike_trains.h"
#include "test.h"

#define FS 30000.0

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* B = its own train at rate_b plus copies of every `every`-th of A's first
 * n_copy spikes at lag ±1; returns bs_shadow_test's verdict. */
static int shadow_case(bs_rng *r, double rate_b, int every, int64_t n_copy, int lag, int tail, int *got_lag,
                       int64_t *count)
{
    static int64_t ta[40000], tb[80000];
    int64_t na = refractory_train(r, 15.0, 60.0, 2.0, ta);
    int64_t nb = refractory_train(r, rate_b, 60.0, 2.0, tb);
    for (int64_t i = 0; i < na && i < n_copy; i++)
        if (i % every == 0)
            tb[nb++] = ta[i] + lag + (int64_t)(i % 3) - 1;
    qsort(tb, (size_t)nb, sizeof *tb, cmp64);
    bs_shadow_params p;
    bs_shadow_default_params(&p, FS);
    return bs_shadow_test(&p, ta, na, tb, nb, (int64_t)(60 * FS), tail, got_lag, count);
}

/* B = every A spike with probability `share` copied at a lag drawn from
 * [lo, hi], plus B's own train at rate_b; returns bs_shadow_test's verdict. */
static int spread_case(bs_rng *r, const bs_shadow_params *p, double share, double rate_b, int lo, int hi, int tail,
                       int64_t *nb_out, int64_t *count)
{
    static int64_t ta[40000], tb[80000];
    int64_t na = refractory_train(r, 15.0, 60.0, 2.0, ta);
    int64_t nb = refractory_train(r, rate_b, 60.0, 2.0, tb);
    for (int64_t i = 0; i < na; i++)
        if (bs_rng_uniform(r) < share)
            tb[nb++] = ta[i] + lo + (int64_t)(bs_rng_uniform(r) * (double)(hi - lo + 1));
    qsort(tb, (size_t)nb, sizeof *tb, cmp64);
    *nb_out = nb;
    int lag;
    return bs_shadow_test(p, ta, na, tb, nb, (int64_t)(60 * FS), tail, &lag, count);
}

int main(void)
{
    bs_rng r;
    bs_rng_seed(&r, 17);
    bs_shadow_params p;
    bs_shadow_default_params(&p, FS);
    CHECK(p.max_lag == 15 && p.half_width == 2 && p.min_count == 20);
    int lag;
    int64_t count;

    /* 20 % of A's ~850 spikes copied 7 samples later (±1) into a 10-Hz unit */
    CHECK(shadow_case(&r, 10.0, 5, 1 << 30, 7, 0, &lag, &count) == 1);
    CHECK_MSG(lag >= 6 && lag <= 8 && count >= 150, "lag %d count %lld", lag, (long long)count);
    CHECK(shadow_case(&r, 10.0, 5, 1 << 30, -5, 0, &lag, &count) == 1);
    CHECK_MSG(lag >= -6 && lag <= -4, "lag %d", lag);
    /* copies 55 samples (1.8 ms) later: past max_lag, so a shadow only as a tail shadow (lags to
     * tail_max_lag = 2 ms), which a unit of at most a fifth of the other's amplitude can be */
    CHECK(p.tail_max_lag == 60 && p.tail_max_amp == 0.2);
    CHECK(shadow_case(&r, 10.0, 5, 1 << 30, 55, 0, &lag, &count) == 0);
    CHECK(shadow_case(&r, 10.0, 5, 1 << 30, 55, 1, &lag, &count) == 1);
    CHECK_MSG(lag >= 54 && lag <= 56 && count >= 150, "tail lag %d count %lld", lag, (long long)count);
    CHECK(shadow_case(&r, 10.0, 5, 1 << 30, -57, 1, &lag, &count) == 1);
    CHECK_MSG(lag >= -58 && lag <= -56, "tail lag %d", lag);
    CHECK(bs_shadow_is_tail(&p, 250.0, 12.0) && bs_shadow_is_tail(&p, 50.0, 10.0));
    CHECK(!bs_shadow_is_tail(&p, 19.8, 7.5) && !bs_shadow_is_tail(&p, 10.0, 12.0));
    {
        bs_shadow_params off = p;
        off.tail_max_amp = 0;
        CHECK(!bs_shadow_is_tail(&off, 250.0, 12.0));
    }
    /* the residual of a waveform longer than the template, matched at lags spread over its tail:
     * no window holds a tenth of B, the whole train lies within tail_spread_lag of A's spikes */
    CHECK(p.tail_spread_lag == 120 && p.tail_spread_excess == 0.8);
    {
        int64_t nb;
        CHECK(spread_case(&r, &p, 0.9, 1.0, -95, -55, 1, &nb, &count) == 1);
        CHECK_MSG(count == nb, "a tail shadow whole: count %lld of %lld", (long long)count, (long long)nb);
        CHECK(spread_case(&r, &p, 0.9, 1.0, -95, -55, 0, &nb, &count) == 0); /* not a tail: lags past max_lag */
        /* half of B its own spikes (13 Hz beside ~770 copies): not whole */
        CHECK(spread_case(&r, &p, 0.9, 13.0, -95, -55, 1, &nb, &count) == 0 || count < nb);
        bs_shadow_params off = p;
        off.tail_spread_excess = 0;
        CHECK(spread_case(&r, &off, 0.9, 1.0, -95, -55, 1, &nb, &count) == 0 || count < nb);
    }
    /* independent */
    CHECK(shadow_case(&r, 10.0, 5, 0, 7, 0, &lag, &count) == 0);
    CHECK(count < 10);
    /* 1 copy in 25 of A's spikes into a 15-Hz unit: ~36 copies, 4 % of B */
    CHECK(shadow_case(&r, 15.0, 25, 1 << 30, 7, 0, &lag, &count) == 0);
    CHECK_MSG(count >= 20, "count %lld (the min_fraction rule is what rejects it)", (long long)count);
    /* 15 copies only */
    CHECK(shadow_case(&r, 0.1, 1, 15, 7, 0, &lag, &count) == 0);

    /* a 2-Hz unit against a 1-kHz non-refractory train: ~17 chance coincidences per window */
    static int64_t dense[70000], sparse[200];
    int64_t nd = refractory_train(&r, 1000.0, 60.0, 0.0, dense);
    int64_t ns = refractory_train(&r, 2.0, 60.0, 2.0, sparse);
    CHECK(bs_shadow_test(&p, dense, nd, sparse, ns, (int64_t)(60 * FS), 0, &lag, &count) == 0);
    CHECK_MSG(count >= p.min_fraction * ns, "count %lld of %lld (the min_ratio rule is what rejects it)",
              (long long)count, (long long)ns);

    /* collisions: marks against brute force */
    static int64_t a[4000], b[4000], c[4000], col[400];
    static uint8_t hit[4000];
    int64_t n_a = refractory_train(&r, 10.0, 300.0, 2.0, a), n_b = refractory_train(&r, 10.0, 300.0, 2.0, b);
    for (int off = -7; off <= 7; off += 7) {
        memset(hit, 0, sizeof hit);
        bs_mark_coincident(a, n_a, b, n_b, off, 15, hit);
        int same = 1;
        for (int64_t i = 0; i < n_a; i++) {
            int want = 0;
            for (int64_t j = 0; j < n_b && !want; j++)
                want = llabs(b[j] + off - a[i]) <= 15;
            same &= hit[i] == want;
        }
        CHECK_MSG(same, "offset %d", off);
    }
    CHECK_NEAR(bs_collision_excess(50, 100, 30000, 15, 9000000), (0.5 - (1 - exp(-30000.0 * 31 / 9e6))) /
                                                                     exp(-30000.0 * 31 / 9e6), 1e-12);
    CHECK(bs_collision_excess(0, 0, 10, 15, 100) == -1.0 && bs_collision_excess(1, 1, 10, 15, 0) == -1.0);
    /* a collision unit: 300 spikes within 5 samples of a spike of a or b; an independent 1-Hz unit */
    bs_collision_params cp;
    bs_collision_default_params(&cp);
    CHECK(cp.window_ms == 2.0 && cp.min_excess == 0.3 && cp.count_ratio == 2.0);
    int64_t w = (int64_t)llround(cp.window_ms * 1e-3 * FS), ns2 = (int64_t)(300 * FS), n_col = 0;
    for (int i = 0; i < 300; i++) {
        const int64_t *src = i % 2 ? a : b;
        int64_t m = i % 2 ? n_a : n_b;
        col[n_col++] = src[(int64_t)(bs_rng_uniform(&r) * (double)m)] + (int64_t)(bs_rng_uniform(&r) * 11.0) - 5;
    }
    qsort(col, (size_t)n_col, sizeof *col, cmp64);
    int64_t n_c = refractory_train(&r, 1.0, 300.0, 2.0, c);
    double ex[2];
    for (int q = 0; q < 2; q++) {
        const int64_t *t = q ? c : col;
        int64_t n = q ? n_c : n_col, n_hit = 0;
        memset(hit, 0, sizeof hit);
        bs_mark_coincident(t, n, a, n_a, 0, w, hit);
        bs_mark_coincident(t, n, b, n_b, 0, w, hit);
        for (int64_t i = 0; i < n; i++)
            n_hit += hit[i];
        ex[q] = bs_collision_excess(n_hit, n, n_a + n_b, w, ns2);
    }
    double f0 = 1 - exp(-(double)(n_a + n_b) * (2 * w + 1) / (double)ns2);
    printf("collision excess: collision unit %.3f, independent unit %.3f (chance share %.4f)\n", ex[0], ex[1], f0);
    CHECK(ex[0] > 0.99 && ex[0] >= cp.min_excess);
    CHECK(fabs(ex[1]) < 3 * sqrt(f0 * (1 - f0) / (double)n_c) / (1 - f0) && ex[1] < cp.min_excess);
    TEST_MAIN_END();
}
