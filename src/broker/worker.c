/* The worker stage (checkpoint 4's consumer): a worker loop owns its streams,
 * drains its job queue, appends each batch to the stream's ring and hands it
 * to the fanout (parking under block), completes commit acks, registers the
 * subscriptions of its streams and ends deleted streams. It hosts the
 * durable storage stage's hand-off (durable.h): the drain routes each popped
 * job through fxb_durable_route and takes stored jobs back, in offset order,
 * from fxb_durable_next_stored. Worker loop. */
#include "broker/worker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "base/placement.h"
#include "broker/cache_srv.h"
#include "broker/durable.h"
#include "broker/feeder.h"
#include "broker/group.h"
#include "broker/idem.h"
#include "broker/job.h"
#include "broker/replay.h"
#include "broker/reply.h"
#include "broker/sub.h"
#include "cluster/cluster.h"
#include "felix/error.h"

/* ---- streams ----------------------------------------------------------------------------- */

void fxb_worker_kick(fxb_worker *w)
{
    fx_loop_post(w->loop, &w->doorbell);
}

/* A parked fanout's subscriber queue drained (any thread): continue on the
 * worker. One stream at most is parked per worker, so one task suffices. */
static void on_stream_resume(fx_stream *s, void *user)
{
    (void)s;
    fxb_worker *w = user;
    fx_loop_post(w->loop, &w->resume_task);
}

size_t fxb_worker_stream_capacity(const fxb_worker *w)
{
    return fxb_idtable_capacity(&w->streams);
}

fx_stream *fxb_worker_stream_if_any(fxb_worker *w, const fx_stream_handle *h)
{
    fxb_idslot *e = fxb_idtable_find(&w->streams, fx_stream_handle_id(h));
    return e != NULL ? e->p : NULL;
}

fx_stream *fxb_worker_stream(fxb_worker *w, fx_stream_handle *h)
{
    fx_stream *st = fxb_worker_stream_if_any(w, h);
    if (st == NULL) {
        const fx_broker_opts *o = &w->b->o;
        /* In a cluster an in-memory stream numbers its messages from
         * epoch << 40, so offsets never repeat across owners. */
        uint64_t first = fx_stream_handle_is_durable(h) ? fxb_durable_first_offset(w, h)
                         : fx_stream_handle_is_mirror(h) ? fx_stream_handle_mirror_first(h)
                         : o->cluster != NULL
                             ? fx_cluster_first_offset(o->cluster, fx_stream_handle_tenant(h),
                                                       fx_stream_handle_namespace(h),
                                                       fx_stream_handle_stream(h))
                             : 0;
        fx_stream_opts so = {.handle_id = fx_stream_handle_id(h),
                             .log_capacity = o->log_capacity,
                             .log_capacity_bytes = o->log_capacity_bytes,
                             .sub_queue_capacity = o->subscriber_queue_capacity,
                             .sub_queue_policy = o->subscriber_queue_policy,
                             .global = &w->b->retained,
                             .tenant = fx_stream_handle_retained(h),
                             .on_resume = on_stream_resume,
                             .user = w,
                             .first_offset = first};
        if (fx_stream_new(&st, &so) != 0)
            return NULL;
        if (fxb_idtable_insert(&w->streams, fx_stream_handle_id(h), st) != 0) {
            fx_stream_free(st);
            return NULL;
        }
    }
    return st;
}

/* ---- subscriber_block_timeout ------------------------------------------------------------ */

static fx_ratelimit block_rl = FX_RATELIMIT_INIT;

/* On the subscription's connection loop: closes the connection. */
static void block_close(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_sub *sub = user;
    if (sub->conn->qc != NULL && !sub->conn->dead)
        fx_quic_conn_close(sub->conn->qc, FXB_CODE_SLOW_SUBSCRIBER, FXB_SLOW_SUBSCRIBER_TEXT);
    fxb_sub_unref(sub);
}

