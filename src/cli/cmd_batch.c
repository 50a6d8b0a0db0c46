/*
 * cmd_batch.c - `boundsort batch ROOT`: every recording under ROOT, sorted
 * locally (one after another, or several at once within a memory total) or
 * as one SLURM job array (src/jobs/jobs.h has the mechanism).
 *
 * Actions: the default discovers, lists and runs locally; --list only lists
 * (--json: as JSON); --dry-run lists and prints the sort command lines
 * (local) or the sbatch script (--slurm) and runs nothing; --slurm submits;
 * --status reads OUTROOT/.batch and the scheduler; --retry-failed reruns
 * (locally) or resubmits (SLURM) the failed jobs of the recorded batch.
 * Exit code: 0 when every job is done (for --status: when the report was
 * printed), else the exit code of the first job that failed (2 for a
 * recording that cannot be sorted), 1 usage, 2 bad ROOT or state.
 */
#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "../common/fileio.h"
#include "../jobs/jobs.h"
#include "../mem/mem.h"
#include "../pipeline/params.h"
#include "../pipeline/plan.h"
#include "cli.h"

static const char *USAGE =
    "usage: boundsort batch ROOT [-o OUTROOT] [--list | --dry-run | --status | --retry-failed] [--json]\n"
    "                            [--jobs N] [--mem TOTAL] [--mem-per-task SIZE] [--margin PCT] [--threads N]\n"
    "                            [--batch-seconds S] [--max-center-spikes N] [--params FILE] [--no-drift] [--no-qc]\n"
    "                            [--no-report] [--restart]\n"
    "                            [--slurm [--cpus-per-task N] [--time T] [--partition P] [--account A]\n"
    "                                     [--gres G] [--job-name NAME] [--max-running N] [--sbatch-extra FILE]]\n"
    "                            [-q] [-- SORT OPTIONS...]\n"
    "\n"
    "Finds every recording under ROOT and sorts each one with `boundsort sort` into OUTROOT, mirroring\n"
    "the input tree. Recordings: SpikeGLX *.ap.bin (with .meta; one job per probe), Open Ephys folders\n"
    "with structure.oebin (one job per neural stream), *.nwb files, and raw folders holding recording.bin\n"
    "+ recording.json (fs_hz; optional n_chan, dtype, uv_per_bit, offset, header_bytes) + probe.json or\n"
    "probe.prb (what boundsort simulate writes). One that cannot be opened is listed with the reason.\n"
    "State, logs and SLURM files: OUTROOT/.batch/.\n"
    "\n"
    "  -o, --out OUTROOT    outputs (default: ROOT's sibling folder <ROOT>_sorted)\n"
    "  --list               list the recordings (size, duration, channels, planned memory) and stop\n"
    "  --json               the listing or the status as JSON; with --dry-run, the jobs and their sort\n"
    "                       arguments as state.json would hold them (what pipeline/Snakefile reads), and\n"
    "                       with --slurm also the sbatch script (\"sbatch_script\")\n"
    "  --dry-run            list, then print the sort commands (or with --slurm the sbatch script); run nothing\n"
    "  --status             done / failed (with the reason) / running / pending per recording\n"
    "  --retry-failed       rerun only the failed (or interrupted) jobs of the recorded batch (sort --resume)\n"
    "  --restart            start a new batch over an OUTROOT that holds one (finished stages are reused)\n"
    "  --jobs N             local: jobs at once (default 1), within --mem\n"
    "  --mem TOTAL          local: memory all running jobs may use together, e.g. 16G (default: 3/4 of RAM)\n"
    "  --mem-per-task SIZE  every job's sort --mem (default: its planned peak + margin)\n"
    "  --margin PCT         added to each planned peak, percent (default 25)\n"
    "  --threads N          threads per job (default: local cores / jobs; SLURM --cpus-per-task)\n"
    "  --batch-seconds S, --max-center-spikes N, --params FILE, --no-drift, --no-qc, --no-report:\n"
    "                       passed to every sort\n"
    "  --slurm              submit one SLURM job array (one task per recording; --mem = the largest job's\n"
    "                       need, as SLURM gives every task of an array the same memory; each task gets its\n"
    "                       own sort --mem, so a plan that does not fit is refused with exit 3, not killed)\n"
    "  --cpus-per-task N    SLURM: CPUs per task = sort threads (default 4)\n"
    "  --time T, --partition P, --account A, --gres G (e.g. gpu:1), --job-name NAME: passed to sbatch\n"
    "  --max-running N      SLURM: at most N tasks of the array run at once (--array=0-K%N)\n"
    "  --sbatch-extra FILE  SLURM: its #SBATCH lines are added to the script's (not --array, --output,\n"
    "                       --mem*), its other lines (module load ..., conda activate ...) run before each sort\n"
    "  -q                   no progress lines\n"
    "  -- SORT OPTIONS      the rest is appended to every `boundsort sort` command\n"
    "\n"
    "Exit code: 0 when every job is done, else the first failed job's exit code (2: not sortable).\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "boundsort batch: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", USAGE);
    return BS_ERR_USAGE;
}

