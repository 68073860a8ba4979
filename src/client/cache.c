/* libfelix cache requests (fx_cache_*, docs/cache.md "The client").
 *
 * Requests travel on a small pool of authenticated bidirectional streams
 * (cache_streams) of the client's first connection, many in flight on each:
 * the broker answers each stream's requests in request order, so every
 * stream keeps its requests in send order (a FIFO) and pairs the next answer
 * with its head, checking the request id the answer echoes. Request ids come
 * from the client-wide counter the publishes use.
 *
 * Threads and ownership:
 *  - public functions: any thread. They encode the request, take an
 *    in-flight slot (cache_inflight of them: a caller finding none waits on
 *    |slot_cv|, or gets FX_EFULL on a loop thread) and append it to the
 *    pending list, under fxc_cache.mu with the in-flight count and |closed|;
 *  - the client loop owns everything else: the send queue (requests taken
 *    from the pending list, waiting for a stream or for QUIC room), the
 *    streams and their FIFOs, the timeout list and its timer, the counters'
 *    writes. Completions (the async callback, or the wake-up of a blocked
 *    caller) run on the loop.
 *
 * A request is answered, fails, or times out (cache_timeout_ms from the
 * call) exactly once. One that timed out while on a stream stays in that
 * stream's FIFO, done, until its answer arrives (then dropped, counted) or
 * the stream ends: it keeps its in-flight slot meanwhile, so a broker that
 * stops answering bounds the memory at cache_inflight requests. An error
 * answer fails its request only; when the broker ends a stream (it does
 * after `forbidden`, `auth required` and `tenant mismatch`) the requests
 * still in flight on it fail and later ones go on a new stream. A lost
 * connection fails the requests in flight (FX_ECONNLOST); the ones not yet
 * sent wait for the reconnect (opts.reconnect), within their timeout.
 *
 * Once a cache stream's auth_ok advertised FX_FEATURE_HI_CACHE_BINARY
 * (|binary_ok|), get, put and delete are encoded as binary CACHE_REQUEST
 * frames (wire/cache_bin.h; conditional requests and versioned gets stay
 * JSON); their CACHE_ANSWERs pair with the FIFO's head like the JSON
 * answers. Requests encoded before that are JSON: a stream may carry both. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "client/client.h"
#include "wire/cache_bin.h"
#include "wire/wire.h"

#define CACHE_RESET_CODE 0x10e /* our side of a cache stream we abandon */
#define TEXT_MAX 320

enum { CQ_PUT = 1, CQ_GET, CQ_DEL, CQ_PUT_IF };

/* What an answer carried, for the completion. */
typedef struct cres {
    const void *value; /* a get's value, a delete's removed value; NULL: none */
    size_t len;
    bool applied;     /* put_if */
    uint64_t version; /* get (conditional broker) and put_if; 0: none */
} cres;

typedef struct creq creq;
typedef void (*creq_fn)(creq *r, int rv, const cres *res);

/* One request. Loop-owned once taken from the pending list. */
struct creq {
    creq *next;          /* pending list (mu), or the stream FIFO (loop) */
    creq *qnext, *qprev; /* loop: the send queue */
    creq *tnext, *tprev; /* loop: the timeout list, until completed */
    int op;
    bool versioned; /* a get that needs the entry's version */
    bool queued;    /* loop: in the send queue */
    bool on_stream; /* loop: in a stream FIFO */
    bool in_tlist;  /* loop: in the timeout list */
    bool binary;    /* encoded as a CACHE_REQUEST frame */
    bool done;      /* loop: completed (its completion ran) */
    uint64_t rid;
    uint64_t deadline_ns;
    creq_fn fn;     /* completion, on the loop */
    fx_cache_cb cb; /* the async caller's callback (fn = pub_done) */
    void *user;
    uint8_t *frame; /* the encoded request until QUIC took it */
    size_t len;
};

/* One stream of the pool. Loop. */
typedef struct cstream {
    int kind; /* SK_CACHE: its stream user pointer */
    fxc_cache *cm;
    int64_t sid; /* -1: not open */
    bool authed; /* the broker answered our auth */
    bool ending; /* the broker will end it (an error that ends the stream): no new requests */
    fx_frame_decoder dec;
    creq *head, *tail; /* sent, in send order */
} cstream;

struct fxc_cache {
    fx_client *c;
    pthread_mutex_t mu;
    pthread_cond_t slot_cv; /* mu: an in-flight slot freed, or closed */
    creq *ph, *pt;          /* mu: submitted, not yet taken by the loop */
    size_t inflight;        /* mu: requests holding a slot */
    bool closed;            /* mu: shut down; no new request */
    fx_task pump_task;
    /* loop */
    creq *qh, *qt; /* send queue */
    creq *th, *tt; /* timeout list, by deadline (submission order) */
    fx_timer timer;
    uint64_t armed_ns; /* the timer's deadline, 0: not armed */
    cstream *streams;
    size_t nstreams, rr;
    uint32_t server_features; /* from the last cache stream's auth_ok */
    uint32_t server_features_hi;
    bool have_features;
    atomic_bool binary_ok; /* loop writes, submitters read: the broker serves binary frames */
    /* counters (loop writes, any thread reads) */
    atomic_uint_fast64_t requests, answered, errors, timeouts, late, streams_opened, streams_ended;
    atomic_uint_fast64_t binary;
};

static void pump(fxc_cache *cm);

/* ---- slots and lifetime ------------------------------------------------------------ */

static void creq_free(fxc_cache *cm, creq *r)
{
    free(r->frame);
    free(r);
    pthread_mutex_lock(&cm->mu);
    cm->inflight--;
    pthread_cond_signal(&cm->slot_cv);
    pthread_mutex_unlock(&cm->mu);
}

