/* Unit tests for fx_grow: array and buffer growth. */
/* fx-test-libs: fx_base */
#include "base/grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"

static void test_grows_from_first_by_doubling_and_keeps_the_contents(void **state)
{
    size_t cap = 0;
    int *v = fx_grow(NULL, &cap, 1, sizeof(*v), 8);
    assert_non_null(v);
    assert_int_equal(cap, 8);
    for (int i = 0; i < 8; i++)
        v[i] = i;
    assert_ptr_equal(fx_grow(v, &cap, 8, sizeof(*v), 8), v); /* room: the same array */
    assert_int_equal(cap, 8);
    int *w = fx_grow(v, &cap, 9, sizeof(*v), 8);
    assert_non_null(w);
    assert_int_equal(cap, 16);
    for (int i = 0; i < 8; i++)
        assert_int_equal(w[i], i);
    w = fx_grow(w, &cap, 100, sizeof(*w), 8);
    assert_non_null(w);
    assert_int_equal(cap, 128);
    free(w);
    /* Bytes, a first capacity and a need far beyond it. */
    cap = 0;
    char *b = fx_grow(NULL, &cap, 5000, 1, 4096);
    assert_non_null(b);
    assert_int_equal(cap, 8192);
    free(b);
}

static void test_overflow_refused_and_the_old_array_kept(void **state)
{
    size_t cap = 4;
    uint64_t *v = fx_grow(NULL, &cap, 4, sizeof(*v), 4);
    assert_non_null(v);
    size_t before = cap;
    assert_null(fx_grow(v, &cap, SIZE_MAX / 4, sizeof(*v), 4));
    assert_int_equal(cap, before);
    assert_null(fx_grow(v, &cap, SIZE_MAX, 1, 4));
    assert_int_equal(cap, before);
    v[3] = 7; /* still ours */
    free(v);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_grows_from_first_by_doubling_and_keeps_the_contents),
    cmocka_unit_test(test_overflow_refused_and_the_old_array_kept),
};
FX_TEST_MAIN(tests)
