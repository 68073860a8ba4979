/* Stream state on its worker loop: the replay ring, the subscriber set and
 * the checkpoint-5 fanout. The ring holds envelope references (one per
 * appended batch, the same envelope the subscribers get), trimmed message by
 * message: the oldest entry may be partly trimmed (its |skip|), and its memory
 * goes when its last message does. Each subscriber remembers the first offset
 * it still needs from the fanout, which is what lets a parked fanout resume
 * without offering an envelope twice. Loop thread only. */
#include "broker/stream.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/loop.h"
#include "base/metrics.h"
#include "felix/error.h"

typedef struct ring_ent {
    fx_envelope *env;
    uint32_t skip; /* messages trimmed from its front */
} ring_ent;

struct fx_subscriber {
    fx_stream *stream;
    uint64_t id;
    uint64_t next; /* first offset the fanout still owes it */
    fx_queue q;
    bool closing; /* deinit: on_drop releases without counting */
    fx_subscriber_wake_cb on_wake;
    void *user;
    fx_subscriber_stats st;
};

struct fx_stream {
    fx_stream_opts o;
    ring_ent *ring; /* circular */
    size_t ring_cap, ring_head, ring_n;
    size_t msgs, bytes;
    uint64_t tail;
    fx_subscriber **subs;
    size_t nsubs, subs_cap;
    fx_envelope *pending;     /* envelope of a parked fanout */
    fx_subscriber *parked_on; /* whose queue the fanout waits for */
    fx_queue_waiter waiter;
    atomic_bool woken; /* the parked-on queue resumed us (may be set off-loop) */
};

/* ---- ring -------------------------------------------------------------------- */

static ring_ent *ring_at(const fx_stream *s, size_t i)
{
    return &s->ring[(s->ring_head + i) % s->ring_cap];
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
    s->bytes += fx_envelope_payload_bytes(e);
    return 0;
}

/* Drops the oldest retained message. */
static void ring_trim_one(fx_stream *s)
{
    ring_ent *r = ring_at(s, 0);
    s->bytes -= fx_envelope_payload(r->env, r->skip).len;
    s->msgs--;
    if (++r->skip == fx_envelope_count(r->env)) {
        fx_envelope_unref(r->env);
        s->ring_head = (s->ring_head + 1) % s->ring_cap;
        s->ring_n--;
    }
}

static void ring_trim(fx_stream *s)
{
    while (s->msgs > s->o.log_capacity || s->bytes > s->o.log_capacity_bytes)
        ring_trim_one(s);
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

int fx_stream_ring_get(const fx_stream *s, uint64_t offset, fx_wire_slice *out)
{
    if (offset < fx_stream_oldest(s) || offset >= s->tail)
        return -ENOENT;
    for (size_t i = 0; i < s->ring_n; i++) {
        fx_envelope *e = ring_at(s, i)->env;
        if (offset < fx_envelope_end_offset(e)) {
            *out = fx_envelope_payload(e, (uint32_t)(offset - fx_envelope_base_offset(e)));
            return 0;
        }
    }
    return -ENOENT;
}

/* ---- lifecycle ------------------------------------------------------------------ */

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
    atomic_init(&s->woken, false);
    fx_queue_waiter_init(&s->waiter, on_waiter_resume, s);
    *ps = s;
    return 0;
}

static void sub_free(fx_subscriber *sub)
{
    sub->closing = true;
    fx_queue_deinit(&sub->q); /* releases the queued envelopes through on_drop */
    free(sub);
}

/* Cancels the park on |sub|'s queue, if there is one. True if this call
 * cancelled it (so no resume will come from that queue). */
static bool unpark_from(fx_stream *s, fx_subscriber *sub)
{
    if (s->parked_on != sub)
        return false;
    s->parked_on = NULL;
    return fx_queue_unpark(&sub->q, &s->waiter);
}

void fx_stream_free(fx_stream *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->nsubs; i++) {
        (void)unpark_from(s, s->subs[i]); /* the stream goes: no resume wanted */
        sub_free(s->subs[i]);
    }
    free(s->subs);
    fx_envelope_unref(s->pending);
    while (s->ring_n > 0) {
        fx_envelope_unref(ring_at(s, 0)->env);
        s->ring_head = (s->ring_head + 1) % s->ring_cap;
        s->ring_n--;
    }
    free(s->ring);
    free(s);
}

