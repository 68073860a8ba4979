/* The storage thread of durable streams (durable_store.h): one per worker
 * (fx_placement_storage_worker), an fx_loop that exists to block on the
 * disk. It owns the logs of its worker's durable streams: it appends the
 * jobs the worker side sends (offsets assigned; jobs of a stream queued
 * behind each other share one write), flushes as the fsync policy says
 * (syncpol.h: one flush serves every append waiting for it), applies
 * retention and hands each job back once the policy lets it be
 * acknowledged. The fdatasync of a flush in flight runs on its sync thread
 * (fx-sync-N, also an fx_loop), which reads only the flight it was handed
 * (dflight) and posts the result back, so this thread goes on appending
 * meanwhile. Storage thread (and teardown, once every loop stopped). */
#include "broker/durable_store.h"
#include "broker/group_journal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/idem.h"
#include "broker/replay.h"
#include "broker/worker.h"
#include "felix/error.h"

/* Claims directory |name| (under |cat_mu|). Returns 0 or -EBUSY. */
static int dir_claim(fxb_durable *d, const char *name)
{
    for (open_dir *o = d->open; o != NULL; o = o->next)
        if (strcmp(o->name, name) == 0)
            return -EBUSY;
    open_dir *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return -ENOMEM;
    snprintf(o->name, sizeof(o->name), "%s", name);
    o->next = d->open;
    d->open = o;
    return 0;
}

static void dir_release(fxb_durable *d, const char *name)
{
    pthread_mutex_lock(&d->cat_mu);
    for (open_dir **pp = &d->open; *pp != NULL; pp = &(*pp)->next) {
        if (strcmp((*pp)->name, name) == 0) {
            open_dir *o = *pp;
            *pp = o->next;
            free(o);
            break;
        }
    }
    pthread_mutex_unlock(&d->cat_mu);
}

static fx_ratelimit storage_rl = FX_RATELIMIT_INIT;

uint64_t fxb_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* The error a failed storage call gives its publishes: full disks and
 * damaged logs apart. */
static int publish_error_of(int rv)
{
    if (rv == FX_ESTORAGE_DAMAGED)
        return rv;
    return rv == -ENOSPC || rv == -EDQUOT ? FX_ESTORAGE_FULL : FX_ESTORAGE_ERROR;
}

/* ---- storage thread ------------------------------------------------------------------ */

static void on_append_task(fx_loop *l, fx_task *t, void *user);

/* The log's next offset when it was opened, of the stream of trip |t|. */
static uint64_t s_base_of(const fxb_stored *t)
{
    const fxb_storage *st = t->job->w->dur->st;
    fxb_idslot *e = fxb_idtable_find(&st->ds, fx_stream_handle_id(t->job->h)); /* storage thread */
    const dstream *s = e != NULL ? e->p : NULL;
    return s != NULL ? atomic_load_explicit(&s->first_offset, memory_order_relaxed) : 0;
}

/* Hands trip |t| back to its worker with its result |rv| as it stands, by
 * the completion task the worker side prepared. */
static void hand_back(fxb_stored *t)
{
    t->base = s_base_of(t);
    fx_loop_post(t->job->w->loop, &t->back);
}

/* Hands |t| back to its worker with |rv| (a storage failure unless 0). */
static void give_back(fxb_stored *t, int rv)
{
    if (rv != 0) {
        FX_COUNTER_INC(storage_errors);
        t->rv = publish_error_of(rv);
    }
    hand_back(t);
}

/* Charges |delta| bytes (may be negative) to account |a| (NULL: none). */
static void charge(fx_retained *a, int64_t delta)
{
    if (a != NULL)
        atomic_fetch_add_explicit(&a->bytes, delta, memory_order_relaxed);
}

/* Brings what |s| charges to the quotas to its log's bytes on disk: its
 * files, and the unwritten part of the active segment's preallocation once
 * an append passed the quotas with it (so a log opened past a quota, whose
 * appends are refused, does not make the tenant's other streams fail). */
static void charge_update(dstream *s)
{
    uint64_t disk = s->log == NULL       ? 0
                    : s->charge_reserved ? fx_dlog_disk_bytes(s->log)
                                         : fx_dlog_bytes_on_disk(s->log);
    int64_t delta = (int64_t)(disk - s->charged);
    charge(fx_stream_handle_durable_bytes(s->h), delta);
    charge(&s->st->d->bytes, delta);
    FX_GAUGE_ADD(storage_charged_bytes, delta);
    s->charged = disk;
}

/* Publishes the log's offsets and size for GET /v1/streams and the gauges. */
static void stats_update(dstream *s)
{
    charge_update(s);
    uint64_t bytes = s->log != NULL ? fx_dlog_bytes_on_disk(s->log) : 0;
    uint64_t segs = s->log != NULL ? fx_dlog_segment_count(s->log) : 0;
    FX_GAUGE_ADD(storage_bytes_on_disk, (int64_t)(bytes - s->shown_bytes));
    FX_GAUGE_ADD(storage_segments, (int64_t)(segs - s->shown_segments));
    s->shown_bytes = bytes;
    s->shown_segments = segs;
    if (s->stats == NULL || s->log == NULL)
        return;
    atomic_store_explicit(&s->stats->first, fx_dlog_first_offset(s->log), memory_order_relaxed);
    atomic_store_explicit(&s->stats->next_off, fx_dlog_next_offset(s->log), memory_order_relaxed);
    atomic_store_explicit(&s->stats->bytes, bytes, memory_order_relaxed);
    atomic_store_explicit(&s->stats->segments, segs, memory_order_relaxed);
    atomic_store_explicit(&s->stats->producers, fx_producers_count(fx_dlog_producers(s->log)),
                          memory_order_relaxed);
}

static dstats *stats_new(fx_stream_handle *h, dstate state)
{
    dstats *x = calloc(1, sizeof(*x));
    if (x == NULL)
        return NULL;
    x->handle_id = fx_stream_handle_id(h);
    x->h = fx_stream_handle_ref(h);
    x->state = state;
    return x;
}

static void stats_free(dstats *x)
{
    fx_stream_handle_unref((fx_stream_handle *)x->h);
    free(x);
}

/* Unlinks the entry of handle |id| from |d|'s list (under |cat_mu|). */
static dstats *stats_unlink(fxb_durable *d, uint64_t id)
{
    for (dstats **pp = &d->stats; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->handle_id == id) {
            dstats *x = *pp;
            *pp = x->next;
            return x;
        }
    }
    return NULL;
}

int fxb_dstats_list_recovering(fxb_durable *d, fx_stream_handle *h)
{
    dstats *x = stats_new(h, DSTATE_RECOVERING);
    if (x == NULL)
        return -ENOMEM;
    pthread_mutex_lock(&d->cat_mu);
    x->next = d->stats;
    d->stats = x;
    pthread_mutex_unlock(&d->cat_mu);
    return 0;
}

void fxb_dstats_drop_recovering(fxb_durable *d, const fx_stream_handle *h, bool failed)
{
    pthread_mutex_lock(&d->cat_mu);
    dstats *x = stats_unlink(d, fx_stream_handle_id(h));
    if (x != NULL && x->state != DSTATE_RECOVERING) { /* a dstream's: not ours */
        x->next = d->stats;
        d->stats = x;
        x = NULL;
    }
    pthread_mutex_unlock(&d->cat_mu);
    if (x == NULL)
        return;
    stats_free(x);
    fxb_durable_recovered(d, failed ? DSTATE_FAILED : DSTATE_OPEN);
}

