/* Unit tests for the idle trimmer (src/server/memtrim.c): when it trims, with
 * the RSS and free-heap readings and the trim itself replaced by fakes (the
 * real malloc_trim against a real broker is python/tests/test_broker_memory.py,
 * in the unsanitised build: the sanitizers bring their own allocator). */
/* fx-test-libs: fx_server fx_base */
#include "fx_test.h"

#include "base/metrics.h"
#include "server/memtrim.h"

#define MS 1000000ull
#define MiB ((size_t)1 << 20)

typedef struct fake {
    size_t rss, free_bytes, trims;
    size_t rss_after_trim; /* what RSS reads after a trim */
    size_t threshold;      /* the last M_TRIM_THRESHOLD set (0: none) */
    size_t threshold_sets;
} fake;

static size_t fake_rss(void *arg)
{
    return ((fake *)arg)->rss;
}

static size_t fake_free(void *arg)
{
    return ((fake *)arg)->free_bytes;
}

static void fake_trim(void *arg)
{
    fake *f = arg;
    f->trims++;
    f->rss = f->rss_after_trim;
}

/* 50 MiB resident, 40 MiB of it free heap, 12 MiB once trimmed. */
static fake after_a_peak(void)
{
    return (fake){.rss = 50 * MiB, .free_bytes = 40 * MiB, .rss_after_trim = 12 * MiB};
}

static void fake_threshold(void *arg, size_t bytes)
{
    fake *f = arg;
    f->threshold = bytes;
    f->threshold_sets++;
}

static void setup_trimmer(fx_memtrim *t, fake *f, uint64_t idle_ms)
{
    fx_memtrim_init(t, idle_ms * MS);
    t->rss_fn = fake_rss;
    t->free_fn = fake_free;
    t->trim_fn = fake_trim;
    t->threshold_fn = fake_threshold;
    t->arg = f;
}

static uint64_t counter(size_t off)
{
    fx_metrics_snapshot s;
    fx_metrics_snapshot_take(&s);
    return *(const uint64_t *)((const char *)&s.c + off);
}

#define COUNT(field) counter(offsetof(fx_metrics_counters, field))

static void test_trims_once_after_the_idle_time_and_not_before(void **state)
{
    (void)state;
    fake f = after_a_peak();
    fx_memtrim t;
    setup_trimmer(&t, &f, 1000);
    uint64_t trims0 = COUNT(broker_allocator_trims), bytes0 = COUNT(broker_allocator_trimmed_bytes);
    assert_int_equal(fx_memtrim_tick(&t, 0, 7), 0);
    assert_int_equal(fx_memtrim_tick(&t, 999 * MS, 7), 0); /* not idle long enough */
    assert_int_equal(f.trims, 0);
    assert_int_equal(fx_memtrim_tick(&t, 1000 * MS, 7), 1);
    assert_int_equal(f.trims, 1);
    assert_int_equal(COUNT(broker_allocator_trims) - trims0, 1);
    assert_int_equal(COUNT(broker_allocator_trimmed_bytes) - bytes0, 38 * MiB);
    /* the same idle period, nothing more freed: no second trim */
    for (uint64_t ms = 1250; ms < 5000; ms += 250)
        assert_int_equal(fx_memtrim_tick(&t, ms * MS, 7), 0);
    assert_int_equal(f.trims, 1);
}

static void test_activity_restarts_the_idle_clock(void **state)
{
    (void)state;
    fake f = after_a_peak();
    fx_memtrim t;
    setup_trimmer(&t, &f, 1000);
    fx_memtrim_tick(&t, 0, 1);
    fx_memtrim_tick(&t, 900 * MS, 2); /* moved at 900 ms */
    assert_int_equal(fx_memtrim_tick(&t, 1500 * MS, 2), 0);
    assert_int_equal(fx_memtrim_tick(&t, 1900 * MS, 2), 1);
}

