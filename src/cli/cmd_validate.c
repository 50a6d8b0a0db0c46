/*
 * cmd_validate.c - `boundsort validate`: provided by a later release; until then it
 * prints its usage and says it is not available (exit code 1).
 */
#include "cli.h"

int bs_cmd_validate(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return bs_cli_not_available("validate", "boundsort validate OUT");
}
