/*
 * source.h - OUT/source.json: how to reopen the recording a sort was made
 * from, so that later commands (qc, report) can read the raw data again
 * without the user repeating the recording options.
 *
 * Mechanism. `sort` calls bs_source_write() after a successful run. The file
 * holds two things:
 *   - "open_options": exactly the options the recording was opened with (the
 *     bs_open_options of src/io/recording.h, with the recording and probe
 *     paths made absolute), so bs_source_open() repeats the same
 *     bs_recording_open() call from any working directory;
 *   - what the reader found (format, data file, fs_hz, n_chan, n_cols,
 *     n_samples, dtype, µV per bit of the first channel, offset), written for
 *     people and other tools, and used by bs_source_open() to refuse a file
 *     that changed since the sort (another length, rate or channel count).
 *
 * Example:
 *   {"format_version": 1, "recording": "/data/rec.bin", "format": "raw",
 *    "data_path": "/data/rec.bin", "data_offset": 0, "probe": "/data/probe.json",
 *    "fs_hz": 30000, "n_chan": 32, "n_cols": 32, "n_samples": 1800000,
 *    "dtype": "int16", "uv_per_bit": 0.195, "offset": 0, "header_bytes": 0,
 *    "probe_index": 0, "stream": null,
 *    "open_options": {"probe": "/data/probe.json", "fs_hz": 30000, "n_cols": 0,
 *                     "dtype": "int16", "uv_per_bit": 0.195, "offset": 0,
 *                     "header_bytes": 0, "probe_index": 0, "stream": null,
 *                     "series": null}}
 * A sort of a part of the recording (tmin_s / tmax_s) adds "window": [first
 * sample, end sample) of the file; bs_source_open() reopens that window, and
 * n_samples is its length. A sort that dropped bad channels
 * (stage_channels.c) adds "dropped_columns": their file columns;
 * bs_source_open() drops them again, and n_chan counts the channels left.
 * Absent or null options mean "not given" (the reader's default). The
 * top-level "stream" is the stream the reader opened (Open Ephys stream,
 * NWB ElectricalSeries) and null for single-stream formats.
 * The file is written atomically (src/common/fileio.h).
 */
#ifndef BS_SOURCE_H
#define BS_SOURCE_H

#include <stdint.h>

#include "../common/status.h"
#include "../io/recording.h"

#define BS_SOURCE_FILE "source.json"
#define BS_SOURCE_MAX_DROPPED 8192 /* dropped channels source.json can name */

typedef struct {
    char recording[4096]; /* REC as sort opened it, absolute path */
    char probe[4096];     /* probe file option, absolute path; "" when not given */
    char dtype[16];       /* dtype option; "" when not given */
    char stream[256];     /* --stream option (Open Ephys); "" when not given */
    char series[512];     /* --series option (NWB); "" when not given */
    bs_open_options opt;  /* the options; probe_path, dtype, stream and series point into this struct */
    /* what the reader found when the sort ran (0 / "" when the file lacks them) */
    char format[16];
    double fs_hz;         /* Hz */
    int n_chan;           /* probe channels */
    int64_t n_samples;    /* samples per channel (of the window, when there is one) */
    int64_t window[2];    /* the samples [first, end) of the file the sort read (tmin_s / tmax_s); -1, -1: all */
    int n_dropped;        /* probe channels the sort dropped (bad channels removed) */
    int dropped[BS_SOURCE_MAX_DROPPED]; /* their file columns */
} bs_source;

/* Write OUT/source.json for the recording `rec` opened from `rec_path` with
 * `opt` (may be NULL: no options). */
bs_status bs_source_write(const char *out_dir, const char *rec_path, const bs_open_options *opt,
                          const bs_recording *rec);

/* Parse OUT/source.json. BS_ERR_INPUT naming the file and field when it is
 * missing or malformed. */
bs_status bs_source_read(const char *out_dir, bs_source *src);

/* Open the recording a source describes and check that it still has the
 * sampling rate, channel count and length recorded at sort time. */
bs_status bs_source_open(const bs_source *src, bs_recording *rec);

#endif
