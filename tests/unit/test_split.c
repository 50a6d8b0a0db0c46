/*
 * test_split.c - a template's spikes split in two by amplitude
 * (src/cluster/split.c, bs_amp_split).
 *
 * Spike trains with Poisson times over 600 s and log-normal amplitudes
 * (spread 0.1 in log units, as the bench's sorted units have):
 *   - two cells at amplitudes 15 and 60 (ratio 1:2 in spike counts) split,
 *     with the threshold between the modes, every spike on its side, and d'
 *     matching the one computed here from the two parts;
 *   - one cell (one mode) and one with a uniform spread of amplitudes do not;
 *   - two modes in different halves of the recording (a cell whose
 *     amplitude drift changed) do not (the time test);
 *   - a low mode of noise crossings just above the matching threshold does
 *     not (the low part's median), nor with too few spikes in a part, nor
 *     when the best cut leaves a part of exactly the smallest size allowed;
 *   - min_dprime 0 is off;
 *   - the decision does not depend on where equal amplitudes sit.
 * And split by features (bs_feature_split): spikes of two cells' waveforms
 * (12 features, unit noise, amplitudes spread as above) on one template:
 *   - 600 + 100 spikes of shapes at cosine 0.6 split along the first
 *     principal axis, the 100 (the smaller part) exactly under the cut, with
 *     the features as given and negated (the axis turned round either way);
 *   - one cell's 700 spikes do not, nor two cells firing in different halves
 *     of the recording, nor with feature_min_dprime 0.
 * And a low-tier unit's pile of noise crossings at its threshold
 * (bs_threshold_pile, threshold 5): a cell at amplitude 7 (1,600 spikes,
 * spread 0.8, cut at the threshold) with 700 crossings whose density falls
 * from the threshold (exponential, scale 0.4) is cut between the two, which
 * removes most crossings and few of the cell's spikes; the cell alone, a cell
 * whose mode is at the threshold, a shallow valley, a valley of too few
 * spikes and pile_ratio 0 are not cut.
 */
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cluster/cluster.h"
#include "match_synth.h"

enum { NMAX = 20000 };
static float amp[NMAX];
static int64_t t[NMAX];
static unsigned char work[NMAX * 64];

typedef struct {
    double a;  /* median amplitude */
    int n;     /* spikes */
    double t0, t1; /* firing period, fraction of the recording */
} mode;

/* n spikes of the given modes, in time order, amplitudes exp(log a + 0.1 z). */
static int make(synth_rng *r, const mode *m, int n_modes)
{
    typedef struct {
        int64_t t;
        float a;
    } sp;
    static sp s[NMAX];
    int n = 0;
    const int64_t span = 600 * 30000;
    for (int q = 0; q < n_modes; q++)
        for (int i = 0; i < m[q].n; i++) {
            double u = m[q].t0 + (m[q].t1 - m[q].t0) * synth_uniform(r);
            s[n++] = (sp){(int64_t)(u * (double)span), (float)exp(log(m[q].a) + 0.1 * synth_normal(r))};
        }
    for (int i = 1; i < n; i++) /* insertion sort by time (small n) */
        for (int j = i; j > 0 && s[j].t < s[j - 1].t; j--) {
            sp x = s[j];
            s[j] = s[j - 1], s[j - 1] = x;
        }
    for (int i = 0; i < n; i++)
        t[i] = s[i].t, amp[i] = s[i].a;
    return n;
}

/* The default parameters, with the stage's low-part bound at the default matching threshold (1.375 × 8). */
static bs_split_params defaults(void)
{
    bs_split_params p;
    bs_split_default_params(&p);
    p.min_low_amp = 11;
    return p;
}

