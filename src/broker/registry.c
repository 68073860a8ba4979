/* Stream registry: chained hash tables under one rwlock, streams keyed by
 * "tenant\0namespace\0stream", tenants keyed by name (their stream count,
 * for max_streams_per_tenant) and the delete tombstones keyed like streams;
 * SipHash under a key random per registry, so clients cannot pick names that
 * collide. A rwlock is enough here: names are resolved
 * once per QUIC stream (publish and subscribe then hold the handle), never per
 * message, so the lock is off the data path. Any thread. */
#include "broker/registry.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "base/log.h"
#include "base/loop.h"
#include "base/metrics.h"
#include "felix/error.h"

/* ---- intrusive hash table ------------------------------------------------ */

typedef struct hnode {
    struct hnode *next;
    uint64_t hash;
    const char *key;
    size_t klen;
} hnode;

typedef struct htable {
    hnode **buckets;
    size_t nbuckets; /* power of two */
    size_t n;
} htable;

static int ht_init(htable *t)
{
    t->nbuckets = 16;
    t->n = 0;
    t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
    return t->buckets ? 0 : -ENOMEM;
}

static hnode *ht_find(const htable *t, uint64_t hash, const char *key, size_t klen)
{
    for (hnode *e = t->buckets[hash & (t->nbuckets - 1)]; e != NULL; e = e->next) {
        if (e->hash == hash && e->klen == klen && memcmp(e->key, key, klen) == 0)
            return e;
    }
    return NULL;
}