static void tlist_unlink(fxc_cache *cm, creq *r)
{
    if (!r->in_tlist)
        return;
    if (r->tprev != NULL)
        r->tprev->tnext = r->tnext;
    else
        cm->th = r->tnext;
    if (r->tnext != NULL)
        r->tnext->tprev = r->tprev;
    else
        cm->tt = r->tprev;
    r->tnext = r->tprev = NULL;
    r->in_tlist = false;
}

static void queue_unlink(fxc_cache *cm, creq *r)
{
    if (!r->queued)
        return;
    if (r->qprev != NULL)
        r->qprev->qnext = r->qnext;
    else
        cm->qh = r->qnext;
    if (r->qnext != NULL)
        r->qnext->qprev = r->qprev;
    else
        cm->qt = r->qprev;
    r->qnext = r->qprev = NULL;
    r->queued = false;
}

/* Runs |r|'s completion once. |text| (may be NULL) is the error text, set
 * as this thread's last error for the callback. */
static void complete(fxc_cache *cm, creq *r, int rv, const char *text, const cres *res)
{
    if (r->done)
        return;
    r->done = true;
    tlist_unlink(cm, r);
    static const cres none = {0};
    if (rv != 0 && rv != FX_ENOTFOUND)
        atomic_fetch_add_explicit(&cm->errors, 1, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&cm->answered, 1, memory_order_relaxed);
    fxc_client_set_error(rv, "%s", text != NULL ? text : "");
    r->fn(r, rv, res != NULL ? res : &none);
}

/* Completes a request not on a stream and frees it. */
static void finish_unsent(fxc_cache *cm, creq *r, int rv, const char *text)
{
    queue_unlink(cm, r);
    complete(cm, r, rv, text, NULL);
    creq_free(cm, r);
}

/* ---- timeouts ---------------------------------------------------------------------- */

static void arm(fxc_cache *cm)
{
    fx_client *c = cm->c;
    if (cm->th == NULL) {
        if (cm->armed_ns != 0)
            fx_loop_timer_cancel(c->loop, &cm->timer);
        cm->armed_ns = 0;
        return;
    }
    if (cm->armed_ns == cm->th->deadline_ns)
        return;
    if (fx_loop_timer_arm(c->loop, &cm->timer, cm->th->deadline_ns) != 0) {
        FX_LOG_ERROR("client", "cache: no memory to arm the request timer");
        return;
    }
    cm->armed_ns = cm->th->deadline_ns;
}

static void timer_fire(fx_loop *l, fx_timer *t, void *user)
{
    (void)l, (void)t;
    fxc_cache *cm = user;
    cm->armed_ns = 0;
    uint64_t now = fx_now_ns();
    char text[TEXT_MAX];
    snprintf(text, sizeof(text),
             "cache request not answered within cache_timeout_ms %d (a put may or may not "
             "have been applied)",
             cm->c->o.cache_timeout_ms);
    while (cm->th != NULL && cm->th->deadline_ns <= now) {
        creq *r = cm->th;
        atomic_fetch_add_explicit(&cm->timeouts, 1, memory_order_relaxed);
        if (r->on_stream)
            complete(cm, r, FX_ETIMEDOUT, text, NULL); /* stays until answered (slot kept) */
        else
            finish_unsent(cm, r, FX_ETIMEDOUT, text);
    }
    arm(cm);
}

/* ---- streams ----------------------------------------------------------------------- */

static cconn *primary(fxc_cache *cm)
{
    return cm->c->nconns > 0 ? cm->c->conns[0] : NULL;
}

/* Fails every request in flight on |s| with |rv| (those already done are
 * dropped) and forgets the stream; |reset| abandons our side on QUIC. */
static void stream_end(cstream *s, int rv, const char *text, bool reset)
{
    fxc_cache *cm = s->cm;
    cconn *cc = primary(cm);
    if (s->sid >= 0 && cc != NULL && cc->qc != NULL) {
        fx_quic_stream_set_user(cc->qc, s->sid, NULL);
        if (reset)
            fx_quic_stream_reset(cc->qc, s->sid, CACHE_RESET_CODE);
    }
    if (s->sid >= 0)
        atomic_fetch_add_explicit(&cm->streams_ended, 1, memory_order_relaxed);
    s->sid = -1;
    s->authed = false;
    s->ending = false;
    fx_frame_decoder_deinit(&s->dec);
    creq *r = s->head;
    s->head = s->tail = NULL;
    while (r != NULL) {
        creq *nx = r->next;
        r->on_stream = false;
        complete(cm, r, rv, text, NULL);
        creq_free(cm, r);
        r = nx;
    }
}

static int stream_open(fxc_cache *cm, cstream *s, cconn *cc)
{
    int rv = fx_quic_conn_open_bidi(cc->qc, s, &s->sid);
    if (rv != 0) {
        s->sid = -1;
        return rv;
    }
    fx_frame_decoder_init(&s->dec, cm->c->o.max_frame_bytes);
    s->authed = false;
    s->ending = false;
    /* The auth goes first and the requests right behind it: the broker reads
     * them in order, so no round trip is spent waiting for auth_ok. */
    rv = fxc_client_send_auth(cc, s->sid);
    if (rv != 0) {
        fx_quic_stream_set_user(cc->qc, s->sid, NULL);
        fx_quic_stream_reset(cc->qc, s->sid, CACHE_RESET_CODE);
        fx_frame_decoder_deinit(&s->dec);
        s->sid = -1;
        return rv;
    }
    atomic_fetch_add_explicit(&cm->streams_opened, 1, memory_order_relaxed);
    return 0;
}

/* The next stream of the pool, round robin, opened if needed. Returns it,
 * or NULL with |*prv| (FX_EFULL: no room to send the auth now). */
