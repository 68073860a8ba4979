/* Writer lanes (checkpoint 6): each connection has a few lanes shared by its
 * subscriptions; a lane bounds the frame lists its subscriptions have queued
 * or in writing, and a full lane applies the lane policy to a push. Pushes
 * run on the feeders' worker loops, releases on the connection's loop; lanes
 * are created and freed with the connection (conn_life.c). */
#include "broker/lane.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/conn_life.h"
#include "broker/feeder.h"
#include "broker/sub.h"
#include "felix/error.h"

/* ---- lanes of a connection --------------------------------------------------------------- */

uint64_t fx_broker_lane_hash(uint64_t key)
{
    /* splitmix64's finalizer: consecutive ids spread over the lanes. */
    key ^= key >> 30;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 27;
    key *= 0x94d049bb133111ebull;
    key ^= key >> 31;
    return key;
}

/* The lane of a new subscription |sub| of |c| (conn loop). */
fxb_lane *fxb_lane_choose(fxb_conn *c, const fxb_sub *sub)
{
    uint64_t key;
    switch (c->b->o.subscriber_lane_shard) {
    case FX_BROKER_LANE_CONNECTION_ID_HASH:
        key = fx_broker_lane_hash(c->id);
        break;
    case FX_BROKER_LANE_ROUND_ROBIN_PIN:
        key = c->lanes.rr_next++;
        break;
    default: /* auto, subscriber_id_hash */
        key = fx_broker_lane_hash(sub->id);
        break;
    }
    return &c->lanes.lane[key % c->lanes.n];
}

int fxb_sub_lane_init(fxb_sub *sub, fxb_conn *c, size_t capacity)
{
    fxb_sub_lane *sl = &sub->lane;
    sl->lane = fxb_lane_choose(c, sub);
    /* The lane policy is applied by fxb_lane_push against the lane's bound; this
     * queue only keeps the subscription's lists in order. */
    fx_queue_opts qo = {.capacity = capacity != 0 ? capacity : c->b->o.subscriber_lane_queue_depth,
                        .policy = FX_QUEUE_BLOCK,
                        .on_drop = fxb_lane_on_leftover,
                        .user = sub,
                        .initial_cells = FX_SUB_QUEUE_INITIAL_CELLS};
    if (fx_queue_init(&sl->q, &qo) != 0)
        return -ENOMEM;
    atomic_init(&sl->resumed, false);
    atomic_init(&sl->fin_req, false);
    atomic_init(&sl->dropped_events, 0);
    return 0;
}

void fxb_sub_lane_deinit(fxb_sub_lane *sl)
{
    fx_queue_deinit(&sl->q); /* remaining lists: released, not drops (closed) */
}

/* ---- slots and parked feeders ------------------------------------------------------------ */

/* Takes one slot of |ln| if it has room. Any thread. */
static bool lane_reserve(fxb_lane *ln)
{
    size_t n = atomic_load_explicit(&ln->count, memory_order_relaxed);
    while (n < ln->capacity)
        if (atomic_compare_exchange_weak(&ln->count, &n, n + 1))
            return true;
    return false;
}

/* Resumes every feeder parked on |ln|: each retries, and those that find it
 * full again park again. Any thread, no lock held. */
static void lane_wake(fxb_lane *ln)
{
    pthread_mutex_lock(&ln->mu);
    fxb_sub *list = ln->whead;
    ln->whead = ln->wtail = NULL;
    for (fxb_sub *p = list; p != NULL; p = p->lane.lwnext) {
        p->lane.lwaiting = false;
        atomic_fetch_sub(&ln->nwaiters, 1);
    }
    pthread_mutex_unlock(&ln->mu);
    while (list != NULL) {
        fxb_sub *sub = list;
        list = sub->lane.lwnext;
        sub->lane.lwnext = NULL;
        atomic_store_explicit(&sub->lane.resumed, true, memory_order_release);
        fxb_feeder_resume(sub);
        fxb_sub_unref(sub); /* the parked list's */
    }
}

