/* The state directory check of statedir.h: mkdir -p with mode 0700, then
 * the owner and mode of what is there, then the lock. Main thread, at
 * start. */
#include "server/statedir.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fsutil.h"
#include "felix/error.h"

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

/* mkdir -p |dir|: every missing level gets mode 0700. */
static int make_dirs(const char *dir, char *why, size_t whylen)
{
    char at[4096];
    int rv = fx_mkdirs(dir, 0700, at, sizeof(at));
    if (rv == -ENAMETOOLONG)
        return say(rv, why, whylen, "state_dir '%.200s...': path too long", dir);
    if (rv == -ENOTDIR && strcmp(at, dir) == 0)
        return say(FX_ECONFIG, why, whylen, "state_dir '%s' is not a directory", dir);
    if (rv != 0)
        return say(rv, why, whylen, "cannot create state_dir '%s': %s at '%s'", dir, strerror(-rv),
                   at);
    return 0;
}

int fx_state_dir_prepare(const char *dir, char *why, size_t whylen)
{
    int rv = make_dirs(dir, why, whylen);
    if (rv != 0)
        return rv;
    struct stat st;
    if (stat(dir, &st) != 0)
        return say(-errno, why, whylen, "cannot examine state_dir '%s': %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return say(FX_ECONFIG, why, whylen, "state_dir '%s' is not a directory", dir);
    uid_t me = geteuid();
    if (st.st_uid != me)
        return say(FX_ECONFIG, why, whylen,
                   "state_dir '%s' is owned by uid %u, not by this user (uid %u), who could not "
                   "trust the TLS key in it: chown it or choose another state_dir",
                   dir, (unsigned)st.st_uid, (unsigned)me);
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return say(FX_ECONFIG, why, whylen,
                   "state_dir '%s' is writable by group or others (mode %04o), so another user "
                   "could replace the TLS key: run chmod go-w '%s'",
                   dir, (unsigned)(st.st_mode & 07777), dir);
    return 0;
}

int fx_state_dir_open(const char *dir, fx_rootlock **plock, char *why, size_t whylen)
{
    int rv = fx_state_dir_prepare(dir, why, whylen);
    if (rv != 0)
        return rv;
    return fx_rootlock_take(plock, dir, FX_STATE_DIR_LOCK, "state_dir", why, whylen);
}
