/* The connection loop's side of publish admission (checkpoints 3 and 4):
 * publish jobs, their admission through the ingress machine (ingress.h) to
 * the worker's queue, the parked job's resume and deadline, and merging the
 * binary publish frames of one read into one job. Connection loop (the
 * budgets and the worker queue are shared; their waiters resume us by
 * callback). */
#include "broker/admission.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/bidi_life.h"
#include "broker/broker_internal.h"
#include "broker/conn_life.h"
#include "broker/job.h"
#include "broker/reply.h"
#include "broker/resv.h"
#include "broker/worker.h"
#include "cluster/cluster.h"
#include "felix/error.h"

/* ---- publish jobs ------------------------------------------------------------------------ */

/* Memory a published message costs besides its payload until its envelope
 * exists: one slice in the decoder's table, the job's and the envelope's. */
#define FXB_MSG_OVERHEAD (3 * sizeof(fx_wire_slice))

/* A job for |count| payloads inside |backing| (ownership taken), with room
 * for |nacks| ack slots. */
static fxb_job *job_new(fxb_bidi *s, fx_stream_handle *h, fx_buf *backing,
                        const fx_wire_slice *payloads, uint32_t count, uint32_t nacks)
{
    fxb_job *j = calloc(1, sizeof(*j) + (size_t)count * sizeof(fx_wire_slice) +
                               (size_t)nacks * sizeof(fxb_reply *));
    if (j == NULL) {
        fx_buf_unref(backing);
        return NULL;
    }
    j->payloads = (fx_wire_slice *)(j + 1);
    memcpy(j->payloads, payloads, (size_t)count * sizeof(*payloads));
    j->acks = (fxb_reply **)(j->payloads + count);
    j->count = count;
    j->nreq = 1;
    j->payload_bytes = fx_buf_len(backing);
    j->backing = backing;
    j->h = fx_stream_handle_ref(h);
    j->conn = s->conn;
    fxb_conn_ref(s->conn);
    j->w = fxb_worker_for(s->conn->b, h);
    j->arrived_ns = fx_loop_now(s->conn->loop);
    /* A cluster's in-memory stream may move: a move waits for the jobs
     * counted here before it reads the tail (fx_broker_freeze_stream). */
    if (s->conn->b->o.cluster != NULL && !fx_stream_handle_is_durable(h)) {
        j->counted = true;
        fx_stream_handle_jobs_add(h, 1);
    }
    return j;
}

/* ---- admission of a job (connection loop) ------------------------------------------------ */

void fxb_admit_init(fxb_bidi *s, fx_task_cb on_resume, fx_timer_cb on_expired)
{
    fx_task_init(&s->admit.resume_task, on_resume, s);
    fx_timer_init(&s->admit.wait_timer, on_expired, s);
}

static void on_ingress_resume(void *user)
{
    fxb_bidi *s = user;
    fx_loop_post(s->conn->loop, &s->admit.resume_task);
}

fx_ingress_target fxb_ingress_job_target(fxb_job *j)
{
    return (fx_ingress_target){.conn_budget = &j->conn->budget, .queue = &j->w->jobs};
}

static fx_ratelimit ingress_drop_rl = FX_RATELIMIT_INIT;

/* Answers every ack slot of |j| with |err| (NULL: ok). */
static void answer_acks(fxb_reply **acks, uint32_t n, const char *err)
{
    for (uint32_t i = 0; i < n; i++)
        fxb_reply_complete(acks[i], err);
}

static fx_ratelimit wait_timer_rl = FX_RATELIMIT_INIT;

/* A job parked under the Wait policy needs its deadline timer, or nothing
 * but a resume would ever end the wait. When the timer cannot be armed (out
 * of memory, counted) the wait ends now: returns false with the job's
 * admission failed (|j->req.error| says why), unless a resume is already on
 * its way, which settles the job as usual. */
