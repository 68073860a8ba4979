/* Unit tests for config_parse.c: the value parsers behind every key type
 * (sizes and durations with their units, bare numbers per key suffix,
 * bounds, booleans, enums, addresses, workers, stream lists) and the three
 * layers it reads (YAML text, FELIX_* environment, --set flags): what each
 * stores, the origin it records and the messages of its refusals. */
/* fx-test-libs: fx_server fx_wire fx_base */
#include "felix/error.h"
#include "server/config.h"
#include "server/config_internal.h"

#include <errno.h>
#include <string.h>

#include "fx_test.h"

static const struct key *key(const char *name)
{
    int i = fx_config_key_index(name);
    assert_true(i >= 0);
    return &fx_config_keys[i];
}

/* Stores |s| into key |name| of |c|; returns the result, reason in |why|. */
static int store(fx_config *c, const char *name, const char *s, char *why)
{
    return fx_config_store_text(c, key(name), s, why, 256);
}

static uint64_t num(const fx_config *c, const char *name)
{
    return fx_config_get_u64(c, fx_config_key_index(name));
}

static void test_sizes_take_binary_and_decimal_units(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    char why[256];
    assert_int_equal(store(&c, "max_frame_bytes", "2MiB", why), 0);
    assert_int_equal(c.max_frame_bytes, 2 * MiB);
    assert_int_equal(store(&c, "max_frame_bytes", "3 KB", why), 0);
    assert_int_equal(c.max_frame_bytes, 3000);
    assert_int_equal(store(&c, "max_frame_bytes", "4096", why), 0); /* bare: bytes */
    assert_int_equal(c.max_frame_bytes, 4096);
    assert_int_equal(store(&c, "max_frame_bytes", "5 XB", why), -1);
    assert_non_null(strstr(why, "unknown unit"));
    assert_int_equal(store(&c, "max_frame_bytes", "-1", why), -1);
    assert_non_null(strstr(why, "negative"));
    assert_int_equal(store(&c, "max_frame_bytes", "MiB", why), -1);
    assert_non_null(strstr(why, "not a number"));
    assert_int_equal(store(&c, "max_frame_bytes", "99999999999999999999", why), -1);
    assert_non_null(strstr(why, "overflow"));
    assert_int_equal(store(&c, "max_frame_bytes", "20000000TiB", why), -1);
    assert_non_null(strstr(why, "overflow"));
    assert_int_equal(c.max_frame_bytes, 4096); /* refusals store nothing */
    fx_config_deinit(&c);
}

static void test_bare_durations_take_the_unit_of_the_key_name(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    char why[256];
    assert_int_equal(store(&c, "idle_timeout_ms", "1500", why), 0);
    assert_int_equal(num(&c, "idle_timeout_ms"), 1500 * MS);
    assert_int_equal(store(&c, "idle_timeout_ms", "2m", why), 0);
    assert_int_equal(num(&c, "idle_timeout_ms"), 120 * SEC);
    assert_int_equal(store(&c, "stream_idle_expiry_s", "30", why), 0);
    assert_int_equal(num(&c, "stream_idle_expiry_s"), 30 * SEC);
    assert_int_equal(store(&c, "subscriber_flush_max_delay_us", "7", why), 0);
    assert_int_equal(num(&c, "subscriber_flush_max_delay_us"), 7 * US);
    assert_int_equal(store(&c, "durable_retention_seconds", "2", why), 0);
    assert_int_equal(num(&c, "durable_retention_seconds"), 2 * SEC);
    fx_config_deinit(&c);
}

static void test_numbers_outside_the_key_bounds_are_refused(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    char why[256];
    assert_int_equal(store(&c, "idle_timeout_ms", "50ms", why), -1);
    assert_non_null(strstr(why, "out of range (allowed: 100ms to 1h)"));
    assert_int_equal(store(&c, "pub_queue_depth", "0", why), -1);
    assert_non_null(strstr(why, "must not be 0"));
    assert_int_equal(store(&c, "pub_queue_depth", "12x", why), -1);
    assert_non_null(strstr(why, "not a whole number"));
    assert_int_equal(store(&c, "pub_queue_depth", "1048576", why), 0);
    assert_int_equal(store(&c, "pub_queue_depth", "1048577", why), -1);
    assert_int_equal(c.pub_queue_depth, 1048576);
    fx_config_deinit(&c);
}

