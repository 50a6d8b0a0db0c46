/*
 * report.h - `boundsort report`: one self-contained HTML page (report.html)
 * that shows a sorting output folder and lets a person curate it offline.
 *
 * What the page holds (all data precomputed here, embedded as compact JSON
 * with base64 typed arrays, drawn by web/plot.js + web/report.js):
 *   - a sortable, filterable unit table: cluster id, labels (group, KSLabel,
 *     qc_label), spike count, firing rate, mean amplitude, position, peak
 *     channel, every column of qc/qc_metrics.tsv and the KS cluster tables;
 *   - per unit: its template on the probe layout, autocorrelogram, amplitudes
 *     over time and spike positions (at most `spikes_per_unit` spikes, evenly
 *     spread over the unit's train), cross-correlograms with its
 *     `n_similar` most similar units (similar_templates.npy);
 *   - a drift map (binned spike depth against time, mean amplitude as colour)
 *     and the estimated motion (drift.npy) when present;
 *   - the run summary (run_summary.json) and the memory timeline stacked by
 *     tag when the run recorded a trace;
 *   - curation: labels good/mua/noise, merge groups, splits, exported in the
 *     browser as a SpikeInterface curation JSON (format v2) and Phy's
 *     cluster_group.tsv. A split needs every spike of the unit: when the
 *     folder has at most `split_max_spikes` spikes, each spike's time (u16
 *     over the recording) and amplitude (u8 over its unit's range) is in the
 *     page, 3 bytes (4 in base64) a spike.
 *
 *   - a traces view: `trace_stretches` stretches of `trace_ms` of the
 *     preprocessed recording (from OUT/source.json), int8, with every spike
 *     in them marked by unit (report_traces.c).
 *
 * Size budget of report.html at the default caps (300 spikes per unit, 5
 * similar units, 16 template channels, a 600 x 300 drift map, 2,000,000
 * spikes held for splitting, 4 stretches of 100 ms): about 0.9 MB of fixed
 * content plus about 7 KB per unit plus 4 bytes per spike held plus the
 * traces (4/3 byte per sample and channel: 6.1 MB for 384 channels at
 * 30 kHz), i.e. at most about 23 MB for 1,000 units on 384 channels
 * whatever the number of spikes (a folder with more spikes than the cap
 * holds none of them for splits). The test on 1,000 units and 1,000,000 spikes
 * (tests/cli/test_report_scale.sh) checks the bound.
 *
 * Memory: per-spike files are streamed in blocks (src/io/npy_rows.h);
 * RAM is O(units x caps + templates' one row + drift grid), every bulk
 * buffer comes from the accountant under a "report/..." tag.
 */
#ifndef BS_REPORT_H
#define BS_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"

typedef struct {
    int spikes_per_unit;  /* cap on spikes drawn per unit in the amplitude and position plots */
    int n_similar;        /* cross-correlograms per unit with its most similar units */
    int drift_time_bins;  /* columns of the binned drift map */
    int drift_depth_bins; /* rows of the binned drift map (at most) */
    int64_t split_max_spikes; /* every spike's time and amplitude is in the page (for splitting units) when the
                                 folder has at most this many spikes; 0: never */
    int trace_stretches;      /* stretches of preprocessed traces in the page (0: none) */
    double trace_ms;          /* length of each stretch, ms */
} bs_report_params;

typedef struct {
    int64_t n_spikes;    /* spikes in the folder */
    int64_t n_units;     /* distinct cluster ids */
    int64_t n_ccg_pairs; /* cross-correlograms computed */
    uint64_t html_bytes; /* size of the page written, bytes */
    int n_notes;         /* optional inputs skipped or caveats, listed on the page */
} bs_report_summary;

void bs_report_params_default(bs_report_params *p);

/* BS_ERR_USAGE, with a message naming the `report` option, when a field is out of its range (the one place
 * the ranges live: the CLI and bs_report_write both call it). */
bs_status bs_report_check_params(const bs_report_params *p);

/* The page's size bound at the default caps (above: 0.9 MB + 7 KB per unit + 4 bytes per spike held for
 * splitting, at most split_max_spikes), bytes, for the disk `sort` plans when it writes the report
 * (test_report_scale checks the bound at 1,000 units). */
size_t bs_report_page_bytes(const bs_report_params *p, int64_t n_units, int n_chan, double fs_hz);

/* Read the Phy folder `dir` and write the page atomically to html_path
 * (NULL: dir/report.html). BS_ERR_INPUT when dir is not a Phy folder or a file
 * in it is malformed (the message names the file and field), BS_ERR_USAGE for
 * out-of-range params, BS_ERR_MEMORY when a buffer does not fit the budget. */
bs_status bs_report_write(const char *dir, const char *html_path, const bs_report_params *p,
                          bs_report_summary *summary);

#endif