static bool wait_timer_set(fxb_bidi *s, const fx_ingress_target *t, fxb_job *j)
{
    fx_loop *l = s->conn->loop;
    if (j->req.policy != FX_INGRESS_WAIT ||
        fx_loop_timer_arm(l, &s->admit.wait_timer, j->req.deadline_ns) == 0)
        return true;
    FX_COUNTER_INC(broker_timer_arm_failures);
    FX_LOG_RATELIMITED(&wait_timer_rl, fx_loop_now(l), FX_LOG_ERROR, "broker",
                       "conn %llu: out of memory arming the publish wait timer: %u publishes "
                       "failed at once",
                       (unsigned long long)s->conn->id, (unsigned)j->nreq);
    if (fx_ingress_cancel(t, &j->req) != FX_INGRESS_FAILED)
        return true;
    j->req.error = FXB_WAIT_TIMER_TEXT;
    return false;
}

/* Acks answered at admission are the stream's, not the job's: keeps them
 * where the worker cannot free them (|one|, or the merge scratch, which has
 * room). Returns where |j|'s acks are. */
static fxb_reply **admit_acks(fxb_bidi *s, fxb_job *j, fxb_reply **one)
{
    fxb_reply **acks = j->acks;
    uint32_t nacks = j->nacks;
    if (!j->commit && nacks > 0) {
        acks = nacks == 1 ? one : s->admit.merge.acks;
        memcpy(acks, j->acks, (size_t)nacks * sizeof(*acks));
    }
    return acks;
}

/* Counts, logs and frees |j|, which a full DropNew queue refused. */
static void job_dropped(fxb_bidi *s, fxb_job *j)
{
    uint32_t nreq = j->nreq;
    FX_COUNTER_ADD(publish_dropped, nreq);
    FX_COUNTER_ADD(ingress_dropped_messages, j->count);
    FX_LOG_RATELIMITED(&ingress_drop_rl, fx_loop_now(s->conn->loop), FX_LOG_WARN, "broker",
                       "ingress full: dropped %u unacked publishes conn=%llu", (unsigned)nreq,
                       (unsigned long long)s->conn->id);
    fxb_job_free(j);
}

/* Runs admission for |j|. Returns 0 when its requests are settled, 1 when
 * parked (|s| stops reading). */
int fxb_ingress_job_admit(fxb_bidi *s, fxb_job *j)
{
    fx_ingress_target t = fxb_ingress_job_target(j);
    fxb_worker *w = j->w;
    size_t bytes = j->payload_bytes;
    uint32_t nreq = j->nreq;
    bool commit = j->commit;
    fxb_reply *one;
    fxb_reply **acks = admit_acks(s, j, &one);
    uint32_t nacks = j->nacks;
    if (j->counted && fx_stream_handle_moving(j->h) != FX_HANDLE_SERVING) {
        /* Its stream is moving (counted first, then read: a move that set
         * the state before sees this job, or this job sees the state):
         * refused before any ack, not appended, retryable. */
        if (s->conn->b->o.cluster != NULL)
            fx_cluster_count_moving_refused(s->conn->b->o.cluster);
        if (nacks > 0)
            FX_COUNTER_ADD(publish_error, nreq);
        else
            FX_COUNTER_ADD(publish_dropped, nreq); /* unacked: nobody to tell */
        char err[160];
        snprintf(err, sizeof(err), "publish failed: %s", fx_strerror(FX_EMOVING));
        answer_acks(acks, nacks, err);
        fxb_job_free(j);
        fxb_bidi_flush(s);
        return 0;
    }
    fx_ingress_outcome o = fx_ingress_admit(&t, &j->req, fx_loop_now(s->conn->loop));
    if (o == FX_INGRESS_PARKED && !wait_timer_set(s, &t, j))
        o = FX_INGRESS_FAILED;
    switch (o) {
    case FX_INGRESS_ADMITTED: /* |j| belongs to the worker now */
        FX_COUNTER_ADD(publish_accepted, nreq);
        FX_COUNTER_ADD(publish_bytes, bytes);
        fxb_worker_kick(w);
        if (!commit)
            answer_acks(acks, nacks, NULL);
        break;
    case FX_INGRESS_DROPPED:
        job_dropped(s, j);
        break;
    case FX_INGRESS_FAILED:
        FX_COUNTER_ADD(publish_error, nreq);
        answer_acks(acks, nacks, j->req.error);
        fxb_job_free(j);
        break;
    case FX_INGRESS_PARKED:
        s->admit.parked = j;
        s->refs++; /* the resume task or the timer may still come */
        return 1;
    }
    fxb_bidi_flush(s);
    return 0;
}

