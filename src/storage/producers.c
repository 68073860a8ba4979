/* The producer table (producers.h): a hash of producers by id, chained, and
 * a list of them ordered by their newest batch (appends come in offset
 * order, so moving a producer to the tail at each note keeps the list
 * sorted; the head is the one the bound forgets). Each producer keeps a
 * ring of its last 64 batches with contiguous sequences. Also the two
 * files: the `producers` snapshot ("FLPS", the original's layout) and
 * `producers.retired` ("FLPR", ours). Owner: the stream's storage thread. */
#include "storage/producers.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "felix/error.h"
#include "storage/format.h"

typedef struct prod {
    uint64_t id;
    struct prod *hnext;
    struct prod *prev, *next; /* list by newest batch, oldest first */
    uint16_t n;               /* batches in the ring */
    uint16_t head;            /* index of the oldest */
    fx_prod_batch win[FX_PRODUCERS_WINDOW];
} prod;

typedef struct retired {
    uint64_t id;
    uint64_t last_sequence;
    uint64_t at_us;
} retired;

struct fx_producers {
    prod **buckets;
    size_t nbuckets; /* a power of two */
    size_t count;
    size_t max;
    uint64_t ttl_us;
    prod *oldest, *newest;
    retired *ret;
    size_t nret, ret_cap;
    fx_producers_stats st;
};

static size_t slot(const fx_producers *t, uint64_t id)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (t->nbuckets - 1);
}

int fx_producers_new(fx_producers **ptab, size_t max_producers, uint64_t ttl_s)
{
    fx_producers *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    t->max = max_producers > 0 ? max_producers : FX_PRODUCERS_DEFAULT_MAX;
    t->ttl_us = ttl_s * 1000000ull;
    t->nbuckets = 16;
    while (t->nbuckets < 2 * t->max && t->nbuckets < (1u << 24))
        t->nbuckets <<= 1;
    t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
    if (t->buckets == NULL) {
        free(t);
        return -ENOMEM;
    }
    *ptab = t;
    return 0;
}

void fx_producers_clear(fx_producers *t)
{
    for (prod *p = t->oldest; p != NULL;) {
        prod *nx = p->next;
        free(p);
        p = nx;
    }
    memset(t->buckets, 0, t->nbuckets * sizeof(*t->buckets));
    t->oldest = t->newest = NULL;
    t->count = 0;
}

void fx_producers_free(fx_producers *t)
{
    if (t == NULL)
        return;
    fx_producers_clear(t);
    free(t->buckets);
    free(t->ret);
    free(t);
}

static prod *find(const fx_producers *t, uint64_t id)
{
    for (prod *p = t->buckets[slot(t, id)]; p != NULL; p = p->hnext)
        if (p->id == id)
            return p;
    return NULL;
}

static void list_unlink(fx_producers *t, prod *p)
{
    if (p->prev != NULL)
        p->prev->next = p->next;
    else
        t->oldest = p->next;
    if (p->next != NULL)
        p->next->prev = p->prev;
    else
        t->newest = p->prev;
    p->prev = p->next = NULL;
}

static void list_append(fx_producers *t, prod *p)
{
    p->prev = t->newest;
    p->next = NULL;
    if (t->newest != NULL)
        t->newest->next = p;
    else
        t->oldest = p;
    t->newest = p;
}

static void drop(fx_producers *t, prod *p)
{
    prod **pp = &t->buckets[slot(t, p->id)];
    while (*pp != p)
        pp = &(*pp)->hnext;
    *pp = p->hnext;
    list_unlink(t, p);
    free(p);
    t->count--;
}

static fx_prod_batch *batch_at(prod *p, size_t i)
{
    return &p->win[(p->head + i) % FX_PRODUCERS_WINDOW];
}

static const fx_prod_batch *cbatch_at(const prod *p, size_t i)
{
    return &p->win[(p->head + i) % FX_PRODUCERS_WINDOW];
}

/* ---- retired producers ------------------------------------------------------------ */

static retired *find_retired(const fx_producers *t, uint64_t id)
{
    for (size_t i = 0; i < t->nret; i++)
        if (t->ret[i].id == id)
            return &t->ret[i];
    return NULL;
}

static void unretire(fx_producers *t, uint64_t id)
{
    retired *r = find_retired(t, id);
    if (r != NULL)
        *r = t->ret[--t->nret];
}

