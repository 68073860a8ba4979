/* control_stream_drain_timeout_ms in a drain: once every publish job and
 * delivery is done, a client stream whose replies cannot be written (the
 * client stopped reading them) is reset after that timeout instead of holding
 * the drain until its stall checks or its deadline. Raw QUIC client
 * (tests/integ/broker_client.h) on the test thread; the drain on another. */
#include <pthread.h>
#include <stdatomic.h>

#include "integ/broker_client.h"

typedef struct drainer {
    fx_broker *b;
    uint64_t deadline_ns;
    fx_broker_drain_report r;
    int rv;
    atomic_bool done;
} drainer;

static void *drain_thread(void *arg)
{
    drainer *d = arg;
    d->rv = fx_broker_drain(d->b, d->deadline_ns, &d->r);
    atomic_store(&d->done, true);
    return NULL;
}

static bool drain_done(T *t)
{
    return atomic_load(&((drainer *)t->arg)->done);
}

static void test_drain_resets_a_stream_that_does_not_read_its_replies(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->co.stream_window = t->co.max_stream_window = 4096; /* the client's reply window */
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    s->stalled = true; /* from now on the client withholds its stream credit */
    for (uint64_t i = 0; i < 600; i++)
        send_buf(s, binary_publish(t, "unread", i, 1, true, i + 1));
    run_for(t, 300); /* the broker admits them all; ~600 acks exceed 4 KiB */
    drainer d = {.b = t->b, .deadline_ns = fx_now_ns() + 20 * FX_NS_PER_S};
    uint64_t t0 = fx_now_ns();
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, drain_thread, &d), 0);
    t->arg = &d;
    assert_true(run_until_arg(t, drain_done, &d, 30000));
    pthread_join(th, NULL);
    uint64_t ms = (fx_now_ns() - t0) / FX_NS_PER_MS;
    fprintf(stderr, "drain took %llu ms, %llu stream(s) reset, %llu replies abandoned\n",
            (unsigned long long)ms, (unsigned long long)d.r.reply_streams_reset,
            (unsigned long long)d.r.replies_abandoned);
    assert_int_equal(d.rv, 0);
    assert_int_equal(d.r.reply_streams_reset, 1);
    assert_int_equal(d.r.stalled_closed, 0);
    /* Well before the first stall check (a quarter of 20 s) could act. */
    assert_true(ms < 4000);
    t_free(t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_drain_resets_a_stream_that_does_not_read_its_replies),
};
FX_TEST_MAIN(tests)
