/* Compaction of a durable cache's log (cache_compact.h). The index maps
 * every key whose newest record is a put to that record; a delete removes
 * the key, so a record is live exactly when the index points at it. Only a
 * prefix of the log is ever deleted, so any record older than a dropped
 * delete or expired put of its key went with it. Storage thread. */
#include "broker/cache_compact.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/log.h"
#include "broker/cache_dur.h"
#include "broker/cache_store.h"
#include "storage/format.h"

/* The newest put of one key. */
typedef struct kent {
    struct kent *next;
    uint64_t off;
    uint64_t expires_ms; /* 0: never */
    uint64_t h;
    uint32_t bytes; /* the record's, header included */
    uint32_t klen;
    uint8_t key[];
} kent;

struct fxb_ccomp {
    kent **tab;
    size_t cap; /* 0 or a power of two */
    size_t n;
    size_t key_bytes;
    uint64_t live;
    uint64_t hk[2];
    uint64_t max_version, max_off; /* the largest version, and the newest record carrying it */
    bool broken;
    /* The compaction under way: records [cursor, target) are read. */
    bool running;
    uint64_t cursor, target;
    /* The segments when fxb_ccomp_begin last said no: not asked again until they change. */
    size_t no_nsegs;
    uint64_t no_first, no_next;
    fx_dlog_page pg;
    fx_dlog_iov *iov;
    size_t iov_cap;
    fxb_ccomp_stats st;
};

#define PAGE_RECORDS 1024u

int fxb_ccomp_new(fxb_ccomp **pc)
{
    fxb_ccomp *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    /* Keys come from clients: a keyed hash, so no one can aim at a chain. */
    if (getrandom(c->hk, sizeof(c->hk), 0) != (ssize_t)sizeof(c->hk)) {
        /* Not fatal: only the spread of hostile keys depends on it. */
        FX_LOG_WARN("storage", "cache compaction: getrandom failed (%s); the index's hash key "
                    "is fixed", strerror(errno));
        c->hk[0] = 0x736f6d6570736575ull;
        c->hk[1] = 0x646f72616e646f6dull;
    }
    fx_dlog_page_init(&c->pg);
    *pc = c;
    return 0;
}

void fxb_ccomp_free(fxb_ccomp *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->cap; i++) {
        for (kent *e = c->tab[i], *next; e != NULL; e = next) {
            next = e->next;
            free(e);
        }
    }
    free(c->tab);
    free(c->iov);
    fx_dlog_page_deinit(&c->pg);
    free(c);
}

static kent **find(fxb_ccomp *c, uint64_t h, const uint8_t *key, uint32_t klen)
{
    kent **pp = &c->tab[h & (c->cap - 1)];
    for (; *pp != NULL; pp = &(*pp)->next)
        if ((*pp)->h == h && (*pp)->klen == klen && memcmp((*pp)->key, key, klen) == 0)
            return pp;
    return pp;
}

static int grow(fxb_ccomp *c)
{
    size_t cap = c->cap ? 2 * c->cap : 64;
    kent **tab = calloc(cap, sizeof(*tab));
    if (tab == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < c->cap; i++) {
        for (kent *e = c->tab[i], *next; e != NULL; e = next) {
            next = e->next;
            e->next = tab[e->h & (cap - 1)];
            tab[e->h & (cap - 1)] = e;
        }
    }
    free(c->tab);
    c->tab = tab;
    c->cap = cap;
    return 0;
}

static void unlink_ent(fxb_ccomp *c, kent **pp)
{
    kent *e = *pp;
    *pp = e->next;
    c->live -= e->bytes;
    c->key_bytes -= e->klen;
    c->n--;
    free(e);
}

