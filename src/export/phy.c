/*
 * phy.c - the Phy folder writer (see phy.h for the contract).
 *
 * State: one bs_npy_writer per streamed file (per-spike arrays, templates,
 * pc_feature_ind, optionally similar_templates, spike positions and template
 * features), the last spike time written
 * (to refuse out-of-order blocks), a presence byte per cluster id seen (so the
 * cluster tables get a row for every id; O(max cluster id), not O(spikes)),
 * and the small per-channel / per-cluster arrays set by the caller.
 *
 * Close order: streamed files are committed first, files an earlier export
 * left that would contradict this one are removed (template_ind.npy,
 * cluster_info.tsv, stale per-spike extras, Phy's .phy/ cache), then templates_ind,
 * similar_templates (computed if not streamed), channel and whitening
 * arrays, the cluster tables and finally params.py. Each committed path is
 * remembered; on any failure they are all removed again, so a failed export
 * leaves temporary names at worst, never a folder that looks complete.
 */
#include "phy.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../io/npy.h"
#include "../mem/mem.h"

enum { S_TIMES, S_TEMPLATES, S_CLUSTERS, S_AMPS, S_PCF, S_TPL, S_PCIND, S_SIM, S_POS, S_TF, S_TFIND, S_COUNT };
static const char *const stream_names[S_COUNT] = {
    BS_PHY_SPIKE_TIMES,     BS_PHY_SPIKE_TEMPLATES,   BS_PHY_SPIKE_CLUSTERS,   BS_PHY_AMPLITUDES,
    BS_PHY_PC_FEATURES,     BS_PHY_TEMPLATES,         BS_PHY_PC_FEATURE_IND,   BS_PHY_SIMILAR_TEMPLATES,
    BS_PHY_SPIKE_POSITIONS, BS_PHY_TEMPLATE_FEATURES, BS_PHY_TEMPLATE_FEATURE_IND};

#define MAX_COMMITTED 32

struct bs_phy_writer {
    char dir[4096];
    bs_phy_header h;
    char dat_path[4096];  /* copies of the header strings */
    char dtype[32];
    bs_npy_writer s[S_COUNT];
    int open[S_COUNT];    /* 1 while a stream is open (temporary file exists) */
    int failed;           /* a streamed write failed: the streams may disagree, close refuses */
    int64_t n_spikes;
    int64_t last_time;    /* samples; -1 before the first spike */
    int64_t n_tpl_rows;   /* templates appended */
    int64_t n_sim_rows;   /* similar_templates rows appended */
    int64_t n_pos_rows;   /* spike_positions rows appended */
    int n_tf;             /* template features per spike; 0 until set_template_feature_ind */
    int64_t n_tf_rows;    /* template_features rows appended */
    double *tpl_norm;     /* [T] L2 norm of each template (whitened units) */
    uint8_t *present;     /* [present_cap] 1 if that cluster id has spikes */
    int64_t present_cap;
    int32_t *chan_map;    /* [C] file column */
    float *positions;     /* [C x 2] µm */
    int32_t *shanks;      /* [C] */
    float *wmat, *wmat_inv; /* [C x C] or NULL (identity) */
    bs_phy_cluster *clusters; /* [n_clusters] caller's rows, strings copied below */
    char (*cl_strings)[2][16];
    int n_clusters;
    char committed[MAX_COMMITTED][4200];
    int n_committed;
};

static const char *const known_dtypes[] = {"int8", "uint8", "int16", "uint16", "int32", "uint32",
                                           "int64", "uint64", "float32", "float64"};

static bs_status join(const bs_phy_writer *w, const char *name, char *buf, size_t len)
{
    return bs_path_join(buf, len, w->dir, name);
}

static void free_all(bs_phy_writer *w)
{
    for (int i = 0; i < S_COUNT; i++)
        if (w->open[i])
            bs_npy_writer_abort(&w->s[i]);
    bs_mem_free(w->tpl_norm);
    bs_mem_free(w->present);
    bs_mem_free(w->chan_map);
    bs_mem_free(w->positions);
    bs_mem_free(w->shanks);
    bs_mem_free(w->wmat);
    bs_mem_free(w->wmat_inv);
    free(w->clusters);
    free(w->cl_strings);
    free(w);
}

