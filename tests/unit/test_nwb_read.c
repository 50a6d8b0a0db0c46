/*
 * test_nwb_read.c - the NWB reader on small files written here with the
 * HDF5 C library: µV values through the batch reader for chunked + gzip
 * int16 (conversion, channel_conversion, a permuted electrodes region),
 * float64 with an offset, int32 and timestamps; geometry and shanks;
 * choosing among several series; and the exact message for each malformed
 * file. Also the NWB export's grouping of spikes by unit with a tiny spike
 * buffer (several passes, a unit larger than the buffer) and its mean
 * waveforms. Skipped (77) when the build has no HDF5.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/io/batch.h"
#include "../../src/io/nwb.h"
#include "../../src/mem/mem.h"
#include "test.h"

#ifndef BS_HAVE_HDF5
int main(void)
{
    bs_recording rec;
    CHECK(bs_nwb_open("x.nwb", NULL, &rec) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "built without HDF5") != NULL);
    printf("no HDF5 in this build: NWB file tests skipped\n");
    return 77;
}
#else
#include <hdf5.h>

#include "../../src/export/nwb_export.h"
#include "../../src/export/nwb_write.h"
#include "../../src/io/npy.h"
#include "../../src/io/nwb_h5.h"

enum { T = 1000, C = 6 };

typedef struct {
    hid_t ftype, mtype;  /* data type in the file / of `data` */
    const void *data;    /* T x C */
    int rank;            /* of data (2 normally) */
    int chunk;           /* chunk rows (0: contiguous) */
    double conversion, offset; /* NAN: attribute absent */
    const float *cc;     /* channel_conversion (NULL: absent) */
    int n_cc;
    int time;            /* 0 starting_time + rate, 1 no rate attr, 2 timestamps, 3 neither */
    double rate, start;
    int electrodes;      /* 0 region with table ref, 1 absent, 2 region without ref (fallback path) */
    const int64_t *rows; /* region (C rows) */
    const char *drop;    /* electrodes-table column to delete, or NULL */
    const char *name;    /* series name under /acquisition */
} series_spec;

static const double RX[C] = {0, 32, 0, 32, 250, 282}, RY[C] = {0, 0, 20, 20, 40, 40};
static const int GRP[C] = {0, 0, 0, 0, 1, 1};
static const int64_t PERM[C] = {5, 4, 3, 2, 1, 0};

static void write_series(hid_t f, const series_spec *s)
{
    hid_t acq = H5Gopen2(f, "/acquisition", H5P_DEFAULT);
    hid_t g = bs_h5_group(acq, s->name);
    bs_nwb_mark(g, "core", "ElectricalSeries", 7);
    hsize_t dims[3] = {T, C, 2};
    if (s->rank == 1)
        dims[0] = T * C;
    hid_t d = bs_h5_dataset(g, "data", s->ftype, s->mtype, s->rank, dims, (hsize_t)s->chunk, s->data);
    if (!isnan(s->conversion))
        bs_h5_attr_num(d, "conversion", H5T_IEEE_F64LE, s->conversion);
    if (!isnan(s->offset))
        bs_h5_attr_num(d, "offset", H5T_IEEE_F64LE, s->offset);
    H5Dclose(d);
    if (s->cc) {
        hsize_t n = (hsize_t)s->n_cc;
        H5Dclose(bs_h5_dataset(g, "channel_conversion", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, &n, 0, s->cc));
    }
    if (s->time <= 1) {
        d = bs_h5_dataset(g, "starting_time", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, NULL, 0, &s->start);
        if (s->time == 0)
            bs_h5_attr_num(d, "rate", H5T_IEEE_F64LE, s->rate);
        H5Dclose(d);
    } else if (s->time == 2) {
        double ts[T];
        for (int i = 0; i < T; i++)
            ts[i] = s->start + i / s->rate;
        hsize_t n = T;
        H5Dclose(bs_h5_dataset(g, "timestamps", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &n, 100, ts));
    }
    if (s->electrodes != 1) {
        hsize_t n = C;
        d = bs_h5_dataset(g, "electrodes", H5T_STD_I32LE, H5T_NATIVE_INT64, 1, &n, 0, s->rows ? s->rows : PERM);
        bs_nwb_mark_column(d, "DynamicTableRegion", "electrodes", 7);
        if (s->electrodes == 0)
            bs_h5_attr_ref(d, "table", BS_NWB_ELECTRODES);
        H5Dclose(d);
    }
    H5Gclose(g);
    H5Gclose(acq);
}

