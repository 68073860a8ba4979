/* The felix CLI's files and secrets, the binaries run as child processes:
 * `felix token keygen --force` leaves a private key 0600 and never writes
 * through a planted link, --token-file authenticates against a broker in
 * auth_mode jwt (a wrong token in the file is refused), --admin-token-file
 * becomes the admin call's bearer header, --insecure warns on
 * stderr, and --pin with --ca is refused. Ports are 0 / ephemeral;
 * timeouts are hang guards only. */
/* fx-test-libs: fx_base */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "integ/proc.h"

typedef struct cli {
    char dir[64];
    char felix[512], broker[512];
    char out[128], err[128];
    char text[16384];
} cli;

static void cli_init(cli *t)
{
    proc_binary("felix", t->felix, sizeof(t->felix));
    proc_binary("felix-broker", t->broker, sizeof(t->broker));
    snprintf(t->dir, sizeof(t->dir), "/tmp/fxclifXXXXXX");
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->out, sizeof(t->out), "%s/out", t->dir);
    snprintf(t->err, sizeof(t->err), "%s/err", t->dir);
}

/* Removes |t|'s directory and the plain files in it, and its state dir. */
static void cli_deinit(cli *t)
{
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
    assert_int_equal(system(cmd), 0);
}

static void path_in(const cli *t, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", t->dir, name);
}

/* Runs felix with |argv| (argv[0] filled in) and returns its exit status;
 * stderr is in t->text afterwards. */
static int felix(cli *t, char **argv)
{
    argv[0] = t->felix;
    int st = proc_wait(proc_spawn(argv, t->out, t->err, NULL, false), "felix");
    proc_slurp(t->err, t->text, sizeof(t->text));
    return st;
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    return st.st_mode & 07777;
}

static void write_text(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path, mode), 0);
}

/* ---- keygen ------------------------------------------------------------------ */

static void test_keygen_force_leaves_a_0644_key_0600(void **state)
{
    (void)state;
    cli t;
    cli_init(&t);
    char key[96], jwks[96];
    path_in(&t, "key.json", key, sizeof(key));
    path_in(&t, "jwks.json", jwks, sizeof(jwks));
    write_text(key, "old\n", 0644);
    char *argv[] = {NULL, "token", "keygen", "--out-jwks", jwks, "--out-key", key, NULL, NULL};
    /* Without --force nothing is replaced, and no JWKS appears either. */
    assert_int_equal(felix(&t, argv), 1);
    proc_assert_contains(t.text, "pass --force");
    assert_int_equal(access(jwks, F_OK), -1);
    argv[7] = "--force";
    assert_int_equal(felix(&t, argv), 0);
    assert_int_equal(mode_of(key), 0600);
    proc_slurp(key, t.text, sizeof(t.text));
    proc_assert_contains(t.text, "\"d\"");
    cli_deinit(&t);
}

static void test_keygen_force_replaces_a_planted_link_instead_of_its_target(void **state)
{
    (void)state;
    cli t;
    cli_init(&t);
    char key[96], jwks[96], victim[96], tmp[112];
    path_in(&t, "key.json", key, sizeof(key));
    path_in(&t, "jwks.json", jwks, sizeof(jwks));
    path_in(&t, "victim", victim, sizeof(victim));
    snprintf(tmp, sizeof(tmp), "%s.tmp", key);
    write_text(victim, "victim\n", 0644);
    assert_int_equal(symlink(victim, key), 0);
    assert_int_equal(symlink(victim, tmp), 0);
    char *argv[] = {NULL, "token", "keygen", "--out-jwks", jwks, "--out-key", key, "--force", NULL};
    assert_int_equal(felix(&t, argv), 0);
    proc_slurp(victim, t.text, sizeof(t.text));
    assert_string_equal(t.text, "victim\n");
    assert_int_equal(mode_of(key), 0600); /* a regular file now, not the link */
    assert_int_equal(access(tmp, F_OK), -1);
    cli_deinit(&t);
}

/* ---- trust flags ----------------------------------------------------------------- */

