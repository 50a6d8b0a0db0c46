/*
 * test_firbank.c - the FFT filter bank (src/common/firbank.h) against the
 * direct sums in double precision (an independent reference): random
 * filters over random data, tiles that overhang both ends of the data (the
 * samples outside count as 0), fewer than 16 channels (the other lanes hold
 * only rounding),
 * the 256-point transform (nt = 61, radix 4 only) and the 512-point one
 * (nt = 100: a radix-2 stage too). Outputs agree to float rounding of the
 * tile's largest values; the same call gives the same bits again; the
 * tables hold bs_firbank_bytes under the caller's tag. The two halves
 * (bs_firbank_forward, bs_firbank_inverse): the forward's bins against the
 * DFT in double at their bit-reversed places (the bank's table of them, fb.bin,
 * against its own reversal), and the inverse of the bins / n gives the
 * samples back.
 */
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/firbank.h"
#include "common/rng.h"
#include "mem/mem.h"

static void check_bank(int P, int nt, int nch, uint64_t seed)
{
    bs_rng r;
    bs_rng_seed(&r, seed);
    float *w = malloc(sizeof(float) * (size_t)P * nt);
    for (int i = 0; i < P * nt; i++)
        w[i] = (float)bs_rng_normal(&r);
    bs_firbank fb;
    bs_mem_reset_peaks();
    CHECK(bs_firbank_init(&fb, "test/firbank", w, P, nt) == BS_OK);
    CHECK(bs_mem_tag_current("test/firbank", BS_DEV_HOST) == bs_firbank_bytes(P, nt));
    CHECK(fb.n == bs_firbank_n(nt) && fb.T == fb.n - nt + 1 && fb.T >= 192);
    const int64_t n_x = 1500;
    const size_t ldx = 1531;
    float *x = calloc((size_t)nch * ldx, sizeof(float));
    for (int l = 0; l < nch; l++)
        for (int64_t t = 0; t < n_x; t++)
            x[(size_t)l * ldx + t] = (float)(10.0 * bs_rng_normal(&r));
    float *scratch = bs_mem_alloc("test/firbank_ws", bs_firbank_scratch_floats(nt) * sizeof(float));
    const size_t ny = (size_t)P * fb.T * BS_FIRBANK_LANES;
    float *y = malloc(sizeof(float) * ny), *y2 = malloc(sizeof(float) * ny);
    double max_err = 0, max_val = 0;
    double max_spare = 0;
    int repeat = 1;
    for (int64_t first = -nt - 7; first < n_x + 5; first += fb.T - 13) {
        memset(y, 0xff, sizeof(float) * ny);
        bs_firbank_tile(&fb, x, ldx, nch, first, n_x, y, scratch);
        bs_firbank_tile(&fb, x, ldx, nch, first, n_x, y2, scratch);
        repeat &= memcmp(y, y2, sizeof(float) * ny) == 0;
        for (int p = 0; p < P; p++)
            for (int i = 0; i < fb.T; i++)
                for (int l = 0; l < BS_FIRBANK_LANES; l++) {
                    const float v = y[((size_t)p * fb.T + i) * BS_FIRBANK_LANES + l];
                    if (l >= nch) { /* rounding of the partner lane's outputs (l - 8) only */
                        max_spare = fmax(max_spare, fabs(v));
                        continue;
                    }
                    double s = 0;
                    for (int u = 0; u < nt; u++) {
                        const int64_t t = first + i + u;
                        if (t >= 0 && t < n_x)
                            s += (double)w[(size_t)p * nt + u] * x[(size_t)l * ldx + t];
                    }
                    max_err = fmax(max_err, fabs(s - v));
                    max_val = fmax(max_val, fabs(s));
                }
    }
    printf("firbank: %d filters of %d taps, n %d, %d channels: max error %.3g of values up to %.3g\n", P, nt,
           fb.n, nch, max_err, max_val);
    /* the two halves: the forward transform's bins (at their bit-reversed index) against the DFT in
     * double, then the inverse of the bins / n gives the tile's samples back */
    {
        const int n = fb.n, lb = __builtin_ctz((unsigned)n);
        const int64_t first = 100;
        bs_firbank_forward(&fb, x, ldx, nch, first, n_x, scratch);
        double dft_err = 0, dft_max = 0, back_err = 0;
        int bins_ok = 1; /* the bank's table of places (fb.bin) is the bit reversal */
        for (int k = 0; k < n; k++) {
            int idx = 0;
            for (int b = 0; b < lb; b++)
                idx |= ((k >> b) & 1) << (lb - 1 - b);
            bins_ok &= fb.bin[k] == idx;
        }
        CHECK(bins_ok);
        for (int k = 0; k < n; k += 7) {
            const int idx = fb.bin[k];
            for (int l = 0; l < 8 && l < nch; l++) {
                double pr = 0, pi = 0; /* bin k of x_l + i x_{l+8}: lane l */
                for (int j = 0; j < n; j++) {
                    const double a = -2.0 * M_PI * (double)j * k / n, v = x[(size_t)l * ldx + first + j];
                    const double u = l + 8 < nch ? x[(size_t)(l + 8) * ldx + first + j] : 0.0;
                    pr += v * cos(a) - u * sin(a);
                    pi += v * sin(a) + u * cos(a);
                }
                const float gr = scratch[(size_t)idx * 8 + l], gi = scratch[((size_t)n + idx) * 8 + l];
                dft_err = fmax(dft_err, fmax(fabs(gr - pr), fabs(gi - pi)));
                dft_max = fmax(dft_max, fmax(fabs(pr), fabs(pi)));
            }
        }
        bs_firbank_forward(&fb, x, ldx, nch, first, n_x, scratch);
        for (size_t i = 0; i < 2 * (size_t)n * 8; i++)
            scratch[i] /= (float)n;
        bs_firbank_inverse(&fb, scratch, y);
        for (int i = 0; i < fb.T; i++)
            for (int l = 0; l < nch; l++)
                back_err = fmax(back_err, fabs(y[(size_t)i * BS_FIRBANK_LANES + l] -
                                               x[(size_t)l * ldx + first + nt - 1 + i]));
        printf("firbank: forward bins against the DFT %.3g of up to %.3g; inverse(forward / n) - x %.3g\n", dft_err,
               dft_max, back_err);
        CHECK(dft_err < 1e-5 * dft_max && dft_max > 100);
        CHECK(back_err < 1e-4);
    }
    CHECK_MSG(max_err < 2e-6 * max_val, "error %g", max_err);
    CHECK(max_val > 100);
    CHECK(max_spare < 2e-6 * max_val);
    CHECK(repeat);
    bs_firbank_free(&fb);
    CHECK(bs_mem_tag_current("test/firbank", BS_DEV_HOST) == 0);
    bs_mem_free(scratch);
    free(w);
    free(x);
    free(y);
    free(y2);
}

int main(void)
{
    check_bank(6, 61, 16, 1);
    check_bank(6, 61, 11, 2);
    check_bank(4, 100, 16, 3);
    check_bank(1, 5, 3, 4);
    TEST_MAIN_END();
}
