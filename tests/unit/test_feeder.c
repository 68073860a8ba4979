/* Unit tests for the subscription feeder (feeder.c, checkpoint 5 -> 6) on its
 * own: a real fx_stream feeds one subscription built as subscribe.c builds it
 * (sub_fixture.h), and the frame lists the feeder pushes are read straight
 * off its lane queue, with no writer and no QUIC. Backlog then live in one
 * offset order, lists bounded by the batch limits, shared frames for whole
 * envelopes, the block lane's park and resume with the held list, the FIN
 * request of an ended stream, and the coalescing delay. */
/* fx-test-libs: fx_broker fx_quic fx_wire fx_base */
#include "sub_fixture.h"

#include "broker/feeder.h"
#include "broker/lane.h"
#include "broker/stream.h"
#include "broker/sub.h"
#include "felix/error.h"

static fx_broker_opts want;

static void tune(fx_broker_opts *o)
{
    o->event_batch_max_events = want.event_batch_max_events;
    o->fanout_batch_size = want.fanout_batch_size;
    o->event_batch_max_bytes = want.event_batch_max_bytes;
    o->subscriber_max_bytes_per_write = want.subscriber_max_bytes_per_write;
    o->event_batch_max_delay_ns = want.event_batch_max_delay_ns;
    o->subscriber_lane_queue_policy = want.subscriber_lane_queue_policy;
    o->subscriber_lane_queue_depth = want.subscriber_lane_queue_depth;
    o->subscriber_writer_lanes = 1;
}

/* A fixture with the default options but those the test sets in |want|. */
static fix *feeder_fix(void)
{
    return fix_new(tune);
}

static void defaults(void)
{
    fx_broker_opts_default(&want);
    want.subscriber_lane_queue_depth = 64;
}

static fx_stream *mkstream(void)
{
    fx_stream_opts o = {.handle_id = 5,
                        .log_capacity = 1024,
                        .log_capacity_bytes = 1u << 20,
                        .sub_queue_capacity = 256,
                        .sub_queue_policy = FX_QUEUE_DROP_NEW};
    fx_stream *s = NULL;
    assert_int_equal(fx_stream_new(&s, &o), 0);
    return s;
}

static char bytes[4096];

/* Appends |n| messages of |size| bytes as one batch. */
static void publish(fx_stream *s, uint32_t n, size_t size)
{
    fx_wire_slice p[64];
    assert_true(n <= 64 && size <= sizeof(bytes));
    for (uint32_t i = 0; i < n; i++)
        p[i] = (fx_wire_slice){(const uint8_t *)bytes, size};
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, p, n, 0, &res), 0);
}

/* A registered, active subscription of |st| from |start|, fed by the real
 * feeder (its wake, task and delay timer). */
static fxb_sub *feeder_sub(fix *f, fx_stream *st, fx_start start)
{
    fxb_sub *sub = fix_sub(f, 1);
    fxb_feeder_init(sub); /* the real feed task, not the fixture's count */
    sub->feed.stream = st;
    fx_subscribe_opts so = {.subscription_id = sub->id, .on_wake = fxb_feeder_wake, .user = sub};
    assert_int_equal(fx_stream_subscribe(st, &start, &so, &sub->feed.sub, &sub->feed.backlog,
                                         &sub->feed.available),
                     0);
    sub->feed.registered = true;
    return sub;
}

static void feeder_sub_free(fix *f, fxb_sub *sub)
{
    fix_drain(f);
    fx_loop_timer_cancel(f->loop, &sub->feed.delay_timer);
    fx_backlog_free(&sub->feed.backlog);
    fx_coalescer_deinit(&sub->feed.co);
    fx_stream_unsubscribe(sub->feed.stream, sub->feed.sub);
    fix_sub_free(sub);
}

/* Runs the feeder once (as a wake would) and what it posts after. */
static void feed(fix *f, fxb_sub *sub)
{
    fxb_sub_post(sub, f->loop, &sub->feed.feed_task);
    fix_drain(f);
}

/* Takes the next list off the lane queue (as the writer would, releasing its
 * slot) and checks its offsets and size. */
static void expect_list(fxb_sub *sub, uint64_t first, uint32_t events)
{
    void *item;
    assert_int_equal(fx_queue_pop(&sub->lane.q, &item), 0);
    fx_frame_list *l = item;
    assert_int_equal(l->first_offset, first);
    assert_int_equal(l->events, events);
    assert_int_equal(l->end_offset, first + events);
    assert_true(l->n >= 1);
    fxb_frame_list_free(l);
    fxb_lane_release(sub->lane.lane);
}

