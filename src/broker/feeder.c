/* Subscription feeders (checkpoint 5 -> 6): each subscription's feeder
 * dequeues its backlog then its subscriber queue, coalesces envelopes into
 * frame lists of cached shared frames (encoding per-subscriber frames only
 * where it must) and pushes them to its writer lane. Its stream's worker loop. */
#include "broker/feeder.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/conn_life.h"
#include "broker/lane.h"
#include "broker/replay.h"
#include "broker/sub.h"
#include "broker/worker.h"
#include "felix/error.h"

/* ---- the feeder part ---------------------------------------------------------------------- */

void fxb_feeder_init(fxb_sub *sub)
{
    fx_task_init(&sub->feed.feed_task, fxb_feeder_run, sub);
    fx_timer_init(&sub->feed.delay_timer, fxb_feeder_delay, sub);
    fx_coalescer_init(&sub->feed.co);
}

void fxb_feeder_deinit(fxb_feeder *fd)
{
    fxb_frame_list_free(fd->held);
    fx_buf_unref(fd->end_frame);
}

/* The lane's push calls these on this worker: a parked feeder keeps its
 * list until the lane resumes it, and it is set up before the park is
 * visible because the resume may be posted at once (it runs here, after
 * the push returns). */
void fxb_feeder_hold(fxb_sub *sub, fx_frame_list *l)
{
    sub->feed.held = l;
    sub->feed.lane_parked = true;
}

fx_frame_list *fxb_feeder_unhold(fxb_sub *sub)
{
    fx_frame_list *l = sub->feed.held;
    sub->feed.lane_parked = false;
    sub->feed.held = NULL;
    return l;
}

void fxb_feeder_resume(fxb_sub *sub)
{
    fxb_sub_post(sub, sub->w->loop, &sub->feed.feed_task);
}

/* ---- feeding ----------------------------------------------------------------------------- */

void fxb_feeder_wake(fx_subscriber *s, void *user)
{
    (void)s;
    fxb_sub *sub = user;
    if (atomic_load_explicit(&sub->active, memory_order_acquire))
        fxb_sub_post(sub, sub->w->loop, &sub->feed.feed_task);
}

/* Pulls the backlog first, then the live queue. */
typedef struct feed_pull {
    fxb_sub *sub;
    fx_subscriber_puller live;
    bool history; /* the list being built holds backlog (catch-up) items */
    bool last;    /* the last delivery pulled came from the backlog */
} feed_pull;

static bool pull_cb(void *user, fx_env_item *out)
{
    feed_pull *p = user;
    fxb_sub *sub = p->sub;
    /* A durable stream's history from disk comes first, as backlog pages:
     * with the backlog used up, the replay requests its next page (or, done,
     * ends and the live queue follows). */
    if (sub->feed.backlog_pos >= sub->feed.backlog.n && fxb_replay_holds(sub))
        return false; /* a page is being read (or the replay failed): the live queue waits */
    if (sub->feed.backlog_pos < sub->feed.backlog.n) {
        *out = sub->feed.backlog.items[sub->feed.backlog_pos];
        sub->feed.backlog.items[sub->feed.backlog_pos++].env = NULL; /* ownership moves */
        p->history = p->last = true;
        return true;
    }
    p->last = false;
    return fx_subscriber_pull(&p->live, out);
}

static uint32_t max_events(const fx_broker_opts *o)
{
    if (o->fanout_batch_size <= 1)
        return 1;
    return o->event_batch_max_events < o->fanout_batch_size ? o->event_batch_max_events
                                                            : o->fanout_batch_size;
}

/* With coalescing on, a feeder woken by fewer envelopes than a full batch
 * waits up to event_batch_max_delay for more. Returns true to wait. */
static bool should_wait(fxb_sub *sub, fx_loop *l)
{
    const fx_broker_opts *o = &sub->b->o;
    if (fx_timer_is_armed(&sub->feed.delay_timer))
        return true;
    if (max_events(o) <= 1 || o->event_batch_max_delay_ns == 0 ||
        sub->feed.backlog_pos < sub->feed.backlog.n || fx_coalescer_has_pending(&sub->feed.co))
        return false;
    /* Wait only while fewer messages than one full write are queued: a full
     * publish batch (or several envelopes adding up to one) goes at once. */
    fx_subscriber_stats st;
    fx_subscriber_get_stats(sub->feed.sub, &st);
    if (st.depth == 0 || st.queued_items >= max_events(o))
        return false;
    uint64_t due = fx_loop_now(l) + o->event_batch_max_delay_ns;
    /* Without the timer nothing would end the wait: write now instead. */
    return fx_loop_timer_arm(l, &sub->feed.delay_timer, due) == 0;
}

/* A deleted stream's subscription has handed everything to its lane: the
 * writer finishes the event stream once the lane is empty. The flag is set
 * after the last push, so a writer that sees it and then an empty lane has
 * seen every list. */
static void request_fin(fxb_sub *sub)
{
    if (sub->feed.held != NULL || sub->feed.backlog_pos < sub->feed.backlog.n ||
        fxb_replay_pending(sub) || fx_coalescer_has_pending(&sub->feed.co) ||
        atomic_load_explicit(&sub->lane.fin_req, memory_order_relaxed))
        return;
    atomic_store_explicit(&sub->lane.fin_req, true, memory_order_release);
    fxb_conn_kick_writer(sub->conn);
}