/* Settles a parked job after its admission ended (conn loop). Only Wait and
 * Backpressure park: the job's acks, if any, are its commit acks. */
void fxb_ingress_unpark(fxb_bidi *s, fx_ingress_outcome o)
{
    fxb_job *j = s->admit.parked;
    s->admit.parked = NULL;
    fx_loop_timer_cancel(s->conn->loop, &s->admit.wait_timer);
    if (o == FX_INGRESS_FAILED) {
        FX_COUNTER_ADD(publish_error, j->nreq);
        answer_acks(j->acks, j->nacks, j->req.error);
        fxb_job_free(j);
    }
    fxb_bidi_unref(s); /* the park's reference; |s| has at least its own */
}

void fxb_ingress_cancel_parked(fxb_bidi *s)
{
    fx_ingress_target t = fxb_ingress_job_target(s->admit.parked);
    fx_ingress_outcome o = fx_ingress_cancel(&t, &s->admit.parked->req);
    if (o == FX_INGRESS_FAILED)
        fxb_ingress_unpark(s, o);
    /* else the resume task runs later, sees |closed| and settles the job */
}

/* Whether acks of publishes to |h| wait for the append: ack_on_commit, and a
 * durable stream always (its append and flush). */
static bool acks_on_commit(const fx_broker_opts *o, const fx_stream_handle *h)
{
    return o->ack_on_commit || fx_stream_handle_is_durable(h);
}

/* The bytes a job of |count| messages with |payload| bytes is charged when
 * |resv| (budget NULL: none) is the reservation it adopts: see
 * submit_req. */
static size_t job_charge(size_t payload, uint32_t count, const fx_permit *resv)
{
    size_t ovh = (size_t)count * FXB_MSG_OVERHEAD;
    return resv->budget == NULL || ovh > resv->n / 2 ? payload + ovh : payload;
}

/* Makes |r| an ack of |j|: answered at admission, or with ack_on_commit
 * after the append (the job holds a reference until then). */
static void job_add_ack(fxb_job *j, fxb_reply *r, const fx_broker_opts *o, uint64_t now)
{
    if (acks_on_commit(o, j->h)) {
        r->deadline_ns = now + o->ack_wait_timeout_ns;
        atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
        j->commit = true;
    }
    j->acks[j->nacks++] = r;
}

/* The job of one publish request, with its ack slot when |acked|. Returns
 * NULL when |s| failed (out of memory). */
static fxb_job *submit_job(fxb_bidi *s, fx_stream_handle *h, fx_buf *backing,
                           const fx_wire_slice *payloads, uint32_t count, bool acked, bool binary,
                           uint64_t request_id)
{
    fxb_job *j = job_new(s, h, backing, payloads, count, acked ? 1 : 0);
    if (j == NULL) {
        fxb_bidi_fail(s, "out of memory for a publish");
        return NULL;
    }
    fxb_reply *r = NULL;
    if (acked && (r = fxb_reply_new(s, binary, request_id)) == NULL) {
        fxb_job_free(j);
        fxb_bidi_fail(s, "out of memory for a reply");
        return NULL;
    }
    if (r != NULL)
        job_add_ack(j, r, &s->conn->b->o, fx_loop_now(s->conn->loop));
    return j;
}

/* Sets up |j|'s admission request: its policy, the bytes it is charged and
 * the frame's reservation it keeps. */
