/*
 * test_blas_core.c - which OPENBLAS_CORETYPE boundsort asks for
 * (src/common/blas_threads.h): only when OpenBLAS fell back to its generic
 * "Prescott" kernels and the user set no OPENBLAS_CORETYPE; SKYLAKEX with
 * AVX-512, HASWELL with AVX2 and FMA, nothing on an older CPU or another
 * BLAS. And for this process: with OPENBLAS_CORETYPE set (any value) the
 * library's choice stands.
 */
#include "test.h"

#include <stdlib.h>
#include <string.h>

#include "common/blas_threads.h"

static int is(const char *got, const char *want)
{
    return want ? got && strcmp(got, want) == 0 : got == NULL;
}

int main(void)
{
    CHECK(is(bs_blas_coretype_for("Prescott", NULL, 1, 1), "SKYLAKEX"));
    CHECK(is(bs_blas_coretype_for("prescott", NULL, 0, 1), "HASWELL"));
    CHECK(is(bs_blas_coretype_for("Prescott", NULL, 0, 0), NULL));  /* an SSE3 CPU: Prescott is right */
    CHECK(is(bs_blas_coretype_for("Prescott", "", 1, 1), NULL));    /* the user's setting, even empty */
    CHECK(is(bs_blas_coretype_for("Prescott", "ZEN", 1, 1), NULL));
    CHECK(is(bs_blas_coretype_for("SkylakeX", NULL, 1, 1), NULL));  /* a model the library knows */
    CHECK(is(bs_blas_coretype_for("Cooperlake", NULL, 1, 1), NULL));
    CHECK(is(bs_blas_coretype_for(NULL, NULL, 1, 1), NULL));        /* not OpenBLAS */
    CHECK(setenv("OPENBLAS_CORETYPE", "HASWELL", 1) == 0);
    CHECK(bs_blas_better_coretype() == NULL);
    TEST_MAIN_END();
}
