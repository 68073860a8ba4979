/* Unit tests for src/auth (libauth): JWKS key sets and reload, compact EdDSA
 * JWT verification and its refusal reasons, permission wildcards, minting,
 * and the RFC 8037 Ed25519 known-answer vector. Single-threaded. */
/* fx-test-libs: fx_auth fx_wire fx_base */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fx_test.h"

#include "auth/auth.h"
#include "felix/error.h"

/* A fixed "now" so every expiry test is exact and independent of the clock. */
#define NOW INT64_C(1700000000)
#define WHY_LEN 256

static const char *const HDR_KID = "{\"alg\":\"EdDSA\",\"typ\":\"JWT\",\"kid\":\"demo-k1\"}";

/* The demo key of the original ([42u8; 32], kid demo-k1). */
static void demo_priv(uint8_t priv[FX_AUTH_KEY_BYTES])
{
    memset(priv, 42, FX_AUTH_KEY_BYTES);
}

/* A second fixed key, different from the demo key. */
static void other_priv(uint8_t priv[FX_AUTH_KEY_BYTES])
{
    for (unsigned i = 0; i < FX_AUTH_KEY_BYTES; i++)
        priv[i] = (uint8_t)(i * 7 + 1);
}

/* Parses the JWKS text |json| (must succeed). */
static fx_keyset *parse_jwks(const char *json)
{
    fx_keyset *ks = NULL;
    char why[WHY_LEN] = "";
    int rv = fx_auth_keyset_parse(json, strlen(json), "test.jwks", &ks, why, sizeof(why));
    if (rv != 0)
        fail_msg("jwks refused: %s", why);
    return ks;
}

/* A key set holding the public key of |priv| under |kid|, built through
 * fx_auth_jwks_write() so the writer and the parser agree. */
static fx_keyset *keyset_for(const uint8_t priv[FX_AUTH_KEY_BYTES], const char *kid)
{
    uint8_t pub[FX_AUTH_KEY_BYTES];
    fx_auth_pubkey(priv, pub);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(fx_auth_jwks_write(f, kid, pub), 0);
    fclose(f);
    fx_keyset *ks = parse_jwks(text);
    free(text);
    return ks;
}

/* Signs |hdr|.|payload| (both JSON text) with |priv|. */
/* The token helpers return a pointer obtained through the address of a local
 * (the library's out parameter). Inlined at -O3, gcc 12 mistakes the result
 * for that local's address (-Wdangling-pointer); kept out of line, it does
 * not. */
__attribute__((noinline)) static char *sign_raw(const uint8_t priv[FX_AUTH_KEY_BYTES],
                                                const char *hdr, const char *payload)
{
    char *tok = NULL;
    assert_int_equal(fx_auth_sign_compact(priv, hdr, strlen(hdr), payload, strlen(payload), &tok),
                     0);
    return tok;
}

/* A standard token for tenant t1 from the demo key, valid for 5 minutes. */
__attribute__((noinline)) static char *mint_demo(int64_t exp)
{
    static const char *const perms[] = {"stream.publish:stream:t1/*/*",
                                        "stream.subscribe:stream:t1/default/demo"};
    uint8_t priv[FX_AUTH_KEY_BYTES];
    demo_priv(priv);
    fx_auth_mint_claims c = {.sub = "alice", .tid = "t1", .exp = exp, .perms = perms, .nperms = 2};
    char *tok = NULL;
    assert_int_equal(fx_auth_mint(priv, "demo-k1", &c, &tok), 0);
    return tok;
}

/* Verifies |tok| with default policy against the demo key set and expects
 * refusal |want|; the reason text must start |why|. */
static void expect_refused(const char *tok, fx_auth_refusal want)
{
    uint8_t priv[FX_AUTH_KEY_BYTES];
    demo_priv(priv);
    fx_keyset *ks = keyset_for(priv, "demo-k1");
    fx_auth_claims c;
    char why[WHY_LEN] = "";
    int rv = fx_auth_verify(ks, tok, strlen(tok), NULL, NOW, &c, why, sizeof(why));
    assert_int_equal(rv, FX_EAUTH);
    assert_int_equal(c.refusal, want);
    const char *text = fx_auth_refusal_str(want);
    if (strncmp(why, text, strlen(text)) != 0)
        fail_msg("why \"%s\" does not start with \"%s\"", why, text);
    assert_null(c.tid);
    assert_null(c.perms);
    fx_auth_keyset_unref(ks);
}

/* Verifies |tok| against the demo key set at |now| (must succeed). */
static void expect_accepted_at(const char *tok, int64_t now, fx_auth_claims *c)
{
    uint8_t priv[FX_AUTH_KEY_BYTES];
    demo_priv(priv);
    fx_keyset *ks = keyset_for(priv, "demo-k1");
    char why[WHY_LEN] = "";
    int rv = fx_auth_verify(ks, tok, strlen(tok), NULL, now, c, why, sizeof(why));
    if (rv != 0)
        fail_msg("refused: %s", why);
    assert_int_equal(c->refusal, FX_AUTH_OK);
    fx_auth_keyset_unref(ks);
}

static void refused_payload(const char *payload, fx_auth_refusal want)
{
    uint8_t priv[FX_AUTH_KEY_BYTES];
    demo_priv(priv);
    char *tok = sign_raw(priv, HDR_KID, payload);
    expect_refused(tok, want);
    free(tok);
}

/* ---- verification --------------------------------------------------------- */

