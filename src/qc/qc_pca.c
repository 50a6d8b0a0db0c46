/*
 * qc_pca.c - SpikeInterface's incremental PCA per channel and the metrics
 * computed in its feature space (declared in qc.h).
 *
 * bs_ipca_partial_fit follows sklearn's IncrementalPCA.partial_fit: with
 * the running mean m (n_seen samples), the batch X (n rows) and its mean b,
 * the new mean is (m n_seen + sum X) / (n_seen + n), and the new components
 * are the top k right singular vectors of the stack
 *     [ s_i * v_i (previous components scaled by their singular values) ;
 *       X - b ;
 *       sqrt(n_seen n / (n_seen + n)) (m - b) ]
 * (only X - mean on the first call). The right singular vectors and
 * singular values of a matrix A are the eigenvectors and square roots of
 * the eigenvalues of A^T A, which is accumulated here (nt x nt, double) and
 * decomposed for its k largest eigenpairs (qc_eigen.c); each
 * eigenvector's sign makes its largest entry positive, which is sklearn's
 * svd_flip convention. explained variance = s^2 / (n_total - 1); transform
 * whitens by its square root.
 *
 * The metrics (formulas in qc.h):
 *   - Mahalanobis: the unit's covariance (ddof 1) is factored by Cholesky;
 *     a non-positive pivot (singular covariance, e.g. fewer spikes than
 *     features) gives NaN, where numpy's inverse may return huge values.
 *   - d': sklearn's LDA with the svd solver reduces, for two classes, to the
 *     direction w = D^-1 V diag(1/lambda) V^T D^-1 (mu_self - mu_other),
 *     with D the per-feature standard deviation of the class-centred data
 *     and V, lambda the eigenpairs of the standardised pooled covariance
 *     (directions whose singular value is <= 1e-4 dropped, sklearn's tol);
 *     d' = difference of the projected means / sqrt(mean of the two
 *     projected variances). Its sign is positive by construction (sklearn's
 *     is too in practice).
 *   - nearest neighbours: points reordered self first, then subsampled with
 *     numpy.arange(0, n - 1, n / max_spikes) when there are more than
 *     max_spikes (as SpikeInterface); squared distances from blocked dgemm
 *     (||x||^2 + ||y||^2 - 2 x.y on mean-centred data), the k + 4 smallest
 *     of each row (its columns screened 64 at a time against the largest
 *     kept so far, in one vectorised pass, and only those under it taken in
 *     order) re-measured exactly and the k nearest kept (the point itself
 *     excluded). Blocks of rows run in parallel (OpenMP, one distance
 *     block per thread); a row's result does not depend on the thread.
 *   - simplified silhouette: distances to centroids; the other unit whose
 *     centroid is nearest on average.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../common/simd.h"
#include "../mem/mem.h"
#include "qc.h"
#include "qc_internal.h"

#define IPCA_ROWS 256 /* rows of the centred batch accumulated per dsyrk */

bs_status bs_ipca_init(bs_ipca *m, int nt, int k)
{
    memset(m, 0, sizeof *m);
    if (nt < 1 || k < 1 || k > nt)
        return bs_error(BS_ERR_INTERNAL, "ipca: bad shape nt=%d k=%d", nt, k);
    m->nt = nt;
    m->k = k;
    m->mean = bs_mem_calloc("qc/pca-model", (size_t)nt * (k + 1) + 2 * (size_t)k, sizeof(double));
    if (!m->mean)
        return BS_ERR_MEMORY;
    m->comp = m->mean + nt;
    m->sv = m->comp + (size_t)k * nt;
    m->ev = m->sv + k;
    return BS_OK;
}

void bs_ipca_free(bs_ipca *m)
{
    bs_mem_free(m->mean);
    memset(m, 0, sizeof *m);
}

size_t bs_ipca_scratch_bytes(int nt, int k)
{
    /* Gram, eigenvectors, eigenvalues, batch mean, new mean, row block, eigen-solver work */
    return sizeof(double) * ((size_t)nt * nt + (size_t)k * nt + (size_t)nt * 3 + (size_t)IPCA_ROWS * nt) +
           qc_eigh_top_work(nt);
}

