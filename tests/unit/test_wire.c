/* Unit tests for wire.c: the error detail (NULL target, default message,
 * truncation) and strict UTF-8 validation at every boundary of the
 * well-formed table (overlongs, surrogates, beyond U+10FFFF, truncated
 * sequences, stray continuation bytes), also after the 8-byte ASCII fast
 * path; and the big-endian helpers of wire.h. */
/* fx-test-libs: fx_wire fx_base */
#include "wire/wire.h"

#include <string.h>

#include "fx_test.h"

static bool ok(const char *s, size_t n)
{
    return fx_wire_utf8_valid((const uint8_t *)s, n);
}

#define OK(lit) ok(lit, sizeof(lit) - 1)

static void test_err_set_fills_code_and_formatted_message(void **state)
{
    fx_wire_err e = {0};
    assert_int_equal(
        fx_wire_err_set(&e, FX_EWIRE_FIELD_MISSING, "missing '%s' in %s", "tenant_id", "publish"),
        FX_EWIRE_FIELD_MISSING);
    assert_int_equal(e.code, FX_EWIRE_FIELD_MISSING);
    assert_string_equal(e.msg, "missing 'tenant_id' in publish");
}

static void test_err_set_tolerates_null_and_defaults_the_message(void **state)
{
    assert_int_equal(fx_wire_err_set(NULL, FX_EWIRE_MAGIC, "x %d", 1), FX_EWIRE_MAGIC);
    fx_wire_err e = {0};
    assert_int_equal(fx_wire_err_set(&e, FX_EWIRE_MAGIC, NULL), FX_EWIRE_MAGIC);
    assert_string_equal(e.msg, fx_strerror(FX_EWIRE_MAGIC));
}

static void test_err_set_truncates_a_long_message(void **state)
{
    char big[400];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    fx_wire_err e;
    fx_wire_err_set(&e, FX_EWIRE_JSON, "%s", big);
    assert_int_equal(strlen(e.msg), sizeof(e.msg) - 1);
}

static void test_utf8_accepts_ascii_and_every_sequence_length(void **state)
{
    assert_true(ok("", 0));
    assert_true(OK("plain ascii name, longer than eight"));
    assert_true(OK("\xc2\x80"));             /* U+0080 */
    assert_true(OK("\xdf\xbf"));             /* U+07FF */
    assert_true(OK("\xe0\xa0\x80"));         /* U+0800 */
    assert_true(OK("\xed\x9f\xbf"));         /* U+D7FF */
    assert_true(OK("\xee\x80\x80"));         /* U+E000 */
    assert_true(OK("\xef\xbf\xbf"));         /* U+FFFF */
    assert_true(OK("\xf0\x90\x80\x80"));     /* U+10000 */
    assert_true(OK("\xf4\x8f\xbf\xbf"));     /* U+10FFFF */
    assert_true(OK("abcdefgh\xc3\xa9tude")); /* after the 8-byte path */
}

static void test_utf8_refuses_overlongs_surrogates_and_beyond_max(void **state)
{
    assert_false(OK("\xc0\x80"));         /* overlong NUL */
    assert_false(OK("\xc1\xbf"));         /* overlong */
    assert_false(OK("\xe0\x9f\xbf"));     /* overlong 3-byte */
    assert_false(OK("\xed\xa0\x80"));     /* U+D800 */
    assert_false(OK("\xed\xbf\xbf"));     /* U+DFFF */
    assert_false(OK("\xf0\x8f\xbf\xbf")); /* overlong 4-byte */
    assert_false(OK("\xf4\x90\x80\x80")); /* U+110000 */
    assert_false(OK("\xf5\x80\x80\x80"));
    assert_false(OK("\xff"));
}

static void test_utf8_refuses_truncated_and_stray_bytes(void **state)
{
    assert_false(OK("\x80")); /* stray continuation */
    assert_false(OK("ab\xbf"));
    assert_false(OK("\xc3"));             /* truncated 2-byte */
    assert_false(OK("\xe2\x82"));         /* truncated 3-byte */
    assert_false(OK("\xf0\x9f\x98"));     /* truncated 4-byte */
    assert_false(OK("\xe2\x28\xa1"));     /* second byte not a continuation */
    assert_false(OK("\xe2\x82\x28"));     /* third byte not a continuation */
    assert_false(OK("\xf0\x9f\x98\x28")); /* fourth byte not a continuation */
    assert_false(OK("12345678\x80"));     /* found after the fast path */
    /* The length bounds the check: a valid prefix of invalid bytes is fine. */
    assert_true(ok("ok\xff", 2));
}

static void test_big_endian_helpers_round_trip(void **state)
{
    uint8_t b[14];
    uint8_t *p = fx_put16(b, 0x0102);
    p = fx_put32(p, 0x03040506u);
    p = fx_put64(p, 0x0708090a0b0c0d0eull);
    assert_ptr_equal(p, b + 14);
    for (int i = 0; i < 14; i++)
        assert_int_equal(b[i], i + 1);
    assert_int_equal(fx_be16(b), 0x0102);
    assert_int_equal(fx_be32(b + 2), 0x03040506u);
    assert_int_equal(fx_be64(b + 6), 0x0708090a0b0c0d0eull);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_err_set_fills_code_and_formatted_message),
    cmocka_unit_test(test_err_set_tolerates_null_and_defaults_the_message),
    cmocka_unit_test(test_err_set_truncates_a_long_message),
    cmocka_unit_test(test_utf8_accepts_ascii_and_every_sequence_length),
    cmocka_unit_test(test_utf8_refuses_overlongs_surrogates_and_beyond_max),
    cmocka_unit_test(test_utf8_refuses_truncated_and_stray_bytes),
    cmocka_unit_test(test_big_endian_helpers_round_trip),
};

FX_TEST_MAIN(tests)
