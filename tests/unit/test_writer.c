/* Unit twin of src/broker/writer.c: the connection writer that takes a
 * subscription's frame lists off its lane and writes them to the event
 * stream: pipelined without waiting for acknowledgements, up to each
 * subscription's unacked cap and the connection's, held back by
 * subscriber_flush_max_delay until a batch fills, and giving back its lane
 * slot once a list is sent. On the one-thread broker of conn_fixture.h;
 * every publish here is one frame list (the feeder runs between them). */
/* fx-test-libs: fx_broker fx_storage fx_wire fx_base */
#include "unit/conn_fixture.h"

/* A subscriber on bidi 0 (its event stream returned) and a publisher on
 * bidi 4, both authenticated as t1. */
static int64_t sub_and_pub(cf *f)
{
    cf_auth(f, 0, "t1");
    int64_t uni = cf_subscribed(f, 0, "t1", "s");
    cf_auth(f, 4, "t1");
    return uni;
}

/* Publishes |payload| and runs everything without acknowledging. */
static void publish_unacked(cf *f, const char *payload)
{
    cf_publish(f, 4, "t1", "s", payload);
    cf_pump(f);
}

/* Lists go out one after the other without waiting for acknowledgements:
 * three publishes are all on the event stream, unacknowledged at once. */
static void test_lists_pipelined_without_acks(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    int64_t uni = sub_and_pub(f);
    cf_settle(f);
    size_t base = cf_stream(f, uni)->tx_bytes;
    publish_unacked(f, "a");
    publish_unacked(f, "b");
    publish_unacked(f, "c");
    char ev[4][64];
    assert_int_equal(cf_read_events(f, uni, ev, 4), 3);
    assert_string_equal(ev[0], "a");
    assert_string_equal(ev[2], "c");
    assert_true(fq_unacked(f->qc) >= cf_stream(f, uni)->tx_bytes - base);
    cf_free(f);
}

static void sub_cap_tiny(fx_broker_opts *o, fq_config *q)
{
    (void)q;
    o->subscriber_unacked_bytes = 1; /* one list in flight per subscription */
}

/* subscriber_unacked_bytes: while a subscription's written bytes are
 * unacknowledged up to its cap, its next list waits; each acknowledgement
 * lets one more go. */
static void test_unacked_cap_holds_next_list(void **state)
{
    (void)state;
    cf *f = cf_new(sub_cap_tiny);
    int64_t uni = sub_and_pub(f);
    cf_settle(f);
    publish_unacked(f, "a");
    publish_unacked(f, "b");
    publish_unacked(f, "c");
    char ev[4][64];
    assert_int_equal(cf_read_events(f, uni, ev, 4), 1);
    assert_string_equal(ev[0], "a");
    cf_ack(f);
    cf_pump(f);
    assert_int_equal(cf_read_events(f, uni, ev, 4), 1);
    assert_string_equal(ev[0], "b");
    cf_ack(f);
    cf_pump(f);
    assert_int_equal(cf_read_events(f, uni, ev, 4), 1);
    assert_string_equal(ev[0], "c");
    cf_ack(f);
    cf_pump(f);
    assert_int_equal(cf_read_events(f, uni, ev, 4), 0);
    cf_free(f);
}

static void conn_cap_small(fx_broker_opts *o, fq_config *q)
{
    (void)o;
    q->unacked_cap = 64; /* the transport refuses sends beyond it (FX_EFULL) */
}

/* The connection's unacked cap: a refused send stops the writer until the
 * transport says it is writable again; then the rest goes, in order. */
static void test_connection_cap_waits_for_writable(void **state)
{
    (void)state;
    cf *f = cf_new(conn_cap_small);
    int64_t uni = sub_and_pub(f);
    cf_settle(f);
    publish_unacked(f, "one");
    publish_unacked(f, "two");
    publish_unacked(f, "three");
    char ev[4][64];
    size_t n = cf_read_events(f, uni, ev, 4);
    assert_true(n < 3);
    for (int i = 0; i < 5 && n < 3; i++) {
        cf_ack(f);
        cf_pump(f);
        n += cf_read_events(f, uni, ev + n, 4 - n);
    }
    assert_int_equal(n, 3);
    assert_string_equal(ev[0], "one");
    assert_string_equal(ev[1], "two");
    assert_string_equal(ev[2], "three");
    cf_free(f);
}

