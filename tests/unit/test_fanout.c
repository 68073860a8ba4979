/* Unit tests for the fanout (fanout.c, checkpoint 5) on its own: envelopes
 * are set as the pending batch by hand and offered with fx_fanout_run, with
 * subscribers made by fx_fanout_sub_new, so neither the ring nor start
 * positions take part. Each subscriber's cursor, the three queue policies
 * with exact drop counts, a parked fanout resumed where it stopped, and a
 * subscriber added while parked not owed the parked batch. */
/* fx-test-libs: fx_broker fx_wire fx_base */
#include <errno.h>
#include <string.h>

#include "fx_test.h"

#include "base/metrics.h"
#include "broker/stream.h"
#include "broker/stream_internal.h"
#include "felix/error.h"

#define DELTA(a, b, field) ((int64_t)((b).c.field - (a).c.field))

static int resumes;

static void on_resume(fx_stream *s, void *user)
{
    (void)s;
    (void)user;
    resumes++;
}

static fx_stream *mkstream(size_t qcap, fx_queue_policy p)
{
    fx_stream_opts o = {.handle_id = 3,
                        .log_capacity = 1024,
                        .log_capacity_bytes = 1u << 20,
                        .sub_queue_capacity = qcap,
                        .sub_queue_policy = p,
                        .on_resume = on_resume};
    fx_stream *s = NULL;
    assert_int_equal(fx_stream_new(&s, &o), 0);
    resumes = 0;
    return s;
}

static fx_subscriber *mksub(fx_stream *s, uint64_t id)
{
    fx_subscribe_opts o = {.subscription_id = id};
    fx_subscriber *sub = NULL;
    assert_int_equal(fx_fanout_sub_new(s, &o, &sub), 0);
    assert_int_equal(fx_fanout_subs_add(s, sub), 0);
    return sub;
}

static const fx_wire_slice P[4] = {{(const uint8_t *)"a", 1},
                                   {(const uint8_t *)"bb", 2},
                                   {(const uint8_t *)"c", 1},
                                   {(const uint8_t *)"dd", 2}};

/* Makes [base, base + n) the pending batch (as an append would) and offers
 * it. Returns fx_fanout_run's result. */
static int offer_batch(fx_stream *s, uint64_t base, uint32_t n, fx_fanout_result *res)
{
    fx_envelope *e;
    assert_int_equal(fx_envelope_new(&e, 3, base, NULL, P, n), 0);
    assert_null(s->pending);
    s->pending = e;
    s->tail = base + n;
    *res = (fx_fanout_result){0}; /* as fx_stream_publish starts it */
    return fx_fanout_run(s, 1000, res);
}

static uint64_t pop_base(fx_subscriber *sub)
{
    fx_envelope *e = NULL;
    assert_int_equal(fx_subscriber_pop(sub, 2000, &e), 0);
    uint64_t base = fx_envelope_base_offset(e);
    fx_envelope_unref(e);
    return base;
}

/* ---- cursors ------------------------------------------------------------------ */

/* A batch goes to every subscriber whose cursor says it is still owed, and
 * moves every cursor past it; a subscriber already past it gets nothing. */
static void test_batch_goes_only_to_subscribers_still_owed_it(void **state)
{
    fx_stream *s = mkstream(8, FX_QUEUE_DROP_NEW);
    s->tail = 10;
    fx_subscriber *a = mksub(s, 1);
    fx_subscriber *b = mksub(s, 2);
    assert_int_equal(a->next, 10); /* a new subscriber starts at the tail */
    b->next = 13;                  /* as if it took [10, 13) before a park */
    fx_fanout_result res;
    assert_int_equal(offer_batch(s, 10, 3, &res), 0);
    assert_int_equal(res.base_offset, 10);
    assert_int_equal(res.delivered, 1);
    assert_int_equal(res.delivered_items, 3);
    assert_int_equal(res.dropped, 0);
    assert_int_equal(a->next, 13);
    assert_int_equal(b->next, 13);
    assert_int_equal(pop_base(a), 10);
    assert_int_equal(fx_queue_depth(&b->q), 0);
    assert_null(s->pending); /* released once everybody had it */
    fx_stream_free(s);
}

/* ---- policies ---------------------------------------------------------------- */

static void test_drop_new_sheds_the_new_batch_counted_in_messages(void **state)
{
    fx_stream *s = mkstream(1, FX_QUEUE_DROP_NEW);
    fx_subscriber *a = mksub(s, 1);
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    fx_fanout_result res;
    assert_int_equal(offer_batch(s, 0, 3, &res), 0);
    assert_int_equal(res.delivered, 1);
    assert_int_equal(offer_batch(s, 3, 2, &res), 0);
    assert_int_equal(res.delivered, 0);
    assert_int_equal(res.dropped, 1);
    assert_int_equal(res.dropped_items, 2);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, subscribe_dropped), 2);
    assert_int_equal(DELTA(m0, m1, sub_queue_dropped), 2);
    assert_int_equal(DELTA(m0, m1, sub_queue_drop_old), 0);
    fx_subscriber_stats st;
    fx_subscriber_get_stats(a, &st);
    assert_int_equal(st.dropped, 1);
    assert_int_equal(st.dropped_items, 2);
    assert_int_equal(st.queued_items, 3);
    assert_int_equal(a->next, 5); /* shed is done with: never offered again */
    assert_int_equal(pop_base(a), 0);
    fx_stream_free(s);
}

