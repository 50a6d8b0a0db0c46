/*
 * raw_copy.c - a plain binary copy of the sorted recording in the Phy folder,
 * for recordings Phy cannot read itself (NWB/HDF5: params.py says dat_path =
 * [] and Phy shows no traces or waveforms). `boundsort export-raw OUT` and
 * `sort --export-raw`.
 *
 * OUT/recording.dat holds every column of the file (n_cols: channel_map.npy
 * indexes them) in the recording's own sample type, interleaved, rows
 * [row0, row0 + n_samples) of the sorted window, so spike_times.npy index it
 * directly. It is read in blocks of at most BS_RAW_COPY_BYTES through the
 * recording's row reader (NWB) or pread (plain files), written under a
 * temporary name and renamed; then params.py is rewritten with dat_path =
 * 'recording.dat' (relative: the folder can move), n_channels_dat, dtype and
 * offset 0, its other lines kept. The free space of OUT's file system is
 * checked first (exit 3, as for the sort, with the bytes needed).
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

bs_status bs_export_raw(const char *out_dir, const bs_recording *rec)
{
    const size_t sb = bs_sample_bytes(rec->dtype), row_bytes = sb * (size_t)rec->n_cols;
    const uint64_t total = (uint64_t)rec->n_samples * row_bytes;
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, out_dir, BS_PHY_RAW_COPY));
    int64_t free_b = bs_disk_free_bytes(out_dir);
    if (free_b >= 0 && (uint64_t)free_b < total)
        return bs_error(BS_ERR_MEMORY, "%s: the raw copy needs %llu bytes, the file system has %lld free", path,
                        (unsigned long long)total, (long long)free_b);
    int64_t rows = (int64_t)(BS_RAW_COPY_BYTES / (row_bytes ? row_bytes : 1));
    if (rows < 1)
        rows = 1;
    void *buf = bs_mem_alloc("export/raw-copy", (size_t)rows * row_bytes);
    if (!buf)
        return BS_ERR_MEMORY;
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
        if (st == BS_OK && fwrite(buf, row_bytes, (size_t)n, f.fp) != (size_t)n)
            st = bs_error(BS_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
    if (fd >= 0)
        close(fd);
    bs_mem_free(buf);
    if (f_open) {
        if (st == BS_OK)
            st = bs_atomic_commit(&f);
        else
            bs_atomic_abort(&f);
    }
    if (st == BS_OK)
        st = bs_phy_set_raw_data(out_dir, BS_PHY_RAW_COPY, rec->n_cols, bs_sample_type_name(rec->dtype), 0);
    return st;
}
