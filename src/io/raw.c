/*
 * raw.c - a raw interleaved binary described by the caller (bs_open_options)
 * and a probe file (JSON, probe_json.h, or .prb, prb.h).
 *
 * Layout: header_bytes bytes (skipped), then n_samples rows of n_cols values
 * of one sample type (little-endian), time-major: sample t of column c is at
 * header_bytes + (t * n_cols + c) * sample_bytes. The probe file says
 * which columns are probe channels and where they sit.
 * n_cols is opt->n_cols, or the number of columns the probe file requires
 * (Kilosort n_chan, else the largest device index + 1). n_samples comes from
 * the real file size, which must be header_bytes plus a whole number of rows;
 * an empty data part is accepted (n_samples = 0, zero batches).
 *
 * Scaling to µV: (raw - offset) * uv_per_bit, one uv_per_bit for all channels
 * (opt->uv_per_bit, 0 -> 1.0). offset is opt->offset, except that uint16 data
 * with opt->offset == 0 gets 32768: an unsigned ADC's zero is its mid-scale,
 * as Kilosort assumes for uint16 files.
 *
 * A raw folder (bs_raw_folder_open) is the same binary with its description
 * beside it, as `boundsort simulate` writes it: DIR/recording.bin, DIR/
 * recording.json and DIR/probe.json (or DIR/probe.prb). recording.json gives
 * fs_hz (Hz, required) and optionally n_chan (columns per sample), dtype,
 * uv_per_bit (µV per raw unit), offset (raw units), header_bytes (bytes) and
 * n_samples (samples per channel: checked against the file size, so a
 * truncated copy is refused); its other fields are ignored. Options given by
 * the caller override the folder field by field: probe_path replaces
 * probe.json, and fs_hz, n_cols, dtype, uv_per_bit, offset and header_bytes
 * replace recording.json's values when set (non-zero, non-NULL: so an offset
 * or header size of 0 cannot override a non-zero one in recording.json).
 * The merged options are then read by bs_raw_open, so a folder and its
 * recording.bin opened with the same options give the same bs_recording.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "../mem/mem.h"
#include "prb.h"
#include "recording.h"

bs_status bs_sample_type_parse(const char *text, bs_sample_type *t)
{
    static const struct {
        const char *a, *b;
        bs_sample_type t;
    } names[] = {{"int16", "i2", BS_SAMPLE_I16},
                 {"uint16", "u2", BS_SAMPLE_U16},
                 {"int32", "i4", BS_SAMPLE_I32},
                 {"float32", "f4", BS_SAMPLE_F32},
                 {"float16", "f2", BS_SAMPLE_F16}};
    if (!text) {
        *t = BS_SAMPLE_I16;
        return BS_OK;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(text, names[i].a) == 0 || strcasecmp(text, names[i].b) == 0) {
            *t = names[i].t;
            return BS_OK;
        }
    return bs_error(BS_ERR_USAGE, "dtype: expected " BS_SAMPLE_TYPE_NAMES ", got '%s'", text);
}

const char *bs_sample_type_name(bs_sample_type t)
{
    switch (t) {
    case BS_SAMPLE_I16: return "int16";
    case BS_SAMPLE_U16: return "uint16";
    case BS_SAMPLE_I32: return "int32";
    case BS_SAMPLE_F32: return "float32";
    case BS_SAMPLE_F16: return "float16";
    }
    return "unknown";
}

bs_status bs_raw_open(const char *path, const bs_open_options *opt, bs_recording *rec)
{
    memset(rec, 0, sizeof *rec);
    if (!opt || !opt->probe_path)
        return bs_error(BS_ERR_INPUT, "%s: a raw binary needs a probe file (--probe): expected probeinterface or "
                                      "Kilosort JSON, or .prb",
                        path);
    if (strlen(path) >= sizeof rec->data_path)
        return bs_error(BS_ERR_INPUT, "%s: path longer than %zu bytes", path, sizeof rec->data_path - 1);
    if (!(opt->fs_hz > 0) || !isfinite(opt->fs_hz))
        return bs_error(BS_ERR_INPUT, "%s: sampling rate (--fs): expected a rate > 0 Hz, got %g", path, opt->fs_hz);
    bs_sample_type t = BS_SAMPLE_I16;
    bs_status st = bs_sample_type_parse(opt->dtype, &t);
    if (st != BS_OK)
        return bs_error_context(BS_ERR_INPUT, "%s", path);
    double uvpb = opt->uv_per_bit == 0 ? 1.0 : opt->uv_per_bit;
    if (!(uvpb > 0) || !isfinite(uvpb) || (float)uvpb == 0.0f || !isfinite((float)uvpb))
        return bs_error(BS_ERR_INPUT, "%s: uv_per_bit (--uv-per-bit): expected a finite value > 0, got %g", path,
                        opt->uv_per_bit);
    if (!isfinite(opt->offset) || !isfinite((float)opt->offset))
        return bs_error(BS_ERR_INPUT, "%s: offset: expected a finite number of raw units, got %g", path, opt->offset);
    if (t != BS_SAMPLE_F32) { /* the largest scaled integer (or float16, at most 65504) must fit a float32 */
        double max_raw = t == BS_SAMPLE_I32 ? 2147483648.0 : 65536.0;
        if ((max_raw + fabs(opt->offset)) * uvpb >= FLT_MAX)
            return bs_error(BS_ERR_INPUT,
                            "%s: uv_per_bit (--uv-per-bit) %g with offset %g: expected scaled %s values to fit a "
                            "float32",
                            path, uvpb, opt->offset, bs_sample_type_name(t));
    }
    if (opt->n_cols < 0)
        return bs_error(BS_ERR_INPUT, "%s: n_chan (--n-chan): expected the number of columns >= 1, got %d", path,
                        opt->n_cols);

    uint64_t size;
    BS_TRY(bs_file_size(path, &size));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return bs_error(BS_ERR_INPUT, "%s: cannot open for reading: %s", path, strerror(errno));
    close(fd);

    int required = 0;
    BS_TRY(bs_probe_file_load(opt->probe_path, opt->probe_index, &rec->probe, &required));
    int n_cols = opt->n_cols > 0 ? opt->n_cols : required;
    st = bs_probe_validate(&rec->probe, n_cols, opt->probe_path);
    if (st != BS_OK) {
        bs_error_context(st, "%s with %d columns per sample", path, n_cols);
        goto fail;
    }
    size_t sb = bs_sample_bytes(t);
    uint64_t row = (uint64_t)n_cols * sb;
    if (size < opt->header_bytes) {
        st = bs_error(BS_ERR_INPUT, "%s: file has %llu bytes, fewer than the %llu header bytes to skip", path,
                      (unsigned long long)size, (unsigned long long)opt->header_bytes);
        goto fail;
    }
    uint64_t data = size - opt->header_bytes;
    if (data % row != 0) {
        st = bs_error(BS_ERR_INPUT,
                      "%s: %llu data bytes is not a multiple of the sample size %d columns x %zu bytes = %llu bytes "
                      "(remainder %llu bytes): check the column count (--n-chan), dtype and header size",
                      path, (unsigned long long)data, n_cols, sb, (unsigned long long)row,
                      (unsigned long long)(data % row));
        goto fail;
    }
    rec->uv_per_bit = bs_mem_alloc("io/recording", (size_t)rec->probe.n_chan * sizeof *rec->uv_per_bit);
    if (!rec->uv_per_bit) {
        st = BS_ERR_MEMORY;
        goto fail;
    }
    for (int c = 0; c < rec->probe.n_chan; c++)
        rec->uv_per_bit[c] = (float)uvpb;
    snprintf(rec->data_path, sizeof rec->data_path, "%s", path);
    snprintf(rec->format, sizeof rec->format, "raw");
    rec->dtype = t;
    rec->n_cols = n_cols;
    rec->data_offset = opt->header_bytes;
    rec->n_samples = (int64_t)(data / row);
    rec->fs_hz = opt->fs_hz;
    rec->offset = (t == BS_SAMPLE_U16 && opt->offset == 0) ? 32768.0f : (float)opt->offset;
    rec->first_sample = 0;
    return BS_OK;