static void test_two_cells(void)
{
    synth_rng r = {1};
    bs_split_params p = defaults();
    mode m[2] = {{15, 600, 0, 1}, {60, 300, 0, 1}};
    int n = make(&r, m, 2);
    float thr = 0;
    double dp = 0;
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 1);
    CHECK_MSG(thr > 20 && thr < 45, "threshold %g between the modes 15 and 60", thr);
    int lo = 0;
    double s1[2] = {0}, s2[2] = {0};
    for (int i = 0; i < n; i++) {
        int h = amp[i] >= thr;
        lo += !h;
        double l = log(amp[i]);
        s1[h] += l, s2[h] += l * l;
    }
    CHECK_MSG(lo == 600, "%d spikes in the low part, expected 600", lo);
    double ml = s1[0] / lo, mh = s1[1] / (n - lo);
    double v = 0.5 * (s2[0] / lo - ml * ml + s2[1] / (n - lo) - mh * mh);
    CHECK_NEAR(dp, (mh - ml) / sqrt(v), 1e-6);
    CHECK(dp > 10);
    p.min_dprime = 0; /* off */
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 0);
}

static void test_one_cell(void)
{
    synth_rng r = {2};
    bs_split_params p = defaults();
    mode m[1] = {{30, 5000, 0, 1}};
    int n = make(&r, m, 1);
    float thr;
    double dp = 0;
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 0);
    CHECK_MSG(dp > 2.9 && dp < 3.5, "one Gaussian mode: best d' %g, expected about 3.2 (a cut at a 5 %% tail)", dp);
    for (int i = 0; i < n; i++) /* uniform in log amplitude over 20..40 */
        amp[i] = (float)exp(log(20.0) + log(2.0) * synth_uniform(&r));
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 0);
    CHECK_MSG(dp > 3.2 && dp < 3.7, "uniform: best d' %g, expected about 3.5", dp);
}

static void test_guards(void)
{
    synth_rng r = {3};
    bs_split_params p = defaults();
    float thr;
    double dp;
    mode drift[2] = {{15, 600, 0, 0.5}, {60, 300, 0.5, 1}}; /* the same cell before and after a change */
    int n = make(&r, drift, 2);
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 0);
    CHECK(dp > 10); /* separated, but in different periods */
    p.high_own = 1; /* ... the smaller high part gets a waveform of its own: the time rule is waived */
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 1);
    mode drift2[2] = {{15, 300, 0, 0.5}, {60, 600, 0.5, 1}}; /* ... but not for a larger one */
    n = make(&r, drift2, 2);
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 0);
    p.high_own = 0;
    mode noise[2] = {{9, 600, 0, 1}, {40, 600, 0, 1}}; /* a low mode at the threshold's noise crossings */
    n = make(&r, noise, 2);
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 2); /* a noise cut: its low part is removed */
    CHECK_MSG(thr > 11 && thr < 30, "noise cut at %g, between the modes 9 and 40", thr);
    p.noise_cut = 0; /* ... or not made */
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 0);
    p.noise_cut = 1;
    p.min_low_amp = 8; /* ... a lower bound makes it a split */
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 1);
    mode noise_drift[2] = {{9, 600, 0, 0.5}, {40, 600, 0.5, 1}}; /* a cell that drifts to the threshold: no cut */
    p.min_low_amp = 11;
    n = make(&r, noise_drift, 2);
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 0);
    /* crossings all along (from a quarter of the recording), the cell only where drift brings it (the second
     * half): the times' KS distance 1/3 is over max_time_ks, but the crossings fire where the cell does (the
     * histogram intersection is about 2/3): a noise cut */
    mode noise_late[2] = {{9, 300, 0.25, 1}, {40, 600, 0.5, 1}};
    n = make(&r, noise_late, 2);
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 2);
    p.noise_min_overlap = 0.8;
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 0);
    p.noise_min_overlap = 0.5;
    mode few[2] = {{15, 2000, 0, 1}, {60, 60, 0, 1}}; /* 60 spikes: under 5 % of 2,060 */
    n = make(&r, few, 2);
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 0);
    p.min_fraction = 0.02;
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 1);
    p.min_fraction = 0.05;
    mode edge[2] = {{15, 22, 0, 1}, {60, 400, 0, 1}}; /* the best cut leaves 22 = 5 % of 422: at the edge */
    n = make(&r, edge, 2);
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 0);
    CHECK(dp > 10);
    mode inside[2] = {{15, 30, 0, 1}, {60, 400, 0, 1}}; /* 30 > 22: inside */
    n = make(&r, inside, 2);
    CHECK(bs_amp_split(&p, amp, t, n, work, &thr, &dp) == 1);
}

