/*
 * special.c - special functions (special.h).
 */
#include "special.h"

double bs_bessel_i0(double x)
{
    double s = 1, t = 1, q = x * x / 4;
    for (int k = 1; k < 500; k++) {
        t *= q / ((double)k * k);
        s += t;
        if (t < 1e-17 * s)
            break;
    }
    return s;
}
