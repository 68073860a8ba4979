/* Unit tests for fx_syncpol: when each fsync policy flushes, which appends
 * it then lets be acknowledged, group commit (one flush serves every
 * waiting append), the periodic byte bound, failures, and the mode names. */
/* fx-test-libs: fx_storage fx_base */
#include "felix/error.h"
#include "storage/syncpol.h"

#include <errno.h>
#include <stdint.h>

#include "fx_test.h"

#define MS 1000000ull

static fx_syncpol make(fx_fsync_mode mode, uint64_t interval_ns, uint64_t max_bytes)
{
    fx_syncpol p;
    fx_syncpol_config c = {
        .mode = mode, .interval_ns = interval_ns, .max_unsynced_bytes = max_bytes};
    assert_int_equal(fx_syncpol_config_check(&c), 0);
    fx_syncpol_init(&p, &c, 0, 10);
    return p;
}

static void test_on_commit_acks_only_after_the_flush(void **state)
{
    fx_syncpol p = make(FX_FSYNC_ON_COMMIT, 0, 0);
    assert_false(fx_syncpol_is_due(&p, 0));
    assert_int_equal(fx_syncpol_ack_upto(&p), 10);
    fx_syncpol_appended(&p, 12, 100, 5);
    assert_true(fx_syncpol_is_due(&p, 5));
    assert_int_equal(fx_syncpol_deadline(&p), 5);
    assert_int_equal(fx_syncpol_ack_upto(&p), 10);
    assert_int_equal(fx_syncpol_begin(&p, 5), 12);
    assert_int_equal(fx_syncpol_ack_upto(&p), 10);
    fx_syncpol_end(&p, 0, 12);
    assert_int_equal(fx_syncpol_ack_upto(&p), 12);
    assert_false(fx_syncpol_is_due(&p, 6));
    assert_int_equal(p.st.syncs, 1);
}

static void test_group_commit_one_flush_serves_every_waiting_append(void **state)
{
    fx_syncpol p = make(FX_FSYNC_ON_COMMIT, 0, 0);
    fx_syncpol_appended(&p, 11, 10, 1);
    assert_int_equal(fx_syncpol_begin(&p, 1), 11);
    /* Three appends while the flush runs: none is due, none acked. */
    fx_syncpol_appended(&p, 12, 10, 2);
    fx_syncpol_appended(&p, 14, 20, 3);
    fx_syncpol_appended(&p, 15, 10, 4);
    assert_false(fx_syncpol_is_due(&p, 4));
    assert_int_equal(fx_syncpol_deadline(&p), UINT64_MAX);
    fx_syncpol_end(&p, 0, 11);
    assert_int_equal(fx_syncpol_ack_upto(&p), 11);
    /* The next flush covers all three. */
    assert_true(fx_syncpol_is_due(&p, 5));
    assert_int_equal(fx_syncpol_deadline(&p), 2);
    assert_int_equal(fx_syncpol_begin(&p, 5), 15);
    fx_syncpol_end(&p, 0, 15);
    assert_int_equal(fx_syncpol_ack_upto(&p), 15);
    assert_int_equal(p.st.syncs, 2);
    assert_int_equal(p.st.synced_appends, 4);
    assert_int_equal(p.st.max_fan_in, 3);
    assert_int_equal(p.unsynced_bytes, 0);
}

static void test_failed_flush_acks_nothing_and_retries(void **state)
{
    fx_syncpol p = make(FX_FSYNC_ON_COMMIT, 0, 0);
    fx_syncpol_appended(&p, 12, 10, 7);
    fx_syncpol_begin(&p, 7);
    fx_syncpol_end(&p, -EIO, 0);
    assert_int_equal(fx_syncpol_ack_upto(&p), 10);
    assert_int_equal(p.st.sync_failures, 1);
    assert_true(fx_syncpol_is_due(&p, 8));
    assert_int_equal(fx_syncpol_deadline(&p), 7);
    assert_int_equal(p.unsynced_bytes, 10);
}

static void test_periodic_flushes_once_per_interval_and_acks_at_once(void **state)
{
    fx_syncpol p = make(FX_FSYNC_PERIODIC, 250 * MS, 0);
    /* Idle: nothing to flush, no deadline. */
    assert_false(fx_syncpol_is_due(&p, 10 * 250 * MS));
    assert_int_equal(fx_syncpol_deadline(&p), UINT64_MAX);
    fx_syncpol_appended(&p, 11, 10, 100 * MS);
    assert_int_equal(fx_syncpol_ack_upto(&p), 11); /* acknowledged once written */
    assert_int_equal(fx_syncpol_deadline(&p), 250 * MS);
    assert_false(fx_syncpol_is_due(&p, 249 * MS));
    assert_true(fx_syncpol_is_due(&p, 250 * MS));
    fx_syncpol_begin(&p, 260 * MS);
    fx_syncpol_appended(&p, 12, 10, 270 * MS);
    fx_syncpol_end(&p, 0, 11);
    assert_int_equal(p.durable, 11);
    /* The next one is an interval after the last start. */
    assert_int_equal(fx_syncpol_deadline(&p), 510 * MS);
    assert_false(fx_syncpol_is_due(&p, 509 * MS));
    assert_true(fx_syncpol_is_due(&p, 510 * MS));
}

