/*
 * gpu_detect.cu - detection candidates on a CUDA GPU (gpu.h,
 * bs_gpu_detector; the CPU version is detect_chunk in src/detect/universal.c).
 *
 * Per batch the window is copied to the device once; then, for each tile of
 * up to BS_GPU_DETECT_TILE columns:
 *   filter: one thread per (channel, column): for each shape k,
 *     o = sum_u wtemp[k, u] * x[c, col - nt_before + u], u ascending from
 *     o = 0 (the CPU's filter_shape); the tile of x with nt - 1 samples of
 *     context and the shapes sit in shared memory; fs[(c T + i) K + k] = o.
 *   score: one thread per (position, column): over the position's channels
 *     j in order, acc[s][k] += w[s, j] * fs[ichan[j], i, k] (the CPU's
 *     score_at, exhaustive), then the best |acc| over (s, k) in that order,
 *     ties to the first; a score above the column's threshold appends (t, f,
 *     q, sign, score) to the tile's list through an atomic counter, so the
 *     list of a tile comes back in no particular order (tiles in time order):
 *     the caller sorts it (universal.c, bs_detect_sort_candidates). A
 *     column's threshold is the lowest of the chunks whose candidate columns
 *     hold it (column_threshold): th_low near a low-tier chunk, else
 *     th_universal, so the list holds what each chunk keeps and no more.
 * The filter's taps are fused multiply-adds (__fmaf_rn), summed directly,
 * where the CPU uses its FFT filter bank (src/common/firbank.h): the filter
 * outputs, and so the scores, differ from the CPU's by float rounding.
 * Every other product and sum is rounded on its own (__fmul_rn, __fadd_rn),
 * as the C code is compiled (-ffp-contract=off).
 */
#include <stdlib.h>

#include "gpu/cuda_util.h"

#define THREADS 256
#define MAX_SHAPES 8
#define MAX_SIZES 8
#define MAX_CHANS 64
#define TAG "detect/gpu"

struct bs_gpu_detector {
    int dev, C, K, nt, nb, F, nC, S;
    float th_hi, th_lo; /* th_universal; th_low with the low tier, else th_universal (whitened units) */
    int low_stride;     /* chunks per low-tier chunk; 0: no low tier */
    int64_t n_t_max;
    size_t bytes;
    float *x;      /* C x n_t_max */
    float *fs;     /* C x TILE x K */
    bs_detect_candidate *cand; /* BS_GPU_DETECT_CAP */
    unsigned long long *count;
    float *wtemp;  /* K x nt */
    int *ichan;    /* F x nC */
    float *w;      /* F x S x nC */
    cudaStream_t stream;
};

__global__ void filter_kernel(const float *__restrict__ x, int64_t n_t, int64_t col0, int n_cols,
                              const float *__restrict__ wtemp, int K, int nt, int nb, float *__restrict__ fs)
{
    extern __shared__ float sh[];
    float *xs = sh;                    /* THREADS + nt - 1 */
    float *ws = sh + THREADS + nt - 1; /* K x nt */
    const int c = blockIdx.y;
    const int i0 = blockIdx.x * THREADS;
    const float *xc = x + (size_t)c * n_t;
    for (int j = threadIdx.x; j < THREADS + nt - 1; j += THREADS) {
        int64_t s = col0 + i0 + j - nb;
        xs[j] = (s >= 0 && s < n_t) ? xc[s] : 0.0f;
    }
    for (int j = threadIdx.x; j < K * nt; j += THREADS)
        ws[j] = wtemp[j];
    __syncthreads();
    const int i = i0 + threadIdx.x;
    if (i >= n_cols)
        return;
    for (int k = 0; k < K; k++) {
        const float *w = ws + k * nt;
        float o = 0.0f;
        for (int u = 0; u < nt; u++)
            o = __fmaf_rn(w[u], xs[threadIdx.x + u], o);
        fs[((size_t)c * BS_GPU_DETECT_TILE + i) * K + k] = o;
    }
}

