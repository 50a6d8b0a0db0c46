/*
 * phy_read.h - the one reader of a Phy / Kilosort folder: its per-spike and
 * per-template .npy columns, its per-cluster tables (cluster_*.tsv,
 * qc_metrics.tsv) and its params.py. qc (src/qc), the report (src/report),
 * the NWB export (nwb_*.c) and the checker (validate.c) all read the folder
 * through it; the file names are the BS_PHY_* constants of phy.h, shared
 * with the writer (phy.c). It lives next to the writer in src/export because
 * the folder's format is this module's business; the generic row access it
 * builds on is src/io/npy_rows.h.
 *
 * Columns. bs_phy_col opens one .npy file with bs_npy_rows (pread, any
 * size), checks its dtype class (integers, floats, or any number) and its
 * shape, and converts one block of rows at a time (`block` rows, one
 * accountant buffer) to int64, float32 or double: per-spike files are
 * streamed, never loaded whole.
 *
 * Tables (phylib's format). A header line `cluster_id<TAB>name...` (the
 * first cell may also be `id`), tab-separated, or comma-separated when the
 * header has no tab; one row per cluster: an integer id >= 0 (an integral
 * number such as 3.0 is accepted), then cells; lines end in LF or CRLF;
 * blank lines are skipped; a row with fewer cells leaves the rest empty, a
 * row with more is an error. A column is numeric when every non-empty cell
 * is a number (nan / inf included); empty numeric cells are NaN. Each column
 * keeps its header text (`raw`) and a name with [A-Za-z0-9_.-] kept and any
 * other character turned into '_' (`name`, an HDF5-safe name). The text is
 * copied once and split in place (cells are NUL-terminated strings inside
 * `store`). bs_tsv_next_line / bs_tsv_split / bs_tsv_parse_id are the same
 * rules one line at a time, for a checker that reports every bad line
 * instead of stopping at the first.
 *
 * params.py. Phy executes it as Python; we parse the small subset sorters
 * write: `NAME = value` with value a string (optional r prefix, ' or "), a
 * number, True / False / None, or a list (or tuple) of strings; '#'
 * comments, ';' between statements, '\' line continuations. Keys are
 * lower-cased; the last assignment of a key wins, as in Python. Lines that
 * are not such an assignment are kept as `bad` lines (the checker reports
 * them; the readers ignore them, unless the key they need is on one).
 */
#ifndef BS_PHY_READ_H
#define BS_PHY_READ_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../io/npy_rows.h"
#include "phy.h"

/* ---- folder ---- */

/* 1 if dir/name exists. */
int bs_phy_has(const char *dir, const char *name);
/* The per-spike cluster ids: spike_clusters.npy, or spike_templates.npy when
 * there is none (as phylib and SpikeInterface read a folder). */
const char *bs_phy_spike_ids_name(const char *dir);

/* ---- columns ---- */
typedef enum {
    BS_PHY_COL_INT,    /* any integer dtype */
    BS_PHY_COL_FLOAT,  /* float32 or float64 */
    BS_PHY_COL_NUMBER, /* any dtype but bool */
} bs_phy_col_kind;

/* want_cols of bs_phy_col_open: any shape, trailing dimensions flattened
 * into one row (pc_features: P × channels values per spike). */
#define BS_PHY_ANY_SHAPE (-1)

typedef struct {
    bs_npy_rows r;
    int64_t n_rows; /* first dimension (spikes, templates, channels) */
    int64_t n_cols; /* values per row: product of the trailing dimensions */
    int64_t block;  /* rows per read */
    void *raw;      /* one block of raw rows (accountant) */
} bs_phy_col;

#define BS_PHY_COL_INIT {.r = {.fd = -1}}

/* Open dir/name. want_cols > 0: a 1-D (one column) or 2-D array with that
 * many columns; 0: 1-D or 2-D, any columns; BS_PHY_ANY_SHAPE: at least one
 * dimension. The block buffer (block rows) is allocated under `tag`.
 * BS_ERR_INPUT naming the file and the field (descr, shape) otherwise. */
