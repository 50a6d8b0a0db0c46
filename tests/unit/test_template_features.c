/*
 * test_template_features.c - the template features of Phy's template-feature
 * view (match.h) against a brute-force computation from the expanded
 * waveforms: each spike's projection on a neighbour template, computed
 * directly from the data on the spike template's pc channels, equals the one
 * computed from its pc features; the neighbours are the template itself, then
 * the most similar ones (similarity from the waveforms, on those channels),
 * then the smallest unused ids. Both with an orthonormal basis and with one
 * that is not (the similarity must go through the basis Gram matrix).
 */
#include "test.h"

#include "match/match.h"
#include "match_synth.h"

#define C 48
#define K 30
#define NSUP 10
#define P 4
#define NT 41
#define NB 15
#define NPC 5
#define NTF 20
#define NSPK 60
#define NTS 4000

/* Brute-force similarity of k and j on k's pc channels, from the waveforms. */
static double brute_sim(const bs_match_templates *t, const int32_t *pc_chan, int k, int j, float *wk, float *wj)
{
    bs_match_template_waveform(t, k, wk);
    bs_match_template_waveform(t, j, wj);
    double s = 0;
    for (int i = 0; i < NPC; i++) {
        int c = pc_chan[k * NPC + i], ik = -1, ij = -1;
        for (int a = 0; a < NSUP; a++) {
            if (t->support[k * NSUP + a] == c)
                ik = a;
            if (t->support[j * NSUP + a] == c)
                ij = a;
        }
        if (ik < 0 || ij < 0)
            continue;
        for (int v = 0; v < NT; v++)
            s += (double)wk[ik * NT + v] * wj[ij * NT + v];
    }
    return s;
}

static int overlaps_pc(const bs_match_templates *t, const int32_t *pc_chan, int k, int j)
{
    for (int i = 0; i < NPC; i++)
        for (int a = 0; a < NSUP; a++)
            if (t->support[j * NSUP + a] == pc_chan[k * NPC + i])
                return 1;
    return 0;
}

