/* Unit tests for admin_guard.c, the rules an admin request passes before its
 * route runs: which calls need the bearer token, the Authorization header's
 * form, the token comparison, the Host header check against DNS rebinding,
 * and the refusal counters. Pure functions and process-wide counters. */
/* fx-test-libs: fx_server fx_quic fx_wire fx_base */
#include "base/metrics.h"
#include "server/admin.h"

#include "fx_test.h"

static void test_mutating_methods_are_all_but_get_and_head(void **state)
{
    assert_false(fx_admin_method_is_mutating("GET"));
    assert_false(fx_admin_method_is_mutating("HEAD"));
    assert_true(fx_admin_method_is_mutating("PUT"));
    assert_true(fx_admin_method_is_mutating("PATCH"));
    assert_true(fx_admin_method_is_mutating("DELETE"));
    assert_true(fx_admin_method_is_mutating("POST"));
    assert_true(fx_admin_method_is_mutating("get")); /* methods are case-sensitive */
}

static void test_token_needed_for_mutations_anywhere_and_api_reads_off_loopback(void **state)
{
    assert_true(fx_admin_needs_token(false, "PUT", "/v1/streams/a/b/c"));
    assert_true(fx_admin_needs_token(false, "DELETE", "/metrics"));
    assert_false(fx_admin_needs_token(false, "GET", "/v1/streams"));
    assert_true(fx_admin_needs_token(true, "GET", "/v1/streams"));
    assert_true(fx_admin_needs_token(true, "GET", "/v1"));
    assert_true(fx_admin_needs_token(true, "HEAD", "/v1/subscriptions"));
    /* Health and metrics stay open; "/v1x" is not the API. */
    assert_false(fx_admin_needs_token(true, "GET", "/metrics"));
    assert_false(fx_admin_needs_token(true, "GET", "/live"));
    assert_false(fx_admin_needs_token(true, "GET", "/ready"));
    assert_false(fx_admin_needs_token(true, "GET", "/v1x"));
}

static void test_authorized_wants_a_bearer_header_with_the_token(void **state)
{
    assert_true(fx_admin_authorized(false, "s3cret", "PUT", "/v1/streams/a/b/c", "Bearer s3cret"));
    assert_true(fx_admin_authorized(false, "s3cret", "PUT", "/x", "bearer s3cret"));
    assert_true(fx_admin_authorized(false, "s3cret", "PUT", "/x", "BEARER   s3cret"));
    assert_false(fx_admin_authorized(false, "s3cret", "PUT", "/x", "Bearer s3cre"));
    assert_false(fx_admin_authorized(false, "s3cret", "PUT", "/x", "Bearer s3cret2"));
    assert_false(fx_admin_authorized(false, "s3cret", "PUT", "/x", "Basic s3cret"));
    assert_false(fx_admin_authorized(false, "s3cret", "PUT", "/x", "s3cret"));
    assert_false(fx_admin_authorized(false, "s3cret", "PUT", "/x", NULL));
    /* A call that needs no token passes whatever the header. */
    assert_true(fx_admin_authorized(false, "s3cret", "GET", "/v1/streams", NULL));
    assert_true(fx_admin_authorized(true, NULL, "GET", "/metrics", "Bearer nope"));
}

static void test_no_configured_token_refuses_every_call_that_needs_one(void **state)
{
    assert_false(fx_admin_authorized(false, NULL, "PUT", "/x", "Bearer "));
    assert_false(fx_admin_authorized(false, "", "PUT", "/x", "Bearer "));
    assert_false(fx_admin_authorized(true, "", "GET", "/v1/streams", "Bearer "));
    assert_true(fx_admin_authorized(false, "", "GET", "/v1/streams", NULL));
}

static void test_token_equal_compares_whole_strings(void **state)
{
    assert_true(fx_admin_token_equal("abc", "abc"));
    assert_true(fx_admin_token_equal("", ""));
    assert_false(fx_admin_token_equal("abc", "abcd"));
    assert_false(fx_admin_token_equal("abcd", "abc"));
    assert_false(fx_admin_token_equal("abc", "abC"));
    assert_false(fx_admin_token_equal("", "x"));
}

