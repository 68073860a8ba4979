/* Unit tests for the writer lanes (lane.c, checkpoint 6) on their own: the
 * lane count from the options, each lane shard policy, the slot a list holds
 * until the writer has handed it to QUIC, and the three lane rules at a full
 * lane (drop_new sheds the new list, drop_old evicts the same subscription's
 * oldest, block parks the feeder until a slot is released), each with the
 * push result and exact counters. No broker, no QUIC: sub_fixture.h. */
/* fx-test-libs: fx_broker fx_quic fx_wire fx_base */
#include "broker/lane.h"
#include "broker/sub.h"
#include "sub_fixture.h"

static uint32_t want_lanes;
static fx_broker_lane_shard want_shard;
static fx_queue_policy want_policy;
static size_t want_depth;

static void tune(fx_broker_opts *o)
{
    o->subscriber_writer_lanes = want_lanes;
    o->subscriber_lane_shard = want_shard;
    o->subscriber_lane_queue_policy = want_policy;
    o->subscriber_lane_queue_depth = want_depth;
}

static fix *lanes(uint32_t n, fx_broker_lane_shard shard, fx_queue_policy p, size_t depth)
{
    want_lanes = n;
    want_shard = shard;
    want_policy = p;
    want_depth = depth;
    return fix_new(tune);
}

static void single_writer(fx_broker_opts *o)
{
    o->subscriber_single_writer_per_conn = true;
}

static void many_lanes(fx_broker_opts *o)
{
    o->subscriber_writer_lanes = 32;
    o->max_subscriber_writer_lanes = 8;
}

/* ---- lanes of a connection ----------------------------------------------- */

static void test_lane_count_from_options(void **state)
{
    fix *f = fix_new(NULL); /* 4 lanes by default */
    assert_int_equal(f->c.lanes.n, 4);
    for (uint32_t i = 0; i < f->c.lanes.n; i++) {
        assert_int_equal(f->c.lanes.lane[i].index, i);
        assert_int_equal(f->c.lanes.lane[i].capacity, 64);
    }
    fix_free(f);
    f = fix_new(many_lanes); /* clamped by max_subscriber_writer_lanes */
    assert_int_equal(f->c.lanes.n, 8);
    fix_free(f);
    f = fix_new(single_writer);
    assert_int_equal(f->c.lanes.n, 1);
    fix_free(f);
}

/* fx_broker_lane_hash is splitmix64's finalizer (documented in design.md). */
static void test_lane_hash_is_the_splitmix64_finalizer(void **state)
{
    assert_true(fx_broker_lane_hash(0) == 0);
    assert_true(fx_broker_lane_hash(1) == 0x5692161d100b05e5ull);
    assert_true(fx_broker_lane_hash(2) != fx_broker_lane_hash(1));
}

/* ---- shard policies ------------------------------------------------------- */

static void expect_subscriber_id_hash(fx_broker_lane_shard shard)
{
    fix *f = lanes(4, shard, FX_QUEUE_DROP_NEW, 64);
    bool used[4] = {false};
    for (uint64_t id = 1; id <= 32; id++) {
        fxb_sub *sub = fix_sub(f, id);
        assert_int_equal(sub->lane.lane->index, fx_broker_lane_hash(id) % 4);
        used[sub->lane.lane->index] = true;
        fix_sub_free(sub);
    }
    for (int i = 0; i < 4; i++)
        assert_true(used[i]); /* consecutive ids spread over every lane */
    assert_int_equal(f->c.lanes.rr_next, 0);
    fix_free(f);
}

static void test_subscriber_id_hash_spreads_subscriptions(void **state)
{
    expect_subscriber_id_hash(FX_BROKER_LANE_SUBSCRIBER_ID_HASH);
}

static void test_auto_shard_is_subscriber_id_hash(void **state)
{
    expect_subscriber_id_hash(FX_BROKER_LANE_AUTO);
}

static void test_connection_id_hash_keeps_a_connection_on_one_lane(void **state)
{
    uint32_t seen = 0;
    for (uint64_t conn = 1; conn <= 8; conn++) {
        fix *f = lanes(4, FX_BROKER_LANE_CONNECTION_ID_HASH, FX_QUEUE_DROP_NEW, 64);
        f->c.id = conn;
        for (uint64_t id = 1; id <= 6; id++) {
            fxb_sub *sub = fix_sub(f, id * 1000 + conn);
            assert_int_equal(sub->lane.lane->index, fx_broker_lane_hash(conn) % 4);
            seen |= 1u << sub->lane.lane->index;
            fix_sub_free(sub);
        }
        fix_free(f);
    }
    assert_true(__builtin_popcount(seen) >= 2); /* connections differ */
}

