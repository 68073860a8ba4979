/* libfelix subscriptions: the subscribe request stream (auth, subscribe,
 * FIN, then `subscribed` or an error), the broker's event uni stream (hello,
 * then event batches) routed to its subscription in either arrival order,
 * the per-subscription queue with its policy, gap detection, and credit:
 * under Block the client grants QUIC credit for a batch only once the
 * application has consumed it, so a stalled consumer slows the broker.
 * Public functions: any thread; the rest: the client loop. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/blk.h"
#include "base/grow.h"
#include "base/log.h"
#include "client/client.h"

enum { SUB_PENDING = 0, SUB_LIVE, SUB_ENDED };
#define RESET_CODE 0x10c /* "unsubscribed": any code works, the broker only sees a reset */

static void evs_feed(evs *e, const uint8_t *data, size_t len);
static void sweep_orphans(cconn *cc);
static int send_subscribe(fx_subscription *s, cconn *cc, const fx_start *start);
static void redirect(fx_subscription *s);
static void move_retry_arm(fx_subscription *s);

/* ---- lifetime --------------------------------------------------------------------- */

static void batch_free(void *item, void *user)
{
    (void)user;
    sbatch *b = item;
    fx_wire_event_batch_deinit(&b->eb);
    fx_blk_free(b);
}

static void batch_dropped(void *item, void *user)
{
    /* fxc_sub_unref empties the queue before its deinit, so every call here
     * is a real shed by the policy. */
    fx_subscription *s = user;
    sbatch *b = item;
    atomic_fetch_add(&s->dropped, b->eb.count);
    atomic_fetch_add(&s->dropped_batches, 1);
    batch_free(item, NULL);
}

