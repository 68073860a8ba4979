/* Unit tests for server/admin: the admin HTTP endpoint served for real on
 * 127.0.0.1 (and ::1) port 0 and spoken to by a small raw-socket HTTP/1.1
 * client written here; routes that ask a real fx_loop (answer, and 503 on a
 * timeout); the bearer-token rule; and the check that
 * docs/metrics.md still matches the metrics registry. */
/* fx-test-libs: fx_server fx_quic fx_wire fx_base */
#include "fx_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gnutls/gnutls.h>

#include "base/loop.h"
#include "base/metrics.h"
#include "felix/error.h"
#include "quic/quic.h"
#include "server/admin.h"

#define HANG_GUARD_S 10 /* socket timeouts: a hang fails the test, never a slow machine */
#define REPLY_MAX (4 * 1024 * 1024)

/* ---- a tiny HTTP/1.1 client ----------------------------------------------- */

typedef struct http_reply {
    int status;
    char *raw; /* the whole response, NUL-terminated */
    const char *headers;
    size_t headers_len;
    const char *body;
    size_t body_len;
} http_reply;

static int connect_to(int family, uint16_t port)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = HANG_GUARD_S};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
    struct sockaddr_storage ss = {0};
    socklen_t len;
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof(*a);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        a->sin6_addr = in6addr_loopback;
        len = sizeof(*a);
    }
    assert_int_equal(connect(fd, (struct sockaddr *)&ss, len), 0);
    return fd;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        assert_true(w > 0);
        p += w;
        n -= (size_t)w;
    }
}

