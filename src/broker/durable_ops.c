/* The storage stage's life and its operator-facing parts (durable.h):
 * opening the catalogue and creating the storage, replay and sync threads,
 * recovering every catalogued stream at start, the flush of every log at
 * the end of a drain, and shutdown. Main thread unless a function says
 * otherwise. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/metrics.h"
#include "base/placement.h"
#include "broker/durable_admin.h"
#include "broker/durable_store.h"
#include "broker/worker.h"
#include "felix/error.h"

/* ---- lifecycle ------------------------------------------------------------------------- */

/* Hands the reason of a failed start to the caller's buffer (opts.durable.error). */
static void report(fx_broker *b, const char *why)
{
    if (b->o.durable.error != NULL && b->o.durable.error_len > 0)
        snprintf(b->o.durable.error, b->o.durable.error_len, "%s", why);
}

/* Takes the storage root for this broker alone (rootlock.h: also its owner
 * and mode) before the catalogue reads or repairs anything in it, and from
 * then on names the root by its real path, so nothing below it is reached
 * through a symbolic link. Only on the real file system: an in-memory test
 * layer has no other process to keep out. */
static int take_root(fxb_durable *d)
{
    if (d->o.io != NULL && d->o.io != fx_sio_posix())
        return 0;
    int rv = fx_rootlock_take(&d->lock, d->dir, FX_ROOTLOCK_FILE, "durable_storage_dir", d->error,
                              sizeof(d->error));
    if (rv != 0) {
        report(d->b, d->error);
        return rv;
    }
    snprintf(d->dir, sizeof(d->dir), "%s", fx_rootlock_path(d->lock));
    return 0;
}

/* Makes |b|'s stage from its options |o| (as yet without catalogue or
 * storage threads); NULL on -ENOMEM. */
static fxb_durable *stage_new(fx_broker *b, const fx_broker_durable_opts *o)
{
    fxb_durable *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return NULL;
    d->b = b;
    d->o = *o;
    atomic_init(&d->bytes.refs, 1);
    atomic_init(&d->bytes.bytes, 0);
    d->bytes.limit = o->bytes_max;
    snprintf(d->dir, sizeof(d->dir), "%s", o->dir);
    d->o.dir = d->dir;
    b->o.durable.dir = d->dir;
    pthread_mutex_init(&d->cat_mu, NULL);
    fxb_durable_retry_init(d);
    d->clock = (fx_retention_clock){.wall_us = fxb_wall_us(), .mono_ns = fx_now_ns()};
    return d;
}

/* Opens the catalogue in the root; a failure is reported with its reason. */
static int catalogue_open(fxb_durable *d)
{
    char err[512] = "";
    int rv = fx_catalog_open(&d->cat, d->o.io, d->dir, err, sizeof(err));
    if (rv != 0) {
        snprintf(d->error, sizeof(d->error), "the catalogue in %s: %s%s%s", d->dir, fx_strerror(rv),
                 err[0] ? ": " : "", err);
        report(d->b, d->error);
    }
    return rv;
}

/* Creates storage thread |i| (with its replay and sync threads, not
 * started) for worker |w|, and |w|'s side of the stage. */
static int storage_init(fxb_durable *d, uint32_t i, fxb_worker *w)
{
    fxb_storage *st = &d->st[i];
    char name[24];
    snprintf(name, sizeof(name), "fx-storage-%u", (unsigned)(i % 100000u));
    fx_loop_opts lo = {.name = name, .cpu = -1};
    st->d = d;
    st->w = w;
    int rv;
    if ((rv = fx_loop_new(&st->loop, &lo)) != 0)
        return rv;
    snprintf(name, sizeof(name), "fx-replay-%u", (unsigned)(i % 100000u));
    if ((rv = fx_loop_new(&st->rloop, &lo)) != 0)
        return rv;
    /* The sync thread only for durable_flush_pipeline (flush_start). */
    snprintf(name, sizeof(name), "fx-sync-%u", (unsigned)(i % 100000u));
    if (!d->o.flush_inline && (rv = fx_loop_new(&st->sloop, &lo)) != 0)
        return rv;
    pthread_mutex_init(&st->sync_mu, NULL);
    pthread_cond_init(&st->sync_cv, NULL);
    if ((w->dur = calloc(1, sizeof(*w->dur))) == NULL)
        return -ENOMEM;
    w->dur->st = st;
    return 0;
}

