/* Tests of strict base64: the canonical-form check of both variants (padding,
 * spare bits, alphabet, length mod 4), the RFC 4648 vectors, and decode and
 * encode round trips over nettle. */
/* fx-test-libs: fx_wire fx_base */
#include "fx_test.h"

#include <errno.h>

#include "felix/error.h"
#include "wire/base64.h"

/* ---- helpers ------------------------------------------------------------------ */

static bool canon(const char *s, fx_base64_variant v)
{
    return fx_base64_is_canonical(s, strlen(s), v);
}

/* Decodes NUL-terminated |s| and checks it gives |want| (|n| bytes). */
static void assert_decodes(const char *s, fx_base64_variant v, const void *want, size_t n)
{
    uint8_t out[64];
    size_t len = 999;
    assert_int_equal(fx_base64_decode(s, strlen(s), v, out, sizeof(out), &len), 0);
    assert_int_equal(len, n);
    assert_memory_equal(out, want, n);
}

/* Checks decoding |s| fails with FX_EWIRE_BASE64 and leaves |len| alone. */
static void assert_refused(const char *s, size_t n, fx_base64_variant v)
{
    uint8_t out[64];
    size_t len = 999;
    assert_false(fx_base64_is_canonical(s, n, v));
    assert_int_equal(fx_base64_decode(s, n, v, out, sizeof(out), &len), FX_EWIRE_BASE64);
    assert_int_equal(len, 999);
}

/* Encodes |n| bytes and checks the text is |want|. */
static void assert_encodes(const void *src, size_t n, fx_base64_variant v, const char *want)
{
    char out[64];
    memset(out, '#', sizeof(out));
    size_t k = fx_base64_encode(out, src, n, v);
    assert_int_equal(k, strlen(want));
    assert_int_equal(k, FX_BASE64_ENCODED_LEN(n, v));
    assert_memory_equal(out, want, k);
    assert_int_equal(out[k], '#'); /* nothing past the text, not even a NUL */
}

static const char *const rfc_plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
static const char *const rfc_std[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                      "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
static const char *const rfc_url[] = {"", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy"};

/* ---- standard, padded ----------------------------------------------------------- */

static void test_std_accepts_rfc_vectors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(rfc_std) / sizeof(rfc_std[0]); i++) {
        assert_true(canon(rfc_std[i], FX_BASE64_STD));
        assert_decodes(rfc_std[i], FX_BASE64_STD, rfc_plain[i], strlen(rfc_plain[i]));
        assert_encodes(rfc_plain[i], strlen(rfc_plain[i]), FX_BASE64_STD, rfc_std[i]);
    }
}

static void test_std_uses_plus_and_slash(void **state)
{
    (void)state;
    static const uint8_t b[] = {0xfb, 0xff, 0xbf};
    assert_decodes("+/+/", FX_BASE64_STD, b, sizeof(b));
    assert_encodes(b, sizeof(b), FX_BASE64_STD, "+/+/");
    assert_refused("-_-_", 4, FX_BASE64_STD);
}

static void test_std_rejects_length_not_multiple_of_four(void **state)
{
    (void)state;
    assert_refused("Zg", 2, FX_BASE64_STD);
    assert_refused("Zm8", 3, FX_BASE64_STD);
    assert_refused("Zg=", 3, FX_BASE64_STD);
    assert_refused("Zm9vY", 5, FX_BASE64_STD);
    assert_refused("Zg===", 5, FX_BASE64_STD);
}

static void test_std_rejects_misplaced_padding(void **state)
{
    (void)state;
    assert_refused("====", 4, FX_BASE64_STD);
    assert_refused("Z===", 4, FX_BASE64_STD);
    assert_refused("=Zg=", 4, FX_BASE64_STD);
    assert_refused("Zg=A", 4, FX_BASE64_STD);
    assert_refused("Zg==Zm9v", 8, FX_BASE64_STD); /* padding only at the very end */
}

