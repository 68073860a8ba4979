/* The original's JSON consumer-group requests on the connection loop: the
 * checks that need no group (the request served, the feature it belongs to,
 * shard 0, names, reclaim refused, extend_ms), the permission
 * (group.consume, or group.manage for seek and delete) and the stream, then
 * the request goes to the stream's worker (group_poll.c) with a reply slot
 * the worker completes. One request per stream: the stream is finished
 * after its answer, whatever it was. Connection loop. */
#include "broker/group_json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/bidi_life.h"
#include "broker/group_poll.h"
#include "broker/reply.h"
#include "broker/resolve.h"
#include "broker/worker.h"
#include "felix/error.h"

/* ---- errors (any thread) ----------------------------------------------------------------- */

static const struct {
    const char *code, *retry;
} CODES[] = {
    [FXB_GJ_INVALID] = {"invalid_request", "fatal"},
    [FXB_GJ_NOT_FOUND] = {"not_found", "retry_after"},
    [FXB_GJ_FORBIDDEN] = {"forbidden", "fatal"},
    [FXB_GJ_STALE] = {"stale_claim", "retry"},
    [FXB_GJ_STALE_FATAL] = {"stale_claim", "fatal"},
    [FXB_GJ_OVERLOADED] = {"overloaded", "retry_after"},
    [FXB_GJ_INTERNAL] = {"internal", "fatal"},
    [FXB_GJ_UNSUPPORTED] = {"invalid_request", "fatal"},
};

static void count_refusal(fxb_gjerr e)
{
    switch (e) {
    case FXB_GJ_NOT_FOUND:
        FX_COUNTER_INC(group_json_refused_not_found);
        break;
    case FXB_GJ_FORBIDDEN:
        FX_COUNTER_INC(group_json_refused_forbidden);
        break;
    case FXB_GJ_STALE:
    case FXB_GJ_STALE_FATAL:
        FX_COUNTER_INC(group_json_refused_stale);
        break;
    case FXB_GJ_OVERLOADED:
        FX_COUNTER_INC(group_json_refused_overloaded);
        break;
    case FXB_GJ_INTERNAL:
        FX_COUNTER_INC(group_json_refused_internal);
        break;
    case FXB_GJ_UNSUPPORTED:
        FX_COUNTER_INC(group_json_refused_unsupported);
        break;
    default:
        FX_COUNTER_INC(group_json_refused_invalid);
        break;
    }
}

void fxb_gjson_error(fx_msg *m, uint32_t features, fxb_gjerr e, const char *text)
{
    fx_msg_init_error(m, text);
    if ((features & FX_FEATURE_ERROR_CODES) != 0) {
        m->code = CODES[e].code;
        m->has_code = true;
        m->retry = CODES[e].retry;
        m->has_retry = true;
    }
    count_refusal(e);
}

/* ---- checks ------------------------------------------------------------------------------ */

bool fxb_group_json_is_request(fx_msg_type t)
{
    switch (t) {
    case FX_MSG_GROUP_POLL:
    case FX_MSG_GROUP_ACK:
    case FX_MSG_GROUP_NACK:
    case FX_MSG_GROUP_EXTEND:
    case FX_MSG_GROUP_DEAD_LETTER:
    case FX_MSG_GROUP_DEAD_LETTERS:
    case FX_MSG_GROUP_DISCARD:
    case FX_MSG_GROUP_REDRIVE:
    case FX_MSG_GROUP_SEEK:
    case FX_MSG_GROUP_DESCRIBE:
    case FX_MSG_GROUP_DELETE:
        return true;
    default:
        return false;
    }
}

/* Refuses |s|'s request with |text| and finishes the stream after it. */
static void refuse(fxb_bidi *s, fxb_gjerr e, const char *text)
{
    fx_msg m;
    fxb_gjson_error(&m, s->client_features, e, text);
    if (fxb_bidi_reply_msg(s, &m) != 0) {
        fxb_bidi_fail(s, "out of memory for a reply");
        return;
    }
    fxb_bidi_end(s);
}

/* A group name as stream names are checked (no '/', no control byte), so
 * the admin API can name it; 1..FXB_GROUP_NAME_MAX bytes. */
static bool group_name_ok(const char *n)
{
    size_t len = strlen(n);
    fx_registry_err err;
    return len >= 1 && len <= FXB_GROUP_NAME_MAX &&
           fx_registry_name_check("group", (fx_wire_slice){(const uint8_t *)n, len}, &err) == 0;
}

/* What needs neither the stream nor the group. Returns NULL, or the
 * refusal's text (in |buf|) with its kind in |*pe|. */