void fxb_durable_recovered(fxb_durable *d, dstate state)
{
    if (state == DSTATE_DAMAGED)
        atomic_fetch_add_explicit(&d->rec_damaged, 1, memory_order_relaxed);
    else if (state == DSTATE_FAILED)
        atomic_fetch_add_explicit(&d->rec_failed, 1, memory_order_relaxed);
    FX_GAUGE_ADD(storage_recovering_streams, -1);
    uint64_t done = atomic_fetch_add_explicit(&d->rec_done, 1, memory_order_acq_rel) + 1;
    uint64_t now = fx_now_ns(),
             last = atomic_load_explicit(&d->rec_logged_ns, memory_order_relaxed);
    double secs = (double)(now - d->rec_t0) / 1e9;
    if (done == d->rec_total)
        FX_LOG_INFO("storage",
                    "recovered %" PRIu64 " of %" PRIu64 " durable streams in %.3f s (%" PRIu64
                    " damaged, %" PRIu64 " failed to open)",
                    done, d->rec_total, secs,
                    (uint64_t)atomic_load_explicit(&d->rec_damaged, memory_order_relaxed),
                    (uint64_t)atomic_load_explicit(&d->rec_failed, memory_order_relaxed));
    else if (now - last >= 2 * FX_NS_PER_S &&
             atomic_compare_exchange_strong_explicit(&d->rec_logged_ns, &last, now,
                                                     memory_order_relaxed, memory_order_relaxed))
        FX_LOG_INFO("storage", "recovered %" PRIu64 " of %" PRIu64 " durable streams (%.1f s)",
                    done, d->rec_total, secs);
}

/* Lists the entry of |s| for GET /v1/streams: the recovering one of its
 * catalogued stream, else a new one. Without memory it has none (GET
 * /v1/streams then shows its stream as closed). */
static void stats_list(fxb_durable *d, dstream *s)
{
    uint64_t id = fx_stream_handle_id(s->h);
    pthread_mutex_lock(&d->cat_mu);
    dstats *x = stats_unlink(d, id);
    pthread_mutex_unlock(&d->cat_mu);
    if (x != NULL && !s->st->in_recovery)
        FX_COUNTER_INC(storage_recovery_waits); /* opened for a publish or subscribe first */
    if (x == NULL && (x = stats_new(s->h, DSTATE_FAILED)) == NULL)
        return;
    s->stats = x;
    pthread_mutex_lock(&d->cat_mu);
    x->next = d->stats;
    d->stats = x;
    pthread_mutex_unlock(&d->cat_mu);
}

/* Sets the state GET /v1/streams shows for |s| (and the reason); the end of
 * a start-up recovery is counted. */
static void stats_set_state(fxb_durable *d, dstream *s, dstate state)
{
    if (s->stats == NULL)
        return;
    pthread_mutex_lock(&d->cat_mu);
    dstate was = s->stats->state;
    s->stats->state = state;
    snprintf(s->stats->why, sizeof(s->stats->why), "%s", state == DSTATE_OPEN ? "" : s->why);
    pthread_mutex_unlock(&d->cat_mu);
    if (was == DSTATE_RECOVERING)
        fxb_durable_recovered(d, state);
}

static void stats_unlist(fxb_durable *d, dstream *s)
{
    if (s->stats == NULL)
        return;
    pthread_mutex_lock(&d->cat_mu);
    for (dstats **pp = &d->stats; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == s->stats) {
            *pp = s->stats->next;
            break;
        }
    }
    pthread_mutex_unlock(&d->cat_mu);
    stats_free(s->stats);
    s->stats = NULL;
}

/* Hands back the waiting jobs the policy now lets be acknowledged. */
static void release_acked(dstream *s)
{
    uint64_t upto = fx_syncpol_ack_upto(&s->pol);
    while (s->whead != NULL && s->whead->first + s->whead->job->count <= upto)
        give_back(trip_pop(&s->whead, &s->wtail), 0);
}

/* Fails every waiting job (their flush failed: the log stopped). */
static void fail_waiting(dstream *s, int rv)
{
    while (s->whead != NULL)
        give_back(trip_pop(&s->whead, &s->wtail), rv);
}

void fxb_dstream_log_error(const dstream *s, const char *what, int rv)
{
    FX_LOG_RATELIMITED(&storage_rl, fx_now_ns(), FX_LOG_ERROR, "storage",
                       "%s failed on stream %s/%s/%s: %s%s%s", what, fx_stream_handle_tenant(s->h),
                       fx_stream_handle_namespace(s->h), fx_stream_handle_stream(s->h),
                       fx_strerror(rv), s->log != NULL && fx_dlog_last_error(s->log)[0] ? ": " : "",
                       s->log != NULL ? fx_dlog_last_error(s->log) : "");
}

/* ---- flushes: begun here, fdatasync on the sync thread, completed here ------------ */

static void arm_timer(dstream *s);

/* Accounts for a flush that ended with |rv| (the log reported |durable|):
 * hands back the jobs it lets be acknowledged, or fails every waiting one
 * (a failed flush stops the log for good). */
static void flush_result(dstream *s, int rv, uint64_t durable, bool answer)
{
    fx_syncpol_end(&s->pol, rv, durable);
    FX_HIST_OBSERVE(storage_sync_ns, fx_now_ns() - s->flight.start_ns);
    if (rv != 0) {
        FX_COUNTER_INC(storage_sync_failures);
        fxb_dstream_log_error(s, "flush", rv);
        if (answer)
            fail_waiting(s, rv);
        return;
    }
    FX_COUNTER_INC(storage_syncs);
    FX_HIST_OBSERVE(storage_sync_appends, s->flight.covers);
    if (answer)
        release_acked(s);
}

/* Begins a flush of what |s| appended so far. Returns 0, or the error that
 * ended it at once (already accounted). */
static int flush_begin(dstream *s, uint64_t now)
{
    s->flight.covers = s->pol.waiting; /* the appends this flush serves */
    s->flight.start_ns = now;
    fx_syncpol_begin(&s->pol, now);
    int rv = fx_dlog_sync_begin(s->log, &s->flight.fl);
    if (rv != 0)
        flush_result(s, rv, 0, true);
    return rv;
}

/* Runs one flush of |s| from begin to completion on the storage thread. */
static void flush_here(dstream *s, uint64_t now)
{
    if (flush_begin(s, now) != 0)
        return;
    uint64_t durable = 0;
    int rv =
        fx_dlog_sync_complete(s->log, &s->flight.fl, fx_dlog_flush_run(&s->flight.fl), &durable);
    flush_result(s, rv, durable, true);
}

/* Sync thread: the fdatasync of the flight of |user| (a dstream), then its
 * completion back to the storage thread. Nothing else of the dstream is
 * read here, and nothing at all once |done_task| is posted. */
static void on_sync_run(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    dstream *s = user;
    fxb_storage *st = s->st;
    int rv = fx_dlog_flush_run(&s->flight.fl);
    pthread_mutex_lock(&st->sync_mu);
    s->flight.rv = rv;
    s->flight.synced = true;
    pthread_cond_broadcast(&st->sync_cv);
    pthread_mutex_unlock(&st->sync_mu);
    fx_loop_post(st->loop, &s->flight.done_task);
}