bs_status bs_phy_writer_open(bs_phy_writer **out, const char *dir, const bs_phy_header *h)
{
    *out = NULL;
    if (h->n_chan < 1 || h->nt < 1 || h->n_templates < 0 || h->n_channels_dat < h->n_chan || h->n_pc < 0 ||
        (h->n_pc > 0 && (h->n_pc_chan < 1 || h->n_pc_chan > h->n_chan)) || !(h->sample_rate_hz > 0) ||
        h->n_samples < 0)
        return bs_error(BS_ERR_INTERNAL,
                        "%s: inconsistent Phy header: n_chan %d, nt %d, n_templates %d, n_channels_dat %d, "
                        "n_pc %d, n_pc_chan %d, sample_rate %g Hz, n_samples %" PRId64,
                        dir, h->n_chan, h->nt, h->n_templates, h->n_channels_dat, h->n_pc, h->n_pc_chan,
                        h->sample_rate_hz, h->n_samples);
    int dtype_ok = 0;
    for (size_t i = 0; h->dtype && i < sizeof known_dtypes / sizeof known_dtypes[0]; i++)
        dtype_ok |= strcmp(h->dtype, known_dtypes[i]) == 0;
    if (!dtype_ok)
        return bs_error(BS_ERR_INTERNAL, "%s: Phy header dtype '%s' is not a numpy dtype name (e.g. 'int16')", dir,
                        h->dtype ? h->dtype : "(null)");
    const char *dp = h->dat_path ? h->dat_path : "";
    if (strlen(dp) >= 4096)
        return bs_error(BS_ERR_INPUT, "%s: dat_path is too long", dir);
    for (const char *c = dp; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            return bs_error(BS_ERR_INPUT, "%s: dat_path '%s' contains a control character", dir, dp);

    BS_TRY(bs_mkdir_p(dir));
    bs_phy_writer *w = calloc(1, sizeof *w);
    if (!w)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", dir);
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    w->h = *h;
    snprintf(w->dat_path, sizeof w->dat_path, "%s", dp);
    snprintf(w->dtype, sizeof w->dtype, "%s", h->dtype);
    w->h.dat_path = w->dat_path;
    w->h.dtype = w->dtype;
    w->last_time = -1;

    /* A stale params.py would make a half-rewritten folder look complete. */
    char path[4200];
    bs_status st = join(w, BS_PHY_PARAMS, path, sizeof path);
    if (st == BS_OK && remove(path) != 0 && errno != ENOENT)
        st = bs_error(BS_ERR_INPUT, "%s: cannot remove the previous params.py: %s", path, strerror(errno));

    int64_t none[1] = {0};
    int64_t pcf_row[2] = {h->n_pc, h->n_pc_chan};
    int64_t tpl_row[2] = {h->nt, h->n_chan};
    int64_t pcind_row[1] = {h->n_pc_chan};
    for (int i = 0; i < S_COUNT && st == BS_OK; i++) {
        if ((i == S_PCF || i == S_PCIND) && h->n_pc == 0)
            continue;
        if (i == S_SIM || i == S_POS || i == S_TF || i == S_TFIND)
            continue; /* opened on the first streamed row, or when set */
        st = join(w, stream_names[i], path, sizeof path);
        if (st != BS_OK)
            break;
        switch (i) {
        case S_TIMES: st = bs_npy_writer_open(&w->s[i], path, BS_NPY_I64, 1, none); break;
        case S_TEMPLATES:
        case S_CLUSTERS: st = bs_npy_writer_open(&w->s[i], path, BS_NPY_I32, 1, none); break;
        case S_AMPS: st = bs_npy_writer_open(&w->s[i], path, BS_NPY_F32, 1, none); break;
        case S_PCF: st = bs_npy_writer_open(&w->s[i], path, BS_NPY_F32, 3, pcf_row); break;
        case S_TPL: st = bs_npy_writer_open(&w->s[i], path, BS_NPY_F32, 3, tpl_row); break;
        case S_PCIND: st = bs_npy_writer_open(&w->s[i], path, BS_NPY_U32, 2, pcind_row); break;
        default: break;
        }
        if (st == BS_OK)
            w->open[i] = 1;
    }
    if (st == BS_OK) {
        w->tpl_norm = bs_mem_calloc("export/template_norms", (size_t)h->n_templates + 1, sizeof(double));
        if (!w->tpl_norm)
            st = BS_ERR_MEMORY;
    }
    if (st != BS_OK) {
        free_all(w);
        return bs_error_context(st, "opening the Phy folder %s", dir);
    }
    *out = w;
    return BS_OK;
}

static bs_status mark_present(bs_phy_writer *w, int32_t id)
{
    if (id >= w->present_cap) {
        int64_t cap = w->present_cap ? w->present_cap : 256;
        while (cap <= id)
            cap *= 2;
        uint8_t *p = bs_mem_realloc(w->present, "export/cluster_ids", (size_t)cap);
        if (!p)
            return BS_ERR_MEMORY;
        memset(p + w->present_cap, 0, (size_t)(cap - w->present_cap));
        w->present = p;
        w->present_cap = cap;
    }
    w->present[id] = 1;
    return BS_OK;
}

bs_status bs_phy_writer_append_spikes(bs_phy_writer *w, int64_t n, const int64_t *times, const int32_t *templates,
                                      const int32_t *clusters, const float *amplitudes, const float *pc_features)
{
    if (n <= 0)
        return BS_OK;
    if (!times || !templates || !amplitudes || (w->h.n_pc > 0 && !pc_features))
        return bs_error(BS_ERR_INTERNAL, "%s: append_spikes: missing array (times, templates, amplitudes%s)",
                        w->dir, w->h.n_pc > 0 ? ", pc_features" : "");
    /* Check the whole block before writing any of it. */
    int64_t prev = w->last_time;
    for (int64_t i = 0; i < n; i++) {
        if (times[i] < prev)
            return bs_error(BS_ERR_INTERNAL,
                            "%s: spike_times must be non-decreasing: spike %" PRId64 " at sample %" PRId64
                            " comes after sample %" PRId64,
                            w->dir, w->n_spikes + i, times[i], prev);
        if (times[i] < 0 || (w->h.n_samples > 0 && times[i] >= w->h.n_samples))
            return bs_error(BS_ERR_INTERNAL,
                            "%s: spike %" PRId64 " at sample %" PRId64 " is outside the recording [0, %" PRId64 ")",
                            w->dir, w->n_spikes + i, times[i], w->h.n_samples);
        if (templates[i] < 0 || templates[i] >= w->h.n_templates)
            return bs_error(BS_ERR_INTERNAL, "%s: spike %" PRId64 " has template id %d, expected 0..%d", w->dir,
                            w->n_spikes + i, templates[i], w->h.n_templates - 1);
        if (clusters && clusters[i] < 0)
            return bs_error(BS_ERR_INTERNAL, "%s: spike %" PRId64 " has negative cluster id %d", w->dir,
                            w->n_spikes + i, clusters[i]);
        prev = times[i];
    }
    const int32_t *cl = clusters ? clusters : templates;
    for (int64_t i = 0; i < n; i++)
        if (i == 0 || cl[i] != cl[i - 1])
            BS_TRY(mark_present(w, cl[i]));
    bs_status st = bs_npy_writer_append(&w->s[S_TIMES], times, n);
    if (st == BS_OK)
        st = bs_npy_writer_append(&w->s[S_TEMPLATES], templates, n);
    if (st == BS_OK)
        st = bs_npy_writer_append(&w->s[S_CLUSTERS], cl, n);
    if (st == BS_OK)
        st = bs_npy_writer_append(&w->s[S_AMPS], amplitudes, n);
    if (st == BS_OK && w->h.n_pc > 0)
        st = bs_npy_writer_append(&w->s[S_PCF], pc_features, n);
    if (st != BS_OK) {
        w->failed = 1;
        return st;
    }
    w->n_spikes += n;
    w->last_time = prev;
    return BS_OK;
}

bs_status bs_phy_writer_append_positions(bs_phy_writer *w, int64_t n, const float *xy_um)
{
    if (n <= 0)
        return BS_OK;
    if (w->n_pos_rows + n > w->n_spikes)
        return bs_error(BS_ERR_INTERNAL, "%s: %" PRId64 " spike positions appended for %" PRId64 " spikes", w->dir,
                        w->n_pos_rows + n, w->n_spikes);
    if (!w->open[S_POS]) {
        char path[4200];
        int64_t row[1] = {2};
        BS_TRY(join(w, stream_names[S_POS], path, sizeof path));
        BS_TRY(bs_npy_writer_open(&w->s[S_POS], path, BS_NPY_F32, 2, row));
        w->open[S_POS] = 1;
    }
    if (bs_npy_writer_append(&w->s[S_POS], xy_um, n) != BS_OK) {
        w->failed = 1;
        return bs_error(BS_ERR_IO, "%s: cannot write spike_positions.npy", w->dir);
    }
    w->n_pos_rows += n;
    return BS_OK;
}

bs_status bs_phy_writer_set_template_feature_ind(bs_phy_writer *w, int n_tf, const int32_t *ind)
{
    int64_t T = w->h.n_templates;
    if (w->n_tf || w->n_spikes)
        return bs_error(BS_ERR_INTERNAL, "%s: template_feature_ind is set once, before the first spike", w->dir);
    if (n_tf < 1 || n_tf > T || n_tf > 4096 || !ind)
        return bs_error(BS_ERR_INTERNAL, "%s: %d template features per spike for %" PRId64 " templates (1..%s)",
                        w->dir, n_tf, T, "min(templates, 4096)");
    for (int64_t k = 0; k < T; k++)
        for (int a = 0; a < n_tf; a++) {
            int32_t v = ind[k * n_tf + a];
            int dup = 0;
            for (int b = 0; b < a; b++)
                dup |= ind[k * n_tf + b] == v;
            if (v < 0 || v >= T || dup)
                return bs_error(BS_ERR_INTERNAL,
                                "%s: template_feature_ind row %" PRId64 " has %d at %d (ids must be distinct, "
                                "0..%" PRId64 ")",
                                w->dir, k, v, a, T - 1);
        }
    char path[4200];
    int64_t row[1] = {n_tf};
    for (int i = S_TF; i <= S_TFIND; i++) {
        BS_TRY(join(w, stream_names[i], path, sizeof path));
        BS_TRY(bs_npy_writer_open(&w->s[i], path, i == S_TF ? BS_NPY_F32 : BS_NPY_U32, 2, row));
        w->open[i] = 1;
    }
    w->n_tf = n_tf;
    /* uint32, as Kilosort writes it (values checked above), a block of rows at a time */
    uint32_t buf[4096];
    int64_t rows_per = (int64_t)(sizeof buf / sizeof buf[0]) / n_tf;
    for (int64_t k0 = 0; k0 < T; k0 += rows_per) {
        int64_t c = T - k0 < rows_per ? T - k0 : rows_per;
        for (int64_t q = 0; q < c * n_tf; q++)
            buf[q] = (uint32_t)ind[k0 * n_tf + q];
        if (bs_npy_writer_append(&w->s[S_TFIND], buf, c) != BS_OK) {
            w->failed = 1;
            return bs_error(BS_ERR_IO, "%s: cannot write %s", w->dir, BS_PHY_TEMPLATE_FEATURE_IND);
        }
    }
    return BS_OK;
}

bs_status bs_phy_writer_append_template_features(bs_phy_writer *w, int64_t n, const float *features)
{
    if (n <= 0)
        return BS_OK;
    if (!w->n_tf || w->n_tf_rows + n > w->n_spikes)
        return bs_error(BS_ERR_INTERNAL, "%s: %" PRId64 " template feature rows for %" PRId64 " spikes%s", w->dir,
                        w->n_tf_rows + n, w->n_spikes, w->n_tf ? "" : " before template_feature_ind");
    if (bs_npy_writer_append(&w->s[S_TF], features, n) != BS_OK) {
        w->failed = 1;
        return bs_error(BS_ERR_IO, "%s: cannot write %s", w->dir, BS_PHY_TEMPLATE_FEATURES);
    }
    w->n_tf_rows += n;
    return BS_OK;
}

bs_status bs_phy_writer_append_templates(bs_phy_writer *w, int64_t n, const float *templates,
                                         const int32_t *pc_feature_ind)
{
    if (n <= 0)
        return BS_OK;
    if (w->n_tpl_rows + n > w->h.n_templates)
        return bs_error(BS_ERR_INTERNAL, "%s: %" PRId64 " templates appended, the header says %d", w->dir,
                        w->n_tpl_rows + n, w->h.n_templates);
    if (!templates || (w->h.n_pc > 0 && !pc_feature_ind))
        return bs_error(BS_ERR_INTERNAL, "%s: append_templates: missing array", w->dir);
    int64_t len = (int64_t)w->h.nt * w->h.n_chan;
    if (w->h.n_pc > 0)
        for (int64_t i = 0; i < n * w->h.n_pc_chan; i++)
            if (pc_feature_ind[i] < 0 || pc_feature_ind[i] >= w->h.n_chan)
                return bs_error(BS_ERR_INTERNAL, "%s: pc_feature_ind of template %" PRId64 " is %d, expected 0..%d",
                                w->dir, w->n_tpl_rows + i / w->h.n_pc_chan, pc_feature_ind[i], w->h.n_chan - 1);
    for (int64_t t = 0; t < n; t++) {
        double s = 0;
        for (int64_t k = 0; k < len; k++)
            s += (double)templates[t * len + k] * templates[t * len + k];
        w->tpl_norm[w->n_tpl_rows + t] = sqrt(s);
    }
    if (bs_npy_writer_append(&w->s[S_TPL], templates, n) != BS_OK) {
        w->failed = 1;
        return BS_ERR_INPUT;
    }
    if (w->h.n_pc > 0) {
        /* int32 -> uint32 (KS4 writes uint32); values were checked to be in [0, n_chan) above */
        size_t cnt = (size_t)n * (size_t)w->h.n_pc_chan;
        uint32_t *tmp = bs_mem_alloc("export/pc_feature_ind", cnt * sizeof(uint32_t));
        if (!tmp)
            return BS_ERR_MEMORY;
        for (size_t k = 0; k < cnt; k++)
            tmp[k] = (uint32_t)pc_feature_ind[k];
        bs_status st = bs_npy_writer_append(&w->s[S_PCIND], tmp, n);
        bs_mem_free(tmp);
        if (st != BS_OK) {
            w->failed = 1;
            return st;
        }
    }
    w->n_tpl_rows += n;
    return BS_OK;
}

bs_status bs_phy_writer_append_similar(bs_phy_writer *w, int64_t n, const float *rows)
{
    if (n <= 0)
        return BS_OK;
    if (w->n_sim_rows + n > w->h.n_templates)
        return bs_error(BS_ERR_INTERNAL, "%s: %" PRId64 " similar_templates rows appended, expected %d", w->dir,
                        w->n_sim_rows + n, w->h.n_templates);
    if (!w->open[S_SIM]) {
        char path[4200];
        int64_t row[1] = {w->h.n_templates};
        BS_TRY(join(w, stream_names[S_SIM], path, sizeof path));
        BS_TRY(bs_npy_writer_open(&w->s[S_SIM], path, BS_NPY_F32, 2, row));
        w->open[S_SIM] = 1;
    }
    if (bs_npy_writer_append(&w->s[S_SIM], rows, n) != BS_OK) {
        w->failed = 1;
        return BS_ERR_INPUT;
    }
    w->n_sim_rows += n;
    return BS_OK;
}

static void *dup_block(const char *tag, const void *src, size_t bytes)
{
    void *p = bs_mem_alloc(tag, bytes);
    if (p)
        memcpy(p, src, bytes);
    return p;
}

bs_status bs_phy_writer_set_channels(bs_phy_writer *w, const int32_t *channel_map, const float *positions_um,
                                     const int32_t *shanks)
{
    int C = w->h.n_chan;
    if (!channel_map || !positions_um)
        return bs_error(BS_ERR_INTERNAL, "%s: set_channels needs a channel map and positions", w->dir);
    for (int c = 0; c < C; c++) {
        if (channel_map[c] < 0 || channel_map[c] >= w->h.n_channels_dat)
            return bs_error(BS_ERR_INTERNAL, "%s: channel_map[%d] = %d, expected 0..%d (n_channels_dat - 1)", w->dir,
                            c, channel_map[c], w->h.n_channels_dat - 1);
        if (!isfinite(positions_um[2 * c]) || !isfinite(positions_um[2 * c + 1]))
            return bs_error(BS_ERR_INTERNAL, "%s: channel %d has a non-finite position", w->dir, c);
        if (shanks && shanks[c] < 0)
            return bs_error(BS_ERR_INTERNAL, "%s: channel %d has shank %d, expected >= 0", w->dir, c, shanks[c]);
    }
    bs_mem_free(w->chan_map);
    bs_mem_free(w->positions);
    bs_mem_free(w->shanks);
    w->chan_map = dup_block("export/channel_map", channel_map, (size_t)C * sizeof(int32_t));
    w->positions = dup_block("export/channel_positions", positions_um, (size_t)C * 2 * sizeof(float));
    w->shanks = bs_mem_calloc("export/channel_shanks", (size_t)C, sizeof(int32_t));
    if (!w->chan_map || !w->positions || !w->shanks)
        return BS_ERR_MEMORY;
    if (shanks)
        memcpy(w->shanks, shanks, (size_t)C * sizeof(int32_t));
    return BS_OK;
}

bs_status bs_phy_writer_set_probe(bs_phy_writer *w, const bs_probe *p)
{
    int C = w->h.n_chan;
    if (p->n_chan != C)
        return bs_error(BS_ERR_INTERNAL, "%s: probe has %d channels, the Phy header says %d", w->dir, p->n_chan, C);
    int32_t *map = bs_mem_alloc("export/probe_copy", (size_t)C * sizeof(int32_t));
    int32_t *sh = bs_mem_alloc("export/probe_copy", (size_t)C * sizeof(int32_t));
    float *pos = bs_mem_alloc("export/probe_copy", (size_t)C * 2 * sizeof(float));
    bs_status st = BS_ERR_MEMORY;
    if (map && sh && pos) {
        for (int c = 0; c < C; c++) {
            map[c] = p->column[c];
            sh[c] = p->shank ? p->shank[c] : 0;
            pos[2 * c] = (float)p->x_um[c];
            pos[2 * c + 1] = (float)p->y_um[c];
        }
        st = bs_phy_writer_set_channels(w, map, pos, sh);
    }
    bs_mem_free(map);
    bs_mem_free(sh);
    bs_mem_free(pos);
    return st;
}

/* Gauss-Jordan inversion with partial pivoting, in double. */
static bs_status invert(const float *a, int n, float *out, const char *dir)
{
    size_t nn = (size_t)n;
    double *m = bs_mem_alloc("export/whitening_inverse", nn * 2 * nn * sizeof(double));
    if (!m)
        return BS_ERR_MEMORY;
    for (size_t i = 0; i < nn; i++)
        for (size_t j = 0; j < 2 * nn; j++)
            m[i * 2 * nn + j] = j < nn ? a[i * nn + j] : (j - nn == i ? 1.0 : 0.0);
    double scale = 0;
    for (size_t i = 0; i < nn * nn; i++)
        scale = fmax(scale, fabs(a[i]));
    for (size_t col = 0; col < nn; col++) {
        size_t piv = col;
        for (size_t r = col + 1; r < nn; r++)
            if (fabs(m[r * 2 * nn + col]) > fabs(m[piv * 2 * nn + col]))
                piv = r;
        double p = m[piv * 2 * nn + col];
        if (!(fabs(p) > 1e-12 * (scale > 0 ? scale : 1))) {
            bs_mem_free(m);
            return bs_error(BS_ERR_INTERNAL, "%s: whitening matrix is singular (column %zu)", dir, col);
        }
        if (piv != col)
            for (size_t j = 0; j < 2 * nn; j++) {
                double t = m[col * 2 * nn + j];
                m[col * 2 * nn + j] = m[piv * 2 * nn + j];
                m[piv * 2 * nn + j] = t;
            }
        for (size_t j = 0; j < 2 * nn; j++)
            m[col * 2 * nn + j] /= p;
        for (size_t r = 0; r < nn; r++) {
            if (r == col)
                continue;
            double f = m[r * 2 * nn + col];
            if (f != 0)
                for (size_t j = 0; j < 2 * nn; j++)
                    m[r * 2 * nn + j] -= f * m[col * 2 * nn + j];
        }
    }
    for (size_t i = 0; i < nn; i++)
        for (size_t j = 0; j < nn; j++)
            out[i * nn + j] = (float)m[i * 2 * nn + nn + j];
    bs_mem_free(m);
    return BS_OK;
}

bs_status bs_phy_writer_set_whitening(bs_phy_writer *w, const float *wmat, const float *wmat_inv)
{
    size_t bytes = (size_t)w->h.n_chan * (size_t)w->h.n_chan * sizeof(float);
    if (!wmat)
        return bs_error(BS_ERR_INTERNAL, "%s: set_whitening needs the whitening matrix", w->dir);
    bs_mem_free(w->wmat);
    bs_mem_free(w->wmat_inv);
    w->wmat_inv = NULL;
    w->wmat = dup_block("export/whitening", wmat, bytes);
    if (!w->wmat)
        return BS_ERR_MEMORY;
    if (wmat_inv) {
        w->wmat_inv = dup_block("export/whitening", wmat_inv, bytes);
        return w->wmat_inv ? BS_OK : BS_ERR_MEMORY;
    }
    w->wmat_inv = bs_mem_alloc("export/whitening", bytes);
    if (!w->wmat_inv)
        return BS_ERR_MEMORY;
    return invert(wmat, w->h.n_chan, w->wmat_inv, w->dir);
}

static int cmp_cluster(const void *a, const void *b)
{
    int32_t x = ((const bs_phy_cluster *)a)->id, y = ((const bs_phy_cluster *)b)->id;
    return (x > y) - (x < y);
}

bs_status bs_phy_writer_set_clusters(bs_phy_writer *w, int n, const bs_phy_cluster *rows)
{
    free(w->clusters);
    free(w->cl_strings);
    w->clusters = NULL;
    w->cl_strings = NULL;
    w->n_clusters = 0;
    if (n <= 0)
        return BS_OK;
    w->clusters = malloc((size_t)n * sizeof *w->clusters);
    w->cl_strings = calloc((size_t)n, sizeof *w->cl_strings);
    if (!w->clusters || !w->cl_strings)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory for %d cluster rows", w->dir, n);
    for (int i = 0; i < n; i++) {
        const bs_phy_cluster *r = &rows[i];
        if (r->id < 0)
            return bs_error(BS_ERR_INTERNAL, "%s: cluster row %d has id %d, expected >= 0", w->dir, i, r->id);
        const char *strs[2] = {r->group, r->ks_label};
        for (int k = 0; k < 2; k++) {
            if (!strs[k])
                continue;
            if (strlen(strs[k]) >= sizeof w->cl_strings[i][k] || strpbrk(strs[k], "\t\r\n,"))
                return bs_error(BS_ERR_INTERNAL, "%s: cluster %d: %s '%s' must be a short word without tabs or commas",
                                w->dir, r->id, k ? "KSLabel" : "group", strs[k]);
            snprintf(w->cl_strings[i][k], sizeof w->cl_strings[i][k], "%s", strs[k]);
        }
        w->clusters[i] = *r;
        w->clusters[i].group = r->group ? w->cl_strings[i][0] : NULL;
        w->clusters[i].ks_label = r->ks_label ? w->cl_strings[i][1] : NULL;
    }
    w->n_clusters = n;
    /* Sort by id; the string pointers point into cl_strings, which stays put. */
    qsort(w->clusters, (size_t)n, sizeof *w->clusters, cmp_cluster);
    const bs_phy_cluster *sorted = w->clusters;
    for (int i = 1; i < n; i++)
        if (sorted[i].id == sorted[i - 1].id)
            return bs_error(BS_ERR_INTERNAL, "%s: cluster id %d is described twice", w->dir, sorted[i].id);
    return BS_OK;
}

/* ---- close ---------------------------------------------------------------- */

static bs_status note_committed(bs_phy_writer *w, const char *path)
{
    if (w->n_committed >= MAX_COMMITTED)
        return bs_error(BS_ERR_INTERNAL, "%s: too many files committed", w->dir);
    snprintf(w->committed[w->n_committed++], sizeof w->committed[0], "%s", path);
    return BS_OK;
}

static bs_status save_npy(bs_phy_writer *w, const char *name, bs_npy_dtype dt, int ndim, const int64_t *shape,
                          const void *data)
{
    char path[4200];
    BS_TRY(join(w, name, path, sizeof path));
    BS_TRY(bs_npy_save(path, dt, ndim, shape, data));
    return note_committed(w, path);
}

/* Rows of similar_templates computed per block (at most 32 MiB of block). */
static int64_t similarity_block(int64_t T, size_t tbytes)
{
    int64_t B = (int64_t)((32u << 20) / (tbytes + (size_t)T * sizeof(float)));
    return B < 1 ? 1 : (B > T ? T : B);
}

size_t bs_phy_folder_bytes(int64_t S, int64_t T, int nt, int C, int n_pc, int n_pc_chan, int n_tf)
{
    size_t per_spike = sizeof(int64_t) + 2 * sizeof(int32_t) + sizeof(float) + 2 * sizeof(float) +
                       ((size_t)n_pc * (size_t)n_pc_chan + (size_t)n_tf) * sizeof(float);
    size_t per_template = ((size_t)nt * (size_t)C + (size_t)C + (size_t)T + (size_t)n_pc_chan + (size_t)n_tf) *
                              sizeof(float) +
                          4 * 32; /* dense template, channel index, similarity row, pc channels, template-feature
                                     row; 4 table rows */
    size_t per_channel = 2 * sizeof(int32_t) + 2 * sizeof(float) + 2 * (size_t)C * sizeof(float);
    return (size_t)S * per_spike + (size_t)T * per_template + (size_t)C * per_channel + (S_COUNT + 12) * 4096;
}

size_t bs_phy_writer_bytes(int n_templates, int nt, int n_chan)
{
    size_t C = (size_t)n_chan, T = (size_t)n_templates, tbytes = (size_t)nt * C * sizeof(float);
    size_t B = (size_t)similarity_block((int64_t)T, tbytes);
    return (B + 1) * tbytes + B * T * sizeof(float) /* similarity blocks */
           + (T + 1) * ((C + 63) / 64) * sizeof(uint64_t) + C * sizeof(int32_t) /* channel masks */
           + B * (C * sizeof(int32_t) + sizeof(int64_t) + sizeof(int)) /* the block's channel lists */
           + (T + 1) * (sizeof(double) + 1)          /* template norms, cluster presence */
           + 2 * C * C * sizeof(float)               /* whitening matrices */
           + C * (2 * sizeof(int32_t) + 2 * sizeof(float) + 64) + T * 64 + ((size_t)64 << 10);
}

/* Bits of mask (C bits): the channels where a dense template (nt x C,
 * sample-major) has a non-zero value. */
static void template_channels(const float *tpl, int nt, int C, uint64_t *mask)
{
    memset(mask, 0, sizeof(uint64_t) * (size_t)((C + 63) / 64));
    for (int s = 0; s < nt; s++)
        for (int c = 0; c < C; c++)
            if (tpl[(size_t)s * C + c] != 0.0f)
                mask[c / 64] |= (uint64_t)1 << (c % 64);
}

static int masks_meet(const uint64_t *a, const uint64_t *b, int words)
{
    uint64_t any = 0;
    for (int q = 0; q < words; q++)
        any |= a[q] & b[q];
    return any != 0;
}

/* Template i of a block, compacted: its n channels (list, ascending) in
 * nt x n floats, moved forward within the block buffer (a value never moves
 * past one still to be read), so a block of channel-sparse templates stays
 * in cache. */
static void compact_template(float *blk, int64_t from, int64_t to, int nt, int C, const int32_t *list, int n)
{
    for (int s = 0; s < nt; s++)
        for (int q = 0; q < n; q++)
            blk[to + (int64_t)s * n + q] = blk[from + (int64_t)s * C + list[q]];
}

/* Σ_k a[k] b[k] over the dense layout, k ascending, in double, with a
 * compacted (a: nt x na over the channels la) and b dense: only the channels
 * both masks hold are visited (the other terms are products with a zero
 * factor, and adding ±0 to the sum from +0 changes nothing), so the result
 * is the bits of the full sum at a fraction of the cost. */
static double shared_dot(const float *a, const int32_t *la, int na, const float *b, const uint64_t *mb, int nt,
                         int C, int32_t *sq)
{
    int n = 0;
    for (int q = 0; q < na; q++)
        if (mb[la[q] / 64] >> (la[q] % 64) & 1)
            sq[n++] = q;
    double d = 0;
    for (int s = 0; s < nt; s++) {
        const float *ra = a + (size_t)s * na, *rb = b + (size_t)s * C;
        for (int q = 0; q < n; q++)
            d += (double)ra[sq[q]] * rb[la[sq[q]]];
    }
    return d;
}

/* similar_templates from the templates already streamed to disk. One pass
 * notes each template's channels (a C-bit mask); then rows in blocks of B
 * templates (compacted to their channels), each block compared with every
 * template that shares a channel with one of the block's, read back one at a
 * time (the others' cosines are exactly 0, as channel-sparse templates
 * mostly are to each other), over the channels the two share (shared_dot).
 * Memory: (B + 1) templates, B rows and channel lists, T masks. */
static bs_status compute_similarity(bs_phy_writer *w)
{
    int64_t T = w->h.n_templates, len = (int64_t)w->h.nt * w->h.n_chan;
    char path[4200];
    int64_t row[1] = {T};
    BS_TRY(join(w, stream_names[S_SIM], path, sizeof path));
    BS_TRY(bs_npy_writer_open(&w->s[S_SIM], path, BS_NPY_F32, 2, row));
    w->open[S_SIM] = 1;
    if (T == 0)
        return BS_OK;
    bs_npy_writer *tw = &w->s[S_TPL];
    if (fflush(tw->file.fp) != 0)
        return bs_error(BS_ERR_IO, "%s: write failed: %s", tw->file.path, strerror(errno));
    const int C = w->h.n_chan, nt = w->h.nt, words = (C + 63) / 64;
    size_t tbytes = (size_t)len * sizeof(float);
    int64_t B = similarity_block(T, tbytes);
    float *blk = bs_mem_alloc("export/similarity", (size_t)B * tbytes);
    float *one = bs_mem_alloc("export/similarity", tbytes);
    float *out = bs_mem_alloc("export/similarity", (size_t)B * (size_t)T * sizeof(float));
    uint64_t *masks = bs_mem_alloc("export/similarity", sizeof(uint64_t) * (size_t)(T + 1) * (size_t)words);
    int32_t *shared = bs_mem_alloc("export/similarity", sizeof(int32_t) * (size_t)C);
    int32_t *lists = bs_mem_alloc("export/similarity", sizeof(int32_t) * (size_t)B * (size_t)C);
    int64_t *at = bs_mem_alloc("export/similarity", sizeof(int64_t) * (size_t)B);
    int *n_list = bs_mem_alloc("export/similarity", sizeof(int) * (size_t)B);
    FILE *fp = fopen(tw->file.tmp_path, "rb");
    bs_status st = BS_OK;
    if (!blk || !one || !out || !masks || !shared || !lists || !at || !n_list)
        st = BS_ERR_MEMORY;
    else if (!fp)
        st = bs_error(BS_ERR_INPUT, "%s: cannot read back: %s", tw->file.tmp_path, strerror(errno));
    if (st == BS_OK && fseeko(fp, (off_t)tw->header_bytes, SEEK_SET) != 0)
        st = bs_error(BS_ERR_INPUT, "%s: read back failed", tw->file.tmp_path);
    for (int64_t j = 0; st == BS_OK && j < T; j++) {
        if (fread(one, tbytes, 1, fp) != 1)
            st = bs_error(BS_ERR_INPUT, "%s: read back failed", tw->file.tmp_path);
        else
            template_channels(one, nt, C, masks + (size_t)j * words);
    }
    uint64_t *bor = masks + (size_t)T * words; /* the channels of the block's templates */
    for (int64_t i0 = 0; st == BS_OK && i0 < T; i0 += B) {
        int64_t nb = T - i0 < B ? T - i0 : B;
        if (fseeko(fp, (off_t)(tw->header_bytes + (size_t)i0 * tbytes), SEEK_SET) != 0 ||
            fread(blk, tbytes, (size_t)nb, fp) != (size_t)nb) {
            st = bs_error(BS_ERR_INPUT, "%s: read back failed", tw->file.tmp_path);
            break;
        }
        memset(bor, 0, sizeof(uint64_t) * (size_t)words);
        int64_t to = 0;
        for (int64_t i = 0; i < nb; i++) {
            const uint64_t *mi = masks + (size_t)(i0 + i) * words;
            int32_t *li = lists + (size_t)i * C;
            int n = 0;
            for (int c = 0; c < C; c++)
                if (mi[c / 64] >> (c % 64) & 1)
                    li[n++] = c;
            for (int q = 0; q < words; q++)
                bor[q] |= mi[q];
            compact_template(blk, i * len, to, nt, C, li, n);
            n_list[i] = n;
            at[i] = to;
            to += (int64_t)nt * n;
        }
        int64_t next = -1; /* the template the file is positioned at */
        for (int64_t j = 0; j < T; j++) {
            const uint64_t *mj = masks + (size_t)j * words;
            if (!masks_meet(mj, bor, words)) {
                for (int64_t i = 0; i < nb; i++)
                    out[i * T + j] = 0.0f;
                continue;
            }
            if ((next != j && fseeko(fp, (off_t)(tw->header_bytes + (size_t)j * tbytes), SEEK_SET) != 0) ||
                fread(one, tbytes, 1, fp) != 1) {
                st = bs_error(BS_ERR_INPUT, "%s: read back failed", tw->file.tmp_path);
                break;
            }
            next = j + 1;
            for (int64_t i = 0; i < nb; i++) {
                const uint64_t *mi = masks + (size_t)(i0 + i) * words;
                double ni = w->tpl_norm[i0 + i], nj = w->tpl_norm[j], d = 0;
                if (ni > 0 && nj > 0) {
                    if (masks_meet(mi, mj, words))
                        d = shared_dot(blk + at[i], lists + (size_t)i * C, n_list[i], one, mj, nt, C, shared);
                    d /= ni * nj;
                }
                out[i * T + j] = (float)d;
            }
        }
        if (st == BS_OK)
            st = bs_npy_writer_append(&w->s[S_SIM], out, nb);
    }
    if (fp)
        fclose(fp);
    bs_mem_free(blk);
    bs_mem_free(one);
    bs_mem_free(out);
    bs_mem_free(masks);
    bs_mem_free(shared);
    bs_mem_free(lists);
    bs_mem_free(at);
    bs_mem_free(n_list);
    return st;
}

void bs_phy_cosine_similarity(const float *templates, int n, int64_t len, float *out)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double d = 0, ni = 0, nj = 0;
            const float *a = templates + (int64_t)i * len, *b = templates + (int64_t)j * len;
            for (int64_t k = 0; k < len; k++) {
                d += (double)a[k] * b[k];
                ni += (double)a[k] * a[k];
                nj += (double)b[k] * b[k];
            }
            out[(int64_t)i * n + j] = (ni > 0 && nj > 0) ? (float)(d / (sqrt(ni) * sqrt(nj))) : 0.0f;
        }
}