/* Gives back one slot of |ln| (a list was sent, evicted without a
 * replacement, or discarded with its closed subscription). The decrement and
 * the waiter check are sequentially consistent, as are the park's increment
 * and count check: either the parking feeder sees the room or this sees it
 * parked. Any thread. */
void fxb_lane_release(fxb_lane *ln)
{
    size_t before = atomic_fetch_sub(&ln->count, 1);
    assert(before > 0);
    (void)before;
    if (atomic_load(&ln->nwaiters) > 0)
        lane_wake(ln);
}

/* Parks |sub|'s feeder on its full block lane. Returns true when parked (the
 * lane resumes it once a slot is released), false when room appeared
 * meanwhile or the subscription closed (retry; the retry sees it). Worker. */
static bool lane_park(fxb_sub *sub)
{
    fxb_lane *ln = sub->lane.lane;
    pthread_mutex_lock(&ln->mu);
    atomic_fetch_add(&ln->nwaiters, 1);
    if (atomic_load(&ln->count) < ln->capacity ||
        atomic_load_explicit(&sub->closed, memory_order_acquire)) {
        atomic_fetch_sub(&ln->nwaiters, 1);
        pthread_mutex_unlock(&ln->mu);
        return false;
    }
    fxb_sub_ref(sub); /* the parked list's */
    sub->lane.lwaiting = true;
    sub->lane.lwnext = NULL;
    if (ln->wtail != NULL)
        ln->wtail->lane.lwnext = sub;
    else
        ln->whead = sub;
    ln->wtail = sub;
    pthread_mutex_unlock(&ln->mu);
    return true;
}

/* Takes a closed |sub| off its lane's parked list (it will not be resumed).
 * Any thread. */
void fxb_lane_unpark(fxb_sub *sub)
{
    fxb_lane *ln = sub->lane.lane;
    bool was = false;
    pthread_mutex_lock(&ln->mu);
    if (sub->lane.lwaiting) {
        fxb_sub *prev = NULL;
        for (fxb_sub *p = ln->whead; p != NULL; prev = p, p = p->lane.lwnext) {
            if (p != sub)
                continue;
            if (prev != NULL)
                prev->lane.lwnext = p->lane.lwnext;
            else
                ln->whead = p->lane.lwnext;
            if (ln->wtail == p)
                ln->wtail = prev;
            break;
        }
        sub->lane.lwaiting = false;
        sub->lane.lwnext = NULL;
        atomic_fetch_sub(&ln->nwaiters, 1);
        was = true;
    }
    pthread_mutex_unlock(&ln->mu);
    if (was)
        fxb_sub_unref(sub);
}

static fx_ratelimit lane_drop_rl = FX_RATELIMIT_INIT;

/* Sheds |l| of |sub| at its lane: counted (unless the subscription is gone,
 * which is no overload) and freed. Any thread. */
static void lane_shed(fxb_sub *sub, fx_frame_list *l)
{
    if (!atomic_load_explicit(&sub->closed, memory_order_acquire)) {
        FX_COUNTER_INC(subscriber_lane_dropped);
        FX_COUNTER_ADD(subscriber_lane_dropped_events, l->events);
        FX_LOG_RATELIMITED(&lane_drop_rl, fx_now_ns(), FX_LOG_WARN, "broker",
                           "writer lane %u of conn %llu full: dropped %u message(s) sub=%llu",
                           (unsigned)sub->lane.lane->index, (unsigned long long)sub->conn->id,
                           (unsigned)l->events, (unsigned long long)sub->id);
        atomic_fetch_add_explicit(&sub->lane.dropped_events, l->events, memory_order_relaxed);
    }
    fxb_frame_list_free(l);
}

/* on_drop of a subscription's own queue, whose policy never sheds: called
 * for the lists still queued when it is freed, each holding a lane slot. */
