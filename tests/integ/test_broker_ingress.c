/* Integration tests of ingress (ingress.c, checkpoints 3 and 4): the
 * reservation each frame header takes and its frame read timeout, admission
 * to the worker queue under each policy, requests parked or discarded behind
 * a park, and commit acks behind a parked worker. */
/* fx-test-libs: fx_broker fx_quic fx_wire fx_server fx_base */
#include "broker/test_hooks.h"
#include "integ/broker_client.h"

static void test_client_fin_on_publish_stream_gets_fin_after_all_frames_handled(void **state)
{
    (void)state;
    T *t = t_new_parking();
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "cf", FX_MSG_START_LATEST, 0);
    sub->stalled = true;
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    /* Whole frames of one read share a job, so the pipeline holds more than
     * a thousand of them: send a burst the size of the stream window. */
    const uint64_t total = 4000;
    publish_range(t, s, "cf", 0, total - 1);
    send_buf(s, binary_publish(t, "cf", total - 1, 1, true, 7)); /* acked: a reply before FIN */
    assert_true(run_until_arg(t, out_empty, s->tc, 5000));
    assert_int_equal(fx_quic_stream_shutdown(s->tc->qc, s->sid), 0);
    run_for(t, 300);
    /* Frames wait behind the stalled subscriber: no FIN may come yet. */
    assert_true(sub->events < total);
    assert_false(s->fin);
    assert_false(s->closed);
    resume_stream(sub);
    assert_true(run_until_arg(t, stream_finished, s, 20000));
    assert_true(s->fin);
    assert_false(s->reset);
    fx_metrics_snapshot_take(&b);
    /* Everything sent before the FIN was handled before the broker's FIN:
     * the unacked ones admitted (Backpressure), the acked one admitted or,
     * its policy being Fail, refused with "publish queue full". */
    uint64_t accepted = (uint64_t)DELTA(a, b, publish_accepted);
    assert_true(accepted >= total - 1);
    assert_int_equal(accepted + (uint64_t)DELTA(a, b, publish_error), total);
    assert_int_equal(DELTA(a, b, ingress_backpressure_cancelled), 0);
    tframe *f = next_reply(t, s); /* written before the FIN */
    assert_int_equal(f->flags, FX_FLAG_PUBLISH_ACK);
    fx_wire_publish_ack ack;
    assert_int_equal(fx_wire_publish_ack_decode(f->body, f->len, &ack, NULL), 0);
    assert_int_equal(ack.ok, accepted == total);
    assert_int_equal(ack.request_id, 7);
    tframe_free(f);
    assert_null(s->head);
    wait_events(t, &sub, 1, accepted, 20000);
    assert_int_equal(sub->gaps + sub->dups + sub->bad, 0);
    t_free(t);
}

static void test_connection_close_counts_every_publish_discarded_behind_a_park(void **state)
{
    (void)state;
    T *t = t_new_parking();
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "cc", FX_MSG_START_LATEST, 0);
    sub->stalled = true;
    tconn *pc = t_connect(t);
    tstream *s = authed_stream(t, pc);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    /* Whole frames of one read share a job, so the pipeline holds more than
     * a thousand of them: send a burst the size of the stream window. */
    const uint64_t total = 4000;
    publish_range(t, s, "cc", 0, total);
    assert_true(run_until_arg(t, out_empty, pc, 5000));
    run_for(t, 300); /* the broker has received the burst; most of it waits */
    fx_quic_conn_close(pc->qc, 0, "bye");
    cancel_wait w = {&a};
    assert_true(run_until_arg(t, parked_cancelled, &w, 5000));
    run_for(t, 100);
    fx_metrics_snapshot_take(&b);
    uint64_t accepted = (uint64_t)DELTA(a, b, publish_accepted);
    uint64_t cancelled = (uint64_t)DELTA(a, b, ingress_backpressure_cancelled);
    /* The parked publish and every whole one buffered behind it are counted:
     * far more than the one parked job, and never more than were sent. */
    assert_true(cancelled > 100);
    assert_true(accepted + cancelled <= total);
    assert_int_equal(DELTA(a, b, publish_dropped), 0);
    resume_stream(sub);
    wait_events(t, &sub, 1, accepted, 10000);
    run_for(t, 50);
    assert_int_equal(sub->events, accepted);
    t_free(t);
}

