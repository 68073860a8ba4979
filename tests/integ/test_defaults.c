/* Safe defaults, checked on the felix-broker binary from $FX_BINARY_DIR run
 * as a child process: auth_mode none refuses a non-loopback quic_bind unless
 * allow_unauthenticated (then warns), the banner prints the memory bound and
 * an explicit setting over memory_limit_bytes is refused, and the probe
 * listener answers /live while idle clients hold every admin connection
 * (slow-loris). Timeouts are hang guards only. */
/* fx-test-libs: fx_base */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fx_test.h"

#include "base/loop.h"

#define HANG_MS 10000

extern char **environ;

/* ---- child processes ---------------------------------------------------------- */

static pid_t g_kid; /* killed by the teardown if a case fails with it running */

typedef struct run {
    char dir[64];
    char broker[512];
    char out[128], err[128], state[160];
    char text[16384];
    pid_t pid;
} run;

static int kill_kid(void **state)
{
    if (g_kid > 0) {
        kill(g_kid, SIGKILL);
        waitpid(g_kid, NULL, 0);
        g_kid = 0;
    }
    return 0;
}

static void run_init(run *r)
{
    const char *bin = getenv("FX_BINARY_DIR");
    if (bin == NULL || bin[0] == '\0')
        fx_test_skip("FX_BINARY_DIR is not set (run through ctest)");
    snprintf(r->broker, sizeof(r->broker), "%s/felix-broker", bin);
    if (access(r->broker, X_OK) != 0)
        fx_test_skip("felix-broker is not built in FX_BINARY_DIR");
    snprintf(r->dir, sizeof(r->dir), "/tmp/fx_defaults_XXXXXX");
    assert_non_null(mkdtemp(r->dir));
    snprintf(r->out, sizeof(r->out), "%s/out", r->dir);
    snprintf(r->err, sizeof(r->err), "%s/err", r->dir);
    snprintf(r->state, sizeof(r->state), "state_dir=%s/state", r->dir);
}

static void run_deinit(run *r)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", r->dir);
    assert_int_equal(system(cmd), 0);
}

/* Starts felix-broker with |args| (NULL-terminated) after the test's own
 * state_dir and loopback port-0 admin bind, and |env| added. */
