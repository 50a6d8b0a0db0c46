/*
 * nwb_tsv.c - per-cluster TSV tables (cluster_*.tsv, qc_metrics.tsv) read
 * into columns for the NWB Units table (rules in nwb_export.h).
 *
 * Mechanism: the text is copied once into `store`; tabs and line ends are
 * replaced by NUL so every cell is a NUL-terminated string in place. A first
 * pass counts rows and checks the header; the second fills the ids and the
 * cell pointers (row-major, then split per column); the third decides per
 * column whether it is numeric and converts. The text size is bounded by
 * the caller (bs_tsv_read reads at most 256 MiB), and rows and columns by
 * BS_TSV_MAX_ROWS / BS_TSV_MAX_COLS, so nothing grows without bound.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "nwb_export.h"

void bs_tsv_free(bs_tsv_table *t)
{
    if (t->cols)
        for (int c = 0; c < t->n_cols; c++) {
            free(t->cols[c].num);
            free(t->cols[c].text);
        }
    free(t->cols);
    free(t->ids);
    free(t->store);
    memset(t, 0, sizeof *t);
}

/* Split the line starting at p (NUL-terminated) at tabs, in place. */
static int split(char *p, char **cells, int max)
{
    int n = 0;
    for (;;) {
        if (n < max)
            cells[n] = p;
        n++;
        char *tab = strchr(p, '\t');
        if (!tab)
            return n;
        *tab = '\0';
        p = tab + 1;
    }
}

static int cmp32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static int parse_number(const char *s, double *v)
{
    if (!*s) {
        *v = NAN;
        return 1;
    }
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return end != s && *end == '\0';
}

