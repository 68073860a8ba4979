/* fx_etcd against a fake etcd: tiny HTTP/1.1 servers on the same fx_loop as
 * the client (no threads), answering what a case scripts. They check what a
 * real etcd cannot show: the hasleader header on every request, failover on
 * "no leader" and on a silent member, a watch resumed from the last revision
 * + 1 after its stream ended, a lost lease's keepalive, and a new token after
 * an invalid one. */
/* fx-test-libs: fx_cluster fx_wire fx_base */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/loop.h"
#include "cluster/etcd.h"
#include "felix/error.h"
#include "fx_test.h"

#define MAX_REQ 64

typedef struct fake fake;

typedef struct fconn {
    fx_watch w;
    int fd;
    fake *f;
    char buf[16384];
    size_t len;
    bool answered;
} fconn;

/* The answer to one request: the whole HTTP response text, and whether the
 * connection stays open after it (a watch stream). */
typedef bool (*fake_fn)(fake *f, int i, char *out, size_t cap);

struct fake {
    fx_loop *l;
    int lfd;
    fx_watch lw;
    char url[64];
    fake_fn fn;
    int n;
    char path[MAX_REQ][64];
    char body[MAX_REQ][512];
    char auth[MAX_REQ][64];
    bool hasleader[MAX_REQ];
    fconn *open[8];
    size_t n_open;
};

static fx_loop *L;

static void fconn_close(fconn *c)
{
    fx_loop_unwatch(c->f->l, &c->w);
    close(c->fd);
    free(c);
}

static void header(const char *h, const char *name, char *out, size_t cap)
{
    out[0] = '\0';
    const char *p = strcasestr(h, name);
    if (p == NULL)
        return;
    p += strlen(name);
    size_t n = strcspn(p, "\r");
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
}

static void on_conn(fx_loop *l, fx_watch *w, uint32_t events)
{
    fconn *c = w->user;
    fake *f = c->f;
    ssize_t k = read(c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len);
    if (k <= 0) {
        if (k < 0 && errno == EAGAIN)
            return;
        for (size_t i = 0; i < f->n_open; i++)
            if (f->open[i] == c)
                f->open[i] = f->open[--f->n_open];
        fconn_close(c);
        return;
    }
    c->len += (size_t)k;
    c->buf[c->len] = '\0';
    char *end = strstr(c->buf, "\r\n\r\n");
    if (end == NULL || c->answered)
        return;
    char cl[32];
    header(c->buf, "\r\nContent-Length: ", cl, sizeof(cl));
    size_t body_len = (size_t)atoi(cl);
    if (c->len < (size_t)(end + 4 - c->buf) + body_len)
        return;
    assert_true(f->n < MAX_REQ);
    int i = f->n++;
    sscanf(c->buf, "POST %63s", f->path[i]);
    snprintf(f->body[i], sizeof(f->body[i]), "%.*s", (int)body_len, end + 4);
    header(c->buf, "\r\nAuthorization: ", f->auth[i], sizeof(f->auth[i]));
    char hl[16];
    header(c->buf, "\r\nGrpc-Metadata-hasleader: ", hl, sizeof(hl));
    f->hasleader[i] = strcmp(hl, "true") == 0;
    char out[4096];
    out[0] = '\0';
    bool hold = f->fn(f, i, out, sizeof(out));
    c->answered = true;
    if (out[0] != '\0')
        assert_int_equal(write(c->fd, out, strlen(out)), (ssize_t)strlen(out));
    if (hold) {
        assert_true(f->n_open < 8);
        f->open[f->n_open++] = c;
    } else if (out[0] != '\0') {
        fconn_close(c);
    } else {
        f->open[f->n_open++] = c; /* silent: held open until the client gives up */
    }
}

static void on_accept(fx_loop *l, fx_watch *w, uint32_t events)
{
    fake *f = w->user;
    int fd = accept4(f->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    fconn *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->fd = fd;
    c->f = f;
    assert_int_equal(fx_loop_watch(l, &c->w, fd, EPOLLIN, on_conn, c), 0);
}

static fake *fake_new(fake_fn fn)
{
    fake *f = calloc(1, sizeof(*f));
    f->l = L;
    f->fn = fn;
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(f->lfd, 16), 0);
    assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &len), 0);
    snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%d", ntohs(a.sin_port));
    assert_int_equal(fx_loop_watch(L, &f->lw, f->lfd, EPOLLIN, on_accept, f), 0);
    return f;
}

