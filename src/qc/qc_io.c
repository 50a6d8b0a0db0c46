/*
 * qc_io.c - cluster_group.tsv for qc: the folder's per-cluster table read
 * with the Phy-folder reader (src/export/phy_read.h, the viewers' rules),
 * required to be exactly `cluster_id<TAB>group`, its rows copied into a
 * small id / group list. The per-spike columns are read with bs_phy_col
 * (qc_col_open in qc_internal.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_internal.h"

void qc_groups_free(qc_groups *g)
{
    free(g->id);
    free(g->group);
    memset(g, 0, sizeof *g);
}

bs_status qc_read_groups(const char *dir, qc_groups *g)
{
    memset(g, 0, sizeof *g);
    if (!bs_phy_has(dir, BS_PHY_CLUSTER_GROUP))
        return BS_OK; /* optional */
    bs_tsv_table t;
    BS_TRY(bs_tsv_read_rows(dir, BS_PHY_CLUSTER_GROUP, &t));
    bs_status st = BS_OK;
    if (t.n_cols != 1 || strcmp(t.cols[0].raw, "group") != 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, BS_PHY_CLUSTER_GROUP);
        st = bs_error(BS_ERR_INPUT, "%s: line 1: expected the header 'cluster_id<TAB>group'", path);
    }
    if (st == BS_OK && t.n_rows) {
        g->id = malloc(sizeof *g->id * (size_t)t.n_rows);
        g->group = malloc(sizeof *g->group * (size_t)t.n_rows);
        if (!g->id || !g->group)
            st = bs_error(BS_ERR_MEMORY, "%s: out of memory", BS_PHY_CLUSTER_GROUP);
    }
    for (int64_t r = 0; st == BS_OK && r < t.n_rows; r++) {
        g->id[g->n] = t.ids[r];
        snprintf(g->group[g->n], sizeof g->group[0], "%s", t.cols[0].text[r]);
        g->n++;
    }
    bs_tsv_free(&t);
    if (st != BS_OK)
        qc_groups_free(g);
    return st;
}
