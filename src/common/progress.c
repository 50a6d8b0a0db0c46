/*
 * progress.c - progress bars and plain progress lines (see progress.h).
 */
#include "progress.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

double bs_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void bs_progress_start(bs_progress *p, const char *label, const char *unit, int64_t total)
{
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label);
    p->unit = unit;
    p->total = total;
    p->t0_s = bs_now_s();
    p->last_draw_s = p->t0_s;
    p->tty = isatty(STDERR_FILENO);
    p->active = total > 0 && bs_log_get_level() >= BS_LOG_INFO;
}

void bs_progress_format(const bs_progress *p, int64_t done, double now_s, int bar_width, char *buf, int len)
{
    double frac = p->total > 0 ? (double)done / (double)p->total : 1.0;
    if (frac > 1)
        frac = 1;
    double el = now_s - p->t0_s;
    char bar[128] = "";
    if (bar_width > 0) {
        if (bar_width > 100)
            bar_width = 100;
        int filled = (int)(frac * bar_width + 1e-9);
        bar[0] = '[';
        for (int i = 0; i < bar_width; i++)
            bar[1 + i] = i < filled ? '#' : '.';
        bar[1 + bar_width] = ']';
        bar[2 + bar_width] = '\0';
    }
    char eta[48] = "";
    if (done > 0 && done < p->total)
        snprintf(eta, sizeof eta, "  ETA %.1f s", el * (double)(p->total - done) / (double)done);
    snprintf(buf, (size_t)len, "%-9s %s%s%3d%%  %lld/%lld %s  %.1f s%s", p->label, bar, bar_width > 0 ? " " : "",
             (int)(100 * frac), (long long)done, (long long)p->total, p->unit, el, eta);
}

void bs_progress_update(bs_progress *p, int64_t done)
{
    if (!p->active)
        return;
    double now = bs_now_s();
    char line[256];
    if (p->tty) {
        if (done < p->total && now - p->last_draw_s < 0.2)
            return;
        bs_progress_format(p, done, now, 30, line, sizeof line);
        fprintf(stderr, "\r%s\033[K", line);
        fflush(stderr);
    } else {
        int decile = p->total > 0 ? (int)(10 * done / p->total) : 10;
        if (decile == p->last_decile && now - p->last_draw_s < 30.0)
            return;
        p->last_decile = decile;
        bs_progress_format(p, done, now, 0, line, sizeof line);
        bs_log_info("%s", line);
    }
    p->last_draw_s = now;
}

void bs_progress_finish(bs_progress *p)
{
    if (!p->active)
        return;
    if (p->tty) {
        char line[256];
        bs_progress_format(p, p->total, bs_now_s(), 30, line, sizeof line);
        fprintf(stderr, "\r%s\033[K\n", line);
        fflush(stderr);
    } else if (p->last_decile < 10) {
        p->last_decile = 9;
        bs_progress_update(p, p->total);
    }
    p->active = 0;
}
