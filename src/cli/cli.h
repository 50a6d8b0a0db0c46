/*
 * cli.h - the boundsort command's subcommands and shared option helpers.
 *
 * main.c dispatches `boundsort NAME ...` to bs_cmd_NAME(argc, argv) with
 * argv[0] = NAME. Each subcommand lives in its own cmd_NAME.c, parses its own
 * options, and returns a process exit code (a bs_status value).
 */
#ifndef BS_CLI_H
#define BS_CLI_H

#include "../common/status.h"

int bs_cmd_sort(int argc, char **argv);
int bs_cmd_plan(int argc, char **argv);
int bs_cmd_info(int argc, char **argv);
int bs_cmd_simulate(int argc, char **argv);
int bs_cmd_compare(int argc, char **argv);
int bs_cmd_validate(int argc, char **argv);
int bs_cmd_qc(int argc, char **argv);
int bs_cmd_report(int argc, char **argv);
int bs_cmd_batch(int argc, char **argv);

/* 1 if argv holds -h or --help. */
int bs_cli_wants_help(int argc, char **argv);
/* Print "boundsort: <message>" for a failed status and return the status. */
int bs_cli_fail(bs_status st);
/* A subcommand a later release provides: prints its usage and that it is not
 * available yet; exit code 1 (usage) whether or not --help was given. */
int bs_cli_not_available(const char *name, const char *usage);

#endif
