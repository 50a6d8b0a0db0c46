/*
 * source.c - write, parse and reopen OUT/source.json (see source.h).
 */
#include "source.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"

/* Absolute, canonical form of an existing path (realpath), or the path as
 * given when it cannot be resolved. */
static void absolute(const char *path, char *out, size_t len)
{
    char *abs = realpath(path, NULL);
    snprintf(out, len, "%s", abs ? abs : path);
    free(abs);
}

static cJSON *number_or_null(double v, int given)
{
    return given ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

bs_status bs_source_write(const char *out_dir, const char *rec_path, const bs_open_options *opt,
                          const bs_recording *rec)
{
    static const bs_open_options none = {0};
    if (!opt)
        opt = &none;
    char path[4200], rec_abs[4096], probe_abs[4096] = "", data_abs[4096];
    BS_TRY(bs_path_join(path, sizeof path, out_dir, BS_SOURCE_FILE));
    absolute(rec_path, rec_abs, sizeof rec_abs);
    absolute(rec->data_path, data_abs, sizeof data_abs);
    if (opt->probe_path)
        absolute(opt->probe_path, probe_abs, sizeof probe_abs);

    cJSON *o = cJSON_CreateObject();
    cJSON *oo = cJSON_CreateObject();
    if (!o || !oo) {
        cJSON_Delete(o);
        cJSON_Delete(oo);
        return bs_error(BS_ERR_MEMORY, "%s: out of memory building the JSON", path);
    }
    cJSON_AddNumberToObject(o, "format_version", 1);
    cJSON_AddStringToObject(o, "recording", rec_abs);
    cJSON_AddStringToObject(o, "format", rec->format);
    cJSON_AddStringToObject(o, "data_path", data_abs);
    cJSON_AddNumberToObject(o, "data_offset", (double)rec->data_offset);
    cJSON_AddItemToObject(o, "probe", opt->probe_path ? cJSON_CreateString(probe_abs) : cJSON_CreateNull());
    cJSON_AddNumberToObject(o, "fs_hz", rec->fs_hz);
    cJSON_AddNumberToObject(o, "n_chan", rec->probe.n_chan);
    cJSON_AddNumberToObject(o, "n_cols", rec->n_cols);
    cJSON_AddNumberToObject(o, "n_samples", (double)rec->n_samples);
    if (rec->windowed) { /* the part sorted (tmin_s / tmax_s) */
        cJSON *w = cJSON_AddArrayToObject(o, "window");
        cJSON_AddItemToArray(w, cJSON_CreateNumber((double)rec->row0));
        cJSON_AddItemToArray(w, cJSON_CreateNumber((double)(rec->row0 + rec->n_samples)));
    }
    if (rec->n_dropped) /* bad channels the sort dropped */
        cJSON_AddItemToObject(o, "dropped_columns", cJSON_CreateIntArray(rec->dropped_cols, rec->n_dropped));
    cJSON_AddStringToObject(o, "dtype", bs_sample_type_name(rec->dtype));
    cJSON_AddNumberToObject(o, "uv_per_bit", rec->probe.n_chan > 0 && rec->uv_per_bit ? rec->uv_per_bit[0] : 1.0);
    cJSON_AddNumberToObject(o, "offset", rec->offset);
    cJSON_AddNumberToObject(o, "header_bytes", (double)opt->header_bytes);
    cJSON_AddNumberToObject(o, "probe_index", opt->probe_index);
    cJSON_AddItemToObject(o, "stream", rec->stream[0] ? cJSON_CreateString(rec->stream) : cJSON_CreateNull());

    cJSON_AddItemToObject(oo, "probe", opt->probe_path ? cJSON_CreateString(probe_abs) : cJSON_CreateNull());
    cJSON_AddItemToObject(oo, "fs_hz", number_or_null(opt->fs_hz, opt->fs_hz > 0));
    cJSON_AddItemToObject(oo, "n_cols", number_or_null(opt->n_cols, opt->n_cols > 0));
    cJSON_AddItemToObject(oo, "dtype", opt->dtype ? cJSON_CreateString(opt->dtype) : cJSON_CreateNull());
    cJSON_AddItemToObject(oo, "uv_per_bit", number_or_null(opt->uv_per_bit, opt->uv_per_bit > 0));
    cJSON_AddItemToObject(oo, "offset", number_or_null(opt->offset, opt->offset != 0));
    cJSON_AddNumberToObject(oo, "header_bytes", (double)opt->header_bytes);
    cJSON_AddNumberToObject(oo, "probe_index", opt->probe_index);
    cJSON_AddItemToObject(oo, "stream", opt->stream ? cJSON_CreateString(opt->stream) : cJSON_CreateNull());
    cJSON_AddItemToObject(oo, "series", opt->series ? cJSON_CreateString(opt->series) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "open_options", oo);

    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory printing the JSON", path);
    bs_status st = bs_write_file_atomic(path, text, strlen(text));
    free(text);
    return st;
}

/* Optional number field: absent or null leaves *v untouched. */
static bs_status get_number(const cJSON *obj, const char *key, const char *path, double lo, double hi, double *v)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it))
        return BS_OK;
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < lo || it->valuedouble > hi)
        return bs_error(BS_ERR_INPUT, "%s: field '%s': expected a number in [%g, %g]", path, key, lo, hi);
    *v = it->valuedouble;
    return BS_OK;
}