static void test_valid_token_accepted(void **state)
{
    (void)state;
    char *tok = mint_demo(NOW + 300);
    fx_auth_claims c;
    expect_accepted_at(tok, NOW, &c);
    assert_string_equal(c.tid, "t1");
    assert_string_equal(c.sub, "alice");
    assert_string_equal(c.kid, "demo-k1");
    assert_true(c.exp == NOW + 300);
    assert_false(c.has_nbf);
    assert_int_equal(c.nperms, 2);
    assert_string_equal(c.perms[0], "stream.publish:stream:t1/*/*");
    assert_string_equal(c.perms[1], "stream.subscribe:stream:t1/default/demo");
    fx_auth_claims_deinit(&c);
    assert_null(c.tid);
    free(tok);
}

static void test_audience_array_accepted(void **state)
{
    (void)state;
    uint8_t priv[FX_AUTH_KEY_BYTES];
    demo_priv(priv);
    char *tok = sign_raw(priv, HDR_KID,
                         "{\"iss\":\"felix-auth\",\"aud\":[\"x\",\"felix-broker\"],"
                         "\"tid\":\"t1\",\"exp\":1700000100}");
    fx_auth_claims c;
    expect_accepted_at(tok, NOW, &c);
    assert_int_equal(c.nperms, 0);
    fx_auth_claims_deinit(&c);
    free(tok);
}

static void test_wrong_audience_refused(void **state)
{
    (void)state;
    refused_payload("{\"iss\":\"felix-auth\",\"aud\":\"felix-cache\",\"tid\":\"t1\","
                    "\"exp\":1700000100}",
                    FX_AUTH_WRONG_AUDIENCE);
    refused_payload("{\"iss\":\"felix-auth\",\"aud\":[\"a\",\"b\"],\"tid\":\"t1\","
                    "\"exp\":1700000100}",
                    FX_AUTH_WRONG_AUDIENCE);
    refused_payload("{\"iss\":\"felix-auth\",\"tid\":\"t1\",\"exp\":1700000100}",
                    FX_AUTH_WRONG_AUDIENCE);
}

static void test_wrong_issuer_refused(void **state)
{
    (void)state;
    refused_payload("{\"iss\":\"evil-auth\",\"aud\":\"felix-broker\",\"tid\":\"t1\","
                    "\"exp\":1700000100}",
                    FX_AUTH_WRONG_ISSUER);
    refused_payload("{\"aud\":\"felix-broker\",\"tid\":\"t1\",\"exp\":1700000100}",
                    FX_AUTH_WRONG_ISSUER);
}

static void test_policy_overrides_issuer_and_audience(void **state)
{
    (void)state;
    uint8_t priv[FX_AUTH_KEY_BYTES];
    demo_priv(priv);
    fx_keyset *ks = keyset_for(priv, "demo-k1");
    char *tok = sign_raw(priv, HDR_KID,
                         "{\"iss\":\"corp\",\"aud\":\"edge\",\"tid\":\"t1\",\"exp\":1700000100}");
    fx_auth_policy p = FX_AUTH_POLICY_INIT;
    fx_auth_claims c;
    assert_int_equal(fx_auth_verify(ks, tok, strlen(tok), &p, NOW, &c, NULL, 0), FX_EAUTH);
    p.issuer = "corp";
    p.audience = "edge";
    assert_int_equal(fx_auth_verify(ks, tok, strlen(tok), &p, NOW, &c, NULL, 0), 0);
    fx_auth_claims_deinit(&c);
    p.leeway_s = -1;
    assert_int_equal(fx_auth_verify(ks, tok, strlen(tok), &p, NOW, &c, NULL, 0), -EINVAL);
    free(tok);
    fx_auth_keyset_unref(ks);
}

static void test_expired_refused_beyond_leeway(void **state)
{
    (void)state;
    char *tok = mint_demo(NOW - 61);
    expect_refused(tok, FX_AUTH_EXPIRED);
    free(tok);
    tok = mint_demo(NOW - 100000);
    expect_refused(tok, FX_AUTH_EXPIRED);
    free(tok);
}

static void test_expired_within_leeway_accepted(void **state)
{
    (void)state;
    /* now == exp + 60: the last accepted second. */
    char *tok = mint_demo(NOW - 60);
    fx_auth_claims c;
    expect_accepted_at(tok, NOW, &c);
    fx_auth_claims_deinit(&c);
    free(tok);
    /* A far-future exp must not overflow the leeway sum. */
    tok = mint_demo(INT64_MAX);
    expect_accepted_at(tok, NOW, &c);
    fx_auth_claims_deinit(&c);
    free(tok);
}

static void test_not_yet_valid_refused(void **state)
{
    (void)state;
    uint8_t priv[FX_AUTH_KEY_BYTES];
    demo_priv(priv);
    fx_auth_mint_claims m = {.tid = "t1", .exp = NOW + 600, .nbf = NOW + 61, .has_nbf = true};
    char *tok = NULL;
    assert_int_equal(fx_auth_mint(priv, "demo-k1", &m, &tok), 0);
    expect_refused(tok, FX_AUTH_NOT_YET_VALID);
    free(tok);
    /* nbf - 60 == now: accepted. */
    m.nbf = NOW + 60;
    assert_int_equal(fx_auth_mint(priv, "demo-k1", &m, &tok), 0);
    fx_auth_claims c;
    expect_accepted_at(tok, NOW, &c);
    assert_true(c.has_nbf);
    assert_true(c.nbf == NOW + 60);
    fx_auth_claims_deinit(&c);
    free(tok);
}

