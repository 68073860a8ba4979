/* Integration tests of delivery through the worker, the fanout and the
 * feeders (worker.c, fanout.c, feeder.c, checkpoint 5): order and offsets
 * across subscribers and workers, backlog then live, the shared frame, and
 * the subscriber-queue policies with exact drop counts. */
/* fx-test-libs: fx_broker fx_quic fx_wire fx_server fx_base */
#include <sys/stat.h>

#include "integ/broker_client.h"

static void test_one_publisher_three_subscribers_in_order(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_1k_or_0;
    /* Lossless, so "every message arrives" is a guarantee, not luck. */
    t_lossless(t);
    t_start(t);
    tstream *subs[3];
    for (int i = 0; i < 3; i++)
        subs[i] = subscribe(t, t_connect(t), "fan", FX_MSG_START_LATEST, 0);
    tconn *p = t_connect(t);
    tstream *s = authed_stream(t, p);
    const uint64_t n = 1000;
    publish_range(t, s, "fan", 0, n);
    wait_events(t, subs, 3, n, 20000);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(subs[i]->events, n);
        assert_int_equal(subs[i]->first_off, 0);
        assert_int_equal(subs[i]->gaps + subs[i]->dups + subs[i]->bad, 0);
    }
    t_free(t);
}

/* Dedicated io loop for QUIC, two workers: streams land on both workers and
 * every subscriber of each gets its stream in order. */
static void test_io_loop_and_two_workers_deliver_every_stream(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.workers = 2;
    t->bo.io_threads = 1;
    t_lossless(t);
    t_start(t);
    assert_int_equal(fx_broker_endpoint_worker(t->b), -1);
    const char *names[2] = {"w-a", "w-b"};
    tstream *subs[2];
    tconn *sc = t_connect(t);
    for (int i = 0; i < 2; i++)
        subs[i] = subscribe(t, sc, names[i], FX_MSG_START_LATEST, 0);
    tstream *s = authed_stream(t, t_connect(t));
    for (int i = 0; i < 2; i++)
        publish_range(t, s, names[i], 0, 300);
    wait_events(t, subs, 2, 300, 10000);
    for (int i = 0; i < 2; i++)
        assert_int_equal(subs[i]->gaps + subs[i]->dups + subs[i]->bad, 0);
    t_free(t);
}

static void test_large_payloads_larger_than_the_receive_window_arrive(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_big_tail;
    t_lossless(t);
    t->bo.quic.stream_window = 256u << 10; /* a 1 MiB frame spans four windows */
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "big", FX_MSG_START_LATEST, 0);
    tstream *s = authed_stream(t, t_connect(t));
    publish_range(t, s, "big", 0, 6);
    wait_events(t, &sub, 1, 6, 20000);
    assert_int_equal(sub->gaps + sub->dups + sub->bad, 0);
    t_free(t);
}

static void test_subscribe_from_earliest_gets_backlog_then_live_without_gap(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.ack_on_commit = true; /* acked = appended */
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    for (uint64_t i = 0; i < 10; i++)
        publish_acked(t, s, "bl", i * 5, 5, i + 1);
    tstream *e = subscribe(t, t_connect(t), "bl", FX_MSG_START_EARLIEST, 0);
    tstream *o = subscribe(t, t_connect(t), "bl", FX_MSG_START_OFFSET, 12);
    tstream *both[2] = {e, o};
    wait_events(t, &e, 1, 50, 5000);
    wait_events(t, &o, 1, 38, 5000);
    for (uint64_t i = 10; i < 20; i++)
        publish_acked(t, s, "bl", i * 5, 5, i + 1);
    wait_events(t, &e, 1, 100, 5000);
    wait_events(t, &o, 1, 88, 5000);
    run_for(t, 50); /* nothing more may come */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(both[i]->gaps + both[i]->dups + both[i]->bad, 0);
        assert_int_equal(both[i]->next_off, 100);
    }
    assert_int_equal(e->first_off, 0);
    assert_int_equal(e->events, 100);
    assert_int_equal(o->first_off, 12);
    assert_int_equal(o->events, 88);
    /* The replay starting inside batch 10..14 used a per-subscriber frame. */
    assert_true(o->sub_frames >= 1);
    t_free(t);
}

