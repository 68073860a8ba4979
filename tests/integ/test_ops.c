/* Operator-facing integration tests: libfelix against an in-process broker
 * over IPv6 loopback and a dual-stack bind, and the README walk-through run
 * as a new user would: the felix-broker and felix binaries from
 * $FX_BINARY_DIR as child processes (start, sub, pub, /metrics, SIGTERM,
 * the --dev admin token and `felix streams`, stream names in /metrics).
 * Timeouts are hang guards only; nothing asserts on speed. */
/* fx-test-libs: fx_broker fx_client fx_server fx_quic fx_wire fx_base */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HANG_MS 10000 /* before fixture.h: its hang guard */

#include "integ/fixture.h"
#include "quic/quic.h"

extern char **environ;

/* ---- helpers ------------------------------------------------------------------ */

static bool has_ipv6_loopback(void)
{
    int fd = socket(AF_INET6, SOCK_DGRAM, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* ---- libfelix over IPv6 --------------------------------------------------------- */

static fx_broker *start_broker(const char *ip, const char *dir)
{
    fx_broker_opts bo;
    fix_broker_opts(&bo, dir);
    bo.bind_ip = ip;
    fx_broker *b = NULL;
    assert_int_equal(fx_broker_new(&b, &bo), 0);
    assert_int_equal(fx_broker_start(b), 0);
    return b;
}

/* Connects to |server|, subscribes, publishes three acked messages and
 * reads them back. */
static void roundtrip(fx_broker *b, const char *server, const char *stream)
{
    fx_client_opts o;
    fix_client_opts(&o, b, server, "t1", "any");
    fx_client *c = fix_connect(&o);
    fx_subscription *s = NULL;
    assert_int_equal(fx_subscribe(&s, c, "default", stream, NULL), 0);
    static const char *const msgs[] = {"one", "two", "three"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            fx_publish(c, "default", stream, msgs[i], strlen(msgs[i]), FX_ACK_PER_MESSAGE), 0);
    for (int i = 0; i < 3; i++) {
        fx_event ev;
        assert_int_equal(fx_subscription_next(s, &ev, HANG_MS), 0);
        assert_int_equal(ev.len, strlen(msgs[i]));
        assert_memory_equal(ev.payload, msgs[i], ev.len);
    }
    fx_unsubscribe(s);
    fix_close(c);
}

static void test_libfelix_publishes_and_subscribes_over_ipv6_loopback(void **state)
{
    if (!has_ipv6_loopback())
        fx_test_skip("no IPv6 loopback (::1) on this host");
    char dir[64], server[64];
    fix_state_dir_new(dir, sizeof(dir), "ops");
    fx_broker *b = start_broker("::1", dir);
    snprintf(server, sizeof(server), "[::1]:%u", (unsigned)fx_broker_port(b));
    roundtrip(b, server, "v6");
    fx_broker_free(b);
    fix_rm_dir(dir);
}

static void test_dual_stack_broker_serves_ipv4_and_ipv6_clients(void **state)
{
    if (!has_ipv6_loopback())
        fx_test_skip("no IPv6 loopback (::1) on this host");
    char dir[64], server[64];
    fix_state_dir_new(dir, sizeof(dir), "ops");
    fx_broker *b = start_broker("::", dir);
    snprintf(server, sizeof(server), "127.0.0.1:%u", (unsigned)fx_broker_port(b));
    roundtrip(b, server, "v4");
    snprintf(server, sizeof(server), "[::1]:%u", (unsigned)fx_broker_port(b));
    roundtrip(b, server, "v6");
    fx_broker_free(b);
    fix_rm_dir(dir);
}

/* ---- child processes -------------------------------------------------------------- */

/* Children still running when a case fails are killed by the teardown. */
static pid_t g_kids[4];

static void track(pid_t pid)
{
    for (size_t i = 0; i < sizeof(g_kids) / sizeof(g_kids[0]); i++) {
        if (g_kids[i] == 0) {
            g_kids[i] = pid;
            return;
        }
    }
    fail_msg("too many children");
}

static void untrack(pid_t pid)
{
    for (size_t i = 0; i < sizeof(g_kids) / sizeof(g_kids[0]); i++)
        if (g_kids[i] == pid)
            g_kids[i] = 0;
}

static int kill_kids(void **state)
{
    for (size_t i = 0; i < sizeof(g_kids) / sizeof(g_kids[0]); i++) {
        if (g_kids[i] > 0) {
            kill(g_kids[i], SIGKILL);
            waitpid(g_kids[i], NULL, 0);
            g_kids[i] = 0;
        }
    }
    return 0;
}

/* Starts |argv| with stdout and stderr to the files |out| and |err| and the
 * extra environment entries |env| (NULL-terminated, may be NULL). */
static pid_t spawn(char *const argv[], const char *out, const char *err, char *const env[])
{
    char *envp[256];
    size_t n = 0;
    for (size_t i = 0; env != NULL && env[i] != NULL; i++)
        envp[n++] = env[i];
    for (char **e = environ; *e != NULL && n < 255; e++)
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
    track(pid);
    return pid;
}

/* Waits for |pid| to exit (hang guard |ms|); returns its exit status, or
 * fails the case when it did not exit normally. */
static int wait_exit(pid_t pid, uint64_t ms, const char *what)
{
    uint64_t deadline = fx_now_ns() + ms * FX_NS_PER_MS;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (r < 0)
            fail_msg("waitpid %s: %s", what, strerror(errno));
        if (fx_now_ns() > deadline)
            fail_msg("%s did not exit within %llu ms", what, (unsigned long long)ms);
        usleep(10000);
    }
    untrack(pid);
    if (!WIFEXITED(st))
        fail_msg("%s ended by signal %d", what, WIFSIGNALED(st) ? WTERMSIG(st) : -1);
    return WEXITSTATUS(st);
}

/* Reaps |pid| however it ended (a child the case killed). */
static void wait_exit_any(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    untrack(pid);
}

/* Reads the whole file |path| into |buf| (NUL-terminated). */
static size_t slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n;
}