static void test_wrong_tid_claim_reported(void **state)
{
    (void)state;
    char *tok = mint_demo(NOW + 300);
    fx_auth_claims c;
    expect_accepted_at(tok, NOW, &c);
    assert_string_equal(c.tid, "t1");
    char why[WHY_LEN] = "";
    assert_int_equal(fx_auth_check_tenant(&c, "t2", why, sizeof(why)), FX_EAUTH);
    assert_ptr_equal(strstr(why, "wrong tenant"), why);
    assert_non_null(strstr(why, "\"t1\""));
    assert_int_equal(fx_auth_check_tenant(&c, "t1", why, sizeof(why)), 0);
    assert_false(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t2", "default", "demo"));
    assert_true(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t1", "default", "demo"));
    fx_auth_claims_deinit(&c);
    free(tok);
}

static void test_missing_tid_refused(void **state)
{
    (void)state;
    refused_payload("{\"iss\":\"felix-auth\",\"aud\":\"felix-broker\",\"exp\":1700000100}",
                    FX_AUTH_MISSING_TID);
    refused_payload("{\"iss\":\"felix-auth\",\"aud\":\"felix-broker\",\"tid\":\"\","
                    "\"exp\":1700000100}",
                    FX_AUTH_MISSING_TID);
}

static int b64url_index(char ch)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const char *p = strchr(alphabet, ch);
    assert_non_null(p);
    return (int)(p - alphabet);
}

static void test_bad_signature_refused(void **state)
{
    (void)state;
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    char *tok = mint_demo(NOW + 300);
    /* The signature's first character carries the top six bits of its first
     * byte: toggling the low bit of its value flips exactly one signature bit. */
    char *sig = strrchr(tok, '.') + 1;
    sig[0] = alphabet[b64url_index(sig[0]) ^ 1];
    expect_refused(tok, FX_AUTH_BAD_SIGNATURE);
    free(tok);

    /* A token signed by another key under the same kid. */
    uint8_t other[FX_AUTH_KEY_BYTES];
    other_priv(other);
    tok = sign_raw(other, HDR_KID,
                   "{\"iss\":\"felix-auth\",\"aud\":\"felix-broker\",\"tid\":\"t1\","
                   "\"exp\":1700000100}");
    expect_refused(tok, FX_AUTH_BAD_SIGNATURE);
    free(tok);
}

static void test_alg_none_refused(void **state)
{
    (void)state;
    uint8_t priv[FX_AUTH_KEY_BYTES];
    demo_priv(priv);
    const char *payload = "{\"iss\":\"felix-auth\",\"aud\":\"felix-broker\",\"tid\":\"t1\","
                          "\"exp\":1700000100}";
    /* The classic unsigned token: empty signature part. */
    char *tok = sign_raw(priv, "{\"alg\":\"none\",\"kid\":\"demo-k1\"}", payload);
    strrchr(tok, '.')[1] = '\0';
    expect_refused(tok, FX_AUTH_BAD_ALG);
    free(tok);
    /* Even a valid Ed25519 signature does not save a header that says none. */
    tok = sign_raw(priv, "{\"alg\":\"none\",\"kid\":\"demo-k1\"}", payload);
    expect_refused(tok, FX_AUTH_BAD_ALG);
    free(tok);
}

static void test_alg_hs256_refused(void **state)
{
    (void)state;
    uint8_t priv[FX_AUTH_KEY_BYTES];
    demo_priv(priv);
    char *tok = sign_raw(priv, "{\"alg\":\"HS256\",\"typ\":\"JWT\",\"kid\":\"demo-k1\"}",
                         "{\"iss\":\"felix-auth\",\"aud\":\"felix-broker\",\"tid\":\"t1\","
                         "\"exp\":1700000100}");
    expect_refused(tok, FX_AUTH_BAD_ALG);
    free(tok);
    /* alg names are case-sensitive (RFC 7515 §4.1.1). */
    tok = sign_raw(priv, "{\"alg\":\"eddsa\",\"kid\":\"demo-k1\"}",
                   "{\"iss\":\"felix-auth\",\"aud\":\"felix-broker\",\"tid\":\"t1\","
                   "\"exp\":1700000100}");
    expect_refused(tok, FX_AUTH_BAD_ALG);
    free(tok);
}

static void test_unknown_kid_refused(void **state)
{
    (void)state;
    uint8_t priv[FX_AUTH_KEY_BYTES];
    demo_priv(priv);
    char *tok = sign_raw(priv, "{\"alg\":\"EdDSA\",\"kid\":\"demo-k2\"}",
                         "{\"iss\":\"felix-auth\",\"aud\":\"felix-broker\",\"tid\":\"t1\","
                         "\"exp\":1700000100}");
    expect_refused(tok, FX_AUTH_UNKNOWN_KID);
    free(tok);
}

static void test_absent_kid_uses_single_key_refused_with_several(void **state)
{
    (void)state;
    uint8_t priv[FX_AUTH_KEY_BYTES], other[FX_AUTH_KEY_BYTES];
    uint8_t pub[FX_AUTH_KEY_BYTES], opub[FX_AUTH_KEY_BYTES];
    demo_priv(priv);
    other_priv(other);
    fx_auth_pubkey(priv, pub);
    fx_auth_pubkey(other, opub);
    char *tok = sign_raw(priv, "{\"alg\":\"EdDSA\"}",
                         "{\"iss\":\"felix-auth\",\"aud\":\"felix-broker\",\"tid\":\"t1\","
                         "\"exp\":1700000100}");
    /* One key: a token without kid uses it. */
    fx_keyset *one = keyset_for(priv, "demo-k1");
    fx_auth_claims c;
    assert_int_equal(fx_auth_verify(one, tok, strlen(tok), NULL, NOW, &c, NULL, 0), 0);
    assert_null(c.kid);
    fx_auth_claims_deinit(&c);
    fx_auth_keyset_unref(one);
    /* Two keys: refused rather than guessed. */
    char *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0;
    FILE *fa = open_memstream(&a, &alen), *fb = open_memstream(&b, &blen);
    assert_int_equal(fx_auth_jwks_write(fa, "k1", pub), 0);
    assert_int_equal(fx_auth_jwks_write(fb, "k2", opub), 0);
    fclose(fa);
    fclose(fb);
    /* Splice the second document's key into the first: {"keys":[A,B]}. */
    char two[2048];
    const char *ka = strchr(a, '[') + 1, *kb = strchr(b, '[') + 1;
    int n = snprintf(two, sizeof(two), "{\"keys\":[%.*s,%.*s]}", (int)(strrchr(a, ']') - ka), ka,
                     (int)(strrchr(b, ']') - kb), kb);
    assert_true(n > 0 && (size_t)n < sizeof(two));
    fx_keyset *ks = parse_jwks(two);
    assert_int_equal(fx_auth_keyset_count(ks), 2);
    char why[WHY_LEN] = "";
    assert_int_equal(fx_auth_verify(ks, tok, strlen(tok), NULL, NOW, &c, why, sizeof(why)),
                     FX_EAUTH);
    assert_int_equal(c.refusal, FX_AUTH_MISSING_KID);
    assert_ptr_equal(strstr(why, "missing key id"), why);
    fx_auth_keyset_unref(ks);
    free(a);
    free(b);
    free(tok);
}

static void test_oversized_token_refused(void **state)
{
    (void)state;
    /* 8 KiB + 1 of junk: refused for its size, not its content. */
    size_t n = FX_AUTH_TOKEN_MAX_DEFAULT + 1;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, '!', n);
    big[n] = '\0';
    expect_refused(big, FX_AUTH_TOO_LARGE);
    free(big);
    /* A valid token over a smaller configured limit is refused too. */
    uint8_t priv[FX_AUTH_KEY_BYTES];
    demo_priv(priv);
    fx_keyset *ks = keyset_for(priv, "demo-k1");
    char *tok = mint_demo(NOW + 300);
    fx_auth_policy p = FX_AUTH_POLICY_INIT;
    p.max_token_bytes = strlen(tok) - 1;
    fx_auth_claims c;
    assert_int_equal(fx_auth_verify(ks, tok, strlen(tok), &p, NOW, &c, NULL, 0), FX_EAUTH);
    assert_int_equal(c.refusal, FX_AUTH_TOO_LARGE);
    p.max_token_bytes = strlen(tok);
    assert_int_equal(fx_auth_verify(ks, tok, strlen(tok), &p, NOW, &c, NULL, 0), 0);
    fx_auth_claims_deinit(&c);
    free(tok);
    fx_auth_keyset_unref(ks);
}

