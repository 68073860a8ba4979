/* The pure half of the consumer-group journal (gjournal.h): the record and
 * snapshot codecs and the state model the journal replays onto. No I/O;
 * any thread for distinct states (the journal calls it on the storage
 * thread). gjournal.c has the files. */
#include "storage/gjournal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "felix/error.h"
#include "storage/format.h"
#include "storage/gjournal_int.h"

/* ---- records ---------------------------------------------------------------- */

/* Body length of each type (index: type); 0 for unknown types. */
static const uint8_t BODY_LEN[] = {
    [FX_GJ_DELIVER] = 16,     [FX_GJ_ACK] = 12,    [FX_GJ_NAK] = 20,  [FX_GJ_RELEASE] = 12,
    [FX_GJ_DEAD_INTENT] = 13, [FX_GJ_DEAD] = 17,   [FX_GJ_SKIP] = 12, [FX_GJ_SEEK] = 8,
    [FX_GJ_REDRIVE] = 8,      [FX_GJ_DISCARD] = 8,
};
#define NTYPES (sizeof(BODY_LEN) / sizeof(BODY_LEN[0]))

static size_t body_len(unsigned type)
{
    return type < NTYPES ? BODY_LEN[type] : 0;
}

static bool has_range(fx_gjournal_type t)
{
    return t == FX_GJ_DELIVER || t == FX_GJ_ACK || t == FX_GJ_SKIP;
}

static void encode_body(const fx_gjournal_rec *r, uint8_t *b)
{
    fx_be64_put(b, r->offset);
    switch (r->type) {
    case FX_GJ_DELIVER:
        fx_be32_put(b + 8, r->count);
        fx_be32_put(b + 12, r->attempt);
        break;
    case FX_GJ_ACK:
    case FX_GJ_SKIP:
        fx_be32_put(b + 8, r->count);
        break;
    case FX_GJ_NAK:
        fx_be32_put(b + 8, r->attempt);
        fx_be64_put(b + 12, r->not_before_us);
        break;
    case FX_GJ_RELEASE:
        fx_be32_put(b + 8, r->attempt);
        break;
    case FX_GJ_DEAD_INTENT:
        fx_be32_put(b + 8, r->attempt);
        b[12] = r->reason;
        break;
    case FX_GJ_DEAD:
        fx_be64_put(b + 8, r->dlq_offset);
        b[16] = r->reason;
        break;
    case FX_GJ_SEEK:
    case FX_GJ_REDRIVE:
    case FX_GJ_DISCARD:
        break;
    }
}

static void decode_body(const uint8_t *b, fx_gjournal_rec *r)
{
    r->offset = fx_be64_get(b);
    switch (r->type) {
    case FX_GJ_DELIVER:
        r->count = fx_be32_get(b + 8);
        r->attempt = fx_be32_get(b + 12);
        break;
    case FX_GJ_ACK:
    case FX_GJ_SKIP:
        r->count = fx_be32_get(b + 8);
        break;
    case FX_GJ_NAK:
        r->attempt = fx_be32_get(b + 8);
        r->not_before_us = fx_be64_get(b + 12);
        break;
    case FX_GJ_RELEASE:
        r->attempt = fx_be32_get(b + 8);
        break;
    case FX_GJ_DEAD_INTENT:
        r->attempt = fx_be32_get(b + 8);
        r->reason = b[12];
        break;
    case FX_GJ_DEAD:
        r->dlq_offset = fx_be64_get(b + 8);
        r->reason = b[16];
        break;
    case FX_GJ_SEEK:
    case FX_GJ_REDRIVE:
    case FX_GJ_DISCARD:
        break;
    }
}

bool fx_gjournal_rec_is_valid(const fx_gjournal_rec *r)
{
    if (body_len(r->type) == 0)
        return false;
    return !has_range(r->type) || (r->count > 0 && r->offset <= UINT64_MAX - r->count);
}