bs_status bs_ipca_partial_fit(bs_ipca *m, const float *X, int64_t n, int64_t stride, void *scratch)
{
    int nt = m->nt, k = m->k;
    if (n < k)
        return bs_error(BS_ERR_INTERNAL, "ipca: batch of %lld rows < %d components", (long long)n, k);
    double *G = scratch, *evec = G + (size_t)nt * nt, *eval = evec + (size_t)k * nt;
    double *bmean = eval + nt, *nmean = bmean + nt, *rows = nmean + nt, *ework = rows + (size_t)IPCA_ROWS * nt;
    memset(bmean, 0, (size_t)nt * sizeof *bmean);
    for (int64_t r = 0; r < n; r++)
        for (int t = 0; t < nt; t++)
            bmean[t] += X[r * stride + t];
    int64_t n_total = m->n_seen + n;
    for (int t = 0; t < nt; t++) {
        nmean[t] = (m->mean[t] * (double)m->n_seen + bmean[t]) / (double)n_total;
        bmean[t] /= (double)n;
    }
    /* the centred batch (around the batch mean; the same as the new mean on the first call) */
    memset(G, 0, (size_t)nt * nt * sizeof *G);
    const double *centre = m->n_seen ? bmean : nmean;
    for (int64_t r0 = 0; r0 < n; r0 += IPCA_ROWS) {
        int64_t nr = n - r0 < IPCA_ROWS ? n - r0 : IPCA_ROWS;
        for (int64_t r = 0; r < nr; r++)
            for (int t = 0; t < nt; t++)
                rows[r * nt + t] = (double)X[(r0 + r) * stride + t] - centre[t];
        cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, nt, (int)nr, 1.0, rows, nt, 1.0, G, nt);
    }
    if (m->n_seen) {
        for (int i = 0; i < k; i++) {
            for (int t = 0; t < nt; t++)
                rows[t] = m->sv[i] * m->comp[(size_t)i * nt + t];
            cblas_dsyr(CblasRowMajor, CblasUpper, nt, 1.0, rows, 1, G, nt);
        }
        double f = sqrt(((double)m->n_seen / (double)n_total) * (double)n);
        for (int t = 0; t < nt; t++)
            rows[t] = f * (m->mean[t] - bmean[t]);
        cblas_dsyr(CblasRowMajor, CblasUpper, nt, 1.0, rows, 1, G, nt);
    }
    for (int i = 0; i < nt; i++)
        for (int j = 0; j < i; j++)
            G[(size_t)i * nt + j] = G[(size_t)j * nt + i];
    qc_eigh_top(G, nt, k, eval, evec, ework);
    for (int i = 0; i < k; i++) {
        double l = eval[i] > 0 ? eval[i] : 0;
        m->sv[i] = sqrt(l);
        m->ev[i] = n_total > 1 ? l / (double)(n_total - 1) : 0;
        memcpy(m->comp + (size_t)i * nt, evec + (size_t)i * nt, (size_t)nt * sizeof(double));
    }
    memcpy(m->mean, nmean, (size_t)nt * sizeof(double));
    m->n_seen = n_total;
    return BS_OK;
}

void bs_ipca_transform(const bs_ipca *m, const float *x, float *out)
{
    for (int i = 0; i < m->k; i++) {
        const double *v = m->comp + (size_t)i * m->nt;
        double s = 0;
        for (int t = 0; t < m->nt; t++)
            s += ((double)x[t] - m->mean[t]) * v[t];
        out[i] = m->ev[i] > 0 ? (float)(s / sqrt(m->ev[i])) : 0.0f;
    }
}

/* ------------------------------------------------------------ Mahalanobis */

/* In-place Cholesky of the d x d symmetric A (lower factor); 0 when a pivot
 * is not positive. */