fail:
    bs_probe_free(&rec->probe);
    bs_mem_free(rec->uv_per_bit);
    memset(rec, 0, sizeof *rec);
    return st;
}

/* ---- raw folder: recording.bin + recording.json + probe.json / probe.prb ---- */

#define RAW_FOLDER_BIN "recording.bin"
#define RAW_FOLDER_JSON "recording.json"
#define RAW_FOLDER_JSON_MAX_BYTES ((size_t)1 << 26)

int bs_raw_folder_detect(const char *path)
{
    struct stat st;
    char bin[4200];
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
           bs_path_join(bin, sizeof bin, path, RAW_FOLDER_BIN) == BS_OK && bs_is_file(bin);
}

/* What recording.json says (0 / "" / -1 where it says nothing). */
typedef struct {
    double fs_hz;        /* Hz */
    int n_cols;          /* "n_chan": columns per sample, 0 if absent */
    char dtype[16];      /* "" if absent */
    double uv_per_bit;   /* µV per raw unit, 0 if absent */
    double offset;       /* raw units */
    uint64_t header;     /* bytes */
    int64_t n_samples;   /* samples per channel, -1 if absent */
} raw_folder_json;

/* A whole number in [lo, hi]. */
static int is_count(const cJSON *v, double lo, double hi)
{
    return cJSON_IsNumber(v) && v->valuedouble >= lo && v->valuedouble <= hi &&
           v->valuedouble == floor(v->valuedouble);
}