static void test_ingress_drop_with_queue_depth_1_counts_exactly(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.pub_queue_depth = 1;
    t->bo.pub_ingress_wait = false;
    t->bo.subscriber_queue_policy = FX_QUEUE_BLOCK;
    t->bo.subscriber_lane_queue_policy = FX_QUEUE_BLOCK;
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "id", FX_MSG_START_LATEST, 0);
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    const uint64_t total = 500;
    publish_range(t, s, "id", 0, total);
    t->offsets_renumbered = true;
    ingress_wait w = {&a, total};
    assert_true(run_until_arg(t, ingress_done, &w, 10000));
    fx_metrics_snapshot_take(&b);
    uint64_t accepted = (uint64_t)DELTA(a, b, publish_accepted);
    uint64_t dropped = (uint64_t)DELTA(a, b, ingress_dropped);
    wait_events(t, &sub, 1, accepted, 5000);
    run_for(t, 50);
    assert_true(dropped > 0);
    assert_int_equal(dropped, (uint64_t)DELTA(a, b, publish_dropped));
    assert_int_equal(sub->events, accepted);
    assert_int_equal(total - sub->events, dropped);
    assert_int_equal(sub->dups + sub->bad, 0);
    /* Offsets are per stream: what was admitted is contiguous. */
    assert_int_equal(sub->gaps, 0);
    t_free(t);
}

/* Publish batch frames shed at checkpoint 4: the publish counters count
 * frames, felix_broker_ingress_dropped_messages_total counts every message
 * in them, which is what the subscriber misses. */
static void test_ingress_drop_of_batch_frames_counts_every_message(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.pub_queue_depth = 1;
    t->bo.pub_ingress_wait = false;
    t->bo.subscriber_queue_policy = FX_QUEUE_BLOCK;
    t->bo.subscriber_lane_queue_policy = FX_QUEUE_BLOCK;
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "ib", FX_MSG_START_LATEST, 0);
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    const uint64_t frames = 300, per = 7;
    for (uint64_t i = 0; i < frames; i++)
        send_buf(s, binary_publish(t, "ib", i * per, (uint32_t)per, false, 0));
    t->offsets_renumbered = true;
    ingress_wait w = {&a, frames};
    assert_true(run_until_arg(t, ingress_done, &w, 10000));
    fx_metrics_snapshot_take(&b);
    uint64_t dropped = (uint64_t)DELTA(a, b, ingress_dropped);
    uint64_t dropped_msgs = (uint64_t)DELTA(a, b, ingress_dropped_messages);
    uint64_t accepted = (uint64_t)DELTA(a, b, publish_accepted);
    assert_true(dropped > 0);
    assert_int_equal(dropped, (uint64_t)DELTA(a, b, publish_dropped));
    assert_int_equal(dropped_msgs, dropped * per);
    wait_events(t, &sub, 1, accepted * per, 5000);
    run_for(t, 50);
    /* What the subscriber missed is exactly the messages counted shed. */
    assert_int_equal(frames * per - sub->events, dropped_msgs);
    assert_int_equal(sub->dups + sub->bad + sub->gaps, 0);
    t_free(t);
}

/* A broker with ack_on_commit whose worker queue (depth 1) and fanout chain
 * (one slot each) park behind a stalled subscriber of |stream|: publishes
 * wait at admission under the Wait policy for |wait_ns|. Returns the
 * publishing stream; |*psub| is the stalled subscription. */
static tstream *parked_worker_start(T *t, const char *stream, uint64_t wait_ns, tstream **psub)
{
    t->size_of = size_4k;
    t->bo.ack_on_commit = true;
    t->bo.pub_queue_depth = 1;
    t->bo.publish_queue_wait_timeout_ns = wait_ns;
    t->bo.fanout_batch_size = 1;
    t->bo.subscriber_queue_policy = FX_QUEUE_BLOCK;
    t->bo.subscriber_queue_capacity = 1;
    t->bo.subscriber_lane_queue_policy = FX_QUEUE_BLOCK;
    t->bo.subscriber_lane_queue_depth = 1;
    t->bo.subscriber_unacked_bytes = 1;
    t->co.stream_window = 1024; /* smaller than one event frame */
    t_start(t);
    *psub = subscribe(t, t_connect(t), stream, FX_MSG_START_LATEST, 0);
    (*psub)->stalled = true;
    return authed_stream(t, t_connect(t));
}

