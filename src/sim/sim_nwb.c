/*
 * sim_nwb.c - `boundsort simulate --nwb`: DIR/recording.nwb, the simulated
 * recording as an NWB 2.x file written with the HDF5 C library, so the NWB
 * reader can be checked against the raw binary + probe.json it came from.
 *
 * The file holds the NWB skeleton and electrodes table (export/nwb_write.h;
 * rel_x / rel_y = the probe's contact positions, group_name = "shank<k>"),
 * and /acquisition/ElectricalSeries with
 *   data               int16 (samples x channels): recording.bin's values,
 *                      chunked (8192 samples x 16 channels) and gzip-compressed
 *   data.conversion    2 * uv_per_bit * 1e-6 V per unit (float64)
 *   channel_conversion float32 0.5 per channel, so conversion x
 *                      channel_conversion x 1e6 = uv_per_bit µV exactly
 *   data.offset        0 V;  starting_time 0 s with rate fs_hz (Hz)
 *   electrodes         a DynamicTableRegion over all rows of the table.
 * recording.bin is copied in blocks of 8192 samples (bounded memory). The
 * file is written under a temporary name and renamed when complete; no
 * object modification times are stored and object ids come from the seed,
 * so the same seed gives the same bytes.
 */
#include "simulate.h"

#ifndef BS_HAVE_HDF5
bs_status bs_sim_write_nwb(const char *dir, const bs_sim_params *p, const bs_sim_summary *s)
{
    (void)p, (void)s;
    return bs_error(BS_ERR_INPUT, "%s: this boundsort was built without HDF5, so it cannot write NWB files: install "
                                  "libhdf5-dev and rebuild",
                    dir);
}
#else
#include <stdio.h>
#include <string.h>

#include "../common/fileio.h"
#include "../export/nwb_write.h"
#include "../io/nwb_h5.h"
#include "../mem/mem.h"

#define ROWS 8192 /* samples per copied block and per chunk */

