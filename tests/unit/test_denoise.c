/*
 * test_denoise.c - the two denoising kernels (preprocess.h, DESTRIPE and
 * LOCAL MEDIAN REFERENCE) against plain reference implementations written
 * here, in double where it matters:
 *   destripe: the AGC gain against the direct Hann convolution (np.hanning
 *     taps, normalised by their sum, "same" mode with zeros outside) on a
 *     63000-sample row at 30 kHz: relative error below 1e-9; the whole kernel
 *     against a per-column reference (direct convolution, float32 division,
 *     mirror padding, scipy-style sosfiltfilt written out with the
 *     bs_highpass sections) on a probe of three shanks given in scrambled
 *     channel order (70 channels out of depth order, 20 in depth order with x
 *     not sorted within a row, and 3: shorter than the 60-channel pad and
 *     than the odd extension), with a dead channel, at two rates, and with a
 *     window shorter than the AGC window; output bytes on 1 and 2 threads
 *     and with a caller's scratch; a dead channel stays 0; the error of a
 *     batch window with a halo of h and h/2 against the whole signal;
 *   local median reference: the neighbourhoods against a brute-force search
 *     (annulus, the min-5 fallback with ties broken by channel index, an
 *     isolated channel left unreferenced); the output against brute-force
 *     sorted medians, bit for bit, on data full of ties, with neighbourhoods
 *     small (network) and large (selection), a partial last tile, 1 and 2
 *     threads;
 *   timings of both kernels on 384 channels x 60000 samples (printed, not
 *     asserted).
 */
#include <omp.h>

#include "test.h"

#include "mem/mem.h"
#include "preprocess/preprocess.h"

/* ------------------------------------------------------------ helpers --- */

