/*
 * slurm.c - a batch as one SLURM job array (jobs.h, part 4).
 *
 * Submission k (1, 2, ... : the first run, then each --retry-failed) writes
 * OUTROOT/.batch/tasks-k.tsv, line i (0-based) = array task i: the batch job
 * id, then the arguments of `boundsort sort` (tab-separated; discovery
 * refuses paths holding tabs or newlines), and OUTROOT/.batch/submit-k.sbatch:
 *   - one array, --array=0-(n-1); all its tasks share one --mem, the largest
 *     of (sort budget + untracked overhead) over the tasks: SLURM cannot give
 *     array tasks different memory, and one array keeps one job id for the
 *     whole batch. Each task still gives boundsort only its own budget
 *     (`sort --mem`), which is at most the allocation minus the overhead, so
 *     a plan that does not fit is refused by boundsort (exit 3, reason in the
 *     log) before it reads data instead of being killed by the scheduler;
 *   - --cpus-per-task (= sort --threads), and --time, --partition, --account,
 *     --gres passed through when given;
 *   - the task writes tasks/<id>.start, runs sort with its log in
 *     logs/<id>.log, and renames tasks/<id>.status into place with the exit
 *     code, then exits with that code (so SLURM marks it FAILED too).
 * The --output line: sbatch reads an #SBATCH line as a command line of its
 * own (not bash's): double quotes group characters (spaces included), a
 * backslash makes the next character literal, and an unquoted '#' starts a
 * comment. The log path is written in double quotes with '"' and '\'
 * backslash-escaped and '%' doubled (sbatch's file name pattern: %A, %a are
 * the array job id and task index, %% is a '%'). A state folder holding a
 * control character (the line would end) or a backslash (sbatch then stops
 * expanding %A / %a, so every task would write one log) is refused.
 * sbatch --parsable prints the array job id, recorded per task as
 * "<job id>_<index>" in state.json.
 *
 * Polling a task that wrote no status (pending, running, or killed by the
 * scheduler: OUT_OF_MEMORY, TIMEOUT, CANCELLED, NODE_FAIL): `squeue -h -r -j
 * ID -o "%i %T %r"` while SLURM holds it, then `scontrol -o show job ID`
 * (until MinJobAge), then `sacct -c` with the task's own job id (written in
 * its .start file) for jobs that have left the controller's memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "../mem/mem.h"
#include "jobs.h"

int bs_jobs_capture(const char *const *argv, char *buf, size_t len)
{
    return bs_jobs_capture_err(argv, buf, len, NULL, 0);
}

int bs_jobs_capture_err(const char *const *argv, char *buf, size_t len, char *err, size_t err_len)
{
    int fd[2];
    buf[0] = '\0';
    if (err && err_len)
        err[0] = '\0';
    FILE *ef = err && err_len ? tmpfile() : NULL; /* a file, not a pipe: no deadlock whatever the sizes */
    if (pipe(fd) != 0) {
        if (ef)
            fclose(ef);
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        if (ef)
            fclose(ef);
        return -1;
    }
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 1);
        int dn = ef ? fileno(ef) : open("/dev/null", O_WRONLY);
        if (dn >= 0)
            dup2(dn, 2);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fd[1]);
    size_t used = 0;
    for (;;) {
        char tmp[4096];
        ssize_t r = read(fd[0], tmp, sizeof tmp);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        size_t take = (size_t)r;
        if (used + take > len - 1)
            take = len - 1 - used;
        memcpy(buf + used, tmp, take);
        used += take;
    }
    buf[used] = '\0';
    close(fd[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            if (ef)
                fclose(ef);
            return -1;
        }
    if (ef) { /* stderr, its lines joined with "; ", control characters dropped */
        rewind(ef);
        size_t n = 0;
        int c, prev_nl = 0;
        while ((c = fgetc(ef)) != EOF && n + 3 < err_len) {
            if (c == '\n') {
                prev_nl = 1;
                continue;
            }
            if (prev_nl && n > 0) {
                err[n++] = ';';
                err[n++] = ' ';
            }
            prev_nl = 0;
            if (c >= 0x20 && c != 0x7f)
                err[n++] = (char)c;
        }
        err[n] = '\0';
        fclose(ef);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) == 127)
        return -1;
    return WEXITSTATUS(status);
}

