/* Integration tests of the broker data plane: a real fx_broker (its own loop
 * threads) on 127.0.0.1 port 0, and a small raw client built from src/quic and
 * src/wire running on the test thread's loop. Counters are checked as
 * differences of fx_metrics_snapshot_take() around each scenario. */
/* fx-test-libs: fx_broker fx_quic fx_wire fx_server fx_base */
#include <dirent.h>
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
    fx_frame_decoder dec;
    tframe *head, *tail;
    /* event streams */
    bool stalled;
    size_t held;
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
    fx_loop *loop;
    fx_timer poll;
    fx_quic_endpoint *ep;
    fx_quic_opts co;
    bool (*pred)(T *);
    void *arg;
    uint64_t deadline;
    bool timed_out;
    tconn conns[MAX_CONNS];
    size_t (*size_of)(uint64_t off);
    bool offsets_renumbered; /* publishes were shed: payloads do not match offsets */
};

static size_t size_1k_or_0(uint64_t off)
{
    return (off % 2) ? 1024 : 0;
}

static size_t size_1k(uint64_t off)
{
    (void)off;
    return 1024;
}

static size_t size_small(uint64_t off)
{
    return (size_t)(off % 13);
}

static uint8_t pay_byte(uint64_t off, size_t j)
{
    return (uint8_t)(off * 31 + j * 7 + 1);
}

static fx_buf *make_payload(uint64_t off, size_t n)
{
    fx_buf *b;
    assert_int_equal(fx_buf_new(&b, n), 0);
    uint8_t *p = fx_buf_data_mut(b);
    for (size_t j = 0; j < n; j++)
        p[j] = pay_byte(off, j);
    return b;
}

static void check_event(T *t, tstream *s, uint64_t off, fx_wire_slice p)
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

static void on_event_frame(T *t, tstream *s, const fx_frame *f)
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
    fx_event_batch e;
    assert_int_equal(fx_event_batch_decode(f->hdr.flags, f->body, f->len, &e, NULL), 0);
    assert_true(e.has_offsets);
    if (e.shared) {
        s->shared_frames++;
    } else {
        s->sub_frames++;
        assert_int_equal(e.subscription_id, s->sub_id);
    }
    for (uint32_t i = 0; i < e.count; i++)
        check_event(t, s, e.base_offset + i, e.payloads[i]);
    fx_event_batch_deinit(&e);
}