/* Starts a flush of |s|. Its fdatasync runs on the sync thread while this
 * thread goes on appending (this and the other logs); the completion hands
 * back what it covered. On this thread instead with durable_flush_pipeline
 * off, and while the storage loop stops (the sync loop stops after it). */
static void flush_start(dstream *s, uint64_t now)
{
    fxb_storage *st = s->st;
    if (st->d->o.flush_inline || fx_loop_is_stopping(st->loop)) {
        flush_here(s, now);
        return;
    }
    if (flush_begin(s, now) != 0)
        return;
    if (s->flight.fl.fd < 0) { /* nothing new to flush: nothing to wait for */
        uint64_t durable = 0;
        int rv = fx_dlog_sync_complete(s->log, &s->flight.fl, 0, &durable);
        flush_result(s, rv, durable, true);
        return;
    }
    pthread_mutex_lock(&st->sync_mu);
    s->flight.synced = false;
    pthread_mutex_unlock(&st->sync_mu);
    s->flight.busy = true;
    s->flight.finished = false;
    FX_COUNTER_INC(storage_sync_offloaded);
    fx_loop_post(st->sloop, &s->flight.sync_task);
}

/* Whether a flush of |s| should start now: the policy says so, no
 * completion of an earlier one is still to run, and the log has not stopped
 * (a failed flush fails what waits; nothing is flushed again). */
static bool flush_due(const dstream *s, uint64_t now)
{
    return !s->flight.busy && s->log != NULL && !fx_dlog_is_failed(s->log) &&
           fx_syncpol_is_due(&s->pol, now);
}

/* The result of the flight's fdatasync, waiting for it (counted) unless
 * it is there. */
static int flight_rv(dstream *s, bool wait)
{
    fxb_storage *st = s->st;
    pthread_mutex_lock(&st->sync_mu);
    if (wait && !s->flight.synced)
        FX_COUNTER_INC(storage_flush_blocking_waits);
    while (!s->flight.synced)
        pthread_cond_wait(&st->sync_cv, &st->sync_mu);
    int rv = s->flight.rv;
    pthread_mutex_unlock(&st->sync_mu);
    return rv;
}

void fxb_dstream_flight_wait(dstream *s, bool answer)
{
    if (!s->flight.busy || s->flight.finished)
        return;
    int rv = flight_rv(s, true);
    s->flight.finished = true;
    if (!answer)
        s->flight.busy = false; /* teardown: its completion task never runs */
    uint64_t durable = 0;
    rv = fx_dlog_sync_complete(s->log, &s->flight.fl, rv, &durable);
    flush_result(s, rv, durable, answer);
}

/* After a flush of |s| completed: the appends that waited for it, the next
 * flush (after the jobs queued here meanwhile, so that it covers them too),
 * the timer, and the stream's end if it waited. */
static void after_flush(dstream *s, uint64_t now)
{
    fxb_dstream_append_pending(s, now);
    if (fx_dlog_is_failed(s->log))
        fail_waiting(s, FX_ESTORAGE_FAILED); /* no flush will cover them */
    if (flush_due(s, now)) {
        fx_loop_post(s->st->loop, &s->flush_task);
        s->flush_queued = true;
    } else if (!fx_timer_is_armed(&s->timer)) {
        arm_timer(s);
    }
    if (s->parked_end != NULL) {
        fx_loop_post(s->st->loop, s->parked_end);
        s->parked_end = NULL;
    }
}

/* Storage thread: the flight's fdatasync returned. */
static void on_flush_done(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    dstream *s = user;
    s->flight.busy = false;
    if (!s->flight.finished) {
        uint64_t durable = 0;
        int rv = fx_dlog_sync_complete(s->log, &s->flight.fl, flight_rv(s, false), &durable);
        flush_result(s, rv, durable, true);
    }
    s->flight.finished = false;
    after_flush(s, fx_loop_now(l));
}

void fxb_dstream_flush(dstream *s, uint64_t now)
{
    fxb_dstream_flight_wait(s, true);
    flush_here(s, now);
    fxb_gj_store_sync_all(s);
}

static fx_ratelimit timer_rl = FX_RATELIMIT_INIT;

/* Arms the timer for the next periodic flush or retention sweep. When it
 * cannot be armed (out of memory, counted) what was appended and not yet
 * flushed is not left for a timer that never fires (under on_commit its
 * acks wait for that flush): it is flushed now, one flush per append while
 * it lasts; the next append or flush tries the timer again. */
static void arm_timer(dstream *s)
{
    /* A stopped log neither flushes nor sweeps (fxb_dstream_on_timer): a
     * deadline left in the past would fire the timer on every turn. */
    if (s->log == NULL || fx_dlog_is_failed(s->log))
        return;
    uint64_t due = fx_syncpol_deadline(&s->pol);
    if (s->retain_due_ns != 0 && s->retain_due_ns < due)
        due = s->retain_due_ns;
    if (s->gj_sync_due_ns != 0 && s->gj_sync_due_ns < due)
        due = s->gj_sync_due_ns;
    if (due == UINT64_MAX || fx_loop_timer_arm(s->st->loop, &s->timer, due) == 0)
        return;
    bool flush = (s->whead != NULL || s->pol.unsynced_bytes > 0) && s->log != NULL &&
                 !fx_dlog_is_failed(s->log) && !s->flight.busy; /* a completion re-arms */
    FX_COUNTER_INC(broker_timer_arm_failures);
    FX_LOG_RATELIMITED(&timer_rl, fx_now_ns(), FX_LOG_ERROR, "storage",
                       "out of memory arming the flush timer of stream %s/%s/%s: %s",
                       fx_stream_handle_tenant(s->h), fx_stream_handle_namespace(s->h),
                       fx_stream_handle_stream(s->h),
                       flush ? "flushing at once" : "nothing to flush");
    if (flush)
        flush_start(s, fx_loop_now(s->st->loop));
}

/* How far the wall clock may run ahead of the monotonic clock since start
 * before time retention stops following it (fx_retention_now_us). */
#define RETENTION_CLOCK_TOLERANCE_US (60u * 1000000u)

static void retain(dstream *s, uint64_t now)
{
    fx_dlog_retained r = {0};
    bool held = false;
    uint64_t now_us = fx_retention_now_us(&s->st->d->clock, fxb_wall_us(), fx_now_ns(),
                                          RETENTION_CLOCK_TOLERANCE_US, &held);
    if (held && s->retain_ns != 0) {
        FX_COUNTER_INC(storage_retention_clock_held);
        FX_LOG_RATELIMITED(&storage_rl, now, FX_LOG_WARN, "storage",
                           "the wall clock runs %" PRIu64
                           " s ahead of the monotonic clock since start: time retention of "
                           "%s/%s/%s follows the monotonic clock until the next start",
                           (fxb_wall_us() - now_us) / 1000000u, fx_stream_handle_tenant(s->h),
                           fx_stream_handle_namespace(s->h), fx_stream_handle_stream(s->h));
    }
    int rv = fx_dlog_retain(s->log, s->retain_bytes, s->retain_ns / 1000u, now_us, &r);
    FX_COUNTER_ADD(storage_retention_segments, r.segments);
    FX_COUNTER_ADD(storage_retention_bytes, r.bytes);
    if (rv != 0)
        fxb_dstream_log_error(s, "retention sweep", rv);
    else if (r.segments > 0)
        FX_LOG_INFO("storage",
                    "retention deleted %" PRIu64 " segments (%" PRIu64
                    " bytes) of %s/%s/%s; it starts at offset %" PRIu64,
                    r.segments, r.bytes, fx_stream_handle_tenant(s->h),
                    fx_stream_handle_namespace(s->h), fx_stream_handle_stream(s->h),
                    r.first_offset);
    s->retain_due_ns = now + s->st->d->o.retention_interval_ns;
}

