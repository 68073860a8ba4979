/* Unit twin of src/broker/replay.c: catch-up from a durable stream's log
 * for a subscription that starts below its ring, on the storage module's
 * in-memory file system (storage/memio.h) under the one-thread broker of
 * conn_fixture.h. The replay thread's loop ("fx-replay-N") is a fake loop
 * too, so a test can hold the reads back and release them one page at a
 * time. */
/* fx-test-libs: fx_broker fx_storage fx_wire fx_base */
#include "unit/conn_fixture.h"

#include "storage/memio.h"

#define ROOT "/fxreplay"
#define REPLAY "fx-replay"

static fx_memio *mem;     /* the file system of the broker being built */
static uint32_t ring;     /* log_capacity */
static uint32_t per_read; /* max_records_per_read; 0 = the default */

static void durable(fx_broker_opts *o, fq_config *q)
{
    (void)q;
    o->durable.dir = ROOT;
    o->durable.io = fx_memio_sio(mem);
    o->durable.durable_default = true;
    o->durable.fsync_mode = FX_FSYNC_NONE;
    o->durable.segment_bytes = 1 << 20;
    o->durable.preallocate = false;
    if (per_read != 0)
        o->durable.max_records_per_read = per_read;
    o->log_capacity = ring;
}

/* A broker whose streams are durable, with a ring of |log_capacity|
 * messages and replay pages of |records| records (0: the default). */
static cf *r_new(uint32_t log_capacity, uint32_t records)
{
    assert_int_equal(fx_memio_new(&mem), 0);
    ring = log_capacity;
    per_read = records;
    return cf_new(durable);
}

static void r_free(cf *f)
{
    cf_free(f);
    fx_memio_free(mem);
    mem = NULL;
}

/* Like cf_settle, with the loops named |prefix| held back. */
static void settle_but(cf *f, const char *prefix)
{
    for (unsigned i = 0; i < 1000; i++) {
        cf_ack(f);
        cf_turn(f);
        bool any = cf_run_but(f, prefix);
        any |= cf_fire_due();
        if (!any && (f->qc == NULL || fq_unacked(f->qc) == 0))
            return;
    }
    fail_msg("the broker never settled");
}

/* Runs one queued task of a loop named |prefix|. Returns whether one ran. */
static bool run_one(const char *prefix)
{
    for (size_t i = 0; fx_fake_loop_at(i) != NULL; i++) {
        fx_loop *l = fx_fake_loop_at(i);
        if (strncmp(fx_loop_name(l), prefix, strlen(prefix)) == 0 && fx_fake_loop_run_one(l))
            return true;
    }
    return false;
}

/* Publishes "m<first>".."m<first+n-1>" to t1/default/d on |sid|, one at a
 * time (the ring drops the oldest as it goes). */
static void publish_range(cf *f, int64_t sid, int first, int n)
{
    for (int i = first; i < first + n; i++) {
        char p[16];
        snprintf(p, sizeof(p), "m%d", i);
        cf_publish(f, sid, "t1", "d", p);
        cf_settle(f);
    }
}

/* Subscribes on |sid| (authenticated) to t1/default/d from |offset|, with
 * the replay thread held back; checks the answer. Returns the event
 * stream's id. */
static int64_t subscribe_from(cf *f, int64_t sid, uint64_t offset)
{
    fx_msg m = {.type = FX_MSG_SUBSCRIBE,
                .tenant_id = "t1",
                .ns = "default",
                .stream = "d",
                .start = {.kind = FX_MSG_START_OFFSET, .offset = offset}};
    cf_write_msg(f, sid, &m);
    settle_but(f, REPLAY);
    cf_expect_msg(f, sid, FX_MSG_SUBSCRIBED, NULL);
    int64_t uni = cf_uni(f, 0);
    assert_true(uni >= 0);
    return uni;
}

/* Asserts that |ev[0..n)| are "m<first>".."m<first+n-1>". */
static void expect_run(char ev[][64], size_t n, int first)
{
    for (size_t i = 0; i < n; i++) {
        char want[16];
        snprintf(want, sizeof(want), "m%d", first + (int)i);
        if (strcmp(ev[i], want) != 0)
            fail_msg("event %zu is \"%s\", expected \"%s\"", i, ev[i], want);
    }
}

static uint64_t counter_replay_records(void)
{
    fx_metrics_snapshot s;
    fx_metrics_snapshot_take(&s);
    return s.c.storage_replay_records;
}

static uint64_t counter_replay_failures(void)
{
    fx_metrics_snapshot s;
    fx_metrics_snapshot_take(&s);
    return s.c.storage_replay_failures;
}

/* ---- cases ------------------------------------------------------------------------------- */

/* Nine messages, a ring of two, pages of two records: a subscriber from
 * offset 0 gets the log read page by page, each page at most two records
 * and only once the replay thread ran, in offset order; then the ring's
 * messages are not sent again. */
