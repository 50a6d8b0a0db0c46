/*
 * test_compare.c - the ground-truth comparison: a GT against itself, a
 * sorting with re-drawn times, a hand-built case with every number worked out
 * below, the window edge (10 vs 15 samples at 30 kHz), SpikeInterface's
 * counting rule in bursts (and its clip), the SpikeInterface fixtures under
 * tests/data/compare/ (made by make_fixtures.py with spikeinterface 0.105),
 * a large sorting, malformed folders, and where each GT unit that is not well
 * detected went (split, missed, absorbed, merged, partial).
 */
#include "test.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdint.h>
#include <sys/stat.h>

#include "common/fileio.h"
#include "io/npy.h"
#include "mem/mem.h"
#include "sim/compare.h"

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void build(bs_sorting *s, const int64_t *t, const int64_t *u, int64_t n)
{
    CHECK(bs_sorting_from_arrays(t, u, n, NULL, 0, "test", s) == BS_OK);
}

/* Both sortings from arrays, scored with the default parameters into r (checked). */
static void score_default(const int64_t *gt_t, const int64_t *gt_u, int64_t n, const int64_t *so_t,
                          const int64_t *so_u, int64_t m, bs_sorting *gt, bs_sorting *so, bs_compare_params *p,
                          bs_compare_result *r)
{
    build(gt, gt_t, gt_u, n);
    build(so, so_t, so_u, m);
    bs_compare_params_default(p);
    CHECK(bs_compare(gt, so, 30000.0, p, r) == BS_OK);
}

static const bs_compare_unit *unit_by_id(const bs_compare_result *r, int64_t id)
{
    for (int32_t a = 0; a < r->n_gt_units; a++)
        if (r->units[a].gt_id == id)
            return &r->units[a];
    return NULL;
}

