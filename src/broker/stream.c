/* Stream state on its worker loop: the replay ring, start positions and the
 * backlog snapshot, and the append that hands each batch to the fanout
 * (fanout.c), or resumes a parked fanout (fx_stream_resume). The ring holds
 * envelope references (one per appended batch, the same envelope the
 * subscribers get), trimmed message by message: the oldest entry may be
 * partly trimmed (its |skip|). Loop thread only. */
#include "broker/stream.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/loop.h"
#include "base/metrics.h"
#include "broker/stream_internal.h"
#include "felix/error.h"

/* ---- ring -------------------------------------------------------------------------------- */

static ring_ent *ring_at(const fx_stream *s, size_t i)
{
    return &s->ring[(s->ring_head + i) % s->ring_cap];
}

/* Adds |delta| bytes to the ring's charge; the accounts get the sum of a
 * turn's changes at once (publish_accounts), not one atomic per message. */
static void charge(fx_stream *s, int64_t delta)
{
    s->bytes = (size_t)((int64_t)s->bytes + delta);
    s->unposted += delta;
}

/* Hands the changes charged since the last call to the accounts. */
static void publish_accounts(fx_stream *s)
{
    int64_t d = s->unposted;
    if (d == 0)
        return;
    s->unposted = 0;
    if (s->o.global != NULL)
        atomic_fetch_add_explicit(&s->o.global->bytes, d, memory_order_relaxed);
    if (s->o.tenant != NULL)
        atomic_fetch_add_explicit(&s->o.tenant->bytes, d, memory_order_relaxed);
    FX_GAUGE_ADD(stream_retained_bytes, d);
}

static int64_t batch_overhead(const fx_envelope *e)
{
    return (int64_t)fx_envelope_count(e) * (int64_t)FX_STREAM_MSG_OVERHEAD;
}

static int ring_push(fx_stream *s, fx_envelope *e)
{
    if (s->ring_n == s->ring_cap) {
        size_t cap = s->ring_cap ? s->ring_cap * 2 : 8;
        ring_ent *r = malloc(cap * sizeof(*r));
        if (r == NULL)
            return -ENOMEM;
        for (size_t i = 0; i < s->ring_n; i++)
            r[i] = *ring_at(s, i);
        free(s->ring);
        s->ring = r;
        s->ring_cap = cap;
        s->ring_head = 0;
    }
    *ring_at(s, s->ring_n++) = (ring_ent){.env = e};
    s->msgs += fx_envelope_count(e);
    charge(s, (int64_t)fx_envelope_payload_bytes(e) + batch_overhead(e));
    return 0;
}

/* Drops the oldest retained message. */
static void ring_trim_one(fx_stream *s)
{
    ring_ent *r = ring_at(s, 0);
    charge(s, -(int64_t)fx_envelope_payload(r->env, r->skip).len);
    s->msgs--;
    if (++r->skip == fx_envelope_count(r->env)) {
        charge(s, -batch_overhead(r->env));
        fx_envelope_unref(r->env);
        s->ring_head = (s->ring_head + 1) % s->ring_cap;
        s->ring_n--;
    }
}

static fx_ratelimit evict_rl = FX_RATELIMIT_INIT;

/* While |a| is over its limit, evicts this ring's oldest messages (the
 * appending stream pays first: an append never raises an account above its
 * limit by more than the batch, and only until the next append). */