static const char *check(const fxb_bidi *s, const fx_msg *m, char *buf, size_t cap, fxb_gjerr *pe)
{
    *pe = FXB_GJ_UNSUPPORTED;
    if (m->type == FX_MSG_GROUP_POLL && m->reclaim)
        return "reclaim is not served by this broker (it does not advertise "
               "FEATURE_GROUP_CONSUMER): poll without it; held records come back when their "
               "visibility lapses";
    *pe = FXB_GJ_INVALID;
    if (m->shard != 0) {
        snprintf(buf, cap, "shard %u of %.128s does not exist: this broker serves shard 0 only",
                 (unsigned)m->shard, m->stream);
        return buf;
    }
    if (!group_name_ok(m->group))
        return "group names must be 1 to 128 bytes of UTF-8 with no '/' and no control byte";
    if (m->type == FX_MSG_GROUP_EXTEND && m->extend_ms == 0)
        return "extend_ms must be above 0";
    (void)s;
    return NULL;
}

static fx_broker_auth_action action_of(fx_msg_type t)
{
    return t == FX_MSG_GROUP_SEEK || t == FX_MSG_GROUP_DELETE || t == FX_MSG_GROUP_REDRIVE ||
                   t == FX_MSG_GROUP_DISCARD
               ? FX_BROKER_AUTH_GROUP_MANAGE
               : FX_BROKER_AUTH_GROUP_CONSUME;
}

static fx_wire_slice str_slice(const char *p)
{
    return (fx_wire_slice){(const uint8_t *)p, strlen(p)};
}

/* The permission and the stream; NULL when refused (answered here). */
static fx_stream_handle *resolve(fxb_bidi *s, const fx_msg *m)
{
    fx_stream_handle *h;
    fx_registry_err err;
    int rv = fxb_bidi_resolve(s, action_of(m->type), str_slice(m->tenant_id), str_slice(m->ns),
                              str_slice(m->stream), &h, &err);
    if (rv == 0)
        return h;
    char text[sizeof(err.msg) + 64];
    if (rv == FX_EFORBIDDEN)
        snprintf(text, sizeof(text), "forbidden: %s on %.128s/%.128s/%.128s needs %s",
                 fx_msg_type_name(m->type), m->tenant_id, m->ns, m->stream,
                 action_of(m->type) == FX_BROKER_AUTH_GROUP_MANAGE ? "group.manage"
                                                                   : "group.consume");
    else
        snprintf(text, sizeof(text), "%s", err.msg);
    refuse(s,
           rv == FX_EFORBIDDEN  ? FXB_GJ_FORBIDDEN
           : rv == FX_ENOSTREAM ? FXB_GJ_NOT_FOUND
                                : FXB_GJ_INVALID,
           text);
    return NULL;
}

/* The request's fields, capped as the facts say (max_records 1000, wait_ms
 * at group_max_wait_ms). */
static void fill(fxb_gjreq *q, const fxb_bidi *s, const fx_msg *m)
{
    const fx_broker_opts *o = &s->conn->b->o;
    uint64_t max_wait = o->group_max_wait_ms != 0 ? o->group_max_wait_ms : FXB_GPOLL_MAX_WAIT_MS;
    q->type = m->type;
    q->features = s->client_features;
    snprintf(q->group, sizeof(q->group), "%s", m->group);
    if (m->type == FX_MSG_GROUP_POLL && m->has_consumer && m->consumer != NULL)
        snprintf(q->consumer, sizeof(q->consumer), "%s", m->consumer);
    q->request_id = m->request_id;
    q->offset = m->offset;
    q->wait_ms = m->wait_ms < max_wait ? m->wait_ms : max_wait;
    q->visibility_ms = m->visibility_ms;
    q->delay_ms = m->delay_ms;
    q->extend_ms = m->extend_ms;
    q->max_records =
        m->max_records < FXB_GPOLL_MAX_RECORDS ? m->max_records : FXB_GPOLL_MAX_RECORDS;
    q->attempts = m->attempts;
    q->if_new = m->if_new;
    q->start = m->start;
}

void fxb_group_json(fxb_bidi *s, const fx_msg *m)
{
    char buf[512];
    fxb_gjerr e;
    const char *why = check(s, m, buf, sizeof(buf), &e);
    if (why != NULL) {
        refuse(s, e, why);
        return;
    }
    fx_stream_handle *h = resolve(s, m);
    if (h == NULL)
        return;
    if (fxb_is_draining(s->conn->b)) {
        refuse(s, FXB_GJ_OVERLOADED, FXB_SHUTDOWN_TEXT);
        return;
    }
    fxb_gjreq *q = calloc(1, sizeof(*q));
    fxb_reply *r = q != NULL ? fxb_reply_new(s, false, m->request_id) : NULL;
    if (r == NULL) {
        free(q);
        fxb_bidi_fail(s, "out of memory for a group request");
        return;
    }
    atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed); /* the worker's */
    fill(q, s, m);
    q->reply = r;
    q->h = fx_stream_handle_ref(h);
    q->w = fxb_worker_for(s->conn->b, h);
    fx_task_init(&q->task, fxb_gpoll_run, q);
    (void)fx_loop_post(q->w->loop, &q->task); /* a new task: never pending already */
    fxb_bidi_end(s); /* one exchange per stream: finished after the answer */
}
