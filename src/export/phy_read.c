/*
 * phy_read.c - reading a Phy folder: columns, tables, params.py (see
 * phy_read.h).
 */
#include "phy_read.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/fileio.h"
#include "../mem/mem.h"

/* ---- folder ---- */

int bs_phy_has(const char *dir, const char *name)
{
    char path[4200];
    struct stat sb;
    return bs_path_join(path, sizeof path, dir, name) == BS_OK && stat(path, &sb) == 0;
}

const char *bs_phy_spike_ids_name(const char *dir)
{
    return bs_phy_has(dir, BS_PHY_SPIKE_CLUSTERS) ? BS_PHY_SPIKE_CLUSTERS : BS_PHY_SPIKE_TEMPLATES;
}

/* ---- columns ---- */

static int is_int(bs_npy_dtype d) { return d <= BS_NPY_U64; }

static bs_status check_col(const char *path, const bs_npy_header *h, bs_phy_col_kind kind, int64_t want_cols)
{
    int ok = kind == BS_PHY_COL_INT     ? is_int(h->dtype)
             : kind == BS_PHY_COL_FLOAT ? h->dtype == BS_NPY_F32 || h->dtype == BS_NPY_F64
                                        : h->dtype != BS_NPY_BOOL;
    if (want_cols == BS_PHY_ANY_SHAPE) {
        if (h->fortran_order || h->ndim < 1)
            return bs_error(BS_ERR_INPUT, "%s: expected a C-order array with one row per spike", path);
    } else {
        if (h->ndim < 1 || h->ndim > 2 || h->fortran_order)
            return bs_error(BS_ERR_INPUT, "%s: shape: expected 1 or 2 dimensions in C order, got %d dimensions%s",
                            path, h->ndim, h->fortran_order ? " in Fortran order" : "");
    }
    if (!ok)
        return bs_error(BS_ERR_INPUT, "%s: field 'descr': expected %s, got '%s'", path,
                        kind == BS_PHY_COL_INT     ? "an integer type"
                        : kind == BS_PHY_COL_FLOAT ? "float32 or float64"
                                                   : "a numeric type",
                        bs_npy_dtype_descr(h->dtype));
    int64_t cols = h->ndim == 2 ? h->shape[1] : 1;
    if (want_cols > 0 && cols != want_cols)
        return bs_error(BS_ERR_INPUT, "%s: shape: expected %lld column%s, got %lld", path, (long long)want_cols,
                        want_cols == 1 ? "" : "s", (long long)cols);
    return BS_OK;
}

bs_status bs_phy_col_open(bs_phy_col *c, const char *dir, const char *name, bs_phy_col_kind kind, int64_t want_cols,
                          int64_t block, const char *tag)
{
    memset(c, 0, sizeof *c);
    c->r.fd = -1;
    char path[4200];
    bs_npy_header h;
    BS_TRY(bs_path_join(path, sizeof path, dir, name));
    BS_TRY(bs_npy_read_header(path, &h));
    BS_TRY(check_col(path, &h, kind, want_cols));
    BS_TRY(bs_npy_rows_open_any(&c->r, dir, name));
    c->n_rows = h.shape[0];
    c->n_cols = 1;
    for (int i = 1; i < h.ndim; i++)
        c->n_cols *= h.shape[i];
    c->block = block;
    c->raw = bs_mem_alloc(tag, (size_t)block * c->r.row_bytes + 1);
    if (!c->raw) {
        bs_npy_rows_close(&c->r);
        return BS_ERR_MEMORY;
    }
    return BS_OK;
}

void bs_phy_col_close(bs_phy_col *c)
{
    bs_npy_rows_close(&c->r);
    bs_mem_free(c->raw);
    c->raw = NULL;
}

static bs_status read_block(bs_phy_col *c, int64_t r0, int64_t n)
{
    if (n > c->block)
        return bs_error(BS_ERR_INTERNAL, "%s: %lld rows asked, block is %lld", c->r.path, (long long)n,
                        (long long)c->block);
    return bs_npy_rows_read(&c->r, r0, n, c->raw);
}