static void hand_built(void)
{
    /*
     * GT (fs 30 kHz, delta 0.4 ms = 12 samples, inclusive):
     *   GT0 = {100, 1000, 2000, 3000, 4000}  GT1 = {500, 1500, 2500, 3500}  GT2 = {6000, 7000}
     * sorted:
     *   s2 = {1010, 2000}  s4 = {7013}  s5 = {3000, 4000, 6000, 7000}
     *   s7 = {105, 1010, 2000, 3012, 5000}  s9 = {500, 1500, 2500, 3500, 6000}
     * matches: GT0-s2 2, GT0-s5 2 (3000, 4000), GT0-s7 4 (3012 is exactly 12 away),
     *          GT1-s9 4, GT2-s5 2, GT2-s9 1 (6000); s4's 7013 is 13 away: none.
     * agreement = m / (n_gt + n_sorted - m):
     *   GT0-s2 2/5 = 0.4, GT0-s5 2/7, GT0-s7 4/6, GT1-s9 4/5 = 0.8, GT2-s5 2/4 = 0.5, GT2-s9 1/6.
     * Hungarian (>= 0.5): GT0-s7, GT1-s9, GT2-s5.
     *   GT0: tp 4 fn 1 fp 1 -> accuracy 4/6, precision 0.8, recall 0.8, fdr 0.2, miss 0.2
     *   GT1: tp 4 fn 0 fp 1 -> accuracy 0.8, precision 0.8, recall 1,   fdr 0.2, miss 0
     *   GT2: tp 2 fn 0 fp 2 -> accuracy 0.5, precision 0.5, recall 1,   fdr 0.5, miss 0
     * mean accuracy (2/3 + 0.8 + 0.5) / 3 = 0.6555...
     * well detected: s9 only (0.8 >= 0.8). bad: s2, s4.
     * s4: no agreement >= 0.1 -> false positive. s2: best GT0 with 0.4 >= 0.2, but GT0's
     * best is s7 -> redundant. overmerged: s5 (2/7 and 0.5 both > 0.2).
     */
    int64_t gt_t[] = {100, 1000, 2000, 3000, 4000, 500, 1500, 2500, 3500, 6000, 7000};
    int64_t gt_u[] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2};
    int64_t s_t[] = {1010, 2000, 7013, 3000, 4000, 6000, 7000, 105, 1010, 2000, 3012, 5000,
                     500, 1500, 2500, 3500, 6000};
    int64_t s_u[] = {2, 2, 4, 5, 5, 5, 5, 7, 7, 7, 7, 7, 9, 9, 9, 9, 9};
    bs_sorting gt, so;
    build(&gt, gt_t, gt_u, 11);
    build(&so, s_t, s_u, 17);
    CHECK(so.n_units == 5 && so.unit_ids[0] == 2 && so.unit_ids[4] == 9 && so.counts[3] == 5);
    CHECK(so.times[0] == 105 && so.times[16] == 7013); /* sorted by time */
    bs_compare_params p;
    bs_compare_params_default(&p);
    bs_compare_result r;
    CHECK(bs_compare(&gt, &so, 30000.0, &p, &r) == BS_OK);
    CHECK(r.delta_samples == 12);
    /* match counts, rows GT0..2, columns s2 s4 s5 s7 s9 */
    uint64_t expect[15] = {2, 0, 2, 4, 0, 0, 0, 0, 0, 4, 0, 0, 2, 0, 1};
    for (int k = 0; k < 15; k++)
        CHECK_MSG(r.match_counts[k] == expect[k], "cell %d: %" PRIu64 " != %" PRIu64, k, r.match_counts[k],
                  expect[k]);
    CHECK_NEAR(r.agreement[0 * 5 + 2], 2.0 / 7.0, 1e-15);
    CHECK_NEAR(r.agreement[2 * 5 + 4], 1.0 / 6.0, 1e-15);
    const bs_compare_unit *u0 = unit_by_id(&r, 0), *u1 = unit_by_id(&r, 1), *u2 = unit_by_id(&r, 2);
    CHECK(u0 && u0->sorted_id == 7 && u0->tp == 4 && u0->fn == 1 && u0->fp == 1 && u0->n_sorted == 5);
    CHECK_NEAR(u0->accuracy, 4.0 / 6.0, 1e-15);
    CHECK_NEAR(u0->precision, 0.8, 1e-15);
    CHECK_NEAR(u0->recall, 0.8, 1e-15);
    CHECK_NEAR(u0->false_discovery_rate, 0.2, 1e-15);
    CHECK_NEAR(u0->miss_rate, 0.2, 1e-15);
    CHECK(u1 && u1->sorted_id == 9 && u1->tp == 4 && u1->fn == 0 && u1->fp == 1);
    CHECK_NEAR(u1->accuracy, 0.8, 1e-15);
    CHECK_NEAR(u1->recall, 1.0, 1e-15);
    CHECK(u2 && u2->sorted_id == 5 && u2->tp == 2 && u2->fp == 2);
    CHECK_NEAR(u2->accuracy, 0.5, 1e-15);
    CHECK_NEAR(u2->precision, 0.5, 1e-15);
    CHECK_NEAR(u2->false_discovery_rate, 0.5, 1e-15);
    CHECK_NEAR(r.mean_accuracy, (2.0 / 3.0 + 0.8 + 0.5) / 3.0, 1e-15);
    CHECK(r.n_well_detected == 1 && r.n_bad == 2 && r.n_false_positive == 1 && r.n_redundant == 1 &&
          r.n_overmerged == 1);

    /* --well-detected 0.5 counts all three matched units */
    p.well_detected_score = 0.5;
    bs_compare_result r2;
    CHECK(bs_compare(&gt, &so, 30000.0, &p, &r2) == BS_OK && r2.n_well_detected == 3);
    bs_compare_result_free(&r2);

    /* JSON summary */
    char *js = bs_compare_json(&r, "out", "gt");
    cJSON *root = js ? cJSON_Parse(js) : NULL;
    CHECK(root != NULL && strchr(js, '\n') == NULL);
    if (root) {
        CHECK(cJSON_GetObjectItem(root, "n_redundant")->valueint == 1);
        CHECK_NEAR(cJSON_GetObjectItem(root, "mean_accuracy")->valuedouble, (2.0 / 3.0 + 1.3) / 3.0, 1e-12);
        cJSON *units = cJSON_GetObjectItem(root, "units");
        CHECK(cJSON_GetArraySize(units) == 3);
        CHECK(cJSON_GetObjectItem(cJSON_GetArrayItem(units, 2), "sorted_unit")->valueint == 5);
    }
    cJSON_Delete(root);
    free(js);
    bs_compare_result_free(&r);
    bs_sorting_free(&gt);
    bs_sorting_free(&so);
}

