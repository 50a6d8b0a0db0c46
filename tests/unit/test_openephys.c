/*
 * test_openephys.c - the Open Ephys reader on good inputs:
 *   - real structure.oebin + settings.xml files (tests/data/openephys/real,
 *     probeinterface's test data: Neuropix-PXI NP1/NP2 four-shank/NP2
 *     multishank and a OneBox with reordered channels): the positions of every column agree
 *     with probeinterface's read_openephys (tests/data/openephys/
 *     expected_probeinterface.txt, made by make_expected.py) up to one shift
 *     of origin, and the shanks group the same channels;
 *   - structure.oebin details: channel kinds (SYNC/ADC/AUX/AI), per-channel
 *     bit_volts, units, stream kinds and the stream choice;
 *   - settings.xml details: GUI 0.5 / 0.6 / 1.0 layouts, several probes,
 *     disabled probes, channel names in any order, shanks from values or
 *     names, the GUI < 0.6 y correction, XML syntax (entities, CDATA,
 *     comments, DOCTYPE, BOM);
 *   - recordings on disk (test_openephys_fixture.h): every form of REC, the
 *     stream folder, --stream, a probe file instead of settings.xml,
 *     settings_2.xml for experiment 2, GUI 0.5 int64 timestamps.npy, an
 *     empty recording, and bs_recording_open's dispatch.
 */
#include "test.h"

#include <math.h>

#include "io/openephys.h"
#include "io/recording.h"
#include "io/xml.h"
#include "mem/mem.h"
#include "test_openephys_fixture.h"

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = (size_t)n;
    }
    return buf;
}

/* ---- real files against probeinterface ---------------------------------------- */

static int find_file(const char *dir, const char *name, char *out, size_t n)
{
    char cmd[8800];
    snprintf(cmd, sizeof cmd, "find '%s' -name '%s' | sort | head -1", dir, name);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    int ok = fgets(out, (int)n, p) != NULL;
    pclose(p);
    if (!ok)
        return -1;
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

static void check_real(const char *data)
{
    char exp_path[4200];
    snprintf(exp_path, sizeof exp_path, "%s/openephys/expected_probeinterface.txt", data);
    FILE *f = fopen(exp_path, "r");
    CHECK_MSG(f != NULL, "cannot read fixture %s", exp_path);
    if (!f)
        return;
    static char line[1 << 16];
    int n_checked = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#')
            continue;
        char *ds = strtok(line, "|"), *stream = strtok(NULL, "|"), *count = strtok(NULL, "|"),
             *pos = strtok(NULL, "|\n");
        if (!ds || !stream || !count || !pos)
            continue;
        char dir[4400], oebin[4400], settings[4400];
        snprintf(dir, sizeof dir, "%s/openephys/real/%s", data, ds);
        CHECK_MSG(find_file(dir, "structure.oebin", oebin, sizeof oebin) == 0, "no fixture %s/*/structure.oebin", dir);
        CHECK_MSG(find_file(dir, "settings.xml", settings, sizeof settings) == 0, "no fixture %s/*/settings.xml", dir);
        size_t lo = 0, ls = 0;
        char *to = read_file(oebin, &lo), *ts = read_file(settings, &ls);
        CHECK(to && ts);
        bs_oe_index idx;
        int which = -1;
        bs_oe_settings set;
        bs_probe p;
        memset(&p, 0, sizeof p);
        int ok = to && ts && bs_oe_oebin_parse(to, lo, oebin, &idx) == BS_OK;
        if (ok) {
            ok = bs_oe_pick_stream(&idx, stream, oebin, &which) == BS_OK &&
                 bs_oe_settings_parse(ts, ls, settings, idx.streams[which].source_processor_id, &set) == BS_OK;
            if (ok) {
                ok = bs_oe_settings_probe(&set, &idx.streams[which], &p) == BS_OK;
                bs_oe_settings_free(&set);
            }
            bs_oe_index_free(&idx);
        }
        CHECK_MSG(ok, "%s %s: %s", ds, stream, bs_last_error());
        free(to);
        free(ts);
        if (!ok)
            continue;
        int n = atoi(count), good = p.n_chan == n;
        double dx = 0, dy = 0;
        int shank_map[64];
        for (int i = 0; i < 64; i++)
            shank_map[i] = -100;
        char *tok = strtok(pos, ",");
        for (int k = 0; good && k < n && tok; k++, tok = strtok(NULL, ",")) {
            double x, y;
            int sh;
            good = sscanf(tok, "%lf:%lf:%d", &x, &y, &sh) == 3 && p.column[k] == k;
            if (k == 0) {
                dx = p.x_um[0] - x;
                dy = p.y_um[0] - y;
            }
            good = good && fabs(p.x_um[k] - x - dx) < 1e-3 && fabs(p.y_um[k] - y - dy) < 1e-3;
            /* the same partition into shanks (probeinterface -1: none = one shank) */
            int key = sh + 1;
            good = good && key >= 0 && key < 64;
            if (good && shank_map[key] == -100)
                shank_map[key] = p.shank[k];
            good = good && shank_map[key] == p.shank[k];
        }
        CHECK_MSG(good, "%s %s: positions differ from probeinterface's", ds, stream);
        n_checked += good;
        bs_probe_free(&p);
    }
    fclose(f);
    CHECK_MSG(n_checked == 5, "%d real streams checked", n_checked);
}

