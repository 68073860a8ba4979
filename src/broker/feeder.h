/* Subscription feeders (feeder.c): turn a subscriber queue's envelopes (or
 * a backlog, or replayed pages) into frame lists pushed on the lane. Worker
 * loop of the subscription's stream. Owns a subscription's feeder part
 * (fxb_sub.feed: what the feeder and its worker keep of it). */
/* broker_internal.h embeds fxb_feeder in fxb_sub and includes this header
 * back: it comes first, outside the guard. */
#include "broker/broker_internal.h"

#ifndef FX_BROKER_FEEDER_H
#define FX_BROKER_FEEDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/loop.h"
#include "broker/stream.h"

struct fxb_replay;

/* Frame lists one feeder turn builds before yielding. */
#define FXB_FEEDER_BATCH 16

/* A subscription's feeder part (fxb_sub.feed). Its stream's worker loop
 * only: the feeder (feeder.c), the worker's registration and stream end
 * (worker.c), the replay's worker side (replay.c) and, through
 * fxb_feeder_hold, the lane's push, which the feeder calls. */
typedef struct fxb_feeder {
    fx_task reg_task, unreg_task, feed_task;
    fx_timer delay_timer;
    bool lane_parked;
    fx_frame_list *held; /* built but refused by a full block lane */
    fx_stream *stream;
    fx_subscriber *sub;
    fx_backlog backlog;
    size_t backlog_pos;
    fx_coalescer co;
    bool co_history; /* the delivery |co| carries came from the backlog */
    bool registered;
    int reg_rv;
    uint64_t available;
    fxb_sub *wnext, *wprev;    /* on w->subs while registered */
    bool ending;               /* its stream was deleted: finish after the queue */
    /* A moved stream's last frame (shard_moved or error), pushed after the
     * queue and before the FIN; |end_pushed| once it is in the lane. */
    fx_buf *end_frame;
    bool end_pushed;
    bool block_kicked;         /* subscriber_block_timeout closed its connection */
    fx_task block_task;        /* posted to the connection's loop to close it */
    struct fxb_replay *replay; /* history read from disk first (replay.c), or NULL */
} fxb_feeder;

/* Makes |sub|'s feeder part: its tasks, timer and coalescer. Conn loop,
 * before the subscription is shared. */
void fxb_feeder_init(fxb_sub *sub);
/* Frees what the feeder part still holds (the held list). Any thread, by
 * the last reference. */
void fxb_feeder_deinit(fxb_feeder *fd);

/* on_wake of the subscription's subscriber queue (fx_subscribe_opts). Any
 * thread: posts the feeder. */
void fxb_feeder_wake(fx_subscriber *s, void *user);
/* Task (fxb_feeder.feed_task) and timer (fxb_feeder.delay_timer) callbacks.
 * Worker loop. */
void fxb_feeder_run(fx_loop *l, fx_task *t, void *user);
void fxb_feeder_delay(fx_loop *l, fx_timer *t, void *user);
/* The lane parks |sub|'s feeder: |l| (taken) waits in the feeder until the
 * lane resumes it. Called before the park is visible, as the resume may be
 * posted at once. Worker loop (fxb_lane_push). */
void fxb_feeder_hold(fxb_sub *sub, fx_frame_list *l);
/* The park was refused (room appeared, or closed): the feeder is not parked
 * and gives the held list back to the caller. Worker loop (fxb_lane_push). */
fx_frame_list *fxb_feeder_unhold(fxb_sub *sub);
/* The lane woke |sub|'s parked feeder (and set lane.resumed): posts it. Any
 * thread. */
void fxb_feeder_resume(fxb_sub *sub);

#endif
