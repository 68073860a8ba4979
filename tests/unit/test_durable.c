/* Unit twin of src/broker/durable.c: durable streams on the storage
 * module's in-memory file system (storage/memio.h) under the one-thread
 * broker of conn_fixture.h: a publish is appended to the stream's log, an
 * ack under ack_on_commit waits for the append, a subscriber that comes
 * after the ring dropped the history gets it replayed from the log, and a
 * failed append is answered. The storage stage's loops ("fx-storage-N",
 * "fx-replay-N") are fake loops too, so a test can hold them back. */
/* fx-test-libs: fx_broker fx_storage fx_wire fx_base */
#include "unit/conn_fixture.h"
#include "unit/dur_fixture.h"

#include "storage/catalog.h"
#include "storage/dlog.h"
#include "storage/memio.h"

static bool on_commit;
static uint32_t ring; /* log_capacity; 0 = the default */

static void durable(fx_broker_opts *o, fq_config *q)
{
    (void)q;
    o->durable.dir = DF_ROOT;
    o->durable.io = fx_memio_sio(df_mem);
    o->durable.durable_default = true;
    o->durable.fsync_mode = on_commit ? FX_FSYNC_ON_COMMIT : FX_FSYNC_NONE;
    o->durable.segment_bytes = 1 << 20;
    o->durable.preallocate = false;
    o->ack_on_commit = on_commit;
    if (ring != 0)
        o->log_capacity = ring;
}

static cf *d_new(bool commit, uint32_t log_capacity)
{
    assert_int_equal(fx_memio_new(&df_mem), 0);
    on_commit = commit;
    ring = log_capacity;
    return cf_new(durable);
}

static void d_free(cf *f)
{
    cf_free(f);
    fx_memio_free(df_mem);
    df_mem = NULL;
}

/* Publishes to a durable stream are acked and land in its log, in order. */
static void test_publish_appended_to_log(void **state)
{
    (void)state;
    cf *f = d_new(false, 0);
    cf_auth(f, 0, "t1");
    cf_publish_json(f, 0, "t1", "d", "first", 1);
    cf_publish_json(f, 0, "t1", "d", "second", 2);
    cf_settle(f);
    cf_expect_msg(f, 0, FX_MSG_PUBLISH_OK, NULL);
    cf_expect_msg(f, 0, FX_MSG_PUBLISH_OK, NULL);
    cf_free(f); /* the logs close */
    char log[256];
    assert_int_equal(df_read_log("d", log, sizeof(log)), 2);
    assert_string_equal(log, "first\nsecond\n");
    fx_memio_free(df_mem);
    df_mem = NULL;
}

/* ack_on_commit with fsync on_commit: no ack while the storage stage has
 * not run; once it has, the ack comes and the record is in the log. */
static void test_commit_ack_after_append(void **state)
{
    (void)state;
    cf *f = d_new(true, 0);
    cf_auth(f, 0, "t1");
    const char *pl[] = {"kept"};
    size_t n;
    uint8_t *p = cf_publish_frame("t1", "d", pl, 1, true, 5, &n);
    cf_write(f, 0, p, n, false);
    free(p);
    cf_run_but(f, "fx-storage");
    cf_turn(f);
    cf_run_but(f, "fx-storage");
    assert_true(cf_has_tasks("fx-storage")); /* the append waits there */
    cf_frame fr;
    assert_false(cf_read_frame(f, 0, &fr));
    cf_settle(f);
    cf_expect_ack(f, 0, 5, NULL);
    char log[64];
    assert_int_equal(df_read_log("d", log, sizeof(log)), 1);
    assert_string_equal(log, "kept\n");
    d_free(f);
}

/* A subscriber from offset 0 that comes after the ring (log_capacity 2)
 * dropped the oldest messages gets them replayed from the log, then the
 * rest, in order, then new ones. */
static void test_late_subscriber_gets_replay(void **state)
{
    (void)state;
    cf *f = d_new(false, 2);
    cf_auth(f, 4, "t1");
    static const char *const msgs[] = {"m0", "m1", "m2", "m3", "m4"};
    for (int i = 0; i < 5; i++) {
        cf_publish(f, 4, "t1", "d", msgs[i]);
        cf_settle(f);
    }
    cf_auth(f, 0, "t1");
    fx_msg m = {.type = FX_MSG_SUBSCRIBE,
                .tenant_id = "t1",
                .ns = "default",
                .stream = "d",
                .start = {.kind = FX_MSG_START_OFFSET, .offset = 0}};
    cf_write_msg(f, 0, &m);
    cf_settle(f);
    cf_expect_msg(f, 0, FX_MSG_SUBSCRIBED, NULL);
    int64_t uni = cf_uni(f, 0);
    assert_true(uni >= 0);
    cf_publish(f, 4, "t1", "d", "m5");
    cf_settle(f);
    char ev[8][64];
    assert_int_equal(cf_read_events(f, uni, ev, 8), 6);
    for (int i = 0; i < 5; i++)
        assert_string_equal(ev[i], msgs[i]);
    assert_string_equal(ev[5], "m5");
    d_free(f);
}

/* An append that fails (the disk is full) is answered with an error ack,
 * not ok; the stream takes the next publish once the disk has room. */
static void test_failed_append_answered(void **state)
{
    (void)state;
    cf *f = d_new(true, 0);
    cf_auth(f, 0, "t1");
    cf_publish_json(f, 0, "t1", "d", "warm", 1); /* the log exists */
    cf_settle(f);
    cf_expect_msg(f, 0, FX_MSG_PUBLISH_OK, NULL);
    fx_memio_fail(df_mem, FX_MEMIO_PWRITE, -ENOSPC, 1);
    cf_publish_json(f, 0, "t1", "d", "lost", 2);
    cf_settle(f);
    fx_msg r;
    assert_true(cf_read_msg(f, 0, &r));
    assert_int_equal(r.type, FX_MSG_PUBLISH_ERROR);
    assert_int_equal(r.request_id, 2);
    fx_msg_deinit(&r);
    cf_publish_json(f, 0, "t1", "d", "next", 3);
    cf_settle(f);
    assert_true(cf_read_msg(f, 0, &r));
    assert_int_equal(r.type, FX_MSG_PUBLISH_OK);
    assert_int_equal(r.request_id, 3);
    fx_msg_deinit(&r);
    d_free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_publish_appended_to_log),
    cmocka_unit_test(test_commit_ack_after_append),
    cmocka_unit_test(test_late_subscriber_gets_replay),
    cmocka_unit_test(test_failed_append_answered),
};

FX_TEST_MAIN(tests)
