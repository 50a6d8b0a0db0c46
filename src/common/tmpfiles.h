/*
 * tmpfiles.h - temporary files that outlive no run: a registry of the open
 * temporaries, emptied by SIGTERM / SIGINT / SIGHUP before the process exits,
 * and a sweep of the stale ones a killed run left behind.
 *
 * Every output is written as "<path>.tmp-<pid>" and renamed on commit
 * (src/common/fileio.h). bs_atomic_open registers the temporary name in a
 * fixed table of slots, commit and abort unregister it. The handler that
 * bs_tmp_catch_signals() installs unlinks every registered name with
 * async-signal-safe calls only (unlink, write, _exit), prints
 * "boundsort: interrupted by SIG...; <hint>" and exits 128 + the signal number.
 * A SIGKILL (or a crash) cannot be caught: bs_tmp_sweep(), called by sort, qc
 * and report at start, removes the files named "<name>.tmp-<pid>" whose pid is
 * not a live process (kill(pid, 0) fails with ESRCH); temporaries of live
 * processes (another run writing the same folder) are kept. The sweep is also
 * the backstop for the few microseconds in which a thread may create a
 * temporary while another thread handles the signal.
 */
#ifndef BS_TMPFILES_H
#define BS_TMPFILES_H

/* Register a temporary file name for removal on SIGTERM / SIGINT / SIGHUP.
 * Returns a handle for bs_tmp_unregister (0 if the table is full: the file
 * is then only removed by a later sweep). Thread-safe. */
int bs_tmp_register(const char *tmp_path);

/* Forget a registered name (after its rename or removal); 0 is a no-op. */
void bs_tmp_unregister(int handle);

/* Install the handler for SIGTERM, SIGINT and SIGHUP (signals the process
 * inherited as ignored stay ignored). Called once by main. */
void bs_tmp_catch_signals(void);

/* What the interrupt message tells the user to do, e.g. "rerun with --resume
 * to continue"; text must be a string literal (it is read by the handler). */
void bs_tmp_set_interrupt_hint(const char *text);

/* Remove the stale temporaries "<name>.tmp-<pid>" (regular files whose pid
 * is not a live process) in dir, and in its subfolders when recursive
 * (symbolic links are not followed). A missing dir is not an error. Returns
 * the number of files removed. */
int bs_tmp_sweep(const char *dir, int recursive);

/* The same for the temporaries of one output file ("<path>.tmp-<pid>"). */
int bs_tmp_sweep_of(const char *path);

/* The sweep of a sorting folder at the start of sort, qc and report: OUT
 * itself and OUT/.stages with its subfolders; logs the count when > 0. */
void bs_tmp_sweep_sorting(const char *out_dir);

#endif
