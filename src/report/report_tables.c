/*
 * report_tables.c - the per-cluster tables of the folder, as columns of the
 * unit table: cluster_group.tsv (the label curation starts from),
 * cluster_KSLabel.tsv, cluster_qc_label.tsv, cluster_Amplitude.tsv,
 * cluster_ContamPct.tsv and qc/qc_metrics.tsv (every column), each when present.
 *
 * Each file is read with the Phy-folder reader (src/export/phy_read.h,
 * bs_tsv_read_rows: phylib's format, tab- or comma-separated, CRLF
 * accepted) and kept until rp_free; the text cells point into its storage
 * (no copy per cell). Empty cells are skipped; a later row of the same id
 * wins. A column whose non-empty cells of the units all parse as numbers
 * (nan / inf included) is numeric, otherwise text. Rows of cluster ids that
 * have no spikes are ignored (counted in a note); a row that is not `<id>`
 * followed by at most as many cells as the header is bad input.
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

static void free_column(rp_column *c)
{
    bs_mem_free(c->text);
    bs_mem_free(c->num);
    free(c->name);
    memset(c, 0, sizeof *c);
}

/* Columns of table t (file `name`) not shown yet; map[c] = column index or -1. */
static bs_status add_columns(rp_data *d, const char *name, const char *path, const bs_tsv_table *t, int *map)
{
    if (t->n_cols > RP_MAX_COLUMNS)
        return bs_error(BS_ERR_INPUT, "%s: line 1: expected at most %d columns, got %d", path, RP_MAX_COLUMNS,
                        t->n_cols + 1);
    for (int k = 0; k < t->n_cols; k++) {
        map[k] = -1;
        const char *head = t->cols[k].raw;
        int dup = 0;
        for (int c = 0; c < d->n_cols; c++)
            dup |= strcmp(d->cols[c].name, head) == 0;
        if (dup || head[0] == '\0')
            continue;
        if (d->n_cols == RP_MAX_COLUMNS) {
            rp_note(d, "%s: column '%s' and later ones not shown (more than %d columns)", name, head, RP_MAX_COLUMNS);
            break;
        }
        rp_column *c = &d->cols[d->n_cols];
        c->name = strdup(head);
        c->text = bs_mem_calloc("report/tables", (size_t)d->n_units + 1, sizeof(char *));
        c->source = name;
        if (!c->name || !c->text) {
            free_column(c);
            return bs_error(BS_ERR_MEMORY, "%s: out of memory for column '%s'", path, head);
        }
        map[k] = d->n_cols++;
    }
    return BS_OK;
}

static bs_status read_tsv(rp_data *d, const char *name)
{
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, d->dir, name));
    if (d->n_tsv == RP_MAX_TSV)
        return bs_error(BS_ERR_INTERNAL, "%s: more than %d tables", path, RP_MAX_TSV);
    bs_tsv_table *t = &d->tsv[d->n_tsv];
    BS_TRY(bs_tsv_read_rows(d->dir, name, t));
    d->n_tsv++;
    int first_col = d->n_cols;
    int map[RP_MAX_COLUMNS];
    BS_TRY(add_columns(d, name, path, t, map));
    int64_t unknown = 0;
    for (int64_t r = 0; r < t->n_rows; r++) {
        int32_t id = t->ids[r];
        if (id > RP_MAX_CLUSTER_ID)
            return bs_error(BS_ERR_INPUT, "%s: line %d: field 'cluster_id': expected an integer id >= 0 and <= %d, got %d",
                            path, t->line[r], RP_MAX_CLUSTER_ID, id);
        int32_t u = id <= d->max_id ? d->id_to_unit[id] : -1;
        if (u < 0) {
            unknown++;
            continue;
        }
        for (int k = 0; k < t->n_cols; k++)
            if (map[k] >= 0 && t->cols[k].text[r][0] != '\0')
                d->cols[map[k]].text[u] = t->cols[k].text[r]; /* a later row of the same id wins */
    }
    if (unknown)
        rp_note(d, "%s: %lld row%s of cluster ids without spikes ignored", name, (long long)unknown,
                unknown == 1 ? "" : "s");
    /* numeric columns: every non-empty cell of a unit is a number */
    for (int c = first_col; c < d->n_cols; c++) {
        rp_column *col = &d->cols[c];
        int numeric = 1;
        double v;
        for (int64_t u = 0; u < d->n_units && numeric; u++)
            numeric = !col->text[u] || bs_tsv_number(col->text[u], &v);
        if (!numeric)
            continue;
        col->num = bs_mem_alloc("report/tables", ((size_t)d->n_units + 1) * sizeof(double));
        if (!col->num)
            return BS_ERR_MEMORY;
        for (int64_t u = 0; u < d->n_units; u++) {
            col->num[u] = NAN;
            if (col->text[u])
                bs_tsv_number(col->text[u], &col->num[u]);
        }
        bs_mem_free(col->text);
        col->text = NULL;
    }
    return BS_OK;
}

