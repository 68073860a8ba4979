/* The raw test client of the integration tests that speak QUIC frames
 * themselves (test_broker_*.c, test_hostile.c, test_drain_replies.c): a real
 * fx_broker (its own loop threads) on 127.0.0.1 port 0 (fixture.h), and a
 * small client built from src/quic and src/wire running on the test thread's
 * loop, from 127.0.0.1 or 127.0.0.2, with helpers to send raw bytes and
 * frames, publish, subscribe, withhold credit and wait. Counters are checked
 * as differences of fx_metrics_snapshot_take() around each scenario.
 * Header-only (static inline), included by one test file each. */
#ifndef FX_TESTS_INTEG_BROKER_CLIENT_H
#define FX_TESTS_INTEG_BROKER_CLIENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fx_test.h"

#include "base/log.h"
#include "base/metrics.h"
#include "broker/broker.h"
#include "felix/error.h"
#include "integ/fixture.h"
#include "quic/quic.h"
#include "wire/binary.h"
#include "wire/frame.h"
#include "wire/message.h"

/* ---- the raw test client ------------------------------------------------------ */

#define MAX_STREAMS 64

#define MAX_CONNS 8

#define MAX_OUT 8192

typedef struct tframe {
    uint16_t flags;
    uint8_t *body;
    size_t len;
    struct tframe *next;
} tframe;

typedef struct T T;

typedef struct tconn tconn;

typedef struct tstream {
    tconn *tc;
    int64_t sid;
    bool used, uni, fin, closed, reset;
    uint64_t code; /* of the reset */
    fx_frame_decoder dec;
    tframe *head, *tail;
    size_t frames;         /* frames received (a test may zero it) */
    fx_msg_type last_type; /* of the last JSON reply */
    char last[256];        /* the last JSON error reply's message, else "" */
    bool stalled;          /* withholds the broker's credit: its data piles up */
    size_t held;           /* the bytes received while stalled, not yet given back */
    /* event streams */
    bool hello;
    uint64_t sub_id;
    uint64_t events, next_off, gaps, missed, dups, bad;
    bool any;
    uint64_t first_off;
    uint64_t shared_frames, sub_frames;
} tstream;

struct tconn {
    T *t;
    fx_quic_conn *qc;
    bool up, closed;
    char close_text[128];
    tstream s[MAX_STREAMS];
    /* outbound queue: sends refused by the unacked cap wait here */
    fx_buf *out[MAX_OUT];
    int64_t out_sid[MAX_OUT];
    size_t out_head, out_n;
};

struct T {
    fx_broker *b;
    fx_broker_opts bo;
    char dir[64];
    char server[32]; /* "127.0.0.1:<port>", for libfelix clients */
    fx_loop *loop;
    fx_timer poll;
    fx_quic_endpoint *ep[2]; /* from 127.0.0.1; from 127.0.0.2 (made on first use) */
    fx_quic_opts co;
    bool (*pred)(T *);
    void *arg;
    uint64_t deadline;
    bool timed_out;
    tconn conns[MAX_CONNS];
    size_t (*size_of)(uint64_t off);
    /* Felix-C frames (0x8000) on an event stream: a consumer group's
     * deliveries (test_group.c); NULL: such a frame fails the test. */
    void (*on_group_frame)(T *t, tstream *s, const fx_frame *f);
    bool offsets_renumbered; /* publishes were shed: payloads do not match offsets */
};

static inline size_t size_1k_or_0(uint64_t off)
{
    return (off % 2) ? 1024 : 0;
}

static inline size_t size_1k(uint64_t off)
{
    (void)off;
    return 1024;
}

static inline size_t size_small(uint64_t off)
{
    return (size_t)(off % 13);
}

static inline uint8_t pay_byte(uint64_t off, size_t j)
{
    return (uint8_t)(off * 31 + j * 7 + 1);
}

static inline fx_buf *make_payload(uint64_t off, size_t n)
{
    fx_buf *b;
    assert_int_equal(fx_buf_new(&b, n), 0);
    uint8_t *p = fx_buf_data_mut(b);
    for (size_t j = 0; j < n; j++)
        p[j] = pay_byte(off, j);
    return b;
}

