/*
 * recording.c - bs_recording_open: choose a reader for REC, and
 * bs_recording_close.
 *
 * Dispatch, in order: self-describing formats first (each one `if` that tests
 * the path and calls its reader: NWB by its HDF5 signature or .nwb name, a
 * raw folder by the recording.bin it holds: raw.c reads its recording.json
 * and probe file, the caller's options overriding them), then a raw binary
 * when the caller gave a probe file: a probe file given on the command line wins (it describes a
 * raw binary, or overrides a SpikeGLX .meta's geometry); otherwise a SpikeGLX
 * folder, .bin with its .meta, or .meta is read by the SpikeGLX reader.
 * An Open Ephys recording is recognised by its own paths (openephys.h) and
 * takes a probe file as its geometry.
 * Anything else is refused with a message that says what was expected.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../mem/mem.h"
#include "nwb.h"
#include "openephys.h"
#include "recording.h"
#include "spikeglx.h"

/* A folder, a file "X.meta", or a file "X.bin" with "X.meta" beside it. */
static int looks_like_spikeglx(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 0;
    if (S_ISDIR(st.st_mode))
        return 1;
    size_t n = strlen(path);
    if (n >= 5 && strcmp(path + n - 5, ".meta") == 0)
        return 1;
    if (n < 4 || strcmp(path + n - 4, ".bin") != 0)
        return 0;
    char meta[4200];
    if (snprintf(meta, sizeof meta, "%.*s.meta", (int)(n - 4), path) >= (int)sizeof meta)
        return 0;
    return stat(meta, &st) == 0 && S_ISREG(st.st_mode);
}

static bs_status open_format(const char *path, const bs_open_options *opt, bs_recording *rec)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return bs_error(BS_ERR_INPUT, "%s: cannot open the recording: %s", path, strerror(errno));

    if (bs_nwb_looks_like(path)) {
        if (opt && opt->probe_path)
            return bs_error(BS_ERR_USAGE, "%s: an NWB file carries its own geometry (electrodes table rel_x/rel_y): "
                                          "--probe is for raw binaries", path);
        return bs_nwb_open(path, opt ? opt->series : NULL, rec);
    }
    if (bs_raw_folder_detect(path))
        return bs_raw_folder_open(path, opt, rec);
    if (bs_openephys_detect(path))
        return bs_openephys_open(path, opt, rec);
    if (opt && opt->probe_path)
        return bs_raw_open(path, opt, rec);
    if (looks_like_spikeglx(path))
        return bs_spikeglx_open(path, rec);
    return bs_error(BS_ERR_INPUT,
                    "%s: unrecognised recording: expected an NWB file, an Open Ephys recording, a SpikeGLX .bin "
                    "with its .meta, a raw folder (recording.bin + recording.json + probe.json), or a raw binary "
                    "with a probe file (--probe P --fs HZ)",
                    path);
}

bs_status bs_recording_open(const char *path, const bs_open_options *opt, bs_recording *rec)
{
    memset(rec, 0, sizeof *rec);
    BS_TRY(open_format(path, opt, rec));
    if ((rec->fs_hz < BS_FS_MIN_HZ || rec->fs_hz > BS_FS_MAX_HZ) && !(opt && opt->fs_unchecked)) {
        double fs = rec->fs_hz;
        bs_recording_close(rec);
        return bs_error(BS_ERR_INPUT,
                        "%s: sampling rate %.6g Hz is outside the plausible %.0f Hz to %.0f Hz; if it is right, "
                        "give it as --fs-unchecked HZ",
                        path, fs, BS_FS_MIN_HZ, BS_FS_MAX_HZ);
    }
    return BS_OK;
}

