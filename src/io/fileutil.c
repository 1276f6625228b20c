/* File helpers: atomic replacement (temp file + fsync + rename + fsync of the
 * directory), whole-file reads, mkdir -p, SHA-256 (nettle). */
#include "attnctl/io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <nettle/sha2.h>

/* Largest single write()/read() request: Linux caps transfers near 2 GiB anyway. */
#define IO_CHUNK ((size_t)1 << 30)

static char *dup_string(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Directory part of a file path ("." when there is none). Caller frees. */
static char *parent_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return dup_string(".");
    if (slash == path)
        return dup_string("/");
    size_t n = (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, path, n);
        d[n] = '\0';
    }
    return d;
}

int ac_fsync_dir(const char *dir, ac_err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return ac_err_set(err, "%s: cannot open directory: %s", dir, strerror(errno));
    int rc;
    do {
        rc = fsync(fd);
    } while (rc != 0 && errno == EINTR);
    int saved = errno;
    close(fd);
    /* Some file systems cannot fsync directories (EINVAL): nothing more to do there. */
    if (rc != 0 && saved != EINVAL)
        return ac_err_set(err, "%s: cannot sync directory: %s", dir, strerror(saved));
    return 0;
}

int ac_mkdir_p(const char *dir, ac_err *err)
{
    if (!dir || !*dir)
        return ac_err_set(err, "empty directory name");
    char *buf = dup_string(dir);
    if (!buf)
        return ac_err_set(err, "%s: out of memory", dir);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    /* Create each prefix in turn; existing ones are fine if they are directories. */
    for (char *p = buf + 1;; p++) {
        int last = (*p == '\0');
        if (*p == '/' || last) {
            char saved = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0) {
                int e = errno;
                struct stat sb;
                if (e != EEXIST || stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
                    int rc = ac_err_set(err, "%s: cannot create directory: %s", buf,
                                        e == EEXIST ? "exists and is not a directory" : strerror(e));
                    free(buf);
                    return rc;
                }
            }
            *p = saved;
        }
        if (last)
            break;
    }
    free(buf);
    return 0;
}

static void atomic_clear(ac_atomic_file *f)
{
    free(f->path);
    free(f->tmp_path);
    f->path = NULL;
    f->tmp_path = NULL;
    f->fd = -1;
}