/* ---- structure.oebin ------------------------------------------------------------- */

static void check_oebin(void)
{
    bs_oe_index idx;
    const char *t = FX_OEBIN;
    CHECK(bs_oe_oebin_parse(t, strlen(t), "s.oebin", &idx) == BS_OK);
    CHECK(idx.n_streams == 3 && strcmp(idx.gui_version, "0.6.7") == 0);
    if (idx.n_streams == 3) {
        const bs_oe_stream *ap = &idx.streams[0], *lfp = &idx.streams[1], *adc = &idx.streams[2];
        CHECK(strcmp(ap->name, "ProbeA-AP") == 0 && strcmp(ap->folder, "Neuropix-PXI-100.ProbeA-AP") == 0);
        CHECK(ap->n_cols == 5 && ap->n_neural == 4 && ap->kind == BS_OE_STREAM_NEURAL && ap->source_processor_id == 100);
        CHECK(ap->channels[4].kind == BS_OE_CHAN_SYNC && ap->channels[2].uv_per_bit == 0.25 &&
              ap->channels[0].uv_per_bit == 0.1949999928474426);
        CHECK(lfp->kind == BS_OE_STREAM_LFP && lfp->fs_hz == 2500 && lfp->n_neural == 4);
        CHECK(adc->kind == BS_OE_STREAM_OTHER && adc->n_neural == 0 && adc->channels[0].kind == BS_OE_CHAN_ADC);
        int w = -1;
        CHECK(bs_oe_pick_stream(&idx, NULL, "s.oebin", &w) == BS_OK && w == 0); /* LFP is never chosen alone */
        CHECK(bs_oe_pick_stream(&idx, "ProbeA-LFP", "s.oebin", &w) == BS_OK && w == 1);
        CHECK(bs_oe_pick_stream(&idx, "Neuropix-PXI-100.ProbeA-LFP", "s.oebin", &w) == BS_OK && w == 1);
        CHECK(bs_oe_pick_stream(&idx, "Record Node 101#ProbeA-AP", "s.oebin", &w) == BS_OK && w == 0);
    }
    bs_oe_index_free(&idx);

    /* kinds by name and units; mV neural channels; GUI 0.5 (no stream_name: the folder is the name) */
    const char *k = "{\"continuous\": [{\"folder_name\": \"Rhythm_FPGA-100.0/\", \"sample_rate\": 20000, "
                    "\"channels\": [{\"channel_name\": \"CH1\", \"bit_volts\": 0.0002, \"units\": \"mV\"}, "
                    "{\"channel_name\": \"aux1\", \"bit_volts\": 0.0000374}, {\"channel_name\": \"ADC1\", "
                    "\"bit_volts\": 0.00015}, {\"channel_name\": \"AI3\", \"bit_volts\": 0.0003}, "
                    "{\"channel_name\": \"AIR\", \"bit_volts\": 0.195}, {\"channel_name\": \"X\", \"bit_volts\": 1, "
                    "\"units\": \"V\"}, {\"channel_name\": \"SYNC\", \"bit_volts\": 1}]}]}";
    CHECK(bs_oe_oebin_parse(k, strlen(k), "k.oebin", &idx) == BS_OK);
    if (idx.n_streams == 1) {
        const bs_oe_stream *s = &idx.streams[0];
        CHECK(strcmp(s->name, "Rhythm_FPGA-100.0") == 0 && s->source_processor_id == -1);
        CHECK(s->channels[0].kind == BS_OE_CHAN_NEURAL && fabs(s->channels[0].uv_per_bit - 0.2) < 1e-12);
        CHECK(s->channels[1].kind == BS_OE_CHAN_AUX && s->channels[2].kind == BS_OE_CHAN_ADC &&
              s->channels[3].kind == BS_OE_CHAN_ADC && s->channels[4].kind == BS_OE_CHAN_NEURAL &&
              s->channels[5].kind == BS_OE_CHAN_ADC && s->channels[6].kind == BS_OE_CHAN_SYNC);
        CHECK(s->n_neural == 2 && s->kind == BS_OE_STREAM_NEURAL);
    }
    bs_oe_index_free(&idx);
}

