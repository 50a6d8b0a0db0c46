/*
 * cmd_simulate.c - `boundsort simulate`: provided by a later release; until then it
 * prints its usage and says it is not available (exit code 1).
 */
#include "cli.h"

int bs_cmd_simulate(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return bs_cli_not_available("simulate", "boundsort simulate -o DIR [--probe np1|np2|np2-4shank|linear32] [--duration S] [--units N] [--drift none|rigid|nonrigid|step] [--seed S]");
}
