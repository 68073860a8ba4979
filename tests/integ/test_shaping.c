/* Timing keys of the broker's reply and delivery paths, end to end with
 * libfelix against an in-process broker: the commit-ack timeout
 * (ack_wait_timeout_ms) and the connection writer's flush delay
 * (subscriber_flush_max_delay_us). Bounds are generous: they check that a
 * key takes effect, not how fast anything is. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "broker/test_hooks.h"
#include "fixture.h"

typedef fix_env E;

static void copts(E *e, fx_client_opts *o)
{
    fix_client_opts(o, e->b, e->server, "t1", "any-token");
}

/* ---- ack_wait_timeout_ms ------------------------------------------------------------- */

/* Waits until the broker holds admitted publishes it does not append: the
 * worker is parked on a full fanout. */
static void wait_parked(void)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    fx_metrics_snapshot m;
    for (;;) {
        fx_metrics_snapshot_take(&m);
        if (m.c.publish_accepted > m.c.publish_ok) {
            sleep_ms(100);
            fx_metrics_snapshot n;
            fx_metrics_snapshot_take(&n);
            if (n.c.publish_ok == m.c.publish_ok)
                return;
        }
        if (fx_now_ns() > deadline)
            fail_msg("the fanout never parked");
        sleep_ms(5);
    }
}

/* A lossless broker with ack_on_commit whose fanout of |stream| is parked
 * behind a subscriber that reads nothing: 2000 unacked publishes fill every
 * queue between the worker and the reader. (The worker queue is deep enough
 * that a later acked publish is admitted: a publish waiting at admission is
 * the lossless brake, not a commit wait.) */
typedef struct parked {
    E e;
    fx_client *sc, *pc;
    fx_subscription *s;
} parked;

static uint8_t kb[1024];

static void parked_start(parked *p, const char *stream, uint64_t ack_wait_ns)
{
    E *e = &p->e;
    fix_env_init(e, "shape");
    fix_lossless(&e->bo);
    e->bo.ack_on_commit = true;
    e->bo.ack_wait_timeout_ns = ack_wait_ns;
    e->bo.pub_queue_depth = 1024; /* the acked publish is admitted behind the park */
    e->bo.subscriber_queue_capacity = 4;
    e->bo.subscriber_lane_queue_depth = 2;
    e->bo.subscriber_unacked_bytes = 16u << 10;
    e->bo.quic.stream_window = e->bo.quic.max_stream_window = 64u << 10;
    fix_env_start(e);
    fx_client_opts o;
    copts(e, &o);
    o.sub_queue_policy = FX_POLICY_BLOCK;
    o.sub_queue_capacity = 4;
    o.stream_window_bytes = 64u << 10;
    p->sc = fix_connect(&o);
    p->s = fix_subscribe(p->sc, stream, NULL);
    copts(e, &o);
    p->pc = fix_connect(&o);
    for (int i = 0; i < 2000; i++)
        assert_int_equal(fx_publish(p->pc, NS, stream, kb, sizeof(kb), FX_ACK_NONE), 0);
    assert_int_equal(fx_flush(p->pc, HANG_MS), 0);
    wait_parked();
}

/* The subscriber reads on: every publish, the 2000 and the acked one, is
 * delivered (the answer to the acked one dropped nothing). Then frees all. */
static void parked_finish(parked *p)
{
    uint64_t got = 0;
    fx_event ev;
    while (got < 2001 && fx_subscription_next(p->s, &ev, HANG_MS) == 0)
        got++;
    assert_int_equal(got, 2001);
    fx_unsubscribe(p->s);
    fix_close(p->pc);
    fix_close(p->sc);
    fix_env_deinit(&p->e);
}

/* The commit never happens while the subscriber stalls: the client is
 * answered "publish commit timeout" after ack_wait_timeout_ms, counted, and
 * the publish is still appended once the subscriber reads. */
static void test_commit_ack_answers_publish_commit_timeout_while_fanout_parked(void **state)
{
    (void)state;
    parked p;
    parked_start(&p, "parked", 200 * FX_NS_PER_MS);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    uint64_t t0 = fx_now_ns();
    int rv = fx_publish(p.pc, NS, "parked", kb, sizeof(kb), FX_ACK_PER_MESSAGE);
    uint64_t waited_ms = (fx_now_ns() - t0) / FX_NS_PER_MS;
    char msg[256];
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_int_not_equal(rv, 0);
    assert_non_null(strstr(msg, "publish commit timeout"));
    assert_true(waited_ms >= 150);
    assert_true(waited_ms < HANG_MS);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_commit_timeouts), 1);
    parked_finish(&p);
}

/* When the commit timer cannot be armed (out of memory, through the fault
 * hook) a commit ack that would wait for a commit that does not come is not
 * left waiting for the long ack_wait_timeout_ms: it is answered at once with
 * the reason, counted, and the publish itself still reaches the subscriber. */
