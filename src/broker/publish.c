/* The publish path. Connection loop: a publish frame becomes a job (payload
 * bytes copied once into a refcounted buffer), passes checkpoints 3-4
 * (fx_ingress) or parks, and gets its reply slot in request order. Worker
 * loop: jobs are drained from the worker queue, appended and fanned out
 * (checkpoint 5, parking the worker under block), and commit acks are
 * completed and posted back to the connection's loop. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/broker_internal.h"
#include "felix/error.h"
#include "wire/binary.h"

/* ---- replies -------------------------------------------------------------------- */

void fxb_reply_unref(fxb_reply *r)
{
    if (r == NULL || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
        return;
    fx_buf_unref(r->frame);
    free(r);
}

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
static fxb_reply *reply_new(fxb_bidi *s, bool binary, uint64_t request_id)
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
    fxb_reply_push(s, r);
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
    fx_publish_ack a = {.ok = err == NULL, .request_id = r->request_id};
    if (err != NULL)
        a.message = (fx_wire_slice){(const uint8_t *)err, strlen(err)};
    size_t n = fx_publish_ack_frame_size(&a);
    int rv = fx_buf_new(&r->frame, n);
    if (rv != 0)
        return rv;
    ssize_t w = fx_publish_ack_encode(&a, fx_buf_data_mut(r->frame), n);
    return w < 0 ? (int)w : 0;
}

/* Fills |r| with its answer (|err| NULL = ok) and marks it done. Any thread;
 * the owner's loop sends it at its next flush. */
