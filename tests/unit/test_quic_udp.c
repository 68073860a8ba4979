/* Unit tests for udp.c on loopback sockets, with endpoints created but no
 * loop running: the socket it opens (bound port, non-blocking, bind
 * errors), sends split into datagrams of the segment size with and without
 * GSO, receives counted and handed on (undecodable ones dropped), the drop
 * hook, and the source address used on wildcard servers. */
/* fx-test-libs: fx_quic fx_base */
#define _XOPEN_SOURCE 700
#include "base/log.h"
#include "base/loop.h"
#include "felix/error.h"
#include "quic/internal.h"
#include "quic/quic.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "fx_test.h"

static fx_loop *loop;
static const fx_quic_callbacks CBS = {0};

static int setup(void **state)
{
    fx_log_set_level(FX_LOG_ERROR);
    return fx_loop_new(&loop, &(fx_loop_opts){.name = "udp-test", .cpu = -1});
}

static int teardown(void **state)
{
    fx_loop_free(loop);
    loop = NULL;
    return 0;
}

static fx_quic_endpoint *client(bool gso)
{
    fx_quic_opts o;
    fx_quic_opts_default(&o);
    o.client_bind_ip = "127.0.0.1";
    o.gso = gso;
    o.udp_send_buffer = o.udp_recv_buffer = 1 << 20;
    fx_quic_endpoint *ep = NULL;
    assert_int_equal(fx_quic_client_new(&ep, loop, &o, &CBS, NULL), 0);
    return ep;
}

/* A plain UDP socket on 127.0.0.1 with a receive timeout; its address in |sa|. */
static int peer(struct sockaddr_in *sa)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    *sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)sa, sizeof(*sa)), 0);
    socklen_t len = sizeof(*sa);
    assert_int_equal(getsockname(fd, (struct sockaddr *)sa, &len), 0);
    struct timeval tv = {.tv_sec = 2};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    return fd;
}

