/*
 * cmd_info.c - `boundsort info`: provided by a later release; until then it
 * prints its usage and says it is not available (exit code 1).
 */
#include "cli.h"

int bs_cmd_info(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return bs_cli_not_available("info", "boundsort info REC [--probe P --fs HZ ...] [--json]");
}