/* Doubles the bucket array at load 1; a failed grow only costs speed. */
static void ht_grow(htable *t)
{
    size_t nb = t->nbuckets * 2;
    hnode **b = calloc(nb, sizeof(*b));
    if (b == NULL)
        return;
    for (size_t i = 0; i < t->nbuckets; i++) {
        hnode *e = t->buckets[i];
        while (e != NULL) {
            hnode *next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = next;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = nb;
}

static void ht_insert(htable *t, hnode *e)
{
    if (t->n >= t->nbuckets)
        ht_grow(t);
    hnode **slot = &t->buckets[e->hash & (t->nbuckets - 1)];
    e->next = *slot;
    *slot = e;
    t->n++;
}

static void ht_remove(htable *t, hnode *e)
{
    for (hnode **p = &t->buckets[e->hash & (t->nbuckets - 1)]; *p != NULL; p = &(*p)->next) {
        if (*p == e) {
            *p = e->next;
            t->n--;
            return;
        }
    }
}

/* ---- records ------------------------------------------------------------- */

typedef struct tenant_rec {
    hnode node;
    size_t nstreams;
    size_t ndurable;    /* of them durable (tenant_durable_streams_max) */
    fx_retained *acct;  /* its streams' rings charge it (one reference) */
    fx_retained *dacct; /* its durable logs charge their bytes on disk to it */
    char name[];
} tenant_rec;

struct fx_stream_handle {
    atomic_size_t refs;
    atomic_bool active;
    atomic_bool ended; /* its worker finished the subscribers (after removal) */
    atomic_int moving;            /* FX_HANDLE_* of a cluster move */
    atomic_int_fast64_t jobs;     /* publish jobs in flight (cluster, in-memory) */
    bool durable;      /* fixed at creation */
    atomic_bool mirror;                /* fx_stream_handle_set_mirror */
    atomic_uint_fast64_t mirror_first; /* the mirror's first offset */
    uint64_t id;
    bool auto_created;              /* by a resolve: idle expiry applies */
    atomic_uint_fast64_t last_used; /* fx_stream_handle_touch */
    fx_retained *acct;              /* its tenant's account (one reference) */
    fx_retained *dacct;             /* durable: its tenant's durable-bytes account */
    hnode node;                     /* registry-private, under the lock */
    tenant_rec *tenant;             /* registry-private, under the lock */
    size_t ns_off;                  /* offset of the namespace in |names| */
    size_t stream_off;              /* offset of the stream name in |names| */
    char names[];                   /* "tenant\0ns\0stream\0": the key is all but the last NUL */
};

struct fx_registry {
    pthread_rwlock_t lock;
    uint8_t hash_key[crypto_shorthash_KEYBYTES]; /* random per registry */
    htable streams;
    htable tenants;
    htable tombs; /* tomb: names deleted less than opts.delete_tombstone_ns ago */
    uint64_t next_id;
    fx_registry_opts opts;
};

/* SipHash-2-4 of the bytes under the registry's random key: names chosen by
 * clients cannot be made to collide on purpose. */
static uint64_t hash_bytes(const fx_registry *r, const void *p, size_t n)
{
    uint8_t out[crypto_shorthash_BYTES];
    crypto_shorthash(out, p, n, r->hash_key);
    uint64_t h;
    memcpy(&h, out, sizeof(h));
    return h;
}

uint64_t fx_registry_hash(const fx_registry *r, const void *p, size_t n)
{
    return hash_bytes(r, p, n);
}

static int err_set(fx_registry_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int err_set(fx_registry_err *err, int code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Builds the lookup key "tenant\0ns\0stream" in |buf| (3 names of at most
 * FX_REGISTRY_NAME_MAX bytes, checked by the caller). Returns its length. */
static size_t make_key(char *buf, fx_wire_slice t, fx_wire_slice n, fx_wire_slice s)
{
    size_t k = 0;
    memcpy(buf + k, t.ptr, t.len);
    k += t.len;
    buf[k++] = '\0';
    memcpy(buf + k, n.ptr, n.len);
    k += n.len;
    buf[k++] = '\0';
    memcpy(buf + k, s.ptr, s.len);
    return k + s.len;
}

#define KEY_MAX (3 * FX_REGISTRY_NAME_MAX + 2)

int fx_registry_name_check(const char *what, fx_wire_slice name, fx_registry_err *err)
{
    if (name.len == 0)
        return err_set(err, FX_EWIRE_NAME, "invalid %s name: empty", what);
    if (name.len > FX_REGISTRY_NAME_MAX)
        return err_set(err, FX_EWIRE_NAME, "invalid %s name: %zu bytes, more than %u", what,
                       name.len, FX_REGISTRY_NAME_MAX);
    if (memchr(name.ptr, '\0', name.len) != NULL)
        return err_set(err, FX_EWIRE_NAME, "invalid %s name: contains a NUL byte", what);
    if (!fx_wire_utf8_valid(name.ptr, name.len))
        return err_set(err, FX_EWIRE_NAME, "invalid %s name: not valid UTF-8", what);
    if (memchr(name.ptr, '/', name.len) != NULL)
        return err_set(err, FX_EWIRE_NAME, "invalid %s name: contains '/'", what);
    return 0;
}

static int check_names(fx_wire_slice t, fx_wire_slice n, fx_wire_slice s, fx_registry_err *err)
{
    int rv = fx_registry_name_check("tenant", t, err);
    if (rv == 0)
        rv = fx_registry_name_check("namespace", n, err);
    if (rv == 0)
        rv = fx_registry_name_check("stream", s, err);
    return rv;
}

/* ---- retained-bytes accounts --------------------------------------------- */

static fx_retained *retained_new(uint64_t limit)
{
    fx_retained *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    atomic_init(&a->refs, 1);
    atomic_init(&a->bytes, 0);
    a->limit = limit;
    return a;
}

fx_retained *fx_retained_ref(fx_retained *a)
{
    if (a != NULL)
        atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
    return a;
}

void fx_retained_unref(fx_retained *a)
{
    if (a != NULL && atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) == 1)
        free(a);
}

static void tenant_free(tenant_rec *tr)
{
    fx_retained_unref(tr->acct);
    fx_retained_unref(tr->dacct);
    free(tr);
}

/* ---- delete tombstones --------------------------------------------------- */

/* A deleted stream's key, refused to auto-creation until |until_ns|. */
typedef struct tomb {
    hnode node;
    uint64_t until_ns;
    char key[];
} tomb;

static tomb *tomb_of(hnode *e)
{
    return e ? (tomb *)((char *)e - offsetof(tomb, node)) : NULL;
}

static void tombs_free(fx_registry *r)
{
    for (size_t i = 0; i < r->tombs.nbuckets; i++) {
        hnode *e = r->tombs.buckets[i];
        while (e != NULL) {
            hnode *next = e->next;
            free(tomb_of(e));
            e = next;
        }
    }
    free(r->tombs.buckets);
}

/* Under the write lock: drops the tombstones that ended by |now_ns| (they
 * number at most the deletions of one tombstone period). */
static void tombs_prune_locked(fx_registry *r, uint64_t now_ns)
{
    for (size_t i = 0; i < r->tombs.nbuckets; i++) {
        hnode *e = r->tombs.buckets[i];
        while (e != NULL) {
            hnode *next = e->next;
            tomb *tb = tomb_of(e);
            if (tb->until_ns <= now_ns) {
                ht_remove(&r->tombs, e);
                free(tb);
            }
            e = next;
        }
    }
}

/* Under the write lock: the stream |key| was deleted at |now_ns|. Without
 * memory it gets no tombstone (logged): auto-creation may bring it back. */
static void tomb_add_locked(fx_registry *r, const char *key, size_t klen, uint64_t hash,
                            uint64_t now_ns)
{
    tombs_prune_locked(r, now_ns);
    tomb *tb = tomb_of(ht_find(&r->tombs, hash, key, klen));
    if (tb == NULL) {
        tb = calloc(1, sizeof(*tb) + klen);
        if (tb == NULL) {
            FX_LOG_ERROR("broker", "out of memory recording a deleted stream's tombstone: "
                                   "auto-creation may bring it back at once");
            return;
        }
        memcpy(tb->key, key, klen);
        tb->node = (hnode){.hash = hash, .key = tb->key, .klen = klen};
        ht_insert(&r->tombs, &tb->node);
    }
    tb->until_ns = now_ns + r->opts.delete_tombstone_ns;
}

/* Under the write lock, before an insert: an auto-creation (|autoc|) of a
 * stream deleted less than delete_tombstone_ns ago is refused (FX_ENOSTREAM,
 * counted); an explicit creation ends the tombstone, as does its end.
 * Returns 0 or FX_ENOSTREAM. */
static int tomb_gate_locked(fx_registry *r, fx_wire_slice t, fx_wire_slice n, fx_wire_slice s,
                            const char *key, size_t klen, uint64_t hash, bool autoc,
                            fx_registry_err *err)
{
    tomb *tb = r->tombs.n != 0 ? tomb_of(ht_find(&r->tombs, hash, key, klen)) : NULL;
    if (tb == NULL)
        return 0;
    uint64_t now = fx_now_ns();
    if (!autoc || tb->until_ns <= now) {
        ht_remove(&r->tombs, &tb->node);
        free(tb);
        return 0;
    }
    FX_COUNTER_INC(registry_tombstone_refused);
    uint64_t secs = (tb->until_ns - now + FX_NS_PER_S - 1) / FX_NS_PER_S;
    return err_set(err, FX_ENOSTREAM,
                   "stream not found: tenant=%.*s namespace=%.*s stream=%.*s (deleted recently: "
                   "not auto-created again for %llu s, stream_delete_tombstone_ms, unless "
                   "created explicitly)",
                   (int)t.len, (const char *)t.ptr, (int)n.len, (const char *)n.ptr, (int)s.len,
                   (const char *)s.ptr, (unsigned long long)secs);
}

/* ---- lifecycle ----------------------------------------------------------- */

int fx_registry_new(fx_registry **pr, const fx_registry_opts *o)
{
    fx_registry *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->opts = *o;
    r->next_id = 1;
    if (sodium_init() < 0) {
        FX_LOG_ERROR("broker", "libsodium failed to initialise: no random registry hash key");
        free(r);
        return -EIO;
    }
    randombytes_buf(r->hash_key, sizeof(r->hash_key));
    int rv = pthread_rwlock_init(&r->lock, NULL);
    if (rv != 0) {
        free(r);
        return -rv;
    }
    if (ht_init(&r->streams) != 0)
        goto err_lock;
    if (ht_init(&r->tenants) != 0)
        goto err_streams;
    if (ht_init(&r->tombs) != 0)
        goto err_tenants;
    *pr = r;
    return 0;

err_tenants:
    free(r->tenants.buckets);
err_streams:
    free(r->streams.buckets);
err_lock:
    pthread_rwlock_destroy(&r->lock);
    free(r);
    return -ENOMEM;
}

void fx_registry_free(fx_registry *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->streams.nbuckets; i++) {
        hnode *e = r->streams.buckets[i];
        while (e != NULL) {
            hnode *next = e->next;
            fx_stream_handle *h =
                (fx_stream_handle *)((char *)e - offsetof(fx_stream_handle, node));
            atomic_store(&h->active, false);
            h->tenant = NULL;
            fx_stream_handle_unref(h);
            e = next;
        }
    }
    for (size_t i = 0; i < r->tenants.nbuckets; i++) {
        hnode *e = r->tenants.buckets[i];
        while (e != NULL) {
            hnode *next = e->next;
            tenant_free((tenant_rec *)((char *)e - offsetof(tenant_rec, node)));
            e = next;
        }
    }
    tombs_free(r);
    free(r->streams.buckets);
    free(r->tenants.buckets);
    pthread_rwlock_destroy(&r->lock);
    free(r);
}

/* ---- lookup and creation ------------------------------------------------- */

static fx_stream_handle *handle_of(hnode *e)
{
    return e ? (fx_stream_handle *)((char *)e - offsetof(fx_stream_handle, node)) : NULL;
}

static tenant_rec *tenant_find(fx_registry *r, fx_wire_slice t)
{
    hnode *e = ht_find(&r->tenants, hash_bytes(r, t.ptr, t.len), (const char *)t.ptr, t.len);
    return e ? (tenant_rec *)((char *)e - offsetof(tenant_rec, node)) : NULL;
}

static tenant_rec *tenant_get(fx_registry *r, fx_wire_slice t)
{
    tenant_rec *tr = tenant_find(r, t);
    if (tr != NULL)
        return tr;
    tr = calloc(1, sizeof(*tr) + t.len + 1);
    if (tr == NULL)
        return NULL;
    tr->acct = retained_new(r->opts.tenant_retained_bytes);
    tr->dacct = retained_new(r->opts.tenant_durable_bytes_max);
    if (tr->acct == NULL || tr->dacct == NULL) {
        tenant_free(tr);
        return NULL;
    }
    memcpy(tr->name, t.ptr, t.len);
    tr->node = (hnode){.hash = hash_bytes(r, t.ptr, t.len), .key = tr->name, .klen = t.len};
    ht_insert(&r->tenants, &tr->node);
    return tr;
}

static fx_stream_handle *handle_new(const char *key, size_t klen, uint64_t hash, size_t tlen,
                                    size_t nlen)
{
    fx_stream_handle *h = calloc(1, sizeof(*h) + klen + 1);
    if (h == NULL)
        return NULL;
    memcpy(h->names, key, klen);
    h->ns_off = tlen + 1;
    h->stream_off = tlen + 1 + nlen + 1;
    h->node = (hnode){.hash = hash, .key = h->names, .klen = klen};
    atomic_init(&h->refs, 1); /* the registry's */
    atomic_init(&h->active, true);
    atomic_init(&h->ended, false);
    atomic_init(&h->mirror, false);
    atomic_init(&h->mirror_first, 0);
    atomic_init(&h->last_used, fx_now_ns());
    return h;
}

/* Drops a tenant record that holds no stream (tenants exist only while they
 * hold streams, so name churn is bounded). */
static void tenant_put(fx_registry *r, tenant_rec *tr)
{
    if (tr->nstreams == 0) {
        ht_remove(&r->tenants, &tr->node);
        tenant_free(tr);
    }
}

/* Under the write lock: whether |tr| may take one more durable stream
 * (|adopt|: found in the catalogue at start, always taken). Returns 0 or
 * FX_ESTORAGE_QUOTA, counted. */
static int durable_quota_locked(const fx_registry *r, const tenant_rec *tr, bool adopt,
                                fx_registry_err *err)
{
    uint32_t max = r->opts.tenant_durable_streams_max;
    if (adopt || max == 0 || tr->ndurable < max)
        return 0;
    static fx_ratelimit rl = FX_RATELIMIT_INIT;
    FX_COUNTER_INC(storage_quota_streams);
    FX_LOG_RATELIMITED(&rl, fx_now_ns(), FX_LOG_WARN, "storage",
                       "tenant %s holds tenant_durable_streams_max (%u) durable streams: a new "
                       "one was refused",
                       tr->name, max);
    return err_set(err, FX_ESTORAGE_QUOTA,
                   "storage quota exceeded: tenant %s holds tenant_durable_streams_max (%u) "
                   "durable streams: stream not created",
                   tr->name, max);
}

/* Under the write lock: the record of tenant |t| into |*ptr|, if the broker
 * may hold it (max_tenants) and it may hold one more stream
 * (max_streams_per_tenant). Returns 0, FX_EFULL or -ENOMEM. */
static int tenant_room_locked(fx_registry *r, fx_wire_slice t, tenant_rec **ptr,
                              fx_registry_err *err)
{
    uint32_t maxt = r->opts.max_tenants;
    if (maxt != 0 && tenant_find(r, t) == NULL && r->tenants.n >= maxt) {
        static fx_ratelimit rl = FX_RATELIMIT_INIT;
        FX_COUNTER_INC(registry_tenants_refused);
        FX_LOG_RATELIMITED(&rl, fx_now_ns(), FX_LOG_WARN, "broker",
                           "max_tenants (%u) reached: refused a stream of a new tenant", maxt);
        return err_set(err, FX_EFULL,
                       "the broker holds max_tenants (%u) tenants: stream not created", maxt);
    }
    tenant_rec *tr = tenant_get(r, t);
    if (tr == NULL)
        return err_set(err, -ENOMEM, "out of memory creating a stream");
    uint32_t max = r->opts.max_streams_per_tenant;
    if (max != 0 && tr->nstreams >= max)
        return err_set(err, FX_EFULL,
                       "tenant %s has reached max_streams_per_tenant (%u): stream not created",
                       tr->name, max);
    *ptr = tr;
    return 0;
}

/* Under the write lock: gives the new |h| its id and accounts, counts it in
 * |tr| and lists it. */
static void attach_locked(fx_registry *r, fx_stream_handle *h, tenant_rec *tr, bool autoc,
                          int durable)
{
    h->id = r->next_id++;
    h->auto_created = autoc;
    h->acct = fx_retained_ref(tr->acct);
    h->durable = durable != 0;
    h->dacct = durable ? fx_retained_ref(tr->dacct) : NULL;
    h->tenant = tr;
    tr->nstreams++;
    tr->ndurable += h->durable;
    ht_insert(&r->streams, &h->node);
}

/* Under the write lock: finds or inserts the stream (|autoc|: by a
 * resolve; |durable|: a durable stream). |*pcreated| tells which. */
static int insert_locked(fx_registry *r, fx_wire_slice t, fx_wire_slice n, const char *key,
                         size_t klen, uint64_t hash, bool autoc, int durable, fx_stream_handle **ph,
                         bool *pcreated, fx_registry_err *err)
{
    fx_stream_handle *h = handle_of(ht_find(&r->streams, hash, key, klen));
    *pcreated = false;
    if (h == NULL) {
        tenant_rec *tr = NULL;
        int rv = tenant_room_locked(r, t, &tr, err);
        if (rv != 0)
            return rv;
        rv = durable ? durable_quota_locked(r, tr, durable == FX_REGISTRY_DURABLE_ADOPT, err) : 0;
        h = rv == 0 ? handle_new(key, klen, hash, t.len, n.len) : NULL;
        if (h == NULL) {
            tenant_put(r, tr);
            return rv != 0 ? rv : err_set(err, -ENOMEM, "out of memory creating a stream");
        }
        attach_locked(r, h, tr, autoc, durable);
        *pcreated = true;
    }
    if (ph != NULL)
        *ph = fx_stream_handle_ref(h);
    return 0;
}

/* Durability asked of create_or_find beside 1 (durable), 0 (in memory), -1
 * (either; a new stream in memory) and FX_REGISTRY_DURABLE_ADOPT: either, a
 * new stream as durable_default says (auto-creation by a publish); either,
 * and no new stream under durable_default (a subscribe). */
#define WANT_DEFAULT 2
#define WANT_SUBSCRIBE 4
_Static_assert(FX_REGISTRY_DURABLE_ADOPT != WANT_DEFAULT &&
                   FX_REGISTRY_DURABLE_ADOPT != WANT_SUBSCRIBE,
               "durability wishes are distinct");

/* A durable stream needs storage; durability is fixed at creation. */
static int durable_check(const fx_registry *r, fx_wire_slice t, fx_wire_slice n, fx_wire_slice s,
                         const fx_stream_handle *h, int want, fx_registry_err *err)
{
    if (want == FX_REGISTRY_DURABLE_ADOPT)
        want = 1;
    if (want == WANT_DEFAULT || want == WANT_SUBSCRIBE)
        want = h != NULL ? -1 : r->opts.durable_default;
    if (h != NULL && want >= 0 && h->durable != (want == 1))
        return err_set(err, -EEXIST,
                       "changing stream durability requires removal and recreation: tenant=%.*s "
                       "namespace=%.*s stream=%.*s current=%s requested=%s",
                       (int)t.len, (const char *)t.ptr, (int)n.len, (const char *)n.ptr, (int)s.len,
                       (const char *)s.ptr, h->durable ? "true" : "false",
                       want == 1 ? "true" : "false");
    if (h == NULL && want == 1 && !r->opts.durable_storage)
        return err_set(err, -ENOTSUP,
                       "stream %.*s/%.*s/%.*s is marked durable but this broker has no durable "
                       "storage configured",
                       (int)t.len, (const char *)t.ptr, (int)n.len, (const char *)n.ptr, (int)s.len,
                       (const char *)s.ptr);
    return 0;
}

/* What insert_locked makes of |want| for a new stream: 0 in memory, 1
 * durable, FX_REGISTRY_DURABLE_ADOPT. */
static int new_durability(const fx_registry *r, int want)
{
    if (want == WANT_DEFAULT)
        return r->opts.durable_default ? 1 : 0;
    return want == 1 || want == FX_REGISTRY_DURABLE_ADOPT ? want : 0;
}

/* Whether a stream not found may be created: not without |create|, nor by
 * a subscribe under durable_default. Returns 0 or FX_ENOSTREAM. */
static int check_create(const fx_registry *r, fx_wire_slice t, fx_wire_slice n, fx_wire_slice s,
                        bool create, int want, fx_registry_err *err)
{
    if (!create)
        return err_set(err, FX_ENOSTREAM,
                       "stream not found: tenant=%.*s namespace=%.*s stream=%.*s", (int)t.len,
                       (const char *)t.ptr, (int)n.len, (const char *)n.ptr, (int)s.len,
                       (const char *)s.ptr);
    if (want == WANT_SUBSCRIBE && r->opts.durable_default) {
        FX_COUNTER_INC(registry_subscribe_not_created);
        return err_set(err, FX_ENOSTREAM,
                       "stream not found: tenant=%.*s namespace=%.*s stream=%.*s "
                       "(durable_default: a durable stream is created by its first publish or "
                       "the admin API, not by a subscribe)",
                       (int)t.len, (const char *)t.ptr, (int)n.len, (const char *)n.ptr, (int)s.len,
                       (const char *)s.ptr);
    }
    return 0;
}

/* |autoc|: by a resolve (auto-creation); |want|: 1 durable, 0 not, -1
 * either (a new stream is then not durable), FX_REGISTRY_DURABLE_ADOPT,
 * WANT_DEFAULT, WANT_SUBSCRIBE. */
static int create_or_find(fx_registry *r, fx_wire_slice t, fx_wire_slice n, fx_wire_slice s,
                          bool create, bool autoc, int want, fx_stream_handle **ph, bool *pcreated,
                          fx_registry_err *err)
{
    int rv = check_names(t, n, s, err);
    if (rv != 0)
        return rv;
    char key[KEY_MAX];
    size_t klen = make_key(key, t, n, s);
    uint64_t hash = hash_bytes(r, key, klen);

    pthread_rwlock_rdlock(&r->lock);
    fx_stream_handle *h = handle_of(ht_find(&r->streams, hash, key, klen));
    rv = durable_check(r, t, n, s, h, want, err);
    if (h != NULL && ph != NULL && rv == 0)
        *ph = fx_stream_handle_ref(h);
    if (h != NULL && autoc)
        fx_stream_handle_touch(h, fx_now_ns()); /* under the lock: expiry sees it */
    pthread_rwlock_unlock(&r->lock);
    if (h != NULL || rv != 0) {
        *pcreated = false;
        return rv;
    }
    if ((rv = check_create(r, t, n, s, create, want, err)) != 0)
        return rv;
    /* Another thread may create it between the locks: insert re-checks. */
    pthread_rwlock_wrlock(&r->lock);
    rv = durable_check(r, t, n, s, handle_of(ht_find(&r->streams, hash, key, klen)), want, err);
    if (rv == 0)
        rv = tomb_gate_locked(r, t, n, s, key, klen, hash, autoc, err);
    if (rv == 0)
        rv = insert_locked(r, t, n, key, klen, hash, autoc, new_durability(r, want), ph, pcreated,
                           err);
    pthread_rwlock_unlock(&r->lock);
    return rv;
}

int fx_registry_create(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns, fx_wire_slice stream,
                       fx_stream_handle **ph, bool *pcreated, fx_registry_err *err)
{
    return fx_registry_create_durable(r, tenant, ns, stream, -1, ph, pcreated, err);
}

int fx_registry_create_durable(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns,
                               fx_wire_slice stream, int durable, fx_stream_handle **ph,
                               bool *pcreated, fx_registry_err *err)
{
    bool created = false;
    int rv = create_or_find(r, tenant, ns, stream, true, false, durable, ph, &created, err);
    if (pcreated != NULL)
        *pcreated = created;
    return rv;
}

bool fx_stream_handle_is_durable(const fx_stream_handle *h)
{
    return h->durable;
}

int fx_registry_resolve(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns,
                        fx_wire_slice stream, fx_stream_handle **ph, fx_registry_err *err)
{
    bool created;
    return create_or_find(r, tenant, ns, stream, r->opts.auto_create, true, WANT_DEFAULT, ph,
                          &created, err);
}

int fx_registry_resolve_subscribe(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns,
                                  fx_wire_slice stream, fx_stream_handle **ph, fx_registry_err *err)
{
    bool created;
    return create_or_find(r, tenant, ns, stream, r->opts.auto_create, true, WANT_SUBSCRIBE, ph,
                          &created, err);
}

/* Under the write lock: unlists |h| and deactivates it (the registry's
 * reference is the caller's to drop). */
static void remove_locked(fx_registry *r, fx_stream_handle *h)
{
    ht_remove(&r->streams, &h->node);
    tenant_rec *tr = h->tenant;
    h->tenant = NULL;
    tr->nstreams--;
    tr->ndurable -= h->durable;
    tenant_put(r, tr);
    atomic_store(&h->active, false);
}

static bool registry_remove(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns,
                            fx_wire_slice stream, bool with_tomb);

bool fx_registry_remove(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns,
                        fx_wire_slice stream)
{
    return registry_remove(r, tenant, ns, stream, true);
}

bool fx_registry_release(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns,
                         fx_wire_slice stream)
{
    return registry_remove(r, tenant, ns, stream, false);
}

static bool registry_remove(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns,
                            fx_wire_slice stream, bool with_tomb)
{
    if (check_names(tenant, ns, stream, NULL) != 0)
        return false;
    char key[KEY_MAX];
    size_t klen = make_key(key, tenant, ns, stream);
    uint64_t hash = hash_bytes(r, key, klen);

    pthread_rwlock_wrlock(&r->lock);
    fx_stream_handle *h = handle_of(ht_find(&r->streams, hash, key, klen));
    if (h != NULL)
        remove_locked(r, h);
    if (with_tomb && h != NULL && r->opts.auto_create && r->opts.delete_tombstone_ns != 0)
        tomb_add_locked(r, key, klen, hash, fx_now_ns());
    pthread_rwlock_unlock(&r->lock);
    fx_stream_handle_unref(h);
    return h != NULL;
}

fx_stream_handle *fx_registry_find(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns,
                                   fx_wire_slice stream)
{
    if (check_names(tenant, ns, stream, NULL) != 0)
        return NULL; /* no stream has such a name */
    char key[KEY_MAX];
    size_t klen = make_key(key, tenant, ns, stream);
    uint64_t hash = hash_bytes(r, key, klen);

    /* Only active streams are listed: removal unlists under the write lock. */
    pthread_rwlock_rdlock(&r->lock);
    fx_stream_handle *h = handle_of(ht_find(&r->streams, hash, key, klen));
    if (h != NULL)
        fx_stream_handle_ref(h);
    pthread_rwlock_unlock(&r->lock);
    return h;
}

/* Idle: auto-created, only the registry's reference, untouched for |idle_ns|.
 * Under the write lock nobody can take a new reference (resolve and create
 * take theirs under the lock, and every other holder would already count). */
static bool is_idle(fx_stream_handle *h, uint64_t now_ns, uint64_t idle_ns)
{
    uint64_t last = atomic_load_explicit(&h->last_used, memory_order_relaxed);
    return h->auto_created && atomic_load_explicit(&h->refs, memory_order_acquire) == 1 &&
           now_ns > last && now_ns - last > idle_ns;
}

size_t fx_registry_expire_idle(fx_registry *r, uint64_t now_ns, uint64_t idle_ns,
                               void (*cb)(fx_stream_handle *h, void *user), void *user)
{
    fx_stream_handle *gone = NULL; /* chained through |node.next| once unlisted */
    size_t n = 0;
    pthread_rwlock_wrlock(&r->lock);
    for (size_t i = 0; i < r->streams.nbuckets; i++) {
        hnode *e = r->streams.buckets[i];
        while (e != NULL) {
            hnode *next = e->next;
            fx_stream_handle *h = handle_of(e);
            if (is_idle(h, now_ns, idle_ns)) {
                remove_locked(r, h);
                h->node.next = gone != NULL ? &gone->node : NULL;
                gone = h;
                n++;
            }
            e = next;
        }
    }
    pthread_rwlock_unlock(&r->lock);
    while (gone != NULL) {
        fx_stream_handle *h = gone;
        gone = handle_of(h->node.next);
        h->node.next = NULL;
        cb(h, user); /* takes the registry's reference */
    }
    return n;
}

size_t fx_registry_tenants(fx_registry *r)
{
    pthread_rwlock_rdlock(&r->lock);
    size_t n = r->tenants.n;
    pthread_rwlock_unlock(&r->lock);
    return n;
}

size_t fx_registry_count(fx_registry *r)
{
    pthread_rwlock_rdlock(&r->lock);
    size_t n = r->streams.n;
    pthread_rwlock_unlock(&r->lock);
    return n;
}

size_t fx_registry_tenant_count(fx_registry *r, fx_wire_slice tenant)
{
    pthread_rwlock_rdlock(&r->lock);
    tenant_rec *tr = tenant_find(r, tenant);
    size_t n = tr ? tr->nstreams : 0;
    pthread_rwlock_unlock(&r->lock);
    return n;
}

void fx_registry_foreach(fx_registry *r, void (*cb)(fx_stream_handle *h, void *user), void *user)
{
    pthread_rwlock_rdlock(&r->lock);
    for (size_t i = 0; i < r->streams.nbuckets; i++) {
        for (hnode *e = r->streams.buckets[i]; e != NULL; e = e->next)
            cb(handle_of(e), user);
    }
    pthread_rwlock_unlock(&r->lock);
}

/* ---- handles ------------------------------------------------------------- */

fx_stream_handle *fx_stream_handle_ref(fx_stream_handle *h)
{
    if (h != NULL)
        atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
    return h;
}

void fx_stream_handle_unref(fx_stream_handle *h)
{
    if (h != NULL && atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) == 1) {
        fx_retained_unref(h->acct);
        fx_retained_unref(h->dacct);
        free(h);
    }
}

void fx_stream_handle_touch(fx_stream_handle *h, uint64_t now_ns)
{
    /* Only auto-created streams expire (auto_created is set before the
     * handle is published), and expiry counts in seconds: a store at most
     * every 100 ms keeps this line, which the connection loops share for
     * |refs|, from moving between cores on every publish job. */
    if (!h->auto_created)
        return;
    uint64_t last = atomic_load_explicit(&h->last_used, memory_order_relaxed);
    if (now_ns > last && now_ns - last >= 100 * FX_NS_PER_MS)
        atomic_store_explicit(&h->last_used, now_ns, memory_order_relaxed);
}

fx_retained *fx_stream_handle_retained(const fx_stream_handle *h)
{
    return h->acct;
}

fx_retained *fx_stream_handle_durable_bytes(const fx_stream_handle *h)
{
    return h->dacct;
}

uint64_t fx_stream_handle_id(const fx_stream_handle *h)
{
    return h->id;
}

bool fx_stream_handle_is_active(const fx_stream_handle *h)
{
    return atomic_load_explicit(&h->active, memory_order_acquire);
}

void fx_stream_handle_set_ended(fx_stream_handle *h)
{
    atomic_store_explicit(&h->ended, true, memory_order_release);
}

bool fx_stream_handle_is_ended(const fx_stream_handle *h)
{
    return atomic_load_explicit(&h->ended, memory_order_acquire);
}

/* The moving state and the jobs count pair up as in Dekker's algorithm (a
 * job counts itself then reads the state; a move sets the state then reads
 * the count): sequentially consistent, so one of them sees the other. */
void fx_stream_handle_set_moving(fx_stream_handle *h, int state)
{
    atomic_store(&h->moving, state);
}

int fx_stream_handle_moving(const fx_stream_handle *h)
{
    return atomic_load(&((fx_stream_handle *)h)->moving);
}

void fx_stream_handle_jobs_add(fx_stream_handle *h, int64_t delta)
{
    atomic_fetch_add(&h->jobs, delta);
}

int64_t fx_stream_handle_jobs(const fx_stream_handle *h)
{
    return atomic_load(&((fx_stream_handle *)h)->jobs);
}

int fx_stream_handle_check(const fx_stream_handle *h, fx_registry_err *err)
{
    if (fx_stream_handle_is_active(h))
        return 0;
    return err_set(err, FX_ENOSTREAM, "stream handle inactive: tenant=%s namespace=%s stream=%s",
                   fx_stream_handle_tenant(h), fx_stream_handle_namespace(h),
                   fx_stream_handle_stream(h));
}

const char *fx_stream_handle_tenant(const fx_stream_handle *h)
{
    return h->names;
}

const char *fx_stream_handle_namespace(const fx_stream_handle *h)
{
    return h->names + h->ns_off;
}

const char *fx_stream_handle_stream(const fx_stream_handle *h)
{
    return h->names + h->stream_off;
}

void fx_stream_handle_set_mirror(fx_stream_handle *h, uint64_t first_offset)
{
    atomic_store(&h->mirror_first, first_offset);
    atomic_store(&h->mirror, true);
}

bool fx_stream_handle_is_mirror(const fx_stream_handle *h)
{
    return atomic_load(&((fx_stream_handle *)h)->mirror);
}

uint64_t fx_stream_handle_mirror_first(const fx_stream_handle *h)
{
    return atomic_load(&((fx_stream_handle *)h)->mirror_first);
}

size_t fx_stream_handle_refs(const fx_stream_handle *h)
{
    return atomic_load(&((fx_stream_handle *)h)->refs);
}
