/*
 * nwb.h - the NWB (HDF5) recording reader (docs/FORMATS.md §4.1).
 *
 * Three layers:
 *   1. bs_nwb_meta (nwb_meta.c, no HDF5 needed): everything the reader took
 *      from the file's attributes and small datasets, turned into the
 *      recording's scaling, timing and probe by bs_nwb_meta_resolve(), which
 *      makes every check and writes every "bad file" message. It is a pure
 *      function of its input, so it is unit-tested and fuzzed without HDF5.
 *   2. nwb.c (HDF5): finds the ElectricalSeries groups (neurodata_type
 *      attribute) under /acquisition and /processing, picks one (by
 *      --series, or the only one), reads the attributes and the small
 *      datasets into a bs_nwb_meta, and installs a row reader on the
 *      recording: the batch reader (batch.h) then reads `data` hyperslab by
 *      hyperslab (rows of all channels), never the whole dataset. HDF5
 *      converts the stored type to the recording's sample type on the way.
 *   3. Helpers for writers and the CLI: the series list, the electrodes
 *      table row of each data column, sample times in seconds.
 *
 * Scaling: volts = data * conversion * channel_conversion[c] + offset, so
 * µV per raw unit = conversion * channel_conversion[c] * 1e6 and the raw
 * offset = -offset / (conversion * channel_conversion[c]). bs_recording has
 * one raw offset for all channels: with a non-zero offset and unequal
 * channel_conversion the offset of channel 0 is used for all (a warning says
 * so; a constant per-channel level is removed by the sorter's mean removal
 * and high-pass filter, so it never changes a sort).
 *
 * Sample types: int8/uint8/int16 are read as int16, uint16 as uint16, int32
 * as int32, float32 and float64 as float32 (float64 volts keep 7 significant
 * digits, far below the noise). Other types are refused.
 *
 * Geometry: the electrodes table's rel_x / rel_y (µm, the contact position
 * on the probe), never x / y / z (brain coordinates). Shanks: distinct
 * group_name values, numbered in order of first appearance among the
 * series' channels (all shank 0, with a warning, when group_name is absent).
 *
 * Time: starting_time (s) with its rate attribute (Hz), or timestamps: then
 * the rate is 1 / the median step of the first BS_NWB_TIMESTAMPS_HEAD
 * timestamps (bounded memory), and spike times written back use the
 * timestamps themselves (bs_nwb_sample_times).
 *
 * Without HDF5 in the build every entry point fails with BS_ERR_INPUT
 * "built without HDF5".
 */
#ifndef BS_NWB_H
#define BS_NWB_H

#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"
#include "recording.h"

#define BS_NWB_MAX_SERIES 256          /* ElectricalSeries listed per file */
#define BS_NWB_TIMESTAMPS_HEAD 65537   /* timestamps read to estimate the rate */

/* What the reader found in the file (pointers are borrowed). */
typedef struct {
    const char *file;            /* file name, for messages */
    const char *series;          /* series path, for messages */
    int rank;                    /* rank of data */
    int64_t n_times, n_chan;     /* data shape (time x channels) */
    bs_sample_type dtype;        /* sample type the data is read as */
    int has_conversion, has_offset;
    double conversion;           /* data attribute, V per raw unit (1 when absent) */
    double offset;               /* data attribute, V (0 when absent) */
    const double *channel_conversion; /* [n_channel_conversion], NULL when absent */
    int64_t n_channel_conversion;
    int has_starting_time, has_rate;
    double starting_time;        /* s */
    double rate;                 /* Hz */
    const double *timestamps;    /* first n_timestamps_head timestamps (s), NULL when absent */
    int64_t n_timestamps_head, n_timestamps; /* read, and the dataset's length */
    const int64_t *electrodes;   /* [n_electrodes] table rows of the data columns, NULL when absent */
    int64_t n_electrodes;
    int64_t n_rows;              /* rows of the electrodes table (-1 when no table) */
    const double *rel_x, *rel_y; /* [n_rel_x], [n_rel_y] µm, NULL when absent */
    int64_t n_rel_x, n_rel_y;
    const char *const *group_name; /* [n_group_name], NULL when absent */
    int64_t n_group_name;
} bs_nwb_meta;

/* Check m and fill rec's fs_hz, n_samples, n_cols, dtype, uv_per_bit,
 * offset, first_sample and probe (column c = data column c). *t0_s gets the
 * time of sample 0 in seconds. On failure rec's probe and uv_per_bit are
 * freed. Warnings are logged. */
bs_status bs_nwb_meta_resolve(const bs_nwb_meta *m, bs_recording *rec, double *t0_s);

/* The rate of regular timestamps: 1 / median of the steps (n >= 2, all
 * finite and increasing, else BS_ERR_INPUT naming `what`). */
bs_status bs_nwb_rate_from_timestamps(const double *t, int64_t n, const char *what, double *rate_hz);

/* 1 if the build reads NWB (HDF5 present). */
int bs_nwb_available(void);
/* 1 if path is a regular file named *.nwb or starting with the HDF5
 * signature (also at byte 512, 1024 or 2048, after a user block). */
int bs_nwb_looks_like(const char *path);

/* Open an ElectricalSeries of an NWB file as a recording. series: the
 * series' path (with or without the leading '/') or its name (last path
 * component); NULL picks the only one and fails with the list when there
 * are several. */
bs_status bs_nwb_open(const char *path, const char *series, bs_recording *rec);

/* NWB details of a recording opened by bs_nwb_open (NULL for others). */
typedef struct {
    char series[1024];         /* the series' path, e.g. "/acquisition/ElectricalSeries" */
    char electrodes[1024];     /* path of the electrodes table it refers to */
    const int64_t *electrode_row; /* [rec->n_cols] electrodes table row of each data column */
    int64_t n_table_rows;      /* rows of the electrodes table */
    double starting_time_s;    /* time of sample 0, s */
    int has_timestamps;        /* times come from per-sample timestamps */
    int n_series;              /* ElectricalSeries in the file */
    const char *series_list[BS_NWB_MAX_SERIES]; /* their paths */
} bs_nwb_info;
const bs_nwb_info *bs_nwb_get_info(const bs_recording *rec);

/* Times in seconds of n sample indices (each in [0, n_samples)): the
 * series' timestamps, or starting_time + sample / rate. */
bs_status bs_nwb_sample_times(const bs_recording *rec, const int64_t *samples, int64_t n, double *t_s);

/* Text lines for `boundsort info` (nothing for other formats). */
void bs_nwb_print_info(const bs_recording *rec, FILE *out);

#endif
