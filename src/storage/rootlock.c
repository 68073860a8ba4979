/* The directory lock of rootlock.h: mkdir -p 0700, one resolution of the
 * path, the owner and mode check, then flock on <dir>/.lock. flock locks
 * belong to the open file description, so a second fx_rootlock_take in the
 * same process is refused like one in another process. Main thread or
 * tools. */
#include "storage/rootlock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fsutil.h"
#include "felix/error.h"

struct fx_rootlock {
    int fd; /* the lock file (flocked); -1 when a reader found none */
    char path[PATH_MAX];
    char file[NAME_MAX + 1];
};

static int say(int rv, char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int say(int rv, char *why, size_t whylen, const char *fmt, ...)
{
    if (why != NULL && whylen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return rv;
}

/* ---- the directory ------------------------------------------------------------------ */

/* fsyncs every ancestor of |path|, so that a directory created now is still
 * there after a power cut, before anything is acknowledged in it. */
static int sync_ancestors(const char *path)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s", path);
    for (char *slash; strcmp(p, "/") != 0 && (slash = strrchr(p, '/')) != NULL;) {
        if (slash == p)
            slash[1] = '\0';
        else
            *slash = '\0';
        int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
            return -errno;
        int rv = fsync(fd) == 0 ? 0 : -errno;
        close(fd);
        if (rv != 0)
            return rv;
    }
    return 0;
}

/* Creates |dir| (mode 0700 for each missing level) and resolves it into
 * |l|->path. */
static int make_dir(fx_rootlock *l, const char *dir, const char *what, char *why, size_t whylen)
{
    struct stat st;
    bool existed = stat(dir, &st) == 0;
    char at[PATH_MAX] = "";
    int rv = fx_mkdirs(dir, 0700, at, sizeof(at));
    if (rv == -ENOTDIR)
        return say(FX_ECONFIG, why, whylen, "%s '%s' is not a directory ('%s' is something else)",
                   what, dir, at);
    if (rv != 0)
        return say(rv, why, whylen, "cannot create %s '%s': %s at '%s'", what, dir, strerror(-rv),
                   at);
    if (realpath(dir, l->path) == NULL) {
        int e = errno;
        return say(-e, why, whylen, "cannot resolve %s '%s': %s", what, dir, strerror(e));
    }
    if (!existed && (rv = sync_ancestors(l->path)) != 0)
        return say(rv, why, whylen, "cannot sync the directories above %s '%s': %s", what, dir,
                   strerror(-rv));
    return 0;
}

/* The owner and mode check of state_dir (statedir.c), on the open |dfd|. */
static int check_dir(int dfd, const char *what, const char *dir, char *why, size_t whylen)
{
    struct stat st;
    if (fstat(dfd, &st) != 0) {
        int e = errno;
        return say(-e, why, whylen, "cannot examine %s '%s': %s", what, dir, strerror(e));
    }
    uid_t me = geteuid();
    if (st.st_uid != me)
        return say(FX_ECONFIG, why, whylen,
                   "%s '%s' is owned by uid %u, not by this user (uid %u), who could not trust "
                   "the files in it: chown it or choose another %s",
                   what, dir, (unsigned)st.st_uid, (unsigned)me, what);
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return say(FX_ECONFIG, why, whylen,
                   "%s '%s' is writable by group or others (mode %04o), so another user could "
                   "plant or replace files in it: run chmod go-w '%s'",
                   what, dir, (unsigned)(st.st_mode & 07777), dir);
    return 0;
}

/* ---- the lock file ------------------------------------------------------------------ */

/* Opens the lock file |dfd|/|file| (created 0600 with |create|), never
 * through a symbolic link and never blocking on a FIFO in its place. */
static int open_lock(int dfd, const char *file, bool create, int *pfd)
{
    int flags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (create ? O_RDWR | O_CREAT : O_RDONLY);
    int fd = openat(dfd, file, flags, 0600);
    if (fd < 0)
        return -errno;
    struct stat st;
    int rv = fstat(fd, &st) == 0 ? 0 : -errno;
    if (rv == 0 && !S_ISREG(st.st_mode))
        rv = -EINVAL;
    if (rv != 0) {
        close(fd);
        return rv;
    }
    *pfd = fd;
    return 0;
}

/* Writes "pid N" or what the lock file |fd| says of its holder into |out|. */
static void read_holder(int fd, char *out, size_t cap)
{
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    char *end = NULL;
    long pid = strtol(buf, &end, 10);
    if (end != buf && pid > 0 && (*end == '\n' || *end == '\0'))
        snprintf(out, cap, "pid %ld", pid);
    else
        snprintf(out, cap, "a process that has not written its PID yet");
}

/* Takes |op| (LOCK_EX or LOCK_SH) on |l|->fd without waiting. */
static int lock_fd(fx_rootlock *l, int op, const char *what, const char *dir, char *why,
                   size_t whylen)
{
    if (flock(l->fd, op | LOCK_NB) == 0)
        return 0;
    int e = errno;
    if (e != EWOULDBLOCK)
        return say(-e, why, whylen, "cannot lock %s/%s: %s", l->path, l->file, strerror(e));
    char holder[64];
    read_holder(l->fd, holder, sizeof(holder));
    if (op == LOCK_SH)
        return say(-EBUSY, why, whylen,
                   "%s '%s' is in use by a running felix-broker (%s, per %s/%s); stop it first, "
                   "or read a copy of the stream directory",
                   what, dir, holder, l->path, l->file);
    bool root = strcmp(l->file, FX_ROOTLOCK_FILE) == 0; /* felix log reads a storage root */
    return say(-EBUSY, why, whylen,
               "%s '%s' is in use by another process (%s, per %s/%s: a running felix-broker%s); "
               "one broker at a time may use it, two would overwrite each other's files: stop "
               "the other one or choose another %s",
               what, dir, holder, l->path, l->file, root ? ", or felix log reading it" : "", what);
}

/* Replaces the lock file's text with this process's PID. Written before
 * the cut so that a reader never finds it empty after the first holder. */
static int write_pid(fx_rootlock *l, char *why, size_t whylen)
{
    char text[32];
    int n = snprintf(text, sizeof(text), "%ld\n", (long)getpid());
    int rv = 0;
    ssize_t w = pwrite(l->fd, text, (size_t)n, 0);
    if (w < 0)
        rv = -errno;
    else if (w != n)
        rv = -EIO;
    else if (ftruncate(l->fd, n) != 0)
        rv = -errno;
    if (rv != 0)
        return say(rv, why, whylen, "cannot write the PID into %s/%s: %s", l->path, l->file,
                   strerror(-rv));
    return 0;
}

/* ---- public --------------------------------------------------------------------------- */

/* A new, unlocked fx_rootlock for lock file |file|. */
static fx_rootlock *rootlock_new(const char *file)
{
    fx_rootlock *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->fd = -1;
    snprintf(l->file, sizeof(l->file), "%s", file);
    return l;
}

int fx_rootlock_take(fx_rootlock **pl, const char *dir, const char *file, const char *what,
                     char *why, size_t whylen)
{
    if (strlen(file) > NAME_MAX || strchr(file, '/') != NULL)
        return say(-EINVAL, why, whylen, "bad lock file name '%.64s'", file);
    fx_rootlock *l = rootlock_new(file);
    if (l == NULL)
        return say(-ENOMEM, why, whylen, "out of memory");
    int rv = make_dir(l, dir, what, why, whylen);
    int dfd = -1;
    if (rv == 0 && (dfd = open(l->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        int e = errno;
        rv = say(-e, why, whylen, "cannot open %s '%s': %s", what, dir, strerror(e));
    }
    if (rv == 0)
        rv = check_dir(dfd, what, dir, why, whylen);
    if (rv == 0 && (rv = open_lock(dfd, l->file, true, &l->fd)) != 0)
        say(rv, why, whylen, "cannot open the lock file %s/%s: %s", l->path, l->file,
            rv == -EINVAL ? "not a regular file" : strerror(-rv));
    if (dfd >= 0)
        close(dfd);
    if (rv == 0)
        rv = lock_fd(l, LOCK_EX, what, dir, why, whylen);
    if (rv == 0)
        rv = write_pid(l, why, whylen);
    if (rv != 0) {
        fx_rootlock_free(l);
        return rv;
    }
    *pl = l;
    return 0;
}

int fx_rootlock_share(fx_rootlock **pl, const char *dir, char *why, size_t whylen)
{
    fx_rootlock *l = rootlock_new(FX_ROOTLOCK_FILE);
    if (l == NULL)
        return say(-ENOMEM, why, whylen, "out of memory");
    snprintf(l->path, sizeof(l->path), "%s", dir);
    int rv = 0;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        int e = errno;
        rv = say(-e, why, whylen, "cannot open '%s': %s", dir, strerror(e));
    }
    if (rv == 0 && (rv = open_lock(dfd, l->file, false, &l->fd)) == -ENOENT)
        rv = 0; /* no broker has locked it: nothing to share */
    else if (rv != 0 && dfd >= 0)
        say(rv, why, whylen, "cannot open the lock file %s/%s: %s", dir, l->file,
            rv == -EINVAL ? "not a regular file" : strerror(-rv));
    if (dfd >= 0)
        close(dfd);
    if (rv == 0 && l->fd >= 0)
        rv = lock_fd(l, LOCK_SH, "the storage root", dir, why, whylen);
    if (rv != 0) {
        fx_rootlock_free(l);
        return rv;
    }
    *pl = l;
    return 0;
}

const char *fx_rootlock_path(const fx_rootlock *l)
{
    return l->path;
}

void fx_rootlock_free(fx_rootlock *l)
{
    if (l == NULL)
        return;
    if (l->fd >= 0)
        close(l->fd); /* releases the flock */
    free(l);
}
