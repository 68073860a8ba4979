/* Unit tests for fx_stream: the replay ring and its bounds, start positions
 * and the backlog snapshot, and the checkpoint-5 fanout under each policy
 * (drop_new, drop_old, block with park and resume), with exact counters. */
/* fx-test-libs: fx_broker fx_wire fx_base */
#include "base/metrics.h"
#include "broker/stream.h"
#include "felix/error.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"

static fx_wire_slice S(const char *s)
{
    return (fx_wire_slice){.ptr = (const uint8_t *)s, .len = strlen(s)};
}

typedef struct resume_log {
    int n;
} resume_log;

static void count_resume(fx_stream *s, void *user)
{
    ((resume_log *)user)->n++;
}

static fx_stream *mkstream(uint32_t cap, uint64_t cap_bytes, size_t qcap, fx_queue_policy p,
                           resume_log *rl)
{
    fx_stream_opts o = {.handle_id = 7,
                        .log_capacity = cap,
                        .log_capacity_bytes = cap_bytes,
                        .sub_queue_capacity = qcap,
                        .sub_queue_policy = p,
                        .on_resume = count_resume,
                        .user = rl};
    fx_stream *s = NULL;
    assert_int_equal(fx_stream_new(&s, &o), 0);
    return s;
}

/* Publishes one message; asserts the fanout completed. */
static fx_fanout_result pub1(fx_stream *s, const char *msg)
{
    fx_wire_slice p = S(msg);
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, &p, 1, 1000, &res), 0);
    return res;
}

static fx_subscriber *sub_latest(fx_stream *s, uint64_t id)
{
    fx_start st = {.kind = FX_START_LATEST};
    fx_subscribe_opts o = {.subscription_id = id};
    fx_subscriber *sub = NULL;
    fx_backlog b;
    assert_int_equal(fx_stream_subscribe(s, &st, &o, &sub, &b, NULL), 0);
    assert_int_equal(b.n, 0);
    fx_backlog_free(&b);
    return sub;
}

/* Pops one envelope and checks it is the single message |msg| at |offset|. */
static void expect_pop(fx_subscriber *sub, const char *msg, uint64_t offset)
{
    fx_envelope *e = NULL;
    assert_int_equal(fx_subscriber_pop(sub, 5000, &e), 0);
    assert_int_equal(fx_envelope_base_offset(e), offset);
    assert_int_equal(fx_envelope_count(e), 1);
    fx_wire_slice p = fx_envelope_payload(e, 0);
    assert_int_equal(p.len, strlen(msg));
    assert_memory_equal(p.ptr, msg, p.len);
    fx_envelope_unref(e);
}

static void expect_empty(fx_subscriber *sub)
{
    fx_envelope *e = NULL;
    assert_int_equal(fx_subscriber_pop(sub, 5000, &e), -EAGAIN);
}

static void expect_ring(fx_stream *s, uint64_t offset, const char *msg)
{
    fx_wire_slice p;
    assert_int_equal(fx_stream_ring_get(s, offset, &p), 0);
    assert_int_equal(p.len, strlen(msg));
    assert_memory_equal(p.ptr, msg, p.len);
}

static fx_metrics_snapshot snap(void)
{
    fx_metrics_snapshot m;
    fx_metrics_snapshot_take(&m);
    return m;
}

/* ---- ring -------------------------------------------------------------------- */

/* A read across batches of different sizes, from any offset, and the
 * lookup of every offset of a ring of many batches (a binary search). */
static void test_ring_read_spans_batches_from_any_offset(void **state)
{
    (void)state;
    fx_stream *s = mkstream(4096, 1 << 20, 8, FX_QUEUE_DROP_NEW, NULL);
    static char names[1003][16]; /* the ring borrows payloads published without a backing */
    char msg[16];
    fx_wire_slice b3[3] = {S("b0"), S("b1"), S("b2")};
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, b3, 3, 1000, &res), 0); /* offsets 0..2 */
    for (int i = 3; i < 1003; i++) {
        snprintf(names[i], sizeof(names[i]), "m%d", i);
        pub1(s, names[i]); /* one batch each: 1000 batches */
    }
    fx_wire_slice out[8];
    assert_int_equal(fx_stream_ring_read(s, 1, 4, out), 4);
    assert_int_equal(out[0].len, 2);
    assert_memory_equal(out[0].ptr, "b1", 2);
    assert_memory_equal(out[1].ptr, "b2", 2);
    assert_memory_equal(out[2].ptr, "m3", 2);
    assert_memory_equal(out[3].ptr, "m4", 2);
    assert_int_equal(fx_stream_ring_read(s, 1000, 8, out), 3); /* up to the tail */
    assert_memory_equal(out[2].ptr, "m1002", 5);
    assert_int_equal(fx_stream_ring_read(s, 1003, 8, out), 0);
    for (uint64_t o = 3; o < 1003; o++) {
        fx_wire_slice p;
        snprintf(msg, sizeof(msg), "m%llu", (unsigned long long)o);
        assert_int_equal(fx_stream_ring_get(s, o, &p), 0);
        assert_int_equal(p.len, strlen(msg));
        assert_memory_equal(p.ptr, msg, p.len);
    }
    fx_stream_free(s);
}