static void on_reply_frame(tstream *s, const fx_frame *f)
{
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

static tstream *slot_new(tconn *c, int64_t sid, bool uni)
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

static void cb_conn_new(fx_quic_conn *qc, void *user)
{
    (void)qc;
    (void)user;
}

static void cb_handshake(fx_quic_conn *qc, void *user)
{
    (void)qc;
    tconn *c = user;
    c->up = true;
}

static void cb_stream_open(fx_quic_conn *qc, int64_t sid, void *user)
{
    tconn *c = user;
    tstream *s = slot_new(c, sid, true);
    assert_int_equal(fx_quic_stream_set_user(qc, sid, s), 0);
}

static void cb_stream_data(fx_quic_conn *qc, int64_t sid, const uint8_t *data, size_t len, bool fin,
                           void *user, void *stream_user)
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

static void cb_stream_close(fx_quic_conn *qc, int64_t sid, bool reset, uint64_t code, void *user,
                            void *stream_user)
{
    (void)qc;
    (void)sid;
    (void)code;
    (void)user;
    tstream *s = stream_user;
    if (s == NULL)
        return;
    s->closed = true;
    s->reset = reset;
}

static void pump(tconn *c)
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

static void cb_writable(fx_quic_conn *qc, void *user)
{
    (void)qc;
    pump(user);
}

static void cb_conn_closed(fx_quic_conn *qc, const fx_quic_close_info *info, void *user)
{
    (void)qc;
    (void)info;
    tconn *c = user;
    c->closed = true;
    c->qc = NULL;
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

static void on_poll(fx_loop *l, fx_timer *tm, void *user)
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

static bool run_until_arg(T *t, bool (*pred)(T *), void *arg, uint64_t ms)
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

static bool never(T *t)
{
    (void)t;
    return false;
}

static void run_for(T *t, uint64_t ms)
{
    run_until_arg(t, never, NULL, ms);
}

static T *t_new(void)
{
    fx_log_set_level(FX_LOG_ERROR);
    T *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    snprintf(t->dir, sizeof(t->dir), "/tmp/fxbrokerXXXXXX");
    assert_non_null(mkdtemp(t->dir));
    fx_broker_opts_default(&t->bo);
    t->bo.quic.state_dir = t->dir;
    t->bo.quic.udp_send_buffer = t->bo.quic.udp_recv_buffer = 1 << 20;
    t->bo.event_batch_max_delay_ns = 0;
    fx_quic_opts_default(&t->co);
    t->co.udp_send_buffer = t->co.udp_recv_buffer = 1 << 20;
    return t;
}

static void t_start(T *t)
{
    assert_int_equal(fx_broker_new(&t->b, &t->bo), 0);
    assert_int_equal(fx_broker_start(t->b), 0);
    assert_int_equal(strlen(fx_broker_fingerprint(t->b)), 64);
    assert_int_equal(fx_loop_new(&t->loop, &(fx_loop_opts){.name = "client", .cpu = -1}), 0);
    fx_timer_init(&t->poll, on_poll, t);
    assert_int_equal(fx_quic_client_new(&t->ep, t->loop, &t->co, &CBS, t), 0);
}

static bool conn_up(T *t)
{
    tconn *c = t->arg;
    return c->up || c->closed;
}

static tconn *t_connect(T *t)
{
    tconn *c = NULL;
    for (int i = 0; i < MAX_CONNS && c == NULL; i++)
        if (t->conns[i].qc == NULL && !t->conns[i].up)
            c = &t->conns[i];
    assert_non_null(c);
    c->t = t;
    fx_quic_connect_opts co = {.server_name = "localhost",
                               .pin_sha256 = fx_broker_fingerprint(t->b)};
    assert_int_equal(fx_quic_connect(t->ep, "127.0.0.1", fx_broker_port(t->b), &co, c, &c->qc), 0);
    assert_true(run_until_arg(t, conn_up, c, 5000));
    assert_true(c->up);
    return c;
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

static void t_free(T *t)
{
    fx_quic_endpoint_free(t->ep);
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
    rm_dir(t->dir);
    free(t);
}

/* ---- sending -------------------------------------------------------------------------- */

static void send_buf(tstream *s, fx_buf *b)
{
    tconn *c = s->tc;
    assert_true(c->out_n < MAX_OUT);
    size_t i = (c->out_head + c->out_n) % MAX_OUT;
    c->out[i] = b;
    c->out_sid[i] = s->sid;
    c->out_n++;
    pump(c);
}

static void send_bytes(tstream *s, const void *p, size_t n)
{
    fx_buf *b;
    assert_int_equal(fx_buf_new_copy(&b, p, n), 0);
    send_buf(s, b);
}

static void send_msg(tstream *s, const fx_msg *m)
{
    uint8_t *p;
    size_t n;
    assert_int_equal(fx_msg_encode_frame(m, &p, &n), 0);
    send_bytes(s, p, n);
    free(p);
}

static void send_json(tstream *s, const char *json)
{
    size_t n = strlen(json);
    uint8_t *p = malloc(FX_WIRE_HEADER_LEN + n);
    assert_non_null(p);
    fx_frame_header_put(p, 0, (uint32_t)n);
    memcpy(p + FX_WIRE_HEADER_LEN, json, n);
    send_bytes(s, p, FX_WIRE_HEADER_LEN + n);
    free(p);
}

static tstream *open_bidi(tconn *c)
{
    tstream *s = slot_new(c, -1, false);
    assert_int_equal(fx_quic_conn_open_bidi(c->qc, s, &s->sid), 0);
    return s;
}

static bool has_reply(T *t)
{
    tstream *s = t->arg;
    return s->head != NULL || s->closed;
}

/* Waits for the next reply frame on |s| (the caller frees it). */
static tframe *next_reply(T *t, tstream *s)
{
    assert_true(run_until_arg(t, has_reply, s, 3000));
    tframe *f = s->head;
    assert_non_null(f);
    s->head = f->next;
    if (s->head == NULL)
        s->tail = NULL;
    return f;
}

static void tframe_free(tframe *f)
{
    free(f->body);
    free(f);
}

/* Waits for a JSON reply of |type|; checks |message| when not NULL. */
static void expect_msg(T *t, tstream *s, fx_msg_type type, const char *message, fx_msg *out)
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

static bool stream_finished(T *t)
{
    tstream *s = t->arg;
    return s->fin || s->closed;
}

static void expect_end(T *t, tstream *s)
{
    assert_true(run_until_arg(t, stream_finished, s, 3000));
    assert_null(s->head);
}

static void auth(T *t, tstream *s, const char *tenant)
{
    fx_msg m;
    fx_msg_init_auth(&m, tenant, "any-token", true, 63);
    send_msg(s, &m);
    fx_msg r;
    expect_msg(t, s, FX_MSG_AUTH_OK, NULL, &r);
    assert_int_equal(r.server_flags, 63);
    fx_msg_deinit(&r);
}

static tstream *authed_stream(T *t, tconn *c)
{
    tstream *s = open_bidi(c);
    auth(t, s, "t1");
    return s;
}

/* A binary publish frame of the payloads for offsets [first, first + n). */
static fx_buf *binary_publish(T *t, const char *stream, uint64_t first, uint32_t n, bool acked,
                              uint64_t rid)
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
    ssize_t sz = fx_publish_batch_frame_size(&pb);
    assert_true(sz > 0);
    fx_buf *f;
    assert_int_equal(fx_buf_new(&f, (size_t)sz), 0);
    assert_int_equal(fx_publish_batch_encode(&pb, fx_buf_data_mut(f), (size_t)sz), sz);
    for (uint32_t i = 0; i < n; i++)
        fx_buf_unref(bufs[i]);
    free(bufs);
    free(ps);
    return f;
}

/* Sends unacked single-message publishes for offsets [first, first + n). */
static void publish_range(T *t, tstream *s, const char *stream, uint64_t first, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        send_buf(s, binary_publish(t, stream, first + i, 1, false, 0));
}

/* Publishes one acked batch and waits for its ack. */
static void publish_acked(T *t, tstream *s, const char *stream, uint64_t first, uint32_t n,
                          uint64_t rid)
{
    send_buf(s, binary_publish(t, stream, first, n, true, rid));
    tframe *f = next_reply(t, s);
    assert_int_equal(f->flags, FX_FLAG_PUBLISH_ACK);
    fx_publish_ack a;
    assert_int_equal(fx_publish_ack_decode(f->body, f->len, &a, NULL), 0);
    assert_true(a.ok);
    assert_int_equal(a.request_id, rid);
    tframe_free(f);
}

static tstream *event_stream_of(tconn *c, uint64_t sub_id)
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

static bool sub_ready(T *t)
{
    sub_wait *w = t->arg;
    return event_stream_of(w->c, w->id) != NULL;
}

/* Subscribes on a new bidi stream of |c| and returns the event stream. */
static tstream *subscribe(T *t, tconn *c, const char *stream, fx_msg_start_kind kind,
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

static bool all_have(T *t)
{
    want_events *w = t->arg;
    for (size_t i = 0; i < w->n; i++)
        if (w->subs[i]->events < w->events)
            return false;
    return true;
}

static void wait_events(T *t, tstream **subs, size_t n, uint64_t events, uint64_t ms)
{
    want_events w = {subs, n, events};
    if (!run_until_arg(t, all_have, &w, ms)) {
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, "sub %zu: %llu events\n", i, (unsigned long long)subs[i]->events);
        fail_msg("events did not arrive");
    }
}

static void resume_stream(tstream *s)
{
    s->stalled = false;
    if (s->held > 0 && s->tc->qc != NULL)
        fx_quic_stream_consume(s->tc->qc, s->sid, s->held);
    s->held = 0;
}

#define DELTA(a, b, field) ((int64_t)((b).c.field - (a).c.field))

/* ---- protocol ------------------------------------------------------------------------ */

static void test_auth_ok_with_flags_and_ok_without(void **state)
{
    (void)state;
    T *t = t_new();
    t_start(t);
    tconn *c = t_connect(t);
    tstream *a = authed_stream(t, c); /* auth_ok {server_flags 63} checked inside */
    tstream *b = open_bidi(c);
    fx_msg m;
    fx_msg_init_auth(&m, "t1", "tok", false, 0);
    send_msg(b, &m);
    expect_msg(t, b, FX_MSG_OK, NULL, NULL);
    fx_msg_init_auth(&m, "t1", "tok", true, 63);
    send_msg(a, &m);
    expect_msg(t, a, FX_MSG_ERROR, "auth already established", NULL);
    expect_end(t, a);
    t_free(t);
}

static void test_publish_before_auth_is_refused(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = open_bidi(c);
    send_json(s, "{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"x\",\"payload\":\"aGk=\",\"ack\":\"none\"}");
    expect_msg(t, s, FX_MSG_ERROR, "auth required", NULL);
    expect_end(t, s);
    tstream *b = open_bidi(c);
    send_buf(b, binary_publish(t, "x", 0, 1, false, 0));
    expect_msg(t, b, FX_MSG_ERROR, "auth required", NULL);
    expect_end(t, b);
    tstream *u = open_bidi(c);
    send_json(u, "{\"type\":\"subscribe\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"x\"}");
    expect_msg(t, u, FX_MSG_ERROR, "auth required", NULL);
    expect_end(t, u);
    t_free(t);
}

static void test_tenant_mismatch_refused(void **state)
{
    (void)state;
    T *t = t_new();
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    send_json(s, "{\"type\":\"publish\",\"tenant_id\":\"t2\",\"namespace\":\"default\","
                 "\"stream\":\"x\",\"payload\":\"aGk=\",\"request_id\":1}");
    expect_msg(t, s, FX_MSG_ERROR, "tenant mismatch", NULL);
    expect_end(t, s);
    tstream *u = authed_stream(t, c);
    send_json(u, "{\"type\":\"subscribe\",\"tenant_id\":\"t2\",\"namespace\":\"default\","
                 "\"stream\":\"x\"}");
    expect_msg(t, u, FX_MSG_ERROR, "tenant mismatch", NULL);
    expect_end(t, u);
    t_free(t);
}

static void test_acked_binary_publish_gets_0x0010_with_request_id(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    publish_acked(t, s, "acks", 0, 3, 4242);
    publish_acked(t, s, "acks", 3, 1, 7);
    /* Pipelined: three requests in flight answer in request order. */
    for (uint64_t rid = 100; rid < 103; rid++)
        send_buf(s, binary_publish(t, "acks", 4 + rid - 100, 1, true, rid));
    for (uint64_t rid = 100; rid < 103; rid++) {
        tframe *f = next_reply(t, s);
        fx_publish_ack a;
        assert_int_equal(f->flags, FX_FLAG_PUBLISH_ACK);
        assert_int_equal(fx_publish_ack_decode(f->body, f->len, &a, NULL), 0);
        assert_true(a.ok);
        assert_int_equal(a.request_id, rid);
        tframe_free(f);
    }
    t_free(t);
}

/* A client that pipelines requests but does not read the answers: once
 * FXB_REPLIES_HIGH replies wait to be written, the broker stops reading that
 * stream (its QUIC credit is withheld) instead of queueing replies without
 * bound; when the client reads again, every request is answered in order. */
static void test_unread_replies_stop_reading_instead_of_queueing(void **state)
{
    (void)state;
    enum { N = 6000 };
    T *t = t_new();
    t->size_of = size_small;
    t->bo.quic.unacked_cap = 8u << 10; /* little room below the reply queue */
    t->co.stream_window = 4u << 10;    /* the client reads 4 KiB of replies */
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    s->stalled = true;
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    for (uint64_t rid = 1; rid <= N; rid++)
        send_buf(s, binary_publish(t, "unread", rid - 1, 1, true, rid));
    run_for(t, 500);
    fx_metrics_snapshot_take(&b);
    uint64_t answered = (b.c.publish_ok - a.c.publish_ok) + (b.c.publish_error - a.c.publish_error);
    /* what fits in the client's window and the unacked cap, plus the queue */
    assert_true(answered < N);
    assert_true(answered >= 1536); /* the queue bound, FXB_REPLIES_HIGH */
    resume_stream(s);
    for (uint64_t rid = 1; rid <= N; rid++) {
        tframe *f = next_reply(t, s);
        fx_publish_ack ack;
        assert_int_equal(f->flags, FX_FLAG_PUBLISH_ACK);
        assert_int_equal(fx_publish_ack_decode(f->body, f->len, &ack, NULL), 0);
        assert_int_equal(ack.request_id, rid);
        tframe_free(f);
    }
    t_free(t);
}

static void test_json_publish_acked_gets_publish_ok(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.ack_on_commit = true; /* the ack waits for append + fanout */
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    for (int i = 1; i <= 3; i++) {
        char json[256];
        snprintf(json, sizeof(json),
                 "{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"j\",\"payload\":\"aGk=\",\"request_id\":%d,"
                 "\"ack\":\"per_message\"}",
                 i);
        send_json(s, json);
    }
    send_json(s, "{\"type\":\"publish_batch\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"j\",\"payloads\":[\"YQ==\",\"Yg==\"],\"request_id\":4}");
    for (uint64_t i = 1; i <= 4; i++) {
        fx_msg m;
        expect_msg(t, s, FX_MSG_PUBLISH_OK, NULL, &m);
        assert_int_equal(m.request_id, i);
        fx_msg_deinit(&m);
    }
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_ok), 4);
    t_free(t);
}

