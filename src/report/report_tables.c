/*
 * report_tables.c - the per-cluster tables of the folder, as columns of the
 * unit table: cluster_group.tsv (the label curation starts from),
 * cluster_KSLabel.tsv, cluster_qc_label.tsv, cluster_Amplitude.tsv,
 * cluster_ContamPct.tsv and qc_metrics.tsv (every column), each when present.
 *
 * Each file is read whole into one accountant buffer, split in place, and the
 * text cells point into it (no copy per cell).
 *
 * Format (phylib's): a header line `cluster_id<TAB>name...`, tab-separated
 * (comma-separated when the header has no tab), one row per cluster, empty
 * cells skipped, CRLF accepted. A column whose non-empty cells all parse as
 * numbers (nan / inf included) is numeric, otherwise text. Rows of cluster ids
 * that have no spikes are ignored (counted in a note); a row that is not
 * `<id>` followed by at most as many cells as the header is bad input.
 *
 * Then the columns computed here from the spikes: spike count, firing rate,
 * mean amplitude, position (mean spike position, else the template's centre
 * of mass), peak channel and shank.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "../mem/mem.h"
#include "report_internal.h"

#define MAX_TSV_BYTES ((size_t)256 << 20)

static int parse_number(const char *s, double *v)
{
    char *end;
    *v = strtod(s, &end);
    return end != s && *end == '\0';
}

static void free_column(rp_column *c)
{
    bs_mem_free(c->text);
    bs_mem_free(c->num);
    free(c->name);
    memset(c, 0, sizeof *c);
}

/* The whole file, NUL-terminated, in an accountant buffer kept until rp_free (text cells point into it). */
static bs_status read_whole(rp_data *d, const char *path, char **text)
{
    uint64_t bytes;
    BS_TRY(bs_file_size(path, &bytes));
    if (bytes > MAX_TSV_BYTES)
        return bs_error(BS_ERR_INPUT, "%s: %llu bytes, expected at most %zu for a cluster table", path,
                        (unsigned long long)bytes, MAX_TSV_BYTES);
    if (d->n_tsv == RP_MAX_TSV)
        return bs_error(BS_ERR_INTERNAL, "%s: more than %d tables", path, RP_MAX_TSV);
    *text = bs_mem_alloc("report/tables", (size_t)bytes + 1);
    if (!*text)
        return BS_ERR_MEMORY;
    d->tsv_text[d->n_tsv++] = *text;
    FILE *fp = fopen(path, "rb");
    size_t got = fp ? fread(*text, 1, (size_t)bytes, fp) : 0;
    if (fp)
        fclose(fp);
    if (got != bytes)
        return bs_error(BS_ERR_INPUT, "%s: cannot read", path);
    (*text)[bytes] = '\0';
    if (strlen(*text) != bytes)
        return bs_error(BS_ERR_INPUT, "%s: expected text, found a NUL byte", path);
    return BS_OK;
}

/* Split `line` (NUL-terminated, no newline) at `sep` into at most max cells. */
static int split(char *line, char sep, char **cells, int max)
{
    int n = 0;
    char *s = line;
    for (;;) {
        char *e = strchr(s, sep);
        if (e)
            *e = '\0';
        if (n < max)
            cells[n] = s;
        n++;
        if (!e)
            break;
        s = e + 1;
    }
    return n;
}

