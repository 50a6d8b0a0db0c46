/*
 * fuzz_oebin.c - libFuzzer target for the structure.oebin reader: the input
 * bytes are parsed as structure.oebin; an index that parses is checked for
 * its invariants (every stream has columns, neural counts and kinds agree
 * with the channels, scales are finite and positive, folder names are one
 * path component) and the stream choice is run without a name, by the first
 * stream's name and by an unknown name. Any crash, leak, hang or sanitizer
 * report is a bug.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/openephys.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bs_oe_index idx;
    if (bs_oe_oebin_parse((const char *)data, size, "fuzz.oebin", &idx) != BS_OK)
        return 0;
    if (idx.n_streams < 1)
        abort();
    for (int s = 0; s < idx.n_streams; s++) {
        const bs_oe_stream *st = &idx.streams[s];
        int neural = 0;
        if (st->n_cols < 1 || !(st->fs_hz > 0) || !st->folder[0] || strchr(st->folder, '/') ||
            strcmp(st->folder, "..") == 0)
            abort();
        for (int c = 0; c < st->n_cols; c++) {
            if (!(st->channels[c].uv_per_bit > 0) || !isfinite(st->channels[c].uv_per_bit))
                abort();
            neural += st->channels[c].kind == BS_OE_CHAN_NEURAL;
        }
        if (neural != st->n_neural || (neural == 0) != (st->kind == BS_OE_STREAM_OTHER))
            abort();
    }
    int which = -1;
    if (bs_oe_pick_stream(&idx, NULL, "fuzz.oebin", &which) == BS_OK &&
        (which < 0 || which >= idx.n_streams || idx.streams[which].kind != BS_OE_STREAM_NEURAL))
        abort();
    if (bs_oe_pick_stream(&idx, idx.streams[0].name, "fuzz.oebin", &which) == BS_OK &&
        (which < 0 || which >= idx.n_streams || idx.streams[which].kind == BS_OE_STREAM_OTHER))
        abort();
    if (bs_oe_pick_stream(&idx, "Record Node 1#no such stream \x01", "fuzz.oebin", &which) == BS_OK)
        abort();
    bs_oe_index_free(&idx);
    return 0;
}