/* Reads the |n| acks of requests 1..n on |s|: ok ones first, then only
 * refusals with text |want|. Counts them in |*pok| and |*pfailed|. */
static void read_acks(T *t, tstream *s, uint64_t n, const char *want, uint64_t *pok,
                      uint64_t *pfailed)
{
    *pok = *pfailed = 0;
    for (uint64_t i = 0; i < n; i++) {
        tframe *f = next_reply(t, s);
        fx_wire_publish_ack ack;
        assert_int_equal(fx_wire_publish_ack_decode(f->body, f->len, &ack, NULL), 0);
        assert_int_equal(ack.request_id, i + 1);
        if (ack.ok) {
            assert_int_equal(*pfailed, 0); /* ok only before the first refusal */
            (*pok)++;
        } else {
            assert_int_equal(ack.message.len, strlen(want));
            assert_memory_equal(ack.message.ptr, want, strlen(want));
            (*pfailed)++;
        }
        tframe_free(f);
    }
}

/* ack_on_commit = Wait at checkpoint 4: with the stream's worker parked by a
 * stalled block-mode subscriber, acked publishes wait for a queue slot at
 * most publish_queue_wait_timeout and then fail with the documented text.
 * Replies stay in request order: a prefix of ok, then the timeouts. */
static void test_commit_acks_wait_then_time_out_behind_a_parked_worker(void **state)
{
    (void)state;
    T *t = t_new();
    tstream *sub;
    tstream *s = parked_worker_start(t, "wt", 300 * FX_NS_PER_MS, &sub);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    /* The chain absorbs six (writer, lane, held list, subscriber queue, the
     * parked fanout, the worker queue); each later one waits its own 300 ms
     * in turn, so the last has timed out well before 1.2 s. */
    const uint64_t n = 8;
    for (uint64_t i = 0; i < n; i++) {
        send_buf(s, binary_publish(t, "wt", i, 1, true, i + 1));
        run_for(t, 5); /* its own datagram: frames of one read would share a job */
    }
    run_for(t, 1200);
    resume_stream(sub);
    uint64_t ok, timed_out;
    read_acks(t, s, n, "publish enqueue timed out", &ok, &timed_out);
    wait_events(t, &sub, 1, ok, 5000);
    run_for(t, 50);
    fx_metrics_snapshot_take(&b);
    assert_true(ok >= 1);
    assert_true(timed_out >= 1);
    assert_int_equal(sub->events, ok);
    assert_int_equal(sub->gaps + sub->dups + sub->bad, 0);
    assert_int_equal(DELTA(a, b, ingress_backpressure_cancelled), timed_out);
    assert_int_equal(DELTA(a, b, publish_ok), ok);
    t_free(t);
}

/* When the Wait deadline timer cannot be armed (out of memory, through the
 * fault hook) a publish that parks at the full worker queue is not left to
 * wait for a resume that may never come: it is answered at once with the
 * reason and counted, long before publish_queue_wait_timeout_ms, and the
 * publishes admitted before it are delivered. */
static void test_wait_timer_arm_failure_fails_the_parked_publish_at_once(void **state)
{
    (void)state;
    T *t = t_new();
    tstream *sub;
    tstream *s = parked_worker_start(t, "wf", 60ull * FX_NS_PER_S, &sub); /* never reached */
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    assert_int_equal(fx_broker_test_fail_timer_arms(FX_BROKER_TEST_TIMER_INGRESS_WAIT, 1000), 0);
    const uint64_t n = 8;
    for (uint64_t i = 0; i < n; i++) {
        send_buf(s, binary_publish(t, "wf", i, 1, true, i + 1));
        run_for(t, 5);
    }
    run_for(t, 300);
    assert_int_equal(fx_broker_test_fail_timer_arms(FX_BROKER_TEST_TIMER_INGRESS_WAIT, 0), 0);
    resume_stream(sub);
    uint64_t ok, failed;
    read_acks(t, s, n, "publish admission wait failed: out of memory for its timer", &ok, &failed);
    wait_events(t, &sub, 1, ok, 5000);
    run_for(t, 50);
    fx_metrics_snapshot_take(&b);
    assert_true(ok >= 1);
    assert_true(failed >= 1);
    assert_int_equal(sub->events, ok);
    assert_int_equal(DELTA(a, b, broker_timer_arm_failures), failed);
    assert_int_equal(DELTA(a, b, publish_ok), ok);
    t_free(t);
}

