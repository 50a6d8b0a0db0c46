/*
 * recording.h - an opened recording: where the samples are, how to scale them
 * to µV, and where each sorted channel sits on the probe.
 *
 * Every reader (raw + probe file, SpikeGLX, later Open Ephys and NWB) fills a
 * bs_recording. Samples are stored interleaved in the file: sample t of file
 * column c is at data_offset + (t * n_cols + c) * sample_bytes. The sorter
 * sees only the probe's channels (`probe.n_chan`, each mapped to a file
 * column), scaled to µV as (raw - offset) * uv_per_bit[ch]. Columns that are
 * not on the probe (sync, reference, unused) are never read.
 */
#ifndef BS_RECORDING_H
#define BS_RECORDING_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"

typedef enum { BS_SAMPLE_I16 = 0, BS_SAMPLE_U16, BS_SAMPLE_I32, BS_SAMPLE_F32, BS_SAMPLE_F16 } bs_sample_type;

typedef struct {
    int n_chan;     /* channels used for sorting */
    int *column;    /* [n_chan] column of the channel in the data file */
    double *x_um;   /* [n_chan] contact x, µm (shank offset included) */
    double *y_um;   /* [n_chan] contact y (depth), µm */
    int *shank;     /* [n_chan] shank index, 0-based */
    int n_shanks;
    char model[64]; /* probe model or part number, "" if unknown */
    float *adc_shift; /* [n_chan] ADC sampling delay of the channel within a sample period, samples
                         (0 <= d < 1; preprocess.h, PHASE SHIFT), or NULL when the probe has no known
                         multiplexing (bs_probe_set_adc_shift) */
} bs_probe;

typedef struct bs_recording {
    char data_path[4096]; /* binary file holding the samples */
    char format[16];      /* "raw", "spikeglx", ... */
    bs_sample_type dtype;
    int n_cols;           /* columns per sample in the file (all saved channels) */
    uint64_t data_offset; /* bytes before the first sample */
    int64_t n_samples;    /* samples per channel (from the real file size; a window's length after
                             bs_recording_window) */
    int64_t row0;         /* samples of the file before the first one used: a window's start (0: none);
                             sample t of the recording is row row0 + t of the file (io/batch.c adds it) */
    int windowed;         /* 1 after bs_recording_window */
    int direct_io;        /* 1: batch readers read the file with O_DIRECT where the file system allows (batch.h;
                             a file each pass reads once from the disk); 0: through the page cache */
    double fs_hz;         /* sampling rate, Hz */
    float *uv_per_bit;    /* [probe.n_chan] µV per raw unit */
    float offset;         /* raw units subtracted before scaling (0 for signed ints) */
    int64_t first_sample; /* sample number of the first sample in the acquisition clock */
    bs_probe probe;
    /* Formats whose samples are not a plain interleaved file (NWB/HDF5) set
     * read_rows: it reads rows [row0, row0 + n_rows) of all n_cols columns as
     * `dtype` into dst (row-major), in place of pread() at data_offset, and
     * may be called from several threads at once. close_source frees
     * `source` (reader state); both NULL for plain files. */
    bs_status (*read_rows)(const struct bs_recording *rec, int64_t row0, int64_t n_rows, void *dst);
    void (*close_source)(struct bs_recording *rec);
    void *source;
    size_t source_bytes; /* tracked bytes `source` holds (NWB: chunk cache, electrode rows), for the plan */
    char stream[256];     /* stream read, for formats that hold several ("" otherwise) */
    int n_dropped;        /* probe channels dropped since opening (bs_recording_drop_channels) */
    int *dropped_cols;    /* [n_dropped] their file columns, in the order dropped */
} bs_recording;

/* Options for opening a raw binary (ignored by self-describing formats). */
typedef struct {
    const char *probe_path; /* probe file (probeinterface JSON, Kilosort JSON, .prb), or NULL */
    double fs_hz;           /* 0: unknown */
    int n_cols;             /* columns per sample; 0: what the probe file requires (Kilosort n_chan, else
                               the largest device channel index + 1) */
    const char *dtype;      /* "int16" (default), "uint16", "int32", "float32", "float16" */
    double uv_per_bit;      /* 0: 1.0 */
    double offset;          /* raw units subtracted before scaling (uint16: 0 means 32768) */
    uint64_t header_bytes;  /* bytes to skip at file start */
    int probe_index;        /* probe of a probeinterface ProbeGroup to use (0: the first) */
    const char *series;     /* NWB: ElectricalSeries to read (path or name); NULL: the only one */
    const char *stream;     /* stream of a multi-stream recording (Open Ephys), or NULL */
    int fs_unchecked;       /* 1: accept a sampling rate outside BS_FS_MIN_HZ..BS_FS_MAX_HZ (--fs-unchecked) */
} bs_open_options;