static void test_json_acked_without_request_id_error(void **state)
{
    (void)state;
    T *t = t_new();
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    send_json(s, "{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"x\",\"payload\":\"aGk=\"}");
    expect_msg(t, s, FX_MSG_ERROR, "missing request_id for acked publish", NULL);
    send_json(s, "{\"type\":\"publish_batch\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"x\",\"payloads\":[\"aGk=\"]}");
    expect_msg(t, s, FX_MSG_ERROR, "missing request_id for acked publish batch", NULL);
    send_json(s, "{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"x\",\"payload\":\"aGk=\",\"request_id\":9}");
    fx_msg m;
    expect_msg(t, s, FX_MSG_PUBLISH_OK, NULL, &m);
    assert_int_equal(m.request_id, 9);
    fx_msg_deinit(&m);
    assert_false(s->fin);
    t_free(t);
}

static void test_unknown_flag_gets_error_and_stream_continues(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    uint8_t fr[FX_WIRE_HEADER_LEN + 2];
    fx_frame_header_put(fr, 0x0040, 2);
    fr[12] = fr[13] = 0;
    send_bytes(s, fr, sizeof(fr));
    expect_msg(t, s, FX_MSG_ERROR, "unsupported frame flags", NULL);
    publish_acked(t, s, "f", 0, 1, 11);
    assert_false(s->fin);
    t_free(t);
}

static void test_malformed_json_closes_stream_but_connection_serves_others(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *bad = authed_stream(t, c);
    tstream *good = authed_stream(t, c);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    send_json(bad, "{\"type\":\"publish\",");
    assert_true(run_until_arg(t, stream_finished, bad, 3000));
    assert_true(bad->reset);
    assert_null(bad->head);
    /* A binary batch whose count runs past the end is malformed too. */
    tstream *bad2 = authed_stream(t, c);
    uint8_t fr[FX_WIRE_HEADER_LEN + 2] = {0};
    fx_frame_header_put(fr, FX_FLAG_PUBLISH_BATCH, 2);
    send_bytes(bad2, fr, sizeof(fr));
    assert_true(run_until_arg(t, stream_finished, bad2, 3000));
    assert_true(bad2->reset);
    publish_acked(t, good, "m", 0, 2, 5);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, broker_stream_errors), 2);
    /* Another connection is unaffected too. */
    tconn *c2 = t_connect(t);
    tstream *s2 = authed_stream(t, c2);
    publish_acked(t, s2, "m", 2, 1, 6);
    assert_false(c->closed);
    t_free(t);
}

static void test_unknown_stream_with_autocreate_off_not_found(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.auto_create_streams = false;
    fx_broker_stream_name known = {"t1", "default", "known"};
    t->bo.streams = &known;
    t->bo.nstreams = 1;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    const char *want = "stream not found: tenant=t1 namespace=default stream=nope";
    send_buf(s, binary_publish(t, "nope", 0, 1, true, 21));
    tframe *f = next_reply(t, s);
    fx_publish_ack a;
    assert_int_equal(f->flags, FX_FLAG_PUBLISH_ACK);
    assert_int_equal(fx_publish_ack_decode(f->body, f->len, &a, NULL), 0);
    assert_false(a.ok);
    assert_int_equal(a.request_id, 21);
    assert_int_equal(a.message.len, strlen(want));
    assert_memory_equal(a.message.ptr, want, strlen(want));
    tframe_free(f);
    send_json(s, "{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"nope\",\"payload\":\"aGk=\",\"request_id\":22}");
    fx_msg m;
    expect_msg(t, s, FX_MSG_PUBLISH_ERROR, want, &m);
    assert_int_equal(m.request_id, 22);
    fx_msg_deinit(&m);
    publish_acked(t, s, "known", 0, 1, 23);
    tstream *u = authed_stream(t, c);
    send_json(u, "{\"type\":\"subscribe\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"nope\"}");
    expect_msg(t, u, FX_MSG_ERROR, want, NULL);
    expect_end(t, u);
    t_free(t);
}

/* ---- delivery ------------------------------------------------------------------------- */

/* The lossless profile: block at checkpoints 5 and 6, unacked publishes wait
 * at ingress instead of being dropped. */
static void t_lossless(T *t)
{
    t->bo.pub_ingress_wait = true;
    t->bo.subscriber_queue_policy = FX_QUEUE_BLOCK;
    t->bo.subscriber_lane_queue_policy = FX_QUEUE_BLOCK;
}

static void test_one_publisher_three_subscribers_in_order(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_1k_or_0;
    /* Lossless, so "every message arrives" is a guarantee, not luck. */
    t_lossless(t);
    t_start(t);
    tstream *subs[3];
    for (int i = 0; i < 3; i++)
        subs[i] = subscribe(t, t_connect(t), "fan", FX_MSG_START_LATEST, 0);
    tconn *p = t_connect(t);
    tstream *s = authed_stream(t, p);
    const uint64_t n = 1000;
    publish_range(t, s, "fan", 0, n);
    wait_events(t, subs, 3, n, 20000);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(subs[i]->events, n);
        assert_int_equal(subs[i]->first_off, 0);
        assert_int_equal(subs[i]->gaps + subs[i]->dups + subs[i]->bad, 0);
    }
    t_free(t);
}

/* Dedicated io loop for QUIC, two workers: streams land on both workers and
 * every subscriber of each gets its stream in order. */
