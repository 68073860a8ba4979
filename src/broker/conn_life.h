/* A connection's life below every stage: its references (atomic; jobs on
 * worker threads and subscriptions hold them), its writer lanes' memory
 * (created with the connection, freed with the last reference) and waking
 * its writer. Owns the fxb_conn refcount and its lanes part (fxb_conn.lanes).
 * Any thread unless noted. */
/* broker_internal.h embeds fxb_conn_lanes in fxb_conn and includes this
 * header back: it comes first, outside the guard. */
#include "broker/broker_internal.h"

#ifndef FX_BROKER_CONN_LIFE_H
#define FX_BROKER_CONN_LIFE_H

#include <stdint.h>

/* A connection's writer lanes (fxb_conn.lanes): fixed at creation, freed
 * with the last reference (the subscriptions, which may outlive the loop's
 * use, hold one). |rr_next| is written by the lane choice (lane.c, conn
 * loop). */
typedef struct fxb_conn_lanes {
    fxb_lane *lane;
    uint32_t n;
    uint64_t rr_next; /* round_robin_pin: subscriptions placed so far */
} fxb_conn_lanes;

/* References. The last unref frees the lanes and the connection. Any
 * thread. */
void fxb_conn_ref(fxb_conn *c);
void fxb_conn_unref(fxb_conn *c);
/* Schedules the writer of |c| (fxb_conn.writer.task), holding a reference
 * until it ran. Any thread. */
void fxb_conn_kick_writer(fxb_conn *c);
/* Creates |c|'s writer lanes from the options (before any subscription).
 * Returns 0 or -errno (-ENOMEM). Conn loop. */
int fxb_conn_lanes_init(fxb_conn *c);
/* Frees them (last reference of |c|: no subscription is left). */
void fxb_conn_lanes_deinit(fxb_conn *c);

#endif