/* Waits until |path| contains |needle| and returns the text from there; the
 * text is in |buf|. Fails the case on timeout or if |pid| exits first. */
static const char *wait_for_text(const char *path, const char *needle, char *buf, size_t cap,
                                 pid_t pid)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    for (;;) {
        slurp(path, buf, cap);
        const char *p = strstr(buf, needle);
        if (p != NULL)
            return p;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            untrack(pid);
            fail_msg("process exited (status %d) before writing '%s'; it wrote:\n%s",
                     WIFEXITED(st) ? WEXITSTATUS(st) : -1, needle, buf);
        }
        if (fx_now_ns() > deadline)
            fail_msg("no '%s' in %s; it holds:\n%s", needle, path, buf);
        usleep(10000);
    }
}

/* GET |path| from 127.0.0.1:|port| with a plain socket (HTTP/1.0, so the
 * server closes after the body). Returns the whole answer in a malloc'd
 * NUL-terminated buffer. */
static char *http_get(uint16_t port, const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = HANG_MS / 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    assert_int_equal(write(fd, req, (size_t)n), n);
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (;;) {
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r < 0)
            fail_msg("reading %s: %s", path, strerror(errno));
        if (r == 0 || len + (size_t)r >= cap - 1)
            break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    close(fd);
    return buf;
}

/* ---- the README walk-through ------------------------------------------------------ */

typedef struct walk {
    char dir[64];
    char broker[512], felix[512];
    char out[128], err[128];
    char banner[16384];
    char env_server[96], env_pin[96];
    uint16_t admin_port;
    pid_t broker_pid;
} walk;

static void find_binaries(walk *w)
{
    const char *bin = getenv("FX_BINARY_DIR");
    if (bin == NULL || bin[0] == '\0')
        fx_test_skip("FX_BINARY_DIR is not set (run through ctest)");
    snprintf(w->broker, sizeof(w->broker), "%s/felix-broker", bin);
    snprintf(w->felix, sizeof(w->felix), "%s/felix", bin);
    if (access(w->broker, X_OK) != 0)
        fx_test_skip("felix-broker is not built in FX_BINARY_DIR");
    if (access(w->felix, X_OK) != 0)
        fx_test_skip("felix (the CLI) is not built in FX_BINARY_DIR");
}

/* Starts the broker as the README says (dev config, ports picked by the
 * kernel) plus |extra| "--set" values (NULL-terminated, may be NULL) and
 * reads the export line and the admin port from its banner. */
