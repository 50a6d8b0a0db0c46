/*
 * select.c - order statistics (see select.h).
 */
#include "select.h"

/* Rearrange a so that a[k] is the k-th smallest (Hoare selection with a
 * median-of-three pivot); a[0..k) <= a[k] <= a(k..n). */
float bs_select_f(float *a, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1;
    while (hi > lo) {
        int64_t mid = lo + (hi - lo) / 2;
        float x = a[lo], y = a[mid], z = a[hi];
        float piv = (x < y) ? ((y < z) ? y : (x < z ? z : x)) : ((x < z) ? x : (y < z ? z : y));
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < piv)
                i++;
            while (piv < a[j])
                j--;
            if (i <= j) {
                float t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break;
    }
    return a[k];
}
