/*
 * test_phy_read.c - the Phy-folder reader (src/export/phy_read.h): a folder
 * written by the Phy writer reads back through it (columns as int64, float
 * and double in blocks smaller than the file, the cluster tables, params.py
 * and its sample rate); then the refusals: malformed tables (bad header, bad
 * id, too many cells, repeated id under the strict rules), a params.py with
 * unparseable lines and without sample_rate, a truncated .npy and a column
 * of the wrong dtype or shape, each with a message naming the file.
 */
#include "test.h"
#include <unistd.h>

#include "common/fileio.h"
#include "export/phy.h"
#include "export/phy_read.h"
#include "io/npy.h"
#include "mem/mem.h"

enum { C = 3, NT = 4, T = 2, S = 7 };

static const int64_t times[S] = {1, 5, 9, 20, 21, 50, 99};
static const int32_t tpl[S] = {0, 1, 0, 1, 1, 0, 1};
static const int32_t clu[S] = {4, 1, 4, 1, 1, 4, 1};
static const float amps[S] = {1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f, 7.5f};
static const int32_t chan_map[C] = {0, 2, 1};
static const float pos[C][2] = {{0, 0}, {16, 20}, {0, 40}};

static void put(const char *dir, const char *name, const char *text)
{
    char p[4200];
    CHECK(bs_path_join(p, sizeof p, dir, name) == BS_OK);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void expect_error(bs_status st, const char *want)
{
    CHECK_MSG(st == BS_ERR_INPUT && strstr(bs_last_error(), want) != NULL, "status %d, message '%s', expected '%s'",
              (int)st, bs_last_error(), want);
}

static void write_folder(const char *dir)
{
    const bs_phy_header h = {.dat_path = "rec.bin", .n_channels_dat = 4, .dtype = "int16", .offset_bytes = 8,
                             .sample_rate_hz = 29999.5, .hp_filtered = 1, .n_samples = 100, .n_chan = C, .nt = NT,
                             .n_templates = T};
    float tm[T][NT][C] = {{{0}}};
    tm[0][1][0] = 1.0f;
    tm[1][2][2] = -1.0f;
    bs_phy_writer *w = NULL;
    CHECK(bs_phy_writer_open(&w, dir, &h) == BS_OK);
    CHECK(bs_phy_writer_append_templates(w, T, &tm[0][0][0], NULL) == BS_OK);
    CHECK(bs_phy_writer_append_spikes(w, S, times, tpl, clu, amps, NULL) == BS_OK);
    CHECK(bs_phy_writer_set_channels(w, chan_map, &pos[0][0], NULL) == BS_OK);
    bs_phy_cluster rows[2] = {{1, "good", "good", 3.0, 1.0}, {4, NULL, "mua", NAN, NAN}};
    CHECK(bs_phy_writer_set_clusters(w, 2, rows) == BS_OK);
    CHECK(bs_phy_writer_close(w) == BS_OK);
}

static void test_read_back(const char *dir)
{
    CHECK(bs_phy_has(dir, BS_PHY_PARAMS) && !bs_phy_has(dir, "nothing.npy"));
    CHECK(strcmp(bs_phy_spike_ids_name(dir), BS_PHY_SPIKE_CLUSTERS) == 0);

    /* spike times as int64, in blocks of 3 rows */
    bs_phy_col c = BS_PHY_COL_INIT;
    CHECK(bs_phy_col_open(&c, dir, BS_PHY_SPIKE_TIMES, BS_PHY_COL_INT, 1, 3, "test/col") == BS_OK);
    CHECK(c.n_rows == S && c.n_cols == 1);
    int64_t t[3];
    for (int64_t r0 = 0; r0 < S; r0 += 3) {
        int64_t n = S - r0 < 3 ? S - r0 : 3;
        CHECK(bs_phy_col_i64(&c, r0, n, t) == BS_OK);
        for (int64_t i = 0; i < n; i++)
            CHECK(t[i] == times[r0 + i]);
    }
    CHECK(bs_phy_col_i64(&c, 0, 4, t) == BS_ERR_INTERNAL); /* more than a block */
    bs_phy_col_close(&c);
    bs_phy_col_close(&c); /* idempotent */

    /* cluster ids (int32) as int64, amplitudes as float, positions as double */
    CHECK(bs_phy_col_open(&c, dir, BS_PHY_SPIKE_CLUSTERS, BS_PHY_COL_INT, BS_PHY_ANY_SHAPE, S, "test/col") == BS_OK);
    int64_t id[S];
    CHECK(bs_phy_col_i64(&c, 0, S, id) == BS_OK);
    for (int i = 0; i < S; i++)
        CHECK(id[i] == clu[i]);
    bs_phy_col_close(&c);
    CHECK(bs_phy_col_open(&c, dir, BS_PHY_AMPLITUDES, BS_PHY_COL_FLOAT, BS_PHY_ANY_SHAPE, S, "test/col") == BS_OK);
    float a[S];
    CHECK(bs_phy_col_f32(&c, 0, S, a) == BS_OK);
    CHECK(memcmp(a, amps, sizeof a) == 0);
    bs_phy_col_close(&c);
    CHECK(bs_phy_col_open(&c, dir, BS_PHY_CHANNEL_POSITIONS, BS_PHY_COL_NUMBER, 2, C, "test/col") == BS_OK);
    double xy[C * 2];
    CHECK(c.n_cols == 2 && bs_phy_col_f64(&c, 0, C, xy) == BS_OK);
    CHECK(xy[2] == 16 && xy[3] == 20 && xy[5] == 40);
    bs_phy_col_close(&c);
    CHECK(bs_phy_col_open(&c, dir, BS_PHY_CHANNEL_MAP, BS_PHY_COL_NUMBER, 0, C, "test/col") == BS_OK);
    CHECK(bs_phy_col_f64(&c, 0, C, xy) == BS_OK && xy[1] == 2 && xy[2] == 1);
    bs_phy_col_close(&c);

    /* tables, both rule sets */
    bs_tsv_table tab;
    CHECK(bs_tsv_read_rows(dir, BS_PHY_CLUSTER_GROUP, &tab) == BS_OK);
    CHECK(tab.n_rows == 2 && tab.n_cols == 1 && strcmp(tab.cols[0].raw, "group") == 0 && !tab.cols[0].numeric);
    CHECK(tab.ids[0] == 1 && tab.ids[1] == 4 && tab.line[1] == 3);
    CHECK(strcmp(tab.cols[0].text[0], "good") == 0 && strcmp(tab.cols[0].text[1], "unsorted") == 0);
    bs_tsv_free(&tab);
    char p[4200];
    CHECK(bs_path_join(p, sizeof p, dir, BS_PHY_CLUSTER_AMPLITUDE) == BS_OK);
    CHECK(bs_tsv_read(p, &tab) == BS_OK);
    CHECK(tab.n_cols == 1 && tab.cols[0].numeric && tab.cols[0].num[0] == 3.0 && isnan(tab.cols[0].num[1]));
    CHECK(bs_tsv_find(&tab, 4) == 1 && bs_tsv_find(&tab, 2) == -1);
    bs_tsv_free(&tab);

    /* params.py */
    bs_phy_params pp;
    CHECK(bs_phy_params_read(dir, &pp) == BS_OK);
    CHECK(pp.n_bad == 0 && pp.too_many_line == 0);
    const bs_py_value *v = bs_phy_params_get(&pp, "dat_path");
    CHECK(v && v->type == BS_PY_STR && strcmp(v->str, "rec.bin") == 0);
    v = bs_phy_params_get(&pp, "n_channels_dat");
    CHECK(v && v->type == BS_PY_NUM && v->is_int && v->num == 4);
    v = bs_phy_params_get(&pp, "dtype");
    CHECK(v && v->type == BS_PY_STR && bs_phy_dtype_bytes(v->str) == 2);
    v = bs_phy_params_get(&pp, "offset");
    CHECK(v && v->type == BS_PY_NUM && v->num == 8);
    v = bs_phy_params_get(&pp, "sample_rate");
    CHECK(v && v->type == BS_PY_NUM && !v->is_int && v->num == 29999.5);
    v = bs_phy_params_get(&pp, "hp_filtered");
    CHECK(v && v->type == BS_PY_BOOL && v->num == 1);
    bs_phy_params_free(&pp);
    double fs = 0;
    CHECK(bs_phy_read_sample_rate(dir, &fs) == BS_OK && fs == 29999.5);
}

static void test_tables(const char *dir)
{
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"", "t.tsv: expected a header line 'cluster_id<TAB>...', the file is empty"},
        {"id\tgroup\n1\tgood\n", "t.tsv: line 1: expected a header starting with 'cluster_id', got 'id'"},
        {"cluster_id\tgroup\n\n1\tgood\nx\tmua\n", "t.tsv: line 4: field 'cluster_id': expected an integer id >= 0, "
                                                   "got 'x'"},
        {"cluster_id\tgroup\n1\tgood\textra\n", "t.tsv: line 2: expected at most 2 cells (as the header), got 3"},
    };
    char p[4200];
    CHECK(bs_path_join(p, sizeof p, dir, "t.tsv") == BS_OK);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        put(dir, "t.tsv", bad[i].text);
        bs_tsv_table t;
        expect_error(bs_tsv_read_rows(dir, "t.tsv", &t), bad[i].want);
        CHECK(t.ids == NULL && t.cols == NULL);
    }
    /* comma-separated, CRLF, an integral float id, a repeated id: fine for the viewers */
    put(dir, "t.tsv", "cluster_id,snr,label\r\n3.0,1.5,good\r\n3,nan,\r\n");
    bs_tsv_table t;
    CHECK(bs_tsv_read_rows(dir, "t.tsv", &t) == BS_OK);
    CHECK(t.n_rows == 2 && t.ids[0] == 3 && t.ids[1] == 3 && t.n_cols == 2);
    CHECK(t.cols[0].numeric && t.cols[0].num[0] == 1.5 && isnan(t.cols[0].num[1]));
    CHECK(!t.cols[1].numeric && strcmp(t.cols[1].text[0], "good") == 0 && t.cols[1].text[1][0] == '\0');
    bs_tsv_free(&t);
    /* ... but not for the strict rules */
    expect_error(bs_tsv_read(p, &t), "cluster_id 3 appears more than once");
    /* the line tools a checker uses */
    char line[] = "cluster_id\tx\ty\r\nrest";
    char *pos = line, *l;
    int ln = 0;
    CHECK((l = bs_tsv_next_line(&pos, &ln)) && ln == 1 && strcmp(l, "cluster_id\tx\ty") == 0);
    char *cells[2];
    CHECK(bs_tsv_separator(l) == '\t' && bs_tsv_split(l, '\t', cells, 2) == 3 && strcmp(cells[1], "x") == 0);
    CHECK((l = bs_tsv_next_line(&pos, &ln)) && ln == 2 && strcmp(l, "rest") == 0);
    CHECK(bs_tsv_next_line(&pos, &ln) == NULL);
    int32_t id;
    CHECK(bs_tsv_parse_id("17", &id) && id == 17 && !bs_tsv_parse_id("-1", &id) && !bs_tsv_parse_id("2.5", &id) &&
          !bs_tsv_parse_id("", &id) && !bs_tsv_parse_id("99999999999", &id));
}