static void submit_req(fxb_bidi *s, fxb_job *j, fx_stream_handle *h, bool acked, uint32_t count)
{
    const fx_broker_opts *o = &s->conn->b->o;
    /* An idempotent batch's ack is a commit ack whatever ack_on_commit
     * says: it waits for room like one. */
    fx_ingress_policy p =
        fx_ingress_policy_for(acked, j->idem.on || acks_on_commit(o, h), o->pub_ingress_wait);
    /* A frame with a body had its bytes reserved at its header: its payload
     * copy never exceeds that body, and the job is charged the reservation
     * alone unless its messages are so small that their slice tables (the
     * decoder's, the job's, the envelope's) outweigh half of it: then it is
     * charged payload plus FXB_MSG_OVERHEAD per message (16 MiB of empty
     * messages holds ~200 MiB of tables). A top-up that must wait gives the
     * reservation back first (stage_bytes). */
    size_t nbytes = job_charge(fx_buf_len(j->backing), count, &s->resv.permit);
    fx_ingress_req_init(&j->req, j, nbytes, p, o->publish_queue_wait_timeout_ns, on_ingress_resume,
                        s);
    /* The frame's bytes were reserved at its header: the job keeps them. */
    fxb_ingress_resv_adopt(s, &j->req);
}

/* Queues a publish of |count| payloads in |backing| (taken) to |h|. Frames
 * merged before it go first; when they park, this one waits behind them. */
int fxb_ingress_submit(fxb_bidi *s, fx_stream_handle *h, fx_buf *backing,
                       const fx_wire_slice *payloads, uint32_t count, bool acked, bool binary,
                       uint64_t request_id)
{
    int before = fxb_ingress_flush(s);
    if (before < 0) {
        fx_buf_unref(backing);
        return -1;
    }
    fxb_job *j = submit_job(s, h, backing, payloads, count, acked, binary, request_id);
    if (j == NULL)
        return -1;
    submit_req(s, j, h, acked, count);
    if (before == 1) {
        s->admit.deferred = j;
        return 1;
    }
    return fxb_ingress_job_admit(s, j);
}

int fxb_ingress_submit_idem(fxb_bidi *s, fx_stream_handle *h, fx_buf *backing,
                            const fx_wire_slice *payloads, uint32_t count, uint64_t request_id,
                            const fxb_job_idem *idem)
{
    int before = fxb_ingress_flush(s);
    if (before < 0) {
        fx_buf_unref(backing);
        return -1;
    }
    fxb_job *j = job_new(s, h, backing, payloads, count, 1);
    if (j == NULL) {
        fxb_bidi_fail(s, "out of memory for a publish");
        return -1;
    }
    fxb_reply *r = fxb_reply_new(s, false, request_id);
    if (r == NULL) {
        fxb_job_free(j);
        fxb_bidi_fail(s, "out of memory for a reply");
        return -1;
    }
    /* Always a commit ack: the answer depends on the worker's check. */
    r->deadline_ns = fx_loop_now(s->conn->loop) + s->conn->b->o.ack_wait_timeout_ns;
    atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
    j->commit = true;
    j->acks[j->nacks++] = r;
    j->idem = *idem;
    j->idem.on = true;
    submit_req(s, j, h, true, count); /* after |idem|: its policy is a commit ack's */
    if (before == 1) {
        s->admit.deferred = j;
        return 1;
    }
    return fxb_ingress_job_admit(s, j);
}

/* ---- merging the frames of one read (connection loop) ------------------------------------ */

/* Room for |nparts| parts (and acks) and |nsl| slices in the scratch. */
static int merge_room(fxb_merge *m, uint32_t nparts, uint32_t nsl)
{
    if (nparts > m->cap_parts) {
        uint32_t cap = m->cap_parts ? m->cap_parts * 2 : 16;
        while (cap < nparts)
            cap *= 2;
        fxb_merge_part *p = realloc(m->parts, (size_t)cap * sizeof(*p));
        if (p == NULL)
            return -ENOMEM;
        m->parts = p;
        fxb_reply **a = realloc(m->acks, (size_t)cap * sizeof(*a));
        if (a == NULL)
            return -ENOMEM;
        m->acks = a;
        m->cap_parts = cap;
    }
    if (nsl > m->cap_sl) {
        uint32_t cap = m->cap_sl ? m->cap_sl * 2 : 64;
        while (cap < nsl)
            cap *= 2;
        fx_wire_slice *p = realloc(m->sl, (size_t)cap * sizeof(*p));
        if (p == NULL)
            return -ENOMEM;
        m->sl = p;
        m->cap_sl = cap;
    }
    return 0;
}

