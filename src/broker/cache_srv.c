/* The original's cache_put / cache_get (felix-facts-durable-cache.md B2):
 * the connection loop checks the request (auth and tenant in bidi.c, then
 * cache.read / cache.write and the registration here) and posts it, with a
 * reply slot, to the cache's worker (the hash of tenant/namespace/cache,
 * fx_placement_worker_for); the worker runs it on its fxb_cache_store and
 * completes the slot with cache_ok / ok / cache_value / error. Replies go
 * out in request order (reply.c), so many requests may be in flight on one
 * stream, each answered with its request_id. Connection loop, except the
 * worker parts (run, sweep, publish: the cache's worker loop). */
#include "broker/cache_srv.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/log.h"
#include "base/metrics.h"
#include "base/placement.h"
#include "broker/bidi_life.h"
#include "broker/cache_dur.h"
#include "broker/cache_store.h"
#include "broker/reply.h"
#include "broker/resolve.h"
#include "broker/worker.h"
#include "felix/error.h"
#include "wire/cache_bin.h"

/* ---- tenants (any thread) ---------------------------------------------------------------- */

/* One tenant's byte account, for the broker's life. */
typedef struct ctenant {
    fxb_cache_tenant acct;
    struct ctenant *next;
    char name[];
} ctenant;

/* One declared cache: its names "tenant\0ns\0cache\0" (|len| bytes). */
typedef struct cdecl {
    struct cdecl *next;
    uint64_t hash;
    bool durable; /* its writes go to a log (cache_dur.c) */
    size_t len;
    char name[];
} cdecl;

#define DECL_BUCKETS 1024u

/* fx_broker.caches. |tenants| grows under |mu| (looked up once per client
 * stream, fxb_bidi.cache_acct) and is freed at teardown; the declared
 * caches (|decl|, chained by hash) change under |mu| too, and a request is
 * checked against them (under |mu|) only when auto_create_streams is off. */
struct fxb_caches {
    pthread_mutex_t mu;
    ctenant *tenants;
    fx_mtenant_source source; /* the per-tenant series, read from the accounts */
    uint64_t hash_key[2];     /* placement and the stores' index: random per process */
    cdecl *decl[DECL_BUCKETS];
    size_t ndecl;
    /* Bumped by every durable declaration made or dropped (0: none ever,
     * and the workers skip the durable check); a worker that sees it
     * change checks its in-memory caches' declarations again. */
    atomic_uint durable_gen;
};

/* Writes "tenant\0ns\0cache\0" into |buf| (|cap| bytes); its length, or 0
 * when it does not fit. */
static size_t decl_name(char *buf, size_t cap, const char *tenant, const char *ns,
                        const char *cache)
{
    size_t lt = strlen(tenant) + 1, ln = strlen(ns) + 1, lc = strlen(cache) + 1;
    if (lt + ln + lc > cap)
        return 0;
    memcpy(buf, tenant, lt);
    memcpy(buf + lt, ns, ln);
    memcpy(buf + lt + ln, cache, lc);
    return lt + ln + lc;
}

/* The link pointing at the declaration of |name| (|len| bytes, hash |h|),
 * or at the NULL ending its chain. Under |c|->mu. */
static cdecl **decl_find(struct fxb_caches *c, const char *name, size_t len, uint64_t h)
{
    cdecl **pp = &c->decl[h % DECL_BUCKETS];
    while (*pp != NULL &&
           !((*pp)->hash == h && (*pp)->len == len && !memcmp((*pp)->name, name, len)))
        pp = &(*pp)->next;
    return pp;
}

#define DECL_NAME_CAP (3 * (FX_REGISTRY_NAME_MAX + 1))

static int check_cache_names(const char *tenant, const char *ns, const char *cache,
                             fx_registry_err *err)
{
    const char *names[3] = {tenant, ns, cache}, *what[3] = {"tenant", "namespace", "cache"};
    for (int i = 0; i < 3; i++) {
        int rv = fx_registry_name_check(
            what[i], (fx_wire_slice){(const uint8_t *)names[i], strlen(names[i])}, err);
        if (rv != 0)
            return rv;
    }
    return 0;
}

