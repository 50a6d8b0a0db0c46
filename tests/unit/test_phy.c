/*
 * test_phy.c - the Phy folder writer: a small synthetic sorting streamed in
 * three blocks is read back file by file with the npy reader and compared
 * exactly (dtypes, shapes, values), params.py and the cluster tables are
 * compared as text, similar_templates and the whitening inverse are checked
 * against known values; then the refusals (out-of-order times, ids >= T,
 * times outside the recording, an unwritable folder, a close without a
 * channel map, a write that fails mid-stream) and that a failed or aborted
 * export leaves no params.py; 200,000 spikes streamed in blocks keep tracked
 * memory flat, and the validator reads them back in chunks.
 */
#include "test.h"
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fileio.h"
#include "export/phy.h"
#include "export/validate.h"
#include "io/npy.h"
#include "mem/mem.h"

enum { C = 4, NT = 5, T = 3, P = 2, PC = 2, S = 10, NDAT = 5 };

static const int64_t times[S] = {3, 10, 10, 42, 100, 101, 250, 600, 998, 999};
static const int32_t tpl_ids[S] = {0, 1, 2, 0, 1, 1, 2, 0, 0, 2};
static const int32_t clu_ids[S] = {0, 2, 5, 0, 2, 2, 5, 0, 0, 5};
static float amps[S];
static float pcf[S][P][PC];
static float templates[T][NT][C];
static const int32_t pcind[T][PC] = {{0, 1}, {1, 2}, {3, 2}};
static const int32_t chan_map[C] = {0, 1, 2, 4};
static const float pos[C][2] = {{0, 0}, {32, 0}, {0, 20}, {32, 20}};
static const int32_t shanks[C] = {0, 0, 1, 1};

static int file_exists(const char *dir, const char *name)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return stat(p, &st) == 0;
}

static void *load(const char *dir, const char *name, bs_npy_dtype dt, int ndim, bs_npy_header *h)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    void *data = NULL;
    bs_status st = bs_npy_load_expect(p, "test/phy", dt, ndim, h, &data);
    CHECK_MSG(st == BS_OK, "%s: %s", name, bs_last_error());
    return data;
}

static char *text(const char *dir, const char *name)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *t = NULL;
    if (bs_read_text_file(p, 1 << 20, &t, NULL) != BS_OK)
        return NULL;
    return t;
}

static bs_phy_header header(void)
{
    bs_phy_header h = {0};
    h.dat_path = "rec.bin";
    h.n_channels_dat = NDAT;
    h.dtype = "int16";
    h.offset_bytes = 0;
    h.sample_rate_hz = 30000;
    h.hp_filtered = 0;
    h.n_samples = 1000;
    h.n_chan = C;
    h.nt = NT;
    h.n_templates = T;
    h.n_pc = P;
    h.n_pc_chan = PC;
    return h;
}

static void fill(void)
{
    for (int i = 0; i < S; i++) {
        amps[i] = 10.0f + 0.5f * (float)i;
        for (int p = 0; p < P; p++)
            for (int c = 0; c < PC; c++)
                pcf[i][p][c] = (float)(i * 100 + p * 10 + c);
    }
    memset(templates, 0, sizeof templates);
    templates[0][2][0] = 1.0f;  /* e(2,0) */
    templates[1][2][0] = -2.0f; /* -2 e(2,0): cosine with template 0 is -1 */
    templates[1][2][1] = 0.0f;
    templates[2][2][0] = 3.0f;  /* 3 e(2,0) + 3 e(1,3): cosine with 0 is 1/sqrt(2) */
    templates[2][1][3] = 3.0f;
}

