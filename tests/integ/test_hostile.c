/* Integration tests of the limits that protect a broker from clients that
 * never authenticate or misbehave before (and a few after) authenticating:
 * a real fx_broker on 127.0.0.1 port 0, the raw QUIC client of
 * broker_client.h on the test thread's loop (sending from 127.0.0.2 as a
 * second source address), and libfelix for the legitimate clients. Counters
 * are checked as differences of fx_metrics_snapshot_take() around each
 * scenario. */
/* fx-test-libs: fx_broker fx_client fx_server fx_quic fx_wire fx_base */
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth/auth.h"
#include "integ/broker_client.h"
#include "server/authn.h"

#define FLAG_UNKNOWN 0x0040
#define FLAG_PUBLISH_BATCH 0x0001

/* ---- tokens ------------------------------------------------------------------------------ */

/* The broker's token check: key "k1" in a JWKS file in the state dir. */
typedef struct jwt_keys {
    fx_authn *authn;
    char jwks[160];
    uint8_t pub[FX_AUTH_KEY_BYTES], priv[FX_AUTH_KEY_BYTES];
} jwt_keys;

static void write_jwks(const char *path, const char *kid, const uint8_t *pub)
{
    char tmp[200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    assert_int_equal(fx_auth_jwks_write(f, kid, pub), 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, path), 0);
}

/* Makes the broker of |t| (not started) check tokens signed by key "k1" of
 * |k| (no leeway, so an expiry is enforced to the second). |k| must outlive
 * the broker: jwt_keys_deinit after t_free. */
static void jwt_keys_init(jwt_keys *k, T *t)
{
    memset(k, 0, sizeof(*k));
    snprintf(k->jwks, sizeof(k->jwks), "%s/jwks.json", t->dir);
    assert_int_equal(fx_auth_keygen(k->pub, k->priv), 0);
    write_jwks(k->jwks, "k1", k->pub);
    char why[512];
    fx_authn_opts ao = {.jwks_file = k->jwks, .leeway_s = 0};
    if (fx_authn_new(&k->authn, &ao, why, sizeof(why)) != 0)
        fail_msg("authn: %s", why);
    fx_authn_broker_auth(k->authn, &t->bo.auth);
}

static void jwt_keys_deinit(jwt_keys *k)
{
    fx_authn_free(k->authn);
}

static int64_t unix_now(void)
{
    return (int64_t)time(NULL);
}

/* A token of key k1 for tenant t1 that may publish and subscribe, expiring
 * |exp_in| seconds from now. */
static char *mint(const jwt_keys *k, int64_t exp_in)
{
    static const char *const perms[] = {"stream.publish:stream:t1/*/*",
                                        "stream.subscribe:stream:t1/*/*"};
    fx_auth_mint_claims c = {.sub = "tester",
                             .tid = "t1",
                             .iat = unix_now(),
                             .has_iat = true,
                             .exp = unix_now() + exp_in,
                             .perms = perms,
                             .nperms = 2};
    char *token = NULL;
    assert_int_equal(fx_auth_mint(k->priv, "k1", &c, &token), 0);
    return token;
}

/* ---- raw client helpers ------------------------------------------------------------------ */

static void send_auth(tstream *s, const char *token)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "{\"type\":\"auth\",\"tenant_id\":\"t1\",\"token\":\"%s\"}",
             token != NULL ? token : "x");
    send_json(s, buf);
}

/* A reply arrived on the stream (t->arg), or it or its connection ended. */
static bool has_frames(T *t)
{
    tstream *s = t->arg;
    return s->frames > 0 || s->closed || s->tc->closed;
}

/* Authenticates |s| (any token with auth_mode none) and checks auth_ok. */
static void auth_ok(T *t, tstream *s, const char *token)
{
    send_auth(s, token);
    assert_true(run_until_arg(t, has_frames, s, 5000));
    assert_int_equal(s->last_type, FX_MSG_OK); /* no client_flags: the legacy answer */
    s->frames = 0;
}

static bool stream_done(T *t)
{
    tstream *s = t->arg;
    return s->closed || s->fin || s->tc->closed;
}

static bool conn_closed(T *t)
{
    return ((tconn *)t->arg)->closed;
}

static fx_metrics_snapshot snap(void)
{
    fx_metrics_snapshot m;
    fx_metrics_snapshot_take(&m);
    return m;
}

typedef struct count_wait {
    const fx_metrics_snapshot *before;
    int64_t n;
} count_wait;

static bool closes_reached(T *t)
{
    count_wait *w = t->arg;
    fx_metrics_snapshot now = snap();
    return DELTA(*w->before, now, quic_conn_closed) >= w->n;
}

/* Waits until |n| QUIC connection ends were counted since |before|: the
 * broker's end of a connection and the test client's end count one each,
 * and the broker counts its end once it has let go of the connection
 * (after on_conn_closed). */
static void wait_closes(T *t, const fx_metrics_snapshot *before, int64_t n)
{
    count_wait w = {before, n};
    if (!run_until_arg(t, closes_reached, &w, 5000)) {
        fx_metrics_snapshot now = snap();
        fail_msg("%lld connection ends counted, want %lld",
                 (long long)DELTA(*before, now, quic_conn_closed), (long long)n);
    }
}

static bool held_reached(T *t)
{
    count_wait *w = t->arg;
    fx_metrics_snapshot now = snap();
    return now.g.preauth_held_bytes - w->before->g.preauth_held_bytes == w->n;
}

