/*
 * report_io.c - the report's streaming JSON writer.
 *
 * rp_json writes JSON straight to the page's file as it goes: a stack of
 * "a value was already written at this level" flags decides the commas.
 * Strings are escaped for JSON and every '<' becomes \u003c, so no string can
 * close the <script type="application/json"> element that holds the data.
 * Bulk arrays are written as {"dtype", "n", "b64"}: little-endian bytes in
 * base64 (4 characters per 3 bytes), which the page turns back into a typed
 * array; that is 2-4x smaller than decimal text and parses at memory speed.
 */
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/fileio.h"
#include "../mem/mem.h"
#include "report_internal.h"

/* ---- JSON ---- */

static void put_str(FILE *fp, const char *s)
{
    fputc('"', fp);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        if (c == '"' || c == '\\')
            fprintf(fp, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", fp);
        else if (c == '\t')
            fputs("\\t", fp);
        else if (c < 0x20 || c == '<' || c == '>' || c == '&')
            fprintf(fp, "\\u%04x", c);
        else
            fputc(c, fp);
    }
    fputc('"', fp);
}

static void begin_value(rp_json *j, const char *key)
{
    if (j->comma[j->depth])
        fputc(',', j->fp);
    j->comma[j->depth] = 1;
    if (key) {
        put_str(j->fp, key);
        fputc(':', j->fp);
    }
}

static void open_level(rp_json *j, const char *key, char c)
{
    begin_value(j, key);
    fputc(c, j->fp);
    if (j->depth + 1 < (int)sizeof j->comma)
        j->depth++;
    j->comma[j->depth] = 0;
}

void rpj_obj(rp_json *j, const char *key) { open_level(j, key, '{'); }
void rpj_arr(rp_json *j, const char *key) { open_level(j, key, '['); }

void rpj_end_obj(rp_json *j)
{
    fputc('}', j->fp);
    if (j->depth > 0)
        j->depth--;
}

void rpj_end_arr(rp_json *j)
{
    fputc(']', j->fp);
    if (j->depth > 0)
        j->depth--;
}

void rpj_num(rp_json *j, const char *key, double v)
{
    begin_value(j, key);
    if (isfinite(v))
        fprintf(j->fp, "%.7g", v);
    else
        fputs("null", j->fp);
}

void rpj_int(rp_json *j, const char *key, int64_t v)
{
    begin_value(j, key);
    fprintf(j->fp, "%lld", (long long)v);
}

void rpj_str(rp_json *j, const char *key, const char *s)
{
    begin_value(j, key);
    if (s)
        put_str(j->fp, s);
    else
        fputs("null", j->fp);
}

void rpj_bool(rp_json *j, const char *key, int v)
{
    begin_value(j, key);
    fputs(v ? "true" : "false", j->fp);
}

void rpj_null(rp_json *j, const char *key)
{
    begin_value(j, key);
    fputs("null", j->fp);
}

static size_t dtype_bytes(const char *dtype)
{
    if (strcmp(dtype, "u8") == 0 || strcmp(dtype, "i8") == 0)
        return 1;
    if (strcmp(dtype, "u16") == 0 || strcmp(dtype, "i16") == 0)
        return 2;
    return 4; /* u32, i32, f32 */
}

static void put_base64(FILE *fp, const unsigned char *b, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char out[4 * 1024];
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)b[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)b[i + 1] << 8;
        if (i + 2 < n)
            v |= b[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
        if (o == sizeof out) {
            fwrite(out, 1, o, fp);
            o = 0;
        }
    }
    fwrite(out, 1, o, fp);
}

void rpj_typed(rp_json *j, const char *key, const char *dtype, const void *data, size_t n)
{
    rpj_obj(j, key);
    rpj_str(j, "dtype", dtype);
    rpj_int(j, "n", (int64_t)n);
    begin_value(j, "b64");
    fputc('"', j->fp);
    if (n)
        put_base64(j->fp, data, n * dtype_bytes(dtype));
    fputc('"', j->fp);
    rpj_end_obj(j);
}

void rpj_counts(rp_json *j, const char *key, const uint32_t *c, size_t n)
{
    uint32_t mx = 0;
    for (size_t i = 0; i < n; i++)
        mx = c[i] > mx ? c[i] : mx;
    if (mx > 65535 || n == 0) {
        rpj_typed(j, key, "u32", c, n);
        return;
    }
    /* repack as u16 in place-sized chunks (no bulk copy) */
    rpj_obj(j, key);
    rpj_str(j, "dtype", "u16");
    rpj_int(j, "n", (int64_t)n);
    begin_value(j, "b64");
    fputc('"', j->fp);
    uint16_t chunk[3 * 1024]; /* a multiple of 3 bytes per chunk keeps base64 groups aligned */
    for (size_t i = 0; i < n; i += 3 * 1024) {
        size_t m = n - i < 3 * 1024 ? n - i : 3 * 1024;
        for (size_t k = 0; k < m; k++)
            chunk[k] = (uint16_t)c[i + k];
        put_base64(j->fp, (const unsigned char *)chunk, m * 2);
    }
    fputc('"', j->fp);
    rpj_end_obj(j);
}

void rpj_floats(rp_json *j, const char *key, const float *v, size_t n)
{
    rpj_arr(j, key);
    for (size_t i = 0; i < n; i++)
        rpj_num(j, NULL, v[i]);
    rpj_end_arr(j);
}

void rpj_doubles(rp_json *j, const char *key, const double *v, size_t n)
{
    rpj_arr(j, key);
    for (size_t i = 0; i < n; i++)
        rpj_num(j, NULL, v[i]);
    rpj_end_arr(j);
}
