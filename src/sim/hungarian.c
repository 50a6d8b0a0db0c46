/*
 * hungarian.c - exact rectangular assignment maximizing total score (see
 * hungarian.h for the mechanism). Work arrays come from the memory
 * accountant under "compare/hungarian".
 */
#include "hungarian.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../mem/mem.h"

/* Minimizes sum cost[i][col(i)] over injective maps rows -> cols for
 * n <= m, cost row-major n x m. p_col_row[j] (1-based rows, 0 = free) is
 * the usual formulation; we return row_to_col. */
static bs_status solve_min(const double *cost, int32_t n, int32_t m, int32_t *row_to_col)
{
    const size_t m1 = (size_t)m + 1;
    /* u: n+1, v: m+1, minv: m+1 (doubles); p, way: m+1 (int32); used: m+1 (bytes) */
    size_t bytes = ((size_t)n + 1 + 2 * m1) * sizeof(double) + 2 * m1 * sizeof(int32_t) + m1;
    unsigned char *work = bs_mem_alloc("compare/hungarian", bytes);
    if (!work)
        return BS_ERR_MEMORY;
    double *u = (double *)work;
    double *v = u + (size_t)n + 1;
    double *minv = v + m1;
    int32_t *p = (int32_t *)(minv + m1);
    int32_t *way = p + m1;
    unsigned char *used = (unsigned char *)(way + m1);
    for (size_t k = 0; k <= (size_t)n; k++)
        u[k] = 0.0;
    for (size_t j = 0; j < m1; j++) {
        v[j] = 0.0;
        p[j] = 0;
        way[j] = 0;
    }

    for (int32_t i = 1; i <= n; i++) {
        p[0] = i;
        int32_t j0 = 0;
        for (size_t j = 0; j < m1; j++) {
            minv[j] = INFINITY;
            used[j] = 0;
        }
        do {
            used[j0] = 1;
            int32_t i0 = p[j0];
            double delta = INFINITY;
            int32_t j1 = -1;
            const double *crow = cost + (size_t)(i0 - 1) * (size_t)m;
            for (int32_t j = 1; j <= m; j++) {
                if (used[j])
                    continue;
                double cur = crow[j - 1] - u[i0] - v[j];
                if (cur < minv[j]) {
                    minv[j] = cur;
                    way[j] = j0;
                }
                if (minv[j] < delta) {
                    delta = minv[j];
                    j1 = j;
                }
            }
            if (j1 < 0) { /* cannot happen with finite costs and n <= m */
                bs_mem_free(work);
                return bs_error(BS_ERR_INTERNAL, "hungarian: no augmenting column for row %d", (int)i);
            }
            for (int32_t j = 0; j <= m; j++) {
                if (used[j]) {
                    u[p[j]] += delta;
                    v[j] -= delta;
                } else {
                    minv[j] -= delta;
                }
            }
            j0 = j1;
        } while (p[j0] != 0);
        do { /* flip the matching along the path */
            int32_t j1 = way[j0];
            p[j0] = p[j1];
            j0 = j1;
        } while (j0 != 0);
    }
    for (int32_t i = 0; i < n; i++)
        row_to_col[i] = -1;
    for (int32_t j = 1; j <= m; j++)
        if (p[j] > 0)
            row_to_col[p[j] - 1] = j - 1;
    bs_mem_free(work);
    return BS_OK;
}

bs_status bs_hungarian_max(const double *score, int32_t n_rows, int32_t n_cols, int32_t *row_to_col,
                           double *total)
{
    if (total)
        *total = 0.0;
    if (n_rows < 0 || n_cols < 0)
        return bs_error(BS_ERR_INTERNAL, "hungarian: negative shape %d x %d", (int)n_rows, (int)n_cols);
    for (int32_t i = 0; i < n_rows; i++)
        row_to_col[i] = -1;
    if (n_rows == 0 || n_cols == 0)
        return BS_OK;
    size_t cells = (size_t)n_rows * (size_t)n_cols;
    for (size_t k = 0; k < cells; k++)
        if (!isfinite(score[k]))
            return bs_error(BS_ERR_INPUT, "hungarian: score[%zu][%zu] is not finite", k / (size_t)n_cols,
                            k % (size_t)n_cols);

    /* Cost = -score, oriented so rows <= cols. */
    int transpose = n_rows > n_cols;
    int32_t n = transpose ? n_cols : n_rows, m = transpose ? n_rows : n_cols;
    double *cost = bs_mem_alloc("compare/hungarian", cells * sizeof(double));
    int32_t *r2c = bs_mem_alloc("compare/hungarian", (size_t)n * sizeof(int32_t));
    if (!cost || !r2c) {
        bs_mem_free(cost);
        bs_mem_free(r2c);
        return BS_ERR_MEMORY;
    }
    for (int32_t i = 0; i < n_rows; i++)
        for (int32_t j = 0; j < n_cols; j++) {
            double c = -score[(size_t)i * (size_t)n_cols + (size_t)j];
            if (transpose)
                cost[(size_t)j * (size_t)n_rows + (size_t)i] = c;
            else
                cost[(size_t)i * (size_t)n_cols + (size_t)j] = c;
        }
    bs_status st = solve_min(cost, n, m, r2c);
    if (st == BS_OK) {
        for (int32_t k = 0; k < n; k++) {
            if (r2c[k] < 0)
                continue;
            if (transpose)
                row_to_col[r2c[k]] = k;
            else
                row_to_col[k] = r2c[k];
        }
        if (total) {
            double s = 0.0;
            for (int32_t i = 0; i < n_rows; i++)
                if (row_to_col[i] >= 0)
                    s += score[(size_t)i * (size_t)n_cols + (size_t)row_to_col[i]];
            *total = s;
        }
    }
    bs_mem_free(cost);
    bs_mem_free(r2c);
    return st;
}
