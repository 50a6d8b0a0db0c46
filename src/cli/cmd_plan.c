/*
 * cmd_plan.c - `boundsort plan REC [--mem SIZE] [--templates K] [sort flags] [--json]`:
 * the memory plan of a sort (src/pipeline/plan.h) without sorting: per stage
 * its large buffers, their bytes, the strategy chosen and the predicted peak.
 * Only the recording's header is read. Exit 3 when the plan does not fit the
 * budget (the same refusal `sort` gives before reading data), or with -o OUT
 * when the disk the run writes there exceeds its file system's free space.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "../common/samples.h"
#include "../pipeline/params.h"
#include "../pipeline/plan.h"
#include "cli.h"

static const char *USAGE_HEAD =
    "boundsort plan REC [--probe P --fs HZ ...] [-o OUT] [--mem SIZE] [--templates K] [--no-drift] [--no-qc]\n"
    "                  [--no-report] [--keep-preprocessed] [--json]\n"
    "\n"
    "  REC               the recording, as for `boundsort sort` (only its header is read)\n" BS_CLI_SORT_OPTIONS_HELP
    "  -o, --out OUT     the sort's output folder: compare the disk the run writes there with the free\n"
    "                    space of its file system (exit 3 when it does not fit, as `sort` refuses it)\n"
    "  --templates K     number of templates to plan for (default: 1.5 per channel)\n"
    "  --no-drift, --no-qc, --no-report, --keep-preprocessed\n"
    "                    plan a sort with these options of `boundsort sort` (the last adds the disk of\n"
    "                    the preprocessed recording's copy when it has other columns than the sorted ones)\n"
    "  --json            print the plan as one JSON object\n";

static int usage_error(const char *fmt, const char *arg)
{
    return bs_cli_recording_usage_error("plan", USAGE_HEAD, fmt, arg);
}

int bs_cmd_plan(int argc, char **argv)
{
    if (bs_cli_wants_help(argc, argv)) {
        bs_cli_print_recording_usage(stdout, USAGE_HEAD);
        return BS_OK;
    }
    bs_open_options opt = {0};
    bs_sort_cli so = {.batch_s = 0};
    bs_status pst = bs_cli_sort_defaults(argc, argv, &so);
    if (pst != BS_OK)
        return bs_cli_fail(pst);
    const char *rec_path = NULL;
    int json = 0;
    long long K = 0;
    const char *out_dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            json = 1;
            continue;
        }
        int *flag = strcmp(a, "--no-drift") == 0             ? &so.sp.no_drift
                    : strcmp(a, "--no-qc") == 0              ? &so.sp.no_qc
                    : strcmp(a, "--no-report") == 0          ? &so.sp.no_report
                    : strcmp(a, "--keep-preprocessed") == 0 ? &so.sp.keep_preprocessed
                                                             : NULL;
        if (flag) {
            *flag = 1;
            continue;
        }
        const char *v = NULL;
        char msg[256];
        int r = bs_cli_next_arg(argc, argv, &i, "recording", &rec_path, &v, msg, sizeof msg, USAGE_HEAD);
        if (r < 0)
            return usage_error("%s", msg);
        if (r == BS_CLI_POSITIONAL)
            continue;
        r = bs_cli_recording_option(a, v, &opt, msg, sizeof msg);
        if (r == 0)
            r = bs_cli_sort_option(a, v, &so, msg, sizeof msg);
        if (r < 0)
            return usage_error("%s", msg);
        if (r > 0)
            continue;
        if (strcmp(a, "-o") == 0 || strcmp(a, "--out") == 0) {
            out_dir = v;
        } else if (strcmp(a, "--templates") == 0) {
            if (!bs_cli_parse_long(v, 1, 10000000, &K))
                return usage_error("--templates: expected a template count >= 1, got '%s'", v);
        } else {
            return usage_error("unknown option %s", a);
        }
    }
    if (!rec_path)
        return usage_error("%s", "missing the recording REC");
    pst = bs_sort_params_check(&so.sp);
    if (pst != BS_OK)
        return bs_cli_fail(pst);
    bs_recording rec;
    bs_status st = bs_recording_open(rec_path, &opt, &rec);
    if (st != BS_OK)
        return bs_cli_fail(st);
    if (so.batch_s > 0)
        so.sp.batch_samples = bs_seconds_to_samples(so.batch_s, rec.fs_hz);
    st = bs_sort_window(&rec, &so.sp);
    if (st != BS_OK) {
        bs_recording_close(&rec);
        return bs_cli_fail(st);
    }
    st = bs_cli_gpu_setup(&so.sp, 0);
    if (st != BS_OK) {
        bs_recording_close(&rec);
        return bs_cli_fail(st);
    }
    size_t budget = so.sp.mem_budget ? so.sp.mem_budget : bs_plan_default_budget();
    int threads = so.sp.threads > 0 ? so.sp.threads : omp_get_max_threads();
    bs_sort_plan plan;
    st = bs_sort_plan_make(&rec, &so.sp, threads, budget, (int)K, &plan);
    bs_recording_close(&rec);
    if (st != BS_OK)
        return bs_cli_fail(st);
    if (out_dir || so.sp.disk_budget)
        bs_sort_plan_fit_disk(&plan, 0, NULL, 0, out_dir ? bs_disk_free_bytes(out_dir) : -1);
    /* the machine check before printing, so that the plan's summary line agrees with the exit status */
    size_t need = 0;
    for (int i = 0; i < plan.n_stages; i++)
        need = plan.stage[i].sure_min > need ? plan.stage[i].sure_min : need;
    bs_status st_machine = bs_cli_machine_check(budget, threads, need);
    char machine_msg[1024] = "";
    if (st_machine != BS_OK) /* kept for the exit: printing the plan may set other messages */
        snprintf(machine_msg, sizeof machine_msg, "%s", bs_last_error());
    plan.machine_short = st_machine != BS_OK;
    if (json) {
        char *text = bs_sort_plan_json(&plan);
        if (!text)
            return bs_cli_fail(bs_error(BS_ERR_MEMORY, "out of memory printing the plan"));
        printf("%s\n", text);
        free(text);
    } else {
        bs_sort_plan_print(&plan, stdout);
    }
    st = bs_sort_plan_check(&plan, -1);
    if (st == BS_OK && plan.disk_free >= 0)
        st = bs_sort_plan_disk_check(&plan, 0, plan.disk, plan.disk_free, out_dir ? out_dir : "OUT");
    if (st == BS_OK && st_machine != BS_OK)
        st = bs_error(st_machine, "%s", machine_msg);
    return st == BS_OK ? BS_OK : bs_cli_fail(st);
}