static void expect_no_list(fxb_sub *sub)
{
    assert_int_equal(fx_queue_depth(&sub->lane.q), 0);
}

/* ---- order and limits ---------------------------------------------------------- */

/* From earliest: the backlog (retained before the subscribe) then the live
 * queue, one offset order, in lists of at most event_batch_max_events. */
static void test_backlog_then_live_in_lists_of_max_events(void **state)
{
    defaults();
    want.event_batch_max_events = 4;
    fix *f = feeder_fix();
    fx_stream *st = mkstream();
    for (int i = 0; i < 5; i++)
        publish(st, 1, 10);
    fxb_sub *sub = feeder_sub(f, st, (fx_start){.kind = FX_START_EARLIEST});
    assert_int_equal(sub->feed.backlog.n, 5);
    for (int i = 0; i < 3; i++)
        publish(st, 1, 10); /* live: the wake posts the feeder */
    fix_drain(f);
    expect_list(sub, 0, 4);
    expect_list(sub, 4, 4);
    expect_no_list(sub);
    assert_true(f->writer_kicks >= 1);
    feeder_sub_free(f, sub);
    fx_stream_free(st);
    fix_free(f);
}

/* fanout_batch_size 1 (or 0) turns coalescing off: one message per list. */
static void test_fanout_batch_size_1_sends_one_message_per_list(void **state)
{
    for (uint32_t size = 0; size <= 1; size++) {
        defaults();
        want.fanout_batch_size = size;
        fix *f = feeder_fix();
        fx_stream *st = mkstream();
        fxb_sub *sub = feeder_sub(f, st, (fx_start){.kind = FX_START_LATEST});
        publish(st, 3, 10);
        fix_drain(f);
        for (uint64_t i = 0; i < 3; i++)
            expect_list(sub, i, 1);
        expect_no_list(sub);
        feeder_sub_free(f, sub);
        fx_stream_free(st);
        fix_free(f);
    }
}

/* A list is one write: bounded by the smaller of event_batch_max_bytes and
 * subscriber_max_bytes_per_write (whichever is smaller), one message always
 * going. */
static void test_list_bytes_bounded_by_the_smaller_write_limit(void **state)
{
    size_t limits[2][2] = {{2500, 1u << 20}, {1u << 20, 2500}};
    for (int k = 0; k < 2; k++) {
        defaults();
        want.event_batch_max_bytes = limits[k][0];
        want.subscriber_max_bytes_per_write = limits[k][1];
        fix *f = feeder_fix();
        fx_stream *st = mkstream();
        fxb_sub *sub = feeder_sub(f, st, (fx_start){.kind = FX_START_LATEST});
        for (int i = 0; i < 10; i++)
            publish(st, 1, 1000);
        fix_drain(f);
        uint64_t next = 0, lists = 0;
        void *item;
        while (fx_queue_pop(&sub->lane.q, &item) == 0) {
            fx_frame_list *l = item;
            assert_int_equal(l->first_offset, next);
            assert_true(l->bytes <= 2500);
            next = l->end_offset;
            lists++;
            fxb_frame_list_free(l);
            fxb_lane_release(sub->lane.lane);
        }
        assert_int_equal(next, 10);
        assert_true(lists >= 4); /* two 1000-byte messages per list at most */
        feeder_sub_free(f, sub);
        fx_stream_free(st);
        fix_free(f);
    }
}

/* ---- frames ------------------------------------------------------------------ */

/* A whole envelope goes as its cached shared frame; a start inside a batch
 * needs a per-subscriber frame for the rest of it. */
static void test_whole_envelopes_use_the_shared_frame(void **state)
{
    defaults();
    fix *f = feeder_fix();
    fx_stream *st = mkstream();
    publish(st, 3, 10);
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    fxb_sub *whole = feeder_sub(f, st, (fx_start){.kind = FX_START_EARLIEST});
    feed(f, whole);
    expect_list(whole, 0, 3);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, sub_shared_frame_encodes), 1);
    assert_int_equal(DELTA(m0, m1, sub_frame_encodes), 0);
    fxb_sub *mid = feeder_sub(f, st, (fx_start){.kind = FX_START_OFFSET, .offset = 1});
    feed(f, mid);
    expect_list(mid, 1, 2);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, sub_shared_frame_encodes), 1);
    assert_int_equal(DELTA(m0, m1, sub_frame_encodes), 1);
    feeder_sub_free(f, whole);
    feeder_sub_free(f, mid);
    fx_stream_free(st);
    fix_free(f);
}

