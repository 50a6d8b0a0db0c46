/*
 * report_internal.h - what the report's files share: the data gathered from
 * the folder (rp_data) and the streaming JSON writer (rp_json); the folder
 * is read with the Phy-folder reader (src/export/phy_read.h).
 *
 * Order of work (report.c): folder basics and units (report_units.c), tables
 * (report_tables.c), templates (report_templates.c), similar units, then one
 * streamed pass over the per-spike files (report_spikes.c) that fills the
 * spike subsamples, correlograms, positions and, without driftmap.npy, the
 * drift map (report_drift.c); run summary and memory trace (report_run.c);
 * finally the page is written, each file emitting its own part of the JSON.
 */
#ifndef BS_REPORT_INTERNAL_H
#define BS_REPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../export/phy_read.h"
#include "report.h"

/* ---- correlogram geometry (fixed; the page and the tests rely on it) ---- */
#define RP_ACG_BINS 100      /* |lag| in [0, 50) ms */
#define RP_ACG_BIN_MS 0.5    /* ms per ACG bin */
#define RP_CCG_BINS 100      /* lag in [-50, 50) ms */
#define RP_CCG_BIN_MS 1.0    /* ms per CCG bin */
#define RP_CCG_HALF_MS 50.0  /* window each side, ms */
#define RP_RING 256          /* recent spike times kept per unit for the correlograms */
#define RP_TEMPLATE_CHANS 16 /* channels of a unit's template drawn around its peak channel */
#define RP_MAX_CLUSTER_ID 16777215 /* larger ids are refused (the id -> unit table is dense) */
#define RP_BLOCK 65536       /* rows per block when streaming per-spike files */
#define RP_TRACE_MAX_STRETCHES 16 /* most stretches in the traces view */
#define RP_TRACE_MAX_SPIKES 200000 /* most spikes marked in the traces view */
#define RP_SPLIT_BYTES_PER_SPIKE 4u /* page bytes per spike held for splitting: u16 time + u8 amplitude, base64 */

/* ---- streaming JSON writer ---- */
typedef struct {
    FILE *fp;
    int depth;
    unsigned char comma[64]; /* per nesting level: a value was already written */
} rp_json;

void rpj_obj(rp_json *j, const char *key);  /* key NULL: an element of an array, or the root */
void rpj_end_obj(rp_json *j);
void rpj_arr(rp_json *j, const char *key);
void rpj_end_arr(rp_json *j);
void rpj_num(rp_json *j, const char *key, double v);  /* NaN / inf become null */
void rpj_int(rp_json *j, const char *key, int64_t v);
void rpj_str(rp_json *j, const char *key, const char *s); /* NULL becomes null; '<' is escaped */
void rpj_bool(rp_json *j, const char *key, int v);
void rpj_null(rp_json *j, const char *key);
/* {"dtype": "u8"|"i8"|"u16"|"i16"|"u32"|"i32"|"f32", "n": n, "b64": "..."}: n elements, little-endian */
void rpj_typed(rp_json *j, const char *key, const char *dtype, const void *data, size_t n);
/* Counts as u16 when all fit, else u32. */
void rpj_counts(rp_json *j, const char *key, const uint32_t *c, size_t n);
void rpj_floats(rp_json *j, const char *key, const float *v, size_t n);   /* plain number array */
void rpj_doubles(rp_json *j, const char *key, const double *v, size_t n); /* plain number array */

/* ---- reading numeric .npy files in blocks, as double ----
 * bs_phy_col (src/export/phy_read.h) with any numeric dtype, 1 or 2
 * dimensions and `want_cols` columns (0: any). */
static inline bs_status rp_col_open(bs_phy_col *c, const char *dir, const char *name, int64_t want_cols, int64_t block)
{
    return bs_phy_col_open(c, dir, name, BS_PHY_COL_NUMBER, want_cols, block, "report/read_block");
}

/* ---- the gathered data ---- */
typedef struct {
    char *name;   /* column key shown in the table header */
    int is_text;  /* 1: text values, 0: numbers */
    double *num;  /* per unit (NaN = missing), accountant */
    char **text;  /* per unit (NULL = missing), pointing into the file's text; accountant array */
    const char *source; /* file it came from */
} rp_column;

#define RP_MAX_NOTES 64
#define RP_MAX_COLUMNS 96
#define RP_MAX_TSV 8

