/*
 * progress.h - progress bars with ETA for long stages, on stderr.
 *
 * On a terminal (isatty(stderr)) the bar is redrawn in place with "\r" at
 * most every 0.2 s:  "detect    [#########.........]  45%  12/27 batches  9.1 s  ETA 11.0 s".
 * When stderr is not a terminal (a log file, SLURM), a plain line is written
 * at every 10% step and at least every 30 s, so logs stay short. Nothing is
 * written at log levels below INFO (-q). The ETA is elapsed × (total − done)
 * / done: stages process batches of equal length, so the rate is steady.
 *
 * Progress never affects results; a bs_progress is a plain value owned by
 * the caller (no allocation).
 */
#ifndef BS_PROGRESS_H
#define BS_PROGRESS_H

#include <stdint.h>

typedef struct {
    char label[24];
    const char *unit;  /* "batches", "centers", ... */
    int64_t total;
    double t0_s;       /* monotonic start time, s */
    double last_draw_s;
    int last_decile;   /* plain mode: last 10% step written */
    int tty;           /* 1: redraw in place */
    int active;        /* 0 when silenced */
} bs_progress;

/* Monotonic clock, s. */
double bs_now_s(void);

void bs_progress_start(bs_progress *p, const char *label, const char *unit, int64_t total);
void bs_progress_update(bs_progress *p, int64_t done);
/* Final line (the bar at 100% and the elapsed time). */
void bs_progress_finish(bs_progress *p);

/* Text of one progress line (no newline) into buf: used by the drawing code
 * and by the tests. */
void bs_progress_format(const bs_progress *p, int64_t done, double now_s, int bar_width, char *buf, int len);

#endif
