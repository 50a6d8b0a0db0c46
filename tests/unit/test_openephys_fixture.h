/*
 * test_openephys_fixture.h - a tiny Open Ephys Record Node written from C for
 * the Open Ephys tests: GUI 0.6.7 layout, a Neuropix-PXI processor (node
 * 100) with four electrodes, and an NI-DAQmx processor (node 102).
 *
 *   ROOT/Record Node 101/settings.xml (FX_SETTINGS)
 *   ROOT/Record Node 101/experimentE/recordingR/structure.oebin (FX_OEBIN)
 *     continuous/Neuropix-PXI-100.ProbeA-AP/  5 columns AP1..AP4 + AP_SYNC;
 *                                              AP3 is 0.25 µV/bit, the others 0.195
 *     continuous/Neuropix-PXI-100.ProbeA-LFP/ 5 columns at 2500 Hz
 *     continuous/NI-DAQmx-102.PXIe-6341/      2 ADC columns
 * Each stream holds n samples, sample k of column c = 100 * c + k % 50,
 * sample numbers first .. first + n - 1 (LFP: first / 12 ...).
 * Electrode positions (µm): CH0 (27, 0), CH1 (59, 0), CH2 (11, 20), CH3 (43, 20).
 */
#ifndef TEST_OPENEPHYS_FIXTURE_H
#define TEST_OPENEPHYS_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/npy.h"

#define FX_CHAN(name, bv, units) "{\"channel_name\": \"" name "\", \"bit_volts\": " bv ", \"units\": \"" units "\"}"

#define FX_OEBIN                                                                                                    \
    "{\"GUI version\": \"0.6.7\", \"continuous\": [\n"                                                             \
    " {\"folder_name\": \"Neuropix-PXI-100.ProbeA-AP/\", \"sample_rate\": 30000.0, \"source_processor_name\": "      \
    "\"Neuropix-PXI\", \"source_processor_id\": 100, \"stream_name\": \"ProbeA-AP\", \"num_channels\": 5,\n"          \
    "  \"channels\": [" FX_CHAN("AP1", "0.1949999928474426", "uV") ", " FX_CHAN("AP2", "0.1949999928474426", "uV")   \
    ", " FX_CHAN("AP3", "0.25", "uV") ", " FX_CHAN("AP4", "0.1949999928474426", "uV") ", "                           \
    FX_CHAN("AP_SYNC", "1.0", "") "]},\n"                                                                           \
    " {\"folder_name\": \"Neuropix-PXI-100.ProbeA-LFP/\", \"sample_rate\": 2500.0, \"source_processor_id\": 100, "   \
    "\"stream_name\": \"ProbeA-LFP\", \"num_channels\": 5,\n"                                                        \
    "  \"channels\": [" FX_CHAN("LFP1", "0.195", "uV") ", " FX_CHAN("LFP2", "0.195", "uV") ", "                       \
    FX_CHAN("LFP3", "0.195", "uV") ", " FX_CHAN("LFP4", "0.195", "uV") ", " FX_CHAN("LFP_SYNC", "1.0", "") "]},\n"   \
    " {\"folder_name\": \"NI-DAQmx-102.PXIe-6341/\", \"sample_rate\": 30000.0, \"source_processor_id\": 102, "        \
    "\"stream_name\": \"PXIe-6341\", \"num_channels\": 2,\n"                                                         \
    "  \"channels\": [" FX_CHAN("AI0", "0.000305", "V") ", " FX_CHAN("AI1", "0.000305", "V") "]}\n"                 \
    "], \"events\": [], \"spikes\": []}\n"

#define FX_SETTINGS                                                                                                 \
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<SETTINGS>\n  <INFO><VERSION>0.6.7</VERSION></INFO>\n"             \
    "  <SIGNALCHAIN>\n    <PROCESSOR name=\"Neuropix-PXI\" libraryVersion=\"0.6.7\" nodeId=\"100\">\n"                \
    "      <STREAM name=\"ProbeA-AP\"/><STREAM name=\"ProbeA-LFP\"/>\n      <EDITOR>\n"                              \
    "        <NP_PROBE slot=\"2\" port=\"1\" dock=\"1\" probe_serial_number=\"123\" "                                 \
    "probe_part_number=\"PRB_1_4_0480_1\" custom_probe_name=\"123\" isEnabled=\"1\">\n"                             \
    "          <CHANNELS CH0=\"0:0\" CH1=\"0:0\" CH2=\"0:0\" CH3=\"0:0\"/>\n"                                           \
    "          <ELECTRODE_XPOS CH0=\"27\" CH1=\"59\" CH2=\"11\" CH3=\"43\"/>\n"                                         \
    "          <ELECTRODE_YPOS CH0=\"0\" CH1=\"0\" CH2=\"20\" CH3=\"20\"/>\n"                                           \
    "        </NP_PROBE>\n      </EDITOR>\n    </PROCESSOR>\n"                                                       \
    "    <PROCESSOR name=\"NI-DAQmx\" nodeId=\"102\"><STREAM name=\"PXIe-6341\"/></PROCESSOR>\n"                     \
    "    <PROCESSOR name=\"Record Node\" nodeId=\"101\"/>\n  </SIGNALCHAIN>\n</SETTINGS>\n"

