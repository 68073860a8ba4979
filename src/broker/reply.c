/* The reply queue of a client bidi stream: replies are queued in request
 * order and written from the head once done (a commit ack waits for its
 * worker), and a stream with too many unwritten replies stops reading.
 * Connection loop, except fxb_reply_complete (any thread: a worker completes
 * commit acks) and fxb_reply_unref (any thread). */
#include "broker/reply.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/bidi_life.h"
#include "broker/broker_internal.h"
#include "felix/error.h"
#include "wire/binary.h"

/* ---- encoding ---------------------------------------------------------------------------- */

int fxb_msg_frame(const fx_msg *m, fx_buf **pframe)
{
    uint8_t *p;
    size_t n;
    int rv = fx_msg_encode_frame(m, &p, &n);
    if (rv != 0)
        return rv;
    rv = fx_buf_new_copy(pframe, p, n);
    free(p);
    return rv;
}

/* ---- reply slots ------------------------------------------------------------------------- */

void fxb_reply_unref(fxb_reply *r)
{
    if (r == NULL || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
        return;
    fx_buf_unref(r->frame);
    free(r);
}

static void reply_push(fxb_bidi *s, fxb_reply *r);

/* A worker completed a commit ack: send what is now ready (conn loop). */
static void reply_done_cb(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_reply *r = user;
    if (r->owner != NULL)
        fxb_bidi_flush(r->owner);
    fxb_reply_unref(r);
}

/* An ack slot queued on |s| in request order, completed later. */
fxb_reply *fxb_reply_new(fxb_bidi *s, bool binary, uint64_t request_id)
{
    fxb_reply *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    atomic_init(&r->refs, 1);
    atomic_init(&r->done, false);
    r->binary = binary;
    r->request_id = request_id;
    r->loop = s->conn->loop;
    fx_task_init(&r->task, reply_done_cb, r);
    reply_push(s, r);
    return r;
}

static int encode_ack(fxb_reply *r, const char *err)
{
    if (!r->binary) {
        fx_msg m;
        if (err == NULL)
            fx_msg_init_publish_ok(&m, r->request_id);
        else
            fx_msg_init_publish_error(&m, r->request_id, err);
        return fxb_msg_frame(&m, &r->frame);
    }
    fx_wire_publish_ack a = {.ok = err == NULL, .request_id = r->request_id};
    if (err != NULL)
        a.message = (fx_wire_slice){(const uint8_t *)err, strlen(err)};
    size_t n = fx_wire_publish_ack_frame_size(&a);
    int rv = fx_buf_new(&r->frame, n);
    if (rv != 0)
        return rv;
    ssize_t w = fx_wire_publish_ack_encode(&a, fx_buf_data_mut(r->frame), n);
    return w < 0 ? (int)w : 0;
}

/* Fills |r| with its answer (|err| NULL = ok, copied into the frame, which is
 * sized to it) and marks it done. Any thread; the owner's loop sends it at
 * its next flush. */
void fxb_reply_complete(fxb_reply *r, const char *err)
{
    if (atomic_exchange_explicit(&r->claimed, true, memory_order_acq_rel))
        return; /* answered already: the commit timed out first */
    if (encode_ack(r, err) != 0) {
        /* Only memory can fail here: the stream is reset when this reply
         * reaches the head of its FIFO (fxb_bidi_flush), never skipped. */
        FX_LOG_ERROR("broker", "could not encode the ack of request %llu",
                     (unsigned long long)r->request_id);
        fx_buf_unref(r->frame);
        r->frame = NULL;
    }
    atomic_store_explicit(&r->done, true, memory_order_release);
}

/* Completes |r| with a frame built by its caller (a group's GROUP_ACKED),
 * taking |frame|; NULL (out of memory) resets the stream when the reply
 * reaches the head of its FIFO, as for an ack that could not be encoded. */
void fxb_reply_complete_frame(fxb_reply *r, fx_buf *frame)
{
    if (atomic_exchange_explicit(&r->claimed, true, memory_order_acq_rel)) {
        fx_buf_unref(frame);
        return;
    }
    r->frame = frame;
    atomic_store_explicit(&r->done, true, memory_order_release);
}

/* ---- the queue of a stream --------------------------------------------------------------- */

static fx_ratelimit conn_replies_rl = FX_RATELIMIT_INIT;

/* Appends |r| to |s|'s replies, which are written in request order. */
static void reply_push(fxb_bidi *s, fxb_reply *r)
{
    fxb_conn *c = s->conn;
    r->owner = s;
    if (s->replies.tail != NULL)
        s->replies.tail->next = r;
    else
        s->replies.head = r;
    s->replies.tail = r;
    if (++s->replies.n >= FXB_REPLIES_HIGH)
        s->replies.full = true;
    /* The per-stream mark alone lets a client with many streams queue
     * HIGH replies on each: bound the connection too. */
    if (++c->replies.n >= FXB_CONN_REPLIES_HIGH && !c->replies.full) {
        c->replies.full = true;
        FX_COUNTER_INC(broker_conn_replies_full);
        FX_LOG_RATELIMITED(&conn_replies_rl, fx_loop_now(c->loop), FX_LOG_WARN, "broker",
                           "conn %llu: %zu replies unread by the client: its streams stop "
                           "reading until it reads them",
                           (unsigned long long)c->id, c->replies.n);
    }
}

void fxb_bidi_post_resume(fxb_bidi *s)
{
    s->refs++;
    if (!fx_loop_post(s->conn->loop, &s->replies.task))
        s->refs--; /* already pending: that run resumes reading */
}

/* The connection's replies fell to the low mark: every stream may read
 * again (each one still blocked by its own mark stays so). */
static void conn_replies_drained(fxb_conn *c)
{
    if (!c->replies.full || c->replies.n > FXB_CONN_REPLIES_LOW)
        return;
    c->replies.full = false;
    for (fxb_bidi *s = c->bidis; s != NULL; s = s->next)
        if (!s->closed)
            fxb_bidi_post_resume(s);
}

static void replies_drained(fxb_bidi *s)
{
    conn_replies_drained(s->conn);
    if (!s->replies.full || s->replies.n > FXB_REPLIES_LOW)
        return;
    s->replies.full = false;
    fxb_bidi_post_resume(s);
}

void fxb_reply_drop_all(fxb_bidi *s)
{
    while (s->replies.head != NULL) {
        fxb_reply *r = s->replies.head;
        s->replies.head = r->next;
        r->owner = NULL;
        fxb_reply_unref(r);
    }
    s->replies.tail = NULL;
    s->conn->replies.n -= s->replies.n;
    s->replies.n = 0;
    conn_replies_drained(s->conn);
}

/* Queues a finished reply frame (takes ownership of |frame|) in order. */
static void reply_frame(fxb_bidi *s, fx_buf *frame)
{
    fxb_reply *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        fx_buf_unref(frame);
        fxb_bidi_fail(s, "out of memory for a reply");
        return;
    }
    atomic_init(&r->refs, 1);
    r->frame = frame;
    atomic_init(&r->done, true);
    reply_push(s, r);
    fxb_bidi_flush(s);
}

