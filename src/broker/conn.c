/* Client connections and their bidi streams: the QUIC callbacks, frame
 * decoding with explicit credit (bytes are credited once the frame they
 * belong to is handled; a publish parked at ingress withholds credit for
 * everything behind it), the checkpoint-3 reservation taken at each frame
 * header and the frame read timeout, auth and tenant binding, dispatch to publish.c and
 * subscribe.c, and the in-order reply FIFO of each stream, the permission
 * check of every publish and subscribe, and the max_connections limit. Runs
 * on the loop of the connection's endpoint. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/broker_internal.h"
#include "felix/error.h"

/* ---- references ---------------------------------------------------------- */

void fxb_conn_ref(fxb_conn *c)
{
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

void fxb_conn_unref(fxb_conn *c)
{
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
        return;
    fxb_conn_lanes_deinit(c);
    fx_budget_deinit(&c->budget);
    free(c);
}

void fxb_bidi_unref(fxb_bidi *s)
{
    if (--s->refs > 0)
        return;
    fx_frame_decoder_deinit(&s->dec);
    fx_stream_handle_unref(s->h);
    const fx_broker_auth *a = &s->conn->b->o.auth;
    if (s->auth_ctx != NULL && a->release != NULL)
        a->release(a->user, s->auth_ctx);
    free(s->pend);
    fxb_conn_unref(s->conn);
    free(s);
}

static void resv_cancel(fxb_bidi *s);

/* ---- replies ---------------------------------------------------------------- */

int fxb_msg_frame(const fx_msg *m, fx_buf **pframe)
{
    uint8_t *p;
    size_t n;
    int rv = fx_msg_encode_frame(m, &p, &n);
    if (rv != 0)
        return rv;
    rv = fx_buf_new_copy(pframe, p, n);
    free(p);
    return rv;
}

void fxb_reply_push(fxb_bidi *s, fxb_reply *r)
{
    r->owner = s;
    if (s->rtail != NULL)
        s->rtail->next = r;
    else
        s->rhead = r;
    s->rtail = r;
    if (++s->nreplies >= FXB_REPLIES_HIGH)
        s->replies_full = true;
}

/* Reading resumes once the reply queue has drained to the low mark (posted,
 * so a flush inside the input path never re-enters it). */
static void replies_resume(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_bidi *s = user;
    bool closed = s->closed;
    if (!closed)
        fxb_bidi_continue(s);
    fxb_bidi_unref(s); /* the post's reference */
}

static void replies_drained(fxb_bidi *s)
{
    if (!s->replies_full || s->nreplies > FXB_REPLIES_LOW)
        return;
    s->replies_full = false;
    s->refs++;
    if (!fx_loop_post(s->conn->loop, &s->replies_task))
        s->refs--; /* already pending: that run resumes reading */
}

void fxb_bidi_reply_frame(fxb_bidi *s, fx_buf *frame)
{
    fxb_reply *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        fx_buf_unref(frame);
        fxb_bidi_fail(s, "out of memory for a reply");
        return;
    }
    atomic_init(&r->refs, 1);
    r->frame = frame;
    atomic_init(&r->done, true);
    fxb_reply_push(s, r);
    fxb_bidi_flush(s);
}

int fxb_bidi_reply_msg(fxb_bidi *s, const fx_msg *m)
{
    fx_buf *f;
    int rv = fxb_msg_frame(m, &f);
    if (rv != 0) {
        FX_LOG_ERROR("broker", "reply encoding failed: %s", fx_strerror(rv));
        fxb_bidi_fail(s, "reply encoding failed");
        return rv;
    }
    fxb_bidi_reply_frame(s, f);
    return 0;
}

void fxb_bidi_error(fxb_bidi *s, const char *text, bool end)
{
    fx_msg m;
    fx_msg_init_error(&m, text);
    if (fxb_bidi_reply_msg(s, &m) == 0 && end)
        fxb_bidi_end(s);
}

void fxb_bidi_end(fxb_bidi *s)
{
    s->ended = true;
    fxb_bidi_flush(s);
}

void fxb_bidi_fail(fxb_bidi *s, const char *why)
{
    if (s->closed)
        return;
    FX_COUNTER_INC(broker_stream_errors);
    FX_LOG_DEBUG("broker", "conn %llu stream %lld reset: %s", (unsigned long long)s->conn->id,
                 (long long)s->sid, why);
    s->ended = true;
    resv_cancel(s); /* a reset frame will not complete */
    if (s->conn->qc != NULL)
        fx_quic_stream_reset(s->conn->qc, s->sid, FXB_CODE_MALFORMED);
}