bs_status bs_recording_window(bs_recording *rec, int64_t start, int64_t end)
{
    if (start < 0 || end > rec->n_samples || end <= start)
        return bs_error(BS_ERR_INPUT,
                        "%s: samples [%lld, %lld) (%.6g to %.6g s) are not a part of the recording, which has %lld "
                        "samples (%.6g s)",
                        rec->data_path, (long long)start, (long long)end, (double)start / rec->fs_hz,
                        (double)end / rec->fs_hz, (long long)rec->n_samples, (double)rec->n_samples / rec->fs_hz);
    rec->row0 += start;
    rec->first_sample += start;
    rec->n_samples = end - start;
    rec->windowed = 1;
    return BS_OK;
}

bs_status bs_recording_drop_channels(bs_recording *rec, const uint8_t *drop)
{
    bs_probe *p = &rec->probe;
    int n = 0, nd = 0;
    for (int c = 0; c < p->n_chan; c++)
        nd += drop[c] != 0;
    if (nd == 0)
        return BS_OK;
    if (nd >= p->n_chan)
        return bs_error(BS_ERR_INPUT, "%s: every channel would be dropped", rec->data_path);
    int *cols = bs_mem_alloc("io/probe", (size_t)(rec->n_dropped + nd) * sizeof(int));
    if (!cols)
        return BS_ERR_MEMORY;
    if (rec->n_dropped)
        memcpy(cols, rec->dropped_cols, (size_t)rec->n_dropped * sizeof(int));
    int m = rec->n_dropped;
    int *new_id = bs_mem_alloc("io/probe", (size_t)(p->n_shanks > 0 ? p->n_shanks : 1) * sizeof(int));
    if (!new_id) {
        bs_mem_free(cols);
        return BS_ERR_MEMORY;
    }
    for (int c = 0; c < p->n_chan; c++) {
        if (drop[c]) {
            cols[m++] = p->column[c];
            continue;
        }
        p->column[n] = p->column[c];
        p->x_um[n] = p->x_um[c];
        p->y_um[n] = p->y_um[c];
        p->shank[n] = p->shank[c];
        if (p->adc_shift)
            p->adc_shift[n] = p->adc_shift[c];
        if (rec->uv_per_bit)
            rec->uv_per_bit[n] = rec->uv_per_bit[c];
        n++;
    }
    p->n_chan = n;
    /* shanks left without a channel: the others renumbered in order */
    int ns = 0;
    for (int s = 0; s < p->n_shanks; s++) {
        new_id[s] = -1;
        for (int c = 0; c < n && new_id[s] < 0; c++)
            if (p->shank[c] == s)
                new_id[s] = ns++;
    }
    for (int c = 0; c < n; c++)
        p->shank[c] = new_id[p->shank[c]];
    p->n_shanks = ns;
    bs_mem_free(new_id);
    bs_mem_free(rec->dropped_cols);
    rec->dropped_cols = cols;
    rec->n_dropped = m;
    return BS_OK;
}

bs_status bs_recording_drop_columns(bs_recording *rec, const int *cols, int n_cols)
{
    uint8_t *drop = bs_mem_calloc("io/probe", (size_t)rec->probe.n_chan, 1);
    if (!drop)
        return BS_ERR_MEMORY;
    for (int i = 0; i < n_cols; i++) {
        int c = 0;
        while (c < rec->probe.n_chan && rec->probe.column[c] != cols[i])
            c++;
        if (c == rec->probe.n_chan) {
            bs_mem_free(drop);
            return bs_error(BS_ERR_INPUT, "%s: column %d is not a channel of the probe", rec->data_path, cols[i]);
        }
        drop[c] = 1;
    }
    bs_status st = bs_recording_drop_channels(rec, drop);
    bs_mem_free(drop);
    return st;
}

void bs_recording_close(bs_recording *rec)
{
    if (!rec)
        return;
    if (rec->close_source)
        rec->close_source(rec);
    bs_mem_free(rec->dropped_cols);
    bs_mem_free(rec->uv_per_bit);
    bs_probe_free(&rec->probe);
    memset(rec, 0, sizeof *rec);
}
