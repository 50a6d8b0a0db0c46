/*
 * cmd_sort.c - `boundsort sort`: provided by a later release; until then it
 * prints its usage and says it is not available (exit code 1).
 */
#include "cli.h"

int bs_cmd_sort(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return bs_cli_not_available("sort", "boundsort sort REC -o OUT [--probe P] [--mem 4G] [--threads N] [--resume] [--no-drift] [-q]");
}
