/* Unit tests for syncpol.c as a state machine: the fields each transition
 * (init, appended, begin, end) leaves behind, the edges the policy tests do
 * not reach (regressing offsets, a deadline that would overflow, a flush
 * running while appends arrive), the parser's spellings and the retention
 * clock's guard. Pure functions: no I/O, no clock. */
/* fx-test-libs: fx_storage fx_base */
#include "felix/error.h"
#include "storage/syncpol.h"

#include <errno.h>
#include <stdint.h>

#include "fx_test.h"

static fx_syncpol start(fx_fsync_mode mode, uint64_t interval_ns, uint64_t max_bytes, uint64_t now,
                        uint64_t next)
{
    fx_syncpol p;
    fx_syncpol_config c = {
        .mode = mode, .interval_ns = interval_ns, .max_unsynced_bytes = max_bytes};
    assert_int_equal(fx_syncpol_config_check(&c), 0);
    fx_syncpol_init(&p, &c, now, next);
    return p;
}

static void test_init_starts_durable_idle_and_not_due(void **state)
{
    fx_syncpol p = start(FX_FSYNC_ON_COMMIT, 0, 0, 77, 40);
    assert_int_equal(p.written, 40);
    assert_int_equal(p.durable, 40);
    assert_int_equal(p.last_start_ns, 77);
    assert_false(p.in_flight);
    assert_int_equal(p.waiting, 0);
    assert_int_equal(fx_syncpol_ack_upto(&p), 40);
    assert_int_equal(fx_syncpol_deadline(&p), UINT64_MAX);
    assert_false(fx_syncpol_is_due(&p, UINT64_MAX - 1));
}

static void test_appended_never_moves_written_back(void **state)
{
    fx_syncpol p = start(FX_FSYNC_NONE, 0, 0, 0, 5);
    fx_syncpol_appended(&p, 9, 10, 3);
    fx_syncpol_appended(&p, 7, 4, 4);
    assert_int_equal(p.written, 9);
    assert_int_equal(p.unsynced_bytes, 14);
    assert_int_equal(p.waiting, 2);
    /* The oldest waiting append's time is the first one's. */
    assert_int_equal(p.oldest_ns, 3);
    assert_int_equal(fx_syncpol_ack_upto(&p), 9);
}

static void test_begin_hands_the_waiting_appends_to_the_flight(void **state)
{
    fx_syncpol p = start(FX_FSYNC_ON_COMMIT, 0, 0, 0, 0);
    fx_syncpol_appended(&p, 2, 100, 10);
    fx_syncpol_appended(&p, 3, 50, 11);
    assert_int_equal(fx_syncpol_begin(&p, 12), 3);
    assert_true(p.in_flight);
    assert_int_equal(p.flight_target, 3);
    assert_int_equal(p.flight_bytes, 150);
    assert_int_equal(p.flight_appends, 2);
    assert_int_equal(p.flight_oldest_ns, 10);
    assert_int_equal(p.waiting, 0);
    assert_int_equal(p.last_start_ns, 12);
    /* While it runs no second flush is due, however late. */
    fx_syncpol_appended(&p, 4, 1, 13);
    assert_int_equal(fx_syncpol_deadline(&p), UINT64_MAX);
    assert_false(fx_syncpol_is_due(&p, 1000));
}

static void test_end_keeps_bytes_appended_during_the_flight_unsynced(void **state)
{
    fx_syncpol p = start(FX_FSYNC_PERIODIC, 100, 0, 0, 0);
    fx_syncpol_appended(&p, 1, 30, 1);
    fx_syncpol_begin(&p, 100);
    fx_syncpol_appended(&p, 2, 7, 101);
    fx_syncpol_end(&p, 0, 1);
    assert_false(p.in_flight);
    assert_int_equal(p.durable, 1);
    assert_int_equal(p.unsynced_bytes, 7);
    assert_int_equal(p.flight_bytes, 0);
    /* The append made during the flight waits for the next interval. */
    assert_int_equal(fx_syncpol_deadline(&p), 200);
    assert_false(fx_syncpol_is_due(&p, 199));
    assert_true(fx_syncpol_is_due(&p, 200));
}

static void test_end_never_moves_durable_back(void **state)
{
    fx_syncpol p = start(FX_FSYNC_ON_COMMIT, 0, 0, 0, 10);
    fx_syncpol_appended(&p, 12, 1, 1);
    fx_syncpol_begin(&p, 1);
    fx_syncpol_end(&p, 0, 12);
    fx_syncpol_appended(&p, 13, 1, 2);
    fx_syncpol_begin(&p, 2);
    /* A completion that reports less than already durable keeps the mark. */
    fx_syncpol_end(&p, 0, 11);
    assert_int_equal(p.durable, 12);
    assert_int_equal(fx_syncpol_ack_upto(&p), 12);
}

static void test_failed_flush_restores_the_oldest_waiting_time(void **state)
{
    fx_syncpol p = start(FX_FSYNC_ON_COMMIT, 0, 0, 0, 0);
    fx_syncpol_appended(&p, 1, 10, 5);
    fx_syncpol_begin(&p, 6);
    fx_syncpol_appended(&p, 2, 10, 8);
    assert_int_equal(p.oldest_ns, 8);
    fx_syncpol_end(&p, -EIO, 0);
    /* The failed flight's appends are older than the one made meanwhile. */
    assert_int_equal(p.oldest_ns, 5);
    assert_int_equal(p.waiting, 2);
    assert_int_equal(p.unsynced_bytes, 20);
    assert_int_equal(p.durable, 0);
    assert_int_equal(p.st.sync_failures, 1);
    assert_int_equal(p.st.syncs, 0);
    assert_int_equal(fx_syncpol_deadline(&p), 5);
}

