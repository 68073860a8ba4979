/* Integration tests of the ring hold (checkpoint 4g) on a real broker spoken
 * to in raw frames: a stream in memory with a ring of 64 records, one
 * worker. In the lossless profile (subscriber_queue_policy block) an append
 * that would evict a record a consumer group has not settled waits until
 * the group settles it, or until group_hold_timeout_ms (then the group
 * settles what was evicted as skipped, counted); in the shedding profile
 * nothing waits. A poison record terminated while its group holds the ring
 * and the worker's queue is full does not deadlock the worker that must
 * queue its dead letter. */
/* fx-test-libs: fx_broker fx_storage fx_quic fx_wire fx_server fx_base */
#include "integ/broker_client.h"
#include "wire/group.h"

#define RING 64
#define MAX_RECS 4096

typedef struct grec {
    uint64_t offset;
    uint32_t attempt;
} grec;

static grec recs[MAX_RECS];
static size_t nrecs;
/* Off when publishes race on several streams (offsets follow arrival). */
static bool check_payloads;

static void on_group(T *t, tstream *s, const fx_frame *f)
{
    fx_wire_group_batch b;
    assert_int_equal(fx_wire_group_batch_decode(f->body, f->len, &b, NULL), 0);
    uint32_t k = 0;
    for (uint32_t r = 0; r < b.nruns; r++) {
        for (uint32_t i = 0; i < b.runs[r].count; i++, k++) {
            assert_true(nrecs < MAX_RECS);
            recs[nrecs++] = (grec){b.runs[r].first + i, b.runs[r].attempt};
            if (check_payloads)
                check_event(t, s, b.runs[r].first + i, b.payloads[k]);
        }
    }
    s->events += k;
    fx_wire_group_batch_deinit(&b);
}

/* One worker, a ring of RING records, commit acks (a publish is answered
 * once appended); |lossless|: block at checkpoints 5 and 6. */
static T *hold_t(bool lossless, uint64_t hold_timeout_ms)
{
    nrecs = 0;
    check_payloads = true;
    T *t = t_new();
    t->size_of = size_small;
    t->on_group_frame = on_group;
    t->bo.workers = 1;
    t->bo.log_capacity = RING;
    t->bo.ack_on_commit = true;
    t->bo.group_hold_timeout_ns = hold_timeout_ms * FX_NS_PER_MS;
    if (lossless)
        t_lossless(t);
    return t;
}

typedef struct member {
    tstream *join, *ev;
} member;

/* Joins group "g" of |stream|, creating it at the oldest record. */
static member join(T *t, tconn *c, const char *stream, uint32_t window)
{
    member mb = {.join = open_bidi(c)};
    fx_msg m;
    fx_msg_init_auth(&m, "t1", "any-token", true, 63 | FX_FLAG_FELIXC);
    send_msg(mb.join, &m);
    fx_msg r;
    expect_msg(t, mb.join, FX_MSG_AUTH_OK, NULL, &r);
    fx_msg_deinit(&r);
    char json[256];
    snprintf(json, sizeof(json),
             "{\"type\":\"group_join\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
             "\"stream\":\"%s\",\"group\":\"g\",\"create\":\"all\",\"window\":%u}",
             stream, (unsigned)window);
    send_json(mb.join, json);
    expect_msg(t, mb.join, FX_MSG_GROUP_JOINED, NULL, &r);
    sub_wait w = {c, r.subscription_id};
    fx_msg_deinit(&r);
    assert_true(run_until_arg(t, sub_ready, &w, 3000));
    mb.ev = event_stream_of(c, w.id);
    return mb;
}

static void send_op(member *mb, fx_wire_group_op op)
{
    fx_wire_group_acks a = {.nops = 1, .ops = &op};
    size_t size = fx_wire_group_acks_frame_size(&a);
    uint8_t *p = malloc(size);
    assert_non_null(p);
    assert_int_equal(fx_wire_group_acks_encode(&a, p, size), (ssize_t)size);
    send_bytes(mb->join, p, size);
    free(p);
}

static void ack(member *mb, uint64_t first, uint32_t count)
{
    send_op(mb, (fx_wire_group_op){.kind = FX_GROUP_OP_ACK, .first = first, .count = count});
}

static bool have_recs(T *t)
{
    return nrecs >= *(size_t *)t->arg;
}

static void wait_recs(T *t, size_t n, uint64_t ms)
{
    if (!run_until_arg(t, have_recs, &n, ms))
        fail_msg("%zu deliveries, want %zu", nrecs, n);
}

/* Sends one acked publish of offset |off| (request id |rid|), unanswered. */
static void publish_one_acked(T *t, tstream *p, const char *stream, uint64_t off, uint64_t rid)
{
    send_buf(p, binary_publish(t, stream, off, 1, true, rid));
}

typedef struct counter_at_least {
    fx_metrics_snapshot *before;
    int64_t (*delta)(const fx_metrics_snapshot *a, const fx_metrics_snapshot *b);
    int64_t want;
} counter_at_least;