int fxb_durable_init(fx_broker *b)
{
    const fx_broker_durable_opts *o = &b->o.durable;
    if (o->dir == NULL || o->dir[0] == '\0') {
        b->o.durable.dir = NULL; /* borrowed: not kept */
        return 0;
    }
    fxb_durable *d = stage_new(b, o);
    if (d == NULL)
        return -ENOMEM;
    b->dur = d;
    int rv = take_root(d);
    if (rv == 0)
        rv = catalogue_open(d);
    if (rv != 0)
        return rv;
    d->nst = b->nworkers;
    d->st = calloc(d->nst, sizeof(*d->st));
    if (d->st == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < b->nworkers; i++) {
        fxb_worker *w = &b->workers[fx_placement_storage_worker(i, b->nworkers)];
        if ((rv = storage_init(d, i, w)) != 0)
            return rv;
    }
    FX_LOG_INFO("storage",
                "opening durable stream storage root=%s segment=%" PRIu64 " index_spacing=%" PRIu64
                " fsync %s retention=%" PRIu64 "B/%" PRIu64 "s",
                d->dir, o->segment_bytes, o->index_spacing_bytes, fx_fsync_mode_name(o->fsync_mode),
                o->retention_bytes, (uint64_t)(o->retention_ns / FX_NS_PER_S));
    fxb_durable_metrics_start(d);
    return 0;
}

/* ---- start-up recovery ------------------------------------------------------------- */

void (*_Atomic fxb_test_on_recover)(const fx_stream_handle *h); /* static storage: starts NULL */

/* Queues the recovery of catalogued stream |h| on its storage thread (the
 * queue's reference) and lists it as recovering. */
static int queue_recovery(fx_broker *b, fx_stream_handle *h)
{
    fxb_storage *st = fxb_worker_for(b, h)->dur->st;
    if (st->rqn == st->rqcap) {
        size_t cap = st->rqcap ? 2 * st->rqcap : 16;
        fx_stream_handle **q = realloc(st->rq, cap * sizeof(*q));
        if (q == NULL)
            return -ENOMEM;
        st->rq = q;
        st->rqcap = cap;
    }
    int rv = fxb_dstats_list_recovering(b->dur, h);
    if (rv == 0)
        st->rq[st->rqn++] = fx_stream_handle_ref(h);
    return rv;
}

int fxb_durable_recover(fx_broker *b)
{
    fxb_durable *d = b->dur;
    if (d == NULL)
        return 0;
    size_t n = 0; /* the declarations later find their entries */
    for (size_t i = 0; i < fx_catalog_count(d->cat); i++) {
        const fx_catalog_entry *e = fx_catalog_at(d->cat, i);
        if (e->deleting) /* not a stream any more: its files go in the background */
            continue;
        n++;
        fx_wire_slice t = {(const uint8_t *)e->tenant, strlen(e->tenant)};
        fx_wire_slice ns = {(const uint8_t *)e->ns, strlen(e->ns)};
        fx_wire_slice st = {(const uint8_t *)e->stream, strlen(e->stream)};
        fx_stream_handle *h = NULL;
        fx_registry_err err = {0};
        int rv = fx_registry_create_durable(b->reg, t, ns, st, FX_REGISTRY_DURABLE_ADOPT, &h, NULL,
                                            &err);
        if (rv == 0) {
            rv = queue_recovery(b, h);
            fx_stream_handle_unref(h);
            if (rv != 0)
                snprintf(err.msg, sizeof(err.msg), "%s", fx_strerror(rv));
        }
        if (rv != 0) {
            snprintf(d->error, sizeof(d->error), "stream %s/%s/%s of the catalogue: %s", e->tenant,
                     e->ns, e->stream, err.msg[0] ? err.msg : fx_strerror(rv));
            report(b, d->error);
            return rv;
        }
    }
    d->rec_total = n;
    FX_GAUGE_ADD(storage_recovering_streams, (int64_t)n);
    return 0;
}

