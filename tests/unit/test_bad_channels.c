/*
 * test_bad_channels.c - bad-channel detection and interpolation
 * (preprocess/bad_channels.h) on synthetic chunks:
 *   - a 64-channel shank whose channels share a common signal, with a dead
 *     (flat), a weak (x 0.05), a noisy (white noise to the Nyquist
 *     frequency) channel and 6 channels at the top carrying only their own
 *     noise: each gets its label and every other channel is good; a second
 *     shank is labelled on its own and a shank under min_shank_channels is
 *     not examined;
 *   - the high-band power against Welch's estimate computed here directly
 *     (a DFT in double of each Hann-windowed, half-overlapping segment);
 *   - the similarity against <x, r> / <r, r> computed here from numpy's
 *     median of each sample;
 *   - the vote (most frequent, ties to good);
 *   - the same bytes on 1 and 2 threads;
 *   - interpolation weights against the formula (exp(-(d / sigma)^1.3),
 *     threshold 0.005, normalised), sigma = the most common depth gap, and
 *     the rows they rewrite;
 *   - bs_recording_drop_channels: the probe compacted in order, an emptied
 *     shank renumbered away, the dropped columns recorded.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "common/lsan_options.h" /* OpenBLAS called from OpenMP threads (the Welch products) */

#include "io/recording.h"
#include "mem/mem.h"
#include "preprocess/bad_channels.h"

#define FS 30000.0
#define NS 9000 /* 0.3 s */