/* The fanout has waited subscriber_block_timeout on the same full queue. */
static void block_expired(fx_loop *l, fx_timer *t, void *user)
{
    (void)l;
    (void)t;
    fxb_worker *w = user;
    fx_stream *st = w->parked_stream;
    if (w->parked_job == NULL || st == NULL || fx_stream_park_seq(st) != w->block_seq)
        return;
    fx_subscriber *ps = fx_stream_parked_on(st);
    fxb_sub *sub = ps != NULL ? fx_subscriber_user(ps) : NULL;
    if (sub == NULL || sub->feed.block_kicked)
        return;
    sub->feed.block_kicked = true;
    FX_COUNTER_INC(sub_block_timeouts);
    FX_LOG_RATELIMITED(&block_rl, fx_loop_now(l), FX_LOG_WARN, "broker",
                       "subscription %llu (connection %llu) held its block queue full for more "
                       "than subscriber_block_timeout_ms (%llu): closing its connection",
                       (unsigned long long)sub->id, (unsigned long long)sub->conn->id,
                       (unsigned long long)(w->b->o.subscriber_block_timeout_ns / FX_NS_PER_MS));
    fx_task_init(&sub->feed.block_task, block_close, sub); /* posted once: |block_kicked| */
    fxb_sub_post(sub, sub->conn->loop, &sub->feed.block_task);
}

/* The fanout of |st| is parked: (re)arms the timer for a park not seen yet. */
static void block_watch(fxb_worker *w, fx_stream *st, uint64_t now)
{
    uint64_t to = w->b->o.subscriber_block_timeout_ns;
    if (to == 0 || (fx_timer_is_armed(&w->block_timer) && w->block_seq == fx_stream_park_seq(st)))
        return;
    w->block_seq = fx_stream_park_seq(st);
    if (fx_loop_timer_arm(w->loop, &w->block_timer, now + to) != 0)
        FX_LOG_ERROR("broker",
                     "out of memory arming subscriber_block_timeout: the fanout of "
                     "stream %llu waits without it",
                     (unsigned long long)fx_stream_handle_id(w->parked_job->h));
}

/* ---- jobs -------------------------------------------------------------------------------- */

/* Answers the commit acks of |j| (|err| NULL: ok) on their stream's loop. */
static void job_answer_commits(fxb_job *j, const char *err)
{
    for (uint32_t i = 0; i < j->nacks; i++) {
        fxb_reply *r = j->acks[i];
        fxb_reply_complete(r, err);
        j->acks[i] = NULL;
        if (!fx_loop_post(r->loop, &r->task))
            fxb_reply_unref(r); /* cannot be pending twice: the slot completes once */
    }
    j->nacks = 0;
}

static void job_complete(fxb_job *j, int rv, uint64_t now)
{
    if (j->mirror) {
        /* Not a publish: the mirror counts its own (mirror.c). */
        void (*done)(void *, int, uint64_t) = j->mirror_done;
        j->mirror_done = NULL; /* answered: fxb_job_free must not answer again */
        done(j->mirror_user, rv, j->mirror_skipped);
        fxb_job_free(j);
        return;
    }
    if (rv == 0 && j->idem.on && j->idem.verdict != FX_PROD_NEXT) {
        /* Not appended: a duplicate or a refusal, counted by idem.c. */
    } else if (rv == 0) {
        FX_COUNTER_ADD(publish_ok, j->nreq);
        /* The requests merged into one job arrived in the same loop turn. */
        FX_HIST_OBSERVE_N(publish_latency_ns, now > j->arrived_ns ? now - j->arrived_ns : 0,
                          j->nreq);
    } else {
        FX_COUNTER_ADD(publish_error, j->nreq);
        if (rv != FX_EMOVING) /* a move's refusals are counted, and expected */
            FX_LOG_WARN("broker", "append to stream %llu failed: %s",
                        (unsigned long long)fx_stream_handle_id(j->h), fx_strerror(rv));
    }
    if (j->commit) {
        char err[768]; /* copied into the reply frame by fxb_reply_complete */
        if (rv != 0)
            snprintf(err, sizeof(err), "publish failed: %s%s%s", fx_strerror(rv),
                     j->swhy != NULL ? ": " : "", j->swhy != NULL ? j->swhy : "");
        if (j->idem.on)
            fxb_idem_answer(j, rv, err);
        else
            job_answer_commits(j, rv == 0 ? NULL : err);
    }
    fxb_job_free(j);
}