static void test_publish_at_jumps_forward_restarting_the_ring_and_refuses_below(void **state)
{
    (void)state;
    fx_stream *s = mkstream(16, 1 << 20, 8, FX_QUEUE_DROP_NEW, NULL);
    fx_subscriber *sub = sub_latest(s, 1);
    fx_fanout_result res;
    uint64_t skipped = 99;
    fx_wire_slice a = S("a"), b = S("b"), c = S("c");
    /* At the tail: as a publish. */
    assert_int_equal(fx_stream_publish_at(s, 0, NULL, &a, 1, 1, &res, &skipped), 0);
    assert_int_equal(skipped, 0);
    /* Above it: the ring restarts there, the subscriber sees the jump. */
    assert_int_equal(fx_stream_publish_at(s, 100, NULL, &b, 1, 1, &res, &skipped), 0);
    assert_int_equal(skipped, 99);
    assert_int_equal(res.base_offset, 100);
    assert_int_equal(fx_stream_oldest(s), 100);
    assert_int_equal(fx_stream_tail(s), 101);
    assert_int_equal(fx_stream_ring_messages(s), 1);
    expect_ring(s, 100, "b");
    fx_wire_slice p;
    assert_int_equal(fx_stream_ring_get(s, 0, &p), -ENOENT);
    /* Below it: refused, nothing done. */
    assert_int_equal(fx_stream_publish_at(s, 50, NULL, &c, 1, 1, &res, &skipped), -ERANGE);
    assert_int_equal(fx_stream_tail(s), 101);
    expect_pop(sub, "a", 0);
    expect_pop(sub, "b", 100);
    expect_empty(sub);
    fx_stream_free(s);
}

static void test_ring_trims_to_capacity(void **state)
{
    fx_stream *s = mkstream(3, 1 << 20, 8, FX_QUEUE_DROP_NEW, NULL);
    const char *msgs[] = {"m0", "m1", "m2", "m3", "m4", "m5", "m6"};
    for (int i = 0; i < 7; i++)
        assert_int_equal(pub1(s, msgs[i]).base_offset, (uint64_t)i);
    assert_int_equal(fx_stream_ring_messages(s), 3);
    assert_int_equal(fx_stream_oldest(s), 4);
    assert_int_equal(fx_stream_tail(s), 7);
    expect_ring(s, 4, "m4");
    expect_ring(s, 5, "m5");
    expect_ring(s, 6, "m6");
    fx_wire_slice p;
    assert_int_equal(fx_stream_ring_get(s, 3, &p), -ENOENT);
    assert_int_equal(fx_stream_ring_get(s, 7, &p), -ENOENT);

    /* A batch is trimmed message by message, not as a whole. */
    fx_wire_slice batch[] = {S("b7"), S("b8")};
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, batch, 2, 1, &res), 0);
    assert_int_equal(res.base_offset, 7);
    assert_int_equal(fx_stream_oldest(s), 6);
    expect_ring(s, 6, "m6");
    expect_ring(s, 8, "b8");
    fx_stream_free(s);
}

/* The byte bound counts payload plus FX_STREAM_MSG_OVERHEAD per message, and
 * a batch's overhead until its last message goes. */
#define OVH ((size_t)FX_STREAM_MSG_OVERHEAD)

static void test_ring_trims_by_bytes(void **state)
{
    fx_stream *s = mkstream(100, 8 + 2 * OVH + 4, 8, FX_QUEUE_DROP_NEW, NULL);
    pub1(s, "aaaa");
    pub1(s, "bbbb");
    assert_int_equal(fx_stream_ring_bytes(s), 8 + 2 * OVH);
    pub1(s, "cccc"); /* over the bound: the oldest goes */
    assert_int_equal(fx_stream_ring_messages(s), 2);
    assert_int_equal(fx_stream_ring_bytes(s), 8 + 2 * OVH);
    assert_int_equal(fx_stream_oldest(s), 1);
    expect_ring(s, 1, "bbbb");
    fx_wire_slice big[] = {S("123456"), S("7890")};
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, big, 2, 1, &res), 0);
    assert_int_equal(fx_stream_ring_messages(s), 2);
    assert_int_equal(fx_stream_ring_bytes(s), 10 + 2 * OVH);
    assert_int_equal(fx_stream_oldest(s), 3);
    assert_int_equal(fx_stream_tail(s), 5);
    fx_stream_free(s);
}

