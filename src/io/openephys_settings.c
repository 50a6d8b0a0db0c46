/*
 * openephys_settings.c - Open Ephys settings.xml -> Neuropixels probe
 * geometry, and the probe of one stream (openephys.h, layer 2).
 *
 * The XML tree comes from xml.c. The processor is the PROCESSOR element
 * (anywhere) whose name contains "Neuropix-PXI" or "OneBox" and whose
 * NodeId / nodeId is the stream's source processor. Each enabled NP_PROBE
 * below it gives one bs_oe_np_probe: the attributes of ELECTRODE_XPOS,
 * ELECTRODE_YPOS and CHANNELS are each read once into arrays sorted by
 * channel number and merged by binary search, so a probe costs
 * O(n log n) whatever the attribute order or count. Keys are "CH<n>" or
 * "CH<n>_<shank>" with n in 0..65535; a key listed twice, a channel with an x
 * but no y, or a value that is not a number is an error naming the element
 * and the attribute. Positions stay in µm as written; the GUI < 0.6 shank
 * offset in y is removed. Shank ids are renumbered 0..n_shanks-1 in
 * ascending order when the bs_probe is built.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mem/mem.h"
#include "openephys.h"
#include "probe.h"
#include "spikeglx.h"
#include "xml.h"

#define OE_TAG "io/openephys"
#define OE_MAX_CHAN 65535
#define OE_05_SHANK_PITCH_UM 250.0 /* every multi-shank Neuropixels probe of the GUI 0.5 era */

typedef struct {
    int chan;
    int name_shank; /* from "CHn_s", -1 if none */
    double value;   /* position (µm) or shank from "bank:shank" (-1 if none) */
    int order;
} keyed;

static int keyed_cmp(const void *a, const void *b)
{
    const keyed *s = a, *t = b;
    if (s->chan != t->chan)
        return s->chan < t->chan ? -1 : 1;
    return (s->order > t->order) - (s->order < t->order);
}

/* "CH12" or "CH12_3" -> 12 and 3 (-1 without shank). */
static int parse_key(const char *k, int *chan, int *shank)
{
    if (k[0] != 'C' || k[1] != 'H' || !isdigit((unsigned char)k[2]))
        return 0;
    char *end;
    errno = 0;
    long c = strtol(k + 2, &end, 10);
    if (errno || c < 0 || c > OE_MAX_CHAN)
        return 0;
    *shank = -1;
    if (*end == '_') {
        const char *s = end + 1;
        if (!isdigit((unsigned char)*s))
            return 0;
        long sh = strtol(s, &end, 10);
        if (errno || sh < 0 || sh > 1000)
            return 0;
        *shank = (int)sh;
    }
    if (*end != '\0')
        return 0;
    *chan = (int)c;
    return 1;
}

/* A finite number filling the whole string. */
static int parse_number(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    while (end != s && isspace((unsigned char)*end))
        end++;
    return end != s && *end == '\0' && errno == 0 && isfinite(*v) && fabs(*v) < 1e9;
}

/* Read the attributes of element `el` (named `what`) into a sorted array.
 * shank_values: the values are CHANNELS' "bank" or "bank:shank" (value =
 * shank, -1 if absent); otherwise positions in µm. */
static bs_status read_keyed(const bs_xml_doc *doc, int el, const char *what, const char *probe, int shank_values,
                            keyed **out, int *n_out)
{
    const bs_xml_node *nd = &doc->nodes[el];
    *out = NULL;
    *n_out = 0;
    keyed *k = bs_mem_alloc(OE_TAG, (size_t)(nd->attr_count ? nd->attr_count : 1) * sizeof *k);
    if (!k)
        return bs_error_context(BS_ERR_MEMORY, "%s", doc->name);
    int n = 0;
    for (int a = 0; a < nd->attr_count; a++) {
        const bs_xml_attr *at = &doc->attrs[nd->attr_first + a];
        keyed *e = &k[n];
        if (!parse_key(at->name, &e->chan, &e->name_shank)) {
            bs_mem_free(k);
            return bs_error(BS_ERR_INPUT, "%s: NP_PROBE %s: %s: attribute '%.40s': expected a channel key CH0..CH%d "
                                          "(or CHn_shank)",
                            doc->name, probe, what, at->name, OE_MAX_CHAN);
        }
        e->order = a;
        if (shank_values) {
            const char *colon = strchr(at->value, ':');
            double bank, sh = -1;
            int ok;
            if (colon) {
                char buf[64];
                size_t bl = (size_t)(colon - at->value);
                ok = bl < sizeof buf;
                if (ok) {
                    memcpy(buf, at->value, bl);
                    buf[bl] = '\0';
                    ok = parse_number(buf, &bank) && parse_number(colon + 1, &sh) && sh >= 0 && sh <= 1000 &&
                         sh == floor(sh);
                }
            } else {
                ok = parse_number(at->value, &bank);
            }
            if (!ok) {
                bs_mem_free(k);
                return bs_error(BS_ERR_INPUT, "%s: NP_PROBE %s: %s: %s: expected \"bank\" or \"bank:shank\" "
                                              "integers, got \"%.40s\"",
                                doc->name, probe, what, at->name, at->value);
            }
            e->value = sh;
        } else if (!parse_number(at->value, &e->value)) {
            bs_mem_free(k);
            return bs_error(BS_ERR_INPUT, "%s: NP_PROBE %s: %s: %s: expected a position in µm, got \"%.40s\"",
                            doc->name, probe, what, at->name, at->value);
        }
        n++;
    }
    qsort(k, (size_t)n, sizeof *k, keyed_cmp);
    for (int i = 1; i < n; i++)
        if (k[i].chan == k[i - 1].chan) {
            int c = k[i].chan;
            bs_mem_free(k);
            return bs_error(BS_ERR_INPUT, "%s: NP_PROBE %s: %s lists channel %d twice", doc->name, probe, what, c);
        }
    *out = k;
    *n_out = n;
    return BS_OK;
}

