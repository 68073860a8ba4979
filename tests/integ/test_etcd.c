/* fx_etcd against a real single-member etcd (scripts/etcd.sh, one per case on
 * free loopback ports): KV, the claim txn raced by two clients, leases
 * (keepalive, revoke, expiry), watch order, watch after a compaction, an
 * endpoint list whose first entry is dead, the in-flight cap and auth. The
 * loop runs on the test thread: each case runs it until its answers came. */
/* fx-test-libs: fx_cluster fx_wire fx_base */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "base/loop.h"
#include "cluster/etcd.h"
#include "felix/error.h"
#include "fx_test.h"

typedef struct ctx {
    fx_loop *l;
    fx_etcd *e;
    char dir[128];
    char url[128];
    char script[512];
    fx_timer guard;
    bool guard_fired;
} ctx;

static ctx C;

/* ---- etcd ---------------------------------------------------------------- */

/* Starts an etcd for the case; with |tls| over https with client
 * certificates (scripts/etcd.sh certs makes them under DIR/tls). */
static int etcd_start(bool tls)
{
    const char *src = getenv("FX_SOURCE_DIR");
    if (src == NULL)
        fx_test_skip("FX_SOURCE_DIR is not set (run through ctest)");
    memset(&C, 0, sizeof(C));
    snprintf(C.script, sizeof(C.script), "%s/scripts/etcd.sh", src);
    snprintf(C.dir, sizeof(C.dir), "/tmp/fx-etcd-XXXXXX");
    if (mkdtemp(C.dir) == NULL)
        fail_msg("mkdtemp: %s", strerror(errno));
    char cmd[2048];
    if (tls) {
        if (system("command -v openssl >/dev/null") != 0)
            fx_test_skip("openssl is not installed (the TLS case makes its certificates with it)");
        snprintf(cmd, sizeof(cmd), "bash %s certs %s/tls 2>%s/err", C.script, C.dir, C.dir);
        if (system(cmd) != 0)
            fail_msg("etcd.sh certs failed (see %s/err)", C.dir);
        snprintf(cmd, sizeof(cmd), "FX_ETCD_TLS_DIR=%s/tls bash %s start %s >%s/url 2>%s/err",
                 C.dir, C.script, C.dir, C.dir, C.dir);
    } else {
        snprintf(cmd, sizeof(cmd), "bash %s start %s >%s/url 2>%s/err", C.script, C.dir, C.dir,
                 C.dir);
    }
    if (system(cmd) != 0) {
        char path[256], why[512] = "";
        snprintf(path, sizeof(path), "%s/err", C.dir);
        FILE *f = fopen(path, "r");
        if (f != NULL) {
            size_t n = fread(why, 1, sizeof(why) - 1, f);
            why[n] = '\0';
            fclose(f);
        }
        /* Not a skip: the tests need etcd, and scripts/deps.sh installs it. */
        fail_msg("etcd did not start: %s", why[0] ? why : "(no reason given)");
    }
    char path[256];
    snprintf(path, sizeof(path), "%s/endpoint", C.dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(C.url, sizeof(C.url), f));
    fclose(f);
    C.url[strcspn(C.url, "\n")] = '\0';
    fx_loop_opts lo = {.name = "etcd-test", .cpu = -1};
    assert_int_equal(fx_loop_new(&C.l, &lo), 0);
    return 0;
}

static int etcd_up(void **state)
{
    return etcd_start(false);
}

static int etcd_up_tls(void **state)
{
    return etcd_start(true);
}

static int etcd_down(void **state)
{
    if (C.e != NULL)
        fx_etcd_free(C.e);
    C.e = NULL;
    if (C.l != NULL) {
        fx_loop_timer_cancel(C.l, &C.guard);
        fx_loop_free(C.l);
    }
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "bash %s stop %s; rm -rf %s", C.script, C.dir, C.dir);
    if (C.dir[0] != '\0' && system(cmd) != 0)
        fprintf(stderr, "etcd.sh stop failed\n");
    return 0;
}