bs_status bs_phy_col_open(bs_phy_col *c, const char *dir, const char *name, bs_phy_col_kind kind, int64_t want_cols,
                          int64_t block, const char *tag);
/* First value of each of rows [r0, r0 + n) (n <= block) as int64 (integer
 * dtypes; a uint64 above INT64_MAX reads as -1). */
bs_status bs_phy_col_i64(bs_phy_col *c, int64_t r0, int64_t n, int64_t *out);
/* All values of rows [r0, r0 + n) (n <= block): n * n_cols floats / doubles. */
bs_status bs_phy_col_f32(bs_phy_col *c, int64_t r0, int64_t n, float *out);
bs_status bs_phy_col_f64(bs_phy_col *c, int64_t r0, int64_t n, double *out);
void bs_phy_col_close(bs_phy_col *c); /* idempotent; also fine on BS_PHY_COL_INIT */

/* ---- spike times ----
 * The one check of spike_times.npy that qc and the report share, fed block by
 * block: every time is a sample index >= 0, not before the previous one
 * (equal times are fine), and inside the recording: < n_samples when its
 * length is known, else less than BS_PHY_MAX_RECORDING_S at the folder's
 * sampling rate (a time past that is a broken file, not a recording).
 * Messages name the file, the spike's row and its sample. */
#define BS_PHY_MAX_RECORDING_S (366.0 * 86400.0) /* s: one year */

typedef struct {
    const char *path;  /* spike_times.npy, for messages */
    int64_t n_samples; /* recording length (samples), < 0 when unknown */
    double fs_hz;      /* sampling rate (Hz): the bound when the length is unknown */
    int64_t prev;      /* time of the last spike checked, -1 before the first */
} bs_phy_times_check;

/* Start a check of the spike times in `path` (kept, not copied). */
void bs_phy_times_begin(bs_phy_times_check *k, const char *path, int64_t n_samples, double fs_hz);
/* Check rows [row0, row0 + n) with times t (in row order, after the rows
 * before them); BS_ERR_INPUT naming the first bad spike. */
bs_status bs_phy_times_next(bs_phy_times_check *k, int64_t row0, const int64_t *t, int64_t n);

/* ---- per-cluster tables ---- */
#define BS_TSV_MAX_COLS 256
#define BS_TSV_MAX_ROWS 10000000
#define BS_TSV_MAX_BYTES ((size_t)256 << 20)

typedef struct {
    char name[64];   /* header text with characters outside [A-Za-z0-9_.-] turned into '_' */
    const char *raw; /* header text as written (inside the table's storage) */
    int numeric;     /* 1: num is set, 0: text is set */
    double *num;     /* [n_rows] */
    char **text;     /* [n_rows] pointers into the table's storage ("" for an empty cell) */
} bs_tsv_col;

typedef struct {
    int64_t n_rows;
    int32_t *ids;    /* [n_rows] cluster ids, in file order */
    int *line;       /* [n_rows] line number of each row in the file (1 = header) */
    int n_cols;
    bs_tsv_col *cols;
    char *store;     /* cell text */
} bs_tsv_table;

/* Parse a table held in text[0..len) (`name` is used in messages), the NWB
 * export's rules: ids distinct, first header cell `cluster_id` or `id`,
 * every column named; messages say "row N" / "header". */
bs_status bs_tsv_parse(const char *text, size_t len, const char *name, bs_tsv_table *t);
/* Read and parse path (at most BS_TSV_MAX_BYTES) with bs_tsv_parse's rules. */
bs_status bs_tsv_read(const char *path, bs_tsv_table *t);
/* Read dir/name with the viewers' rules (report, qc): the first header cell
 * is `cluster_id`, an id may have several rows (the caller decides which
 * wins), a column may be unnamed (raw ""); messages say "line N: field ...". */