void fxb_bidi_reply_frame(fxb_bidi *s, fx_buf *frame)
{
    reply_frame(s, frame);
}

int fxb_bidi_reply_msg(fxb_bidi *s, const fx_msg *m)
{
    fx_buf *f;
    int rv = fxb_msg_frame(m, &f);
    if (rv != 0) {
        FX_LOG_ERROR("broker", "reply encoding failed: %s", fx_strerror(rv));
        fxb_bidi_fail(s, "reply encoding failed");
        return rv;
    }
    reply_frame(s, f);
    return 0;
}

void fxb_bidi_error(fxb_bidi *s, const char *text, bool end)
{
    fx_msg m;
    fx_msg_init_error(&m, text);
    if (fxb_bidi_reply_msg(s, &m) == 0 && end)
        fxb_bidi_end(s);
}

void fxb_bidi_end(fxb_bidi *s)
{
    s->ended = true;
    fxb_bidi_flush(s);
}

static fx_ratelimit commit_timeout_rl = FX_RATELIMIT_INIT;
static fx_ratelimit commit_timer_rl = FX_RATELIMIT_INIT;

/* Arms the stream's commit timer for |deadline_ns| unless it fires sooner.
 * Returns false when it could not be armed (out of memory, counted): then no
 * timer would ever end the wait of a commit that does not come. */
