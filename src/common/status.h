/*
 * status.h - status codes and the per-thread error message.
 *
 * Every fallible function returns a bs_status. The numeric values are the
 * process exit codes of docs/ARCHITECTURE.md §6, so the CLI can return a
 * status unchanged. When a function fails it records a human-readable message
 * with bs_error(), which names the file, the field and what was expected; the
 * CLI prints bs_last_error() once, at the top. Messages are kept per thread
 * (C11 _Thread_local), so OpenMP workers never overwrite each other's text.
 */
#ifndef BS_STATUS_H
#define BS_STATUS_H

#include <stdarg.h>

typedef enum {
    BS_OK = 0,
    BS_ERR_USAGE = 1,    /* bad command line */
    BS_ERR_INPUT = 2,    /* bad or unreadable input, an output folder that cannot be made */
    BS_ERR_MEMORY = 3,   /* does not fit the memory budget (or the output folder's disk: plan.h) */
    BS_ERR_DEVICE = 4,   /* GPU / device error */
    BS_ERR_INTERNAL = 5, /* a bug */
    BS_ERR_IO = 6        /* I/O error: cannot write output (disk full, write or rename failed) */
} bs_status;

/* Record a formatted message for the calling thread and return `st`, so
 * failing paths read `return bs_error(BS_ERR_INPUT, "%s: ...", path);`. */
bs_status bs_error(bs_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
bs_status bs_verror(bs_status st, const char *fmt, va_list ap);

/* Prefix the current message with more context ("reading X: <old>"). */
bs_status bs_error_context(bs_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

const char *bs_last_error(void);
void bs_clear_error(void);
const char *bs_status_name(bs_status st);

/* Propagate a failing status from an expression. */
#define BS_TRY(expr)                         \
    do {                                     \
        bs_status bs_try_st_ = (expr);       \
        if (bs_try_st_ != BS_OK)             \
            return bs_try_st_;               \
    } while (0)

#endif
