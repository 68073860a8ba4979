/* Unit tests for the idle trimmer (src/server/memtrim.c): when it trims, with
 * the RSS and free-heap readings and the trim itself replaced by fakes (the
 * real malloc_trim against a real broker is python/tests/test_broker_memory.py,
 * in the unsanitised build: the sanitizers bring their own allocator). */
/* fx-test-libs: fx_server fx_base */
#include "fx_test.h"

#include <malloc.h>
#include <pthread.h>

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

/* A trimmer (100 ms idle) over |f| that has made its first idle trim. */
static void first_trim(fx_memtrim *t, fake *f)
{
    setup_trimmer(t, f, 100);
    fx_memtrim_tick(t, 0, 1);
    assert_int_equal(fx_memtrim_tick(t, 100 * MS, 1), 1);
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
    first_trim(&t, &f); /* RSS 12 MiB after it */
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
    first_trim(&t, &f); /* nothing to give */
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

/* Later in an idle period, RSS that grew by FX_MEMTRIM_MIN_GROWTH since the
 * last trim while the free heap did not (freed pages touched again, then
 * freed again) is trimmed, once per such growth. */
static void test_rss_grown_while_idle_is_trimmed_again(void **state)
{
    (void)state;
    fake f = after_a_peak();
    fx_memtrim t;
    first_trim(&t, &f); /* RSS 12 MiB after it */
    f.rss = 12 * MiB + MiB - 4096;
    assert_int_equal(fx_memtrim_tick(&t, 350 * MS, 1), 0);
    f.rss = 13 * MiB;
    f.rss_after_trim = 12 * MiB + 512 * 1024; /* not all of it goes back */
    assert_int_equal(fx_memtrim_tick(&t, 600 * MS, 1), 1);
    assert_int_equal(f.trims, 2);
    /* counted from that trim's RSS: no trim every tick for what stays */
    for (uint64_t ms = 850; ms < 3000; ms += 250)
        assert_int_equal(fx_memtrim_tick(&t, ms * MS, 1), 0);
    assert_int_equal(f.trims, 2);
}

/* Heap freed while datagrams moved (a client closing its connection after a
 * pause) is given back at the next idle period, though RSS did not grow. */
static void test_heap_freed_under_traffic_is_trimmed_at_the_next_idle_period(void **state)
{
    (void)state;
    fake f = {.rss = 50 * MiB, .free_bytes = 2 * MiB, .rss_after_trim = 50 * MiB};
    fx_memtrim t;
    first_trim(&t, &f); /* at the peak: nothing to give */
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

typedef struct arenas_log {
    fake *f;
    size_t calls;
    size_t trims_seen; /* f->trims at the last call */
} arenas_log;

static void fake_arenas(void *arg)
{
    arenas_log *a = arg;
    a->calls++;
    a->trims_seen = a->f->trims;
}

/* The broker's threads free into their own arenas (arenas_fn) before every
 * trim, and only then. */
static void test_every_thread_frees_into_its_arena_before_each_trim(void **state)
{
    (void)state;
    fake f = after_a_peak();
    arenas_log a = {.f = &f};
    fx_memtrim t;
    setup_trimmer(&t, &f, 100);
    t.arenas_fn = fake_arenas;
    t.arenas_arg = &a;
    fx_memtrim_tick(&t, 0, 1);
    assert_int_equal(fx_memtrim_tick(&t, 50 * MS, 1), 0);
    assert_int_equal(a.calls, 0);
    assert_int_equal(fx_memtrim_tick(&t, 100 * MS, 1), 1);
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.trims_seen, 0); /* before the trim itself */
    assert_int_equal(fx_memtrim_tick(&t, 350 * MS, 1), 0); /* nothing more freed */
    assert_int_equal(a.calls, 1);
    f.free_bytes += 300 << 10;
    assert_int_equal(fx_memtrim_tick(&t, 600 * MS, 1), 1);
    assert_int_equal(a.calls, 2);
    assert_int_equal(a.trims_seen, 1);
}

/* ---- glibc itself (unsanitised build only) ------------------------------------------ */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED_MALLOC 1
#else
#define SANITIZED_MALLOC 0
#endif

#if !SANITIZED_MALLOC

typedef struct arena_thread {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int step; /* main: 1 nudge, 2 exit; thread: 10 freed, 11 nudged */
} arena_thread;

static void arena_step(arena_thread *a, int step)
{
    pthread_mutex_lock(&a->mu);
    a->step = step;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static void arena_wait(arena_thread *a, int step)
{
    pthread_mutex_lock(&a->mu);
    while (a->step != step)
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
}

/* A thread (its own arena) touches 8 MiB of 32 KiB blocks and frees them
 * under a 64 MiB trim threshold, so they end up in its arena's top. */
static void *arena_main(void *arg)
{
    arena_thread *a = arg;
    enum { N = 256 };
    static void *blocks[N];
    for (int i = 0; i < N; i++) {
        blocks[i] = malloc(32 << 10);
        if (blocks[i] == NULL)
            abort(); /* not a cmocka assertion: this is not the test's thread */
        volatile char *p = blocks[i]; /* a store the compiler keeps: every page resident */
        for (size_t o = 0; o < (32 << 10); o += 4096)
            p[o] = 1;
    }
    for (int i = 0; i < N; i++)
        free(blocks[i]);
    arena_step(a, 10);
    arena_wait(a, 1);
    fx_memtrim_own_arena();
    arena_step(a, 11);
    arena_wait(a, 2);
    return NULL;
}

#endif

/* What fx_memtrim_own_arena is for, against the real allocator: with the idle
 * threshold set, malloc_trim(0) leaves a thread arena's freed top resident,
 * and a block freed by that thread gives it back. Runs in the unsanitised
 * build (the sanitizers bring their own allocator). */
static void test_a_thread_arena_top_goes_back_once_its_thread_frees_a_block(void **state)
{
    (void)state;
#if SANITIZED_MALLOC
    fx_test_skip("the sanitizers replace the allocator");
#else
    /* A thread gets an arena of its own (MALLOC_ARENA_MAX=1 would give it
     * the main one, whose top malloc_trim does shrink). */
    assert_int_equal(mallopt(M_ARENA_MAX, 8), 1);
    assert_int_equal(mallopt(M_TRIM_THRESHOLD, 64 << 20), 1);
    assert_int_equal(mallopt(M_MMAP_THRESHOLD, 4 << 20), 1);
    arena_thread a = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    size_t r0 = fx_memtrim_rss_bytes();
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, arena_main, &a), 0);
    arena_wait(&a, 10);
    size_t r1 = fx_memtrim_rss_bytes();
    assert_true(r1 >= r0 + 7 * MiB);
    /* the idle threshold and a trim from another thread: the top stays */
    assert_int_equal(mallopt(M_TRIM_THRESHOLD, (int)FX_MEMTRIM_IDLE_THRESHOLD), 1);
    malloc_trim(0);
    size_t r2 = fx_memtrim_rss_bytes();
    assert_true(r2 >= r0 + 7 * MiB);
    /* the thread frees one block into its arena: the top goes back */
    arena_step(&a, 1);
    arena_wait(&a, 11);
    size_t r3 = fx_memtrim_rss_bytes();
    arena_step(&a, 2);
    pthread_join(th, NULL);
    mallopt(M_MMAP_THRESHOLD, 128 << 10);
    assert_true(r3 + 7 * MiB <= r2);
#endif
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_trims_once_after_the_idle_time_and_not_before),
    cmocka_unit_test(test_activity_restarts_the_idle_clock),
    cmocka_unit_test(test_a_new_idle_period_trims_only_if_rss_grew),
    cmocka_unit_test(test_heap_freed_while_idle_is_trimmed_again),
    cmocka_unit_test(test_rss_grown_while_idle_is_trimmed_again),
    cmocka_unit_test(test_heap_freed_under_traffic_is_trimmed_at_the_next_idle_period),
    cmocka_unit_test(test_zero_idle_time_never_trims),
    cmocka_unit_test(test_trim_threshold_is_lowered_while_idle_and_restored_by_traffic),
    cmocka_unit_test(test_real_readings_are_plausible),
    cmocka_unit_test(test_every_thread_frees_into_its_arena_before_each_trim),
    cmocka_unit_test(test_a_thread_arena_top_goes_back_once_its_thread_frees_a_block),
};

FX_TEST_MAIN(tests)