static void test_header_reserves_budget_before_body(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_10k;
    t_start(t);
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_buf *f = binary_publish(t, "hr", 0, 1, true, 1);
    const size_t part = FX_WIRE_HEADER_LEN + 100;
    send_bytes(s, fx_buf_data(f), part);
    /* The header alone took the whole announced body from the budget. */
    expect_reserved(t, &a, body_len(f));
    assert_null(s->head);
    send_bytes(s, fx_buf_data(f) + part, fx_buf_len(f) - part);
    expect_ack(t, s, 1);
    expect_reserved(t, &a, 0); /* the job took it, and released it when done */
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_accepted), 1);
    assert_int_equal(DELTA(a, b, ingress_reserve_waited), 0);
    assert_int_equal(DELTA(a, b, broker_frame_timeouts), 0);
    fx_buf_unref(f);
    t_free(t);
}

static void test_trickling_frame_times_out_and_releases_budget(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_10k;
    t->bo.frame_read_timeout_ns = 200 * FX_NS_PER_MS;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_buf *f = binary_publish(t, "tt", 0, 1, true, 1);
    send_bytes(s, fx_buf_data(f), FX_WIRE_HEADER_LEN + 10);
    expect_reserved(t, &a, body_len(f));
    send_bytes(s, fx_buf_data(f) + FX_WIRE_HEADER_LEN + 10, 10); /* a trickle */
    assert_true(run_until_arg(t, stream_finished, s, 5000));
    assert_true(s->reset);
    assert_null(s->head);
    expect_reserved(t, &a, 0);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, broker_frame_timeouts), 1);
    assert_int_equal(DELTA(a, b, broker_stream_errors), 1);
    assert_int_equal(DELTA(a, b, publish_accepted), 0);
    /* The connection still serves whole frames on another stream. */
    tstream *s2 = authed_stream(t, c);
    publish_acked(t, s2, "tt", 0, 1, 2);
    assert_false(c->closed);
    fx_buf_unref(f);
    t_free(t);
}

static void test_reservation_waits_when_budget_exhausted_then_proceeds(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_10k;
    /* Room for one 10 KB frame at a time, whole broker. */
    t->bo.pub_inflight_bytes = 16u << 10;
    t->bo.pub_conn_inflight_bytes = 16u << 10;
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "rw", FX_MSG_START_LATEST, 0);
    tstream *s1 = authed_stream(t, t_connect(t));
    tstream *s2 = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_buf *f1 = binary_publish(t, "rw", 0, 1, true, 1);
    const size_t part = FX_WIRE_HEADER_LEN + 100;
    send_bytes(s1, fx_buf_data(f1), part);
    expect_reserved(t, &a, body_len(f1));
    /* The second connection's whole frame finds the budget held. */
    fx_buf *f2 = binary_publish(t, "rw", 1, 1, true, 2);
    int64_t n2 = body_len(f2);
    send_buf(s2, f2);
    waited_is w = {&a};
    assert_true(run_until_arg(t, reserve_waited, &w, 5000));
    run_for(t, 100);
    assert_null(s2->head); /* not admitted, not refused: waiting */
    assert_int_equal(sub->events, 0);
    send_bytes(s1, fx_buf_data(f1) + part, fx_buf_len(f1) - part);
    expect_ack(t, s1, 1);
    expect_ack(t, s2, 2); /* admitted once the first job released its bytes */
    wait_events(t, &sub, 1, 2, 5000);
    assert_int_equal(sub->gaps + sub->dups + sub->bad, 0);
    expect_reserved(t, &a, 0);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_accepted), 2);
    assert_int_equal(DELTA(a, b, publish_error), 0);
    assert_int_equal(DELTA(a, b, ingress_reserve_waited), 1);
    assert_int_equal(DELTA(a, b, ingress_bytes_full) + DELTA(a, b, ingress_conn_bytes_full), 0);
    assert_int_equal(DELTA(a, b, broker_frame_timeouts), 0);
    assert_true(n2 > (16 << 10) - body_len(f1)); /* it really could not fit */
    fx_buf_unref(f1);
    t_free(t);
}

