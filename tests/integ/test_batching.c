/* Natural batching of libfelix against a real broker in this process on
 * 127.0.0.1 port 0, in the lossless profile: many threads publishing to many
 * streams (acked and not) lose nothing and keep each publisher's order per
 * stream; a close while a batch is being built sends it, once; merged acked
 * publishes in flight when the connection is cut each fail with the reason,
 * and later ones succeed after the reconnect. Timeouts are hang guards. */
/* fx-test-libs: fx_broker fx_client fx_quic fx_wire fx_base */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HANG_MS 20000 /* before fixture.h: its hang guard */

#include "broker/test_hooks.h"
#include "client/client.h"
#include "integ/fixture.h"

typedef fix_env E;

static E *e_new(bool commit)
{
    E *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    fix_env_init(e, "bt");
    fix_lossless(&e->bo);
    e->bo.ack_on_commit = commit;
    return e;
}

static void e_free(E *e)
{
    fix_env_deinit(e);
    free(e);
}

static void copts(E *e, fx_client_opts *o)
{
    fix_client_opts(o, e->b, e->server, "t1", "any-token");
    o->sub_queue_policy = FX_POLICY_BLOCK; /* lossless: the client sheds nothing */
}

/* ---- readers ---------------------------------------------------------------------- */

enum { MAX_PUB = 16 };

/* Takes |want| events "t:k" from |s|: per publisher |t| the k grow, and
 * each (t, k) comes once. */
typedef struct reader {
    fx_subscription *s;
    uint64_t want;
    uint64_t got;
    int64_t last[MAX_PUB];
    uint64_t bad, dups;
    int rv;
    pthread_t th;
} reader;

static void *reader_main(void *arg)
{
    reader *r = arg;
    for (int t = 0; t < MAX_PUB; t++)
        r->last[t] = -1;
    while (r->got < r->want) {
        fx_event ev;
        int rv = fx_subscription_next(r->s, &ev, HANG_MS);
        if (rv != 0) {
            r->rv = rv;
            return NULL;
        }
        char p[32];
        size_t n = ev.len < sizeof(p) - 1 ? ev.len : sizeof(p) - 1;
        memcpy(p, ev.payload, n);
        p[n] = '\0';
        int t = -1;
        long long k = -1;
        if (sscanf(p, "%d:%lld", &t, &k) != 2 || t < 0 || t >= MAX_PUB || ev.flags != 0) {
            r->bad++;
        } else if (k <= r->last[t]) {
            r->dups++;
        } else {
            r->last[t] = k;
        }
        r->got++;
    }
    return NULL;
}

static void reader_start(reader *r, fx_subscription *s, uint64_t want)
{
    *r = (reader){.s = s, .want = want};
    assert_int_equal(pthread_create(&r->th, NULL, reader_main, r), 0);
}

static void reader_join(reader *r)
{
    pthread_join(r->th, NULL);
    assert_int_equal(r->rv, 0);
    assert_int_equal(r->got, r->want);
    assert_int_equal(r->bad, 0);
    assert_int_equal(r->dups, 0);
}

/* ---- many threads, many streams ------------------------------------------------------ */

enum { PUBS = 8, STREAMS = 4, EACH = 400 };

typedef struct pub {
    fx_client *c;
    int t;
    int fails;
} pub;

static void *pub_main(void *arg)
{
    pub *p = arg;
    for (int k = 0; k < EACH; k++) {
        char stream[16], m[32];
        snprintf(stream, sizeof(stream), "m%d", k % STREAMS);
        int n = snprintf(m, sizeof(m), "%d:%d", p->t, k);
        fx_ack ack = p->t % 2 == 0 ? FX_ACK_NONE : FX_ACK_PER_MESSAGE;
        if (fx_publish(p->c, NS, stream, m, (size_t)n, ack) != 0)
            p->fails++;
    }
    return NULL;
}

static void test_many_threads_many_streams_lose_nothing_in_order(void **state)
{
    (void)state;
    E *e = e_new(false);
    fix_env_start(e);
    fx_client_opts o;
    copts(e, &o);
    fx_client *sc = fix_connect(&o);
    fx_client *pc = fix_connect(&o);
    reader r[STREAMS];
    fx_subscription *s[STREAMS];
    for (int i = 0; i < STREAMS; i++) {
        char stream[16];
        snprintf(stream, sizeof(stream), "m%d", i);
        s[i] = fix_subscribe(sc, stream, NULL);
        reader_start(&r[i], s[i], (uint64_t)PUBS * EACH / STREAMS);
    }
    pthread_t th[PUBS];
    pub p[PUBS];
    for (int t = 0; t < PUBS; t++) {
        p[t] = (pub){.c = pc, .t = t};
        assert_int_equal(pthread_create(&th[t], NULL, pub_main, &p[t]), 0);
    }
    for (int t = 0; t < PUBS; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(p[t].fails, 0);
    }
    assert_int_equal(fx_flush(pc, HANG_MS), 0);
    for (int i = 0; i < STREAMS; i++) {
        reader_join(&r[i]);
        for (int t = 0; t < PUBS; t++) /* every publisher's last message came */
            assert_int_equal(r[i].last[t], EACH - STREAMS + i);
        fx_unsubscribe(s[i]);
    }
    fix_close(pc);
    fix_close(sc);
    e_free(e);
}

/* ---- close while building ---------------------------------------------------------------- */

typedef struct cbres {
    atomic_int calls[256];
    atomic_int fails;
} cbres;