/* Sends done replies from the head; stops at a pending commit ack or when the
 * connection's unacked cap refuses (on_writable flushes again). Finishes the
 * stream when it has ended and nothing is left to say. */
void fxb_bidi_flush(fxb_bidi *s)
{
    fxb_conn *c = s->conn;
    while (!s->closed && c->qc != NULL && s->rhead != NULL &&
           atomic_load_explicit(&s->rhead->done, memory_order_acquire)) {
        fxb_reply *r = s->rhead;
        if (r->frame == NULL) {
            fxb_bidi_fail(s, "a reply could not be encoded");
            return;
        }
        int rv = fx_quic_stream_send(c->qc, s->sid, r->frame, 0, fx_buf_len(r->frame), false);
        if (rv == FX_EFULL) {
            c->want_writable = true;
            return;
        }
        if (rv != 0)
            break; /* the stream is gone: on_stream_close cleans up */
        s->rhead = r->next;
        if (s->rhead == NULL)
            s->rtail = NULL;
        s->nreplies--;
        r->owner = NULL;
        fxb_reply_unref(r);
    }
    replies_drained(s);
    /* Input still buffered behind a park (or being fed from that buffer)
     * holds the FIN too: the client's FIN is answered only once every frame
     * it sent before it was handled. */
    bool idle = s->rhead == NULL && s->parked == NULL && !s->resv_wait && !s->sub_pending &&
                s->pend_len == 0;
    if (!s->closed && !s->fin_sent && c->qc != NULL && idle && (s->ended || s->peer_fin)) {
        s->fin_sent = true;
        fx_quic_stream_shutdown(c->qc, s->sid);
    }
}

/* ---- permissions and name resolution, once per QUIC stream ------------------- */

/* One cause each, so a flood of one kind never hides the other. */
static fx_ratelimit auth_failed_rl = FX_RATELIMIT_INIT;
static fx_ratelimit forbidden_rl = FX_RATELIMIT_INIT;

/* Asks the authenticator about |action| on the NUL-terminated |names|;
 * always true with auth_mode none (the tenant was checked by the caller). */
static bool ask_allows(fxb_bidi *s, fx_broker_auth_action action,
                       char names[3][FX_REGISTRY_NAME_MAX + 1])
{
    const fx_broker_auth *a = &s->conn->b->o.auth;
    if (a->verify == NULL)
        return true;
    if (s->auth_ctx == NULL || a->allows == NULL)
        return false;
    return a->allows(a->user, s->auth_ctx, action, names[0], names[1], names[2]);
}

/* The cached answer for |action| on the names in s->hkey, asked once. */
static bool permits(fxb_bidi *s, fx_broker_auth_action action,
                    char names[3][FX_REGISTRY_NAME_MAX + 1])
{
    uint8_t bit = (uint8_t)(1u << action);
    if ((s->perm_known & bit) == 0) {
        if (ask_allows(s, action, names))
            s->perm_ok |= bit;
        s->perm_known |= bit;
    }
    return (s->perm_ok & bit) != 0;
}

static int forbid(fxb_bidi *s, fx_broker_auth_action action,
                  char names[3][FX_REGISTRY_NAME_MAX + 1], fx_registry_err *err)
{
    FX_COUNTER_INC(broker_auth_forbidden);
    FX_LOG_RATELIMITED(&forbidden_rl, fx_loop_now(s->conn->loop), FX_LOG_WARN, "broker",
                       "conn %llu stream %lld: %s to %s/%s/%s forbidden: the token lacks the "
                       "permission",
                       (unsigned long long)s->conn->id, (long long)s->sid,
                       action == FX_BROKER_AUTH_PUBLISH ? "publish" : "subscribe", names[0],
                       names[1], names[2]);
    err->code = FX_EFORBIDDEN;
    snprintf(err->msg, sizeof(err->msg), "forbidden");
    return FX_EFORBIDDEN;
}

/* Splits the names into |names| and the cache key "t/ns/stream/" |key|
 * (|*pn| bytes). Returns false when a name cannot be a stream name (too
 * long, or holding '/' or NUL): the registry then refuses it, uncached. */