/* Single-quote s for bash into the growing text. */
static void sh_quote(char **text, size_t *len, size_t *cap, const char *s);

static int append(char **text, size_t *len, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int append(char **text, size_t *len, size_t *cap, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(*text ? *text + *len : NULL, *text ? *cap - *len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return -1;
        if (*text && *len + (size_t)n < *cap) {
            *len += (size_t)n;
            return 0;
        }
        size_t nc = (*cap ? *cap * 2 : 4096) + (size_t)n;
        char *nt = realloc(*text, nc);
        if (!nt)
            return -1;
        *text = nt;
        *cap = nc;
    }
}

static void sh_quote(char **text, size_t *len, size_t *cap, const char *s)
{
    append(text, len, cap, "'");
    for (const char *c = s; *c; c++) {
        if (*c == '\'')
            append(text, len, cap, "'\\''");
        else
            append(text, len, cap, "%c", *c);
    }
    append(text, len, cap, "'");
}

/* The --output argument for the state folder dir (see above); BS_ERR_INPUT when dir cannot be written there. */
static bs_status sbatch_output(char **text, size_t *len, size_t *cap, const char *dir)
{
    for (const unsigned char *c = (const unsigned char *)dir; *c; c++)
        if (*c < 0x20 || *c == 0x7f || *c == '\\')
            return bs_error(BS_ERR_INPUT,
                            "%s: the output folder holds %s (byte 0x%02x), which an #SBATCH --output line cannot "
                            "carry: choose an OUTROOT (-o) without control characters or backslashes",
                            dir, *c == '\\' ? "a backslash" : "a control character", *c);
    append(text, len, cap, "#SBATCH --output=\"");
    for (const char *c = dir; *c; c++)
        append(text, len, cap, "%s%c", *c == '"' ? "\\" : *c == '%' ? "%" : "", *c);
    append(text, len, cap, "/logs/slurm-%%A_%%a.out\"\n");
    return BS_OK;
}

/* The next line of text at *p (its length in *n, without the newline); 0 at the end. */
static int next_line(const char **p, const char **line, size_t *n)
{
    if (!*p || !**p)
        return 0;
    *line = *p;
    *n = strcspn(*p, "\n");
    *p += *n + ((*p)[*n] == '\n');
    return 1;
}

static int is_directive(const char *line, size_t n)
{
    return n >= 7 && strncmp(line, "#SBATCH", 7) == 0;
}

/* The --sbatch-extra lines that are directives (directives = 1) or the others (the setup; a "#!" line dropped). */
static void extra_lines(char **text, size_t *len, size_t *cap, const char *extra, int directives)
{
    const char *p = extra, *line;
    size_t n;
    while (next_line(&p, &line, &n)) {
        size_t m = n;
        while (m > 0 && line[m - 1] == '\r')
            m--;
        if (is_directive(line, m) != directives || (!directives && m >= 2 && strncmp(line, "#!", 2) == 0))
            continue;
        append(text, len, cap, "%.*s\n", (int)m, line);
    }
}

bs_status bs_jobs_sbatch_extra_check(const char *text, size_t len, const char *path)
{
    if (len > 65536)
        return bs_error(BS_ERR_USAGE, "%s: --sbatch-extra: %zu bytes; at most 64 KiB", path, len);
    if (memchr(text, '\0', len))
        return bs_error(BS_ERR_USAGE, "%s: --sbatch-extra: a NUL byte: not a text file", path);
    static const struct {
        const char *opt, *why;
    } refused[] = {
        {"--array", "boundsort writes the array; throttle it with --max-running N"},
        {"-a", "boundsort writes the array; throttle it with --max-running N"},
        {"--output", "boundsort writes the logs under OUTROOT/.batch/logs"},
        {"-o", "boundsort writes the logs under OUTROOT/.batch/logs"},
        {"--mem", "the array's memory comes from the plan; set the budget with --mem-per-task"},
        {"--mem-per-cpu", "the array's memory comes from the plan; set the budget with --mem-per-task"},
        {"--mem-per-gpu", "the array's memory comes from the plan; set the budget with --mem-per-task"},
    };
    const char *p = text, *line;
    size_t n;
    int k = 0;
    while (next_line(&p, &line, &n)) {
        k++;
        if (!is_directive(line, n))
            continue;
        const char *o = line + 7;
        while (o < line + n && (*o == ' ' || *o == '\t'))
            o++;
        size_t ol = strcspn(o, "= \t\r\n");
        for (size_t r = 0; r < sizeof refused / sizeof refused[0]; r++)
            if (ol == strlen(refused[r].opt) && strncmp(o, refused[r].opt, ol) == 0)
                return bs_error(BS_ERR_USAGE, "%s: line %d: #SBATCH %s is not allowed in --sbatch-extra: %s", path,
                                k, refused[r].opt, refused[r].why);
    }
    return BS_OK;
}

bs_status bs_jobs_slurm(bs_jobs_state *s, const int *which, int n_which, const bs_slurm_opts *so, int submit,
                         char **script)
{
    *script = NULL;
    if (n_which < 1)
        return bs_error(BS_ERR_USAGE, "batch: no recording to submit");
    int k = s->n_submissions + 1;
    char tasks_path[4300], script_path[4300], exe[PATH_MAX];
    snprintf(tasks_path, sizeof tasks_path, "%s/tasks-%d.tsv", s->state_dir, k);
    snprintf(script_path, sizeof script_path, "%s/submit-%d.sbatch", s->state_dir, k);
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el <= 0)
        return bs_error(BS_ERR_INTERNAL, "batch: cannot find the boundsort binary (/proc/self/exe): %s",
                        strerror(errno));
    exe[el] = '\0';
    /* task list and the array's memory */
    char *tl = NULL, *sc = NULL;
    size_t tlen = 0, tcap = 0, slen = 0, scap = 0, mem = 0;
    for (int i = 0; i < n_which; i++) {
        const bs_jobs_task *t = &s->tasks[which[i]];
        if (t->sort_mem + so->overhead > mem)
            mem = t->sort_mem + so->overhead;
        append(&tl, &tlen, &tcap, "%d", t->id);
        for (int a = 1; a < t->n_args; a++)
            append(&tl, &tlen, &tcap, "\t%s", t->args[a]);
        append(&tl, &tlen, &tcap, "\n");
    }
    size_t mem_mib = (mem + ((size_t)1 << 20) - 1) >> 20;
    char b1[32];
    append(&sc, &slen, &scap, "#!/bin/bash\n");
    append(&sc, &slen, &scap, "#SBATCH --job-name=%s\n", so->job_name && so->job_name[0] ? so->job_name : "boundsort-batch");
    if (so->max_running > 0)
        append(&sc, &slen, &scap, "#SBATCH --array=0-%d%%%d\n", n_which - 1, so->max_running);
    else
        append(&sc, &slen, &scap, "#SBATCH --array=0-%d\n", n_which - 1);
    append(&sc, &slen, &scap, "#SBATCH --mem=%zuM\n", mem_mib);
    append(&sc, &slen, &scap, "#SBATCH --cpus-per-task=%d\n", so->cpus_per_task);
    if (so->time && so->time[0])
        append(&sc, &slen, &scap, "#SBATCH --time=%s\n", so->time);
    if (so->partition && so->partition[0])
        append(&sc, &slen, &scap, "#SBATCH --partition=%s\n", so->partition);
    if (so->account && so->account[0])
        append(&sc, &slen, &scap, "#SBATCH --account=%s\n", so->account);
    if (so->gres && so->gres[0])
        append(&sc, &slen, &scap, "#SBATCH --gres=%s\n", so->gres);
    extra_lines(&sc, &slen, &scap, so->extra, 1);
    if (sbatch_output(&sc, &slen, &scap, s->state_dir) != BS_OK) {
        free(tl);
        free(sc);
        return BS_ERR_INPUT;
    }
    append(&sc, &slen, &scap, "# boundsort batch, submission %d: %d recording(s) under ", k, n_which);
    for (const unsigned char *c = (const unsigned char *)s->root; *c; c++) /* a comment: one line whatever ROOT holds */
        append(&sc, &slen, &scap, "%c", *c < 0x20 || *c == 0x7f ? '?' : *c);
    append(&sc, &slen, &scap,
           ", one array task each.\n"
           "# --mem is the largest task's need: its sort budget (planned peak + margin) plus %s of\n"
           "# untracked overhead (code, libraries, thread stacks); SLURM gives every task of an array the\n"
           "# same --mem. Each task passes its own budget to `boundsort sort --mem`, so a recording whose\n"
           "# plan does not fit is refused by boundsort (exit 3, reason in its log) before it reads data,\n"
           "# instead of being killed by the scheduler.\n"
           "# Line SLURM_ARRAY_TASK_ID+1 of TASKS: batch job id, then the `boundsort sort` arguments (tab-separated).\n",
           bs_mem_format(so->overhead, b1, sizeof b1));
    if (so->extra && so->extra[0]) {
        append(&sc, &slen, &scap, "# --sbatch-extra: the setup lines\n");
        extra_lines(&sc, &slen, &scap, so->extra, 0);
    }
    append(&sc, &slen, &scap, "set -u\nBOUNDSORT=");
    sh_quote(&sc, &slen, &scap, exe);
    append(&sc, &slen, &scap, "\nSTATE=");
    sh_quote(&sc, &slen, &scap, s->state_dir);
    append(&sc, &slen, &scap, "\nTASKS=\"$STATE/tasks-%d.tsv\"\n", k);
    append(&sc, &slen, &scap,
           "IFS=$'\\t' read -r -a f < <(sed -n \"$((SLURM_ARRAY_TASK_ID + 1))p\" \"$TASKS\")\n"
           "id=${f[0]}\n"
           "rm -f \"$STATE/tasks/$id.status\"\n"
           "echo \"start $(date +%%s) ${SLURM_JOB_ID} $(hostname -s)\" > \"$STATE/tasks/$id.start\"\n"
           "\"$BOUNDSORT\" sort \"${f[@]:1}\" > \"$STATE/logs/$id.log\" 2>&1\n"
           "rc=$?\n"
           "echo \"exit $rc\" > \"$STATE/tasks/$id.status.tmp\" && mv -f \"$STATE/tasks/$id.status.tmp\" "
           "\"$STATE/tasks/$id.status\"\n"
           "exit $rc\n");
    if (!tl || !sc) {
        free(tl);
        free(sc);
        return bs_error(BS_ERR_MEMORY, "batch: out of memory writing the sbatch script");
    }
    *script = sc;
    if (!submit) {
        free(tl);
        return BS_OK;
    }
    bs_status st = bs_jobs_state_write(s); /* creates the folders */
    if (st == BS_OK)
        st = bs_write_file_atomic(tasks_path, tl, tlen);
    free(tl);
    if (st == BS_OK)
        st = bs_write_file_atomic(script_path, sc, slen);
    if (st != BS_OK)
        return st;
    for (int i = 0; i < n_which; i++)
        bs_jobs_task_clear(s, s->tasks[which[i]].id);
    char out[512], err[1024];
    const char *argv[] = {"sbatch", "--parsable", script_path, NULL};
    int rc = bs_jobs_capture_err(argv, out, sizeof out, err, sizeof err);
    char *end;
    long long job = strtoll(out, &end, 10);
    if (rc != 0 || job <= 0 || (*end != '\0' && *end != '\n' && *end != ';')) {
        if (rc < 0)
            return bs_error(BS_ERR_INPUT, "%s: sbatch could not run (is SLURM installed?); the script is kept for "
                            "`sbatch %s`", script_path, script_path);
        return bs_error(BS_ERR_INPUT, "%s: sbatch failed (exit %d): %s; the script is kept for `sbatch %s`",
                        script_path, rc, err[0] ? err : out[0] ? out : "it printed nothing", script_path);
    }
    for (int i = 0; i < n_which; i++)
        snprintf(s->tasks[which[i]].slurm_id, sizeof s->tasks[which[i]].slurm_id, "%lld_%d", job, i);
    s->n_submissions = k;
    snprintf(s->mode, sizeof s->mode, "slurm");
    return bs_jobs_state_write(s);
}