static void test_io_loop_and_two_workers_deliver_every_stream(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.workers = 2;
    t->bo.io_threads = 1;
    t_lossless(t);
    t_start(t);
    assert_int_equal(fx_broker_endpoint_worker(t->b), -1);
    const char *names[2] = {"w-a", "w-b"};
    tstream *subs[2];
    tconn *sc = t_connect(t);
    for (int i = 0; i < 2; i++)
        subs[i] = subscribe(t, sc, names[i], FX_MSG_START_LATEST, 0);
    tstream *s = authed_stream(t, t_connect(t));
    for (int i = 0; i < 2; i++)
        publish_range(t, s, names[i], 0, 300);
    wait_events(t, subs, 2, 300, 10000);
    for (int i = 0; i < 2; i++)
        assert_int_equal(subs[i]->gaps + subs[i]->dups + subs[i]->bad, 0);
    t_free(t);
}

static size_t size_big_tail(uint64_t off)
{
    return off < 4 ? 1024 : (1u << 20);
}

static void test_large_payloads_larger_than_the_receive_window_arrive(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_big_tail;
    t_lossless(t);
    t->bo.quic.stream_window = 256u << 10; /* a 1 MiB frame spans four windows */
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "big", FX_MSG_START_LATEST, 0);
    tstream *s = authed_stream(t, t_connect(t));
    publish_range(t, s, "big", 0, 6);
    wait_events(t, &sub, 1, 6, 20000);
    assert_int_equal(sub->gaps + sub->dups + sub->bad, 0);
    t_free(t);
}

static void test_subscribe_from_earliest_gets_backlog_then_live_without_gap(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.ack_on_commit = true; /* acked = appended */
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    for (uint64_t i = 0; i < 10; i++)
        publish_acked(t, s, "bl", i * 5, 5, i + 1);
    tstream *e = subscribe(t, t_connect(t), "bl", FX_MSG_START_EARLIEST, 0);
    tstream *o = subscribe(t, t_connect(t), "bl", FX_MSG_START_OFFSET, 12);
    tstream *both[2] = {e, o};
    wait_events(t, &e, 1, 50, 5000);
    wait_events(t, &o, 1, 38, 5000);
    for (uint64_t i = 10; i < 20; i++)
        publish_acked(t, s, "bl", i * 5, 5, i + 1);
    wait_events(t, &e, 1, 100, 5000);
    wait_events(t, &o, 1, 88, 5000);
    run_for(t, 50); /* nothing more may come */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(both[i]->gaps + both[i]->dups + both[i]->bad, 0);
        assert_int_equal(both[i]->next_off, 100);
    }
    assert_int_equal(e->first_off, 0);
    assert_int_equal(e->events, 100);
    assert_int_equal(o->first_off, 12);
    assert_int_equal(o->events, 88);
    /* The replay starting inside batch 10..14 used a per-subscriber frame. */
    assert_true(o->sub_frames >= 1);
    t_free(t);
}

static void test_cursor_in_future_typed_error(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.log_capacity = 4;
    t->bo.ack_on_commit = true;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *u = authed_stream(t, c);
    fx_msg m = {.type = FX_MSG_SUBSCRIBE,
                .tenant_id = "t1",
                .ns = "default",
                .stream = "cur",
                .start = {.kind = FX_MSG_START_OFFSET, .offset = 9999}};
    send_msg(u, &m);
    fx_msg r;
    expect_msg(t, u, FX_MSG_SUBSCRIBE_CURSOR_ERROR, NULL, &r);
    assert_int_equal(r.reason, FX_MSG_CURSOR_IN_FUTURE);
    assert_int_equal(r.requested, 9999);
    assert_int_equal(r.available, 0);
    fx_msg_deinit(&r);
    expect_end(t, u);
    /* Too old: a ring of 4 after 10 appends starts at offset 6. */
    tstream *s = authed_stream(t, c);
    for (uint64_t i = 0; i < 10; i++)
        publish_acked(t, s, "cur", i, 1, i + 1);
    tstream *u2 = authed_stream(t, c);
    m.start.offset = 0;
    send_msg(u2, &m);
    expect_msg(t, u2, FX_MSG_SUBSCRIBE_CURSOR_ERROR, NULL, &r);
    assert_int_equal(r.reason, FX_MSG_CURSOR_TOO_OLD);
    assert_int_equal(r.requested, 0);
    assert_int_equal(r.available, 6);
    fx_msg_deinit(&r);
    expect_end(t, u2);
    t_free(t);
}

static void test_shared_frame_encoded_once_for_fanout_3(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.ack_on_commit = true;
    t_start(t);
    tstream *subs[3];
    for (int i = 0; i < 3; i++)
        subs[i] = subscribe(t, t_connect(t), "enc", FX_MSG_START_LATEST, 0);
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    for (uint64_t i = 0; i < 10; i++)
        publish_acked(t, s, "enc", i * 3, 3, i + 1); /* 10 envelopes of 3 */
    wait_events(t, subs, 3, 30, 5000);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, sub_shared_frame_encodes), 10);
    assert_int_equal(DELTA(a, b, sub_frame_encodes), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(subs[i]->gaps + subs[i]->dups + subs[i]->bad, 0);
        assert_int_equal(subs[i]->sub_frames, 0);
    }
    t_free(t);
}

/* ---- policies --------------------------------------------------------------------------- */

typedef struct drop_wait {
    tstream *stalled;
    fx_metrics_snapshot *before;
    uint64_t total;
    uint64_t dropped;
} drop_wait;

static bool stalled_settled(T *t)
{
    drop_wait *w = t->arg;
    fx_metrics_snapshot now;
    fx_metrics_snapshot_take(&now);
    w->dropped = (uint64_t)(DELTA(*w->before, now, sub_queue_dropped) +
                            DELTA(*w->before, now, subscriber_lane_dropped_events));
    return w->stalled->events + w->dropped == w->total;
}

static void test_drop_new_stalled_subscriber_counts_drops_exactly(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_1k;
    t->bo.pub_ingress_wait = true; /* nothing shed upstream of checkpoint 5 */
    t->bo.subscriber_queue_capacity = 64;
    t->bo.subscriber_lane_queue_depth = 4;
    t->bo.subscriber_unacked_bytes = 64u << 10;
    t->co.stream_window = 64u << 10; /* the stalled client's window */
    t_start(t);
    tstream *healthy = subscribe(t, t_connect(t), "dn", FX_MSG_START_LATEST, 0);
    tstream *stalled = subscribe(t, t_connect(t), "dn", FX_MSG_START_LATEST, 0);
    stalled->stalled = true;
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    const uint64_t total = 2000, round = 16;
    for (uint64_t i = 0; i < total; i += round) {
        publish_range(t, s, "dn", i, round);
        wait_events(t, &healthy, 1, i + round, 5000);
    }
    assert_int_equal(healthy->events, total);
    assert_int_equal(healthy->gaps + healthy->dups + healthy->bad, 0);
    assert_true(stalled->events < total / 2); /* the stall was real */
    resume_stream(stalled);
    drop_wait w = {stalled, &a, total, 0};
    assert_true(run_until_arg(t, stalled_settled, &w, 5000));
    run_for(t, 50);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, ingress_dropped), 0);
    assert_int_equal(stalled->events + w.dropped, total);
    assert_int_equal(stalled->missed + (total - stalled->next_off), w.dropped);
    assert_true(w.dropped > 0);
    assert_int_equal(stalled->dups + stalled->bad, 0);
    assert_int_equal(DELTA(a, b, subscriber_disconnect), 0);
    t_free(t);
}