/* The plausible sampling rates: bs_recording_open refuses others (BS_ERR_INPUT) unless opt->fs_unchecked. */
#define BS_FS_MIN_HZ 1000.0
#define BS_FS_MAX_HZ 1000000.0

/* Open REC: an NWB file (HDF5), a raw folder (bs_raw_folder_open), an Open
 * Ephys recording (openephys.h; opt->probe_path overrides its geometry), a
 * SpikeGLX .bin (with .meta beside it) or a folder holding one, or a raw
 * binary with opt->probe_path. The one place that decides a path's format:
 * sort, plan, info, qc and batch's discovery all open recordings here. A sampling rate outside
 * BS_FS_MIN_HZ..BS_FS_MAX_HZ (given or read from the file) is bad input unless opt->fs_unchecked. */
bs_status bs_recording_open(const char *path, const bs_open_options *opt, bs_recording *rec);
void bs_recording_close(bs_recording *rec);
/* Keep only samples [start, end) of rec (within its current samples): n_samples becomes end - start and
 * row0 and first_sample move by start. BS_ERR_INPUT when the window is empty or outside the recording. */
bs_status bs_recording_window(bs_recording *rec, int64_t start, int64_t end);

/* The raw-binary reader behind bs_recording_open (src/io/raw.c): a headerless
 * (or header_bytes-prefixed) interleaved binary described by opt. */
bs_status bs_raw_open(const char *path, const bs_open_options *opt, bs_recording *rec);

/* A raw folder: a folder holding recording.bin (what `boundsort simulate`
 * writes). 1 if `path` is one, else 0. */
int bs_raw_folder_detect(const char *path);
/* Open a raw folder DIR: DIR/recording.bin read as DIR/recording.json (fs_hz;
 * optional n_chan, dtype, uv_per_bit, offset, header_bytes, n_samples) and
 * DIR/probe.json (else DIR/probe.prb) describe it. Options set in opt
 * override those files field by field (probe_path replaces the probe file;
 * fs_hz, n_cols, dtype, uv_per_bit, offset, header_bytes when non-zero /
 * non-NULL). BS_ERR_INPUT naming the file and field on a missing or
 * malformed description. */
bs_status bs_raw_folder_open(const char *dir, const bs_open_options *opt, bs_recording *rec);

/* The sample types' names, for messages. */
#define BS_SAMPLE_TYPE_NAMES "int16, uint16, int32, float32 or float16"
/* "int16", "uint16", "int32", "float32", "float16" (also "i2", "u2", "i4", "f4", "f2") ->
 * type; BS_ERR_USAGE with a message on anything else. NULL -> int16. */
bs_status bs_sample_type_parse(const char *text, bs_sample_type *t);
const char *bs_sample_type_name(bs_sample_type t); /* "int16", ... */

size_t bs_sample_bytes(bs_sample_type t);
/* Duration in seconds. */
double bs_recording_duration_s(const bs_recording *rec);

/* Drop the probe channels c with drop[c] set: the probe's arrays and uv_per_bit are compacted in place
 * (the others keep their order; shanks left empty are removed and the rest renumbered in order) and the
 * dropped file columns appended to rec->dropped_cols. BS_ERR_INPUT if every channel would go. */
bs_status bs_recording_drop_channels(bs_recording *rec, const uint8_t *drop);
/* The same by file column (OUT/source.json's dropped columns); BS_ERR_INPUT for a column not on the probe. */
bs_status bs_recording_drop_columns(bs_recording *rec, const int *cols, int n_cols);

/* Probe helpers */
bs_status bs_probe_alloc(bs_probe *p, int n_chan);
void bs_probe_free(bs_probe *p);
/* Checks: n_chan >= 1, finite positions, no duplicate (x, y, shank), columns
 * in [0, n_cols) and distinct. `name` is used in messages. */
bs_status bs_probe_validate(const bs_probe *p, int n_cols, const char *name);

#endif