static fx_etcd *client(const char *const *eps, size_t n, const fx_etcd_opts *base)
{
    fx_etcd_opts o = base ? *base : (fx_etcd_opts){0};
    const char *one[1] = {C.url};
    o.endpoints = eps ? eps : one;
    o.n_endpoints = eps ? n : 1;
    fx_etcd *e = NULL;
    assert_int_equal(fx_etcd_new(&e, C.l, &o), 0);
    return e;
}

/* A blocking POST for what the client does not do (compaction, auth setup). */
static long http_post(const char *path, const char *body)
{
    CURL *h = curl_easy_init();
    char url[256];
    snprintf(url, sizeof(url), "%s%s", C.url, path);
    FILE *sink = fopen("/dev/null", "w");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, sink);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    long status = 0;
    CURLcode cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    fclose(sink);
    return cc == CURLE_OK ? status : -1;
}

/* ---- running the loop ---------------------------------------------------- */

static void on_guard(fx_loop *l, fx_timer *t, void *user)
{
    C.guard_fired = true;
    fx_loop_stop(l);
}

/* Runs the loop until |*flag| or |ms| passed; fails the case on the latter. */
static void wait_for(const bool *flag, uint64_t ms, const char *what)
{
    C.guard_fired = false;
    fx_timer_init(&C.guard, on_guard, NULL);
    assert_int_equal(fx_loop_timer_arm(C.l, &C.guard, fx_now_ns() + ms * FX_NS_PER_MS), 0);
    while (!*flag && !C.guard_fired)
        assert_int_equal(fx_loop_run(C.l), 0);
    fx_loop_timer_cancel(C.l, &C.guard);
    if (!*flag)
        fail_msg("no answer for %s within %llu ms", what, (unsigned long long)ms);
}

/* Sleeps |ms| with the loop running. */
static void run_for(uint64_t ms)
{
    bool never = false;
    C.guard_fired = false;
    fx_timer_init(&C.guard, on_guard, NULL);
    assert_int_equal(fx_loop_timer_arm(C.l, &C.guard, fx_now_ns() + ms * FX_NS_PER_MS), 0);
    while (!never && !C.guard_fired)
        assert_int_equal(fx_loop_run(C.l), 0);
}

/* What a case keeps of an answer. */
typedef struct res {
    bool done;
    int rv;
    int grpc;
    int64_t rev, count, deleted, lease_id, ttl;
    bool succeeded, lease_lost;
    size_t n_kvs, n_ops;
    char value[256];
    int64_t kv_lease, kv_version, kv_create;
} res;

static void on_res(fx_etcd *e, const fx_etcd_resp *r, void *user)
{
    res *o = user;
    memset(o, 0, sizeof(*o));
    o->done = true;
    o->rv = r->rv;
    o->grpc = r->grpc_code;
    o->rev = r->revision;
    o->count = r->count;
    o->deleted = r->deleted;
    o->lease_id = r->lease_id;
    o->ttl = r->ttl;
    o->succeeded = r->succeeded;
    o->lease_lost = r->lease_lost;
    o->n_kvs = r->n_kvs;
    o->n_ops = r->n_ops;
    const fx_etcd_kv *kv = r->n_kvs ? &r->kvs[0] : NULL;
    if (r->n_ops > 0 && r->ops[r->n_ops - 1].n_kvs > 0)
        kv = &r->ops[r->n_ops - 1].kvs[0];
    if (kv != NULL) {
        snprintf(o->value, sizeof(o->value), "%s", (const char *)kv->value);
        o->kv_lease = kv->lease;
        o->kv_version = kv->version;
        o->kv_create = kv->create_revision;
    }
    fx_loop_stop(C.l);
}

static res do_op(fx_etcd *e, fx_etcd_kind k, const fx_etcd_op *op)
{
    res r = {0};
    int rv = k == FX_ETCD_KIND_RANGE ? fx_etcd_range(e, op, on_res, &r)
             : k == FX_ETCD_KIND_PUT ? fx_etcd_put(e, op, on_res, &r)
                                     : fx_etcd_delete(e, op, on_res, &r);
    assert_int_equal(rv, 0);
    wait_for(&r.done, 5000, "a KV request");
    return r;
}

static res get(fx_etcd *e, const char *key)
{
    fx_etcd_op op = {.key = key};
    return do_op(e, FX_ETCD_KIND_RANGE, &op);
}