static inline void check_event(T *t, tstream *s, uint64_t off, fx_wire_slice p)
{
    if (s->any && off < s->next_off) {
        s->dups++;
        return;
    }
    if (s->any && off > s->next_off) {
        s->gaps++;
        s->missed += off - s->next_off;
    }
    if (!s->any) {
        s->any = true;
        s->first_off = off;
    }
    s->next_off = off + 1;
    s->events++;
    if (t->offsets_renumbered)
        return;
    size_t want = t->size_of != NULL ? t->size_of(off) : p.len;
    bool ok = p.len == want;
    for (size_t j = 0; ok && j < p.len; j++)
        ok = p.ptr[j] == pay_byte(off, j);
    if (!ok)
        s->bad++;
}

static inline void on_event_frame(T *t, tstream *s, const fx_frame *f)
{
    if (!s->hello) {
        fx_msg m;
        assert_int_equal(f->hdr.flags, 0);
        assert_int_equal(fx_msg_decode(&m, f->body, f->len, NULL), 0);
        assert_int_equal(m.type, FX_MSG_EVENT_STREAM_HELLO);
        s->sub_id = m.subscription_id;
        s->hello = true;
        fx_msg_deinit(&m);
        return;
    }
    if ((f->hdr.flags & 0x8000u) != 0 && t->on_group_frame != NULL) {
        t->on_group_frame(t, s, f);
        return;
    }
    fx_wire_event_batch e;
    assert_int_equal(fx_wire_event_batch_decode(f->hdr.flags, f->body, f->len, &e, NULL), 0);
    assert_true(e.has_offsets);
    if (e.shared) {
        s->shared_frames++;
    } else {
        s->sub_frames++;
        assert_int_equal(e.subscription_id, s->sub_id);
    }
    for (uint32_t i = 0; i < e.count; i++)
        check_event(t, s, e.base_offset + i, e.payloads[i]);
    fx_wire_event_batch_deinit(&e);
}

/* Notes the type (and an error's message) of a JSON reply in |s|. */
static inline void note_reply(tstream *s, const fx_frame *f)
{
    fx_msg m;
    if (f->hdr.flags != 0 || fx_msg_decode(&m, f->body, f->len, NULL) != 0)
        return;
    s->last_type = m.type;
    snprintf(s->last, sizeof(s->last), "%s", m.type == FX_MSG_ERROR ? m.message : "");
    fx_msg_deinit(&m);
}

static inline void on_reply_frame(tstream *s, const fx_frame *f)
{
    note_reply(s, f);
    tframe *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    r->flags = f->hdr.flags;
    r->len = f->len;
    r->body = malloc(f->len + 1);
    assert_non_null(r->body);
    if (f->len)
        memcpy(r->body, f->body, f->len);
    if (s->tail)
        s->tail->next = r;
    else
        s->head = r;
    s->tail = r;
}

static inline tstream *slot_new(tconn *c, int64_t sid, bool uni)
{
    for (int i = 0; i < MAX_STREAMS; i++) {
        tstream *s = &c->s[i];
        if (s->used)
            continue;
        memset(s, 0, sizeof(*s));
        s->used = true;
        s->tc = c;
        s->sid = sid;
        s->uni = uni;
        fx_frame_decoder_init(&s->dec, 64u << 20);
        return s;
    }
    fail_msg("out of test stream slots");
    return NULL;
}

static inline void cb_conn_new(fx_quic_conn *qc, void *user)
{
    (void)qc;
    (void)user;
}

static inline void cb_handshake(fx_quic_conn *qc, void *user)
{
    (void)qc;
    tconn *c = user;
    c->up = true;
}

static inline void cb_stream_open(fx_quic_conn *qc, int64_t sid, void *user)
{
    tconn *c = user;
    tstream *s = slot_new(c, sid, true);
    assert_int_equal(fx_quic_stream_set_user(qc, sid, s), 0);
}

static inline void cb_stream_data(fx_quic_conn *qc, int64_t sid, const uint8_t *data, size_t len,
                                  bool fin, void *user, void *stream_user)
{
    (void)user;
    tstream *s = stream_user;
    if (s == NULL) {
        fx_quic_stream_consume(qc, sid, len);
        return;
    }
    size_t off = 0;
    while (off < len) {
        size_t used = 0;
        fx_frame f;
        int rv = fx_frame_decoder_feed(&s->dec, data + off, len - off, &used, &f, NULL);
        assert_true(rv >= 0);
        off += used;
        if (rv != FX_FRAME_READY)
            continue;
        s->frames++;
        if (s->uni)
            on_event_frame(s->tc->t, s, &f);
        else
            on_reply_frame(s, &f);
    }
    if (s->stalled)
        s->held += len;
    else
        fx_quic_stream_consume(qc, sid, len);
    if (fin)
        s->fin = true;
}

