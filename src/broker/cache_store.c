/* The in-memory caches of one worker (cache_store.h). Owner: the worker
 * loop; no locks, no I/O, no clock reads.
 *
 * Layout. Each entry is one allocation: a 40-byte header, then the key,
 * then the value. An open-addressed table of entry pointers (linear
 * probing, backward-shift deletion, doubled before it passes half full,
 * halved under an eighth) finds an entry by (cache, key); the entry keeps 32 bits of its hash
 * so probes and rehashes compare without touching the key. Entries with a
 * TTL also sit in a min-heap of pointers ordered by expiry (the entry keeps
 * its heap position), which the sweep pops and next_deadline peeks.
 *
 * Eviction is CLOCK over the table's slots: a get sets the entry's
 * reference bit, the hand clears set bits and evicts the first entry whose
 * bit is clear. CLOCK rather than LRU because a hit then writes one byte
 * of the entry it already read instead of relinking a list (no 16 bytes of
 * links per entry, no writes to neighbours on the read path), and the hand
 * needs no structure of its own: it walks the index. */
#include "broker/cache_store.h"
#include "felix/error.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX
#define TABLE_MIN 16u

typedef struct entry {
    uint64_t expires_us; /* 0 = no expiry */
    uint64_t version;
    uint32_t hash;
    uint32_t heap_pos; /* NONE when not in the heap (no TTL) */
    uint32_t scope;
    uint32_t vlen;
    uint16_t klen;
    uint8_t ref; /* CLOCK reference bit */
    uint8_t pad_;
    unsigned char data[]; /* key, then value */
} entry;

_Static_assert(sizeof(entry) == 40, "the documented header size");

typedef struct scope {
    uint64_t hash;
    char *name; /* tenant NUL ns NUL cache NUL */
    size_t name_len;
    fxb_cache_tenant *acct;
    uint64_t next_version;
    uint64_t entries;
    uint64_t bytes;
} scope;

struct fxb_cache_store {
    fxb_cache_limits lim;
    uint32_t max_value; /* effective value bound */
    uint32_t max_key;
    entry **table;
    uint32_t table_cap; /* 0 or a power of two */
    uint32_t count;
    uint32_t hand; /* CLOCK hand: a table position */
    entry **heap;
    uint32_t heap_n, heap_cap;
    scope *scopes;
    uint32_t nscopes, scopes_cap;
    entry *grave; /* the last removed entry, whose value a remove lent out */
    fxb_cache_dropped_cb on_dropped;
    void *dropped_user;
    fxb_cache_stats st;
};

const char *fxb_cache_status_text(fxb_cache_status s)
{
    switch (s) {
    case FXB_CACHE_OK:
        return "ok";
    case FXB_CACHE_HIT:
        return "hit";
    case FXB_CACHE_MISS:
        return "not found";
    case FXB_CACHE_EXISTS:
        return "key exists";
    case FXB_CACHE_VERSION_CHANGED:
        return "version mismatch";
    case FXB_CACHE_KEY_TOO_LONG:
        return "key too long";
    case FXB_CACHE_VALUE_TOO_LARGE:
        return "value too large";
    case FXB_CACHE_LARGER_THAN_STORE:
        return "entry larger than the cache memory bound";
    case FXB_CACHE_TENANT_OVER_CAP:
        return "tenant over its cache byte cap";
    case FXB_CACHE_STATUS_COUNT:
        break;
    }
    return "?";
}

/* ---- hashing ------------------------------------------------------------------ */

