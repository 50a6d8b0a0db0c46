/*
 * validate.c - the Phy folder checker (see validate.h).
 *
 * The folder is read with phy_read.h: params.py parsed as the small subset
 * of Python that sorters write (every line it cannot parse is a violation),
 * the tables one line at a time with its line tools, so that every bad row
 * is reported, not only the first.
 *
 * Order: params.py, the recording length from dat_path's file sizes, then
 * channel_map and channel_positions (C), templates (T), the per-spike arrays
 * (S, read in chunks of CHUNK elements and converted to int64), the
 * per-template arrays, pc_features, template_features, any other spike_*.npy (one row per
 * spike), and finally every cluster_*.tsv / cluster_*.csv against the set of
 * cluster ids found in spike_clusters.npy (or spike_templates.npy when there
 * is no spike_clusters.npy, as phylib and SpikeInterface do).
 *
 * The cluster id set is kept as a sorted array of distinct ids, merged chunk
 * by chunk: memory grows with the number of clusters, not of spikes.
 */
#include "validate.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/fileio.h"
#include "../io/npy.h"
#include "../mem/mem.h"
#include "phy_read.h"

#define CHUNK 65536
#define MAX_DAT_FILES 64

typedef struct {
    const char *dir;
    FILE *report;
    int n_viol;
    bs_phy_params params;   /* params.py */
    /* facts established so far; -1 = unknown */
    int64_t n_channels_dat, n_samples, C, T, S, nt, tpl_chan;
    int64_t *ids;           /* sorted distinct cluster ids */
    int64_t n_ids, cap_ids;
} vctx;

static void viol(vctx *v, const char *file, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void viol(vctx *v, const char *file, const char *fmt, ...)
{
    v->n_viol++;
    if (!v->report)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(v->report, "%s: ", file);
    vfprintf(v->report, fmt, ap);
    fputc('\n', v->report);
    va_end(ap);
}

static void note(vctx *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(vctx *v, const char *fmt, ...)
{
    if (!v->report)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(v->report, "note: ");
    vfprintf(v->report, fmt, ap);
    fputc('\n', v->report);
    va_end(ap);
}

/* ---- params.py ---------------------------------------------------------- */

static const bs_py_value *get_param(const vctx *v, const char *key) { return bs_phy_params_get(&v->params, key); }

static void check_params(vctx *v)
{
    char path[4200];
    if (bs_path_join(path, sizeof path, v->dir, BS_PHY_PARAMS) != BS_OK) {
        viol(v, BS_PHY_PARAMS, "path too long");
        return;
    }
    char *text = NULL;
    struct stat st;
    if (stat(path, &st) != 0) {
        viol(v, BS_PHY_PARAMS, "missing, expected the parameter file Phy opens (phy template-gui params.py)");
        return;
    }
    if (bs_read_text_file(path, 1u << 20, &text, NULL) != BS_OK) {
        viol(v, BS_PHY_PARAMS, "%s", bs_last_error());
        return;
    }
    bs_status pst = bs_phy_params_parse(text, &v->params);
    free(text);
    if (pst != BS_OK) {
        viol(v, BS_PHY_PARAMS, "%s", bs_last_error());
        return;
    }
    for (int i = 0; i < v->params.n_bad; i++)
        viol(v, BS_PHY_PARAMS,
             "line %d: cannot parse '%s', expected NAME = a string, a number, True/False/None or a list of strings",
             v->params.bad[i].line, v->params.bad[i].text);
    if (v->params.too_many_line)
        viol(v, BS_PHY_PARAMS, "line %d: more than %d assignments, expected a short parameter file",
             v->params.too_many_line, BS_PHY_PARAMS_MAX);

    static const char *const required[] = {"dat_path", "n_channels_dat", "dtype", "sample_rate"};
    for (size_t i = 0; i < 4; i++)
        if (!get_param(v, required[i]))
            viol(v, BS_PHY_PARAMS, "missing key '%s', expected %s", required[i],
                 i == 0   ? "the raw binary's path, a list of paths or []"
                 : i == 1 ? "the number of interleaved channels in the binary"
                 : i == 2 ? "the numpy dtype of the binary, e.g. 'int16'"
                          : "the sampling rate in Hz (spike_times.npy holds sample indices)");
    const bs_py_value *p;
    if ((p = get_param(v, "n_channels_dat"))) {
        if (p->type != BS_PY_NUM || !p->is_int || p->num < 1 || p->num > 1e7)
            viol(v, BS_PHY_PARAMS, "line %d: n_channels_dat must be a positive integer", p->line);
        else
            v->n_channels_dat = (int64_t)p->num;
    }
    size_t item = 0;
    if ((p = get_param(v, "dtype"))) {
        if (p->type != BS_PY_STR || !(item = bs_phy_dtype_bytes(p->str)))
            viol(v, BS_PHY_PARAMS, "line %d: dtype must be a numpy dtype string such as 'int16', found %s", p->line,
                 p->type == BS_PY_STR ? p->str : "a value that is not a string");
    }
    if ((p = get_param(v, "sample_rate")) && (p->type != BS_PY_NUM || !(p->num > 0)))
        viol(v, BS_PHY_PARAMS, "line %d: sample_rate must be a positive number (Hz)", p->line);
    double offset = 0;
    if ((p = get_param(v, "offset"))) {
        if (p->type != BS_PY_NUM || !p->is_int || p->num < 0)
            viol(v, BS_PHY_PARAMS, "line %d: offset must be a non-negative integer (bytes)", p->line);
        else
            offset = p->num;
    }
    if ((p = get_param(v, "hp_filtered")) && p->type != BS_PY_BOOL)
        viol(v, BS_PHY_PARAMS, "line %d: hp_filtered must be True or False", p->line);

    /* recording length from the raw file sizes */
    const bs_py_value *dp = get_param(v, "dat_path");
    if (!dp)
        return;
    const char *files[MAX_DAT_FILES];
    int nf = 0;
    if (dp->type == BS_PY_STR)
        files[nf++] = dp->str;
    else if (dp->type == BS_PY_LIST)
        for (int i = 0; i < dp->n_items && nf < MAX_DAT_FILES; i++)
            files[nf++] = dp->items[i];
    else {
        viol(v, BS_PHY_PARAMS, "line %d: dat_path must be a string or a list of strings", dp->line);
        return;
    }
    if (nf == 0) {
        note(v, "dat_path is empty: spike times cannot be checked against the recording length");
        return;
    }
    if (v->n_channels_dat < 1 || !item) {
        note(v, "spike times cannot be checked against the recording length: n_channels_dat or dtype is unusable");
        return;
    }
    int64_t total = 0;
    for (int i = 0; i < nf; i++) {
        char fpath[4200];
        if (files[i][0] == '/')
            snprintf(fpath, sizeof fpath, "%s", files[i]);
        else if (bs_path_join(fpath, sizeof fpath, v->dir, files[i]) != BS_OK)
            return;
        uint64_t size = 0;
        if (bs_file_size(fpath, &size) != BS_OK) {
            note(v, "spike times cannot be checked against the recording length: raw file %s not found", fpath);
            return;
        }
        uint64_t frame = (uint64_t)v->n_channels_dat * item;
        if ((double)size < offset) {
            viol(v, BS_PHY_PARAMS, "dat_path file %s is %" PRIu64 " bytes, shorter than offset = %.0f", fpath, size,
                 offset);
            return;
        }
        uint64_t data = size - (uint64_t)offset;
        if (data % frame)
            note(v, "%s: %" PRIu64 " data bytes is not a whole number of %" PRIu64 "-byte samples", fpath, data,
                 frame);
        total += (int64_t)(data / frame);
    }
    v->n_samples = total;
}

/* ---- arrays --------------------------------------------------------------- */

static int is_int_dtype(bs_npy_dtype d) { return d <= BS_NPY_U64; }
static int is_float_dtype(bs_npy_dtype d) { return d == BS_NPY_F32 || d == BS_NPY_F64; }

static const char *shape_str(const bs_npy_header *h, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < h->ndim && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%" PRId64 "%s", h->shape[i],
                              h->ndim == 1 ? "," : (i + 1 < h->ndim ? ", " : ""));
    if (n < len)
        snprintf(buf + n, len - n, ")");
    return buf;
}

/* 1 if the array exists and its header is sound; reports otherwise. */
static int open_arr(vctx *v, const char *name, int required, const char *why, bs_npy_header *h, char *path,
                    size_t plen)
{
    if (bs_path_join(path, plen, v->dir, name) != BS_OK)
        return 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        if (required)
            viol(v, name, "missing, expected %s", why);
        return 0;
    }
    if (bs_npy_read_header(path, h) != BS_OK) {
        viol(v, name, "unreadable: %s", bs_last_error());
        return 0;
    }
    return 1;
}