static cstream *pick(fxc_cache *cm, cconn *cc, int *prv)
{
    int rv = FX_ESTREAMS;
    for (size_t k = 0; k < cm->nstreams; k++) {
        cstream *s = &cm->streams[cm->rr++ % cm->nstreams];
        if (s->ending)
            continue;
        if (s->sid >= 0)
            return s;
        int o = stream_open(cm, s, cc);
        if (o == 0)
            return s;
        rv = o;
        if (o == FX_EFULL)
            break;
    }
    /* Any open stream will do when no more could be opened. */
    for (size_t k = 0; k < cm->nstreams && rv != FX_EFULL; k++) {
        cstream *s = &cm->streams[k];
        if (s->sid >= 0 && !s->ending)
            return s;
    }
    *prv = rv;
    return NULL;
}

/* Takes what callers submitted into the send queue and the timeout list. */
static void take_pending(fxc_cache *cm)
{
    pthread_mutex_lock(&cm->mu);
    creq *r = cm->ph;
    cm->ph = cm->pt = NULL;
    pthread_mutex_unlock(&cm->mu);
    while (r != NULL) {
        creq *nx = r->next;
        r->next = NULL;
        r->queued = true;
        r->qprev = cm->qt;
        if (cm->qt != NULL)
            cm->qt->qnext = r;
        else
            cm->qh = r;
        cm->qt = r;
        r->in_tlist = true;
        r->tprev = cm->tt;
        if (cm->tt != NULL)
            cm->tt->tnext = r;
        else
            cm->th = r;
        cm->tt = r;
        r = nx;
    }
}

/* What |r| needs that the broker's auth_ok did not advertise (known once a
 * cache stream's auth was answered: until then such a request waits, so an
 * older broker never sees a message it would end the stream for), or NULL. */
static bool needs_feature(const creq *r)
{
    return r->op == CQ_DEL || r->op == CQ_PUT_IF || r->versioned || r->binary;
}

static const char *unserved(const fxc_cache *cm, const creq *r)
{
    if (!cm->have_features)
        return NULL;
    if (r->op == CQ_DEL && (cm->server_features & FX_FEATURE_CACHE_DELETE) == 0)
        return "cache deletes (no FEATURE_CACHE_DELETE)";
    if ((r->op == CQ_PUT_IF || r->versioned) &&
        (cm->server_features & FX_FEATURE_CACHE_CONDITIONAL) == 0)
        return "conditional cache writes (no FEATURE_CACHE_CONDITIONAL)";
    if (r->binary && (cm->server_features_hi & FX_FEATURE_HI_CACHE_BINARY) == 0)
        return "binary cache frames (encoded for the broker before a reconnect)";
    return NULL;
}

/* Sends queued requests while the connection is ready and QUIC takes them. */
static void pump(fxc_cache *cm)
{
    take_pending(cm);
    cconn *cc = primary(cm);
    if (cc == NULL || cc->qc == NULL || cc->state != CS_READY) {
        if (cc != NULL && cc->state == CS_CLOSED) {
            while (cm->qh != NULL)
                finish_unsent(cm, cm->qh, cc->close_rv, cc->close_text);
        }
        arm(cm);
        return; /* the reconnect's handshake pumps again */
    }
    while (cm->qh != NULL) {
        creq *r = cm->qh;
        int rv = 0;
        const char *missing = unserved(cm, r);
        if (missing != NULL) {
            char text[TEXT_MAX];
            snprintf(text, sizeof(text), "the broker does not serve %s", missing);
            finish_unsent(cm, r, FX_EPROTO, text);
            continue;
        }
        cstream *s = pick(cm, cc, &rv);
        if (s != NULL && needs_feature(r) && !cm->have_features)
            break; /* the auth sent on |s| answers first; then this pumps again */
        if (s == NULL) {
            if (rv == FX_EFULL)
                break; /* on_writable pumps again */
            char text[TEXT_MAX];
            snprintf(text, sizeof(text), "no cache stream could be opened: %s", fx_strerror(rv));
            finish_unsent(cm, r, rv, text);
            continue;
        }
        rv = fxc_client_send_copy(cc, s->sid, r->frame, r->len, false);
        if (rv == FX_EFULL)
            break;
        if (rv != 0) {
            /* The stream is unusable (finished, gone): end it, try another. */
            char text[TEXT_MAX];
            snprintf(text, sizeof(text), "cache stream failed: %s", fx_strerror(rv));
            stream_end(s, FX_ECONNLOST, text, true);
            continue;
        }
        queue_unlink(cm, r);
        free(r->frame);
        r->frame = NULL;
        r->on_stream = true;
        if (r->binary)
            atomic_fetch_add_explicit(&cm->binary, 1, memory_order_relaxed);
        if (s->tail != NULL)
            s->tail->next = r;
        else
            s->head = r;
        s->tail = r;
    }
    arm(cm);
}

static void pump_task(fx_loop *l, fx_task *t, void *user)
{
    (void)l, (void)t;
    pump(user);
}

/* ---- answers ----------------------------------------------------------------------- */

/* Errors after which the broker ends the stream, whatever the request. */
static bool ends_stream(int code, const char *msg)
{
    return code == FX_EFORBIDDEN || code == FX_EAUTH ||
           (msg != NULL && strstr(msg, "tenant mismatch") != NULL);
}

static void on_auth_answer(cstream *s, const fx_msg *m)
{
    if (m->type == FX_MSG_AUTH_OK || m->type == FX_MSG_OK) {
        s->authed = true;
        s->cm->have_features = true;
        s->cm->server_features = m->has_server_features ? m->server_features : 0;
        s->cm->server_features_hi = m->has_server_features_hi ? m->server_features_hi : 0;
        atomic_store_explicit(&s->cm->binary_ok,
                              (s->cm->server_features & FX_FEATURE_EXTENDED) != 0 &&
                                  (s->cm->server_features_hi & FX_FEATURE_HI_CACHE_BINARY) != 0,
                              memory_order_relaxed);
        return;
    }
    char text[TEXT_MAX];
    if (m->type == FX_MSG_ERROR) {
        snprintf(text, sizeof(text), "cache stream auth refused: %s",
                 m->message != NULL ? m->message : "");
        int code = fxc_client_map_remote(m->message);
        code = code == FX_EREMOTE ? FX_EAUTH : code;
        stream_end(s, code, text, true);
        /* Requests waiting to learn the broker's features would wait for
         * the next stream's auth, refused the same way. */
        fxc_cache *cm = s->cm;
        for (creq *r = cm->qh, *nx; r != NULL && !cm->have_features; r = nx) {
            nx = r->qnext;
            if (needs_feature(r))
                finish_unsent(cm, r, code, text);
        }
        return;
    }
    snprintf(text, sizeof(text), "unexpected %s answering a cache stream's auth",
             fx_msg_type_name(m->type));
    stream_end(s, FX_EPROTO, text, true);
}

