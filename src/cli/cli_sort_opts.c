/*
 * cli_sort_opts.c - the options `sort` and `plan` share: they size the run
 * (threads, batch length, memory budget, clustering cap), so `plan` must read
 * them exactly as `sort` does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../gpu/gpu.h"
#include "../mem/mem.h"
#include "../pipeline/params.h"
#include "../pipeline/plan.h"
#include "cli.h"

int bs_cli_sort_option(const char *a, const char *v, bs_sort_cli *o, char *msg, size_t len)
{
    long long n;
    double d;
    if (strcmp(a, "--threads") == 0) {
        if (!bs_cli_parse_long(v, 1, 4096, &n))
            return snprintf(msg, len, "--threads: expected a thread count in 1..4096, got '%s'", v), -1;
        o->sp.threads = (int)n;
    } else if (strcmp(a, "--batch-seconds") == 0) {
        if (!bs_cli_parse_double(v, &d) || d < 0.1 || d > 600)
            return snprintf(msg, len, "--batch-seconds: expected seconds in [0.1, 600], got '%s'", v), -1;
        o->batch_s = d;
    } else if (strcmp(a, "--mem") == 0) {
        size_t b;
        if (bs_mem_parse_size(v, &b) != BS_OK || b == 0)
            return snprintf(msg, len, "--mem: expected a size such as 4G, 512M or 2000000000, got '%s'", v), -1;
        o->sp.mem_budget = b;
    } else if (strcmp(a, "--gpu-mem") == 0) {
        size_t b;
        if (bs_mem_parse_size(v, &b) != BS_OK || b == 0)
            return snprintf(msg, len, "--gpu-mem: expected a size such as 8G or 512M, got '%s'", v), -1;
        o->sp.gpu_mem_budget = b;
    } else if (strcmp(a, "--disk") == 0) {
        size_t b;
        if (bs_mem_parse_size(v, &b) != BS_OK || b == 0)
            return snprintf(msg, len, "--disk: expected a size such as 100G or 512M, got '%s'", v), -1;
        o->sp.disk_budget = b;
    } else if (strcmp(a, "--device") == 0) {
        char *end;
        if (strcmp(v, "cpu") == 0) {
            o->sp.device = -1;
        } else if (strcmp(v, "cuda") == 0) {
            o->sp.device = 0;
        } else if (strncmp(v, "cuda:", 5) == 0 && v[5] >= '0' && v[5] <= '9' &&
                   (n = strtoll(v + 5, &end, 10)) <= 1024 && *end == '\0') {
            o->sp.device = (int)n;
        } else {
            return snprintf(msg, len, "--device: expected cpu, cuda or cuda:N, got '%s'", v), -1;
        }
    } else if (strcmp(a, "--denoise") == 0) {
        int m = bs_denoise_parse(v);
        if (m < 0)
            return snprintf(msg, len, "--denoise: expected cmr, cmr-local or destripe, got '%s'", v), -1;
        o->sp.denoise = m;
    } else if (strcmp(a, "--bad-channels") == 0) {
        int m = bs_bad_mode_parse(v);
        if (m < 0)
            return snprintf(msg, len, "--bad-channels: expected interpolate, remove or keep, got '%s'", v), -1;
        o->sp.bad.mode = m;
    } else if (strcmp(a, "--max-bad-channel-fraction") == 0) {
        if (!bs_cli_parse_double(v, &d) || d < 0 || d > 1)
            return snprintf(msg, len, "--max-bad-channel-fraction: expected a fraction in [0, 1], got '%s'", v), -1;
        o->sp.bad.max_fraction = d;
    } else if (strcmp(a, "--params") == 0) {
        o->params_path = v; /* read first, by bs_cli_sort_defaults */
    } else if (strcmp(a, "--max-center-spikes") == 0) {
        if (!bs_cli_parse_long(v, 1000, 1000000000LL, &n))
            return snprintf(msg, len, "--max-center-spikes: expected a count >= 1000, got '%s'", v), -1;
        o->sp.max_center_spikes = n;
    } else {
        return 0;
    }
    return 1;
}

bs_status bs_cli_sort_defaults(int argc, char **argv, bs_sort_cli *o)
{
    bs_sort_default_params(&o->sp);
    const char *path = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--params") == 0)
            path = argv[++i];
    return path && path[0] ? bs_sort_params_read(path, &o->sp) : BS_OK;
}

bs_status bs_cli_machine_check(size_t budget, int threads, size_t need)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0)
        return BS_OK; /* RAM unknown */
    double gib = (double)((size_t)1 << 30), ram = (double)pages * (double)page;
    double over = (double)bs_plan_overhead_bytes(threads);
    if (over + (double)need > ram)
        return bs_error(BS_ERR_MEMORY,
                        "does not fit this machine: %d threads add about %.2f GiB of untracked overhead (BLAS "
                        "buffers, stacks; 40 MiB each), which with the %.2f GiB the plan needs at least exceeds "
                        "its %.2f GiB of RAM; reduce --threads",
                        threads, over / gib, (double)need / gib, ram / gib);
    if ((double)budget + over > ram)
        fprintf(stderr,
                "warning: the memory budget %.2f GiB plus the untracked overhead of %d threads (%.2f GiB) is more "
                "than this machine's RAM (%.2f GiB): the run may swap or be killed before the budget stops it\n",
                (double)budget / gib, threads, over / gib, ram / gib);
    return BS_OK;
}

bs_status bs_cli_gpu_setup(bs_sort_params *sp, int need_device)
{
    if (sp->device < 0) {
        if (sp->gpu_mem_budget)
            return bs_error(BS_ERR_USAGE, "--gpu-mem is the budget of --device cuda[:N]; this run uses the CPU");
        return BS_OK;
    }
    char name[256] = "";
    size_t total = 0;
    bs_status st = bs_gpu_device_info(sp->device, name, sizeof name, &total);
    if (st != BS_OK && (need_device || !sp->gpu_mem_budget))
        return st;
    if (st == BS_OK) {
        if (!sp->gpu_mem_budget) /* the device's memory less 1 GiB for the CUDA context and other processes */
            sp->gpu_mem_budget = total > ((size_t)2 << 30) ? total - ((size_t)1 << 30) : total / 2;
        if (sp->gpu_mem_budget > total)
            return bs_error(BS_ERR_MEMORY, "--gpu-mem %.2f GiB is more than cuda:%d (%s) has: %.2f GiB",
                            (double)sp->gpu_mem_budget / (1 << 30), sp->device, name, (double)total / (1 << 30));
    }
    bs_mem_set_budget(BS_DEV_GPU, sp->gpu_mem_budget);
    return BS_OK;
}
