/* The connection writer (QUIC egress): takes frame lists from the lanes of a
 * connection's subscriptions and writes them with continuous pipelining, each
 * subscription while its own unacked bytes are under its cap, so a
 * flow-blocked subscriber holds up its neighbours only by keeping their
 * shared lane full. Connection loop; it is woken by fxb_conn_kick_writer
 * (conn_life.c, any thread). */
#include "broker/writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/conn_life.h"
#include "broker/lane.h"
#include "broker/sub.h"
#include "felix/error.h"

void fxb_conn_writer_init(fxb_conn *c)
{
    fx_task_init(&c->writer.task, fxb_writer_run, c);
    fx_timer_init(&c->writer.flush_timer, fxb_writer_flush_due, c);
}

void fxb_conn_writer_deinit(fxb_conn *c)
{
    fx_loop_timer_cancel(c->loop, &c->writer.flush_timer);
}

void fxb_sub_writer_deinit(fxb_sub *sub)
{
    if (sub->writer.cur != NULL && sub->writer.cur_charged)
        fxb_lane_release(sub->lane.lane); /* closing did not run (never listed) */
    fxb_frame_list_free(sub->writer.cur);
}

/* Released by QUIC when the last frame of a list is acknowledged (or the
 * stream or connection is gone): the list's bytes leave the subscription's
 * unacked count. Runs on the connection's loop. */
typedef struct send_token {
    fxb_sub *sub;
    fx_buf *frame;
    size_t bytes;
} send_token;

static void token_free(void *data, size_t len, void *user)
{
    (void)data;
    (void)len;
    send_token *tk = user;
    fxb_sub *sub = tk->sub;
    size_t cap = (size_t)sub->b->o.subscriber_unacked_bytes;
    bool was_full = sub->writer.inflight >= cap;
    sub->writer.inflight -= tk->bytes;
    if (was_full && sub->writer.inflight < cap && !atomic_load(&sub->closed) && !sub->conn->dead)
        fxb_conn_kick_writer(sub->conn);
    fx_buf_unref(tk->frame);
    fxb_sub_unref(sub);
    free(tk);
}

/* The buffer to send for frame |i| of the current list: the frame itself, or
 * for the last frame a wrapper whose release reports the list acknowledged. */
static int frame_buf(fxb_sub *sub, size_t i, fx_buf **pb)
{
    fx_frame_list *l = sub->writer.cur;
    if (i + 1 < l->n) {
        *pb = fx_buf_ref(l->frames[i]);
        return 0;
    }
    send_token *tk = malloc(sizeof(*tk));
    if (tk == NULL)
        return -ENOMEM;
    *tk = (send_token){.sub = sub, .frame = fx_buf_ref(l->frames[i]), .bytes = l->bytes};
    int rv = fx_buf_wrap(pb, l->iov[i].iov_base, l->iov[i].iov_len, token_free, tk);
    if (rv != 0) {
        fx_buf_unref(tk->frame);
        free(tk);
        return rv;
    }
    fxb_sub_ref(sub);
    return 0;
}

/* Writes the rest of the current list. Returns 0 (done), FX_EFULL (the
 * connection's unacked cap: wait for on_writable), or another error. */
static int write_list(fxb_conn *c, fxb_sub *sub)
{
    fx_frame_list *l = sub->writer.cur;
    while (sub->writer.cur_idx < l->n) {
        size_t i = sub->writer.cur_idx;
        fx_buf *b;
        int rv = frame_buf(sub, i, &b);
        if (rv != 0)
            return rv;
        size_t off = (size_t)((const uint8_t *)l->iov[i].iov_base - fx_buf_data(b));
        if (i + 1 == l->n) {
            off = 0; /* the wrapper starts at the frame */
            /* Counted before the send: a refused send releases the wrapper,
             * whose token subtracts the same bytes again. */
            sub->writer.inflight += l->bytes;
        }
        rv = fx_quic_stream_send(c->qc, sub->writer.uni_sid, b, off, l->iov[i].iov_len, false);
        fx_buf_unref(b);
        if (rv != 0)
            return rv;
        sub->writer.cur_idx++;
    }
    sub->writer.delivered += l->events;
    sub->writer.last_write_ns = fx_loop_now(c->loop);
    fxb_frame_list_free(l);
    sub->writer.cur = NULL;
    if (sub->writer.cur_charged) {
        sub->writer.cur_charged = false;
        fxb_lane_release(sub->lane.lane); /* handed to QUIC: the lane has room again */
    }
    return 0;
}

/* flush_max_delay: true while |sub|'s short lane is held back for more
 * lists; the connection's flush timer then runs the writer when the oldest
 * hold is due. A full batch (flush_max_items queued) or a FIN goes at once. */