static void evict_for(fx_stream *s, fx_retained *a, bool tenant)
{
    if (a == NULL)
        return;
    publish_accounts(s);
    int64_t over = atomic_load_explicit(&a->bytes, memory_order_relaxed) - (int64_t)a->limit;
    if (a->limit == 0 || over <= 0)
        return;
    uint64_t n = 0;
    for (size_t target = s->bytes > (size_t)over ? s->bytes - (size_t)over : 0;
         s->msgs > 0 && s->bytes > target; n++)
        ring_trim_one(s);
    publish_accounts(s);
    if (n == 0)
        return;
    if (tenant)
        FX_COUNTER_ADD(stream_evicted_tenant_quota, n);
    else
        FX_COUNTER_ADD(stream_evicted_retained_limit, n);
    FX_LOG_RATELIMITED(&evict_rl, fx_now_ns(), FX_LOG_WARN, "broker",
                       "%s reached: evicted the %llu oldest message(s) of stream %llu",
                       tenant ? "tenant_retained_bytes" : "retained_bytes_limit",
                       (unsigned long long)n, (unsigned long long)s->o.handle_id);
}

static void ring_trim(fx_stream *s)
{
    while (s->msgs > 0 && (s->msgs > s->o.log_capacity || s->bytes > s->o.log_capacity_bytes))
        ring_trim_one(s);
    evict_for(s, s->o.tenant, true);
    evict_for(s, s->o.global, false);
    publish_accounts(s);
}

/* Payload bytes of |r|'s messages not trimmed yet. */
static uint64_t ent_payload_bytes(const ring_ent *r)
{
    if (r->skip == 0)
        return fx_envelope_payload_bytes(r->env);
    uint64_t n = 0;
    for (uint32_t k = r->skip; k < fx_envelope_count(r->env); k++)
        n += fx_envelope_payload(r->env, k).len;
    return n;
}

static bool over_bounds(const fx_stream *s, uint64_t msgs, uint64_t bytes)
{
    return msgs > s->o.log_capacity || bytes > s->o.log_capacity_bytes;
}

/* ring_trim's bounds walk without trimming: whole batches while the ring
 * stays over without them, then message by message in the batch where it
 * stops. */
uint64_t fx_stream_evict_end(const fx_stream *s, uint32_t count, uint64_t bytes)
{
    uint64_t msgs = s->msgs + count, end = fx_stream_oldest(s);
    uint64_t total = s->bytes + bytes + (uint64_t)count * FX_STREAM_MSG_OVERHEAD;
    for (size_t i = 0; i < s->ring_n && over_bounds(s, msgs, total); i++) {
        const ring_ent *r = ring_at(s, i);
        uint32_t n = fx_envelope_count(r->env) - r->skip;
        uint64_t all = ent_payload_bytes(r) + (uint64_t)batch_overhead(r->env);
        if (over_bounds(s, msgs - n, total - all)) {
            msgs -= n, total -= all, end += n; /* the whole batch goes */
            continue;
        }
        /* Not over once the whole batch is gone: stops within it. */
        for (uint32_t k = r->skip; over_bounds(s, msgs, total); k++, end++) {
            total -= fx_envelope_payload(r->env, k).len;
            msgs--;
            if (k + 1 == fx_envelope_count(r->env))
                total -= (uint64_t)batch_overhead(r->env);
        }
    }
    if (over_bounds(s, msgs, total)) /* the new batch itself does not fit */
        end = s->tail + (count > s->o.log_capacity ? count - s->o.log_capacity : 0);
    return end;
}

uint64_t fx_stream_tail(const fx_stream *s)
{
    return s->tail;
}

uint64_t fx_stream_oldest(const fx_stream *s)
{
    return s->tail - s->msgs;
}

size_t fx_stream_ring_messages(const fx_stream *s)
{
    return s->msgs;
}

size_t fx_stream_ring_bytes(const fx_stream *s)
{
    return s->bytes;
}

/* Index of the ring batch holding retained |offset| (oldest <= offset <
 * tail): the batches are in offset order, so the first whose end is past
 * |offset| (a binary search: a group reads a backlog of a million
 * one-message batches at any point). */