static void self_and_shuffled(void)
{
    /* 20 units, Poisson-like trains over 60 s at 30 kHz */
    enum { U = 20, PER = 600 };
    int64_t n = U * PER;
    int64_t *t = bs_mem_alloc("test/compare", (size_t)n * 8), *u = bs_mem_alloc("test/compare", (size_t)n * 8);
    for (int64_t i = 0; i < n; i++) {
        t[i] = (int64_t)(rnd() % (60 * 30000));
        u[i] = i / PER;
    }
    bs_sorting gt, same, shuf;
    build(&gt, t, u, n);
    build(&same, t, u, n);
    bs_compare_params p;
    bs_compare_params_default(&p);
    bs_compare_result r;
    CHECK(bs_compare(&gt, &same, 30000.0, &p, &r) == BS_OK);
    int all_one = 1;
    for (int a = 0; a < U; a++)
        all_one &= r.units[a].accuracy == 1.0 && r.units[a].precision == 1.0 && r.units[a].recall == 1.0 &&
                   r.units[a].sorted_id == r.units[a].gt_id;
    CHECK(all_one);
    CHECK(r.mean_accuracy == 1.0 && r.n_false_positive == 0 && r.n_well_detected == U && r.n_bad == 0 &&
          r.n_redundant == 0 && r.n_overmerged == 0);
    bs_compare_result_free(&r);

    /* times re-drawn at random: nothing is matched */
    for (int64_t i = 0; i < n; i++)
        t[i] = (int64_t)(rnd() % (60 * 30000));
    build(&shuf, t, u, n);
    CHECK(bs_compare(&gt, &shuf, 30000.0, &p, &r) == BS_OK);
    CHECK_MSG(r.mean_accuracy < 0.01, "mean accuracy %g", r.mean_accuracy);
    CHECK(r.n_well_detected == 0 && r.n_bad == U && r.n_false_positive == U);
    double max_agree = 0;
    for (int64_t k = 0; k < (int64_t)U * U; k++)
        if (r.agreement[k] > max_agree)
            max_agree = r.agreement[k];
    /* chance coincidences: ~600 * 600 * 25 / 1.8e6 = 5 matches per pair, agreement ~0.004 */
    CHECK_MSG(max_agree < 0.02, "max agreement %g", max_agree);
    bs_compare_result_free(&r);
    bs_sorting_free(&gt);
    bs_sorting_free(&same);
    bs_sorting_free(&shuf);
    bs_mem_free(t);
    bs_mem_free(u);
}

static void jitter(void)
{
    enum { N = 200 };
    int64_t t[N], u[N], t10[N], t15[N];
    for (int i = 0; i < N; i++) {
        t[i] = 1000 + 997 * i;
        u[i] = 3;
        t10[i] = t[i] + (i % 2 ? 10 : -10); /* 0.33 ms */
        t15[i] = t[i] + (i % 2 ? 15 : -15); /* 0.5 ms */
    }
    bs_sorting gt, s10, s15;
    build(&gt, t, u, N);
    build(&s10, t10, u, N);
    build(&s15, t15, u, N);
    bs_compare_params p;
    bs_compare_params_default(&p);
    bs_compare_result r;
    CHECK(bs_compare(&gt, &s10, 30000.0, &p, &r) == BS_OK);
    CHECK(r.units[0].tp == N && r.units[0].accuracy == 1.0 && r.n_well_detected == 1);
    bs_compare_result_free(&r);
    CHECK(bs_compare(&gt, &s15, 30000.0, &p, &r) == BS_OK);
    CHECK(r.match_counts[0] == 0 && r.units[0].sorted_id == -1 && r.units[0].accuracy == 0.0 &&
          r.n_false_positive == 1);
    bs_compare_result_free(&r);
    p.delta_ms = 0.5; /* 15 samples: inclusive */
    CHECK(bs_compare(&gt, &s15, 30000.0, &p, &r) == BS_OK);
    CHECK(r.delta_samples == 15 && r.units[0].accuracy == 1.0);
    bs_compare_result_free(&r);
    bs_sorting_free(&gt);
    bs_sorting_free(&s10);
    bs_sorting_free(&s15);

    CHECK(bs_compare_delta_samples(0.4, 30000.0) == 12);
    CHECK(bs_compare_delta_samples(0.4, 32000.0) == 12); /* 12.8 truncated */
    CHECK(bs_compare_delta_samples(0.4, 25000.0) == 10);
    CHECK(bs_compare_delta_samples(0.0, 30000.0) == 0);
}

static void burst_rule(void)
{
    /*
     * GT A = {100, 105, 110}, sorted B = {103, 108, 500}, window 12.
     * SpikeInterface's sweep: GT 100 counts with 103; GT 105 skips 103 (the last sorted
     * spike counted for the pair) and counts with 108; GT 110 counts with 103 again (103
     * is no longer the last one). Count 3 <= n_sorted 3, so it stands: agreement
     * 3 / (3 + 3 - 3) = 1, although 500 matches nothing.
     */
    int64_t a_t[] = {100, 105, 110}, a_u[] = {0, 0, 0};
    int64_t b_t[] = {103, 108, 500}, b_u[] = {0, 0, 0};
    bs_sorting a, b, b2;
    build(&a, a_t, a_u, 3);
    build(&b, b_t, b_u, 3);
    uint64_t c = 0;
    CHECK(bs_compare_match_counts(&a, &b, 12, &c) == BS_OK && c == 3);
    /* without the 500 spike the count 3 is clipped to n_sorted = 2: agreement 2/3 */
    build(&b2, b_t, b_u, 2);
    CHECK(bs_compare_match_counts(&a, &b2, 12, &c) == BS_OK && c == 2);
    bs_compare_params p;
    bs_compare_params_default(&p);
    bs_compare_result r;
    CHECK(bs_compare(&a, &b2, 30000.0, &p, &r) == BS_OK);
    CHECK_NEAR(r.agreement[0], 2.0 / 3.0, 1e-15);
    CHECK(r.units[0].tp == 2 && r.units[0].fn == 1 && r.units[0].fp == 0);
    bs_compare_result_free(&r);
    /* a GT spike counts once per sorted unit even with two sorted spikes in its window */
    int64_t one_t[] = {1000}, one_u[] = {0}, two_t[] = {995, 1005};
    bs_sorting one, two;
    build(&one, one_t, one_u, 1);
    build(&two, two_t, b_u, 2);
    CHECK(bs_compare_match_counts(&one, &two, 12, &c) == BS_OK && c == 1);
    bs_sorting_free(&a);
    bs_sorting_free(&b);
    bs_sorting_free(&b2);
    bs_sorting_free(&one);
    bs_sorting_free(&two);
}