static bs_status read_tsv(rp_data *d, const char *name)
{
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, d->dir, name));
    char *text = NULL;
    BS_TRY(read_whole(d, path, &text));
    bs_status st = BS_OK;
    char *line = text, *next;
    char *cells[RP_MAX_COLUMNS + 1];
    int first_col = d->n_cols, n_head = 0, line_no = 0;
    int map[RP_MAX_COLUMNS + 1]; /* header cell -> column index or -1 */
    int64_t unknown = 0;
    char sep = '\t';
    for (; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        size_t l = strlen(line);
        if (l && line[l - 1] == '\r')
            line[--l] = '\0';
        line_no++;
        if (line_no == 1) {
            sep = strchr(line, '\t') ? '\t' : ',';
            n_head = split(line, sep, cells, RP_MAX_COLUMNS + 1);
            for (int k = 0; k <= RP_MAX_COLUMNS; k++)
                map[k] = -1;
            if (n_head > RP_MAX_COLUMNS + 1 || strcmp(cells[0], "cluster_id") != 0) {
                st = n_head > RP_MAX_COLUMNS + 1
                         ? bs_error(BS_ERR_INPUT, "%s: line 1: expected at most %d columns, got %d", path,
                                    RP_MAX_COLUMNS, n_head)
                         : bs_error(BS_ERR_INPUT, "%s: line 1: expected a header starting with 'cluster_id', got '%s'",
                                    path, cells[0]);
                goto done;
            }
            for (int k = 1; k < n_head; k++) {
                map[k] = -1;
                int dup = 0;
                for (int c = 0; c < d->n_cols; c++)
                    dup |= strcmp(d->cols[c].name, cells[k]) == 0;
                if (dup || cells[k][0] == '\0')
                    continue;
                if (d->n_cols == RP_MAX_COLUMNS) {
                    rp_note(d, "%s: column '%s' and later ones not shown (more than %d columns)", name, cells[k],
                            RP_MAX_COLUMNS);
                    break;
                }
                rp_column *c = &d->cols[d->n_cols];
                c->name = strdup(cells[k]);
                c->text = bs_mem_calloc("report/tables", (size_t)d->n_units + 1, sizeof(char *));
                c->source = name;
                if (!c->name || !c->text) {
                    free_column(c);
                    st = bs_error(BS_ERR_MEMORY, "%s: out of memory for column '%s'", path, cells[k]);
                    goto done;
                }
                map[k] = d->n_cols++;
            }
            continue;
        }
        if (l == 0)
            continue;
        int n = split(line, sep, cells, RP_MAX_COLUMNS + 1);
        double idv;
        if (!parse_number(cells[0], &idv) || idv < 0 || idv != floor(idv) || idv > RP_MAX_CLUSTER_ID) {
            st = bs_error(BS_ERR_INPUT, "%s: line %d: field 'cluster_id': expected an integer id >= 0, got '%s'",
                          path, line_no, cells[0]);
            goto done;
        }
        if (n > n_head) {
            st = bs_error(BS_ERR_INPUT, "%s: line %d: expected at most %d cells (as the header), got %d", path,
                          line_no, n_head, n);
            goto done;
        }
        int64_t id = (int64_t)idv;
        int32_t u = id <= d->max_id ? d->id_to_unit[id] : -1;
        if (u < 0) {
            unknown++;
            continue;
        }
        for (int k = 1; k < n; k++) {
            if (map[k] < 0 || cells[k][0] == '\0')
                continue;
            d->cols[map[k]].text[u] = cells[k]; /* a later row of the same id wins */
        }
    }
    if (line_no == 0)
        st = bs_error(BS_ERR_INPUT, "%s: expected a header line 'cluster_id<TAB>...', the file is empty", path);
    if (unknown)
        rp_note(d, "%s: %lld row%s of cluster ids without spikes ignored", name, (long long)unknown,
                unknown == 1 ? "" : "s");
    /* numeric columns */
    for (int c = first_col; st == BS_OK && c < d->n_cols; c++) {
        rp_column *col = &d->cols[c];
        int numeric = 1;
        double v;
        for (int64_t u = 0; u < d->n_units && numeric; u++)
            numeric = !col->text[u] || parse_number(col->text[u], &v);
        if (!numeric)
            continue;
        col->num = bs_mem_alloc("report/tables", ((size_t)d->n_units + 1) * sizeof(double));
        if (!col->num) {
            st = BS_ERR_MEMORY;
            break;
        }
        for (int64_t u = 0; u < d->n_units; u++) {
            col->num[u] = NAN;
            if (col->text[u])
                parse_number(col->text[u], &col->num[u]);
        }
        bs_mem_free(col->text);
        col->text = NULL;
    }
done:
    return st;
}

bs_status rp_load_tables(rp_data *d)
{
    static const char *const files[] = {"cluster_group.tsv", "cluster_KSLabel.tsv", "cluster_qc_label.tsv",
                                        "cluster_Amplitude.tsv", "cluster_ContamPct.tsv", "qc_metrics.tsv"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        if (rp_exists(d->dir, files[i]))
            BS_TRY(read_tsv(d, files[i]));
        else if (strcmp(files[i], "qc_metrics.tsv") == 0)
            rp_note(d, "qc_metrics.tsv absent: no quality metrics (boundsort qc OUT writes them)");
        else if (strcmp(files[i], "cluster_qc_label.tsv") == 0)
            rp_note(d, "cluster_qc_label.tsv absent: no automatic qc labels");
    }
    d->col_group = d->col_ks = d->col_qc = -1;
    for (int c = 0; c < d->n_cols; c++) {
        if (!d->cols[c].text)
            continue;
        if (strcmp(d->cols[c].name, "group") == 0)
            d->col_group = c;
        else if (strcmp(d->cols[c].name, "KSLabel") == 0)
            d->col_ks = c;
        else if (strcmp(d->cols[c].name, "qc_label") == 0)
            d->col_qc = c;
    }
    return BS_OK;
}

