/* Reconnect tests of libfelix against a real broker in this process on
 * 127.0.0.1 port 0: the broker cuts a client's connection (its test hook),
 * the client re-establishes it with backoff and resumes each subscription
 * after the last offset it took, or reports the gap when the ring moved on;
 * publishes in flight fail with the reason, and one left unanswered fails at
 * the ack timeout; close stops a reconnect; an event stream that arrives for
 * an abandoned subscription is reset. Client internals (client/client.h) are
 * read for counters and to reach the client's loop, and two tests change a
 * timeout option after connecting; timeouts are hang guards, never speed
 * assertions. */
/* fx-test-libs: fx_broker fx_client fx_quic fx_wire fx_base */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HANG_MS 10000 /* before fixture.h: its hang guard */

#include "broker/test_hooks.h"
#include "client/client.h"
#include "client/test_hooks.h"
#include "integ/fixture.h"

/* ---- broker ------------------------------------------------------------------ */

typedef fix_env E;

static E *e_new(void)
{
    E *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    fix_env_init(e, "rc");
    e->bo.ack_on_commit = true; /* an answered publish is in the ring */
    return e;
}

static void e_start(E *e)
{
    fix_env_start(e);
}

static void e_free(E *e)
{
    fix_env_deinit(e);
    free(e);
}

/* ---- clients ----------------------------------------------------------------- */

static void copts(E *e, fx_client_opts *o, int reconnect_ms)
{
    fix_client_opts(o, e->b, e->server, "t1", "any-token");
    o->reconnect_initial_ms = reconnect_ms;
    o->sub_queue_policy = FX_POLICY_BLOCK; /* nothing is shed in the client */
}

static fx_client *e_client(E *e, int reconnect_ms)
{
    fx_client_opts o;
    copts(e, &o, reconnect_ms);
    return fix_connect(&o);
}

static fx_subscription *sub_latest(fx_client *c, const char *stream)
{
    return fix_subscribe(c, stream, NULL);
}

/* Payload of offset |off|: its decimal text, so order and content are checked. */
static void publish_range(fx_client *c, const char *stream, uint64_t first, uint64_t n)
{
    for (uint64_t i = first; i < first + n; i++) {
        char p[32];
        int len = snprintf(p, sizeof(p), "m%llu", (unsigned long long)i);
        int rv = fx_publish(c, NS, stream, p, (size_t)len, FX_ACK_PER_MESSAGE);
        if (rv != 0)
            fail_msg("publish %llu: %s", (unsigned long long)i, fx_errname(rv));
    }
}

/* Takes |n| events and checks they are offsets [first, first + n), intact;
 * the first one's gap flag and count go to |*gap| (0 when none). */
static void expect_events(fx_subscription *s, uint64_t first, uint64_t n, uint64_t *gap)
{
    *gap = 0;
    for (uint64_t i = 0; i < n; i++) {
        fx_event ev;
        int rv = fx_subscription_next(s, &ev, HANG_MS);
        if (rv != 0)
            fail_msg("event %llu: %s", (unsigned long long)(first + i), fx_errname(rv));
        assert_true(ev.has_offset);
        assert_int_equal(ev.offset, first + i);
        char want[32];
        int len = snprintf(want, sizeof(want), "m%llu", (unsigned long long)ev.offset);
        assert_int_equal(ev.len, (size_t)len);
        assert_memory_equal(ev.payload, want, (size_t)len);
        if (i == 0 && (ev.flags & FX_EVENT_GAP))
            *gap = ev.gap;
        else
            assert_int_equal(ev.flags & FX_EVENT_GAP, 0);
    }
}

/* Waits until |c| re-established |n| connections in all. */
static void wait_reconnects(fx_client *c, uint64_t n)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    while (atomic_load(&c->reconnects) < n) {
        if (fx_now_ns() > deadline)
            fail_msg("client reconnected %llu times, want %llu",
                     (unsigned long long)atomic_load(&c->reconnects), (unsigned long long)n);
        sleep_ms(5);
    }
}

/* Waits until the broker admitted |n| publish requests since |before|
 * (handed them to their worker). */