static void fake_free(fake *f)
{
    while (f->n_open > 0)
        fconn_close(f->open[--f->n_open]);
    fx_loop_unwatch(L, &f->lw);
    close(f->lfd);
    free(f);
}

static void answer(char *out, size_t cap, int status, const char *body)
{
    snprintf(out, cap,
             "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
             "Connection: close\r\n\r\n%s",
             status, strlen(body), body);
}

#define HDR "\"header\":{\"cluster_id\":\"1\",\"member_id\":\"2\",\"revision\":\"9\",\"raft_term\":\"2\"}"

/* ---- running ------------------------------------------------------------- */

static fx_timer guard;
static bool guard_fired;

static void on_guard(fx_loop *l, fx_timer *t, void *user)
{
    guard_fired = true;
    fx_loop_stop(l);
}

static void wait_for(const bool *flag, uint64_t ms)
{
    guard_fired = false;
    fx_timer_init(&guard, on_guard, NULL);
    assert_int_equal(fx_loop_timer_arm(L, &guard, fx_now_ns() + ms * FX_NS_PER_MS), 0);
    while (!*flag && !guard_fired)
        assert_int_equal(fx_loop_run(L), 0);
    fx_loop_timer_cancel(L, &guard);
    assert_true(*flag);
}

typedef struct res {
    bool done;
    int rv;
    int grpc;
    bool lost;
    size_t n_kvs;
} res;

static void on_res(fx_etcd *e, const fx_etcd_resp *r, void *user)
{
    res *o = user;
    o->done = true;
    o->rv = r->rv;
    o->grpc = r->grpc_code;
    o->lost = r->lease_lost;
    o->n_kvs = r->n_kvs;
    fx_loop_stop(L);
}

static int setup(void **state)
{
    fx_loop_opts lo = {.name = "etcd-fake", .cpu = -1};
    assert_int_equal(fx_loop_new(&L, &lo), 0);
    return 0;
}

static int teardown(void **state)
{
    fx_loop_free(L);
    return 0;
}

static fx_etcd *client(const char *a, const char *b, const fx_etcd_opts *base)
{
    const char *eps[2] = {a, b};
    fx_etcd_opts o = base ? *base : (fx_etcd_opts){0};
    o.endpoints = eps;
    o.n_endpoints = b ? 2 : 1;
    fx_etcd *e = NULL;
    assert_int_equal(fx_etcd_new(&e, L, &o), 0);
    return e;
}

/* ---- cases --------------------------------------------------------------- */

static bool ok_all(fake *f, int i, char *out, size_t cap)
{
    const char *p = f->path[i];
    if (strcmp(p, "/v3/lease/keepalive") == 0)
        /* A lost lease: HTTP 200 and no TTL. */
        answer(out, cap, 200, "{\"result\":{" HDR ",\"ID\":\"5\"}}\n");
    else if (strcmp(p, "/v3/lease/grant") == 0)
        answer(out, cap, 200, "{" HDR ",\"ID\":\"5\",\"TTL\":\"2\"}");
    else
        answer(out, cap, 200, "{" HDR ",\"kvs\":[{\"key\":\"Zm9v\",\"value\":\"YmFy\"}],\"count\":\"1\"}");
    return false;
}

static bool no_leader(fake *f, int i, char *out, size_t cap)
{
    answer(out, cap, 503,
           "{\"error\":\"etcdserver: no leader\",\"message\":\"etcdserver: no leader\",\"code\":14}");
    return false;
}