static int cholesky(double *A, int d)
{
    double maxd = 0;
    for (int i = 0; i < d; i++)
        maxd = A[(size_t)i * d + i] > maxd ? A[(size_t)i * d + i] : maxd;
    if (!(maxd > 0))
        return 0;
    for (int j = 0; j < d; j++) {
        double s = A[(size_t)j * d + j];
        for (int p = 0; p < j; p++)
            s -= A[(size_t)j * d + p] * A[(size_t)j * d + p];
        if (!(s > 1e-13 * maxd))
            return 0;
        double l = sqrt(s);
        A[(size_t)j * d + j] = l;
        for (int i = j + 1; i < d; i++) {
            double v = A[(size_t)i * d + j];
            for (int p = 0; p < j; p++)
                v -= A[(size_t)i * d + p] * A[(size_t)j * d + p];
            A[(size_t)i * d + j] = v / l;
        }
    }
    return 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define ROW_BLOCK 1024 /* points per BLAS block */

/* Scatter matrix (upper triangle, += ) of the rows i with lab[i] == want (or != want when
 * !equal), centred on mu, accumulated with dsyrk over blocks of rows. */
static void scatter(const double *X, const int32_t *lab, int64_t n, int d, int32_t want, int equal, const double *mu,
                    double *S, double *blk)
{
    int64_t nb = 0;
    for (int64_t i = 0; i <= n; i++) {
        if (i < n && (lab[i] == want) == equal) {
            for (int j = 0; j < d; j++)
                blk[nb * d + j] = X[i * d + j] - mu[j];
            nb++;
        }
        if (nb == ROW_BLOCK || (i == n && nb > 0)) {
            cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, d, (int)nb, 1.0, blk, d, 1.0, S, d);
            nb = 0;
        }
    }
}

bs_status bs_qc_mahalanobis(const double *X, const int32_t *lab, int64_t n, int d, int32_t self, double *iso,
                            double *l_ratio)
{
    *iso = *l_ratio = NAN;
    int64_t ns = 0;
    for (int64_t i = 0; i < n; i++)
        ns += lab[i] == self;
    int64_t no = n - ns;
    if (ns < 2 || (ns < no ? ns : no) < 2)
        return BS_OK;
    size_t dd = (size_t)d * d;
    double *mu = bs_mem_calloc("qc/pca-metrics", 2 * dd + (size_t)d + (size_t)no + (size_t)ROW_BLOCK * d, sizeof(double));
    if (!mu)
        return BS_ERR_MEMORY;
    double *S = mu + d, *C = S + dd, *dist = C + dd, *blk = dist + no;
    for (int64_t i = 0; i < n; i++)
        if (lab[i] == self)
            for (int j = 0; j < d; j++)
                mu[j] += X[i * d + j];
    for (int j = 0; j < d; j++)
        mu[j] /= (double)ns;
    scatter(X, lab, n, d, self, 1, mu, S, blk);
    /* covariance, lower triangle (cholesky reads and writes the lower part) */
    for (int i = 0; i < d; i++)
        for (int j = 0; j <= i; j++)
            C[(size_t)i * d + j] = S[(size_t)j * d + i] / (double)(ns - 1);
    if (cholesky(C, d)) {
        /* squared distances ||L^-1 (x - mu)||^2 of the other points, a block at a time */
        int64_t m = 0, nb = 0, first = 0;
        for (int64_t i = 0; i <= n; i++) {
            if (i < n && lab[i] != self) {
                for (int j = 0; j < d; j++)
                    blk[nb * d + j] = X[i * d + j] - mu[j];
                nb++;
            }
            if (nb == ROW_BLOCK || (i == n && nb > 0)) {
                cblas_dtrsm(CblasRowMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, (int)nb, d, 1.0, C, d,
                            blk, d);
                for (int64_t r = 0; r < nb; r++) {
                    double q = 0;
                    for (int j = 0; j < d; j++)
                        q += blk[r * d + j] * blk[r * d + j];
                    dist[first + r] = q;
                }
                first += nb;
                m = first;
                nb = 0;
            }
        }
        qsort(dist, (size_t)m, sizeof *dist, cmp_double);
        int64_t nmin = ns < no ? ns : no;
        *iso = dist[nmin - 1];
        double l = 0;
        for (int64_t i = 0; i < m; i++)
            l += bs_qc_chi2_sf(dist[i], d);
        *l_ratio = l / (double)ns;
    }
    bs_mem_free(mu);
    return BS_OK;
}

/* --------------------------------------------------------------- d-prime */

