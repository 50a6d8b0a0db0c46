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
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
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
                 {"float32", "f4", BS_SAMPLE_F32}};
    if (!text) {
        *t = BS_SAMPLE_I16;
        return BS_OK;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(text, names[i].a) == 0 || strcasecmp(text, names[i].b) == 0) {
            *t = names[i].t;
            return BS_OK;
        }
    return bs_error(BS_ERR_USAGE, "dtype: expected int16, uint16, int32 or float32, got '%s'", text);
}

const char *bs_sample_type_name(bs_sample_type t)
{
    switch (t) {
    case BS_SAMPLE_I16: return "int16";
    case BS_SAMPLE_U16: return "uint16";
    case BS_SAMPLE_I32: return "int32";
    case BS_SAMPLE_F32: return "float32";
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
    if (t != BS_SAMPLE_F32) { /* the largest scaled integer must fit a float32 */
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