/* Value i of the block as int64 (integer dtypes). */
static int64_t int_at(const bs_phy_col *c, size_t i)
{
    const void *s = c->raw;
    switch (c->r.h.dtype) {
    case BS_NPY_I8: return ((const int8_t *)s)[i];
    case BS_NPY_U8: return ((const uint8_t *)s)[i];
    case BS_NPY_I16: return ((const int16_t *)s)[i];
    case BS_NPY_U16: return ((const uint16_t *)s)[i];
    case BS_NPY_I32: return ((const int32_t *)s)[i];
    case BS_NPY_U32: return ((const uint32_t *)s)[i];
    case BS_NPY_I64: return ((const int64_t *)s)[i];
    default: {
        uint64_t v = ((const uint64_t *)s)[i];
        return v > (uint64_t)INT64_MAX ? -1 : (int64_t)v;
    }
    }
}

/* Value i of the block as double (any numeric dtype). */
static double value_at(const bs_phy_col *c, size_t i)
{
    switch (c->r.h.dtype) {
    case BS_NPY_F32: return ((const float *)c->raw)[i];
    case BS_NPY_F64: return ((const double *)c->raw)[i];
    case BS_NPY_U64: return (double)((const uint64_t *)c->raw)[i];
    default: return (double)int_at(c, i);
    }
}

bs_status bs_phy_col_i64(bs_phy_col *c, int64_t r0, int64_t n, int64_t *out)
{
    if (!is_int(c->r.h.dtype))
        return bs_error(BS_ERR_INTERNAL, "%s: read as integers, but the dtype is %s", c->r.path,
                        bs_npy_dtype_descr(c->r.h.dtype));
    BS_TRY(read_block(c, r0, n));
    for (int64_t i = 0; i < n; i++)
        out[i] = int_at(c, (size_t)(i * c->n_cols));
    return BS_OK;
}

bs_status bs_phy_col_f32(bs_phy_col *c, int64_t r0, int64_t n, float *out)
{
    BS_TRY(read_block(c, r0, n));
    size_t m = (size_t)(n * c->n_cols);
    if (c->r.h.dtype == BS_NPY_F32) {
        memcpy(out, c->raw, m * sizeof *out);
    } else {
        for (size_t i = 0; i < m; i++)
            out[i] = (float)value_at(c, i);
    }
    return BS_OK;
}

bs_status bs_phy_col_f64(bs_phy_col *c, int64_t r0, int64_t n, double *out)
{
    BS_TRY(read_block(c, r0, n));
    size_t m = (size_t)(n * c->n_cols);
    for (size_t i = 0; i < m; i++)
        out[i] = value_at(c, i);
    return BS_OK;
}

/* ---- spike times ---- */

void bs_phy_times_begin(bs_phy_times_check *k, const char *path, int64_t n_samples, double fs_hz)
{
    k->path = path;
    k->n_samples = n_samples;
    k->fs_hz = fs_hz;
    k->prev = -1;
}

bs_status bs_phy_times_next(bs_phy_times_check *k, int64_t row0, const int64_t *t, int64_t n)
{
    double max_s = BS_PHY_MAX_RECORDING_S * k->fs_hz; /* samples: the bound when the length is unknown */
    for (int64_t i = 0; i < n; i++) {
        long long row = (long long)(row0 + i), v = (long long)t[i];
        if (t[i] < 0)
            return bs_error(BS_ERR_INPUT, "%s: spike %lld at sample %lld: expected sample indices >= 0%s", k->path,
                            row, v, v == -1 ? " (or a uint64 above 2^63)" : "");
        if (t[i] < k->prev)
            return bs_error(BS_ERR_INPUT, "%s: spike %lld at sample %lld comes before the previous one (%lld): "
                            "expected times in ascending order", k->path, row, v, (long long)k->prev);
        if (k->n_samples >= 0 && t[i] >= k->n_samples)
            return bs_error(BS_ERR_INPUT, "%s: spike %lld at sample %lld is outside the recording's %lld samples: "
                            "is this the recording that was sorted?", k->path, row, v, (long long)k->n_samples);
        if (k->n_samples < 0 && !((double)t[i] < max_s))
            return bs_error(BS_ERR_INPUT, "%s: spike %lld at sample %lld is outside the recording: %.3g s at %g Hz, "
                            "expected less than a year", k->path, row, v, (double)t[i] / k->fs_hz, k->fs_hz);
        k->prev = t[i];
    }
    return BS_OK;
}

