/* Unit tests of the per-source-address table (src/broker/peers.c): the
 * connection cap, how addresses are grouped (IPv4, IPv4-mapped, IPv6 /64),
 * the auth token bucket on a fake clock, and forgetting idle entries. */
/* fx-test-libs: fx_broker fx_quic fx_wire fx_base */
#include <arpa/inet.h>
#include <netinet/in.h>

#include "fx_test.h"

#include "base/loop.h"
#include "broker/peers.h"

static fxb_peer_key v4(const char *ip)
{
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(5000)};
    assert_int_equal(inet_pton(AF_INET, ip, &in.sin_addr), 1);
    fxb_peer_key k;
    fxb_peer_key_of((const struct sockaddr *)&in, &k);
    return k;
}

static fxb_peer_key v6(const char *ip)
{
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(5000)};
    assert_int_equal(inet_pton(AF_INET6, ip, &in6.sin6_addr), 1);
    fxb_peer_key k;
    fxb_peer_key_of((const struct sockaddr *)&in6, &k);
    return k;
}

static void test_connections_are_capped_per_address(void **state)
{
    fxb_peers t;
    assert_int_equal(fxb_peers_init(&t, 2, 0), 0);
    fxb_peer_key a = v4("127.0.0.1"), b = v4("127.0.0.2");
    assert_true(fxb_peers_conn_take(&t, &a, 0));
    assert_true(fxb_peers_conn_take(&t, &a, 0));
    assert_false(fxb_peers_conn_take(&t, &a, 0));
    assert_true(fxb_peers_conn_take(&t, &b, 0));
    assert_int_equal(fxb_peers_conns(&t, &a), 2);
    fxb_peers_conn_give(&t, &a, 0);
    assert_true(fxb_peers_conn_take(&t, &a, 0));
    fxb_peers_deinit(&t);
}

static void test_addresses_group_by_host(void **state)
{
    fxb_peer_key a = v4("10.1.2.3"), mapped = v6("::ffff:10.1.2.3");
    assert_memory_equal(&a, &mapped, sizeof(a));
    fxb_peer_key x = v6("2001:db8:1:2::1"), y = v6("2001:db8:1:2:ffff::9"),
                 z = v6("2001:db8:1:3::1");
    assert_memory_equal(&x, &y, sizeof(x)); /* same /64 */
    assert_memory_not_equal(&x, &z, sizeof(x));
    char s[64];
    fxb_peer_key_str(&x, s, sizeof(s));
    assert_string_equal(s, "2001:db8:1:2::/64");
    fxb_peer_key_str(&mapped, s, sizeof(s));
    assert_string_equal(s, "10.1.2.3");
}

static void test_auth_bucket_refills_at_its_rate(void **state)
{
    fxb_peers t;
    assert_int_equal(fxb_peers_init(&t, 0, 4), 0);
    fxb_peer_key a = v4("127.0.0.2"), b = v4("127.0.0.3");
    uint64_t now = 1000 * FX_NS_PER_S;
    for (int i = 0; i < 4; i++)
        assert_true(fxb_peers_auth_take(&t, &a, now));
    assert_false(fxb_peers_auth_take(&t, &a, now));
    assert_true(fxb_peers_auth_take(&t, &b, now));                    /* its own bucket */
    assert_false(fxb_peers_auth_take(&t, &a, now + FX_NS_PER_S / 8)); /* half a token */
    assert_true(fxb_peers_auth_take(&t, &a, now + FX_NS_PER_S / 4));  /* one */
    assert_false(fxb_peers_auth_take(&t, &a, now + FX_NS_PER_S / 4));
    for (int i = 0; i < 4; i++) /* refilled to the burst, no more */
        assert_true(fxb_peers_auth_take(&t, &a, now + 100 * FX_NS_PER_S));
    assert_false(fxb_peers_auth_take(&t, &a, now + 100 * FX_NS_PER_S));
    fxb_peers_deinit(&t);
}

static void test_idle_entries_are_forgotten(void **state)
{
    fxb_peers t;
    assert_int_equal(fxb_peers_init(&t, 8, 2), 0);
    fxb_peer_key a = v4("192.0.2.1");
    assert_true(fxb_peers_conn_take(&t, &a, 0));
    assert_int_equal(fxb_peers_size(&t), 1);
    fxb_peers_conn_give(&t, &a, 0); /* no connection, full bucket: nothing to keep */
    assert_int_equal(fxb_peers_size(&t), 0);
    assert_true(fxb_peers_conn_take(&t, &a, 0));
    assert_true(fxb_peers_auth_take(&t, &a, 0));
    fxb_peers_conn_give(&t, &a, 0); /* the spent token is remembered */
    assert_int_equal(fxb_peers_size(&t), 1);
    assert_true(fxb_peers_conn_take(&t, &a, 10 * FX_NS_PER_S));
    fxb_peers_conn_give(&t, &a, 10 * FX_NS_PER_S); /* refilled by then: forgotten */
    assert_int_equal(fxb_peers_size(&t), 0);
    fxb_peers_deinit(&t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_connections_are_capped_per_address),
    cmocka_unit_test(test_addresses_group_by_host),
    cmocka_unit_test(test_auth_bucket_refills_at_its_rate),
    cmocka_unit_test(test_idle_entries_are_forgotten),
};

FX_TEST_MAIN(tests)
