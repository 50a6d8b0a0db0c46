/*
 * cmd_sort.c - `boundsort sort REC -o OUT`: open the recording, run the
 * pipeline (src/pipeline/sort.h), leave a Phy folder in OUT (and with --nwb
 * the units as OUT/units.nwb, src/export/nwb_export.h), write OUT/source.json
 * run the quality metrics (src/qc/qc.h) unless --no-qc, and write the curation
 * page OUT/report.html (src/report/report.h) last unless --no-report.
 *
 * The thread count (--threads) and the memory budget (--mem) are settings of
 * the process, made once after the options are read and before anything
 * runs; the sort reads them into its run context (src/pipeline/sort.h).
 */
#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../common/samples.h"
#include "../common/tmpfiles.h"
#include "../export/nwb_export.h"
#include "../export/phy.h"
#include "../export/source.h"
#include "../mem/mem.h"
#include "../pipeline/params.h"
#include "../pipeline/plan.h"
#include "../pipeline/sort.h"
#include "../qc/qc.h"
#include "../report/report.h"
#include "cli.h"

static const char *USAGE_HEAD =
    "boundsort sort REC -o OUT [--probe P --fs HZ ...] [--threads N] [--batch-seconds S] [--mem SIZE] [--resume] [--nwb]\n"
    "                          [--export-raw]\n"
    "                          [--no-qc] [--unit-type-thresholds FILE] [--no-report] [--no-drift | --drift-only]\n"
    "                          [--motion FOLDER]\n"
    "                          [--no-artifact-removal] [--no-phase-shift] [--no-disk-check]\n"
    "                          [--keep-preprocessed] [-q]\n"
    "\n"
    "  REC               an NWB file, an Open Ephys recording, a SpikeGLX .bin (with its .meta) or folder, or\n"
    "                    a raw binary with --probe\n"
    "  -o, --out OUT     output folder: a Phy folder (params.py, spike_times.npy, ...)\n" BS_CLI_SORT_OPTIONS_HELP
    "  --mem-trace FILE  record every tracked allocation and free as JSON lines\n"
    "  --resume          skip the stages a previous (killed) run of the same recording and parameters\n"
    "                    completed (OUT/.stages/manifest.json); the output is the same\n"
    "  --threshold X     template-matching threshold, whitened units (default 8)\n"
    "  --nwb             also write the units as NWB: OUT/units.nwb (a copy of an NWB input with a\n"
    "                    Units table, else a new file; see boundsort export-nwb)\n"
    "  --export-raw      also write OUT/recording.dat, a plain binary copy of the sorted recording that\n"
    "                    params.py names, for inputs Phy cannot read (NWB; see boundsort export-raw)\n"
    "  --no-qc           skip the quality metrics (boundsort qc) at the end\n"
    "  --unit-type-thresholds FILE\n"
    "                    the unit types' thresholds for qc (see boundsort qc --help; read before sorting)\n"
    "  --no-report       skip the curation page OUT/report.html (boundsort report) written last\n"
    "  --no-drift        no drift estimation or correction (default: on for shanks >= 200 µm tall;\n"
    "                    rigid below 800 µm, nonrigid above; OUT/drift.npy holds the estimate)\n"
    "  --drift-only      estimate the drift (OUT/drift*.npy, driftmap.npy) and stop\n"
    "  --motion FOLDER   correct the drift with a motion estimated elsewhere: a SpikeInterface Motion folder\n"
    "                    (Motion.save; e.g. DREDge's), or one per shank in FOLDER/shank<id>/, instead of\n"
    "                    boundsort's estimate (the estimate is written in that form too: OUT/motion/)\n"
    "  --no-artifact-removal\n"
    "                    keep broadband artifacts (default: periods where many channels cross a high\n"
    "                    threshold at once are blanked before detection and matching, OUT/artifacts.tsv)\n"
    "  --no-phase-shift  keep the ADC sampling skew between channels (default: each channel of a\n"
    "                    Neuropixels probe is resampled on the common clock before the median reference;\n"
    "                    the delays come from SpikeGLX's ~muxTbl and part number, or from the probe file's\n"
    "                    contact_annotations.inter_sample_shift)\n"
    "  --no-disk-check   run even when OUT's file system has less free space than the plan says the run\n"
    "                    writes there (default: refused with exit 3 before each stage; `boundsort plan -o OUT`)\n"
    "  --keep-preprocessed\n"
    "                    keep the recording after filtering and the common reference, which every pass\n"
    "                    after the first reads (float16 µV, time-major), as OUT/preprocessed.dat with the\n"
    "                    raw file's columns (those not sorted are 0), which params.py then names\n"
    "                    (hp_filtered = True): Phy shows the traces the sort saw; by default it is removed\n"
    "                    when the sort ends\n"
    "  -q, --quiet       no progress lines\n";

