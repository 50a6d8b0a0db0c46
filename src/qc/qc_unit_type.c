/*
 * qc_unit_type.c - noise / non-somatic / mua / good: Bombcell's
 * classification (Fabre et al.) as SpikeInterface 0.105's
 * bombcell_label_units applies it to a metric table, with the rule that
 * decided each unit.
 *
 *   1. noise: a unit outside any "noise" rule (waveform shape: peak and
 *      trough counts, peak-to-trough duration, baseline flatness, peak after
 *      / trough ratio, spatial decay) is noise; NaN fails.
 *   2. mua: a unit that is not noise and outside any "mua" rule (amplitude,
 *      SNR, amplitude cutoff, spike count, refractory violations, presence,
 *      drift, isolation) is mua; NaN passes (the metric could not be
 *      computed), except sliding_rp_violation, whose NaN is the result "no
 *      contamination level is plausible" and fails.
 *   3. good: the rest.
 *   4. non-somatic: among units that are not noise, those with a narrow
 *      waveform (peak_before_width and trough_width both below their bound)
 *      AND a large first peak (peak_before_to_trough_ratio or
 *      peak_before_to_peak_after_ratio above its bound), OR a large main
 *      peak (main_peak_to_trough_ratio above its bound), OR outside any
 *      other rule of the section. NaN never makes a unit non-somatic,
 *      except that a unit whose two widths are both NaN counts as narrow
 *      (SpikeInterface's "or" of the two width tests starts from "narrow").
 * Thresholds are inclusive ("greater" is >=, "less" is <=), as
 * SpikeInterface's threshold_metrics_label_units. The rules are a table
 * (bs_unit_type_rules) loaded from SpikeInterface's JSON format, so one
 * file serves both tools.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "qc.h"

const char *const bs_unit_type_names[BS_UNIT_N_TYPES] = {"noise", "non-somatic", "mua", "good"};
static const char *const section_names[BS_UT_N_SECTIONS] = {"noise", "mua", "non-somatic"};

static void add(bs_unit_type_rules *r, int section, int metric, double greater, double less, int abs)
{
    r->rule[r->n++] = (bs_unit_type_rule){section, metric, greater, less, abs};
}

void bs_unit_type_default_rules(bs_unit_type_rules *r)
{
    r->n = 0;
    add(r, BS_UT_NOISE, BS_QC_NUM_POSITIVE_PEAKS, NAN, 2, 0);
    add(r, BS_UT_NOISE, BS_QC_NUM_NEGATIVE_PEAKS, NAN, 1, 0);
    add(r, BS_UT_NOISE, BS_QC_PEAK_TO_TROUGH_DURATION, 0.0001, 0.00115, 0); /* s */
    add(r, BS_UT_NOISE, BS_QC_WAVEFORM_BASELINE_FLATNESS, NAN, 0.5, 0);
    add(r, BS_UT_NOISE, BS_QC_PEAK_AFTER_TO_TROUGH_RATIO, NAN, 0.8, 0);
    add(r, BS_UT_NOISE, BS_QC_EXP_DECAY, 0.01, 0.1, 0); /* 1/µm */
    add(r, BS_UT_MUA, BS_QC_AMPLITUDE_MEDIAN, 30, NAN, 1); /* µV */
    add(r, BS_UT_MUA, BS_QC_SNR, 5, NAN, 0);
    add(r, BS_UT_MUA, BS_QC_AMPLITUDE_CUTOFF, NAN, 0.2, 0);
    add(r, BS_UT_MUA, BS_QC_NUM_SPIKES, 300, NAN, 0);
    add(r, BS_UT_MUA, BS_QC_SLIDING_RP, NAN, 0.1, 0);
    add(r, BS_UT_MUA, BS_QC_PRESENCE_RATIO, 0.7, NAN, 0);
    add(r, BS_UT_MUA, BS_QC_DRIFT_PTP, NAN, 100, 0); /* µm */
    add(r, BS_UT_MUA, BS_QC_ISOLATION_DISTANCE, 20, NAN, 0);
    add(r, BS_UT_MUA, BS_QC_L_RATIO, NAN, 0.3, 0);
    add(r, BS_UT_NON_SOMATIC, BS_QC_PEAK_BEFORE_TO_TROUGH_RATIO, NAN, 3, 0);
    add(r, BS_UT_NON_SOMATIC, BS_QC_PEAK_BEFORE_WIDTH, 0.00015, NAN, 0); /* s */
    add(r, BS_UT_NON_SOMATIC, BS_QC_TROUGH_WIDTH, 0.0002, NAN, 0);       /* s */
    add(r, BS_UT_NON_SOMATIC, BS_QC_PEAK_BEFORE_TO_PEAK_AFTER_RATIO, NAN, 3, 0);
    add(r, BS_UT_NON_SOMATIC, BS_QC_MAIN_PEAK_TO_TROUGH_RATIO, NAN, 0.8, 0);
}

