/*
 * test_drift.c - the drift module on synthetic inputs (fast):
 *   - quality check: per-shank mode and note from the geometry (too few
 *     contacts or too short -> none; too short for the requested blocks ->
 *     fewer blocks or rigid), and from the data (too few spikes -> none);
 *   - registration of synthetic spike tables with a known motion (rigid
 *     sinusoid, step, depth-dependent), its sign convention, two shanks
 *     moving differently and never mixed, identical results for 1 and 2
 *     threads;
 *   - channel shifts interpolated between blocks, kriging weights, and the
 *     corrector: a smooth field seen through the composed whitener equals
 *     the field at the shifted positions, rows of uncorrected shanks are W's;
 *   - the peak detector: one spike of known depth found once, at its
 *     sample, with its depth; noise alone gives nothing; thread-independent.
 */
#include <omp.h>

#include "common/rng.h"
#include "drift/drift.h"
#include "io/recording.h"
#include "mem/mem.h"
#include "test.h"

/* A probe of `n_shanks` shanks, each `per` contacts in `cols` columns
 * (staggered by half a row when cols == 2), rows `pitch` µm apart. */
static void make_probe(bs_probe *p, int n_shanks, int per, int cols, double pitch)
{
    CHECK(bs_probe_alloc(p, n_shanks * per) == BS_OK);
    for (int s = 0; s < n_shanks; s++)
        for (int i = 0; i < per; i++) {
            int c = s * per + i, row = i / cols, col = i % cols;
            p->x_um[c] = 250.0 * s + 32.0 * col;
            p->y_um[c] = pitch * row + (cols == 2 && col ? 0.5 * pitch : 0.0);
            p->shank[c] = s;
            p->column[c] = c;
        }
    p->n_shanks = n_shanks;
}

/* ------------------------------------------------------------ geometry --- */

static void test_quality_geometry(void)
{
    bs_drift_params dp;
    bs_drift_default_params(&dp);
    struct {
        int per, cols;
        double pitch;
        int blocks;
        bs_drift_mode mode;
        int n_out;
        const char *note;
    } cases[] = {
        {6, 1, 25, 5, BS_DRIFT_NONE, 1, "fewer than the 8"},     /* 6 contacts */
        {8, 1, 20, 5, BS_DRIFT_NONE, 1, "less than the 200"},    /* 140 µm */
        {32, 1, 25, 5, BS_DRIFT_RIGID, 1, "rigid correction"},   /* 775 µm: < 2 x 400 */
        {48, 1, 20, 5, BS_DRIFT_NONRIGID, 3, "fewer blocks (2)"}, /* 940 µm: 2 blocks -> 3 */
        {192, 1, 20, 5, BS_DRIFT_NONRIGID, 9, ""},                /* 3820 µm: 5 blocks -> 9 */
        {192, 1, 20, 1, BS_DRIFT_RIGID, 1, ""},                   /* rigid asked */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bs_probe p;
        make_probe(&p, 1, cases[i].per, cases[i].cols, cases[i].pitch);
        dp.n_blocks = cases[i].blocks;
        bs_drift d;
        CHECK(bs_drift_init(&d, &p, &dp, 300000, 60000, 30000.0) == BS_OK);
        CHECK_MSG(d.sh[0].mode == cases[i].mode, "case %zu: mode %s", i, bs_drift_mode_name(d.sh[0].mode));
        CHECK_MSG(d.n_blocks == cases[i].n_out, "case %zu: %d blocks", i, d.n_blocks);
        CHECK_MSG(cases[i].note[0] ? strstr(d.sh[0].note, cases[i].note) != NULL : d.sh[0].note[0] == 0,
                  "case %zu: note '%s'", i, d.sh[0].note);
        CHECK(bs_drift_any(&d) == (cases[i].mode != BS_DRIFT_NONE));
        CHECK(d.n_bins == 5);
        CHECK_NEAR(d.times_s[4], 9.0, 1e-6);
        bs_drift_free(&d);
        bs_probe_free(&p);
    }
}

/* ------------------------------------------------------- registration --- */

typedef double (*motion_fn)(int t, int B, double y);

static double m_sine(int t, int B, double y) { (void)y; return 20.0 * sin(2.0 * M_PI * (t + 0.5) / B); }
static double m_step(int t, int B, double y) { (void)y; return t >= B / 2 ? 20.0 : 0.0; }
static double m_depth(int t, int B, double y) { return (0.2 + 1.6 * y / 3000.0) * 15.0 * sin(2.0 * M_PI * (t + 0.5) / B); }
static double m_zero(int t, int B, double y) { (void)t, (void)B, (void)y; return 0.0; }