/* Pushes |l| to the lane; false when the feeder must stop (parked or closed).
 * A |history| list waits for room instead of being shed (fxb_lane_push). */
static bool pushed(fxb_sub *sub, fx_frame_list *l, bool history)
{
    fxb_lane_result r = fxb_lane_push(sub, l, history);
    return r == FXB_LANE_QUEUED || r == FXB_LANE_SHED;
}

/* A feeder the lane parked goes on only once the lane resumed it, and then
 * pushes its held list first. Returns false when it must stop. */
static bool resume_held(fxb_sub *sub)
{
    if (sub->feed.lane_parked) {
        if (!atomic_exchange_explicit(&sub->lane.resumed, false, memory_order_acq_rel))
            return false; /* still parked: the lane's resume will call again */
        sub->feed.lane_parked = false;
    }
    if (sub->feed.held != NULL) {
        fx_frame_list *h = sub->feed.held;
        sub->feed.held = NULL;
        /* A held list was parked, so it is pushed the way it was (blocking):
         * under a shedding policy only history lists are ever held. */
        if (!pushed(sub, h, true))
            return false;
    }
    return true;
}

/* One list is one write: bounded by both the event frame limit and the
 * writer's per-write cap. */
static fx_coalesce_opts list_limits(const fxb_sub *sub)
{
    const fx_broker_opts *o = &sub->b->o;
    uint64_t max_bytes = o->event_batch_max_bytes < o->subscriber_max_bytes_per_write
                             ? o->event_batch_max_bytes
                             : o->subscriber_max_bytes_per_write;
    return (fx_coalesce_opts){
        .subscription_id = sub->id, .max_events = max_events(o), .max_bytes = (size_t)max_bytes};
}

/* Builds the next list from |p| (empty when nothing is pulled). Returns
 * NULL on -ENOMEM. */
static fx_frame_list *build_list(fxb_sub *sub, feed_pull *p, const fx_coalesce_opts *co)
{
    fx_frame_list *fl = malloc(sizeof(*fl));
    if (fl == NULL)
        return NULL;
    fl->n = 0;
    /* The delivery carried from the last list starts this one. */
    p->history = p->last = sub->feed.co_history && fx_coalescer_has_pending(&sub->feed.co);
    int rv = fx_coalesce_next(&sub->feed.co, pull_cb, p, co, fl);
    sub->feed.co_history = p->last; /* a carried delivery is the last one pulled */
    if (rv != 0)
        FX_LOG_ERROR("broker", "subscription %llu: encoding failed: %s",
                     (unsigned long long)sub->id, fx_strerror(rv));
    return fl;
}

static void feed(fxb_sub *sub, fx_loop *l, bool waited)
{
    if (atomic_load_explicit(&sub->closed, memory_order_acquire) || !sub->feed.registered ||
        !atomic_load_explicit(&sub->active, memory_order_acquire))
        return;
    if (!resume_held(sub))
        return;
    if (!waited && !sub->feed.ending && should_wait(sub, l))
        return;
    fx_coalesce_opts co = list_limits(sub);
    feed_pull p = {.sub = sub, .live = {.sub = sub->feed.sub, .now = fx_loop_now(l)}};
    for (int i = 0; i < FXB_FEEDER_BATCH; i++) {
        fx_frame_list *fl = build_list(sub, &p, &co);
        if (fl == NULL)
            return; /* retried at the next wake */
        if (fl->n == 0 && sub->feed.ending && sub->feed.end_frame != NULL &&
            !sub->feed.end_pushed && !fx_coalescer_has_pending(&sub->feed.co) &&
            sub->feed.backlog_pos >= sub->feed.backlog.n && !fxb_replay_pending(sub)) {
            /* A moved stream: its last frame after everything it was owed
             * (pushed like history: it waits for room, never shed). */
            fx_buf *f = sub->feed.end_frame;
            sub->feed.end_frame = NULL;
            sub->feed.end_pushed = true;
            fl->n = 1;
            fl->frames[0] = f;
            fl->iov[0] = (struct iovec){.iov_base = (void *)fx_buf_data(f), .iov_len = fx_buf_len(f)};
            fl->bytes = fx_buf_len(f);
            fl->events = 0;
            fl->first_offset = fl->end_offset = 0;
            if (!pushed(sub, fl, true))
                return;
            continue;
        }
        if (fl->n == 0) {
            fxb_frame_list_free(fl);
            if (sub->feed.ending)
                request_fin(sub);
            return;
        }
        if (!pushed(sub, fl, p.history))
            return;
    }
    fxb_sub_post(sub, l, &sub->feed.feed_task); /* more may be queued: yield first */
}

void fxb_feeder_run(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_sub *sub = user;
    feed(sub, l, false);
    fxb_sub_unref(sub);
}

void fxb_feeder_delay(fx_loop *l, fx_timer *t, void *user)
{
    (void)t;
    feed(user, l, true);
}
