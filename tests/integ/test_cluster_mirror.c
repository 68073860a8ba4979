/* The mirror (src/cluster/mirror.h, docs/cluster.md "Mirror") driven
 * directly, without etcd: the "owner" is a plain broker in this process,
 * and the mirror's ops are the test's sink (what would append to the local
 * stream records the batches, and can hold their completions as a blocked
 * worker does). The owner's offsets in order; the lossless profile (the
 * mirror stops reading while its appends wait, and loses nothing); the
 * shedding profile (drops counted, the next append jumps: a gap); the
 * linger after the last local subscriber; this node owning the stream; the
 * stop at fx_mirrors_free. The processes-and-etcd twin is
 * tests/integ/test_cluster.c. Timeouts are hang guards. */
/* fx-test-libs: fx_broker fx_client fx_server fx_cluster fx_quic fx_wire fx_base */
#include <pthread.h>
#include <time.h>

#include "cluster/mirror.h"
#include "felix/error.h"
#include "integ/fixture.h"

/* ---- the sink: the ops' side ------------------------------------------------------------ */

#define SINK_MAX 20000

typedef struct held {
    fx_mirror_done_cb done;
    void *user;
} held;

/* What the mirror handed over. Written by the mirror thread, read by the
 * test under |mu|. */
typedef struct sink {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t offsets[SINK_MAX];
    uint32_t payload[SINK_MAX]; /* the number each payload carries */
    size_t n;
    size_t appends;
    bool hold; /* completions wait (a worker parked on a full block queue) */
    held held[SINK_MAX];
    size_t nheld;
    int in_use;   /* what ops.in_use answers */
    int route_rv; /* what ops.route answers */
    char addr[64];
    int stopped;
    char why[256];
} sink;

static void sink_init(sink *k, const char *addr)
{
    memset(k, 0, sizeof(*k));
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, NULL);
    k->in_use = 1;
    snprintf(k->addr, sizeof(k->addr), "%s", addr);
}

static void sink_deinit(sink *k)
{
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->cv);
}

static int op_append(void *user, void *stream, uint64_t offset, const fx_forward_iov *msgs,
                     size_t n, fx_mirror_done_cb done, void *done_user)
{
    sink *k = user;
    assert_ptr_equal(stream, k);
    pthread_mutex_lock(&k->mu);
    for (size_t i = 0; i < n && k->n < SINK_MAX; i++) {
        char tmp[32] = "";
        memcpy(tmp, msgs[i].data, msgs[i].len < 31 ? msgs[i].len : 31);
        k->offsets[k->n] = offset + i;
        k->payload[k->n++] = (uint32_t)strtoul(tmp + 1, NULL, 10);
    }
    k->appends++;
    bool hold = k->hold;
    if (hold)
        k->held[k->nheld++] = (held){done, done_user};
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
    if (!hold)
        done(done_user, 0, 0);
    return 0;
}

static int op_in_use(void *user, void *stream, size_t appends)
{
    (void)stream;
    (void)appends;
    sink *k = user;
    pthread_mutex_lock(&k->mu);
    int v = k->in_use;
    pthread_mutex_unlock(&k->mu);
    return v;
}

static int op_route(void *user, const char *tenant, const char *ns, const char *stream,
                    char *addr, size_t cap)
{
    (void)tenant;
    (void)ns;
    (void)stream;
    sink *k = user;
    pthread_mutex_lock(&k->mu);
    int rv = k->route_rv;
    snprintf(addr, cap, "%s", k->addr);
    pthread_mutex_unlock(&k->mu);
    return rv;
}

static void op_stopped(void *user, void *stream, const char *why)
{
    sink *k = user;
    assert_ptr_equal(stream, k);
    pthread_mutex_lock(&k->mu);
    k->stopped++;
    snprintf(k->why, sizeof(k->why), "%s", why);
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
}

/* Lets the held completions run, and the later ones at once. */
static void sink_release(sink *k)
{
    pthread_mutex_lock(&k->mu);
    k->hold = false;
    size_t n = k->nheld;
    k->nheld = 0;
    held h[64];
    pthread_mutex_unlock(&k->mu);
    /* Completed outside the lock, as a worker does (the mirror may append
     * from inside its wait meanwhile). */
    for (size_t i = 0; i < n; i += 64) {
        size_t m = n - i < 64 ? n - i : 64;
        pthread_mutex_lock(&k->mu);
        memcpy(h, &k->held[i], m * sizeof(*h));
        pthread_mutex_unlock(&k->mu);
        for (size_t j = 0; j < m; j++)
            h[j].done(h[j].user, 0, 0);
    }
}

