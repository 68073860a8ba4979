/* The worker side of the storage stage of durable streams (durable.h): the
 * stage's hand-off on the worker loop. A popped job of a durable stream is
 * taken (fxb_durable_route) into a trip record (fxb_stored) and sent to its
 * worker's storage thread (durable_store.c), or held while the stream's
 * bytes in storage are at durable_max_unsynced_bytes (it keeps its
 * checkpoint-3 budget, so publishers are slowed like at every other
 * checkpoint). The storage thread appends it, flushes as the fsync policy
 * says and hands it back once the policy lets it be acknowledged; the
 * worker then takes it back in offset order (fxb_durable_next_stored),
 * checked against the ring, for ring + fanout + ack. Jobs keep their
 * checkpoint-3 permit the whole way; a failed append or flush fails its
 * jobs ("storage full" / "storage error"): they never reach the ring.
 * Worker loop. Start-up, recovery, the drain flush and shutdown:
 * durable_ops.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/durable_store.h"
#include "broker/idem.h"
#include "broker/worker.h"
#include "felix/error.h"

static void end_log(fxb_worker *w, fx_stream_handle *h);
static void worker_on_stored(fx_loop *l, fx_task *t, void *user);

/* The state of |h| on this worker, made on first use; NULL on -ENOMEM.
 * Only for a stream that has not ended here (its end frees the state). */
static dws *dws_get(struct fxb_dworker *dw, const fx_stream_handle *h)
{
    fxb_idslot *e = fxb_idtable_find(&dw->s, fx_stream_handle_id(h));
    if (e != NULL)
        return e->p;
    dws *ws = calloc(1, sizeof(*ws));
    if (ws != NULL && fxb_idtable_insert(&dw->s, fx_stream_handle_id(h), ws) != 0) {
        free(ws);
        ws = NULL;
    }
    return ws;
}

static dws *dws_if_any(const struct fxb_dworker *dw, const fx_stream_handle *h)
{
    fxb_idslot *e = fxb_idtable_find(&dw->s, fx_stream_handle_id(h));
    return e != NULL ? e->p : NULL;
}

/* Frees the state of |h| (nothing of it in storage, none held). */
static void dws_drop(struct fxb_dworker *dw, const fx_stream_handle *h)
{
    fxb_idslot *e = fxb_idtable_find(&dw->s, fx_stream_handle_id(h));
    dws *ws = e->p;
    fxb_idtable_remove(&dw->s, e);
    free(ws);
}

/* The trip of |j| through storage; NULL on -ENOMEM. */
static fxb_stored *trip_new(fxb_job *j)
{
    fxb_stored *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->job = j;
    fx_task_init(&t->task, fxb_store_on_job, t);
    fx_task_init(&t->back, worker_on_stored, t);
    return t;
}

static void send_to_storage(fxb_worker *w, dws *ws, fxb_stored *t)
{
    ws->bytes += t->bytes;
    ws->inflight++;
    fx_loop_post(w->dur->st->loop, &t->task);
}

/* Whether |t| must wait for its stream's bytes in storage to fall. */
static bool over_bound(const fxb_worker *w, const dws *ws, const fxb_stored *t)
{
    uint64_t max = w->b->dur->o.max_unsynced_bytes;
    return max != 0 && ws->bytes > 0 && ws->bytes + t->bytes > max;
}

/* Whether |j| goes through storage: its stream is durable, and it is not a
 * job that job_run would refuse (its stream deleted and ended, or deleted
 * with no state here), which is not written either. */
static bool goes_to_storage(fxb_worker *w, const fxb_job *j)
{
    if (w->dur == NULL || !fx_stream_handle_is_durable(j->h))
        return false;
    return fx_stream_handle_is_active(j->h) ||
           (!fx_stream_handle_is_ended(j->h) && fxb_worker_stream_if_any(w, j->h) != NULL);
}