/* The stream state |j| appends to, or NULL once |j| is completed (its
 * stream is gone, or no memory). */
static fx_stream *job_stream(fxb_worker *w, fxb_job *j, uint64_t now)
{
    fx_stream *st;
    if (!fx_stream_handle_is_active(j->h)) {
        /* Deleted after admission. Its worker ends the stream only after
         * the jobs queued before that (below), so a job that finds the
         * stream not ended yet was admitted first: its events still go to
         * the subscribers there are. After the end, or with no stream state
         * here (nobody subscribed), it is refused. */
        st = fxb_worker_stream_if_any(w, j->h);
        if (st == NULL || fx_stream_handle_is_ended(j->h)) {
            job_complete(j, FX_ENOSTREAM, now);
            return NULL;
        }
    } else {
        st = fxb_worker_stream(w, j->h);
    }
    if (st == NULL)
        job_complete(j, -ENOMEM, now);
    return st;
}

/* A cluster mirror's batch: appended at the owner's offset (a jump above
 * the tail restarts the ring there, reported to the mirror as skipped),
 * never refused by the deadline rule (this node owns nothing here). */
static bool mirror_append(fxb_worker *w, fxb_job *j, fx_stream *st, uint64_t now)
{
    fx_fanout_result res;
    int rv = fx_stream_publish_at(st, j->mirror_offset, j->backing, j->payloads, j->count, now,
                                  &res, &j->mirror_skipped);
    if (rv == -EAGAIN) {
        w->parked_job = j;
        w->parked_stream = st;
        block_watch(w, st, now);
        return false;
    }
    job_complete(j, rv, now);
    return true;
}

/* Appends |j| to |st| and fans it out. Returns false when the fanout
 * parked. */
static bool job_append(fxb_worker *w, fxb_job *j, fx_stream *st, uint64_t now)
{
    fx_stream_handle_touch(j->h, now);
    if (j->mirror)
        return mirror_append(w, j, st, now);
    /* An idempotent batch is checked right before its append (idem.c): a
     * duplicate or a refusal is answered without one. A durable stream's
     * was checked on its storage thread against the log's producer table
     * (the marks) and comes back decided. */
    bool durable = fx_stream_handle_is_durable(j->h);
    if (j->idem.on && (durable ? j->idem.verdict != FX_PROD_NEXT : !fxb_idem_check(w, j, now))) {
        job_complete(j, 0, now);
        return true;
    }
    /* The deadline rule's second check, right before the append (a durable
     * stream is pinned to this node: no other can own it). */
    fx_cluster *cl = w->b->o.cluster;
    if (cl != NULL && !durable && !fx_cluster_serving(cl)) {
        FX_COUNTER_INC(cluster_suspended_refused);
        job_complete(j, FX_ENOTSERVING, now);
        return true;
    }
    /* Frozen for a move: its tail was read on this worker once every job
     * admitted before the move was appended (admission refuses the later
     * ones), so none should come; one that did is refused, not appended
     * after the tail. */
    if (cl != NULL && !durable && fx_stream_handle_moving(j->h) == FX_HANDLE_FROZEN) {
        fx_cluster_count_moving_refused(cl);
        job_complete(j, FX_EMOVING, now);
        return true;
    }
    fx_fanout_result res;
    uint64_t first = fx_stream_tail(st);
    int rv = fx_stream_publish(st, j->backing, j->payloads, j->count, now, &res);
    if (cl != NULL && !durable && (rv == 0 || rv == -EAGAIN) && !fx_cluster_serving(cl))
        fx_cluster_count_late_append(cl); /* the residual: counted, never silent */
    if ((rv == 0 || rv == -EAGAIN) && j->idem.on && !durable)
        fxb_idem_appended(w, j, first);
    if (rv == 0 || rv == -EAGAIN)
        fxb_group_on_append(w, j->h); /* appended either way */
    if (rv == -EAGAIN) {
        w->parked_job = j;
        w->parked_stream = st;
        block_watch(w, st, now);
        return false;
    }
    job_complete(j, rv, now);
    return true;
}

