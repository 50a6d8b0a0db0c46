/*
 * qc_internal.h - helpers shared by the files of src/qc (not part of the
 * module's interface).
 */
#ifndef BS_QC_INTERNAL_H
#define BS_QC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../io/npy.h"

/* k-th smallest of a[0..n) (a is reordered). */
float qc_select_f(float *a, int64_t n, int64_t k);
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

/* ---- reading the Phy folder (qc_io.c) ---- */
#define QC_BLOCK 65536 /* rows per block read */

/* One per-spike .npy file read in blocks of at most QC_BLOCK rows. */
typedef struct {
    int fd;
    bs_npy_header h;
    int64_t n_rows;  /* first dimension (spikes) */
    int64_t n_cols;  /* values per row (product of the other dimensions) */
    size_t esize;    /* bytes per value */
    void *raw;       /* QC_BLOCK rows, tag qc/read-block */
    char path[4200];
} qc_col;

/* Open dir/name; want_float: float32/float64 required, else any integer. */
bs_status qc_col_open(qc_col *c, const char *dir, const char *name, int want_float);
void qc_col_close(qc_col *c);
/* First value of rows [r0, r0 + n), n <= QC_BLOCK, as int64. */
bs_status qc_col_read_i64(qc_col *c, int64_t r0, int64_t n, int64_t *out);
/* All values of rows [r0, r0 + n) (n * n_cols floats). */
bs_status qc_col_read_f32(qc_col *c, int64_t r0, int64_t n, float *out);

/* cluster_group.tsv rows (absent file: n = 0). */
typedef struct {
    int n;
    int32_t *id;
    char (*group)[16];
} qc_groups;
bs_status qc_read_groups(const char *dir, qc_groups *g);
void qc_groups_free(qc_groups *g);

#endif