/* Waits until the pre-auth frame bytes held differ from |before|'s by |n|. */
static void wait_held(T *t, const fx_metrics_snapshot *before, int64_t n)
{
    count_wait w = {before, n};
    if (!run_until_arg(t, held_reached, &w, 5000)) {
        fx_metrics_snapshot now = snap();
        fail_msg("pre-auth bytes held: %lld more, want %lld",
                 (long long)(now.g.preauth_held_bytes - before->g.preauth_held_bytes),
                 (long long)n);
    }
}

/* Sends the first |n| bytes of a frame announcing a |len|-byte JSON body
 * (zeros) on |s|: a frame that never completes. */
static void send_partial(tstream *s, uint32_t len, size_t n)
{
    assert_true(n < FX_WIRE_HEADER_LEN + len);
    uint8_t *p = calloc(1, FX_WIRE_HEADER_LEN + len);
    assert_non_null(p);
    fx_frame_header_put(p, 0, len);
    send_bytes(s, p, n);
    free(p);
}

static fx_client *legit_client(T *t, const char *token)
{
    fx_client_opts o;
    fix_client_opts(&o, t->b, t->server, "t1", token != NULL ? token : "x");
    return fix_connect(&o);
}

/* An acked publish by |c| must be answered within |ms|. */
static void legit_publish_within(fx_client *c, uint64_t ms)
{
    uint64_t t0 = fx_now_ns();
    assert_int_equal(fx_publish(c, NS, "legit", "ping", 4, FX_ACK_PER_MESSAGE), 0);
    uint64_t took = (fx_now_ns() - t0) / FX_NS_PER_MS;
    if (took > ms)
        fail_msg("legitimate publish took %llu ms", (unsigned long long)took);
}

/* ---- item: frames before auth ------------------------------------------------------------ */

/* Headers announcing 16 MiB from streams that never authenticate are refused
 * at once instead of filling the shared publish budget (four of them used to
 * hold all 64 MiB), so a legitimate acked publish goes through; a small
 * frame that never completes is reset at the auth deadline. */
static void test_budget_hog_before_auth_never_holds_the_publish_budget(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.auth_timeout_ns = 800 * FX_NS_PER_MS;
    t_start(t);
    fx_metrics_snapshot m0 = snap();
    tstream *hogs[4];
    for (int i = 0; i < 4; i++) {
        tconn *c = t_connect_from(t, 1);
        assert_true(c->up);
        hogs[i] = open_bidi(c);
        uint8_t hdr[FX_WIRE_HEADER_LEN];
        fx_frame_header_put(hdr, FLAG_PUBLISH_BATCH, 16u << 20);
        send_bytes(hogs[i], hdr, sizeof(hdr));
    }
    tconn *slow = t_connect_from(t, 1);
    auth_ok(t, open_bidi(slow), NULL); /* so that only the stream's own deadline applies */
    tstream *partial = open_bidi(slow);
    uint8_t hdr[FX_WIRE_HEADER_LEN];
    fx_frame_header_put(hdr, 0, 60000); /* within the pre-auth cap, body never sent */
    send_bytes(partial, hdr, sizeof(hdr));
    run_for(t, 200);
    for (int i = 0; i < 4; i++)
        assert_true(run_until_arg(t, stream_done, hogs[i], 2000));

    fx_client *c = legit_client(t, NULL);
    legit_publish_within(c, 1000);
    fix_close(c);

    uint64_t t0 = fx_now_ns();
    assert_true(run_until_arg(t, stream_done, partial, 5000));
    assert_true(partial->reset);
    assert_true(fx_now_ns() - t0 < 3000 * FX_NS_PER_MS); /* auth deadline, not frame_read_timeout */
    fx_metrics_snapshot m1 = snap();
    assert_true(DELTA(m0, m1, preauth_frame_too_large) >= 4);
    assert_int_equal(DELTA(m0, m1, ingress_reserve_waited), 0);
    assert_true(DELTA(m0, m1, preauth_stream_auth_timeout) >= 1);
    assert_int_equal(m1.g.ingress_reserved_bytes, 0);
    t_free(t);
}

/* ---- item: reply flood ------------------------------------------------------------------- */

/* Before auth a protocol error ends the stream: one error reply and the FIN,
 * however many bad frames follow (each used to queue its own reply). */
static void test_protocol_error_before_auth_ends_the_stream_after_one_reply(void **state)
{
    (void)state;
    T *t = t_new();
    t_start(t);
    fx_metrics_snapshot m0 = snap();
    tconn *c = t_connect_from(t, 1);
    tstream *s = open_bidi(c);
    for (int i = 0; i < 200; i++)
        send_frame(s, FLAG_UNKNOWN, NULL, 0);
    assert_true(run_until_arg(t, stream_done, s, 3000));
    run_for(t, 300);
    assert_int_equal(s->frames, 1);
    assert_int_equal(s->last_type, FX_MSG_ERROR);
    assert_string_equal(s->last, "unsupported frame flags");
    assert_true(s->fin);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(DELTA(m0, m1, preauth_protocol_error), 1);
    t_free(t);
}

/* After auth, unread replies are bounded per connection, not only per
 * stream: four streams below the per-stream mark together reach the
 * connection's bound, which stops their reading (counted). */
