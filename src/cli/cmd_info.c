/*
 * cmd_info.c - `boundsort info REC [--probe P --fs HZ --n-chan N --dtype T
 * --uv-per-bit X --offset X --header-bytes N --probe-index I --series NAME] [--json]`.
 *
 * Opens the recording with bs_recording_open (which picks the reader) and
 * prints what the sorter will see: channels, columns in the file, sampling
 * rate, duration and sample count, dtype, µV per bit (a range when it differs
 * between channels), and the probe layout: the shanks in use (those holding a
 * channel, bs_probe_shanks_in_use: their number and indices), x / y extent (µm),
 * vertical pitch (bs_probe_vertical_pitch_um) and the file columns read.
 * --json prints the same as one JSON object on stdout, with a "channels" list
 * giving, per sorted channel, its file column, x_um, y_um and shank. The
 * first sample number (acquisition clock) is shown too; for Open Ephys, the
 * stream read and every stream of the recording ("streams" in JSON); NWB
 * files add the series read and the list of all their ElectricalSeries.
 * --detect-bad-channels runs the sort's bad-channel scan (bad_channels.h,
 * default parameters, the ADC phase shift included) and lists the bad
 * channels with their label, coherence and high-band power ("bad_channels"
 * in JSON, with the counts).
 * Exit codes: 0, 1 for a bad command line, 2 (with the message) for bad input.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/nwb.h"
#include "../io/openephys.h"
#include "../io/probe.h"
#include "../io/probe_json.h"
#include "../io/recording.h"
#include "../mem/mem.h"
#include "../pipeline/sort.h"
#include "cli.h"

static const char *USAGE_HEAD =
    "boundsort info REC [--probe P --fs HZ --n-chan N --dtype T --uv-per-bit X --offset X\n"
    "                    --header-bytes N --probe-index I --series NAME --stream NAME] [--json]\n"
    "                    [--detect-bad-channels]\n"
    "\n"
    "  REC             recording: an NWB file, an Open Ephys recording (structure.oebin or a folder), a\n"
    "                  SpikeGLX .bin (with its .meta) or folder, a raw folder (recording.bin +\n"
    "                  recording.json + probe.json), or a raw binary with --probe\n"
    "  --json          print JSON instead of text\n"
    "  --detect-bad-channels\n"
    "                  also find dead, noisy and out-of-brain channels as `sort` does (IBL's coherence and\n"
    "                  high-frequency power on up to 100 chunks of 0.3 s, per shank of >= 32 channels)\n"
    "                  and list them\n";

static int usage_error(const char *fmt, const char *arg)
{
    return bs_cli_recording_usage_error("info", USAGE_HEAD, fmt, arg);
}

/* "0-3,5,7-9": n values in their order, ascending runs as ranges (the file
 * columns of the sorted channels, the shanks in use). */
static void print_runs(FILE *out, const int *v, int n)
{
    int i = 0;
    while (i < n) {
        int j = i;
        while (j + 1 < n && v[j + 1] == v[j] + 1)
            j++;
        fprintf(out, "%s%d", i ? "," : "", v[i]);
        if (j > i)
            fprintf(out, "-%d", v[j]);
        i = j + 1;
    }
}

/* The shortest decimal that reads back as the same float (0.195f -> 0.195,
 * not 0.194999993), for display. */
static double pretty_float(float f)
{
    char buf[32];
    for (int prec = 6; prec < 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f)
            return strtod(buf, NULL);
    }
    return (double)f;
}

typedef struct {
    double xmin, xmax, ymin, ymax, uv_min, uv_max, pitch; /* µm; µV per bit; µm */
    int n_shanks;                                         /* shanks in use (holding a channel) */
    int *shank_ids;                                       /* [n_shanks] their indices, ascending (malloc) */
} summary;

static summary summarize(const bs_recording *rec)
{
    const bs_probe *p = &rec->probe;
    summary s = {INFINITY, -INFINITY, INFINITY, -INFINITY, INFINITY, -INFINITY, 0, 0, NULL};
    s.shank_ids = malloc((size_t)(p->n_shanks > 0 ? p->n_shanks : 1) * sizeof *s.shank_ids);
    s.n_shanks = bs_probe_shanks_in_use(p, s.shank_ids);
    for (int c = 0; c < p->n_chan; c++) {
        s.xmin = fmin(s.xmin, p->x_um[c]);
        s.xmax = fmax(s.xmax, p->x_um[c]);
        s.ymin = fmin(s.ymin, p->y_um[c]);
        s.ymax = fmax(s.ymax, p->y_um[c]);
        s.uv_min = fmin(s.uv_min, pretty_float(rec->uv_per_bit[c]));
        s.uv_max = fmax(s.uv_max, pretty_float(rec->uv_per_bit[c]));
    }
    s.pitch = bs_probe_vertical_pitch_um(p);
    return s;
}

