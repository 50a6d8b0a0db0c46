/*
 * cmd_compare.c - `boundsort compare OUT GT`: scores the sorting in OUT (a
 * Phy folder or a ground-truth folder) against the ground-truth folder GT
 * with SpikeInterface's compare_sorter_to_ground_truth definitions
 * (src/sim/compare.h). The sampling rate comes from GT/recording.json.
 * Prints a table per GT unit (with each GT unit's SNR when GT has templates
 * and a recording) and summary lines, or with --json one JSON line;
 * warns on stderr when the two folders' rates, lengths or spike spans
 * disagree (bs_compare_warn).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mem/mem.h"
#include "../sim/compare.h"
#include "cli.h"

#define MAX_EXCLUDE 16

static const char *usage_text =
    "usage: boundsort compare OUT GT [--json] [--delta-ms 0.4] [--well-detected 0.8]\n"
    "                         [--snr 5] [--exclude-group NAME]...\n"
    "\n"
    "Scores the sorting OUT (a Phy folder: spike_times.npy + spike_clusters.npy or\n"
    "spike_templates.npy; or a ground-truth folder) against the ground-truth folder GT\n"
    "(gt_spike_times.npy, gt_spike_units.npy, recording.json with fs_hz), with\n"
    "SpikeInterface's compare_sorter_to_ground_truth definitions: spikes match within\n"
    "delta (inclusive), agreement = matches / (n_gt + n_sorted - matches), one-to-one\n"
    "Hungarian matching of units with agreement >= 0.5, per GT unit accuracy =\n"
    "tp / (tp + fn + fp), precision, recall; well-detected = matched with agreement >=\n"
    "--well-detected; false positive, redundant (0.2) and overmerged (0.2) sorted units.\n"
    "When GT holds gt_templates.npy and its recording (recording.bin), each GT unit's\n"
    "SNR is shown (|most negative template value| over its channel's noise, MAD / 0.6745\n"
    "of 20 chunks of 10000 samples), with the well-detected count among units with\n"
    "SNR >= --snr.\n"
    "\n"
    "  --json               one JSON line on stdout (summary + \"units\" list)\n"
    "  --delta-ms MS        coincidence window in ms (default 0.4)\n"
    "  --well-detected A    agreement for a well-detected unit (default 0.8)\n"
    "  --snr S              SNR threshold of the separate count (default 5)\n"
    "  --exclude-group G    drop Phy clusters whose group (cluster_info.tsv or\n"
    "                       cluster_group.tsv) is G, e.g. noise; repeatable. By\n"
    "                       default nothing is excluded, like SpikeInterface's read_phy.\n";

static int parse_number(const char *opt, const char *text, double lo, double hi, double *out)
{
    char *end = NULL;
    double v = text ? strtod(text, &end) : 0;
    if (!text || end == text || *end != '\0' || !(v >= lo && v <= hi)) {
        fprintf(stderr, "boundsort compare: %s '%s': expected a number in [%g, %g]\n\n%s", opt, text ? text : "",
                lo, hi, usage_text);
        return 0;
    }
    *out = v;
    return 1;
}

int bs_cmd_compare(int argc, char **argv)
{
    if (bs_cli_wants_help(argc, argv)) {
        fputs(usage_text, stdout);
        return BS_OK;
    }
    bs_compare_params params;
    bs_compare_params_default(&params);
    const char *paths[2] = {NULL, NULL};
    const char *exclude[MAX_EXCLUDE];
    int n_paths = 0, n_exclude = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--delta-ms") == 0) {
            if (!parse_number(a, i + 1 < argc ? argv[++i] : NULL, 0.0, 1000.0, &params.delta_ms))
                return BS_ERR_USAGE;
        } else if (strcmp(a, "--well-detected") == 0) {
            if (!parse_number(a, i + 1 < argc ? argv[++i] : NULL, 0.0, 1.0, &params.well_detected_score))
                return BS_ERR_USAGE;
        } else if (strcmp(a, "--snr") == 0) {
            if (!parse_number(a, i + 1 < argc ? argv[++i] : NULL, 0.0, 1e6, &params.snr_threshold))
                return BS_ERR_USAGE;
        } else if (strcmp(a, "--exclude-group") == 0) {
            if (i + 1 >= argc || n_exclude == MAX_EXCLUDE) {
                fprintf(stderr, "boundsort compare: --exclude-group needs a group name (at most %d)\n\n%s",
                        MAX_EXCLUDE, usage_text);
                return BS_ERR_USAGE;
            }
            exclude[n_exclude++] = argv[++i];
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "boundsort compare: unknown option '%s'\n\n%s", a, usage_text);
            return BS_ERR_USAGE;
        } else if (n_paths < 2) {
            paths[n_paths++] = a;
        } else {
            fprintf(stderr, "boundsort compare: unexpected argument '%s'\n\n%s", a, usage_text);
            return BS_ERR_USAGE;
        }
    }
    if (n_paths != 2) {
        fprintf(stderr, "boundsort compare: expected OUT and GT folders\n\n%s", usage_text);
        return BS_ERR_USAGE;
    }

    double fs_hz = 0;
    bs_sorting gt, sorted;
    memset(&gt, 0, sizeof gt);
    memset(&sorted, 0, sizeof sorted);
    bs_compare_result res;
    memset(&res, 0, sizeof res);
    bs_status st = bs_gt_read_fs(paths[1], &fs_hz);
    if (st == BS_OK)
        st = bs_sorting_load(paths[1], NULL, 0, &gt);
    if (st == BS_OK)
        st = bs_sorting_load(paths[0], exclude, n_exclude, &sorted);
    if (st == BS_OK)
        bs_compare_warn(paths[0], paths[1], &gt, &sorted); /* rates, lengths or spans that disagree */
    if (st == BS_OK)
        st = bs_compare(&gt, &sorted, fs_hz, &params, &res);
    double *snr = NULL;
    int have_snr = 0;
    if (st == BS_OK && !(snr = bs_mem_alloc("compare/snr", sizeof *snr * (size_t)(gt.n_units + 1))))
        st = BS_ERR_MEMORY;
    if (st == BS_OK)
        st = bs_gt_unit_snr(paths[1], &gt, snr, &have_snr);
    if (st == BS_OK && have_snr)
        bs_compare_set_snr(&res, snr, &params);
    bs_mem_free(snr);
    if (st == BS_OK) {
        if (json) {
            char *text = bs_compare_json(&res, paths[0], paths[1]);
            if (text) {
                printf("%s\n", text);
                free(text);
            } else {
                st = bs_error(BS_ERR_INTERNAL, "out of memory formatting the JSON summary");
            }
        } else {
            bs_compare_print_table(&res, stdout);
        }
    }
    bs_compare_result_free(&res);
    bs_sorting_free(&gt);
    bs_sorting_free(&sorted);
    return st == BS_OK ? BS_OK : bs_cli_fail(st);
}