static res put(fx_etcd *e, const char *key, const char *value, int64_t lease)
{
    fx_etcd_op op = {.key = key, .value = value, .lease = lease};
    return do_op(e, FX_ETCD_KIND_PUT, &op);
}

static res lease(fx_etcd *e, int which, int64_t a)
{
    res r = {0};
    int rv = which == 0   ? fx_etcd_lease_grant(e, a, 0, on_res, &r)
             : which == 1 ? fx_etcd_lease_keepalive(e, a, on_res, &r)
             : which == 2 ? fx_etcd_lease_revoke(e, a, on_res, &r)
                          : fx_etcd_lease_timetolive(e, a, true, on_res, &r);
    assert_int_equal(rv, 0);
    wait_for(&r.done, 5000, "a lease request");
    return r;
}

/* ---- cases --------------------------------------------------------------- */

static void test_put_range_delete(void **state)
{
    C.e = client(NULL, 0, NULL);
    res r = put(C.e, "/t/a", "bar", 0);
    assert_int_equal(r.rv, 0);
    assert_true(r.rev > 0);
    r = get(C.e, "/t/a");
    assert_int_equal(r.rv, 0);
    assert_int_equal(r.count, 1);
    assert_string_equal(r.value, "bar");
    assert_int_equal(r.kv_version, 1);
    assert_int_equal(put(C.e, "/t/b", "", 0).rv, 0); /* the empty value: no "value" field */
    assert_int_equal(put(C.e, "/t/c", "x", 0).rv, 0);
    r = get(C.e, "/t/b");
    assert_int_equal(r.n_kvs, 1);
    assert_string_equal(r.value, "");
    fx_etcd_op pre = {.key = "/t/", .prefix = true, .keys_only = true};
    r = do_op(C.e, FX_ETCD_KIND_RANGE, &pre);
    assert_int_equal(r.count, 3);
    pre.limit = 1;
    r = do_op(C.e, FX_ETCD_KIND_RANGE, &pre);
    assert_int_equal(r.n_kvs, 1);
    fx_etcd_op del = {.key = "/t/", .prefix = true};
    r = do_op(C.e, FX_ETCD_KIND_DELETE, &del);
    assert_int_equal(r.rv, 0);
    assert_int_equal(r.deleted, 3);
    r = get(C.e, "/t/a");
    assert_int_equal(r.rv, 0);
    assert_int_equal(r.n_kvs, 0);
    assert_int_equal(r.count, 0);
    /* A put under a lease that does not exist: 404, code 5. */
    r = put(C.e, "/t/x", "y", 424242);
    assert_int_equal(r.rv, FX_EREMOTE);
    assert_int_equal(r.grpc, 5);
    fx_etcd_stats st;
    fx_etcd_get_stats(C.e, &st);
    assert_int_equal(st.err_remote, 1);
    assert_true(st.ok >= 9);
    assert_true(st.latency_count >= 10);
}

/* The claim of design 8.1: owner key created only if absent, under the
 * claimer's lease, the epoch key bumped and read in the same txn. */
static int claim(fx_etcd *e, const char *ow, const char *ep, const char *me, int64_t lease_id,
                 res *out)
{
    fx_etcd_cmp cmp = {.key = ow, .target = FX_ETCD_CMP_CREATE, .number = 0};
    fx_etcd_op ok[3] = {
        {.kind = FX_ETCD_PUT, .key = ow, .value = me, .lease = lease_id},
        {.kind = FX_ETCD_PUT, .key = ep},
        {.kind = FX_ETCD_RANGE, .key = ep},
    };
    fx_etcd_op no = {.kind = FX_ETCD_RANGE, .key = ow};
    fx_etcd_txn_req t = {.cmp = &cmp, .n_cmp = 1, .success = ok, .n_success = 3, .failure = &no,
                         .n_failure = 1};
    return fx_etcd_txn(e, &t, on_res, out);
}

