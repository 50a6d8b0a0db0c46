/*
 * test_nwb_meta.c - the NWB metadata layer (bs_nwb_meta_resolve, no HDF5
 * needed) and the per-cluster TSV reader used by the NWB export: scaling,
 * time base, geometry and shanks from hand-made metadata, and the exact
 * message of each malformed case.
 */
#include <math.h>
#include <string.h>

#include "../../src/export/nwb_export.h"
#include "../../src/io/nwb.h"
#include "../../src/mem/mem.h"
#include "test.h"

static const double REL_X[6] = {0, 32, 0, 32, 250, 282};
static const double REL_Y[6] = {0, 0, 20, 20, 0, 0};
static const char *const GROUPS[6] = {"s0", "s0", "s0", "s0", "s1", "s1"};
static const int64_t ROWS[4] = {5, 0, 1, 4}; /* data column -> table row */
static const double CC[4] = {0.5, 1.0, 2.0, 0.5};

/* A valid 4-channel series over a 6-row table. */
static bs_nwb_meta good(void)
{
    bs_nwb_meta m = {0};
    m.file = "f.nwb";
    m.series = "/acquisition/es";
    m.rank = 2;
    m.n_times = 1000;
    m.n_chan = 4;
    m.dtype = BS_SAMPLE_I16;
    m.conversion = 2e-6;
    m.has_starting_time = m.has_rate = 1;
    m.starting_time = 1.5;
    m.rate = 20000;
    m.electrodes = ROWS;
    m.n_electrodes = 4;
    m.n_rows = 6;
    m.rel_x = REL_X;
    m.rel_y = REL_Y;
    m.n_rel_x = m.n_rel_y = 6;
    m.group_name = GROUPS;
    m.n_group_name = 6;
    return m;
}

/* resolve must fail with exactly `want`. */
static void expect_error(const bs_nwb_meta *m, const char *want)
{
    bs_recording rec;
    memset(&rec, 0, sizeof rec);
    double t0;
    bs_status st = bs_nwb_meta_resolve(m, &rec, &t0);
    CHECK(st == BS_ERR_INPUT);
    CHECK_MSG(strcmp(bs_last_error(), want) == 0, "got '%s', expected '%s'", bs_last_error(), want);
    CHECK(rec.uv_per_bit == NULL && rec.probe.x_um == NULL);
}

static void test_resolve(void)
{
    bs_nwb_meta m = good();
    m.channel_conversion = CC;
    m.n_channel_conversion = 4;
    m.offset = -4e-6; /* raw offset = 4e-6 / (2e-6 * cc) differs per channel: channel 0's is used */
    bs_recording rec;
    memset(&rec, 0, sizeof rec);
    double t0 = 0;
    CHECK(bs_nwb_meta_resolve(&m, &rec, &t0) == BS_OK);
    CHECK(rec.n_cols == 4 && rec.probe.n_chan == 4 && rec.n_samples == 1000);
    CHECK_NEAR(rec.fs_hz, 20000, 0);
    CHECK_NEAR(t0, 1.5, 0);
    CHECK(rec.first_sample == 30000);
    for (int c = 0; c < 4; c++) {
        CHECK_NEAR(rec.uv_per_bit[c], 2.0 * CC[c], 1e-6);
        CHECK(rec.probe.column[c] == c);
        CHECK_NEAR(rec.probe.x_um[c], REL_X[ROWS[c]], 0);
        CHECK_NEAR(rec.probe.y_um[c], REL_Y[ROWS[c]], 0);
    }
    CHECK_NEAR(rec.offset, 4e-6 / (2e-6 * CC[0]), 1e-5);
    /* rows 5, 0, 1, 4 -> groups s1, s0, s0, s1: first appearance numbers them 0, 1, 1, 0 */
    CHECK(rec.probe.n_shanks == 2);
    CHECK(rec.probe.shank[0] == 0 && rec.probe.shank[1] == 1 && rec.probe.shank[2] == 1 && rec.probe.shank[3] == 0);
    bs_probe_free(&rec.probe);
    bs_mem_free(rec.uv_per_bit);

    /* no group_name: one shank; timestamps: rate from the median step */
    m = good();
    m.group_name = NULL;
    m.has_starting_time = m.has_rate = 0;
    double ts[1000];
    for (int i = 0; i < 1000; i++)
        ts[i] = 10.0 + i / 25000.0 + (i >= 500 ? 0.3 : 0); /* one long step (a gap) does not move the median */
    m.timestamps = ts;
    m.n_timestamps = m.n_timestamps_head = 1000;
    memset(&rec, 0, sizeof rec);
    CHECK(bs_nwb_meta_resolve(&m, &rec, &t0) == BS_OK);
    CHECK_NEAR(rec.fs_hz, 25000, 1e-6);
    CHECK_NEAR(t0, 10.0, 0);
    CHECK(rec.probe.n_shanks == 1 && rec.probe.shank[3] == 0);
    bs_probe_free(&rec.probe);
    bs_mem_free(rec.uv_per_bit);
}