/* Reads until the server closes (we send Connection: close). */
static char *read_all(int fd, size_t *plen)
{
    size_t cap = 16384, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (;;) {
        if (len + 1 == cap) {
            assert_true(cap < REPLY_MAX);
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        assert_true(r >= 0); /* -1 here is the hang guard firing */
        if (r == 0)
            break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    *plen = len;
    return buf;
}

/* Sends one request with |extra| header lines ("Name: v\r\n"..., may be NULL)
 * and |body| (may be NULL) and parses the reply. */
static void http_do(int family, uint16_t port, const char *method, const char *path,
                    const char *extra, const char *body, http_reply *rep)
{
    int fd = connect_to(family, port);
    char head[1024];
    size_t blen = body ? strlen(body) : 0;
    int n = snprintf(head, sizeof(head),
                     "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n%s\r\n",
                     method, path, blen, extra ? extra : "");
    assert_true(n > 0 && (size_t)n < sizeof(head));
    write_all(fd, head, (size_t)n);
    if (blen)
        write_all(fd, body, blen);
    size_t len;
    rep->raw = read_all(fd, &len);
    close(fd);
    assert_int_equal(sscanf(rep->raw, "HTTP/1.%*d %d", &rep->status), 1);
    char *end = strstr(rep->raw, "\r\n\r\n");
    assert_non_null(end);
    rep->headers = rep->raw;
    rep->headers_len = (size_t)(end - rep->raw) + 2;
    rep->body = end + 4;
    rep->body_len = len - (size_t)(rep->body - rep->raw);
}

static void http_get(uint16_t port, const char *path, http_reply *rep)
{
    http_do(AF_INET, port, "GET", path, NULL, NULL, rep);
}

/* Copies header |name|'s value (case-insensitive name) into |out|; returns
 * false if absent. */
static bool http_header(const http_reply *rep, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    const char *p = strstr(rep->headers, "\r\n");
    const char *end = rep->headers + rep->headers_len;
    while (p && p + 2 < end) {
        p += 2;
        const char *eol = strstr(p, "\r\n");
        if (!eol || eol > end)
            break;
        if ((size_t)(eol - p) > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            snprintf(out, cap, "%.*s", (int)(eol - v), v);
            return true;
        }
        p = eol;
    }
    return false;
}

static void assert_body(const http_reply *rep, const char *want)
{
    assert_int_equal(rep->body_len, strlen(want));
    assert_memory_equal(rep->body, want, rep->body_len);
}

static void http_reply_free(http_reply *rep)
{
    free(rep->raw);
    memset(rep, 0, sizeof(*rep));
}

/* ---- fixtures -------------------------------------------------------------- */

static fx_admin *start_admin(const fx_admin_opts *o)
{
    fx_admin *a = NULL;
    char err[256] = "";
    int rv = fx_admin_start(&a, o, err, sizeof(err));
    if (rv != 0)
        fprintf(stderr, "fx_admin_start: %s\n", err);
    assert_int_equal(rv, 0);
    assert_non_null(a);
    return a;
}

static fx_admin *start_local(void)
{
    return start_admin(&(fx_admin_opts){.bind = "127.0.0.1:0"});
}

static fx_loop *start_loop(void)
{
    fx_loop *l = NULL;
    assert_int_equal(fx_loop_new(&l, &(fx_loop_opts){.name = "admin-test", .cpu = -1}), 0);
    assert_int_equal(fx_loop_start(l), 0);
    return l;
}

static void stop_loop(fx_loop *l)
{
    fx_loop_stop(l);
    assert_int_equal(fx_loop_run_error(l), 0);
    fx_loop_free(l);
}

/* ---- built-in routes ------------------------------------------------------- */

static void test_metrics_endpoint_serves_prometheus_text(void **state)
{
    fx_metrics_snapshot snap;
    fx_metrics_snapshot_take(&snap);
    uint64_t before = atomic_load(&snap.c.ingress_dropped);
    FX_COUNTER_ADD(ingress_dropped, 3);

    fx_admin *a = start_local();
    http_reply rep;
    http_get(fx_admin_port(a), "/metrics", &rep);
    assert_int_equal(rep.status, 200);
    char ctype[128];
    assert_true(http_header(&rep, "Content-Type", ctype, sizeof(ctype)));
    assert_string_equal(ctype, "text/plain; version=0.0.4; charset=utf-8");
    char want[128];
    snprintf(want, sizeof(want), "\nfelix_broker_ingress_dropped_total %" PRIu64 "\n", before + 3);
    assert_non_null(strstr(rep.body, want));
    assert_non_null(strstr(rep.body, "# TYPE felix_broker_ingress_dropped_total counter\n"));
    assert_non_null(strstr(rep.body, "# TYPE felix_publish_latency_ns histogram\n"));
    http_reply_free(&rep);
    fx_admin_free(a);
}

static void test_live_returns_ok(void **state)
{
    fx_admin *a = start_local();
    http_reply rep;
    http_get(fx_admin_port(a), "/live", &rep);
    assert_int_equal(rep.status, 200);
    assert_body(&rep, "ok");
    http_reply_free(&rep);
    /* /live stays 200 while draining: the process is alive. */
    fx_admin_set_draining(a, true);
    http_get(fx_admin_port(a), "/live", &rep);
    assert_int_equal(rep.status, 200);
    http_reply_free(&rep);
    fx_admin_free(a);
}

static void test_ready_turns_503_when_draining(void **state)
{
    fx_admin *a = start_local();
    http_reply rep;
    http_get(fx_admin_port(a), "/ready", &rep);
    assert_int_equal(rep.status, 200);
    assert_body(&rep, "ok");
    http_reply_free(&rep);

    fx_admin_set_draining(a, true);
    http_get(fx_admin_port(a), "/ready", &rep);
    assert_int_equal(rep.status, 503);
    assert_body(&rep, "draining");
    http_reply_free(&rep);

    fx_admin_set_draining(a, false);
    http_get(fx_admin_port(a), "/ready", &rep);
    assert_int_equal(rep.status, 200);
    http_reply_free(&rep);
    fx_admin_free(a);
}

static void test_unknown_path_404(void **state)
{
    fx_admin *a = start_local();
    const char *paths[] = {"/", "/metricsx", "/live/", "/v1/streams"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        http_reply rep;
        http_get(fx_admin_port(a), paths[i], &rep);
        assert_int_equal(rep.status, 404);
        assert_body(&rep, "not found\n");
        http_reply_free(&rep);
    }
    fx_admin_free(a);
}

static void test_wrong_method_405(void **state)
{
    fx_admin *a = start_local();
    const char *methods[] = {"POST", "PUT", "DELETE"};
    const char *paths[] = {"/metrics", "/live", "/ready"};
    for (size_t i = 0; i < 3; i++) {
        http_reply rep;
        http_do(AF_INET, fx_admin_port(a), methods[i], paths[i], NULL, "x", &rep);
        assert_int_equal(rep.status, 405);
        char allow[64];
        assert_true(http_header(&rep, "Allow", allow, sizeof(allow)));
        assert_string_equal(allow, "GET");
        http_reply_free(&rep);
    }
    /* HEAD is GET without a body. */
    http_reply rep;
    http_do(AF_INET, fx_admin_port(a), "HEAD", "/live", NULL, NULL, &rep);
    assert_int_equal(rep.status, 200);
    assert_int_equal(rep.body_len, 0);
    http_reply_free(&rep);
    fx_admin_free(a);
}

static void test_port_zero_reports_bound_port(void **state)
{
    fx_admin *a = start_local();
    fx_admin *b = start_local();
    uint16_t pa = fx_admin_port(a), pb = fx_admin_port(b);
    assert_true(pa != 0 && pb != 0);
    assert_true(pa != pb);
    assert_false(fx_admin_is_remote(a));
    http_reply rep;
    http_get(pb, "/live", &rep);
    assert_int_equal(rep.status, 200);
    http_reply_free(&rep);
    fx_admin_free(a);
    fx_admin_free(b);
}

static void expect_bind_error(const char *bind, int want_rv, const char *want_text)
{
    fx_admin *a = NULL;
    char err[256] = "";
    int rv = fx_admin_start(&a, &(fx_admin_opts){.bind = bind}, err, sizeof(err));
    if (rv != want_rv || !strstr(err, want_text))
        fprintf(stderr, "bind '%s': rv=%d (%s) err='%s'\n", bind, rv, fx_strerror(rv), err);
    assert_int_equal(rv, want_rv);
    assert_null(a);
    assert_non_null(strstr(err, want_text));
    assert_non_null(strstr(err, bind));
}

static void test_bad_bind_address_rejected_with_message(void **state)
{
    expect_bind_error("127.0.0.1", FX_ECONFIG, "expected host:port");
    expect_bind_error("127.0.0.1:65536", FX_ECONFIG, "port must be a number");
    expect_bind_error("127.0.0.1:80x", FX_ECONFIG, "port must be a number");
    expect_bind_error(":8080", FX_ECONFIG, "expected host:port");
    expect_bind_error("::1:8080", FX_ECONFIG, "IPv6 addresses go in [ ]");
    expect_bind_error("[::1:8080", FX_ECONFIG, "expected host:port");
    expect_bind_error("[nonsense]:8080", FX_ECONFIG, "not an IPv6 address");

    /* A port already taken names the OS error. */
    fx_admin *a = start_local();
    char bind[64];
    snprintf(bind, sizeof(bind), "127.0.0.1:%u", (unsigned)fx_admin_port(a));
    expect_bind_error(bind, -EADDRINUSE, "cannot listen on");
    fx_admin_free(a);
}

static void test_ipv6_loopback_bind_works(void **state)
{
    int probe = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = in6addr_loopback};
    bool ok = probe >= 0 && bind(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (probe >= 0)
        close(probe);
    if (!ok)
        fx_test_skip("no IPv6 loopback on this host");

    fx_admin *a = start_admin(&(fx_admin_opts){.bind = "[::1]:0"});
    assert_true(fx_admin_port(a) != 0);
    assert_false(fx_admin_is_remote(a));
    http_reply rep;
    http_do(AF_INET6, fx_admin_port(a), "GET", "/live", NULL, NULL, &rep);
    assert_int_equal(rep.status, 200);
    assert_body(&rep, "ok");
    http_reply_free(&rep);
    fx_admin_free(a);
}

static void test_oversized_body_gets_413(void **state)
{
    fx_admin *a = start_admin(&(fx_admin_opts){.bind = "127.0.0.1:0", .max_body = 16});
    http_reply rep;
    http_do(AF_INET, fx_admin_port(a), "PUT", "/live", NULL, "0123456789abcdefXYZ", &rep);
    assert_int_equal(rep.status, 413);
    http_reply_free(&rep);
    fx_admin_free(a);
}

/* ---- registered routes that ask a loop ------------------------------------- */

typedef struct loop_ctx {
    fx_loop *loop;
    int64_t timeout_ns;
    atomic_int answers; /* loop parts that ran, in time or late */
    sem_t gate;         /* a task waiting on it keeps the loop busy */
} loop_ctx;

/* What a route asks its loop. Copies only: the request is the route's only
 * while it runs, and a late answer may come after. */
typedef struct loop_question {
    loop_ctx *c;
    char req[256];
    char answer[300];
} loop_question;

/* Loop side: answers with what it was asked, so the test sees the copy. */
static void answer_on_loop(size_t i, void *data)
{
    (void)i;
    loop_question *q = data;
    snprintf(q->answer, sizeof(q->answer), "%s on_loop=%d", q->req, fx_loop_is_current(q->c->loop));
    atomic_fetch_add(&q->c->answers, 1);
}

static void ask_route(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    loop_ctx *c = user;
    loop_question q = {.c = c};
    snprintf(q.req, sizeof(q.req), "%s %s rest=%s body=%s", req->method, req->path, req->rest,
             req->body);
    fx_loop_ask_req a = {
        .fn = answer_on_loop, .data = &q, .size = sizeof(q), .timeout_ns = c->timeout_ns};
    int rv = fx_loop_ask(c->loop, &a);
    if (rv == 0)
        (void)fx_admin_resp_set(resp, 200, FX_ADMIN_JSON, q.answer, strlen(q.answer));
    else if (rv == FX_ETIMEDOUT)
        (void)fx_admin_resp_text(resp, 503, FX_ADMIN_TIMEOUT_BODY);
    else
        (void)fx_admin_resp_text(resp, 500, "out of memory\n");
}

static void block_loop(void *user)
{
    loop_ctx *c = user;
    while (sem_wait(&c->gate) != 0 && errno == EINTR)
        ;
}

static void loop_ctx_init(loop_ctx *c, int64_t timeout_ns)
{
    memset(c, 0, sizeof(*c));
    c->loop = start_loop();
    c->timeout_ns = timeout_ns;
    atomic_init(&c->answers, 0);
    assert_int_equal(sem_init(&c->gate, 0, 0), 0);
}

static void loop_ctx_deinit(loop_ctx *c)
{
    stop_loop(c->loop);
    sem_destroy(&c->gate);
}

static void test_route_asking_a_loop_answers(void **state)
{
    loop_ctx c;
    loop_ctx_init(&c, 10 * (int64_t)FX_NS_PER_S);
    fx_admin_route routes[] = {
        {.method = "GET", .path = "/v1/streams", .on_request = ask_route, .user = &c},
        {.method = "PUT", .path = "/v1/streams/", .on_request = ask_route, .user = &c},
    };
    fx_admin *a = start_admin(
        &(fx_admin_opts){.bind = "127.0.0.1:0", .token = "t0ken", .routes = routes, .nroutes = 2});

    http_reply rep;
    http_get(fx_admin_port(a), "/v1/streams", &rep);
    assert_int_equal(rep.status, 200);
    char ctype[64];
    assert_true(http_header(&rep, "Content-Type", ctype, sizeof(ctype)));
    assert_string_equal(ctype, FX_ADMIN_JSON);
    assert_body(&rep, "GET /v1/streams rest= body= on_loop=1");
    assert_int_equal(atomic_load(&c.answers), 1);
    http_reply_free(&rep);

    /* A prefix route gets the rest of the path and the body. */
    http_do(AF_INET, fx_admin_port(a), "PUT", "/v1/streams/t1/ns/s",
            "Authorization: Bearer t0ken\r\n", "{\"a\":1}", &rep);
    assert_int_equal(rep.status, 200);
    assert_body(&rep, "PUT /v1/streams/t1/ns/s rest=t1/ns/s body={\"a\":1} on_loop=1");
    http_reply_free(&rep);

    /* The path has a route, the method none. */
    http_do(AF_INET, fx_admin_port(a), "DELETE", "/v1/streams", NULL, NULL, &rep);
    assert_int_equal(rep.status, 405);
    http_reply_free(&rep);

    fx_admin_free(a);
    loop_ctx_deinit(&c);
}

/* The loop is busy: the route answers 503 with the timeout text, and the
 * loop's late answer goes nowhere (fx_loop_ask's own tests, in test_loop.c,
 * check that it is freed). */
static void test_route_asking_a_busy_loop_answers_503(void **state)
{
    loop_ctx c;
    loop_ctx_init(&c, 50 * (int64_t)FX_NS_PER_MS);
    fx_admin_route route = {.method = "GET", .path = "/slow", .on_request = ask_route, .user = &c};
    fx_admin *a =
        start_admin(&(fx_admin_opts){.bind = "127.0.0.1:0", .routes = &route, .nroutes = 1});
    assert_int_equal(fx_loop_call(c.loop, block_loop, &c), 0);
    http_reply rep;
    http_get(fx_admin_port(a), "/slow", &rep);
    assert_int_equal(rep.status, 503);
    assert_body(&rep, FX_ADMIN_TIMEOUT_BODY);
    http_reply_free(&rep);
    assert_int_equal(atomic_load(&c.answers), 0);
    assert_int_equal(sem_post(&c.gate), 0);
    fx_admin_free(a);
    loop_ctx_deinit(&c); /* stopping runs the pending late answer */
    assert_int_equal(atomic_load(&c.answers), 1);
}

/* ---- bearer token for mutating calls ---------------------------------------- */

static atomic_int mutations;

static void mutate_route(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    atomic_fetch_add(&mutations, 1);
    (void)fx_admin_resp_text(resp, 200, "done");
}

static int put_status(fx_admin *a, const char *auth_header, bool *pchallenge)
{
    http_reply rep;
    http_do(AF_INET, fx_admin_port(a), "PUT", "/v1/streams/t/ns/s", auth_header, NULL, &rep);
    int status = rep.status;
    char v[64];
    *pchallenge = http_header(&rep, "WWW-Authenticate", v, sizeof(v)) && strcmp(v, "Bearer") == 0;
    http_reply_free(&rep);
    return status;
}

static void test_mutating_route_needs_token_off_loopback(void **state)
{
    /* The pure rule. */
    const char *p = "/v1/streams/t/ns/s";
    assert_false(fx_admin_authorized(false, NULL, "PUT", p, NULL));
    assert_false(fx_admin_authorized(true, NULL, "PUT", p, "Bearer x"));
    assert_false(fx_admin_authorized(true, "", "PUT", p, "Bearer "));
    assert_false(fx_admin_authorized(true, "s3cret", "PUT", p, NULL));
    assert_false(fx_admin_authorized(true, "s3cret", "PUT", p, "Bearer s3cre"));
    assert_false(fx_admin_authorized(true, "s3cret", "PUT", p, "Bearer s3crett"));
    assert_false(fx_admin_authorized(true, "s3cret", "PUT", p, "Basic s3cret"));
    assert_true(fx_admin_authorized(true, "s3cret", "PUT", p, "Bearer s3cret"));
    assert_true(fx_admin_authorized(true, "s3cret", "DELETE", p, "bearer  s3cret"));
    assert_true(fx_admin_method_is_mutating("PUT"));
    assert_true(fx_admin_method_is_mutating("DELETE"));
    assert_false(fx_admin_method_is_mutating("GET"));
    assert_false(fx_admin_method_is_mutating("HEAD"));

    /* Over HTTP, with the endpoint treated as off-loopback. */
    fx_admin_route routes[] = {
        {.method = "PUT", .path = "/v1/streams/", .on_request = mutate_route},
        {.method = "GET", .path = "/v1/streams", .on_request = mutate_route},
    };
    fx_admin *a = start_admin(&(fx_admin_opts){.bind = "127.0.0.1:0",
                                               .token = "s3cret",
                                               .treat_as_remote = true,
                                               .routes = routes,
                                               .nroutes = 2});
    assert_true(fx_admin_is_remote(a));
    atomic_store(&mutations, 0);
    bool challenge;
    assert_int_equal(put_status(a, NULL, &challenge), 401);
    assert_true(challenge);
    assert_int_equal(put_status(a, "Authorization: Bearer wrong\r\n", &challenge), 401);
    assert_int_equal(atomic_load(&mutations), 0);
    assert_int_equal(put_status(a, "Authorization: Bearer s3cret\r\n", &challenge), 200);
    assert_false(challenge);
    assert_int_equal(atomic_load(&mutations), 1);
    /* Off loopback /v1 reads need the token too. */
    http_reply rep;
    http_get(fx_admin_port(a), "/v1/streams", &rep);
    assert_int_equal(rep.status, 401);
    http_reply_free(&rep);
    http_do(AF_INET, fx_admin_port(a), "GET", "/v1/streams", "Authorization: Bearer s3cret\r\n",
            NULL, &rep);
    assert_int_equal(rep.status, 200);
    http_reply_free(&rep);
    fx_admin_free(a);

    /* Off loopback with no token configured: every mutating call is refused
     * (403: no token can pass), and /v1 reads too (401). */
    a = start_admin(&(fx_admin_opts){
        .bind = "127.0.0.1:0", .treat_as_remote = true, .routes = routes, .nroutes = 2});
    assert_int_equal(put_status(a, "Authorization: Bearer \r\n", &challenge), 403);
    assert_false(challenge);
    http_get(fx_admin_port(a), "/v1/streams", &rep);
    assert_int_equal(rep.status, 401);
    http_reply_free(&rep);
    fx_admin_free(a);

    /* On loopback a token is needed all the same. */
    a = start_admin(
        &(fx_admin_opts){.bind = "127.0.0.1:0", .token = "s3cret", .routes = routes, .nroutes = 2});
    assert_int_equal(put_status(a, NULL, &challenge), 401);
    assert_int_equal(put_status(a, "Authorization: Bearer s3cret\r\n", &challenge), 200);
    fx_admin_free(a);
    assert_int_equal(atomic_load(&mutations), 3);
}

static void test_loopback_decided_from_bound_address(void **state)
{
    const char *loop[] = {"127.0.0.1:1", "127.9.8.7:1", "[::1]:1", "[::ffff:127.0.0.1]:1"};
    const char *remote[] = {"0.0.0.0:1",       "10.0.0.1:1",          "[::]:1",
                            "[2001:db8::1]:1", "[::ffff:10.0.0.1]:1", "128.0.0.1:1"};
    struct sockaddr_storage ss;
    socklen_t len;
    for (size_t i = 0; i < sizeof(loop) / sizeof(loop[0]); i++) {
        assert_int_equal(fx_admin_parse_bind(loop[i], &ss, &len, NULL, 0), 0);
        assert_true(fx_quic_addr_is_loopback((struct sockaddr *)&ss));
    }
    for (size_t i = 0; i < sizeof(remote) / sizeof(remote[0]); i++) {
        assert_int_equal(fx_admin_parse_bind(remote[i], &ss, &len, NULL, 0), 0);
        assert_false(fx_quic_addr_is_loopback((struct sockaddr *)&ss));
    }
    assert_int_equal(fx_admin_parse_bind("[::1]:8080", &ss, &len, NULL, 0), 0);
    assert_int_equal(ss.ss_family, AF_INET6);
    assert_int_equal(ntohs(((struct sockaddr_in6 *)&ss)->sin6_port), 8080);
}

/* ---- guards: Host, token, limits -------------------------------------------- */

/* Sends the raw request |req| to |port| and parses the reply (the request
 * must ask for Connection: close). */
static void http_raw(uint16_t port, const char *req, http_reply *rep)
{
    int fd = connect_to(AF_INET, port);
    write_all(fd, req, strlen(req));
    size_t len;
    rep->raw = read_all(fd, &len);
    close(fd);
    assert_int_equal(sscanf(rep->raw, "HTTP/1.%*d %d", &rep->status), 1);
    rep->headers = rep->raw;
    rep->headers_len = len;
    rep->body = strstr(rep->raw, "\r\n\r\n");
    assert_non_null(rep->body);
    rep->body += 4;
    rep->body_len = len - (size_t)(rep->body - rep->raw);
}

/* The status of GET |path| with header |host| ("Host: x", or "" for none,
 * as HTTP/1.0). */
static int get_with_host(uint16_t port, const char *path, const char *host)
{
    char req[512];
    snprintf(req, sizeof(req), "GET %s HTTP/1.%d\r\n%s%sConnection: close\r\n\r\n", path,
             *host ? 1 : 0, host, *host ? "\r\n" : "");
    http_reply rep;
    http_raw(port, req, &rep);
    int st = rep.status;
    http_reply_free(&rep);
    return st;
}

static uint64_t refused(const char *reason)
{
    fx_metrics_snapshot snap;
    fx_metrics_snapshot_take(&snap);
    if (!strcmp(reason, "host"))
        return snap.c.admin_refused_host;
    if (!strcmp(reason, "token"))
        return snap.c.admin_refused_token;
    if (!strcmp(reason, "body"))
        return snap.c.admin_refused_body;
    if (!strcmp(reason, "headers"))
        return snap.c.admin_refused_headers;
    return snap.c.admin_refused_conn_limit;
}

static void test_host_header_checked_against_rebinding(void **state)
{
    /* The pure rule. */
    assert_true(fx_admin_host_allowed(NULL, "127.0.0.1", NULL));
    assert_true(fx_admin_host_allowed("127.0.0.1:8080", "127.0.0.1", NULL));
    assert_true(fx_admin_host_allowed("10.0.0.7", "0.0.0.0", NULL));
    assert_true(fx_admin_host_allowed("[::1]:8080", "::1", NULL));
    assert_true(fx_admin_host_allowed("localhost:8080", "127.0.0.1", NULL));
    assert_true(fx_admin_host_allowed("LOCALHOST.", "127.0.0.1", NULL));
    assert_true(fx_admin_host_allowed("broker.internal:9", "broker.internal", NULL));
    assert_true(fx_admin_host_allowed("ops.example", "0.0.0.0", "metrics.example, ops.example"));
    assert_false(fx_admin_host_allowed("evil.example", "127.0.0.1", NULL));
    assert_false(fx_admin_host_allowed("evil.example:8080", "0.0.0.0", "ops.example"));
    assert_false(fx_admin_host_allowed("localhost.evil.example", "127.0.0.1", NULL));
    assert_false(fx_admin_host_allowed("ops.example.evil", "127.0.0.1", "ops.example"));
    assert_false(fx_admin_host_allowed("", "127.0.0.1", NULL));
    assert_false(fx_admin_host_allowed("[::1", "127.0.0.1", NULL));
    assert_false(fx_admin_host_allowed("[nothex]:1", "127.0.0.1", NULL));
    assert_false(fx_admin_host_allowed("localhost:80:80", "127.0.0.1", NULL));
    assert_false(fx_admin_host_allowed("localhost:http", "127.0.0.1", NULL));

    /* Over HTTP: every path of the main listener, counted. */
    fx_admin *a =
        start_admin(&(fx_admin_opts){.bind = "127.0.0.1:0", .allowed_hosts = "felix.example"});
    uint16_t port = fx_admin_port(a);
    uint64_t before = refused("host");
    assert_int_equal(get_with_host(port, "/metrics", "Host: evil.example"), 403);
    assert_int_equal(get_with_host(port, "/live", "Host: evil.example:80"), 403);
    assert_int_equal(refused("host"), before + 2);
    assert_int_equal(get_with_host(port, "/live", "Host: felix.example"), 200);
    assert_int_equal(get_with_host(port, "/live", "Host: 127.0.0.1"), 200);
    assert_int_equal(get_with_host(port, "/live", "Host: localhost"), 200);
    assert_int_equal(get_with_host(port, "/live", ""), 200);
    assert_int_equal(refused("host"), before + 2);
    fx_admin_free(a);
}

static atomic_int puts_done;

static void put_route(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    atomic_fetch_add(&puts_done, 1);
    (void)fx_admin_resp_text(resp, 200, "done");
}

static void test_mutation_needs_configured_token_on_loopback(void **state)
{
    assert_true(fx_admin_needs_token(false, "PUT", "/v1/streams/t/n/s"));
    assert_true(fx_admin_needs_token(false, "PATCH", "/v1/streams/t/n/s"));
    assert_true(fx_admin_needs_token(false, "DELETE", "/v1/streams/t/n/s"));
    assert_false(fx_admin_needs_token(false, "GET", "/v1/streams"));
    assert_false(fx_admin_needs_token(false, "HEAD", "/v1/streams"));
    fx_admin_route routes[] = {
        {.method = "PUT", .path = "/v1/streams/", .on_request = put_route},
        {.method = "GET", .path = "/v1/streams", .on_request = put_route},
    };
    fx_admin *a = start_admin(
        &(fx_admin_opts){.bind = "127.0.0.1:0", .token = "t0ken", .routes = routes, .nroutes = 2});
    assert_false(fx_admin_is_remote(a));
    atomic_store(&puts_done, 0);
    uint64_t before = refused("token");
    http_reply rep;
    http_do(AF_INET, fx_admin_port(a), "PUT", "/v1/streams/t/n/s", NULL, NULL, &rep);
    assert_int_equal(rep.status, 401);
    http_reply_free(&rep);
    http_do(AF_INET, fx_admin_port(a), "PUT", "/v1/streams/t/n/s", "Authorization: Bearer t0ke\r\n",
            NULL, &rep);
    assert_int_equal(rep.status, 401);
    http_reply_free(&rep);
    assert_int_equal(atomic_load(&puts_done), 0);
    assert_int_equal(refused("token"), before + 2);
    http_do(AF_INET, fx_admin_port(a), "PUT", "/v1/streams/t/n/s",
            "Authorization: Bearer t0ken\r\n", NULL, &rep);
    assert_int_equal(rep.status, 200);
    http_reply_free(&rep);
    /* Reads on loopback stay open. */
    http_get(fx_admin_port(a), "/v1/streams", &rep);
    assert_int_equal(rep.status, 200);
    http_reply_free(&rep);
    assert_int_equal(atomic_load(&puts_done), 2);
    fx_admin_free(a);
}

/* The no-token refusal: 403, JSON, what is refused and how to set a token. */
static void assert_no_token_refusal(const http_reply *rep)
{
    assert_int_equal(rep->status, 403);
    char v[64];
    assert_true(http_header(rep, "Content-Type", v, sizeof(v)));
    assert_string_equal(v, FX_ADMIN_JSON);
    assert_false(http_header(rep, "WWW-Authenticate", v, sizeof(v)));
    const char *want[] = {"{\"error\":\"no admin_token is configured", "on loopback too",
                          "--set admin_token=", "FELIX_ADMIN_TOKEN", "--admin-token-file"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        if (strstr(rep->body, want[i]) == NULL)
            fail_msg("the refusal lacks '%s': %s", want[i], rep->body);
    }
}

static void test_mutations_refused_on_loopback_without_a_configured_token(void **state)
{
    assert_false(fx_admin_authorized(false, NULL, "PUT", "/v1/streams/t/n/s", NULL));
    assert_false(fx_admin_authorized(false, "", "DELETE", "/v1/streams/t/n/s", "Bearer "));
    assert_true(fx_admin_authorized(false, "", "GET", "/v1/streams", NULL));
    const char *methods[] = {"PUT", "PATCH", "DELETE"};
    fx_admin_route routes[] = {
        {.method = "PUT", .path = "/v1/streams/", .on_request = put_route},
        {.method = "PATCH", .path = "/v1/streams/", .on_request = put_route},
        {.method = "DELETE", .path = "/v1/streams/", .on_request = put_route},
        {.method = "GET", .path = "/v1/streams", .on_request = put_route},
    };
    fx_admin *a =
        start_admin(&(fx_admin_opts){.bind = "127.0.0.1:0", .routes = routes, .nroutes = 4});
    assert_false(fx_admin_is_remote(a));
    atomic_store(&puts_done, 0);
    uint64_t before = refused("token");
    http_reply rep;
    for (size_t i = 0; i < 3; i++) {
        http_do(AF_INET, fx_admin_port(a), methods[i], "/v1/streams/t/n/s", NULL, "{}", &rep);
        assert_no_token_refusal(&rep);
        http_reply_free(&rep);
        /* No token a client sends can stand in for one the broker lacks. */
        http_do(AF_INET, fx_admin_port(a), methods[i], "/v1/streams/t/n/s",
                "Authorization: Bearer \r\n", NULL, &rep);
        assert_no_token_refusal(&rep);
        http_reply_free(&rep);
    }
    http_get(fx_admin_port(a), "/v1/streams", &rep);
    assert_int_equal(rep.status, 200);
    http_reply_free(&rep);
    assert_int_equal(atomic_load(&puts_done), 1); /* the GET only */
    assert_int_equal(refused("token"), before + 6);
    fx_admin_free(a);
}

static void test_api_reads_need_token_off_loopback_health_stays_open(void **state)
{
    fx_admin_route routes[] = {
        {.method = "GET", .path = "/v1/streams", .on_request = put_route},
        {.method = "GET", .path = "/v1/subscriptions", .on_request = put_route},
    };
    fx_admin *a = start_admin(&(fx_admin_opts){.bind = "127.0.0.1:0",
                                               .token = "t0ken",
                                               .treat_as_remote = true,
                                               .routes = routes,
                                               .nroutes = 2});
    http_reply rep;
    const char *api[] = {"/v1/streams", "/v1/subscriptions"};
    for (size_t i = 0; i < 2; i++) {
        http_get(fx_admin_port(a), api[i], &rep);
        assert_int_equal(rep.status, 401);
        http_reply_free(&rep);
        http_do(AF_INET, fx_admin_port(a), "GET", api[i], "Authorization: Bearer t0ken\r\n", NULL,
                &rep);
        assert_int_equal(rep.status, 200);
        http_reply_free(&rep);
    }
    const char *open_paths[] = {"/metrics", "/live", "/ready"};
    for (size_t i = 0; i < 3; i++) {
        http_get(fx_admin_port(a), open_paths[i], &rep);
        assert_int_equal(rep.status, 200);
        http_reply_free(&rep);
    }
    fx_admin_free(a);
}

static void test_token_equal_compares_whole_tokens(void **state)
{
    assert_true(fx_admin_token_equal("s3cret", "s3cret"));
    assert_true(fx_admin_token_equal("", ""));
    assert_false(fx_admin_token_equal("s3cre", "s3cret"));
    assert_false(fx_admin_token_equal("s3crett", "s3cret"));
    assert_false(fx_admin_token_equal("S3cret", "s3cret"));
    assert_false(fx_admin_token_equal("", "s3cret"));
    char long_token[4097];
    memset(long_token, 'a', sizeof(long_token) - 1);
    long_token[sizeof(long_token) - 1] = '\0';
    assert_false(fx_admin_token_equal(long_token, "a"));
    assert_true(fx_admin_token_equal(long_token, long_token));
}

static void test_oversized_body_refusal_counted(void **state)
{
    fx_admin_route routes[] = {{.method = "PUT", .path = "/v1/x", .on_request = put_route}};
    fx_admin *a = start_admin(
        &(fx_admin_opts){.bind = "127.0.0.1:0", .max_body = 16, .routes = routes, .nroutes = 1});
    uint64_t before = refused("body");
    http_reply rep;
    http_do(AF_INET, fx_admin_port(a), "PUT", "/v1/x", NULL, "0123456789abcdefXYZ", &rep);
    assert_int_equal(rep.status, 413);
    http_reply_free(&rep);
    assert_int_equal(refused("body"), before + 1);
    fx_admin_free(a);
}

/* Connects to |port| on 127.0.0.1 from source address |src| (any
 * 127.0.0.0/8 address works on Linux loopback). */
static int connect_from(const char *src, uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = HANG_GUARD_S};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    struct sockaddr_in me = {.sin_family = AF_INET};
    assert_int_equal(inet_pton(AF_INET, src, &me.sin_addr), 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&me, sizeof(me)), 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
    return fd;
}

/* True if the server closes |fd| (EOF or reset) within the hang guard. */
static bool closed_by_server(int fd)
{
    char b;
    ssize_t r = recv(fd, &b, 1, 0);
    return r == 0 || (r < 0 && errno == ECONNRESET);
}

/* Sends a GET /live on an open connection |fd| and returns the status. */
static int live_on(int fd)
{
    static const char req[] = "GET /live HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    write_all(fd, req, sizeof(req) - 1);
    size_t len;
    char *raw = read_all(fd, &len);
    int st = 0;
    if (sscanf(raw, "HTTP/1.%*d %d", &st) != 1)
        st = -1;
    free(raw);
    return st;
}

static void test_per_address_connection_limit(void **state)
{
    fx_admin *a = start_admin(&(fx_admin_opts){.bind = "127.0.0.1:0", .per_ip_limit = 2});
    uint16_t port = fx_admin_port(a);
    uint64_t before = refused("conn_limit");
    int held[2] = {connect_from("127.0.0.1", port), connect_from("127.0.0.1", port)};
    usleep(100 * 1000); /* let the daemon accept both */
    int extra = connect_from("127.0.0.1", port);
    assert_true(closed_by_server(extra));
    close(extra);
    assert_true(refused("conn_limit") > before);
    /* Another address still gets in. */
    int other = connect_from("127.0.0.2", port);
    assert_int_equal(live_on(other), 200);
    close(other);
    for (size_t i = 0; i < 2; i++)
        close(held[i]);
    fx_admin_free(a);
}

static void test_idle_connection_closed_after_timeout(void **state)
{
    fx_admin *a = start_admin(&(fx_admin_opts){.bind = "127.0.0.1:0", .timeout_s = 1});
    int fd = connect_from("127.0.0.1", fx_admin_port(a));
    write_all(fd, "GET /live HTTP/1.1\r\nHost: local", 31); /* and then nothing */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_true(closed_by_server(fd));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_true(t1.tv_sec - t0.tv_sec < HANG_GUARD_S - 2);
    close(fd);
    fx_admin_free(a);
}

static void test_oversized_headers_refused(void **state)
{
    fx_admin *a = start_admin(&(fx_admin_opts){.bind = "127.0.0.1:0"});
    size_t n = 2 * FX_ADMIN_DEFAULT_CONN_MEMORY;
    char *req = malloc(n + 256);
    assert_non_null(req);
    int h = snprintf(req, 256, "GET /live HTTP/1.1\r\nHost: localhost\r\nX-Pad: ");
    memset(req + h, 'p', n);
    snprintf(req + h + n, 256, "\r\nConnection: close\r\n\r\n");
    uint64_t before = refused("headers");
    int fd = connect_from("127.0.0.1", fx_admin_port(a));
    /* The server may stop reading and answer (431) before all is sent. */
    (void)send(fd, req, strlen(req), MSG_NOSIGNAL);
    char reply[256] = "";
    ssize_t r = recv(fd, reply, sizeof(reply) - 1, 0);
    int st = 0;
    if (r > 0)
        (void)sscanf(reply, "HTTP/1.%*d %d", &st);
    assert_true(r == 0 || (r < 0 && errno == ECONNRESET) || st == 431);
    close(fd);
    free(req);
    fx_admin_free(a); /* after the stop, the refusal has been logged and counted */
    assert_int_equal(refused("headers"), before + 1);
}

/* Slow-loris: idle connections from several addresses fill every slot of the
 * main listener; the probe listener still answers /live and /ready. */
static void test_probe_listener_answers_while_main_is_saturated(void **state)
{
    fx_admin *a = start_admin(&(fx_admin_opts){.bind = "127.0.0.1:0",
                                               .probe_bind = "127.0.0.1:0",
                                               .max_connections = 8,
                                               .per_ip_limit = 2,
                                               .timeout_s = 30});
    uint16_t port = fx_admin_port(a), probe = fx_admin_probe_port(a);
    assert_true(probe != 0 && probe != port);
    enum { NSRC = 8, PER = 3 };
    int fds[NSRC * PER];
    for (int i = 0; i < NSRC * PER; i++) {
        char src[32];
        snprintf(src, sizeof(src), "127.0.1.%d", 1 + i / PER);
        fds[i] = connect_from(src, port);
        write_all(fds[i], "GET /live HTTP/1.1\r\n", 20); /* never finished */
    }
    usleep(200 * 1000);
    /* The main listener is full: a new client waits in the backlog (or is
     * turned away) and gets no answer. */
    int late = connect_from("127.0.2.1", port);
    struct timeval tv = {.tv_sec = 1};
    assert_int_equal(setsockopt(late, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    static const char req[] = "GET /live HTTP/1.1\r\nHost: localhost\r\n\r\n";
    (void)send(late, req, sizeof(req) - 1, MSG_NOSIGNAL);
    char b[16];
    assert_true(recv(late, b, sizeof(b), 0) <= 0);
    close(late);
    /* The probes are not. */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(get_with_host(probe, "/live", "Host: localhost"), 200);
        assert_int_equal(get_with_host(probe, "/ready", "Host: 10.0.0.1"), 200);
    }
    fx_admin_set_draining(a, true);
    assert_int_equal(get_with_host(probe, "/ready", "Host: localhost"), 503);
    for (int i = 0; i < NSRC * PER; i++)
        close(fds[i]);
    fx_admin_free(a);
}

static void test_probe_listener_serves_only_health(void **state)
{
    fx_admin_route routes[] = {{.method = "GET", .path = "/v1/streams", .on_request = put_route}};
    fx_admin *a = start_admin(&(fx_admin_opts){
        .bind = "127.0.0.1:0", .probe_bind = "127.0.0.1:0", .routes = routes, .nroutes = 1});
    uint16_t probe = fx_admin_probe_port(a);
    assert_int_equal(get_with_host(probe, "/live", "Host: localhost"), 200);
    assert_int_equal(get_with_host(probe, "/metrics", "Host: localhost"), 404);
    assert_int_equal(get_with_host(probe, "/v1/streams", "Host: localhost"), 404);
    assert_int_equal(get_with_host(fx_admin_port(a), "/v1/streams", "Host: localhost"), 200);
    fx_admin_free(a);
    /* Without probe_bind there is no probe port. */
    a = start_local();
    assert_int_equal(fx_admin_probe_port(a), 0);
    fx_admin_free(a);
}

/* GET |path| over TLS (no certificate check: the test only needs the
 * channel) and returns the status, or -1 if the handshake failed. */
static int https_get(uint16_t port, const char *path)
{
    int fd = connect_from("127.0.0.1", port);
    gnutls_session_t s;
    gnutls_certificate_credentials_t cred;
    assert_int_equal(gnutls_certificate_allocate_credentials(&cred), 0);
    assert_int_equal(gnutls_init(&s, GNUTLS_CLIENT), 0);
    assert_int_equal(gnutls_set_default_priority(s), 0);
    assert_int_equal(gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred), 0);
    gnutls_transport_set_int(s, fd);
    int rv;
    do
        rv = gnutls_handshake(s);
    while (rv < 0 && !gnutls_error_is_fatal(rv));
    int st = -1;
    if (rv == 0) {
        char req[256], reply[512] = "";
        int n = snprintf(req, sizeof(req),
                         "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", path);
        assert_int_equal(gnutls_record_send(s, req, (size_t)n), n);
        ssize_t r = gnutls_record_recv(s, reply, sizeof(reply) - 1);
        if (r > 0 && sscanf(reply, "HTTP/1.%*d %d", &st) != 1)
            st = -1;
    }
    gnutls_deinit(s);
    gnutls_certificate_free_credentials(cred);
    close(fd);
    return st;
}

static void test_tls_serves_https(void **state)
{
    char dir[] = "/tmp/fx_test_admin_tls_XXXXXX", cert[128], key[128];
    assert_non_null(mkdtemp(dir));
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    assert_int_equal(fx_quic_cert_generate(cert, key, NULL), 0);
    fx_admin *a = start_admin(&(fx_admin_opts){.bind = "127.0.0.1:0",
                                               .probe_bind = "127.0.0.1:0",
                                               .tls_cert_file = cert,
                                               .tls_key_file = key});
    assert_int_equal(https_get(fx_admin_port(a), "/live"), 200);
    assert_int_equal(https_get(fx_admin_port(a), "/metrics"), 200);
    /* Plain HTTP to the TLS port gets no HTTP answer. */
    int fd = connect_from("127.0.0.1", fx_admin_port(a));
    static const char plain[] = "GET /live HTTP/1.1\r\nHost: localhost\r\n\r\n";
    write_all(fd, plain, sizeof(plain) - 1);
    char reply[64] = "";
    ssize_t r = recv(fd, reply, sizeof(reply) - 1, 0);
    assert_true(r <= 0 || strncmp(reply, "HTTP/", 5) != 0);
    close(fd);
    /* The probe listener stays plain HTTP. */
    assert_int_equal(get_with_host(fx_admin_probe_port(a), "/live", "Host: localhost"), 200);
    fx_admin_free(a);
    /* A missing key file or half a pair is refused with a message. */
    fx_admin *b = NULL;
    char err[256] = "";
    char missing[160];
    snprintf(missing, sizeof(missing), "%s/nope.pem", dir);
    assert_int_equal(
        fx_admin_start(
            &b,
            &(fx_admin_opts){.bind = "127.0.0.1:0", .tls_cert_file = cert, .tls_key_file = missing},
            err, sizeof(err)),
        FX_ECONFIG);
    assert_non_null(strstr(err, "nope.pem"));
    assert_int_equal(fx_admin_start(&b,
                                    &(fx_admin_opts){.bind = "127.0.0.1:0", .tls_cert_file = cert},
                                    err, sizeof(err)),
                     FX_ECONFIG);
    assert_null(b);
    unlink(cert);
    unlink(key);
    rmdir(dir);
}

/* ---- docs/metrics.md --------------------------------------------------------- */

#define DOC_BEGIN "<!-- BEGIN GENERATED: fx_metrics_print_markdown -->\n"
#define DOC_END "<!-- END GENERATED -->"

/* Writes |doc| back with the block between the markers replaced by |table|
 * (FX_REGEN_DOCS=1, run by hand to refresh the docs). */
static void regen_docs(const char *path, const char *doc, const char *begin, const char *end,
                       const char *table)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fwrite(doc, 1, (size_t)(begin - doc), f);
    fputs(table, f);
    fputs(end, f);
    assert_int_equal(fclose(f), 0);
    fprintf(stderr, "rewrote the generated table in %s\n", path);
}