static void test_insecure_warns_on_stderr(void **state)
{
    (void)state;
    cli t;
    cli_init(&t);
    /* Nothing listens on port 9 of loopback: the connect times out, after
     * the warning. */
    char *argv[] = {NULL,          "pub",
                    "--insecure",  "--server",
                    "127.0.0.1:9", "--connect-timeout-ms",
                    "300",         "t1/default/demo",
                    "x",           NULL};
    assert_int_equal(felix(&t, argv), 1);
    proc_assert_contains(t.text, "felix pub: warning: --insecure: the broker's certificate is "
                                 "not verified");
    char *pinned[] = {NULL,
                      "pub",
                      "--pin",
                      "a77ad199e362393a96beb0a31a83a006e6de3cc12e2560b80150392eecf91dde",
                      "--server",
                      "127.0.0.1:9",
                      "--connect-timeout-ms",
                      "300",
                      "t1/default/demo",
                      "x",
                      NULL};
    assert_int_equal(felix(&t, pinned), 1);
    if (strstr(t.text, "warning") != NULL)
        fail_msg("a pinned connection warned:\n%s", t.text);
    cli_deinit(&t);
}

static void test_pin_with_ca_refused_as_usage_error(void **state)
{
    (void)state;
    cli t;
    cli_init(&t);
    char *argv[] = {NULL,
                    "sub",
                    "--pin",
                    "a77ad199e362393a96beb0a31a83a006e6de3cc12e2560b80150392eecf91dde",
                    "--ca",
                    "/etc/ssl/certs/ca-certificates.crt",
                    "t1/default/demo",
                    NULL};
    assert_int_equal(felix(&t, argv), 2);
    proc_assert_contains(t.text, "--pin and --ca");
    cli_deinit(&t);
}

/* ---- --token-file against a broker in auth_mode jwt -------------------------------- */

typedef struct jwt_broker {
    pid_t pid;
    char server[96], pin[96];
} jwt_broker;

static void jwt_broker_start(cli *t, jwt_broker *b, const char *jwks)
{
    char state[160], jwks_set[160], out[128], err[128];
    snprintf(state, sizeof(state), "state_dir=%s/state", t->dir);
    snprintf(jwks_set, sizeof(jwks_set), "jwks_file=%s", jwks);
    path_in(t, "broker.out", out, sizeof(out));
    path_in(t, "broker.err", err, sizeof(err));
    char *argv[] = {
        t->broker, "--dev", "--set", "quic_bind=127.0.0.1:0", "--set", "metrics_bind=127.0.0.1:0",
        "--set",   state,   "--set", "auth_mode=jwt",         "--set", jwks_set,
        NULL};
    b->pid = proc_spawn(argv, out, err, NULL, false);
    proc_wait_text(out, "export FELIX_SERVER=", t->text, sizeof(t->text), b->pid);
    const char *line = strstr(t->text, "export FELIX_SERVER=");
    char server[64], pin[80];
    assert_int_equal(sscanf(line, "export FELIX_SERVER=%63s FELIX_PIN=%79s", server, pin), 2);
    snprintf(b->server, sizeof(b->server), "%s", server);
    snprintf(b->pin, sizeof(b->pin), "%s", pin);
}

static int pub_with_token_file(cli *t, const jwt_broker *b, const char *file)
{
    char *argv[] = {NULL,    "pub",          "--server",        (char *)b->server,
                    "--pin", (char *)b->pin, "--token-file",    (char *)file,
                    "--ack", "per_message",  "t1/default/demo", "hello",
                    NULL};
    return felix(t, argv);
}