typedef struct acks_wait {
    tstream *s;
    uint64_t n;
} acks_wait;

static bool acks_arrived(T *t)
{
    acks_wait *w = t->arg;
    uint64_t n = 0;
    for (tframe *f = w->s->head; f != NULL; f = f->next)
        n++;
    return n >= w->n;
}

/* Takes the replies queued on |s| and checks they are the ok acks of
 * request ids |*next|, |*next| + 1, ... Returns how many there were. */
static uint64_t take_acks(tstream *s, uint64_t *next)
{
    uint64_t n = 0;
    while (s->head != NULL) {
        tframe *f = s->head;
        s->head = f->next;
        if (s->head == NULL)
            s->tail = NULL;
        assert_int_equal(f->flags, FX_FLAG_PUBLISH_ACK);
        fx_wire_publish_ack a;
        assert_int_equal(fx_wire_publish_ack_decode(f->body, f->len, &a, NULL), 0);
        assert_true(a.ok);
        assert_int_equal(a.request_id, (*next)++);
        tframe_free(f);
        n++;
    }
    return n;
}

/* A job admitted to its worker's queue (checkpoint 4) keeps the bytes its
 * frame header reserved (checkpoint 3) until the worker is done with it.
 * The budget fits two 10 KB frames: with the worker parked on a stalled
 * lossless subscriber, one job parked at the fanout and one queued behind it
 * hold the budget, so the next frame's header waits: no ack, counted in
 * felix_broker_ingress_reserve_waited_total. felix_broker_ingress_queue_depth
 * shows the two jobs, and felix_broker_ingress_reserved_bytes shows nothing
 * held twice: the jobs' bytes left the header reservations when the jobs took
 * them, and a waiting header holds none. Everything goes through once the
 * subscriber reads again. */
static void test_queued_job_keeps_its_header_bytes_so_the_next_header_waits(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_10k;
    t_lossless(t);
    t->bo.pub_inflight_bytes = 25u << 10;
    t->bo.pub_conn_inflight_bytes = 25u << 10;
    t->bo.pub_queue_depth = 4; /* room: the queued job is admitted, not parked */
    t->bo.fanout_batch_size = 1;
    t->bo.subscriber_queue_capacity = 1;
    t->bo.subscriber_lane_queue_depth = 1;
    t->bo.subscriber_unacked_bytes = 1;
    t->co.stream_window = 1024; /* smaller than one event frame */
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "qh", FX_MSG_START_LATEST, 0);
    sub->stalled = true;
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    const uint64_t total = 16;
    for (uint64_t i = 0; i < total; i++)
        send_buf(s, binary_publish(t, "qh", i, 1, true, i + 1));
    run_for(t, 500);
    uint64_t next = 1;
    uint64_t acked = take_acks(s, &next);
    run_for(t, 300); /* still stalled: nothing more is admitted */
    assert_int_equal(take_acks(s, &next), 0);
    assert_true(acked >= 2 && acked < total);
    fx_metrics_snapshot_take(&b);
    assert_true(DELTA(a, b, ingress_reserve_waited) >= 1);
    assert_int_equal(b.g.ingress_queue_depth - a.g.ingress_queue_depth, 2);
    assert_int_equal(b.g.ingress_reserved_bytes - a.g.ingress_reserved_bytes, 0);
    /* The two queued jobs (10,000-byte payloads) still hold their header's bytes of
     * the process-wide budget (GET /v1/pipeline: checkpoint 3 "held"). */
    assert_true(fx_broker_budget_in_use(t->b) >= 2 * size_10k(0));
    assert_int_equal(DELTA(a, b, publish_error) + DELTA(a, b, ingress_rejected), 0);
    resume_stream(sub);
    acks_wait w = {s, total - acked};
    assert_true(run_until_arg(t, acks_arrived, &w, 20000));
    assert_int_equal(take_acks(s, &next), total - acked);
    wait_events(t, &sub, 1, total, 20000);
    assert_int_equal(sub->gaps + sub->dups + sub->bad, 0);
    expect_reserved(t, &a, 0);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(b.g.ingress_queue_depth - a.g.ingress_queue_depth, 0);
    assert_int_equal(DELTA(a, b, publish_accepted), total);
    t_free(t);
}