static void test_every_request_carries_hasleader_and_no_leader_fails_over(void **state)
{
    fake *bad = fake_new(no_leader), *good = fake_new(ok_all);
    fx_etcd *e = client(bad->url, good->url, NULL);
    res r[7] = {{0}};
    fx_etcd_op op = {.key = "foo", .value = "bar"};
    fx_etcd_txn_req t = {.success = &op, .n_success = 1};
    assert_int_equal(fx_etcd_put(e, &op, on_res, &r[0]), 0);
    /* One at a time: the first "no leader" moves every later request on. */
    wait_for(&r[0].done, 3000);
    assert_int_equal(fx_etcd_range(e, &op, on_res, &r[1]), 0);
    assert_int_equal(fx_etcd_delete(e, &op, on_res, &r[2]), 0);
    assert_int_equal(fx_etcd_txn(e, &t, on_res, &r[3]), 0);
    assert_int_equal(fx_etcd_lease_grant(e, 2, 0, on_res, &r[4]), 0);
    assert_int_equal(fx_etcd_lease_revoke(e, 5, on_res, &r[5]), 0);
    assert_int_equal(fx_etcd_lease_keepalive(e, 5, on_res, &r[6]), 0);
    for (int i = 1; i < 7; i++)
        wait_for(&r[i].done, 3000);
    for (int i = 0; i < 7; i++)
        assert_int_equal(r[i].rv, 0);
    /* The put that met "no leader" went to the next member. */
    assert_int_equal(bad->n, 1);
    assert_int_equal(good->n, 7);
    assert_true(r[6].lost);
    for (int i = 0; i < bad->n; i++)
        assert_true(bad->hasleader[i]);
    for (int i = 0; i < good->n; i++)
        assert_true(good->hasleader[i]);
    fx_etcd_stats st;
    fx_etcd_get_stats(e, &st);
    assert_int_equal(st.err_no_leader, 1);
    assert_int_equal(st.failovers, 1);
    assert_int_equal(st.leases_lost, 1);
    assert_int_equal(st.ok, 7);
    fx_etcd_free(e);
    fake_free(bad);
    fake_free(good);
}

static bool silent(fake *f, int i, char *out, size_t cap)
{
    return false; /* no answer at all */
}

static void test_timeouts_retry_reads_but_not_writes(void **state)
{
    fake *dead = fake_new(silent), *good = fake_new(ok_all);
    fx_etcd_opts o = {.timeout_ms = 300};
    fx_etcd *e = client(dead->url, good->url, &o);
    res w = {0};
    fx_etcd_op op = {.key = "foo", .value = "bar"};
    assert_int_equal(fx_etcd_put(e, &op, on_res, &w), 0);
    wait_for(&w.done, 3000);
    /* etcd may have applied it: the caller is told, nothing is resent. */
    assert_int_equal(w.rv, FX_ETIMEDOUT);
    assert_int_equal(good->n, 0);
    fx_etcd_free(e);
    e = client(dead->url, good->url, &o);
    res r = {0};
    assert_int_equal(fx_etcd_range(e, &op, on_res, &r), 0);
    wait_for(&r.done, 3000);
    assert_int_equal(r.rv, 0);
    assert_int_equal(r.n_kvs, 1);
    assert_int_equal(good->n, 1);
    fx_etcd_stats st;
    fx_etcd_get_stats(e, &st);
    assert_int_equal(st.err_timeout, 1);
    assert_int_equal(st.retries, 1);
    assert_true(st.latency_buckets[3] >= 1); /* it took over 100 ms */
    fx_etcd_free(e);
    fake_free(dead);
    fake_free(good);
}

/* Watch streams: the first ends after an event at revision 7, the second
 * must start at 8 and stays open. */
static bool watch_fn(fake *f, int i, char *out, size_t cap)
{
    const char *head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n";
    if (i == 0) {
        snprintf(out, cap,
                 "%s{\"result\":{" HDR ",\"created\":true}}\n"
                 "{\"result\":{" HDR ",\"events\":[{\"kv\":{\"key\":\"Zm9v\",\"create_revision\":"
                 "\"7\",\"mod_revision\":\"7\",\"version\":\"1\",\"value\":\"YQ==\"}}]}}\n",
                 head);
        return false; /* closed: the stream ends */
    }
    snprintf(out, cap,
             "%s{\"result\":{" HDR ",\"created\":true}}\n"
             "{\"result\":{" HDR ",\"events\":[{\"type\":\"DELETE\",\"kv\":{\"key\":\"Zm9v\","
             "\"mod_revision\":\"8\"}}]}}\n",
             head);
    return true;
}