static void test_cursor_in_future_typed_error(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.log_capacity = 4;
    t->bo.ack_on_commit = true;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *u = authed_stream(t, c);
    fx_msg m = {.type = FX_MSG_SUBSCRIBE,
                .tenant_id = "t1",
                .ns = "default",
                .stream = "cur",
                .start = {.kind = FX_MSG_START_OFFSET, .offset = 9999}};
    send_msg(u, &m);
    fx_msg r;
    expect_msg(t, u, FX_MSG_SUBSCRIBE_CURSOR_ERROR, NULL, &r);
    assert_int_equal(r.reason, FX_MSG_CURSOR_IN_FUTURE);
    assert_int_equal(r.requested, 9999);
    assert_int_equal(r.available, 0);
    fx_msg_deinit(&r);
    expect_end(t, u);
    /* Too old: a ring of 4 after 10 appends starts at offset 6. */
    tstream *s = authed_stream(t, c);
    for (uint64_t i = 0; i < 10; i++)
        publish_acked(t, s, "cur", i, 1, i + 1);
    tstream *u2 = authed_stream(t, c);
    m.start.offset = 0;
    send_msg(u2, &m);
    expect_msg(t, u2, FX_MSG_SUBSCRIBE_CURSOR_ERROR, NULL, &r);
    assert_int_equal(r.reason, FX_MSG_CURSOR_TOO_OLD);
    assert_int_equal(r.requested, 0);
    assert_int_equal(r.available, 6);
    fx_msg_deinit(&r);
    expect_end(t, u2);
    t_free(t);
}

static void test_shared_frame_encoded_once_for_fanout_3(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.ack_on_commit = true;
    t_start(t);
    tstream *subs[3];
    for (int i = 0; i < 3; i++)
        subs[i] = subscribe(t, t_connect(t), "enc", FX_MSG_START_LATEST, 0);
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    for (uint64_t i = 0; i < 10; i++)
        publish_acked(t, s, "enc", i * 3, 3, i + 1); /* 10 envelopes of 3 */
    wait_events(t, subs, 3, 30, 5000);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, sub_shared_frame_encodes), 10);
    assert_int_equal(DELTA(a, b, sub_frame_encodes), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(subs[i]->gaps + subs[i]->dups + subs[i]->bad, 0);
        assert_int_equal(subs[i]->sub_frames, 0);
    }
    t_free(t);
}

static void test_drop_new_stalled_subscriber_counts_drops_exactly(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_1k;
    t->bo.pub_ingress_wait = true; /* nothing shed upstream of checkpoint 5 */
    t->bo.subscriber_queue_capacity = 64;
    t->bo.subscriber_lane_queue_depth = 4;
    t->bo.subscriber_unacked_bytes = 64u << 10;
    t->co.stream_window = 64u << 10; /* the stalled client's window */
    t_start(t);
    tstream *healthy = subscribe(t, t_connect(t), "dn", FX_MSG_START_LATEST, 0);
    tstream *stalled = subscribe(t, t_connect(t), "dn", FX_MSG_START_LATEST, 0);
    stalled->stalled = true;
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    const uint64_t total = 2000, round = 16;
    for (uint64_t i = 0; i < total; i += round) {
        publish_range(t, s, "dn", i, round);
        wait_events(t, &healthy, 1, i + round, 5000);
    }
    assert_int_equal(healthy->events, total);
    assert_int_equal(healthy->gaps + healthy->dups + healthy->bad, 0);
    assert_true(stalled->events < total / 2); /* the stall was real */
    resume_stream(stalled);
    drop_wait w = {stalled, &a, total, 0};
    assert_true(run_until_arg(t, stalled_settled, &w, 5000));
    run_for(t, 50);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, ingress_dropped), 0);
    assert_int_equal(stalled->events + w.dropped, total);
    assert_int_equal(stalled->missed + (total - stalled->next_off), w.dropped);
    assert_true(w.dropped > 0);
    assert_int_equal(stalled->dups + stalled->bad, 0);
    assert_int_equal(DELTA(a, b, subscriber_disconnect), 0);
    t_free(t);
}