/* Checks that |m| answers |r| (type and request id). Returns true if so;
 * else fills |text|. */
static bool pairs(const creq *r, const fx_msg *m, char *text, size_t cap)
{
    bool type_ok = false;
    switch (m->type) {
    case FX_MSG_CACHE_OK:
        type_ok = r->op == CQ_PUT;
        break;
    case FX_MSG_CACHE_VALUE:
        type_ok = r->op == CQ_GET || r->op == CQ_DEL;
        break;
    case FX_MSG_CACHE_CONDITION_RESULT:
        type_ok = r->op == CQ_PUT_IF;
        break;
    default:
        break;
    }
    if (!type_ok) {
        snprintf(text, cap, "cache answer %s does not answer request %" PRIu64,
                 fx_msg_type_name(m->type), r->rid);
        return false;
    }
    /* cache_ok's and cache_condition_result's request_id is required (no
     * has_ flag); cache_value's optional. */
    bool has_id = m->type != FX_MSG_CACHE_VALUE || m->has_request_id;
    if (!has_id || m->request_id != r->rid) {
        snprintf(text, cap,
                 "cache answer out of order: request id %" PRIu64 " where %" PRIu64 " was next",
                 has_id ? m->request_id : 0, r->rid);
        return false;
    }
    return true;
}

/* Pops |s|'s head and completes it with |rv| / |res| (a request that timed
 * out meanwhile is only dropped and counted). */
static void answer_head(cstream *s, int rv, const char *text, const cres *res)
{
    fxc_cache *cm = s->cm;
    creq *r = s->head;
    s->head = r->next;
    if (s->head == NULL)
        s->tail = NULL;
    r->next = NULL;
    r->on_stream = false;
    if (r->done) {
        atomic_fetch_add_explicit(&cm->late, 1, memory_order_relaxed);
        FX_LOG_RATELIMITED(&cm->c->late_rl, fx_now_ns(), FX_LOG_WARN, "client",
                           "cache answer for timed-out request id %llu dropped",
                           (unsigned long long)r->rid);
    } else {
        complete(cm, r, rv, text, res);
    }
    creq_free(cm, r);
}

/* Fails |s|'s head with the broker's error |msg| (a JSON error or a binary
 * answer's status 2, after which the broker ends the stream alike). */
static void answer_error(cstream *s, const char *msg)
{
    char text[TEXT_MAX];
    int code = fxc_client_map_remote(msg);
    if (code == FX_EAUTH && strstr(msg, "auth required") == NULL)
        code = FX_EREMOTE; /* "auth" inside another text is not an auth refusal */
    if (ends_stream(code, msg))
        s->ending = true; /* the broker ends it: nothing new goes on it */
    snprintf(text, sizeof(text), "cache request failed: %s", msg);
    answer_head(s, code, text, NULL);
}

/* Handles one CACHE_ANSWER (|body| of a Felix-C frame of kind 5). Returns
 * false when the stream was ended. */
static bool on_binary_answer(cstream *s, const uint8_t *body, size_t len)
{
    char text[TEXT_MAX];
    fx_wire_cache_ans a;
    fx_wire_err err = {0};
    if (fx_wire_cache_ans_decode(body, len, &a, &err) != 0) {
        snprintf(text, sizeof(text), "malformed cache answer: %s", err.msg);
        stream_end(s, FX_EPROTO, text, true);
        return false;
    }
    creq *r = s->head;
    if (!s->authed || r == NULL || !r->binary || a.request_id != r->rid) {
        snprintf(text, sizeof(text), "binary cache answer for request %" PRIu64 " where %s",
                 a.request_id, r == NULL ? "none was in flight" : "another was next");
        stream_end(s, FX_EPROTO, text, true);
        return false;
    }
    if (a.status == FX_CACHE_BIN_ERROR) {
        char msg[257]; /* the broker's texts are short; a longer one is cut */
        snprintf(msg, sizeof(msg), "%.*s", (int)(a.text.len < 256 ? a.text.len : 256),
                 (const char *)a.text.ptr);
        answer_error(s, msg);
        return true;
    }
    cres res = {0};
    int rv = 0;
    if (a.status == FX_CACHE_BIN_MISS) {
        rv = FX_ENOTFOUND;
    } else if (r->op != CQ_PUT) {
        res.value = a.value.ptr != NULL ? a.value.ptr : (const void *)"";
        res.len = a.value.len;
    }
    answer_head(s, rv, rv == FX_ENOTFOUND ? "not found" : NULL, &res);
    return true;
}

/* Handles one answer. Returns false when the stream was ended. */
static bool on_answer(cstream *s, const fx_msg *m)
{
    char text[TEXT_MAX];
    if (!s->authed) {
        on_auth_answer(s, m);
        return s->sid >= 0;
    }
    if (s->head == NULL) {
        snprintf(text, sizeof(text), "cache answer %s with no request in flight",
                 fx_msg_type_name(m->type));
        stream_end(s, FX_EPROTO, text, true);
        return false;
    }
    if (m->type == FX_MSG_ERROR) {
        answer_error(s, m->message != NULL ? m->message : "");
        return true;
    }
    if (!pairs(s->head, m, text, sizeof(text))) {
        stream_end(s, FX_EPROTO, text, true);
        return false;
    }
    cres res = {0};
    int rv = 0;
    if (m->type == FX_MSG_CACHE_VALUE) {
        if (m->has_value) {
            res.value = m->value.p != NULL ? m->value.p : (const void *)"";
            res.len = m->value.len;
            res.version = m->has_version ? m->version : 0;
        } else {
            rv = FX_ENOTFOUND;
        }
    } else if (m->type == FX_MSG_CACHE_CONDITION_RESULT) {
        res.applied = m->applied;
        res.version = m->has_version ? m->version : 0;
    }
    answer_head(s, rv, rv == FX_ENOTFOUND ? "not found" : NULL, &res);
    return true;
}

