/* The on-disk state of one consumer group (gjournal.h): record and snapshot
 * codecs, the state model the journal replays onto, and the journal files
 * themselves (open and recovery, appends, flushes, compaction). Storage
 * thread of the stream only. */
#include "storage/gjournal.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "felix/error.h"
#include "storage/format.h"

/* ---- names ----------------------------------------------------------------- */

uint64_t fx_gjournal_name_hash(const char *group)
{
    return fx_logfmt_fnv1a64(group, strlen(group));
}

void fx_gjournal_stem(char *out, const char *group)
{
    char *p = fx_logfmt_sanitise(out, group);
    snprintf(p, FX_GJOURNAL_STEM_MAX - (size_t)(p - out), "-%016" PRIx64,
             fx_gjournal_name_hash(group));
}

/* ---- records ---------------------------------------------------------------- */

/* Body length of each type (index: type); 0 for unknown types. */
static const uint8_t BODY_LEN[] = {
    [FX_GJ_DELIVER] = 16,     [FX_GJ_ACK] = 12,  [FX_GJ_NAK] = 20,  [FX_GJ_RELEASE] = 12,
    [FX_GJ_DEAD_INTENT] = 13, [FX_GJ_DEAD] = 17, [FX_GJ_SKIP] = 12, [FX_GJ_SEEK] = 8,
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
        break;
    }
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
}

int fx_gjournal_state_apply(fx_gjournal_state *s, const fx_gjournal_rec *r)
{
    fx_gjournal_pending *p;
    switch (r->type) {
    case FX_GJ_DELIVER:
        return deliver(s, r);
    case FX_GJ_ACK: /* the engine refuses acks of offsets never handed out */
        settle(s, r->offset, r->offset + r->count < s->next ? r->offset + r->count : s->next);
        return 0;
    case FX_GJ_SKIP:
        if (r->offset + r->count > s->next)
            s->next = r->offset + r->count;
        settle(s, r->offset, r->offset + r->count);
        return 0;
    case FX_GJ_DEAD:
        settle(s, r->offset, r->offset + 1);
        return 0;
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

#define SNAP_FIXED (4 + 2 + 8 + 8 + 8 + 4 + 4 + 4) /* header, two counts, crc */
#define SNAP_PENDING 21
#define SNAP_INTENT 13
#define SNAP_MAX (SNAP_FIXED + (size_t)FX_GJOURNAL_MAX_PENDING * (SNAP_PENDING + SNAP_INTENT))

int fx_gjournal_encode_snapshot(const fx_gjournal_state *s, uint64_t journal_seq, uint8_t **pbuf,
                                size_t *plen)
{
    size_t len = SNAP_FIXED + s->n * SNAP_PENDING + s->nin * SNAP_INTENT;
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
    fx_be32_put(p, fx_logfmt_crc(0, b, len - 4));
    *pbuf = b, *plen = len;
    return 0;
}

static int why_set(char *why, size_t whylen, const char *fmt, ...)
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
            return why_set(why, whylen, "pending offset %" PRIu64 " out of order or range",
                           e.offset);
        bool parked = e.not_before_us > 0;
        if (e.state != (parked ? FX_GJ_PARKED : FX_GJ_AVAILABLE))
            return why_set(why, whylen, "pending offset %" PRIu64 " has a bad state %u", e.offset,
                           e.state);
        t->p[i] = e;
    }
    if (t->n > 0 && t->floor != t->p[0].offset)
        return why_set(why, whylen, "floor %" PRIu64 " is not the lowest pending offset", t->floor);
    if (t->n == 0 && t->floor != t->next)
        return why_set(why, whylen, "floor %" PRIu64 " below next with nothing pending", t->floor);
    return 0;
}