/* Waits until the sink holds |n| messages (the test fails after HANG_MS). */
static void sink_wait_n(sink *k, size_t n)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    pthread_mutex_lock(&k->mu);
    while (k->n < n) {
        if (fx_now_ns() > deadline) {
            size_t got = k->n;
            pthread_mutex_unlock(&k->mu);
            fail_msg("the mirror appended %zu messages, want %zu", got, n);
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&k->cv, &k->mu, &ts);
    }
    pthread_mutex_unlock(&k->mu);
}

static void sink_wait_stopped(sink *k)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    pthread_mutex_lock(&k->mu);
    while (k->stopped == 0) {
        if (fx_now_ns() > deadline) {
            pthread_mutex_unlock(&k->mu);
            fail_msg("the mirror never stopped");
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&k->cv, &k->mu, &ts);
    }
    pthread_mutex_unlock(&k->mu);
}

static size_t sink_n(sink *k)
{
    pthread_mutex_lock(&k->mu);
    size_t n = k->n;
    pthread_mutex_unlock(&k->mu);
    return n;
}

/* ---- the mirror and its owner ----------------------------------------------------------- */

static fx_mirrors *mirrors_new(fx_broker *owner, sink *k, bool lossless, size_t max_inflight,
                               uint32_t linger_ms)
{
    fx_mirror_opts o = {.pin_sha256 = fx_broker_fingerprint(owner),
                        .server_name = "localhost",
                        .ops = {.append = op_append,
                                .in_use = op_in_use,
                                .route = op_route,
                                .stopped = op_stopped,
                                .user = k},
                        .lossless = lossless,
                        .linger_ms = linger_ms,
                        .max_inflight_bytes = max_inflight,
                        .batch_messages = 16};
    fx_mirrors *m = NULL;
    assert_int_equal(fx_mirrors_new(&m, &o), 0);
    return m;
}

static void attach(fx_mirrors *m, sink *k, const char *stream, fx_mirror_start start)
{
    bool fresh = false;
    assert_int_equal(
        fx_mirror_attach(m, "t1", NS, stream, k->addr, "tok", start, 0, k, &fresh), 0);
    assert_true(fresh);
}

static fx_mirror_stats mstats(fx_mirrors *m)
{
    fx_mirror_stats st;
    fx_mirrors_get_stats(m, &st);
    return st;
}

/* Publishes "p<i>" for i in [from, to) to NS/|stream|, acked. */
static void publish_range(fx_client *c, const char *stream, uint32_t from, uint32_t to)
{
    for (uint32_t i = from; i < to; i++) {
        char p[32];
        int n = snprintf(p, sizeof(p), "p%u", i);
        int rv = fx_publish(c, NS, stream, p, (size_t)n, FX_ACK_PER_MESSAGE);
        if (rv != 0)
            fail_msg("publish %u: %s", i, fx_errname(rv));
    }
}

/* The mirror is subscribed upstream once the owner counts a subscription. */
static void wait_upstream(void)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    fx_metrics_snapshot s;
    for (;;) {
        fx_metrics_snapshot_take(&s);
        if (s.g.sub_subscriptions >= 1)
            return;
        if (fx_now_ns() > deadline)
            fail_msg("the mirror never subscribed at the owner");
        usleep(10000);
    }
}

/* The mirror counts a batch right after handing it over: waits for |n|. */
static void wait_messages(fx_mirrors *m, uint64_t n)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    while (mstats(m).messages < n) {
        if (fx_now_ns() > deadline)
            fail_msg("the mirror counted %llu messages, want %llu",
                     (unsigned long long)mstats(m).messages, (unsigned long long)n);
        usleep(1000);
    }
}

/* ---- cases ------------------------------------------------------------------------------ */