typedef struct wlog {
    char text[256];
    int restarts;
    int last_restart_rv;
    bool done;
} wlog;

static void on_events(fx_etcd_watch *w, int64_t rev, const fx_etcd_event *ev, size_t n, void *u)
{
    wlog *g = u;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(g->text);
        snprintf(g->text + len, sizeof(g->text) - len, "%s%lld;", ev[i].is_delete ? "D" : "P",
                 (long long)ev[i].kv.mod_revision);
        if (ev[i].kv.mod_revision == 8) {
            g->done = true;
            fx_loop_stop(L);
        }
    }
}

static void on_restart(fx_etcd_watch *w, int rv, const char *msg, void *u)
{
    wlog *g = u;
    g->restarts++;
    g->last_restart_rv = rv;
}

static void test_watch_resumes_after_the_last_revision(void **state)
{
    fake *f = fake_new(watch_fn);
    fx_etcd *e = client(f->url, NULL, NULL);
    wlog g = {{0}, 0, 0, false};
    fx_etcd_watch_cbs cbs = {.on_events = on_events, .on_restart = on_restart};
    fx_etcd_watch_opts o = {.key = "foo", .start_revision = 5};
    fx_etcd_watch *w = NULL;
    assert_int_equal(fx_etcd_watch_start(e, &o, &cbs, &g, &w), 0);
    wait_for(&g.done, 3000);
    assert_string_equal(g.text, "P7;D8;");
    assert_int_equal(g.restarts, 1);
    assert_int_equal(g.last_restart_rv, FX_EEOF);
    assert_int_equal(f->n, 2);
    assert_string_equal(f->body[0], "{\"create_request\":{\"key\":\"Zm9v\",\"start_revision\":\"5\"}}");
    assert_string_equal(f->body[1], "{\"create_request\":{\"key\":\"Zm9v\",\"start_revision\":\"8\"}}");
    assert_true(f->hasleader[0] && f->hasleader[1]);
    assert_int_equal(fx_etcd_watch_next_revision(w), 9);
    fx_etcd_stats st;
    fx_etcd_get_stats(e, &st);
    assert_int_equal(st.watch_restarts, 1);
    fx_etcd_watch_stop(w);
    fx_etcd_free(e); /* frees the stopped watch */
    fake_free(f);
}

static bool quiet_watch(fake *f, int i, char *out, size_t cap)
{
    snprintf(out, cap,
             "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
             "{\"result\":{" HDR ",\"created\":true}}\n");
    return true; /* then nothing: a member that stopped talking */
}

static bool live_watch(fake *f, int i, char *out, size_t cap)
{
    snprintf(out, cap,
             "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
             "{\"result\":{" HDR ",\"created\":true}}\n"
             "{\"result\":{" HDR ",\"events\":[{\"kv\":{\"key\":\"Zm9v\",\"create_revision\":"
             "\"8\",\"mod_revision\":\"8\",\"version\":\"1\",\"value\":\"YQ==\"}}]}}\n");
    return true;
}

static void test_silent_watch_stream_moves_to_the_next_endpoint(void **state)
{
    fake *quiet = fake_new(quiet_watch), *live = fake_new(live_watch);
    fx_etcd *e = client(quiet->url, live->url, NULL);
    wlog g = {{0}, 0, 0, false};
    fx_etcd_watch_cbs cbs = {.on_events = on_events, .on_restart = on_restart};
    fx_etcd_watch_opts o = {.key = "foo", .start_revision = 5, .progress_notify = true,
                            .idle_timeout_ms = 300};
    fx_etcd_watch *w = NULL;
    uint64_t t0 = fx_now_ns();
    assert_int_equal(fx_etcd_watch_start(e, &o, &cbs, &g, &w), 0);
    wait_for(&g.done, 5000);
    assert_true(fx_now_ns() - t0 >= 300 * FX_NS_PER_MS);
    assert_string_equal(g.text, "P8;");
    assert_int_equal(g.restarts, 1);
    assert_int_equal(g.last_restart_rv, FX_ETIMEDOUT);
    assert_int_equal(quiet->n, 1);
    assert_int_equal(live->n, 1);
    /* Nothing was delivered from the silent one: the same start revision. */
    assert_string_equal(live->body[0], "{\"create_request\":{\"key\":\"Zm9v\",\"start_revision\":"
                                       "\"5\",\"progress_notify\":true}}");
    fx_etcd_stats st;
    fx_etcd_get_stats(e, &st);
    assert_int_equal(st.failovers, 1);
    assert_int_equal(st.err_timeout, 1);
    fx_etcd_watch_stop(w);
    fx_etcd_free(e);
    fake_free(quiet);
    fake_free(live);
}