static int check_against_expected(const bs_compare_result *r, const bs_sorting *so, const cJSON *e, const char *name)
{
    int bad = 0;
#define EXPECT_INT(field, value)                                                                      \
    do {                                                                                              \
        const cJSON *it_ = cJSON_GetObjectItem(e, field);                                             \
        if (!cJSON_IsNumber(it_) || (int64_t)it_->valuedouble != (int64_t)(value)) {                  \
            fprintf(stderr, "%s: %s = %" PRId64 ", SpikeInterface %g\n", name, field, (int64_t)(value), \
                    it_ ? it_->valuedouble : -999.0);                                                 \
            bad++;                                                                                    \
        }                                                                                             \
    } while (0)
    EXPECT_INT("n_gt_units", r->n_gt_units);
    EXPECT_INT("n_sorted_units", r->n_sorted_units);
    EXPECT_INT("n_well_detected", r->n_well_detected);
    EXPECT_INT("n_false_positive", r->n_false_positive);
    EXPECT_INT("n_redundant", r->n_redundant);
    EXPECT_INT("n_overmerged", r->n_overmerged);
    EXPECT_INT("n_bad", r->n_bad);
    EXPECT_INT("delta_samples", r->delta_samples);
    const cJSON *ids = cJSON_GetObjectItem(e, "sorted_unit_ids");
    for (int b = 0; b < so->n_units && b < cJSON_GetArraySize(ids); b++)
        if ((int64_t)cJSON_GetArrayItem(ids, b)->valuedouble != so->unit_ids[b]) {
            fprintf(stderr, "%s: sorted unit %d id %" PRId64 "\n", name, b, so->unit_ids[b]);
            bad++;
        }
    const cJSON *mc = cJSON_GetObjectItem(e, "match_counts"), *ag = cJSON_GetObjectItem(e, "agreement");
    for (int a = 0; a < r->n_gt_units; a++)
        for (int b = 0; b < r->n_sorted_units; b++) {
            double m = cJSON_GetArrayItem(cJSON_GetArrayItem(mc, a), b)->valuedouble;
            double g = cJSON_GetArrayItem(cJSON_GetArrayItem(ag, a), b)->valuedouble;
            size_t c = (size_t)a * (size_t)r->n_sorted_units + (size_t)b;
            if ((double)r->match_counts[c] != m || fabs(r->agreement[c] - g) > 1e-12) {
                fprintf(stderr, "%s: cell (%d, %d): count %" PRIu64 " agreement %.9g, SpikeInterface %g %.9g\n",
                        name, a, b, r->match_counts[c], r->agreement[c], m, g);
                bad++;
            }
        }
    const cJSON *units = cJSON_GetObjectItem(e, "units");
    if (cJSON_GetArraySize(units) != r->n_gt_units)
        bad++;
    for (int a = 0; a < r->n_gt_units && a < cJSON_GetArraySize(units); a++) {
        const cJSON *x = cJSON_GetArrayItem(units, a);
        const bs_compare_unit *u = &r->units[a];
        const cJSON *sid = cJSON_GetObjectItem(x, "sorted_unit");
        int64_t want_sid = cJSON_IsNull(sid) ? -1 : (int64_t)sid->valuedouble;
        const char *keys[] = {"accuracy", "precision", "recall", "false_discovery_rate", "miss_rate"};
        double got[] = {u->accuracy, u->precision, u->recall, u->false_discovery_rate, u->miss_rate};
        if ((int64_t)cJSON_GetObjectItem(x, "gt_unit")->valuedouble != u->gt_id || want_sid != u->sorted_id ||
            (int64_t)cJSON_GetObjectItem(x, "tp")->valuedouble != u->tp ||
            (int64_t)cJSON_GetObjectItem(x, "fn")->valuedouble != u->fn ||
            (int64_t)cJSON_GetObjectItem(x, "fp")->valuedouble != u->fp ||
            (int64_t)cJSON_GetObjectItem(x, "n_gt")->valuedouble != u->n_gt ||
            (int64_t)cJSON_GetObjectItem(x, "n_sorted")->valuedouble != u->n_sorted) {
            fprintf(stderr, "%s: GT unit %" PRId64 ": sorted %" PRId64 " tp %" PRId64 " fn %" PRId64 " fp %" PRId64
                    " differ from SpikeInterface\n", name, u->gt_id, u->sorted_id, u->tp, u->fn, u->fp);
            bad++;
        }
        for (int k = 0; k < 5; k++)
            if (fabs(got[k] - cJSON_GetObjectItem(x, keys[k])->valuedouble) > 1e-6) {
                fprintf(stderr, "%s: GT unit %" PRId64 " %s %.9g, SpikeInterface %.9g\n", name, u->gt_id, keys[k],
                        got[k], cJSON_GetObjectItem(x, keys[k])->valuedouble);
                bad++;
            }
    }
    return bad;
}