static void test_lossless_block_mode_loses_nothing_with_stalled_subscriber(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_1k;
    t_lossless(t);
    t->bo.subscriber_queue_capacity = 16;
    t->bo.subscriber_lane_queue_depth = 2;
    t->bo.subscriber_unacked_bytes = 64u << 10;
    t->bo.quic.stream_window = 128u << 10; /* the broker's window per publish stream */
    t->co.stream_window = 64u << 10;
    t_start(t);
    tstream *healthy = subscribe(t, t_connect(t), "ll", FX_MSG_START_LATEST, 0);
    tstream *stalled = subscribe(t, t_connect(t), "ll", FX_MSG_START_LATEST, 0);
    stalled->stalled = true;
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    const uint64_t total = 3000;
    publish_range(t, s, "ll", 0, total);
    run_for(t, 300);
    /* The stalled subscriber holds back the stream's worker and, through the
     * withheld credit, the publisher: far from everything got through. */
    assert_true(healthy->events < total);
    assert_true(stalled->events < total);
    resume_stream(stalled);
    tstream *both[2] = {healthy, stalled};
    wait_events(t, both, 2, total, 20000);
    fx_metrics_snapshot_take(&b);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(both[i]->events, total);
        assert_int_equal(both[i]->gaps + both[i]->dups + both[i]->bad, 0);
    }
    assert_int_equal(DELTA(a, b, ingress_dropped), 0);
    assert_int_equal(DELTA(a, b, sub_queue_dropped), 0);
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped), 0);
    t_free(t);
}

static void test_subscriber_disconnect_removes_it_and_gauges_return_to_zero(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.ack_on_commit = true;
    t_start(t);
    fx_metrics_snapshot a, mid;
    fx_metrics_snapshot_take(&a);
    tconn *c1 = t_connect(t);
    tconn *c2 = t_connect(t);
    tstream *s1 = subscribe(t, c1, "dc", FX_MSG_START_LATEST, 0);
    tstream *s2 = subscribe(t, c2, "dc", FX_MSG_START_LATEST, 0);
    tstream *s3 = subscribe(t, c2, "dc", FX_MSG_START_LATEST, 0);
    s3->stalled = true; /* keeps envelopes queued in the broker */
    fx_metrics_snapshot_take(&mid);
    assert_int_equal(mid.g.sub_subscriptions - a.g.sub_subscriptions, 3);
    assert_int_equal(mid.g.sub_active_connections - a.g.sub_active_connections, 2);
    tstream *p = authed_stream(t, t_connect(t));
    for (uint64_t i = 0; i < 5; i++)
        publish_acked(t, p, "dc", i, 1, i + 1);
    tstream *two[2] = {s1, s2};
    wait_events(t, two, 2, 5, 5000);
    /* Unsubscribe: the client abandons its event stream. */
    fx_quic_stream_reset(c2->qc, s2->sid, 0);
    run_for(t, 50);
    for (uint64_t i = 5; i < 10; i++)
        publish_acked(t, p, "dc", i, 1, i + 1);
    wait_events(t, &s1, 1, 10, 5000);
    assert_int_equal(s1->gaps, 0);
    assert_int_equal(s2->events, 5);
    /* A client that vanishes: its connection closes with the stalled one. */
    fx_quic_conn_close(c2->qc, 0, "bye");
    fx_quic_conn_close(c1->qc, 0, "bye");
    gauge_wait w = {&a};
    assert_true(run_until_arg(t, gauges_back, &w, 5000));
    t_free(t);
}

