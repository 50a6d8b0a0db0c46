/*
 * fileio.c - atomic writes (temporary name, fsync, rename) and file helpers.
 */
#define _POSIX_C_SOURCE 200809L
#include "fileio.h"
#include "tmpfiles.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

bs_status bs_atomic_open(bs_atomic_file *f, const char *path)
{
    memset(f, 0, sizeof *f);
    if (strlen(path) >= sizeof f->path)
        return bs_error(BS_ERR_INPUT, "%s: path too long", path);
    snprintf(f->path, sizeof f->path, "%s", path);
    snprintf(f->tmp_path, sizeof f->tmp_path, "%s.tmp-%ld", path, (long)getpid());
    f->reg = bs_tmp_register(f->tmp_path);
    f->fp = fopen(f->tmp_path, "wb");
    if (!f->fp) {
        bs_tmp_unregister(f->reg);
        f->reg = 0;
        return bs_error(BS_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
    }
    return BS_OK;
}

bs_status bs_atomic_commit(bs_atomic_file *f)
{
    if (!f->fp)
        return bs_error(BS_ERR_INTERNAL, "%s: commit of a file that is not open", f->path);
    int bad = fflush(f->fp) != 0 || ferror(f->fp) || fsync(fileno(f->fp)) != 0;
    int err = errno;
    bad |= fclose(f->fp) != 0;
    f->fp = NULL;
    if (bad) {
        remove(f->tmp_path);
        bs_tmp_unregister(f->reg);
        f->reg = 0;
        return bs_error(BS_ERR_IO, "%s: write failed: %s", f->path, strerror(err ? err : EIO));
    }
    if (rename(f->tmp_path, f->path) != 0) {
        err = errno;
        remove(f->tmp_path);
        bs_tmp_unregister(f->reg);
        f->reg = 0;
        return bs_error(BS_ERR_IO, "%s: cannot rename into place: %s", f->path, strerror(err));
    }
    bs_tmp_unregister(f->reg);
    f->reg = 0;
    return BS_OK;
}

void bs_atomic_abort(bs_atomic_file *f)
{
    if (f->fp) {
        fclose(f->fp);
        f->fp = NULL;
        remove(f->tmp_path);
        bs_tmp_unregister(f->reg);
        f->reg = 0;
    }
}

bs_status bs_write_file_atomic(const char *path, const void *data, size_t bytes)
{
    bs_atomic_file f;
    BS_TRY(bs_atomic_open(&f, path));
    if (bytes && fwrite(data, 1, bytes, f.fp) != bytes) {
        int err = errno;
        bs_atomic_abort(&f);
        return bs_error(BS_ERR_IO, "%s: write failed: %s", path, strerror(err));
    }
    return bs_atomic_commit(&f);
}

/* What a path that is not a regular file is, for the message. */
static const char *not_regular_what(mode_t m)
{
    return S_ISDIR(m) ? "is a folder, expected a file" : S_ISFIFO(m) ? "is a FIFO (named pipe), expected a regular file"
                                                                     : "is not a regular file (a device or socket)";
}

bs_status bs_open_input(const char *path, int *fd)
{
    /* O_NONBLOCK: opening a FIFO without a writer returns at once (fstat then refuses it) */
    *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (*fd < 0)
        return bs_error(BS_ERR_INPUT, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    bs_status r = BS_OK;
    if (fstat(*fd, &st) != 0)
        r = bs_error(BS_ERR_INPUT, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        r = bs_error(BS_ERR_INPUT, "%s: %s", path, not_regular_what(st.st_mode));
    if (r != BS_OK) {
        close(*fd);
        *fd = -1;
        return r;
    }
    int fl = fcntl(*fd, F_GETFL);
    if (fl >= 0)
        fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK);
    return BS_OK;
}

bs_status bs_fopen_input(const char *path, FILE **fp)
{
    int fd;
    *fp = NULL;
    BS_TRY(bs_open_input(path, &fd));
    *fp = fdopen(fd, "rb");
    if (!*fp) {
        close(fd);
        return bs_error(BS_ERR_MEMORY, "%s: cannot open: %s", path, strerror(errno));
    }
    return BS_OK;
}

bs_status bs_read_text_file(const char *path, size_t max_bytes, char **text, size_t *len)
{
    *text = NULL;
    FILE *fp;
    BS_TRY(bs_fopen_input(path, &fp));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(fp);
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > max_bytes) {
                free(buf);
                fclose(fp);
                return bs_error(BS_ERR_INPUT, "%s: file is larger than %zu bytes", path, max_bytes);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(fp);
                return bs_error(BS_ERR_MEMORY, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, fp);
        n += got;
        if (got == 0)
            break;
    }
    int failed = ferror(fp);
    fclose(fp);
    if (failed) {
        free(buf);
        return bs_error(BS_ERR_INPUT, "%s: read error", path);
    }
    if (n > max_bytes) {
        free(buf);
        return bs_error(BS_ERR_INPUT, "%s: file is larger than %zu bytes", path, max_bytes);
    }
    buf[n] = '\0';
    *text = buf;
    if (len)
        *len = n;
    return BS_OK;
}

bs_status bs_file_size(const char *path, uint64_t *bytes)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return bs_error(BS_ERR_INPUT, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return bs_error(BS_ERR_INPUT, "%s: %s", path, not_regular_what(st.st_mode));
    *bytes = (uint64_t)st.st_size;
    return BS_OK;
}

bs_status bs_mkdir_p(const char *path)
{
    char buf[4096];
    if (strlen(path) >= sizeof buf)
        return bs_error(BS_ERR_INPUT, "%s: path too long", path);
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return bs_error(BS_ERR_INPUT, "%s: cannot create folder '%s': %s", path, buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return bs_error(BS_ERR_INPUT, "%s: cannot create folder: %s", path, strerror(errno));
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        return bs_error(BS_ERR_INPUT, "%s: exists and is not a folder", path);
    if (access(buf, W_OK) != 0)
        return bs_error(BS_ERR_INPUT, "%s: folder is not writable", path);
    return BS_OK;
}

int64_t bs_disk_free_bytes(const char *path)
{
    char buf[4096];
    if (!path || !*path || strlen(path) >= sizeof buf)
        return -1;
    snprintf(buf, sizeof buf, "%s", path);
    for (;;) {
        struct statvfs v;
        if (statvfs(buf, &v) == 0)
            return (int64_t)v.f_bavail * (int64_t)v.f_frsize;
        if (errno != ENOENT && errno != ENOTDIR)
            return -1;
        char *slash = strrchr(buf, '/');
        if (!slash) /* a relative path's first component: the working folder */
            return statvfs(".", &v) == 0 ? (int64_t)v.f_bavail * (int64_t)v.f_frsize : -1;
        if (slash == buf) {
            buf[1] = '\0';
            return statvfs(buf, &v) == 0 ? (int64_t)v.f_bavail * (int64_t)v.f_frsize : -1;
        }
        *slash = '\0';
    }
}

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb, (void)type, (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

int bs_remove_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return errno == ENOENT ? 0 : -1;
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int64_t du_sum; /* nftw has no context argument; used by one call at a time */

static int du_add(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)path, (void)type, (void)ftw;
    du_sum += (int64_t)sb->st_blocks * 512;
    return 0;
}

int64_t bs_dir_disk_bytes(const char *dir)
{
    du_sum = 0;
    return nftw(dir, du_add, 16, FTW_PHYS) == 0 ? du_sum : -1;
}

int bs_is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bs_status bs_path_join(char *buf, size_t buflen, const char *dir, const char *name)
{
    int n = snprintf(buf, buflen, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= buflen)
        return bs_error(BS_ERR_INPUT, "%s/%s: path too long", dir, name);
    return BS_OK;
}

int bs_pread_all(int fd, void *buf, size_t n, off_t off)
{
    char *p = buf;
    while (n) {
        ssize_t got = pread(fd, p, n, off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            if (got == 0)
                errno = 0;
            return -1;
        }
        p += got;
        off += got;
        n -= (size_t)got;
    }
    return 0;
}

void bs_writeback_start(int fd, off_t off, size_t n)
{
#ifdef __linux__
    (void)sync_file_range(fd, off, (off_t)n, SYNC_FILE_RANGE_WRITE); /* a hint: failure changes nothing */
#else
    (void)fd;
    (void)off;
    (void)n;
#endif
}

int bs_pwrite_all(int fd, const void *buf, size_t n, off_t off)
{
    const char *p = buf;
    while (n) {
        ssize_t put = pwrite(fd, p, n, off);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0) {
            if (put == 0)
                errno = ENOSPC;
            return -1;
        }
        p += put;
        off += put;
        n -= (size_t)put;
    }
    return 0;
}