static const keyed *find_chan(const keyed *k, int n, int chan)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (k[mid].chan < chan)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && k[lo].chan == chan ? &k[lo] : NULL;
}

/* GUI version "0.5.5.4" -> 1 if older than 0.6. */
static int gui_before_0_6(const char *v)
{
    int major = 0, minor = 0;
    if (sscanf(v, "%d.%d", &major, &minor) != 2)
        return 0;
    return major == 0 && minor < 6;
}

static void free_np_probe(bs_oe_np_probe *p)
{
    bs_mem_free(p->chan);
    bs_mem_free(p->x_um);
    bs_mem_free(p->y_um);
    bs_mem_free(p->shank);
    memset(p, 0, sizeof *p);
}

static bs_status read_np_probe(const bs_xml_doc *doc, int el, int before_0_6, bs_oe_np_probe *p)
{
    const char *pn = bs_xml_attr_get(doc, el, "probe_part_number");
    if (!pn)
        pn = bs_xml_attr_get(doc, el, "probePartNumber");
    const char *sn = bs_xml_attr_get(doc, el, "probe_serial_number");
    if (!sn)
        sn = bs_xml_attr_get(doc, el, "probeSerialNumber");
    snprintf(p->part_number, sizeof p->part_number, "%s", pn ? pn : "");
    snprintf(p->serial, sizeof p->serial, "%s", sn ? sn : "");
    char label[96];
    snprintf(label, sizeof label, "(line %d)", doc->nodes[el].line);
    int xe = bs_xml_child(doc, el, "ELECTRODE_XPOS"), ye = bs_xml_child(doc, el, "ELECTRODE_YPOS");
    int ce = bs_xml_child(doc, el, "CHANNELS");
    if (xe < 0 || ye < 0)
        return BS_OK; /* no positions: an error only if this probe is used */
    keyed *kx = NULL, *ky = NULL, *kc = NULL;
    int nx = 0, ny = 0, nc = 0;
    bs_status st = read_keyed(doc, xe, "ELECTRODE_XPOS", label, 0, &kx, &nx);
    if (st == BS_OK)
        st = read_keyed(doc, ye, "ELECTRODE_YPOS", label, 0, &ky, &ny);
    if (st == BS_OK && ce >= 0)
        st = read_keyed(doc, ce, "CHANNELS", label, 1, &kc, &nc);
    if (st == BS_OK && nx == 0)
        st = bs_error(BS_ERR_INPUT, "%s: NP_PROBE %s: ELECTRODE_XPOS lists no channels", doc->name, label);
    for (int i = 0; st == BS_OK && i < nx; i++)
        if (!find_chan(ky, ny, kx[i].chan))
            st = bs_error(BS_ERR_INPUT, "%s: NP_PROBE %s: ELECTRODE_YPOS has no CH%d, expected a y for every x",
                          doc->name, label, kx[i].chan);
    if (st == BS_OK && ny != nx)
        st = bs_error(BS_ERR_INPUT, "%s: NP_PROBE %s: ELECTRODE_YPOS lists %d channels but ELECTRODE_XPOS %d", doc->name,
                      label, ny, nx);
    if (st == BS_OK) {
        p->chan = bs_mem_alloc(OE_TAG, (size_t)nx * sizeof *p->chan);
        p->x_um = bs_mem_alloc(OE_TAG, (size_t)nx * sizeof *p->x_um);
        p->y_um = bs_mem_alloc(OE_TAG, (size_t)nx * sizeof *p->y_um);
        p->shank = bs_mem_alloc(OE_TAG, (size_t)nx * sizeof *p->shank);
        if (!p->chan || !p->x_um || !p->y_um || !p->shank)
            st = bs_error_context(BS_ERR_MEMORY, "%s", doc->name);
    }
    if (st == BS_OK) {
        /* shanks: CHANNELS "bank:shank" for every channel, else "CHn_s" names, else 0 */
        int from_values = nc > 0, from_names = 1;
        for (int i = 0; i < nx; i++) {
            const keyed *c = nc ? find_chan(kc, nc, kx[i].chan) : NULL;
            if (!c || c->value < 0)
                from_values = 0;
            if (kx[i].name_shank < 0)
                from_names = 0;
        }
        for (int i = 0; i < nx; i++) {
            p->chan[i] = kx[i].chan;
            p->x_um[i] = kx[i].value;
            p->y_um[i] = find_chan(ky, ny, kx[i].chan)->value;
            p->shank[i] = from_values ? (int)find_chan(kc, nc, kx[i].chan)->value
                                      : from_names ? kx[i].name_shank : 0;
            if (before_0_6 && from_values)
                p->y_um[i] -= OE_05_SHANK_PITCH_UM * p->shank[i];
        }
        p->n = nx;
        p->has_positions = 1;
    }
    bs_mem_free(kx);
    bs_mem_free(ky);
    bs_mem_free(kc);
    return st;
}