/* A subscriber that joins from earliest while the lossless fanout of the
 * stream is parked on a stalled subscriber gets the parked batch from its
 * backlog (it was appended before the fanout started) and not again from the
 * resumed fanout: offsets 0..total-1 once each, on both subscribers. */
static void test_earliest_joiner_of_a_parked_lossless_fanout_gets_no_duplicate(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_1k;
    t_lossless(t);
    t->bo.fanout_batch_size = 1;
    t->bo.subscriber_queue_capacity = 2;
    t->bo.subscriber_lane_queue_depth = 1;
    t->bo.subscriber_unacked_bytes = 1;
    t->co.stream_window = 4096;
    t_start(t);
    tstream *stalled = subscribe(t, t_connect(t), "pj", FX_MSG_START_LATEST, 0);
    stalled->stalled = true;
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    const uint64_t total = 200;
    publish_range(t, s, "pj", 0, total);
    run_for(t, 500);
    fx_metrics_snapshot_take(&b);
    /* The worker holds an unfinished job (its fanout is parked) and stopped
     * taking the rest. */
    assert_true(b.g.ingress_queue_depth - a.g.ingress_queue_depth >= 1);
    uint64_t appended = (uint64_t)DELTA(a, b, publish_ok);
    assert_true(appended < total);
    assert_true(stalled->events < total);
    tstream *late = subscribe(t, t_connect(t), "pj", FX_MSG_START_EARLIEST, 0);
    wait_events(t, &late, 1, appended, 5000);
    assert_int_equal(late->dups, 0);
    resume_stream(stalled);
    tstream *both[2] = {stalled, late};
    wait_events(t, both, 2, total, 20000);
    run_for(t, 50); /* nothing more may come */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(both[i]->events, total);
        assert_int_equal(both[i]->first_off, 0);
        assert_int_equal(both[i]->next_off, total);
        assert_int_equal(both[i]->gaps + both[i]->dups + both[i]->bad, 0);
    }
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, sub_queue_dropped) + DELTA(a, b, subscriber_lane_dropped), 0);
    t_free(t);
}

typedef struct park_wait {
    fx_metrics_snapshot *before;
    uint64_t total;
    int64_t last_ok;  /* appended at the previous look */
    uint64_t same_ns; /* since when it stayed there */
} park_wait;

/* Every publish was admitted, some are still queued at the worker, and the
 * worker appended nothing for 200 ms: its fanout is parked. (No counter
 * says so; a worker that can run goes through its queue much faster.) */
static bool worker_parked(T *t)
{
    park_wait *w = t->arg;
    fx_metrics_snapshot now;
    fx_metrics_snapshot_take(&now);
    int64_t ok = DELTA(*w->before, now, publish_ok);
    uint64_t ns = fx_now_ns();
    if (ok != w->last_ok || w->same_ns == 0) {
        w->last_ok = ok;
        w->same_ns = ns;
        return false;
    }
    return (uint64_t)DELTA(*w->before, now, publish_accepted) == w->total &&
           now.g.ingress_queue_depth - w->before->g.ingress_queue_depth >= 1 &&
           ns - w->same_ns >= 200 * FX_NS_PER_MS;
}

/* The same join on a durable stream whose ring holds 2 messages: the joiner
 * from earliest is registered at the ring's tail while the fanout is parked
 * and reads everything before it from the log (a replay), the parked batch
 * included; the resumed fanout then gives it only what follows. Both
 * subscribers get offsets 0..total-1 once each. */
