/*
 * openephys_oebin.c - structure.oebin (JSON) -> bs_oe_index, and the choice
 * of the stream to sort (openephys.h, layer 1).
 *
 * cJSON builds the tree (its nesting limit bounds recursion); each entry of
 * "continuous" is checked field by field and copied into a bs_oe_stream, so
 * the tree is freed before returning. Messages name the file, the JSON path
 * ("continuous[0].channels[3].bit_volts") and what was expected. Channel
 * kinds follow the name/units rules of openephys.h; bit_volts must be a
 * finite number > 0 for every channel, and a neural channel's µV per bit
 * must lie in 1e-6..1e6 (it is stored as a float for sorting).
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../mem/mem.h"
#include "json_msg.h"
#include "openephys.h"

#define OE_TAG "io/openephys"

static const char *describe(const cJSON *v, char *buf, size_t n)
{
    if (!v)
        snprintf(buf, n, "nothing");
    else if (cJSON_IsNull(v))
        snprintf(buf, n, "null");
    else if (cJSON_IsBool(v))
        snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNumber(v))
        snprintf(buf, n, "%.17g", v->valuedouble);
    else if (cJSON_IsString(v))
        snprintf(buf, n, "the string \"%.40s\"", v->valuestring);
    else if (cJSON_IsArray(v))
        snprintf(buf, n, "an array");
    else if (cJSON_IsObject(v))
        snprintf(buf, n, "an object");
    else
        snprintf(buf, n, "an invalid value");
    return buf;
}

const char *bs_oe_stream_kind_name(bs_oe_stream_kind kind)
{
    switch (kind) {
    case BS_OE_STREAM_NEURAL: return "neural";
    case BS_OE_STREAM_LFP: return "LFP";
    case BS_OE_STREAM_OTHER: return "no neural channels";
    }
    return "?";
}

static int starts_with_ci(const char *s, const char *prefix)
{
    return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

static bs_oe_chan_kind channel_kind(const char *name, const char *units)
{
    size_t n = strlen(name);
    if ((n >= 5 && strcasecmp(name + n - 5, "_SYNC") == 0) || strcasecmp(name, "SYNC") == 0)
        return BS_OE_CHAN_SYNC;
    if (starts_with_ci(name, "ADC") || (starts_with_ci(name, "AI") && isdigit((unsigned char)name[2])) ||
        (units && strcmp(units, "V") == 0))
        return BS_OE_CHAN_ADC;
    if (starts_with_ci(name, "AUX"))
        return BS_OE_CHAN_AUX;
    return BS_OE_CHAN_NEURAL;
}

static bs_status parse_channel(const cJSON *ch, const char *name, int s, int c, bs_oe_channel *out)
{
    char d[64];
    if (!cJSON_IsObject(ch))
        return bs_error(BS_ERR_INPUT, "%s: continuous[%d].channels[%d]: expected a channel object, got %s", name, s, c,
                        describe(ch, d, sizeof d));
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(ch, "channel_name");
    if (!cJSON_IsString(cn))
        return bs_error(BS_ERR_INPUT, "%s: continuous[%d].channels[%d].channel_name: expected a string, got %s", name,
                        s, c, describe(cn, d, sizeof d));
    const cJSON *bv = cJSON_GetObjectItemCaseSensitive(ch, "bit_volts");
    if (!bv)
        return bs_error(BS_ERR_INPUT, "%s: continuous[%d].channels[%d].bit_volts: missing, expected the channel's "
                                      "scale (units per bit)",
                        name, s, c);
    if (!cJSON_IsNumber(bv) || !isfinite(bv->valuedouble) || !(bv->valuedouble > 0))
        return bs_error(BS_ERR_INPUT, "%s: continuous[%d].channels[%d].bit_volts: expected a number > 0, got %s", name,
                        s, c, describe(bv, d, sizeof d));
    const cJSON *un = cJSON_GetObjectItemCaseSensitive(ch, "units");
    const char *units = "";
    if (un && !cJSON_IsNull(un)) {
        if (!cJSON_IsString(un))
            return bs_error(BS_ERR_INPUT, "%s: continuous[%d].channels[%d].units: expected a string, got %s", name, s,
                            c, describe(un, d, sizeof d));
        units = un->valuestring;
    }
    snprintf(out->name, sizeof out->name, "%s", cn->valuestring);
    out->kind = channel_kind(cn->valuestring, units);
    out->uv_per_bit = bv->valuedouble;
    if (out->kind != BS_OE_CHAN_NEURAL)
        return BS_OK;
    double scale;
    if (units[0] == '\0' || strcmp(units, "uV") == 0 || strcmp(units, "\xc2\xb5V") == 0)
        scale = 1.0;
    else if (strcmp(units, "mV") == 0)
        scale = 1e3;
    else
        return bs_error(BS_ERR_INPUT, "%s: continuous[%d].channels[%d].units: expected \"uV\", \"mV\" or \"V\", got "
                                      "\"%.40s\"",
                        name, s, c, units);
    out->uv_per_bit = bv->valuedouble * scale;
    if (!(out->uv_per_bit >= 1e-6 && out->uv_per_bit <= 1e6))
        return bs_error(BS_ERR_INPUT, "%s: continuous[%d].channels[%d].bit_volts: %.17g µV per bit, expected a value "
                                      "in 1e-6..1e6",
                        name, s, c, out->uv_per_bit);
    return BS_OK;
}

static bs_status parse_stream(const cJSON *e, const char *name, int s, bs_oe_stream *st)
{
    char d[64];
    memset(st, 0, sizeof *st);
    if (!cJSON_IsObject(e))
        return bs_error(BS_ERR_INPUT, "%s: continuous[%d]: expected a stream object, got %s", name, s,
                        describe(e, d, sizeof d));
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(e, "folder_name");
    if (!cJSON_IsString(fn))
        return bs_error(BS_ERR_INPUT, "%s: continuous[%d].folder_name: expected a string, got %s", name, s,
                        describe(fn, d, sizeof d));
    size_t fl = strlen(fn->valuestring);
    if (fl > 0 && fn->valuestring[fl - 1] == '/')
        fl--;
    if (fl == 0 || fl >= sizeof st->folder || memchr(fn->valuestring, '/', fl) || memchr(fn->valuestring, '\\', fl) ||
        (fl == 1 && fn->valuestring[0] == '.') || (fl == 2 && strncmp(fn->valuestring, "..", 2) == 0))
        return bs_error(BS_ERR_INPUT, "%s: continuous[%d].folder_name: expected one folder name below continuous/, "
                                      "got \"%.80s\"",
                        name, s, fn->valuestring);
    memcpy(st->folder, fn->valuestring, fl);
    st->folder[fl] = '\0';
    const cJSON *sn = cJSON_GetObjectItemCaseSensitive(e, "stream_name");
    if (sn && !cJSON_IsString(sn))
        return bs_error(BS_ERR_INPUT, "%s: continuous[%d].stream_name: expected a string, got %s", name, s,
                        describe(sn, d, sizeof d));
    snprintf(st->name, sizeof st->name, "%s", sn && sn->valuestring[0] ? sn->valuestring : st->folder);
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(e, "source_processor_id");
    st->source_processor_id = -1;
    if (cJSON_IsNumber(pid) && pid->valuedouble >= 0 && pid->valuedouble <= INT_MAX &&
        pid->valuedouble == floor(pid->valuedouble))
        st->source_processor_id = (int)pid->valuedouble;
    const cJSON *sr = cJSON_GetObjectItemCaseSensitive(e, "sample_rate");
    if (!cJSON_IsNumber(sr) || !isfinite(sr->valuedouble) || !(sr->valuedouble > 0) || sr->valuedouble > 1e7)
        return bs_error(BS_ERR_INPUT, "%s: continuous[%d].sample_rate: expected a rate in Hz (> 0, at most 1e7), got %s",
                        name, s, describe(sr, d, sizeof d));
    st->fs_hz = sr->valuedouble;
    const cJSON *chs = cJSON_GetObjectItemCaseSensitive(e, "channels");
    if (!cJSON_IsArray(chs))
        return bs_error(BS_ERR_INPUT, "%s: continuous[%d].channels: expected an array of channel objects, got %s", name,
                        s, describe(chs, d, sizeof d));
    int n = cJSON_GetArraySize(chs);
    if (n < 1)
        return bs_error(BS_ERR_INPUT, "%s: continuous[%d].channels: expected at least one channel, got none", name, s);
    const cJSON *nc = cJSON_GetObjectItemCaseSensitive(e, "num_channels");
    if (nc) {
        if (!cJSON_IsNumber(nc) || !(nc->valuedouble >= 1) || nc->valuedouble > INT_MAX ||
            nc->valuedouble != floor(nc->valuedouble))
            return bs_error(BS_ERR_INPUT, "%s: continuous[%d].num_channels: expected an integer >= 1, got %s", name, s,
                            describe(nc, d, sizeof d));
        if ((int)nc->valuedouble != n)
            return bs_error(BS_ERR_INPUT, "%s: continuous[%d].num_channels is %d but channels lists %d: expected one "
                                          "entry per column of continuous.dat",
                            name, s, (int)nc->valuedouble, n);
    }
    st->n_cols = n;
    st->channels = bs_mem_calloc(OE_TAG, (size_t)n, sizeof *st->channels);
    if (!st->channels)
        return bs_error_context(BS_ERR_MEMORY, "%s", name);
    int c = 0, lfp_names = 0;
    const cJSON *ch;
    cJSON_ArrayForEach(ch, chs)
    {
        BS_TRY(parse_channel(ch, name, s, c, &st->channels[c]));
        if (st->channels[c].kind == BS_OE_CHAN_NEURAL) {
            st->n_neural++;
            lfp_names += starts_with_ci(st->channels[c].name, "LFP");
        }
        c++;
    }
    size_t nl = strlen(st->name);
    if (st->n_neural == 0)
        st->kind = BS_OE_STREAM_OTHER;
    else if ((nl >= 4 && strcasecmp(st->name + nl - 4, "-LFP") == 0) || lfp_names == st->n_neural)
        st->kind = BS_OE_STREAM_LFP;
    else
        st->kind = BS_OE_STREAM_NEURAL;
    return BS_OK;
}

bs_status bs_oe_oebin_parse(const char *text, size_t len, const char *name, bs_oe_index *idx)
{
    memset(idx, 0, sizeof *idx);
    char d[64];
    if (len == 0)
        return bs_error(BS_ERR_INPUT, "%s: the file is empty, expected the JSON index of an Open Ephys recording",
                        name);
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root)
        return bs_json_parse_error(text, len, name, "structure.oebin");
    bs_status st = BS_OK;
    const cJSON *cont = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "continuous") : NULL;
    if (!cJSON_IsObject(root)) {
        st = bs_error(BS_ERR_INPUT, "%s: expected a JSON object with a \"continuous\" array, got %s", name,
                      describe(root, d, sizeof d));
    } else if (!cJSON_IsArray(cont)) {
        st = bs_error(BS_ERR_INPUT, "%s: continuous: expected an array of streams, got %s", name,
                      describe(cont, d, sizeof d));
    } else if (cJSON_GetArraySize(cont) == 0) {
        st = bs_error(BS_ERR_INPUT, "%s: continuous: expected at least one stream, got an empty array (no continuous "
                                    "data was recorded)",
                      name);
    }
    if (st == BS_OK) {
        const cJSON *gv = cJSON_GetObjectItemCaseSensitive(root, "GUI version");
        if (cJSON_IsString(gv))
            snprintf(idx->gui_version, sizeof idx->gui_version, "%s", gv->valuestring);
        int n = cJSON_GetArraySize(cont);
        idx->streams = bs_mem_calloc(OE_TAG, (size_t)n, sizeof *idx->streams);
        if (!idx->streams)
            st = bs_error_context(BS_ERR_MEMORY, "%s", name);
        const cJSON *e;
        int s = 0;
        cJSON_ArrayForEach(e, cont)
        {
            if (st != BS_OK)
                break;
            st = parse_stream(e, name, s, &idx->streams[s]);
            idx->n_streams = ++s;
        }
    }
    cJSON_Delete(root);
    if (st != BS_OK)
        bs_oe_index_free(idx);
    return st;
}

void bs_oe_index_free(bs_oe_index *idx)
{
    if (!idx)
        return;
    for (int s = 0; s < idx->n_streams; s++)
        bs_mem_free(idx->streams[s].channels);
    bs_mem_free(idx->streams);
    memset(idx, 0, sizeof *idx);
}

/* "'ProbeA-AP' (384 neural channels at 30000 Hz)", appended to buf. */
static void append_stream(char *buf, size_t n, const bs_oe_stream *s, int first)
{
    size_t used = strlen(buf);
    if (used + 1 >= n)
        return;
    if (s->kind == BS_OE_STREAM_OTHER)
        snprintf(buf + used, n - used, "%s'%s' (%d channels, no neural ones)", first ? "" : ", ", s->name, s->n_cols);
    else
        snprintf(buf + used, n - used, "%s'%s' (%d %s channels at %g Hz)", first ? "" : ", ", s->name, s->n_neural,
                 s->kind == BS_OE_STREAM_LFP ? "LFP" : "neural", s->fs_hz);
}