static double gauss(unsigned *s)
{
    double u = (rand_r(s) + 1.0) / (RAND_MAX + 2.0), v = (rand_r(s) + 1.0) / (RAND_MAX + 2.0);
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

/* A low-passed Gaussian sequence (3-tap average: little power near the Nyquist frequency). */
static void smooth_noise(unsigned *s, double sigma, float *out, int n)
{
    double a = gauss(s), b = gauss(s);
    for (int t = 0; t < n; t++) {
        double c = gauss(s);
        out[t] = (float)(sigma * (a + b + c) / 3.0);
        a = b;
        b = c;
    }
}

static int cmp_f(const void *a, const void *b)
{
    float p = *(const float *)a, q = *(const float *)b;
    return p < q ? -1 : p > q;
}

int main(void)
{
    /* probe: shank 0 has 64 channels (two columns, 20 µm pitch), shank 1 has 40, shank 2 has 8 */
    const int C0 = 64, C1 = 40, C2 = 8, C = C0 + C1 + C2;
    bs_probe pr;
    CHECK(bs_probe_alloc(&pr, C) == BS_OK);
    pr.n_shanks = 3;
    for (int c = 0; c < C; c++) {
        int sh = c < C0 ? 0 : c < C0 + C1 ? 1 : 2, i = sh == 0 ? c : sh == 1 ? c - C0 : c - C0 - C1;
        pr.shank[c] = sh;
        pr.column[c] = c;
        pr.x_um[c] = 250.0 * sh + (i % 2) * 32.0;
        pr.y_um[c] = (i / 2) * 20.0;
    }
    /* shank 1 is listed top first: the detector must order by depth itself */
    for (int i = 0; i < C1; i++)
        pr.y_um[C0 + i] = (C1 - 1 - i) / 2 * 20.0;

    unsigned seed = 7;
    float *x = malloc(sizeof(float) * (size_t)C * NS);
    float *common = malloc(sizeof(float) * NS);
    for (int sh = 0; sh < 3; sh++) {
        smooth_noise(&seed, 20.0, common, NS);
        for (int c = 0; c < C; c++) {
            if (pr.shank[c] != sh)
                continue;
            float *row = x + (size_t)c * NS;
            smooth_noise(&seed, 10.0, row, NS);
            for (int t = 0; t < NS; t++)
                row[t] += common[t];
        }
    }
    const int dead = 10, weak = 21, noisy = 33, out_first = C0 - 6, noisy1 = C0 + 5;
    memset(x + (size_t)dead * NS, 0, sizeof(float) * NS);
    for (int t = 0; t < NS; t++) {
        x[(size_t)weak * NS + t] *= 0.05f;
        x[(size_t)noisy * NS + t] += (float)(50.0 * gauss(&seed));
        x[(size_t)noisy1 * NS + t] += (float)(50.0 * gauss(&seed));
    }
    for (int c = out_first; c < C0; c++)
        smooth_noise(&seed, 10.0, x + (size_t)c * NS, NS);
    float *x0 = malloc(sizeof(float) * (size_t)C * NS);
    memcpy(x0, x, sizeof(float) * (size_t)C * NS);

    bs_bad_channel_params prm;
    bs_bad_channel_default_params(&prm);
    bs_bad_detector d;
    CHECK(bs_bad_detector_init(&pr, FS, &prm, &d) == BS_OK);
    CHECK(d.n_groups == 2 && d.start[2] == C0 + C1 && d.nperseg == 300 && d.k0 == 121 && d.n_bins == 30);
    int8_t lab[112], lab2[112];
    float coh[112], psd[112], coh2[112], psd2[112];
    omp_set_num_threads(2);
    CHECK(bs_bad_channels_chunk(&d, x, NS, 0, NS, NULL, 0, lab, coh, psd) == BS_OK);
    int wrong = 0;
    for (int c = 0; c < C; c++) {
        int want = BS_CHAN_GOOD;
        if (c == dead || c == weak)
            want = BS_CHAN_DEAD;
        if (c == noisy || c == noisy1)
            want = BS_CHAN_NOISY;
        if (c >= out_first && c < C0)
            want = BS_CHAN_OUT;
        if (lab[c] != want) {
            wrong++;
            fprintf(stderr, "channel %d: label %s, expected %s (coherence %.3f, psd %.4g)\n", c,
                    bs_chan_label_name(lab[c]), bs_chan_label_name(want), coh[c], psd[c]);
        }
    }
    CHECK(wrong == 0);
    CHECK(coh[dead] < -0.9 && psd[dead] == 0.0f && fabsf(coh[40]) < 0.2);
    CHECK(psd[noisy] > 0.1 && psd[40] < 0.01);

    /* the same bytes on one thread, and with a caller's scratch */
    memcpy(x, x0, sizeof(float) * (size_t)C * NS);
    omp_set_num_threads(1);
    size_t sb = bs_bad_chunk_scratch_bytes(&d, NS, 1);
    void *scr = malloc(sb);
    CHECK(bs_bad_channels_chunk(&d, x, NS, 0, NS, scr, sb, lab2, coh2, psd2) == BS_OK);
    CHECK(memcmp(lab, lab2, (size_t)C) == 0 && memcmp(coh, coh2, sizeof(float) * C) == 0 &&
          memcmp(psd, psd2, sizeof(float) * C) == 0);
    free(scr);
    omp_set_num_threads(2);

    /* Welch and the similarity, computed here in double from the mean-removed rows (x holds them now) */
    double maxrel = 0, maxabs_coh = 0;
    double *ref = malloc(sizeof(double) * NS), *xc = malloc(sizeof(double) * C0);
    float vals[64];
    for (int t = 0; t < NS; t++) { /* shank 0 is in channel order = depth order (y, then x) */
        for (int c = 0; c < C0; c++)
            vals[c] = x[(size_t)c * NS + t];
        qsort(vals, C0, sizeof(float), cmp_f);
        ref[t] = (vals[C0 / 2 - 1] + vals[C0 / 2]) / 2.0f;
    }
    double rm = 0, rr = 0;
    for (int t = 0; t < NS; t++)
        rm += ref[t];
    rm /= NS;
    for (int t = 0; t < NS; t++) {
        ref[t] -= rm;
        rr += ref[t] * ref[t];
    }
    for (int c = 0; c < C0; c++) {
        double s = 0;
        for (int t = 0; t < NS; t++)
            s += x[(size_t)c * NS + t] * ref[t];
        xc[c] = s / rr;
    }
    for (int c = 0; c < C0; c++) { /* coherence = xcorr - the shrinking median of 11 */
        double w[11];
        int lo = c - 5 < 0 ? 0 : c - 5, hi = c + 6 > C0 ? C0 : c + 6, m = hi - lo;
        memcpy(w, xc + lo, sizeof(double) * m);
        for (int i = 1; i < m; i++)
            for (int j = i; j > 0 && w[j - 1] > w[j]; j--) {
                double tmp = w[j];
                w[j] = w[j - 1];
                w[j - 1] = tmp;
            }
        double med = m & 1 ? w[m / 2] : (w[m / 2 - 1] + w[m / 2]) / 2;
        if (lab[c] != BS_CHAN_OUT)
            maxabs_coh = fmax(maxabs_coh, fabs((xc[c] - med) - coh[c]));
        /* Welch: scipy.signal.welch(x, fs, 'hann', nperseg=300) averaged over the bins above 12 kHz */
        const int N = 300, hop = 150, nseg = (NS - hop) / hop;
        double s2 = 0, acc = 0;
        for (int n = 0; n < N; n++) {
            double wn = 0.5 - 0.5 * cos(2 * M_PI * n / N);
            s2 += wn * wn;
        }
        for (int sg = 0; sg < nseg; sg++) {
            double mean = 0;
            for (int n = 0; n < N; n++)
                mean += x[(size_t)c * NS + sg * hop + n];
            mean /= N;
            for (int k = 121; k <= 150; k++) {
                double re = 0, im = 0;
                for (int n = 0; n < N; n++) {
                    double v = (x[(size_t)c * NS + sg * hop + n] - mean) * (0.5 - 0.5 * cos(2 * M_PI * n / N));
                    re += v * cos(2 * M_PI * k * n / N);
                    im -= v * sin(2 * M_PI * k * n / N);
                }
                acc += (re * re + im * im) * (k == 150 ? 1 : 2);
            }
        }
        double p = acc / (FS * s2) / nseg / 30;
        if (p > 0)
            maxrel = fmax(maxrel, fabs(psd[c] - p) / p);
        else
            CHECK(psd[c] < 1e-12);
    }
    fprintf(stderr, "Welch high band: max relative difference %.2e; coherence: max difference %.2e\n", maxrel,
            maxabs_coh);
    CHECK(maxrel < 1e-3);
    CHECK(maxabs_coh < 1e-4);
    free(ref);
    free(xc);

    /* the vote */
    int8_t votes[3 * 4] = {0, 1, 2, 3, /* chunk 0 */ 1, 1, 2, 0, /* chunk 1 */ 0, 2, 3, 3};
    int8_t v[4];
    bs_bad_channels_vote(votes, 3, 4, v);
    CHECK(v[0] == 0 && v[1] == 1 && v[2] == 2 && v[3] == 3); /* channel 2: 2, 2, 3 -> 2 */
    int8_t tie[2] = {0, 1};
    bs_bad_channels_vote(tie, 2, 1, v);
    CHECK(v[0] == 0);

    /* interpolation */
    CHECK_NEAR(bs_bad_interp_sigma_um(&pr), 20.0, 1e-12);
    uint8_t interp[112] = {0}, good[112];
    for (int c = 0; c < C; c++)
        good[c] = 1;
    interp[dead] = interp[noisy] = 1;
    good[dead] = good[noisy] = 0;
    good[weak] = 0; /* neither: never a source */
    bs_bad_interp ip;
    CHECK(bs_bad_interp_build(&pr, interp, good, 1.3, &ip) == BS_OK);
    CHECK(ip.n_bad == 2 && ip.bad[0] == dead && ip.bad[1] == noisy);
    double maxw = 0;
    for (int i = 0; i < ip.n_bad; i++) {
        int b = ip.bad[i];
        double w[112], sum = 0;
        for (int c = 0; c < C; c++) {
            double dx = pr.x_um[c] - pr.x_um[b], dy = pr.y_um[c] - pr.y_um[b];
            w[c] = good[c] ? exp(-pow(sqrt(dx * dx + dy * dy) / 20.0, 1.3)) : 0;
            w[c] = w[c] < 0.005 ? 0 : w[c];
            sum += w[c];
        }
        int q = ip.start[i];
        for (int c = 0; c < C; c++) {
            double e = w[c] / sum;
            if (e < 0.005)
                continue;
            CHECK(q < ip.start[i + 1] && ip.src[q] == c);
            maxw = fmax(maxw, fabs(ip.w[q] - e));
            q++;
        }
        CHECK(q == ip.start[i + 1]);
    }
    CHECK(maxw < 1e-6);
    memcpy(x, x0, sizeof(float) * (size_t)C * NS);
    bs_bad_interp_apply(&ip, x, NS);
    double e = 0;
    for (int q = ip.start[0]; q < ip.start[1]; q++)
        e += ip.w[q] * x0[(size_t)ip.src[q] * NS + 100];
    CHECK_NEAR(x[(size_t)dead * NS + 100], e, 1e-3);
    CHECK(memcmp(x + (size_t)40 * NS, x0 + (size_t)40 * NS, sizeof(float) * NS) == 0);
    bs_bad_interp_free(&ip);

    /* dropping channels: shank 2 emptied */
    bs_recording rec;
    memset(&rec, 0, sizeof rec);
    rec.probe = pr;
    rec.uv_per_bit = malloc(sizeof(float) * C);
    for (int c = 0; c < C; c++)
        rec.uv_per_bit[c] = (float)c;
    uint8_t drop[112] = {0};
    drop[3] = 1;
    for (int c = C0 + C1; c < C; c++)
        drop[c] = 1;
    CHECK(bs_recording_drop_channels(&rec, drop) == BS_OK);
    CHECK(rec.probe.n_chan == C - 1 - C2 && rec.probe.n_shanks == 2 && rec.n_dropped == 1 + C2);
    CHECK(rec.dropped_cols[0] == 3 && rec.probe.column[3] == 4 && rec.uv_per_bit[3] == 4.0f);
    CHECK(rec.probe.shank[rec.probe.n_chan - 1] == 1);
    int cols[1] = {5};
    CHECK(bs_recording_drop_columns(&rec, cols, 1) == BS_OK && rec.probe.column[4] == 6 && rec.n_dropped == 2 + C2);
    cols[0] = 5; /* gone already */
    CHECK(bs_recording_drop_columns(&rec, cols, 1) == BS_ERR_INPUT);
    free(rec.uv_per_bit);
    bs_mem_free(rec.dropped_cols);
    bs_probe_free(&rec.probe);

    bs_bad_detector_free(&d);
    free(x);
    free(x0);
    free(common);
    TEST_MAIN_END();
}
