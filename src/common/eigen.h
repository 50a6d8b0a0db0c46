/*
 * eigen.h - eigen-decomposition of small symmetric matrices (cyclic Jacobi).
 *
 * Used for temporal bases (61 x 61) and other small problems where a few
 * milliseconds do not matter but a result that is identical on every machine
 * and thread count does. Jacobi rotations are applied in a fixed sweep order
 * until the off-diagonal norm is below 1e-14 of the total (or 100 sweeps).
 */
#ifndef BS_EIGEN_H
#define BS_EIGEN_H

#include "status.h"

/* a: n x n symmetric, row-major, destroyed. On return evals[i] are the
 * eigenvalues in decreasing order and row i of evecs (n x n, row-major) is the
 * unit eigenvector of evals[i], its sign chosen so that its entry of largest
 * magnitude is positive. */
bs_status bs_eigh_jacobi(double *a, int n, double *evals, double *evecs);

#endif
