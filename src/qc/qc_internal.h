/*
 * qc_internal.h - helpers shared by the files of src/qc (not part of the
 * module's interface).
 */
#ifndef BS_QC_INTERNAL_H
#define BS_QC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../export/phy_read.h"
#include "../io/npy.h"

/* numpy median of a[0..n) (reordered); NaN if n == 0. */
double qc_median_inplace_f(float *a, int64_t n);
/* numpy median of a small double array (sorted in place). */
double qc_median_d(double *a, int64_t n);

/* numpy.histogram(x, bins) counts of float32 values x = (negate ? -a : a),
 * range [min, max]; edges gets the bins + 1 float32 edges. */
void np_histogram_f32(const float *a, int64_t n, int negate, int bins, int64_t *counts, float *edges);
/* scipy.ndimage.gaussian_filter1d(h, sigma, mode="nearest") on an integer
 * array, result truncated to integers as scipy stores it; -1 if sigma is
 * out of range (radius > 60). */
int gaussian_smooth_counts(const int64_t *h, int n, double sigma, int64_t *out);

/* The k largest eigenpairs of the n x n symmetric a (row-major, destroyed):
 * evals[0..k) descending, row q of evecs (k x n) the unit eigenvector of
 * evals[q] with its largest-magnitude entry positive. work: qc_eigh_top_work(n)
 * bytes. (qc_eigen.c) */
size_t qc_eigh_top_work(int n);
void qc_eigh_top(double *a, int n, int k, double *evals, double *evecs, double *work);

/* scipy.signal.resample_poly(x, up, 1)'s filter (qc_shape.c): the 20 up + 1
 * float32 taps into h; returns their count (-1: out of memory). */
int qc_upsample_taps(int up, float *h);
/* y[0 .. n up) = x[0 .. n) upsampled with those taps (zero outside x). */
void qc_upsample(const float *x, int n, int up, const float *h, double *y);

/* ---- reading the Phy folder (src/export/phy_read.h; groups in qc_io.c) ---- */
#define QC_BLOCK 65536 /* rows per block read */

/* A per-spike column of the folder read in blocks of at most QC_BLOCK rows;
 * want_float: float32/float64 required, else any integer; any shape (the
 * trailing dimensions are the row). */
static inline bs_status qc_col_open(bs_phy_col *c, const char *dir, const char *name, int want_float)
{
    return bs_phy_col_open(c, dir, name, want_float ? BS_PHY_COL_FLOAT : BS_PHY_COL_INT, BS_PHY_ANY_SHAPE, QC_BLOCK,
                           "qc/read-block");
}

/* cluster_group.tsv rows (absent file: n = 0); a repeated id keeps each row. */
typedef struct {
    int n;
    int32_t *id;
    char (*group)[16];
} qc_groups;
bs_status qc_read_groups(const char *dir, qc_groups *g);
void qc_groups_free(qc_groups *g);

#endif