static void test_commit_timer_arm_failure_answers_the_commit_ack_at_once(void **state)
{
    (void)state;
    parked p;
    parked_start(&p, "noarm", 10ull * HANG_MS * FX_NS_PER_MS); /* never reached here */
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    assert_int_equal(fx_broker_test_fail_timer_arms(FX_BROKER_TEST_TIMER_COMMIT, 1), 0);
    int rv = fx_publish(p.pc, NS, "noarm", kb, sizeof(kb), FX_ACK_PER_MESSAGE);
    char msg[256];
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_int_equal(fx_broker_test_fail_timer_arms(FX_BROKER_TEST_TIMER_COMMIT, 0), 0);
    assert_int_not_equal(rv, 0);
    assert_non_null(strstr(msg, "publish commit wait failed: out of memory for its timer"));
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, broker_timer_arm_failures), 1);
    assert_int_equal(DELTA(a, b, publish_commit_timeouts), 0);
    parked_finish(&p);
}

/* A commit that completes in time is answered ok, and no timeout is counted. */
static void test_commit_ack_in_time_is_ok_and_counts_no_timeout(void **state)
{
    (void)state;
    E e;
    fix_env_init(&e, "shape");
    e.bo.ack_on_commit = true;
    e.bo.ack_wait_timeout_ns = 2 * FX_NS_PER_S;
    fix_env_start(&e);
    fx_client_opts o;
    copts(&e, &o);
    fx_client *pc = fix_connect(&o);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    for (int i = 0; i < 50; i++)
        assert_int_equal(fx_publish(pc, NS, "quick", "x", 1, FX_ACK_PER_MESSAGE), 0);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_commit_timeouts), 0);
    assert_int_equal(DELTA(a, b, publish_ok), 50);
    fix_close(pc);
    fix_env_deinit(&e);
}

/* ---- subscriber_flush_max_delay_us ----------------------------------------------------- */

/* Milliseconds from one publish to its delivery on a fresh subscription. */
static uint64_t one_delivery_ms(E *e, const char *stream)
{
    fx_client_opts o;
    copts(e, &o);
    fx_client *c = fix_connect(&o);
    fx_subscription *s = fix_subscribe(c, stream, NULL);
    fix_wait_sub_gauges(1, -1);
    uint64_t t0 = fx_now_ns();
    assert_int_equal(fx_publish(c, NS, stream, "hello", 5, FX_ACK_NONE), 0);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, HANG_MS), 0);
    uint64_t ms = (fx_now_ns() - t0) / FX_NS_PER_MS;
    fx_unsubscribe(s);
    fix_close(c);
    return ms;
}

/* With a flush delay a lone message waits for company up to the delay, and
 * no longer: it arrives after about the delay, well before the hang guard. */
static void test_flush_delay_holds_a_lone_message_for_the_delay(void **state)
{
    (void)state;
    E e;
    fix_env_init(&e, "shape");
    e.bo.subscriber_flush_max_delay_ns = 300 * FX_NS_PER_MS;
    fix_env_start(&e);
    uint64_t ms = one_delivery_ms(&e, "held");
    fprintf(stderr, "flush delay 300 ms: delivered after %llu ms\n", (unsigned long long)ms);
    assert_true(ms >= 250);
    assert_true(ms < 5000);
    fix_env_deinit(&e);
}

/* A writer limited to one frame list per subscription per turn still
 * delivers a burst whole and in order (it resumes on later turns). */
static void test_flush_max_items_one_delivers_a_burst_in_order(void **state)
{
    (void)state;
    E e;
    fix_env_init(&e, "shape");
    fix_lossless(&e.bo);
    e.bo.subscriber_flush_max_items = 1;
    e.bo.event_batch_max_events = 1; /* one message per frame list */
    fix_env_start(&e);
    fx_client_opts o;
    copts(&e, &o);
    o.sub_queue_policy = FX_POLICY_BLOCK;
    fx_client *c = fix_connect(&o);
    fx_subscription *s = fix_subscribe(c, "burst", NULL);
    fix_wait_sub_gauges(1, -1);
    enum { N = 2000 };
    for (uint32_t i = 0; i < N; i++)
        assert_int_equal(fx_publish(c, NS, "burst", &i, sizeof(i), FX_ACK_NONE), 0);
    for (uint32_t i = 0; i < N; i++) {
        fx_event ev;
        assert_int_equal(fx_subscription_next(s, &ev, HANG_MS), 0);
        uint32_t v;
        assert_int_equal(ev.len, sizeof(v));
        memcpy(&v, ev.payload, sizeof(v));
        assert_int_equal(v, i);
    }
    fx_unsubscribe(s);
    fix_close(c);
    fix_env_deinit(&e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_commit_ack_answers_publish_commit_timeout_while_fanout_parked),
    cmocka_unit_test(test_commit_timer_arm_failure_answers_the_commit_ack_at_once),
    cmocka_unit_test(test_commit_ack_in_time_is_ok_and_counts_no_timeout),
    cmocka_unit_test(test_flush_delay_holds_a_lone_message_for_the_delay),
    cmocka_unit_test(test_flush_max_items_one_delivers_a_burst_in_order),
};

FX_TEST_MAIN(tests)