static void test_round_robin_pin_takes_lanes_in_turn(void **state)
{
    fix *f = lanes(3, FX_BROKER_LANE_ROUND_ROBIN_PIN, FX_QUEUE_DROP_NEW, 64);
    fxb_sub *subs[7];
    for (int i = 0; i < 7; i++) {
        subs[i] = fix_sub(f, 100 - (uint64_t)i); /* the ids do not matter */
        assert_int_equal(subs[i]->lane.lane->index, (uint32_t)i % 3);
    }
    assert_int_equal(f->c.lanes.rr_next, 7);
    for (int i = 0; i < 7; i++)
        fix_sub_free(subs[i]);
    fix_free(f);
}

/* ---- slots ------------------------------------------------------------------ */

/* A list holds its lane slot while queued and while being written; only the
 * writer's release gives it back. Each push kicks the writer. */
static void test_a_list_holds_its_slot_until_the_writer_releases_it(void **state)
{
    fix *f = lanes(1, FX_BROKER_LANE_AUTO, FX_QUEUE_DROP_NEW, 2);
    fxb_sub *sub = fix_sub(f, 1);
    fxb_lane *ln = sub->lane.lane;
    assert_int_equal(fxb_lane_push(sub, fix_list(1, 0), false), FXB_LANE_QUEUED);
    assert_int_equal(fxb_lane_push(sub, fix_list(1, 1), false), FXB_LANE_QUEUED);
    assert_int_equal(atomic_load(&ln->count), 2);
    fix_drain(f);
    assert_true(f->writer_kicks >= 1);
    void *item;
    assert_int_equal(fx_queue_pop(&sub->lane.q, &item), 0); /* being written */
    assert_int_equal(atomic_load(&ln->count), 2);
    assert_int_equal(fxb_lane_push(sub, fix_list(1, 2), false), FXB_LANE_SHED);
    fxb_frame_list_free(item);
    fxb_lane_release(ln); /* handed to QUIC */
    assert_int_equal(atomic_load(&ln->count), 1);
    assert_int_equal(fxb_lane_push(sub, fix_list(1, 3), false), FXB_LANE_QUEUED);
    assert_int_equal(fix_write_one(sub), 1);
    assert_int_equal(fix_write_one(sub), 3);
    assert_int_equal(atomic_load(&ln->count), 0);
    fix_sub_free(sub);
    fix_free(f);
}

/* ---- the three lane rules --------------------------------------------------- */

/* drop_new: a push to a full lane sheds the new list, counted in lists and in
 * messages (and on the subscription); what is queued stays. */
static void test_drop_new_sheds_the_new_list_and_counts_it(void **state)
{
    fix *f = lanes(1, FX_BROKER_LANE_AUTO, FX_QUEUE_DROP_NEW, 2);
    fxb_sub *a = fix_sub(f, 1), *b = fix_sub(f, 2); /* one lane, shared */
    fx_metrics_snapshot s0, s1;
    fx_metrics_snapshot_take(&s0);
    assert_int_equal(fxb_lane_push(a, fix_list(3, 0), false), FXB_LANE_QUEUED);
    assert_int_equal(fxb_lane_push(a, fix_list(3, 3), false), FXB_LANE_QUEUED);
    assert_int_equal(fxb_lane_push(b, fix_list(5, 0), false), FXB_LANE_SHED);
    assert_int_equal(fxb_lane_push(a, fix_list(2, 6), false), FXB_LANE_SHED);
    fx_metrics_snapshot_take(&s1);
    assert_int_equal(DELTA(s0, s1, subscriber_lane_dropped), 2);
    assert_int_equal(DELTA(s0, s1, subscriber_lane_dropped_events), 7);
    assert_int_equal(atomic_load(&b->lane.dropped_events), 5);
    assert_int_equal(atomic_load(&a->lane.dropped_events), 2);
    assert_int_equal(fix_write_one(a), 0);
    assert_int_equal(fix_write_one(a), 3);
    assert_int_equal(fx_queue_depth(&b->lane.q), 0);
    fix_sub_free(a);
    fix_sub_free(b);
    fix_free(f);
}

/* drop_old: a full lane evicts the pushing subscription's own oldest list,
 * never a neighbour's; with nothing of its own queued, its oldest delivery is
 * the new list, which is shed. */