static void wait_accepted(const fx_metrics_snapshot *before, int64_t n)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    for (;;) {
        fx_metrics_snapshot now;
        fx_metrics_snapshot_take(&now);
        if (DELTA(*before, now, publish_accepted) >= n)
            return;
        if (fx_now_ns() > deadline)
            fail_msg("broker admitted %lld publishes, want %lld",
                     (long long)DELTA(*before, now, publish_accepted), (long long)n);
        sleep_ms(1);
    }
}

/* ---- loop helpers (run a function on a loop) ------------------------------------------ */

/* Blocks the broker's worker 0 for |ms| (a slow worker: requests queue). */
static void stall_worker(E *e, unsigned ms)
{
    assert_int_equal(fx_broker_test_stall_worker(e->b, 0, ms), 0);
}

/* The client endpoint's loss hook (libfelix's test hook, run on its loop). */
static void client_drop(fx_client *c, uint32_t permille)
{
    assert_int_equal(fxc_client_test_link(c, true, 0, permille, NULL), 0);
}

/* ---- resume ------------------------------------------------------------------------------ */

static void test_subscriber_resumes_after_broker_cuts_connection_without_loss(void **state)
{
    (void)state;
    E *e = e_new();
    e_start(e);
    fx_client *pub = e_client(e, 50);
    fx_client *c = e_client(e, 200);
    fx_subscription *s = sub_latest(c, "r");
    uint64_t gap;
    publish_range(pub, "r", 0, 50);
    expect_events(s, 0, 50, &gap);
    assert_int_equal(gap, 0);
    /* Only the subscriber's connection: the publisher keeps publishing
     * while the subscriber is away (its backoff is 200 ms). */
    assert_int_equal(fx_broker_test_cut_connections(e->b, true), 1);
    publish_range(pub, "r", 50, 50);
    expect_events(s, 50, 50, &gap);
    assert_int_equal(gap, 0);
    wait_reconnects(c, 1);
    /* Live again on the new connection. */
    publish_range(pub, "r", 100, 10);
    expect_events(s, 100, 10, &gap);
    fx_sub_stats st;
    assert_int_equal(fx_subscription_stats(s, &st), 0);
    assert_int_equal(st.reconnects, 1);
    assert_int_equal(st.gaps, 0);
    assert_int_equal(st.missed, 0);
    assert_int_equal(st.received, 110);
    assert_int_equal(st.delivered, 110);
    fx_client_stats cs;
    assert_int_equal(fx_client_get_stats(pub, &cs), 0);
    assert_int_equal(cs.reconnects, 0);
    assert_int_equal(cs.publishes_lost, 0);
    assert_int_equal(fx_client_get_stats(c, &cs), 0);
    assert_int_equal(cs.reconnects, 1);
    fx_unsubscribe(s);
    fix_wait_sub_gauges(0, -1);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    assert_int_equal(fx_client_close(pub, HANG_MS), 0);
    e_free(e);
}

static void test_subscriber_reports_gap_when_ring_no_longer_holds_offset(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.log_capacity = 8;
    e_start(e);
    fx_client *pub = e_client(e, 50);
    /* A long backoff: the twenty publishes below land while it is away. */
    fx_client *c = e_client(e, 1500);
    fx_subscription *s = sub_latest(c, "g");
    uint64_t gap;
    publish_range(pub, "g", 0, 5);
    expect_events(s, 0, 5, &gap);
    assert_int_equal(fx_broker_test_cut_connections(e->b, true), 1);
    publish_range(pub, "g", 5, 20); /* the ring now holds 17..24 */
    /* The re-subscription from 5 is too old: it continues at 17 and says
     * that 12 messages (5..16) were missed. */
    expect_events(s, 17, 8, &gap);
    assert_int_equal(gap, 12);
    fx_sub_stats st;
    assert_int_equal(fx_subscription_stats(s, &st), 0);
    assert_int_equal(st.reconnects, 1);
    assert_int_equal(st.gaps, 1);
    assert_int_equal(st.missed, 12);
    fx_sub_error err;
    assert_int_equal(fx_subscription_error(s, &err), 0);
    assert_int_equal(err.code, 0); /* still live */
    publish_range(pub, "g", 25, 3);
    expect_events(s, 25, 3, &gap);
    assert_int_equal(gap, 0);
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    assert_int_equal(fx_client_close(pub, HANG_MS), 0);
    e_free(e);
}

/* ---- publishing ------------------------------------------------------------------------- */

typedef struct ackwait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int calls;
    int rv;
    char msg[256];
} ackwait;