static void test_lossless_block_mode_loses_nothing_with_stalled_subscriber(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_1k;
    t_lossless(t);
    t->bo.subscriber_queue_capacity = 16;
    t->bo.subscriber_lane_queue_depth = 2;
    t->bo.subscriber_unacked_bytes = 64u << 10;
    t->bo.quic.stream_window = 128u << 10; /* the broker's window per publish stream */
    t->co.stream_window = 64u << 10;
    t_start(t);
    tstream *healthy = subscribe(t, t_connect(t), "ll", FX_MSG_START_LATEST, 0);
    tstream *stalled = subscribe(t, t_connect(t), "ll", FX_MSG_START_LATEST, 0);
    stalled->stalled = true;
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    const uint64_t total = 3000;
    publish_range(t, s, "ll", 0, total);
    run_for(t, 300);
    /* The stalled subscriber holds back the stream's worker and, through the
     * withheld credit, the publisher: far from everything got through. */
    assert_true(healthy->events < total);
    assert_true(stalled->events < total);
    resume_stream(stalled);
    tstream *both[2] = {healthy, stalled};
    wait_events(t, both, 2, total, 20000);
    fx_metrics_snapshot_take(&b);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(both[i]->events, total);
        assert_int_equal(both[i]->gaps + both[i]->dups + both[i]->bad, 0);
    }
    assert_int_equal(DELTA(a, b, ingress_dropped), 0);
    assert_int_equal(DELTA(a, b, sub_queue_dropped), 0);
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped), 0);
    t_free(t);
}

/* Lossless broker whose publish stream window holds a whole burst, with one
 * subscriber the test stalls: publishes pile up behind a parked ingress. */
static T *t_new_parking(void)
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

static bool out_empty(T *t)
{
    tconn *c = t->arg;
    return c->out_n == 0;
}

static void test_client_fin_on_publish_stream_gets_fin_after_all_frames_handled(void **state)
{
    (void)state;
    T *t = t_new_parking();
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "cf", FX_MSG_START_LATEST, 0);
    sub->stalled = true;
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    const uint64_t total = 1000;
    publish_range(t, s, "cf", 0, total - 1);
    send_buf(s, binary_publish(t, "cf", total - 1, 1, true, 7)); /* acked: a reply before FIN */
    assert_true(run_until_arg(t, out_empty, s->tc, 5000));
    assert_int_equal(fx_quic_stream_shutdown(s->tc->qc, s->sid), 0);
    run_for(t, 300);
    /* Frames wait behind the stalled subscriber: no FIN may come yet. */
    assert_true(sub->events < total);
    assert_false(s->fin);
    assert_false(s->closed);
    resume_stream(sub);
    assert_true(run_until_arg(t, stream_finished, s, 20000));
    assert_true(s->fin);
    assert_false(s->reset);
    fx_metrics_snapshot_take(&b);
    /* Everything sent before the FIN was handled before the broker's FIN:
     * the unacked ones admitted (Backpressure), the acked one admitted or,
     * its policy being Fail, refused with "publish queue full". */
    uint64_t accepted = (uint64_t)DELTA(a, b, publish_accepted);
    assert_true(accepted >= total - 1);
    assert_int_equal(accepted + (uint64_t)DELTA(a, b, publish_error), total);
    assert_int_equal(DELTA(a, b, ingress_backpressure_cancelled), 0);
    tframe *f = next_reply(t, s); /* written before the FIN */
    assert_int_equal(f->flags, FX_FLAG_PUBLISH_ACK);
    fx_publish_ack ack;
    assert_int_equal(fx_publish_ack_decode(f->body, f->len, &ack, NULL), 0);
    assert_int_equal(ack.ok, accepted == total);
    assert_int_equal(ack.request_id, 7);
    tframe_free(f);
    assert_null(s->head);
    wait_events(t, &sub, 1, accepted, 20000);
    assert_int_equal(sub->gaps + sub->dups + sub->bad, 0);
    t_free(t);
}

typedef struct cancel_wait {
    fx_metrics_snapshot *before;
} cancel_wait;

static bool parked_cancelled(T *t)
{
    cancel_wait *w = t->arg;
    fx_metrics_snapshot now;
    fx_metrics_snapshot_take(&now);
    return DELTA(*w->before, now, ingress_backpressure_cancelled) > 1;
}

static void test_connection_close_counts_every_publish_discarded_behind_a_park(void **state)
{
    (void)state;
    T *t = t_new_parking();
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "cc", FX_MSG_START_LATEST, 0);
    sub->stalled = true;
    tconn *pc = t_connect(t);
    tstream *s = authed_stream(t, pc);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    const uint64_t total = 1000;
    publish_range(t, s, "cc", 0, total);
    assert_true(run_until_arg(t, out_empty, pc, 5000));
    run_for(t, 300); /* the broker has received the burst; most of it waits */
    fx_quic_conn_close(pc->qc, 0, "bye");
    cancel_wait w = {&a};
    assert_true(run_until_arg(t, parked_cancelled, &w, 5000));
    run_for(t, 100);
    fx_metrics_snapshot_take(&b);
    uint64_t accepted = (uint64_t)DELTA(a, b, publish_accepted);
    uint64_t cancelled = (uint64_t)DELTA(a, b, ingress_backpressure_cancelled);
    /* The parked publish and every whole one buffered behind it are counted:
     * far more than the one parked job, and never more than were sent. */
    assert_true(cancelled > 100);
    assert_true(accepted + cancelled <= total);
    assert_int_equal(DELTA(a, b, publish_dropped), 0);
    resume_stream(sub);
    wait_events(t, &sub, 1, accepted, 10000);
    run_for(t, 50);
    assert_int_equal(sub->events, accepted);
    t_free(t);
}

typedef struct ingress_wait {
    fx_metrics_snapshot *before;
    uint64_t total;
} ingress_wait;

static bool ingress_done(T *t)
{
    ingress_wait *w = t->arg;
    fx_metrics_snapshot now;
    fx_metrics_snapshot_take(&now);
    return (uint64_t)(DELTA(*w->before, now, publish_accepted) +
                      DELTA(*w->before, now, publish_dropped)) == w->total;
}

static void test_ingress_drop_with_queue_depth_1_counts_exactly(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.pub_queue_depth = 1;
    t->bo.pub_ingress_wait = false;
    t->bo.subscriber_queue_policy = FX_QUEUE_BLOCK;
    t->bo.subscriber_lane_queue_policy = FX_QUEUE_BLOCK;
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "id", FX_MSG_START_LATEST, 0);
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    const uint64_t total = 500;
    publish_range(t, s, "id", 0, total);
    t->offsets_renumbered = true;
    ingress_wait w = {&a, total};
    assert_true(run_until_arg(t, ingress_done, &w, 10000));
    fx_metrics_snapshot_take(&b);
    uint64_t accepted = (uint64_t)DELTA(a, b, publish_accepted);
    uint64_t dropped = (uint64_t)DELTA(a, b, ingress_dropped);
    wait_events(t, &sub, 1, accepted, 5000);
    run_for(t, 50);
    assert_true(dropped > 0);
    assert_int_equal(dropped, (uint64_t)DELTA(a, b, publish_dropped));
    assert_int_equal(sub->events, accepted);
    assert_int_equal(total - sub->events, dropped);
    assert_int_equal(sub->dups + sub->bad, 0);
    /* Offsets are per stream: what was admitted is contiguous. */
    assert_int_equal(sub->gaps, 0);
    t_free(t);
}

static size_t size_4k(uint64_t off)
{
    (void)off;
    return 4096;
}

/* ack_on_commit = Wait at checkpoint 4: with the stream's worker parked by a
 * stalled block-mode subscriber, acked publishes wait for a queue slot at
 * most publish_queue_wait_timeout and then fail with the documented text.
 * Replies stay in request order: a prefix of ok, then the timeouts. */
