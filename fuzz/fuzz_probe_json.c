/*
 * fuzz_probe_json.c - libFuzzer target for the probe JSON reader: the input
 * bytes are parsed as a probe file (probeinterface or Kilosort) for probe
 * index 0 and 1; a probe that parses is checked for its invariants (every
 * shank index below n_shanks, columns below the required column count) and
 * the vertical pitch is computed. Any crash, leak or sanitizer report is a bug.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "io/probe_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int index = 0; index < 2; index++) {
        bs_probe p;
        int required = 0;
        if (bs_probe_json_parse((const char *)data, size, "fuzz.json", index, &p, &required) != BS_OK)
            continue;
        if (p.n_chan < 1 || p.n_shanks < 1 || required < 1)
            abort();
        for (int c = 0; c < p.n_chan; c++)
            if (p.shank[c] < 0 || p.shank[c] >= p.n_shanks || p.column[c] < 0 || p.column[c] >= required)
                abort();
        if (!(bs_probe_vertical_pitch_um(&p) >= 0.0))
            abort();
        bs_probe_free(&p);
    }
    return 0;
}
