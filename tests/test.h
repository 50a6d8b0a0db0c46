/*
 * test.h - a minimal test harness for the unit tests.
 *
 * CHECK(cond) records a failure with file and line and goes on; CHECK_NEAR
 * compares doubles with an absolute tolerance; TEST_MAIN_END prints
 * "N passed, N failed" and returns non-zero if anything failed.
 */
#ifndef BS_TEST_H
#define BS_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_passed_, test_failed_;

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (cond) {                                                           \
            test_passed_++;                                                   \
        } else {                                                              \
            test_failed_++;                                                   \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                     \
    } while (0)

#define CHECK_MSG(cond, ...)                                                  \
    do {                                                                      \
        if (cond) {                                                           \
            test_passed_++;                                                   \
        } else {                                                              \
            test_failed_++;                                                   \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
        }                                                                     \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                 \
    do {                                                                      \
        double ta_ = (double)(a), tb_ = (double)(b);                          \
        if (fabs(ta_ - tb_) <= (tol)) {                                       \
            test_passed_++;                                                   \
        } else {                                                              \
            test_failed_++;                                                   \
            fprintf(stderr, "%s:%d: %s = %.9g, expected %s = %.9g (tol %g)\n", __FILE__, __LINE__, #a, ta_, #b, \
                    tb_, (double)(tol));                                      \
        }                                                                     \
    } while (0)

/* A scratch folder for this test (BS_TMP, created), or /tmp. */
static inline const char *test_tmpdir(void)
{
    const char *d = getenv("BS_TMP");
    if (!d)
        d = "/tmp/boundsort-test";
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", d);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot create %s\n", d);
    return d;
}

static inline const char *test_env(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return v ? v : fallback;
}

#define TEST_MAIN_END()                                                       \
    do {                                                                      \
        printf("%d passed, %d failed\n", test_passed_, test_failed_);        \
        return test_failed_ ? 1 : 0;                                          \
    } while (0)

#endif
