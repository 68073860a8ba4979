/* Unit tests for accept.c, with crafted datagrams sent over loopback to a
 * server endpoint whose loop is not running (fx_quic_udp_read hands them
 * on): undecodable Initials dropped, the half-open cap, a Retry sent above
 * the Retry threshold and a forged Retry token refused, and stateless
 * resets for short-header packets of unknown connections (smaller than
 * their trigger, rate limited, never for short triggers). */
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
#include <sys/time.h>
#include <unistd.h>

#include "fx_test.h"

static const fx_quic_callbacks CBS = {0};

typedef struct fix {
    char dir[64];
    fx_loop *loop;
    fx_quic_endpoint *srv;
    int fd; /* the "client": a plain UDP socket */
    struct sockaddr_in to;
} fix;

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

static void fix_init(fix *f, void (*tune)(fx_quic_opts *))
{
    fx_log_set_level(FX_LOG_ERROR);
    snprintf(f->dir, sizeof(f->dir), "/tmp/fx-accept-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    assert_int_equal(fx_loop_new(&f->loop, &(fx_loop_opts){.name = "accept", .cpu = -1}), 0);
    fx_quic_opts o;
    fx_quic_opts_default(&o);
    o.state_dir = f->dir;
    o.udp_send_buffer = o.udp_recv_buffer = 1 << 20;
    if (tune != NULL)
        tune(&o);
    assert_int_equal(fx_quic_server_new(&f->srv, f->loop, "127.0.0.1", 0, &o, &CBS, NULL), 0);
    f->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(f->fd >= 0);
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(f->fd, (struct sockaddr *)&me, sizeof(me)), 0);
    struct timeval tv = {.tv_usec = 200000};
    assert_int_equal(setsockopt(f->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    f->to = (struct sockaddr_in){.sin_family = AF_INET,
                                 .sin_port = htons(fx_quic_endpoint_port(f->srv)),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
}

static void fix_deinit(fix *f)
{
    close(f->fd);
    fx_quic_endpoint_free(f->srv);
    fx_loop_free(f->loop);
    nftw(f->dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* Sends |n| bytes to the server and lets it read them. */
static void deliver(fix *f, const uint8_t *p, size_t n)
{
    assert_int_equal(sendto(f->fd, p, n, 0, (struct sockaddr *)&f->to, sizeof(f->to)), (ssize_t)n);
    usleep(10000);
    fx_quic_udp_read(f->srv);
}

static fx_quic_stats stats(fix *f)
{
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(f->srv, &st);
    return st;
}

/* A 1200-byte QUIC v1 Initial with 8-byte connection IDs |dcid| and |scid|
 * and |token| (may be empty); the payload is not valid, which accept does
 * not look at. */
static size_t initial(uint8_t *b, const uint8_t dcid[8], const uint8_t scid[8],
                      const uint8_t *token, size_t tlen)
{
    size_t n = 0;
    memset(b, 0, 1200);
    b[n++] = 0xC3; /* long header, Initial, 4-byte packet number */
    b[n++] = 0, b[n++] = 0, b[n++] = 0, b[n++] = 1;
    b[n++] = 8;
    memcpy(b + n, dcid, 8), n += 8;
    b[n++] = 8;
    memcpy(b + n, scid, 8), n += 8;
    assert_true(tlen < 64);
    b[n++] = (uint8_t)tlen;
    if (tlen > 0)
        memcpy(b + n, token, tlen), n += tlen;
    size_t rest = 1200 - n - 2;
    b[n++] = (uint8_t)(0x40 | (rest >> 8));
    b[n++] = (uint8_t)rest;
    for (size_t i = n; i < 1200; i++)
        b[i] = (uint8_t)(i * 13);
    return 1200;
}

static const uint8_t DCID[8] = {1, 2, 3, 4, 5, 6, 7, 8};
static const uint8_t SCID[8] = {9, 10, 11, 12, 13, 14, 15, 16};

static void test_undecodable_long_header_is_dropped(void **state)
{
    fix f;
    fix_init(&f, NULL);
    uint8_t b[1200];
    initial(b, DCID, SCID, NULL, 0);
    deliver(&f, b, 600); /* an Initial below 1200 bytes is never accepted */
    fx_quic_stats st = stats(&f);
    assert_int_equal(st.rx_datagrams, 1);
    assert_int_equal(st.rx_dropped, 1);
    assert_int_equal(st.conns_accepted, 0);
    assert_int_equal(st.conns_open, 0);
    fix_deinit(&f);
}

static void no_half_open(fx_quic_opts *o)
{
    o->max_half_open = 0;
}

static void test_half_open_cap_refuses_new_initials(void **state)
{
    fix f;
    fix_init(&f, no_half_open);
    uint8_t b[1200];
    deliver(&f, b, initial(b, DCID, SCID, NULL, 0));
    fx_quic_stats st = stats(&f);
    assert_int_equal(st.half_open_refused, 1);
    assert_int_equal(st.rx_dropped, 1);
    assert_int_equal(st.conns_accepted, 0);
    assert_int_equal(st.retries_sent, 0);
    fix_deinit(&f);
}

static void retry_always(fx_quic_opts *o)
{
    o->retry_half_open = 0;
}

static void test_retry_answers_above_the_threshold(void **state)
{
    fix f;
    fix_init(&f, retry_always);
    uint8_t b[1200];
    deliver(&f, b, initial(b, DCID, SCID, NULL, 0));
    fx_quic_stats st = stats(&f);
    assert_int_equal(st.retries_sent, 1);
    assert_int_equal(st.conns_accepted, 0);
    uint8_t r[1500];
    ssize_t n = recv(f.fd, r, sizeof(r), 0);
    assert_true(n > 0);
    /* A Retry: long header type 3, version 1, addressed to our SCID. */
    assert_int_equal(r[0] & 0xF0, 0xF0);
    assert_memory_equal(r + 1, "\x00\x00\x00\x01", 4);
    assert_int_equal(r[5], 8);
    assert_memory_equal(r + 6, SCID, 8);
    fix_deinit(&f);
}

static void test_forged_retry_token_is_refused(void **state)
{
    fix f;
    fix_init(&f, NULL);
    uint8_t token[32];
    memset(token, 0x77, sizeof(token));
    token[0] = NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY;
    uint8_t b[1200];
    deliver(&f, b, initial(b, DCID, SCID, token, sizeof(token)));
    fx_quic_stats st = stats(&f);
    assert_int_equal(st.bad_tokens, 1);
    assert_int_equal(st.rx_dropped, 1);
    assert_int_equal(st.conns_accepted, 0);
    fix_deinit(&f);
}

/* A short-header packet of |len| bytes for an unknown 16-byte CID. */
static void short_packet(uint8_t *b, size_t len)
{
    b[0] = 0x40;
    for (size_t i = 1; i < len; i++)
        b[i] = (uint8_t)(0xA0 + i);
}

static void test_unknown_connection_gets_a_smaller_stateless_reset(void **state)
{
    fix f;
    fix_init(&f, NULL);
    uint8_t b[100];
    short_packet(b, sizeof(b));
    deliver(&f, b, sizeof(b));
    fx_quic_stats st = stats(&f);
    assert_int_equal(st.rx_dropped, 1);
    assert_int_equal(st.stateless_resets_sent, 1);
    uint8_t r[200];
    ssize_t n = recv(f.fd, r, sizeof(r), 0);
    assert_true(n > 0 && n < (ssize_t)sizeof(b));
    assert_int_equal(n, 43);
    assert_int_equal(r[0] & 0xC0, 0x40); /* looks like a short header */
    /* A trigger of 41 bytes or less gets none: the reset could not be smaller. */
    deliver(&f, b, 41);
    st = stats(&f);
    assert_int_equal(st.rx_dropped, 2);
    assert_int_equal(st.stateless_resets_sent, 1);
    fix_deinit(&f);
}

static void two_resets(fx_quic_opts *o)
{
    o->stateless_reset_rate = 2;
}

static void test_stateless_resets_are_rate_limited(void **state)
{
    fix f;
    fix_init(&f, two_resets);
    uint8_t b[100];
    short_packet(b, sizeof(b));
    for (int i = 0; i < 5; i++)
        deliver(&f, b, sizeof(b));
    fx_quic_stats st = stats(&f);
    assert_int_equal(st.rx_dropped, 5);
    assert_int_equal(st.stateless_resets_sent, 2);
    fix_deinit(&f);
}

static void no_resets(fx_quic_opts *o)
{
    o->stateless_reset_rate = 0;
}

static void test_rate_zero_sends_no_resets(void **state)
{
    fix f;
    fix_init(&f, no_resets);
    uint8_t b[100];
    short_packet(b, sizeof(b));
    deliver(&f, b, sizeof(b));
    assert_int_equal(stats(&f).stateless_resets_sent, 0);
    uint8_t r[200];
    assert_int_equal(recv(f.fd, r, sizeof(r), 0), -1);
    fix_deinit(&f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_undecodable_long_header_is_dropped),
    cmocka_unit_test(test_half_open_cap_refuses_new_initials),
    cmocka_unit_test(test_retry_answers_above_the_threshold),
    cmocka_unit_test(test_forged_retry_token_is_refused),
    cmocka_unit_test(test_unknown_connection_gets_a_smaller_stateless_reset),
    cmocka_unit_test(test_stateless_resets_are_rate_limited),
    cmocka_unit_test(test_rate_zero_sends_no_resets),
};

FX_TEST_MAIN(tests)
