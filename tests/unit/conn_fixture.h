/* A one-thread fixture for the unit tests of the broker's connection-loop
 * stages (test_bidi.c, test_writer.c, test_subscribe.c,
 * test_broker_publish.c, test_durable.c): a broker built by fx_broker_new
 * as the daemon builds it, over the fuzz targets' fake QUIC transport
 * (tests/fuzz/fake_quic.c) and thread-free loops (tests/fuzz/fake_loop.c,
 * which stand in for base/loop.c at link time). The test plays the client:
 * it writes bytes on a bidi stream, runs the loops' posted tasks, moves the
 * fake clock, acknowledges, and reads back the frames the broker wrote on
 * its bidi answers and uni event streams. No socket, no thread.
 * Header-only, included by one test file each; such a file links
 * `fx_broker fx_storage fx_wire fx_base` and never fx_quic's real code. */
#ifndef FX_TESTS_UNIT_CONN_FIXTURE_H
#define FX_TESTS_UNIT_CONN_FIXTURE_H

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"

#include "base/log.h"
#include "base/metrics.h"
#include "broker/broker_internal.h"
#include "fuzz/fake_loop.c"
#include "fuzz/fake_quic.c"
#include "wire/binary.h"
#include "wire/frame.h"
#include "wire/message.h"

#define CF_MAX_READERS 32

/* One frame read back from what the broker sent; |body| is valid until the
 * next read on the same fixture. */
typedef struct cf_frame {
    uint16_t flags;
    fx_body_kind kind;
    const uint8_t *body;
    size_t len;
} cf_frame;

typedef struct cf {
    fx_broker *b;
    fx_quic_endpoint *ep;
    fx_quic_conn *qc; /* the client connection; NULL once it ended */
    bool ended;       /* it ended: |why| says how */
    fx_quic_close_info why;
    struct {
        int64_t sid;
        size_t off; /* bytes of the stream's output read so far */
    } rd[CF_MAX_READERS];
    size_t nrd;
    uint8_t *scratch; /* the last frame read */
} cf;

/* ---- options and life -------------------------------------------------------------------- */

/* The fixture's options: fx_broker_opts_default, one worker that also runs
 * the endpoint (no io thread), auth_mode none; the fake transport's
 * defaults (1 MiB stream window, 16 MiB unacked cap). */
static inline void cf_opts(fx_broker_opts *o, fq_config *q)
{
    fx_broker_opts_default(o);
    o->workers = 1;
    o->io_threads = 0;
    *q = (fq_config){.stream_window = 1u << 20, .unacked_cap = 16u << 20, .local_streams = 1024};
}

/* A broker with cf_opts then |tune| (may be NULL), and one client
 * connection that finished its handshake. */
static inline cf *cf_new(void (*tune)(fx_broker_opts *o, fq_config *q))
{
    fx_log_set_level(FX_LOG_ERROR);
    cf *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    fx_broker_opts o;
    fq_config q;
    cf_opts(&o, &q);
    if (tune != NULL)
        tune(&o, &q);
    fq_configure(&q);
    assert_int_equal(fx_broker_new(&f->b, &o), 0);
    f->ep = fq_last_endpoint();
    assert_non_null(f->ep);
    f->qc = fq_accept(f->ep);
    assert_non_null(f->qc);
    assert_false(fq_is_closing(f->qc));
    return f;
}

/* Runs the queued tasks of every loop until none is left. No time passes
 * and nothing is acknowledged. Returns whether any ran. */
static inline bool cf_run(cf *f)
{
    (void)f;
    bool any = false;
    for (unsigned round = 0; round < 100000; round++) {
        bool ran = false;
        for (size_t i = 0; fx_fake_loop_at(i) != NULL; i++)
            for (unsigned n = 0; n < 64 && fx_fake_loop_run_one(fx_fake_loop_at(i)); n++)
                ran = true;
        if (!ran)
            return any;
        any = true;
    }
    fail_msg("the loops never went quiet");
    return any;
}

