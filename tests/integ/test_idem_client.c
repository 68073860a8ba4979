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
    fx_client_stats cs;
    assert_int_equal(fx_client_get_stats(c, &cs), 0);
    assert_true(cs.idempotent_resent >= 1);
    assert_int_equal(cs.idempotent_duplicates, 1);
    assert_int_equal(cs.idempotent_refused, 0);
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

/* Stops the broker of |e| and starts a new one on the same port, state dir
 * (certificate) and options: the client reconnects to it. */
static void e_restart(E *e)
{
    uint16_t port = fx_broker_port(e->b);
    fx_broker_free(e->b);
    e->b = NULL;
    e->bo.port = port;
    fix_env_start(e);
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

static void test_restarted_broker_forgets_producer_of_a_stream_in_memory(void **state)
{
    (void)state;
    E *e = e_new();
    fix_env_start(e);
    fx_client *c = e_client(e);
    assert_int_equal(fx_publish(c, NS, "m", "a", 1, FX_ACK_PER_MESSAGE), 0);
    uint64_t n0 = inits(c);
    e_restart(e);
    wait_reconnects(c, 1);
    /* Sequence 1 of a producer the new broker never met: refused with the
     * reason, not appended (a re-init and re-send could write it twice). */
    int rv = FX_ECONNLOST;
    for (int tries = 0; tries < 20 && rv == FX_ECONNLOST; tries++)
        rv = fx_publish(c, NS, "m", "b", 1, FX_ACK_PER_MESSAGE);
    assert_int_equal(rv, FX_EREFUSED);
    char msg[256];
    fx_client_last_error(NULL, msg, sizeof(msg));
    if (strstr(msg, "unknown_producer") == NULL)
        fail_msg("refusal text '%s' does not name the reason", msg);
    fx_client_stats cs;
    assert_int_equal(fx_client_get_stats(c, &cs), 0);
    assert_int_equal(cs.idempotent_refused, 1);
    /* A new producer: the next publish goes in, at the new stream's 0. */
    fx_publish_result r;
    assert_int_equal(fx_publish_ex(c, NS, "m", "c", 1, FX_ACK_PER_MESSAGE, &r), 0);
    assert_int_equal(r.offset, 0);
    assert_true(inits(c) > n0);
    static const char *const want[] = {"c"};
    expect_stream(c, "m", want, 1);
    fix_close(c);
    e_free(e);
}

static void test_durable_stream_keeps_the_producer_across_a_broker_restart(void **state)
{
    (void)state;
    char root[256];
    fix_state_dir_new(root, sizeof(root), "icd");
    E *e = e_new();
    fix_durable_opts(&e->bo, root);
    fix_env_start(e);
    fx_client *c = e_client(e);
    assert_int_equal(fx_publish(c, NS, "d", "a", 1, FX_ACK_PER_MESSAGE), 0);
    uint64_t n0 = inits(c);
    e_restart(e);
    wait_reconnects(c, 1);
    /* The log's producer table knows the producer: sequence 1 goes in. */
    int rv = FX_ECONNLOST;
    fx_publish_result r = {0};
    for (int tries = 0; tries < 20 && rv == FX_ECONNLOST; tries++)
        rv = fx_publish_ex(c, NS, "d", "b", 1, FX_ACK_PER_MESSAGE, &r);
    assert_int_equal(rv, 0);
    assert_int_equal(r.offset, 1);
    assert_false(r.duplicate);
    assert_int_equal(inits(c), n0);
    static const char *const want[] = {"a", "b"};
    expect_stream(c, "d", want, 2);
    fix_close(c);
    e_free(e);
    fix_rm_dir(root);
}

/* A batch the broker answers "publish commit timeout" (its storage thread
 * held past ack_wait_timeout_ms) is in doubt: the client re-sends the same
 * bytes under the same sequence, which is answered once the original is
 * flushed, as a duplicate; the publish succeeds and the stream holds it
 * once. */
static void test_a_commit_timeout_is_resent_and_answered_once_flushed(void **state)
{
    (void)state;
    char root[256];
    fix_state_dir_new(root, sizeof(root), "ict");
    E *e = e_new();
    fix_durable_opts(&e->bo, root);
    e->bo.workers = 1; /* one storage thread: the one held */
    e->bo.ack_wait_timeout_ns = 100 * FX_NS_PER_MS;
    fix_env_start(e);
    fx_client *c = e_client(e);
    assert_int_equal(fx_publish(c, NS, "ct", "a", 1, FX_ACK_PER_MESSAGE), 0);
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    assert_int_equal(fx_broker_test_hold_storage(e->b, 0, true), 0);
    done d = {.done = false};
    pthread_mutex_init(&d.mu, NULL);
    pthread_cond_init(&d.cv, NULL);
    assert_int_equal(fx_publish_async_ex(c, NS, "ct", "b", 1, FX_ACK_PER_MESSAGE, on_done, &d), 0);
    /* Held well past the broker's 100 ms: at least one commit timeout. */
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    for (;;) {
        fx_metrics_snapshot_take(&m1);
        if (DELTA(m0, m1, publish_commit_timeouts) >= 1)
            break;
        if (fx_now_ns() > deadline)
            fail_msg("no publish commit timeout");
        sleep_ms(5);
    }
    sleep_ms(150);
    assert_int_equal(fx_broker_test_hold_storage(e->b, 0, false), 0);
    done_wait(&d);
    if (d.rv != 0)
        fail_msg("publish failed: %s (%s)", fx_errname(d.rv), d.msg);
    assert_true(d.res.has_offset);
    assert_int_equal(d.res.offset, 1);
    uint64_t resent = 0;
    for (size_t i = 0; i < c->nworkers; i++)
        resent += atomic_load(&c->workers[i].idem.commit_resent);
    assert_true(resent >= 1);
    static const char *const want[] = {"a", "b"};
    expect_stream(c, "ct", want, 2);
    pthread_cond_destroy(&d.cv);
    pthread_mutex_destroy(&d.mu);
    fix_close(c);
    e_free(e);
    fix_rm_dir(root);
}

/* Completions of many async publishes: counted by result. */
typedef struct tally {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, ok, dups;
    int first_rv;
    char msg[256];
} tally;

static void on_tally(void *user, int rv, const fx_publish_result *res)
{
    tally *t = user;
    pthread_mutex_lock(&t->mu);
    t->done++;
    if (rv == 0) {
        t->ok++;
        t->dups += res->duplicate;
    } else if (t->first_rv == 0) {
        t->first_rv = rv;
        fx_client_last_error(NULL, t->msg, sizeof(t->msg));
    }
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void test_publishes_through_repeated_cuts_land_exactly_once(void **state)
{
    (void)state;
    enum { N = 400, CUTS = 4 };
    E *e = e_new();
    fix_env_start(e);
    fx_client *c = e_client(e);
    tally t = {.done = 0};
    pthread_mutex_init(&t.mu, NULL);
    pthread_cond_init(&t.cv, NULL);
    static char names[N][16];
    const char *want[N];
    int cuts = 0;
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "r%d", i);
        want[i] = names[i];
        int rv = fx_publish_async_ex(c, NS, "x", names[i], strlen(names[i]), FX_ACK_PER_MESSAGE,
                                     on_tally, &t);
        if (rv != 0) {
            char msg[256];
            fx_client_last_error(NULL, msg, sizeof(msg));
            fail_msg("publish %d: %s (%s)", i, fx_errname(rv), msg);
        }
        if (i % (N / CUTS) == N / CUTS / 2) { /* frames in flight, merged ones too */
            wait_reconnects(c, (uint64_t)cuts);
            uint64_t deadline = fix_deadline_ns(HANG_MS);
            while (fx_broker_test_cut_connections(e->b, false) < 1) {
                if (fx_now_ns() > deadline)
                    fail_msg("no connection to cut");
                sleep_ms(1);
            }
            cuts++;
        }
    }
    pthread_mutex_lock(&t.mu);
    while (t.done < N)
        pthread_cond_wait(&t.cv, &t.mu);
    pthread_mutex_unlock(&t.mu);
    if (t.ok != N)
        fail_msg("%d of %d publishes failed, first: %s (%s)", N - t.ok, N, fx_errname(t.first_rv),
                 t.msg);
    wait_reconnects(c, (uint64_t)cuts);
    expect_stream(c, "x", want, N);
    pthread_cond_destroy(&t.cv);
    pthread_mutex_destroy(&t.mu);
    fix_close(c);
    e_free(e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_publishes_through_repeated_cuts_land_exactly_once),
    cmocka_unit_test(test_restarted_broker_forgets_producer_of_a_stream_in_memory),
    cmocka_unit_test(test_durable_stream_keeps_the_producer_across_a_broker_restart),
    cmocka_unit_test(test_idempotent_publishes_report_their_offsets),
    cmocka_unit_test(test_batch_in_flight_at_a_cut_is_resent_and_answered_duplicate),
    cmocka_unit_test(test_a_commit_timeout_is_resent_and_answered_once_flushed),
};

FX_TEST_MAIN(tests)
