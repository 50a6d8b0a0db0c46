/*
 * cmd_plan.c - `boundsort plan`: provided by a later release; until then it
 * prints its usage and says it is not available (exit code 1).
 */
#include "cli.h"

int bs_cmd_plan(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return bs_cli_not_available("plan", "boundsort plan REC [--mem 4G] [--templates K] [--json]");
}