static void test_connection_reply_queue_is_bounded_across_streams(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.quic.unacked_cap = 64 * 1024; /* replies stay queued at the broker */
    t->co.stream_window = 16 * 1024;
    t->co.conn_window = 64 * 1024;
    t_start(t);
    fx_metrics_snapshot m0 = snap();
    tconn *c = t_connect_from(t, 0);
    uint8_t *flood = calloc(1500, FX_WIRE_HEADER_LEN);
    assert_non_null(flood);
    for (int i = 0; i < 1500; i++)
        fx_frame_header_put(flood + i * FX_WIRE_HEADER_LEN, FLAG_UNKNOWN, 0);
    tstream *s[4];
    for (int i = 0; i < 4; i++) { /* all authenticated before any window closes */
        s[i] = open_bidi(c);
        auth_ok(t, s[i], NULL);
    }
    for (int i = 0; i < 4; i++) {
        s[i]->stalled = true;
        send_bytes(s[i], flood, 1500 * FX_WIRE_HEADER_LEN);
    }
    free(flood);
    run_for(t, 1500);
    fx_metrics_snapshot m1 = snap();
    assert_true(DELTA(m0, m1, broker_conn_replies_full) >= 1);
    assert_false(c->closed);
    t_free(t);
}

/* ---- item: JSON bomb --------------------------------------------------------------------- */

/* A JSON frame of more elements than any message holds is refused before
 * jansson builds its tree; a JSON publish batch of 65,536 payloads (the
 * most a batch may hold, as a binary one) is not. */
static void test_json_element_bomb_is_refused_before_parsing(void **state)
{
    (void)state;
    T *t = t_new();
    t_start(t);
    fx_metrics_snapshot m0 = snap();
    tconn *c = t_connect_from(t, 0);
    tstream *ok = open_bidi(c);
    auth_ok(t, ok, NULL);
    size_t n = 65536;
    size_t cap = 256 + n * 7;
    char *batch = malloc(cap);
    assert_non_null(batch);
    size_t len = (size_t)snprintf(batch, cap,
                                  "{\"type\":\"publish_batch\",\"tenant_id\":\"t1\",\"namespace\":"
                                  "\"default\",\"stream\":\"big\",\"request_id\":7,\"ack\":"
                                  "\"per_batch\",\"payloads\":[");
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(batch + len, cap - len, "%s\"QQ==\"", i ? "," : "");
    len += (size_t)snprintf(batch + len, cap - len, "]}");
    send_frame(ok, 0, batch, len);
    free(batch);
    assert_true(run_until_arg(t, has_frames, ok, 10000));
    assert_int_equal(ok->last_type, FX_MSG_PUBLISH_OK);

    tstream *bomb = open_bidi(c);
    auth_ok(t, bomb, NULL);
    size_t bn = 3u << 20; /* about 1.05 M "{}," */
    char *b = malloc(bn);
    assert_non_null(b);
    size_t i = 0;
    b[i++] = '[';
    while (i + 4 < bn) {
        memcpy(b + i, i == 1 ? "{}" : ",{}", i == 1 ? 2 : 3);
        i += i == 1 ? 2 : 3;
    }
    b[i++] = ']';
    send_frame(bomb, 0, b, i);
    free(b);
    assert_true(run_until_arg(t, stream_done, bomb, 10000));
    assert_true(bomb->reset);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(DELTA(m0, m1, broker_json_too_complex), 1);
    t_free(t);
}

/* ---- item: uni streams ------------------------------------------------------------------- */

static bool got_event_stream(T *t)
{
    tconn *c = t->arg;
    for (int i = 0; i < MAX_STREAMS; i++)
        if (c->s[i].used && c->s[i].uni && c->s[i].frames > 0)
            return true;
    return c->closed;
}

/* The broker advertises no client uni streams, while its own event streams
 * towards the client still open. */
static void test_client_uni_streams_are_not_allowed(void **state)
{
    (void)state;
    T *t = t_new();
    t_start(t);
    tconn *c = t_connect_from(t, 0);
    int64_t sid;
    assert_int_equal(fx_quic_conn_open_uni(c->qc, NULL, &sid), FX_ESTREAMS);
    tstream *s = open_bidi(c);
    auth_ok(t, s, NULL);
    send_json(s, "{\"type\":\"subscribe\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"uni\"}");
    assert_true(run_until_arg(t, got_event_stream, c, 5000));
    assert_false(c->closed);
    t_free(t);
}

/* ---- item: idle connections -------------------------------------------------------------- */

/* A connection that authenticates nothing is closed at auth_timeout_ms; one
 * that authenticated (libfelix, inside fx_client_connect) stays. */
static void test_connection_without_auth_is_closed_at_auth_timeout(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.auth_timeout_ns = 500 * FX_NS_PER_MS;
    t_start(t);
    fx_metrics_snapshot m0 = snap();
    fx_client *legit = legit_client(t, NULL);
    tconn *idle = t_connect_from(t, 1);
    assert_true(idle->up);
    uint64_t t0 = fx_now_ns();
    assert_true(run_until_arg(t, conn_closed, idle, 5000));
    assert_true(fx_now_ns() - t0 < 2000 * FX_NS_PER_MS);
    assert_string_equal(idle->close_text, "auth timeout");
    run_for(t, 500);
    legit_publish_within(legit, 1000); /* still connected, well past the deadline */
    fix_close(legit);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(DELTA(m0, m1, preauth_conn_auth_timeout), 1);
    t_free(t);
}

/* max_connections_per_ip counts by source address: 127.0.0.1 is refused
 * past it while 127.0.0.2 still connects. */