/* ---- per-cluster tables ---- */

void bs_tsv_free(bs_tsv_table *t)
{
    if (t->cols)
        for (int c = 0; c < t->n_cols; c++) {
            free(t->cols[c].num);
            free(t->cols[c].text);
        }
    free(t->cols);
    free(t->ids);
    free(t->line);
    free(t->store);
    memset(t, 0, sizeof *t);
}

char *bs_tsv_next_line(char **pos, int *line_no)
{
    char *line = *pos;
    if (!line || !*line)
        return NULL;
    char *next = strchr(line, '\n');
    if (next)
        *next++ = '\0';
    *pos = next;
    size_t l = strlen(line);
    if (l && line[l - 1] == '\r')
        line[l - 1] = '\0';
    (*line_no)++;
    return line;
}

char bs_tsv_separator(const char *header) { return strchr(header, '\t') ? '\t' : ','; }

int bs_tsv_split(char *line, char sep, char **cells, int max)
{
    int n = 0;
    for (char *s = line;;) {
        char *e = strchr(s, sep);
        if (e)
            *e = '\0';
        if (n < max)
            cells[n] = s;
        n++;
        if (!e)
            return n;
        s = e + 1;
    }
}

int bs_tsv_number(const char *s, double *v)
{
    char *end;
    *v = strtod(s, &end);
    return end != s && *end == '\0';
}

int bs_tsv_parse_id(const char *cell, int32_t *id)
{
    char *end;
    errno = 0;
    long long v = strtoll(cell, &end, 10);
    if (end != cell && *end == '\0' && errno == 0) {
        if (v < 0 || v > INT32_MAX)
            return 0;
        *id = (int32_t)v;
        return 1;
    }
    double d; /* an integral number written as a float, e.g. 3.0 */
    if (!bs_tsv_number(cell, &d) || !(d >= 0 && d <= INT32_MAX) || d != floor(d))
        return 0;
    *id = (int32_t)d;
    return 1;
}

static int cmp32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* The two rule sets of phy_read.h: the NWB export's (strict) and the
 * viewers' (report, qc), each with the messages its users know. */
typedef enum { TSV_STRICT, TSV_ROWS } tsv_rules;

static bs_status bad_header(const char *name, tsv_rules rules, const char *first)
{
    return rules == TSV_STRICT
               ? bs_error(BS_ERR_INPUT, "%s: header: expected 'cluster_id' as the first column, got '%.40s'", name,
                          first)
               : bs_error(BS_ERR_INPUT, "%s: line 1: expected a header starting with 'cluster_id', got '%.40s'", name,
                          first);
}

static bs_status check_header(const char *name, tsv_rules rules, char **head, int nh)
{
    if (strcmp(head[0], "cluster_id") != 0 && (rules == TSV_ROWS || strcmp(head[0], "id") != 0))
        return bad_header(name, rules, head[0]);
    if (nh - 1 > BS_TSV_MAX_COLS)
        return rules == TSV_STRICT ? bs_error(BS_ERR_INPUT, "%s: header: expected at most %d columns, got %d", name,
                                              BS_TSV_MAX_COLS, nh - 1)
                                   : bs_error(BS_ERR_INPUT, "%s: line 1: expected at most %d columns, got %d", name,
                                              BS_TSV_MAX_COLS, nh - 1);
    return BS_OK;
}

