/* Consumer-group requests on the connection loop: the join exchange (resolve
 * and check here, join on the stream's worker, then open the member's event
 * stream and answer group_joined), the member's GROUP_ACKS frames handed to
 * its worker, and its leave when the join stream ends. */
#include "broker/group_req.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/bidi_life.h"
#include "broker/conn_life.h"
#include "broker/group.h"
#include "broker/lane.h"
#include "broker/reply.h"
#include "broker/resolve.h"
#include "broker/sub.h"
#include "broker/subscribe.h"
#include "broker/worker.h"
#include "broker/writer.h"
#include "felix/error.h"
#include "wire/group.h"

/* fxb_sub.free_parts of a member. */
static void member_free_parts(fxb_sub *sub)
{
    fxb_sub_writer_deinit(sub);
    fxb_sub_lane_deinit(&sub->lane);
    fxb_sub_group_deinit(&sub->grp);
}

static void join_reply_cb(fx_loop *l, fx_task *t, void *user);

static fxb_sub *member_new(fxb_bidi *s, fx_stream_handle *h, uint32_t window)
{
    fxb_conn *c = s->conn;
    /* Its deliveries are bounded by its window: one list per run at most. */
    fxb_sub *sub = fxb_sub_alloc(c, h, (size_t)(window != 0 ? window : 256) + 1, member_free_parts);
    if (sub == NULL)
        return NULL;
    fxb_sub_group_init(sub);
    fx_task_init(&sub->feed.reg_task, fxb_group_member_register, sub);
    fx_task_init(&sub->feed.unreg_task, fxb_group_member_unregister, sub);
    fx_task_init(&sub->reply_task, join_reply_cb, sub);
    return sub;
}

/* Checks a group or member name: 1..FXB_GROUP_NAME_MAX bytes, and the rules
 * of stream names (no '/', no control byte), so the admin API can name it. */
static bool name_ok(const char *n)
{
    size_t len = n != NULL ? strlen(n) : 0;
    fx_registry_err err;
    return len >= 1 && len <= FXB_GROUP_NAME_MAX &&
           fx_registry_name_check("group", (fx_wire_slice){(const uint8_t *)n, len}, &err) == 0;
}

static void join_refused(fxb_bidi *s, const char *text)
{
    FX_COUNTER_INC(subscribe_req_error);
    fxb_bidi_error(s, text, true);
}

/* Resolves and checks a join; NULL when refused (answered here). */
static fx_stream_handle *join_admit(fxb_bidi *s, const fx_msg *m)
{
    fxb_conn *c = s->conn;
    if (s->member != NULL) {
        join_refused(s, "this stream already joined a consumer group");
        return NULL;
    }
    if (!name_ok(m->group) || (m->has_member && !name_ok(m->member))) {
        join_refused(s, "group and member names must be 1 to 128 bytes of UTF-8 with no '/'");
        return NULL;
    }
    fx_stream_handle *h;
    fx_registry_err err;
    fx_wire_slice t = {(const uint8_t *)m->tenant_id, strlen(m->tenant_id)};
    fx_wire_slice ns = {(const uint8_t *)m->ns, strlen(m->ns)};
    fx_wire_slice st = {(const uint8_t *)m->stream, strlen(m->stream)};
    if (fxb_bidi_resolve(s, FX_BROKER_AUTH_SUBSCRIBE, t, ns, st, &h, &err) != 0) {
        join_refused(s, err.msg);
        return NULL;
    }
    if (fxb_is_draining(c->b)) {
        join_refused(s, FXB_SHUTDOWN_TEXT);
        return NULL;
    }
    if (c->nsubs >= c->b->o.max_subscriptions_per_conn) {
        join_refused(s, "max subscriptions per connection exceeded");
        return NULL;
    }
    return h;
}

static void set_create(fxb_sub_group *gp, const fx_msg *m)
{
    switch (m->create.kind) {
    case FX_MSG_CREATE_NONE:
        break;
    case FX_MSG_CREATE_NEW:
        gp->create = FXB_GROUP_CREATE_NEW;
        break;
    case FX_MSG_CREATE_LAST:
        gp->create = FXB_GROUP_CREATE_LAST;
        break;
    case FX_MSG_CREATE_OFFSET:
        gp->create = FXB_GROUP_CREATE_OFFSET;
        gp->create_offset = m->create.value;
        break;
    case FX_MSG_CREATE_TIME:
        gp->create = FXB_GROUP_CREATE_TIME;
        gp->create_offset = m->create.value;
        break;
    default:
        gp->create = FXB_GROUP_CREATE_ALL;
        break;
    }
}