static void test_params(const char *dir)
{
    char sub[4200];
    CHECK(bs_path_join(sub, sizeof sub, dir, "params") == BS_OK);
    CHECK(bs_mkdir_p(sub) == BS_OK);
    put(sub, BS_PHY_PARAMS,
        "import numpy as np\n"
        "dat_path = [r'a.bin', \"b.bin\"]  # two files\n"
        "sample_rate = 1000.\n"
        "sample_rate = 2e4; dtype = '<i2'\n"
        "n_channels_dat = np.int64(5)\n");
    bs_phy_params pp;
    CHECK(bs_phy_params_read(sub, &pp) == BS_OK);
    CHECK(pp.n_bad == 2 && pp.bad[0].line == 1 && pp.bad[1].line == 5);
    CHECK(strcmp(pp.bad[1].key, "n_channels_dat") == 0 && strcmp(pp.bad[1].text, "n_channels_dat = np.int64(5)") == 0);
    CHECK(bs_phy_params_bad_key(&pp, "n_channels_dat") == 5 && bs_phy_params_bad_key(&pp, "dtype") == 0);
    const bs_py_value *v = bs_phy_params_get(&pp, "dat_path");
    CHECK(v && v->type == BS_PY_LIST && v->n_items == 2 && strcmp(v->items[1], "b.bin") == 0);
    v = bs_phy_params_get(&pp, "dtype");
    CHECK(v && bs_phy_dtype_bytes(v->str) == 2 && bs_phy_dtype_bytes("int12") == 0);
    bs_phy_params_free(&pp);
    double fs = 0;
    CHECK(bs_phy_read_sample_rate(sub, &fs) == BS_OK && fs == 2e4); /* the last assignment wins */

    put(sub, BS_PHY_PARAMS, "dtype = 'int16'\nsample_rate = 'fast'\n");
    expect_error(bs_phy_read_sample_rate(sub, &fs), "params.py: sample_rate: expected a line 'sample_rate = HZ'");
    put(sub, BS_PHY_PARAMS, "dtype = 'int16'\n");
    expect_error(bs_phy_read_sample_rate(sub, &fs), "params.py: sample_rate: expected a line 'sample_rate = HZ'");
    char p[4300];
    CHECK(bs_path_join(p, sizeof p, sub, BS_PHY_PARAMS) == BS_OK);
    unlink(p);
    CHECK(bs_phy_params_read(sub, &pp) == BS_ERR_INPUT && strstr(bs_last_error(), "params.py") != NULL);
}