static bool split_names(const fx_wire_slice parts[3], char names[3][FX_REGISTRY_NAME_MAX + 1],
                        char *key, size_t *pn)
{
    size_t n = 0;
    for (int i = 0; i < 3; i++) {
        if (parts[i].len > FX_REGISTRY_NAME_MAX || memchr(parts[i].ptr, '/', parts[i].len) ||
            memchr(parts[i].ptr, '\0', parts[i].len))
            return false;
        memcpy(names[i], parts[i].ptr, parts[i].len);
        names[i][parts[i].len] = '\0';
        memcpy(key + n, parts[i].ptr, parts[i].len);
        n += parts[i].len;
        key[n++] = '/';
    }
    *pn = n;
    return true;
}

int fxb_bidi_resolve(fxb_bidi *s, fx_broker_auth_action action, fx_wire_slice tenant,
                     fx_wire_slice ns, fx_wire_slice stream, fx_stream_handle **ph,
                     fx_registry_err *err)
{
    char key[sizeof(s->hkey)];
    char names[3][FX_REGISTRY_NAME_MAX + 1];
    size_t n;
    fx_wire_slice parts[3] = {tenant, ns, stream};
    if (!split_names(parts, names, key, &n))
        return fx_registry_resolve(s->conn->b->reg, tenant, ns, stream, ph, err);
    if (n != s->hkey_len || memcmp(key, s->hkey, n) != 0) {
        fx_stream_handle_unref(s->h);
        s->h = NULL;
        memcpy(s->hkey, key, n);
        s->hkey_len = n;
        s->perm_known = s->perm_ok = 0;
    }
    /* Before the registry: a refused client must not auto-create streams. */
    if (!permits(s, action, names))
        return forbid(s, action, names, err);
    if (s->h != NULL && fx_stream_handle_is_active(s->h)) {
        *ph = s->h;
        return 0;
    }
    fx_stream_handle *h;
    int rv = fx_registry_resolve(s->conn->b->reg, tenant, ns, stream, &h, err);
    if (rv != 0)
        return rv;
    fx_stream_handle_unref(s->h);
    s->h = h;
    *ph = h;
    return 0;
}

/* ---- dispatch ---------------------------------------------------------------- */

static bool is_server_only(fx_msg_type t)
{
    switch (t) {
    case FX_MSG_AUTH_OK:
    case FX_MSG_SUBSCRIBED:
    case FX_MSG_EVENT_STREAM_HELLO:
    case FX_MSG_EVENT:
    case FX_MSG_EVENT_BATCH:
    case FX_MSG_CACHE_VALUE:
    case FX_MSG_CACHE_OK:
    case FX_MSG_PUBLISH_OK:
    case FX_MSG_PUBLISH_ERROR:
    case FX_MSG_OK:
    case FX_MSG_SUBSCRIBE_CURSOR_ERROR:
        return true;
    default:
        return false;
    }
}

/* Refuses the stream's auth: the client gets "auth failed" and nothing
 * more; the log says why. */
static void auth_refuse(fxb_bidi *s, const char *tenant, const char *why)
{
    FX_COUNTER_INC(broker_auth_failed);
    FX_LOG_RATELIMITED(&auth_failed_rl, fx_loop_now(s->conn->loop), FX_LOG_WARN, "broker",
                       "conn %llu stream %lld tenant %.*s: auth failed: %s",
                       (unsigned long long)s->conn->id, (long long)s->sid, 64, tenant, why);
    fxb_bidi_error(s, "auth failed", true);
}

/* Verifies the token with the authenticator (auth_mode jwt). Returns true
 * and keeps the claims on |s|, or refuses. */
static bool verify_token(fxb_bidi *s, const fx_msg *m)
{
    const fx_broker_auth *a = &s->conn->b->o.auth;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* token times are Unix seconds */
    const char *token = m->token != NULL ? m->token : "";
    char why[256] = "";
    void *ctx = NULL;
    if (a->verify(a->user, m->tenant_id, token, strlen(token), (int64_t)ts.tv_sec, &ctx, why,
                  sizeof(why)) != 0) {
        auth_refuse(s, m->tenant_id, why[0] ? why : "token refused");
        return false;
    }
    s->auth_ctx = ctx;
    return true;
}