static void start(run *r, const char *const *args, char *const *env)
{
    char *argv[32];
    size_t n = 0;
    argv[n++] = r->broker;
    argv[n++] = "--set";
    argv[n++] = r->state;
    argv[n++] = "--set";
    argv[n++] = "metrics_bind=127.0.0.1:0";
    for (; args && *args && n < 30; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    char *envp[256];
    size_t m = 0;
    for (; env && *env && m < 16; env++)
        envp[m++] = *env;
    for (char **e = environ; *e && m < 255; e++)
        envp[m++] = *e;
    envp[m] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, r->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, r->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int rv = posix_spawn(&r->pid, argv[0], &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    if (rv != 0)
        fail_msg("cannot start %s: %s", argv[0], strerror(rv));
    g_kid = r->pid;
}

static void slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
}

static int wait_exit(run *r)
{
    uint64_t deadline = fx_now_ns() + HANG_MS * FX_NS_PER_MS;
    int st = 0;
    while (waitpid(r->pid, &st, WNOHANG) != r->pid) {
        if (fx_now_ns() > deadline) {
            slurp(r->err, r->text, sizeof(r->text));
            fail_msg("felix-broker did not exit within %d ms; stderr:\n%s", HANG_MS, r->text);
        }
        usleep(10000);
    }
    g_kid = 0;
    if (!WIFEXITED(st))
        fail_msg("felix-broker ended by signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
    return WEXITSTATUS(st);
}

/* Waits for |needle| in the broker's stdout; returns where it starts in
 * r->text. */
static const char *wait_banner(run *r, const char *needle)
{
    uint64_t deadline = fx_now_ns() + HANG_MS * FX_NS_PER_MS;
    for (;;) {
        slurp(r->out, r->text, sizeof(r->text));
        const char *p = strstr(r->text, needle);
        if (p)
            return p;
        int st;
        if (waitpid(r->pid, &st, WNOHANG) == r->pid) {
            g_kid = 0;
            slurp(r->err, r->text, sizeof(r->text));
            fail_msg("felix-broker exited before printing '%s'; stderr:\n%s", needle, r->text);
        }
        if (fx_now_ns() > deadline)
            fail_msg("no '%s' in the banner:\n%s", needle, r->text);
        usleep(10000);
    }
}

static void stop(run *r)
{
    assert_int_equal(kill(r->pid, SIGTERM), 0);
    assert_int_equal(wait_exit(r), 0);
}

static void assert_err_contains(run *r, const char *needle)
{
    slurp(r->err, r->text, sizeof(r->text));
    if (!strstr(r->text, needle))
        fail_msg("expected '%s' in stderr:\n%s", needle, r->text);
}

/* ---- exposure ----------------------------------------------------------------- */

static void test_non_loopback_bind_without_auth_refuses_to_start(void **state)
{
    run r;
    run_init(&r);
    const char *args[] = {"--set", "quic_bind=0.0.0.0:0", NULL};
    start(&r, args, NULL);
    assert_int_equal(wait_exit(&r), 1);
    assert_err_contains(&r, "not a loopback address and auth_mode is none");
    assert_err_contains(&r, "allow_unauthenticated: true");
    assert_err_contains(&r, "auth_mode: jwt");
    run_deinit(&r);
}

static void test_allow_unauthenticated_starts_with_warning(void **state)
{
    run r;
    run_init(&r);
    const char *args[] = {"--set", "quic_bind=0.0.0.0:0", NULL};
    char *env[] = {"FELIX_ALLOW_UNAUTHENTICATED=true", NULL};
    start(&r, args, env);
    wait_banner(&r, "auth_mode none");
    assert_err_contains(&r, "WARN");
    assert_err_contains(&r, "quic_bind=0.0.0.0:0 is not loopback and auth_mode is none");
    stop(&r);
    run_deinit(&r);
}

/* ---- the memory bound ---------------------------------------------------------- */

static void test_banner_prints_memory_bound_and_explicit_excess_refused(void **state)
{
    run r;
    run_init(&r);
    const char *args[] = {"--set", "quic_bind=127.0.0.1:0", NULL};
    char *env[] = {"FELIX_MEMORY_LIMIT_BYTES=4GiB", NULL};
    start(&r, args, env);
    const char *line = wait_banner(&r, "felix-broker: memory bound ");
    assert_non_null(strstr(line, "memory_limit_bytes 4.0 GiB (set)"));
    unsigned conns = 0;
    const char *eq = strstr(line, " = ");
    assert_non_null(eq);
    assert_int_equal(sscanf(eq, " = %u connections", &conns), 1);
    assert_true(conns >= 11 * 12 && conns < 4096); /* the benchmarks' pools still fit */
    stop(&r);
    run_deinit(&r);

    run_init(&r);
    const char *over[] = {"--set", "quic_bind=127.0.0.1:0", "--set", "max_connections=4096", NULL};
    start(&r, over, env);
    assert_int_equal(wait_exit(&r), 1);
    assert_err_contains(&r, "exceeds");
    assert_err_contains(&r, "max_connections (flag --set)");
    run_deinit(&r);
}

/* ---- slow-loris against the admin port ------------------------------------------ */

static int connect_from(const char *src, uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = HANG_MS / 1000};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    struct sockaddr_in me = {.sin_family = AF_INET};
    assert_int_equal(inet_pton(AF_INET, src, &me.sin_addr), 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&me, sizeof(me)), 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
    return fd;
}

/* The status of GET |path| on a fresh connection from |src|, or -1 when no
 * answer came within |timeout_s|. */
static int get_status(const char *src, uint16_t port, const char *path, int timeout_s)
{
    int fd = connect_from(src, port);
    struct timeval tv = {.tv_sec = timeout_s};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    char req[128], reply[256] = "";
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    (void)send(fd, req, (size_t)n, MSG_NOSIGNAL);
    ssize_t got = recv(fd, reply, sizeof(reply) - 1, 0);
    close(fd);
    int st = -1;
    if (got <= 0 || sscanf(reply, "HTTP/1.%*d %d", &st) != 1)
        return -1;
    return st;
}

/* The body of a 200 answer to GET |path| (malloc'd), or NULL. */
static char *get_body(const char *src, uint16_t port, const char *path)
{
    int fd = connect_from(src, port);
    struct timeval tv = {.tv_sec = 1};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    char req[128];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    (void)send(fd, req, (size_t)n, MSG_NOSIGNAL);
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    ssize_t got;
    while ((got = recv(fd, buf + len, cap - 1 - len, 0)) > 0 && len + (size_t)got < cap - 1)
        len += (size_t)got;
    close(fd);
    buf[len] = '\0';
    if (got < 0 || strncmp(buf, "HTTP/1.", 7) != 0 || strncmp(buf + 8, " 200", 4) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static unsigned banner_port(const char *line)
{
    const char *p = strstr(line, "(port ");
    unsigned port = 0;
    assert_non_null(p);
    assert_int_equal(sscanf(p, "(port %u)", &port), 1);
    assert_true(port > 0 && port < 65536);
    return port;
}

static void test_probe_port_answers_while_idle_clients_hold_admin_port(void **state)
{
    run r;
    run_init(&r);
    const char *args[] = {"--set", "quic_bind=127.0.0.1:0", NULL};
    start(&r, args, NULL);
    uint16_t admin = (uint16_t)banner_port(wait_banner(&r, "admin HTTP on "));
    uint16_t probe = (uint16_t)banner_port(wait_banner(&r, "health probes on "));
    assert_int_equal(get_status("127.0.0.1", probe, "/live", 5), 200);
    /* 72 idle connections that never finish their request, 9 per address:
     * more than the admin port's 32 slots and its 8 per address. */
    enum { NSRC = 8, PER = 9 };
    int fds[NSRC * PER];
    for (int i = 0; i < NSRC * PER; i++) {
        char src[32];
        snprintf(src, sizeof(src), "127.0.4.%d", 1 + i / PER);
        fds[i] = connect_from(src, admin);
        (void)send(fds[i], "GET /metrics HTTP/1.1\r\n", 23, MSG_NOSIGNAL);
    }
    usleep(300 * 1000);
    assert_int_equal(get_status("127.0.5.1", admin, "/live", 1), -1); /* starved */
    for (int i = 0; i < 5; i++) {
        assert_int_equal(get_status("127.0.0.1", probe, "/live", 5), 200);
        assert_int_equal(get_status("127.0.0.1", probe, "/ready", 5), 200);
    }
    for (int i = 0; i < NSRC * PER; i++)
        close(fds[i]);
    /* Once the idle clients are gone the admin port serves again, and the
     * refusals were counted. */
    char *m = NULL;
    for (int i = 0; i < 50 && !m; i++) {
        m = get_body("127.0.0.1", admin, "/metrics");
        if (!m)
            usleep(100 * 1000);
    }
    assert_non_null(m);
    const char *c = strstr(m, "felix_admin_refused_total{reason=\"connection_limit\"} ");
    assert_non_null(c);
    assert_true(strtoull(strchr(c, '}') + 2, NULL, 10) > 0);
    free(m);
    stop(&r);
    assert_err_contains(&r, "refused reason=connection_limit");
    run_deinit(&r);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(test_non_loopback_bind_without_auth_refuses_to_start, kill_kid),
    cmocka_unit_test_teardown(test_allow_unauthenticated_starts_with_warning, kill_kid),
    cmocka_unit_test_teardown(test_banner_prints_memory_bound_and_explicit_excess_refused,
                              kill_kid),
    cmocka_unit_test_teardown(test_probe_port_answers_while_idle_clients_hold_admin_port, kill_kid),
};

FX_TEST_MAIN(tests)