/* Python string literal for params.py: '...' with \ and ' escaped; UTF-8
 * bytes are written as they are (Python reads source files as UTF-8). */
static void py_string(FILE *fp, const char *s)
{
    fputc('\'', fp);
    for (; *s; s++) {
        if (*s == '\\' || *s == '\'')
            fputc('\\', fp);
        fputc(*s, fp);
    }
    fputc('\'', fp);
}

/* 1 when the params.py line assigns `key` ("key = ..."). */
static int is_key(const char *line, const char *key)
{
    size_t n = strlen(key);
    if (strncmp(line, key, n) != 0)
        return 0;
    line += n;
    line += strspn(line, " ");
    return *line == '=';
}

bs_status bs_phy_set_raw_data(const char *dir, const char *dat_path, int n_channels_dat, const char *dtype,
                              uint64_t offset, int hp_filtered)
{
    static const char *const keys[5] = {"dat_path", "n_channels_dat", "dtype", "offset", "hp_filtered"};
    char path[4200], *text = NULL;
    size_t len = 0;
    BS_TRY(bs_path_join(path, sizeof path, dir, BS_PHY_PARAMS));
    BS_TRY(bs_read_text_file(path, (size_t)1 << 20, &text, &len));
    bs_atomic_file f;
    bs_status st = bs_atomic_open(&f, path);
    int found = 0;
    for (char *line = text, *next; st == BS_OK && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        int k = 0;
        while (k < 5 && !is_key(line, keys[k]))
            k++;
        if (k == 5) {
            fprintf(f.fp, "%s\n", line);
            continue;
        }
        found |= 1 << k;
        fprintf(f.fp, "%s = ", keys[k]);
        if (k == 0)
            py_string(f.fp, dat_path);
        else if (k == 1)
            fprintf(f.fp, "%d", n_channels_dat);
        else if (k == 2)
            fprintf(f.fp, "'%s'", dtype);
        else if (k == 3)
            fprintf(f.fp, "%" PRIu64, offset);
        else
            fprintf(f.fp, "%s", hp_filtered ? "True" : "False");
        fputc('\n', f.fp);
    }
    if (st == BS_OK && !(found & 16)) /* a params.py written without it (phylib's default: False) */
        fprintf(f.fp, "hp_filtered = %s\n", hp_filtered ? "True" : "False");
    free(text);
    if (st != BS_OK)
        return st;
    if ((found & 15) != 15) {
        bs_atomic_abort(&f);
        return bs_error(BS_ERR_INPUT, "%s: expected the lines dat_path, n_channels_dat, dtype and offset", path);
    }
    return bs_atomic_commit(&f);
}

