/*
 * gpu_none.c - the GPU seam (gpu.h) in a build without the CUDA toolkit:
 * there is no GPU backend, and every entry point that would need one says so
 * with BS_ERR_DEVICE (sort --device cuda stops before reading data). The
 * CUDA build compiles gpu_scores.cu and gpu_detect.cu instead of this file (CMakeLists.txt).
 */
#include "gpu/gpu.h"

static bs_status no_backend(void)
{
    return bs_error(BS_ERR_DEVICE, "--device cuda: this boundsort was built without the CUDA backend (rebuild where "
                                   "nvcc is installed, or with -DBOUNDSORT_CUDA=ON)");
}

int bs_gpu_compiled(void) { return 0; }

bs_status bs_gpu_device_info(int dev, char *name, size_t name_len, size_t *total_bytes)
{
    (void)dev, (void)name, (void)name_len, (void)total_bytes;
    return no_backend();
}

bs_status bs_gpu_scorer_create(int dev, const bs_match_templates *t, int64_t n_t, bs_gpu_scorer **out)
{
    (void)dev, (void)t, (void)n_t;
    *out = NULL;
    return no_backend();
}

bs_status bs_gpu_scores(bs_gpu_scorer *g, const float *X, size_t ldx, int64_t n_t, float *B)
{
    (void)g, (void)X, (void)ldx, (void)n_t, (void)B;
    return no_backend();
}

void bs_gpu_scorer_free(bs_gpu_scorer *g) { (void)g; }

bs_status bs_gpu_detector_create(int dev, const bs_detect_params *p, const bs_temporal_basis *b,
                                 const bs_detect_grid *g, int n_chan, int64_t n_t, bs_gpu_detector **out)
{
    (void)dev, (void)p, (void)b, (void)g, (void)n_chan, (void)n_t;
    *out = NULL;
    return no_backend();
}

bs_status bs_gpu_detect_candidates(bs_gpu_detector *d, const float *x, int64_t n_t, int64_t c0, int64_t c1,
                                   bs_detect_candidate **cands, int64_t *n)
{
    (void)d, (void)x, (void)n_t, (void)c0, (void)c1;
    *cands = NULL;
    *n = 0;
    return no_backend();
}

void bs_gpu_detector_free(bs_gpu_detector *d) { (void)d; }