void fxb_dstream_set_retention(dstream *s, uint64_t bytes, uint64_t seconds, uint64_t now)
{
    const fx_broker_durable_opts *o = &s->st->d->o;
    s->retain_bytes = bytes != 0 ? bytes : o->retention_bytes;
    s->retain_ns = seconds != 0 ? seconds * FX_NS_PER_S : o->retention_ns;
    s->retain_due_ns = 0;
    if (s->log != NULL && !fx_dlog_is_failed(s->log) && (s->retain_bytes != 0 || s->retain_ns != 0))
        retain(s, now); /* the new bounds apply now; the next sweep one interval on */
    stats_update(s);
    arm_timer(s);
}

void fxb_dstream_journal_dirty(dstream *s, uint64_t now)
{
    if (s->gj_sync_due_ns != 0)
        return; /* the timer has it */
    s->gj_sync_due_ns = now + s->st->d->o.fsync_interval_ns;
    arm_timer(s);
}

void fxb_dstream_on_timer(fx_loop *l, fx_timer *t, void *user)
{
    (void)t;
    dstream *s = user;
    uint64_t now = fx_loop_now(l);
    if (s->log != NULL && !fx_dlog_is_failed(s->log)) {
        if (flush_due(s, now)) {
            flush_start(s, now);
            fxb_gj_store_sync_all(s); /* periodic: the groups' journals with the log */
        }
        if (s->retain_due_ns != 0 && now >= s->retain_due_ns)
            retain(s, now);
        if (s->gj_sync_due_ns != 0 && now >= s->gj_sync_due_ns)
            fxb_gj_store_sync_all(s); /* the groups' journals, also with no log flush due */
        stats_update(s);
    }
    arm_timer(s);
}

static void on_flush_task(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    dstream *s = user;
    uint64_t now = fx_loop_now(l);
    s->flush_queued = false;
    if (s->log == NULL)
        return;
    fxb_dstream_append_pending(s, now); /* those queued meanwhile: this flush covers them */
    if (flush_due(s, now))
        flush_start(s, now);
}

/* What clients of |s| are told about its failed open: the log's |msg|
 * without the server's directory path ("corruption detected: WHAT (stream=
 * S, file=F, position=P)"), else the error's name. */
static void set_why(dstream *s, int rv, const char *msg)
{
    const char *dir = strstr(msg, ", dir=");
    const char *after = dir != NULL ? strstr(dir + 6, ", file=") : NULL;
    if (after != NULL)
        snprintf(s->why, sizeof(s->why), "%.*s%s", (int)(dir - msg), msg, after);
    else
        snprintf(s->why, sizeof(s->why), "%s", msg[0] ? msg : fx_strerror(rv));
}

/* Logs and counts a failed open of |s|'s log (|label|): damage quarantines
 * the stream, anything else is tried again later. */
static void open_failed(dstream *s, const char *label, int rv, const char *msg)
{
    set_why(s, rv, msg);
    if (rv == FX_ESTORAGE_CORRUPT) {
        FX_LOG_ERROR("storage",
                     "the log of %s is damaged: %s; its publishes and subscribes fail with "
                     "\"storage damaged\" (the other streams are served) until it is repaired "
                     "(felix log repair on the stopped broker's stream directory, or "
                     "felix-broker --repair-durable)",
                     label, msg[0] ? msg : fx_strerror(rv));
        return;
    }
    FX_COUNTER_INC(storage_open_failures);
    FX_LOG_RATELIMITED(&storage_rl, fx_now_ns(), FX_LOG_ERROR, "storage",
                       "cannot open the log of %s: %s%s%s (tried again in 1 s at the next use)",
                       label, fx_strerror(rv), msg[0] ? ": " : "", msg);
}

/* Declares the log of |s| in the catalogue (the entry's segment and index
 * sizes into |c|, its retention overrides into |s|), puts its directory in
 * |dir| and claims it. Returns 0, -EBUSY (logged) or the catalogue's
 * error. */
static int declare(dstream *s, fx_dlog_config *c, char *dir, size_t len, bool *padopted)
{
    fxb_durable *d = s->st->d;
    const char *t = fx_stream_handle_tenant(s->h), *ns = fx_stream_handle_namespace(s->h),
               *name = fx_stream_handle_stream(s->h);
    fx_catalog_params p = {.created_us = fxb_wall_us(),
                           .segment_bytes = d->o.segment_bytes,
                           .index_spacing_bytes = d->o.index_spacing_bytes};
    const fx_catalog_entry *e;
    pthread_mutex_lock(&d->cat_mu);
    int rv = fx_catalog_declare(d->cat, t, ns, name, &p, padopted, &e);
    if (rv == 0) {
        c->segment_bytes = e->segment_bytes;
        c->index_spacing_bytes = e->index_spacing_bytes;
        s->retain_bytes = e->retention_bytes ? e->retention_bytes : d->o.retention_bytes;
        s->retain_ns =
            e->retention_seconds ? e->retention_seconds * FX_NS_PER_S : d->o.retention_ns;
        rv = fx_catalog_dir_path(d->cat, e, dir, len);
    }
    /* The claim lasts as long as the dstream: a stream of the same names
     * created meanwhile (after a deletion) waits for this one's end, which
     * marks the entry deleting before it releases the claim, so the new one
     * gets an incarnation of its own (catalog.h). An open tried again after
     * a failure keeps the claim it has. */
    if (rv == 0 && s->dirname[0] == '\0' && (rv = dir_claim(d, e->dir)) == 0) {
        snprintf(s->dirname, sizeof(s->dirname), "%s", e->dir);
        s->gen = e->generation;
    }
    pthread_mutex_unlock(&d->cat_mu);
    if (rv == -EBUSY)
        FX_LOG_WARN("storage",
                    "the log of %s/%s/%s is still open for a deleted stream of that "
                    "name; its publishes fail until it is closed",
                    t, ns, name);
    return rv;
}

/* Counts and logs what the open of |s|'s log (|label|) found and did. */
static void opened_report(const dstream *s, const char *label, const fx_dlog_recovery *rep,
                          bool adopted)
{
    FX_COUNTER_ADD(storage_recovery_truncated_bytes, rep->truncated_bytes);
    if (rep->truncated_bytes > 0)
        FX_COUNTER_INC(storage_recovery_truncations);
    if (rep->repaired)
        FX_COUNTER_INC(storage_recovery_repairs);
    if (rep->message[0])
        FX_LOG_WARN("storage", "%s: %s", label, rep->message);
    FX_LOG_INFO("storage", "opened the log of %s%s at offset %" PRIu64, label,
                adopted ? " (adopted an existing directory)" : "", fx_dlog_next_offset(s->log));
}

