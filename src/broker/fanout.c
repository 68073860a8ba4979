/* The fanout (checkpoint 5): one shared envelope per appended batch is
 * offered to every subscriber queue under block / drop_new / drop_old. Each
 * subscriber remembers the first offset it still needs, which lets a parked
 * fanout resume without offering an envelope twice. Worker loop only. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/log.h"
#include "base/loop.h"
#include "base/metrics.h"
#include "broker/stream.h"
#include "broker/stream_internal.h"
#include "felix/error.h"

/* ---- drops ------------------------------------------------------------------------------- */

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

/* ---- offering an envelope ---------------------------------------------------------------- */

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
int fx_fanout_run(fx_stream *s, uint64_t now, fx_fanout_result *res)
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
            s->park_seq++;
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

bool fx_stream_is_parked(const fx_stream *s)
{
    return s->pending != NULL;
}

fx_subscriber *fx_stream_parked_on(const fx_stream *s)
{
    return s->pending != NULL ? s->parked_on : NULL;
}

uint64_t fx_stream_park_seq(const fx_stream *s)
{
    return s->park_seq;
}

/* ---- subscriber queues ------------------------------------------------------------------- */

/* Cancels the park on |sub|'s queue, if there is one. True if this call
 * cancelled it (so no resume will come from that queue). */
bool fx_fanout_unpark(fx_stream *s, fx_subscriber *sub)
{
    if (s->parked_on != sub)
        return false;
    s->parked_on = NULL;
    return fx_queue_unpark(&sub->q, &s->waiter);
}

int fx_fanout_sub_new(fx_stream *s, const fx_subscribe_opts *o, fx_subscriber **psub)
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

void fx_fanout_sub_free(fx_subscriber *sub)
{
    sub->closing = true;
    fx_queue_deinit(&sub->q); /* releases the queued envelopes through on_drop */
    free(sub);
}

int fx_fanout_subs_add(fx_stream *s, fx_subscriber *sub)
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
    if (fx_fanout_unpark(s, sub))
        s->o.on_resume(s, s->o.user);
    fx_fanout_sub_free(sub);
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

void *fx_subscriber_user(const fx_subscriber *sub)
{
    return sub->user;
}