static void list_streams(const bs_oe_index *idx, char *buf, size_t n)
{
    buf[0] = '\0';
    for (int s = 0; s < idx->n_streams; s++)
        append_stream(buf, n, &idx->streams[s], s == 0);
}

bs_status bs_oe_pick_stream(const bs_oe_index *idx, const char *want, const char *name, int *which)
{
    char list[1400];
    *which = -1;
    if (want) {
        const char *w = strrchr(want, '#'); /* SpikeInterface: "Record Node 101#ProbeA-AP" */
        w = w ? w + 1 : want;
        int found = -1, count = 0;
        for (int s = 0; s < idx->n_streams; s++)
            if (strcmp(idx->streams[s].name, w) == 0) {
                found = found < 0 ? s : found;
                count++;
            }
        if (count > 1) {
            char folders[1024] = "";
            for (int s = 0; s < idx->n_streams; s++)
                if (strcmp(idx->streams[s].name, w) == 0) {
                    size_t u = strlen(folders);
                    snprintf(folders + u, sizeof folders - u, "%s'%s'", u ? ", " : "", idx->streams[s].folder);
                }
            return bs_error(BS_ERR_INPUT, "%s: stream name '%s' is used by %d streams (folders %s): give the folder "
                                          "name with --stream",
                            name, w, count, folders);
        }
        if (count == 0)
            for (int s = 0; s < idx->n_streams; s++)
                if (strcmp(idx->streams[s].folder, w) == 0)
                    found = s;
        if (found < 0) {
            list_streams(idx, list, sizeof list);
            return bs_error(BS_ERR_INPUT, "%s: no stream named '%s': expected one of %s", name, w, list);
        }
        if (idx->streams[found].kind == BS_OE_STREAM_OTHER)
            return bs_error(BS_ERR_INPUT, "%s: stream '%s' has no neural channels (ADC, AUX or SYNC only): nothing to "
                                          "sort",
                            name, idx->streams[found].name);
        *which = found;
        return BS_OK;
    }
    int n_neural = 0;
    for (int s = 0; s < idx->n_streams; s++)
        if (idx->streams[s].kind == BS_OE_STREAM_NEURAL) {
            n_neural++;
            *which = s;
        }
    if (n_neural == 1)
        return BS_OK;
    *which = -1;
    list_streams(idx, list, sizeof list);
    if (n_neural == 0)
        return bs_error(BS_ERR_INPUT, "%s: no stream of spike-band neural channels to sort (streams: %s); pick one "
                                      "with --stream NAME",
                        name, list);
    return bs_error(BS_ERR_INPUT, "%s: %d streams hold neural channels, pick one with --stream NAME: %s", name,
                    n_neural, list);
}