bs_status rp_load_tables(rp_data *d)
{
    static const char *const files[] = {BS_PHY_CLUSTER_GROUP,     BS_PHY_CLUSTER_KSLABEL,   BS_PHY_CLUSTER_QC_LABEL,
                                        BS_PHY_CLUSTER_UNIT_TYPE, BS_PHY_CLUSTER_AMPLITUDE, BS_PHY_CLUSTER_CONTAMPCT,
                                        BS_PHY_QC_METRICS};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        if (bs_phy_has(d->dir, files[i]))
            BS_TRY(read_tsv(d, files[i]));
        else if (strcmp(files[i], BS_PHY_QC_METRICS) == 0)
            rp_note(d, "qc_metrics.tsv absent: no quality metrics (boundsort qc OUT writes them)");
        else if (strcmp(files[i], BS_PHY_CLUSTER_QC_LABEL) == 0)
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

static int32_t unit_of(const rp_data *d, const char *cell)
{
    int32_t id;
    return bs_tsv_parse_id(cell, &id) && id <= d->max_id ? d->id_to_unit[id] : -1;
}

/* merge_proposals.tsv (qc): [{a, b (unit indices), the evidence columns, evidence}], rows naming unknown
 * units left out; absent file: an empty list. */
static void emit_merge_proposals(rp_json *j, const rp_data *d)
{
    rpj_arr(j, "merge_proposals");
    char path[4200], *text = NULL;
    size_t len = 0;
    if (bs_phy_has(d->dir, BS_PHY_MERGE_PROPOSALS) &&
        bs_path_join(path, sizeof path, d->dir, BS_PHY_MERGE_PROPOSALS) == BS_OK &&
        bs_read_text_file(path, (size_t)64 << 20, &text, &len) == BS_OK) {
        char *pos = text, *line, *head[16], *cell[16];
        int line_no = 0, nh = 0;
        if ((line = bs_tsv_next_line(&pos, &line_no)))
            nh = bs_tsv_split(line, '\t', head, 16);
        while (nh >= 2 && (line = bs_tsv_next_line(&pos, &line_no))) {
            int n = bs_tsv_split(line, '\t', cell, 16);
            int32_t a = n == nh ? unit_of(d, cell[0]) : -1, b = n == nh ? unit_of(d, cell[1]) : -1;
            if (a < 0 || b < 0)
                continue;
            rpj_obj(j, NULL);
            rpj_int(j, "a", a);
            rpj_int(j, "b", b);
            for (int k = 2; k < nh; k++) {
                double v;
                if (bs_tsv_number(cell[k], &v))
                    rpj_num(j, head[k], v);
                else
                    rpj_str(j, head[k], cell[k]);
            }
            rpj_end_obj(j);
        }
        free(text);
    }
    rpj_end_arr(j);
}

void rp_emit_tables(rp_json *j, const rp_data *d)
{
    emit_merge_proposals(j, d);
    rpj_arr(j, "columns");
    for (int c = 0; c < d->n_cols; c++)
        if (c == d->col_group || c == d->col_ks || c == d->col_qc)
            emit_column(j, &d->cols[c], d->n_units);
    emit_computed(j, d, "n_spikes", BS_PHY_SPIKE_CLUSTERS, 0, v_count);
    emit_computed(j, d, "fr_hz", "spikes / recording length", 2, v_rate);
    emit_computed(j, d, "amp_mean", BS_PHY_AMPLITUDES, 1, v_amp);
    const char *pos = d->have_positions ? "mean of spike_positions.npy" : "template centre of mass";
    emit_computed(j, d, "x_um", pos, 1, v_x);
    emit_computed(j, d, "y_um", pos, 1, v_y);
    emit_computed(j, d, "peak_ch", BS_PHY_TEMPLATES, 0, v_ch);
    emit_computed(j, d, "shank", BS_PHY_CHANNEL_SHANKS, 0, v_sh);
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
        bs_tsv_free(&d->tsv[i]);
    d->n_tsv = 0;
}
