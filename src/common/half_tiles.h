/*
 * half_tiles.h - float16 <-> float32 conversions with a transpose, between
 * time-major rows of float16 samples (one row per sample, channel c at
 * column c) and channel-major float rows (one row per channel). They are how
 * the preprocessed recording is written (src/preprocess/stage_preprocess.c)
 * and read back (src/io/batch.c); and the same transpose from int16 rows
 * (a raw recording's) to scaled float rows.
 *
 * On x86-64 CPUs with F16C (and AVX2) 8 samples x 8 channels are converted
 * at once by the hardware and transposed in registers; elsewhere, and for
 * the edges, one value at a time by half.h. Both give the same bits:
 * half -> float is exact, and float -> half rounds to nearest even in both,
 * the few values the hardware would turn into an infinity or another NaN
 * (magnitudes of 65520 or more, NaN) being redone by bs_float_to_half.
 */
#ifndef BS_HALF_TILES_H
#define BS_HALF_TILES_H

#include <stddef.h>
#include <stdint.h>

/* out[c * ldo + k] = the half at raw + k * row_bytes + 2 c, for rows k in [k0, k1) and channels c < n_chan. */
void bs_half_rows_to_floats(const unsigned char *raw, size_t row_bytes, int n_chan, int64_t k0, int64_t k1,
                            float *out, size_t ldo);

/* out[k * n_chan + c] = bs_float_to_half(x[c * ldx + k]) for rows k in [k0, k1) and channels c < n_chan. */
void bs_floats_to_half_rows(const float *x, size_t ldx, int n_chan, int64_t k0, int64_t k1, uint16_t *out);

/* The same for rows [0, n), spread over the OpenMP threads in tiles of 64 rows (every tile's bits as above,
 * on any thread): a batch's own samples as the preprocessed recording's rows. */
void bs_floats_to_half_rows_par(const float *x, size_t ldx, int n_chan, int64_t n, uint16_t *out);

/* out[c * ldo + k] = (float)v * gain[c], v the int16 at raw + k * row_bytes + 2 col[c], for rows k in [k0, k1)
 * and channels c < n_chan: a raw recording's samples in µV (batch.c). Equal to (float)((double)v * gain[c])
 * (that product is exact in double), 8 x 8 at once where eight channels' columns follow each other. */
void bs_i16_rows_to_floats(const unsigned char *raw, size_t row_bytes, const int *col, const float *gain, int n_chan,
                           int64_t k0, int64_t k1, float *out, size_t ldo);

/* 1 when the 8 x 8 hardware path is used on this CPU (for tests). */
int bs_half_tiles_hw(void);

#endif
