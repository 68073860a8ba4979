/* Unit tests for mint.c: key pairs, compact JWS signing (its three parts and
 * a signature that Ed25519 accepts), the JWT's header and claims as minted
 * (defaults, optional claims, refusals) and the JWKS file it writes, read
 * back by the verifying side. */
/* fx-test-libs: fx_auth fx_wire fx_base */
#include "auth/auth.h"
#include "wire/base64.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <nettle/eddsa.h>

#include "fx_test.h"

/* Decodes part |i| (0..2) of compact token |t| into |out|. */
static size_t part(const char *t, int i, uint8_t *out, size_t cap)
{
    const char *s = t;
    for (int k = 0; k < i; k++) {
        s = strchr(s, '.');
        assert_non_null(s);
        s++;
    }
    const char *e = strchr(s, '.');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    size_t len = 0;
    assert_int_equal(fx_base64_decode(s, n, FX_BASE64_URL, out, cap, &len), 0);
    return len;
}

static json_t *part_json(const char *t, int i)
{
    uint8_t buf[2048];
    size_t n = part(t, i, buf, sizeof(buf));
    json_t *j = json_loadb((const char *)buf, n, 0, NULL);
    assert_non_null(j);
    return j;
}

static void test_keygen_gives_fresh_pairs_whose_public_key_derives(void **state)
{
    uint8_t pub1[32], priv1[32], pub2[32], priv2[32], again[32];
    assert_int_equal(fx_auth_keygen(pub1, priv1), 0);
    assert_int_equal(fx_auth_keygen(pub2, priv2), 0);
    assert_memory_not_equal(priv1, priv2, 32);
    assert_memory_not_equal(pub1, pub2, 32);
    fx_auth_pubkey(priv1, again);
    assert_memory_equal(again, pub1, 32);
    assert_int_equal(fx_auth_keygen(NULL, priv1), -EINVAL);
    assert_int_equal(fx_auth_keygen(pub1, NULL), -EINVAL);
}

static void test_sign_compact_has_three_parts_and_a_valid_signature(void **state)
{
    uint8_t pub[32], priv[32];
    assert_int_equal(fx_auth_keygen(pub, priv), 0);
    char *t = NULL;
    assert_int_equal(fx_auth_sign_compact(priv, "hdr", 3, "body!", 5, &t), 0);
    uint8_t b[128];
    assert_int_equal(part(t, 0, b, sizeof(b)), 3);
    assert_memory_equal(b, "hdr", 3);
    assert_int_equal(part(t, 1, b, sizeof(b)), 5);
    assert_memory_equal(b, "body!", 5);
    assert_int_equal(part(t, 2, b, sizeof(b)), FX_AUTH_SIG_BYTES);
    /* The signature covers "b64u(header).b64u(payload)". */
    size_t signed_len = (size_t)(strrchr(t, '.') - t);
    assert_int_equal(ed25519_sha512_verify(pub, signed_len, (const uint8_t *)t, b), 1);
    t[0] = t[0] == 'a' ? 'b' : 'a';
    assert_int_equal(ed25519_sha512_verify(pub, signed_len, (const uint8_t *)t, b), 0);
    free(t);
}

static void test_sign_compact_refuses_missing_inputs(void **state)
{
    uint8_t pub[32], priv[32];
    assert_int_equal(fx_auth_keygen(pub, priv), 0);
    char *t = (char *)"untouched";
    assert_int_equal(fx_auth_sign_compact(NULL, "h", 1, "p", 1, &t), -EINVAL);
    assert_int_equal(fx_auth_sign_compact(priv, NULL, 1, "p", 1, &t), -EINVAL);
    assert_int_equal(fx_auth_sign_compact(priv, "h", 1, NULL, 1, &t), -EINVAL);
    assert_int_equal(fx_auth_sign_compact(priv, "h", 1, "p", 1, NULL), -EINVAL);
    /* Empty parts are allowed: "..sig". */
    assert_int_equal(fx_auth_sign_compact(priv, NULL, 0, NULL, 0, &t), 0);
    assert_int_equal(t[0], '.');
    assert_int_equal(t[1], '.');
    free(t);
}