static void print_text(const char *path, const bs_recording *rec)
{
    const bs_probe *p = &rec->probe;
    summary s = summarize(rec);
    printf("recording      %s (%s)\n", path, rec->format);
    printf("data file      %s\n", rec->data_path);
    printf("channels       %d (of %d columns in the file)\n", p->n_chan, rec->n_cols);
    printf("sampling rate  %.6g Hz\n", rec->fs_hz);
    printf("duration       %.6f s\n", bs_recording_duration_s(rec));
    printf("samples        %lld\n", (long long)rec->n_samples);
    printf("first sample   %lld (acquisition clock; spike times count from the file's first sample)\n",
           (long long)rec->first_sample);
    printf("dtype          %s (header %llu bytes)\n", bs_sample_type_name(rec->dtype),
           (unsigned long long)rec->data_offset);
    if (s.uv_min == s.uv_max)
        printf("µV/bit         %.9g\n", s.uv_min);
    else
        printf("µV/bit         %.9g .. %.9g (per channel)\n", s.uv_min, s.uv_max);
    printf("offset         %.9g raw units\n", pretty_float(rec->offset));
    printf("probe          %s\n", p->model[0] ? p->model : "(model unknown)");
    printf("shanks         %d\n", s.n_shanks);
    printf("shank ids      ");
    print_runs(stdout, s.shank_ids, s.shank_ids ? s.n_shanks : 0);
    printf("\n");
    printf("x range        %.6g .. %.6g µm\n", s.xmin, s.xmax);
    printf("y range        %.6g .. %.6g µm\n", s.ymin, s.ymax);
    if (s.pitch > 0)
        printf("vertical pitch %.6g µm\n", s.pitch);
    else
        printf("vertical pitch none (no column holds two contacts)\n");
    printf("columns        ");
    print_runs(stdout, p->column, p->n_chan);
    printf("\n");
    if (p->adc_shift) {
        float lo = 1, hi = 0;
        for (int c = 0; c < p->n_chan; c++)
            lo = fminf(lo, p->adc_shift[c]), hi = fmaxf(hi, p->adc_shift[c]);
        printf("ADC skew       %.4g .. %.4g samples (removed by sort's phase shift; --no-phase-shift keeps it)\n",
               (double)lo, (double)hi);
    } else {
        printf("ADC skew       unknown (no phase shift)\n");
    }
    bs_nwb_print_info(rec, stdout);
    free(s.shank_ids);
}

/* Open Ephys: the streams of the recording, the one read marked. */
static void oe_streams(const char *path, const bs_recording *rec, cJSON *json)
{
    bs_oe_stream_info *s = NULL;
    int n = 0;
    if (strcmp(rec->format, "openephys") != 0 || bs_openephys_list_streams(path, &s, &n) != BS_OK)
        return;
    cJSON *arr = json ? cJSON_AddArrayToObject(json, "streams") : NULL;
    if (json)
        cJSON_AddStringToObject(json, "stream", rec->stream);
    for (int i = 0; i < n; i++) {
        int sel = strcmp(s[i].name, rec->stream) == 0;
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", s[i].name);
            cJSON_AddStringToObject(o, "folder", s[i].folder);
            cJSON_AddStringToObject(o, "kind", bs_oe_stream_kind_name(s[i].kind));
            cJSON_AddNumberToObject(o, "fs_hz", s[i].fs_hz);
            cJSON_AddNumberToObject(o, "n_cols", s[i].n_cols);
            cJSON_AddNumberToObject(o, "n_neural", s[i].n_neural);
            cJSON_AddBoolToObject(o, "selected", sel);
            cJSON_AddItemToArray(arr, o);
        } else {
            printf("%s %s (%s; %d neural of %d channels at %g Hz; folder %s)\n", i ? "              " : "streams       ",
                   s[i].name, bs_oe_stream_kind_name(s[i].kind), s[i].n_neural, s[i].n_cols, s[i].fs_hz,
                   s[i].folder);
            if (sel)
                printf("               ^ read (--stream '%s')\n", s[i].name);
        }
    }
    free(s);
}

typedef struct {
    int8_t *label;
    float *coh, *psd;
    int n_chunks, n_examined, n[BS_CHAN_N_LABELS];
} bad_scan;