static void test_malformed_base64_refused(void **state)
{
    (void)state;
    char *tok = mint_demo(NOW + 300);
    size_t len = strlen(tok);
    char *bad = malloc(len + 3);
    assert_non_null(bad);
    char *p1 = strchr(tok, '.') + 1;
    size_t at = (size_t)(p1 - tok) + 3; /* a character inside the payload */
    const char subst[] = {'+', '/', '=', ' ', '\n', '\0'};
    for (size_t i = 0; i < sizeof(subst); i++) {
        memcpy(bad, tok, len + 1);
        bad[at] = subst[i];
        uint8_t priv[FX_AUTH_KEY_BYTES];
        demo_priv(priv);
        fx_keyset *ks = keyset_for(priv, "demo-k1");
        fx_auth_claims c;
        assert_int_equal(fx_auth_verify(ks, bad, len, NULL, NOW, &c, NULL, 0), FX_EAUTH);
        assert_int_equal(c.refusal, FX_AUTH_MALFORMED);
        fx_auth_keyset_unref(ks);
    }
    /* Padding appended to the signature. */
    memcpy(bad, tok, len);
    memcpy(bad + len, "==", 3);
    expect_refused(bad, FX_AUTH_MALFORMED);
    /* Two parts, four parts, empty. */
    memcpy(bad, tok, len + 1);
    *strrchr(bad, '.') = '\0';
    expect_refused(bad, FX_AUTH_MALFORMED);
    memcpy(bad, tok, len);
    memcpy(bad + len, ".A", 3);
    expect_refused(bad, FX_AUTH_MALFORMED);
    expect_refused("", FX_AUTH_MALFORMED);
    expect_refused("..", FX_AUTH_MALFORMED);
    free(bad);
    free(tok);
}

static void test_header_not_json_refused(void **state)
{
    (void)state;
    uint8_t priv[FX_AUTH_KEY_BYTES];
    demo_priv(priv);
    const char *pl = "{\"iss\":\"felix-auth\",\"aud\":\"felix-broker\",\"tid\":\"t1\","
                     "\"exp\":1700000100}";
    char *tok = sign_raw(priv, "not json", pl);
    expect_refused(tok, FX_AUTH_MALFORMED);
    free(tok);
    tok = sign_raw(priv, "{\"alg\":\"EdDSA\",\"alg\":\"EdDSA\",\"kid\":\"demo-k1\"}", pl);
    expect_refused(tok, FX_AUTH_MALFORMED); /* duplicate member */
    free(tok);
    tok = sign_raw(priv, "{\"alg\":\"EdDSA\",\"kid\":\"demo-k1\",\"crit\":[\"exp\"]}", pl);
    expect_refused(tok, FX_AUTH_MALFORMED);
    free(tok);
    tok = sign_raw(priv, HDR_KID, "[1,2]");
    expect_refused(tok, FX_AUTH_MALFORMED);
    free(tok);
}

static void test_missing_exp_refused(void **state)
{
    (void)state;
    refused_payload("{\"iss\":\"felix-auth\",\"aud\":\"felix-broker\",\"tid\":\"t1\"}",
                    FX_AUTH_MISSING_EXP);
    refused_payload("{\"iss\":\"felix-auth\",\"aud\":\"felix-broker\",\"tid\":\"t1\","
                    "\"exp\":\"1700000100\"}",
                    FX_AUTH_MALFORMED);
}

