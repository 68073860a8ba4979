/* QUIC transport tests: a server and a client endpoint on one fx_loop run by
 * the test thread, over 127.0.0.1 with port 0. Timeouts are hang guards
 * only; nothing asserts on speed. */
/* fx-test-libs: fx_quic fx_base */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/loop.h"
#include "base/metrics.h"
#include "felix/error.h"
#include "fx_test.h"
#include "quic/quic.h"

/* ---- harness -------------------------------------------------------------- */

enum { M_NONE, M_ECHO, M_SINK, M_HOLD };

#define MAXS 8192

typedef struct rxst {
    uint64_t got;
    bool fin, bad, closed, reset;
    uint64_t reset_code;
} rxst;

typedef struct side {
    int mode;
    int handshakes, closed, opened, stream_closes, writable;
    fx_quic_close_info last_close;
    uint64_t rx_total;
    rxst st[MAXS];
    fx_quic_conn *conn;
} side;

typedef struct h {
    fx_loop *loop;
    fx_quic_endpoint *srv, *cli;
    fx_quic_opts so, co;
    fx_quic_connect_opts cc;
    side s, c;
    char dir[64];
    fx_timer poll;
    bool (*pred)(struct h *);
    void (*tick)(struct h *);
    uint64_t deadline;
    bool timed_out;
    fx_buf *pat;
    /* streams test */
    int want_streams, opened_streams, done_streams, inflight, max_inflight;
} h;

static uint8_t pat_byte(uint64_t i)
{
    return (uint8_t)(i * 7 + (i >> 9));
}

static side *side_of(h *t, fx_quic_conn *c)
{
    return fx_quic_conn_is_server(c) ? &t->s : &t->c;
}

static rxst *st_of(side *sd, int64_t sid)
{
    uint64_t i = (uint64_t)sid >> 2;
    assert_true(i < MAXS);
    return &sd->st[i];
}

static void on_conn_new(fx_quic_conn *c, void *user)
{
    h *t = user;
    t->s.conn = c;
}

static void on_handshake_done(fx_quic_conn *c, void *user)
{
    side_of(user, c)->handshakes++;
}

static void on_stream_open(fx_quic_conn *c, int64_t sid, void *user)
{
    side_of(user, c)->opened++;
}

static void echo_back(fx_quic_conn *c, int64_t sid, const uint8_t *data, size_t len, bool fin)
{
    fx_buf *b = NULL;
    assert_int_equal(fx_buf_new_copy(&b, data, len), 0);
    assert_int_equal(fx_quic_stream_send(c, sid, b, 0, len, fin), 0);
    fx_buf_unref(b);
}

static void on_stream_data(fx_quic_conn *c, int64_t sid, const uint8_t *data, size_t len, bool fin,
                           void *user, void *su)
{
    h *t = user;
    side *sd = side_of(t, c);
    rxst *r = st_of(sd, sid);
    for (size_t i = 0; i < len; i++)
        if (data[i] != pat_byte(r->got + i))
            r->bad = true;
    r->got += len;
    r->fin |= fin;
    sd->rx_total += len;
    if (sd->mode == M_ECHO)
        echo_back(c, sid, data, len, fin);
    if (sd->mode != M_HOLD)
        assert_int_equal(fx_quic_stream_consume(c, sid, len), 0);
}

static void on_stream_close(fx_quic_conn *c, int64_t sid, bool reset, uint64_t code, void *user,
                            void *su)
{
    h *t = user;
    side *sd = side_of(t, c);
    rxst *r = st_of(sd, sid);
    r->closed = true;
    r->reset = reset;
    r->reset_code = code;
    sd->stream_closes++;
    if (sd == &t->c && (sid & 2) == 0 && t->inflight > 0) { /* client bidi streams */
        t->inflight--;
        t->done_streams++;
    }
}

static void on_writable(fx_quic_conn *c, void *user)
{
    side_of(user, c)->writable++;
}

static void on_conn_closed(fx_quic_conn *c, const fx_quic_close_info *info, void *user)
{
    side *sd = side_of(user, c);
    sd->closed++;
    sd->last_close = *info;
    if (sd->conn == c)
        sd->conn = NULL;
}

static const fx_quic_callbacks CBS = {
    .on_conn_new = on_conn_new,
    .on_handshake_done = on_handshake_done,
    .on_stream_open = on_stream_open,
    .on_stream_data = on_stream_data,
    .on_stream_close = on_stream_close,
    .on_writable = on_writable,
    .on_conn_closed = on_conn_closed,
};

static void on_poll(fx_loop *l, fx_timer *tm, void *user)
{
    h *t = user;
    if (t->tick != NULL)
        t->tick(t);
    if (t->pred(t)) {
        fx_loop_stop(l);
        return;
    }
    if (fx_loop_now(l) > t->deadline) {
        t->timed_out = true;
        fx_loop_stop(l);
        return;
    }
    fx_loop_timer_arm(l, tm, fx_loop_now(l) + FX_NS_PER_MS);
}

/* Runs the loop until |pred| holds; false if |ms| passed first. */
static bool run_until(h *t, bool (*pred)(h *), uint64_t ms)
{
    t->pred = pred;
    t->timed_out = false;
    t->deadline = fx_now_ns() + ms * FX_NS_PER_MS;
    fx_loop_timer_arm(t->loop, &t->poll, 0);
    assert_int_equal(fx_loop_run(t->loop), 0);
    fx_loop_timer_cancel(t->loop, &t->poll);
    return !t->timed_out;
}

static bool never(h *t)
{
    return false;
}

static void run_for(h *t, uint64_t ms)
{
    run_until(t, never, ms);
}

static h *h_new(void)
{
    fx_log_set_level(FX_LOG_ERROR);
    h *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    assert_int_equal(fx_loop_new(&t->loop, &(fx_loop_opts){.name = "quic-test", .cpu = -1}), 0);
    fx_timer_init(&t->poll, on_poll, t);
    snprintf(t->dir, sizeof(t->dir), "/tmp/fxquicXXXXXX");
    assert_non_null(mkdtemp(t->dir));
    fx_quic_opts_default(&t->so);
    fx_quic_opts_default(&t->co);
    t->so.state_dir = t->dir;
    t->so.udp_send_buffer = t->so.udp_recv_buffer = 1 << 20;
    t->co.udp_send_buffer = t->co.udp_recv_buffer = 1 << 20;
    t->cc.insecure = true;
    assert_int_equal(fx_buf_new(&t->pat, 8u << 20), 0);
    uint8_t *p = fx_buf_data_mut(t->pat);
    for (size_t i = 0; i < fx_buf_len(t->pat); i++)
        p[i] = pat_byte(i);
    return t;
}

static void start_server(h *t)
{
    assert_int_equal(fx_quic_server_new(&t->srv, t->loop, "127.0.0.1", 0, &t->so, &CBS, t), 0);
    assert_true(fx_quic_endpoint_port(t->srv) != 0);
}

static void start_client(h *t)
{
    assert_int_equal(fx_quic_client_new(&t->cli, t->loop, &t->co, &CBS, t), 0);
}

static void connect_client(h *t)
{
    assert_int_equal(
        fx_quic_connect(t->cli, "127.0.0.1", fx_quic_endpoint_port(t->srv), &t->cc, t, &t->c.conn),
        0);
}

static bool both_handshaken(h *t)
{
    return t->c.handshakes > 0 && t->s.handshakes > 0;
}

/* Starts both endpoints with |t|'s options and completes one handshake. */
static void handshake_pair(h *t)
{
    start_server(t);
    start_client(t);
    connect_client(t);
    assert_true(run_until(t, both_handshaken, 5000));
}

static bool client_closed(h *t)
{
    return t->c.closed > 0;
}

static bool both_closed(h *t)
{
    return t->c.closed > 0 && t->s.closed > 0;
}

/* Server + client + one handshaken connection. */
static h *h_connected(void)
{
    h *t = h_new();
    handshake_pair(t);
    return t;
}

static void accepted_with(h *t)
{
    handshake_pair(t);
    assert_int_equal(t->c.closed, 0);
}

static void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void h_free(h *t)
{
    fx_quic_endpoint_free(t->cli);
    fx_quic_endpoint_free(t->srv);
    fx_loop_free(t->loop);
    fx_buf_unref(t->pat);
    rm_dir(t->dir);
    free(t);
}

static int64_t open_bidi(h *t)
{
    int64_t sid;
    assert_int_equal(fx_quic_conn_open_bidi(t->c.conn, NULL, &sid), 0);
    return sid;
}

/* ---- data ------------------------------------------------------------------ */

static int64_t g_sid;
static uint64_t g_len;

static bool echo_done(h *t)
{
    rxst *r = st_of(&t->c, g_sid);
    return r->fin && r->got == g_len;
}

static void test_handshake_and_echo(void **state)
{
    h *t = h_connected();
    assert_string_equal(fx_quic_conn_alpn(t->c.conn), "felix");
    assert_string_equal(fx_quic_conn_alpn(t->s.conn), "felix");
    t->s.mode = M_ECHO;
    g_sid = open_bidi(t);
    g_len = 5;
    assert_int_equal(fx_quic_stream_send(t->c.conn, g_sid, t->pat, 0, 5, true), 0);
    assert_true(run_until(t, echo_done, 5000));
    assert_false(st_of(&t->c, g_sid)->bad);
    assert_int_equal(t->s.opened, 1);
    h_free(t);
}