static bs_status name_columns(bs_tsv_table *t, const char *name, tsv_rules rules, char **head)
{
    for (int c = 0; c < t->n_cols; c++) {
        bs_tsv_col *col = &t->cols[c];
        col->raw = head[c + 1];
        size_t k = 0;
        for (const char *q = head[c + 1]; *q && k + 1 < sizeof col->name; q++, k++) {
            char ch = *q;
            int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                     ch == '-' || (ch == '.' && k > 0);
            col->name[k] = ok ? ch : '_';
        }
        col->name[k] = '\0';
        if (!k && rules == TSV_STRICT)
            return bs_error(BS_ERR_INPUT, "%s: header: column %d has no name", name, c + 2);
        col->text = calloc((size_t)(t->n_rows ? t->n_rows : 1), sizeof *col->text);
        if (!col->text)
            return bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
    }
    return BS_OK;
}

static bs_status check_unique(const bs_tsv_table *t, const char *name)
{
    int32_t *s = malloc((size_t)(t->n_rows ? t->n_rows : 1) * sizeof *s);
    if (!s)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
    memcpy(s, t->ids, (size_t)t->n_rows * sizeof *s);
    qsort(s, (size_t)t->n_rows, sizeof *s, cmp32);
    bs_status st = BS_OK;
    for (int64_t r = 1; r < t->n_rows && st == BS_OK; r++)
        if (s[r] == s[r - 1])
            st = bs_error(BS_ERR_INPUT, "%s: cluster_id %d appears more than once", name, s[r]);
    free(s);
    return st;
}

static bs_status numeric_columns(bs_tsv_table *t, const char *name)
{
    for (int c = 0; c < t->n_cols; c++) {
        bs_tsv_col *col = &t->cols[c];
        col->numeric = 1;
        double v;
        for (int64_t r = 0; r < t->n_rows && col->numeric; r++)
            col->numeric = !col->text[r][0] || bs_tsv_number(col->text[r], &v);
        if (!col->numeric)
            continue;
        col->num = malloc((size_t)(t->n_rows ? t->n_rows : 1) * sizeof *col->num);
        if (!col->num)
            return bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
        for (int64_t r = 0; r < t->n_rows; r++)
            if (!col->text[r][0] || !bs_tsv_number(col->text[r], &col->num[r]))
                col->num[r] = NAN;
    }
    return BS_OK;
}

/* Rows 1.. of the table: ids, cells, line numbers. */
static bs_status fill_rows(bs_tsv_table *t, const char *name, tsv_rules rules, char **lines, const int *line_no,
                           char sep)
{
    char *cells[BS_TSV_MAX_COLS + 2];
    for (int64_t r = 0; r < t->n_rows; r++) {
        int n = bs_tsv_split(lines[r + 1], sep, cells, BS_TSV_MAX_COLS + 2);
        int ln = line_no[r + 1];
        if (n > t->n_cols + 1)
            return rules == TSV_STRICT
                       ? bs_error(BS_ERR_INPUT, "%s: row %d: expected at most %d cells (the header's), got %d", name,
                                  ln, t->n_cols + 1, n)
                       : bs_error(BS_ERR_INPUT, "%s: line %d: expected at most %d cells (as the header), got %d",
                                  name, ln, t->n_cols + 1, n);
        if (!bs_tsv_parse_id(cells[0], &t->ids[r]))
            return rules == TSV_STRICT
                       ? bs_error(BS_ERR_INPUT, "%s: row %d: cluster_id: expected an integer >= 0, got '%.40s'", name,
                                  ln, cells[0])
                       : bs_error(BS_ERR_INPUT,
                                  "%s: line %d: field 'cluster_id': expected an integer id >= 0, got '%.40s'", name,
                                  ln, cells[0]);
        t->line[r] = ln;
        for (int c = 0; c < t->n_cols; c++)
            t->cols[c].text[r] = c + 1 < n ? cells[c + 1] : "";
    }
    return BS_OK;
}