/* ---- fanout --------------------------------------------------------------------- */

static fx_ratelimit sub_queue_drop_rl = FX_RATELIMIT_INIT;

/* Counts and releases one envelope lost to |sub|; |was_queued| when it had
 * been counted into the queue (an eviction or a leftover at close). Drops are
 * counted in messages (items), the unit the operator loses; the
 * per-subscription stats also keep envelopes. */
static void sub_shed(fx_subscriber *sub, fx_envelope *e, bool was_queued)
{
    if (was_queued)
        FX_GAUGE_SUB(sub_queue_len, 1);
    if (!sub->closing) {
        uint32_t n = fx_envelope_count(e);
        if (was_queued)
            sub->st.queued_items -= n;
        sub->st.dropped++;
        sub->st.dropped_items += n;
        FX_COUNTER_ADD(subscribe_dropped, n);
        FX_COUNTER_ADD(sub_queue_dropped, n);
        if (was_queued && sub->stream->o.sub_queue_policy == FX_QUEUE_DROP_OLD)
            FX_COUNTER_ADD(sub_queue_drop_old, n);
        FX_LOG_RATELIMITED(&sub_queue_drop_rl, fx_now_ns(), FX_LOG_WARN, "broker",
                           "subscriber queue full: dropped %u message(s) sub=%llu stream=%llu",
                           (unsigned)n, (unsigned long long)sub->id,
                           (unsigned long long)sub->stream->o.handle_id);
    }
    fx_envelope_unref(e);
}

/* on_drop of the subscriber queue: every envelope it sheds (drop_new refusal,
 * drop_old eviction) or still holds at deinit. */
static void sub_on_drop(void *item, void *user)
{
    fx_subscriber *sub = user;
    sub_shed(sub, item, sub->closing || sub->stream->o.sub_queue_policy == FX_QUEUE_DROP_OLD);
}

static void note_enqueued(fx_subscriber *sub, fx_envelope *e, uint64_t now, fx_fanout_result *res)
{
    uint32_t n = fx_envelope_count(e);
    sub->st.enqueued++;
    sub->st.enqueued_items += n;
    sub->st.queued_items += n;
    sub->st.last_enqueue_ns = now;
    res->delivered++;
    res->delivered_items += n;
    FX_COUNTER_INC(sub_queue_enqueued);
    FX_COUNTER_INC(sub_shared_batch_handles);
    FX_GAUGE_ADD(sub_queue_len, 1);
    if (sub->on_wake != NULL && fx_queue_depth(&sub->q) == 1)
        sub->on_wake(sub, sub->user);
}

/* Offers |e| to one subscriber. Returns 0 when it is done with this
 * subscriber (taken, shed or queue closed), FX_EFULL when a block queue is
 * full (nothing happened). */
static int offer(fx_subscriber *sub, fx_envelope *e, uint64_t now, fx_fanout_result *res)
{
    int rv = fx_queue_push(&sub->q, fx_envelope_ref(e));
    if (rv == 0) {
        note_enqueued(sub, e, now, res);
        return 0;
    }
    if (rv == -ENOMEM) {
        /* The queue's ring could not grow: shed it like a full drop_new
         * queue would, counted, whatever the policy. */
        res->dropped++;
        res->dropped_items += fx_envelope_count(e);
        sub_shed(sub, e, false); /* the reference the push did not take */
        return 0;
    }
    if (rv == FX_EFULL && sub->stream->o.sub_queue_policy == FX_QUEUE_DROP_NEW) {
        res->dropped++; /* on_drop released and counted it */
        res->dropped_items += fx_envelope_count(e);
        return 0;
    }
    fx_envelope_unref(e); /* block + full, or closed: we kept the reference */
    return rv == FX_ECLOSED ? 0 : rv;
}