static void test_metrics_count_connections_and_datagrams(void **state)
{
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    h *t = h_connected();
    t->s.mode = M_ECHO;
    g_sid = open_bidi(t);
    g_len = 5;
    assert_int_equal(fx_quic_stream_send(t->c.conn, g_sid, t->pat, 0, 5, true), 0);
    assert_true(run_until(t, echo_done, 5000));
    fx_metrics_snapshot_take(&b);
    assert_int_equal(b.c.quic_conn_accepted - a.c.quic_conn_accepted, 1);
    assert_int_equal(b.g.quic_conn_open - a.g.quic_conn_open, 2); /* client and server side */
    assert_true(b.c.quic_datagrams_in - a.c.quic_datagrams_in > 0);
    assert_true(b.c.quic_datagrams_out - a.c.quic_datagrams_out > 0);
    assert_true(b.c.quic_bytes_out - a.c.quic_bytes_out >= 5);
    h_free(t);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(b.g.quic_conn_open - a.g.quic_conn_open, 0);
    assert_int_equal(b.c.quic_conn_closed - a.c.quic_conn_closed, 2);
}

static bool all_streams_echoed(h *t)
{
    for (int i = 0; i < t->want_streams; i++) {
        rxst *r = &t->c.st[i];
        if (!r->fin || r->got != g_len)
            return false;
    }
    return true;
}

static void bulk_on(h *t, int nstreams)
{
    t->s.mode = M_ECHO;
    t->want_streams = nstreams;
    g_len = fx_buf_len(t->pat) / (size_t)nstreams;
    for (int i = 0; i < nstreams; i++) {
        int64_t sid = open_bidi(t);
        assert_int_equal(sid >> 2, i);
        /* Every stream references the same buffer: queued, never copied. */
        assert_int_equal(fx_quic_stream_send(t->c.conn, sid, t->pat, 0, g_len, true), 0);
    }
    assert_true(run_until(t, all_streams_echoed, 60000));
    for (int i = 0; i < nstreams; i++) {
        assert_false(t->c.st[i].bad);
        assert_false(t->s.st[i].bad);
        assert_int_equal(t->s.st[i].got, g_len);
    }
    /* Every reference taken by the sends was dropped on ack. */
    run_for(t, 50);
    assert_int_equal(fx_buf_refcount(t->pat), 1);
    assert_int_equal(fx_quic_conn_unacked(t->c.conn), 0);
}

static void bulk(int nstreams)
{
    h *t = h_connected();
    bulk_on(t, nstreams);
    h_free(t);
}

static void test_bulk_transfer_checksummed_both_directions_one_stream(void **state)
{
    bulk(1);
}

static void test_bulk_transfer_checksummed_both_directions_1000_streams(void **state)
{
    bulk(1000);
}

static void test_bulk_with_pinned_16k_datagrams_and_gso(void **state)
{
    h *t = h_new();
    t->so.initial_mtu = t->so.mtu_upper_bound = 16384;
    t->co.initial_mtu = t->co.mtu_upper_bound = 16384;
    handshake_pair(t);
    bulk_on(t, 1);
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(t->cli, &st);
    /* 8 MiB in 16 KiB datagrams, several per sendmsg (aggregates <= 64 KiB). */
    assert_true(st.tx_datagrams >= (8u << 20) / 16384);
    assert_true(st.tx_datagrams < (8u << 20) / 1452);
    assert_true(st.tx_sendmsg < st.tx_datagrams);
    assert_int_equal(st.gso_disabled, 0);
    h_free(t);
}

static void test_loopback_peers_pin_loopback_mtu_from_the_first_packet(void **state)
{
    h *t = h_new(); /* defaults: PMTUD from 1200 elsewhere, loopback_mtu here */
    assert_int_equal(t->co.loopback_mtu, 16250);
    handshake_pair(t);
    bulk_on(t, 1);
    fx_quic_stats cs, ss;
    fx_quic_endpoint_get_stats(t->cli, &cs);
    fx_quic_endpoint_get_stats(t->srv, &ss);
    assert_int_equal(cs.tx_datagram_max, 16250);
    assert_int_equal(ss.tx_datagram_max, 16250);
    assert_true(cs.tx_datagrams < (8u << 20) / 1452);
    h_free(t);
}

static void test_loopback_mtu_zero_probes_as_on_any_path(void **state)
{
    h *t = h_new();
    t->co.loopback_mtu = t->so.loopback_mtu = 0;
    t->co.mtu_upper_bound = t->so.mtu_upper_bound = 16384;
    handshake_pair(t);
    bulk_on(t, 1);
    fx_quic_stats cs;
    fx_quic_endpoint_get_stats(t->cli, &cs);
    /* ngtcp2 0.12's probes stop at 1444 bytes, whatever the upper bound. */
    assert_true(cs.tx_datagram_max >= 1200);
    assert_true(cs.tx_datagram_max <= 1452);
    h_free(t);
}

/* Counts the connection statistics lines, and keeps the last one. */
typedef struct stats_cap {
    int lines;
    char last[FX_LOG_LINE_MAX + 1];
} stats_cap;

static void capture_stats(fx_log_level level, const char *line, size_t len, void *user)
{
    stats_cap *cap = user;
    if (level == FX_LOG_INFO && strstr(line, "conn stats") != NULL) {
        cap->lines++;
        snprintf(cap->last, sizeof(cap->last), "%.*s", (int)len, line);
    }
}

static void test_conn_stats_logged_periodically_when_asked(void **state)
{
    stats_cap cap = {0};
    fx_log_sink sink = {.on_line = capture_stats, .user = &cap};
    h *t = h_new();
    t->so.stats_log_ns = 20 * FX_NS_PER_MS; /* the server's connections only */
    handshake_pair(t);
    fx_log_set_sink(&sink);
    fx_log_set_level(FX_LOG_INFO);
    run_for(t, 150);
    fx_log_set_level(FX_LOG_ERROR);
    fx_log_set_sink(NULL);
    /* One server connection, every 20 ms for 150 ms; the client is silent. */
    assert_in_range(cap.lines, 3, 9);
    assert_non_null(strstr(cap.last, "rtt smoothed"));
    assert_non_null(strstr(cap.last, "datagram 16250 bytes")); /* a loopback peer */
    h_free(t);
}

static void test_bulk_without_gso_uses_plain_datagrams(void **state)
{
    h *t = h_new();
    t->co.gso = false;
    t->so.gso = false;
    t->co.loopback_mtu = t->so.loopback_mtu = 0; /* 1452-byte datagrams at most */
    handshake_pair(t);
    bulk_on(t, 4);
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(t->cli, &st);
    assert_true(st.tx_datagrams >= (8u << 20) / 1452);
    h_free(t);
}

static bool three_handshakes(h *t)
{
    return t->c.handshakes == 3;
}

static void test_half_open_cap_defers_extra_handshakes(void **state)
{
    h *t = h_new();
    t->so.max_half_open = 2;
    start_server(t);
    start_client(t);
    for (int i = 0; i < 3; i++)
        connect_client(t);
    /* The third Initial is dropped; the client's retransmission (one PTO,
     * about a second, later) gets in once the others are established. */
    assert_true(run_until(t, three_handshakes, 20000));
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(t->srv, &st);
    assert_true(st.half_open_refused > 0);
    assert_int_equal(st.conns_accepted, 3);
    h_free(t);
}

static void test_retry_under_load_validates_address_then_accepts(void **state)
{
    h *t = h_new();
    t->so.retry_half_open = 0; /* always "under load" */
    accepted_with(t);
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(t->srv, &st);
    assert_int_equal(st.retries_sent, 1);
    assert_int_equal(st.conns_accepted, 1);
    assert_int_equal(st.bad_tokens, 0);
    /* The connection works after the Retry. */
    t->s.mode = M_ECHO;
    g_sid = open_bidi(t);
    g_len = 1000;
    assert_int_equal(fx_quic_stream_send(t->c.conn, g_sid, t->pat, 0, 1000, true), 0);
    assert_true(run_until(t, echo_done, 5000));
    h_free(t);
}

static void test_wildcard_server_answers_from_the_address_the_client_used(void **state)
{
    h *t = h_new();
    assert_int_equal(fx_quic_server_new(&t->srv, t->loop, "0.0.0.0", 0, &t->so, &CBS, t), 0);
    start_client(t);
    /* 127.0.0.2 is local too; the kernel would answer from 127.0.0.1. */
    assert_int_equal(
        fx_quic_connect(t->cli, "127.0.0.2", fx_quic_endpoint_port(t->srv), &t->cc, t, &t->c.conn),
        0);
    assert_true(run_until(t, both_handshaken, 5000));
    t->s.mode = M_ECHO;
    g_sid = open_bidi(t);
    g_len = 1000;
    assert_int_equal(fx_quic_stream_send(t->c.conn, g_sid, t->pat, 0, 1000, true), 0);
    assert_true(run_until(t, echo_done, 5000));
    h_free(t);
}

static void test_second_server_on_same_port_refused(void **state)
{
    h *t = h_new();
    start_server(t);
    fx_quic_endpoint *other = NULL;
    assert_int_equal(fx_quic_server_new(&other, t->loop, "127.0.0.1", fx_quic_endpoint_port(t->srv),
                                        &t->so, &CBS, t),
                     -EADDRINUSE);
    assert_null(other);
    h_free(t);
}