static bool hold_needed(fxb_worker *w, const fxb_job *j, const fx_stream *st);
static void hold_begin(fxb_worker *w, fxb_job *j, fx_stream *st, uint64_t now);

/* Appends and fans out one job, or completes it with |rv| (not 0: the
 * storage stage refused it; never in the ring). Returns false when the
 * fanout parked or the append waits for a group (checkpoint 4g). */
static bool job_run(fxb_worker *w, fxb_job *j, int rv, uint64_t now)
{
    if (rv != 0) {
        job_complete(j, rv, now);
        return true;
    }
    fx_stream *st = job_stream(w, j, now);
    if (st == NULL)
        return true;
    if (hold_needed(w, j, st)) {
        hold_begin(w, j, st, now);
        return false;
    }
    return job_append(w, j, st, now);
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
        int rv;
        fxb_job *j = fxb_durable_next_stored(w, &rv); /* stored jobs first, in offset order */
        if (j == NULL) {
            void *item;
            if (fx_queue_pop(&w->jobs, &item) != 0)
                return;
            j = item;
            if (fxb_durable_route(w, j, &rv))
                continue; /* taken: it comes back by fxb_durable_next_stored */
        }
        if (job_run(w, j, rv, now))
            job_done(w);
    }
    fx_loop_post(l, &w->doorbell); /* more may wait: let other tasks run first */
}

static void hold_check(fxb_worker *w, uint64_t now);

void fxb_worker_resume(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_worker *w = user;
    if (w->parked_job == NULL)
        return;
    fx_fanout_result res;
    uint64_t now = fx_loop_now(l);
    if (w->group_held) {
        hold_check(w, now);
        return;
    }
    int rv = fx_stream_resume(w->parked_stream, now, &res);
    if (rv == -EAGAIN) {
        block_watch(w, w->parked_stream, now); /* parked again, maybe on another queue */
        return;
    }
    fx_loop_timer_cancel(l, &w->block_timer);
    fxb_job *j = w->parked_job;
    w->parked_job = NULL;
    w->parked_stream = NULL;
    job_complete(j, rv, now);
    job_done(w);
    fx_loop_post(l, &w->doorbell);
}

/* ---- the ring hold (checkpoint 4g) ------------------------------------------------------- */

static fx_ratelimit hold_rl = FX_RATELIMIT_INIT;

/* Payload bytes of |j| (its backing may hold framing too). */
static uint64_t job_bytes(const fxb_job *j)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < j->count; i++)
        n += j->payloads[i].len;
    return n;
}

/* Whether |j|'s append to |st| must wait: a stream in memory, the lossless
 * profile (subscriber_queue_policy block), and the append would evict a
 * record a group has not settled. An append that goes ahead only because
 * the group in the way waits for its own dead letter is counted. */
static bool hold_needed(fxb_worker *w, const fxb_job *j, const fx_stream *st)
{
    if (w->b->o.subscriber_queue_policy != FX_QUEUE_BLOCK || fx_stream_handle_is_durable(j->h) ||
        !fx_stream_handle_is_active(j->h))
        return false;
    if (!fxb_group_any(w, j->h))
        return false;
    uint64_t yield, end = fx_stream_evict_end(st, j->count, job_bytes(j));
    uint64_t floor = fxb_group_hold_floor(w, j->h, end, &yield);
    if (end <= floor && end > yield)
        FX_COUNTER_INC(group_hold_dead_letter_yields);
    return end > floor;
}

