/*
 * test_unit_type.c - the waveform-shape metrics (qc_shape.c) on templates
 * whose answers are known in closed form, and the unit-type rules
 * (qc_unit_type.c) on hand-made metric rows. The comparison with
 * SpikeInterface's own template_metrics and bombcell_label_units on sorted
 * data is tests/cli/test_unit_type.sh.
 *
 *   - upsampling: a band-limited sine (well below the FIR cutoff) comes back
 *     on the fine grid to 2e-3 of its amplitude away from the edges;
 *   - a biphasic template (Gaussian trough at 1 ms, Gaussian peak 0.4 ms
 *     later): one trough, one peak, peak_to_trough_duration 0.4 ms to one
 *     upsampled sample, trough width (find_peaks: full width at half
 *     prominence of a Gaussian, 2.3548 sigma) to 1 %, ratios exact;
 *   - a ringing template (damped 3 kHz oscillation): several troughs;
 *   - a flat template: NaNs, no crash;
 *   - exp_decay of amplitudes that are exactly A exp(-k d) + o recovers k;
 *     a flat footprint is below Bombcell's lower bound; too few channels NaN;
 *   - the rules: each section's logic (noise NaN fails, mua NaN passes but
 *     sliding_rp_violation's NaN fails, non-somatic narrow AND large ratio
 *     OR large main peak), exp_decay skipped without multi-channel metrics,
 *     inclusive bounds, |amplitude|, and the reason text.
 */
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc.h"
#include "qc/qc_internal.h"

#define FS 30000.0
#define NT 90 /* 1 ms before, 2 ms after */

static double *row_new(void)
{
    double *m = malloc(sizeof *m * BS_QC_N_METRICS);
    for (int i = 0; i < BS_QC_N_METRICS; i++)
        m[i] = NAN;
    return m;
}

static void shape(const float *t, int n_ch, const float *chan, const double *x, const double *y, int multi,
                  double *m)
{
    bs_qc_params p;
    bs_qc_default_params(&p);
    void *work = malloc(bs_qc_shape_work_bytes(NT, n_ch, p.shape_upsampling));
    bs_qc_shape_work_init(work, p.shape_upsampling);
    bs_qc_shape_metrics(t, NT, chan, n_ch, x, y, multi, FS, &p, m, work);
    free(work);
}

static void test_upsample(void)
{
    float x[NT], h[201];
    double y[NT * 10];
    CHECK(qc_upsample_taps(10, h) == 201);
    double s = 0;
    for (int i = 0; i < 201; i++)
        s += h[i];
    CHECK_NEAR(s, 10.0, 1e-4); /* unit DC gain times the factor */
    for (int i = 0; i < NT; i++)
        x[i] = (float)sin(2 * M_PI * 1000.0 * i / FS);
    qc_upsample(x, NT, 10, h, y);
    double worst = 0;
    for (int m = 200; m < NT * 10 - 200; m++)
        worst = fmax(worst, fabs(y[m] - sin(2 * M_PI * 1000.0 * (m / 10.0) / FS)));
    CHECK_MSG(worst < 2e-3, "upsampled sine off by %g", worst); /* Kaiser (beta 5) passband ripple ~1e-3 */
}

static void test_biphasic(void)
{
    float t[NT];
    double sig_t = 0.08e-3, sig_p = 0.15e-3; /* s */
    for (int i = 0; i < NT; i++) {
        double s = i / FS - 1e-3;
        t[i] = (float)(-100.0 * exp(-0.5 * s * s / (sig_t * sig_t)) +
                       40.0 * exp(-0.5 * (s - 0.4e-3) * (s - 0.4e-3) / (sig_p * sig_p)));
    }
    double *m = row_new();
    shape(t, 0, NULL, NULL, NULL, 0, m);
    CHECK(m[BS_QC_NUM_NEGATIVE_PEAKS] == 1);
    CHECK(m[BS_QC_NUM_POSITIVE_PEAKS] == 1);
    CHECK_MSG(fabs(m[BS_QC_PEAK_TO_TROUGH_DURATION] - 0.4e-3) <= 1.5 / (10 * FS), "duration %g",
              m[BS_QC_PEAK_TO_TROUGH_DURATION]);
    /* the trough's prominence reaches from its bottom to the higher base: its width at half prominence
     * is close to the Gaussian's full width at half maximum for a trough this much larger than the peak */
    CHECK_MSG(fabs(m[BS_QC_TROUGH_WIDTH] / (2.3548 * sig_t) - 1) < 0.08, "trough width %g",
              m[BS_QC_TROUGH_WIDTH]);
    CHECK_NEAR(m[BS_QC_PEAK_AFTER_TO_TROUGH_RATIO], 0.4, 0.02);
    CHECK(isnan(m[BS_QC_PEAK_BEFORE_WIDTH]));   /* no peak before: the window's maximum, no width */
    CHECK(m[BS_QC_REPOLARIZATION_SLOPE] > 0);    /* rising from the trough */
    CHECK(m[BS_QC_RECOVERY_SLOPE] < 0);          /* falling after the peak */
    CHECK(m[BS_QC_WAVEFORM_BASELINE_FLATNESS] < 0.05);
    CHECK(isnan(m[BS_QC_EXP_DECAY]));            /* multi-channel metrics off */
    free(m);
}