static void test_periodic_byte_bound_flushes_early(void **state)
{
    fx_syncpol p = make(FX_FSYNC_PERIODIC, 250 * MS, 1000);
    fx_syncpol_appended(&p, 11, 600, 1 * MS);
    assert_false(fx_syncpol_is_due(&p, 2 * MS));
    fx_syncpol_appended(&p, 12, 600, 3 * MS);
    assert_true(fx_syncpol_is_due(&p, 3 * MS));
    assert_int_equal(fx_syncpol_begin(&p, 3 * MS), 12);
    fx_syncpol_end(&p, 0, 12);
    assert_int_equal(p.unsynced_bytes, 0);
    assert_false(fx_syncpol_is_due(&p, 4 * MS));
}

static void test_none_never_flushes_and_acks_at_once(void **state)
{
    fx_syncpol p = make(FX_FSYNC_NONE, 0, 0);
    fx_syncpol_appended(&p, 20, 1 << 30, 1);
    assert_false(fx_syncpol_is_due(&p, UINT64_MAX - 1));
    assert_int_equal(fx_syncpol_deadline(&p), UINT64_MAX);
    assert_int_equal(fx_syncpol_ack_upto(&p), 20);
}

static void test_config_and_mode_names(void **state)
{
    fx_syncpol_config c = {.mode = FX_FSYNC_PERIODIC, .interval_ns = 0};
    assert_int_equal(fx_syncpol_config_check(&c), FX_ECONFIG);
    const char *spell[] = {"none", "OFF", "periodic", "on_commit", "on-commit", "Commit"};
    fx_fsync_mode want[] = {FX_FSYNC_NONE,      FX_FSYNC_NONE,      FX_FSYNC_PERIODIC,
                            FX_FSYNC_ON_COMMIT, FX_FSYNC_ON_COMMIT, FX_FSYNC_ON_COMMIT};
    for (size_t i = 0; i < 6; i++) {
        fx_fsync_mode m = FX_FSYNC_PERIODIC;
        assert_int_equal(fx_fsync_mode_parse(spell[i], &m), 0);
        assert_int_equal(m, want[i]);
    }
    fx_fsync_mode m = FX_FSYNC_NONE;
    assert_int_equal(fx_fsync_mode_parse("always", &m), FX_ECONFIG);
    assert_int_equal(m, FX_FSYNC_NONE);
    assert_string_equal(fx_fsync_mode_name(FX_FSYNC_ON_COMMIT), "on_commit");
}

/* Time retention follows the wall clock, except when it steps ahead of the
 * monotonic clock since the anchor by more than the tolerance. */
static void test_retention_clock_holds_back_a_forward_wall_clock_step(void **state)
{
    (void)state;
    const uint64_t S = 1000000u; /* us */
    fx_retention_clock a = {.wall_us = 1000 * S, .mono_ns = 50ull * 1000000000u};
    bool held = true;
    /* 10 s later on both clocks: the wall clock. */
    assert_int_equal(fx_retention_now_us(&a, 1010 * S, 60ull * 1000000000u, 60 * S, &held),
                     1010 * S);
    assert_false(held);
    /* Within the tolerance ahead: still the wall clock. */
    assert_int_equal(fx_retention_now_us(&a, 1069 * S, 60ull * 1000000000u, 60 * S, &held),
                     1069 * S);
    assert_false(held);
    /* Two days ahead: held at the anchor + elapsed + tolerance. */
    assert_int_equal(
        fx_retention_now_us(&a, 1010 * S + 2 * 86400 * S, 60ull * 1000000000u, 60 * S, &held),
        1070 * S);
    assert_true(held);
    /* A backward step: the wall clock (keeps data longer). */
    assert_int_equal(fx_retention_now_us(&a, 900 * S, 60ull * 1000000000u, 60 * S, &held), 900 * S);
    assert_false(held);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_on_commit_acks_only_after_the_flush),
    cmocka_unit_test(test_group_commit_one_flush_serves_every_waiting_append),
    cmocka_unit_test(test_failed_flush_acks_nothing_and_retries),
    cmocka_unit_test(test_periodic_flushes_once_per_interval_and_acks_at_once),
    cmocka_unit_test(test_periodic_byte_bound_flushes_early),
    cmocka_unit_test(test_none_never_flushes_and_acks_at_once),
    cmocka_unit_test(test_config_and_mode_names),
    cmocka_unit_test(test_retention_clock_holds_back_a_forward_wall_clock_step),
};
FX_TEST_MAIN(tests)
