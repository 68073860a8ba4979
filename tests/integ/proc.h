/* Child processes for the integration tests that run the built binaries
 * (felix-broker, felix) from $FX_BINARY_DIR: start one with its output in
 * files, wait for it with a hang guard, read what it wrote. Children still
 * running when a case fails are killed by proc_teardown (register it as the
 * group teardown). Single-threaded test code. */
#ifndef FX_TEST_INTEG_PROC_H
#define FX_TEST_INTEG_PROC_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fx_test.h"

extern char **environ;

#ifndef PROC_HANG_MS
#define PROC_HANG_MS 10000
#endif

static pid_t proc_kids[8];

static inline uint64_t proc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline void proc_track(pid_t pid, bool on)
{
    for (size_t i = 0; i < sizeof(proc_kids) / sizeof(proc_kids[0]); i++) {
        if (on && proc_kids[i] == 0) {
            proc_kids[i] = pid;
            return;
        }
        if (!on && proc_kids[i] == pid)
            proc_kids[i] = 0;
    }
    if (on)
        fail_msg("too many children");
}

static inline int proc_teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(proc_kids) / sizeof(proc_kids[0]); i++) {
        if (proc_kids[i] > 0) {
            kill(proc_kids[i], SIGKILL);
            waitpid(proc_kids[i], NULL, 0);
            proc_kids[i] = 0;
        }
    }
    return 0;
}

/* Writes $FX_BINARY_DIR/|name| into |out|; skips the case when it is not
 * built. */
static inline void proc_binary(const char *name, char *out, size_t cap)
{
    const char *bin = getenv("FX_BINARY_DIR");
    if (bin == NULL || bin[0] == '\0')
        fx_test_skip("FX_BINARY_DIR is not set (run through ctest)");
    snprintf(out, cap, "%s/%s", bin, name);
    if (access(out, X_OK) != 0)
        fx_test_skip("a binary under test is not built in FX_BINARY_DIR");
}

/* Starts |argv| with stdin from /dev/null, stdout and stderr into the files
 * |out| and |err|, and the entries |env| (NULL-terminated, may be NULL) put
 * before this process's environment (so they win). With |clean| the
 * environment is |env| alone. */
static inline pid_t proc_spawn(char *const argv[], const char *out, const char *err,
                               char *const env[], bool clean)
{
    char *envp[512];
    size_t n = 0;
    for (size_t i = 0; env != NULL && env[i] != NULL && n < 511; i++)
        envp[n++] = env[i];
    for (char **e = environ; !clean && *e != NULL && n < 511; e++)
        envp[n++] = *e;
    envp[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid = 0;
    int rv = posix_spawn(&pid, argv[0], &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    if (rv != 0)
        fail_msg("cannot start %s: %s", argv[0], strerror(rv));
    proc_track(pid, true);
    return pid;
}

/* Waits for |pid| to exit and returns its exit status; fails the case on a
 * hang (PROC_HANG_MS) or a death by signal. */
static inline int proc_wait(pid_t pid, const char *what)
{
    uint64_t deadline = proc_now_ms() + PROC_HANG_MS;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (r < 0)
            fail_msg("waitpid %s: %s", what, strerror(errno));
        if (proc_now_ms() > deadline)
            fail_msg("%s did not exit within %d ms", what, PROC_HANG_MS);
        usleep(10000);
    }
    proc_track(pid, false);
    if (!WIFEXITED(st))
        fail_msg("%s ended by signal %d", what, WIFSIGNALED(st) ? WTERMSIG(st) : -1);
    return WEXITSTATUS(st);
}

/* Reads the file |path| into |buf| (NUL-terminated, at most |cap| - 1
 * bytes); an unreadable file reads as empty. */
static inline size_t proc_slurp(const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n;
}

/* Waits until the file |path| holds |needle|; fails the case when |pid|
 * exits first or on a hang. The file's text is left in |buf|. */
static inline void proc_wait_text(const char *path, const char *needle, char *buf, size_t cap,
                                  pid_t pid)
{
    uint64_t deadline = proc_now_ms() + PROC_HANG_MS;
    for (;;) {
        proc_slurp(path, buf, cap);
        if (strstr(buf, needle) != NULL)
            return;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            proc_track(pid, false);
            fail_msg("process exited (status %d) before writing '%s'; it wrote:\n%s",
                     WIFEXITED(st) ? WEXITSTATUS(st) : -1, needle, buf);
        }
        if (proc_now_ms() > deadline)
            fail_msg("no '%s' in %s; it holds:\n%s", needle, path, buf);
        usleep(10000);
    }
}

static inline void proc_assert_contains(const char *hay, const char *needle)
{
    if (strstr(hay, needle) == NULL)
        fail_msg("expected \"%s\" in:\n%s", needle, hay);
}

#endif