static int metric_index(const char *name)
{
    for (int m = 0; m < BS_QC_N_METRICS; m++)
        if (strcmp(bs_qc_metric_names[m], name) == 0)
            return m;
    return -1;
}

static bs_status bound(const char *path, const cJSON *rule, const char *key, double *v)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(rule, key);
    *v = NAN;
    if (!b || cJSON_IsNull(b))
        return BS_OK;
    if (!cJSON_IsNumber(b) || !isfinite(b->valuedouble))
        return bs_error(BS_ERR_INPUT, "%s: %s.%s must be a number or null", path, rule->string, key);
    *v = b->valuedouble;
    return BS_OK;
}

static bs_status parse_rules(const char *path, const cJSON *root, bs_unit_type_rules *r)
{
    if (!cJSON_IsObject(root))
        return bs_error(BS_ERR_INPUT, "%s: expected a JSON object with sections noise, mua, non-somatic", path);
    const cJSON *sec;
    cJSON_ArrayForEach(sec, root)
    {
        int s = -1;
        for (int i = 0; i < BS_UT_N_SECTIONS; i++)
            if (strcmp(sec->string, section_names[i]) == 0)
                s = i;
        if (s < 0)
            return bs_error(BS_ERR_INPUT, "%s: unknown section '%s' (noise, mua, non-somatic)", path, sec->string);
        if (!cJSON_IsObject(sec))
            return bs_error(BS_ERR_INPUT, "%s: section '%s' must be an object of metric rules", path, sec->string);
        const cJSON *rule;
        cJSON_ArrayForEach(rule, sec)
        {
            int m = metric_index(rule->string);
            if (m < 0)
                return bs_error(BS_ERR_INPUT, "%s: %s: unknown metric '%s' (qc_metrics.tsv names the metrics)", path,
                                sec->string, rule->string);
            if (!cJSON_IsObject(rule))
                return bs_error(BS_ERR_INPUT, "%s: %s.%s must be {\"greater\": x, \"less\": y}", path, sec->string,
                                rule->string);
            const cJSON *k;
            cJSON_ArrayForEach(k, rule)
            {
                if (strcmp(k->string, "greater") && strcmp(k->string, "less") && strcmp(k->string, "abs"))
                    return bs_error(BS_ERR_INPUT, "%s: %s.%s: unknown key '%s' (greater, less, abs)", path,
                                    sec->string, rule->string, k->string);
            }
            if (r->n == (int)(sizeof r->rule / sizeof r->rule[0]))
                return bs_error(BS_ERR_INPUT, "%s: more than %d rules", path, r->n);
            double g, l;
            BS_TRY(bound(path, rule, "greater", &g));
            BS_TRY(bound(path, rule, "less", &l));
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(rule, "abs");
            if (a && !cJSON_IsBool(a))
                return bs_error(BS_ERR_INPUT, "%s: %s.%s.abs must be true or false", path, sec->string, rule->string);
            add(r, s, m, g, l, a && cJSON_IsTrue(a));
        }
    }
    return BS_OK;
}

bs_status bs_unit_type_load_rules(const char *path, bs_unit_type_rules *r)
{
    char *text = NULL;
    size_t len = 0;
    r->n = 0;
    BS_TRY(bs_read_text_file(path, (size_t)1 << 20, &text, &len));
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root)
        return bs_error(BS_ERR_INPUT, "%s: not valid JSON", path);
    bs_status st = parse_rules(path, root, r);
    cJSON_Delete(root);
    return st;
}

/* 1 pass, 0 fail, -1 NaN (or no bound at all: -2) */
static int check(const bs_unit_type_rule *q, const double *metrics)
{
    if (isnan(q->greater) && isnan(q->less))
        return -2;
    double v = metrics[q->metric];
    if (q->abs)
        v = fabs(v);
    if (isnan(v))
        return -1;
    return (isnan(q->greater) || v >= q->greater) && (isnan(q->less) || v <= q->less);
}

