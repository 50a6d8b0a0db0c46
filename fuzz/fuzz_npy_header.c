/*
 * fuzz_npy_header.c - libFuzzer target for the .npy header parser.
 */
#include <stddef.h>
#include <stdint.h>

#include "io/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bs_npy_header h;
    bs_npy_parse_header(data, size, "fuzz.npy", &h);
    return 0;
}
