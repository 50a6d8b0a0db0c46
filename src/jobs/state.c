/*
 * state.c - the batch state folder OUTROOT/.batch (jobs.h, part 3) and the
 * listing of discovered recordings.
 *
 * state.json is written only by the batch command (atomically: temporary
 * name, fsync, rename), so a task never races it. Each task reports through
 * two files of its own: tasks/<id>.start when it begins and tasks/<id>.status
 * ("exit N") when it ends; the status is written under a temporary name and
 * renamed, so a reader sees it whole or not at all. Polling joins them:
 *   status file, exit 0          -> done
 *   status file, exit != 0       -> failed; reason = the last line of
 *                                   logs/<id>.log that starts "boundsort:"
 *                                   (what the sort printed), else the code
 *   no status, SLURM submission  -> the scheduler's state (slurm.c): pending,
 *                                   running, or failed with its state
 *                                   (OUT_OF_MEMORY, TIMEOUT, CANCELLED...)
 *   no status, local, started    -> failed: interrupted (the batch command
 *                                   was stopped while it ran)
 *   never started                -> not run
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "../mem/mem.h"
#include "jobs.h"

#define STATE_MAX_BYTES ((size_t)256 << 20)

static char *xstrdup(const char *s)
{
    return strdup(s ? s : "");
}

/* The sort arguments of a job: sort REC -o OUT --mem B --threads T --resume [--stream S] [--no-qc]
 * [--params FILE] [--no-drift] [--device cuda:N] [--gpu-mem G] [--disk D] ... (a raw
 * folder's REC is the folder: its recording.json and probe file describe it). */
static bs_status job_args(const bs_job *j, const bs_jobs_opts *o, bs_jobs_task *t)
{
    char buf[BS_JOBS_MAX_ARGS][64];
    const char *a[BS_JOBS_MAX_ARGS + 64];
    int n = 0, nb = 0;
#define NUM(fmt, v) (snprintf(buf[nb], sizeof buf[nb], fmt, v), buf[nb++])
    a[n++] = "sort";
    a[n++] = j->rec;
    a[n++] = "-o";
    a[n++] = j->out;
    a[n++] = "--mem";
    a[n++] = NUM("%zuM", j->sort_mem >> 20);
    a[n++] = "--threads";
    a[n++] = NUM("%d", o->threads);
    a[n++] = "--resume";
    a[n++] = "-q";
    if (j->stream[0]) {
        a[n++] = "--stream";
        a[n++] = j->stream;
    }
    if (o->batch_s > 0) {
        a[n++] = "--batch-seconds";
        a[n++] = NUM("%.17g", o->batch_s);
    }
    if (o->params_path) { /* before the options that override it */
        a[n++] = "--params";
        a[n++] = o->params_path;
    }
    if (o->sp.no_drift)
        a[n++] = "--no-drift";
    bs_sort_params def;
    bs_sort_default_params(&def);
    if (o->sp.max_center_spikes != def.max_center_spikes) {
        a[n++] = "--max-center-spikes";
        a[n++] = NUM("%lld", (long long)o->sp.max_center_spikes);
    }
    if (o->sp.device >= 0) { /* each task checks its own GPU (a SLURM task's, with --gres gpu:1) */
        a[n++] = "--device";
        a[n++] = NUM("cuda:%d", o->sp.device);
    }
    if (o->sp.gpu_mem_budget) {
        a[n++] = "--gpu-mem";
        a[n++] = NUM("%zuM", o->sp.gpu_mem_budget >> 20);
    }
    if (o->sp.disk_budget) { /* each task's own OUT */
        a[n++] = "--disk";
        a[n++] = NUM("%llu", (unsigned long long)o->sp.disk_budget);
    }
    if (o->no_qc)
        a[n++] = "--no-qc";
    if (o->no_report)
        a[n++] = "--no-report";
#undef NUM
    if (n + o->n_extra > BS_JOBS_MAX_ARGS + 48)
        return bs_error(BS_ERR_USAGE, "batch: too many extra sort options (at most 48)");
    for (int i = 0; i < o->n_extra; i++)
        a[n++] = o->extra[i];
    t->args = calloc((size_t)n, sizeof *t->args);
    if (!t->args)
        return bs_error(BS_ERR_MEMORY, "batch: out of memory");
    for (int i = 0; i < n; i++)
        if (!(t->args[t->n_args++] = xstrdup(a[i])))
            return bs_error(BS_ERR_MEMORY, "batch: out of memory");
    return BS_OK;
}

