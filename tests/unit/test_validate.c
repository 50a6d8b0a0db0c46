/*
 * test_validate.c - the Phy folder checker. A clean folder written by the
 * Phy writer (with its raw file, so the recording length is known) has no
 * violation and the right counts; then one rule at a time is broken in a
 * fresh copy and the checker must report exactly one violation whose text
 * holds the expected phrase (and name the file). Also: notes that are not
 * violations, several violations at once, and an unreadable folder.
 */
#include "test.h"
#include <sys/stat.h>
#include <unistd.h>

#include "common/fileio.h"
#include "export/phy.h"
#include "export/validate.h"
#include "io/npy.h"
#include "mem/mem.h"

enum { C = 4, NT = 5, T = 3, P = 2, PC = 2, S = 10, NDAT = 5, NSAMP = 1000 };

static const int64_t times[S] = {3, 10, 10, 42, 100, 101, 250, 600, 998, 999};
static const int32_t tpl_ids[S] = {0, 1, 2, 0, 1, 1, 2, 0, 0, 2};
static const int32_t clu_ids[S] = {0, 2, 5, 0, 2, 2, 5, 0, 0, 5};

static char root[4200];

static void path_of(char *buf, size_t len, const char *dir, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

/* A clean folder <root>/<name> with rec.bin (NSAMP x NDAT int16). */
static void make_clean(const char *name, char *dir, size_t len)
{
    snprintf(dir, len, "%s/%s", root, name);
    bs_phy_header h = {0};
    h.dat_path = "rec.bin";
    h.n_channels_dat = NDAT;
    h.dtype = "int16";
    h.sample_rate_hz = 30000;
    h.n_samples = NSAMP;
    h.n_chan = C;
    h.nt = NT;
    h.n_templates = T;
    h.n_pc = P;
    h.n_pc_chan = PC;
    float amps[S], pcf[S * P * PC], tpl[T * NT * C];
    for (int i = 0; i < S; i++)
        amps[i] = (float)i;
    for (int i = 0; i < S * P * PC; i++)
        pcf[i] = (float)i * 0.25f;
    for (int i = 0; i < T * NT * C; i++)
        tpl[i] = (float)((i * 7) % 11) - 5.0f;
    int32_t pcind[T * PC] = {0, 1, 1, 2, 3, 2};
    int32_t map[C] = {0, 1, 2, 3};
    float pos[C * 2] = {0, 0, 16, 0, 0, 20, 16, 20};
    bs_phy_writer *w = NULL;
    CHECK(bs_phy_writer_open(&w, dir, &h) == BS_OK);
    CHECK(bs_phy_writer_append_templates(w, T, tpl, pcind) == BS_OK);
    CHECK(bs_phy_writer_append_spikes(w, S, times, tpl_ids, clu_ids, amps, pcf) == BS_OK);
    CHECK(bs_phy_writer_set_channels(w, map, pos, NULL) == BS_OK);
    bs_phy_cluster rows[3] = {{0, "good", "good", 50, 0.5}, {2, "mua", "mua", 20, 30}, {5, "good", "good", 40, 2}};
    CHECK(bs_phy_writer_set_clusters(w, 3, rows) == BS_OK);
    CHECK(bs_phy_writer_close(w) == BS_OK);
    char p[4300];
    path_of(p, sizeof p, dir, "rec.bin");
    FILE *fp = fopen(p, "wb");
    CHECK(fp != NULL);
    if (fp) {
        CHECK(ftruncate(fileno(fp), (off_t)NSAMP * NDAT * 2) == 0);
        fclose(fp);
    }
}

/* Validate dir; returns the number of violations, the report in *out (malloc'ed). */
static int run(const char *dir, char **out, bs_phy_summary *sum)
{
    size_t len = 0;
    char *buf = NULL;
    FILE *mem = open_memstream(&buf, &len);
    bs_phy_summary s;
    bs_status st = bs_phy_validate_summary(dir, mem, &s);
    fclose(mem);
    CHECK_MSG(st == BS_OK, "%s", bs_last_error());
    *out = buf;
    if (sum)
        *sum = s;
    return st == BS_OK ? s.n_violations : -1;
}

/* Exactly one violation, on `file`, holding `phrase`. */
static void expect_one(const char *dir, const char *file, const char *phrase)
{
    char *rep = NULL;
    int n = run(dir, &rep, NULL);
    char want[512];
    snprintf(want, sizeof want, "%s: ", file);
    CHECK_MSG(n == 1, "%s: %d violations, expected 1:\n%s", dir, n, rep ? rep : "");
    CHECK_MSG(rep && strstr(rep, phrase) != NULL, "%s: '%s' not in:\n%s", dir, phrase, rep ? rep : "");
    /* the violation line starts with the file name */
    int found = 0;
    for (char *line = rep; line && *line;) {
        if (strncmp(line, want, strlen(want)) == 0 && strstr(line, phrase))
            found = 1;
        char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    CHECK_MSG(found, "%s: no line '%s...%s' in:\n%s", dir, want, phrase, rep ? rep : "");
    free(rep);
}

static void save_i64(const char *dir, const char *name, const int64_t *v, int64_t n)
{
    char p[4300];
    path_of(p, sizeof p, dir, name);
    int64_t shape[1] = {n};
    CHECK(bs_npy_save(p, BS_NPY_I64, 1, shape, v) == BS_OK);
}

static void save_i32(const char *dir, const char *name, const int32_t *v, int ndim, const int64_t *shape)
{
    char p[4300];
    path_of(p, sizeof p, dir, name);
    CHECK(bs_npy_save(p, BS_NPY_I32, ndim, shape, v) == BS_OK);
}

static void put_text(const char *dir, const char *name, const char *text)
{
    char p[4300];
    path_of(p, sizeof p, dir, name);
    CHECK(bs_write_file_atomic(p, text, strlen(text)) == BS_OK);
}

int main(void)
{
    snprintf(root, sizeof root, "%s", test_tmpdir());
    char dir[4300], p[4400];
    char *rep = NULL;
    bs_phy_summary sum;

    /* clean */
    make_clean("clean", dir, sizeof dir);
    CHECK(run(dir, &rep, &sum) == 0);
    CHECK_MSG(rep && rep[0] == '\0', "report of a clean folder: %s", rep ? rep : "");
    CHECK(sum.n_spikes == S && sum.n_clusters == 3 && sum.n_templates == T);
    free(rep);
    int nv = -1;
    CHECK(bs_phy_validate(dir, NULL, &nv) == BS_OK && nv == 0);

    /* 1. unsorted spike times */
    make_clean("unsorted", dir, sizeof dir);
    int64_t t1[S];
    memcpy(t1, times, sizeof t1);
    t1[4] = 5;
    save_i64(dir, "spike_times.npy", t1, S);
    expect_one(dir, "spike_times.npy", "not sorted: spike 4 at sample 5 comes after sample 42");

    /* 2. spike_clusters of the wrong length */
    make_clean("short_clusters", dir, sizeof dir);
    int64_t s9[1] = {9};
    save_i32(dir, "spike_clusters.npy", clu_ids, 1, s9);
    expect_one(dir, "spike_clusters.npy", "length 9, expected 10 (the length of spike_times.npy)");

    /* 3. a template id >= T */
    make_clean("tpl_id", dir, sizeof dir);
    int32_t ti[S];
    memcpy(ti, tpl_ids, sizeof ti);
    ti[6] = 3;
    int64_t s10[1] = {S};
    save_i32(dir, "spike_templates.npy", ti, 1, s10);
    expect_one(dir, "spike_templates.npy", "first spike 6 has id 3, expected ids < 3");

    /* 4. float64 spike_times */
    make_clean("f64_times", dir, sizeof dir);
    double tf[S];
    for (int i = 0; i < S; i++)
        tf[i] = (double)times[i];
    path_of(p, sizeof p, dir, "spike_times.npy");
    CHECK(bs_npy_save(p, BS_NPY_F64, 1, s10, tf) == BS_OK);
    expect_one(dir, "spike_times.npy", "dtype <f8, expected an integer dtype");

    /* 5. templates with 3 channels while channel_map has 4 (templates_ind made consistent) */
    make_clean("tpl_shape", dir, sizeof dir);
    float tpl3[T * NT * 3] = {0};
    int64_t sh3[3] = {T, NT, 3};
    path_of(p, sizeof p, dir, "templates.npy");
    CHECK(bs_npy_save(p, BS_NPY_F32, 3, sh3, tpl3) == BS_OK);
    int32_t ind3[T * 3] = {0, 1, 2, 0, 1, 2, 0, 1, 2};
    int64_t shi[2] = {T, 3};
    save_i32(dir, "templates_ind.npy", ind3, 2, shi);
    expect_one(dir, "templates.npy", "shape (3, 5, 3), expected (3, 5, 4)");

    /* 6. params.py without sample_rate */
    make_clean("no_rate", dir, sizeof dir);
    put_text(dir, "params.py", "dat_path = 'rec.bin'\nn_channels_dat = 5\ndtype = 'int16'\noffset = 0\n"
                               "hp_filtered = False\n");
    expect_one(dir, "params.py", "missing key 'sample_rate'");

    /* 7. spike_times.npy missing */
    make_clean("no_times", dir, sizeof dir);
    path_of(p, sizeof p, dir, "spike_times.npy");
    CHECK(remove(p) == 0);
    expect_one(dir, "spike_times.npy", "missing, expected the sample index of every spike");

    /* 8. a truncated npy */
    make_clean("truncated", dir, sizeof dir);
    path_of(p, sizeof p, dir, "amplitudes.npy");
    uint64_t size = 0;
    CHECK(bs_file_size(p, &size) == BS_OK && truncate(p, (off_t)size - 6) == 0);
    expect_one(dir, "amplitudes.npy", "truncated npy file: 40 data bytes expected, 34 present");

    /* 9. spike times beyond the recording (raw file of 998 samples) */
    make_clean("beyond", dir, sizeof dir);
    path_of(p, sizeof p, dir, "rec.bin");
    CHECK(truncate(p, 998 * NDAT * 2) == 0);
    expect_one(dir, "spike_times.npy", "2 spikes after the end of the recording: first spike 8 at sample 998, "
                                       "expected < 998 samples");

    /* 10. a cluster table without its header line */
    make_clean("no_header", dir, sizeof dir);
    put_text(dir, "cluster_group.tsv", "0\tgood\n2\tmua\n5\tgood\n");
    expect_one(dir, "cluster_group.tsv", "no header: line 1 is '0\tgood', expected 'cluster_id<TAB><field>'");

    /* 11. a cluster without a row */
    make_clean("missing_row", dir, sizeof dir);
    put_text(dir, "cluster_KSLabel.tsv", "cluster_id\tKSLabel\n0\tgood\n5\tgood\n");
    expect_one(dir, "cluster_KSLabel.tsv", "1 cluster ids of the spikes have no row (SpikeInterface drops those "
                                           "units): first is 2");

    /* 12. a row with the wrong number of fields, and a duplicate row */
    make_clean("bad_rows", dir, sizeof dir);
    put_text(dir, "cluster_Amplitude.tsv", "cluster_id\tAmplitude\n0\t50.0\n2\t20.0\textra\n5\t40.0\n");
    expect_one(dir, "cluster_Amplitude.tsv", "line 3 has 3 fields, expected 2 like the header");
    put_text(dir, "cluster_Amplitude.tsv", "cluster_id,Amplitude\r\n0,50.0\r\n2,20.0\r\n5,40.0\r\n2,20.0\r\n");
    expect_one(dir, "cluster_Amplitude.tsv", "cluster id 2 has more than one row");

    /* 13. pc_feature_ind with the wrong number of rows */
    make_clean("pcind", dir, sizeof dir);
    int32_t pci[2 * PC] = {0, 1, 1, 2};
    int64_t shp[2] = {2, PC};
    save_i32(dir, "pc_feature_ind.npy", pci, 2, shp);
    expect_one(dir, "pc_feature_ind.npy", "shape (2, 2), expected (3, 2)");

    /* 14. pc_features with fewer rows than spikes */
    make_clean("pcf_rows", dir, sizeof dir);
    float pf[9 * P * PC] = {0};
    int64_t shf[3] = {9, P, PC};
    path_of(p, sizeof p, dir, "pc_features.npy");
    CHECK(bs_npy_save(p, BS_NPY_F32, 3, shf, pf) == BS_OK);
    expect_one(dir, "pc_features.npy", "9 rows, expected 10 (the length of spike_times.npy)");

    /* 14b. template features: fewer rows than spikes; their ids' rows not one per template; an id past T */
    make_clean("tf", dir, sizeof dir);
    float tf9[9 * 2] = {0};
    int64_t stf[2] = {9, 2}, sti[2] = {T, 2};
    path_of(p, sizeof p, dir, "template_features.npy");
    CHECK(bs_npy_save(p, BS_NPY_F32, 2, stf, tf9) == BS_OK);
    int32_t tfi[T * 2] = {0, 1, 1, 2, 2, 0};
    save_i32(dir, "template_feature_ind.npy", tfi, 2, sti);
    expect_one(dir, "template_features.npy", "9 rows, expected 10 (the length of spike_times.npy)");
    float tf10[10 * 2] = {0};
    stf[0] = 10;
    CHECK(bs_npy_save(p, BS_NPY_F32, 2, stf, tf10) == BS_OK);
    tfi[5] = T;
    save_i32(dir, "template_feature_ind.npy", tfi, 2, sti);
    expect_one(dir, "template_feature_ind.npy", "expected template ids");
    sti[0] = T - 1;
    save_i32(dir, "template_feature_ind.npy", tfi, 2, sti);
    expect_one(dir, "template_feature_ind.npy", "shape (2, 2), expected (3, 2)");

    /* 15. channel_map row beyond n_channels_dat, and int16 dtype */
    make_clean("chanmap", dir, sizeof dir);
    int32_t cm[C] = {0, 1, 2, 5};
    int64_t sc[1] = {C};
    save_i32(dir, "channel_map.npy", cm, 1, sc);
    expect_one(dir, "channel_map.npy", "element 3 is 5, expected rows of the raw file (n_channels_dat)");
    int16_t cm16[C] = {0, 1, 2, 3};
    path_of(p, sizeof p, dir, "channel_map.npy");
    CHECK(bs_npy_save(p, BS_NPY_I16, 1, sc, cm16) == BS_OK);
    expect_one(dir, "channel_map.npy", "dtype <i2, expected <i4");

    /* 16. duplicate channel positions */
    make_clean("dup_pos", dir, sizeof dir);
    float pos[C * 2] = {0, 0, 16, 0, 0, 20, 16, 0};
    int64_t spos[2] = {C, 2};
    path_of(p, sizeof p, dir, "channel_positions.npy");
    CHECK(bs_npy_save(p, BS_NPY_F32, 2, spos, pos) == BS_OK);
    expect_one(dir, "channel_positions.npy", "channels 1 and 3 share the position (16, 0)");

    /* 17. similar_templates not T x T */
    make_clean("sim", dir, sizeof dir);
    float sim[T * 2] = {0};
    int64_t ss[2] = {T, 2};
    path_of(p, sizeof p, dir, "similar_templates.npy");
    CHECK(bs_npy_save(p, BS_NPY_F32, 2, ss, sim) == BS_OK);
    expect_one(dir, "similar_templates.npy", "shape (3, 2), expected (3, 3)");

    /* 18. a params.py line that is not a simple assignment, and a bad dtype */
    make_clean("params_syntax", dir, sizeof dir);
    put_text(dir, "params.py", "# made by hand\ndat_path = r'rec.bin'\nn_channels_dat = 5\ndtype = 'int16'\n"
                               "import os\nsample_rate = 3e4  # Hz\nhp_filtered = True\n");
    expect_one(dir, "params.py", "line 5: cannot parse 'import os'");
    put_text(dir, "params.py", "dat_path = ['rec.bin']\nn_channels_dat = 5\ndtype = 'int12'\nsample_rate = 30000.\n");
    expect_one(dir, "params.py", "line 3: dtype must be a numpy dtype string such as 'int16', found int12");

    /* 19. negative cluster ids, amplitudes of the wrong dtype */
    make_clean("neg_cluster", dir, sizeof dir);
    int32_t cn[S];
    memcpy(cn, clu_ids, sizeof cn);
    cn[0] = -1;
    save_i32(dir, "spike_clusters.npy", cn, 1, s10);
    expect_one(dir, "spike_clusters.npy", "1 negative ids: first spike 0 has id -1");
    make_clean("amp_dtype", dir, sizeof dir);
    save_i32(dir, "amplitudes.npy", clu_ids, 1, s10);
    expect_one(dir, "amplitudes.npy", "dtype <i4, expected <f4 or <f8");

    /* 20. another per-spike array (phylib loads spike_*.npy) with the wrong length */
    make_clean("spike_extra", dir, sizeof dir);
    float sp[2 * 11] = {0};
    int64_t spsh[2] = {11, 2};
    path_of(p, sizeof p, dir, "spike_positions.npy");
    CHECK(bs_npy_save(p, BS_NPY_F32, 2, spsh, sp) == BS_OK);
    expect_one(dir, "spike_positions.npy", "shape (11, 2), expected 10 rows");

    /* notes are not violations: no raw file, no spike_clusters (ids from spike_templates) */
    make_clean("notes", dir, sizeof dir);
    path_of(p, sizeof p, dir, "rec.bin");
    CHECK(remove(p) == 0);
    path_of(p, sizeof p, dir, "spike_clusters.npy");
    CHECK(remove(p) == 0);
    /* the tables list clusters 0, 2, 5: template ids 0, 1, 2 now need rows -> 1 violation per table */
    CHECK(run(dir, &rep, &sum) == 4);
    CHECK(rep && strstr(rep, "note: spike times cannot be checked against the recording length: raw file") != NULL);
    CHECK(rep && strstr(rep, "first is 1, expected a row for every cluster id") != NULL);
    CHECK(sum.n_clusters == 3);
    free(rep);

    /* what Kilosort writes is accepted: KS2.5 uint64 (S, 1) spike times, uint32 templates, KS4's params.py
     * (dat_path a list of absolute paths, comments), CRLF tables; only a note for the absent raw file */
    make_clean("kilosort_style", dir, sizeof dir);
    uint64_t tu[S];
    for (int i = 0; i < S; i++)
        tu[i] = (uint64_t)times[i];
    int64_t sS1[2] = {S, 1};
    path_of(p, sizeof p, dir, "spike_times.npy");
    CHECK(bs_npy_save(p, BS_NPY_U64, 2, sS1, tu) == BS_OK);
    uint32_t tpu[S];
    for (int i = 0; i < S; i++)
        tpu[i] = (uint32_t)tpl_ids[i];
    path_of(p, sizeof p, dir, "spike_templates.npy");
    CHECK(bs_npy_save(p, BS_NPY_U32, 1, s10, tpu) == BS_OK);
    put_text(dir, "params.py", "dat_path = ['/nonexistent/boundsort/rec.ap.bin']  # the raw data\n"
                               "n_channels_dat = 5\noffset = 0\ndtype = \"int16\"\n"
                               "sample_rate = 30000.\nhp_filtered = False\n");
    put_text(dir, "cluster_KSLabel.tsv", "cluster_id\tKSLabel\r\n0\tgood\r\n2\tmua\r\n5\tgood\r\n");
    CHECK(run(dir, &rep, &sum) == 0);
    CHECK_MSG(rep && strstr(rep, "note: spike times cannot be checked against the recording length: raw file "
                                 "/nonexistent/boundsort/rec.ap.bin not found"),
              "%s", rep ? rep : "");
    CHECK(sum.n_spikes == S && sum.n_clusters == 3);
    free(rep);

    /* several violations at once are all reported */
    make_clean("many", dir, sizeof dir);
    save_i64(dir, "spike_times.npy", t1, S);
    put_text(dir, "cluster_group.tsv", "0\tgood\n");
    path_of(p, sizeof p, dir, "templates_ind.npy");
    CHECK(remove(p) == 0 && truncate(p, 0) != 0); /* absent is fine */
    CHECK(run(dir, &rep, NULL) == 2);
    CHECK(rep && strstr(rep, "not sorted") && strstr(rep, "no header"));
    free(rep);

    /* an unreadable folder is an error, not a report */
    snprintf(p, sizeof p, "%s/does-not-exist", root);
    CHECK(bs_phy_validate(p, NULL, &nv) == BS_ERR_INPUT && strstr(bs_last_error(), "does-not-exist"));
    path_of(p, sizeof p, root, "clean/params.py");
    CHECK(bs_phy_validate(p, NULL, &nv) == BS_ERR_INPUT && strstr(bs_last_error(), "not a folder"));
    /* an empty folder: params.py, spike_times, spike_templates, channel_map, channel_positions missing */
    snprintf(p, sizeof p, "%s/empty", root);
    CHECK(bs_mkdir_p(p) == BS_OK);
    CHECK(run(p, &rep, NULL) == 5);
    free(rep);

    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