static void test_open_binds_a_nonblocking_socket_and_reports_its_port(void **state)
{
    fx_quic_endpoint *ep = client(true);
    uint16_t port = fx_quic_endpoint_port(ep);
    assert_true(port != 0);
    assert_int_equal(ep->port, port);
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    assert_int_equal(getsockname(ep->fd, (struct sockaddr *)&sa, &len), 0);
    assert_int_equal(ntohs(sa.sin_port), port);
    assert_int_equal(sa.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
    assert_true(fcntl(ep->fd, F_GETFL) & O_NONBLOCK);
    assert_true(fcntl(ep->fd, F_GETFD) & FD_CLOEXEC);
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(ep, &st);
    assert_true(st.sndbuf > 0 && st.rcvbuf > 0);
    fx_quic_endpoint_free(ep);
}

static void test_open_on_a_taken_port_fails_and_leaves_no_socket(void **state)
{
    fx_quic_endpoint *ep = client(true);
    static fx_quic_endpoint other;
    memset(&other, 0, sizeof(other));
    other.fd = -1;
    fx_quic_opts_default(&other.o);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(fx_quic_endpoint_port(ep)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(fx_quic_udp_open(&other, (struct sockaddr *)&sa, sizeof(sa)), -EADDRINUSE);
    assert_int_equal(other.fd, -1);
    /* A free port: bound, its number filled in. */
    sa.sin_port = 0;
    assert_int_equal(fx_quic_udp_open(&other, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_true(other.fd >= 0);
    assert_true(other.port != 0);
    assert_int_not_equal(other.port, fx_quic_endpoint_port(ep));
    close(other.fd);
    fx_quic_endpoint_free(ep);
}

static void send_split(bool gso)
{
    fx_quic_endpoint *ep = client(gso);
    struct sockaddr_in to;
    int fd = peer(&to);
    uint8_t data[2500];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 7);
    assert_int_equal(
        fx_quic_udp_send(ep, (struct sockaddr *)&to, sizeof(to), NULL, data, sizeof(data), 1000),
        0);
    size_t want[] = {1000, 1000, 500}, off = 0;
    for (size_t i = 0; i < 3; i++) {
        uint8_t got[4096];
        ssize_t n = recv(fd, got, sizeof(got), 0);
        assert_int_equal(n, (ssize_t)want[i]);
        assert_memory_equal(got, data + off, want[i]);
        off += want[i];
    }
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(ep, &st);
    assert_int_equal(st.tx_datagrams, 3);
    assert_int_equal(st.tx_datagram_max, 1000);
    /* One sendmsg with GSO; without it one sendmmsg batch. */
    assert_int_equal(st.tx_sendmsg, 1);
    /* A payload within one segment is one datagram of its length. */
    assert_int_equal(
        fx_quic_udp_send(ep, (struct sockaddr *)&to, sizeof(to), NULL, data, 300, 1000), 0);
    uint8_t got[4096];
    assert_int_equal(recv(fd, got, sizeof(got), 0), 300);
    close(fd);
    fx_quic_endpoint_free(ep);
}

static void test_send_splits_into_segments_with_gso(void **state)
{
    send_split(true);
}

static void test_send_splits_into_segments_without_gso(void **state)
{
    send_split(false);
}

static void test_read_counts_datagrams_and_drops_undecodable_ones(void **state)
{
    fx_quic_endpoint *ep = client(true);
    struct sockaddr_in from;
    int fd = peer(&from);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons(fx_quic_endpoint_port(ep)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int i = 0; i < 3; i++)
        assert_int_equal(sendto(fd, "x", 1, 0, (struct sockaddr *)&to, sizeof(to)), 1);
    usleep(20000);
    fx_quic_udp_read(ep);
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(ep, &st);
    assert_int_equal(st.rx_datagrams, 3);
    assert_int_equal(st.rx_dropped, 3);
    /* Nothing left: a second read finds nothing and returns. */
    fx_quic_udp_read(ep);
    fx_quic_endpoint_get_stats(ep, &st);
    assert_int_equal(st.rx_datagrams, 3);
    close(fd);
    fx_quic_endpoint_free(ep);
}

static void test_drop_hook_drops_all_or_nothing(void **state)
{
    fx_quic_endpoint *ep = client(true);
    assert_false(fx_quic_test_drop(ep));
    fx_quic_endpoint_set_test_drop(ep, 1000);
    for (int i = 0; i < 50; i++)
        assert_true(fx_quic_test_drop(ep));
    struct sockaddr_in from;
    int fd = peer(&from);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons(fx_quic_endpoint_port(ep)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(sendto(fd, "x", 1, 0, (struct sockaddr *)&to, sizeof(to)), 1);
    usleep(20000);
    fx_quic_udp_read(ep);
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(ep, &st);
    assert_int_equal(st.test_dropped, 51);
    assert_int_equal(st.rx_datagrams, 1);
    assert_int_equal(st.rx_dropped, 0); /* the hook took it before decoding */
    fx_quic_endpoint_set_test_drop(ep, 0);
    assert_false(fx_quic_test_drop(ep));
    close(fd);
    fx_quic_endpoint_free(ep);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

static void test_source_address_only_on_wildcard_servers(void **state)
{
    fx_quic_endpoint *cl = client(true);
    struct sockaddr_in local = {.sin_family = AF_INET};
    assert_null(fx_quic_src_for(cl, &local));
    char dir[64];
    snprintf(dir, sizeof(dir), "/tmp/fx-udp-XXXXXX");
    assert_non_null(mkdtemp(dir));
    fx_quic_opts o;
    fx_quic_opts_default(&o);
    o.state_dir = dir;
    fx_quic_endpoint *any = NULL, *lo = NULL;
    assert_int_equal(fx_quic_server_new(&any, loop, "0.0.0.0", 0, &o, &CBS, NULL), 0);
    assert_int_equal(fx_quic_server_new(&lo, loop, "127.0.0.1", 0, &o, &CBS, NULL), 0);
    assert_ptr_equal(fx_quic_src_for(any, &local), (const struct sockaddr *)&local);
    assert_null(fx_quic_src_for(lo, &local));
    fx_quic_endpoint_free(any);
    fx_quic_endpoint_free(lo);
    fx_quic_endpoint_free(cl);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
static const struct CMUnitTest tests[] = {
    T(test_open_binds_a_nonblocking_socket_and_reports_its_port),
    T(test_open_on_a_taken_port_fails_and_leaves_no_socket),
    T(test_send_splits_into_segments_with_gso),
    T(test_send_splits_into_segments_without_gso),
    T(test_read_counts_datagrams_and_drops_undecodable_ones),
    T(test_drop_hook_drops_all_or_nothing),
    T(test_source_address_only_on_wildcard_servers),
};

FX_TEST_MAIN(tests)
