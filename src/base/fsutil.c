/* mkdir -p and atomic file replacement (fsutil.h). Main thread or tools. */
#include "base/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int mkdir_one(const char *path, mode_t mode, char *failed, size_t cap)
{
    struct stat st;
    int rv = 0;
    if (mkdir(path, mode) == 0)
        return 0;
    if (errno != EEXIST)
        rv = -errno;
    else if (stat(path, &st) != 0)
        rv = -errno;
    else if (!S_ISDIR(st.st_mode))
        rv = -ENOTDIR;
    if (rv == 0)
        return 0;
    if (failed != NULL && cap > 0)
        snprintf(failed, cap, "%s", path);
    return rv;
}

int fx_mkdirs(const char *path, mode_t mode, char *failed, size_t cap)
{
    char p[PATH_MAX];
    int n = snprintf(p, sizeof(p), "%s", path);
    if (n <= 0 || (size_t)n >= sizeof(p))
        return n <= 0 ? -EINVAL : -ENAMETOOLONG;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/' || s[-1] == '/')
            continue;
        *s = '\0';
        int rv = mkdir_one(p, mode, failed, cap);
        *s = '/';
        if (rv != 0)
            return rv;
    }
    return mkdir_one(p, mode, failed, cap);
}

static int write_all(int fd, const void *data, size_t len)
{
    const char *b = data;
    for (size_t done = 0; done < len;) {
        ssize_t w = write(fd, b + done, len - done);
        if (w < 0 && errno != EINTR)
            return -errno;
        if (w > 0)
            done += (size_t)w;
    }
    return 0;
}

/* fsyncs the directory holding |path| so the rename itself is durable. */
static int sync_parent(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else
        snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rv = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rv;
}

/* Creates |tmp|, writes, syncs and closes it; |*created| says whether it
 * exists now (a failed open leaves whatever took its name alone). */
static int fill_tmp(const char *tmp, const void *data, size_t len, mode_t mode, unsigned flags,
                    bool *created)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    *created = fd >= 0;
    if (fd < 0)
        return -errno;
    int rv = 0;
    if ((flags & FX_FILE_EXACT_MODE) && fchmod(fd, mode) != 0)
        rv = -errno;
    if (rv == 0)
        rv = write_all(fd, data, len);
    if (rv == 0 && fsync(fd) != 0)
        rv = -errno;
    if (close(fd) != 0 && rv == 0)
        rv = -errno;
    return rv;
}

int fx_file_write_atomic(const char *path, const void *data, size_t len, mode_t mode,
                         unsigned flags)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    if (unlink(tmp) != 0 && errno != ENOENT)
        return -errno;
    bool created;
    int rv = fill_tmp(tmp, data, len, mode, flags, &created);
    if (!created)
        return rv;
    if (rv == 0) {
        int moved = (flags & FX_FILE_NO_REPLACE) ? link(tmp, path) : rename(tmp, path);
        rv = moved == 0 ? 0 : -errno;
    }
    if (rv != 0 || (flags & FX_FILE_NO_REPLACE))
        (void)unlink(tmp); /* failed: |path| is as it was; linked: |path| holds the file */
    return rv == 0 ? sync_parent(path) : rv;
}