static void test_claim_txn_has_exactly_one_winner(void **state)
{
    fx_etcd *a = client(NULL, 0, NULL);
    fx_etcd *b = client(NULL, 0, NULL);
    int64_t la = lease(a, 0, 10).lease_id, lb = lease(b, 0, 10).lease_id;
    assert_true(la != 0 && lb != 0 && la != lb);
    for (int round = 0; round < 10; round++) {
        char ow[64], ep[64];
        snprintf(ow, sizeof(ow), "/felix/c1/owners/t1/default/s%d", round);
        snprintf(ep, sizeof(ep), "/felix/c1/epochs/t1/default/s%d", round);
        res ra = {0}, rb = {0};
        /* Both submitted before either can be answered: they race in etcd. */
        if (round % 2 == 0) {
            assert_int_equal(claim(a, ow, ep, "n1", la, &ra), 0);
            assert_int_equal(claim(b, ow, ep, "n2", lb, &rb), 0);
        } else {
            assert_int_equal(claim(b, ow, ep, "n2", lb, &rb), 0);
            assert_int_equal(claim(a, ow, ep, "n1", la, &ra), 0);
        }
        wait_for(&ra.done, 5000, "claim a");
        wait_for(&rb.done, 5000, "claim b");
        assert_int_equal(ra.rv, 0);
        assert_int_equal(rb.rv, 0);
        assert_true(ra.succeeded != rb.succeeded);
        res *win = ra.succeeded ? &ra : &rb, *lose = ra.succeeded ? &rb : &ra;
        assert_int_equal(win->n_ops, 3);
        assert_int_equal(win->kv_version, 1); /* the epoch */
        /* The loser reads the winner's claim: its lease and its create
         * revision, which is the winner's txn revision (the fencing token). */
        assert_int_equal(lose->n_ops, 1);
        assert_int_equal(lose->kv_lease, ra.succeeded ? la : lb);
        assert_int_equal(lose->kv_create, win->rev);
        assert_string_equal(lose->value, ra.succeeded ? "n1" : "n2");
    }
    /* The owner's lease goes: its claims vanish, the other claims anew and
     * the epoch rises. */
    res s0 = {0};
    fx_etcd_op q = {.key = "/felix/c1/owners/t1/default/s0"};
    assert_int_equal(fx_etcd_range(a, &q, on_res, &s0), 0);
    wait_for(&s0.done, 5000, "owner");
    int64_t owner = s0.kv_lease;
    assert_int_equal(lease(a, 2, owner).rv, 0);
    res again = {0};
    int64_t other = owner == la ? lb : la;
    assert_int_equal(claim(owner == la ? b : a, "/felix/c1/owners/t1/default/s0",
                           "/felix/c1/epochs/t1/default/s0", "n3", other, &again),
                     0);
    wait_for(&again.done, 5000, "reclaim");
    assert_true(again.succeeded);
    assert_int_equal(again.kv_version, 2);
    fx_etcd_free(a);
    fx_etcd_free(b);
}

static void test_lease_keepalive_revoke_and_expiry(void **state)
{
    C.e = client(NULL, 0, NULL);
    /* 1 s is raised to etcd's floor, 2 s. */
    res g = lease(C.e, 0, 1);
    assert_int_equal(g.rv, 0);
    assert_int_equal(g.ttl, 2);
    int64_t id = g.lease_id;
    assert_int_equal(put(C.e, "/l/kept", "v", id).rv, 0);
    /* Kept alive for twice its TTL: the key stays. */
    for (int i = 0; i < 8; i++) {
        res k = lease(C.e, 1, id);
        assert_int_equal(k.rv, 0);
        assert_false(k.lease_lost);
        assert_int_equal(k.ttl, 2);
        run_for(500);
    }
    assert_int_equal(get(C.e, "/l/kept").n_kvs, 1);
    res t = lease(C.e, 3, id);
    assert_int_equal(t.rv, 0);
    assert_false(t.lease_lost);
    assert_true(t.ttl >= 1);
    /* Revoked: the key goes at once, and a keepalive says the lease is lost
     * (HTTP 200 without a TTL). */
    assert_int_equal(lease(C.e, 2, id).rv, 0);
    assert_int_equal(get(C.e, "/l/kept").n_kvs, 0);
    res k = lease(C.e, 1, id);
    assert_int_equal(k.rv, 0);
    assert_true(k.lease_lost);
    /* A lease left alone expires after TTL + up to 0.5 s; its key with it. */
    res g2 = lease(C.e, 0, 2);
    assert_int_equal(put(C.e, "/l/left", "v", g2.lease_id).rv, 0);
    uint64_t t0 = fx_now_ns();
    while (get(C.e, "/l/left").n_kvs == 1) {
        assert_true(fx_now_ns() - t0 < 5 * FX_NS_PER_S);
        run_for(100);
    }
    uint64_t gone_ms = (fx_now_ns() - t0) / FX_NS_PER_MS;
    assert_true(gone_ms >= 1500);
    assert_true(lease(C.e, 3, g2.lease_id).lease_lost);
    assert_true(lease(C.e, 1, g2.lease_id).lease_lost);
    fx_etcd_stats st;
    fx_etcd_get_stats(C.e, &st);
    assert_int_equal(st.leases_lost, 2);
}

