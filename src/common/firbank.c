/*
 * firbank.c - a bank of short FIR filters over many channels, by FFT (see
 * firbank.h for what it computes and why its bits do not depend on the CPU).
 *
 * The forward transform is decimation in frequency (natural order in,
 * bit-reversed order out) and the inverse decimation in time (bit-reversed
 * in, natural out), so the product with the filter spectra (stored in the
 * same bit-reversed order) needs no reordering. A filter w of nt taps is
 * transformed as h[q] = w[nt - 1 - q] (q < nt, 0 past), scaled by 1/n (a
 * power of 2: exact), so that sample m = i + nt - 1 of the circular
 * convolution of a tile z with h is sum_u w[u] z[i + u] for every i <= n - nt.
 */
#include "firbank.h"

#include <string.h>

#include "../mem/mem.h"
#include "simd.h"
#include "transpose8.h"

typedef float v8f __attribute__((vector_size(8 * sizeof(float))));

int bs_firbank_n(int nt)
{
    int n = 256;
    while (n < 4 * (nt - 1))
        n *= 2;
    return n;
}

size_t bs_firbank_bytes(int P, int nt)
{
    size_t n = (size_t)bs_firbank_n(nt);
    /* twiddles, spectra, the spectra's transform; the bins' places */
    return (2 * n + 2 * n * (size_t)P + 16 * n) * sizeof(float) + n * sizeof(int32_t);
}

size_t bs_firbank_scratch_floats(int nt) { return 4 * (size_t)bs_firbank_n(nt) * 8; }

/* cos and sin of a in [0, pi] from their Taylor series in double: fixed
 * operations, so the same bits everywhere (libm's may differ by CPU). The
 * terms fall under 1e-17 of the sum by k = 30. */
static void taylor_sincos(double a, double *c, double *s)
{
    double tc = 1.0, ts = a, sc = 1.0, ss = a, a2 = a * a;
    for (int k = 1; k < 30; k++) {
        tc *= -a2 / ((2.0 * k - 1.0) * (2.0 * k));
        ts *= -a2 / ((2.0 * k) * (2.0 * k + 1.0));
        sc += tc;
        ss += ts;
    }
    *c = sc;
    *s = ss;
}

/* Complex products of vectors by a scalar twiddle (c, s): (re + i im)(c + i s). */
#define CMUL(xr, xi, c, s, outr, outi)                                                                           \
    do {                                                                                                         \
        const v8f cm_r_ = (xr), cm_i_ = (xi);                                                                    \
        (outr) = cm_r_ * (c) - cm_i_ * (s);                                                                      \
        (outi) = cm_r_ * (s) + cm_i_ * (c);                                                                      \
    } while (0)

/* In place, natural order in, bit-reversed out: X_k = sum_j x_j e^{-2 pi i jk/n}.
 * Radix-4 stages (each two radix-2 stages with the factor w^{len/4} = -i
 * exact), then a radix-2 one when log2 n is odd. tw: cos then -sin of
 * 2 pi j / n, j < n. */
BS_VECTORIZED static void fft_dif(v8f *restrict re, v8f *restrict im, int n, const float *restrict tw)
{
    const float *cs = tw, *sn = tw + n;
    int len = n;
    for (; len >= 8; len >>= 2) {
        const int q = len / 4, step = n / len;
        for (int j0 = 0; j0 < n; j0 += len)
            for (int k = 0; k < q; k++) {
                const int i0 = j0 + k, i1 = i0 + q, i2 = i1 + q, i3 = i2 + q;
                const v8f t0r = re[i0] + re[i2], t0i = im[i0] + im[i2];
                const v8f t1r = re[i0] - re[i2], t1i = im[i0] - im[i2];
                const v8f t2r = re[i1] + re[i3], t2i = im[i1] + im[i3];
                const v8f t3r = im[i1] - im[i3], t3i = re[i3] - re[i1]; /* -i (a1 - a3) */
                re[i0] = t0r + t2r;
                im[i0] = t0i + t2i;
                CMUL(t0r - t2r, t0i - t2i, cs[2 * k * step], sn[2 * k * step], re[i1], im[i1]);
                CMUL(t1r + t3r, t1i + t3i, cs[k * step], sn[k * step], re[i2], im[i2]);
                CMUL(t1r - t3r, t1i - t3i, cs[3 * k * step], sn[3 * k * step], re[i3], im[i3]);
            }
    }
    if (len == 4) /* the last radix-4 stage: k = 0 only, every twiddle 1 */
        for (int i0 = 0; i0 < n; i0 += 4) {
            const v8f t0r = re[i0] + re[i0 + 2], t0i = im[i0] + im[i0 + 2];
            const v8f t1r = re[i0] - re[i0 + 2], t1i = im[i0] - im[i0 + 2];
            const v8f t2r = re[i0 + 1] + re[i0 + 3], t2i = im[i0 + 1] + im[i0 + 3];
            const v8f t3r = im[i0 + 1] - im[i0 + 3], t3i = re[i0 + 3] - re[i0 + 1];
            re[i0] = t0r + t2r;
            im[i0] = t0i + t2i;
            re[i0 + 1] = t0r - t2r;
            im[i0 + 1] = t0i - t2i;
            re[i0 + 2] = t1r + t3r;
            im[i0 + 2] = t1i + t3i;
            re[i0 + 3] = t1r - t3r;
            im[i0 + 3] = t1i - t3i;
        }
    else if (len == 2)
        for (int j0 = 0; j0 < n; j0 += 2) {
            const v8f ar = re[j0], ai = im[j0], br = re[j0 + 1], bi = im[j0 + 1];
            re[j0] = ar + br;
            im[j0] = ai + bi;
            re[j0 + 1] = ar - br;
            im[j0 + 1] = ai - bi;
        }
}