static void test_ties(void)
{
    synth_rng r = {4};
    bs_split_params p = defaults();
    mode m[2] = {{15, 400, 0, 1}, {45, 400, 0, 1}};
    int n = make(&r, m, 2);
    for (int i = 0; i < n; i++) /* amplitudes rounded: many equal values */
        amp[i] = (float)round(amp[i]);
    float thr1, thr2;
    double d1, d2;
    int s1 = bs_amp_split(&p, amp, t, n, work, &thr1, &d1);
    for (int i = 0; i + 1 < n; i += 2) { /* swap neighbours' amplitudes: the same multiset */
        float x = amp[i];
        amp[i] = amp[i + 1], amp[i + 1] = x;
    }
    int s2 = bs_amp_split(&p, amp, t, n, work, &thr2, &d2);
    CHECK(s1 == 1 && s2 == 1 && thr1 == thr2 && d1 == d2);
}

enum { D = 12 };
static float feat[NMAX * D];

/* n_a spikes of shape a and n_b of shape b (unit-norm, scaled by 20 and the
 * amplitude spread), each with unit Gaussian noise per feature, all times
 * sign; cell a fires over the whole recording and b over [t0, t1), and the
 * spikes are sorted by time. is_b[i]: spike i is b's. */
static int make_features(synth_rng *r, int n_a, int n_b, double t0, double t1, double sign, int *is_b)
{
    double a[D], b[D], na = 0, nb = 0;
    for (int d = 0; d < D; d++) {
        a[d] = exp(-0.5 * (d - 4) * (d - 4) / 4.0);
        b[d] = a[d] * (d == 5 ? -1.0 : 1.0); /* cosine 0.56 */
        na += a[d] * a[d], nb += b[d] * b[d];
    }
    double c = 0;
    for (int d = 0; d < D; d++)
        a[d] /= sqrt(na), b[d] /= sqrt(nb), c += a[d] * b[d];
    CHECK_MSG(c > 0.4 && c < 0.8, "shapes at cosine %g", c);
    int n = n_a + n_b;
    static int64_t key[NMAX];
    const int64_t span = 600 * 30000;
    for (int i = 0; i < n; i++) { /* time * n + i: sorting keys that carry the spike's index */
        double u = i < n_a ? synth_uniform(r) : t0 + (t1 - t0) * synth_uniform(r);
        key[i] = (int64_t)(u * (double)span) * n + i;
    }
    for (int i = 1; i < n; i++) /* insertion sort by time (small n) */
        for (int j = i; j > 0 && key[j] < key[j - 1]; j--) {
            int64_t x = key[j];
            key[j] = key[j - 1], key[j - 1] = x;
        }
    for (int i = 0; i < n; i++) {
        int src = (int)(key[i] % n);
        t[i] = key[i] / n;
        is_b[i] = src >= n_a;
        amp[i] = (float)exp(log(20.0) + 0.1 * synth_normal(r));
        for (int d = 0; d < D; d++)
            feat[(size_t)i * D + d] = (float)(sign * (amp[i] * (is_b[i] ? b[d] : a[d]) + synth_normal(r)));
    }
    return n;
}