static void on_auth(fxb_bidi *s, const fx_msg *m)
{
    if (s->authed) {
        fxb_bidi_error(s, "auth already established", true);
        return;
    }
    size_t n = strlen(m->tenant_id);
    if (n > FX_REGISTRY_NAME_MAX) {
        auth_refuse(s, m->tenant_id, "tenant name too long");
        return;
    }
    /* auth_mode none: any token; the stream is bound to the tenant named. */
    if (s->conn->b->o.auth.verify != NULL && !verify_token(s, m))
        return;
    memcpy(s->tenant, m->tenant_id, n + 1);
    s->authed = true;
    fx_msg r;
    fx_msg_init_auth_reply(&r, m, FXB_SERVER_FLAGS);
    fxb_bidi_reply_msg(s, &r);
}

/* Checks auth and tenant for a publish or subscribe; replies and ends the
 * stream when refused. */
static bool allowed(fxb_bidi *s, const char *tenant, size_t len)
{
    if (!s->authed) {
        fxb_bidi_error(s, "auth required", true);
        return false;
    }
    if (strlen(s->tenant) != len || memcmp(s->tenant, tenant, len) != 0) {
        fxb_bidi_error(s, "tenant mismatch", true);
        return false;
    }
    return true;
}

/* Returns 0 to go on, 1 when parked, -1 when the stream stops reading. */
static int on_json(fxb_bidi *s, const fx_frame *f)
{
    fx_msg m;
    fx_wire_err err;
    if (fx_msg_decode(&m, f->body, f->len, &err) != 0) {
        fxb_bidi_fail(s, err.msg);
        return -1;
    }
    int rv = 0;
    switch (m.type) {
    case FX_MSG_AUTH:
        on_auth(s, &m);
        break;
    case FX_MSG_PUBLISH:
    case FX_MSG_PUBLISH_BATCH:
        if (allowed(s, m.tenant_id, strlen(m.tenant_id)))
            rv = fxb_publish_json(s, &m);
        break;
    case FX_MSG_SUBSCRIBE:
        if (allowed(s, m.tenant_id, strlen(m.tenant_id)))
            fxb_subscribe(s, &m);
        break;
    case FX_MSG_ERROR:
        fxb_bidi_end(s);
        break;
    default:
        if (is_server_only(m.type))
            fxb_bidi_error(s, "unexpected message type", true);
        else
            fxb_bidi_error(s, "unsupported message type", false);
        break;
    }
    fx_msg_deinit(&m);
    return s->ended ? -1 : rv;
}

static int on_frame(fxb_bidi *s, const fx_frame *f)
{
    if (f->flags_rv != 0) {
        fxb_bidi_error(s, "unsupported frame flags", false);
        return 0;
    }
    switch (f->kind) {
    case FX_BODY_JSON:
        return on_json(s, f);
    case FX_BODY_PUBLISH_BATCH:
    case FX_BODY_PUBLISH_BATCH_ACKED:
        if (!s->authed) {
            fxb_bidi_error(s, "auth required", true);
            return -1;
        }
        return fxb_publish_binary(s, f);
    default:
        fxb_bidi_error(s, "unexpected frame kind", true);
        return -1;
    }
}

/* ---- input and credit ------------------------------------------------------------ */

static void credit(fxb_bidi *s)
{
    if (s->credit_owed > 0 && s->conn->qc != NULL)
        fx_quic_stream_consume(s->conn->qc, s->sid, s->credit_owed);
    s->credit_owed = 0;
}

/* ---- the checkpoint-3 reservation of each frame ------------------------------------ *
 * A header announcing L body bytes takes L from the connection's share and the
 * process-wide budget before any body byte is consumed or credited. When the
 * budget is exhausted the stream stops reading until the bytes are granted:
 * the budget is memory, and withholding credit while waiting for it is the
 * brake. Whatever policy the frame's publish has is applied at admission to
 * the bytes it needs beyond the reservation (its slice table). Since every
 * partial frame holds a reservation, the connection's share also caps the
 * partial frames of all its streams. From the reservation on, the body must
 * arrive within frame_read_timeout, or the stream is reset. */

/* True while the stream reads nothing: a publish parked at admission, a
 * header waiting for its bytes, or too many replies not yet written. */
static bool blocked(const fxb_bidi *s)
{
    return s->parked != NULL || s->resv_wait || s->replies_full;
}

static uint64_t frame_timeout_ns(const fx_broker *b)
{
    return b->o.frame_read_timeout_ns != 0 ? b->o.frame_read_timeout_ns
                                           : FXB_FRAME_READ_TIMEOUT_DEFAULT_NS;
}

