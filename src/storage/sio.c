/* The POSIX fx_sio (plain system calls on the local file system) and the
 * helpers built on any fx_sio: mkdir -p, whole-file read, atomic replace,
 * directory removal. Files are created 0600 and directories 0700, and no
 * call follows a symbolic link where the storage code names a file or a
 * stream directory (O_NOFOLLOW, lstat, removal through openat/unlinkat
 * relative to directory fds). Stateless; any thread. */
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

/* ---- POSIX implementation ---------------------------------------------- */

static int px_open(fx_sio *io, const char *path, fx_sio_mode mode, int *pfd)
{
    int flags = O_CLOEXEC | O_NOFOLLOW;
    if (mode == FX_SIO_READ)
        flags |= O_RDONLY;
    else if (mode == FX_SIO_WRITE)
        flags |= O_RDWR;
    else
        flags |= O_RDWR | O_CREAT | O_EXCL;
    int fd = open(path, flags, 0600);
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
    return mkdir(path, 0700) == 0 ? 0 : -errno;
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

static bool is_dot(const char *name)
{
    return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

/* Whether entry |name| of directory |dfd| is a directory; a symbolic link
 * never is. -ENOENT when it has gone. */
static int entry_is_dir(int dfd, const struct dirent *e, bool *pis_dir)
{
    if (e->d_type != DT_UNKNOWN) {
        *pis_dir = e->d_type == DT_DIR;
        return 0;
    }
    struct stat st;
    if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    *pis_dir = S_ISDIR(st.st_mode);
    return 0;
}

/* Opens directory |name| of |dfd| (AT_FDCWD: a path) for reading, never
 * through a symbolic link. */
static DIR *open_dir_at(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return d;
}

static int px_list(fx_sio *io, const char *path, fx_sio_list_cb cb, void *user)
{
    DIR *d = open_dir_at(AT_FDCWD, path);
    if (d == NULL)
        return -errno;
    int rv = 0;
    struct dirent *e;
    while (rv == 0 && (errno = 0, e = readdir(d)) != NULL) {
        if (is_dot(e->d_name))
            continue;
        bool is_dir = false;
        rv = entry_is_dir(dirfd(d), e, &is_dir);
        if (rv == -ENOENT) {
            rv = 0; /* gone since readdir */
            continue;
        }
        if (rv == 0)
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
    if (lstat(path, &st) != 0)
        return -errno;
    *pis_dir = S_ISDIR(st.st_mode);
    return 0;
}

/* Nesting remove_tree goes into before it gives up (-ENOTEMPTY): a stream
 * directory holds only files, so this bounds the descriptors and the stack
 * a planted tree could make it use. */
#define RM_DEPTH_MAX 16

static int rm_entry(int dfd, const char *name, bool is_dir, int depth);

/* Removes every entry of the open directory |d| (closed by the caller). */
static int rm_children(DIR *d, int depth)
{
    int rv = 0;
    struct dirent *e;
    while (rv == 0 && (errno = 0, e = readdir(d)) != NULL) {
        if (is_dot(e->d_name))
            continue;
        bool is_dir = false;
        rv = entry_is_dir(dirfd(d), e, &is_dir);
        if (rv == 0)
            rv = rm_entry(dirfd(d), e->d_name, is_dir, depth);
        if (rv == -ENOENT)
            rv = 0; /* gone since readdir */
    }
    if (rv == 0 && e == NULL && errno != 0)
        rv = -errno;
    return rv;
}

/* Removes entry |name| of directory |dfd|: a directory after its entries,
 * anything else (a symbolic link included) by unlinking the name itself. */
static int rm_entry(int dfd, const char *name, bool is_dir, int depth)
{
    if (!is_dir)
        return unlinkat(dfd, name, 0) == 0 ? 0 : -errno;
    if (depth >= RM_DEPTH_MAX)
        return -ENOTEMPTY;
    DIR *d = open_dir_at(dfd, name);
    if (d == NULL && (errno == ELOOP || errno == ENOTDIR))
        return unlinkat(dfd, name, 0) == 0 ? 0 : -errno; /* replaced since it was listed */
    if (d == NULL)
        return -errno;
    int rv = rm_children(d, depth + 1);
    closedir(d);
    if (rv != 0)
        return rv;
    return unlinkat(dfd, name, AT_REMOVEDIR) == 0 ? 0 : -errno;
}

static int px_remove_tree(fx_sio *io, const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *name = slash != NULL ? slash + 1 : path;
    if (name[0] == '\0' || is_dot(name))
        return -EINVAL;
    char parent[PATH_MAX];
    parent_of(path, parent, sizeof(parent));
    int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0)
        return -errno;
    struct stat st;
    int rv = fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
    if (rv == 0)
        rv = rm_entry(pfd, name, S_ISDIR(st.st_mode), 0);
    close(pfd);
    return rv;
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
    .remove_tree = px_remove_tree,
};

static fx_sio POSIX_SIO = {.ops = &POSIX_OPS};

fx_sio *fx_sio_posix(void)
{
    return &POSIX_SIO;
}

/* ---- helpers on any fx_sio ------------------------------------------------ */

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

int fx_sio_remove_dir(fx_sio *io, const char *path)
{
    int rv = io->ops->remove_tree(io, path);
    if (rv == -ENOENT)
        return 0;
    if (rv != 0)
        return rv;
    char parent[PATH_MAX];
    parent_of(path, parent, sizeof(parent));
    return io->ops->sync_dir(io, parent);
}
