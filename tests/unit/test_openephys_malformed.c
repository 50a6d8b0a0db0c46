/*
 * test_openephys_malformed.c - bad Open Ephys inputs, each with its exact
 * message: structure.oebin (syntax, types, missing fields, huge and
 * non-numeric values, deep nesting, empty), the stream choice, settings.xml
 * (XML syntax, deep nesting, entities, NUL bytes, processors, electrode
 * tables), and files on disk (truncated or mis-sized continuous.dat, sample
 * numbers of the wrong type or length, missing files, several recordings,
 * probe files that do not fit the stream). Every case must give
 * BS_ERR_INPUT and leave no allocation behind.
 */
#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include <unistd.h>

#include "io/openephys.h"
#include "io/recording.h"
#include "mem/mem.h"
#include "test_openephys_fixture.h"

static int same(const char *what, const char *expect, int line)
{
    if (strcmp(bs_last_error(), expect) == 0)
        return 1;
    fprintf(stderr, "line %d (%s): message\n  '%s'\nexpected\n  '%s'\n", line, what, bs_last_error(), expect);
    return 0;
}

/* ---- structure.oebin -------------------------------------------------------------- */

static int oebin_bad(const char *text, const char *expect, int line)
{
    bs_oe_index idx;
    bs_status st = bs_oe_oebin_parse(text, text ? strlen(text) : 0, "x.oebin", &idx);
    if (st == BS_OK)
        bs_oe_index_free(&idx);
    return st == BS_ERR_INPUT && idx.n_streams == 0 && idx.streams == NULL && same("oebin", expect, line);
}
#define OEBIN_BAD(text, expect) CHECK(oebin_bad(text, expect, __LINE__))

/* FX_OEBIN with one edit. */
#define OEBIN_EDIT(from, to, expect)                                                                             \
    do {                                                                                                         \
        char *t_ = fx_sub(FX_OEBIN, from, to);                                                                   \
        CHECK_MSG(t_ != NULL, "edit '%s' did not apply", from);                                                  \
        if (t_)                                                                                                  \
            CHECK(oebin_bad(t_, expect, __LINE__));                                                              \
        free(t_);                                                                                                \
    } while (0)

static int pick_bad(const char *text, const char *want, const char *expect, int line)
{
    bs_oe_index idx;
    if (bs_oe_oebin_parse(text, strlen(text), "x.oebin", &idx) != BS_OK) {
        fprintf(stderr, "line %d: %s\n", line, bs_last_error());
        return 0;
    }
    int w = 7;
    bs_status st = bs_oe_pick_stream(&idx, want, "x.oebin", &w);
    bs_oe_index_free(&idx);
    return st == BS_ERR_INPUT && w == -1 && same("pick", expect, line);
}
#define PICK_BAD(text, want, expect) CHECK(pick_bad(text, want, expect, __LINE__))