/* Optional string field copied into out; absent or null gives "". */
static bs_status get_string(const cJSON *obj, const char *key, const char *path, char *out, size_t len)
{
    out[0] = '\0';
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it))
        return BS_OK;
    if (!cJSON_IsString(it) || strlen(it->valuestring) >= len)
        return bs_error(BS_ERR_INPUT, "%s: field '%s': expected a string shorter than %zu characters", path, key,
                        len);
    memcpy(out, it->valuestring, strlen(it->valuestring) + 1);
    return BS_OK;
}

static bs_status parse(const cJSON *root, const char *path, bs_source *s)
{
    if (!cJSON_IsObject(root))
        return bs_error(BS_ERR_INPUT, "%s: expected a JSON object", path);
    double version = 0;
    BS_TRY(get_number(root, "format_version", path, 1, 1, &version));
    if (version != 1)
        return bs_error(BS_ERR_INPUT, "%s: field 'format_version': expected 1", path);
    BS_TRY(get_string(root, "recording", path, s->recording, sizeof s->recording));
    if (!s->recording[0])
        return bs_error(BS_ERR_INPUT, "%s: field 'recording': expected the recording's path", path);
    BS_TRY(get_string(root, "format", path, s->format, sizeof s->format));
    BS_TRY(get_number(root, "fs_hz", path, 0, 1e9, &s->fs_hz));
    double n_chan = 0, n_samples = 0;
    BS_TRY(get_number(root, "n_chan", path, 0, 1e7, &n_chan));
    BS_TRY(get_number(root, "n_samples", path, 0, 9e15, &n_samples));
    s->n_chan = (int)n_chan;
    s->n_samples = (int64_t)n_samples;
    s->window[0] = s->window[1] = -1;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(root, "window");
    if (w && !cJSON_IsNull(w)) {
        const cJSON *a = cJSON_GetArrayItem(w, 0), *b = cJSON_GetArrayItem(w, 1);
        if (!cJSON_IsArray(w) || cJSON_GetArraySize(w) != 2 || !cJSON_IsNumber(a) || !cJSON_IsNumber(b) ||
            !(a->valuedouble >= 0) || !(b->valuedouble > a->valuedouble) || b->valuedouble > 9e15)
            return bs_error(BS_ERR_INPUT, "%s: field 'window': expected [first sample, end sample]", path);
        s->window[0] = (int64_t)a->valuedouble;
        s->window[1] = (int64_t)b->valuedouble;
    }
    const cJSON *dc = cJSON_GetObjectItemCaseSensitive(root, "dropped_columns");
    s->n_dropped = 0;
    if (dc && !cJSON_IsNull(dc)) {
        if (!cJSON_IsArray(dc) || cJSON_GetArraySize(dc) > BS_SOURCE_MAX_DROPPED)
            return bs_error(BS_ERR_INPUT, "%s: field 'dropped_columns': expected an array of at most %d columns", path,
                            BS_SOURCE_MAX_DROPPED);
        const cJSON *e;
        cJSON_ArrayForEach(e, dc)
        {
            if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0 && e->valuedouble < 1e7) ||
                e->valuedouble != (double)(int)e->valuedouble)
                return bs_error(BS_ERR_INPUT, "%s: field 'dropped_columns': expected column numbers", path);
            s->dropped[s->n_dropped++] = (int)e->valuedouble;
        }
    }

    const cJSON *oo = cJSON_GetObjectItemCaseSensitive(root, "open_options");
    if (!cJSON_IsObject(oo))
        return bs_error(BS_ERR_INPUT, "%s: field 'open_options': expected an object", path);
    BS_TRY(get_string(oo, "probe", path, s->probe, sizeof s->probe));
    BS_TRY(get_string(oo, "dtype", path, s->dtype, sizeof s->dtype));
    BS_TRY(get_string(oo, "stream", path, s->stream, sizeof s->stream));
    BS_TRY(get_string(oo, "series", path, s->series, sizeof s->series));
    s->opt.stream = s->stream[0] ? s->stream : NULL;
    s->opt.series = s->series[0] ? s->series : NULL;
    double n_cols = 0, header = 0, probe_index = 0;
    BS_TRY(get_number(oo, "fs_hz", path, 0, 1e9, &s->opt.fs_hz));
    BS_TRY(get_number(oo, "n_cols", path, 0, 1e7, &n_cols));
    BS_TRY(get_number(oo, "uv_per_bit", path, 0, 1e12, &s->opt.uv_per_bit));
    BS_TRY(get_number(oo, "offset", path, -1e12, 1e12, &s->opt.offset));
    BS_TRY(get_number(oo, "header_bytes", path, 0, 9e15, &header));
    BS_TRY(get_number(oo, "probe_index", path, 0, 1e6, &probe_index));
    s->opt.n_cols = (int)n_cols;
    s->opt.header_bytes = (uint64_t)header;
    s->opt.probe_index = (int)probe_index;
    s->opt.probe_path = s->probe[0] ? s->probe : NULL;
    if (s->dtype[0]) {
        bs_sample_type t;
        if (bs_sample_type_parse(s->dtype, &t) != BS_OK)
            return bs_error(BS_ERR_INPUT, "%s: field 'open_options.dtype': expected " BS_SAMPLE_TYPE_NAMES,
                            path);
        s->opt.dtype = s->dtype;
    }
    return BS_OK;
}

