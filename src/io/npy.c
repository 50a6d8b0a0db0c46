/*
 * npy.c - .npy v1.0 header parsing and writing (see npy.h).
 */
#include "npy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mem/mem.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_PREAMBLE 10 /* magic(6) + version(2) + header length(2) */
#define NPY_MAX_HEADER 65535

static const struct {
    bs_npy_dtype dtype;
    const char *descr;
    size_t size;
} dtype_table[] = {
    {BS_NPY_I8, "|i1", 1},  {BS_NPY_U8, "|u1", 1},  {BS_NPY_I16, "<i2", 2}, {BS_NPY_U16, "<u2", 2},
    {BS_NPY_I32, "<i4", 4}, {BS_NPY_U32, "<u4", 4}, {BS_NPY_I64, "<i8", 8}, {BS_NPY_U64, "<u8", 8},
    {BS_NPY_F32, "<f4", 4}, {BS_NPY_F64, "<f8", 8}, {BS_NPY_BOOL, "|b1", 1},
};
#define N_DTYPES (sizeof dtype_table / sizeof dtype_table[0])

size_t bs_npy_dtype_size(bs_npy_dtype dtype)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtype_table[i].dtype == dtype)
            return dtype_table[i].size;
    return 0;
}

const char *bs_npy_dtype_descr(bs_npy_dtype dtype)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtype_table[i].dtype == dtype)
            return dtype_table[i].descr;
    return "?";
}

bs_status bs_npy_count(const bs_npy_header *h, uint64_t *count)
{
    uint64_t n = 1;
    for (int i = 0; i < h->ndim; i++) {
        uint64_t d = (uint64_t)h->shape[i];
        if (d && n > UINT64_MAX / d)
            return bs_error(BS_ERR_INPUT, "npy shape overflows");
        n *= d;
    }
    *count = n;
    return BS_OK;
}

/* ---- header dictionary parser: a bounded cursor over the header text ---- */

typedef struct {
    const char *p, *end;
    const char *name;
} cursor;

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int accept(cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted Python string into out (max outlen-1 chars). */
static bs_status parse_string(cursor *c, char *out, size_t outlen)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return bs_error(BS_ERR_INPUT, "%s: npy header: expected a quoted string", c->name);
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (n + 1 >= outlen)
            return bs_error(BS_ERR_INPUT, "%s: npy header: string too long", c->name);
        out[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return bs_error(BS_ERR_INPUT, "%s: npy header: unterminated string", c->name);
    c->p++;
    out[n] = '\0';
    return BS_OK;
}

static bs_status parse_descr(cursor *c, bs_npy_header *h)
{
    char descr[16];
    BS_TRY(parse_string(c, descr, sizeof descr));
    /* single-byte types may be written with '|', '<' or '=' order marks */
    if (strlen(descr) == 3 && descr[2] == '1' && (descr[0] == '<' || descr[0] == '=' || descr[0] == '>'))
        descr[0] = '|';
    if (descr[0] == '=')
        descr[0] = '<'; /* this code only runs on little-endian hosts */
    for (size_t i = 0; i < N_DTYPES; i++)
        if (strcmp(descr, dtype_table[i].descr) == 0) {
            h->dtype = dtype_table[i].dtype;
            return BS_OK;
        }
    return bs_error(BS_ERR_INPUT, "%s: npy header: unsupported descr '%s' (expected a little-endian int, uint, float or bool)",
                    c->name, descr);
}

static bs_status parse_bool(cursor *c, int *v)
{
    skip_ws(c);
    size_t left = (size_t)(c->end - c->p);
    if (left >= 4 && memcmp(c->p, "True", 4) == 0) {
        c->p += 4;
        *v = 1;
        return BS_OK;
    }
    if (left >= 5 && memcmp(c->p, "False", 5) == 0) {
        c->p += 5;
        *v = 0;
        return BS_OK;
    }
    return bs_error(BS_ERR_INPUT, "%s: npy header: fortran_order must be True or False", c->name);
}

static bs_status parse_shape(cursor *c, bs_npy_header *h)
{
    if (!accept(c, '('))
        return bs_error(BS_ERR_INPUT, "%s: npy header: shape must be a tuple", c->name);
    h->ndim = 0;
    for (;;) {
        if (accept(c, ')'))
            return BS_OK;
        skip_ws(c);
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return bs_error(BS_ERR_INPUT, "%s: npy header: shape holds a non-integer", c->name);
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                return bs_error(BS_ERR_INPUT, "%s: npy header: dimension too large", c->name);
            v = v * 10 + (*c->p++ - '0');
        }
        if (c->p < c->end && *c->p == 'L')
            c->p++;
        if (h->ndim == BS_NPY_MAX_DIMS)
            return bs_error(BS_ERR_INPUT, "%s: npy header: more than %d dimensions", c->name, BS_NPY_MAX_DIMS);
        h->shape[h->ndim++] = v;
        if (accept(c, ')'))
            return BS_OK;
        if (!accept(c, ','))
            return bs_error(BS_ERR_INPUT, "%s: npy header: expected ',' or ')' in shape", c->name);
    }
}