static void test_earliest_joiner_of_a_parked_durable_fanout_replays_without_duplicate(void **state)
{
    (void)state;
    T *t = t_new();
    static char root[96];
    snprintf(root, sizeof(root), "%s/durable", t->dir);
    assert_int_equal(mkdir(root, 0700), 0);
    t->bo.durable.dir = root;
    t->bo.durable.durable_default = true;
    t->bo.durable.segment_bytes = 1 << 20;
    t->bo.log_capacity = 2;
    t->size_of = size_1k;
    t_lossless(t);
    t->bo.fanout_batch_size = 1;
    t->bo.subscriber_queue_capacity = 2;
    t->bo.subscriber_lane_queue_depth = 1;
    t->bo.subscriber_unacked_bytes = 1;
    t->co.stream_window = 4096;
    t_start(t);
    /* A durable stream is created by a publish (a subscribe never creates
     * one): offset 0, which the stalled subscriber gets from the ring. */
    tstream *s = authed_stream(t, t_connect(t));
    publish_acked(t, s, "pd", 0, 1, 1);
    tstream *stalled = subscribe(t, t_connect(t), "pd", FX_MSG_START_EARLIEST, 0);
    stalled->stalled = true;
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    const uint64_t total = 200;
    publish_range(t, s, "pd", 1, total - 1);
    park_wait pw = {&a, total - 1, 0, 0};
    assert_true(run_until_arg(t, worker_parked, &pw, 10000));
    uint64_t appended = 1 + (uint64_t)pw.last_ok;
    assert_true(appended > 2 && appended < total); /* below the ring: from the log */
    tstream *late = subscribe(t, t_connect(t), "pd", FX_MSG_START_EARLIEST, 0);
    wait_events(t, &late, 1, appended, 5000);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, storage_replays), 1);
    assert_int_equal(DELTA(a, b, publish_ok), appended - 1); /* parked all along */
    assert_int_equal(late->dups, 0);
    resume_stream(stalled);
    tstream *both[2] = {stalled, late};
    wait_events(t, both, 2, total, 20000);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(both[i]->events, total);
        assert_int_equal(both[i]->first_off, 0);
        assert_int_equal(both[i]->next_off, total);
        assert_int_equal(both[i]->gaps + both[i]->dups + both[i]->bad, 0);
    }
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, sub_queue_dropped) + DELTA(a, b, subscriber_lane_dropped), 0);
    assert_int_equal(DELTA(a, b, storage_replay_failures), 0);
    t_free(t);
}

/* Publishes |total| in rounds paced by |healthy|, then lets |stalled| read
 * and waits until each message either reached it or was counted as a drop
 * at checkpoint 5 or 6. Returns the drops. */
static uint64_t stall_and_settle(T *t, tstream *s, const char *stream, tstream *healthy,
                                 tstream *stalled, uint64_t total, fx_metrics_snapshot *a)
{
    const uint64_t round = 16;
    for (uint64_t i = 0; i < total; i += round) {
        publish_range(t, s, stream, i, round);
        wait_events(t, &healthy, 1, i + round, 5000);
    }
    assert_int_equal(healthy->gaps + healthy->dups + healthy->bad, 0);
    assert_true(stalled->events < total / 2); /* the stall was real */
    resume_stream(stalled);
    drop_wait w = {stalled, a, total, 0};
    assert_true(run_until_arg(t, stalled_settled, &w, 5000));
    run_for(t, 50);
    assert_int_equal(stalled->events + w.dropped, total);
    assert_int_equal(stalled->missed + (total - stalled->next_off), w.dropped);
    assert_int_equal(stalled->dups + stalled->bad, 0);
    return w.dropped;
}

static T *t_new_stalling(fx_queue_policy queue, fx_queue_policy lane)
{
    T *t = t_new();
    t->size_of = size_1k;
    t->bo.pub_ingress_wait = true; /* nothing shed upstream of checkpoint 5 */
    t->bo.subscriber_queue_policy = queue;
    t->bo.subscriber_queue_capacity = 64;
    t->bo.subscriber_lane_queue_policy = lane;
    t->bo.subscriber_lane_queue_depth = 4;
    t->bo.subscriber_unacked_bytes = 64u << 10;
    t->co.stream_window = 64u << 10; /* the stalled client's window */
    return t;
}

/* drop_new at checkpoint 5, block at the lane: every message the stalled
 * subscriber lacks is counted once in felix_subscribe_dropped_total (and
 * felix_sub_queue_dropped_total, and its queue_dropped), none as a lane
 * drop. */