static void test_connections_per_source_address_are_capped(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.max_connections_per_ip = 3;
    t_start(t);
    fx_metrics_snapshot m0 = snap();
    tconn *c[4];
    for (int i = 0; i < 4; i++)
        c[i] = t_connect_from(t, 0);
    run_for(t, 300);
    for (int i = 0; i < 3; i++)
        assert_false(c[i]->closed);
    assert_true(c[3]->closed);
    assert_string_equal(c[3]->close_text, "too many connections from this address");
    tconn *other = t_connect_from(t, 1);
    run_for(t, 200);
    assert_true(other->up);
    assert_false(other->closed);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(DELTA(m0, m1, preauth_conn_per_ip), 1);
    t_free(t);
}

/* A connection's place under max_connections_per_ip comes back when it
 * ends, whichever side ends it: with room for two from 127.0.0.1 and one
 * held throughout, a connection closed by the client and then one closed by
 * the broker (auth timeout) each leave room for the next, which is taken
 * and not refused; the cap still holds afterwards. */
static void test_closed_connections_give_back_their_place_per_source_address(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.max_connections_per_ip = 2;
    t->bo.auth_timeout_ns = 1500 * FX_NS_PER_MS;
    t_start(t);
    fx_metrics_snapshot m0 = snap();
    tconn *kept = t_connect_from(t, 0);
    auth_ok(t, open_bidi(kept), NULL);

    tconn *by_client = t_connect_from(t, 0);
    assert_true(by_client->up);
    fx_quic_conn_close(by_client->qc, 0, "done");
    wait_closes(t, &m0, 2);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(DELTA(m0, m1, preauth_conn_auth_timeout), 0); /* the client ended it */

    tconn *by_broker = t_connect_from(t, 0);
    assert_true(run_until_arg(t, conn_closed, by_broker, 5000));
    assert_string_equal(by_broker->close_text, "auth timeout"); /* not refused per address */
    wait_closes(t, &m1, 2);

    tconn *next = t_connect_from(t, 0);
    auth_ok(t, open_bidi(next), NULL);
    tconn *over = t_connect_from(t, 0);
    assert_true(run_until_arg(t, conn_closed, over, 5000));
    assert_string_equal(over->close_text, "too many connections from this address");
    assert_false(kept->closed || next->closed);
    fx_metrics_snapshot m2 = snap();
    assert_int_equal(DELTA(m0, m2, preauth_conn_per_ip), 1);
    assert_int_equal(DELTA(m0, m2, preauth_conn_auth_timeout), 1);
    t_free(t);
}

/* The connection's auth timer closes the whole connection, not only its
 * streams: a connection whose one stream holds a frame header that never
 * completes is closed with "auth timeout" at auth_timeout_ms. */
static void test_connection_whose_stream_never_authenticates_is_closed_at_auth_timeout(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.auth_timeout_ns = 500 * FX_NS_PER_MS;
    t->bo.frame_read_timeout_ns = 60 * FX_NS_PER_S; /* only the auth timers can act */
    t_start(t);
    fx_metrics_snapshot m0 = snap();
    tconn *c = t_connect_from(t, 1);
    assert_true(c->up);
    uint64_t t0 = fx_now_ns();
    send_partial(open_bidi(c), 100, 4);
    assert_true(run_until_arg(t, conn_closed, c, 5000));
    assert_true(fx_now_ns() - t0 < 2000 * FX_NS_PER_MS);
    assert_string_equal(c->close_text, "auth timeout");
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(DELTA(m0, m1, preauth_conn_auth_timeout), 1);
    t_free(t);
}

/* Each stream has its own auth timer: once one stream of a connection
 * authenticated (the connection's timer is off), another that never
 * authenticates is reset at auth_timeout_ms (counted once), while the
 * connection and its authenticated stream stay. */
static void test_stream_without_auth_on_an_authed_connection_is_reset_at_auth_timeout(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.auth_timeout_ns = 500 * FX_NS_PER_MS;
    t->bo.frame_read_timeout_ns = 60 * FX_NS_PER_S; /* only the auth timers can act */
    t_start(t);
    fx_metrics_snapshot m0 = snap();
    tconn *c = t_connect_from(t, 1);
    tstream *authed = open_bidi(c);
    auth_ok(t, authed, NULL);
    tstream *idle = open_bidi(c);
    uint64_t t0 = fx_now_ns();
    send_partial(idle, 100, 4);
    assert_true(run_until_arg(t, stream_done, idle, 5000));
    assert_true(idle->reset);
    assert_true(fx_now_ns() - t0 < 2000 * FX_NS_PER_MS);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(DELTA(m0, m1, preauth_stream_auth_timeout), 1);
    assert_int_equal(DELTA(m0, m1, preauth_conn_auth_timeout), 0);
    assert_false(c->closed || authed->closed);
    auth_ok(t, open_bidi(c), NULL); /* the connection still takes streams */
    t_free(t);
}

static bool both_done(T *t)
{
    tstream **s = t->arg;
    return (s[0]->closed || s[0]->tc->closed) && (s[1]->closed || s[1]->tc->closed);
}

/* Streams that wait for their auth are capped per connection at |cap|:
 * beyond it a new stream is reset at once; a stream that authenticates
 * gives its place back. */