static bs_status write_params(bs_phy_writer *w)
{
    char path[4200];
    BS_TRY(join(w, BS_PHY_PARAMS, path, sizeof path));
    bs_atomic_file f;
    BS_TRY(bs_atomic_open(&f, path));
    /* phylib resolves a relative dat_path against the folder: say so when it is not there */
    if (w->dat_path[0]) {
        char raw[8400];
        struct stat sb;
        if (w->dat_path[0] == '/')
            snprintf(raw, sizeof raw, "%s", w->dat_path);
        else
            snprintf(raw, sizeof raw, "%s/%s", w->dir, w->dat_path);
        if (stat(raw, &sb) != 0)
            bs_log_warn("%s: params.py: dat_path %s does not exist (a relative path is relative to the Phy "
                        "folder); Phy will show no traces",
                        w->dir, raw);
    }
    fprintf(f.fp, "dat_path = ");
    if (w->dat_path[0])
        py_string(f.fp, w->dat_path);
    else
        fprintf(f.fp, "[]");
    /* %.17g round-trips a double; make sure Python sees a float */
    char rate[64];
    snprintf(rate, sizeof rate, "%.17g", w->h.sample_rate_hz);
    if (!strpbrk(rate, ".eEn"))
        strcat(rate, ".0");
    fprintf(f.fp, "\nn_channels_dat = %d\ndtype = '%s'\noffset = %" PRIu64 "\nsample_rate = %s\nhp_filtered = %s\n",
            w->h.n_channels_dat, w->dtype, w->h.offset_bytes, rate, w->h.hp_filtered ? "True" : "False");
    BS_TRY(bs_atomic_commit(&f));
    return note_committed(w, path);
}

