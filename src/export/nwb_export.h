/*
 * nwb_export.h - the sorted units of a Phy folder as an NWB Units table
 * (`boundsort export-nwb`, `boundsort sort --nwb`). The folder is read
 * through phy_read.h (its per-cluster tables give the quality columns).
 *
 * Where the units go: with an NWB input, into a copy of that file (its
 * electrodes table is reused; Units.electrodes points at the rows of the
 * sorted series' electrodes); otherwise into a new NWB 2.x file with a
 * device, one electrode group per shank and an electrodes table built from
 * channel_positions.npy / channel_shanks.npy (export/nwb_write.h). The table
 * is /units, or /processing/boundsort/units when the input already has one.
 *
 * The Units table (NWB core Units, a DynamicTable): id = cluster id; for
 * every cluster with spikes, ascending:
 *   spike_times (float64 s) + spike_times_index (VectorIndex, ends): the
 *     unit's spike times; with an NWB input the series' timestamps, or its
 *     starting_time + sample / rate; otherwise sample / sample_rate.
 *   electrodes (DynamicTableRegion) + electrodes_index: the unit's
 *     BS_NWB_UNIT_ELECTRODES channels of largest peak-to-peak mean waveform,
 *     largest first.
 *   waveform_mean (float32 volts, units x samples x those electrodes): the
 *     spike-count-weighted mean of the templates of the unit's spikes
 *     (templates.npy, whitened), unwhitened with whitening_mat_inv.npy
 *     (µV) and scaled to volts as NWB requires.
 *   one column per column of qc/qc_metrics.tsv, cluster_qc_label.tsv,
 *     cluster_KSLabel.tsv, cluster_group.tsv, cluster_Amplitude.tsv and
 *     cluster_ContamPct.tsv that are present (numbers as float64 with NaN
 *     for missing cells, text otherwise; a name already used is skipped, and
 *     so is a numeric column without a single value: all NaN).
 * With bs_nwb_general, the subject, experimenter, institution, lab, keywords
 * and experiment description under /general (nwb_general.c).
 *
 * Memory: spike times are never all in RAM. A first pass counts spikes per
 * cluster; then units are taken in consecutive groups whose spikes fit the
 * spike buffer (spike_buffer spikes, default BS_NWB_SPIKE_BUFFER, 8 bytes
 * each), spike_clusters / spike_times are scanned once per group in blocks
 * and each group's times are written as one contiguous slice. A unit with
 * more spikes than the buffer is streamed alone in buffer-sized pieces. So
 * RAM is O(spike buffer + clusters + one template), and the passes over the
 * spike files are about (spikes / buffer + 1).
 */
#ifndef BS_NWB_EXPORT_H
#define BS_NWB_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "phy_read.h"

#define BS_NWB_SPIKE_BUFFER ((size_t)4 << 20) /* spikes (32 MiB of float64) */
#define BS_NWB_UNIT_ELECTRODES 12             /* electrodes per unit (fewer if the probe has fewer) */

/* The file's metadata that nwbinspector asks for (NULL/0: not written). In a copy of an input NWB file
 * they are added where the input has none, and refused where it has one. */
typedef struct {
    const char *subject_json;         /* a JSON object: subject_id, species, sex, age, ... (bs_nwb_subject_keys) */
    const char *const *experimenters; /* [n_experimenters] "Last, First" */
    int n_experimenters;
    const char *institution, *lab, *experiment_description;
    const char *session_description;  /* a new file's (default: where the units came from) */
    const char *keywords;             /* comma-separated */
} bs_nwb_general;

/* The keys a subject JSON object may have (NWB's Subject fields, all text), NULL-terminated. */
extern const char *const bs_nwb_subject_keys[];
/* Check m before anything is written (nwb_general.c): the subject JSON and the names. */
bs_status bs_nwb_general_check(const bs_nwb_general *m);

typedef struct {
    const char *phy_dir;   /* the sorting: a Phy folder */
    const char *input_nwb; /* the NWB recording it came from, or NULL: write a new file */
    const char *series;    /* that file's ElectricalSeries (NULL: the only one) */
    const char *out_path;  /* NULL: <phy_dir>/units.nwb */
    size_t spike_buffer;   /* spikes held at once (0: BS_NWB_SPIKE_BUFFER) */
    const bs_nwb_general *meta; /* NULL: none */
} bs_nwb_export_opts;

typedef struct {
    int64_t n_units, n_spikes;
    int n_quality_columns;
    int n_passes;          /* scans of the spike files to group spikes by unit */
    char path[4200];       /* the file written */
} bs_nwb_export_summary;

/* Write the NWB file (atomically). BS_ERR_INPUT for a bad folder or input
 * file (naming the file and what was expected); without HDF5 in the build
 * BS_ERR_INPUT "built without HDF5". */
bs_status bs_nwb_export(const bs_nwb_export_opts *o, bs_nwb_export_summary *summary);

/* The per-cluster tables are read with bs_tsv_read (phy_read.h). */

#endif
