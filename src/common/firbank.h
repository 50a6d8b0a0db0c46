/*
 * firbank.h - a bank of short FIR filters over many channels, by FFT.
 *
 * Detection filters every channel with its prototype shapes and matching
 * projects every channel on its temporal basis: P filters of nt taps (6 of
 * 61 by default) over every channel and sample, the largest arithmetic of a
 * sort when done directly (P * nt multiply-adds per channel and sample).
 * This module computes the same outputs,
 *
 *     y[p][i] = sum over u < nt of w[p][u] * x[first + i + u],
 *
 * by circular convolution over tiles of n samples (n a power of 2, 256 for
 * nt = 61): each tile gives T = n - nt + 1 outputs. Sixteen channels go
 * through one complex FFT of 8-lane vectors, channels 0-7 as its real part
 * and 8-15 as its imaginary part: the filters are real, so the inverse
 * transform of H_p Z is y_p of the first eight plus i times y_p of the
 * other eight. Per channel and output this is one forward transform and P
 * inverse ones of a tile shared by 16 channels, under a fourth of the
 * arithmetic of the direct sums at nt = 61 and 6 filters. The two channels of a lane
 * share one complex signal, so each output carries the rounding of its
 * partner's (about 1e-7 of the partner's values): far below the noise
 * unless the partner holds an artifact a million times larger.
 *
 * Bits. Every operation is a float multiply, add or subtract in a fixed
 * order, lane by lane (the build passes -ffp-contract=off), so every CPU and
 * every vector width gives the same bits; the twiddle factors come from
 * double-precision Taylor series (no libm). An output's value depends on the
 * whole tile it was computed in (the rounding of the transform mixes every
 * sample of the tile), so callers compute a column always in the same tile:
 * tiles on a fixed grid of their window (detection: from its chunk's first
 * candidate column; matching: from its score tile's first sample). The
 * rounding error is a few float ulps of the tile's largest values, far
 * below the noise.
 */
#ifndef BS_FIRBANK_H
#define BS_FIRBANK_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define BS_FIRBANK_LANES 16 /* channels per transform */

typedef struct {
    int P;       /* filters */
    int nt;      /* taps per filter */
    int n;       /* transform length, samples (power of 2) */
    int T;       /* outputs per tile: n - nt + 1 */
    float *tw;   /* twiddles: cos then -sin of 2 pi j / n, j < n (2 x n floats) */
    float *h;    /* filter spectra / n, in the forward transform's (bit-reversed) order: P x (re[n], im[n]);
                    then room for their transform (2 n vectors of 8) */
    int32_t *bin; /* n: where the transforms hold bin k, the bit reversal of k in log2 n bits */
} bs_firbank;

/* Spectra of the P filters w[p * nt + u]; the bank owns its tables,
 * bs_firbank_bytes(P, nt) under `tag`. */
bs_status bs_firbank_init(bs_firbank *fb, const char *tag, const float *w, int P, int nt);
void bs_firbank_free(bs_firbank *fb);

/* Bytes of the tables of a bank of P filters of nt taps (for the plans). */
size_t bs_firbank_bytes(int P, int nt);
/* Floats of bs_firbank_tile's scratch (a caller's, per thread). */
size_t bs_firbank_scratch_floats(int nt);
/* Transform length for nt taps. */
int bs_firbank_n(int nt);

/*
 * One tile of up to 16 channels (rows x + l * ldx, l < nch): for i < T,
 *     y[(p * T + i) * 16 + l] = sum over u < nt of w[p][u] * x_l[first + i + u],
 * samples outside [0, n_x) counting as 0. Lanes l >= nch hold no channel:
 * only the rounding of their partner's outputs (lane l - 8 or l + 8 shares
 * the complex signal), to be ignored. scratch: bs_firbank_scratch_floats(nt)
 * floats, 32-byte aligned.
 */
void bs_firbank_tile(const bs_firbank *fb, const float *x, size_t ldx, int nch, int64_t first, int64_t n_x, float *y,
                     float *scratch);

/*
 * The two halves of bs_firbank_tile, for callers that combine spectra
 * themselves (matching: each template's channels weighted in frequency,
 * src/match/templates.c).
 *
 * bs_firbank_forward: the tile's transform, into scratch: n vectors of 8
 * real parts, then n of imaginary parts, of Z = x_0..7 + i x_8..15 (lane l
 * of the vectors is the pair of channels l and l + 8), bin k at index
 * bit-reverse(k) (log2 n bits). Its bin k is Z_k = sum_j z_j e^{-2 pi i jk/n}.
 *
 * bs_firbank_inverse: spec (n vectors of real parts, then n of imaginary
 * parts, bin k at index bit-reverse(k), as the forward leaves them) is
 * transformed back in place, unscaled (z_j = sum_k Z_k e^{2 pi i jk/n}:
 * spectra scaled by 1/n give the signal back), and its samples m >= nt - 1
 * written to y[(m - nt + 1) * 16 + l], lanes 0-7 the real parts and 8-15
 * the imaginary ones. bs_firbank_tile is the forward, then for each filter
 * the product with its spectrum (h: scaled by 1/n, the filter reversed)
 * and this inverse.
 */
void bs_firbank_forward(const bs_firbank *fb, const float *x, size_t ldx, int nch, int64_t first, int64_t n_x,
                        float *scratch);
void bs_firbank_inverse(const bs_firbank *fb, float *spec, float *y);

#endif