static void test_a_mirror_appends_the_owners_messages_in_order_with_the_owners_offsets(void **state)
{
    fix_env e;
    fix_env_init(&e, "mir");
    fix_env_start(&e);
    fx_client_opts co;
    fix_client_opts(&co, e.b, e.server, "t1", "tok");
    fx_client *c = fix_connect(&co);
    publish_range(c, "m1", 0, 5); /* before the mirror: taken from the start */
    sink k;
    sink_init(&k, e.server);
    fx_mirrors *m = mirrors_new(e.b, &k, false, 0, 0);
    attach(m, &k, "m1", FX_MIRROR_START_EARLIEST);
    /* A second attach joins the running mirror: one upstream per stream. */
    bool fresh = true;
    assert_int_equal(fx_mirror_attach(m, "t1", NS, "m1", e.server, "tok", FX_MIRROR_START_LATEST,
                                      0, NULL, &fresh),
                     0);
    assert_false(fresh);
    sink_wait_n(&k, 5);
    publish_range(c, "m1", 5, 40);
    sink_wait_n(&k, 40);
    for (size_t i = 0; i < 40; i++) {
        assert_int_equal(k.offsets[i], i);
        assert_int_equal(k.payload[i], i);
    }
    wait_messages(m, 40);
    fx_mirror_stats st = mstats(m);
    assert_int_equal(st.mirrors, 1);
    assert_int_equal(st.started, 1);
    assert_int_equal(st.messages, 40);
    assert_int_equal(st.gaps, 0);
    assert_int_equal(st.dropped, 0);
    char *json = fx_mirrors_json(m);
    assert_non_null(json);
    assert_non_null(strstr(json, "\"stream\":\"t1/default/m1\""));
    assert_non_null(strstr(json, "\"next_offset\":40"));
    free(json);
    fx_mirrors_free(m);
    assert_int_equal(k.stopped, 1);
    assert_string_equal(k.why, "the broker is stopping");
    sink_deinit(&k);
    fix_close(c);
    fix_env_deinit(&e);
}

typedef struct pub_arg {
    fx_client *c;
    uint32_t n;
    int rv;
} pub_arg;

static void *pub_main(void *arg)
{
    pub_arg *a = arg;
    for (uint32_t i = 0; i < a->n && a->rv == 0; i++) {
        char p[128];
        memset(p, 'x', sizeof(p));
        int n = snprintf(p, sizeof(p), "p%u", i);
        p[n] = ' ';
        a->rv = fx_publish(a->c, NS, "m2", p, sizeof(p), FX_ACK_NONE);
    }
    if (a->rv == 0)
        a->rv = fx_flush(a->c, HANG_MS);
    return NULL;
}

static void test_a_lossless_mirror_stops_reading_while_held_and_loses_nothing(void **state)
{
    fix_env e;
    fix_env_init(&e, "mir");
    fix_lossless(&e.bo);
    fix_env_start(&e);
    fx_client_opts co;
    fix_client_opts(&co, e.b, e.server, "t1", "tok");
    fx_client *c = fix_connect(&co);
    sink k;
    sink_init(&k, e.server);
    k.hold = true;
    enum { N = 12000, BOUND = 8192 };
    fx_mirrors *m = mirrors_new(e.b, &k, true, BOUND, 0);
    attach(m, &k, "m2", FX_MIRROR_START_LATEST);
    wait_upstream();
    pub_arg a = {.c = c, .n = N};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, pub_main, &a), 0);
    /* The appends wait: the mirror holds at most its bound (plus the batch
     * that found it full) and reads no more, so the owner's queues fill and
     * its publisher waits too. */
    usleep(1500 * 1000);
    size_t held_n = sink_n(&k);
    assert_true(held_n > 0);
    assert_true(held_n * 144 <= BOUND + 16 * 144); /* 128 B + 16 charged each */
    usleep(300 * 1000);
    assert_int_equal(sink_n(&k), held_n); /* nothing more while held */
    sink_release(&k);
    pthread_join(t, NULL);
    assert_int_equal(a.rv, 0);
    sink_wait_n(&k, N);
    for (size_t i = 0; i < N; i++) {
        if (k.offsets[i] != i || k.payload[i] != i)
            fail_msg("message %zu: offset %llu payload %u", i, (unsigned long long)k.offsets[i],
                     k.payload[i]);
    }
    wait_messages(m, N);
    fx_mirror_stats st = mstats(m);
    assert_int_equal(st.messages, N);
    assert_int_equal(st.dropped, 0);
    assert_int_equal(st.gaps, 0);
    fx_mirrors_free(m);
    sink_deinit(&k);
    fix_close(c);
    fix_env_deinit(&e);
}