/* ---- settings.xml ----------------------------------------------------------------- */

/* The probe for a stream with these neural channel names (plus a sync column). */
static bs_status probe_for(const char *xml, int node, const char *stream, int n, const char *const *names, bs_probe *p)
{
    bs_oe_settings s;
    bs_status st = bs_oe_settings_parse(xml, strlen(xml), "s.xml", node, &s);
    if (st != BS_OK)
        return st;
    bs_oe_stream str;
    memset(&str, 0, sizeof str);
    snprintf(str.name, sizeof str.name, "%s", stream);
    snprintf(str.folder, sizeof str.folder, "Neuropix-PXI-%d.%s", node, stream);
    str.n_cols = n + 1;
    str.n_neural = n;
    str.channels = calloc((size_t)n + 1, sizeof *str.channels);
    for (int c = 0; c < n; c++)
        snprintf(str.channels[c].name, sizeof str.channels[c].name, "%s", names[c]);
    str.channels[n].kind = BS_OE_CHAN_SYNC;
    st = bs_oe_settings_probe(&s, &str, p);
    free(str.channels);
    bs_oe_settings_free(&s);
    return st;
}

static void check_settings(const char *corpus)
{
    bs_probe p;
    const char *ap4[4] = {"AP1", "AP2", "AP3", "AP4"};
    CHECK(probe_for(FX_SETTINGS, 100, "ProbeA-AP", 4, ap4, &p) == BS_OK);
    CHECK(p.n_chan == 4 && p.n_shanks == 1 && strcmp(p.model, "PRB_1_4_0480_1") == 0);
    if (p.n_chan == 4)
        CHECK(p.x_um[0] == 27 && p.x_um[1] == 59 && p.x_um[2] == 11 && p.y_um[2] == 20 && p.x_um[3] == 43 &&
              p.column[3] == 3);
    bs_probe_free(&p);
    /* names in reverse order (a Channel Map / OneBox reorder): positions follow the names */
    const char *rev[4] = {"CH3", "CH2", "CH1", "CH0"};
    CHECK(probe_for(FX_SETTINGS, 100, "ProbeA-AP", 4, rev, &p) == BS_OK);
    if (p.n_chan == 4)
        CHECK(p.x_um[0] == 43 && p.y_um[0] == 20 && p.x_um[3] == 27 && p.column[0] == 0);
    bs_probe_free(&p);
    /* names without numbers: by position */
    const char *odd[4] = {"A", "B", "C", "D"};
    CHECK(probe_for(FX_SETTINGS, 100, "ProbeA-AP", 4, odd, &p) == BS_OK);
    if (p.n_chan == 4)
        CHECK(p.x_um[0] == 27 && p.x_um[3] == 43);
    bs_probe_free(&p);
    /* numbers that are not 0..n-1 or 1..n: by position */
    const char *gap[4] = {"CH5", "CH6", "CH7", "CH8"};
    CHECK(probe_for(FX_SETTINGS, 100, "ProbeA-AP", 4, gap, &p) == BS_OK);
    if (p.n_chan == 4)
        CHECK(p.x_um[0] == 27 && p.x_um[3] == 43);
    bs_probe_free(&p);

    /* GUI 1.0 layout, two enabled probes + a disabled one: chosen by custom name or stream name */
    char path[4300];
    size_t len;
    snprintf(path, sizeof path, "%s/settings_xml/gui10_custom.xml", corpus);
    char *g10 = read_file(path, &len);
    CHECK(g10 != NULL);
    if (g10) {
        const char *ch4[4] = {"CH0", "CH1", "CH2", "CH3"};
        CHECK(probe_for(g10, 100, "ProbeA", 4, ch4, &p) == BS_OK); /* serial == custom name: the STREAM name */
        CHECK(p.n_chan == 4 && p.n_shanks == 2 && strcmp(p.model, "NP2014") == 0);
        if (p.n_chan == 4)
            CHECK(p.shank[0] == 0 && p.shank[2] == 1 && p.x_um[2] == 277);
        bs_probe_free(&p);
        CHECK(probe_for(g10, 100, "MyProbe", 4, ch4, &p) == BS_OK); /* custom_probe_name, probePartNumber */
        CHECK(p.n_chan == 4 && p.n_shanks == 1 && strcmp(p.model, "NP2013") == 0);
        if (p.n_chan == 4) /* attributes listed out of order: CH0 is 758 */
            CHECK(p.x_um[0] == 758 && p.x_um[1] == 790 && p.y_um[2] == 15);
        bs_probe_free(&p);
        bs_oe_settings s;
        CHECK(bs_oe_settings_parse(g10, len, "g.xml", 100, &s) == BS_OK && s.n_probes == 2 &&
              strcmp(s.gui_version, "1.0.1") == 0);
        bs_oe_settings_free(&s);
        free(g10);
    }
    /* GUI 0.5: NodeId, Sources/ name, y - 250 x shank, entities, DOCTYPE, trailing comment */
    snprintf(path, sizeof path, "%s/settings_xml/gui05_nodeid.xml", corpus);
    char *g05 = read_file(path, &len);
    CHECK(g05 != NULL);
    if (g05) {
        const char *ap[4] = {"AP1", "AP2", "AP3", "AP4"};
        CHECK(probe_for(g05, 100, "Neuropix-PXI-100.0", 4, ap, &p) == BS_OK);
        CHECK(p.n_chan == 4 && p.n_shanks == 3); /* shank ids 0, 2, 1 -> ranks 0, 2, 1 */
        if (p.n_chan == 4)
            CHECK(p.y_um[1] == 4100 - 500 && p.y_um[3] == 2545 - 250 && p.shank[1] == 2 && p.shank[3] == 1);
        bs_probe_free(&p);
        free(g05);
    }
    /* QuadBase: shank in the channel names, probes named by custom names */
    snprintf(path, sizeof path, "%s/settings_xml/quadbase_names.xml", corpus);
    char *qb = read_file(path, &len);
    if (qb) {
        const char *ch2[2] = {"CH0", "CH1"};
        CHECK(probe_for(qb, 100, "ProbeC-2", 2, ch2, &p) == BS_OK);
        CHECK(p.n_chan == 2 && p.x_um[0] == 277 && p.n_shanks == 1);
        bs_probe_free(&p);
        free(qb);
    }

    /* the XML reader itself */
    const char *x = "\xef\xbb\xbf<?xml version='1.0'?><!DOCTYPE r [<!ENTITY e 'x'>]><!-- c --><r a='1 &lt; 2' "
                    "b=\"&#65;&#x42;&#x20AC;\">\n  <s/> text &amp; more <![CDATA[ignored]]><t>  <![CDATA[<c>]]> "
                    "</t><s k='v'></s></r><!-- after -->";
    bs_xml_doc d;
    CHECK(bs_xml_parse(x, strlen(x), "x.xml", &d) == BS_OK);
    CHECK(d.n_nodes == 4 && strcmp(d.nodes[0].name, "r") == 0);
    CHECK(strcmp(bs_xml_attr_get(&d, 0, "a"), "1 < 2") == 0 && strcmp(bs_xml_attr_get(&d, 0, "b"), "AB\xe2\x82\xac") == 0);
    CHECK(strcmp(d.nodes[0].text, "text & more") == 0 && strcmp(d.nodes[2].text, "<c>") == 0);
    int s1 = bs_xml_child(&d, 0, "s"), s2 = bs_xml_next(&d, s1, "s");
    CHECK(s1 == 1 && s2 == 3 && bs_xml_child(&d, 0, "t") == 2 && bs_xml_next(&d, s2, NULL) == -1);
    CHECK(bs_xml_find(&d, 0, 0, "s") == 1 && bs_xml_find(&d, 0, 1, "s") == 3 && bs_xml_find(&d, 1, 1, "s") == -1);
    CHECK(strcmp(bs_xml_attr_get(&d, 3, "k"), "v") == 0 && bs_xml_attr_get(&d, 3, "z") == NULL);
    bs_xml_free(&d);
}