static void oebin_cases(void)
{
    OEBIN_BAD("", "x.oebin: the file is empty, expected the JSON index of an Open Ephys recording");
    OEBIN_BAD("{\"continuous\": [", "x.oebin: not valid JSON (syntax error near byte 15): expected structure.oebin");
    OEBIN_BAD("GUI version 0.6", "x.oebin: not valid JSON (syntax error near byte 0): expected structure.oebin");
    {
        static char deep[4100];
        memset(deep, '[', 2000);
        memset(deep + 2000, ']', 2000);
        deep[4000] = '\0';
        OEBIN_BAD(deep, "x.oebin: JSON nested deeper than the limit of 1000 levels near byte 1000: expected structure.oebin");
    }
    OEBIN_BAD("[{\"continuous\": []}]", "x.oebin: expected a JSON object with a \"continuous\" array, got an array");
    OEBIN_BAD("{\"GUI version\": \"0.6.7\"}", "x.oebin: continuous: expected an array of streams, got nothing");
    OEBIN_BAD("{\"continuous\": {}}", "x.oebin: continuous: expected an array of streams, got an object");
    OEBIN_BAD("{\"continuous\": []}", "x.oebin: continuous: expected at least one stream, got an empty array (no "
                                      "continuous data was recorded)");
    OEBIN_BAD("{\"continuous\": [7]}", "x.oebin: continuous[0]: expected a stream object, got 7");
    OEBIN_EDIT("\"folder_name\": \"Neuropix-PXI-100.ProbeA-AP/\", ", "",
               "x.oebin: continuous[0].folder_name: expected a string, got nothing");
    OEBIN_EDIT("Neuropix-PXI-100.ProbeA-AP/", "../../../etc/",
               "x.oebin: continuous[0].folder_name: expected one folder name below continuous/, got "
               "\"../../../etc/\"");
    OEBIN_EDIT("Neuropix-PXI-100.ProbeA-AP/", "/", "x.oebin: continuous[0].folder_name: expected one folder name "
                                                   "below continuous/, got \"/\"");
    OEBIN_EDIT("\"sample_rate\": 30000.0", "\"sample_rate\": \"30000\"",
               "x.oebin: continuous[0].sample_rate: expected a rate in Hz (> 0, at most 1e7), got the string "
               "\"30000\"");
    OEBIN_EDIT("\"sample_rate\": 30000.0", "\"sample_rate\": 1e300",
               "x.oebin: continuous[0].sample_rate: expected a rate in Hz (> 0, at most 1e7), got 1.0000000000000001e+300");
    OEBIN_EDIT("\"sample_rate\": 30000.0", "\"sample_rate\": -30000",
               "x.oebin: continuous[0].sample_rate: expected a rate in Hz (> 0, at most 1e7), got -30000");
    OEBIN_EDIT("\"stream_name\": \"ProbeA-AP\"", "\"stream_name\": 5",
               "x.oebin: continuous[0].stream_name: expected a string, got 5");
    OEBIN_EDIT("\"num_channels\": 5", "\"num_channels\": 6",
               "x.oebin: continuous[0].num_channels is 6 but channels lists 5: expected one entry per column of "
               "continuous.dat");
    OEBIN_EDIT("\"num_channels\": 5", "\"num_channels\": \"5\"",
               "x.oebin: continuous[0].num_channels: expected an integer >= 1, got the string \"5\"");
    OEBIN_EDIT("\"num_channels\": 5", "\"num_channels\": 4.5",
               "x.oebin: continuous[0].num_channels: expected an integer >= 1, got 4.5");
    OEBIN_EDIT("\"num_channels\": 5", "\"num_channels\": 1e40",
               "x.oebin: continuous[0].num_channels: expected an integer >= 1, got 1e+40");
    OEBIN_BAD("{\"continuous\": [{\"folder_name\": \"a\", \"sample_rate\": 1, \"channels\": []}]}",
              "x.oebin: continuous[0].channels: expected at least one channel, got none");
    OEBIN_BAD("{\"continuous\": [{\"folder_name\": \"a\", \"sample_rate\": 1}]}",
              "x.oebin: continuous[0].channels: expected an array of channel objects, got nothing");
    OEBIN_BAD("{\"continuous\": [{\"folder_name\": \"a\", \"sample_rate\": 1, \"channels\": [\"CH1\"]}]}",
              "x.oebin: continuous[0].channels[0]: expected a channel object, got the string \"CH1\"");
    OEBIN_EDIT("\"channel_name\": \"AP2\", ", "",
               "x.oebin: continuous[0].channels[1].channel_name: expected a string, got nothing");
    OEBIN_EDIT("\"bit_volts\": 0.25, ", "",
               "x.oebin: continuous[0].channels[2].bit_volts: missing, expected the channel's scale (units per bit)");
    OEBIN_EDIT("\"bit_volts\": 0.25", "\"bit_volts\": \"0.25\"",
               "x.oebin: continuous[0].channels[2].bit_volts: expected a number > 0, got the string \"0.25\"");
    OEBIN_EDIT("\"bit_volts\": 0.25", "\"bit_volts\": 0",
               "x.oebin: continuous[0].channels[2].bit_volts: expected a number > 0, got 0");
    OEBIN_EDIT("\"bit_volts\": 0.25", "\"bit_volts\": null",
               "x.oebin: continuous[0].channels[2].bit_volts: expected a number > 0, got null");
    OEBIN_EDIT("\"bit_volts\": 0.25", "\"bit_volts\": 1e400",
               "x.oebin: continuous[0].channels[2].bit_volts: expected a number > 0, got inf");
    OEBIN_EDIT("\"bit_volts\": 0.25", "\"bit_volts\": 25e6",
               "x.oebin: continuous[0].channels[2].bit_volts: 25000000 µV per bit, expected a value in 1e-6..1e6");
    OEBIN_EDIT("\"bit_volts\": 0.25, \"units\": \"uV\"", "\"bit_volts\": 0.25, \"units\": 1",
               "x.oebin: continuous[0].channels[2].units: expected a string, got 1");
    OEBIN_EDIT("\"bit_volts\": 0.25, \"units\": \"uV\"", "\"bit_volts\": 0.25, \"units\": \"furlong\"",
               "x.oebin: continuous[0].channels[2].units: expected \"uV\", \"mV\" or \"V\", got \"furlong\"");

    /* the stream choice */
    const char *two = "{\"continuous\": [{\"folder_name\": \"Neuropix-PXI-100.ProbeA/\", \"sample_rate\": 30000, "
                      "\"stream_name\": \"ProbeA\", \"channels\": [{\"channel_name\": \"CH1\", \"bit_volts\": 0.195}]}, "
                      "{\"folder_name\": \"Neuropix-PXI-103.ProbeA/\", \"sample_rate\": 30000, \"stream_name\": "
                      "\"ProbeA\", \"channels\": [{\"channel_name\": \"CH1\", \"bit_volts\": 0.195}]}, "
                      "{\"folder_name\": \"ADC/\", \"sample_rate\": 30000, \"channels\": [{\"channel_name\": \"ADC1\", "
                      "\"bit_volts\": 0.001}]}]}";
    PICK_BAD(two, NULL, "x.oebin: 2 streams hold neural channels, pick one with --stream NAME: 'ProbeA' (1 neural "
                        "channels at 30000 Hz), 'ProbeA' (1 neural channels at 30000 Hz), 'ADC' (1 channels, no neural "
                        "ones)");
    PICK_BAD(two, "ProbeA", "x.oebin: stream name 'ProbeA' is used by 2 streams (folders 'Neuropix-PXI-100.ProbeA', "
                            "'Neuropix-PXI-103.ProbeA'): give the folder name with --stream");
    PICK_BAD(two, "ProbeB", "x.oebin: no stream named 'ProbeB': expected one of 'ProbeA' (1 neural channels at 30000 "
                            "Hz), 'ProbeA' (1 neural channels at 30000 Hz), 'ADC' (1 channels, no neural ones)");
    PICK_BAD(two, "ADC", "x.oebin: stream 'ADC' has no neural channels (ADC, AUX or SYNC only): nothing to sort");
    const char *lfp = "{\"continuous\": [{\"folder_name\": \"L/\", \"sample_rate\": 2500, \"stream_name\": "
                      "\"ProbeA-LFP\", \"channels\": [{\"channel_name\": \"LFP1\", \"bit_volts\": 0.195}]}]}";
    PICK_BAD(lfp, NULL, "x.oebin: no stream of spike-band neural channels to sort (streams: 'ProbeA-LFP' (1 LFP "
                        "channels at 2500 Hz)); pick one with --stream NAME");
}

