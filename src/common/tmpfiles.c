/*
 * tmpfiles.c - the registry of open temporaries, the signal handler that
 * removes them, and the sweep of stale ones (tmpfiles.h).
 *
 * The registry is a fixed table of slots (no allocation, so the handler can
 * read it at any moment). A slot is FREE, FILLING (a thread is copying a
 * name in), LIVE (its name is a temporary to remove) or TAKEN (the handler
 * claimed it). Registration moves FREE -> FILLING -> LIVE with atomic
 * compare-and-swap, unregistration LIVE -> FREE; the handler moves LIVE ->
 * TAKEN before unlinking, so it never reads a name that a thread is
 * overwriting. The handler first sets `closing`: a thread that registers a
 * name afterwards stops before creating the file (the process is about to
 * exit). A second signal while the first is handled just waits for the exit.
 *
 * The sweep recognises a temporary by its name alone: a final ".tmp-" then
 * decimal digits, the pid of the writer (fileio.c makes these names). It
 * keeps the temporaries of this process and of every live process (kill(pid,
 * 0) succeeds or fails with EPERM) and removes the others.
 */
#define _POSIX_C_SOURCE 200809L
#include "tmpfiles.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "log.h"

enum { SLOT_FREE, SLOT_FILLING, SLOT_LIVE, SLOT_TAKEN };
#define N_SLOTS 256
#define SLOT_PATH 4160 /* bs_atomic_file.tmp_path */

static _Atomic int slot_state[N_SLOTS];
static char slot_path[N_SLOTS][SLOT_PATH];
static atomic_int closing;
static const char *_Atomic hint;
static int stderr_tty; /* a progress line may be open: start the message on a new line */

int bs_tmp_register(const char *tmp_path)
{
    size_t n = strlen(tmp_path);
    if (n >= SLOT_PATH)
        return 0;
    for (int i = 0; i < N_SLOTS; i++) {
        int want = SLOT_FREE;
        if (!atomic_compare_exchange_strong(&slot_state[i], &want, SLOT_FILLING))
            continue;
        memcpy(slot_path[i], tmp_path, n + 1);
        atomic_store(&slot_state[i], SLOT_LIVE);
        if (atomic_load(&closing))
            for (;;)
                pause(); /* the handler is exiting: create nothing more */
        return i + 1;
    }
    return 0;
}

void bs_tmp_unregister(int handle)
{
    if (handle <= 0 || handle > N_SLOTS)
        return;
    int want = SLOT_LIVE;
    atomic_compare_exchange_strong(&slot_state[handle - 1], &want, SLOT_FREE); /* TAKEN: the handler owns it */
}

void bs_tmp_set_interrupt_hint(const char *text) { atomic_store(&hint, text); }

static void put(const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void on_signal(int sig)
{
    if (atomic_exchange(&closing, 1))
        for (;;)
            pause(); /* another thread is handling a signal and will exit */
    for (int i = 0; i < N_SLOTS; i++) {
        int want = SLOT_LIVE;
        if (atomic_compare_exchange_strong(&slot_state[i], &want, SLOT_TAKEN))
            unlink(slot_path[i]);
    }
    if (stderr_tty)
        put("\n");
    put(sig == SIGTERM ? "boundsort: interrupted by SIGTERM; temporary files removed"
        : sig == SIGINT ? "boundsort: interrupted by SIGINT; temporary files removed"
                        : "boundsort: interrupted by SIGHUP; temporary files removed");
    const char *h = atomic_load(&hint);
    if (h) {
        put("; ");
        put(h);
    }
    put("\n");
    _exit(128 + sig);
}

void bs_tmp_catch_signals(void)
{
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
    stderr_tty = isatty(STDERR_FILENO);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaddset(&sa.sa_mask, sigs[i]);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue; /* nohup, or a background job of a shell: stay ignored */
        sigaction(sigs[i], &sa, NULL);
    }
}

/* The writer's pid if name is "<something>.tmp-<digits>", else 0. */
static long tmp_pid(const char *name)
{
    const char *t = strstr(name, ".tmp-");
    if (!t || t == name)
        return 0;
    const char *next;
    while ((next = strstr(t + 1, ".tmp-")) != NULL)
        t = next;
    const char *d = t + 5;
    if (*d == '\0' || strlen(d) > 9)
        return 0;
    for (const char *c = d; *c; c++)
        if (*c < '0' || *c > '9')
            return 0;
    return strtol(d, NULL, 10);
}

static int stale(long pid) { return pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH; }

/* Sweep dir; only the temporaries of `only` (a file name) when it is not NULL. */
static int sweep(const char *dir, int recursive, const char *only, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    size_t only_n = only ? strlen(only) : 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        char path[4096];
        struct stat st;
        if (bs_path_join(path, sizeof path, dir, name) != BS_OK || lstat(path, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            if (recursive && depth < 16)
                removed += sweep(path, recursive, only, depth + 1);
            continue;
        }
        if (!S_ISREG(st.st_mode) || (only && (strncmp(name, only, only_n) != 0 || strncmp(name + only_n, ".tmp-", 5) != 0)))
            continue;
        if (stale(tmp_pid(name)) && unlink(path) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

int bs_tmp_sweep(const char *dir, int recursive) { return sweep(dir, recursive, NULL, 0); }

int bs_tmp_sweep_of(const char *path)
{
    char dir[4096];
    if (strlen(path) >= sizeof dir)
        return 0;
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    const char *name = slash ? slash + 1 : dir;
    if (!*name)
        return 0;
    if (slash == dir)
        return sweep("/", 0, name, 0);
    if (slash)
        *slash = '\0';
    return sweep(slash ? dir : ".", 0, name, 0);
}

void bs_tmp_sweep_sorting(const char *out_dir)
{
    char stages[4096];
    int n = bs_tmp_sweep(out_dir, 0);
    if (bs_path_join(stages, sizeof stages, out_dir, ".stages") == BS_OK)
        n += bs_tmp_sweep(stages, 1);
    if (n > 0)
        bs_log_info("%s: removed %d temporary file%s left by an interrupted run", out_dir, n, n == 1 ? "" : "s");
}