/* ---- the lane ---------------------------------------------------------------- */

/* On a full block lane the feeder stops with the list it built held; the
 * writer's release resumes it and the held list goes first, in order. */
static void test_parks_on_a_full_block_lane_and_resumes_with_the_held_list(void **state)
{
    defaults();
    want.fanout_batch_size = 1;
    want.subscriber_lane_queue_policy = FX_QUEUE_BLOCK;
    want.subscriber_lane_queue_depth = 1;
    fix *f = feeder_fix();
    fx_stream *st = mkstream();
    fxb_sub *sub = feeder_sub(f, st, (fx_start){.kind = FX_START_LATEST});
    publish(st, 1, 10);
    publish(st, 1, 10);
    publish(st, 1, 10);
    fix_drain(f);
    assert_true(sub->feed.lane_parked);
    assert_non_null(sub->feed.held);
    assert_int_equal(sub->feed.held->first_offset, 1);
    for (uint64_t i = 0; i < 3; i++) {
        expect_list(sub, i, 1); /* the release resumes the feeder */
        fix_drain(f);
    }
    expect_no_list(sub);
    assert_null(sub->feed.held);
    assert_false(sub->feed.lane_parked);
    feeder_sub_free(f, sub);
    fx_stream_free(st);
    fix_free(f);
}

/* A deleted stream's subscription hands everything to its lane, then asks
 * the writer for the FIN; not before. */
static void test_ending_subscription_requests_fin_after_its_last_list(void **state)
{
    defaults();
    fix *f = feeder_fix();
    fx_stream *st = mkstream();
    fxb_sub *sub = feeder_sub(f, st, (fx_start){.kind = FX_START_LATEST});
    atomic_store(&sub->active, false); /* its event stream is not open yet */
    publish(st, 2, 10);
    fix_drain(f);
    expect_no_list(sub);
    sub->feed.ending = true;
    feed(f, sub);
    expect_no_list(sub); /* inactive: not fed, no FIN either */
    assert_false(atomic_load(&sub->lane.fin_req));
    atomic_store(&sub->active, true);
    feed(f, sub);
    expect_list(sub, 0, 2);
    assert_true(atomic_load(&sub->lane.fin_req));
    feeder_sub_free(f, sub);
    fx_stream_free(st);
    fix_free(f);
}

/* ---- coalescing delay ----------------------------------------------------------- */

/* With event_batch_max_delay, a feeder woken by less than a full batch waits
 * (its timer armed, nothing pushed) and sends what it has when the timer
 * fires; a full batch goes at once. */
static void test_coalescing_delay_holds_a_partial_batch_until_its_timer(void **state)
{
    defaults();
    want.event_batch_max_events = 4;
    want.event_batch_max_delay_ns = 50 * FX_NS_PER_MS;
    fix *f = feeder_fix();
    fx_stream *st = mkstream();
    fxb_sub *sub = feeder_sub(f, st, (fx_start){.kind = FX_START_LATEST});
    publish(st, 1, 10);
    fix_drain(f);
    expect_no_list(sub);
    assert_true(fx_timer_is_armed(&sub->feed.delay_timer));
    fx_loop_timer_cancel(f->loop, &sub->feed.delay_timer); /* as the loop does when it fires */
    fxb_feeder_delay(f->loop, &sub->feed.delay_timer, sub);
    fix_drain(f);
    expect_list(sub, 0, 1);
    publish(st, 4, 10); /* a full batch: no wait */
    fix_drain(f);
    expect_list(sub, 1, 4);
    assert_false(fx_timer_is_armed(&sub->feed.delay_timer));
    feeder_sub_free(f, sub);
    fx_stream_free(st);
    fix_free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_backlog_then_live_in_lists_of_max_events),
    cmocka_unit_test(test_fanout_batch_size_1_sends_one_message_per_list),
    cmocka_unit_test(test_list_bytes_bounded_by_the_smaller_write_limit),
    cmocka_unit_test(test_whole_envelopes_use_the_shared_frame),
    cmocka_unit_test(test_parks_on_a_full_block_lane_and_resumes_with_the_held_list),
    cmocka_unit_test(test_ending_subscription_requests_fin_after_its_last_list),
    cmocka_unit_test(test_coalescing_delay_holds_a_partial_batch_until_its_timer),
};
FX_TEST_MAIN(tests)
