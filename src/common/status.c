/*
 * status.c - per-thread error message storage for bs_error().
 */
#include "status.h"

#include <stdio.h>
#include <string.h>

#define BS_ERRMSG_BYTES 2048

static _Thread_local char errmsg[BS_ERRMSG_BYTES];

bs_status bs_verror(bs_status st, const char *fmt, va_list ap)
{
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    return st;
}

bs_status bs_error(bs_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bs_verror(st, fmt, ap);
    va_end(ap);
    return st;
}

bs_status bs_error_context(bs_status st, const char *fmt, ...)
{
    char prefix[BS_ERRMSG_BYTES], old[BS_ERRMSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char combined[2 * BS_ERRMSG_BYTES + 2];
    memcpy(old, errmsg, sizeof old);
    snprintf(combined, sizeof combined, "%s: %s", prefix, old);
    memcpy(errmsg, combined, sizeof errmsg - 1);
    errmsg[sizeof errmsg - 1] = '\0';
    return st;
}

const char *bs_last_error(void) { return errmsg[0] ? errmsg : "unknown error"; }

void bs_clear_error(void) { errmsg[0] = '\0'; }

const char *bs_status_name(bs_status st)
{
    switch (st) {
    case BS_OK: return "ok";
    case BS_ERR_USAGE: return "usage error";
    case BS_ERR_INPUT: return "bad input";
    case BS_ERR_MEMORY: return "does not fit the memory budget";
    case BS_ERR_DEVICE: return "device error";
    case BS_ERR_INTERNAL: return "internal error";
    case BS_ERR_IO: return "I/O error";
    }
    return "unknown status";
}