/* Next id in the union of clusters with spikes and clusters described; -1 when done. */
static int64_t next_cluster(const bs_phy_writer *w, int64_t *pi, int *ci)
{
    while (*pi < w->present_cap && !w->present[*pi])
        (*pi)++;
    int64_t a = *pi < w->present_cap ? *pi : INT64_MAX;
    int64_t b = *ci < w->n_clusters ? w->clusters[*ci].id : INT64_MAX;
    int64_t id = a < b ? a : b;
    if (id == INT64_MAX)
        return -1;
    if (a == id)
        (*pi)++;
    return id;
}

static bs_status write_tsvs(bs_phy_writer *w)
{
    static const char *const files[4] = {BS_PHY_CLUSTER_GROUP, BS_PHY_CLUSTER_KSLABEL, BS_PHY_CLUSTER_AMPLITUDE,
                                         BS_PHY_CLUSTER_CONTAMPCT};
    static const char *const fields[4] = {"group", "KSLabel", "Amplitude", "ContamPct"};
    int64_t n_rows = 0, n_unknown = 0;
    for (int f = 0; f < 4; f++) {
        char path[4200];
        BS_TRY(join(w, files[f], path, sizeof path));
        bs_atomic_file af;
        BS_TRY(bs_atomic_open(&af, path));
        fprintf(af.fp, "cluster_id\t%s\n", fields[f]);
        int64_t pi = 0;
        int ci = 0;
        int64_t id;
        n_rows = n_unknown = 0;
        while ((id = next_cluster(w, &pi, &ci)) >= 0) {
            const bs_phy_cluster *r = NULL;
            if (ci < w->n_clusters && w->clusters[ci].id == id)
                r = &w->clusters[ci++];
            n_rows++;
            n_unknown += r == NULL;
            fprintf(af.fp, "%" PRId64 "\t", id);
            switch (f) {
            case 0: fprintf(af.fp, "%s", r && r->group ? r->group : "unsorted"); break;
            case 1: fprintf(af.fp, "%s", r && r->ks_label ? r->ks_label : ""); break;
            case 2:
                if (r && isfinite(r->amplitude))
                    fprintf(af.fp, "%.1f", r->amplitude);
                break;
            default:
                if (r && isfinite(r->contam_pct))
                    fprintf(af.fp, "%.1f", r->contam_pct);
                break;
            }
            fputc('\n', af.fp);
        }
        BS_TRY(bs_atomic_commit(&af));
        BS_TRY(note_committed(w, path));
    }
    if (n_unknown)
        bs_log_warn("%s: %" PRId64 " of %" PRId64 " clusters have no labels or metrics; their cells are empty",
                    w->dir, n_unknown, n_rows);
    return BS_OK;
}

