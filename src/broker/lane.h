/* Writer lanes (checkpoint 6, lane.c): the bound between the feeders
 * (worker loops) and the connection writer (connection loop). Owns struct
 * fxb_lane (its count and parked feeders) and a subscription's lane part
 * (fxb_sub.lane: its queue, its lane, its place on the lane's parked list,
 * and the atomics the lane, the feeder and the writer share). Pushes:
 * worker; releases: any thread. */
/* broker_internal.h embeds fxb_sub_lane in fxb_sub and includes this header
 * back: it comes first, outside the guard. */
#include "broker/broker_internal.h"

#ifndef FX_BROKER_LANE_H
#define FX_BROKER_LANE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/queue.h"

/* A writer lane of a connection (checkpoint 6), shared by the subscriptions
 * the lane choice put on it. Each subscription queues its frame lists in its
 * own queue (fxb_sub_lane.q, so eviction and order stay per subscriber); the
 * lane is the bound over all of them: |count| is charged by a feeder (any
 * worker thread) before it queues a list and released by the connection
 * writer once the list is handed to QUIC, so a flow-blocked subscription's
 * backlog keeps its lane full until it drains. Feeders parked on a full
 * block lane wait in the list under |mu| (slow path only). */
struct fxb_lane {
    uint32_t index;
    size_t capacity;        /* subscriber_lane_queue_depth */
    atomic_size_t count;    /* frame lists charged: queued or being written */
    atomic_size_t nwaiters; /* parked feeders (read without |mu|) */
    pthread_mutex_t mu;
    fxb_sub *whead, *wtail; /* parked feeders (fxb_sub.lane.lwnext), under |mu| */
};

/* A subscription's lane part (fxb_sub.lane). The queue is pushed by the
 * feeder (worker) and popped by the writer (connection loop): fx_queue is
 * safe between them. The parked-list fields are written under |lane->mu|
 * only. The atomics are shared, each written on two threads:
 * |resumed| by the lane's release (any thread) and the feeder, which takes
 * it; |fin_req| by the feeder and read by the writer, which must see it
 * only after the last list; |dropped_events| by the lane's sheds (worker)
 * and read by the control plane. */
typedef struct fxb_sub_lane {
    fx_queue q;          /* fx_frame_list* queued on |lane|, oldest first */
    fxb_lane *lane;      /* its writer lane, on the connection (fixed) */
    fxb_sub *lwnext;     /* on lane's parked list, under lane->mu */
    bool lwaiting;       /* on lane's parked list (under lane->mu) */
    atomic_bool resumed; /* the lane woke a parked feeder */
    atomic_bool fin_req; /* the feeder pushed its last list: FIN after the lane */
    atomic_uint_fast64_t dropped_events;
} fxb_sub_lane;

/* Makes |sub|'s lane part on |c|: its lane, by subscriber_lane_shard
 * (fxb_lane_choose; |sub->id| is set), and its own queue of |capacity|
 * lists (0: subscriber_lane_queue_depth, which the lane bounds anyway; a
 * group member's: its window, which bounds its deliveries). Returns 0 or
 * -ENOMEM. Conn loop, before the subscription is shared. */
int fxb_sub_lane_init(fxb_sub *sub, fxb_conn *c, size_t capacity);
/* Frees the queue; the lists still queued give back their lane slots.
 * Any thread, by the last reference. */
void fxb_sub_lane_deinit(fxb_sub_lane *sl);

/* The lane of a new subscription |sub| of |c|, by subscriber_lane_shard.
 * Conn loop. */
fxb_lane *fxb_lane_choose(fxb_conn *c, const fxb_sub *sub);
/* What a push did with the frame list. */
typedef enum fxb_lane_result {
    FXB_LANE_QUEUED = 0, /* on the subscription's queue under a lane slot (drop_old may have
                            shed an older list of the same subscription for it) */
    FXB_LANE_SHED,       /* dropped by the lane policy (drop_new, or drop_old with nothing of
                            its own queued) or for lack of memory: counted and freed */
    FXB_LANE_PARKED,     /* block lane full: the feeder is parked holding the list
                            (fxb_feeder_hold); the lane resumes it when a slot is released */
    FXB_LANE_CLOSED,     /* the subscription closed: the list is freed */
} fxb_lane_result;
/* Queues |l| (taken) on |sub|'s own queue under a slot of its lane, applying
 * the lane policy (subscriber_lane_queue_policy) when the lane is full. A
 * |history| list (one holding the subscription's catch-up backlog: the ring
 * snapshot or pages replayed from disk) is never shed: a full lane parks it
 * as under block. The feeder goes on after QUEUED or SHED and stops after
 * PARKED or CLOSED. Worker. */
fxb_lane_result fxb_lane_push(fxb_sub *sub, fx_frame_list *l, bool history);
/* Queues a consumer group's delivery |l| (taken) on member |sub|'s queue,
 * charging a slot of its lane even past the lane's bound: group frames are
 * never shed and never wait here, because the member's window (records held
 * unacked) already bounds them; they fill the lane for its neighbours like
 * any list. Returns QUEUED, SHED (no memory: counted, freed; the records
 * lapse at their ack wait) or CLOSED (freed). Worker. */
fxb_lane_result fxb_lane_push_group(fxb_sub *sub, fx_frame_list *l);
/* Gives back one slot of |ln| (a list was sent, or discarded with its closed
 * subscription); resumes parked feeders. Any thread. */
void fxb_lane_release(fxb_lane *ln);
/* Takes a closed |sub| off its lane's parked list. Any thread. */
void fxb_lane_unpark(fxb_sub *sub);
/* on_drop of a subscription's own lane queue (user: the fxb_sub). */
void fxb_lane_on_leftover(void *item, void *user);

#endif
