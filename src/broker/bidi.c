/* Client bidi streams: frame decoding with explicit credit (bytes are
 * credited once the frame they belong to is handled; a publish parked at
 * ingress withholds credit for everything behind it), auth and tenant
 * binding, the limits of a stream that has not authenticated yet (small
 * frames outside the publish budget, a deadline, protocol errors fatal),
 * dispatch to publish.c and subscribe.c, and the loop callbacks that resume
 * reading after a wait (a reservation, an admission park, replies). The
 * stream's references and reset are in bidi_life.c, the permission check and
 * name resolution in resolve.c. Connection loop. */
#include "broker/bidi.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/admission.h"
#include "broker/bidi_life.h"
#include "broker/cache_srv.h"
#include "broker/conn_auth.h"
#include "broker/conn_life.h"
#include "broker/group_json.h"
#include "broker/group_req.h"
#include "broker/parked.h"
#include "broker/publish.h"
#include "broker/reply.h"
#include "broker/resv.h"
#include "broker/subscribe.h"
#include "felix/error.h"
#include "wire/cache_bin.h"

static void replies_resume(fx_loop *l, fx_task *t, void *user);

/* ---- before authentication -------------------------------------------------------------- */

static fx_ratelimit preauth_rl = FX_RATELIMIT_INIT;

/* Logs a refusal of an unauthenticated stream (counted by the caller). */
static void preauth_log(const fxb_bidi *s, const char *why)
{
    FX_LOG_RATELIMITED(&preauth_rl, fx_loop_now(s->conn->loop), FX_LOG_WARN, "broker",
                       "conn %llu stream %lld refused before auth: %s",
                       (unsigned long long)s->conn->id, (long long)s->sid, why);
}

static void on_stream_auth_timeout(fx_loop *l, fx_timer *t, void *user)
{
    (void)l;
    (void)t;
    fxb_bidi *s = user;
    if (s->authed || s->closed)
        return;
    FX_COUNTER_INC(preauth_stream_auth_timeout);
    preauth_log(s, "no auth within auth_timeout_ms");
    fxb_bidi_fail(s, "no auth within auth_timeout_ms");
}

/* Takes |n| bytes of the process-wide pre-auth allowance; false when that
 * would pass preauth_max_bytes. */
static bool preauth_take(fx_broker *b, uint64_t n)
{
    uint64_t cap = b->o.preauth_max_bytes;
    uint_fast64_t cur = atomic_load_explicit(&b->preauth_bytes, memory_order_relaxed);
    do {
        if (n > cap || cur > cap - n)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&b->preauth_bytes, &cur, cur + n,
                                                    memory_order_relaxed, memory_order_relaxed));
    return true;
}

/* The frame whose header was just read before auth is held in the decoder,
 * never in the publish byte budget: count it against the connection's small
 * pre-auth allowance and the broker's (preauth_max_bytes) instead. Returns 0
 * or -1 (|s| failed). */
static int preauth_charge(fxb_bidi *s, size_t n)
{
    fxb_conn *c = s->conn;
    if (c->auth.preauth_bytes + n > FXB_PREAUTH_CONN_BYTES) {
        FX_COUNTER_INC(preauth_bytes);
        preauth_log(s, "the connection's unauthenticated streams hold too many frame bytes");
        fxb_bidi_fail(s, "too many pre-auth frame bytes on the connection");
        return -1;
    }
    if (!preauth_take(c->b, n)) {
        FX_COUNTER_INC(preauth_max_bytes);
        preauth_log(s, "unauthenticated streams hold preauth_max_bytes");
        fxb_bidi_fail(s, "too many pre-auth frame bytes in the broker");
        return -1;
    }
    c->auth.preauth_bytes += n;
    s->preauth_charge = n;
    FX_GAUGE_ADD(preauth_held_bytes, n);
    return 0;
}

/* A protocol error before auth ends the stream (a client that has not
 * authenticated gets one error reply, not one per frame). */
static void preauth_protocol_error(fxb_bidi *s, const char *text)
{
    FX_COUNTER_INC(preauth_protocol_error);
    preauth_log(s, text);
    fxb_bidi_error(s, text, true);
}

