/* The storage stage's life and its operator-facing parts (durable.h):
 * opening the catalogue and creating the storage, replay and sync threads,
 * recovering every catalogued stream at start, the durable fields of
 * GET /v1/streams, the flush of every log at the end of a drain, and
 * shutdown. Main thread unless a function says otherwise. */
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
#include "broker/durable_int.h"
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

int fxb_durable_init(fx_broker *b)
{
    const fx_broker_durable_opts *o = &b->o.durable;
    if (o->dir == NULL || o->dir[0] == '\0') {
        b->o.durable.dir = NULL; /* borrowed: not kept */
        return 0;
    }
    fxb_durable *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return -ENOMEM;
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
    b->dur = d;
    char err[512] = "";
    int rv = take_root(d);
    if (rv != 0)
        return rv;
    rv = fx_catalog_open(&d->cat, o->io, d->dir, err, sizeof(err));
    if (rv != 0) {
        snprintf(d->error, sizeof(d->error), "the catalogue in %s: %s%s%s", d->dir, fx_strerror(rv),
                 err[0] ? ": " : "", err);
        report(b, d->error);
        return rv;
    }
    d->nst = b->nworkers;
    d->st = calloc(d->nst, sizeof(*d->st));
    if (d->st == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < b->nworkers; i++) {
        fxb_worker *w = &b->workers[fx_placement_storage_worker(i, b->nworkers)];
        fxb_storage *st = &d->st[i];
        char name[24];
        snprintf(name, sizeof(name), "fx-storage-%u", (unsigned)(i % 100000u));
        fx_loop_opts lo = {.name = name, .cpu = -1};
        st->d = d;
        st->w = w;
        if ((rv = fx_loop_new(&st->loop, &lo)) != 0)
            return rv;
        snprintf(name, sizeof(name), "fx-replay-%u", (unsigned)(i % 100000u));
        if ((rv = fx_loop_new(&st->rloop, &lo)) != 0)
            return rv;
        snprintf(name, sizeof(name), "fx-sync-%u", (unsigned)(i % 100000u));
        if ((rv = fx_loop_new(&st->sloop, &lo)) != 0)
            return rv;
        pthread_mutex_init(&st->sync_mu, NULL);
        pthread_cond_init(&st->sync_cv, NULL);
        if ((w->dur = calloc(1, sizeof(*w->dur))) == NULL)
            return -ENOMEM;
        w->dur->st = st;
    }
    FX_LOG_INFO("storage",
                "opening durable stream storage root=%s segment=%" PRIu64 " index_spacing=%" PRIu64
                " fsync %s retention=%" PRIu64 "B/%" PRIu64 "s",
                d->dir, o->segment_bytes, o->index_spacing_bytes, fx_fsync_mode_name(o->fsync_mode),
                o->retention_bytes, (uint64_t)(o->retention_ns / FX_NS_PER_S));
    fxb_durable_metrics_start(d);
    return 0;
}

/* Opens the log of catalogue entry |e| for its stream |h| at start. */
static int recover_one(fx_broker *b, fx_stream_handle *h)
{
    fxb_worker *w = fxb_worker_for(b, h);
    dstream *s = fxb_dstream_get(w->dur->st, h);
    if (s == NULL)
        return -ENOMEM;
    return s->open_rv;
}

int fxb_durable_recover(fx_broker *b)
{
    fxb_durable *d = b->dur;
    if (d == NULL)
        return 0;
    uint64_t t0 = fx_now_ns();
    size_t n = fx_catalog_count(d->cat); /* the declarations below find their entries */
    for (size_t i = 0; i < n; i++) {
        const fx_catalog_entry *e = fx_catalog_at(d->cat, i);
        fx_wire_slice t = {(const uint8_t *)e->tenant, strlen(e->tenant)};
        fx_wire_slice ns = {(const uint8_t *)e->ns, strlen(e->ns)};
        fx_wire_slice st = {(const uint8_t *)e->stream, strlen(e->stream)};
        fx_stream_handle *h = NULL;
        fx_registry_err err = {0};
        int rv = fx_registry_create_durable(b->reg, t, ns, st, FX_REGISTRY_DURABLE_ADOPT, &h, NULL,
                                            &err);
        if (rv != 0) {
            snprintf(d->error, sizeof(d->error), "stream %s/%s/%s of the catalogue: %s", e->tenant,
                     e->ns, e->stream, err.msg[0] ? err.msg : fx_strerror(rv));
            report(b, d->error);
            return rv;
        }
        rv = recover_one(b, h);
        fx_stream_handle_unref(h);
        if (rv != 0) {
            report(b, d->error);
            return rv;
        }
    }
    FX_LOG_INFO("storage", "recovered %zu durable streams in %.3f s", n,
                (double)(fx_now_ns() - t0) / 1e9);
    return 0;
}