static int add_retired(fx_producers *t, uint64_t id, uint64_t last_sequence, uint64_t at_us)
{
    retired *r = find_retired(t, id);
    if (r == NULL) {
        if (t->nret >= FX_PRODUCERS_RETIRED_MAX) {
            /* The oldest retired goes: counted, as the bound on producers is. */
            size_t o = 0;
            for (size_t i = 1; i < t->nret; i++)
                if (t->ret[i].at_us < t->ret[o].at_us)
                    o = i;
            t->ret[o] = t->ret[--t->nret];
            t->st.retired_forgotten++;
        }
        retired *v = fx_grow(t->ret, &t->ret_cap, t->nret + 1, sizeof(*v), 16);
        if (v == NULL)
            return -ENOMEM;
        t->ret = v;
        r = &t->ret[t->nret++];
    }
    *r = (retired){.id = id, .last_sequence = last_sequence, .at_us = at_us};
    return 0;
}

/* ---- lookup and note ------------------------------------------------------------------ */

void fx_producers_lookup(const fx_producers *t, uint64_t id, uint64_t sequence, uint64_t digest,
                         uint64_t now_us, fx_prod_answer *ans)
{
    *ans = (fx_prod_answer){.verdict = FX_PROD_NEXT};
    const prod *p = find(t, id);
    if (p == NULL || p->n == 0) {
        const retired *r = find_retired(t, id);
        if (r != NULL && (now_us < r->at_us || now_us - r->at_us < t->ttl_us))
            ans->verdict = FX_PROD_EXPIRED;
        else if (sequence != 0)
            ans->verdict = FX_PROD_UNKNOWN;
        return;
    }
    const fx_prod_batch *newest = cbatch_at(p, p->n - 1u);
    const fx_prod_batch *oldest = cbatch_at(p, 0);
    if (sequence == newest->sequence + 1)
        return;
    if (sequence > newest->sequence) {
        ans->verdict = FX_PROD_GAP;
        ans->expected = newest->sequence + 1;
        return;
    }
    if (sequence < oldest->sequence) {
        ans->verdict = FX_PROD_EXPIRED;
        return;
    }
    const fx_prod_batch *b = cbatch_at(p, (size_t)(sequence - oldest->sequence));
    ans->first = b->first;
    ans->count = b->count;
    ans->held = b->held;
    ans->digest = b->digest;
    if (b->held < b->count)
        ans->verdict = FX_PROD_PARTIAL;
    else if (!b->has_digest || b->digest == digest)
        ans->verdict = FX_PROD_DUPLICATE;
    else
        ans->verdict = FX_PROD_REUSED;
}

int fx_producers_note(fx_producers *t, uint64_t id, uint64_t sequence, uint64_t first,
                      uint32_t count, uint32_t held, uint64_t digest, bool has_digest)
{
    fx_prod_batch nb = {.sequence = sequence,
                        .first = first,
                        .digest = has_digest ? digest : 0,
                        .count = count,
                        .held = held,
                        .has_digest = has_digest};
    prod *p = find(t, id);
    if (p == NULL) {
        if (t->count >= t->max) {
            drop(t, t->oldest);
            t->st.forgotten++;
        }
        p = calloc(1, sizeof(*p));
        if (p == NULL)
            return -ENOMEM;
        p->id = id;
        size_t s = slot(t, id);
        p->hnext = t->buckets[s];
        t->buckets[s] = p;
        t->count++;
        list_append(t, p);
    } else {
        list_unlink(t, p);
        list_append(t, p);
    }
    unretire(t, id);
    if (p->n > 0) {
        fx_prod_batch *oldest = batch_at(p, 0), *newest = batch_at(p, p->n - 1u);
        if (sequence >= oldest->sequence && sequence <= newest->sequence) {
            *batch_at(p, (size_t)(sequence - oldest->sequence)) = nb;
            return 0;
        }
        if (sequence != newest->sequence + 1)
            p->n = 0, p->head = 0; /* not contiguous: the window starts over */
    }
    if (p->n == FX_PRODUCERS_WINDOW) {
        p->head = (uint16_t)((p->head + 1) % FX_PRODUCERS_WINDOW);
        p->n--;
    }
    *batch_at(p, p->n) = nb;
    p->n++;
    return 0;
}

bool fx_producers_last(const fx_producers *t, uint64_t id, fx_prod_batch *out)
{
    const prod *p = find(t, id);
    if (p == NULL || p->n == 0)
        return false;
    *out = *cbatch_at(p, p->n - 1u);
    return true;
}

bool fx_producers_newest(const fx_producers *t, uint64_t *pid, fx_prod_batch *out)
{
    const prod *p = t->newest;
    if (p == NULL || p->n == 0)
        return false;
    *pid = p->id;
    *out = *cbatch_at(p, p->n - 1u);
    return true;
}