fxb_bidi *fxb_bidi_new(fxb_conn *c, int64_t sid)
{
    fxb_bidi *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    const fx_broker_opts *o = &c->b->o;
    fx_timer_init(&s->auth_timer, on_stream_auth_timeout, s);
    if (o->auth_timeout_ns != 0 &&
        fx_loop_timer_arm(c->loop, &s->auth_timer, fx_loop_now(c->loop) + o->auth_timeout_ns) !=
            0) {
        free(s);
        return NULL;
    }
    s->kind = FXB_KIND_BIDI;
    s->refs = 1;
    s->conn = c;
    fxb_conn_ref(c);
    s->sid = sid;
    s->auth_exp_s = INT64_MAX;
    s->unauth_counted = true;
    c->auth.unauth_streams++;
    /* Until auth only a small frame; then max_frame_bytes (on_auth). */
    fx_frame_decoder_init(&s->dec, o->max_frame_bytes < FXB_PREAUTH_MAX_FRAME
                                       ? o->max_frame_bytes
                                       : FXB_PREAUTH_MAX_FRAME);
    fxb_ingress_bidi_init(s);
    fxb_reply_bidi_init(s, replies_resume);
    s->next = c->bidis;
    c->bidis = s;
    return s;
}

/* One cause each, so a flood of one kind never hides the other (forbidden
 * requests are logged by resolve.c). */
static fx_ratelimit auth_failed_rl = FX_RATELIMIT_INIT;

/* ---- dispatch ---------------------------------------------------------------------------- */

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
    case FX_MSG_CACHE_CONDITION_RESULT:
    case FX_MSG_PUBLISH_OK:
    case FX_MSG_PUBLISH_ERROR:
    case FX_MSG_PRODUCER_INIT_OK:
    case FX_MSG_PUBLISH_REFUSED:
    case FX_MSG_OK:
    case FX_MSG_SUBSCRIBE_CURSOR_ERROR:
    case FX_MSG_NOT_LEADER:
    case FX_MSG_SHARD_MOVED:
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
        fxb_conn_on_auth_failed(s->conn);
        return false;
    }
    s->auth_ctx = ctx;
    s->auth_exp_s = a->expiry != NULL ? a->expiry(a->user, ctx) : INT64_MAX;
    return true;
}

/* Each source address may have auth_rate_per_ip tokens verified per second;
 * an attempt beyond it is refused without the parse and signature check. */