static void spikeinterface_fixtures(void)
{
    const char *data = test_env("BS_TEST_DATA", "tests/data");
    const char *cases[] = {"mixed", "burst", "random0", "random1", "random2", "random3"};
    int n_checked = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[4096], gtdir[4200], sodir[4200], exp_path[4200];
        snprintf(dir, sizeof dir, "%s/compare/%s", data, cases[i]);
        snprintf(gtdir, sizeof gtdir, "%s/gt", dir);
        snprintf(sodir, sizeof sodir, "%s/sorted", dir);
        snprintf(exp_path, sizeof exp_path, "%s/expected.json", dir);
        char *text = NULL;
        size_t len = 0;
        CHECK_MSG(bs_read_text_file(exp_path, 1 << 24, &text, &len) == BS_OK, "%s", bs_last_error());
        cJSON *exp = text ? cJSON_Parse(text) : NULL;
        free(text);
        CHECK(exp != NULL);
        if (!exp)
            continue;
        double fs = 0;
        CHECK(bs_gt_read_fs(gtdir, &fs) == BS_OK && fs == 30000.0);
        bs_sorting gt;
        CHECK_MSG(bs_sorting_load(gtdir, NULL, 0, &gt) == BS_OK, "%s", bs_last_error());
        const char *noise[] = {"noise"};
        for (int variant = 0; variant < 2; variant++) {
            bs_sorting so;
            CHECK_MSG(bs_sorting_load(sodir, noise, variant, &so) == BS_OK, "%s", bs_last_error());
            bs_compare_params p;
            bs_compare_params_default(&p);
            bs_compare_result r;
            CHECK(bs_compare(&gt, &so, fs, &p, &r) == BS_OK);
            char name[256];
            snprintf(name, sizeof name, "%s/%s", cases[i], variant ? "exclude_noise" : "all");
            int bad = check_against_expected(&r, &so, cJSON_GetObjectItem(exp, variant ? "exclude_noise" : "all"),
                                              name);
            CHECK_MSG(bad == 0, "%s: %d differences from SpikeInterface", name, bad);
            n_checked++;
            bs_compare_result_free(&r);
            bs_sorting_free(&so);
        }
        bs_sorting_free(&gt);
        cJSON_Delete(exp);
    }
    CHECK(n_checked == 12);
}

static void large(void)
{
    /* 1 million GT spikes in 100 units over 1000 s, a sorting that keeps 90%
     * with +-8 samples jitter: the sweep is linear, this takes well under a second */
    enum { U = 100 };
    const int64_t n = 1000000;
    int64_t *t = bs_mem_alloc("test/compare", (size_t)n * 8), *u = bs_mem_alloc("test/compare", (size_t)n * 8);
    int64_t *t2 = bs_mem_alloc("test/compare", (size_t)n * 8), *u2 = bs_mem_alloc("test/compare", (size_t)n * 8);
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        t[i] = (int64_t)(rnd() % (1000ull * 30000ull));
        u[i] = (int64_t)(rnd() % U);
        if (rnd() % 10 != 0) {
            t2[m] = t[i] + (int64_t)(rnd() % 17) - 8;
            u2[m] = u[i] + 1000;
            m++;
        }
    }
    bs_sorting gt, so;
    bs_compare_params p;
    bs_compare_result r;
    score_default(t, u, n, t2, u2, m, &gt, &so, &p, &r);
    int ok = 1;
    for (int a = 0; a < U; a++)
        ok &= r.units[a].sorted_id == r.units[a].gt_id + 1000 && r.units[a].recall > 0.88 &&
              r.units[a].recall < 0.92 && r.units[a].precision > 0.999;
    CHECK(ok);
    CHECK(r.n_well_detected == U && r.n_bad == 0);
    bs_compare_result_free(&r);
    bs_sorting_free(&gt);
    bs_sorting_free(&so);
    bs_mem_free(t);
    bs_mem_free(u);
    bs_mem_free(t2);
    bs_mem_free(u2);
}