static int usage_error(const char *fmt, const char *arg)
{
    return bs_cli_recording_usage_error("sort", USAGE_HEAD, fmt, arg);
}

/* The curation page, last: the Phy folder is complete, so a failure is a warning and the exit status
 * is the sort's. With --no-report an earlier run's page, which shows other units, is removed. */
static bs_status write_report(const char *out_dir, int no_report, int quiet)
{
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, out_dir, "report.html"));
    if (no_report) {
        if (remove(path) != 0 && errno != ENOENT)
            return bs_error(BS_ERR_IO, "%s: cannot remove an earlier run's page: %s", path, strerror(errno));
        return BS_OK;
    }
    bs_report_params rp;
    bs_report_params_default(&rp);
    bs_report_summary s;
    bs_status st = bs_report_write(out_dir, NULL, &rp, &s);
    if (st != BS_OK)
        fprintf(stderr, "warning: the Phy folder is complete, but the report failed (%s: %s); rerun it with "
                        "boundsort report %s\n", bs_status_name(st), bs_last_error(), out_dir);
    else if (!quiet)
        fprintf(stderr, "report: wrote %s (%.2f MB, %lld units); open it in a browser to curate\n", path,
                s.html_bytes / 1e6, (long long)s.n_units);
    return BS_OK;
}

