/* A broker-less fixture for the unit tests of the subscription stages
 * (test_lane.c, test_feeder.c): one fx_broker struct holding options only,
 * one worker and one connection sharing a loop that never runs a thread
 * (fix_drain runs what was posted to it, on the test thread), and
 * subscriptions whose lane and feeder parts come from the product's own
 * constructors (fxb_sub_lane_init, fxb_feeder_init). The writer and feeder
 * tasks a stage posts are counted instead of run, so each stage is tested on
 * its own. Header-only (static inline), included by one test file each. */
#ifndef FX_TESTS_UNIT_SUB_FIXTURE_H
#define FX_TESTS_UNIT_SUB_FIXTURE_H

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"

#include "base/log.h"
#include "base/loop.h"
#include "base/metrics.h"
#include "broker/broker_internal.h"
#include "broker/conn_life.h"
#include "broker/feeder.h"
#include "broker/lane.h"
#include "broker/sub.h"
#include "broker/worker.h"

#define DELTA(a, b, field) ((int64_t)((b).c.field - (a).c.field))

typedef struct fix {
    fx_broker b; /* options only: nothing else of a broker exists */
    fx_loop *loop;
    fxb_worker w;
    fxb_conn c;
    int writer_kicks; /* runs of the connection's writer task */
    int feeds;        /* runs of a subscription's feed task */
} fix;

static inline void fix_on_writer(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fix *f = user;
    f->writer_kicks++;
    atomic_fetch_sub(&f->c.refs, 1); /* the kick's reference */
}

static inline void fix_on_feed(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_sub *sub = user;
    fix *f = (fix *)((char *)sub->conn - offsetof(fix, c));
    f->feeds++;
    atomic_fetch_sub(&sub->refs, 1); /* the post's reference */
}

/* Options as fx_broker_opts_default, then |tune| (may be NULL). */
static inline fix *fix_new(void (*tune)(fx_broker_opts *o))
{
    fx_log_set_level(FX_LOG_ERROR);
    fix *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    fx_broker_opts_default(&f->b.o);
    if (tune != NULL)
        tune(&f->b.o);
    f->b.nworkers = 1;
    assert_int_equal(fx_loop_new(&f->loop, &(fx_loop_opts){.name = "unit", .cpu = -1}), 0);
    f->w = (fxb_worker){.b = &f->b, .loop = f->loop};
    f->c.b = &f->b;
    f->c.loop = f->loop;
    f->c.id = 7;
    atomic_init(&f->c.refs, 1);
    fx_task_init(&f->c.writer.task, fix_on_writer, f);
    assert_int_equal(fxb_conn_lanes_init(&f->c), 0);
    return f;
}

/* Runs every task posted to the loop so far, on this thread. */
static inline void fix_drain(fix *f)
{
    fx_loop_stop(f->loop);
    assert_int_equal(fx_loop_run(f->loop), 0);
}

/* A subscription |id| of the fixture's connection: its identity as
 * subscribe.c's sub_new sets it, then the lane part (the lane the shard
 * rule gives it, and its own queue) and the feeder part from their
 * constructors. Its feed task is counted instead of run. */
static inline fxb_sub *fix_sub(fix *f, uint64_t id)
{
    fxb_sub *sub = calloc(1, sizeof(*sub));
    assert_non_null(sub);
    sub->kind = FXB_KIND_SUB;
    sub->id = id;
    atomic_init(&sub->refs, 1);
    atomic_init(&sub->closed, false);
    atomic_init(&sub->active, true);
    sub->b = &f->b;
    sub->w = &f->w;
    sub->conn = &f->c;
    assert_int_equal(fxb_sub_lane_init(sub, &f->c, 0), 0);
    fxb_feeder_init(sub);
    fx_task_init(&sub->feed.feed_task, fix_on_feed, sub);
    return sub;
}

/* An empty frame list counting |events| messages (what a lane counts). */
static inline fx_frame_list *fix_list(uint32_t events, uint64_t first)
{
    fx_frame_list *l = calloc(1, sizeof(*l));
    assert_non_null(l);
    l->events = events;
    l->first_offset = first;
    l->end_offset = first + events;
    return l;
}

/* Does what the connection writer does with |sub|'s oldest queued list once
 * QUIC took it: releases its lane slot. Returns its first offset. */
static inline uint64_t fix_write_one(fxb_sub *sub)
{
    void *item;
    assert_int_equal(fx_queue_pop(&sub->lane.q, &item), 0);
    fx_frame_list *l = item;
    uint64_t first = l->first_offset;
    fxb_frame_list_free(l);
    fxb_lane_release(sub->lane.lane);
    return first;
}

/* Closes |sub| as sub.c's fxb_sub_close does on the lane side and
 * frees it. */
static inline void fix_sub_free(fxb_sub *sub)
{
    atomic_store(&sub->closed, true);
    fx_queue_close(&sub->lane.q);
    fxb_lane_unpark(sub);
    void *item;
    while (fx_queue_pop(&sub->lane.q, &item) == 0) {
        fxb_lane_release(sub->lane.lane);
        fxb_frame_list_free(item);
    }
    fxb_feeder_deinit(&sub->feed);
    fxb_sub_lane_deinit(&sub->lane);
    free(sub);
}

static inline void fix_free(fix *f)
{
    fix_drain(f);
    fxb_conn_lanes_deinit(&f->c); /* asserts every slot came back */
    fx_loop_free(f->loop);
    free(f);
}

#endif
