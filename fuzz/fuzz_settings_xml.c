/*
 * fuzz_settings_xml.c - libFuzzer target for the XML reader and the Open
 * Ephys settings.xml reader: the input is parsed as XML (the tree's links
 * are checked: parents before children, subtrees nested, attributes in
 * range), then as settings.xml for any processor and for node 100; for every
 * enabled probe with positions, a stream with as many neural channels
 * (named AP1..APn, then CH0..CHn-1 in reverse order) is given a probe, which
 * is checked (columns distinct and in range, shanks below n_shanks). Any
 * crash, leak, hang or sanitizer report is a bug.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/openephys.h"
#include "io/xml.h"
#include "mem/mem.h"

static void check_tree(const bs_xml_doc *d)
{
    for (int i = 0; i < d->n_nodes; i++) {
        const bs_xml_node *n = &d->nodes[i];
        if (n->parent >= i || (i > 0 && n->parent < 0) || n->subtree_end <= i || n->subtree_end > d->n_nodes ||
            n->attr_first < 0 || n->attr_first + n->attr_count > d->n_attrs || !n->name || !n->text)
            abort();
        if (n->parent >= 0 && n->subtree_end > d->nodes[n->parent].subtree_end)
            abort();
        if (n->first_child >= 0 && (n->first_child != i + 1 || d->nodes[n->first_child].parent != i))
            abort();
        if (n->next_sibling >= 0 && (n->next_sibling != n->subtree_end || d->nodes[n->next_sibling].parent != n->parent))
            abort();
    }
}

static void probe_streams(const bs_oe_settings *s)
{
    for (int i = 0; i < s->n_probes; i++) {
        int n = s->probes[i].n;
        if (!s->probes[i].has_positions || n < 1 || n > 4096)
            continue;
        for (int naming = 0; naming < 2; naming++) {
            bs_oe_stream st;
            memset(&st, 0, sizeof st);
            snprintf(st.name, sizeof st.name, "%s-AP", s->probes[i].name);
            snprintf(st.folder, sizeof st.folder, "Neuropix-PXI-100.%.200s", st.name);
            st.fs_hz = 30000;
            st.n_cols = n + 1;
            st.n_neural = n;
            st.channels = bs_mem_calloc("fuzz", (size_t)n + 1, sizeof *st.channels);
            if (!st.channels)
                return;
            for (int c = 0; c < n; c++) {
                if (naming == 0)
                    snprintf(st.channels[c].name, sizeof st.channels[c].name, "AP%d", c + 1);
                else
                    snprintf(st.channels[c].name, sizeof st.channels[c].name, "CH%d", n - 1 - c);
                st.channels[c].uv_per_bit = 0.195;
            }
            snprintf(st.channels[n].name, sizeof st.channels[n].name, "AP_SYNC");
            st.channels[n].kind = BS_OE_CHAN_SYNC;
            st.channels[n].uv_per_bit = 1;
            bs_probe p;
            if (bs_oe_settings_probe(s, &st, &p) == BS_OK) {
                if (p.n_chan != n || p.n_shanks < 1)
                    abort();
                for (int c = 0; c < p.n_chan; c++)
                    if (p.column[c] < 0 || p.column[c] >= n || p.shank[c] < 0 || p.shank[c] >= p.n_shanks)
                        abort();
                bs_probe_free(&p);
            }
            bs_mem_free(st.channels);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bs_xml_doc doc;
    if (bs_xml_parse((const char *)data, size, "fuzz.xml", &doc) == BS_OK) {
        if (doc.n_nodes < 1)
            abort();
        check_tree(&doc);
        bs_xml_free(&doc);
    }
    const int ids[2] = {-1, 100};
    for (int k = 0; k < 2; k++) {
        bs_oe_settings s;
        if (bs_oe_settings_parse((const char *)data, size, "fuzz.xml", ids[k], &s) != BS_OK)
            continue;
        probe_streams(&s);
        bs_oe_settings_free(&s);
    }
    return 0;
}
