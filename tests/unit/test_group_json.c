/* Unit tests for the error answers of the original's JSON group requests
 * (group_json.c, fxb_gjson_error): the code and retry class each refusal
 * carries to a client offering FEATURE_ERROR_CODES, none to one that does
 * not, the exact bytes, and the counter of each reason. */
/* fx-test-libs: fx_broker fx_storage fx_wire fx_base */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/metrics.h"
#include "broker/group_json.h"
#include "fx_test.h"
#include "wire/message.h"

static void expect_bytes(const fx_msg *m, const char *want)
{
    uint8_t *p;
    size_t n;
    assert_int_equal(fx_msg_encode(m, &p, &n), 0);
    if (n != strlen(want) || memcmp(p, want, n) != 0)
        fail_msg("encoded %.*s\n   want %s", (int)n, (char *)p, want);
    free(p);
}

static void test_a_client_offering_error_codes_gets_code_and_retry(void **state)
{
    (void)state;
    fx_msg m;
    fxb_gjson_error(&m, FX_FEATURE_ERROR_CODES, FXB_GJ_STALE_FATAL,
                    "the claim on offset 4 no longer stands");
    expect_bytes(&m, "{\"type\":\"error\",\"message\":\"the claim on offset 4 no longer stands\","
                     "\"code\":\"stale_claim\",\"retry\":\"fatal\"}");
    fxb_gjson_error(&m, FX_FEATURE_ERROR_CODES | FX_FEATURE_CONSUMER_GROUP, FXB_GJ_STALE, "x");
    expect_bytes(&m, "{\"type\":\"error\",\"message\":\"x\",\"code\":\"stale_claim\","
                     "\"retry\":\"retry\"}");
    fxb_gjson_error(&m, FX_FEATURE_ERROR_CODES, FXB_GJ_NOT_FOUND, "x");
    assert_string_equal(m.code, "not_found");
    assert_string_equal(m.retry, "retry_after");
    fxb_gjson_error(&m, FX_FEATURE_ERROR_CODES, FXB_GJ_UNSUPPORTED, "x");
    assert_string_equal(m.code, "invalid_request");
    assert_string_equal(m.retry, "fatal");
    fxb_gjson_error(&m, FX_FEATURE_ERROR_CODES, FXB_GJ_OVERLOADED, "x");
    assert_string_equal(m.code, "overloaded");
    fxb_gjson_error(&m, FX_FEATURE_ERROR_CODES, FXB_GJ_FORBIDDEN, "x");
    assert_string_equal(m.code, "forbidden");
    fxb_gjson_error(&m, FX_FEATURE_ERROR_CODES, FXB_GJ_INTERNAL, "x");
    assert_string_equal(m.code, "internal");
}

static void test_a_client_not_offering_error_codes_gets_the_message_alone(void **state)
{
    (void)state;
    fx_msg m;
    fxb_gjson_error(&m, FX_FEATURE_CONSUMER_GROUP | FX_FEATURE_GROUP_ADMIN, FXB_GJ_INVALID,
                    "extend_ms must be above 0");
    expect_bytes(&m, "{\"type\":\"error\",\"message\":\"extend_ms must be above 0\"}");
    assert_false(m.has_code);
    assert_false(m.has_retry);
}

static void test_each_refusal_is_counted_under_its_reason(void **state)
{
    (void)state;
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_msg m;
    fxb_gjson_error(&m, 0, FXB_GJ_INVALID, "x");
    fxb_gjson_error(&m, 0, FXB_GJ_STALE, "x");
    fxb_gjson_error(&m, 0, FXB_GJ_STALE_FATAL, "x");
    fxb_gjson_error(&m, 0, FXB_GJ_UNSUPPORTED, "x");
    fx_metrics_snapshot_take(&b);
    assert_int_equal(b.c.group_json_refused_invalid - a.c.group_json_refused_invalid, 1);
    assert_int_equal(b.c.group_json_refused_stale - a.c.group_json_refused_stale, 2);
    assert_int_equal(b.c.group_json_refused_unsupported - a.c.group_json_refused_unsupported, 1);
}

static void test_the_advertised_features_are_exactly_what_is_served(void **state)
{
    (void)state;
    assert_int_equal(FXB_SERVER_FEATURES, 0x0B40421Cu);
    assert_int_equal(FXB_SERVER_FEATURES & FX_FEATURE_GROUP_DEAD_LETTERS,
                     FX_FEATURE_GROUP_DEAD_LETTERS);
    assert_int_equal(FXB_SERVER_FEATURES & FX_FEATURE_GROUP_CONSUMER, 0);
    assert_int_equal(FXB_SERVER_FEATURES & FX_FEATURE_EXTENDED, 0);
    assert_true(fxb_group_json_is_request(FX_MSG_GROUP_POLL));
    assert_true(fxb_group_json_is_request(FX_MSG_GROUP_DELETE));
    assert_false(fxb_group_json_is_request(FX_MSG_GROUP_RECORDS));
    assert_false(fxb_group_json_is_request(FX_MSG_GROUP_JOIN));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_a_client_offering_error_codes_gets_code_and_retry),
    cmocka_unit_test(test_a_client_not_offering_error_codes_gets_the_message_alone),
    cmocka_unit_test(test_each_refusal_is_counted_under_its_reason),
    cmocka_unit_test(test_the_advertised_features_are_exactly_what_is_served),
};

FX_TEST_MAIN(tests)