static void test_a_shedding_mirror_counts_its_drops_and_its_next_append_jumps(void **state)
{
    fix_env e;
    fix_env_init(&e, "mir");
    fix_env_start(&e);
    fx_client_opts co;
    fix_client_opts(&co, e.b, e.server, "t1", "tok");
    fx_client *c = fix_connect(&co);
    sink k;
    sink_init(&k, e.server);
    k.hold = true;
    fx_mirrors *m = mirrors_new(e.b, &k, false, 256, 0);
    attach(m, &k, "m3", FX_MIRROR_START_LATEST);
    wait_upstream();
    publish_range(c, "m3", 0, 200);
    /* Until the mirror has settled: what it took and shed stops changing
     * (the owner's own queue may shed too under a slow sanitizer build). */
    uint64_t deadline = fix_deadline_ns(HANG_MS), last = UINT64_MAX;
    for (;;) {
        uint64_t now = mstats(m).dropped + sink_n(&k);
        if (now == last && now > 1)
            break;
        if (fx_now_ns() > deadline)
            fail_msg("the mirror took %zu and dropped %llu of 200", sink_n(&k),
                     (unsigned long long)mstats(m).dropped);
        last = now;
        usleep(300 * 1000);
    }
    fx_mirror_stats st = mstats(m);
    assert_true(st.dropped > 0);
    size_t before = sink_n(&k);
    sink_release(&k);
    publish_range(c, "m3", 200, 201);
    sink_wait_n(&k, before + 1);
    assert_int_equal(k.offsets[before], 200); /* the owner's offset, past the shed ones */
    uint64_t dl = fix_deadline_ns(HANG_MS);
    while (mstats(m).missed < 200 - before && fx_now_ns() < dl)
        usleep(1000);
    st = mstats(m);
    /* A small batch may still fit beside the held one (its bound is 256
     * bytes): then more than one jump. Together they cover every offset
     * not appended. */
    assert_true(st.gaps >= 1);
    assert_int_equal(st.missed, 200 - before);
    assert_true(st.dropped > 0 && st.dropped <= 200 - before);
    fx_mirrors_free(m);
    sink_deinit(&k);
    fix_close(c);
    fix_env_deinit(&e);
}

static void test_a_mirror_without_local_subscribers_stops_after_its_linger(void **state)
{
    fix_env e;
    fix_env_init(&e, "mir");
    fix_env_start(&e);
    sink k;
    sink_init(&k, e.server);
    fx_mirrors *m = mirrors_new(e.b, &k, false, 0, 300);
    attach(m, &k, "m4", FX_MIRROR_START_LATEST);
    wait_upstream();
    usleep(600 * 1000);
    assert_int_equal(k.stopped, 0); /* in use: it stays */
    uint64_t t0 = fx_now_ns();
    pthread_mutex_lock(&k.mu);
    k.in_use = 0;
    pthread_mutex_unlock(&k.mu);
    sink_wait_stopped(&k);
    uint64_t took_ms = (fx_now_ns() - t0) / FX_NS_PER_MS;
    assert_true(took_ms >= 300);
    assert_true(took_ms < 3000);
    assert_non_null(strstr(k.why, "no local subscriber for 300 ms"));
    assert_int_equal(mstats(m).mirrors, 0);
    /* A new subscriber makes a new mirror. */
    k.stopped = 0;
    k.in_use = 1;
    attach(m, &k, "m4", FX_MIRROR_START_LATEST);
    assert_int_equal(mstats(m).started, 2);
    fx_mirrors_free(m);
    assert_int_equal(k.stopped, 1);
    sink_deinit(&k);
    fix_env_deinit(&e);
}

static void test_a_mirror_of_a_stream_this_node_owns_now_stops_saying_why(void **state)
{
    fix_env e;
    fix_env_init(&e, "mir");
    fix_env_start(&e);
    sink k;
    sink_init(&k, e.server);
    k.route_rv = 1;
    fx_mirrors *m = mirrors_new(e.b, &k, false, 0, 0);
    attach(m, &k, "m5", FX_MIRROR_START_LATEST);
    sink_wait_stopped(&k);
    assert_non_null(strstr(k.why, "this node owns the stream now"));
    assert_int_equal(mstats(m).mirrors, 0);
    /* fx_mirror_stop: a running mirror stops with the caller's reason. */
    k.route_rv = 0;
    k.stopped = 0;
    attach(m, &k, "m5", FX_MIRROR_START_LATEST);
    wait_upstream();
    assert_true(fx_mirror_stop(m, "t1", NS, "m5", "claimed here"));
    assert_false(fx_mirror_stop(m, "t1", NS, "m5", "again"));
    sink_wait_stopped(&k);
    assert_string_equal(k.why, "claimed here");
    fx_mirrors_free(m);
    sink_deinit(&k);
    fix_env_deinit(&e);
}

