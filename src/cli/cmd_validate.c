/*
 * cmd_validate.c - `boundsort validate OUT`: checks that OUT is a Phy folder
 * that phylib and SpikeInterface can load and whose files agree with each
 * other (src/export/validate.h). Prints one line per violation (and "note:"
 * lines for what could not be checked) on stdout, then either
 * "OK: <n> spikes, <n> clusters, <n> templates" (exit 0) or the number of
 * violations on stderr (exit 2). An unreadable folder is exit 2, bad usage 1.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../export/validate.h"
#include "cli.h"

static const char *usage_text =
    "usage: boundsort validate OUT\n"
    "\n"
    "Checks that the Phy folder OUT is loadable by Phy (phylib) and SpikeInterface and consistent:\n"
    "params.py keys, dtypes and shapes of every array, spike times sorted and inside the recording,\n"
    "template ids < number of templates, and a row per cluster in every cluster_*.tsv.\n"
    "Exit codes: 0 clean, 2 violations found or folder unreadable, 1 bad usage.\n";

int bs_cmd_validate(int argc, char **argv)
{
    if (bs_cli_wants_help(argc, argv)) {
        fputs(usage_text, stdout);
        return 0;
    }
    const char *dir;
    if (bs_cli_one_folder(argc, argv, "validate", usage_text, &dir) != BS_OK)
        return BS_ERR_USAGE;
    bs_phy_summary s;
    bs_status st = bs_phy_validate_summary(dir, stdout, &s);
    if (st != BS_OK)
        return bs_cli_fail(st);
    if (s.n_violations) {
        fflush(stdout);
        fprintf(stderr, "boundsort validate: %d violation%s in %s\n", s.n_violations, s.n_violations == 1 ? "" : "s",
                dir);
        return BS_ERR_INPUT;
    }
    if (s.n_templates >= 0)
        printf("OK: %" PRId64 " spikes, %" PRId64 " clusters, %" PRId64 " templates\n", s.n_spikes, s.n_clusters,
               s.n_templates);
    else
        printf("OK: %" PRId64 " spikes, %" PRId64 " clusters, no templates.npy\n", s.n_spikes, s.n_clusters);
    return BS_OK;
}