/* The bytes of the frame being read are held: count them, start its clock. */
static void resv_held(fxb_bidi *s)
{
    FX_GAUGE_ADD(ingress_reserved_bytes, (int64_t)s->resv.n);
    fx_loop *l = s->conn->loop;
    if (fx_loop_timer_arm(l, &s->frame_timer, fx_loop_now(l) + frame_timeout_ns(s->conn->b)) != 0)
        fxb_bidi_fail(s, "out of memory for a frame timer");
}

/* Gives back the reservation of the frame just handled, if no job took it.
 * Never while a grant may be filling |s->resv| on another thread. */
static void resv_release(fxb_bidi *s)
{
    if (s->resv_wait || s->resv.budget == NULL)
        return;
    FX_GAUGE_SUB(ingress_reserved_bytes, (int64_t)s->resv.n);
    fx_permit_release(&s->resv);
}

void fxb_bidi_adopt_reservation(fxb_bidi *s, fx_ingress_req *r)
{
    if (s->resv.budget == NULL)
        return;
    FX_GAUGE_SUB(ingress_reserved_bytes, (int64_t)s->resv.n);
    fx_ingress_req_adopt(r, &s->resv);
}

/* Runs on the thread that freed the bytes (a worker) or closed the budget. */
static void on_resv_granted(void *user, int rv)
{
    fxb_bidi *s = user;
    s->resv_rv = rv;
    fx_loop_post(s->conn->loop, &s->resv_task);
}

/* Reserves |n| bytes for the frame whose header was just read. Returns 0
 * (held: read on), 1 (waiting: stop reading) or -1 (|s| failed). */
static int reserve(fxb_bidi *s, uint16_t flags, size_t n)
{
    fx_budget *b = &s->conn->budget;
    s->resv_flags = flags;
    int rv = fx_budget_try_acquire(b, n, &s->resv);
    if (rv == FX_EFULL) {
        s->resv_wait = true; /* before acquire: the grant may come at once */
        s->refs++;           /* for |resv_task| */
        rv = fx_budget_acquire(b, n, &s->resv_w, &s->resv);
        if (rv == -EAGAIN) {
            FX_COUNTER_INC(ingress_reserve_waited);
            return 1;
        }
        s->resv_wait = false;
        s->refs--;
    }
    if (rv == 0) {
        resv_held(s);
        return s->ended ? -1 : 0;
    }
    fxb_bidi_fail(s, rv == FX_ETOOBIG ? "frame larger than the connection's publish byte share"
                                      : "publish byte budget closed");
    return -1;
}

static void resv_resume(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_bidi *s = user;
    if (s->resv_wait) { /* else bidi_close cancelled the wait first */
        s->resv_wait = false;
        if (s->resv_rv != 0)
            fxb_bidi_fail(s, "publish byte budget closed");
        else if (s->ended)
            fx_permit_release(&s->resv); /* the grant raced the end or close */
        else
            resv_held(s);
        if (!s->closed)
            fxb_bidi_continue(s);
    }
    fxb_bidi_unref(s);
}

static fx_ratelimit frame_timeout_rl = FX_RATELIMIT_INIT;

static void on_frame_timeout(fx_loop *l, fx_timer *t, void *user)
{
    (void)t;
    fxb_bidi *s = user;
    if (s->closed || s->ended)
        return;
    FX_COUNTER_INC(broker_frame_timeouts);
    FX_LOG_RATELIMITED(&frame_timeout_rl, fx_loop_now(l), FX_LOG_WARN, "broker",
                       "conn %llu stream %lld reset: a frame body of %zu bytes did not arrive "
                       "within frame_read_timeout_ms",
                       (unsigned long long)s->conn->id, (long long)s->sid,
                       (size_t)fx_frame_decoder_announced(&s->dec));
    resv_release(s);
    fxb_bidi_fail(s, "frame read timed out");
}

/* Gives back the reservation, or cancels its wait, as the stream goes away. */
static void resv_cancel(fxb_bidi *s)
{
    fx_loop_timer_cancel(s->conn->loop, &s->frame_timer);
    if (!s->resv_wait) {
        resv_release(s);
        return;
    }
    if (fx_budget_cancel(&s->conn->budget, &s->resv_w)) { /* nothing held */
        s->resv_wait = false;
        s->refs--; /* |resv_task| will not run; the caller still holds |s| */
    }
    /* else the grant is on its way: resv_resume releases it */
}

/* ---- input and credit (continued) ------------------------------------------------- */

