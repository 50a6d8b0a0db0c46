/*
 * test_shadow.c - bs_shadow_test: a train that holds copies of 20 % of
 * another's spikes 7 samples (±1) later is a shadow at a lag whose window
 * holds all the copies (6..8), and at -6..-4 when they come 5 samples early; not a shadow: an independent train, one with
 * only 4 % of its spikes copied (under min_fraction), one whose copies
 * number fewer than min_count, and a sparse train against a dense
 * non-refractory one (coincidences at chance, under min_ratio).
 */
#include <math.h>
#include <stdlib.h>

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
static int shadow_case(bs_rng *r, double rate_b, int every, int64_t n_copy, int lag, int *got_lag, int64_t *count)
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
    return bs_shadow_test(&p, ta, na, tb, nb, (int64_t)(60 * FS), got_lag, count);
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
    CHECK(shadow_case(&r, 10.0, 5, 1 << 30, 7, &lag, &count) == 1);
    CHECK_MSG(lag >= 6 && lag <= 8 && count >= 150, "lag %d count %lld", lag, (long long)count);
    CHECK(shadow_case(&r, 10.0, 5, 1 << 30, -5, &lag, &count) == 1);
    CHECK_MSG(lag >= -6 && lag <= -4, "lag %d", lag);
    /* independent */
    CHECK(shadow_case(&r, 10.0, 5, 0, 7, &lag, &count) == 0);
    CHECK(count < 10);
    /* 1 copy in 25 of A's spikes into a 15-Hz unit: ~36 copies, 4 % of B */
    CHECK(shadow_case(&r, 15.0, 25, 1 << 30, 7, &lag, &count) == 0);
    CHECK_MSG(count >= 20, "count %lld (the min_fraction rule is what rejects it)", (long long)count);
    /* 15 copies only */
    CHECK(shadow_case(&r, 0.1, 1, 15, 7, &lag, &count) == 0);

    /* a 2-Hz unit against a 1-kHz non-refractory train: ~17 chance coincidences per window */
    static int64_t dense[70000], sparse[200];
    int64_t nd = refractory_train(&r, 1000.0, 60.0, 0.0, dense);
    int64_t ns = refractory_train(&r, 2.0, 60.0, 2.0, sparse);
    CHECK(bs_shadow_test(&p, dense, nd, sparse, ns, (int64_t)(60 * FS), &lag, &count) == 0);
    CHECK_MSG(count >= p.min_fraction * ns, "count %lld of %lld (the min_ratio rule is what rejects it)",
              (long long)count, (long long)ns);
    TEST_MAIN_END();
}
