/*
 * test_car.c - common median reference and mean removal: hand-computed
 * cases (odd and even channel counts, numpy's even median), exact agreement
 * with a sort-based median on random windows with many ties, mean removal,
 * scratch accounting and thread-count independence.
 */
#include "test.h"

#include <omp.h>
#include <stdint.h>

#include "mem/mem.h"
#include "preprocess/preprocess.h"

static uint64_t rng_state = 12345;
static double urand(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}

static int cmpf(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* numpy.median of one column by sorting */
static float ref_median(const float *x, int C, int64_t T, int64_t t, float *tmp)
{
    for (int c = 0; c < C; c++)
        tmp[c] = x[c * T + t];
    qsort(tmp, (size_t)C, sizeof *tmp, cmpf);
    return (C & 1) ? tmp[C / 2] : (tmp[C / 2 - 1] + tmp[C / 2]) / 2.0f;
}

static void test_hand(void)
{
    float a[3 * 2] = {1, 10, 5, -2, 3, 4}; /* medians 3 and 4 */
    CHECK(bs_car(a, 3, 2, 0, 1, NULL, 0) == BS_OK);
    const float ea[6] = {-2, 6, 2, -6, 0, 0};
    CHECK(memcmp(a, ea, sizeof a) == 0);

    float b[4 * 1] = {1, 5, 3, 8}; /* numpy: (3 + 5) / 2 = 4; torch would give 3 */
    CHECK(bs_car(b, 4, 1, 0, 1, NULL, 0) == BS_OK);
    CHECK(b[0] == -3 && b[1] == 1 && b[2] == -1 && b[3] == 4);

    float c[2 * 3] = {1, 2, 3, 10, 20, 30}; /* mean removal only */
    CHECK(bs_car(c, 2, 3, 1, 0, NULL, 0) == BS_OK);
    CHECK(c[0] == -1 && c[1] == 0 && c[2] == 1 && c[3] == -10 && c[4] == 0 && c[5] == 10);

    float d[2 * 3] = {1, 2, 3, 10, 20, 30}; /* mean removal then CAR: channels become equal up to sign */
    CHECK(bs_car(d, 2, 3, 1, 1, NULL, 0) == BS_OK);
    CHECK(d[0] == 4.5f && d[3] == -4.5f && d[1] == 0 && d[4] == 0 && d[2] == -4.5f && d[5] == 4.5f);

    float one[5] = {1, 2, 3, 4, 5}; /* a single channel is its own median */
    CHECK(bs_car(one, 1, 5, 0, 1, NULL, 0) == BS_OK);
    CHECK(one[0] == 0 && one[4] == 0);

    CHECK(bs_car(one, 0, 5, 0, 1, NULL, 0) == BS_ERR_INPUT && strstr(bs_last_error(), "channels"));
    CHECK(bs_car(one, 1, 0, 0, 1, NULL, 0) == BS_ERR_INPUT);
}

static void test_random(void)
{
    const int counts[] = {2, 3, 7, 8, 64, 65, 384};
    const int64_t T = 203; /* not a multiple of the 64-sample tile, nor its last tile of 8 */
    for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
        int C = counts[k];
        float *x = bs_mem_alloc("test/car", (size_t)C * T * sizeof(float));
        float *y = bs_mem_alloc("test/car", (size_t)C * T * sizeof(float));
        float *tmp = bs_mem_alloc("test/car", (size_t)C * sizeof(float));
        for (int64_t i = 0; i < C * T; i++) /* coarse values: many ties */
            x[i] = (float)floor(urand() * 12.0) * 2.5f - 10.0f + (i % 7 == 0 ? (float)urand() : 0.0f);
        memcpy(y, x, (size_t)C * T * sizeof(float));
        CHECK(bs_car(y, C, T, 0, 1, NULL, 0) == BS_OK);
        int bad = 0;
        for (int64_t t = 0; t < T; t++) {
            float m = ref_median(x, C, T, t, tmp);
            for (int c = 0; c < C; c++)
                bad += y[c * T + t] != x[c * T + t] - m;
        }
        CHECK_MSG(bad == 0, "C = %d: %d samples differ from numpy's median", C, bad);


        /* mean removal: double mean (8 interleaved partial sums, added pairwise) subtracted as float, rows then
           average ~0 */
        memcpy(y, x, (size_t)C * T * sizeof(float));
        for (int64_t i = 0; i < C * T; i++)
            y[i] += 10.0f * (float)(i / T); /* channel offsets, µV */
        memcpy(x, y, (size_t)C * T * sizeof(float));
        CHECK(bs_car(y, C, T, 1, 0, NULL, 0) == BS_OK);
        bad = 0;
        double worst = 0;
        for (int c = 0; c < C; c++) {
            double p[8] = {0}, r = 0;
            for (int64_t t = 0; t < T; t++)
                p[t % 8] += x[c * T + t];
            double s = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
            float mean = (float)(s / T);
            for (int64_t t = 0; t < T; t++) {
                bad += y[c * T + t] != x[c * T + t] - mean;
                r += y[c * T + t];
            }
            worst = fabs(r / T) > worst ? fabs(r / T) : worst;
        }
        CHECK(bad == 0);
        CHECK_MSG(worst < 1e-3, "C = %d: residual mean %g", C, worst);

        /* values over the whole float range, both signs, and infinities */
        for (int64_t i = 0; i < C * T; i++) {
            double mag = pow(10.0, urand() * 60.0 - 30.0);
            x[i] = (float)(urand() < 0.5 ? -mag : mag);
            if (i % 97 == 0)
                x[i] = (i % 2) ? INFINITY : -INFINITY;
            if (i % 89 == 0)
                x[i] = 0.0f;
        }
        float *med = bs_mem_alloc("test/car", (size_t)T * sizeof(float));
        for (int64_t t = 0; t < T; t++)
            med[t] = ref_median(x, C, T, t, tmp);
        memcpy(y, x, (size_t)C * T * sizeof(float));
        CHECK(bs_car(y, C, T, 0, 1, NULL, 0) == BS_OK);
        bad = 0;
        for (int64_t t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                float e = x[c * T + t] - med[t];
                bad += !(y[c * T + t] == e || (isnan(e) && isnan(y[c * T + t])));
            }
        CHECK_MSG(bad == 0, "C = %d, wide range: %d samples differ from numpy's median", C, bad);
        bs_mem_free(med);
        bs_mem_free(x);
        bs_mem_free(y);
        bs_mem_free(tmp);
    }
}