static bs_status scan_bad(const bs_recording *rec, bad_scan *b)
{
    int C = rec->probe.n_chan;
    bs_sort_params sp; /* the sort's defaults: the same chunks, halo and thresholds as `sort` */
    bs_sort_default_params(&sp);
    const bs_bad_channel_params prm = sp.bad;
    b->label = bs_mem_alloc("info/bad", (size_t)C);
    b->coh = bs_mem_alloc("info/bad", (size_t)C * sizeof(float));
    b->psd = bs_mem_alloc("info/bad", (size_t)C * sizeof(float));
    if (!b->label || !b->coh || !b->psd)
        return BS_ERR_MEMORY;
    int64_t nb, halo;
    bs_sort_batch_geometry(&sp, rec->fs_hz, &nb, &halo);
    BS_TRY(bs_bad_channels_scan(rec, &prm, bs_sort_phase_shift(rec, &sp), halo, sp.max_railed_fraction, &sp.artifact,
                                b->label, b->coh, b->psd, NULL, &b->n_chunks));
    bs_bad_detector det;
    BS_TRY(bs_bad_detector_init(&rec->probe, rec->fs_hz, &prm, &det));
    b->n_examined = det.start[det.n_groups];
    bs_bad_detector_free(&det);
    for (int c = 0; c < C; c++)
        b->n[(int)b->label[c]]++;
    return BS_OK;
}

static void print_bad_text(const bs_recording *rec, const bad_scan *b)
{
    const bs_probe *p = &rec->probe;
    printf("bad channels   %d dead, %d noisy, %d out of the brain (%d channels examined on %d chunks)\n", b->n[1],
           b->n[2], b->n[3], b->n_examined, b->n_chunks);
    for (int c = 0; c < p->n_chan; c++)
        if (b->label[c] != BS_CHAN_GOOD)
            printf("  channel %d (column %d, shank %d, x %.1f y %.1f µm): %s, coherence %.3f, high-band power "
                   "%.4g µV²/Hz\n",
                   c, p->column[c], p->shank[c], p->x_um[c], p->y_um[c], bs_chan_label_name(b->label[c]), b->coh[c],
                   b->psd[c]);
}

static void add_bad_json(cJSON *o, const bs_recording *rec, const bad_scan *b)
{
    const bs_probe *p = &rec->probe;
    cJSON *bo = cJSON_AddObjectToObject(o, "bad_channels");
    cJSON_AddNumberToObject(bo, "chunks", b->n_chunks);
    cJSON_AddNumberToObject(bo, "examined", b->n_examined);
    for (int l = 1; l < BS_CHAN_N_LABELS; l++)
        cJSON_AddNumberToObject(bo, bs_chan_label_name(l), b->n[l]);
    cJSON *arr = cJSON_AddArrayToObject(bo, "channels");
    for (int c = 0; c < p->n_chan; c++) {
        if (b->label[c] == BS_CHAN_GOOD)
            continue;
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "channel", c);
        cJSON_AddNumberToObject(ch, "column", p->column[c]);
        cJSON_AddStringToObject(ch, "label", bs_chan_label_name(b->label[c]));
        cJSON_AddNumberToObject(ch, "coherence", b->coh[c]);
        cJSON_AddNumberToObject(ch, "psd_hf_uv2_hz", b->psd[c]);
        cJSON_AddItemToArray(arr, ch);
    }
}

