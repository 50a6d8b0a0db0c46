/*
 * fuzz_prb.c - libFuzzer target for the .prb reader: the input bytes are
 * parsed as a .prb file; a probe that parses is checked for its invariants
 * (at least one channel, shank indices below n_shanks, columns below the
 * required column count, finite positions). Any crash, leak, hang or
 * sanitizer report is a bug.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "io/prb.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bs_probe p;
    int required = 0;
    if (bs_prb_parse((const char *)data, size, "fuzz.prb", 0, &p, &required) != BS_OK)
        return 0;
    if (p.n_chan < 1 || p.n_shanks < 1 || required < 1)
        abort();
    for (int c = 0; c < p.n_chan; c++)
        if (p.shank[c] < 0 || p.shank[c] >= p.n_shanks || p.column[c] < 0 || p.column[c] >= required ||
            !isfinite(p.x_um[c]) || !isfinite(p.y_um[c]))
            abort();
    bs_probe_free(&p);
    return 0;
}