static void test_bools_enums_and_workers(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    char why[256];
    const char *yes[] = {"1", "TRUE", "yes", "On"}, *no[] = {"0", "false", "NO", "off"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(store(&c, "ack_on_commit", yes[i], why), 0);
        assert_true(c.ack_on_commit);
        assert_int_equal(store(&c, "ack_on_commit", no[i], why), 0);
        assert_false(c.ack_on_commit);
    }
    assert_int_equal(store(&c, "ack_on_commit", "maybe", why), -1);
    assert_non_null(strstr(why, "not a boolean"));
    assert_int_equal(store(&c, "subscriber_queue_policy", "drop_old", why), 0);
    assert_int_equal(c.subscriber_queue_policy, 2);
    assert_int_equal(store(&c, "subscriber_queue_policy", "Drop_Old", why), -1);
    assert_non_null(strstr(why, "expected block, drop_new or drop_old"));
    assert_int_equal(store(&c, "workers", "3", why), 0);
    assert_int_equal(c.workers, 3);
    assert_false(c.workers_auto);
    assert_int_equal(store(&c, "workers", "0", why), -1);
    assert_non_null(strstr(why, "write auto"));
    assert_int_equal(store(&c, "workers", "auto", why), 0);
    assert_true(c.workers_auto);
    assert_true(c.workers >= 1);
    fx_config_deinit(&c);
}

static void test_addresses_strings_and_stream_lists(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    char why[256];
    assert_int_equal(fx_config_check_addr("127.0.0.1:5000", why, sizeof(why)), 0);
    assert_int_equal(fx_config_check_addr("[::1]:0", why, sizeof(why)), 0);
    assert_int_equal(fx_config_check_addr("broker-1.local:80", why, sizeof(why)), 0);
    assert_int_equal(fx_config_check_addr("::1:5000", why, sizeof(why)), -1);
    assert_int_equal(fx_config_check_addr("nohost", why, sizeof(why)), -1);
    assert_int_equal(fx_config_check_addr("a b:1", why, sizeof(why)), -1);
    assert_int_equal(store(&c, "quic_bind", "0.0.0.0:7000", why), 0);
    assert_string_equal(c.quic_bind, "0.0.0.0:7000");
    assert_int_equal(store(&c, "jwt_issuer", "", why), -1);
    assert_non_null(strstr(why, "must not be empty"));
    assert_int_equal(store(&c, "streams", "t1/ns/a,t2/ns/b", why), 0);
    assert_int_equal(c.nstreams, 2);
    assert_string_equal(c.streams[1].tenant, "t2");
    assert_string_equal(c.streams[1].stream, "b");
    assert_int_equal(store(&c, "streams", "t1/ns", why), -1);
    assert_non_null(strstr(why, "is not tenant/namespace/stream"));
    assert_int_equal(store(&c, "streams", "t1/n s/a", why), -1);
    assert_int_equal(store(&c, "streams", "t/n/s,t/n/s", why), -1);
    assert_non_null(strstr(why, "listed twice"));
    assert_int_equal(c.nstreams, 2);
    fx_config_deinit(&c);
}

/* Stores |list| in key groups; expects -1 with |want| in the reason. */
static void expect_bad_groups(fx_config *c, const char *list, const char *want)
{
    char why[256];
    assert_int_equal(store(c, "groups", list, why), -1);
    if (!strstr(why, want))
        fail_msg("groups=%s: \"%s\" lacks \"%s\"", list, why, want);
}