static void test_scratch_and_threads(void)
{
    const int C = 384;
    const int64_t T = 3001;
    float *a = bs_mem_alloc("test/car", (size_t)C * T * sizeof(float));
    float *b = bs_mem_alloc("test/car", (size_t)C * T * sizeof(float));
    for (int64_t i = 0; i < C * T; i++)
        a[i] = (float)(urand() * 200.0 - 100.0);
    memcpy(b, a, (size_t)C * T * sizeof(float));

    omp_set_num_threads(2);
    bs_mem_reset_peaks();
    CHECK(bs_car(a, C, T, 1, 1, NULL, 0) == BS_OK);
    size_t want = bs_car_scratch_bytes(C, T, 2);
    CHECK(want == 2 * 384 * (64 + 1) * sizeof(float)); /* tile + candidate buffer */
    CHECK_MSG(bs_mem_tag_peak("preprocess/car", BS_DEV_HOST) == want, "peak %zu, size %zu",
              bs_mem_tag_peak("preprocess/car", BS_DEV_HOST), want);
    CHECK(bs_mem_tag_current("preprocess/car", BS_DEV_HOST) == 0);
    CHECK(bs_car_scratch_bytes(5, 10, 3) == 3 * 5 * (10 + 1) * sizeof(float)); /* tile clipped to the window */

    omp_set_num_threads(1);
    CHECK(bs_car(b, C, T, 1, 1, NULL, 0) == BS_OK);
    CHECK(memcmp(a, b, (size_t)C * T * sizeof(float)) == 0);
    omp_set_num_threads(2);
    bs_mem_free(a);
    bs_mem_free(b);
}

/* bs_row_sum, bs_row_dot and bs_row_dev2 against sums in long double, for lengths around the 8 lanes */
static void test_row_sums(void)
{
    float a[203], b[203];
    for (int i = 0; i < 203; i++) {
        a[i] = (float)(100 * urand() - 30);
        b[i] = (float)(urand() - 0.5);
    }
    for (int n = 0; n <= 203; n += (n < 20 ? 1 : 61)) {
        long double s = 0, d = 0, mu = 0, v = 0;
        for (int i = 0; i < n; i++) {
            s += a[i];
            d += (long double)a[i] * b[i];
        }
        mu = n ? s / n : 0;
        for (int i = 0; i < n; i++)
            v += ((long double)a[i] - (double)mu) * ((long double)a[i] - (double)mu);
        CHECK_MSG(fabsl(bs_row_sum(a, n) - s) <= 1e-12L * (1 + fabsl(s)), "sum of %d", n);
        CHECK_MSG(fabsl(bs_row_dot(a, b, n) - d) <= 1e-12L * (1 + fabsl(d)), "dot of %d", n);
        CHECK_MSG(fabsl(bs_row_dev2(a, n, (double)mu) - v) <= 1e-12L * (1 + v), "deviations of %d", n);
    }
    CHECK(bs_row_sum(a, 3) == ((double)a[0] + (double)a[1]) + (double)a[2]); /* lanes added pairwise */
}

int main(void)
{
    test_hand();
    test_row_sums();
    test_random();
    test_scratch_and_threads();
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