/* A frame that arrived whole in the input joins the merge when it is for the
 * same stream and ack kind and the merge stays within its bounds. */
static bool merge_fits(const fxb_merge *m, const fx_stream_handle *h, const fx_frame *f,
                       uint32_t count, size_t len, bool acked)
{
    return m->h == h && m->acked == acked && !f->buffered && m->nreq < FXB_MERGE_MAX_FRAMES &&
           m->nsl + count <= FXB_MERGE_MAX_MSGS && m->bytes + len <= FXB_MERGE_MAX_BYTES;
}

/* The frame's header reservation joins the merge's (both are taken from the
 * connection's budget, so they add up). */
static void merge_resv(fxb_bidi *s)
{
    fxb_merge *m = &s->admit.merge;
    if (s->resv.permit.budget == NULL)
        return;
    if (m->held.budget == NULL)
        m->held = s->resv.permit;
    else
        m->held.n += s->resv.permit.n;
    s->resv.permit = (fx_permit){0};
}

/* Appends frame |f| (decoded in |pb|) to the merge, with its ack slot queued
 * now, in request order. Returns 0 or -1 (|s| failed). */
static int merge_put(fxb_bidi *s, fx_stream_handle *h, const fx_frame *f,
                     const fx_wire_publish_batch *pb, bool acked, uint64_t request_id)
{
    fxb_merge *m = &s->admit.merge;
    if (merge_room(m, m->nreq + 1, m->nsl + pb->count) != 0) {
        fxb_bidi_fail(s, "out of memory for a publish");
        return -1;
    }
    fxb_reply *r = NULL;
    if (acked && (r = fxb_reply_new(s, true, request_id)) == NULL) {
        fxb_bidi_fail(s, "out of memory for a reply");
        return -1;
    }
    if (m->nreq == 0) {
        m->h = fx_stream_handle_ref(h);
        m->acked = acked;
        m->owned = fx_frame_decoder_take(&s->dec, f); /* NULL unless the body was buffered */
        m->owned_len = f->len;
    }
    const uint8_t *p = pb->payloads[0].ptr;
    size_t len = (size_t)(f->body + f->len - p);
    m->parts[m->nreq] = (fxb_merge_part){.p = p, .len = len, .first = m->nsl};
    m->acks[m->nreq] = r;
    for (uint32_t i = 0; i < pb->count; i++)
        m->payload_bytes += pb->payloads[i].len;
    memcpy(m->sl + m->nsl, pb->payloads, (size_t)pb->count * sizeof(*m->sl));
    m->nsl += pb->count;
    m->bytes += len;
    m->nreq++;
    merge_resv(s);
    return 0;
}

static void free_owned(void *data, size_t len, void *user)
{
    (void)len, (void)user;
    free(data);
}

/* The merged payloads in one buffer the ring can keep: the first frame's own
 * body buffer when it is alone and the decoder had to buffer it (no copy),
 * else one copy of every frame's payload region. |m->sl| is pointed there. */
static int merge_backing(fxb_merge *m, fx_buf **pb)
{
    if (m->nreq == 1 && m->owned != NULL) {
        int rv = fx_buf_wrap(pb, m->owned, m->owned_len, free_owned, NULL);
        if (rv == 0)
            m->owned = NULL;
        return rv;
    }
    int rv = fx_buf_new(pb, m->bytes);
    if (rv != 0)
        return rv;
    uint8_t *base = fx_buf_data_mut(*pb);
    size_t off = 0;
    for (uint32_t k = 0; k < m->nreq; k++) {
        const fxb_merge_part *pt = &m->parts[k];
        uint32_t end = k + 1 < m->nreq ? m->parts[k + 1].first : m->nsl;
        if (pt->len > 0)
            memcpy(base + off, pt->p, pt->len);
        for (uint32_t i = pt->first; i < end; i++)
            m->sl[i].ptr = base + off + (m->sl[i].ptr - pt->p);
        off += pt->len;
    }
    return 0;
}

