/*
 * spikeglx.h - the SpikeGLX reader: an imec `.ap.bin` with its `.meta`.
 *
 * Three layers:
 *   1. bs_sglx_meta: the `.meta` text parsed into key=value pairs (keys that
 *      start with '~' are stored without it). Lines end in LF, CRLF or CR;
 *      a missing trailing newline is fine; blank lines are skipped; a line
 *      without '=' is an error (the file is not a .meta). Duplicate keys:
 *      the LAST value wins (as in SpikeGLX's own QSettings-style reader and in
 *      probeinterface/neo), and a warning names the key. Sizes are bounded by
 *      BS_SGLX_META_MAX_BYTES; a NUL byte is refused (not a text file).
 *   2. bs_sglx_info: what the metadata says about the file: columns
 *      (nSavedChans), sampling rate, the sorted channels as a bs_probe
 *      (positions in µm, shank, file column), µV per bit per sorted channel.
 *      Geometry comes from `~snsGeomMap` when present (x of an entry is
 *      relative to its shank, so x = shank * shankPitch + x), otherwise from
 *      `~imroTbl` and the built-in part-number table (ProbeTable constants).
 *      The sorted channels are the saved AP channels in file-column order,
 *      minus the SY (sync) columns, the LF columns of combined 3A-style files,
 *      the on-shank reference channels (the part's reference channel, e.g.
 *      191 for NP1.0 and 127 for NP2.0 types 21/24, the ten phase-3A
 *      reference channels, and every entry whose "used" flag is 0 in
 *      ~snsGeomMap or ~snsShankMap), and the standby channels (imStdby).
 *   3. bs_spikeglx_open: resolves the path (the .bin, the .meta, or a folder
 *      holding exactly one *.ap.bin), measures the binary and fills a
 *      bs_recording (n_samples from the REAL file size).
 *
 * Gains (docs/FORMATS.md §2.3): µV/bit = imAiRangeMax / imMaxInt / gain * 1e6.
 * NP1.0-format imro tables (types 0, 1020..1300, phase 3A) give the AP gain
 * per channel (entry field 4), indexed by acquired channel id; NP1110 gives it
 * in the imro header; otherwise imChan0apGain; otherwise the part's fixed gain
 * (80 for NP2.0 types 21/24, 100 for NP2003/2013/2020...). imMaxInt defaults to
 * 2^(ADC bits - 1) of the part (512 when the part is unknown), imAiRangeMax to
 * half the part's ADC range.
 *
 * A recording with zero samples opens (n_samples = 0); refusing it is the
 * sorter's job, which needs at least one batch.
 */
#ifndef BS_SPIKEGLX_H
#define BS_SPIKEGLX_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "recording.h"

#define BS_SGLX_META_MAX_BYTES ((size_t)64 << 20) /* bytes; real metas are < 100 KiB */

typedef struct {
    const char *key;   /* without a leading '~' */
    const char *value; /* surrounding blanks trimmed */
    int line;          /* 1-based line number in the file */
} bs_sglx_kv;

typedef struct {
    char name[512]; /* file name for messages */
    char *text;     /* owned, modified copy of the text (keys/values point into it) */
    bs_sglx_kv *kv; /* [n] in file order */
    size_t n;
} bs_sglx_meta;

/* Parse meta text (len bytes, need not be NUL-terminated). `name` is used in
 * messages. On failure *m is left empty (safe to free). */
bs_status bs_sglx_meta_parse(const char *text, size_t len, const char *name, bs_sglx_meta *m);
bs_status bs_sglx_meta_read(const char *path, bs_sglx_meta *m);
void bs_sglx_meta_free(bs_sglx_meta *m);

/* Value of a key (without '~'; a leading '~' in `key` is ignored), or NULL.
 * With duplicates, the last one. */
const char *bs_sglx_meta_get(const bs_sglx_meta *m, const char *key);
/* Required numeric fields: BS_ERR_INPUT naming the file and the key when the
 * key is missing or its value is not a (finite) number / integer in range. */
bs_status bs_sglx_meta_double(const bs_sglx_meta *m, const char *key, double *v);
bs_status bs_sglx_meta_int64(const bs_sglx_meta *m, const char *key, int64_t lo, int64_t hi, int64_t *v);

/* Parse a printer-style list "0:10,50:55,100" (ranges inclusive) of values in
 * [0, limit) into a malloc'ed array; `field` is named in messages. */
bs_status bs_sglx_parse_list(const char *text, int limit, const char *name, const char *field, int **out,
                             int *n_out);

enum {
    BS_SGLX_IGNORE_GEOMMAP = 1 /* compute positions from ~imroTbl even when ~snsGeomMap is present */
};

typedef struct {
    bs_probe probe;           /* sorted channels (see above); column = file column */
    float *uv_per_bit;        /* [probe.n_chan] µV per bit, bs_mem tag "io/spikeglx" */
    int *acq_chan;            /* [probe.n_chan] acquired (readout) channel id, bs_mem */
    int n_saved_chans;        /* int16 columns per sample in the binary */
    int n_ap, n_lf, n_sy;     /* saved AP / LF / SY columns (snsApLfSy, or from the subset) */
    int sync_column;          /* first SY column, -1 if none */
    double fs_hz;             /* imSampRate, Hz */
    int64_t first_sample;     /* firstSample, samples (0 if absent) */
    int64_t meta_file_bytes;  /* fileSizeBytes, bytes (-1 if absent) */
    char part_number[64];     /* part used for geometry/gains ("" if geometry came only from snsGeomMap) */
    int geometry_from_geommap;/* 1: ~snsGeomMap, 0: ~imroTbl + part table */
} bs_sglx_info;

/* The ADC sampling delays (samples) of channels read out on readout[0..n) of a Neuropixels part in the
 * part's standard multiplexing order (what SpikeGLX's ~muxTbl lists for it): 1 when the part's layout is
 * known (384 readout channels of 1.0 or 2.0 technology; spikeglx_geom.c), else 0. For readers without
 * SpikeGLX's table (Open Ephys). */
int bs_neuropixels_standard_shifts(const char *part_number, const int *readout, int n, double *shift);

/* Everything the metadata says; no file access. `flags`: BS_SGLX_IGNORE_GEOMMAP. */
bs_status bs_sglx_info_from_meta(const bs_sglx_meta *m, int flags, bs_sglx_info *info);
void bs_sglx_info_free(bs_sglx_info *info);

/* Convenience for tests and the fuzzer: parse meta text and return the probe,
 * µV/bit per sorted channel (bs_mem, tag "io/spikeglx"), nSavedChans and the
 * rate. The caller frees with bs_probe_free and bs_mem_free. */
bs_status bs_spikeglx_probe_from_meta(const char *meta_text, size_t len, const char *name, bs_probe *probe,
                                      float **uv_per_bit, int *n_saved_chans, double *fs_hz);

/* Resolve `path` (a .bin, a .meta, or a folder with exactly one *.ap.bin) to
 * the binary and its metadata file. */
bs_status bs_spikeglx_resolve(const char *path, char *bin_path, size_t bin_len, char *meta_path,
                              size_t meta_len);

/* Open a SpikeGLX recording. rec->probe comes from bs_probe_alloc and
 * rec->uv_per_bit from bs_mem_alloc, so bs_recording_close (or bs_probe_free
 * + bs_mem_free) releases them. On failure *rec is zeroed. */
bs_status bs_spikeglx_open(const char *path, bs_recording *rec);

#endif
