/* Unit tests for error.c: fx_strerror and fx_errname over every FX_E* code
 * (the X-macro list), negative errno values, success and values outside
 * both ranges. */
/* fx-test-libs: fx_base */
#include "felix/error.h"

#include <errno.h>
#include <string.h>

#include "fx_test.h"

typedef struct code {
    int value;
    const char *name;
    const char *msg;
} code;

static const code codes[] = {
#define FX_ERR_ROW(name, value, msg) {value, #name, msg},
    FX_ERRORS(FX_ERR_ROW)
#undef FX_ERR_ROW
};
#define NCODES (sizeof(codes) / sizeof(codes[0]))

static void test_every_code_has_its_message_and_name(void **state)
{
    for (size_t i = 0; i < NCODES; i++) {
        assert_string_equal(fx_strerror(codes[i].value), codes[i].msg);
        assert_string_equal(fx_errname(codes[i].value), codes[i].name);
    }
}

static void test_codes_are_unique_and_below_minus_1000(void **state)
{
    for (size_t i = 0; i < NCODES; i++) {
        assert_true(codes[i].value < -1000);
        assert_true(strncmp(codes[i].name, "FX_E", 4) == 0);
        for (size_t j = i + 1; j < NCODES; j++)
            assert_int_not_equal(codes[i].value, codes[j].value);
    }
}

static void test_negative_errno_is_named_by_the_system(void **state)
{
    assert_string_equal(fx_errname(-ENOENT), "ENOENT");
    assert_string_equal(fx_errname(-EAGAIN), "EAGAIN");
    assert_string_equal(fx_strerror(-ENOENT), strerror(ENOENT));
    assert_string_equal(fx_strerror(-ENOSPC), strerror(ENOSPC));
}

static void test_success_and_out_of_range_values(void **state)
{
    assert_string_equal(fx_strerror(0), "success");
    assert_string_equal(fx_errname(0), "?");
    /* Positive values and negatives beyond errno's range are not errno. */
    assert_string_equal(fx_strerror(5), "unknown error");
    assert_string_equal(fx_errname(5), "?");
    assert_string_equal(fx_strerror(-5000), "unknown error");
    assert_string_equal(fx_errname(-5000), "?");
    assert_string_equal(fx_strerror(-999), "unknown error");
    assert_string_equal(fx_errname(-999), "?");
}

static void test_unlisted_code_in_our_range_is_unknown(void **state)
{
    /* -1010 sits among our codes but names none of them. */
    for (size_t i = 0; i < NCODES; i++)
        assert_int_not_equal(codes[i].value, -1010);
    assert_string_equal(fx_strerror(-1010), "unknown error");
    assert_string_equal(fx_errname(-1010), "?");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_every_code_has_its_message_and_name),
    cmocka_unit_test(test_codes_are_unique_and_below_minus_1000),
    cmocka_unit_test(test_negative_errno_is_named_by_the_system),
    cmocka_unit_test(test_success_and_out_of_range_values),
    cmocka_unit_test(test_unlisted_code_in_our_range_is_unknown),
};

FX_TEST_MAIN(tests)