int fxb_ccomp_note(fxb_ccomp *c, uint64_t off, const uint8_t *p, size_t n)
{
    fxb_dcache_rec r;
    if (fxb_dcache_rec_decode(p, n, &r) != 0)
        return 0; /* not a cache record: never dropped (fxb_ccomp_step keeps it) */
    if (r.version != 0 && r.version >= c->max_version) {
        c->max_version = r.version;
        c->max_off = off;
    }
    if (c->broken)
        return -ENOMEM;
    if (c->cap == 0 && grow(c) != 0)
        goto err_broken;
    uint64_t h = fxb_cache_hash(c->hk, r.key, r.klen);
    kent **pp = find(c, h, r.key, r.klen);
    if (*pp != NULL)
        unlink_ent(c, pp);
    if (r.op != FXB_DCACHE_OP_PUT)
        return 0;
    if (n + FX_REC_HEADER_LEN > UINT32_MAX)
        goto err_broken; /* the log refuses such a record: never here */
    if (c->n >= c->cap && grow(c) != 0)
        goto err_broken;
    kent *e = malloc(sizeof(*e) + r.klen);
    if (e == NULL)
        goto err_broken;
    *e = (kent){.off = off,
                .expires_ms = r.expires_ms,
                .h = h,
                .bytes = (uint32_t)(n + FX_REC_HEADER_LEN),
                .klen = r.klen};
    memcpy(e->key, r.key, r.klen);
    pp = &c->tab[h & (c->cap - 1)];
    e->next = *pp;
    *pp = e;
    c->n++;
    c->key_bytes += r.klen;
    c->live += e->bytes;
    return 0;

err_broken:
    /* A key the index lost would look dead: no compaction from now on. */
    c->broken = true;
    c->running = false;
    return -ENOMEM;
}

void fxb_ccomp_disable(fxb_ccomp *c)
{
    c->broken = true;
    c->running = false;
}

uint64_t fxb_ccomp_max_version(const fxb_ccomp *c)
{
    return c->max_version;
}

uint64_t fxb_ccomp_live_bytes(const fxb_ccomp *c)
{
    return c->live;
}

bool fxb_ccomp_is_broken(const fxb_ccomp *c)
{
    return c->broken;
}

bool fxb_ccomp_running(const fxb_ccomp *c)
{
    return c->running;
}

void fxb_ccomp_stats_get(const fxb_ccomp *c, fxb_ccomp_stats *out)
{
    *out = c->st;
}

/* The index of the segment holding offset |off| among |n| segments whose
 * first offsets are |base| (ascending), or n when past them all. */
static size_t seg_of(const uint64_t *base, const uint64_t *next, size_t n, uint64_t off)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (next[mid] <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && base[lo] <= off ? lo : n;
}

bool fxb_ccomp_begin(fxb_ccomp *c, const fx_dlog *log)
{
    if (c->running)
        return true;
    size_t nsegs = fx_dlog_segment_count(log);
    if (c->broken || nsegs < 2)
        return false;
    uint64_t total = fx_dlog_bytes_on_disk(log);
    uint64_t live = c->live < total ? c->live : total;
    if ((total - live) * 2 <= total)
        return false;
    uint64_t first = fx_dlog_first_offset(log), next = 0;
    (void)fx_dlog_segment_at(log, nsegs - 2, NULL, &next, NULL);
    if (nsegs == c->no_nsegs && first == c->no_first && next == c->no_next)
        return false; /* the sealed segments are the ones found not worth it */
    size_t ns = nsegs - 1; /* the sealed ones */
    uint64_t *base = malloc(ns * sizeof(*base)), *end = malloc(ns * sizeof(*end));
    uint64_t *bytes = malloc(ns * sizeof(*bytes)), *lb = calloc(ns, sizeof(*lb));
    bool go = false;
    if (base == NULL || end == NULL || bytes == NULL || lb == NULL)
        goto out; /* checked again at the next write */
    for (size_t i = 0; i < ns; i++)
        (void)fx_dlog_segment_at(log, i, &base[i], &end[i], &bytes[i]);
    for (size_t i = 0; i < c->cap; i++)
        for (const kent *e = c->tab[i]; e != NULL; e = e->next) {
            size_t k = seg_of(base, end, ns, e->off);
            if (k < ns)
                lb[k] += e->bytes;
        }
    /* The longest prefix at least half dead: copying its live bytes frees
     * at least as many. */
    uint64_t cum = 0, cum_live = 0;
    size_t best = ns;
    for (size_t i = 0; i < ns; i++) {
        cum += bytes[i];
        cum_live += lb[i] < bytes[i] ? lb[i] : bytes[i];
        if (cum > cum_live && (cum - cum_live) * 2 >= cum)
            best = i;
    }
    if (best == ns) {
        c->no_nsegs = nsegs;
        c->no_first = first;
        c->no_next = next;
        goto out;
    }
    c->running = true;
    c->cursor = first;
    c->target = end[best];
    go = true;
out:
    free(base);
    free(end);
    free(bytes);
    free(lb);
    return go;
}