static int is_np_processor(const bs_xml_doc *doc, int node, int *id)
{
    const char *name = bs_xml_attr_get(doc, node, "name");
    if (!name || (!strstr(name, "Neuropix-PXI") && !strstr(name, "OneBox")))
        return 0;
    const char *nid = bs_xml_attr_get(doc, node, "NodeId");
    if (!nid)
        nid = bs_xml_attr_get(doc, node, "nodeId");
    double v;
    *id = (nid && parse_number(nid, &v) && v >= 0 && v <= INT_MAX && v == floor(v)) ? (int)v : -1;
    return 1;
}

bs_status bs_oe_settings_parse(const char *text, size_t len, const char *name, int processor_id, bs_oe_settings *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    bs_xml_doc doc;
    BS_TRY(bs_xml_parse(text, len, name, &doc));
    bs_status st = BS_OK;
    int info = bs_xml_child(&doc, 0, "INFO");
    int ver = bs_xml_child(&doc, info, "VERSION");
    if (ver >= 0)
        snprintf(s->gui_version, sizeof s->gui_version, "%s", doc.nodes[ver].text);
    /* the processor */
    int proc = -1, n_np = 0, pid = -1;
    char ids[256] = "";
    for (int i = 0; i < doc.n_nodes; i++) {
        int id;
        if (strcmp(doc.nodes[i].name, "PROCESSOR") != 0 || !is_np_processor(&doc, i, &id))
            continue;
        n_np++;
        size_t u = strlen(ids);
        if (u + 16 < sizeof ids)
            snprintf(ids + u, sizeof ids - u, "%s%d", u ? ", " : "", id);
        if ((processor_id < 0 && proc < 0) || (processor_id >= 0 && id == processor_id)) {
            proc = i;
            pid = id;
        }
    }
    if (n_np == 0)
        st = bs_error(BS_ERR_INPUT, "%s: no Neuropix-PXI or OneBox processor: the probe geometry is not in this file, "
                                    "give it with --probe FILE",
                      name);
    else if (proc < 0)
        st = bs_error(BS_ERR_INPUT, "%s: no Neuropix-PXI or OneBox processor with node id %d (the stream's source; "
                                    "found node ids %s): give the geometry with --probe FILE",
                      name, processor_id, ids);
    else if (processor_id < 0 && n_np > 1)
        st = bs_error(BS_ERR_INPUT, "%s: %d Neuropix-PXI or OneBox processors (node ids %s): expected the stream's "
                                    "source processor id",
                      name, n_np, ids);
    s->processor_id = pid;
    /* the names of its probe streams */
    char stream_names[16][128];
    int n_names = 0;
    for (int c = st == BS_OK ? bs_xml_child(&doc, proc, "STREAM") : -1; c >= 0 && n_names < 16;
         c = bs_xml_next(&doc, c, "STREAM")) {
        const char *sn = bs_xml_attr_get(&doc, c, "name");
        if (!sn || strstr(sn, "ADC"))
            continue;
        char base[128];
        snprintf(base, sizeof base, "%s", sn);
        size_t bl = strlen(base);
        if (bl >= 3 && strcmp(base + bl - 3, "-AP") == 0)
            base[bl - 3] = '\0';
        else if (bl >= 4 && strcmp(base + bl - 4, "-LFP") == 0)
            base[bl - 4] = '\0';
        int dup = 0;
        for (int j = 0; j < n_names; j++)
            dup |= strcmp(stream_names[j], base) == 0;
        if (!dup)
            snprintf(stream_names[n_names++], sizeof stream_names[0], "%s", base);
    }
    /* the enabled probes */
    int count = 0;
    for (int e = st == BS_OK ? bs_xml_find(&doc, proc, proc, "NP_PROBE") : -1; e >= 0;
         e = bs_xml_find(&doc, proc, e, "NP_PROBE")) {
        const char *en = bs_xml_attr_get(&doc, e, "isEnabled");
        count += !(en && strcmp(en, "0") == 0);
    }
    if (st == BS_OK && count > 0) {
        s->probes = bs_mem_calloc(OE_TAG, (size_t)count, sizeof *s->probes);
        if (!s->probes)
            st = bs_error_context(BS_ERR_MEMORY, "%s", name);
    }
    int before_0_6 = gui_before_0_6(s->gui_version);
    for (int e = st == BS_OK ? bs_xml_find(&doc, proc, proc, "NP_PROBE") : -1; e >= 0 && st == BS_OK;
         e = bs_xml_find(&doc, proc, e, "NP_PROBE")) {
        const char *en = bs_xml_attr_get(&doc, e, "isEnabled");
        if (en && strcmp(en, "0") == 0)
            continue;
        bs_oe_np_probe *p = &s->probes[s->n_probes++];
        st = read_np_probe(&doc, e, before_0_6, p);
        int i = s->n_probes - 1;
        const char *custom = bs_xml_attr_get(&doc, e, "custom_probe_name");
        if (custom && custom[0] && strcmp(custom, p->serial) != 0)
            snprintf(p->name, sizeof p->name, "%s", custom);
        else if (i < n_names)
            snprintf(p->name, sizeof p->name, "%s", stream_names[i]);
        else
            snprintf(p->name, sizeof p->name, "%d.%d", pid, i);
    }
    bs_xml_free(&doc);
    if (st != BS_OK)
        bs_oe_settings_free(s);
    return st;
}