/* Feeds |data| to the decoder until it is used up, the stream stops reading,
 * or a publish or a reservation parks. Returns the bytes taken. */
static size_t feed(fxb_bidi *s, const uint8_t *data, size_t len)
{
    size_t off = 0;
    while (off < len && !s->ended && !blocked(s)) {
        size_t used = 0;
        fx_frame f;
        fx_wire_err err;
        int rv = fx_frame_decoder_feed(&s->dec, data + off, len - off, &used, &f, &err);
        off += used;
        s->credit_owed += used;
        if (rv < 0) {
            fxb_bidi_fail(s, err.msg);
            break;
        }
        if (rv == FX_FRAME_HEADER) {
            if (reserve(s, f.hdr.flags, f.hdr.length) != 0)
                break;
            continue;
        }
        if (rv != FX_FRAME_READY)
            continue;
        fx_loop_timer_cancel(s->conn->loop, &s->frame_timer);
        rv = on_frame(s, &f);
        resv_release(s); /* a frame that made no job (auth, subscribe, error) */
        if (rv != 0)
            break;
        credit(s);
    }
    return off;
}

static int pend_append(fxb_bidi *s, const uint8_t *p, size_t n)
{
    if (n == 0)
        return 0;
    if (s->pend_len + n > s->pend_cap) {
        size_t cap = s->pend_cap ? s->pend_cap : 4096;
        while (cap < s->pend_len + n)
            cap *= 2;
        uint8_t *q = realloc(s->pend, cap);
        if (q == NULL)
            return -ENOMEM;
        s->pend = q;
        s->pend_cap = cap;
    }
    memcpy(s->pend + s->pend_len, p, n);
    s->pend_len += n;
    return 0;
}

/* Consumes input while nothing is parked; what a park leaves is kept. */
static void input(fxb_bidi *s, const uint8_t *data, size_t len)
{
    size_t used = feed(s, data, len);
    if (s->ended) {
        s->credit_owed += len - used; /* discarded input still frees the window */
        credit(s);
        return;
    }
    if (!blocked(s)) {
        credit(s); /* bytes of a partial frame: covered by its reservation */
        return;
    }
    if (pend_append(s, data + used, len - used) != 0)
        fxb_bidi_fail(s, "out of memory buffering input");
}

/* After the client's FIN, once all its input is processed: a frame cut off
 * by the FIN is malformed. */
static void check_fin(fxb_bidi *s)
{
    if (s->peer_fin && !s->ended && !blocked(s) && s->pend_len == 0 &&
        fx_frame_decoder_finish(&s->dec, NULL) != 0)
        fxb_bidi_fail(s, "stream finished inside a frame");
}

void fxb_bidi_continue(fxb_bidi *s)
{
    if (s->closed || blocked(s))
        return;
    credit(s);
    while (s->pend_len > 0 && !blocked(s) && !s->ended) {
        size_t used = feed(s, s->pend, s->pend_len);
        memmove(s->pend, s->pend + used, s->pend_len - used);
        s->pend_len -= used;
    }
    if (s->ended) {
        s->credit_owed += s->pend_len;
        s->pend_len = 0;
    }
    if (!blocked(s)) {
        credit(s);
        check_fin(s);
    }
    fxb_bidi_flush(s);
}

static void on_bidi_data(fxb_bidi *s, const uint8_t *data, size_t len, bool fin)
{
    if (blocked(s)) {
        if (pend_append(s, data, len) != 0)
            fxb_bidi_fail(s, "out of memory buffering input");
    } else {
        input(s, data, len);
    }
    if (fin) {
        s->peer_fin = true;
        check_fin(s);
    }
    fxb_bidi_flush(s);
}

/* ---- stream and connection lifecycle ---------------------------------------------- */

static fx_ratelimit discard_rl = FX_RATELIMIT_INIT;

/* The stream goes away with input buffered behind a parked publish: those
 * requests arrived (QUIC acknowledged them to the client) but were never
 * admitted, so each is counted like the parked one
 * (felix_broker_ingress_backpressure_cancelled_total) and logged. The buffer
 * starts at a frame boundary (a publish parks right after a whole frame) or,
 * behind a reservation wait, inside the body of the frame whose header was
 * read; a frame cut off at its end never arrived whole and is not counted. */