/* 1 if this writer committed dir/name. */
static int committed_here(const bs_phy_writer *w, const char *path)
{
    for (int i = 0; i < w->n_committed; i++)
        if (strcmp(w->committed[i], path) == 0)
            return 1;
    return 0;
}

/* Files an earlier export (ours, Kilosort's, SpikeInterface's, Phy's) may
 * have left that would contradict this one: template_ind.npy makes phylib
 * read templates as sparse, SpikeInterface reads cluster_info.tsv instead of
 * our tables, per-spike extras have the old spike count, and .phy/ caches
 * the old clusters. */
static bs_status remove_stale(bs_phy_writer *w)
{
    static const char *const stale[] = {
        "template_ind.npy", "cluster_info.tsv", "pc_feature_spike_ids.npy", BS_PHY_TEMPLATE_FEATURES,
        BS_PHY_TEMPLATE_FEATURE_IND, "template_feature_spike_ids.npy", BS_PHY_SPIKE_POSITIONS, "spike_detection_templates.npy",
        "_phy_spikes_subset.waveforms.npy", "_phy_spikes_subset.channels.npy", "_phy_spikes_subset.spikes.npy",
        BS_PHY_PC_FEATURES, BS_PHY_PC_FEATURE_IND};
    size_t n = sizeof stale / sizeof stale[0] - (w->h.n_pc > 0 ? 2 : 0);
    char path[4200];
    for (size_t k = 0; k < n; k++) {
        BS_TRY(join(w, stale[k], path, sizeof path));
        if (committed_here(w, path))
            continue;
        if (remove(path) == 0)
            bs_log_info("%s: removed %s left by an earlier export", w->dir, stale[k]);
        else if (errno != ENOENT)
            return bs_error(BS_ERR_INPUT, "%s: cannot remove a stale file: %s", path, strerror(errno));
    }
    BS_TRY(join(w, ".phy", path, sizeof path));
    if (bs_remove_tree(path) != 0)
        return bs_error(BS_ERR_INPUT, "%s: cannot remove Phy's stale cache: %s", path, strerror(errno));
    return BS_OK;
}

