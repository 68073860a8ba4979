/* Subscription feeders (feeder.c): turn a subscriber queue's envelopes (or
 * a backlog, or replayed pages) into frame lists pushed on the lane. Worker
 * loop of the subscription's stream. Owns the feeding fields of fxb_sub
 * (feed_task, delay_timer, backlog, backlog_pos, co, co_history,
 * fin_req). */
#ifndef FX_BROKER_FEEDER_H
#define FX_BROKER_FEEDER_H

#include "broker/broker_internal.h"

/* on_wake of the subscription's subscriber queue (fx_subscribe_opts). Any
 * thread: posts the feeder. */
void fxb_feeder_wake(fx_subscriber *s, void *user);
/* Task (fxb_sub.feed_task) and timer (fxb_sub.delay_timer) callbacks.
 * Worker loop. */
void fxb_feeder_run(fx_loop *l, fx_task *t, void *user);
void fxb_feeder_delay(fx_loop *l, fx_timer *t, void *user);

#endif