static void test_token_file_authenticates_and_a_wrong_one_is_refused(void **state)
{
    (void)state;
    cli t;
    cli_init(&t);
    char key[96], jwks[96], tok[96], bad[96];
    path_in(&t, "key.json", key, sizeof(key));
    path_in(&t, "jwks.json", jwks, sizeof(jwks));
    path_in(&t, "token", tok, sizeof(tok));
    path_in(&t, "bad-token", bad, sizeof(bad));
    char *gen[] = {NULL, "token", "keygen", "--out-jwks", jwks, "--out-key", key, NULL};
    assert_int_equal(felix(&t, gen), 0);
    char *mint[] = {NULL,    "token",  "mint",
                    "--key", key,      "--tenant",
                    "t1",    "--perm", "stream.publish:stream:t1/*/*",
                    NULL};
    mint[0] = t.felix;
    assert_int_equal(proc_wait(proc_spawn(mint, tok, t.err, NULL, false), "felix token mint"), 0);
    assert_int_equal(chmod(tok, 0600), 0);
    write_text(bad, "eyJhbGciOiJFZERTQSJ9.e30.AAAA\n", 0600);

    jwt_broker b;
    jwt_broker_start(&t, &b, jwks);
    int st = pub_with_token_file(&t, &b, tok);
    if (st != 0)
        fail_msg("felix pub --token-file exited %d:\n%s", st, t.text);
    assert_int_equal(pub_with_token_file(&t, &b, bad), 1);
    proc_assert_contains(t.text, "auth");
    assert_int_equal(kill(b.pid, SIGTERM), 0);
    assert_int_equal(proc_wait(b.pid, "felix-broker"), 0);
    cli_deinit(&t);
}

/* ---- --admin-token-file against a stand-in admin endpoint ------------------------- */

/* A one-shot HTTP server on 127.0.0.1:0: accepts one connection, keeps its
 * request in |req| and answers 200 with an empty JSON list. */
static int http_listen(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 1), 0);
    socklen_t len = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static void http_answer_once(int lfd, char *req, size_t cap)
{
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, PROC_HANG_MS), 1);
    int fd = accept(lfd, NULL, NULL);
    assert_true(fd >= 0);
    size_t len = 0;
    req[0] = '\0';
    while (strstr(req, "\r\n\r\n") == NULL && len + 1 < cap) {
        p = (struct pollfd){.fd = fd, .events = POLLIN};
        assert_int_equal(poll(&p, 1, PROC_HANG_MS), 1);
        ssize_t n = read(fd, req + len, cap - 1 - len);
        assert_true(n > 0);
        len += (size_t)n;
        req[len] = '\0';
    }
    static const char ans[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                              "Content-Length: 2\r\nConnection: close\r\n\r\n[]";
    assert_int_equal(write(fd, ans, sizeof(ans) - 1), (ssize_t)(sizeof(ans) - 1));
    close(fd);
}

static void test_admin_token_file_becomes_the_bearer_header(void **state)
{
    (void)state;
    cli t;
    cli_init(&t);
    char file[96], admin[32], req[8192];
    path_in(&t, "admin-token", file, sizeof(file));
    write_text(file, "admin-secret-from-file\n", 0600);
    uint16_t port = 0;
    int lfd = http_listen(&port);
    snprintf(admin, sizeof(admin), "127.0.0.1:%u", (unsigned)port);
    char *argv[] = {t.felix, "streams", "ls", "--admin", admin, "--admin-token-file", file, NULL};
    pid_t pid = proc_spawn(argv, t.out, t.err, NULL, false);
    http_answer_once(lfd, req, sizeof(req));
    close(lfd);
    int st = proc_wait(pid, "felix streams ls");
    proc_slurp(t.err, t.text, sizeof(t.text));
    if (st != 0)
        fail_msg("felix streams ls exited %d:\n%s", st, t.text);
    proc_assert_contains(req, "GET /v1/streams ");
    proc_assert_contains(req, "Authorization: Bearer admin-secret-from-file\r\n");
    cli_deinit(&t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(test_keygen_force_leaves_a_0644_key_0600, proc_teardown),
    cmocka_unit_test_teardown(test_keygen_force_replaces_a_planted_link_instead_of_its_target,
                              proc_teardown),
    cmocka_unit_test_teardown(test_insecure_warns_on_stderr, proc_teardown),
    cmocka_unit_test_teardown(test_pin_with_ca_refused_as_usage_error, proc_teardown),
    cmocka_unit_test_teardown(test_token_file_authenticates_and_a_wrong_one_is_refused,
                              proc_teardown),
    cmocka_unit_test_teardown(test_admin_token_file_becomes_the_bearer_header, proc_teardown),
};

FX_TEST_MAIN(tests)
