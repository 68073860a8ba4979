/* fxb_cache_store: the in-memory caches of one broker worker, keyed
 * (tenant, namespace, cache, key), with TTL, a byte bound with CLOCK
 * eviction and a per-tenant byte cap shared across workers. Pure: no
 * locks, no I/O, no clock reads (every call takes |now_us|, the loop's
 * monotonic clock). Owner: the worker loop the caches are placed on (a
 * cache belongs to one worker by the hash of tenant/namespace/cache, like
 * a stream); every function is "Loop thread only." except the tenant
 * account, which any worker's store may charge. docs/cache.md "The store". */
#ifndef FX_BROKER_CACHE_STORE_H
#define FX_BROKER_CACHE_STORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What one entry costs on top of its key and value bytes, in the store's
 * accounting: the entry's header (40 bytes), its share of the index (an
 * 8-byte slot in a table between a quarter and half full as it grows: at
 * most 32), its place in the expiry heap (an 8-byte slot in an array grown
 * by doubling: at most 16, charged whether or not it has a TTL, so an
 * entry's cost never changes) and the allocator's header and rounding
 * (16). A 1 KiB value under a 16-byte key thus counts 1144 bytes. After
 * removals the arrays shrink only under an eighth (table) or a quarter
 * (heap) full, so they may hold up to twice their share until then; the
 * stats report them as allocated (index_bytes). */
#define FXB_CACHE_ENTRY_OVERHEAD 104u

/* Keys are at most this long whatever |max_key_bytes| says (klen is 16 bits). */
#define FXB_CACHE_KEY_MAX 65535u

/* A tenant's account, owned by the caller (the broker keeps one per tenant
 * for the whole process) and shared by every worker's store: the stores
 * charge and release |bytes| with atomics, so |max_bytes| bounds the tenant
 * across workers exactly (a put that would pass it is refused, never
 * evicted for). |max_bytes| 0 = no cap. It must outlive the stores that
 * use it. Any thread. */
typedef struct fxb_cache_tenant {
    _Atomic int64_t bytes;   /* accounted bytes of its entries, all workers */
    _Atomic int64_t entries; /* its entries, all workers */
    _Atomic uint64_t hits;   /* its gets answered with a value, all workers */
    _Atomic uint64_t misses; /* its gets answered null, all workers */
    int64_t max_bytes;       /* set before the first put; 0 = unbounded */
} fxb_cache_tenant;

/* The outcome of a put, get or delete (>= 0; -ENOMEM is returned apart). */
typedef enum fxb_cache_status {
    FXB_CACHE_OK = 0,          /* put stored, delete removed */
    FXB_CACHE_HIT,             /* get found a live entry */
    FXB_CACHE_MISS,            /* get or delete found nothing live */
    FXB_CACHE_EXISTS,          /* if_absent put: a live entry is there */
    FXB_CACHE_VERSION_CHANGED, /* if_version put: no entry, or another version */
    /* refusals by limit (counted in refused[]) */
    FXB_CACHE_KEY_TOO_LONG,      /* key longer than max_key_bytes */
    FXB_CACHE_VALUE_TOO_LARGE,   /* value larger than max_value_bytes */
    FXB_CACHE_LARGER_THAN_STORE, /* entry costs more than the whole max_bytes */
    FXB_CACHE_TENANT_OVER_CAP,   /* the tenant's bytes would pass its cap */
    FXB_CACHE_STATUS_COUNT
} fxb_cache_status;

#define FXB_CACHE_REFUSAL_FIRST FXB_CACHE_KEY_TOO_LONG
#define FXB_CACHE_REFUSALS (FXB_CACHE_STATUS_COUNT - FXB_CACHE_REFUSAL_FIRST)

/* A clear text for |s| ("value too large", "tenant over its cache byte cap"). */
const char *fxb_cache_status_text(fxb_cache_status s);

/* Bounds, given at create (the caller reads the configuration). */
typedef struct fxb_cache_limits {
    uint64_t max_bytes;       /* this store's share of cache_max_bytes; > 0 */
    uint32_t max_value_bytes; /* cache_max_value_bytes; 0 = up to max_bytes */
    uint32_t max_key_bytes;   /* 1..FXB_CACHE_KEY_MAX; 0 = FXB_CACHE_KEY_MAX */
    uint64_t hash_key[2];     /* random per process: keys come from clients */
} fxb_cache_limits;

/* Counters, single writer (the owning loop). */
typedef struct fxb_cache_stats {
    uint64_t entries;     /* live and not yet swept entries */
    uint64_t bytes;       /* their accounted bytes (key + value + overhead) */
    uint64_t index_bytes; /* the index, heap and scope arrays as allocated */
    uint64_t puts;        /* puts stored */
    uint64_t deletes;     /* deletes that removed an entry */
    uint64_t dropped;     /* entries freed with their cache (fxb_cache_scope_clear) */
    uint64_t hits;
    uint64_t misses;
    uint64_t expired_read;                /* expired entries freed by a get, put or delete */
    uint64_t expired_swept;               /* expired entries freed by fxb_cache_sweep */
    uint64_t evictions;                   /* entries evicted to fit the byte bound */
    uint64_t cond_failed;                 /* if_absent / if_version puts and removes not applied */
    uint64_t refused[FXB_CACHE_REFUSALS]; /* by status - FXB_CACHE_REFUSAL_FIRST */
} fxb_cache_stats;

typedef struct fxb_cache_store fxb_cache_store;

/* Creates an empty store in |*pstore|. 0, -EINVAL (max_bytes 0, a key
 * bound over FXB_CACHE_KEY_MAX), -ENOMEM. The caller frees it. */
int fxb_cache_store_new(fxb_cache_store **pstore, const fxb_cache_limits *limits);

/* Frees every entry (releasing their tenants' bytes) and the store. NULL ok. */
void fxb_cache_store_free(fxb_cache_store *s);

/* Caches one store holds at most: the names clients may make are bounded
 * (a request naming one more is refused), and so is the scan that finds
 * one. */
#define FXB_CACHE_MAX_SCOPES 4096u

/* Finds or creates the cache (tenant, ns, cache) (NUL-terminated names)
 * and puts its id in |*pid|; later calls name it by id. |acct| is the
 * tenant's account (NULL: no cap, not counted); a found cache keeps the
 * account it was created with. Ids are stable for the store's life
 * (caches are not removed yet). 0, FX_EFULL (FXB_CACHE_MAX_SCOPES caches
 * already) or -ENOMEM. */
int fxb_cache_scope_open(fxb_cache_store *s, const char *tenant, const char *ns, const char *cache,
                         fxb_cache_tenant *acct, uint32_t *pid);

/* Finds the cache (tenant, ns, cache) without creating it: 0 with its id
 * in |*pid|, or -ENOENT. */
int fxb_cache_scope_find(const fxb_cache_store *s, const char *tenant, const char *ns,
                         const char *cache, uint32_t *pid);

/* Put options. */
typedef struct fxb_cache_put_opts {
    uint64_t ttl_ms; /* 0 = no expiry */
    bool if_absent;  /* store only if no live entry has the key */
    bool if_version; /* store only if the live entry has |version| */
    uint64_t version;
    /* Rebuilding a durable cache: the entry takes this version (read from
     * its log record) instead of the next one, and the cache's counter
     * moves past it. With |restore| and 0, the version is unknown (a
     * version 1 record): fxb_cache_scope_restore_done gives it one. */
    bool restore;
    uint64_t restore_version;
} fxb_cache_put_opts;

/* Stores a copy of |key|/|value| in cache |scope| (|opts| NULL: plain put
 * without TTL), replacing any entry with the key, and puts the new version
 * (the cache's sequence, from 1) in |*pversion| (may be NULL). Evicts
 * (CLOCK) other entries to fit the byte bound. Returns FXB_CACHE_OK, a
 * condition failure (EXISTS, VERSION_CHANGED; counted in cond_failed), a
 * refusal (KEY_TOO_LONG, VALUE_TOO_LARGE, LARGER_THAN_STORE,
 * TENANT_OVER_CAP; counted in refused[]), -EINVAL (no cache |scope|) or
 * -ENOMEM (nothing stored). On a condition failure |*pversion| is the
 * key's current version, 0 when it has no live entry (versions start at 1).
 * An empty key or value is fine; |key|/|value| may be NULL when empty. */
int fxb_cache_put(fxb_cache_store *s, uint32_t scope, const void *key, size_t klen,
                  const void *value, size_t vlen, const fxb_cache_put_opts *opts, uint64_t now_us,
                  uint64_t *pversion);

/* Looks up |key| in cache |scope|. On FXB_CACHE_HIT sets |*pvalue| to the
 * stored bytes (borrowed: valid until the next call on the store), |*pvlen|
 * and |*pversion| (out-params may be NULL). An expired entry is a miss and
 * is freed here (expired_read). Returns FXB_CACHE_HIT or FXB_CACHE_MISS. */
int fxb_cache_get(fxb_cache_store *s, uint32_t scope, const void *key, size_t klen, uint64_t now_us,
                  const void **pvalue, size_t *pvlen, uint64_t *pversion);

/* Removes |key| from cache |scope|: FXB_CACHE_OK if a live entry was
 * removed, FXB_CACHE_MISS otherwise (an expired one is freed and counted). */
int fxb_cache_delete(fxb_cache_store *s, uint32_t scope, const void *key, size_t klen,
                     uint64_t now_us);

/* Remove options. */
typedef struct fxb_cache_remove_opts {
    bool if_version; /* remove only if the live entry has |version| */
    uint64_t version;
} fxb_cache_remove_opts;

/* fxb_cache_delete that hands back what it removed: on FXB_CACHE_OK
 * |*pvalue| / |*pvlen| are the removed value's bytes (borrowed: valid until
 * the next call on the store, which keeps the one entry until then) and
 * |*pversion| its version. With |opts|->if_version, an entry of another
 * version, or none, is left and the result is FXB_CACHE_VERSION_CHANGED
 * (counted in cond_failed) with |*pversion| the current version, 0 when
 * none. Otherwise FXB_CACHE_MISS (|*pversion| 0). Out-params and |opts|
 * may be NULL. */
int fxb_cache_remove(fxb_cache_store *s, uint32_t scope, const void *key, size_t klen,
                     const fxb_cache_remove_opts *opts, uint64_t now_us, const void **pvalue,
                     size_t *pvlen, uint64_t *pversion);

/* Frees every entry of cache |scope| (a cache dropped by the admin API):
 * counted in |dropped| (and |deletes| is not), released from the store,
 * the cache and its tenant. The cache id stays valid (empty) and keeps
 * its version counter, so versions are never reused. Returns how many
 * entries it freed. */
uint64_t fxb_cache_scope_clear(fxb_cache_store *s, uint32_t scope);

/* The last version cache |scope| gave (0: none yet): a durable cache's
 * delete records carry it, so a restart never gives a version again. */
uint64_t fxb_cache_scope_version(const fxb_cache_store *s, uint32_t scope);

/* Ends the rebuild of cache |scope|: its counter moves to at least
 * |floor| (the largest version its log holds), then each of its entries
 * restored with an unknown version (0) gets the next one. Returns how
 * many it numbered. O(entries of the store) when some have none. */
uint64_t fxb_cache_scope_restore_done(fxb_cache_store *s, uint32_t scope, uint64_t floor);

/* Called when the store frees an entry it was not asked to remove: one
 * evicted for the byte bound or expired (a get, put, delete or the sweep
 * found it past its TTL), with its cache, key and |evicted| (false:
 * expired). A durable cache logs a delete for it so its log matches the
 * store. */
typedef void (*fxb_cache_dropped_cb)(void *user, uint32_t scope, const void *key, size_t klen,
                                     bool evicted);
/* Sets (or clears, |cb| NULL) the callback. */
void fxb_cache_store_on_dropped(fxb_cache_store *s, fxb_cache_dropped_cb cb, void *user);

/* The number of caches the store has opened (ids 0..n-1), and cache |id|'s
 * names (borrowed, valid for the store's life); false if no such id. */
uint32_t fxb_cache_scope_count(const fxb_cache_store *s);
bool fxb_cache_scope_names(const fxb_cache_store *s, uint32_t id, const char **ptenant,
                           const char **pns, const char **pcache);

/* Frees up to |budget| entries whose expiry is <= |now_us|, earliest
 * first, without any read (expired_swept). Returns how many it freed. */
size_t fxb_cache_sweep(fxb_cache_store *s, uint64_t now_us, size_t budget);

/* The earliest expiry of any entry (for the caller's timer), or UINT64_MAX
 * when no entry has a TTL. */
uint64_t fxb_cache_next_deadline(const fxb_cache_store *s);

/* The store's key hash: SipHash-2-4 of |n| bytes at |data| under the
 * 128-bit key |k| (k[0] from key bytes 0-7, little-endian). Any thread. */
uint64_t fxb_cache_hash(const uint64_t k[2], const void *data, size_t n);

/* Copies the counters into |*out|. */
void fxb_cache_stats_get(const fxb_cache_store *s, fxb_cache_stats *out);

/* A cache's live-or-unswept entry count and accounted bytes. */
void fxb_cache_scope_usage(const fxb_cache_store *s, uint32_t scope, uint64_t *pentries,
                           uint64_t *pbytes);

#endif
