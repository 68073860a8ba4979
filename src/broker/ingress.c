/* Publish admission, checkpoints 3 and 4, as a pure state machine per
 * request (ingress.h): bytes from the budgets, then a slot in the worker's
 * queue, under Drop / Fail / Wait / Backpressure. It touches no broker
 * struct: the connection loop's side lives in resv.c (the reservation at a
 * frame header) and admission.c (jobs, their admission, merging). Driven by
 * the request's loop thread; the budgets and the queue are shared. */
#include "broker/ingress.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "felix/error.h"

/* Publish admission (checkpoints 3-4) as a small state machine per request:
 * bytes, then queue, then done. Drop and Fail only ever try (nothing waits);
 * Wait and Backpressure park a budget or queue waiter and are resumed by
 * callback, so no thread sleeps. Wait keeps one deadline, set on the first
 * attempt, across both stages. Driven by the request's loop thread. */

fx_ingress_policy fx_ingress_policy_for(bool acked, bool ack_on_commit, bool pub_ingress_wait)
{
    if (acked)
        return ack_on_commit ? FX_INGRESS_WAIT : FX_INGRESS_FAIL;
    return pub_ingress_wait ? FX_INGRESS_BACKPRESSURE : FX_INGRESS_DROP;
}

static void on_budget_granted(void *user, int rv)
{
    fx_ingress_req *r = user;
    r->grant_rv = rv;
    r->on_resume(r->user);
}

static void on_queue_resume(void *user)
{
    fx_ingress_req *r = user;
    r->on_resume(r->user);
}

void fx_ingress_req_init(fx_ingress_req *r, void *job, size_t nbytes, fx_ingress_policy policy,
                         uint64_t timeout_ns, fx_ingress_resume_cb on_resume, void *user)
{
    *r = (fx_ingress_req){.job = job,
                          .nbytes = nbytes,
                          .policy = policy,
                          .timeout_ns = timeout_ns,
                          .on_resume = on_resume,
                          .user = user,
                          .requests = 1};
    r->bw.on_granted = on_budget_granted;
    r->bw.user = r;
    fx_queue_waiter_init(&r->qw, on_queue_resume, r);
}

/* ---- outcomes ------------------------------------------------------------- */

/* Gives back every byte |r| holds: the adopted reservation and what the bytes
 * stage took. */
static void release_bytes(fx_ingress_req *r)
{
    fx_permit_release(&r->held);
    fx_permit_release(&r->permit);
}

static fx_ingress_outcome failed(fx_ingress_req *r, const char *msg)
{
    release_bytes(r);
    r->error = msg;
    r->stage = FX_INGRESS_STAGE_DONE;
    FX_COUNTER_ADD(ingress_rejected, r->requests);
    return FX_INGRESS_FAILED;
}

static fx_ingress_outcome dropped(fx_ingress_req *r)
{
    release_bytes(r);
    r->stage = FX_INGRESS_STAGE_DONE;
    FX_COUNTER_ADD(ingress_dropped, r->requests);
    return FX_INGRESS_DROPPED;
}

/* A wait that ended without admission: timeout (Wait) or cancel. */
static fx_ingress_outcome ended(fx_ingress_req *r)
{
    FX_COUNTER_ADD(ingress_backpressure_cancelled, r->requests);
    if (r->policy != FX_INGRESS_WAIT)
        return failed(r, FX_INGRESS_MSG_CANCELLED);
    return failed(r, r->stage == FX_INGRESS_STAGE_BYTES ? FX_INGRESS_MSG_ADMISSION_TIMEOUT
                                                        : FX_INGRESS_MSG_ENQUEUE_TIMEOUT);
}

static fx_ingress_outcome parked(fx_ingress_req *r)
{
    if (!r->waited) {
        r->waited = true;
        FX_COUNTER_ADD(ingress_waited, r->requests);
    }
    return FX_INGRESS_PARKED;
}

/* ---- stages --------------------------------------------------------------- */

/* Waits for the |need| bytes the budget refused (Wait and Backpressure). */
static fx_ingress_outcome bytes_wait(const fx_ingress_target *t, fx_ingress_req *r, size_t need)
{
    if (r->held.n > 0) {
        /* Waiting while holding the reservation could deadlock behind a
         * header that waits for it (the budget is FIFO): wait for it all. */
        fx_permit_release(&r->held);
        need = r->nbytes;
    }
    r->budget_parked = true; /* set first: on_granted may run before acquire returns */
    int rv = fx_budget_acquire(t->conn_budget, need, &r->bw, &r->permit);
    if (rv == -EAGAIN)
        return parked(r);
    r->budget_parked = false;
    if (rv == FX_ETOOBIG)
        return failed(r, FX_INGRESS_MSG_TOO_BIG);
    return rv == 0 ? FX_INGRESS_ADMITTED : failed(r, FX_INGRESS_MSG_CLOSED);
}

/* A full budget (|refused|, the connection's share or the process-wide one)
 * refused |need| bytes: counted, then the policy decides. */