/* The radix-4 stage of the inverse at length len (len / 4 >= 1), in place on
 * (re, im); with y, the last stage (len = n), whose outputs m >= m0 go to
 * y[(m - m0) * 16 + lane] (real parts lanes 0-7, imaginary 8-15) instead.
 * Inlined with constant last. */
static inline __attribute__((always_inline)) void dit_stage(v8f *restrict re, v8f *restrict im, int n, int len,
                                                            const float *restrict tw, int last, int m0,
                                                            float *restrict y)
{
    const float *cs = tw, *sn = tw + n;
    const int q = len / 4, step = n / len;
    for (int j0 = 0; j0 < n; j0 += len)
        for (int k = 0; k < q; k++) {
            const int i0 = j0 + k, i1 = i0 + q, i2 = i1 + q, i3 = i2 + q;
            v8f v1r, v1i, v2r, v2i, v3r, v3i; /* times conj(w^{2k}), conj(w^k), conj(w^{3k}) */
            CMUL(re[i1], im[i1], cs[2 * k * step], -sn[2 * k * step], v1r, v1i);
            CMUL(re[i2], im[i2], cs[k * step], -sn[k * step], v2r, v2i);
            CMUL(re[i3], im[i3], cs[3 * k * step], -sn[3 * k * step], v3r, v3i);
            const v8f s0r = re[i0] + v1r, s0i = im[i0] + v1i, d0r = re[i0] - v1r, d0i = im[i0] - v1i;
            const v8f s1r = v2r + v3r, s1i = v2i + v3i;
            const v8f d1r = v3i - v2i, d1i = v2r - v3r; /* i (v2 - v3) */
            const v8f o0r = s0r + s1r, o0i = s0i + s1i, o2r = s0r - s1r, o2i = s0i - s1i;
            const v8f o1r = d0r + d1r, o1i = d0i + d1i, o3r = d0r - d1r, o3i = d0i - d1i;
            if (!last) {
                re[i0] = o0r, im[i0] = o0i, re[i1] = o1r, im[i1] = o1i;
                re[i2] = o2r, im[i2] = o2i, re[i3] = o3r, im[i3] = o3i;
                continue;
            }
#define FB_OUT(m, r, i)                                                                                          \
    if ((m) >= m0) {                                                                                             \
        memcpy(y + (size_t)((m) - m0) * BS_FIRBANK_LANES, &(r), sizeof(v8f));                                    \
        memcpy(y + (size_t)((m) - m0) * BS_FIRBANK_LANES + 8, &(i), sizeof(v8f));                                \
    }
            FB_OUT(i0, o0r, o0i)
            FB_OUT(i1, o1r, o1i)
            FB_OUT(i2, o2r, o2i)
            FB_OUT(i3, o3r, o3i)
#undef FB_OUT
        }
}

/* The inverse transform's first stage, into (re, im): on the product of the
 * tile's spectrum (zr, zi) with a filter's (hr, hi) when prod, else on (re,
 * im) as they are (bs_firbank_inverse). Returns the next stage's length.
 * Inlined with constant prod. */