static void start_broker_process_with(walk *w, const char *const *extra)
{
    char state[128];
    snprintf(state, sizeof(state), "state_dir=%s/state", w->dir);
    snprintf(w->out, sizeof(w->out), "%s/broker.out", w->dir);
    snprintf(w->err, sizeof(w->err), "%s/broker.err", w->dir);
    char *argv[32] = {
        w->broker, "--dev", "--set", "quic_bind=127.0.0.1:0", "--set", "metrics_bind=127.0.0.1:0",
        "--set",   state};
    size_t n = 8;
    for (size_t i = 0; extra != NULL && extra[i] != NULL && n + 3 < 32; i++) {
        argv[n++] = "--set";
        argv[n++] = (char *)extra[i];
    }
    argv[n] = NULL;
    /* No admin token from this process's environment: --dev makes its own. */
    char *env[] = {"FELIX_ADMIN_TOKEN=", NULL};
    w->broker_pid = spawn(argv, w->out, w->err, env);
    const char *line =
        wait_for_text(w->out, "export FELIX_SERVER=", w->banner, sizeof(w->banner), w->broker_pid);
    char server[64], pin[80];
    assert_int_equal(sscanf(line, "export FELIX_SERVER=%63s FELIX_PIN=%79s", server, pin), 2);
    assert_int_equal(strlen(pin), 64);
    snprintf(w->env_server, sizeof(w->env_server), "FELIX_SERVER=%s", server);
    snprintf(w->env_pin, sizeof(w->env_pin), "FELIX_PIN=%s", pin);
    const char *admin = strstr(w->banner, "admin HTTP on ");
    assert_non_null(admin);
    const char *port = strstr(admin, "(port ");
    assert_non_null(port);
    unsigned p = 0;
    assert_int_equal(sscanf(port, "(port %u)", &p), 1);
    assert_true(p > 0 && p < 65536);
    w->admin_port = (uint16_t)p;
}

static void start_broker_process(walk *w)
{
    start_broker_process_with(w, NULL);
}

static void pub_sub_with_cli(walk *w)
{
    char *env[] = {w->env_server, w->env_pin, NULL};
    char sub_out[128], sub_err[128], pub_out[128], pub_err[128], text[4096];
    snprintf(sub_out, sizeof(sub_out), "%s/sub.out", w->dir);
    snprintf(sub_err, sizeof(sub_err), "%s/sub.err", w->dir);
    snprintf(pub_out, sizeof(pub_out), "%s/pub.out", w->dir);
    snprintf(pub_err, sizeof(pub_err), "%s/pub.err", w->dir);
    char *sub_argv[] = {w->felix, "sub", "--count", "3", "t1/default/demo", NULL};
    pid_t sub = spawn(sub_argv, sub_out, sub_err, env);
    wait_for_text(sub_err, "subscribed", text, sizeof(text), sub);
    char *pub_argv[] = {w->felix,          "pub",   "--ack", "per_message", "--count", "3",
                        "t1/default/demo", "hello", NULL};
    pid_t pub = spawn(pub_argv, pub_out, pub_err, env);
    int st = wait_exit(pub, HANG_MS, "felix pub");
    if (st != 0) {
        slurp(pub_err, text, sizeof(text));
        fail_msg("felix pub exited %d: %s", st, text);
    }
    st = wait_exit(sub, HANG_MS, "felix sub");
    slurp(sub_out, text, sizeof(text));
    assert_int_equal(st, 0);
    assert_string_equal(text, "hello\nhello\nhello\n");
}

/* Every metric of docs/metrics.md's generated table has a "# TYPE" line in
 * |body|; the drop counters (names with "drop") are at zero. */
static void check_documented_metrics(const char *body)
{
    const char *src = getenv("FX_SOURCE_DIR");
    if (src == NULL || src[0] == '\0')
        fx_test_skip("FX_SOURCE_DIR is not set (run through ctest)");
    char path[512];
    snprintf(path, sizeof(path), "%s/docs/metrics.md", src);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[2048];
    bool in_table = false;
    int checked = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, "<!-- BEGIN GENERATED") != NULL)
            in_table = true;
        else if (strstr(line, "<!-- END GENERATED") != NULL)
            in_table = false;
        char name[128];
        if (!in_table || sscanf(line, "| `%127[a-z0-9_]`", name) != 1)
            continue;
        char want[160];
        snprintf(want, sizeof(want), "\n# TYPE %s ", name);
        if (strstr(body, want) == NULL)
            fail_msg("documented metric %s missing from /metrics", name);
        checked++;
        if (strstr(name, "drop") == NULL)
            continue;
        /* Every sample of a drop counter ("name 0" or "name{...} 0"). */
        size_t nl = strlen(name);
        for (const char *p = strstr(body, name); p != NULL; p = strstr(p + 1, name)) {
            if (p[-1] != '\n' || (p[nl] != ' ' && p[nl] != '{'))
                continue;
            const char *eol = strchr(p, '\n');
            assert_non_null(eol);
            if (eol - p < 2 || eol[-1] != '0' || eol[-2] != ' ')
                fail_msg("drop counter not at zero on a fresh broker: %.*s", (int)(eol - p), p);
        }
    }
    fclose(f);
    assert_true(checked >= 20); /* the table was found and read */
}