static void unauth_streams_capped(unsigned cap)
{
    enum { MAX = 8 };
    assert_true(cap + 2 <= MAX);
    T *t = t_new();
    t->bo.max_unauth_streams_per_conn = cap;
    t_start(t);
    fx_metrics_snapshot m0 = snap();
    tconn *c = t_connect_from(t, 1);
    static const char auth[] = "{\"type\":\"auth\",\"tenant_id\":\"t1\",\"token\":\"x\"}";
    uint8_t frame[FX_WIRE_HEADER_LEN + sizeof(auth)];
    fx_frame_header_put(frame, 0, (uint32_t)(sizeof(auth) - 1));
    memcpy(frame + FX_WIRE_HEADER_LEN, auth, sizeof(auth) - 1);
    tstream *s[MAX];
    for (unsigned i = 0; i < cap + 2; i++) {
        s[i] = open_bidi(c);
        send_bytes(s[i], frame, 4); /* a header never finished (yet) */
        run_for(t, 20);
    }
    tstream *extra[2] = {s[cap], s[cap + 1]};
    assert_true(run_until_arg(t, both_done, extra, 3000));
    assert_true(s[cap]->reset && s[cap + 1]->reset);
    for (unsigned i = 0; i < cap; i++)
        assert_false(s[i]->closed);
    send_bytes(s[0], frame + 4, FX_WIRE_HEADER_LEN + sizeof(auth) - 1 - 4);
    assert_true(run_until_arg(t, has_frames, s[0], 3000));
    assert_int_equal(s[0]->last_type, FX_MSG_OK);
    tstream *n = open_bidi(c);
    send_bytes(n, frame, 4);
    run_for(t, 300);
    assert_false(n->closed);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(DELTA(m0, m1, preauth_unauth_streams), 2);
    t_free(t);
}

static void test_unauthenticated_streams_per_connection_are_capped(void **state)
{
    (void)state;
    unauth_streams_capped(4);
}

/* At a cap of one a second waiting stream is already refused. */
static void test_unauthenticated_streams_per_connection_are_capped_at_one(void **state)
{
    (void)state;
    unauth_streams_capped(1);
}

/* Unauthenticated streams of several connections each hold a partial frame
 * until together they reach preauth_max_bytes: the next pre-auth frame
 * header, on any connection, resets its stream (counted) while the holders
 * stay; a client that authenticated before keeps publishing; once holders
 * go, a new stream can authenticate again. */
static void test_preauth_bytes_of_all_connections_are_capped(void **state)
{
    (void)state;
    enum { FRAME = 60000, NCONN = 2, PER_CONN = 4, HOLDERS = 5 };
    T *t = t_new();
    t->bo.preauth_max_bytes = HOLDERS * FRAME;
    t->bo.auth_timeout_ns = 60 * FX_NS_PER_S; /* the holders outlive the test */
    t_start(t);
    fx_client *legit = legit_client(t, NULL);
    legit_publish_within(legit, 1000);
    fx_metrics_snapshot m0 = snap();
    uint8_t *part = calloc(1, FX_WIRE_HEADER_LEN + 1000);
    assert_non_null(part);
    fx_frame_header_put(part, 0, FRAME); /* 60000 bytes announced, 1000 sent */
    tconn *c[NCONN];
    tstream *s[NCONN * PER_CONN];
    for (int i = 0; i < NCONN; i++) {
        c[i] = t_connect_from(t, 1);
        assert_true(c[i]->up);
        for (int j = 0; j < PER_CONN; j++) {
            tstream *x = s[i * PER_CONN + j] = open_bidi(c[i]);
            send_bytes(x, part, FX_WIRE_HEADER_LEN + 1000);
            run_for(t, 20);
        }
    }
    free(part);
    run_for(t, 300);
    for (int i = 0; i < NCONN * PER_CONN; i++) {
        if (i < HOLDERS)
            assert_false(s[i]->closed);
        else
            assert_true(s[i]->reset);
    }
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(DELTA(m0, m1, preauth_max_bytes), NCONN * PER_CONN - HOLDERS);
    assert_int_equal(DELTA(m0, m1, preauth_bytes), 0); /* no connection passed its own cap */
    assert_int_equal(m1.g.preauth_held_bytes, HOLDERS * FRAME);

    /* Full: even a small auth frame on a new connection is refused... */
    tconn *late = t_connect_from(t, 0);
    tstream *refused = open_bidi(late);
    send_auth(refused, NULL);
    assert_true(run_until_arg(t, stream_done, refused, 3000));
    assert_true(refused->reset);
    /* ...while the authenticated client goes on publishing. */
    for (int i = 0; i < 3; i++)
        legit_publish_within(legit, 1000);

    /* The first connection's holders go with it: room for an auth again. */
    fx_quic_conn_close(c[0]->qc, 0, "done");
    assert_true(run_until_arg(t, conn_closed, c[0], 3000));
    run_for(t, 200);
    auth_ok(t, open_bidi(late), NULL);
    fx_metrics_snapshot m2 = snap();
    assert_int_equal(DELTA(m0, m2, preauth_max_bytes), NCONN * PER_CONN - HOLDERS + 1);
    assert_int_equal(m2.g.preauth_held_bytes, (HOLDERS - PER_CONN) * FRAME);
    fix_close(legit);
    t_free(t);
}

/* preauth_max_bytes admits held frames up to exactly its bound: with room
 * for two, the second fills it and the third header is refused (counted)
 * while both holders stay; a holder the client resets gives its bytes back,
 * so a new one fits again; when the connection goes nothing stays held. */
