/*
 * select.h - the k-th smallest of an array in expected linear time (Hoare
 * selection with a median-of-three pivot), for the medians of noise scales
 * (preprocess, drift) and of quality metrics (qc).
 */
#ifndef BS_SELECT_H
#define BS_SELECT_H

#include <stdint.h>

/* Rearrange a[0..n) so that a[k] is the k-th smallest (0-based) and
 * a[0..k) <= a[k] <= a(k..n); returns a[k]. */
float bs_select_f(float *a, int64_t n, int64_t k);

#endif
