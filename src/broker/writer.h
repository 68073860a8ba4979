/* The connection writer (QUIC egress, writer.c): writes the frame lists of
 * a connection's subscriptions from their lanes. Connection loop. Owns a
 * subscription's writer part (fxb_sub.writer) and a connection's
 * (fxb_conn.writer). Waking it: fxb_conn_kick_writer (conn_life.h). */
/* broker_internal.h embeds fxb_sub_writer in fxb_sub and fxb_conn_writer in
 * fxb_conn and includes this header back: it comes first, outside the
 * guard. */
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

/* A connection's writer part (fxb_conn.writer). Connection loop only: the
 * writer, and the replies (reply.c) and on_writable (conn.c), which wait for
 * the unacked cap to fall. */
typedef struct fxb_conn_writer {
    bool want_writable; /* a send hit the unacked cap: wait for on_writable */
    fx_task task;
    bool more;            /* a subscription stopped at its flush limit: go on */
    fx_timer flush_timer; /* the earliest held flush (flush_max_delay) is due */
} fxb_conn_writer;

/* Sets up |c|'s writer part: its task and flush timer (at creation). */
void fxb_conn_writer_init(fxb_conn *c);
/* Cancels its flush timer (the connection closed). Connection loop. */
void fxb_conn_writer_deinit(fxb_conn *c);

/* Timer callback (fxb_conn.writer.flush_timer): a held flush is due; runs the
 * writer. Connection loop. */
void fxb_writer_flush_due(fx_loop *l, fx_timer *t, void *user);
/* Task callback (fxb_conn.writer.task). Connection loop. */
void fxb_writer_run(fx_loop *l, fx_task *t, void *user);

#endif
