/*
 * test_probe_json.c - probe files: probeinterface fixtures written by
 * probeinterface 0.4.2 (tests/data/probes/make_probes.py), a Kilosort probe,
 * shank id numbering, the vertical pitch, and malformed files (each checked
 * for the status and a key phrase of the message).
 */
#include "test.h"

#include "io/probe_json.h"
#include "mem/mem.h"

static char g_path[4200];

static const char *fixture(const char *name)
{
    snprintf(g_path, sizeof g_path, "%s/probes/%s", test_env("BS_TEST_DATA", "tests/data"), name);
    return g_path;
}

static bs_status parse(const char *text, bs_probe *p, int *req)
{
    return bs_probe_json_parse(text, strlen(text), "probe.json", 0, p, req);
}

/* Parse text that must fail with BS_ERR_INPUT and a message holding `phrase`. */
#define BAD(text, phrase)                                                                                   \
    do {                                                                                                    \
        bs_probe bp_;                                                                                       \
        int req_ = -5;                                                                                      \
        bs_status st_ = parse(text, &bp_, &req_);                                                           \
        CHECK_MSG(st_ == BS_ERR_INPUT, "status %d for %s", (int)st_, text);                                 \
        CHECK_MSG(strstr(bs_last_error(), phrase) != NULL, "message '%s' lacks '%s'", bs_last_error(), phrase); \
        CHECK_MSG(strstr(bs_last_error(), "probe.json") != NULL, "message '%s' lacks the file name", bs_last_error()); \
        CHECK(bp_.n_chan == 0 && bp_.column == NULL && req_ == 0);                                          \
        if (st_ == BS_OK)                                                                                   \
            bs_probe_free(&bp_);                                                                            \
    } while (0)