/* Prepares the admission of |j| made from the merge, which hands over the
 * frames' reservations (see fxb_ingress_submit for the byte charge). */
static void merge_admission(fxb_bidi *s, fxb_job *j)
{
    fxb_merge *m = &s->admit.merge;
    const fx_broker_opts *o = &s->conn->b->o;
    size_t nbytes = job_charge(fx_buf_len(j->backing), m->nsl, &m->held);
    fx_ingress_policy p =
        fx_ingress_policy_for(m->acked, acks_on_commit(o, j->h), o->pub_ingress_wait);
    fx_ingress_req_init(&j->req, j, nbytes, p, o->publish_queue_wait_timeout_ns, on_ingress_resume,
                        s);
    j->req.requests = m->nreq;
    FX_GAUGE_SUB(ingress_reserved_bytes, (int64_t)m->held.n);
    fx_ingress_req_adopt(&j->req, &m->held);
}

/* Makes the job of the merged frames and empties the merge. Returns NULL
 * when memory ran out (|s| failed, the frames' acks answered). */
static fxb_job *merge_job(fxb_bidi *s)
{
    fxb_merge *m = &s->admit.merge;
    uint32_t nacks = m->acked ? m->nreq : 0;
    fx_buf *backing = NULL;
    fxb_job *j = NULL;
    if (merge_backing(m, &backing) == 0)
        j = job_new(s, m->h, backing, m->sl, m->nsl, nacks); /* takes |backing| */
    if (j == NULL) {
        answer_acks(m->acks, nacks, "out of memory for a publish");
        fxb_bidi_fail(s, "out of memory for a publish");
        fxb_merge_reset(s);
        return NULL;
    }
    j->nreq = m->nreq;
    j->payload_bytes = m->payload_bytes;
    uint64_t now = fx_loop_now(s->conn->loop);
    for (uint32_t i = 0; i < nacks; i++)
        job_add_ack(j, m->acks[i], &s->conn->b->o, now);
    merge_admission(s, j);
    fxb_merge_reset(s);
    return j;
}

int fxb_ingress_flush(fxb_bidi *s)
{
    if (s->admit.merge.nreq == 0)
        return 0;
    fxb_job *j = merge_job(s);
    return j == NULL ? -1 : fxb_ingress_job_admit(s, j);
}

int fxb_ingress_add(fxb_bidi *s, fx_stream_handle *h, const fx_frame *f,
                    const fx_wire_publish_batch *pb, bool acked, uint64_t request_id)
{
    fxb_merge *m = &s->admit.merge;
    size_t len = (size_t)(f->body + f->len - pb->payloads[0].ptr);
    if (m->nreq > 0 && !merge_fits(m, h, f, pb->count, len, acked)) {
        int rv = fxb_ingress_flush(s);
        if (rv < 0)
            return -1;
        if (rv == 1) { /* parked: this frame waits behind it, as its own job */
            if (merge_put(s, h, f, pb, acked, request_id) != 0)
                return -1;
            s->admit.deferred = merge_job(s);
            return s->admit.deferred != NULL ? 1 : -1;
        }
    }
    return merge_put(s, h, f, pb, acked, request_id);
}

int fxb_ingress_run_deferred(fxb_bidi *s)
{
    if (s->admit.parked != NULL)
        return 1;
    fxb_job *j = s->admit.deferred;
    if (j == NULL)
        return 0;
    s->admit.deferred = NULL;
    return fxb_ingress_job_admit(s, j);
}

void fxb_ingress_discard(fxb_bidi *s)
{
    uint64_t n = s->admit.merge.nreq;
    fxb_merge_reset(s);
    if (s->admit.deferred != NULL) {
        n += s->admit.deferred->nreq;
        fxb_job_free(s->admit.deferred);
        s->admit.deferred = NULL;
    }
    if (n > 0)
        FX_COUNTER_ADD(ingress_backpressure_cancelled, n);
}