typedef struct {
    const char *root, *outroot;
    int list, json, dry_run, status, retry, restart, slurm, quiet;
    long long jobs, cpus, max_running;
    const char *time, *partition, *account, *gres, *job_name;
    char *sbatch_extra; /* --sbatch-extra's text (heap), NULL: none */
} batch_cli;

static int state_exists(const char *outroot)
{
    char path[4300];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s/state.json", outroot, BS_JOBS_STATE_DIR);
    return stat(path, &st) == 0;
}

/* Exit code of a polled batch: 0 if all done, else the first failure's code. */
static int batch_exit(const bs_jobs_state *s)
{
    for (int i = 0; i < s->n; i++) {
        const bs_jobs_task *t = &s->tasks[i];
        if (t->state == BS_TASK_SKIPPED)
            return BS_ERR_INPUT;
        if (t->state == BS_TASK_FAILED)
            return t->exit_code > 0 && t->exit_code <= BS_ERR_INTERNAL ? t->exit_code : BS_ERR_INTERNAL;
        if (t->state != BS_TASK_DONE)
            return BS_ERR_INTERNAL;
    }
    return BS_OK;
}

static int run_local(bs_jobs_state *s, const int *which, int n, const batch_cli *c, size_t total, int threads)
{
    bs_jobs_run_local(s, which, n, (int)c->jobs, total, threads, c->quiet);
    bs_jobs_state_poll(s);
    if (!c->quiet)
        bs_jobs_print_status(s, stdout, 0);
    return batch_exit(s);
}

static int submit_slurm(bs_jobs_state *s, const int *which, int n, const batch_cli *c)
{
    bs_slurm_opts so = {s->cpus_per_task, s->time,        s->partition,    s->account,
                        s->gres,          s->job_name,    s->max_running, s->sbatch_extra, s->overhead};
    char *script = NULL;
    bs_status st = bs_jobs_slurm(s, which, n, &so, !c->dry_run, &script);
    if (st != BS_OK) {
        free(script);
        return bs_cli_fail(st);
    }
    if (c->dry_run && c->json) { /* the jobs as state.json would hold them, and the script */
        char *text = bs_jobs_state_json(s);
        cJSON *r = text ? cJSON_Parse(text) : NULL;
        char *out = r && cJSON_AddStringToObject(r, "sbatch_script", script) ? cJSON_Print(r) : NULL;
        if (out)
            printf("%s\n", out);
        cJSON_free(out);
        cJSON_Delete(r);
        free(text);
        if (!out) {
            free(script);
            return bs_cli_fail(bs_error(BS_ERR_MEMORY, "batch: out of memory"));
        }
    } else if (c->dry_run) {
        printf("%s", script);
    } else if (!c->quiet) {
        printf("submitted %d task(s) as SLURM array job %.*s (script %s/submit-%d.sbatch)\n", n,
               (int)strcspn(s->tasks[which[0]].slurm_id, "_"), s->tasks[which[0]].slurm_id, s->state_dir,
               s->n_submissions);
    }
    free(script);
    return BS_OK;
}

