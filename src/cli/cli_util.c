/*
 * cli_util.c - helpers shared by the subcommands.
 */
#include <stdio.h>
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
