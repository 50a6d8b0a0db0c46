/*
 * cli_util.c - helpers shared by the subcommands.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int bs_cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return 1;
    return 0;
}

int bs_cli_fail(bs_status st)
{
    fprintf(stderr, "boundsort: %s\n", bs_last_error());
    return st == BS_OK ? BS_ERR_INTERNAL : (int)st;
}

int bs_cli_not_available(const char *name, const char *usage)
{
    fprintf(stderr, "usage: %s\n\nboundsort %s is not available yet in this version.\n", usage, name);
    return BS_ERR_USAGE;
}

int bs_cli_parse_double(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return end != s && *end == '\0' && errno == 0 && isfinite(*v);
}

int bs_cli_option_listed(const char *usage, const char *a)
{
    size_t n = strlen(a);
    for (const char *p = usage; usage && (p = strstr(p, a)) != NULL; p += n) {
        char before = p == usage ? ' ' : p[-1], after = p[n];
        if ((before == ' ' || before == '[' || before == '|') &&
            (after == ' ' || after == ',' || after == ']' || after == '\n' || after == '\0'))
            return 1;
    }
    return 0;
}

int bs_cli_next_arg(int argc, char **argv, int *i, const char *what, const char **pos, const char **value, char *msg,
                    size_t msglen, const char *usage)
{
    const char *a = argv[*i];
    if (a[0] != '-' || a[1] == '\0') {
        if (*pos)
            return snprintf(msg, msglen, "one %s expected, got a second one '%s'", what, a), -1;
        *pos = a;
        return BS_CLI_POSITIONAL;
    }
    if (*i + 1 >= argc) {
        int known = bs_cli_option_listed(usage, a) || bs_cli_option_listed(BS_CLI_RECORDING_OPTIONS_HELP, a);
        return snprintf(msg, msglen, known ? "option %s needs a value" : "unknown option %s", a), -1;
    }
    *value = argv[++*i];
    if (!(*value)[0])
        return snprintf(msg, msglen, "option %s: the value is empty (''): expected a path, name or number", a), -1;
    return BS_CLI_OPTION;
}

int bs_cli_parse_long(const char *s, long long lo, long long hi, long long *v)
{
    char *end;
    errno = 0;
    *v = strtoll(s, &end, 10);
    return end != s && *end == '\0' && errno == 0 && *v >= lo && *v <= hi;
}

const char BS_CLI_RECORDING_OPTIONS_HELP[] =
    "  --probe P       probe file of a raw binary (probeinterface or Kilosort JSON, .prb); for Open Ephys,\n"
    "                  the geometry instead of settings.xml\n"
    "  --fs HZ         sampling rate of a raw binary, Hz (1000 to 1000000)\n"
    "  --fs-unchecked HZ  the same, outside 1 kHz..1 MHz too (a rate from the file is accepted as well)\n"
    "  --n-chan N      columns per sample in the raw binary (default: what the probe file needs)\n"
    "  --dtype T       int16 (default), uint16, int32, float32, float16\n"
    "  --uv-per-bit X  µV per raw unit (default 1)\n"
    "  --offset X      raw units subtracted before scaling (default 0; 32768 for uint16)\n"
    "  --header-bytes N  bytes to skip at the start of the file\n"
    "  --probe-index I which probe of a probeinterface ProbeGroup (default 0)\n"
    "  --series NAME   NWB: the ElectricalSeries to read (name or path) when the file has several\n"
    "  --stream NAME   stream of an Open Ephys recording (default: the only spike-band neural stream)\n";

int bs_cli_recording_option(const char *name, const char *v, bs_open_options *opt, char *msg, size_t msglen)
{
    double d;
    long long n;
    if (strcmp(name, "--probe") == 0) {
        opt->probe_path = v;
    } else if (strcmp(name, "--fs") == 0) {
        if (!bs_cli_parse_double(v, &d) || d <= 0)
            return snprintf(msg, msglen, "--fs: expected a sampling rate > 0 Hz, got '%s'", v), -1;
        opt->fs_hz = d;
    } else if (strcmp(name, "--fs-unchecked") == 0) {
        if (!bs_cli_parse_double(v, &d) || d <= 0)
            return snprintf(msg, msglen, "--fs-unchecked: expected a sampling rate > 0 Hz, got '%s'", v), -1;
        opt->fs_hz = d;
        opt->fs_unchecked = 1;
    } else if (strcmp(name, "--n-chan") == 0) {
        if (!bs_cli_parse_long(v, 1, INT_MAX, &n))
            return snprintf(msg, msglen, "--n-chan: expected a column count >= 1, got '%s'", v), -1;
        opt->n_cols = (int)n;
    } else if (strcmp(name, "--dtype") == 0) {
        bs_sample_type t;
        if (bs_sample_type_parse(v, &t) != BS_OK)
            return snprintf(msg, msglen, "--dtype: expected " BS_SAMPLE_TYPE_NAMES ", got '%s'", v), -1;
        opt->dtype = v;
    } else if (strcmp(name, "--uv-per-bit") == 0) {
        if (!bs_cli_parse_double(v, &d) || d <= 0)
            return snprintf(msg, msglen, "--uv-per-bit: expected a number > 0, got '%s'", v), -1;
        opt->uv_per_bit = d;
    } else if (strcmp(name, "--offset") == 0) {
        if (!bs_cli_parse_double(v, &d))
            return snprintf(msg, msglen, "--offset: expected a number, got '%s'", v), -1;
        opt->offset = d;
    } else if (strcmp(name, "--header-bytes") == 0) {
        if (!bs_cli_parse_long(v, 0, LLONG_MAX, &n))
            return snprintf(msg, msglen, "--header-bytes: expected a byte count >= 0, got '%s'", v), -1;
        opt->header_bytes = (uint64_t)n;
    } else if (strcmp(name, "--series") == 0) {
        opt->series = v;
    } else if (strcmp(name, "--probe-index") == 0) {
        if (!bs_cli_parse_long(v, 0, INT_MAX, &n))
            return snprintf(msg, msglen, "--probe-index: expected an index >= 0, got '%s'", v), -1;
        opt->probe_index = (int)n;
    } else if (strcmp(name, "--stream") == 0) {
        if (!v[0])
            return snprintf(msg, msglen, "--stream: expected a stream name, got ''"), -1;
        opt->stream = v;
    } else {
        return 0;
    }
    return 1;
}

void bs_cli_print_recording_usage(FILE *out, const char *head)
{
    fprintf(out, "usage: %s%s", head, BS_CLI_RECORDING_OPTIONS_HELP);
}

int bs_cli_recording_usage_error(const char *cmd, const char *head, const char *fmt, const char *arg)
{
    fprintf(stderr, "boundsort %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n");
    bs_cli_print_recording_usage(stderr, head);
    return BS_ERR_USAGE;
}

int bs_cli_one_folder(int argc, char **argv, const char *cmd, const char *usage, const char **dir)
{
    *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "boundsort %s: unknown option '%s'\n\n%s", cmd, argv[i], usage);
            return BS_ERR_USAGE;
        }
        if (*dir) {
            fprintf(stderr, "boundsort %s: one folder expected, got '%s' and '%s'\n\n%s", cmd, *dir, argv[i], usage);
            return BS_ERR_USAGE;
        }
        *dir = argv[i];
    }
    if (!*dir) {
        fprintf(stderr, "boundsort %s: missing the folder OUT\n\n%s", cmd, usage);
        return BS_ERR_USAGE;
    }
    return BS_OK;
}