/* A file with the skeleton, the 6-electrode table and n series. */
static void write_file(const char *path, const series_spec *s, int n)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    bs_nwb_file_desc fd = {"id", "test", "2024-01-01T00:00:00+00:00", "2024-01-01T00:00:00+00:00", 7};
    CHECK(bs_nwb_write_skeleton(f, &fd) == BS_OK);
    bs_nwb_electrodes e = {C, RX, RY, GRP, 2, "probe", "test probe"};
    CHECK(bs_nwb_write_electrodes(f, &e, 7) == BS_OK);
    for (int i = 0; i < n; i++) {
        write_series(f, &s[i]);
        if (s[i].drop) {
            char p[256];
            snprintf(p, sizeof p, "%s/%s", BS_NWB_ELECTRODES, s[i].drop);
            H5Ldelete(f, p, H5P_DEFAULT);
        }
    }
    H5Fclose(f);
}

static int16_t D16[T * C];
static double D64[T * C];
static int32_t D32[T * C];
static const float CCV[C] = {0.5f, 1.0f, 2.0f, 0.25f, 1.5f, 1.0f};

static series_spec base(void)
{
    series_spec s = {H5T_STD_I16LE, H5T_NATIVE_INT16, D16, 2, 128, 2e-6, NAN, CCV, C, 0, 30000, 0.25, 0, NULL, NULL,
                     "es"};
    return s;
}

static char g_dir[4096];
static const char *tmp_path(const char *name)
{
    static char p[4200];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    return p;
}

/* Batch reader windows equal value(t, c) for every sample. */
static void check_values(const bs_recording *rec, double (*value)(int t, int c), double tol)
{
    bs_batch_reader r;
    CHECK(bs_batch_reader_open(&r, rec, 300, 7, 4096) == BS_OK);
    double worst = 0;
    for (int64_t b = 0; b < r.n_batches; b++) {
        float *w;
        int64_t nv;
        CHECK(bs_batch_read(&r, b, &w, &nv) == BS_OK);
        for (int c = 0; c < rec->probe.n_chan; c++)
            for (int64_t j = 0; j < nv; j++) {
                double e = fabs(w[(size_t)c * r.width + r.halo + j] - value((int)(b * 300 + j), c));
                worst = e > worst ? e : worst;
            }
    }
    CHECK_MSG(worst <= tol, "largest error %g µV", worst);
    bs_batch_reader_close(&r);
}

static double v16(int t, int c) { return D16[t * C + c] * 2e-6 * CCV[c] * 1e6; }
static double v64(int t, int c) { return (D64[t * C + c] * 1e-3 + 5e-5) * 1e6; }
static double v32(int t, int c) { return D32[t * C + c] * 1e-7 * 1e6; }