static bs_status close_body(bs_phy_writer *w)
{
    int C = w->h.n_chan;
    int64_t T = w->h.n_templates;
    if (w->failed)
        return bs_error(BS_ERR_IO, "%s: an earlier streamed write failed; the folder is not written", w->dir);
    if (w->n_tpl_rows != T)
        return bs_error(BS_ERR_INTERNAL, "%s: %" PRId64 " templates were appended, the header says %" PRId64, w->dir,
                        w->n_tpl_rows, T);
    if (w->n_sim_rows != 0 && w->n_sim_rows != T)
        return bs_error(BS_ERR_INTERNAL, "%s: %" PRId64 " similar_templates rows were appended, expected %" PRId64,
                        w->dir, w->n_sim_rows, T);
    if (!w->chan_map)
        return bs_error(BS_ERR_INTERNAL, "%s: the channel map and positions were never set", w->dir);
    if (w->open[S_POS] && w->n_pos_rows != w->n_spikes)
        return bs_error(BS_ERR_INTERNAL, "%s: %" PRId64 " spike positions were appended for %" PRId64 " spikes",
                        w->dir, w->n_pos_rows, w->n_spikes);
    if (w->n_tf && w->n_tf_rows != w->n_spikes)
        return bs_error(BS_ERR_INTERNAL, "%s: %" PRId64 " template feature rows were appended for %" PRId64 " spikes",
                        w->dir, w->n_tf_rows, w->n_spikes);
    if (!w->open[S_SIM])
        BS_TRY(compute_similarity(w));

    /* streamed files */
    for (int i = 0; i < S_COUNT; i++) {
        if (!w->open[i])
            continue;
        char path[4200];
        snprintf(path, sizeof path, "%s", w->s[i].file.path);
        w->open[i] = 0;
        BS_TRY(bs_npy_writer_close(&w->s[i]));
        BS_TRY(note_committed(w, path));
    }
    BS_TRY(remove_stale(w));

    /* templates_ind.npy: dense templates, every row is 0..C-1 */
    {
        char path[4200];
        bs_npy_writer tw;
        int64_t row[1] = {C};
        BS_TRY(join(w, BS_PHY_TEMPLATES_IND, path, sizeof path));
        int32_t *r = bs_mem_alloc("export/templates_ind", (size_t)C * sizeof(int32_t));
        if (!r)
            return BS_ERR_MEMORY;
        for (int c = 0; c < C; c++)
            r[c] = c;
        bs_status st = bs_npy_writer_open(&tw, path, BS_NPY_I32, 2, row);
        for (int64_t t = 0; st == BS_OK && t < T; t++)
            st = bs_npy_writer_append(&tw, r, 1);
        bs_mem_free(r);
        if (st == BS_OK)
            st = bs_npy_writer_close(&tw);
        else
            bs_npy_writer_abort(&tw);
        BS_TRY(st);
        BS_TRY(note_committed(w, path));
    }

    int64_t s1[1] = {C}, s2[2] = {C, 2}, scc[2] = {C, C};
    BS_TRY(save_npy(w, BS_PHY_CHANNEL_MAP, BS_NPY_I32, 1, s1, w->chan_map));
    BS_TRY(save_npy(w, BS_PHY_CHANNEL_POSITIONS, BS_NPY_F32, 2, s2, w->positions));
    BS_TRY(save_npy(w, BS_PHY_CHANNEL_SHANKS, BS_NPY_I32, 1, s1, w->shanks));
    if (w->wmat) {
        BS_TRY(save_npy(w, BS_PHY_WHITENING_MAT, BS_NPY_F32, 2, scc, w->wmat));
        BS_TRY(save_npy(w, BS_PHY_WHITENING_MAT_INV, BS_NPY_F32, 2, scc, w->wmat_inv));
    } else {
        float *eye = bs_mem_calloc("export/whitening", (size_t)C * (size_t)C, sizeof(float));
        if (!eye)
            return BS_ERR_MEMORY;
        for (int c = 0; c < C; c++)
            eye[(size_t)c * (size_t)C + (size_t)c] = 1.0f;
        bs_status st = save_npy(w, BS_PHY_WHITENING_MAT, BS_NPY_F32, 2, scc, eye);
        if (st == BS_OK)
            st = save_npy(w, BS_PHY_WHITENING_MAT_INV, BS_NPY_F32, 2, scc, eye);
        bs_mem_free(eye);
        BS_TRY(st);
    }
    BS_TRY(write_tsvs(w));
    return write_params(w); /* last: its presence marks a complete folder */
}

