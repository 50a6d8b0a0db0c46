/*
 * fuzz_spikeglx_meta.c - libFuzzer target for the SpikeGLX metadata path:
 * the bytes are a .meta text, parsed into key=value pairs and turned into the
 * sorted channels twice (geometry from ~snsGeomMap when present, and from
 * ~imroTbl + the part table alone). Any input must end in BS_OK or a clean
 * error status, with every allocation released.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/log.h"
#include "io/spikeglx.h"
#include "mem/mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bs_log_set_level(BS_LOG_QUIET);
    bs_sglx_meta m;
    if (bs_sglx_meta_parse((const char *)data, size, "fuzz.meta", &m) != BS_OK)
        return 0;
    for (int flags = 0; flags <= BS_SGLX_IGNORE_GEOMMAP; flags += BS_SGLX_IGNORE_GEOMMAP) {
        bs_sglx_info info;
        if (bs_sglx_info_from_meta(&m, flags, &info) == BS_OK)
            bs_sglx_info_free(&info);
    }
    bs_sglx_meta_free(&m);
    if (bs_mem_live_blocks() != 0)
        abort(); /* a leak on some path */
    return 0;
}