/* Auth: tokens "t1" then "t2"; t1 is refused as invalid once used. */
static int auths;

static bool auth_fn(fake *f, int i, char *out, size_t cap)
{
    if (strcmp(f->path[i], "/v3/auth/authenticate") == 0) {
        auths++;
        char b[128];
        snprintf(b, sizeof(b), "{" HDR ",\"token\":\"t%d\"}", auths);
        answer(out, cap, 200, b);
    } else if (strcmp(f->auth[i], "t2") != 0 || auths >= 100) {
        answer(out, cap, 401,
               "{\"error\":\"etcdserver: invalid auth token\",\"message\":"
               "\"etcdserver: invalid auth token\",\"code\":16}");
    } else {
        answer(out, cap, 200, "{" HDR "}");
    }
    return false;
}

static void test_invalid_token_is_renewed_once(void **state)
{
    auths = 0;
    fake *f = fake_new(auth_fn);
    fx_etcd_opts o = {.user = "felix", .password = "pw"};
    fx_etcd *e = client(f->url, NULL, &o);
    res r = {0};
    fx_etcd_op op = {.key = "foo"};
    assert_int_equal(fx_etcd_range(e, &op, on_res, &r), 0);
    wait_for(&r.done, 3000);
    assert_int_equal(r.rv, 0);
    /* authenticate, range (t1: 401), authenticate, range (t2) */
    assert_int_equal(f->n, 4);
    assert_string_equal(f->path[0], "/v3/auth/authenticate");
    assert_string_equal(f->body[0], "{\"name\":\"felix\",\"password\":\"pw\"}");
    assert_string_equal(f->auth[1], "t1");
    assert_string_equal(f->auth[3], "t2");
    for (int i = 0; i < f->n; i++)
        assert_true(f->hasleader[i]);
    fx_etcd_stats st;
    fx_etcd_get_stats(e, &st);
    assert_int_equal(st.auth, 2);
    /* A token refused again after a renewal is an answer, not a loop. */
    auths = 100;
    res r2 = {0};
    assert_int_equal(fx_etcd_range(e, &op, on_res, &r2), 0);
    wait_for(&r2.done, 3000);
    assert_int_equal(r2.rv, FX_EREMOTE);
    assert_int_equal(r2.grpc, 16);
    fx_etcd_free(e);
    fake_free(f);
}

static void test_options_are_checked(void **state)
{
    fx_etcd *e = NULL;
    const char *eps[1] = {"127.0.0.1:2379"};
    fx_etcd_opts o = {.endpoints = eps, .n_endpoints = 1};
    assert_int_equal(fx_etcd_new(&e, L, &o), FX_ECONFIG);
    o.n_endpoints = 0;
    assert_int_equal(fx_etcd_new(&e, L, &o), FX_ECONFIG);
    eps[0] = "https://127.0.0.1:2379/";
    o.n_endpoints = 1;
    o.user = "u";
    assert_int_equal(fx_etcd_new(&e, L, &o), FX_ECONFIG);
    o.password = "p";
    assert_int_equal(fx_etcd_new(&e, L, &o), 0);
    fx_etcd_free(e);
    fx_etcd_free(NULL);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_every_request_carries_hasleader_and_no_leader_fails_over,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_timeouts_retry_reads_but_not_writes, setup, teardown),
    cmocka_unit_test_setup_teardown(test_watch_resumes_after_the_last_revision, setup, teardown),
    cmocka_unit_test_setup_teardown(test_silent_watch_stream_moves_to_the_next_endpoint, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_invalid_token_is_renewed_once, setup, teardown),
    cmocka_unit_test_setup_teardown(test_options_are_checked, setup, teardown),
};

FX_TEST_MAIN(tests)
