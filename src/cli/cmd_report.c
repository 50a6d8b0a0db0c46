/*
 * cmd_report.c - `boundsort report OUT`: writes OUT/report.html, one
 * self-contained page (unit table, per-unit plots, drift map, run summary,
 * curation export) that opens from disk with no network (src/report/report.h).
 * Optional inputs that are absent are listed as notes on the page (and on
 * stderr without -q); a folder that is not a Phy folder, or a malformed file,
 * is exit 2; bad usage is exit 1.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "../common/log.h"
#include "../common/tmpfiles.h"
#include "../mem/mem.h"
#include "../report/report.h"
#include "cli.h"

static const char *usage_text =
    "usage: boundsort report OUT [-o FILE] [--spikes-per-unit N] [--similar N] [--split-spikes N]\n"
    "                        [--traces N] [--trace-ms MS] [--mem SIZE] [-q]\n"
    "\n"
    "Writes OUT/report.html: a page that opens from disk with no network, showing the unit table\n"
    "(labels, quality metrics, position, firing rate), each unit's template on the probe,\n"
    "autocorrelogram, amplitudes and positions, cross-correlograms with its most similar units,\n"
    "the drift map and estimated motion, a few stretches of the preprocessed traces with each\n"
    "spike marked (when OUT/source.json names a readable recording), and the run summary with\n"
    "the memory timeline.\n"
    "Units can be relabelled (good/mua/noise), grouped for merging and split (a range of the\n"
    "amplitude plot), and the curation exported as a SpikeInterface curation JSON (format v2)\n"
    "and Phy's cluster_group.tsv.\n"
    "\n"
    "  -o FILE              write the page to FILE instead of OUT/report.html\n"
    "  --spikes-per-unit N  spikes drawn per unit in the amplitude and position plots (default 300)\n"
    "  --similar N          cross-correlograms per unit with its most similar units (default 5)\n"
    "  --split-spikes N     hold every spike (4 bytes each in the page) for splitting when the folder\n"
    "                       has at most N spikes (default 2000000; 0: no splitting)\n"
    "  --traces N           stretches of preprocessed traces in the traces view (default 4, at most\n"
    "                       16; 0: none); each holds 4/3 byte a sample and channel in the page\n"
    "  --trace-ms MS        length of each stretch, 10 to 2000 ms (default 100)\n"
    "  --mem SIZE           budget for the report's buffers, e.g. 64M (default: none); exit 3 if short\n"
    "  -q                   no notes on stderr\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "boundsort report: ");
    fprintf(stderr, fmt, arg); /* fmt: one of the literals below, each with one %s */
    fprintf(stderr, "\n\n%s", usage_text);
    return BS_ERR_USAGE;
}

int bs_cmd_report(int argc, char **argv)
{
    if (bs_cli_wants_help(argc, argv)) {
        fputs(usage_text, stdout);
        return BS_OK;
    }
    bs_report_params p;
    bs_report_params_default(&p);
    const char *dir = NULL, *out = NULL;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long long v;
        if (strcmp(a, "-q") == 0) {
            quiet = 1;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--spikes-per-unit") == 0 || strcmp(a, "--similar") == 0 ||
                   strcmp(a, "--split-spikes") == 0 || strcmp(a, "--traces") == 0 ||
                   strcmp(a, "--trace-ms") == 0 || strcmp(a, "--mem") == 0) {
            if (i + 1 >= argc)
                return usage_error("option '%s' needs a value", a);
            const char *val = argv[++i];
            if (strcmp(a, "-o") == 0) {
                out = val;
            } else if (strcmp(a, "--mem") == 0) {
                size_t bytes;
                if (bs_mem_parse_size(val, &bytes) != BS_OK || bytes == 0)
                    return usage_error("--mem: expected a size such as 64M or 1G, got '%s'", val);
                bs_mem_set_budget(BS_DEV_HOST, bytes);
            } else {
                /* any integer here (clamped to int); bs_report_check_params below holds the ranges */
                if (!bs_cli_parse_long(val, LLONG_MIN, LLONG_MAX, &v))
                    return usage_error("%s: expected an integer", a);
                long long vi = v < INT_MIN ? INT_MIN : v > INT_MAX ? INT_MAX : v;
                if (strcmp(a, "--similar") == 0)
                    p.n_similar = (int)vi;
                else if (strcmp(a, "--split-spikes") == 0)
                    p.split_max_spikes = v;
                else if (strcmp(a, "--traces") == 0)
                    p.trace_stretches = (int)vi;
                else if (strcmp(a, "--trace-ms") == 0)
                    p.trace_ms = (double)v;
                else
                    p.spikes_per_unit = (int)vi;
            }
        } else if (a[0] == '-' && a[1] != '\0') {
            return usage_error("unknown option '%s'", a);
        } else if (dir) {
            return usage_error("one output folder expected, got a second one: '%s'", a);
        } else {
            dir = a;
        }
    }
    if (!dir)
        return usage_error("%s", "missing the output folder OUT");
    if (bs_report_check_params(&p) != BS_OK)
        return usage_error("%s", bs_last_error());
    bs_log_set_level(quiet ? BS_LOG_WARN : BS_LOG_INFO);
    /* temporaries a killed run left in OUT, and beside FILE (src/common/tmpfiles.h) */
    bs_tmp_set_interrupt_hint("the page was not written; rerun boundsort report");
    bs_tmp_sweep_sorting(dir);
    if (out)
        bs_tmp_sweep_of(out);
    bs_report_summary s;
    bs_status st = bs_report_write(dir, out, &p, &s);
    if (st != BS_OK)
        return bs_cli_fail(st);
    char where[4200];
    snprintf(where, sizeof where, "%s%s", out ? out : dir, out ? "" : "/report.html");
    if (!quiet)
        fprintf(stderr, "report: wrote %s (%.2f MB): %lld units, %lld spikes, %lld cross-correlograms, %d note%s; "
                "peak tracked memory %.1f MiB\n", where, s.html_bytes / 1e6, (long long)s.n_units, (long long)s.n_spikes,
                (long long)s.n_ccg_pairs, s.n_notes, s.n_notes == 1 ? "" : "s", bs_mem_peak(BS_DEV_HOST) / 1048576.0);
    return BS_OK;
}