void fxb_durable_describe(fx_broker *b, const fx_stream_handle *h, json_t *e)
{
    bool durable = fx_stream_handle_is_durable(h);
    json_object_set_new(e, "durable", json_boolean(durable));
    fxb_durable *d = b->dur;
    const char *keys[] = {"log_first_offset", "log_next_offset", "bytes_on_disk", "segments"};
    uint64_t v[4] = {0};
    bool found = false;
    if (d != NULL && durable) {
        pthread_mutex_lock(&d->cat_mu);
        for (dstats *x = d->stats; x != NULL && !found; x = x->next) {
            if (x->handle_id != fx_stream_handle_id(h))
                continue;
            found = true;
            v[0] = atomic_load_explicit(&x->first, memory_order_relaxed);
            v[1] = atomic_load_explicit(&x->next_off, memory_order_relaxed);
            v[2] = atomic_load_explicit(&x->bytes, memory_order_relaxed);
            v[3] = atomic_load_explicit(&x->segments, memory_order_relaxed);
        }
        pthread_mutex_unlock(&d->cat_mu);
    }
    for (size_t i = 0; i < 4; i++)
        json_object_set_new(e, keys[i], found ? json_integer((json_int_t)v[i]) : json_null());
}

/* A flush of every log of every storage thread, shared with them (the
 * waiter may give up at its deadline while they still run). */
typedef struct flush_all {
    atomic_int refs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t left; /* storage threads still flushing */
    uint64_t flushed, failed;
} flush_all;

typedef struct flush_msg {
    fx_task task;
    fxb_storage *st;
    flush_all *fa;
} flush_msg;

static void flush_all_unref(flush_all *fa)
{
    if (atomic_fetch_sub(&fa->refs, 1) != 1)
        return;
    pthread_cond_destroy(&fa->cv);
    pthread_mutex_destroy(&fa->mu);
    free(fa);
}