static uint64_t load_le(const unsigned char *p, size_t n)
{
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++)
        w |= (uint64_t)p[i] << (8 * i);
    return w;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = ROTL(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = ROTL(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = ROTL(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = ROTL(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = ROTL(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = ROTL(v2, 32);                                                                         \
    } while (0)

/* SipHash-2-4: keys come from clients, and with linear probing a client
 * that could choose colliding keys would make every probe of the cache
 * walk a long chain; a secret key makes that guesswork. */
uint64_t fxb_cache_hash(const uint64_t k[2], const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t v0 = 0x736f6d6570736575ull ^ k[0], v1 = 0x646f72616e646f6dull ^ k[1];
    uint64_t v2 = 0x6c7967656e657261ull ^ k[0], v3 = 0x7465646279746573ull ^ k[1];
    uint64_t b = (uint64_t)n << 56;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t m = load_le(p, 8);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    b |= load_le(p, n);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

static uint32_t key_hash(const fxb_cache_store *s, uint32_t sc, const void *key, size_t klen)
{
    /* The cache id changes the key, so one key in two caches lands apart. */
    const uint64_t k[2] = {s->lim.hash_key[0] ^ ((uint64_t)sc * 0x9e3779b97f4a7c15ull),
                           s->lim.hash_key[1]};
    return (uint32_t)fxb_cache_hash(k, key, klen);
}

static uint64_t cost_of(size_t klen, size_t vlen)
{
    return (uint64_t)klen + (uint64_t)vlen + FXB_CACHE_ENTRY_OVERHEAD;
}

static uint64_t entry_cost(const entry *e)
{
    return cost_of(e->klen, e->vlen);
}

/* ---- tenant accounts (shared across workers) ---------------------------------- */

/* Charges |n| > 0 bytes unless that passes the cap. */
static bool tenant_charge(fxb_cache_tenant *t, int64_t n)
{
    if (t == NULL || n <= 0)
        return true;
    if (t->max_bytes <= 0) {
        atomic_fetch_add_explicit(&t->bytes, n, memory_order_relaxed);
        return true;
    }
    int64_t cur = atomic_load_explicit(&t->bytes, memory_order_relaxed);
    do {
        if (cur + n > t->max_bytes)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&t->bytes, &cur, cur + n, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

static void tenant_add(fxb_cache_tenant *t, int64_t bytes, int64_t entries)
{
    if (t == NULL)
        return;
    if (bytes != 0)
        atomic_fetch_add_explicit(&t->bytes, bytes, memory_order_relaxed);
    if (entries != 0)
        atomic_fetch_add_explicit(&t->entries, entries, memory_order_relaxed);
}

/* ---- expiry heap ---------------------------------------------------------------- */

static void heap_set(fxb_cache_store *s, uint32_t i, entry *e)
{
    s->heap[i] = e;
    e->heap_pos = i;
}

static void heap_up(fxb_cache_store *s, uint32_t i)
{
    entry *e = s->heap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (s->heap[p]->expires_us <= e->expires_us)
            break;
        heap_set(s, i, s->heap[p]);
        i = p;
    }
    heap_set(s, i, e);
}

static void heap_down(fxb_cache_store *s, uint32_t i)
{
    entry *e = s->heap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= s->heap_n)
            break;
        if (c + 1 < s->heap_n && s->heap[c + 1]->expires_us < s->heap[c]->expires_us)
            c++;
        if (s->heap[c]->expires_us >= e->expires_us)
            break;
        heap_set(s, i, s->heap[c]);
        i = c;
    }
    heap_set(s, i, e);
}

/* The heap has room (heap_reserve). */
static void heap_push(fxb_cache_store *s, entry *e)
{
    assert(s->heap_n < s->heap_cap);
    heap_set(s, s->heap_n++, e);
    heap_up(s, s->heap_n - 1);
}

static void heap_remove(fxb_cache_store *s, entry *e)
{
    uint32_t i = e->heap_pos;
    assert(i < s->heap_n && s->heap[i] == e);
    e->heap_pos = NONE;
    entry *last = s->heap[--s->heap_n];
    if (i == s->heap_n)
        return;
    heap_set(s, i, last);
    heap_up(s, i);
    heap_down(s, last->heap_pos);
}

static int heap_reserve(fxb_cache_store *s, uint32_t need)
{
    if (need <= s->heap_cap)
        return 0;
    if (s->heap_cap >= UINT32_MAX / 2)
        return -ENOMEM;
    uint32_t cap = s->heap_cap ? s->heap_cap * 2 : TABLE_MIN;
    while (cap < need)
        cap *= 2;
    entry **h = realloc(s->heap, (size_t)cap * sizeof(*h));
    if (h == NULL)
        return -ENOMEM;
    s->heap = h;
    s->heap_cap = cap;
    return 0;
}

/* ---- index ---------------------------------------------------------------------- */

static bool entry_is(const entry *e, uint32_t h, uint32_t sc, const void *key, size_t klen)
{
    return e->hash == h && e->scope == sc && e->klen == klen &&
           (klen == 0 || memcmp(e->data, key, klen) == 0);
}

static uint32_t find_pos(const fxb_cache_store *s, uint32_t h, uint32_t sc, const void *key,
                         size_t klen)
{
    if (s->table_cap == 0)
        return NONE;
    uint32_t mask = s->table_cap - 1;
    for (uint32_t i = h & mask;; i = (i + 1) & mask) {
        if (s->table[i] == NULL)
            return NONE;
        if (entry_is(s->table[i], h, sc, key, klen))
            return i;
    }
}

static uint32_t pos_of(const fxb_cache_store *s, const entry *e)
{
    uint32_t mask = s->table_cap - 1;
    for (uint32_t i = e->hash & mask;; i = (i + 1) & mask) {
        assert(s->table[i] != NULL);
        if (s->table[i] == e)
            return i;
    }
}

static void table_put(fxb_cache_store *s, entry *e)
{
    uint32_t mask = s->table_cap - 1;
    uint32_t i = e->hash & mask;
    while (s->table[i] != NULL)
        i = (i + 1) & mask;
    s->table[i] = e;
    s->count++;
}

/* Backward-shift deletion: later entries of the probe chain move into the
 * hole unless their home lies cyclically in (hole, their slot]. */
static void table_del(fxb_cache_store *s, uint32_t hole)
{
    uint32_t mask = s->table_cap - 1;
    for (uint32_t j = (hole + 1) & mask; s->table[j] != NULL; j = (j + 1) & mask) {
        uint32_t h = s->table[j]->hash & mask;
        if (((j - h) & mask) >= ((j - hole) & mask)) {
            s->table[hole] = s->table[j];
            hole = j;
        }
    }
    s->table[hole] = NULL;
    s->count--;
}

/* Moves every entry into a table of |cap| slots. 0 or -ENOMEM (unchanged). */
static int rehash(fxb_cache_store *s, uint32_t cap)
{
    entry **t = calloc(cap, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    entry **old = s->table;
    uint32_t old_cap = s->table_cap;
    s->table = t;
    s->table_cap = cap;
    s->count = 0;
    for (uint32_t i = 0; i < old_cap; i++)
        if (old[i] != NULL)
            table_put(s, old[i]);
    free(old);
    s->hand &= cap - 1;
    return 0;
}

/* Room for |need| entries at most half full. 0 or -ENOMEM (unchanged). */
static int table_reserve(fxb_cache_store *s, uint32_t need)
{
    if (need <= s->table_cap / 2)
        return 0;
    if (need > UINT32_MAX / 4)
        return -ENOMEM;
    uint32_t cap = s->table_cap ? s->table_cap : TABLE_MIN;
    while (need > cap / 2)
        cap *= 2;
    return rehash(s, cap);
}

/* After a removal: the table is halved under an eighth full and the heap
 * under a quarter, so memory follows the live entries after a burst (the
 * gaps to the growth points keep churn at one size from resizing). A
 * failed allocation keeps the larger array, which is still correct. Either
 * keeps room for one more entry, which a put reserved before it dropped an
 * old or expired entry. */
static void shrink(fxb_cache_store *s)
{
    if (s->table_cap > TABLE_MIN && s->count < s->table_cap / 8)
        (void)rehash(s, s->table_cap / 2);
    if (s->heap_cap > TABLE_MIN && s->heap_n < s->heap_cap / 4) {
        entry **h = realloc(s->heap, (size_t)(s->heap_cap / 2) * sizeof(*h));
        if (h != NULL) {
            s->heap = h;
            s->heap_cap /= 2;
        }
    }
}

/* ---- entries ---------------------------------------------------------------------- */

enum why { WHY_DELETE, WHY_REPLACE, WHY_EXPIRED_READ, WHY_EXPIRED_SWEPT, WHY_EVICTED, WHY_DROPPED };

/* Frees the entry a remove lent out: its value was valid until this call. */
static void bury(fxb_cache_store *s)
{
    free(s->grave);
    s->grave = NULL;
}

/* Unlinks the entry at table position |pos|, releases its bytes (store,
 * cache, tenant but for WHY_REPLACE) and counts it by |why|; the caller
 * frees it. */
static entry *unlink_at(fxb_cache_store *s, uint32_t pos, enum why why)
{
    entry *e = s->table[pos];
    table_del(s, pos);
    if (e->heap_pos != NONE)
        heap_remove(s, e);
    uint64_t c = entry_cost(e);
    scope *sc = &s->scopes[e->scope];
    sc->entries--;
    sc->bytes -= c;
    s->st.entries--;
    s->st.bytes -= c;
    /* A replaced entry's bytes stay charged: the put charged only the
     * difference, and releasing them for a moment would let another
     * worker's put pass the tenant's cap. */
    tenant_add(sc->acct, why == WHY_REPLACE ? 0 : -(int64_t)c, -1);
    switch (why) {
    case WHY_DELETE:
        s->st.deletes++;
        break;
    case WHY_EXPIRED_READ:
        s->st.expired_read++;
        break;
    case WHY_EXPIRED_SWEPT:
        s->st.expired_swept++;
        break;
    case WHY_EVICTED:
        s->st.evictions++;
        break;
    case WHY_DROPPED:
        s->st.dropped++;
        break;
    case WHY_REPLACE:
        break;
    }
    /* Freed without being asked: a durable cache logs a delete for it. */
    if (s->on_dropped != NULL &&
        (why == WHY_EXPIRED_READ || why == WHY_EXPIRED_SWEPT || why == WHY_EVICTED))
        s->on_dropped(s->dropped_user, e->scope, e->data, e->klen, why == WHY_EVICTED);
    return e;
}

/* unlink_at, then frees the entry. */
static void drop_at(fxb_cache_store *s, uint32_t pos, enum why why)
{
    free(unlink_at(s, pos, why));
    shrink(s);
}

static bool expired(const entry *e, uint64_t now_us)
{
    return e->expires_us != 0 && now_us >= e->expires_us;
}

/* The live entry's position, or NONE; an expired one is dropped on the spot. */
static uint32_t find_live(fxb_cache_store *s, uint32_t h, uint32_t sc, const void *key, size_t klen,
                          uint64_t now_us)
{
    uint32_t pos = find_pos(s, h, sc, key, klen);
    if (pos != NONE && expired(s->table[pos], now_us)) {
        drop_at(s, pos, WHY_EXPIRED_READ);
        pos = NONE;
    }
    return pos;
}

/* Evicts one entry by CLOCK. The table is not empty. */
static void evict_one(fxb_cache_store *s)
{
    assert(s->count > 0);
    uint32_t mask = s->table_cap - 1;
    for (;;) {
        entry *e = s->table[s->hand];
        if (e != NULL) {
            if (!e->ref) {
                /* The hand stays: the next entry of the chain may shift in. */
                drop_at(s, s->hand, WHY_EVICTED);
                return;
            }
            e->ref = 0;
        }
        s->hand = (s->hand + 1) & mask;
    }
}

/* ---- API ---------------------------------------------------------------------------- */

int fxb_cache_store_new(fxb_cache_store **pstore, const fxb_cache_limits *limits)
{
    *pstore = NULL;
    if (limits == NULL || limits->max_bytes == 0 || limits->max_key_bytes > FXB_CACHE_KEY_MAX)
        return -EINVAL;
    fxb_cache_store *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->lim = *limits;
    s->max_key = limits->max_key_bytes ? limits->max_key_bytes : FXB_CACHE_KEY_MAX;
    uint64_t mv = limits->max_value_bytes ? limits->max_value_bytes : limits->max_bytes;
    s->max_value = mv > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)mv;
    *pstore = s;
    return 0;
}

void fxb_cache_store_free(fxb_cache_store *s)
{
    if (s == NULL)
        return;
    bury(s);
    for (uint32_t i = 0; i < s->table_cap; i++) {
        entry *e = s->table[i];
        if (e == NULL)
            continue;
        tenant_add(s->scopes[e->scope].acct, -(int64_t)entry_cost(e), -1);
        free(e);
    }
    for (uint32_t i = 0; i < s->nscopes; i++)
        free(s->scopes[i].name);
    free(s->scopes);
    free(s->table);
    free(s->heap);
    free(s);
}

int fxb_cache_scope_find(const fxb_cache_store *s, const char *tenant, const char *ns,
                         const char *cache, uint32_t *pid)
{
    for (uint32_t i = 0; i < s->nscopes; i++) {
        const char *t, *n, *c;
        (void)fxb_cache_scope_names(s, i, &t, &n, &c);
        if (!strcmp(t, tenant) && !strcmp(n, ns) && !strcmp(c, cache)) {
            *pid = i;
            return 0;
        }
    }
    return -ENOENT;
}

int fxb_cache_scope_open(fxb_cache_store *s, const char *tenant, const char *ns, const char *cache,
                         fxb_cache_tenant *acct, uint32_t *pid)
{
    size_t tl = strlen(tenant), nl = strlen(ns), cl = strlen(cache);
    size_t len = tl + nl + cl + 3;
    char *name = malloc(len);
    if (name == NULL)
        return -ENOMEM;
    memcpy(name, tenant, tl + 1);
    memcpy(name + tl + 1, ns, nl + 1);
    memcpy(name + tl + nl + 2, cache, cl + 1);
    uint64_t h = fxb_cache_hash(s->lim.hash_key, name, len);
    /* Caches per worker are few next to entries, and a request names its
     * cache once: a scan comparing hashes first is enough for now. */
    for (uint32_t i = 0; i < s->nscopes; i++) {
        scope *sc = &s->scopes[i];
        if (sc->hash == h && sc->name_len == len && memcmp(sc->name, name, len) == 0) {
            free(name);
            *pid = i;
            return 0;
        }
    }
    if (s->nscopes >= FXB_CACHE_MAX_SCOPES) {
        free(name);
        return FX_EFULL;
    }
    if (s->nscopes == s->scopes_cap) {
        uint32_t cap = s->scopes_cap ? s->scopes_cap * 2 : 4;
        scope *a = cap > s->scopes_cap ? realloc(s->scopes, (size_t)cap * sizeof(*a)) : NULL;
        if (a == NULL) {
            free(name);
            return -ENOMEM;
        }
        s->scopes = a;
        s->scopes_cap = cap;
    }
    s->scopes[s->nscopes] = (scope){.hash = h, .name = name, .name_len = len, .acct = acct};
    *pid = s->nscopes++;
    return 0;
}

int fxb_cache_put(fxb_cache_store *s, uint32_t sc, const void *key, size_t klen, const void *value,
                  size_t vlen, const fxb_cache_put_opts *opts, uint64_t now_us, uint64_t *pversion)
{
    static const fxb_cache_put_opts plain = {0};
    if (opts == NULL)
        opts = &plain;
    bury(s);
    if (sc >= s->nscopes)
        return -EINVAL;
    fxb_cache_status refuse = FXB_CACHE_OK;
    uint64_t cost = cost_of(klen > FXB_CACHE_KEY_MAX ? 0 : klen, vlen > s->max_value ? 0 : vlen);
    if (klen > s->max_key)
        refuse = FXB_CACHE_KEY_TOO_LONG;
    else if (vlen > s->max_value)
        refuse = FXB_CACHE_VALUE_TOO_LARGE;
    else if (cost > s->lim.max_bytes)
        refuse = FXB_CACHE_LARGER_THAN_STORE;
    if (refuse != FXB_CACHE_OK) {
        s->st.refused[refuse - FXB_CACHE_REFUSAL_FIRST]++;
        return (int)refuse;
    }
    /* Room first, so -ENOMEM leaves everything as it was. */
    if (table_reserve(s, s->count + 1) != 0 ||
        (opts->ttl_ms != 0 && heap_reserve(s, s->heap_n + 1) != 0))
        return -ENOMEM;

    uint32_t h = key_hash(s, sc, key, klen);
    uint32_t pos = find_live(s, h, sc, key, klen, now_us);
    entry *old = pos == NONE ? NULL : s->table[pos];
    if ((opts->if_absent && old != NULL) ||
        (opts->if_version && (old == NULL || old->version != opts->version))) {
        s->st.cond_failed++;
        if (pversion)
            *pversion = old != NULL ? old->version : 0;
        return old != NULL && opts->if_absent ? FXB_CACHE_EXISTS : FXB_CACHE_VERSION_CHANGED;
    }
    scope *scp = &s->scopes[sc];
    int64_t old_cost = old ? (int64_t)entry_cost(old) : 0;
    int64_t grow = (int64_t)cost - old_cost;
    if (grow > 0 && !tenant_charge(scp->acct, grow)) {
        s->st.refused[FXB_CACHE_TENANT_OVER_CAP - FXB_CACHE_REFUSAL_FIRST]++;
        return FXB_CACHE_TENANT_OVER_CAP;
    }
    entry *e = malloc(sizeof(*e) + klen + vlen);
    if (e == NULL) {
        tenant_add(scp->acct, grow > 0 ? -grow : 0, 0);
        return -ENOMEM;
    }
    uint64_t exp = 0;
    if (opts->ttl_ms != 0) {
        uint64_t d = opts->ttl_ms > UINT64_MAX / 1000 ? UINT64_MAX : opts->ttl_ms * 1000;
        exp = d > UINT64_MAX - now_us ? UINT64_MAX : now_us + d;
    }
    uint64_t version;
    if (opts->restore) {
        version = opts->restore_version; /* 0: numbered by fxb_cache_scope_restore_done */
        if (version > scp->next_version)
            scp->next_version = version;
    } else {
        version = ++scp->next_version;
    }
    *e = (entry){.expires_us = exp,
                 .version = version,
                 .hash = h,
                 .heap_pos = NONE,
                 .scope = sc,
                 .vlen = (uint32_t)vlen,
                 .klen = (uint16_t)klen,
                 .ref = old ? old->ref : 0};
    if (klen)
        memcpy(e->data, key, klen);
    if (vlen)
        memcpy(e->data + klen, value, vlen);
    if (old != NULL) {
        drop_at(s, pos, WHY_REPLACE);
        if (grow < 0)
            tenant_add(scp->acct, grow, 0);
    }
    while (s->st.bytes + cost > s->lim.max_bytes)
        evict_one(s);
    table_put(s, e);
    if (exp != 0)
        heap_push(s, e);
    scp->entries++;
    scp->bytes += cost;
    s->st.entries++;
    s->st.bytes += cost;
    s->st.puts++;
    tenant_add(scp->acct, 0, 1);
    if (pversion)
        *pversion = e->version;
    return FXB_CACHE_OK;
}

int fxb_cache_get(fxb_cache_store *s, uint32_t sc, const void *key, size_t klen, uint64_t now_us,
                  const void **pvalue, size_t *pvlen, uint64_t *pversion)
{
    uint32_t pos = NONE;
    bury(s);
    if (sc < s->nscopes && klen <= FXB_CACHE_KEY_MAX)
        pos = find_live(s, key_hash(s, sc, key, klen), sc, key, klen, now_us);
    fxb_cache_tenant *acct = sc < s->nscopes ? s->scopes[sc].acct : NULL;
    if (pos == NONE) {
        s->st.misses++;
        if (acct != NULL)
            atomic_fetch_add_explicit(&acct->misses, 1, memory_order_relaxed);
        return FXB_CACHE_MISS;
    }
    entry *e = s->table[pos];
    e->ref = 1;
    s->st.hits++;
    if (acct != NULL)
        atomic_fetch_add_explicit(&acct->hits, 1, memory_order_relaxed);
    if (pvalue)
        *pvalue = e->data + e->klen;
    if (pvlen)
        *pvlen = e->vlen;
    if (pversion)
        *pversion = e->version;
    return FXB_CACHE_HIT;
}

int fxb_cache_delete(fxb_cache_store *s, uint32_t sc, const void *key, size_t klen, uint64_t now_us)
{
    return fxb_cache_remove(s, sc, key, klen, NULL, now_us, NULL, NULL, NULL);
}

int fxb_cache_remove(fxb_cache_store *s, uint32_t sc, const void *key, size_t klen,
                     const fxb_cache_remove_opts *opts, uint64_t now_us, const void **pvalue,
                     size_t *pvlen, uint64_t *pversion)
{
    uint32_t pos = NONE;
    bury(s);
    if (sc < s->nscopes && klen <= FXB_CACHE_KEY_MAX)
        pos = find_live(s, key_hash(s, sc, key, klen), sc, key, klen, now_us);
    entry *e = pos == NONE ? NULL : s->table[pos];
    if (opts != NULL && opts->if_version && (e == NULL || e->version != opts->version)) {
        s->st.cond_failed++;
        if (pversion)
            *pversion = e != NULL ? e->version : 0;
        return FXB_CACHE_VERSION_CHANGED;
    }
    if (e == NULL) {
        if (pversion)
            *pversion = 0;
        return FXB_CACHE_MISS;
    }
    s->grave = unlink_at(s, pos, WHY_DELETE);
    shrink(s);
    if (pvalue)
        *pvalue = e->data + e->klen;
    if (pvlen)
        *pvlen = e->vlen;
    if (pversion)
        *pversion = e->version;
    return FXB_CACHE_OK;
}

uint64_t fxb_cache_scope_clear(fxb_cache_store *s, uint32_t sc)
{
    bury(s);
    if (sc >= s->nscopes || s->scopes[sc].entries == 0)
        return 0;
    uint64_t n = 0;
    /* Backward-shift deletion may move a later entry into the slot just
     * emptied, so a slot is looked at again until it holds another cache's
     * entry or nothing; an entry shifted from past the end into an earlier
     * slot is caught by a second pass. */
    for (int pass = 0; pass < 2 && s->scopes[sc].entries > 0; pass++) {
        for (uint32_t i = 0; i < s->table_cap;) {
            entry *e = s->table[i];
            if (e != NULL && e->scope == sc) {
                free(unlink_at(s, i, WHY_DROPPED));
                n++;
            } else {
                i++;
            }
        }
    }
    shrink(s);
    return n;
}

uint32_t fxb_cache_scope_count(const fxb_cache_store *s)
{
    return s->nscopes;
}

bool fxb_cache_scope_names(const fxb_cache_store *s, uint32_t id, const char **ptenant,
                           const char **pns, const char **pcache)
{
    if (id >= s->nscopes)
        return false;
    const char *t = s->scopes[id].name;
    const char *n = t + strlen(t) + 1;
    *ptenant = t;
    *pns = n;
    *pcache = n + strlen(n) + 1;
    return true;
}

uint64_t fxb_cache_scope_version(const fxb_cache_store *s, uint32_t sc)
{
    return sc < s->nscopes ? s->scopes[sc].next_version : 0;
}

uint64_t fxb_cache_scope_restore_done(fxb_cache_store *s, uint32_t sc, uint64_t floor)
{
    if (sc >= s->nscopes)
        return 0;
    scope *scp = &s->scopes[sc];
    if (floor > scp->next_version)
        scp->next_version = floor;
    uint64_t n = 0;
    for (uint32_t i = 0; i < s->table_cap; i++) {
        entry *e = s->table[i];
        if (e != NULL && e->scope == sc && e->version == 0) {
            e->version = ++scp->next_version;
            n++;
        }
    }
    return n;
}

void fxb_cache_store_on_dropped(fxb_cache_store *s, fxb_cache_dropped_cb cb, void *user)
{
    s->on_dropped = cb;
    s->dropped_user = user;
}

size_t fxb_cache_sweep(fxb_cache_store *s, uint64_t now_us, size_t budget)
{
    size_t n = 0;
    bury(s);
    while (n < budget && s->heap_n > 0 && s->heap[0]->expires_us <= now_us) {
        drop_at(s, pos_of(s, s->heap[0]), WHY_EXPIRED_SWEPT);
        n++;
    }
    return n;
}

uint64_t fxb_cache_next_deadline(const fxb_cache_store *s)
{
    return s->heap_n > 0 ? s->heap[0]->expires_us : UINT64_MAX;
}

void fxb_cache_stats_get(const fxb_cache_store *s, fxb_cache_stats *out)
{
    *out = s->st;
    out->index_bytes = (uint64_t)s->table_cap * sizeof(entry *) +
                       (uint64_t)s->heap_cap * sizeof(entry *) +
                       (uint64_t)s->scopes_cap * sizeof(scope);
}

void fxb_cache_scope_usage(const fxb_cache_store *s, uint32_t sc, uint64_t *pentries,
                           uint64_t *pbytes)
{
    const scope *p = sc < s->nscopes ? &s->scopes[sc] : NULL;
    if (pentries)
        *pentries = p ? p->entries : 0;
    if (pbytes)
        *pbytes = p ? p->bytes : 0;
}