static bs_status parse_table(const char *text, size_t len, const char *name, tsv_rules rules, bs_tsv_table *t)
{
    memset(t, 0, sizeof *t);
    if (memchr(text, '\0', len))
        return bs_error(BS_ERR_INPUT, "%s: expected a text file, found a NUL byte", name);
    t->store = malloc(len + 1);
    if (!t->store)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
    memcpy(t->store, text, len);
    t->store[len] = '\0';
    size_t n_lines = 1;
    for (size_t i = 0; i < len; i++)
        n_lines += t->store[i] == '\n';
    char **lines = malloc(n_lines * sizeof *lines);
    int *line_no = malloc(n_lines * sizeof *line_no);
    bs_status st = lines && line_no ? BS_OK : bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
    int64_t nl = 0;
    char *pos = t->store, *line;
    int ln = 0;
    while (st == BS_OK && (line = bs_tsv_next_line(&pos, &ln)))
        if (*line) { /* blank lines are skipped */
            lines[nl] = line;
            line_no[nl++] = ln;
        }
    char *head[BS_TSV_MAX_COLS + 2];
    int nh = 0;
    char sep = '\t';
    if (st == BS_OK && nl == 0)
        st = rules == TSV_STRICT
                 ? bs_error(BS_ERR_INPUT, "%s: empty: expected a header row 'cluster_id<TAB>...'", name)
                 : bs_error(BS_ERR_INPUT, "%s: expected a header line 'cluster_id<TAB>...', the file is empty", name);
    if (st == BS_OK) {
        sep = bs_tsv_separator(lines[0]);
        nh = bs_tsv_split(lines[0], sep, head, BS_TSV_MAX_COLS + 2);
        st = check_header(name, rules, head, nh);
    }
    if (st == BS_OK && nl - 1 > BS_TSV_MAX_ROWS)
        st = bs_error(BS_ERR_INPUT, "%s: expected at most %d rows, got %lld", name, BS_TSV_MAX_ROWS,
                      (long long)(nl - 1));
    if (st == BS_OK) {
        t->n_cols = nh - 1;
        t->n_rows = nl - 1;
        t->ids = malloc((size_t)(t->n_rows ? t->n_rows : 1) * sizeof *t->ids);
        t->line = malloc((size_t)(t->n_rows ? t->n_rows : 1) * sizeof *t->line);
        t->cols = calloc((size_t)(t->n_cols ? t->n_cols : 1), sizeof *t->cols);
        if (!t->ids || !t->line || !t->cols)
            st = bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
    }
    if (st == BS_OK)
        st = name_columns(t, name, rules, head);
    if (st == BS_OK)
        st = fill_rows(t, name, rules, lines, line_no, sep);
    if (st == BS_OK && rules == TSV_STRICT)
        st = check_unique(t, name);
    if (st == BS_OK)
        st = numeric_columns(t, name);
    free(lines);
    free(line_no);
    if (st != BS_OK)
        bs_tsv_free(t);
    return st;
}

bs_status bs_tsv_parse(const char *text, size_t len, const char *name, bs_tsv_table *t)
{
    return parse_table(text, len, name, TSV_STRICT, t);
}

static bs_status read_table(const char *path, tsv_rules rules, bs_tsv_table *t)
{
    char *text = NULL;
    size_t len = 0;
    memset(t, 0, sizeof *t);
    BS_TRY(bs_read_text_file(path, BS_TSV_MAX_BYTES, &text, &len));
    bs_status st = parse_table(text, len, path, rules, t);
    free(text);
    return st;
}

bs_status bs_tsv_read(const char *path, bs_tsv_table *t) { return read_table(path, TSV_STRICT, t); }

