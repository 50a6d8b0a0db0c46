/*
 * phy.h - the Phy / Kilosort output folder ("template-gui" dataset) writer.
 *
 * The folder is what `phy template-gui params.py`, phylib's TemplateModel and
 * SpikeInterface's read_phy / read_kilosort open (docs/FORMATS.md §1: the
 * files of §1.2, the loader rules of §1.3).
 *
 * Mechanism. Nothing that grows with the recording is held in RAM:
 *   - bs_phy_writer_open() creates the folder, removes a stale params.py (so a
 *     folder being rewritten never looks complete), and opens one streaming
 *     .npy writer (src/io/npy.h) per per-spike file: spike_times.npy (int64),
 *     spike_templates.npy and spike_clusters.npy (int32), amplitudes.npy
 *     (float32), pc_features.npy (float32, (S, n_pc, n_pc_chan)), each under
 *     a temporary name.
 *   - bs_phy_writer_append_spikes() appends a block of spikes in time order;
 *     times that go backwards, fall outside [0, n_samples) or ids outside
 *     [0, n_templates) are a bug in the caller (BS_ERR_INTERNAL), nothing is
 *     written for that block.
 *   - spike_positions.npy (float32 S x 2, µm) is optional and streamed the
 *     same way (bs_phy_writer_append_positions), after each spike block;
 *     so is template_features.npy (float32 S x n_tf), once its
 *     template_feature_ind rows (T x n_tf) are set.
 *   - Templates are streamed too (bs_phy_writer_append_templates), with their
 *     pc_feature_ind rows; similar_templates rows may be streamed, otherwise
 *     the writer computes them at close (zero-lag cosine similarity, reading
 *     the templates back from disk one block at a time).
 *   - Channel map / positions / shanks, whitening and per-cluster labels are
 *     small and set once.
 *   - bs_phy_writer_close() commits the streamed files, writes the remaining
 *     arrays and the cluster_*.tsv files, and writes params.py LAST: a folder
 *     without params.py is not a Phy folder. If anything fails, every file
 *     this writer committed is removed again and the error says which file.
 *
 * Per-cluster tables: cluster_group.tsv, cluster_KSLabel.tsv,
 * cluster_Amplitude.tsv and cluster_ContamPct.tsv get one row for every
 * cluster id present in spike_clusters.npy plus every cluster described with
 * bs_phy_writer_set_clusters(), sorted by id (SpikeInterface inner-joins the
 * tables on cluster_id, so a missing row would drop the unit). Unknown values
 * are written as empty cells (phylib skips them); an unknown group is
 * "unsorted". A cluster described without spikes becomes a unit with no
 * spikes in SpikeInterface's read_phy (read_kilosort drops it).
 *
 * A failed streamed write (disk full) leaves the writer unusable: every later
 * close fails and removes what it wrote; call bs_phy_writer_abort().
 */
#ifndef BS_PHY_H
#define BS_PHY_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../io/recording.h"

/* The folder's file names, for the writer and every reader (phy_read.h). */
#define BS_PHY_PARAMS "params.py"
#define BS_PHY_SPIKE_TIMES "spike_times.npy"             /* int64 (S,), samples */
#define BS_PHY_SPIKE_TEMPLATES "spike_templates.npy"     /* int32 (S,) */
#define BS_PHY_SPIKE_CLUSTERS "spike_clusters.npy"       /* int32 (S,) */
#define BS_PHY_AMPLITUDES "amplitudes.npy"               /* float32 (S,) */
#define BS_PHY_SPIKE_POSITIONS "spike_positions.npy"     /* float32 (S, 2), µm */
#define BS_PHY_PC_FEATURES "pc_features.npy"             /* float32 (S, P, n_pc_chan) */
#define BS_PHY_PC_FEATURE_IND "pc_feature_ind.npy"       /* int32 (T, n_pc_chan) */
#define BS_PHY_TEMPLATE_FEATURES "template_features.npy"  /* float32 (S, n_tf) */
#define BS_PHY_TEMPLATE_FEATURE_IND "template_feature_ind.npy" /* uint32 (T, n_tf) */
#define BS_PHY_TEMPLATES "templates.npy"                 /* float32 (T, nt, C), whitened */
#define BS_PHY_TEMPLATES_IND "templates_ind.npy"         /* int32 (T, C) */
#define BS_PHY_SIMILAR_TEMPLATES "similar_templates.npy" /* float32 (T, T) */
#define BS_PHY_CHANNEL_MAP "channel_map.npy"             /* int32 (C,) */
#define BS_PHY_CHANNEL_POSITIONS "channel_positions.npy" /* float32 (C, 2), µm */
#define BS_PHY_CHANNEL_SHANKS "channel_shanks.npy"       /* int32 (C,) */
#define BS_PHY_WHITENING_MAT "whitening_mat.npy"         /* float32 (C, C) */
#define BS_PHY_WHITENING_MAT_INV "whitening_mat_inv.npy" /* float32 (C, C) */
#define BS_PHY_CLUSTER_GROUP "cluster_group.tsv"
#define BS_PHY_CLUSTER_KSLABEL "cluster_KSLabel.tsv"
#define BS_PHY_CLUSTER_AMPLITUDE "cluster_Amplitude.tsv"
#define BS_PHY_CLUSTER_CONTAMPCT "cluster_ContamPct.tsv"
#define BS_PHY_CLUSTER_QC_LABEL "cluster_qc_label.tsv"  /* written by qc */
#define BS_PHY_CLUSTER_UNIT_TYPE "cluster_unit_type.tsv" /* written by qc: unit_type, reason */
#define BS_PHY_MERGE_PROPOSALS "merge_proposals.tsv" /* written by qc: pairs that look like one unit */
/* written by qc, in a folder of its own: read_phy (SpikeInterface) merges every top-level .tsv with a
 * cluster_id column, and this table repeats the cluster_<metric>.tsv files Phy shows */