void fxb_group_join(fxb_bidi *s, const fx_msg *m)
{
    fx_stream_handle *h = join_admit(s, m);
    if (h == NULL)
        return;
    uint32_t window = m->has_window ? m->window : 0;
    fxb_sub *sub = member_new(s, h, window);
    if (sub == NULL) {
        fxb_bidi_fail(s, "out of memory for a group member");
        return;
    }
    fxb_sub_group *gp = &sub->grp;
    snprintf(gp->group, sizeof(gp->group), "%s", m->group);
    if (m->has_member && m->member != NULL)
        snprintf(gp->member, sizeof(gp->member), "%s", m->member);
    else
        snprintf(gp->member, sizeof(gp->member), "m-%llu-%llu", (unsigned long long)s->conn->id,
                 (unsigned long long)sub->id);
    gp->window = window;
    gp->ack_wait_ms =
        m->has_ack_wait_ms && m->ack_wait_ms <= UINT32_MAX ? (uint32_t)m->ack_wait_ms : 0;
    set_create(gp, m);
    fxb_sub_list_add(s->conn, sub);
    s->member = sub;
    fxb_sub_ref(sub);      /* the join stream's, dropped when it lets go (member_let_go) */
    s->sub_pending = true; /* the answer comes from the worker: hold a FIN */
    s->refs++;
    sub->bidi = s;
    fxb_sub_post(sub, sub->w->loop, &sub->feed.reg_task);
}

/* The join stream |s| lets go of its member. */
static void member_let_go(fxb_bidi *s, fxb_sub *sub)
{
    s->member = NULL;
    fxb_sub_unref(sub);
}

static void join_failed(fxb_bidi *s, fxb_sub *sub, const char *text)
{
    FX_COUNTER_INC(subscribe_req_error);
    fxb_bidi_error(s, text, true);
    fxb_sub_close(sub, true);
    member_let_go(s, sub);
}

static void join_reply_cb(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_sub *sub = user;
    fxb_bidi *s = sub->bidi;
    fxb_sub_group *gp = &sub->grp;
    sub->bidi = NULL;
    s->sub_pending = false;
    char text[512];
    if (atomic_load_explicit(&sub->closed, memory_order_acquire) || s->closed || s->ended) {
        fxb_sub_close(sub, true);
        if (s->member == sub)
            member_let_go(s, sub);
    } else if (gp->join_rv != 0) {
        snprintf(text, sizeof(text), "group_join failed: %s%s%s", fx_strerror(gp->join_rv),
                 gp->why != NULL ? ": " : "", gp->why != NULL ? gp->why : "");
        join_failed(s, sub, text);
    } else {
        int rv = fxb_sub_open_events(sub);
        if (rv != 0) {
            snprintf(text, sizeof(text), "could not open the event stream: %s", fx_strerror(rv));
            join_failed(s, sub, text);
        } else {
            fx_msg m;
            fx_msg_init_group_joined(&m, sub->id, gp->member, gp->granted, false);
            m.ack_wait_ms = gp->lease_ms;
            m.has_ack_wait_ms = true;
            fxb_bidi_reply_msg(s, &m);
            FX_COUNTER_INC(subscribe_req_ok);
            gp->join = s;
            atomic_store_explicit(&sub->active, true, memory_order_release);
            fxb_sub_post(sub, sub->w->loop, &gp->ops_task); /* enters the engine, then pumps */
            fxb_conn_kick_writer(sub->conn);
        }
    }
    fxb_bidi_flush(s);
    fxb_bidi_unref(s);
    fxb_sub_unref(sub);
}

/* ---- a member's operations --------------------------------------------------------------- */

int fxb_group_frame(fxb_bidi *s, const fx_frame *f)
{
    if (!s->authed) {
        fxb_bidi_error(s, "auth required", true);
        return -1;
    }
    fxb_sub *sub = s->member;
    if (sub == NULL || sub->grp.join != s ||
        atomic_load_explicit(&sub->closed, memory_order_acquire)) {
        fxb_bidi_error(s,
                       sub == NULL ? "group frame on a stream that joined no consumer group"
                                   : "the member has left its consumer group",
                       true);
        return -1;
    }
    fx_wire_err err;
    int kind = fx_wire_group_kind(f->body, f->len, &err);
    if (kind != FX_GROUP_FRAME_ACKS) {
        fxb_bidi_error(s, kind < 0 ? err.msg : "unexpected group frame kind", true);
        return -1;
    }
    fx_wire_group_acks a;
    if (fx_wire_group_acks_decode(f->body, f->len, &a, &err) != 0) {
        fxb_bidi_error(s, err.msg, true);
        return -1;
    }
    uint64_t request_id = a.request_id;
    fx_wire_group_acks_deinit(&a);
    fxb_reply *r = NULL;
    if (request_id != 0) {
        r = fxb_reply_new(s, true, request_id);
        if (r == NULL) {
            fxb_bidi_fail(s, "out of memory for a reply");
            return -1;
        }
        atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed); /* the worker's */
    }
    if (fxb_group_queue_ops(sub, f->body, f->len, r) != 0) {
        if (r != NULL) {
            fxb_reply_complete_frame(r, NULL);
            fxb_reply_unref(r);
        }
        fxb_bidi_fail(s, "out of memory for group operations");
        return -1;
    }
    return 0;
}

void fxb_group_join_gone(fxb_bidi *s, bool graceful)
{
    fxb_sub *sub = s->member;
    if (sub == NULL || sub->bidi == s)
        return; /* no member, or its join is still on the worker: the answer sees it */
    sub->grp.join = NULL;
    if (graceful && !atomic_load_explicit(&sub->closed, memory_order_acquire))
        fxb_sub_post(sub, sub->w->loop, &sub->grp.leave_task); /* FIN once drained */
    else
        fxb_sub_close(sub, true);
    member_let_go(s, sub);
}