/* ---- frames of one read merged into one job ------------------------------------------ */

/* One buffer holding |n| frames back to back (taken), so they leave in one
 * datagram and reach the broker in one read. */
static fx_buf *frames_join(fx_buf **frames, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += fx_buf_len(frames[i]);
    fx_buf *b;
    assert_int_equal(fx_buf_new(&b, total), 0);
    uint8_t *p = fx_buf_data_mut(b);
    for (size_t i = 0; i < n; i++) {
        memcpy(p, fx_buf_data(frames[i]), fx_buf_len(frames[i]));
        p += fx_buf_len(frames[i]);
        fx_buf_unref(frames[i]);
    }
    return b;
}

static uint64_t event_frames(const tstream *sub)
{
    return sub->shared_frames + sub->sub_frames;
}

/* A job is one envelope, which reaches a subscriber as one event frame: five
 * frames sent in one datagram arrive as one frame of five events, while
 * frames sent one datagram each arrive one frame each. */
static void test_whole_frames_of_one_read_share_one_job(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "mj", FX_MSG_START_LATEST, 0);
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_buf *fr[5];
    for (uint64_t i = 0; i < 5; i++)
        fr[i] = binary_publish(t, "mj", i, 1, false, 0);
    send_buf(s, frames_join(fr, 5));
    wait_events(t, &sub, 1, 5, 5000);
    assert_int_equal(event_frames(sub), 1);
    for (uint64_t i = 5; i < 8; i++) {
        send_buf(s, binary_publish(t, "mj", i, 1, false, 0));
        wait_events(t, &sub, 1, i + 1, 5000);
    }
    assert_int_equal(event_frames(sub), 1 + 3);
    assert_int_equal(sub->gaps + sub->dups + sub->bad, 0);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_accepted), 8);
    assert_int_equal(DELTA(a, b, publish_ok), 8);
    expect_reserved(t, &a, 0);
    t_free(t);
}

static void expect_ack_error(T *t, tstream *s, uint64_t rid, const char *want)
{
    tframe *f = next_reply(t, s);
    assert_int_equal(f->flags, FX_FLAG_PUBLISH_ACK);
    fx_wire_publish_ack ack;
    assert_int_equal(fx_wire_publish_ack_decode(f->body, f->len, &ack, NULL), 0);
    assert_false(ack.ok);
    assert_int_equal(ack.request_id, rid);
    assert_int_equal(ack.message.len, strlen(want));
    assert_memory_equal(ack.message.ptr, want, strlen(want));
    tframe_free(f);
}

/* Acked frames merged into one job are answered one each, in request order,
 * with a refused frame (a stream name the registry refuses) between them:
 * it gets its error in its place and neither drops nor reorders its
 * neighbours, which still share their job. */
static void test_merged_acks_answer_each_frame_in_order_around_a_refusal(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "ma", FX_MSG_START_LATEST, 0);
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_buf *fr[6] = {
        binary_publish(t, "ma", 0, 1, true, 1),        binary_publish(t, "bad/name", 0, 1, true, 2),
        binary_publish(t, "ma", 1, 1, true, 3),        binary_publish(t, "ma", 2, 1, false, 0),
        binary_publish(t, "bad/name", 0, 1, false, 0), binary_publish(t, "ma", 3, 1, true, 4),
    };
    send_buf(s, frames_join(fr, 6));
    expect_ack(t, s, 1);
    expect_ack_error(t, s, 2, "invalid stream name: contains '/'");
    expect_ack(t, s, 3);
    expect_ack(t, s, 4);
    assert_null(s->head);
    wait_events(t, &sub, 1, 4, 5000);
    assert_int_equal(sub->gaps + sub->dups + sub->bad, 0);
    /* 1 and 3 share a job; the unacked one and 4 (another ack kind each
     * side of it) have their own. */
    assert_int_equal(event_frames(sub), 3);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_accepted), 4);
    assert_int_equal(DELTA(a, b, publish_ok), 4);
    assert_int_equal(DELTA(a, b, publish_error), 2);
    expect_reserved(t, &a, 0);
    t_free(t);
}