/* Length of a (N,) or (N, 1) array; -1 (reported) otherwise. */
static int64_t vec_len(vctx *v, const char *name, const bs_npy_header *h)
{
    if (h->ndim == 1)
        return h->shape[0];
    if (h->ndim == 2 && h->shape[1] == 1)
        return h->shape[0];
    char s[256];
    viol(v, name, "shape %s, expected a vector (N,) or (N, 1)", shape_str(h, s, sizeof s));
    return -1;
}

/* Read elements [start, start + n) of a numeric array as int64 (floats truncated). */
static int read_as_i64(FILE *fp, const bs_npy_header *h, int64_t start, int64_t n, void *raw, int64_t *out)
{
    size_t isz = bs_npy_dtype_size(h->dtype);
    if (fseeko(fp, (off_t)(h->data_offset + (uint64_t)start * isz), SEEK_SET) != 0 ||
        fread(raw, isz, (size_t)n, fp) != (size_t)n)
        return 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *b = (const uint8_t *)raw + (size_t)i * isz;
        switch (h->dtype) {
        case BS_NPY_I8: out[i] = *(const int8_t *)b; break;
        case BS_NPY_U8:
        case BS_NPY_BOOL: out[i] = *b; break;
        case BS_NPY_I16: { int16_t x; memcpy(&x, b, 2); out[i] = x; } break;
        case BS_NPY_U16: { uint16_t x; memcpy(&x, b, 2); out[i] = x; } break;
        case BS_NPY_I32: { int32_t x; memcpy(&x, b, 4); out[i] = x; } break;
        case BS_NPY_U32: { uint32_t x; memcpy(&x, b, 4); out[i] = x; } break;
        case BS_NPY_I64: { int64_t x; memcpy(&x, b, 8); out[i] = x; } break;
        case BS_NPY_U64: { uint64_t x; memcpy(&x, b, 8); out[i] = x > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)x; } break;
        case BS_NPY_F32: { float x; memcpy(&x, b, 4); out[i] = isfinite(x) && fabsf(x) < 9e18f ? (int64_t)x : INT64_MIN; } break;
        case BS_NPY_F64: { double x; memcpy(&x, b, 8); out[i] = isfinite(x) && fabs(x) < 9e18 ? (int64_t)x : INT64_MIN; } break;
        }
    }
    return 1;
}