bs_status bs_tsv_read_rows(const char *dir, const char *name, bs_tsv_table *t)
{
    char path[4200];
    memset(t, 0, sizeof *t);
    BS_TRY(bs_path_join(path, sizeof path, dir, name));
    return read_table(path, TSV_ROWS, t);
}

int64_t bs_tsv_find(const bs_tsv_table *t, int32_t id)
{
    for (int64_t r = 0; r < t->n_rows; r++)
        if (t->ids[r] == id)
            return r;
    return -1;
}

/* ---- params.py ---- */

typedef struct {
    const char *p;
    int line;
} pcur;

static void skip_blank(pcur *c, int newlines)
{
    for (;;) {
        if (*c->p == '#') {
            while (*c->p && *c->p != '\n')
                c->p++;
        } else if (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || (*c->p == '\\' && c->p[1] == '\n')) {
            c->p += *c->p == '\\' ? 2 : 1;
        } else if (newlines && *c->p == '\n') {
            c->line++;
            c->p++;
        } else {
            return;
        }
    }
}

/* Append ch to the malloc'ed buffer *out of capacity *cap; 0 on no memory. */
static int put_char(char **out, size_t *cap, size_t *n, char ch)
{
    if (*n + 2 >= *cap) {
        char *nb = realloc(*out, *cap *= 2);
        if (!nb)
            return 0;
        *out = nb;
    }
    (*out)[(*n)++] = ch;
    return 1;
}

/* A Python string literal (optional r/R prefix, ' or " quotes) into a malloc'ed buffer. */
static char *parse_pystr(pcur *c)
{
    int raw = 0;
    const char *p = c->p;
    if (*p == 'r' || *p == 'R') {
        raw = 1;
        p++;
    }
    char q = *p;
    if (q != '\'' && q != '"')
        return NULL;
    p++;
    size_t cap = 64, n = 0;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    for (; *p && *p != q && *p != '\n'; p++) {
        char ch = *p;
        if (ch == '\\' && p[1] && p[1] != '\n') {
            if (raw) {
                if (p[1] == q || p[1] == '\\') {
                    if (!put_char(&out, &cap, &n, ch))
                        goto fail;
                    ch = *++p;
                }
            } else {
                p++;
                switch (*p) {
                case 'n': ch = '\n'; break;
                case 't': ch = '\t'; break;
                default: ch = *p; break; /* \\ \' \" and others taken literally */
                }
            }
        }
        if (!put_char(&out, &cap, &n, ch))
            goto fail;
    }
    if (*p != q)
        goto fail;
    out[n] = '\0';
    c->p = p + 1;
    return out;
fail:
    free(out);
    return NULL;
}

static int parse_value(pcur *c, bs_py_value *pr)
{
    const char *p = c->p;
    if (*p == '[' || *p == '(') {
        char close = *p == '[' ? ']' : ')';
        c->p++;
        pr->type = BS_PY_LIST;
        for (;;) {
            skip_blank(c, 1);
            if (*c->p == close) {
                c->p++;
                return 1;
            }
            char *s = parse_pystr(c);
            if (!s)
                return 0;
            char **ni = realloc(pr->items, (size_t)(pr->n_items + 1) * sizeof *ni);
            if (!ni) {
                free(s);
                return 0;
            }
            pr->items = ni;
            pr->items[pr->n_items++] = s;
            skip_blank(c, 1);
            if (*c->p == ',')
                c->p++;
            else if (*c->p != close)
                return 0;
        }
    }
    if (*p == '\'' || *p == '"' || ((*p == 'r' || *p == 'R') && (p[1] == '\'' || p[1] == '"'))) {
        pr->type = BS_PY_STR;
        pr->str = parse_pystr(c);
        return pr->str != NULL;
    }
    static const struct {
        const char *word;
        bs_py_type t;
        double v;
    } words[] = {{"True", BS_PY_BOOL, 1}, {"False", BS_PY_BOOL, 0}, {"None", BS_PY_NONE, 0}};
    for (size_t i = 0; i < 3; i++) {
        size_t L = strlen(words[i].word);
        if (strncmp(p, words[i].word, L) == 0 && !isalnum((unsigned char)p[L]) && p[L] != '_') {
            pr->type = words[i].t;
            pr->num = words[i].v;
            c->p += L;
            return 1;
        }
    }
    char *end = NULL;
    errno = 0;
    double d = strtod(p, &end);
    if (end == p || errno == ERANGE || !isfinite(d) ||
        (*p != '-' && *p != '+' && *p != '.' && !isdigit((unsigned char)*p)))
        return 0;
    pr->type = BS_PY_NUM;
    pr->num = d;
    pr->is_int = 1;
    for (const char *q = p; q < end; q++)
        if (*q == '.' || *q == 'e' || *q == 'E')
            pr->is_int = 0;
    c->p = end;
    return 1;
}