static void test_host_addresses_localhost_and_bind_host_pass(void **state)
{
    assert_true(fx_admin_host_allowed(NULL, NULL, NULL));
    assert_true(fx_admin_host_allowed("127.0.0.1:8080", NULL, NULL));
    assert_true(fx_admin_host_allowed("10.1.2.3", NULL, NULL));
    assert_true(fx_admin_host_allowed("[::1]:9", NULL, NULL));
    assert_true(fx_admin_host_allowed("[fe80::1]", NULL, NULL));
    assert_true(fx_admin_host_allowed("localhost:80", NULL, NULL));
    assert_true(fx_admin_host_allowed("LOCALHOST.", NULL, NULL));
    assert_true(fx_admin_host_allowed("broker.internal:7000", "broker.internal", NULL));
    assert_false(fx_admin_host_allowed("evil.example", NULL, NULL));
    assert_false(fx_admin_host_allowed("evil.example", "broker.internal", NULL));
    assert_false(fx_admin_host_allowed("localhost.evil.example", NULL, NULL));
}

static void test_host_allowed_list_and_malformed_headers(void **state)
{
    const char *list = "a.example, B.example,c.example";
    assert_true(fx_admin_host_allowed("a.example", NULL, list));
    assert_true(fx_admin_host_allowed("b.example:443", NULL, list));
    assert_true(fx_admin_host_allowed("c.example.", NULL, list));
    assert_false(fx_admin_host_allowed("d.example", NULL, list));
    assert_false(fx_admin_host_allowed("example", NULL, list));
    /* Malformed: bad ports, stray colons, unclosed brackets, no name. */
    assert_false(fx_admin_host_allowed("localhost:", NULL, NULL));
    assert_false(fx_admin_host_allowed("localhost:123456", NULL, NULL));
    assert_false(fx_admin_host_allowed("localhost:8a", NULL, NULL));
    assert_false(fx_admin_host_allowed("a:1:2", NULL, NULL));
    assert_false(fx_admin_host_allowed("[::1", NULL, NULL));
    assert_false(fx_admin_host_allowed("[::1]x", NULL, NULL));
    assert_false(fx_admin_host_allowed("[not-v6]", NULL, NULL));
    assert_false(fx_admin_host_allowed(":80", NULL, NULL));
    assert_false(fx_admin_host_allowed("", NULL, NULL));
}

static uint64_t refused(fx_admin_refusal why)
{
    fx_metrics_snapshot snap;
    fx_metrics_snapshot_take(&snap);
    switch (why) {
    case FX_ADMIN_REFUSED_HOST:
        return snap.c.admin_refused_host;
    case FX_ADMIN_REFUSED_TOKEN:
        return snap.c.admin_refused_token;
    case FX_ADMIN_REFUSED_CONN_LIMIT:
        return snap.c.admin_refused_conn_limit;
    case FX_ADMIN_REFUSED_HEADERS:
        return snap.c.admin_refused_headers;
    case FX_ADMIN_REFUSED_BODY:
        return snap.c.admin_refused_body;
    default:
        return UINT64_MAX;
    }
}

static void test_each_refusal_bumps_its_own_counter(void **state)
{
    for (int w = 0; w < FX_ADMIN_NREFUSALS; w++) {
        uint64_t before[FX_ADMIN_NREFUSALS];
        for (int k = 0; k < FX_ADMIN_NREFUSALS; k++)
            before[k] = refused((fx_admin_refusal)k);
        fx_admin_count_refusal((fx_admin_refusal)w, w % 2 ? "127.0.0.1" : NULL,
                               w % 2 ? NULL : "detail");
        for (int k = 0; k < FX_ADMIN_NREFUSALS; k++)
            assert_int_equal(refused((fx_admin_refusal)k) - before[k], k == w ? 1 : 0);
    }
    /* The count sentinel is no refusal. */
    uint64_t host = refused(FX_ADMIN_REFUSED_HOST);
    fx_admin_count_refusal(FX_ADMIN_NREFUSALS, NULL, NULL);
    assert_int_equal(refused(FX_ADMIN_REFUSED_HOST), host);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_mutating_methods_are_all_but_get_and_head),
    cmocka_unit_test(test_token_needed_for_mutations_anywhere_and_api_reads_off_loopback),
    cmocka_unit_test(test_authorized_wants_a_bearer_header_with_the_token),
    cmocka_unit_test(test_no_configured_token_refuses_every_call_that_needs_one),
    cmocka_unit_test(test_token_equal_compares_whole_strings),
    cmocka_unit_test(test_host_addresses_localhost_and_bind_host_pass),
    cmocka_unit_test(test_host_allowed_list_and_malformed_headers),
    cmocka_unit_test(test_each_refusal_bumps_its_own_counter),
};

FX_TEST_MAIN(tests)
