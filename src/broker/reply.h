/* The reply queue of a bidi stream (reply.c): replies in request order,
 * commit acks completed by workers, the reply bounds that stop a stream's
 * reading. Connection loop (fxb_reply_complete and fxb_reply_unref: any
 * thread). Owns struct fxb_reply, struct fxb_replyq (fxb_bidi.replies; its
 * |task| is the resume callback bidi.c registers) and struct
 * fxb_conn_replies (fxb_conn.replies). Stands alone (no broker_internal.h):
 * that header embeds fxb_replyq and fxb_conn_replies. */
#ifndef FX_BROKER_REPLY_H
#define FX_BROKER_REPLY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/loop.h"
#include "wire/message.h"

typedef struct fxb_bidi fxb_bidi;
typedef struct fxb_reply fxb_reply;

/* One queued reply on a bidi stream, in request order. Done replies are sent
 * from the head; a commit ack is completed by its worker through |task|.
 * Refcounted: the stream's FIFO and, for a commit ack, the job. */
struct fxb_reply {
    atomic_int refs;
    fxb_bidi *owner; /* conn loop only; NULL once the stream is gone */
    fx_loop *loop;
    fx_task task;
    fxb_reply *next;
    atomic_bool done;
    atomic_bool claimed;  /* the first fxb_reply_complete wins (worker or timeout) */
    uint64_t deadline_ns; /* a commit ack: answered with a timeout then; else 0 */
    fx_buf *frame;        /* the encoded reply, once done */
    bool binary;          /* 0x0010 ack, else JSON publish_ok / publish_error */
    uint64_t request_id;
};

/* Bounds of a client stream's reply queue (the original throttles at the
 * same marks). */
#define FXB_REPLIES_HIGH 1536u
#define FXB_REPLIES_LOW 1024u
/* The same bound over all the streams of one connection. */
#define FXB_CONN_REPLIES_HIGH 4096u
#define FXB_CONN_REPLIES_LOW 3072u
/* A commit ack answered at once because its timer could not be armed. */
#define FXB_COMMIT_TIMER_TEXT "publish commit wait failed: out of memory for its timer"

/* A bidi stream's replies in request order. At FXB_REPLIES_HIGH queued the
 * stream stops reading (a client that sends requests but does not read the
 * answers is slowed, not buffered without bound) until they fall to
 * FXB_REPLIES_LOW; |task| then resumes reading. */
typedef struct fxb_replyq {
    fxb_reply *head, *tail;
    size_t n;
    bool full;
    fx_task task;
    fx_timer commit_timer; /* the head commit ack's ack_wait_timeout */
} fxb_replyq;

/* A connection's reply count (fxb_conn.replies): the replies queued on all
 * its bidi streams. At FXB_CONN_REPLIES_HIGH every stream of the connection
 * stops reading until they fall to FXB_CONN_REPLIES_LOW. Zeroed at
 * creation; connection loop. */
typedef struct fxb_conn_replies {
    size_t n;
    bool full;
} fxb_conn_replies;

/* Sets up |s|'s reply queue (at creation); |on_room| runs on the stream's
 * loop (|user| is |s|) once a full queue fell to FXB_REPLIES_LOW. */
void fxb_reply_bidi_init(fxb_bidi *s, fx_task_cb on_room);
/* Encodes |m| as a whole frame in a new buffer. Returns 0 or an error. */
int fxb_msg_frame(const fx_msg *m, fx_buf **pframe);
/* An ack slot queued on |s| in request order, completed later
 * (fxb_reply_complete). Returns NULL on -ENOMEM. */
fxb_reply *fxb_reply_new(fxb_bidi *s, bool binary, uint64_t request_id);
/* Fills |r| with its answer (|err| NULL = ok) and marks it done. Any thread;
 * the owner's loop sends it at its next flush. */
void fxb_reply_complete(fxb_reply *r, const char *err);
/* Completes |r| with a frame its caller built (taken; NULL: out of memory,
 * the stream is reset when it reaches the head). Any thread. */
void fxb_reply_complete_frame(fxb_reply *r, fx_buf *frame);
/* Any thread. */
void fxb_reply_unref(fxb_reply *r);
/* Queues a JSON message reply in order. Returns 0 or -ENOMEM. */
int fxb_bidi_reply_msg(fxb_bidi *s, const fx_msg *m);
/* Queues a reply frame its caller built (takes ownership of |frame|) in
 * request order and flushes. Connection loop. */
void fxb_bidi_reply_frame(fxb_bidi *s, fx_buf *frame);
/* Replies error{|text|} and, when |end|, ends the stream after it. */
void fxb_bidi_error(fxb_bidi *s, const char *text, bool end);
/* Ends the stream after the queued replies (FIN), ignoring further input. */
void fxb_bidi_end(fxb_bidi *s);
/* Sends the done replies at the head of the FIFO. */
void fxb_bidi_flush(fxb_bidi *s);
/* Posts |s|'s resume task (|on_room| of fxb_reply_bidi_init): it reads on
 * at its loop's next turn unless something else still stops it. For a wait
 * that ends outside the reply queue too (a group member's inbox). */
void fxb_bidi_post_resume(fxb_bidi *s);
/* Drops |s|'s queued replies (the stream is gone). */
void fxb_reply_drop_all(fxb_bidi *s);
/* The commit timer's callback (|user| is the stream): flushes. Named so
 * fx_broker_test_fail_timer_arms can aim at it. Conn loop. */
void fxb_reply_commit_timer_cb(fx_loop *l, fx_timer *t, void *user);

#endif
