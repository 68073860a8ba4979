/* Unit tests of the idempotent publish rules (src/broker/idem.c,
 * fxb_idem_decide, facts §2.3) over a producer table (storage/producers.h)
 * as the worker keeps one: next, duplicate with the original's first
 * offset, reused, gap with the expected sequence, expired beyond the
 * 64-batch window, unknown producer, a new producer at 0, and the 4,096
 * producer bound. */
/* fx-test-libs: fx_broker fx_storage fx_quic fx_wire fx_base */
#include "fx_test.h"

#include "broker/idem.h"
#include "storage/producers.h"

static fxb_job_idem job(uint64_t pid, uint64_t seq, uint64_t digest)
{
    return (fxb_job_idem){.on = true, .producer_id = pid, .sequence = seq, .digest = digest};
}

/* Notes batch |seq| of |pid| (|count| records at |first|, digest |d|). */
static void note(fx_producers *tab, uint64_t pid, uint64_t seq, uint64_t first, uint32_t count,
                 uint64_t d)
{
    assert_int_equal(fx_producers_note(tab, pid, seq, first, count, count, d, true), 0);
}

static void test_a_new_producer_starts_at_zero_and_nothing_else(void **state)
{
    fxb_job_idem x = job(7, 0, 11);
    assert_true(fxb_idem_decide(NULL, &x, 0, false));
    assert_int_equal(x.verdict, FX_PROD_NEXT);
    x = job(7, 1, 11);
    assert_false(fxb_idem_decide(NULL, &x, 0, false));
    assert_int_equal(x.verdict, FX_PROD_UNKNOWN);
    fx_producers *tab;
    assert_int_equal(fx_producers_new(&tab, 0, FX_PRODUCERS_DEFAULT_TTL_S), 0);
    note(tab, 9, 0, 0, 1, 5);
    x = job(7, 0, 11);
    assert_true(fxb_idem_decide(tab, &x, 0, false));
    x = job(7, 3, 11);
    assert_false(fxb_idem_decide(tab, &x, 0, false));
    assert_int_equal(x.verdict, FX_PROD_UNKNOWN);
    fx_producers_free(tab);
}

static void test_next_duplicate_reused_and_gap(void **state)
{
    fx_producers *tab;
    assert_int_equal(fx_producers_new(&tab, 0, FX_PRODUCERS_DEFAULT_TTL_S), 0);
    note(tab, 7, 0, 10, 2, 100);
    note(tab, 7, 1, 12, 3, 200);
    fxb_job_idem x = job(7, 2, 300);
    assert_true(fxb_idem_decide(tab, &x, 0, false));
    x = job(7, 1, 200);
    assert_false(fxb_idem_decide(tab, &x, 0, false));
    assert_int_equal(x.verdict, FX_PROD_DUPLICATE);
    assert_int_equal(x.first, 12);
    x = job(7, 0, 100);
    assert_false(fxb_idem_decide(tab, &x, 0, false));
    assert_int_equal(x.verdict, FX_PROD_DUPLICATE);
    assert_int_equal(x.first, 10);
    x = job(7, 1, 999);
    assert_false(fxb_idem_decide(tab, &x, 0, false));
    assert_int_equal(x.verdict, FX_PROD_REUSED);
    x = job(7, 5, 1);
    assert_false(fxb_idem_decide(tab, &x, 0, false));
    assert_int_equal(x.verdict, FX_PROD_GAP);
    assert_int_equal(x.expected, 2);
    fx_producers_free(tab);
}

static void test_a_sequence_older_than_the_window_is_expired(void **state)
{
    fx_producers *tab;
    assert_int_equal(fx_producers_new(&tab, 0, FX_PRODUCERS_DEFAULT_TTL_S), 0);
    for (uint64_t q = 0; q < FX_PRODUCERS_WINDOW + 1; q++)
        note(tab, 7, q, q, 1, q + 1);
    fxb_job_idem x = job(7, 0, 1);
    assert_false(fxb_idem_decide(tab, &x, 0, false));
    assert_int_equal(x.verdict, FX_PROD_EXPIRED);
    x = job(7, 1, 2);
    assert_false(fxb_idem_decide(tab, &x, 0, false));
    assert_int_equal(x.verdict, FX_PROD_DUPLICATE);
    assert_int_equal(x.first, 1);
    fx_producers_free(tab);
}

static void test_the_oldest_producer_beyond_4096_is_forgotten(void **state)
{
    fx_producers *tab;
    assert_int_equal(fx_producers_new(&tab, 0, FX_PRODUCERS_DEFAULT_TTL_S), 0);
    for (uint64_t p = 0; p < FX_PRODUCERS_DEFAULT_MAX + 1; p++)
        note(tab, 1000 + p, 0, p, 1, 1);
    assert_int_equal(fx_producers_count(tab), FX_PRODUCERS_DEFAULT_MAX);
    assert_int_equal(fx_producers_stats_get(tab)->forgotten, 1);
    fxb_job_idem x = job(1000, 1, 1);
    assert_false(fxb_idem_decide(tab, &x, 0, false));
    assert_int_equal(x.verdict, FX_PROD_UNKNOWN);
    x = job(1001, 1, 1);
    assert_true(fxb_idem_decide(tab, &x, 0, false));
    fx_producers_free(tab);
}

static void test_producer_ids_are_63_random_bits(void **state)
{
    uint64_t a = fxb_idem_new_producer_id(), b = fxb_idem_new_producer_id();
    assert_true(a != 0 && b != 0 && a != b);
    assert_true(a <= (uint64_t)INT64_MAX && b <= (uint64_t)INT64_MAX);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_a_new_producer_starts_at_zero_and_nothing_else),
    cmocka_unit_test(test_next_duplicate_reused_and_gap),
    cmocka_unit_test(test_a_sequence_older_than_the_window_is_expired),
    cmocka_unit_test(test_the_oldest_producer_beyond_4096_is_forgotten),
    cmocka_unit_test(test_producer_ids_are_63_random_bits),
};

FX_TEST_MAIN(tests)
