/* Subscribe requests: the subscribe exchange (connection loop -> the stream's
 * worker registers and snapshots the backlog -> connection loop opens the
 * event stream, writes event_stream_hello and answers subscribed). The
 * subscription's references and its close are its life (sub.c). Subscribe
 * and unsubscribe travel as tasks, never through a lane. Connection loop. */
#include "broker/subscribe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/bidi_life.h"
#include "broker/conn_life.h"
#include "broker/durable.h"
#include "broker/feeder.h"
#include "broker/lane.h"
#include "broker/mirror_local.h"
#include "broker/reply.h"
#include "broker/resolve.h"
#include "broker/sub.h"
#include "broker/worker.h"
#include "broker/writer.h"
#include "cluster/cluster.h"
#include "felix/error.h"

/* ---- subscribe exchange ------------------------------------------------------------------ */

static void reply_cursor_error(fxb_bidi *s, fxb_sub *sub)
{
    fx_msg m;
    fx_msg_cursor_reason why =
        sub->feed.reg_rv == FX_ECURSOR_TOO_OLD ? FX_MSG_CURSOR_TOO_OLD : FX_MSG_CURSOR_IN_FUTURE;
    fx_msg_init_subscribe_cursor_error(&m, why, sub->start.offset, sub->feed.available);
    fxb_bidi_reply_msg(s, &m);
}

int fxb_sub_open_events(fxb_sub *sub)
{
    fxb_conn *c = sub->conn;
    fx_msg m;
    fx_msg_init_event_stream_hello(&m, sub->id);
    fx_buf *f;
    int rv = fxb_msg_frame(&m, &f);
    if (rv != 0)
        return rv;
    fx_frame_list *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        fx_buf_unref(f);
        return -ENOMEM;
    }
    l->n = 1;
    l->frames[0] = f;
    l->iov[0] = (struct iovec){.iov_base = (void *)fx_buf_data(f), .iov_len = fx_buf_len(f)};
    l->bytes = fx_buf_len(f);
    rv = fx_quic_conn_open_uni(c->qc, sub, &sub->writer.uni_sid);
    if (rv != 0) {
        fxb_frame_list_free(l);
        return rv;
    }
    sub->writer.uni_open = true;
    sub->writer.cur = l;
    sub->writer.cur_idx = 0;
    sub->writer.cur_charged = false; /* the hello takes no lane slot */
    return 0;
}

static void subscribe_failed(fxb_bidi *s, fxb_sub *sub, const char *text)
{
    FX_COUNTER_INC(subscribe_req_error);
    if (text != NULL)
        fxb_bidi_error(s, text, true);
    else
        fxb_bidi_end(s);
    fxb_sub_close(sub, true);
}

static void reply_task_cb(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_sub *sub = user;
    fxb_bidi *s = sub->bidi;
    sub->bidi = NULL;
    s->sub_pending = false;
    char text[768];
    if (atomic_load_explicit(&sub->closed, memory_order_acquire) || s->closed) {
        fxb_sub_close(sub, true);
    } else if (sub->feed.reg_rv == FX_ECURSOR_TOO_OLD || sub->feed.reg_rv == FX_ECURSOR_IN_FUTURE) {
        reply_cursor_error(s, sub);
        subscribe_failed(s, sub, NULL);
    } else if (sub->feed.reg_rv != 0) {
        snprintf(text, sizeof(text), "subscribe failed: %s%s%s", fx_strerror(sub->feed.reg_rv),
                 sub->dur.why != NULL ? ": " : "", sub->dur.why != NULL ? sub->dur.why : "");
        subscribe_failed(s, sub, text);
    } else {
        int rv = fxb_sub_open_events(sub);
        if (rv != 0) {
            snprintf(text, sizeof(text), "could not open the event stream: %s", fx_strerror(rv));
            subscribe_failed(s, sub, text);
        } else {
            fx_msg m;
            fx_msg_init_subscribed(&m, sub->id);
            fx_cluster *cl = sub->b->o.cluster;
            if (cl != NULL && !fx_stream_handle_is_durable(sub->h)) {
                /* A cluster's in-memory stream: its serving epoch, and the
                 * previous epoch's end after a graceful handoff. */
                m.has_epoch = fx_cluster_stream_epoch(
                    cl, fx_stream_handle_tenant(sub->h), fx_stream_handle_namespace(sub->h),
                    fx_stream_handle_stream(sub->h), &m.epoch, &m.prev_epoch_end,
                    &m.has_prev_epoch_end);
            }
            fxb_bidi_reply_msg(s, &m);
            fxb_bidi_end(s);
            FX_COUNTER_INC(subscribe_req_ok);
            atomic_store_explicit(&sub->active, true, memory_order_release);
            fxb_sub_post(sub, sub->w->loop, &sub->feed.feed_task);
            fxb_conn_kick_writer(sub->conn);
        }
    }
    fxb_bidi_flush(s);
    fxb_bidi_unref(s);
    fxb_sub_unref(sub);
}

static int parse_start(const fx_msg *m, fx_start *st)
{
    switch (fx_msg_effective_start(m)) {
    case FX_MSG_START_EARLIEST:
        *st = (fx_start){.kind = FX_START_EARLIEST};
        return 0;
    case FX_MSG_START_OFFSET:
        *st = (fx_start){.kind = FX_START_OFFSET, .offset = m->start.offset};
        return 0;
    default:
        *st = (fx_start){.kind = FX_START_LATEST};
        return 0;
    }
}

