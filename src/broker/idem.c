/* Idempotent publish on the stream's worker: the rules of facts §2.3 over
 * an fx_producers table per in-memory stream (storage/producers.c, pure, no
 * locks: the worker is its only user), and the answers. Worker thread
 * unless noted. */
#include "broker/idem.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/broker_internal.h"
#include "broker/reply.h"
#include "broker/worker.h"
#include "storage/format.h"
#include "storage/producers.h"

uint64_t fxb_idem_new_producer_id(void)
{
    uint64_t id = 0;
    while (id == 0) {
        randombytes_buf(&id, sizeof(id));
        id &= (uint64_t)INT64_MAX;
    }
    return id;
}

/* The table of |h| on |w|, made when |make|; NULL when none (or no memory
 * with |make|). */
static fx_producers *table_of(fxb_worker *w, const fx_stream_handle *h, bool make)
{
    uint64_t id = fx_stream_handle_id(h);
    fxb_idslot *e = fxb_idtable_find(&w->idem, id);
    if (e != NULL)
        return e->p;
    if (!make)
        return NULL;
    fx_producers *tab;
    if (fx_producers_new(&tab, 0, FX_PRODUCERS_DEFAULT_TTL_S) != 0)
        return NULL;
    if (fxb_idtable_insert(&w->idem, id, tab) != 0) {
        fx_producers_free(tab);
        return NULL;
    }
    return tab;
}

uint64_t fxb_idem_digest(const fxb_job *j)
{
    uint64_t d = 0;
    for (uint32_t i = 0; i < j->count; i++)
        d = fx_producer_digest_step(d, j->payloads[i].ptr, (uint32_t)j->payloads[i].len);
    return d;
}

bool fxb_idem_check(fxb_worker *w, fxb_job *j, uint64_t now)
{
    fxb_job_idem *x = &j->idem;
    (void)now;
    x->digest = fxb_idem_digest(j);
    /* The worker's tables retire nobody (no retention of a log): no clock. */
    return fxb_idem_decide(table_of(w, j->h, false), x, 0, false);
}

bool fxb_idem_decide(const fx_producers *tab, fxb_job_idem *x, uint64_t now_us, bool partial_ok)
{
    fx_prod_answer a = {.verdict = FX_PROD_UNKNOWN};
    if (tab != NULL)
        fx_producers_lookup(tab, x->producer_id, x->sequence, x->digest, now_us, &a);
    else if (x->sequence == 0)
        a.verdict = FX_PROD_NEXT;
    x->verdict = (uint8_t)a.verdict;
    switch (a.verdict) {
    case FX_PROD_NEXT:
        return true;
    case FX_PROD_DUPLICATE:
        x->first = a.first;
        FX_COUNTER_INC(idem_duplicate);
        break;
    case FX_PROD_GAP:
        x->expected = a.expected;
        FX_COUNTER_INC(idem_gap);
        break;
    case FX_PROD_EXPIRED:
        FX_COUNTER_INC(idem_expired);
        break;
    case FX_PROD_UNKNOWN:
        FX_COUNTER_INC(idem_unknown);
        break;
    case FX_PROD_PARTIAL:
        if (partial_ok) {
            x->first = a.first;
            x->held = a.held;
            x->count = a.count;
            x->held_digest = a.digest;
            break;
        }
        x->verdict = FX_PROD_REUSED; /* the caller cannot complete it: another batch */
        FX_COUNTER_INC(idem_reused);
        break;
    case FX_PROD_REUSED:
    default:
        x->verdict = FX_PROD_REUSED;
        FX_COUNTER_INC(idem_reused);
        break;
    }
    return false;
}

static fx_ratelimit idem_rl = FX_RATELIMIT_INIT;

void fxb_idem_appended(fxb_worker *w, fxb_job *j, uint64_t first)
{
    fxb_job_idem *x = &j->idem;
    x->first = first;
    fx_producers *tab = table_of(w, j->h, true);
    if (tab == NULL) {
        /* Appended but not remembered: a re-send would be unknown_producer
         * or a gap, never a duplicate append of a remembered batch. */
        FX_LOG_RATELIMITED(&idem_rl, fx_loop_now(w->loop), FX_LOG_WARN, "broker",
                           "stream %llu: producer %" PRIu64 " sequence %" PRIu64
                           " appended but not remembered: out of memory",
                           (unsigned long long)fx_stream_handle_id(j->h), x->producer_id,
                           x->sequence);
        return;
    }
    uint64_t forgotten = fx_producers_stats_get(tab)->forgotten;
    size_t before = fx_producers_count(tab);
    if (fx_producers_note(tab, x->producer_id, x->sequence, first, j->count, j->count, x->digest,
                          true) != 0)
        FX_LOG_RATELIMITED(&idem_rl, fx_loop_now(w->loop), FX_LOG_WARN, "broker",
                           "stream %llu: producer %" PRIu64 " sequence %" PRIu64
                           " appended but not remembered: out of memory",
                           (unsigned long long)fx_stream_handle_id(j->h), x->producer_id,
                           x->sequence);
    FX_COUNTER_ADD(idem_forgotten, fx_producers_stats_get(tab)->forgotten - forgotten);
    FX_GAUGE_ADD(idem_producers, (int64_t)fx_producers_count(tab) - (int64_t)before);
}