#define BS_PHY_QC_METRICS "qc/qc_metrics.tsv"
#define BS_PHY_RAW_COPY "recording.dat" /* written by export-raw / sort --export-raw */
#define BS_PHY_PREPROCESSED "preprocessed.dat" /* written by sort --keep-preprocessed */
#define BS_PHY_QC_METRICS_LEGACY "qc_metrics.tsv" /* where earlier builds wrote it (qc removes it) */

typedef struct {
    /* params.py */
    const char *dat_path;    /* raw binary, written as given; a relative path is relative to the Phy
                                folder (phylib resolves it there); NULL or "" writes dat_path = [] */
    int n_channels_dat;      /* interleaved columns in the binary, sync channel included */
    const char *dtype;       /* numpy dtype name of the binary's samples: "int16", "uint16", "int32",
                                "float32" */
    uint64_t offset_bytes;   /* header bytes before the first sample */
    double sample_rate_hz;   /* Hz */
    int hp_filtered;         /* 1 if the binary is already high-pass filtered */
    /* shapes */
    int64_t n_samples;       /* samples per channel in the recording; spike times must be < this */
    int n_chan;              /* C: channels in channel_map.npy (and columns of templates) */
    int nt;                  /* samples per template */
    int n_templates;         /* T: rows of templates.npy; every spike_templates id is < T */
    int n_pc;                /* P: PC features per channel; 0 writes no pc_features files */
    int n_pc_chan;           /* channels per spike in pc_features.npy (KS4: 10); 0 when n_pc is 0 */
} bs_phy_header;

/* One row of the cluster tables. */
typedef struct {
    int32_t id;              /* cluster id (>= 0) */
    const char *group;       /* "good", "mua", "noise", "unsorted"; NULL: "unsorted" */
    const char *ks_label;    /* "good" / "mua"; NULL: empty cell */
    double amplitude;        /* Amplitude column (KS4: template L2 norm, whitened units); NaN: empty */
    double contam_pct;       /* ContamPct column, percent; NaN: empty */
} bs_phy_cluster;

typedef struct bs_phy_writer bs_phy_writer;

/* Disk of a Phy folder of S spikes and T templates (nt samples, C channels,
 * pc features n_pc x n_pc_chan per spike, n_tf template features), bytes,
 * for `plan`: per spike the times, templates, clusters, amplitudes,
 * positions, pc and template features; per template its dense template,
 * channel index, similarity row, pc channels, template-feature row and table
 * rows; per channel the map, positions, shanks and the two whitening
 * matrices; 4 KiB a file for headers and last blocks. */
size_t bs_phy_folder_bytes(int64_t S, int64_t T, int nt, int C, int n_pc, int n_pc_chan, int n_tf);

/* Peak bytes a writer allocates through the accountant (its own copies of
 * the small arrays, the whitening matrices, and the similarity blocks at
 * close, at most 32 MiB), for the planner. */
size_t bs_phy_writer_bytes(int n_templates, int nt, int n_chan);

/* Create `dir` (mkdir -p) and start a folder. BS_ERR_INPUT if the folder
 * cannot be created or written, BS_ERR_INTERNAL for an inconsistent header. */
bs_status bs_phy_writer_open(bs_phy_writer **w, const char *dir, const bs_phy_header *h);

/* Append n spikes in time order. times: sample index (int64, non-decreasing,
 * also across calls); templates: template id per spike; clusters: cluster id
 * per spike (NULL: the template id); amplitudes: per-spike amplitude
 * (required); pc_features: n x n_pc x n_pc_chan float32 (NULL only when n_pc
 * is 0). */
bs_status bs_phy_writer_append_spikes(bs_phy_writer *w, int64_t n, const int64_t *times, const int32_t *templates,
                                      const int32_t *clusters, const float *amplitudes, const float *pc_features);

/* Optional: append the positions of the next n spikes (n x 2 float32: x, y
 * in µm) to spike_positions.npy. Either every spike gets a position or none
 * (then no spike_positions.npy is written). */