bs_status bs_npy_parse_header(const uint8_t *buf, size_t len, const char *name, bs_npy_header *h)
{
    memset(h, 0, sizeof *h);
    if (len < NPY_PREAMBLE || memcmp(buf, NPY_MAGIC, 6) != 0)
        return bs_error(BS_ERR_INPUT, "%s: not an .npy file (bad magic)", name);
    unsigned major = buf[6];
    size_t hlen;
    size_t pre;
    if (major == 1) {
        hlen = (size_t)buf[8] | ((size_t)buf[9] << 8);
        pre = NPY_PREAMBLE;
    } else if (major == 2 || major == 3) {
        if (len < 12)
            return bs_error(BS_ERR_INPUT, "%s: truncated npy header", name);
        hlen = (size_t)buf[8] | ((size_t)buf[9] << 8) | ((size_t)buf[10] << 16) | ((size_t)buf[11] << 24);
        pre = 12;
    } else {
        return bs_error(BS_ERR_INPUT, "%s: unsupported npy version %u.%u", name, major, (unsigned)buf[7]);
    }
    if (hlen > len - pre)
        return bs_error(BS_ERR_INPUT, "%s: truncated npy header (%zu bytes declared, %zu present)", name, hlen,
                        len - pre);
    cursor c = {(const char *)buf + pre, (const char *)buf + pre + hlen, name};
    int have_descr = 0, have_order = 0, have_shape = 0;
    if (!accept(&c, '{'))
        return bs_error(BS_ERR_INPUT, "%s: npy header is not a dict", name);
    while (!accept(&c, '}')) {
        char key[32];
        BS_TRY(parse_string(&c, key, sizeof key));
        if (!accept(&c, ':'))
            return bs_error(BS_ERR_INPUT, "%s: npy header: expected ':' after '%s'", name, key);
        if (strcmp(key, "descr") == 0) {
            BS_TRY(parse_descr(&c, h));
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            BS_TRY(parse_bool(&c, &h->fortran_order));
            have_order = 1;
        } else if (strcmp(key, "shape") == 0) {
            BS_TRY(parse_shape(&c, h));
            have_shape = 1;
        } else {
            return bs_error(BS_ERR_INPUT, "%s: npy header: unknown key '%s'", name, key);
        }
        if (!accept(&c, ',')) {
            if (!accept(&c, '}'))
                return bs_error(BS_ERR_INPUT, "%s: npy header: expected ',' or '}'", name);
            break;
        }
    }
    if (!have_descr || !have_order || !have_shape)
        return bs_error(BS_ERR_INPUT, "%s: npy header lacks '%s'", name,
                        !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
    if (h->fortran_order && h->ndim > 1)
        return bs_error(BS_ERR_INPUT, "%s: Fortran-ordered npy arrays are not supported", name);
    h->data_offset = pre + hlen;
    uint64_t count = 0;
    BS_TRY(bs_npy_count(h, &count));
    if (count > UINT64_MAX / 8)
        return bs_error(BS_ERR_INPUT, "%s: npy array too large", name);
    return BS_OK;
}

bs_status bs_npy_read_header(const char *path, bs_npy_header *h)
{
    FILE *fp;
    BS_TRY(bs_fopen_input(path, &fp));
    uint8_t pre[12];
    size_t got = fread(pre, 1, sizeof pre, fp);
    size_t need = NPY_PREAMBLE;
    if (got >= 10 && pre[6] == 1)
        need = NPY_PREAMBLE + ((size_t)pre[8] | ((size_t)pre[9] << 8));
    else if (got >= 12 && (pre[6] == 2 || pre[6] == 3))
        need = 12 + ((size_t)pre[8] | ((size_t)pre[9] << 8) | ((size_t)pre[10] << 16) | ((size_t)pre[11] << 24));
    if (need > (1u << 24)) {
        fclose(fp);
        return bs_error(BS_ERR_INPUT, "%s: npy header too large", path);
    }
    uint8_t *buf = malloc(need > got ? need : got);
    if (!buf) {
        fclose(fp);
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", path);
    }
    memcpy(buf, pre, got);
    size_t more = need > got ? fread(buf + got, 1, need - got, fp) : 0;
    fclose(fp);
    bs_status st = bs_npy_parse_header(buf, got + more, path, h);
    free(buf);
    if (st != BS_OK)
        return st;
    uint64_t count = 0, fsize = 0;
    BS_TRY(bs_npy_count(h, &count));
    BS_TRY(bs_file_size(path, &fsize));
    uint64_t data = count * bs_npy_dtype_size(h->dtype);
    if (fsize < h->data_offset || fsize - h->data_offset < data)
        return bs_error(BS_ERR_INPUT, "%s: truncated npy file: %" PRIu64 " data bytes expected, %" PRIu64 " present",
                        path, data, fsize < h->data_offset ? 0 : fsize - h->data_offset);
    return BS_OK;
}

bs_status bs_npy_load(const char *path, const char *tag, bs_npy_header *h, void **data)
{
    *data = NULL;
    BS_TRY(bs_npy_read_header(path, h));
    uint64_t count = 0;
    BS_TRY(bs_npy_count(h, &count));
    size_t bytes = (size_t)count * bs_npy_dtype_size(h->dtype);
    void *buf = bs_mem_alloc(tag, bytes);
    if (!buf)
        return bs_error_context(BS_ERR_MEMORY, "%s", path);
    FILE *fp = NULL;
    if (bs_fopen_input(path, &fp) != BS_OK || fseek(fp, (long)h->data_offset, SEEK_SET) != 0 || fread(buf, 1, bytes, fp) != bytes) {
        if (fp)
            fclose(fp);
        bs_mem_free(buf);
        return bs_error(BS_ERR_INPUT, "%s: read error", path);
    }
    fclose(fp);
    *data = buf;
    return BS_OK;
}

bs_status bs_npy_load_expect(const char *path, const char *tag, bs_npy_dtype dtype, int ndim, bs_npy_header *h,
                             void **data)
{
    *data = NULL;
    BS_TRY(bs_npy_read_header(path, h));
    if (h->dtype != dtype)
        return bs_error(BS_ERR_INPUT, "%s: dtype is %s, expected %s", path, bs_npy_dtype_descr(h->dtype),
                        bs_npy_dtype_descr(dtype));
    if (ndim >= 0 && h->ndim != ndim)
        return bs_error(BS_ERR_INPUT, "%s: has %d dimensions, expected %d", path, h->ndim, ndim);
    return bs_npy_load(path, tag, h, data);
}

/* Header text for a shape; `reserve` pads as if every dimension had 20 digits. */
static size_t format_header(char *out, size_t outlen, bs_npy_dtype dtype, int ndim, const int64_t *shape, int reserve)
{
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", bs_npy_dtype_descr(dtype));
    for (int i = 0; i < ndim; i++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%" PRId64 "%s", shape[i], ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    size_t dict_len = (size_t)n;
    size_t widest = dict_len;
    if (reserve)
        for (int i = 0; i < ndim; i++) {
            char digits[24];
            widest += 20 - (size_t)snprintf(digits, sizeof digits, "%" PRId64, shape[i]);
        }
    size_t total = (NPY_PREAMBLE + widest + 1 + 63) / 64 * 64;
    if (total > outlen)
        return 0;
    size_t hlen = total - NPY_PREAMBLE;
    memcpy(out, NPY_MAGIC, 6);
    out[6] = 1;
    out[7] = 0;
    out[8] = (char)(hlen & 0xff);
    out[9] = (char)(hlen >> 8);
    memcpy(out + NPY_PREAMBLE, dict, dict_len);
    memset(out + NPY_PREAMBLE + dict_len, ' ', hlen - dict_len - 1);
    out[total - 1] = '\n';
    return total;
}

bs_status bs_npy_writer_open(bs_npy_writer *w, const char *path, bs_npy_dtype dtype, int ndim,
                             const int64_t *row_shape)
{
    memset(w, 0, sizeof *w);
    if (ndim < 1 || ndim > BS_NPY_MAX_DIMS)
        return bs_error(BS_ERR_INTERNAL, "%s: npy writer needs 1..%d dimensions", path, BS_NPY_MAX_DIMS);
    w->dtype = dtype;
    w->ndim = ndim;
    w->row_bytes = bs_npy_dtype_size(dtype);
    for (int i = 1; i < ndim; i++) {
        w->shape[i] = row_shape[i - 1];
        w->row_bytes *= (size_t)row_shape[i - 1];
    }
    char header[1024];
    w->header_bytes = format_header(header, sizeof header, dtype, ndim, w->shape, 1);
    if (!w->header_bytes)
        return bs_error(BS_ERR_INTERNAL, "%s: npy header too long", path);
    BS_TRY(bs_atomic_open(&w->file, path));
    if (fwrite(header, 1, w->header_bytes, w->file.fp) != w->header_bytes) {
        bs_atomic_abort(&w->file);
        return bs_error(BS_ERR_IO, "%s: write failed", path);
    }
    return BS_OK;
}

bs_status bs_npy_writer_append(bs_npy_writer *w, const void *rows, int64_t n_rows)
{
    if (n_rows <= 0)
        return BS_OK;
    size_t bytes = (size_t)n_rows * w->row_bytes;
    if (bytes && fwrite(rows, 1, bytes, w->file.fp) != bytes)
        return bs_error(BS_ERR_IO, "%s: write failed: %s", w->file.path, strerror(errno));
    w->shape[0] += n_rows;
    return BS_OK;
}

bs_status bs_npy_writer_close(bs_npy_writer *w)
{
    char header[1024];
    /* Same reserved width as at open, so the data offset does not move. */
    size_t total = format_header(header, sizeof header, w->dtype, w->ndim, w->shape, 0);
    if (total > w->header_bytes) {
        bs_atomic_abort(&w->file);
        return bs_error(BS_ERR_INTERNAL, "%s: npy header grew", w->file.path);
    }
    /* pad the dict out to the reserved size */
    size_t hlen = w->header_bytes - NPY_PREAMBLE;
    header[8] = (char)(hlen & 0xff);
    header[9] = (char)(hlen >> 8);
    memset(header + total - 1, ' ', w->header_bytes - total + 1);
    header[w->header_bytes - 1] = '\n';
    if (fseek(w->file.fp, 0, SEEK_SET) != 0 || fwrite(header, 1, w->header_bytes, w->file.fp) != w->header_bytes) {
        int err = errno;
        bs_atomic_abort(&w->file);
        return bs_error(BS_ERR_IO, "%s: rewriting the npy header failed: %s", w->file.path, strerror(err ? err : EIO));
    }
    return bs_atomic_commit(&w->file);
}

void bs_npy_writer_abort(bs_npy_writer *w) { bs_atomic_abort(&w->file); }

bs_status bs_npy_save(const char *path, bs_npy_dtype dtype, int ndim, const int64_t *shape, const void *data)
{
    bs_npy_writer w;
    if (ndim < 1)
        return bs_error(BS_ERR_INTERNAL, "%s: npy save needs at least one dimension", path);
    BS_TRY(bs_npy_writer_open(&w, path, dtype, ndim, shape + 1));
    bs_status st = bs_npy_writer_append(&w, data, shape[0]);
    if (st != BS_OK) {
        bs_npy_writer_abort(&w);
        return st;
    }
    return bs_npy_writer_close(&w);
}