/* The answer message of a decided |x| (|text| holds its message). */
static void answer_msg(const fxb_job_idem *x, uint64_t rid, fx_msg *m, char *text, size_t cap)
{
    bool offsets = (x->features & FX_FEATURE_EXTENDED) != 0 &&
                   (x->features_hi & FX_FEATURE_HI_PUBLISH_OFFSETS) != 0;
    fx_msg_refusal r = {0};
    switch (x->verdict) {
    case FX_PROD_NEXT:
    case FX_PROD_DUPLICATE:
        fx_msg_init_publish_ok(m, rid);
        if (offsets) {
            m->has_offset = true;
            m->offset = x->first;
            m->duplicate = x->verdict == FX_PROD_DUPLICATE;
        }
        return;
    case FX_PROD_GAP:
        r.kind = FX_MSG_REFUSAL_SEQUENCE_GAP;
        r.expected = x->expected;
        snprintf(text, cap, "sequence gap: expected %" PRIu64, x->expected);
        break;
    case FX_PROD_UNKNOWN:
        r.kind = FX_MSG_REFUSAL_UNKNOWN_PRODUCER;
        snprintf(text, cap, "unknown producer %" PRIu64 ": nothing to check its sequence against",
                 x->producer_id);
        break;
    case FX_PROD_EXPIRED:
        r.kind = FX_MSG_REFUSAL_SEQUENCE_EXPIRED;
        snprintf(text, cap, "sequence %" PRIu64 " is older than the window this broker keeps",
                 x->sequence);
        break;
    default:
        if ((x->features & FX_FEATURE_SEQUENCE_REUSED) == 0) {
            /* The original's answer to a client that does not know the
             * reason: ok, nothing written. */
            fx_msg_init_publish_ok(m, rid);
            return;
        }
        r.kind = FX_MSG_REFUSAL_SEQUENCE_REUSED;
        snprintf(text, cap, "sequence %" PRIu64 " already holds a batch with different payloads",
                 x->sequence);
        break;
    }
    fx_msg_init_publish_refused(m, rid, r, text);
}

void fxb_idem_answer(fxb_job *j, int rv, const char *err)
{
    for (uint32_t i = 0; i < j->nacks; i++) {
        fxb_reply *r = j->acks[i];
        if (rv != 0) {
            fxb_reply_complete(r, err);
        } else {
            fx_msg m;
            char text[160];
            fx_buf *frame = NULL;
            answer_msg(&j->idem, r->request_id, &m, text, sizeof(text));
            if (fxb_msg_frame(&m, &frame) != 0)
                frame = NULL; /* the stream is reset when it reaches the head */
            fxb_reply_complete_frame(r, frame);
        }
        j->acks[i] = NULL;
        if (!fx_loop_post(r->loop, &r->task))
            fxb_reply_unref(r); /* cannot be pending twice: the slot completes once */
    }
    j->nacks = 0;
}

uint64_t fxb_idem_producers(fxb_worker *w, uint64_t stream_id)
{
    fxb_idslot *e = fxb_idtable_find(&w->idem, stream_id);
    return e != NULL ? fx_producers_count(e->p) : 0;
}

void fxb_idem_stream_gone(fxb_worker *w, const fx_stream_handle *h)
{
    fxb_idslot *e = fxb_idtable_find(&w->idem, fx_stream_handle_id(h));
    if (e == NULL)
        return;
    fx_producers *tab = e->p;
    FX_GAUGE_SUB(idem_producers, (int64_t)fx_producers_count(tab));
    fx_producers_free(tab);
    fxb_idtable_remove(&w->idem, e);
}

void fxb_idem_free_all(fxb_worker *w)
{
    size_t pos = 0;
    fxb_idslot *e;
    while ((e = fxb_idtable_next(&w->idem, &pos)) != NULL) {
        FX_GAUGE_SUB(idem_producers, (int64_t)fx_producers_count(e->p));
        fx_producers_free(e->p);
    }
    fxb_idtable_deinit(&w->idem);
}