static void test_cli_walkthrough_pub_sub_metrics_and_sigterm(void **state)
{
    walk *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    find_binaries(w);
    fix_state_dir_new(w->dir, sizeof(w->dir), "ops");
    start_broker_process(w);
    pub_sub_with_cli(w);

    char *resp = http_get(w->admin_port, "/metrics");
    assert_true(strncmp(resp, "HTTP/1.", 7) == 0 && strncmp(resp + 8, " 200", 4) == 0);
    const char *body = strstr(resp, "\r\n\r\n");
    assert_non_null(body);
    check_documented_metrics(body + 3); /* from the "\n" before the first line */
    free(resp);

    assert_int_equal(kill(w->broker_pid, SIGTERM), 0);
    int st = wait_exit(w->broker_pid, HANG_MS, "felix-broker");
    if (st != 0) {
        slurp(w->err, w->banner, sizeof(w->banner));
        fail_msg("felix-broker exited %d after SIGTERM; stderr:\n%s", st, w->banner);
    }
    char state_dir[128];
    snprintf(state_dir, sizeof(state_dir), "%s/state", w->dir);
    fix_rm_dir(state_dir);
    fix_rm_dir(w->dir);
    free(w);
}

/* A subscriber whose process is stopped (its receive window frozen) holds
 * deliveries the drain cannot finish: from half of shutdown_drain_timeout_ms
 * on its connection is closed, the drain ends without it, and the exit
 * status is 0 with the stalled connection named on stderr. */
static void test_sigterm_with_a_stalled_subscriber_drains_without_it(void **state)
{
    walk *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    find_binaries(w);
    fix_state_dir_new(w->dir, sizeof(w->dir), "ops");
    static const char *const extra[] = {"shutdown_drain_timeout_ms=4000",
                                        "control_stream_drain_timeout_ms=50", NULL};
    start_broker_process_with(w, extra);
    char *env[] = {w->env_server, w->env_pin, NULL};
    char sub_out[128], sub_err[128], pub_out[128], pub_err[128], text[16384];
    snprintf(sub_out, sizeof(sub_out), "%s/sub.out", w->dir);
    snprintf(sub_err, sizeof(sub_err), "%s/sub.err", w->dir);
    snprintf(pub_out, sizeof(pub_out), "%s/pub.out", w->dir);
    snprintf(pub_err, sizeof(pub_err), "%s/pub.err", w->dir);
    char *sub_argv[] = {w->felix, "sub", "t1/default/stall", NULL};
    pid_t sub = spawn(sub_argv, sub_out, sub_err, env);
    wait_for_text(sub_err, "subscribed", text, sizeof(text), sub);
    assert_int_equal(kill(sub, SIGSTOP), 0);
    /* 3 MiB: more than the subscription's unacked allowance and its client's
     * window, so deliveries stay queued in the broker. */
    char *pub_argv[] = {w->felix, "pub",         "--count",          "200", "--size", "16K",
                        "--ack",  "per_message", "t1/default/stall", NULL};
    int st = wait_exit(spawn(pub_argv, pub_out, pub_err, env), HANG_MS, "felix pub");
    assert_int_equal(st, 0);
    usleep(300000);
    uint64_t t0 = fx_now_ns();
    assert_int_equal(kill(w->broker_pid, SIGTERM), 0);
    st = wait_exit(w->broker_pid, HANG_MS, "felix-broker");
    uint64_t ms = (fx_now_ns() - t0) / FX_NS_PER_MS;
    slurp(w->err, text, sizeof(text));
    fprintf(stderr, "felix-broker exited %d after %llu ms; stderr ends:\n%s\n", st,
            (unsigned long long)ms, strlen(text) > 600 ? text + strlen(text) - 600 : text);
    kill(sub, SIGCONT);
    kill(sub, SIGKILL);
    wait_exit_any(sub);
    assert_int_equal(st, 0);
    assert_non_null(strstr(text, "made no progress"));
    assert_non_null(strstr(text, "1 connection(s) made no progress"));
    assert_true(ms < 4000); /* before the deadline: the behaviour under test */
    char state_dir[128];
    snprintf(state_dir, sizeof(state_dir), "%s/state", w->dir);
    fix_rm_dir(state_dir);
    fix_rm_dir(w->dir);
    free(w);
}