static inline void cb_stream_close(fx_quic_conn *qc, int64_t sid, bool reset, uint64_t code,
                                   void *user, void *stream_user)
{
    (void)qc;
    (void)sid;
    (void)user;
    tstream *s = stream_user;
    if (s == NULL)
        return;
    s->closed = true;
    s->reset = reset;
    s->code = code;
}

static inline void pump(tconn *c)
{
    while (c->out_n > 0 && c->qc != NULL) {
        size_t i = c->out_head;
        fx_buf *b = c->out[i];
        int rv = fx_quic_stream_send(c->qc, c->out_sid[i], b, 0, fx_buf_len(b), false);
        if (rv == FX_EFULL)
            return;
        assert_int_equal(rv, 0);
        fx_buf_unref(b);
        c->out[i] = NULL;
        c->out_head = (c->out_head + 1) % MAX_OUT;
        c->out_n--;
    }
}

static inline void cb_writable(fx_quic_conn *qc, void *user)
{
    (void)qc;
    pump(user);
}

static inline void cb_conn_closed(fx_quic_conn *qc, const fx_quic_close_info *info, void *user)
{
    (void)qc;
    tconn *c = user;
    c->closed = true;
    c->qc = NULL;
    snprintf(c->close_text, sizeof(c->close_text), "%s", info->text);
}

static const fx_quic_callbacks CBS = {
    .on_conn_new = cb_conn_new,
    .on_handshake_done = cb_handshake,
    .on_stream_open = cb_stream_open,
    .on_stream_data = cb_stream_data,
    .on_stream_close = cb_stream_close,
    .on_writable = cb_writable,
    .on_conn_closed = cb_conn_closed,
};

/* ---- harness ------------------------------------------------------------------------ */