bs_status bs_tsv_parse(const char *text, size_t len, const char *name, bs_tsv_table *t)
{
    memset(t, 0, sizeof *t);
    if (memchr(text, '\0', len))
        return bs_error(BS_ERR_INPUT, "%s: expected a text file, found a NUL byte", name);
    t->store = malloc(len + 1);
    if (!t->store)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
    memcpy(t->store, text, len);
    t->store[len] = '\0';
    /* lines: NUL-terminate each, drop a trailing CR, remember non-blank ones */
    int64_t n_lines = 0;
    for (size_t i = 0; i <= len; i++)
        if (i == len || t->store[i] == '\n')
            n_lines++;
    char **lines = malloc((size_t)n_lines * sizeof *lines);
    if (!lines) {
        bs_tsv_free(t);
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
    }
    int64_t nl = 0;
    char *p = t->store;
    for (size_t i = 0; i <= len; i++)
        if (i == len || t->store[i] == '\n') {
            t->store[i] = '\0';
            size_t L = strlen(p);
            if (L && p[L - 1] == '\r')
                p[--L] = '\0';
            if (L)
                lines[nl++] = p;
            p = t->store + i + 1;
        }
    bs_status st = BS_OK;
    char *head[BS_TSV_MAX_COLS + 2];
    if (nl == 0) {
        st = bs_error(BS_ERR_INPUT, "%s: empty: expected a header row 'cluster_id<TAB>...'", name);
        goto done;
    }
    int nh = split(lines[0], head, BS_TSV_MAX_COLS + 2);
    if (strcmp(head[0], "cluster_id") != 0 && strcmp(head[0], "id") != 0) {
        st = bs_error(BS_ERR_INPUT, "%s: header: expected 'cluster_id' as the first column, got '%.40s'", name, head[0]);
        goto done;
    }
    if (nh - 1 > BS_TSV_MAX_COLS) {
        st = bs_error(BS_ERR_INPUT, "%s: header: expected at most %d columns, got %d", name, BS_TSV_MAX_COLS, nh - 1);
        goto done;
    }
    if (nl - 1 > BS_TSV_MAX_ROWS) {
        st = bs_error(BS_ERR_INPUT, "%s: expected at most %d rows, got %lld", name, BS_TSV_MAX_ROWS,
                      (long long)(nl - 1));
        goto done;
    }
    t->n_cols = nh - 1;
    t->n_rows = nl - 1;
    t->ids = malloc((size_t)(t->n_rows ? t->n_rows : 1) * sizeof *t->ids);
    t->cols = calloc((size_t)(t->n_cols ? t->n_cols : 1), sizeof *t->cols);
    if (!t->ids || !t->cols) {
        st = bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
        goto done;
    }
    for (int c = 0; c < t->n_cols; c++) {
        bs_tsv_col *col = &t->cols[c];
        size_t k = 0;
        for (const char *q = head[c + 1]; *q && k + 1 < sizeof col->name; q++, k++) {
            char ch = *q;
            int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                     ch == '-' || (ch == '.' && k > 0);
            col->name[k] = ok ? ch : '_';
        }
        col->name[k] = '\0';
        if (!k) {
            st = bs_error(BS_ERR_INPUT, "%s: header: column %d has no name", name, c + 2);
            goto done;
        }
        col->text = calloc((size_t)(t->n_rows ? t->n_rows : 1), sizeof *col->text);
        if (!col->text) {
            st = bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
            goto done;
        }
    }
    char *cells[BS_TSV_MAX_COLS + 2];
    for (int64_t r = 0; r < t->n_rows; r++) {
        int n = split(lines[r + 1], cells, BS_TSV_MAX_COLS + 2);
        if (n > t->n_cols + 1) {
            st = bs_error(BS_ERR_INPUT, "%s: row %lld: expected at most %d cells (the header's), got %d", name,
                          (long long)(r + 2), t->n_cols + 1, n);
            goto done;
        }
        char *end;
        errno = 0;
        long long id = strtoll(cells[0], &end, 10);
        if (end == cells[0] || *end || errno || id < 0 || id > INT32_MAX) {
            st = bs_error(BS_ERR_INPUT, "%s: row %lld: cluster_id: expected an integer >= 0, got '%.40s'", name,
                          (long long)(r + 2), cells[0]);
            goto done;
        }
        t->ids[r] = (int32_t)id;
        for (int c = 0; c < t->n_cols; c++)
            t->cols[c].text[r] = c + 1 < n ? cells[c + 1] : "";
    }
    /* distinct ids: sort a copy */
    int32_t *s = malloc((size_t)(t->n_rows ? t->n_rows : 1) * sizeof *s);
    if (!s) {
        st = bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
        goto done;
    }
    memcpy(s, t->ids, (size_t)t->n_rows * sizeof *s);
    qsort(s, (size_t)t->n_rows, sizeof *s, cmp32);
    for (int64_t r = 1; r < t->n_rows && st == BS_OK; r++)
        if (s[r] == s[r - 1])
            st = bs_error(BS_ERR_INPUT, "%s: cluster_id %d appears more than once", name, s[r]);
    free(s);
    if (st != BS_OK)
        goto done;
    for (int c = 0; c < t->n_cols; c++) {
        bs_tsv_col *col = &t->cols[c];
        col->numeric = 1;
        for (int64_t r = 0; r < t->n_rows && col->numeric; r++) {
            double v;
            col->numeric = parse_number(col->text[r], &v);
        }
        if (!col->numeric)
            continue;
        col->num = malloc((size_t)(t->n_rows ? t->n_rows : 1) * sizeof *col->num);
        if (!col->num) {
            st = bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
            goto done;
        }
        for (int64_t r = 0; r < t->n_rows; r++)
            parse_number(col->text[r], &col->num[r]);
    }
done:
    free(lines);
    if (st != BS_OK)
        bs_tsv_free(t);
    return st;
}

bs_status bs_tsv_read(const char *path, bs_tsv_table *t)
{
    char *text = NULL;
    size_t len = 0;
    memset(t, 0, sizeof *t);
    BS_TRY(bs_read_text_file(path, (size_t)256 << 20, &text, &len));
    bs_status st = bs_tsv_parse(text, len, path, t);
    free(text);
    return st;
}

int64_t bs_tsv_find(const bs_tsv_table *t, int32_t id)
{
    for (int64_t r = 0; r < t->n_rows; r++)
        if (t->ids[r] == id)
            return r;
    return -1;
}