/* Runs the queued tasks of the loops whose name does not start with
 * |prefix| ("fx-storage" holds back the durable storage stage) until none
 * is left. Returns whether any ran. */
static inline bool cf_run_but(cf *f, const char *prefix)
{
    (void)f;
    bool any = false;
    for (unsigned round = 0; round < 100000; round++) {
        bool ran = false;
        for (size_t i = 0; fx_fake_loop_at(i) != NULL; i++) {
            fx_loop *l = fx_fake_loop_at(i);
            if (strncmp(fx_loop_name(l), prefix, strlen(prefix)) == 0)
                continue;
            for (unsigned n = 0; n < 64 && fx_fake_loop_run_one(l); n++)
                ran = true;
        }
        if (!ran)
            return any;
        any = true;
    }
    fail_msg("the loops never went quiet");
    return any;
}

/* Whether a loop whose name starts with |prefix| has tasks queued. */
static inline bool cf_has_tasks(const char *prefix)
{
    for (size_t i = 0; fx_fake_loop_at(i) != NULL; i++) {
        fx_loop *l = fx_fake_loop_at(i);
        if (strncmp(fx_loop_name(l), prefix, strlen(prefix)) == 0 && fx_fake_loop_has_tasks(l))
            return true;
    }
    return false;
}

/* Fires every timer that is due on any loop. Returns whether one fired. */
static inline bool cf_fire_due(void)
{
    bool any = false;
    for (size_t i = 0; fx_fake_loop_at(i) != NULL; i++)
        while (fx_fake_loop_fire_one(fx_fake_loop_at(i)))
            any = true;
    return any;
}

/* A transport turn of the client connection (streams that are done close);
 * forgets the connection once it ended. */
static inline void cf_turn(cf *f)
{
    if (f->qc == NULL)
        return;
    fx_quic_close_info why = f->qc->info; /* the fake's record, freed with it */
    if (!fq_turn(f->qc)) {
        f->qc = NULL;
        f->ended = true;
        f->why = why;
    }
}

/* Whether the client connection is open (neither closing nor ended). */
static inline bool cf_is_open(const cf *f)
{
    return f->qc != NULL && !fq_is_closing(f->qc);
}

/* Whether the broker closed (or is closing) the client connection with
 * application code |code|. */
static inline bool cf_closed_with(cf *f, uint64_t code)
{
    const fx_quic_close_info *i = f->qc != NULL ? &f->qc->info : &f->why;
    if (f->qc != NULL && !fq_is_closing(f->qc))
        return false;
    return i->app && !i->remote && i->code == code;
}

/* Runs tasks and transport turns until quiet, without acknowledging. */
static inline void cf_pump(cf *f)
{
    for (unsigned i = 0; i < 1000; i++) {
        bool any = cf_run(f);
        cf_turn(f);
        any |= cf_run(f);
        if (!any)
            return;
    }
}

/* The client acknowledges everything sent. */
static inline void cf_ack(cf *f)
{
    if (f->qc != NULL)
        fq_ack(f->qc);
}

/* Everything that can happen without time passing: tasks, due timers,
 * acknowledgements and transport turns. */
static inline void cf_settle(cf *f)
{
    for (unsigned i = 0; i < 1000; i++) {
        cf_ack(f);
        cf_turn(f);
        bool any = cf_run(f);
        any |= cf_fire_due();
        if (!any && (f->qc == NULL || fq_unacked(f->qc) == 0))
            return;
    }
    fail_msg("the broker never settled");
}

/* The fake clock moves |ns| forward; due timers fire. Nothing else runs. */
static inline void cf_advance(cf *f, uint64_t ns)
{
    (void)f;
    fx_fake_clock_advance(ns);
    cf_fire_due();
}