static inline void on_poll(fx_loop *l, fx_timer *tm, void *user)
{
    T *t = user;
    for (int i = 0; i < MAX_CONNS; i++)
        pump(&t->conns[i]);
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

static inline bool run_until_arg(T *t, bool (*pred)(T *), void *arg, uint64_t ms)
{
    t->pred = pred;
    t->arg = arg;
    t->timed_out = false;
    t->deadline = fx_now_ns() + ms * FX_NS_PER_MS;
    fx_loop_timer_arm(t->loop, &t->poll, 0);
    assert_int_equal(fx_loop_run(t->loop), 0);
    fx_loop_timer_cancel(t->loop, &t->poll);
    return !t->timed_out;
}

static inline bool never(T *t)
{
    (void)t;
    return false;
}

static inline void run_for(T *t, uint64_t ms)
{
    run_until_arg(t, never, NULL, ms);
}

/* A harness: set t->bo (the broker) and t->co (the client), then t_start. */
static inline T *t_new(void)
{
    T *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    fix_state_dir_new(t->dir, sizeof(t->dir), "broker");
    fix_broker_opts(&t->bo, t->dir);
    t->bo.event_batch_max_delay_ns = 0;
    fx_quic_opts_default(&t->co);
    t->co.udp_send_buffer = t->co.udp_recv_buffer = 1 << 20;
    return t;
}

/* The client's loop and its endpoint from 127.0.0.1, without a broker (to
 * reach one elsewhere with t_dial). */
static inline void t_start_client(T *t)
{
    assert_int_equal(fx_loop_new(&t->loop, &(fx_loop_opts){.name = "client", .cpu = -1}), 0);
    fx_timer_init(&t->poll, on_poll, t);
    assert_int_equal(fx_quic_client_new(&t->ep[0], t->loop, &t->co, &CBS, t), 0);
}

static inline void t_start(T *t)
{
    fix_broker_start(&t->b, &t->bo, t->server, sizeof(t->server));
    assert_int_equal(strlen(fx_broker_fingerprint(t->b)), 64);
    t_start_client(t);
}

static inline bool conn_up(T *t)
{
    tconn *c = t->arg;
    return c->up || c->closed;
}

static inline fx_quic_endpoint *endpoint_from(T *t, int from)
{
    if (from == 1 && t->ep[1] == NULL) {
        fx_quic_opts o = t->co;
        o.client_bind_ip = "127.0.0.2";
        assert_int_equal(fx_quic_client_new(&t->ep[1], t->loop, &o, &CBS, t), 0);
    }
    return t->ep[from];
}

/* A new connection (a slot never used before) from 127.0.0.1 (|from| 0) or
 * 127.0.0.2 (1) to 127.0.0.1:|port|, pinned to |pin|, its handshake done or
 * refused (check ->up and ->closed). */
static inline tconn *t_dial(T *t, int from, uint16_t port, const char *pin)
{
    assert_true(from == 0 || from == 1);
    tconn *c = NULL;
    for (int i = 0; i < MAX_CONNS && c == NULL; i++)
        if (t->conns[i].t == NULL)
            c = &t->conns[i];
    assert_non_null(c);
    c->t = t;
    fx_quic_connect_opts co = {.server_name = "localhost", .pin_sha256 = pin};
    assert_int_equal(fx_quic_connect(endpoint_from(t, from), "127.0.0.1", port, &co, c, &c->qc), 0);
    assert_true(run_until_arg(t, conn_up, c, 5000));
    return c;
}

/* A new connection to the broker from |from| (as t_dial): maybe refused. */
static inline tconn *t_connect_from(T *t, int from)
{
    return t_dial(t, from, fx_broker_port(t->b), fx_broker_fingerprint(t->b));
}

/* A new connection to the broker from 127.0.0.1, its handshake done. */
static inline tconn *t_connect(T *t)
{
    tconn *c = t_connect_from(t, 0);
    assert_true(c->up);
    return c;
}

static inline void t_free(T *t)
{
    fx_quic_endpoint_free(t->ep[0]);
    fx_quic_endpoint_free(t->ep[1]);
    for (int i = 0; i < MAX_CONNS; i++) {
        tconn *c = &t->conns[i];
        while (c->out_n > 0) {
            fx_buf_unref(c->out[c->out_head]);
            c->out_head = (c->out_head + 1) % MAX_OUT;
            c->out_n--;
        }
        for (int j = 0; j < MAX_STREAMS; j++) {
            tstream *s = &c->s[j];
            if (!s->used)
                continue;
            fx_frame_decoder_deinit(&s->dec);
            while (s->head) {
                tframe *f = s->head;
                s->head = f->next;
                free(f->body);
                free(f);
            }
        }
    }
    fx_loop_free(t->loop);
    fx_broker_free(t->b);
    fix_rm_dir(t->dir);
    free(t);
}

/* ---- sending -------------------------------------------------------------------------- */

static inline void send_buf(tstream *s, fx_buf *b)
{
    tconn *c = s->tc;
    assert_true(c->out_n < MAX_OUT);
    size_t i = (c->out_head + c->out_n) % MAX_OUT;
    c->out[i] = b;
    c->out_sid[i] = s->sid;
    c->out_n++;
    pump(c);
}

static inline void send_bytes(tstream *s, const void *p, size_t n)
{
    fx_buf *b;
    assert_int_equal(fx_buf_new_copy(&b, p, n), 0);
    send_buf(s, b);
}

static inline void send_msg(tstream *s, const fx_msg *m)
{
    uint8_t *p;
    size_t n;
    assert_int_equal(fx_msg_encode_frame(m, &p, &n), 0);
    send_bytes(s, p, n);
    free(p);
}

/* A frame of |flags| with |n| body bytes of |body| (may be NULL: zeros). */
static inline void send_frame(tstream *s, uint16_t flags, const void *body, size_t n)
{
    uint8_t *p = calloc(1, FX_WIRE_HEADER_LEN + n);
    assert_non_null(p);
    fx_frame_header_put(p, flags, (uint32_t)n);
    if (body != NULL && n > 0)
        memcpy(p + FX_WIRE_HEADER_LEN, body, n);
    send_bytes(s, p, FX_WIRE_HEADER_LEN + n);
    free(p);
}

static inline void send_json(tstream *s, const char *json)
{
    send_frame(s, 0, json, strlen(json));
}

static inline tstream *open_bidi(tconn *c)
{
    tstream *s = slot_new(c, -1, false);
    assert_int_equal(fx_quic_conn_open_bidi(c->qc, s, &s->sid), 0);
    return s;
}

static inline bool has_reply(T *t)
{
    tstream *s = t->arg;
    return s->head != NULL || s->closed;
}

/* Waits for the next reply frame on |s| (the caller frees it). */
static inline tframe *next_reply(T *t, tstream *s)
{
    assert_true(run_until_arg(t, has_reply, s, 3000));
    tframe *f = s->head;
    assert_non_null(f);
    s->head = f->next;
    if (s->head == NULL)
        s->tail = NULL;
    return f;
}

static inline void tframe_free(tframe *f)
{
    free(f->body);
    free(f);
}

/* Waits for a JSON reply of |type|; checks |message| when not NULL. */
static inline void expect_msg(T *t, tstream *s, fx_msg_type type, const char *message, fx_msg *out)
{
    tframe *f = next_reply(t, s);
    assert_int_equal(f->flags, 0);
    fx_msg m;
    int rv = fx_msg_decode(&m, f->body, f->len, NULL);
    if (rv != 0 || m.type != type)
        fail_msg("want %s, got: %.*s", fx_msg_type_name(type), (int)f->len, (char *)f->body);
    if (message != NULL)
        assert_string_equal(m.message, message);
    tframe_free(f);
    if (out != NULL)
        *out = m;
    else
        fx_msg_deinit(&m);
}

/* Expects the next reply on |s| to be exactly the JSON |want|, byte for byte. */
static inline void expect_json(T *t, tstream *s, const char *want)
{
    tframe *f = next_reply(t, s);
    assert_int_equal(f->flags, 0);
    if (f->len != strlen(want) || memcmp(f->body, want, f->len) != 0)
        fail_msg("want %s, got %.*s", want, (int)f->len, (char *)f->body);
    tframe_free(f);
}

static inline bool stream_finished(T *t)
{
    tstream *s = t->arg;
    return s->fin || s->closed;
}

static inline void expect_end(T *t, tstream *s)
{
    assert_true(run_until_arg(t, stream_finished, s, 3000));
    assert_null(s->head);
}

static inline void auth(T *t, tstream *s, const char *tenant)
{
    fx_msg m;
    fx_msg_init_auth(&m, tenant, "any-token", true, 63);
    send_msg(s, &m);
    fx_msg r;
    expect_msg(t, s, FX_MSG_AUTH_OK, NULL, &r);
    assert_int_equal(r.server_flags, 63);
    fx_msg_deinit(&r);
}

static inline tstream *authed_stream(T *t, tconn *c)
{
    tstream *s = open_bidi(c);
    auth(t, s, "t1");
    return s;
}

/* A binary publish frame of the payloads for offsets [first, first + n). */
static inline fx_buf *binary_publish(T *t, const char *stream, uint64_t first, uint32_t n,
                                     bool acked, uint64_t rid)
{
    fx_wire_slice *ps = calloc(n ? n : 1, sizeof(*ps));
    fx_buf **bufs = calloc(n ? n : 1, sizeof(*bufs));
    assert_true(ps && bufs);
    for (uint32_t i = 0; i < n; i++) {
        size_t sz = t->size_of(first + i);
        bufs[i] = make_payload(first + i, sz);
        ps[i] = (fx_wire_slice){fx_buf_data(bufs[i]), sz};
    }
    fx_wire_publish_batch pb = {.request_id = rid,
                                .ack = acked ? FX_WIRE_ACK_PER_BATCH : FX_WIRE_ACK_NONE,
                                .tenant = {(const uint8_t *)"t1", 2},
                                .ns = {(const uint8_t *)"default", 7},
                                .stream = {(const uint8_t *)stream, strlen(stream)},
                                .count = n,
                                .payloads = ps};
    ssize_t sz = fx_wire_publish_batch_frame_size(&pb);
    assert_true(sz > 0);
    fx_buf *f;
    assert_int_equal(fx_buf_new(&f, (size_t)sz), 0);
    assert_int_equal(fx_wire_publish_batch_encode(&pb, fx_buf_data_mut(f), (size_t)sz), sz);
    for (uint32_t i = 0; i < n; i++)
        fx_buf_unref(bufs[i]);
    free(bufs);
    free(ps);
    return f;
}

/* Sends unacked single-message publishes for offsets [first, first + n). */
static inline void publish_range(T *t, tstream *s, const char *stream, uint64_t first, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        send_buf(s, binary_publish(t, stream, first + i, 1, false, 0));
}

/* Publishes one acked batch and waits for its ack. */
static inline void publish_acked(T *t, tstream *s, const char *stream, uint64_t first, uint32_t n,
                                 uint64_t rid)
{
    send_buf(s, binary_publish(t, stream, first, n, true, rid));
    tframe *f = next_reply(t, s);
    assert_int_equal(f->flags, FX_FLAG_PUBLISH_ACK);
    fx_wire_publish_ack a;
    assert_int_equal(fx_wire_publish_ack_decode(f->body, f->len, &a, NULL), 0);
    assert_true(a.ok);
    assert_int_equal(a.request_id, rid);
    tframe_free(f);
}

static inline tstream *event_stream_of(tconn *c, uint64_t sub_id)
{
    for (int i = 0; i < MAX_STREAMS; i++)
        if (c->s[i].used && c->s[i].uni && c->s[i].hello && c->s[i].sub_id == sub_id)
            return &c->s[i];
    return NULL;
}

typedef struct sub_wait {
    tconn *c;
    uint64_t id;
} sub_wait;

static inline bool sub_ready(T *t)
{
    sub_wait *w = t->arg;
    return event_stream_of(w->c, w->id) != NULL;
}

/* Subscribes on a new bidi stream of |c| and returns the event stream. */
static inline tstream *subscribe(T *t, tconn *c, const char *stream, fx_msg_start_kind kind,
                                 uint64_t offset)
{
    tstream *s = authed_stream(t, c);
    fx_msg m = {.type = FX_MSG_SUBSCRIBE,
                .tenant_id = "t1",
                .ns = "default",
                .stream = stream,
                .start = {.kind = kind, .offset = offset}};
    send_msg(s, &m);
    fx_msg r;
    expect_msg(t, s, FX_MSG_SUBSCRIBED, NULL, &r);
    assert_true(r.subscription_id >= 1);
    sub_wait w = {c, r.subscription_id};
    fx_msg_deinit(&r);
    expect_end(t, s);
    assert_true(run_until_arg(t, sub_ready, &w, 3000));
    return event_stream_of(c, w.id);
}

typedef struct want_events {
    tstream **subs;
    size_t n;
    uint64_t events;
} want_events;

static inline bool all_have(T *t)
{
    want_events *w = t->arg;
    for (size_t i = 0; i < w->n; i++)
        if (w->subs[i]->events < w->events)
            return false;
    return true;
}

static inline void wait_events(T *t, tstream **subs, size_t n, uint64_t events, uint64_t ms)
{
    want_events w = {subs, n, events};
    if (!run_until_arg(t, all_have, &w, ms)) {
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, "sub %zu: %llu events\n", i, (unsigned long long)subs[i]->events);
        fail_msg("events did not arrive");
    }
}