static bool on_frame(cstream *s, const fx_frame *f)
{
    if (f->flags_rv == 0 && f->kind == FX_BODY_FELIXC && f->len > 0 &&
        f->body[0] == FX_CACHE_BIN_FRAME_ANSWER)
        return on_binary_answer(s, f->body, f->len);
    if (f->flags_rv != 0 || f->kind != FX_BODY_JSON) {
        stream_end(s, FX_EPROTO, "unexpected binary frame on a cache stream", true);
        return false;
    }
    fx_msg m;
    fx_wire_err err = {0};
    int rv = fx_msg_decode(&m, f->body, f->len, &err);
    if (rv != 0) {
        char text[TEXT_MAX];
        snprintf(text, sizeof(text), "malformed cache answer: %s", err.msg);
        stream_end(s, rv == -ENOMEM ? -ENOMEM : FX_EPROTO, text, true);
        return false;
    }
    bool live = on_answer(s, &m);
    fx_msg_deinit(&m);
    return live;
}

void fxc_cache_on_data(cstream *s, const uint8_t *data, size_t len, bool fin)
{
    cconn *cc = primary(s->cm);
    fx_quic_stream_consume(cc->qc, s->sid, len);
    while (len > 0 && s->sid >= 0) {
        size_t used = 0;
        fx_frame f;
        fx_wire_err err = {0};
        int rv = fx_frame_decoder_feed(&s->dec, data, len, &used, &f, &err);
        data += used;
        len -= used;
        if (rv < 0) {
            char text[TEXT_MAX];
            snprintf(text, sizeof(text), "malformed frame on a cache stream: %s", err.msg);
            stream_end(s, FX_EPROTO, text, true);
            break;
        }
        if (rv == FX_FRAME_READY && !on_frame(s, &f))
            break;
    }
    if (fin && s->sid >= 0) {
        /* After an error that ends the stream, or a drain: what is still in
         * flight on it was not served. */
        stream_end(s, FX_ECONNLOST,
                   "the broker ended the cache stream before answering (after an error "
                   "that ends the stream, or a drain)",
                   true);
    }
    pump(s->cm); /* requests waiting for a stream */
}

void fxc_cache_on_close(cstream *s, bool reset, uint64_t code)
{
    (void)code;
    if (s->sid < 0)
        return;
    s->sid = -1; /* QUIC forgot it: nothing to reset */
    stream_end(s, FX_ECONNLOST,
               reset ? "the broker reset the cache stream" : "the cache stream closed", false);
    pump(s->cm);
}

/* ---- connection events (loop) -------------------------------------------------------- */

void fxc_cache_conn_ready(fx_client *c, cconn *cc)
{
    if (c->cache != NULL && cc == primary(c->cache))
        pump(c->cache);
}

void fxc_cache_conn_closed(fx_client *c, cconn *cc, int rv, const char *text, bool retry)
{
    fxc_cache *cm = c->cache;
    if (cm == NULL || cc != primary(cm))
        return;
    (void)rv;
    char t[TEXT_MAX];
    snprintf(t, sizeof(t), "connection lost with the cache request in flight: %s", text);
    cm->have_features = false; /* the next connection's broker says again */
    atomic_store_explicit(&cm->binary_ok, false, memory_order_relaxed);
    for (size_t i = 0; i < cm->nstreams; i++) {
        cstream *s = &cm->streams[i];
        s->sid = -1; /* went with the connection */
        stream_end(s, FX_ECONNLOST, t, false);
    }
    if (!retry) {
        while (cm->qh != NULL)
            finish_unsent(cm, cm->qh, rv, text);
    }
    arm(cm);
}

void fxc_cache_shutdown(fx_client *c)
{
    fxc_cache *cm = c->cache;
    if (cm == NULL)
        return;
    pthread_mutex_lock(&cm->mu);
    cm->closed = true;
    pthread_cond_broadcast(&cm->slot_cv);
    pthread_mutex_unlock(&cm->mu);
    take_pending(cm);
    for (size_t i = 0; i < cm->nstreams; i++)
        stream_end(&cm->streams[i], FX_ECLOSED, "client closed", true);
    while (cm->qh != NULL)
        finish_unsent(cm, cm->qh, FX_ECLOSED, "client closed");
    arm(cm);
}

/* ---- setup ------------------------------------------------------------------------- */

int fxc_cache_init(fx_client *c)
{
    fxc_cache *cm = calloc(1, sizeof(*cm));
    if (cm == NULL)
        return -ENOMEM;
    cm->c = c;
    cm->nstreams = c->o.cache_streams;
    cm->streams = calloc(cm->nstreams, sizeof(*cm->streams));
    if (cm->streams == NULL) {
        free(cm);
        return -ENOMEM;
    }
    for (size_t i = 0; i < cm->nstreams; i++)
        cm->streams[i] = (cstream){.kind = SK_CACHE, .cm = cm, .sid = -1};
    int rv = -pthread_mutex_init(&cm->mu, NULL);
    if (rv == 0) {
        rv = fxc_client_cond_init(&cm->slot_cv);
        if (rv != 0)
            pthread_mutex_destroy(&cm->mu);
    }
    if (rv != 0) {
        free(cm->streams);
        free(cm);
        return rv;
    }
    fx_task_init(&cm->pump_task, pump_task, cm);
    fx_timer_init(&cm->timer, timer_fire, cm);
    c->cache = cm;
    return 0;
}