size_t fx_gjournal_encode_record(const fx_gjournal_rec *r, uint64_t seq, uint8_t *out)
{
    size_t blen = body_len(r->type);
    fx_be32_put(out, (uint32_t)blen);
    out[4] = (uint8_t)r->type;
    out[5] = 0; /* flags */
    out[6] = out[7] = 0;
    fx_be64_put(out + 8, seq);
    encode_body(r, out + 16);
    fx_be32_put(out + 16 + blen, fx_logfmt_crc(0, out + 4, 12 + blen));
    return FX_GJOURNAL_REC_OVERHEAD + blen;
}

fx_gjournal_status fx_gjournal_decode_record(const uint8_t *buf, size_t len, fx_gjournal_rec *r,
                                             size_t *pused)
{
    if (len < 4)
        return FX_GJ_REC_SHORT;
    uint32_t blen = fx_be32_get(buf);
    if (blen == 0 || blen > FX_GJOURNAL_REC_MAX - FX_GJOURNAL_REC_OVERHEAD)
        return FX_GJ_REC_BAD;
    size_t total = FX_GJOURNAL_REC_OVERHEAD + blen;
    if (len < total)
        return FX_GJ_REC_SHORT;
    if (fx_logfmt_crc(0, buf + 4, 12 + blen) != fx_be32_get(buf + 16 + blen))
        return FX_GJ_REC_BAD;
    if (body_len(buf[4]) != blen || buf[5] != 0 || buf[6] != 0 || buf[7] != 0)
        return FX_GJ_REC_BAD;
    *r = (fx_gjournal_rec){.type = (fx_gjournal_type)buf[4], .seq = fx_be64_get(buf + 8)};
    decode_body(buf + 16, r);
    if (has_range(r->type) && (r->count == 0 || r->offset > UINT64_MAX - r->count))
        return FX_GJ_REC_BAD;
    *pused = total;
    return FX_GJ_REC_OK;
}

/* ---- the state model ------------------------------------------------------ */

void fx_gjournal_state_init(fx_gjournal_state *s)
{
    *s = (fx_gjournal_state){0};
}

void fx_gjournal_state_deinit(fx_gjournal_state *s)
{
    if (s == NULL)
        return;
    free(s->p);
    free(s->in);
    free(s->dl);
    fx_gjournal_state_init(s);
}

const fx_gjournal_pending *fx_gjournal_state_pending(const fx_gjournal_state *s, size_t *pn)
{
    *pn = s->n;
    return s->p != NULL ? s->p + s->head : NULL;
}

const fx_gjournal_intent *fx_gjournal_state_intents(const fx_gjournal_state *s, size_t *pn)
{
    *pn = s->nin;
    return s->in;
}

const fx_gjournal_dead *fx_gjournal_state_dead(const fx_gjournal_state *s, size_t *pn,
                                               uint64_t *pforgotten)
{
    *pn = s->ndl;
    if (pforgotten != NULL)
        *pforgotten = s->dead_forgotten;
    return s->dl;
}