/* A frame cut by the end of a read is not merged with the whole frames
 * before it: those are admitted at once (delivered while the rest is still
 * on its way), and it joins the frames of the read that completes it. */
static void test_frame_finished_by_a_later_read_is_not_merged_into_the_earlier_job(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_1k;
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "ml", FX_MSG_START_LATEST, 0);
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_buf *f2 = binary_publish(t, "ml", 2, 1, false, 0);
    const size_t cut = FX_WIRE_HEADER_LEN + 300;
    fx_buf *head;
    assert_int_equal(fx_buf_new_copy(&head, fx_buf_data(f2), cut), 0);
    fx_buf *first[3] = {binary_publish(t, "ml", 0, 1, false, 0),
                        binary_publish(t, "ml", 1, 1, false, 0), head};
    send_buf(s, frames_join(first, 3));
    wait_events(t, &sub, 1, 2, 5000);
    run_for(t, 50);
    assert_int_equal(sub->events, 2);
    assert_int_equal(event_frames(sub), 1);
    expect_reserved(t, &a, body_len(f2)); /* only the cut frame's header holds bytes */
    fx_buf *tail;
    assert_int_equal(fx_buf_new_copy(&tail, fx_buf_data(f2) + cut, fx_buf_len(f2) - cut), 0);
    fx_buf *second[2] = {tail, binary_publish(t, "ml", 3, 1, false, 0)};
    send_buf(s, frames_join(second, 2));
    wait_events(t, &sub, 1, 4, 5000);
    assert_int_equal(event_frames(sub), 2);
    assert_int_equal(sub->gaps + sub->dups + sub->bad, 0);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_accepted), 4);
    assert_int_equal(DELTA(a, b, broker_frame_timeouts), 0);
    expect_reserved(t, &a, 0);
    fx_buf_unref(f2);
    t_free(t);
}

/* With ack_on_commit the acked frames of one read share a job and each is
 * answered once that job is appended, one ack per request id, in order. */
static void test_merged_commit_acks_answer_each_frame_after_the_append(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.ack_on_commit = true;
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "mc", FX_MSG_START_LATEST, 0);
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_buf *fr[4];
    for (uint64_t i = 0; i < 4; i++)
        fr[i] = binary_publish(t, "mc", i, 1, true, 10 + i);
    send_buf(s, frames_join(fr, 4));
    for (uint64_t i = 0; i < 4; i++)
        expect_ack(t, s, 10 + i);
    assert_null(s->head);
    wait_events(t, &sub, 1, 4, 5000);
    assert_int_equal(event_frames(sub), 1);
    assert_int_equal(sub->gaps + sub->dups + sub->bad, 0);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_ok), 4);
    assert_int_equal(DELTA(a, b, publish_commit_timeouts), 0);
    t_free(t);
}

/* Lossless: merged jobs park at ingress like single ones, and the stream
 * then reads nothing: behind a stalled subscriber the admitted count stops
 * growing short of the burst; once the subscriber reads, every message
 * arrives, in order. */
