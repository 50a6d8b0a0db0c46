/*
 * cuda_util.h - what the CUDA sources of src/gpu share: the C headers under
 * C linkage, and error handling. Every CUDA call is checked: an error
 * becomes BS_ERR_DEVICE naming the call (CU), a failed device allocation
 * BS_ERR_MEMORY naming the buffer (bs_cuda_alloc).
 */
#ifndef BS_CUDA_UTIL_H
#define BS_CUDA_UTIL_H

#include <cuda_runtime.h>

extern "C" { /* the C headers (gpu.h declares its own functions extern "C") */
#include "../common/status.h"
#include "../detect/detect.h"
#include "../mem/mem.h"
}
#include "gpu.h"

static inline bs_status bs_cuda_fail(cudaError_t e, const char *what)
{
    return bs_error(BS_ERR_DEVICE, "CUDA: %s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

#define CU(call)                                                                                                     \
    do {                                                                                                             \
        cudaError_t e_ = (call);                                                                                     \
        if (e_ != cudaSuccess)                                                                                       \
            return bs_cuda_fail(e_, #call);                                                                          \
    } while (0)

/* cudaMalloc of `bytes` (at least 1) for `what`; *p = NULL on failure. */
static inline bs_status bs_cuda_alloc(void **p, size_t bytes, const char *what)
{
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *p = NULL;
        return bs_error(BS_ERR_MEMORY, "CUDA: cannot allocate %.1f MiB on the GPU for %s (%s)",
                        (double)bytes / (1 << 20), what, cudaGetErrorString(e));
    }
    return BS_OK;
}

#endif