bs_status bs_jobs_state_from(const bs_jobs *b, const bs_jobs_opts *o, const char *mode, bs_jobs_state *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->state_dir, sizeof s->state_dir, "%s", b->state_dir);
    snprintf(s->root, sizeof s->root, "%s", b->root);
    snprintf(s->outroot, sizeof s->outroot, "%s", b->outroot);
    snprintf(s->mode, sizeof s->mode, "%s", mode);
    s->tasks = calloc((size_t)(b->n ? b->n : 1), sizeof *s->tasks);
    if (!s->tasks)
        return bs_error(BS_ERR_MEMORY, "batch: out of memory");
    s->n = b->n;
    for (int i = 0; i < b->n; i++) {
        const bs_job *j = &b->jobs[i];
        bs_jobs_task *t = &s->tasks[i];
        t->id = j->id;
        snprintf(t->rec, sizeof t->rec, "%s", j->rec);
        snprintf(t->out, sizeof t->out, "%s", j->out);
        snprintf(t->stream, sizeof t->stream, "%s", j->stream);
        t->ok = j->ok;
        snprintf(t->reason, sizeof t->reason, "%s", j->reason);
        t->sort_mem = j->sort_mem;
        t->exit_code = -1;
        if (j->ok)
            BS_TRY(job_args(j, o, t));
    }
    return BS_OK;
}

static void add_str(cJSON *o, const char *k, const char *v)
{
    cJSON_AddStringToObject(o, k, v ? v : "");
}

char *bs_jobs_state_json(const bs_jobs_state *s)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "format_version", 1);
    add_str(r, "root", s->root);
    add_str(r, "outroot", s->outroot);
    add_str(r, "mode", s->mode);
    cJSON_AddNumberToObject(r, "n_submissions", s->n_submissions);
    cJSON *sl = cJSON_AddObjectToObject(r, "slurm");
    cJSON_AddNumberToObject(sl, "cpus_per_task", s->cpus_per_task);
    add_str(sl, "time", s->time);
    add_str(sl, "partition", s->partition);
    add_str(sl, "account", s->account);
    add_str(sl, "gres", s->gres);
    add_str(sl, "job_name", s->job_name);
    cJSON_AddNumberToObject(sl, "max_running", s->max_running);
    add_str(sl, "sbatch_extra", s->sbatch_extra ? s->sbatch_extra : "");
    cJSON_AddNumberToObject(sl, "overhead_bytes", (double)s->overhead);
    cJSON *ja = cJSON_AddArrayToObject(r, "jobs");
    for (int i = 0; i < s->n; i++) {
        const bs_jobs_task *t = &s->tasks[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", t->id);
        add_str(o, "recording", t->rec);
        add_str(o, "stream", t->stream);
        add_str(o, "out", t->out);
        cJSON_AddBoolToObject(o, "sortable", t->ok);
        add_str(o, "reason", t->reason);
        cJSON_AddNumberToObject(o, "sort_mem_bytes", (double)t->sort_mem);
        add_str(o, "slurm_id", t->slurm_id);
        cJSON *args = cJSON_AddArrayToObject(o, "sort_args");
        for (int a = 0; a < t->n_args; a++)
            cJSON_AddItemToArray(args, cJSON_CreateString(t->args[a]));
        cJSON_AddItemToArray(ja, o);
    }
    char *text = cJSON_Print(r);
    cJSON_Delete(r);
    return text;
}

bs_status bs_jobs_state_write(const bs_jobs_state *s)
{
    char path[4300];
    BS_TRY(bs_mkdir_p(s->state_dir));
    snprintf(path, sizeof path, "%s/tasks", s->state_dir);
    BS_TRY(bs_mkdir_p(path));
    snprintf(path, sizeof path, "%s/logs", s->state_dir);
    BS_TRY(bs_mkdir_p(path));
    char *text = bs_jobs_state_json(s);
    if (!text)
        return bs_error(BS_ERR_MEMORY, "batch: out of memory writing the state");
    snprintf(path, sizeof path, "%s/state.json", s->state_dir);
    bs_status st = bs_write_file_atomic(path, text, strlen(text));
    free(text);
    return st;
}

static const char *get_str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int get_num(const cJSON *o, const char *k, double *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(x))
        return 0;
    *v = x->valuedouble;
    return 1;
}