/* Watch events gathered by a case. */
typedef struct wlog {
    char text[2048];
    size_t events;
    int64_t last_rev;
    bool ordered;
    int64_t compacted;
    int restarts;
    size_t want;
    bool done;
} wlog;

static void on_events(fx_etcd_watch *w, int64_t rev, const fx_etcd_event *ev, size_t n,
                      void *user)
{
    wlog *g = user;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(g->text);
        snprintf(g->text + len, sizeof(g->text) - len, "%s %s=%s;", ev[i].is_delete ? "D" : "P",
                 (const char *)ev[i].kv.key, (const char *)ev[i].kv.value);
        if (ev[i].kv.mod_revision <= g->last_rev)
            g->ordered = false;
        g->last_rev = ev[i].kv.mod_revision;
        g->events++;
    }
    if (g->events >= g->want) {
        g->done = true;
        fx_loop_stop(C.l);
    }
}

static void on_compacted(fx_etcd_watch *w, int64_t rev, void *user)
{
    wlog *g = user;
    g->compacted = rev;
}

static void on_restart(fx_etcd_watch *w, int rv, const char *msg, void *user)
{
    wlog *g = user;
    g->restarts++;
}

static const fx_etcd_watch_cbs wcbs = {on_events, on_compacted, on_restart};

static void test_watch_sees_puts_and_deletes_in_order(void **state)
{
    C.e = client(NULL, 0, NULL);
    assert_int_equal(put(C.e, "/w/old", "0", 0).rv, 0);
    res listing = get(C.e, "/w/old");
    wlog g = {.ordered = true, .want = 5};
    fx_etcd_watch_opts o = {.key = "/w/", .prefix = true, .start_revision = listing.rev + 1};
    fx_etcd_watch *w = NULL;
    assert_int_equal(fx_etcd_watch_start(C.e, &o, &wcbs, &g, &w), 0);
    assert_int_equal(put(C.e, "/w/a", "1", 0).rv, 0);
    assert_int_equal(put(C.e, "/w/b", "2", 0).rv, 0);
    fx_etcd_op del = {.key = "/w/a"};
    assert_int_equal(do_op(C.e, FX_ETCD_KIND_DELETE, &del).rv, 0);
    assert_int_equal(put(C.e, "/w/b", "3", 0).rv, 0);
    res last = put(C.e, "/w/old", "4", 0);
    wait_for(&g.done, 5000, "five watch events");
    assert_string_equal(g.text, "P /w/a=1;P /w/b=2;D /w/a=;P /w/b=3;P /w/old=4;");
    assert_true(g.ordered);
    assert_int_equal(g.last_rev, last.rev);
    assert_int_equal(fx_etcd_watch_next_revision(w), last.rev + 1);
    assert_int_equal(g.restarts, 0);
    fx_etcd_watch_stop(w);
    run_for(50);
    fx_etcd_stats st;
    fx_etcd_get_stats(C.e, &st);
    assert_int_equal(st.watch_events, 5);
    assert_int_equal(st.requests[FX_ETCD_KIND_WATCH], 1);
    assert_int_equal(st.requests[FX_ETCD_KIND_PUT], 5);
}

