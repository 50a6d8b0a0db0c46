/*
 * log.h - leveled logging to stderr.
 *
 * One global verbosity (set by the CLI from -q / -v). Messages go to stderr so
 * stdout stays clean for machine-readable output (--json, tables).
 */
#ifndef BS_LOG_H
#define BS_LOG_H

typedef enum { BS_LOG_QUIET = 0, BS_LOG_WARN = 1, BS_LOG_INFO = 2, BS_LOG_DEBUG = 3 } bs_log_level;

void bs_log_set_level(bs_log_level level);
bs_log_level bs_log_get_level(void);

void bs_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void bs_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void bs_log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