static void test_ringing_and_flat(void)
{
    float t[NT];
    for (int i = 0; i < NT; i++) {
        double s = i / FS - 1e-3 + 1.0 / 12000.0;
        t[i] = s < 0 ? 0.0f : (float)(-100.0 * sin(2 * M_PI * 3000.0 * s) * exp(-s / 0.8e-3));
    }
    double *m = row_new();
    shape(t, 0, NULL, NULL, NULL, 0, m);
    CHECK_MSG(m[BS_QC_NUM_NEGATIVE_PEAKS] >= 2, "ringing: %g troughs", m[BS_QC_NUM_NEGATIVE_PEAKS]);
    bs_unit_type_rules r;
    bs_unit_type_default_rules(&r);
    char why[256];
    CHECK(bs_unit_type_of(m, &r, 0, why, sizeof why) == BS_UNIT_NOISE);
    CHECK_MSG(strncmp(why, "noise: ", 7) == 0, "%s", why);
    memset(t, 0, sizeof t);
    shape(t, 0, NULL, NULL, NULL, 0, m);
    CHECK(isnan(m[BS_QC_PEAK_AFTER_TO_TROUGH_RATIO]) && isnan(m[BS_QC_WAVEFORM_BASELINE_FLATNESS]));
    CHECK(bs_unit_type_of(m, &r, 0, why, sizeof why) == BS_UNIT_NOISE);
    free(m);
}

static void test_exp_decay(void)
{
    enum { C = 12 };
    float t[NT], chan[C * NT];
    double x[C], y[C], k = 0.03, A = 150, o = 5;
    for (int i = 0; i < NT; i++) {
        double s = i / FS - 1e-3;
        t[i] = (float)(-exp(-0.5 * s * s / (0.1e-3 * 0.1e-3)));
    }
    for (int j = 0; j < C; j++) {
        x[j] = (j % 2) * 32.0;
        y[j] = 20.0 * (j / 2);
        double d = sqrt(x[j] * x[j] + y[j] * y[j]), a = A * exp(-k * d) + o;
        for (int i = 0; i < NT; i++)
            chan[j * NT + i] = (float)(a * t[i]); /* peak-to-peak = a (the template spans -1..0) */
    }
    double *m = row_new();
    shape(chan, C, chan, x, y, 1, m);
    CHECK_MSG(fabs(m[BS_QC_EXP_DECAY] / k - 1) < 2e-3, "exp_decay %g, want %g", m[BS_QC_EXP_DECAY], k);
    for (int j = 0; j < C; j++) /* flat footprint */
        for (int i = 0; i < NT; i++)
            chan[j * NT + i] = (float)((100.0 - 0.05 * y[j]) * t[i]);
    shape(chan, C, chan, x, y, 1, m);
    CHECK_MSG(!(m[BS_QC_EXP_DECAY] >= 0.01), "flat footprint: exp_decay %g", m[BS_QC_EXP_DECAY]);
    shape(chan, 2, chan, x, y, 1, m); /* two channels: no fit */
    CHECK(isnan(m[BS_QC_EXP_DECAY]));
    free(m);
}

/* A row that passes every default rule. */
static void good_row(double *m)
{
    m[BS_QC_NUM_POSITIVE_PEAKS] = 1;
    m[BS_QC_NUM_NEGATIVE_PEAKS] = 1;
    m[BS_QC_PEAK_TO_TROUGH_DURATION] = 0.0005;
    m[BS_QC_WAVEFORM_BASELINE_FLATNESS] = 0.1;
    m[BS_QC_PEAK_AFTER_TO_TROUGH_RATIO] = 0.3;
    m[BS_QC_EXP_DECAY] = 0.03;
    m[BS_QC_AMPLITUDE_MEDIAN] = -80;
    m[BS_QC_SNR] = 8;
    m[BS_QC_AMPLITUDE_CUTOFF] = 0.01;
    m[BS_QC_NUM_SPIKES] = 1000;
    m[BS_QC_SLIDING_RP] = 0.02;
    m[BS_QC_PRESENCE_RATIO] = 1;
    m[BS_QC_DRIFT_PTP] = 10;
    m[BS_QC_ISOLATION_DISTANCE] = 50;
    m[BS_QC_L_RATIO] = 0.01;
    m[BS_QC_PEAK_BEFORE_TO_TROUGH_RATIO] = 0.2;
    m[BS_QC_PEAK_BEFORE_WIDTH] = 0.0003;
    m[BS_QC_TROUGH_WIDTH] = 0.0004;
    m[BS_QC_PEAK_BEFORE_TO_PEAK_AFTER_RATIO] = 0.5;
    m[BS_QC_MAIN_PEAK_TO_TROUGH_RATIO] = 0.3;
}

