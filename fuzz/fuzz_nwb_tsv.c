/*
 * fuzz_nwb_tsv.c - libFuzzer target for the per-cluster TSV reader that
 * feeds the NWB Units table's quality columns (bs_tsv_parse,
 * src/export/nwb_tsv.c).
 */
#include <stddef.h>
#include <stdint.h>

#include "export/nwb_export.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bs_tsv_table t;
    if (bs_tsv_parse((const char *)data, size, "fuzz.tsv", &t) == BS_OK) {
        for (int64_t r = 0; r < t.n_rows; r++)
            bs_tsv_find(&t, t.ids[r]);
        bs_tsv_free(&t);
    }
    return 0;
}