static void test_ring_charges_empty_payloads_until_their_batch_goes(void **state)
{
    fx_stream *s = mkstream(3, 1u << 20, 8, FX_QUEUE_DROP_NEW, NULL);
    fx_wire_slice empty[] = {S(""), S(""), S(""), S("")};
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, empty, 4, 1, &res), 0);
    /* Three of four retained, but the batch's four slices are still held. */
    assert_int_equal(fx_stream_ring_messages(s), 3);
    assert_int_equal(fx_stream_ring_bytes(s), 4 * OVH);
    pub1(s, "x");
    assert_int_equal(fx_stream_ring_messages(s), 3);
    assert_int_equal(fx_stream_ring_bytes(s), 4 * OVH + 1 + OVH);
    pub1(s, "y");
    pub1(s, "z"); /* the empty batch's last message goes, and its slices with it */
    assert_int_equal(fx_stream_ring_messages(s), 3);
    assert_int_equal(fx_stream_ring_bytes(s), 3 + 3 * OVH);
    fx_stream_free(s);
}

/* fx_stream_evict_end predicts where ring_trim leaves the oldest offset:
 * random batches (1-4 messages of 0-40 bytes, empty ones too) under a
 * message bound and a byte bound, each checked against the append. */
static void test_evict_end_is_where_the_append_leaves_the_oldest(void **state)
{
    (void)state;
    static const uint8_t bytes[64];
    const uint64_t bounds[][2] = {{10, 1u << 20}, {1000, 200 + 6 * OVH}, {7, 90 + 5 * OVH}};
    uint32_t seed = 12345;
    for (size_t b = 0; b < 3; b++) {
        fx_stream *s = mkstream((uint32_t)bounds[b][0], bounds[b][1], 8, FX_QUEUE_DROP_NEW, NULL);
        assert_int_equal(fx_stream_evict_end(s, 1, 1), 0); /* empty ring: nothing goes */
        for (int i = 0; i < 2000; i++) {
            fx_wire_slice p[4];
            seed = seed * 1103515245u + 12345u;
            uint32_t count = 1 + (seed >> 16) % 4;
            uint64_t sum = 0;
            for (uint32_t k = 0; k < count; k++) {
                seed = seed * 1103515245u + 12345u;
                p[k] = (fx_wire_slice){bytes, (seed >> 16) % 41};
                sum += p[k].len;
            }
            uint64_t want = fx_stream_evict_end(s, count, sum), tail = fx_stream_tail(s);
            assert_true(want >= fx_stream_oldest(s));
            fx_fanout_result res;
            assert_int_equal(fx_stream_publish(s, NULL, p, count, 1, &res), 0);
            if (count <= bounds[b][0] && sum + count * OVH <= bounds[b][1])
                assert_int_equal(fx_stream_oldest(s), want);
            else /* the batch alone is over the bounds: at least the old tail */
                assert_true(want >= tail && fx_stream_oldest(s) >= want);
        }
        fx_stream_free(s);
    }
}

/* A batch trimmed from its front: the walk goes on inside it, and an append
 * that fits trims nothing. */
static void test_evict_end_walks_into_a_partly_trimmed_batch(void **state)
{
    (void)state;
    fx_stream *s = mkstream(5, 1u << 20, 8, FX_QUEUE_DROP_NEW, NULL);
    fx_wire_slice four[] = {S("a"), S("b"), S("c"), S("d")};
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, four, 4, 1, &res), 0); /* 0..3 */
    assert_int_equal(fx_stream_evict_end(s, 1, 1), 0);                 /* 5 fit */
    assert_int_equal(fx_stream_evict_end(s, 2, 2), 1);
    assert_int_equal(fx_stream_publish(s, NULL, four, 3, 1, &res), 0); /* 4..6: 0, 1 go */
    assert_int_equal(fx_stream_oldest(s), 2);
    assert_int_equal(fx_stream_evict_end(s, 1, 1), 3);     /* inside the first batch */
    assert_int_equal(fx_stream_evict_end(s, 3, 3), 5);     /* past it, into the second */
    assert_int_equal(fx_stream_evict_end(s, 9, 9), 7 + 4); /* the batch alone is over */
    assert_int_equal(fx_stream_oldest(s), 2);              /* a query trims nothing */
    fx_stream_free(s);
}

