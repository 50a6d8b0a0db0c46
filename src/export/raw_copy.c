/*
 * raw_copy.c - plain binary copies of the recording in the Phy folder, which
 * params.py then names, for Phy's trace and waveform views.
 *
 * `boundsort export-raw OUT` and `sort --export-raw`: recordings Phy cannot
 * read itself (NWB/HDF5: params.py says dat_path = [] and Phy shows no
 * traces or waveforms). OUT/recording.dat holds every column of the file
 * (n_cols: channel_map.npy indexes them) in the recording's own sample type,
 * interleaved, rows [row0, row0 + n_samples) of the sorted window, so
 * spike_times.npy index it directly. It is read in blocks of at most
 * BS_RAW_COPY_BYTES through the recording's row reader (NWB) or pread
 * (plain files).
 *
 * `sort --keep-preprocessed`: the sort's preprocessed recording (float16 µV
 * of the sorted channels: src/preprocess/stage_preprocess.c) as
 * OUT/preprocessed.dat with the raw file's n_cols columns, sorted channel c
 * in column channel_map[c] and the others 0, so channel_map.npy indexes it
 * as it indexes the raw file; hp_filtered = True, so Phy does not filter it
 * again. When the columns are already those (channel_map = 0..C-1 and
 * n_cols = C) the file is moved, else copied block by block with the rows
 * widened.
 *
 * A copy is written under a temporary name and renamed; then params.py is
 * rewritten with dat_path (relative: the folder can move), n_channels_dat,
 * dtype, offset 0 and hp_filtered, its other lines kept. The free space of
 * OUT's file system is checked first (exit 3, as for the sort, with the
 * bytes needed).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "../io/recording.h"
#include "../mem/mem.h"
#include "phy.h"

#define BS_RAW_COPY_BYTES ((size_t)4 << 20) /* one block of rows */

/* The sorted rows of rec to out_dir/name: every column as it is (cols NULL), or rec's column c at column
 * cols[c] of n_out-column rows, the others 0. Then params.py names the file. */
static bs_status copy_rows(const char *out_dir, const char *name, const bs_recording *rec, const int32_t *cols,
                           int n_out, int hp_filtered)
{
    const size_t sb = bs_sample_bytes(rec->dtype), row_bytes = sb * (size_t)rec->n_cols, out_row = sb * (size_t)n_out;
    const uint64_t total = (uint64_t)rec->n_samples * out_row;
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, out_dir, name));
    int64_t free_b = bs_disk_free_bytes(out_dir);
    if (free_b >= 0 && (uint64_t)free_b < total)
        return bs_error(BS_ERR_MEMORY, "%s: the copy needs %llu bytes, the file system has %lld free", path,
                        (unsigned long long)total, (long long)free_b);
    const size_t widest = row_bytes > out_row ? row_bytes : out_row;
    int64_t rows = (int64_t)(BS_RAW_COPY_BYTES / (widest ? widest : 1));
    if (rows < 1)
        rows = 1;
    char *buf = bs_mem_alloc("export/raw-copy", (size_t)rows * row_bytes);
    char *wide = cols ? bs_mem_alloc("export/raw-copy", (size_t)rows * out_row) : NULL;
    if (!buf || (cols && !wide)) {
        bs_mem_free(buf);
        bs_mem_free(wide);
        return BS_ERR_MEMORY;
    }
    if (wide)
        memset(wide, 0, (size_t)rows * out_row); /* the columns no channel fills stay 0 */
    int fd = -1;
    bs_status st = BS_OK;
    if (!rec->read_rows && (fd = open(rec->data_path, O_RDONLY)) < 0)
        st = bs_error(BS_ERR_INPUT, "%s: cannot open the recording: %s", rec->data_path, strerror(errno));
    bs_atomic_file f;
    int f_open = 0;
    if (st == BS_OK) {
        st = bs_atomic_open(&f, path);
        f_open = st == BS_OK;
    }
    for (int64_t r = 0; st == BS_OK && r < rec->n_samples; r += rows) {
        int64_t n = rec->n_samples - r < rows ? rec->n_samples - r : rows;
        if (rec->read_rows)
            st = rec->read_rows(rec, rec->row0 + r, n, buf);
        else if (bs_pread_all(fd, buf, (size_t)n * row_bytes,
                              (off_t)(rec->data_offset + (uint64_t)(rec->row0 + r) * row_bytes)) != 0)
            st = bs_error(BS_ERR_INPUT, "%s: cannot read rows %lld..%lld: %s", rec->data_path, (long long)r,
                          (long long)(r + n), strerror(errno));
        for (int64_t i = 0; st == BS_OK && wide && i < n; i++)
            for (int c = 0; c < rec->n_cols; c++)
                memcpy(wide + (size_t)i * out_row + (size_t)cols[c] * sb,
                       buf + (size_t)i * row_bytes + (size_t)c * sb, sb);
        if (st == BS_OK && fwrite(wide ? wide : buf, out_row, (size_t)n, f.fp) != (size_t)n)
            st = bs_error(BS_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
    if (fd >= 0)
        close(fd);
    bs_mem_free(buf);
    bs_mem_free(wide);
    if (f_open) {
        if (st == BS_OK)
            st = bs_atomic_commit(&f);
        else
            bs_atomic_abort(&f);
    }
    if (st == BS_OK)
        st = bs_phy_set_raw_data(out_dir, name, n_out, bs_sample_type_name(rec->dtype), 0, hp_filtered);
    return st;
}

bs_status bs_export_raw(const char *out_dir, const bs_recording *rec)
{
    return copy_rows(out_dir, BS_PHY_RAW_COPY, rec, NULL, rec->n_cols, 0);
}

/* 1: the stage file of n_chan columns already has the exported layout (cols = 0..n_chan-1, n_cols = n_chan). */
static int same_layout(const int32_t *cols, int n_chan, int n_cols)
{
    int same = n_chan == n_cols;
    for (int c = 0; same && c < n_chan; c++)
        same = cols[c] == c;
    return same;
}

uint64_t bs_export_preprocessed_copy_bytes(const int32_t *cols, int n_chan, int n_cols, int64_t n_samples)
{
    return same_layout(cols, n_chan, n_cols) || n_samples <= 0 ? 0
                                                                : (uint64_t)n_samples * (uint64_t)n_cols * sizeof(uint16_t);
}

bs_status bs_export_preprocessed(const char *out_dir, const bs_recording *pre, const int32_t *cols, int n_cols)
{
    if (pre->read_rows || pre->row0 != 0 || pre->data_offset != 0 || !same_layout(cols, pre->n_cols, n_cols))
        return copy_rows(out_dir, BS_PHY_PREPROCESSED, pre, cols, n_cols, 1);
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, out_dir, BS_PHY_PREPROCESSED));
    if (rename(pre->data_path, path) != 0) {
        if (errno == EXDEV) /* another file system: copied */
            return copy_rows(out_dir, BS_PHY_PREPROCESSED, pre, cols, n_cols, 1);
        return bs_error(BS_ERR_IO, "cannot move %s to %s: %s", pre->data_path, path, strerror(errno));
    }
    return bs_phy_set_raw_data(out_dir, BS_PHY_PREPROCESSED, n_cols, bs_sample_type_name(pre->dtype), 0, 1);
}