static void test_mint_writes_header_defaults_and_only_set_claims(void **state)
{
    uint8_t pub[32], priv[32];
    assert_int_equal(fx_auth_keygen(pub, priv), 0);
    const char *perms[] = {"stream.publish:stream:t1/*"};
    fx_auth_mint_claims c = {.tid = "t1", .exp = 2000, .perms = perms, .nperms = 1};
    char *t = NULL;
    assert_int_equal(fx_auth_mint(priv, "k1", &c, &t), 0);
    json_t *h = part_json(t, 0);
    assert_string_equal(json_string_value(json_object_get(h, "alg")), "EdDSA");
    assert_string_equal(json_string_value(json_object_get(h, "typ")), "JWT");
    assert_string_equal(json_string_value(json_object_get(h, "kid")), "k1");
    json_t *p = part_json(t, 1);
    assert_string_equal(json_string_value(json_object_get(p, "iss")), FX_AUTH_ISSUER_DEFAULT);
    assert_string_equal(json_string_value(json_object_get(p, "aud")), FX_AUTH_AUDIENCE_DEFAULT);
    assert_string_equal(json_string_value(json_object_get(p, "tid")), "t1");
    assert_int_equal(json_integer_value(json_object_get(p, "exp")), 2000);
    assert_null(json_object_get(p, "sub"));
    assert_null(json_object_get(p, "nbf"));
    assert_null(json_object_get(p, "iat"));
    json_t *jp = json_object_get(p, "perms");
    assert_int_equal(json_array_size(jp), 1);
    assert_string_equal(json_string_value(json_array_get(jp, 0)), perms[0]);
    json_decref(h);
    json_decref(p);
    free(t);
    /* Without a kid, with every optional claim. */
    c = (fx_auth_mint_claims){.issuer = "me",
                              .audience = "you",
                              .sub = "s",
                              .tid = "t2",
                              .exp = 9,
                              .nbf = 3,
                              .has_nbf = true,
                              .iat = 4,
                              .has_iat = true};
    assert_int_equal(fx_auth_mint(priv, NULL, &c, &t), 0);
    h = part_json(t, 0);
    assert_null(json_object_get(h, "kid"));
    p = part_json(t, 1);
    assert_string_equal(json_string_value(json_object_get(p, "iss")), "me");
    assert_string_equal(json_string_value(json_object_get(p, "aud")), "you");
    assert_string_equal(json_string_value(json_object_get(p, "sub")), "s");
    assert_int_equal(json_integer_value(json_object_get(p, "nbf")), 3);
    assert_int_equal(json_integer_value(json_object_get(p, "iat")), 4);
    assert_int_equal(json_array_size(json_object_get(p, "perms")), 0);
    json_decref(h);
    json_decref(p);
    free(t);
}

static void test_mint_refuses_missing_tid_and_bad_strings(void **state)
{
    uint8_t pub[32], priv[32];
    assert_int_equal(fx_auth_keygen(pub, priv), 0);
    char *t = NULL;
    fx_auth_mint_claims c = {.exp = 1};
    assert_int_equal(fx_auth_mint(priv, NULL, &c, &t), -EINVAL);
    c.tid = "t";
    c.nperms = 1; /* perms NULL */
    assert_int_equal(fx_auth_mint(priv, NULL, &c, &t), -EINVAL);
    const char *bad[] = {"\xff\xfe"};
    c.perms = bad;
    assert_int_equal(fx_auth_mint(priv, NULL, &c, &t), -EINVAL);
    assert_null(t);
    c.nperms = 0;
    assert_int_equal(fx_auth_mint(priv, "\xc0\x80", &c, &t), -EINVAL);
    assert_null(t);
}

static void test_minted_token_verifies_against_the_written_jwks(void **state)
{
    uint8_t pub[32], priv[32], found[32];
    assert_int_equal(fx_auth_keygen(pub, priv), 0);
    char *doc = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&doc, &len);
    assert_non_null(f);
    assert_int_equal(fx_auth_jwks_write(f, "k1", pub), 0);
    fclose(f);
    assert_int_equal(doc[len - 1], '\n');
    fx_keyset *ks = NULL;
    char why[256] = "";
    assert_int_equal(fx_auth_keyset_parse(doc, len, "mem", &ks, why, sizeof(why)), 0);
    assert_int_equal(fx_auth_keyset_count(ks), 1);
    assert_true(fx_auth_keyset_find(ks, "k1", found));
    assert_memory_equal(found, pub, 32);
    const char *perms[] = {"stream.subscribe:stream:t1/a/b"};
    fx_auth_mint_claims c = {.tid = "t1", .exp = 1000, .perms = perms, .nperms = 1};
    char *t = NULL;
    assert_int_equal(fx_auth_mint(priv, "k1", &c, &t), 0);
    fx_auth_claims out = {0};
    assert_int_equal(fx_auth_verify(ks, t, strlen(t), NULL, 500, &out, why, sizeof(why)), 0);
    assert_true(fx_auth_allows(&out, FX_AUTH_SUBSCRIBE, "t1", "a", "b"));
    assert_false(fx_auth_allows(&out, FX_AUTH_PUBLISH, "t1", "a", "b"));
    fx_auth_claims_deinit(&out);
    free(t);
    fx_auth_keyset_unref(ks);
    free(doc);
    assert_int_equal(fx_auth_jwks_write(NULL, "k", pub), -EINVAL);
}

static void test_jwks_write_reports_a_failed_write(void **state)
{
    uint8_t pub[32] = {1};
    FILE *f = fopen("/dev/full", "w");
    if (f == NULL)
        fx_test_skip("no /dev/full");
    assert_int_equal(fx_auth_jwks_write(f, NULL, pub), -EIO);
    fclose(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_keygen_gives_fresh_pairs_whose_public_key_derives),
    cmocka_unit_test(test_sign_compact_has_three_parts_and_a_valid_signature),
    cmocka_unit_test(test_sign_compact_refuses_missing_inputs),
    cmocka_unit_test(test_mint_writes_header_defaults_and_only_set_claims),
    cmocka_unit_test(test_mint_refuses_missing_tid_and_bad_strings),
    cmocka_unit_test(test_minted_token_verifies_against_the_written_jwks),
    cmocka_unit_test(test_jwks_write_reports_a_failed_write),
};

FX_TEST_MAIN(tests)