bs_status bs_phy_writer_append_positions(bs_phy_writer *w, int64_t n, const float *xy_um);

/* Append n templates (n x nt x n_chan float32, whitened space) in id order,
 * with their pc_feature_ind rows (n x n_pc_chan channel indices in
 * [0, n_chan); NULL only when n_pc is 0). */
bs_status bs_phy_writer_append_templates(bs_phy_writer *w, int64_t n, const float *templates,
                                         const int32_t *pc_feature_ind);

/* Optional, for Phy's template-feature view (match.h defines the values):
 * template_feature_ind.npy, n_templates x n_tf template ids (ids of a row
 * distinct, in [0, n_templates)), written at once; then each spike block's
 * template features (n x n_tf float32) are appended after it, for every
 * spike. Set before the first spike block. */
bs_status bs_phy_writer_set_template_feature_ind(bs_phy_writer *w, int n_tf, const int32_t *ind);
bs_status bs_phy_writer_append_template_features(bs_phy_writer *w, int64_t n, const float *features);

/* Optional: append n rows of similar_templates (n x n_templates float32).
 * Either all T rows are appended, or none (then close computes them). */
bs_status bs_phy_writer_append_similar(bs_phy_writer *w, int64_t n, const float *rows);

/* Required: channel_map (file column of each channel, [0, n_channels_dat)),
 * positions (n_chan x 2: x, y in µm) and shanks (NULL: all shank 0). */
bs_status bs_phy_writer_set_channels(bs_phy_writer *w, const int32_t *channel_map, const float *positions_um,
                                     const int32_t *shanks);
/* The same from a probe (columns, x_um, y_um, shank); p->n_chan must be n_chan. */
bs_status bs_phy_writer_set_probe(bs_phy_writer *w, const bs_probe *p);

/* Optional: whitening matrix (n_chan x n_chan, row-major) and its inverse
 * (NULL: computed by Gauss-Jordan elimination; a singular matrix is
 * BS_ERR_INTERNAL). Without this call both files hold the identity. */
bs_status bs_phy_writer_set_whitening(bs_phy_writer *w, const float *wmat, const float *wmat_inv);

/* Optional: per-cluster labels and metrics (ids distinct and >= 0). */
bs_status bs_phy_writer_set_clusters(bs_phy_writer *w, int n, const bs_phy_cluster *rows);

/* Write everything and free the writer (also on failure). */
bs_status bs_phy_writer_close(bs_phy_writer *w);
/* Drop everything written so far and free the writer. */
void bs_phy_writer_abort(bs_phy_writer *w);

/* The dat_path to write for a recording named `rec_path` (relative to the
 * current directory, as typed on a command line): its absolute, canonical
 * path, like KS4 writes, so the folder keeps working when Phy is started
 * from elsewhere. BS_ERR_INPUT if the file does not exist. */
bs_status bs_phy_resolve_dat_path(const char *rec_path, char *out, size_t out_len);

/* Rewrite OUT/params.py's raw-data lines (dat_path, n_channels_dat, dtype, offset, hp_filtered), keeping the
 * others (atomically; hp_filtered is added when absent). BS_ERR_INPUT when params.py is missing or lacks one
 * of the first four. */
bs_status bs_phy_set_raw_data(const char *dir, const char *dat_path, int n_channels_dat, const char *dtype,
                              uint64_t offset, int hp_filtered);

/* A plain binary copy of the sorted rows of `rec` (every file column, its sample type) in
 * dir/BS_PHY_RAW_COPY, which params.py then names (raw_copy.c: for NWB input, which Phy cannot read). */
struct bs_recording;
bs_status bs_export_raw(const char *dir, const struct bs_recording *rec);

/* The sort's preprocessed recording `pre` (float16 µV, C = pre->n_cols sorted channels, time-major) as
 * dir/BS_PHY_PREPROCESSED with n_cols columns, sorted channel c in column cols[c] (channel_map.npy) and
 * the other columns 0, which params.py then names (dtype float16, hp_filtered True): Phy shows the
 * filtered, referenced traces the sort saw. The file is moved when it already has that layout, else
 * copied (raw_copy.c). */
bs_status bs_export_preprocessed(const char *dir, const struct bs_recording *pre, const int32_t *cols, int n_cols);
/* The bytes bs_export_preprocessed writes beside the stage file for n_samples rows of C = n_chan sorted
 * channels widened to n_cols columns: 0 when the file is moved (cols = 0..C-1 and n_cols = C), else the
 * copy's n_samples x n_cols float16 values. The sort's disk plan counts them (plan.c). */
uint64_t bs_export_preprocessed_copy_bytes(const int32_t *cols, int n_chan, int n_cols, int64_t n_samples);

/* Zero-lag cosine similarity of n templates of `len` floats each: out[i*n+j]
 * = <a_i, a_j> / (|a_i| |a_j|), 0 when either norm is 0; 1 on the diagonal
 * of non-zero templates. */
void bs_phy_cosine_similarity(const float *templates, int n, int64_t len, float *out);

#endif