static void test_features(void)
{
    synth_rng r = {5};
    bs_split_params p = defaults();
    static int is_b[NMAX];
    float v[D], thr;
    double dp;
    int64_t nl;
    int split;
    for (int s = 0; s < 2; s++) { /* the features as made, then negated */
        int n = make_features(&r, 600, 100, 0, 1, s ? -1.0 : 1.0, is_b);
        int n_b = 0;
        for (int i = 0; i < n; i++)
            n_b += is_b[i];
        CHECK(bs_feature_split(&p, feat, D, t, n, work, v, &thr, &nl, &dp, &split) == BS_OK);
        CHECK_MSG(split == 1 && nl == n_b, "split %d, %lld spikes under the cut, cell b has %d", split, (long long)nl,
                  n_b);
        int wrong = 0;
        for (int i = 0; i < n; i++)
            wrong += (bs_feature_projection(feat + (size_t)i * D, v, D) < thr) != is_b[i];
        CHECK_MSG(wrong == 0, "%d spikes on the wrong side of the cut", wrong);
        CHECK_MSG(dp > 8, "d' %g", dp);
    }
    int n = make_features(&r, 700, 0, 0, 1, 1.0, is_b); /* one cell */
    CHECK(bs_feature_split(&p, feat, D, t, n, work, v, &thr, &nl, &dp, &split) == BS_OK);
    CHECK_MSG(split == 0 && dp < p.feature_min_dprime, "one cell: split %d at d' %g", split, dp);
    n = make_features(&r, 300, 300, 0.5, 1, 1.0, is_b); /* b only in the second half: separated, but in time */
    CHECK(bs_feature_split(&p, feat, D, t, n, work, v, &thr, &nl, &dp, &split) == BS_OK);
    CHECK_MSG(split == 0 && dp > 8, "cells in different periods: split %d at d' %g", split, dp);
    n = make_features(&r, 600, 100, 0, 1, 1.0, is_b);
    p.feature_min_dprime = 0; /* off */
    CHECK(bs_feature_split(&p, feat, D, t, n, work, v, &thr, &nl, &dp, &split) == BS_OK);
    CHECK(split == 0);
}

/* Split rules: a template's rules apply in the order they were made, a made
 * template's rules to what it received; the walk lands each spike where the
 * cuts, made one after another on the trains, put it. */