static int do_retry(const batch_cli *c, const char *outroot, size_t total, int threads)
{
    bs_jobs_state s;
    bs_status st = bs_jobs_state_read(outroot, &s);
    if (st != BS_OK)
        return bs_cli_fail(st);
    bs_jobs_state_poll(&s);
    if (c->max_running > 0) /* given again with --retry-failed: replaces the recorded one */
        s.max_running = (int)c->max_running;
    if (c->sbatch_extra) {
        free(s.sbatch_extra);
        if (!(s.sbatch_extra = strdup(c->sbatch_extra))) {
            bs_jobs_state_free(&s);
            return bs_cli_fail(bs_error(BS_ERR_MEMORY, "batch: out of memory"));
        }
    }
    int *which = malloc(sizeof(int) * (size_t)(s.n ? s.n : 1));
    int n = 0;
    int slurm = strcmp(s.mode, "slurm") == 0;
    for (int i = 0; which && i < s.n; i++) {
        bs_task_state ts = s.tasks[i].state;
        if (ts == BS_TASK_FAILED || (!slurm && ts == BS_TASK_NOT_RUN))
            which[n++] = i;
    }
    int rc = BS_OK;
    if (!which) {
        rc = bs_cli_fail(bs_error(BS_ERR_MEMORY, "batch: out of memory"));
    } else if (n == 0) {
        if (!c->quiet)
            printf("no failed job to retry\n");
        rc = slurm ? BS_OK : batch_exit(&s);
    } else if (slurm) {
        if (!c->quiet)
            printf("resubmitting %d failed job(s)\n", n);
        rc = submit_slurm(&s, which, n, c);
    } else {
        if (!c->quiet)
            printf("rerunning %d failed job(s)\n", n);
        rc = run_local(&s, which, n, c, total, threads);
    }
    free(which);
    bs_jobs_state_free(&s);
    return rc;
}