bs_status bs_tsv_read_rows(const char *dir, const char *name, bs_tsv_table *t);
void bs_tsv_free(bs_tsv_table *t);
/* Row of a cluster id, -1 if absent (linear scan). */
int64_t bs_tsv_find(const bs_tsv_table *t, int32_t id);
/* 1 if s is a whole number (strtod: nan / inf included), *v its value. */
int bs_tsv_number(const char *s, double *v);

/* One line at a time: *pos walks a NUL-terminated, writable text. The next
 * line (its '\n' and a trailing '\r' removed, blank lines included) or NULL
 * at the end; *line_no counts lines from 1. */
char *bs_tsv_next_line(char **pos, int *line_no);
/* The separator of a header line: tab, else comma. */
char bs_tsv_separator(const char *header);
/* Split line at sep in place; returns the number of cells (cells gets at most max). */
int bs_tsv_split(char *line, char sep, char **cells, int max);
/* A cluster id cell: an integer (or integral number) in [0, INT32_MAX]. */
int bs_tsv_parse_id(const char *cell, int32_t *id);

/* ---- params.py ---- */
typedef enum { BS_PY_STR, BS_PY_NUM, BS_PY_BOOL, BS_PY_NONE, BS_PY_LIST } bs_py_type;

typedef struct {
    char key[64];    /* lower-cased */
    bs_py_type type;
    char *str;       /* BS_PY_STR (malloc'ed) */
    double num;      /* BS_PY_NUM, BS_PY_BOOL (1 / 0) */
    int is_int;      /* BS_PY_NUM written without '.', 'e' */
    char **items;    /* BS_PY_LIST of strings (malloc'ed) */
    int n_items;
    int line;        /* line number in the file */
} bs_py_value;

#define BS_PHY_PARAMS_MAX 64 /* assignments kept; more is a bad file */

typedef struct {
    bs_py_value v[BS_PHY_PARAMS_MAX];
    int n;
    struct bs_py_bad {
        int line;
        char key[64];  /* lower-cased NAME before '=', "" if none */
        char text[81]; /* the line, cut at 80 characters */
    } *bad;            /* lines that are not NAME = value (malloc'ed) */
    int n_bad;
    int too_many_line; /* line of the first assignment past BS_PHY_PARAMS_MAX, 0 if none */
} bs_phy_params;

/* Parse params.py text (NUL-terminated). Fails only on memory. */
bs_status bs_phy_params_parse(const char *text, bs_phy_params *p);
/* Read and parse dir/params.py: BS_ERR_INPUT naming the file when it is
 * missing or unreadable. */
bs_status bs_phy_params_read(const char *dir, bs_phy_params *p);
void bs_phy_params_free(bs_phy_params *p);
/* The last assignment of key (lower-case), NULL if none. */
const bs_py_value *bs_phy_params_get(const bs_phy_params *p, const char *key);
/* The line of the first bad line that assigns key, 0 if none. */
int bs_phy_params_bad_key(const bs_phy_params *p, const char *key);
/* Bytes per sample of a numpy dtype name or descr ("int16", "<i2", "f4",
 * ...); 0 if not understood. */
size_t bs_phy_dtype_bytes(const char *dtype);

/* Samples in the raw files of params.py's dat_path (a path or a list of
 * paths, relative to dir or absolute; n_channels_dat columns of dtype after
 * offset bytes), or -1 when they cannot be measured (a key or a file is
 * missing). */
double bs_phy_raw_samples(const char *dir, const bs_phy_params *pp);

/* The sampling rate (Hz) from dir/params.py: sample_rate = HZ with HZ a
 * finite number > 0 (the last assignment). BS_ERR_INPUT naming the file when
 * there is none. */
bs_status bs_phy_read_sample_rate(const char *dir, double *fs_hz);

#endif
