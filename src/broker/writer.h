/* The connection writer (QUIC egress, writer.c): writes the frame lists of
 * a connection's subscriptions from their lanes. Connection loop. Owns the
 * writing fields of fxb_sub (cur, cur_idx, cur_charged, inflight, fin_sent,
 * delivered, last_write_ns, flush_since) and fxb_conn's writer_more,
 * want_writable and flush_timer. Waking it: fxb_conn_kick_writer
 * (conn_life.h). */
#ifndef FX_BROKER_WRITER_H
#define FX_BROKER_WRITER_H

#include "broker/broker_internal.h"

/* Timer callback (fxb_conn.flush_timer): a held flush is due; runs the
 * writer. Connection loop. */
void fxb_writer_flush_due(fx_loop *l, fx_timer *t, void *user);
/* Task callback (fxb_conn.writer_task). Connection loop. */
void fxb_writer_run(fx_loop *l, fx_task *t, void *user);

#endif