/* Holds |j|: the worker takes no more input until hold_check lets it go. */
static void hold_begin(fxb_worker *w, fxb_job *j, fx_stream *st, uint64_t now)
{
    w->parked_job = j;
    w->parked_stream = st;
    w->group_held = true;
    FX_COUNTER_INC(group_hold_waits);
    FX_GAUGE_ADD(group_hold_held, 1);
    uint64_t to = w->b->o.group_hold_timeout_ns;
    if (to != 0 && fx_loop_timer_arm(w->loop, &w->hold_timer, now + to) != 0)
        FX_LOG_ERROR("broker",
                     "out of memory arming group_hold_timeout: the append to stream %llu waits "
                     "for its consumer groups without it",
                     (unsigned long long)fx_stream_handle_id(j->h));
}

/* Lets the held job go: appended (its fanout may park), then the drain goes
 * on. */
static void hold_end(fxb_worker *w, uint64_t now)
{
    fxb_job *j = w->parked_job;
    fx_stream *st = w->parked_stream;
    fx_loop_timer_cancel(w->loop, &w->hold_timer);
    w->group_held = false;
    w->parked_job = NULL;
    w->parked_stream = NULL;
    FX_GAUGE_SUB(group_hold_held, 1);
    if (job_append(w, j, st, now)) {
        job_done(w);
        fx_loop_post(w->loop, &w->doorbell);
    }
}

/* A group of the held job's stream settled something: checks again. */
static void hold_check(fxb_worker *w, uint64_t now)
{
    if (!hold_needed(w, w->parked_job, w->parked_stream))
        hold_end(w, now);
}

/* group_hold_timeout passed: the append goes ahead; its groups settle what
 * it evicts as skipped and do not hold again until they catch up. */
static void hold_expired(fx_loop *l, fx_timer *t, void *user)
{
    (void)t;
    fxb_worker *w = user;
    if (w->parked_job == NULL || !w->group_held)
        return;
    fxb_job *j = w->parked_job;
    fx_stream *st = w->parked_stream;
    uint64_t end = fx_stream_evict_end(st, j->count, job_bytes(j));
    fxb_group_hold_lapse(w, j->h, end, fx_stream_tail(st) + j->count);
    FX_COUNTER_INC(group_hold_timeouts);
    FX_LOG_RATELIMITED(&hold_rl, fx_loop_now(l), FX_LOG_WARN, "broker",
                       "an append to stream %s/%s/%s waited group_hold_timeout_ms (%llu) for a "
                       "consumer group to settle the records it evicts: it goes ahead, the group "
                       "settles them as skipped (counted) and holds again once caught up",
                       fx_stream_handle_tenant(j->h), fx_stream_handle_namespace(j->h),
                       fx_stream_handle_stream(j->h),
                       (unsigned long long)(w->b->o.group_hold_timeout_ns / FX_NS_PER_MS));
    hold_end(w, fx_loop_now(l));
}

void fxb_worker_hold_kick(fxb_worker *w, const fx_stream_handle *h)
{
    if (w->group_held && w->parked_job != NULL &&
        fx_stream_handle_id(w->parked_job->h) == fx_stream_handle_id(h))
        fx_loop_post(w->loop, &w->resume_task);
}

/* ---- stream_idle_expiry (worker 0) ------------------------------------------------------- */

/* Sweep period: a quarter of the expiry, within [100 ms, 10 s], so a stream
 * goes at most a quarter (or 10 s) after it became expirable. */
static uint64_t expiry_period(const fx_broker *b)
{
    uint64_t p = b->o.stream_idle_expiry_ns / 4;
    if (p < 100 * FX_NS_PER_MS)
        p = 100 * FX_NS_PER_MS;
    return p > 10 * FX_NS_PER_S ? 10 * FX_NS_PER_S : p;
}

/* Takes the registry's reference of an expired |h|: its worker frees the
 * stream's state (nothing uses it: no subscriber, no job). */