/* Whether record |p| (|n| bytes) at |off| is copied: the newest put of its
 * key (if expired, its key leaves the index instead), the record holding
 * the largest version, or not a cache record at all. */
static bool keep(fxb_ccomp *c, uint64_t off, const uint8_t *p, size_t n, uint64_t wall_ms)
{
    fxb_dcache_rec r;
    if (fxb_dcache_rec_decode(p, n, &r) != 0)
        return true;
    if (c->max_version != 0 && off == c->max_off)
        return true;
    if (r.op != FXB_DCACHE_OP_PUT)
        return false;
    uint64_t h = fxb_cache_hash(c->hk, r.key, r.klen);
    kent **pp = find(c, h, r.key, r.klen);
    if (*pp == NULL || (*pp)->off != off)
        return false; /* a later record of the key supersedes it */
    if ((*pp)->expires_ms != 0 && (*pp)->expires_ms <= wall_ms) {
        unlink_ent(c, pp); /* the key reads absent: it goes with its segment */
        return false;
    }
    return true;
}

int fxb_ccomp_step(fxb_ccomp *c, fx_dlog *log, uint64_t wall_ms, uint64_t now_us, size_t budget,
                   size_t *pread)
{
    *pread = 0;
    if (!c->running)
        return 0;
    uint64_t first = fx_dlog_first_offset(log), head_end = 0;
    if (c->cursor < first)
        c->cursor = first;
    (void)fx_dlog_segment_at(log, 0, NULL, &head_end, NULL);
    if (fx_dlog_segment_count(log) < 2 || c->cursor >= c->target) {
        c->running = false;
        return 0;
    }
    int rv = fx_dlog_read(log, c->cursor, budget, PAGE_RECORDS, &c->pg);
    if (rv != 0) {
        c->running = false;
        return rv;
    }
    if (c->iov_cap < c->pg.n) {
        fx_dlog_iov *iov = realloc(c->iov, c->pg.n * sizeof(*iov));
        if (iov == NULL) {
            c->running = false;
            return -ENOMEM;
        }
        c->iov = iov;
        c->iov_cap = c->pg.n;
    }
    size_t nk = 0, read = 0;
    uint64_t copied = 0;
    for (size_t i = 0; i < c->pg.n && c->pg.recs[i].offset < head_end; i++) {
        const fx_dlog_record *rec = &c->pg.recs[i];
        read += rec->len + FX_REC_HEADER_LEN;
        c->cursor = rec->offset + 1;
        if (keep(c, rec->offset, rec->data, rec->len, wall_ms)) {
            c->iov[nk++] = (fx_dlog_iov){rec->data, rec->len};
            copied += rec->len + FX_REC_HEADER_LEN;
        }
    }
    *pread = read;
    if (c->pg.n == 0)
        c->cursor = head_end; /* nothing left of the head to read */
    if (nk > 0) {
        uint64_t at = 0;
        rv = fx_dlog_append(log, c->iov, nk, now_us, &at);
        if (rv != 0) {
            c->running = false;
            return rv;
        }
        for (size_t i = 0; i < nk; i++)
            (void)fxb_ccomp_note(c, at + i, c->iov[i].data, c->iov[i].len); /* -ENOMEM: broken */
        c->st.copied += copied;
    }
    if (c->cursor < head_end && !c->broken)
        return 0;
    /* The head segment is read whole (or the index broke: what was copied
     * is only duplicates, nothing more is deleted): the copies are flushed
     * before the segment goes, so a crash leaves one or the other. */
    rv = fx_dlog_sync(log, NULL);
    fx_dlog_retained r = {0};
    if (rv == 0 && !c->broken)
        rv = fx_dlog_retain_below(log, c->cursor, now_us, &r);
    c->st.reclaimed += r.bytes;
    if (rv != 0 || c->broken || c->cursor >= c->target) {
        c->running = false;
        if (rv == 0 && !c->broken)
            c->st.runs++;
    }
    return rv;
}