static void test_a_new_idle_period_trims_only_if_rss_grew(void **state)
{
    (void)state;
    fake f = after_a_peak();
    fx_memtrim t;
    setup_trimmer(&t, &f, 100);
    fx_memtrim_tick(&t, 0, 1);
    assert_int_equal(fx_memtrim_tick(&t, 100 * MS, 1), 1); /* RSS 12 MiB after it */
    uint64_t periods0 = COUNT(broker_allocator_idle_periods);
    /* a publish every 2 s that leaves RSS where it was: looked at, not trimmed */
    f.rss = 12 * MiB + MiB - 1;
    fx_memtrim_tick(&t, 2000 * MS, 2);
    assert_int_equal(fx_memtrim_tick(&t, 2100 * MS, 2), 0);
    assert_int_equal(COUNT(broker_allocator_idle_periods) - periods0, 1);
    /* a burst that grew RSS by 1 MiB: trimmed at its idle period */
    f.rss = 13 * MiB;
    fx_memtrim_tick(&t, 4000 * MS, 3);
    assert_int_equal(fx_memtrim_tick(&t, 4100 * MS, 3), 1);
    assert_int_equal(f.trims, 2);
}

static void test_heap_freed_while_idle_is_trimmed_again(void **state)
{
    (void)state;
    fake f = {.rss = 50 * MiB, .free_bytes = 2 * MiB, .rss_after_trim = 50 * MiB};
    fx_memtrim t;
    setup_trimmer(&t, &f, 100);
    fx_memtrim_tick(&t, 0, 1);
    assert_int_equal(fx_memtrim_tick(&t, 100 * MS, 1), 1); /* first trim: nothing to give */
    /* a stream expires while no datagram moves: 40 MiB freed, RSS unchanged */
    f.free_bytes = 42 * MiB;
    f.rss_after_trim = 12 * MiB;
    assert_int_equal(fx_memtrim_tick(&t, 350 * MS, 1), 1);
    assert_int_equal(f.rss, 12 * MiB);
    /* less than FX_MEMTRIM_IDLE_GROWTH more freed: not worth a walk over the arenas */
    f.free_bytes = 42 * MiB + FX_MEMTRIM_IDLE_GROWTH - 4096;
    assert_int_equal(fx_memtrim_tick(&t, 600 * MS, 1), 0);
    assert_int_equal(f.trims, 2);
    /* small frees add up: counted from the last trim, not from the last tick */
    f.free_bytes += 4096;
    assert_int_equal(fx_memtrim_tick(&t, 850 * MS, 1), 1);
    assert_int_equal(f.trims, 3);
    /* a dip (something allocated while idle) then a rise from it */
    f.free_bytes -= 8 * MiB;
    assert_int_equal(fx_memtrim_tick(&t, 1100 * MS, 1), 0);
    f.free_bytes += FX_MEMTRIM_IDLE_GROWTH;
    assert_int_equal(fx_memtrim_tick(&t, 1350 * MS, 1), 1);
    assert_int_equal(f.trims, 4);
}

/* Heap freed while datagrams moved (a client closing its connection after a
 * pause) is given back at the next idle period, though RSS did not grow. */
static void test_heap_freed_under_traffic_is_trimmed_at_the_next_idle_period(void **state)
{
    (void)state;
    fake f = {.rss = 50 * MiB, .free_bytes = 2 * MiB, .rss_after_trim = 50 * MiB};
    fx_memtrim t;
    setup_trimmer(&t, &f, 100);
    fx_memtrim_tick(&t, 0, 1);
    assert_int_equal(fx_memtrim_tick(&t, 100 * MS, 1), 1); /* at the peak: nothing to give */
    fx_memtrim_tick(&t, 200 * MS, 2);                      /* traffic; 40 MiB freed meanwhile */
    f.free_bytes = 42 * MiB;
    f.rss_after_trim = 12 * MiB;
    assert_int_equal(fx_memtrim_tick(&t, 250 * MS, 2), 0); /* not idle yet */
    assert_int_equal(fx_memtrim_tick(&t, 300 * MS, 2), 1);
    assert_int_equal(f.rss, 12 * MiB);
    /* the next idle period with the same free heap and RSS: nothing */
    fx_memtrim_tick(&t, 400 * MS, 3);
    assert_int_equal(fx_memtrim_tick(&t, 500 * MS, 3), 0);
    assert_int_equal(f.trims, 2);
}

