/*
 * test_phase_shift.c - the ADC phase shift (preprocess.h, PHASE SHIFT)
 * against the exact band-limited delay computed with a DFT (in double, here):
 * on a signal with energy up to 2/3 of the Nyquist frequency (10 kHz at
 * 30 kHz, the Neuropixels AP band's upper edge), every delay of a Neuropixels 1.0 and 2.0 table is reproduced within
 * 1e-3 of the signal's RMS away from the window's edges; a zero delay leaves a
 * row's bytes unchanged; the output is the same bytes on 1 and 2 threads and
 * with a caller's scratch; the taps sum to 1 and d = 0 is the identity; a
 * delay outside [0, 1) is refused; and bs_preprocess_batch runs it between
 * the mean removal and the median reference.
 */
#include <omp.h>

#include "test.h"

#include "preprocess/preprocess.h"

#define N 2048
#define EDGE 32 /* samples at each end left out of the comparison (the filter repeats the end samples) */

/* x[n] = sum over DFT bins k <= kmax of a_k cos(2 pi k n / N + phi_k); shifted by d: the same at n - d. */
static void band_signal(unsigned seed, double d, double *out)
{
    const int kmax = N / 3;
    srand(seed);
    for (int n = 0; n < N; n++)
        out[n] = 0;
    for (int k = 1; k <= kmax; k++) {
        double a = (double)rand() / RAND_MAX, phi = 2 * M_PI * rand() / RAND_MAX;
        for (int n = 0; n < N; n++)
            out[n] += a * cos(2 * M_PI * k * (n - d) / N + phi);
    }
}

int main(void)
{
    /* taps: unit sum; identity at d = 0 */
    float taps[BS_PHASE_TAPS];
    for (double d = 0; d < 1; d += 0.125) {
        bs_phase_shift_taps(d, taps);
        double s = 0;
        for (int j = 0; j < BS_PHASE_TAPS; j++)
            s += taps[j];
        CHECK_NEAR(s, 1.0, 1e-6);
    }
    bs_phase_shift_taps(0, taps);
    for (int j = 0; j < BS_PHASE_TAPS; j++)
        CHECK(taps[j] == (j == BS_PHASE_TAPS / 2 - 1 ? 1.0f : 0.0f));

    /* the delays of both tables (NP1.0: slot / 13; NP2.0: slot / 16), one per row, plus a zero row */
    enum { ROWS = 13 + 16 + 1 };
    float shift[ROWS];
    for (int r = 0; r < 13; r++)
        shift[r] = (float)r / 13;
    for (int r = 0; r < 16; r++)
        shift[13 + r] = (float)r / 16;
    shift[ROWS - 1] = 0;
    float *x = malloc(sizeof(float) * ROWS * N), *x2 = malloc(sizeof(float) * ROWS * N),
          *x0 = malloc(sizeof(float) * ROWS * N);
    double *ref = malloc(sizeof(double) * ROWS * N), rms = 0;
    for (int r = 0; r < ROWS; r++) {
        double sig[N];
        band_signal(100 + r, 0, sig);
        band_signal(100 + r, shift[r], ref + (size_t)r * N); /* the signal at n - d */
        for (int n = 0; n < N; n++) {
            x[(size_t)r * N + n] = (float)sig[n];
            rms += sig[n] * sig[n];
        }
    }
    rms = sqrt(rms / (ROWS * N));
    memcpy(x0, x, sizeof(float) * ROWS * N);
    memcpy(x2, x, sizeof(float) * ROWS * N);
    omp_set_num_threads(1);
    CHECK(bs_phase_shift_apply(shift, x, ROWS, N, NULL, 0) == BS_OK);
    double worst = 0;
    for (int r = 0; r < ROWS; r++)
        for (int n = EDGE; n < N - EDGE; n++)
            worst = fmax(worst, fabs(x[(size_t)r * N + n] - ref[(size_t)r * N + n]));
    printf("phase shift: largest error %.3g of a signal of RMS %.3g (%.2g), %d taps, band to 2/3 Nyquist\n", worst,
           rms, worst / rms, BS_PHASE_TAPS);
    CHECK_MSG(worst < 1e-3 * rms, "error %g, RMS %g", worst, rms);
    CHECK(memcmp(x + (size_t)(ROWS - 1) * N, x0 + (size_t)(ROWS - 1) * N, sizeof(float) * N) == 0);

    /* 2 threads with a caller's scratch: the same bytes */
    omp_set_num_threads(2);
    size_t sb = bs_phase_shift_scratch_bytes(N, 2);
    void *scr = malloc(sb);
    CHECK(bs_phase_shift_apply(shift, x2, ROWS, N, scr, sb) == BS_OK);
    CHECK(memcmp(x, x2, sizeof(float) * ROWS * N) == 0);
    free(scr);

    /* refused delays */
    float bad[2] = {0.5f, 1.0f};
    CHECK(bs_phase_shift_apply(bad, x2, 2, N, NULL, 0) == BS_ERR_INTERNAL);
    bad[1] = -0.1f;
    CHECK(bs_phase_shift_apply(bad, x2, 2, N, NULL, 0) == BS_ERR_INTERNAL);

    /* in the batch chain: mean removal, phase shift, then the median reference */
    memcpy(x2, x0, sizeof(float) * ROWS * N);
    memcpy(x, x0, sizeof(float) * ROWS * N);
    for (int i = 0; i < ROWS * N; i++)
        x2[i] += 50.0f, x[i] += 50.0f; /* an offset the mean removal takes away */
    bs_preprocess pp = {.remove_mean = 1, .car = 1, .phase_shift = shift};
    CHECK(bs_preprocess_batch(&pp, x2, ROWS, N, NULL, 0, NULL) == BS_OK);
    CHECK(bs_car(x, ROWS, N, 1, 0, NULL, 0) == BS_OK);
    CHECK(bs_phase_shift_apply(shift, x, ROWS, N, NULL, 0) == BS_OK);
    CHECK(bs_car(x, ROWS, N, 0, 1, NULL, 0) == BS_OK);
    CHECK(memcmp(x, x2, sizeof(float) * ROWS * N) == 0);

    free(x), free(x2), free(x0), free(ref);
    TEST_MAIN_END();
}
