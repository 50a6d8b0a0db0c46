/*
 * car.c - per-channel mean removal and the common median reference.
 *
 * Mean removal: each channel's mean over the window is summed in double, in
 * sample order, and subtracted as a float (parallel over channels).
 *
 * Median reference: the window is cut into tiles of CAR_TILE samples; a
 * thread copies one tile transposed into its scratch ([sample][channel], so
 * each sample's n_chan values are contiguous and the copy reads contiguous
 * runs of every row), finds each sample's median with an in-place quickselect
 * (Hoare partition, median-of-three pivot: expected O(n_chan), no allocation,
 * no randomness), then subtracts the medians row by row. For an even count
 * the median is numpy's: the selection puts the upper middle value at n/2
 * with everything before it no larger, so the lower middle value is the
 * maximum of the first n/2 entries, and the median is (lo + hi) / 2 in
 * float32. Tiles are independent and the arithmetic per sample does not
 * depend on which thread does it, so the result is identical for any thread
 * count.
 */
#include <math.h>
#include <string.h>

#include "pp_internal.h"
#include "preprocess.h"

#define CAR_TILE 64 /* samples per tile */

static int64_t car_tile(int64_t n_t) { return n_t < CAR_TILE ? (n_t > 0 ? n_t : 1) : CAR_TILE; }

size_t bs_car_scratch_bytes(int n_chan, int64_t n_t, int n_threads)
{
    if (n_chan < 1 || n_t < 1)
        return 0;
    if (n_threads < 1)
        n_threads = 1;
    return (size_t)n_threads * (size_t)n_chan * (size_t)car_tile(n_t) * sizeof(float);
}

static inline void swapf(float *a, float *b)
{
    float t = *a;
    *a = *b;
    *b = t;
}

/* Reorder a[0..n) so that a[k] holds the k-th smallest value and every
 * a[i], i < k, is <= a[k]; return a[k]. */
static float select_kth(float *a, int n, int k)
{
    int lo = 0, hi = n - 1;
    while (hi > lo) {
        int mid = lo + (hi - lo) / 2;
        if (a[mid] < a[lo])
            swapf(&a[mid], &a[lo]);
        if (a[hi] < a[lo])
            swapf(&a[hi], &a[lo]);
        if (a[hi] < a[mid])
            swapf(&a[hi], &a[mid]);
        float pivot = a[mid];
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot)
                i++;
            while (a[j] > pivot)
                j--;
            if (i <= j) {
                swapf(&a[i], &a[j]);
                i++;
                j--;
            }
        }
        /* now a[lo..j] <= pivot, a[j+1..i-1] == pivot, a[i..hi] >= pivot */
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break;
    }
    return a[k];
}

static float median_inplace(float *a, int n)
{
    if (n & 1)
        return select_kth(a, n, n / 2);
    float hi = select_kth(a, n, n / 2);
    float lo = a[0];
    for (int i = 1; i < n / 2; i++)
        if (a[i] > lo)
            lo = a[i];
    return (lo + hi) / 2.0f;
}

bs_status bs_car(float *x, int n_chan, int64_t n_t, int remove_mean, int car, void *scratch, size_t scratch_bytes)
{
    if (n_chan < 1 || n_t < 1)
        return bs_error(BS_ERR_INPUT, "common reference: window of %d channels x %lld samples: expected at least 1 x 1",
                        n_chan, (long long)n_t);
    if (!remove_mean && !car)
        return BS_OK;
    int64_t tile = car_tile(n_t);
    pp_scratch s;
    BS_TRY(pp_scratch_get("preprocess/car", car ? (size_t)n_chan * (size_t)tile * sizeof(float) : 0, scratch,
                          scratch_bytes, &s));
    int nth = s.n_threads;

    if (remove_mean) {
#pragma omp parallel for num_threads(nth) schedule(static)
        for (int c = 0; c < n_chan; c++) {
            float *row = x + (size_t)c * (size_t)n_t;
            double sum = 0.0;
            for (int64_t t = 0; t < n_t; t++)
                sum += row[t];
            float mean = (float)(sum / (double)n_t);
            for (int64_t t = 0; t < n_t; t++)
                row[t] -= mean;
        }
    }

    if (car) {
        int64_t n_tiles = (n_t + tile - 1) / tile;
#pragma omp parallel num_threads(nth)
        {
            float *buf = (float *)(s.buf + (size_t)omp_get_thread_num() * (size_t)n_chan * (size_t)tile * sizeof(float));
            float med[CAR_TILE];
#pragma omp for schedule(static)
            for (int64_t b = 0; b < n_tiles; b++) {
                int64_t t0 = b * tile;
                int len = (int)(t0 + tile <= n_t ? tile : n_t - t0);
                for (int c = 0; c < n_chan; c++) {
                    const float *src = x + (size_t)c * (size_t)n_t + t0;
                    for (int i = 0; i < len; i++)
                        buf[(size_t)i * (size_t)n_chan + (size_t)c] = src[i];
                }
                for (int i = 0; i < len; i++)
                    med[i] = median_inplace(buf + (size_t)i * (size_t)n_chan, n_chan);
                for (int c = 0; c < n_chan; c++) {
                    float *dst = x + (size_t)c * (size_t)n_t + t0;
                    for (int i = 0; i < len; i++)
                        dst[i] -= med[i];
                }
            }
        }
    }
    pp_scratch_release(&s);
    return BS_OK;
}
