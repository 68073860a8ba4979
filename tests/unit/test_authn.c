/* Unit tests for authn.c: the broker's JWT authenticator over a JWKS file
 * (written here with freshly minted keys): creation and its refusals, the
 * broker callbacks (verify with the tenant check, allows, expiry with the
 * leeway, release), and reloads (a refused file keeps the old set; a new
 * set invalidates claims signed by a key it no longer holds). */
/* fx-test-libs: fx_server fx_auth fx_broker fx_quic fx_wire fx_base */
#include "auth/auth.h"
#include "felix/error.h"
#include "server/authn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fx_test.h"

static char path[64];
static uint8_t pub[32], priv[32];

static void write_jwks(const char *kid, const uint8_t *key)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fx_auth_jwks_write(f, kid, key), 0);
    fclose(f);
}

static int setup(void **state)
{
    snprintf(path, sizeof(path), "/tmp/fx-authn-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    close(fd);
    if (fx_auth_keygen(pub, priv) != 0)
        return -1;
    write_jwks("k1", pub);
    return 0;
}

static int teardown(void **state)
{
    return unlink(path);
}

static char *mint(const uint8_t *key, const char *kid, const char *tid, int64_t exp,
                  const char *issuer)
{
    const char *perms[] = {"stream.publish:stream:t1/ns/*"};
    fx_auth_mint_claims c = {.issuer = issuer, .tid = tid, .exp = exp, .perms = perms, .nperms = 1};
    char *t = NULL;
    assert_int_equal(fx_auth_mint(key, kid, &c, &t), 0);
    return t;
}

static fx_authn *make(int64_t leeway, const char *issuer)
{
    fx_authn_opts o = {.jwks_file = path, .issuer = issuer, .leeway_s = leeway};
    fx_authn *a = NULL;
    char why[256] = "";
    assert_int_equal(fx_authn_new(&a, &o, why, sizeof(why)), 0);
    return a;
}

static void test_new_refuses_missing_name_negative_leeway_and_bad_files(void **state)
{
    fx_authn *a = NULL;
    char why[256] = "";
    fx_authn_opts o = {.jwks_file = NULL};
    assert_int_equal(fx_authn_new(&a, &o, why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "jwks_file is required"));
    o.jwks_file = "";
    assert_int_equal(fx_authn_new(&a, &o, NULL, 0), -EINVAL);
    o.jwks_file = path;
    o.leeway_s = -1;
    assert_int_equal(fx_authn_new(&a, &o, NULL, 0), -EINVAL);
    o.leeway_s = 0;
    o.jwks_file = "/nonexistent/jwks.json";
    assert_int_equal(fx_authn_new(&a, &o, why, sizeof(why)), -ENOENT);
    assert_non_null(strstr(why, "/nonexistent/jwks.json"));
    FILE *f = fopen(path, "w");
    fputs("{\"keys\": []}", f);
    fclose(f);
    o.jwks_file = path;
    assert_int_equal(fx_authn_new(&a, &o, why, sizeof(why)), FX_ECONFIG);
    assert_null(a);
    fx_authn_free(NULL);
}

static void test_verify_accepts_the_tenant_of_the_token_only(void **state)
{
    fx_authn *a = make(0, NULL);
    assert_string_equal(fx_authn_jwks_file(a), path);
    fx_broker_auth cb;
    fx_authn_broker_auth(a, &cb);
    assert_ptr_equal(cb.user, a);
    char *t = mint(priv, "k1", "t1", 1000, NULL);
    void *ctx = NULL;
    char why[256] = "";
    assert_int_equal(cb.verify(cb.user, "t1", t, strlen(t), 500, &ctx, why, sizeof(why)), 0);
    assert_non_null(ctx);
    assert_true(cb.allows(cb.user, ctx, FX_BROKER_AUTH_PUBLISH, "t1", "ns", "s"));
    assert_false(cb.allows(cb.user, ctx, FX_BROKER_AUTH_SUBSCRIBE, "t1", "ns", "s"));
    assert_false(cb.allows(cb.user, ctx, FX_BROKER_AUTH_PUBLISH, "t1", "other", "s"));
    assert_true(cb.key_valid(cb.user, ctx));
    cb.release(cb.user, ctx);
    void *none = NULL;
    assert_int_equal(cb.verify(cb.user, "t2", t, strlen(t), 500, &none, why, sizeof(why)),
                     FX_EAUTH);
    assert_non_null(strstr(why, "wrong tenant"));
    assert_null(none);
    free(t);
    fx_authn_free(a);
}

static void test_verify_applies_issuer_and_expiry_with_leeway(void **state)
{
    fx_authn *a = make(30, "my-issuer");
    fx_broker_auth cb;
    fx_authn_broker_auth(a, &cb);
    char why[256] = "";
    void *ctx = NULL;
    /* The default issuer is not this authenticator's. */
    char *t = mint(priv, "k1", "t1", 1000, NULL);
    assert_int_equal(cb.verify(cb.user, "t1", t, strlen(t), 500, &ctx, why, sizeof(why)), FX_EAUTH);
    assert_non_null(strstr(why, "wrong issuer"));
    free(t);
    t = mint(priv, "k1", "t1", 1000, "my-issuer");
    /* Expired by 10 s: within the 30 s leeway. */
    assert_int_equal(cb.verify(cb.user, "t1", t, strlen(t), 1010, &ctx, why, sizeof(why)), 0);
    assert_int_equal(cb.expiry(cb.user, ctx), 1030);
    cb.release(cb.user, ctx);
    ctx = NULL;
    assert_int_equal(cb.verify(cb.user, "t1", t, strlen(t), 1031, &ctx, why, sizeof(why)),
                     FX_EAUTH);
    assert_non_null(strstr(why, "expired"));
    free(t);
    fx_authn_free(a);
}

static void test_refused_reload_keeps_the_old_keys(void **state)
{
    fx_authn *a = make(0, NULL);
    fx_broker_auth cb;
    fx_authn_broker_auth(a, &cb);
    char why[256] = "";
    FILE *f = fopen(path, "w");
    fputs("not json", f);
    fclose(f);
    assert_int_equal(fx_authn_reload(a, why, sizeof(why)), FX_ECONFIG);
    char *t = mint(priv, "k1", "t1", 1000, NULL);
    void *ctx = NULL;
    assert_int_equal(cb.verify(cb.user, "t1", t, strlen(t), 1, &ctx, why, sizeof(why)), 0);
    assert_true(cb.key_valid(cb.user, ctx));
    cb.release(cb.user, ctx);
    free(t);
    fx_authn_free(a);
}

static void test_reload_with_a_new_key_invalidates_old_claims(void **state)
{
    fx_authn *a = make(0, NULL);
    fx_broker_auth cb;
    fx_authn_broker_auth(a, &cb);
    char why[256] = "";
    char *t = mint(priv, "k1", "t1", 1000, NULL);
    void *ctx = NULL;
    assert_int_equal(cb.verify(cb.user, "t1", t, strlen(t), 1, &ctx, why, sizeof(why)), 0);
    /* Same kid, other key bytes: the claims no longer hold. */
    uint8_t pub2[32], priv2[32];
    assert_int_equal(fx_auth_keygen(pub2, priv2), 0);
    write_jwks("k1", pub2);
    assert_int_equal(fx_authn_reload(a, why, sizeof(why)), 0);
    assert_non_null(strstr(why, "1 keys"));
    assert_false(cb.key_valid(cb.user, ctx));
    cb.release(cb.user, ctx);
    /* A token of the old key is refused; one of the new key passes. */
    void *c2 = NULL;
    assert_int_equal(cb.verify(cb.user, "t1", t, strlen(t), 1, &c2, why, sizeof(why)), FX_EAUTH);
    free(t);
    t = mint(priv2, "k1", "t1", 1000, NULL);
    assert_int_equal(cb.verify(cb.user, "t1", t, strlen(t), 1, &c2, why, sizeof(why)), 0);
    assert_true(cb.key_valid(cb.user, c2));
    cb.release(cb.user, c2);
    free(t);
    fx_authn_free(a);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
static const struct CMUnitTest tests[] = {
    T(test_new_refuses_missing_name_negative_leeway_and_bad_files),
    T(test_verify_accepts_the_tenant_of_the_token_only),
    T(test_verify_applies_issuer_and_expiry_with_leeway),
    T(test_refused_reload_keeps_the_old_keys),
    T(test_reload_with_a_new_key_invalidates_old_claims),
};

FX_TEST_MAIN(tests)
