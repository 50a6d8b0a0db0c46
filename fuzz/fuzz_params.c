/*
 * fuzz_params.c - libFuzzer target for the parameters-file reader (sort --params, src/pipeline/params.h):
 * any text either sets parameters that pass bs_sort_params_check or is refused with a message.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/params.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    bs_sort_params p;
    bs_sort_default_params(&p);
    if (bs_sort_params_parse(text, "fuzz.json", &p) == BS_OK && bs_sort_params_check(&p) != BS_OK)
        abort(); /* a file that was taken must give valid parameters */
    free(text);
    return 0;
}