static void on_ack(void *user, int rv)
{
    ackwait *a = user;
    pthread_mutex_lock(&a->mu);
    a->calls++;
    a->rv = rv;
    fx_client_last_error(NULL, a->msg, sizeof(a->msg));
    a->done = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static void test_inflight_acked_publish_fails_with_reason_on_connection_loss(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.io_threads = 1; /* the endpoint runs apart from the worker we stall */
    e_start(e);
    fx_client *c = e_client(e, 50);
    assert_int_equal(fx_publish(c, NS, "p", "warm", 4, FX_ACK_PER_MESSAGE), 0);
    /* The worker is busy: the broker cannot answer (ack_on_commit) before
     * the cut, so the publish is in flight when the connection goes. */
    stall_worker(e, 1000);
    ackwait a = {.done = false};
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);
    fx_metrics_snapshot m0;
    fx_metrics_snapshot_take(&m0);
    assert_int_equal(fx_publish_async(c, NS, "p", "x", 1, FX_ACK_PER_MESSAGE, on_ack, &a), 0);
    wait_accepted(&m0, 1); /* at the stalled worker: in flight, its answer held */
    /* The publish's worker may use a second (lazy) connection: cut them all. */
    assert_true(fx_broker_test_cut_connections(e->b, false) >= 1);
    pthread_mutex_lock(&a.mu);
    while (!a.done)
        pthread_cond_wait(&a.cv, &a.mu);
    pthread_mutex_unlock(&a.mu);
    assert_int_equal(a.rv, FX_ECONNLOST);
    if (strstr(a.msg, "test hook: connection cut") == NULL)
        fail_msg("failure text '%s' does not carry the close reason", a.msg);
    /* The client is not broken: the next publish goes out once it is back. */
    assert_int_equal(fx_publish(c, NS, "p", "y", 1, FX_ACK_PER_MESSAGE), 0);
    assert_true(atomic_load(&c->reconnects) >= 1);
    pthread_cond_destroy(&a.cv);
    pthread_mutex_destroy(&a.mu);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
}

/* Waits until |a|'s callback ran once; returns the publish's result. */
static int ackwait_result(ackwait *a)
{
    pthread_mutex_lock(&a->mu);
    while (!a->done)
        pthread_cond_wait(&a->cv, &a->mu);
    int rv = a->rv;
    pthread_mutex_unlock(&a->mu);
    return rv;
}

/* Waits until the broker appended |n| publish requests since |before|. */
static void wait_appended(const fx_metrics_snapshot *before, int64_t n)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    for (;;) {
        fx_metrics_snapshot now;
        fx_metrics_snapshot_take(&now);
        if (DELTA(*before, now, publish_ok) >= n)
            return;
        if (fx_now_ns() > deadline)
            fail_msg("broker appended %lld publishes, want %lld",
                     (long long)DELTA(*before, now, publish_ok), (long long)n);
        sleep_ms(1);
    }
}

/* An acked publish the broker leaves unanswered (its worker stalled) fails
 * with FX_ETIMEDOUT at publish_ack_timeout_ms, while the broker still holds
 * it, and with the timeout's text; nothing is left to flush. The broker's
 * late answer gives no second callback, and the connection stays: the next
 * publish is answered on it. */
static void test_unanswered_acked_publish_fails_at_the_ack_timeout_once(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.io_threads = 1; /* the endpoint runs apart from the worker we stall */
    e_start(e);
    fx_client_opts o;
    copts(e, &o, 50);
    o.publish_ack_timeout_ms = 200;
    fx_client *c = fix_connect(&o);
    stall_worker(e, 2000);
    ackwait a = {.done = false};
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    uint64_t t0 = fx_now_ns();
    assert_int_equal(fx_publish_async(c, NS, "t", "x", 1, FX_ACK_PER_MESSAGE, on_ack, &a), 0);
    assert_int_equal(ackwait_result(&a), FX_ETIMEDOUT);
    assert_true(fx_now_ns() - t0 >= 200 * FX_NS_PER_MS);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, publish_ok), 0); /* not answered: the worker holds it */
    if (strstr(a.msg, "publish_ack_timeout_ms") == NULL)
        fail_msg("failure text '%s' does not name the ack timeout", a.msg);
    assert_int_equal(fx_flush(c, HANG_MS), 0);
    /* The stall ends, the broker appends and answers late. The next publish
     * gets a hang guard as its ack timeout (read by this thread when it
     * publishes and by the client's loop only for requests posted after). */
    wait_appended(&m0, 1);
    c->o.publish_ack_timeout_ms = HANG_MS;
    assert_int_equal(fx_publish(c, NS, "t", "y", 1, FX_ACK_PER_MESSAGE), 0);
    /* Its answer follows the late one on the same stream: that was read. */
    pthread_mutex_lock(&a.mu);
    assert_int_equal(a.calls, 1);
    pthread_mutex_unlock(&a.mu);
    assert_int_equal(atomic_load(&c->reconnects), 0);
    pthread_cond_destroy(&a.cv);
    pthread_mutex_destroy(&a.mu);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
}

