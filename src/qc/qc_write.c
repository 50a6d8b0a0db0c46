/*
 * qc_write.c - the files bs_qc_run leaves in the Phy folder, each written
 * atomically (src/common/fileio.h):
 *   qc/qc_metrics.tsv      cluster_id, then one column per metric (qc.h order),
 *                          in a folder of its own so that SpikeInterface's
 *                          read_phy, which merges every top-level .tsv, does
 *                          not get each metric twice
 *   cluster_<metric>.tsv   cluster_id, <metric>: one file per metric, which
 *                          Phy shows as a column of its cluster view
 *   cluster_qc_label.tsv   cluster_id, qc_label: good (passes the Allen rule),
 *                          fail, or unknown (bs_qc_label_of)
 *   cluster_unit_type.tsv  cluster_id, unit_type, reason: noise / non-somatic /
 *                          mua / good by Bombcell's rules (qc_unit_type.c) and
 *                          the rule that decided it
 *   merge_proposals.tsv    unit_a, unit_b and the evidence of each pair that
 *                          looks like one unit (qc_merge.c); no cluster_id
 *                          column, so read_phy leaves it alone
 *   curation.json          SpikeInterface curation format v2 (src/export/curation.h)
 * Every table has one row per unit (sorted by id), units without spikes
 * included, because SpikeInterface's read_phy inner-joins all the folder's
 * .tsv files on cluster_id. NaN is written "nan"; counts as integers; other
 * values with 12 significant digits. The KS-style label (cluster_KSLabel.tsv)
 * and Phy's cluster_group.tsv are left as they are.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../export/curation.h"
#include "../mem/mem.h"
#include "qc_run.h"

static void fmt_value(char *buf, size_t n, double v, int is_count)
{
    if (isnan(v))
        snprintf(buf, n, "nan");
    else if (is_count)
        snprintf(buf, n, "%lld", (long long)v);
    else
        snprintf(buf, n, "%.12g", v);
}

/* A table with columns [m0, m1) of the metrics (or the label when label != 0). */
static bs_status write_table(const qc_ctx *c, const char *name, int m0, int m1, int label)
{
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, c->dir, name));
    char *slash = strrchr(path, '/');
    if (strchr(name, '/') && slash) { /* a table in a subfolder of OUT */
        *slash = '\0';
        bs_status st = bs_mkdir_p(path);
        *slash = '/';
        BS_TRY(st);
    }
    bs_atomic_file f;
    BS_TRY(bs_atomic_open(&f, path));
    fprintf(f.fp, "cluster_id");
    for (int m = m0; m < m1; m++)
        fprintf(f.fp, "\t%s", bs_qc_metric_names[m]);
    if (label)
        fprintf(f.fp, "\tqc_label");
    fputc('\n', f.fp);
    char buf[64];
    for (int u = 0; u < c->K; u++) {
        const double *row = c->metrics + (size_t)u * BS_QC_N_METRICS;
        fprintf(f.fp, "%d", (int)c->ids[u]);
        for (int m = m0; m < m1; m++) {
            fmt_value(buf, sizeof buf, row[m], bs_qc_metric_is_count(m));
            fprintf(f.fp, "\t%s", buf);
        }
        if (label)
            fprintf(f.fp, "\t%s", bs_qc_label_names[bs_qc_label_of(row, c->p)]);
        fputc('\n', f.fp);
    }
    if (ferror(f.fp)) {
        bs_atomic_abort(&f);
        return bs_error(BS_ERR_IO, "%s: write failed", path);
    }
    return bs_atomic_commit(&f);
}

static int have_multi(const qc_ctx *c) { return c->C >= c->p->shape_multi_min_channels; }

static const bs_unit_type_rules *rules_of(const qc_ctx *c, bs_unit_type_rules *defaults)
{
    if (c->p->unit_type_rules)
        return c->p->unit_type_rules;
    bs_unit_type_default_rules(defaults);
    return defaults;
}