void fxb_lane_on_leftover(void *item, void *user)
{
    fxb_sub *sub = user;
    fxb_lane_release(sub->lane.lane);
    fxb_frame_list_free(item);
}

/* ---- push -------------------------------------------------------------------------------- */

/* Queues |l| on |sub|'s own queue under the lane slot the caller holds and
 * kicks the writer. Returns QUEUED, SHED (counted: the queue's ring could
 * not grow) or CLOSED (the queue is closed: the slot is given back, the
 * caller still owns |l|). The queue holds at most the lane's slots, so it
 * refuses only then. Worker. */
static fxb_lane_result lane_enqueue(fxb_sub *sub, fx_frame_list *l)
{
    int rv = fx_queue_push(&sub->lane.q, l);
    if (rv == 0) {
        fxb_conn_kick_writer(sub->conn);
        return FXB_LANE_QUEUED;
    }
    fxb_lane_release(sub->lane.lane);
    if (rv != -ENOMEM)
        return FXB_LANE_CLOSED;
    lane_shed(sub, l);
    return FXB_LANE_SHED;
}

/* |sub|'s lane is full: applies the lane policy to |l|. History (the ring
 * snapshot or pages read from disk) is pulled at the subscriber's own pace:
 * a full lane parks its feeder whatever the policy, which governs live
 * deliveries only. Returns QUEUED, SHED or PARKED; CLOSED when |l| is still
 * the caller's, to retry (room appeared, or the subscription closed). */
static fxb_lane_result push_full(fxb_sub *sub, fx_frame_list *l, bool history)
{
    switch (history ? FX_QUEUE_BLOCK : sub->b->o.subscriber_lane_queue_policy) {
    case FX_QUEUE_DROP_OLD: {
        /* Only this subscription's own oldest queued list may go: its
         * slot passes to |l|. With nothing of its own queued (its
         * neighbours fill the lane) the oldest of its deliveries is |l|. */
        void *old;
        if (fx_queue_pop(&sub->lane.q, &old) != 0) {
            lane_shed(sub, l);
            return FXB_LANE_SHED;
        }
        lane_shed(sub, old);
        return lane_enqueue(sub, l);
    }
    case FX_QUEUE_DROP_NEW:
        lane_shed(sub, l);
        return FXB_LANE_SHED;
    default:
        /* Set up before parking: the resume may be posted at once (it
         * runs on this thread, after we return). */
        fxb_feeder_hold(sub, l);
        if (lane_park(sub))
            return FXB_LANE_PARKED;
        (void)fxb_feeder_unhold(sub); /* |l|, the caller's again */
        return FXB_LANE_CLOSED;
    }
}

fxb_lane_result fxb_lane_push_group(fxb_sub *sub, fx_frame_list *l)
{
    if (!atomic_load_explicit(&sub->closed, memory_order_acquire)) {
        atomic_fetch_add(&sub->lane.lane->count, 1); /* over the bound if need be */
        fxb_lane_result r = lane_enqueue(sub, l);
        if (r != FXB_LANE_CLOSED)
            return r;
    }
    fxb_frame_list_free(l);
    return FXB_LANE_CLOSED;
}

fxb_lane_result fxb_lane_push(fxb_sub *sub, fx_frame_list *l, bool history)
{
    fxb_lane *ln = sub->lane.lane;
    fxb_lane_result r;
    for (;;) {
        if (atomic_load_explicit(&sub->closed, memory_order_acquire))
            break;
        if (lane_reserve(ln)) {
            if ((r = lane_enqueue(sub, l)) != FXB_LANE_CLOSED)
                return r;
            break;
        }
        if ((r = push_full(sub, l, history)) != FXB_LANE_CLOSED)
            return r;
        /* room appeared, or closed: retry */
    }
    fxb_frame_list_free(l); /* closed */
    return FXB_LANE_CLOSED;
}
