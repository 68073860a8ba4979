/* Per-stream retention overrides of durable streams (broker.h
 * fx_broker_set_stream_retention, durable_admin.h): the admin thread checks
 * the request and hands it to the storage thread that owns the stream's
 * log, which writes the catalogue (fsync + rename) and applies the new
 * bounds to the log at once; the admin thread waits for the answer with a
 * timeout (fx_loop_ask). Also the durable fields of GET /v1/streams (a view copied under
 * the catalogue lock once per request) and the per-stream gauges of
 * /metrics. Admin thread and the storage threads, as each function says. */
#include "broker/durable_admin.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "broker/durable_store.h"
#include "broker/worker.h"
#include "felix/error.h"

/* One change, asked of the storage thread with fx_loop_ask (which keeps its
 * own copy: the waiter may give up at its deadline while the change still
 * runs). */
typedef struct ret_msg {
    fxb_storage *st;
    fx_stream_handle *h;
    fx_broker_retention want;
    int rv;
    uint64_t bytes, seconds; /* the overrides afterwards */
} ret_msg;

/* The waiter gave up: the ask's copy drops its stream reference. */
static void ret_msg_late(void *data)
{
    ret_msg *m = data;
    fx_stream_handle_unref(m->h);
}

/* Writes the new overrides of |s|'s stream to the catalogue. */
static int catalogue_set(fxb_durable *d, dstream *s, ret_msg *m)
{
    const char *t = fx_stream_handle_tenant(s->h), *ns = fx_stream_handle_namespace(s->h),
               *name = fx_stream_handle_stream(s->h);
    pthread_mutex_lock(&d->cat_mu);
    const fx_catalog_entry *e = fx_catalog_find(d->cat, t, ns, name);
    int rv = -ENOENT;
    if (e != NULL) {
        m->bytes = m->want.set_bytes ? m->want.bytes : e->retention_bytes;
        m->seconds = m->want.set_seconds ? m->want.seconds : e->retention_seconds;
        rv = fx_catalog_set_retention(d->cat, t, ns, name, m->bytes, m->seconds);
    }
    pthread_mutex_unlock(&d->cat_mu);
    return rv;
}

static void storage_on_retention(size_t i, void *data)
{
    (void)i;
    ret_msg *m = data;
    int rv = FX_ENOSTREAM;
    if (fx_stream_handle_is_active(m->h)) {
        dstream *s = fxb_dstream_get(m->st, m->h);
        rv = s == NULL ? FX_ESTORAGE_ERROR : s->open_rv;
        if (rv == 0 && (rv = catalogue_set(m->st->d, s, m)) == 0)
            fxb_dstream_set_retention(s, m->bytes, m->seconds, fx_loop_now(m->st->loop));
        if (rv != 0 && s != NULL)
            fxb_dstream_log_error(s, "changing the retention overrides", rv);
    }
    m->rv = rv;
}

/* ---- admin thread ------------------------------------------------------------------ */