#define COPY(dst, src) snprintf((dst), sizeof(dst), "%s", (src) ? (src) : "")

bs_status bs_jobs_state_read(const char *outroot, bs_jobs_state *s)
{
    memset(s, 0, sizeof *s);
    char path[4300], *text = NULL;
    size_t len;
    if (snprintf(s->state_dir, sizeof s->state_dir, "%s/%s", outroot, BS_JOBS_STATE_DIR) >= (int)sizeof s->state_dir)
        return bs_error(BS_ERR_INPUT, "%s: path too long", outroot);
    snprintf(path, sizeof path, "%s/state.json", s->state_dir);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return bs_error(BS_ERR_INPUT, "%s: no batch state (%s): run `boundsort batch ROOT` first", path,
                        strerror(errno));
    BS_TRY(bs_read_text_file(path, STATE_MAX_BYTES, &text, &len));
    cJSON *r = cJSON_ParseWithLength(text, len);
    free(text);
    bs_status st = BS_OK;
    const cJSON *ja = r ? cJSON_GetObjectItemCaseSensitive(r, "jobs") : NULL;
    const char *mode = r ? get_str(r, "mode") : NULL;
    double d;
    if (!r || !cJSON_IsObject(r))
        st = bs_error(BS_ERR_INPUT, "%s: expected a JSON object", path);
    else if (!cJSON_IsArray(ja))
        st = bs_error(BS_ERR_INPUT, "%s: field 'jobs': expected an array", path);
    else if (!mode || (strcmp(mode, "local") != 0 && strcmp(mode, "slurm") != 0))
        st = bs_error(BS_ERR_INPUT, "%s: field 'mode': expected \"local\" or \"slurm\"", path);
    if (st != BS_OK) {
        cJSON_Delete(r);
        return st;
    }
    COPY(s->root, get_str(r, "root"));
    COPY(s->outroot, get_str(r, "outroot"));
    COPY(s->mode, mode);
    if (get_num(r, "n_submissions", &d) && d >= 0 && d < 1e6)
        s->n_submissions = (int)d;
    const cJSON *sl = cJSON_GetObjectItemCaseSensitive(r, "slurm");
    if (cJSON_IsObject(sl)) {
        if (get_num(sl, "cpus_per_task", &d) && d >= 0 && d < 1e5)
            s->cpus_per_task = (int)d;
        COPY(s->time, get_str(sl, "time"));
        COPY(s->partition, get_str(sl, "partition"));
        COPY(s->account, get_str(sl, "account"));
        COPY(s->gres, get_str(sl, "gres"));
        COPY(s->job_name, get_str(sl, "job_name"));
        if (get_num(sl, "max_running", &d) && d >= 0 && d <= 1e6)
            s->max_running = (int)d;
        const char *ex = get_str(sl, "sbatch_extra");
        if (ex && ex[0] && !(s->sbatch_extra = strdup(ex))) {
            cJSON_Delete(r);
            return bs_error(BS_ERR_MEMORY, "batch: out of memory");
        }
        if (get_num(sl, "overhead_bytes", &d) && d >= 0 && d < 1e18)
            s->overhead = (size_t)d;
    }
    int n = cJSON_GetArraySize(ja);
    s->tasks = calloc((size_t)(n ? n : 1), sizeof *s->tasks);
    if (!s->tasks) {
        cJSON_Delete(r);
        return bs_error(BS_ERR_MEMORY, "batch: out of memory");
    }
    const cJSON *o;
    cJSON_ArrayForEach(o, ja)
    {
        bs_jobs_task *t = &s->tasks[s->n];
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "sort_args");
        const cJSON *ok = cJSON_GetObjectItemCaseSensitive(o, "sortable");
        if (!cJSON_IsObject(o) || !get_num(o, "id", &d) || d != s->n || !cJSON_IsArray(args) || !cJSON_IsBool(ok) ||
            !get_str(o, "recording") || !get_str(o, "out")) {
            st = bs_error(BS_ERR_INPUT, "%s: jobs[%d]: expected id %d, recording, out, sortable and sort_args", path,
                          s->n, s->n);
            break;
        }
        t->id = s->n++;
        t->exit_code = -1;
        t->ok = cJSON_IsTrue(ok);
        COPY(t->rec, get_str(o, "recording"));
        COPY(t->out, get_str(o, "out"));
        COPY(t->stream, get_str(o, "stream"));
        COPY(t->reason, get_str(o, "reason"));
        COPY(t->slurm_id, get_str(o, "slurm_id"));
        if (get_num(o, "sort_mem_bytes", &d) && d >= 0 && d < 1e18)
            t->sort_mem = (size_t)d;
        int na = cJSON_GetArraySize(args);
        if (na > BS_JOBS_MAX_ARGS + 64 || (t->ok && na < 4)) {
            st = bs_error(BS_ERR_INPUT, "%s: jobs[%d]: field 'sort_args': expected 4 to %d arguments", path, t->id,
                          BS_JOBS_MAX_ARGS + 64);
            break;
        }
        t->args = calloc((size_t)(na ? na : 1), sizeof *t->args);
        if (!t->args) {
            st = bs_error(BS_ERR_MEMORY, "batch: out of memory");
            break;
        }
        const cJSON *a;
        cJSON_ArrayForEach(a, args)
        {
            if (!cJSON_IsString(a) || strpbrk(a->valuestring, "\t\n")) {
                st = bs_error(BS_ERR_INPUT, "%s: jobs[%d]: field 'sort_args': expected strings without tabs", path,
                              t->id);
                break;
            }
            if (!(t->args[t->n_args++] = xstrdup(a->valuestring))) {
                st = bs_error(BS_ERR_MEMORY, "batch: out of memory");
                break;
            }
        }
        if (st != BS_OK)
            break;
    }
    cJSON_Delete(r);
    if (st != BS_OK)
        bs_jobs_state_free(s);
    return st;
}