static void expired_one(fx_stream_handle *h, void *user)
{
    static fx_ratelimit rl = FX_RATELIMIT_INIT;
    fx_broker *b = user;
    FX_COUNTER_INC(registry_streams_expired);
    FX_LOG_RATELIMITED(&rl, fx_now_ns(), FX_LOG_INFO, "broker",
                       "stream %s/%s/%s expired after stream_idle_expiry_s idle (all expiries "
                       "are counted in felix_registry_streams_expired_total)",
                       fx_stream_handle_tenant(h), fx_stream_handle_namespace(h),
                       fx_stream_handle_stream(h));
    fxb_end *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        /* Its ring stays until the broker stops: say so, it is memory. */
        FX_LOG_ERROR("broker", "out of memory ending expired stream %llu: its state stays",
                     (unsigned long long)fx_stream_handle_id(h));
        fx_stream_handle_unref(h);
        return;
    }
    e->h = h;
    e->w = fxb_worker_for(b, h);
    fx_task_init(&e->task, fxb_worker_end_task, e);
    fx_loop_post(e->w->loop, &e->task);
}

static void expiry_sweep(fx_loop *l, fx_timer *t, void *user)
{
    fxb_worker *w = user;
    fx_broker *b = w->b;
    uint64_t now = fx_loop_now(l);
    if (!fxb_is_draining(b))
        (void)fx_registry_expire_idle(b->reg, now, b->o.stream_idle_expiry_ns, expired_one, b);
    if (fx_loop_timer_arm(l, t, now + expiry_period(b)) != 0)
        FX_LOG_ERROR("broker", "out of memory re-arming the stream_idle_expiry sweep: stopped");
}

static void expiry_start(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_worker *w = user;
    if (fx_loop_timer_arm(l, &w->expiry_timer, fx_loop_now(l) + expiry_period(w->b)) != 0)
        FX_LOG_ERROR("broker", "out of memory arming the stream_idle_expiry sweep: off");
}

/* ---- lifecycle (main thread, loop not running) ------------------------------------------- */

static void job_on_drop(void *item, void *user)
{
    (void)user;
    fxb_job_free(item);
}

int fxb_worker_init(fx_broker *b, fxb_worker *w, uint32_t i)
{
    char name[24];
    snprintf(name, sizeof(name), "fx-worker-%u", (unsigned)(i % 100000u));
    w->b = b;
    w->index = i;
    fx_loop_opts lo = {.name = name, .cpu = fx_placement_worker_cpu(i, b->o.pin_workers)};
    int rv = fx_loop_new(&w->loop, &lo);
    if (rv != 0)
        return rv;
    fx_queue_opts qo = {.capacity = b->o.pub_queue_depth,
                        .policy = FX_QUEUE_BLOCK,
                        .low_watermark = b->o.pub_queue_depth / 2,
                        .on_drop = job_on_drop};
    rv = fx_queue_init(&w->jobs, &qo);
    if (rv != 0) {
        fx_loop_free(w->loop);
        w->loop = NULL;
        return rv;
    }
    if ((rv = fxb_cache_worker_init(w)) != 0) {
        fx_queue_deinit(&w->jobs);
        fx_loop_free(w->loop);
        w->loop = NULL;
        return rv;
    }
    fx_task_init(&w->doorbell, fxb_worker_drain, w);
    fx_task_init(&w->resume_task, fxb_worker_resume, w);
    fx_timer_init(&w->block_timer, block_expired, w);
    fx_timer_init(&w->hold_timer, hold_expired, w);
    fx_task_init(&w->expiry_start, expiry_start, w);
    fx_timer_init(&w->expiry_timer, expiry_sweep, w);
    /* Worker 0 sweeps for idle auto-created streams; the task runs once the
     * loop starts. */
    if (i == 0 && b->o.stream_idle_expiry_ns != 0 && b->o.auto_create_streams)
        fx_loop_post(w->loop, &w->expiry_start);
    return 0;
}

