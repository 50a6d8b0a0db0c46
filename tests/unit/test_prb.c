/*
 * test_prb.c - .prb probe files: the fixtures of tests/data/prb (read the way
 * Python's exec reads them: tests/cli/test_openephys.sh checks that against
 * python3), Python literal details (signs, floats, strings, tuples, names,
 * range), bs_probe_file_load's choice by extension, and malformed files,
 * each with its exact message. No allocation may be left behind.
 */
#include "test.h"

#include "io/prb.h"
#include "mem/mem.h"

static char g_path[4200];

static const char *fixture(const char *name)
{
    snprintf(g_path, sizeof g_path, "%s/prb/%s", test_env("BS_TEST_DATA", "tests/data"), name);
    return g_path;
}

static bs_status parse(const char *text, bs_probe *p, int *req)
{
    return bs_prb_parse(text, strlen(text), "x.prb", 0, p, req);
}

/* text must fail with BS_ERR_INPUT and exactly this message. */
static int bad(const char *text, const char *message, int line)
{
    bs_probe p;
    int req = -5;
    bs_status st = parse(text, &p, &req);
    int ok = st == BS_ERR_INPUT && strcmp(bs_last_error(), message) == 0 && p.n_chan == 0 && p.column == NULL &&
             req == 0;
    if (!ok)
        fprintf(stderr, "line %d: status %d, message\n  '%s'\nexpected\n  '%s'\n", line, (int)st, bs_last_error(),
                message);
    if (st == BS_OK)
        bs_probe_free(&p);
    return ok;
}

#define BAD(text, message) CHECK(bad(text, message, __LINE__))

/* One-group file with these geometry and channels entries. */
static const char *one(const char *group)
{
    static char buf[1024];
    snprintf(buf, sizeof buf, "channel_groups = {0: %s}\n", group);
    return buf;
}