/* fxb_sub.free_parts of a subscription built by sub_new. */
static void sub_free_parts(fxb_sub *sub)
{
    fxb_feeder_deinit(&sub->feed);
    fxb_sub_writer_deinit(sub);
    fxb_sub_lane_deinit(&sub->lane);
    fxb_sub_dur_deinit(&sub->dur);
}

fxb_sub *fxb_sub_alloc(fxb_conn *c, fx_stream_handle *h, size_t lane_capacity,
                       void (*free_parts)(fxb_sub *sub))
{
    fxb_sub *sub = calloc(1, sizeof(*sub));
    if (sub == NULL)
        return NULL;
    sub->id = atomic_fetch_add(&c->b->next_sub_id, 1);
    if (fxb_sub_lane_init(sub, c, lane_capacity) != 0) {
        free(sub);
        return NULL;
    }
    sub->kind = FXB_KIND_SUB;
    sub->free_parts = free_parts;
    atomic_init(&sub->refs, 1);
    atomic_init(&sub->closed, false);
    atomic_init(&sub->active, false);
    sub->b = c->b;
    sub->w = fxb_worker_for(c->b, h);
    sub->conn = c;
    fxb_conn_ref(c);
    sub->h = fx_stream_handle_ref(h);
    return sub;
}

static fxb_sub *sub_new(fxb_bidi *s, fx_stream_handle *h)
{
    fxb_sub *sub = fxb_sub_alloc(s->conn, h, 0, sub_free_parts);
    if (sub == NULL)
        return NULL;
    fxb_feeder_init(sub);
    fx_task_init(&sub->feed.reg_task, fxb_worker_sub_register, sub);
    fx_task_init(&sub->feed.unreg_task, fxb_worker_sub_unregister, sub);
    fx_task_init(&sub->reply_task, reply_task_cb, sub);
    return sub;
}

/* Resolves the stream of subscribe |m| on |s| into |*ph| and checks that
 * the broker is not draining and the connection holds fewer than
 * max_subscriptions_per_conn. Returns false when refused (answered here). */
static bool subscribe_admit(fxb_bidi *s, const fx_msg *m, fx_stream_handle **ph)
{
    fxb_conn *c = s->conn;
    fx_registry_err err;
    fx_wire_slice t = {(const uint8_t *)m->tenant_id, strlen(m->tenant_id)};
    fx_wire_slice ns = {(const uint8_t *)m->ns, strlen(m->ns)};
    fx_wire_slice st = {(const uint8_t *)m->stream, strlen(m->stream)};
    int rv = fxb_bidi_resolve(s, FX_BROKER_AUTH_SUBSCRIBE, t, ns, st, ph, &err);
    const fx_cluster_route *r = s->resolved.route;
    /* A client that cannot follow a redirect is served from the local
     * mirror of a stream another node owns (docs/cluster.md "Mirror"). */
    if (rv == FX_EREMOTE && r != NULL && r->kind == FX_CLUSTER_REMOTE &&
        fxb_mirror_subscribe(s, m, r, ph))
        rv = 0;
    if (rv != 0) {
        FX_COUNTER_INC(subscribe_req_error);
        if (rv == FX_EREMOTE && r != NULL && r->kind == FX_CLUSTER_REMOTE) {
            /* Another node owns the stream (or is its candidate): not_leader
             * to a client that follows redirects, else the error naming it. */
            fx_msg reply;
            char text[1024];
            fx_msg_init_redirect_reply(&reply, s->client_features, m->tenant_id, m->ns, m->stream,
                                       r->node_id, r->addr[0] ? r->addr : NULL, r->epoch, text,
                                       sizeof(text));
            if (reply.type == FX_MSG_NOT_LEADER)
                FX_COUNTER_INC(cluster_redirects);
            if (fxb_bidi_reply_msg(s, &reply) == 0)
                fxb_bidi_end(s);
            return false;
        }
        fxb_bidi_error(s, err.msg, true);
        return false;
    }
    if (fxb_is_draining(c->b)) {
        FX_COUNTER_INC(subscribe_req_error);
        fxb_bidi_error(s, FXB_SHUTDOWN_TEXT, true);
        return false;
    }
    if (c->nsubs >= c->b->o.max_subscriptions_per_conn) {
        FX_COUNTER_INC(subscribe_req_error);
        fxb_bidi_error(s, "max subscriptions per connection exceeded", true);
        return false;
    }
    return true;
}

void fxb_sub_list_add(fxb_conn *c, fxb_sub *sub)
{
    sub->next = c->subs;
    c->subs = sub;
    sub->listed = true;
    if (c->nsubs++ == 0)
        FX_GAUGE_ADD(sub_active_connections, 1);
    FX_GAUGE_ADD(sub_subscriptions, 1);
}

void fxb_subscribe(fxb_bidi *s, const fx_msg *m)
{
    fx_stream_handle *h;
    if (!subscribe_admit(s, m, &h) || fxb_test_subscribe_redirected(s, m))
        return;
    fxb_sub *sub = sub_new(s, h);
    if (sub == NULL) {
        fxb_bidi_fail(s, "out of memory for a subscription");
        return;
    }
    parse_start(m, &sub->start);
    sub->client_features = s->client_features;
    fxb_sub_list_add(s->conn, sub);
    /* The stream ends with the reply, which the worker's answer decides. */
    s->ended = true;
    s->sub_pending = true;
    s->refs++;
    sub->bidi = s;
    if (!fxb_mirror_defer_register(sub)) /* a new mirror registers it once subscribed upstream */
        fxb_sub_post(sub, sub->w->loop, &sub->feed.reg_task);
}
