/* Unit tests for fx_blk: size classes, reuse, the per-class bound, blocks
 * outside the classes, alignment, and frees from another thread (TSan too). */
/* fx-test-libs: fx_base */
#include "base/blk.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "fx_test.h"

static int setup(void **state)
{
    (void)state;
    fx_blk_trim();
    return 0;
}

static void test_freed_block_is_reused_for_the_same_class(void **state)
{
    (void)state;
    uint8_t *a = fx_blk_alloc(66 * 1024);
    assert_non_null(a);
    memset(a, 0xab, 66 * 1024); /* all of it is usable */
    fx_blk_free(a);
    assert_int_equal(fx_blk_cached_bytes(), 128 * 1024); /* the 128 KiB class */
    uint8_t *b = fx_blk_alloc(100 * 1024);               /* same class */
    assert_ptr_equal(a, b);
    assert_int_equal(fx_blk_cached_bytes(), 0);
    uint8_t *c = fx_blk_alloc(20 * 1024); /* another class: not that block */
    assert_ptr_not_equal(c, b);
    fx_blk_free(b);
    fx_blk_free(c);
    assert_int_equal(fx_blk_cached_bytes(), 128 * 1024 + 32 * 1024);
    fx_blk_trim();
    assert_int_equal(fx_blk_cached_bytes(), 0);
}

enum { PER_CLASS = FX_BLK_CLASS_BYTES / (64 * 1024) };

static void test_each_class_and_the_cache_are_bounded_in_bytes(void **state)
{
    (void)state;
    static void *p[PER_CLASS + 3];
    for (size_t i = 0; i < PER_CLASS + 3; i++)
        assert_non_null(p[i] = fx_blk_alloc(40 * 1024)); /* 64 KiB class */
    for (size_t i = 0; i < PER_CLASS + 3; i++)
        fx_blk_free(p[i]);
    assert_int_equal(fx_blk_cached_bytes(), FX_BLK_CLASS_BYTES);
    /* Another class fills up to the global bound, not beyond. */
    static void *q[FX_BLK_CACHE_BYTES / (1u << 20) + 1];
    size_t nq = sizeof(q) / sizeof(q[0]);
    for (size_t i = 0; i < nq; i++)
        assert_non_null(q[i] = fx_blk_alloc(600 * 1024)); /* 1 MiB class */
    for (size_t i = 0; i < nq; i++)
        fx_blk_free(q[i]);
    assert_int_equal(fx_blk_cached_bytes(), FX_BLK_CACHE_BYTES);
    fx_blk_trim();
    assert_int_equal(fx_blk_cached_bytes(), 0);
}

static void test_small_and_huge_blocks_are_not_cached(void **state)
{
    (void)state;
    void *s = fx_blk_alloc(100);
    void *h = fx_blk_alloc(3u << 20);
    assert_non_null(s);
    assert_non_null(h);
    memset(h, 1, 3u << 20);
    fx_blk_free(s);
    fx_blk_free(h);
    assert_int_equal(fx_blk_cached_bytes(), 0);
    fx_blk_free(NULL);
    assert_null(fx_blk_alloc(SIZE_MAX - 4)); /* overflow is refused, not wrapped */
}

/* A one-message publish frame (1 KiB payload, or 16 bytes) is allocated on
 * the caller's thread and freed on the client loop: it comes from the cache
 * too, in the smallest class that holds it with the header. */
static void test_message_sized_blocks_are_cached(void **state)
{
    (void)state;
    void *k = fx_blk_alloc(1100);
    assert_non_null(k);
    memset(k, 2, 1100);
    fx_blk_free(k);
    assert_int_equal(fx_blk_cached_bytes(), 2048);
    void *s = fx_blk_alloc(150);
    assert_non_null(s);
    fx_blk_free(s);
    assert_int_equal(fx_blk_cached_bytes(), 2048 + 256);
    assert_ptr_equal(fx_blk_alloc(1500), k); /* the same 2 KiB class */
    assert_ptr_equal(fx_blk_alloc(112), s);  /* 128 with the header: the 256-byte class */
    void *u = fx_blk_alloc(111);             /* under 128 with the header: malloc */
    assert_non_null(u);
    assert_int_equal(fx_blk_cached_bytes(), 0);
    fx_blk_free(u);
    assert_int_equal(fx_blk_cached_bytes(), 0);
    fx_blk_free(k);
    fx_blk_free(s);
    assert_int_equal(fx_blk_cached_bytes(), 2048 + 256);
    fx_blk_trim();
}

static void test_blocks_are_16_byte_aligned(void **state)
{
    (void)state;
    size_t sizes[] = {1, 100, 9000, 70000, 1u << 20, 2u << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        void *p = fx_blk_alloc(sizes[i]);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 16, 0);
        fx_blk_free(p);
    }
    fx_blk_trim();
}

enum { XTHREAD_N = 2000, XTHREAD_SLOTS = 16 };

typedef struct xfer {
    void *_Atomic slot[XTHREAD_SLOTS];
} xfer;

/* Frees every block the allocating thread hands over. */
static void *freer(void *arg)
{
    xfer *x = arg;
    int freed = 0;
    while (freed < XTHREAD_N) {
        for (size_t i = 0; i < XTHREAD_SLOTS; i++) {
            void *p = atomic_exchange(&x->slot[i], NULL);
            if (p != NULL) {
                assert_int_equal(((uint8_t *)p)[0], (uint8_t)(i + 1));
                fx_blk_free(p);
                freed++;
            }
        }
    }
    return NULL;
}

static void test_blocks_freed_on_another_thread_are_reused_safely(void **state)
{
    (void)state;
    static xfer x;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, freer, &x), 0);
    for (int n = 0; n < XTHREAD_N;) {
        size_t i = (size_t)n % XTHREAD_SLOTS;
        if (atomic_load(&x.slot[i]) != NULL)
            continue;
        uint8_t *p = fx_blk_alloc(16 * 1024 + (size_t)n % 50000);
        assert_non_null(p);
        memset(p, (int)(i + 1), 16 * 1024);
        atomic_store(&x.slot[i], p);
        n++;
    }
    pthread_join(th, NULL);
    assert_true(fx_blk_cached_bytes() <= FX_BLK_CACHE_BYTES);
    fx_blk_trim();
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup(test_freed_block_is_reused_for_the_same_class, setup),
    cmocka_unit_test_setup(test_each_class_and_the_cache_are_bounded_in_bytes, setup),
    cmocka_unit_test_setup(test_small_and_huge_blocks_are_not_cached, setup),
    cmocka_unit_test_setup(test_message_sized_blocks_are_cached, setup),
    cmocka_unit_test_setup(test_blocks_are_16_byte_aligned, setup),
    cmocka_unit_test_setup(test_blocks_freed_on_another_thread_are_reused_safely, setup),
};
FX_TEST_MAIN(tests)