typedef struct cbslot {
    cbres *r;
    int i;
} cbslot;

static void on_done(void *user, int rv)
{
    cbslot *s = user;
    atomic_fetch_add(&s->r->calls[s->i], 1);
    if (rv != 0)
        atomic_fetch_add(&s->r->fails, 1);
}

static void test_close_while_a_batch_is_built_loses_nothing(void **state)
{
    (void)state;
    E *e = e_new(false);
    fix_env_start(e);
    fx_client_opts o;
    copts(e, &o);
    fx_client *sc = fix_connect(&o);
    fx_subscription *s = fix_subscribe(sc, "cl", NULL);
    o.publish_linger_us = 1000000; /* the batch would wait a second */
    fx_client *pc = fix_connect(&o);
    enum { N = 200 };
    reader r;
    reader_start(&r, s, N);
    static cbres res;
    memset(&res, 0, sizeof(res));
    cbslot sl[N];
    for (int i = 0; i < N; i++) {
        char m[32];
        int n = snprintf(m, sizeof(m), "0:%d", i);
        sl[i] = (cbslot){&res, i};
        /* Two batches: one unacked, one acked (ack modes never share one). */
        fx_ack ack = i < N / 2 ? FX_ACK_NONE : FX_ACK_PER_MESSAGE;
        assert_int_equal(fx_publish_async(pc, NS, "cl", m, (size_t)n, ack, on_done, &sl[i]), 0);
    }
    fix_close(pc);
    /* Every publish completed exactly once, none failed, and the
     * subscriber got each once, in order. */
    for (int i = 0; i < N; i++)
        assert_int_equal(atomic_load(&res.calls[i]), 1);
    assert_int_equal(atomic_load(&res.fails), 0);
    reader_join(&r);
    assert_int_equal(r.last[0], N - 1);
    fx_unsubscribe(s);
    fix_close(sc);
    e_free(e);
}

/* ---- reconnect ----------------------------------------------------------------------------- */

static bool all_called(cbres *r, int n)
{
    for (int i = 0; i < n; i++)
        if (atomic_load(&r->calls[i]) == 0)
            return false;
    return true;
}

static void wait_called(cbres *r, int n)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    while (!all_called(r, n)) {
        assert_true(fx_now_ns() < deadline);
        sleep_ms(5);
    }
}

/* Waits until the broker admitted publishes of |n| payload bytes since
 * |before| (handed them to their worker), however the client framed them. */
static void wait_admitted_bytes(const fx_metrics_snapshot *before, int64_t n)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    for (;;) {
        fx_metrics_snapshot now;
        fx_metrics_snapshot_take(&now);
        if (DELTA(*before, now, publish_bytes) >= n)
            return;
        if (fx_now_ns() > deadline)
            fail_msg("broker admitted %lld payload bytes, want %lld",
                     (long long)DELTA(*before, now, publish_bytes), (long long)n);
        sleep_ms(1);
    }
}

/* Merged acked publishes in flight when the connection goes each fail with
 * the reason, once; after the reconnect the next batch succeeds. */
static void test_merged_publishes_in_flight_fail_each_on_connection_loss(void **state)
{
    (void)state;
    E *e = e_new(true);   /* answered = appended */
    e->bo.io_threads = 1; /* the endpoint runs apart from the worker we stall */
    fix_env_start(e);
    fx_client_opts o;
    copts(e, &o);
    o.publish_conn_pool = 1;
    o.publish_streams_per_conn = 1;
    o.reconnect_initial_ms = 50;
    o.publish_linger_us = 20000; /* the ten publishes below share a frame */
    fx_client *c = fix_connect(&o);
    assert_int_equal(fx_publish(c, NS, "rc", "warm", 4, FX_ACK_PER_MESSAGE), 0);
    assert_int_equal(fx_broker_test_stall_worker(e->b, 0, 1000), 0);
    enum { N = 10 };
    static cbres res;
    memset(&res, 0, sizeof(res));
    cbslot sl[N];
    fx_metrics_snapshot m0;
    fx_metrics_snapshot_take(&m0);
    for (int i = 0; i < N; i++) {
        sl[i] = (cbslot){&res, i};
        assert_int_equal(fx_publish_async(c, NS, "rc", "x", 1, FX_ACK_PER_MESSAGE, on_done, &sl[i]),
                         0);
    }
    /* Past the linger, sent, and held by the stalled worker: all N one-byte
     * publishes admitted. */
    wait_admitted_bytes(&m0, N);
    assert_true(fx_broker_test_cut_connections(e->b, false) >= 1);
    wait_called(&res, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(atomic_load(&res.calls[i]), 1);
    assert_int_equal(atomic_load(&res.fails), N);
    /* The client recovers: the next batch is answered. */
    memset(&res, 0, sizeof(res));
    for (int i = 0; i < N; i++)
        assert_int_equal(fx_publish_async(c, NS, "rc", "y", 1, FX_ACK_PER_MESSAGE, on_done, &sl[i]),
                         0);
    wait_called(&res, N);
    assert_int_equal(atomic_load(&res.fails), 0);
    assert_true(atomic_load(&c->reconnects) >= 1);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_many_threads_many_streams_lose_nothing_in_order),
    cmocka_unit_test(test_close_while_a_batch_is_built_loses_nothing),
    cmocka_unit_test(test_merged_publishes_in_flight_fail_each_on_connection_loss),
};
FX_TEST_MAIN(tests)