static void save_i64(const char *dir, const char *name, const int64_t *v, int64_t n)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK(bs_npy_save(path, BS_NPY_I64, 1, &n, v) == BS_OK);
}

static void bad_inputs(void)
{
    const char *tmp = test_tmpdir();
    char dir[4200], path[4300];
    bs_sorting s;
    int64_t t[3] = {10, 20, 30}, u[3] = {0, 1, 1}, neg[3] = {0, -1, 1};

    snprintf(dir, sizeof dir, "%s/missing", tmp);
    CHECK(bs_sorting_load(dir, NULL, 0, &s) == BS_ERR_INPUT && strstr(bs_last_error(), "not a folder"));

    snprintf(dir, sizeof dir, "%s/empty", tmp);
    CHECK(bs_mkdir_p(dir) == BS_OK);
    CHECK(bs_sorting_load(dir, NULL, 0, &s) == BS_ERR_INPUT && strstr(bs_last_error(), "spike_times.npy"));
    CHECK(bs_gt_read_fs(dir, &(double){0}) == BS_ERR_INPUT && strstr(bs_last_error(), "recording.json"));

    snprintf(dir, sizeof dir, "%s/noclusters", tmp);
    CHECK(bs_mkdir_p(dir) == BS_OK);
    save_i64(dir, "spike_times.npy", t, 3);
    CHECK(bs_sorting_load(dir, NULL, 0, &s) == BS_ERR_INPUT && strstr(bs_last_error(), "spike_templates.npy"));

    snprintf(dir, sizeof dir, "%s/mismatch", tmp);
    CHECK(bs_mkdir_p(dir) == BS_OK);
    save_i64(dir, "gt_spike_times.npy", t, 3);
    save_i64(dir, "gt_spike_units.npy", u, 2);
    CHECK(bs_sorting_load(dir, NULL, 0, &s) == BS_ERR_INPUT && strstr(bs_last_error(), "same length"));

    snprintf(dir, sizeof dir, "%s/negative", tmp);
    CHECK(bs_mkdir_p(dir) == BS_OK);
    save_i64(dir, "spike_times.npy", t, 3);
    save_i64(dir, "spike_clusters.npy", neg, 3);
    CHECK(bs_sorting_load(dir, NULL, 0, &s) == BS_ERR_INPUT && strstr(bs_last_error(), "expected >= 0"));
    CHECK(strstr(bs_last_error(), "spike_clusters.npy") != NULL);

    snprintf(dir, sizeof dir, "%s/float", tmp);
    CHECK(bs_mkdir_p(dir) == BS_OK);
    float ft[3] = {1.5f, 2, 3};
    int64_t n3 = 3;
    snprintf(path, sizeof path, "%s/spike_times.npy", dir);
    CHECK(bs_npy_save(path, BS_NPY_F32, 1, &n3, ft) == BS_OK);
    save_i64(dir, "spike_clusters.npy", u, 3);
    CHECK(bs_sorting_load(dir, NULL, 0, &s) == BS_ERR_INPUT && strstr(bs_last_error(), "integer dtype"));

    snprintf(dir, sizeof dir, "%s/twod", tmp);
    CHECK(bs_mkdir_p(dir) == BS_OK);
    int64_t shape[2] = {1, 3};
    snprintf(path, sizeof path, "%s/spike_times.npy", dir);
    CHECK(bs_npy_save(path, BS_NPY_I64, 2, shape, t) == BS_OK);
    save_i64(dir, "spike_clusters.npy", u, 3);
    CHECK(bs_sorting_load(dir, NULL, 0, &s) == BS_ERR_INPUT && strstr(bs_last_error(), "(n, 1)"));

    /* spike_templates.npy is used when there is no spike_clusters.npy; (n, 1) uint64 times */
    snprintf(dir, sizeof dir, "%s/templates", tmp);
    CHECK(bs_mkdir_p(dir) == BS_OK);
    uint64_t ut[3] = {30, 10, 20};
    int64_t col[2] = {3, 1};
    snprintf(path, sizeof path, "%s/spike_times.npy", dir);
    CHECK(bs_npy_save(path, BS_NPY_U64, 2, col, ut) == BS_OK);
    int32_t tpl[3] = {4, 2, 4};
    snprintf(path, sizeof path, "%s/spike_templates.npy", dir);
    CHECK(bs_npy_save(path, BS_NPY_I32, 1, &n3, tpl) == BS_OK);
    CHECK(bs_sorting_load(dir, NULL, 0, &s) == BS_OK);
    CHECK(s.n_units == 2 && s.unit_ids[0] == 2 && s.unit_ids[1] == 4 && s.times[0] == 10 && s.units[0] == 0 &&
          s.counts[1] == 2);
    bs_sorting_free(&s);

    /* recording.json without a usable fs_hz */
    snprintf(dir, sizeof dir, "%s/badjson", tmp);
    CHECK(bs_mkdir_p(dir) == BS_OK);
    snprintf(path, sizeof path, "%s/recording.json", dir);
    CHECK(bs_write_file_atomic(path, "{\"fs_hz\": \"fast\"}", 17) == BS_OK);
    CHECK(bs_gt_read_fs(dir, &(double){0}) == BS_ERR_INPUT && strstr(bs_last_error(), "fs_hz"));
    CHECK(bs_write_file_atomic(path, "{\"fs_hz\": -5}", 13) == BS_OK);
    CHECK(bs_gt_read_fs(dir, &(double){0}) == BS_ERR_INPUT && strstr(bs_last_error(), "fs_hz"));
    CHECK(bs_write_file_atomic(path, "{\"fs_hz\": 30000", 15) == BS_OK);
    CHECK(bs_gt_read_fs(dir, &(double){0}) == BS_ERR_INPUT && strstr(bs_last_error(), "not valid JSON"));

    /* gt_unit_positions.npy declares units without spikes; ids beyond it are refused */
    snprintf(dir, sizeof dir, "%s/positions", tmp);
    CHECK(bs_mkdir_p(dir) == BS_OK);
    save_i64(dir, "gt_spike_times.npy", t, 3);
    save_i64(dir, "gt_spike_units.npy", u, 3);
    float pos[12] = {0};
    int64_t pshape[2] = {4, 3};
    snprintf(path, sizeof path, "%s/gt_unit_positions.npy", dir);
    CHECK(bs_npy_save(path, BS_NPY_F32, 2, pshape, pos) == BS_OK);
    CHECK(bs_sorting_load(dir, NULL, 0, &s) == BS_OK && s.n_units == 4 && s.counts[3] == 0 && s.counts[1] == 2);
    bs_sorting_free(&s);
    pshape[0] = 1;
    CHECK(bs_npy_save(path, BS_NPY_F32, 2, pshape, pos) == BS_OK);
    CHECK(bs_sorting_load(dir, NULL, 0, &s) == BS_ERR_INPUT && strstr(bs_last_error(), "gt_unit_positions"));

    /* cluster_group.tsv exclusion, and a malformed TSV */
    snprintf(dir, sizeof dir, "%s/tsv", tmp);
    CHECK(bs_mkdir_p(dir) == BS_OK);
    save_i64(dir, "spike_times.npy", t, 3);
    save_i64(dir, "spike_clusters.npy", u, 3);
    snprintf(path, sizeof path, "%s/cluster_group.tsv", dir);
    const char *tsv = "cluster_id\tgroup\r\n0\tgood\r\n1\tnoise\r\n";
    CHECK(bs_write_file_atomic(path, tsv, strlen(tsv)) == BS_OK);
    const char *noise[] = {"noise"};
    CHECK(bs_sorting_load(dir, noise, 1, &s) == BS_OK && s.n_units == 1 && s.n_spikes == 1 && s.unit_ids[0] == 0);
    bs_sorting_free(&s);
    CHECK(bs_sorting_load(dir, NULL, 0, &s) == BS_OK && s.n_units == 2 && s.n_spikes == 3);
    bs_sorting_free(&s);
    const char *bad_tsv = "cluster_id\tgroup\nx\tnoise\n";
    CHECK(bs_write_file_atomic(path, bad_tsv, strlen(bad_tsv)) == BS_OK);
    CHECK(bs_sorting_load(dir, noise, 1, &s) == BS_ERR_INPUT && strstr(bs_last_error(), "cluster_id"));
    const char *no_group = "cluster_id\tKSLabel\n0\tgood\n";
    CHECK(bs_write_file_atomic(path, no_group, strlen(no_group)) == BS_OK);
    CHECK(bs_sorting_load(dir, noise, 1, &s) == BS_ERR_INPUT && strstr(bs_last_error(), "'group'"));

    /* empty sortings compare cleanly */
    bs_sorting e1, e2;
    CHECK(bs_sorting_from_arrays(NULL, NULL, 0, NULL, 0, "empty", &e1) == BS_OK && e1.n_units == 0);
    build(&e2, t, u, 3);
    bs_compare_params p;
    bs_compare_params_default(&p);
    bs_compare_result r;
    CHECK(bs_compare(&e2, &e1, 30000.0, &p, &r) == BS_OK && r.n_gt_units == 2 && r.mean_accuracy == 0.0 &&
          r.units[1].sorted_id == -1 && r.units[1].fn == 2);
    bs_compare_result_free(&r);
    CHECK(bs_compare(&e1, &e2, 30000.0, &p, &r) == BS_OK && r.n_false_positive == 2 && r.n_bad == 2);
    bs_compare_result_free(&r);
    CHECK(bs_compare(&e2, &e2, 0.0, &p, &r) == BS_ERR_INPUT);
    CHECK(bs_compare(&e2, &e2, 1e300, &p, &r) == BS_ERR_INPUT);
    bs_sorting e3;
    int64_t huge[1] = {INT64_MAX - 3}, zero[1] = {0};
    CHECK(bs_sorting_from_arrays(huge, zero, 1, NULL, 0, "huge", &e3) == BS_ERR_INPUT &&
          strstr(bs_last_error(), "spike time"));
    bs_sorting_free(&e1);
    bs_sorting_free(&e2);
}