static void test_ring_evicts_for_an_account_over_its_limit(void **state)
{
    fx_retained *acct = calloc(1, sizeof(*acct));
    assert_non_null(acct);
    atomic_init(&acct->refs, 1);
    acct->limit = 2 * (4 + OVH);
    fx_stream_opts o = {.handle_id = 1,
                        .log_capacity = 100,
                        .log_capacity_bytes = 1u << 20,
                        .sub_queue_capacity = 8,
                        .sub_queue_policy = FX_QUEUE_DROP_NEW,
                        .tenant = acct};
    fx_stream *s;
    assert_int_equal(fx_stream_new(&s, &o), 0);
    pub1(s, "aaaa");
    pub1(s, "bbbb");
    pub1(s, "cccc");
    assert_int_equal(fx_stream_ring_messages(s), 2);
    assert_int_equal(atomic_load(&acct->bytes), 2 * (4 + OVH));
    fx_stream_free(s); /* gives back what it charged */
    assert_int_equal(atomic_load(&acct->bytes), 0);
    fx_retained_unref(acct);
}

static void test_zero_bounds_rejected(void **state)
{
    fx_stream *s = NULL;
    fx_stream_opts o = {.log_capacity = 0,
                        .log_capacity_bytes = 1,
                        .sub_queue_capacity = 1,
                        .sub_queue_policy = FX_QUEUE_DROP_NEW};
    assert_int_equal(fx_stream_new(&s, &o), -EINVAL);
    o.log_capacity = 1;
    o.sub_queue_policy = FX_QUEUE_BLOCK; /* block needs on_resume */
    assert_int_equal(fx_stream_new(&s, &o), -EINVAL);
    assert_null(s);
}

/* ---- fanout -------------------------------------------------------------------- */

static void test_zero_subscribers_delivers_zero(void **state)
{
    fx_stream *s = mkstream(8, 1 << 20, 8, FX_QUEUE_DROP_NEW, NULL);
    fx_fanout_result res = pub1(s, "x");
    assert_int_equal(res.delivered, 0);
    assert_int_equal(res.delivered_items, 0);
    assert_int_equal(res.dropped, 0);
    assert_int_equal(fx_stream_tail(s), 1);
    fx_stream_free(s);
}

static void test_delivers_in_order_with_offsets(void **state)
{
    fx_stream *s = mkstream(8, 1 << 20, 8, FX_QUEUE_DROP_NEW, NULL);
    fx_subscriber *sub = sub_latest(s, 1);
    assert_int_equal(pub1(s, "a").delivered, 1);
    fx_wire_slice two[] = {S("b"), S("c")};
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, two, 2, 1, &res), 0);
    assert_int_equal(res.delivered_items, 2);
    expect_pop(sub, "a", 0);
    fx_envelope *e;
    assert_int_equal(fx_subscriber_pop(sub, 1, &e), 0);
    assert_int_equal(fx_envelope_base_offset(e), 1);
    assert_int_equal(fx_envelope_count(e), 2);
    assert_int_equal(fx_envelope_handle_id(e), 7);
    fx_envelope_unref(e);
    expect_empty(sub);
    fx_stream_free(s);
}

static void count_wake(fx_subscriber *sub, void *user)
{
    (*(int *)user)++;
}

static void test_wake_only_when_queue_becomes_non_empty(void **state)
{
    fx_stream *s = mkstream(8, 1 << 20, 8, FX_QUEUE_DROP_NEW, NULL);
    int wakes = 0;
    fx_start st = {.kind = FX_START_LATEST};
    fx_subscribe_opts o = {.subscription_id = 1, .on_wake = count_wake, .user = &wakes};
    fx_subscriber *sub;
    fx_backlog bl;
    assert_int_equal(fx_stream_subscribe(s, &st, &o, &sub, &bl, NULL), 0);
    pub1(s, "a");
    pub1(s, "b");
    assert_int_equal(wakes, 1); /* the feeder was told once; it drains both */
    expect_pop(sub, "a", 0);
    expect_pop(sub, "b", 1);
    pub1(s, "c");
    assert_int_equal(wakes, 2);
    fx_subscriber_stats ss;
    fx_subscriber_get_stats(sub, &ss);
    assert_int_equal(ss.subscription_id, 1);
    assert_int_equal(ss.enqueued, 3);
    assert_int_equal(ss.enqueued_items, 3);
    assert_int_equal(ss.dequeued, 2);
    assert_int_equal(ss.depth, 1);
    assert_int_equal(ss.capacity, 8);
    assert_int_equal(ss.last_enqueue_ns, 1000);
    assert_int_equal(ss.last_delivery_ns, 5000);
    fx_stream_free(s);
}

