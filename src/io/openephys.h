/*
 * openephys.h - the Open Ephys binary format reader (GUI >= 0.6, and the
 * 0.5.x naming), docs/FORMATS.md §3.
 *
 * A recording folder (…/Record Node N/experimentE/recordingR/) holds
 * structure.oebin (JSON) and continuous/<stream folder>/{continuous.dat,
 * sample_numbers.npy, timestamps.npy}; settings.xml (settings_E.xml for
 * experiment E > 1) sits in the Record Node folder. Three layers:
 *
 *   1. structure.oebin -> bs_oe_index (openephys_oebin.c): the continuous
 *      streams, each with its folder, rate, column count (num_channels) and
 *      per-channel name, kind and scale. A channel is SYNC when its name ends
 *      in "_SYNC" (or is "SYNC"), ADC when its name starts with "ADC" or "AI"
 *      followed by a digit or its units are "V", AUX when its name starts
 *      with "AUX"; every other channel is neural. Neural channels are scaled
 *      by bit_volts in their units: "uV", "µV" or "" (µV, as neo assumes for
 *      headstage channels) or "mV" (x 1000). A stream is LFP when its name
 *      ends in "-LFP" or all its neural channels are named "LFP...", OTHER
 *      when it has no neural channel, else NEURAL.
 *   2. settings.xml -> bs_oe_settings (openephys_settings.c): for the
 *      Neuropix-PXI (or OneBox) processor whose node id is the stream's
 *      source_processor_id, every enabled NP_PROBE (under EDITOR in GUI < 0.9,
 *      under EDITOR/CUSTOM_PARAMETERS from 0.9/1.0 on: any descendant is
 *      taken) with its part number (probe_part_number / probePartNumber),
 *      serial, name and the ELECTRODE_XPOS / ELECTRODE_YPOS attributes keyed
 *      by channel ("CH12", or "CH12_3" with the shank in the name), in µm as
 *      written (x includes the shank offset). The shank of a channel is the
 *      second field of its CHANNELS value ("bank:shank") when every value has
 *      one, else the "_s" of its name, else 0. GUI < 0.6 added
 *      250 µm x shank to y on multi-shank probes; that is undone (as
 *      probeinterface does). A probe is named by its custom_probe_name when
 *      that differs from the serial, else by the processor's i-th STREAM
 *      name without "-AP"/"-LFP" (ADC streams skipped), else "NODE.i".
 *      Layouts that give only SELECTED_ELECTRODES (ONIX, newest plugins)
 *      have no positions here: use --probe.
 *   3. bs_openephys_open: resolves REC, picks the stream, measures
 *      continuous.dat and reads the first sample number, and builds the
 *      probe, either from a probe file (opt->probe_path: its columns are the
 *      stream's columns, each must be a neural channel) or from settings.xml.
 *
 * Which NP_PROBE belongs to a stream: the only enabled one, else the one whose
 * name occurs in the stream name (the longest such name). Which settings
 * channel is which column: the stream's neural channels are matched to the
 * probe's channels sorted by channel number, by the number in their names
 * when the names are PREFIX<n> with n running over 0..N-1 or 1..N in any
 * order (a Channel Map or OneBox reorder), else by position. The counts must
 * agree (a saved channel subset needs --probe).
 *
 * REC may be: structure.oebin; a recording folder; an experiment folder, a
 * Record Node folder or a session folder holding Record Node folders (the one
 * recording below it is used, or the message lists them); a
 * continuous/<stream> folder or its continuous.dat (that stream). The stream
 * is opt->stream (a stream_name, a folder name, or SpikeInterface's
 * "Record Node 101#ProbeA-AP"), else the stream of the folder given, else the
 * only NEURAL stream; otherwise the message lists the streams.
 *
 * Time: continuous.dat holds int16 interleaved samples, n_samples = file
 * size / (2 x num_channels) and must equal the length of sample_numbers.npy
 * (int64, GUI >= 0.6) or, without it, of timestamps.npy when that holds int64
 * sample numbers (GUI 0.5.x). bs_recording.first_sample = the first sample
 * number. Sorting reports spike times as 0-based sample indices into
 * continuous.dat (Phy's spike_times.npy is NOT shifted): the acquisition-clock
 * sample of a spike is first_sample + spike_time when the sample numbers have
 * no gaps (a warning says when they do; map through sample_numbers.npy then).
 */
#ifndef BS_OPENEPHYS_H
#define BS_OPENEPHYS_H

