/*
 * test_hungarian.c - the assignment solver against brute force: every
 * injective row -> column map of many small random matrices (square and
 * rectangular, both orientations, with ties and zeros), integer-valued
 * matrices (exact totals), a known matrix, a larger case against a greedy
 * lower bound, and refused non-finite input.
 */
#include "test.h"

#include <stdint.h>

#include "mem/mem.h"
#include "sim/hungarian.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* Best total over all injective maps from the smaller side to the larger. */
static double brute(const double *s, int n, int m, int row, unsigned used, int transposed)
{
    int rows = transposed ? m : n, cols = transposed ? n : m;
    if (row == rows)
        return 0.0;
    double best = -1e300;
    for (int c = 0; c < cols; c++) {
        if (used & (1u << c))
            continue;
        double v = transposed ? s[c * m + row] : s[row * m + c];
        double t = v + brute(s, n, m, row + 1, used | (1u << c), transposed);
        if (t > best)
            best = t;
    }
    return best;
}

static int valid_assignment(const int32_t *r2c, int n, int m)
{
    int assigned = 0;
    for (int i = 0; i < n; i++) {
        if (r2c[i] < -1 || r2c[i] >= m)
            return 0;
        if (r2c[i] < 0)
            continue;
        assigned++;
        for (int k = 0; k < i; k++)
            if (r2c[k] == r2c[i])
                return 0;
    }
    return assigned == (n < m ? n : m);
}

int main(void)
{
    /* a known 3x3: best is 0->2, 1->0, 2->1 with total 9+8+7 = 24 */
    double known[9] = {1, 2, 9, 8, 1, 1, 3, 7, 2};
    int32_t r2c[16];
    double total = 0;
    CHECK(bs_hungarian_max(known, 3, 3, r2c, &total) == BS_OK);
    CHECK(r2c[0] == 2 && r2c[1] == 0 && r2c[2] == 1);
    CHECK_NEAR(total, 24.0, 1e-12);

    /* 2 x 4: rows take columns 3 and 1 (5 + 6 = 11) */
    double wide[8] = {0, 1, 2, 5, 0, 6, 0, 4};
    CHECK(bs_hungarian_max(wide, 2, 4, r2c, &total) == BS_OK);
    CHECK(r2c[0] == 3 && r2c[1] == 1);
    CHECK_NEAR(total, 11.0, 1e-12);
    /* its transpose 4 x 2: rows 3 and 1 get columns 0 and 1, others -1 */
    double tall[8] = {0, 0, 1, 6, 2, 0, 5, 4};
    CHECK(bs_hungarian_max(tall, 4, 2, r2c, &total) == BS_OK);
    CHECK(r2c[0] == -1 && r2c[1] == 1 && r2c[2] == -1 && r2c[3] == 0);
    CHECK_NEAR(total, 11.0, 1e-12);

    /* empty shapes */
    CHECK(bs_hungarian_max(known, 0, 3, r2c, &total) == BS_OK && total == 0.0);
    CHECK(bs_hungarian_max(known, 3, 0, r2c, &total) == BS_OK && r2c[0] == -1 && r2c[2] == -1);

    /* random matrices against brute force, all shapes up to 6 x 7 */
    int mismatches = 0, invalid = 0, trials = 0;
    for (int n = 1; n <= 6; n++)
        for (int m = 1; m <= 7; m++)
            for (int rep = 0; rep < 25; rep++) {
                double s[64];
                int mode = rep % 3;
                for (int k = 0; k < n * m; k++) {
                    double u = urand();
                    if (mode == 0)
                        s[k] = u;                           /* continuous */
                    else if (mode == 1)
                        s[k] = (double)(int)(u * 4);        /* integers with many ties */
                    else
                        s[k] = u < 0.6 ? 0.0 : u;           /* sparse, like thresholded agreement */
                }
                int transposed = n > m;
                double expect = brute(s, n, m, 0, 0u, transposed);
                CHECK(bs_hungarian_max(s, n, m, r2c, &total) == BS_OK);
                double recomputed = 0;
                for (int i = 0; i < n; i++)
                    if (r2c[i] >= 0)
                        recomputed += s[i * m + r2c[i]];
                if (!valid_assignment(r2c, n, m))
                    invalid++;
                if (fabs(total - expect) > 1e-9 || fabs(recomputed - total) > 1e-12) {
                    mismatches++;
                    fprintf(stderr, "n=%d m=%d rep=%d: got %.12g, brute force %.12g\n", n, m, rep, total, expect);
                }
                trials++;
            }
    CHECK_MSG(mismatches == 0, "%d of %d random matrices not optimal", mismatches, trials);
    CHECK_MSG(invalid == 0, "%d invalid assignments", invalid);
    CHECK(trials == 6 * 7 * 25);

    /* negative scores are maximized too (the solver must still assign every row) */
    double neg[4] = {-1, -5, -2, -9};
    CHECK(bs_hungarian_max(neg, 2, 2, r2c, &total) == BS_OK);
    CHECK(r2c[0] == 1 && r2c[1] == 0);
    CHECK_NEAR(total, -7.0, 1e-12);

    /* a 120 x 150 matrix: optimal total >= greedy total, and a permuted
     * diagonal of ones in a sea of small values is recovered exactly */
    enum { N = 120, M = 150 };
    double *big = bs_mem_alloc("test/hungarian", sizeof(double) * N * M);
    int32_t perm[M];
    for (int j = 0; j < M; j++)
        perm[j] = j;
    for (int j = M - 1; j > 0; j--) {
        int k = (int)(urand() * (j + 1));
        int32_t t = perm[j];
        perm[j] = perm[k];
        perm[k] = t;
    }
    for (int i = 0; i < N; i++)
        for (int j = 0; j < M; j++)
            big[i * M + j] = 0.1 * urand();
    for (int i = 0; i < N; i++)
        big[i * M + perm[i]] = 1.0;
    int32_t *bigr = bs_mem_alloc("test/hungarian", sizeof(int32_t) * N);
    CHECK(bs_hungarian_max(big, N, M, bigr, &total) == BS_OK);
    int recovered = 0;
    for (int i = 0; i < N; i++)
        recovered += bigr[i] == perm[i];
    CHECK(recovered == N);
    CHECK(valid_assignment(bigr, N, M));
    bs_mem_free(big);
    bs_mem_free(bigr);

    /* non-finite scores are refused */
    double bad[4] = {1, NAN, 0, 1};
    CHECK(bs_hungarian_max(bad, 2, 2, r2c, &total) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "not finite") != NULL);

    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
