/* Integration tests of the graceful drain (fx_broker_drain, sequenced as
 * felix-broker does it: /ready turns 503 first): accepted work is delivered
 * before connections close, late publishes are refused with "broker shutting
 * down", and a stalled lossless subscriber that makes no progress is closed
 * from half the deadline on, so the drain ends without waiting for it. A real
 * broker and libfelix clients in this process (admin_fixture.h). */
/* fx-test-libs: fx_broker fx_client fx_server fx_quic fx_wire fx_base */
#include <pthread.h>
#include <stdatomic.h>

#include "base/metrics.h"
#include "integ/admin_fixture.h"

/* ---- the drain on its own thread, as main.c runs it ---------------------------- */

typedef struct drainer {
    E *e;
    uint64_t deadline_ns;
    fx_broker_drain_report r;
    int rv;
    atomic_bool done;
    pthread_t th;
} drainer;

static void *drain_main(void *arg)
{
    drainer *d = arg;
    fx_admin_set_draining(d->e->admin, true); /* first, as felix-broker does */
    d->rv = fx_broker_drain(d->e->b, d->deadline_ns, &d->r);
    atomic_store(&d->done, true);
    return NULL;
}

static void drain_start(drainer *d, E *e, unsigned timeout_ms)
{
    d->e = e;
    d->deadline_ns = fx_now_ns() + (uint64_t)timeout_ms * FX_NS_PER_MS;
    atomic_init(&d->done, false);
    assert_int_equal(pthread_create(&d->th, NULL, drain_main, d), 0);
}

static void drain_join(drainer *d)
{
    assert_int_equal(pthread_join(d->th, NULL), 0);
}

static void wait_ready_503(E *e)
{
    http_resp r;
    uint64_t deadline = fx_now_ns() + (uint64_t)HANG_MS * FX_NS_PER_MS;
    for (;;) {
        http(e, "GET", "/ready", &r);
        if (r.status == 503)
            break;
        assert_true(fx_now_ns() < deadline);
        sleep_ms(2);
    }
    assert_non_null(strstr(r.body, "draining"));
}

/* /ready turns 503 before fx_broker_drain raises the broker's own flag (the
 * order felix-broker uses), so a 503 alone does not mean publishes are
 * refused yet: a test of what the broker refuses waits for the flag. */
static void wait_broker_draining(E *e)
{
    uint64_t deadline = fx_now_ns() + (uint64_t)HANG_MS * FX_NS_PER_MS;
    while (!fx_broker_is_draining(e->b)) {
        assert_true(fx_now_ns() < deadline);
        sleep_ms(1);
    }
}

/* A lossless broker with one stalled subscriber (nobody reads it) that has
 * |n| messages of 16 KiB waiting: the drain cannot finish while it stalls. */
typedef struct stall {
    fx_client *sc, *pc;
    fx_subscription *s;
} stall;

static void stall_start(E *e, stall *st, int n)
{
    st->sc = e_client(e, FX_POLICY_BLOCK, 64u << 10, 2);
    st->pc = e_client(e, FX_POLICY_BLOCK, 0, 0);
    st->s = subscribe(st->sc, "st");
    static uint8_t pay[16384];
    for (int i = 0; i < n; i++)
        assert_int_equal(fx_publish(st->pc, NS, "st", pay, sizeof(pay), FX_ACK_PER_MESSAGE), 0);
}

/* Reads the stalled subscription until its event stream ends; returns the
 * events read. */
static uint64_t stall_release(stall *st)
{
    uint64_t n = 0;
    fx_event ev;
    int rv;
    while ((rv = fx_subscription_next(st->s, &ev, HANG_MS)) == 0)
        n++;
    fx_sub_error se;
    fx_subscription_error(st->s, &se);
    fprintf(stderr, "stalled subscription ended: %s (%s) after %llu events\n", fx_errname(rv),
            se.message, (unsigned long long)n);
    return n;
}

