/*
 * hungarian.h - exact linear assignment (Hungarian method, shortest
 * augmenting paths with dual potentials, Jonker-Volgenant style) for a
 * rectangular matrix of real scores, maximizing the total score.
 *
 * Mechanism: the solver works on the "tall-free" orientation (rows <= cols;
 * a matrix with more rows than columns is transposed first) and minimizes the
 * cost -score. Rows are inserted one at a time; for each new row a Dijkstra-
 * like scan over the columns, using reduced costs c(i,j) - u(i) - v(j) >= 0,
 * finds the cheapest augmenting path to a free column, the potentials u, v are
 * updated by the path length so every reduced cost stays non-negative, and the
 * matching is flipped along the path. After all rows are inserted every row
 * holds one column and the assignment is optimal (complementary slackness).
 * Cost: O(n^2 m) time for n = min(rows, cols), m = max(rows, cols), O(n m)
 * extra memory only for a transposed copy, O(m) otherwise.
 *
 * Every row (or, when rows > cols, every column) is assigned, including pairs
 * whose score is 0 -- like scipy.optimize.linear_sum_assignment. Callers that
 * want only "real" pairs filter the result by score afterwards.
 */
#ifndef BS_HUNGARIAN_H
#define BS_HUNGARIAN_H

#include <stdint.h>

#include "../common/status.h"

/* score: row-major n_rows x n_cols, finite values (NaN/inf refused with
 * BS_ERR_INPUT). row_to_col[n_rows] receives the column assigned to each row,
 * or -1 for rows left unassigned (only when n_rows > n_cols).
 * total (may be NULL) receives the sum of the assigned scores.
 * n_rows or n_cols may be 0 (then every row gets -1). */
bs_status bs_hungarian_max(const double *score, int32_t n_rows, int32_t n_cols, int32_t *row_to_col,
                           double *total);

#endif