static void say(char *reason, size_t len, const char *section, const bs_unit_type_rule *q, const double *m,
                const char *why)
{
    if (!reason || !len)
        return;
    char need[80] = "needs";
    if (!isnan(q->greater))
        snprintf(need + strlen(need), sizeof need - strlen(need), " >= %g", q->greater);
    if (!isnan(q->less))
        snprintf(need + strlen(need), sizeof need - strlen(need), "%s <= %g", isnan(q->greater) ? "" : ",", q->less);
    const char *bar = q->abs ? "|" : "";
    double v = q->abs ? fabs(m[q->metric]) : m[q->metric];
    snprintf(reason, len, "%s: %s%s%s=%.4g (%s)", section, bar, bs_qc_metric_names[q->metric], bar, v,
             why ? why : need);
}

static int skip(const bs_unit_type_rule *q, int have_multi) { return !have_multi && q->metric == BS_QC_EXP_DECAY; }

bs_unit_type bs_unit_type_of(const double *m, const bs_unit_type_rules *r, int have_multi, char *reason,
                             size_t reason_len)
{
    if (reason && reason_len)
        snprintf(reason, reason_len, "passes");
    for (int i = 0; i < r->n; i++) {
        const bs_unit_type_rule *q = &r->rule[i];
        if (q->section != BS_UT_NOISE || skip(q, have_multi))
            continue;
        int c = check(q, m);
        if (c == 0 || c == -1) {
            say(reason, reason_len, "noise", q, m, c == -1 ? "nan fails" : NULL);
            return BS_UNIT_NOISE;
        }
    }
    /* non-somatic groups: width (narrow unless one passes), ratio (large if one fails), main peak (large if it
     * fails), any other rule of the section (fails unless one passes) */
    int n_width = 0, wide = 0, large_ratio = 0, large_main = 0, n_other = 0, other_pass = 0;
    const bs_unit_type_rule *why_ratio = NULL, *why_main = NULL, *why_width = NULL, *why_other = NULL;
    for (int i = 0; i < r->n; i++) {
        const bs_unit_type_rule *q = &r->rule[i];
        if (q->section != BS_UT_NON_SOMATIC || skip(q, have_multi))
            continue;
        int c = check(q, m);
        if (c == -2)
            continue;
        if (q->metric == BS_QC_PEAK_BEFORE_WIDTH || q->metric == BS_QC_TROUGH_WIDTH) {
            n_width++;
            wide |= c == 1;
            why_width = why_width ? why_width : q;
        } else if (q->metric == BS_QC_PEAK_BEFORE_TO_TROUGH_RATIO || q->metric == BS_QC_PEAK_BEFORE_TO_PEAK_AFTER_RATIO) {
            if (c == 0 && !large_ratio) {
                large_ratio = 1;
                why_ratio = q;
            }
        } else if (q->metric == BS_QC_MAIN_PEAK_TO_TROUGH_RATIO) {
            if (c == 0 && !large_main) {
                large_main = 1;
                why_main = q;
            }
        } else {
            n_other++;
            other_pass |= c == 1;
            why_other = why_other ? why_other : q;
        }
    }
    int narrow = n_width > 0 && !wide;
    int other = n_other > 0 && !other_pass;
    bs_unit_type t = BS_UNIT_GOOD;
    for (int i = 0; i < r->n; i++) {
        const bs_unit_type_rule *q = &r->rule[i];
        if (q->section != BS_UT_MUA || skip(q, have_multi))
            continue;
        int c = check(q, m);
        int nan_fails = q->metric == BS_QC_SLIDING_RP;
        if (c == 0 || (c == -1 && nan_fails)) {
            say(reason, reason_len, "mua", q, m, c == -1 ? "nan fails" : NULL);
            t = BS_UNIT_MUA;
            break;
        }
    }
    if (narrow && large_ratio) {
        say(reason, reason_len, "non-somatic", why_ratio, m, NULL);
        size_t k = reason ? strlen(reason) : 0;
        if (reason && k + 1 < reason_len)
            snprintf(reason + k, reason_len - k, " and narrow (%s=%.4g, needs >= %g)",
                     bs_qc_metric_names[why_width->metric], m[why_width->metric], why_width->greater);
        return BS_UNIT_NON_SOMATIC;
    }
    if (large_main || other) {
        say(reason, reason_len, "non-somatic", large_main ? why_main : why_other, m, NULL);
        return BS_UNIT_NON_SOMATIC;
    }
    return t;
}