/* The scheduler's word for a task without a status file; 1 if it decided. */
int bs_jobs_slurm_poll(bs_jobs_state *s, bs_jobs_task *t);
int bs_jobs_slurm_poll(bs_jobs_state *s, bs_jobs_task *t)
{
    char out[8192], state[64] = "", reason[256] = "";
    char job[64];
    snprintf(job, sizeof job, "%s", t->slurm_id);
    const char *q[] = {"squeue", "-h", "-r", "-j", job, "-o", "%i %T %r", NULL};
    if (bs_jobs_capture(q, out, sizeof out) == 0 && sscanf(out, "%*s %63s %255[^\n]", state, reason) >= 1) {
        if (strcmp(state, "PENDING") == 0 || strcmp(state, "CONFIGURING") == 0) {
            t->state = BS_TASK_PENDING;
            if (strcmp(reason, "None") != 0)
                snprintf(t->why, sizeof t->why, "waiting: %s", reason);
            return 1;
        }
        if (strcmp(state, "RUNNING") == 0 || strcmp(state, "COMPLETING") == 0) {
            t->state = BS_TASK_RUNNING;
            return 1;
        }
    }
    state[0] = '\0';
    const char *c[] = {"scontrol", "-o", "show", "job", job, NULL};
    if (bs_jobs_capture(c, out, sizeof out) == 0) {
        const char *p = strstr(out, "JobState=");
        if (p)
            sscanf(p + 9, "%63s", state);
        p = strstr(out, "Reason=");
        if (p)
            sscanf(p + 7, "%255s", reason);
    }
    if (!state[0]) {
        /* forgotten by the controller: the task's own job id from its .start file */
        char path[4300], *text = NULL, raw[64] = "";
        size_t len;
        snprintf(path, sizeof path, "%s/tasks/%d.start", s->state_dir, t->id);
        if (bs_read_text_file(path, 4096, &text, &len) == BS_OK)
            sscanf(text, "start %*s %63s", raw);
        free(text);
        if (raw[0]) {
            const char *a[] = {"sacct", "-c", "-n", "-P", "-j", raw, "-o", "State,ExitCode", NULL};
            if (bs_jobs_capture(a, out, sizeof out) == 0)
                sscanf(out, "%63[^|]", state);
        }
    }
    if (!state[0])
        return 0;
    if (strcmp(state, "PENDING") == 0) {
        t->state = BS_TASK_PENDING;
        snprintf(t->why, sizeof t->why, "%s", reason);
    } else if (strcmp(state, "RUNNING") == 0 || strcmp(state, "COMPLETING") == 0 ||
               strcmp(state, "CONFIGURING") == 0) {
        t->state = BS_TASK_RUNNING;
    } else {
        /* ended without writing its status: killed by the scheduler */
        t->state = BS_TASK_FAILED;
        snprintf(t->why, sizeof t->why, "SLURM: %s%s%s (the task wrote no exit status)", state,
                 reason[0] && strcmp(reason, "None") != 0 ? ", " : "", strcmp(reason, "None") != 0 ? reason : "");
    }
    return 1;
}
