/*
 * lsan_options.h - LeakSanitizer's options for the programs built with
 * AddressSanitizer: the boundsort command (src/cli/main.c) and the unit tests
 * that make many multi-threaded calls (OpenBLAS, OpenMP). Include it in one
 * file of a program; it defines nothing in other builds.
 *
 * LeakSanitizer of clang 14 on glibc 2.36 crashes in its tracer ("Tracer
 * caught signal 11", a garbage dynamic-TLS range) at exit after many
 * multi-threaded calls: seen in unit tests with OpenBLAS, in a sanitized
 * `boundsort sort` at a minimum memory budget (test_plan) and in the drift
 * simulations' sorts up to the drift stage (test_drift_sim_rigid).
 * Scanning TLS is turned off instead, which keeps leak detection on; the
 * only roots then lost are glibc's dlerror buffers and HDF5's per-thread
 * error stacks (kept in TLS), which are suppressed (HDF5's by its library:
 * the unwinder stops in it anyway, so no frame of ours would tell its leaks
 * apart).
 * Tracked memory is also checked with bs_mem_live_blocks().
 */
#ifndef BS_LSAN_OPTIONS_H
#define BS_LSAN_OPTIONS_H

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BS_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define BS_TEST_ASAN 1
#endif
#ifdef BS_TEST_ASAN
const char *__lsan_default_options(void);
const char *__lsan_default_suppressions(void);
const char *__lsan_default_options(void) { return "use_tls=0:print_suppressions=0"; }
const char *__lsan_default_suppressions(void)
{
    return "leak:_dlerror_run\nleak:_dl_exception_create_format\nleak:libhdf5\n";
}
#endif

#endif
