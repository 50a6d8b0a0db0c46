/*
 * discover.c - finding the recordings under ROOT and planning each one
 * (jobs.h, parts 1 and 2).
 *
 * The walk reads each folder's entries, sorts them by name (so the job list,
 * its ids and the SLURM array indices are the same on every run), and:
 *   - a folder holding structure.oebin is an Open Ephys recording: one job per
 *     stream whose kind is neural (bs_openephys_list_streams), not descended;
 *   - a folder holding recording.bin is a raw folder (bs_raw_folder_detect;
 *     the folder itself is the job's REC, read by bs_raw_folder_open like any
 *     `boundsort sort FOLDER`); its sub-folders are still searched (simulate
 *     --spikeglx / --openephys put copies there);
 *   - a file ending in ".ap.bin" is a SpikeGLX probe file, ".nwb" an NWB file;
 *   - hidden entries, symbolic links to folders and OUTROOT are skipped; the
 *     walk stops at BS_JOBS_MAX_DEPTH levels.
 * Every job is opened with the options `sort` will get and planned with
 * bs_sort_plan_make(), under the budget the job will get; failures are
 * recorded as the job's reason (the walk goes on). Paths holding a tab or a
 * newline cannot be written to the SLURM task list and are refused.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "../common/samples.h"
#include "../io/nwb.h"
#include "../io/openephys.h"
#include "../mem/mem.h"
#include "../pipeline/plan.h"
#include "jobs.h"

#define BS_JOBS_MAX_DEPTH 32
#define MIB ((size_t)1 << 20)

typedef struct {
    const bs_jobs_opts *o;
    bs_jobs *b;
    int cap;
    char outroot_real[PATH_MAX];
} walker;

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

bs_status bs_jobs_default_outroot(const char *root, char *out, size_t len)
{
    char abs[PATH_MAX];
    if (!realpath(root, abs))
        return bs_error(BS_ERR_INPUT, "%s: cannot open the batch root: %s", root, strerror(errno));
    if (strcmp(abs, "/") == 0)
        return bs_error(BS_ERR_USAGE, "%s: the root folder has no sibling for its outputs: give -o OUTROOT", root);
    if (snprintf(out, len, "%s_sorted", abs) >= (int)len)
        return bs_error(BS_ERR_INPUT, "%s: path too long", root);
    return BS_OK;
}

static bs_job *new_job(walker *w, const char *kind, const char *rec, const char *rel)
{
    bs_jobs *b = w->b;
    if (b->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        bs_job *nj = bs_mem_realloc(b->jobs, "jobs/list", (size_t)cap * sizeof *nj);
        if (!nj)
            return NULL;
        b->jobs = nj;
        w->cap = cap;
    }
    bs_job *j = &b->jobs[b->n];
    memset(j, 0, sizeof *j);
    j->id = b->n++;
    snprintf(j->kind, sizeof j->kind, "%s", kind);
    snprintf(j->rec, sizeof j->rec, "%s", rec);
    snprintf(j->rel, sizeof j->rel, "%s", rel);
    return j;
}

static void job_fail(bs_job *j, const char *msg)
{
    j->ok = 0;
    snprintf(j->reason, sizeof j->reason, "%s", msg);
}

static void open_options(const bs_job *j, bs_open_options *opt)
{
    memset(opt, 0, sizeof *opt);
    if (j->stream[0])
        opt->stream = j->stream;
}

static size_t round_up_mib(double bytes)
{
    double m = bytes / (double)MIB;
    size_t whole = (size_t)m;
    if ((double)whole < m)
        whole++;
    return whole * MIB;
}

/* Open and plan one job (its output path is already set). */
static void plan_job(const bs_jobs_opts *o, bs_job *j)
{
    if (strpbrk(j->rec, "\t\n") || strpbrk(j->out, "\t\n")) {
        job_fail(j, "the path holds a tab or a newline, which the task list cannot carry: rename it");
        return;
    }
    bs_open_options opt;
    open_options(j, &opt);
    bs_recording rec;
    bs_status st = bs_recording_open(j->rec, &opt, &rec);
    if (st != BS_OK) {
        job_fail(j, bs_last_error());
        return;
    }
    uint64_t bytes = 0;
    if (bs_file_size(rec.data_path, &bytes) == BS_OK)
        j->bytes = bytes;
    j->duration_s = bs_recording_duration_s(&rec);
    j->n_chan = rec.probe.n_chan;
    j->fs_hz = rec.fs_hz;
    bs_sort_params sp = o->sp;
    if (o->batch_s > 0)
        sp.batch_samples = bs_seconds_to_samples(o->batch_s, rec.fs_hz);
    st = bs_sort_window(&rec, &sp); /* the part sort will read (tmin_s / tmax_s) */
    if (st != BS_OK) {
        bs_recording_close(&rec);
        job_fail(j, bs_last_error());
        return;
    }
    size_t overhead = bs_plan_overhead_bytes(o->threads);
    size_t cap = o->mem_per_task;
    if (!cap)
        cap = o->total_mem > overhead + MIB ? o->total_mem - overhead : MIB;
    bs_sort_plan plan;
    st = bs_sort_plan_make(&rec, &sp, o->threads, cap, 0, &plan);
    bs_recording_close(&rec);
    if (st != BS_OK) {
        job_fail(j, bs_last_error());
        return;
    }
    j->ok = 1;
    j->plan_peak = plan.peak;
    j->sort_mem = o->mem_per_task ? o->mem_per_task : round_up_mib((double)plan.peak * (1.0 + o->margin));
    if (j->sort_mem > cap)
        j->sort_mem = cap;
    j->job_mem = j->sort_mem + overhead;
    /* the plan as sort will make it, under the budget sort will get */
    bs_open_options opt2;
    open_options(j, &opt2);
    if (bs_recording_open(j->rec, &opt2, &rec) == BS_OK) {
        if (bs_sort_window(&rec, &sp) == BS_OK && bs_sort_plan_make(&rec, &sp, o->threads, j->sort_mem, 0, &plan) == BS_OK) {
            j->plan_fits = plan.fits;
            if (!plan.fits && bs_sort_plan_check(&plan, -1) != BS_OK)
                snprintf(j->reason, sizeof j->reason, "boundsort will refuse it (exit 3): %s", bs_last_error());
        }
        bs_recording_close(&rec);
    }
}

