/*
 * cli.h - the boundsort command's subcommands and shared option helpers.
 *
 * main.c dispatches `boundsort NAME ...` to bs_cmd_NAME(argc, argv) with
 * argv[0] = NAME. Each subcommand lives in its own cmd_NAME.c, parses its own
 * options, and returns a process exit code (a bs_status value).
 */
#ifndef BS_CLI_H
#define BS_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "../common/status.h"
#include "../io/recording.h"
#include "../pipeline/sort.h"

int bs_cmd_sort(int argc, char **argv);
int bs_cmd_plan(int argc, char **argv);
int bs_cmd_info(int argc, char **argv);
int bs_cmd_simulate(int argc, char **argv);
int bs_cmd_compare(int argc, char **argv);
int bs_cmd_validate(int argc, char **argv);
int bs_cmd_qc(int argc, char **argv);
int bs_cmd_report(int argc, char **argv);
int bs_cmd_batch(int argc, char **argv);
int bs_cmd_export_nwb(int argc, char **argv);
int bs_cmd_export_raw(int argc, char **argv);
int bs_cmd_params(int argc, char **argv);

/* 1 if argv holds -h or --help. */
int bs_cli_wants_help(int argc, char **argv);
/* The one folder argument of a command that takes nothing else (validate, export-raw): *dir, or a usage
 * message naming `cmd` on stderr and BS_ERR_USAGE. */
int bs_cli_one_folder(int argc, char **argv, const char *cmd, const char *usage, const char **dir);
/* Print "boundsort: <message>" for a failed status and return the status. */
int bs_cli_fail(bs_status st);
/* A subcommand a later release provides: prints its usage and that it is not
 * available yet; exit code 1 (usage) whether or not --help was given. */
int bs_cli_not_available(const char *name, const char *usage);

/* One step of a command's argument loop, after the caller's flags (options
 * without a value): argv[*i] is either the command's one positional argument
 * (stored in *pos; returns BS_CLI_POSITIONAL, or -1 when *pos was already set:
 * "one <what> expected, got a second one ...") or an option that takes a
 * value (*value = argv[*i + 1] and *i moves past it; returns BS_CLI_OPTION,
 * or -1 when the value is missing or empty). The reason of a -1 is written to msg: "unknown option X"
 * for a last option without a value that neither `usage` (the command's usage text) nor the recording
 * options list. */
enum { BS_CLI_POSITIONAL = 1, BS_CLI_OPTION = 2 };
int bs_cli_next_arg(int argc, char **argv, int *i, const char *what, const char **pos, const char **value, char *msg,
                    size_t msglen, const char *usage);

/* 1 if option `a` is listed in a usage text (preceded by a space, '[' or '|', followed by a space, ',', ']'
 * or the end of a line). */
int bs_cli_option_listed(const char *usage, const char *a);

/* Strict number parsing: the whole string, finite, within [lo, hi]. */
int bs_cli_parse_double(const char *s, double *v);
int bs_cli_parse_long(const char *s, long long lo, long long hi, long long *v);

/* The options that describe how to read REC (--probe, --fs, --n-chan,
 * --dtype, --uv-per-bit, --offset, --header-bytes, --probe-index, --series, --stream), shared by
 * every command that opens a recording. Returns 1 if `name` is one of them
 * and `value` was stored in *opt, 0 if `name` is not one of them, -1 if the
 * value is malformed (the reason is written to msg). */
int bs_cli_recording_option(const char *name, const char *value, bs_open_options *opt, char *msg, size_t msglen);
extern const char BS_CLI_RECORDING_OPTIONS_HELP[];

/* For a command that opens a recording: print "usage: <head><recording options>". */
void bs_cli_print_recording_usage(FILE *out, const char *head);
/* "boundsort <cmd>: <fmt with arg>", a blank line and the usage on stderr; returns BS_ERR_USAGE. */
int bs_cli_recording_usage_error(const char *cmd, const char *head, const char *fmt, const char *arg);

/* Options shared by `sort` and `plan` (cli_sort_opts.c): --threads,
 * --batch-seconds, --mem, --max-center-spikes. Returns 1 if `name` was one of
 * them (value stored), 0 if not, -1 with a message for a bad value. */
typedef struct {
    bs_sort_params sp;
    double batch_s;          /* seconds, 0 = default */
    const char *params_path; /* --params FILE, or NULL */
} bs_sort_cli;
int bs_cli_sort_option(const char *name, const char *value, bs_sort_cli *o, char *msg, size_t msglen);
/* o->sp = the defaults, then the parameters file of argv's `--params FILE` (the last one) if any, so the
 * options parsed after it override the file whatever their order. */
bs_status bs_cli_sort_defaults(int argc, char **argv, bs_sort_cli *o);
/* The machine's RAM against the run: BS_ERR_MEMORY when the untracked overhead of `threads`
 * (bs_plan_overhead_bytes) plus `need` (the least tracked memory the run needs; 0 if unknown) exceeds it,
 * a "warning: " line on stderr when the budget plus that overhead does. */
bs_status bs_cli_machine_check(size_t budget, int threads, size_t need);
/* --device / --gpu-mem: with --device cuda[:N], check the device (BS_ERR_DEVICE when absent; `plan` with
 * need_device = 0 plans for --gpu-mem without one), default the GPU budget to its memory less 1 GiB, and
 * set the accountant's GPU budget. --gpu-mem without --device cuda is a usage error. */
bs_status bs_cli_gpu_setup(bs_sort_params *sp, int need_device);
#define BS_CLI_SORT_OPTIONS_HELP                                                                              \
    "  --threads N       OpenMP threads (default: all cores; the output does not depend on it)\n"              \
    "  --batch-seconds S batch length, seconds (default 2; part of the result, like a parameter)\n"           \
    "  --mem SIZE        budget of tracked host memory, e.g. 4G (default: 3/4 of the RAM); the output\n"       \
    "                    does not depend on it; a run that cannot fit is refused before reading data\n"      \
    "  --max-center-spikes N  spikes clustered per spatial center, more are subsampled (default 200000)\n"      \
    "  --device D        cpu (default), cuda or cuda:N: the matcher's scores on that GPU, the rest on the CPU\n"  \
    "  --gpu-mem SIZE    budget of tracked GPU memory with --device cuda (default: its memory less 1 GiB)\n"   \
    "  --disk SIZE       what the run may write in OUT, e.g. 100G (default: its file system's free space);\n"   \
    "                    short of it, the preprocessed recording is streamed, not written (slower, the\n"     \
    "                    same output); a run that cannot fit even so is refused before reading data\n"       \
    "  --denoise D       cmr (default: median reference over all channels), cmr-local (over each channel's\n"  \
    "                    ring 30-55 µm away) or destripe (IBL's spatial high-pass with gain control)\n"      \
    "  --bad-channels M  interpolate (default: dead and noisy channels rewritten from their neighbours,\n"        \
    "                    out-of-brain ones dropped), remove (all dropped) or keep; OUT/bad_channels.tsv\n"     \
    "                    lists them (IBL's coherence + high-frequency power, per shank of >= 32 channels)\n"  \
    "  --max-bad-channel-fraction F  refuse the run when more than F of the channels are bad (0.5)\n"        \
    "  --params FILE     parameters file (JSON; Kilosort 4's names accepted; `boundsort params --defaults`);\n" \
    "                    the options here override it\n"

#endif