/* Step 7: one GT unit of each loss category, built so that no two GT units' spikes coincide.
 * GT g (0..7) fires 100 times, spike k at (8k + g) * 1000 samples. Sorted units:
 *   10 = GT 0 (well); 11, 12 = GT 1's two halves (split); 13 = GT 2 + GT 3 (both merged);
 *   14 = GT 5 + 30 spikes of GT 4 (GT 4 absorbed into 14, GT 5 merged with GT 4 at 30/130);
 *   15 = 10 spikes of GT 6 (missed); 16 = 60 spikes of GT 7 (partial). */
static void losses(void)
{
    enum { G = 8, N = 100 };
    static int64_t gt_t[G * N], gt_u[G * N], so_t[G * N], so_u[G * N];
    int64_t n = 0, m = 0;
    for (int g = 0; g < G; g++)
        for (int k = 0; k < N; k++) {
            int64_t t = ((int64_t)8 * k + g) * 1000, v = -1;
            gt_t[n] = t;
            gt_u[n++] = g;
            switch (g) {
            case 0: v = 10; break;
            case 1: v = k < N / 2 ? 11 : 12; break;
            case 2: case 3: v = 13; break;
            case 4: v = k < 30 ? 14 : -1; break;
            case 5: v = 14; break;
            case 6: v = k < 10 ? 15 : -1; break;
            case 7: v = k < 60 ? 16 : -1; break;
            }
            if (v >= 0) {
                so_t[m] = t + 3;
                so_u[m++] = v;
            }
        }
    bs_sorting gt, so;
    bs_compare_params p;
    bs_compare_result r;
    score_default(gt_t, gt_u, n, so_t, so_u, m, &gt, &so, &p, &r);
    const struct {
        int64_t gt;
        bs_compare_loss loss;
        int64_t v, w;
    } want[G] = {{0, BS_LOSS_WELL, -1, -1},   {1, BS_LOSS_SPLIT, 11, -1},   {2, BS_LOSS_MERGED, 13, 3},
                 {3, BS_LOSS_MERGED, 13, 2},  {4, BS_LOSS_ABSORBED, 14, 5}, {5, BS_LOSS_MERGED, 14, 4},
                 {6, BS_LOSS_MISSED, 15, -1}, {7, BS_LOSS_PARTIAL, 16, -1}};
    for (int g = 0; g < G; g++) {
        const bs_compare_unit *u = unit_by_id(&r, want[g].gt);
        CHECK(u && u->loss == want[g].loss);
        CHECK(u && (want[g].loss == BS_LOSS_WELL || (u->loss_sorted == want[g].v && u->loss_gt == want[g].w)));
        if (u && u->loss != want[g].loss)
            fprintf(stderr, "GT %d: loss %s, expected %s\n", g, bs_compare_loss_names[u->loss],
                    bs_compare_loss_names[want[g].loss]);
    }
    const int32_t n_loss[BS_LOSS_N] = {1, 1, 1, 1, 3, 1};
    for (int k = 0; k < BS_LOSS_N; k++)
        CHECK(r.n_loss[k] == n_loss[k]);
    CHECK(r.n_gt_snr == -1);
    /* SNR: GT 0, 1, 6 at 5 or more; counted per category */
    double snr[G] = {9, 5, 2, 3, 4, 4.9, 20, 1};
    bs_compare_set_snr(&r, snr, &p);
    CHECK(r.n_gt_snr == 3 && r.n_well_detected_snr == 1);
    CHECK(r.n_loss_snr[BS_LOSS_WELL] == 1 && r.n_loss_snr[BS_LOSS_SPLIT] == 1 && r.n_loss_snr[BS_LOSS_MISSED] == 1 &&
          r.n_loss_snr[BS_LOSS_MERGED] == 0);
    char *js = bs_compare_json(&r, "s", "g");
    CHECK(js && strstr(js, "\"n_loss_snr\":{\"well\":1,\"split\":1,\"missed\":1,\"absorbed\":0,\"merged\":0,"));
    CHECK(js && strstr(js, "\"loss\":\"absorbed\",\"loss_sorted_unit\":14,\"loss_gt_unit\":5,\"snr\":4"));
    free(js);
    bs_compare_result_free(&r);
    bs_sorting_free(&gt);
    bs_sorting_free(&so);
}

int main(void)
{
    losses();
    hand_built();
    self_and_shuffled();
    jitter();
    burst_rule();
    spikeinterface_fixtures();
    large();
    bad_inputs();
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