static bool counter_reached(T *t)
{
    counter_at_least *w = t->arg;
    fx_metrics_snapshot now;
    fx_metrics_snapshot_take(&now);
    return w->delta(w->before, &now) >= w->want;
}

static int64_t d_waits(const fx_metrics_snapshot *a, const fx_metrics_snapshot *b)
{
    return DELTA(*a, *b, group_hold_waits);
}

static int64_t d_skipped(const fx_metrics_snapshot *a, const fx_metrics_snapshot *b)
{
    return DELTA(*a, *b, group_skipped);
}

static int64_t d_queue_full(const fx_metrics_snapshot *a, const fx_metrics_snapshot *b)
{
    return DELTA(*a, *b, ingress_queue_full);
}

static void wait_counter(T *t, fx_metrics_snapshot *before,
                         int64_t (*delta)(const fx_metrics_snapshot *, const fx_metrics_snapshot *),
                         int64_t want)
{
    counter_at_least w = {before, delta, want};
    assert_true(run_until_arg(t, counter_reached, &w, 5000));
}

static int64_t held_now(void)
{
    return atomic_load_explicit(&fx_gauges.group_hold_held, memory_order_relaxed);
}

/* Acks every record delivered since |*acked|, one op each. */
static void ack_new(member *mb, size_t *acked)
{
    for (; *acked < nrecs; (*acked)++)
        ack(mb, recs[*acked].offset, 1);
}

/* ---- cases -------------------------------------------------------------------------------- */

static void test_a_publish_past_the_ring_waits_for_the_group_and_nothing_is_skipped(void **state)
{
    (void)state;
    T *t = hold_t(true, 0);
    t_start(t);
    member a = join(t, t_connect(t), "hold", 128);
    tstream *p = authed_stream(t, t_connect(t));
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    publish_range(t, p, "hold", 0, RING); /* fills the ring */
    wait_recs(t, RING, 3000);             /* a holds them all, unacked */
    publish_one_acked(t, p, "hold", RING, 1);
    wait_counter(t, &before, d_waits, 1);
    run_for(t, 300);
    assert_null(p->head); /* not appended: offset 0 is not settled */
    assert_int_equal(held_now(), 1);
    ack(&a, 0, 1);
    expect_ack(t, p, 1); /* one record settled: room for one */
    /* Then 136 more, acked as they come: each append past the ring waits
     * for its ack; every record is delivered once, none skipped. */
    const uint64_t total = 200;
    publish_range(t, p, "hold", RING + 1, total - RING - 1);
    size_t acked = 1;
    uint64_t deadline = fx_now_ns() + 20 * FX_NS_PER_S;
    while (nrecs < total && fx_now_ns() < deadline) {
        ack_new(&a, &acked);
        run_for(t, 5);
    }
    ack_new(&a, &acked);
    assert_int_equal(nrecs, total);
    for (size_t i = 0; i < nrecs; i++) {
        assert_int_equal(recs[i].offset, i);
        assert_int_equal(recs[i].attempt, 1);
    }
    run_for(t, 100);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, group_skipped), 0);
    assert_true(DELTA(before, after, group_hold_waits) >= 1);
    assert_int_equal(DELTA(before, after, group_hold_timeouts), 0);
    assert_int_equal(held_now(), 0);
    assert_int_equal(a.ev->bad, 0);
    t_free(t);
}

static void test_a_member_that_never_acks_holds_the_ring_until_the_timeout_once_a_turn(void **state)
{
    (void)state;
    T *t = hold_t(true, 200);
    t_start(t);
    member a = join(t, t_connect(t), "stuck", 128);
    tstream *p = authed_stream(t, t_connect(t));
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    publish_range(t, p, "stuck", 0, RING);
    wait_recs(t, RING, 3000);
    uint64_t t0 = fx_now_ns();
    publish_one_acked(t, p, "stuck", RING, 1);
    expect_ack(t, p, 1);
    uint64_t waited_ms = (fx_now_ns() - t0) / FX_NS_PER_MS;
    assert_true(waited_ms >= 180 && waited_ms < 2000);
    wait_counter(t, &before, d_skipped, 1); /* offset 0, settled unread */
    /* The hold lapsed: the stuck group does not make every later append
     * wait again (no new wait is counted), only once it has caught up: here
     * after a turn of the ring, when its floor reaches the tail the escape
     * left (65), at the append of offset 129. */
    for (uint64_t i = 1; i <= RING; i++) {
        publish_one_acked(t, p, "stuck", RING + i, 1 + i);
        expect_ack(t, p, 1 + i);
    }
    wait_counter(t, &before, d_skipped, 1 + RING);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, group_hold_waits), 1);
    t0 = fx_now_ns();
    publish_one_acked(t, p, "stuck", 2 * RING + 1, 100);
    expect_ack(t, p, 100);
    assert_true((fx_now_ns() - t0) / FX_NS_PER_MS >= 180);
    wait_counter(t, &before, d_skipped, 2 + RING);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, group_hold_timeouts), 2);
    assert_int_equal(DELTA(before, after, group_hold_waits), 2);
    assert_int_equal(DELTA(before, after, group_skipped), 2 + RING);
    assert_int_equal(held_now(), 0);
    (void)a;
    t_free(t);
}