static void test_lossless_merged_jobs_park_and_stop_the_stream_reading(void **state)
{
    (void)state;
    T *t = t_new_parking();
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "mp", FX_MSG_START_LATEST, 0);
    sub->stalled = true;
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b, c;
    fx_metrics_snapshot_take(&a);
    const uint64_t total = 6000; /* more than the 4 MiB stream window holds */
    publish_range(t, s, "mp", 0, total);
    run_for(t, 800);
    fx_metrics_snapshot_take(&b);
    run_for(t, 400);
    fx_metrics_snapshot_take(&c);
    uint64_t accepted = (uint64_t)DELTA(a, b, publish_accepted);
    assert_true(accepted < total);
    assert_int_equal(DELTA(a, c, publish_accepted), accepted); /* stopped */
    assert_true(DELTA(a, c, ingress_waited) >= 1);
    resume_stream(sub);
    wait_events(t, &sub, 1, total, 30000);
    run_for(t, 50);
    assert_int_equal(sub->events, total);
    assert_int_equal(sub->gaps + sub->dups + sub->bad, 0);
    fx_metrics_snapshot_take(&c);
    assert_int_equal(DELTA(a, c, publish_accepted), total);
    assert_int_equal(DELTA(a, c, publish_dropped) + DELTA(a, c, ingress_backpressure_cancelled), 0);
    t_free(t);
}

/* Two streams interleaved on one request stream, behind a stalled lossless
 * subscriber: a frame for the other stream that follows a merge which parks
 * waits its turn (nothing is read meanwhile), and both streams get every
 * message in order once the subscriber reads. */
static void test_interleaved_streams_behind_a_park_lose_nothing(void **state)
{
    (void)state;
    T *t = t_new_parking();
    t_start(t);
    tconn *sc = t_connect(t);
    tstream *subs[2] = {subscribe(t, sc, "ia", FX_MSG_START_LATEST, 0),
                        subscribe(t, sc, "ib", FX_MSG_START_LATEST, 0)};
    subs[0]->stalled = true;
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    const uint64_t rounds = 1000;
    for (uint64_t i = 0; i < rounds; i++) {
        fx_buf *fr[4] = {binary_publish(t, "ia", 2 * i, 1, false, 0),
                         binary_publish(t, "ia", 2 * i + 1, 1, false, 0),
                         binary_publish(t, "ib", 2 * i, 1, false, 0),
                         binary_publish(t, "ib", 2 * i + 1, 1, false, 0)};
        send_buf(s, frames_join(fr, 4));
    }
    run_for(t, 500);
    assert_true(subs[0]->events < 2 * rounds);
    resume_stream(subs[0]);
    wait_events(t, subs, 2, 2 * rounds, 30000);
    run_for(t, 50);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(subs[i]->events, 2 * rounds);
        assert_int_equal(subs[i]->gaps + subs[i]->dups + subs[i]->bad, 0);
    }
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_accepted), 4 * rounds);
    assert_true(DELTA(a, b, ingress_waited) >= 1);
    assert_int_equal(DELTA(a, b, publish_dropped) + DELTA(a, b, ingress_backpressure_cancelled), 0);
    t_free(t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_client_fin_on_publish_stream_gets_fin_after_all_frames_handled),
    cmocka_unit_test(test_connection_close_counts_every_publish_discarded_behind_a_park),
    cmocka_unit_test(test_ingress_drop_with_queue_depth_1_counts_exactly),
    cmocka_unit_test(test_ingress_drop_of_batch_frames_counts_every_message),
    cmocka_unit_test(test_commit_acks_wait_then_time_out_behind_a_parked_worker),
    cmocka_unit_test(test_wait_timer_arm_failure_fails_the_parked_publish_at_once),
    cmocka_unit_test(test_header_reserves_budget_before_body),
    cmocka_unit_test(test_trickling_frame_times_out_and_releases_budget),
    cmocka_unit_test(test_reservation_waits_when_budget_exhausted_then_proceeds),
    cmocka_unit_test(test_queued_job_keeps_its_header_bytes_so_the_next_header_waits),
    cmocka_unit_test(test_whole_frames_of_one_read_share_one_job),
    cmocka_unit_test(test_merged_acks_answer_each_frame_in_order_around_a_refusal),
    cmocka_unit_test(test_frame_finished_by_a_later_read_is_not_merged_into_the_earlier_job),
    cmocka_unit_test(test_merged_commit_acks_answer_each_frame_after_the_append),
    cmocka_unit_test(test_lossless_merged_jobs_park_and_stop_the_stream_reading),
    cmocka_unit_test(test_interleaved_streams_behind_a_park_lose_nothing),
};

FX_TEST_MAIN(tests)