static void stall_free(stall *st)
{
    fx_unsubscribe(st->s);
    fx_client_close(st->pc, 1000); /* the broker closed it: nothing to flush */
    fx_client_close(st->sc, 1000);
}

/* ---- cases ----------------------------------------------------------------------- */

typedef struct counter {
    atomic_uint_fast64_t got;
    atomic_uint_fast64_t next; /* expected offset */
    atomic_uint_fast64_t bad;  /* offsets out of sequence */
} counter;

static void on_event(void *user, const fx_event *ev)
{
    counter *k = user;
    if (!ev->has_offset || ev->offset != atomic_load(&k->next))
        atomic_fetch_add(&k->bad, 1);
    atomic_store(&k->next, ev->offset + 1);
    atomic_fetch_add(&k->got, 1);
}

typedef struct pubber {
    fx_client *c;
    atomic_uint_fast64_t ok, failed;
    atomic_uint_fast64_t inflight;
    atomic_bool stop;
    pthread_t th;
} pubber;

static void on_ack(void *user, int rv)
{
    pubber *p = user;
    atomic_fetch_add(rv == 0 ? &p->ok : &p->failed, 1);
    atomic_fetch_sub(&p->inflight, 1);
}

/* Publishes acked messages asynchronously, up to 64 in flight, until a
 * publish fails or it is told to stop. */
static void *pub_main(void *arg)
{
    pubber *p = arg;
    static uint8_t pay[512];
    while (!atomic_load(&p->stop) && atomic_load(&p->failed) == 0) {
        if (atomic_load(&p->inflight) >= 64) {
            usleep(200);
            continue;
        }
        atomic_fetch_add(&p->inflight, 1);
        if (fx_publish_async(p->c, NS, "lo", pay, sizeof(pay), FX_ACK_PER_MESSAGE, on_ack, p) !=
            0) {
            atomic_fetch_sub(&p->inflight, 1);
            break;
        }
    }
    return NULL;
}

static void test_drain_delivers_every_acked_publish_before_exit(void **state)
{
    (void)state;
    E *e = e_new();
    e_lossless(e);
    e->bo.subscriber_queue_capacity = 64;
    e->bo.subscriber_lane_queue_depth = 8;
    /* Acked publishes wait at a full ingress (the Wait policy) rather than
     * fail with "publish queue full", so only the drain ends the publisher. */
    e->bo.ack_on_commit = true;
    e->bo.publish_queue_wait_timeout_ns = (uint64_t)HANG_MS * FX_NS_PER_MS;
    e_start(e);
    fx_client *sc = e_client(e, FX_POLICY_BLOCK, 0, 0);
    counter k[2] = {0};
    fx_subscription *s[2];
    for (int i = 0; i < 2; i++) {
        s[i] = subscribe(sc, "lo");
        assert_int_equal(fx_subscription_set_callback(s[i], on_event, &k[i]), 0);
    }
    pubber p = {.c = e_client(e, FX_POLICY_BLOCK, 0, 0)};
    assert_int_equal(pthread_create(&p.th, NULL, pub_main, &p), 0);
    uint64_t deadline = fx_now_ns() + (uint64_t)HANG_MS * FX_NS_PER_MS;
    while (atomic_load(&p.ok) < 500 && fx_now_ns() < deadline)
        sleep_ms(1);
    fprintf(stderr, "before the drain: %llu acked, %llu failed\n",
            (unsigned long long)atomic_load(&p.ok), (unsigned long long)atomic_load(&p.failed));
    assert_true(atomic_load(&p.ok) >= 500);
    /* Publishes are in flight (up to 64 at once) when the drain starts. */
    drainer d = {0};
    drain_start(&d, e, HANG_MS);
    drain_join(&d);
    atomic_store(&p.stop, true);
    assert_int_equal(pthread_join(p.th, NULL), 0);
    assert_int_equal(d.rv, 0);
    assert_false(d.r.timed_out);
    assert_true(d.r.connections >= 2);
    uint64_t acked = atomic_load(&p.ok);
    /* Everything the broker acknowledged reached both subscribers before the
     * drain returned (QUIC acknowledged it), in order and without gaps. */
    for (int i = 0; i < 2; i++) {
        assert_true(atomic_load(&k[i].got) >= acked);
        assert_int_equal(atomic_load(&k[i].bad), 0);
    }
    fprintf(stderr, "acked %llu, refused %llu, delivered %llu\n", (unsigned long long)acked,
            (unsigned long long)d.r.publishes_refused, (unsigned long long)atomic_load(&k[0].got));
    for (int i = 0; i < 2; i++)
        fx_unsubscribe(s[i]);
    fx_client_close(p.c, 1000);
    fx_client_close(sc, 1000);
    e_free(e);
}