static uint64_t rng_state = 88172645463325252ull;
static double urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static double nrand(void)
{
    double u = urand(), v = urand();
    if (u < 1e-300)
        u = 1e-300;
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

typedef struct {
    bs_probe p;
    double xs[512], ys[512];
    int sh[512];
} test_probe;

static void probe_init(test_probe *tp, int n_chan, int n_shanks)
{
    memset(&tp->p, 0, sizeof tp->p);
    tp->p.n_chan = n_chan;
    tp->p.n_shanks = n_shanks;
    tp->p.x_um = tp->xs;
    tp->p.y_um = tp->ys;
    tp->p.shank = tp->sh;
}

/* ---------------------------------------------------- destripe reference --- */

/* scipy.signal.sosfiltfilt of v[0..m) (float32 values) with the odd extension in float32, padlen clipped to m - 1. */
static void ref_sosfiltfilt(const bs_highpass *hp, const float *v, int m, double *out)
{
    int q = hp->padlen < m - 1 ? hp->padlen : m - 1, len = m + 2 * q;
    double *e = malloc(sizeof(double) * (size_t)len);
    for (int i = 0; i < q; i++) {
        e[i] = 2.0f * v[0] - v[q - i];
        e[q + m + i] = 2.0f * v[m - 1] - v[m - 2 - i];
    }
    for (int i = 0; i < m; i++)
        e[q + i] = v[i];
    for (int pass = 0; pass < 2; pass++) {
        double z[BS_HP_MAX_SECTIONS][2];
        double first = pass == 0 ? e[0] : e[len - 1];
        for (int s = 0; s < hp->n_sections; s++) {
            z[s][0] = hp->zi[s][0] * first;
            z[s][1] = hp->zi[s][1] * first;
        }
        for (int c = 0; c < len; c++) {
            int i = pass == 0 ? c : len - 1 - c;
            double xv = e[i];
            for (int s = 0; s < hp->n_sections; s++) {
                const double *so = hp->sos[s];
                double y = so[0] * xv + z[s][0];
                z[s][0] = so[1] * xv - so[4] * y + z[s][1];
                z[s][1] = so[2] * xv - so[5] * y;
                xv = y;
            }
            e[i] = xv;
        }
    }
    for (int i = 0; i < m; i++)
        out[i] = e[q + i];
    free(e);
}

/* np.hanning(2h + 1) / its sum (summed in double), for ref_gain_at. */
static double *ref_window(int h)
{
    int N = 2 * h + 1;
    double *w = malloc(sizeof(double) * (size_t)N), sum = 0;
    for (int k = 0; k < N; k++)
        sum += w[k] = N == 1 ? 1.0 : 0.5 - 0.5 * cos(2 * M_PI * k / (N - 1));
    for (int k = 0; k < N; k++)
        w[k] /= sum;
    return w;
}

/* Direct "same" convolution of |row| with the window w of 2h + 1 taps at sample t (zeros outside the row). */
static double ref_gain_at(const float *row, int64_t n_t, const double *w, int h, int64_t t)
{
    double acc = 0;
    for (int k = 0; k < 2 * h + 1; k++) {
        int64_t j = t + h - k;
        if (j >= 0 && j < n_t)
            acc += w[k] * fabs((double)row[j]);
    }
    return acc;
}

/* The whole of SpikeInterface's highpass_spatial_filter per shank, column by column. */
static void ref_destripe(const bs_probe *p, double fs, const float *rms, const float *x, int64_t n_t, float *out)
{
    const int C = p->n_chan;
    const int h = (int)rint(0.1 / (1.0 / fs) / 2.0);
    bs_highpass hp;
    bs_highpass_design(3, 0.005, 1.0, &hp);
    double *w = ref_window(h);
    double *gain = malloc(sizeof(double) * (size_t)C * (size_t)n_t);
    float *xa = malloc(sizeof(float) * (size_t)C * (size_t)n_t);
    for (int c = 0; c < C; c++) {
        const float *row = x + (size_t)c * n_t;
        double tot = 0;
        for (int64_t t = 0; t < n_t; t++) {
            gain[(size_t)c * n_t + t] = ref_gain_at(row, n_t, w, h, t);
            tot += gain[(size_t)c * n_t + t];
        }
        float eps = 0.003f * rms[c];
        for (int64_t t = 0; t < n_t; t++) {
            double g = gain[(size_t)c * n_t + t];
            xa[(size_t)c * n_t + t] = tot == 0 ? row[t] : (float)((double)row[t] / (g > eps ? g : (double)eps));
        }
    }
    int ord[512];
    float col[3 * 512];
    double res[3 * 512];
    for (int s = 0; s < p->n_shanks; s++) {
        int n = 0, sorted = 1;
        for (int c = 0; c < C; c++)
            if (p->shank[c] == s) {
                if (n > 0 && p->y_um[c] < p->y_um[ord[n - 1]])
                    sorted = 0;
                ord[n++] = c;
            }
        if (n == 0)
            continue;
        if (!sorted) /* stable insertion sort by (y, x): np.lexsort((x, y)) */
            for (int i = 1; i < n; i++)
                for (int j = i; j > 0; j--) {
                    int a = ord[j - 1], b = ord[j];
                    if (p->y_um[b] < p->y_um[a] || (p->y_um[b] == p->y_um[a] && p->x_um[b] < p->x_um[a])) {
                        ord[j - 1] = b;
                        ord[j] = a;
                    } else {
                        break;
                    }
                }
        int pad = n < 60 ? n : 60, m = n + 2 * pad;
        for (int64_t t = 0; t < n_t; t++) {
            for (int i = 0; i < n; i++)
                col[pad + i] = xa[(size_t)ord[i] * n_t + t];
            for (int k = 0; k < pad; k++) {
                col[pad - 1 - k] = col[pad + k];
                col[pad + n + k] = col[pad + n - 1 - k];
            }
            ref_sosfiltfilt(&hp, col, m, res);
            for (int i = 0; i < n; i++)
                out[(size_t)ord[i] * n_t + t] = (float)(res[pad + i] * gain[(size_t)ord[i] * n_t + t]);
        }
    }
    free(gain);
    free(xa);
    free(w);
}

/* Three shanks in scrambled channel order: shank 0 has 70 channels (two columns, y decreasing in channel order),
 * shank 1 has 20 (y non-decreasing, x = 32 before x = 0 in each row), shank 2 has 3. Channel c's shank is
 * given by a fixed interleaving. */
static void destripe_probe(test_probe *tp)
{
    probe_init(tp, 93, 3);
    int n0 = 0, n1 = 0, n2 = 0;
    for (int c = 0; c < 93; c++) {
        int s = c % 31 == 7 && n2 < 3 ? 2 : (c % 4 == 1 && n1 < 20 ? 1 : (n0 < 70 ? 0 : (n1 < 20 ? 1 : 2)));
        tp->sh[c] = s;
        if (s == 0) {
            tp->xs[c] = n0 % 2 ? 0 : 32; /* x decreasing within a row too */
            tp->ys[c] = 20 * (35 - n0 / 2); /* decreasing */
            n0++;
        } else if (s == 1) {
            tp->xs[c] = 1000 + (n1 % 2 ? 0 : 32);
            tp->ys[c] = 15 * (n1 / 2);
            n1++;
        } else {
            tp->xs[c] = 2000;
            tp->ys[c] = 20 * n2;
            n2++;
        }
    }
}

/* Noise of a channel-dependent size, a stripe shared across channels with a slow trend along depth, a large
 * transient on a few channels; channel `dead` all zeros. */
static void destripe_data(const bs_probe *p, int64_t n_t, int dead, int equal, float *x, float *rms)
{
    for (int c = 0; c < p->n_chan; c++) {
        double amp = equal ? 10 : 5 + 20 * urand(), ss = 0;
        for (int64_t t = 0; t < n_t; t++) {
            double stripe = 30 * sin(2 * M_PI * t / 97.0) * (1 + p->y_um[c] / 2000.0);
            double v = amp * nrand() + stripe;
            if (c % 11 == 3 && t > n_t / 3 && t < n_t / 3 + 40)
                v += 800;
            x[(size_t)c * n_t + t] = c == dead ? 0.0f : (float)v;
            ss += (double)x[(size_t)c * n_t + t] * x[(size_t)c * n_t + t];
        }
        rms[c] = (float)sqrt(ss / (double)n_t);
    }
}

static double max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void test_gain_precision(void)
{
    test_probe tp;
    probe_init(&tp, 1, 1);
    tp.xs[0] = tp.ys[0] = 0;
    tp.sh[0] = 0;
    float rms = 10;
    bs_destripe d;
    CHECK(bs_destripe_init(&tp.p, 30000.0, &rms, &d) == BS_OK);
    CHECK(d.hann_h == 1500 && d.hann_n == 3001);
    const int64_t n = 63000;
    float *row = malloc(sizeof(float) * n);
    double *sums = malloc(sizeof(double) * 3 * (n + 1)), *g = malloc(sizeof(double) * n);
    for (int64_t t = 0; t < n; t++)
        row[t] = (float)(15 * nrand() + (t > 40000 && t < 40030 ? 2000 : 0)); /* and a large transient */
    bs_destripe_gain(&d, row, n, sums, g);
    double worst = 0, *w = ref_window(1500);
    for (int64_t t = 0; t < n; t += (t < 3200 || t > n - 3200) ? 1 : 37) {
        double r = ref_gain_at(row, n, w, 1500, t);
        worst = fmax(worst, fabs(g[t] - r) / r);
    }
    printf("destripe AGC: running sums against the direct 3001-tap Hann convolution over 63000 samples: largest "
           "relative error %.2g\n",
           worst);
    CHECK_MSG(worst < 1e-9, "relative error %g", worst);
    free(row);
    free(w);
    free(sums);
    free(g);
    bs_destripe_free(&d);
}

static void test_destripe_against_reference(double fs, int64_t n_t)
{
    test_probe tp;
    destripe_probe(&tp);
    const int C = tp.p.n_chan, dead = 12;
    float *x = malloc(sizeof(float) * C * n_t), *x1 = malloc(sizeof(float) * C * n_t),
          *x2 = malloc(sizeof(float) * C * n_t), *ref = malloc(sizeof(float) * C * n_t), rms[93];
    destripe_data(&tp.p, n_t, dead, 0, x, rms);
    CHECK(tp.sh[dead] == 0);
    rms[dead] = 0; /* the RMS of a dead channel */
    ref_destripe(&tp.p, fs, rms, x, n_t, ref);
    bs_destripe d;
    CHECK(bs_destripe_init(&tp.p, fs, rms, &d) == BS_OK);
    /* the order: shank 0 sorted by depth (y increasing), shank 1 kept, shank 2 kept */
    int ok_order = d.shank_start[1] == 70 && d.shank_start[2] == 90 && d.shank_start[3] == 93;
    for (int i = d.shank_start[0] + 1; i < d.shank_start[1]; i++)
        ok_order &= tp.ys[d.order[i]] > tp.ys[d.order[i - 1]] ||
                    (tp.ys[d.order[i]] == tp.ys[d.order[i - 1]] && tp.xs[d.order[i]] > tp.xs[d.order[i - 1]]);
    for (int s = 1; s < 3; s++) /* kept in channel order */
        for (int i = d.shank_start[s] + 1; i < d.shank_start[s + 1]; i++)
            ok_order &= d.order[i] > d.order[i - 1] && tp.sh[d.order[i]] == s;
    CHECK(ok_order);

    memcpy(x1, x, sizeof(float) * C * n_t);
    memcpy(x2, x, sizeof(float) * C * n_t);
    omp_set_num_threads(1);
    CHECK(bs_destripe_apply(&d, x1, C, n_t, NULL, 0) == BS_OK);
    omp_set_num_threads(2);
    CHECK(bs_destripe_apply(&d, x2, C, n_t, NULL, 0) == BS_OK);
    CHECK(memcmp(x1, x2, sizeof(float) * C * n_t) == 0);
    size_t sb = bs_destripe_scratch_bytes(&d, n_t, 2);
    void *sc = malloc(sb);
    memcpy(x2, x, sizeof(float) * C * n_t);
    CHECK(bs_destripe_apply(&d, x2, C, n_t, sc, sb) == BS_OK);
    CHECK(memcmp(x1, x2, sizeof(float) * C * n_t) == 0);
    free(sc);
    /* the measured peak under the tag is the size function's */
    bs_mem_reset_peaks();
    size_t before = bs_mem_tag_current("preprocess/destripe", BS_DEV_HOST);
    memcpy(x2, x, sizeof(float) * C * n_t);
    CHECK(bs_destripe_apply(&d, x2, C, n_t, NULL, 0) == BS_OK);
    CHECK(bs_mem_tag_peak("preprocess/destripe", BS_DEV_HOST) - before == bs_destripe_scratch_bytes(&d, n_t, 2));

    double dead_max = max_abs(x1 + (size_t)dead * n_t, (size_t)n_t);
    CHECK(dead_max == 0);
    double err = max_diff(x1, ref, (size_t)C * n_t), big = max_abs(ref, (size_t)C * n_t);
    /* per shank too */
    double err_s[3] = {0, 0, 0};
    for (int c = 0; c < C; c++)
        err_s[tp.sh[c]] = fmax(err_s[tp.sh[c]], max_diff(x1 + (size_t)c * n_t, ref + (size_t)c * n_t, (size_t)n_t));
    printf("destripe at %g Hz, %lld samples, shanks of 70/20/3 channels: largest difference from the reference "
           "%.3g µV (per shank %.3g %.3g %.3g) of values up to %.4g µV\n",
           fs, (long long)n_t, err, err_s[0], err_s[1], err_s[2], big);
    CHECK_MSG(err <= 1e-6 * big, "error %g of %g", err, big);
    bs_destripe_free(&d);
    free(x);
    free(x1);
    free(x2);
    free(ref);
}

/* A window with a halo H around [a, b) against the whole signal. */
static void test_destripe_halo(void)
{
    test_probe tp;
    probe_init(&tp, 40, 1);
    for (int c = 0; c < 40; c++) {
        tp.xs[c] = (c % 2) * 32;
        tp.ys[c] = 20 * (c / 2);
        tp.sh[c] = 0;
    }
    const int64_t n = 12000, a = 5000, b = 7000;
    float *x = malloc(sizeof(float) * 40 * n), *whole = malloc(sizeof(float) * 40 * n), rms[40];
    destripe_data(&tp.p, n, -1, 1, x, rms);
    bs_destripe d;
    CHECK(bs_destripe_init(&tp.p, 30000.0, rms, &d) == BS_OK);
    memcpy(whole, x, sizeof(float) * 40 * n);
    CHECK(bs_destripe_apply(&d, whole, 40, n, NULL, 0) == BS_OK);
    const int64_t halos[3] = {d.hann_h, d.hann_h / 2, d.hann_h / 8};
    double errs[3], big = 0;
    for (int k = 0; k < 3; k++) {
        int64_t H = halos[k], w = b - a + 2 * H;
        float *win = malloc(sizeof(float) * 40 * w);
        for (int c = 0; c < 40; c++)
            memcpy(win + (size_t)c * w, x + (size_t)c * n + a - H, sizeof(float) * w);
        CHECK(bs_destripe_apply(&d, win, 40, w, NULL, 0) == BS_OK);
        errs[k] = 0;
        for (int c = 0; c < 40; c++)
            for (int64_t t = a; t < b; t++) {
                errs[k] = fmax(errs[k], fabs((double)win[(size_t)c * w + t - a + H] - whole[(size_t)c * n + t]));
                big = fmax(big, fabs(whole[(size_t)c * n + t]));
            }
        free(win);
    }
    printf("destripe halo (30 kHz): largest error of a window's central part against the whole signal: halo "
           "%lld (h): %.3g µV, %lld: %.3g µV, %lld: %.3g µV, of values up to %.4g µV\n",
           (long long)halos[0], errs[0], (long long)halos[1], errs[1], (long long)halos[2], errs[2], big);
    CHECK_MSG(errs[0] <= 1e-6 * big, "halo h: %g", errs[0]);
    /* it removes the stripe (channels of equal noise here, so the AGC keeps it smooth along the shank) */
    double before_ss = 0, after_ss = 0;
    for (int c = 0; c < 40; c++)
        for (int64_t t = 0; t < n; t++) {
            double st = 30 * sin(2 * M_PI * t / 97.0);
            before_ss += st * x[(size_t)c * n + t];
            after_ss += st * whole[(size_t)c * n + t];
        }
    printf("destripe: projection on the stripe %.4g before, %.4g after\n", before_ss, after_ss);
    CHECK_MSG(fabs(after_ss) < 0.05 * fabs(before_ss), "stripe projection %g -> %g", before_ss, after_ss);
    bs_destripe_free(&d);
    free(x);
    free(whole);
}

static void test_destripe_errors(void)
{
    test_probe tp;
    probe_init(&tp, 2, 1);
    tp.xs[0] = tp.xs[1] = 0;
    tp.ys[0] = 0;
    tp.ys[1] = 20;
    tp.sh[0] = tp.sh[1] = 0;
    float rms[2] = {1, NAN};
    bs_destripe d;
    CHECK(bs_destripe_init(&tp.p, 30000, rms, &d) == BS_ERR_INPUT);
    rms[1] = 1;
    CHECK(bs_destripe_init(&tp.p, 0, rms, &d) == BS_ERR_INPUT);
    tp.sh[1] = 1;
    CHECK(bs_destripe_init(&tp.p, 30000, rms, &d) == BS_ERR_INPUT);
    tp.sh[1] = 0;
    CHECK(bs_destripe_init(&tp.p, 30000, rms, &d) == BS_OK);
    float x[2 * 10] = {0};
    CHECK(bs_destripe_apply(&d, x, 3, 10, NULL, 0) == BS_ERR_INPUT);
    CHECK(bs_destripe_apply(&d, x, 2, 10, NULL, 0) == BS_OK);
    CHECK(max_abs(x, 20) == 0);
    bs_destripe_free(&d);
}

/* ------------------------------------------------ local median reference --- */

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef struct {
    double d;
    int j;
} dj;

static int cmp_dj(const void *a, const void *b)
{
    const dj *x = a, *y = b;
    if (x->d != y->d)
        return x->d < y->d ? -1 : 1;
    return x->j - y->j;
}

/* Brute force: the sorted neighbour list of channel i, as SpikeInterface's loop over argsorted distances. */
static int ref_neighbours(const bs_probe *p, int i, double r_in, double r_out, int min_nbr, int *out)
{
    dj all[512];
    int n = 0;
    for (int j = 0; j < p->n_chan; j++)
        if (j != i)
            all[n++] = (dj){hypot(p->x_um[i] - p->x_um[j], p->y_um[i] - p->y_um[j]), j};
    qsort(all, (size_t)n, sizeof *all, cmp_dj);
    int m = 0, ring = 0;
    for (int a = 0; a < n; a++)
        ring += all[a].d > r_in && all[a].d <= r_out;
    for (int a = 0; a < n; a++) {
        if (!(all[a].d > r_in))
            continue;
        if (ring >= min_nbr ? all[a].d <= r_out : m < min_nbr)
            out[m++] = all[a].j;
    }
    for (int a = 1; a < m; a++) /* increasing channel index */
        for (int b = a; b > 0 && out[b] < out[b - 1]; b--) {
            int t = out[b];
            out[b] = out[b - 1];
            out[b - 1] = t;
        }
    return m;
}

static int check_neighbourhoods(const bs_probe *p, double r_in, double r_out, int min_nbr, bs_local_ref *r)
{
    if (bs_local_ref_build(p, r_in, r_out, min_nbr, r) != BS_OK)
        return 0;
    int ok = r->n_chan == p->n_chan;
    for (int i = 0; i < p->n_chan && ok; i++) {
        int want[512];
        int m = ref_neighbours(p, i, r_in, r_out, min_nbr, want);
        ok = r->n_nbr[i] == m && memcmp(want, r->nbr + (size_t)i * r->k, sizeof(int) * m) == 0;
        if (!ok)
            fprintf(stderr, "channel %d: %d neighbours, expected %d\n", i, r->n_nbr[i], m);
    }
    return ok;
}

static void ref_car_local(const bs_local_ref *r, const float *x, int64_t n_t, float *out)
{
    float v[512];
    for (int c = 0; c < r->n_chan; c++)
        for (int64_t t = 0; t < n_t; t++) {
            int n = r->n_nbr[c];
            float med = 0;
            if (n > 0) {
                for (int j = 0; j < n; j++)
                    v[j] = x[(size_t)r->nbr[(size_t)c * r->k + j] * n_t + t];
                qsort(v, (size_t)n, sizeof *v, cmp_float);
                med = n & 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0f;
            }
            out[(size_t)c * n_t + t] = n > 0 ? x[(size_t)c * n_t + t] - med : x[(size_t)c * n_t + t];
        }
}

/* Neuropixels 1.0 layout: x = 43, 11, 59, 27 µm by row, rows 20 µm apart. */
static void np1_probe(test_probe *tp, int n)
{
    probe_init(tp, n, 1);
    static const double xs[4] = {43, 11, 59, 27};
    for (int c = 0; c < n; c++) {
        tp->xs[c] = xs[c % 4];
        tp->ys[c] = 20 * (c / 2);
        tp->sh[c] = 0;
    }
}

static void test_local_ref(void)
{
    test_probe tp;
    bs_local_ref r;
    /* NP1.0: the annulus */
    np1_probe(&tp, 96);
    CHECK(check_neighbourhoods(&tp.p, 30, 55, 5, &r));
    int lo = 1 << 30, hi = 0;
    for (int c = 0; c < 96; c++) {
        lo = r.n_nbr[c] < lo ? r.n_nbr[c] : lo;
        hi = r.n_nbr[c] > hi ? r.n_nbr[c] : hi;
    }
    printf("local reference on Neuropixels 1.0 (30, 55] µm: %d to %d neighbours per channel\n", lo, hi);
    CHECK(lo >= 5 && hi <= 24);
    bs_local_ref_free(&r);
    /* a sparse linear probe (100 µm): nothing in the annulus, the 5 nearest beyond 30 µm, ties by index;
     * plus a channel 10 µm from channel 0 and far from the rest: channel 20 */
    probe_init(&tp, 21, 1);
    for (int c = 0; c < 20; c++) {
        tp.xs[c] = 0;
        tp.ys[c] = 100.0 * c;
        tp.sh[c] = 0;
    }
    tp.xs[20] = 10;
    tp.ys[20] = 0;
    tp.sh[20] = 0;
    CHECK(check_neighbourhoods(&tp.p, 30, 55, 5, &r));
    CHECK(r.n_nbr[5] == 5 && r.nbr[5 * r.k + 0] == 2 && r.nbr[5 * r.k + 1] == 3 && r.nbr[5 * r.k + 4] == 7);
    bs_local_ref_free(&r);
    /* two channels 10 µm apart: none beyond 30 µm, both left unreferenced */
    probe_init(&tp, 2, 1);
    tp.xs[0] = tp.ys[0] = 0;
    tp.xs[1] = 10;
    tp.ys[1] = 0;
    tp.sh[0] = tp.sh[1] = 0;
    CHECK(check_neighbourhoods(&tp.p, 30, 55, 5, &r) && r.n_nbr[0] == 0 && r.n_nbr[1] == 0);
    float x2[2 * 5] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, y2[10];
    memcpy(y2, x2, sizeof x2);
    CHECK(bs_car_local(&r, y2, 5, NULL, 0) == BS_OK && memcmp(x2, y2, sizeof x2) == 0);
    bs_local_ref_free(&r);
    CHECK(bs_local_ref_build(&tp.p, 40, 30, 5, &r) == BS_ERR_INPUT);
    CHECK(bs_local_ref_build(&tp.p, -1, 30, 5, &r) == BS_ERR_INPUT);

    /* medians, bit for bit: small neighbourhoods (network), large ones (selection: radius 200 µm) */
    np1_probe(&tp, 96);
    const double r_outs[2] = {55, 200};
    for (int k = 0; k < 2; k++) {
        CHECK(check_neighbourhoods(&tp.p, 30, r_outs[k], 5, &r));
        const int64_t n_t = 16 * 37 + 5; /* a partial last tile */
        const int C = 96;
        float *x = malloc(sizeof(float) * C * n_t), *a = malloc(sizeof(float) * C * n_t),
              *b = malloc(sizeof(float) * C * n_t), *ref = malloc(sizeof(float) * C * n_t);
        for (int64_t i = 0; i < C * n_t; i++) /* coarse values: many ties, even counts with distinct middles */
            x[i] = (float)(floor(8 * nrand()) * 0.75);
        ref_car_local(&r, x, n_t, ref);
        memcpy(a, x, sizeof(float) * C * n_t);
        memcpy(b, x, sizeof(float) * C * n_t);
        omp_set_num_threads(1);
        CHECK(bs_car_local(&r, a, n_t, NULL, 0) == BS_OK);
        omp_set_num_threads(2);
        size_t sb = bs_car_local_scratch_bytes(&r, n_t, 2);
        void *sc = malloc(sb);
        CHECK(bs_car_local(&r, b, n_t, sc, sb) == BS_OK);
        free(sc);
        CHECK_MSG(memcmp(a, ref, sizeof(float) * C * n_t) == 0, "radius %g: differs from the brute force by %g",
                  r_outs[k], max_diff(a, ref, (size_t)C * n_t));
        CHECK(memcmp(a, b, sizeof(float) * C * n_t) == 0);
        printf("local reference (30, %g] µm: %d neighbours at most, same bytes as the brute-force medians\n",
               r_outs[k], r.k);
        free(x);
        free(a);
        free(b);
        free(ref);
        bs_local_ref_free(&r);
    }
}

/* -------------------------------------------------------------- timing --- */

static void test_timing(void)
{
    test_probe tp;
    np1_probe(&tp, 384);
    const int C = 384;
    const int64_t n_t = 60000;
    float *x = malloc(sizeof(float) * C * n_t), rms[384];
    destripe_data(&tp.p, n_t, -1, 0, x, rms);
    omp_set_num_threads(2);
    bs_destripe d;
    bs_local_ref r;
    CHECK(bs_destripe_init(&tp.p, 30000, rms, &d) == BS_OK);
    CHECK(bs_local_ref_build(&tp.p, 30, 55, 5, &r) == BS_OK);
    size_t sb = bs_destripe_scratch_bytes(&d, n_t, 2), sl = bs_car_local_scratch_bytes(&r, n_t, 2);
    char *sc = malloc(sb > sl ? sb : sl);
    memset(sc, 0, sb > sl ? sb : sl);
    double best_d = 1e9, best_l = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = omp_get_wtime();
        CHECK(bs_destripe_apply(&d, x, C, n_t, sc, sb) == BS_OK);
        double t1 = omp_get_wtime();
        CHECK(bs_car_local(&r, x, n_t, sc, sl) == BS_OK);
        double t2 = omp_get_wtime();
        best_d = fmin(best_d, t1 - t0);
        best_l = fmin(best_l, t2 - t1);
    }
    printf("timing, 384 channels x 60000 samples (2 s at 30 kHz), 2 threads, best of 3: destripe %.3f s "
           "(%.0fx real time), local median reference %.3f s (%.0fx real time)\n",
           best_d, 2.0 / best_d, best_l, 2.0 / best_l);
    free(sc);
    free(x);
    bs_destripe_free(&d);
    bs_local_ref_free(&r);
}

int main(void)
{
    test_gain_precision();
    test_destripe_against_reference(10000.0, 3000); /* h = 500 */
    test_destripe_against_reference(2500.0, 200);   /* h = 125: the AGC window is longer than the 200 samples */
    test_destripe_halo();
    test_destripe_errors();
    test_local_ref();
    if (!getenv("BS_SANITIZED"))
        test_timing();
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