static void test_group_lists_and_their_starts(void **state)
{
    (void)state;
    fx_config c;
    fx_config_defaults(&c);
    char why[256];
    assert_int_equal(store(&c, "groups",
                           "t1/default/orders/billing@new,t/n/s/g,t/n/s/h@last,t/n/s/o@42,"
                           "t/n/s/a@b@all,t/n/s/x@0",
                           why),
                     0);
    assert_int_equal(c.ngroups, 6);
    assert_string_equal(c.groups[0].s.tenant, "t1");
    assert_string_equal(c.groups[0].s.ns, "default");
    assert_string_equal(c.groups[0].s.stream, "orders");
    assert_string_equal(c.groups[0].group, "billing");
    assert_int_equal(c.groups[0].start, FX_CONFIG_GROUP_START_NEW);
    assert_int_equal(c.groups[1].start, FX_CONFIG_GROUP_START_ALL);
    assert_int_equal(c.groups[2].start, FX_CONFIG_GROUP_START_LAST);
    assert_int_equal(c.groups[3].start, FX_CONFIG_GROUP_START_OFFSET);
    assert_int_equal(c.groups[3].offset, 42);
    assert_string_equal(c.groups[4].group, "a@b"); /* the last '@' starts the start */
    assert_int_equal(c.groups[4].start, FX_CONFIG_GROUP_START_ALL);
    assert_int_equal(c.groups[5].offset, 0);
    char g128[140];
    memset(g128, 'g', 128);
    snprintf(g128 + 128, sizeof(g128) - 128, "@new");
    char ok[160], bad[160];
    snprintf(ok, sizeof(ok), "t/n/s/%s", g128);
    assert_int_equal(store(&c, "groups", ok, why), 0);
    assert_int_equal(strlen(c.groups[0].group), 128);
    snprintf(bad, sizeof(bad), "t/n/s/g%s", g128);
    expect_bad_groups(&c, bad, "too long (allowed: 1 to 128 bytes)");
    expect_bad_groups(&c, "t/n/s", "is not tenant/namespace/stream/group[@start]");
    expect_bad_groups(&c, "t//s/g", "is not tenant/namespace/stream/group[@start]");
    expect_bad_groups(&c, "t/n/s/", "is empty");
    expect_bad_groups(&c, "t/n/s/@new", "is empty");
    expect_bad_groups(&c, "t/n/s/a/b", "contains '/'");
    expect_bad_groups(&c, "t/n/s/g@soon", "\"@soon\" is not @all, @new, @last or @<offset>");
    expect_bad_groups(&c, "t/n/s/g@", "is not @all");
    expect_bad_groups(&c, "t/n/s/g@-1", "is not @all");
    expect_bad_groups(&c, "t/n/s/g@99999999999999999999", "is not @all");
    expect_bad_groups(&c, "t/n/s/g,t/n/s/g@new", "group t/n/s/g is listed twice");
    assert_int_equal(c.ngroups, 1); /* a failed store keeps the list */
    fx_config_deinit(&c);
}

static void test_group_list_bound(void **state)
{
    (void)state;
    fx_config c;
    fx_config_defaults(&c);
    size_t cap = (FX_CONFIG_MAX_GROUPS + 1) * 16;
    char *list = malloc(cap), why[256];
    assert_non_null(list);
    size_t o = 0;
    for (int i = 0; i < FX_CONFIG_MAX_GROUPS; i++)
        o += (size_t)snprintf(list + o, cap - o, "%st/n/s/g%d", i ? "," : "", i);
    assert_int_equal(store(&c, "groups", list, why), 0);
    assert_int_equal(c.ngroups, FX_CONFIG_MAX_GROUPS);
    snprintf(list + o, cap - o, ",t/n/s/last");
    assert_int_equal(store(&c, "groups", list, why), -1);
    assert_string_equal(why, "more than 4096 groups");
    free(list);
    fx_config_deinit(&c);
}

static void test_flag_layer_sets_value_origin_and_refuses_unknown_keys(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    fx_config_diag d = {0};
    assert_int_equal(fx_config_load_flag(&c, "pub_queue_depth=128", &d), 0);
    assert_int_equal(c.pub_queue_depth, 128);
    const fx_config_origin *o = fx_config_origin_of(&c, "pub_queue_depth");
    assert_int_equal(o->from, FX_CONFIG_FROM_FLAG);
    /* The alias spells the same key. */
    assert_int_equal(fx_config_load_flag(&c, "admin_bind=127.0.0.1:9000", &d), 0);
    assert_string_equal(c.metrics_bind, "127.0.0.1:9000");
    assert_int_equal(fx_config_load_flag(&c, "no_such_key=1", &d), FX_ECONFIG);
    assert_non_null(strstr(d.error, "unknown key \"no_such_key\""));
    assert_int_equal(fx_config_load_flag(&c, "pub_queue_depth", &d), FX_ECONFIG);
    assert_non_null(strstr(d.error, "expected key=value"));
    assert_int_equal(fx_config_load_flag(&c, "pub_queue_depth=0", &d), FX_ECONFIG);
    assert_non_null(strstr(d.error, "pub_queue_depth"));
    assert_int_equal(fx_config_load_flag(&c, "initial_cwnd=10", &d), FX_ECONFIG);
    assert_non_null(strstr(d.error, "not supported"));
    fx_config_deinit(&c);
}

