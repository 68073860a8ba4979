/* Unit tests for client/opts.c: the defaults, the FELIX_* overlay (values,
 * 0 keeping the current one, refusals naming the variable), validation
 * (zero fields defaulted, a shorter struct from an older caller, trust
 * combinations, bounds), the per-thread last-error text, the mapping of
 * broker error texts and the server address split. */
/* fx-test-libs: fx_client fx_quic fx_wire fx_base */
#include "client/client.h"
#include "felix/error.h"
#include "felix/felix.h"

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"

static const char *last_error(void)
{
    static char buf[512];
    fx_client_last_error(NULL, buf, sizeof(buf));
    return buf;
}

static void test_defaults_are_the_documented_ones(void **state)
{
    fx_client_opts o;
    memset(&o, 0xff, sizeof(o));
    fx_client_opts_init(&o);
    assert_int_equal(o.size, sizeof(o));
    assert_string_equal(o.server, "127.0.0.1:5000");
    assert_null(o.server_name);
    assert_null(o.ca_file);
    assert_string_equal(o.tenant, "t1");
    assert_string_equal(o.token, "");
    assert_int_equal(o.publish_conn_pool, 4);
    assert_int_equal(o.publish_streams_per_conn, 2);
    assert_int_equal(o.publish_queue_depth, 64);
    assert_int_equal(o.publish_inflight_bytes, 4u << 20);
    assert_int_equal(o.event_conn_pool, 1);
    assert_int_equal(o.sub_queue_capacity, 256);
    assert_int_equal(o.sub_queue_policy, FX_POLICY_DROP_NEW);
    assert_int_equal(o.max_frame_bytes, 16u << 20);
    assert_true(o.reconnect);
    assert_true(o.publish_coalesce);
    assert_int_equal(o.publish_linger_us, 0);
    assert_int_equal(o.publish_ack_timeout_ms, 30000);
}