static void test_read(void)
{
    for (int i = 0; i < T * C; i++) {
        D16[i] = (int16_t)((i * 7919) % 20001 - 10000);
        D64[i] = sin(i * 0.01) * 0.1;
        D32[i] = (int32_t)((i * 104729) % 2000001 - 1000000);
    }
    series_spec s = base();
    write_file(tmp_path("a.nwb"), &s, 1);
    bs_recording rec;
    bs_open_options opt = {0};
    CHECK(bs_recording_open(tmp_path("a.nwb"), &opt, &rec) == BS_OK);
    CHECK(strcmp(rec.format, "nwb") == 0 && rec.n_samples == T && rec.n_cols == C && rec.dtype == BS_SAMPLE_I16);
    CHECK_NEAR(rec.fs_hz, 30000, 0);
    CHECK(rec.first_sample == 7500);
    for (int c = 0; c < C; c++) {
        CHECK_NEAR(rec.uv_per_bit[c], 2.0 * CCV[c], 1e-6);
        CHECK_NEAR(rec.probe.x_um[c], RX[PERM[c]], 0); /* rel_x of the region's row, not x */
        CHECK_NEAR(rec.probe.y_um[c], RY[PERM[c]], 0);
    }
    /* rows 5..0: groups shank1 first -> shank index 0 for rows 5, 4 */
    CHECK(rec.probe.n_shanks == 2 && rec.probe.shank[0] == 0 && rec.probe.shank[2] == 1);
    const bs_nwb_info *info = bs_nwb_get_info(&rec);
    CHECK(info && strcmp(info->series, "/acquisition/es") == 0 && info->n_series == 1);
    CHECK(info && strcmp(info->electrodes, BS_NWB_ELECTRODES) == 0 && info->electrode_row[0] == 5);
    check_values(&rec, v16, 1e-2); /* values up to 4e4 µV: float32 steps of 4e-3 */
    int64_t smp[2] = {0, 300};
    double ts[2];
    CHECK(bs_nwb_sample_times(&rec, smp, 2, ts) == BS_OK);
    CHECK_NEAR(ts[0], 0.25, 0);
    CHECK_NEAR(ts[1], 0.25 + 0.01, 1e-12);
    /* a window (sort's tmin_s): sample 0 is the window's first, times stay the recording's */
    CHECK(bs_recording_window(&rec, 100, T) == BS_OK && rec.n_samples == T - 100 && rec.row0 == 100);
    CHECK(rec.first_sample == 7600);
    CHECK(bs_nwb_sample_times(&rec, smp, 2, ts) == BS_OK);
    CHECK_NEAR(ts[0], 0.25 + 100 / 30000.0, 1e-12);
    CHECK_NEAR(ts[1], 0.25 + 400 / 30000.0, 1e-12);
    CHECK(bs_recording_window(&rec, 0, T) != BS_OK); /* past the (window's) end */
    bs_recording_close(&rec);

    /* float64 volts with an offset; no channel_conversion; region without a table reference */
    s = base();
    s.ftype = H5T_IEEE_F64LE, s.mtype = H5T_NATIVE_DOUBLE, s.data = D64, s.conversion = 1e-3, s.offset = 5e-5;
    s.cc = NULL, s.electrodes = 2, s.chunk = 0;
    write_file(tmp_path("f64.nwb"), &s, 1);
    CHECK(bs_recording_open(tmp_path("f64.nwb"), &opt, &rec) == BS_OK);
    CHECK(rec.dtype == BS_SAMPLE_F32);
    check_values(&rec, v64, 1e-2);
    bs_recording_close(&rec);

    /* int32, timestamps */
    s = base();
    s.ftype = H5T_STD_I32LE, s.mtype = H5T_NATIVE_INT32, s.data = D32, s.conversion = 1e-7, s.cc = NULL, s.time = 2;
    s.rate = 25000, s.start = 3.0;
    write_file(tmp_path("i32.nwb"), &s, 1);
    CHECK(bs_recording_open(tmp_path("i32.nwb"), &opt, &rec) == BS_OK);
    CHECK(rec.dtype == BS_SAMPLE_I32);
    CHECK_NEAR(rec.fs_hz, 25000, 1e-3);
    check_values(&rec, v32, 2e-2); /* values up to 1e5 µV: float32 steps of 8e-3 */
    smp[1] = 999;
    CHECK(bs_nwb_sample_times(&rec, smp, 2, ts) == BS_OK);
    CHECK_NEAR(ts[0], 3.0, 0);
    CHECK_NEAR(ts[1], 3.0 + 999 / 25000.0, 0);
    double t5[2];
    int64_t s5[2] = {5, 6};
    CHECK(bs_nwb_sample_times(&rec, s5, 2, t5) == BS_OK);
    CHECK(bs_recording_window(&rec, 5, rec.n_samples) == BS_OK); /* timestamps of a window: row0 + sample */
    smp[1] = 1;
    CHECK(bs_nwb_sample_times(&rec, smp, 2, ts) == BS_OK);
    CHECK(ts[0] == t5[0] && ts[1] == t5[1]);
    bs_recording_close(&rec);

    /* two series: --series by name or path */
    series_spec two[2] = {base(), base()};
    two[1].name = "lfp", two[1].rate = 2500, two[1].cc = NULL;
    write_file(tmp_path("two.nwb"), two, 2);
    opt.series = "lfp";
    CHECK(bs_recording_open(tmp_path("two.nwb"), &opt, &rec) == BS_OK);
    CHECK_NEAR(rec.fs_hz, 2500, 0);
    info = bs_nwb_get_info(&rec);
    CHECK(info && info->n_series == 2 && strcmp(info->series, "/acquisition/lfp") == 0);
    bs_recording_close(&rec);
    opt.series = "/acquisition/es";
    CHECK(bs_recording_open(tmp_path("two.nwb"), &opt, &rec) == BS_OK);
    CHECK_NEAR(rec.fs_hz, 30000, 0);
    bs_recording_close(&rec);
}