int main(void)
{
    bs_probe p;
    int req = 0;

    /* probeinterface, 2 shanks, reversed wiring, contact 2 unconnected */
    CHECK(bs_probe_json_load(fixture("pi_2shank.json"), 0, &p, &req) == BS_OK);
    CHECK(p.n_chan == 11 && req == 12 && p.n_shanks == 2);
    CHECK(strcmp(p.model, "test-2shank") == 0);
    {
        /* contacts in file order, skipping contact 2: (x, y, shank, column) */
        const double x[11] = {0, 0, 16, 16, 16, 150, 150, 150, 166, 166, 166};
        const double y[11] = {0, 20, 0, 20, 40, 0, 20, 40, 0, 20, 40};
        const int col[11] = {11, 10, 8, 7, 6, 5, 4, 3, 2, 1, 0};
        const int sh[11] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
        int ok = 1;
        for (int i = 0; i < 11 && p.n_chan == 11; i++)
            ok &= p.x_um[i] == x[i] && p.y_um[i] == y[i] && p.column[i] == col[i] && p.shank[i] == sh[i];
        CHECK(ok);
    }
    CHECK(bs_probe_vertical_pitch_um(&p) == 20.0);
    bs_probe_free(&p);

    /* millimetres, no device_channel_indices (contact order), no shank_ids */
    CHECK(bs_probe_json_load(fixture("pi_linear_mm.json"), 0, &p, &req) == BS_OK);
    CHECK(p.n_chan == 4 && req == 4 && p.n_shanks == 1);
    for (int i = 0; i < 4 && p.n_chan == 4; i++) {
        CHECK(p.column[i] == i && p.shank[i] == 0 && p.x_um[i] == 0.0);
        CHECK_NEAR(p.y_um[i], 25.0 * i, 1e-9);
    }
    CHECK_NEAR(bs_probe_vertical_pitch_um(&p), 25.0, 1e-9);
    bs_probe_free(&p);

    /* a group of two probes: global columns, probe_index selects */
    CHECK(bs_probe_json_load(fixture("pi_group2.json"), 0, &p, &req) == BS_OK);
    CHECK(p.n_chan == 4 && req == 8 && p.column[0] == 0 && p.column[3] == 3 && p.y_um[3] == 60.0);
    bs_probe_free(&p);
    CHECK(bs_probe_json_load(fixture("pi_group2.json"), 1, &p, &req) == BS_OK);
    CHECK(p.n_chan == 4 && req == 8 && p.column[0] == 4 && p.column[3] == 7);
    CHECK(p.x_um[0] == 300.0 && p.y_um[1] == 30.0 && p.y_um[3] == 90.0);
    CHECK(bs_probe_vertical_pitch_um(&p) == 30.0);
    bs_probe_free(&p);
    CHECK(bs_probe_json_load(fixture("pi_group2.json"), 2, &p, &req) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "probe index 2 requested, expected 0..1") != NULL);

    /* a real four-shank NP 2.0 layout read by probeinterface from a SpikeGLX .meta;
     * np2_4shank.expect lists column, x, y, shank id per connected contact */
    CHECK(bs_probe_json_load(fixture("np2_4shank.json"), 0, &p, &req) == BS_OK);
    CHECK(p.n_chan == 384 && req == 384 && p.n_shanks == 4 && strcmp(p.model, "NP2010") == 0);
    {
        char ex[4200];
        snprintf(ex, sizeof ex, "%s/probes/np2_4shank.expect", test_env("BS_TEST_DATA", "tests/data"));
        FILE *fp = fopen(ex, "r");
        CHECK(fp != NULL);
        int n = 0, bad = 0, col, sh;
        double x, y;
        while (fp && n < p.n_chan && fscanf(fp, "%d %lf %lf %d", &col, &x, &y, &sh) == 4) {
            bad += p.column[n] != col || p.x_um[n] != x || p.y_um[n] != y || p.shank[n] != sh;
            n++;
        }
        if (fp)
            fclose(fp);
        CHECK_MSG(n == 384 && bad == 0, "%d lines, %d mismatches", n, bad);
    }
    CHECK(bs_probe_vertical_pitch_um(&p) == 15.0);
    bs_probe_free(&p);

    /* Kilosort dictionary */
    CHECK(bs_probe_json_load(fixture("ks_probe.json"), 0, &p, &req) == BS_OK);
    CHECK(p.n_chan == 6 && req == 8 && p.n_shanks == 2);
    {
        const int col[6] = {0, 1, 2, 3, 5, 6}, sh[6] = {0, 0, 0, 0, 1, 1};
        const double x[6] = {0, 32, 0, 32, 250, 282}, y[6] = {0, 0, 15, 15, 0, 0};
        int ok = 1;
        for (int i = 0; i < 6 && p.n_chan == 6; i++)
            ok &= p.column[i] == col[i] && p.shank[i] == sh[i] && p.x_um[i] == x[i] && p.y_um[i] == y[i];
        CHECK(ok);
    }
    CHECK(bs_probe_vertical_pitch_um(&p) == 15.0);
    bs_probe_free(&p);
    /* n_chan absent: max chanMap + 1 */
    CHECK(parse("{\"chanMap\":[3,1],\"xc\":[0,0],\"yc\":[0,10]}", &p, &req) == BS_OK);
    CHECK(req == 4 && p.n_chan == 2 && p.column[0] == 3 && p.n_shanks == 1);
    bs_probe_free(&p);

    /* shank ids: ints sorted numerically, mixed int/text compared as text */
    CHECK(parse("{\"probes\":[{\"contact_positions\":[[0,0],[0,10],[0,20],[0,30]],"
                "\"shank_ids\":[3,\"1\",\"3\",1]}]}",
                &p, &req) == BS_OK);
    CHECK(p.n_shanks == 2 && p.shank[0] == 1 && p.shank[1] == 0 && p.shank[2] == 1 && p.shank[3] == 0);
    bs_probe_free(&p);
    CHECK(parse("{\"probes\":[{\"contact_positions\":[[0,0],[0,10],[0,20]],\"shank_ids\":[\"10\",\"9\",\"10\"]}]}",
                &p, &req) == BS_OK);
    CHECK(p.n_shanks == 2 && p.shank[0] == 1 && p.shank[1] == 0); /* 9 < 10 numerically */
    bs_probe_free(&p);
    CHECK(parse("{\"probes\":[{\"contact_positions\":[[0,0],[0,10],[0,20]],\"shank_ids\":[\"b\",\"a\",\"\"]}]}",
                &p, &req) == BS_OK);
    CHECK(p.n_shanks == 3 && p.shank[0] == 2 && p.shank[1] == 1 && p.shank[2] == 0);
    bs_probe_free(&p);
    /* unconnected contacts do not create shanks; 3-D positions use x, y */
    CHECK(parse("{\"probes\":[{\"ndim\":3,\"contact_positions\":[[0,0,5],[0,10,5],[9,9,9]],"
                "\"shank_ids\":[\"a\",\"a\",\"z\"],\"device_channel_indices\":[1,0,-1]}]}",
                &p, &req) == BS_OK);
    CHECK(p.n_chan == 2 && p.n_shanks == 1 && req == 2 && p.column[0] == 1 && p.y_um[1] == 10.0);
    bs_probe_free(&p);
    /* a bare probe object (no group) */
    CHECK(parse("{\"si_units\":\"mm\",\"contact_positions\":[[0.5,0],[0.5,0.5]]}", &p, &req) == BS_OK);
    CHECK(p.n_chan == 2 && p.x_um[0] == 500.0 && p.y_um[1] == 500.0);
    bs_probe_free(&p);

    /* pitch: most common spacing wins; single contacts per column give 0 */
    CHECK(parse("{\"chanMap\":[0,1,2,3,4,5],\"xc\":[0,0,0,0,8,8],\"yc\":[0,10,20,50,0,10]}", &p, &req) == BS_OK);
    CHECK(bs_probe_vertical_pitch_um(&p) == 10.0);
    bs_probe_free(&p);
    CHECK(parse("{\"chanMap\":[0,1],\"xc\":[0,8],\"yc\":[0,10]}", &p, &req) == BS_OK);
    CHECK(bs_probe_vertical_pitch_um(&p) == 0.0);
    bs_probe_free(&p);

    /* malformed files */
    BAD("{\"probes\": [ {\"ndim\": 2, ", "not valid JSON");
    BAD("not json at all", "not valid JSON");
    BAD("{\"probes\":[{\"contact_positions\":[[0,NaN]]}]}", "not valid JSON");
    BAD("[1, 2, 3]", "expected a JSON object");
    BAD("{\"foo\": 1}", "unknown probe format");
    BAD("{\"probes\": []}", "expected at least one probe");
    BAD("{\"probes\": 3}", "probes: expected an array");
    BAD("{\"probes\":[{\"ndim\":2,\"si_units\":\"um\"}]}", "probes[0].contact_positions: missing");
    BAD("{\"probes\":[{\"contact_positions\":[]}]}", "expected at least one contact");
    BAD("{\"probes\":[{\"contact_positions\":[[0,0],[0,10]],\"device_channel_indices\":[0,1,2]}]}",
        "device_channel_indices has 3 entries but contact_positions has 2");
    BAD("{\"probes\":[{\"contact_positions\":[[0,0],[0,\"nan\"]]}]}",
        "contact_positions[1][1]: expected a number, got the string \"nan\"");
    BAD("{\"probes\":[{\"contact_positions\":[[0,0],[null,10]]}]}", "contact_positions[1][0]: expected a number, got null");
    BAD("{\"probes\":[{\"contact_positions\":[[0,0],[0,1e999]]}]}", "non-finite position");
    BAD("{\"probes\":[{\"contact_positions\":[[0,0],[5]]}]}", "contact_positions[1]: expected 2 numbers");
    BAD("{\"probes\":[{\"ndim\":3,\"contact_positions\":[[0,0,0],[5,5]]}]}", "contact_positions[1]: expected 3 numbers");
    BAD("{\"probes\":[{\"ndim\":4,\"contact_positions\":[[0,0]]}]}", "ndim: expected 2 or 3");
    BAD("{\"probes\":[{\"contact_positions\":[[0,0],[0,10],[0,0]]}]}", "share the position (0, 0)");
    BAD("{\"probes\":[{\"si_units\":\"cm\",\"contact_positions\":[[0,0]]}]}", "si_units: expected \"um\" or \"mm\"");
    BAD("{\"probes\":[{\"contact_positions\":[[0,0],[0,10]],\"device_channel_indices\":[0,-2]}]}",
        "device_channel_indices[1]: expected -1 (not connected) or a column >= 0, got -2");
    BAD("{\"probes\":[{\"contact_positions\":[[0,0],[0,10]],\"device_channel_indices\":[0,1.5]}]}",
        "device_channel_indices[1]: expected an integer");
    BAD("{\"probes\":[{\"contact_positions\":[[0,0],[0,10]],\"device_channel_indices\":[-1,-1]}]}",
        "every entry is -1");
    BAD("{\"probes\":[{\"contact_positions\":[[0,0],[0,10]],\"device_channel_indices\":[3,3]}]}",
        "two channels read the same data column 3");
    BAD("{\"probes\":[{\"contact_positions\":[[0,0],[0,10]],\"shank_ids\":[\"0\"]}]}",
        "shank_ids has 1 entries but contact_positions has 2");
    BAD("{\"probes\":[{\"contact_positions\":[[0,0],[0,10]],\"shank_ids\":[\"0\",{}]}]}",
        "shank_ids[1]: expected a string or a number, got an object");
    BAD("{\"probes\":[{\"contact_positions\":[[0,0]]}, 7]}", "probes[1]: expected a probe object");
    BAD("{\"chanMap\":[0,4],\"xc\":[0,0],\"yc\":[0,10],\"n_chan\":4}", "chanMap[1] = 4: expected a column in 0..3");
    BAD("{\"chanMap\":[0,-1],\"xc\":[0,0],\"yc\":[0,10]}", "chanMap[1]: expected an integer >= 0");
    BAD("{\"chanMap\":[0,1],\"xc\":[0],\"yc\":[0,10]}", "xc has 1 entries but chanMap has 2");
    BAD("{\"chanMap\":[0,1],\"xc\":[0,0]}", "yc: missing, expected an array");
    BAD("{\"chanMap\":[0,1],\"xc\":[0,0],\"yc\":[0,10],\"n_chan\":0}", "n_chan: expected a positive integer");
    BAD("{\"chanMap\":[],\"xc\":[],\"yc\":[]}", "chanMap: expected at least one channel");
    BAD("{\"chanMap\":[0,1],\"xc\":[0,0],\"yc\":[5,5]}", "share the position");

    /* a file that does not exist */
    CHECK(bs_probe_json_load("/nonexistent/probe.json", 0, &p, &req) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "/nonexistent/probe.json: cannot open") != NULL);
    CHECK(p.n_chan == 0);

    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
