/*
 * cmd_export_raw.c - `boundsort export-raw OUT`: a plain binary copy of the
 * sorted recording in the Phy folder OUT, named by its params.py, for inputs
 * Phy cannot read (NWB). The recording is reopened through OUT/source.json,
 * like qc does (src/export/phy.h: bs_export_raw). Exit codes: 0, 1 usage,
 * 2 bad input, 3 not enough disk space, 6 a write failed.
 */
#include <stdio.h>
#include <string.h>

#include "../export/phy.h"
#include "../export/source.h"
#include "../io/recording.h"
#include "cli.h"

static const char *usage_text =
    "usage: boundsort export-raw OUT\n"
    "\n"
    "Writes OUT/" BS_PHY_RAW_COPY ": the sorted part of the recording as a plain interleaved binary (every\n"
    "column of the file, its own sample type) and points OUT/params.py at it, so Phy shows traces and\n"
    "waveforms of a recording it cannot read itself (NWB). The recording is the one OUT/source.json names.\n"
    "`boundsort sort --export-raw` does the same at the end of a sort.\n";

int bs_cmd_export_raw(int argc, char **argv)
{
    if (bs_cli_wants_help(argc, argv)) {
        fputs(usage_text, stdout);
        return BS_OK;
    }
    const char *out;
    if (bs_cli_one_folder(argc, argv, "export-raw", usage_text, &out) != BS_OK)
        return BS_ERR_USAGE;
    bs_source src;
    bs_recording rec;
    bs_status st = bs_source_read(out, &src);
    if (st == BS_OK)
        st = bs_source_open(&src, &rec);
    if (st != BS_OK)
        return bs_cli_fail(st);
    st = bs_export_raw(out, &rec);
    if (st == BS_OK)
        printf("%s/%s: %lld samples x %d columns\n", out, BS_PHY_RAW_COPY, (long long)rec.n_samples, rec.n_cols);
    bs_recording_close(&rec);
    return st == BS_OK ? BS_OK : bs_cli_fail(st);
}
