/* Unit tests for endpoint.c with endpoints created on a loop that is not
 * running: the default options and the FELIX_* overlay, options and
 * addresses refused at creation, address parsing and the IPv4-mapped form
 * a dual-stack socket needs, the port and certificate fingerprint an
 * endpoint reports, and where a datagram goes (a client never accepts an
 * Initial; a draining server refuses new ones). */
/* fx-test-libs: fx_quic fx_base */
#define _XOPEN_SOURCE 700
#include "base/log.h"
#include "base/loop.h"
#include "felix/error.h"
#include "quic/internal.h"
#include "quic/quic.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fx_test.h"

static const fx_quic_callbacks CBS = {0};
static fx_loop *loop;
static char dir[64];

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

static int setup(void **state)
{
    fx_log_set_level(FX_LOG_ERROR);
    snprintf(dir, sizeof(dir), "/tmp/fx-ep-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    return fx_loop_new(&loop, &(fx_loop_opts){.name = "ep-test", .cpu = -1});
}

static int teardown(void **state)
{
    fx_loop_free(loop);
    loop = NULL;
    return nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

static fx_quic_opts opts(void)
{
    fx_quic_opts o;
    fx_quic_opts_default(&o);
    o.state_dir = dir;
    o.udp_send_buffer = o.udp_recv_buffer = 1 << 20;
    return o;
}

static void test_defaults(void **state)
{
    fx_quic_opts o;
    memset(&o, 0xff, sizeof(o));
    fx_quic_opts_default(&o);
    assert_int_equal(o.idle_timeout_ns, 30 * FX_NS_PER_S);
    assert_int_equal(o.stream_window, 1u << 20);
    assert_int_equal(o.max_conn_window, 64u << 20);
    assert_int_equal(o.initial_mtu, 1200);
    assert_int_equal(o.max_udp_payload, FX_QUIC_MAX_DATAGRAM);
    assert_int_equal(o.loopback_mtu, FX_QUIC_LOOPBACK_MTU);
    assert_true(o.gso);
    assert_true(o.gro);
    assert_string_equal(o.alpn, "felix");
    assert_null(o.state_dir);
    assert_null(o.cert_file);
}

static void test_env_overlay_applies_good_values_and_refuses_bad_ones(void **state)
{
    setenv("FELIX_UDP_SEND_BUFFER", "65536", 1);
    setenv("FELIX_CONN_STATS_MS", "5", 1);
    setenv("FELIX_LOOPBACK_MTU", "0", 1);
    fx_quic_opts o;
    fx_quic_opts_default(&o);
    assert_int_equal(fx_quic_opts_from_env(&o), 0);
    assert_int_equal(o.udp_send_buffer, 65536);
    assert_int_equal(o.stats_log_ns, 5 * 1000000ull);
    assert_int_equal(o.loopback_mtu, 0);
    /* A bad value is refused; the good ones still apply. */
    setenv("FELIX_INITIAL_MTU", "100", 1);
    setenv("FELIX_UDP_RECV_BUFFER", "131072", 1);
    fx_quic_opts_default(&o);
    assert_int_equal(fx_quic_opts_from_env(&o), FX_ECONFIG);
    assert_int_equal(o.initial_mtu, 1200);
    assert_int_equal(o.udp_recv_buffer, 131072);
    unsetenv("FELIX_INITIAL_MTU");
    setenv("FELIX_LOOPBACK_MTU", "1000", 1);
    assert_int_equal(fx_quic_opts_from_env(&o), FX_ECONFIG);
    setenv("FELIX_LOOPBACK_MTU", "12x", 1);
    assert_int_equal(fx_quic_opts_from_env(&o), FX_ECONFIG);
    const char *names[] = {"FELIX_UDP_SEND_BUFFER", "FELIX_UDP_RECV_BUFFER", "FELIX_CONN_STATS_MS",
                           "FELIX_LOOPBACK_MTU"};
    for (size_t i = 0; i < 4; i++)
        unsetenv(names[i]);
}

static void test_creation_refuses_bad_options_and_addresses(void **state)
{
    fx_quic_endpoint *ep = NULL;
    fx_quic_opts o = opts();
    o.mtu_upper_bound = 1000;
    assert_int_equal(fx_quic_server_new(&ep, loop, "127.0.0.1", 0, &o, &CBS, NULL), FX_ECONFIG);
    o = opts();
    o.loopback_mtu = 800;
    assert_int_equal(fx_quic_client_new(&ep, loop, &o, &CBS, NULL), FX_ECONFIG);
    o = opts();
    o.unacked_cap = 0;
    assert_int_equal(fx_quic_server_new(&ep, loop, "127.0.0.1", 0, &o, &CBS, NULL), FX_ECONFIG);
    o = opts();
    assert_int_equal(fx_quic_server_new(&ep, loop, "not-an-ip", 0, &o, &CBS, NULL), FX_ECONFIG);
    o.client_bind_ip = "999.1.1.1";
    assert_int_equal(fx_quic_client_new(&ep, loop, &o, &CBS, NULL), FX_ECONFIG);
    assert_null(ep);
}

static void test_parse_addr_takes_numeric_v4_and_v6(void **state)
{
    struct sockaddr_storage ss;
    socklen_t len = 0;
    assert_int_equal(fx_quic_parse_addr("10.1.2.3", 4433, &ss, &len), 0);
    assert_int_equal(len, sizeof(struct sockaddr_in));
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)&ss;
    assert_int_equal(a4->sin_family, AF_INET);
    assert_int_equal(ntohs(a4->sin_port), 4433);
    assert_int_equal(ntohl(a4->sin_addr.s_addr), 0x0a010203);
    assert_int_equal(fx_quic_parse_addr("::1", 7, &ss, &len), 0);
    assert_int_equal(len, sizeof(struct sockaddr_in6));
    assert_int_equal(ss.ss_family, AF_INET6);
    assert_int_equal(ntohs(((const struct sockaddr_in6 *)&ss)->sin6_port), 7);
    assert_int_equal(fx_quic_parse_addr("localhost", 7, &ss, &len), FX_ECONFIG);
    assert_int_equal(fx_quic_parse_addr("[::1]", 7, &ss, &len), FX_ECONFIG);
}

static void test_dual_stack_socket_maps_ipv4_targets(void **state)
{
    fx_quic_opts o = opts();
    fx_quic_endpoint *any = NULL, *v4 = NULL;
    assert_int_equal(fx_quic_client_new(&any, loop, &o, &CBS, NULL), 0); /* "::" */
    o.client_bind_ip = "127.0.0.1";
    assert_int_equal(fx_quic_client_new(&v4, loop, &o, &CBS, NULL), 0);
    struct sockaddr_storage ss;
    socklen_t len;
    if (any->local.ss_family == AF_INET6) {
        assert_int_equal(fx_quic_parse_addr("127.0.0.1", 5000, &ss, &len), 0);
        assert_int_equal(fx_quic_addr_for_socket(any, &ss, &len), 0);
        assert_int_equal(ss.ss_family, AF_INET6);
        assert_int_equal(len, sizeof(struct sockaddr_in6));
        const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&ss;
        assert_true(IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr));
        assert_memory_equal(&a6->sin6_addr.s6_addr[12], "\x7f\x00\x00\x01", 4);
        assert_int_equal(ntohs(a6->sin6_port), 5000);
    }
    /* Same family: unchanged. An IPv6 target on an IPv4 socket: refused. */
    assert_int_equal(fx_quic_parse_addr("127.0.0.1", 5000, &ss, &len), 0);
    assert_int_equal(fx_quic_addr_for_socket(v4, &ss, &len), 0);
    assert_int_equal(ss.ss_family, AF_INET);
    assert_int_equal(fx_quic_parse_addr("::1", 5000, &ss, &len), 0);
    assert_int_equal(fx_quic_addr_for_socket(v4, &ss, &len), FX_ECONFIG);
    fx_quic_endpoint_free(any);
    fx_quic_endpoint_free(v4);
}