static void test_ready_flips_before_connections_close(void **state)
{
    (void)state;
    E *e = e_new();
    e_lossless(e);
    e_start(e);
    http_resp r;
    http(e, "GET", "/ready", &r);
    assert_int_equal(r.status, 200);
    stall st;
    stall_start(e, &st, 64);
    drainer d = {0};
    drain_start(&d, e, HANG_MS);
    wait_ready_503(e);
    /* Ready already says 503, and the connections are still open: the
     * stalled subscription is live and the drain waits for it. */
    fx_sub_error se;
    assert_int_equal(fx_subscription_error(st.s, &se), 0);
    assert_int_equal(se.code, 0);
    assert_false(atomic_load(&d.done));
    http(e, "GET", "/live", &r);
    assert_int_equal(r.status, 200);
    uint64_t n = stall_release(&st);
    drain_join(&d);
    assert_int_equal(d.rv, 0);
    assert_int_equal(n, 64);
    stall_free(&st);
    e_free(e);
}

static void test_late_publish_gets_broker_shutting_down(void **state)
{
    (void)state;
    E *e = e_new();
    e_lossless(e);
    e_start(e);
    stall st;
    stall_start(e, &st, 64);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    drainer d = {0};
    drain_start(&d, e, HANG_MS);
    wait_ready_503(e);
    wait_broker_draining(e);
    char msg[256];
    int rv = fx_publish(st.pc, NS, "st", "late", 4, FX_ACK_PER_MESSAGE);
    assert_int_equal(rv, FX_ESHUTDOWN);
    fx_client_last_error(st.pc, msg, sizeof(msg));
    assert_non_null(strstr(msg, "broker shutting down"));
    fx_iov one = {"late", 4};
    assert_true(fx_publish_batch(st.pc, NS, "st", &one, 1, FX_ACK_PER_BATCH) != 0);
    /* Unacked: admitted by the client, dropped and counted by the broker. */
    assert_int_equal(fx_publish(st.pc, NS, "st", "late", 4, FX_ACK_NONE), 0);
    assert_int_equal(fx_flush(st.pc, HANG_MS), 0);
    fx_subscription *s2 = NULL;
    assert_true(fx_subscribe(&s2, st.pc, NS, "st", NULL) != 0);
    assert_null(s2);
    fx_client_last_error(st.pc, msg, sizeof(msg));
    assert_non_null(strstr(msg, "broker shutting down"));
    /* None of it reached the stream: the subscriber gets exactly the 64. */
    assert_int_equal(stall_release(&st), 64);
    drain_join(&d);
    assert_int_equal(d.rv, 0);
    assert_int_equal(d.r.publishes_refused, 3);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(b.c.publish_dropped - a.c.publish_dropped, 1);
    assert_int_equal(b.c.publish_accepted - a.c.publish_accepted, 0);
    stall_free(&st);
    e_free(e);
}