static void test_invalid_perms_refused(void **state)
{
    (void)state;
    refused_payload("{\"iss\":\"felix-auth\",\"aud\":\"felix-broker\",\"tid\":\"t1\","
                    "\"exp\":1700000100,\"perms\":\"stream.publish:stream:*\"}",
                    FX_AUTH_BAD_PERMS);
    refused_payload("{\"iss\":\"felix-auth\",\"aud\":\"felix-broker\",\"tid\":\"t1\","
                    "\"exp\":1700000100,\"perms\":[\"stream.publish:stream:*\",7]}",
                    FX_AUTH_BAD_PERMS);
    refused_payload("{\"iss\":\"felix-auth\",\"aud\":\"felix-broker\",\"tid\":\"t1\","
                    "\"exp\":1700000100,\"perms\":[\"stream.write:stream:*\"]}",
                    FX_AUTH_BAD_PERMS);
}

static void test_refusal_reasons_are_distinct(void **state)
{
    (void)state;
    for (int i = 0; i < FX_AUTH_REFUSAL_COUNT; i++) {
        assert_string_not_equal(fx_auth_refusal_str((fx_auth_refusal)i), "?");
        assert_string_not_equal(fx_auth_refusal_label((fx_auth_refusal)i), "?");
        for (int j = 0; j < i; j++) {
            assert_string_not_equal(fx_auth_refusal_str((fx_auth_refusal)i),
                                    fx_auth_refusal_str((fx_auth_refusal)j));
            assert_string_not_equal(fx_auth_refusal_label((fx_auth_refusal)i),
                                    fx_auth_refusal_label((fx_auth_refusal)j));
        }
    }
    assert_string_equal(fx_auth_refusal_str(FX_AUTH_REFUSAL_COUNT), "?");
}

/* ---- key sets ------------------------------------------------------------ */

/* Writes |text| to a new temporary file; returns its path (caller unlinks
 * and frees). */
static char *write_temp(const char *text)
{
    char *path = strdup("/tmp/fx-test-auth-XXXXXX");
    assert_non_null(path);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
    return path;
}

static const char *const RSA_AND_EC =
    "{\"keys\":[{\"kty\":\"RSA\",\"kid\":\"r1\",\"n\":\"AQAB\",\"e\":\"AQAB\"},"
    "{\"kty\":\"EC\",\"crv\":\"P-256\",\"kid\":\"e1\",\"x\":\"AA\",\"y\":\"AA\"},"
    "{\"kty\":\"OKP\",\"crv\":\"X25519\",\"kid\":\"x1\","
    "\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"}]}";

static void test_jwks_without_ed25519_key_refused(void **state)
{
    (void)state;
    char *path = write_temp(RSA_AND_EC);
    fx_keyset *ks = NULL;
    char why[WHY_LEN] = "";
    int rv = fx_auth_keyset_load(path, &ks, why, sizeof(why));
    bool names_file = strstr(why, path) != NULL;
    unlink(path); /* before any assertion, so a failure leaves no file behind */
    free(path);
    assert_int_equal(rv, FX_ECONFIG);
    assert_null(ks);
    assert_true(names_file);
    assert_non_null(strstr(why, "no usable Ed25519 key"));
    assert_non_null(strstr(why, "3 keys of other types skipped"));

    /* Neither is an empty set, nor a document that is not a JWKS. */
    assert_int_equal(fx_auth_keyset_parse("{\"keys\":[]}", 11, "e.jwks", &ks, why, sizeof(why)),
                     FX_ECONFIG);
    assert_non_null(strstr(why, "e.jwks"));
    assert_int_equal(fx_auth_keyset_parse("[]", 2, "a.jwks", &ks, why, sizeof(why)), FX_ECONFIG);
    assert_non_null(strstr(why, "not a JWKS"));
    assert_int_equal(fx_auth_keyset_load("/nonexistent/fx.jwks", &ks, why, sizeof(why)), -ENOENT);
    assert_non_null(strstr(why, "/nonexistent/fx.jwks"));
}

static void test_jwks_skips_other_key_types_with_count(void **state)
{
    (void)state;
    fx_keyset *ks =
        parse_jwks("{\"keys\":[{\"kty\":\"RSA\",\"kid\":\"r1\",\"n\":\"AQAB\",\"e\":\"AQAB\"},"
                   "{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"enc\",\"use\":\"enc\","
                   "\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"},"
                   "{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"k1\","
                   "\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"}]}");
    assert_int_equal(fx_auth_keyset_count(ks), 1);
    assert_int_equal(fx_auth_keyset_skipped(ks), 2);
    uint8_t pub[FX_AUTH_KEY_BYTES];
    assert_true(fx_auth_keyset_find(ks, "k1", pub));
    assert_int_equal(pub[0], 0xd7);
    assert_false(fx_auth_keyset_find(ks, "enc", pub));
    fx_auth_keyset_unref(ks);
}

static void test_jwks_bad_ed25519_key_refused(void **state)
{
    (void)state;
    const char *const bad[] = {
        /* x too short */
        "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"11qYAYKx\"}]}",
        /* x missing */
        "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"a\"}]}",
        /* duplicate kid */
        "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"a\","
        "\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"},"
        "{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"a\","
        "\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"}]}",
        /* kid not a string (one literal split over two lines) */
        ("{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":5,"
         "\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"}]}"),
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fx_keyset *ks = NULL;
        char why[WHY_LEN] = "";
        assert_int_equal(
            fx_auth_keyset_parse(bad[i], strlen(bad[i]), "bad.jwks", &ks, why, sizeof(why)),
            FX_ECONFIG);
        assert_null(ks);
        assert_non_null(strstr(why, "bad.jwks: key "));
    }
}