/* floor(a / BS_DETECT_CHUNK) for any sign of a */
__device__ static int64_t chunk_of(int64_t a)
{
    return a >= 0 ? a / BS_DETECT_CHUNK : -((-a + BS_DETECT_CHUNK - 1) / BS_DETECT_CHUNK);
}

/* The threshold column t must pass: th_lo when a low-tier chunk's candidate columns
 * [own0 + c BS_DETECT_CHUNK - nb, own0 + (c + 1) BS_DETECT_CHUNK + nb) hold it (c from
 * floor((t - nb - own0) / chunk) to floor((t + nb - own0) / chunk): at most two, as 2 nb < chunk), else
 * th_hi. A chunk past the batch's end only lowers a threshold, which the caller's per-chunk filter undoes. */
__device__ static float column_threshold(int64_t t, int64_t own0, int nb, int stride, float th_lo, float th_hi)
{
    if (stride <= 0)
        return th_hi;
    const int64_t ca = chunk_of(t - nb - own0), cb = chunk_of(t + nb - own0);
    return (ca >= 0 && ca % stride == 0) || (cb >= 0 && cb % stride == 0) ? th_lo : th_hi;
}

__global__ void score_kernel(const float *__restrict__ fs, int64_t col0, int n_cols, const int *__restrict__ ichan,
                             const float *__restrict__ wgt, int K, int S, int nC, int64_t own0, int nb, int stride,
                             float th_lo, float th_hi, bs_detect_candidate *__restrict__ cand,
                             unsigned long long *count, long long cap)
{
    __shared__ int ich[MAX_CHANS];
    __shared__ float w[MAX_SIZES * MAX_CHANS];
    const int f = blockIdx.y;
    for (int j = threadIdx.x; j < nC; j += THREADS)
        ich[j] = ichan[(size_t)f * nC + j];
    for (int j = threadIdx.x; j < S * nC; j += THREADS)
        w[j] = wgt[(size_t)f * S * nC + j];
    __syncthreads();
    const int i = blockIdx.x * THREADS + threadIdx.x;
    if (i >= n_cols)
        return;
    float acc[MAX_SIZES][MAX_SHAPES];
#pragma unroll
    for (int s = 0; s < MAX_SIZES; s++)
#pragma unroll
        for (int k = 0; k < MAX_SHAPES; k++)
            acc[s][k] = 0.0f;
    for (int j = 0; j < nC; j++) {
        const float *v = fs + ((size_t)ich[j] * BS_GPU_DETECT_TILE + i) * K;
#pragma unroll
        for (int k = 0; k < MAX_SHAPES; k++) {
            if (k < K) {
                const float xv = v[k];
#pragma unroll
                for (int s = 0; s < MAX_SIZES; s++)
                    if (s < S)
                        acc[s][k] = __fadd_rn(acc[s][k], __fmul_rn(w[s * nC + j], xv));
            }
        }
    }
    float best = 0.0f;
    int q = 0, sign = 1;
#pragma unroll
    for (int s = 0; s < MAX_SIZES; s++)
#pragma unroll
        for (int k = 0; k < MAX_SHAPES; k++)
            if (s < S && k < K && fabsf(acc[s][k]) > best) {
                best = fabsf(acc[s][k]);
                q = s * K + k;
                sign = acc[s][k] < 0.0f ? -1 : 1;
            }
    /* every column's threshold is at least th_lo: most columns stop at this test, before the chunk arithmetic */
    if (best > th_lo && best > column_threshold(col0 + i, own0, nb, stride, th_lo, th_hi)) {
        unsigned long long e = atomicAdd(count, 1ULL);
        if ((long long)e < cap) {
            bs_detect_candidate cd;
            cd.t = col0 + i;
            cd.f = f;
            cd.q = (int16_t)q;
            cd.sign = (int8_t)sign;
            cd.score = best;
            cand[e] = cd;
        }
    }
}