static void test_std_rejects_nonzero_trailing_bits(void **state)
{
    (void)state;
    /* "Zg==" and "Zm8=" are canonical; one more low bit in the last data
     * character would decode to the same bytes, so it must be refused. */
    assert_refused("Zh==", 4, FX_BASE64_STD);
    assert_refused("Zv==", 4, FX_BASE64_STD);
    assert_refused("Zm9=", 4, FX_BASE64_STD);
    assert_refused("Zm/=", 4, FX_BASE64_STD);
}

static void test_std_rejects_whitespace_and_foreign_bytes(void **state)
{
    (void)state;
    assert_refused("Zm9\n", 4, FX_BASE64_STD);
    assert_refused("Zm 9v", 5, FX_BASE64_STD);
    assert_refused("Zm9v\r\n", 6, FX_BASE64_STD);
    assert_refused("Zm\0v", 4, FX_BASE64_STD);
    assert_refused("Zm\xc3\xa9", 4, FX_BASE64_STD);
}

/* ---- url, unpadded -------------------------------------------------------------- */

static void test_url_accepts_rfc_vectors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(rfc_url) / sizeof(rfc_url[0]); i++) {
        assert_true(canon(rfc_url[i], FX_BASE64_URL));
        assert_decodes(rfc_url[i], FX_BASE64_URL, rfc_plain[i], strlen(rfc_plain[i]));
        assert_encodes(rfc_plain[i], strlen(rfc_plain[i]), FX_BASE64_URL, rfc_url[i]);
    }
}

static void test_url_uses_dash_and_underscore(void **state)
{
    (void)state;
    static const uint8_t b[] = {0xfb, 0xff, 0xbf, 0xfb, 0xf0};
    assert_decodes("-_-_-_A", FX_BASE64_URL, b, sizeof(b));
    assert_encodes(b, sizeof(b), FX_BASE64_URL, "-_-_-_A");
    assert_refused("+/+/", 4, FX_BASE64_URL);
}

static void test_url_rejects_length_one_mod_four(void **state)
{
    (void)state;
    assert_refused("Z", 1, FX_BASE64_URL);
    assert_refused("Zm9vY", 5, FX_BASE64_URL);
    assert_refused("Zm9vYmFyZ", 9, FX_BASE64_URL);
}

static void test_url_rejects_any_padding(void **state)
{
    (void)state;
    assert_refused("Zg==", 4, FX_BASE64_URL);
    assert_refused("Zm8=", 4, FX_BASE64_URL);
    assert_refused("Zg=", 3, FX_BASE64_URL);
    assert_refused("Zm9v====", 8, FX_BASE64_URL);
}

static void test_url_rejects_nonzero_trailing_bits(void **state)
{
    (void)state;
    assert_refused("Zh", 2, FX_BASE64_URL);
    assert_refused("Z_", 2, FX_BASE64_URL);
    assert_refused("Zm9", 3, FX_BASE64_URL);
    assert_refused("Zm-", 3, FX_BASE64_URL);
}

static void test_url_rejects_whitespace_and_foreign_bytes(void **state)
{
    (void)state;
    assert_refused("Zm9\n", 4, FX_BASE64_URL);
    assert_refused(" Zm9v", 5, FX_BASE64_URL);
    assert_refused("Zm.v", 4, FX_BASE64_URL);
    assert_refused("Zm\0v", 4, FX_BASE64_URL);
    assert_refused("\xff\xff", 2, FX_BASE64_URL);
}

/* ---- both ------------------------------------------------------------------------- */

