/*
 * qc_eigen.c - the k largest eigenpairs of a symmetric matrix, for the
 * incremental PCA (a 90 x 90 Gram matrix per channel and unit, of which 5
 * eigenpairs are needed). The cyclic Jacobi solver of src/common/eigen.h
 * computes all n pairs with ~8 sweeps of n^2/2 rotations (~20 ms at n = 90);
 * this one costs ~1 ms:
 *   1. Householder reduction to tridiagonal form T = Q^T A Q (the reflectors
 *      are kept: v_j of length n - j - 1, H_j = I - 2 v v^T);
 *   2. each wanted eigenvalue of T by bisection on the Sturm sequence count
 *      (the number of negative pivots of the LDL^T factorisation of T - x I
 *      is the number of eigenvalues below x), to relative precision ~1e-15;
 *   3. its eigenvector by inverse iteration: three solves with T - lambda I
 *      (Gaussian elimination with partial pivoting on the tridiagonal band),
 *      each result orthogonalised against the vectors found before
 *      (modified Gram-Schmidt; near-degenerate eigenvalues thus still give an
 *      orthonormal set) and normalised;
 *   4. back-transformation x = H_0 H_1 ... y, then the sign that makes the
 *      entry of largest magnitude positive (the convention of eigen.h and of
 *      sklearn's svd_flip).
 * Everything is sequential double arithmetic in a fixed order.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "qc_internal.h"

size_t qc_eigh_top_work(int n)
{
    /* d, e, 3 band rows + multipliers + pivots, y, tmp, reflectors (n^2) */
    return sizeof(double) * ((size_t)n * 9 + (size_t)n * n);
}

/* Number of eigenvalues of T (d, e) smaller than x. */
static int sturm_count(const double *d, const double *e, int n, double x)
{
    int c = 0;
    double q = d[0] - x;
    if (q < 0)
        c++;
    for (int i = 1; i < n; i++) {
        if (q == 0)
            q = DBL_EPSILON * (fabs(e[i - 1]) + DBL_MIN);
        q = d[i] - x - e[i - 1] * e[i - 1] / q;
        if (q < 0)
            c++;
    }
    return c;
}

/* Solve (T - s I) y = y in place (Gaussian elimination with row swaps). */
static void tri_solve(const double *d, const double *e, int n, double s, double *y, double *w)
{
    double *u0 = w, *u1 = w + n, *u2 = w + 2 * n, *lm = w + 3 * n, *sw = w + 4 * n;
    double tiny = DBL_EPSILON * (fabs(s) + 1e-300);
    /* row i: [sub e[i-1], diag d[i] - s, super e[i]] */
    double cd = d[0] - s, cs = n > 1 ? e[0] : 0.0, cs2 = 0.0;
    for (int i = 0; i < n - 1; i++) {
        double sub = e[i], nd = d[i + 1] - s, ns = i + 1 < n - 1 ? e[i + 1] : 0.0;
        if (fabs(cd) >= fabs(sub)) {
            if (cd == 0)
                cd = tiny;
            double m = sub / cd;
            u0[i] = cd, u1[i] = cs, u2[i] = cs2, lm[i] = m, sw[i] = 0;
            cd = nd - m * cs;
            cs = ns - m * cs2;
            cs2 = 0.0;
        } else {
            double m = cd / sub;
            u0[i] = sub, u1[i] = nd, u2[i] = ns, lm[i] = m, sw[i] = 1;
            cd = cs - m * nd;
            cs = cs2 - m * ns;
            cs2 = 0.0;
        }
    }
    u0[n - 1] = cd == 0 ? tiny : cd;
    for (int i = 0; i < n - 1; i++) {
        if (sw[i]) {
            double t = y[i];
            y[i] = y[i + 1];
            y[i + 1] = t;
        }
        y[i + 1] -= lm[i] * y[i];
    }
    for (int i = n - 1; i >= 0; i--) {
        double v = y[i];
        if (i + 1 < n)
            v -= u1[i] * y[i + 1];
        if (i + 2 < n)
            v -= u2[i] * y[i + 2];
        y[i] = v / u0[i];
    }
}