static void test_checkpoint5_drops_counted_exactly_apart_from_lane_drops(void **state)
{
    (void)state;
    T *t = t_new_stalling(FX_QUEUE_DROP_NEW, FX_QUEUE_BLOCK);
    t_start(t);
    tstream *healthy = subscribe(t, t_connect(t), "c5", FX_MSG_START_LATEST, 0);
    tstream *stalled = subscribe(t, t_connect(t), "c5", FX_MSG_START_LATEST, 0);
    stalled->stalled = true;
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    const uint64_t total = 2000;
    uint64_t dropped = stall_and_settle(t, s, "c5", healthy, stalled, total, &a);
    fx_metrics_snapshot_take(&b);
    assert_true(dropped > 0);
    assert_int_equal(DELTA(a, b, subscribe_dropped), dropped);
    assert_int_equal(DELTA(a, b, sub_queue_dropped), dropped);
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped), 0);
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped_events), 0);
    assert_int_equal(DELTA(a, b, ingress_dropped), 0);
    sub_info si = sub_info_of(t, stalled->sub_id);
    assert_int_equal(si.queue_dropped, dropped);
    assert_int_equal(si.lane_dropped, 0);
    assert_int_equal(sub_info_of(t, healthy->sub_id).queue_dropped, 0);
    t_free(t);
}

/* The other way round: block at checkpoint 5, drop_new at the lane. The
 * stalled subscriber's losses are lane drops only; felix_subscribe_dropped_total
 * does not move. */
static void test_lane_drops_are_not_counted_as_checkpoint5_drops(void **state)
{
    (void)state;
    T *t = t_new_stalling(FX_QUEUE_BLOCK, FX_QUEUE_DROP_NEW);
    t_start(t);
    tstream *healthy = subscribe(t, t_connect(t), "c6", FX_MSG_START_LATEST, 0);
    tstream *stalled = subscribe(t, t_connect(t), "c6", FX_MSG_START_LATEST, 0);
    stalled->stalled = true;
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    const uint64_t total = 2000;
    uint64_t dropped = stall_and_settle(t, s, "c6", healthy, stalled, total, &a);
    fx_metrics_snapshot_take(&b);
    assert_true(dropped > 0);
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped_events), dropped);
    assert_true(DELTA(a, b, subscriber_lane_dropped) > 0);
    assert_int_equal(DELTA(a, b, subscribe_dropped), 0);
    assert_int_equal(DELTA(a, b, sub_queue_dropped), 0);
    sub_info si = sub_info_of(t, stalled->sub_id);
    assert_int_equal(si.lane_dropped, dropped);
    assert_int_equal(si.queue_dropped, 0);
    t_free(t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_one_publisher_three_subscribers_in_order),
    cmocka_unit_test(test_io_loop_and_two_workers_deliver_every_stream),
    cmocka_unit_test(test_large_payloads_larger_than_the_receive_window_arrive),
    cmocka_unit_test(test_subscribe_from_earliest_gets_backlog_then_live_without_gap),
    cmocka_unit_test(test_cursor_in_future_typed_error),
    cmocka_unit_test(test_shared_frame_encoded_once_for_fanout_3),
    cmocka_unit_test(test_drop_new_stalled_subscriber_counts_drops_exactly),
    cmocka_unit_test(test_lossless_block_mode_loses_nothing_with_stalled_subscriber),
    cmocka_unit_test(test_subscriber_disconnect_removes_it_and_gauges_return_to_zero),
    cmocka_unit_test(test_earliest_joiner_of_a_parked_lossless_fanout_gets_no_duplicate),
    cmocka_unit_test(test_earliest_joiner_of_a_parked_durable_fanout_replays_without_duplicate),
    cmocka_unit_test(test_checkpoint5_drops_counted_exactly_apart_from_lane_drops),
    cmocka_unit_test(test_lane_drops_are_not_counted_as_checkpoint5_drops),
};

FX_TEST_MAIN(tests)
