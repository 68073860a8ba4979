/* A connection's life below every stage: its references (atomic; jobs on
 * worker threads and subscriptions hold them), its writer lanes' memory
 * (created with the connection, freed with the last reference) and waking
 * its writer. Owns the fxb_conn refcount and |lanes| array. Any thread
 * unless noted. */
#ifndef FX_BROKER_CONN_LIFE_H
#define FX_BROKER_CONN_LIFE_H

#include "broker/broker_internal.h"

/* References. The last unref frees the lanes and the connection. Any
 * thread. */
void fxb_conn_ref(fxb_conn *c);
void fxb_conn_unref(fxb_conn *c);
/* Schedules the writer of |c| (fxb_conn.writer_task), holding a reference
 * until it ran. Any thread. */
void fxb_conn_kick_writer(fxb_conn *c);
/* Creates |c|'s writer lanes from the options (before any subscription).
 * Returns 0 or -errno (-ENOMEM). Conn loop. */
int fxb_conn_lanes_init(fxb_conn *c);
/* Frees them (last reference of |c|: no subscription is left). */
void fxb_conn_lanes_deinit(fxb_conn *c);

#endif