void fxc_cache_deinit(fx_client *c)
{
    fxc_cache *cm = c->cache;
    if (cm == NULL)
        return;
    for (size_t i = 0; i < cm->nstreams; i++)
        fx_frame_decoder_deinit(&cm->streams[i].dec);
    pthread_cond_destroy(&cm->slot_cv);
    pthread_mutex_destroy(&cm->mu);
    free(cm->streams);
    free(cm);
    c->cache = NULL;
}

void fxc_cache_get_counters(fx_client *c, fxc_cache_counters *out)
{
    fxc_cache *cm = c->cache;
    *out = (fxc_cache_counters){0};
    if (cm == NULL)
        return;
    out->requests = atomic_load_explicit(&cm->requests, memory_order_relaxed);
    out->answered = atomic_load_explicit(&cm->answered, memory_order_relaxed);
    out->errors = atomic_load_explicit(&cm->errors, memory_order_relaxed);
    out->timeouts = atomic_load_explicit(&cm->timeouts, memory_order_relaxed);
    out->late = atomic_load_explicit(&cm->late, memory_order_relaxed);
    out->streams_opened = atomic_load_explicit(&cm->streams_opened, memory_order_relaxed);
    out->streams_ended = atomic_load_explicit(&cm->streams_ended, memory_order_relaxed);
    out->binary = atomic_load_explicit(&cm->binary, memory_order_relaxed);
}

/* ---- submitting (any thread) --------------------------------------------------------- */

static bool name_ok(const char *s)
{
    return s != NULL && s[0] != '\0' && fx_wire_utf8_valid((const uint8_t *)s, strlen(s));
}

static int check_names(const char *ns, const char *cache, const char *key)
{
    if (!name_ok(ns) || !name_ok(cache) || !name_ok(key))
        return fxc_client_set_error(-EINVAL,
                                    "cache namespace, cache and key must be non-empty UTF-8");
    return 0;
}

/* Encodes |m|, a get, put or delete, as a CACHE_REQUEST frame into |r|. */
static int encode_binary(fx_client *c, const fx_msg *m, creq *r)
{
    fx_wire_cache_req q = {
        .op = r->op == CQ_GET   ? FX_CACHE_BIN_GET
              : r->op == CQ_PUT ? FX_CACHE_BIN_PUT
                                : FX_CACHE_BIN_DELETE,
        .request_id = r->rid,
        .ns = {(const uint8_t *)m->ns, strlen(m->ns)},
        .cache = {(const uint8_t *)m->cache, strlen(m->cache)},
        .key = {(const uint8_t *)m->key, strlen(m->key)},
    };
    if (r->op == CQ_PUT) {
        q.ttl_ms = m->ttl_ms; /* 0: no expiry, as put_msg() made it */
        q.value = (fx_wire_slice){m->value.p, m->value.len};
    }
    size_t n = fx_wire_cache_req_frame_size(&q);
    if (n == 0 || n - FX_WIRE_HEADER_LEN > c->o.max_frame_bytes)
        return fxc_client_set_error(FX_ETOOBIG,
                                    "cache request exceeds max_frame_bytes %u (or a name "
                                    "exceeds 65535 bytes)",
                                    c->o.max_frame_bytes);
    r->frame = malloc(n);
    if (r->frame == NULL)
        return -ENOMEM;
    ssize_t w = fx_wire_cache_req_encode(&q, r->frame, n);
    if (w < 0)
        return fxc_client_set_error(-EINVAL, "cache request not encodable: %s",
                                    fx_strerror((int)w));
    r->len = n;
    r->binary = true;
    return 0;
}

/* Encodes |m| (its request id set here) into |r|: binary when the broker
 * serves it (get, put and delete; a versioned get stays JSON). */
static int encode(fx_client *c, fx_msg *m, creq *r)
{
    r->rid = atomic_fetch_add(&c->next_request_id, 1);
    m->request_id = r->rid;
    m->has_request_id = true;
    if ((r->op == CQ_GET || r->op == CQ_PUT || r->op == CQ_DEL) && !r->versioned &&
        atomic_load_explicit(&c->cache->binary_ok, memory_order_relaxed))
        return encode_binary(c, m, r);
    int rv = fx_msg_encode_frame(m, &r->frame, &r->len);
    if (rv == -ENOMEM)
        return rv;
    if (rv == FX_EWIRE_TOO_LARGE || (rv == 0 && r->len - FX_WIRE_HEADER_LEN > c->o.max_frame_bytes))
        return fxc_client_set_error(FX_ETOOBIG,
                                    "cache request of %zu bytes exceeds "
                                    "max_frame_bytes %u",
                                    r->len, c->o.max_frame_bytes);
    if (rv != 0)
        return fxc_client_set_error(-EINVAL, "cache request not encodable: %s", fx_strerror(rv));
    return 0;
}

/* Takes a slot (waiting unless |on_loop|) and hands |r| to the loop.
 * Returns 0 (the completion will run) or an error (|r| not taken). */
static int submit(fx_client *c, creq *r, bool on_loop)
{
    fxc_cache *cm = c->cache;
    uint64_t deadline = fxc_client_deadline(c->o.cache_timeout_ms);
    r->deadline_ns = deadline;
    int rv = 0;
    pthread_mutex_lock(&cm->mu);
    while (!cm->closed && cm->inflight >= c->o.cache_inflight && rv == 0) {
        if (on_loop)
            rv = FX_EFULL;
        else
            rv = fxc_client_wait_on(&cm->mu, &cm->slot_cv, deadline);
    }
    if (rv == 0 && cm->closed)
        rv = FX_ECLOSED;
    bool first = false;
    if (rv == 0) {
        cm->inflight++;
        first = cm->ph == NULL;
        if (cm->pt != NULL)
            cm->pt->next = r;
        else
            cm->ph = r;
        cm->pt = r;
    }
    pthread_mutex_unlock(&cm->mu);
    if (rv == FX_EFULL)
        return fxc_client_set_error(rv, "cache_inflight %u requests in flight",
                                    c->o.cache_inflight);
    if (rv == FX_ETIMEDOUT)
        return fxc_client_set_error(rv, "no cache request slot freed within cache_timeout_ms %d",
                                    c->o.cache_timeout_ms);
    if (rv != 0)
        return fxc_client_set_error(rv, "client closed");
    atomic_fetch_add_explicit(&cm->requests, 1, memory_order_relaxed);
    /* Closed meanwhile: the close path fails the pending list, this one too. */
    if (first)
        (void)fxc_client_post(c, &cm->pump_task);
    return 0;
}