/* Opening must fail with exit code 2 and exactly `want` ("%s" = the path). */
static void expect_bad(const char *name, const char *series, const char *want, int prefix_only)
{
    char full[8192];
    const char *path = tmp_path(name);
    snprintf(full, sizeof full, want, path, path);
    bs_recording rec;
    bs_open_options opt = {0};
    opt.series = series;
    bs_status st = bs_recording_open(path, &opt, &rec);
    CHECK_MSG(st == BS_ERR_INPUT, "%s: status %d", name, st);
    int same = prefix_only ? strncmp(bs_last_error(), full, strlen(full)) == 0 : strcmp(bs_last_error(), full) == 0;
    CHECK_MSG(same, "%s:\n  got      '%s'\n  expected '%s'", name, bs_last_error(), full);
}

static void test_malformed(void)
{
    FILE *fp = fopen(tmp_path("text.nwb"), "w");
    fputs("this is not an HDF5 file\n", fp);
    fclose(fp);
    expect_bad("text.nwb", NULL, "%s: not an HDF5 file (no HDF5 signature): expected an NWB 2.x file", 0);

    write_file(tmp_path("none.nwb"), NULL, 0);
    expect_bad("none.nwb", NULL,
               "%s: no ElectricalSeries: expected a group with neurodata_type 'ElectricalSeries' under /acquisition "
               "or /processing",
               0);

    series_spec s = base();
    s.rank = 1, s.chunk = 0;
    write_file(tmp_path("rank1.nwb"), &s, 1);
    expect_bad("rank1.nwb", NULL, "%s: /acquisition/es/data: expected 2 dimensions (time x channels), got 1", 0);

    s = base();
    s.electrodes = 1;
    write_file(tmp_path("noel.nwb"), &s, 1);
    expect_bad("noel.nwb", NULL,
               "%s: /acquisition/es/electrodes is missing: expected the region of the electrodes table (one row per "
               "data column)",
               0);

    s = base();
    s.drop = "rel_x";
    write_file(tmp_path("norelx.nwb"), &s, 1);
    expect_bad("norelx.nwb", NULL,
               "%s: electrodes table: column 'rel_x' is missing: expected the contact positions on the probe (rel_x, "
               "rel_y, µm); x/y/z are brain coordinates, not probe geometry",
               0);

    s = base();
    s.time = 1;
    write_file(tmp_path("norate.nwb"), &s, 1);
    expect_bad("norate.nwb", NULL,
               "%s: /acquisition/es/starting_time: attribute 'rate' is missing: expected the sampling rate in Hz", 0);

    s = base();
    s.rate = 0;
    write_file(tmp_path("rate0.nwb"), &s, 1);
    expect_bad("rate0.nwb", NULL,
               "%s: /acquisition/es/starting_time: attribute 'rate': expected a sampling rate > 0 Hz, got 0", 0);

    s = base();
    s.rate = NAN;
    write_file(tmp_path("ratenan.nwb"), &s, 1);
    expect_bad("ratenan.nwb", NULL,
               "%s: /acquisition/es/starting_time: attribute 'rate': expected a sampling rate > 0 Hz, got nan", 0);

    s = base();
    s.time = 3;
    write_file(tmp_path("notime.nwb"), &s, 1);
    expect_bad("notime.nwb", NULL,
               "%s: /acquisition/es: no starting_time (with its rate) and no timestamps: expected one of them to know "
               "the sampling rate",
               0);

    s = base();
    s.n_cc = 4;
    write_file(tmp_path("cc.nwb"), &s, 1);
    expect_bad("cc.nwb", NULL, "%s: /acquisition/es/channel_conversion: expected one factor per data column (6), got 4",
               0);

    s = base();
    s.ftype = H5T_STD_U32LE, s.mtype = H5T_NATIVE_INT32, s.data = D32;
    write_file(tmp_path("u32.nwb"), &s, 1);
    expect_bad("u32.nwb", NULL,
               "%s: /acquisition/es/data: expected int8, uint8, int16, uint16, int32, float32 or float64 samples, got "
               "unsigned integer of 4 bytes",
               0);

    static const int64_t OUT[C] = {0, 1, 2, 3, 4, 9};
    s = base();
    s.rows = OUT;
    write_file(tmp_path("row9.nwb"), &s, 1);
    expect_bad("row9.nwb", NULL, "%s: /acquisition/es/electrodes[5]: expected a row of the electrodes table (0..5), got 9",
               0);

    series_spec two[2] = {base(), base()};
    two[1].name = "lfp";
    write_file(tmp_path("two.nwb"), two, 2);
    expect_bad("two.nwb", NULL,
               "%s: 2 ElectricalSeries (/acquisition/es, /acquisition/lfp): choose one with --series NAME", 0);
    expect_bad("two.nwb", "raw",
               "%s: --series 'raw': no such ElectricalSeries; the file has: /acquisition/es, /acquisition/lfp", 0);

    /* truncated: the first 60% of a valid file */
    write_file(tmp_path("full.nwb"), (series_spec[]){base()}, 1);
    FILE *in = fopen(tmp_path("full.nwb"), "rb");
    fseek(in, 0, SEEK_END);
    long n = ftell(in);
    fseek(in, 0, SEEK_SET);
    char *buf = malloc((size_t)n);
    CHECK(fread(buf, 1, (size_t)n, in) == (size_t)n);
    fclose(in);
    FILE *out = fopen(tmp_path("trunc.nwb"), "wb");
    fwrite(buf, 1, (size_t)(n * 6 / 10), out);
    fclose(out);
    free(buf);
    expect_bad("trunc.nwb", NULL, "%s: cannot open the HDF5 file (truncated or damaged?)", 1);
}

