/* Integration tests of the writer lanes (lane.c, checkpoint 6) and the
 * connection writer (writer.c): the lane shard rules, one lane per
 * connection, and a stalled subscriber's effect on its lane's neighbours
 * under drop_new and drop_old. */
/* fx-test-libs: fx_broker fx_quic fx_wire fx_server fx_base */
#include "integ/broker_client.h"

static void test_lanes_spread_subscriptions_by_rule(void **state)
{
    (void)state;
    /* round_robin_pin: a connection's n-th subscription gets lane n % 2,
     * counted per connection. */
    T *t = t_new();
    t->bo.subscriber_writer_lanes = 2;
    t->bo.subscriber_lane_shard = FX_BROKER_LANE_ROUND_ROBIN_PIN;
    t_start(t);
    tconn *c1 = t_connect(t), *c2 = t_connect(t);
    for (uint64_t i = 0; i < 4; i++) {
        sub_info in = sub_info_of(t, subscribe(t, c1, "rr", FX_MSG_START_LATEST, 0)->sub_id);
        assert_int_equal(in.lanes, 2);
        assert_int_equal(in.lane, i % 2);
    }
    assert_int_equal(sub_info_of(t, subscribe(t, c2, "rr", FX_MSG_START_LATEST, 0)->sub_id).lane,
                     0);
    t_free(t);

    /* subscriber_id_hash: the lane follows the subscription id's hash, and
     * consecutive ids use both lanes. */
    t = t_new();
    t->bo.subscriber_writer_lanes = 2;
    t->bo.subscriber_lane_shard = FX_BROKER_LANE_SUBSCRIBER_ID_HASH;
    t_start(t);
    tconn *c = t_connect(t);
    uint64_t on[2] = {0, 0};
    for (int i = 0; i < 8; i++) {
        uint64_t id = subscribe(t, c, "hs", FX_MSG_START_LATEST, 0)->sub_id;
        sub_info in = sub_info_of(t, id);
        assert_int_equal(in.lane, fx_broker_lane_hash(id) % 2);
        on[in.lane]++;
    }
    assert_true(on[0] > 0 && on[1] > 0);
    t_free(t);

    /* connection_id_hash, with the lane count clamped by
     * max_subscriber_writer_lanes: a connection's subscriptions share one
     * lane, picked by the connection id's hash. */
    t = t_new();
    t->bo.subscriber_writer_lanes = 4;
    t->bo.max_subscriber_writer_lanes = 2;
    t->bo.subscriber_lane_shard = FX_BROKER_LANE_CONNECTION_ID_HASH;
    t_start(t);
    for (int k = 0; k < 2; k++) {
        tconn *ck = t_connect(t);
        for (int i = 0; i < 3; i++) {
            sub_info in = sub_info_of(t, subscribe(t, ck, "ch", FX_MSG_START_LATEST, 0)->sub_id);
            assert_int_equal(in.lanes, 2);
            assert_int_equal(in.lane, fx_broker_lane_hash(in.connection_id) % 2);
        }
    }
    t_free(t);
}

static void test_single_writer_per_conn_uses_one_lane(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.subscriber_writer_lanes = 4;
    t->bo.subscriber_lane_shard = FX_BROKER_LANE_ROUND_ROBIN_PIN; /* would spread */
    t->bo.subscriber_single_writer_per_conn = true;
    t->bo.subscriber_lane_queue_policy = FX_QUEUE_BLOCK;
    t->bo.subscriber_lane_queue_depth = 2;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *subs[4];
    for (int i = 0; i < 4; i++) {
        subs[i] = subscribe(t, c, "sw", FX_MSG_START_LATEST, 0);
        sub_info in = sub_info_of(t, subs[i]->sub_id);
        assert_int_equal(in.lanes, 1);
        assert_int_equal(in.lane, 0);
        assert_int_equal(in.lane_capacity, 2);
    }
    /* The one lane carries all four, in order and complete. */
    tstream *p = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    publish_acked(t, p, "sw", 0, 200, 1);
    wait_events(t, subs, 4, 200, 10000);
    fx_metrics_snapshot_take(&b);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(subs[i]->events, 200);
        assert_int_equal(subs[i]->gaps + subs[i]->dups + subs[i]->bad, 0);
    }
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped), 0);
    t_free(t);
}