void bs_jobs_state_free(bs_jobs_state *s)
{
    for (int i = 0; i < s->n; i++) {
        for (int a = 0; a < s->tasks[i].n_args; a++)
            free(s->tasks[i].args[a]);
        free(s->tasks[i].args);
    }
    free(s->tasks);
    s->tasks = NULL;
    s->n = 0;
    free(s->sbatch_extra);
    s->sbatch_extra = NULL;
}

static void task_file(const bs_jobs_state *s, int id, const char *ext, char *buf, size_t len)
{
    snprintf(buf, len, "%s/tasks/%d.%s", s->state_dir, id, ext);
}

void bs_jobs_log_path(const bs_jobs_state *s, int id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/logs/%d.log", s->state_dir, id);
}

bs_status bs_jobs_task_mark_start(const bs_jobs_state *s, int id, const char *who)
{
    char path[4300], text[256], host[128] = "?";
    task_file(s, id, "start", path, sizeof path);
    gethostname(host, sizeof host - 1);
    snprintf(text, sizeof text, "start %lld %s %s\n", (long long)time(NULL), who, host);
    return bs_write_file_atomic(path, text, strlen(text));
}

bs_status bs_jobs_task_mark_exit(const bs_jobs_state *s, int id, int code)
{
    char path[4300], text[64];
    task_file(s, id, "status", path, sizeof path);
    snprintf(text, sizeof text, "exit %d\n", code);
    return bs_write_file_atomic(path, text, strlen(text));
}

void bs_jobs_task_clear(const bs_jobs_state *s, int id)
{
    char path[4300];
    task_file(s, id, "status", path, sizeof path);
    unlink(path);
    task_file(s, id, "start", path, sizeof path);
    unlink(path);
}

/* The last line of the log that starts with "boundsort:" (what the sort printed on failure). */
static void log_reason(const bs_jobs_state *s, int id, char *why, size_t len)
{
    char path[4300], line[2048];
    bs_jobs_log_path(s, id, path, sizeof path);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return;
    while (fgets(line, sizeof line, fp)) {
        if (strncmp(line, "boundsort:", 10) != 0)
            continue;
        line[strcspn(line, "\n")] = '\0';
        const char *m = line + 10;
        while (*m == ' ')
            m++;
        size_t k = strlen(m) < len ? strlen(m) : len - 1;
        memcpy(why, m, k);
        why[k] = '\0';
    }
    fclose(fp);
}

int bs_jobs_slurm_poll(bs_jobs_state *s, bs_jobs_task *t); /* slurm.c */