/* Opens the next catalogued log of this storage thread, then lets the
 * tasks queued meanwhile run (a publish or subscribe of a stream not
 * recovered yet opens its log first) before the next one. */
static void storage_on_recover(fx_loop *l, fx_task *t, void *user)
{
    fxb_storage *st = user;
    bool go = !fx_loop_is_stopping(l) &&
              !atomic_load_explicit(&st->d->stopping, memory_order_acquire);
    if (st->rqi < st->rqn && go) {
        fx_stream_handle *h = st->rq[st->rqi];
        st->rq[st->rqi++] = NULL;
        void (*hook)(const fx_stream_handle *) = fxb_test_on_recover;
        if (hook != NULL)
            hook(h);
        st->in_recovery = true;
        dstream *s = fxb_dstream_get(st, h);
        st->in_recovery = false;
        if (s == NULL) /* ended meanwhile, or no memory or a busy directory (logged) */
            fxb_dstats_drop_recovering(st->d, h, !fx_stream_handle_is_ended(h));
        fx_stream_handle_unref(h);
    }
    if (st->rqi < st->rqn && go)
        fx_loop_post(l, t);
}

static void recovery_start(fxb_durable *d)
{
    d->rec_t0 = fx_now_ns();
    atomic_store_explicit(&d->rec_logged_ns, d->rec_t0, memory_order_relaxed);
    if (d->rec_total > 0)
        FX_LOG_INFO("storage",
                    "recovering %" PRIu64 " durable streams on %u storage threads; each is "
                    "served once its log is open",
                    d->rec_total, (unsigned)d->nstarted);
    for (uint32_t i = 0; i < d->nstarted; i++) {
        fxb_storage *st = &d->st[i];
        if (st->rqn == 0)
            continue;
        fx_task_init(&st->rtask, storage_on_recover, st);
        fx_loop_post(st->loop, &st->rtask);
    }
}

void fx_broker_durable_recovery(const fx_broker *b, fx_broker_recovery *out)
{
    *out = (fx_broker_recovery){0};
    const fxb_durable *d = b->dur;
    if (d == NULL)
        return;
    out->total = d->rec_total;
    out->done = atomic_load_explicit(&d->rec_done, memory_order_acquire);
    out->damaged = atomic_load_explicit(&d->rec_damaged, memory_order_relaxed);
    out->failed = atomic_load_explicit(&d->rec_failed, memory_order_relaxed);
}

/* A flush of every log of every storage thread, asked of them with
 * fx_loop_ask_all (which keeps its own copy: the waiter may give up at its
 * deadline while they still run). Storage thread |i| fills |n[i]|. */
typedef struct flush_all {
    fxb_storage *st; /* d->st */
    struct {
        uint64_t flushed, failed;
    } n[];
} flush_all;

static void storage_on_flush_all(size_t i, void *data)
{
    flush_all *fa = data;
    fxb_storage *st = &fa->st[i];
    uint64_t ok = 0, bad = 0;
    size_t pos = 0;
    for (fxb_idslot *e; (e = fxb_idtable_next(&st->ds, &pos)) != NULL;) {
        dstream *s = e->p;
        if (s->log != NULL) {
            /* The flush in flight first (its jobs answered), then one here
             * that covers everything, those queued included. */
            fxb_dstream_flight_wait(s, true);
            fxb_dstream_append_pending(s, fx_now_ns());
        }
        if (s->log == NULL || fx_dlog_is_failed(s->log) || fx_dlog_unsynced_bytes(s->log) == 0)
            continue;
        fxb_dstream_flush(s, fx_now_ns()); /* through the policy: counted, failures logged */
        if (fx_dlog_is_failed(s->log))
            bad++;
        else
            ok++;
    }
    fa->n[i].flushed = ok;
    fa->n[i].failed = bad;
}