static bool auth_rate_ok(fxb_bidi *s)
{
    fxb_conn *c = s->conn;
    if (fxb_peers_auth_take(&c->b->peers, &c->auth.peer, fx_loop_now(c->loop)))
        return true;
    FX_COUNTER_INC(preauth_auth_rate);
    preauth_log(s, "auth_rate_per_ip exceeded");
    fxb_bidi_error(s, "auth rate limited", true);
    return false;
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
    if (s->conn->b->o.auth.verify != NULL && (!auth_rate_ok(s) || !verify_token(s, m)))
        return;
    memcpy(s->tenant, m->tenant_id, n + 1);
    if (atomic_load_explicit(&s->conn->b->forwarder, memory_order_acquire) != NULL &&
        (s->fwd_token = strdup(m->token != NULL ? m->token : "")) == NULL) {
        fxb_bidi_fail(s, "out of memory for the stream's token");
        return;
    }
    s->authed = true;
    s->dec.max_frame = s->conn->b->o.max_frame_bytes; /* read between frames: the next header */
    fxb_conn_on_authed(s->conn, s);
    fx_msg r;
    /* Felix-C's group frames (0x8000) only to a client that offered them:
     * the original never sets the bit. */
    uint16_t flags = FXB_SERVER_FLAGS;
    if (m->has_client_flags && (m->client_flags & FX_FLAG_FELIXC) != 0)
        flags |= FX_FLAG_FELIXC;
    /* The idempotent batch flag likewise only to a client that offered it
     * (any other gets the server_flags it always got). */
    if (m->has_client_flags && (m->client_flags & FX_FLAG_PUBLISH_IDEMPOTENT) != 0)
        flags |= FX_FLAG_PUBLISH_IDEMPOTENT;
    fx_msg_init_auth_reply(&r, m, flags);
    /* The feature word (docs/protocol.md) only to a client that offered
     * one: any other gets the auth_ok it always got. */
    s->client_features = m->has_client_features ? m->client_features : 0;
    s->client_features_hi = m->has_client_features_hi ? m->client_features_hi : 0;
    if (r.type == FX_MSG_AUTH_OK && m->has_client_features) {
        r.server_features = FXB_SERVER_FEATURES;
        if (s->conn->b->o.cluster != NULL)
            /* subscribes may be redirected, and moved streams end with shard_moved */
            r.server_features |= FX_FEATURE_REDIRECT | FX_FEATURE_SHARD_MOVED;
        r.has_server_features = true;
        /* Felix-C's bits of the second word only to a client that set the
         * marker (the original sends its hi word the same way). */
        if ((m->client_features & FX_FEATURE_EXTENDED) != 0) {
            r.server_features |= FX_FEATURE_EXTENDED;
            r.server_features_hi = FXB_SERVER_FEATURES_HI;
            r.has_server_features_hi = true;
        }
    }
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

static fx_ratelimit json_limit_rl = FX_RATELIMIT_INIT;

/* The credentials of a subscribe request go with its subscription, whose
 * event stream outlives the request stream. */
static void hand_credentials(fxb_bidi *s)
{
    fxb_sub *sub = s->conn->subs;
    if (!s->sub_pending || sub == NULL || sub->bidi != s || s->auth_ctx == NULL)
        return;
    sub->auth_ctx = s->auth_ctx;
    sub->auth_exp_s = s->auth_exp_s;
    s->auth_ctx = NULL;
}

/* Decodes the JSON message of |f| into |m|. Returns false when |s| failed. */
static bool json_decode(fxb_bidi *s, const fx_frame *f, fx_msg *m)
{
    fx_wire_err err;
    if (fx_msg_decode(m, f->body, f->len, &err) == 0)
        return true;
    if (err.code == FX_EWIRE_JSON_LIMIT) {
        FX_COUNTER_INC(broker_json_too_complex);
        FX_LOG_RATELIMITED(&json_limit_rl, fx_loop_now(s->conn->loop), FX_LOG_WARN, "broker",
                           "conn %llu stream %lld reset: %s", (unsigned long long)s->conn->id,
                           (long long)s->sid, err.msg);
    }
    fxb_bidi_fail(s, err.msg);
    return false;
}

/* Handles one JSON message. Returns a publish's result (0, 1 parked, -1),
 * else 0. */
static int json_dispatch(fxb_bidi *s, const fx_msg *m)
{
    int rv = 0;
    switch (m->type) {
    case FX_MSG_AUTH:
        on_auth(s, m);
        break;
    case FX_MSG_PUBLISH:
    case FX_MSG_PUBLISH_BATCH:
        if (allowed(s, m->tenant_id, strlen(m->tenant_id)))
            rv = fxb_publish_json(s, m);
        break;
    case FX_MSG_PUBLISH_IDEMPOTENT:
        if (allowed(s, m->tenant_id, strlen(m->tenant_id)))
            rv = fxb_publish_idempotent_json(s, m);
        break;
    case FX_MSG_PRODUCER_INIT:
        if (!s->authed)
            fxb_bidi_error(s, "auth required", true);
        else
            fxb_producer_init(s, m);
        break;
    case FX_MSG_SUBSCRIBE:
        if (allowed(s, m->tenant_id, strlen(m->tenant_id))) {
            fxb_subscribe(s, m);
            hand_credentials(s);
        }
        break;
    case FX_MSG_GROUP_JOIN:
        if (allowed(s, m->tenant_id, strlen(m->tenant_id))) {
            fxb_group_join(s, m);
            hand_credentials(s);
        }
        break;
    case FX_MSG_ERROR:
        fxb_bidi_end(s);
        break;
    default:
        if (fxb_cache_is_request(m->type)) {
            /* The original's cache requests, many in flight (cache_srv.c). */
            if (allowed(s, m->tenant_id, strlen(m->tenant_id)))
                fxb_cache_json(s, m);
        } else if (fxb_group_json_is_request(m->type)) {
            /* The original's group requests: one per stream (group_json.c). */
            if (allowed(s, m->tenant_id, strlen(m->tenant_id)))
                fxb_group_json(s, m);
        } else if (is_server_only(m->type))
            fxb_bidi_error(s, "unexpected message type", true);
        else if (!s->authed)
            preauth_protocol_error(s, "unsupported message type");
        else
            fxb_bidi_error(s, "unsupported message type", false);
        break;
    }
    return rv;
}

/* Returns 0 to go on, 1 when parked, -1 when the stream stops reading. */
static int on_json(fxb_bidi *s, const fx_frame *f)
{
    fx_msg m;
    if (!json_decode(s, f, &m))
        return -1;
    int rv = json_dispatch(s, &m);
    fx_msg_deinit(&m);
    return s->ended ? -1 : rv;
}

static int on_frame(fxb_bidi *s, const fx_frame *f)
{
    if (f->flags_rv != 0) {
        if (!s->authed) {
            preauth_protocol_error(s, "unsupported frame flags");
            return -1;
        }
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
    case FX_BODY_FELIXC:
        /* Kinds 4 and 5 are the binary cache frames (cache_srv.c), the
         * others a group member's (group_req.c). */
        if (fx_wire_cache_bin_is(f->body, f->len))
            return fxb_cache_binary(s, f);
        return fxb_group_frame(s, f);
    default:
        fxb_bidi_error(s, "unexpected frame kind", true);
        return -1;
    }
}

/* ---- input and credit -------------------------------------------------------------------- */

static void credit(fxb_bidi *s)
{
    if (s->credit_owed > 0 && s->conn->qc != NULL)
        fx_quic_stream_consume(s->conn->qc, s->sid, s->credit_owed);
    s->credit_owed = 0;
}

/* True while the stream reads nothing: a publish parked at admission, a
 * header waiting for its bytes, too many replies not yet written, or a
 * group member's op inbox full (checkpoint 5a). */
static bool blocked(const fxb_bidi *s)
{
    return s->admit.parked != NULL || s->admit.deferred != NULL || s->resv.wait ||
           s->replies.full || s->conn->replies.full || s->member_full;
}

/* True when the next frame in |p|[0..|n|) (the decoder is between frames)
 * arrived whole: header and body. */
static bool next_is_whole(const uint8_t *p, size_t n)
{
    return n >= FX_WIRE_HEADER_LEN && n - FX_WIRE_HEADER_LEN >= fx_be32(p + 8);
}

/* Frames are merged only while each one arrived whole in the input: before
 * the decoder takes a byte of one that did not, the merged ones go to
 * admission (so a park always leaves the unread input at a frame boundary).
 * Returns false when that parked or failed the stream. */
static bool merge_ahead_ok(fxb_bidi *s, const uint8_t *p, size_t n)
{
    if (s->admit.merge.nreq == 0 || !fx_frame_decoder_at_boundary(&s->dec) || next_is_whole(p, n))
        return true;
    if (fxb_ingress_flush(s) != 0)
        return false;
    credit(s);
    return true;
}

/* The decoder refused the input (|rv|, |err|): the stream is reset. */
static void feed_error(fxb_bidi *s, int rv, const fx_wire_err *err)
{
    if (!s->authed && rv == FX_EWIRE_TOO_LARGE) {
        char why[sizeof(err->msg) + 64];
        snprintf(why, sizeof(why), "%s (the limit before auth)", err->msg);
        FX_COUNTER_INC(preauth_frame_too_large);
        preauth_log(s, why);
    }
    fxb_bidi_fail(s, err->msg);
}

/* A frame header was read (|whole|: its body is in the input too): its
 * bytes are reserved, or before auth charged to the pre-auth allowance.
 * Returns 0 to read on. */
static int feed_header(fxb_bidi *s, const fx_frame *f, bool whole)
{
    return s->authed ? fxb_ingress_reserve(s, f->hdr.flags, f->hdr.length, whole)
                     : preauth_charge(s, f->hdr.length);
}

/* A whole frame was read: handles it, gives back what it held, and credits
 * its bytes unless they wait in a merge. Returns on_frame's result. */
static int feed_frame(fxb_bidi *s, const fx_frame *f)
{
    fxb_ingress_resv_read(s);
    int rv = on_frame(s, f);
    fxb_ingress_resv_release(s); /* a frame that made no job (auth, subscribe, error) */
    fxb_bidi_preauth_uncharge(s);
    /* Merged bytes are credited once their job is admitted. */
    if (rv == 0 && s->admit.merge.nreq == 0)
        credit(s);
    return rv;
}

/* Feeds |data| to the decoder until it is used up, the stream stops reading,
 * or a publish or a reservation parks. Returns the bytes taken. */
static size_t feed(fxb_bidi *s, const uint8_t *data, size_t len)
{
    size_t off = 0;
    while (off < len && !s->ended && !blocked(s)) {
        if (!merge_ahead_ok(s, data + off, len - off))
            break;
        size_t used = 0;
        fx_frame f;
        fx_wire_err err;
        int rv = fx_frame_decoder_feed(&s->dec, data + off, len - off, &used, &f, &err);
        off += used;
        s->credit_owed += used;
        if (rv < 0) {
            feed_error(s, rv, &err);
            break;
        }
        if (rv == FX_FRAME_HEADER) {
            if (feed_header(s, &f, len - off >= f.hdr.length) != 0)
                break;
            continue;
        }
        if (rv == FX_FRAME_READY && feed_frame(s, &f) != 0)
            break;
    }
    /* The read's merged frames go as one job; their credit follows (the
     * caller's) unless it parked. */
    (void)fxb_ingress_flush(s); /* a park or failure shows in blocked() / s->ended */
    return off;
}

/* Moves the unread input to the front of the buffer. */
static void pend_compact(fxb_bidi *s)
{
    size_t live = s->pend_len - s->pend_off;
    if (live > 0)
        memmove(s->pend, s->pend + s->pend_off, live);
    s->pend_off = 0;
    s->pend_len = live;
}

/* |used| bytes of the buffer were fed. The buffer is compacted only once
 * more than half of it is read, so feeding it frame by frame costs each
 * byte O(1) moves, not one move of the whole rest per frame. */
static void pend_consume(fxb_bidi *s, size_t used)
{
    s->pend_off += used;
    if (s->pend_off == s->pend_len)
        s->pend_off = s->pend_len = 0;
    else if (s->pend_off > s->pend_len / 2)
        pend_compact(s);
}

static int pend_append(fxb_bidi *s, const uint8_t *p, size_t n)
{
    if (n == 0)
        return 0;
    if (s->pend_off > 0 && s->pend_len + n > s->pend_cap)
        pend_compact(s);
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
    if (s->peer_fin && !s->ended && !blocked(s) && s->pend_len == s->pend_off &&
        fx_frame_decoder_finish(&s->dec, NULL) != 0)
        fxb_bidi_fail(s, "stream finished inside a frame");
}

/* A member's join stream the client finished: the member leaves its group
 * once every frame before the FIN was handled (its operations queued ahead
 * of the leave), so none kept unread behind a wait (checkpoint 5a, the
 * reply bounds) is lost; until then it keeps what it holds, or until its
 * connection closes. An ended stream's input is discarded anyway. */
static void member_fin(fxb_bidi *s)
{
    if (s->member == NULL || !s->peer_fin)
        return;
    if (!s->ended && (blocked(s) || s->pend_len > s->pend_off))
        return; /* read_on comes back here once the input is handled */
    fxb_group_join_gone(s, true);
    fxb_bidi_end(s);
}

/* Reads on after a wait ended: the deferred job first, then the input kept
 * meanwhile, then credit, the FIN check and a member's leave. */
static void read_on(fxb_bidi *s)
{
    if (s->closed)
        return;
    if (s->admit.deferred != NULL)
        (void)fxb_ingress_run_deferred(s); /* parked again: blocked() says so */
    if (blocked(s))
        return;
    credit(s);
    while (s->pend_len > s->pend_off && !blocked(s) && !s->ended) {
        size_t used = feed(s, s->pend + s->pend_off, s->pend_len - s->pend_off);
        pend_consume(s, used);
    }
    if (s->ended) {
        s->credit_owed += s->pend_len - s->pend_off;
        s->pend_off = s->pend_len = 0;
    }
    if (!blocked(s)) {
        credit(s);
        check_fin(s);
    }
    member_fin(s);
    fxb_bidi_flush(s);
}

void fxb_bidi_on_data(fxb_bidi *s, const uint8_t *data, size_t len, bool fin)
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
        member_fin(s); /* a member finished its join stream: it leaves */
    }
    fxb_bidi_flush(s);
}