bs_status bs_qc_d_prime(const double *X, const int32_t *lab, int64_t n, int d, int32_t self, double *d_prime)
{
    *d_prime = NAN;
    int64_t ns = 0;
    for (int64_t i = 0; i < n; i++)
        ns += lab[i] == self;
    int64_t no = n - ns;
    if (ns < 1 || no < 1 || n <= 2)
        return BS_OK;
    size_t dd = (size_t)d * d;
    size_t bytes = sizeof(double) * (2 * dd + 7 * (size_t)d + (size_t)ROW_BLOCK * d) + qc_eigh_top_work(d);
    double *mu_s = bs_mem_calloc("qc/pca-metrics", bytes / sizeof(double) + 1, sizeof(double));
    if (!mu_s)
        return BS_ERR_MEMORY;
    double *mu_o = mu_s + d, *sd = mu_o + d, *w = sd + d, *y = w + d, *row = y + d, *lam = row + d;
    double *S = lam + d, *V = S + dd, *blk = V + dd, *ework = blk + (size_t)ROW_BLOCK * d;
    for (int64_t i = 0; i < n; i++) {
        double *mu = lab[i] == self ? mu_s : mu_o;
        for (int j = 0; j < d; j++)
            mu[j] += X[i * d + j];
    }
    for (int j = 0; j < d; j++) {
        mu_s[j] /= (double)ns;
        mu_o[j] /= (double)no;
    }
    /* pooled within-class scatter */
    scatter(X, lab, n, d, self, 1, mu_s, S, blk);
    scatter(X, lab, n, d, self, 0, mu_o, S, blk);
    for (int j = 0; j < d; j++) {
        sd[j] = sqrt(S[(size_t)j * d + j] / (double)n);
        if (sd[j] == 0)
            sd[j] = 1.0;
    }
    double fac = 1.0 / (double)(n - 2);
    for (int i = 0; i < d; i++)
        for (int j = i; j < d; j++) {
            double v = S[(size_t)i * d + j] * fac / (sd[i] * sd[j]);
            S[(size_t)i * d + j] = S[(size_t)j * d + i] = v;
        }
    qc_eigh_top(S, d, d, lam, V, ework);
    /* w = D^-1 V_r diag(1/lambda) V_r^T D^-1 (mu_s - mu_o) */
    for (int j = 0; j < d; j++)
        row[j] = (mu_s[j] - mu_o[j]) / sd[j];
    for (int r = 0; r < d; r++) {
        if (!(sqrt(lam[r] > 0 ? lam[r] : 0) > 1e-4))
            continue;
        double c = 0;
        for (int j = 0; j < d; j++)
            c += V[(size_t)r * d + j] * row[j];
        c /= lam[r];
        for (int j = 0; j < d; j++)
            y[j] += c * V[(size_t)r * d + j];
    }
    for (int j = 0; j < d; j++)
        w[j] = y[j] / sd[j];
    double s1 = 0, o1 = 0;
    for (int64_t i = 0; i < n; i++) {
        double p = 0;
        for (int j = 0; j < d; j++)
            p += X[i * d + j] * w[j];
        if (lab[i] == self)
            s1 += p;
        else
            o1 += p;
    }
    /* two-pass variances for accuracy */
    double ms = s1 / (double)ns, mo = o1 / (double)no, vs = 0, vo = 0;
    for (int64_t i = 0; i < n; i++) {
        double p = 0;
        for (int j = 0; j < d; j++)
            p += X[i * d + j] * w[j];
        if (lab[i] == self)
            vs += (p - ms) * (p - ms);
        else
            vo += (p - mo) * (p - mo);
    }
    vs /= (double)ns;
    vo /= (double)no;
    *d_prime = (ms - mo) / sqrt((vs + vo) / 2);
    bs_mem_free(mu_s);
    return BS_OK;
}

/* ------------------------------------------------------ nearest neighbours */

#define NN_BLOCK 128
#define NN_SCAN 64 /* columns of a distance row screened at once against the candidates' largest */
_Static_assert(NN_SCAN == 64, "a screen's columns are the bits of a uint64_t");

/* Bit l set where not (row[l] + nq) + norm[l] >= thr, l < len <= NN_SCAN: the sum as the scan computes it,
 * and the scan's test (a NaN is taken, as there). */
BS_VECTORIZED static uint64_t nn_under(const double *row, double nq, const double *norm, int len, double thr)
{
    uint64_t mask = 0;
    for (int l = 0; l < len; l++)
        mask |= (uint64_t)!(row[l] + nq + norm[l] >= thr) << l;
    return mask;
}

/* Doubles of one thread's nearest-neighbour work: a block of distance rows, kc candidate distances and kc
   candidate indices (int64, the size of a double). */
static size_t nn_thread_doubles(int64_t m, int kc) { return (size_t)NN_BLOCK * (size_t)m + 2 * (size_t)kc; }