static void test_the_shedding_profile_never_waits_and_counts_what_it_skips(void **state)
{
    (void)state;
    T *t = hold_t(false, 0);
    t_start(t);
    member a = join(t, t_connect(t), "shed", 128);
    tstream *p = authed_stream(t, t_connect(t));
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    publish_range(t, p, "shed", 0, RING);
    wait_recs(t, RING, 3000);
    for (uint64_t i = 0; i < 10; i++) {
        publish_one_acked(t, p, "shed", RING + i, 1 + i);
        expect_ack(t, p, 1 + i);
    }
    wait_counter(t, &before, d_skipped, 10);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, group_hold_waits), 0);
    assert_int_equal(DELTA(before, after, group_skipped), 10);
    (void)a;
    t_free(t);
}

/* The group's worker is also its dead-letter stream's: while the hold keeps
 * the worker's queue full, a terminated record at the group's floor cannot
 * queue its dead letter. The group stops holding it (counted) instead of
 * waiting forever (group_hold_timeout_ms is 0 here). Publishes on eight
 * streams make eight jobs for a queue of two. */
static void test_a_poison_record_terminated_while_the_ring_is_held_does_not_deadlock(void **state)
{
    (void)state;
    T *t = hold_t(true, 0);
    t->bo.log_capacity = 8;
    t->bo.pub_queue_depth = 2;
    t_start(t);
    member a = join(t, t_connect(t), "poison", 16);
    tconn *pc = t_connect(t);
    tstream *p = authed_stream(t, pc);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    publish_range(t, p, "poison", 0, 8);
    wait_recs(t, 8, 3000);
    ack(&a, 1, 7); /* all but offset 0 */
    check_payloads = false;
    tstream *ps[8];
    for (int i = 0; i < 8; i++)
        ps[i] = authed_stream(t, pc);
    for (int i = 0; i < 8; i++)
        publish_range(t, ps[i], "poison", 8 + (uint64_t)i, 1);
    wait_counter(t, &before, d_waits, 1);
    wait_counter(t, &before, d_queue_full, 1); /* the worker's queue is full */
    run_for(t, 100);
    assert_int_equal(held_now(), 1);
    send_op(&a, (fx_wire_group_op){.kind = FX_GROUP_OP_TERM, .first = 0, .count = 1, .attempt = 1});
    /* The worker goes on: everything is appended and delivered once. */
    size_t acked = 8;
    uint64_t deadline = fx_now_ns() + 10 * FX_NS_PER_S;
    while (nrecs < 16 && fx_now_ns() < deadline) {
        ack_new(&a, &acked);
        run_for(t, 5);
    }
    ack_new(&a, &acked);
    assert_int_equal(nrecs, 16);
    uint8_t seen[16] = {0};
    for (size_t i = 0; i < nrecs; i++) {
        assert_true(recs[i].offset < 16 && seen[recs[i].offset] == 0);
        seen[recs[i].offset] = 1;
    }
    run_for(t, 100);
    fx_metrics_snapshot_take(&after);
    assert_true(DELTA(before, after, group_hold_dead_letter_yields) >= 1);
    assert_true(DELTA(before, after, group_dead_retried) >= 1);
    /* Offset 0 is accounted for: evicted before its dead letter could be
     * queued, so settled as skipped. */
    assert_int_equal(DELTA(before, after, group_skipped), 1);
    assert_int_equal(DELTA(before, after, group_dead_term), 0);
    assert_int_equal(held_now(), 0);
    t_free(t);
}

/* Deleting a stream whose append is held: the deletion waits for the jobs
 * admitted before it, so the held one goes ahead instead of holding the
 * deletion (and its worker) for ever. */
static void test_deleting_a_stream_lets_its_held_append_go(void **state)
{
    (void)state;
    T *t = hold_t(true, 0);
    t_start(t);
    member a = join(t, t_connect(t), "gone", 128);
    tstream *p = authed_stream(t, t_connect(t));
    fx_metrics_snapshot before;
    fx_metrics_snapshot_take(&before);
    publish_range(t, p, "gone", 0, RING);
    wait_recs(t, RING, 3000);
    publish_one_acked(t, p, "gone", RING, 1);
    wait_counter(t, &before, d_waits, 1);
    fx_registry_err err;
    assert_int_equal(fx_broker_delete_stream(t->b, "t1", "default", "gone", &err), 0);
    expect_ack(t, p, 1); /* admitted before the deletion: appended */
    run_for(t, 100);
    assert_int_equal(held_now(), 0);
    (void)a;
    t_free(t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_a_publish_past_the_ring_waits_for_the_group_and_nothing_is_skipped),
    cmocka_unit_test(test_a_member_that_never_acks_holds_the_ring_until_the_timeout_once_a_turn),
    cmocka_unit_test(test_the_shedding_profile_never_waits_and_counts_what_it_skips),
    cmocka_unit_test(test_a_poison_record_terminated_while_the_ring_is_held_does_not_deadlock),
    cmocka_unit_test(test_deleting_a_stream_lets_its_held_append_go),
};

FX_TEST_MAIN(tests)