static int print_json(const char *path, const bs_recording *rec, const bad_scan *bad)
{
    const bs_probe *p = &rec->probe;
    summary s = summarize(rec);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", path);
    cJSON_AddStringToObject(o, "data_path", rec->data_path);
    cJSON_AddStringToObject(o, "format", rec->format);
    cJSON_AddNumberToObject(o, "n_chan", p->n_chan);
    cJSON_AddNumberToObject(o, "n_cols", rec->n_cols);
    cJSON_AddNumberToObject(o, "fs_hz", rec->fs_hz);
    cJSON_AddNumberToObject(o, "n_samples", (double)rec->n_samples);
    cJSON_AddNumberToObject(o, "first_sample", (double)rec->first_sample);
    cJSON_AddNumberToObject(o, "duration_s", bs_recording_duration_s(rec));
    cJSON_AddStringToObject(o, "dtype", bs_sample_type_name(rec->dtype));
    cJSON_AddNumberToObject(o, "header_bytes", (double)rec->data_offset);
    cJSON_AddNumberToObject(o, "uv_per_bit_min", s.uv_min);
    cJSON_AddNumberToObject(o, "uv_per_bit_max", s.uv_max);
    cJSON_AddNumberToObject(o, "offset", pretty_float(rec->offset));
    cJSON *pr = cJSON_AddObjectToObject(o, "probe");
    cJSON_AddStringToObject(pr, "model", p->model);
    cJSON_AddNumberToObject(pr, "n_shanks", s.n_shanks);
    cJSON_AddItemToObject(pr, "shank_ids", cJSON_CreateIntArray(s.shank_ids, s.shank_ids ? s.n_shanks : 0));
    free(s.shank_ids);
    cJSON_AddNumberToObject(pr, "x_min_um", s.xmin);
    cJSON_AddNumberToObject(pr, "x_max_um", s.xmax);
    cJSON_AddNumberToObject(pr, "y_min_um", s.ymin);
    cJSON_AddNumberToObject(pr, "y_max_um", s.ymax);
    cJSON_AddNumberToObject(pr, "vertical_pitch_um", s.pitch);
    if (p->adc_shift) { /* per sorted channel, samples (SpikeInterface's inter_sample_shift) */
        cJSON *sh = cJSON_AddArrayToObject(pr, "inter_sample_shift");
        for (int c = 0; c < p->n_chan; c++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber(p->adc_shift[c]));
    }
    const bs_nwb_info *nwb = bs_nwb_get_info(rec);
    if (nwb) { /* the series read, and every ElectricalSeries of the file */
        cJSON_AddStringToObject(o, "series", nwb->series);
        cJSON_AddItemToObject(o, "series_list", cJSON_CreateStringArray(nwb->series_list, nwb->n_series));
    }
    oe_streams(path, rec, o);
    if (bad)
        add_bad_json(o, rec, bad);
    cJSON *chans = cJSON_AddArrayToObject(o, "channels");
    for (int c = 0; c < p->n_chan; c++) {
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "column", p->column[c]);
        cJSON_AddNumberToObject(ch, "x_um", p->x_um[c]);
        cJSON_AddNumberToObject(ch, "y_um", p->y_um[c]);
        cJSON_AddNumberToObject(ch, "shank", p->shank[c]);
        cJSON_AddNumberToObject(ch, "uv_per_bit", pretty_float(rec->uv_per_bit[c]));
        cJSON_AddItemToArray(chans, ch);
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text)
        return bs_cli_fail(bs_error(BS_ERR_MEMORY, "out of memory formatting JSON"));
    puts(text);
    free(text);
    return BS_OK;
}

int bs_cmd_info(int argc, char **argv)
{
    if (bs_cli_wants_help(argc, argv)) {
        bs_cli_print_recording_usage(stdout, USAGE_HEAD);
        return BS_OK;
    }
    bs_open_options opt = {0};
    const char *rec_path = NULL;
    int json = 0, detect_bad = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            json = 1;
            continue;
        }
        if (strcmp(a, "--detect-bad-channels") == 0) {
            detect_bad = 1;
            continue;
        }
        const char *v = NULL;
        char msg[256];
        int r = bs_cli_next_arg(argc, argv, &i, "recording", &rec_path, &v, msg, sizeof msg, USAGE_HEAD);
        /* a positional argument or a recording option; nothing else */
        if (r == BS_CLI_OPTION && (r = bs_cli_recording_option(a, v, &opt, msg, sizeof msg)) == 0)
            return usage_error("unknown option %s", a);
        if (r < 0)
            return usage_error("%s", msg);
    }
    if (!rec_path)
        return usage_error("%s", "missing the recording REC");

    bs_recording rec;
    bs_status st = bs_recording_open(rec_path, &opt, &rec);
    if (st != BS_OK)
        return bs_cli_fail(st);
    bad_scan bad = {0};
    if (detect_bad && (st = scan_bad(&rec, &bad)) != BS_OK) {
        bs_mem_free(bad.label), bs_mem_free(bad.coh), bs_mem_free(bad.psd);
        bs_recording_close(&rec);
        return bs_cli_fail(st);
    }
    int rc = BS_OK;
    if (json)
        rc = print_json(rec_path, &rec, detect_bad ? &bad : NULL);
    else
        print_text(rec_path, &rec);
    if (!json)
        oe_streams(rec_path, &rec, NULL);
    if (!json && detect_bad)
        print_bad_text(&rec, &bad);
    bs_mem_free(bad.label), bs_mem_free(bad.coh), bs_mem_free(bad.psd);
    bs_recording_close(&rec);
    return rc;
}
