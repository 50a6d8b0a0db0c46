/*
 * cmd_params.c - `boundsort params`: the sorting parameters.
 *
 *   boundsort params --defaults          a parameters file with every parameter at its default, a comment
 *                                        per key (description, range, Kilosort 4 name)
 *   boundsort params --defaults --json   the same as a JSON array, for programs (the SpikeInterface wrapper)
 *   boundsort params FILE                check FILE as `sort --params FILE` would read it and print the
 *                                        values it changes from the defaults
 *
 * The table and the reader are src/pipeline/params.h's.
 */
#include <stdio.h>
#include <string.h>

#include "../pipeline/params.h"
#include "cli.h"

static const char *USAGE =
    "boundsort params --defaults [--json] | boundsort params FILE\n"
    "\n"
    "  --defaults        print every sorting parameter at its default as a parameters file for\n"
    "                    `boundsort sort --params FILE`, with a comment per key (description, range,\n"
    "                    Kilosort 4 name)\n"
    "  --json            print them as a JSON array of {group, name, key, type, default, min, max,\n"
    "                    zero_auto, kilosort, description} instead\n"
    "  FILE              read FILE as sort --params would and print the values it changes\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "boundsort params: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\nusage: %s", USAGE);
    return BS_ERR_USAGE;
}

int bs_cmd_params(int argc, char **argv)
{
    if (bs_cli_wants_help(argc, argv)) {
        printf("usage: %s", USAGE);
        return BS_OK;
    }
    int defaults = 0, json = 0;
    const char *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--defaults") == 0)
            defaults = 1;
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (argv[i][0] == '-' && argv[i][1])
            return usage_error("unknown option %s", argv[i]);
        else if (file)
            return usage_error("one FILE expected, got a second one: %s", argv[i]);
        else
            file = argv[i];
    }
    if (defaults == !!file)
        return usage_error("%s", defaults ? "--defaults and FILE exclude each other" : "give --defaults or FILE");
    if (json && !defaults)
        return usage_error("%s", "--json goes with --defaults");
    if (defaults) {
        bs_status st = bs_sort_params_print_defaults(stdout, json);
        return st == BS_OK ? BS_OK : bs_cli_fail(st);
    }
    bs_sort_params d, p;
    bs_sort_default_params(&d);
    p = d;
    bs_status st = bs_sort_params_read(file, &p);
    if (st != BS_OK)
        return bs_cli_fail(st);
    int n = 0;
    for (int i = 0; i < bs_n_sort_param_fields; i++) {
        const bs_param_field *f = &bs_sort_param_fields[i];
        double a = bs_param_real(&d, f), b = bs_param_real(&p, f);
        if (a != b) {
            printf("%s.%s = %.10g (default %.10g)\n", f->group, f->name, b, a);
            n++;
        }
    }
    printf("%s: %d parameter%s changed from the defaults\n", file, n, n == 1 ? "" : "s");
    return BS_OK;
}