void fxb_worker_deinit(fxb_worker *w)
{
    if (w->loop == NULL)
        return;
    if (w->parked_job != NULL)
        fxb_job_free(w->parked_job);
    if (w->group_held)
        FX_GAUGE_SUB(group_hold_held, 1);
    fxb_durable_worker_deinit(w);
    fxb_group_worker_deinit(w);
    fxb_cache_worker_deinit(w);
    fxb_worker_free_ends(w);
    fxb_idem_free_all(w);
    size_t pos = 0;
    for (fxb_idslot *e; (e = fxb_idtable_next(&w->streams, &pos)) != NULL;)
        fx_stream_free(e->p);
    fxb_idtable_deinit(&w->streams);
    fx_queue_deinit(&w->jobs);
    fx_loop_timer_cancel(w->loop, &w->block_timer); /* the loop is stopped: allowed */
    fx_loop_timer_cancel(w->loop, &w->hold_timer);
    fx_loop_timer_cancel(w->loop, &w->expiry_timer);
    fx_loop_free(w->loop);
}

/* ---- subscriptions ----------------------------------------------------------------------- */

/* w->subs: the registered subscriptions of a worker (worker thread). */
static void wlist_add(fxb_sub *sub)
{
    fxb_worker *w = sub->w;
    sub->feed.wprev = NULL;
    sub->feed.wnext = w->subs;
    if (w->subs != NULL)
        w->subs->feed.wprev = sub;
    w->subs = sub;
}

static void wlist_remove(fxb_sub *sub)
{
    if (sub->feed.wprev != NULL)
        sub->feed.wprev->feed.wnext = sub->feed.wnext;
    else
        sub->w->subs = sub->feed.wnext;
    if (sub->feed.wnext != NULL)
        sub->feed.wnext->feed.wprev = sub->feed.wprev;
    sub->feed.wnext = sub->feed.wprev = NULL;
}

/* Frees the worker's state of a deleted stream once no subscriber and no
 * parked fanout uses it, and drops its table entry (ids are never reused, so
 * nothing finds it again). */
static void free_if_deleted(fxb_worker *w, fx_stream_handle *h)
{
    fxb_idslot *e = fxb_idtable_find(&w->streams, fx_stream_handle_id(h));
    if (fx_stream_handle_is_active(h) || e == NULL)
        return;
    fx_stream *st = e->p;
    if (fx_stream_subscriber_count(st) > 0 || fx_stream_is_parked(st) || w->parked_stream == st)
        return;
    fxb_idtable_remove(&w->streams, e);
    fx_stream_free(st);
}

void fxb_worker_sub_register(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_sub *sub = user;
    bool failed = false;
    if (!atomic_load_explicit(&sub->closed, memory_order_acquire) &&
        !fxb_durable_sub_ready(sub, &failed))
        return; /* its log opens first; the task comes back with this reference */
    if (!failed && !atomic_load_explicit(&sub->closed, memory_order_acquire)) {
        /* A stream deleted meanwhile must not be created again here. */
        sub->feed.stream =
            fx_stream_handle_is_active(sub->h) ? fxb_worker_stream(sub->w, sub->h) : NULL;
        sub->feed.reg_rv = fx_stream_handle_is_active(sub->h) ? -ENOMEM : FX_ENOSTREAM;
        if (sub->feed.stream != NULL && fxb_replay_prepare(sub, sub->feed.stream)) {
            fx_subscribe_opts so = {
                .subscription_id = sub->id, .on_wake = fxb_feeder_wake, .user = sub};
            sub->feed.reg_rv =
                fx_stream_subscribe(sub->feed.stream, &sub->start, &so, &sub->feed.sub,
                                    &sub->feed.backlog, &sub->feed.available);
            if (sub->feed.reg_rv == 0)
                fxb_replay_begin(sub, sub->feed.stream); /* history [from, tail) from disk */
        }
        if (sub->feed.reg_rv != 0)
            fxb_replay_drop(sub);
        if (sub->feed.reg_rv == 0) {
            sub->feed.registered = true;
            fxb_sub_ref(sub); /* the worker's */
            wlist_add(sub);
        }
    }
    fxb_sub_post(sub, sub->conn->loop, &sub->reply_task);
    fxb_sub_unref(sub);
}