static int err_set(fx_registry_err *err, int rv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int err_set(fx_registry_err *err, int rv, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        err->code = rv;
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return rv;
}

static int check_bounds(const fx_broker_retention *r, fx_registry_err *err)
{
    if (r->set_bytes && r->bytes > FX_BROKER_RETENTION_MAX_BYTES)
        return err_set(err, -ERANGE, "retention_bytes must be at most %llu (1024 TiB)",
                       (unsigned long long)FX_BROKER_RETENTION_MAX_BYTES);
    if (r->set_seconds && r->seconds > FX_BROKER_RETENTION_MAX_SECONDS)
        return err_set(err, -ERANGE, "retention_seconds must be at most %llu (100000 hours)",
                       (unsigned long long)FX_BROKER_RETENTION_MAX_SECONDS);
    return 0;
}

static fx_wire_slice slice_of(const char *s)
{
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

/* Refuses a stream that is not durable, or a stated durability that is not
 * the stream's. */
static int check_durable(fx_stream_handle *h, int durable, fx_registry_err *err)
{
    bool is = fx_stream_handle_is_durable(h);
    const char *t = fx_stream_handle_tenant(h), *ns = fx_stream_handle_namespace(h),
               *s = fx_stream_handle_stream(h);
    if (durable >= 0 && (durable == 1) != is)
        return err_set(err, -EEXIST,
                       "changing stream durability requires removal and recreation: tenant=%s "
                       "namespace=%s stream=%s current=%s requested=%s",
                       t, ns, s, is ? "true" : "false", durable == 1 ? "true" : "false");
    if (!is)
        return err_set(err, -EINVAL,
                       "retention overrides apply to durable streams only; stream %s/%s/%s is "
                       "kept in memory",
                       t, ns, s);
    return 0;
}

/* Runs |m| on its storage thread and waits for it. Returns its answer, or
 * FX_ETIMEDOUT / -ENOMEM. On FX_ETIMEDOUT the ask keeps |m|'s stream
 * reference (ret_msg_late drops it) and |m->h| is cleared. */
static int run_on_storage(ret_msg *m, uint64_t timeout_ns)
{
    fx_loop_ask_req q = {.fn = storage_on_retention,
                         .data = m,
                         .size = sizeof(*m),
                         .on_late = ret_msg_late,
                         .timeout_ns = timeout_ns > INT64_MAX ? INT64_MAX : (int64_t)timeout_ns};
    int rv = fx_loop_ask(m->st->loop, &q);
    if (rv == FX_ETIMEDOUT)
        m->h = NULL;
    return rv != 0 ? rv : m->rv;
}

/* Finds the active durable stream named (|tenant|, |ns|, |stream|) into
 * |*ph| (a reference), or says in |err| why there is none. */
static int find_durable(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                        int durable, fx_stream_handle **ph, fx_registry_err *err)
{
    if (fxb_is_draining(b))
        return err_set(err, FX_ESHUTDOWN, "%s", FXB_SHUTDOWN_TEXT);
    fx_stream_handle *h =
        fx_registry_find(b->reg, slice_of(tenant), slice_of(ns), slice_of(stream));
    if (h == NULL)
        return err_set(err, FX_ENOSTREAM, "stream not found: tenant=%s namespace=%s stream=%s",
                       tenant, ns, stream);
    int rv = check_durable(h, durable, err);
    if (rv != 0 || b->dur == NULL) {
        fx_stream_handle_unref(h);
        return rv != 0 ? rv : err_set(err, -EINVAL, "this broker has no durable storage");
    }
    *ph = h;
    return 0;
}

/* Logs the new overrides of |m|, or says in |err| why they were not set
 * (|rv|). */
static void retention_result(const ret_msg *m, int rv, const char *tenant, const char *ns,
                             const char *stream, fx_registry_err *err)
{
    if (rv == 0) {
        FX_LOG_INFO("storage",
                    "retention overrides of %s/%s/%s: bytes=%" PRIu64 " seconds=%" PRIu64
                    " (0: the broker's setting)",
                    tenant, ns, stream, m->bytes, m->seconds);
    } else if (rv == FX_ETIMEDOUT) {
        err_set(err, rv, "the storage thread of stream %s/%s/%s did not answer in time", tenant, ns,
                stream);
    } else if (rv == FX_ENOSTREAM) {
        err_set(err, rv, "stream not found: tenant=%s namespace=%s stream=%s", tenant, ns, stream);
    } else {
        err_set(err, rv, "cannot change the retention of %s/%s/%s: %s", tenant, ns, stream,
                fx_strerror(rv));
    }
}

int fx_broker_set_stream_retention(fx_broker *b, const char *tenant, const char *ns,
                                   const char *stream, const fx_broker_retention *r, int durable,
                                   uint64_t timeout_ns, uint64_t *pbytes, uint64_t *pseconds,
                                   fx_registry_err *err)
{
    fx_stream_handle *h = NULL;
    int rv = check_bounds(r, err);
    if (rv == 0)
        rv = find_durable(b, tenant, ns, stream, durable, &h, err);
    if (rv != 0)
        return rv;
    ret_msg m = {.h = h, /* the message's reference */
                 .st = fxb_worker_for(b, h)->dur->st,
                 .want = *r};
    rv = run_on_storage(&m, timeout_ns);
    if (rv == 0 && pbytes != NULL)
        *pbytes = m.bytes;
    if (rv == 0 && pseconds != NULL)
        *pseconds = m.seconds;
    retention_result(&m, rv, tenant, ns, stream, err);
    fx_stream_handle_unref(m.h);
    return rv;
}

/* ---- the offset of a time ------------------------------------------------------------- */

/* One question to the storage thread (fx_loop_ask keeps its own copy). */
typedef struct time_msg {
    fxb_storage *st;
    fx_stream_handle *h;
    uint64_t ts_us;
    uint64_t offset;
    int rv;
    char why[256];
} time_msg;

static void time_msg_late(void *data)
{
    time_msg *m = data;
    fx_stream_handle_unref(m->h);
}

static void storage_on_time(size_t i, void *data)
{
    (void)i;
    time_msg *m = data;
    int rv = FX_ENOSTREAM;
    if (fx_stream_handle_is_active(m->h)) {
        dstream *s = fxb_dstream_get(m->st, m->h);
        rv = s == NULL || s->log == NULL ? FX_ESTORAGE_ERROR : s->open_rv;
        if (rv == 0 && (rv = fx_dlog_offset_for_time(s->log, m->ts_us, &m->offset)) != 0)
            snprintf(m->why, sizeof(m->why), "%s", fx_dlog_last_error(s->log));
    }
    m->rv = rv;
}

int fx_broker_stream_offset_for_time(fx_broker *b, const char *tenant, const char *ns,
                                     const char *stream, uint64_t time_ms, uint64_t timeout_ns,
                                     uint64_t *poffset, fx_registry_err *err)
{
    if (fxb_is_draining(b))
        return err_set(err, FX_ESHUTDOWN, "%s", FXB_SHUTDOWN_TEXT);
    if (time_ms > UINT64_MAX / 1000)
        return err_set(err, -EINVAL, "time %" PRIu64 " ms is out of range", time_ms);
    fx_stream_handle *h =
        fx_registry_find(b->reg, slice_of(tenant), slice_of(ns), slice_of(stream));
    if (h == NULL)
        return err_set(err, FX_ENOSTREAM, "stream not found: tenant=%s namespace=%s stream=%s",
                       tenant, ns, stream);
    if (!fx_stream_handle_is_durable(h) || b->dur == NULL) {
        fx_stream_handle_unref(h);
        return err_set(err, -ENOTSUP,
                       "a start at a time needs a durable stream: %s/%s/%s is kept in memory, "
                       "where records carry no time",
                       tenant, ns, stream);
    }
    time_msg m = {.h = h, .st = fxb_worker_for(b, h)->dur->st, .ts_us = time_ms * 1000};
    fx_loop_ask_req q = {.fn = storage_on_time,
                         .data = &m,
                         .size = sizeof(m),
                         .on_late = time_msg_late,
                         .timeout_ns = timeout_ns > INT64_MAX ? INT64_MAX : (int64_t)timeout_ns};
    int rv = fx_loop_ask(m.st->loop, &q);
    if (rv == FX_ETIMEDOUT) {
        err_set(err, rv, "the storage thread of stream %s/%s/%s did not answer in time", tenant,
                ns, stream);
        return rv; /* the ask's copy keeps the reference */
    }
    fx_stream_handle_unref(h);
    rv = rv != 0 ? rv : m.rv;
    if (rv == FX_ENOSTREAM)
        err_set(err, rv, "stream not found: tenant=%s namespace=%s stream=%s", tenant, ns, stream);
    else if (rv != 0)
        err_set(err, rv, "cannot find the records of %s/%s/%s at that time: %s%s%s", tenant, ns,
                stream, fx_strerror(rv), m.why[0] ? ": " : "", m.why);
    else
        *poffset = m.offset;
    return rv;
}

/* ---- GET /v1/streams ---------------------------------------------------------------- */

/* One listed log: where it stands, why (damaged, failed; NULL otherwise),
 * and its figures (first offset, next offset, bytes on disk, segments). */
typedef struct vrow {
    dstate state;
    char *why;
    uint64_t v[5];
} vrow;

/* A live catalogue entry with retention overrides; names point into the
 * view's |names|. */
typedef struct vret {
    const char *t, *ns, *s;
    uint64_t bytes, seconds;
} vret;

/* What GET /v1/streams shows of the durable streams, copied in one pass
 * under |cat_mu| so that the answer is built without it: the open logs'
 * figures by handle id, and the retention overrides sorted by name. */
struct fxb_durable_view {
    fxb_idtable ids; /* handle id -> vrow * */
    vrow *rows;
    size_t nrows;
    vret *ret;
    size_t nret;
    char *names;
};

/* Copies the figures of every open log. Under |cat_mu|. */
static int view_rows(fxb_durable *d, fxb_durable_view *v)
{
    size_t n = 0;
    for (const dstats *x = d->stats; x != NULL; x = x->next)
        n++;
    if (n == 0)
        return 0;
    if ((v->rows = calloc(n, sizeof(*v->rows))) == NULL)
        return -ENOMEM;
    v->nrows = n;
    vrow *r = v->rows;
    for (const dstats *x = d->stats; x != NULL; x = x->next) {
        if (fxb_idtable_find(&v->ids, x->handle_id) != NULL)
            continue; /* the first listed is the stream's, as a scan found it */
        r->state = x->state;
        if (x->why[0] != '\0' && (r->why = strdup(x->why)) == NULL)
            return -ENOMEM;
        r->v[0] = atomic_load_explicit(&x->first, memory_order_relaxed);
        r->v[1] = atomic_load_explicit(&x->next_off, memory_order_relaxed);
        r->v[2] = atomic_load_explicit(&x->bytes, memory_order_relaxed);
        r->v[3] = atomic_load_explicit(&x->segments, memory_order_relaxed);
        r->v[4] = atomic_load_explicit(&x->producers, memory_order_relaxed);
        if (fxb_idtable_insert(&v->ids, x->handle_id, r++) != 0)
            return -ENOMEM;
    }
    return 0;
}

static bool has_overrides(const fx_catalog_entry *ce)
{
    return !ce->deleting && (ce->retention_bytes != 0 || ce->retention_seconds != 0);
}

static char *copy_name(char **pp, const char *s)
{
    char *out = *pp;
    size_t n = strlen(s) + 1;
    memcpy(out, s, n);
    *pp += n;
    return out;
}

/* Copies the live entries that have retention overrides. Under |cat_mu|. */
static int view_overrides(fxb_durable *d, fxb_durable_view *v)
{
    size_t n = 0, bytes = 0;
    for (size_t i = 0; i < fx_catalog_count(d->cat); i++) {
        const fx_catalog_entry *ce = fx_catalog_at(d->cat, i);
        if (has_overrides(ce)) {
            n++;
            bytes += strlen(ce->tenant) + strlen(ce->ns) + strlen(ce->stream) + 3;
        }
    }
    if (n == 0)
        return 0;
    v->ret = calloc(n, sizeof(*v->ret));
    v->names = malloc(bytes);
    if (v->ret == NULL || v->names == NULL)
        return -ENOMEM;
    char *p = v->names;
    for (size_t i = 0; i < fx_catalog_count(d->cat); i++) {
        const fx_catalog_entry *ce = fx_catalog_at(d->cat, i);
        if (!has_overrides(ce))
            continue;
        vret *r = &v->ret[v->nret++];
        r->t = copy_name(&p, ce->tenant);
        r->ns = copy_name(&p, ce->ns);
        r->s = copy_name(&p, ce->stream);
        r->bytes = ce->retention_bytes;
        r->seconds = ce->retention_seconds;
    }
    return 0;
}

static int cmp_ret(const void *a, const void *b)
{
    const vret *x = a, *y = b;
    int c = strcmp(x->t, y->t);
    if (c == 0)
        c = strcmp(x->ns, y->ns);
    return c != 0 ? c : strcmp(x->s, y->s);
}

int fxb_durable_view_take(fx_broker *b, fxb_durable_view **pv)
{
    *pv = NULL;
    fxb_durable *d = b->dur;
    if (d == NULL)
        return 0;
    fxb_durable_view *v = calloc(1, sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    pthread_mutex_lock(&d->cat_mu);
    int rv = view_rows(d, v);
    if (rv == 0)
        rv = view_overrides(d, v);
    pthread_mutex_unlock(&d->cat_mu);
    if (rv != 0) {
        fxb_durable_view_free(v);
        return rv;
    }
    if (v->nret > 1)
        qsort(v->ret, v->nret, sizeof(*v->ret), cmp_ret);
    *pv = v;
    return 0;
}

void fxb_durable_view_free(fxb_durable_view *v)
{
    if (v == NULL)
        return;
    fxb_idtable_deinit(&v->ids);
    for (size_t i = 0; i < v->nrows; i++)
        free(v->rows[i].why);
    free(v->rows);
    free(v->ret);
    free(v->names);
    free(v);
}

static const char *state_name(dstate st)
{
    static const char *names[] = {[DSTATE_RECOVERING] = "recovering",
                                  [DSTATE_OPEN] = "open",
                                  [DSTATE_DAMAGED] = "damaged",
                                  [DSTATE_FAILED] = "failed"};
    return names[st];
}

void fxb_durable_describe(const fxb_durable_view *v, const fx_stream_handle *h, json_t *e)
{
    bool durable = fx_stream_handle_is_durable(h);
    json_object_set_new(e, "durable", json_boolean(durable));
    const char *keys[] = {"log_first_offset", "log_next_offset", "bytes_on_disk", "segments",
                          "producers"};
    const fxb_idslot *slot =
        v != NULL && durable ? fxb_idtable_find(&v->ids, fx_stream_handle_id(h)) : NULL;
    const vrow *r = slot != NULL ? slot->p : NULL;
    /* A durable stream not listed has no log open: it opens at its next
     * publish or subscribe. */
    const char *state = v == NULL || !durable ? NULL : r != NULL ? state_name(r->state) : "closed";
    bool open = r != NULL && r->state == DSTATE_OPEN;
    for (size_t i = 0; i < 4; i++)
        json_object_set_new(e, keys[i], open ? json_integer((json_int_t)r->v[i]) : json_null());
    /* A durable stream's producers are in its log's table (the worker's
     * figure, set before, is that of a stream in memory). */
    if (durable)
        json_object_set_new(e, keys[4], open ? json_integer((json_int_t)r->v[4]) : json_null());
    json_object_set_new(e, "durable_state", state != NULL ? json_string(state) : json_null());
    json_object_set_new(e, "durable_error",
                        r != NULL && r->why != NULL ? json_string(r->why) : json_null());
}

void fxb_durable_describe_retention(const fxb_durable_view *v, const fx_stream_handle *h, json_t *e)
{
    uint64_t val[2] = {0};
    if (v != NULL && v->nret > 0 && fx_stream_handle_is_durable(h)) {
        vret key = {.t = fx_stream_handle_tenant(h),
                    .ns = fx_stream_handle_namespace(h),
                    .s = fx_stream_handle_stream(h)};
        const vret *r = bsearch(&key, v->ret, v->nret, sizeof(*v->ret), cmp_ret);
        if (r != NULL) {
            val[0] = r->bytes;
            val[1] = r->seconds;
        }
    }
    const char *keys[2] = {"retention_bytes", "retention_seconds"};
    for (size_t i = 0; i < 2; i++)
        json_object_set_new(e, keys[i],
                            val[i] != 0 ? json_integer((json_int_t)val[i]) : json_null());
}

/* ---- per-stream gauges ---------------------------------------------------------------- */

/* One row of a scrape, copied under |cat_mu|: a reference keeps the names. */
typedef struct mrow {
    fx_stream_handle *h;
    int64_t v[FX_MSTREAM_N];
} mrow;

static fx_ratelimit collect_rl = FX_RATELIMIT_INIT;

/* Copies the rows of every open log. Under |cat_mu| (an entry leaves the
 * list under it before it is freed). Returns the count, or SIZE_MAX when
 * out of memory. */
static size_t copy_rows(fxb_durable *d, mrow **prows)
{
    size_t n = 0;
    for (const dstats *x = d->stats; x != NULL; x = x->next)
        n += x->state == DSTATE_OPEN; /* the others have no log figures to show */
    *prows = n > 0 ? calloc(n, sizeof(**prows)) : NULL;
    if (n > 0 && *prows == NULL)
        return SIZE_MAX;
    mrow *r = *prows;
    for (const dstats *x = d->stats; x != NULL; x = x->next) {
        if (x->state != DSTATE_OPEN)
            continue;
        r->h = fx_stream_handle_ref((fx_stream_handle *)x->h);
        r->v[FX_MSTREAM_BYTES_ON_DISK] =
            (int64_t)atomic_load_explicit(&x->bytes, memory_order_relaxed);
        r->v[FX_MSTREAM_SEGMENTS] =
            (int64_t)atomic_load_explicit(&x->segments, memory_order_relaxed);
        r->v[FX_MSTREAM_FIRST_OFFSET] =
            (int64_t)atomic_load_explicit(&x->first, memory_order_relaxed);
        r->v[FX_MSTREAM_NEXT_OFFSET] =
            (int64_t)atomic_load_explicit(&x->next_off, memory_order_relaxed);
        r->v[FX_MSTREAM_PRODUCERS] =
            (int64_t)atomic_load_explicit(&x->producers, memory_order_relaxed);
        r++;
    }
    return n;
}

/* Scrape (admin thread): the rows are copied under |cat_mu| and emitted
 * after it is released, so a large scrape never holds up a storage thread
 * opening or closing a log, and a slow catalogue write never holds up a
 * scrape for longer than the copy. */
static void on_collect(void *user, fx_mstream_emit_fn emit, void *sink)
{
    fxb_durable *d = user;
    mrow *rows;
    pthread_mutex_lock(&d->cat_mu);
    size_t n = copy_rows(d, &rows);
    pthread_mutex_unlock(&d->cat_mu);
    if (n == SIZE_MAX) {
        FX_LOG_RATELIMITED(&collect_rl, fx_now_ns(), FX_LOG_ERROR, "storage",
                           "out of memory copying the per-stream gauges: this scrape has none");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        fx_mstream_row r = {.tenant = fx_stream_handle_tenant(rows[i].h),
                            .ns = fx_stream_handle_namespace(rows[i].h),
                            .stream = fx_stream_handle_stream(rows[i].h)};
        memcpy(r.v, rows[i].v, sizeof(r.v));
        emit(sink, &r);
        fx_stream_handle_unref(rows[i].h);
    }
    free(rows);
}

void fxb_durable_metrics_start(fxb_durable *d)
{
    d->msrc = (fx_mstream_source){.on_collect = on_collect, .user = d};
    fx_metrics_stream_source_add(&d->msrc);
}

void fxb_durable_metrics_stop(fxb_durable *d)
{
    if (d->msrc.on_collect != NULL)
        fx_metrics_stream_source_remove(&d->msrc);
    d->msrc.on_collect = NULL;
}