static void test_drop_new_second_publish_not_delivered(void **state)
{
    fx_stream *s = mkstream(8, 1 << 20, 1, FX_QUEUE_DROP_NEW, NULL);
    fx_subscriber *sub = sub_latest(s, 1);
    fx_metrics_snapshot m0 = snap();
    assert_int_equal(pub1(s, "first").delivered, 1);
    fx_wire_slice two[] = {S("x"), S("y")};
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, two, 2, 1, &res), 0);
    assert_int_equal(res.delivered, 0);
    assert_int_equal(res.dropped, 1);
    assert_int_equal(res.dropped_items, 2);
    fx_metrics_snapshot m1 = snap();
    /* Counted in messages (items): the batch held two. */
    assert_int_equal(m1.c.subscribe_dropped - m0.c.subscribe_dropped, 2);
    assert_int_equal(m1.c.sub_queue_dropped - m0.c.sub_queue_dropped, 2);
    assert_int_equal(m1.c.sub_queue_drop_old - m0.c.sub_queue_drop_old, 0);
    assert_int_equal(m1.c.sub_queue_enqueued - m0.c.sub_queue_enqueued, 1);
    fx_subscriber_stats st;
    fx_subscriber_get_stats(sub, &st);
    assert_int_equal(st.depth, 1);
    assert_int_equal(st.dropped, 1);
    assert_int_equal(st.dropped_items, 2);
    assert_int_equal(st.last_delivery_ns, 0);
    expect_pop(sub, "first", 0);
    expect_empty(sub);
    fx_subscriber_get_stats(sub, &st);
    assert_int_equal(st.depth, 0);
    assert_int_equal(st.last_delivery_ns, 5000);
    fx_stream_free(s);
}

static void test_drop_new_cap_2_of_100_publishes_buffers_exactly_2(void **state)
{
    fx_stream *s = mkstream(1024, 1 << 20, 2, FX_QUEUE_DROP_NEW, NULL);
    fx_subscriber *sub = sub_latest(s, 1);
    fx_metrics_snapshot m0 = snap();
    for (int i = 0; i < 100; i++)
        pub1(s, "m");
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(m1.c.sub_queue_dropped - m0.c.sub_queue_dropped, 98);
    fx_envelope *e;
    for (uint64_t i = 0; i < 2; i++) {
        assert_int_equal(fx_subscriber_pop(sub, 1, &e), 0);
        assert_int_equal(fx_envelope_base_offset(e), i);
        fx_envelope_unref(e);
    }
    expect_empty(sub);
    fx_stream_free(s);
}

static void test_drop_old_keeps_newest(void **state)
{
    fx_stream *s = mkstream(8, 1 << 20, 1, FX_QUEUE_DROP_OLD, NULL);
    fx_subscriber *sub = sub_latest(s, 1);
    fx_metrics_snapshot m0 = snap();
    assert_int_equal(pub1(s, "old").delivered, 1);
    fx_fanout_result res = pub1(s, "new");
    assert_int_equal(res.delivered, 1); /* the new one went in, the old one out */
    assert_int_equal(res.dropped, 0);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(m1.c.sub_queue_drop_old - m0.c.sub_queue_drop_old, 1);
    assert_int_equal(m1.c.subscribe_dropped - m0.c.subscribe_dropped, 1);
    assert_int_equal(m1.c.sub_queue_dropped - m0.c.sub_queue_dropped, 1);
    assert_int_equal(m1.g.sub_queue_len - m0.g.sub_queue_len, 1);
    fx_subscriber_stats st;
    fx_subscriber_get_stats(sub, &st);
    assert_int_equal(st.dropped, 1);
    assert_int_equal(st.enqueued, 2);
    expect_pop(sub, "new", 1);
    expect_empty(sub);
    fx_stream_free(s);
    assert_int_equal(snap().g.sub_queue_len - m0.g.sub_queue_len, 0);
}

static void test_queued_items_counts_messages_waiting_in_the_queue(void **state)
{
    fx_stream *s = mkstream(8, 1 << 20, 2, FX_QUEUE_DROP_OLD, NULL);
    fx_subscriber *sub = sub_latest(s, 1);
    fx_wire_slice three[] = {S("a"), S("b"), S("c")};
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, three, 3, 1, &res), 0);
    assert_int_equal(pub1(s, "d").delivered, 1);
    fx_subscriber_stats st;
    fx_subscriber_get_stats(sub, &st);
    assert_int_equal(st.depth, 2);
    assert_int_equal(st.queued_items, 4);
    /* drop_old evicts the 3-message envelope: its messages leave the count */
    assert_int_equal(pub1(s, "e").delivered, 1);
    fx_subscriber_get_stats(sub, &st);
    assert_int_equal(st.queued_items, 2);
    expect_pop(sub, "d", 3);
    fx_subscriber_get_stats(sub, &st);
    assert_int_equal(st.queued_items, 1);
    expect_pop(sub, "e", 4);
    fx_subscriber_get_stats(sub, &st);
    assert_int_equal(st.queued_items, 0);
    fx_stream_free(s);
}