/* ---- closing ----------------------------------------------------------------------------- */

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
    pend_compact(s);
    size_t off = 0;
    if (s->resv.wait) { /* the buffer starts with the body whose header waited */
        size_t rest = fx_frame_decoder_expected(&s->dec);
        off = rest <= s->pend_len ? rest : s->pend_len;
        if (rest <= s->pend_len && is_request(s->resv.flags))
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

void fxb_bidi_close(fxb_bidi *s)
{
    fxb_conn *c = s->conn;
    count_discarded(s);
    s->closed = true;
    s->ended = true;
    fxb_group_join_gone(s, false);
    fx_loop_timer_cancel(c->loop, &s->replies.commit_timer);
    fxb_bidi_preauth_release(s);
    fxb_ingress_resv_cancel(s);
    if (s->admit.parked != NULL)
        fxb_ingress_cancel_parked(s);
    fxb_ingress_discard(s);
    fxb_reply_drop_all(s);
    for (fxb_bidi **pp = &c->bidis; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    fxb_bidi_unref(s);
}

/* ---- resuming the input (loop callbacks) ------------------------------------------------- *
 * Every wait that stops a stream reading ends in a task or timer of the
 * stream's loop that reads on (read_on): a granted reservation, a
 * parked job's resume or deadline, replies drained to the low mark. They
 * live here, beside the input they resume, so the stages below never call
 * back up into it. */

static void resv_resume(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_bidi *s = user;
    if (fxb_ingress_resv_granted(s) && !s->closed)
        read_on(s);
    fxb_bidi_unref(s);
}

void fxb_parked_resume(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_bidi *s = user;
    fxb_job *j = s->admit.parked;
    if (j == NULL)
        return;
    s->admit.parked = NULL;
    fx_loop_timer_cancel(l, &s->admit.wait_timer);
    int rv = fxb_ingress_job_admit(s, j); /* after close, admit reports FAILED (cancelled) */
    if (rv == 1) {
        s->refs--; /* re-parked: admit took a new reference, keep just one */
        return;
    }
    bool closed = s->closed;
    fxb_bidi_unref(s);
    if (!closed)
        read_on(s);
}

void fxb_parked_expired(fx_loop *l, fx_timer *tm, void *user)
{
    (void)l;
    (void)tm;
    fxb_bidi *s = user;
    if (s->admit.parked == NULL)
        return;
    fx_ingress_target t = fxb_ingress_job_target(s->admit.parked);
    fx_ingress_outcome o = fx_ingress_cancel(&t, &s->admit.parked->req);
    if (o != FX_INGRESS_FAILED)
        return; /* a resume is on its way; admit will report the timeout */
    s->refs++;
    fxb_ingress_unpark(s, o);
    read_on(s);
    fxb_bidi_unref(s);
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
        read_on(s);
    fxb_bidi_unref(s); /* the post's reference */
}

void fxb_ingress_bidi_init(fxb_bidi *s)
{
    fxb_admit_init(s, fxb_parked_resume, fxb_parked_expired);
    fxb_ingress_resv_init(s, resv_resume);
}
