/*
 * gpu.h - the compute backend seam: what the CPU path computes that a GPU
 * may compute instead (docs/ARCHITECTURE.md §3, the GPU budget, and §4,
 * determinism on a GPU).
 *
 * The seam is two computations whose cost grows with (templates or grid
 * positions) x samples; everything else (the matcher's column scan, pair-table
 * updates and collision passes, detection's non-maximum suppression and
 * features, preprocessing, clustering) stays on the CPU:
 *   - the matcher's scores (match.h, "Scores"): B[k, t] of every template at
 *     every sample of a peeling window (bs_gpu_scorer);
 *   - detection's candidates (detect.h, part 3): the universal-template score
 *     A[f, t] of every grid position at every column of a batch, and the
 *     (t, f) where it exceeds its chunk's threshold (bs_gpu_detector).
 *
 * Two implementations of this header, one linked:
 *   - gpu_scores.cu and gpu_detect.cu (the build found nvcc, or
 *     -DBOUNDSORT_CUDA=ON). Scores:
 *     the projection of each channel on the temporal basis, one thread per
 *     (channel, sample) with the window tile in shared memory, then one thread
 *     per (template, sample) summing U_k[i, p] * proj[S_k[i], p, t] over its
 *     support in a fixed order (i, then p). Each value is one thread's
 *     fixed-order float sum, so the GPU's scores do not depend on the launch
 *     or the run; they differ from the CPU's GEMM scores by float rounding
 *     (different summation order), so spike times and amplitudes may differ
 *     in rare near-ties. Detection: each thread does for one (position,
 *     column) the float operations of the CPU's exhaustive scoring in the
 *     same order (__fmul_rn/__fadd_rn, as the C code is built with
 *     -ffp-contract=off) on filter outputs summed directly (fused taps,
 *     __fmaf_rn), where the CPU's come from its FFT filter bank
 *     (src/common/firbank.h): the scores differ by float rounding, so a
 *     near-tie may make a detection differ.
 *   - gpu_none.c (no CUDA toolkit): reports that this build has no GPU
 *     backend; `sort --device cuda` then stops with BS_ERR_DEVICE.
 *
 * Memory: the scorer's device buffers are sized once (bs_gpu_scorer_bytes,
 * exact) and reported to the accountant as device BS_DEV_GPU under the tag
 * "match/gpu" (so --gpu-mem refuses them like --mem refuses host buffers, and
 * they appear in the run summary and the --mem-trace). The CUDA context
 * itself (a few hundred MiB the driver keeps per process) is not ours and is
 * not counted, as the host's code and libraries are not.
 */
#ifndef BS_GPU_H
#define BS_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../detect/detect.h"
#include "../match/match.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this build has the CUDA backend. */
int bs_gpu_compiled(void);

/* Device `dev` (0-based): its name and total memory, bytes. BS_ERR_DEVICE
 * with a message when the build has no backend, no device is present or
 * `dev` is out of range. */
bs_status bs_gpu_device_info(int dev, char *name, size_t name_len, size_t *total_bytes);

/* Device bytes of a scorer for K templates of n_sup channels, P temporal
 * components and nt samples on n_chan channels, for windows of up to n_t
 * samples: the templates (support, weights, basis), the window, its
 * projection (n_chan x P x n_t) and the scores (K x n_t). Exact. */
static inline size_t bs_gpu_scorer_bytes(int n_chan, int nt, int n_pc, int K, int n_sup, int64_t n_t)
{
    size_t k = (size_t)K, c = (size_t)n_chan, t = (size_t)n_t;
    return sizeof(float) * (size_t)n_pc * (size_t)nt      /* basis */
           + sizeof(int32_t) * k * (size_t)n_sup          /* support */
           + sizeof(float) * k * (size_t)n_sup * (size_t)n_pc /* U */
           + sizeof(float) * c * t                        /* window */
           + sizeof(float) * c * (size_t)n_pc * t         /* projection */
           + sizeof(float) * k * t;                       /* scores */
}