static void reply_complete(fxb_reply *r, const char *err)
{
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

/* ---- jobs --------------------------------------------------------------------------- */

void fxb_job_free(fxb_job *j)
{
    if (j == NULL)
        return;
    fx_ingress_finish(&j->req);
    fx_buf_unref(j->backing);
    fx_stream_handle_unref(j->h);
    fxb_reply_unref(j->commit);
    fxb_conn_unref(j->conn);
    free(j);
}

/* A job for |count| payloads inside |backing| (ownership taken). */
static fxb_job *job_new(fxb_bidi *s, fx_stream_handle *h, fx_buf *backing,
                        const fx_wire_slice *payloads, uint32_t count)
{
    fxb_job *j = calloc(1, sizeof(*j) + (size_t)count * sizeof(fx_wire_slice));
    if (j == NULL) {
        fx_buf_unref(backing);
        return NULL;
    }
    j->payloads = (fx_wire_slice *)(j + 1);
    memcpy(j->payloads, payloads, (size_t)count * sizeof(*payloads));
    j->count = count;
    j->backing = backing;
    j->h = fx_stream_handle_ref(h);
    j->conn = s->conn;
    fxb_conn_ref(s->conn);
    j->w = fxb_worker_for(s->conn->b, h);
    j->arrived_ns = fx_loop_now(s->conn->loop);
    return j;
}

/* ---- admission (conn loop) ------------------------------------------------------------ */

static void on_ingress_resume(void *user)
{
    fxb_bidi *s = user;
    fx_loop_post(s->conn->loop, &s->resume_task);
}

static fx_ingress_target target_of(fxb_job *j)
{
    return (fx_ingress_target){.conn_budget = &j->conn->budget, .queue = &j->w->jobs};
}

static fx_ratelimit ingress_drop_rl = FX_RATELIMIT_INIT;

/* Runs admission for |j| whose reply slot (if acked) is |r|. Returns 0 when
 * the request is settled, 1 when parked (|s| stops reading). */
static int admit(fxb_bidi *s, fxb_job *j, fxb_reply *r)
{
    fx_ingress_target t = target_of(j);
    fxb_worker *w = j->w;
    size_t bytes = fx_buf_len(j->backing);
    bool commit = j->commit != NULL;
    fx_ingress_outcome o = fx_ingress_admit(&t, &j->req, fx_loop_now(s->conn->loop));
    switch (o) {
    case FX_INGRESS_ADMITTED: /* |j| belongs to the worker now */
        FX_COUNTER_INC(publish_accepted);
        FX_COUNTER_ADD(publish_bytes, bytes);
        fxb_worker_kick(w);
        if (r != NULL && !commit)
            reply_complete(r, NULL);
        break;
    case FX_INGRESS_DROPPED:
        FX_COUNTER_INC(publish_dropped);
        FX_LOG_RATELIMITED(&ingress_drop_rl, fx_loop_now(s->conn->loop), FX_LOG_WARN, "broker",
                           "ingress full: dropped an unacked publish conn=%llu",
                           (unsigned long long)s->conn->id);
        fxb_job_free(j);
        break;
    case FX_INGRESS_FAILED:
        FX_COUNTER_INC(publish_error);
        if (r != NULL)
            reply_complete(r, j->req.error);
        fxb_job_free(j);
        break;
    case FX_INGRESS_PARKED:
        s->parked = j;
        s->refs++; /* the resume task or the timer may still come */
        if (j->req.policy == FX_INGRESS_WAIT)
            fx_loop_timer_arm(s->conn->loop, &s->wait_timer, j->req.deadline_ns);
        return 1;
    }
    fxb_bidi_flush(s);
    return 0;
}

/* The slot of the parked job (the last queued reply, if it is acked). */
static fxb_reply *parked_reply(fxb_bidi *s)
{
    fxb_job *j = s->parked;
    if (j->commit != NULL)
        return j->commit;
    if (j->req.policy == FX_INGRESS_FAIL)
        return s->rtail;
    return NULL;
}

/* Settles a parked job after its admission ended (conn loop). */
static void unpark(fxb_bidi *s, fx_ingress_outcome o)
{
    fxb_job *j = s->parked;
    fxb_reply *r = parked_reply(s);
    s->parked = NULL;
    fx_loop_timer_cancel(s->conn->loop, &s->wait_timer);
    if (o == FX_INGRESS_FAILED) {
        FX_COUNTER_INC(publish_error);
        if (r != NULL)
            reply_complete(r, j->req.error);
        fxb_job_free(j);
    }
    fxb_bidi_unref(s); /* the park's reference; |s| has at least its own */
}

void fxb_bidi_resume(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_bidi *s = user;
    fxb_job *j = s->parked;
    if (j == NULL)
        return;
    fxb_reply *r = parked_reply(s);
    s->parked = NULL;
    fx_loop_timer_cancel(l, &s->wait_timer);
    int rv = admit(s, j, r); /* after close, admit reports FAILED (cancelled) */
    if (rv == 1) {
        s->refs--; /* re-parked: admit took a new reference, keep just one */
        return;
    }
    bool closed = s->closed;
    fxb_bidi_unref(s);
    if (!closed)
        fxb_bidi_continue(s);
}

void fxb_bidi_wait_expired(fx_loop *l, fx_timer *tm, void *user)
{
    (void)l;
    (void)tm;
    fxb_bidi *s = user;
    if (s->parked == NULL)
        return;
    fx_ingress_target t = target_of(s->parked);
    fx_ingress_outcome o = fx_ingress_cancel(&t, &s->parked->req);
    if (o != FX_INGRESS_FAILED)
        return; /* a resume is on its way; admit will report the timeout */
    s->refs++;
    unpark(s, o);
    fxb_bidi_continue(s);
    fxb_bidi_unref(s);
}

void fxb_publish_cancel_parked(fxb_bidi *s)
{
    fx_ingress_target t = target_of(s->parked);
    fx_ingress_outcome o = fx_ingress_cancel(&t, &s->parked->req);
    if (o == FX_INGRESS_FAILED)
        unpark(s, o);
    /* else the resume task runs later, sees |closed| and settles the job */
}

/* Queues a publish of |count| payloads in |backing| (taken) to |h|. */
static int submit(fxb_bidi *s, fx_stream_handle *h, fx_buf *backing, const fx_wire_slice *payloads,
                  uint32_t count, bool acked, bool binary, uint64_t request_id)
{
    const fx_broker_opts *o = &s->conn->b->o;
    fxb_job *j = job_new(s, h, backing, payloads, count);
    if (j == NULL) {
        fxb_bidi_fail(s, "out of memory for a publish");
        return -1;
    }
    fxb_reply *r = NULL;
    if (acked && (r = reply_new(s, binary, request_id)) == NULL) {
        fxb_job_free(j);
        fxb_bidi_fail(s, "out of memory for a reply");
        return -1;
    }
    if (r != NULL && o->ack_on_commit) {
        atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
        j->commit = r;
    }
    fx_ingress_policy p = fx_ingress_policy_for(acked, o->ack_on_commit, o->pub_ingress_wait);
    /* A frame with a body had its bytes reserved at its header: its payload
     * copy never exceeds that body, and the job is charged the reservation
     * alone. Topping it up here with the slice table could wait behind a
     * header that waits for this very reservation (the budget is FIFO). */
    size_t nbytes = fx_buf_len(backing);
    if (s->resv.budget == NULL)
        nbytes += (size_t)count * sizeof(fx_wire_slice);
    fx_ingress_req_init(&j->req, j, nbytes, p, o->publish_queue_wait_timeout_ns, on_ingress_resume,
                        s);
    /* The frame's bytes were reserved at its header: the job keeps them. */
    fxb_bidi_adopt_reservation(s, &j->req);
    return admit(s, j, r);
}

/* An immediate answer to an acked request (resolve errors, empty batches). */
static void answer_now(fxb_bidi *s, bool binary, uint64_t request_id, const char *err)
{
    fxb_reply *r = reply_new(s, binary, request_id);
    if (r == NULL) {
        fxb_bidi_fail(s, "out of memory for a reply");
        return;
    }
    reply_complete(r, err);
    fxb_bidi_flush(s);
}

/* While the broker drains it takes no new publish: an acked one is answered
 * "broker shutting down", an unacked one is dropped; both are counted.
 * Returns true when the publish was refused. */
static bool refuse_draining(fxb_bidi *s, bool acked, bool binary, uint64_t request_id)
{
    fx_broker *b = s->conn->b;
    if (!fxb_is_draining(b))
        return false;
    atomic_fetch_add_explicit(&b->drain_refused, 1, memory_order_relaxed);
    if (acked) {
        FX_COUNTER_INC(publish_error);
        answer_now(s, binary, request_id, FXB_SHUTDOWN_TEXT);
    } else {
        FX_COUNTER_INC(publish_dropped);
    }
    return true;
}

static bool tenant_is(const fxb_bidi *s, fx_wire_slice t)
{
    return strlen(s->tenant) == t.len && memcmp(s->tenant, t.ptr, t.len) == 0;
}

static void free_body(void *data, size_t len, void *user)
{
    (void)len, (void)user;
    free(data);
}

/* The batch's bytes as a buffer the ring can keep: the decoder's own body
 * buffer when the frame arrived in pieces (the common case: a batch spans
 * many datagrams), taken over without a copy; else a copy of the body, which
 * points into the connection's receive data. Returns 0 or -ENOMEM. */
static int batch_backing(fxb_bidi *s, const fx_frame *f, fx_buf **pb)
{
    uint8_t *owned = fx_frame_decoder_take(&s->dec, f);
    if (owned == NULL)
        return fx_buf_new_copy(pb, f->body, f->len);
    int rv = fx_buf_wrap(pb, owned, f->len, free_body, NULL);
    if (rv != 0)
        free(owned);
    return rv;
}

int fxb_publish_binary(fxb_bidi *s, const fx_frame *f)
{
    bool acked = f->kind == FX_BODY_PUBLISH_BATCH_ACKED;
    uint64_t rid = 0;
    fx_wire_ack mode;
    fx_wire_err err;
    if (acked && fx_publish_acked_prefix_decode(f->body, f->len, &rid, &mode, &err) != 0) {
        fxb_bidi_fail(s, err.msg);
        return -1;
    }
    if (refuse_draining(s, acked, true, rid))
        return 0;
    fx_buf *backing;
    if (batch_backing(s, f, &backing) != 0) {
        fxb_bidi_fail(s, "out of memory for a publish");
        return -1;
    }
    fx_wire_publish_batch pb;
    if (fx_publish_batch_decode(f->hdr.flags, fx_buf_data(backing), f->len, &pb, &err) != 0) {
        fx_buf_unref(backing);
        if (!acked) {
            fxb_bidi_fail(s, err.msg);
            return -1;
        }
        answer_now(s, true, rid, "malformed publish batch");
        return 0;
    }
    int rv = 0;
    fx_stream_handle *h;
    fx_registry_err rerr;
    if (!tenant_is(s, pb.tenant)) {
        fx_buf_unref(backing);
        fxb_bidi_error(s, "tenant mismatch", true);
        rv = -1;
    } else if (fxb_bidi_resolve(s, FX_BROKER_AUTH_PUBLISH, pb.tenant, pb.ns, pb.stream, &h,
                                &rerr) != 0) {
        /* Unacked: nothing to answer (a forbidden one is counted and logged). */
        fx_buf_unref(backing);
        FX_COUNTER_INC(publish_error);
        if (acked)
            answer_now(s, true, rid, rerr.msg);
    } else if (pb.count == 0) {
        fx_buf_unref(backing);
        if (acked)
            answer_now(s, true, rid, NULL);
    } else {
        rv = submit(s, h, backing, pb.payloads, pb.count, acked, true, rid);
    }
    fx_publish_batch_deinit(&pb);
    return rv;
}

/* Copies the payloads of a decoded JSON publish into one buffer. */
static int json_payloads(const fx_msg *m, fx_buf **pb, fx_wire_slice *slices, uint32_t count)
{
    const fx_msg_bytes *src = m->type == FX_MSG_PUBLISH ? &m->payload : m->payloads;
    size_t total = 0;
    for (uint32_t i = 0; i < count; i++)
        total += src[i].len;
    int rv = fx_buf_new(pb, total);
    if (rv != 0)
        return rv;
    uint8_t *p = fx_buf_data_mut(*pb);
    for (uint32_t i = 0; i < count; i++) {
        if (src[i].len > 0)
            memcpy(p, src[i].p, src[i].len);
        slices[i] = (fx_wire_slice){p, src[i].len};
        p += src[i].len;
    }
    return 0;
}

static fx_wire_slice str_slice(const char *s)
{
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

int fxb_publish_json(fxb_bidi *s, const fx_msg *m)
{
    bool acked = fx_msg_effective_ack(m) != FX_WIRE_ACK_NONE;
    bool single = m->type == FX_MSG_PUBLISH;
    if (acked && !m->has_request_id) {
        fxb_bidi_error(s,
                       single ? "missing request_id for acked publish"
                              : "missing request_id for acked publish batch",
                       false);
        return 0;
    }
    if (refuse_draining(s, acked, false, m->request_id))
        return 0;
    fx_stream_handle *h;
    fx_registry_err rerr;
    if (fxb_bidi_resolve(s, FX_BROKER_AUTH_PUBLISH, str_slice(m->tenant_id), str_slice(m->ns),
                         str_slice(m->stream), &h, &rerr) != 0) {
        FX_COUNTER_INC(publish_error);
        if (acked)
            answer_now(s, false, m->request_id, rerr.msg);
        else
            fxb_bidi_error(s, rerr.msg, false);
        return 0;
    }
    size_t count = single ? 1 : m->n_payloads;
    if (count == 0) {
        if (acked)
            answer_now(s, false, m->request_id, NULL);
        return 0;
    }
    if (count > UINT32_MAX) {
        fxb_bidi_fail(s, "too many payloads");
        return -1;
    }
    fx_wire_slice *slices = malloc(count * sizeof(*slices));
    fx_buf *backing = NULL;
    if (slices == NULL || json_payloads(m, &backing, slices, (uint32_t)count) != 0) {
        free(slices);
        fxb_bidi_fail(s, "out of memory for a publish");
        return -1;
    }
    int rv = submit(s, h, backing, slices, (uint32_t)count, acked, false, m->request_id);
    free(slices);
    return rv;
}

/* ---- worker ------------------------------------------------------------------------ */

static void job_complete(fxb_job *j, int rv, uint64_t now)
{
    if (rv == 0) {
        FX_COUNTER_INC(publish_ok);
        FX_HIST_OBSERVE(publish_latency_ns, now > j->arrived_ns ? now - j->arrived_ns : 0);
    } else {
        FX_COUNTER_INC(publish_error);
        FX_LOG_WARN("broker", "append to stream %llu failed: %s",
                    (unsigned long long)fx_stream_handle_id(j->h), fx_strerror(rv));
    }
    fxb_reply *r = j->commit;
    if (r != NULL) {
        if (rv != 0)
            snprintf(r->errbuf, sizeof(r->errbuf), "publish failed: %s", fx_strerror(rv));
        reply_complete(r, rv == 0 ? NULL : r->errbuf);
        j->commit = NULL;
        if (!fx_loop_post(r->loop, &r->task))
            fxb_reply_unref(r); /* cannot be pending twice: the slot completes once */
    }
    fxb_job_free(j);
}

/* Appends and fans out one job. Returns false when the fanout parked. */
static bool job_run(fxb_worker *w, fxb_job *j, uint64_t now)
{
    fx_stream *st;
    if (!fx_stream_handle_is_active(j->h)) {
        /* Deleted after admission. Its worker ends the stream only after
         * the jobs queued before that (control.c), so a job that finds the
         * stream not ended yet was admitted first: its events still go to
         * the subscribers there are. After the end, or with no stream state
         * here (nobody subscribed), it is refused. */
        st = fxb_worker_stream_if_any(w, j->h);
        if (st == NULL || fx_stream_handle_is_ended(j->h)) {
            job_complete(j, FX_ENOSTREAM, now);
            return true;
        }
    } else {
        st = fxb_worker_stream(w, j->h);
    }
    if (st == NULL) {
        job_complete(j, -ENOMEM, now);
        return true;
    }
    fx_fanout_result res;
    int rv = fx_stream_publish(st, j->backing, j->payloads, j->count, now, &res);
    if (rv == -EAGAIN) {
        w->parked_job = j;
        w->parked_stream = st;
        return false;
    }
    job_complete(j, rv, now);
    return true;
}

/* Counts a completed job; a deleted stream may have been waiting for it. */
static void job_done(fxb_worker *w)
{
    w->jobs_done++;
    if (w->ends != NULL)
        fxb_worker_run_due_ends(w);
}

void fxb_worker_drain(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_worker *w = user;
    uint64_t now = fx_loop_now(l);
    for (int i = 0; i < FXB_WORKER_BATCH; i++) {
        if (w->parked_job != NULL)
            return; /* the resume task continues */
        void *item;
        if (fx_queue_pop(&w->jobs, &item) != 0)
            return;
        if (job_run(w, item, now))
            job_done(w);
    }
    fx_loop_post(l, &w->doorbell); /* more may wait: let other tasks run first */
}

void fxb_worker_resume(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_worker *w = user;
    if (w->parked_job == NULL)
        return;
    fx_fanout_result res;
    uint64_t now = fx_loop_now(l);
    int rv = fx_stream_resume(w->parked_stream, now, &res);
    if (rv == -EAGAIN)
        return;
    fxb_job *j = w->parked_job;
    w->parked_job = NULL;
    w->parked_stream = NULL;
    job_complete(j, rv, now);
    job_done(w);
    fx_loop_post(l, &w->doorbell);
}