static void test_watch_after_compaction_reports_and_restarts(void **state)
{
    C.e = client(NULL, 0, NULL);
    int64_t first = put(C.e, "/c/k", "1", 0).rev;
    for (int i = 2; i <= 5; i++)
        assert_int_equal(put(C.e, "/c/k", "x", 0).rv, 0);
    int64_t top = put(C.e, "/c/k", "6", 0).rev;
    char body[64];
    snprintf(body, sizeof(body), "{\"revision\":\"%lld\",\"physical\":true}", (long long)top);
    assert_int_equal(http_post("/v3/kv/compaction", body), 200);
    /* A range below the compaction: 400, code 11. */
    fx_etcd_op old = {.key = "/c/k", .revision = first};
    res r = do_op(C.e, FX_ETCD_KIND_RANGE, &old);
    assert_int_equal(r.rv, FX_EREMOTE);
    assert_int_equal(r.grpc, 11);
    /* A watch from before it: told, then going on from the compacted
     * revision (whose put it delivers), then new events. */
    wlog g = {.ordered = true, .want = 1};
    fx_etcd_watch_opts o = {.key = "/c/", .prefix = true, .start_revision = first};
    fx_etcd_watch *w = NULL;
    assert_int_equal(fx_etcd_watch_start(C.e, &o, &wcbs, &g, &w), 0);
    wait_for(&g.done, 5000, "the event at the compacted revision");
    assert_int_equal(g.compacted, top);
    assert_string_equal(g.text, "P /c/k=6;");
    g.want = 2;
    g.done = false;
    assert_int_equal(put(C.e, "/c/k", "7", 0).rv, 0);
    wait_for(&g.done, 5000, "an event after the restart");
    assert_string_equal(g.text, "P /c/k=6;P /c/k=7;");
    fx_etcd_stats st;
    fx_etcd_get_stats(C.e, &st);
    assert_int_equal(st.watch_compactions, 1);
    assert_int_equal(st.watch_restarts, 1);
    fx_etcd_watch_stop(w);
    run_for(50);
}

/* A loopback port nothing listens on. */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void test_dead_first_endpoint_still_works(void **state)
{
    char dead[64];
    snprintf(dead, sizeof(dead), "http://127.0.0.1:%d", dead_port());
    const char *eps[2] = {dead, C.url};
    C.e = client(eps, 2, NULL);
    res r = put(C.e, "/d/k", "v", 0);
    assert_int_equal(r.rv, 0);
    assert_string_equal(get(C.e, "/d/k").value, "v");
    wlog g = {.ordered = true, .want = 1};
    fx_etcd_watch_opts o = {.key = "/d/k", .start_revision = r.rev};
    fx_etcd_watch *w = NULL;
    assert_int_equal(fx_etcd_watch_start(C.e, &o, &wcbs, &g, &w), 0);
    wait_for(&g.done, 5000, "a watch event");
    fx_etcd_stats st;
    fx_etcd_get_stats(C.e, &st);
    assert_int_equal(st.failovers, 1);
    assert_int_equal(st.err_connect, 1);
    assert_int_equal(st.retries, 1);
    fx_etcd_watch_stop(w);
    run_for(50);
    fx_etcd_free(C.e);
    /* Only dead endpoints: "not connected", after trying each once. */
    const char *none[2] = {dead, dead};
    C.e = client(none, 2, NULL);
    r = get(C.e, "/d/k");
    assert_int_equal(r.rv, FX_ENOTCONN);
}

static void test_in_flight_cap_refuses_and_counts(void **state)
{
    fx_etcd_opts o = {.max_in_flight = 2};
    C.e = client(NULL, 0, &o);
    res a = {0}, b = {0}, c = {0};
    fx_etcd_op op = {.key = "/cap"};
    assert_int_equal(fx_etcd_range(C.e, &op, on_res, &a), 0);
    assert_int_equal(fx_etcd_range(C.e, &op, on_res, &b), 0);
    assert_int_equal(fx_etcd_range(C.e, &op, on_res, &c), FX_EFULL);
    wait_for(&a.done, 5000, "a");
    wait_for(&b.done, 5000, "b");
    assert_false(c.done);
    assert_int_equal(fx_etcd_range(C.e, &op, on_res, &c), 0);
    wait_for(&c.done, 5000, "c");
    fx_etcd_stats st;
    fx_etcd_get_stats(C.e, &st);
    assert_int_equal(st.refused_full, 1);
    /* An answer over max_response_bytes is refused, counted. */
    fx_etcd_free(C.e);
    fx_etcd_opts small = {.max_response_bytes = 256};
    C.e = client(NULL, 0, &small);
    char v[301];
    memset(v, 'v', 300);
    v[300] = '\0';
    res big = put(C.e, "/cap/big", v, 0); /* the answer is only a header */
    assert_int_equal(big.rv, 0);
    big = get(C.e, "/cap/big");
    assert_int_equal(big.rv, FX_ETOOBIG);
    fx_etcd_get_stats(C.e, &st);
    assert_int_equal(st.err_too_big, 1);
}