/* ---- settings.xml ---------------------------------------------------------------------- */

static const char *const AP4[4] = {"AP1", "AP2", "AP3", "AP4"};

/* Parse `xml` for node 100 and build the probe of a 4-channel stream "ProbeA-AP";
 * must fail with `expect`. */
static int settings_bad(const char *xml, size_t len, const char *expect, int line)
{
    bs_oe_settings s;
    bs_status st = bs_oe_settings_parse(xml, len, "s.xml", 100, &s);
    if (st == BS_OK) {
        bs_oe_stream str;
        memset(&str, 0, sizeof str);
        snprintf(str.name, sizeof str.name, "ProbeA-AP");
        snprintf(str.folder, sizeof str.folder, "Neuropix-PXI-100.ProbeA-AP");
        str.n_cols = 5;
        str.n_neural = 4;
        bs_oe_channel ch[5];
        memset(ch, 0, sizeof ch);
        for (int c = 0; c < 4; c++)
            snprintf(ch[c].name, sizeof ch[c].name, "%s", AP4[c]);
        ch[4].kind = BS_OE_CHAN_SYNC;
        str.channels = ch;
        bs_probe p;
        st = bs_oe_settings_probe(&s, &str, &p);
        bs_oe_settings_free(&s);
        if (st == BS_OK) {
            bs_probe_free(&p);
            fprintf(stderr, "line %d: accepted\n", line);
            return 0;
        }
    }
    return st == BS_ERR_INPUT && same("settings", expect, line);
}
#define XML_BAD(text, expect) CHECK(settings_bad(text, strlen(text), expect, __LINE__))
#define XML_EDIT(from, to, expect)                                                                               \
    do {                                                                                                         \
        char *t_ = fx_sub(FX_SETTINGS, from, to);                                                                \
        CHECK_MSG(t_ != NULL, "edit '%s' did not apply", from);                                                  \
        if (t_)                                                                                                  \
            CHECK(settings_bad(t_, strlen(t_), expect, __LINE__));                                               \
        free(t_);                                                                                                \
    } while (0)