static void test_zero_idle_time_never_trims(void **state)
{
    (void)state;
    fake f = after_a_peak();
    fx_memtrim t;
    setup_trimmer(&t, &f, 0);
    uint64_t periods0 = COUNT(broker_allocator_idle_periods);
    for (uint64_t s = 0; s < 100; s++)
        assert_int_equal(fx_memtrim_tick(&t, s * 1000 * MS, 1), 0);
    assert_int_equal(f.trims, 0);
    assert_int_equal(COUNT(broker_allocator_idle_periods) - periods0, 0);
}

/* While idle, glibc's own trim threshold; the retained one at the first
 * datagram; never touched when allocator_retain_bytes is 0. */
static void test_trim_threshold_is_lowered_while_idle_and_restored_by_traffic(void **state)
{
    (void)state;
    fake f = after_a_peak();
    fx_memtrim t;
    setup_trimmer(&t, &f, 100);
    t.retain_bytes = 64 * MiB;
    fx_memtrim_tick(&t, 0, 1);
    fx_memtrim_tick(&t, 50 * MS, 1);
    assert_int_equal(f.threshold_sets, 0); /* not idle yet */
    fx_memtrim_tick(&t, 100 * MS, 1);
    assert_int_equal(f.threshold, FX_MEMTRIM_IDLE_THRESHOLD);
    for (uint64_t ms = 350; ms < 2000; ms += 250)
        fx_memtrim_tick(&t, ms * MS, 1);
    assert_int_equal(f.threshold_sets, 1); /* once per idle period */
    fx_memtrim_tick(&t, 2000 * MS, 2);
    assert_int_equal(f.threshold, 64 * MiB);
    fx_memtrim_tick(&t, 2250 * MS, 3);
    assert_int_equal(f.threshold_sets, 2); /* busy: left alone */
    fx_memtrim_tick(&t, 2350 * MS, 3);
    assert_int_equal(f.threshold, FX_MEMTRIM_IDLE_THRESHOLD);

    fake g = after_a_peak();
    setup_trimmer(&t, &g, 100); /* retain_bytes 0: the C library's own policy */
    fx_memtrim_tick(&t, 0, 1);
    fx_memtrim_tick(&t, 100 * MS, 1);
    fx_memtrim_tick(&t, 200 * MS, 2);
    assert_int_equal(g.threshold_sets, 0);
    assert_int_equal(g.trims, 1);
}

static void test_real_readings_are_plausible(void **state)
{
    (void)state;
    size_t rss = fx_memtrim_rss_bytes();
    assert_true(rss > 0);
    assert_true(rss < (size_t)64 << 30);
    /* the activity count reads the datagram counters of the registry */
    uint64_t a0 = fx_memtrim_broker_activity();
    FX_COUNTER_ADD(quic_datagrams_in, 3);
    FX_COUNTER_ADD(quic_datagrams_out, 2);
    assert_int_equal(fx_memtrim_broker_activity() - a0, 5);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_trims_once_after_the_idle_time_and_not_before),
    cmocka_unit_test(test_activity_restarts_the_idle_clock),
    cmocka_unit_test(test_a_new_idle_period_trims_only_if_rss_grew),
    cmocka_unit_test(test_heap_freed_while_idle_is_trimmed_again),
    cmocka_unit_test(test_heap_freed_under_traffic_is_trimmed_at_the_next_idle_period),
    cmocka_unit_test(test_zero_idle_time_never_trims),
    cmocka_unit_test(test_trim_threshold_is_lowered_while_idle_and_restored_by_traffic),
    cmocka_unit_test(test_real_readings_are_plausible),
};

FX_TEST_MAIN(tests)