static bool commit_timer_set(fxb_bidi *s, uint64_t deadline_ns)
{
    fx_loop *l = s->conn->loop;
    if (fx_timer_is_armed(&s->replies.commit_timer) &&
        s->replies.commit_timer.deadline_ns <= deadline_ns)
        return true;
    if (fx_loop_timer_arm(l, &s->replies.commit_timer, deadline_ns) == 0)
        return true;
    FX_COUNTER_INC(broker_timer_arm_failures);
    FX_LOG_RATELIMITED(&commit_timer_rl, fx_loop_now(l), FX_LOG_ERROR, "broker",
                       "conn %llu stream %lld: out of memory arming the commit timer: "
                       "commit ack answered \"%s\" at once",
                       (unsigned long long)s->conn->id, (long long)s->sid, FXB_COMMIT_TIMER_TEXT);
    return false;
}

/* A commit ack at the head past its deadline is answered "publish commit
 * timeout" (the append may still happen: docs/semantics.md); one not yet due
 * arms the stream's commit timer, or, when that fails, is answered
 * FXB_COMMIT_TIMER_TEXT at once. Returns true when the head is done. */
static bool head_done(fxb_bidi *s)
{
    fxb_reply *r = s->replies.head;
    if (atomic_load_explicit(&r->done, memory_order_acquire))
        return true;
    if (r->deadline_ns == 0)
        return false;
    uint64_t now = fx_loop_now(s->conn->loop);
    bool timed_out = now >= r->deadline_ns;
    if (!timed_out && commit_timer_set(s, r->deadline_ns))
        return false;
    if (atomic_load_explicit(&r->claimed, memory_order_acquire))
        return false; /* the worker is completing it right now: its task flushes */
    fxb_reply_complete(r, timed_out ? FX_MSG_COMMIT_TIMEOUT_TEXT : FXB_COMMIT_TIMER_TEXT);
    if (!atomic_load_explicit(&r->done, memory_order_acquire))
        return false; /* lost the race after all */
    if (!timed_out)
        return true;
    FX_COUNTER_INC(publish_commit_timeouts);
    FX_LOG_RATELIMITED(&commit_timeout_rl, now, FX_LOG_WARN, "broker",
                       "conn %llu stream %lld: request %llu: publish commit timeout",
                       (unsigned long long)s->conn->id, (long long)s->sid,
                       (unsigned long long)r->request_id);
    return true;
}

void fxb_reply_commit_timer_cb(fx_loop *l, fx_timer *t, void *user)
{
    (void)l;
    (void)t;
    fxb_bidi *s = user;
    if (!s->closed)
        fxb_bidi_flush(s);
}

/* Sends done replies from the head; stops at a pending commit ack or when the
 * connection's unacked cap refuses (on_writable flushes again). Finishes the
 * stream when it has ended and nothing is left to say. */
void fxb_bidi_flush(fxb_bidi *s)
{
    fxb_conn *c = s->conn;
    while (!s->closed && c->qc != NULL && s->replies.head != NULL && head_done(s)) {
        fxb_reply *r = s->replies.head;
        if (r->frame == NULL) {
            fxb_bidi_fail(s, "a reply could not be encoded");
            return;
        }
        int rv = fx_quic_stream_send(c->qc, s->sid, r->frame, 0, fx_buf_len(r->frame), false);
        if (rv == FX_EFULL) {
            c->writer.want_writable = true;
            return;
        }
        if (rv != 0)
            break; /* the stream is gone: on_stream_close cleans up */
        s->replies.head = r->next;
        if (s->replies.head == NULL)
            s->replies.tail = NULL;
        s->replies.n--;
        c->replies.n--;
        r->owner = NULL;
        fxb_reply_unref(r);
    }
    replies_drained(s);
    /* Input still buffered behind a park (or being fed from that buffer)
     * holds the FIN too: the client's FIN is answered only once every frame
     * it sent before it was handled. */
    bool idle = s->replies.head == NULL && fxb_bidi_is_input_handled(s);
    if (!s->closed && !s->fin_sent && c->qc != NULL && idle && (s->ended || s->peer_fin)) {
        s->fin_sent = true;
        fx_quic_stream_shutdown(c->qc, s->sid);
    }
}

void fxb_reply_bidi_init(fxb_bidi *s, fx_task_cb on_room)
{
    fx_task_init(&s->replies.task, on_room, s);
    fx_timer_init(&s->replies.commit_timer, fxb_reply_commit_timer_cb, s);
}
