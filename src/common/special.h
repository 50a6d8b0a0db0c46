/*
 * special.h - special functions shared by the filters that build Kaiser
 * windows (the phase shift's fractional-delay taps, the template upsampling
 * of the waveform-shape metrics).
 */
#ifndef BS_SPECIAL_H
#define BS_SPECIAL_H

/* Modified Bessel function of the first kind, order 0, by its power series
 * sum ((x/2)^k / k!)^2, summed until a term is below 1e-17 of the sum
 * (|x| up to ~30 in double precision). */
double bs_bessel_i0(double x);

#endif