size_t bs_qc_nn_bytes(int64_t n, int d, int max_spikes, int k, int n_threads)
{
    int64_t m = max_spikes > 0 && n > max_spikes ? max_spikes + 1 : n; /* the subsample: at most max_spikes + 1 */
    return sizeof(double) * ((size_t)m * d + (size_t)m + (size_t)d + (size_t)n_threads * nn_thread_doubles(m, k + 4));
}

bs_status bs_qc_nn_rates(const double *X, const int32_t *lab, int64_t n, int d, int32_t self, int max_spikes,
                         int k, double *hit, double *miss)
{
    *hit = *miss = NAN;
    int64_t ns = 0;
    for (int64_t i = 0; i < n; i++)
        ns += lab[i] == self;
    if (ns == n) {
        *hit = 1.0;
        *miss = 0.0;
        return BS_OK;
    }
    /* self first, then the others, each in their original order */
    int64_t *order = bs_mem_alloc("qc/pca-metrics", (size_t)n * sizeof *order);
    if (!order)
        return BS_ERR_MEMORY;
    int64_t a = 0, b = ns;
    for (int64_t i = 0; i < n; i++)
        order[lab[i] == self ? a++ : b++] = i;
    int64_t m = n, m_self = ns;
    double ratio = (double)max_spikes / (double)n;
    if (ratio < 1) {
        double step = 1.0 / ratio;
        m = (int64_t)ceil((double)(n - 1) / step);
        for (int64_t i = 0; i < m; i++)
            order[i] = order[(int64_t)((double)i * step)];
        m_self = (int64_t)((double)ns * ratio);
    }
    if (k < 1 || k >= m || m_self < 1 || m_self >= m) {
        bs_mem_free(order);
        return BS_OK;
    }
    int kc = k + 4 < m - 1 ? k + 4 : (int)(m - 1);
    int64_t n_blocks = (m + NN_BLOCK - 1) / NN_BLOCK;
    int nth = omp_get_max_threads();
    nth = (int64_t)nth < n_blocks ? nth : (int)n_blocks;
    size_t per_thread = nn_thread_doubles(m, kc);
    double *P = bs_mem_alloc("qc/pca-metrics", sizeof(double) * ((size_t)m * d + (size_t)m + (size_t)d) +
                                                   (size_t)nth * per_thread * sizeof(double));
    if (!P) {
        bs_mem_free(order);
        return bs_error(BS_ERR_MEMORY, "qc: out of memory (nearest neighbours)");
    }
    double *norm = P + (size_t)m * d, *mean = norm + m, *work = mean + d;
    memset(mean, 0, (size_t)d * sizeof *mean);
    for (int64_t i = 0; i < m; i++)
        for (int j = 0; j < d; j++)
            mean[j] += X[order[i] * d + j];
    for (int j = 0; j < d; j++)
        mean[j] /= (double)m;
    for (int64_t i = 0; i < m; i++) {
        double s = 0;
        for (int j = 0; j < d; j++) {
            double v = X[order[i] * d + j] - mean[j];
            P[i * d + j] = v;
            s += v * v;
        }
        norm[i] = s;
    }
    int64_t hits_self = 0, hits_other = 0;
    /* blocks of rows in parallel, each thread with its own distances and candidates: every row's neighbours
       come from the same dgemm block and the same scan whichever thread takes it, and the hits are counts */
#pragma omp parallel num_threads(nth) reduction(+ : hits_self, hits_other)
    {
        double *D = work + (size_t)omp_get_thread_num() * per_thread, *cd = D + (size_t)NN_BLOCK * m;
        int64_t *cand = (int64_t *)(cd + kc);
#pragma omp for schedule(dynamic, 1)
        for (int64_t blk = 0; blk < n_blocks; blk++) {
            int64_t r0 = blk * NN_BLOCK, nr = m - r0 < NN_BLOCK ? m - r0 : NN_BLOCK;
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)m, d, -2.0, P + r0 * d, d, P, d, 0.0,
                        D, (int)m);
            for (int64_t r = 0; r < nr; r++) {
                int64_t q = r0 + r;
                const double *row = D + r * m;
                /* the kc smallest approximate distances, excluding q itself: NN_SCAN columns at a time, those
                   under the list's largest (a mask, in one pass that vectorises) inserted in column order,
                   each checked again against the list as it is then (so the list is the one-by-one scan's) */
                int nc = 0;
                for (int64_t j0 = 0; j0 < m; j0 += NN_SCAN) {
                    const int len = m - j0 < NN_SCAN ? (int)(m - j0) : NN_SCAN;
                    uint64_t under = nc == kc ? nn_under(row + j0, norm[q], norm + j0, len, cd[kc - 1])
                                              : (len == NN_SCAN ? ~(uint64_t)0 : ((uint64_t)1 << len) - 1);
                    for (; under; under &= under - 1) {
                        int64_t j = j0 + __builtin_ctzll(under);
                        if (j == q)
                            continue;
                        double v = row[j] + norm[q] + norm[j];
                        if (nc == kc && v >= cd[kc - 1])
                            continue;
                        int p = nc < kc ? nc++ : kc - 1;
                        while (p > 0 && cd[p - 1] > v) {
                            cd[p] = cd[p - 1];
                            cand[p] = cand[p - 1];
                            p--;
                        }
                        cd[p] = v;
                        cand[p] = j;
                    }
                }
                /* exact distances of the candidates, k nearest (ties: lower index first) */
                for (int c = 0; c < nc; c++) {
                    double s = 0;
                    for (int j = 0; j < d; j++) {
                        double v = P[q * d + j] - P[cand[c] * d + j];
                        s += v * v;
                    }
                    cd[c] = s;
                }
                for (int c = 1; c < nc; c++) {
                    double v = cd[c];
                    int64_t id = cand[c];
                    int p = c;
                    while (p > 0 && (cd[p - 1] > v || (cd[p - 1] == v && cand[p - 1] > id))) {
                        cd[p] = cd[p - 1];
                        cand[p] = cand[p - 1];
                        p--;
                    }
                    cd[p] = v;
                    cand[p] = id;
                }
                int64_t h = 0;
                for (int c = 0; c < k; c++)
                    h += cand[c] < m_self;
                if (q < m_self)
                    hits_self += h;
                else
                    hits_other += h;
            }
        }
    }
    *hit = (double)hits_self / ((double)m_self * k);
    *miss = (double)hits_other / ((double)(m - m_self) * k);
    bs_mem_free(P);
    bs_mem_free(order);
    return BS_OK;
}