static void test_block_parks_fanout_and_resumes_without_duplicates(void **state)
{
    resume_log rl = {0};
    fx_stream *s = mkstream(8, 1 << 20, 1, FX_QUEUE_BLOCK, &rl);
    fx_subscriber *a = sub_latest(s, 1);
    fx_subscriber *b = sub_latest(s, 2);
    assert_int_equal(pub1(s, "m0").delivered, 2);
    expect_pop(a, "m0", 0); /* a has room, b is full */

    fx_wire_slice p = S("m1");
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, &p, 1, 1, &res), -EAGAIN);
    assert_true(fx_stream_is_parked(s));
    assert_int_equal(res.delivered, 1);     /* a took it before the park */
    assert_int_equal(fx_stream_tail(s), 2); /* appended even though parked */
    fx_wire_slice q = S("m2");
    assert_int_equal(fx_stream_publish(s, NULL, &q, 1, 1, &res), -EBUSY);
    assert_int_equal(fx_stream_tail(s), 2);
    assert_int_equal(rl.n, 0);
    /* A resume before the queue woke the stream changes nothing. */
    assert_int_equal(fx_stream_resume(s, 2, &res), -EAGAIN);
    assert_int_equal(res.delivered, 0);

    expect_pop(b, "m0", 0); /* drains b to its low watermark: resume */
    assert_int_equal(rl.n, 1);
    assert_int_equal(fx_stream_resume(s, 2, &res), 0);
    assert_false(fx_stream_is_parked(s));
    assert_int_equal(res.delivered, 1); /* only b: a is not offered m1 again */

    expect_pop(a, "m1", 1);
    expect_empty(a);
    expect_pop(b, "m1", 1);
    expect_empty(b);
    assert_int_equal(pub1(s, "m2").delivered, 2);
    expect_pop(a, "m2", 2);
    expect_pop(b, "m2", 2);
    fx_stream_free(s);
}

static void test_block_subscriber_added_while_parked_gets_batch_once(void **state)
{
    resume_log rl = {0};
    fx_stream *s = mkstream(8, 1 << 20, 1, FX_QUEUE_BLOCK, &rl);
    fx_subscriber *a = sub_latest(s, 1);
    pub1(s, "m0");
    fx_wire_slice p = S("m1");
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, &p, 1, 1, &res), -EAGAIN);

    /* Subscribing from offset 1 while m1's fanout is parked: m1 comes in the
     * backlog, and the resumed fanout must not queue it a second time. */
    fx_start st = {.kind = FX_START_OFFSET, .offset = 1};
    fx_subscribe_opts o = {.subscription_id = 2};
    fx_subscriber *late;
    fx_backlog bl;
    assert_int_equal(fx_stream_subscribe(s, &st, &o, &late, &bl, NULL), 0);
    assert_int_equal(bl.n, 1);
    assert_int_equal(fx_envelope_base_offset(bl.items[0].env), 1);
    assert_int_equal(bl.items[0].skip, 0);
    fx_backlog_free(&bl);

    expect_pop(a, "m0", 0);
    assert_int_equal(rl.n, 1);
    assert_int_equal(fx_stream_resume(s, 2, &res), 0);
    assert_int_equal(res.delivered, 1);
    expect_pop(a, "m1", 1);
    expect_empty(late);
    fx_stream_free(s);
}

static void test_unsubscribe_while_parked_resumes_fanout(void **state)
{
    resume_log rl = {0};
    fx_stream *s = mkstream(8, 1 << 20, 1, FX_QUEUE_BLOCK, &rl);
    fx_subscriber *a = sub_latest(s, 1);
    fx_subscriber *b = sub_latest(s, 2);
    pub1(s, "m0");
    fx_wire_slice p = S("m1");
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, &p, 1, 1, &res), -EAGAIN);
    assert_int_equal(res.delivered, 0); /* parked on a, the first */
    fx_metrics_snapshot m0 = snap();
    fx_stream_unsubscribe(s, a); /* its queued m0 is released, not counted */
    assert_int_equal(rl.n, 1);
    assert_int_equal(fx_stream_subscriber_count(s), 1);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(m1.c.sub_queue_dropped - m0.c.sub_queue_dropped, 0);
    assert_int_equal(m1.g.sub_queue_len - m0.g.sub_queue_len, -1);
    /* b is still full: the resumed fanout parks on it. */
    assert_int_equal(fx_stream_resume(s, 2, &res), -EAGAIN);
    expect_pop(b, "m0", 0);
    assert_int_equal(rl.n, 2);
    assert_int_equal(fx_stream_resume(s, 3, &res), 0);
    expect_pop(b, "m1", 1);
    fx_stream_free(s);
}