static void test_stats_count_fan_in_per_flush(void **state)
{
    fx_syncpol p = start(FX_FSYNC_ON_COMMIT, 0, 0, 0, 0);
    for (uint64_t i = 1; i <= 3; i++)
        fx_syncpol_appended(&p, i, 1, i);
    fx_syncpol_begin(&p, 4);
    fx_syncpol_end(&p, 0, 3);
    fx_syncpol_appended(&p, 4, 1, 5);
    fx_syncpol_begin(&p, 5);
    fx_syncpol_end(&p, 0, 4);
    assert_int_equal(p.st.syncs, 2);
    assert_int_equal(p.st.synced_appends, 4);
    assert_int_equal(p.st.max_fan_in, 3);
    assert_int_equal(p.unsynced_bytes, 0);
}

static void test_periodic_deadline_that_would_overflow_is_never(void **state)
{
    fx_syncpol p = start(FX_FSYNC_PERIODIC, UINT64_MAX - 5, 0, 100, 0);
    fx_syncpol_appended(&p, 1, 1, 101);
    assert_int_equal(fx_syncpol_deadline(&p), UINT64_MAX);
    assert_false(fx_syncpol_is_due(&p, UINT64_MAX - 1));
}

static void test_nothing_uncovered_is_never_due(void **state)
{
    /* An append whose end is already durable (a rewrite of known offsets)
     * needs no flush. */
    fx_syncpol p = start(FX_FSYNC_ON_COMMIT, 0, 0, 0, 10);
    fx_syncpol_appended(&p, 10, 5, 1);
    assert_int_equal(fx_syncpol_deadline(&p), UINT64_MAX);
    assert_false(fx_syncpol_is_due(&p, 50));
}

static void test_mode_parse_spellings_and_bad_input(void **state)
{
    static const struct {
        const char *s;
        fx_fsync_mode m;
    } ok[] = {{"none", FX_FSYNC_NONE},           {"OFF", FX_FSYNC_NONE},
              {"Periodic", FX_FSYNC_PERIODIC},   {"on_commit", FX_FSYNC_ON_COMMIT},
              {"ON-COMMIT", FX_FSYNC_ON_COMMIT}, {"commit", FX_FSYNC_ON_COMMIT}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        fx_fsync_mode m = (fx_fsync_mode)99;
        assert_int_equal(fx_fsync_mode_parse(ok[i].s, &m), 0);
        assert_int_equal(m, ok[i].m);
    }
    fx_fsync_mode m = FX_FSYNC_PERIODIC;
    assert_int_equal(fx_fsync_mode_parse("always", &m), FX_ECONFIG);
    assert_int_equal(fx_fsync_mode_parse("", &m), FX_ECONFIG);
    assert_int_equal(fx_fsync_mode_parse("on_commit ", &m), FX_ECONFIG);
    assert_int_equal(m, FX_FSYNC_PERIODIC);
    assert_string_equal(fx_fsync_mode_name((fx_fsync_mode)42), "?");
}

static void test_config_check_rejects_unknown_mode_and_zero_interval(void **state)
{
    fx_syncpol_config c = {.mode = FX_FSYNC_PERIODIC, .interval_ns = 0};
    assert_int_equal(fx_syncpol_config_check(&c), FX_ECONFIG);
    c.interval_ns = 1;
    assert_int_equal(fx_syncpol_config_check(&c), 0);
    c = (fx_syncpol_config){.mode = FX_FSYNC_NONE, .interval_ns = 0};
    assert_int_equal(fx_syncpol_config_check(&c), 0);
    c.mode = (fx_fsync_mode)(FX_FSYNC_ON_COMMIT + 1);
    assert_int_equal(fx_syncpol_config_check(&c), FX_ECONFIG);
}

static void test_retention_clock_backward_monotonic_and_null_held(void **state)
{
    fx_retention_clock a = {.wall_us = 1000000, .mono_ns = 5000000000ull};
    /* A monotonic reading before the anchor counts as no time elapsed. */
    assert_int_equal(fx_retention_now_us(&a, 1000050, 1, 100, NULL), 1000050);
    bool held = false;
    assert_int_equal(fx_retention_now_us(&a, 1000200, 1, 100, &held), 1000100);
    assert_true(held);
    /* Exactly at the limit is not held. */
    assert_int_equal(fx_retention_now_us(&a, 1000100, 1, 100, &held), 1000100);
    assert_false(held);
    /* A backward wall step is passed through. */
    assert_int_equal(fx_retention_now_us(&a, 10, 6000000000ull, 0, &held), 10);
    assert_false(held);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_init_starts_durable_idle_and_not_due),
    cmocka_unit_test(test_appended_never_moves_written_back),
    cmocka_unit_test(test_begin_hands_the_waiting_appends_to_the_flight),
    cmocka_unit_test(test_end_keeps_bytes_appended_during_the_flight_unsynced),
    cmocka_unit_test(test_end_never_moves_durable_back),
    cmocka_unit_test(test_failed_flush_restores_the_oldest_waiting_time),
    cmocka_unit_test(test_stats_count_fan_in_per_flush),
    cmocka_unit_test(test_periodic_deadline_that_would_overflow_is_never),
    cmocka_unit_test(test_nothing_uncovered_is_never_due),
    cmocka_unit_test(test_mode_parse_spellings_and_bad_input),
    cmocka_unit_test(test_config_check_rejects_unknown_mode_and_zero_interval),
    cmocka_unit_test(test_retention_clock_backward_monotonic_and_null_held),
};

FX_TEST_MAIN(tests)