static void test_pages_read_in_offset_order(void **state)
{
    (void)state;
    cf *f = r_new(2, 2);
    cf_auth(f, 4, "t1");
    publish_range(f, 4, 0, 9);
    cf_auth(f, 0, "t1");
    uint64_t records = counter_replay_records();
    int64_t uni = subscribe_from(f, 0, 0);
    char ev[16][64];
    size_t got = cf_read_events(f, uni, ev, 16);
    assert_int_equal(got, 0); /* nothing before the replay thread reads */
    unsigned pages = 0;
    while (run_one(REPLAY)) {
        pages++;
        settle_but(f, REPLAY);
        size_t n = cf_read_events(f, uni, ev + got, 16 - got);
        assert_true(n <= 2);
        got += n;
        assert_true(pages < 16);
    }
    assert_true(pages >= 5); /* ceil(9 / 2) pages of records */
    assert_int_equal(got, 9);
    expect_run(ev, got, 0);
    assert_int_equal(counter_replay_records() - records, 9);
    cf_settle(f);
    assert_int_equal(cf_read_events(f, uni, ev, 16), 0);
    r_free(f);
}

/* Messages published while the replay is under way queue behind it: the
 * subscriber gets the history, then exactly the live messages, with
 * neither a gap nor a duplicate at the hand-over. */
static void test_handover_to_live_without_gap(void **state)
{
    (void)state;
    cf *f = r_new(2, 2);
    cf_auth(f, 4, "t1");
    publish_range(f, 4, 0, 5);
    cf_auth(f, 0, "t1");
    int64_t uni = subscribe_from(f, 0, 0);
    assert_true(run_one(REPLAY)); /* the first page */
    settle_but(f, REPLAY);
    for (int i = 5; i < 8; i++) { /* live, while the rest is still on disk */
        char p[16];
        snprintf(p, sizeof(p), "m%d", i);
        cf_publish(f, 4, "t1", "d", p);
        settle_but(f, REPLAY);
    }
    cf_settle(f);
    publish_range(f, 4, 8, 1); /* after the hand-over */
    char ev[16][64];
    assert_int_equal(cf_read_events(f, uni, ev, 16), 9);
    expect_run(ev, 9, 0);
    r_free(f);
}

/* A subscriber from an offset inside the log (below the ring, above the
 * log's first offset) gets the log from there, not from its start. */
static void test_start_inside_log(void **state)
{
    (void)state;
    cf *f = r_new(2, 0);
    cf_auth(f, 4, "t1");
    publish_range(f, 4, 0, 8);
    cf_auth(f, 0, "t1");
    uint64_t records = counter_replay_records();
    int64_t uni = subscribe_from(f, 0, 3);
    cf_settle(f);
    publish_range(f, 4, 8, 1);
    char ev[16][64];
    assert_int_equal(cf_read_events(f, uni, ev, 16), 6);
    expect_run(ev, 6, 3);
    assert_int_equal(counter_replay_records() - records, 5); /* m3..m7 */
    r_free(f);
}

/* The stream is deleted while its replay waits for the replay thread: the
 * rest of the history is still delivered, in order, then the event stream
 * ends with a FIN (no reset), and the broker leaves nothing queued or
 * armed. */
static void test_deleted_stream_replay_ends(void **state)
{
    (void)state;
    cf *f = r_new(2, 2);
    cf_auth(f, 4, "t1");
    publish_range(f, 4, 0, 5);
    cf_auth(f, 0, "t1");
    int64_t uni = subscribe_from(f, 0, 0);
    assert_true(run_one(REPLAY));
    settle_but(f, REPLAY);
    fx_registry_err err;
    assert_int_equal(fx_broker_delete_stream(f->b, "t1", "default", "d", &err), 0);
    cf_settle(f);
    char ev[16][64];
    assert_int_equal(cf_read_events(f, uni, ev, 16), 5);
    expect_run(ev, 5, 0);
    fq_stream *s = cf_stream(f, uni);
    assert_non_null(s);
    assert_true(s->tx_fin);
    assert_false(s->reset);
    assert_false(cf_has_tasks(REPLAY));
    r_free(f);
}

/* The log cannot be read (every read fails): the replay fails, counted,
 * nothing is delivered, the event stream ends rather than jump to the live
 * messages, and the connection stays open. */
static void test_read_failure_ends_event_stream(void **state)
{
    (void)state;
    cf *f = r_new(2, 2);
    cf_auth(f, 4, "t1");
    publish_range(f, 4, 0, 5);
    cf_auth(f, 0, "t1");
    uint64_t failures = counter_replay_failures();
    int64_t uni = subscribe_from(f, 0, 0);
    fx_memio_fail(mem, FX_MEMIO_PREAD, -EIO, 1000);
    cf_settle(f);
    fx_memio_fail(mem, FX_MEMIO_PREAD, 0, 0);
    publish_range(f, 4, 5, 1);
    char ev[16][64];
    assert_int_equal(cf_read_events(f, uni, ev, 16), 0);
    assert_int_equal(counter_replay_failures() - failures, 1);
    fq_stream *s = cf_stream(f, uni);
    assert_non_null(s);
    assert_true(s->tx_fin || s->reset);
    assert_true(cf_is_open(f));
    r_free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_pages_read_in_offset_order),
    cmocka_unit_test(test_handover_to_live_without_gap),
    cmocka_unit_test(test_start_inside_log),
    cmocka_unit_test(test_deleted_stream_replay_ends),
    cmocka_unit_test(test_read_failure_ends_event_stream),
};

FX_TEST_MAIN(tests)
