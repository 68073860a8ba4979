/* Tests of the cache's later wire (felix-facts-groups.md §3.2 and
 * /docs/protocol.md "The cache"): cache_delete, cache_put_if,
 * cache_delete_if, cache_condition_result and cache_value's optional version
 * (src/wire/message.c), byte for byte against the project's vectors
 * (tests/vectors/felix-c-cache), and the original's cache_value unchanged
 * when no version is set. */
/* fx-test-libs: fx_wire fx_base */
#include "fx_test.h"

#include <stdlib.h>

#include "felix/error.h"
#include "wire/message.h"

#include "own_vectors.h"

/* Its vectors: tests/vectors/felix-c-cache (own_vectors.h). */
#define expect_vector(m, name) own_vector_expect((m), "felix-c-cache", (name))

static void scope(fx_msg *m, fx_msg_type t)
{
    memset(m, 0, sizeof(*m));
    m->type = t;
    m->tenant_id = "t1", m->ns = "default", m->cache = "primary", m->key = "demo-key";
}

static const fx_msg_bytes cached = {(const uint8_t *)"cached", 6};

static int decode_str(fx_msg *m, const char *json)
{
    return fx_msg_decode(m, (const uint8_t *)json, strlen(json), NULL);
}

static void test_cache_delete_matches_the_vectors(void **state)
{
    fx_msg m;
    scope(&m, FX_MSG_CACHE_DELETE);
    m.has_request_id = true, m.request_id = 5;
    expect_vector(&m, "cache_delete.json");
    scope(&m, FX_MSG_CACHE_DELETE);
    expect_vector(&m, "cache_delete_no_request_id.json");
}

static void test_cache_put_if_matches_the_vectors(void **state)
{
    fx_msg m;
    scope(&m, FX_MSG_CACHE_PUT_IF);
    m.value = cached;
    m.condition.kind = FX_MSG_CONDITION_ABSENT;
    m.request_id = 6;
    expect_vector(&m, "cache_put_if_absent.json");
    scope(&m, FX_MSG_CACHE_PUT_IF);
    m.value = cached;
    m.has_ttl_ms = true, m.ttl_ms = 1000;
    m.condition = (fx_msg_condition){FX_MSG_CONDITION_VERSION, 3};
    m.request_id = 7;
    expect_vector(&m, "cache_put_if_version.json");
}

static void test_cache_delete_if_matches_the_vector(void **state)
{
    fx_msg m;
    scope(&m, FX_MSG_CACHE_DELETE_IF);
    m.version = 4, m.request_id = 8;
    expect_vector(&m, "cache_delete_if.json");
}

static void test_cache_condition_result_matches_the_vectors(void **state)
{
    fx_msg m;
    memset(&m, 0, sizeof(m));
    m.type = FX_MSG_CACHE_CONDITION_RESULT;
    m.applied = true, m.has_version = true, m.version = 4, m.request_id = 6;
    expect_vector(&m, "cache_condition_result_applied.json");
    m.applied = false, m.request_id = 7;
    expect_vector(&m, "cache_condition_result_refused.json");
    m.has_version = false, m.version = 0, m.request_id = 8;
    expect_vector(&m, "cache_condition_result_refused_absent.json");
    m.applied = true;
    expect_vector(&m, "cache_condition_result_deleted.json");
}

static void test_cache_value_version_is_written_only_when_set(void **state)
{
    fx_msg m;
    scope(&m, FX_MSG_CACHE_VALUE);
    m.value = cached, m.has_value = true;
    m.has_version = true, m.version = 4;
    m.has_request_id = true, m.request_id = 5;
    expect_vector(&m, "cache_value_version.json");
    /* A delete of a key without a live entry: value null. */
    scope(&m, FX_MSG_CACHE_VALUE);
    m.has_request_id = true, m.request_id = 5;
    expect_vector(&m, "cache_value_removed_none.json");
    /* Without a version: the original's vector, byte for byte. */
    static const char orig[] = "{\"type\":\"cache_value\",\"tenant_id\":\"t1\",\"namespace\":"
                               "\"default\",\"cache\":\"primary\",\"key\":\"demo-key\","
                               "\"value\":\"Y2FjaGVk\"}";
    scope(&m, FX_MSG_CACHE_VALUE);
    m.value = cached, m.has_value = true;
    uint8_t buf[256];
    size_t n;
    assert_int_equal(fx_msg_encode_into(&m, buf, sizeof(buf), &n), 0);
    assert_int_equal(n, strlen(orig));
    assert_memory_equal(buf, orig, n);
    fx_msg d;
    assert_int_equal(decode_str(&d, orig), 0);
    assert_false(d.has_version);
    fx_msg_deinit(&d);
}