/* One element of a numeric array as a double. */
static double elem_as_double(bs_npy_dtype dt, const uint8_t *b)
{
    switch (dt) {
    case BS_NPY_F32: { float x; memcpy(&x, b, 4); return x; }
    case BS_NPY_F64: { double x; memcpy(&x, b, 8); return x; }
    case BS_NPY_I8: return *(const int8_t *)b;
    case BS_NPY_U8:
    case BS_NPY_BOOL: return *b;
    case BS_NPY_I16: { int16_t x; memcpy(&x, b, 2); return x; }
    case BS_NPY_U16: { uint16_t x; memcpy(&x, b, 2); return x; }
    case BS_NPY_I32: { int32_t x; memcpy(&x, b, 4); return x; }
    case BS_NPY_U32: { uint32_t x; memcpy(&x, b, 4); return x; }
    case BS_NPY_I64: { int64_t x; memcpy(&x, b, 8); return (double)x; }
    case BS_NPY_U64: { uint64_t x; memcpy(&x, b, 8); return (double)x; }
    }
    return 0;
}

typedef struct {
    FILE *fp;
    void *raw;
    int64_t *vals;
    bs_npy_header h;
    int64_t n, pos;
} scanner;

static int scan_open(vctx *v, scanner *s, const char *name, const char *path, const bs_npy_header *h, int64_t n)
{
    memset(s, 0, sizeof *s);
    s->h = *h;
    s->n = n;
    s->fp = fopen(path, "rb");
    s->raw = bs_mem_alloc("validate/chunk", CHUNK * 8);
    s->vals = bs_mem_alloc("validate/chunk", CHUNK * sizeof(int64_t));
    if (!s->fp || !s->raw || !s->vals) {
        viol(v, name, "cannot be read: %s", s->fp ? bs_last_error() : strerror(errno));
        return 0;
    }
    return 1;
}

/* Next chunk: returns its length (0 at the end, -1 on a read error, reported). */
static int64_t scan_next(vctx *v, scanner *s, const char *name)
{
    int64_t m = s->n - s->pos < CHUNK ? s->n - s->pos : CHUNK;
    if (m <= 0)
        return 0;
    if (!read_as_i64(s->fp, &s->h, s->pos, m, s->raw, s->vals)) {
        viol(v, name, "read error at element %" PRId64, s->pos);
        return -1;
    }
    s->pos += m;
    return m;
}