static void flush_delay(fx_broker_opts *o, fq_config *q)
{
    (void)q;
    o->subscriber_flush_max_items = 3;
    o->subscriber_flush_max_delay_ns = 5 * FX_NS_PER_MS;
}

/* subscriber_flush_max_delay: a lane shorter than flush_max_items is held
 * back until the oldest held list is that old, then written. */
static void test_flush_holds_short_lane_until_delay(void **state)
{
    (void)state;
    cf *f = cf_new(flush_delay);
    int64_t uni = sub_and_pub(f);
    cf_settle(f);
    publish_unacked(f, "held");
    char ev[4][64];
    assert_int_equal(cf_read_events(f, uni, ev, 4), 0);
    cf_advance(f, 4 * FX_NS_PER_MS);
    cf_pump(f);
    assert_int_equal(cf_read_events(f, uni, ev, 4), 0);
    cf_advance(f, 1 * FX_NS_PER_MS);
    cf_pump(f);
    assert_int_equal(cf_read_events(f, uni, ev, 4), 1);
    assert_string_equal(ev[0], "held");
    cf_free(f);
}

/* A lane that reaches flush_max_items lists ends the hold: the whole batch
 * is written at once, oldest first, without the delay passing (the hold is
 * decided once per round, not again after each list). */
static void test_flush_full_batch_goes_at_once(void **state)
{
    (void)state;
    cf *f = cf_new(flush_delay);
    int64_t uni = sub_and_pub(f);
    cf_settle(f);
    publish_unacked(f, "a");
    publish_unacked(f, "b");
    char ev[4][64];
    assert_int_equal(cf_read_events(f, uni, ev, 4), 0);
    publish_unacked(f, "c");
    assert_int_equal(cf_read_events(f, uni, ev, 4), 3);
    assert_string_equal(ev[0], "a");
    assert_string_equal(ev[2], "c");
    cf_free(f);
}

static void one_slot_lane(fx_broker_opts *o, fq_config *q)
{
    (void)q;
    o->subscriber_lane_queue_depth = 1;
    o->subscriber_lane_queue_policy = FX_QUEUE_DROP_NEW;
}

/* A list's lane slot is given back once it is handed to QUIC, not when it
 * is acknowledged: with a lane of one slot and a shedding policy, three
 * publishes in a row are all delivered (none dropped) with nothing acked. */
static void test_lane_slot_released_on_send(void **state)
{
    (void)state;
    cf *f = cf_new(one_slot_lane);
    int64_t uni = sub_and_pub(f);
    cf_settle(f);
    fx_metrics_snapshot s0, s1;
    fx_metrics_snapshot_take(&s0);
    publish_unacked(f, "a");
    publish_unacked(f, "b");
    publish_unacked(f, "c");
    char ev[4][64];
    assert_int_equal(cf_read_events(f, uni, ev, 4), 3);
    assert_string_equal(ev[1], "b");
    fx_metrics_snapshot_take(&s1);
    assert_int_equal(s1.c.subscriber_lane_dropped, s0.c.subscriber_lane_dropped);
    cf_free(f);
}

/* The subscription's last list is followed by the event stream's FIN when
 * its stream is deleted (the writer shuts the stream after the lane). */
static void test_fin_after_last_list(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    int64_t uni = sub_and_pub(f);
    publish_unacked(f, "last");
    cf_settle(f);
    fx_registry_err err;
    assert_int_equal(fx_broker_delete_stream(f->b, "t1", "default", "s", &err), 0);
    cf_settle(f);
    char ev[2][64];
    assert_int_equal(cf_read_events(f, uni, ev, 2), 1);
    assert_string_equal(ev[0], "last");
    assert_true(cf_stream(f, uni)->tx_fin);
    cf_free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_lists_pipelined_without_acks),
    cmocka_unit_test(test_unacked_cap_holds_next_list),
    cmocka_unit_test(test_connection_cap_waits_for_writable),
    cmocka_unit_test(test_flush_holds_short_lane_until_delay),
    cmocka_unit_test(test_flush_full_batch_goes_at_once),
    cmocka_unit_test(test_lane_slot_released_on_send),
    cmocka_unit_test(test_fin_after_last_list),
};

FX_TEST_MAIN(tests)