static void test_bad_columns(const char *dir)
{
    bs_phy_col c = BS_PHY_COL_INIT;
    /* wrong dtype class, wrong shape */
    expect_error(bs_phy_col_open(&c, dir, BS_PHY_AMPLITUDES, BS_PHY_COL_INT, 1, 4, "test/col"),
                 "amplitudes.npy: field 'descr': expected an integer type, got '<f4'");
    expect_error(bs_phy_col_open(&c, dir, BS_PHY_SPIKE_TIMES, BS_PHY_COL_FLOAT, 1, 4, "test/col"),
                 "spike_times.npy: field 'descr': expected float32 or float64, got '<i8'");
    expect_error(bs_phy_col_open(&c, dir, BS_PHY_CHANNEL_POSITIONS, BS_PHY_COL_NUMBER, 3, 4, "test/col"),
                 "channel_positions.npy: shape: expected 3 columns, got 2");
    expect_error(bs_phy_col_open(&c, dir, BS_PHY_TEMPLATES, BS_PHY_COL_NUMBER, 0, 4, "test/col"),
                 "templates.npy: shape: expected 1 or 2 dimensions in C order, got 3 dimensions");
    bs_phy_col_close(&c);

    /* a truncated file: the header promises more rows than the file holds */
    char p[4200];
    CHECK(bs_path_join(p, sizeof p, dir, BS_PHY_SPIKE_TIMES) == BS_OK);
    uint64_t size = 0;
    CHECK(bs_file_size(p, &size) == BS_OK);
    CHECK(truncate(p, (off_t)(size - 8)) == 0);
    bs_status st = bs_phy_col_open(&c, dir, BS_PHY_SPIKE_TIMES, BS_PHY_COL_INT, 1, 4, "test/col");
    CHECK_MSG(st == BS_ERR_INPUT && strstr(bs_last_error(), "spike_times.npy") != NULL, "%s", bs_last_error());
    bs_phy_col_close(&c);
    CHECK(bs_phy_col_open(&c, dir, "missing.npy", BS_PHY_COL_INT, 1, 4, "test/col") == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "missing.npy") != NULL);
    bs_phy_col_close(&c);
}