int main(void)
{
    bs_probe p;
    int req = 0;
    size_t live = bs_mem_live_blocks();

    /* tetrodes: int keys, tuples, graph, comments, trailing commas, total_nb_channels */
    CHECK(bs_prb_load(fixture("tetrodes.prb"), 0, &p, &req) == BS_OK);
    CHECK(p.n_chan == 8 && req == 10 && p.n_shanks == 2);
    if (p.n_chan == 8) {
        const int col[8] = {0, 1, 2, 3, 9, 8, 7, 6};
        const double x[8] = {0, -12.5, 12.5, 0, 200, 187.5, 212.5, 200}, y[8] = {0, 20, 20, 40, 0, 20, 20, 40};
        int ok = 1;
        for (int i = 0; i < 8; i++)
            ok &= p.column[i] == col[i] && p.x_um[i] == x[i] && p.y_um[i] == y[i] && p.shank[i] == (i >= 4);
        CHECK(ok);
    }
    bs_probe_free(&p);

    /* string keys sorted as text, lists, range(), list(range()), a variable, skipped imports */
    CHECK(bs_prb_load(fixture("shanks_strings.prb"), 0, &p, &req) == BS_OK);
    CHECK(p.n_chan == 6 && req == 6 && p.n_shanks == 2);
    if (p.n_chan == 6) {
        /* file order: shankB (channels 3..5) then shankA; shankA < shankB as text */
        int ok = 1;
        for (int i = 0; i < 6; i++) {
            int b = i < 3;
            ok &= p.column[i] == (b ? 3 + i : i - 3) && p.shank[i] == b && p.x_um[i] == (b ? 250 : 0) &&
                  p.y_um[i] == 25.0 * (i % 3);
        }
        CHECK(ok);
    }
    bs_probe_free(&p);

    /* geometry only: keys in order, the repeated key keeps its first place and its last value */
    CHECK(bs_prb_load(fixture("geometry_only.prb"), 0, &p, &req) == BS_OK);
    CHECK(p.n_chan == 3 && req == 5 && p.n_shanks == 1);
    if (p.n_chan == 3)
        CHECK(p.column[0] == 4 && p.y_um[0] == 150 && p.column[1] == 2 && p.y_um[1] == 50 && p.column[2] == 0 &&
              p.y_um[2] == 0);
    bs_probe_free(&p);

    /* 32 channels, total_nb_channels 34 */
    CHECK(bs_probe_file_load(fixture("circus32.prb"), 0, &p, &req) == BS_OK);
    CHECK(p.n_chan == 32 && req == 34 && p.y_um[31] == 775 && p.column[31] == 31);
    bs_probe_free(&p);

    /* literal details */
    CHECK(parse("channel_groups = {-1: {'geometry': {0: (-1e1, +.5), 1: (1_000, 5.)}}}; x = None; t = True", &p,
                &req) == BS_OK);
    CHECK(p.n_chan == 2 && p.x_um[0] == -10 && p.y_um[0] == 0.5 && p.x_um[1] == 1000 && p.y_um[1] == 5);
    bs_probe_free(&p);
    CHECK(parse("g = {0: (0, 0), 1: (0, 20)}\nchannel_groups = {\"a\\\"b\": {r'channels': [1, 0], u'geometry': g}}",
                &p, &req) == BS_OK);
    CHECK(p.n_chan == 2 && p.column[0] == 1 && p.y_um[0] == 20 && req == 2);
    bs_probe_free(&p);
    /* Python: -(-5) is 5, (5) is 5, a later assignment wins */
    CHECK(parse("channel_groups = 1\nchannel_groups = {0: {'channels': [(5)], 'geometry': {5: (- -5, 0)}}}", &p,
                &req) == BS_OK);
    CHECK(p.n_chan == 1 && p.column[0] == 5 && p.x_um[0] == 5 && req == 6);
    bs_probe_free(&p);
    /* group keys 2 and '10' are numbers: 2 < 10 */
    CHECK(parse("channel_groups = {'10': {'geometry': {0: (0, 0)}}, 2: {'geometry': {1: (0, 0)}}}", &p, &req) ==
          BS_OK);
    CHECK(p.n_chan == 2 && p.shank[0] == 1 && p.shank[1] == 0);
    bs_probe_free(&p);

    /* malformed files: exact messages */
    BAD("", "x.prb: no 'channel_groups = {...}' assignment: expected a .prb probe file");
    BAD("# only a comment\n", "x.prb: no 'channel_groups = {...}' assignment: expected a .prb probe file");
    BAD("channel_groups = [1, 2]",
        "x.prb: channel_groups: expected a dict {group: {'channels': ..., 'geometry': ...}}, got a list of 2 values");
    BAD("channel_groups = {}", "x.prb: channel_groups: expected at least one group, got an empty dict");
    BAD("channel_groups = {0: {'channels': [0]}}",
        "x.prb: channel_groups[0]: missing 'geometry': expected {channel: (x, y)} in µm");
    BAD(one("{'channels': [0], 'geometry': [(0, 0)]}"),
        "x.prb: channel_groups[0]['geometry']: expected a dict {channel: (x, y)}, got a list of 1 values");
    BAD(one("{'channels': 'abc', 'geometry': {}}"),
        "x.prb: channel_groups[0]['channels']: expected a list of channel numbers, got the string 'abc'");
    BAD(one("{'channels': [0, 1], 'geometry': {0: (0, 0)}}"),
        "x.prb: channel_groups[0]['geometry']: no position for channel 1");
    BAD(one("{'channels': [-1], 'geometry': {0: (0, 0)}}"),
        "x.prb: channel_groups[0]['channels'][0]: expected a channel number >= 0, got the int -1");
    BAD(one("{'channels': [1.5], 'geometry': {0: (0, 0)}}"),
        "x.prb: channel_groups[0]['channels'][0]: expected a channel number >= 0, got the float 1.5");
    BAD(one("{'channels': [1e30], 'geometry': {0: (0, 0)}}"),
        "x.prb: channel_groups[0]['channels'][0]: expected a channel number >= 0, got the float 1e+30");
    BAD(one("{'channels': [0], 'geometry': {0: (0,)}}"),
        "x.prb: channel_groups[0]['geometry'][0]: expected a position (x, y) of numbers in µm, got a tuple of 1 values");
    BAD(one("{'channels': [0], 'geometry': {0: ('a', 1)}}"),
        "x.prb: channel_groups[0]['geometry'][0]: expected a position (x, y) of numbers in µm, got a tuple of 2 values");
    BAD(one("{'channels': [0], 'geometry': {None: (0, 0)}}"),
        "x.prb: channel_groups[0]['geometry']: expected channel numbers as keys, got None");
    BAD(one("{'channels': [0, 1], 'geometry': {0: (0, 0), 1: (0, 0)}}"),
        "x.prb: channels 0 and 1 share the position (0, 0) µm on shank 0");
    BAD("channel_groups = {0: {'channels': [0], 'geometry': {0: (0, 0)}}, 1: {'channels': [0], 'geometry': {0: (9, "
        "0)}}}",
        "x.prb: two channels read the same data column 0");
    BAD("channel_groups = {(1, 2): {'geometry': {0: (0, 0)}}}",
        "x.prb: channel_groups: group 0: expected an int or a string as the group key, got a tuple of 2 values");
    BAD("channel_groups = {0: [1]}",
        "x.prb: channel_groups[0]: expected a dict with 'channels' and 'geometry', got a list of 1 values");
    BAD("total_nb_channels = 2\nchannel_groups = {0: {'geometry': {5: (0, 0)}}}",
        "x.prb: total_nb_channels is 2 but channel 5 is used: expected at least 6");
    BAD("total_nb_channels = 'many'\nchannel_groups = {0: {'geometry': {5: (0, 0)}}}",
        "x.prb: total_nb_channels: expected the number of columns in the binary (an int >= 1), got the string 'many'");
    /* syntax */
    BAD("channel_groups = {0: {'geometry': {0: (0, 0)}}", "x.prb: line 1: expected ',' or '}', got the end of the file");
    BAD("channel_groups = {0 {'geometry': {}}}", "x.prb: line 1: expected ':' after the dict key, got '{'geometry': {}}'");
    BAD("x = 1\n\nchannel_groups = {0: {'geometry': {0: (0, 0)]}}",
        "x.prb: line 3: expected ',' or '}', got ']}}'");
    BAD("x = 1\n\nchannel_groups = {0: {'geometry': {0: (0, 0]}}}",
        "x.prb: line 3: expected ',' or ')', got ']}}}'");
    BAD("channel_groups = {0: {'geometry': {0: (0, 0)}}} extra",
        "x.prb: line 1: expected the end of the line after the value, got 'extra'");
    BAD("for i in range(4):\n    pass\n",
        "x.prb: line 1: expected a statement NAME = value (other Python statements are not supported), got 'for i in "
        "range(4'");
    BAD("channel_groups = np.array([1])",
        "x.prb: line 1: expected a literal value (numbers, strings, lists, tuples, dicts, range()); other Python "
        "expressions are not supported, got 'np.array([1])'");
    BAD("channel_groups = geometry", "x.prb: line 1: expected a literal or a name assigned earlier (no 'geometry' so "
                                     "far), got 'geometry'");
    BAD("x = 'abc\nchannel_groups = {}", "x.prb: line 1: expected a string closed on the same line, got ''abc'");
    BAD("x = \"\"\"doc\"\"\"", "x.prb: line 1: expected a one-line string (triple-quoted strings are not supported), "
                                 "got '\"\"\"doc\"\"\"'");
    BAD("x = 0x10", "x.prb: line 1: expected a decimal number, got '0x10'");
    BAD("x = 1e999", "x.prb: line 1: expected a finite decimal number, got '1e999'");
    BAD("x = -'a'", "x.prb: line 1: expected a number after the sign, got ''a''");
    BAD("x = range(0, 10, 0)", "x.prb: line 1: expected a range() step other than 0, got '(0, 10, 0)'");
    BAD("x = range(2000000)", "x.prb: line 1: expected ranges of at most 1048576 values in all, got '(2000000)'");
    BAD("x = range(1.5)", "x.prb: line 1: expected range() of integers, got '(1.5)'");
    BAD("x = list(5)", "x.prb: line 1: expected a list, tuple or range() inside list() or tuple(), got '5)'");
    BAD("x = tuple([1, 2]", "x.prb: line 1: expected ')' closing list() or tuple(), got the end of the file");
    {
        char deep[400] = "x = ";
        for (int i = 0; i < 70; i++)
            strcat(deep, "[");
        BAD(deep, "x.prb: line 1: expected brackets nested at most 64 deep, got '[[[[[['");
    }
    {
        const char nul[] = "x = 1\0\n";
        bs_probe q;
        CHECK(bs_prb_parse(nul, sizeof nul - 1, "x.prb", 0, &q, &req) == BS_ERR_INPUT &&
              strcmp(bs_last_error(), "x.prb: expected Python text, got a NUL byte at offset 5") == 0);
    }
    {
        bs_probe q;
        const char *t = "channel_groups = {0: {'geometry': {0: (0, 0)}}}";
        CHECK(bs_prb_parse(t, strlen(t), "x.prb", 1, &q, &req) ==
                  BS_ERR_INPUT &&
              strcmp(bs_last_error(), "x.prb: a .prb file describes one probe (its channel groups are shanks): probe "
                                      "index 1 does not exist, expected 0") == 0);
    }
    {
        bs_probe q;
        char missing[4300];
        snprintf(missing, sizeof missing, "%s", fixture("absent.prb"));
        CHECK(bs_probe_file_load(missing, 0, &q, &req) == BS_ERR_INPUT);
        char expect[4400];
        snprintf(expect, sizeof expect, "probe file: %s: cannot open: No such file or directory", missing);
        CHECK_MSG(strcmp(bs_last_error(), expect) == 0, "%s", bs_last_error());
    }
    CHECK(bs_mem_live_blocks() == live);
    TEST_MAIN_END();
}