static void test_commit_acks_wait_then_time_out_behind_a_parked_worker(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_4k;
    t->bo.ack_on_commit = true;
    t->bo.pub_queue_depth = 1;
    t->bo.publish_queue_wait_timeout_ns = 300 * FX_NS_PER_MS;
    t->bo.fanout_batch_size = 1;
    t->bo.subscriber_queue_policy = FX_QUEUE_BLOCK;
    t->bo.subscriber_queue_capacity = 1;
    t->bo.subscriber_lane_queue_policy = FX_QUEUE_BLOCK;
    t->bo.subscriber_lane_queue_depth = 1;
    t->bo.subscriber_unacked_bytes = 1;
    t->co.stream_window = 1024; /* smaller than one event frame */
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "wt", FX_MSG_START_LATEST, 0);
    sub->stalled = true;
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    /* The chain absorbs six (writer, lane, held list, subscriber queue, the
     * parked fanout, the worker queue); each later one waits its own 300 ms
     * in turn, so the last has timed out well before 1.2 s. */
    const uint64_t n = 8;
    for (uint64_t i = 0; i < n; i++)
        send_buf(s, binary_publish(t, "wt", i, 1, true, i + 1));
    run_for(t, 1200);
    resume_stream(sub);
    uint64_t ok = 0, timed_out = 0;
    for (uint64_t i = 0; i < n; i++) {
        tframe *f = next_reply(t, s);
        fx_publish_ack ack;
        assert_int_equal(fx_publish_ack_decode(f->body, f->len, &ack, NULL), 0);
        assert_int_equal(ack.request_id, i + 1);
        if (ack.ok) {
            assert_int_equal(timed_out, 0); /* ok only before the first timeout */
            ok++;
        } else {
            const char *want = "publish enqueue timed out";
            assert_int_equal(ack.message.len, strlen(want));
            assert_memory_equal(ack.message.ptr, want, strlen(want));
            timed_out++;
        }
        tframe_free(f);
    }
    wait_events(t, &sub, 1, ok, 5000);
    run_for(t, 50);
    fx_metrics_snapshot_take(&b);
    assert_true(ok >= 1);
    assert_true(timed_out >= 1);
    assert_int_equal(sub->events, ok);
    assert_int_equal(sub->gaps + sub->dups + sub->bad, 0);
    assert_int_equal(DELTA(a, b, ingress_backpressure_cancelled), timed_out);
    assert_int_equal(DELTA(a, b, publish_ok), ok);
    t_free(t);
}

typedef struct gauge_wait {
    fx_metrics_snapshot *before;
} gauge_wait;

static bool gauges_back(T *t)
{
    gauge_wait *w = t->arg;
    fx_metrics_snapshot now;
    fx_metrics_snapshot_take(&now);
    return now.g.sub_subscriptions == w->before->g.sub_subscriptions &&
           now.g.sub_active_connections == w->before->g.sub_active_connections &&
           now.g.sub_queue_len == w->before->g.sub_queue_len;
}

static void test_subscriber_disconnect_removes_it_and_gauges_return_to_zero(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.ack_on_commit = true;
    t_start(t);
    fx_metrics_snapshot a, mid;
    fx_metrics_snapshot_take(&a);
    tconn *c1 = t_connect(t);
    tconn *c2 = t_connect(t);
    tstream *s1 = subscribe(t, c1, "dc", FX_MSG_START_LATEST, 0);
    tstream *s2 = subscribe(t, c2, "dc", FX_MSG_START_LATEST, 0);
    tstream *s3 = subscribe(t, c2, "dc", FX_MSG_START_LATEST, 0);
    s3->stalled = true; /* keeps envelopes queued in the broker */
    fx_metrics_snapshot_take(&mid);
    assert_int_equal(mid.g.sub_subscriptions - a.g.sub_subscriptions, 3);
    assert_int_equal(mid.g.sub_active_connections - a.g.sub_active_connections, 2);
    tstream *p = authed_stream(t, t_connect(t));
    for (uint64_t i = 0; i < 5; i++)
        publish_acked(t, p, "dc", i, 1, i + 1);
    tstream *two[2] = {s1, s2};
    wait_events(t, two, 2, 5, 5000);
    /* Unsubscribe: the client abandons its event stream. */
    fx_quic_stream_reset(c2->qc, s2->sid, 0);
    run_for(t, 50);
    for (uint64_t i = 5; i < 10; i++)
        publish_acked(t, p, "dc", i, 1, i + 1);
    wait_events(t, &s1, 1, 10, 5000);
    assert_int_equal(s1->gaps, 0);
    assert_int_equal(s2->events, 5);
    /* A client that vanishes: its connection closes with the stalled one. */
    fx_quic_conn_close(c2->qc, 0, "bye");
    fx_quic_conn_close(c1->qc, 0, "bye");
    gauge_wait w = {&a};
    assert_true(run_until_arg(t, gauges_back, &w, 5000));
    t_free(t);
}

/* ---- checkpoint-3 reservation at the frame header, frame read timeout -------------- */

static size_t size_10k(uint64_t off)
{
    (void)off;
    return 10000;
}

typedef struct gauge_is {
    fx_metrics_snapshot *before;
    int64_t reserved;
} gauge_is;

static bool reserved_is(T *t)
{
    gauge_is *w = t->arg;
    fx_metrics_snapshot now;
    fx_metrics_snapshot_take(&now);
    return now.g.ingress_reserved_bytes - w->before->g.ingress_reserved_bytes == w->reserved;
}

static void expect_reserved(T *t, fx_metrics_snapshot *before, int64_t n)
{
    gauge_is w = {before, n};
    if (!run_until_arg(t, reserved_is, &w, 5000)) {
        fx_metrics_snapshot now;
        fx_metrics_snapshot_take(&now);
        fail_msg("reserved bytes: want %lld, have %lld", (long long)n,
                 (long long)(now.g.ingress_reserved_bytes - before->g.ingress_reserved_bytes));
    }
}

static void expect_ack(T *t, tstream *s, uint64_t rid)
{
    tframe *f = next_reply(t, s);
    assert_int_equal(f->flags, FX_FLAG_PUBLISH_ACK);
    fx_publish_ack a;
    assert_int_equal(fx_publish_ack_decode(f->body, f->len, &a, NULL), 0);
    assert_true(a.ok);
    assert_int_equal(a.request_id, rid);
    tframe_free(f);
}

/* The body length a whole frame announces. */
static int64_t body_len(const fx_buf *f)
{
    return (int64_t)(fx_buf_len(f) - FX_WIRE_HEADER_LEN);
}

static void test_header_reserves_budget_before_body(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_10k;
    t_start(t);
    tstream *s = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_buf *f = binary_publish(t, "hr", 0, 1, true, 1);
    const size_t part = FX_WIRE_HEADER_LEN + 100;
    send_bytes(s, fx_buf_data(f), part);
    /* The header alone took the whole announced body from the budget. */
    expect_reserved(t, &a, body_len(f));
    assert_null(s->head);
    send_bytes(s, fx_buf_data(f) + part, fx_buf_len(f) - part);
    expect_ack(t, s, 1);
    expect_reserved(t, &a, 0); /* the job took it, and released it when done */
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_accepted), 1);
    assert_int_equal(DELTA(a, b, ingress_reserve_waited), 0);
    assert_int_equal(DELTA(a, b, broker_frame_timeouts), 0);
    fx_buf_unref(f);
    t_free(t);
}

static void test_trickling_frame_times_out_and_releases_budget(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_10k;
    t->bo.frame_read_timeout_ns = 200 * FX_NS_PER_MS;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_buf *f = binary_publish(t, "tt", 0, 1, true, 1);
    send_bytes(s, fx_buf_data(f), FX_WIRE_HEADER_LEN + 10);
    expect_reserved(t, &a, body_len(f));
    send_bytes(s, fx_buf_data(f) + FX_WIRE_HEADER_LEN + 10, 10); /* a trickle */
    assert_true(run_until_arg(t, stream_finished, s, 5000));
    assert_true(s->reset);
    assert_null(s->head);
    expect_reserved(t, &a, 0);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, broker_frame_timeouts), 1);
    assert_int_equal(DELTA(a, b, broker_stream_errors), 1);
    assert_int_equal(DELTA(a, b, publish_accepted), 0);
    /* The connection still serves whole frames on another stream. */
    tstream *s2 = authed_stream(t, c);
    publish_acked(t, s2, "tt", 0, 1, 2);
    assert_false(c->closed);
    fx_buf_unref(f);
    t_free(t);
}