/* docs/metrics.md embeds the registry's table between two markers; it must
 * equal what fx_metrics_print_markdown() writes today. */
static void test_metrics_docs_match_registry(void **state)
{
    const char *root = getenv("FX_SOURCE_DIR");
    if (!root)
        fx_test_skip("FX_SOURCE_DIR not set (run through ctest)");
    char path[512];
    snprintf(path, sizeof(path), "%s/docs/metrics.md", root);
    FILE *in = fopen(path, "r");
    assert_non_null(in);
    static char doc[256 * 1024];
    size_t n = fread(doc, 1, sizeof(doc) - 1, in);
    fclose(in);
    doc[n] = '\0';
    char *begin = strstr(doc, DOC_BEGIN);
    assert_non_null(begin);
    begin += strlen(DOC_BEGIN);
    char *end = strstr(begin, DOC_END);
    assert_non_null(end);

    char *table = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&table, &len);
    assert_non_null(out);
    assert_int_equal(fx_metrics_print_markdown(out), 0);
    assert_int_equal(fclose(out), 0);
    /* Every registered name appears in the table. */
    for (size_t i = 0; i < fx_metrics_ndescs; i++) {
        char cell[160];
        snprintf(cell, sizeof(cell), "| `%s` |", fx_metrics_descs[i].name);
        assert_non_null(strstr(table, cell));
    }
    const char *regen = getenv("FX_REGEN_DOCS");
    if (regen && strcmp(regen, "1") == 0) {
        regen_docs(path, doc, begin, end, table);
        free(table);
        return;
    }
    *end = '\0';
    if (strcmp(begin, table) != 0)
        fprintf(stderr, "docs/metrics.md is stale: regenerate its table with\n"
                        "  FX_REGEN_DOCS=1 ctest -R admin.metrics_docs_match_registry\n");
    assert_string_equal(begin, table);
    free(table);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_metrics_endpoint_serves_prometheus_text),
    cmocka_unit_test(test_live_returns_ok),
    cmocka_unit_test(test_ready_turns_503_when_draining),
    cmocka_unit_test(test_unknown_path_404),
    cmocka_unit_test(test_wrong_method_405),
    cmocka_unit_test(test_port_zero_reports_bound_port),
    cmocka_unit_test(test_bad_bind_address_rejected_with_message),
    cmocka_unit_test(test_ipv6_loopback_bind_works),
    cmocka_unit_test(test_oversized_body_gets_413),
    cmocka_unit_test(test_route_asking_a_loop_answers),
    cmocka_unit_test(test_route_asking_a_busy_loop_answers_503),
    cmocka_unit_test(test_mutating_route_needs_token_off_loopback),
    cmocka_unit_test(test_loopback_decided_from_bound_address),
    cmocka_unit_test(test_host_header_checked_against_rebinding),
    cmocka_unit_test(test_mutation_needs_configured_token_on_loopback),
    cmocka_unit_test(test_mutations_refused_on_loopback_without_a_configured_token),
    cmocka_unit_test(test_api_reads_need_token_off_loopback_health_stays_open),
    cmocka_unit_test(test_token_equal_compares_whole_tokens),
    cmocka_unit_test(test_oversized_body_refusal_counted),
    cmocka_unit_test(test_per_address_connection_limit),
    cmocka_unit_test(test_idle_connection_closed_after_timeout),
    cmocka_unit_test(test_oversized_headers_refused),
    cmocka_unit_test(test_probe_listener_answers_while_main_is_saturated),
    cmocka_unit_test(test_probe_listener_serves_only_health),
    cmocka_unit_test(test_tls_serves_https),
    cmocka_unit_test(test_metrics_docs_match_registry),
};
FX_TEST_MAIN(tests)