static bool hold_flush(fxb_conn *c, fxb_sub *sub, bool fin)
{
    const fx_broker_opts *o = &c->b->o;
    size_t depth = fx_queue_depth(&sub->lane.q);
    uint64_t now = fx_loop_now(c->loop);
    /* Nothing queued, a FIN, a full batch, or no delay: write (or idle) now. */
    if (o->subscriber_flush_max_delay_ns == 0 || fin || depth == 0 ||
        depth >= o->subscriber_flush_max_items) {
        sub->writer.flush_since = 0;
        return false;
    }
    if (sub->writer.flush_since == 0)
        sub->writer.flush_since = now;
    uint64_t due = sub->writer.flush_since + o->subscriber_flush_max_delay_ns;
    if (now >= due) {
        sub->writer.flush_since = 0;
        return false;
    }
    if ((!fx_timer_is_armed(&c->writer.flush_timer) || c->writer.flush_timer.deadline_ns > due) &&
        fx_loop_timer_arm(c->loop, &c->writer.flush_timer, due) != 0) {
        sub->writer.flush_since = 0; /* no timer would end the hold: send now instead */
        return false;
    }
    return true;
}

/* Takes |sub|'s oldest queued list as the one to write. Returns false when
 * its lane is empty; then the FIN goes if the feeder asked for it (|fin|,
 * read before the lane). */
static bool take_list(fxb_conn *c, fxb_sub *sub, bool fin)
{
    void *item;
    if (fx_queue_pop(&sub->lane.q, &item) != 0) {
        if (fin && !sub->writer.fin_sent) {
            sub->writer.fin_sent = true;
            fx_quic_stream_shutdown(c->qc, sub->writer.uni_sid);
        }
        return false;
    }
    sub->writer.cur = item;
    sub->writer.cur_idx = 0;
    sub->writer.cur_charged = true; /* its lane slot stays taken until sent */
    return true;
}

/* Writing |sub|'s list failed with |rv|: FX_EFULL waits for on_writable
 * (returns false: the connection takes no more), anything else closes the
 * subscription (returns true: the round goes on). */
static bool write_failed(fxb_conn *c, fxb_sub *sub, int rv)
{
    if (rv == FX_EFULL) {
        c->writer.want_writable = true;
        return false;
    }
    FX_COUNTER_INC(subscriber_disconnect);
    FX_LOG_DEBUG("broker", "subscription %llu: write failed: %s", (unsigned long long)sub->id,
                 fx_strerror(rv));
    fxb_sub_close(sub, true);
    return true;
}

/* Returns false when the connection cannot take more (stop the round). At
 * most subscriber_flush_max_items lists of |sub| go per turn; the writer
 * runs again for the rest (writer_more). Whether to hold the lane back is
 * decided once, before its first list: asked again after each list, the
 * depth would have dropped below a full batch and a new hold would start,
 * so a full batch would go one list per flush_max_delay. */
static bool write_sub(fxb_conn *c, fxb_sub *sub)
{
    size_t cap = (size_t)c->b->o.subscriber_unacked_bytes;
    uint32_t budget = c->b->o.subscriber_flush_max_items;
    bool hold_decided = false;
    while (sub->writer.uni_open && sub->writer.inflight < cap) {
        if (sub->writer.cur == NULL) {
            /* Read the flag before the lane: set after the last push. */
            bool fin = atomic_load_explicit(&sub->lane.fin_req, memory_order_acquire);
            if (budget == 0) {
                c->writer.more = true;
                return true;
            }
            if (!hold_decided && hold_flush(c, sub, fin))
                return true;
            hold_decided = true;
            budget--;
            if (!take_list(c, sub, fin))
                return true;
        }
        int rv = write_list(c, sub);
        if (rv != 0)
            return write_failed(c, sub, rv);
    }
    return true;
}

void fxb_writer_run(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_conn *c = user;
    c->writer.more = false;
    if (!c->dead && c->qc != NULL && !c->writer.want_writable) {
        fxb_sub *next;
        for (fxb_sub *sub = c->subs; sub != NULL; sub = next) {
            next = sub->next;
            if (!write_sub(c, sub))
                break;
        }
    }
    if (c->writer.more && !c->dead && !c->writer.want_writable)
        fxb_conn_kick_writer(c); /* after the tasks queued meanwhile */
    fxb_conn_unref(c);
}

void fxb_writer_flush_due(fx_loop *l, fx_timer *t, void *user)
{
    (void)l;
    (void)t;
    fxb_conn *c = user;
    if (c->dead)
        return;
    fxb_conn_ref(c);
    fxb_writer_run(l, NULL, c);
}