static void test_rules(void)
{
    enum { K = 3 };
    int32_t first[2 * K], next[K];
    float thr[K], fv[K * D], fmean[K * D];
    uint8_t kind[K];
    bs_split_rules R = {.K = K, .first = first, .next = next, .thr = thr, .kind = kind, .fv = fv, .fmean = fmean};
    bs_split_rules_clear(&R);
    CHECK(R.n == 0 && bs_split_rules_walk(&R, 1, 0, 3.0f, NULL, D) == 1);
    /* amplitudes only: template 0 cut at 10 (-> 3), then what is left at 20 (-> 4); template 3 cut at 5 (-> 5) */
    CHECK(bs_split_rules_add(&R, 0, 0, 10.0f, NULL, D) == 3);
    CHECK(bs_split_rules_add(&R, 0, 0, 20.0f, NULL, D) == 4);
    CHECK(bs_split_rules_add(&R, 3, 0, 5.0f, NULL, D) == 5);
    CHECK(R.n == 3);
    const float a[] = {3, 7, 9.99f, 10, 15, 19.99f, 20, 25};
    const int32_t want[] = {5, 3, 3, 4, 4, 4, 0, 0};
    for (int i = 0; i < 8; i++)
        CHECK_MSG(bs_split_rules_walk(&R, 0, 0, a[i], NULL, D) == want[i], "amplitude %g: template %d, expected %d",
                  a[i], bs_split_rules_walk(&R, 0, 0, a[i], NULL, D), want[i]);
    CHECK(bs_split_rules_walk(&R, 2, 0, 3.0f, NULL, D) == 2); /* another template's spikes: no rule */

    /* features: two cells on template 0, cut by their first axis (b -> 3); then a's spikes at amplitude under
     * 20 (-> 4), and b's under 18 (-> 5): every spike lands where the cuts put it */
    synth_rng r = {11};
    static int is_b[NMAX];
    int n = make_features(&r, 600, 100, 0, 1, 1.0, is_b), split = 0;
    float v[D], th;
    int64_t nl;
    double dp;
    bs_split_params p = defaults();
    CHECK(bs_feature_split(&p, feat, D, t, n, work, v, &th, &nl, &dp, &split) == BS_OK && split && nl == 100);
    bs_split_rules_clear(&R);
    CHECK(bs_split_rules_add(&R, 0, 1, th, v, D) == 3);
    CHECK(bs_split_rules_add(&R, 0, 0, 20.0f, NULL, D) == 4);
    CHECK(bs_split_rules_add(&R, 3, 0, 18.0f, NULL, D) == 5);
    int wrong = 0, count[2 * K] = {0};
    for (int i = 0; i < n; i++) {
        int32_t k = bs_split_rules_walk(&R, 0, 0, amp[i], feat + (size_t)i * D, D);
        int32_t e = is_b[i] ? (amp[i] < 18.0f ? 5 : 3) : (amp[i] < 20.0f ? 4 : 0);
        wrong += k != e;
        count[k]++;
    }
    CHECK_MSG(wrong == 0, "%d spikes walked to another template than their cuts'", wrong);
    CHECK_MSG(count[0] > 100 && count[3] > 10 && count[4] > 100 && count[5] > 10, "parts %d %d %d %d", count[0],
              count[3], count[4], count[5]);

    /* kind 2: the spikes at or over the cut go (an amplitude cut whose high part is the smaller): template 2 cut
     * at 30 (-> 3), then what is left under 10 (-> 4) */
    bs_split_rules_clear(&R);
    CHECK(bs_split_rules_add(&R, 2, 2, 30.0f, NULL, D) == 3);
    CHECK(bs_split_rules_add(&R, 2, 0, 10.0f, NULL, D) == 4);
    const float a2[] = {5, 10, 29.99f, 30, 50};
    const int32_t want2[] = {4, 2, 2, 3, 3};
    for (int i = 0; i < 5; i++)
        CHECK_MSG(bs_split_rules_walk(&R, 2, 0, a2[i], NULL, D) == want2[i], "kind 2, amplitude %g: template %d, "
                  "expected %d", a2[i], bs_split_rules_walk(&R, 2, 0, a2[i], NULL, D), want2[i]);
    CHECK(bs_split_rules_walk(&R, 0, 0, 50.0f, NULL, D) == 0);
}

/* A noise cut's burst window: a low spike stays when it comes 60..450 samples (2..15 ms at 30 kHz) after the
 * latest high spike of the train before it; the walk (spikes in time order) and bs_noise_cut_stays over the
 * train agree, and a rule that is not a noise cut, or a window of 0, keeps no low spike. */