/* Output path: the relative path, made unique in the list. */
static void set_out(walker *w, bs_job *j)
{
    for (int k = 0; k < j->id; k++)
        if (strcmp(w->b->jobs[k].rel, j->rel) == 0) {
            size_t n = strlen(j->rel);
            snprintf(j->rel + n, sizeof j->rel - n, "-%s", j->kind);
            break;
        }
    if (snprintf(j->out, sizeof j->out, "%s/%s", w->b->outroot, j->rel) >= (int)sizeof j->out)
        job_fail(j, "the output path is too long");
}

static bs_status add_job(walker *w, const char *kind, const char *rec, const char *rel, const char *stream)
{
    bs_job *j = new_job(w, kind, rec, rel);
    if (!j)
        return bs_error(BS_ERR_MEMORY, "batch: out of memory listing recordings");
    if (stream)
        snprintf(j->stream, sizeof j->stream, "%s", stream);
    set_out(w, j);
    if (j->out[0] == '\0')
        return BS_OK;
    plan_job(w->o, j);
    return BS_OK;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* rel = path under ROOT ("" for ROOT itself) */
static bs_status walk(walker *w, const char *dir, const char *rel, int depth)
{
    if (depth > BS_JOBS_MAX_DEPTH)
        return BS_OK;
    char real[PATH_MAX];
    if (w->outroot_real[0] && realpath(dir, real) && strcmp(real, w->outroot_real) == 0)
        return BS_OK;
    char path[4200], relpath[1200];
    /* Open Ephys recording folder */
    if (bs_path_join(path, sizeof path, dir, "structure.oebin") == BS_OK && bs_is_file(path)) {
        bs_oe_stream_info *list = NULL;
        int n = 0;
        if (bs_openephys_list_streams(dir, &list, &n) != BS_OK) {
            bs_job *j = new_job(w, "openephys", dir, rel[0] ? rel : "recording");
            if (!j)
                return bs_error(BS_ERR_MEMORY, "batch: out of memory listing recordings");
            set_out(w, j);
            job_fail(j, bs_last_error());
            return BS_OK;
        }
        bs_status st = BS_OK;
        for (int s = 0; s < n && st == BS_OK; s++) {
            if (list[s].kind != BS_OE_STREAM_NEURAL)
                continue;
            char name[256];
            snprintf(name, sizeof name, "%s", list[s].name);
            for (char *c = name; *c; c++)
                if (*c == '/' || *c == ' ')
                    *c = '_';
            snprintf(relpath, sizeof relpath, "%s%s%s", rel, rel[0] ? "/" : "", name);
            st = add_job(w, "openephys", dir, relpath, list[s].name);
        }
        free(list);
        return st;
    }
    DIR *d = opendir(dir);
    if (!d)
        return BS_OK; /* unreadable folders are not recordings */
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    bs_status st = BS_OK;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                st = bs_error(BS_ERR_MEMORY, "batch: out of memory reading %s", dir);
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) {
            st = bs_error(BS_ERR_MEMORY, "batch: out of memory reading %s", dir);
            break;
        }
        n++;
    }
    closedir(d);
    if (st == BS_OK && n)
        qsort(names, n, sizeof *names, cmp_names);
    /* raw folder (recording.bin + recording.json + probe file): the folder is the job's REC */
    if (st == BS_OK && bs_raw_folder_detect(dir)) {
        snprintf(relpath, sizeof relpath, "%s%srecording", rel, rel[0] ? "/" : "");
        st = add_job(w, "raw", dir, relpath, NULL);
    }
    for (size_t i = 0; i < n && st == BS_OK; i++) {
        const char *name = names[i];
        struct stat ls, fs;
        if (bs_path_join(path, sizeof path, dir, name) != BS_OK || lstat(path, &ls) != 0)
            continue;
        snprintf(relpath, sizeof relpath, "%s%s%s", rel, rel[0] ? "/" : "", name);
        if (S_ISDIR(ls.st_mode)) {
            st = walk(w, path, relpath, depth + 1);
            continue;
        }
        if (stat(path, &fs) != 0 || !S_ISREG(fs.st_mode))
            continue;
        size_t rl = strlen(relpath);
        if (ends_with(name, ".ap.bin")) {
            relpath[rl - 7] = '\0';
            st = add_job(w, "spikeglx", path, relpath, NULL);
        } else if (ends_with(name, ".nwb")) {
            relpath[rl - 4] = '\0';
            st = add_job(w, "nwb", path, relpath, NULL);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return st;
}

bs_status bs_jobs_discover(const bs_jobs_opts *o, bs_jobs *b)
{
    memset(b, 0, sizeof *b);
    struct stat st;
    if (!realpath(o->root, b->root) || stat(b->root, &st) != 0 || !S_ISDIR(st.st_mode))
        return bs_error(BS_ERR_INPUT, "%s: expected a folder holding recordings", o->root);
    if (o->outroot) {
        if (o->outroot[0] == '/') {
            snprintf(b->outroot, sizeof b->outroot, "%s", o->outroot);
        } else {
            char cwd[PATH_MAX];
            if (!getcwd(cwd, sizeof cwd) ||
                snprintf(b->outroot, sizeof b->outroot, "%s/%s", cwd, o->outroot) >= (int)sizeof b->outroot)
                return bs_error(BS_ERR_INPUT, "%s: cannot make the output path absolute", o->outroot);
        }
    } else {
        BS_TRY(bs_jobs_default_outroot(o->root, b->outroot, sizeof b->outroot));
    }
    size_t ol = strlen(b->outroot);
    while (ol > 1 && b->outroot[ol - 1] == '/')
        b->outroot[--ol] = '\0';
    if (strcmp(b->outroot, b->root) == 0)
        return bs_error(BS_ERR_USAGE, "%s: OUTROOT must differ from ROOT", o->outroot ? o->outroot : o->root);
    snprintf(b->state_dir, sizeof b->state_dir, "%s/%s", b->outroot, BS_JOBS_STATE_DIR);
    walker w = {.o = o, .b = b};
    if (!realpath(b->outroot, w.outroot_real))
        w.outroot_real[0] = '\0';
    bs_status s = walk(&w, b->root, "", 0);
    if (s != BS_OK)
        bs_jobs_free(b);
    return s;
}

void bs_jobs_free(bs_jobs *b)
{
    bs_mem_free(b->jobs);
    b->jobs = NULL;
    b->n = 0;
}