/* The client leaves, everything settles and the broker is freed. */
static inline void cf_free(cf *f)
{
    if (f->qc != NULL && !fq_is_closing(f->qc)) {
        fq_close_remote(f->qc, 0);
        cf_turn(f);
    }
    cf_settle(f);
    /* The fake loops check as they are freed that no task is queued and no
     * timer armed: every test also checks the broker leaves none behind. */
    fx_broker_free(f->b);
    free(f->scratch);
    free(f);
}

/* ---- the client's side --------------------------------------------------------------------- */

/* The client writes |n| bytes (and its FIN when |fin|) on bidi stream
 * |sid|. Returns the bytes the receive window let through now. */
static inline size_t cf_write(cf *f, int64_t sid, const void *p, size_t n, bool fin)
{
    assert_non_null(f->qc);
    return fq_deliver(f->qc, sid, p, n, fin);
}

/* |m| as one whole frame (free() it). */
static inline uint8_t *cf_msg_frame(const fx_msg *m, size_t *plen)
{
    uint8_t *p;
    assert_int_equal(fx_msg_encode_frame(m, &p, plen), 0);
    return p;
}

/* The client writes |m| as one frame on |sid| (what the window holds back
 * goes out at later transport turns). */
static inline void cf_write_msg(cf *f, int64_t sid, const fx_msg *m)
{
    size_t n;
    uint8_t *p = cf_msg_frame(m, &n);
    cf_write(f, sid, p, n, false);
    free(p);
}

/* A binary publish of |count| payloads |pl| to |tenant|/default/|stream|:
 * 0x0001, or 0x0009 (per batch) with |request_id| when |acked|. Returns
 * the frame (free() it). */
static inline uint8_t *cf_publish_frame(const char *tenant, const char *stream,
                                        const char *const *pl, uint32_t count, bool acked,
                                        uint64_t request_id, size_t *plen)
{
    fx_wire_slice sl[16];
    assert_true(count <= 16);
    for (uint32_t i = 0; i < count; i++)
        sl[i] = (fx_wire_slice){(const uint8_t *)pl[i], strlen(pl[i])};
    fx_wire_publish_batch pb = {
        .request_id = request_id,
        .ack = acked ? FX_WIRE_ACK_PER_BATCH : FX_WIRE_ACK_NONE,
        .tenant = {(const uint8_t *)tenant, strlen(tenant)},
        .ns = {(const uint8_t *)"default", 7},
        .stream = {(const uint8_t *)stream, strlen(stream)},
        .count = count,
        .payloads = sl,
    };
    ssize_t n = fx_wire_publish_batch_frame_size(&pb);
    assert_true(n > 0);
    uint8_t *p = malloc((size_t)n);
    assert_non_null(p);
    assert_int_equal(fx_wire_publish_batch_encode(&pb, p, (size_t)n), n);
    *plen = (size_t)n;
    return p;
}

/* ---- what the broker sent ------------------------------------------------------------------ */

static inline fq_stream *cf_stream(cf *f, int64_t sid)
{
    assert_non_null(f->qc);
    return fq_stream_find(f->qc, sid);
}

/* The |k|-th uni stream the broker opened (0 first), or -1. */
static inline int64_t cf_uni(cf *f, unsigned k)
{
    unsigned n = 0;
    for (size_t i = 0; f->qc != NULL && fq_stream_at(f->qc, i) != NULL; i++) {
        fq_stream *s = fq_stream_at(f->qc, i);
        if ((s->sid & 3) == 3 && n++ == k)
            return s->sid;
    }
    return -1;
}

static inline size_t *cf_reader(cf *f, int64_t sid)
{
    for (size_t i = 0; i < f->nrd; i++)
        if (f->rd[i].sid == sid)
            return &f->rd[i].off;
    assert_true(f->nrd < CF_MAX_READERS);
    f->rd[f->nrd].sid = sid;
    f->rd[f->nrd].off = 0;
    return &f->rd[f->nrd++].off;
}

/* The next whole frame the broker wrote on |sid| since the last read, into
 * |*fr|. Returns false when there is none (yet). */