int fxb_cache_declare(fx_broker *b, const char *tenant, const char *ns, const char *cache,
                      int durable, bool *pcreated, bool *pdurable, fx_registry_err *err)
{
    struct fxb_caches *c = b->caches;
    if (pcreated)
        *pcreated = false;
    if (pdurable)
        *pdurable = false;
    if (c == NULL)
        return -ENOTSUP; /* a broker without the cache stage */
    int rv = check_cache_names(tenant, ns, cache, err);
    if (rv != 0)
        return rv;
    if (durable == 1 && (b->o.durable.dir == NULL || b->o.durable.dir[0] == '\0')) {
        if (err != NULL)
            snprintf(err->msg, sizeof(err->msg),
                     "cache %s/%s/%s is marked durable but this broker has no durable storage "
                     "configured (durable_storage_dir)",
                     tenant, ns, cache);
        return -ENOTSUP;
    }
    /* Its directory first (the root is held once b->dur exists; at
     * construction fxb_dcache_recover makes it): a declaration that
     * survives a restart has its names on disk. Not under |mu|: I/O. */
    if (durable == 1 && b->dur != NULL) {
        char why[sizeof(err->msg)];
        if (fxb_dcache_make_dir(b, tenant, ns, cache, why, sizeof(why)) != 0) {
            if (err != NULL)
                snprintf(err->msg, sizeof(err->msg), "%s", why);
            return FX_ESTORAGE_ERROR;
        }
    }
    char buf[DECL_NAME_CAP];
    size_t len = decl_name(buf, sizeof(buf), tenant, ns, cache);
    uint64_t h = fxb_cache_hash(c->hash_key, buf, len);
    pthread_mutex_lock(&c->mu);
    cdecl **pp = decl_find(c, buf, len, h);
    if (*pp != NULL && durable != -1 && (*pp)->durable != (durable == 1)) {
        rv = -EEXIST;
        if (err != NULL)
            snprintf(err->msg, sizeof(err->msg),
                     "changing cache durability requires removal and recreation: tenant=%s "
                     "namespace=%s cache=%s current=%s requested=%s",
                     tenant, ns, cache, (*pp)->durable ? "true" : "false",
                     durable == 1 ? "true" : "false");
    } else if (*pp != NULL) {
        if (pdurable)
            *pdurable = (*pp)->durable;
    } else {
        cdecl *d = c->ndecl < FXB_CACHE_MAX_DECLARED ? malloc(sizeof(*d) + len) : NULL;
        if (d == NULL) {
            rv = c->ndecl < FXB_CACHE_MAX_DECLARED ? -ENOMEM : FX_EFULL;
        } else {
            d->next = NULL;
            d->hash = h;
            d->durable = durable == 1;
            d->len = len;
            memcpy(d->name, buf, len);
            *pp = d;
            c->ndecl++;
            if (pcreated)
                *pcreated = true;
            if (pdurable)
                *pdurable = d->durable;
            if (d->durable)
                atomic_fetch_add_explicit(&c->durable_gen, 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (rv == FX_EFULL && err != NULL)
        snprintf(err->msg, sizeof(err->msg), "%u caches are declared already",
                 FXB_CACHE_MAX_DECLARED);
    return rv;
}

bool fxb_cache_undeclare(fx_broker *b, const char *tenant, const char *ns, const char *cache)
{
    struct fxb_caches *c = b->caches;
    if (c == NULL)
        return false;
    char buf[DECL_NAME_CAP];
    size_t len = decl_name(buf, sizeof(buf), tenant, ns, cache);
    if (len == 0)
        return false;
    uint64_t h = fxb_cache_hash(c->hash_key, buf, len);
    pthread_mutex_lock(&c->mu);
    cdecl **pp = decl_find(c, buf, len, h), *d = *pp;
    if (d != NULL) {
        *pp = d->next;
        c->ndecl--;
        if (d->durable)
            atomic_fetch_add_explicit(&c->durable_gen, 1, memory_order_release);
    }
    pthread_mutex_unlock(&c->mu);
    free(d);
    return d != NULL;
}

/* Whether the cache is declared (|*pdurable|, may be NULL: as durable).
 * Any thread. */
static bool is_declared(fx_broker *b, const char *tenant, const char *ns, const char *cache,
                        bool *pdurable)
{
    struct fxb_caches *c = b->caches;
    char buf[DECL_NAME_CAP];
    if (pdurable)
        *pdurable = false;
    size_t len = decl_name(buf, sizeof(buf), tenant, ns, cache);
    if (len == 0)
        return false;
    uint64_t h = fxb_cache_hash(c->hash_key, buf, len);
    pthread_mutex_lock(&c->mu);
    const cdecl *d = *decl_find(c, buf, len, h);
    if (d != NULL && pdurable)
        *pdurable = d->durable;
    pthread_mutex_unlock(&c->mu);
    return d != NULL;
}

void fxb_cache_declared_foreach(fx_broker *b,
                                void (*fn)(const char *tenant, const char *ns, const char *cache,
                                           bool durable, void *arg),
                                void *arg)
{
    struct fxb_caches *c = b->caches;
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < DECL_BUCKETS; i++) {
        for (cdecl *d = c->decl[i]; d != NULL; d = d->next) {
            const char *t = d->name, *n = t + strlen(t) + 1;
            fn(t, n, n + strlen(n) + 1, d->durable, arg);
        }
    }
    pthread_mutex_unlock(&c->mu);
}

/* A scrape (the metrics thread): one row per tenant account. */
static void collect_tenants(void *user, fx_mtenant_emit_fn emit, void *sink)
{
    struct fxb_caches *c = user;
    pthread_mutex_lock(&c->mu);
    for (ctenant *t = c->tenants; t != NULL; t = t->next) {
        fx_mtenant_row row = {.tenant = t->name};
        row.v[FX_MTENANT_CACHE_ENTRIES] =
            atomic_load_explicit(&t->acct.entries, memory_order_relaxed);
        row.v[FX_MTENANT_CACHE_BYTES] = atomic_load_explicit(&t->acct.bytes, memory_order_relaxed);
        row.v[FX_MTENANT_CACHE_HITS] =
            (int64_t)atomic_load_explicit(&t->acct.hits, memory_order_relaxed);
        row.v[FX_MTENANT_CACHE_MISSES] =
            (int64_t)atomic_load_explicit(&t->acct.misses, memory_order_relaxed);
        emit(sink, &row);
    }
    pthread_mutex_unlock(&c->mu);
}

int fxb_caches_init(fx_broker *b)
{
    struct fxb_caches *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    pthread_mutex_init(&c->mu, NULL);
    if (getrandom(c->hash_key, sizeof(c->hash_key), 0) != (ssize_t)sizeof(c->hash_key)) {
        /* Not fatal: only the spread of hostile keys depends on it. */
        FX_LOG_WARN("broker", "cache: getrandom failed (%s); the cache hash key is fixed",
                    strerror(errno));
        c->hash_key[0] = 0x736f6d6570736575ull;
        c->hash_key[1] = 0x646f72616e646f6dull;
    }
    b->caches = c;
    c->source = (fx_mtenant_source){.on_collect = collect_tenants, .user = c};
    fx_metrics_tenant_source_add(&c->source);
    for (size_t i = 0; i < b->o.ncaches; i++) {
        const fx_broker_stream_name *n = &b->o.caches[i];
        fx_registry_err err = {0};
        bool durable = b->o.caches_durable != NULL && b->o.caches_durable[i];
        int rv =
            fxb_cache_declare(b, n->tenant, n->ns, n->stream, durable ? 1 : 0, NULL, NULL, &err);
        if (rv != 0) {
            FX_LOG_ERROR("broker", "cache %s/%s/%s: %s", n->tenant, n->ns, n->stream,
                         err.msg[0] ? err.msg : fx_strerror(rv));
            fxb_caches_deinit(b);
            return rv;
        }
    }
    return 0;
}

void fxb_caches_deinit(fx_broker *b)
{
    struct fxb_caches *c = b->caches;
    if (c == NULL)
        return;
    fx_metrics_tenant_source_remove(&c->source); /* no scrape reads the accounts after */
    for (ctenant *t = c->tenants, *next; t != NULL; t = next) {
        next = t->next;
        free(t);
    }
    for (size_t i = 0; i < DECL_BUCKETS; i++) {
        for (cdecl *d = c->decl[i], *next; d != NULL; d = next) {
            next = d->next;
            free(d);
        }
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
    b->caches = NULL;
}

struct fxb_cache_tenant *fxb_cache_tenant_acct(fx_broker *b, const char *tenant)
{
    struct fxb_caches *c = b->caches;
    pthread_mutex_lock(&c->mu);
    ctenant *t = c->tenants;
    while (t != NULL && strcmp(t->name, tenant) != 0)
        t = t->next;
    if (t == NULL) {
        size_t n = strlen(tenant) + 1;
        t = calloc(1, sizeof(*t) + n);
        if (t != NULL) {
            memcpy(t->name, tenant, n);
            t->acct.max_bytes = (int64_t)b->o.cache_tenant_max_bytes;
            t->next = c->tenants;
            c->tenants = t;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return t != NULL ? &t->acct : NULL;
}

/* ---- a worker's store (worker loop; init and deinit: main thread) ----------------------- */

/* fxb_worker.cache. */
struct fxb_wcache {
    fxb_cache_store *store;
    fx_timer sweep_timer;
    uint64_t sweep_at_us; /* what |sweep_timer| is armed for, when armed */
    fxb_cache_stats seen; /* the counters already added to the registry */
    /* The durable parts of its caches, by cache id (cache_dur.h), and
     * whether each id was checked against the declarations: 0 not yet, 1
     * in memory, 2 durable (|dur| set). |dgen| is the caches' durable_gen
     * seen when they were checked. */
    fxb_dcache **dur;
    uint8_t *dchk;
    uint32_t dcap;
    unsigned dgen;
};

static void sweep_cb(fx_loop *l, fx_timer *t, void *user);
static void on_dropped(void *user, uint32_t scope, const void *key, size_t klen, bool evicted);

int fxb_cache_worker_init(fxb_worker *w)
{
    if (w->b->caches == NULL)
        return 0; /* a broker without the cache stage (a bare test broker): no store */
    const fx_broker_opts *o = &w->b->o;
    uint64_t total = o->cache_max_bytes != 0 ? o->cache_max_bytes : FXB_CACHE_DEFAULT_MAX_BYTES;
    fxb_cache_limits lim = {
        .max_bytes = fx_placement_worker_share(total, w->b->nworkers),
        .max_value_bytes = o->cache_max_value_bytes != 0 ? o->cache_max_value_bytes
                                                         : FXB_CACHE_DEFAULT_MAX_VALUE_BYTES,
        .max_key_bytes =
            o->cache_max_key_bytes != 0 ? o->cache_max_key_bytes : FXB_CACHE_DEFAULT_MAX_KEY_BYTES,
    };
    memcpy(lim.hash_key, w->b->caches->hash_key, sizeof(lim.hash_key));
    struct fxb_wcache *wc = calloc(1, sizeof(*wc));
    if (wc == NULL)
        return -ENOMEM;
    int rv = fxb_cache_store_new(&wc->store, &lim);
    if (rv != 0) {
        free(wc);
        return rv;
    }
    fx_timer_init(&wc->sweep_timer, sweep_cb, w);
    fxb_cache_store_on_dropped(wc->store, on_dropped, w);
    w->cache = wc;
    return 0;
}

/* Adds what the store counted since the last call to the registry. */
static void publish(struct fxb_wcache *wc)
{
    fxb_cache_stats st;
    fxb_cache_stats_get(wc->store, &st);
    fxb_cache_stats *o = &wc->seen;
    FX_COUNTER_ADD(cache_hits, st.hits - o->hits);
    FX_COUNTER_ADD(cache_misses, st.misses - o->misses);
    FX_COUNTER_ADD(cache_expired_read, st.expired_read - o->expired_read);
    FX_COUNTER_ADD(cache_expired_swept, st.expired_swept - o->expired_swept);
    FX_COUNTER_ADD(cache_evictions, st.evictions - o->evictions);
    FX_COUNTER_ADD(cache_deletes, st.deletes - o->deletes);
    FX_COUNTER_ADD(cache_condition_refused, st.cond_failed - o->cond_failed);
    FX_COUNTER_ADD(cache_dropped, st.dropped - o->dropped);
    const uint64_t *r = st.refused, *p = o->refused;
    FX_COUNTER_ADD(cache_refused_key_too_long,
                   r[FXB_CACHE_KEY_TOO_LONG - FXB_CACHE_REFUSAL_FIRST] -
                       p[FXB_CACHE_KEY_TOO_LONG - FXB_CACHE_REFUSAL_FIRST]);
    FX_COUNTER_ADD(cache_refused_value_too_large,
                   r[FXB_CACHE_VALUE_TOO_LARGE - FXB_CACHE_REFUSAL_FIRST] -
                       p[FXB_CACHE_VALUE_TOO_LARGE - FXB_CACHE_REFUSAL_FIRST]);
    FX_COUNTER_ADD(cache_refused_larger_than_store,
                   r[FXB_CACHE_LARGER_THAN_STORE - FXB_CACHE_REFUSAL_FIRST] -
                       p[FXB_CACHE_LARGER_THAN_STORE - FXB_CACHE_REFUSAL_FIRST]);
    FX_COUNTER_ADD(cache_refused_tenant_over_cap,
                   r[FXB_CACHE_TENANT_OVER_CAP - FXB_CACHE_REFUSAL_FIRST] -
                       p[FXB_CACHE_TENANT_OVER_CAP - FXB_CACHE_REFUSAL_FIRST]);
    FX_GAUGE_ADD(cache_entries, (int64_t)st.entries - (int64_t)o->entries);
    FX_GAUGE_ADD(cache_bytes, (int64_t)st.bytes - (int64_t)o->bytes);
    *o = st;
}

void fxb_cache_worker_deinit(fxb_worker *w)
{
    struct fxb_wcache *wc = w->cache;
    if (wc == NULL)
        return;
    fx_loop_timer_cancel(w->loop, &wc->sweep_timer); /* the loop is stopped: allowed */
    for (uint32_t i = 0; i < wc->dcap; i++)
        fxb_dcache_free(wc->dur[i]); /* closed by fxb_cache_durable_close */
    free(wc->dur);
    free(wc->dchk);
    FX_GAUGE_SUB(cache_entries, (int64_t)wc->seen.entries);
    FX_GAUGE_SUB(cache_bytes, (int64_t)wc->seen.bytes);
    fxb_cache_store_free(wc->store);
    free(wc);
    w->cache = NULL;
}

fxb_cache_store *fxb_cache_worker_store(fxb_worker *w)
{
    return w->cache != NULL ? w->cache->store : NULL;
}

/* Makes room for cache id |scope| in |wc|'s durable arrays. 0 or -ENOMEM. */
static int dur_reserve(struct fxb_wcache *wc, uint32_t scope)
{
    if (scope < wc->dcap)
        return 0;
    uint32_t cap = wc->dcap ? wc->dcap : 16;
    while (cap <= scope)
        cap *= 2;
    fxb_dcache **dur = realloc(wc->dur, cap * sizeof(*dur));
    if (dur == NULL)
        return -ENOMEM;
    wc->dur = dur;
    uint8_t *chk = realloc(wc->dchk, cap);
    if (chk == NULL)
        return -ENOMEM;
    wc->dchk = chk;
    memset(wc->dur + wc->dcap, 0, (cap - wc->dcap) * sizeof(*dur));
    memset(wc->dchk + wc->dcap, 0, cap - wc->dcap);
    wc->dcap = cap;
    return 0;
}

int fxb_cache_worker_set_durable(fxb_worker *w, uint32_t scope, fxb_dcache *dc)
{
    struct fxb_wcache *wc = w->cache;
    int rv = dur_reserve(wc, scope);
    if (rv != 0)
        return rv;
    wc->dur[scope] = dc;
    wc->dchk[scope] = 2;
    return 0;
}

void fxb_cache_durable_close(fx_broker *b)
{
    for (uint32_t i = 0; b->workers != NULL && i < b->nworkers; i++) {
        struct fxb_wcache *wc = b->workers[i].cache;
        for (uint32_t k = 0; wc != NULL && k < wc->dcap; k++)
            fxb_dcache_close(wc->dur[k]);
    }
}

/* The durable part of cache |scope| (named by |tenant|/|ns|/|cache|) on
 * |w| into |*pdc|: NULL for a cache in memory. Checked against the
 * declarations on first use and after a durable declaration changed.
 * 0 or -ENOMEM. Worker loop. */
static int dur_of(fxb_worker *w, uint32_t scope, const char *tenant, const char *ns,
                  const char *cache, fxb_dcache **pdc)
{
    struct fxb_wcache *wc = w->cache;
    *pdc = NULL;
    unsigned gen = atomic_load_explicit(&w->b->caches->durable_gen, memory_order_acquire);
    if (gen == 0 && wc->dcap == 0)
        return 0; /* no durable cache was ever declared */
    if (gen != wc->dgen) {
        for (uint32_t i = 0; i < wc->dcap; i++)
            if (wc->dchk[i] == 1)
                wc->dchk[i] = 0;
        wc->dgen = gen;
    }
    if (scope < wc->dcap && wc->dchk[scope] != 0) {
        *pdc = wc->dur[scope];
        return 0;
    }
    if (dur_reserve(wc, scope) != 0)
        return -ENOMEM;
    bool durable = false;
    (void)is_declared(w->b, tenant, ns, cache, &durable);
    if (durable && (*pdc = fxb_dcache_new(w, tenant, ns, cache)) == NULL)
        return -ENOMEM;
    wc->dur[scope] = *pdc;
    wc->dchk[scope] = durable ? 2 : 1;
    return 0;
}

static fx_ratelimit arm_rl = FX_RATELIMIT_INIT;
static fx_ratelimit dropped_rl = FX_RATELIMIT_INIT;

/* The store freed an entry nobody removed (evicted for the byte bound, or
 * expired): a durable cache logs a delete for it, so the entry does not
 * come back at the next start and compaction sees it dead. Worker loop
 * (main thread while the start rebuilds: a cache not yet marked durable
 * is skipped, its log already being what is read). */
static void on_dropped(void *user, uint32_t scope, const void *key, size_t klen, bool evicted)
{
    fxb_worker *w = user;
    struct fxb_wcache *wc = w->cache;
    if (wc == NULL || scope >= wc->dcap || wc->dchk[scope] != 2 || wc->dur[scope] == NULL ||
        fxb_dcache_damaged(wc->dur[scope]) != NULL)
        return;
    fxb_dcache_wr *wr = fxb_dcache_wr_new(FXB_DCACHE_OP_DELETE, 0, key, klen, NULL, 0);
    if (wr == NULL) {
        FX_COUNTER_INC(cache_durable_errors);
        FX_LOG_RATELIMITED(&dropped_rl, fx_now_ns(), FX_LOG_WARN, "broker",
                           "worker %u: no memory to log the delete of an %s durable cache entry: "
                           "it comes back at the next start",
                           (unsigned)w->index, evicted ? "evicted" : "expired");
        return;
    }
    fxb_dcache_wr_set(wr, FXB_DCACHE_OP_DELETE, 0, fxb_cache_scope_version(wc->store, scope));
    fxb_dcache_write(wc->dur[scope], wr, NULL, NULL);
}

/* Arms the sweep timer for the store's earliest expiry when it is not
 * armed for that or earlier. If it cannot be armed, expired entries wait
 * for a read or the next put (logged, rate-limited). */
static void arm_sweep(fxb_worker *w, uint64_t now_us)
{
    struct fxb_wcache *wc = w->cache;
    uint64_t d = fxb_cache_next_deadline(wc->store);
    if (d == UINT64_MAX)
        return;
    if (fx_timer_is_armed(&wc->sweep_timer) && wc->sweep_at_us <= d)
        return;
    uint64_t at_ns = d > UINT64_MAX / 1000 ? UINT64_MAX : d * 1000;
    if (fx_loop_timer_arm(w->loop, &wc->sweep_timer, at_ns) != 0) {
        FX_LOG_RATELIMITED(&arm_rl, now_us * 1000, FX_LOG_WARN, "broker",
                           "worker %u: cache sweep timer not armed (out of memory); expired "
                           "entries are freed when read until the next put arms it",
                           (unsigned)w->index);
        return;
    }
    wc->sweep_at_us = d;
}

static void sweep_cb(fx_loop *l, fx_timer *t, void *user)
{
    (void)t;
    fxb_worker *w = user;
    uint64_t now_us = fx_loop_now(l) / 1000;
    (void)fxb_cache_sweep(w->cache->store, now_us, FXB_CACHE_SWEEP_BUDGET); /* counted in stats */
    publish(w->cache);
    arm_sweep(w, now_us); /* more due: armed for now, i.e. the next turn */
}

/* ---- the admin API's asks (worker loop) -------------------------------------------------- */

int64_t fxb_cache_worker_drop(fxb_worker *w, const char *tenant, const char *ns, const char *cache)
{
    uint32_t id;
    if (w->cache == NULL)
        return -1;
    if (fxb_cache_scope_find(w->cache->store, tenant, ns, cache, &id) != 0) {
        /* Not used since start: a durable cache declared and never written
         * still has its directory, which its storage thread removes. */
        fxb_dcache *dc = fxb_dcache_new(w, tenant, ns, cache);
        if (dc != NULL)
            fxb_dcache_drop(dc);
        return -1;
    }
    uint64_t n = fxb_cache_scope_clear(w->cache->store, id);
    struct fxb_wcache *wc = w->cache;
    if (id < wc->dcap) {
        if (wc->dur[id] != NULL)
            fxb_dcache_drop(wc->dur[id]); /* its storage thread deletes the log */
        wc->dur[id] = NULL;
        wc->dchk[id] = 0;
    }
    publish(w->cache);
    return (int64_t)n;
}

json_t *fxb_cache_worker_list(fxb_worker *w)
{
    json_t *arr = json_array();
    if (arr == NULL || w->cache == NULL)
        return arr;
    fxb_cache_store *st = w->cache->store;
    uint32_t n = fxb_cache_scope_count(st);
    for (uint32_t i = 0; i < n; i++) {
        const char *t, *ns, *c;
        uint64_t entries, bytes;
        (void)fxb_cache_scope_names(st, i, &t, &ns, &c);
        fxb_cache_scope_usage(st, i, &entries, &bytes);
        json_t *e = json_pack("{s:s, s:s, s:s, s:I, s:I}", "tenant", t, "namespace", ns, "cache", c,
                              "entries", (json_int_t)entries, "bytes", (json_int_t)bytes);
        if (e == NULL || json_array_append_new(arr, e) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* ---- a request on the worker ------------------------------------------------------------- */

/* One cache request on its way to (and on) its worker: made on the
 * connection loop, posted once, then the worker's, which answers and frees
 * it. The names, key and value follow the struct in one allocation. */
typedef struct creq {
    fx_task task;
    fxb_worker *w;
    fxb_reply *reply; /* the worker's reference */
    fxb_cache_tenant *acct;
    fx_msg_type type;
    bool has_request_id;
    bool has_ttl_ms;
    bool conditional; /* the client offered FX_FEATURE_CACHE_CONDITIONAL */
    bool binary;      /* a CACHE_REQUEST frame: answered with CACHE_ANSWER */
    uint64_t request_id;
    uint64_t ttl_ms;
    fx_msg_condition condition; /* cache_put_if */
    uint64_t version;           /* cache_delete_if */
    uint64_t arrived_ns;        /* at the worker (fx_now_ns), for the latency histogram */
    fxb_dcache *dc;             /* a durable cache's part, or NULL */
    fxb_dcache_wr *spare;       /* a durable cache's write: its record, made before the store ran */
    fxb_dcache_wr *wr; /* |spare| once the write applied: sent to the log with the answer */
    const char *tenant, *ns, *cache, *key;
    size_t klen;
    const uint8_t *value;
    size_t vlen;
    char data[];
} creq;

/* A CACHE_ANSWER frame in a new buffer, or NULL without memory. */
static fx_buf *bin_answer(const fx_wire_cache_ans *a)
{
    size_t n = fx_wire_cache_ans_frame_size(a);
    fx_buf *f = NULL;
    if (n == 0 || fx_buf_new(&f, n) != 0)
        return NULL;
    if (fx_wire_cache_ans_encode(a, fx_buf_data_mut(f), n) < 0) {
        fx_buf_unref(f);
        return NULL;
    }
    return f;
}

/* The binary form of the JSON answer |m| to |q| (the worker builds one
 * fx_msg either way, so only the encoding differs): error -> status 2 with
 * its text, cache_value with a value -> 0 and the value, cache_value null
 * -> 1, cache_ok / ok -> 0. NULL without memory. */
static fx_buf *bin_frame_of(const creq *q, const fx_msg *m)
{
    fx_wire_cache_ans a = {.status = FX_CACHE_BIN_OK, .request_id = q->request_id};
    if (m->type == FX_MSG_ERROR) {
        a.status = FX_CACHE_BIN_ERROR;
        size_t n = strlen(m->message);
        a.text = (fx_wire_slice){(const uint8_t *)m->message,
                                 n < FX_CACHE_BIN_NAME_MAX ? n : FX_CACHE_BIN_NAME_MAX};
    } else if (m->type == FX_MSG_CACHE_VALUE && !m->has_value) {
        a.status = FX_CACHE_BIN_MISS;
    } else if (m->type == FX_MSG_CACHE_VALUE) {
        a.value = (fx_wire_slice){m->value.p, m->value.len};
    }
    return bin_answer(&a);
}

static void complete(creq *q, const fx_msg *m)
{
    fx_buf *f = NULL;
    if (q->binary)
        f = bin_frame_of(q, m); /* NULL: reset at the head, as below */
    else if (fxb_msg_frame(m, &f) != 0)
        f = NULL; /* the stream is reset when the slot reaches the head */
    publish(q->w->cache); /* before the answer: a client that reads it sees the counts */
    fxb_reply *r = q->reply;
    q->reply = NULL;
    if (q->wr != NULL) {
        /* A durable cache's write: to its log, behind every earlier one;
         * under on_commit answered by the storage thread after the flush. */
        fxb_dcache_wr *wr = q->wr;
        q->wr = NULL;
        if (fxb_dcache_waits(q->dc)) {
            fxb_dcache_write(q->dc, wr, r, f);
            r = NULL;
        } else {
            fxb_dcache_write(q->dc, wr, NULL, NULL);
        }
    }
    if (r != NULL)
        fxb_reply_complete_frame(r, f);
    /* Arrival at the worker to the slot's completion (docs/metrics.md). */
    uint64_t now = fx_now_ns(), d = now > q->arrived_ns ? now - q->arrived_ns : 0;
    switch (q->type) {
    case FX_MSG_CACHE_GET:
        FX_HIST_OBSERVE(cache_latency_get_ns, d);
        break;
    case FX_MSG_CACHE_PUT:
    case FX_MSG_CACHE_PUT_IF:
        FX_HIST_OBSERVE(cache_latency_put_ns, d);
        break;
    default:
        FX_HIST_OBSERVE(cache_latency_delete_ns, d);
        break;
    }
    /* The connection loop flushes, then drops the worker's reference
     * (reply_done_cb); a post already pending flushes it too. */
    if (r != NULL && !fx_loop_post(r->loop, &r->task))
        fxb_reply_unref(r);
}

static void answer_error(creq *q, const char *text)
{
    fx_msg m;
    fx_msg_init_error(&m, text);
    complete(q, &m);
}

/* Answers a put or put_if the store did not take for a limit: the
 * original's error text, the request's place in the stream's order
 * pairing it with its request_id. */
static void answer_put_refused(creq *q, int rv)
{
    if (rv == -ENOMEM) {
        FX_COUNTER_INC(cache_refused_internal);
        answer_error(q, "cache put failed: out of memory");
        return;
    }
    char text[160];
    snprintf(text, sizeof(text), "cache put refused: %s", fxb_cache_status_text(rv));
    answer_error(q, text);
}

/* A write of |q| applied to a durable cache: its record (|op|, expiring
 * |ttl_ms| from now on the wall clock, 0 never; a put with its entry's
 * |version|, a delete with the cache's last, read here from |st|) goes to
 * the log with the answer. Nothing for a cache in memory. */
static void log_write(creq *q, fxb_cache_store *st, uint32_t scope, uint8_t op, uint64_t ttl_ms,
                      uint64_t version)
{
    if (q->spare == NULL)
        return;
    uint64_t exp = 0;
    if (op == FXB_DCACHE_OP_PUT && ttl_ms != 0) {
        uint64_t now = fxb_dcache_wall_ms();
        exp = ttl_ms > UINT64_MAX - now ? UINT64_MAX : now + ttl_ms;
    }
    if (op == FXB_DCACHE_OP_DELETE)
        version = fxb_cache_scope_version(st, scope);
    fxb_dcache_wr_set(q->spare, op, exp, version);
    q->wr = q->spare;
    q->spare = NULL;
}

static void run_put(creq *q, fxb_cache_store *st, uint32_t scope, uint64_t now_us)
{
    int rv;
    if (q->has_ttl_ms && q->ttl_ms == 0) {
        /* The original: ttl_ms 0 is expired at once, so the key reads as
         * absent from now on; the store has no such entry (0 = no expiry):
         * the put replaces the entry with nothing. */
        rv = fxb_cache_delete(st, scope, q->key, q->klen, now_us);
        rv = rv >= 0 ? FXB_CACHE_OK : rv;
        if (rv == FXB_CACHE_OK)
            log_write(q, st, scope, FXB_DCACHE_OP_DELETE, 0, 0);
    } else {
        fxb_cache_put_opts po = {.ttl_ms = q->has_ttl_ms ? q->ttl_ms : 0};
        uint64_t version = 0;
        rv = fxb_cache_put(st, scope, q->key, q->klen, q->value, q->vlen, &po, now_us, &version);
        if (rv == FXB_CACHE_OK)
            log_write(q, st, scope, FXB_DCACHE_OP_PUT, po.ttl_ms, version);
    }
    if (rv != FXB_CACHE_OK) {
        answer_put_refused(q, rv);
        return;
    }
    fx_msg m;
    fx_msg_init_ok(&m);
    if (q->has_request_id) {
        m.type = FX_MSG_CACHE_OK;
        m.request_id = q->request_id;
        m.has_request_id = true;
    }
    complete(q, &m);
}

/* Answers cache_value for |q|'s key: |found| with |v|/|vlen| and its
 * |version| (written only to a client that offered
 * FX_FEATURE_CACHE_CONDITIONAL: any other gets the original's bytes), else
 * null. */
static void answer_value(creq *q, bool found, const void *v, size_t vlen, uint64_t version)
{
    fx_msg m;
    fx_msg_init_ok(&m);
    m.type = FX_MSG_CACHE_VALUE;
    m.tenant_id = q->tenant;
    m.ns = q->ns;
    m.cache = q->cache;
    m.key = q->key;
    m.has_value = found;
    if (found)
        m.value = (fx_msg_bytes){v, vlen};
    m.has_version = found && q->conditional;
    m.version = version;
    m.request_id = q->request_id;
    m.has_request_id = q->has_request_id;
    complete(q, &m); /* encoded before the store is called again */
}

static void run_get(creq *q, fxb_cache_store *st, uint32_t scope, uint64_t now_us)
{
    const void *v = NULL;
    size_t vlen = 0;
    uint64_t version = 0;
    int rv = fxb_cache_get(st, scope, q->key, q->klen, now_us, &v, &vlen, &version);
    answer_value(q, rv == FXB_CACHE_HIT, v, vlen, version);
}

/* cache_delete: cache_value with the value removed, or null when the key
 * had no live entry (not an error). */
static void run_delete(creq *q, fxb_cache_store *st, uint32_t scope, uint64_t now_us)
{
    const void *v = NULL;
    size_t vlen = 0;
    uint64_t version = 0;
    int rv = fxb_cache_remove(st, scope, q->key, q->klen, NULL, now_us, &v, &vlen, &version);
    /* Logged even when nothing live was there: an entry evicted from the
     * store (evictions are not logged) must not come back at start. */
    log_write(q, st, scope, FXB_DCACHE_OP_DELETE, 0, 0);
    answer_value(q, rv == FXB_CACHE_OK, v, vlen, version);
}

/* cache_condition_result{|applied|, version (0: omitted), request_id}. */
static void answer_condition(creq *q, bool applied, uint64_t version)
{
    fx_msg m;
    fx_msg_init_ok(&m);
    m.type = FX_MSG_CACHE_CONDITION_RESULT;
    m.applied = applied;
    m.has_version = version != 0;
    m.version = version;
    m.request_id = q->request_id;
    complete(q, &m);
}

/* cache_put_if: stored only if the condition holds (the store checks it
 * and stores in one step on this loop, so of two racing if_absent puts
 * exactly one applies). Refused by a limit: the error a put gets. */
static void run_put_if(creq *q, fxb_cache_store *st, uint32_t scope, uint64_t now_us)
{
    fxb_cache_put_opts po = {
        .ttl_ms = q->has_ttl_ms ? q->ttl_ms : 0,
        .if_absent = q->condition.kind == FX_MSG_CONDITION_ABSENT,
        .if_version = q->condition.kind == FX_MSG_CONDITION_VERSION,
        .version = q->condition.version,
    };
    uint64_t version = 0;
    int rv = fxb_cache_put(st, scope, q->key, q->klen, q->value, q->vlen, &po, now_us, &version);
    if (rv == FXB_CACHE_EXISTS || rv == FXB_CACHE_VERSION_CHANGED) {
        answer_condition(q, false, version); /* counted in cond_failed */
        return;
    }
    if (rv != FXB_CACHE_OK) {
        answer_put_refused(q, rv);
        return;
    }
    if (q->has_ttl_ms && q->ttl_ms == 0) {
        /* As a plain put: ttl_ms 0 is expired at once. The write happened
         * (it took its version); the entry reads as absent from now on. */
        (void)fxb_cache_delete(st, scope, q->key, q->klen, now_us); /* it is there: OK */
        log_write(q, st, scope, FXB_DCACHE_OP_DELETE, 0, 0);
    } else {
        log_write(q, st, scope, FXB_DCACHE_OP_PUT, po.ttl_ms, version);
    }
    answer_condition(q, true, version);
}

/* cache_delete_if: removed only if the live entry has the version. */
static void run_delete_if(creq *q, fxb_cache_store *st, uint32_t scope, uint64_t now_us)
{
    fxb_cache_remove_opts ro = {.if_version = true, .version = q->version};
    uint64_t version = 0;
    int rv = fxb_cache_remove(st, scope, q->key, q->klen, &ro, now_us, NULL, NULL, &version);
    if (rv == FXB_CACHE_OK)
        log_write(q, st, scope, FXB_DCACHE_OP_DELETE, 0, 0);
    /* Applied: no version (the entry is gone); refused: the current one. */
    answer_condition(q, rv == FXB_CACHE_OK, rv == FXB_CACHE_OK ? 0 : version);
}

static void run(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    creq *q = user;
    fxb_worker *w = q->w;
    q->arrived_ns = fx_now_ns();
    if (w->cache == NULL) {
        FX_COUNTER_INC(cache_refused_internal);
        answer_error(q, "cache request failed: this worker serves no cache");
        free(q);
        return;
    }
    fxb_cache_store *st = w->cache->store;
    uint64_t now_us = fx_loop_now(l) / 1000;
    uint32_t scope;
    int rv = fxb_cache_scope_open(st, q->tenant, q->ns, q->cache, q->acct, &scope);
    if (rv == 0)
        rv = dur_of(w, scope, q->tenant, q->ns, q->cache, &q->dc);
    const char *damaged = rv == 0 ? fxb_dcache_damaged(q->dc) : NULL;
    if (rv == 0 && damaged == NULL && q->type != FX_MSG_CACHE_GET) {
        /* A write to a durable cache: its record is made before the store
         * runs, so a write that applies always reaches the log. */
        if (q->dc != NULL && fxb_dcache_over_quota(q->dc))
            rv = FX_ESTORAGE_QUOTA;
        else if (rv == 0 && q->dc != NULL &&
                 (q->spare = fxb_dcache_wr_new(FXB_DCACHE_OP_PUT, 0, q->key, q->klen, q->value,
                                               q->vlen)) == NULL)
            rv = -ENOMEM;
    }
    if (damaged != NULL) {
        /* Quarantined at start (cache_dur.c): nothing served from a log that
         * could not be read back whole. */
        char text[1200];
        snprintf(text, sizeof(text), "cache storage damaged: %s", damaged);
        FX_COUNTER_INC(cache_refused_internal);
        answer_error(q, text);
    } else if (rv == FX_ESTORAGE_QUOTA) {
        FX_COUNTER_INC(storage_quota_broker_bytes);
        answer_error(q, "cache write refused: storage quota exceeded (durable_bytes_max)");
    } else if (rv == FX_EFULL) {
        FX_COUNTER_INC(cache_refused_too_many_caches);
        answer_error(q, "cache request refused: this broker worker holds 4096 caches already");
    } else if (rv != 0) {
        FX_COUNTER_INC(cache_refused_internal);
        answer_error(q, "cache request failed: out of memory");
    } else {
        switch (q->type) {
        case FX_MSG_CACHE_PUT:
            FX_COUNTER_INC(cache_requests_put);
            run_put(q, st, scope, now_us);
            arm_sweep(w, now_us);
            break;
        case FX_MSG_CACHE_PUT_IF:
            FX_COUNTER_INC(cache_requests_put_if);
            run_put_if(q, st, scope, now_us);
            arm_sweep(w, now_us);
            break;
        case FX_MSG_CACHE_DELETE:
            FX_COUNTER_INC(cache_requests_delete);
            run_delete(q, st, scope, now_us);
            break;
        case FX_MSG_CACHE_DELETE_IF:
            FX_COUNTER_INC(cache_requests_delete_if);
            run_delete_if(q, st, scope, now_us);
            break;
        default:
            FX_COUNTER_INC(cache_requests_get);
            run_get(q, st, scope, now_us);
            break;
        }
    }
    fxb_dcache_wr_free(q->spare); /* a durable write that did not apply */
    free(q);
}

/* ---- the connection loop ----------------------------------------------------------------- */

bool fxb_cache_is_request(fx_msg_type t)
{
    return t == FX_MSG_CACHE_PUT || t == FX_MSG_CACHE_GET || t == FX_MSG_CACHE_DELETE ||
           t == FX_MSG_CACHE_PUT_IF || t == FX_MSG_CACHE_DELETE_IF;
}

/* Whether |t| writes (cache.write) rather than reads (cache.read). */
static bool is_write(fx_msg_type t)
{
    return t != FX_MSG_CACHE_GET;
}

fxb_worker *fxb_cache_worker_of(fx_broker *b, const char *tenant, const char *ns, const char *cache)
{
    size_t lt = strlen(tenant), ln = strlen(ns), lc = strlen(cache);
    char buf[3 * 256];
    uint64_t h;
    if (lt + ln + lc + 2 <= sizeof(buf)) {
        memcpy(buf, tenant, lt);
        buf[lt] = '\0';
        memcpy(buf + lt + 1, ns, ln);
        buf[lt + 1 + ln] = '\0';
        memcpy(buf + lt + ln + 2, cache, lc);
        h = fxb_cache_hash(b->caches->hash_key, buf, lt + ln + 2 + lc);
    } else {
        uint64_t k[2] = {fxb_cache_hash(b->caches->hash_key, tenant, lt),
                         fxb_cache_hash(b->caches->hash_key, ns, ln)};
        h = fxb_cache_hash(k, cache, lc);
    }
    return &b->workers[fx_placement_worker_for(h, b->nworkers)];
}

/* Whether |m| carries a request_id: optional in put / get / delete,
 * required (so the decoder sets no has_ flag) in put_if / delete_if. */
static bool has_request_id(const fx_msg *m)
{
    return m->has_request_id || m->type == FX_MSG_CACHE_PUT_IF || m->type == FX_MSG_CACHE_DELETE_IF;
}

/* Refuses |m| with |text|: the stream goes on only when it had a request_id
 * (the original's rule for a missing cache). */
static void refuse(fxb_bidi *s, const fx_msg *m, const char *text)
{
    fxb_bidi_error(s, text, !has_request_id(m));
}

/* Answers the binary request |request_id| with status 2 and |text|, in
 * order; the stream goes on. */
static void refuse_binary(fxb_bidi *s, uint64_t request_id, const char *text)
{
    size_t n = strlen(text);
    fx_wire_cache_ans a = {
        .status = FX_CACHE_BIN_ERROR,
        .request_id = request_id,
        .text = {(const uint8_t *)text, n < FX_CACHE_BIN_NAME_MAX ? n : FX_CACHE_BIN_NAME_MAX},
    };
    fx_buf *f = bin_answer(&a);
    if (f == NULL) {
        fxb_bidi_fail(s, "out of memory for a cache answer");
        return;
    }
    fxb_bidi_reply_frame(s, f);
}

static creq *make_req(const fx_msg *m, uint32_t client_features)
{
    size_t lt = strlen(m->tenant_id) + 1, ln = strlen(m->ns) + 1, lc = strlen(m->cache) + 1;
    size_t lk = strlen(m->key) + 1;
    bool has_value = m->type == FX_MSG_CACHE_PUT || m->type == FX_MSG_CACHE_PUT_IF;
    size_t lv = has_value ? m->value.len : 0;
    creq *q = malloc(sizeof(*q) + lt + ln + lc + lk + lv);
    if (q == NULL)
        return NULL;
    memset(q, 0, sizeof(*q));
    char *p = q->data;
    q->tenant = memcpy(p, m->tenant_id, lt);
    p += lt;
    q->ns = memcpy(p, m->ns, ln);
    p += ln;
    q->cache = memcpy(p, m->cache, lc);
    p += lc;
    q->key = memcpy(p, m->key, lk);
    q->klen = lk - 1;
    p += lk;
    if (lv > 0)
        q->value = memcpy(p, m->value.p, lv);
    q->vlen = lv;
    q->type = m->type;
    q->request_id = m->request_id;
    q->has_request_id = has_request_id(m);
    q->ttl_ms = m->ttl_ms;
    q->has_ttl_ms = m->has_ttl_ms;
    q->condition = m->condition;
    q->version = m->version;
    q->conditional = (client_features & FX_FEATURE_CACHE_CONDITIONAL) != 0;
    return q;
}

/* Checks |m| and posts it to its worker: the JSON requests and, |binary|,
 * the binary ones (decoded into an fx_msg by fxb_cache_binary), whose
 * refusals are status 2 answers; the stream ends after `forbidden` either
 * way, and goes on after the others (a binary request always has a
 * request_id). */
static void submit(fxb_bidi *s, const fx_msg *m, bool binary)
{
    fx_broker *b = s->conn->b;
    bool put = is_write(m->type);
    if (!fxb_bidi_cache_allows(s, put ? FX_BROKER_AUTH_CACHE_WRITE : FX_BROKER_AUTH_CACHE_READ,
                               m->tenant_id, m->ns, m->cache)) {
        /* The original ends the stream on a refused permission, request_id or not. */
        FX_COUNTER_INC(cache_refused_forbidden);
        if (binary) {
            refuse_binary(s, m->request_id, "forbidden");
            fxb_bidi_end(s);
        } else {
            fxb_bidi_error(s, "forbidden", true);
        }
        return;
    }
    if (!b->o.auto_create_streams && !is_declared(b, m->tenant_id, m->ns, m->cache, NULL)) {
        /* Caches are auto-created like streams, or declared (the YAML's
         * caches, the admin API). */
        char text[64 + 3 * 128];
        snprintf(text, sizeof(text), "cache scope not found: %.128s/%.128s/%.128s", m->tenant_id,
                 m->ns, m->cache);
        FX_COUNTER_INC(cache_refused_not_found);
        if (binary)
            refuse_binary(s, m->request_id, text);
        else
            refuse(s, m, text);
        return;
    }
    if (fxb_is_draining(b)) {
        FX_COUNTER_INC(cache_refused_shutting_down);
        if (binary)
            refuse_binary(s, m->request_id, FXB_SHUTDOWN_TEXT);
        else
            refuse(s, m, FXB_SHUTDOWN_TEXT);
        return;
    }
    if (s->cache_acct == NULL && (s->cache_acct = fxb_cache_tenant_acct(b, s->tenant)) == NULL) {
        FX_COUNTER_INC(cache_refused_internal);
        fxb_bidi_fail(s, "out of memory for a cache tenant");
        return;
    }
    creq *q = make_req(m, s->client_features);
    fxb_reply *r = q != NULL ? fxb_reply_new(s, false, m->request_id) : NULL;
    if (r == NULL) {
        free(q);
        FX_COUNTER_INC(cache_refused_internal);
        fxb_bidi_fail(s, "out of memory for a cache request");
        return;
    }
    atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed); /* the worker's */
    q->reply = r;
    q->binary = binary;
    q->acct = s->cache_acct;
    q->w = fxb_cache_worker_of(b, m->tenant_id, m->ns, m->cache);
    fx_task_init(&q->task, run, q);
    (void)fx_loop_post(q->w->loop, &q->task); /* a new task: never pending already */
    /* The original: a put without request_id is answered `ok` and ends the
     * stream; a get (or delete) without one ends it after its cache_value.
     * put_if and delete_if always have one. */
    if (!has_request_id(m))
        fxb_bidi_end(s);
}

void fxb_cache_json(fxb_bidi *s, const fx_msg *m)
{
    submit(s, m, false);
}

/* Most bytes of "ns\0cache\0key\0" kept on the stack; longer names take a
 * heap copy. */
#define BIN_NAMES_STACK 1024u

int fxb_cache_binary(fxb_bidi *s, const fx_frame *f)
{
    if (!s->authed) {
        fxb_bidi_error(s, "auth required", true);
        return -1;
    }
    if ((s->client_features & FX_FEATURE_EXTENDED) == 0 ||
        (s->client_features_hi & FX_FEATURE_HI_CACHE_BINARY) == 0) {
        /* Not negotiated: the same answer as any unknown frame flag. */
        FX_COUNTER_INC(cache_binary_refused);
        fxb_bidi_error(s, "unsupported frame flags", false);
        return 0;
    }
    fx_wire_cache_req req;
    fx_wire_err err;
    if (fx_wire_cache_req_decode(f->body, f->len, &req, &err) != 0) {
        FX_COUNTER_INC(cache_binary_refused);
        fxb_bidi_fail(s, err.msg);
        return -1;
    }
    /* The names as C strings (the decoder refused a NUL in them); the value
     * stays in the frame and is copied once, into the worker's request. */
    size_t n = req.ns.len + req.cache.len + req.key.len + 3;
    char stack[BIN_NAMES_STACK];
    char *names = n <= sizeof(stack) ? stack : malloc(n);
    if (names == NULL) {
        FX_COUNTER_INC(cache_refused_internal);
        fxb_bidi_fail(s, "out of memory for a cache request");
        return -1;
    }
    char *p = names;
    const fx_wire_slice parts[3] = {req.ns, req.cache, req.key};
    const char *cs[3];
    for (int i = 0; i < 3; i++) {
        cs[i] = p;
        if (parts[i].len)
            memcpy(p, parts[i].ptr, parts[i].len);
        p[parts[i].len] = '\0';
        p += parts[i].len + 1;
    }
    fx_msg m;
    memset(&m, 0, sizeof(m));
    m.type = req.op == FX_CACHE_BIN_GET   ? FX_MSG_CACHE_GET
             : req.op == FX_CACHE_BIN_PUT ? FX_MSG_CACHE_PUT
                                          : FX_MSG_CACHE_DELETE;
    m.tenant_id = s->tenant;
    m.ns = cs[0];
    m.cache = cs[1];
    m.key = cs[2];
    m.request_id = req.request_id;
    m.has_request_id = true;
    if (req.op == FX_CACHE_BIN_PUT) {
        m.value = (fx_msg_bytes){req.value.ptr != NULL ? req.value.ptr : (const uint8_t *)"",
                                 req.value.len};
        /* ttl_ms 0 is "no expiry" here; in JSON an absent ttl_ms is. */
        m.ttl_ms = req.ttl_ms;
        m.has_ttl_ms = req.ttl_ms != 0;
    }
    FX_COUNTER_INC(cache_binary_requests);
    submit(s, &m, true);
    if (names != stack)
        free(names);
    return s->ended ? -1 : 0;
}