static void test_jwks_reload_keeps_old_set_alive_for_holders(void **state)
{
    (void)state;
    uint8_t priv_a[FX_AUTH_KEY_BYTES], priv_b[FX_AUTH_KEY_BYTES];
    demo_priv(priv_a);
    other_priv(priv_b);
    fx_auth_keyslot slot;
    assert_int_equal(fx_auth_keyslot_init(&slot, keyset_for(priv_a, "demo-k1")), 0);

    /* A verification in progress holds the old set... */
    fx_keyset *held = fx_auth_keyslot_get(&slot);
    assert_non_null(held);
    /* ...while SIGHUP installs a rotated set (new key under a new kid). */
    fx_auth_keyslot_swap(&slot, keyset_for(priv_b, "k2"));

    char *tok_a = mint_demo(NOW + 300);
    fx_auth_claims c;
    assert_int_equal(fx_auth_verify(held, tok_a, strlen(tok_a), NULL, NOW, &c, NULL, 0), 0);
    fx_auth_claims_deinit(&c);
    fx_auth_keyset_unref(held); /* the old set is freed here (ASan/LSan check it) */

    fx_keyset *cur = fx_auth_keyslot_get(&slot);
    assert_int_equal(fx_auth_verify(cur, tok_a, strlen(tok_a), NULL, NOW, &c, NULL, 0), FX_EAUTH);
    assert_int_equal(c.refusal, FX_AUTH_UNKNOWN_KID);
    fx_auth_mint_claims m = {.tid = "t1", .exp = NOW + 300};
    char *tok_b = NULL;
    assert_int_equal(fx_auth_mint(priv_b, "k2", &m, &tok_b), 0);
    assert_int_equal(fx_auth_verify(cur, tok_b, strlen(tok_b), NULL, NOW, &c, NULL, 0), 0);
    fx_auth_claims_deinit(&c);
    fx_auth_keyset_unref(cur);

    /* An emptied slot refuses with "no keys loaded". */
    fx_auth_keyslot_swap(&slot, NULL);
    assert_null(fx_auth_keyslot_get(&slot));
    assert_int_equal(fx_auth_verify(NULL, tok_b, strlen(tok_b), NULL, NOW, &c, NULL, 0), FX_EAUTH);
    assert_int_equal(c.refusal, FX_AUTH_NO_KEYS);
    fx_auth_keyslot_deinit(&slot);
    free(tok_a);
    free(tok_b);
}

/* ---- permissions ----------------------------------------------------------- */

static fx_auth_claims claims_with(const char *tid, char **perms, size_t n)
{
    fx_auth_claims c = {.tid = (char *)tid, .perms = perms, .nperms = n};
    return c;
}

