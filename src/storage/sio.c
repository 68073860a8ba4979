/* The POSIX fx_sio (plain system calls on the local file system) and the
 * helpers built on any fx_sio: mkdir -p, whole-file read, atomic replace,
 * directory removal. Stateless; any thread. */
#include "storage/sio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- POSIX implementation ---------------------------------------------- */

static int px_open(fx_sio *io, const char *path, fx_sio_mode mode, int *pfd)
{
    int flags = O_CLOEXEC;
    if (mode == FX_SIO_READ)
        flags |= O_RDONLY;
    else if (mode == FX_SIO_WRITE)
        flags |= O_RDWR;
    else
        flags |= O_RDWR | O_CREAT | O_EXCL;
    int fd = open(path, flags, 0644);
    if (fd < 0)
        return -errno;
    *pfd = fd;
    return 0;
}

static int px_close(fx_sio *io, int fd)
{
    return close(fd) == 0 ? 0 : -errno;
}

static int px_pwrite(fx_sio *io, int fd, const void *buf, size_t n, uint64_t off)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        if (w == 0)
            return -EIO;
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

static ssize_t px_pread(fx_sio *io, int fd, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

static int px_fdatasync(fx_sio *io, int fd)
{
    return fdatasync(fd) == 0 ? 0 : -errno;
}

static int px_fallocate(fx_sio *io, int fd, uint64_t len)
{
    return fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)len) == 0 ? 0 : -errno;
}

static int px_ftruncate(fx_sio *io, int fd, uint64_t len)
{
    return ftruncate(fd, (off_t)len) == 0 ? 0 : -errno;
}

static int px_fsize(fx_sio *io, int fd, uint64_t *psize)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    *psize = (uint64_t)st.st_size;
    return 0;
}

static int px_rename(fx_sio *io, const char *from, const char *to)
{
    return rename(from, to) == 0 ? 0 : -errno;
}

static int px_unlink(fx_sio *io, const char *path)
{
    return unlink(path) == 0 ? 0 : -errno;
}

static int px_mkdir(fx_sio *io, const char *path)
{
    return mkdir(path, 0755) == 0 ? 0 : -errno;
}

static int px_rmdir(fx_sio *io, const char *path)
{
    return rmdir(path) == 0 ? 0 : -errno;
}

static int px_sync_dir(fx_sio *io, const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rv = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rv;
}

static int px_list(fx_sio *io, const char *path, fx_sio_list_cb cb, void *user)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return -errno;
    int rv = 0;
    struct dirent *e;
    while (rv == 0 && (errno = 0, e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        bool is_dir = e->d_type == DT_DIR;
        if (e->d_type == DT_UNKNOWN) {
            struct stat st;
            is_dir = fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
        }
        rv = cb(user, e->d_name, is_dir);
    }
    if (rv == 0 && e == NULL && errno != 0)
        rv = -errno;
    closedir(d);
    return rv;
}

static int px_stat(fx_sio *io, const char *path, bool *pis_dir)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -errno;
    *pis_dir = S_ISDIR(st.st_mode);
    return 0;
}

static const fx_sio_ops POSIX_OPS = {
    .open = px_open,
    .close = px_close,
    .pwrite = px_pwrite,
    .pread = px_pread,
    .fdatasync = px_fdatasync,
    .fallocate = px_fallocate,
    .ftruncate = px_ftruncate,
    .fsize = px_fsize,
    .rename = px_rename,
    .unlink = px_unlink,
    .mkdir = px_mkdir,
    .rmdir = px_rmdir,
    .sync_dir = px_sync_dir,
    .list = px_list,
    .stat = px_stat,
};

static fx_sio POSIX_SIO = {.ops = &POSIX_OPS};

fx_sio *fx_sio_posix(void)
{
    return &POSIX_SIO;
}

/* ---- helpers on any fx_sio ------------------------------------------------ */