/* "a string 'x'", "a number 3", "true", ...: what a field holds, for messages. */
static void describe(const cJSON *v, char *buf, size_t len)
{
    if (cJSON_IsString(v))
        snprintf(buf, len, "the string '%.40s'", v->valuestring);
    else if (cJSON_IsNumber(v))
        snprintf(buf, len, "%.17g", v->valuedouble);
    else if (cJSON_IsBool(v))
        snprintf(buf, len, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNull(v))
        snprintf(buf, len, "null");
    else
        snprintf(buf, len, "%s", cJSON_IsArray(v) ? "a list" : "an object");
}

static bs_status bad_field(const char *path, const char *field, const char *want, const cJSON *v)
{
    char got[96];
    describe(v, got, sizeof got);
    return bs_error(BS_ERR_INPUT, "%s: field '%s': expected %s, got %s", path, field, want, got);
}

static bs_status parse_folder_json(const char *path, raw_folder_json *j)
{
    memset(j, 0, sizeof *j);
    j->n_samples = -1;
    if (!bs_is_file(path))
        return bs_error(BS_ERR_INPUT, "%s: missing: a raw recording.bin needs recording.json (fs_hz) beside it", path);
    char *text = NULL;
    size_t len = 0;
    BS_TRY(bs_read_text_file(path, RAW_FOLDER_JSON_MAX_BYTES, &text, &len));
    cJSON *r = cJSON_ParseWithLength(text, len);
    free(text);
    if (!r || !cJSON_IsObject(r)) {
        cJSON_Delete(r);
        return bs_error(BS_ERR_INPUT, "%s: expected a JSON object (with fs_hz): the file is %s", path,
                        r ? "not an object" : "not valid JSON (truncated?)");
    }
    const cJSON *fs = cJSON_GetObjectItemCaseSensitive(r, "fs_hz");
    const cJSON *nc = cJSON_GetObjectItemCaseSensitive(r, "n_chan");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(r, "dtype");
    const cJSON *uv = cJSON_GetObjectItemCaseSensitive(r, "uv_per_bit");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(r, "offset");
    const cJSON *hb = cJSON_GetObjectItemCaseSensitive(r, "header_bytes");
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(r, "n_samples");
    bs_status st = BS_OK;
    bs_sample_type t;
    if (!fs)
        st = bs_error(BS_ERR_INPUT, "%s: field 'fs_hz': missing: expected the sampling rate in Hz", path);
    else if (!cJSON_IsNumber(fs) || !(fs->valuedouble > 0) || !isfinite(fs->valuedouble))
        st = bad_field(path, "fs_hz", "a sampling rate > 0 Hz", fs);
    else if (nc && !is_count(nc, 1, 1e6))
        st = bad_field(path, "n_chan", "a whole number of columns >= 1", nc);
    else if (dt && (!cJSON_IsString(dt) || strlen(dt->valuestring) >= sizeof j->dtype ||
                    bs_sample_type_parse(dt->valuestring, &t) != BS_OK))
        st = bad_field(path, "dtype", BS_SAMPLE_TYPE_NAMES, dt);
    else if (uv && (!cJSON_IsNumber(uv) || !(uv->valuedouble > 0) || !isfinite(uv->valuedouble)))
        st = bad_field(path, "uv_per_bit", "a number > 0 (µV per raw unit)", uv);
    else if (off && (!cJSON_IsNumber(off) || !isfinite(off->valuedouble)))
        st = bad_field(path, "offset", "a number of raw units", off);
    else if (hb && !is_count(hb, 0, 9e15))
        st = bad_field(path, "header_bytes", "a whole number of bytes >= 0", hb);
    else if (ns && !is_count(ns, 0, 9e15))
        st = bad_field(path, "n_samples", "a whole number of samples >= 0", ns);
    if (st == BS_OK) {
        j->fs_hz = fs->valuedouble;
        j->n_cols = nc ? (int)nc->valuedouble : 0;
        if (dt)
            snprintf(j->dtype, sizeof j->dtype, "%s", dt->valuestring);
        j->uv_per_bit = uv ? uv->valuedouble : 0;
        j->offset = off ? off->valuedouble : 0;
        j->header = hb ? (uint64_t)hb->valuedouble : 0;
        j->n_samples = ns ? (int64_t)ns->valuedouble : -1;
    }
    cJSON_Delete(r);
    return st;
}