static fx_ingress_outcome bytes_full(const fx_ingress_target *t, fx_ingress_req *r,
                                     const fx_budget *refused, size_t need)
{
    bool conn = refused == t->conn_budget;
    if (conn)
        FX_COUNTER_INC(ingress_conn_bytes_full);
    else
        FX_COUNTER_INC(ingress_bytes_full);
    if (r->policy == FX_INGRESS_DROP)
        return dropped(r);
    if (r->policy == FX_INGRESS_FAIL)
        return failed(r, conn ? FX_INGRESS_MSG_CONN_BYTES : FX_INGRESS_MSG_BYTES);
    return bytes_wait(t, r, need);
}

/* Bytes: returns PARKED/DROPPED/FAILED, or ADMITTED meaning "go on to the
 * queue". Only the bytes beyond an adopted reservation are taken here. */
static fx_ingress_outcome stage_bytes(const fx_ingress_target *t, fx_ingress_req *r)
{
    if (r->budget_parked) { /* resumed: the grant decided */
        r->budget_parked = false;
        return r->grant_rv == 0 ? FX_INGRESS_ADMITTED : failed(r, FX_INGRESS_MSG_CLOSED);
    }
    if (r->held.n >= r->nbytes)
        return FX_INGRESS_ADMITTED;
    size_t need = r->nbytes - r->held.n;
    const fx_budget *refused = NULL;
    int rv = fx_budget_try_acquire_from(t->conn_budget, need, &r->permit, &refused);
    if (rv == 0)
        return FX_INGRESS_ADMITTED;
    if (rv == FX_ETOOBIG)
        return r->policy == FX_INGRESS_DROP ? dropped(r) : failed(r, FX_INGRESS_MSG_TOO_BIG);
    if (rv != FX_EFULL)
        return failed(r, FX_INGRESS_MSG_CLOSED);
    return bytes_full(t, r, refused, need);
}

static fx_ingress_outcome stage_queue(const fx_ingress_target *t, fx_ingress_req *r)
{
    r->queue_parked = false;
    /* Counted before the push: the worker may finish the job at once. */
    FX_GAUGE_ADD(ingress_queue_depth, 1);
    r->queued_gauge = true;
    r->stage = FX_INGRESS_STAGE_DONE;
    int rv = fx_queue_push(t->queue, r->job);
    if (rv == 0)
        return FX_INGRESS_ADMITTED;
    FX_GAUGE_SUB(ingress_queue_depth, 1);
    r->queued_gauge = false;
    r->stage = FX_INGRESS_STAGE_QUEUE;
    if (rv != FX_EFULL)
        return failed(r, FX_INGRESS_MSG_CLOSED);
    FX_COUNTER_INC(ingress_queue_full);
    if (r->policy == FX_INGRESS_DROP)
        return dropped(r);
    if (r->policy == FX_INGRESS_FAIL)
        return failed(r, FX_INGRESS_MSG_QUEUE_FULL);
    r->queue_parked = true;
    if (fx_queue_park(t->queue, &r->qw) == 0)
        return parked(r);
    r->queue_parked = false;
    return failed(r, FX_INGRESS_MSG_CLOSED);
}

fx_ingress_outcome fx_ingress_admit(const fx_ingress_target *t, fx_ingress_req *r, uint64_t now)
{
    if (!r->started) {
        r->started = true;
        r->deadline_ns = now + r->timeout_ns;
    }
    if (r->cancelled || (r->policy == FX_INGRESS_WAIT && now >= r->deadline_ns)) {
        r->budget_parked = r->queue_parked = false;
        return ended(r); /* releases a permit a late grant may have filled */
    }
    if (r->stage == FX_INGRESS_STAGE_BYTES) {
        fx_ingress_outcome o = stage_bytes(t, r);
        if (o != FX_INGRESS_ADMITTED)
            return o;
        r->stage = FX_INGRESS_STAGE_QUEUE;
    }
    return stage_queue(t, r);
}

fx_ingress_outcome fx_ingress_cancel(const fx_ingress_target *t, fx_ingress_req *r)
{
    if (r->budget_parked) {
        if (!fx_budget_cancel(t->conn_budget, &r->bw)) {
            r->cancelled = true; /* the grant is on its way: finish in admit */
            return FX_INGRESS_PARKED;
        }
        r->budget_parked = false;
    } else if (r->queue_parked) {
        if (!fx_queue_unpark(t->queue, &r->qw)) {
            r->cancelled = true;
            return FX_INGRESS_PARKED;
        }
        r->queue_parked = false;
    }
    return ended(r);
}

void fx_ingress_req_adopt(fx_ingress_req *r, fx_permit *held)
{
    fx_permit_release(&r->held); /* a second adopt replaces the first */
    r->held = *held;
    *held = (fx_permit){0};
}

void fx_ingress_finish(fx_ingress_req *r)
{
    release_bytes(r);
    if (r->queued_gauge) {
        r->queued_gauge = false;
        FX_GAUGE_SUB(ingress_queue_depth, 1);
    }
}