static inline void resume_stream(tstream *s)
{
    s->stalled = false;
    if (s->held > 0 && s->tc->qc != NULL)
        fx_quic_stream_consume(s->tc->qc, s->sid, s->held);
    s->held = 0;
}

/* ---- delivery ------------------------------------------------------------------------- */

/* The lossless profile: block at checkpoints 5 and 6, unacked publishes wait
 * at ingress instead of being dropped. */
static inline void t_lossless(T *t)
{
    t->bo.pub_ingress_wait = true;
    t->bo.subscriber_queue_policy = FX_QUEUE_BLOCK;
    t->bo.subscriber_lane_queue_policy = FX_QUEUE_BLOCK;
}

static inline size_t size_big_tail(uint64_t off)
{
    return off < 4 ? 1024 : (1u << 20);
}

/* ---- policies --------------------------------------------------------------------------- */

typedef struct drop_wait {
    tstream *stalled;
    fx_metrics_snapshot *before;
    uint64_t total;
    uint64_t dropped;
} drop_wait;

static inline bool stalled_settled(T *t)
{
    drop_wait *w = t->arg;
    fx_metrics_snapshot now;
    fx_metrics_snapshot_take(&now);
    w->dropped = (uint64_t)(DELTA(*w->before, now, sub_queue_dropped) +
                            DELTA(*w->before, now, subscriber_lane_dropped_events));
    return w->stalled->events + w->dropped == w->total;
}