#include <stddef.h>

#include "recording.h"

#define BS_OE_OEBIN_MAX_BYTES ((size_t)64 << 20) /* bytes */

typedef enum { BS_OE_CHAN_NEURAL = 0, BS_OE_CHAN_ADC, BS_OE_CHAN_AUX, BS_OE_CHAN_SYNC } bs_oe_chan_kind;
typedef enum { BS_OE_STREAM_NEURAL = 0, BS_OE_STREAM_LFP, BS_OE_STREAM_OTHER } bs_oe_stream_kind;

typedef struct {
    char name[64];        /* channel_name (truncated) */
    bs_oe_chan_kind kind;
    double uv_per_bit;    /* neural: µV per bit; other kinds: bit_volts in their units */
} bs_oe_channel;

typedef struct {
    char name[256];            /* stream_name, or the folder name (GUI 0.5.x) */
    char folder[256];          /* folder_name without its trailing '/' */
    int source_processor_id;   /* -1 if absent */
    double fs_hz;              /* sample_rate, Hz */
    int n_cols;                /* num_channels: int16 columns of continuous.dat */
    int n_neural;              /* neural channels */
    bs_oe_stream_kind kind;
    bs_oe_channel *channels;   /* [n_cols], bs_mem tag "io/openephys" */
} bs_oe_stream;

typedef struct {
    char gui_version[64];  /* "GUI version", "" if absent */
    int n_streams;
    bs_oe_stream *streams; /* [n_streams], bs_mem */
} bs_oe_index;

/* Parse structure.oebin text (len bytes). `name` is used in messages. On
 * failure *idx is empty (safe to free). */
bs_status bs_oe_oebin_parse(const char *text, size_t len, const char *name, bs_oe_index *idx);
void bs_oe_index_free(bs_oe_index *idx);
const char *bs_oe_stream_kind_name(bs_oe_stream_kind kind); /* "neural", "LFP", "no neural channels" */

/* The stream to sort: `want` (see above; NULL: the only NEURAL stream).
 * `name` (the oebin path) is used in messages. */
bs_status bs_oe_pick_stream(const bs_oe_index *idx, const char *want, const char *name, int *which);

typedef struct {
    char part_number[64]; /* "" if absent */
    char serial[64];
    char name[128];       /* see above */
    int has_positions;    /* 0: no ELECTRODE_XPOS / ELECTRODE_YPOS */
    int n;                /* channels with a position */
    int *chan;            /* [n] channel numbers, ascending (bs_mem) */
    double *x_um, *y_um;  /* [n] µm as written (after the GUI < 0.6 y correction) */
    int *shank;           /* [n] shank id as written (0 if none) */
} bs_oe_np_probe;

typedef struct {
    char name[512];           /* file name for messages */
    char gui_version[64];     /* INFO/VERSION text, "" if absent */
    int processor_id;         /* node id of the processor used, -1 if it has none */
    int n_probes;             /* enabled NP_PROBE elements */
    bs_oe_np_probe *probes;   /* [n_probes] (bs_mem) */
} bs_oe_settings;

/* Parse settings.xml text for the processor with node id `processor_id`
 * (-1: the only Neuropix-PXI / OneBox processor). On failure *s is empty. */
bs_status bs_oe_settings_parse(const char *text, size_t len, const char *name, int processor_id, bs_oe_settings *s);
void bs_oe_settings_free(bs_oe_settings *s);

/* The probe of `stream` (sorted channels = its neural channels, column =
 * their column) from parsed settings. On failure *p is zeroed. */
bs_status bs_oe_settings_probe(const bs_oe_settings *s, const bs_oe_stream *stream, bs_probe *p);

/* 1 if `path` looks like an Open Ephys recording (see REC above). */
int bs_openephys_detect(const char *path);

/* Open an Open Ephys recording (opt: stream, probe_path, probe_index; the
 * raw-binary options are ignored). On failure *rec is zeroed. */
bs_status bs_openephys_open(const char *path, const bs_open_options *opt, bs_recording *rec);

typedef struct {
    char name[256];
    char folder[256];
    double fs_hz;
    int n_cols, n_neural;
    bs_oe_stream_kind kind;
} bs_oe_stream_info;

/* The continuous streams of the recording REC resolves to, for listing
 * (free *list with free()). */
bs_status bs_openephys_list_streams(const char *path, bs_oe_stream_info **list, int *n);

#endif
