/*
 * eigen.c - cyclic Jacobi eigen-decomposition (see eigen.h).
 */
#include "eigen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bs_status bs_eigh_jacobi(double *a, int n, double *evals, double *evecs)
{
    if (n < 1)
        return bs_error(BS_ERR_INTERNAL, "eigh: bad size %d", n);
    double *v = malloc((size_t)n * (size_t)n * sizeof *v);
    int *order = malloc((size_t)n * sizeof *order);
    if (!v || !order) {
        free(v);
        free(order);
        return bs_error(BS_ERR_MEMORY, "eigh: out of memory");
    }
    for (int i = 0; i < n * n; i++)
        v[i] = 0;
    for (int i = 0; i < n; i++)
        v[i * n + i] = 1;
    double total = 0;
    for (int i = 0; i < n * n; i++)
        total += a[i] * a[i];
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++)
                off += 2 * a[p * n + q] * a[p * n + q];
        if (off <= 1e-28 * total || off == 0)
            break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                double apq = a[p * n + q];
                if (apq == 0)
                    continue;
                double theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
                double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < n; k++) { /* columns p, q */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int k = 0; k < n; k++) { /* rows p, q */
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                for (int k = 0; k < n; k++) { /* eigenvectors are columns of v */
                    double vkp = v[k * n + p], vkq = v[k * n + q];
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
    }
    for (int i = 0; i < n; i++)
        order[i] = i;
    /* insertion sort by decreasing eigenvalue, stable on ties */
    for (int i = 1; i < n; i++) {
        int o = order[i], j = i - 1;
        while (j >= 0 && a[order[j] * n + order[j]] < a[o * n + o]) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = o;
    }
    for (int i = 0; i < n; i++) {
        int col = order[i];
        evals[i] = a[col * n + col];
        int big = 0;
        for (int k = 1; k < n; k++)
            if (fabs(v[k * n + col]) > fabs(v[big * n + col]))
                big = k;
        double sign = v[big * n + col] < 0 ? -1.0 : 1.0;
        for (int k = 0; k < n; k++)
            evecs[i * n + k] = sign * v[k * n + col];
    }
    free(v);
    free(order);
    return BS_OK;
}
