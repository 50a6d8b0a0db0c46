/*
 * main.c - the `boundsort` command: global options and subcommand dispatch.
 * Before any command runs, main installs the handler that removes the open
 * temporary files on SIGTERM, SIGINT and SIGHUP (src/common/tmpfiles.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../include/boundsort.h"
#include "../common/blas_threads.h"
#include "../common/lsan_options.h" /* sanitized builds: LeakSanitizer scans no TLS */
#include "../common/tmpfiles.h"
#include "cli.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"sort", bs_cmd_sort, "sort a recording into a Phy folder"},
    {"plan", bs_cmd_plan, "predicted peak memory per stage, without sorting"},
    {"info", bs_cmd_info, "channels, sampling rate, duration, probe, µV/bit"},
    {"simulate", bs_cmd_simulate, "write a ground-truth recording"},
    {"compare", bs_cmd_compare, "accuracy of a sorting against a ground truth"},
    {"validate", bs_cmd_validate, "check that a Phy folder is loadable and consistent"},
    {"qc", bs_cmd_qc, "quality metrics table"},
    {"report", bs_cmd_report, "self-contained HTML report and curation page"},
    {"batch", bs_cmd_batch, "sort every recording under a folder, locally or on SLURM"},
    {"export-nwb", bs_cmd_export_nwb, "write the sorted units into an NWB file"},
    {"export-raw", bs_cmd_export_raw, "a plain binary copy of the recording for Phy (NWB input)"},
    {"params", bs_cmd_params, "the sorting parameters: defaults, ranges, Kilosort names; check a file"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out)
{
    fprintf(out, "usage: boundsort COMMAND [options]   (boundsort COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nexit codes: 0 success, 1 usage, 2 bad input, 3 does not fit the memory budget,\n"
                 "            4 device error, 5 internal error\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return BS_ERR_USAGE;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
        printf("boundsort %s\n", BOUNDSORT_VERSION);
        return BS_OK;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return BS_OK;
    }
    const char *core = bs_blas_better_coretype();
    if (core && setenv("OPENBLAS_CORETYPE", core, 1) == 0) { /* blas_threads.h: OpenBLAS fell back to SSE3 kernels */
        execv("/proc/self/exe", argv);
        unsetenv("OPENBLAS_CORETYPE"); /* could not run again: go on with the kernels loaded */
    }
    bs_blas_single_thread();
    bs_tmp_catch_signals(); /* SIGTERM / SIGINT / SIGHUP remove the open temporaries, exit 128 + signal */
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "boundsort: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return BS_ERR_USAGE;
}
