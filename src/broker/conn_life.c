/* A connection's life below every stage: its references (atomic: jobs on
 * worker threads and subscriptions hold the connection), the memory of its
 * writer lanes (created with the connection, freed with its last reference)
 * and waking its writer. Any thread unless noted. */
#include "broker/conn_life.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>

/* ---- references -------------------------------------------------------------------------- */

void fxb_conn_ref(fxb_conn *c)
{
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

void fxb_conn_unref(fxb_conn *c)
{
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
        return;
    fxb_conn_lanes_deinit(c);
    fx_budget_deinit(&c->budget);
    free(c);
}

void fxb_conn_kick_writer(fxb_conn *c)
{
    fxb_conn_ref(c);
    if (!fx_loop_post(c->loop, &c->writer.task))
        fxb_conn_unref(c);
}

/* ---- the memory of its writer lanes ------------------------------------------------------ */

static uint32_t lane_count_of(const fx_broker_opts *o)
{
    if (o->subscriber_single_writer_per_conn)
        return 1;
    uint32_t n = o->subscriber_writer_lanes;
    if (o->max_subscriber_writer_lanes != 0 && n > o->max_subscriber_writer_lanes)
        n = o->max_subscriber_writer_lanes;
    return n == 0 ? 1 : n;
}

int fxb_conn_lanes_init(fxb_conn *c)
{
    uint32_t n = lane_count_of(&c->b->o);
    c->lanes.lane = calloc(n, sizeof(*c->lanes.lane));
    if (c->lanes.lane == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        fxb_lane *ln = &c->lanes.lane[i];
        int rv = pthread_mutex_init(&ln->mu, NULL);
        if (rv != 0) {
            c->lanes.n = i;
            fxb_conn_lanes_deinit(c);
            return -rv;
        }
        ln->index = i;
        ln->capacity = c->b->o.subscriber_lane_queue_depth;
        atomic_init(&ln->count, 0);
        atomic_init(&ln->nwaiters, 0);
    }
    c->lanes.n = n;
    return 0;
}

void fxb_conn_lanes_deinit(fxb_conn *c)
{
    for (uint32_t i = 0; i < c->lanes.n; i++) {
        /* Every subscription released its slots and left the parked list. */
        assert(atomic_load(&c->lanes.lane[i].count) == 0 && c->lanes.lane[i].whead == NULL);
        pthread_mutex_destroy(&c->lanes.lane[i].mu);
    }
    free(c->lanes.lane);
    c->lanes.lane = NULL;
    c->lanes.n = 0;
}
