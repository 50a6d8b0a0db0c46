/*
 * test_sum_templates.c - templates that are the sum of two others
 * (src/match/sum_templates.c).
 *
 * On a 16-channel toy probe where every template spans all channels: four
 * random templates, a fifth made as 20·W_0 + 15·W_2 delayed by 4 samples
 * (projected on the basis, as a learned template is; in a second set at 3
 * times those amplitudes), and a near-copy of template 1. Checked:
 *   - the fit of the sum names templates 0 and 2 at lags 0 and 4, with weights
 *     whose amplitudes (weight × norm) are 20 and 15, and a residual equal to a
 *     brute-force least-squares fit of the expanded waveforms at those lags;
 *   - every fit's residual equals the expanded waveforms' at its lags, and on
 *     the planted sum it is the best over all pairs at delays within ±6;
 *   - selection drops the sum at the right amplitudes and keeps the one at 3
 *     times them, keeps the random templates, keeps near-copies of one
 *     template unless copies are asked for (then one of the two goes, when
 *     their amplitudes agree), and is off at max_resid 0;
 *   - the fits are the same bits with 1 and 2 threads, and parts closer than
 *     the minimum lag are not searched.
 */
#include "test.h"

#include <string.h>

#include "match/match.h"
#include "match/sum_templates.h"
#include "match_synth.h"
#include "mem/mem.h"

enum { C = 16, P = 10, NT = 41, NB = 15, K0 = 4 };

#include <stdio.h>

/* waveform of template j (unit norm, n_sup = C rows) delayed by d samples, times a, added to out (C x NT) */
static void add_shifted(const bs_match_templates *t, int j, int d, double a, double *out)
{
    float w[C * NT];
    bs_match_template_waveform(t, j, w);
    for (int c = 0; c < C; c++)
        for (int s = 0; s < NT; s++)
            if (s - d >= 0 && s - d < NT)
                out[c * NT + s] += a * w[c * NT + s - d];
}

/* least-squares residual share of template k by templates a, b at delays la, lb, from expanded waveforms
   (the sum's support is the template window widened by the delays) */
static double brute_resid(const bs_match_templates *t, int k, int a, int la, int b, int lb)
{
    enum { L = 3 * NT };
    static double wk[C * L], wa[C * L], wb[C * L];
    memset(wk, 0, sizeof wk);
    memset(wa, 0, sizeof wa);
    memset(wb, 0, sizeof wb);
    float w[C * NT];
    const int off = NT;
    bs_match_template_waveform(t, k, w);
    for (int c = 0; c < C; c++)
        for (int s = 0; s < NT; s++)
            wk[c * L + off + s] = w[c * NT + s];
    bs_match_template_waveform(t, a, w);
    for (int c = 0; c < C; c++)
        for (int s = 0; s < NT; s++)
            wa[c * L + off + s + la] = w[c * NT + s];
    bs_match_template_waveform(t, b, w);
    for (int c = 0; c < C; c++)
        for (int s = 0; s < NT; s++)
            wb[c * L + off + s + lb] = w[c * NT + s];
    double aa = 0, bb = 0, ab = 0, ka = 0, kb = 0, kk = 0;
    for (int i = 0; i < C * L; i++) {
        aa += wa[i] * wa[i];
        bb += wb[i] * wb[i];
        ab += wa[i] * wb[i];
        ka += wk[i] * wa[i];
        kb += wk[i] * wb[i];
        kk += wk[i] * wk[i];
    }
    double det = aa * bb - ab * ab;
    if (det < 1e-9)
        return 1;
    double x = (bb * ka - ab * kb) / det, y = (aa * kb - ab * ka) / det;
    if (x <= 0 || y <= 0)
        return 1;
    double ex = x * ka + y * kb;
    return sqrt(fmax(0.0, kk - ex) / kk);
}

/* K0 random templates (seed), then the sum of 0 and 2 (delay 4) at amplitudes (20, 15) times amp, then a
   near-copy of template 1 (its weights plus 10 % noise) */
static void make_set(uint64_t seed, double amp, bs_match_templates *t)
{
    enum { K = K0 + 2 };
    float basis[P * NT], U[K * C * P];
    int32_t sup[K * C];
    synth_basis(P, NT, NB, basis);
    for (int k = 0; k < K; k++)
        for (int c = 0; c < C; c++)
            sup[k * C + c] = c;
    int centers[K0] = {2, 8, 13, 5}; /* the parts of the sum, 0 and 2, far enough apart that neither alone fits it */
    synth_rng r = {seed};
    synth_weights(&r, K0, P, C, centers, sup, U);
    bs_match_templates t0 = {0};
    CHECK(bs_match_templates_create("random", C, NT, NB, P, basis, K0, C, sup, U, &t0) == BS_OK);
    /* the random templates at amplitudes 20 (template 0) and 15 (template 2): their norm before scaling */
    for (int k = 0; k < K0; k++) {
        double s = k == 0 ? 20.0 : k == 2 ? 15.0 : 25.0;
        for (int i = 0; i < C * P; i++)
            U[k * C * P + i] = (float)(t0.U[k * C * P + i] * s);
    }
    double sum[C * NT] = {0};
    add_shifted(&t0, 0, 0, 20.0 * amp, sum);
    add_shifted(&t0, 2, 4, 15.0 * amp, sum);
    for (int c = 0; c < C; c++)
        for (int p = 0; p < P; p++) {
            double acc = 0;
            for (int s = 0; s < NT; s++)
                acc += sum[c * NT + s] * basis[p * NT + s];
            U[(K0 * C + c) * P + p] = (float)acc;
        }
    for (int i = 0; i < C * P; i++)
        U[(K0 + 1) * C * P + i] = (float)(U[1 * C * P + i] * (1.0 + 0.1 * synth_normal(&r)));
    bs_match_templates_free(&t0);
    CHECK(bs_match_templates_create("with sums", C, NT, NB, P, basis, K, C, sup, U, t) == BS_OK);
}