static void test_stream_free_releases_parked_fanout(void **state)
{
    resume_log rl = {0};
    fx_stream *s = mkstream(8, 1 << 20, 1, FX_QUEUE_BLOCK, &rl);
    sub_latest(s, 1);
    pub1(s, "m0");
    fx_wire_slice p = S("m1");
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, &p, 1, 1, &res), -EAGAIN);
    fx_stream_free(s); /* ASan/LSan check the envelopes and the waiter */
    assert_int_equal(rl.n, 0);
}

static void test_envelope_shares_backing_buffer(void **state)
{
    fx_stream *s = mkstream(1, 1 << 20, 4, FX_QUEUE_DROP_NEW, NULL);
    fx_subscriber *a = sub_latest(s, 1);
    fx_buf *body;
    assert_int_equal(fx_buf_new_copy(&body, "helloworld", 10), 0);
    fx_wire_slice two[] = {{fx_buf_data(body), 5}, {fx_buf_data(body) + 5, 5}};
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, body, two, 2, 1, &res), 0);
    assert_int_equal(fx_buf_refcount(body), 2); /* ours + the envelope's */
    fx_buf_unref(body);
    pub1(s, "z"); /* trims the batch out of the ring; a's queue still holds it */
    fx_envelope *e;
    assert_int_equal(fx_subscriber_pop(a, 1, &e), 0);
    assert_memory_equal(fx_envelope_payload(e, 1).ptr, "world", 5);
    fx_envelope_unref(e); /* the last reference frees the body */
    fx_stream_free(s);
}

/* ---- start positions --------------------------------------------------------------- */

static void test_cursor_tail_then_live_no_gap(void **state)
{
    fx_stream *s = mkstream(16, 1 << 20, 8, FX_QUEUE_DROP_NEW, NULL);
    pub1(s, "one");
    pub1(s, "two");
    fx_start st = {.kind = FX_START_OFFSET, .offset = 0};
    fx_subscribe_opts o = {.subscription_id = 9};
    fx_subscriber *sub;
    fx_backlog bl;
    assert_int_equal(fx_stream_subscribe(s, &st, &o, &sub, &bl, NULL), 0);
    assert_int_equal(bl.n, 2);
    assert_int_equal(fx_envelope_base_offset(bl.items[0].env), 0);
    assert_int_equal(fx_envelope_base_offset(bl.items[1].env), 1);
    assert_memory_equal(fx_envelope_payload(bl.items[1].env, 0).ptr, "two", 3);
    expect_empty(sub); /* the backlog is not also queued */
    pub1(s, "three");
    expect_pop(sub, "three", 2);
    expect_empty(sub);
    fx_backlog_free(&bl);
    fx_stream_free(s);
}

static void test_start_latest_has_no_backlog(void **state)
{
    fx_stream *s = mkstream(16, 1 << 20, 8, FX_QUEUE_DROP_NEW, NULL);
    pub1(s, "old");
    fx_subscriber *sub = sub_latest(s, 1);
    expect_empty(sub);
    pub1(s, "new");
    expect_pop(sub, "new", 1);
    fx_stream_free(s);
}

static void test_start_earliest(void **state)
{
    fx_stream *s = mkstream(3, 1 << 20, 8, FX_QUEUE_DROP_NEW, NULL);
    fx_wire_slice batch[] = {S("a"), S("b"), S("c"), S("d")};
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, batch, 4, 1, &res), 0);
    pub1(s, "e");
    /* Ring holds c, d (inside the first batch) and e. */
    fx_start st = {.kind = FX_START_EARLIEST};
    fx_subscribe_opts o = {.subscription_id = 1};
    fx_subscriber *sub;
    fx_backlog bl;
    assert_int_equal(fx_stream_subscribe(s, &st, &o, &sub, &bl, NULL), 0);
    assert_int_equal(bl.n, 2);
    assert_int_equal(fx_envelope_base_offset(bl.items[0].env), 0);
    assert_int_equal(bl.items[0].skip, 2);
    assert_int_equal(fx_envelope_base_offset(bl.items[1].env), 4);
    assert_int_equal(bl.items[1].skip, 0);
    fx_backlog_free(&bl);
    /* An offset inside the retained part of a batch skips into it. */
    st = (fx_start){.kind = FX_START_OFFSET, .offset = 3};
    assert_int_equal(fx_stream_subscribe(s, &st, &o, &sub, &bl, NULL), 0);
    assert_int_equal(bl.n, 2);
    assert_int_equal(bl.items[0].skip, 3);
    fx_backlog_free(&bl);
    assert_int_equal(fx_stream_subscriber_count(s), 2);
    fx_stream_free(s);
}