static int open_log(dstream *s)
{
    fxb_durable *d = s->st->d;
    char dir[sizeof(d->dir) + FX_CATALOG_DIR_MAX + 2], label[3 * FX_REGISTRY_NAME_MAX + 8];
    bool adopted = false;
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    int rv = declare(s, &c, dir, sizeof(dir), &adopted);
    if (rv != 0)
        return rv;
    snprintf(label, sizeof(label), "%s/%s/%s/0", fx_stream_handle_tenant(s->h),
             fx_stream_handle_namespace(s->h), fx_stream_handle_stream(s->h));
    c.label = label;
    c.preallocate = d->o.preallocate;
    c.verify_all_on_open = d->o.verify_all_on_open;
    c.repair_checksum_tail = d->o.repair_checksum_tail;
    c.repair = d->o.repair;
    c.io = d->o.io;
    fx_dlog_recovery rep = {0};
    rv = fx_dlog_open(&s->log, dir, &c, fxb_wall_us(), &rep);
    if (rv != 0) {
        open_failed(s, label, rv, rep.message); /* the claim stays: a retry reuses it */
        return rv == FX_ESTORAGE_CORRUPT ? FX_ESTORAGE_DAMAGED : rv;
    }
    opened_report(s, label, &rep, adopted);
    return 0;
}

/* Sets up what an open log of |s| needs: its ring start, fsync policy and
 * retention timer. */
static void on_opened(dstream *s)
{
    uint64_t next = fx_dlog_next_offset(s->log);
    atomic_store_explicit(&s->first_offset, next, memory_order_relaxed);
    const fx_broker_durable_opts *o = &s->st->d->o;
    fx_syncpol_config pc = {.mode = o->fsync_mode,
                            .interval_ns = o->fsync_interval_ns,
                            .max_unsynced_bytes = o->max_unsynced_bytes};
    uint64_t now = fx_now_ns(); /* the loop's clock */
    fx_syncpol_init(&s->pol, &pc, now, next);
    if (s->retain_bytes != 0 || s->retain_ns != 0) {
        s->retain_due_ns = now + o->retention_interval_ns;
        arm_timer(s);
    }
}

/* Opens the log of |s| (again, after a failure) and says how it stands. */
static void dstream_open(dstream *s)
{
    s->open_rv = open_log(s);
    if (s->open_rv == 0) {
        s->why[0] = '\0';
        on_opened(s);
        stats_set_state(s->st->d, s, DSTATE_OPEN);
        stats_update(s);
        fxb_gj_store_recover(s); /* its groups, back to the worker */
    } else if (s->open_rv == FX_ESTORAGE_DAMAGED) {
        FX_GAUGE_ADD(storage_quarantined_streams, 1);
        stats_set_state(s->st->d, s, DSTATE_DAMAGED);
    } else if (s->open_rv != -EBUSY) {
        s->retry_ns = fx_now_ns() + FXB_OPEN_RETRY_NS;
        stats_set_state(s->st->d, s, DSTATE_FAILED);
    }
}

static dstream *dstream_new(fxb_storage *st, fx_stream_handle *h)
{
    dstream *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->st = st;
    s->h = fx_stream_handle_ref(h);
    fx_task_init(&s->append_task, on_append_task, s);
    fx_task_init(&s->flush_task, on_flush_task, s);
    fx_task_init(&s->flight.sync_task, on_sync_run, s);
    fx_task_init(&s->flight.done_task, on_flush_done, s);
    fx_timer_init(&s->timer, fxb_dstream_on_timer, s);
    atomic_init(&s->first_offset, 0);
    stats_list(st->d, s);
    return s;
}

/* The stream's log on this storage thread, opened on first use. */
dstream *fxb_dstream_get(fxb_storage *st, fx_stream_handle *h)
{
    fxb_idslot *e = fxb_idtable_find(&st->ds, fx_stream_handle_id(h));
    if (e != NULL) {
        dstream *s = e->p;
        /* A failed open is not kept for the stream's life (the disk may
         * have room again, the descriptors may be back): tried again at a
         * use at most once a second. Damage stays until a repair. */
        if (s->open_rv != 0 && s->open_rv != FX_ESTORAGE_DAMAGED && fx_now_ns() >= s->retry_ns)
            dstream_open(s);
        return s;
    }
    /* Its end ran here (or comes with nothing to close): a late barrier
     * must not declare the deleted stream's log again. */
    if (fx_stream_handle_is_ended(h))
        return NULL;
    dstream *s = dstream_new(st, h);
    if (s == NULL)
        return NULL;
    dstream_open(s);
    if (s->open_rv == -EBUSY) { /* not kept: the next job tries again */
        snprintf(s->why, sizeof(s->why), "its log is still open for a deleted stream of that name");
        stats_set_state(st->d, s, DSTATE_FAILED);
        fxb_dstream_close(st, s);
        return NULL;
    }
    if (fxb_idtable_insert(&st->ds, fx_stream_handle_id(h), s) != 0) {
        fxb_dstream_close(st, s); /* not kept: the next job opens it again */
        return NULL;
    }
    return s;
}

/* Closes |s| with a flush. Its jobs have all come back (the stream's end
 * waits for them, and teardown runs after a barrier that ran every flush);
 * any left are freed unanswered, not acknowledged. */
void fxb_dstream_close(fxb_storage *st, dstream *s)
{
    /* Only at teardown can a flight be left (a stream's end waits for it):
     * its completion task never runs, so nothing is handed back. */
    fxb_dstream_flight_wait(s, false);
    fxb_stored *t;
    while ((t = trip_pop(&s->ahead, &s->atail)) != NULL)
        fxb_stored_free(t);
    while ((t = trip_pop(&s->whead, &s->wtail)) != NULL)
        fxb_stored_free(t);
    free(s->iov);
    fx_loop_timer_cancel(st->loop, &s->timer);
    fxb_gj_store_close_all(s);
    if (s->log != NULL) {
        int rv = fx_dlog_close(s->log, true);
        s->log = NULL;
        if (rv != 0)
            fxb_dstream_log_error(s, "final flush", rv);
    }
    if (s->dirname[0] != '\0')
        dir_release(st->d, s->dirname);
    if (s->open_rv == FX_ESTORAGE_DAMAGED)
        FX_GAUGE_ADD(storage_quarantined_streams, -1);
    stats_update(s); /* the gauges drop what this log held */
    stats_unlist(st->d, s);
    fx_stream_handle_unref(s->h);
    free(s);
}

/* ---- appends ---------------------------------------------------------------------------- */

/* A merged append takes the jobs queued behind each other up to this many
 * bytes of records (one write; a larger job goes alone). */
#define MERGE_MAX_BYTES (256u << 10)

/* Bytes of |j|'s records, 28-byte headers included, and the 20-byte
 * producer tag of an idempotent batch's first record; UINT64_MAX when it
 * cannot share an append (no record, or a payload above the record limit:
 * it fails alone, as it would have). */
static uint64_t job_record_bytes(const fxb_job *j)
{
    if (j->count == 0)
        return UINT64_MAX;
    uint64_t n = j->idem.on ? FX_REC_TAG_LEN : 0;
    for (uint32_t i = 0; i < j->count; i++) {
        if (j->payloads[i].len > FX_REC_MAX_PAYLOAD)
            return UINT64_MAX;
        n += FX_REC_HEADER_LEN + (uint64_t)j->payloads[i].len;
    }
    return n;
}

/* The last job of the next merged append, from the head of |s|'s list: the
 * first, then the next ones while each still fits in the segment it would
 * have gone to alone (so rollover is as without merging), within
 * MERGE_MAX_BYTES and, under periodic with a byte bound, up to the job that
 * reaches the bound (the flush then runs before the next append). |*precs|:
 * the records of the jobs taken, |*pbytes| their bytes (UINT64_MAX: the
 * first cannot be appended). */