static void test_drop_old_evicts_the_oldest_counted_as_drop_old(void **state)
{
    fx_stream *s = mkstream(1, FX_QUEUE_DROP_OLD);
    fx_subscriber *a = mksub(s, 1);
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    fx_fanout_result res;
    assert_int_equal(offer_batch(s, 0, 3, &res), 0);
    assert_int_equal(offer_batch(s, 3, 2, &res), 0);
    assert_int_equal(res.delivered, 1); /* the new one went in */
    assert_int_equal(res.dropped, 0);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, subscribe_dropped), 3);
    assert_int_equal(DELTA(m0, m1, sub_queue_dropped), 3);
    assert_int_equal(DELTA(m0, m1, sub_queue_drop_old), 3);
    fx_subscriber_stats st;
    fx_subscriber_get_stats(a, &st);
    assert_int_equal(st.dropped_items, 3);
    assert_int_equal(st.queued_items, 2);
    assert_int_equal(pop_base(a), 3);
    fx_stream_free(s);
}

/* block: a full queue parks the fanout on that subscriber before anyone
 * after it is offered; a pop resumes it, and the resumed run skips whoever
 * already took the batch. */
static void test_block_parks_then_resumes_where_it_stopped(void **state)
{
    fx_stream *s = mkstream(1, FX_QUEUE_BLOCK);
    fx_subscriber *a = mksub(s, 1);
    fx_subscriber *b = mksub(s, 2);
    fx_fanout_result res;
    assert_int_equal(offer_batch(s, 0, 1, &res), 0);
    assert_int_equal(pop_base(b), 0); /* b has room, a is full */
    assert_int_equal(offer_batch(s, 1, 1, &res), -EAGAIN);
    assert_ptr_equal(s->parked_on, a);
    assert_true(fx_stream_is_parked(s));
    assert_int_equal(b->next, 1);                               /* not offered yet */
    assert_int_equal(fx_stream_resume(s, 1000, &res), -EAGAIN); /* not woken yet */
    assert_int_equal(resumes, 0);
    assert_int_equal(pop_base(a), 0);
    assert_int_equal(resumes, 1);
    assert_int_equal(fx_stream_resume(s, 1000, &res), 0);
    assert_false(fx_stream_is_parked(s));
    assert_int_equal(res.delivered, 2);
    assert_int_equal(pop_base(a), 1);
    assert_int_equal(pop_base(b), 1);
    assert_int_equal(fx_queue_depth(&a->q) + fx_queue_depth(&b->q), 0);
    fx_stream_free(s);
}

/* A subscriber added while the fanout is parked starts at the tail, past the
 * parked batch (its backlog has it): the resumed fanout does not offer it. */
static void test_subscriber_added_while_parked_is_not_owed_the_parked_batch(void **state)
{
    fx_stream *s = mkstream(1, FX_QUEUE_BLOCK);
    fx_subscriber *a = mksub(s, 1);
    fx_fanout_result res;
    assert_int_equal(offer_batch(s, 0, 2, &res), 0);
    assert_int_equal(offer_batch(s, 2, 2, &res), -EAGAIN);
    fx_subscriber *late = mksub(s, 9);
    assert_int_equal(late->next, 4);
    assert_int_equal(pop_base(a), 0);
    assert_int_equal(fx_stream_resume(s, 1000, &res), 0);
    assert_int_equal(res.delivered, 1); /* a only */
    assert_int_equal(fx_queue_depth(&late->q), 0);
    assert_int_equal(pop_base(a), 2);
    assert_int_equal(offer_batch(s, 4, 1, &res), 0); /* the next batch: both */
    assert_int_equal(res.delivered, 2);
    assert_int_equal(pop_base(a), 4);
    assert_int_equal(pop_base(late), 4);
    fx_stream_free(s);
}

/* Removing the subscriber the fanout waits on resumes it (nobody would drain
 * that queue any more); its queued envelopes are released, not counted. */
static void test_unsubscribing_the_parked_on_subscriber_resumes_the_fanout(void **state)
{
    fx_stream *s = mkstream(1, FX_QUEUE_BLOCK);
    fx_subscriber *a = mksub(s, 1);
    fx_subscriber *b = mksub(s, 2);
    fx_fanout_result res;
    assert_int_equal(offer_batch(s, 0, 1, &res), 0);
    assert_int_equal(pop_base(b), 0);
    assert_int_equal(offer_batch(s, 1, 1, &res), -EAGAIN);
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    fx_stream_unsubscribe(s, a);
    assert_int_equal(resumes, 1);
    assert_int_equal(fx_stream_resume(s, 1000, &res), 0);
    assert_int_equal(res.delivered, 1);
    assert_int_equal(pop_base(b), 1);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, subscribe_dropped), 0);
    fx_stream_free(s);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_batch_goes_only_to_subscribers_still_owed_it),
    cmocka_unit_test(test_drop_new_sheds_the_new_batch_counted_in_messages),
    cmocka_unit_test(test_drop_old_evicts_the_oldest_counted_as_drop_old),
    cmocka_unit_test(test_block_parks_then_resumes_where_it_stopped),
    cmocka_unit_test(test_subscriber_added_while_parked_is_not_owed_the_parked_batch),
    cmocka_unit_test(test_unsubscribing_the_parked_on_subscriber_resumes_the_fanout),
};
FX_TEST_MAIN(tests)