static bool is_request(uint16_t flags)
{
    fx_body_kind kind;
    return fx_frame_kind(flags, &kind, NULL) == 0 &&
           (kind == FX_BODY_JSON || kind == FX_BODY_PUBLISH_BATCH ||
            kind == FX_BODY_PUBLISH_BATCH_ACKED);
}

static void count_discarded(fxb_bidi *s)
{
    uint64_t n = 0;
    size_t off = 0;
    if (s->resv_wait) { /* the buffer starts with the body whose header waited */
        size_t rest = fx_frame_decoder_expected(&s->dec);
        off = rest <= s->pend_len ? rest : s->pend_len;
        if (rest <= s->pend_len && is_request(s->resv_flags))
            n++;
    }
    while (s->pend_len - off >= FX_WIRE_HEADER_LEN) {
        fx_frame_header h;
        if (fx_frame_header_decode(s->pend + off, s->dec.max_frame, &h, NULL) != 0 ||
            s->pend_len - off - FX_WIRE_HEADER_LEN < h.length)
            break;
        off += FX_WIRE_HEADER_LEN + (size_t)h.length;
        if (is_request(h.flags))
            n++;
    }
    s->pend_len = 0;
    if (n == 0)
        return;
    FX_COUNTER_ADD(ingress_backpressure_cancelled, n);
    FX_LOG_RATELIMITED(&discard_rl, fx_loop_now(s->conn->loop), FX_LOG_WARN, "broker",
                       "conn %llu stream %lld closed with %llu requests waiting for admission: "
                       "discarded",
                       (unsigned long long)s->conn->id, (long long)s->sid, (unsigned long long)n);
}

static void bidi_close(fxb_bidi *s)
{
    fxb_conn *c = s->conn;
    count_discarded(s);
    s->closed = true;
    s->ended = true;
    resv_cancel(s);
    if (s->parked != NULL)
        fxb_publish_cancel_parked(s);
    while (s->rhead != NULL) {
        fxb_reply *r = s->rhead;
        s->rhead = r->next;
        r->owner = NULL;
        fxb_reply_unref(r);
    }
    s->rtail = NULL;
    s->nreplies = 0;
    for (fxb_bidi **pp = &c->bidis; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    fxb_bidi_unref(s);
}

/* Takes one of max_connections. Returns false when all are in use. */
static bool conn_slot_take(fx_broker *b)
{
    uint32_t max = b->o.max_connections;
    uint_fast32_t n = atomic_fetch_add_explicit(&b->nconns, 1, memory_order_relaxed);
    if (max == 0 || n < max)
        return true;
    atomic_fetch_sub_explicit(&b->nconns, 1, memory_order_relaxed);
    return false;
}

static void conn_slot_give(fx_broker *b)
{
    atomic_fetch_sub_explicit(&b->nconns, 1, memory_order_relaxed);
}

static fx_ratelimit conn_refused_rl = FX_RATELIMIT_INIT;

static void on_conn_new(fx_quic_conn *qc, void *user)
{
    fx_broker *b = user;
    fxb_conn *c = calloc(1, sizeof(*c));
    if (c == NULL || fx_budget_init(&c->budget, b->o.pub_conn_inflight_bytes, &b->budget) != 0) {
        free(c);
        c = NULL;
    }
    if (c != NULL) {
        c->b = b;
        if (fxb_conn_lanes_init(c) != 0) {
            fx_budget_deinit(&c->budget);
            free(c);
            c = NULL;
        }
    }
    if (c == NULL) {
        FX_LOG_ERROR("broker", "no memory for a new connection");
        fx_quic_conn_set_user(qc, NULL);
        fx_quic_conn_close(qc, 1, "out of memory");
        return;
    }
    atomic_init(&c->refs, 1);
    c->b = b;
    c->qc = qc;
    c->loop = fx_quic_conn_loop(qc);
    c->epi = fxb_ep_index(b, c->loop);
    c->id = atomic_fetch_add(&b->next_conn_id, 1);
    fx_task_init(&c->writer_task, fxb_writer_run, c);
    fx_quic_conn_set_user(qc, c);
    fxb_conn_list_add(b, c);
    if (fxb_is_draining(b)) { /* the drain takes no new connections */
        c->dead = true;
        fx_quic_conn_close(qc, 0, FXB_SHUTDOWN_TEXT);
    }
}

/* A connection counts against max_connections once its handshake is done:
 * closing it then carries the reason to the client in 1-RTT (a close during
 * the handshake loses its reason phrase). Marked dead, it serves no stream. */
static void on_handshake_done(fx_quic_conn *qc, void *user)
{
    fxb_conn *c = user;
    if (c == NULL || c->dead)
        return;
    if (conn_slot_take(c->b)) {
        c->counted = true;
        return;
    }
    c->dead = true;
    FX_COUNTER_INC(broker_conn_refused);
    FX_LOG_RATELIMITED(&conn_refused_rl, fx_loop_now(c->loop), FX_LOG_WARN, "broker",
                       "conn %llu refused: max_connections (%u) reached", (unsigned long long)c->id,
                       (unsigned)c->b->o.max_connections);
    fx_quic_conn_close(qc, FXB_CODE_TOO_MANY_CONNS, "too many connections");
}

static void on_stream_open(fx_quic_conn *qc, int64_t sid, void *user)
{
    fxb_conn *c = user;
    if (c == NULL || c->dead)
        return;
    if ((sid & 0x2) != 0) { /* a client uni stream: not served (publish uses bidi) */
        fx_quic_stream_reset(qc, sid, FXB_CODE_MALFORMED);
        return;
    }
    fxb_bidi *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        fx_quic_stream_reset(qc, sid, FXB_CODE_MALFORMED);
        return;
    }
    s->kind = FXB_KIND_BIDI;
    s->refs = 1;
    s->conn = c;
    fxb_conn_ref(c);
    s->sid = sid;
    fx_frame_decoder_init(&s->dec, c->b->o.max_frame_bytes);
    fx_task_init(&s->resume_task, fxb_bidi_resume, s);
    fx_task_init(&s->replies_task, replies_resume, s);
    fx_timer_init(&s->wait_timer, fxb_bidi_wait_expired, s);
    fx_task_init(&s->resv_task, resv_resume, s);
    fx_timer_init(&s->frame_timer, on_frame_timeout, s);
    s->resv_w.on_granted = on_resv_granted;
    s->resv_w.user = s;
    s->next = c->bidis;
    c->bidis = s;
    fx_quic_stream_set_user(qc, sid, s);
}

