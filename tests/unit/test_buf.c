/* Unit tests for fx_buf: refcounted immutable buffers. */
/* fx-test-libs: fx_base */
#include "base/buf.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "fx_test.h"

static atomic_int frees;

static void count_free(void *data, size_t len, void *user)
{
    (void)len;
    (void)user;
    atomic_fetch_add(&frees, 1);
    free(data);
}

static fx_buf *wrapped(size_t len)
{
    void *mem = malloc(len);
    assert_non_null(mem);
    memset(mem, 0xab, len);
    fx_buf *b = NULL;
    assert_int_equal(fx_buf_wrap(&b, mem, len, count_free, NULL), 0);
    return b;
}

static void test_new_has_one_reference_and_writable_bytes(void **state)
{
    fx_buf *b = NULL;
    assert_int_equal(fx_buf_new(&b, 16), 0);
    assert_int_equal(fx_buf_refcount(b), 1);
    assert_int_equal(fx_buf_len(b), 16);
    memset(fx_buf_data_mut(b), 7, 16);
    assert_int_equal(fx_buf_data(b)[15], 7);
    fx_buf_unref(b);
}

static void test_new_copy_copies_bytes(void **state)
{
    char src[] = "hello";
    fx_buf *b = NULL;
    assert_int_equal(fx_buf_new_copy(&b, src, 5), 0);
    src[0] = 'j';
    assert_memory_equal(fx_buf_data(b), "hello", 5);
    fx_buf *e = NULL;
    assert_int_equal(fx_buf_new_copy(&e, NULL, 0), 0);
    assert_int_equal(fx_buf_len(e), 0);
    assert_non_null(fx_buf_data(e));
    fx_buf_unref(e);
    fx_buf_unref(b);
}

static void test_huge_length_fails_with_enomem(void **state)
{
    fx_buf *b = NULL;
    assert_int_equal(fx_buf_new(&b, SIZE_MAX - 8), -ENOMEM);
    assert_null(b);
}

static void test_last_unref_frees(void **state)
{
    atomic_store(&frees, 0);
    fx_buf *b = wrapped(32);
    assert_ptr_equal(fx_buf_ref(b), b);
    assert_ptr_equal(fx_buf_ref(b), b);
    assert_int_equal(fx_buf_refcount(b), 3);
    fx_buf_unref(b);
    fx_buf_unref(b);
    assert_int_equal(atomic_load(&frees), 0);
    fx_buf_unref(b);
    assert_int_equal(atomic_load(&frees), 1);
    /* An inline buffer is freed by its last unref too (LSan checks it). */
    fx_buf *c = NULL;
    assert_int_equal(fx_buf_new(&c, 100), 0);
    fx_buf_ref(c);
    fx_buf_unref(c);
    fx_buf_unref(c);
}

static void test_unref_null_and_ref_null_do_nothing(void **state)
{
    fx_buf_unref(NULL);
    assert_null(fx_buf_ref(NULL));
}

static void test_wrap_without_free_callback_keeps_memory(void **state)
{
    static const uint8_t text[] = {1, 2, 3};
    fx_buf *b = NULL;
    assert_int_equal(fx_buf_wrap(&b, (void *)text, sizeof(text), NULL, NULL), 0);
    assert_ptr_equal(fx_buf_data(b), text);
    assert_int_equal(fx_buf_len(b), 3);
    fx_buf_unref(b);
    assert_int_equal(text[2], 3);
}

enum { THREADS = 4, ROUNDS = 20000 };

/* Each thread takes references, reads the bytes and drops them again while
 * the others do the same. */
static void *churn(void *arg)
{
    fx_buf *b = arg;
    unsigned sum = 0;
    for (int i = 0; i < ROUNDS; i++) {
        fx_buf *r = fx_buf_ref(b);
        sum += fx_buf_data(r)[i % fx_buf_len(r)];
        fx_buf_unref(r);
    }
    fx_buf_unref(b); /* the reference main handed over */
    return (void *)(uintptr_t)sum;
}

static void test_many_threads_ref_unref_concurrently(void **state)
{
    atomic_store(&frees, 0);
    fx_buf *b = wrapped(64);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, fx_buf_ref(b)), 0);
    for (int i = 0; i < THREADS; i++) {
        void *sum;
        pthread_join(t[i], &sum);
        assert_int_equal((uintptr_t)sum, (uintptr_t)ROUNDS * 0xab);
    }
    assert_int_equal(fx_buf_refcount(b), 1);
    assert_int_equal(atomic_load(&frees), 0);
    fx_buf_unref(b);
    assert_int_equal(atomic_load(&frees), 1);
}

/* The last reference dropped on another thread frees the buffer there. */
static void test_last_unref_on_other_thread_frees(void **state)
{
    atomic_store(&frees, 0);
    fx_buf *b = wrapped(8);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, fx_buf_ref(b)), 0);
    fx_buf_unref(b);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&frees), 1);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_new_has_one_reference_and_writable_bytes),
    cmocka_unit_test(test_new_copy_copies_bytes),
    cmocka_unit_test(test_huge_length_fails_with_enomem),
    cmocka_unit_test(test_last_unref_frees),
    cmocka_unit_test(test_unref_null_and_ref_null_do_nothing),
    cmocka_unit_test(test_wrap_without_free_callback_keeps_memory),
    cmocka_unit_test(test_many_threads_ref_unref_concurrently),
    cmocka_unit_test(test_last_unref_on_other_thread_frees),
};
FX_TEST_MAIN(tests)