typedef struct waited_is {
    fx_metrics_snapshot *before;
} waited_is;

static bool reserve_waited(T *t)
{
    waited_is *w = t->arg;
    fx_metrics_snapshot now;
    fx_metrics_snapshot_take(&now);
    return DELTA(*w->before, now, ingress_reserve_waited) >= 1;
}

static void test_reservation_waits_when_budget_exhausted_then_proceeds(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_10k;
    /* Room for one 10 KB frame at a time, whole broker. */
    t->bo.pub_inflight_bytes = 16u << 10;
    t->bo.pub_conn_inflight_bytes = 16u << 10;
    t_start(t);
    tstream *sub = subscribe(t, t_connect(t), "rw", FX_MSG_START_LATEST, 0);
    tstream *s1 = authed_stream(t, t_connect(t));
    tstream *s2 = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_buf *f1 = binary_publish(t, "rw", 0, 1, true, 1);
    const size_t part = FX_WIRE_HEADER_LEN + 100;
    send_bytes(s1, fx_buf_data(f1), part);
    expect_reserved(t, &a, body_len(f1));
    /* The second connection's whole frame finds the budget held. */
    fx_buf *f2 = binary_publish(t, "rw", 1, 1, true, 2);
    int64_t n2 = body_len(f2);
    send_buf(s2, f2);
    waited_is w = {&a};
    assert_true(run_until_arg(t, reserve_waited, &w, 5000));
    run_for(t, 100);
    assert_null(s2->head); /* not admitted, not refused: waiting */
    assert_int_equal(sub->events, 0);
    send_bytes(s1, fx_buf_data(f1) + part, fx_buf_len(f1) - part);
    expect_ack(t, s1, 1);
    expect_ack(t, s2, 2); /* admitted once the first job released its bytes */
    wait_events(t, &sub, 1, 2, 5000);
    assert_int_equal(sub->gaps + sub->dups + sub->bad, 0);
    expect_reserved(t, &a, 0);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_accepted), 2);
    assert_int_equal(DELTA(a, b, publish_error), 0);
    assert_int_equal(DELTA(a, b, ingress_reserve_waited), 1);
    assert_int_equal(DELTA(a, b, ingress_bytes_full) + DELTA(a, b, ingress_conn_bytes_full), 0);
    assert_int_equal(DELTA(a, b, broker_frame_timeouts), 0);
    assert_true(n2 > (16 << 10) - body_len(f1)); /* it really could not fit */
    fx_buf_unref(f1);
    t_free(t);
}

/* ---- writer lanes (checkpoint 6) ------------------------------------------------------ */

/* One subscription as fx_broker_list_subscriptions reports it. */
typedef struct sub_info {
    uint64_t lane, lanes, lane_dropped, queue_dropped, lane_capacity, connection_id;
} sub_info;

static uint64_t jget(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    assert_non_null(v);
    assert_true(json_is_integer(v));
    return (uint64_t)json_integer_value(v);
}

static sub_info sub_info_of(T *t, uint64_t id)
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

static void test_lanes_spread_subscriptions_by_rule(void **state)
{
    (void)state;
    /* round_robin_pin: a connection's n-th subscription gets lane n % 2,
     * counted per connection. */
    T *t = t_new();
    t->bo.subscriber_writer_lanes = 2;
    t->bo.subscriber_lane_shard = FX_BROKER_LANE_ROUND_ROBIN_PIN;
    t_start(t);
    tconn *c1 = t_connect(t), *c2 = t_connect(t);
    for (uint64_t i = 0; i < 4; i++) {
        sub_info in = sub_info_of(t, subscribe(t, c1, "rr", FX_MSG_START_LATEST, 0)->sub_id);
        assert_int_equal(in.lanes, 2);
        assert_int_equal(in.lane, i % 2);
    }
    assert_int_equal(sub_info_of(t, subscribe(t, c2, "rr", FX_MSG_START_LATEST, 0)->sub_id).lane,
                     0);
    t_free(t);

    /* subscriber_id_hash: the lane follows the subscription id's hash, and
     * consecutive ids use both lanes. */
    t = t_new();
    t->bo.subscriber_writer_lanes = 2;
    t->bo.subscriber_lane_shard = FX_BROKER_LANE_SUBSCRIBER_ID_HASH;
    t_start(t);
    tconn *c = t_connect(t);
    uint64_t on[2] = {0, 0};
    for (int i = 0; i < 8; i++) {
        uint64_t id = subscribe(t, c, "hs", FX_MSG_START_LATEST, 0)->sub_id;
        sub_info in = sub_info_of(t, id);
        assert_int_equal(in.lane, fx_broker_lane_hash(id) % 2);
        on[in.lane]++;
    }
    assert_true(on[0] > 0 && on[1] > 0);
    t_free(t);

    /* connection_id_hash, with the lane count clamped by
     * max_subscriber_writer_lanes: a connection's subscriptions share one
     * lane, picked by the connection id's hash. */
    t = t_new();
    t->bo.subscriber_writer_lanes = 4;
    t->bo.max_subscriber_writer_lanes = 2;
    t->bo.subscriber_lane_shard = FX_BROKER_LANE_CONNECTION_ID_HASH;
    t_start(t);
    for (int k = 0; k < 2; k++) {
        tconn *ck = t_connect(t);
        for (int i = 0; i < 3; i++) {
            sub_info in = sub_info_of(t, subscribe(t, ck, "ch", FX_MSG_START_LATEST, 0)->sub_id);
            assert_int_equal(in.lanes, 2);
            assert_int_equal(in.lane, fx_broker_lane_hash(in.connection_id) % 2);
        }
    }
    t_free(t);
}

static void test_single_writer_per_conn_uses_one_lane(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.subscriber_writer_lanes = 4;
    t->bo.subscriber_lane_shard = FX_BROKER_LANE_ROUND_ROBIN_PIN; /* would spread */
    t->bo.subscriber_single_writer_per_conn = true;
    t->bo.subscriber_lane_queue_policy = FX_QUEUE_BLOCK;
    t->bo.subscriber_lane_queue_depth = 2;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *subs[4];
    for (int i = 0; i < 4; i++) {
        subs[i] = subscribe(t, c, "sw", FX_MSG_START_LATEST, 0);
        sub_info in = sub_info_of(t, subs[i]->sub_id);
        assert_int_equal(in.lanes, 1);
        assert_int_equal(in.lane, 0);
        assert_int_equal(in.lane_capacity, 2);
    }
    /* The one lane carries all four, in order and complete. */
    tstream *p = authed_stream(t, t_connect(t));
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    publish_acked(t, p, "sw", 0, 200, 1);
    wait_events(t, subs, 4, 200, 10000);
    fx_metrics_snapshot_take(&b);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(subs[i]->events, 200);
        assert_int_equal(subs[i]->gaps + subs[i]->dups + subs[i]->bad, 0);
    }
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped), 0);
    t_free(t);
}

/* Two subscriptions on one connection, the first stalled (it withholds its
 * QUIC credit), with the lane choice of |shard| over 2 lanes. */
typedef struct lane_pair {
    T *t;
    tstream *stalled, *healthy;
    sub_info si, hi;
} lane_pair;