static void test_env_overlays_set_variables_and_zero_keeps(void **state)
{
    setenv("FELIX_AUTH_TENANT", "acme", 1);
    setenv("FELIX_PUB_CONN_POOL", "8", 1);
    setenv("FELIX_PUBLISH_QUEUE_DEPTH", "0", 1);
    setenv("FELIX_PUBLISH_INFLIGHT_BYTES", "1048576", 1);
    setenv("FELIX_PUB_SHARDING", "rr", 1);
    setenv("FELIX_CLIENT_SUB_QUEUE_POLICY", "drop_old", 1);
    setenv("FELIX_PUBLISH_COALESCE", "off", 1);
    setenv("FELIX_PUBLISH_ACK_TIMEOUT_MS", "1500", 1);
    setenv("FELIX_IDEMPOTENT", "1", 1);
    fx_client_opts o;
    fx_client_opts_init(&o);
    assert_false(o.idempotent);
    assert_int_equal(fx_client_opts_from_env(&o), 0);
    assert_true(o.idempotent);
    assert_string_equal(o.tenant, "acme");
    assert_int_equal(o.publish_conn_pool, 8);
    assert_int_equal(o.publish_queue_depth, 64);
    assert_int_equal(o.publish_inflight_bytes, 1048576);
    assert_int_equal(o.publish_sharding, FX_SHARDING_RR);
    assert_int_equal(o.sub_queue_policy, FX_POLICY_DROP_OLD);
    assert_false(o.publish_coalesce);
    assert_int_equal(o.publish_ack_timeout_ms, 1500);
    const char *names[] = {"FELIX_AUTH_TENANT",         "FELIX_PUB_CONN_POOL",
                           "FELIX_PUBLISH_QUEUE_DEPTH", "FELIX_PUBLISH_INFLIGHT_BYTES",
                           "FELIX_PUB_SHARDING",        "FELIX_CLIENT_SUB_QUEUE_POLICY",
                           "FELIX_PUBLISH_COALESCE",    "FELIX_PUBLISH_ACK_TIMEOUT_MS",
                           "FELIX_IDEMPOTENT"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        unsetenv(names[i]);
}

static void test_env_refusals_name_the_variable_and_keep_the_value(void **state)
{
    struct {
        const char *name, *value;
    } bad[] = {
        {"FELIX_PUB_CONN_POOL", "65"},          {"FELIX_PUB_CONN_POOL", "-1"},
        {"FELIX_PUB_CONN_POOL", "4x"},          {"FELIX_PUB_SHARDING", "random"},
        {"FELIX_CLIENT_SUB_QUEUE_POLICY", "x"}, {"FELIX_PUBLISH_COALESCE", "maybe"},
        {"FELIX_IDEMPOTENT", "yes please"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv(bad[i].name, bad[i].value, 1);
        fx_client_opts o;
        fx_client_opts_init(&o);
        assert_int_equal(fx_client_opts_from_env(&o), FX_ECONFIG);
        assert_non_null(strstr(last_error(), bad[i].name));
        assert_non_null(strstr(last_error(), bad[i].value));
        assert_int_equal(o.publish_conn_pool, 4);
        unsetenv(bad[i].name);
    }
}

static void test_check_fills_zero_fields_and_accepts_null(void **state)
{
    fx_client_opts out;
    assert_int_equal(fxc_client_opts_check(NULL, &out), 0);
    assert_string_equal(out.server, "127.0.0.1:5000");
    fx_client_opts o;
    memset(&o, 0, sizeof(o));
    o.size = sizeof(o);
    assert_int_equal(fxc_client_opts_check(&o, &out), 0);
    assert_int_equal(out.publish_conn_pool, 4);
    assert_int_equal(out.max_frame_bytes, 16u << 20);
    assert_int_equal(out.publish_ack_timeout_ms, 30000);
    assert_string_equal(out.tenant, "t1");
    assert_string_equal(out.token, "");
}

static void test_check_gives_an_older_shorter_struct_defaults(void **state)
{
    fx_client_opts o;
    fx_client_opts_init(&o);
    o.publish_conn_pool = 7;
    o.publish_linger_us = 999; /* beyond the older struct: not read */
    o.size = offsetof(fx_client_opts, stream_window_bytes);
    fx_client_opts out;
    assert_int_equal(fxc_client_opts_check(&o, &out), 0);
    assert_int_equal(out.size, sizeof(out));
    assert_int_equal(out.publish_conn_pool, 7);
    assert_int_equal(out.publish_linger_us, 0);
    assert_true(out.publish_coalesce);
    o.size = 8;
    assert_int_equal(fxc_client_opts_check(&o, &out), FX_ECONFIG);
    assert_non_null(strstr(last_error(), "option size"));
    o.size = sizeof(o) + 8;
    assert_int_equal(fxc_client_opts_check(&o, &out), FX_ECONFIG);
}

static void test_check_refuses_trust_combinations_and_bad_bounds(void **state)
{
    fx_client_opts o, out;
#define REFUSED(stmt, field)                                                                       \
    do {                                                                                           \
        fx_client_opts_init(&o);                                                                   \
        stmt;                                                                                      \
        assert_int_equal(fxc_client_opts_check(&o, &out), FX_ECONFIG);                             \
        assert_non_null(strstr(last_error(), "option " field));                                    \
    } while (0)
    REFUSED((o.pin_sha256 = "ab", o.ca_file = "/ca.pem"), "pin_sha256");
    REFUSED((o.insecure = true, o.pin_sha256 = "ab"), "insecure");
    REFUSED((o.insecure = true, o.ca_file = "/ca.pem"), "insecure");
    REFUSED(o.tenant = "", "tenant");
    REFUSED(o.publish_conn_pool = 65, "publish_conn_pool");
    REFUSED(o.publish_streams_per_conn = 65, "publish_conn_pool");
    REFUSED(o.publish_sharding = (fx_sharding)7, "publish_sharding");
    REFUSED(o.sub_queue_policy = (fx_policy)7, "sub_queue_policy");
    REFUSED(o.publish_queue_depth = (1u << 20) + 1, "sub_queue_capacity");
    REFUSED(o.connect_timeout_ms = -1, "connect_timeout_ms");
    REFUSED(o.max_frame_bytes = 11, "max_frame_bytes");
    REFUSED(o.publish_linger_us = 1000001, "publish_linger_us");
    REFUSED(o.publish_ack_timeout_ms = -5, "publish_ack_timeout_ms");
    REFUSED(o.event_conn_pool = 2, "event_conn_pool");
#undef REFUSED
    /* Empty strings are no trust setting: insecure with an empty pin passes. */
    fx_client_opts_init(&o);
    o.insecure = true;
    o.pin_sha256 = "";
    o.ca_file = "";
    assert_int_equal(fxc_client_opts_check(&o, &out), 0);
    o.publish_linger_us = 1000000;
    assert_int_equal(fxc_client_opts_check(&o, &out), 0);
}

static void *set_elsewhere(void *arg)
{
    fxc_client_set_error(FX_EAUTH, "from another thread");
    char buf[64];
    fx_client_last_error(NULL, buf, sizeof(buf));
    assert_string_equal(buf, "from another thread");
    return NULL;
}

static void test_last_error_is_per_thread_and_truncates(void **state)
{
    assert_int_equal(fxc_client_set_error(FX_ECONFIG, "mine %d", 42), FX_ECONFIG);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, set_elsewhere, NULL), 0);
    pthread_join(t, NULL);
    assert_string_equal(last_error(), "mine 42");
    char small[5];
    assert_int_equal(fx_client_last_error(NULL, small, sizeof(small)), 7);
    assert_string_equal(small, "mine");
    assert_int_equal(fx_client_last_error(NULL, NULL, 0), 7);
}