static void test_env_layer_applies_felix_variables_and_warns_on_others(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    fx_config_diag d = {0};
    char *env[] = {"FELIX_BROKER_PUB_QUEUE_DEPTH=99", "FELIX_NOT_A_SETTING=1", "HOME=/root",
                   "FELIX_PUMP_COLOCATE=1", NULL};
    assert_int_equal(fx_config_load_env_layer(&c, env, &d), 0);
    assert_int_equal(c.pub_queue_depth, 99);
    const fx_config_origin *o = fx_config_origin_of(&c, "pub_queue_depth");
    assert_int_equal(o->from, FX_CONFIG_FROM_ENV);
    assert_string_equal(o->name, "FELIX_BROKER_PUB_QUEUE_DEPTH");
    assert_int_equal(d.nwarnings, 2);
    assert_non_null(strstr(d.warnings[0], "FELIX_NOT_A_SETTING") != NULL ? d.warnings[0]
                                                                         : d.warnings[1]);
    char *bad[] = {"FELIX_SUB_QUEUE_POLICY=sometimes", NULL};
    assert_int_equal(fx_config_load_env_layer(&c, bad, &d), FX_ECONFIG);
    assert_non_null(strstr(d.error, "FELIX_SUB_QUEUE_POLICY"));
    assert_int_equal(fx_config_load_env_layer(&c, NULL, &d), 0);
    fx_config_deinit(&c);
}

static int load_text(fx_config *c, const char *text, fx_config_diag *d)
{
    fx_config_src src = {.text = text, .text_name = "t.yaml"};
    return fx_config_load_file_layer(c, &src, NULL, d);
}

static void test_yaml_layer_records_positions_and_names_errors_by_line(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    fx_config_diag d = {0};
    assert_int_equal(load_text(&c, "# comment\npub_queue_depth: 32\nstreams:\n  - t/n/s\n", &d), 0);
    assert_int_equal(c.pub_queue_depth, 32);
    assert_int_equal(c.nstreams, 1);
    const fx_config_origin *o = fx_config_origin_of(&c, "pub_queue_depth");
    assert_int_equal(o->from, FX_CONFIG_FROM_FILE);
    assert_int_equal(o->line, 2);
    assert_int_equal(o->col, 18);
    fx_config_deinit(&c);
    struct {
        const char *text, *want;
    } bad[] = {
        {"a: 1\n", "t.yaml:1:1: unknown key \"a\""},
        {"pub_queue_depth: 1\npub_queue_depth: 2\n", "set twice (first at line 1)"},
        {"pub_queue_depth: [1, 2]\n", "expected a single value"},
        {"- 1\n- 2\n", "must be a mapping"},
        {"pub_queue_depth: 1\n---\npub_queue_depth: 2\n", "more than one YAML document"},
        {"pub_queue_depth: \"unterminated\n", "YAML syntax error"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fx_config_defaults(&c);
        memset(&d, 0, sizeof(d));
        assert_int_equal(load_text(&c, bad[i].text, &d), FX_ECONFIG);
        if (strstr(d.error, bad[i].want) == NULL)
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, d.error, bad[i].want);
        fx_config_deinit(&c);
    }
    /* Keys of features Felix-C lacks warn and load. */
    fx_config_defaults(&c);
    memset(&d, 0, sizeof(d));
    assert_int_equal(load_text(&c, "cache_size: 1\nack_freq_disable: true\n", &d), 0);
    assert_int_equal(d.nwarnings, 2);
    fx_config_deinit(&c);
}

static void test_missing_file_names_the_path(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    fx_config_diag d = {0};
    fx_config_src src = {0};
    assert_int_equal(fx_config_load_file_layer(&c, &src, "/nonexistent/felix.yaml", &d),
                     FX_ECONFIG);
    assert_non_null(strstr(d.error, "cannot open config file /nonexistent/felix.yaml"));
    memset(&d, 0, sizeof(d));
    assert_int_equal(fx_config_load_file_layer(&c, &src, "/tmp", &d), FX_ECONFIG);
    assert_non_null(strstr(d.error, "not a regular file"));
    fx_config_deinit(&c);
}