int ac_atomic_begin(ac_atomic_file *f, const char *path, ac_err *err)
{
    f->path = NULL;
    f->tmp_path = NULL;
    f->fd = -1;
    size_t n = strlen(path);
    f->path = dup_string(path);
    f->tmp_path = malloc(n + 64);
    if (!f->path || !f->tmp_path) {
        atomic_clear(f);
        return ac_err_set(err, "%s: out of memory", path);
    }
    /* O_EXCL on a pid-and-counter name: safe against other writers, and the
     * mode 0666 & ~umask is what an ordinary file would get (mkstemp gives 0600). */
    for (unsigned attempt = 0; attempt < 10000; attempt++) {
        snprintf(f->tmp_path, n + 64, "%s.tmp.%ld.%u", path, (long)getpid(), attempt);
        f->fd = open(f->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (f->fd >= 0)
            return 0;
        if (errno != EEXIST && errno != EINTR)
            break;
    }
    int rc = ac_err_set(err, "%s: cannot create temporary file %s: %s", path, f->tmp_path,
                        strerror(errno));
    atomic_clear(f);
    return rc;
}

int ac_atomic_write(ac_atomic_file *f, const void *data, size_t len, ac_err *err)
{
    const unsigned char *p = data;
    while (len > 0) {
        ssize_t w = write(f->fd, p, len > IO_CHUNK ? IO_CHUNK : len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return ac_err_set(err, "%s: write failed: %s", f->path, strerror(errno));
        }
        if (w == 0)
            return ac_err_set(err, "%s: write failed: no progress", f->path);
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int ac_atomic_finish(ac_atomic_file *f, ac_err *err)
{
    int rc;
    do {
        rc = fsync(f->fd);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
        int e = errno;
        close(f->fd);
        f->fd = -1;
        return ac_err_set(err, "%s: fsync failed: %s", f->path, strerror(e));
    }
    /* close() may report a deferred write error (NFS, quotas); on Linux the
     * descriptor is gone even after EINTR, so never retry. */
    rc = close(f->fd);
    f->fd = -1;
    if (rc != 0 && errno != EINTR)
        return ac_err_set(err, "%s: close failed: %s", f->path, strerror(errno));
    return 0;
}

int ac_atomic_publish(ac_atomic_file *f, ac_err *err)
{
    if (rename(f->tmp_path, f->path) != 0)
        return ac_err_set(err, "%s: cannot rename %s into place: %s", f->path, f->tmp_path,
                          strerror(errno));
    free(f->tmp_path);
    f->tmp_path = NULL;
    return 0;
}

void ac_atomic_release(ac_atomic_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    atomic_clear(f);
}

void ac_atomic_abort(ac_atomic_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (f->tmp_path)
        unlink(f->tmp_path);
    atomic_clear(f);
}

int ac_atomic_commit(ac_atomic_file *f, ac_err *err)
{
    if (ac_atomic_finish(f, err) != 0 || ac_atomic_publish(f, err) != 0) {
        ac_atomic_abort(f);
        return -1;
    }
    char *dir = parent_dir(f->path);
    int rc = dir ? ac_fsync_dir(dir, err) : ac_err_set(err, "%s: out of memory", f->path);
    free(dir);
    atomic_clear(f);
    return rc;
}

/* The writer's PID when name is NAME.tmp.PID.N (as ac_atomic_begin names
 * its temp files), else 0. */
static long temp_file_writer(const char *name)
{
    const char *tag = strstr(name, ".tmp.");
    if (!tag || tag == name)
        return 0;
    const char *p = tag + 5, *end;
    char *after;
    long pid = strtol(p, &after, 10);
    if (after == p || *after != '.' || pid <= 0)
        return 0;
    end = after + 1;
    if (!*end)
        return 0;
    for (const char *q = end; *q; q++)
        if (*q < '0' || *q > '9')
            return 0;
    return pid;
}

int ac_is_stale_temp_of(const char *entry, const char *target)
{
    size_t n = strlen(target);
    if (strncmp(entry, target, n) != 0 || strncmp(entry + n, ".tmp.", 5) != 0)
        return 0;
    long pid = temp_file_writer(entry);
    return pid > 0 && pid <= INT_MAX && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int ac_remove_stale_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long pid = temp_file_writer(e->d_name);
        /* Only when no process has that PID (EPERM: someone else's, alive). */
        if (pid <= 0 || pid > INT_MAX || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

int ac_write_file_atomic(const char *path, const void *data, size_t len, ac_err *err)
{
    ac_atomic_file f;
    if (ac_atomic_begin(&f, path, err) != 0)
        return -1;
    if (ac_atomic_write(&f, data, len, err) != 0) {
        ac_atomic_abort(&f);
        return -1;
    }
    return ac_atomic_commit(&f, err);
}

/* Reads exactly len bytes unless end of file comes first; returns bytes read or -1. */
static ssize_t read_full(int fd, void *buf, size_t len)
{
    unsigned char *p = buf;
    size_t done = 0;
    while (done < len) {
        size_t want = len - done > IO_CHUNK ? IO_CHUNK : len - done;
        ssize_t r = read(fd, p + done, want);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

int ac_read_file(const char *path, size_t max_len, char **data, size_t *len, ac_err *err)
{
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ac_err_set(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return ac_err_set(err, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return ac_err_set(err, "%s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size > (uint64_t)max_len) {
        close(fd);
        return ac_err_set(err, "%s: file too large (%lld bytes, limit %zu)", path,
                          (long long)sb.st_size, max_len);
    }
    size_t want = (size_t)sb.st_size;
    char *buf = malloc(want + 1);
    if (!buf) {
        close(fd);
        return ac_err_set(err, "%s: out of memory (%zu bytes)", path, want);
    }
    ssize_t got = read_full(fd, buf, want);
    int e = errno;
    close(fd);
    if (got < 0) {
        free(buf);
        return ac_err_set(err, "%s: read failed: %s", path, strerror(e));
    }
    if ((size_t)got != want) {
        free(buf);
        return ac_err_set(err, "%s: file changed size while reading", path);
    }
    buf[want] = '\0';
    *data = buf;
    *len = want;
    return 0;
}

int ac_sha256_file(const char *path, char hex[65], ac_err *err)
{
    hex[0] = '\0';
    struct stat sb;
    if (stat(path, &sb) != 0)
        return ac_err_set(err, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return 0; /* a pipe was read once already; opening it again would wait forever */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ac_err_set(err, "%s: cannot open: %s", path, strerror(errno));
    enum { BUF = 1 << 16 };
    unsigned char *buf = malloc(BUF);
    if (!buf) {
        close(fd);
        return ac_err_set(err, "%s: out of memory", path);
    }
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    for (;;) {
        ssize_t r = read(fd, buf, BUF);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            free(buf);
            close(fd);
            return ac_err_set(err, "%s: read failed: %s", path, strerror(e));
        }
        if (r == 0)
            break;
        sha256_update(&ctx, (size_t)r, buf);
    }
    free(buf);
    close(fd);
    uint8_t digest[SHA256_DIGEST_SIZE];
    sha256_digest(&ctx, SHA256_DIGEST_SIZE, digest);
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[64] = '\0';
    return 0;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void ac_remove_tree(const char *dir)
{
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