void fxb_durable_each_loop(fx_broker *b, void (*cb)(fx_loop *l, void *user), void *user)
{
    fxb_durable *d = b->dur;
    for (uint32_t i = 0; d != NULL && i < d->nstarted; i++) {
        cb(d->st[i].loop, user);
        cb(d->st[i].rloop, user);
        if (d->st[i].sloop != NULL)
            cb(d->st[i].sloop, user);
    }
}

/* Asks every storage thread of |d| to flush and sums their counts into
 * |sum| (flushed, failed). Returns 0, FX_ETIMEDOUT at |deadline_ns| (with
 * the thread that had not answered in |*pmissing|) or -ENOMEM. */
static int ask_flush(fxb_durable *d, uint64_t deadline_ns, uint64_t sum[2], size_t *pmissing)
{
    size_t n = d->nstarted, size = sizeof(flush_all) + n * sizeof(((flush_all *)0)->n[0]);
    flush_all *fa = calloc(1, size);
    fx_loop **loops = calloc(n, sizeof(*loops));
    int rv = -ENOMEM;
    if (fa != NULL && loops != NULL) {
        fa->st = d->st;
        for (size_t i = 0; i < n; i++)
            loops[i] = d->st[i].loop;
        uint64_t now = fx_now_ns();
        uint64_t left = deadline_ns > now ? deadline_ns - now : 0;
        fx_loop_ask_req q = {.fn = storage_on_flush_all,
                             .data = fa,
                             .size = size,
                             .timeout_ns = left > INT64_MAX ? INT64_MAX : (int64_t)left};
        rv = fx_loop_ask_all(loops, n, &q, pmissing);
    }
    for (size_t i = 0; rv == 0 && i < n; i++) {
        sum[0] += fa->n[i].flushed;
        sum[1] += fa->n[i].failed;
    }
    free(loops);
    free(fa);
    return rv;
}

int fxb_durable_flush_all(fx_broker *b, uint64_t deadline_ns)
{
    fxb_durable *d = b->dur;
    if (d == NULL || d->nstarted == 0)
        return 0;
    uint64_t sum[2] = {0, 0};
    size_t missing = 0;
    int rv = ask_flush(d, deadline_ns, sum, &missing);
    if (rv == FX_ETIMEDOUT)
        FX_LOG_ERROR("storage",
                     "drain: the durable logs were not all flushed by the deadline (storage "
                     "thread %s had not answered); they are flushed again when the broker stops",
                     fx_loop_name(d->st[missing].loop));
    else if (rv == 0)
        FX_LOG_INFO("storage", "drain: flushed %" PRIu64 " durable streams (%" PRIu64 " failed)",
                    sum[0], sum[1]);
    return rv != 0 ? rv : sum[1] > 0 ? FX_ESTORAGE_ERROR : 0;
}

int fxb_durable_start(fx_broker *b)
{
    fxb_durable *d = b->dur;
    for (uint32_t i = 0; d != NULL && i < d->nst; i++) {
        /* The sync thread first: a storage thread may post to it at once. */
        fx_loop *sl = d->st[i].sloop;
        int rv = sl != NULL ? fx_loop_start(sl) : 0;
        if (rv == 0 && (rv = fx_loop_start(d->st[i].loop)) != 0 && sl != NULL)
            fx_loop_stop(sl);
        if (rv == 0 && (rv = fx_loop_start(d->st[i].rloop)) != 0) {
            fx_loop_stop(d->st[i].loop);
            if (sl != NULL)
                fx_loop_stop(sl);
        }
        if (rv != 0)
            return rv;
        d->nstarted = i + 1;
    }
    size_t pending = d != NULL ? fx_catalog_pending_deletions(d->cat) : 0;
    FX_GAUGE_SET(storage_deletions_pending, (int64_t)pending);
    if (pending > 0)
        fxb_durable_retry_deletions_soon(d);
    if (d != NULL)
        recovery_start(d);
    return 0;
}