static lane_pair lane_pair_start(fx_queue_policy policy, fx_broker_lane_shard shard)
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
static bool settled(T *t)
{
    settle_wait *w = t->arg;
    if (w->s->events + w->dropped == w->want)
        return true;
    w->dropped = sub_info_of(t, w->s->sub_id).lane_dropped;
    return w->s->events + w->dropped == w->want;
}

static void settle(T *t, tstream *s, uint64_t want)
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
static void lane_pair_run(lane_pair *lp, uint64_t total, fx_metrics_snapshot *a,
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
static uint64_t lacks(const tstream *s, uint64_t total)
{
    if (!s->any)
        return total;
    return s->first_off + s->missed + (total - s->next_off);
}

static void test_shared_lane_sheds_healthy_neighbour_of_stalled_subscriber(void **state)
{
    (void)state;
    lane_pair lp = lane_pair_start(FX_QUEUE_DROP_NEW, FX_BROKER_LANE_CONNECTION_ID_HASH);
    const uint64_t total = 800;
    fx_metrics_snapshot a, b;
    lane_pair_run(&lp, total, &a, &b);
    tstream *h = lp.healthy, *st = lp.stalled;
    assert_int_equal(lp.si.lane, lp.hi.lane); /* one lane, by the rule */
    /* The healthy subscriber is healthy at checkpoint 5 and still shed at
     * checkpoint 6: the stalled neighbour's backlog fills their lane. */
    assert_int_equal(lp.hi.queue_dropped, 0);
    assert_true(lp.hi.lane_dropped > 0);
    assert_int_equal(h->events + lp.hi.lane_dropped, total);
    assert_int_equal(lacks(h, total), lp.hi.lane_dropped);
    assert_int_equal(h->dups + h->bad, 0);
    assert_true(lp.si.lane_dropped > 0);
    assert_int_equal(st->events + lp.si.lane_dropped, total);
    assert_int_equal(lacks(st, total), lp.si.lane_dropped);
    assert_int_equal(st->dups + st->bad, 0);
    /* felix_subscriber_lane_dropped_events_total holds both, nothing else. */
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped_events),
                     lp.hi.lane_dropped + lp.si.lane_dropped);
    assert_true(DELTA(a, b, subscriber_lane_dropped) > 0);
    assert_int_equal(DELTA(a, b, sub_queue_dropped), 0);
    assert_int_equal(DELTA(a, b, ingress_dropped), 0);
    assert_int_equal(DELTA(a, b, subscriber_disconnect), 0);
    t_free(lp.t);
}

static void test_stalled_subscriber_on_other_lane_does_not_shed_neighbour(void **state)
{
    (void)state;
    /* Same connection, but round_robin_pin puts them on lanes 0 and 1. */
    lane_pair lp = lane_pair_start(FX_QUEUE_DROP_NEW, FX_BROKER_LANE_ROUND_ROBIN_PIN);
    const uint64_t total = 800;
    fx_metrics_snapshot a, b;
    lane_pair_run(&lp, total, &a, &b);
    assert_int_equal(lp.si.lane, 0);
    assert_int_equal(lp.hi.lane, 1);
    assert_int_equal(lp.hi.lane_dropped, 0);
    assert_int_equal(lp.healthy->events, total);
    assert_int_equal(lp.healthy->gaps + lp.healthy->dups + lp.healthy->bad, 0);
    assert_true(lp.si.lane_dropped > 0);
    assert_int_equal(lp.stalled->events + lp.si.lane_dropped, total);
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped_events), lp.si.lane_dropped);
    t_free(lp.t);
}

static void test_drop_old_on_lane_evicts_only_same_subscriber(void **state)
{
    (void)state;
    lane_pair lp = lane_pair_start(FX_QUEUE_DROP_OLD, FX_BROKER_LANE_CONNECTION_ID_HASH);
    const uint64_t total = 800;
    fx_metrics_snapshot a, b;
    lane_pair_run(&lp, total, &a, &b);
    tstream *h = lp.healthy, *st = lp.stalled;
    assert_int_equal(lp.si.lane, lp.hi.lane);
    /* The stalled subscriber's own oldest lists made room for its newest:
     * after resuming it got the end of the burst. */
    assert_int_equal(st->next_off, total);
    assert_true(lp.si.lane_dropped > 0);
    assert_int_equal(st->events + lp.si.lane_dropped, total);
    assert_int_equal(lacks(st, total), lp.si.lane_dropped);
    assert_int_equal(st->dups + st->bad, 0);
    /* The healthy neighbour never evicted the stalled one's lists (it would
     * then have lost nothing): with nothing of its own queued, its own
     * deliveries were the ones shed, each counted against it. */
    assert_true(lp.hi.lane_dropped > 0);
    assert_int_equal(h->events + lp.hi.lane_dropped, total);
    assert_int_equal(lacks(h, total), lp.hi.lane_dropped);
    assert_int_equal(h->dups + h->bad, 0);
    assert_int_equal(lp.hi.queue_dropped, 0);
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped_events),
                     lp.hi.lane_dropped + lp.si.lane_dropped);
    assert_int_equal(DELTA(a, b, sub_queue_dropped), 0);
    t_free(lp.t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_auth_ok_with_flags_and_ok_without),
    cmocka_unit_test(test_publish_before_auth_is_refused),
    cmocka_unit_test(test_tenant_mismatch_refused),
    cmocka_unit_test(test_acked_binary_publish_gets_0x0010_with_request_id),
    cmocka_unit_test(test_unread_replies_stop_reading_instead_of_queueing),
    cmocka_unit_test(test_json_publish_acked_gets_publish_ok),
    cmocka_unit_test(test_json_acked_without_request_id_error),
    cmocka_unit_test(test_unknown_flag_gets_error_and_stream_continues),
    cmocka_unit_test(test_malformed_json_closes_stream_but_connection_serves_others),
    cmocka_unit_test(test_unknown_stream_with_autocreate_off_not_found),
    cmocka_unit_test(test_one_publisher_three_subscribers_in_order),
    cmocka_unit_test(test_large_payloads_larger_than_the_receive_window_arrive),
    cmocka_unit_test(test_io_loop_and_two_workers_deliver_every_stream),
    cmocka_unit_test(test_subscribe_from_earliest_gets_backlog_then_live_without_gap),
    cmocka_unit_test(test_cursor_in_future_typed_error),
    cmocka_unit_test(test_shared_frame_encoded_once_for_fanout_3),
    cmocka_unit_test(test_drop_new_stalled_subscriber_counts_drops_exactly),
    cmocka_unit_test(test_lossless_block_mode_loses_nothing_with_stalled_subscriber),
    cmocka_unit_test(test_client_fin_on_publish_stream_gets_fin_after_all_frames_handled),
    cmocka_unit_test(test_connection_close_counts_every_publish_discarded_behind_a_park),
    cmocka_unit_test(test_ingress_drop_with_queue_depth_1_counts_exactly),
    cmocka_unit_test(test_commit_acks_wait_then_time_out_behind_a_parked_worker),
    cmocka_unit_test(test_subscriber_disconnect_removes_it_and_gauges_return_to_zero),
    cmocka_unit_test(test_header_reserves_budget_before_body),
    cmocka_unit_test(test_trickling_frame_times_out_and_releases_budget),
    cmocka_unit_test(test_reservation_waits_when_budget_exhausted_then_proceeds),
    cmocka_unit_test(test_lanes_spread_subscriptions_by_rule),
    cmocka_unit_test(test_single_writer_per_conn_uses_one_lane),
    cmocka_unit_test(test_shared_lane_sheds_healthy_neighbour_of_stalled_subscriber),
    cmocka_unit_test(test_stalled_subscriber_on_other_lane_does_not_shed_neighbour),
    cmocka_unit_test(test_drop_old_on_lane_evicts_only_same_subscriber),
};

FX_TEST_MAIN(tests)