/* The spike-time check qc and the report share: block by block, the first bad spike named. */
static void test_times_check(void)
{
    bs_phy_times_check k;
    const int64_t a[] = {0, 5, 5, 9}, b[] = {12, 11}, neg[] = {-1}, far[] = {(int64_t)1 << 62};
    bs_phy_times_begin(&k, "st.npy", 100, 30000);
    CHECK(bs_phy_times_next(&k, 0, a, 4) == BS_OK && k.prev == 9); /* equal times are fine */
    expect_error(bs_phy_times_next(&k, 4, b, 2), "st.npy: spike 5 at sample 11 comes before the previous one (12)");
    bs_phy_times_begin(&k, "st.npy", 100, 30000);
    CHECK(bs_phy_times_next(&k, 0, a, 4) == BS_OK);
    CHECK(bs_phy_times_next(&k, 4, a + 3, 1) == BS_OK && bs_phy_times_next(&k, 5, b, 1) == BS_OK); /* 9, 9, 12 */
    CHECK(bs_phy_times_next(&k, 6, (const int64_t[]){99}, 1) == BS_OK);
    expect_error(bs_phy_times_next(&k, 7, (const int64_t[]){100}, 1),
                 "spike 7 at sample 100 is outside the recording's 100 samples");
    bs_phy_times_begin(&k, "st.npy", 100, 30000);
    expect_error(bs_phy_times_next(&k, 0, neg, 1), "spike 0 at sample -1: expected sample indices >= 0");
    /* length unknown: within a year at the folder's rate */
    bs_phy_times_begin(&k, "st.npy", -1, 30000);
    CHECK(bs_phy_times_next(&k, 0, (const int64_t[]){(int64_t)30000 * 86400 * 365}, 1) == BS_OK);
    expect_error(bs_phy_times_next(&k, 1, far, 1), "spike 1 at sample 4611686018427387904 is outside the recording: "
                                                   "1.54e+14 s at 30000 Hz");
}

int main(void)
{
    const char *tmp = test_tmpdir();
    char dir[4200];
    CHECK(bs_path_join(dir, sizeof dir, tmp, "phy_read") == BS_OK);
    write_folder(dir);
    test_read_back(dir);
    test_tables(dir);
    test_params(dir);
    test_bad_columns(dir);
    test_times_check();
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