static void test_drop_old_evicts_only_the_same_subscriptions_oldest(void **state)
{
    fix *f = lanes(1, FX_BROKER_LANE_AUTO, FX_QUEUE_DROP_OLD, 2);
    fxb_sub *a = fix_sub(f, 1), *b = fix_sub(f, 2);
    fx_metrics_snapshot s0, s1;
    fx_metrics_snapshot_take(&s0);
    assert_int_equal(fxb_lane_push(a, fix_list(3, 0), false), FXB_LANE_QUEUED);
    assert_int_equal(fxb_lane_push(b, fix_list(4, 0), false), FXB_LANE_QUEUED);
    assert_int_equal(fxb_lane_push(a, fix_list(1, 3), false), FXB_LANE_QUEUED); /* evicts a's 0..2 */
    fx_metrics_snapshot_take(&s1);
    assert_int_equal(DELTA(s0, s1, subscriber_lane_dropped), 1);
    assert_int_equal(DELTA(s0, s1, subscriber_lane_dropped_events), 3);
    assert_int_equal(atomic_load(&a->lane.dropped_events), 3);
    assert_int_equal(atomic_load(&b->lane.dropped_events), 0);
    assert_int_equal(atomic_load(&a->lane.lane->count), 2);
    /* b's own list is untouched; a neighbour's full lane sheds c's only. */
    assert_int_equal(fix_write_one(b), 0);
    assert_int_equal(fxb_lane_push(a, fix_list(1, 4), false), FXB_LANE_QUEUED);
    fxb_sub *c = fix_sub(f, 3);
    assert_int_equal(fxb_lane_push(c, fix_list(6, 0), false), FXB_LANE_SHED);
    fx_metrics_snapshot_take(&s1);
    assert_int_equal(DELTA(s0, s1, subscriber_lane_dropped), 2);
    assert_int_equal(DELTA(s0, s1, subscriber_lane_dropped_events), 9);
    assert_int_equal(atomic_load(&c->lane.dropped_events), 6);
    assert_int_equal(fix_write_one(a), 3);
    assert_int_equal(fix_write_one(a), 4);
    fix_sub_free(a);
    fix_sub_free(b);
    fix_sub_free(c);
    fix_free(f);
}

/* block: a push to a full lane parks the feeder with the list held, drops
 * nothing, and the release of a slot resumes it (its feed task is posted,
 * lane_resumed set). */
static void test_block_parks_the_feeder_until_a_slot_is_released(void **state)
{
    fix *f = lanes(1, FX_BROKER_LANE_AUTO, FX_QUEUE_BLOCK, 1);
    fxb_sub *a = fix_sub(f, 1), *b = fix_sub(f, 2);
    fx_metrics_snapshot s0, s1;
    fx_metrics_snapshot_take(&s0);
    assert_int_equal(fxb_lane_push(a, fix_list(1, 0), false), FXB_LANE_QUEUED);
    fx_frame_list *l = fix_list(1, 0);
    assert_int_equal(fxb_lane_push(b, l, false), FXB_LANE_PARKED);
    assert_ptr_equal(b->feed.held, l);
    assert_true(b->feed.lane_parked);
    assert_int_equal(atomic_load(&b->lane.lane->nwaiters), 1);
    fix_drain(f);
    int feeds = f->feeds;
    assert_int_equal(fix_write_one(a), 0); /* the slot comes back: b resumes */
    assert_int_equal(atomic_load(&b->lane.lane->nwaiters), 0);
    assert_true(atomic_load(&b->lane.resumed));
    fix_drain(f);
    assert_int_equal(f->feeds, feeds + 1);
    /* The feeder retries the held list (as feeder.c does) and it goes in. */
    b->feed.held = NULL;
    b->feed.lane_parked = false;
    assert_int_equal(fxb_lane_push(b, l, false), FXB_LANE_QUEUED);
    fx_metrics_snapshot_take(&s1);
    assert_int_equal(DELTA(s0, s1, subscriber_lane_dropped), 0);
    assert_int_equal(DELTA(s0, s1, subscriber_lane_dropped_events), 0);
    assert_int_equal(fix_write_one(b), 0);
    fix_sub_free(a);
    fix_sub_free(b);
    fix_free(f);
}

/* ---- closed subscriptions ---------------------------------------------------- */

/* A closed subscription's push is CLOSED: the list is freed, no slot taken,
 * nothing counted as a drop (whatever the policy). */
/* History (a catch-up backlog from the ring or from disk) is never shed: on a
 * full drop_new or drop_old lane it parks like block, while live lists of the
 * same subscription are still shed by the policy. */