bool fxb_durable_route(fxb_worker *w, fxb_job *j, int *prv)
{
    *prv = 0;
    if (!goes_to_storage(w, j))
        return false;
    struct fxb_dworker *dw = w->dur;
    dws *ws = dws_get(dw, j->h);
    fxb_stored *t = ws != NULL ? trip_new(j) : NULL;
    if (t == NULL) {
        *prv = -ENOMEM; /* refused now: never written */
        return false;
    }
    dw->pending++;
    t->bytes = fx_buf_len(j->backing);
    if (ws->hhead != NULL || over_bound(w, ws, t)) {
        FX_COUNTER_INC(storage_bound_waits);
        trip_push(&ws->hhead, &ws->htail, t);
        return true;
    }
    send_to_storage(w, ws, t);
    return true;
}

/* A job came back from storage (worker loop): |user| is its trip. */
static void worker_on_stored(fx_loop *l, fx_task *task, void *user)
{
    (void)l;
    (void)task;
    fxb_stored *t = user;
    fxb_job *j = t->job;
    fxb_worker *w = j->w;
    struct fxb_dworker *dw = w->dur;
    dws *ws = dws_if_any(dw, j->h); /* it was sent with its state, kept until now */
    if (ws != NULL) {
        ws->known = true;
        ws->base = t->base;
        ws->bytes -= t->bytes;
        ws->inflight--;
        while (!ws->ended && ws->hhead != NULL && !over_bound(w, ws, ws->hhead))
            send_to_storage(w, ws, trip_pop(&ws->hhead, &ws->htail));
        if (ws->ended && ws->inflight == 0) {
            /* The last of a stream that ended meanwhile: now its log may go. */
            dws_drop(dw, j->h);
            end_log(w, j->h);
        }
    }
    trip_push(&dw->rhead, &dw->rtail, t);
    fxb_worker_kick(w);
}

/* The ring job_run appends the job of |h| to, made now (at the log's first
 * offset) for an active stream that has none here; NULL when job_run
 * refuses the job (its stream deleted and ended, or deleted with no state
 * here) or is out of memory. */
static fx_stream *ring_of(fxb_worker *w, fx_stream_handle *h)
{
    if (fx_stream_handle_is_active(h))
        return fxb_worker_stream(w, h);
    return fx_stream_handle_is_ended(h) ? NULL : fxb_worker_stream_if_any(w, h);
}

/* Checks that stored |t| continues its ring at its log offset (else the
 * ring and the log would disagree: refused, counted). Returns 0 or
 * FX_ESTORAGE_ERROR. */
static int check_order(fxb_worker *w, const fxb_stored *t)
{
    const fxb_job *j = t->job;
    const fx_stream *st = ring_of(w, j->h);
    if (st == NULL || fx_stream_tail(st) == t->first)
        return 0;
    FX_COUNTER_INC(storage_errors);
    FX_LOG_ERROR("storage",
                 "stream %s/%s/%s: the ring is at offset %" PRIu64
                 " but the log appended at %" PRIu64 "; publish refused",
                 fx_stream_handle_tenant(j->h), fx_stream_handle_namespace(j->h),
                 fx_stream_handle_stream(j->h), fx_stream_tail(st), t->first);
    return FX_ESTORAGE_ERROR;
}

fxb_job *fxb_durable_next_stored(fxb_worker *w, int *prv)
{
    *prv = 0;
    if (w->dur == NULL)
        return NULL;
    fxb_stored *t = trip_pop(&w->dur->rhead, &w->dur->rtail);
    if (t == NULL)
        return NULL;
    w->dur->pending--;
    fxb_job *j = t->job;
    /* An idempotent batch the storage thread did not append (a duplicate,
     * a refusal) has no place in the ring to check. */
    bool kept_out = j->idem.on && j->idem.verdict != FX_PROD_NEXT;
    *prv = t->rv != 0 ? t->rv : kept_out ? 0 : check_order(w, t);
    free(t);
    return j;
}

int fxb_durable_test_stored(fxb_worker *w, fxb_job *j, uint64_t first)
{
    if (w->dur == NULL && (w->dur = calloc(1, sizeof(*w->dur))) == NULL)
        return -ENOMEM;
    fxb_stored *t = trip_new(j);
    if (t == NULL)
        return -ENOMEM;
    t->first = first;
    w->dur->pending++;
    trip_push(&w->dur->rhead, &w->dur->rtail, t);
    return 0;
}