void fxb_worker_sub_unregister(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_sub *sub = user;
    fx_loop_timer_cancel(l, &sub->feed.delay_timer);
    /* The subscription left its lane's parked list when it was closed,
     * before this task was posted: nothing resumes it any more. */
    sub->feed.lane_parked = false;
    fxb_frame_list_free(sub->feed.held);
    sub->feed.held = NULL;
    fxb_replay_drop(sub);
    fx_backlog_free(&sub->feed.backlog);
    fx_coalescer_deinit(&sub->feed.co);
    if (sub->feed.registered) {
        sub->feed.registered = false;
        wlist_remove(sub);
        fx_stream_unsubscribe(sub->feed.stream, sub->feed.sub);
        sub->feed.sub = NULL;
        free_if_deleted(sub->w, sub->h);
        fxb_sub_unref(sub); /* the worker's */
    }
    fxb_sub_unref(sub);
}

void fxb_worker_end_stream(fxb_worker *w, fx_stream_handle *h)
{
    fx_stream_handle_set_ended(h);
    fxb_durable_end_stream(w, h);
    fxb_group_end_stream(w, h);
    fxb_idem_stream_gone(w, h);
    for (fxb_sub *sub = w->subs; sub != NULL; sub = sub->feed.wnext) {
        if (sub->h != h || sub->feed.ending)
            continue;
        sub->feed.ending = true;
        /* The feeder sends what is queued, then asks for the FIN; a
         * subscription whose event stream is not open yet gets it when its
         * feeder first runs. */
        fxb_sub_post(sub, w->loop, &sub->feed.feed_task);
    }
    free_if_deleted(w, h);
}

/* ---- deleted streams --------------------------------------------------------------------- */

/* A moved stream: each subscriber's last frame names the new owner
 * (shard_moved, or an error for a client without the feature), before the
 * FIN fxb_worker_end_stream asks for. */
static void set_moved_frames(fxb_worker *w, const fxb_end *e)
{
    fx_stream_handle *h = e->h;
    for (fxb_sub *sub = w->subs; sub != NULL; sub = sub->feed.wnext) {
        if (sub->h != h || sub->feed.ending || sub->feed.end_frame != NULL)
            continue;
        fx_msg m;
        char text[1024];
        fx_msg_init_moved_reply(&m, sub->client_features, fx_stream_handle_tenant(h),
                                fx_stream_handle_namespace(h), fx_stream_handle_stream(h),
                                e->moved_to, e->moved_addr[0] ? e->moved_addr : NULL,
                                e->moved_gen, text, sizeof(text));
        if (fxb_msg_frame(&m, &sub->feed.end_frame) != 0)
            sub->feed.end_frame = NULL; /* no memory: the FIN alone ends it */
    }
}

static void end_now(fxb_end *e)
{
    if (e->moved)
        set_moved_frames(e->w, e);
    fxb_worker_end_stream(e->w, e->h);
    fx_stream_handle_unref(e->h);
    free(e);
}

void fxb_worker_end_task(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_end *e = user;
    fxb_worker *w = e->w;
    e->target =
        w->jobs_done + fx_queue_depth(&w->jobs) + (w->parked_job != NULL) + fxb_durable_pending(w);
    if (w->group_held)
        fx_loop_post(l, &w->resume_task); /* a deleted stream's append is held no more (4g) */
    if (w->jobs_done >= e->target) {
        end_now(e);
        return;
    }
    e->next = w->ends;
    w->ends = e;
}

void fxb_worker_run_due_ends(fxb_worker *w)
{
    fxb_end **pp = &w->ends;
    while (*pp != NULL) {
        fxb_end *e = *pp;
        if (w->jobs_done >= e->target) {
            *pp = e->next;
            end_now(e);
        } else {
            pp = &e->next;
        }
    }
}

void fxb_worker_free_ends(fxb_worker *w)
{
    while (w->ends != NULL) {
        fxb_end *e = w->ends;
        w->ends = e->next;
        fx_stream_handle_unref(e->h);
        free(e);
    }
}