/* ---- retention and truncation ------------------------------------------------------ */

bool fx_producers_would_retire(const fx_producers *t, uint64_t first_kept)
{
    /* The list is ordered by newest batch: only its head can be first. */
    return t->oldest != NULL && t->oldest->n > 0 &&
           cbatch_at(t->oldest, t->oldest->n - 1u)->first < first_kept;
}

void fx_producers_retire_below(fx_producers *t, uint64_t first_kept, uint64_t now_us)
{
    for (prod *p = t->oldest; p != NULL;) {
        prod *nx = p->next;
        size_t gone = 0;
        while (gone < p->n && cbatch_at(p, gone)->first < first_kept)
            gone++;
        if (gone == p->n) {
            uint64_t last = p->n > 0 ? cbatch_at(p, p->n - 1u)->sequence : 0;
            if (add_retired(t, p->id, last, now_us) == 0)
                t->st.retired++;
            drop(t, p);
        } else if (gone > 0) {
            p->head = (uint16_t)((p->head + gone) % FX_PRODUCERS_WINDOW);
            p->n = (uint16_t)(p->n - gone);
        }
        p = nx;
    }
}

size_t fx_producers_count(const fx_producers *t)
{
    return t->count;
}

size_t fx_producers_retired_count(const fx_producers *t)
{
    return t->nret;
}

fx_producers_stats *fx_producers_stats_get(fx_producers *t)
{
    return &t->st;
}

/* ---- files -------------------------------------------------------------------------- */

#define SNAP_HEAD 24 /* magic, version, reserved, as_of, count, body_crc */
#define DIGEST_LEN 9

static uint8_t *put_digest(uint8_t *w, const fx_prod_batch *b)
{
    *w++ = b->has_digest ? 1 : 0;
    fx_be64_put(w, b->has_digest ? b->digest : 0);
    return w + 8;
}

static int path_in(char *out, const char *dir, const char *name)
{
    int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);
    return n > 0 && n < PATH_MAX ? 0 : -ENAMETOOLONG;
}

int fx_producers_snapshot_write(fx_producers *t, fx_sio *io, const char *dir, uint64_t as_of)
{
    /* The open batch: a partial newest batch of the newest producer, the one
     * at the tail of the log. Other partial batches are written as held. */
    const prod *op = t->newest;
    const fx_prod_batch *ob = NULL;
    if (op != NULL && op->n > 0 && cbatch_at(op, op->n - 1u)->held < cbatch_at(op, op->n - 1u)->count)
        ob = cbatch_at(op, op->n - 1u);
    size_t len = SNAP_HEAD + 1 + (ob != NULL ? 8 + 8 + 4 + 8 + 4 + DIGEST_LEN : 0);
    for (const prod *p = t->oldest; p != NULL; p = p->next)
        len += 8 + 8 + 2 + (size_t)p->n * (8 + 4 + DIGEST_LEN);
    uint8_t *b = malloc(len), *w = b + SNAP_HEAD;
    if (b == NULL) {
        t->st.snapshot_write_failures++;
        return -ENOMEM;
    }
    uint32_t nprod = 0;
    *w++ = ob != NULL;
    if (ob != NULL) {
        fx_be64_put(w, op->id);
        fx_be64_put(w + 8, ob->sequence);
        fx_be32_put(w + 16, ob->count);
        fx_be64_put(w + 20, ob->first);
        fx_be32_put(w + 28, ob->held);
        w = put_digest(w + 32, ob);
    }
    for (const prod *p = t->oldest; p != NULL; p = p->next) {
        uint16_t n = p->n;
        if (p == op && ob != NULL)
            n--;
        if (n == 0 && !(p == op && ob != NULL))
            continue;
        nprod++;
        fx_be64_put(w, p->id);
        /* With no complete batch, last_sequence is the open one's - 1 (it
         * is never read: the batch count is 0). */
        fx_be64_put(w + 8, n > 0 ? cbatch_at(p, n - 1u)->sequence : ob->sequence - 1);
        w[16] = (uint8_t)(n >> 8), w[17] = (uint8_t)n;
        w += 18;
        for (size_t i = 0; i < n; i++) {
            const fx_prod_batch *bb = cbatch_at(p, i);
            fx_be64_put(w, bb->first);
            fx_be32_put(w + 8, bb->held);
            w = put_digest(w + 12, bb);
        }
    }
    len = (size_t)(w - b);
    fx_be32_put(b, FX_PRODUCERS_SNAPSHOT_MAGIC);
    b[4] = 0, b[5] = FX_PRODUCERS_SNAPSHOT_VERSION, b[6] = 0, b[7] = 0;
    fx_be64_put(b + 8, as_of);
    fx_be32_put(b + 16, nprod);
    fx_be32_put(b + 20, fx_logfmt_crc(0, b + SNAP_HEAD, len - SNAP_HEAD));
    char path[PATH_MAX], tmp[PATH_MAX];
    int rv = path_in(path, dir, FX_PRODUCERS_SNAPSHOT_NAME);
    if (rv == 0)
        rv = path_in(tmp, dir, FX_PRODUCERS_SNAPSHOT_NAME ".tmp");
    int fd = -1;
    if (rv == 0 && ((rv = io->ops->unlink(io, tmp)) == 0 || rv == -ENOENT))
        rv = io->ops->open(io, tmp, FX_SIO_CREATE, &fd);
    if (rv == 0) {
        rv = io->ops->pwrite(io, fd, b, len, 0);
        int crv = io->ops->close(io, fd);
        rv = rv != 0 ? rv : crv;
        if (rv == 0)
            rv = io->ops->rename(io, tmp, path);
        if (rv != 0)
            (void)io->ops->unlink(io, tmp); /* best effort: the snapshot is only a hint */
    }
    free(b);
    if (rv != 0)
        t->st.snapshot_write_failures++;
    return rv;
}