static void test_history_parks_on_a_full_shedding_lane_instead_of_shedding(void **state)
{
    fx_queue_policy policies[] = {FX_QUEUE_DROP_NEW, FX_QUEUE_DROP_OLD};
    for (size_t i = 0; i < 2; i++) {
        fix *f = lanes(1, FX_BROKER_LANE_AUTO, policies[i], 1);
        fxb_sub *a = fix_sub(f, 1);
        fx_metrics_snapshot s0, s1;
        fx_metrics_snapshot_take(&s0);
        assert_int_equal(fxb_lane_push(a, fix_list(2, 0), true), FXB_LANE_QUEUED);
        fx_frame_list *l = fix_list(2, 2);
        assert_int_equal(fxb_lane_push(a, l, true), FXB_LANE_PARKED);
        assert_ptr_equal(a->feed.held, l);
        assert_int_equal(atomic_load(&a->lane.lane->nwaiters), 1);
        fx_metrics_snapshot_take(&s1);
        assert_int_equal(DELTA(s0, s1, subscriber_lane_dropped), 0);
        assert_int_equal(fix_write_one(a), 0); /* the slot comes back: a resumes */
        assert_int_equal(atomic_load(&a->lane.lane->nwaiters), 0);
        assert_true(atomic_load(&a->lane.resumed));
        fix_drain(f);
        a->feed.held = NULL;
        a->feed.lane_parked = false;
        assert_int_equal(fxb_lane_push(a, l, true), FXB_LANE_QUEUED);
        /* A live list on the full lane follows the policy: drop_new sheds
         * it; drop_old evicts the subscription's own oldest queued list
         * (here the last history list: its catch-up was handed over) for it. */
        fxb_lane_result r = fxb_lane_push(a, fix_list(1, 4), false);
        if (policies[i] == FX_QUEUE_DROP_NEW) {
            assert_int_equal(r, FXB_LANE_SHED);
            assert_int_equal(fix_write_one(a), 2);
        } else {
            assert_int_equal(r, FXB_LANE_QUEUED);
            assert_int_equal(fix_write_one(a), 4);
        }
        fx_metrics_snapshot_take(&s1);
        assert_int_equal(DELTA(s0, s1, subscriber_lane_dropped), 1);
        fix_sub_free(a);
        fix_free(f);
    }
}

static void test_push_after_close_is_closed_and_not_a_drop(void **state)
{
    fx_queue_policy policies[] = {FX_QUEUE_DROP_NEW, FX_QUEUE_DROP_OLD, FX_QUEUE_BLOCK};
    for (size_t i = 0; i < 3; i++) {
        fix *f = lanes(1, FX_BROKER_LANE_AUTO, policies[i], 1);
        fxb_sub *a = fix_sub(f, 1);
        fx_metrics_snapshot s0, s1;
        fx_metrics_snapshot_take(&s0);
        atomic_store(&a->closed, true);
        assert_int_equal(fxb_lane_push(a, fix_list(4, 0), false), FXB_LANE_CLOSED);
        assert_int_equal(atomic_load(&a->lane.lane->count), 0);
        fx_metrics_snapshot_take(&s1);
        assert_int_equal(DELTA(s0, s1, subscriber_lane_dropped), 0);
        fix_sub_free(a);
        fix_free(f);
    }
}

/* A parked feeder whose subscription closes leaves the parked list: a later
 * release resumes nobody. */
static void test_unpark_of_a_closed_subscription_is_never_resumed(void **state)
{
    fix *f = lanes(1, FX_BROKER_LANE_AUTO, FX_QUEUE_BLOCK, 1);
    fxb_sub *a = fix_sub(f, 1), *b = fix_sub(f, 2);
    assert_int_equal(fxb_lane_push(a, fix_list(1, 0), false), FXB_LANE_QUEUED);
    assert_int_equal(fxb_lane_push(b, fix_list(1, 0), false), FXB_LANE_PARKED);
    atomic_store(&b->closed, true);
    fxb_lane_unpark(b);
    assert_int_equal(atomic_load(&b->lane.lane->nwaiters), 0);
    assert_int_equal(atomic_load(&b->refs), 1); /* the parked list's reference went */
    fix_drain(f);
    int feeds = f->feeds;
    assert_int_equal(fix_write_one(a), 0);
    fix_drain(f);
    assert_int_equal(f->feeds, feeds);
    assert_false(atomic_load(&b->lane.resumed));
    fix_sub_free(a);
    fix_sub_free(b);
    fix_free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_lane_count_from_options),
    cmocka_unit_test(test_lane_hash_is_the_splitmix64_finalizer),
    cmocka_unit_test(test_subscriber_id_hash_spreads_subscriptions),
    cmocka_unit_test(test_auto_shard_is_subscriber_id_hash),
    cmocka_unit_test(test_connection_id_hash_keeps_a_connection_on_one_lane),
    cmocka_unit_test(test_round_robin_pin_takes_lanes_in_turn),
    cmocka_unit_test(test_a_list_holds_its_slot_until_the_writer_releases_it),
    cmocka_unit_test(test_drop_new_sheds_the_new_list_and_counts_it),
    cmocka_unit_test(test_drop_old_evicts_only_the_same_subscriptions_oldest),
    cmocka_unit_test(test_block_parks_the_feeder_until_a_slot_is_released),
    cmocka_unit_test(test_history_parks_on_a_full_shedding_lane_instead_of_shedding),
    cmocka_unit_test(test_push_after_close_is_closed_and_not_a_drop),
    cmocka_unit_test(test_unpark_of_a_closed_subscription_is_never_resumed),
};
FX_TEST_MAIN(tests)