static void test_auth_token_is_fetched_and_used(void **state)
{
    assert_int_equal(http_post("/v3/auth/user/add", "{\"name\":\"root\",\"password\":\"rootpw\"}"),
                     200);
    assert_int_equal(http_post("/v3/auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}"), 200);
    assert_int_equal(http_post("/v3/auth/enable", "{}"), 200);
    /* Without a user: refused. */
    C.e = client(NULL, 0, NULL);
    res r = put(C.e, "/a/k", "v", 0);
    assert_int_equal(r.rv, FX_EREMOTE);
    fx_etcd_free(C.e);
    fx_etcd_opts bad = {.user = "root", .password = "nope"};
    C.e = client(NULL, 0, &bad);
    r = put(C.e, "/a/k", "v", 0);
    assert_int_equal(r.rv, FX_EAUTH);
    fx_etcd_free(C.e);
    fx_etcd_opts o = {.user = "root", .password = "rootpw"};
    C.e = client(NULL, 0, &o);
    r = put(C.e, "/a/k", "v", 0);
    assert_int_equal(r.rv, 0);
    assert_string_equal(get(C.e, "/a/k").value, "v");
    wlog g = {.ordered = true, .want = 1};
    fx_etcd_watch_opts wo = {.key = "/a/k", .start_revision = r.rev};
    fx_etcd_watch *w = NULL;
    assert_int_equal(fx_etcd_watch_start(C.e, &wo, &wcbs, &g, &w), 0);
    wait_for(&g.done, 5000, "a watch event with a token");
    fx_etcd_stats st;
    fx_etcd_get_stats(C.e, &st);
    assert_int_equal(st.auth, 1);
    fx_etcd_watch_stop(w);
    run_for(50);
}

static void etcd_cmd(const char *what)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "bash %s %s %s >/dev/null 2>%s/err", C.script, what, C.dir, C.dir);
    if (system(cmd) != 0)
        fail_msg("etcd.sh %s failed (see %s/err)", what, C.dir);
}

/* etcd goes away and comes back (same member, same data): requests fail
 * meanwhile with "not connected", the watch says its stream ended, keeps
 * trying, and goes on after the last revision it delivered: nothing lost,
 * nothing twice. */
static void test_watch_and_requests_survive_an_etcd_restart(void **state)
{
    C.e = client(NULL, 0, NULL);
    res r = put(C.e, "/r/a", "1", 0);
    assert_int_equal(r.rv, 0);
    wlog g = {.ordered = true, .want = 1};
    fx_etcd_watch_opts o = {.key = "/r/", .prefix = true, .start_revision = r.rev};
    fx_etcd_watch *w = NULL;
    assert_int_equal(fx_etcd_watch_start(C.e, &o, &wcbs, &g, &w), 0);
    wait_for(&g.done, 5000, "the first event");
    etcd_cmd("halt");
    res down = get(C.e, "/r/a");
    assert_int_equal(down.rv, FX_ENOTCONN);
    run_for(300); /* the watch notices and retries with a backoff */
    assert_true(g.restarts >= 1);
    etcd_cmd("start");
    g.want = 2;
    g.done = false;
    /* The watch may still be in its backoff: the put must not race it out. */
    res b = {0};
    uint64_t t0 = fx_now_ns();
    do {
        b = put(C.e, "/r/b", "2", 0);
        if (b.rv != 0)
            run_for(200);
    } while (b.rv != 0 && fx_now_ns() - t0 < 10 * FX_NS_PER_S);
    assert_int_equal(b.rv, 0);
    wait_for(&g.done, 10000, "an event after the restart");
    assert_string_equal(g.text, "P /r/a=1;P /r/b=2;");
    assert_true(g.ordered);
    assert_string_equal(get(C.e, "/r/a").value, "1");
    fx_etcd_stats st;
    fx_etcd_get_stats(C.e, &st);
    assert_true(st.watch_restarts >= 1);
    assert_true(st.err_connect >= 1);
    fx_etcd_watch_stop(w);
    run_for(50);
}