typedef struct {
    const char *dir;
    bs_report_params p;
    char *notes[RP_MAX_NOTES];
    int n_notes;

    /* recording */
    double fs_hz;       /* sample rate, Hz */
    double duration_s;  /* recording length, s */
    const char *duration_source;
    int64_t n_spikes;

    /* probe */
    int n_chan;
    float *chan_x, *chan_y; /* µm */
    int32_t *chan_shank;

    /* units: dense index 0..n_units-1 in ascending cluster id */
    int64_t n_units;
    int32_t *unit_id;      /* cluster id */
    int32_t *id_to_unit;   /* cluster id -> unit index or -1 (size max_id + 1) */
    int32_t max_id;
    int64_t *count;        /* spikes per unit */
    int32_t *tmpl;         /* majority template per unit, -1 when unknown */
    double *amp_sum;       /* sum of amplitudes.npy per unit */
    double *pos_sum;       /* (n_units, 2) sums of spike_positions x, y, µm */
    int64_t *pos_n;        /* spikes with a finite position per unit */
    int have_clusters, have_templates_ids, have_amplitudes, have_positions;

    /* tables */
    rp_column cols[RP_MAX_COLUMNS];
    int n_cols;
    bs_tsv_table tsv[RP_MAX_TSV]; /* the tables read (text cells point into their storage) */
    int n_tsv;
    int col_group, col_ks, col_qc; /* indices of label columns or -1 */

    /* templates */
    int64_t n_templates;   /* rows of templates.npy (0 if absent) */
    int nt;                /* samples per template */
    int32_t *peak_ch;      /* per unit, -1 without a template */
    int16_t *tchan;        /* (n_units, RP_TEMPLATE_CHANS) channel indices, -1 unused */
    int8_t *twave;         /* (n_units, RP_TEMPLATE_CHANS, nt) quantized waveforms */
    float *tscale;         /* per unit: waveform value per quantization step */
    float *tpos;           /* (n_units, 2) template centre of mass, µm (NaN without template) */

    /* similar units */
    int n_sim;             /* columns of sim_unit */
    int32_t *sim_unit;     /* (n_units, n_sim) unit indices, -1 unused */
    float *sim_score;      /* (n_units, n_sim) */
    const char *sim_source;
    int64_t n_pairs;
    int32_t *pair;         /* (n_pairs, 2) unit indices, a < b */
    float *pair_score;
    uint32_t *ccg;         /* (n_pairs, RP_CCG_BINS) */
    uint32_t *acg;         /* (n_units, RP_ACG_BINS) */
    uint8_t *ring_full;    /* per unit: correlograms miss pairs (more than RP_RING spikes within 50 ms) */

    /* spike subsample per unit */
    uint32_t *sub_off;     /* (n_units + 1) offsets */
    float *sub_t, *sub_amp, *sub_x, *sub_y; /* s, amplitude, µm */

    /* every spike's time and amplitude, for splitting a unit in the page (NULL when the folder has no
       amplitudes or more than p.split_max_spikes spikes); unit u's k-th spike (file order) at all_off[u] + k */
    uint32_t *all_off;     /* (n_units + 1) offsets: running sum of count */
    uint16_t *all_t;       /* time, quantized over [0, duration_s] as the page reads it */
    float *all_amp;        /* amplitude (amplitudes.npy) */

    /* traces view (report_traces.c) */
    void *tr_rec;          /* bs_recording* from source.json, NULL when absent */
    int tr_n;              /* stretches (0: no traces view) */
    int64_t tr_len;        /* samples per stretch; stretch i is batch tr_batch[i] of that length */
    int64_t tr_batch[RP_TRACE_MAX_STRETCHES];
    float tr_scale[RP_TRACE_MAX_STRETCHES]; /* µV per step */
    int8_t *tr_data;       /* (tr_n, n_chan, tr_len) quantized preprocessed traces */
    int32_t tr_n_sp;       /* spikes in the stretches */
    int64_t tr_sp_dropped; /* beyond RP_TRACE_MAX_SPIKES */
    uint32_t *tr_sp_t;     /* sample offset within its stretch */
    int32_t *tr_sp_u;      /* unit index */
    uint8_t *tr_sp_s;      /* stretch */

    /* drift map */
    const char *dmap_source;
    int dmap_nt, dmap_nd;
    double dmap_t0, dmap_t1, dmap_d0, dmap_d1; /* s, µm */
    uint32_t *dmap_count;  /* (nd, nt) */
    float *dmap_amp;       /* (nd, nt) sum of amplitudes */
    int64_t dmap_outside;  /* spikes outside the depth range */
    int dmap_fill_in_pass; /* 1: the spike pass fills the map */

    /* motion (drift.npy) */
    int mot_nt, mot_nb;
    float *mot;            /* (mot_nt, mot_nb) µm */
    float *mot_t;          /* s */
    float *mot_depth;      /* µm */
    int32_t *mot_shank;

    /* run summary, memory trace */
    void *run_json;        /* cJSON* */
    int mem_nb, mem_ntag;  /* time bins, stacked series */
    char **mem_tag;        /* series names */
    double *mem_t;         /* (mem_nb) bin start, s */
    double *mem_bytes;     /* (mem_ntag, mem_nb) bytes */
    double mem_peak;       /* peak total bytes in the trace */
} rp_data;

/* A note shown on the page ("qc_metrics.tsv absent: no quality metrics"). */
void rp_note(rp_data *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

bs_status rp_load_units(rp_data *d);                     /* report_units.c */
void rp_emit_units(rp_json *j, const rp_data *d);
bs_status rp_load_tables(rp_data *d);                    /* report_tables.c */
void rp_emit_tables(rp_json *j, const rp_data *d);
void rp_free_tables(rp_data *d);
bs_status rp_load_templates(rp_data *d);                 /* report_templates.c */
void rp_emit_templates(rp_json *j, const rp_data *d);
bs_status rp_find_similar(rp_data *d);                   /* report_spikes.c */
bs_status rp_spike_pass(rp_data *d);
void rp_emit_spikes(rp_json *j, const rp_data *d);
bs_status rp_drift_setup(rp_data *d);                    /* report_drift.c */
void rp_drift_add(rp_data *d, double t_s, double depth_um, double amp);
bs_status rp_drift_load(rp_data *d);
void rp_emit_drift(rp_json *j, const rp_data *d);
int64_t rp_trace_samples(const bs_report_params *p, double fs_hz); /* report_traces.c */
bs_status rp_traces_setup(rp_data *d);
void rp_traces_add(rp_data *d, int64_t t, int32_t u);
bs_status rp_traces_load(rp_data *d);
void rp_emit_traces(rp_json *j, const rp_data *d);
void rp_traces_free(rp_data *d);
bs_status rp_load_run(rp_data *d);                       /* report_run.c */
void rp_emit_run(rp_json *j, const rp_data *d);
void rp_free(rp_data *d);

#endif