static size_t ring_find(const fx_stream *s, uint64_t offset)
{
    size_t lo = 0, hi = s->ring_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (offset < fx_envelope_end_offset(ring_at(s, mid)->env))
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

uint32_t fx_stream_ring_read(const fx_stream *s, uint64_t offset, uint32_t n, fx_wire_slice *out)
{
    if (n == 0 || offset < fx_stream_oldest(s) || offset >= s->tail)
        return 0;
    uint32_t k = 0;
    for (size_t i = ring_find(s, offset); i < s->ring_n && k < n; i++) {
        fx_envelope *e = ring_at(s, i)->env;
        uint64_t base = fx_envelope_base_offset(e), end = fx_envelope_end_offset(e);
        for (uint64_t o = offset + k; o < end && k < n; o++)
            out[k++] = fx_envelope_payload(e, (uint32_t)(o - base));
    }
    return k;
}

int fx_stream_ring_get(const fx_stream *s, uint64_t offset, fx_wire_slice *out)
{
    if (offset < fx_stream_oldest(s) || offset >= s->tail)
        return -ENOENT;
    size_t lo = ring_find(s, offset);
    if (lo == s->ring_n)
        return -ENOENT;
    fx_envelope *e = ring_at(s, lo)->env;
    *out = fx_envelope_payload(e, (uint32_t)(offset - fx_envelope_base_offset(e)));
    return 0;
}

/* ---- lifecycle --------------------------------------------------------------------------- */

static void on_waiter_resume(void *user)
{
    fx_stream *s = user;
    atomic_store_explicit(&s->woken, true, memory_order_release);
    s->o.on_resume(s, s->o.user);
}

int fx_stream_new(fx_stream **ps, const fx_stream_opts *o)
{
    if (o->log_capacity == 0 || o->log_capacity_bytes == 0 || o->sub_queue_capacity == 0 ||
        o->sub_queue_capacity > FX_QUEUE_MAX_CAPACITY ||
        (o->sub_queue_policy == FX_QUEUE_BLOCK && o->on_resume == NULL))
        return -EINVAL;
    fx_stream *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->o = *o;
    fx_retained_ref(s->o.tenant);
    s->tail = o->first_offset;
    atomic_init(&s->woken, false);
    fx_queue_waiter_init(&s->waiter, on_waiter_resume, s);
    *ps = s;
    return 0;
}

void fx_stream_free(fx_stream *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->nsubs; i++) {
        (void)fx_fanout_unpark(s, s->subs[i]); /* the stream goes: no resume wanted */
        fx_fanout_sub_free(s->subs[i]);
    }
    free(s->subs);
    fx_envelope_unref(s->pending);
    charge(s, -(int64_t)s->bytes);
    publish_accounts(s);
    while (s->ring_n > 0) {
        fx_envelope_unref(ring_at(s, 0)->env);
        s->ring_head = (s->ring_head + 1) % s->ring_cap;
        s->ring_n--;
    }
    fx_retained_unref(s->o.tenant);
    free(s->ring);
    free(s);
}

/* ---- append ------------------------------------------------------------------------------ */

int fx_stream_publish(fx_stream *s, fx_buf *backing, const fx_wire_slice *payloads, uint32_t count,
                      uint64_t now, fx_fanout_result *res)
{
    *res = (fx_fanout_result){.base_offset = s->tail};
    if (s->pending != NULL)
        return -EBUSY;
    fx_envelope *e;
    int rv = fx_envelope_new(&e, s->o.handle_id, s->tail, backing, payloads, count);
    if (rv != 0)
        return rv;
    rv = ring_push(s, e);
    if (rv != 0) {
        fx_envelope_unref(e);
        return rv;
    }
    s->tail += count;
    ring_trim(s);
    s->pending = fx_envelope_ref(e);
    return fx_fanout_run(s, now, res);
}