/* Index (from head) of the first pending offset >= |off|. */
static size_t lower_bound(const fx_gjournal_state *s, uint64_t off)
{
    if (s->n == 0)
        return 0; /* and s->p may be NULL */
    const fx_gjournal_pending *p = s->p + s->head;
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p[mid].offset < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static fx_gjournal_pending *find(fx_gjournal_state *s, uint64_t off)
{
    size_t i = lower_bound(s, off);
    return i < s->n && s->p[s->head + i].offset == off ? &s->p[s->head + i] : NULL;
}

/* Room for |more| entries at the end: slides the list to the front when
 * that frees enough, else grows the array. */
static int reserve(fx_gjournal_state *s, size_t more)
{
    if (s->n + more > FX_GJOURNAL_MAX_PENDING)
        return FX_ESTORAGE_CORRUPT;
    if (s->head + s->n + more <= s->cap)
        return 0;
    if (s->n + more <= s->cap / 2 + 1 && s->head > 0) {
        memmove(s->p, s->p + s->head, s->n * sizeof(*s->p));
        s->head = 0;
        return 0;
    }
    size_t cap = s->cap < 16 ? 16 : s->cap;
    while (cap < s->n + more)
        cap *= 2;
    fx_gjournal_pending *p = malloc(cap * sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    if (s->n > 0)
        memcpy(p, s->p + s->head, s->n * sizeof(*p));
    free(s->p);
    s->p = p, s->cap = cap, s->head = 0;
    return 0;
}

/* Drops the intents with offsets in [lo, hi). */
static void drop_intents(fx_gjournal_state *s, uint64_t lo, uint64_t hi)
{
    size_t k = 0;
    for (size_t i = 0; i < s->nin; i++)
        if (s->in[i].offset < lo || s->in[i].offset >= hi)
            s->in[k++] = s->in[i];
    s->nin = k;
}

/* ---- the dead-letter list ---- */

/* The index of |off|'s entry, or ndl. */
static size_t dead_find(const fx_gjournal_state *s, uint64_t off)
{
    size_t i = 0;
    while (i < s->ndl && s->dl[i].offset != off)
        i++;
    return i;
}

static void dead_remove_at(fx_gjournal_state *s, size_t i)
{
    if (s->dl[i].redriven)
        s->nredriven--;
    memmove(s->dl + i, s->dl + i + 1, (s->ndl - i - 1) * sizeof(*s->dl));
    s->ndl--;
}

/* Removes the entries in [lo, hi), only the redriven ones with |redriven|. */
static void dead_drop(fx_gjournal_state *s, uint64_t lo, uint64_t hi, bool redriven)
{
    if (s->ndl == 0 || (redriven && s->nredriven == 0))
        return;
    size_t k = 0;
    for (size_t i = 0; i < s->ndl; i++) {
        const fx_gjournal_dead *e = &s->dl[i];
        bool drop = e->offset >= lo && e->offset < hi && (!redriven || e->redriven);
        if (!drop)
            s->dl[k++] = *e;
        else if (e->redriven)
            s->nredriven--;
    }
    s->ndl = k;
}

/* Lists |v|: a redriven entry of its offset is dead again; else it goes
 * last, the oldest forgotten at the bound. */
static int dead_put(fx_gjournal_state *s, const fx_gjournal_dead *v)
{
    size_t i = dead_find(s, v->offset);
    if (i < s->ndl) {
        if (s->dl[i].redriven)
            s->nredriven--;
        s->dl[i] = *v;
        return 0;
    }
    if (s->ndl == FX_GJOURNAL_DEAD_MAX) {
        dead_remove_at(s, 0);
        s->dead_forgotten++;
    }
    if (s->ndl == s->dlcap) {
        size_t cap = s->dlcap < 16 ? 16 : 2 * s->dlcap;
        if (cap > FX_GJOURNAL_DEAD_MAX)
            cap = FX_GJOURNAL_DEAD_MAX;
        fx_gjournal_dead *dl = realloc(s->dl, cap * sizeof(*dl));
        if (dl == NULL)
            return -ENOMEM;
        s->dl = dl, s->dlcap = cap;
    }
    s->dl[s->ndl++] = *v;
    return 0;
}

static void update_floor(fx_gjournal_state *s)
{
    s->floor = s->n > 0 ? s->p[s->head].offset : s->next;
}

/* Settles the pending offsets in [lo, hi): the common case, a prefix, only
 * moves the head. */
static void settle(fx_gjournal_state *s, uint64_t lo, uint64_t hi)
{
    size_t i = lower_bound(s, lo), j = lower_bound(s, hi);
    if (j > i) {
        if (i == 0)
            s->head += j;
        else
            memmove(s->p + s->head + i, s->p + s->head + j, (s->n - j) * sizeof(*s->p));
        s->n -= j - i;
        if (s->n == 0)
            s->head = 0;
        if (s->nin > 0)
            drop_intents(s, lo, hi);
    }
    update_floor(s);
}

static int deliver(fx_gjournal_state *s, const fx_gjournal_rec *r)
{
    uint64_t end = r->offset + r->count;
    uint64_t from = r->offset > s->next ? r->offset : s->next;
    if (end > from) {
        int rv =
            reserve(s, (size_t)(end - from) > FX_GJOURNAL_MAX_PENDING ? FX_GJOURNAL_MAX_PENDING + 1
                                                                      : (size_t)(end - from));
        if (rv != 0)
            return rv;
    }
    /* Pending offsets already in the range are redelivered. */
    for (size_t i = lower_bound(s, r->offset); i < s->n && s->p[s->head + i].offset < end; i++)
        s->p[s->head + i] = (fx_gjournal_pending){
            .offset = s->p[s->head + i].offset, .attempts = r->attempt, .state = FX_GJ_AVAILABLE};
    for (uint64_t o = from; o < end; o++)
        s->p[s->head + s->n++] =
            (fx_gjournal_pending){.offset = o, .attempts = r->attempt, .state = FX_GJ_AVAILABLE};
    if (end > s->next)
        s->next = end;
    update_floor(s);
    return 0;
}

static int add_intent(fx_gjournal_state *s, const fx_gjournal_rec *r)
{
    size_t i = 0;
    while (i < s->nin && s->in[i].offset < r->offset)
        i++;
    fx_gjournal_intent v = {.offset = r->offset, .attempts = r->attempt, .reason = r->reason};
    if (i < s->nin && s->in[i].offset == r->offset) {
        s->in[i] = v;
        return 0;
    }
    if (s->nin == s->incap) {
        size_t cap = s->incap < 8 ? 8 : 2 * s->incap;
        fx_gjournal_intent *in = realloc(s->in, cap * sizeof(*in));
        if (in == NULL)
            return -ENOMEM;
        s->in = in, s->incap = cap;
    }
    memmove(s->in + i + 1, s->in + i, (s->nin - i) * sizeof(*s->in));
    s->in[i] = v;
    s->nin++;
    return 0;
}

static void seek(fx_gjournal_state *s, uint64_t offset)
{
    s->head = s->n = s->nin = 0;
    s->floor = s->next = offset;
    dead_drop(s, 0, UINT64_MAX, true);
}

/* DEAD: settles |r->offset| and lists it. */
static int dead(fx_gjournal_state *s, const fx_gjournal_rec *r)
{
    fx_gjournal_dead v = {.offset = r->offset, .dlq_offset = r->dlq_offset, .reason = r->reason};
    size_t k = 0;
    while (k < s->nin && s->in[k].offset != r->offset)
        k++;
    const fx_gjournal_pending *p = find(s, r->offset);
    if (p == NULL)
        return 0; /* the engine dead-letters only pending records */
    v.attempts = k < s->nin ? s->in[k].attempts : p->attempts;
    int rv = dead_put(s, &v);
    if (rv != 0)
        return rv;
    settle(s, r->offset, r->offset + 1);
    return 0;
}

/* REDRIVE: a settled offset below next is pending again. */
static int redrive(fx_gjournal_state *s, const fx_gjournal_rec *r)
{
    if (r->offset >= s->next || find(s, r->offset) != NULL)
        return 0;
    int rv = reserve(s, 1);
    if (rv != 0)
        return rv;
    size_t i = lower_bound(s, r->offset);
    fx_gjournal_pending *p = s->p + s->head;
    memmove(p + i + 1, p + i, (s->n - i) * sizeof(*p));
    p[i] = (fx_gjournal_pending){.offset = r->offset, .state = FX_GJ_AVAILABLE};
    s->n++;
    update_floor(s);
    size_t d = dead_find(s, r->offset);
    if (d < s->ndl && !s->dl[d].redriven) {
        s->dl[d].redriven = true;
        s->nredriven++;
    }
    return 0;
}

int fx_gjournal_state_apply(fx_gjournal_state *s, const fx_gjournal_rec *r)
{
    fx_gjournal_pending *p;
    switch (r->type) {
    case FX_GJ_DELIVER:
        return deliver(s, r);
    case FX_GJ_ACK: { /* the engine refuses acks of offsets never handed out */
        uint64_t hi = r->offset + r->count < s->next ? r->offset + r->count : s->next;
        dead_drop(s, r->offset, hi, true);
        settle(s, r->offset, hi);
        return 0;
    }
    case FX_GJ_SKIP:
        if (r->offset + r->count > s->next)
            s->next = r->offset + r->count;
        dead_drop(s, r->offset, r->offset + r->count, true);
        settle(s, r->offset, r->offset + r->count);
        return 0;
    case FX_GJ_DEAD:
        return dead(s, r);
    case FX_GJ_REDRIVE:
        return redrive(s, r);
    case FX_GJ_DISCARD: {
        size_t d = dead_find(s, r->offset);
        if (d < s->ndl && !s->dl[d].redriven)
            dead_remove_at(s, d);
        return 0;
    }
    case FX_GJ_NAK:
        if ((p = find(s, r->offset)) != NULL)
            *p = (fx_gjournal_pending){.offset = r->offset,
                                       .attempts = r->attempt,
                                       .not_before_us = r->not_before_us,
                                       .state =
                                           r->not_before_us > 0 ? FX_GJ_PARKED : FX_GJ_AVAILABLE};
        return 0;
    case FX_GJ_RELEASE:
        if ((p = find(s, r->offset)) != NULL)
            *p = (fx_gjournal_pending){
                .offset = r->offset, .attempts = r->attempt, .state = FX_GJ_AVAILABLE};
        return 0;
    case FX_GJ_DEAD_INTENT:
        return find(s, r->offset) != NULL ? add_intent(s, r) : 0;
    case FX_GJ_SEEK:
        seek(s, r->offset);
        return 0;
    }
    return FX_ESTORAGE_CORRUPT;
}

bool fx_gjournal_state_equal(const fx_gjournal_state *a, const fx_gjournal_state *b)
{
    if (a->floor != b->floor || a->next != b->next || a->n != b->n || a->nin != b->nin)
        return false;
    for (size_t i = 0; i < a->n; i++) {
        const fx_gjournal_pending *x = &a->p[a->head + i], *y = &b->p[b->head + i];
        if (x->offset != y->offset || x->attempts != y->attempts || x->state != y->state ||
            x->not_before_us != y->not_before_us)
            return false;
    }
    for (size_t i = 0; i < a->nin; i++) {
        const fx_gjournal_intent *x = &a->in[i], *y = &b->in[i];
        if (x->offset != y->offset || x->attempts != y->attempts || x->reason != y->reason)
            return false;
    }
    if (a->ndl != b->ndl || a->dead_forgotten != b->dead_forgotten)
        return false;
    for (size_t i = 0; i < a->ndl; i++) {
        const fx_gjournal_dead *x = &a->dl[i], *y = &b->dl[i];
        if (x->offset != y->offset || x->dlq_offset != y->dlq_offset ||
            x->attempts != y->attempts || x->reason != y->reason || x->redriven != y->redriven)
            return false;
    }
    return true;
}

int fx_gjournal_state_copy(fx_gjournal_state *dst, const fx_gjournal_state *src)
{
    fx_gjournal_state t;
    fx_gjournal_state_init(&t);
    t.floor = src->floor, t.next = src->next;
    if (src->n > 0 && (t.p = malloc(src->n * sizeof(*t.p))) == NULL)
        return -ENOMEM;
    if (src->nin > 0 && (t.in = malloc(src->nin * sizeof(*t.in))) == NULL) {
        free(t.p);
        return -ENOMEM;
    }
    if (src->ndl > 0 && (t.dl = malloc(src->ndl * sizeof(*t.dl))) == NULL) {
        free(t.p);
        free(t.in);
        return -ENOMEM;
    }
    if (src->ndl > 0)
        memcpy(t.dl, src->dl, src->ndl * sizeof(*t.dl));
    t.ndl = t.dlcap = src->ndl;
    t.nredriven = src->nredriven;
    t.dead_forgotten = src->dead_forgotten;
    if (src->n > 0)
        memcpy(t.p, src->p + src->head, src->n * sizeof(*t.p));
    if (src->nin > 0)
        memcpy(t.in, src->in, src->nin * sizeof(*t.in));
    t.n = t.cap = src->n;
    t.nin = t.incap = src->nin;
    fx_gjournal_state_deinit(dst);
    *dst = t;
    return 0;
}

void fx_gjournal_clamp(fx_gjournal_state *s, uint64_t log_tail, fx_gjournal_stats *st)
{
    dead_drop(s, log_tail, UINT64_MAX, false); /* entries of records the log lost */
    if (s->floor <= log_tail && s->next <= log_tail)
        return;
    s->n = lower_bound(s, log_tail);
    if (s->n == 0)
        s->head = 0;
    drop_intents(s, log_tail, UINT64_MAX);
    if (s->next > log_tail)
        s->next = log_tail;
    if (s->floor > log_tail)
        s->floor = log_tail;
    if (st != NULL)
        st->clamped++;
}

/* ---- snapshots ---------------------------------------------------------------- */

int fx_gjournal_encode_snapshot(const fx_gjournal_state *s, uint64_t journal_seq, uint8_t **pbuf,
                                size_t *plen)
{
    size_t len = SNAP_FIXED + s->n * SNAP_PENDING + s->nin * SNAP_INTENT + s->ndl * SNAP_DEAD;
    uint8_t *b = malloc(len), *p = b;
    if (b == NULL)
        return -ENOMEM;
    fx_be32_put(p, FX_GJOURNAL_SNAP_MAGIC);
    p[4] = 0, p[5] = FX_GJOURNAL_SNAP_VERSION;
    fx_be64_put(p + 6, journal_seq);
    fx_be64_put(p + 14, s->floor);
    fx_be64_put(p + 22, s->next);
    fx_be32_put(p + 30, (uint32_t)s->n);
    p += 34;
    for (size_t i = 0; i < s->n; i++, p += SNAP_PENDING) {
        const fx_gjournal_pending *e = &s->p[s->head + i];
        fx_be64_put(p, e->offset);
        fx_be32_put(p + 8, e->attempts);
        p[12] = e->state;
        fx_be64_put(p + 13, e->not_before_us);
    }
    fx_be32_put(p, (uint32_t)s->nin);
    p += 4;
    for (size_t i = 0; i < s->nin; i++, p += SNAP_INTENT) {
        fx_be64_put(p, s->in[i].offset);
        fx_be32_put(p + 8, s->in[i].attempts);
        p[12] = s->in[i].reason;
    }
    fx_be64_put(p, s->dead_forgotten);
    fx_be32_put(p + 8, (uint32_t)s->ndl);
    p += 12;
    for (size_t i = 0; i < s->ndl; i++, p += SNAP_DEAD) {
        const fx_gjournal_dead *e = &s->dl[i];
        fx_be64_put(p, e->offset);
        fx_be64_put(p + 8, e->dlq_offset);
        fx_be32_put(p + 16, e->attempts);
        p[20] = e->reason;
        p[21] = e->redriven ? 1 : 0;
    }
    fx_be32_put(p, fx_logfmt_crc(0, b, len - 4));
    *pbuf = b, *plen = len;
    return 0;
}

int fx_gjournal_corrupt(char *why, size_t whylen, const char *fmt, ...)
{
    if (why != NULL && whylen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return FX_ESTORAGE_CORRUPT;
}

/* Reads and checks the pending entries at |p| into |t|. */
static int snap_pending(const uint8_t *p, fx_gjournal_state *t, char *why, size_t whylen)
{
    for (size_t i = 0; i < t->n; i++, p += SNAP_PENDING) {
        fx_gjournal_pending e = {.offset = fx_be64_get(p),
                                 .attempts = fx_be32_get(p + 8),
                                 .state = p[12],
                                 .not_before_us = fx_be64_get(p + 13)};
        if (e.offset < t->floor || e.offset >= t->next || (i > 0 && e.offset <= t->p[i - 1].offset))
            return fx_gjournal_corrupt(
                why, whylen, "pending offset %" PRIu64 " out of order or range", e.offset);
        bool parked = e.not_before_us > 0;
        if (e.state != (parked ? FX_GJ_PARKED : FX_GJ_AVAILABLE))
            return fx_gjournal_corrupt(why, whylen, "pending offset %" PRIu64 " has a bad state %u",
                                       e.offset, e.state);
        t->p[i] = e;
    }
    if (t->n > 0 && t->floor != t->p[0].offset)
        return fx_gjournal_corrupt(why, whylen,
                                   "floor %" PRIu64 " is not the lowest pending offset", t->floor);
    if (t->n == 0 && t->floor != t->next)
        return fx_gjournal_corrupt(why, whylen, "floor %" PRIu64 " below next with nothing pending",
                                   t->floor);
    return 0;
}

static int snap_intents(const uint8_t *p, fx_gjournal_state *t, char *why, size_t whylen)
{
    for (size_t i = 0; i < t->nin; i++, p += SNAP_INTENT) {
        fx_gjournal_intent e = {
            .offset = fx_be64_get(p), .attempts = fx_be32_get(p + 8), .reason = p[12]};
        if ((i > 0 && e.offset <= t->in[i - 1].offset) || find(t, e.offset) == NULL)
            return fx_gjournal_corrupt(
                why, whylen, "dead intent %" PRIu64 " out of order or not pending", e.offset);
        t->in[i] = e;
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Reads and checks the dead-letter entries at |p| into |t| (its pending
 * list read). */
static int snap_dead(const uint8_t *p, fx_gjournal_state *t, char *why, size_t whylen)
{
    uint64_t *offs = t->ndl > 0 ? malloc(t->ndl * sizeof(*offs)) : NULL;
    if (t->ndl > 0 && offs == NULL)
        return -ENOMEM;
    int rv = 0;
    for (size_t i = 0; i < t->ndl && rv == 0; i++, p += SNAP_DEAD) {
        fx_gjournal_dead e = {.offset = fx_be64_get(p),
                              .dlq_offset = fx_be64_get(p + 8),
                              .attempts = fx_be32_get(p + 16),
                              .reason = p[20],
                              .redriven = p[21] == 1};
        if (p[21] > 1 || (e.redriven && find(t, e.offset) == NULL))
            rv = fx_gjournal_corrupt(why, whylen,
                                     "dead-letter entry %" PRIu64
                                     " with bad flags, or redriven but not pending",
                                     e.offset);
        t->dl[i] = e;
        offs[i] = e.offset;
        t->nredriven += e.redriven ? 1 : 0;
    }
    if (rv == 0 && t->ndl > 1) {
        qsort(offs, t->ndl, sizeof(*offs), cmp_u64);
        for (size_t i = 1; i < t->ndl && rv == 0; i++)
            if (offs[i] == offs[i - 1])
                rv = fx_gjournal_corrupt(why, whylen, "dead-letter entry %" PRIu64 " listed twice",
                                         offs[i]);
    }
    free(offs);
    return rv;
}

/* Checks the framing of a snapshot and reads its counts (|*pndl|: 0 in a
 * version 1 snapshot, which has no dead-letter list). */
static int snap_frame(const uint8_t *buf, size_t len, size_t *pn, size_t *pnin, size_t *pndl,
                      char *why, size_t whylen)
{
    if (len < SNAP_FIXED_V1)
        return fx_gjournal_corrupt(why, whylen, "snapshot of %zu bytes is too short", len);
    if (fx_be32_get(buf) != FX_GJOURNAL_SNAP_MAGIC)
        return fx_gjournal_corrupt(why, whylen, "bad snapshot magic 0x%08" PRIx32,
                                   fx_be32_get(buf));
    if (buf[4] != 0 || (buf[5] != 1 && buf[5] != FX_GJOURNAL_SNAP_VERSION))
        return fx_gjournal_corrupt(why, whylen, "unsupported snapshot version %u",
                                   buf[4] << 8 | buf[5]);
    bool v1 = buf[5] == 1;
    if (!v1 && len < SNAP_FIXED)
        return fx_gjournal_corrupt(why, whylen, "snapshot of %zu bytes is too short", len);
    if (fx_logfmt_crc(0, buf, len - 4) != fx_be32_get(buf + len - 4))
        return fx_gjournal_corrupt(why, whylen, "snapshot checksum mismatch");
    uint32_t n = fx_be32_get(buf + 30);
    if (n > FX_GJOURNAL_MAX_PENDING || 34 + (size_t)n * SNAP_PENDING + 8 > len)
        return fx_gjournal_corrupt(why, whylen, "snapshot pending count %" PRIu32 " out of range",
                                   n);
    uint32_t nin = fx_be32_get(buf + 34 + (size_t)n * SNAP_PENDING), ndl = 0;
    size_t body = (size_t)n * SNAP_PENDING + (size_t)nin * SNAP_INTENT;
    if (nin > n || len < SNAP_FIXED_V1 + body)
        return fx_gjournal_corrupt(why, whylen, "snapshot length %zu does not match its counts",
                                   len);
    if (!v1) {
        if (len < SNAP_FIXED + body)
            return fx_gjournal_corrupt(why, whylen, "snapshot length %zu does not match its counts",
                                       len);
        ndl = fx_be32_get(buf + 38 + body + 8);
        if (ndl > FX_GJOURNAL_DEAD_MAX)
            return fx_gjournal_corrupt(why, whylen,
                                       "snapshot dead-letter count %" PRIu32 " out of range", ndl);
        body += (size_t)ndl * SNAP_DEAD;
    }
    if (len != (v1 ? SNAP_FIXED_V1 : SNAP_FIXED) + body)
        return fx_gjournal_corrupt(why, whylen, "snapshot length %zu does not match its counts",
                                   len);
    *pn = n, *pnin = nin, *pndl = ndl;
    return 0;
}

int fx_gjournal_decode_snapshot(const uint8_t *buf, size_t len, fx_gjournal_state *s,
                                uint64_t *pseq, char *why, size_t whylen)
{
    size_t n = 0, nin = 0, ndl = 0; /* set by snap_frame when it returns 0 (GCC cannot tell) */
    int rv = snap_frame(buf, len, &n, &nin, &ndl, why, whylen);
    if (rv != 0)
        return rv;
    fx_gjournal_state t;
    fx_gjournal_state_init(&t);
    t.floor = fx_be64_get(buf + 14);
    t.next = fx_be64_get(buf + 22);
    if (t.floor > t.next)
        return fx_gjournal_corrupt(why, whylen, "snapshot floor %" PRIu64 " above next %" PRIu64,
                                   t.floor, t.next);
    if ((n > 0 && (t.p = malloc(n * sizeof(*t.p))) == NULL) ||
        (nin > 0 && (t.in = malloc(nin * sizeof(*t.in))) == NULL) ||
        (ndl > 0 && (t.dl = malloc(ndl * sizeof(*t.dl))) == NULL)) {
        fx_gjournal_state_deinit(&t);
        return -ENOMEM;
    }
    t.n = t.cap = n;
    t.nin = t.incap = nin;
    t.ndl = t.dlcap = ndl;
    rv = snap_pending(buf + 34, &t, why, whylen);
    if (rv == 0)
        rv = snap_intents(buf + 38 + n * SNAP_PENDING, &t, why, whylen);
    size_t dpos = 38 + n * SNAP_PENDING + nin * SNAP_INTENT;
    if (rv == 0 && buf[5] != 1) {
        t.dead_forgotten = fx_be64_get(buf + dpos);
        rv = snap_dead(buf + dpos + 12, &t, why, whylen);
    }
    if (rv != 0) {
        fx_gjournal_state_deinit(&t);
        return rv;
    }
    fx_gjournal_state_deinit(s);
    *s = t;
    *pseq = fx_be64_get(buf + 6);
    return 0;
}