static inline __attribute__((always_inline)) int inverse_first(const float *restrict hr, const float *restrict hi,
                                                               const v8f *restrict zr, const v8f *restrict zi,
                                                               v8f *restrict re, v8f *restrict im, int n, int prod)
{
#define FB_PROD(m, r, i)                                                                                         \
    const v8f r = prod ? zr[m] * hr[m] - zi[m] * hi[m] : re[m], i = prod ? zr[m] * hi[m] + zi[m] * hr[m] : im[m]
    if (__builtin_ctz((unsigned)n) & 1) { /* a radix-2 stage first */
        for (int j0 = 0; j0 < n; j0 += 2) {
            FB_PROD(j0, ar, ai);
            FB_PROD(j0 + 1, br, bi);
            re[j0] = ar + br, im[j0] = ai + bi;
            re[j0 + 1] = ar - br, im[j0 + 1] = ai - bi;
        }
        return 8;
    }
    for (int i0 = 0; i0 < n; i0 += 4) { /* a radix-4 stage of length 4: every twiddle 1 */
        FB_PROD(i0, u0r, u0i);
        FB_PROD(i0 + 1, v1r, v1i);
        FB_PROD(i0 + 2, v2r, v2i);
        FB_PROD(i0 + 3, v3r, v3i);
        const v8f s0r = u0r + v1r, s0i = u0i + v1i, d0r = u0r - v1r, d0i = u0i - v1i;
        const v8f s1r = v2r + v3r, s1i = v2i + v3i, d1r = v3i - v2i, d1i = v2r - v3r;
        re[i0] = s0r + s1r, im[i0] = s0i + s1i;
        re[i0 + 2] = s0r - s1r, im[i0 + 2] = s0i - s1i;
        re[i0 + 1] = d0r + d1r, im[i0 + 1] = d0i + d1i;
        re[i0 + 3] = d0r - d1r, im[i0 + 3] = d0i - d1i;
    }
    return 16;
#undef FB_PROD
}

/* Filter p's outputs of the tile whose spectrum (fft_dif's order) is (zr,
 * zi), into y's rows p: the product with the filter's spectrum, then the
 * inverse transform (bit-reversed in, natural out: fft_dif's stages
 * mirrored, with conjugate twiddles), its first stage on the product as it
 * is formed and its last writing the valid samples (m >= nt - 1) to y. */
BS_VECTORIZED static void filter_out(const bs_firbank *fb, int p, const v8f *restrict zr, const v8f *restrict zi,
                                     v8f *restrict re, v8f *restrict im, float *restrict y)
{
    const int n = fb->n;
    const float *hr = fb->h + (size_t)p * 2 * n, *hi = hr + n;
    int len = inverse_first(hr, hi, zr, zi, re, im, n, 1);
    for (; len < n; len <<= 2)
        dit_stage(re, im, n, len, fb->tw, 0, 0, NULL);
    dit_stage(re, im, n, n, fb->tw, 1, fb->nt - 1, y + (size_t)p * fb->T * BS_FIRBANK_LANES);
}

/* bs_firbank_inverse's transform (cloned per vector ISA: the callers in
 * other files call the plain function). */
BS_VECTORIZED static void inverse_of(const bs_firbank *fb, v8f *restrict re, v8f *restrict im, float *restrict y)
{
    const int n = fb->n;
    int len = inverse_first(NULL, NULL, NULL, NULL, re, im, n, 0);
    for (; len < n; len <<= 2)
        dit_stage(re, im, n, len, fb->tw, 0, 0, NULL);
    dit_stage(re, im, n, n, fb->tw, 1, fb->nt - 1, y);
}

void bs_firbank_inverse(const bs_firbank *fb, float *spec, float *y)
{
    v8f *re = (v8f *)spec;
    inverse_of(fb, re, re + fb->n, y);
}