static void test_fit_and_select(double amp)
{
    bs_match_templates t = {0};
    make_set(11, amp, &t);
    bs_pair_table pt = {0};
    CHECK(bs_pair_table_build(&t, BS_PAIR_ON_THE_FLY, &pt) == BS_OK);
    bs_sum_fit fit[K0 + 2], fit2[K0 + 2];
    CHECK(bs_sum_templates_fit(&t, &pt, 3, 1, fit) == BS_OK);
    CHECK(bs_sum_templates_fit(&t, &pt, 3, 2, fit2) == BS_OK);
    CHECK(memcmp(fit, fit2, sizeof fit) == 0);
    /* parts at least 5 samples apart: the planted pair (4 apart) is not among those searched */
    CHECK(bs_sum_templates_fit(&t, &pt, 5, 1, fit2) == BS_OK);
    CHECK(fit2[K0].r2 > 0.1 && (fit2[K0].a < 0 || abs(fit2[K0].la - fit2[K0].lb) >= 5));

    const bs_sum_fit *f = &fit[K0];
    printf("amplitudes x%g: sum fit r1 %.4f r2 %.5f, parts %d (lag %d, amplitude %.2f) and %d (lag %d, %.2f)\n", amp,
           f->r1, f->r2, f->a, f->la, f->wa * t.norm_in[K0], f->b, f->lb, f->wb * t.norm_in[K0]);
    int swap = f->a == 2; /* the part that fits best alone comes first */
    CHECK(f->a == (swap ? 2 : 0) && f->b == (swap ? 0 : 2));
    CHECK(f->la == (swap ? 4 : 0) && f->lb == (swap ? 0 : 4));
    CHECK_NEAR((swap ? f->wb : f->wa) * t.norm_in[K0], 20.0 * amp, 0.2 * amp);
    CHECK_NEAR((swap ? f->wa : f->wb) * t.norm_in[K0], 15.0 * amp, 0.2 * amp);
    CHECK(f->r2 < 0.1 && f->r1 > 0.5); /* what is left: the delayed part's projection on the basis */
    /* every pair found leaves the residual that the expanded waveforms give at its lags; on the planted sum it
       is the best over every pair of the other templates at delays within +-6 samples */
    for (int k = 0; k < t.K; k++)
        if (fit[k].a >= 0)
            CHECK_NEAR(fit[k].r2, brute_resid(&t, k, fit[k].a, fit[k].la, fit[k].b, fit[k].lb), 1e-3);
    double best = 1;
    for (int a = 0; a < K0; a++)
        for (int b = 0; b < K0; b++)
            for (int la = -6; la <= 6 && a != b; la++)
                for (int lb = -6; lb <= 6; lb++) {
                    double r = brute_resid(&t, K0, a, la, b, lb);
                    best = r < best ? r : best;
                }
    CHECK_NEAR(fit[K0].r2, best, 1e-4);
    CHECK(fit[K0 + 1].r1 < 0.5); /* the near-copy of template 1 */

    /* the sum is dropped at its parts' amplitudes, kept at 3 times them; random templates and the near-copy stay */
    bs_sum_template_params p;
    bs_sum_template_params_default(&p);
    p.max_copy_resid = 0;
    uint8_t drop[K0 + 2];
    int want = amp < p.max_amp_ratio;
    CHECK(bs_sum_templates_select(&t, fit, &p, drop) == want);
    for (int k = 0; k < t.K; k++)
        CHECK(drop[k] == (k == K0 && want));
    /* copies: the near-copy and template 1 fit each other; one of them goes, as a copy */
    p.max_copy_resid = fit[K0 + 1].r1 + 0.01;
    CHECK(bs_sum_templates_select(&t, fit, &p, drop) == 1 + want);
    CHECK(drop[1] + drop[K0 + 1] == BS_SUM_COPY && (drop[1] == 0 || drop[K0 + 1] == 0));
    CHECK(drop[K0] == (want ? BS_SUM_SUM : BS_SUM_KEEP));
    p.max_copy_amp_ratio = 1.0001; /* the copy's amplitude is not exactly template 1's */
    bs_sum_templates_select(&t, fit, &p, drop);
    CHECK(drop[1] == 0 && drop[K0 + 1] == 0);
    p.max_resid = p.max_copy_resid = 0;
    CHECK(bs_sum_templates_select(&t, fit, &p, drop) == 0);
    bs_pair_table_free(&pt);
    bs_match_templates_free(&t);
}

int main(void)
{
    test_fit_and_select(1.0);
    test_fit_and_select(3.0);
    TEST_MAIN_END();
}