static void test_burst(void)
{
    int64_t last = INT64_MIN;
    CHECK(!bs_noise_cut_stays(&last, 100, 0, 60, 450));                            /* low, no high spike yet */
    CHECK(bs_noise_cut_stays(&last, 1000, 1, 60, 450) && last == 1000);           /* high */
    CHECK(!bs_noise_cut_stays(&last, 1059, 0, 60, 450));                           /* 59 samples after: too soon */
    CHECK(bs_noise_cut_stays(&last, 1060, 0, 60, 450) && last == 1000);           /* 60: kept, state unchanged */
    CHECK(bs_noise_cut_stays(&last, 1450, 0, 60, 450));                            /* 450 */
    CHECK(!bs_noise_cut_stays(&last, 1451, 0, 60, 450));                           /* 451: too late */
    CHECK(!bs_noise_cut_stays(&last, 1100, 0, 60, 0));                             /* window 0: none kept */

    enum { K = 2, N = 9 };
    int32_t first[2 * K], next[K];
    float thr[K], fv[K * D], fmean[K * D];
    uint8_t kind[K], noise[K];
    int64_t last_hi[K];
    bs_split_rules R = {.K = K, .first = first, .next = next, .thr = thr, .kind = kind, .fv = fv, .fmean = fmean,
                        .noise = noise, .last_hi = last_hi, .burst_lo = 60, .burst_hi = 450};
    bs_split_rules_clear(&R);
    CHECK(bs_split_rules_add(&R, 0, 0, 10.0f, NULL, D) == 2 && noise[0] == 0 && last_hi[0] == INT64_MIN);
    noise[0] = 1; /* template 0's noise cut at 10 (-> 2) */
    /* a burst (15, 9, 8.5 at 0, 200, 400 samples: the window counts from the high spike), a crossing at 5000,
     * a high spike and a low one 40 samples after it (too soon), a high one, a crossing 10700 after it */
    const int64_t t[N] = {0, 200, 400, 5000, 9000, 9040, 9300, 20000, 20400};
    const float a[N] = {15, 9, 8.5f, 8.2f, 14, 9.5f, 30, 8.1f, 12};
    const int32_t want[N] = {0, 0, 0, 2, 0, 2, 0, 2, 0};
    for (int i = 0; i < N; i++) {
        int32_t k = bs_split_rules_walk(&R, 0, t[i], a[i], NULL, D);
        CHECK_MSG(k == want[i], "spike %d at %lld: template %d, expected %d", i, (long long)t[i], k, want[i]);
    }
    last = INT64_MIN; /* the split's decision over the same train */
    for (int i = 0; i < N; i++)
        CHECK(bs_noise_cut_stays(&last, t[i], a[i] >= 10.0f, 60, 450) == (want[i] == 0));
    noise[0] = 0; /* the same cut, not a noise cut: every spike under 10 goes */
    for (int i = 0; i < N; i++)
        CHECK(bs_split_rules_walk(&R, 0, t[i], a[i], NULL, D) == (a[i] < 10.0f ? 2 : 0));
}

/* bs_noise_cut_bursts: a train whose low spikes follow its high ones within the window far more often than
 * chance keeps them; one whose high spikes come so fast that the windows cover most of the recording, or
 * with fewer than 3 such spikes, does not. */
static void test_bursts_or_chance(void)
{
    enum { NB = 400 };
    static int64_t tt[NB];
    static float aa[NB];
    const int64_t lo = 60, hi = 450, T = 60 * 30000;
    int n = 0;
    for (int i = 0; i < 50; i++) { /* a high spike a second, each with a smaller one 300 samples after it */
        tt[n] = 30000 * (int64_t)i + 1000, aa[n++] = 20;
        tt[n] = 30000 * (int64_t)i + 1300, aa[n++] = 9;
        if (i % 2) /* and a crossing of the background half a second later */
            tt[n] = 30000 * (int64_t)i + 16000, aa[n++] = 8.5f;
    }
    CHECK(bs_noise_cut_bursts(tt, aa, n, 10.0f, lo, hi, T, 4.0) == 1);
    CHECK(bs_noise_cut_bursts(tt, aa, n, 10.0f, lo, 0, T, 4.0) == 0);       /* no window */
    CHECK(bs_noise_cut_bursts(tt, aa, 6, 10.0f, lo, hi, T, 4.0) == 0);      /* 2 in windows: fewer than 3 */
    CHECK(bs_noise_cut_bursts(tt, aa, n, 10.0f, lo, hi, 30000, 4.0) == 0);  /* windows cover a third of it */
    n = 0;
    for (int i = 0; i < 300; i++) { /* a fast unit (a high spike every 600 samples) and crossings every 4th */
        tt[n] = 600 * (int64_t)i, aa[n++] = 20;
        if (i % 4 == 0)
            tt[n] = 600 * (int64_t)i + 37 + (int64_t)(i * 7919 % 560), aa[n++] = 8.5f;
    }
    CHECK(bs_noise_cut_bursts(tt, aa, n, 10.0f, lo, hi, 600 * 300, 4.0) == 0);
}