static void settings_cases(void)
{
    XML_BAD("", "s.xml: expected an XML root element, got an empty file");
    XML_BAD("  \n<!-- only a comment -->\n", "s.xml: expected an XML root element, got none");
    XML_BAD("settings", "s.xml: line 1: expected '<' starting the root element, got 'settings'");
    XML_BAD("<SETTINGS><INFO></SETTINGS>",
            "s.xml: line 1: expected </INFO> closing the element opened on line 1, got '</SETTINGS>'");
    XML_BAD("<SETTINGS>\n<INFO>\n", "s.xml: line 3: expected </INFO> closing the element opened on line 2, got the "
                                    "end of the file");
    XML_BAD("<A/><B/>", "s.xml: line 1: expected nothing but comments after the root element, got '<B/>'");
    XML_BAD("<A x=1/>", "s.xml: line 1: expected a quoted attribute value, got '1/>'");
    XML_BAD("<A x=\"1/>", "s.xml: line 1: expected the closing quote of the attribute value, got '\"1/>'");
    XML_BAD("<A x=\"&nbsp;\"/>",
            "s.xml: line 1: expected one of the references &lt; &gt; &amp; &quot; &apos; &#N;, got '&nbsp;\"/>'");
    XML_BAD("<A x=\"&#0;\"/>", "s.xml: line 1: expected a character reference to a Unicode character, got '&#0;\"/>'");
    XML_BAD("<A><!-- open", "s.xml: line 1: expected '-->' closing the comment opened here, got '<!-- open'");
    XML_BAD("<A><![CDATA[x", "s.xml: line 1: expected ']]>' closing the CDATA section opened here, got "
                             "'<![CDATA[x'");
    XML_BAD("<1A/>", "s.xml: line 1: expected an element name after '<', got '1A/>'");
    {
        static char deep[4000];
        size_t k = 0;
        for (int i = 0; i < 300; i++)
            k += (size_t)sprintf(deep + k, "<a>");
        XML_BAD(deep, "s.xml: line 1: expected elements nested at most 256 deep, got '<a><a><a><a>'");
    }
    {
        const char nul[] = "<A>\0</A>";
        CHECK(settings_bad(nul, sizeof nul - 1, "s.xml: expected XML text, got a NUL byte at offset 3", __LINE__));
    }
    /* processors and probes */
    XML_BAD("<SETTINGS><SIGNALCHAIN><PROCESSOR name=\"Acquisition Board\" nodeId=\"100\"/></SIGNALCHAIN></SETTINGS>",
            "s.xml: no Neuropix-PXI or OneBox processor: the probe geometry is not in this file, give it with "
            "--probe FILE");
    XML_EDIT("nodeId=\"100\"", "nodeId=\"104\"",
             "s.xml: no Neuropix-PXI or OneBox processor with node id 100 (the stream's source; found node ids 104): "
             "give the geometry with --probe FILE");
    XML_EDIT("isEnabled=\"1\"", "isEnabled=\"0\"",
             "s.xml: the Neuropix-PXI processor (node 100) has no enabled NP_PROBE: give the geometry of stream "
             "'ProbeA-AP' with --probe FILE");
    XML_EDIT("<ELECTRODE_XPOS CH0=\"27\"", "<SELECTED_ELECTRODES CH0=\"27\"",
             "s.xml: NP_PROBE 'ProbeA' has no ELECTRODE_XPOS / ELECTRODE_YPOS (plugin older than 0.3.3, or a layout "
             "with only SELECTED_ELECTRODES): give the geometry with --probe FILE");
    XML_EDIT("CH2=\"11\"", "CH2=\"eleven\"",
             "s.xml: NP_PROBE (line 8): ELECTRODE_XPOS: CH2: expected a position in µm, got \"eleven\"");
    XML_EDIT("CH2=\"11\"", "CH2=\"1e300\"",
             "s.xml: NP_PROBE (line 8): ELECTRODE_XPOS: CH2: expected a position in µm, got \"1e300\"");
    XML_EDIT("CH2=\"11\"", "CH2=\"\"", "s.xml: NP_PROBE (line 8): ELECTRODE_XPOS: CH2: expected a position in µm, got "
                                       "\"\"");
    XML_EDIT("CH2=\"11\"", "ELECTRODE2=\"11\"",
             "s.xml: NP_PROBE (line 8): ELECTRODE_XPOS: attribute 'ELECTRODE2': expected a channel key CH0..CH65535 "
             "(or CHn_shank)");
    XML_EDIT("CH2=\"11\"", "CH99999=\"11\"",
             "s.xml: NP_PROBE (line 8): ELECTRODE_XPOS: attribute 'CH99999': expected a channel key CH0..CH65535 "
             "(or CHn_shank)");
    XML_EDIT("CH2=\"11\"", "CH1=\"11\"", "s.xml: NP_PROBE (line 8): ELECTRODE_XPOS lists channel 1 twice");
    XML_EDIT("CH2=\"20\" CH3=\"20\"", "CH3=\"20\"",
             "s.xml: NP_PROBE (line 8): ELECTRODE_YPOS has no CH2, expected a y for every x");
    XML_EDIT("CH2=\"20\" CH3=\"20\"", "CH2=\"20\" CH3=\"20\" CH4=\"40\"",
             "s.xml: NP_PROBE (line 8): ELECTRODE_YPOS lists 5 channels but ELECTRODE_XPOS 4");
    XML_EDIT("CH1=\"0:0\"", "CH1=\"a:b\"",
             "s.xml: NP_PROBE (line 8): CHANNELS: CH1: expected \"bank\" or \"bank:shank\" integers, got \"a:b\"");
    XML_EDIT("<ELECTRODE_XPOS CH0=\"27\" CH1=\"59\" CH2=\"11\" CH3=\"43\"/>", "<ELECTRODE_XPOS/>",
             "s.xml: NP_PROBE (line 8): ELECTRODE_XPOS lists no channels");
    XML_EDIT("CH3=\"43\"", "CH3=\"43\" CH4=\"59\"",
             "s.xml: NP_PROBE (line 8): ELECTRODE_YPOS has no CH4, expected a y for every x");
    {
        char *a = fx_sub(FX_SETTINGS, "CH3=\"43\"", "CH3=\"43\" CH4=\"75\"");
        char *b = a ? fx_sub(a, "CH3=\"20\"", "CH3=\"20\" CH4=\"40\"") : NULL;
        CHECK(b && settings_bad(b, strlen(b), "s.xml: NP_PROBE 'ProbeA' places 5 channels but stream 'ProbeA-AP' has 4 "
                                              "neural channels: a saved channel subset or another probe; give the "
                                              "geometry with --probe FILE",
                                __LINE__));
        free(a);
        free(b);
    }
    XML_EDIT("CH1=\"59\"", "CH1=\"27\"", "s.xml: channels 0 and 1 share the position (27, 0) µm on shank 0");
    {
        /* two probes, neither named in the stream */
        char *a = fx_sub(FX_SETTINGS, "</NP_PROBE>",
                         "</NP_PROBE><NP_PROBE probe_serial_number=\"9\" custom_probe_name=\"Left\"><ELECTRODE_XPOS "
                         "CH0=\"1\"/><ELECTRODE_YPOS CH0=\"1\"/></NP_PROBE>");
        char *b = a ? fx_sub(a, "<STREAM name=\"ProbeA-AP\"/>", "<STREAM name=\"Right-AP\"/>") : NULL;
        CHECK(b && settings_bad(b, strlen(b), "s.xml: 2 enabled probes ('Right', 'Left') and none matches stream "
                                              "'ProbeA-AP': give the geometry with --probe FILE",
                                __LINE__));
        free(a);
        free(b);
    }
}