static void test_remote_texts_map_to_codes(void **state)
{
    assert_int_equal(fxc_client_map_remote(NULL), FX_EREMOTE);
    assert_int_equal(fxc_client_map_remote("stream not found: t/n/s"), FX_ENOSTREAM);
    assert_int_equal(fxc_client_map_remote("forbidden"), FX_EFORBIDDEN);
    assert_int_equal(fxc_client_map_remote("broker shutting down"), FX_ESHUTDOWN);
    assert_int_equal(fxc_client_map_remote("server overloaded"), FX_EOVERLOAD);
    assert_int_equal(fxc_client_map_remote("queue full"), FX_EOVERLOAD);
    assert_int_equal(fxc_client_map_remote("auth refused: bad signature"), FX_EAUTH);
    assert_int_equal(fxc_client_map_remote("something else"), FX_EREMOTE);
}

static void test_server_host_splits_names_and_v6(void **state)
{
    char host[64];
    assert_int_equal(fxc_client_server_host("broker.example:5000", host, sizeof(host)), 0);
    assert_string_equal(host, "broker.example");
    assert_int_equal(fxc_client_server_host("[::1]:5000", host, sizeof(host)), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(fxc_client_server_host("nohost", host, sizeof(host)), FX_ECONFIG);
    assert_non_null(strstr(last_error(), "'nohost' is not host:port"));
    assert_int_equal(fxc_client_server_host(NULL, host, sizeof(host)), FX_ECONFIG);
    assert_int_equal(fxc_client_server_host("abcdef:1", host, 4), FX_ECONFIG);
    assert_non_null(strstr(last_error(), "host too long"));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_defaults_are_the_documented_ones),
    cmocka_unit_test(test_env_overlays_set_variables_and_zero_keeps),
    cmocka_unit_test(test_env_refusals_name_the_variable_and_keep_the_value),
    cmocka_unit_test(test_check_fills_zero_fields_and_accepts_null),
    cmocka_unit_test(test_check_gives_an_older_shorter_struct_defaults),
    cmocka_unit_test(test_check_refuses_trust_combinations_and_bad_bounds),
    cmocka_unit_test(test_last_error_is_per_thread_and_truncates),
    cmocka_unit_test(test_remote_texts_map_to_codes),
    cmocka_unit_test(test_server_host_splits_names_and_v6),
};

FX_TEST_MAIN(tests)