static bs_status write_series(hid_t file, const bs_sim_params *p, const bs_sim_summary *s, const char *bin_path)
{
    const int C = s->n_chan;
    const uint64_t seed = p->seed;
    hid_t acq = H5Gopen2(file, "/acquisition", H5P_DEFAULT);
    hid_t g = acq >= 0 ? bs_h5_group(acq, "ElectricalSeries") : -1;
    if (acq >= 0)
        H5Gclose(acq);
    if (g < 0)
        return BS_ERR_INPUT;
    bs_status st = bs_nwb_mark(g, "core", "ElectricalSeries", seed);
    if (st == BS_OK)
        st = bs_h5_attr_str(g, "description", "simulated extracellular recording (boundsort simulate)");
    if (st == BS_OK)
        st = bs_h5_attr_str(g, "comments", "ground truth in the folder beside this file");
    /* data */
    hid_t d = -1;
    if (st == BS_OK) {
        hsize_t dims[2] = {(hsize_t)s->n_samples, (hsize_t)C}, ch[2] = {ROWS, C < 16 ? (hsize_t)C : 16};
        if (ch[0] > dims[0])
            ch[0] = dims[0] > 0 ? dims[0] : 1;
        hid_t sp = H5Screate_simple(2, dims, NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_obj_track_times(pl, 0);
        if (dims[0] > 0) {
            H5Pset_chunk(pl, 2, ch);
            H5Pset_deflate(pl, 4);
        }
        d = H5Dcreate2(g, "data", H5T_STD_I16LE, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
        H5Pclose(pl);
        H5Sclose(sp);
        if (d < 0)
            st = bs_h5_fail(BS_ERR_INPUT, "%s: cannot create ElectricalSeries/data", bin_path);
    }
    if (st == BS_OK)
        st = bs_h5_attr_num(d, "conversion", H5T_IEEE_F64LE, 2.0 * s->uv_per_bit * 1e-6);
    if (st == BS_OK)
        st = bs_h5_attr_num(d, "offset", H5T_IEEE_F64LE, 0.0);
    if (st == BS_OK)
        st = bs_h5_attr_num(d, "resolution", H5T_IEEE_F64LE, -1.0);
    if (st == BS_OK)
        st = bs_h5_attr_str(d, "unit", "volts");
    /* samples, block by block */
    FILE *fp = st == BS_OK ? fopen(bin_path, "rb") : NULL;
    int16_t *buf = bs_mem_alloc("sim/nwb-block", (size_t)ROWS * (size_t)C * sizeof *buf);
    if (st == BS_OK && (!fp || !buf))
        st = fp ? BS_ERR_MEMORY : bs_error(BS_ERR_INPUT, "%s: cannot open for reading", bin_path);
    for (int64_t t0 = 0; t0 < s->n_samples && st == BS_OK; t0 += ROWS) {
        int64_t n = s->n_samples - t0 < ROWS ? s->n_samples - t0 : ROWS;
        if (fread(buf, sizeof *buf * (size_t)C, (size_t)n, fp) != (size_t)n) {
            st = bs_error(BS_ERR_INPUT, "%s: short read at sample %lld", bin_path, (long long)t0);
            break;
        }
        hsize_t start[2] = {(hsize_t)t0, 0}, cnt[2] = {(hsize_t)n, (hsize_t)C};
        hid_t fs = H5Dget_space(d), ms = H5Screate_simple(2, cnt, NULL);
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
        if (H5Dwrite(d, H5T_NATIVE_INT16, ms, fs, H5P_DEFAULT, buf) < 0)
            st = bs_h5_fail(BS_ERR_INPUT, "ElectricalSeries/data: cannot write samples at %lld", (long long)t0);
        H5Sclose(fs);
        H5Sclose(ms);
    }
    if (fp)
        fclose(fp);
    bs_mem_free(buf);
    if (d >= 0)
        H5Dclose(d);
    /* channel_conversion */
    if (st == BS_OK) {
        float *cc = bs_mem_alloc("sim/nwb-block", (size_t)C * sizeof *cc);
        int64_t *rows = bs_mem_alloc("sim/nwb-block", (size_t)C * sizeof *rows);
        hsize_t n = (hsize_t)C;
        if (!cc || !rows)
            st = BS_ERR_MEMORY;
        for (int c = 0; c < C && st == BS_OK; c++)
            cc[c] = 0.5f, rows[c] = c;
        hid_t x = st == BS_OK ? bs_h5_dataset(g, "channel_conversion", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, &n, 0, cc)
                              : -1;
        if (st == BS_OK && x < 0)
            st = BS_ERR_INPUT;
        if (st == BS_OK)
            st = bs_h5_attr_num(x, "axis", H5T_STD_I32LE, 1);
        if (x >= 0)
            H5Dclose(x);
        x = st == BS_OK ? bs_h5_dataset(g, "electrodes", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &n, 0, rows) : -1;
        if (st == BS_OK && x < 0)
            st = BS_ERR_INPUT;
        if (st == BS_OK)
            st = bs_nwb_mark_column(x, "DynamicTableRegion", "all electrodes of the probe", seed);
        if (st == BS_OK)
            st = bs_h5_attr_ref(x, "table", BS_NWB_ELECTRODES);
        if (x >= 0)
            H5Dclose(x);
        bs_mem_free(cc);
        bs_mem_free(rows);
    }
    /* time base */
    if (st == BS_OK) {
        double zero = 0;
        hid_t x = bs_h5_dataset(g, "starting_time", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, NULL, 0, &zero);
        if (x < 0)
            st = BS_ERR_INPUT;
        if (st == BS_OK)
            st = bs_h5_attr_num(x, "rate", H5T_IEEE_F64LE, p->fs_hz);
        if (st == BS_OK)
            st = bs_h5_attr_str(x, "unit", "seconds");
        if (x >= 0)
            H5Dclose(x);
    }
    H5Gclose(g);
    return st;
}

bs_status bs_sim_write_nwb(const char *dir, const bs_sim_params *p, const bs_sim_summary *s)
{
    char bin[4200], path[4200];
    BS_TRY(bs_path_join(bin, sizeof bin, dir, "recording.bin"));
    BS_TRY(bs_path_join(path, sizeof path, dir, "recording.nwb"));
    bs_probe probe;
    BS_TRY(bs_sim_make_probe(p->probe, &probe));
    bs_atomic_file af;
    bs_status st = bs_atomic_open(&af, path);
    if (st != BS_OK) {
        bs_probe_free(&probe);
        return st;
    }
    bs_h5_quiet();
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    hid_t file = H5Fcreate(af.tmp_path, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
    H5Pclose(fcpl);
    if (file < 0)
        st = bs_h5_fail(BS_ERR_INPUT, "%s: cannot create the HDF5 file", path);
    char id[37], desc[256];
    bs_nwb_uuid(p->seed, "identifier", id);
    snprintf(desc, sizeof desc, "boundsort simulate: probe %s, %d units, %.6g s at %g Hz, seed %llu",
             bs_sim_probe_name(p->probe), p->n_units, (double)s->n_samples / p->fs_hz, p->fs_hz,
             (unsigned long long)p->seed);
    /* a fixed date keeps the file identical for the same seed */
    bs_nwb_file_desc fd = {id, desc, "2024-01-01T00:00:00+00:00", "2024-01-01T00:00:00+00:00", p->seed};
    if (st == BS_OK)
        st = bs_nwb_write_skeleton(file, &fd);
    double *rx = bs_mem_alloc("sim/nwb-block", (size_t)probe.n_chan * 2 * sizeof *rx);
    if (st == BS_OK && !rx)
        st = BS_ERR_MEMORY;
    if (st == BS_OK) {
        for (int c = 0; c < probe.n_chan; c++)
            rx[c] = probe.x_um[c], rx[probe.n_chan + c] = probe.y_um[c];
        bs_nwb_electrodes e = {probe.n_chan, rx, rx + probe.n_chan, probe.shank, probe.n_shanks,
                               bs_sim_probe_name(p->probe), "simulated probe (boundsort simulate)"};
        st = bs_nwb_write_electrodes(file, &e, p->seed);
    }
    bs_mem_free(rx);
    if (st == BS_OK)
        st = write_series(file, p, s, bin);
    if (file >= 0 && H5Fclose(file) < 0 && st == BS_OK)
        st = bs_h5_fail(BS_ERR_INPUT, "%s: cannot close the HDF5 file", path);
    bs_probe_free(&probe);
    if (st != BS_OK) {
        bs_atomic_abort(&af);
        return st;
    }
    return bs_atomic_commit(&af);
}
#endif