static void test_errors(void)
{
    bs_nwb_meta m = good();
    m.rank = 1;
    expect_error(&m, "f.nwb: /acquisition/es/data: expected 2 dimensions (time x channels), got 1");
    m = good();
    m.conversion = 0;
    expect_error(&m, "f.nwb: /acquisition/es/data: attribute 'conversion': expected a finite non-zero number, got 0");
    m = good();
    m.offset = NAN;
    expect_error(&m, "f.nwb: /acquisition/es/data: attribute 'offset': expected a finite number of volts, got nan");
    m = good();
    m.channel_conversion = CC;
    m.n_channel_conversion = 3;
    expect_error(&m, "f.nwb: /acquisition/es/channel_conversion: expected one factor per data column (4), got 3");
    m = good();
    m.has_rate = 0;
    expect_error(&m, "f.nwb: /acquisition/es/starting_time: attribute 'rate' is missing: expected the sampling rate "
                     "in Hz");
    m = good();
    m.rate = 0;
    expect_error(&m, "f.nwb: /acquisition/es/starting_time: attribute 'rate': expected a sampling rate > 0 Hz, got 0");
    m = good();
    m.rate = NAN;
    expect_error(&m,
                 "f.nwb: /acquisition/es/starting_time: attribute 'rate': expected a sampling rate > 0 Hz, got nan");
    m = good();
    m.has_starting_time = 0;
    expect_error(&m, "f.nwb: /acquisition/es: no starting_time (with its rate) and no timestamps: expected one of them "
                     "to know the sampling rate");
    m = good();
    m.has_starting_time = 0;
    double ts[3] = {0, 1e-3, 1e-3};
    m.timestamps = ts;
    m.n_timestamps_head = 3;
    m.n_timestamps = 1000;
    expect_error(&m, "f.nwb: /acquisition/es/timestamps: timestamps 1 and 2: expected finite, strictly increasing "
                     "seconds, got 0.001 and 0.001");
    m = good();
    m.electrodes = NULL;
    expect_error(&m, "f.nwb: /acquisition/es/electrodes is missing: expected the region of the electrodes table (one "
                     "row per data column)");
    m = good();
    int64_t bad_rows[4] = {0, 1, 2, 6};
    m.electrodes = bad_rows;
    expect_error(&m, "f.nwb: /acquisition/es/electrodes[3]: expected a row of the electrodes table (0..5), got 6");
    m = good();
    m.rel_x = NULL;
    expect_error(&m, "f.nwb: electrodes table: column 'rel_x' is missing: expected the contact positions on the probe "
                     "(rel_x, rel_y, µm); x/y/z are brain coordinates, not probe geometry");
    m = good();
    m.n_rel_y = 5;
    expect_error(&m, "f.nwb: electrodes table: column 'rel_y': expected 6 rows (one per electrode), got 5");
    m = good();
    int64_t dup[4] = {0, 1, 2, 0};
    m.electrodes = dup;
    expect_error(&m, "f.nwb: electrodes table (rel_x, rel_y): channels 0 and 3 share the position (0, 0) µm on shank 0");
    m = good();
    m.dtype = BS_SAMPLE_I32;
    m.conversion = 1e25;
    expect_error(&m, "f.nwb: /acquisition/es: channel 0: conversion x channel_conversion = 1e+25 V per unit: expected "
                     "scaled samples to fit a float32 (and a non-zero µV per unit)");
}

static void test_tsv(void)
{
    const char *text = "cluster_id\tsnr\tqc_label\tweird name/x\r\n3\t4.5\tgood\t1\n\n1\tnan\tfail\n0\t\tgood\t2\n";
    bs_tsv_table t;
    CHECK(bs_tsv_parse(text, strlen(text), "q.tsv", &t) == BS_OK);
    CHECK(t.n_rows == 3 && t.n_cols == 3);
    CHECK(t.ids[0] == 3 && t.ids[1] == 1 && t.ids[2] == 0);
    CHECK(t.cols[0].numeric && strcmp(t.cols[0].name, "snr") == 0);
    CHECK_NEAR(t.cols[0].num[0], 4.5, 0);
    CHECK(isnan(t.cols[0].num[1]) && isnan(t.cols[0].num[2]));
    CHECK(!t.cols[1].numeric && strcmp(t.cols[1].text[1], "fail") == 0);
    CHECK(strcmp(t.cols[2].name, "weird_name_x") == 0 && t.cols[2].numeric && isnan(t.cols[2].num[1]));
    CHECK(bs_tsv_find(&t, 1) == 1 && bs_tsv_find(&t, 7) == -1);
    bs_tsv_free(&t);

    static const struct {
        const char *text, *want;
    } bad[] = {
        {"", "q.tsv: empty: expected a header row 'cluster_id<TAB>...'"},
        {"unit\tx\n0\t1\n", "q.tsv: header: expected 'cluster_id' as the first column, got 'unit'"},
        {"cluster_id\tx\n0\t1\t2\n", "q.tsv: row 2: expected at most 2 cells (the header's), got 3"},
        {"cluster_id\tx\n-1\t1\n", "q.tsv: row 2: cluster_id: expected an integer >= 0, got '-1'"},
        {"cluster_id\tx\n2\t1\n2\t3\n", "q.tsv: cluster_id 2 appears more than once"},
        {"cluster_id\t\n0\t1\n", "q.tsv: header: column 2 has no name"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(bs_tsv_parse(bad[i].text, strlen(bad[i].text), "q.tsv", &t) == BS_ERR_INPUT);
        CHECK_MSG(strcmp(bs_last_error(), bad[i].want) == 0, "got '%s'", bs_last_error());
        CHECK(t.cols == NULL && t.ids == NULL);
    }
}

int main(void)
{
    test_resolve();
    test_errors();
    test_tsv();
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