static void test_empty_text_is_zero_bytes(void **state)
{
    (void)state;
    size_t len = 999;
    uint8_t out[1];
    assert_int_equal(fx_base64_decode("", 0, FX_BASE64_STD, out, sizeof(out), &len), 0);
    assert_int_equal(len, 0);
    len = 999;
    assert_int_equal(fx_base64_decode("", 0, FX_BASE64_URL, out, sizeof(out), &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(fx_base64_encode(NULL, NULL, 0, FX_BASE64_STD), 0);
    assert_int_equal(fx_base64_encode(NULL, NULL, 0, FX_BASE64_URL), 0);
}

static void test_check_reads_only_n_chars(void **state)
{
    (void)state;
    /* The text is a length-delimited slice: what follows it does not count. */
    assert_true(fx_base64_is_canonical("Zm9v!!", 4, FX_BASE64_STD));
    assert_true(fx_base64_is_canonical("Zm9v!!", 4, FX_BASE64_URL));
    assert_true(fx_base64_is_canonical("Zg==", 0, FX_BASE64_STD));
    assert_false(fx_base64_is_canonical("Zg==", 3, FX_BASE64_STD));
    assert_true(fx_base64_is_canonical("ZgXX", 2, FX_BASE64_URL));
}

static void test_decode_refuses_buffer_below_room(void **state)
{
    (void)state;
    uint8_t out[FX_BASE64_DECODE_ROOM(8)];
    size_t len = 999;
    assert_int_equal(fx_base64_decode("Zm9vYmFy", 8, FX_BASE64_STD, out, sizeof(out) - 1, &len),
                     -ENOSPC);
    assert_int_equal(fx_base64_decode("Zm9vYmFy", 8, FX_BASE64_URL, out, sizeof(out) - 1, &len),
                     -ENOSPC);
    assert_int_equal(len, 999);
    assert_int_equal(fx_base64_decode("Zm9vYmFy", 8, FX_BASE64_STD, out, sizeof(out), &len), 0);
    assert_int_equal(len, 6);
    assert_memory_equal(out, "foobar", 6);
}

/* Every length 0..96 and every byte value: encode, check, decode back. */
static void test_round_trip_all_lengths_both_variants(void **state)
{
    (void)state;
    uint8_t src[96];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof(src); i++) {
        x = x * 1103515245u + 12345u;
        src[i] = (uint8_t)(i < 64 ? i * 4 + (x >> 30) : x >> 24);
    }
    for (int v = FX_BASE64_STD; v <= FX_BASE64_URL; v++) {
        for (size_t n = 0; n <= sizeof(src); n++) {
            char text[FX_BASE64_ENCODED_LEN(sizeof(src), FX_BASE64_STD)];
            size_t k = fx_base64_encode(text, src, n, (fx_base64_variant)v);
            assert_int_equal(k, FX_BASE64_ENCODED_LEN(n, (fx_base64_variant)v));
            assert_true(fx_base64_is_canonical(text, k, (fx_base64_variant)v));
            uint8_t back[FX_BASE64_DECODE_ROOM(sizeof(text))];
            size_t len = 0;
            assert_int_equal(
                fx_base64_decode(text, k, (fx_base64_variant)v, back, sizeof(back), &len), 0);
            assert_int_equal(len, n);
            assert_memory_equal(back, src, n);
        }
    }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_std_accepts_rfc_vectors),
    cmocka_unit_test(test_std_uses_plus_and_slash),
    cmocka_unit_test(test_std_rejects_length_not_multiple_of_four),
    cmocka_unit_test(test_std_rejects_misplaced_padding),
    cmocka_unit_test(test_std_rejects_nonzero_trailing_bits),
    cmocka_unit_test(test_std_rejects_whitespace_and_foreign_bytes),
    cmocka_unit_test(test_url_accepts_rfc_vectors),
    cmocka_unit_test(test_url_uses_dash_and_underscore),
    cmocka_unit_test(test_url_rejects_length_one_mod_four),
    cmocka_unit_test(test_url_rejects_any_padding),
    cmocka_unit_test(test_url_rejects_nonzero_trailing_bits),
    cmocka_unit_test(test_url_rejects_whitespace_and_foreign_bytes),
    cmocka_unit_test(test_empty_text_is_zero_bytes),
    cmocka_unit_test(test_check_reads_only_n_chars),
    cmocka_unit_test(test_decode_refuses_buffer_below_room),
    cmocka_unit_test(test_round_trip_all_lengths_both_variants),
};

FX_TEST_MAIN(tests)