static void on_stream_data(fx_quic_conn *qc, int64_t sid, const uint8_t *data, size_t len, bool fin,
                           void *user, void *stream_user)
{
    (void)user;
    int *kind = stream_user;
    if (kind == NULL || *kind != FXB_KIND_BIDI) {
        fx_quic_stream_consume(qc, sid, len); /* nothing else reads: free the window */
        return;
    }
    on_bidi_data((fxb_bidi *)kind, data, len, fin);
}

static void on_stream_close(fx_quic_conn *qc, int64_t sid, bool reset, uint64_t code, void *user,
                            void *stream_user)
{
    (void)qc;
    (void)sid;
    (void)reset;
    (void)code;
    (void)user;
    int *kind = stream_user;
    if (kind == NULL)
        return;
    if (*kind == FXB_KIND_BIDI)
        bidi_close((fxb_bidi *)kind);
    else if (*kind == FXB_KIND_SUB)
        fxb_sub_close((fxb_sub *)kind, false);
}

static void on_writable(fx_quic_conn *qc, void *user)
{
    (void)qc;
    fxb_conn *c = user;
    if (c == NULL || c->dead || !c->want_writable)
        return;
    c->want_writable = false;
    for (fxb_bidi *s = c->bidis; s != NULL; s = s->next)
        fxb_bidi_flush(s);
    fxb_conn_kick_writer(c);
}

static void on_conn_closed(fx_quic_conn *qc, const fx_quic_close_info *info, void *user)
{
    (void)info;
    fxb_conn *c = user;
    if (c == NULL)
        return;
    fx_quic_conn_set_user(qc, NULL);
    c->dead = true;
    fxb_conn_list_remove(c->b, c);
    while (c->subs != NULL)
        fxb_sub_close(c->subs, false);
    while (c->bidis != NULL)
        bidi_close(c->bidis);
    c->qc = NULL;
    fx_budget_close(&c->budget);
    if (c->counted)
        conn_slot_give(c->b);
    fxb_conn_unref(c);
}

const fx_quic_callbacks fxb_quic_callbacks = {
    .on_conn_new = on_conn_new,
    .on_handshake_done = on_handshake_done,
    .on_stream_open = on_stream_open,
    .on_stream_data = on_stream_data,
    .on_stream_close = on_stream_close,
    .on_writable = on_writable,
    .on_conn_closed = on_conn_closed,
};