void fxc_sub_unref(fx_subscription *s)
{
    if (s == NULL || atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    if (s->cur != NULL)
        batch_free(s->cur, NULL);
    /* Items still queued are released, not dropped. */
    void *it;
    while (fx_queue_pop(&s->q, &it) == 0)
        batch_free(it, NULL);
    fx_queue_deinit(&s->q);
    fx_frame_decoder_deinit(&s->req_dec);
    fx_client *c = s->c;
    /* Credit held back for a stream that is gone no longer counts. */
    atomic_fetch_sub(&c->held_credit, atomic_exchange(&s->credit_bytes, 0));
    free(s->ns);
    free(s->stream);
    free(s);
    fxc_client_unref(c);
}

static void sub_wake_all(fx_subscription *s);

/* Ends |s| with |code| (once): wakes its consumer and a subscribe waiting. */
static void sub_end(fx_subscription *s, int code, const char *msg, uint64_t req, uint64_t avail)
{
    fx_client *c = s->c;
    pthread_mutex_lock(&c->mu);
    if (s->state != SUB_ENDED) {
        s->state = SUB_ENDED;
        s->err.code = code;
        snprintf(s->err.message, sizeof(s->err.message), "%s", msg);
        s->err.requested = req;
        s->err.available = avail;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    sub_wake_all(s);
}

/* Ends whoever reads |e|: its subscription, or its group member. */
static void evs_end(evs *e, int code, const char *msg)
{
    if (e->sub != NULL)
        sub_end(e->sub, code, msg, 0, 0);
    else if (e->grp != NULL)
        fxc_grp_on_events_end(e->grp, code, msg);
    e->grp = NULL;
}

static bool evs_has_reader(const evs *e)
{
    return e->sub != NULL || e->grp != NULL;
}

static void evs_free(evs *e)
{
    cconn *cc = e->conn;
    for (evs **p = &cc->evlist; *p != NULL; p = &(*p)->next) {
        if (*p == e) {
            *p = e->next;
            break;
        }
    }
    if (e->sub != NULL && e->sub->ev == e)
        e->sub->ev = NULL;
    if (e->grp != NULL)
        fxc_grp_set_events(e->grp, NULL);
    cc->partial -= e->early;
    if (e->stalled != NULL)
        batch_free(e->stalled, NULL);
    fx_frame_decoder_deinit(&e->dec);
    free(e->rx);
    free(e);
}

/* Resets an event stream nobody will read (stop-sending tells the broker
 * to remove its subscription) and frees it. */
static void evs_drop(evs *e)
{
    if (e->conn->qc != NULL && !e->gone) {
        fx_quic_stream_set_user(e->conn->qc, e->sid, NULL);
        fx_quic_stream_reset(e->conn->qc, e->sid, RESET_CODE);
    }
    evs_free(e);
}

/* Detaches |s| from its streams (resetting them) and drops the loop's ref. */
static void sub_stop(fx_subscription *s)
{
    if (s->loop_gone)
        return;
    s->loop_gone = true;
    fx_loop_timer_cancel(s->c->loop, &s->move_timer);
    cconn *cc = s->conn;
    if (cc != NULL && cc->qc != NULL && s->req_sid >= 0) {
        fx_quic_stream_set_user(cc->qc, s->req_sid, NULL);
        fx_quic_stream_reset(cc->qc, s->req_sid, RESET_CODE);
    }
    if (s->ev != NULL)
        evs_drop(s->ev);
    fx_client *c = s->c;
    if (s->lprev != NULL)
        s->lprev->lnext = s->lnext;
    else if (c->subs == s)
        c->subs = s->lnext;
    if (s->lnext != NULL)
        s->lnext->lprev = s->lprev;
    s->lnext = s->lprev = NULL;
    /* An event stream the broker opened for |s| may still be on its way
     * (or already here, unclaimed): without |s| pending, nobody claims it. */
    if (cc != NULL)
        sweep_orphans(cc);
    fxc_sub_unref(s);
}

static void stop_task(fx_loop *l, fx_task *t, void *user)
{
    (void)l, (void)t;
    sub_stop(user);
}

void fxc_sub_shutdown(fx_client *c)
{
    while (c->subs != NULL) {
        fx_subscription *s = c->subs;
        sub_end(s, FX_ECLOSED, "client closed", 0, 0);
        sub_stop(s);
    }
}

/* |s| lost its connection but will subscribe again once it is back. A
 * batch its stream held back (Block, queue full) is given up: it was never
 * taken, so the re-subscription from rx_next asks for it again. */
static void sub_lost(fx_subscription *s)
{
    s->req_sid = -1;
    s->authed = false;
    fx_frame_decoder_deinit(&s->req_dec);
    fx_frame_decoder_init(&s->req_dec, s->c->o.max_frame_bytes);
    s->resub_need = true;
    s->resub_wait = false;
    if (s->ev != NULL && s->ev->stalled != NULL)
        atomic_fetch_sub(&s->received, s->ev->stalled->eb.count);
    if (s->conn->peer) {
        /* The owner a redirect named is gone: the server names the owner
         * anew (route.c), so the route is forgotten. */
        fxc_route_forget(s->c, s->ns, s->stream);
        s->conn = s->c->conns[0];
    }
    fxc_route_attempt(s);
}

/* An event stream whose bytes a blocked consumer has not all taken yet
 * outlives its connection when that closes for good: what arrived is
 * delivered first (a draining broker closes the connection once its
 * deliveries are acknowledged by QUIC, so they may still wait here), and
 * then the subscription ends, with EOF if the stream's FIN had come, else
 * with the connection's error (set by the caller). */
static bool evs_outlives_conn(const evs *e)
{
    return !e->ended && e->sub != NULL && (e->stalled != NULL || e->rx_len > 0);
}

void fxc_sub_conn_closed(fx_client *c, cconn *cc, int rv, const char *text, bool retry)
{
    bool home = false; /* subscriptions of a lost peer went back to conns[0] */
    for (fx_subscription *s = c->subs; s != NULL; s = s->lnext) {
        if (s->conn != cc || s->loop_gone)
            continue;
        if (cc->peer && !cc->was_ready && s->state == SUB_PENDING) {
            /* The broker a redirect named never answered this subscribe:
             * asking the server again would name it again, so the call
             * fails. A live subscription goes back to the server below
             * (the handshake timeout paces it). */
            char msg[sizeof(s->err.message)];
            snprintf(msg, sizeof(msg), "subscribe redirected to %s: %s", cc->key, text);
            s->resub_wait = false;
            sub_end(s, rv, msg, 0, 0);
            continue;
        }
        if (!retry && s->ev != NULL && evs_outlives_conn(s->ev)) {
            evs *e = s->ev;
            if (!e->fin) {
                e->end_rv = rv;
                snprintf(e->end_text, sizeof(e->end_text), "%s", text);
            }
            e->gone = e->fin = true; /* no more bytes: the rest is delivered */
            continue;
        }
        if (retry && s->state != SUB_ENDED) {
            sub_lost(s);
            home = home || cc->peer;
        } else {
            sub_end(s, rv, text, 0, 0);
        }
    }
    for (evs **p = &cc->evlist; *p != NULL;) {
        evs *e = *p;
        if (!retry && evs_outlives_conn(e) && e->gone) {
            p = &e->next;
            continue;
        }
        evs_free(e); /* unlinks |e|: *p is the next one */
    }
    if (home && c->conns[0]->state == CS_READY)
        fxc_sub_conn_ready(c, c->conns[0]);
}

/* Where a re-subscription starts: after the last batch taken, or where the
 * subscription first started if nothing arrived (latest stays latest). */
static fx_start resume_start(const fx_subscription *s)
{
    if (s->rx_have)
        return (fx_start){.kind = FX_START_OFFSET, .offset = s->rx_next};
    return s->start;
}

static void resubscribe(fx_subscription *s, const fx_start *start)
{
    s->resub_need = false;
    if (s->state == SUB_LIVE)
        s->resub_wait = true;
    int rv = send_subscribe(s, s->conn, start);
    if (rv != 0) {
        s->resub_wait = false;
        sub_end(s, rv, "re-subscribe after reconnect failed", 0, 0);
    }
}

void fxc_sub_conn_ready(fx_client *c, cconn *cc)
{
    for (fx_subscription *s = c->subs; s != NULL; s = s->lnext) {
        if (s->conn == cc && s->resub_need && !s->loop_gone && s->state != SUB_ENDED) {
            fx_start st = resume_start(s);
            resubscribe(s, &st);
        }
    }
}

/* ---- delivery ---------------------------------------------------------------------- */

/* The end of epoch |epoch| - 1 a subscribed of epoch |epoch| named
 * (prev_epoch_end): true with it in |*pend|. Any thread (takes mu). */
static bool prev_end_of(fx_subscription *s, uint64_t epoch, uint64_t *pend)
{
    bool found = false;
    pthread_mutex_lock(&s->c->mu);
    for (uint32_t i = 0; i < s->nends && i < FXC_EPOCH_ENDS && !found; i++) {
        if (s->ends[i].epoch == epoch) {
            *pend = s->ends[i].prev_end;
            found = true;
        }
    }
    pthread_mutex_unlock(&s->c->mu);
    return found;
}

/* The messages missed between the last offset delivered and |off|, the
 * first of another epoch (a cluster stream changed owner, docs/client.md):
 * exact when the new owner's subscribed named the old epoch's end
 * (prev_epoch_end, a graceful move), 0 when nothing was missed; else
 * |*exact| false and the raw offset distance, flagged as today. */
static uint64_t epoch_gap(fx_subscription *s, uint64_t off, bool *exact)
{
    uint64_t e = off >> FXC_EPOCH_SHIFT, pend;
    *exact = false;
    if (!prev_end_of(s, e, &pend) || pend >> FXC_EPOCH_SHIFT != s->last_off >> FXC_EPOCH_SHIFT ||
        pend < s->last_off + 1)
        return off - s->last_off - 1;
    *exact = true;
    return (pend - (s->last_off + 1)) + (off - (e << FXC_EPOCH_SHIFT));
}

static void make_event(fx_subscription *s, const sbatch *b, const fx_wire_event_batch *eb,
                       uint32_t i, fx_event *ev)
{
    (void)b;
    *ev = (fx_event){.payload = eb->payloads[i].ptr, .len = eb->payloads[i].len};
    if (eb->has_offsets) {
        uint64_t off = eb->base_offset + i;
        ev->offset = off;
        ev->has_offset = true;
        if (s->have_last && off > s->last_off + 1) {
            uint64_t gap = off - s->last_off - 1;
            if (off >> FXC_EPOCH_SHIFT != s->last_off >> FXC_EPOCH_SHIFT) {
                bool exact;
                atomic_fetch_add(&s->owner_changes, 1);
                gap = epoch_gap(s, off, &exact);
            }
            if (gap > 0) {
                ev->flags |= FX_EVENT_GAP;
                ev->gap = gap;
                atomic_fetch_add(&s->gaps, 1);
                atomic_fetch_add(&s->missed, ev->gap);
            }
        }
        s->have_last = true;
        s->last_off = off;
    }
    atomic_fetch_add(&s->delivered, 1);
}

/* The broker's batch |eb| was taken (queued, handed to the callback, or
 * shed by the policy): a re-subscription continues after it. */
static void taken(fx_subscription *s, const fx_wire_event_batch *eb)
{
    if (eb->has_offsets) {
        s->rx_have = true;
        s->rx_next = eb->base_offset + eb->count;
    }
}

static void deliver_cb(fx_subscription *s, const fx_wire_event_batch *eb)
{
    for (uint32_t i = 0; i < eb->count && !s->loop_gone; i++) {
        fx_event ev;
        make_event(s, NULL, eb, i, &ev);
        s->cb(s->cb_user, &ev);
    }
}

/* Wakes the thread blocked in fx_subscription_next: a delivery (one
 * waiter) or an end or close (all). The push (or the state change, made
 * under c->mu) comes before this read-modify-write of |waiting|; the
 * consumer reads |wseq|, then sets |waiting| with an exchange, and only then
 * pops (and checks the state under c->mu). Both are RMWs of one object, so
 * one comes first: if this one, the consumer's exchange reads it and the
 * item or change happens-before the consumer's checks; if the consumer's,
 * this reads it waiting and bumps |wseq| after the consumer read it, so its
 * futex wait returns at once or is woken. A condition variable here cost the
 * woken reader one more futex call on its way out (glibc marks the mutex it
 * re-takes contended, so the unlock after the wait always enters the
 * kernel), per delivery. The caller holds a reference to |s| throughout. */
_Static_assert(sizeof(atomic_uint) == sizeof(uint32_t), "a futex word is 32 bits");

static void sub_wake(fx_subscription *s, int n)
{
    if (atomic_fetch_or(&s->waiting, 0u) == 0)
        return;
    atomic_fetch_add(&s->wseq, 1);
    /* Nothing to handle: EFAULT/EINVAL would mean a bad address, our bug. */
    (void)syscall(SYS_futex, (uint32_t *)&s->wseq, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static void wake_consumer(fx_subscription *s)
{
    sub_wake(s, 1);
}

static void sub_wake_all(fx_subscription *s)
{
    sub_wake(s, INT_MAX);
}

/* Sleeps until |s->wseq| moves off |seq| or |deadline_ns| (0: none) passes.
 * Returns FX_ETIMEDOUT once the deadline has passed, else 0 (woken, or a
 * spurious return: the caller checks again). Consumer thread, no lock held. */
static int sub_sleep(fx_subscription *s, unsigned seq, uint64_t deadline_ns)
{
    struct timespec ts, *tp = NULL;
    if (deadline_ns != 0) {
        uint64_t now = fx_now_ns();
        if (now >= deadline_ns)
            return FX_ETIMEDOUT;
        uint64_t rel = deadline_ns - now;
        ts.tv_sec = (time_t)(rel / FX_NS_PER_S);
        ts.tv_nsec = (long)(rel % FX_NS_PER_S);
        tp = &ts;
    }
    long rv = syscall(SYS_futex, (uint32_t *)&s->wseq, FUTEX_WAIT_PRIVATE, seq, tp, NULL, 0);
    if (rv < 0 && errno == ETIMEDOUT)
        return FX_ETIMEDOUT;
    return 0; /* woken, EAGAIN (moved already) or EINTR */
}

static void grant(evs *e, size_t n)
{
    if (n > 0 && !e->gone && e->conn->qc != NULL)
        fx_quic_stream_consume(e->conn->qc, e->sid, n);
}

/* The credit a complete frame still holds: its bytes minus those granted
 * while it was arriving in pieces (see evs_feed). */
static size_t frame_credit(evs *e, const fx_frame *f)
{
    size_t n = FX_WIRE_HEADER_LEN + f->len - e->early;
    e->conn->partial -= e->early;
    e->early = 0;
    return n;
}

static fx_ratelimit partial_rl = FX_RATELIMIT_INIT;

/* Credits |n| bytes of a partial frame at once (or a frame larger than the
 * receive window could never complete), within FXC_PARTIAL_FACTOR x
 * max_frame_bytes per connection: a broker holding more than that in
 * unfinished frames (its event frames are event_batch_max_bytes, 64 KiB by
 * default) is making the client buffer without bound, and the connection
 * is closed with the reason. Returns false then. */
static bool credit_early(evs *e, size_t n)
{
    cconn *cc = e->conn;
    size_t cap = FXC_PARTIAL_FACTOR * (size_t)cc->c->o.max_frame_bytes;
    if (cc->partial + n > cap) {
        char why[128];
        snprintf(why, sizeof(why),
                 "the broker left more than %zu bytes of event frames unfinished on one "
                 "connection",
                 cap);
        FX_LOG_RATELIMITED(&partial_rl, fx_now_ns(), FX_LOG_ERROR, "client", "%s: closing it", why);
        if (cc->qc != NULL)
            fx_quic_conn_close(cc->qc, FXC_PARTIAL_CLOSE_CODE, why);
        return false;
    }
    grant(e, n);
    e->early += n;
    cc->partial += n;
    return true;
}

/* Pushes |b| into the queue. Returns false when Block refused it: the
 * batch is kept and the stream stalls until the consumer makes room. */
static bool enqueue(evs *e, sbatch *b)
{
    fx_subscription *s = e->sub;
    fx_wire_event_batch eb = b->eb; /* |b| may be consumed and freed once pushed */
    int rv = fx_queue_push(&s->q, b);
    if (rv == 0 || (rv == FX_EFULL && s->c->o.sub_queue_policy != FX_POLICY_BLOCK)) {
        taken(s, &eb);
        wake_consumer(s); /* DROP_NEW shed |b| already (counted in batch_dropped) */
        return true;
    }
    if (rv == FX_EFULL) {
        e->stalled = b;
        /* Still parked from a stream lost while stalled: its resume serves
         * this stream too. */
        if (s->parked)
            return false;
        if (fx_queue_park(&s->q, &s->qw) == 0) {
            s->parked = true;
            return false;
        }
        e->stalled = NULL;
    }
    batch_free(b, NULL); /* closed: nobody will read it */
    return true;
}

/* Hands one event batch frame to the subscription. Returns false if the
 * stream stalled (Block, queue full). */
static bool deliver(evs *e, const fx_frame *f)
{
    fx_subscription *s = e->sub;
    size_t fbytes = frame_credit(e, f);
    fx_wire_event_batch eb;
    fx_wire_err err = {0};
    int rv = fx_wire_event_batch_decode(f->hdr.flags, f->body, f->len, &eb, &err);
    if (rv == 0 && !eb.shared && eb.subscription_id != atomic_load(&s->id)) {
        fx_wire_event_batch_deinit(&eb);
        rv = fx_wire_err_set(&err, FX_EPROTO, "subscription id mismatch");
    }
    if (rv != 0) {
        grant(e, fbytes);
        sub_end(s, FX_EPROTO, err.msg, 0, 0);
        e->ended = true;
        return true;
    }
    atomic_fetch_add(&s->received, eb.count);
    if (s->cb != NULL) {
        taken(s, &eb);
        deliver_cb(s, &eb);
        fx_wire_event_batch_deinit(&eb);
        grant(e, fbytes);
        return true;
    }
    fx_wire_event_batch info = eb; /* counts and offsets, read after the deinit */
    info.payloads = NULL;
    fx_wire_event_batch_deinit(&eb);
    /* From the block cache (base/blk.h): a batch's buffer lives only until
     * its events are read, at thousands of batches a second. */
    sbatch *b = f->len <= SIZE_MAX - sizeof(*b) ? fx_blk_alloc(sizeof(*b) + f->len) : NULL;
    if (b == NULL || fx_wire_event_batch_decode(f->hdr.flags, memcpy(b->body, f->body, f->len),
                                                f->len, &b->eb, NULL) != 0) {
        fx_blk_free(b);
        grant(e, fbytes);
        taken(s, &info);
        atomic_fetch_add(&s->dropped, info.count);
        return true;
    }
    bool block = s->c->o.sub_queue_policy == FX_POLICY_BLOCK;
    b->credit = block ? fbytes : 0;
    if (!block)
        grant(e, fbytes);
    return enqueue(e, b);
}

/* ---- event streams -------------------------------------------------------------------- */

static void rx_append(evs *e, const uint8_t *p, size_t n)
{
    if (n == 0)
        return;
    if (e->rx_len + n > e->rx_cap) {
        uint8_t *nb = fx_grow(e->rx, &e->rx_cap, e->rx_len + n, 1, 4096);
        if (nb == NULL) {
            /* Bounded by the receive window we have not extended; failing
             * here means memory is gone: end the subscription loudly. */
            FX_LOG_ERROR("client", "out of memory buffering an event stream");
            e->ended = true;
            evs_end(e, -ENOMEM, "out of memory");
            return;
        }
        e->rx = nb;
    }
    memcpy(e->rx + e->rx_len, p, n);
    e->rx_len += n;
}

/* Feeds the bytes buffered while stalled or unrouted. */
static void evs_resume(evs *e)
{
    uint8_t *p = e->rx;
    size_t n = e->rx_len;
    e->rx = NULL;
    e->rx_len = e->rx_cap = 0;
    evs_feed(e, p, n);
    free(p);
    if (e->fin && e->rx_len == 0 && e->stalled == NULL && evs_has_reader(e) && !e->ended) {
        e->ended = true;
        if (e->end_rv != 0)
            evs_end(e, e->end_rv, e->end_text);
        else
            evs_end(e, FX_EEOF, "event stream ended by the broker");
    }
}

static fx_subscription *find_sub(fx_client *c, cconn *cc, uint64_t id)
{
    for (fx_subscription *s = c->subs; s != NULL; s = s->lnext) {
        /* A re-subscription's id is its previous broker's until its
         * subscribed arrives (which claims its stream): ids of two brokers
         * may be equal, so it is never matched by id here. */
        if (s->conn == cc && s->state == SUB_LIVE && s->ev == NULL && !s->resub_wait &&
            atomic_load(&s->id) == id)
            return s;
    }
    return NULL;
}

static void attach(evs *e, fx_subscription *s)
{
    e->sub = s;
    s->ev = e;
}

void fxc_evs_attach_group(evs *e, fx_group *g)
{
    e->grp = g;
    fxc_grp_set_events(g, e);
    evs_resume(e);
}

/* True while a subscribe on |cc| waits for its answer: an event stream whose
 * hello names no known subscription may still be claimed by it. */
static bool subscribe_waiting(fx_client *c, cconn *cc)
{
    for (fx_subscription *s = c->subs; s != NULL; s = s->lnext) {
        if (s->conn == cc && !s->loop_gone && (s->state == SUB_PENDING || s->resub_wait))
            return true;
    }
    return false;
}

/* Resets every unclaimed event stream of |cc| once no subscribe is waiting:
 * its subscription was abandoned (unsubscribed or timed out) after the
 * broker created it, and only the reset makes the broker remove it. Not
 * from inside one of those streams' callbacks. */
static void sweep_orphans(cconn *cc)
{
    if (cc->qc == NULL || subscribe_waiting(cc->c, cc) || fxc_grp_waiting(cc->c, cc))
        return;
    evs **p = &cc->evlist;
    while (*p != NULL) {
        evs *e = *p;
        if (e->hello && !evs_has_reader(e) && !e->left) {
            evs_drop(e); /* unlinks |e| from *p */
            continue;
        }
        p = &e->next;
    }
}

static void on_hello(evs *e, const fx_frame *f)
{
    fx_msg m;
    grant(e, frame_credit(e, f));
    if (f->flags_rv != 0 || f->kind != FX_BODY_JSON ||
        fx_msg_decode(&m, f->body, f->len, NULL) != 0) {
        e->ended = true;
        return;
    }
    if (m.type == FX_MSG_EVENT_STREAM_HELLO) {
        e->hello = true;
        e->sub_id = m.subscription_id;
        fx_subscription *s = find_sub(e->conn->c, e->conn, e->sub_id);
        fx_group *g = s == NULL ? fxc_grp_find(e->conn->c, e->conn, e->sub_id) : NULL;
        if (s != NULL) {
            attach(e, s);
        } else if (g != NULL) {
            fxc_evs_attach_group(e, g);
        } else if (!subscribe_waiting(e->conn->c, e->conn) &&
                   !fxc_grp_waiting(e->conn->c, e->conn)) {
            /* Nobody can claim it: reset once this callback returns. */
            FX_LOG_DEBUG("client", "event stream for abandoned subscription %llu: reset",
                         (unsigned long long)e->sub_id);
            e->ended = true;
            e->drop = true;
        }
    } else {
        e->ended = true;
    }
    fx_msg_deinit(&m);
}

/* The stream of |s| moved to another broker (shard_moved, the last frame
 * of its event stream, after every event the old owner owed it): the
 * subscription subscribes again at the named owner from its last offset +
 * 1, through the route cache and its generation rule (route.c). */
static void moved(evs *e, const fx_msg *m)
{
    fx_subscription *s = e->sub;
    /* This event stream ends here: the broker finishes it; nobody reads it
     * and no sweep resets it (left), it is freed when it closes. */
    e->ended = true;
    e->left = true;
    e->sub = NULL;
    s->ev = NULL;
    fxc_route_attempt(s);
    char why[192];
    int rv = 0;
    cconn *cc = fxc_route_follow(s, m, &rv, why, sizeof(why));
    if (cc == NULL) {
        char msg[256];
        snprintf(msg, sizeof(msg), "stream moved, not followed: %s", why);
        sub_end(s, rv, msg, 0, 0);
        return;
    }
    FX_LOG_DEBUG("client", "%s/%s moved to %s (generation %llu): subscribing there", s->ns,
                 s->stream, m->node_id, (unsigned long long)m->generation);
    s->resub_wait = true; /* its subscribed (or too_old) belongs to a re-subscribe */
    s->move_gen = m->generation;
    s->move_tries = 0;
    s->redirect = cc;
    redirect(s);
}

/* A JSON frame after the hello ends an event stream: shard_moved (follow
 * it) or an error (the subscription ends with it). */
static void on_last_frame(evs *e, const fx_frame *f)
{
    fx_msg m;
    fx_wire_err err = {0};
    if (fx_msg_decode(&m, f->body, f->len, &err) != 0) {
        e->ended = true;
        sub_end(e->sub, FX_EPROTO, err.msg, 0, 0);
        return;
    }
    if (m.type == FX_MSG_SHARD_MOVED) {
        moved(e, &m);
    } else {
        char msg[256];
        snprintf(msg, sizeof(msg), "event stream ended: %s",
                 m.type == FX_MSG_ERROR ? m.message : "unexpected message on event stream");
        e->ended = true;
        sub_end(e->sub, m.type == FX_MSG_ERROR ? fxc_client_map_remote(m.message) : FX_EPROTO,
                msg, 0, 0);
    }
    fx_msg_deinit(&m);
}

static void evs_feed(evs *e, const uint8_t *data, size_t len)
{
    while (len > 0 && !e->ended) {
        if (e->stalled != NULL || (e->hello && !evs_has_reader(e))) {
            rx_append(e, data, len);
            return;
        }
        size_t used = 0;
        fx_frame f;
        fx_wire_err err = {0};
        int rv = fx_frame_decoder_feed(&e->dec, data, len, &used, &f, &err);
        data += used;
        len -= used;
        if (rv >= 0 && rv != FX_FRAME_READY && used > 0 && !credit_early(e, used)) {
            /* Block still withholds the credit of every complete frame
             * until it is consumed; a partial one is credited at once,
             * within the connection's bound, else the connection closes
             * and the rest is discarded. */
            e->ended = true;
            return;
        }
        if (rv < 0) {
            grant(e, used); /* discarded: the window gets them back */
            e->ended = true;
            evs_end(e, FX_EPROTO, err.msg);
        } else if (rv == FX_FRAME_READY && !e->hello) {
            on_hello(e, &f);
        } else if (rv == FX_FRAME_READY && e->grp != NULL) {
            /* A member's records are bounded by its window, not by
             * withheld credit: granted as they arrive. */
            grant(e, frame_credit(e, &f));
            if (!fxc_grp_on_events(e->grp, &f))
                e->ended = true;
        } else if (rv == FX_FRAME_READY && f.flags_rv == 0 && f.kind == FX_BODY_JSON) {
            grant(e, frame_credit(e, &f));
            on_last_frame(e, &f);
        } else if (rv == FX_FRAME_READY) {
            if (f.flags_rv != 0 ||
                (f.kind != FX_BODY_EVENT_BATCH && f.kind != FX_BODY_EVENT_BATCH_SHARED)) {
                grant(e, frame_credit(e, &f));
                e->ended = true;
                sub_end(e->sub, FX_EPROTO, "unexpected frame on event stream", 0, 0);
            } else {
                deliver(e, &f);
            }
        }
    }
    /* The stream ended inside this chunk: the rest is discarded, and its
     * credit returned like that of every later chunk (fxc_evs_on_data). */
    if (e->ended)
        grant(e, len);
}

void fxc_evs_open(cconn *cc, int64_t sid)
{
    evs *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        FX_LOG_ERROR("client", "out of memory for an event stream: reset");
        fx_quic_stream_reset(cc->qc, sid, RESET_CODE);
        return;
    }
    e->kind = SK_EVENTS;
    e->conn = cc;
    e->sid = sid;
    fx_frame_decoder_init(&e->dec, cc->c->o.max_frame_bytes);
    e->next = cc->evlist;
    cc->evlist = e;
    fx_quic_stream_set_user(cc->qc, sid, e);
}

void fxc_evs_on_data(evs *e, const uint8_t *data, size_t len, bool fin)
{
    if (e->ended) {
        grant(e, len);
        return;
    }
    evs_feed(e, data, len);
    if (e->drop) {
        evs_drop(e);
        return;
    }
    if (fin) {
        e->fin = true;
        if (e->rx_len == 0 && e->stalled == NULL && evs_has_reader(e) && !e->ended) {
            e->ended = true;
            evs_end(e, FX_EEOF, "event stream ended by the broker");
        }
    }
}

void fxc_evs_on_close(evs *e, bool reset, uint64_t code)
{
    (void)code;
    if (!reset && e->sub != NULL && !e->ended && (e->stalled != NULL || e->rx_len > 0)) {
        /* Everything arrived but a stalled consumer has not taken it yet:
         * keep the bytes; EOF follows once they are delivered. The object
         * is freed with its subscription or connection. */
        e->gone = true;
        e->fin = true;
        return;
    }
    if (evs_has_reader(e) && !e->ended)
        evs_end(e, reset ? FX_ECONNLOST : FX_EEOF,
                reset ? "event stream reset by the broker" : "event stream ended by the broker");
    evs_free(e);
}

/* ---- subscribe request stream ----------------------------------------------------------- */

static void on_req_msg(fx_subscription *s, const fx_msg *m)
{
    if (!s->authed) {
        if (m->type == FX_MSG_AUTH_OK || m->type == FX_MSG_OK) {
            s->authed = true;
            return;
        }
    }
    switch (m->type) {
    case FX_MSG_SUBSCRIBED: {
        if (s->resub_wait) {
            s->resub_wait = false;
            atomic_fetch_add(&s->reconnects, 1);
        }
        s->move_gen = 0;
        s->move_tries = 0;
        atomic_store(&s->id, m->subscription_id);
        fx_client *c = s->c;
        pthread_mutex_lock(&c->mu);
        if (s->state == SUB_PENDING)
            s->state = SUB_LIVE;
        if (m->has_epoch && m->has_prev_epoch_end) {
            /* A graceful move's exact end of the previous epoch: the first
             * event of this one is a gap only by what was not seen. */
            s->ends[s->nends % FXC_EPOCH_ENDS].epoch = m->epoch;
            s->ends[s->nends % FXC_EPOCH_ENDS].prev_end = m->prev_epoch_end;
            s->nends++;
        }
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        for (evs *e = s->conn->evlist; e != NULL; e = e->next) {
            if (e->hello && e->sub == NULL && e->sub_id == m->subscription_id && s->ev == NULL) {
                attach(e, s);
                evs_resume(e);
            }
        }
        break;
    }
    case FX_MSG_SUBSCRIBE_CURSOR_ERROR: {
        bool old = m->reason == FX_MSG_CURSOR_TOO_OLD;
        if (s->resub_wait && old) {
            /* The ring moved past where we stopped while we were away:
             * continue from what it still holds; the consumer sees the
             * jump as FX_EVENT_GAP on the next event. */
            s->resub_earliest = true;
            break;
        }
        s->resub_wait = false;
        char msg[128];
        snprintf(msg, sizeof(msg), "cursor %s: requested %llu, available %llu",
                 old ? "too old" : "in future", (unsigned long long)m->requested,
                 (unsigned long long)m->available);
        sub_end(s, old ? FX_ECURSOR_TOO_OLD : FX_ECURSOR_IN_FUTURE, msg, m->requested,
                m->available);
        break;
    }
    case FX_MSG_NOT_LEADER: {
        if (s->resub_wait && m->generation < s->move_gen && s->move_tries < FXC_MOVE_TRIES) {
            /* The node a shard_moved named has not seen the handoff yet
             * (its watch is behind): it still names the old owner. Asked
             * again shortly (fxc_sub_on_req_data). */
            s->move_retry = true;
            break;
        }
        char why[192];
        int rv = 0;
        s->redirect = fxc_route_follow(s, m, &rv, why, sizeof(why));
        if (s->redirect == NULL) {
            char msg[256];
            s->resub_wait = false;
            snprintf(msg, sizeof(msg), "subscribe failed: %s", why);
            sub_end(s, rv, msg, 0, 0);
        }
        break;
    }
    case FX_MSG_ERROR: {
        if (fxc_client_map_remote(m->message) == FX_EMOVING && s->move_tries < FXC_MOVE_TRIES) {
            /* The stream is moving from this broker this very moment: in a
             * moment it names the new owner (not_leader). Asked again. */
            s->move_retry = true;
            break;
        }
        char msg[256];
        s->resub_wait = false;
        snprintf(msg, sizeof(msg), "subscribe failed: %s", m->message);
        sub_end(s, fxc_client_map_remote(m->message), msg, 0, 0);
        break;
    }
    default:
        s->resub_wait = false;
        sub_end(s, FX_EPROTO, "unexpected reply to subscribe", 0, 0);
    }
}

/* The re-subscription's cursor was too old: drop its stream (the broker
 * ends it) and ask again from the earliest offset still held. */
static void resubscribe_earliest(fx_subscription *s)
{
    cconn *cc = s->conn;
    s->resub_earliest = false;
    if (cc->qc != NULL && s->req_sid >= 0)
        fx_quic_stream_set_user(cc->qc, s->req_sid, NULL);
    s->req_sid = -1;
    s->authed = false;
    fx_frame_decoder_deinit(&s->req_dec);
    fx_frame_decoder_init(&s->req_dec, s->c->o.max_frame_bytes);
    fx_start st = {.kind = FX_START_EARLIEST};
    resubscribe(s, &st);
}

/* The destination of a move answered not_leader naming the old owner: its
 * request stream is dropped (the broker finishes it) and the subscribe goes
 * to it again in FXC_MOVE_RETRY_MS. */
static void move_retry_arm(fx_subscription *s)
{
    cconn *cc = s->conn;
    s->move_retry = false;
    s->move_tries++;
    if (cc->qc != NULL && s->req_sid >= 0)
        fx_quic_stream_set_user(cc->qc, s->req_sid, NULL);
    s->req_sid = -1;
    s->authed = false;
    fx_frame_decoder_deinit(&s->req_dec);
    fx_frame_decoder_init(&s->req_dec, s->c->o.max_frame_bytes);
    if (fx_loop_timer_arm(s->c->loop, &s->move_timer,
                          fx_now_ns() + FXC_MOVE_RETRY_MS * FX_NS_PER_MS) != 0) {
        s->resub_wait = false;
        sub_end(s, FX_EREDIRECT, "stream moved: its new owner does not serve it yet", 0, 0);
    }
}

static void move_retry_fire(fx_loop *l, fx_timer *t, void *user)
{
    (void)l, (void)t;
    fx_subscription *s = user;
    if (s->loop_gone || s->state == SUB_ENDED || s->conn->qc == NULL)
        return;
    fx_start st = resume_start(s);
    resubscribe(s, &st);
}

/* The subscribe was answered not_leader and route.c allowed it: the
 * request stream is dropped (the broker finishes it) and the subscribe
 * goes to the owner's connection, now or once it is ready. */
static void redirect(fx_subscription *s)
{
    cconn *old = s->conn, *cc = s->redirect;
    s->redirect = NULL;
    if (old->qc != NULL && s->req_sid >= 0)
        fx_quic_stream_set_user(old->qc, s->req_sid, NULL);
    s->req_sid = -1;
    s->authed = false;
    fx_frame_decoder_deinit(&s->req_dec);
    fx_frame_decoder_init(&s->req_dec, s->c->o.max_frame_bytes);
    s->conn = cc;
    sweep_orphans(old);
    if (cc->state == CS_CONNECTING || cc->state == CS_RETRY) {
        s->resub_need = true; /* sent by fxc_sub_conn_ready */
        return;
    }
    fx_start st = resume_start(s);
    s->resub_need = false;
    int rv = cc->qc == NULL ? cc->close_rv : send_subscribe(s, cc, &st);
    if (rv != 0) {
        char msg[sizeof(s->err.message)];
        snprintf(msg, sizeof(msg), "subscribe at %s (redirect): %s", cc->key, fx_strerror(rv));
        s->resub_wait = false;
        sub_end(s, rv, msg, 0, 0);
    }
}

void fxc_sub_on_req_data(fx_subscription *s, const uint8_t *data, size_t len, bool fin)
{
    fx_quic_stream_consume(s->conn->qc, s->req_sid, len);
    while (len > 0) {
        size_t used = 0;
        fx_frame f;
        fx_wire_err err = {0};
        int rv = fx_frame_decoder_feed(&s->req_dec, data, len, &used, &f, &err);
        data += used;
        len -= used;
        if (rv < 0 || (rv == FX_FRAME_READY && (f.flags_rv != 0 || f.kind != FX_BODY_JSON))) {
            sub_end(s, FX_EPROTO, rv < 0 ? err.msg : "binary frame on subscribe stream", 0, 0);
            return;
        }
        fx_msg m;
        if (rv == FX_FRAME_READY) {
            if (fx_msg_decode(&m, f.body, f.len, &err) != 0) {
                sub_end(s, FX_EPROTO, err.msg, 0, 0);
                return;
            }
            on_req_msg(s, &m);
            fx_msg_deinit(&m);
            if (s->resub_earliest) {
                resubscribe_earliest(s);
                return;
            }
            if (s->move_retry) {
                move_retry_arm(s);
                return;
            }
            if (s->redirect != NULL) {
                redirect(s);
                return;
            }
        }
    }
    if (fin && (s->state == SUB_PENDING || s->resub_wait)) {
        s->resub_wait = false;
        sub_end(s, FX_EPROTO, "subscribe stream ended without an answer", 0, 0);
    }
    sweep_orphans(s->conn);
}

void fxc_sub_on_req_close(fx_subscription *s, bool reset, uint64_t code)
{
    (void)code;
    s->req_sid = -1;
    if (s->state == SUB_PENDING || s->resub_wait) {
        s->resub_wait = false;
        sub_end(s, reset ? FX_ECONNLOST : FX_EPROTO, "subscribe stream closed without an answer", 0,
                0);
    }
    sweep_orphans(s->conn);
}

/* ---- loop tasks --------------------------------------------------------------------------- */

static int send_subscribe(fx_subscription *s, cconn *cc, const fx_start *start)
{
    int rv = fx_quic_conn_open_bidi(cc->qc, s, &s->req_sid);
    if (rv != 0)
        return rv;
    /* The event stream the broker opens for it: the only credit for
     * broker-opened streams beyond the transport's first few
     * (client.c transport_opts). */
    fx_quic_conn_grant_uni(cc->qc, 1);
    rv = fxc_client_send_auth(cc, s->req_sid);
    if (rv != 0)
        return rv;
    fx_msg m = {
        .type = FX_MSG_SUBSCRIBE, .tenant_id = s->c->o.tenant, .ns = s->ns, .stream = s->stream};
    static const fx_msg_start_kind kinds[] = {FX_MSG_START_LATEST, FX_MSG_START_EARLIEST,
                                              FX_MSG_START_OFFSET};
    if (start->kind != FX_START_LATEST)
        m.start = (fx_msg_start){kinds[start->kind], start->offset};
    return fxc_client_send_msg(cc, s->req_sid, &m, true);
}

static void start_task(void *user)
{
    fx_subscription *s = user;
    fx_client *c = s->c;
    if (c->ep == NULL || s->loop_gone) {
        sub_end(s, FX_ECLOSED, "client closed", 0, 0);
        sub_stop(s);
        return;
    }
    s->lnext = c->subs;
    if (c->subs != NULL)
        c->subs->lprev = s;
    c->subs = s;
    /* One event connection for now: the primary one (documented), or the
     * owner the route cache names (route.c). */
    cconn *cc = fxc_route_first(s);
    if (cc->state == CS_CONNECTING || cc->state == CS_RETRY) {
        s->resub_need = true; /* sent by fxc_sub_conn_ready (reconnecting) */
        return;
    }
    int rv = cc->qc == NULL ? cc->close_rv : send_subscribe(s, cc, &s->start);
    if (rv != 0)
        sub_end(s, rv, fx_strerror(rv), 0, 0);
}

static void resume_task(fx_loop *l, fx_task *t, void *user)
{
    (void)l, (void)t;
    fx_subscription *s = user;
    s->parked = false;
    evs *e = s->ev;
    if (s->loop_gone || e == NULL || e->stalled == NULL)
        return;
    sbatch *b = e->stalled;
    e->stalled = NULL;
    if (!enqueue(e, b))
        return;
    evs_resume(e);
}

static void on_queue_resume(void *user)
{
    fx_subscription *s = user;
    if (fx_loop_is_current(s->c->loop))
        fx_loop_post(s->c->loop, &s->resume);
    else
        fxc_client_post(s->c, &s->resume);
}

static void credit_task(fx_loop *l, fx_task *t, void *user)
{
    (void)l, (void)t;
    fx_subscription *s = user;
    size_t n = atomic_exchange(&s->credit_bytes, 0);
    atomic_fetch_sub(&s->c->held_credit, n);
    if (!s->loop_gone && s->ev != NULL)
        grant(s->ev, n);
}

static void set_cb_task(fx_loop *l, fx_task *t, void *user)
{
    (void)l, (void)t;
    fx_subscription *s = user;
    s->cb = s->new_cb;
    s->cb_user = s->new_cb_user;
    void *it;
    while (!s->loop_gone && fx_queue_pop(&s->q, &it) == 0) {
        sbatch *b = it;
        deliver_cb(s, &b->eb);
        if (s->ev != NULL)
            grant(s->ev, b->credit);
        batch_free(b, NULL);
    }
}

/* ---- public --------------------------------------------------------------------------------- */

static int sub_new(fx_subscription **ps, fx_client *c, const char *ns, const char *stream,
                   const fx_start *start)
{
    fx_subscription *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->kind = SK_SUBREQ;
    atomic_init(&s->refs, 2);
    s->c = c;
    s->req_sid = -1;
    s->ns = strdup(ns);
    s->stream = strdup(stream);
    if (start != NULL)
        s->start = *start;
    if (s->start.kind == FX_START_OFFSET && s->start.offset > 0) {
        /* The first event must be this offset: anything later is a gap
         * (the ring moved on while a re-subscription was on its way). */
        s->have_last = true;
        s->last_off = s->start.offset - 1;
    }
    static const fx_queue_policy pol[] = {FX_QUEUE_DROP_NEW, FX_QUEUE_BLOCK, FX_QUEUE_DROP_NEW,
                                          FX_QUEUE_DROP_OLD};
    fx_queue_opts qo = {.capacity = c->o.sub_queue_capacity,
                        .policy = pol[c->o.sub_queue_policy],
                        .on_drop = batch_dropped,
                        .user = s};
    int rv = s->ns == NULL || s->stream == NULL ? -ENOMEM : fx_queue_init(&s->q, &qo);
    if (rv != 0) {
        free(s->ns);
        free(s->stream);
        free(s);
        return rv;
    }
    atomic_init(&s->wseq, 0);
    atomic_init(&s->waiting, 0u);
    fx_frame_decoder_init(&s->req_dec, c->o.max_frame_bytes);
    fx_queue_waiter_init(&s->qw, on_queue_resume, s);
    fx_task_init(&s->resume, resume_task, s);
    fx_task_init(&s->credit, credit_task, s);
    fx_task_init(&s->set_cb, set_cb_task, s);
    fx_timer_init(&s->move_timer, move_retry_fire, s);
    fx_task_init(&s->stop, stop_task, s);
    fxc_client_ref(c);
    *ps = s;
    return 0;
}

int fx_subscribe(fx_subscription **ps, fx_client *c, const char *ns, const char *stream,
                 const fx_start *start)
{
    if (ps == NULL || c == NULL || ns == NULL || stream == NULL ||
        (start != NULL && start->kind > FX_START_OFFSET))
        return -EINVAL;
    *ps = NULL;
    if (fxc_rt_is_current())
        return FX_EWOULDBLOCK_LOOP;
    if (start != NULL && start->kind != FX_START_LATEST &&
        (c->server_flags & FX_FLAG_EVENT_OFFSETS) == 0)
        return fxc_client_set_error(FX_ECONFIG, "broker does not support start positions");
    fx_subscription *s = NULL;
    int rv = sub_new(&s, c, ns, stream, start);
    if (rv != 0)
        return rv;
    pthread_mutex_lock(&c->mu);
    rv = c->closed ? FX_ECLOSED : fx_loop_call(c->loop, start_task, s);
    pthread_mutex_unlock(&c->mu);
    if (rv != 0) {
        atomic_fetch_sub(&s->refs, 1); /* the loop never saw it */
        s->loop_gone = true;
        fxc_sub_unref(s);
        return rv;
    }
    uint64_t deadline = fxc_client_deadline(c->o.connect_timeout_ms);
    pthread_mutex_lock(&c->mu);
    while (s->state == SUB_PENDING && !c->closed && rv == 0)
        rv = fxc_client_wait(c, &c->cv, deadline);
    int st = s->state;
    fx_sub_error err = s->err;
    pthread_mutex_unlock(&c->mu);
    if (st == SUB_LIVE) {
        *ps = s;
        return 0;
    }
    if (st == SUB_ENDED && (err.code == FX_ECURSOR_TOO_OLD || err.code == FX_ECURSOR_IN_FUTURE)) {
        *ps = s;
        return fxc_client_set_error(err.code, "%s", err.message);
    }
    fx_unsubscribe(s);
    if (st == SUB_ENDED)
        return fxc_client_set_error(err.code, "%s", err.message);
    return fxc_client_set_error(rv != 0 ? rv : FX_ECLOSED, "subscribe: no answer");
}

/* Finishes the current batch: its credit goes back to the broker, in
 * batches. Posting the grant for every batch woke the client loop once per
 * delivered message in latency runs. The credit is handed over once this
 * subscription holds a quarter of the initial stream window, or the client's
 * subscriptions together a quarter of the initial connection window. So the
 * broker always keeps at least three quarters of both windows, whatever the
 * consumers hold back, and a stream whose consumer keeps up never stalls for
 * credit. */
static void release_cur(fx_subscription *s)
{
    sbatch *b = s->cur;
    s->cur = NULL;
    if (b->credit > 0) {
        fx_client *c = s->c;
        size_t mine = atomic_fetch_add(&s->credit_bytes, b->credit) + b->credit;
        size_t all = atomic_fetch_add(&c->held_credit, b->credit) + b->credit;
        if (mine >= c->qo.stream_window / 4 || all >= c->qo.conn_window / 4)
            fxc_client_post(c, &s->credit);
    }
    batch_free(b, NULL);
}

/* The deadline of a next() call is read from the clock only once it has to
 * wait: a consumer that keeps up never pays for a clock read per message. */
#define DEADLINE_UNSET UINT64_MAX

/* Why the consumer cannot take a batch now: 0 to sleep (or, with an item
 * queued meanwhile, to try again), else the error to return. Pops happen
 * outside the lock: a pop may resume the loop's parked producer, whose
 * callback takes the lock. */
static int wait_reason(fx_subscription *s, int timeout_ms, bool timed_out, bool *pretry)
{
    fx_client *c = s->c;
    int rv = 0;
    *pretry = false;
    pthread_mutex_lock(&c->mu);
    if (s->closed || c->closed)
        rv = FX_ECLOSED;
    else if (fx_queue_depth(&s->q) > 0)
        *pretry = true;
    else if (s->state == SUB_ENDED)
        rv = s->err.code;
    else if (timeout_ms == 0 || timed_out)
        rv = FX_ETIMEDOUT;
    pthread_mutex_unlock(&c->mu);
    return rv;
}

/* Waits for a batch. Returns 0 (s->cur set) or why not. */
static int next_batch(fx_subscription *s, uint64_t *deadline, int timeout_ms)
{
    bool timed_out = false;
    int rv = 0;
    for (;;) {
        void *it;
        /* Read before the checks: a wake after them moves it (sub_wake). */
        unsigned seq = atomic_load(&s->wseq);
        atomic_exchange(&s->waiting, 1u);
        if (fx_queue_pop(&s->q, &it) == 0) {
            s->cur = it;
            s->cur_i = 0;
            break;
        }
        bool retry;
        rv = wait_reason(s, timeout_ms, timed_out, &retry);
        if (rv != 0)
            break;
        if (retry)
            continue;
        if (*deadline == DEADLINE_UNSET)
            *deadline = fxc_client_deadline(timeout_ms);
        timed_out = sub_sleep(s, seq, *deadline) == FX_ETIMEDOUT;
    }
    atomic_store(&s->waiting, 0u);
    return rv;
}

int fx_subscription_next(fx_subscription *s, fx_event *ev, int timeout_ms)
{
    if (s == NULL || ev == NULL || atomic_load(&s->cb_set))
        return -EINVAL;
    if (timeout_ms != 0 && fxc_rt_is_current())
        return FX_EWOULDBLOCK_LOOP;
    atomic_fetch_add(&s->refs, 1);
    uint64_t deadline = DEADLINE_UNSET;
    int rv = 0;
    for (;;) {
        if (s->cur != NULL && s->cur_i < s->cur->eb.count) {
            make_event(s, s->cur, &s->cur->eb, s->cur_i++, ev);
            break;
        }
        if (s->cur != NULL)
            release_cur(s);
        rv = next_batch(s, &deadline, timeout_ms);
        if (rv != 0)
            break;
    }
    fxc_sub_unref(s);
    return rv;
}

int fx_subscription_set_callback(fx_subscription *s, fx_event_cb cb, void *user)
{
    if (s == NULL || cb == NULL)
        return -EINVAL;
    fx_client *c = s->c;
    if (s->closed || atomic_exchange(&s->cb_set, true))
        return s->closed ? FX_ECLOSED : -EINVAL;
    s->new_cb = cb;
    s->new_cb_user = user;
    if (s->cur != NULL)
        release_cur(s);
    return fxc_client_post(c, &s->set_cb) ? 0 : FX_ECLOSED;
}

int fx_subscription_stats(fx_subscription *s, fx_sub_stats *st)
{
    if (s == NULL || st == NULL)
        return -EINVAL;
    *st = (fx_sub_stats){
        .received = atomic_load(&s->received),
        .delivered = atomic_load(&s->delivered),
        .dropped = atomic_load(&s->dropped),
        .dropped_batches = atomic_load(&s->dropped_batches),
        .gaps = atomic_load(&s->gaps),
        .missed = atomic_load(&s->missed),
        .reconnects = atomic_load(&s->reconnects),
        .owner_changes = atomic_load(&s->owner_changes),
        .queue_depth = fx_queue_depth(&s->q),
        .subscription_id = atomic_load(&s->id),
    };
    return 0;
}

int fx_subscription_error(fx_subscription *s, fx_sub_error *e)
{
    if (s == NULL || e == NULL)
        return -EINVAL;
    pthread_mutex_lock(&s->c->mu);
    *e = s->err;
    pthread_mutex_unlock(&s->c->mu);
    return 0;
}

void fx_unsubscribe(fx_subscription *s)
{
    if (s == NULL)
        return;
    fx_client *c = s->c;
    pthread_mutex_lock(&c->mu);
    s->closed = true;
    pthread_mutex_unlock(&c->mu);
    sub_wake_all(s);
    fx_queue_close(&s->q);
    /* Once the client is closed, its close task has ended every
     * subscription on the loop; before that, the stop task does. */
    fxc_client_post(c, &s->stop);
    fxc_sub_unref(s);
}