static void test_server_reports_port_and_certificate_fingerprint(void **state)
{
    fx_quic_opts o = opts();
    fx_quic_endpoint *srv = NULL, *cli = NULL;
    assert_int_equal(fx_quic_server_new(&srv, loop, "127.0.0.1", 0, &o, &CBS, NULL), 0);
    assert_true(fx_quic_endpoint_port(srv) != 0);
    assert_ptr_equal(fx_quic_endpoint_loop(srv), loop);
    char path[128], hex[65];
    snprintf(path, sizeof(path), "%s/tls-cert.pem", dir);
    assert_int_equal(fx_quic_cert_fingerprint(path, hex), 0);
    assert_string_equal(fx_quic_endpoint_fingerprint(srv), hex);
    /* The stateless-reset secret is kept in state_dir too. */
    snprintf(path, sizeof(path), "%s/quic-reset.key", dir);
    assert_int_equal(access(path, R_OK), 0);
    /* A second server on the same port is refused. */
    assert_int_equal(
        fx_quic_server_new(&cli, loop, "127.0.0.1", fx_quic_endpoint_port(srv), &o, &CBS, NULL),
        -EADDRINUSE);
    assert_int_equal(fx_quic_client_new(&cli, loop, &o, &CBS, NULL), 0);
    assert_string_equal(fx_quic_endpoint_fingerprint(cli), "");
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(srv, &st);
    assert_int_equal(st.conns_open, 0);
    fx_quic_endpoint_free(cli);
    fx_quic_endpoint_free(srv);
    fx_quic_endpoint_free(NULL);
}