static fxb_stored *merge_end(const dstream *s, size_t *precs, uint64_t *pbytes)
{
    fxb_stored *j = s->ahead;
    uint64_t bytes = job_record_bytes(j->job);
    *precs = j->job->count;
    *pbytes = bytes;
    if (bytes == UINT64_MAX || j->job->idem.on)
        return j; /* an idempotent batch is checked and appended alone (append_idem) */
    uint64_t room = fx_dlog_room_after(s->log, bytes);
    uint64_t bound = s->pol.cfg.mode == FX_FSYNC_PERIODIC && s->pol.cfg.max_unsynced_bytes > 0
                         ? s->pol.cfg.max_unsynced_bytes
                         : UINT64_MAX;
    for (fxb_stored *n = j->next; n != NULL && s->pol.unsynced_bytes + bytes < bound; n = n->next) {
        uint64_t b = job_record_bytes(n->job);
        if (b == UINT64_MAX || b > room || bytes + b > MERGE_MAX_BYTES || n->job->idem.on)
            break;
        room -= b;
        bytes += b;
        *precs += n->job->count;
        j = n;
    }
    *pbytes = bytes;
    return j;
}

/* Unlinks the jobs from the head of |s|'s list to |last|; returns the first. */
static fxb_stored *take_through(dstream *s, fxb_stored *last)
{
    fxb_stored *first = s->ahead;
    s->ahead = last->next;
    if (s->ahead == NULL)
        s->atail = NULL;
    last->next = NULL;
    return first;
}

/* Record slots of the iov array a log keeps between appends (16 KiB); a
 * larger one, grown by one large batch, is freed after its append. */
#define IOV_KEEP 1024u

static void iov_trim(dstream *s)
{
    if (s->iov_cap <= IOV_KEEP)
        return;
    free(s->iov);
    s->iov = NULL;
    s->iov_cap = 0;
}