/* recording.json's n_chan must hold every column the probe reads. */
static bs_status check_folder_columns(const char *json_path, const char *probe_path, int probe_index, int n_cols)
{
    bs_probe p;
    int required = 0;
    BS_TRY(bs_probe_file_load(probe_path, probe_index, &p, &required));
    int max_col = -1, ch = 0;
    for (int c = 0; c < p.n_chan; c++)
        if (p.column[c] > max_col) {
            max_col = p.column[c];
            ch = c;
        }
    bs_probe_free(&p);
    if (max_col >= n_cols)
        return bs_error(BS_ERR_INPUT,
                        "%s: field 'n_chan': expected at least %d columns per sample (%s maps channel %d to column "
                        "%d), got %d",
                        json_path, max_col + 1, probe_path, ch, max_col, n_cols);
    return BS_OK;
}

bs_status bs_raw_folder_open(const char *dir, const bs_open_options *opt, bs_recording *rec)
{
    static const bs_open_options none = {0};
    memset(rec, 0, sizeof *rec);
    if (!opt)
        opt = &none;
    char bin[4200], json[4200], found[4200] = "";
    const char *probe = opt->probe_path;
    BS_TRY(bs_path_join(bin, sizeof bin, dir, RAW_FOLDER_BIN));
    BS_TRY(bs_path_join(json, sizeof json, dir, RAW_FOLDER_JSON));
    if (!bs_is_file(bin))
        return bs_error(BS_ERR_INPUT, "%s: missing: a raw folder holds recording.bin, recording.json and probe.json "
                                      "(or probe.prb)",
                        bin);
    raw_folder_json j;
    BS_TRY(parse_folder_json(json, &j));
    if (!probe) {
        static const char *const names[] = {"probe.json", "probe.prb"};
        for (int i = 0; i < 2 && !found[0]; i++)
            if (bs_path_join(found, sizeof found, dir, names[i]) != BS_OK || !bs_is_file(found))
                found[0] = '\0';
        probe = found;
        if (!found[0])
            return bs_error(BS_ERR_INPUT, "%s: a raw recording.bin needs probe.json or probe.prb beside it (or --probe P)",
                            dir);
    }
    bs_open_options o = *opt; /* the caller's options win; recording.json fills the rest */
    o.probe_path = probe;
    if (!(o.fs_hz > 0))
        o.fs_hz = j.fs_hz;
    if (o.n_cols <= 0) {
        o.n_cols = j.n_cols;
        if (j.n_cols > 0)
            BS_TRY(check_folder_columns(json, probe, o.probe_index, j.n_cols));
    }
    if (!o.dtype && j.dtype[0])
        o.dtype = j.dtype;
    if (o.uv_per_bit == 0)
        o.uv_per_bit = j.uv_per_bit;
    if (o.offset == 0)
        o.offset = j.offset;
    if (o.header_bytes == 0)
        o.header_bytes = j.header;
    BS_TRY(bs_raw_open(bin, &o, rec));
    int layout_as_json = !opt->n_cols && !opt->dtype && !opt->header_bytes;
    if (j.n_samples >= 0 && layout_as_json && rec->n_samples != j.n_samples) {
        int64_t have = rec->n_samples;
        bs_recording_close(rec);
        return bs_error(BS_ERR_INPUT,
                        "%s: holds %lld samples per channel, but %s says n_samples %lld: a truncated or mismatched "
                        "copy",
                        bin, (long long)have, json, (long long)j.n_samples);
    }
    return BS_OK;
}