bs_status bs_phy_writer_close(bs_phy_writer *w)
{
    if (!w)
        return bs_error(BS_ERR_INTERNAL, "bs_phy_writer_close: no writer");
    bs_status st = close_body(w);
    if (st != BS_OK) {
        for (int i = w->n_committed - 1; i >= 0; i--)
            remove(w->committed[i]);
        st = bs_error_context(st, "writing the Phy folder %s", w->dir);
    } else {
        bs_log_info("%s: Phy folder written: %" PRId64 " spikes, %d templates, %d channels", w->dir, w->n_spikes,
                    w->h.n_templates, w->h.n_chan);
    }
    free_all(w);
    return st;
}

bs_status bs_phy_resolve_dat_path(const char *rec_path, char *out, size_t out_len)
{
    char *abs = realpath(rec_path, NULL);
    if (!abs)
        return bs_error(BS_ERR_INPUT, "%s: cannot resolve the recording path for params.py: %s", rec_path,
                        strerror(errno));
    bs_status st = BS_OK;
    if (strlen(abs) >= out_len)
        st = bs_error(BS_ERR_INPUT, "%s: resolved path is longer than %zu bytes", rec_path, out_len - 1);
    else
        snprintf(out, out_len, "%s", abs);
    free(abs);
    return st;
}

void bs_phy_writer_abort(bs_phy_writer *w)
{
    if (w)
        free_all(w);
}