void qc_eigh_top(double *a, int n, int k, double *evals, double *evecs, double *work)
{
    double *d = work, *e = d + n, *band = e + n, *y = band + 5 * n, *tmp = y + n, *refl = tmp + n;
    memset(e, 0, sizeof *e * (size_t)n);
    /* 1. Householder tridiagonalisation (refl row j holds v_j in its last n - j - 1 entries) */
    for (int j = 0; j < n - 2; j++) {
        int m = n - j - 1;
        double *v = refl + (size_t)j * n + j + 1;
        double nrm = 0;
        for (int i = 0; i < m; i++) {
            v[i] = a[(size_t)(j + 1 + i) * n + j];
            nrm += v[i] * v[i];
        }
        nrm = sqrt(nrm);
        d[j] = a[(size_t)j * n + j];
        if (nrm == 0) {
            e[j] = 0;
            memset(v, 0, sizeof *v * (size_t)m);
            continue;
        }
        double alpha = v[0] > 0 ? -nrm : nrm;
        e[j] = alpha;
        v[0] -= alpha;
        double vn = 0;
        for (int i = 0; i < m; i++)
            vn += v[i] * v[i];
        vn = sqrt(vn);
        for (int i = 0; i < m; i++)
            v[i] /= vn;
        /* p = A22 v, w = p - (v.p) v, A22 -= 2 v w^T + 2 w v^T */
        double vp = 0;
        for (int r = 0; r < m; r++) {
            const double *row = a + (size_t)(j + 1 + r) * n + j + 1;
            double s = 0;
            for (int c = 0; c < m; c++)
                s += row[c] * v[c];
            tmp[r] = s;
            vp += v[r] * s;
        }
        for (int r = 0; r < m; r++)
            tmp[r] -= vp * v[r];
        for (int r = 0; r < m; r++) {
            double *row = a + (size_t)(j + 1 + r) * n + j + 1;
            for (int c = 0; c < m; c++)
                row[c] -= 2 * (v[r] * tmp[c] + tmp[r] * v[c]);
        }
    }
    if (n >= 2) {
        d[n - 2] = a[(size_t)(n - 2) * n + n - 2];
        e[n - 2] = a[(size_t)(n - 1) * n + n - 2];
    }
    d[n - 1] = a[(size_t)(n - 1) * n + n - 1];
    /* 2. bisection for the k largest */
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        double r = (i > 0 ? fabs(e[i - 1]) : 0) + (i < n - 1 ? fabs(e[i]) : 0);
        lo = d[i] - r < lo ? d[i] - r : lo;
        hi = d[i] + r > hi ? d[i] + r : hi;
    }
    double span = hi - lo;
    lo -= 1e-12 * span + DBL_MIN;
    hi += 1e-12 * span + DBL_MIN;
    double scale = fmax(fabs(lo), fabs(hi));
    for (int q = 0; q < k; q++) {
        int want = n - 1 - q; /* ascending index */
        double a0 = lo, b0 = hi;
        for (int it = 0; it < 200 && b0 - a0 > 4 * DBL_EPSILON * scale + DBL_MIN; it++) {
            double mid = 0.5 * (a0 + b0);
            if (sturm_count(d, e, n, mid) > want)
                b0 = mid;
            else
                a0 = mid;
        }
        evals[q] = 0.5 * (a0 + b0);
    }
    /* 3. inverse iteration with orthogonalisation */
    for (int q = 0; q < k; q++) {
        for (int i = 0; i < n; i++)
            y[i] = 1.0 + 0.01 * (double)((i * 7919 + q * 104729) % 97) / 97.0;
        double shift = evals[q] + 8 * DBL_EPSILON * scale;
        for (int it = 0; it < 3; it++) {
            tri_solve(d, e, n, shift, y, band);
            for (int p = 0; p < q; p++) {
                /* previous tridiagonal-space vectors are kept in evecs rows before back-transformation */
                const double *u = evecs + (size_t)p * n;
                double dot = 0;
                for (int i = 0; i < n; i++)
                    dot += u[i] * y[i];
                for (int i = 0; i < n; i++)
                    y[i] -= dot * u[i];
            }
            double nr = 0;
            for (int i = 0; i < n; i++)
                nr += y[i] * y[i];
            nr = sqrt(nr);
            if (!(nr > 0)) {
                for (int i = 0; i < n; i++)
                    y[i] = i == (q % n) ? 1.0 : 0.0;
                nr = 1.0;
            }
            for (int i = 0; i < n; i++)
                y[i] /= nr;
        }
        memcpy(evecs + (size_t)q * n, y, sizeof *y * (size_t)n);
    }
    /* 4. back to A's basis: x = H_0 (H_1 (... y)); sign convention */
    for (int q = 0; q < k; q++) {
        double *x = evecs + (size_t)q * n;
        for (int j = n - 3; j >= 0; j--) {
            const double *v = refl + (size_t)j * n + j + 1;
            int m = n - j - 1;
            double dot = 0;
            for (int i = 0; i < m; i++)
                dot += v[i] * x[j + 1 + i];
            for (int i = 0; i < m; i++)
                x[j + 1 + i] -= 2 * dot * v[i];
        }
        int big = 0;
        for (int i = 1; i < n; i++)
            if (fabs(x[i]) > fabs(x[big]))
                big = i;
        if (x[big] < 0)
            for (int i = 0; i < n; i++)
                x[i] = -x[i];
    }
}