static void test_the_mirror_bound_refuses_an_attach_past_max_mirrors(void **state)
{
    fix_env e;
    fix_env_init(&e, "mir");
    fix_env_start(&e);
    sink k;
    sink_init(&k, e.server);
    fx_mirror_opts o = {.pin_sha256 = fx_broker_fingerprint(e.b),
                        .server_name = "localhost",
                        .ops = {.append = op_append,
                                .in_use = op_in_use,
                                .route = op_route,
                                .stopped = op_stopped,
                                .user = &k},
                        .max_mirrors = 1};
    fx_mirrors *m = NULL;
    assert_int_equal(fx_mirrors_new(&m, &o), 0);
    attach(m, &k, "m6", FX_MIRROR_START_LATEST);
    bool fresh = true;
    assert_int_equal(fx_mirror_attach(m, "t1", NS, "m7", e.server, "tok", FX_MIRROR_START_LATEST,
                                      0, &k, &fresh),
                     FX_EFULL);
    assert_false(fresh);
    assert_int_equal(mstats(m).refused, 1);
    fx_mirrors_free(m);
    sink_deinit(&k);
    fix_env_deinit(&e);
}

/* Waits until the owner's gauge reads |n| subscriptions. */
static void wait_subs(int64_t n)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    fx_metrics_snapshot s;
    for (;;) {
        fx_metrics_snapshot_take(&s);
        if (s.g.sub_subscriptions == n)
            return;
        if (fx_now_ns() > deadline)
            fail_msg("the owner holds %lld subscriptions, want %lld",
                     (long long)s.g.sub_subscriptions, (long long)n);
        usleep(10000);
    }
}

static void test_an_upstream_that_ends_is_made_again_and_offsets_going_back_stop_it(void **state)
{
    fix_env e;
    fix_env_init(&e, "mir");
    fix_env_start(&e);
    fx_client_opts co;
    fix_client_opts(&co, e.b, e.server, "t1", "tok");
    fx_client *c = fix_connect(&co);
    publish_range(c, "m8", 0, 5);
    sink k;
    sink_init(&k, e.server);
    fx_mirrors *m = mirrors_new(e.b, &k, false, 0, 0);
    attach(m, &k, "m8", FX_MIRROR_START_EARLIEST);
    sink_wait_n(&k, 5);
    /* The owner deletes the stream: the upstream ends (FIN) and is made
     * again once the stream is back. */
    fx_registry_err err;
    assert_int_equal(fx_broker_delete_stream(e.b, "t1", NS, "m8", &err), 0);
    wait_subs(0);
    assert_int_equal(fx_broker_create_stream(e.b, "t1", NS, "m8", NULL, &err), 0);
    wait_subs(1);
    assert_int_equal(mstats(m).upstream_restarts, 1);
    assert_int_equal(k.stopped, 0);
    /* Made again at the same epoch, it numbers from 0: below what the
     * mirror appended, which its ring cannot take back. */
    publish_range(c, "m8", 0, 1);
    sink_wait_stopped(&k);
    assert_non_null(strstr(k.why, "the owner's offsets went back"));
    assert_int_equal(sink_n(&k), 5);
    fx_mirrors_free(m);
    sink_deinit(&k);
    fix_close(c);
    fix_env_deinit(&e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_a_mirror_appends_the_owners_messages_in_order_with_the_owners_offsets),
    cmocka_unit_test(test_a_lossless_mirror_stops_reading_while_held_and_loses_nothing),
    cmocka_unit_test(test_a_shedding_mirror_counts_its_drops_and_its_next_append_jumps),
    cmocka_unit_test(test_a_mirror_without_local_subscribers_stops_after_its_linger),
    cmocka_unit_test(test_a_mirror_of_a_stream_this_node_owns_now_stops_saying_why),
    cmocka_unit_test(test_the_mirror_bound_refuses_an_attach_past_max_mirrors),
    cmocka_unit_test(test_an_upstream_that_ends_is_made_again_and_offsets_going_back_stop_it),
};

FX_TEST_MAIN(tests)