static void test_perms_wildcards_match(void **state)
{
    (void)state;
    char *p1[] = {"stream.publish:stream:t1/*/*"};
    fx_auth_claims c = claims_with("t1", p1, 1);
    assert_true(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t1", "default", "demo"));
    assert_true(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t1", "a", "b"));
    assert_false(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t2", "default", "demo"));
    /* A publish perm does not allow subscribe. */
    assert_false(fx_auth_allows(&c, FX_AUTH_SUBSCRIBE, "t1", "default", "demo"));

    /* Even with a matching pattern, the tenant must be the token's. */
    char *p2[] = {"stream.publish:stream:*"};
    c = claims_with("t1", p2, 1);
    assert_true(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t1", "x", "y"));
    assert_false(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t2", "x", "y"));

    /* Exact perms match only themselves. */
    char *p3[] = {"stream.subscribe:stream:t1/default/demo"};
    c = claims_with("t1", p3, 1);
    assert_true(fx_auth_allows(&c, FX_AUTH_SUBSCRIBE, "t1", "default", "demo"));
    assert_false(fx_auth_allows(&c, FX_AUTH_SUBSCRIBE, "t1", "default", "demo2"));
    assert_false(fx_auth_allows(&c, FX_AUTH_SUBSCRIBE, "t1", "default", "dem"));
    assert_false(fx_auth_allows(&c, FX_AUTH_SUBSCRIBE, "t1", "Default", "demo"));
    assert_false(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t1", "default", "demo"));
}

static void test_perms_star_matches_any_bytes(void **state)
{
    (void)state;
    /* As in the original matcher, '*' is a glob over the whole resource:
     * it matches inside a segment and may span '/'. */
    char *p1[] = {"stream.publish:stream:t1/default/orders.*"};
    fx_auth_claims c = claims_with("t1", p1, 1);
    assert_true(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t1", "default", "orders.v2"));
    assert_true(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t1", "default", "orders."));
    assert_false(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t1", "default", "orders"));

    char *p2[] = {"stream.publish:stream:t1/*"};
    c = claims_with("t1", p2, 1);
    assert_true(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t1", "ns", "s"));

    char *p3[] = {"stream.publish:stream:t1/*/a*b*c"};
    c = claims_with("t1", p3, 1);
    assert_true(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t1", "n", "abc"));
    assert_true(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t1", "n", "aXbYbZc"));
    assert_false(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t1", "n", "abcd"));
    assert_false(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t1", "n", "acb"));

    /* "t1*" is a prefix pattern: it covers tenant t10 too (any bytes). */
    char *p4[] = {"stream.subscribe:stream:t1*/*/*"};
    c = claims_with("t10", p4, 1);
    assert_true(fx_auth_allows(&c, FX_AUTH_SUBSCRIBE, "t10", "n", "s"));

    /* Cache perms never grant stream actions; several perms are ORed. */
    char *p5[] = {"cache.read:cache:t1/*/*", "stream.subscribe:stream:t1/*/x"};
    c = claims_with("t1", p5, 2);
    assert_false(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t1", "n", "x"));
    assert_true(fx_auth_allows(&c, FX_AUTH_SUBSCRIBE, "t1", "n", "x"));
    assert_false(fx_auth_allows(&c, FX_AUTH_SUBSCRIBE, "t1", "n", "y"));

    /* No perms: nothing is allowed; NULL arguments deny. */
    c = claims_with("t1", NULL, 0);
    assert_false(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t1", "n", "x"));
    assert_false(fx_auth_allows(NULL, FX_AUTH_PUBLISH, "t1", "n", "x"));
}

/* ---- minting --------------------------------------------------------------- */

static void test_mint_then_verify_round_trip(void **state)
{
    (void)state;
    uint8_t pub[FX_AUTH_KEY_BYTES], priv[FX_AUTH_KEY_BYTES], pub2[FX_AUTH_KEY_BYTES];
    assert_int_equal(fx_auth_keygen(pub, priv), 0);
    fx_auth_pubkey(priv, pub2);
    assert_memory_equal(pub, pub2, FX_AUTH_KEY_BYTES);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(fx_auth_jwks_write(f, "dev-1", pub), 0);
    fclose(f);
    fx_keyset *ks = parse_jwks(text);
    free(text);

    static const char *const perms[] = {"stream.publish:stream:t9/*/*",
                                        "stream.subscribe:stream:t9/ns/s"};
    fx_auth_mint_claims m = {.sub = "bob",
                             .tid = "t9",
                             .iat = NOW,
                             .has_iat = true,
                             .nbf = NOW - 5,
                             .has_nbf = true,
                             .exp = NOW + 3600,
                             .perms = perms,
                             .nperms = 2};
    char *tok = NULL;
    assert_int_equal(fx_auth_mint(priv, "dev-1", &m, &tok), 0);
    fx_auth_claims c;
    char why[WHY_LEN] = "";
    int rv = fx_auth_verify(ks, tok, strlen(tok), NULL, NOW, &c, why, sizeof(why));
    if (rv != 0)
        fail_msg("refused: %s", why);
    assert_string_equal(c.tid, "t9");
    assert_string_equal(c.sub, "bob");
    assert_string_equal(c.kid, "dev-1");
    assert_true(c.has_iat && c.iat == NOW);
    assert_true(c.has_nbf && c.nbf == NOW - 5);
    assert_true(c.exp == NOW + 3600);
    assert_int_equal(c.nperms, 2);
    assert_true(fx_auth_allows(&c, FX_AUTH_PUBLISH, "t9", "any", "thing"));
    assert_true(fx_auth_allows(&c, FX_AUTH_SUBSCRIBE, "t9", "ns", "s"));
    assert_false(fx_auth_allows(&c, FX_AUTH_SUBSCRIBE, "t9", "ns", "t"));
    fx_auth_claims_deinit(&c);

    /* The header is exactly {"alg":"EdDSA","typ":"JWT","kid":"dev-1"}. */
    assert_int_equal(strncmp(tok, "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCIsImtpZCI6ImRldi0xIn0.", 56),
                     0);
    assert_int_equal(fx_auth_mint(priv, NULL, &(fx_auth_mint_claims){.exp = 1}, &text), -EINVAL);
    free(tok);
    fx_auth_keyset_unref(ks);
}

/* RFC 8037 Appendix A.1 (key) and A.4 (signature), typed in from the RFC. */
static const char RFC8037_D[] = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
static const char RFC8037_X_HEX[] =
    "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
static const char RFC8037_JWKS[] = "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\","
                                   "\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"}]}";
static const char RFC8037_JWS[] =
    "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc."
    "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg";

static void hex_to_bytes(const char *hex, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

static void test_known_answer_vector(void **state)
{
    (void)state;
    uint8_t d[FX_AUTH_KEY_BYTES], x[FX_AUTH_KEY_BYTES], pub[FX_AUTH_KEY_BYTES];
    hex_to_bytes(RFC8037_D, d, sizeof(d));
    hex_to_bytes(RFC8037_X_HEX, x, sizeof(x));
    fx_auth_pubkey(d, pub);
    assert_memory_equal(pub, x, FX_AUTH_KEY_BYTES);

    /* Signing the A.4 input reproduces the RFC's JWS byte for byte. */
    const char *hdr = "{\"alg\":\"EdDSA\"}", *msg = "Example of Ed25519 signing";
    char *tok = NULL;
    assert_int_equal(fx_auth_sign_compact(d, hdr, strlen(hdr), msg, strlen(msg), &tok), 0);
    assert_string_equal(tok, RFC8037_JWS);
    free(tok);

    /* The verification path accepts the RFC's JWS with the JWKS "x". */
    fx_keyset *ks = parse_jwks(RFC8037_JWKS);
    uint8_t *payload = NULL;
    size_t plen = 0;
    fx_auth_refusal r = FX_AUTH_REFUSAL_COUNT;
    char why[WHY_LEN] = "";
    int rv = fx_auth_jws_verify(ks, RFC8037_JWS, strlen(RFC8037_JWS), 0, &payload, &plen, &r, why,
                                sizeof(why));
    if (rv != 0)
        fail_msg("RFC 8037 A.5 vector refused: %s", why);
    assert_int_equal(r, FX_AUTH_OK);
    assert_int_equal(plen, strlen(msg));
    assert_memory_equal(payload, msg, plen);
    free(payload);

    /* One flipped bit in the signature's last byte is refused. */
    char flipped[sizeof(RFC8037_JWS)];
    memcpy(flipped, RFC8037_JWS, sizeof(flipped));
    flipped[sizeof(flipped) - 3] = 'B'; /* 'A' (0) -> 'B' (1): one bit */
    assert_int_equal(
        fx_auth_jws_verify(ks, flipped, strlen(flipped), 0, &payload, &plen, &r, why, sizeof(why)),
        FX_EAUTH);
    assert_int_equal(r, FX_AUTH_BAD_SIGNATURE);
    assert_null(payload);

    /* As a JWT it passes the signature and fails only on its non-JSON payload. */
    fx_auth_claims c;
    assert_int_equal(
        fx_auth_verify(ks, RFC8037_JWS, strlen(RFC8037_JWS), NULL, NOW, &c, why, sizeof(why)),
        FX_EAUTH);
    assert_int_equal(c.refusal, FX_AUTH_MALFORMED);
    assert_non_null(strstr(why, "payload is not a JSON object"));
    fx_auth_keyset_unref(ks);
}

static void test_group_actions_are_granted_by_their_own_perm_or_the_stream_one(void **state)
{
    (void)state;
    char *sub[] = {"stream.subscribe:stream:t1/default/*"};
    fx_auth_claims c = claims_with("t1", sub, 1);
    assert_true(fx_auth_allows(&c, FX_AUTH_GROUP_CONSUME, "t1", "default", "jobs"));
    assert_false(fx_auth_allows(&c, FX_AUTH_GROUP_MANAGE, "t1", "default", "jobs"));
    char *gc[] = {"group.consume:stream:t1/default/jobs"};
    c = claims_with("t1", gc, 1);
    assert_true(fx_auth_allows(&c, FX_AUTH_GROUP_CONSUME, "t1", "default", "jobs"));
    assert_false(fx_auth_allows(&c, FX_AUTH_GROUP_CONSUME, "t1", "default", "other"));
    assert_false(fx_auth_allows(&c, FX_AUTH_SUBSCRIBE, "t1", "default", "jobs"));
    assert_false(fx_auth_allows(&c, FX_AUTH_GROUP_MANAGE, "t1", "default", "jobs"));
    char *mg[] = {"stream.manage:stream:t1/*/*", "group.manage:stream:t1/x/y"};
    c = claims_with("t1", mg, 1);
    assert_true(fx_auth_allows(&c, FX_AUTH_GROUP_MANAGE, "t1", "default", "jobs"));
    assert_false(fx_auth_allows(&c, FX_AUTH_GROUP_CONSUME, "t1", "default", "jobs"));
    c = claims_with("t1", mg + 1, 1);
    assert_true(fx_auth_allows(&c, FX_AUTH_GROUP_MANAGE, "t1", "x", "y"));
    assert_false(fx_auth_allows(&c, FX_AUTH_GROUP_MANAGE, "t2", "x", "y"));
}

static void test_cache_actions_match_cache_resources_only(void **state)
{
    (void)state;
    char *rw[] = {"cache.read:cache:t1/*/*", "cache.write:cache:t1/default/primary"};
    fx_auth_claims c = claims_with("t1", rw, 2);
    assert_true(fx_auth_allows(&c, FX_AUTH_CACHE_READ, "t1", "default", "primary"));
    assert_true(fx_auth_allows(&c, FX_AUTH_CACHE_READ, "t1", "ns", "other"));
    assert_true(fx_auth_allows(&c, FX_AUTH_CACHE_WRITE, "t1", "default", "primary"));
    assert_false(fx_auth_allows(&c, FX_AUTH_CACHE_WRITE, "t1", "default", "other"));
    assert_false(fx_auth_allows(&c, FX_AUTH_CACHE_READ, "t2", "default", "primary"));
    /* A cache perm names no stream, and a stream perm no cache. */
    assert_false(fx_auth_allows(&c, FX_AUTH_SUBSCRIBE, "t1", "default", "primary"));
    char *st[] = {"stream.publish:stream:t1/*/*", "stream.subscribe:*",
                  "cache.read:stream:t1/*/*"};
    c = claims_with("t1", st, 3);
    assert_false(fx_auth_allows(&c, FX_AUTH_CACHE_WRITE, "t1", "default", "primary"));
    assert_false(fx_auth_allows(&c, FX_AUTH_CACHE_READ, "t1", "default", "primary"));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_cache_actions_match_cache_resources_only),
    cmocka_unit_test(test_group_actions_are_granted_by_their_own_perm_or_the_stream_one),
    cmocka_unit_test(test_valid_token_accepted),
    cmocka_unit_test(test_audience_array_accepted),
    cmocka_unit_test(test_wrong_audience_refused),
    cmocka_unit_test(test_wrong_issuer_refused),
    cmocka_unit_test(test_policy_overrides_issuer_and_audience),
    cmocka_unit_test(test_expired_refused_beyond_leeway),
    cmocka_unit_test(test_expired_within_leeway_accepted),
    cmocka_unit_test(test_not_yet_valid_refused),
    cmocka_unit_test(test_wrong_tid_claim_reported),
    cmocka_unit_test(test_missing_tid_refused),
    cmocka_unit_test(test_bad_signature_refused),
    cmocka_unit_test(test_alg_none_refused),
    cmocka_unit_test(test_alg_hs256_refused),
    cmocka_unit_test(test_unknown_kid_refused),
    cmocka_unit_test(test_absent_kid_uses_single_key_refused_with_several),
    cmocka_unit_test(test_oversized_token_refused),
    cmocka_unit_test(test_malformed_base64_refused),
    cmocka_unit_test(test_header_not_json_refused),
    cmocka_unit_test(test_missing_exp_refused),
    cmocka_unit_test(test_invalid_perms_refused),
    cmocka_unit_test(test_refusal_reasons_are_distinct),
    cmocka_unit_test(test_jwks_without_ed25519_key_refused),
    cmocka_unit_test(test_jwks_skips_other_key_types_with_count),
    cmocka_unit_test(test_jwks_bad_ed25519_key_refused),
    cmocka_unit_test(test_jwks_reload_keeps_old_set_alive_for_holders),
    cmocka_unit_test(test_perms_wildcards_match),
    cmocka_unit_test(test_perms_star_matches_any_bytes),
    cmocka_unit_test(test_mint_then_verify_round_trip),
    cmocka_unit_test(test_known_answer_vector),
};

FX_TEST_MAIN(tests)