static void test_shared_lane_sheds_healthy_neighbour_of_stalled_subscriber(void **state)
{
    (void)state;
    lane_pair lp = lane_pair_start(FX_QUEUE_DROP_NEW, FX_BROKER_LANE_CONNECTION_ID_HASH);
    const uint64_t total = 800;
    fx_metrics_snapshot a, b;
    lane_pair_run(&lp, total, &a, &b);
    tstream *h = lp.healthy, *st = lp.stalled;
    assert_int_equal(lp.si.lane, lp.hi.lane); /* one lane, by the rule */
    /* The healthy subscriber is healthy at checkpoint 5 and still shed at
     * checkpoint 6: the stalled neighbour's backlog fills their lane. */
    assert_int_equal(lp.hi.queue_dropped, 0);
    assert_true(lp.hi.lane_dropped > 0);
    assert_int_equal(h->events + lp.hi.lane_dropped, total);
    assert_int_equal(lacks(h, total), lp.hi.lane_dropped);
    assert_int_equal(h->dups + h->bad, 0);
    assert_true(lp.si.lane_dropped > 0);
    assert_int_equal(st->events + lp.si.lane_dropped, total);
    assert_int_equal(lacks(st, total), lp.si.lane_dropped);
    assert_int_equal(st->dups + st->bad, 0);
    /* felix_subscriber_lane_dropped_events_total holds both, nothing else. */
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped_events),
                     lp.hi.lane_dropped + lp.si.lane_dropped);
    assert_true(DELTA(a, b, subscriber_lane_dropped) > 0);
    assert_int_equal(DELTA(a, b, sub_queue_dropped), 0);
    assert_int_equal(DELTA(a, b, ingress_dropped), 0);
    assert_int_equal(DELTA(a, b, subscriber_disconnect), 0);
    t_free(lp.t);
}

static void test_stalled_subscriber_on_other_lane_does_not_shed_neighbour(void **state)
{
    (void)state;
    /* Same connection, but round_robin_pin puts them on lanes 0 and 1. */
    lane_pair lp = lane_pair_start(FX_QUEUE_DROP_NEW, FX_BROKER_LANE_ROUND_ROBIN_PIN);
    const uint64_t total = 800;
    fx_metrics_snapshot a, b;
    lane_pair_run(&lp, total, &a, &b);
    assert_int_equal(lp.si.lane, 0);
    assert_int_equal(lp.hi.lane, 1);
    assert_int_equal(lp.hi.lane_dropped, 0);
    assert_int_equal(lp.healthy->events, total);
    assert_int_equal(lp.healthy->gaps + lp.healthy->dups + lp.healthy->bad, 0);
    assert_true(lp.si.lane_dropped > 0);
    assert_int_equal(lp.stalled->events + lp.si.lane_dropped, total);
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped_events), lp.si.lane_dropped);
    t_free(lp.t);
}

static void test_drop_old_on_lane_evicts_only_same_subscriber(void **state)
{
    (void)state;
    lane_pair lp = lane_pair_start(FX_QUEUE_DROP_OLD, FX_BROKER_LANE_CONNECTION_ID_HASH);
    const uint64_t total = 800;
    fx_metrics_snapshot a, b;
    lane_pair_run(&lp, total, &a, &b);
    tstream *h = lp.healthy, *st = lp.stalled;
    assert_int_equal(lp.si.lane, lp.hi.lane);
    /* The stalled subscriber's own oldest lists made room for its newest:
     * after resuming it got the end of the burst. */
    assert_int_equal(st->next_off, total);
    assert_true(lp.si.lane_dropped > 0);
    assert_int_equal(st->events + lp.si.lane_dropped, total);
    assert_int_equal(lacks(st, total), lp.si.lane_dropped);
    assert_int_equal(st->dups + st->bad, 0);
    /* The healthy neighbour never evicted the stalled one's lists (it would
     * then have lost nothing): with nothing of its own queued, its own
     * deliveries were the ones shed, each counted against it. */
    assert_true(lp.hi.lane_dropped > 0);
    assert_int_equal(h->events + lp.hi.lane_dropped, total);
    assert_int_equal(lacks(h, total), lp.hi.lane_dropped);
    assert_int_equal(h->dups + h->bad, 0);
    assert_int_equal(lp.hi.queue_dropped, 0);
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped_events),
                     lp.hi.lane_dropped + lp.si.lane_dropped);
    assert_int_equal(DELTA(a, b, sub_queue_dropped), 0);
    t_free(lp.t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_lanes_spread_subscriptions_by_rule),
    cmocka_unit_test(test_single_writer_per_conn_uses_one_lane),
    cmocka_unit_test(test_shared_lane_sheds_healthy_neighbour_of_stalled_subscriber),
    cmocka_unit_test(test_stalled_subscriber_on_other_lane_does_not_shed_neighbour),
    cmocka_unit_test(test_drop_old_on_lane_evicts_only_same_subscriber),
};

FX_TEST_MAIN(tests)
