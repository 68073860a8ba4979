/* Unit tests for a consumer group's own settings (group_settings.c): the
 * bounds of each key, application over the broker's defaults (with the
 * derived values), the comparison a re-create makes, and the JSON text of a
 * durable group's settings file round trip. */
/* fx-test-libs: fx_broker fx_base */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "broker/group_settings.h"
#include "fx_test.h"

/* Parses one key of JSON text |v|; returns the parse's result. */
static int parse(fx_broker_group_settings *s, const char *key, const char *v, char *why, size_t wl)
{
    json_t *j = json_loads(v, JSON_DECODE_ANY, NULL);
    assert_non_null(j);
    int rv = fx_broker_group_setting_parse(s, key, j, why, wl);
    json_decref(j);
    return rv;
}

static void test_each_key_is_bounds_checked_and_unknown_keys_are_refused(void **state)
{
    (void)state;
    static const struct {
        const char *key, *v;
        bool ok;
    } cases[] = {
        {"ack_wait_ms", "1", true},
        {"ack_wait_ms", "0", false},
        {"ack_wait_ms", "43200000", true},
        {"ack_wait_ms", "43200001", false},
        {"ack_wait_ms", "\"5\"", false},
        {"max_ack_wait_ms", "600000", true},
        {"max_deliver", "-1", true},
        {"max_deliver", "0", false},
        {"max_deliver", "-2", false},
        {"max_deliver", "1000000", true},
        {"max_ack_pending", "0", false},
        {"max_ack_pending", "1", true},
        {"max_ack_pending_bytes", "1099511627776", true},
        {"max_ack_pending_bytes", "1099511627777", false},
        {"max_parked", "0", true},
        {"max_parked", "1.0", false},
        {"backoff_ms", "[]", true},
        {"backoff_ms", "[0,43200000]", true},
        {"backoff_ms", "[1,2,3,4,5,6,7,8]", true},
        {"backoff_ms", "[1,2,3,4,5,6,7,8,9]", false},
        {"backoff_ms", "[-1]", false},
        {"backoff_ms", "100", false},
        {"max_delivery", "2", false},
        {"start", "\"all\"", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fx_broker_group_settings s = {0};
        char why[256] = "";
        int rv = parse(&s, cases[i].key, cases[i].v, why, sizeof(why));
        if ((rv == 0) != cases[i].ok)
            fail_msg("%s = %s: %d (%s)", cases[i].key, cases[i].v, rv, why);
        if (!cases[i].ok && (why[0] == '\0' || s.has != 0))
            fail_msg("%s = %s: no reason, or kept", cases[i].key, cases[i].v);
    }
    fx_broker_group_settings s = {0};
    char why[256];
    assert_int_equal(parse(&s, "colour", "1", why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "unknown field \"colour\""));
}

static void test_apply_overrides_the_defaults_with_the_derived_values(void **state)
{
    (void)state;
    fxb_gs_config c;
    fxb_gs_config_default(&c);
    fx_broker_group_settings s = {0};
    char why[256];
    assert_int_equal(parse(&s, "ack_wait_ms", "900000", why, sizeof(why)), 0); /* > 600,000 */
    assert_int_equal(parse(&s, "max_ack_pending", "10", why, sizeof(why)), 0);
    assert_int_equal(parse(&s, "max_deliver", "-1", why, sizeof(why)), 0);
    assert_int_equal(parse(&s, "backoff_ms", "[5,6]", why, sizeof(why)), 0);
    const char *w = NULL;
    assert_int_equal(fxb_gset_apply(&s, &c, &w), 0);
    assert_int_equal(c.ack_wait_ms, 900000);
    assert_int_equal(c.max_ack_wait_ms, 900000); /* raised with it */
    assert_int_equal(c.max_ack_pending, 10);
    assert_int_equal(c.max_parked, 10);
    assert_int_equal(c.member_window_max, 5);
    assert_int_equal(c.max_deliver, -1);
    assert_int_equal(c.n_backoff, 2);
    assert_int_equal(c.backoff_ms[1], 6);
    /* A given max_ack_wait_ms below the ack wait is refused, not raised. */
    fxb_gs_config_default(&c);
    assert_int_equal(parse(&s, "max_ack_wait_ms", "1000", why, sizeof(why)), 0);
    assert_int_equal(fxb_gset_apply(&s, &c, &w), -EINVAL);
    assert_non_null(strstr(w, "max_ack_wait_ms"));
    /* NULL and an empty set leave the defaults. */
    fxb_gs_config d, e;
    fxb_gs_config_default(&d);
    fxb_gs_config_default(&e);
    assert_int_equal(fxb_gset_apply(NULL, &d, &w), 0);
    assert_memory_equal(&d, &e, sizeof(d));
}

static void test_differs_names_the_first_key_that_is_not_the_groups(void **state)
{
    (void)state;
    fxb_gs_config c;
    fxb_gs_config_default(&c);
    fx_broker_group_settings s = {0};
    char why[256], out[192];
    assert_false(fxb_gset_differs(&s, &c, out, sizeof(out)));
    assert_false(fxb_gset_differs(NULL, &c, out, sizeof(out)));
    assert_int_equal(parse(&s, "max_deliver", "5", why, sizeof(why)), 0); /* the default */
    assert_false(fxb_gset_differs(&s, &c, out, sizeof(out)));
    assert_int_equal(parse(&s, "max_deliver", "-1", why, sizeof(why)), 0);
    assert_true(fxb_gset_differs(&s, &c, out, sizeof(out)));
    assert_string_equal(out, "max_deliver (the group has 5, asked -1)");
    s = (fx_broker_group_settings){0};
    assert_int_equal(parse(&s, "backoff_ms", "[]", why, sizeof(why)), 0);
    assert_false(fxb_gset_differs(&s, &c, out, sizeof(out)));
    assert_int_equal(parse(&s, "backoff_ms", "[1]", why, sizeof(why)), 0);
    assert_true(fxb_gset_differs(&s, &c, out, sizeof(out)));
    assert_non_null(strstr(out, "backoff_ms"));
}

static void test_the_settings_text_round_trips_and_damage_is_refused(void **state)
{
    (void)state;
    fx_broker_group_settings s = {0}, back;
    char why[256];
    assert_int_equal(parse(&s, "max_deliver", "2", why, sizeof(why)), 0);
    assert_int_equal(parse(&s, "max_ack_pending_bytes", "1099511627776", why, sizeof(why)), 0);
    assert_int_equal(parse(&s, "backoff_ms", "[100,1000,5000]", why, sizeof(why)), 0);
    size_t len = 0;
    char *t = fxb_gset_encode(&s, &len);
    assert_non_null(t);
    assert_true(len < FXB_GSET_TEXT_MAX);
    assert_string_equal(t,
                        "{\"backoff_ms\":[100,1000,5000],\"max_ack_pending_bytes\":1099511627776,"
                        "\"max_deliver\":2}");
    assert_int_equal(fxb_gset_decode(t, len, &back, why, sizeof(why)), 0);
    assert_memory_equal(&s, &back, sizeof(s));
    free(t);
    static const char *bad[] = {
        "", "{", "[]", "{\"max_deliver\":0}", "{\"x\":1}", "{\"max_deliver\":2,\"max_deliver\":2}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        if (fxb_gset_decode(bad[i], strlen(bad[i]), &back, why, sizeof(why)) != -EINVAL ||
            why[0] == '\0')
            fail_msg("'%s' was taken", bad[i]);
    }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_each_key_is_bounds_checked_and_unknown_keys_are_refused),
    cmocka_unit_test(test_apply_overrides_the_defaults_with_the_derived_values),
    cmocka_unit_test(test_differs_names_the_first_key_that_is_not_the_groups),
    cmocka_unit_test(test_the_settings_text_round_trips_and_damage_is_refused),
};

FX_TEST_MAIN(tests)