static void test_preauth_bytes_up_to_the_bound_are_held_and_a_reset_gives_them_back(void **state)
{
    (void)state;
    enum { FRAME = 1000 };
    T *t = t_new();
    t->bo.preauth_max_bytes = 2 * FRAME;
    t->bo.auth_timeout_ns = 60 * FX_NS_PER_S; /* the holders outlive the test */
    t_start(t);
    fx_metrics_snapshot m0 = snap();
    tconn *c = t_connect_from(t, 1);
    assert_true(c->up);
    tstream *h[2];
    for (int i = 0; i < 2; i++) {
        h[i] = open_bidi(c);
        send_partial(h[i], FRAME, FX_WIRE_HEADER_LEN + 10);
        wait_held(t, &m0, (int64_t)(i + 1) * FRAME);
    }
    tstream *over = open_bidi(c);
    send_partial(over, FRAME, FX_WIRE_HEADER_LEN + 10);
    assert_true(run_until_arg(t, stream_done, over, 3000));
    assert_true(over->reset);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(DELTA(m0, m1, preauth_max_bytes), 1);
    assert_int_equal(m1.g.preauth_held_bytes - m0.g.preauth_held_bytes, 2 * FRAME);
    assert_false(h[0]->closed || h[1]->closed);

    assert_int_equal(fx_quic_stream_reset(c->qc, h[0]->sid, 0), 0);
    wait_held(t, &m0, FRAME);
    tstream *again = open_bidi(c);
    send_partial(again, FRAME, FX_WIRE_HEADER_LEN + 10);
    wait_held(t, &m0, 2 * FRAME);
    assert_false(again->closed || h[1]->closed);
    fx_metrics_snapshot m2 = snap();
    assert_int_equal(DELTA(m0, m2, preauth_max_bytes), 1);

    fx_quic_conn_close(c->qc, 0, "done");
    wait_held(t, &m0, 0);
    assert_int_equal(DELTA(m0, m2, preauth_bytes), 0); /* the connection's own cap never hit */
    t_free(t);
}

/* ---- item: auth floods ------------------------------------------------------------------- */

/* auth_failures_per_conn failed verifications close the connection; a
 * repeated auth on an authenticated stream is not a failure. */
static void test_failed_auths_close_the_connection(void **state)
{
    (void)state;
    T *t = t_new();
    jwt_keys k;
    jwt_keys_init(&k, t);
    t_start(t);
    fx_metrics_snapshot m0 = snap();
    char *good = mint(&k, 3600);
    tconn *c = t_connect_from(t, 1);
    tstream *a = open_bidi(c);
    auth_ok(t, a, good);
    send_auth(a, good); /* repeated: an error, not a failed verification */
    assert_true(run_until_arg(t, has_frames, a, 3000));
    for (int i = 0; i < 2; i++) {
        tstream *s = open_bidi(c);
        send_auth(s, "not.a.token");
        assert_true(run_until_arg(t, has_frames, s, 3000));
        assert_string_equal(s->last, "auth failed");
    }
    run_for(t, 200);
    assert_false(c->closed);
    tstream *s = open_bidi(c);
    send_auth(s, "not.a.token");
    assert_true(run_until_arg(t, conn_closed, c, 3000));
    assert_string_equal(c->close_text, "too many failed auths");
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(DELTA(m0, m1, preauth_conn_auth_failures), 1);
    assert_int_equal(DELTA(m0, m1, broker_auth_failed), 3);
    free(good);
    t_free(t);
    jwt_keys_deinit(&k);
}

/* Verifications are rate-limited per source address: past auth_rate_per_ip
 * attempts are refused unverified, while another address is unaffected. */
static void test_auth_attempts_are_rate_limited_per_source_address(void **state)
{
    (void)state;
    T *t = t_new();
    jwt_keys k;
    jwt_keys_init(&k, t);
    t->bo.auth_rate_per_ip = 4;
    t_start(t);
    fx_metrics_snapshot m0 = snap();
    char *good = mint(&k, 3600);
    tconn *c = t_connect_from(t, 1);
    int ok = 0, limited = 0;
    for (int i = 0; i < 8; i++) {
        tstream *s = open_bidi(c);
        send_auth(s, good);
        assert_true(run_until_arg(t, has_frames, s, 3000));
        if (s->last_type == FX_MSG_OK)
            ok++;
        else if (strcmp(s->last, "auth rate limited") == 0)
            limited++;
    }
    assert_true(ok >= 4 && ok <= 5); /* the burst, maybe one refill */
    assert_int_equal(ok + limited, 8);
    tconn *other = t_connect_from(t, 0);
    tstream *s = open_bidi(other);
    auth_ok(t, s, good);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(DELTA(m0, m1, preauth_auth_rate), limited);
    free(good);
    t_free(t);
    jwt_keys_deinit(&k);
}

/* ---- item: token lifetime ---------------------------------------------------------------- */

static bool sub_lapsed(T *t)
{
    tconn *c = t->arg;
    for (int i = 0; i < MAX_STREAMS; i++)
        if (c->s[i].used && c->s[i].uni && c->s[i].closed)
            return true;
    return c->closed;
}

static tstream *event_stream(tconn *c)
{
    for (int i = 0; i < MAX_STREAMS; i++)
        if (c->s[i].used && c->s[i].uni)
            return &c->s[i];
    return NULL;
}

/* A stream and a subscription authenticated with a token end when it
 * expires; the connection itself stays. */
