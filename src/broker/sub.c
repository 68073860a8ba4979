/* A subscription's life, below the stages that pass it around (feeder, lane,
 * writer, replay, worker): its references, tasks posted with a reference,
 * the frame lists it queues, and its close. References and posts: any
 * thread; the close: the connection's loop. */
#include "broker/sub.h"

#include <stdlib.h>

#include "base/metrics.h"
#include "broker/conn_life.h"
#include "broker/lane.h"
#include "broker/worker.h"

/* ---- references and tasks ---------------------------------------------------------------- */

void fxb_frame_list_free(fx_frame_list *l)
{
    if (l == NULL)
        return;
    fx_frame_list_clear(l);
    free(l);
}

void fxb_sub_ref(fxb_sub *sub)
{
    atomic_fetch_add_explicit(&sub->refs, 1, memory_order_relaxed);
}

void fxb_sub_unref(fxb_sub *sub)
{
    if (atomic_fetch_sub_explicit(&sub->refs, 1, memory_order_acq_rel) != 1)
        return;
    sub->free_parts(sub);
    fx_stream_handle_unref(sub->h);
    const fx_broker_auth *a = &sub->b->o.auth;
    if (sub->auth_ctx != NULL && a->release != NULL)
        a->release(a->user, sub->auth_ctx);
    fxb_conn_unref(sub->conn);
    free(sub);
}

/* Posts |t| (embedded in |sub|) to |l|, holding a reference until it ran. */
void fxb_sub_post(fxb_sub *sub, fx_loop *l, fx_task *t)
{
    fxb_sub_ref(sub);
    if (!fx_loop_post(l, t))
        fxb_sub_unref(sub); /* already pending: that run holds a reference */
}

/* ---- close ------------------------------------------------------------------------------- */

void fxb_sub_close(fxb_sub *sub, bool reset_stream)
{
    if (!sub->listed)
        return;
    fxb_conn *c = sub->conn;
    for (fxb_sub **pp = &c->subs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == sub) {
            *pp = sub->next;
            break;
        }
    }
    sub->listed = false;
    if (--c->nsubs == 0)
        FX_GAUGE_SUB(sub_active_connections, 1);
    FX_GAUGE_SUB(sub_subscriptions, 1);
    atomic_store_explicit(&sub->closed, true, memory_order_release);
    if (sub->writer.uni_open && c->qc != NULL) {
        fx_quic_stream_set_user(c->qc, sub->writer.uni_sid, NULL);
        if (reset_stream)
            fx_quic_stream_reset(c->qc, sub->writer.uni_sid, FXB_CODE_UNSUBSCRIBE);
    }
    sub->writer.uni_open = false;
    /* Its lists leave the lane now, so its neighbours get their room back:
     * a feeder push that raced the close finds the queue closed and gives
     * its slot back itself, or leaves it to fx_queue_deinit's release. */
    fx_queue_close(&sub->lane.q);
    fxb_lane_unpark(sub);
    if (sub->writer.cur != NULL && sub->writer.cur_charged)
        fxb_lane_release(sub->lane.lane);
    fxb_frame_list_free(sub->writer.cur);
    sub->writer.cur = NULL;
    sub->writer.cur_charged = false;
    void *item;
    while (fx_queue_pop(&sub->lane.q, &item) == 0) {
        fxb_lane_release(sub->lane.lane);
        fxb_frame_list_free(item);
    }
    fxb_sub_post(sub, sub->w->loop, &sub->feed.unreg_task);
    fxb_sub_unref(sub); /* the connection's */
}