/* bs_time_overlap: the histogram intersection over 20 bins of the two trains' joint span. */
static void test_time_overlap(void)
{
    static int64_t a[200], b[200];
    for (int i = 0; i < 200; i++)
        a[i] = 1000 * i, b[i] = 1000 * i + 500; /* interleaved, all along */
    CHECK_NEAR(bs_time_overlap(a, 200, b, 200), 1.0, 0.02);
    CHECK_NEAR(bs_time_overlap(a, 100, a + 100, 100), 0.0, 1e-12); /* first half, second half */
    CHECK_NEAR(bs_time_overlap(a, 200, a + 100, 100), 0.5, 1e-12); /* all along, second half */
    CHECK(bs_time_overlap(a, 0, b, 200) == 1.0);
}

/* n amplitudes of a cell (normal: mean mu, sd) at or over th, then m crossings th + exponential(scale). */
static int pile_make(synth_rng *r, double mu, double sd, int n, int m, double scale, float th)
{
    int k = 0;
    while (k < n) {
        double a = mu + sd * synth_normal(r);
        if (a >= th)
            amp[k++] = (float)a;
    }
    for (int i = 0; i < m; i++)
        amp[k++] = (float)(th - scale * log(1.0 - synth_uniform(r)));
    return k;
}

static int pile_of(const bs_split_params *p, int n, float th, float *cut)
{
    int64_t c[BS_PILE_BINS] = {0};
    bs_pile_count(amp, n / 2, th, c); /* in two calls, as the stage adds blocks */
    bs_pile_count(amp + n / 2, n - n / 2, th, c);
    return bs_threshold_pile(p, c, th, cut);
}

static void test_pile(void)
{
    bs_split_params p = defaults();
    synth_rng r = {17};
    const float th = 5;
    float cut = 0;
    int n = pile_make(&r, 7.0, 0.8, 1600, 700, 0.4, th);
    CHECK(pile_of(&p, n, th, &cut) == 1);
    CHECK(cut > 5.4f && cut < 6.6f);
    int cell_under = 0, cross_under = 0;
    for (int i = 0; i < n; i++)
        (i < 1600 ? &cell_under : &cross_under)[0] += amp[i] < cut;
    CHECK(cross_under >= 560); /* at least 80 % of the crossings removed */
    CHECK(cell_under <= 240);  /* at most 15 % of the cell's spikes */
    CHECK(pile_of(&p, 1600, th, &cut) == 0); /* the cell alone: its density rises to its mode */
    n = pile_make(&r, 5.0, 1.0, 1600, 0, 0.4, th); /* a cell whose mode is at the threshold */
    CHECK(pile_of(&p, n, th, &cut) == 0);
    n = pile_make(&r, 7.0, 0.8, 1600, 150, 0.4, th); /* a shallow valley: fewer crossings than 1.5 x it */
    CHECK(pile_of(&p, n, th, &cut) == 0);
    int64_t c[BS_PILE_BINS] = {12, 6, 5, 6, 12, 14, 9}; /* ratios over 2, under three standard deviations */
    CHECK(bs_threshold_pile(&p, c, th, &cut) == 0);
    for (int j = 0; j < 7; j++)
        c[j] *= 10; /* the same shape, ten times the spikes */
    CHECK(bs_threshold_pile(&p, c, th, &cut) == 1);
    CHECK(cut == th * (1.0f + 2.0f / 16.0f)); /* the lowest sixteenth between the edge and the mode */
    p.pile_ratio = 0;
    CHECK(bs_threshold_pile(&p, c, th, &cut) == 0);
}

int main(void)
{
    test_time_overlap();
    test_pile();
    test_two_cells();
    test_one_cell();
    test_guards();
    test_ties();
    test_features();
    test_rules();
    test_burst();
    test_bursts_or_chance();
    TEST_MAIN_END();
}
