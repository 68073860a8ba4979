/* Unit twin of src/broker/durable_ops.c: the storage stage's life on the
 * one-thread broker of conn_fixture.h, over the in-memory file system of
 * dur_fixture.h: the recovery of every catalogued stream when a broker
 * starts, and the flush of every log at the end of a drain. Started
 * brokers wait for their loops as they stop: cf_waits.h runs those. */
/* fx-test-libs: fx_broker fx_storage fx_wire fx_base */
#include "unit/conn_fixture.h"

#include "unit/cf_waits.h"
#include "unit/dur_fixture.h"

#include "broker/durable.h"

/* A started broker on the test's file system. */
static cf *o_start(void)
{
    cf *f = df_new();
    cw_use(f);
    assert_int_equal(fx_broker_start(f->b), 0);
    return f;
}

static void o_free(cf *f)
{
    cf_free(f);
    cw_use(NULL);
}

/* Publishes |payload| to t1/default/|stream| on |sid| and checks the ok. */
static void publish_ok(cf *f, int64_t sid, const char *stream, const char *payload, uint64_t id)
{
    cf_publish_json(f, sid, "t1", stream, payload, id);
    cf_settle(f);
    fx_msg m;
    assert_true(cf_read_msg(f, sid, &m));
    assert_int_equal(m.type, FX_MSG_PUBLISH_OK);
    assert_int_equal(m.request_id, id);
    fx_msg_deinit(&m);
}

/* A broker on storage another one left: before it starts, every
 * catalogued stream counts as to recover and none is done; once started,
 * each is recovered by its storage thread (none damaged or failed) and
 * serves its history. */
static void test_recovery_counts_catalogued_streams(void **state)
{
    (void)state;
    df_mem_new();
    cf *f = df_new();
    cf_auth(f, 0, "t1");
    publish_ok(f, 0, "d1", "a", 1);
    publish_ok(f, 0, "d2", "b", 2);
    cf_free(f);
    f = df_new();
    cw_use(f);
    fx_broker_recovery r;
    fx_broker_durable_recovery(f->b, &r);
    assert_int_equal(r.total, 2);
    assert_int_equal(r.done, 0);
    assert_int_equal(fx_broker_start(f->b), 0);
    cf_settle(f);
    fx_broker_durable_recovery(f->b, &r);
    assert_int_equal(r.total, 2);
    assert_int_equal(r.done, 2);
    assert_int_equal(r.damaged, 0);
    assert_int_equal(r.failed, 0);
    cf_auth(f, 0, "t1");
    fx_msg m = {.type = FX_MSG_SUBSCRIBE,
                .tenant_id = "t1",
                .ns = "default",
                .stream = "d2",
                .start = {.kind = FX_MSG_START_EARLIEST}};
    cf_write_msg(f, 0, &m);
    cf_settle(f);
    cf_expect_msg(f, 0, FX_MSG_SUBSCRIBED, NULL);
    char ev[2][64];
    assert_int_equal(cf_read_events(f, cf_uni(f, 0), ev, 2), 1);
    assert_string_equal(ev[0], "b");
    o_free(f);
    df_mem_free();
}

/* With a periodic fsync that is not due for an hour, the flush of every
 * log makes what every stream was acked durable: after the process dies
 * and the power goes, each log holds its records. */
static void test_flush_all_syncs_every_log(void **state)
{
    (void)state;
    df_mem_new();
    df_fsync = FX_FSYNC_PERIODIC;
    df_fsync_interval = 3600 * FX_NS_PER_S;
    cf *f = o_start();
    cf_auth(f, 0, "t1");
    publish_ok(f, 0, "d1", "a", 1);
    publish_ok(f, 0, "d2", "b", 2);
    publish_ok(f, 0, "d1", "c", 3);
    assert_int_equal(fxb_durable_flush_all(f->b, fx_now_ns() + 5 * FX_NS_PER_S), 0);
    fx_memio_crash_after(df_mem, 0); /* nothing more reaches the file system */
    o_free(f);
    fx_memio_crash(df_mem, 0);
    char log[64];
    assert_int_equal(df_read_log("d1", log, sizeof(log)), 2);
    assert_string_equal(log, "a\nc\n");
    assert_int_equal(df_read_log("d2", log, sizeof(log)), 1);
    assert_string_equal(log, "b\n");
    df_mem_free();
}

/* A log whose fdatasync fails: the flush of every log reports
 * FX_ESTORAGE_ERROR rather than success. */
static void test_flush_all_reports_failed_sync(void **state)
{
    (void)state;
    df_mem_new();
    df_fsync = FX_FSYNC_PERIODIC;
    df_fsync_interval = 3600 * FX_NS_PER_S;
    cf *f = o_start();
    cf_auth(f, 0, "t1");
    publish_ok(f, 0, "d1", "a", 1);
    fx_memio_fail(df_mem, FX_MEMIO_FDATASYNC, -EIO, 1000);
    assert_int_equal(fxb_durable_flush_all(f->b, fx_now_ns() + 5 * FX_NS_PER_S), FX_ESTORAGE_ERROR);
    fx_memio_fail(df_mem, FX_MEMIO_FDATASYNC, 0, 0);
    o_free(f);
    df_mem_free();
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_recovery_counts_catalogued_streams),
    cmocka_unit_test(test_flush_all_syncs_every_log),
    cmocka_unit_test(test_flush_all_reports_failed_sync),
};

FX_TEST_MAIN(tests)