static int fx_mkdirs(const char *path)
{
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    return system(cmd) == 0 ? 0 : -1;
}

static int fx_write(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = len ? fwrite(data, 1, len, f) : 0;
    fclose(f);
    return w == len ? 0 : -1;
}

static int fx_write_text(const char *path, const char *text)
{
    return fx_write(path, text, strlen(text));
}

/* One stream folder: n samples x cols int16, sample numbers from first. */
static int fx_stream(const char *rec_dir, const char *folder, int cols, int64_t n, int64_t first, double rate)
{
    char dir[4300], path[4400];
    snprintf(dir, sizeof dir, "%s/continuous/%s", rec_dir, folder);
    if (fx_mkdirs(dir) != 0)
        return -1;
    int16_t *d = malloc((size_t)(n > 0 ? n : 1) * (size_t)cols * sizeof *d);
    int64_t *sn = malloc((size_t)(n > 0 ? n : 1) * sizeof *sn);
    double *ts = malloc((size_t)(n > 0 ? n : 1) * sizeof *ts);
    int rc = d && sn && ts ? 0 : -1;
    for (int64_t k = 0; rc == 0 && k < n; k++) {
        for (int c = 0; c < cols; c++)
            d[k * cols + c] = (int16_t)(100 * c + k % 50);
        sn[k] = first + k;
        ts[k] = (double)sn[k] / rate;
    }
    int64_t shape[1] = {n};
    snprintf(path, sizeof path, "%s/continuous.dat", dir);
    if (rc == 0)
        rc = fx_write(path, d, (size_t)n * (size_t)cols * sizeof *d);
    snprintf(path, sizeof path, "%s/sample_numbers.npy", dir);
    if (rc == 0)
        rc = bs_npy_save(path, BS_NPY_I64, 1, shape, sn) == BS_OK ? 0 : -1;
    snprintf(path, sizeof path, "%s/timestamps.npy", dir);
    if (rc == 0)
        rc = bs_npy_save(path, BS_NPY_F64, 1, shape, ts) == BS_OK ? 0 : -1;
    free(d);
    free(sn);
    free(ts);
    return rc;
}

/* ROOT/Record Node 101/experimentE/recordingR with the default streams;
 * rec_dir receives the recording folder. oebin / settings: NULL = defaults,
 * "" = do not write the file. */
static int fx_tree(const char *root, int exp, int rec, int64_t n, int64_t first, const char *oebin,
                   const char *settings, char *rec_dir, size_t rec_len)
{
    char node[4200], path[4400];
    snprintf(node, sizeof node, "%s/Record Node 101", root);
    snprintf(rec_dir, rec_len, "%s/experiment%d/recording%d", node, exp, rec);
    if (fx_mkdirs(rec_dir) != 0)
        return -1;
    if (!settings || settings[0]) {
        if (exp > 1)
            snprintf(path, sizeof path, "%s/settings_%d.xml", node, exp);
        else
            snprintf(path, sizeof path, "%s/settings.xml", node);
        if (fx_write_text(path, settings ? settings : FX_SETTINGS) != 0)
            return -1;
    }
    snprintf(path, sizeof path, "%s/structure.oebin", rec_dir);
    if ((!oebin || oebin[0]) && fx_write_text(path, oebin ? oebin : FX_OEBIN) != 0)
        return -1;
    if (fx_stream(rec_dir, "Neuropix-PXI-100.ProbeA-AP", 5, n, first, 30000.0) != 0 ||
        fx_stream(rec_dir, "Neuropix-PXI-100.ProbeA-LFP", 5, n / 12, first / 12, 2500.0) != 0 ||
        fx_stream(rec_dir, "NI-DAQmx-102.PXIe-6341", 2, n, first, 30000.0) != 0)
        return -1;
    return 0;
}

/* A copy of `text` with the first `from` replaced by `to` (malloc'ed; NULL if absent). */
static char *fx_sub(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    if (!at)
        return NULL;
    size_t n = strlen(text), a = (size_t)(at - text), f = strlen(from), t = strlen(to);
    char *out = malloc(n - f + t + 1);
    if (!out)
        return NULL;
    memcpy(out, text, a);
    memcpy(out + a, to, t);
    memcpy(out + a + t, at + f, n - a - f + 1);
    return out;
}

#endif
