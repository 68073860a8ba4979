/* Writer lanes (checkpoint 6, lane.c): the bound between the feeders
 * (worker loops) and the connection writer (connection loop). Owns struct
 * fxb_lane (its count and parked feeders) and a subscription's lane fields
 * (fxb_sub.lane, ln, lwnext, lwaiting, held, lane_parked, lane_resumed).
 * Pushes: worker; releases: any thread. */
#ifndef FX_BROKER_LANE_H
#define FX_BROKER_LANE_H

#include "broker/broker_internal.h"

/* The lane of a new subscription |sub| of |c|, by subscriber_lane_shard.
 * Conn loop. */
fxb_lane *fxb_lane_choose(fxb_conn *c, const fxb_sub *sub);
/* What a push did with the frame list. */
typedef enum fxb_lane_result {
    FXB_LANE_QUEUED = 0, /* on the subscription's queue under a lane slot (drop_old may have
                            shed an older list of the same subscription for it) */
    FXB_LANE_SHED,       /* dropped by the lane policy (drop_new, or drop_old with nothing of
                            its own queued) or for lack of memory: counted and freed */
    FXB_LANE_PARKED,     /* block lane full: the feeder is parked with the list held in
                            |sub->held|; the lane resumes it when a slot is released */
    FXB_LANE_CLOSED,     /* the subscription closed: the list is freed */
} fxb_lane_result;
/* Queues |l| (taken) on |sub|'s own queue under a slot of its lane, applying
 * the lane policy (subscriber_lane_queue_policy) when the lane is full. A
 * |history| list (one holding the subscription's catch-up backlog: the ring
 * snapshot or pages replayed from disk) is never shed: a full lane parks it
 * as under block. The feeder goes on after QUEUED or SHED and stops after
 * PARKED or CLOSED. Worker. */
fxb_lane_result fxb_lane_push(fxb_sub *sub, fx_frame_list *l, bool history);
/* Gives back one slot of |ln| (a list was sent, or discarded with its closed
 * subscription); resumes parked feeders. Any thread. */
void fxb_lane_release(fxb_lane *ln);
/* Takes a closed |sub| off its lane's parked list. Any thread. */
void fxb_lane_unpark(fxb_sub *sub);
/* on_drop of a subscription's own lane queue (user: the fxb_sub). */
void fxb_lane_on_leftover(void *item, void *user);

#endif