static void test_tls_with_client_certificates(void **state)
{
    char ca[256], cert[256], key[256];
    snprintf(ca, sizeof(ca), "%s/tls/ca.pem", C.dir);
    snprintf(cert, sizeof(cert), "%s/tls/client.pem", C.dir);
    snprintf(key, sizeof(key), "%s/tls/client.key", C.dir);
    fx_etcd_opts o = {.ca_file = ca, .cert_file = cert, .key_file = key};
    C.e = client(NULL, 0, &o);
    res r = put(C.e, "/tls/k", "v", 0);
    if (r.rv != 0)
        fail_msg("put over TLS: %s", fx_strerror(r.rv));
    assert_string_equal(get(C.e, "/tls/k").value, "v");
    wlog g = {.ordered = true, .want = 1};
    fx_etcd_watch_opts wo = {.key = "/tls/k", .start_revision = r.rev};
    fx_etcd_watch *w = NULL;
    assert_int_equal(fx_etcd_watch_start(C.e, &wo, &wcbs, &g, &w), 0);
    wait_for(&g.done, 5000, "a watch event over TLS");
    fx_etcd_watch_stop(w);
    run_for(50);
    fx_etcd_free(C.e);
    /* Without a client certificate etcd refuses the handshake; with no CA the
     * server's certificate is not trusted. Both are TLS errors, counted. The
     * system's CA directory is slow to load under the sanitizers on a busy
     * machine: generous deadlines, as the point is the refusal. */
    fx_etcd_opts nocert = {.ca_file = ca, .timeout_ms = 15000, .connect_timeout_ms = 15000};
    C.e = client(NULL, 0, &nocert);
    r = get(C.e, "/tls/k");
    if (r.rv != FX_ETLS && r.rv != FX_ECONNLOST)
        fail_msg("no client certificate: %s", fx_strerror(r.rv));
    fx_etcd_free(C.e);
    fx_etcd_opts noca = {.cert_file = cert, .key_file = key, .timeout_ms = 15000,
                         .connect_timeout_ms = 15000};
    C.e = client(NULL, 0, &noca);
    r = get(C.e, "/tls/k");
    assert_int_equal(r.rv, FX_ETLS);
    fx_etcd_stats st;
    fx_etcd_get_stats(C.e, &st);
    assert_int_equal(st.err_tls, 1);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_put_range_delete, etcd_up, etcd_down),
    cmocka_unit_test_setup_teardown(test_claim_txn_has_exactly_one_winner, etcd_up, etcd_down),
    cmocka_unit_test_setup_teardown(test_lease_keepalive_revoke_and_expiry, etcd_up, etcd_down),
    cmocka_unit_test_setup_teardown(test_watch_sees_puts_and_deletes_in_order, etcd_up, etcd_down),
    cmocka_unit_test_setup_teardown(test_watch_after_compaction_reports_and_restarts, etcd_up,
                                    etcd_down),
    cmocka_unit_test_setup_teardown(test_dead_first_endpoint_still_works, etcd_up, etcd_down),
    cmocka_unit_test_setup_teardown(test_in_flight_cap_refuses_and_counts, etcd_up, etcd_down),
    cmocka_unit_test_setup_teardown(test_auth_token_is_fetched_and_used, etcd_up, etcd_down),
    cmocka_unit_test_setup_teardown(test_watch_and_requests_survive_an_etcd_restart, etcd_up,
                                    etcd_down),
    cmocka_unit_test_setup_teardown(test_tls_with_client_certificates, etcd_up_tls, etcd_down),
};

FX_TEST_MAIN(tests)
