/*
 * sim_openephys.c - the simulated recording as an Open Ephys (GUI 0.6.7)
 * Record Node folder, written from recording.bin after it is committed:
 *
 *   DIR/openephys/Record Node 101/settings.xml
 *   DIR/openephys/Record Node 101/experiment1/recording1/structure.oebin
 *       continuous/<stream folder>/{continuous.dat, sample_numbers.npy, timestamps.npy}
 *
 * Neuropixels probes (a Neuropix-PXI processor, node 100, and an NI-DAQmx
 * one, node 102):
 *   Neuropix-PXI-100.ProbeA-AP   385 columns: recording.bin's samples as they
 *                                are (AP1..APn, bit_volts = the simulator's µV
 *                                per bit) + AP_SYNC (a 1 Hz square wave, 0/64)
 *   Neuropix-PXI-100.ProbeA-LFP  the same columns at fs / 12, every 12th sample
 *                                (not low-pass filtered: test data only)
 *   NI-DAQmx-102.PXIe-6341       AI0 (the sync wave, 0/16384 at 0.000305 V per
 *                                bit) and AI1 (zeros)
 *   settings.xml holds the NP_PROBE with CHANNELS ("0:shank"),
 *   ELECTRODE_XPOS / ELECTRODE_YPOS = probe.json's positions (µm; x from the
 *   left edge of shank 0, as the Neuropix-PXI plugin writes them).
 * linear32 (an Acquisition Board, node 100, stream "Rhythm Data"):
 *   Acquisition_Board-100.Rhythm Data  CH1..CH32 (0.195 µV/bit), AUX1..AUX3
 *                                (zeros), ADC1 (the sync wave), ADC2 (zeros);
 *   settings.xml has no probe geometry, so it is read with --probe probe.json.
 *
 * Sample numbers start at BS_SIM_OE_FIRST_SAMPLE (LFP: that / 12) and run
 * without gaps; timestamps.npy = sample number / rate in s. The neural
 * columns of continuous.dat hold exactly recording.bin's int16 values, so
 * sorting the folder and sorting recording.bin with probe.json see the same
 * µV. recording.bin is read back in blocks; memory is one block.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "../io/npy.h"
#include "../mem/mem.h"
#include "sim_internal.h"

#define OE_BLOCK 4096 /* samples of recording.bin per read */
#define LFP_DECIM 12

enum { COL_DATA, COL_SYNC_BIT, COL_SYNC_ANALOG, COL_ZERO };

typedef struct {
    const char *processor;  /* source processor name */
    int node;               /* its node id */
    const char *name;       /* stream_name */
    int decim;              /* 1, or LFP_DECIM */
    int data;               /* 1: the probe's channels first */
    const char *data_prefix;/* channel names: prefix + 1-based index */
    double data_bit_volts;
    int n_extra;
    int extra[8];           /* COL_* of the columns after the data */
    const char *extra_name[8];
    double extra_bit_volts[8];
    const char *extra_units[8];
} oe_stream;

static int sync_on(int64_t t, double fs)
{
    return (int64_t)floor(2.0 * (double)t / fs) % 2 == 0;
}