static void test_streams_end_when_their_token_expires(void **state)
{
    (void)state;
    T *t = t_new();
    jwt_keys k;
    jwt_keys_init(&k, t);
    t_start(t);
    fx_metrics_snapshot m0 = snap();
    char *shortlived = mint(&k, 2);
    char *longlived = mint(&k, 3600);
    tconn *c = t_connect_from(t, 0);
    tstream *pub = open_bidi(c);
    auth_ok(t, pub, shortlived);
    tstream *sub = open_bidi(c);
    auth_ok(t, sub, shortlived);
    send_json(sub, "{\"type\":\"subscribe\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                   "\"stream\":\"exp\"}");
    assert_true(run_until_arg(t, got_event_stream, c, 3000));
    tstream *keep = open_bidi(c);
    auth_ok(t, keep, longlived);
    assert_true(run_until_arg(t, stream_done, pub, 6000));
    assert_string_equal(pub->last, "token expired");
    assert_true(run_until_arg(t, sub_lapsed, c, 3000));
    assert_false(c->closed);
    tstream *ev = event_stream(c);
    assert_true(ev->reset);
    assert_int_equal(ev->code, 0x6); /* not an unsubscribe (0x2) */
    assert_false(keep->fin || keep->closed);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(DELTA(m0, m1, broker_auth_expired), 2);
    free(shortlived);
    free(longlived);
    t_free(t);
    jwt_keys_deinit(&k);
}

/* When a reload removes the key that signed a stream's token, the stream
 * ends; a stream signed by a key still present stays. */
static void test_streams_end_when_a_reload_removes_their_key(void **state)
{
    (void)state;
    T *t = t_new();
    jwt_keys k;
    jwt_keys_init(&k, t);
    t_start(t);
    fx_metrics_snapshot m0 = snap();
    char *old = mint(&k, 3600);
    tconn *c = t_connect_from(t, 0);
    tstream *s = open_bidi(c);
    auth_ok(t, s, old);
    uint8_t pub2[FX_AUTH_KEY_BYTES], priv2[FX_AUTH_KEY_BYTES];
    assert_int_equal(fx_auth_keygen(pub2, priv2), 0);
    write_jwks(k.jwks, "k2", pub2);
    char why[512];
    assert_int_equal(fx_authn_reload(k.authn, why, sizeof(why)), 0);
    fx_broker_auth_reloaded(t->b);
    assert_true(run_until_arg(t, stream_done, s, 3000));
    assert_string_equal(s->last, "token key removed");
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(DELTA(m0, m1, broker_auth_key_removed), 1);
    free(old);
    t_free(t);
    jwt_keys_deinit(&k);
}

/* Reads the whole file |path| into |buf| (NUL-terminated). */
static void slurp(const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
}

/* Waits until |path| holds |needle|; returns where (inside |buf|). */
static const char *wait_text(const char *path, const char *needle, char *buf, size_t cap)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    for (;;) {
        slurp(path, buf, cap);
        const char *p = strstr(buf, needle);
        if (p != NULL)
            return p;
        if (fx_now_ns() > deadline)
            fail_msg("no '%s' in %s; it holds:\n%s", needle, path, buf);
        usleep(10000);
    }
}

/* The daemon's SIGHUP path: felix-broker with auth_mode jwt, a stream
 * authenticated with key k1, the JWKS rewritten without it, kill -HUP: the
 * stream ends. */