typedef struct bs_gpu_scorer bs_gpu_scorer;

/* Copy the templates to device `dev` and allocate the buffers for windows of
 * up to n_t samples (tracked as BS_DEV_GPU; BS_ERR_MEMORY over --gpu-mem). */
bs_status bs_gpu_scorer_create(int dev, const bs_match_templates *t, int64_t n_t, bs_gpu_scorer **out);

/* Scores of every template at every sample of X (n_chan rows of n_t samples,
 * row stride ldx; samples outside [0, n_t) count as zero) into B (K x n_t,
 * row stride n_t, host memory): the function bs_match_scores computes. */
bs_status bs_gpu_scores(bs_gpu_scorer *g, const float *X, size_t ldx, int64_t n_t, float *B);

void bs_gpu_scorer_free(bs_gpu_scorer *g);

#define BS_GPU_DETECT_TILE 8192           /* columns filtered and scored per launch */
#define BS_GPU_DETECT_CAP ((int64_t)1 << 21) /* candidates one window may yield; more: the CPU does the batch */

/* Device bytes of a detector for n_chan channels, windows of up to n_t
 * samples, n_shapes shapes of nt samples and a grid of n_pos positions with
 * n_chans channels and n_sizes envelopes: the window, one tile's filter
 * outputs, the candidates of a tile, the shapes and the grid. Exact. */
static inline size_t bs_gpu_detector_bytes(int n_chan, int64_t n_t, int n_shapes, int nt, int n_pos, int n_chans,
                                           int n_sizes)
{
    return sizeof(float) * (size_t)n_chan * (size_t)n_t                          /* window */
           + sizeof(float) * (size_t)n_chan * BS_GPU_DETECT_TILE * (size_t)n_shapes /* filter outputs */
           + sizeof(bs_detect_candidate) * (size_t)BS_GPU_DETECT_CAP + sizeof(unsigned long long) /* candidates */
           + sizeof(float) * (size_t)n_shapes * (size_t)nt                        /* shapes */
           + sizeof(int) * (size_t)n_pos * (size_t)n_chans                        /* ichan */
           + sizeof(float) * (size_t)n_pos * (size_t)n_sizes * (size_t)n_chans;   /* envelopes */
}

typedef struct bs_gpu_detector bs_gpu_detector;

/* Copy the shapes (b->wtemp) and the grid to device `dev`, and allocate the
 * buffers for windows of up to n_t samples of n_chan channels (tracked as
 * BS_DEV_GPU under "detect/gpu"). */
bs_status bs_gpu_detector_create(int dev, const bs_detect_params *p, const bs_temporal_basis *b,
                                 const bs_detect_grid *g, int n_chan, int64_t n_t, bs_gpu_detector **out);

/* Every (column t in [c0, c1), position f) of window x (n_chan rows of n_t
 * samples, row stride n_t) whose score exceeds the threshold of a chunk whose candidate columns hold t
 * (th_low near the low tier's chunks, chunks of BS_DETECT_CHUNK columns from c0 + nt_before; else
 * th_universal: each chunk's own candidates and few more), as the CPU's
 * exhaustive evaluation gives it, in no particular order (the caller sorts
 * them: bs_detect_sort_candidates), in *cands (host memory under
 * "detect/candidates", the caller frees it with bs_mem_free) and *n.
 * *n = -1 (and no list) when the columns hold more than BS_GPU_DETECT_CAP
 * candidates together (an artifact), so the host list stays bounded: the
 * caller evaluates the batch on the CPU. Requires c0 >= nt_before and c1 + nt - nt_before <= n_t. */
bs_status bs_gpu_detect_candidates(bs_gpu_detector *d, const float *x, int64_t n_t, int64_t c0, int64_t c1,
                                   bs_detect_candidate **cands, int64_t *n);

void bs_gpu_detector_free(bs_gpu_detector *d);

#ifdef __cplusplus
}
#endif

#endif