static int snap_intents(const uint8_t *p, fx_gjournal_state *t, char *why, size_t whylen)
{
    for (size_t i = 0; i < t->nin; i++, p += SNAP_INTENT) {
        fx_gjournal_intent e = {
            .offset = fx_be64_get(p), .attempts = fx_be32_get(p + 8), .reason = p[12]};
        if ((i > 0 && e.offset <= t->in[i - 1].offset) || find(t, e.offset) == NULL)
            return why_set(why, whylen, "dead intent %" PRIu64 " out of order or not pending",
                           e.offset);
        t->in[i] = e;
    }
    return 0;
}

/* Checks the framing of a snapshot and reads its counts. */
static int snap_frame(const uint8_t *buf, size_t len, size_t *pn, size_t *pnin, char *why,
                      size_t whylen)
{
    if (len < SNAP_FIXED)
        return why_set(why, whylen, "snapshot of %zu bytes is too short", len);
    if (fx_be32_get(buf) != FX_GJOURNAL_SNAP_MAGIC)
        return why_set(why, whylen, "bad snapshot magic 0x%08" PRIx32, fx_be32_get(buf));
    if (buf[4] != 0 || buf[5] != FX_GJOURNAL_SNAP_VERSION)
        return why_set(why, whylen, "unsupported snapshot version %u", buf[4] << 8 | buf[5]);
    if (fx_logfmt_crc(0, buf, len - 4) != fx_be32_get(buf + len - 4))
        return why_set(why, whylen, "snapshot checksum mismatch");
    uint32_t n = fx_be32_get(buf + 30);
    if (n > FX_GJOURNAL_MAX_PENDING || 34 + (size_t)n * SNAP_PENDING + 8 > len)
        return why_set(why, whylen, "snapshot pending count %" PRIu32 " out of range", n);
    uint32_t nin = fx_be32_get(buf + 34 + (size_t)n * SNAP_PENDING);
    if (nin > n || len != SNAP_FIXED + (size_t)n * SNAP_PENDING + (size_t)nin * SNAP_INTENT)
        return why_set(why, whylen, "snapshot length %zu does not match its counts", len);
    *pn = n, *pnin = nin;
    return 0;
}

int fx_gjournal_decode_snapshot(const uint8_t *buf, size_t len, fx_gjournal_state *s,
                                uint64_t *pseq, char *why, size_t whylen)
{
    size_t n, nin;
    int rv = snap_frame(buf, len, &n, &nin, why, whylen);
    if (rv != 0)
        return rv;
    fx_gjournal_state t;
    fx_gjournal_state_init(&t);
    t.floor = fx_be64_get(buf + 14);
    t.next = fx_be64_get(buf + 22);
    if (t.floor > t.next)
        return why_set(why, whylen, "snapshot floor %" PRIu64 " above next %" PRIu64, t.floor,
                       t.next);
    if ((n > 0 && (t.p = malloc(n * sizeof(*t.p))) == NULL) ||
        (nin > 0 && (t.in = malloc(nin * sizeof(*t.in))) == NULL)) {
        fx_gjournal_state_deinit(&t);
        return -ENOMEM;
    }
    t.n = t.cap = n;
    t.nin = t.incap = nin;
    rv = snap_pending(buf + 34, &t, why, whylen);
    if (rv == 0)
        rv = snap_intents(buf + 38 + n * SNAP_PENDING, &t, why, whylen);
    if (rv != 0) {
        fx_gjournal_state_deinit(&t);
        return rv;
    }
    fx_gjournal_state_deinit(s);
    *s = t;
    *pseq = fx_be64_get(buf + 6);
    return 0;
}

/* ---- the journal files ------------------------------------------------------ */

/* Journal header, 32 bytes: "FXGJ" | u16 version (1) | u16 reserved |
 * u64 base_seq (the records start at base_seq + 1) | u64 durable point
 * (bytes a completed fdatasync covered) | u32 reserved | u32 crc32 of bytes
 * 0..28. It fits one sector, so an in-place rewrite of the point is whole
 * or absent after a power cut, never torn. */