static void test_bad_conditions_are_refused(void **state)
{
    static const char *const bad[] = {
        "\"present\"",
        "{}",
        "{\"version\":-1}",
        "{\"version\":\"3\"}",
        "{\"version\":3,\"x\":1}",
        "3",
        "[]",
        "null",
    };
    char json[512];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(json, sizeof(json),
                 "{\"type\":\"cache_put_if\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                 "\"cache\":\"c\",\"key\":\"k\",\"value\":\"\",\"ttl_ms\":null,"
                 "\"condition\":%s,\"request_id\":1}",
                 bad[i]);
        fx_msg m;
        int rv = decode_str(&m, json);
        if (rv != FX_EWIRE_FIELD_TYPE && rv != FX_EWIRE_INT_RANGE)
            fail_msg("condition %s: %d", bad[i], rv);
    }
    /* Encoding refuses a condition of kind NONE (the decoder never makes one). */
    fx_msg m;
    scope(&m, FX_MSG_CACHE_PUT_IF);
    m.request_id = 1;
    assert_int_equal(fx_msg_encoded_len(&m), FX_EWIRE_ACK_MODE);
}

static void test_conditional_requests_need_a_request_id(void **state)
{
    fx_msg m;
    assert_int_equal(decode_str(&m, "{\"type\":\"cache_put_if\",\"tenant_id\":\"t\","
                                    "\"namespace\":\"n\",\"cache\":\"c\",\"key\":\"k\","
                                    "\"value\":\"\",\"condition\":\"absent\"}"),
                     FX_EWIRE_FIELD_MISSING);
    assert_int_equal(decode_str(&m, "{\"type\":\"cache_delete_if\",\"tenant_id\":\"t\","
                                    "\"namespace\":\"n\",\"cache\":\"c\",\"key\":\"k\","
                                    "\"version\":1}"),
                     FX_EWIRE_FIELD_MISSING);
    assert_int_equal(decode_str(&m, "{\"type\":\"cache_delete_if\",\"tenant_id\":\"t\","
                                    "\"namespace\":\"n\",\"cache\":\"c\",\"key\":\"k\","
                                    "\"request_id\":1}"),
                     FX_EWIRE_FIELD_MISSING);
    /* A put_if without ttl_ms decodes (null = absent) and writes it as null. */
    assert_int_equal(decode_str(&m, "{\"type\":\"cache_put_if\",\"tenant_id\":\"t\","
                                    "\"namespace\":\"n\",\"cache\":\"c\",\"key\":\"\","
                                    "\"value\":\"\",\"condition\":{\"version\":9},"
                                    "\"request_id\":1}"),
                     0);
    assert_false(m.has_ttl_ms);
    assert_int_equal(m.condition.kind, FX_MSG_CONDITION_VERSION);
    assert_int_equal(m.condition.version, 9);
    fx_msg_deinit(&m);
}

static void test_feature_bits_are_the_originals(void **state)
{
    assert_int_equal(FX_FEATURE_CACHE_DELETE, 0x4);
    assert_int_equal(FX_FEATURE_CACHE_CONDITIONAL, 0x02000000);
    assert_string_equal(fx_msg_type_name(FX_MSG_CACHE_DELETE), "cache_delete");
    assert_string_equal(fx_msg_type_name(FX_MSG_CACHE_CONDITION_RESULT), "cache_condition_result");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_cache_delete_matches_the_vectors),
    cmocka_unit_test(test_cache_put_if_matches_the_vectors),
    cmocka_unit_test(test_cache_delete_if_matches_the_vector),
    cmocka_unit_test(test_cache_condition_result_matches_the_vectors),
    cmocka_unit_test(test_cache_value_version_is_written_only_when_set),
    cmocka_unit_test(test_bad_conditions_are_refused),
    cmocka_unit_test(test_conditional_requests_need_a_request_id),
    cmocka_unit_test(test_feature_bits_are_the_originals),
};

FX_TEST_MAIN(tests)