extern "C" void bs_gpu_detector_free(bs_gpu_detector *d)
{
    if (!d)
        return;
    cudaFree(d->x);
    cudaFree(d->fs);
    cudaFree(d->cand);
    cudaFree(d->count);
    cudaFree(d->wtemp);
    cudaFree(d->ichan);
    cudaFree(d->w);
    if (d->stream)
        cudaStreamDestroy(d->stream);
    if (d->bytes)
        bs_mem_untrack(BS_DEV_GPU, TAG, d->bytes);
    free(d);
}

static bs_status detector_setup(bs_gpu_detector *d, const bs_temporal_basis *b, const bs_detect_grid *g)
{
    size_t bytes = bs_gpu_detector_bytes(d->C, d->n_t_max, d->K, d->nt, d->F, d->nC, d->S);
    BS_TRY(bs_mem_track(BS_DEV_GPU, TAG, bytes));
    d->bytes = bytes;
    CU(cudaSetDevice(d->dev));
    CU(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking));
    const size_t C = (size_t)d->C, K = (size_t)d->K, F = (size_t)d->F, nC = (size_t)d->nC, S = (size_t)d->S;
    BS_TRY(bs_cuda_alloc((void **)&d->x, sizeof(float) * C * (size_t)d->n_t_max, "the detection window"));
    BS_TRY(bs_cuda_alloc((void **)&d->fs, sizeof(float) * C * BS_GPU_DETECT_TILE * K, "the filter outputs"));
    BS_TRY(bs_cuda_alloc((void **)&d->cand, sizeof(bs_detect_candidate) * (size_t)BS_GPU_DETECT_CAP,
                         "the detection candidates"));
    BS_TRY(bs_cuda_alloc((void **)&d->count, sizeof(unsigned long long), "the candidate count"));
    BS_TRY(bs_cuda_alloc((void **)&d->wtemp, sizeof(float) * K * (size_t)d->nt, "the detection shapes"));
    BS_TRY(bs_cuda_alloc((void **)&d->ichan, sizeof(int) * F * nC, "the grid's channels"));
    BS_TRY(bs_cuda_alloc((void **)&d->w, sizeof(float) * F * S * nC, "the grid's envelopes"));
    CU(cudaMemcpy(d->wtemp, b->wtemp, sizeof(float) * K * (size_t)d->nt, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(d->ichan, g->ichan, sizeof(int) * F * nC, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(d->w, g->weights, sizeof(float) * F * S * nC, cudaMemcpyHostToDevice));
    return BS_OK;
}

extern "C" bs_status bs_gpu_detector_create(int dev, const bs_detect_params *p, const bs_temporal_basis *b,
                                            const bs_detect_grid *g, int n_chan, int64_t n_t, bs_gpu_detector **out)
{
    *out = NULL;
    if (b->n_shapes > MAX_SHAPES || g->n_sizes > MAX_SIZES || g->n_chans > MAX_CHANS || g->n_pos > 65535 ||
        n_t < 1)
        return bs_error(BS_ERR_DEVICE,
                        "--device cuda: the GPU detector handles up to %d shapes, %d sizes, %d channels per position "
                        "and 65535 positions (here %d, %d, %d, %d)",
                        MAX_SHAPES, MAX_SIZES, MAX_CHANS, b->n_shapes, g->n_sizes, g->n_chans, g->n_pos);
    BS_TRY(bs_gpu_device_info(dev, NULL, 0, NULL));
    bs_gpu_detector *d = (bs_gpu_detector *)calloc(1, sizeof *d);
    if (!d)
        return bs_error(BS_ERR_MEMORY, "GPU detector: out of host memory");
    d->dev = dev;
    d->C = n_chan;
    d->K = b->n_shapes;
    d->nt = b->nt;
    d->nb = b->nt_before;
    d->F = g->n_pos;
    d->nC = g->n_chans;
    d->S = g->n_sizes;
    d->th_hi = p->th_universal;
    d->th_lo = bs_detect_low_tier(p) ? p->th_low : p->th_universal;
    d->low_stride = bs_detect_low_tier(p) ? p->low_stride : 0;
    d->n_t_max = n_t;
    bs_status st = detector_setup(d, b, g);
    if (st != BS_OK) {
        bs_gpu_detector_free(d);
        return st;
    }
    *out = d;
    return BS_OK;
}

extern "C" bs_status bs_gpu_detect_candidates(bs_gpu_detector *d, const float *x, int64_t n_t, int64_t c0, int64_t c1,
                                              bs_detect_candidate **cands, int64_t *n)
{
    *cands = NULL;
    *n = 0;
    if (n_t > d->n_t_max || c0 < 0 || c1 > n_t || c0 > c1)
        return bs_error(BS_ERR_INTERNAL, "GPU detect: columns %lld..%lld of a %lld-sample window (detector for %lld)",
                        (long long)c0, (long long)c1, (long long)n_t, (long long)d->n_t_max);
    /* a failed call frees the list made so far */
#define CUL(call)                                                                                                    \
    do {                                                                                                             \
        cudaError_t e_ = (call);                                                                                     \
        if (e_ != cudaSuccess) {                                                                                     \
            bs_mem_free(list);                                                                                       \
            return bs_cuda_fail(e_, #call);                                                                          \
        }                                                                                                            \
    } while (0)
    bs_detect_candidate *list = NULL;
    int64_t n_list = 0;
    CUL(cudaSetDevice(d->dev));
    CUL(cudaMemcpyAsync(d->x, x, sizeof(float) * (size_t)d->C * (size_t)n_t, cudaMemcpyHostToDevice, d->stream));
    for (int64_t t0 = c0; t0 < c1; t0 += BS_GPU_DETECT_TILE) {
        int n_cols = (int)(c1 - t0 < BS_GPU_DETECT_TILE ? c1 - t0 : BS_GPU_DETECT_TILE);
        unsigned blocks = (unsigned)((n_cols + THREADS - 1) / THREADS);
        size_t shf = sizeof(float) * (size_t)(THREADS + d->nt - 1 + d->K * d->nt);
        filter_kernel<<<dim3(blocks, (unsigned)d->C), THREADS, shf, d->stream>>>(d->x, n_t, t0, n_cols, d->wtemp, d->K,
                                                                                 d->nt, d->nb, d->fs);
        CUL(cudaGetLastError());
        CUL(cudaMemsetAsync(d->count, 0, sizeof(unsigned long long), d->stream));
        score_kernel<<<dim3(blocks, (unsigned)d->F), THREADS, 0, d->stream>>>(
            d->fs, t0, n_cols, d->ichan, d->w, d->K, d->S, d->nC, c0 + d->nb, d->nb, d->low_stride, d->th_lo, d->th_hi,
            d->cand, d->count, (long long)BS_GPU_DETECT_CAP);
        CUL(cudaGetLastError());
        unsigned long long cnt = 0;
        CUL(cudaMemcpyAsync(&cnt, d->count, sizeof cnt, cudaMemcpyDeviceToHost, d->stream));
        CUL(cudaStreamSynchronize(d->stream));
        if ((long long)cnt > (long long)BS_GPU_DETECT_CAP - n_list) { /* the window's list is bounded too */
            bs_mem_free(list);
            *n = -1;
            return BS_OK;
        }
        if (cnt) {
            bs_detect_candidate *nl = (bs_detect_candidate *)bs_mem_realloc(list, "detect/candidates",
                                                                      sizeof *list * (size_t)(n_list + (int64_t)cnt));
            if (!nl) {
                bs_mem_free(list);
                return BS_ERR_MEMORY;
            }
            list = nl;
            CUL(cudaMemcpy(list + n_list, d->cand, sizeof *list * (size_t)cnt, cudaMemcpyDeviceToHost));
            n_list += (int64_t)cnt;
        }
    }
#undef CUL
    *cands = list;
    *n = n_list;
    return BS_OK;
}