/* Writes the parent directory of |path| into |out| ("." when none). */
static void parent_of(const char *path, char *out, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL) {
        snprintf(out, cap, ".");
    } else if (slash == path) {
        snprintf(out, cap, "/");
    } else {
        snprintf(out, cap, "%.*s", (int)(slash - path), path);
    }
}

int fx_sio_mkdirs(fx_sio *io, const char *path)
{
    bool is_dir = false;
    int rv = io->ops->stat(io, path, &is_dir);
    if (rv == 0)
        return is_dir ? 0 : -ENOTDIR;
    if (rv != -ENOENT)
        return rv;
    char parent[PATH_MAX];
    parent_of(path, parent, sizeof(parent));
    if (strcmp(parent, path) != 0 && strcmp(parent, ".") != 0 && strcmp(parent, "/") != 0) {
        if ((rv = fx_sio_mkdirs(io, parent)) != 0)
            return rv;
    }
    rv = io->ops->mkdir(io, path);
    if (rv == -EEXIST)
        return 0;
    if (rv != 0)
        return rv;
    return io->ops->sync_dir(io, parent);
}

int fx_sio_read_file(fx_sio *io, const char *path, size_t max, char **pbuf, size_t *plen)
{
    int fd;
    int rv = io->ops->open(io, path, FX_SIO_READ, &fd);
    if (rv != 0)
        return rv;
    uint64_t size = 0;
    char *buf = NULL;
    if ((rv = io->ops->fsize(io, fd, &size)) != 0)
        goto out;
    if (size > max) {
        rv = -EFBIG;
        goto out;
    }
    buf = malloc((size_t)size + 1);
    if (buf == NULL) {
        rv = -ENOMEM;
        goto out;
    }
    ssize_t n = io->ops->pread(io, fd, buf, (size_t)size, 0);
    if (n < 0) {
        rv = (int)n;
        goto out;
    }
    buf[n] = '\0';
    *pbuf = buf;
    *plen = (size_t)n;
    buf = NULL;
out:
    free(buf);
    io->ops->close(io, fd);
    return rv;
}

int fx_sio_write_file_atomic(fx_sio *io, const char *path, const void *buf, size_t len)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    int rv = io->ops->unlink(io, tmp);
    if (rv != 0 && rv != -ENOENT)
        return rv;
    int fd;
    if ((rv = io->ops->open(io, tmp, FX_SIO_CREATE, &fd)) != 0)
        return rv;
    rv = io->ops->pwrite(io, fd, buf, len, 0);
    if (rv == 0)
        rv = io->ops->fdatasync(io, fd);
    int crv = io->ops->close(io, fd);
    if (rv == 0)
        rv = crv;
    if (rv == 0)
        rv = io->ops->rename(io, tmp, path);
    if (rv != 0) {
        (void)io->ops->unlink(io, tmp); /* best effort: the old file is intact */
        return rv;
    }
    char dir[PATH_MAX];
    parent_of(path, dir, sizeof(dir));
    return io->ops->sync_dir(io, dir);
}

typedef struct rm_ctx {
    fx_sio *io;
    const char *dir;
    int rv;
} rm_ctx;

static int rm_one(void *user, const char *name, bool is_dir)
{
    rm_ctx *c = user;
    if (is_dir)
        return -ENOTEMPTY;
    char p[PATH_MAX];
    if (snprintf(p, sizeof(p), "%s/%s", c->dir, name) >= (int)sizeof(p))
        return -ENAMETOOLONG;
    int rv = c->io->ops->unlink(c->io, p);
    return rv == -ENOENT ? 0 : rv;
}

int fx_sio_remove_dir(fx_sio *io, const char *path)
{
    rm_ctx c = {.io = io, .dir = path};
    int rv = io->ops->list(io, path, rm_one, &c);
    if (rv == -ENOENT)
        return 0;
    if (rv != 0)
        return rv;
    if ((rv = io->ops->rmdir(io, path)) != 0 && rv != -ENOENT)
        return rv;
    char parent[PATH_MAX];
    parent_of(path, parent, sizeof(parent));
    return io->ops->sync_dir(io, parent);
}
