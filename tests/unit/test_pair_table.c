/*
 * test_pair_table.c - the sparse template-pair table against a dense table
 * computed naively from the expanded waveforms, entry by entry; exact zeros
 * for disjoint supports; exact symmetry; on-the-fly and half-stored rows equal
 * to the full table bit for bit;
 * the neighbour count against a brute-force count; memory equal to the size
 * function; the dense vs sparse sizes at K = 500 and 2000 on a 384-channel
 * probe; and rejection of malformed template sets.
 */
#include "test.h"

#include "match/match.h"
#include "match_synth.h"
#include "mem/mem.h"

/* supports are ascending: merge */
static int overlaps(const int32_t *a, const int32_t *b, int n)
{
    int i = 0, j = 0;
    while (i < n && j < n) {
        if (a[i] == b[j])
            return 1;
        if (a[i] < b[j])
            i++;
        else
            j++;
    }
    return 0;
}

static int64_t brute_count(int K, int n_sup, const int32_t *sup)
{
    int64_t n = 0;
    for (int j = 0; j < K; j++)
        for (int k = 0; k < K; k++)
            n += overlaps(sup + (size_t)j * n_sup, sup + (size_t)k * n_sup, n_sup);
    return n;
}

/* Supports of K templates spread evenly along a C-channel 2-column probe. */
static int32_t *spread_supports(int C, int K, int n_sup)
{
    int32_t *sup = malloc(sizeof(int32_t) * (size_t)K * n_sup);
    for (int k = 0; k < K; k++) {
        int cc = (int)(((int64_t)k * C + C / 2) / K);
        /* the n_sup channels nearest cc on a 2-column probe are whole rows
         * around cc's row, clipped at the probe ends */
        int rows = n_sup / 2, nrow = C / 2;
        int r0 = cc / 2 - rows / 2;
        if (r0 < 0)
            r0 = 0;
        if (r0 + rows > nrow)
            r0 = nrow - rows;
        for (int i = 0; i < n_sup; i++)
            sup[(size_t)k * n_sup + i] = 2 * r0 + i;
    }
    return sup;
}