static void scan_close(scanner *s)
{
    if (s->fp)
        fclose(s->fp);
    bs_mem_free(s->raw);
    bs_mem_free(s->vals);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Merge the distinct values of vals[0..n) into v->ids. */
static int merge_ids(vctx *v, int64_t *vals, int64_t n)
{
    qsort(vals, (size_t)n, sizeof *vals, cmp_i64);
    int64_t u = 0;
    for (int64_t i = 0; i < n; i++)
        if (u == 0 || vals[i] != vals[u - 1])
            vals[u++] = vals[i];
    if (v->n_ids + u > v->cap_ids) {
        int64_t cap = v->cap_ids ? v->cap_ids : 1024;
        while (cap < v->n_ids + u)
            cap *= 2;
        int64_t *p = bs_mem_realloc(v->ids, "validate/cluster_ids", (size_t)cap * sizeof(int64_t) * 2);
        if (!p)
            return 0;
        v->ids = p;
        v->cap_ids = cap;
    }
    /* merge backwards-free: use the upper half of the buffer as scratch */
    int64_t *out = v->ids + v->cap_ids;
    int64_t a = 0, b = 0, k = 0;
    while (a < v->n_ids || b < u) {
        int64_t x = a < v->n_ids ? v->ids[a] : INT64_MAX, y = b < u ? vals[b] : INT64_MAX;
        if (x <= y) {
            out[k++] = x;
            a++;
            if (x == y)
                b++;
        } else {
            out[k++] = y;
            b++;
        }
    }
    memcpy(v->ids, out, (size_t)k * sizeof(int64_t));
    v->n_ids = k;
    return 1;
}

static void check_spike_times(vctx *v)
{
    const char *name = BS_PHY_SPIKE_TIMES;
    char path[4200];
    bs_npy_header h;
    if (!open_arr(v, name, 1, "the sample index of every spike (required by Phy)", &h, path, sizeof path))
        return;
    v->S = vec_len(v, name, &h);
    if (!is_int_dtype(h.dtype))
        viol(v, name, "dtype %s, expected an integer dtype (<i8, int64 sample indices)", bs_npy_dtype_descr(h.dtype));
    if (v->S < 0)
        return;
    scanner s;
    if (!scan_open(v, &s, name, path, &h, v->S)) {
        scan_close(&s);
        return;
    }
    int64_t prev = INT64_MIN, m, n_dec = 0, n_neg = 0, n_after = 0, first_dec = -1, first_neg = -1,
            first_after = -1, dec_t = 0, dec_prev = 0, neg_t = 0, after_t = 0;
    while ((m = scan_next(v, &s, name)) > 0) {
        for (int64_t i = 0; i < m; i++) {
            int64_t t = s.vals[i], idx = s.pos - m + i;
            if (t < prev) {
                if (!n_dec++) {
                    first_dec = idx;
                    dec_t = t;
                    dec_prev = prev;
                }
            }
            if (t < 0 && !n_neg++) {
                first_neg = idx;
                neg_t = t;
            }
            if (v->n_samples >= 0 && t >= v->n_samples && !n_after++) {
                first_after = idx;
                after_t = t;
            }
            prev = t;
        }
    }
    scan_close(&s);
    if (n_dec)
        viol(v, name,
             "not sorted: spike %" PRId64 " at sample %" PRId64 " comes after sample %" PRId64 " (%" PRId64
             " decreases), expected non-decreasing times",
             first_dec, dec_t, dec_prev, n_dec);
    if (n_neg)
        viol(v, name, "%" PRId64 " negative spike times, first spike %" PRId64 " at sample %" PRId64 ", expected >= 0",
             n_neg, first_neg, neg_t);
    if (n_after)
        viol(v, name,
             "%" PRId64 " spikes after the end of the recording: first spike %" PRId64 " at sample %" PRId64
             ", expected < %" PRId64 " samples (from dat_path's size)",
             n_after, first_after, after_t, v->n_samples);
}

/* spike_templates (ids < T) or spike_clusters (ids >= 0, collected). */
static void check_spike_ids(vctx *v, const char *name, int is_templates, int collect)
{
    char path[4200];
    bs_npy_header h;
    if (!open_arr(v, name, is_templates, "the template id of every spike (required by Phy)", &h, path, sizeof path))
        return;
    int64_t n = vec_len(v, name, &h);
    if (is_templates) {
        if (h.dtype != BS_NPY_U16 && h.dtype != BS_NPY_U32 && h.dtype != BS_NPY_I32 && h.dtype != BS_NPY_I64)
            viol(v, name, "dtype %s, expected <i4 (phylib accepts uint16, uint32, int32 or int64)",
                 bs_npy_dtype_descr(h.dtype));
    } else if (!is_int_dtype(h.dtype)) {
        viol(v, name, "dtype %s, expected an integer dtype (<i4)", bs_npy_dtype_descr(h.dtype));
    }
    if (n < 0)
        return;
    if (v->S >= 0 && n != v->S) {
        viol(v, name, "length %" PRId64 ", expected %" PRId64 " (the length of spike_times.npy)", n, v->S);
        return;
    }
    scanner s;
    if (!scan_open(v, &s, name, path, &h, n)) {
        scan_close(&s);
        return;
    }
    int64_t m, n_bad = 0, first_bad = -1, bad_id = 0, max_id = -1;
    while ((m = scan_next(v, &s, name)) > 0) {
        for (int64_t i = 0; i < m; i++) {
            int64_t id = s.vals[i];
            if (id > max_id)
                max_id = id;
            if (id < 0 || (is_templates && v->T >= 0 && id >= v->T)) {
                if (!n_bad++) {
                    first_bad = s.pos - m + i;
                    bad_id = id;
                }
            }
        }
        if (collect && !merge_ids(v, s.vals, m)) {
            viol(v, name, "%s", bs_last_error());
            break;
        }
    }
    scan_close(&s);
    if (n_bad && is_templates && v->T >= 0)
        viol(v, name,
             "%" PRId64 " spikes have template ids outside 0..%" PRId64 ": first spike %" PRId64 " has id %" PRId64
             ", expected ids < %" PRId64 " (the rows of templates.npy)",
             n_bad, v->T - 1, first_bad, bad_id, v->T);
    else if (n_bad)
        viol(v, name, "%" PRId64 " negative ids: first spike %" PRId64 " has id %" PRId64 ", expected ids >= 0", n_bad,
             first_bad, bad_id);
    if (is_templates && v->T < 0 && max_id >= 0)
        note(v, "templates.npy is absent: ids of spike_templates.npy (max %" PRId64 ") cannot be checked", max_id);
}

/* A float array holds only finite values: the first NaN / Inf is reported with its index (one per dimension,
 * `dims` names them) and the count. Read in chunks of CHUNK elements. */
static void check_finite(vctx *v, const char *name, const char *path, const bs_npy_header *h, const char *dims)
{
    uint64_t count = 0;
    if (!is_float_dtype(h->dtype) || bs_npy_count(h, &count) != BS_OK)
        return;
    size_t isz = bs_npy_dtype_size(h->dtype);
    FILE *fp = fopen(path, "rb");
    uint8_t *raw = bs_mem_alloc("validate/chunk", CHUNK * 8);
    int64_t n_bad = 0, first = -1;
    double bad_val = 0;
    int ok = fp && raw && fseeko(fp, (off_t)h->data_offset, SEEK_SET) == 0;
    for (uint64_t pos = 0; ok && pos < count; pos += CHUNK) {
        size_t m = count - pos < CHUNK ? (size_t)(count - pos) : CHUNK;
        ok = fread(raw, isz, m, fp) == m;
        for (size_t i = 0; ok && i < m; i++) {
            double x = elem_as_double(h->dtype, raw + i * isz);
            if (!isfinite(x) && !n_bad++) {
                first = (int64_t)(pos + i);
                bad_val = x;
            }
        }
    }
    if (fp)
        fclose(fp);
    bs_mem_free(raw);
    if (!ok || !n_bad)
        return; /* a short file is reported by the readers */
    char idx[256];
    size_t len = 0;
    int64_t rest = first;
    for (int d = h->ndim - 1; d >= 0; d--) { /* C order: the last index varies fastest */
        int64_t ext = h->shape[d] > 0 ? h->shape[d] : 1;
        char part[32];
        snprintf(part, sizeof part, "%s%" PRId64, d ? ", " : "", rest % ext);
        memmove(idx + strlen(part), idx, len);
        memcpy(idx, part, strlen(part));
        len += strlen(part);
        rest /= ext;
    }
    idx[len] = '\0';
    viol(v, name, "%" PRId64 " non-finite values: the first is %g at [%s] (%s), expected finite numbers", n_bad,
         bad_val, idx, dims);
}

static void check_float_vec(vctx *v, const char *name, int64_t expect_len, const char *what)
{
    char path[4200];
    bs_npy_header h;
    if (!open_arr(v, name, 0, "", &h, path, sizeof path))
        return;
    if (!is_float_dtype(h.dtype))
        viol(v, name, "dtype %s, expected <f4 or <f8", bs_npy_dtype_descr(h.dtype));
    int64_t n = vec_len(v, name, &h);
    if (n >= 0 && expect_len >= 0 && n != expect_len)
        viol(v, name, "length %" PRId64 ", expected %" PRId64 " (%s)", n, expect_len, what);
    check_finite(v, name, path, &h, h.ndim == 1 ? "spike" : "spike, column");
}

/* A 2-D array with the given shape (-1: any) and dtype class. Returns 1 if it exists. */
static int check_matrix(vctx *v, const char *name, int want_float, int64_t r, int64_t c, const char *what,
                        bs_npy_header *h, char *path, size_t plen)
{
    if (!open_arr(v, name, 0, "", h, path, plen))
        return 0;
    if (want_float ? !is_float_dtype(h->dtype) : !is_int_dtype(h->dtype))
        viol(v, name, "dtype %s, expected %s", bs_npy_dtype_descr(h->dtype),
             want_float ? "<f4 or <f8" : "an integer dtype");
    char s[256];
    if (h->ndim != 2 || (r >= 0 && h->shape[0] != r) || (c >= 0 && h->shape[1] != c)) {
        char want[64] = "(N, M)";
        if (r >= 0 && c >= 0)
            snprintf(want, sizeof want, "(%" PRId64 ", %" PRId64 ")", r, c);
        else if (r >= 0)
            snprintf(want, sizeof want, "(%" PRId64 ", M)", r);
        else if (c >= 0)
            snprintf(want, sizeof want, "(N, %" PRId64 ")", c);
        viol(v, name, "shape %s, expected %s (%s)", shape_str(h, s, sizeof s), want, what);
        return 0;
    }
    return 1;
}

/* Integer values of an array in [lo, hi]; reports the first outlier. */
static void check_int_range(vctx *v, const char *name, const char *path, const bs_npy_header *h, int64_t lo,
                            int64_t hi, const char *what)
{
    uint64_t count = 0;
    if (bs_npy_count(h, &count) != BS_OK || !is_int_dtype(h->dtype))
        return;
    scanner s;
    if (!scan_open(v, &s, name, path, h, (int64_t)count)) {
        scan_close(&s);
        return;
    }
    int64_t m, n_bad = 0, first = -1, val = 0;
    while ((m = scan_next(v, &s, name)) > 0)
        for (int64_t i = 0; i < m; i++)
            if ((s.vals[i] < lo || s.vals[i] > hi) && !n_bad++) {
                first = s.pos - m + i;
                val = s.vals[i];
            }
    scan_close(&s);
    if (n_bad)
        viol(v, name, "%" PRId64 " values outside %" PRId64 "..%" PRId64 ": element %" PRId64 " is %" PRId64
             ", expected %s", n_bad, lo, hi, first, val, what);
}

static void check_channels(vctx *v)
{
    char path[4200], s[256];
    bs_npy_header h;
    const char *name = BS_PHY_CHANNEL_MAP;
    if (open_arr(v, name, 1, "the raw-file row of every kept channel (required by Phy)", &h, path, sizeof path)) {
        if (h.dtype != BS_NPY_U32 && h.dtype != BS_NPY_I32 && h.dtype != BS_NPY_I64)
            viol(v, name, "dtype %s, expected <i4 (phylib accepts uint32, int32 or int64)",
                 bs_npy_dtype_descr(h.dtype));
        int64_t c = vec_len(v, name, &h);
        if (c >= 0) {
            v->C = c;
            if (v->n_channels_dat > 0)
                check_int_range(v, name, path, &h, 0, v->n_channels_dat - 1, "rows of the raw file (n_channels_dat)");
        }
    }
    name = BS_PHY_CHANNEL_POSITIONS;
    if (open_arr(v, name, 1, "x, y in µm of every channel (required by Phy)", &h, path, sizeof path)) {
        if (h.dtype == BS_NPY_BOOL)
            viol(v, name, "dtype %s, expected <f4 or <f8", bs_npy_dtype_descr(h.dtype));
        if (h.ndim != 2 || h.shape[1] != 2 || (v->C >= 0 && h.shape[0] != v->C)) {
            viol(v, name, "shape %s, expected (%" PRId64 ", 2) (x, y of each channel of channel_map.npy)",
                 shape_str(&h, s, sizeof s), v->C);
        } else if (h.dtype != BS_NPY_BOOL) {
            void *data = NULL;
            bs_npy_header hh;
            if (bs_npy_load(path, "validate/positions", &hh, &data) == BS_OK) {
                int64_t n = h.shape[0];
                double *xy = bs_mem_alloc("validate/positions", (size_t)n * 2 * sizeof(double));
                if (xy) {
                    for (int64_t i = 0; i < 2 * n; i++)
                        xy[i] = elem_as_double(h.dtype, (const uint8_t *)data + (size_t)i * bs_npy_dtype_size(h.dtype));
                    int dup = 0;
                    for (int64_t i = 0; i < n && !dup; i++) {
                        if (!isfinite(xy[2 * i]) || !isfinite(xy[2 * i + 1])) {
                            viol(v, name, "channel %" PRId64 " has a non-finite position, expected finite µm", i);
                            dup = 1;
                        }
                        for (int64_t j = i + 1; j < n && !dup; j++)
                            if (xy[2 * i] == xy[2 * j] && xy[2 * i + 1] == xy[2 * j + 1]) {
                                viol(v, name,
                                     "channels %" PRId64 " and %" PRId64 " share the position (%g, %g) µm, expected "
                                     "distinct positions (phylib falls back to a linear layout)",
                                     i, j, xy[2 * i], xy[2 * i + 1]);
                                dup = 1;
                            }
                    }
                    bs_mem_free(xy);
                }
                bs_mem_free(data);
            }
        }
    }
    name = BS_PHY_CHANNEL_SHANKS;
    if (open_arr(v, name, 0, "", &h, path, sizeof path)) {
        int64_t n = vec_len(v, name, &h);
        if (n >= 0 && v->C >= 0 && n != v->C)
            viol(v, name, "length %" PRId64 ", expected %" PRId64 " (the channels of channel_map.npy)", n, v->C);
    }
    const char *wm[2] = {BS_PHY_WHITENING_MAT, BS_PHY_WHITENING_MAT_INV};
    for (int k = 0; k < 2; k++)
        check_matrix(v, wm[k], 1, v->C, v->C, "channels x channels of channel_map.npy", &h, path, sizeof path);
}

static void check_templates(vctx *v)
{
    char path[4200], s[256];
    bs_npy_header h;
    const char *name = BS_PHY_TEMPLATES;
    int has_sparse_ind = 0;
    {
        char p2[4200];
        struct stat st;
        has_sparse_ind = bs_path_join(p2, sizeof p2, v->dir, "template_ind.npy") == BS_OK && stat(p2, &st) == 0;
    }
    if (!open_arr(v, name, 0, "", &h, path, sizeof path)) {
        note(v, "templates.npy is absent: the template and waveform views will be empty");
        return;
    }
    if (!is_float_dtype(h.dtype))
        viol(v, name, "dtype %s, expected <f4 or <f8", bs_npy_dtype_descr(h.dtype));
    if (h.ndim != 3) {
        viol(v, name, "shape %s, expected (T, nt, C): templates x samples x channels", shape_str(&h, s, sizeof s));
        return;
    }
    v->T = h.shape[0];
    v->nt = h.shape[1];
    v->tpl_chan = h.shape[2];
    check_finite(v, name, path, &h, "template, sample, channel");
    if (!has_sparse_ind && v->C >= 0 && h.shape[2] != v->C)
        viol(v, name,
             "shape %s, expected (%" PRId64 ", %" PRId64 ", %" PRId64 "): dense templates need one column per channel "
             "of channel_map.npy",
             shape_str(&h, s, sizeof s), h.shape[0], h.shape[1], v->C);
    const char *inds[2] = {BS_PHY_TEMPLATES_IND, "template_ind.npy"};
    for (int k = 0; k < 2; k++)
        if (check_matrix(v, inds[k], 0, v->T, v->tpl_chan, "templates x template channels of templates.npy", &h,
                         path, sizeof path) &&
            v->C >= 0)
            check_int_range(v, inds[k], path, &h, -1, v->C - 1, "channel indices (-1 = unused)");
    check_matrix(v, BS_PHY_SIMILAR_TEMPLATES, 1, v->T, v->T, "templates x templates", &h, path, sizeof path);
}

/* A feature file (h) has a row per spike, or per entry of ids_name when the folder has that subset file. */
static void check_feature_rows(vctx *v, const char *name, const bs_npy_header *h, const char *ids_name)
{
    int64_t n_rows = v->S;
    char rows_of[96] = "the length of spike_times.npy", path[4200], s[256];
    bs_npy_header hs;
    if (open_arr(v, ids_name, 0, "", &hs, path, sizeof path)) {
        n_rows = vec_len(v, ids_name, &hs);
        snprintf(rows_of, sizeof rows_of, "the length of %s", ids_name);
    }
    if (n_rows >= 0 && h->shape[0] != n_rows)
        viol(v, name, "shape %s: %" PRId64 " rows, expected %" PRId64 " (%s)", shape_str(h, s, sizeof s),
             h->shape[0], n_rows, rows_of);
}

static void check_pc_features(vctx *v)
{
    char path[4200], s[256];
    bs_npy_header h;
    const char *name = BS_PHY_PC_FEATURES;
    if (!open_arr(v, name, 0, "", &h, path, sizeof path))
        return;
    if (!is_float_dtype(h.dtype))
        viol(v, name, "dtype %s, expected <f4 or <f8", bs_npy_dtype_descr(h.dtype));
    if (h.ndim != 3) {
        viol(v, name, "shape %s, expected (S, n_pc, n_chan): spikes x PCs x channels", shape_str(&h, s, sizeof s));
        return;
    }
    check_feature_rows(v, name, &h, "pc_feature_spike_ids.npy");
    char p2[4200];
    int64_t nch = h.shape[2];
    bs_npy_header hi;
    if (check_matrix(v, BS_PHY_PC_FEATURE_IND, 0, v->T, nch,
                     "templates.npy rows x the channels of pc_features.npy", &hi, p2, sizeof p2) &&
        v->C >= 0)
        check_int_range(v, BS_PHY_PC_FEATURE_IND, p2, &hi, 0, v->C - 1, "channel indices into channel_map.npy");
}

/* template_features.npy (S x n_tf, float) and template_feature_ind.npy (T x n_tf template ids), what phylib's
 * template-feature view reads; rows follow template_feature_spike_ids.npy when that exists. */
static void check_template_features(vctx *v)
{
    char path[4200], s[256], p2[4200];
    bs_npy_header h, hi;
    const char *name = BS_PHY_TEMPLATE_FEATURES;
    if (!open_arr(v, name, 0, "", &h, path, sizeof path))
        return;
    if (!is_float_dtype(h.dtype))
        viol(v, name, "dtype %s, expected <f4 or <f8", bs_npy_dtype_descr(h.dtype));
    if (h.ndim != 2) {
        viol(v, name, "shape %s, expected (S, n_tf): spikes x templates", shape_str(&h, s, sizeof s));
        return;
    }
    check_feature_rows(v, name, &h, "template_feature_spike_ids.npy");
    if (check_matrix(v, BS_PHY_TEMPLATE_FEATURE_IND, 0, v->T, h.shape[1],
                     "templates.npy rows x the columns of template_features.npy", &hi, p2, sizeof p2) &&
        v->T > 0)
        check_int_range(v, BS_PHY_TEMPLATE_FEATURE_IND, p2, &hi, 0, v->T - 1, "template ids");
}

/* ---- cluster tables --------------------------------------------------------- */

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void check_table(vctx *v, const char *name)
{
    char path[4200];
    if (bs_path_join(path, sizeof path, v->dir, name) != BS_OK)
        return;
    char *text = NULL;
    if (bs_read_text_file(path, 256u << 20, &text, NULL) != BS_OK) {
        viol(v, name, "unreadable: %s", bs_last_error());
        return;
    }
    char *pos = text, *line, *cells[1];
    char delim = 0;
    int n_fields = 0, lineno = 0;
    int64_t *seen = NULL, n_seen = 0, cap = 0;
    int ok = 1;
    while ((line = bs_tsv_next_line(&pos, &lineno))) {
        if (lineno == 1) {
            delim = bs_tsv_separator(line);
            size_t first = strcspn(line, delim == '\t' ? "\t" : ",");
            int head_ok = first == 10 && strncmp(line, "cluster_id", 10) == 0;
            char shown[61];
            snprintf(shown, sizeof shown, "%s", line);
            n_fields = bs_tsv_split(line, delim, cells, 1);
            if (!head_ok || n_fields < 2) {
                viol(v, name, "no header: line 1 is '%s', expected 'cluster_id%s<field>'", shown,
                     delim == '\t' ? "<TAB>" : ",");
                ok = 0;
                break;
            }
            continue;
        }
        if (line[0] == '\0')
            continue;
        int nf = bs_tsv_split(line, delim, cells, 1);
        if (nf != n_fields) /* reported; the row still names its cluster */
            viol(v, name, "line %d has %d fields, expected %d like the header", lineno, nf, n_fields);
        char *end = NULL;
        errno = 0;
        long long id = strtoll(cells[0], &end, 10);
        if (end == cells[0] || *end != '\0' || errno || id < 0) {
            viol(v, name, "line %d: cluster_id '%s' is not a non-negative integer", lineno, cells[0]);
            continue;
        }
        if (n_seen == cap) {
            cap = cap ? cap * 2 : 256;
            int64_t *p = bs_mem_realloc(seen, "validate/table_ids", (size_t)cap * sizeof(int64_t));
            if (!p) {
                viol(v, name, "%s", bs_last_error());
                ok = 0;
                break;
            }
            seen = p;
        }
        seen[n_seen++] = id;
    }
    free(text);
    if (ok && lineno == 0)
        viol(v, name, "empty file, expected a header 'cluster_id<TAB><field>' and a row per cluster");
    if (ok && seen) {
        qsort(seen, (size_t)n_seen, sizeof *seen, cmp_i64);
        for (int64_t i = 1; i < n_seen; i++)
            if (seen[i] == seen[i - 1]) {
                viol(v, name, "cluster id %" PRId64 " has more than one row, expected one row per cluster", seen[i]);
                break;
            }
    }
    if (ok) {
        int64_t n_missing = 0, first = -1;
        for (int64_t i = 0, j = 0; i < v->n_ids; i++) {
            if (v->ids[i] < 0) /* negative ids are reported with the spike array */
                continue;
            while (j < n_seen && seen[j] < v->ids[i])
                j++;
            if (j >= n_seen || seen[j] != v->ids[i])
                if (!n_missing++)
                    first = v->ids[i];
        }
        if (n_missing)
            viol(v, name,
                 "%" PRId64 " cluster ids of the spikes have no row (SpikeInterface drops those units): first is %" PRId64
                 ", expected a row for every cluster id",
                 n_missing, first);
    }
    bs_mem_free(seen);
}

static void check_tables(vctx *v)
{
    DIR *d = opendir(v->dir);
    if (!d)
        return;
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t L = strlen(e->d_name);
        if (L > 12 && strncmp(e->d_name, "cluster_", 8) == 0 &&
            (strcmp(e->d_name + L - 4, ".tsv") == 0 || strcmp(e->d_name + L - 4, ".csv") == 0))
            if ((names[n] = strdup(e->d_name)))
                n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_name);
    if (n == 0)
        note(v, "no cluster_*.tsv: every unit will be 'unsorted' in Phy and SpikeInterface");
    for (int i = 0; i < n; i++) {
        check_table(v, names[i]);
        free(names[i]);
    }
}

