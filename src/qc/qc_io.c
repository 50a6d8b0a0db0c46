/*
 * qc_io.c - reading the Phy folder for qc: per-spike .npy columns read in
 * blocks (any integer type for ids and times, float32/64 for positions and
 * features, (S,) or (S, m) shapes), params.py's sample_rate, and
 * cluster_group.tsv.
 *
 * A column reader keeps one raw block buffer (QC_BLOCK rows, from the
 * accountant) and converts rows read with pread, so any number of spikes is
 * read in O(block) memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "../mem/mem.h"
#include "qc_internal.h"

static int is_int(bs_npy_dtype d) { return d <= BS_NPY_U64; }

bs_status qc_col_open(qc_col *c, const char *dir, const char *name, int want_float)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    BS_TRY(bs_path_join(c->path, sizeof c->path, dir, name));
    BS_TRY(bs_npy_read_header(c->path, &c->h));
    if (c->h.fortran_order || c->h.ndim < 1)
        return bs_error(BS_ERR_INPUT, "%s: expected a C-order array with one row per spike", c->path);
    if (want_float ? !(c->h.dtype == BS_NPY_F32 || c->h.dtype == BS_NPY_F64) : !is_int(c->h.dtype))
        return bs_error(BS_ERR_INPUT, "%s: field 'descr': expected %s, got '%s'", c->path,
                        want_float ? "float32 or float64" : "an integer type", bs_npy_dtype_descr(c->h.dtype));
    c->n_rows = c->h.shape[0];
    c->n_cols = 1;
    for (int i = 1; i < c->h.ndim; i++)
        c->n_cols *= c->h.shape[i];
    c->esize = bs_npy_dtype_size(c->h.dtype);
    c->fd = open(c->path, O_RDONLY);
    if (c->fd < 0)
        return bs_error(BS_ERR_INPUT, "%s: %s", c->path, strerror(errno));
    c->raw = bs_mem_alloc("qc/read-block", (size_t)QC_BLOCK * (size_t)c->n_cols * c->esize + 1);
    if (!c->raw) {
        close(c->fd);
        c->fd = -1;
        return BS_ERR_MEMORY;
    }
    return BS_OK;
}

void qc_col_close(qc_col *c)
{
    if (c->fd >= 0)
        close(c->fd);
    bs_mem_free(c->raw);
    c->fd = -1;
    c->raw = NULL;
}

/* Rows [r0, r0 + n) (n <= QC_BLOCK) into c->raw. */
static bs_status read_rows(qc_col *c, int64_t r0, int64_t n)
{
    size_t row = (size_t)c->n_cols * c->esize, want = (size_t)n * row, got = 0;
    off_t off = (off_t)c->h.data_offset + (off_t)r0 * (off_t)row;
    while (got < want) {
        ssize_t k = pread(c->fd, (char *)c->raw + got, want - got, off + (off_t)got);
        if (k <= 0)
            return bs_error(BS_ERR_INPUT, "%s: read failed at row %lld: %s", c->path, (long long)r0,
                            k == 0 ? "unexpected end of file" : strerror(errno));
        got += (size_t)k;
    }
    return BS_OK;
}

static int64_t int_at(const qc_col *c, const uint8_t *p)
{
    switch (c->h.dtype) {
    case BS_NPY_I8: { int8_t v; memcpy(&v, p, 1); return v; }
    case BS_NPY_U8: return p[0];
    case BS_NPY_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case BS_NPY_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case BS_NPY_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case BS_NPY_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case BS_NPY_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v > (uint64_t)INT64_MAX ? -1 : (int64_t)v; }
    }
}

bs_status qc_col_read_i64(qc_col *c, int64_t r0, int64_t n, int64_t *out)
{
    BS_TRY(read_rows(c, r0, n));
    size_t row = (size_t)c->n_cols * c->esize;
    for (int64_t i = 0; i < n; i++)
        out[i] = int_at(c, (const uint8_t *)c->raw + (size_t)i * row);
    return BS_OK;
}

bs_status qc_col_read_f32(qc_col *c, int64_t r0, int64_t n, float *out)
{
    BS_TRY(read_rows(c, r0, n));
    size_t m = (size_t)n * (size_t)c->n_cols;
    if (c->h.dtype == BS_NPY_F32) {
        memcpy(out, c->raw, m * sizeof *out);
    } else {
        const double *d = c->raw;
        for (size_t i = 0; i < m; i++)
            out[i] = (float)d[i];
    }
    return BS_OK;
}


void qc_groups_free(qc_groups *g)
{
    free(g->id);
    free(g->group);
    memset(g, 0, sizeof *g);
}

bs_status qc_read_groups(const char *dir, qc_groups *g)
{
    memset(g, 0, sizeof *g);
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, dir, "cluster_group.tsv"));
    FILE *fp = fopen(path, "r");
    if (!fp)
        return BS_OK; /* optional */
    char line[512];
    bs_status st = BS_OK;
    int lineno = 0, cap = 0;
    while (st == BS_OK && fgets(line, sizeof line, fp)) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        char *sep = strchr(line, '\t');
        if (!sep)
            sep = strchr(line, ',');
        if (lineno == 1) {
            if (!sep || strncmp(line, "cluster_id", (size_t)(sep - line)) != 0 || strcmp(sep + 1, "group") != 0)
                st = bs_error(BS_ERR_INPUT, "%s: line 1: expected the header 'cluster_id<TAB>group'", path);
            continue;
        }
        if (line[0] == '\0')
            continue;
        char *end;
        long id = sep ? strtol(line, &end, 10) : -1;
        if (!sep || end != sep || id < 0 || id > INT32_MAX) {
            st = bs_error(BS_ERR_INPUT, "%s: line %d: expected '<cluster id><TAB><group>'", path, lineno);
            break;
        }
        if (g->n == cap) {
            cap = cap ? 2 * cap : 256;
            int32_t *ni = realloc(g->id, sizeof *ni * (size_t)cap);
            if (ni)
                g->id = ni;
            char(*ng)[16] = realloc(g->group, sizeof *ng * (size_t)cap);
            if (ng)
                g->group = ng;
            if (!ni || !ng) {
                st = bs_error(BS_ERR_MEMORY, "%s: out of memory", path);
                break;
            }
        }
        g->id[g->n] = (int32_t)id;
        snprintf(g->group[g->n], sizeof g->group[0], "%s", sep + 1);
        g->n++;
    }
    fclose(fp);
    if (st != BS_OK)
        qc_groups_free(g);
    return st;
}