static void test_drain_closes_a_stalled_connection_after_half_the_deadline(void **state)
{
    (void)state;
    E *e = e_new();
    e_lossless(e);
    e_start(e);
    stall st;
    stall_start(e, &st, 160); /* more than the subscription's 1 MiB unacked cap */
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    drainer d = {0};
    drain_start(&d, e, 2000);
    drain_join(&d);
    fprintf(stderr, "drain: %s in %llu ms, %llu stalled closed (%llu lists, %llu unacked)\n",
            d.rv == 0 ? "clean" : fx_errname(d.rv),
            (unsigned long long)(d.r.elapsed_ns / FX_NS_PER_MS),
            (unsigned long long)d.r.stalled_closed, (unsigned long long)d.r.stalled_deliveries,
            (unsigned long long)d.r.stalled_unacked);
    /* The stalled subscriber made no progress from a quarter to half the
     * deadline: closed then, and the drain finished without it, before the
     * deadline (the 2 s bound is the behaviour under test). */
    assert_int_equal(d.rv, 0);
    assert_false(d.r.timed_out);
    assert_int_equal(d.r.stalled_closed, 1);
    assert_true(d.r.stalled_deliveries + d.r.stalled_unacked > 0);
    assert_true(d.r.elapsed_ns >= 900 * FX_NS_PER_MS); /* not before half the time */
    assert_true(d.r.elapsed_ns < 2000 * FX_NS_PER_MS);
    assert_int_equal(d.r.jobs_queued, 0);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(b.c.drain_stalled_closed - a.c.drain_stalled_closed, 1);
    /* Its subscription ends short of what was published. */
    fx_event ev;
    int rv;
    uint64_t n = 0;
    while ((rv = fx_subscription_next(st.s, &ev, HANG_MS)) == 0)
        n++;
    assert_true(rv != FX_ETIMEDOUT);
    assert_true(n < 160);
    stall_free(&st);
    e_free(e);
}

/* A drain closes the connection as soon as everything is delivered, that is
 * in the subscriber's QUIC buffers: a consumer that has not taken it yet (its
 * queue holds 2 events, the rest waits in the client) still gets every event
 * after the connection is gone, then the connection's end. */
static void test_events_received_before_the_drain_close_are_all_delivered(void **state)
{
    (void)state;
    E *e = e_new();
    e_lossless(e);
    e_start(e);
    fx_client *sc = e_client(e, FX_POLICY_BLOCK, 4u << 20, 2); /* the window holds all */
    fx_client *pc = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_subscription *s = subscribe(sc, "kept");
    static uint8_t pay[16384];
    for (int i = 0; i < 64; i++)
        assert_int_equal(fx_publish(pc, NS, "kept", pay, sizeof(pay), FX_ACK_PER_MESSAGE), 0);
    drainer d = {0};
    drain_start(&d, e, HANG_MS);
    drain_join(&d); /* nothing was read: the bytes wait in the subscriber's client */
    assert_int_equal(d.rv, 0);
    uint64_t n = 0;
    fx_event ev;
    int rv;
    while ((rv = fx_subscription_next(s, &ev, HANG_MS)) == 0) {
        assert_int_equal(ev.len, sizeof(pay));
        n++;
    }
    assert_int_equal(n, 64);
    /* Then the end the connection had: the broker closed it, shutting down. */
    fx_sub_error se;
    assert_int_equal(fx_subscription_error(s, &se), 0);
    assert_int_equal(rv, FX_ECONNLOST);
    assert_int_equal(se.code, FX_ECONNLOST);
    assert_non_null(strstr(se.message, "broker shutting down"));
    fx_unsubscribe(s);
    fx_client_close(pc, 1000);
    fx_client_close(sc, 1000);
    e_free(e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_drain_delivers_every_acked_publish_before_exit),
    cmocka_unit_test(test_ready_flips_before_connections_close),
    cmocka_unit_test(test_late_publish_gets_broker_shutting_down),
    cmocka_unit_test(test_drain_closes_a_stalled_connection_after_half_the_deadline),
    cmocka_unit_test(test_events_received_before_the_drain_close_are_all_delivered),
};
FX_TEST_MAIN(tests)
