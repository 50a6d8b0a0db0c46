/*
 * gpu_scores.cu - the matcher's scores on a CUDA GPU (gpu.h), and the
 * device queries.
 *
 * Per window: X (n_chan x n_t, host, row stride ldx) is copied to the device
 * (one 2-D copy), projected on the temporal basis, scored, and the K x n_t
 * scores copied back, all on the scorer's stream, then the stream is
 * synchronised (the caller peels on the CPU right after).
 *
 * Kernels (one value per thread, fixed summation order):
 *   project: block = 256 consecutive samples of one channel; the tile of
 *     X with nt - 1 samples of context and the basis sit in shared memory;
 *     proj[(c P + p) n_t + t] = sum_s basis[p, s] X[c, t + s - nt_before].
 *   score: block = 256 consecutive samples of one template (templates on
 *     the grid's x axis, which has no 65,535 limit); its support and
 *     weights sit in shared memory; B[k n_t + t] = sum_i sum_p U[k, i, p]
 *     proj[(S_k[i] P + p) n_t + t] (reads of proj are coalesced over t and
 *     shared through L2 by the templates of nearby supports).
 * Every CUDA call is checked; an error becomes BS_ERR_DEVICE naming the call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda_util.h"

#define THREADS 256
#define GPU_TAG "match/gpu"

struct bs_gpu_scorer {
    int dev, C, nt, nb, P, K, ns;
    int64_t n_t_max;  /* samples of the largest window */
    size_t bytes;     /* device bytes tracked */
    float *basis;     /* P x nt */
    int32_t *sup;     /* K x ns */
    float *U;         /* K x ns x P */
    float *X;         /* C x n_t_max */
    float *proj;      /* C x P x n_t (row stride n_t of the current window) */
    float *B;         /* K x n_t */
    cudaStream_t stream;
};

extern "C" int bs_gpu_compiled(void) { return 1; }

extern "C" bs_status bs_gpu_device_info(int dev, char *name, size_t name_len, size_t *total_bytes)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return bs_error(BS_ERR_DEVICE, "--device cuda: no CUDA device is usable here (%s)",
                        e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
    if (dev < 0 || dev >= n)
        return bs_error(BS_ERR_DEVICE, "--device cuda:%d: this machine has %d CUDA device%s (cuda:0..cuda:%d)", dev,
                        n, n == 1 ? "" : "s", n - 1);
    cudaDeviceProp pr;
    CU(cudaGetDeviceProperties(&pr, dev));
    if (name && name_len)
        snprintf(name, name_len, "%s", pr.name);
    if (total_bytes)
        *total_bytes = pr.totalGlobalMem;
    return BS_OK;
}

__global__ void project_kernel(const float *__restrict__ X, int64_t n_t, const float *__restrict__ basis, int P,
                               int nt, int nb, float *__restrict__ proj)
{
    extern __shared__ float sh[];
    float *xs = sh;                   /* THREADS + nt - 1 */
    float *bs = sh + THREADS + nt - 1; /* P x nt */
    const int c = blockIdx.y;
    const int64_t t0 = (int64_t)blockIdx.x * THREADS;
    const float *x = X + (size_t)c * n_t;
    for (int j = threadIdx.x; j < THREADS + nt - 1; j += THREADS) {
        int64_t s = t0 + j - nb;
        xs[j] = (s >= 0 && s < n_t) ? x[s] : 0.0f;
    }
    for (int j = threadIdx.x; j < P * nt; j += THREADS)
        bs[j] = basis[j];
    __syncthreads();
    const int64_t t = t0 + threadIdx.x;
    if (t >= n_t)
        return;
    for (int p = 0; p < P; p++) {
        const float *w = bs + p * nt;
        float acc = 0.0f;
        for (int s = 0; s < nt; s++)
            acc = __fmaf_rn(w[s], xs[threadIdx.x + s], acc); /* the CPU's projection (BS_VFMA) */
        proj[((size_t)c * P + p) * n_t + t] = acc;
    }
}

__global__ void score_kernel(const float *__restrict__ proj, int64_t n_t, const int32_t *__restrict__ sup,
                             const float *__restrict__ U, int ns, int P, float *__restrict__ B)
{
    extern __shared__ float sh[];
    float *us = sh;                       /* ns x P */
    int *ss = (int *)(sh + ns * P);       /* ns */
    const int k = blockIdx.x;
    for (int j = threadIdx.x; j < ns * P; j += THREADS)
        us[j] = U[(size_t)k * ns * P + j];
    for (int j = threadIdx.x; j < ns; j += THREADS)
        ss[j] = sup[(size_t)k * ns + j];
    __syncthreads();
    const int64_t t = (int64_t)blockIdx.y * THREADS + threadIdx.x;
    if (t >= n_t)
        return;
    float acc = 0.0f;
    for (int i = 0; i < ns; i++) {
        const float *row = proj + (size_t)ss[i] * P * n_t + t;
        for (int p = 0; p < P; p++)
            acc = __fadd_rn(acc, __fmul_rn(us[i * P + p], row[(size_t)p * n_t]));
    }
    B[(size_t)k * n_t + t] = acc;
}