static bs_status pread_all(int fd, void *buf, size_t n, off_t off, const char *path)
{
    char *p = buf;
    while (n > 0) {
        ssize_t k = pread(fd, p, n, off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return bs_error(BS_ERR_INPUT, "%s: read failed: %s", path, k < 0 ? strerror(errno) : "unexpected end");
        p += k;
        n -= (size_t)k;
        off += k;
    }
    return BS_OK;
}

/* continuous.dat, sample_numbers.npy, timestamps.npy of one stream. */
static bs_status write_stream(const char *cont_dir, const char *folder, const oe_stream *s, const char *rec_path,
                              int C, int64_t n_samples, double fs, int64_t first)
{
    char dir[4400], path[4500];
    if (snprintf(dir, sizeof dir, "%s/%s", cont_dir, folder) >= (int)sizeof dir)
        return bs_error(BS_ERR_INPUT, "%s: path too long", cont_dir);
    BS_TRY(bs_mkdir_p(dir));
    int n_cols = (s->data ? C : 0) + s->n_extra;
    int fd = open(rec_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return bs_error(BS_ERR_INPUT, "%s: cannot open: %s", rec_path, strerror(errno));
    int16_t *in = bs_mem_alloc("sim/openephys", (size_t)OE_BLOCK * (size_t)C * sizeof *in);
    int16_t *out = bs_mem_alloc("sim/openephys", (size_t)OE_BLOCK * (size_t)n_cols * sizeof *out);
    int64_t *num = bs_mem_alloc("sim/openephys", OE_BLOCK * sizeof *num);
    double *ts = bs_mem_alloc("sim/openephys", OE_BLOCK * sizeof *ts);
    bs_atomic_file dat = {0};
    bs_npy_writer wn = {0}, wt = {0};
    int dat_open = 0, wn_open = 0, wt_open = 0;
    bs_status st = (in && out && num && ts) ? BS_OK : BS_ERR_MEMORY;
    if (st == BS_OK && (st = bs_path_join(path, sizeof path, dir, "continuous.dat")) == BS_OK &&
        (st = bs_atomic_open(&dat, path)) == BS_OK)
        dat_open = 1;
    if (st == BS_OK && (st = bs_path_join(path, sizeof path, dir, "sample_numbers.npy")) == BS_OK &&
        (st = bs_npy_writer_open(&wn, path, BS_NPY_I64, 1, NULL)) == BS_OK)
        wn_open = 1;
    if (st == BS_OK && (st = bs_path_join(path, sizeof path, dir, "timestamps.npy")) == BS_OK &&
        (st = bs_npy_writer_open(&wt, path, BS_NPY_F64, 1, NULL)) == BS_OK)
        wt_open = 1;
    double rate = fs / s->decim;
    int64_t k = 0; /* rows written */
    for (int64_t t0 = 0; st == BS_OK && t0 < n_samples; t0 += OE_BLOCK) {
        int64_t nb = n_samples - t0 < OE_BLOCK ? n_samples - t0 : OE_BLOCK;
        st = pread_all(fd, in, (size_t)(nb * C) * sizeof *in, (off_t)(t0 * C) * (off_t)sizeof *in, rec_path);
        int64_t m = 0;
        for (int64_t i = 0; st == BS_OK && i < nb; i++) {
            int64_t t = t0 + i;
            if (t % s->decim != 0)
                continue;
            int16_t *row = out + m * n_cols;
            int c = 0;
            if (s->data)
                for (; c < C; c++)
                    row[c] = in[i * C + c];
            for (int e = 0; e < s->n_extra; e++)
                row[c + e] = s->extra[e] == COL_SYNC_BIT      ? (int16_t)(sync_on(t, fs) ? 64 : 0)
                             : s->extra[e] == COL_SYNC_ANALOG ? (int16_t)(sync_on(t, fs) ? 16384 : 0)
                                                              : 0;
            num[m] = first / s->decim + k + m;
            ts[m] = (double)num[m] / rate;
            m++;
        }
        if (st == BS_OK && m > 0) {
            if (fwrite(out, sizeof *out, (size_t)(m * n_cols), dat.fp) != (size_t)(m * n_cols))
                st = bs_error(BS_ERR_INPUT, "%s/continuous.dat: write failed: %s", dir, strerror(errno));
            if (st == BS_OK)
                st = bs_npy_writer_append(&wn, num, m);
            if (st == BS_OK)
                st = bs_npy_writer_append(&wt, ts, m);
        }
        k += m;
    }
    close(fd);
    if (st == BS_OK) {
        dat_open = 0;
        st = bs_atomic_commit(&dat);
    }
    if (st == BS_OK) {
        wn_open = 0;
        st = bs_npy_writer_close(&wn);
    }
    if (st == BS_OK) {
        wt_open = 0;
        st = bs_npy_writer_close(&wt);
    }
    if (dat_open)
        bs_atomic_abort(&dat);
    if (wn_open)
        bs_npy_writer_abort(&wn);
    if (wt_open)
        bs_npy_writer_abort(&wt);
    bs_mem_free(in);
    bs_mem_free(out);
    bs_mem_free(num);
    bs_mem_free(ts);
    return st;
}

static void oebin_stream(cJSON *arr, const oe_stream *s, const char *folder, int C, double fs)
{
    cJSON *o = cJSON_CreateObject();
    char buf[320];
    snprintf(buf, sizeof buf, "%s/", folder);
    cJSON_AddStringToObject(o, "folder_name", buf);
    cJSON_AddNumberToObject(o, "sample_rate", fs / s->decim);
    cJSON_AddStringToObject(o, "source_processor_name", s->processor);
    cJSON_AddNumberToObject(o, "source_processor_id", s->node);
    cJSON_AddStringToObject(o, "stream_name", s->name);
    cJSON_AddStringToObject(o, "recorded_processor", "Record Node");
    cJSON_AddNumberToObject(o, "recorded_processor_id", 101);
    int n = (s->data ? C : 0) + s->n_extra;
    cJSON_AddNumberToObject(o, "num_channels", n);
    cJSON *chs = cJSON_AddArrayToObject(o, "channels");
    snprintf(buf, sizeof buf, "%s -> Record Node", s->processor);
    for (int c = 0; c < n; c++) {
        cJSON *ch = cJSON_CreateObject();
        char name[64];
        int e = s->data ? c - C : c;
        if (e < 0)
            snprintf(name, sizeof name, "%s%d", s->data_prefix, c + 1);
        else
            snprintf(name, sizeof name, "%s", s->extra_name[e]);
        cJSON_AddStringToObject(ch, "channel_name", name);
        cJSON_AddStringToObject(ch, "description", e < 0 ? "Headstage data channel" : "Auxiliary channel");
        cJSON_AddStringToObject(ch, "identifier", e < 0 ? "genericdata.continuous" : "auxiliary.continuous");
        cJSON_AddStringToObject(ch, "history", buf);
        cJSON_AddNumberToObject(ch, "bit_volts", e < 0 ? s->data_bit_volts : s->extra_bit_volts[e]);
        cJSON_AddStringToObject(ch, "units", e < 0 ? "uV" : s->extra_units[e]);
        cJSON_AddItemToArray(chs, ch);
    }
    cJSON_AddItemToArray(arr, o);
}

static bs_status write_settings(const char *path, const bs_sim_layout *L, const bs_probe *pr, const oe_stream *st,
                                int n_streams, double fs)
{
    bs_atomic_file f;
    BS_TRY(bs_atomic_open(&f, path));
    FILE *o = f.fp;
    int np = L->type_code >= 0;
    fprintf(o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\n<SETTINGS>\n  <INFO>\n    <VERSION>0.6.7</VERSION>\n"
               "    <PLUGIN_API_VERSION>8</PLUGIN_API_VERSION>\n    <DATE>1 Jan 2000 0:00:00</DATE>\n"
               "    <OS>boundsort simulate</OS>\n  </INFO>\n  <SIGNALCHAIN>\n");
    for (int s = 0; s < n_streams; s++) {
        if (s > 0 && st[s].node == st[s - 1].node)
            continue;
        fprintf(o, "    <PROCESSOR name=\"%s\" insertionPoint=\"%d\" pluginName=\"%s\" type=\"4\" index=\"%d\" "
                   "libraryName=\"%s\" libraryVersion=\"0.6.7\" processorType=\"2\" nodeId=\"%d\">\n",
                st[s].processor, s, st[s].processor, s, st[s].processor, st[s].node);
        for (int t = s; t < n_streams && st[t].node == st[s].node; t++)
            fprintf(o, "      <STREAM name=\"%s\" description=\"simulated\" sample_rate=\"%.17g\" channel_count=\"%d\"/>\n",
                    st[t].name, fs / st[t].decim, (st[t].data ? pr->n_chan : 0) + st[t].n_extra);
        fprintf(o, "      <EDITOR isCollapsed=\"0\" displayName=\"%s\">\n", st[s].processor);
        if (np && strcmp(st[s].processor, "Neuropix-PXI") == 0) {
            fprintf(o, "        <!-- positions in µm, x from the left edge of shank 0 -->\n");
            fprintf(o, "        <NP_PROBE slot=\"2\" port=\"1\" dock=\"1\" probe_serial_number=\"18005100000\" "
                       "probe_part_number=\"%s\" probe_name=\"Neuropixels (simulated)\" "
                       "custom_probe_name=\"18005100000\" isEnabled=\"1\">\n          <CHANNELS",
                    L->part_number);
            for (int c = 0; c < pr->n_chan; c++)
                fprintf(o, " CH%d=\"%d:%d\"", c, L->electrode[c] / 384, pr->shank[c]);
            fprintf(o, "/>\n          <ELECTRODE_XPOS");
            for (int c = 0; c < pr->n_chan; c++)
                fprintf(o, " CH%d=\"%.17g\"", c, pr->x_um[c]);
            fprintf(o, "/>\n          <ELECTRODE_YPOS");
            for (int c = 0; c < pr->n_chan; c++)
                fprintf(o, " CH%d=\"%.17g\"", c, pr->y_um[c]);
            fprintf(o, "/>\n        </NP_PROBE>\n");
        }
        fprintf(o, "      </EDITOR>\n    </PROCESSOR>\n");
    }
    fprintf(o, "    <PROCESSOR name=\"Record Node\" insertionPoint=\"%d\" pluginName=\"Record Node\" type=\"0\" "
               "index=\"0\" libraryName=\"\" libraryVersion=\"\" processorType=\"8\" nodeId=\"101\">\n"
               "      <EDITOR isCollapsed=\"0\" displayName=\"Record Node\"/>\n    </PROCESSOR>\n"
               "  </SIGNALCHAIN>\n</SETTINGS>\n",
            n_streams);
    if (ferror(o)) {
        bs_atomic_abort(&f);
        return bs_error(BS_ERR_INPUT, "%s: write failed", path);
    }
    return bs_atomic_commit(&f);
}

bs_status bs_sim_write_openephys(const char *out_dir, const bs_sim_layout *L, const bs_probe *pr, double fs_hz,
                                 int64_t n_samples, double uv_per_bit)
{
    int C = pr->n_chan;
    oe_stream np_streams[3] = {
        {"Neuropix-PXI", 100, "ProbeA-AP", 1, 1, "AP", uv_per_bit, 1, {COL_SYNC_BIT}, {"AP_SYNC"}, {1.0}, {""}},
        {"Neuropix-PXI", 100, "ProbeA-LFP", LFP_DECIM, 1, "LFP", uv_per_bit, 1, {COL_SYNC_BIT}, {"LFP_SYNC"}, {1.0},
         {""}},
        {"NI-DAQmx", 102, "PXIe-6341", 1, 0, "", 0, 2, {COL_SYNC_ANALOG, COL_ZERO}, {"AI0", "AI1"},
         {0.00030518509475997192, 0.00030518509475997192}, {"V", "V"}},
    };
    oe_stream board = {"Acquisition Board", 100, "Rhythm Data", 1, 1, "CH", uv_per_bit, 5,
                       {COL_ZERO, COL_ZERO, COL_ZERO, COL_SYNC_ANALOG, COL_ZERO},
                       {"AUX1", "AUX2", "AUX3", "ADC1", "ADC2"},
                       {0.0000374, 0.0000374, 0.0000374, 0.00015258789, 0.00015258789},
                       {"V", "V", "V", "V", "V"}};
    const oe_stream *streams = L->type_code >= 0 ? np_streams : &board;
    int n_streams = L->type_code >= 0 ? 3 : 1;

    char node[4200], rec_dir[4400], cont[4500], path[4600], rec_path[4200];
    BS_TRY(bs_path_join(rec_path, sizeof rec_path, out_dir, "recording.bin"));
    BS_TRY(bs_path_join(node, sizeof node, out_dir, "openephys/Record Node 101"));
    BS_TRY(bs_path_join(rec_dir, sizeof rec_dir, node, "experiment1/recording1"));
    BS_TRY(bs_path_join(cont, sizeof cont, rec_dir, "continuous"));
    BS_TRY(bs_mkdir_p(cont));
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "GUI version", "0.6.7");
    cJSON *arr = cJSON_AddArrayToObject(root, "continuous");
    cJSON_AddArrayToObject(root, "events");
    cJSON_AddArrayToObject(root, "spikes");
    bs_status st = BS_OK;
    for (int s = 0; s < n_streams && st == BS_OK; s++) {
        char folder[256];
        char proc[64];
        snprintf(proc, sizeof proc, "%s", streams[s].processor);
        for (char *q = proc; *q; q++)
            if (*q == ' ')
                *q = '_';
        snprintf(folder, sizeof folder, "%s-%d.%s", proc, streams[s].node, streams[s].name);
        st = write_stream(cont, folder, &streams[s], rec_path, C, n_samples, fs_hz, BS_SIM_OE_FIRST_SAMPLE);
        oebin_stream(arr, &streams[s], folder, C, fs_hz);
    }
    char *text = st == BS_OK ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (st != BS_OK)
        return st;
    if (!text)
        return bs_error(BS_ERR_MEMORY, "structure.oebin: out of memory");
    st = bs_path_join(path, sizeof path, rec_dir, "structure.oebin");
    if (st == BS_OK)
        st = bs_write_file_atomic(path, text, strlen(text));
    free(text);
    if (st == BS_OK)
        st = bs_path_join(path, sizeof path, node, "settings.xml");
    if (st == BS_OK)
        st = write_settings(path, L, pr, streams, n_streams, fs_hz);
    return st;
}
