/*
 * test_truncated.c - templates whose matching threshold truncates their
 * amplitudes (src/match/truncated.c).
 *
 * Amplitudes drawn from normal distributions (a fixed generator), kept over
 * the threshold 8 as matching would, binned with bs_trunc_hist_add.
 * Checked:
 *   - a unit of mean 8 and spread 2 seen over 8 only (20,000 spikes) gets
 *     about mu - sigma = 6 as its threshold: the fit recovers the
 *     distribution the threshold cut;
 *   - mean 8.3 and spread 1.5 with floor 7: the floor;
 *   - a unit well over the threshold (mean 20), one too small a sample, one
 *     whose amplitude a_k is large (a larger unit's template taking small
 *     spikes), one whose median is not under 0.85 a_k, and a template with a
 *     threshold of its own (the low tier's) keep their thresholds;
 *   - amplitudes under the threshold and over 3 thresholds land where the
 *     histogram says (not counted; the last bin);
 *   - a fitted threshold less than min_drop under the threshold is left
 *     at the threshold (mean 8.3, spread 1.5: about 6.8);
 *   - the rule is off with floor 0.
 * The second pass's pieces, on synthetic templates (match_synth.h: a
 * 64-channel 2-column probe, 8-channel supports):
 *   - bs_trunc_partners: a lowered template and a neighbour 40 um away are
 *     re-peeled with overlap 0, the neighbour only while its largest |UtU|
 *     with the lowered one reaches the overlap asked (just under it: in, just
 *     over: out), and templates 400 um away never;
 *   - bs_match_templates_subset: the same supports, weights (bits) and
 *     amplitudes as the templates taken;
 *   - bs_peel_subtract: a spike placed across either edge of a window, or
 *     inside it, is removed from what the window holds (to float rounding),
 *     one wholly outside changes nothing;
 *   - bs_trunc_drop_residuals: a lowered template's spike under the
 *     threshold goes when a larger spike of another template lies within
 *     the window (either side, at the window's edge too), and stays when the
 *     larger spike is its own template's, farther, or smaller, when it is
 *     over the threshold, or when its template is not lowered.
 */
#include "test.h"

#include <stdint.h>

#include "match/truncated.h"
#include "match_synth.h"

static uint64_t rng = 88172645463325252ull;
static double unif(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}
static double gauss(void) { return sqrt(-2.0 * log(unif())) * cos(2.0 * M_PI * unif()); }

enum { K = 7 };

/* n spikes of template k over threshold th from N(mu, sigma^2) */
static void draw(int32_t *hist, float th, int k, double mu, double sigma, int n)
{
    float a[256];
    int32_t t[256];
    int m = 0;
    while (n > 0) {
        double v = mu + sigma * gauss();
        if (v < th)
            continue;
        a[m] = (float)v;
        t[m++] = k;
        n--;
        if (m == 256 || n == 0) {
            bs_trunc_hist_add(hist, th, t, a, m);
            m = 0;
        }
    }
}