void bs_oe_settings_free(bs_oe_settings *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n_probes; i++)
        free_np_probe(&s->probes[i]);
    bs_mem_free(s->probes);
    s->probes = NULL;
    s->n_probes = 0;
}

/* "AP12" -> 12 (the trailing digits of a name with a non-empty prefix of letters). */
static int name_number(const char *name, long *num)
{
    size_t n = strlen(name), d = n;
    while (d > 0 && isdigit((unsigned char)name[d - 1]))
        d--;
    if (d == n || d == 0 || n - d > 6)
        return 0;
    for (size_t i = 0; i < d; i++)
        if (!isalpha((unsigned char)name[i]))
            return 0;
    *num = strtol(name + d, NULL, 10);
    return 1;
}

static int int_cmp(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

bs_status bs_oe_settings_probe(const bs_oe_settings *s, const bs_oe_stream *stream, bs_probe *out)
{
    memset(out, 0, sizeof *out);
    const char *name = s->name;
    if (s->n_probes == 0)
        return bs_error(BS_ERR_INPUT, "%s: the Neuropix-PXI processor (node %d) has no enabled NP_PROBE: give the "
                                      "geometry of stream '%s' with --probe FILE",
                        name, s->processor_id, stream->name);
    int pick = 0;
    if (s->n_probes > 1) {
        pick = -1;
        size_t best = 0;
        int ties = 0;
        for (int i = 0; i < s->n_probes; i++) {
            size_t l = strlen(s->probes[i].name);
            if (l == 0 || (!strstr(stream->name, s->probes[i].name) && !strstr(stream->folder, s->probes[i].name)))
                continue;
            if (l > best) {
                best = l;
                pick = i;
                ties = 0;
            } else if (l == best) {
                ties++;
            }
        }
        if (pick < 0 || ties > 0) {
            char names[512] = "";
            for (int i = 0; i < s->n_probes; i++) {
                size_t u = strlen(names);
                snprintf(names + u, sizeof names - u, "%s'%s'", i ? ", " : "", s->probes[i].name);
            }
            return bs_error(BS_ERR_INPUT, "%s: %d enabled probes (%s) and %s matches stream '%s': give the geometry "
                                          "with --probe FILE",
                            name, s->n_probes, names, pick < 0 ? "none" : "more than one", stream->name);
        }
    }
    const bs_oe_np_probe *np = &s->probes[pick];
    if (!np->has_positions)
        return bs_error(BS_ERR_INPUT, "%s: NP_PROBE '%s' has no ELECTRODE_XPOS / ELECTRODE_YPOS (plugin older than "
                                      "0.3.3, or a layout with only SELECTED_ELECTRODES): give the geometry with "
                                      "--probe FILE",
                        name, np->name);
    int n = 0;
    for (int c = 0; c < stream->n_cols; c++)
        n += stream->channels[c].kind == BS_OE_CHAN_NEURAL;
    if (n != stream->n_neural || n < 1)
        return bs_error(BS_ERR_INTERNAL, "%s: stream '%s' counts %d neural channels but lists %d", name, stream->name,
                        stream->n_neural, n);
    if (n != np->n)
        return bs_error(BS_ERR_INPUT, "%s: NP_PROBE '%s' places %d channels but stream '%s' has %d neural channels: "
                                      "a saved channel subset or another probe; give the geometry with --probe FILE",
                        name, np->name, np->n, stream->name, n);
    /* neural channels -> rank among the probe's channels */
    int *col = bs_mem_alloc(OE_TAG, (size_t)n * sizeof *col);
    int *rank = bs_mem_alloc(OE_TAG, (size_t)n * sizeof *rank);
    int *sorted = bs_mem_alloc(OE_TAG, (size_t)n * sizeof *sorted);
    bs_status st = (col && rank && sorted) ? BS_OK : bs_error_context(BS_ERR_MEMORY, "%s", name);
    int k = 0;
    long lo = LONG_MAX;
    int by_name = 1;
    for (int c = 0; st == BS_OK && c < stream->n_cols; c++) {
        if (stream->channels[c].kind != BS_OE_CHAN_NEURAL)
            continue;
        long num;
        if (!name_number(stream->channels[c].name, &num))
            by_name = 0;
        else if (num < lo)
            lo = num;
        col[k] = c;
        rank[k] = by_name ? (int)num : k;
        k++;
    }
    if (st == BS_OK && by_name) { /* numbers must run over lo..lo+n-1, lo 0 or 1, each once */
        if (lo != 0 && lo != 1)
            by_name = 0;
        for (int i = 0; by_name && i < n; i++) {
            rank[i] -= (int)lo;
            by_name = rank[i] >= 0 && rank[i] < n;
        }
        if (by_name) {
            memcpy(sorted, rank, (size_t)n * sizeof *sorted);
            qsort(sorted, (size_t)n, sizeof *sorted, int_cmp);
            for (int i = 0; by_name && i < n; i++)
                by_name = sorted[i] == i;
        }
    }
    if (st == BS_OK && !by_name)
        for (int i = 0; i < n; i++)
            rank[i] = i;
    if (st == BS_OK)
        st = bs_probe_alloc(out, n);
    if (st == BS_OK) {
        /* shank ids -> 0..n_shanks-1 by ascending id */
        for (int i = 0; i < n; i++)
            sorted[i] = np->shank[i];
        qsort(sorted, (size_t)n, sizeof *sorted, int_cmp);
        int m = 0;
        for (int i = 0; i < n; i++)
            if (m == 0 || sorted[i] != sorted[m - 1])
                sorted[m++] = sorted[i];
        for (int i = 0; i < n; i++) {
            int r = rank[i];
            out->column[i] = col[i];
            out->x_um[i] = np->x_um[r];
            out->y_um[i] = np->y_um[r];
            const int *f = bsearch(&np->shank[r], sorted, (size_t)m, sizeof *sorted, int_cmp);
            out->shank[i] = (int)(f - sorted);
        }
        out->n_shanks = m;
        snprintf(out->model, sizeof out->model, "%s", np->part_number);
        /* the ADC sampling delays of the readout channels, in the part's standard order (the phase shift) */
        double *d = bs_mem_alloc(OE_TAG, (size_t)n * sizeof *d);
        for (int i = 0; d && i < n; i++)
            sorted[i] = np->chan[rank[i]];
        if (!d)
            st = BS_ERR_MEMORY;
        else if (bs_neuropixels_standard_shifts(np->part_number, sorted, n, d))
            st = bs_probe_set_adc_shift(out, d, name);
        bs_mem_free(d);
        if (st == BS_OK)
            st = bs_probe_validate(out, stream->n_cols, name);
        if (st != BS_OK)
            bs_probe_free(out);
    }
    bs_mem_free(col);
    bs_mem_free(rank);
    bs_mem_free(sorted);
    return st;
}