/* ---- completions --------------------------------------------------------------------- */

static void pub_done(creq *r, int rv, const cres *res)
{
    r->cb(r->user, rv, res->value, res->len);
}

/* A blocked caller's request. */
typedef struct swait {
    fxc_cache *cm;
    pthread_cond_t cv;
    bool done;
    int rv;
    char text[TEXT_MAX];
    bool alloc; /* copy into a new buffer, else into |buf| */
    void *buf;
    size_t cap;
    void *out; /* alloc: the copy */
    size_t len;
    bool found;
    bool applied;
    uint64_t version;
} swait;

static void sync_done(creq *r, int rv, const cres *res)
{
    swait *w = r->user;
    fxc_cache *cm = w->cm;
    char text[TEXT_MAX];
    fx_client_last_error(NULL, text, sizeof(text));
    void *copy = NULL;
    if (rv == 0 && res->value != NULL) {
        if (w->alloc) {
            copy = malloc(res->len > 0 ? res->len : 1);
            if (copy == NULL)
                rv = -ENOMEM;
            else
                memcpy(copy, res->value, res->len);
        } else if (res->len <= w->cap) {
            if (res->len > 0)
                memcpy(w->buf, res->value, res->len);
        } else {
            rv = FX_ETOOBIG;
            snprintf(text, sizeof(text), "cache value of %zu bytes does not fit %zu", res->len,
                     w->cap);
        }
    }
    pthread_mutex_lock(&cm->mu);
    w->rv = rv;
    snprintf(w->text, sizeof(w->text), "%s", text);
    w->out = copy;
    w->len = res->len;
    w->found = res->value != NULL;
    w->applied = res->applied;
    w->version = res->version;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&cm->mu);
}

/* Runs |m| as a request (|versioned|: a get that needs the version): waits
 * and fills |w|, or with |w| NULL queues it for |cb|. */
static int run_v(fx_client *c, fx_msg *m, int op, bool versioned, swait *w, fx_cache_cb cb,
                 void *user)
{
    bool on_loop = fxc_rt_is_current();
    if (w != NULL && on_loop)
        return FX_EWOULDBLOCK_LOOP;
    creq *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->op = op;
    r->versioned = versioned;
    int rv = encode(c, m, r);
    if (rv != 0) {
        free(r->frame);
        free(r);
        return rv;
    }
    if (w != NULL) {
        r->fn = sync_done;
        r->user = w;
        w->cm = c->cache;
        rv = fxc_client_cond_init(&w->cv);
        if (rv != 0) {
            free(r->frame);
            free(r);
            return rv;
        }
    } else {
        r->fn = pub_done;
        r->cb = cb;
        r->user = user;
    }
    fxc_client_ref(c);
    rv = submit(c, r, on_loop);
    if (rv != 0) {
        free(r->frame);
        free(r);
    } else if (w != NULL) {
        fxc_cache *cm = c->cache;
        pthread_mutex_lock(&cm->mu);
        while (!w->done)
            pthread_cond_wait(&w->cv, &cm->mu);
        pthread_mutex_unlock(&cm->mu);
        rv = w->rv;
        if (rv != 0)
            fxc_client_set_error(rv, "%s", w->text);
    }
    if (w != NULL)
        pthread_cond_destroy(&w->cv);
    fxc_client_unref(c);
    return rv;
}

static int run(fx_client *c, fx_msg *m, int op, swait *w, fx_cache_cb cb, void *user)
{
    return run_v(c, m, op, false, w, cb, user);
}

/* ---- public calls ---------------------------------------------------------------------- */

static void init_msg(fx_msg *m, fx_msg_type type, fx_client *c, const char *ns, const char *cache,
                     const char *key)
{
    *m = (fx_msg){.type = type, .tenant_id = c->o.tenant, .ns = ns, .cache = cache, .key = key};
}

static int put_msg(fx_client *c, fx_msg *m, const char *ns, const char *cache, const char *key,
                   const void *value, size_t len, uint64_t ttl_ms)
{
    if (c == NULL || (value == NULL && len > 0))
        return -EINVAL;
    int rv = check_names(ns, cache, key);
    if (rv != 0)
        return rv;
    if (ttl_ms > FX_MSG_INT_MAX)
        return fxc_client_set_error(-EINVAL, "ttl_ms above %" PRIu64, FX_MSG_INT_MAX);
    /* base64 makes 4 bytes of 3: a value that cannot fit a frame is refused
     * before it is encoded. */
    if (len / 3 * 4 > c->o.max_frame_bytes)
        return fxc_client_set_error(FX_ETOOBIG,
                                    "cache value of %zu bytes exceeds what "
                                    "max_frame_bytes %u carries",
                                    len, c->o.max_frame_bytes);
    init_msg(m, FX_MSG_CACHE_PUT, c, ns, cache, key);
    m->value = (fx_msg_bytes){value, len};
    m->has_value = true;
    m->ttl_ms = ttl_ms;
    m->has_ttl_ms = ttl_ms != 0; /* 0: no expiry, written as null */
    return 0;
}