/* ---- files on disk ----------------------------------------------------------------------- */

static int open_bad(const char *path, const char *stream, const char *probe, const char *expect, int line)
{
    bs_open_options opt = {0};
    opt.stream = stream;
    opt.probe_path = probe;
    bs_recording rec;
    bs_status st = bs_recording_open(path, &opt, &rec);
    if (st == BS_OK) {
        bs_recording_close(&rec);
        fprintf(stderr, "line %d: %s opened\n", line, path);
        return 0;
    }
    return st == BS_ERR_INPUT && rec.probe.n_chan == 0 && rec.uv_per_bit == NULL && same("open", expect, line);
}
#define OPEN_BAD(path, stream, probe, ...)                                                                       \
    do {                                                                                                         \
        char e_[20000];                                                                                           \
        snprintf(e_, sizeof e_, __VA_ARGS__);                                                                    \
        CHECK(open_bad(path, stream, probe, e_, __LINE__));                                                      \
    } while (0)

static void file_cases(const char *tmp)
{
    char root[4200], rec[4400], ap[4600], path[9000], cmd[9000];
    snprintf(root, sizeof root, "%s/oe_bad", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    CHECK(fx_tree(root, 1, 1, 100, 4242, NULL, NULL, rec, sizeof rec) == 0);
    snprintf(ap, sizeof ap, "%s/continuous/Neuropix-PXI-100.ProbeA-AP", rec);

    /* continuous.dat: a truncated file */
    snprintf(path, sizeof path, "%s/continuous.dat", ap);
    CHECK(truncate(path, 999) == 0);
    OPEN_BAD(rec, NULL, NULL,
             "%s/continuous.dat: 999 bytes is not a whole number of samples of 5 int16 channels (10 bytes each; "
             "remainder 9): truncated, or num_channels in structure.oebin is wrong",
             ap);
    /* whole samples, but fewer than the sample numbers */
    CHECK(truncate(path, 990) == 0);
    OPEN_BAD(rec, NULL, NULL,
             "%s/sample_numbers.npy: holds 100 sample numbers but continuous.dat holds 99 samples: expected one per "
             "sample (truncated file, or wrong num_channels in structure.oebin?)",
             ap);
    /* a wrong channel count: 1000 bytes read as 4 columns is 125 samples */
    CHECK(truncate(path, 1000) == 0);
    char *four = fx_sub(FX_OEBIN, "\"num_channels\": 5,\n  \"channels\": [" FX_CHAN("AP1", "0.1949999928474426", "uV") ", ",
                        "\"num_channels\": 4,\n  \"channels\": [");
    CHECK(four != NULL);
    snprintf(path, sizeof path, "%s/structure.oebin", rec);
    CHECK(four && fx_write_text(path, four) == 0);
    free(four);
    OPEN_BAD(rec, NULL, NULL,
             "%s/sample_numbers.npy: holds 100 sample numbers but continuous.dat holds 125 samples: expected one per "
             "sample (truncated file, or wrong num_channels in structure.oebin?)",
             ap);
    CHECK(fx_write_text(path, FX_OEBIN) == 0);
    /* structure.oebin problems reach the user with its path */
    CHECK(fx_write_text(path, "") == 0);
    OPEN_BAD(rec, NULL, NULL, "%s/structure.oebin: the file is empty, expected the JSON index of an Open Ephys recording",
             rec);
    CHECK(fx_write_text(path, FX_OEBIN) == 0);
    OPEN_BAD(rec, "ProbeZ", NULL,
             "%s/structure.oebin: no stream named 'ProbeZ': expected one of 'ProbeA-AP' (4 neural channels at 30000 "
             "Hz), 'ProbeA-LFP' (4 LFP channels at 2500 Hz), 'PXIe-6341' (2 channels, no neural ones)",
             rec);
    /* sample numbers */
    snprintf(path, sizeof path, "%s/sample_numbers.npy", ap);
    double f64[100] = {0};
    int64_t shape[2] = {100, 1};
    CHECK(bs_npy_save(path, BS_NPY_F64, 1, shape, f64) == BS_OK);
    OPEN_BAD(rec, NULL, NULL, "%s: expected a 1-D int64 array of sample numbers, got <f8 with 1 dimensions", path);
    int64_t i64[100] = {0};
    CHECK(bs_npy_save(path, BS_NPY_I64, 2, shape, i64) == BS_OK);
    OPEN_BAD(rec, NULL, NULL, "%s: expected a 1-D int64 array of sample numbers, got <i8 with 2 dimensions", path);
    CHECK(bs_npy_save(path, BS_NPY_I64, 1, shape, i64) == BS_OK);
    CHECK(truncate(path, 500) == 0);
    OPEN_BAD(rec, NULL, NULL, "%s: truncated npy file: 800 data bytes expected, 372 present", path);
    CHECK(fx_write_text(path, "not an npy file") == 0);
    OPEN_BAD(rec, NULL, NULL, "%s: not an .npy file (bad magic)", path);
    CHECK(remove(path) == 0);
    /* sample_numbers.npy missing, timestamps.npy in seconds (GUI >= 0.6) */
    snprintf(path, sizeof path, "%s/timestamps.npy", ap);
    OPEN_BAD(rec, NULL, NULL,
             "%s: holds <f8 values with 1 dimensions (GUI >= 0.6 seconds) and sample_numbers.npy is missing: expected "
             "sample_numbers.npy, or 1-D int64 sample numbers here (GUI 0.5.x)",
             path);
    CHECK(remove(path) == 0);
    OPEN_BAD(rec, NULL, NULL,
             "%s/sample_numbers.npy: missing: expected sample_numbers.npy (GUI >= 0.6) or timestamps.npy (GUI 0.5.x) "
             "beside continuous.dat",
             ap);
    /* continuous.dat missing */
    snprintf(path, sizeof path, "%s/continuous.dat", ap);
    CHECK(remove(path) == 0);
    OPEN_BAD(rec, NULL, NULL, "%s: missing: expected the samples of stream 'ProbeA-AP' (%s/structure.oebin)", path, rec);

    /* a second recording: the Record Node folder is ambiguous, the message lists both */
    char root2[4300], rec2[4400], node[4400];
    snprintf(root2, sizeof root2, "%s/oe_two", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root2);
    CHECK(system(cmd) == 0);
    CHECK(fx_tree(root2, 1, 1, 24, 0, NULL, NULL, rec2, sizeof rec2) == 0);
    CHECK(fx_tree(root2, 1, 2, 24, 24, NULL, NULL, rec2, sizeof rec2) == 0);
    CHECK(fx_tree(root2, 3, 1, 24, 0, NULL, NULL, rec2, sizeof rec2) == 0);
    snprintf(node, sizeof node, "%s/Record Node 101", root2);
    OPEN_BAD(node, NULL, NULL,
             "%s: holds 3 Open Ephys recordings (experiment1/recording1, experiment1/recording2, "
             "experiment3/recording1): name the one to open",
             node);
    OPEN_BAD(root2, NULL, NULL,
             "%s: holds 3 Open Ephys recordings (Record Node 101/experiment1/recording1, Record Node "
             "101/experiment1/recording2, Record Node 101/experiment3/recording1): name the one to open",
             root2);
    /* the stream folder given disagrees with --stream; an ADC stream folder */
    snprintf(path, sizeof path, "%s/continuous/Neuropix-PXI-100.ProbeA-AP", rec2);
    OPEN_BAD(path, "ProbeA-LFP", NULL,
             "%s/structure.oebin: --stream ProbeA-LFP names folder 'Neuropix-PXI-100.ProbeA-LFP' but the path given "
             "is stream folder 'Neuropix-PXI-100.ProbeA-AP'",
             rec2);
    snprintf(path, sizeof path, "%s/continuous/NI-DAQmx-102.PXIe-6341", rec2);
    OPEN_BAD(path, NULL, NULL,
             "%s/structure.oebin: stream 'PXIe-6341' has no neural channels (ADC, AUX or SYNC only): nothing to sort",
             rec2);
    /* settings.xml missing (experiment 3 has settings_3.xml; remove it and settings.xml) */
    snprintf(path, sizeof path, "%s/settings_3.xml", node);
    CHECK(remove(path) == 0);
    snprintf(path, sizeof path, "%s/settings.xml", node);
    CHECK(remove(path) == 0);
    OPEN_BAD(rec2, NULL, NULL,
             "%s/settings.xml: missing: the probe geometry of stream 'ProbeA-AP' comes from the Record Node's "
             "settings.xml, or give it with --probe FILE",
             node);
    /* probe files that do not fit the stream */
    char prb[4400];
    snprintf(prb, sizeof prb, "%s/sync.prb", tmp);
    CHECK(fx_write_text(prb, "channel_groups = {0: {'channels': [0, 4], 'geometry': {0: (0, 0), 4: (0, 20)}}}") == 0);
    OPEN_BAD(rec2, NULL, prb,
             "%s: probe channel 1 reads column 4 of stream 'ProbeA-AP', which is the sync channel 'AP_SYNC', expected "
             "a neural channel",
             prb);
    CHECK(fx_write_text(prb, "channel_groups = {0: {'channels': [0, 6], 'geometry': {0: (0, 0), 6: (0, 20)}}}") == 0);
    OPEN_BAD(rec2, NULL, prb, "%s: the probe needs 7 data columns but stream 'ProbeA-AP' has 5 (%s/structure.oebin)",
             prb, rec2);
    snprintf(path, sizeof path, "%s/absent.json", tmp);
    OPEN_BAD(rec2, NULL, path, "probe file: %s: cannot open: No such file or directory", path);
    /* not a recording at all */
    snprintf(path, sizeof path, "%s/oe_none", tmp);
    CHECK(fx_mkdirs(path) == 0);
    CHECK(!bs_openephys_detect(path));
    bs_recording r;
    CHECK(bs_openephys_open(path, NULL, &r) == BS_ERR_INPUT);
    char e[9400];
    snprintf(e, sizeof e,
             "%s: not an Open Ephys recording: expected structure.oebin, a recording, experiment or Record Node "
             "folder, or a continuous/<stream> folder",
             path);
    CHECK(same("none", e, __LINE__));
}

int main(void)
{
    size_t live = bs_mem_live_blocks();
    oebin_cases();
    settings_cases();
    file_cases(test_tmpdir());
    CHECK_MSG(bs_mem_live_blocks() == live, "%zu blocks left", bs_mem_live_blocks() - live);
    TEST_MAIN_END();
}