static void test_publisher_recovers_after_reconnect(void **state)
{
    (void)state;
    E *e = e_new();
    e_start(e);
    fx_client *sc = e_client(e, 50);
    fx_subscription *s = sub_latest(sc, "q");
    fx_client *c = e_client(e, 300);
    uint64_t gap;
    publish_range(c, "q", 0, 5);
    expect_events(s, 0, 5, &gap);
    /* Both clients lose their connection. Unacked publishes made while the
     * publisher waits for its backoff are queued, not failed, and go out
     * once it is back; an acked one waits for its answer. */
    assert_int_equal(fx_broker_test_cut_connections(e->b, false), 2);
    wait_reconnects(sc, 1);
    sleep_ms(50);
    uint64_t next = 5;
    for (int tries = 0; tries < 3; tries++) {
        char p[32];
        int len = snprintf(p, sizeof(p), "m%llu", (unsigned long long)next);
        int rv = fx_publish(c, NS, "q", p, (size_t)len, FX_ACK_PER_MESSAGE);
        /* Sent on the old connection before the client saw the cut: it
         * fails with the reason (and is not in the ring). */
        if (rv == FX_ECONNLOST)
            continue;
        assert_int_equal(rv, 0);
        next++;
        break;
    }
    assert_int_equal(next, 6);
    publish_range(c, "q", 6, 20);
    expect_events(s, 5, 21, &gap);
    assert_int_equal(gap, 0);
    wait_reconnects(c, 1);
    assert_int_equal(fx_flush(c, HANG_MS), 0);
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    assert_int_equal(fx_client_close(sc, HANG_MS), 0);
    e_free(e);
}

/* After a reconnect every pool connection authenticates a stream, busy or
 * not: a broker closes a connection that authenticated nothing within
 * auth_timeout_ms, so an idle one must not end up in a reconnect loop. */
static void test_idle_pool_connections_authenticate_after_a_reconnect(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.auth_timeout_ns = 300 * FX_NS_PER_MS;
    e_start(e);
    fx_client_opts o;
    copts(e, &o, 50);
    o.publish_conn_pool = 2;
    o.publish_streams_per_conn = 1;
    o.publish_sharding = FX_SHARDING_RR;
    fx_client *c = fix_connect(&o);
    for (int i = 0; i < 4; i++) /* round robin: both pool connections open */
        assert_int_equal(fx_publish(c, NS, "idle", "x", 1, FX_ACK_PER_MESSAGE), 0);
    assert_int_equal(fx_broker_test_cut_connections(e->b, false), 2);
    wait_reconnects(c, 2);
    sleep_ms(1200); /* four auth timeouts, nothing published */
    assert_int_equal(atomic_load(&c->reconnects), 2);
    assert_int_equal(fx_publish(c, NS, "idle", "y", 1, FX_ACK_PER_MESSAGE), 0);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
}

/* ---- close ------------------------------------------------------------------------------- */

static void test_close_during_backoff_returns_promptly(void **state)
{
    (void)state;
    E *e = e_new();
    e_start(e);
    fx_client *c = e_client(e, 60000); /* the first retry would be a minute away */
    fx_subscription *s = sub_latest(c, "c");
    assert_int_equal(fx_broker_test_cut_connections(e->b, true), 1);
    fix_wait_sub_gauges(0, -1); /* the broker dropped it; the client is in its backoff */
    sleep_ms(50);
    uint64_t t0 = fx_now_ns();
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    uint64_t took_ms = (fx_now_ns() - t0) / FX_NS_PER_MS;
    /* Not a speed check: only that close did not wait for the backoff. */
    if (took_ms >= 30000)
        fail_msg("close waited %llu ms for the reconnect backoff", (unsigned long long)took_ms);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, 0), FX_ECLOSED);
    fx_unsubscribe(s);
    e_free(e);
}