/* Lossless broker whose publish stream window holds a whole burst, with one
 * subscriber the test stalls: publishes pile up behind a parked ingress. */
static inline T *t_new_parking(void)
{
    T *t = t_new();
    t->size_of = size_1k;
    t_lossless(t);
    t->bo.pub_queue_depth = 4;
    t->bo.subscriber_queue_capacity = 16;
    t->bo.subscriber_lane_queue_depth = 2;
    t->bo.subscriber_unacked_bytes = 64u << 10;
    t->bo.quic.stream_window = 4u << 20;
    t->co.stream_window = 64u << 10;
    return t;
}

static inline bool out_empty(T *t)
{
    tconn *c = t->arg;
    return c->out_n == 0;
}

typedef struct cancel_wait {
    fx_metrics_snapshot *before;
} cancel_wait;

static inline bool parked_cancelled(T *t)
{
    cancel_wait *w = t->arg;
    fx_metrics_snapshot now;
    fx_metrics_snapshot_take(&now);
    return DELTA(*w->before, now, ingress_backpressure_cancelled) > 1;
}

typedef struct ingress_wait {
    fx_metrics_snapshot *before;
    uint64_t total;
} ingress_wait;

static inline bool ingress_done(T *t)
{
    ingress_wait *w = t->arg;
    fx_metrics_snapshot now;
    fx_metrics_snapshot_take(&now);
    return (uint64_t)(DELTA(*w->before, now, publish_accepted) +
                      DELTA(*w->before, now, publish_dropped)) == w->total;
}