#define JRNL_MAGIC 0x46584A47u /* "FXGJ" */
#define JRNL_VERSION 1
#define HDR 32
/* Bytes read per pread while replaying, and copied per step of a restart. */
#define CHUNK 65536

struct fx_gjournal {
    fx_sio *io;
    int fd;
    int slot;           /* snapshot slot holding the newest snapshot; -1: none */
    int failed;         /* the error that stopped the journal, or 0 */
    uint64_t len;       /* bytes of the journal (header included) */
    uint64_t point;     /* durable point: bytes a completed fdatasync covered */
    uint64_t base_seq;  /* the journal's records start at base_seq + 1 */
    uint64_t seq;       /* last sequence number appended */
    uint64_t snap_seq;  /* journal sequence the newest snapshot covers */
    uint64_t carry_pos; /* where the records after snap_seq begin */
    uint64_t lim_bytes, lim_records;
    uint8_t *buf;
    size_t bufcap;
    fx_gjournal_stats st;
    char stem[FX_GJOURNAL_STEM_MAX];
    char dir[PATH_MAX];
};

static const char *const SNAP_SUFFIX[2] = {".snap.a", ".snap.b"};

static int path_of(const fx_gjournal *j, const char *suffix, char out[PATH_MAX])
{
    int n = snprintf(out, PATH_MAX, "%s/%s%s", j->dir, j->stem, suffix);
    return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

static void header_encode(uint8_t h[HDR], uint64_t base_seq, uint64_t point)
{
    memset(h, 0, HDR);
    fx_be32_put(h, JRNL_MAGIC);
    h[5] = JRNL_VERSION;
    fx_be64_put(h + 8, base_seq);
    fx_be64_put(h + 16, point);
    fx_be32_put(h + 28, fx_logfmt_crc(0, h, 28));
}

static const char *header_decode(const uint8_t h[HDR], uint64_t *pbase, uint64_t *ppoint)
{
    if (fx_be32_get(h) != JRNL_MAGIC)
        return "bad journal magic";
    if (h[4] != 0 || h[5] != JRNL_VERSION)
        return "unsupported journal version";
    if (fx_logfmt_crc(0, h, 28) != fx_be32_get(h + 28))
        return "journal header checksum mismatch";
    *pbase = fx_be64_get(h + 8);
    *ppoint = fx_be64_get(h + 16);
    return *ppoint < HDR ? "journal durable point inside the header" : NULL;
}

/* Stops the journal after a failure whose effect on the file is unknown. */
static int fail(fx_gjournal *j, int rv)
{
    if (j->failed == 0)
        j->failed = rv;
    return rv;
}

/* Copies [lo, hi) of the open journal into |fd| from |at|. */
static int copy_range(fx_gjournal *j, int fd, uint64_t lo, uint64_t hi, uint64_t at)
{
    uint8_t *b = malloc(CHUNK);
    if (b == NULL)
        return -ENOMEM;
    int rv = 0;
    while (rv == 0 && lo < hi) {
        size_t n = hi - lo < CHUNK ? (size_t)(hi - lo) : CHUNK;
        ssize_t got = j->io->ops->pread(j->io, j->fd, b, n, lo);
        if (got < 0)
            rv = (int)got;
        else if ((size_t)got != n)
            rv = -EIO; /* the journal is shorter than we wrote it */
        else
            rv = j->io->ops->pwrite(j->io, fd, b, n, at);
        lo += n, at += n;
    }
    free(b);
    return rv;
}

/* Writes the file of a new journal beside the current one, |tmp|: a header
 * for |base_seq|, then the bytes [lo, hi) of the current journal (none if
 * it is not open), flushed. */
static int write_new(fx_gjournal *j, const char *tmp, uint64_t base_seq, uint64_t lo, uint64_t hi)
{
    fx_sio *io = j->io;
    int rv = io->ops->unlink(io, tmp);
    if (rv != 0 && rv != -ENOENT)
        return rv;
    int fd;
    if ((rv = io->ops->open(io, tmp, FX_SIO_CREATE, &fd)) != 0)
        return rv;
    uint8_t h[HDR];
    header_encode(h, base_seq, HDR + (hi - lo));
    rv = io->ops->pwrite(io, fd, h, HDR, 0);
    if (rv == 0)
        rv = copy_range(j, fd, lo, hi, HDR);
    if (rv == 0)
        rv = io->ops->fdatasync(io, fd);
    int crv = io->ops->close(io, fd);
    if (rv == 0)
        rv = crv;
    if (rv != 0)
        (void)io->ops->unlink(io, tmp); /* best effort: the current journal is intact */
    return rv;
}

/* Restarts the journal: a new file with base |base_seq| holding the records
 * [lo, hi) of the current one replaces it atomically (rename, directory
 * sync); the journal then writes to it. Before the rename a failure leaves
 * the current journal in use; after it, the journal stops. */
static int restart(fx_gjournal *j, uint64_t base_seq, uint64_t lo, uint64_t hi)
{
    char tmp[PATH_MAX], path[PATH_MAX];
    int rv = path_of(j, ".jrnl.tmp", tmp);
    if (rv == 0)
        rv = path_of(j, ".jrnl", path);
    if (rv == 0)
        rv = write_new(j, tmp, base_seq, lo, hi);
    if (rv == 0 && (rv = j->io->ops->rename(j->io, tmp, path)) != 0)
        (void)j->io->ops->unlink(j->io, tmp);
    if (rv != 0)
        return rv;
    if (j->fd >= 0)
        (void)j->io->ops->close(j->io, j->fd); /* read-write; nothing to lose */
    j->fd = -1;
    rv = j->io->ops->open(j->io, path, FX_SIO_WRITE, &j->fd);
    if (rv == 0)
        rv = j->io->ops->sync_dir(j->io, j->dir);
    if (rv != 0)
        return fail(j, rv);
    j->base_seq = base_seq;
    j->len = j->point = j->carry_pos = HDR + (hi - lo);
    return 0;
}

/* ---- open: snapshots ---------------------------------------------------------- */

/* Reads snapshot slot |k| into |t|: 0, -ENOENT (no file),
 * FX_ESTORAGE_CORRUPT (reason in |reason|) or another error. */
static int load_one(fx_gjournal *j, int k, fx_gjournal_state *t, uint64_t *pseq, char *reason,
                    size_t rlen)
{
    char path[PATH_MAX], *buf;
    size_t len;
    int rv = path_of(j, SNAP_SUFFIX[k], path);
    if (rv == 0)
        rv = fx_sio_read_file(j->io, path, SNAP_MAX, &buf, &len);
    if (rv == -EFBIG)
        return why_set(reason, rlen, "snapshot larger than %zu bytes", (size_t)SNAP_MAX);
    if (rv != 0)
        return rv;
    rv = fx_gjournal_decode_snapshot((const uint8_t *)buf, len, t, pseq, reason, rlen);
    free(buf);
    return rv;
}

/* Loads the newest valid snapshot into |s| (untouched when none is valid)
 * and tells in *pany whether a snapshot file exists at all. Both files bad
 * is corruption; one bad one is a fallback to the other (or, with none, to
 * the empty state before the journal's first record: the journal's base
 * then decides whether that is whole). */
static int load_snapshots(fx_gjournal *j, fx_gjournal_state *s, bool *pany, char *why,
                          size_t whylen)
{
    int bad = -1, nbad = 0;
    char reason[160] = "";
    *pany = false;
    for (int k = 0; k < 2; k++) {
        fx_gjournal_state t;
        fx_gjournal_state_init(&t);
        uint64_t seq = 0;
        int rv = load_one(j, k, &t, &seq, reason, sizeof(reason));
        if (rv == -ENOENT)
            continue;
        *pany = true;
        if (rv == FX_ESTORAGE_CORRUPT) {
            bad = k, nbad++;
            continue;
        }
        if (rv != 0)
            return rv;
        if (j->slot < 0 || seq > j->snap_seq) {
            fx_gjournal_state_deinit(s);
            *s = t;
            j->slot = k, j->snap_seq = seq;
        } else {
            fx_gjournal_state_deinit(&t);
        }
    }
    j->st.snapshot_corrupt += (uint64_t)nbad;
    if (nbad == 2)
        return why_set(why, whylen, "file=%s%s, position=0: %s (and the other snapshot)", j->stem,
                       SNAP_SUFFIX[bad], reason);
    if (bad >= 0)
        j->st.snapshot_fallback++;
    return 0;
}

/* ---- open: the journal -------------------------------------------------------- */

/* Opens the journal file, making a new one for a new group. */
static int open_journal(fx_gjournal *j, bool create, bool any_snapshot, char *why, size_t whylen)
{
    char path[PATH_MAX];
    int rv = path_of(j, ".jrnl", path);
    if (rv == 0)
        rv = j->io->ops->open(j->io, path, FX_SIO_WRITE, &j->fd);
    if (rv != -ENOENT)
        return rv;
    j->fd = -1;
    if (any_snapshot)
        return why_set(why, whylen, "file=%s.jrnl, position=0: journal missing beside a snapshot",
                       j->stem);
    if (!create)
        return -ENOENT;
    rv = fx_sio_mkdirs(j->io, j->dir);
    return rv != 0 ? rv : restart(j, 0, 0, 0);
}

/* Reads the header; checks it against the file's length and the snapshot. */
static int read_header(fx_gjournal *j, uint64_t size, char *why, size_t whylen)
{
    uint8_t h[HDR];
    ssize_t got = size >= HDR ? j->io->ops->pread(j->io, j->fd, h, HDR, 0) : 0;
    if (got < 0)
        return (int)got;
    const char *bad = got == HDR ? header_decode(h, &j->base_seq, &j->point) : "journal too short";
    if (bad != NULL)
        return why_set(why, whylen, "file=%s.jrnl, position=0: %s", j->stem, bad);
    if (j->point > size)
        return why_set(why, whylen,
                       "file=%s.jrnl, position=%" PRIu64 ": the file ends before its durable "
                       "point %" PRIu64,
                       j->stem, size, j->point);
    if (j->snap_seq < j->base_seq)
        return why_set(why, whylen,
                       "file=%s.jrnl, position=0: the journal starts after seq %" PRIu64
                       " but the snapshot covers only up to %" PRIu64,
                       j->stem, j->base_seq, j->snap_seq);
    return 0;
}

/* A window on the journal file for the replay. */
typedef struct reader {
    uint8_t *b;
    uint64_t at;   /* file position of b[0] */
    size_t lo, hi; /* the current record is at b[lo], the bytes end at b[hi] */
    uint64_t size;
} reader;

/* Makes at least one whole record (or the end of the file) visible. */
static int fill(fx_gjournal *j, reader *r)
{
    if (r->hi - r->lo >= FX_GJOURNAL_REC_MAX || r->at + r->hi >= r->size)
        return 0;
    memmove(r->b, r->b + r->lo, r->hi - r->lo);
    r->at += r->lo, r->hi -= r->lo, r->lo = 0;
    uint64_t left = r->size - (r->at + r->hi);
    size_t n = left < CHUNK - r->hi ? (size_t)left : CHUNK - r->hi;
    ssize_t got = j->io->ops->pread(j->io, j->fd, r->b + r->hi, n, r->at + r->hi);
    if (got < 0)
        return (int)got;
    r->hi += (size_t)got;
    if ((size_t)got < n)
        r->size = r->at + r->hi;
    return 0;
}

/* The record at |pos| is bad: past the durable point it is a torn tail
 * (the journal ends there), before it damage no crash leaves. */
static int bad_record(fx_gjournal *j, uint64_t pos, const char *what, char *why, size_t whylen)
{
    if (pos < j->point)
        return why_set(why, whylen,
                       "file=%s.jrnl, position=%" PRIu64 ": %s before the durable point %" PRIu64,
                       j->stem, pos, what, j->point);
    j->len = pos;
    return 0;
}

/* Replays the journal records after the snapshot onto |s|; sets j->len to
 * the end of the valid records and j->seq to the last one's. */
static int replay(fx_gjournal *j, fx_gjournal_state *s, uint64_t size, char *why, size_t whylen)
{
    reader r = {.b = malloc(CHUNK), .at = HDR, .size = size};
    if (r.b == NULL)
        return -ENOMEM;
    uint64_t expect = j->base_seq + 1;
    int rv = 0;
    j->len = size;
    j->carry_pos = UINT64_MAX;
    while (rv == 0 && (rv = fill(j, &r)) == 0 && r.hi > r.lo) {
        uint64_t pos = r.at + r.lo;
        fx_gjournal_rec rec;
        size_t used = 0;
        fx_gjournal_status st = fx_gjournal_decode_record(r.b + r.lo, r.hi - r.lo, &rec, &used);
        if (st == FX_GJ_REC_OK && rec.seq != expect)
            st = FX_GJ_REC_BAD;
        if (st != FX_GJ_REC_OK) {
            rv = bad_record(j, pos, st == FX_GJ_REC_SHORT ? "a truncated record" : "a bad record",
                            why, whylen);
            break;
        }
        if (rec.seq > j->snap_seq) {
            if (j->carry_pos == UINT64_MAX)
                j->carry_pos = pos;
            if ((rv = fx_gjournal_state_apply(s, &rec)) == FX_ESTORAGE_CORRUPT)
                rv = why_set(why, whylen,
                             "file=%s.jrnl, position=%" PRIu64 ": more than %u pending records",
                             j->stem, pos, FX_GJOURNAL_MAX_PENDING);
            j->st.replayed++;
        }
        r.lo += used, expect++;
    }
    free(r.b);
    j->seq = expect - 1;
    if (rv == 0 && r.at + r.hi < size && j->len == size)
        j->len = r.at + r.hi; /* the file shrank under us: what was read is all */
    return rv;
}

/* After the replay: cuts a torn tail (flushed, so that later appends never
 * sit before old bytes), and restarts a journal the snapshot has passed
 * (a power cut after a compaction's snapshot lost records it covers: the
 * next sequence numbers must follow the snapshot's). */
static int settle_tail(fx_gjournal *j, uint64_t size)
{
    int rv = 0;
    if (j->len < size) {
        j->st.torn_tail_cut++;
        j->st.torn_bytes += size - j->len;
        rv = j->io->ops->ftruncate(j->io, j->fd, j->len);
        if (rv == 0)
            rv = j->io->ops->fdatasync(j->io, j->fd);
        if (rv != 0)
            return rv;
    }
    if (j->snap_seq > j->seq) {
        j->seq = j->snap_seq;
        return restart(j, j->snap_seq, 0, 0);
    }
    if (j->carry_pos == UINT64_MAX)
        j->carry_pos = j->len;
    return 0;
}

static int recover(fx_gjournal *j, bool create, fx_gjournal_state *s, char *why, size_t whylen)
{
    bool any = false;
    int rv = load_snapshots(j, s, &any, why, whylen);
    if (rv == 0)
        rv = open_journal(j, create, any, why, whylen);
    uint64_t size = 0;
    if (rv == 0)
        rv = j->io->ops->fsize(j->io, j->fd, &size);
    if (rv == 0)
        rv = read_header(j, size, why, whylen);
    if (rv == 0)
        rv = replay(j, s, size, why, whylen);
    if (rv == 0)
        rv = settle_tail(j, size);
    /* What was recovered becomes durable before anything builds on it: a
     * killed process leaves written records and renames that no flush
     * covered, and a power cut after the open must not take them back. */
    if (rv == 0)
        rv = j->io->ops->sync_dir(j->io, j->dir);
    if (rv == 0 && j->point < j->len)
        rv = fx_gjournal_sync(j);
    return rv;
}

int fx_gjournal_open(fx_gjournal **pj, fx_sio *io, const char *dir, const char *group, bool create,
                     fx_gjournal_state *out, fx_gjournal_stats *st, char *why, size_t whylen)
{
    if (why != NULL && whylen > 0)
        why[0] = '\0';
    if (strlen(dir) >= PATH_MAX)
        return -ENAMETOOLONG;
    fx_gjournal *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return -ENOMEM;
    *j = (fx_gjournal){.io = io, .fd = -1, .slot = -1};
    j->lim_bytes = FX_GJOURNAL_COMPACT_BYTES, j->lim_records = FX_GJOURNAL_COMPACT_RECORDS;
    fx_gjournal_stem(j->stem, group);
    memcpy(j->dir, dir, strlen(dir) + 1);
    fx_gjournal_state s;
    fx_gjournal_state_init(&s);
    int rv = recover(j, create, &s, why, whylen);
    if (st != NULL) {
        st->replayed += j->st.replayed;
        st->torn_tail_cut += j->st.torn_tail_cut;
        st->torn_bytes += j->st.torn_bytes;
        st->snapshot_corrupt += j->st.snapshot_corrupt;
        st->snapshot_fallback += j->st.snapshot_fallback;
    }
    if (rv != 0) {
        fx_gjournal_state_deinit(&s);
        if (j->fd >= 0)
            (void)io->ops->close(io, j->fd); /* nothing written to lose */
        free(j);
        return rv;
    }
    fx_gjournal_state_deinit(out);
    *out = s;
    *pj = j;
    return 0;
}

/* ---- writing ---------------------------------------------------------------- */

static bool rec_valid(const fx_gjournal_rec *r)
{
    if (body_len(r->type) == 0)
        return false;
    return !has_range(r->type) || (r->count > 0 && r->offset <= UINT64_MAX - r->count);
}

int fx_gjournal_append(fx_gjournal *j, const fx_gjournal_rec *recs, size_t n)
{
    if (j->failed != 0)
        return FX_ESTORAGE_FAILED;
    if (n == 0)
        return 0;
    if (n > SIZE_MAX / FX_GJOURNAL_REC_MAX)
        return -EINVAL;
    if (j->bufcap < n * FX_GJOURNAL_REC_MAX) {
        uint8_t *b = realloc(j->buf, n * FX_GJOURNAL_REC_MAX);
        if (b == NULL)
            return -ENOMEM;
        j->buf = b, j->bufcap = n * FX_GJOURNAL_REC_MAX;
    }
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (!rec_valid(&recs[i]))
            return -EINVAL;
        len += fx_gjournal_encode_record(&recs[i], j->seq + 1 + i, j->buf + len);
    }
    int rv = j->io->ops->pwrite(j->io, j->fd, j->buf, len, j->len);
    if (rv != 0) {
        /* A part may be on the file: cut it, or later appends would follow it. */
        int trv = j->io->ops->ftruncate(j->io, j->fd, j->len);
        return trv != 0 ? fail(j, rv) : rv;
    }
    j->len += len;
    j->seq += n;
    j->st.appends++;
    j->st.records += n;
    return 0;
}