/* ---- the --dev admin token ------------------------------------------------------- */

/* Runs `felix streams ARGS...` (NULL-terminated) against |w|'s broker with
 * FELIX_ADMIN_TOKEN=|token| ("" for none); its output in |text|. */
static int felix_streams(walk *w, const char *token, char *text, size_t cap, ...)
{
    char admin[32], env_token[160], out[128], err[128];
    snprintf(admin, sizeof(admin), "127.0.0.1:%u", (unsigned)w->admin_port);
    snprintf(env_token, sizeof(env_token), "FELIX_ADMIN_TOKEN=%s", token);
    snprintf(out, sizeof(out), "%s/streams.out", w->dir);
    snprintf(err, sizeof(err), "%s/streams.err", w->dir);
    char *argv[16] = {w->felix, "streams", "--admin", admin};
    int n = 4;
    va_list ap;
    va_start(ap, cap);
    for (char *a; n < 15 && (a = va_arg(ap, char *)) != NULL;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    char *env[] = {env_token, NULL};
    int st = wait_exit(spawn(argv, out, err, env), HANG_MS, "felix streams");
    size_t k = slurp(out, text, cap);
    slurp(err, text + k, cap - k);
    return st;
}

static void stop_broker_process(walk *w)
{
    assert_int_equal(kill(w->broker_pid, SIGTERM), 0);
    assert_int_equal(wait_exit(w->broker_pid, HANG_MS, "felix-broker"), 0);
}

/* --dev without admin_token keeps a token in its state dir (0600, made at
 * the first start, the same at the next) and prints how the CLI gets it;
 * stream changes need it, listing does not. */
static void test_dev_broker_keeps_an_admin_token_and_the_cli_mutates_with_it(void **state)
{
    walk *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    find_binaries(w);
    fix_state_dir_new(w->dir, sizeof(w->dir), "ops");
    start_broker_process(w);
    char file[128], want[256], token[128] = "", text[4096];
    char *abs = realpath(w->dir, NULL);
    assert_non_null(abs);
    snprintf(file, sizeof(file), "%s/state/admin-token", w->dir);
    snprintf(want, sizeof(want), "  export FELIX_ADMIN_TOKEN=\"$(cat '%s/state/admin-token')\"\n",
             abs);
    free(abs);
    if (strstr(w->banner, want) == NULL)
        fail_msg("the banner lacks '%s':\n%s", want, w->banner);
    struct stat st;
    assert_int_equal(lstat(file, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(slurp(file, token, sizeof(token)), 65);
    assert_int_equal(token[64], '\n');
    token[64] = '\0';
    assert_int_equal(strspn(token, "0123456789abcdef"), 64);

    /* Without the token a change is refused and says how to pass one. */
    assert_int_equal(felix_streams(w, "", text, sizeof(text), "create", "t1/default/made", NULL),
                     1);
    assert_non_null(strstr(text, "HTTP 401"));
    assert_non_null(strstr(text, "FELIX_ADMIN_TOKEN"));
    assert_int_equal(felix_streams(w, token, text, sizeof(text), "create", "t1/default/made", NULL),
                     0);
    assert_non_null(strstr(text, "created t1/default/made"));
    assert_int_equal(felix_streams(w, "", text, sizeof(text), "ls", NULL), 0);
    assert_non_null(strstr(text, "made"));

    /* The next start keeps the same token. */
    stop_broker_process(w);
    start_broker_process(w);
    assert_non_null(strstr(w->banner, want));
    char again[128] = "";
    assert_int_equal(slurp(file, again, sizeof(again)), 65);
    again[64] = '\0';
    assert_string_equal(again, token);
    assert_int_equal(
        felix_streams(w, token, text, sizeof(text), "create", "t1/default/made2", NULL), 0);
    stop_broker_process(w);

    /* A token from the configuration wins: no file is read, none printed. */
    static const char *const extra[] = {"admin_token=from-the-configuration", NULL};
    start_broker_process_with(w, extra);
    assert_null(strstr(w->banner, "FELIX_ADMIN_TOKEN"));
    assert_int_equal(felix_streams(w, token, text, sizeof(text), "create", "t1/default/x", NULL),
                     1);
    assert_int_equal(felix_streams(w, "from-the-configuration", text, sizeof(text), "create",
                                   "t1/default/x", NULL),
                     0);
    stop_broker_process(w);
    fix_rm_dir(w->dir);
    free(w);
}

/* ---- per-stream names in /metrics --------------------------------------------------- */

/* The /metrics body of |w|'s broker (malloc'd). */
static char *metrics_of(walk *w)
{
    char *resp = http_get(w->admin_port, "/metrics");
    assert_true(strncmp(resp, "HTTP/1.", 7) == 0 && strncmp(resp + 8, " 200", 4) == 0);
    return resp;
}

static void test_metrics_name_durable_streams_only_with_metrics_stream_labels(void **state)
{
    walk *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    find_binaries(w);
    fix_state_dir_new(w->dir, sizeof(w->dir), "ops");
    char data[128];
    snprintf(data, sizeof(data), "durable_storage_dir=%s/data", w->dir);
    const char *extra[] = {data, "durable_default=true", "durable_fsync_mode=none", NULL};
    start_broker_process_with(w, extra);
    /* 3 messages; the first publish creates durable stream t1/default/demo. */
    char *env[] = {w->env_server, w->env_pin, NULL};
    char out[128], err[128], text[4096];
    snprintf(out, sizeof(out), "%s/pub.out", w->dir);
    snprintf(err, sizeof(err), "%s/pub.err", w->dir);
    char *pub_argv[] = {w->felix,          "pub",   "--ack", "per_message", "--count", "3",
                        "t1/default/demo", "hello", NULL};
    if (wait_exit(spawn(pub_argv, out, err, env), HANG_MS, "felix pub") != 0) {
        slurp(err, text, sizeof(text));
        fail_msg("felix pub failed: %s", text);
    }
    static const char series[] = "\nfelix_storage_stream_next_offset{tenant=\"t1\",namespace="
                                 "\"default\",stream=\"demo\"} 3\n";
    char *body = metrics_of(w);
    assert_non_null(strstr(body, "\n# TYPE felix_storage_stream_next_offset gauge\n"));
    if (strstr(body, "stream=\"demo\"") != NULL || strstr(body, "tenant=\"t1\"") != NULL)
        fail_msg("the default /metrics names the durable stream:\n%s", body);
    free(body);
    stop_broker_process(w);

    const char *opted[] = {data, "durable_default=true", "durable_fsync_mode=none",
                           "metrics_stream_labels=true", NULL};
    start_broker_process_with(w, opted);
    /* The log comes back in the background after the start: wait for it. */
    uint64_t t0 = fx_now_ns();
    for (body = metrics_of(w); strstr(body, series) == NULL; body = metrics_of(w)) {
        if (fx_now_ns() - t0 > (uint64_t)HANG_MS * FX_NS_PER_MS)
            fail_msg("metrics_stream_labels=true: no '%s' in:\n%s", series + 1, body);
        free(body);
        sleep_ms(20);
    }
    free(body);
    stop_broker_process(w);
    fix_rm_dir(w->dir);
    free(w);
}

/* Runs `felix pub` once with FELIX_PIN=|pin|; returns its exit status. */
static int pub_with_pin(walk *w, const char *pin)
{
    char env_pin[96], out[128], err[128];
    snprintf(env_pin, sizeof(env_pin), "FELIX_PIN=%s", pin);
    snprintf(out, sizeof(out), "%s/pin.out", w->dir);
    snprintf(err, sizeof(err), "%s/pin.err", w->dir);
    char *env[] = {w->env_server, env_pin, NULL};
    char *argv[] = {w->felix, "pub", "--ack", "per_message", "t1/default/demo", "x", NULL};
    return wait_exit(spawn(argv, out, err, env), HANG_MS, "felix pub");
}

static void test_sighup_reloads_certificate_for_new_cli_connections(void **state)
{
    walk *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    find_binaries(w);
    fix_state_dir_new(w->dir, sizeof(w->dir), "ops");
    start_broker_process(w);
    const char *old_pin = w->env_pin + strlen("FELIX_PIN=");
    assert_int_equal(pub_with_pin(w, old_pin), 0);

    /* Replace the generated pair the broker uses, as an operator would. */
    char cert[128], key[128], new_pin[65];
    snprintf(cert, sizeof(cert), "%s/state/tls-cert.pem", w->dir);
    snprintf(key, sizeof(key), "%s/state/tls-key.pem", w->dir);
    assert_int_equal(fx_quic_cert_generate(cert, key, NULL), 0);
    assert_int_equal(fx_quic_cert_fingerprint(cert, new_pin), 0);
    assert_string_not_equal(old_pin, new_pin);
    assert_int_equal(kill(w->broker_pid, SIGHUP), 0);
    char text[16384];
    wait_for_text(w->err, "SIGHUP: reloaded the TLS certificate", text, sizeof(text),
                  w->broker_pid);
    assert_non_null(strstr(text, new_pin));

    assert_int_equal(pub_with_pin(w, new_pin), 0);
    assert_int_not_equal(pub_with_pin(w, old_pin), 0); /* the pin no longer matches */

    assert_int_equal(kill(w->broker_pid, SIGTERM), 0);
    assert_int_equal(wait_exit(w->broker_pid, HANG_MS, "felix-broker"), 0);
    char state_dir[128];
    snprintf(state_dir, sizeof(state_dir), "%s/state", w->dir);
    fix_rm_dir(state_dir);
    fix_rm_dir(w->dir);
    free(w);
}

/* `felix bench matrix` hands its arguments to bench/matrix.sh (found through
 * FELIX_BENCH_DIR here), and says where it looked when the script is not
 * there. --help makes the script print its usage and exit 2 without
 * measuring anything. */
static void test_bench_matrix_runs_the_script_or_says_where_it_looked(void **state)
{
    (void)state;
    walk w = {0};
    find_binaries(&w);
    const char *src = getenv("FX_SOURCE_DIR");
    if (src == NULL || src[0] == '\0')
        fx_test_skip("FX_SOURCE_DIR is not set (run through ctest)");
    fix_state_dir_new(w.dir, sizeof(w.dir), "matrix");
    char out[160], err[160], text[4096], env_dir[4200];
    snprintf(out, sizeof(out), "%s/felix.out", w.dir);
    snprintf(err, sizeof(err), "%s/felix.err", w.dir);

    char *missing[] = {"FELIX_BENCH_DIR=/nonexistent-felix-bench", NULL};
    char *argv1[] = {w.felix, "bench", "matrix", "--out", w.dir, NULL};
    assert_int_equal(wait_exit(spawn(argv1, out, err, missing), HANG_MS, "felix bench matrix"), 1);
    slurp(err, text, sizeof(text));
    assert_non_null(
        strstr(text, "cannot find the matrix script /nonexistent-felix-bench/matrix.sh"));

    snprintf(env_dir, sizeof(env_dir), "FELIX_BENCH_DIR=%s/bench", src);
    char *found[] = {env_dir, NULL};
    char *argv2[] = {w.felix, "bench", "matrix", "--help", NULL};
    assert_int_equal(wait_exit(spawn(argv2, out, err, found), HANG_MS, "felix bench matrix --help"),
                     2);
    slurp(err, text, sizeof(text));
    assert_non_null(strstr(text, "usage: bench/matrix.sh --out DIR"));
    fix_rm_dir(w.dir);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_libfelix_publishes_and_subscribes_over_ipv6_loopback),
    cmocka_unit_test(test_dual_stack_broker_serves_ipv4_and_ipv6_clients),
    cmocka_unit_test_teardown(test_cli_walkthrough_pub_sub_metrics_and_sigterm, kill_kids),
    cmocka_unit_test_teardown(test_sighup_reloads_certificate_for_new_cli_connections, kill_kids),
    cmocka_unit_test_teardown(test_sigterm_with_a_stalled_subscriber_drains_without_it, kill_kids),
    cmocka_unit_test_teardown(test_dev_broker_keeps_an_admin_token_and_the_cli_mutates_with_it,
                              kill_kids),
    cmocka_unit_test_teardown(test_metrics_name_durable_streams_only_with_metrics_stream_labels,
                              kill_kids),
    cmocka_unit_test_teardown(test_bench_matrix_runs_the_script_or_says_where_it_looked, kill_kids),
};
FX_TEST_MAIN(tests)
