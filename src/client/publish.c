/* libfelix publishing, on the caller's thread: the public publish calls
 * encode the frame (src/wire's batch builder, or JSON for an old broker),
 * take its bytes from the shared budget (checkpoint 1) and queue it on a
 * worker (checkpoint 2, waiting while full), then wait for the answer when
 * acked; the client loop sends it (sender.c). Any thread. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/blk.h"
#include "client/client.h"

/* ---- encoding ---------------------------------------------------------------------- */

/* A job and its frame in one block from the block cache (base/blk.h): the
 * frame bytes are written by the encoder, only the header is zeroed. */
static pjob *job_alloc(fx_client *c, size_t len)
{
    if (len > SIZE_MAX - sizeof(pjob))
        return NULL;
    pjob *j = fx_blk_alloc(sizeof(*j) + len);
    if (j == NULL)
        return NULL;
    memset(j, 0, sizeof(*j));
    j->c = c;
    j->len = len;
    j->calls = 1;
    return j;
}

static void job_free(pjob *j)
{
    fx_blk_free(j);
}

pjob *fxc_pub_job_alloc(fx_client *c, size_t len)
{
    return job_alloc(c, len);
}

void fxc_pub_job_free(pjob *j)
{
    job_free(j);
}

/* An idempotent client's acked batch is encoded as 0x0109 (ack mode 2)
 * with producer id and sequence 0: the loop writes both when it freezes the
 * frame at its first send (idem.c). */
static int encode_binary(fx_client *c, const char *ns, const char *stream, const fx_iov *msgs,
                         size_t n, fx_wire_ack ack, uint64_t id, pjob **pj)
{
    bool idem = c->o.idempotent && ack != FX_WIRE_ACK_NONE;
    if (idem)
        ack = FX_WIRE_ACK_PER_BATCH;
    fx_wire_publish_batch head = {.request_id = id,
                                  .ack = ack,
                                  .idempotent = idem,
                                  .tenant = {(const uint8_t *)c->o.tenant, strlen(c->o.tenant)},
                                  .ns = {(const uint8_t *)ns, strlen(ns)},
                                  .stream = {(const uint8_t *)stream, strlen(stream)}};
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += msgs[i].len;
    ssize_t size = fx_wire_batch_frame_size(&head, n, bytes);
    if (size < 0)
        return (int)size;
    pjob *j = job_alloc(c, (size_t)size);
    if (j == NULL)
        return -ENOMEM;
    fx_wire_batch_builder bb;
    int rv = fx_wire_batch_begin(&bb, j->frame, j->len, &head);
    for (size_t i = 0; i < n && rv == 0; i++)
        rv = fx_wire_batch_append(&bb, msgs[i].data, msgs[i].len);
    ssize_t w = rv == 0 ? fx_wire_batch_finish(&bb, &j->marks) : rv;
    if (w < 0) {
        job_free(j);
        return (int)w;
    }
    j->count = (uint32_t)n;
    j->wack = (uint8_t)ack;
    j->merge = true;
    j->idem = idem;
    *pj = j;
    return 0;
}

