/* The connection writer (QUIC egress, writer.c): writes the frame lists of
 * a connection's subscriptions from their lanes. Connection loop. Owns a
 * subscription's writer part (fxb_sub.writer) and fxb_conn's writer_more,
 * want_writable and flush_timer. Waking it: fxb_conn_kick_writer
 * (conn_life.h). */
/* broker_internal.h embeds fxb_sub_writer in fxb_sub and includes this
 * header back: it comes first, outside the guard. */
#include "broker/broker_internal.h"

#ifndef FX_BROKER_WRITER_H
#define FX_BROKER_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A subscription's writer part (fxb_sub.writer): its event stream and the
 * list being written. Connection loop only: the writer, and the subscribe
 * exchange that opens the stream and queues the hello (subscribe.c), the
 * close (sub.c) and the credential check (conn_auth.c). */
typedef struct fxb_sub_writer {
    int64_t uni_sid;
    bool uni_open;
    fx_frame_list *cur; /* list being written */
    size_t cur_idx;
    bool cur_charged; /* |cur| came from the lane: release its slot once sent */
    size_t inflight;  /* bytes queued on the uni stream, not yet acked */
    bool fin_sent;
    uint64_t delivered;     /* messages written to the event stream */
    uint64_t last_write_ns; /* 0 = never */
    uint64_t flush_since;   /* when it first held a short lane back; 0 = not */
} fxb_sub_writer;

/* Frees the list being written, giving back its lane slot if it holds one.
 * Any thread, by the last reference. */
void fxb_sub_writer_deinit(fxb_sub *sub);

/* Timer callback (fxb_conn.flush_timer): a held flush is due; runs the
 * writer. Connection loop. */
void fxb_writer_flush_due(fx_loop *l, fx_timer *t, void *user);
/* Task callback (fxb_conn.writer_task). Connection loop. */
void fxb_writer_run(fx_loop *l, fx_task *t, void *user);

#endif
