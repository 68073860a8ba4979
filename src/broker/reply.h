/* The reply queue of a bidi stream (reply.c): replies in request order,
 * commit acks completed by workers, the reply bounds that stop a stream's
 * reading. Connection loop (fxb_reply_complete and fxb_reply_unref: any
 * thread). Owns struct fxb_reply and fxb_bidi's rhead, rtail, nreplies,
 * replies_full, replies_task and commit_timer (and fxb_conn's nreplies,
 * replies_full). */
#ifndef FX_BROKER_REPLY_H
#define FX_BROKER_REPLY_H

#include "broker/broker_internal.h"

/* Sets up |s|'s reply queue (at creation). */
void fxb_reply_bidi_init(fxb_bidi *s);
/* Encodes |m| as a whole frame in a new buffer. Returns 0 or an error. */
int fxb_msg_frame(const fx_msg *m, fx_buf **pframe);
/* An ack slot queued on |s| in request order, completed later
 * (fxb_reply_complete). Returns NULL on -ENOMEM. */
fxb_reply *fxb_reply_new(fxb_bidi *s, bool binary, uint64_t request_id);
/* Fills |r| with its answer (|err| NULL = ok) and marks it done. Any thread;
 * the owner's loop sends it at its next flush. */
void fxb_reply_complete(fxb_reply *r, const char *err);
/* Any thread. */
void fxb_reply_unref(fxb_reply *r);
/* Queues a JSON message reply in order. Returns 0 or -ENOMEM. */
int fxb_bidi_reply_msg(fxb_bidi *s, const fx_msg *m);
/* Replies error{|text|} and, when |end|, ends the stream after it. */
void fxb_bidi_error(fxb_bidi *s, const char *text, bool end);
/* Ends the stream after the queued replies (FIN), ignoring further input. */
void fxb_bidi_end(fxb_bidi *s);
/* Sends the done replies at the head of the FIFO. */
void fxb_bidi_flush(fxb_bidi *s);
/* Drops |s|'s queued replies (the stream is gone). */
void fxb_reply_drop_all(fxb_bidi *s);
/* The commit timer's callback (|user| is the stream): flushes. Named so
 * fx_broker_test_fail_timer_arms can aim at it. Conn loop. */
void fxb_reply_commit_timer_cb(fx_loop *l, fx_timer *t, void *user);

#endif