/* Spikes of n_units units on shank s (depth span [y0, y1]) for time bin t:
 * each unit fires about `rate` spikes at its depth moved by f, ±2 µm. */
static int64_t synth_spikes(bs_drift_spike *sp, int s, double y0, double y1, int n_units, double rate, int t, int B,
                            motion_fn f, uint64_t seed)
{
    bs_rng r;
    bs_rng_seed(&r, seed);
    int64_t n = 0;
    for (int u = 0; u < n_units; u++) {
        double y = y0 + 60 + (y1 - y0 - 120) * bs_rng_uniform(&r);
        double amp = 6.0 * exp(2.0 * bs_rng_uniform(&r));
        bs_rng ru;
        bs_rng_seed(&ru, seed * 7919 + (uint64_t)u * 104729 + (uint64_t)t);
        int k = (int)(rate * (0.5 + bs_rng_uniform(&ru)));
        for (int i = 0; i < k; i++)
            sp[n++] = (bs_drift_spike){.t = t, .y_um = (float)(y + f(t, B, y) + 2.0 * bs_rng_normal(&ru)),
                                       .amp = (float)(amp * (1 + 0.1 * bs_rng_normal(&ru))), .chan = 0, .shank = s};
    }
    return n;
}

/* RMS of (estimate - truth - mean difference) over a shank's bins and blocks. */
static double motion_rms(const bs_drift *d, int s, motion_fn f)
{
    const bs_drift_shank *sh = &d->sh[s];
    double sd = 0, se = 0;
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int t = 0; t < d->n_bins; t++)
            for (int j = 0; j < sh->n_blocks; j++) {
                int k = sh->block0 + j;
                double e = d->motion_um[(size_t)t * d->n_blocks + k] - f(t, d->n_bins, d->depths_um[k]);
                if (pass == 0) {
                    sd += e;
                    n++;
                } else {
                    e -= sd / n;
                    se += e * e;
                }
            }
    return sqrt(se / n);
}

/* RMS of (channel shift - truth at the channel - mean difference): what the
 * correction applies. */
static double channel_rms(const bs_drift *d, const bs_probe *p, motion_fn f)
{
    float sh[512];
    double sd = 0, se = 0;
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int t = 0; t < d->n_bins; t++) {
            bs_drift_channel_shifts(d, p, t, sh);
            for (int c = 0; c < p->n_chan; c++) {
                double e = sh[c] - f(t, d->n_bins, p->y_um[c]);
                if (pass == 0) {
                    sd += e;
                    n++;
                } else {
                    e -= sd / n;
                    se += e * e;
                }
            }
        }
    return sqrt(se / n);
}

static bs_drift_spike spikes[400000];

/* Estimate a synthetic motion on a 3000 µm shank; returns the RMS error
 * over blocks (and over channels in *ch_rms when not NULL). */
static double run_synthetic(motion_fn f, int n_blocks, int threads, bs_drift *d, double *ch_rms)
{
    bs_probe p;
    make_probe(&p, 1, 151, 1, 20); /* 3000 µm */
    bs_drift_params dp;
    bs_drift_default_params(&dp);
    dp.n_blocks = n_blocks;
    const int B = 30;
    CHECK(bs_drift_init(d, &p, &dp, (int64_t)B * 60000, 60000, 30000.0) == BS_OK);
    for (int t = 0; t < B; t++) {
        int64_t n = synth_spikes(spikes, 0, 0, 3000, 80, 10, t, B, f, 42);
        CHECK(bs_drift_add(d, t, spikes, n) == BS_OK);
    }
    omp_set_num_threads(threads);
    CHECK(bs_drift_estimate(d) == BS_OK);
    omp_set_num_threads(2);
    if (ch_rms)
        *ch_rms = channel_rms(d, &p, f);
    bs_probe_free(&p);
    return motion_rms(d, 0, f);
}

