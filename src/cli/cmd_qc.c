/*
 * cmd_qc.c - `boundsort qc OUT`: quality metrics, Allen labels and the
 * SpikeInterface curation JSON of a sorting (src/qc/qc.h). The recording is
 * reopened through OUT/source.json, written by `sort`, unless --recording
 * REC (with the usual recording options) names it.
 */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "../common/log.h"
#include "../common/tmpfiles.h"
#include "../export/source.h"
#include "../mem/mem.h"
#include "../pipeline/plan.h"
#include "../qc/qc.h"
#include "cli.h"

static const char *USAGE_HEAD =
    "boundsort qc OUT [--recording REC --probe P --fs HZ ...] [options]\n"
    "\n"
    "Writes OUT/qc/qc_metrics.tsv, OUT/cluster_<metric>.tsv (one per metric, Phy shows them),\n"
    "OUT/cluster_qc_label.tsv (good/fail/unknown by the Allen rule), OUT/cluster_unit_type.tsv\n"
    "(noise/non-somatic/mua/good by Bombcell's rules, with the rule that decided) and OUT/curation.json\n"
    "(SpikeInterface curation format v2). Metrics, waveform-shape metrics included, follow\n"
    "SpikeInterface's definitions and defaults.\n"
    "\n"
    "  OUT                    a Phy folder written by boundsort sort (or any Phy folder with --recording)\n"
    "  --recording REC        the recording (default: the one named in OUT/source.json)\n"
    "  --isi-max X            label: isi_violations_ratio must be < X (default 0.5)\n"
    "  --presence-min X       label: presence_ratio must be > X (default 0.8)\n"
    "  --cutoff-max X         label: amplitude_cutoff must be < X (default 0.1)\n"
    "  --unit-type-thresholds FILE\n"
    "                         thresholds of the unit types (noise / non-somatic / mua / good,\n"
    "                         OUT/cluster_unit_type.tsv) in SpikeInterface's bombcell JSON format:\n"
    "                         {\"noise\": {\"metric\": {\"greater\": x, \"less\": y}}, \"mua\": ..., \"non-somatic\": ...}\n"
    "                         (default: Bombcell's published thresholds)\n"
    "  --max-spikes-per-unit N  random subset for templates and PCA metrics (default 500)\n"
    "  --seed S               subset and noise-chunk seed (default 0)\n"
    "  --peak-sign S          both (default), neg or pos: main channel and amplitudes\n"
    "  --presence-bin-s S     presence_ratio bin, s (default 60)\n"
    "  --drift-interval-s S   drift_ptp/std/mad interval, s (default 60)\n"
    "  --drift-min-spikes N   spikes per drift interval (default 100)\n"
    "  --group-spikes N       spikes gathered per group of units (memory, 16 bytes each; default 8M;\n"
    "                         the output does not depend on it)\n"
    "  --mem SIZE             host memory budget, e.g. 4G (default: 75 % of RAM); qc refuses to start\n"
    "                         (exit 3) when its buffers would not fit\n"
    "  --threads N            OpenMP threads (the output does not depend on it)\n"
    "  -q, --quiet            no progress lines\n"
    "\n"
    "recording options (with --recording):\n";

static int usage_error(const char *fmt, const char *arg)
{
    return bs_cli_recording_usage_error("qc", USAGE_HEAD, fmt, arg);
}

/* The qc options. 1: consumed, 0: not a qc option, -1: malformed (message
 * in msg). */