/* Records the durable point |point| in the header (no flush of its own). */
static int write_point(fx_gjournal *j, uint64_t point)
{
    uint8_t h[HDR];
    header_encode(h, j->base_seq, point);
    int rv = j->io->ops->pwrite(j->io, j->fd, h, HDR, 0);
    if (rv != 0)
        return fail(j, rv);
    j->point = point;
    return 0;
}

int fx_gjournal_sync(fx_gjournal *j)
{
    if (j->failed != 0)
        return FX_ESTORAGE_FAILED;
    if (j->point == j->len)
        return 0;
    uint64_t covered = j->len;
    int rv = j->io->ops->fdatasync(j->io, j->fd);
    if (rv != 0)
        return fail(j, rv);
    j->st.syncs++;
    /* Written only once the flush returned: a point on the disk is never
     * ahead of the data it vouches for. */
    return write_point(j, covered);
}

int fx_gjournal_compact(fx_gjournal *j, const fx_gjournal_state *s)
{
    if (j->failed != 0)
        return FX_ESTORAGE_FAILED;
    uint8_t *buf;
    size_t len;
    int rv = fx_gjournal_encode_snapshot(s, j->seq, &buf, &len);
    if (rv != 0)
        return rv;
    int slot = j->slot == 0 ? 1 : 0; /* never the newest one */
    char path[PATH_MAX];
    rv = path_of(j, SNAP_SUFFIX[slot], path);
    if (rv == 0)
        rv = fx_sio_write_file_atomic(j->io, path, buf, len);
    free(buf);
    if (rv != 0)
        return rv;
    /* The snapshot kept beside the new one covers up to |kept|: the new
     * journal holds every record after it, so either snapshot recovers. */
    uint64_t kept = j->snap_seq, lo = j->carry_pos, hi = j->len;
    j->slot = slot;
    j->snap_seq = j->seq;
    j->carry_pos = j->len;
    if ((rv = restart(j, kept, lo, hi)) != 0)
        return rv;
    j->st.compactions++;
    return 0;
}