static void emit_column(rp_json *j, const rp_column *c, int64_t n)
{
    rpj_obj(j, NULL);
    rpj_str(j, "key", c->name);
    rpj_str(j, "kind", c->text ? "text" : "num");
    rpj_str(j, "source", c->source);
    rpj_arr(j, "values");
    for (int64_t u = 0; u < n; u++) {
        if (c->text)
            rpj_str(j, NULL, c->text[u]);
        else
            rpj_num(j, NULL, c->num[u]);
    }
    rpj_end_arr(j);
    rpj_end_obj(j);
}

/* A computed numeric column; `v` is called per unit. */
static void emit_computed(rp_json *j, const rp_data *d, const char *key, const char *source, int digits,
                          double (*v)(const rp_data *, int64_t))
{
    rpj_obj(j, NULL);
    rpj_str(j, "key", key);
    rpj_str(j, "kind", "num");
    rpj_str(j, "source", source);
    rpj_int(j, "digits", digits);
    rpj_arr(j, "values");
    for (int64_t u = 0; u < d->n_units; u++)
        rpj_num(j, NULL, v(d, u));
    rpj_end_arr(j);
    rpj_end_obj(j);
}

static double v_count(const rp_data *d, int64_t u) { return (double)d->count[u]; }
static double v_rate(const rp_data *d, int64_t u) { return d->duration_s > 0 ? d->count[u] / d->duration_s : NAN; }
static double v_amp(const rp_data *d, int64_t u) { return d->have_amplitudes ? d->amp_sum[u] / d->count[u] : NAN; }
static double v_x(const rp_data *d, int64_t u)
{
    return d->pos_n[u] ? d->pos_sum[2 * u] / d->pos_n[u] : d->tpos ? d->tpos[2 * u] : NAN;
}
static double v_y(const rp_data *d, int64_t u)
{
    return d->pos_n[u] ? d->pos_sum[2 * u + 1] / d->pos_n[u] : d->tpos ? d->tpos[2 * u + 1] : NAN;
}
static double v_ch(const rp_data *d, int64_t u) { return d->peak_ch && d->peak_ch[u] >= 0 ? d->peak_ch[u] : NAN; }
static double v_sh(const rp_data *d, int64_t u)
{
    return d->peak_ch && d->peak_ch[u] >= 0 ? d->chan_shank[d->peak_ch[u]] : NAN;
}

void rp_emit_tables(rp_json *j, const rp_data *d)
{
    rpj_arr(j, "columns");
    for (int c = 0; c < d->n_cols; c++)
        if (c == d->col_group || c == d->col_ks || c == d->col_qc)
            emit_column(j, &d->cols[c], d->n_units);
    emit_computed(j, d, "n_spikes", "spike_clusters.npy", 0, v_count);
    emit_computed(j, d, "fr_hz", "spikes / recording length", 3, v_rate);
    emit_computed(j, d, "amp_mean", "amplitudes.npy", 3, v_amp);
    const char *pos = d->have_positions ? "mean of spike_positions.npy" : "template centre of mass";
    emit_computed(j, d, "x_um", pos, 1, v_x);
    emit_computed(j, d, "y_um", pos, 1, v_y);
    emit_computed(j, d, "peak_ch", "templates.npy", 0, v_ch);
    emit_computed(j, d, "shank", "channel_shanks.npy", 0, v_sh);
    for (int c = 0; c < d->n_cols; c++)
        if (c != d->col_group && c != d->col_ks && c != d->col_qc)
            emit_column(j, &d->cols[c], d->n_units);
    rpj_end_arr(j);
}

void rp_free_tables(rp_data *d)
{
    for (int c = 0; c < d->n_cols; c++)
        free_column(&d->cols[c]);
    d->n_cols = 0;
    for (int i = 0; i < d->n_tsv; i++)
        bs_mem_free(d->tsv_text[i]);
    d->n_tsv = 0;
}
