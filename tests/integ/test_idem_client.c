/* Integration tests of libfelix's idempotent producer (opts.idempotent,
 * src/client/idem.c and sender.c) against a real broker in this process:
 * publishes report their offsets; a batch in flight when the connection is
 * cut is re-sent after the reconnect with the same bytes under the same
 * sequence, answered as a duplicate (the broker had appended it), and the
 * stream holds it once; publishing goes on under the same producer. Client
 * internals (client/client.h) are read for the producer's counters. */
/* fx-test-libs: fx_broker fx_client fx_quic fx_wire fx_base */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HANG_MS 10000 /* before fixture.h: its hang guard */

#include "broker/test_hooks.h"
#include "client/client.h"
#include "integ/fixture.h"

typedef fix_env E;

static E *e_new(void)
{
    E *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    fix_env_init(e, "ic");
    e->bo.io_threads = 1; /* the endpoint runs apart from the worker we stall */
    return e;
}

static void e_free(E *e)
{
    fix_env_deinit(e);
    free(e);
}

static fx_client *e_client(E *e)
{
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, "t1", "any-token");
    o.reconnect_initial_ms = 50;
    o.sub_queue_policy = FX_POLICY_BLOCK;
    o.idempotent = true;
    return fix_connect(&o);
}

/* Producers initialized by |c|'s workers so far. */
static uint64_t inits(fx_client *c)
{
    uint64_t n = 0;
    for (size_t i = 0; i < c->nworkers; i++)
        n += atomic_load(&c->workers[i].idem.inits);
    return n;
}

/* Reads NS/|stream| from earliest and checks it holds exactly |want| (each
 * once, in order). */
static void expect_stream(fx_client *c, const char *stream, const char *const *want, size_t n)
{
    fx_start st = {.kind = FX_START_EARLIEST};
    fx_subscription *s = fix_subscribe(c, stream, &st);
    for (size_t i = 0; i < n; i++) {
        fx_event ev;
        int rv = fx_subscription_next(s, &ev, HANG_MS);
        if (rv != 0)
            fail_msg("record %zu: %s", i, fx_errname(rv));
        assert_true(ev.has_offset);
        assert_int_equal(ev.offset, i);
        assert_int_equal(ev.len, strlen(want[i]));
        assert_memory_equal(ev.payload, want[i], ev.len);
    }
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, 200), FX_ETIMEDOUT); /* nothing twice */
    fx_unsubscribe(s);
}

typedef struct done {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int rv;
    fx_publish_result res;
    char msg[256];
} done;

static void on_done(void *user, int rv, const fx_publish_result *res)
{
    done *d = user;
    pthread_mutex_lock(&d->mu);
    d->rv = rv;
    d->res = *res;
    fx_client_last_error(NULL, d->msg, sizeof(d->msg));
    d->done = true;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

static void done_wait(done *d)
{
    pthread_mutex_lock(&d->mu);
    while (!d->done)
        pthread_cond_wait(&d->cv, &d->mu);
    pthread_mutex_unlock(&d->mu);
}

/* Waits until the broker admitted |n| publish requests since |before|. */
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

static void test_idempotent_publishes_report_their_offsets(void **state)
{
    (void)state;
    E *e = e_new();
    fix_env_start(e);
    fx_client *c = e_client(e);
    for (uint64_t i = 0; i < 3; i++) {
        fx_publish_result r = {.duplicate = true};
        assert_int_equal(fx_publish_ex(c, NS, "o", "abc", 3, FX_ACK_PER_MESSAGE, &r), 0);
        assert_true(r.has_offset);
        assert_false(r.duplicate);
        assert_int_equal(r.offset, i);
    }
    /* A batch is one idempotent frame; the plain calls work too. */
    fx_iov two[2] = {{"d", 1}, {"e", 1}};
    assert_int_equal(fx_publish_batch(c, NS, "o", two, 2, FX_ACK_PER_BATCH), 0);
    assert_int_equal(fx_publish(c, NS, "o", "f", 1, FX_ACK_NONE), 0);
    done d = {.done = false};
    pthread_mutex_init(&d.mu, NULL);
    pthread_cond_init(&d.cv, NULL);
    assert_int_equal(fx_publish_async_ex(c, NS, "o", "g", 1, FX_ACK_PER_MESSAGE, on_done, &d), 0);
    done_wait(&d);
    assert_int_equal(d.rv, 0);
    assert_true(d.res.has_offset);
    assert_int_equal(d.res.offset, 6);
    assert_int_equal(fx_flush(c, HANG_MS), 0);
    static const char *const want[] = {"abc", "abc", "abc", "d", "e", "f", "g"};
    expect_stream(c, "o", want, 7);
    pthread_cond_destroy(&d.cv);
    pthread_mutex_destroy(&d.mu);
    fix_close(c);
    e_free(e);
}

static void test_batch_in_flight_at_a_cut_is_resent_and_answered_duplicate(void **state)
{
    (void)state;
    E *e = e_new();
    fix_env_start(e);
    fx_client *c = e_client(e);
    assert_int_equal(fx_publish(c, NS, "p", "warm", 4, FX_ACK_PER_MESSAGE), 0);
    /* The worker is busy: the broker cannot answer before the cut, so the
     * batch is in flight when the connection goes; the broker appends it
     * once the stall ends, and the answer has nowhere to go. */
    assert_int_equal(fx_broker_test_stall_worker(e->b, 0, 1000), 0);
    done d = {.done = false};
    pthread_mutex_init(&d.mu, NULL);
    pthread_cond_init(&d.cv, NULL);
    fx_metrics_snapshot m0;
    fx_metrics_snapshot_take(&m0);
    assert_int_equal(fx_publish_async_ex(c, NS, "p", "x", 1, FX_ACK_PER_MESSAGE, on_done, &d), 0);
    wait_accepted(&m0, 1);
    assert_true(fx_broker_test_cut_connections(e->b, false) >= 1);
    /* The client reconnects and re-sends the same bytes: the broker answers
     * from its window, with the original's offset. */
    done_wait(&d);
    if (d.rv != 0)
        fail_msg("in-doubt publish: %s (%s)", fx_errname(d.rv), d.msg);
    assert_true(d.res.has_offset);
    assert_true(d.res.duplicate);
    assert_int_equal(d.res.offset, 1);
    assert_true(atomic_load(&c->reconnects) >= 1);
    uint64_t resent = 0;
    for (size_t i = 0; i < c->nworkers; i++)
        resent += atomic_load(&c->workers[i].idem.resent);
    assert_true(resent >= 1);
    /* The same producer goes on: no new producer_init, next offset. */
    uint64_t n0 = inits(c);
    fx_publish_result r;
    assert_int_equal(fx_publish_ex(c, NS, "p", "y", 1, FX_ACK_PER_MESSAGE, &r), 0);
    assert_false(r.duplicate);
    assert_int_equal(r.offset, 2);
    assert_int_equal(inits(c), n0);
    static const char *const want[] = {"warm", "x", "y"};
    expect_stream(c, "p", want, 3);
    pthread_cond_destroy(&d.cv);
    pthread_mutex_destroy(&d.mu);
    fix_close(c);
    e_free(e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_idempotent_publishes_report_their_offsets),
    cmocka_unit_test(test_batch_in_flight_at_a_cut_is_resent_and_answered_duplicate),
};

FX_TEST_MAIN(tests)