static inline bool cf_read_frame(cf *f, int64_t sid, cf_frame *fr)
{
    fq_stream *s = cf_stream(f, sid);
    if (s == NULL)
        return false;
    assert_false(s->tx_truncated);
    size_t *off = cf_reader(f, sid);
    if (s->tx_len - *off < FX_WIRE_HEADER_LEN)
        return false;
    const uint8_t *h = s->tx + *off;
    size_t len = fx_be32(h + 8);
    if (s->tx_len - *off - FX_WIRE_HEADER_LEN < len)
        return false;
    fx_wire_err err;
    fr->flags = fx_be16(h + 6);
    assert_int_equal(fx_frame_kind(fr->flags, &fr->kind, &err), 0);
    free(f->scratch);
    f->scratch = malloc(len + 1);
    assert_non_null(f->scratch);
    memcpy(f->scratch, h + FX_WIRE_HEADER_LEN, len);
    fr->body = f->scratch;
    fr->len = len;
    *off += FX_WIRE_HEADER_LEN + len;
    return true;
}

/* The next frame on |sid|, which must be a JSON message: decoded into |m|
 * (fx_msg_deinit it). Returns false when there is no frame. */
static inline bool cf_read_msg(cf *f, int64_t sid, fx_msg *m)
{
    cf_frame fr;
    if (!cf_read_frame(f, sid, &fr))
        return false;
    assert_int_equal(fr.kind, FX_BODY_JSON);
    fx_wire_err err;
    assert_int_equal(fx_msg_decode(m, fr.body, fr.len, &err), 0);
    return true;
}

/* Asserts that the next frame on |sid| is a JSON message of type |type|;
 * for an error, that its text contains |text| (NULL: any). */
static inline void cf_expect_msg(cf *f, int64_t sid, fx_msg_type type, const char *text)
{
    fx_msg m;
    assert_true(cf_read_msg(f, sid, &m));
    if (m.type != type)
        fail_msg("stream %lld: message type %d, expected %d (%s)", (long long)sid, (int)m.type,
                 (int)type, m.message != NULL ? m.message : "");
    if (text != NULL) {
        assert_non_null(m.message);
        if (strstr(m.message, text) == NULL)
            fail_msg("stream %lld: \"%s\" does not say \"%s\"", (long long)sid, m.message, text);
    }
    fx_msg_deinit(&m);
}

/* Asserts that the next frame on |sid| is a publish ack (0x0010) for
 * |request_id|: ok, or an error containing |err|. */
static inline void cf_expect_ack(cf *f, int64_t sid, uint64_t request_id, const char *err)
{
    cf_frame fr;
    assert_true(cf_read_frame(f, sid, &fr));
    assert_int_equal(fr.kind, FX_BODY_PUBLISH_ACK);
    fx_wire_publish_ack a;
    fx_wire_err werr;
    assert_int_equal(fx_wire_publish_ack_decode(fr.body, fr.len, &a, &werr), 0);
    assert_int_equal(a.request_id, request_id);
    if (err == NULL) {
        if (!a.ok)
            fail_msg("ack %llu: error \"%.*s\"", (unsigned long long)request_id, (int)a.message.len,
                     (const char *)a.message.ptr);
        return;
    }
    assert_false(a.ok);
    char text[FX_WIRE_ACK_MSG_MAX + 1];
    snprintf(text, sizeof(text), "%.*s", (int)a.message.len, (const char *)a.message.ptr);
    if (strstr(text, err) == NULL)
        fail_msg("ack %llu: \"%s\" does not say \"%s\"", (unsigned long long)request_id, text, err);
}

/* Reads the event frames on uni stream |sid| until |want| payloads came,
 * copying them (NUL-terminated) into |out|. Returns the payloads read. */