static void free_value(bs_py_value *v)
{
    free(v->str);
    for (int k = 0; k < v->n_items; k++)
        free(v->items[k]);
    free(v->items);
    memset(v, 0, sizeof *v);
}

void bs_phy_params_free(bs_phy_params *p)
{
    for (int i = 0; i < p->n; i++)
        free_value(&p->v[i]);
    free(p->bad);
    memset(p, 0, sizeof *p);
}

static bs_status add_bad(bs_phy_params *p, int line, const char *key, const char *start)
{
    struct bs_py_bad *nb = realloc(p->bad, (size_t)(p->n_bad + 1) * sizeof *nb);
    if (!nb)
        return bs_error(BS_ERR_MEMORY, "params.py: out of memory");
    p->bad = nb;
    struct bs_py_bad *b = &p->bad[p->n_bad++];
    b->line = line;
    snprintf(b->key, sizeof b->key, "%s", key);
    const char *eol = strchr(start, '\n');
    int len = eol ? (int)(eol - start) : (int)strlen(start);
    snprintf(b->text, sizeof b->text, "%.*s", len > 80 ? 80 : len, start);
    return BS_OK;
}

bs_status bs_phy_params_parse(const char *text, bs_phy_params *p)
{
    memset(p, 0, sizeof *p);
    pcur c = {text, 1};
    for (;;) {
        skip_blank(&c, 1);
        if (!*c.p)
            return BS_OK;
        if (*c.p == ';') {
            c.p++;
            continue;
        }
        const char *start = c.p;
        int line = c.line;
        bs_py_value pr;
        memset(&pr, 0, sizeof pr);
        size_t k = 0;
        while (isalnum((unsigned char)*c.p) || *c.p == '_') {
            if (k + 1 < sizeof pr.key)
                pr.key[k++] = (char)tolower((unsigned char)*c.p);
            c.p++;
        }
        pr.key[k] = '\0';
        int ok = k > 0 && !isdigit((unsigned char)pr.key[0]);
        if (ok) {
            skip_blank(&c, 0);
            ok = *c.p == '=' && c.p[1] != '=';
        }
        int assigns = ok;
        if (ok) {
            c.p++;
            skip_blank(&c, 0);
            ok = parse_value(&c, &pr);
        }
        if (ok) {
            skip_blank(&c, 0);
            ok = *c.p == '\n' || *c.p == ';' || *c.p == '\0';
        }
        pr.line = line;
        if (!ok) {
            bs_status st = add_bad(p, line, assigns ? pr.key : "", start);
            free_value(&pr);
            if (st != BS_OK) {
                bs_phy_params_free(p);
                return st;
            }
            while (*c.p && *c.p != '\n')
                c.p++;
            continue;
        }
        if (p->n == BS_PHY_PARAMS_MAX) {
            p->too_many_line = line;
            free_value(&pr);
            return BS_OK;
        }
        p->v[p->n++] = pr;
    }
}