/* The command; *owned: the --sbatch-extra text it read (freed by bs_cmd_batch, whatever the return). */
static int batch_cmd(int argc, char **argv, char **owned)
{
    if (bs_cli_wants_help(argc, argv)) {
        fputs(USAGE, stdout);
        return BS_OK;
    }
    batch_cli c = {.jobs = 1, .cpus = 0};
    bs_jobs_opts o = {.margin = 0.25};
    bs_sort_cli so = {.batch_s = 0};
    bs_status pst = bs_cli_sort_defaults(argc, argv, &so);
    if (pst != BS_OK)
        return bs_cli_fail(pst);
    double d;
    int i;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        int *flag = strcmp(a, "--list") == 0           ? &c.list
                    : strcmp(a, "--json") == 0         ? &c.json
                    : strcmp(a, "--dry-run") == 0      ? &c.dry_run
                    : strcmp(a, "--status") == 0       ? &c.status
                    : strcmp(a, "--retry-failed") == 0 ? &c.retry
                    : strcmp(a, "--restart") == 0      ? &c.restart
                    : strcmp(a, "--slurm") == 0        ? &c.slurm
                    : strcmp(a, "--no-qc") == 0        ? &o.no_qc
                    : strcmp(a, "--no-report") == 0    ? &o.no_report
                    : strcmp(a, "--no-drift") == 0     ? &so.sp.no_drift
                    : (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) ? &c.quiet
                                                                           : NULL;
        if (flag) {
            *flag = 1;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            o.extra = argv + i + 1;
            o.n_extra = argc - i - 1;
            break;
        }
        const char *v = NULL;
        char msg[256];
        int r = bs_cli_next_arg(argc, argv, &i, "ROOT folder", &c.root, &v, msg, sizeof msg, USAGE);
        if (r < 0)
            return usage_error("%s", msg);
        if (r == BS_CLI_POSITIONAL)
            continue;
        if (strcmp(a, "--mem") == 0) {
            if (bs_mem_parse_size(v, &o.total_mem) != BS_OK || o.total_mem == 0)
                return usage_error("--mem: expected a size such as 16G, got '%s'", v);
            continue;
        }
        r = bs_cli_sort_option(a, v, &so, msg, sizeof msg);
        if (r < 0)
            return usage_error("%s", msg);
        if (r > 0)
            continue;
        if (strcmp(a, "-o") == 0 || strcmp(a, "--out") == 0) {
            c.outroot = v;
        } else if (strcmp(a, "--jobs") == 0) {
            if (!bs_cli_parse_long(v, 1, 4096, &c.jobs))
                return usage_error("--jobs: expected a job count >= 1, got '%s'", v);
        } else if (strcmp(a, "--max-running") == 0) {
            if (!bs_cli_parse_long(v, 1, 1000000, &c.max_running))
                return usage_error("--max-running: expected a task count >= 1, got '%s'", v);
        } else if (strcmp(a, "--sbatch-extra") == 0) {
            size_t len = 0;
            free(*owned);
            *owned = c.sbatch_extra = NULL;
            bs_status rst = bs_read_text_file(v, 65537, owned, &len);
            if (rst == BS_OK)
                rst = bs_jobs_sbatch_extra_check(*owned, len, v);
            if (rst != BS_OK)
                return bs_cli_fail(rst);
            c.sbatch_extra = *owned;
        } else if (strcmp(a, "--cpus-per-task") == 0) {
            if (!bs_cli_parse_long(v, 1, 4096, &c.cpus))
                return usage_error("--cpus-per-task: expected a CPU count >= 1, got '%s'", v);
        } else if (strcmp(a, "--mem-per-task") == 0) {
            if (bs_mem_parse_size(v, &o.mem_per_task) != BS_OK || o.mem_per_task < ((size_t)1 << 20))
                return usage_error("--mem-per-task: expected a size of at least 1M, such as 4G, got '%s'", v);
        } else if (strcmp(a, "--margin") == 0) {
            if (!bs_cli_parse_double(v, &d) || d < 0 || d > 1000)
                return usage_error("--margin: expected a percentage in [0, 1000], got '%s'", v);
            o.margin = d / 100.0;
        } else if (strcmp(a, "--time") == 0 || strcmp(a, "--partition") == 0 || strcmp(a, "--account") == 0 ||
                   strcmp(a, "--gres") == 0 || strcmp(a, "--job-name") == 0) {
            if (!v[0] || strpbrk(v, " \t\n'\"\\$`") || strlen(v) > 60)
                return usage_error("%s: expected a SLURM value without spaces or quotes, up to 60 characters",
                                   a);
            *(a[2] == 't' ? &c.time : a[2] == 'p' ? &c.partition : a[2] == 'a' ? &c.account
                          : a[2] == 'g' ? &c.gres : &c.job_name) = v;
        } else {
            return usage_error("unknown option %s", a);
        }
    }
    if (!c.root)
        return usage_error("%s", "missing the folder ROOT");
    pst = bs_sort_params_check(&so.sp);
    if (pst != BS_OK)
        return bs_cli_fail(pst);
    if ((c.max_running || c.sbatch_extra) && !c.slurm && !c.retry)
        return usage_error("%s", "--max-running and --sbatch-extra are options of --slurm");
    if (c.status + c.retry + c.list + c.dry_run > 1 && !(c.dry_run && c.retry))
        return usage_error("%s", "--list, --dry-run, --status and --retry-failed exclude each other");
    if (so.sp.mem_budget)
        return usage_error("%s", "--mem here is the total of the running jobs; it was given twice");
    if (so.sp.gpu_mem_budget && so.sp.device < 0)
        return usage_error("%s", "--gpu-mem is the budget of --device cuda[:N]; the jobs use the CPU");
    if (so.sp.threads > 0 && c.cpus > 0 && so.sp.threads != c.cpus)
        return usage_error("%s", "--threads and --cpus-per-task differ: give one (each task's sort uses its CPUs)");

    char outroot[4300];
    if (c.outroot) {
        snprintf(outroot, sizeof outroot, "%s", c.outroot);
    } else {
        bs_status st = bs_jobs_default_outroot(c.root, outroot, sizeof outroot);
        if (st != BS_OK)
            return bs_cli_fail(st);
    }
    int cores = omp_get_num_procs();
    if (c.slurm)
        o.threads = (int)(c.cpus > 0 ? c.cpus : so.sp.threads > 0 ? so.sp.threads : 4);
    else
        o.threads = so.sp.threads > 0 ? so.sp.threads : (cores / (int)c.jobs > 0 ? cores / (int)c.jobs : 1);
    if (!o.total_mem)
        o.total_mem = bs_plan_default_budget();

    if (c.status) {
        bs_jobs_state s;
        bs_status st = bs_jobs_state_read(outroot, &s);
        if (st != BS_OK)
            return bs_cli_fail(st);
        bs_jobs_state_poll(&s);
        bs_jobs_print_status(&s, stdout, c.json);
        bs_jobs_state_free(&s);
        return BS_OK;
    }
    if (c.retry)
        return do_retry(&c, outroot, o.total_mem, o.threads);

    o.root = c.root;
    o.outroot = c.outroot;
    o.sp = so.sp;
    o.sp.threads = o.threads;
    o.batch_s = so.batch_s;
    char params_abs[PATH_MAX];
    if (so.params_path) { /* each job's sort reads it from its own folder */
        if (!realpath(so.params_path, params_abs))
            return bs_cli_fail(bs_error(BS_ERR_INPUT, "%s: %s", so.params_path, strerror(errno)));
        o.params_path = params_abs;
    }
    bs_jobs b;
    bs_status st = bs_jobs_discover(&o, &b);
    if (st != BS_OK)
        return bs_cli_fail(st);
    if (c.json && c.list) {
        char *text = bs_jobs_json(&b);
        if (text)
            printf("%s\n", text);
        free(text);
    } else if ((!c.quiet || c.list) && !(c.json && c.dry_run)) {
        bs_jobs_print_table(&b, stdout);
    }
    int rc = BS_OK;
    if (c.list) {
        bs_jobs_free(&b);
        return BS_OK;
    }
    if (!c.dry_run && state_exists(b.outroot) && !c.restart) {
        bs_error(BS_ERR_USAGE,
                 "%s/%s/state.json: a batch was already started here: use --status, --retry-failed, or "
                 "--restart to start it over (finished stages are reused)",
                 b.outroot, BS_JOBS_STATE_DIR);
        bs_jobs_free(&b);
        return bs_cli_fail(BS_ERR_USAGE);
    }
    bs_jobs_state s;
    st = bs_jobs_state_from(&b, &o, c.slurm ? "slurm" : "local", &s);
    bs_jobs_free(&b);
    if (st != BS_OK) {
        bs_jobs_state_free(&s);
        return bs_cli_fail(st);
    }
    s.cpus_per_task = o.threads;
    s.overhead = bs_plan_overhead_bytes(o.threads);
    snprintf(s.time, sizeof s.time, "%s", c.time ? c.time : "");
    snprintf(s.partition, sizeof s.partition, "%s", c.partition ? c.partition : "");
    snprintf(s.account, sizeof s.account, "%s", c.account ? c.account : "");
    snprintf(s.gres, sizeof s.gres, "%s", c.gres ? c.gres : "");
    snprintf(s.job_name, sizeof s.job_name, "%s", c.job_name ? c.job_name : "");
    s.max_running = (int)c.max_running;
    if (c.sbatch_extra && !(s.sbatch_extra = strdup(c.sbatch_extra))) {
        bs_jobs_state_free(&s);
        return bs_cli_fail(bs_error(BS_ERR_MEMORY, "batch: out of memory"));
    }
    int *which = malloc(sizeof(int) * (size_t)(s.n ? s.n : 1));
    int nw = 0;
    for (int k = 0; which && k < s.n; k++)
        if (s.tasks[k].ok)
            which[nw++] = k;
    if (!which) {
        rc = bs_cli_fail(bs_error(BS_ERR_MEMORY, "batch: out of memory"));
    } else if (nw == 0) {
        rc = bs_cli_fail(bs_error(BS_ERR_INPUT, "%s: no sortable recording found", b.root));
    } else if (c.slurm) {
        rc = submit_slurm(&s, which, nw, &c);
        if (rc == BS_OK && nw < s.n)
            rc = BS_ERR_INPUT; /* submitted, but some recordings cannot be sorted */
    } else if (c.dry_run && c.json) {
        char *text = bs_jobs_state_json(&s);
        if (text)
            printf("%s\n", text);
        else
            rc = bs_cli_fail(bs_error(BS_ERR_MEMORY, "batch: out of memory"));
        free(text);
    } else if (c.dry_run) {
        for (int k = 0; k < nw; k++) {
            const bs_jobs_task *t = &s.tasks[which[k]];
            printf("boundsort");
            for (int a = 0; a < t->n_args; a++)
                printf(strpbrk(t->args[a], " '\"$\\") ? " '%s'" : " %s", t->args[a]);
            printf("\n");
        }
    } else if ((st = bs_jobs_state_write(&s)) != BS_OK) {
        rc = bs_cli_fail(st);
    } else {
        rc = run_local(&s, which, nw, &c, o.total_mem, o.threads);
    }
    free(which);
    bs_jobs_state_free(&s);
    return rc;
}

int bs_cmd_batch(int argc, char **argv)
{
    char *owned = NULL;
    int rc = batch_cmd(argc, argv, &owned);
    free(owned);
    return rc;
}