void fxb_durable_barrier(fx_broker *b)
{
    fxb_durable *d = b->dur;
    for (uint32_t i = 0; d != NULL && i < d->nstarted; i++) {
        fx_loop_barrier(d->st[i].rloop); /* what each has queued runs first */
        fx_loop_barrier(d->st[i].loop);
        if (d->st[i].sloop != NULL) { /* the flushes in flight end, then their completions run */
            fx_loop_barrier(d->st[i].sloop);
            fx_loop_barrier(d->st[i].loop);
        }
    }
}

void fxb_durable_stopping(fx_broker *b)
{
    if (b->dur != NULL)
        atomic_store_explicit(&b->dur->stopping, true, memory_order_release);
}

void fxb_durable_stop(fx_broker *b)
{
    fxb_durable *d = b->dur;
    /* The sync thread after its storage thread: the flushes that storage
     * thread began end; a completion posted after it stopped is taken over
     * by the close of its log (fxb_dstream_close). */
    for (uint32_t i = 0; d != NULL && i < d->nstarted; i++) {
        fx_loop_stop(d->st[i].rloop);
        fx_loop_stop(d->st[i].loop);
        if (d->st[i].sloop != NULL)
            fx_loop_stop(d->st[i].sloop);
    }
}

/* Closes the logs of storage thread |st| with a flush and frees it (its
 * loops stopped). */
static void storage_free(fxb_storage *st)
{
    size_t pos = 0;
    for (fxb_idslot *e; (e = fxb_idtable_next(&st->ds, &pos)) != NULL;)
        fxb_dstream_close(st, e->p);
    fxb_idtable_deinit(&st->ds);
    for (size_t k = st->rqi; k < st->rqn; k++) /* stopped before their recovery */
        fx_stream_handle_unref(st->rq[k]);
    free(st->rq);
    fx_loop_free(st->rloop);
    fx_loop_free(st->loop);
    if (st->sloop != NULL) {
        fx_loop_free(st->sloop);
        pthread_cond_destroy(&st->sync_cv);
        pthread_mutex_destroy(&st->sync_mu);
    }
}

/* Frees what is left of |d|'s lists once every log is closed: the
 * recovering entries of streams stopped before their recovery, and the
 * directory claims. */
static void lists_free(fxb_durable *d)
{
    while (d->stats != NULL) {
        dstats *x = d->stats;
        d->stats = x->next;
        FX_GAUGE_ADD(storage_recovering_streams, -1);
        fx_stream_handle_unref((fx_stream_handle *)x->h);
        free(x);
    }
    while (d->open != NULL) {
        open_dir *o = d->open;
        d->open = o->next;
        free(o);
    }
}

void fxb_durable_free(fx_broker *b)
{
    fxb_durable *d = b->dur;
    if (d == NULL)
        return;
    fxb_durable_metrics_stop(d);
    if (d->retry_armed) /* its loop has stopped */
        fx_loop_timer_cancel(d->st[0].loop, &d->retry_timer);
    for (uint32_t i = 0; d->st != NULL && i < d->nst; i++)
        storage_free(&d->st[i]);
    free(d->st);
    lists_free(d);
    fx_catalog_free(d->cat);
    fx_rootlock_free(d->lock); /* after the last write under the root */
    pthread_mutex_destroy(&d->cat_mu);
    free(d);
    b->dur = NULL;
}