/* ------------------------------------------------------------- silhouette */

bs_status bs_qc_silhouette(const double *X, const int32_t *lab, int64_t n, int d, int32_t self, double *score)
{
    *score = NAN;
    int32_t lo = lab[0], hi = lab[0];
    for (int64_t i = 1; i < n; i++) {
        lo = lab[i] < lo ? lab[i] : lo;
        hi = lab[i] > hi ? lab[i] : hi;
    }
    int64_t nl = (int64_t)hi - lo + 1;
    double *cen = bs_mem_calloc("qc/pca-metrics", (size_t)nl * (d + 1), sizeof(double));
    if (!cen)
        return BS_ERR_MEMORY;
    double *cnt = cen + (size_t)nl * d;
    for (int64_t i = 0; i < n; i++) {
        int64_t l = lab[i] - lo;
        cnt[l] += 1;
        for (int j = 0; j < d; j++)
            cen[l * d + j] += X[i * d + j];
    }
    for (int64_t l = 0; l < nl; l++)
        if (cnt[l] > 0)
            for (int j = 0; j < d; j++)
                cen[l * d + j] /= cnt[l];
    int64_t ls = self - lo, ns = ls >= 0 && ls < nl ? (int64_t)cnt[ls] : 0, best = -1;
    double best_mean = INFINITY;
    for (int64_t l = 0; l < nl && ns > 0; l++) {
        if (l == ls || cnt[l] == 0)
            continue;
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            if (lab[i] == self) {
                double q = 0;
                for (int j = 0; j < d; j++) {
                    double v = X[i * d + j] - cen[l * d + j];
                    q += v * v;
                }
                s += sqrt(q);
            }
        if (s / (double)ns < best_mean) {
            best_mean = s / (double)ns;
            best = l;
        }
    }
    if (best >= 0) {
        double acc = 0;
        for (int64_t i = 0; i < n; i++)
            if (lab[i] == self) {
                double qa = 0, qb = 0;
                for (int j = 0; j < d; j++) {
                    double va = X[i * d + j] - cen[ls * d + j], vb = X[i * d + j] - cen[best * d + j];
                    qa += va * va;
                    qb += vb * vb;
                }
                double da = sqrt(qa), db = sqrt(qb);
                acc += (db - da) / (da > db ? da : db);
            }
        *score = acc / (double)ns;
    }
    bs_mem_free(cen);
    return BS_OK;
}