static void test_start_offset_too_old(void **state)
{
    fx_stream *s = mkstream(3, 1 << 20, 8, FX_QUEUE_DROP_NEW, NULL);
    for (int i = 0; i < 5; i++)
        pub1(s, "m");
    fx_start st = {.kind = FX_START_OFFSET, .offset = 1};
    fx_subscribe_opts o = {.subscription_id = 1};
    fx_subscriber *sub = NULL;
    fx_backlog bl;
    uint64_t avail = 0;
    assert_int_equal(fx_stream_subscribe(s, &st, &o, &sub, &bl, &avail), FX_ECURSOR_TOO_OLD);
    assert_int_equal(avail, 2);
    assert_null(sub);
    assert_int_equal(bl.n, 0);
    assert_int_equal(fx_stream_subscriber_count(s), 0);
    st.offset = 2; /* the oldest retained is fine */
    assert_int_equal(fx_stream_subscribe(s, &st, &o, &sub, &bl, &avail), 0);
    assert_int_equal(bl.n, 3);
    fx_backlog_free(&bl);
    fx_stream_free(s);
}

static void test_start_offset_in_future(void **state)
{
    fx_stream *s = mkstream(3, 1 << 20, 8, FX_QUEUE_DROP_NEW, NULL);
    fx_start st = {.kind = FX_START_OFFSET, .offset = 9999};
    fx_subscribe_opts o = {.subscription_id = 1};
    fx_subscriber *sub = NULL;
    fx_backlog bl;
    uint64_t avail = 77;
    assert_int_equal(fx_stream_subscribe(s, &st, &o, &sub, &bl, &avail), FX_ECURSOR_IN_FUTURE);
    assert_int_equal(avail, 0);
    pub1(s, "m0");
    pub1(s, "m1");
    st.offset = 3;
    assert_int_equal(fx_stream_subscribe(s, &st, &o, &sub, &bl, &avail), FX_ECURSOR_IN_FUTURE);
    assert_int_equal(avail, 2);
    st.offset = 2; /* == tail: nothing to replay, live from here */
    assert_int_equal(fx_stream_subscribe(s, &st, &o, &sub, &bl, &avail), 0);
    assert_int_equal(bl.n, 0);
    pub1(s, "m2");
    expect_pop(sub, "m2", 2);
    fx_stream_free(s);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_ring_trims_to_capacity),
    cmocka_unit_test(test_publish_at_jumps_forward_restarting_the_ring_and_refuses_below),
    cmocka_unit_test(test_ring_read_spans_batches_from_any_offset),
    cmocka_unit_test(test_ring_trims_by_bytes),
    cmocka_unit_test(test_ring_charges_empty_payloads_until_their_batch_goes),
    cmocka_unit_test(test_ring_evicts_for_an_account_over_its_limit),
    cmocka_unit_test(test_evict_end_is_where_the_append_leaves_the_oldest),
    cmocka_unit_test(test_evict_end_walks_into_a_partly_trimmed_batch),
    cmocka_unit_test(test_zero_bounds_rejected),
    cmocka_unit_test(test_zero_subscribers_delivers_zero),
    cmocka_unit_test(test_delivers_in_order_with_offsets),
    cmocka_unit_test(test_wake_only_when_queue_becomes_non_empty),
    cmocka_unit_test(test_drop_new_second_publish_not_delivered),
    cmocka_unit_test(test_drop_new_cap_2_of_100_publishes_buffers_exactly_2),
    cmocka_unit_test(test_drop_old_keeps_newest),
    cmocka_unit_test(test_queued_items_counts_messages_waiting_in_the_queue),
    cmocka_unit_test(test_block_parks_fanout_and_resumes_without_duplicates),
    cmocka_unit_test(test_block_subscriber_added_while_parked_gets_batch_once),
    cmocka_unit_test(test_unsubscribe_while_parked_resumes_fanout),
    cmocka_unit_test(test_stream_free_releases_parked_fanout),
    cmocka_unit_test(test_envelope_shares_backing_buffer),
    cmocka_unit_test(test_cursor_tail_then_live_no_gap),
    cmocka_unit_test(test_start_latest_has_no_backlog),
    cmocka_unit_test(test_start_earliest),
    cmocka_unit_test(test_start_offset_too_old),
    cmocka_unit_test(test_start_offset_in_future),
};
FX_TEST_MAIN(tests)