int fx_stream_publish_at(fx_stream *s, uint64_t offset, fx_buf *backing,
                         const fx_wire_slice *payloads, uint32_t count, uint64_t now,
                         fx_fanout_result *res, uint64_t *pskipped)
{
    if (pskipped != NULL)
        *pskipped = 0;
    if (s->pending != NULL) {
        *res = (fx_fanout_result){.base_offset = s->tail};
        return -EBUSY;
    }
    if (offset < s->tail) {
        *res = (fx_fanout_result){.base_offset = s->tail};
        return -ERANGE;
    }
    if (offset > s->tail) {
        /* The ring holds offsets contiguous up to the tail: a jump empties
         * it. Subscribers registered already hold their envelopes. */
        while (s->msgs > 0)
            ring_trim_one(s);
        publish_accounts(s);
        if (pskipped != NULL)
            *pskipped = offset - s->tail;
        s->tail = offset;
    }
    return fx_stream_publish(s, backing, payloads, count, now, res);
}

int fx_stream_resume(fx_stream *s, uint64_t now, fx_fanout_result *res)
{
    *res = (fx_fanout_result){.base_offset = s->tail};
    if (s->pending == NULL)
        return 0;
    /* A resume before the queue woke us would park the waiter twice. */
    if (s->parked_on != NULL && !atomic_load_explicit(&s->woken, memory_order_acquire))
        return -EAGAIN;
    s->parked_on = NULL;
    return fx_fanout_run(s, now, res);
}

/* ---- subscribing ------------------------------------------------------------------------- */

void fx_backlog_free(fx_backlog *b)
{
    for (size_t i = 0; i < b->n; i++)
        fx_envelope_unref(b->items[i].env);
    free(b->items);
    *b = (fx_backlog){0};
}

static int start_offset(const fx_stream *s, const fx_start *start, uint64_t *pfrom,
                        uint64_t *pavailable)
{
    uint64_t oldest = fx_stream_oldest(s);
    switch (start->kind) {
    case FX_START_LATEST:
        *pfrom = s->tail;
        return 0;
    case FX_START_EARLIEST:
        *pfrom = oldest;
        return 0;
    case FX_START_OFFSET:
        break;
    }
    if (start->offset > s->tail) {
        *pavailable = s->tail;
        return FX_ECURSOR_IN_FUTURE;
    }
    if (start->offset < oldest) {
        *pavailable = oldest;
        return FX_ECURSOR_TOO_OLD;
    }
    *pfrom = start->offset;
    return 0;
}

/* Fills |b| with references to the retained batches from offset |from|. */
static int snapshot_backlog(const fx_stream *s, uint64_t from, fx_backlog *b)
{
    *b = (fx_backlog){0};
    if (from >= s->tail)
        return 0;
    b->items = malloc(s->ring_n * sizeof(*b->items));
    if (b->items == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < s->ring_n; i++) {
        const ring_ent *r = ring_at(s, i);
        uint64_t base = fx_envelope_base_offset(r->env);
        if (fx_envelope_end_offset(r->env) <= from)
            continue;
        uint32_t skip = from > base ? (uint32_t)(from - base) : 0;
        if (skip < r->skip)
            skip = r->skip;
        b->items[b->n++] = (fx_env_item){.env = fx_envelope_ref(r->env), .skip = skip};
    }
    return 0;
}

int fx_stream_subscribe(fx_stream *s, const fx_start *start, const fx_subscribe_opts *o,
                        fx_subscriber **psub, fx_backlog *backlog, uint64_t *pavailable)
{
    uint64_t from = 0, avail = 0;
    *backlog = (fx_backlog){0};
    int rv = start_offset(s, start, &from, &avail);
    if (rv != 0) {
        if (pavailable != NULL)
            *pavailable = avail;
        return rv;
    }
    fx_subscriber *sub;
    rv = fx_fanout_sub_new(s, o, &sub);
    if (rv != 0)
        return rv;
    rv = snapshot_backlog(s, from, backlog);
    if (rv == 0)
        rv = fx_fanout_subs_add(s, sub);
    if (rv != 0) {
        fx_backlog_free(backlog);
        fx_fanout_sub_free(sub);
        return rv;
    }
    *psub = sub;
    return 0;
}