/* A bounded reader over a file's bytes. */
typedef struct rd {
    const uint8_t *p;
    size_t left;
    bool bad;
} rd;

static const uint8_t *take(rd *r, size_t n)
{
    if (r->bad || r->left < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

static uint64_t take64(rd *r)
{
    const uint8_t *p = take(r, 8);
    return p != NULL ? fx_be64_get(p) : 0;
}

static uint32_t take32(rd *r)
{
    const uint8_t *p = take(r, 4);
    return p != NULL ? fx_be32_get(p) : 0;
}

static uint8_t take8(rd *r)
{
    const uint8_t *p = take(r, 1);
    return p != NULL ? *p : 0;
}

static bool take_digest(rd *r, fx_prod_batch *b)
{
    uint8_t present = take8(r);
    b->digest = take64(r);
    b->has_digest = present == 1;
    return present <= 1;
}

int fx_producers_snapshot_load(fx_producers *t, fx_sio *io, const char *dir, uint64_t lo,
                               uint64_t hi, uint64_t *pas_of)
{
    fx_producers_clear(t);
    char path[PATH_MAX], *buf = NULL;
    size_t len = 0;
    int rv = path_in(path, dir, FX_PRODUCERS_SNAPSHOT_NAME);
    if (rv == 0)
        rv = fx_sio_read_file(io, path, 1u << 30, &buf, &len);
    if (rv != 0)
        return rv;
    rd r = {.p = (const uint8_t *)buf, .left = len};
    uint32_t magic = take32(&r);
    uint8_t vh = take8(&r), vl = take8(&r);
    (void)take(&r, 2);
    uint64_t as_of = take64(&r);
    uint32_t nprod = take32(&r), crc = take32(&r);
    unsigned version = (unsigned)vh << 8 | vl;
    rv = FX_ESTORAGE_CORRUPT;
    if (r.bad || magic != FX_PRODUCERS_SNAPSHOT_MAGIC || (version != 1 && version != 2) ||
        crc != fx_logfmt_crc(0, r.p, r.left) || as_of < lo || as_of > hi)
        goto out;
    /* Version 1 (still read by the original) has no open batch byte; ours
     * always writes 2. */
    fx_prod_batch open = {0};
    uint64_t open_id = 0;
    bool has_open = version >= 2 && take8(&r) == 1;
    if (has_open) {
        open_id = take64(&r);
        open.sequence = take64(&r);
        open.count = take32(&r);
        open.first = take64(&r);
        open.held = take32(&r);
        if (!take_digest(&r, &open))
            r.bad = true;
    }
    for (uint32_t i = 0; i < nprod && !r.bad; i++) {
        uint64_t id = take64(&r), last = take64(&r);
        const uint8_t *nb = take(&r, 2);
        unsigned n = nb != NULL ? (unsigned)nb[0] << 8 | nb[1] : 0;
        if (n > FX_PRODUCERS_WINDOW || (n > 0 && last + 1 < n))
            r.bad = true;
        for (unsigned k = 0; k < n && !r.bad; k++) {
            fx_prod_batch b = {.sequence = last - (n - 1 - k)};
            b.first = take64(&r);
            b.count = b.held = take32(&r);
            if (!take_digest(&r, &b) || b.first + b.count > as_of)
                r.bad = true;
            else if (b.first >= lo &&
                     fx_producers_note(t, id, b.sequence, b.first, b.count, b.held, b.digest,
                                       b.has_digest) != 0)
                r.bad = true;
        }
    }
    if (has_open && !r.bad) {
        if (open.held > open.count || open.first + open.held > as_of)
            r.bad = true;
        else if (open.first >= lo)
            r.bad = fx_producers_note(t, open_id, open.sequence, open.first, open.count,
                                      open.held, open.digest, open.has_digest) != 0;
    }
    if (r.bad || r.left != 0)
        goto out;
    *pas_of = as_of;
    rv = 0;
out:
    if (rv != 0)
        fx_producers_clear(t);
    free(buf);
    return rv;
}

#define RET_HEAD 16 /* magic, version, reserved, count, body_crc */
#define RET_ENTRY 24

int fx_producers_retired_write(fx_producers *t, fx_sio *io, const char *dir, uint64_t first_kept,
                               uint64_t now_us)
{
    size_t cap = t->nret + t->count;
    uint8_t *b = malloc(RET_HEAD + cap * RET_ENTRY), *w = b + RET_HEAD;
    if (b == NULL) {
        t->st.retired_write_failures++;
        return -ENOMEM;
    }
    uint32_t n = 0;
    for (size_t i = 0; i < t->nret; i++) {
        if (now_us >= t->ret[i].at_us && now_us - t->ret[i].at_us >= t->ttl_us)
            continue; /* past its ttl: the next open would drop it anyway */
        fx_be64_put(w, t->ret[i].id);
        fx_be64_put(w + 8, t->ret[i].last_sequence);
        fx_be64_put(w + 16, t->ret[i].at_us);
        w += RET_ENTRY;
        n++;
    }
    for (const prod *p = t->oldest; p != NULL; p = p->next) {
        if (p->n == 0 || cbatch_at(p, p->n - 1u)->first >= first_kept)
            break; /* the list is ordered by newest batch */
        fx_be64_put(w, p->id);
        fx_be64_put(w + 8, cbatch_at(p, p->n - 1u)->sequence);
        fx_be64_put(w + 16, now_us);
        w += RET_ENTRY;
        n++;
    }
    fx_be32_put(b, FX_PRODUCERS_RETIRED_MAGIC);
    b[4] = 0, b[5] = 1, b[6] = 0, b[7] = 0;
    fx_be32_put(b + 8, n);
    fx_be32_put(b + 12, fx_logfmt_crc(0, b + RET_HEAD, (size_t)n * RET_ENTRY));
    char path[PATH_MAX];
    int rv = path_in(path, dir, FX_PRODUCERS_RETIRED_NAME);
    if (rv == 0)
        rv = fx_sio_write_file_atomic(io, path, b, RET_HEAD + (size_t)n * RET_ENTRY);
    free(b);
    if (rv != 0)
        t->st.retired_write_failures++;
    return rv;
}

int fx_producers_retired_load(fx_producers *t, fx_sio *io, const char *dir, uint64_t now_us)
{
    char path[PATH_MAX], *buf = NULL;
    size_t len = 0;
    int rv = path_in(path, dir, FX_PRODUCERS_RETIRED_NAME);
    if (rv == 0)
        rv = fx_sio_read_file(io, path, RET_HEAD + (size_t)FX_PRODUCERS_RETIRED_MAX * RET_ENTRY * 2,
                              &buf, &len);
    if (rv == -ENOENT)
        return 0;
    if (rv != 0)
        return rv;
    const uint8_t *p = (const uint8_t *)buf;
    uint32_t n = len >= RET_HEAD ? fx_be32_get(p + 8) : 0;
    if (len < RET_HEAD || fx_be32_get(p) != FX_PRODUCERS_RETIRED_MAGIC || p[4] != 0 || p[5] != 1 ||
        len != RET_HEAD + (size_t)n * RET_ENTRY ||
        fx_be32_get(p + 12) != fx_logfmt_crc(0, p + RET_HEAD, len - RET_HEAD)) {
        free(buf);
        return FX_ESTORAGE_CORRUPT;
    }
    rv = 0;
    for (uint32_t i = 0; i < n && rv == 0; i++) {
        const uint8_t *e = p + RET_HEAD + (size_t)i * RET_ENTRY;
        uint64_t id = fx_be64_get(e), seq = fx_be64_get(e + 8), at = fx_be64_get(e + 16);
        if (now_us >= at && now_us - at >= t->ttl_us) {
            t->st.retired_forgotten++;
            continue;
        }
        if (find(t, id) == NULL)
            rv = add_retired(t, id, seq, at);
    }
    free(buf);
    return rv;
}