/* A 1200-byte QUIC v1 Initial (header only meaningful). */
static void initial(uint8_t *b)
{
    static const uint8_t head[] = {0xC3, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6,
                                   7,    8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 0};
    memset(b, 0x5a, 1200);
    memcpy(b, head, sizeof(head));
    size_t rest = 1200 - sizeof(head) - 2;
    b[sizeof(head)] = (uint8_t)(0x40 | (rest >> 8));
    b[sizeof(head) + 1] = (uint8_t)rest;
}

static void test_datagrams_a_client_or_draining_server_refuses(void **state)
{
    fx_quic_opts o = opts();
    o.client_bind_ip = "127.0.0.1";
    fx_quic_endpoint *srv = NULL, *cli = NULL;
    assert_int_equal(fx_quic_server_new(&srv, loop, "127.0.0.1", 0, &o, &CBS, NULL), 0);
    assert_int_equal(fx_quic_client_new(&cli, loop, &o, &CBS, NULL), 0);
    struct sockaddr_in from = {
        .sin_family = AF_INET, .sin_port = htons(9), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    uint8_t b[1200];
    initial(b);
    fx_quic_ep_on_datagram(cli, (struct sockaddr *)&from, sizeof(from), b, sizeof(b));
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(cli, &st);
    assert_int_equal(st.rx_dropped, 1);
    assert_int_equal(st.conns_open, 0);
    /* An unknown version or a packet too short to name a connection. */
    fx_quic_ep_on_datagram(cli, (struct sockaddr *)&from, sizeof(from), (const uint8_t *)"\x40", 1);
    fx_quic_endpoint_get_stats(cli, &st);
    assert_int_equal(st.rx_dropped, 2);
    assert_int_equal(fx_quic_endpoint_drain(srv, fx_now_ns() + FX_NS_PER_S), 0);
    fx_quic_ep_on_datagram(srv, (struct sockaddr *)&from, sizeof(from), b, sizeof(b));
    fx_quic_endpoint_get_stats(srv, &st);
    assert_int_equal(st.rx_dropped, 1);
    assert_int_equal(st.conns_accepted, 0);
    fx_quic_endpoint_free(cli);
    fx_quic_endpoint_free(srv);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
static const struct CMUnitTest tests[] = {
    T(test_defaults),
    T(test_env_overlay_applies_good_values_and_refuses_bad_ones),
    T(test_creation_refuses_bad_options_and_addresses),
    T(test_parse_addr_takes_numeric_v4_and_v6),
    T(test_dual_stack_socket_maps_ipv4_targets),
    T(test_server_reports_port_and_certificate_fingerprint),
    T(test_datagrams_a_client_or_draining_server_refuses),
};

FX_TEST_MAIN(tests)