static bool server_got_all(h *t)
{
    rxst *r = st_of(&t->s, g_sid);
    return r->fin && r->got == g_len;
}

static void test_many_small_sends_arrive_in_order(void **state)
{
    h *t = h_connected();
    t->s.mode = M_SINK;
    g_sid = open_bidi(t);
    g_len = 5000 * 100;
    for (size_t i = 0; i < 5000; i++)
        assert_int_equal(fx_quic_stream_send(t->c.conn, g_sid, t->pat, i * 100, 100, i == 4999), 0);
    assert_true(run_until(t, server_got_all, 10000));
    assert_false(st_of(&t->s, g_sid)->bad);
    h_free(t);
}

static void test_shared_buffer_referenced_per_stream_released_on_ack(void **state)
{
    h *t = h_connected();
    t->s.mode = M_SINK;
    for (int i = 0; i < 10; i++) {
        int64_t sid = open_bidi(t);
        assert_int_equal(fx_quic_stream_send(t->c.conn, sid, t->pat, 0, 1000, true), 0);
    }
    assert_int_equal(fx_buf_refcount(t->pat), 11);
    assert_int_equal(fx_quic_conn_unacked(t->c.conn), 10000);
    for (int i = 0; i < 200 && fx_buf_refcount(t->pat) != 1; i++)
        run_for(t, 10);
    assert_int_equal(fx_buf_refcount(t->pat), 1);
    assert_int_equal(fx_quic_conn_unacked(t->c.conn), 0);
    h_free(t);
}

static bool client_all_acked(h *t)
{
    return fx_quic_conn_unacked(t->c.conn) == 0;
}

/* fx_quic_stream_is_sending is a question: no on_writable follows it.
 * fx_quic_stream_notify_sent asks for exactly one, after the write. */
static void test_is_sending_only_asks_and_notify_sent_reports_once_written(void **state)
{
    h *t = h_connected();
    t->s.mode = M_SINK;
    int64_t sid = open_bidi(t);
    assert_int_equal(fx_quic_stream_send(t->c.conn, sid, t->pat, 0, 1u << 20, false), 0);
    assert_true(fx_quic_stream_is_sending(t->c.conn, sid)); /* this turn's write is due */
    assert_true(run_until(t, client_all_acked, 10000));
    assert_false(fx_quic_stream_is_sending(t->c.conn, sid));
    assert_int_equal(t->c.writable, 0);
    assert_false(fx_quic_stream_notify_sent(t->c.conn, sid)); /* nothing left to write */
    assert_int_equal(fx_quic_stream_send(t->c.conn, sid, t->pat, 0, 1u << 20, false), 0);
    assert_true(fx_quic_stream_notify_sent(t->c.conn, sid));
    assert_true(run_until(t, client_all_acked, 10000));
    run_for(t, 20);
    assert_int_equal(t->c.writable, 1);
    assert_false(fx_quic_stream_is_sending(t->c.conn, 4)); /* no such stream */
    h_free(t);
}

/* Keeps up to |max_inflight| short echo streams open until |want_streams|
 * have finished. */
static void streams_tick(h *t)
{
    while (t->inflight < t->max_inflight && t->opened_streams < t->want_streams) {
        int64_t sid;
        int rv = fx_quic_conn_open_bidi(t->c.conn, NULL, &sid);
        if (rv == FX_ESTREAMS)
            return; /* the server's MAX_STREAMS is on its way */
        assert_int_equal(rv, 0);
        assert_int_equal(fx_quic_stream_send(t->c.conn, sid, t->pat, 0, 10, true), 0);
        t->opened_streams++;
        t->inflight++;
    }
}

static bool streams_done(h *t)
{
    return t->done_streams == t->want_streams;
}

static void test_thousands_of_streams_open_close_on_one_connection(void **state)
{
    h *t = h_new();
    t->so.max_streams_bidi = 16; /* far below the total: the limit must be extended */
    handshake_pair(t);
    t->s.mode = M_ECHO;
    t->want_streams = 5000;
    t->max_inflight = 16;
    t->tick = streams_tick;
    assert_true(run_until(t, streams_done, 60000));
    assert_int_equal(t->s.stream_closes, 5000);
    for (int i = 0; i < 5000; i++)
        assert_true(t->c.st[i].fin && t->c.st[i].got == 10 && !t->c.st[i].bad);
    h_free(t);
}

/* Server side of the uni-stream test: keeps |max_inflight| server-opened
 * uni streams (10 bytes + FIN each) going until |want_streams| closed. */
static void uni_tick(h *t)
{
    while (t->s.conn != NULL && t->inflight < t->max_inflight &&
           t->opened_streams < t->want_streams) {
        int64_t sid;
        int rv = fx_quic_conn_open_uni(t->s.conn, NULL, &sid);
        if (rv == FX_ESTREAMS)
            return; /* the client's MAX_STREAMS is on its way */
        assert_int_equal(rv, 0);
        assert_int_equal(fx_quic_stream_send(t->s.conn, sid, t->pat, 0, 10, true), 0);
        t->opened_streams++;
        t->inflight++;
    }
}

static void on_uni_close(fx_quic_conn *c, int64_t sid, bool reset, uint64_t code, void *user,
                         void *su)
{
    h *t = user;
    on_stream_close(c, sid, reset, code, user, su);
    if (fx_quic_conn_is_server(c)) {
        t->inflight--;
        t->done_streams++;
    }
}

static void test_server_uni_streams_open_close_beyond_client_limit(void **state)
{
    h *t = h_new();
    t->co.max_streams_uni = 16; /* the client allows 16 at a time */
    start_server(t);
    fx_quic_callbacks cb = CBS;
    cb.on_stream_close = on_uni_close;
    fx_quic_endpoint_free(t->srv);
    assert_int_equal(fx_quic_server_new(&t->srv, t->loop, "127.0.0.1", 0, &t->so, &cb, t), 0);
    start_client(t);
    connect_client(t);
    assert_true(run_until(t, both_handshaken, 5000));
    t->want_streams = 3000;
    t->max_inflight = 16;
    t->tick = uni_tick;
    assert_true(run_until(t, streams_done, 60000));
    assert_int_equal(t->c.stream_closes, 3000);
    for (int i = 0; i < 3000; i++)
        assert_true(t->c.st[i].fin && t->c.st[i].got == 10 && !t->c.st[i].bad);
    h_free(t);
}

/* ---- TLS ------------------------------------------------------------------- */

static void expect_refused(h *t, int reason)
{
    start_server(t);
    start_client(t);
    connect_client(t);
    assert_true(run_until(t, both_closed, 5000));
    assert_int_equal(t->c.handshakes, 0);
    assert_int_equal(t->c.last_close.reason, reason);
    assert_false(t->c.last_close.remote);
    /* The server learns why from the CRYPTO_ERROR close. */
    assert_true(t->s.last_close.remote);
    assert_int_not_equal(t->s.last_close.tls_alert, 0);
    assert_int_equal(t->s.last_close.reason, reason);
}

static void test_wrong_ca_refused(void **state)
{
    h *t = h_new();
    char other[128];
    snprintf(other, sizeof(other), "%s/other.pem", t->dir);
    char otherkey[128];
    snprintf(otherkey, sizeof(otherkey), "%s/other.key", t->dir);
    assert_int_equal(fx_quic_cert_generate(other, otherkey, NULL), 0);
    t->cc = (fx_quic_connect_opts){.ca_file = other};
    expect_refused(t, FX_ETLS_UNKNOWN_CA);
    h_free(t);
}