/* A whole dataset into buf: 1 on success. */
static int read_all(hid_t f, const char *path, hid_t type, void *buf)
{
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    int ok = d >= 0 && H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0;
    if (d >= 0)
        H5Dclose(d);
    return ok;
}

/* The export on a hand-made Phy folder: 3 units, buffer of 2 spikes. */
static void test_export(void)
{
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/phy", g_dir);
    CHECK(system("true") == 0);
    snprintf(path, sizeof path, "mkdir -p '%s'", dir);
    CHECK(system(path) == 0);
    /* spikes: unit 7 has 4 (more than the buffer), units 2 and 3 one each */
    int64_t t[6] = {10, 20, 30, 40, 50, 60};
    int32_t clu[6] = {7, 2, 7, 3, 7, 7}, tpl[6] = {0, 1, 0, 1, 1, 0};
    int64_t n6 = 6, shp[3];
#define SAVE(name, dt, nd, data)                                                                                      \
    do {                                                                                                              \
        snprintf(path, sizeof path, "%s/%s", dir, name);                                                              \
        CHECK(bs_npy_save(path, dt, nd, shp, data) == BS_OK);                                                         \
    } while (0)
    shp[0] = n6;
    SAVE("spike_times.npy", BS_NPY_I64, 1, t);
    SAVE("spike_clusters.npy", BS_NPY_I32, 1, clu);
    SAVE("spike_templates.npy", BS_NPY_I32, 1, tpl);
    enum { NT = 5, NC = 3 };
    float tm[2 * NT * NC], winv[NC * NC] = {2, 0, 0, 0, 1, 0, 0, 0, 1}, pos[NC * 2] = {0, 0, 0, 20, 0, 40};
    for (int i = 0; i < 2 * NT * NC; i++)
        tm[i] = (float)((i * 37) % 11) - 5.0f;
    shp[0] = 2, shp[1] = NT, shp[2] = NC;
    SAVE("templates.npy", BS_NPY_F32, 3, tm);
    shp[0] = NC, shp[1] = NC;
    SAVE("whitening_mat_inv.npy", BS_NPY_F32, 2, winv);
    shp[1] = 2;
    SAVE("channel_positions.npy", BS_NPY_F32, 2, pos);
    int32_t map[NC] = {0, 1, 2};
    shp[0] = NC;
    SAVE("channel_map.npy", BS_NPY_I32, 1, map);
    snprintf(path, sizeof path, "%s/params.py", dir);
    FILE *fp = fopen(path, "w");
    fputs("dat_path = []\nn_channels_dat = 3\ndtype = 'int16'\noffset = 0\nsample_rate = 1000.\nhp_filtered = False\n",
          fp);
    fclose(fp);
    snprintf(path, sizeof path, "%s/cluster_qc_label.tsv", dir);
    fp = fopen(path, "w");
    fputs("cluster_id\tqc_label\tsnr\n7\tgood\t5.5\n2\tfail\tnan\n", fp);
    fclose(fp);

    char out[4300];
    snprintf(out, sizeof out, "%s/u.nwb", g_dir);
    bs_nwb_export_opts o = {dir, NULL, NULL, out, 2, NULL};
    bs_nwb_export_summary sum;
    CHECK(bs_nwb_export(&o, &sum) == BS_OK);
    CHECK(sum.n_units == 3 && sum.n_spikes == 6 && sum.n_quality_columns == 2);
    CHECK_MSG(sum.n_passes == 2, "passes %d", sum.n_passes); /* units {2, 3}, then 7 alone in two pieces (4 > 2) */

    hid_t f = H5Fopen(out, H5F_ACC_RDONLY, H5P_DEFAULT);
    double st[6], snr[3];
    uint64_t idx[3];
    int64_t ids[3], el[3 * NC];
    float wm[3 * NT * NC];
    CHECK(read_all(f, "/units/spike_times", H5T_NATIVE_DOUBLE, st));
    CHECK(read_all(f, "/units/spike_times_index", H5T_NATIVE_UINT64, idx));
    CHECK(read_all(f, "/units/id", H5T_NATIVE_INT64, ids));
    CHECK(read_all(f, "/units/snr", H5T_NATIVE_DOUBLE, snr));
    CHECK(read_all(f, "/units/electrodes", H5T_NATIVE_INT64, el));
    CHECK(read_all(f, "/units/waveform_mean", H5T_NATIVE_FLOAT, wm));
    H5Fclose(f);
    CHECK(ids[0] == 2 && ids[1] == 3 && ids[2] == 7);
    CHECK(idx[0] == 1 && idx[1] == 2 && idx[2] == 6);
    static const double want[6] = {0.020, 0.040, 0.010, 0.030, 0.050, 0.060};
    for (int i = 0; i < 6; i++)
        CHECK_NEAR(st[i], want[i], 1e-15);
    CHECK(isnan(snr[1]) && isnan(snr[0]) && snr[2] == 5.5); /* unit 2 has nan, unit 3 no row */
    /* unit 7: 3 spikes of template 0, 1 of template 1; unwhitened = x @ winv (channel 0 doubled), in volts */
    for (int j = 0; j < NC; j++) {
        int c = (int)el[2 * NC + j];
        CHECK(c >= 0 && c < NC);
        for (int s = 0; s < NT; s++) {
            double w = 0.75 * tm[s * NC + c] + 0.25 * tm[NT * NC + s * NC + c];
            CHECK_NEAR(wm[2 * NT * NC + s * NC + j], w * winv[c * NC + c] * 1e-6, 1e-12);
        }
    }
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "%s", test_tmpdir());
    bs_h5_quiet();
    test_read();
    test_malformed();
    test_export();
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
#endif