int main(void)
{
    const char *tmp = test_tmpdir();
    char dir[4200], p[4300];
    snprintf(dir, sizeof dir, "%s/out", tmp);
    fill();

    /* ---- a full export, streamed in blocks ---- */
    bs_phy_header hh = header();
    bs_phy_writer *w = NULL;
    CHECK(bs_phy_writer_open(&w, dir, &hh) == BS_OK);
    CHECK(bs_phy_writer_append_templates(w, 2, &templates[0][0][0], &pcind[0][0]) == BS_OK);
    CHECK(bs_phy_writer_append_templates(w, 1, &templates[2][0][0], &pcind[2][0]) == BS_OK);
    /* template features: rows of distinct ids in [0, T), set once before the spikes */
    const int32_t tfind_bad[T][2] = {{0, 1}, {1, 1}, {2, 0}}, tfind[T][2] = {{0, 1}, {1, 2}, {2, 0}};
    float tfeat[S][2];
    for (int i = 0; i < S; i++)
        tfeat[i][0] = amps[i], tfeat[i][1] = -0.5f * (float)i;
    CHECK(bs_phy_writer_append_template_features(w, 1, &tfeat[0][0]) == BS_ERR_INTERNAL); /* before the ids */
    CHECK(bs_phy_writer_set_template_feature_ind(w, 2, &tfind_bad[0][0]) == BS_ERR_INTERNAL);
    CHECK(strstr(bs_last_error(), "row 1 has 1 at 1") != NULL);
    CHECK(bs_phy_writer_set_template_feature_ind(w, 4, &tfind[0][0]) == BS_ERR_INTERNAL); /* more than T */
    CHECK(bs_phy_writer_set_template_feature_ind(w, 2, &tfind[0][0]) == BS_OK);
    CHECK(bs_phy_writer_append_spikes(w, 3, times, tpl_ids, clu_ids, amps, &pcf[0][0][0]) == BS_OK);
    CHECK(bs_phy_writer_append_template_features(w, 3, &tfeat[0][0]) == BS_OK);
    CHECK(bs_phy_writer_append_template_features(w, 1, &tfeat[3][0]) == BS_ERR_INTERNAL); /* ahead of the spikes */
    CHECK(bs_phy_writer_set_template_feature_ind(w, 2, &tfind[0][0]) == BS_ERR_INTERNAL);  /* twice */
    CHECK(bs_phy_writer_append_spikes(w, 0, times, tpl_ids, clu_ids, amps, &pcf[0][0][0]) == BS_OK);
    CHECK(bs_phy_writer_append_spikes(w, 4, times + 3, tpl_ids + 3, clu_ids + 3, amps + 3, &pcf[3][0][0]) == BS_OK);
    CHECK(bs_phy_writer_append_template_features(w, 4, &tfeat[3][0]) == BS_OK);
    /* out of order across calls: refused, nothing written */
    int64_t back[1] = {99};
    CHECK(bs_phy_writer_append_spikes(w, 1, back, tpl_ids, clu_ids, amps, &pcf[0][0][0]) == BS_ERR_INTERNAL);
    CHECK(strstr(bs_last_error(), "non-decreasing") != NULL);
    /* a template id >= T and a time past the recording: refused */
    int64_t late[2] = {250, 250};
    int32_t bad_tpl[2] = {0, 3};
    CHECK(bs_phy_writer_append_spikes(w, 2, late, bad_tpl, NULL, amps, &pcf[0][0][0]) == BS_ERR_INTERNAL);
    CHECK(strstr(bs_last_error(), "template id 3, expected 0..2") != NULL);
    int64_t past[1] = {1000};
    CHECK(bs_phy_writer_append_spikes(w, 1, past, tpl_ids, NULL, amps, &pcf[0][0][0]) == BS_ERR_INTERNAL);
    CHECK(strstr(bs_last_error(), "outside the recording [0, 1000)") != NULL);
    CHECK(bs_phy_writer_append_spikes(w, 3, times + 7, tpl_ids + 7, clu_ids + 7, amps + 7, &pcf[7][0][0]) == BS_OK);
    CHECK(bs_phy_writer_append_template_features(w, 3, &tfeat[7][0]) == BS_OK);
    CHECK(bs_phy_writer_set_channels(w, chan_map, &pos[0][0], shanks) == BS_OK);
    float wm[C * C] = {2, 1, 0, 0, 0, 4, 0, 0, 0, 0, 0.5f, 0, 1, 0, 0, 1};
    CHECK(bs_phy_writer_set_whitening(w, wm, NULL) == BS_OK);
    bs_phy_cluster rows[3] = {
        {7, "noise", "mua", NAN, 80.0, },
        {0, "good", "good", 12.34, 1.25},
        {5, NULL, "mua", 7.0, NAN},
    };
    CHECK(bs_phy_writer_set_clusters(w, 3, rows) == BS_OK);
    CHECK(!file_exists(dir, "params.py"));
    CHECK(bs_phy_writer_close(w) == BS_OK);

    /* ---- read back every file ---- */
    bs_npy_header h;
    int64_t *st = load(dir, "spike_times.npy", BS_NPY_I64, 1, &h);
    CHECK(h.shape[0] == S);
    for (int i = 0; st && i < S; i++)
        CHECK(st[i] == times[i]);
    bs_mem_free(st);
    int32_t *sti = load(dir, "spike_templates.npy", BS_NPY_I32, 1, &h);
    int32_t *sci = load(dir, "spike_clusters.npy", BS_NPY_I32, 1, &h);
    CHECK(h.shape[0] == S);
    for (int i = 0; sti && sci && i < S; i++)
        CHECK(sti[i] == tpl_ids[i] && sci[i] == clu_ids[i]);
    bs_mem_free(sti);
    bs_mem_free(sci);
    float *am = load(dir, "amplitudes.npy", BS_NPY_F32, 1, &h);
    for (int i = 0; am && i < S; i++)
        CHECK(am[i] == amps[i]);
    bs_mem_free(am);
    float *pf = load(dir, "pc_features.npy", BS_NPY_F32, 3, &h);
    CHECK(h.shape[0] == S && h.shape[1] == P && h.shape[2] == PC);
    CHECK(pf && memcmp(pf, pcf, sizeof pcf) == 0);
    bs_mem_free(pf);
    uint32_t *pi = load(dir, "pc_feature_ind.npy", BS_NPY_U32, 2, &h);
    CHECK(h.shape[0] == T && h.shape[1] == PC);
    for (int i = 0; pi && i < T * PC; i++)
        CHECK(pi[i] == (uint32_t)(&pcind[0][0])[i]);
    bs_mem_free(pi);
    float *tf = load(dir, "template_features.npy", BS_NPY_F32, 2, &h);
    CHECK(h.shape[0] == S && h.shape[1] == 2 && tf && memcmp(tf, tfeat, sizeof tfeat) == 0);
    bs_mem_free(tf);
    uint32_t *tfi = load(dir, "template_feature_ind.npy", BS_NPY_U32, 2, &h);
    CHECK(h.shape[0] == T && h.shape[1] == 2);
    for (int i = 0; tfi && i < T * 2; i++)
        CHECK(tfi[i] == (uint32_t)(&tfind[0][0])[i]);
    bs_mem_free(tfi);
    float *tp = load(dir, "templates.npy", BS_NPY_F32, 3, &h);
    CHECK(h.shape[0] == T && h.shape[1] == NT && h.shape[2] == C);
    CHECK(tp && memcmp(tp, templates, sizeof templates) == 0);
    bs_mem_free(tp);
    int32_t *ti = load(dir, "templates_ind.npy", BS_NPY_I32, 2, &h);
    CHECK(h.shape[0] == T && h.shape[1] == C);
    for (int i = 0; ti && i < T * C; i++)
        CHECK(ti[i] == i % C);
    bs_mem_free(ti);
    float *sim = load(dir, "similar_templates.npy", BS_NPY_F32, 2, &h);
    CHECK(h.shape[0] == T && h.shape[1] == T);
    if (sim) {
        const double r = 1 / sqrt(2.0);
        double want[T][T] = {{1, -1, r}, {-1, 1, -r}, {r, -r, 1}};
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++)
                CHECK_NEAR(sim[i * T + j], want[i][j], 1e-6);
        float ref[T * T];
        bs_phy_cosine_similarity(&templates[0][0][0], T, NT * C, ref);
        CHECK(memcmp(ref, sim, sizeof ref) == 0);
    }
    bs_mem_free(sim);
    int32_t *cm = load(dir, "channel_map.npy", BS_NPY_I32, 1, &h);
    CHECK(h.shape[0] == C && cm && memcmp(cm, chan_map, sizeof chan_map) == 0);
    bs_mem_free(cm);
    float *cp = load(dir, "channel_positions.npy", BS_NPY_F32, 2, &h);
    CHECK(h.shape[0] == C && h.shape[1] == 2 && cp && memcmp(cp, pos, sizeof pos) == 0);
    bs_mem_free(cp);
    int32_t *cs = load(dir, "channel_shanks.npy", BS_NPY_I32, 1, &h);
    CHECK(h.shape[0] == C && cs && memcmp(cs, shanks, sizeof shanks) == 0);
    bs_mem_free(cs);
    float *w1 = load(dir, "whitening_mat.npy", BS_NPY_F32, 2, &h);
    float *w2 = load(dir, "whitening_mat_inv.npy", BS_NPY_F32, 2, &h);
    CHECK(h.shape[0] == C && h.shape[1] == C);
    if (w1 && w2) {
        CHECK(memcmp(w1, wm, sizeof wm) == 0);
        for (int i = 0; i < C; i++)
            for (int j = 0; j < C; j++) {
                double s = 0;
                for (int k = 0; k < C; k++)
                    s += (double)w1[i * C + k] * w2[k * C + j];
                CHECK_NEAR(s, i == j, 1e-6);
            }
        CHECK_NEAR(w2[0], 0.5, 1e-7);   /* row 0 of the inverse: (0.5, -0.125, 0, 0) */
        CHECK_NEAR(w2[1], -0.125, 1e-7);
        CHECK_NEAR(w2[12], -0.5, 1e-7); /* row 3: (-0.5, 0.125, 0, 1) */
        CHECK_NEAR(w2[13], 0.125, 1e-7);
    }
    bs_mem_free(w1);
    bs_mem_free(w2);

    char *t = text(dir, "params.py");
    CHECK(t && strcmp(t, "dat_path = 'rec.bin'\nn_channels_dat = 5\ndtype = 'int16'\noffset = 0\n"
                         "sample_rate = 30000.0\nhp_filtered = False\n") == 0);
    free(t);
    t = text(dir, "cluster_group.tsv");
    CHECK(t && strcmp(t, "cluster_id\tgroup\n0\tgood\n2\tunsorted\n5\tunsorted\n7\tnoise\n") == 0);
    free(t);
    t = text(dir, "cluster_KSLabel.tsv");
    CHECK(t && strcmp(t, "cluster_id\tKSLabel\n0\tgood\n2\t\n5\tmua\n7\tmua\n") == 0);
    free(t);
    t = text(dir, "cluster_Amplitude.tsv");
    CHECK(t && strcmp(t, "cluster_id\tAmplitude\n0\t12.3\n2\t\n5\t7.0\n7\t\n") == 0);
    free(t);
    t = text(dir, "cluster_ContamPct.tsv");
    CHECK(t && strcmp(t, "cluster_id\tContamPct\n0\t1.2\n2\t\n5\t\n7\t80.0\n") == 0);
    free(t);

    /* the folder validates (the raw file is absent: a note, not a violation) */
    bs_phy_summary sum;
    CHECK(bs_phy_validate_summary(dir, NULL, &sum) == BS_OK);
    CHECK(sum.n_violations == 0 && sum.n_spikes == S && sum.n_clusters == 3 && sum.n_templates == T);

    /* ---- no temporary files left behind ---- */
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c tmp- > '%s/ntmp.txt'", dir, tmp);
    CHECK(system(cmd) != -1);
    snprintf(p, sizeof p, "%s/ntmp.txt", tmp);
    char *nt = NULL;
    CHECK(bs_read_text_file(p, 100, &nt, NULL) == BS_OK && nt && atoi(nt) == 0);
    free(nt);

    /* ---- rewriting without features: stale pc files removed, identity whitening,
     *      absolute dat_path with a quote, clusters = templates ---- */
    hh.n_pc = 0;
    hh.n_pc_chan = 0;
    hh.dat_path = "/data/it's here\\x.bin";
    hh.sample_rate_hz = 29999.5;
    hh.hp_filtered = 1;
    /* leftovers of other exports and of Phy itself */
    snprintf(cmd, sizeof cmd, "cd '%s' && mkdir -p .phy/memcache && touch .phy/memcache/x template_ind.npy "
                              "cluster_info.tsv spike_positions.npy cluster_mylabel.tsv",
             dir);
    CHECK(system(cmd) == 0);
    CHECK(bs_phy_writer_open(&w, dir, &hh) == BS_OK);
    CHECK(!file_exists(dir, "params.py")); /* the old folder no longer looks complete */
    CHECK(bs_phy_writer_append_templates(w, T, &templates[0][0][0], NULL) == BS_OK);
    CHECK(bs_phy_writer_append_spikes(w, S, times, tpl_ids, NULL, amps, NULL) == BS_OK);
    float simrows[T * T] = {1, 0.5f, 0, 0.5f, 1, 0.25f, 0, 0.25f, 1};
    CHECK(bs_phy_writer_append_similar(w, T, simrows) == BS_OK);
    CHECK(bs_phy_writer_set_channels(w, chan_map, &pos[0][0], NULL) == BS_OK);
    CHECK(bs_phy_writer_close(w) == BS_OK);
    CHECK(!file_exists(dir, "pc_features.npy") && !file_exists(dir, "pc_feature_ind.npy"));
    CHECK(!file_exists(dir, ".phy") && !file_exists(dir, "template_ind.npy") && !file_exists(dir, "cluster_info.tsv") &&
          !file_exists(dir, "spike_positions.npy") && !file_exists(dir, "template_features.npy") &&
          !file_exists(dir, "template_feature_ind.npy"));
    CHECK(file_exists(dir, "cluster_mylabel.tsv")); /* a user's own labels are not ours to delete */
    snprintf(p, sizeof p, "%s/cluster_mylabel.tsv", dir);
    CHECK(remove(p) == 0);
    t = text(dir, "params.py");
    CHECK(t && strcmp(t, "dat_path = '/data/it\\'s here\\\\x.bin'\nn_channels_dat = 5\ndtype = 'int16'\n"
                         "offset = 0\nsample_rate = 29999.5\nhp_filtered = True\n") == 0);
    free(t);
    sim = load(dir, "similar_templates.npy", BS_NPY_F32, 2, &h);
    CHECK(sim && memcmp(sim, simrows, sizeof simrows) == 0);
    bs_mem_free(sim);
    w1 = load(dir, "whitening_mat_inv.npy", BS_NPY_F32, 2, &h);
    for (int i = 0; w1 && i < C * C; i++)
        CHECK(w1[i] == (i % (C + 1) == 0 ? 1.0f : 0.0f));
    bs_mem_free(w1);
    sci = load(dir, "spike_clusters.npy", BS_NPY_I32, 1, &h);
    CHECK(sci && memcmp(sci, tpl_ids, sizeof tpl_ids) == 0);
    bs_mem_free(sci);
    t = text(dir, "cluster_group.tsv");
    CHECK(t && strcmp(t, "cluster_id\tgroup\n0\tunsorted\n1\tunsorted\n2\tunsorted\n") == 0);
    free(t);
    CHECK(bs_phy_validate_summary(dir, NULL, &sum) == BS_OK && sum.n_violations == 0 && sum.n_clusters == 3);

    /* ---- a close that fails leaves nothing that looks complete ---- */
    char dir2[4300];
    snprintf(dir2, sizeof dir2, "%s/failed", tmp);
    CHECK(bs_phy_writer_open(&w, dir2, &hh) == BS_OK);
    CHECK(bs_phy_writer_append_templates(w, T, &templates[0][0][0], NULL) == BS_OK);
    CHECK(bs_phy_writer_append_spikes(w, S, times, tpl_ids, NULL, amps, NULL) == BS_OK);
    CHECK(bs_phy_writer_close(w) == BS_ERR_INTERNAL); /* no channel map */
    CHECK(strstr(bs_last_error(), "channel map and positions were never set") != NULL);
    CHECK(!file_exists(dir2, "params.py") && !file_exists(dir2, "spike_times.npy") &&
          !file_exists(dir2, "similar_templates.npy"));
    /* too few templates */
    CHECK(bs_phy_writer_open(&w, dir2, &hh) == BS_OK);
    CHECK(bs_phy_writer_append_templates(w, 2, &templates[0][0][0], NULL) == BS_OK);
    CHECK(bs_phy_writer_set_channels(w, chan_map, &pos[0][0], NULL) == BS_OK);
    CHECK(bs_phy_writer_close(w) == BS_ERR_INTERNAL);
    CHECK(strstr(bs_last_error(), "2 templates were appended, the header says 3") != NULL);
    /* template features for some spikes only */
    CHECK(bs_phy_writer_open(&w, dir2, &hh) == BS_OK);
    CHECK(bs_phy_writer_append_templates(w, T, &templates[0][0][0], NULL) == BS_OK);
    CHECK(bs_phy_writer_set_template_feature_ind(w, 2, &tfind[0][0]) == BS_OK);
    CHECK(bs_phy_writer_append_spikes(w, S, times, tpl_ids, NULL, amps, NULL) == BS_OK);
    CHECK(bs_phy_writer_append_template_features(w, S - 1, &tfeat[0][0]) == BS_OK);
    CHECK(bs_phy_writer_set_channels(w, chan_map, &pos[0][0], NULL) == BS_OK);
    CHECK(bs_phy_writer_close(w) == BS_ERR_INTERNAL);
    CHECK(strstr(bs_last_error(), "9 template feature rows were appended for 10 spikes") != NULL);
    CHECK(!file_exists(dir2, "template_features.npy") && !file_exists(dir2, "template_feature_ind.npy"));
    /* abort */
    CHECK(bs_phy_writer_open(&w, dir2, &hh) == BS_OK);
    CHECK(bs_phy_writer_append_spikes(w, S, times, tpl_ids, NULL, amps, NULL) == BS_OK);
    bs_phy_writer_abort(w);
    CHECK(!file_exists(dir2, "params.py") && !file_exists(dir2, "spike_times.npy"));

    /* ---- an unwritable output folder ---- */
    snprintf(p, sizeof p, "%s/plainfile", tmp);
    CHECK(bs_write_file_atomic(p, "x", 1) == BS_OK);
    char bad[4400];
    snprintf(bad, sizeof bad, "%s/sub", p);
    w = NULL;
    CHECK(bs_phy_writer_open(&w, bad, &hh) == BS_ERR_INPUT && w == NULL);
    CHECK(strstr(bs_last_error(), "plainfile") != NULL);
    if (geteuid() != 0) { /* root ignores permissions */
        char ro[4300];
        snprintf(ro, sizeof ro, "%s/readonly", tmp);
        mkdir(ro, 0555);
        chmod(ro, 0555);
        CHECK(bs_phy_writer_open(&w, ro, &hh) == BS_ERR_INPUT);
        CHECK(strstr(bs_last_error(), "not writable") != NULL);
        chmod(ro, 0755);
    }
    /* an inconsistent header is a bug in the caller */
    bs_phy_header b2 = header();
    b2.n_pc_chan = C + 1;
    CHECK(bs_phy_writer_open(&w, dir2, &b2) == BS_ERR_INTERNAL);
    b2 = header();
    b2.dtype = "int12";
    CHECK(bs_phy_writer_open(&w, dir2, &b2) == BS_ERR_INTERNAL && strstr(bs_last_error(), "int12"));
    b2 = header();
    b2.dat_path = "a\nb";
    CHECK(bs_phy_writer_open(&w, dir2, &b2) == BS_ERR_INPUT && strstr(bs_last_error(), "control character"));
    /* a singular whitening matrix */
    CHECK(bs_phy_writer_open(&w, dir2, &hh) == BS_OK);
    float sing[C * C] = {0};
    CHECK(bs_phy_writer_set_whitening(w, sing, NULL) == BS_ERR_INTERNAL && strstr(bs_last_error(), "singular"));
    /* duplicate cluster rows */
    bs_phy_cluster dup[2] = {{1, NULL, NULL, NAN, NAN}, {1, NULL, NULL, NAN, NAN}};
    CHECK(bs_phy_writer_set_clusters(w, 2, dup) == BS_ERR_INTERNAL && strstr(bs_last_error(), "described twice"));
    bs_phy_writer_abort(w);

    /* ---- streaming: 200,000 spikes in blocks of 1,000 never raise tracked memory ---- */
    {
        enum { BLOCK = 1000, NBLK = 200 };
        char big[4200], bigp[4300];
        snprintf(big, sizeof big, "%s/big", tmp);
        bs_phy_header hb = header();
        hb.n_samples = (int64_t)BLOCK * NBLK * 3;
        bs_mem_reset_peaks();
        size_t base = bs_mem_current(BS_DEV_HOST);
        CHECK(bs_phy_writer_open(&w, big, &hb) == BS_OK);
        CHECK(bs_phy_writer_append_templates(w, T, &templates[0][0][0], &pcind[0][0]) == BS_OK);
        int64_t bt[BLOCK];
        int32_t btp[BLOCK];
        float ba[BLOCK], bpf[BLOCK * P * PC];
        for (int k = 0; k < BLOCK * P * PC; k++)
            bpf[k] = (float)k;
        for (int b = 0; b < NBLK; b++) {
            for (int i = 0; i < BLOCK; i++) {
                int64_t g = (int64_t)b * BLOCK + i;
                bt[i] = 3 * g;
                btp[i] = (int32_t)(g % T);
                ba[i] = (float)g;
            }
            CHECK(bs_phy_writer_append_spikes(w, BLOCK, bt, btp, NULL, ba, bpf) == BS_OK);
        }
        size_t during = bs_mem_peak(BS_DEV_HOST) - base;
        CHECK(bs_phy_writer_set_channels(w, chan_map, &pos[0][0], shanks) == BS_OK);
        CHECK(bs_phy_writer_close(w) == BS_OK);
        CHECK_MSG(during < 4096, "tracked memory while streaming 200k spikes: %zu bytes", during);
        CHECK(bs_mem_current(BS_DEV_HOST) == base);
        bs_npy_header hbig;
        int64_t *bigt = load(big, "spike_times.npy", BS_NPY_I64, 1, &hbig);
        CHECK(hbig.shape[0] == (int64_t)BLOCK * NBLK);
        CHECK(bigt && bigt[0] == 0 && bigt[65536] == 3 * 65536 && bigt[BLOCK * NBLK - 1] == 3 * (BLOCK * NBLK - 1));
        float *bigpf = load(big, "pc_features.npy", BS_NPY_F32, 3, &hbig);
        CHECK(hbig.shape[0] == BLOCK * NBLK && bigpf && bigpf[(size_t)(BLOCK + 7) * P * PC + 3] == 7 * P * PC + 3);
        bs_mem_free(bigpf);
        /* the validator reads it in chunks: clean, then a decrease right at a chunk boundary (65,536) */
        bs_mem_reset_peaks();
        size_t before = bs_mem_current(BS_DEV_HOST); /* bigt is alive: 1.6 MB */
        bs_phy_summary bsum;
        CHECK(bs_phy_validate_summary(big, NULL, &bsum) == BS_OK && bsum.n_violations == 0 &&
              bsum.n_spikes == BLOCK * NBLK && bsum.n_clusters == T);
        CHECK_MSG(bs_mem_peak(BS_DEV_HOST) - before < (3u << 19), "validator peak %zu bytes",
                  bs_mem_peak(BS_DEV_HOST) - before);
        if (bigt) {
            bigt[65536] = bigt[65535] - 1;
            snprintf(bigp, sizeof bigp, "%s/spike_times.npy", big);
            CHECK(bs_npy_save(bigp, BS_NPY_I64, 1, hbig.shape, bigt) == BS_OK);
            size_t len = 0;
            char *rep = NULL;
            FILE *ms = open_memstream(&rep, &len);
            CHECK(bs_phy_validate_summary(big, ms, &bsum) == BS_OK && bsum.n_violations == 1);
            fclose(ms);
            CHECK_MSG(rep && strstr(rep, "spike_times.npy: not sorted: spike 65536 at sample 196604 comes after "
                                         "sample 196605 (1 decreases)"),
                      "%s", rep ? rep : "");
            free(rep);
        }
        bs_mem_free(bigt);
    }

    /* ---- a write that fails mid-stream (file size limit, like a full disk) ---- */
    {
        struct rlimit old_lim, lim;
        CHECK(getrlimit(RLIMIT_FSIZE, &old_lim) == 0);
        signal(SIGXFSZ, SIG_IGN);
        lim = old_lim;
        lim.rlim_cur = 64 * 1024;
        CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
        char full[4300];
        snprintf(full, sizeof full, "%s/full", tmp);
        bs_phy_header hf = header();
        hf.n_samples = 0; /* unknown */
        enum { NF = 20000 };
        int64_t *ft = bs_mem_alloc("test/full", NF * sizeof(int64_t));
        int32_t *fi = bs_mem_calloc("test/full", NF, sizeof(int32_t));
        float *fa = bs_mem_calloc("test/full", NF, sizeof(float));
        float *fp4 = bs_mem_calloc("test/full", (size_t)NF * P * PC, sizeof(float));
        for (int i = 0; ft && i < NF; i++)
            ft[i] = i;
        CHECK(bs_phy_writer_open(&w, full, &hf) == BS_OK);
        CHECK(bs_phy_writer_append_templates(w, T, &templates[0][0][0], &pcind[0][0]) == BS_OK);
        CHECK(bs_phy_writer_append_spikes(w, NF, ft, fi, NULL, fa, fp4) == BS_ERR_IO);
        CHECK(strstr(bs_last_error(), "write failed") != NULL);
        CHECK(bs_phy_writer_set_channels(w, chan_map, &pos[0][0], shanks) == BS_OK);
        CHECK(bs_phy_writer_close(w) == BS_ERR_IO);
        CHECK(strstr(bs_last_error(), "an earlier streamed write failed") != NULL);
        CHECK(!file_exists(full, "params.py") && !file_exists(full, "spike_times.npy"));
        CHECK(setrlimit(RLIMIT_FSIZE, &old_lim) == 0);
        bs_mem_free(ft);
        bs_mem_free(fi);
        bs_mem_free(fa);
        bs_mem_free(fp4);
    }

    /* dat_path as phylib needs it: absolute and canonical */
    char resolved[4096], messy[4400], want_abs[4400];
    snprintf(p, sizeof p, "%s/rec.bin", tmp);
    CHECK(bs_write_file_atomic(p, "\0\0", 2) == BS_OK);
    snprintf(messy, sizeof messy, "%s/./out/../rec.bin", tmp);
    char *canon = realpath(p, NULL);
    snprintf(want_abs, sizeof want_abs, "%s", canon ? canon : "?");
    free(canon);
    CHECK(bs_phy_resolve_dat_path(messy, resolved, sizeof resolved) == BS_OK);
    CHECK(resolved[0] == '/' && strcmp(resolved, want_abs) == 0);
    CHECK(bs_phy_resolve_dat_path(messy, resolved, 8) == BS_ERR_INPUT);
    snprintf(messy, sizeof messy, "%s/nope.bin", tmp);
    CHECK(bs_phy_resolve_dat_path(messy, resolved, sizeof resolved) == BS_ERR_INPUT &&
          strstr(bs_last_error(), "nope.bin"));

    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