int bs_cmd_sort(int argc, char **argv)
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
    const char *rec_path = NULL, *trace_path = NULL;
    int nwb = 0, export_raw = 0;
    int run_qc = 1;
    static bs_unit_type_rules unit_type_rules;
    const bs_unit_type_rules *rules = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--unit-type-thresholds") == 0) {
            if (i + 1 >= argc)
                return usage_error("%s", "--unit-type-thresholds: expected a file");
            if (bs_unit_type_load_rules(argv[++i], &unit_type_rules) != BS_OK)
                return bs_cli_fail(BS_ERR_INPUT);
            rules = &unit_type_rules;
            continue;
        }
        if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            so.sp.quiet = 1;
            continue;
        }
        if (strcmp(a, "--resume") == 0) {
            so.sp.resume = 1;
            continue;
        }
        if (strcmp(a, "--nwb") == 0 || strcmp(a, "--export-raw") == 0) {
            *(a[2] == 'n' ? &nwb : &export_raw) = 1;
            continue;
        }
        if (strcmp(a, "--no-qc") == 0) {
            run_qc = 0;
            so.sp.no_qc = 1;
            continue;
        }
        if (strcmp(a, "--no-report") == 0) {
            so.sp.no_report = 1;
            continue;
        }
        if (strcmp(a, "--no-artifact-removal") == 0 || strcmp(a, "--no-phase-shift") == 0) {
            *(a[5] == 'a' ? &so.sp.no_artifact_removal : &so.sp.no_phase_shift) = 1;
            continue;
        }
        if (strcmp(a, "--no-disk-check") == 0) {
            so.sp.no_disk_check = 1;
            continue;
        }
        if (strcmp(a, "--keep-preprocessed") == 0) {
            so.sp.keep_preprocessed = 1;
            continue;
        }
        if (strcmp(a, "--no-drift") == 0 || strcmp(a, "--drift-only") == 0) {
            *(a[2] == 'n' ? &so.sp.no_drift : &so.sp.drift_only) = 1;
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
        if (r < 0)
            return usage_error("%s", msg);
        if (r > 0)
            continue;
        r = bs_cli_sort_option(a, v, &so, msg, sizeof msg);
        if (r < 0)
            return usage_error("%s", msg);
        if (r > 0)
            continue;
        double d;
        if (strcmp(a, "-o") == 0 || strcmp(a, "--out") == 0) {
            so.sp.out_dir = v;
        } else if (strcmp(a, "--mem-trace") == 0) {
            trace_path = v;
        } else if (strcmp(a, "--motion") == 0) {
            so.sp.motion_dir = v;
        } else if (strcmp(a, "--threshold") == 0) {
            if (!bs_cli_parse_double(v, &d) || d <= 0)
                return usage_error("--threshold: expected a number > 0, got '%s'", v);
            so.sp.match_threshold = (float)d;
        } else {
            return usage_error("unknown option %s", a);
        }
    }
    if (!rec_path)
        return usage_error("%s", "missing the recording REC");
    pst = bs_sort_params_check(&so.sp);
    if (pst != BS_OK)
        return bs_cli_fail(pst);
    if (!so.sp.out_dir)
        return usage_error("%s", "missing the output folder (-o OUT)");
    if (so.sp.drift_only)
        so.sp.no_qc = 1; /* nothing to measure */
    if (so.sp.no_drift && so.sp.drift_only)
        return usage_error("%s", "--no-drift and --drift-only exclude each other");
    if (so.sp.no_drift && so.sp.motion_dir)
        return usage_error("%s", "--no-drift and --motion exclude each other (--motion corrects with a motion made "
                                 "elsewhere)");
    if (so.sp.drift_only && nwb)
        return usage_error("%s", "--drift-only writes no units for --nwb");
    /* the process's thread count and memory budget, set once before anything runs (sort, then qc) */
    if (!so.sp.mem_budget)
        so.sp.mem_budget = bs_plan_default_budget();
    bs_mem_set_budget(BS_DEV_HOST, so.sp.mem_budget);
    if (so.sp.threads > 0)
        omp_set_num_threads(so.sp.threads);
    bs_status st = bs_cli_machine_check(so.sp.mem_budget, omp_get_max_threads(), 0);
    if (st == BS_OK)
        st = bs_cli_gpu_setup(&so.sp, 1);
    if (st != BS_OK)
        return bs_cli_fail(st);
    bs_recording rec;
    st = bs_recording_open(rec_path, &opt, &rec);
    if (st != BS_OK)
        return bs_cli_fail(st);
    if (so.batch_s > 0)
        so.sp.batch_samples = bs_seconds_to_samples(so.batch_s, rec.fs_hz);
    st = bs_sort_window(&rec, &so.sp);
    if (st != BS_OK) {
        bs_recording_close(&rec);
        return bs_cli_fail(st);
    }
    if (so.sp.quiet)
        bs_log_set_level(BS_LOG_WARN);
    /* temporaries a killed run left in OUT; SIGTERM / SIGINT remove this run's own (src/common/tmpfiles.h) */
    bs_tmp_set_interrupt_hint("rerun the same command with --resume to continue");
    bs_tmp_sweep_sorting(so.sp.out_dir);
    FILE *trace = NULL;
    if (trace_path) {
        trace = fopen(trace_path, "w");
        if (!trace) {
            bs_recording_close(&rec);
            return bs_cli_fail(bs_error(BS_ERR_INPUT, "%s: cannot write the memory trace: %s", trace_path,
                                        strerror(errno)));
        }
        bs_mem_set_trace(trace);
        so.sp.mem_trace = trace_path;
    }
    st = bs_sort_run(&rec, &so.sp);
    if (trace) {
        bs_mem_set_trace(NULL);
        /* a write that failed earlier (a full disk) leaves the stream's error flag, not fclose's result */
        int bad = ferror(trace);
        if ((fclose(trace) != 0 || bad) && st == BS_OK)
            st = bs_error(BS_ERR_IO, "%s: cannot write the memory trace: %s", trace_path, strerror(errno));
    }
    int from_nwb = strcmp(rec.format, "nwb") == 0;
    /* how to reopen the recording (qc, report), then the quality metrics */
    if (st == BS_OK)
        st = bs_source_write(so.sp.out_dir, rec_path, &opt, &rec);
    if (st == BS_OK && run_qc && !so.sp.drift_only) {
        bs_qc_params qp;
        bs_qc_default_params(&qp);
        qp.quiet = so.sp.quiet;
        qp.unit_type_rules = rules;
        /* the Phy folder is complete: a qc failure is a warning, the exit status is the sort's */
        bs_status qst = bs_qc_run(so.sp.out_dir, &rec, &qp, NULL);
        if (qst != BS_OK)
            fprintf(stderr,
                    "warning: the Phy folder is complete, but qc failed (%s: %s); rerun it with boundsort qc %s\n",
                    bs_status_name(qst), bs_last_error(), so.sp.out_dir);
    } else if (st == BS_OK && !so.sp.drift_only) {
        st = bs_qc_remove_outputs(so.sp.out_dir);
    }
    if (st == BS_OK && export_raw && !so.sp.drift_only)
        st = bs_export_raw(so.sp.out_dir, &rec);
    bs_recording_close(&rec);
    if (st == BS_OK && nwb) {
        bs_nwb_export_opts no = {so.sp.out_dir, from_nwb ? rec_path : NULL, opt.series, NULL, 0, NULL};
        st = bs_nwb_export(&no, NULL);
    }
    if (st == BS_OK && !so.sp.drift_only)
        st = write_report(so.sp.out_dir, so.sp.no_report, so.sp.quiet);
    if (st != BS_OK)
        return bs_cli_fail(st);
    return BS_OK;
}