static void test_cache_lists_declare_caches_and_refuse_bad_items(void **state)
{
    (void)state;
    fx_config c;
    fx_config_defaults(&c);
    char why[256];
    assert_int_equal(c.ncaches, 0);
    assert_int_equal(store(&c, "caches", "t1/default/sessions,t2/ns/c.1", why), 0);
    assert_int_equal(c.ncaches, 2);
    assert_string_equal(c.caches[0].tenant, "t1");
    assert_string_equal(c.caches[0].ns, "default");
    assert_string_equal(c.caches[0].stream, "sessions");
    assert_string_equal(c.caches[1].stream, "c.1");
    assert_int_equal(store(&c, "caches", "t1/ns", why), -1);
    assert_non_null(strstr(why, "is not tenant/namespace/cache"));
    assert_int_equal(store(&c, "caches", "t1/ns/a/b", why), -1);
    assert_int_equal(store(&c, "caches", "t/n/c,t/n/c", why), -1);
    assert_non_null(strstr(why, "cache t/n/c is listed twice"));
    assert_int_equal(c.ncaches, 2); /* unchanged by the refusals */
    assert_false(c.caches[0].durable);
    /* "@durable" declares a durable cache; nothing else may follow '@'. */
    assert_int_equal(store(&c, "caches", "t1/default/s@durable,t1/default/m", why), 0);
    assert_int_equal(c.ncaches, 2);
    assert_string_equal(c.caches[0].stream, "s");
    assert_true(c.caches[0].durable);
    assert_false(c.caches[1].durable);
    assert_int_equal(store(&c, "caches", "t1/default/s@durabl", why), -1);
    assert_non_null(strstr(why, "the only option after '@' is durable"));
    assert_int_equal(store(&c, "caches", "t1/default/s@durable,t1/default/s", why), -1);
    assert_non_null(strstr(why, "listed twice"));
    /* Streams and caches are apart. */
    assert_int_equal(c.nstreams, 0);
    fx_config_deinit(&c);
    assert_null(c.caches);

    fx_config_diag d = {0};
    fx_config_defaults(&c);
    assert_int_equal(
        load_text(&c, "auto_create_streams: false\ncaches:\n  - t1/default/a\n  - t1/default/b\n",
                  &d),
        0);
    assert_int_equal(c.ncaches, 2);
    assert_string_equal(c.caches[1].stream, "b");
    fx_config_deinit(&c);
    struct {
        const char *text, *want;
    } bad[] = {
        {"caches:\n  - t1/default\n", "t.yaml:2:5: caches: \"t1/default\" is not "
                                      "tenant/namespace/cache"},
        {"caches: t1/default/a\n", "caches: expected a sequence of \"tenant/namespace/cache\""},
        {"caches:\n  - [a]\n", "caches: an item is"},
        {"caches:\n  - t/n/c\n  - t/n/c\n", "listed twice"},
        {"cachez:\n  - t/n/c\n", "unknown key \"cachez\""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fx_config_defaults(&c);
        memset(&d, 0, sizeof(d));
        assert_int_equal(load_text(&c, bad[i].text, &d), FX_ECONFIG);
        if (strstr(d.error, bad[i].want) == NULL)
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, d.error, bad[i].want);
        fx_config_deinit(&c);
    }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_sizes_take_binary_and_decimal_units),
    cmocka_unit_test(test_bare_durations_take_the_unit_of_the_key_name),
    cmocka_unit_test(test_numbers_outside_the_key_bounds_are_refused),
    cmocka_unit_test(test_bools_enums_and_workers),
    cmocka_unit_test(test_addresses_strings_and_stream_lists),
    cmocka_unit_test(test_group_lists_and_their_starts),
    cmocka_unit_test(test_group_list_bound),
    cmocka_unit_test(test_flag_layer_sets_value_origin_and_refuses_unknown_keys),
    cmocka_unit_test(test_env_layer_applies_felix_variables_and_warns_on_others),
    cmocka_unit_test(test_yaml_layer_records_positions_and_names_errors_by_line),
    cmocka_unit_test(test_missing_file_names_the_path),
    cmocka_unit_test(test_cache_lists_declare_caches_and_refuse_bad_items),
};

FX_TEST_MAIN(tests)
