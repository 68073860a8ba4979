/* libfelix publish sender, on the client loop: drains each worker's queue
 * (checkpoint 2) onto its authed QUIC stream, merging what queued up behind
 * a frame still being written (coalesce.c), pairs the broker's answers with
 * requests and fails those unanswered in time. Loop thread only, but for
 * fxc_pub_init/deinit and the functions client.h marks "Any thread". */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "client/client.h"

/* ---- requests ------------------------------------------------------------------- */

void fxc_pub_req_unref(preq *r)
{
    if (r != NULL && atomic_fetch_sub(&r->refs, 1) == 1)
        free(r);
}

void fxc_pub_outstanding_done(fx_client *c, size_t n)
{
    if (atomic_fetch_sub(&c->outstanding, n) == n && atomic_load(&c->flushers) > 0) {
        pthread_mutex_lock(&c->mu);
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
}

/* Completes |r| with |rv| (and |msg| on failure), runs its callback, and
 * drops the loop's reference. */
static void req_finish(fx_client *c, preq *r, int rv, const char *msg)
{
    pthread_mutex_lock(&c->mu);
    r->rv = rv;
    snprintf(r->msg, sizeof(r->msg), "%s", msg != NULL ? msg : "");
    r->done = true;
    pthread_mutex_unlock(&c->mu);
    pthread_cond_broadcast(&c->cv); /* after the unlock: see wake_consumer */
    if (r->cb != NULL) {
        fxc_client_set_error(rv, "%s", r->msg);
        r->cb(r->user, rv);
    } else if (r->rcb != NULL) {
        fxc_client_set_error(rv, "%s", r->msg);
        fx_publish_result res = {0};
        if (rv == 0)
            res = (fx_publish_result){
                .offset = r->offset, .has_offset = r->has_offset, .duplicate = r->duplicate};
        r->rcb(r->user, rv, &res);
    }
    if (r->acked)
        fxc_pub_outstanding_done(c, 1);
    fxc_pub_req_unref(r);
}

/* Completes |r| and every request chained behind it (the publishes of one
 * merged frame) with the same result. */
static void req_finish_all(fx_client *c, preq *r, int rv, const char *msg)
{
    while (r != NULL) {
        preq *nx = r->grp;
        r->grp = NULL;
        req_finish(c, r, rv, msg);
        r = nx;
    }
}

static void ack_timer_arm(pworker *w)
{
    if (w->fhead == NULL) {
        fx_loop_timer_cancel(w->c->loop, &w->ack_timer);
        return;
    }
    if (fx_timer_is_armed(&w->ack_timer) && w->ack_timer.deadline_ns <= w->fhead->deadline_ns)
        return;
    int rv = fx_loop_timer_arm(w->c->loop, &w->ack_timer, w->fhead->deadline_ns);
    if (rv != 0)
        FX_LOG_ERROR("client", "cannot arm the publish ack timer: %s", fx_strerror(rv));
}

static void pending_add(pworker *w, preq *r)
{
    preq **b = &w->pending[r->request_id % FX_PENDING_BUCKETS];
    r->next = *b;
    *b = r;
    w->npending++;
    r->fnext = NULL;
    r->fprev = w->ftail;
    if (w->ftail != NULL)
        w->ftail->fnext = r;
    else
        w->fhead = r;
    w->ftail = r;
    if (w->fhead == r)
        ack_timer_arm(w);
}

static void fifo_unlink(pworker *w, preq *r)
{
    if (r->fprev != NULL)
        r->fprev->fnext = r->fnext;
    else
        w->fhead = r->fnext;
    if (r->fnext != NULL)
        r->fnext->fprev = r->fprev;
    else
        w->ftail = r->fprev;
    r->fnext = r->fprev = NULL;
}

static bool pending_has(const pworker *w, uint64_t id)
{
    for (const preq *r = w->pending[id % FX_PENDING_BUCKETS]; r != NULL; r = r->next)
        if (r->request_id == id)
            return true;
    return false;
}

static preq *pending_take(pworker *w, uint64_t id)
{
    for (preq **p = &w->pending[id % FX_PENDING_BUCKETS]; *p != NULL; p = &(*p)->next) {
        if ((*p)->request_id == id) {
            preq *r = *p;
            *p = r->next;
            w->npending--;
            fifo_unlink(w, r);
            return r;
        }
    }
    return NULL;
}

static void pending_fail_all(pworker *w, int rv, const char *msg)
{
    while (w->fhead != NULL) {
        preq *r = pending_take(w, w->fhead->request_id);
        req_finish_all(w->c, r, rv, msg);
    }
    fx_loop_timer_cancel(w->c->loop, &w->ack_timer);
}

/* The ack timeout: every request whose deadline passed fails with
 * FX_ETIMEDOUT; the broker may still append it (a late answer is logged
 * and ignored). */
static void ack_timer_fire(fx_loop *l, fx_timer *t, void *user)
{
    (void)t;
    pworker *w = user;
    uint64_t now = fx_loop_now(l);
    char msg[160];
    snprintf(msg, sizeof(msg), FX_PUB_ACK_TIMEOUT_FMT, w->c->o.publish_ack_timeout_ms);
    while (w->fhead != NULL && w->fhead->deadline_ns <= now) {
        preq *r = pending_take(w, w->fhead->request_id);
        req_finish_all(w->c, r, FX_ETIMEDOUT, msg);
    }
    ack_timer_arm(w);
}

/* ---- jobs ----------------------------------------------------------------------- */

/* The frame's last reference went (QUIC acknowledged it, its stream died, or
 * it was never sent): give the bytes back and finish an unacked async. */
static void job_release(void *data, size_t len, void *user)
{
    (void)data, (void)len;
    pjob *j = user;
    fx_client *c = j->c;
    fx_permit_release(&j->permit);
    /* Released because its connection was lost, not because QUIC saw the
     * broker acknowledge it: the broker may never have received it. */
    cconn *cc = j->sent_on;
    bool lost = cc != NULL && cc->gen != j->sent_gen;
    if (lost)
        atomic_fetch_add(&c->pub_lost, j->calls);
    if (lost) {
        req_finish_all(c, j->req, cc->close_rv, cc->close_text);
    } else {
        for (preq *r = j->req, *nx; r != NULL; r = nx) {
            nx = r->grp;
            r->grp = NULL;
            req_finish(c, r, r->rv, r->msg);
        }
    }
    fxc_pub_job_free(j);
    fxc_pub_outstanding_done(c, 1);
}

/* Makes the job's frame an fx_buf whose release returns the permit. */
static int job_wrap(pjob *j)
{
    return fx_buf_wrap(&j->buf, j->frame, j->len, job_release, j);
}

/* Drops the holder's reference on |j|: its fx_buf once wrapped for sending
 * (QUIC may still hold the frame), else |j| is released now. */
static void job_put(pjob *j)
{
    if (j->buf != NULL)
        fx_buf_unref(j->buf);
    else
        job_release(j->frame, j->len, j);
}

void fxc_pub_job_put(pjob *j)
{
    job_put(j);
}

void fxc_pub_job_absorb(pjob *m, pjob *parts)
{
    fx_client *c = m->c;
    m->permit = (fx_permit){.budget = parts->permit.budget, .n = 0};
    preq **tail = &m->req;
    /* The merged job is counted before its parts are released, so
     * fx_flush never sees zero in between. */
    atomic_fetch_add(&c->outstanding, 1);
    for (pjob *j = parts, *nx; j != NULL; j = nx) {
        nx = j->gnext;
        m->permit.n += j->permit.n;
        j->permit = (fx_permit){0};
        if (j->req != NULL) {
            *tail = j->req;
            tail = &j->req->grp;
            j->req = NULL;
        }
        job_put(j); /* nothing left to give back: frees the part */
    }
    *tail = NULL;
}

static void job_drop(void *item, void *user)
{
    (void)user;
    job_put(item);
}

/* Fails a job that will not be sent. */
static void job_fail(pjob *j, int rv, const char *msg)
{
    preq *r = j->req;
    if (r != NULL && r->acked) {
        j->req = NULL;
        req_finish_all(j->c, r, rv, msg);
        r = NULL; /* finished: possibly freed */
    }
    for (; r != NULL; r = r->grp) { /* unacked: job_release reports it */
        r->rv = rv;
        snprintf(r->msg, sizeof(r->msg), "%s", msg);
    }
    job_put(j);
}

typedef struct failwhy {
    int rv;
    const char *msg;
    bool count_lost;
} failwhy;

static void job_fail_cb(pjob *j, void *user)
{
    failwhy *f = user;
    if (f->count_lost && (j->req == NULL || !j->req->acked))
        atomic_fetch_add(&j->c->pub_lost, 1);
    job_fail(j, f->rv, f->msg);
}

/* ---- workers (loop) -------------------------------------------------------------- */

/* The close handshake of |w| is over: |rv| 0 when the broker finished its
 * side after handling everything sent before our FIN, else why it was cut
 * short (fx_client_close then reports it). */
static void fin_done(pworker *w, int rv)
{
    if (w->fin != FIN_WANT && w->fin != FIN_SENT)
        return;
    w->fin = FIN_DONE;
    fx_client *c = w->c;
    pthread_mutex_lock(&c->mu);
    if (rv != 0 && c->fin_rv == 0)
        c->fin_rv = rv;
    c->fin_left--;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Drops the kept frames of |w|'s producer (their requests are finished
 * or failed already): the release gives their budget bytes back. */
static void kept_release(pworker *w)
{
    pjob *k = fxc_idem_clear(&w->idem);
    while (k != NULL) {
        pjob *nx = k->knext;
        k->knext = NULL;
        fx_buf_unref(k->buf);
        k = nx;
    }
}

static void worker_fail(pworker *w, int rv, const char *msg)
{
    int zero = 0;
    atomic_compare_exchange_strong(&w->fail_rv, &zero, rv);
    w->state = 3;
    pending_fail_all(w, rv, msg);
    kept_release(w);
    if (w->held != NULL) {
        job_fail(w->held, rv, msg);
        w->held = NULL;
    }
    fxc_coalesce_drain(&w->group, job_fail_cb, &(failwhy){.rv = rv, .msg = msg});
    fx_loop_timer_cancel(w->c->loop, &w->linger);
    void *it;
    while (fx_queue_pop(&w->q, &it) == 0)
        job_fail(it, rv, msg);
    if (w->index == 0)
        fxc_client_on_first_auth(w->c, rv, 0, msg);
    fin_done(w, rv);
}

/* The connection was lost and a reconnect is scheduled: what the broker
 * had not answered fails with the reason; queued frames were never sent,
 * so they wait for the new connection (the worker re-opens and re-authenticates
 * its stream when it is ready). */
static void worker_lost(pworker *w, int rv, const char *msg)
{
    if (w->c->o.idempotent) {
        /* Idempotent: what the broker had not answered stays pending (its
         * ack timeout still runs) and its frames go again, the same bytes
         * under the same sequence, before anything newer. A producer_init
         * in flight is asked again. */
        fxc_idem *id = &w->idem;
        fxc_idem_rewind(id);
        for (pjob *k = id->khead; k != NULL; k = k->knext)
            id->resent++;
        id->init_rid = 0;
    } else {
        pending_fail_all(w, rv, msg);
    }
    fin_done(w, rv); /* what the broker had not handled may be lost */
    w->sid = -1;
    w->state = 0;
    fx_frame_decoder_deinit(&w->dec);
    fx_frame_decoder_init(&w->dec, w->c->o.max_frame_bytes);
}

static void worker_open(pworker *w)
{
    fx_client *c = w->c;
    cconn *cc = fxc_client_conn(c, w->index / c->o.publish_streams_per_conn);
    if (cc == NULL) {
        worker_fail(w, -ENOMEM, "out of memory");
        return;
    }
    w->conn = cc;
    if (cc->state == CS_CONNECTING || cc->state == CS_RETRY)
        return;
    if (cc->state == CS_CLOSED) {
        worker_fail(w, cc->close_rv, cc->close_text);
        return;
    }
    int rv = fx_quic_conn_open_bidi(cc->qc, w, &w->sid);
    if (rv == 0)
        rv = fxc_client_send_auth(cc, w->sid);
    if (rv != 0) {
        worker_fail(w, rv, fx_strerror(rv));
        return;
    }
    w->state = 1;
}

/* The queue is drained during the close handshake: our FIN follows the
 * last frame. */
static void send_fin(pworker *w)
{
    int rv = w->conn->qc != NULL ? fx_quic_stream_shutdown(w->conn->qc, w->sid) : FX_ECONNLOST;
    if (rv != 0) {
        worker_fail(w, rv, fx_strerror(rv));
        return;
    }
    w->fin = FIN_SENT;
}

/* After our FIN nothing more can be sent: a publish that raced with
 * fx_client_close past its check fails here, counted as lost. */
static void fail_after_fin(pworker *w)
{
    /* An acked publish gets the error instead of being counted as lost. */
    failwhy why = {.rv = FX_ECLOSED, .msg = "client closed", .count_lost = true};
    fxc_coalesce_drain(&w->group, job_fail_cb, &why);
    void *it;
    while (fx_queue_pop(&w->q, &it) == 0)
        job_fail_cb(it, &why);
}

/* Pops queued jobs into the group until it is full or the queue empty. */
static void fill_group(pworker *w)
{
    fxc_group *g = &w->group;
    if (g->next != NULL && g->head == NULL) {
        pjob *n = g->next;
        g->next = NULL;
        fxc_coalesce_add(g, n);
    }
    while (!fxc_coalesce_full(g)) {
        void *it;
        if (fx_queue_pop(&w->q, &it) != 0)
            return;
        if (fxc_coalesce_fits(g, it))
            fxc_coalesce_add(g, it);
        else
            g->next = it;
    }
}

/* The next frame to send, into |*pj|: true, or false when there is none
 * now: the queue is empty (the FIN goes out if wanted), the stream is still
 * writing the previous frame (on_writable resumes), or the group lingers
 * (its timer resumes). */
static bool next_frame(pworker *w, pjob **pj)
{
    fx_client *c = w->c;
    if (!c->o.publish_coalesce) {
        void *it;
        if (fx_queue_pop(&w->q, &it) == 0) {
            *pj = it;
            return true;
        }
    } else {
        /* While busy, on_writable resumes this worker once the stream's
         * bytes are written (also after a full group went out meanwhile). */
        bool busy = fx_quic_stream_notify_sent(w->conn->qc, w->sid);
        fill_group(w);
        if (w->group.head != NULL) {
            bool full = fxc_coalesce_full(&w->group);
            if (busy && !full)
                return false;
            uint64_t due = w->group.head->enq_ns + (uint64_t)c->o.publish_linger_us * FX_NS_PER_US;
            /* fx_flush and fx_client_close cut a linger short. */
            bool linger = c->o.publish_linger_us > 0 && w->fin == FIN_NONE &&
                          atomic_load(&c->flushers) == 0 && !atomic_load(&c->pub_closing);
            if (!full && linger && fx_loop_now(c->loop) < due &&
                (fx_timer_is_armed(&w->linger) || fx_loop_timer_arm(c->loop, &w->linger, due) == 0))
                return false; /* without memory for the timer: send now */
            fx_loop_timer_cancel(c->loop, &w->linger);
            fxc_coalesce_take(&w->group, pj);
            return true;
        }
    }
    if (w->fin == FIN_WANT)
        send_fin(w);
    return false;
}

/* Sends the kept idempotent frames from the resend cursor on (the frame
 * just frozen, or after a reconnect every unanswered one). Returns true when
 * none is left to send; false when QUIC is full (on_writable resumes) or
 * the worker failed. */
static bool send_kept(pworker *w)
{
    fxc_idem *id = &w->idem;
    while (id->resend != NULL) {
        pjob *j = id->resend;
        int rv = fx_quic_stream_send(w->conn->qc, w->sid, j->buf, 0, j->len, false);
        if (rv == FX_EFULL)
            return false;
        /* The connection is closing (its close callback has not run yet):
         * with reconnect on, worker_lost rewinds and the frames go again on
         * the next connection. */
        if (rv == FX_ECLOSED && w->c->o.reconnect && w->fin == FIN_NONE)
            return false;
        if (rv != 0) {
            worker_fail(w, rv, fx_strerror(rv));
            return false;
        }
        id->resend = j->knext;
    }
    return true;
}

/* Freezes the new idempotent frame |j| (idem.c) and makes it pending: from
 * now on its bytes, producer id and sequence never change, and only
 * send_kept sends them. */
static void freeze(pworker *w, pjob *j)
{
    preq *r = j->req;
    int rv = job_wrap(j);
    if (rv == 0)
        rv = fxc_idem_freeze(&w->idem, j);
    if (rv != 0) {
        job_fail(j, rv, "out of memory freezing an idempotent batch");
        return;
    }
    j->req = NULL; /* the pending table holds the loop's reference now */
    if (r != NULL)
        pending_add(w, r);
}

/* Hands frames to QUIC until none is ready or QUIC refuses. */
static void worker_send(pworker *w)
{
    if (w->fin == FIN_SENT || w->fin == FIN_DONE) {
        fail_after_fin(w);
        return;
    }
    for (;;) {
        if (!send_kept(w))
            return;
        pjob *j = w->held;
        w->held = NULL;
        if (j == NULL && !next_frame(w, &j))
            return;
        if (j->idem) {
            freeze(w, j);
            continue;
        }
        preq *r = j->req;
        if (r != NULL && r->acked)
            pending_add(w, r);
        /* Wrapped only now: a publish merged into another frame never is. */
        int rv = j->buf == NULL ? job_wrap(j) : 0;
        if (rv == 0)
            rv = fx_quic_stream_send(w->conn->qc, w->sid, j->buf, 0, j->len, false);
        if (rv == FX_EFULL) {
            if (r != NULL && r->acked)
                pending_take(w, r->request_id);
            w->held = j; /* on_writable resumes */
            return;
        }
        if (r != NULL && r->acked) {
            j->req = NULL; /* the pending table holds the loop's reference now */
            if (rv != 0) {
                pending_take(w, r->request_id);
                req_finish_all(w->c, r, rv, fx_strerror(rv));
            }
        } else if (rv == 0) {
            j->sent_on = w->conn; /* QUIC holds it: job_release tells lost from acked */
            j->sent_gen = w->conn->gen;
        } else {
            job_fail(j, rv, fx_strerror(rv)); /* async callbacks learn the failure */
            j = NULL;
        }
        if (j != NULL)
            job_put(j); /* QUIC holds its own reference */
        if (rv != 0) {
            worker_fail(w, rv, fx_strerror(rv));
            return;
        }
    }
}

static void worker_kick(pworker *w)
{
    if (w->c->ep == NULL)
        return;
    switch (w->state) {
    case 0:
        worker_open(w);
        break;
    case 2:
        worker_send(w);
        break;
    case 3:
        worker_fail(w, atomic_load(&w->fail_rv), "publish stream failed");
        break;
    default:
        break;
    }
}

/* True while |w| holds publishes not yet handed to QUIC. */
static bool worker_has_work(pworker *w)
{
    return w->held != NULL || w->group.head != NULL || w->group.next != NULL ||
           w->idem.resend != NULL || fx_queue_depth(&w->q) > 0;
}

static void drain_task(fx_loop *l, fx_task *t, void *user)
{
    (void)l, (void)t;
    pworker *w = user;
    /* A flush kicks every worker: one never used stays unopened. */
    if (w->state == 0 && !worker_has_work(w))
        return;
    worker_kick(w);
}

static void linger_fire(fx_loop *l, fx_timer *t, void *user)
{
    (void)l, (void)t;
    worker_kick(user);
}

void fxc_pub_conn_ready(fx_client *c, cconn *cc)
{
    for (size_t i = 0; i < c->nworkers; i++) {
        pworker *w = &c->workers[i];
        if (c->conns[i / c->o.publish_streams_per_conn] != cc)
            continue;
        bool busy = worker_has_work(w);
        /* The first worker of each connection authenticates even when idle:
         * the broker closes a connection that authenticated nothing within
         * its auth_timeout_ms, which would make an idle pool connection
         * reconnect over and over after a loss. */
        bool first = i % c->o.publish_streams_per_conn == 0;
        if ((w->state == 0 && (busy || first)) || w->state == 2)
            worker_kick(w);
    }
}

void fxc_pub_conn_closed(fx_client *c, cconn *cc, int rv, const char *text, bool retry)
{
    for (size_t i = 0; i < c->nworkers; i++) {
        pworker *w = &c->workers[i];
        if (c->conns[i / c->o.publish_streams_per_conn] != cc || w->state == 3)
            continue;
        if (retry)
            worker_lost(w, rv, text);
        else
            worker_fail(w, rv, text);
    }
}

void fxc_pub_finish(fx_client *c)
{
    /* Counted before any FIN goes out, so the count cannot reach zero early. */
    int n = 0;
    for (size_t i = 0; i < c->nworkers; i++) {
        pworker *w = &c->workers[i];
        if ((w->state == 1 || w->state == 2 || w->state == 4) && w->fin == FIN_NONE) {
            w->fin = FIN_WANT;
            n++;
        }
    }
    pthread_mutex_lock(&c->mu);
    c->fin_left = n;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    /* An authenticating worker FINs once its auth is answered. */
    for (size_t i = 0; i < c->nworkers; i++) {
        pworker *w = &c->workers[i];
        if (w->fin == FIN_WANT && w->state == 2)
            worker_send(w);
    }
}

void fxc_pub_shutdown(fx_client *c)
{
    for (size_t i = 0; i < c->nworkers; i++) {
        worker_fail(&c->workers[i], FX_ECLOSED, "client closed");
        /* No timer may outlive the client on the shared loop. */
        fx_loop_timer_cancel(c->loop, &c->workers[i].ack_timer);
        fx_loop_timer_cancel(c->loop, &c->workers[i].linger);
    }
}

/* ---- answers (loop) ------------------------------------------------------------- */

/* The stream is authenticated (and its producer known): send. */
static void ready(pworker *w, uint16_t flags)
{
    w->state = 2;
    if (w->index == 0)
        fxc_client_on_first_auth(w->c, 0, flags, "");
    worker_send(w);
}

/* Asks the broker for a new producer id (state 4 until it answers): after
 * auth, and after a refusal (sequences restart at 0). Frames frozen under
 * the old id are answered under it first (the stream keeps order). */
static void producer_init(pworker *w)
{
    fx_msg m;
    memset(&m, 0, sizeof(m));
    m.type = FX_MSG_PRODUCER_INIT;
    m.request_id = atomic_fetch_add(&w->c->next_request_id, 1);
    m.has_request_id = true;
    fxc_idem_reset(&w->idem);
    int rv = fxc_client_send_msg(w->conn, w->sid, &m, false);
    if (rv != 0) {
        worker_fail(w, rv, fx_strerror(rv));
        return;
    }
    w->idem.init_rid = m.request_id;
    w->state = 4;
}

static void on_producer_init_ok(pworker *w, const fx_msg *m)
{
    if (w->idem.init_rid == 0 || m->request_id != w->idem.init_rid) {
        worker_fail(w, FX_EPROTO, "producer_init_ok for a request not made");
        return;
    }
    if (m->producer_id == 0) {
        worker_fail(w, FX_EPROTO, "producer_init_ok with producer_id 0");
        return;
    }
    w->idem.pid = m->producer_id;
    w->idem.init_rid = 0;
    w->idem.inits++;
    ready(w, w->idem.auth_flags);
}

static void on_auth_reply(pworker *w, const fx_msg *m)
{
    uint16_t flags;
    if (m->type == FX_MSG_AUTH_OK) {
        flags = m->server_flags;
    } else if (m->type == FX_MSG_OK) {
        flags = FX_CLIENT_LEGACY_FLAGS;
    } else {
        const char *txt = m->type == FX_MSG_ERROR ? m->message : "unexpected reply to auth";
        worker_fail(w, FX_EAUTH, txt);
        return;
    }
    if (w->c->o.idempotent) {
        uint32_t f = m->type == FX_MSG_AUTH_OK && m->has_server_features ? m->server_features : 0;
        if ((f & FX_FEATURE_IDEMPOTENT_PRODUCER) == 0 ||
            (flags & FX_FLAG_PUBLISH_IDEMPOTENT) == 0) {
            worker_fail(w, FX_EPROTO,
                        "option idempotent: the broker does not serve idempotent producers "
                        "(FEATURE_IDEMPOTENT_PRODUCER 0x0200 and flag 0x0100 not in auth_ok)");
            return;
        }
        w->idem.auth_flags = flags;
        if (w->idem.pid == 0) {
            producer_init(w);
            return;
        }
    }
    ready(w, flags);
}

/* Sets the offsets of the publishes of one answered frame: they follow
 * |base| in the order they were merged. */
static void set_offsets(fx_client *c, preq *r, uint64_t base, bool duplicate)
{
    pthread_mutex_lock(&c->mu);
    for (; r != NULL; r = r->grp) {
        r->offset = base;
        r->has_offset = true;
        r->duplicate = duplicate;
        base += r->count;
    }
    pthread_mutex_unlock(&c->mu);
}

static void answer(pworker *w, uint64_t id, bool ok, const char *text, const fx_msg *m)
{
    preq *r = pending_take(w, id);
    if (r == NULL) {
        /* A request that timed out (publish_ack_timeout_ms) is answered
         * late; a broker sending such answers in a flood gets one line a
         * second, with the count of the others. */
        FX_LOG_RATELIMITED(&w->c->late_rl, fx_now_ns(), FX_LOG_WARN, "client",
                           "answer for unknown or timed-out request id %llu",
                           (unsigned long long)id);
        return;
    }
    r->answered = true;
    if (ok) {
        if (m != NULL && m->has_offset)
            set_offsets(w->c, r, m->offset, m->duplicate);
        req_finish_all(w->c, r, 0, NULL);
        return;
    }
    char msg[256];
    if (m != NULL && m->type == FX_MSG_PUBLISH_REFUSED) {
        static const char *const reasons[] = {
            [FX_MSG_REFUSAL_SEQUENCE_GAP] = "sequence_gap",
            [FX_MSG_REFUSAL_UNKNOWN_PRODUCER] = "unknown_producer",
            [FX_MSG_REFUSAL_SEQUENCE_EXPIRED] = "sequence_expired",
            [FX_MSG_REFUSAL_SEQUENCE_REUSED] = "sequence_reused",
        };
        unsigned k = (unsigned)m->refusal.kind;
        snprintf(msg, sizeof(msg), "publish refused: %s: %s",
                 k < sizeof(reasons) / sizeof(reasons[0]) ? reasons[k] : "unknown reason", text);
        req_finish_all(w->c, r, FX_EREFUSED, msg);
        return;
    }
    snprintf(msg, sizeof(msg), "publish failed: %s", text);
    req_finish_all(w->c, r, fxc_client_map_remote(text), msg);
}

/* The answer to an idempotent frame: its kept bytes are released after its
 * publishes finish. A refusal or an error (the broker did not take the
 * sequence) makes a new producer, unless one is already being made. */
static void answer_idem(pworker *w, uint64_t rid, bool ok, const char *text, const fx_msg *m)
{
    pjob *k = fxc_idem_take(&w->idem, rid);
    if (!ok && k != NULL && text != NULL && strcmp(text, FX_MSG_COMMIT_TIMEOUT_TEXT) == 0 &&
        k->pid == w->idem.pid && pending_has(w, rid)) {
        /* The broker appended the batch and did not see it flushed within
         * its ack_wait_timeout_ms: the outcome is not known yet. The same
         * bytes under the same sequence go again (never a new sequence for
         * a batch in doubt); the re-send is answered once the flush covers
         * the original, as a duplicate, or the request's own
         * publish_ack_timeout_ms ends the wait. */
        atomic_fetch_add(&w->idem.commit_resent, 1);
        fxc_idem_requeue(&w->idem, k);
        worker_send(w);
        return;
    }
    uint32_t calls = k != NULL ? k->calls : 1;
    if (ok && m != NULL && m->duplicate)
        atomic_fetch_add(&w->idem.duplicates, calls);
    else if (m != NULL && m->type == FX_MSG_PUBLISH_REFUSED)
        atomic_fetch_add(&w->idem.refused, calls);
    answer(w, rid, ok, text != NULL ? text : "", m);
    bool reinit = !ok && k != NULL && k->pid == w->idem.pid && w->idem.pid != 0 &&
                  w->idem.init_rid == 0 && w->state == 2;
    if (k != NULL)
        fx_buf_unref(k->buf);
    if (reinit)
        producer_init(w);
}

static void on_json(pworker *w, const fx_msg *m)
{
    if (w->state == 1) {
        on_auth_reply(w, m);
        return;
    }
    bool idem = w->c->o.idempotent;
    if (m->type == FX_MSG_PRODUCER_INIT_OK && idem) {
        on_producer_init_ok(w, m);
    } else if (idem && (m->type == FX_MSG_PUBLISH_OK || m->type == FX_MSG_PUBLISH_ERROR ||
                        m->type == FX_MSG_PUBLISH_REFUSED)) {
        answer_idem(w, m->request_id, m->type == FX_MSG_PUBLISH_OK, m->message, m);
    } else if (m->type == FX_MSG_PUBLISH_OK) {
        answer(w, m->request_id, true, NULL, m);
    } else if (m->type == FX_MSG_PUBLISH_ERROR) {
        answer(w, m->request_id, false, m->message, m);
    } else if (m->type == FX_MSG_ERROR) {
        /* No request id: every request pending on this stream fails. */
        char msg[256];
        snprintf(msg, sizeof(msg), "publish failed: %s", m->message);
        worker_fail(w, fxc_client_map_remote(m->message), msg);
    } else {
        worker_fail(w, FX_EPROTO, "unexpected message on publish stream");
    }
}

static void on_frame(pworker *w, const fx_frame *f)
{
    fx_wire_err err = {0};
    if (f->flags_rv == 0 && f->kind == FX_BODY_JSON) {
        fx_msg m;
        if (fx_msg_decode(&m, f->body, f->len, &err) != 0) {
            worker_fail(w, FX_EPROTO, err.msg);
            return;
        }
        on_json(w, &m);
        fx_msg_deinit(&m);
    } else if (f->flags_rv == 0 && f->kind == FX_BODY_PUBLISH_ACK &&
               (w->state == 2 || w->state == 4)) {
        fx_wire_publish_ack a;
        if (fx_wire_publish_ack_decode(f->body, f->len, &a, &err) != 0) {
            worker_fail(w, FX_EPROTO, err.msg);
            return;
        }
        char text[FX_WIRE_ACK_MSG_MAX + 1];
        snprintf(text, sizeof(text), "%.*s", (int)a.message.len, (const char *)a.message.ptr);
        if (w->c->o.idempotent) /* a binary ack of an idempotent frame (e.g. draining) */
            answer_idem(w, a.request_id, a.ok, text, NULL);
        else
            answer(w, a.request_id, a.ok, text, NULL);
    } else {
        worker_fail(w, FX_EPROTO, "unexpected frame on publish stream");
    }
}

void fxc_pub_on_data(pworker *w, const uint8_t *data, size_t len, bool fin)
{
    fx_quic_stream_consume(w->conn->qc, w->sid, len);
    while (len > 0 && w->state != 3) {
        size_t used = 0;
        fx_frame f;
        fx_wire_err err = {0};
        int rv = fx_frame_decoder_feed(&w->dec, data, len, &used, &f, &err);
        data += used;
        len -= used;
        if (rv < 0) {
            worker_fail(w, FX_EPROTO, err.msg);
            return;
        }
        if (rv == FX_FRAME_READY)
            on_frame(w, &f);
    }
    if (!fin || w->state == 3)
        return;
    if (w->fin == FIN_SENT && w->npending == 0) {
        /* The broker's answer to our FIN: every frame we sent was handled
         * (admitted, or answered / dropped and counted) and every reply
         * written. The stream is done; producers see it closed. */
        int zero = 0;
        atomic_compare_exchange_strong(&w->fail_rv, &zero, FX_ECLOSED);
        w->state = 3;
        fin_done(w, 0);
        return;
    }
    worker_fail(w, FX_ECONNLOST, "publish stream ended by the broker");
}

void fxc_pub_on_close(pworker *w, bool reset, uint64_t code)
{
    (void)code;
    w->sid = -1;
    if (w->state != 3)
        worker_fail(w, FX_ECONNLOST,
                    reset ? "publish stream reset by the broker" : "publish stream closed");
}

/* ---- init ----------------------------------------------------------------------- */

int fxc_pub_init(fx_client *c)
{
    c->nconns = c->o.publish_conn_pool;
    c->nworkers = (size_t)c->o.publish_conn_pool * c->o.publish_streams_per_conn;
    c->conns = calloc(c->nconns, sizeof(*c->conns));
    c->workers = calloc(c->nworkers, sizeof(*c->workers));
    if (c->conns == NULL || c->workers == NULL) {
        free(c->conns);
        free(c->workers);
        return -ENOMEM;
    }
    for (size_t i = 0; i < c->nworkers; i++) {
        pworker *w = &c->workers[i];
        *w = (pworker){.kind = SK_WORKER, .c = c, .index = i, .sid = -1};
        fx_queue_opts qo = {
            .capacity = c->o.publish_queue_depth, .policy = FX_QUEUE_BLOCK, .on_drop = job_drop};
        int rv = fx_queue_init(&w->q, &qo);
        if (rv != 0) {
            for (size_t k = 0; k < i; k++) {
                fx_queue_deinit(&c->workers[k].q);
                fx_frame_decoder_deinit(&c->workers[k].dec);
            }
            free(c->conns);
            free(c->workers);
            return rv;
        }
        fx_task_init(&w->drain, drain_task, w);
        fx_timer_init(&w->ack_timer, ack_timer_fire, w);
        fx_timer_init(&w->linger, linger_fire, w);
        fxc_coalesce_init(&w->group, c->o.max_frame_bytes);
        fx_frame_decoder_init(&w->dec, c->o.max_frame_bytes);
    }
    return 0;
}

void fxc_pub_deinit(fx_client *c)
{
    for (size_t i = 0; i < c->nworkers; i++) {
        fx_queue_deinit(&c->workers[i].q);
        fx_frame_decoder_deinit(&c->workers[i].dec);
        kept_release(&c->workers[i]);
    }
    free(c->workers);
    c->workers = NULL;
    c->nworkers = 0;
}