static void check_set(const bs_match_templates *t, const char *what)
{
    /* pc channels: every other support channel, from the second */
    int32_t pc_chan[K * NPC];
    for (int k = 0; k < K; k++)
        for (int i = 0; i < NPC; i++)
            pc_chan[k * NPC + i] = t->support[k * NSUP + 1 + 2 * i];
    int32_t ind[K * NTF];
    CHECK(bs_template_neighbors(t, pc_chan, NPC, NTF, ind) == BS_OK);
    float wk[NSUP * NT], wj[NSUP * NT];
    int n_fill = 0;
    for (int k = 0; k < K; k++) {
        const int32_t *row = ind + k * NTF;
        CHECK_MSG(row[0] == k, "%s: row %d starts with %d", what, k, row[0]);
        int chosen[K] = {0};
        for (int n = 0; n < NTF; n++) {
            CHECK(row[n] >= 0 && row[n] < K && !chosen[row[n]]);
            chosen[row[n]] = 1;
        }
        /* overlapping templates in decreasing similarity, then the smallest unused ids */
        double last = INFINITY;
        int n = 1;
        for (; n < NTF && overlaps_pc(t, pc_chan, k, row[n]); n++) {
            double sc = brute_sim(t, pc_chan, k, row[n], wk, wj);
            CHECK_MSG(sc <= last + 1e-5, "%s: row %d not in decreasing similarity at %d", what, k, n);
            last = sc;
        }
        int first_fill = n;
        for (; n < NTF; n++) {
            n_fill++;
            CHECK(!overlaps_pc(t, pc_chan, k, row[n]));
            for (int j = 0; j < row[n]; j++) /* every smaller id is in the row or overlaps */
                CHECK(chosen[j] || overlaps_pc(t, pc_chan, k, j));
        }
        /* nothing left out is more similar than the last one taken */
        for (int j = 0; j < K; j++)
            if (!chosen[j] && overlaps_pc(t, pc_chan, k, j)) {
                CHECK_MSG(first_fill == NTF, "%s: row %d fills with non-overlapping ids before %d", what, k, j);
                CHECK(brute_sim(t, pc_chan, k, j, wk, wj) <= last + 1e-5);
            }
    }
    CHECK_MSG(n_fill > 0, "%s: no row needed filling (the test would not cover it)", what);

    /* spikes: data with every template at random times plus noise */
    synth_rng r = {77};
    float *X = calloc((size_t)C * NTS, sizeof *X);
    for (int64_t i = 0; i < (int64_t)C * NTS; i++)
        X[i] = (float)(0.3 * synth_normal(&r));
    int32_t tm[NSPK];
    int64_t tt[NSPK];
    for (int s = 0; s < NSPK; s++) {
        tm[s] = (int32_t)(synth_uniform(&r) * K);
        tt[s] = 50 + (int64_t)(synth_uniform(&r) * (NTS - 100));
        synth_add_spike(t, X, NTS, tm[s], tt[s], (float)(5 + 10 * synth_uniform(&r)));
    }
    /* pc features as pc_features.npy: projections of the data on the basis rows */
    float pcf[NSPK * P * NPC], out[NSPK * NTF];
    for (int s = 0; s < NSPK; s++)
        for (int i = 0; i < NPC; i++)
            for (int q = 0; q < P; q++) {
                const float *xc = X + (size_t)pc_chan[tm[s] * NPC + i] * NTS + tt[s] - NB;
                double a = 0;
                for (int v = 0; v < NT; v++)
                    a += (double)t->basis[q * NT + v] * xc[v];
                pcf[(s * P + q) * NPC + i] = (float)a;
            }
    bs_template_features(t, pc_chan, NPC, ind, NTF, NSPK, tm, pcf, out);
    double worst = 0;
    for (int s = 0; s < NSPK; s++)
        for (int n = 0; n < NTF; n++) {
            int k = tm[s], j = ind[k * NTF + n];
            bs_match_template_waveform(t, j, wj);
            double want = 0;
            for (int i = 0; i < NPC; i++)
                for (int a = 0; a < NSUP; a++)
                    if (t->support[j * NSUP + a] == pc_chan[k * NPC + i]) {
                        const float *xc = X + (size_t)pc_chan[k * NPC + i] * NTS + tt[s] - NB;
                        for (int v = 0; v < NT; v++)
                            want += (double)wj[a * NT + v] * xc[v];
                    }
            double err = fabs(out[s * NTF + n] - want) / (1 + fabs(want));
            worst = err > worst ? err : worst;
        }
    CHECK_MSG(worst < 1e-4, "%s: largest relative error of a feature %g", what, worst);
    free(X);
}

int main(void)
{
    int centers[K];
    for (int k = 0; k < K; k++)
        centers[k] = (k * 7) % C;
    bs_match_templates t;
    CHECK(synth_templates(5, C, K, NSUP, P, NT, NB, centers, &t) == BS_OK);
    check_set(&t, "orthonormal basis");

    /* a basis that is not orthonormal: row 1 leans on row 0, row 2 is stretched */
    float basis[P * NT];
    memcpy(basis, t.basis, sizeof basis);
    for (int v = 0; v < NT; v++) {
        basis[1 * NT + v] += 0.6f * basis[v];
        basis[2 * NT + v] *= 1.7f;
    }
    bs_match_templates t2;
    float *U = malloc(sizeof(float) * K * NSUP * P);
    synth_rng r = {9};
    synth_weights(&r, K, P, NSUP, centers, t.support, U);
    CHECK(bs_match_templates_create("skewed", C, NT, NB, P, basis, K, NSUP, t.support, U, &t2) == BS_OK);
    check_set(&t2, "skewed basis");

    /* n_tf outside 1..K is a bug in the caller */
    int32_t ind[(K + 1) * 1];
    int32_t pc_chan[K * NPC] = {0};
    CHECK(bs_template_neighbors(&t, pc_chan, NPC, K + 1, ind) == BS_ERR_INTERNAL);
    CHECK(bs_template_neighbors(&t, pc_chan, NPC, 0, ind) == BS_ERR_INTERNAL);
    free(U);
    bs_match_templates_free(&t);
    bs_match_templates_free(&t2);
    TEST_MAIN_END();
}
