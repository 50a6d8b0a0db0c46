/*
 * log.c - leveled logging to stderr (see log.h).
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

static bs_log_level current_level = BS_LOG_INFO;

void bs_log_set_level(bs_log_level level) { current_level = level; }
bs_log_level bs_log_get_level(void) { return current_level; }

static void vlog(bs_log_level level, const char *prefix, const char *fmt, va_list ap)
{
    if (level > current_level)
        return;
    fputs(prefix, stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

#define DEFINE_LOG(name, level, prefix)         \
    void name(const char *fmt, ...)             \
    {                                           \
        va_list ap;                             \
        va_start(ap, fmt);                      \
        vlog(level, prefix, fmt, ap);           \
        va_end(ap);                             \
    }

DEFINE_LOG(bs_log_info, BS_LOG_INFO, "")
DEFINE_LOG(bs_log_warn, BS_LOG_WARN, "warning: ")
DEFINE_LOG(bs_log_debug, BS_LOG_DEBUG, "debug: ")