static void test_registration(void)
{
    bs_drift d1, d2;
    double e = run_synthetic(m_sine, 1, 2, &d1, NULL);
    printf("synthetic rigid sinusoid (20 µm), rigid estimate: RMS error %.2f µm\n", e);
    CHECK(e <= 1.5);
    CHECK(d1.sh[0].mode == BS_DRIFT_RIGID && d1.n_blocks == 1);
    /* sign: units appear higher (larger y) in bin 7 (sin > 0) than in bin 22 */
    CHECK(d1.motion_um[7] > 15 && d1.motion_um[22] < -15);
    bs_drift_free(&d1);

    e = run_synthetic(m_step, 5, 2, &d1, NULL);
    printf("synthetic 20 µm step, nonrigid estimate: RMS error %.2f µm\n", e);
    CHECK(e <= 1.5);
    CHECK(d1.n_blocks == 9);
    bs_drift_free(&d1);

    double ch_nr, ch_r;
    e = run_synthetic(m_depth, 5, 2, &d1, &ch_nr);
    printf("synthetic depth-dependent sinusoid, nonrigid estimate: RMS error %.2f µm (per channel %.2f µm)\n", e, ch_nr);
    CHECK(e <= 2.5 && ch_nr <= 3.0);
    bs_drift_free(&d1);
    run_synthetic(m_depth, 1, 2, &d1, &ch_r);
    printf("  the same with a rigid estimate: per channel RMS error %.2f µm\n", ch_r);
    CHECK(ch_r > ch_nr + 3.0); /* the blocks capture what one rigid shift cannot */
    bs_drift_free(&d1);

    e = run_synthetic(m_zero, 5, 2, &d1, NULL);
    printf("synthetic no motion: RMS %.2f µm\n", e);
    CHECK(e <= 1.0);
    bs_drift_free(&d1);

    /* identical for 1 and 2 threads */
    run_synthetic(m_depth, 5, 1, &d1, NULL);
    run_synthetic(m_depth, 5, 2, &d2, NULL);
    CHECK(d1.n_blocks == d2.n_blocks &&
          memcmp(d1.motion_um, d2.motion_um, (size_t)d1.n_bins * d1.n_blocks * sizeof(float)) == 0);
    bs_drift_free(&d1);
    bs_drift_free(&d2);
}

static void test_two_shanks(void)
{
    bs_probe p;
    make_probe(&p, 2, 48, 2, 30); /* two 705 µm shanks, 48 contacts each */
    bs_drift_params dp;
    bs_drift_default_params(&dp);
    const int B = 30;
    bs_drift d, d0;
    for (int junk = 0; junk < 2; junk++) {
        bs_drift *D = junk ? &d0 : &d;
        CHECK(bs_drift_init(D, &p, &dp, (int64_t)B * 60000, 60000, 30000.0) == BS_OK);
        for (int t = 0; t < B; t++) {
            int64_t n = synth_spikes(spikes, 0, 0, 705, 25, 10, t, B, m_sine, 3);
            /* shank 1: a step, or (second run) a burst of spikes at shank 0's depths */
            n += synth_spikes(spikes + n, 1, 0, 705, 25, junk ? 40 : 10, t, B, junk ? m_zero : m_step, junk ? 99 : 4);
            CHECK(bs_drift_add(D, t, spikes, n) == BS_OK);
        }
        CHECK(bs_drift_estimate(D) == BS_OK);
    }
    CHECK(d.n_blocks == 2 && d.block_shank[0] == 0 && d.block_shank[1] == 1);
    CHECK(d.sh[0].mode == BS_DRIFT_RIGID && d.sh[1].mode == BS_DRIFT_RIGID);
    double e0 = motion_rms(&d, 0, m_sine), e1 = motion_rms(&d, 1, m_step);
    double x0 = motion_rms(&d, 0, m_step), x1 = motion_rms(&d, 1, m_sine);
    printf("two shanks: shank 0 (sinusoid) RMS %.2f µm, shank 1 (step) RMS %.2f µm; crossed %.2f / %.2f µm\n", e0, e1,
           x0, x1);
    CHECK(e0 <= 1.5 && e1 <= 1.5);
    CHECK(x0 > 5 && x1 > 5);
    /* shank 0's estimate does not depend on what happens on shank 1 */
    int same = 1;
    for (int t = 0; t < B; t++)
        same &= d.motion_um[(size_t)t * 2] == d0.motion_um[(size_t)t * 2];
    CHECK(same);
    bs_drift_free(&d);
    bs_drift_free(&d0);
    bs_probe_free(&p);
}