bs_status bs_phy_params_read(const char *dir, bs_phy_params *p)
{
    char path[4200];
    memset(p, 0, sizeof *p);
    BS_TRY(bs_path_join(path, sizeof path, dir, BS_PHY_PARAMS));
    char *text = NULL;
    BS_TRY(bs_read_text_file(path, (size_t)1 << 20, &text, NULL));
    bs_status st = bs_phy_params_parse(text, p);
    free(text);
    return st;
}

const bs_py_value *bs_phy_params_get(const bs_phy_params *p, const char *key)
{
    for (int i = p->n - 1; i >= 0; i--) /* the last assignment wins, as in Python */
        if (strcmp(p->v[i].key, key) == 0)
            return &p->v[i];
    return NULL;
}

int bs_phy_params_bad_key(const bs_phy_params *p, const char *key)
{
    for (int i = 0; i < p->n_bad; i++)
        if (strcmp(p->bad[i].key, key) == 0)
            return p->bad[i].line;
    return 0;
}

size_t bs_phy_dtype_bytes(const char *s)
{
    static const struct {
        const char *name;
        size_t size;
    } t[] = {{"int8", 1},    {"uint8", 1},    {"int16", 2}, {"uint16", 2}, {"int32", 4},  {"uint32", 4},
             {"int64", 8},   {"uint64", 8},   {"float32", 4}, {"float64", 8}, {"i1", 1},  {"u1", 1},
             {"float16", 2}, {"f2", 2},
             {"i2", 2},      {"u2", 2},       {"i4", 4},    {"u4", 4},     {"i8", 8},     {"u8", 8},
             {"f4", 4},      {"f8", 8},       {"float", 8}, {"int", 8},    {"short", 2},  {"single", 4},
             {"double", 8}};
    if (s[0] == '<' || s[0] == '|' || s[0] == '=')
        s++;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(s, t[i].name) == 0)
            return t[i].size;
    return 0;
}

double bs_phy_raw_samples(const char *dir, const bs_phy_params *pp)
{
    const bs_py_value *dt = bs_phy_params_get(pp, "dtype"), *nc = bs_phy_params_get(pp, "n_channels_dat"),
                      *of = bs_phy_params_get(pp, "offset"), *dp = bs_phy_params_get(pp, "dat_path");
    size_t item = dt && dt->type == BS_PY_STR ? bs_phy_dtype_bytes(dt->str) : 0;
    double n_chan = nc && nc->type == BS_PY_NUM ? nc->num : NAN;
    double offset = of && of->type == BS_PY_NUM ? of->num : 0;
    const char *const *files = dp && dp->type == BS_PY_LIST ? (const char *const *)dp->items : NULL;
    int n_dat = !dp ? 0 : dp->type == BS_PY_LIST ? dp->n_items : dp->type == BS_PY_STR ? 1 : 0;
    if (n_dat == 0 || item == 0 || !(n_chan >= 1))
        return -1;
    double bytes = 0;
    for (int i = 0; i < n_dat; i++) {
        char path[4200];
        const char *p = files ? files[i] : dp->str;
        if (p[0] != '/') {
            if (bs_path_join(path, sizeof path, dir, p) != BS_OK)
                return -1;
            p = path;
        }
        struct stat sb;
        if (stat(p, &sb) != 0 || (double)sb.st_size < offset)
            return -1;
        bytes += (double)sb.st_size - offset;
    }
    return floor(bytes / (n_chan * (double)item));
}

bs_status bs_phy_read_sample_rate(const char *dir, double *fs_hz)
{
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, dir, BS_PHY_PARAMS));
    bs_phy_params p;
    BS_TRY(bs_phy_params_read(dir, &p));
    const bs_py_value *v = bs_phy_params_get(&p, "sample_rate");
    bs_status st = BS_OK;
    if (v && v->type == BS_PY_NUM && v->num > 0)
        *fs_hz = v->num;
    else
        st = bs_error(BS_ERR_INPUT, "%s: sample_rate: expected a line 'sample_rate = HZ' with HZ > 0", path);
    bs_phy_params_free(&p);
    return st;
}
