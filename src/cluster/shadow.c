/*
 * shadow.c - spikes that another unit's spikes cast at a fixed lag (see
 * cluster.h, "shadows"), and units whose spikes coincide with their
 * neighbours' far more often than chance ("collisions").
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/samples.h"
#include "cluster.h"

void bs_shadow_default_params(bs_shadow_params *p, double fs_hz)
{
    p->max_lag = (int)bs_seconds_to_samples(0.5e-3, fs_hz); /* 0.5 ms */
    p->half_width = 2;
    p->min_count = 20;
    p->min_fraction = 0.05;
    p->min_ratio = 10.0;
    p->max_rest = 10;
    p->tail_max_lag = (int)bs_seconds_to_samples(2e-3, fs_hz); /* 2 ms */
    p->tail_max_amp = 0.2;
    p->tail_spread_lag = (int)bs_seconds_to_samples(4e-3, fs_hz); /* 4 ms */
    p->tail_spread_excess = 0.8;
}

int bs_shadow_is_tail(const bs_shadow_params *p, double amp_a, double amp_b)
{
    return p->tail_max_amp > 0 && amp_b <= p->tail_max_amp * amp_a;
}

int bs_shadow_test(const bs_shadow_params *p, const int64_t *ta, int64_t na, const int64_t *tb, int64_t nb,
                   int64_t n_samples, int tail, int *lag, int64_t *count)
{
    enum { MAX_BINS = 2 * BS_SHADOW_MAX_LAG + 1 };
    int W = tail && p->tail_max_lag > p->max_lag ? p->tail_max_lag : p->max_lag, hw = p->half_width;
    *lag = 0;
    *count = 0;
    if (na == 0 || nb == 0 || n_samples <= 0 || W < 0 || 2 * W + 1 > MAX_BINS)
        return 0;
    int64_t hist[MAX_BINS];
    memset(hist, 0, sizeof(int64_t) * (size_t)(2 * W + 1));
    /* each B spike's lag to its nearest A spike (the earlier one on a tie) */
    int64_t a = 0, near = 0;
    const int S = tail && p->tail_spread_excess > 0 && p->tail_spread_lag <= BS_SHADOW_MAX_LAG ? p->tail_spread_lag
                                                                                               : -1;
    for (int64_t i = 0; i < nb; i++) {
        while (a + 1 < na && ta[a + 1] <= tb[i])
            a++;
        int64_t d = tb[i] - ta[a];
        if (a + 1 < na && llabs(ta[a + 1] - tb[i]) < llabs(d))
            d = tb[i] - ta[a + 1];
        if (d >= -W && d <= W)
            hist[d + W]++;
        near += d >= -S && d <= S;
    }
    if (S >= 0 && near >= p->min_count && bs_collision_excess(near, nb, na, S, n_samples) >= p->tail_spread_excess) {
        *lag = 0; /* spread over the tail: B whole */
        *count = nb;
        return 1;
    }
    /* the window of 2·hw + 1 lags holding the most B spikes (the smallest |lag| on a tie) */
    int best_lag = 0;
    int64_t best = -1;
    for (int L = -W; L <= W; L++) {
        int64_t s = 0;
        for (int d = L - hw; d <= L + hw; d++)
            if (d >= -W && d <= W)
                s += hist[d + W];
        if (s > best || (s == best && abs(L) < abs(best_lag))) {
            best = s;
            best_lag = L;
        }
    }
    double chance = (double)na * (double)nb * (2.0 * hw + 1.0) / (double)n_samples;
    *lag = best_lag;
    *count = best;
    return best >= p->min_count && (double)best >= p->min_fraction * (double)nb && (double)best >= p->min_ratio * chance;
}

void bs_collision_default_params(bs_collision_params *p)
{
    p->window_ms = 2.0;
    p->radius_um = 100.0;
    p->min_excess = 0.3;
    p->count_ratio = 2.0;
}

void bs_mark_coincident(const int64_t *t, int64_t n, const int64_t *o, int64_t m, int64_t off, int64_t w,
                        uint8_t *hit)
{
    for (int64_t i = 0, j = 0; i < n; i++) {
        while (j < m && o[j] + off < t[i] - w)
            j++;
        if (j < m && o[j] + off <= t[i] + w)
            hit[i] = 1;
    }
}

double bs_collision_excess(int64_t n_hit, int64_t n, int64_t n_nb, int64_t w, int64_t n_samples)
{
    if (n <= 0 || n_samples <= 0)
        return -1.0;
    double f0 = 1.0 - exp(-(double)n_nb * (double)(2 * w + 1) / (double)n_samples);
    if (!(f0 < 1.0))
        return -1.0;
    return ((double)n_hit / (double)n - f0) / (1.0 - f0);
}