static void test_sighup_that_removes_a_key_ends_its_streams_in_the_daemon(void **state)
{
    (void)state;
    const char *bin = getenv("FX_BINARY_DIR");
    char broker[512];
    snprintf(broker, sizeof(broker), "%s/felix-broker", bin != NULL ? bin : ".");
    if (bin == NULL || access(broker, X_OK) != 0)
        fx_test_skip("felix-broker is not built in FX_BINARY_DIR");
    T *t = t_new();
    jwt_keys k;
    jwt_keys_init(&k, t);
    t_start_client(t);
    char st[200], jw[200], out[200], err[200];
    snprintf(st, sizeof(st), "state_dir=%s/state", t->dir);
    snprintf(jw, sizeof(jw), "jwks_file=%s", k.jwks);
    snprintf(out, sizeof(out), "%s/broker.out", t->dir);
    snprintf(err, sizeof(err), "%s/broker.err", t->dir);
    char *argv[] = {broker,  "--dev",
                    "--set", "quic_bind=127.0.0.1:0",
                    "--set", "metrics_bind=127.0.0.1:0",
                    "--set", st,
                    "--set", "auth_mode=jwt",
                    "--set", jw,
                    "--set", "jwt_leeway_s=0",
                    NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid = 0;
    extern char **environ;
    assert_int_equal(posix_spawn(&pid, broker, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    static char text[16384];
    const char *line = wait_text(out, "export FELIX_SERVER=", text, sizeof(text));
    unsigned port = 0;
    char pin[80];
    int got = sscanf(line, "export FELIX_SERVER=127.0.0.1:%u FELIX_PIN=%79s", &port, pin);
    if (got != 2) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("no address in the banner: %s", line);
    }
    char *token = mint(&k, 3600);
    tconn *c = t_dial(t, 0, (uint16_t)port, pin);
    tstream *s = open_bidi(c);
    auth_ok(t, s, token);
    uint8_t pub2[FX_AUTH_KEY_BYTES], priv2[FX_AUTH_KEY_BYTES];
    assert_int_equal(fx_auth_keygen(pub2, priv2), 0);
    write_jwks(k.jwks, "k2", pub2);
    assert_int_equal(kill(pid, SIGHUP), 0);
    bool ended = run_until_arg(t, stream_done, s, 5000);
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(ended);
    assert_string_equal(s->last, "token key removed");
    assert_false(c->closed);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    free(token);
    t_free(t);
    jwt_keys_deinit(&k);
}

/* ---- item: resume after a park ----------------------------------------------------------- */

/* Appends a whole 0x0001 (|rid| 0) or 0x0009 frame of one |n|-byte payload
 * to t1/default/|stream| at |out| + |*off|. */
static void put_batch(uint8_t *out, size_t cap, size_t *off, const char *stream, size_t n,
                      uint64_t rid)
{
    static uint8_t zeros[256 * 1024];
    assert_true(n <= sizeof(zeros));
    fx_wire_slice p = {zeros, n};
    fx_wire_publish_batch b = {.request_id = rid,
                               .ack = rid != 0 ? FX_WIRE_ACK_PER_MESSAGE : FX_WIRE_ACK_NONE,
                               .tenant = {(const uint8_t *)"t1", 2},
                               .ns = {(const uint8_t *)"default", 7},
                               .stream = {(const uint8_t *)stream, strlen(stream)},
                               .count = 1,
                               .payloads = &p};
    ssize_t w = fx_wire_publish_batch_encode(&b, out + *off, cap - *off);
    assert_true(w > 0);
    *off += (size_t)w;
}

/* Input buffered behind a reservation wait (16 MiB of 1 KiB publish frames,
 * with a connection share that holds one frame, so every header waits for
 * the previous frame's bytes) is fed from the buffer after each wait: the
 * whole must take time linear in the buffer, not one move of the rest of it
 * per wait (about 0.1 s against several seconds). */
static void test_resume_after_a_park_is_linear_in_the_buffered_input(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.pub_conn_inflight_bytes = 1500;
    t->bo.quic.stream_window = t->bo.quic.max_stream_window = 32u << 20;
    t->bo.quic.conn_window = t->bo.quic.max_conn_window = 64u << 20;
    t->co.unacked_cap = 64u << 20;
    t_start(t);
    tconn *c = t_connect_from(t, 0);
    tstream *holder = open_bidi(c), *s = open_bidi(c);
    auth_ok(t, holder, NULL);
    auth_ok(t, s, NULL);
    size_t cap = 17u << 20, hl = 0, sl = 0;
    uint8_t *hbuf = malloc(256 * 1024), *sbuf = malloc(cap);
    assert_non_null(hbuf);
    assert_non_null(sbuf);
    /* |holder| reserves the connection's share; its body waits. */
    put_batch(hbuf, 256 * 1024, &hl, "hold", 1000, 0);
    send_bytes(holder, hbuf, FX_WIRE_HEADER_LEN);
    run_for(t, 100);
    /* |s|'s first header waits for bytes; all it sends behind it is kept. */
    size_t small = 0;
    while (sl + 2048 < (16u << 20)) {
        put_batch(sbuf, cap, &sl, "park", 1000, 0);
        small++;
    }
    put_batch(sbuf, cap, &sl, "park", 1, 99);
    send_bytes(s, sbuf, sl);
    run_for(t, 2000); /* all of it reaches the broker and waits there */
    assert_int_equal(s->frames, 0);
    fx_metrics_snapshot m0 = snap();
    uint64_t t0 = fx_now_ns();
    send_bytes(holder, hbuf + FX_WIRE_HEADER_LEN, hl - FX_WIRE_HEADER_LEN);
    bool done = run_until_arg(t, has_frames, s, 30000);
    uint64_t ms = (fx_now_ns() - t0) / FX_NS_PER_MS;
    free(hbuf);
    free(sbuf);
    if (!done)
        fail_msg("%zu buffered frames not handled within 30 s", small);
    fx_metrics_snapshot m1 = snap();
    assert_true(DELTA(m0, m1, ingress_reserve_waited) + 1 >= (int64_t)small); /* one per frame */
    assert_int_equal(s->frames, 1);
    if (ms > 1500) /* about 0.1 s when linear; seconds when quadratic */
        fail_msg("%zu buffered frames took %llu ms", small, (unsigned long long)ms);
    t_free(t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_budget_hog_before_auth_never_holds_the_publish_budget),
    cmocka_unit_test(test_protocol_error_before_auth_ends_the_stream_after_one_reply),
    cmocka_unit_test(test_connection_reply_queue_is_bounded_across_streams),
    cmocka_unit_test(test_json_element_bomb_is_refused_before_parsing),
    cmocka_unit_test(test_client_uni_streams_are_not_allowed),
    cmocka_unit_test(test_connection_without_auth_is_closed_at_auth_timeout),
    cmocka_unit_test(test_connections_per_source_address_are_capped),
    cmocka_unit_test(test_closed_connections_give_back_their_place_per_source_address),
    cmocka_unit_test(test_connection_whose_stream_never_authenticates_is_closed_at_auth_timeout),
    cmocka_unit_test(test_stream_without_auth_on_an_authed_connection_is_reset_at_auth_timeout),
    cmocka_unit_test(test_unauthenticated_streams_per_connection_are_capped),
    cmocka_unit_test(test_unauthenticated_streams_per_connection_are_capped_at_one),
    cmocka_unit_test(test_preauth_bytes_of_all_connections_are_capped),
    cmocka_unit_test(test_preauth_bytes_up_to_the_bound_are_held_and_a_reset_gives_them_back),
    cmocka_unit_test(test_failed_auths_close_the_connection),
    cmocka_unit_test(test_auth_attempts_are_rate_limited_per_source_address),
    cmocka_unit_test(test_streams_end_when_their_token_expires),
    cmocka_unit_test(test_streams_end_when_a_reload_removes_their_key),
    cmocka_unit_test(test_sighup_that_removes_a_key_ends_its_streams_in_the_daemon),
    cmocka_unit_test(test_resume_after_a_park_is_linear_in_the_buffered_input),
};

FX_TEST_MAIN(tests)