static inline size_t cf_read_events(cf *f, int64_t sid, char out[][64], size_t want)
{
    size_t got = 0;
    cf_frame fr;
    while (got < want && cf_read_frame(f, sid, &fr)) {
        if (fr.kind == FX_BODY_JSON)
            continue; /* the hello */
        assert_true(fr.kind == FX_BODY_EVENT_BATCH || fr.kind == FX_BODY_EVENT_BATCH_SHARED);
        fx_wire_event_batch e;
        fx_wire_err err;
        assert_int_equal(fx_wire_event_batch_decode(fr.flags, fr.body, fr.len, &e, &err), 0);
        for (uint32_t i = 0; i < e.count && got < want; i++, got++)
            snprintf(out[got], 64, "%.*s", (int)e.payloads[i].len, (const char *)e.payloads[i].ptr);
        fx_wire_event_batch_deinit(&e);
    }
    return got;
}

/* ---- common exchanges ---------------------------------------------------------------------- */

/* Authenticates bidi stream |sid| as |tenant| (auth_mode none) and checks
 * the answer. */
static inline void cf_auth(cf *f, int64_t sid, const char *tenant)
{
    fx_msg m;
    fx_msg_init_auth(&m, tenant, "token", true, 0);
    cf_write_msg(f, sid, &m);
    cf_settle(f);
    cf_expect_msg(f, sid, FX_MSG_AUTH_OK, NULL);
}

/* Subscribes on bidi stream |sid| (authenticated) to |tenant|/default/
 * |stream| from the latest position; the answer is not read. */
static inline void cf_subscribe(cf *f, int64_t sid, const char *tenant, const char *stream)
{
    fx_msg m = {.type = FX_MSG_SUBSCRIBE, .tenant_id = tenant, .ns = "default", .stream = stream};
    cf_write_msg(f, sid, &m);
}

/* A JSON publish of |payload| on |sid|, acked with |request_id| unless 0. */
static inline void cf_publish_json(cf *f, int64_t sid, const char *tenant, const char *stream,
                                   const char *payload, uint64_t request_id)
{
    fx_msg m = {.type = FX_MSG_PUBLISH,
                .tenant_id = tenant,
                .ns = "default",
                .stream = stream,
                .payload = {(const uint8_t *)payload, strlen(payload)},
                .request_id = request_id,
                .has_request_id = request_id != 0,
                .ack = request_id != 0 ? FX_WIRE_ACK_PER_MESSAGE : FX_WIRE_ACK_NONE,
                .has_ack = true};
    cf_write_msg(f, sid, &m);
}

/* An unacked binary publish (0x0001) of |payload| on |sid|. */
static inline void cf_publish(cf *f, int64_t sid, const char *tenant, const char *stream,
                              const char *payload)
{
    const char *pl[] = {payload};
    size_t n;
    uint8_t *p = cf_publish_frame(tenant, stream, pl, 1, false, 0, &n);
    cf_write(f, sid, p, n, false);
    free(p);
}

/* Subscribes on bidi stream |sid| (authenticated), settles and checks the
 * answer: subscribed, the request stream finished, and an event stream
 * opened whose first frame is event_stream_hello with the same id. Returns
 * the event stream's id. */
static inline int64_t cf_subscribed(cf *f, int64_t sid, const char *tenant, const char *stream)
{
    int64_t before = 0;
    while (cf_uni(f, (unsigned)before) >= 0)
        before++;
    cf_subscribe(f, sid, tenant, stream);
    cf_settle(f);
    fx_msg m;
    assert_true(cf_read_msg(f, sid, &m));
    if (m.type != FX_MSG_SUBSCRIBED)
        fail_msg("subscribe answered type %d (%s)", (int)m.type, m.message ? m.message : "");
    uint64_t id = m.subscription_id;
    fx_msg_deinit(&m);
    assert_true(cf_stream(f, sid)->tx_fin);
    int64_t uni = cf_uni(f, (unsigned)before);
    assert_true(uni >= 0);
    assert_true(cf_read_msg(f, uni, &m));
    assert_int_equal(m.type, FX_MSG_EVENT_STREAM_HELLO);
    assert_int_equal(m.subscription_id, id);
    fx_msg_deinit(&m);
    return uni;
}

#endif