bs_status bs_firbank_init(bs_firbank *fb, const char *tag, const float *w, int P, int nt)
{
    memset(fb, 0, sizeof *fb);
    if (P < 1 || nt < 1)
        return bs_error(BS_ERR_INTERNAL, "firbank: %d filters of %d taps", P, nt);
    const int n = bs_firbank_n(nt);
    fb->P = P;
    fb->nt = nt;
    fb->n = n;
    fb->T = n - nt + 1;
    fb->tw = bs_mem_alloc(tag, bs_firbank_bytes(P, nt));
    if (!fb->tw)
        return BS_ERR_MEMORY;
    fb->h = fb->tw + 2 * n;
    fb->bin = (int32_t *)(fb->h + 2 * (size_t)n * P + 16 * (size_t)n);
    for (int k = 0; k < n; k++) {
        int r = 0;
        for (int m = n >> 1, i = k; m > 0; m >>= 1, i >>= 1)
            r = (r << 1) | (i & 1);
        fb->bin[k] = r;
    }
    const double pi = 3.14159265358979323846;
    for (int j = 0; j <= n / 2; j++) { /* the second half by symmetry: cos(2 pi - a) = cos a, sin(2 pi - a) = -sin a */
        double c, s;
        taylor_sincos(2.0 * pi * j / n, &c, &s);
        fb->tw[j] = (float)c;
        fb->tw[n + j] = (float)-s;
        if (j > 0 && j < n / 2) {
            fb->tw[n - j] = (float)c;
            fb->tw[2 * n - j] = (float)s;
        }
    }
    v8f *re = (v8f *)(fb->h + 2 * (size_t)n * P), *im = re + n; /* 32-byte aligned: an offset of 8 n floats */
    for (int p = 0; p < P; p++) {
        for (int q = 0; q < n; q++) {
            const float v = q < nt ? w[(size_t)p * nt + (nt - 1 - q)] / (float)n : 0.0f;
            re[q] = (v8f){v, v, v, v, v, v, v, v};
            im[q] = (v8f){0};
        }
        fft_dif(re, im, n, fb->tw);
        float *hr = fb->h + (size_t)p * 2 * n, *hi = hr + n;
        for (int q = 0; q < n; q++) {
            hr[q] = re[q][0];
            hi[q] = im[q][0];
        }
    }
    return BS_OK;
}

void bs_firbank_free(bs_firbank *fb)
{
    bs_mem_free(fb->tw);
    memset(fb, 0, sizeof *fb);
}

#ifdef BS_HAVE_TRANSPOSE8
/* z[t - first] = (x_0[t], ..., x_7[t]) for t from a while whole steps of 8
 * fit before b, by 8 x 8 transposes: returns where it stopped. */
__attribute__((target("avx2"))) static int64_t pack8_avx2(const float *x, size_t ldx, int64_t first, int64_t a,
                                                          int64_t b, v8f *z)
{
    int64_t t = a;
    for (; t + 8 <= b; t += 8) {
        __m256 r[8];
        for (int l = 0; l < 8; l++)
            r[l] = _mm256_loadu_ps(x + (size_t)l * ldx + t);
        bs_transpose8(r);
        for (int q = 0; q < 8; q++)
            _mm256_storeu_ps((float *)(z + (t - first) + q), r[q]);
    }
    return t;
}
#endif

void bs_firbank_forward(const bs_firbank *fb, const float *x, size_t ldx, int nch, int64_t first, int64_t n_x,
                        float *scratch)
{
    const int n = fb->n;
    v8f *zr = (v8f *)scratch, *zi = zr + n;
    memset(zr, 0, 2 * (size_t)n * sizeof(v8f));
    /* the tile's samples [first, first + n) of each channel, 0 outside [0, n_x) */
    const int64_t a = first < 0 ? 0 : first, b = first + n < n_x ? first + n : n_x;
    for (int g = 0; g < 2; g++) {
        const int l0 = 8 * g, nl = nch - l0 < 8 ? nch - l0 : 8;
        v8f *z = g ? zi : zr;
        int64_t t = a;
#ifdef BS_HAVE_TRANSPOSE8
        if (nl == 8 && __builtin_cpu_supports("avx2"))
            t = pack8_avx2(x + (size_t)l0 * ldx, ldx, first, a, b, z);
#endif
        for (int l = 0; l < nl; l++) {
            const float *xl = x + (size_t)(l0 + l) * ldx;
            float *dst = (float *)z + l;
            for (int64_t u = t; u < b; u++)
                dst[(size_t)(u - first) * 8] = xl[u];
        }
    }
    fft_dif(zr, zi, n, fb->tw);
}

void bs_firbank_tile(const bs_firbank *fb, const float *x, size_t ldx, int nch, int64_t first, int64_t n_x, float *y,
                     float *scratch)
{
    const int n = fb->n;
    v8f *zr = (v8f *)scratch, *zi = zr + n, *tr = zi + n, *ti = tr + n;
    bs_firbank_forward(fb, x, ldx, nch, first, n_x, scratch);
    for (int p = 0; p < fb->P; p++)
        filter_out(fb, p, zr, zi, tr, ti, y);
}