static void test_rules(void)
{
    bs_unit_type_rules r;
    bs_unit_type_default_rules(&r);
    double *m = row_new();
    char why[256];
    good_row(m);
    CHECK(bs_unit_type_of(m, &r, 1, why, sizeof why) == BS_UNIT_GOOD && strcmp(why, "passes") == 0);
    m[BS_QC_NUM_POSITIVE_PEAKS] = 2; /* inclusive bound */
    CHECK(bs_unit_type_of(m, &r, 1, NULL, 0) == BS_UNIT_GOOD);
    m[BS_QC_EXP_DECAY] = NAN; /* noise: NaN fails, unless the metric is not computed on this probe */
    CHECK(bs_unit_type_of(m, &r, 1, why, sizeof why) == BS_UNIT_NOISE);
    CHECK_MSG(strcmp(why, "noise: exp_decay=nan (nan fails)") == 0, "%s", why);
    CHECK(bs_unit_type_of(m, &r, 0, NULL, 0) == BS_UNIT_GOOD);
    good_row(m);
    m[BS_QC_SNR] = NAN; /* mua: NaN passes... */
    CHECK(bs_unit_type_of(m, &r, 1, NULL, 0) == BS_UNIT_GOOD);
    m[BS_QC_SLIDING_RP] = NAN; /* ...except the sliding refractory period's */
    CHECK(bs_unit_type_of(m, &r, 1, why, sizeof why) == BS_UNIT_MUA);
    CHECK_MSG(strcmp(why, "mua: sliding_rp_violation=nan (nan fails)") == 0, "%s", why);
    good_row(m);
    m[BS_QC_AMPLITUDE_MEDIAN] = -20; /* |amplitude| */
    CHECK(bs_unit_type_of(m, &r, 1, why, sizeof why) == BS_UNIT_MUA);
    CHECK_MSG(strcmp(why, "mua: |amplitude_median|=20 (needs >= 30)") == 0, "%s", why);
    good_row(m);
    m[BS_QC_PEAK_BEFORE_TO_TROUGH_RATIO] = 4; /* large ratio, not narrow: somatic */
    CHECK(bs_unit_type_of(m, &r, 1, NULL, 0) == BS_UNIT_GOOD);
    m[BS_QC_PEAK_BEFORE_WIDTH] = 0.0001; /* one width narrow: still somatic */
    CHECK(bs_unit_type_of(m, &r, 1, NULL, 0) == BS_UNIT_GOOD);
    m[BS_QC_TROUGH_WIDTH] = 0.0001; /* both narrow and a large ratio */
    CHECK(bs_unit_type_of(m, &r, 1, why, sizeof why) == BS_UNIT_NON_SOMATIC);
    CHECK_MSG(strncmp(why, "non-somatic: peak_before_to_trough_ratio=4", 42) == 0, "%s", why);
    m[BS_QC_SNR] = 1; /* non-somatic wins over mua, as SpikeInterface without the split */
    CHECK(bs_unit_type_of(m, &r, 1, NULL, 0) == BS_UNIT_NON_SOMATIC);
    good_row(m);
    m[BS_QC_MAIN_PEAK_TO_TROUGH_RATIO] = 0.9; /* large main peak alone */
    CHECK(bs_unit_type_of(m, &r, 1, NULL, 0) == BS_UNIT_NON_SOMATIC);
    m[BS_QC_NUM_NEGATIVE_PEAKS] = 3; /* noise first */
    CHECK(bs_unit_type_of(m, &r, 1, NULL, 0) == BS_UNIT_NOISE);
    CHECK(strcmp(bs_unit_type_names[BS_UNIT_NON_SOMATIC], "non-somatic") == 0);
    free(m);
}

int main(void)
{
    test_upsample();
    test_biphasic();
    test_ringing_and_flat();
    test_exp_decay();
    test_rules();
    TEST_MAIN_END();
}