/* cluster_unit_type.tsv; types[u] gets each unit's type for curation.json, n_type the counts. */
static bs_status write_unit_types(const qc_ctx *c, const bs_unit_type_rules *r, bs_unit_type *types, int *n_type)
{
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, c->dir, BS_PHY_CLUSTER_UNIT_TYPE));
    bs_atomic_file f;
    BS_TRY(bs_atomic_open(&f, path));
    fprintf(f.fp, "cluster_id\tunit_type\treason\n");
    for (int u = 0; u < c->K; u++) {
        char reason[256];
        const double *row = c->metrics + (size_t)u * BS_QC_N_METRICS;
        bs_unit_type t = c->count[u] > 0 ? bs_unit_type_of(row, r, have_multi(c), reason, sizeof reason)
                                         : BS_UNIT_NOISE;
        if (c->count[u] == 0)
            snprintf(reason, sizeof reason, "no spikes");
        types[u] = t;
        n_type[t]++;
        fprintf(f.fp, "%d\t%s\t%s\n", (int)c->ids[u], bs_unit_type_names[t], reason);
    }
    if (ferror(f.fp)) {
        bs_atomic_abort(&f);
        return bs_error(BS_ERR_IO, "%s: write failed", path);
    }
    return bs_atomic_commit(&f);
}

static bs_status write_merge_proposals(const qc_ctx *c, int *n_proposed)
{
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, c->dir, BS_PHY_MERGE_PROPOSALS));
    bs_atomic_file f;
    BS_TRY(bs_atomic_open(&f, path));
    fprintf(f.fp, "unit_a\tunit_b\ttemplate_similarity\tdistance_um\trefractory_ratio\texpected_refractory\t"
                  "presence_overlap\tamplitude_ratio\tevidence\n");
    *n_proposed = 0;
    char b[6][32];
    for (int i = 0; i < c->n_pairs; i++) {
        const qc_pair *q = &c->pairs[i];
        double expected, ratio, amp;
        const char *why;
        if (!qc_merge_decide(c, q, &expected, &ratio, &amp, &why))
            continue;
        (*n_proposed)++;
        double v[6] = {q->similarity, q->dist_um, ratio, expected, q->overlap, amp};
        for (int k = 0; k < 6; k++)
            fmt_value(b[k], sizeof b[k], v[k], 0);
        fprintf(f.fp, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", (int)c->ids[q->a], (int)c->ids[q->b], b[0], b[1], b[2],
                b[3], b[4], b[5], why);
    }
    if (ferror(f.fp)) {
        bs_atomic_abort(&f);
        return bs_error(BS_ERR_IO, "%s: write failed", path);
    }
    return bs_atomic_commit(&f);
}