extern "C" void bs_gpu_scorer_free(bs_gpu_scorer *g)
{
    if (!g)
        return;
    cudaFree(g->basis);
    cudaFree(g->sup);
    cudaFree(g->U);
    cudaFree(g->X);
    cudaFree(g->proj);
    cudaFree(g->B);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    if (g->bytes)
        bs_mem_untrack(BS_DEV_GPU, GPU_TAG, g->bytes);
    free(g);
}

static bs_status scorer_setup(bs_gpu_scorer *g, const bs_match_templates *t)
{
    const size_t K = (size_t)t->K, ns = (size_t)t->n_sup, P = (size_t)t->n_pc, C = (size_t)t->n_chan;
    const size_t n = (size_t)g->n_t_max;
    /* the accountant first: a scorer over --gpu-mem is refused before cudaMalloc */
    size_t bytes = bs_gpu_scorer_bytes(t->n_chan, t->nt, t->n_pc, t->K, t->n_sup, g->n_t_max);
    BS_TRY(bs_mem_track(BS_DEV_GPU, GPU_TAG, bytes));
    g->bytes = bytes;
    CU(cudaSetDevice(g->dev));
    CU(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
    BS_TRY(bs_cuda_alloc((void **)&g->basis, sizeof(float) * P * (size_t)t->nt, "the temporal basis"));
    BS_TRY(bs_cuda_alloc((void **)&g->sup, sizeof(int32_t) * K * ns, "the template supports"));
    BS_TRY(bs_cuda_alloc((void **)&g->U, sizeof(float) * K * ns * P, "the template weights"));
    BS_TRY(bs_cuda_alloc((void **)&g->X, sizeof(float) * C * n, "the peeling window"));
    BS_TRY(bs_cuda_alloc((void **)&g->proj, sizeof(float) * C * P * n, "the window's projection"));
    BS_TRY(bs_cuda_alloc((void **)&g->B, sizeof(float) * K * n, "the scores (K x window)"));
    CU(cudaMemcpy(g->basis, t->basis, sizeof(float) * P * (size_t)t->nt, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(g->sup, t->support, sizeof(int32_t) * K * ns, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(g->U, t->U, sizeof(float) * K * ns * P, cudaMemcpyHostToDevice));
    return BS_OK;
}

extern "C" bs_status bs_gpu_scorer_create(int dev, const bs_match_templates *t, int64_t n_t, bs_gpu_scorer **out)
{
    *out = NULL;
    if (n_t < 1 || n_t > (int64_t)65535 * THREADS || t->K < 1)
        return bs_error(BS_ERR_INTERNAL, "GPU scorer: expected 1 <= n_t <= %lld and K >= 1, got %lld and %d",
                        (long long)65535 * THREADS, (long long)n_t, t->K);
    BS_TRY(bs_gpu_device_info(dev, NULL, 0, NULL));
    bs_gpu_scorer *g = (bs_gpu_scorer *)calloc(1, sizeof *g);
    if (!g)
        return bs_error(BS_ERR_MEMORY, "GPU scorer: out of host memory");
    g->dev = dev;
    g->C = t->n_chan;
    g->nt = t->nt;
    g->nb = t->nt_before;
    g->P = t->n_pc;
    g->K = t->K;
    g->ns = t->n_sup;
    g->n_t_max = n_t;
    bs_status st = scorer_setup(g, t);
    if (st != BS_OK) {
        bs_gpu_scorer_free(g);
        return st;
    }
    *out = g;
    return BS_OK;
}

extern "C" bs_status bs_gpu_scores(bs_gpu_scorer *g, const float *X, size_t ldx, int64_t n_t, float *B)
{
    if (n_t < 1 || n_t > g->n_t_max || (int64_t)ldx < n_t)
        return bs_error(BS_ERR_INTERNAL, "GPU scores: window of %lld samples (stride %zu), scorer sized for %lld",
                        (long long)n_t, ldx, (long long)g->n_t_max);
    CU(cudaSetDevice(g->dev));
    CU(cudaMemcpy2DAsync(g->X, sizeof(float) * (size_t)n_t, X, sizeof(float) * ldx, sizeof(float) * (size_t)n_t,
                         (size_t)g->C, cudaMemcpyHostToDevice, g->stream));
    dim3 gp((unsigned)((n_t + THREADS - 1) / THREADS), (unsigned)g->C);
    size_t shp = sizeof(float) * (size_t)(THREADS + g->nt - 1 + g->P * g->nt);
    project_kernel<<<gp, THREADS, shp, g->stream>>>(g->X, n_t, g->basis, g->P, g->nt, g->nb, g->proj);
    CU(cudaGetLastError());
    dim3 gs((unsigned)g->K, (unsigned)((n_t + THREADS - 1) / THREADS));
    size_t shs = sizeof(float) * (size_t)g->ns * (size_t)g->P + sizeof(int) * (size_t)g->ns;
    score_kernel<<<gs, THREADS, shs, g->stream>>>(g->proj, n_t, g->sup, g->U, g->ns, g->P, g->B);
    CU(cudaGetLastError());
    CU(cudaMemcpyAsync(B, g->B, sizeof(float) * (size_t)g->K * (size_t)n_t, cudaMemcpyDeviceToHost, g->stream));
    CU(cudaStreamSynchronize(g->stream));
    return BS_OK;
}