int fx_cache_put(fx_client *c, const char *ns, const char *cache, const char *key,
                 const void *value, size_t len, uint64_t ttl_ms)
{
    fx_msg m;
    int rv = put_msg(c, &m, ns, cache, key, value, len, ttl_ms);
    if (rv != 0)
        return rv;
    swait w = {0};
    return run(c, &m, CQ_PUT, &w, NULL, NULL);
}

int fx_cache_put_async(fx_client *c, const char *ns, const char *cache, const char *key,
                       const void *value, size_t len, uint64_t ttl_ms, fx_cache_cb cb, void *user)
{
    if (cb == NULL)
        return -EINVAL;
    fx_msg m;
    int rv = put_msg(c, &m, ns, cache, key, value, len, ttl_ms);
    if (rv != 0)
        return rv;
    return run(c, &m, CQ_PUT, NULL, cb, user);
}

static int get_common(fx_client *c, const char *ns, const char *cache, const char *key, swait *w,
                      fx_cache_cb cb, void *user)
{
    if (c == NULL)
        return -EINVAL;
    int rv = check_names(ns, cache, key);
    if (rv != 0)
        return rv;
    fx_msg m;
    init_msg(&m, FX_MSG_CACHE_GET, c, ns, cache, key);
    return run(c, &m, CQ_GET, w, cb, user);
}

int fx_cache_get(fx_client *c, const char *ns, const char *cache, const char *key, void *buf,
                 size_t cap, size_t *len)
{
    if (len == NULL || (buf == NULL && cap > 0))
        return -EINVAL;
    *len = 0;
    swait w = {.buf = buf, .cap = cap};
    int rv = get_common(c, ns, cache, key, &w, NULL, NULL);
    if (rv == 0 || rv == FX_ETOOBIG)
        *len = w.len;
    return rv;
}

int fx_cache_get_alloc(fx_client *c, const char *ns, const char *cache, const char *key,
                       void **value, size_t *len)
{
    if (value == NULL || len == NULL)
        return -EINVAL;
    *value = NULL;
    *len = 0;
    swait w = {.alloc = true};
    int rv = get_common(c, ns, cache, key, &w, NULL, NULL);
    if (rv == 0) {
        *value = w.out;
        *len = w.len;
    } else {
        free(w.out);
    }
    return rv;
}

int fx_cache_get_async(fx_client *c, const char *ns, const char *cache, const char *key,
                       fx_cache_cb cb, void *user)
{
    if (cb == NULL)
        return -EINVAL;
    return get_common(c, ns, cache, key, NULL, cb, user);
}

/* ---- deletes and conditional writes ---------------------------------------------------- */

static int del_common(fx_client *c, const char *ns, const char *cache, const char *key, swait *w,
                      fx_cache_cb cb, void *user)
{
    if (c == NULL)
        return -EINVAL;
    int rv = check_names(ns, cache, key);
    if (rv != 0)
        return rv;
    fx_msg m;
    init_msg(&m, FX_MSG_CACHE_DELETE, c, ns, cache, key);
    return run(c, &m, CQ_DEL, w, cb, user);
}

int fx_cache_delete(fx_client *c, const char *ns, const char *cache, const char *key, bool *existed)
{
    if (existed != NULL)
        *existed = false;
    swait w = {.alloc = true};
    int rv = del_common(c, ns, cache, key, &w, NULL, NULL);
    free(w.out); /* the removed value: not wanted here */
    if (rv == FX_ENOTFOUND)
        return 0;
    if (rv == 0 && existed != NULL)
        *existed = true;
    return rv;
}

int fx_cache_delete_async(fx_client *c, const char *ns, const char *cache, const char *key,
                          fx_cache_cb cb, void *user)
{
    if (cb == NULL)
        return -EINVAL;
    return del_common(c, ns, cache, key, NULL, cb, user);
}

int fx_cache_put_if(fx_client *c, const char *ns, const char *cache, const char *key,
                    const void *value, size_t len, uint64_t ttl_ms, bool if_absent,
                    uint64_t if_version, bool *applied, uint64_t *version)
{
    if (applied != NULL)
        *applied = false;
    if (version != NULL)
        *version = 0;
    if (if_absent == (if_version != 0))
        return fxc_client_set_error(-EINVAL, "conditional put: set exactly one of if_absent "
                                             "and if_version");
    if (if_version > FX_MSG_INT_MAX)
        return -EINVAL;
    fx_msg m;
    int rv = put_msg(c, &m, ns, cache, key, value, len, ttl_ms);
    if (rv != 0)
        return rv;
    m.type = FX_MSG_CACHE_PUT_IF;
    m.condition = if_absent
                      ? (fx_msg_condition){.kind = FX_MSG_CONDITION_ABSENT}
                      : (fx_msg_condition){.kind = FX_MSG_CONDITION_VERSION, .version = if_version};
    swait w = {0};
    rv = run(c, &m, CQ_PUT_IF, &w, NULL, NULL);
    if (rv == 0) {
        if (applied != NULL)
            *applied = w.applied;
        if (version != NULL)
            *version = w.version;
    }
    return rv;
}

int fx_cache_get_versioned(fx_client *c, const char *ns, const char *cache, const char *key,
                           void **value, size_t *len, uint64_t *version)
{
    if (c == NULL || value == NULL || len == NULL)
        return -EINVAL;
    *value = NULL;
    *len = 0;
    if (version != NULL)
        *version = 0;
    int rv = check_names(ns, cache, key);
    if (rv != 0)
        return rv;
    fx_msg m;
    init_msg(&m, FX_MSG_CACHE_GET, c, ns, cache, key);
    swait w = {.alloc = true};
    rv = run_v(c, &m, CQ_GET, true, &w, NULL, NULL);
    if (rv == 0 && w.version == 0) {
        free(w.out);
        return fxc_client_set_error(FX_EPROTO, "the broker sent no version with the value");
    }
    if (rv != 0) {
        free(w.out);
        return rv;
    }
    *value = w.out;
    *len = w.len;
    if (version != NULL)
        *version = w.version;
    return 0;
}