static void test_quality_data(void)
{
    bs_probe p;
    make_probe(&p, 1, 40, 1, 20); /* 780 µm: rigid */
    bs_drift_params dp;
    bs_drift_default_params(&dp);
    bs_drift d;
    CHECK(bs_drift_init(&d, &p, &dp, 10 * 60000, 60000, 30000.0) == BS_OK);
    CHECK(d.sh[0].mode == BS_DRIFT_RIGID);
    for (int t = 0; t < 10; t++) { /* about 6 spikes per bin */
        int64_t n = synth_spikes(spikes, 0, 0, 780, 2, 4, t, 10, m_sine, 5);
        CHECK(bs_drift_add(&d, t, spikes, n) == BS_OK);
    }
    CHECK(bs_drift_estimate(&d) == BS_OK);
    CHECK(d.sh[0].mode == BS_DRIFT_NONE);
    CHECK_MSG(strstr(d.sh[0].note, "median of") != NULL, "note '%s'", d.sh[0].note);
    CHECK(!bs_drift_any(&d));
    int zero = 1;
    for (int t = 0; t < d.n_bins; t++)
        zero &= d.motion_um[t] == 0.0f;
    CHECK(zero);
    CHECK(bs_drift_add(&d, 10, spikes, 1) != BS_OK); /* time bin out of range */
    bs_drift_free(&d);
    bs_probe_free(&p);
}

/* ---------------------------------------------------------- correction --- */

static double field(double x, double y) { return exp(-((y - 700.0) * (y - 700.0)) / (2 * 60.0 * 60.0)) * (1 + 0.001 * x); }

static void test_correction(void)
{
    bs_probe p;
    make_probe(&p, 2, 96, 2, 20); /* two staggered 2-column shanks, 940 µm */
    const int C = p.n_chan;
    bs_drift_params dp;
    bs_drift_default_params(&dp);
    bs_drift d;
    CHECK(bs_drift_init(&d, &p, &dp, 3 * 60000, 60000, 30000.0) == BS_OK);
    CHECK(d.sh[0].mode == BS_DRIFT_NONRIGID && d.sh[0].n_blocks == 3);
    /* shank 0: motion 10 µm (bottom block) .. 30 µm (top block) in bin 1; shank 1 not corrected */
    d.sh[1].mode = BS_DRIFT_NONE;
    for (int j = 0; j < 3; j++)
        d.motion_um[1 * d.n_blocks + j] = (float)(10.0 + 10.0 * j);
    float *shift = bs_mem_alloc("test/drift", (size_t)C * sizeof *shift);
    bs_drift_channel_shifts(&d, &p, 1, shift);
    int ok_interp = 1;
    for (int c = 0; c < C; c++) {
        double y = p.y_um[c], want;
        if (p.shank[c] == 1)
            want = 0;
        else if (y <= d.depths_um[0])
            want = 10;
        else if (y >= d.depths_um[2])
            want = 30;
        else if (y <= d.depths_um[1])
            want = 10 + 10 * (y - d.depths_um[0]) / (d.depths_um[1] - d.depths_um[0]);
        else
            want = 20 + 10 * (y - d.depths_um[1]) / (d.depths_um[2] - d.depths_um[1]);
        ok_interp &= fabs(shift[c] - want) < 1e-3;
    }
    CHECK(ok_interp);

    /* identity whitener: the composed matrix is the kriging matrix */
    bs_whitener W = {.n_chan = C, .k = 1};
    W.n_nbr = bs_mem_alloc("test/drift", (size_t)C * sizeof(int));
    W.nbr = bs_mem_alloc("test/drift", (size_t)C * sizeof(int));
    W.w = bs_mem_alloc("test/drift", (size_t)C * sizeof(float));
    for (int c = 0; c < C; c++)
        W.n_nbr[c] = 1, W.nbr[c] = c, W.w[c] = 2.0f;
    bs_drift_corrector corr;
    CHECK(bs_drift_corrector_init(&corr, &d, &p, &W) == BS_OK);
    const bs_whitener *wb = NULL, *wb2 = NULL;
    CHECK(bs_drift_corrector_whitener(&corr, 1, &wb) == BS_OK);
    CHECK(bs_drift_corrector_whitener(&corr, 1, &wb2) == BS_OK && wb2 == wb);
    float *x = bs_mem_alloc("test/drift", (size_t)C * sizeof *x);
    for (int c = 0; c < C; c++)
        x[c] = (float)field(p.x_um[c], p.y_um[c]);
    CHECK(bs_whiten_apply(wb, x, 1, NULL, 0) == BS_OK);
    double worst = 0;
    int rows_kept = 1;
    for (int c = 0; c < C; c++) {
        if (p.shank[c] == 1) { /* W's row unchanged */
            rows_kept &= wb->n_nbr[c] == 1 && wb->nbr[(size_t)c * wb->k] == c && wb->w[(size_t)c * wb->k] == 2.0f;
            continue;
        }
        if (p.y_um[c] + shift[c] > 900.0 - 40.0) /* near the shank's end the kriging fades: skip */
            continue;
        double want = 2.0 * field(p.x_um[c], p.y_um[c] + shift[c]);
        double e = fabs(x[c] - want);
        worst = e > worst ? e : worst;
    }
    printf("kriging: worst error %.4f on a field of peak 2 (shifts 10..30 µm)\n", worst);
    CHECK(worst < 0.02);
    CHECK(rows_kept);

    /* kriging weights reproduce a contact's own value when the target is on it (ridge 0) */
    int cand[3] = {10, 11, 12};
    double work[9], a[3];
    CHECK(bs_drift_krige(p.x_um, p.y_um, cand, 3, p.x_um[11], p.y_um[11], 20.0, 0.0, work, a) == BS_OK);
    CHECK_NEAR(a[1], 1.0, 1e-9);
    CHECK_NEAR(a[0], 0.0, 1e-9);

    bs_drift_corrector_free(&corr);
    bs_mem_free(W.n_nbr), bs_mem_free(W.nbr), bs_mem_free(W.w);
    bs_mem_free(x);
    bs_mem_free(shift);
    bs_drift_free(&d);
    bs_probe_free(&p);
}