static int encode_json(fx_client *c, const char *ns, const char *stream, const fx_iov *msgs,
                       size_t n, bool batch, fx_wire_ack ack, uint64_t id, pjob **pj)
{
    fx_msg_bytes *pl = calloc(n > 0 ? n : 1, sizeof(*pl));
    if (pl == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        pl[i] = (fx_msg_bytes){msgs[i].data, msgs[i].len};
    fx_msg m = {.type = batch ? FX_MSG_PUBLISH_BATCH : FX_MSG_PUBLISH,
                .tenant_id = c->o.tenant,
                .ns = ns,
                .stream = stream,
                .payloads = pl,
                .n_payloads = n,
                .request_id = id,
                .has_request_id = true,
                .ack = ack,
                .has_ack = true};
    if (!batch)
        m.payload = pl[0];
    uint8_t *f = NULL;
    size_t len = 0;
    int rv = fx_msg_encode_frame(&m, &f, &len);
    free(pl);
    if (rv != 0)
        return rv;
    pjob *j = job_alloc(c, len);
    if (j == NULL) {
        free(f);
        return -ENOMEM;
    }
    memcpy(j->frame, f, len);
    free(f);
    j->count = (uint32_t)n;
    j->wack = (uint8_t)ack;
    *pj = j;
    return 0;
}

/* ---- admission --------------------------------------------------------------------- */

static uint32_t hash_stream(const char *ns, const char *stream)
{
    uint32_t h = 2166136261u;
    for (const char *p = ns; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    h = (h ^ 0u) * 16777619u;
    for (const char *p = stream; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    return h;
}

static pworker *pick_worker(fx_client *c, const char *ns, const char *stream)
{
    uint32_t k = c->o.publish_sharding == FX_SHARDING_RR ? atomic_fetch_add(&c->rr, 1)
                                                         : hash_stream(ns, stream);
    return &c->workers[k % c->nworkers];
}

typedef struct pushwait {
    fx_queue_waiter qw;
    fx_client *c;
    bool resumed;
} pushwait;

static void push_resumed(void *user)
{
    pushwait *pw = user;
    pthread_mutex_lock(&pw->c->mu);
    pw->resumed = true;
    pthread_cond_broadcast(&pw->c->cv);
    pthread_mutex_unlock(&pw->c->mu);
}

/* Queues |j| on |w| (checkpoint 2), waiting while full unless |nowait|. */
static int push_job(fx_client *c, pworker *w, pjob *j, bool nowait)
{
    pushwait pw = {.c = c};
    fx_queue_waiter_init(&pw.qw, push_resumed, &pw);
    for (;;) {
        int rv = fx_queue_push(&w->q, j);
        if (rv != FX_EFULL || nowait)
            return rv;
        pw.resumed = false;
        rv = fx_queue_park(&w->q, &pw.qw);
        if (rv != 0)
            return rv;
        /* Closing the queue resumes every waiter, so this always ends. */
        pthread_mutex_lock(&c->mu);
        while (!pw.resumed)
            fxc_client_wait(c, &c->cv, 0);
        pthread_mutex_unlock(&c->mu);
    }
}

static int encode_job(fx_client *c, const char *ns, const char *stream, const fx_iov *msgs,
                      size_t n, bool batch, fx_wire_ack wack, pjob **pj, uint64_t *pid)
{
    uint64_t id = wack != FX_WIRE_ACK_NONE ? atomic_fetch_add(&c->next_request_id, 1) : 0;
    *pid = id;
    bool binary = wack == FX_WIRE_ACK_NONE || (c->server_flags & FX_FLAG_PUBLISH_ACKED) != 0 ||
                  c->o.idempotent; /* connect made sure the broker serves 0x0109 */
    int rv = binary ? encode_binary(c, ns, stream, msgs, n, wack, id, pj)
                    : encode_json(c, ns, stream, msgs, n, batch, wack, id, pj);
    if (rv == 0 && (*pj)->len - FX_WIRE_HEADER_LEN > c->o.max_frame_bytes) {
        size_t len = (*pj)->len;
        job_free(*pj);
        return fxc_client_set_error(FX_ETOOBIG, "publish of %zu bytes exceeds max_frame_bytes",
                                    len);
    }
    return rv;
}

/* Takes the budget and queues |j|; on failure |j| is gone (its request,
 * if any, stays with the caller, unfinished). */
/* Takes budget and a queue slot for |j|; |nowait| on any client loop (a
 * callback must not block, even for another client), |on_loop| on c's own. */
static int admit(fx_client *c, pworker *w, pjob *j, bool nowait, bool on_loop)
{
    /* The non-blocking try first: it refuses while anyone waits (the budget
     * stays FIFO), and when it succeeds the blocking path's per-call mutex
     * and condition variable are never built. */
    int rv = fx_budget_try_acquire(&c->budget, j->len, &j->permit);
    if (rv == FX_EFULL && !nowait)
        rv = fx_budget_acquire_wait(&c->budget, j->len, -1, &j->permit);
    if (rv == FX_ETOOBIG)
        fxc_client_set_error(rv, "publish of %zu bytes exceeds publish_inflight_bytes %zu", j->len,
                             c->o.publish_inflight_bytes);
    if (rv != 0) {
        job_free(j);
        return rv;
    }
    atomic_fetch_add(&c->outstanding, 1 + (j->req != NULL && j->req->acked));
    if (c->o.publish_linger_us > 0) /* only the linger reads it */
        j->enq_ns = fx_now_ns();
    rv = push_job(c, w, j, nowait);
    if (rv != 0) {
        /* Not queued: undo the counting the release will do. */
        if (j->req != NULL && j->req->acked)
            fxc_pub_outstanding_done(c, 1);
        j->req = NULL;
        fxc_pub_job_put(j);
        return rv;
    }
    if (on_loop)
        fx_loop_post(c->loop, &w->drain);
    else
        fxc_client_post(c, &w->drain); /* closed: the close task drains it */
    return 0;
}

/* Waits for the answer to |r|, at most until its ack deadline: the loop's
 * timer fails a request the broker has not answered by then, and this
 * bound covers one still queued (behind a reconnect, say), which the loop
 * finishes later. */
static int wait_req(fx_client *c, preq *r, fx_publish_result *res)
{
    pthread_mutex_lock(&c->mu);
    int wrv = 0;
    while (!r->done && wrv == 0)
        wrv = fxc_client_wait(c, &c->cv, r->deadline_ns);
    int rv = r->done ? r->rv : FX_ETIMEDOUT;
    if (!r->done)
        fxc_client_set_error(rv, FX_PUB_ACK_TIMEOUT_FMT, c->o.publish_ack_timeout_ms);
    else if (rv != 0)
        fxc_client_set_error(rv, "%s", r->msg);
    if (res != NULL && rv == 0)
        *res = (fx_publish_result){
            .offset = r->offset, .has_offset = r->has_offset, .duplicate = r->duplicate};
    pthread_mutex_unlock(&c->mu);
    return rv;
}

static fx_wire_ack wire_ack(fx_ack a)
{
    switch (a) {
    case FX_ACK_PER_MESSAGE:
        return FX_WIRE_ACK_PER_MESSAGE;
    case FX_ACK_PER_BATCH:
        return FX_WIRE_ACK_PER_BATCH;
    default:
        return FX_WIRE_ACK_NONE;
    }
}

/* How a publish call completes: |cb| or |rcb| (async), else |res| (sync,
 * may be NULL). */
typedef struct pubdone {
    fx_ack_cb cb;
    fx_publish_cb rcb;
    void *user;
    fx_publish_result *res;
    bool nowait; /* FX_EFULL instead of waiting at checkpoints 1-2 */
} pubdone;

static int publish_common(fx_client *c, const char *ns, const char *stream, const fx_iov *msgs,
                          size_t n, bool batch, fx_ack ack, const pubdone *d)
{
    bool async = d->cb != NULL || d->rcb != NULL;
    if (c == NULL || ns == NULL || stream == NULL || (n > 0 && msgs == NULL) ||
        ack > FX_ACK_PER_BATCH)
        return -EINVAL;
    if (n > FX_WIRE_BATCH_MAX_MESSAGES)
        return fxc_client_set_error(-EINVAL,
                                    "publish batch of %zu messages exceeds the limit of %u", n,
                                    FX_WIRE_BATCH_MAX_MESSAGES);
    bool on_loop = fx_loop_is_current(c->loop);
    bool on_any_loop = on_loop || fxc_rt_is_current();
    if (on_any_loop && !async)
        return FX_EWOULDBLOCK_LOOP;
    if (atomic_load(&c->pub_closing))
        return fxc_client_set_error(FX_ECLOSED, "client is closing");
    fx_wire_ack wack = wire_ack(ack);
    pworker *w = pick_worker(c, ns, stream);
    int rv = atomic_load(&w->fail_rv);
    if (rv != 0)
        return fxc_client_set_error(rv, "publish stream unusable: %s", fx_strerror(rv));
    pjob *j = NULL;
    uint64_t id = 0;
    rv = encode_job(c, ns, stream, msgs, n, batch, wack, &j, &id);
    if (rv != 0)
        return rv;
    preq *r = NULL;
    if (wack != FX_WIRE_ACK_NONE || async) {
        r = calloc(1, sizeof(*r));
        if (r == NULL) {
            job_free(j);
            return -ENOMEM;
        }
        r->request_id = id;
        r->acked = wack != FX_WIRE_ACK_NONE;
        r->deadline_ns = fx_now_ns() + (uint64_t)c->o.publish_ack_timeout_ms * FX_NS_PER_MS;
        r->cb = d->cb;
        r->rcb = d->rcb;
        r->user = d->user;
        r->count = (uint32_t)n;
        atomic_init(&r->refs, async ? 1 : 2);
        j->req = r;
    }
    fxc_client_ref(c);
    rv = admit(c, w, j, on_any_loop || d->nowait, on_loop);
    if (rv != 0) {
        free(r);
    } else if (r != NULL && !async) {
        rv = wait_req(c, r, d->res);
        fxc_pub_req_unref(r);
    }
    fxc_client_unref(c);
    return rv;
}

/* ---- public calls ------------------------------------------------------------------ */

int fx_publish(fx_client *c, const char *ns, const char *stream, const void *data, size_t len,
               fx_ack ack)
{
    fx_iov one = {data, len};
    return publish_common(c, ns, stream, &one, 1, false, ack, &(pubdone){0});
}

int fx_publish_ex(fx_client *c, const char *ns, const char *stream, const void *data, size_t len,
                  fx_ack ack, fx_publish_result *res)
{
    fx_iov one = {data, len};
    if (res != NULL)
        *res = (fx_publish_result){0};
    return publish_common(c, ns, stream, &one, 1, false, ack, &(pubdone){.res = res});
}

int fx_publish_batch(fx_client *c, const char *ns, const char *stream, const fx_iov *msgs, size_t n,
                     fx_ack ack)
{
    return publish_common(c, ns, stream, msgs, n, true, ack, &(pubdone){0});
}

int fx_publish_async(fx_client *c, const char *ns, const char *stream, const void *data, size_t len,
                     fx_ack ack, fx_ack_cb cb, void *user)
{
    if (cb == NULL)
        return -EINVAL;
    fx_iov one = {data, len};
    return publish_common(c, ns, stream, &one, 1, false, ack, &(pubdone){.cb = cb, .user = user});
}

int fx_publish_try_async(fx_client *c, const char *ns, const char *stream, const void *data,
                         size_t len, fx_ack ack, fx_ack_cb cb, void *user)
{
    if (cb == NULL)
        return -EINVAL;
    fx_iov one = {data, len};
    return publish_common(c, ns, stream, &one, 1, false, ack,
                          &(pubdone){.cb = cb, .user = user, .nowait = true});
}

int fx_publish_async_ex(fx_client *c, const char *ns, const char *stream, const void *data,
                        size_t len, fx_ack ack, fx_publish_cb cb, void *user)
{
    if (cb == NULL)
        return -EINVAL;
    fx_iov one = {data, len};
    return publish_common(c, ns, stream, &one, 1, false, ack, &(pubdone){.rcb = cb, .user = user});
}

int fx_flush(fx_client *c, int timeout_ms)
{
    if (c == NULL)
        return -EINVAL;
    if (fxc_rt_is_current())
        return FX_EWOULDBLOCK_LOOP;
    uint64_t deadline = fxc_client_deadline(timeout_ms);
    int rv = 0;
    pthread_mutex_lock(&c->mu);
    atomic_fetch_add(&c->flushers, 1);
    if (c->o.publish_linger_us > 0 && !c->closed) {
        /* Lingering frames go now: the workers see |flushers|. */
        for (size_t i = 0; i < c->nworkers; i++)
            fx_loop_post(c->loop, &c->workers[i].drain);
    }
    while (atomic_load(&c->outstanding) > 0 && !c->closed && rv == 0)
        rv = fxc_client_wait(c, &c->cv, deadline);
    atomic_fetch_sub(&c->flushers, 1);
    if (atomic_load(&c->outstanding) == 0)
        rv = 0;
    else if (c->closed)
        rv = FX_ECLOSED;
    pthread_mutex_unlock(&c->mu);
    return rv;
}