static int qc_option(const char *a, const char *v, bs_qc_params *p, char *msg, size_t len)
{
    static bs_unit_type_rules rules;
    double d;
    long long n;
    if (strcmp(a, "--unit-type-thresholds") == 0) {
        if (bs_unit_type_load_rules(v, &rules) != BS_OK)
            return snprintf(msg, len, "%s", bs_last_error()), -2;
        p->unit_type_rules = &rules;
        return 1;
    }
    double *target = strcmp(a, "--isi-max") == 0          ? &p->label_isi_max
                     : strcmp(a, "--presence-min") == 0   ? &p->label_presence_min
                     : strcmp(a, "--cutoff-max") == 0     ? &p->label_cutoff_max
                     : strcmp(a, "--presence-bin-s") == 0 ? &p->presence_bin_s
                     : strcmp(a, "--drift-interval-s") == 0 ? &p->drift_interval_s
                                                            : NULL;
    if (target) {
        int duration = target == &p->presence_bin_s || target == &p->drift_interval_s;
        if (!bs_cli_parse_double(v, &d) || d < 0 || (duration && d == 0))
            return snprintf(msg, len, "%s: expected a number %s, got '%s'", a, duration ? "> 0" : ">= 0", v), -1;
        *target = d;
        return 1;
    }
    if (strcmp(a, "--max-spikes-per-unit") == 0 || strcmp(a, "--drift-min-spikes") == 0) {
        if (!bs_cli_parse_long(v, 1, 1000000000, &n))
            return snprintf(msg, len, "%s: expected a count >= 1, got '%s'", a, v), -1;
        if (strcmp(a, "--max-spikes-per-unit") == 0)
            p->max_spikes_per_unit = (int)n;
        else
            p->drift_min_spikes = (int)n;
        return 1;
    }
    if (strcmp(a, "--seed") == 0) {
        if (!bs_cli_parse_long(v, 0, INT64_MAX, &n))
            return snprintf(msg, len, "--seed: expected an integer >= 0, got '%s'", v), -1;
        p->seed = (uint64_t)n;
        return 1;
    }
    if (strcmp(a, "--peak-sign") == 0) {
        if (strcmp(v, "both") == 0)
            p->peak_sign = BS_QC_PEAK_BOTH;
        else if (strcmp(v, "neg") == 0)
            p->peak_sign = BS_QC_PEAK_NEG;
        else if (strcmp(v, "pos") == 0)
            p->peak_sign = BS_QC_PEAK_POS;
        else
            return snprintf(msg, len, "--peak-sign: expected both, neg or pos, got '%s'", v), -1;
        return 1;
    }
    return 0;
}

int bs_cmd_qc(int argc, char **argv)
{
    if (bs_cli_wants_help(argc, argv)) {
        bs_cli_print_recording_usage(stdout, USAGE_HEAD);
        return BS_OK;
    }
    bs_open_options opt = {0};
    bs_qc_params qp;
    bs_qc_default_params(&qp);
    const char *out = NULL, *rec_path = NULL;
    int rec_opts = 0;
    size_t budget = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            qp.quiet = 1;
            continue;
        }
        const char *v = NULL;
        char msg[256];
        int r = bs_cli_next_arg(argc, argv, &i, "output folder", &out, &v, msg, sizeof msg, USAGE_HEAD);
        if (r < 0)
            return usage_error("%s", msg);
        if (r == BS_CLI_POSITIONAL)
            continue;
        r = bs_cli_recording_option(a, v, &opt, msg, sizeof msg);
        if (r == 0)
            r = qc_option(a, v, &qp, msg, sizeof msg);
        else if (r > 0)
            rec_opts = 1;
        if (r == -2) /* a thresholds file that cannot be used: input, not usage */
            return bs_cli_fail(BS_ERR_INPUT);
        if (r < 0)
            return usage_error("%s", msg);
        if (r > 0)
            continue;
        long long n;
        if (strcmp(a, "--recording") == 0) {
            rec_path = v;
        } else if (strcmp(a, "--mem") == 0) {
            size_t b;
            if (bs_mem_parse_size(v, &b) != BS_OK || b == 0)
                return usage_error("--mem: expected a size such as 4G, 512M or 2000000000, got '%s'", v);
            budget = b;
        } else if (strcmp(a, "--group-spikes") == 0) {
            if (!bs_cli_parse_long(v, 1, INT64_MAX, &n))
                return usage_error("--group-spikes: expected a count >= 1, got '%s'", v);
            qp.group_spikes = n;
        } else if (strcmp(a, "--threads") == 0) {
            if (!bs_cli_parse_long(v, 1, 4096, &n))
                return usage_error("--threads: expected a thread count in 1..4096, got '%s'", v);
            omp_set_num_threads((int)n);
        } else {
            return usage_error("unknown option %s", a);
        }
    }
    if (!out)
        return usage_error("%s", "missing the output folder OUT");
    if (rec_opts && !rec_path)
        return usage_error("%s", "recording options need --recording REC");
    if (qp.quiet)
        bs_log_set_level(BS_LOG_WARN);
    /* temporaries a killed run left in OUT (src/common/tmpfiles.h) */
    bs_tmp_set_interrupt_hint("the metrics were not updated; rerun boundsort qc");
    bs_tmp_sweep_sorting(out);
    bs_status st = bs_qc_check_folder(out);
    if (st != BS_OK)
        return bs_cli_fail(st);
    bs_recording rec;
    if (rec_path) {
        st = bs_recording_open(rec_path, &opt, &rec);
    } else {
        bs_source src;
        st = bs_source_read(out, &src);
        if (st == BS_OK)
            st = bs_source_open(&src, &rec);
    }
    if (st != BS_OK)
        return bs_cli_fail(st);
    bs_mem_set_budget(BS_DEV_HOST, budget ? budget : bs_plan_default_budget());
    st = bs_qc_run(out, &rec, &qp, NULL);
    bs_recording_close(&rec);
    return st == BS_OK ? BS_OK : bs_cli_fail(st);
}