static void storage_on_flush_all(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    flush_msg *m = user;
    uint64_t ok = 0, bad = 0;
    size_t pos = 0;
    for (fxb_idslot *e; (e = fxb_idtable_next(&m->st->ds, &pos)) != NULL;) {
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
    flush_all *fa = m->fa;
    pthread_mutex_lock(&fa->mu);
    fa->flushed += ok;
    fa->failed += bad;
    fa->left--;
    pthread_cond_signal(&fa->cv);
    pthread_mutex_unlock(&fa->mu);
    flush_all_unref(fa);
    free(m);
}

void fxb_durable_each_loop(fx_broker *b, void (*cb)(fx_loop *l, void *user), void *user)
{
    fxb_durable *d = b->dur;
    for (uint32_t i = 0; d != NULL && i < d->nstarted; i++) {
        cb(d->st[i].loop, user);
        cb(d->st[i].rloop, user);
        cb(d->st[i].sloop, user);
    }
}

int fxb_durable_flush_all(fx_broker *b, uint64_t deadline_ns)
{
    fxb_durable *d = b->dur;
    if (d == NULL || d->nstarted == 0)
        return 0;
    flush_all *fa = calloc(1, sizeof(*fa));
    if (fa == NULL)
        return -ENOMEM;
    pthread_mutex_init(&fa->mu, NULL);
    if (fx_cond_init_monotonic(&fa->cv) != 0) {
        pthread_mutex_destroy(&fa->mu);
        free(fa);
        return -ENOMEM;
    }
    atomic_init(&fa->refs, 1);
    for (uint32_t i = 0; i < d->nstarted; i++) {
        flush_msg *m = calloc(1, sizeof(*m));
        if (m == NULL)
            break; /* those posted still flush; the logs are flushed again at stop */
        m->st = &d->st[i];
        m->fa = fa;
        atomic_fetch_add(&fa->refs, 1);
        pthread_mutex_lock(&fa->mu);
        fa->left++;
        pthread_mutex_unlock(&fa->mu);
        fx_task_init(&m->task, storage_on_flush_all, m);
        fx_loop_post(m->st->loop, &m->task);
    }
    struct timespec until = fx_timespec_at(deadline_ns);
    pthread_mutex_lock(&fa->mu);
    while (fa->left > 0 && pthread_cond_timedwait(&fa->cv, &fa->mu, &until) == 0)
        ;
    bool timed_out = fa->left > 0;
    uint64_t flushed = fa->flushed, failed = fa->failed;
    pthread_mutex_unlock(&fa->mu);
    flush_all_unref(fa);
    if (timed_out)
        FX_LOG_ERROR("storage",
                     "drain: the durable logs were not all flushed by the deadline (%" PRIu64
                     " flushed); they are flushed again when the broker stops",
                     flushed);
    else
        FX_LOG_INFO("storage", "drain: flushed %" PRIu64 " durable streams (%" PRIu64 " failed)",
                    flushed, failed);
    return timed_out ? FX_ETIMEDOUT : failed > 0 ? FX_ESTORAGE_ERROR : 0;
}

int fxb_durable_start(fx_broker *b)
{
    fxb_durable *d = b->dur;
    for (uint32_t i = 0; d != NULL && i < d->nst; i++) {
        /* The sync thread first: a storage thread may post to it at once. */
        int rv = fx_loop_start(d->st[i].sloop);
        if (rv == 0 && (rv = fx_loop_start(d->st[i].loop)) != 0)
            fx_loop_stop(d->st[i].sloop);
        if (rv == 0 && (rv = fx_loop_start(d->st[i].rloop)) != 0) {
            fx_loop_stop(d->st[i].loop);
            fx_loop_stop(d->st[i].sloop);
        }
        if (rv != 0)
            return rv;
        d->nstarted = i + 1;
    }
    size_t pending = d != NULL ? fx_catalog_pending_deletions(d->cat) : 0;
    FX_GAUGE_SET(storage_deletions_pending, (int64_t)pending);
    if (pending > 0)
        fxb_durable_retry_deletions_soon(d);
    return 0;
}

void fxb_durable_barrier(fx_broker *b)
{
    fxb_durable *d = b->dur;
    for (uint32_t i = 0; d != NULL && i < d->nstarted; i++) {
        fxb_run_on(d->st[i].rloop, NULL, NULL); /* what each has queued runs first */
        fxb_run_on(d->st[i].loop, NULL, NULL);
        /* The flushes in flight end, then their completions run. */
        fxb_run_on(d->st[i].sloop, NULL, NULL);
        fxb_run_on(d->st[i].loop, NULL, NULL);
    }
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
        fx_loop_stop(d->st[i].sloop);
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
    for (uint32_t i = 0; d->st != NULL && i < d->nst; i++) {
        fxb_storage *st = &d->st[i];
        size_t pos = 0;
        for (fxb_idslot *e; (e = fxb_idtable_next(&st->ds, &pos)) != NULL;)
            fxb_dstream_close(st, e->p);
        fxb_idtable_deinit(&st->ds);
        fx_loop_free(st->rloop);
        fx_loop_free(st->loop);
        if (st->sloop != NULL) {
            fx_loop_free(st->sloop);
            pthread_cond_destroy(&st->sync_cv);
            pthread_mutex_destroy(&st->sync_mu);
        }
    }
    free(d->st);
    while (d->open != NULL) {
        open_dir *o = d->open;
        d->open = o->next;
        free(o);
    }
    fx_catalog_free(d->cat);
    fx_rootlock_free(d->lock); /* after the last write under the root */
    pthread_mutex_destroy(&d->cat_mu);
    free(d);
    b->dur = NULL;
}