static int iov_reserve(dstream *s, size_t n)
{
    if (n <= s->iov_cap)
        return 0;
    size_t cap = s->iov_cap ? s->iov_cap : 64;
    while (cap < n)
        cap *= 2;
    fx_dlog_iov *p = realloc(s->iov, cap * sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    s->iov = p;
    s->iov_cap = cap;
    return 0;
}

/* Gives back the chain from |j| on with |rv|. */
static void give_back_chain(fxb_stored *j, int rv)
{
    while (j != NULL) {
        fxb_stored *next = j->next;
        give_back(j, rv);
        j = next;
    }
}

static fx_ratelimit quota_rl = FX_RATELIMIT_INIT;

/* Adds |add| bytes to account |a| unless that passes its limit (0: none). */
static bool charge_within(fx_retained *a, uint64_t add)
{
    if (a == NULL || a->limit == 0) {
        charge(a, (int64_t)add);
        return true;
    }
    int64_t was = atomic_fetch_add_explicit(&a->bytes, (int64_t)add, memory_order_relaxed);
    if (was + (int64_t)add <= (int64_t)a->limit)
        return true;
    charge(a, -(int64_t)add);
    return false;
}

/* Charges the bytes on disk an append of |bytes| bytes of records would add
 * to |s|'s log (a rollover's new reservation included) to its tenant's
 * quota and the broker's. Returns 0, or FX_ESTORAGE_QUOTA (counted, logged)
 * when either would pass its limit; an append that adds nothing (it fills
 * space already reserved) always passes. */
static int quota_charge(dstream *s, uint64_t bytes)
{
    if (bytes == UINT64_MAX)
        return 0; /* fx_dlog_append refuses it */
    uint64_t after = fx_dlog_disk_bytes_after(s->log, bytes);
    uint64_t add = after > s->charged ? after - s->charged : 0;
    fx_retained *t = fx_stream_handle_durable_bytes(s->h), *b = &s->st->d->bytes;
    bool tenant_ok = add == 0 || charge_within(t, add);
    if (tenant_ok && (add == 0 || charge_within(b, add))) {
        FX_GAUGE_ADD(storage_charged_bytes, (int64_t)add);
        s->charged += add;
        s->charge_reserved = true;
        return 0;
    }
    if (tenant_ok) {
        charge(t, -(int64_t)add);
        FX_COUNTER_INC(storage_quota_broker_bytes);
    } else {
        FX_COUNTER_INC(storage_quota_bytes);
    }
    FX_LOG_RATELIMITED(&quota_rl, fx_now_ns(), FX_LOG_WARN, "storage",
                       "storage quota exceeded: an append of %" PRIu64 " bytes to %s/%s/%s "
                       "refused (%s %" PRIu64 " bytes)",
                       bytes, fx_stream_handle_tenant(s->h), fx_stream_handle_namespace(s->h),
                       fx_stream_handle_stream(s->h),
                       tenant_ok ? "durable_bytes_max" : "tenant_durable_bytes_max",
                       tenant_ok ? b->limit : t->limit);
    return FX_ESTORAGE_QUOTA;
}

/* Gives back the chain from |j| on refused by a quota (not a storage
 * failure: storage_errors does not count it). */
static void refuse_chain(fxb_stored *j)
{
    while (j != NULL) {
        fxb_stored *next = j->next;
        j->rv = FX_ESTORAGE_QUOTA;
        hand_back(j);
        j = next;
    }
}

/* Bytes of records of the jobs from |first| to the end of its chain;
 * UINT64_MAX when one cannot be appended (it fails alone). */
static uint64_t chain_record_bytes(const fxb_stored *first)
{
    uint64_t n = 0;
    for (const fxb_stored *j = first; j != NULL; j = j->next) {
        uint64_t b = job_record_bytes(j->job);
        if (b == UINT64_MAX)
            return UINT64_MAX;
        n += b;
    }
    return n;
}

/* A re-send |t| of a batch only partly in the log (a torn marked batch):
 * when that batch is still open at the log's tail, has as many records as
 * |t| and the ones held are |t|'s first ones (same digest), |t| is cut to
 * the missing records, appended as the rest of the batch (facts §2.3);
 * anything else is another batch under the sequence. */
static bool idem_completes(dstream *s, fxb_stored *t)
{
    fxb_job *j = t->job;
    fxb_job_idem *x = &j->idem;
    uint32_t held = 0;
    if (x->count != j->count || x->held == 0 || x->held >= j->count ||
        !fx_dlog_batch_is_open(s->log, x->producer_id, x->sequence, &held) || held != x->held)
        return false;
    uint64_t d = 0;
    for (uint32_t i = 0; i < held; i++)
        d = fx_producer_digest_step(d, j->payloads[i].ptr, (uint32_t)j->payloads[i].len);
    if (d != x->held_digest)
        return false;
    j->payloads += held;
    j->count -= held;
    x->completing = true;
    x->verdict = FX_PROD_NEXT;
    return true;
}

/* An idempotent batch |t| (alone) is checked against the log's producer
 * table right before its append, on this thread, which appends the
 * stream's batches in order (idem.h). Returns true when it is to be
 * appended (with its mark); else it was settled: a duplicate waits like an
 * appended job for the flush that covers the original (answered with the
 * original's offset), a refusal goes back at once. */
static bool idem_next(dstream *s, fxb_stored *t)
{
    fxb_job_idem *x = &t->job->idem;
    x->digest = fxb_idem_digest(t->job);
    if (fx_dlog_is_failed(s->log) ||
        fxb_idem_decide(fx_dlog_producers(s->log), x, fxb_wall_us(), true))
        return true; /* a failed log refuses the append below */
    if (x->verdict == FX_PROD_PARTIAL) {
        if (idem_completes(s, t))
            return true;
        x->verdict = FX_PROD_REUSED;
        FX_COUNTER_INC(idem_reused);
    }
    if (x->verdict == FX_PROD_DUPLICATE) {
        t->first = x->first;
        trip_push(&s->whead, &s->wtail, t);
    } else {
        hand_back(t);
    }
    return false;
}

/* Appends the jobs from the head of |s|'s list to |last| (|nrecs| records)
 * as one batch: each job's records get the next offsets in list order. An
 * idempotent batch comes alone (merge_end) and is appended with its
 * producer mark (format v3) when the check lets it. */
static void append_merged(dstream *s, fxb_stored *last, size_t nrecs, uint64_t now)
{
    int rv = iov_reserve(s, nrecs);
    fxb_stored *first = take_through(s, last);
    if (rv != 0) {
        give_back_chain(first, rv);
        return;
    }
    const fxb_job_idem *idem = first->job->idem.on ? &first->job->idem : NULL;
    if (idem != NULL && !idem_next(s, first))
        return;
    if (idem != NULL)
        nrecs = first->job->count; /* a completed batch's held records are not appended again */
    if (!fx_dlog_is_failed(s->log) && quota_charge(s, chain_record_bytes(first)) != 0) {
        refuse_chain(first);
        return;
    }
    size_t k = 0;
    for (fxb_stored *t = first; t != NULL; t = t->next)
        for (uint32_t i = 0; i < t->job->count; i++)
            s->iov[k++] = (fx_dlog_iov){.data = t->job->payloads[i].ptr,
                                        .len = (uint32_t)t->job->payloads[i].len};
    uint64_t before = fx_dlog_stats_get(s->log)->append_bytes, off = 0;
    if (idem != NULL) {
        fx_dlog_mark mk = {.producer_id = idem->producer_id,
                           .sequence = idem->sequence,
                           .count = idem->completing ? idem->count : (uint32_t)nrecs,
                           .held = idem->completing ? idem->held : 0,
                           .digest = idem->digest};
        rv = fx_dlog_append_marked(s->log, s->iov, nrecs, fxb_wall_us(), &mk, &off);
        if (rv == 0 && !idem->completing)
            first->job->idem.first = off; /* completing: the batch's first, from the table */
    } else {
        rv = fx_dlog_append(s->log, s->iov, nrecs, fxb_wall_us(), &off);
    }
    iov_trim(s);
    if (rv != 0) {
        fxb_dstream_log_error(s, "append", rv);
        give_back_chain(first, rv);
        return;
    }
    FX_COUNTER_INC(storage_append_writes);
    FX_COUNTER_ADD(storage_append_records, nrecs);
    FX_COUNTER_ADD(storage_append_bytes, fx_dlog_stats_get(s->log)->append_bytes - before);
    while (first != NULL) {
        fxb_stored *j = first;
        first = j->next;
        j->first = off;
        off += j->job->count;
        /* One policy append per job: the flush fan-in counts publishes. */
        fx_syncpol_appended(&s->pol, off, job_record_bytes(j->job), now);
        trip_push(&s->whead, &s->wtail, j);
    }
}

/* periodic with durable_max_unsynced_bytes: the bound is reached. */
static bool bound_reached(const dstream *s)
{
    const fx_syncpol *p = &s->pol;
    return p->cfg.mode == FX_FSYNC_PERIODIC && p->cfg.max_unsynced_bytes > 0 &&
           p->unsynced_bytes >= p->cfg.max_unsynced_bytes;
}

/* Whether an append of |bytes| bytes must wait for the flush in flight of
 * |s| to complete: it needs a rollover (the segment being flushed stays the
 * active one until then; a roll's seal flushes it anyway), or periodic's
 * byte bound is reached (a power cut must not lose more than the bound and
 * one batch). The completion appends it. */
static bool append_waits(const dstream *s, uint64_t bytes)
{
    if (!fx_dlog_is_flushing(s->log))
        return false;
    return (bytes != UINT64_MAX && fx_dlog_append_rolls(s->log, bytes)) || bound_reached(s);
}

void fxb_dstream_append_pending(dstream *s, uint64_t now)
{
    if (s->ahead == NULL)
        return;
    size_t nsegs = fx_dlog_segment_count(s->log);
    while (s->ahead != NULL) {
        size_t nrecs;
        uint64_t bytes;
        fxb_stored *last = merge_end(s, &nrecs, &bytes);
        if (append_waits(s, bytes)) {
            FX_COUNTER_INC(storage_append_flush_waits);
            break;
        }
        append_merged(s, last, nrecs, now);
        /* periodic's byte bound is reached: flush before appending more
         * (when that flush is in flight, append_waits holds the rest). */
        if (s->ahead != NULL && s->pol.cfg.mode == FX_FSYNC_PERIODIC &&
            !fx_dlog_is_failed(s->log) && flush_due(s, now))
            flush_start(s, now);
    }
    release_acked(s);
    /* The log stopped (an append could not be cut back): no flush will
     * cover what waits; a flush in flight fails it when it completes. */
    if (fx_dlog_is_failed(s->log) && !s->flight.busy)
        fail_waiting(s, FX_ESTORAGE_FAILED);
    if (s->retain_due_ns != 0 && fx_dlog_segment_count(s->log) > nsegs)
        retain(s, now); /* a segment was sealed: the byte bound may be passed now */
    stats_update(s);
}

/* Appends what was queued up to now, then flushes if the policy says so. */
static void on_append_task(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    dstream *s = user;
    uint64_t now = fx_loop_now(l);
    fxb_dstream_append_pending(s, now);
    if (flush_due(s, now)) {
        /* After the jobs queued here meanwhile, so one flush covers them all. */
        fx_loop_post(l, &s->flush_task);
        s->flush_queued = true;
    } else if (!fx_timer_is_armed(&s->timer)) {
        arm_timer(s);
    }
}

/* ---- tasks from the worker side ------------------------------------------------------- */

void fxb_store_on_job(fx_loop *l, fx_task *task, void *user)
{
    (void)task;
    fxb_stored *t = user;
    fxb_job *j = t->job;
    dstream *s = fxb_dstream_get(j->w->dur->st, j->h);
    if (s == NULL && fx_stream_handle_is_ended(j->h)) {
        /* Deleted before its first job got here: refused as the worker
         * would refuse it, not a storage failure. */
        t->rv = FX_ENOSTREAM;
        hand_back(t);
        return;
    }
    if (s == NULL || s->open_rv != 0) {
        if (s != NULL && s->open_rv == FX_ESTORAGE_DAMAGED)
            j->swhy = strdup(s->why); /* NULL: the code's text alone */
        give_back(t, s == NULL ? -EIO : s->open_rv);
        return;
    }
    trip_push(&s->ahead, &s->atail, t);
    fx_loop_post(l, &s->append_task);
}

static fxb_durable *st_dir_of(const fxb_sub *sub)
{
    return sub->w->dur->st->d;
}

void fxb_store_on_sub(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_sub *sub = user;
    dstream *s = fxb_dstream_get(sub->w->dur->st, sub->h);
    sub->dur.rv = s == NULL         ? FX_ESTORAGE_ERROR
                  : s->open_rv != 0 ? publish_error_of(s->open_rv)
                                    : 0;
    if (s == NULL && fx_stream_handle_is_ended(sub->h))
        sub->dur.rv = FX_ENOSTREAM; /* deleted and ended meanwhile */
    if (sub->dur.rv == FX_ESTORAGE_DAMAGED && sub->dur.why == NULL)
        sub->dur.why = strdup(s->why); /* NULL: the code's text alone */
    sub->dur.base = s != NULL ? atomic_load_explicit(&s->first_offset, memory_order_relaxed) : 0;
    if (sub->dur.rv == 0 && sub->start.kind != FX_START_LATEST) {
        /* It may start below the ring: a reader of the log, in case. */
        char dir[sizeof(st_dir_of(sub)->dir) + FX_CATALOG_DIR_MAX + 2];
        snprintf(dir, sizeof(dir), "%s/%s", st_dir_of(sub)->dir, s->dirname);
        sub->dur.replay =
            fxb_replay_new(dir, st_dir_of(sub)->o.io, fx_dlog_first_offset(s->log),
                           sub->w->dur->st->rloop, st_dir_of(sub)->o.max_records_per_read);
        if (sub->dur.replay == NULL)
            sub->dur.rv = -ENOMEM;
    }
    sub->dur.ready = true;
    fx_loop_post(sub->w->loop, &sub->feed.reg_task); /* keeps the posting reference */
}

int (*_Atomic fxb_durable_delete_hook)(const char *path);

/* Removes the directory of the incarnation being deleted, then its entry. */
static int finish_delete(fxb_durable *d, uint64_t gen, const char *path)
{
    int rv = fx_sio_remove_dir(d->o.io != NULL ? d->o.io : fx_sio_posix(), path);
    if (rv == 0) {
        pthread_mutex_lock(&d->cat_mu);
        rv = fx_catalog_end_delete(d->cat, gen);
        pthread_mutex_unlock(&d->cat_mu);
    }
    return rv;
}

/* Whether the end |m| of a stream must wait for its log |s| (NULL: none
 * here): a flush in flight or queued uses the dstream. */
static bool end_waits(fx_loop *l, end_msg *m, dstream *s)
{
    if (s != NULL && s->flight.busy) {
        /* A flush is in flight (under none or periodic the jobs came back
         * before it): its completion uses the dstream and posts the end. */
        s->parked_end = &m->task;
        return true;
    }
    if (s != NULL && s->flush_queued) {
        /* Its jobs came back before the flush that followed their append
         * was queued: that flush runs first (it uses the dstream). */
        fx_loop_post(l, &m->task);
        return true;
    }
    return false;
}

/* Marks incarnation |gen| deleting in the catalogue and puts its directory
 * in |path|. */
static int delete_begin(fxb_durable *d, uint64_t gen, char *path, size_t len)
{
    pthread_mutex_lock(&d->cat_mu);
    int rv = fx_catalog_begin_delete(d->cat, gen);
    const fx_catalog_entry *ce = fx_catalog_find_generation(d->cat, gen);
    if (rv == 0 && ce != NULL)
        rv = fx_catalog_dir_path(d->cat, ce, path, len);
    pthread_mutex_unlock(&d->cat_mu);
    return rv;
}

/* Removes the directory |path| of incarnation |gen| of |h|'s log, whose
 * delete_begin gave |rv|, and its entry; logs how it went. A failure is
 * retried in the background. */
static void delete_end(fxb_durable *d, const fx_stream_handle *h, uint64_t gen, int rv,
                       const char *path)
{
    const char *tn = fx_stream_handle_tenant(h), *ns = fx_stream_handle_namespace(h),
               *name = fx_stream_handle_stream(h);
    int (*hook)(const char *) = atomic_load(&fxb_durable_delete_hook);
    if (rv == 0 && hook != NULL)
        rv = hook(path); /* tests: a deletion held or failing here */
    if (rv == 0)
        rv = finish_delete(d, gen, path);
    if (rv == 0) {
        FX_LOG_INFO("storage", "deleted the log of %s/%s/%s and its catalogue entry", tn, ns, name);
        return;
    }
    FX_COUNTER_INC(storage_delete_failures);
    FX_LOG_ERROR("storage",
                 "cannot delete the log of %s/%s/%s (generation %" PRIu64
                 "): %s; retried in the background, the names are free for a new stream",
                 tn, ns, name, gen, fx_strerror(rv));
    pthread_mutex_lock(&d->cat_mu);
    size_t pending = fx_catalog_pending_deletions(d->cat);
    pthread_mutex_unlock(&d->cat_mu);
    FX_GAUGE_SET(storage_deletions_pending, (int64_t)pending);
    fxb_durable_retry_deletions_soon(d);
}

void fxb_store_on_end(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    end_msg *m = user;
    fxb_storage *st = m->st;
    fxb_idslot *e = fxb_idtable_find(&st->ds, fx_stream_handle_id(m->h));
    dstream *s = e != NULL ? e->p : NULL;
    if (end_waits(l, m, s))
        return;
    /* A deleted durable stream leaves the catalogue with its files, so its
     * data never comes back under that name. Only the incarnation this
     * stream declared (a stream that never declared one here has none):
     * it is marked deleting before the directory claim is released, so a
     * stream of the same names created meanwhile declares a new one, in its
     * own directory, and never writes into the files removed below. */
    fxb_durable *d = st->d;
    uint64_t gen = s != NULL && s->dirname[0] != '\0' ? s->gen : 0;
    char path[sizeof(d->dir) + FX_CATALOG_DIR_MAX + 2];
    int rv = gen != 0 ? delete_begin(d, gen, path, sizeof(path)) : 0;
    if (s != NULL) {
        fxb_idtable_remove(&st->ds, e);
        fxb_dstream_close(st, s); /* releases the claim */
    }
    if (gen != 0)
        delete_end(d, m->h, gen, rv, path);
    fx_stream_handle_unref(m->h);
    free(m);
}

/* ---- deletions retried --------------------------------------------------------------- */

#define RETRY_DELETIONS_NS (30 * FX_NS_PER_S)

static void on_retry_timer(fx_loop *l, fx_timer *t, void *user)
{
    (void)t;
    fxb_durable *d = user;
    d->retry_armed = false;
    size_t left = 0;
    pthread_mutex_lock(&d->cat_mu);
    int rv = fx_catalog_retry_deletions(d->cat, &left);
    pthread_mutex_unlock(&d->cat_mu);
    if (rv != 0)
        FX_LOG_WARN("storage", "retrying deletions: writing the catalogue: %s", fx_strerror(rv));
    FX_GAUGE_SET(storage_deletions_pending, (int64_t)left);
    if (left > 0 && fx_loop_timer_arm(l, &d->retry_timer, fx_loop_now(l) + RETRY_DELETIONS_NS) == 0)
        d->retry_armed = true;
}

static void on_retry_task(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_durable *d = user;
    atomic_store(&d->retry_posted, false);
    if (!d->retry_armed &&
        fx_loop_timer_arm(l, &d->retry_timer, fx_loop_now(l) + RETRY_DELETIONS_NS) == 0)
        d->retry_armed = true;
}

void fxb_durable_retry_deletions_soon(fxb_durable *d)
{
    if (d->nstarted == 0 || atomic_exchange(&d->retry_posted, true))
        return;
    fx_loop_post(d->st[0].loop, &d->retry_task);
}

void fxb_durable_retry_init(fxb_durable *d)
{
    fx_task_init(&d->retry_task, on_retry_task, d);
    fx_timer_init(&d->retry_timer, on_retry_timer, d);
    atomic_init(&d->retry_posted, false);
}