void bs_jobs_state_poll(bs_jobs_state *s)
{
    for (int i = 0; i < s->n; i++) {
        bs_jobs_task *t = &s->tasks[i];
        t->exit_code = -1;
        t->why[0] = '\0';
        if (!t->ok) {
            t->state = BS_TASK_SKIPPED;
            snprintf(t->why, sizeof t->why, "%s", t->reason);
            continue;
        }
        char path[4300], *text = NULL;
        size_t len;
        struct stat sb;
        task_file(s, t->id, "status", path, sizeof path);
        int code;
        if (stat(path, &sb) == 0 && bs_read_text_file(path, 256, &text, &len) == BS_OK &&
            sscanf(text, "exit %d", &code) == 1) {
            t->exit_code = code;
            t->state = code == 0 ? BS_TASK_DONE : BS_TASK_FAILED;
            if (code != 0) {
                log_reason(s, t->id, t->why, sizeof t->why);
                if (!t->why[0])
                    snprintf(t->why, sizeof t->why, code > 128 ? "killed by signal %d" : "exit code %d",
                             code > 128 ? code - 128 : code);
            }
            free(text);
            continue;
        }
        free(text);
        if (t->slurm_id[0] && bs_jobs_slurm_poll(s, t))
            continue;
        task_file(s, t->id, "start", path, sizeof path);
        if (stat(path, &sb) == 0) {
            t->state = BS_TASK_FAILED;
            snprintf(t->why, sizeof t->why, "%s",
                     t->slurm_id[0] ? "started, but the scheduler no longer knows it and it wrote no status"
                                    : "interrupted: started but wrote no exit status");
        } else {
            t->state = BS_TASK_NOT_RUN;
        }
    }
}

const char *bs_task_state_name(bs_task_state st)
{
    static const char *const names[] = {"not run", "pending", "running", "done", "failed", "skipped"};
    return names[st];
}

int bs_jobs_print_status(const bs_jobs_state *s, FILE *out, int json)
{
    int count[6] = {0};
    for (int i = 0; i < s->n; i++)
        count[s->tasks[i].state]++;
    int not_done = s->n - count[BS_TASK_DONE];
    if (json) {
        cJSON *r = cJSON_CreateObject();
        add_str(r, "outroot", s->outroot);
        add_str(r, "mode", s->mode);
        cJSON *c = cJSON_AddObjectToObject(r, "counts");
        for (int k = 0; k < 6; k++)
            cJSON_AddNumberToObject(c, bs_task_state_name((bs_task_state)k), count[k]);
        cJSON *ja = cJSON_AddArrayToObject(r, "jobs");
        for (int i = 0; i < s->n; i++) {
            const bs_jobs_task *t = &s->tasks[i];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "id", t->id);
            add_str(o, "recording", t->rec);
            add_str(o, "stream", t->stream);
            add_str(o, "out", t->out);
            add_str(o, "state", bs_task_state_name(t->state));
            if (t->exit_code >= 0)
                cJSON_AddNumberToObject(o, "exit_code", t->exit_code);
            else
                cJSON_AddNullToObject(o, "exit_code");
            add_str(o, "reason", t->why);
            add_str(o, "slurm_id", t->slurm_id);
            cJSON_AddItemToArray(ja, o);
        }
        char *text = cJSON_Print(r);
        cJSON_Delete(r);
        if (text) {
            fprintf(out, "%s\n", text);
            free(text);
        }
        return not_done;
    }
    fprintf(out, "batch %s (%s)\n", s->outroot, s->mode);
    for (int i = 0; i < s->n; i++) {
        const bs_jobs_task *t = &s->tasks[i];
        const char *rel = t->out;
        size_t ol = strlen(s->outroot);
        if (strncmp(rel, s->outroot, ol) == 0 && rel[ol] == '/')
            rel += ol + 1;
        fprintf(out, "%3d  %-8s", t->id, bs_task_state_name(t->state));
        if (t->slurm_id[0])
            fprintf(out, " %-10s", t->slurm_id);
        fprintf(out, " %s", rel);
        if (t->exit_code > 0)
            fprintf(out, "  (exit %d)", t->exit_code);
        if (t->why[0])
            fprintf(out, "\n       %s", t->why);
        fputc('\n', out);
    }
    fprintf(out, "%d done, %d failed, %d running, %d pending, %d not run, %d skipped (not sortable)\n",
            count[BS_TASK_DONE], count[BS_TASK_FAILED], count[BS_TASK_RUNNING], count[BS_TASK_PENDING],
            count[BS_TASK_NOT_RUN], count[BS_TASK_SKIPPED]);
    return not_done;
}