bs_status bs_source_read(const char *out_dir, bs_source *s)
{
    memset(s, 0, sizeof *s);
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, out_dir, BS_SOURCE_FILE));
    char *text = NULL;
    size_t len = 0;
    bs_status st = bs_read_text_file(path, 1 << 20, &text, &len);
    if (st != BS_OK)
        return bs_error_context(st, "the recording is not known (give it with --recording REC)");
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root)
        return bs_error(BS_ERR_INPUT, "%s: not valid JSON", path);
    st = parse(root, path, s);
    cJSON_Delete(root);
    return st;
}

bs_status bs_source_open(const bs_source *s, bs_recording *rec)
{
    bs_open_options o = s->opt;
    o.fs_unchecked = 1; /* the rate was accepted when sort wrote source.json */
    BS_TRY(bs_recording_open(s->recording, &o, rec));
    if (s->window[0] >= 0) { /* the part the sort read */
        bs_status st = bs_recording_window(rec, s->window[0], s->window[1]);
        if (st != BS_OK) {
            bs_recording_close(rec);
            return bs_error_context(st, "the sort read that part of it: did the recording shrink?");
        }
    }
    if (s->n_dropped) { /* the bad channels the sort dropped */
        bs_status st = bs_recording_drop_columns(rec, s->dropped, s->n_dropped);
        if (st != BS_OK) {
            bs_recording_close(rec);
            return bs_error_context(st, "source.json's dropped_columns do not fit the recording's probe");
        }
    }
    const char *what = NULL;
    if (s->fs_hz > 0 && fabs(rec->fs_hz - s->fs_hz) > 1e-9 * s->fs_hz)
        what = "sampling rate";
    else if (s->n_chan > 0 && rec->probe.n_chan != s->n_chan)
        what = "channel count";
    else if (s->n_samples > 0 && rec->n_samples != s->n_samples)
        what = "length";
    if (what) {
        bs_status st = bs_error(BS_ERR_INPUT,
                                "%s: the recording's %s changed since the sort (now %.6g Hz, %d channels, %lld "
                                "samples; source.json says %.6g Hz, %d channels, %lld samples)",
                                s->recording, what, rec->fs_hz, rec->probe.n_chan, (long long)rec->n_samples,
                                s->fs_hz, s->n_chan, (long long)s->n_samples);
        bs_recording_close(rec);
        return st;
    }
    return BS_OK;
}