/* phylib loads every other spike_<name>.npy as a per-spike attribute: first dimension S. */
static void check_other_spike_arrays(vctx *v)
{
    if (v->S < 0)
        return;
    DIR *d = opendir(v->dir);
    if (!d)
        return;
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t L = strlen(e->d_name);
        if (L > 10 && strncmp(e->d_name, "spike_", 6) == 0 && strcmp(e->d_name + L - 4, ".npy") == 0 &&
            strcmp(e->d_name, BS_PHY_SPIKE_TIMES) != 0 && strcmp(e->d_name, BS_PHY_SPIKE_TEMPLATES) != 0 &&
            strcmp(e->d_name, BS_PHY_SPIKE_CLUSTERS) != 0)
            if ((names[n] = strdup(e->d_name)))
                n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_name);
    for (int i = 0; i < n; i++) {
        char path[4200], s[256];
        bs_npy_header h;
        if (open_arr(v, names[i], 0, "", &h, path, sizeof path) && (h.ndim < 1 || h.shape[0] != v->S))
            viol(v, names[i], "shape %s, expected %" PRId64 " rows (phylib loads spike_*.npy as one row per spike)",
                 shape_str(&h, s, sizeof s), v->S);
        free(names[i]);
    }
}

bs_status bs_phy_validate_summary(const char *dir, FILE *report, bs_phy_summary *sum)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return bs_error(BS_ERR_INPUT, "%s: cannot open the Phy folder: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return bs_error(BS_ERR_INPUT, "%s: not a folder, expected a Phy folder holding params.py", dir);
    DIR *d = opendir(dir);
    if (!d)
        return bs_error(BS_ERR_INPUT, "%s: cannot read the Phy folder: %s", dir, strerror(errno));
    closedir(d);

    vctx *v = calloc(1, sizeof *v);
    if (!v)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", dir);
    v->dir = dir;
    v->report = report;
    v->n_channels_dat = v->n_samples = v->C = v->T = v->S = v->nt = v->tpl_chan = -1;

    check_params(v);
    check_channels(v);
    check_templates(v);
    check_spike_times(v);
    int has_clusters = bs_phy_has(dir, BS_PHY_SPIKE_CLUSTERS);
    check_spike_ids(v, BS_PHY_SPIKE_TEMPLATES, 1, !has_clusters);
    if (has_clusters)
        check_spike_ids(v, BS_PHY_SPIKE_CLUSTERS, 0, 1);
    check_float_vec(v, BS_PHY_AMPLITUDES, v->S, "the length of spike_times.npy");
    check_pc_features(v);
    check_template_features(v);
    check_other_spike_arrays(v);
    check_tables(v);

    if (sum) {
        sum->n_violations = v->n_viol;
        sum->n_spikes = v->S;
        sum->n_clusters = v->S >= 0 ? v->n_ids : -1;
        sum->n_templates = v->T;
    }
    bs_phy_params_free(&v->params);
    bs_mem_free(v->ids);
    free(v);
    return BS_OK;
}

bs_status bs_phy_validate(const char *dir, FILE *report, int *n_violations)
{
    bs_phy_summary s;
    bs_status st = bs_phy_validate_summary(dir, report, &s);
    if (n_violations)
        *n_violations = st == BS_OK ? s.n_violations : 0;
    return st;
}