int main(void)
{
    enum { C = 64, K = 12, NS = 8, P = 6, NT = 61, NB = 20, NL = 2 * NT - 1 };
    int centers[K] = {3, 6, 9, 10, 20, 22, 33, 40, 41, 50, 58, 63};
    bs_match_templates t;
    bs_mem_reset_peaks();
    CHECK(synth_templates(7, C, K, NS, P, NT, NB, centers, &t) == BS_OK);
    CHECK(bs_mem_tag_peak("match/templates", BS_DEV_HOST) == bs_match_templates_bytes(NT, P, K, NS));
    /* expanded waveforms, dense C x NT per template */
    float *full = calloc((size_t)K * C * NT, sizeof(float));
    float w[NS * NT];
    for (int k = 0; k < K; k++) {
        bs_match_template_waveform(&t, k, w);
        double n2 = 0;
        for (int i = 0; i < NS; i++)
            for (int s = 0; s < NT; s++) {
                full[((size_t)k * C + t.support[k * NS + i]) * NT + s] = w[i * NT + s];
                n2 += (double)w[i * NT + s] * w[i * NT + s];
            }
        CHECK_NEAR(n2, 1.0, 1e-5); /* unit-norm waveforms */
    }

    bs_pair_table pt;
    CHECK(bs_pair_table_build(&t, BS_PAIR_FULL, &pt) == BS_OK);
    CHECK(pt.nnz == brute_count(K, NS, t.support));
    CHECK(bs_mem_tag_peak("match/pair_table", BS_DEV_HOST) == bs_pair_table_bytes(K, pt.nnz, NT, BS_PAIR_FULL));

    /* every (j, k) pair: stored iff supports overlap; values vs naive dense */
    int n_zero_pairs = 0, n_stored = 0, n_bad = 0, n_missing = 0;
    double max_err = 0;
    for (int k = 0; k < K; k++) {
        for (int j = 0; j < K; j++) {
            const float *row = NULL;
            for (int64_t m = pt.row_start[k]; m < pt.row_start[k + 1]; m++)
                if (pt.nbr[m] == j)
                    row = pt.val + (size_t)m * NL;
            int ov = overlaps(t.support + j * NS, t.support + k * NS, NS);
            if (ov != (row != NULL))
                n_missing++;
            for (int d = -(NT - 1); d <= NT - 1; d++) {
                double dense = 0;
                for (int c = 0; c < C; c++)
                    for (int s = 0; s < NT; s++)
                        if (s + d >= 0 && s + d < NT)
                            dense += (double)full[((size_t)j * C + c) * NT + s] *
                                     full[((size_t)k * C + c) * NT + s + d];
                if (!row) {
                    if (dense != 0.0)
                        n_bad++; /* disjoint supports: exactly zero */
                } else {
                    double e = fabs(dense - row[d + NT - 1]);
                    if (e > max_err)
                        max_err = e;
                }
            }
            if (row)
                n_stored++;
            else
                n_zero_pairs++;
        }
    }
    CHECK(n_missing == 0);
    CHECK(n_bad == 0);
    CHECK_MSG(max_err < 2e-6, "max |sparse - dense| = %g", max_err);
    CHECK(n_stored == pt.nnz);
    CHECK(n_zero_pairs > 40 && n_stored > 2 * K); /* the set has both kinds */
    printf("K=%d: %d stored pairs, %d exactly-zero pairs, max |sparse - dense| = %.3g\n", K, n_stored,
           n_zero_pairs, max_err);

    /* self pairs: UtU[k,k,0] = |W_k|^2 = 1; symmetry UtU[j,k,d] = UtU[k,j,-d] */
    float r1[NL], r2[NL];
    for (int k = 0; k < K; k++) {
        bs_pair_row(&t, k, k, r1);
        CHECK_NEAR(r1[NT - 1], 1.0, 1e-5);
    }
    double sym_err = 0;
    for (int k = 0; k < K; k++)
        for (int64_t m = pt.row_start[k]; m < pt.row_start[k + 1]; m++) {
            int j = pt.nbr[m];
            bs_pair_row(&t, k, j, r2);
            for (int d = 0; d < NL; d++) {
                double e = fabs(pt.val[(size_t)m * NL + d] - r2[NL - 1 - d]);
                sym_err = e > sym_err ? e : sym_err; /* exact by construction */
            }
            /* on-the-fly row = stored row, bit for bit */
            bs_pair_row(&t, j, k, r1);
            CHECK(memcmp(r1, pt.val + (size_t)m * NL, sizeof r1) == 0);
            if (m > pt.row_start[k])
                CHECK(pt.nbr[m] > pt.nbr[m - 1]);
        }
    CHECK_MSG(sym_err == 0.0, "symmetry error %g", sym_err);

    /* a disjoint pair computed on the fly is all zeros */
    CHECK(!overlaps(t.support + 0 * NS, t.support + 11 * NS, NS));
    bs_pair_row(&t, 0, 11, r1);
    int allz = 1;
    for (int d = 0; d < NL; d++)
        allz &= r1[d] == 0.0f;
    CHECK(allz);

    /* the other storage modes: same lists, same values bit for bit, bytes
     * equal to the size function */
    const bs_pair_mode modes[2] = {BS_PAIR_ON_THE_FLY, BS_PAIR_HALF};
    for (int mi = 0; mi < 2; mi++) {
        bs_pair_table p2;
        size_t before = bs_mem_tag_current("match/pair_table", BS_DEV_HOST);
        CHECK(bs_pair_table_build(&t, modes[mi], &p2) == BS_OK);
        CHECK(bs_mem_tag_current("match/pair_table", BS_DEV_HOST) - before ==
              bs_pair_table_bytes(K, p2.nnz, NT, modes[mi]));
        CHECK(p2.nnz == pt.nnz && p2.mode == modes[mi]);
        CHECK(memcmp(p2.row_start, pt.row_start, sizeof(int64_t) * (K + 1)) == 0);
        CHECK(memcmp(p2.nbr, pt.nbr, sizeof(int32_t) * (size_t)pt.nnz) == 0);
        CHECK(modes[mi] == BS_PAIR_ON_THE_FLY ? p2.val == NULL && p2.n_rows == 0
                                              : p2.n_rows == (pt.nnz + K) / 2);
        int same = 1;
        for (int k = 0; k < K; k++)
            for (int64_t m = pt.row_start[k]; m < pt.row_start[k + 1]; m++) {
                const float *v = bs_pair_get(&t, &p2, k, m, r1);
                same &= memcmp(v, pt.val + (size_t)m * NL, sizeof r1) == 0;
            }
        CHECK(same);
        bs_pair_table_free(&p2);
    }

    /* an on-the-fly table keeping the busiest templates' rows (BS_PAIR_SOME): weights 0..K-1 shuffled; a budget
     * of the index and the rows of the heaviest third keeps exactly those, with the index and the rows tracked
     * exactly; every row read is the full table's bits, kept (read in place) or not (computed); a budget of
     * the index alone keeps none */
    {
        int64_t w[K];
        for (int k = 0; k < K; k++)
            w[k] = (int64_t)((k * 7 + 3) % K);
        size_t rb = (size_t)NL * sizeof(float), budget = (size_t)K * 8;
        for (int k = 0; k < K; k++)
            if (w[k] >= K - K / 3)
                budget += (size_t)(pt.row_start[k + 1] - pt.row_start[k]) * rb;
        bs_pair_table p3;
        CHECK(bs_pair_table_build(&t, BS_PAIR_ON_THE_FLY, &p3) == BS_OK);
        size_t before = bs_mem_tag_current("match/pair_table", BS_DEV_HOST);
        CHECK(bs_pair_table_keep(&t, &p3, w, budget) == BS_OK);
        CHECK(p3.mode == BS_PAIR_SOME && p3.n_kept == K / 3);
        size_t held = (size_t)p3.n_rows * rb + (size_t)K * 8;
        CHECK(bs_mem_tag_current("match/pair_table", BS_DEV_HOST) - before == held && held <= budget);
        int64_t rows = 0, ok_order = 1;
        for (int k = 0; k < K; k++) {
            rows += p3.kval[k] >= 0 ? pt.row_start[k + 1] - pt.row_start[k] : 0;
            ok_order &= w[k] >= K - K / 3 ? p3.kval[k] >= 0 : 1; /* the heaviest third: all kept */
        }
        CHECK(rows == p3.n_rows && ok_order);
        int same = 1;
        for (int k = 0; k < K; k++)
            for (int64_t m = pt.row_start[k]; m < pt.row_start[k + 1]; m++) {
                const float *v = bs_pair_get(&t, &p3, k, m, r1);
                same &= memcmp(v, pt.val + (size_t)m * NL, sizeof r1) == 0;
                same &= (p3.kval[k] >= 0) == (v != r1); /* kept rows are read in place, the others computed */
            }
        CHECK(same);
        bs_pair_table_free(&p3);
        CHECK(bs_pair_table_build(&t, BS_PAIR_ON_THE_FLY, &p3) == BS_OK);
        CHECK(bs_pair_table_keep(&t, &p3, w, (size_t)K * 8) == BS_OK && p3.mode == BS_PAIR_ON_THE_FLY);
        CHECK(bs_pair_table_keep(&t, &pt, w, budget) == BS_ERR_INTERNAL); /* only an on-the-fly table */
        bs_pair_table_free(&p3);
    }
    bs_pair_table_free(&pt);
    free(full);

    /* neighbour count vs brute force on a 384-channel probe, K = 500 */
    int32_t *sup = spread_supports(384, 500, 32);
    CHECK(bs_pair_count(500, 32, sup, 384) == brute_count(500, 32, sup));
    free(sup);

    /* dense vs sparse sizes, 384 channels, 32-channel supports, nt = 61
     * (K = 17000 takes 0.8 G neighbour visits: measured outside the test) */
    const int Ks[2] = {500, 2000};
    for (int i = 0; i < 2; i++) {
        sup = spread_supports(384, Ks[i], 32);
        int64_t nnz = bs_pair_count(Ks[i], 32, sup, 384);
        double dense = bs_pair_dense_bytes(Ks[i], NT);
        size_t sparse = bs_pair_table_bytes(Ks[i], nnz, NT, BS_PAIR_FULL);
        size_t half = bs_pair_table_bytes(Ks[i], nnz, NT, BS_PAIR_HALF);
        printf("K=%5d: pairs %lld (%.1f per template), dense %.3g bytes, sparse %.3g bytes (%.1fx smaller), "
               "half %.3g bytes\n",
               Ks[i], (long long)nnz, (double)nnz / Ks[i], dense, (double)sparse, dense / (double)sparse, (double)half);
        CHECK(half == 8 * ((size_t)Ks[i] + 1) + (size_t)nnz * 12 + (size_t)((nnz + Ks[i]) / 2) * 4 * 121);
        CHECK(dense == 4.0 * Ks[i] * (double)Ks[i] * 121);
        CHECK((double)sparse * 4 < dense);
        CHECK(sparse == 8 * ((size_t)Ks[i] + 1) + (size_t)nnz * (4 + 4 * 121));
        free(sup);
    }

    /* malformed template sets */
    float basis[P * NT], U1[NS * P];
    int32_t s1[NS];
    synth_basis(P, NT, NB, basis);
    for (int i = 0; i < NS * P; i++)
        U1[i] = 1.0f;
    for (int i = 0; i < NS; i++)
        s1[i] = i;
    bs_match_templates bad;
    CHECK(bs_match_templates_create("x.npy", C, NT, NB, P, basis, 1, NS, s1, U1, &bad) == BS_OK);
    bs_match_templates_free(&bad);
    s1[3] = 2;
    CHECK(bs_match_templates_create("x.npy", C, NT, NB, P, basis, 1, NS, s1, U1, &bad) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "x.npy") && strstr(bs_last_error(), "'support'") &&
          strstr(bs_last_error(), "ascending"));
    s1[3] = 3;
    s1[NS - 1] = C;
    CHECK(bs_match_templates_create("x.npy", C, NT, NB, P, basis, 1, NS, s1, U1, &bad) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "channels 0..63"));
    s1[NS - 1] = NS - 1;
    for (int i = 0; i < NS * P; i++)
        U1[i] = 0.0f;
    CHECK(bs_match_templates_create("x.npy", C, NT, NB, P, basis, 1, NS, s1, U1, &bad) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "'U'") && strstr(bs_last_error(), "non-zero"));
    CHECK(bs_match_templates_create("x.npy", C, NT, NT, P, basis, 1, NS, s1, U1, &bad) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "'nt_before'"));
    CHECK(bs_match_templates_create("x.npy", C, NT, NB, P, basis, 1, C + 1, s1, U1, &bad) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "'n_sup'"));

    bs_match_templates_free(&t);
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
