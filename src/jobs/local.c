/*
 * local.c - running a batch's jobs on this machine (jobs.h, part 4).
 *
 * Each job is `boundsort sort ...` in a child process: fork, stdout and
 * stderr redirected to OUTROOT/.batch/logs/<id>.log, exec of /proc/self/exe
 * (the running boundsort binary). The parent starts jobs in list order while
 * fewer than max_jobs run and the running jobs' needs (sort budget + the
 * untracked overhead of a run) plus the next job's stay within total_mem
 * bytes; when the next job does not fit it waits for one to end (jobs never
 * overtake each other, so the order of the log is the list's). A job that
 * needs more than the whole total runs alone: its sort budget was already
 * capped at total - overhead when it was planned, so boundsort itself
 * refuses it (exit 3) if it cannot fit. A failed job never stops the others;
 * each writes tasks/<id>.start before and tasks/<id>.status after it runs.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../mem/mem.h"
#include "../pipeline/plan.h"
#include "jobs.h"

typedef struct {
    pid_t pid;
    int task;      /* index in s->tasks */
    size_t need;   /* bytes */
    time_t t0;
} running_job;

static pid_t start_job(bs_jobs_state *s, bs_jobs_task *t)
{
    char log[4300];
    bs_jobs_log_path(s, t->id, log, sizeof log);
    bs_jobs_task_clear(s, t->id);
    char who[32];
    snprintf(who, sizeof who, "pid-%ld", (long)getpid());
    bs_jobs_task_mark_start(s, t->id, who);
    const char *argv[BS_JOBS_MAX_ARGS + 66];
    argv[0] = "boundsort";
    for (int a = 0; a < t->n_args; a++)
        argv[a + 1] = t->args[a];
    argv[t->n_args + 1] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv("/proc/self/exe", (char *const *)argv);
        fprintf(stderr, "boundsort: batch: cannot run /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    return pid;
}

int bs_jobs_run_local(bs_jobs_state *s, const int *which, int n_which, int max_jobs, size_t total_mem,
                       int threads, int quiet)
{
    if (max_jobs < 1)
        max_jobs = 1;
    running_job *run = calloc((size_t)max_jobs, sizeof *run);
    if (!run)
        return n_which;
    size_t overhead = bs_plan_overhead_bytes(threads);
    size_t used = 0;
    int n_run = 0, next = 0, failed = 0, finished = 0;
    char b1[32], b2[32];
    while (next < n_which || n_run > 0) {
        while (next < n_which && n_run < max_jobs) {
            bs_jobs_task *t = &s->tasks[which[next]];
            size_t need = t->sort_mem + overhead;
            if (n_run > 0 && used + need > total_mem)
                break;
            pid_t pid = start_job(s, t);
            next++;
            if (pid < 0) {
                bs_jobs_task_mark_exit(s, t->id, 127);
                failed++;
                finished++;
                continue;
            }
            if (!quiet)
                printf("[%d/%d] start %3d  %s  (sort --mem %s, job needs %s)\n", finished + n_run + 1, n_which,
                       t->id, t->out, bs_mem_format(t->sort_mem, b1, sizeof b1), bs_mem_format(need, b2, sizeof b2));
            run[n_run++] = (running_job){pid, which[next - 1], need, time(NULL)};
            used += need;
        }
        if (n_run == 0)
            continue;
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        int k = 0;
        while (k < n_run && run[k].pid != pid)
            k++;
        if (k == n_run)
            continue; /* not one of ours */
        bs_jobs_task *t = &s->tasks[run[k].task];
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        bs_jobs_task_mark_exit(s, t->id, code);
        finished++;
        if (code != 0)
            failed++;
        if (!quiet) {
            printf("[%d/%d] %-5s %3d  %s  (exit %d, %lld s)\n", finished, n_which, code ? "FAIL" : "done", t->id,
                   t->out, code, (long long)(time(NULL) - run[k].t0));
            fflush(stdout);
        }
        used -= run[k].need;
        run[k] = run[--n_run];
    }
    free(run);
    return failed;
}