int main(void)
{
    const float th = 8.0f;
    int32_t *hist = calloc((size_t)K * (BS_TRUNC_BINS + 1), sizeof *hist);
    CHECK(bs_trunc_hist_bytes(K) == (size_t)K * (BS_TRUNC_BINS + 1) * sizeof(int32_t));
    draw(hist, th, 0, 8.0, 2.0, 20000); /* truncated: mu - sigma = 6 */
    draw(hist, th, 1, 20.0, 2.0, 2000); /* well over */
    draw(hist, th, 2, 8.0, 2.0, 20);    /* too few */
    draw(hist, th, 3, 8.0, 2.0, 2000);  /* a_k large */
    draw(hist, th, 4, 8.0, 2.0, 2000);  /* a_k about its median */
    draw(hist, th, 5, 8.0, 2.0, 2000);  /* a threshold of its own */
    draw(hist, th, 6, 8.3, 1.5, 5000);  /* truncated, under the floor 7 */
    const float norm_in[K] = {12.0f, 22.0f, 12.0f, 30.0f, 10.0f, 12.0f, 12.0f};
    float own[K] = {th, th, th, th, th, 6.5f, th}, thk[K];

    bs_trunc_params p;
    bs_trunc_params_default(&p);
    CHECK(p.floor == 6.0f && p.min_spikes == 30 && p.min_drop == 1.5);
    p.floor = 5.0f;
    p.min_drop = 0;
    int n = bs_trunc_thresholds(&p, hist, K, th, norm_in, own, thk);
    CHECK_MSG(fabs(thk[0] - 6.0) < 0.15, "mu - sigma %g, 6 expected", thk[0]);
    CHECK(thk[1] == th && thk[2] == th && thk[3] == th && thk[4] == th);
    CHECK(thk[5] == 6.5f);
    CHECK(thk[6] < th && thk[6] >= 5.0f);
    CHECK(n == 2);
    p.floor = 7.0f;
    n = bs_trunc_thresholds(&p, hist, K, th, norm_in, NULL, thk);
    CHECK(thk[0] == 7.0f && thk[6] == 7.0f && thk[5] < th && n == 3);
    /* a fitted threshold less than min_drop under the threshold is not worth a second pass */
    p.floor = 5.0f;
    p.min_drop = 1.5;
    n = bs_trunc_thresholds(&p, hist, K, th, norm_in, own, thk);
    CHECK_MSG(thk[0] < 6.5f && thk[6] == th && n == 1, "%g %g %d", thk[0], thk[6], n);
    p.floor = 0.0f;
    n = bs_trunc_thresholds(&p, hist, K, th, norm_in, own, thk);
    CHECK(n == 0 && thk[0] == th && thk[5] == 6.5f);

    /* bins: under the threshold not counted, 3 thresholds and over in the last bin */
    int32_t h1[BS_TRUNC_BINS + 1] = {0};
    const int32_t t0[4] = {0, 0, 0, 0};
    const float a0[4] = {7.9f, 8.0f, 24.0f, 100.0f};
    bs_trunc_hist_add(h1, th, t0, a0, 4);
    CHECK(h1[0] == 1 && h1[BS_TRUNC_BINS] == 2);
    int64_t tot = 0;
    for (int b = 0; b <= BS_TRUNC_BINS; b++)
        tot += h1[b];
    CHECK(tot == 3);
    free(hist);

    /* the second pass's templates */
    enum { C = 64, NS = 8, P = 3, NT = 31, NB = 10, KS = 4 };
    const int centers[KS] = {0, 4, 40, 44};
    bs_match_templates t, sub;
    bs_pair_table pt;
    CHECK(synth_templates(515, C, KS, NS, P, NT, NB, centers, &t) == BS_OK);
    CHECK(bs_pair_table_build(&t, BS_PAIR_FULL, &pt) == BS_OK);
    uint8_t lowered[KS] = {1, 0, 0, 0}, in[KS];
    CHECK(bs_trunc_partners(&t, &pt, lowered, 0.0, in) == 2 && in[0] && in[1] && !in[2] && !in[3]);
    float row[2 * NT - 1], mx = 0.0f;
    bs_pair_row(&t, 1, 0, row);
    for (int d = 0; d < 2 * NT - 1; d++)
        mx = fabsf(row[d]) > mx ? fabsf(row[d]) : mx;
    CHECK_MSG(mx > 0.05f && mx < 0.99f, "%g", mx);
    CHECK(bs_trunc_partners(&t, &pt, lowered, 0.999 * mx, in) == 2 && in[1]);
    CHECK(bs_trunc_partners(&t, &pt, lowered, 1.001 * mx, in) == 1 && in[0] && !in[1]);
    const int32_t take[2] = {1, 3};
    CHECK(bs_match_templates_subset(&t, take, 2, &sub) == BS_OK);
    CHECK(sub.K == 2 && sub.n_sup == NS && sub.n_pc == P && sub.nt == NT);
    for (int i = 0; i < 2; i++) {
        CHECK(!memcmp(sub.support + i * NS, t.support + take[i] * NS, sizeof(int32_t) * NS));
        CHECK(!memcmp(sub.U + i * NS * P, t.U + take[i] * NS * P, sizeof(float) * NS * P));
        CHECK(sub.norm_in[i] == t.norm_in[take[i]]);
    }
    bs_match_templates_free(&sub);

    /* a spike across a window's edges, inside it, outside it */
    enum { NTW = 200 };
    float *X = calloc((size_t)C * NTW, sizeof(float));
    const int64_t at[5] = {3, NTW - 4, 100, -NT - 5, NTW + NT};
    for (int i = 0; i < 5; i++) {
        synth_add_spike(&t, X, NTW, 1, at[i], 12.5f);
        bs_peel_subtract(&t, X, NTW, NTW, 1, at[i], 12.5f);
        float worst = 0.0f;
        for (int j = 0; j < C * NTW; j++)
            worst = fabsf(X[j]) > worst ? fabsf(X[j]) : worst;
        CHECK_MSG(worst < 1e-5f, "spike at %lld: %g left", (long long)at[i], worst);
    }
    free(X);

    /* residuals beside larger spikes (template 1 lowered, threshold 8, window 6 samples) */
    const uint8_t low2[3] = {0, 1, 0};
    bs_spike sp[9] = {
        {100, 0, 20.0f}, {104, 1, 7.0f},  /* 4 after a larger spike of template 0: goes */
        {200, 1, 7.0f},  {206, 2, 9.0f},  /* 6 before a larger one: goes */
        {300, 0, 20.0f}, {307, 1, 7.0f},  /* 7 after: stays */
        {400, 1, 7.5f},  {402, 1, 9.0f},  /* beside its own template's larger spike: stays; the 9 (over 8) stays */
        {500, 2, 6.0f},                   /* template 2 not lowered: stays */
    };
    int32_t scratch[9];
    int64_t left = bs_trunc_drop_residuals(sp, 9, low2, 8.0f, 6, scratch);
    CHECK_MSG(left == 7, "%lld", (long long)left);
    const int64_t want_t[7] = {100, 206, 300, 307, 400, 402, 500};
    for (int i = 0; i < 7 && i < left; i++)
        CHECK_MSG(sp[i].time == want_t[i], "%d: %lld", i, (long long)sp[i].time);
    bs_spike sp2[2] = {{10, 1, 7.0f}, {12, 0, 6.5f}}; /* the other spike is smaller: stays */
    CHECK(bs_trunc_drop_residuals(sp2, 2, low2, 8.0f, 6, scratch) == 2);
    bs_pair_table_free(&pt);
    bs_match_templates_free(&t);
    TEST_MAIN_END();
}
