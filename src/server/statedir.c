/* The state directory check of statedir.h: mkdir -p with mode 0700, then
 * the owner and mode of what is there, then the lock; and the --dev admin
 * token kept in it. Main thread, at start. */
#include "server/statedir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
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

/* ---- the --dev admin token -------------------------------------------------- */

/* RFC 6750's b64token characters. */
static bool token_char(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch != 0 && strchr("-._~+/=", ch) != NULL);
}

/* Checks that the open |fd| (|path|) is a regular file of ours that nobody
 * else can read or write. */
static int check_token_file(int fd, const char *path, char *why, size_t whylen)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return say(-errno, why, whylen, "cannot examine admin token file '%s': %s", path,
                   strerror(errno));
    if (!S_ISREG(st.st_mode))
        return say(FX_ECONFIG, why, whylen, "admin token file '%s' is not a regular file", path);
    if (st.st_uid != geteuid())
        return say(FX_ECONFIG, why, whylen,
                   "admin token file '%s' is owned by uid %u, not by this user (uid %u): "
                   "remove it to generate a new one",
                   path, (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & (S_IRWXG | S_IRWXO))
        return say(FX_ECONFIG, why, whylen,
                   "admin token file '%s' is open to group or others (mode %04o): run "
                   "chmod 600 '%s', or remove it to generate a new one",
                   path, (unsigned)(st.st_mode & 07777), path);
    return 0;
}

/* Reads the token of the existing file |path|; -ENOENT when there is none. */
static int read_token(const char *path, char *token, size_t cap, char *why, size_t whylen)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ELOOP)
        return say(FX_ECONFIG, why, whylen,
                   "admin token file '%s' is a symbolic link: remove it to generate a new one",
                   path);
    if (fd < 0)
        return errno == ENOENT ? -ENOENT
                               : say(-errno, why, whylen, "cannot open admin token file '%s': %s",
                                     path, strerror(errno));
    char buf[1024];
    int rv = check_token_file(fd, path, why, whylen);
    ssize_t n = rv == 0 ? read(fd, buf, sizeof(buf)) : 0;
    if (n < 0)
        rv = say(-errno, why, whylen, "cannot read admin token file '%s': %s", path,
                 strerror(errno));
    close(fd);
    if (rv != 0)
        return rv;
    size_t len = 0;
    while (len < (size_t)n && token_char((unsigned char)buf[len]))
        len++;
    size_t end = len < (size_t)n && buf[len] == '\n' ? len + 1 : len;
    if (len == 0 || end != (size_t)n || (size_t)n == sizeof(buf) || len >= cap) {
        rv = say(FX_ECONFIG, why, whylen,
                 "admin token file '%s' does not hold one token (1 to %zu of the characters "
                 "A-Z a-z 0-9 - . _ ~ + / =, then an optional newline): remove it to generate "
                 "a new one",
                 path, cap - 1);
    } else {
        memcpy(token, buf, len);
        token[len] = '\0';
    }
    explicit_bzero(buf, sizeof(buf));
    return rv;
}

/* Writes a fresh token to |path| (never over an existing file). */
static int write_token(const char *path, char *why, size_t whylen)
{
    uint8_t raw[FX_STATE_DIR_ADMIN_TOKEN_LEN / 2];
    char text[FX_STATE_DIR_ADMIN_TOKEN_LEN + 1];
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return say(-EIO, why, whylen, "cannot get random bytes for the admin token: %s",
                   strerror(errno));
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(text + 2 * i, 3, "%02x", raw[i]);
    text[FX_STATE_DIR_ADMIN_TOKEN_LEN] = '\n';
    int rv = fx_file_write_atomic(path, text, sizeof(text), 0600,
                                  FX_FILE_EXACT_MODE | FX_FILE_NO_REPLACE);
    explicit_bzero(raw, sizeof(raw));
    explicit_bzero(text, sizeof(text));
    if (rv != 0 && rv != -EEXIST)
        return say(rv, why, whylen, "cannot write admin token file '%s': %s", path, strerror(-rv));
    return rv;
}

int fx_state_dir_admin_token(const char *dir, char *token, size_t cap, bool *pcreated, char *why,
                             size_t whylen)
{
    char path[4096];
    if (pcreated != NULL)
        *pcreated = false;
    if (snprintf(path, sizeof(path), "%s/" FX_STATE_DIR_ADMIN_TOKEN_FILE, dir) >= (int)sizeof(path))
        return say(-ENAMETOOLONG, why, whylen, "state_dir '%.200s...': path too long", dir);
    int rv = read_token(path, token, cap, why, whylen);
    if (rv != -ENOENT)
        return rv;
    rv = write_token(path, why, whylen);
    if (rv == 0 && pcreated != NULL)
        *pcreated = true;
    if (rv != 0 && rv != -EEXIST) /* -EEXIST: another start wrote it first */
        return rv;
    return read_token(path, token, cap, why, whylen);
}