/* ---------------------------------------------------------------- peaks --- */

static void test_peaks(void)
{
    bs_probe p;
    make_probe(&p, 1, 64, 2, 20); /* staggered: a contact every 10 µm of depth */
    const int C = p.n_chan;
    const int64_t halo = 100, nv = 9000, nt = nv + 2 * halo;
    float *x = bs_mem_alloc("test/drift", (size_t)C * nt * sizeof *x);
    bs_rng r;
    bs_rng_seed(&r, 8);
    for (int64_t i = 0; i < (int64_t)C * nt; i++)
        x[i] = (float)(10.0 * bs_rng_normal(&r)); /* 10 µV noise */
    /* spikes at samples 3000 (depth 203 µm) and 7000 (depth 418 µm): 150 µV
     * Gaussian troughs, spatial σ 25 µm */
    const int64_t ts[2] = {3000, 7000};
    const double ys[2] = {203.0, 418.0}, xs = 16.0;
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < C; c++) {
            double dx = p.x_um[c] - xs, dy = p.y_um[c] - ys[k];
            double g = 150.0 * exp(-(dx * dx + dy * dy) / (2 * 25.0 * 25.0));
            for (int u = -15; u <= 15; u++)
                x[(size_t)c * nt + halo + ts[k] + u] -= (float)(g * exp(-0.5 * u * u / 4.0));
        }
    bs_drift_params dp;
    bs_drift_default_params(&dp);
    dp.th = 6.0f; /* 576000 noise samples: a 5 σ noise peak is likely here */
    bs_drift_detector det;
    CHECK(bs_drift_detector_init(&det, &p, &dp, 30000.0) == BS_OK);
    bs_drift_spikes s1 = {0}, s2 = {0};
    omp_set_num_threads(1);
    CHECK(bs_drift_detect_batch(&det, x, nt, halo, nv, 1000000, NULL, &s1) == BS_OK);
    omp_set_num_threads(2);
    CHECK(bs_drift_detect_batch(&det, x, nt, halo, nv, 1000000, NULL, &s2) == BS_OK);
    CHECK(s1.n == s2.n && memcmp(s1.s, s2.s, (size_t)s1.n * sizeof *s1.s) == 0);
    CHECK_MSG(s1.n == 2, "%lld peaks, expected 2", (long long)s1.n);
    /* the scales a pass gives (its artifact check's, bs_noise_inv_scales with BS_NOISE_STEP over the own
       columns) are taken as they are: the same peaks as computing them; other scales, other peaks */
    {
        float *given = malloc((size_t)C * sizeof *given), *kept = malloc((size_t)C * sizeof *kept);
        CHECK(bs_noise_inv_scales(x, C, nt, halo, nv, BS_NOISE_STEP, "test/scales", given) == BS_OK);
        memcpy(kept, det.scale, (size_t)C * sizeof *kept);
        CHECK(memcmp(given, kept, (size_t)C * sizeof *kept) == 0); /* the detector computed the same scales */
        bs_drift_spikes s3 = {0};
        for (int c = 0; c < C; c++)
            given[c] *= 0.5f; /* everything counts half as many σ: fewer troughs pass the 6 σ bound */
        CHECK(bs_drift_detect_batch(&det, x, nt, halo, nv, 1000000, given, &s3) == BS_OK);
        CHECK(det.scale[0] == given[0]);
        CHECK_MSG(s3.n < s1.n, "%lld peaks with half the scales, %lld with the window's", (long long)s3.n,
                  (long long)s1.n);
        CHECK(bs_drift_detect_batch(&det, x, nt, halo, nv, 1000000, kept, &s3) == BS_OK);
        CHECK(s3.n == s1.n && memcmp(s3.s, s1.s, (size_t)s1.n * sizeof *s1.s) == 0);
        bs_drift_spikes_free(&s3);
        free(given);
        free(kept);
    }
    for (int64_t i = 0; i < s1.n && i < 2; i++) {
        printf("peak %lld: sample %lld, depth %.1f µm (true %.1f), amplitude %.1f σ\n", (long long)i,
               (long long)s1.s[i].t, s1.s[i].y_um, ys[i], s1.s[i].amp);
        CHECK(llabs(s1.s[i].t - (1000000 + ts[i])) <= 1); /* noise may move a flat trough by a sample */
        CHECK_NEAR(s1.s[i].y_um, ys[i], 5.0); /* a quarter of the row pitch */
        CHECK(s1.s[i].amp > 10 && s1.s[i].amp < 20);
        CHECK(s1.s[i].shank == 0);
    }
    /* noise alone gives nothing; a too-small halo is refused */
    for (int64_t i = 0; i < (int64_t)C * nt; i++)
        x[i] = (float)(10.0 * bs_rng_normal(&r));
    CHECK(bs_drift_detect_batch(&det, x, nt, halo, nv, 0, NULL, &s1) == BS_OK);
    CHECK_MSG(s1.n == 0, "%lld noise peaks", (long long)s1.n);
    CHECK(bs_drift_detect_batch(&det, x, nt, 2, nt - 4, 0, NULL, &s1) != BS_OK);
    bs_drift_detector_free(&det);
    /* the most peaks any data holds: no spatial suppression and a trough every w + 1 samples on every
       channel (off the columns the noise scale samples); the lists stay within bs_drift_peaks_bytes */
    dp.nms_radius_um = 0;
    CHECK(bs_drift_detector_init(&det, &p, &dp, 30000.0) == BS_OK);
    for (int c = 0; c < C; c++)
        for (int64_t i = 0; i < nt; i++)
            x[(size_t)c * nt + i] = (float)bs_rng_normal(&r) - ((i - halo) % (det.w + 1) == 1 ? 200.0f : 0.0f);
    bs_drift_spikes_free(&s1);
    bs_drift_spikes_free(&s2);
    s1 = (bs_drift_spikes){0};
    bs_mem_reset_peaks();
    CHECK(bs_drift_detect_batch(&det, x, nt, halo, nv, 0, NULL, &s1) == BS_OK);
    size_t bound = bs_drift_peaks_bytes(C, &dp, 30000.0, nv, 2);
    printf("a peak every %d samples on %d channels: %lld peaks, %zu B held <= %zu B\n", det.w + 1, C,
           (long long)s1.n, bs_mem_tag_peak("drift/peaks", BS_DEV_HOST), bound);
    CHECK(s1.n == (int64_t)C * ((nv - 1 + det.w) / (det.w + 1)));
    CHECK(bs_mem_tag_peak("drift/peaks", BS_DEV_HOST) <= bound);
    CHECK(2 * bs_mem_tag_peak("drift/peaks", BS_DEV_HOST) >= bound); /* and not loose by more than 2x */
    bs_drift_spikes_free(&s1);
    bs_drift_detector_free(&det);
    bs_mem_free(x);
    bs_probe_free(&p);
}

int main(void)
{
    omp_set_num_threads(2);
    test_quality_geometry();
    test_quality_data();
    test_registration();
    test_two_shanks();
    test_correction();
    test_peaks();
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