static inline size_t size_4k(uint64_t off)
{
    (void)off;
    return 4096;
}

typedef struct gauge_wait {
    fx_metrics_snapshot *before;
} gauge_wait;

static inline bool gauges_back(T *t)
{
    gauge_wait *w = t->arg;
    fx_metrics_snapshot now;
    fx_metrics_snapshot_take(&now);
    return now.g.sub_subscriptions == w->before->g.sub_subscriptions &&
           now.g.sub_active_connections == w->before->g.sub_active_connections &&
           now.g.sub_queue_len == w->before->g.sub_queue_len;
}

/* ---- checkpoint-3 reservation at the frame header, frame read timeout -------------- */

static inline size_t size_10k(uint64_t off)
{
    (void)off;
    return 10000;
}

typedef struct gauge_is {
    fx_metrics_snapshot *before;
    int64_t reserved;
} gauge_is;

static inline bool reserved_is(T *t)
{
    gauge_is *w = t->arg;
    fx_metrics_snapshot now;
    fx_metrics_snapshot_take(&now);
    return now.g.ingress_reserved_bytes - w->before->g.ingress_reserved_bytes == w->reserved;
}

static inline void expect_reserved(T *t, fx_metrics_snapshot *before, int64_t n)
{
    gauge_is w = {before, n};
    if (!run_until_arg(t, reserved_is, &w, 5000)) {
        fx_metrics_snapshot now;
        fx_metrics_snapshot_take(&now);
        fail_msg("reserved bytes: want %lld, have %lld", (long long)n,
                 (long long)(now.g.ingress_reserved_bytes - before->g.ingress_reserved_bytes));
    }
}

static inline void expect_ack(T *t, tstream *s, uint64_t rid)
{
    tframe *f = next_reply(t, s);
    assert_int_equal(f->flags, FX_FLAG_PUBLISH_ACK);
    fx_wire_publish_ack a;
    assert_int_equal(fx_wire_publish_ack_decode(f->body, f->len, &a, NULL), 0);
    assert_true(a.ok);
    assert_int_equal(a.request_id, rid);
    tframe_free(f);
}

/* The body length a whole frame announces. */
static inline int64_t body_len(const fx_buf *f)
{
    return (int64_t)(fx_buf_len(f) - FX_WIRE_HEADER_LEN);
}

typedef struct waited_is {
    fx_metrics_snapshot *before;
} waited_is;

static inline bool reserve_waited(T *t)
{
    waited_is *w = t->arg;
    fx_metrics_snapshot now;
    fx_metrics_snapshot_take(&now);
    return DELTA(*w->before, now, ingress_reserve_waited) >= 1;
}

/* ---- writer lanes (checkpoint 6) ------------------------------------------------------ */

/* One subscription as fx_broker_list_subscriptions reports it. */
typedef struct sub_info {
    uint64_t lane, lanes, lane_dropped, queue_dropped, lane_capacity, connection_id;
} sub_info;

static inline uint64_t jget(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    assert_non_null(v);
    assert_true(json_is_integer(v));
    return (uint64_t)json_integer_value(v);
}