/* ---- orphan event streams ------------------------------------------------------------ */

static void *drop_later(void *arg)
{
    sleep_ms(300);
    client_drop(arg, 1000);
    return NULL;
}

static void test_orphan_event_stream_after_unsubscribe_is_reset(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.io_threads = 1;
    e_start(e);
    fx_client_opts o;
    copts(e, &o, 50);
    fx_client *c = fix_connect(&o);
    c->o.connect_timeout_ms = 1000; /* bounds fx_subscribe's wait (no other thread reads it yet) */
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    /* The broker's worker answers late (at 1.8 s). The subscribe request
     * reaches it, then every datagram of the client is lost: fx_subscribe
     * gives up (1 s) and abandons the subscription, but the reset of its
     * request never reaches the broker, which goes on to create the
     * subscription and open its event stream. When the link comes back the
     * client sees an event stream for a subscription it no longer has. */
    stall_worker(e, 1800);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, drop_later, c), 0);
    fx_subscription *s = NULL;
    assert_int_equal(fx_subscribe(&s, c, NS, "o", NULL), FX_ETIMEDOUT);
    assert_null(s);
    assert_int_equal(pthread_join(th, NULL), 0);
    sleep_ms(1200);
    fx_metrics_snapshot_take(&b);
    /* Otherwise the scenario did not happen and the test proves nothing. */
    assert_int_equal(b.c.subscribe_req_ok - a.c.subscribe_req_ok, 1);
    client_drop(c, 0);
    /* Reset by the client, removed by the broker. */
    fix_wait_sub_gauges(0, -1);
    assert_int_equal(atomic_load(&c->reconnects), 0);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
}

/* ---- stream limit ------------------------------------------------------------------------- */

static void test_more_than_1024_subscribe_unsubscribe_cycles_on_one_connection(void **state)
{
    (void)state;
    E *e = e_new();
    e_start(e);
    fx_client *c = e_client(e, 50);
    fx_client *pub = e_client(e, 50);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    /* Each cycle uses one bidi stream of the client and one uni stream of
     * the broker: more than the 1024 concurrent streams QUIC allows, which
     * works only because closed streams give their credit back. */
    for (int i = 0; i < 1100; i++) {
        fx_subscription *s = sub_latest(c, "cy");
        fx_unsubscribe(s);
    }
    fx_subscription *s = sub_latest(c, "cy");
    /* Every cycle ran on the subscriber's one connection: none was added
     * (counted before the publisher opens its own publish connections). */
    fx_metrics_snapshot_take(&b);
    assert_int_equal(b.c.quic_conn_accepted - a.c.quic_conn_accepted, 0);
    publish_range(pub, "cy", 0, 1);
    uint64_t gap;
    expect_events(s, 0, 1, &gap);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(b.c.subscribe_req_ok - a.c.subscribe_req_ok, 1101);
    assert_int_equal(atomic_load(&c->reconnects), 0);
    fx_unsubscribe(s);
    fix_wait_sub_gauges(0, -1);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(b.g.sub_active_connections, 0);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    assert_int_equal(fx_client_close(pub, HANG_MS), 0);
    e_free(e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_subscriber_resumes_after_broker_cuts_connection_without_loss),
    cmocka_unit_test(test_subscriber_reports_gap_when_ring_no_longer_holds_offset),
    cmocka_unit_test(test_inflight_acked_publish_fails_with_reason_on_connection_loss),
    cmocka_unit_test(test_unanswered_acked_publish_fails_at_the_ack_timeout_once),
    cmocka_unit_test(test_publisher_recovers_after_reconnect),
    cmocka_unit_test(test_idle_pool_connections_authenticate_after_a_reconnect),
    cmocka_unit_test(test_close_during_backoff_returns_promptly),
    cmocka_unit_test(test_orphan_event_stream_after_unsubscribe_is_reset),
    cmocka_unit_test(test_more_than_1024_subscribe_unsubscribe_cycles_on_one_connection),
};
FX_TEST_MAIN(tests)