/* Offers the pending envelope to every subscriber still owed it. */
static int fanout_run(fx_stream *s, uint64_t now, fx_fanout_result *res)
{
    fx_envelope *e = s->pending;
    uint64_t end = fx_envelope_end_offset(e);
    res->base_offset = fx_envelope_base_offset(e);
    for (size_t i = 0; i < s->nsubs; i++) {
        fx_subscriber *sub = s->subs[i];
        if (sub->next >= end)
            continue; /* took it before the park, or subscribed after the append */
        if (offer(sub, e, now, res) == FX_EFULL) {
            s->parked_on = sub;
            atomic_store_explicit(&s->woken, false, memory_order_relaxed);
            /* Set before parking: on_resume may run inside fx_queue_park. */
            if (fx_queue_park(&sub->q, &s->waiter) == 0)
                return -EAGAIN;
            s->parked_on = NULL; /* closed meanwhile: nothing to wait for */
        }
        sub->next = end;
    }
    s->pending = NULL;
    fx_envelope_unref(e);
    return 0;
}

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
    return fanout_run(s, now, res);
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
    return fanout_run(s, now, res);
}

bool fx_stream_is_parked(const fx_stream *s)
{
    return s->pending != NULL;
}

/* ---- subscribers ----------------------------------------------------------------- */

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

static int subs_add(fx_stream *s, fx_subscriber *sub)
{
    if (s->nsubs == s->subs_cap) {
        size_t cap = s->subs_cap ? s->subs_cap * 2 : 4;
        fx_subscriber **a = realloc(s->subs, cap * sizeof(*a));
        if (a == NULL)
            return -ENOMEM;
        s->subs = a;
        s->subs_cap = cap;
    }
    s->subs[s->nsubs++] = sub;
    return 0;
}

static int sub_new(fx_stream *s, const fx_subscribe_opts *o, fx_subscriber **psub)
{
    fx_subscriber *sub = calloc(1, sizeof(*sub));
    if (sub == NULL)
        return -ENOMEM;
    *sub = (fx_subscriber){.stream = s,
                           .id = o->subscription_id,
                           .next = s->tail,
                           .on_wake = o->on_wake,
                           .user = o->user};
    sub->st.subscription_id = o->subscription_id;
    fx_queue_opts qo = {.capacity = s->o.sub_queue_capacity,
                        .policy = s->o.sub_queue_policy,
                        .on_drop = sub_on_drop,
                        .user = sub,
                        .initial_cells = FX_SUB_QUEUE_INITIAL_CELLS};
    int rv = fx_queue_init(&sub->q, &qo);
    if (rv != 0) {
        free(sub);
        return rv;
    }
    *psub = sub;
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
    rv = sub_new(s, o, &sub);
    if (rv != 0)
        return rv;
    rv = snapshot_backlog(s, from, backlog);
    if (rv == 0)
        rv = subs_add(s, sub);
    if (rv != 0) {
        fx_backlog_free(backlog);
        sub_free(sub);
        return rv;
    }
    *psub = sub;
    return 0;
}

void fx_stream_unsubscribe(fx_stream *s, fx_subscriber *sub)
{
    for (size_t i = 0; i < s->nsubs; i++) {
        if (s->subs[i] == sub) {
            s->subs[i] = s->subs[--s->nsubs];
            break;
        }
    }
    /* The fanout waited for this queue: nobody will drain it now, so resume
     * the worker ourselves (it continues with the remaining subscribers). */
    if (unpark_from(s, sub))
        s->o.on_resume(s, s->o.user);
    sub_free(sub);
}

size_t fx_stream_subscriber_count(const fx_stream *s)
{
    return s->nsubs;
}

int fx_subscriber_pop(fx_subscriber *sub, uint64_t now, fx_envelope **pe)
{
    void *item;
    int rv = fx_queue_pop(&sub->q, &item);
    if (rv != 0)
        return rv;
    *pe = item;
    sub->st.queued_items -= fx_envelope_count(*pe);
    sub->st.dequeued++;
    sub->st.last_delivery_ns = now;
    FX_COUNTER_INC(sub_queue_dequeued);
    FX_GAUGE_SUB(sub_queue_len, 1);
    return 0;
}

bool fx_subscriber_pull(void *user, fx_env_item *out)
{
    fx_subscriber_puller *p = user;
    fx_envelope *e;
    if (fx_subscriber_pop(p->sub, p->now, &e) != 0)
        return false;
    *out = (fx_env_item){.env = e, .skip = 0};
    return true;
}

void fx_subscriber_get_stats(const fx_subscriber *sub, fx_subscriber_stats *st)
{
    *st = sub->st;
    st->depth = fx_queue_depth(&sub->q);
    st->capacity = fx_queue_capacity(&sub->q);
}

uint64_t fx_subscriber_id(const fx_subscriber *sub)
{
    return sub->id;
}