/* ---- recordings on disk ------------------------------------------------------------- */

static int open_ok(const char *path, const char *stream, const char *probe, bs_recording *rec)
{
    bs_open_options opt = {0};
    opt.stream = stream;
    opt.probe_path = probe;
    bs_status st = bs_recording_open(path, &opt, rec);
    if (st != BS_OK)
        fprintf(stderr, "open %s: %s\n", path, bs_last_error());
    return st == BS_OK;
}

static void check_files(const char *tmp)
{
    char root[4200], rec_dir[4400], path[4600];
    snprintf(root, sizeof root, "%s/oe_good", tmp);
    snprintf(path, sizeof path, "rm -rf '%s'", root);
    CHECK(system(path) == 0);
    CHECK(fx_tree(root, 1, 1, 600, 5000, NULL, NULL, rec_dir, sizeof rec_dir) == 0);

    /* every form of REC reaches the AP stream */
    char forms[8][4600];
    snprintf(forms[0], sizeof forms[0], "%s/structure.oebin", rec_dir);
    snprintf(forms[1], sizeof forms[1], "%s", rec_dir);
    snprintf(forms[2], sizeof forms[2], "%s/Record Node 101/experiment1", root);
    snprintf(forms[3], sizeof forms[3], "%s/Record Node 101/", root);
    snprintf(forms[4], sizeof forms[4], "%s", root);
    snprintf(forms[5], sizeof forms[5], "%s/continuous/Neuropix-PXI-100.ProbeA-AP", rec_dir);
    snprintf(forms[6], sizeof forms[6], "%s/continuous/Neuropix-PXI-100.ProbeA-AP/continuous.dat", rec_dir);
    for (int f = 0; f < 7; f++) {
        bs_recording rec;
        CHECK_MSG(bs_openephys_detect(forms[f]), "%s", forms[f]);
        if (!open_ok(forms[f], NULL, NULL, &rec)) {
            CHECK(0);
            continue;
        }
        CHECK(strcmp(rec.format, "openephys") == 0 && strcmp(rec.stream, "ProbeA-AP") == 0);
        CHECK(rec.n_cols == 5 && rec.n_samples == 600 && rec.first_sample == 5000 && rec.fs_hz == 30000);
        CHECK(rec.probe.n_chan == 4 && rec.probe.column[3] == 3 && rec.probe.x_um[2] == 11);
        CHECK(rec.uv_per_bit[0] == (float)0.1949999928474426 && rec.uv_per_bit[2] == 0.25f);
        CHECK(rec.dtype == BS_SAMPLE_I16 && rec.data_offset == 0 && rec.offset == 0);
        CHECK(strstr(rec.data_path, "Neuropix-PXI-100.ProbeA-AP/continuous.dat") != NULL);
        bs_recording_close(&rec);
    }
    /* another stream: by --stream, or by its folder */
    bs_recording rec;
    if (open_ok(root, "ProbeA-LFP", NULL, &rec)) {
        CHECK(rec.fs_hz == 2500 && rec.n_samples == 50 && rec.first_sample == 5000 / 12 && rec.probe.n_chan == 4);
        bs_recording_close(&rec);
    } else {
        CHECK(0);
    }
    snprintf(path, sizeof path, "%s/continuous/Neuropix-PXI-100.ProbeA-LFP", rec_dir);
    if (open_ok(path, NULL, NULL, &rec)) {
        CHECK(rec.fs_hz == 2500 && strcmp(rec.stream, "ProbeA-LFP") == 0);
        bs_recording_close(&rec);
    } else {
        CHECK(0);
    }
    /* a probe file instead of settings.xml (a .prb with two channels, columns 3 and 1) */
    char prb[4400];
    snprintf(prb, sizeof prb, "%s/two.prb", tmp);
    CHECK(fx_write_text(prb, "channel_groups = {0: {'channels': [3, 1], 'geometry': {3: (0, 0), 1: (0, 30)}}}\n") == 0);
    if (open_ok(root, NULL, prb, &rec)) {
        CHECK(rec.probe.n_chan == 2 && rec.probe.column[0] == 3 && rec.probe.y_um[1] == 30 && rec.n_cols == 5);
        CHECK(rec.uv_per_bit[0] == (float)0.1949999928474426 && rec.uv_per_bit[1] == (float)0.1949999928474426);
        bs_recording_close(&rec);
    } else {
        CHECK(0);
    }
    /* without settings.xml the probe file is enough */
    snprintf(path, sizeof path, "%s/Record Node 101/settings.xml", root);
    CHECK(remove(path) == 0);
    if (open_ok(rec_dir, NULL, prb, &rec)) {
        CHECK(rec.probe.n_chan == 2);
        bs_recording_close(&rec);
    } else {
        CHECK(0);
    }

    /* experiment 2 reads settings_2.xml */
    char root2[4300], rec2[4400];
    snprintf(root2, sizeof root2, "%s/oe_exp2", tmp);
    snprintf(path, sizeof path, "rm -rf '%s'", root2);
    CHECK(system(path) == 0);
    char *moved = fx_sub(FX_SETTINGS, "CH0=\"27\"", "CH0=\"-27\"");
    CHECK(fx_tree(root2, 2, 3, 120, 0, NULL, moved, rec2, sizeof rec2) == 0);
    free(moved);
    if (open_ok(root2, NULL, NULL, &rec)) {
        CHECK(rec.probe.x_um[0] == -27 && rec.first_sample == 0 && rec.n_samples == 120);
        bs_recording_close(&rec);
    } else {
        CHECK(0);
    }
    /* GUI 0.5.x: no sample_numbers.npy, int64 sample numbers in timestamps.npy */
    snprintf(path, sizeof path, "%s/continuous/Neuropix-PXI-100.ProbeA-AP/sample_numbers.npy", rec2);
    CHECK(remove(path) == 0);
    snprintf(path, sizeof path, "%s/continuous/Neuropix-PXI-100.ProbeA-AP/timestamps.npy", rec2);
    int64_t ts[120];
    for (int i = 0; i < 120; i++)
        ts[i] = 777 + i;
    int64_t shape[1] = {120};
    CHECK(bs_npy_save(path, BS_NPY_I64, 1, shape, ts) == BS_OK);
    if (open_ok(rec2, NULL, NULL, &rec)) {
        CHECK(rec.first_sample == 777);
        bs_recording_close(&rec);
    } else {
        CHECK(0);
    }
    /* an empty recording opens with 0 samples */
    char root3[4300], rec3[4400];
    snprintf(root3, sizeof root3, "%s/oe_empty", tmp);
    snprintf(path, sizeof path, "rm -rf '%s'", root3);
    CHECK(system(path) == 0);
    CHECK(fx_tree(root3, 1, 1, 0, 10, NULL, NULL, rec3, sizeof rec3) == 0);
    if (open_ok(rec3, NULL, NULL, &rec)) {
        CHECK(rec.n_samples == 0 && rec.first_sample == 0);
        bs_recording_close(&rec);
    } else {
        CHECK(0);
    }
    /* not Open Ephys: a plain folder and a raw file are left to the other readers */
    snprintf(path, sizeof path, "%s/plain/recordingX", tmp); /* a folder named like one, without structure.oebin */
    CHECK(fx_mkdirs(path) == 0);
    snprintf(path, sizeof path, "%s/plain", tmp);
    CHECK(!bs_openephys_detect(path));
    snprintf(path, sizeof path, "%s/continuous/Neuropix-PXI-100.ProbeA-AP/sample_numbers.npy", rec_dir);
    CHECK(!bs_openephys_detect(path));
    CHECK(!bs_openephys_detect("/nonexistent/structure.oebin"));
    /* the stream list */
    bs_oe_stream_info *list = NULL;
    int n = 0;
    CHECK(bs_openephys_list_streams(root, &list, &n) == BS_OK && n == 3);
    if (n == 3)
        CHECK(list[0].kind == BS_OE_STREAM_NEURAL && list[1].kind == BS_OE_STREAM_LFP &&
              list[2].kind == BS_OE_STREAM_OTHER && list[2].n_cols == 2 && strcmp(list[2].name, "PXIe-6341") == 0);
    free(list);
}

int main(void)
{
    size_t live = bs_mem_live_blocks();
    const char *data = test_env("BS_TEST_DATA", "tests/data");
    char corpus[4200];
    snprintf(corpus, sizeof corpus, "%s/fuzz/corpus", test_env("BS_SOURCE", "."));
    check_real(data);
    check_oebin();
    check_settings(corpus);
    check_files(test_tmpdir());
    CHECK_MSG(bs_mem_live_blocks() == live, "%zu blocks left", bs_mem_live_blocks() - live);
    TEST_MAIN_END();
}