bool fx_gjournal_should_compact(const fx_gjournal *j)
{
    return j->len - j->carry_pos > j->lim_bytes || j->seq - j->snap_seq > j->lim_records;
}

void fx_gjournal_set_limits(fx_gjournal *j, uint64_t bytes, uint64_t records)
{
    if (bytes > 0)
        j->lim_bytes = bytes;
    if (records > 0)
        j->lim_records = records;
}

uint64_t fx_gjournal_seq(const fx_gjournal *j)
{
    return j->seq;
}

uint64_t fx_gjournal_size(const fx_gjournal *j)
{
    return j->len;
}

const fx_gjournal_stats *fx_gjournal_stats_of(const fx_gjournal *j)
{
    return &j->st;
}

int fx_gjournal_close(fx_gjournal *j, bool sync)
{
    if (j == NULL)
        return 0;
    int rv = 0;
    if (sync && j->point != j->len) {
        rv = fx_gjournal_sync(j);
        /* No next flush carries the new point: give it one. */
        if (rv == 0 && (rv = j->io->ops->fdatasync(j->io, j->fd)) != 0)
            fail(j, rv);
    }
    if (j->fd >= 0)
        (void)j->io->ops->close(j->io, j->fd); /* flushed above when asked */
    free(j->buf);
    free(j);
    return rv;
}

int fx_gjournal_remove(fx_sio *io, const char *dir, const char *group)
{
    static const char *const suffixes[] = {".snap.a",     ".snap.b", ".snap.a.tmp",
                                           ".snap.b.tmp", ".jrnl",   ".jrnl.tmp"};
    char stem[FX_GJOURNAL_STEM_MAX], path[PATH_MAX];
    fx_gjournal_stem(stem, group);
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        int n = snprintf(path, sizeof(path), "%s/%s%s", dir, stem, suffixes[i]);
        if (n < 0 || n >= (int)sizeof(path))
            return -ENAMETOOLONG;
        int rv = io->ops->unlink(io, path);
        if (rv != 0 && rv != -ENOENT)
            return rv;
    }
    int rv = io->ops->sync_dir(io, dir);
    return rv == -ENOENT ? 0 : rv;
}
