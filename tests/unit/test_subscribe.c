/* Unit twin of src/broker/subscribe.c: the subscribe exchange (answer,
 * event stream and hello), its refusals, unsubscribing by closing the event
 * stream, and the events a subscription gets, on the one-thread broker of
 * conn_fixture.h. */
/* fx-test-libs: fx_broker fx_storage fx_wire fx_base */
#include "unit/conn_fixture.h"

/* subscribed{id} on the request stream, which then finishes; the event
 * stream opens with event_stream_hello{id}; the gauges count it. */
static void test_subscribe_answered(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    int64_t subs = atomic_load(&fx_gauges.sub_subscriptions);
    int64_t conns = atomic_load(&fx_gauges.sub_active_connections);
    cf_auth(f, 0, "t1");
    int64_t uni = cf_subscribed(f, 0, "t1", "s");
    assert_int_equal(uni & 3, 3); /* server-initiated, unidirectional */
    assert_false(cf_stream(f, 0)->reset);
    assert_int_equal(atomic_load(&fx_gauges.sub_subscriptions), subs + 1);
    assert_int_equal(atomic_load(&fx_gauges.sub_active_connections), conns + 1);
    cf_free(f);
    assert_int_equal(atomic_load(&fx_gauges.sub_subscriptions), subs);
    assert_int_equal(atomic_load(&fx_gauges.sub_active_connections), conns);
}

static void no_auto_create(fx_broker_opts *o, fq_config *q)
{
    (void)q;
    static const fx_broker_stream_name known[] = {{"t1", "default", "known"}};
    o->auto_create_streams = false;
    o->streams = known;
    o->nstreams = 1;
}

/* With auto_create_streams off, a subscribe to a stream that does not exist
 * is answered with the registry's error and ends the stream; no event
 * stream opens. A configured stream is subscribed to. */
static void test_unknown_stream_refused(void **state)
{
    (void)state;
    cf *f = cf_new(no_auto_create);
    cf_auth(f, 0, "t1");
    cf_subscribe(f, 0, "t1", "missing");
    cf_settle(f);
    cf_expect_msg(f, 0, FX_MSG_ERROR, "stream not found");
    assert_true(cf_stream(f, 0)->tx_fin);
    assert_true(cf_uni(f, 0) < 0);
    cf_auth(f, 4, "t1");
    cf_subscribed(f, 4, "t1", "known");
    cf_free(f);
}

/* Events published after the subscribe reach its event stream, in order. */
static void test_events_reach_subscription(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    cf_auth(f, 0, "t1");
    int64_t uni = cf_subscribed(f, 0, "t1", "s");
    cf_auth(f, 4, "t1");
    cf_publish(f, 4, "t1", "s", "first");
    cf_settle(f);
    cf_publish(f, 4, "t1", "s", "second");
    cf_publish(f, 4, "t1", "other", "elsewhere");
    cf_settle(f);
    char ev[4][64];
    assert_int_equal(cf_read_events(f, uni, ev, 4), 2);
    assert_string_equal(ev[0], "first");
    assert_string_equal(ev[1], "second");
    cf_free(f);
}

/* The client closes the event stream (the unsubscribe): the subscription
 * ends (gauges back), and later publishes write nothing more to it. */
static void test_unsubscribe_by_closing_event_stream(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    int64_t subs = atomic_load(&fx_gauges.sub_subscriptions);
    cf_auth(f, 0, "t1");
    int64_t uni = cf_subscribed(f, 0, "t1", "s");
    cf_auth(f, 4, "t1");
    cf_publish(f, 4, "t1", "s", "before");
    cf_settle(f);
    char ev[2][64];
    assert_int_equal(cf_read_events(f, uni, ev, 2), 1);
    fq_peer_reset(f->qc, uni, 0x10c);
    cf_settle(f);
    assert_int_equal(atomic_load(&fx_gauges.sub_subscriptions), subs);
    size_t sent = cf_stream(f, uni)->tx_bytes;
    cf_publish(f, 4, "t1", "s", "after");
    cf_settle(f);
    assert_int_equal(cf_stream(f, uni)->tx_bytes, sent);
    /* A new subscription on the same connection still works. */
    cf_auth(f, 8, "t1");
    int64_t uni2 = cf_subscribed(f, 8, "t1", "s");
    cf_publish(f, 4, "t1", "s", "again");
    cf_settle(f);
    assert_int_equal(cf_read_events(f, uni2, ev, 2), 1);
    assert_string_equal(ev[0], "again");
    cf_free(f);
}

static void one_sub(fx_broker_opts *o, fq_config *q)
{
    (void)q;
    o->max_subscriptions_per_conn = 1;
}

/* max_subscriptions_per_conn: the one more is refused with an error. */
static void test_subscription_limit_per_connection(void **state)
{
    (void)state;
    cf *f = cf_new(one_sub);
    cf_auth(f, 0, "t1");
    cf_subscribed(f, 0, "t1", "s");
    cf_auth(f, 4, "t1");
    cf_subscribe(f, 4, "t1", "s");
    cf_settle(f);
    cf_expect_msg(f, 4, FX_MSG_ERROR, "max subscriptions per connection exceeded");
    assert_true(cf_uni(f, 1) < 0);
    cf_free(f);
}

/* A subscribe for another tenant than the stream's is refused. */
static void test_subscribe_tenant_mismatch(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    cf_auth(f, 0, "t1");
    cf_subscribe(f, 0, "t2", "s");
    cf_settle(f);
    cf_expect_msg(f, 0, FX_MSG_ERROR, "tenant mismatch");
    assert_true(cf_uni(f, 0) < 0);
    cf_free(f);
}

/* A subscribe from the earliest position gets what the stream retained at
 * once (its feeder starts with the answer), then new events. */
static void test_subscribe_from_earliest(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    cf_auth(f, 4, "t1");
    cf_publish(f, 4, "t1", "s", "old");
    cf_settle(f);
    cf_auth(f, 0, "t1");
    fx_msg m = {.type = FX_MSG_SUBSCRIBE,
                .tenant_id = "t1",
                .ns = "default",
                .stream = "s",
                .start = {.kind = FX_MSG_START_EARLIEST}};
    cf_write_msg(f, 0, &m);
    cf_settle(f);
    cf_expect_msg(f, 0, FX_MSG_SUBSCRIBED, NULL);
    int64_t uni = cf_uni(f, 0);
    char ev[3][64];
    assert_int_equal(cf_read_events(f, uni, ev, 3), 1); /* before any new publish */
    assert_string_equal(ev[0], "old");
    cf_publish(f, 4, "t1", "s", "new");
    cf_settle(f);
    assert_int_equal(cf_read_events(f, uni, ev, 3), 1);
    assert_string_equal(ev[0], "new");
    cf_free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_subscribe_answered),
    cmocka_unit_test(test_unknown_stream_refused),
    cmocka_unit_test(test_events_reach_subscription),
    cmocka_unit_test(test_unsubscribe_by_closing_event_stream),
    cmocka_unit_test(test_subscription_limit_per_connection),
    cmocka_unit_test(test_subscribe_tenant_mismatch),
    cmocka_unit_test(test_subscribe_from_earliest),
};

FX_TEST_MAIN(tests)
