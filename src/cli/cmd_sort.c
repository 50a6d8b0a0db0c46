/*
 * cmd_sort.c - `boundsort sort REC -o OUT`: open the recording, run the
 * pipeline (src/pipeline/sort.h), leave a Phy folder in OUT.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "../common/log.h"
#include "../mem/mem.h"
#include "../pipeline/sort.h"
#include "cli.h"

static const char *USAGE_HEAD =
    "boundsort sort REC -o OUT [--probe P --fs HZ ...] [--threads N] [--batch-seconds S] [-q]\n"
    "\n"
    "  REC               a SpikeGLX .bin (with its .meta) or folder, or a raw binary with --probe\n"
    "  -o, --out OUT     output folder: a Phy folder (params.py, spike_times.npy, ...)\n"
    "  --threads N       OpenMP threads (default: all cores; the output does not depend on it)\n"
    "  --batch-seconds S batch length, seconds (default 2; part of the result, like a parameter)\n"
    "  --threshold X     template-matching threshold, whitened units (default 8)\n"
    "  --no-drift        no drift estimation or correction (default: on for shanks >= 200 µm tall;\n"
    "                    rigid below 800 µm, nonrigid above; OUT/drift.npy holds the estimate)\n"
    "  --drift-only      estimate the drift (OUT/drift*.npy, driftmap.npy) and stop\n"
    "  -q, --quiet       no progress lines\n";

static int usage_error(const char *fmt, const char *arg)
{
    return bs_cli_recording_usage_error("sort", USAGE_HEAD, fmt, arg);
}

int bs_cmd_sort(int argc, char **argv)
{
    if (bs_cli_wants_help(argc, argv)) {
        bs_cli_print_recording_usage(stdout, USAGE_HEAD);
        return BS_OK;
    }
    bs_open_options opt = {0};
    bs_sort_params sp;
    bs_sort_default_params(&sp);
    const char *rec_path = NULL;
    double batch_s = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            sp.quiet = 1;
            continue;
        }
        if (strcmp(a, "--no-drift") == 0 || strcmp(a, "--drift-only") == 0) {
            *(a[2] == 'n' ? &sp.no_drift : &sp.drift_only) = 1;
            continue;
        }
        if (a[0] != '-' || a[1] == '\0') {
            if (rec_path)
                return usage_error("one recording expected, got a second one '%s'", a);
            rec_path = a;
            continue;
        }
        if (i + 1 >= argc)
            return usage_error("option %s needs a value", a);
        const char *v = argv[++i];
        char msg[256];
        int r = bs_cli_recording_option(a, v, &opt, msg, sizeof msg);
        if (r < 0)
            return usage_error("%s", msg);
        if (r > 0)
            continue;
        long long n;
        double d;
        if (strcmp(a, "-o") == 0 || strcmp(a, "--out") == 0) {
            sp.out_dir = v;
        } else if (strcmp(a, "--threads") == 0) {
            if (!bs_cli_parse_long(v, 1, 4096, &n))
                return usage_error("--threads: expected a thread count >= 1, got '%s'", v);
            sp.threads = (int)n;
        } else if (strcmp(a, "--batch-seconds") == 0) {
            if (!bs_cli_parse_double(v, &d) || d < 0.1 || d > 600)
                return usage_error("--batch-seconds: expected seconds in [0.1, 600], got '%s'", v);
            batch_s = d;
        } else if (strcmp(a, "--threshold") == 0) {
            if (!bs_cli_parse_double(v, &d) || d <= 0)
                return usage_error("--threshold: expected a number > 0, got '%s'", v);
            sp.match_threshold = (float)d;
        } else {
            return usage_error("unknown option %s", a);
        }
    }
    if (!rec_path)
        return usage_error("%s", "missing the recording REC");
    if (!sp.out_dir)
        return usage_error("%s", "missing the output folder (-o OUT)");
    if (sp.no_drift && sp.drift_only)
        return usage_error("%s", "--no-drift and --drift-only exclude each other");
    bs_recording rec;
    bs_status st = bs_recording_open(rec_path, &opt, &rec);
    if (st != BS_OK)
        return bs_cli_fail(st);
    if (batch_s > 0)
        sp.batch_samples = (int64_t)(batch_s * rec.fs_hz + 0.5);
    if (sp.quiet)
        bs_log_set_level(BS_LOG_WARN);
    st = bs_sort_run(&rec, &sp);
    bs_recording_close(&rec);
    if (st != BS_OK)
        return bs_cli_fail(st);
    return BS_OK;
}