static void test_pin_mismatch_refused(void **state)
{
    h *t = h_new();
    t->cc = (fx_quic_connect_opts){
        .pin_sha256 = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"};
    expect_refused(t, FX_ETLS_PIN);
    h_free(t);
}

static void test_expired_cert_refused(void **state)
{
    h *t = h_new();
    static char cert[128], key[128];
    snprintf(cert, sizeof(cert), "%s/old.pem", t->dir);
    snprintf(key, sizeof(key), "%s/old.key", t->dir);
    time_t now = time(NULL);
    fx_quic_cert_spec spec = {.not_before = now - 20 * 86400,
                              .not_after = now - 10 * 86400,
                              .dns_name = "localhost",
                              .ip_address = "127.0.0.1"};
    assert_int_equal(fx_quic_cert_generate(cert, key, &spec), 0);
    t->so.cert_file = cert;
    t->so.key_file = key;
    t->cc = (fx_quic_connect_opts){.ca_file = cert};
    expect_refused(t, FX_ETLS_EXPIRED);
    h_free(t);
}

static void test_wrong_name_refused(void **state)
{
    h *t = h_new();
    static char cert[128];
    start_server(t); /* generates the certificate */
    fx_quic_endpoint_free(t->srv);
    t->srv = NULL;
    snprintf(cert, sizeof(cert), "%s/tls-cert.pem", t->dir);
    t->cc = (fx_quic_connect_opts){.ca_file = cert, .server_name = "broker.example.com"};
    expect_refused(t, FX_ETLS_NAME);
    h_free(t);
}

static void test_insecure_accepts(void **state)
{
    h *t = h_new();
    t->cc = (fx_quic_connect_opts){.insecure = true};
    accepted_with(t);
    h_free(t);
}

static bool two_client_handshakes(h *t)
{
    return t->c.handshakes == 2 || t->c.closed > 0;
}

/* A link planted where the key's temporary file goes is replaced, never
 * written through, and the key ends up 0600 whatever the umask. */
static void test_key_temp_file_never_follows_a_planted_link(void **state)
{
    char dir[64], cert[96], key[96], tmp[112], victim[96], buf[16] = "";
    snprintf(dir, sizeof(dir), "/tmp/fxcertXXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(cert, sizeof(cert), "%s/c.pem", dir);
    snprintf(key, sizeof(key), "%s/k.pem", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", key);
    snprintf(victim, sizeof(victim), "%s/victim", dir);
    FILE *f = fopen(victim, "w");
    assert_non_null(f);
    fputs("victim", f);
    fclose(f);
    assert_int_equal(symlink(victim, tmp), 0);
    mode_t old = umask(0);
    int rv = fx_quic_cert_generate(cert, key, NULL);
    umask(old);
    assert_int_equal(rv, 0);
    f = fopen(victim, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    assert_string_equal(buf, "victim");
    struct stat st;
    assert_int_equal(lstat(key, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(lstat(tmp, &st), -1); /* nothing left behind */
    rm_dir(dir);
}

static void test_ca_file_accepts_ip_and_dns_names(void **state)
{
    h *t = h_new();
    static char cert[128];
    snprintf(cert, sizeof(cert), "%s/tls-cert.pem", t->dir);
    t->cc = (fx_quic_connect_opts){.ca_file = cert}; /* name: 127.0.0.1, an IP SAN */
    accepted_with(t);
    t->cc.server_name = "localhost";
    connect_client(t);
    assert_true(run_until(t, two_client_handshakes, 5000));
    assert_int_equal(t->c.handshakes, 2);
    h_free(t);
}

static void test_pin_match_accepts(void **state)
{
    h *t = h_new();
    start_server(t);
    static char pin[65];
    snprintf(pin, sizeof(pin), "%s", fx_quic_endpoint_fingerprint(t->srv));
    assert_int_equal(strlen(pin), 64);
    t->cc = (fx_quic_connect_opts){.pin_sha256 = pin};
    start_client(t);
    connect_client(t);
    assert_true(run_until(t, both_handshaken, 5000));
    h_free(t);
}

static void test_generated_cert_reused_across_restarts(void **state)
{
    h *t = h_new();
    start_server(t);
    char fp1[65];
    snprintf(fp1, sizeof(fp1), "%s", fx_quic_endpoint_fingerprint(t->srv));
    fx_quic_endpoint_free(t->srv);
    start_server(t);
    assert_string_equal(fp1, fx_quic_endpoint_fingerprint(t->srv));
    char key[128], cert[128], fp2[65];
    snprintf(key, sizeof(key), "%s/tls-key.pem", t->dir);
    snprintf(cert, sizeof(cert), "%s/tls-cert.pem", t->dir);
    struct stat sb;
    assert_int_equal(stat(key, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(fx_quic_cert_fingerprint(cert, fp2), 0);
    assert_string_equal(fp1, fp2);
    h_free(t);
}

static void test_server_accepts_client_without_alpn(void **state)
{
    h *t = h_new();
    t->co.alpn = NULL;
    accepted_with(t);
    assert_string_equal(fx_quic_conn_alpn(t->s.conn), "");
    h_free(t);
}

static void test_client_with_other_alpn_refused(void **state)
{
    h *t = h_new();
    t->co.alpn = "h3";
    start_server(t);
    start_client(t);
    connect_client(t);
    assert_true(run_until(t, client_closed, 5000));
    assert_int_equal(t->c.handshakes, 0);
    assert_int_equal(t->c.last_close.reason, FX_ETLS);
    assert_int_equal(t->c.last_close.tls_alert, 120); /* no_application_protocol */
    h_free(t);
}

/* ---- lifetime -------------------------------------------------------------- */

static void test_idle_timeout_closes_silent_connection(void **state)
{
    h *t = h_new();
    t->so.idle_timeout_ns = t->co.idle_timeout_ns = 300 * FX_NS_PER_MS;
    t->co.keepalive_ns = 0;
    accepted_with(t);
    fx_quic_endpoint_set_test_drop(t->cli, 1000); /* the client vanishes */
    assert_true(run_until(t, both_closed, 5000));
    assert_int_equal(t->s.last_close.reason, FX_EIDLE);
    assert_false(t->s.last_close.remote);
    assert_int_equal(t->c.last_close.reason, FX_EIDLE);
    h_free(t);
}

static void test_keepalive_keeps_quiet_connection_open(void **state)
{
    h *t = h_new();
    t->so.idle_timeout_ns = t->co.idle_timeout_ns = 300 * FX_NS_PER_MS;
    t->co.keepalive_ns = 100 * FX_NS_PER_MS;
    accepted_with(t);
    run_for(t, 1000); /* more than three idle timeouts without a byte */
    assert_int_equal(t->c.closed, 0);
    assert_int_equal(t->s.closed, 0);
    fx_quic_conn_close(t->c.conn, 7, "bye");
    assert_true(run_until(t, both_closed, 5000));
    assert_int_equal(t->s.last_close.reason, FX_ECLOSED);
    assert_true(t->s.last_close.remote && t->s.last_close.app);
    assert_int_equal(t->s.last_close.code, 7);
    assert_string_equal(t->s.last_close.text, "bye");
    assert_int_equal(t->c.last_close.reason, FX_ECLOSED);
    assert_false(t->c.last_close.remote);
    h_free(t);
}

/* The server's own keep-alive holds a connection whose client sends nothing
 * (a client with keep-alive off, behind a NAT that forgets quiet flows). */
static void test_server_keepalive_keeps_quiet_connection_open(void **state)
{
    h *t = h_new();
    t->so.idle_timeout_ns = t->co.idle_timeout_ns = 300 * FX_NS_PER_MS;
    t->co.keepalive_ns = 0;
    t->so.keepalive_ns = 100 * FX_NS_PER_MS;
    accepted_with(t);
    run_for(t, 1000);
    assert_int_equal(t->c.closed, 0);
    assert_int_equal(t->s.closed, 0);
    h_free(t);
}

static void test_endpoint_free_closes_connections_with_reason(void **state)
{
    h *t = h_connected();
    fx_quic_endpoint_free(t->srv);
    t->srv = NULL;
    assert_int_equal(t->s.closed, 1);
    assert_int_equal(t->s.last_close.reason, FX_ESHUTDOWN);
    assert_true(run_until(t, client_closed, 5000));
    assert_int_equal(t->c.last_close.reason, FX_ECLOSED);
    assert_true(t->c.last_close.remote);
    h_free(t);
}

static void test_stream_reset_reports_code_and_releases_buffers(void **state)
{
    h *t = h_connected();
    t->s.mode = M_HOLD;
    int64_t sid = open_bidi(t);
    assert_int_equal(fx_quic_stream_send(t->c.conn, sid, t->pat, 0, 4u << 20, false), 0);
    run_for(t, 20);
    assert_int_equal(fx_buf_refcount(t->pat), 2);
    assert_int_equal(fx_quic_stream_reset(t->c.conn, sid, 42), 0);
    /* The bytes never written go at once; those sent, once ngtcp2 is done. */
    assert_true(fx_quic_conn_unacked(t->c.conn) < 4u << 20);
    g_sid = sid;
    bool ok = false;
    for (int i = 0; i < 500 && !ok; i++) {
        run_for(t, 5);
        ok = st_of(&t->s, sid)->reset && fx_buf_refcount(t->pat) == 1;
    }
    assert_true(ok);
    assert_int_equal(st_of(&t->s, sid)->reset_code, 42);
    assert_int_equal(fx_quic_conn_unacked(t->c.conn), 0);
    h_free(t);
}

/* ---- send buffers outlive what ngtcp2 may still read ------------------------ */

/* A wrapped send buffer whose release is observed: |freed| once QUIC dropped
 * its last reference. The bytes are really freed then, so a later read by
 * ngtcp2 is a use-after-free that AddressSanitizer reports. */
typedef struct watched {
    bool freed;
} watched;

static void watched_free(void *data, size_t len, void *user)
{
    watched *w = user;
    w->freed = true;
    free(data);
}

/* |len| pattern bytes that only QUIC will hold once the caller unrefs. */
static fx_buf *watched_buf(h *t, watched *w, size_t len)
{
    uint8_t *p = malloc(len);
    assert_non_null(p);
    memcpy(p, fx_buf_data(t->pat), len);
    *w = (watched){0};
    fx_buf *b = NULL;
    assert_int_equal(fx_buf_wrap(&b, p, len, watched_free, w), 0);
    return b;
}

static watched *g_watched;

static bool watched_freed(h *t)
{
    return g_watched->freed;
}

/* The client's bytes go into packets that are all lost, then the client
 * resets the stream. ngtcp2 0.12 still resends those lost STREAM frames
 * from the buffer after its RESET_STREAM, so only the bytes it never saw
 * may go at the reset; the rest go once acked (or the stream closed). */
static void test_reset_releases_unsent_bytes_at_once_and_sent_ones_once_acked(void **state)
{
    h *t = h_connected();
    t->s.mode = M_SINK;
    watched w;
    fx_buf *b = watched_buf(t, &w, 256u << 10);
    int64_t sid = open_bidi(t);
    fx_quic_endpoint_set_test_drop(t->cli, 1000);
    assert_int_equal(fx_quic_stream_send(t->c.conn, sid, b, 0, fx_buf_len(b), false), 0);
    fx_buf_unref(b); /* QUIC holds the only reference now */
    run_for(t, 30);
    assert_int_equal(fx_quic_conn_unacked(t->c.conn), 256u << 10);
    assert_int_equal(fx_quic_stream_reset(t->c.conn, sid, 42), 0);
    assert_false(w.freed);
    uint64_t held = fx_quic_conn_unacked(t->c.conn);
    assert_true(held > 0 && held < 256u << 10); /* the unsent tail went */
    fx_quic_endpoint_set_test_drop(t->cli, 0);
    g_watched = &w;
    assert_true(run_until(t, watched_freed, 10000)); /* resent, then acked */
    assert_int_equal(fx_quic_conn_unacked(t->c.conn), 0);
    h_free(t);
}

/* The peer asks: the server's bytes to the client are all lost, then the
 * client resets the stream (RESET_STREAM and STOP_SENDING). ngtcp2 0.12
 * reports no STOP_SENDING; the server's bytes must stay until acked or its
 * stream closed. The client now hears everything 300 ms late, so for that
 * long no ack can release them. */
static void test_peer_stop_sending_keeps_sent_bytes_until_acked_or_closed(void **state)
{
    h *t = h_connected();
    t->s.mode = M_SINK;
    int64_t sid = open_bidi(t);
    echo_back(t->c.conn, sid, fx_buf_data(t->pat), 1, false);
    bool seen = false;
    for (int i = 0; i < 500 && !seen; i++) {
        run_for(t, 2);
        seen = st_of(&t->s, sid)->got == 1 && fx_quic_conn_unacked(t->c.conn) == 0;
    }
    assert_true(seen);
    t->c.mode = M_SINK;
    watched w;
    fx_buf *b = watched_buf(t, &w, 256u << 10);
    fx_quic_endpoint_set_test_drop(t->cli, 1000);
    assert_int_equal(fx_quic_stream_send(t->s.conn, sid, b, 0, fx_buf_len(b), false), 0);
    fx_buf_unref(b);
    run_for(t, 30);
    fx_quic_endpoint_set_test_drop(t->cli, 0);
    assert_int_equal(fx_quic_endpoint_set_test_delay(t->cli, 300 * FX_NS_PER_MS), 0);
    assert_int_equal(fx_quic_stream_reset(t->c.conn, sid, 43), 0);
    run_for(t, 150);
    assert_false(w.freed);
    assert_true(fx_quic_conn_unacked(t->s.conn) > 0);
    g_watched = &w;
    assert_true(run_until(t, watched_freed, 10000));
    assert_int_equal(fx_quic_conn_unacked(t->s.conn), 0);
    h_free(t);
}

static bool client_closed_twice(h *t)
{
    return t->c.closed == 2;
}

static void test_drain_closes_idle_connection_and_refuses_new_ones(void **state)
{
    h *t = h_connected();
    assert_int_equal(fx_quic_endpoint_drain(t->srv, fx_now_ns() + 5 * FX_NS_PER_S), 0);
    assert_true(run_until(t, both_closed, 5000));
    assert_true(t->c.last_close.remote && t->c.last_close.app);
    assert_int_equal(t->c.last_close.code, 0);
    assert_string_equal(t->c.last_close.text, "draining");
    /* A newcomer gets no answer and gives up at its handshake timeout. */
    fx_quic_endpoint_free(t->cli);
    t->co.handshake_timeout_ns = 300 * FX_NS_PER_MS;
    start_client(t);
    connect_client(t);
    assert_true(run_until(t, client_closed_twice, 5000));
    assert_int_equal(t->c.last_close.reason, FX_ETIMEDOUT);
    h_free(t);
}

static void test_drain_waits_for_unacked_bytes_until_deadline(void **state)
{
    h *t = h_new();
    t->co.stream_window = t->co.max_stream_window = 64 << 10;
    accepted_with(t);
    t->s.mode = M_ECHO;
    t->c.mode = M_HOLD; /* the client never grants credit back */
    int64_t sid = open_bidi(t);
    assert_int_equal(fx_quic_stream_send(t->c.conn, sid, t->pat, 0, 1u << 20, false), 0);
    run_for(t, 200);
    assert_true(fx_quic_conn_unacked(t->s.conn) > 0);
    assert_int_equal(fx_quic_endpoint_drain(t->srv, fx_now_ns() + 300 * FX_NS_PER_MS), 0);
    run_for(t, 100);
    assert_int_equal(t->c.closed, 0); /* still finishing its writes */
    assert_true(run_until(t, both_closed, 5000));
    assert_string_equal(t->c.last_close.text, "draining: deadline reached");
    h_free(t);
}

/* ---- loss and garbage ------------------------------------------------------ */

static void test_loss_hook_5_percent_delivers_in_order(void **state)
{
    h *t = h_connected();
    fx_quic_endpoint_set_test_drop(t->srv, 50);
    fx_quic_endpoint_set_test_drop(t->cli, 50);
    t->s.mode = M_ECHO;
    g_len = 1u << 20;
    t->want_streams = 4;
    for (int i = 0; i < 4; i++) {
        int64_t sid = open_bidi(t);
        assert_int_equal(fx_quic_stream_send(t->c.conn, sid, t->pat, 0, g_len, true), 0);
    }
    assert_true(run_until(t, all_streams_echoed, 60000));
    for (int i = 0; i < 4; i++)
        assert_false(t->c.st[i].bad || t->s.st[i].bad);
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(t->srv, &st);
    assert_true(st.test_dropped > 0);
    h_free(t);
}

/* One connection: many small sends (so STREAM frames of many vectors) with
 * 10% loss both ways (so ngtcp2 resends and splits them), then a close.
 * Returns how many blocks ngtcp2 lost track of and conn.c freed. */
static uint64_t lossy_small_sends_orphans(void)
{
    h *t = h_connected();
    fx_quic_endpoint_set_test_drop(t->srv, 100);
    fx_quic_endpoint_set_test_drop(t->cli, 100);
    t->s.mode = M_SINK;
    g_sid = open_bidi(t);
    g_len = 5000 * 100;
    for (size_t i = 0; i < 5000; i++)
        assert_int_equal(fx_quic_stream_send(t->c.conn, g_sid, t->pat, i * 100, 100, i == 4999), 0);
    assert_true(run_until(t, server_got_all, 30000));
    assert_false(st_of(&t->s, g_sid)->bad);
    fx_quic_endpoint_set_test_drop(t->srv, 0);
    fx_quic_endpoint_set_test_drop(t->cli, 0);
    fx_quic_conn_close(t->c.conn, 0, "done");
    assert_true(run_until(t, both_closed, 5000));
    fx_quic_stats cs, ss;
    fx_quic_endpoint_get_stats(t->cli, &cs);
    fx_quic_endpoint_get_stats(t->srv, &ss);
    h_free(t);
    return cs.ngtcp2_orphans_freed + ss.ngtcp2_orphans_freed;
}

/* ngtcp2 0.12 puts a malloc'ed STREAM frame that it shrank while resending
 * onto its frame pool's free list, which ngtcp2_conn_del never frees (see
 * conn.c). A lossy transfer hits that in about 9 connections of 10, so
 * connections are tried until one did (the stats count the blocks conn.c
 * freed, which shows the case exercised the bug); LeakSanitizer fails the
 * run if any such block survived its connection. */
static void test_stream_frames_ngtcp2_loses_under_loss_are_freed_with_the_connection(void **state)
{
    uint64_t orphans = 0;
    int tries = 0;
    while (orphans == 0 && tries < 10) {
        orphans = lossy_small_sends_orphans();
        tries++;
    }
    print_message("%llu orphaned ngtcp2 blocks freed, after %d connection(s)\n",
                  (unsigned long long)orphans, tries);
    assert_true(orphans > 0);
}

/* Both endpoints hold what they receive for 100 ms, so an echo needs two
 * one-way delays; nothing is lost on the way. The time bound is the lower
 * one the hook guarantees, the run limit only a hang guard. */
static void test_delay_hook_delays_delivery_by_at_least_the_delay(void **state)
{
    const uint64_t delay = 100 * FX_NS_PER_MS;
    h *t = h_connected();
    assert_int_equal(fx_quic_endpoint_set_test_delay(t->srv, delay), 0);
    assert_int_equal(fx_quic_endpoint_set_test_delay(t->cli, delay), 0);
    t->s.mode = M_ECHO;
    g_sid = open_bidi(t);
    g_len = 3000; /* more than one datagram */
    uint64_t t0 = fx_now_ns();
    assert_int_equal(fx_quic_stream_send(t->c.conn, g_sid, t->pat, 0, g_len, true), 0);
    assert_true(run_until(t, echo_done, 10000));
    assert_true(fx_now_ns() - t0 >= 2 * delay);
    assert_false(st_of(&t->c, g_sid)->bad);
    assert_false(st_of(&t->s, g_sid)->bad);
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(t->cli, &st);
    assert_int_equal(st.test_dropped, 0);
    /* Switching the hook off keeps what is held; whatever is still held
     * when the endpoints are freed is freed with them (LSan checks). */
    assert_int_equal(fx_quic_endpoint_set_test_delay(t->srv, 0), 0);
    h_free(t);
}

static void test_random_datagrams_dropped_and_counted(void **state)
{
    h *t = h_new();
    t->so.handshake_timeout_ns = 200 * FX_NS_PER_MS;
    start_server(t);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons(fx_quic_endpoint_port(t->srv))};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    uint8_t buf[1500];
    srand(1234);
    const int n = 400;
    for (int i = 0; i < n; i++) {
        size_t len = (size_t)(rand() % (int)sizeof(buf));
        for (size_t k = 0; k < len; k++)
            buf[k] = (uint8_t)rand();
        if (i % 2 == 0 && len > 6) {
            /* Plausible long headers with QUIC v1, to get past the first checks. */
            buf[0] = 0xc0 | (buf[0] & 0x0f);
            buf[1] = buf[2] = buf[3] = 0;
            buf[4] = 1;
            buf[5] = (uint8_t)(8 + rand() % 13);
        }
        assert_true(sendto(fd, buf, len, 0, (struct sockaddr *)&to, sizeof(to)) >= 0);
        if (i % 50 == 49)
            run_for(t, 2); /* let the server drain its socket */
    }
    close(fd);
    fx_quic_stats st;
    for (int i = 0; i < 500; i++) {
        run_for(t, 5);
        fx_quic_endpoint_get_stats(t->srv, &st);
        if (st.rx_datagrams == (uint64_t)n && st.conns_open == 0)
            break;
    }
    assert_int_equal(st.rx_datagrams, n);
    assert_true(st.rx_dropped > 0);
    assert_int_equal(st.rx_dropped + st.conns_accepted, n);
    assert_int_equal(st.conns_open, 0);
    /* The server still serves real clients. */
    start_client(t);
    connect_client(t);
    assert_true(run_until(t, both_handshaken, 5000));
    h_free(t);
}

static void test_stateless_reset_answers_unknown_short_header_rate_limited(void **state)
{
    h *t = h_new();
    t->so.stateless_reset_rate = 10;
    start_server(t);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    assert_true(fd >= 0);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons(fx_quic_endpoint_port(t->srv))};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    uint8_t buf[100];
    for (int i = 0; i < 50; i++) {
        for (size_t k = 0; k < sizeof(buf); k++)
            buf[k] = (uint8_t)rand();
        buf[0] = (uint8_t)(0x40 | (buf[0] & 0x3f)); /* short header */
        assert_int_equal(sendto(fd, buf, sizeof(buf), 0, (struct sockaddr *)&to, sizeof(to)),
                         (ssize_t)sizeof(buf));
    }
    int got = 0;
    for (int i = 0; i < 100; i++) {
        run_for(t, 2);
        uint8_t in[200];
        ssize_t n;
        while ((n = recv(fd, in, sizeof(in), 0)) > 0) {
            got++;
            assert_true(n >= 21 && n < (ssize_t)sizeof(buf)); /* smaller than the trigger */
            assert_true((in[0] & 0xc0) == 0x40);              /* looks like a short header */
        }
    }
    close(fd);
    assert_int_equal(got, 10);
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(t->srv, &st);
    assert_int_equal(st.stateless_resets_sent, 10);
    assert_int_equal(st.rx_dropped, 50);
    h_free(t);
}

static void test_restarted_server_resets_old_connections_at_once(void **state)
{
    h *t = h_new();
    t->so.idle_timeout_ns = t->co.idle_timeout_ns = 30 * FX_NS_PER_S;
    accepted_with(t);
    uint16_t port = fx_quic_endpoint_port(t->srv);
    /* The server vanishes without a word (its CONNECTION_CLOSE is lost)... */
    fx_quic_endpoint_set_test_drop(t->srv, 1000);
    fx_quic_endpoint_free(t->srv);
    /* ...and comes back on the same port with the same state_dir. */
    assert_int_equal(fx_quic_server_new(&t->srv, t->loop, "127.0.0.1", port, &t->so, &CBS, t), 0);
    int64_t sid = open_bidi(t);
    assert_int_equal(fx_quic_stream_send(t->c.conn, sid, t->pat, 0, 100, false), 0);
    assert_true(run_until(t, client_closed, 5000)); /* well before the 30 s idle timeout */
    assert_int_equal(t->c.last_close.reason, FX_ECONNLOST);
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(t->srv, &st);
    assert_true(st.stateless_resets_sent >= 1);
    h_free(t);
}

/* The server process dies without a word (its CONNECTION_CLOSE lost, its
 * port closed): the client's next datagram draws an ICMP port unreachable
 * from 127.0.0.1, which ends the connection at once, not after 30 s. */
static void test_icmp_port_unreachable_ends_a_client_connection_at_once(void **state)
{
    h *t = h_new();
    t->so.idle_timeout_ns = t->co.idle_timeout_ns = 30 * FX_NS_PER_S;
    accepted_with(t);
    fx_quic_endpoint_set_test_drop(t->srv, 1000);
    fx_quic_endpoint_free(t->srv);
    t->srv = NULL;
    uint64_t t0 = fx_now_ns();
    int64_t sid = open_bidi(t);
    assert_int_equal(fx_quic_stream_send(t->c.conn, sid, t->pat, 0, 100, false), 0);
    assert_true(run_until(t, client_closed, 5000));
    assert_true(fx_now_ns() - t0 < FX_NS_PER_S);
    assert_int_equal(t->c.last_close.reason, -ECONNREFUSED);
    assert_non_null(strstr(t->c.last_close.text, "port unreachable"));
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(t->cli, &st);
    assert_true(st.icmp_errors >= 1);
    assert_int_equal(st.icmp_closes, 1);
    h_free(t);
}

/* One client endpoint, two connections: one to a live server, one to a port
 * nothing listens on. The second ends with -ECONNREFUSED; the first, whose
 * socket saw that ICMP error too (and had it reported on its sends and
 * receives), goes on echoing. */
static void test_icmp_error_for_another_port_leaves_a_healthy_connection_alone(void **state)
{
    h *t = h_new();
    t->so.idle_timeout_ns = t->co.idle_timeout_ns = 30 * FX_NS_PER_S;
    t->s.mode = M_ECHO;
    accepted_with(t);
    fx_quic_conn *live = t->c.conn;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, len), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd); /* its port is closed now: datagrams to it draw port unreachables */
    fx_quic_conn *dead = NULL;
    assert_int_equal(fx_quic_connect(t->cli, "127.0.0.1", ntohs(sa.sin_port), &t->cc, t, &dead), 0);
    t->c.conn = live;
    assert_true(run_until(t, client_closed, 5000));
    assert_int_equal(t->c.last_close.reason, -ECONNREFUSED);
    assert_int_equal(t->s.closed, 0);
    /* The live connection still carries data both ways. */
    assert_non_null(t->c.conn);
    g_sid = open_bidi(t);
    g_len = 100000;
    assert_int_equal(fx_quic_stream_send(t->c.conn, g_sid, t->pat, 0, g_len, true), 0);
    assert_true(run_until(t, echo_done, 5000));
    assert_false(st_of(&t->c, g_sid)->bad);
    assert_int_equal(t->c.closed, 1);
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(t->cli, &st);
    assert_int_equal(st.icmp_closes, 1);
    h_free(t);
}

/* A server restarted on the same port (same state_dir) takes a new
 * connection from the same client endpoint at once, while the old one is
 * reset: nothing of the earlier ICMP handling sticks to the address. */
static void test_server_back_on_its_port_takes_a_new_connection_after_icmp_errors(void **state)
{
    h *t = h_new();
    t->so.idle_timeout_ns = t->co.idle_timeout_ns = 30 * FX_NS_PER_S;
    accepted_with(t);
    uint16_t port = fx_quic_endpoint_port(t->srv);
    fx_quic_endpoint_set_test_drop(t->srv, 1000);
    fx_quic_endpoint_free(t->srv);
    t->srv = NULL;
    int64_t sid = open_bidi(t);
    assert_int_equal(fx_quic_stream_send(t->c.conn, sid, t->pat, 0, 100, false), 0);
    assert_true(run_until(t, client_closed, 5000));
    assert_int_equal(t->c.last_close.reason, -ECONNREFUSED);
    assert_int_equal(fx_quic_server_new(&t->srv, t->loop, "127.0.0.1", port, &t->so, &CBS, t), 0);
    t->c.handshakes = t->s.handshakes = 0;
    connect_client(t);
    assert_true(run_until(t, both_handshaken, 5000));
    assert_int_equal(t->c.closed, 1);
    h_free(t);
}

static int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

static bool conns_cycled(h *t)
{
    return t->c.closed == t->want_streams && t->s.closed == t->want_streams;
}

/* Keeps |max_inflight| connections in their lifecycle: connect, handshake,
 * close by the client. */
static void conns_tick(h *t)
{
    while (t->opened_streams - t->c.closed < t->max_inflight &&
           t->opened_streams < t->want_streams) {
        fx_quic_conn *c;
        assert_int_equal(
            fx_quic_connect(t->cli, "127.0.0.1", fx_quic_endpoint_port(t->srv), &t->cc, t, &c), 0);
        t->opened_streams++;
    }
}

static void close_on_handshake(fx_quic_conn *c, void *user)
{
    h *t = user;
    side_of(t, c)->handshakes++;
    if (!fx_quic_conn_is_server(c))
        fx_quic_conn_close(c, 3, "cycle");
}

static void test_many_connections_open_close(void **state)
{
    h *t = h_new();
    start_server(t);
    fx_quic_callbacks cb = CBS;
    cb.on_handshake_done = close_on_handshake;
    assert_int_equal(fx_quic_client_new(&t->cli, t->loop, &t->co, &cb, t), 0);
    int fds = count_fds();
    t->want_streams = 200;
    t->max_inflight = 10;
    t->tick = conns_tick;
    assert_true(run_until(t, conns_cycled, 60000));
    t->tick = NULL;
    assert_int_equal(t->c.handshakes, 200);
    /* Closed right at handshake completion, before the server confirmed
     * it: the code then travels as APPLICATION_ERROR without the value. */
    assert_int_equal(t->s.last_close.reason, FX_ECLOSED);
    assert_true(t->s.last_close.app);
    fx_quic_stats st;
    fx_quic_endpoint_get_stats(t->srv, &st);
    assert_int_equal(st.conns_open, 0);
    assert_int_equal(st.conns_accepted, 200);
    fx_quic_endpoint_get_stats(t->cli, &st);
    assert_int_equal(st.conns_open, 0);
    assert_int_equal(count_fds(), fds);
    h_free(t);
}

/* ---- credit ----------------------------------------------------------------- */

static void test_credit_not_granted_until_consumed(void **state)
{
    h *t = h_new();
    t->so.stream_window = 64 << 10;
    t->so.conn_window = 1 << 20;
    t->so.max_stream_window = 64 << 10;
    accepted_with(t);
    t->s.mode = M_HOLD;
    int64_t sid = open_bidi(t);
    assert_int_equal(fx_quic_stream_send(t->c.conn, sid, t->pat, 0, 1u << 20, true), 0);
    run_for(t, 300);
    rxst *r = st_of(&t->s, sid);
    assert_int_equal(r->got, 64 << 10); /* exactly the window, however long we wait */
    assert_true(fx_quic_conn_unacked(t->c.conn) > 0);
    /* Consuming grants credit, which the sender uses at once. */
    t->s.mode = M_SINK;
    assert_int_equal(fx_quic_stream_consume(t->s.conn, sid, r->got), 0);
    g_sid = sid;
    bool ok = false;
    for (int i = 0; i < 1000 && !ok; i++) {
        run_for(t, 5);
        ok = r->fin && r->got == (1u << 20);
    }
    assert_true(ok);
    assert_false(r->bad);
    h_free(t);
}

static void test_unacked_cap_refuses_then_reports_writable(void **state)
{
    h *t = h_new();
    t->co.unacked_cap = 256 << 10;
    t->so.stream_window = 64 << 10;
    t->so.max_stream_window = 64 << 10;
    accepted_with(t);
    t->s.mode = M_HOLD;
    int64_t sid = open_bidi(t);
    assert_int_equal(fx_quic_stream_send(t->c.conn, sid, t->pat, 0, 200 << 10, false), 0);
    assert_int_equal(fx_quic_stream_send(t->c.conn, sid, t->pat, 0, 100 << 10, false), FX_EFULL);
    run_for(t, 100);
    assert_int_equal(t->c.writable, 0);
    t->s.mode = M_SINK;
    assert_int_equal(fx_quic_stream_consume(t->s.conn, sid, 64 << 10), 0);
    for (int i = 0; i < 1000 && t->c.writable == 0; i++)
        run_for(t, 5);
    assert_int_equal(t->c.writable, 1);
    assert_true(fx_quic_conn_unacked(t->c.conn) <= 128 << 10);
    h_free(t);
}

static void test_opts_from_env_reads_felix_variables_and_rejects_garbage(void **state)
{
    fx_quic_opts o;
    fx_quic_opts_default(&o);
    assert_int_equal(o.udp_send_buffer, 8 << 20);
    assert_int_equal(o.mtu_upper_bound, 1452);
    setenv("FELIX_UDP_SEND_BUFFER", "1048576", 1);
    setenv("FELIX_UDP_RECV_BUFFER", "2097152", 1);
    setenv("FELIX_INITIAL_MTU", "16384", 1);
    setenv("FELIX_MTU_UPPER_BOUND", "16384", 1);
    setenv("FELIX_MAX_UDP_PAYLOAD", "65000", 1);
    setenv("FELIX_LOOPBACK_MTU", "0", 1);
    setenv("FELIX_CONN_STATS_MS", "250", 1);
    assert_int_equal(fx_quic_opts_from_env(&o), 0);
    assert_int_equal(o.loopback_mtu, 0);
    assert_int_equal(o.stats_log_ns, 250 * FX_NS_PER_MS);
    unsetenv("FELIX_CONN_STATS_MS");
    assert_int_equal(o.udp_send_buffer, 1 << 20);
    assert_int_equal(o.udp_recv_buffer, 2 << 20);
    assert_int_equal(o.initial_mtu, 16384);
    assert_int_equal(o.mtu_upper_bound, 16384);
    assert_int_equal(o.max_udp_payload, 65000);
    setenv("FELIX_MTU_UPPER_BOUND", "70000", 1); /* above the IPv4 UDP limit */
    setenv("FELIX_UDP_SEND_BUFFER", "lots", 1);
    assert_int_equal(fx_quic_opts_from_env(&o), FX_ECONFIG);
    assert_int_equal(o.mtu_upper_bound, 16384);
    assert_int_equal(o.udp_send_buffer, 1 << 20);
    unsetenv("FELIX_MTU_UPPER_BOUND");
    unsetenv("FELIX_UDP_SEND_BUFFER");
    setenv("FELIX_LOOPBACK_MTU", "800", 1); /* below QUIC's minimum datagram */
    assert_int_equal(fx_quic_opts_from_env(&o), FX_ECONFIG);
    unsetenv("FELIX_LOOPBACK_MTU");
    unsetenv("FELIX_UDP_RECV_BUFFER");
    unsetenv("FELIX_INITIAL_MTU");
    unsetenv("FELIX_MTU_UPPER_BOUND");
    unsetenv("FELIX_MAX_UDP_PAYLOAD");
}

/* ---- certificate reload and IPv6 ------------------------------------------- */

static bool client_handshake_or_close(h *t)
{
    return t->c.handshakes + t->c.closed > 0;
}

/* Starts a second client connection pinned to |pin| and runs until it
 * finishes its handshake or closes; returns the close reason (0: accepted). */
static int connect_pinned(h *t, const char *pin)
{
    t->c.handshakes = t->c.closed = 0;
    t->c.last_close = (fx_quic_close_info){0};
    fx_quic_conn *c = NULL;
    t->cc = (fx_quic_connect_opts){.pin_sha256 = pin};
    assert_int_equal(
        fx_quic_connect(t->cli, "127.0.0.1", fx_quic_endpoint_port(t->srv), &t->cc, t, &c), 0);
    assert_true(run_until(t, client_handshake_or_close, 5000));
    if (t->c.handshakes > 0) {
        fx_quic_conn_close(c, 0, "test done");
        run_for(t, 20);
        return 0;
    }
    return t->c.last_close.reason;
}

static void echo_on(h *t, fx_quic_conn *c, uint64_t len)
{
    t->s.mode = M_ECHO;
    assert_int_equal(fx_quic_conn_open_bidi(c, NULL, &g_sid), 0);
    g_len = len;
    assert_int_equal(fx_quic_stream_send(c, g_sid, t->pat, 0, len, true), 0);
    assert_true(run_until(t, echo_done, 5000));
    assert_false(st_of(&t->c, g_sid)->bad);
}

static void test_reload_credentials_serve_new_connections_and_keep_old_ones(void **state)
{
    h *t = h_new();
    static char cert[128], key[128];
    snprintf(cert, sizeof(cert), "%s/srv.pem", t->dir);
    snprintf(key, sizeof(key), "%s/srv.key", t->dir);
    assert_int_equal(fx_quic_cert_generate(cert, key, NULL), 0);
    t->so.cert_file = cert;
    t->so.key_file = key;
    static char fp_old[65], fp_new[65];
    assert_int_equal(fx_quic_cert_fingerprint(cert, fp_old), 0);
    t->cc = (fx_quic_connect_opts){.pin_sha256 = fp_old};
    accepted_with(t); /* the long-lived connection, on the old certificate */
    fx_quic_conn *old = t->c.conn;
    assert_string_equal(fx_quic_endpoint_fingerprint(t->srv), fp_old);

    /* Rotate the files (rename, as deploy tools do) and reload. */
    assert_int_equal(fx_quic_cert_generate(cert, key, NULL), 0);
    assert_int_equal(fx_quic_cert_fingerprint(cert, fp_new), 0);
    assert_string_not_equal(fp_old, fp_new);
    assert_int_equal(fx_quic_endpoint_reload_credentials(t->srv), 0);
    assert_string_equal(fx_quic_endpoint_fingerprint(t->srv), fp_new);

    /* New clients see the new certificate, and only it. */
    assert_int_equal(connect_pinned(t, fp_new), 0);
    assert_int_equal(connect_pinned(t, fp_old), FX_ETLS_PIN);

    /* The connection from before the reload was not touched and still works. */
    t->c.closed = 0;
    echo_on(t, old, 4000);
    assert_int_equal(t->c.closed, 0);
    h_free(t);
}

static void test_reload_credentials_with_bad_file_keeps_old_certificate(void **state)
{
    h *t = h_new();
    start_server(t); /* generated pair in state_dir */
    static char fp[65];
    snprintf(fp, sizeof(fp), "%s", fx_quic_endpoint_fingerprint(t->srv));
    char cert[128];
    snprintf(cert, sizeof(cert), "%s/tls-cert.pem", t->dir);
    FILE *f = fopen(cert, "w");
    assert_non_null(f);
    fputs("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n", f);
    fclose(f);
    assert_int_equal(fx_quic_endpoint_reload_credentials(t->srv), FX_ETLS);
    assert_string_equal(fx_quic_endpoint_fingerprint(t->srv), fp);
    /* A valid certificate whose key is another one's is refused too. */
    char other_key[128];
    snprintf(other_key, sizeof(other_key), "%s/other.key", t->dir);
    assert_int_equal(fx_quic_cert_generate(cert, other_key, NULL), 0);
    assert_int_equal(fx_quic_endpoint_reload_credentials(t->srv), FX_ETLS);
    assert_string_equal(fx_quic_endpoint_fingerprint(t->srv), fp);
    start_client(t);
    assert_int_equal(connect_pinned(t, fp), 0);
    /* A client endpoint has no certificate to reload. */
    assert_int_equal(fx_quic_endpoint_reload_credentials(t->cli), FX_ECONFIG);
    h_free(t);
}

static bool has_ipv6_loopback(void)
{
    int fd = socket(AF_INET6, SOCK_DGRAM, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

static void test_ipv6_loopback_handshake(void **state)
{
    if (!has_ipv6_loopback())
        fx_test_skip("no IPv6 loopback (::1) on this host");
    h *t = h_new();
    assert_int_equal(fx_quic_server_new(&t->srv, t->loop, "::1", 0, &t->so, &CBS, t), 0);
    start_client(t);
    assert_int_equal(
        fx_quic_connect(t->cli, "::1", fx_quic_endpoint_port(t->srv), &t->cc, t, &t->c.conn), 0);
    assert_true(run_until(t, both_handshaken, 5000));
    echo_on(t, t->c.conn, 3000);
    h_free(t);
}

/* The same over IPv6: an ICMPv6 port unreachable from ::1 ends the
 * connection at once. */
static void test_icmpv6_port_unreachable_ends_a_client_connection_at_once(void **state)
{
    if (!has_ipv6_loopback())
        fx_test_skip("no IPv6 loopback (::1) on this host");
    h *t = h_new();
    t->so.idle_timeout_ns = t->co.idle_timeout_ns = 30 * FX_NS_PER_S;
    assert_int_equal(fx_quic_server_new(&t->srv, t->loop, "::1", 0, &t->so, &CBS, t), 0);
    start_client(t);
    assert_int_equal(
        fx_quic_connect(t->cli, "::1", fx_quic_endpoint_port(t->srv), &t->cc, t, &t->c.conn), 0);
    assert_true(run_until(t, both_handshaken, 5000));
    fx_quic_endpoint_set_test_drop(t->srv, 1000);
    fx_quic_endpoint_free(t->srv);
    t->srv = NULL;
    int64_t sid = open_bidi(t);
    assert_int_equal(fx_quic_stream_send(t->c.conn, sid, t->pat, 0, 100, false), 0);
    assert_true(run_until(t, client_closed, 5000));
    assert_int_equal(t->c.last_close.reason, -ECONNREFUSED);
    assert_non_null(strstr(t->c.last_close.text, "from ::1"));
    h_free(t);
}

static void test_dual_stack_server_serves_ipv4_and_ipv6_from_one_client_endpoint(void **state)
{
    if (!has_ipv6_loopback())
        fx_test_skip("no IPv6 loopback (::1) on this host");
    h *t = h_new();
    assert_int_equal(fx_quic_server_new(&t->srv, t->loop, "::", 0, &t->so, &CBS, t), 0);
    start_client(t);
    uint16_t port = fx_quic_endpoint_port(t->srv);
    assert_int_equal(fx_quic_connect(t->cli, "127.0.0.1", port, &t->cc, t, &t->c.conn), 0);
    assert_true(run_until(t, both_handshaken, 5000));
    echo_on(t, t->c.conn, 2000);
    fx_quic_conn *v6 = NULL;
    assert_int_equal(fx_quic_connect(t->cli, "::1", port, &t->cc, t, &v6), 0);
    assert_true(run_until(t, two_client_handshakes, 5000));
    assert_int_equal(t->c.handshakes, 2);
    memset(t->c.st, 0, sizeof(t->c.st)); /* stream 0 again, on the new connection */
    memset(t->s.st, 0, sizeof(t->s.st));
    echo_on(t, v6, 2000);
    assert_false(t->s.st[0].bad);
    assert_int_equal(t->c.closed, 0);
    h_free(t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_opts_from_env_reads_felix_variables_and_rejects_garbage),
    cmocka_unit_test(test_handshake_and_echo),
    cmocka_unit_test(test_metrics_count_connections_and_datagrams),
    cmocka_unit_test(test_bulk_transfer_checksummed_both_directions_one_stream),
    cmocka_unit_test(test_bulk_transfer_checksummed_both_directions_1000_streams),
    cmocka_unit_test(test_bulk_with_pinned_16k_datagrams_and_gso),
    cmocka_unit_test(test_loopback_peers_pin_loopback_mtu_from_the_first_packet),
    cmocka_unit_test(test_loopback_mtu_zero_probes_as_on_any_path),
    cmocka_unit_test(test_conn_stats_logged_periodically_when_asked),
    cmocka_unit_test(test_bulk_without_gso_uses_plain_datagrams),
    cmocka_unit_test(test_half_open_cap_defers_extra_handshakes),
    cmocka_unit_test(test_retry_under_load_validates_address_then_accepts),
    cmocka_unit_test(test_wildcard_server_answers_from_the_address_the_client_used),
    cmocka_unit_test(test_second_server_on_same_port_refused),
    cmocka_unit_test(test_many_small_sends_arrive_in_order),
    cmocka_unit_test(test_shared_buffer_referenced_per_stream_released_on_ack),
    cmocka_unit_test(test_is_sending_only_asks_and_notify_sent_reports_once_written),
    cmocka_unit_test(test_thousands_of_streams_open_close_on_one_connection),
    cmocka_unit_test(test_server_uni_streams_open_close_beyond_client_limit),
    cmocka_unit_test(test_wrong_ca_refused),
    cmocka_unit_test(test_pin_mismatch_refused),
    cmocka_unit_test(test_expired_cert_refused),
    cmocka_unit_test(test_wrong_name_refused),
    cmocka_unit_test(test_insecure_accepts),
    cmocka_unit_test(test_ca_file_accepts_ip_and_dns_names),
    cmocka_unit_test(test_key_temp_file_never_follows_a_planted_link),
    cmocka_unit_test(test_pin_match_accepts),
    cmocka_unit_test(test_generated_cert_reused_across_restarts),
    cmocka_unit_test(test_server_accepts_client_without_alpn),
    cmocka_unit_test(test_client_with_other_alpn_refused),
    cmocka_unit_test(test_idle_timeout_closes_silent_connection),
    cmocka_unit_test(test_server_keepalive_keeps_quiet_connection_open),
    cmocka_unit_test(test_keepalive_keeps_quiet_connection_open),
    cmocka_unit_test(test_endpoint_free_closes_connections_with_reason),
    cmocka_unit_test(test_stream_reset_reports_code_and_releases_buffers),
    cmocka_unit_test(test_reset_releases_unsent_bytes_at_once_and_sent_ones_once_acked),
    cmocka_unit_test(test_peer_stop_sending_keeps_sent_bytes_until_acked_or_closed),
    cmocka_unit_test(test_drain_closes_idle_connection_and_refuses_new_ones),
    cmocka_unit_test(test_drain_waits_for_unacked_bytes_until_deadline),
    cmocka_unit_test(test_loss_hook_5_percent_delivers_in_order),
    cmocka_unit_test(test_stream_frames_ngtcp2_loses_under_loss_are_freed_with_the_connection),
    cmocka_unit_test(test_delay_hook_delays_delivery_by_at_least_the_delay),
    cmocka_unit_test(test_random_datagrams_dropped_and_counted),
    cmocka_unit_test(test_stateless_reset_answers_unknown_short_header_rate_limited),
    cmocka_unit_test(test_restarted_server_resets_old_connections_at_once),
    cmocka_unit_test(test_icmp_port_unreachable_ends_a_client_connection_at_once),
    cmocka_unit_test(test_icmp_error_for_another_port_leaves_a_healthy_connection_alone),
    cmocka_unit_test(test_server_back_on_its_port_takes_a_new_connection_after_icmp_errors),
    cmocka_unit_test(test_many_connections_open_close),
    cmocka_unit_test(test_credit_not_granted_until_consumed),
    cmocka_unit_test(test_unacked_cap_refuses_then_reports_writable),
    cmocka_unit_test(test_reload_credentials_serve_new_connections_and_keep_old_ones),
    cmocka_unit_test(test_reload_credentials_with_bad_file_keeps_old_certificate),
    cmocka_unit_test(test_ipv6_loopback_handshake),
    cmocka_unit_test(test_icmpv6_port_unreachable_ends_a_client_connection_at_once),
    cmocka_unit_test(test_dual_stack_server_serves_ipv4_and_ipv6_from_one_client_endpoint),
};
FX_TEST_MAIN(tests)
