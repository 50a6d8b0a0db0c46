/*
 * fileio.h - atomic file writes and small file helpers.
 *
 * An output file is written under a temporary name beside its final path
 * ("<path>.tmp-<pid>"), flushed, fsync'ed and renamed over the final path on
 * commit, so a killed run never leaves a half-written file that looks
 * complete. bs_atomic_abort() removes the temporary and leaves any previous
 * file at the final path untouched. While a temporary exists its name is
 * registered (src/common/tmpfiles.h), so SIGTERM / SIGINT remove it before the
 * process exits, and sort, qc and report sweep the stale ones a SIGKILL left.
 */
#ifndef BS_FILEIO_H
#define BS_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <stdio.h>

#include "status.h"

typedef struct {
    FILE *fp;
    char path[4096];
    char tmp_path[4160];
    int reg; /* handle in the registry of temporaries (tmpfiles.h), 0 if none */
} bs_atomic_file;

bs_status bs_atomic_open(bs_atomic_file *f, const char *path);
bs_status bs_atomic_commit(bs_atomic_file *f);
void bs_atomic_abort(bs_atomic_file *f);

/* Write a whole buffer atomically to path. */
bs_status bs_write_file_atomic(const char *path, const void *data, size_t bytes);

/* Open an input file for reading without blocking on it: a folder, a FIFO, a
 * socket or a device is refused (BS_ERR_INPUT, the message says which) instead
 * of hanging in open() or read(). Every reader of an input file opens it here. */
bs_status bs_open_input(const char *path, int *fd);
bs_status bs_fopen_input(const char *path, FILE **fp);

/* Read a whole (small, text) file into a NUL-terminated malloc'ed buffer,
 * refusing files larger than max_bytes. */
bs_status bs_read_text_file(const char *path, size_t max_bytes, char **text, size_t *len);

/* Size of a file in bytes. */
bs_status bs_file_size(const char *path, uint64_t *bytes);

/* Create a directory and its parents (like mkdir -p); checks it is writable. */
bs_status bs_mkdir_p(const char *path);

/* Bytes an unprivileged writer may still use on the file system that holds
 * path, or its nearest existing parent folder when path does not exist yet
 * (statvfs: available blocks x fragment size); -1 when it cannot be told. */
int64_t bs_disk_free_bytes(const char *path);

/* Remove path and, when it is a folder, everything under it (links not followed); an absent path is
 * fine. 0, or -1 with errno set. */
int bs_remove_tree(const char *path);

/* Bytes the files under dir take on disk (allocated blocks, as `du`; links
 * not followed); -1 when dir cannot be walked. */
int64_t bs_dir_disk_bytes(const char *dir);

/* pread / pwrite of exactly n bytes at off (retrying short transfers and
 * EINTR): 0, or -1 with errno set (errno 0: unexpected end of file). */
int bs_pread_all(int fd, void *buf, size_t n, off_t off);
int bs_pwrite_all(int fd, const void *buf, size_t n, off_t off);
/* Ask the kernel to start writing bytes [off, off + n) of fd to disk now,
 * without waiting (Linux: sync_file_range; elsewhere nothing), so that the
 * fsync that commits a large file written in pieces has little left to do. */
void bs_writeback_start(int fd, off_t off, size_t n);

/* Join dir and name into buf ("dir/name"); fails if it does not fit. */
bs_status bs_path_join(char *buf, size_t buflen, const char *dir, const char *name);
/* 1 if path names a regular file (stat follows links), else 0. */
int bs_is_file(const char *path);

#endif