static inline sub_info sub_info_of(T *t, uint64_t id)
{
    char *js = NULL;
    assert_int_equal(fx_broker_list_subscriptions(t->b, 5000 * FX_NS_PER_MS, &js), 0);
    json_t *root = json_loads(js, 0, NULL);
    free(js);
    assert_non_null(root);
    json_t *arr = json_object_get(root, "subscriptions");
    assert_true(json_is_array(arr));
    sub_info in = {0};
    bool found = false;
    for (size_t i = 0; i < json_array_size(arr) && !found; i++) {
        json_t *e = json_array_get(arr, i);
        if (jget(e, "id") != id)
            continue;
        found = true;
        in = (sub_info){.lane = jget(e, "lane"),
                        .lanes = jget(e, "lanes"),
                        .lane_dropped = jget(e, "lane_dropped"),
                        .queue_dropped = jget(e, "queue_dropped"),
                        .lane_capacity = jget(e, "lane_capacity"),
                        .connection_id = jget(e, "connection_id")};
    }
    json_decref(root);
    assert_true(found);
    return in;
}

/* Two subscriptions on one connection, the first stalled (it withholds its
 * QUIC credit), with the lane choice of |shard| over 2 lanes. */
typedef struct lane_pair {
    T *t;
    tstream *stalled, *healthy;
    sub_info si, hi;
} lane_pair;

static inline lane_pair lane_pair_start(fx_queue_policy policy, fx_broker_lane_shard shard)
{
    lane_pair lp;
    T *t = lp.t = t_new();
    t->size_of = size_1k;
    t->bo.pub_ingress_wait = true; /* nothing shed upstream of checkpoint 5 */
    t->bo.subscriber_writer_lanes = 2;
    t->bo.subscriber_lane_shard = shard;
    t->bo.subscriber_lane_queue_depth = 4;
    t->bo.subscriber_lane_queue_policy = policy;
    t->bo.subscriber_unacked_bytes = 64u << 10;
    t->co.stream_window = 64u << 10; /* the stalled event stream's window */
    t_start(t);
    tconn *c = t_connect(t);
    lp.stalled = subscribe(t, c, "ln", FX_MSG_START_LATEST, 0);
    lp.healthy = subscribe(t, c, "ln", FX_MSG_START_LATEST, 0);
    lp.stalled->stalled = true;
    return lp;
}

typedef struct settle_wait {
    tstream *s;
    uint64_t want;
    uint64_t dropped;
} settle_wait;

/* Every message published to |s| so far arrived or was shed at its lane. */
static inline bool settled(T *t)
{
    settle_wait *w = t->arg;
    if (w->s->events + w->dropped == w->want)
        return true;
    w->dropped = sub_info_of(t, w->s->sub_id).lane_dropped;
    return w->s->events + w->dropped == w->want;
}

static inline void settle(T *t, tstream *s, uint64_t want)
{
    settle_wait w = {s, want, 0};
    if (!run_until_arg(t, settled, &w, 10000))
        fail_msg("sub %llu: %llu events + %llu lane drops != %llu", (unsigned long long)s->sub_id,
                 (unsigned long long)s->events, (unsigned long long)w.dropped,
                 (unsigned long long)want);
}

/* Publishes |total| in rounds, each settled for the healthy subscriber, so
 * its checkpoint-5 queue never fills: whatever it loses is lost at its lane.
 * Then resumes the stalled one and lets it settle. */
static inline void lane_pair_run(lane_pair *lp, uint64_t total, fx_metrics_snapshot *a,
                                 fx_metrics_snapshot *b)
{
    T *t = lp->t;
    tstream *p = authed_stream(t, t_connect(t));
    fx_metrics_snapshot_take(a);
    const uint64_t round = 16;
    for (uint64_t i = 0; i < total; i += round) {
        publish_range(t, p, "ln", i, round);
        settle(t, lp->healthy, i + round);
    }
    assert_true(lp->stalled->events < total / 2); /* the stall was real */
    resume_stream(lp->stalled);
    settle(t, lp->stalled, total);
    run_for(t, 50);
    fx_metrics_snapshot_take(b);
    lp->si = sub_info_of(t, lp->stalled->sub_id);
    lp->hi = sub_info_of(t, lp->healthy->sub_id);
}

/* What |s| lacks of [0, total): before its first, between, after its last. */
static inline uint64_t lacks(const tstream *s, uint64_t total)
{
    if (!s->any)
        return total;
    return s->first_off + s->missed + (total - s->next_off);
}

#endif