bs_status qc_write_outputs(qc_ctx *c, bs_qc_summary *summary)
{
    int n_merge = 0;
    bs_unit_type_rules defaults;
    const bs_unit_type_rules *rules = rules_of(c, &defaults);
    int n_type[BS_UNIT_N_TYPES] = {0};
    BS_TRY(write_table(c, BS_PHY_QC_METRICS, 0, BS_QC_N_METRICS, 0));
    char legacy[4200]; /* an earlier build's copy at the top level would be merged by read_phy */
    BS_TRY(bs_path_join(legacy, sizeof legacy, c->dir, BS_PHY_QC_METRICS_LEGACY));
    if (unlink(legacy) != 0 && errno != ENOENT)
        return bs_error(BS_ERR_IO, "%s: cannot remove an earlier run's table: %s", legacy, strerror(errno));
    for (int m = 0; m < BS_QC_N_METRICS; m++) {
        char name[128];
        snprintf(name, sizeof name, "cluster_%s.tsv", bs_qc_metric_names[m]);
        BS_TRY(write_table(c, name, m, m + 1, 0));
    }
    BS_TRY(write_table(c, BS_PHY_CLUSTER_QC_LABEL, 0, 0, 1));
    bs_curation_unit *cu = bs_mem_alloc("qc/curation", sizeof *cu * (size_t)(c->K > 0 ? c->K : 1));
    bs_unit_type *types = bs_mem_alloc("qc/curation", sizeof *types * (size_t)(c->K > 0 ? c->K : 1));
    bs_status st = cu && types ? BS_OK : BS_ERR_MEMORY;
    if (st == BS_OK)
        st = write_unit_types(c, rules, types, n_type);
    if (st == BS_OK)
        st = write_merge_proposals(c, &n_merge);
    if (st != BS_OK) {
        bs_mem_free(cu);
        bs_mem_free(types);
        return st;
    }
    int n_label[BS_QC_N_LABELS] = {0};
    for (int u = 0; u < c->K; u++) {
        bs_qc_label l = bs_qc_label_of(c->metrics + (size_t)u * BS_QC_N_METRICS, c->p);
        n_label[l]++;
        cu[u] = (bs_curation_unit){c->ids[u], NULL, bs_qc_label_names[l], bs_unit_type_names[types[u]]};
        for (int i = 0; i < c->groups.n; i++)
            if (c->groups.id[i] == c->ids[u])
                cu[u].quality = c->groups.group[i];
    }
    char path[4200];
    st = bs_path_join(path, sizeof path, c->dir, "curation.json");
    if (st == BS_OK)
        st = bs_curation_write(path, c->K, cu);
    bs_mem_free(cu);
    bs_mem_free(types);
    if (st == BS_OK && !c->p->quiet)
        bs_log_info("qc: %d of %d units pass (isi_violations_ratio < %g, presence_ratio > %g, amplitude_cutoff < %g), "
                    "%d unknown (a metric of the rule could not be computed); " BS_PHY_QC_METRICS
                    ", cluster_qc_label.tsv and curation.json in %s",
                    n_label[BS_QC_LABEL_GOOD], c->K, c->p->label_isi_max, c->p->label_presence_min,
                    c->p->label_cutoff_max, n_label[BS_QC_LABEL_UNKNOWN], c->dir);
    if (st == BS_OK && !c->p->quiet)
        bs_log_info("qc: unit types (Bombcell's rules%s): %d good, %d mua, %d non-somatic, %d noise; "
                    BS_PHY_CLUSTER_UNIT_TYPE " says which rule decided each",
                    c->p->unit_type_rules ? ", thresholds from the given file" : "", n_type[BS_UNIT_GOOD],
                    n_type[BS_UNIT_MUA], n_type[BS_UNIT_NON_SOMATIC], n_type[BS_UNIT_NOISE]);
    if (st == BS_OK && !c->p->quiet)
        bs_log_info("qc: %d merge proposals of %d candidate pairs in " BS_PHY_MERGE_PROPOSALS, n_merge, c->n_pairs);
    if (summary) {
        summary->n_units = c->K;
        summary->n_good = n_label[BS_QC_LABEL_GOOD];
        summary->n_unknown = n_label[BS_QC_LABEL_UNKNOWN];
        summary->n_spikes = c->S;
        for (int t = 0; t < BS_UNIT_N_TYPES; t++)
            summary->n_unit_type[t] = n_type[t];
        summary->n_merge_proposals = n_merge;
    }
    return st;
}

bs_status bs_qc_remove_outputs(const char *out_dir)
{
    char name[128], path[4300];
    for (int i = -6; i < BS_QC_N_METRICS; i++) {
        static const char *const fixed[] = {BS_PHY_QC_METRICS_LEGACY, BS_PHY_QC_METRICS, BS_PHY_CLUSTER_QC_LABEL,
                                            BS_PHY_CLUSTER_UNIT_TYPE, BS_PHY_MERGE_PROPOSALS, "curation.json"};
        if (i < 0)
            snprintf(name, sizeof name, "%s", fixed[i + 6]);
        else
            snprintf(name, sizeof name, "cluster_%s.tsv", bs_qc_metric_names[i]);
        BS_TRY(bs_path_join(path, sizeof path, out_dir, name));
        if (unlink(path) != 0 && errno != ENOENT)
            return bs_error(BS_ERR_INPUT, "%s: cannot remove an earlier run's qc file: %s", path, strerror(errno));
    }
    return BS_OK;
}