uint64_t fxb_durable_pending(const fxb_worker *w)
{
    return w->dur != NULL ? w->dur->pending : 0;
}

uint64_t fxb_durable_first_offset(const fxb_worker *w, const fx_stream_handle *h)
{
    if (w->dur == NULL)
        return 0;
    const dws *ws = dws_if_any(w->dur, h);
    return ws != NULL && ws->known ? ws->base : 0;
}

void fxb_sub_dur_deinit(fxb_sub_dur *d)
{
    free(d->why);
}

bool fxb_durable_sub_ready(fxb_sub *sub, bool *pfailed)
{
    *pfailed = false;
    if (sub->w->dur == NULL || !fx_stream_handle_is_durable(sub->h))
        return true;
    if (sub->dur.ready) {
        /* The storage thread's answer becomes the worker's. */
        sub->feed.reg_rv = sub->dur.rv;
        sub->feed.replay = sub->dur.replay;
        *pfailed = sub->feed.reg_rv != 0;
        /* Removed meanwhile: the caller refuses it (no stream); no state is
         * made here for a stream whose end may have run. */
        if (!fx_stream_handle_is_active(sub->h))
            return true;
        dws *ws = dws_get(sub->w->dur, sub->h);
        if (ws == NULL) {
            sub->feed.reg_rv = -ENOMEM;
            *pfailed = true;
        } else if (!*pfailed) {
            ws->known = true;
            ws->base = sub->dur.base;
        }
        return true;
    }
    fx_task_init(&sub->dur.task, fxb_store_on_sub, sub);
    fx_loop_post(sub->w->dur->st->loop, &sub->dur.task);
    return false;
}

/* Sends the end of |h|'s log to its storage thread (closes and deletes it). */
static void end_log(fxb_worker *w, fx_stream_handle *h)
{
    end_msg *m = malloc(sizeof(*m));
    if (m == NULL) {
        FX_LOG_ERROR("storage",
                     "out of memory closing the log of stream %" PRIu64
                     "; it stays open until the broker stops",
                     fx_stream_handle_id(h));
        return;
    }
    m->st = w->dur->st;
    m->h = fx_stream_handle_ref(h);
    fx_task_init(&m->task, fxb_store_on_end, m);
    fx_loop_post(m->st->loop, &m->task);
}

/* Refuses the jobs |ws| holds back by the bound: their stream ended, so
 * the worker would refuse them anyway (job_run); they need no write. */
static void refuse_held(fxb_worker *w, dws *ws)
{
    if (ws->hhead == NULL)
        return;
    for (fxb_stored *t; (t = trip_pop(&ws->hhead, &ws->htail)) != NULL;) {
        t->rv = FX_ENOSTREAM;
        trip_push(&w->dur->rhead, &w->dur->rtail, t);
    }
    fxb_worker_kick(w);
}

void fxb_durable_end_stream(fxb_worker *w, fx_stream_handle *h)
{
    if (w->dur == NULL || !fx_stream_handle_is_durable(h))
        return;
    dws *ws = dws_if_any(w->dur, h);
    if (ws != NULL) {
        refuse_held(w, ws);
        if (ws->inflight > 0) {
            /* Its log ends after them, so none reaches storage after the
             * end (which would open the deleted stream's log again). */
            ws->ended = true;
            return;
        }
        dws_drop(w->dur, h);
    }
    end_log(w, h);
}

void fxb_durable_worker_deinit(fxb_worker *w)
{
    struct fxb_dworker *dw = w->dur;
    if (dw == NULL)
        return;
    size_t pos = 0;
    for (fxb_idslot *e; (e = fxb_idtable_next(&dw->s, &pos)) != NULL;) {
        dws *ws = e->p;
        fxb_stored *t;
        while ((t = trip_pop(&ws->hhead, &ws->htail)) != NULL)
            fxb_stored_free(t);
        free(ws);
    }
    fxb_idtable_deinit(&dw->s);
    fxb_stored *t;
    while ((t = trip_pop(&dw->rhead, &dw->rtail)) != NULL)
        fxb_stored_free(t);
    free(dw);
    w->dur = NULL;
}
