/* Subscriptions: the subscribe exchange (connection loop -> the stream's
 * worker registers and snapshots the backlog -> connection loop opens the
 * event stream, writes event_stream_hello and answers subscribed), the feeder
 * on the worker (backlog then live envelopes coalesced into frame lists of
 * cached shared frames), the writer lanes (checkpoint 6: each connection has
 * a few lanes shared by its subscriptions; a lane bounds the frame lists its
 * subscriptions have queued or in writing, and a full lane applies the lane
 * policy to the delivery: drop_new sheds it, drop_old evicts the oldest list
 * of the same subscription, block parks the feeder, which lets checkpoint 5
 * fill), and the connection writer on the connection's loop (continuous
 * pipelining: each subscription writes while its own unacked bytes are under
 * its cap, so a flow-blocked subscriber holds up its neighbours only by
 * keeping their shared lane full). Subscribe and unsubscribe travel as tasks,
 * never through a lane, so no lane policy applies to them. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/broker_internal.h"
#include "felix/error.h"

static void lane_release(fxb_lane *ln);

/* ---- references and tasks ------------------------------------------------------ */

static void list_free(fx_frame_list *l)
{
    if (l == NULL)
        return;
    fx_frame_list_clear(l);
    free(l);
}

static void sub_ref(fxb_sub *sub)
{
    atomic_fetch_add_explicit(&sub->refs, 1, memory_order_relaxed);
}

void fxb_sub_unref(fxb_sub *sub)
{
    if (atomic_fetch_sub_explicit(&sub->refs, 1, memory_order_acq_rel) != 1)
        return;
    list_free(sub->held);
    if (sub->cur != NULL && sub->cur_charged)
        lane_release(sub->ln); /* closing did not run (never listed) */
    list_free(sub->cur);
    fx_queue_deinit(&sub->lane); /* remaining lists: released, not drops (closed) */
    fx_stream_handle_unref(sub->h);
    fxb_conn_unref(sub->conn);
    free(sub);
}

/* Posts |t| (embedded in |sub|) to |l|, holding a reference until it ran. */
static void sub_post(fxb_sub *sub, fx_loop *l, fx_task *t)
{
    sub_ref(sub);
    if (!fx_loop_post(l, t))
        fxb_sub_unref(sub); /* already pending: that run holds a reference */
}

void fxb_conn_kick_writer(fxb_conn *c)
{
    fxb_conn_ref(c);
    if (!fx_loop_post(c->loop, &c->writer_task))
        fxb_conn_unref(c);
}

/* ---- writer lanes (checkpoint 6) -------------------------------------------------- */

uint64_t fx_broker_lane_hash(uint64_t key)
{
    /* splitmix64's finalizer: consecutive ids spread over the lanes. */
    key ^= key >> 30;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 27;
    key *= 0x94d049bb133111ebull;
    key ^= key >> 31;
    return key;
}

static uint32_t lane_count_of(const fx_broker_opts *o)
{
    if (o->subscriber_single_writer_per_conn)
        return 1;
    uint32_t n = o->subscriber_writer_lanes;
    if (o->max_subscriber_writer_lanes != 0 && n > o->max_subscriber_writer_lanes)
        n = o->max_subscriber_writer_lanes;
    return n == 0 ? 1 : n;
}

int fxb_conn_lanes_init(fxb_conn *c)
{
    uint32_t n = lane_count_of(&c->b->o);
    c->lanes = calloc(n, sizeof(*c->lanes));
    if (c->lanes == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        fxb_lane *ln = &c->lanes[i];
        int rv = pthread_mutex_init(&ln->mu, NULL);
        if (rv != 0) {
            c->nlanes = i;
            fxb_conn_lanes_deinit(c);
            return -rv;
        }
        ln->index = i;
        ln->capacity = c->b->o.subscriber_lane_queue_depth;
        atomic_init(&ln->count, 0);
        atomic_init(&ln->nwaiters, 0);
    }
    c->nlanes = n;
    return 0;
}

void fxb_conn_lanes_deinit(fxb_conn *c)
{
    for (uint32_t i = 0; i < c->nlanes; i++) {
        /* Every subscription released its slots and left the parked list. */
        assert(atomic_load(&c->lanes[i].count) == 0 && c->lanes[i].whead == NULL);
        pthread_mutex_destroy(&c->lanes[i].mu);
    }
    free(c->lanes);
    c->lanes = NULL;
    c->nlanes = 0;
}

/* The lane of a new subscription |sub| of |c| (conn loop). */
static fxb_lane *lane_choose(fxb_conn *c, const fxb_sub *sub)
{
    uint64_t key;
    switch (c->b->o.subscriber_lane_shard) {
    case FX_BROKER_LANE_CONNECTION_ID_HASH:
        key = fx_broker_lane_hash(c->id);
        break;
    case FX_BROKER_LANE_ROUND_ROBIN_PIN:
        key = c->rr_next++;
        break;
    default: /* auto, subscriber_id_hash */
        key = fx_broker_lane_hash(sub->id);
        break;
    }
    return &c->lanes[key % c->nlanes];
}

/* Takes one slot of |ln| if it has room. Any thread. */
static bool lane_reserve(fxb_lane *ln)
{
    size_t n = atomic_load_explicit(&ln->count, memory_order_relaxed);
    while (n < ln->capacity)
        if (atomic_compare_exchange_weak(&ln->count, &n, n + 1))
            return true;
    return false;
}

static void lane_on_resume(fxb_sub *sub);

/* Resumes every feeder parked on |ln|: each retries, and those that find it
 * full again park again. Any thread, no lock held. */
static void lane_wake(fxb_lane *ln)
{
    pthread_mutex_lock(&ln->mu);
    fxb_sub *list = ln->whead;
    ln->whead = ln->wtail = NULL;
    for (fxb_sub *p = list; p != NULL; p = p->lwnext) {
        p->lwaiting = false;
        atomic_fetch_sub(&ln->nwaiters, 1);
    }
    pthread_mutex_unlock(&ln->mu);
    while (list != NULL) {
        fxb_sub *sub = list;
        list = sub->lwnext;
        sub->lwnext = NULL;
        lane_on_resume(sub);
        fxb_sub_unref(sub); /* the parked list's */
    }
}

/* Gives back one slot of |ln| (a list was sent, evicted without a
 * replacement, or discarded with its closed subscription). The decrement and
 * the waiter check are sequentially consistent, as are the park's increment
 * and count check: either the parking feeder sees the room or this sees it
 * parked. Any thread. */
static void lane_release(fxb_lane *ln)
{
    size_t before = atomic_fetch_sub(&ln->count, 1);
    assert(before > 0);
    (void)before;
    if (atomic_load(&ln->nwaiters) > 0)
        lane_wake(ln);
}

/* Parks |sub|'s feeder on its full block lane. Returns true when parked (the
 * lane resumes it once a slot is released), false when room appeared
 * meanwhile or the subscription closed (retry; the retry sees it). Worker. */
static bool lane_park(fxb_sub *sub)
{
    fxb_lane *ln = sub->ln;
    pthread_mutex_lock(&ln->mu);
    atomic_fetch_add(&ln->nwaiters, 1);
    if (atomic_load(&ln->count) < ln->capacity ||
        atomic_load_explicit(&sub->closed, memory_order_acquire)) {
        atomic_fetch_sub(&ln->nwaiters, 1);
        pthread_mutex_unlock(&ln->mu);
        return false;
    }
    sub_ref(sub); /* the parked list's */
    sub->lwaiting = true;
    sub->lwnext = NULL;
    if (ln->wtail != NULL)
        ln->wtail->lwnext = sub;
    else
        ln->whead = sub;
    ln->wtail = sub;
    pthread_mutex_unlock(&ln->mu);
    return true;
}

/* Takes a closed |sub| off its lane's parked list (it will not be resumed).
 * Any thread. */
static void lane_unpark(fxb_sub *sub)
{
    fxb_lane *ln = sub->ln;
    bool was = false;
    pthread_mutex_lock(&ln->mu);
    if (sub->lwaiting) {
        fxb_sub *prev = NULL;
        for (fxb_sub *p = ln->whead; p != NULL; prev = p, p = p->lwnext) {
            if (p != sub)
                continue;
            if (prev != NULL)
                prev->lwnext = p->lwnext;
            else
                ln->whead = p->lwnext;
            if (ln->wtail == p)
                ln->wtail = prev;
            break;
        }
        sub->lwaiting = false;
        sub->lwnext = NULL;
        atomic_fetch_sub(&ln->nwaiters, 1);
        was = true;
    }
    pthread_mutex_unlock(&ln->mu);
    if (was)
        fxb_sub_unref(sub);
}

static fx_ratelimit lane_drop_rl = FX_RATELIMIT_INIT;

/* Sheds |l| of |sub| at its lane: counted (unless the subscription is gone,
 * which is no overload) and freed. Any thread. */
static void lane_shed(fxb_sub *sub, fx_frame_list *l)
{
    if (!atomic_load_explicit(&sub->closed, memory_order_acquire)) {
        FX_COUNTER_INC(subscriber_lane_dropped);
        FX_COUNTER_ADD(subscriber_lane_dropped_events, l->events);
        FX_LOG_RATELIMITED(&lane_drop_rl, fx_now_ns(), FX_LOG_WARN, "broker",
                           "writer lane %u of conn %llu full: dropped %u message(s) sub=%llu",
                           (unsigned)sub->ln->index, (unsigned long long)sub->conn->id,
                           (unsigned)l->events, (unsigned long long)sub->id);
        atomic_fetch_add_explicit(&sub->lane_dropped_events, l->events, memory_order_relaxed);
    }
    list_free(l);
}

/* on_drop of a subscription's own queue, whose policy never sheds: called
 * for the lists still queued when it is freed, each holding a lane slot. */
static void lane_on_leftover(void *item, void *user)
{
    fxb_sub *sub = user;
    lane_release(sub->ln);
    list_free(item);
}

static void feed_task_cb(fx_loop *l, fx_task *t, void *user);

static void lane_on_resume(fxb_sub *sub)
{
    atomic_store_explicit(&sub->lane_resumed, true, memory_order_release);
    sub_post(sub, sub->w->loop, &sub->feed_task);
}

/* ---- feeder (worker loop) ---------------------------------------------------------- */

static void on_sub_wake(fx_subscriber *s, void *user)
{
    (void)s;
    fxb_sub *sub = user;
    if (atomic_load_explicit(&sub->active, memory_order_acquire))
        sub_post(sub, sub->w->loop, &sub->feed_task);
}

/* Pulls the backlog first, then the live queue. */
typedef struct feed_pull {
    fxb_sub *sub;
    fx_subscriber_puller live;
} feed_pull;

static bool pull_cb(void *user, fx_env_item *out)
{
    feed_pull *p = user;
    fxb_sub *sub = p->sub;
    if (sub->backlog_pos < sub->backlog.n) {
        *out = sub->backlog.items[sub->backlog_pos];
        sub->backlog.items[sub->backlog_pos++].env = NULL; /* ownership moves */
        return true;
    }
    return fx_subscriber_pull(&p->live, out);
}

static uint32_t max_events(const fx_broker_opts *o)
{
    if (o->fanout_batch_size <= 1)
        return 1;
    return o->event_batch_max_events < o->fanout_batch_size ? o->event_batch_max_events
                                                            : o->fanout_batch_size;
}

/* Queues |l| on |sub|'s own queue under the lane slot the caller holds and
 * kicks the writer. Returns true when |l| is taken care of (queued, or shed
 * and counted when the queue's ring could not grow); false when the queue is
 * closed (the slot is given back, the caller still owns |l|). The queue holds
 * at most the lane's slots, so it refuses only then. Worker. */
static bool lane_enqueue(fxb_sub *sub, fx_frame_list *l)
{
    int rv = fx_queue_push(&sub->lane, l);
    if (rv == 0) {
        fxb_conn_kick_writer(sub->conn);
        return true;
    }
    lane_release(sub->ln);
    if (rv != -ENOMEM)
        return false;
    lane_shed(sub, l);
    return true;
}

/* Queues |l| on |sub|'s own queue under a slot of its lane, applying the
 * lane policy when the lane is full. Returns false when the feeder must stop
 * (block lane full: parked with |l| held; or closed). Worker. */
static bool lane_push(fxb_sub *sub, fx_frame_list *l)
{
    fxb_lane *ln = sub->ln;
    for (;;) {
        if (atomic_load_explicit(&sub->closed, memory_order_acquire))
            break;
        if (lane_reserve(ln)) {
            if (lane_enqueue(sub, l))
                return true;
            break;
        }
        switch (sub->b->o.subscriber_lane_queue_policy) {
        case FX_QUEUE_DROP_OLD: {
            /* Only this subscription's own oldest queued list may go: its
             * slot passes to |l|. With nothing of its own queued (its
             * neighbours fill the lane) the oldest of its deliveries is |l|. */
            void *old;
            if (fx_queue_pop(&sub->lane, &old) != 0) {
                lane_shed(sub, l);
                return true;
            }
            lane_shed(sub, old);
            if (lane_enqueue(sub, l))
                return true;
            break;
        }
        case FX_QUEUE_DROP_NEW:
            lane_shed(sub, l);
            return true;
        default:
            /* Set up before parking: the resume may be posted at once (it
             * runs on this thread, after we return). */
            sub->held = l;
            sub->lane_parked = true;
            if (lane_park(sub))
                return false;
            sub->lane_parked = false;
            sub->held = NULL;
            break; /* room appeared, or closed: retry */
        }
    }
    list_free(l); /* closed */
    return false;
}

/* With coalescing on, a feeder woken by fewer envelopes than a full batch
 * waits up to event_batch_max_delay for more. Returns true to wait. */
static bool should_wait(fxb_sub *sub, fx_loop *l)
{
    const fx_broker_opts *o = &sub->b->o;
    if (fx_timer_is_armed(&sub->delay_timer))
        return true;
    if (max_events(o) <= 1 || o->event_batch_max_delay_ns == 0 ||
        sub->backlog_pos < sub->backlog.n || fx_coalescer_has_pending(&sub->co))
        return false;
    /* Wait only while fewer messages than one full write are queued: a full
     * publish batch (or several envelopes adding up to one) goes at once. */
    fx_subscriber_stats st;
    fx_subscriber_get_stats(sub->sub, &st);
    if (st.depth == 0 || st.queued_items >= max_events(o))
        return false;
    fx_loop_timer_arm(l, &sub->delay_timer, fx_loop_now(l) + o->event_batch_max_delay_ns);
    return true;
}

/* A deleted stream's subscription has handed everything to its lane: the
 * writer finishes the event stream once the lane is empty. The flag is set
 * after the last push, so a writer that sees it and then an empty lane has
 * seen every list. */
static void request_fin(fxb_sub *sub)
{
    if (sub->held != NULL || sub->backlog_pos < sub->backlog.n ||
        fx_coalescer_has_pending(&sub->co) ||
        atomic_load_explicit(&sub->fin_req, memory_order_relaxed))
        return;
    atomic_store_explicit(&sub->fin_req, true, memory_order_release);
    fxb_conn_kick_writer(sub->conn);
}

static void feed(fxb_sub *sub, fx_loop *l, bool waited)
{
    if (atomic_load_explicit(&sub->closed, memory_order_acquire) || !sub->registered ||
        !atomic_load_explicit(&sub->active, memory_order_acquire))
        return;
    if (sub->lane_parked) {
        if (!atomic_exchange_explicit(&sub->lane_resumed, false, memory_order_acq_rel))
            return; /* still parked: the lane's resume will call again */
        sub->lane_parked = false;
    }
    if (sub->held != NULL) {
        fx_frame_list *h = sub->held;
        sub->held = NULL;
        if (!lane_push(sub, h))
            return;
    }
    if (!waited && !sub->ending && should_wait(sub, l))
        return;
    const fx_broker_opts *o = &sub->b->o;
    /* One list is one write: bounded by both the event frame limit and the
     * writer's per-write cap. */
    uint64_t max_bytes = o->event_batch_max_bytes < o->subscriber_max_bytes_per_write
                             ? o->event_batch_max_bytes
                             : o->subscriber_max_bytes_per_write;
    fx_coalesce_opts co = {
        .subscription_id = sub->id, .max_events = max_events(o), .max_bytes = (size_t)max_bytes};
    feed_pull p = {.sub = sub, .live = {.sub = sub->sub, .now = fx_loop_now(l)}};
    for (int i = 0; i < FXB_FEEDER_BATCH; i++) {
        fx_frame_list *fl = malloc(sizeof(*fl));
        if (fl == NULL)
            return; /* retried at the next wake */
        fl->n = 0;
        int rv = fx_coalesce_next(&sub->co, pull_cb, &p, &co, fl);
        if (rv != 0)
            FX_LOG_ERROR("broker", "subscription %llu: encoding failed: %s",
                         (unsigned long long)sub->id, fx_strerror(rv));
        if (fl->n == 0) {
            list_free(fl);
            if (sub->ending)
                request_fin(sub);
            return;
        }
        if (!lane_push(sub, fl))
            return;
    }
    sub_post(sub, l, &sub->feed_task); /* more may be queued: yield first */
}

static void feed_task_cb(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_sub *sub = user;
    feed(sub, l, false);
    fxb_sub_unref(sub);
}

static void delay_cb(fx_loop *l, fx_timer *t, void *user)
{
    (void)t;
    feed(user, l, true);
}

/* ---- registration (worker) ------------------------------------------------------------ */

/* w->subs: the registered subscriptions of a worker (worker thread). */
static void wlist_add(fxb_sub *sub)
{
    fxb_worker *w = sub->w;
    sub->wprev = NULL;
    sub->wnext = w->subs;
    if (w->subs != NULL)
        w->subs->wprev = sub;
    w->subs = sub;
}

static void wlist_remove(fxb_sub *sub)
{
    if (sub->wprev != NULL)
        sub->wprev->wnext = sub->wnext;
    else
        sub->w->subs = sub->wnext;
    if (sub->wnext != NULL)
        sub->wnext->wprev = sub->wprev;
    sub->wnext = sub->wprev = NULL;
}

/* Frees the worker's state of a deleted stream once no subscriber and no
 * parked fanout uses it (ids are never reused, so the slot stays empty). */
static void free_if_deleted(fxb_worker *w, fx_stream_handle *h)
{
    size_t idx = (size_t)(fx_stream_handle_id(h) / w->b->nworkers);
    if (fx_stream_handle_is_active(h) || idx >= w->nstreams || w->streams[idx] == NULL)
        return;
    fx_stream *st = w->streams[idx];
    if (fx_stream_subscriber_count(st) > 0 || fx_stream_is_parked(st) || w->parked_stream == st)
        return;
    fx_stream_free(st);
    w->streams[idx] = NULL;
}

static void reply_task_cb(fx_loop *l, fx_task *t, void *user);

static void reg_task_cb(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_sub *sub = user;
    if (!atomic_load_explicit(&sub->closed, memory_order_acquire)) {
        /* A stream deleted meanwhile must not be created again here. */
        sub->stream = fx_stream_handle_is_active(sub->h) ? fxb_worker_stream(sub->w, sub->h) : NULL;
        sub->reg_rv = fx_stream_handle_is_active(sub->h) ? -ENOMEM : FX_ENOSTREAM;
        if (sub->stream != NULL) {
            fx_subscribe_opts so = {
                .subscription_id = sub->id, .on_wake = on_sub_wake, .user = sub};
            sub->reg_rv = fx_stream_subscribe(sub->stream, &sub->start, &so, &sub->sub,
                                              &sub->backlog, &sub->available);
        }
        if (sub->reg_rv == 0) {
            sub->registered = true;
            sub_ref(sub); /* the worker's */
            wlist_add(sub);
        }
    }
    sub_post(sub, sub->conn->loop, &sub->reply_task);
    fxb_sub_unref(sub);
}

static void unreg_task_cb(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_sub *sub = user;
    fx_loop_timer_cancel(l, &sub->delay_timer);
    /* The subscription left its lane's parked list when it was closed,
     * before this task was posted: nothing resumes it any more. */
    sub->lane_parked = false;
    list_free(sub->held);
    sub->held = NULL;
    fx_backlog_free(&sub->backlog);
    fx_coalescer_deinit(&sub->co);
    if (sub->registered) {
        sub->registered = false;
        wlist_remove(sub);
        fx_stream_unsubscribe(sub->stream, sub->sub);
        sub->sub = NULL;
        free_if_deleted(sub->w, sub->h);
        fxb_sub_unref(sub); /* the worker's */
    }
    fxb_sub_unref(sub);
}

void fxb_worker_end_stream(fxb_worker *w, fx_stream_handle *h)
{
    fx_stream_handle_set_ended(h);
    for (fxb_sub *sub = w->subs; sub != NULL; sub = sub->wnext) {
        if (sub->h != h || sub->ending)
            continue;
        sub->ending = true;
        /* The feeder sends what is queued, then asks for the FIN; a
         * subscription whose event stream is not open yet gets it when its
         * feeder first runs. */
        sub_post(sub, w->loop, &sub->feed_task);
    }
    free_if_deleted(w, h);
}

/* ---- subscribe exchange (conn loop) ----------------------------------------------------- */

static void reply_cursor_error(fxb_bidi *s, fxb_sub *sub)
{
    fx_msg m;
    fx_msg_cursor_reason why =
        sub->reg_rv == FX_ECURSOR_TOO_OLD ? FX_MSG_CURSOR_TOO_OLD : FX_MSG_CURSOR_IN_FUTURE;
    fx_msg_init_subscribe_cursor_error(&m, why, sub->start.offset, sub->available);
    fxb_bidi_reply_msg(s, &m);
}

/* Opens the event stream and queues the hello as the first write of the
 * subscription (the writer sends it before any event). Returns 0 or an error. */
static int open_events(fxb_sub *sub)
{
    fxb_conn *c = sub->conn;
    fx_msg m;
    fx_msg_init_event_stream_hello(&m, sub->id);
    fx_buf *f;
    int rv = fxb_msg_frame(&m, &f);
    if (rv != 0)
        return rv;
    fx_frame_list *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        fx_buf_unref(f);
        return -ENOMEM;
    }
    l->n = 1;
    l->frames[0] = f;
    l->iov[0] = (struct iovec){.iov_base = (void *)fx_buf_data(f), .iov_len = fx_buf_len(f)};
    l->bytes = fx_buf_len(f);
    rv = fx_quic_conn_open_uni(c->qc, sub, &sub->uni_sid);
    if (rv != 0) {
        list_free(l);
        return rv;
    }
    sub->uni_open = true;
    sub->cur = l;
    sub->cur_idx = 0;
    sub->cur_charged = false; /* the hello takes no lane slot */
    return 0;
}

static void subscribe_failed(fxb_bidi *s, fxb_sub *sub, const char *text)
{
    FX_COUNTER_INC(subscribe_req_error);
    if (text != NULL)
        fxb_bidi_error(s, text, true);
    else
        fxb_bidi_end(s);
    fxb_sub_close(sub, true);
}

static void reply_task_cb(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_sub *sub = user;
    fxb_bidi *s = sub->bidi;
    sub->bidi = NULL;
    s->sub_pending = false;
    char text[160];
    if (atomic_load_explicit(&sub->closed, memory_order_acquire) || s->closed) {
        fxb_sub_close(sub, true);
    } else if (sub->reg_rv == FX_ECURSOR_TOO_OLD || sub->reg_rv == FX_ECURSOR_IN_FUTURE) {
        reply_cursor_error(s, sub);
        subscribe_failed(s, sub, NULL);
    } else if (sub->reg_rv != 0) {
        snprintf(text, sizeof(text), "subscribe failed: %s", fx_strerror(sub->reg_rv));
        subscribe_failed(s, sub, text);
    } else {
        int rv = open_events(sub);
        if (rv != 0) {
            snprintf(text, sizeof(text), "could not open the event stream: %s", fx_strerror(rv));
            subscribe_failed(s, sub, text);
        } else {
            fx_msg m;
            fx_msg_init_subscribed(&m, sub->id);
            fxb_bidi_reply_msg(s, &m);
            fxb_bidi_end(s);
            FX_COUNTER_INC(subscribe_req_ok);
            atomic_store_explicit(&sub->active, true, memory_order_release);
            sub_post(sub, sub->w->loop, &sub->feed_task);
            fxb_conn_kick_writer(sub->conn);
        }
    }
    fxb_bidi_flush(s);
    fxb_bidi_unref(s);
    fxb_sub_unref(sub);
}

static int parse_start(const fx_msg *m, fx_start *st)
{
    switch (fx_msg_effective_start(m)) {
    case FX_MSG_START_EARLIEST:
        *st = (fx_start){.kind = FX_START_EARLIEST};
        return 0;
    case FX_MSG_START_OFFSET:
        *st = (fx_start){.kind = FX_START_OFFSET, .offset = m->start.offset};
        return 0;
    default:
        *st = (fx_start){.kind = FX_START_LATEST};
        return 0;
    }
}

static fxb_sub *sub_new(fxb_bidi *s, fx_stream_handle *h)
{
    fxb_conn *c = s->conn;
    fxb_sub *sub = calloc(1, sizeof(*sub));
    if (sub == NULL)
        return NULL;
    sub->id = atomic_fetch_add(&c->b->next_sub_id, 1);
    sub->ln = lane_choose(c, sub);
    /* The lane policy is applied by lane_push against the lane's bound; this
     * queue only keeps the subscription's lists in order. */
    fx_queue_opts qo = {.capacity = c->b->o.subscriber_lane_queue_depth,
                        .policy = FX_QUEUE_BLOCK,
                        .on_drop = lane_on_leftover,
                        .user = sub,
                        .initial_cells = FX_SUB_QUEUE_INITIAL_CELLS};
    if (fx_queue_init(&sub->lane, &qo) != 0) {
        free(sub);
        return NULL;
    }
    sub->kind = FXB_KIND_SUB;
    atomic_init(&sub->refs, 1);
    atomic_init(&sub->closed, false);
    atomic_init(&sub->active, false);
    atomic_init(&sub->lane_resumed, false);
    atomic_init(&sub->fin_req, false);
    atomic_init(&sub->lane_dropped_events, 0);
    sub->b = c->b;
    sub->w = fxb_worker_for(c->b, h);
    sub->conn = c;
    fxb_conn_ref(c);
    sub->h = fx_stream_handle_ref(h);
    fx_task_init(&sub->reg_task, reg_task_cb, sub);
    fx_task_init(&sub->unreg_task, unreg_task_cb, sub);
    fx_task_init(&sub->feed_task, feed_task_cb, sub);
    fx_task_init(&sub->reply_task, reply_task_cb, sub);
    fx_timer_init(&sub->delay_timer, delay_cb, sub);
    fx_coalescer_init(&sub->co);
    return sub;
}

void fxb_subscribe(fxb_bidi *s, const fx_msg *m)
{
    fxb_conn *c = s->conn;
    fx_stream_handle *h;
    fx_registry_err err;
    fx_wire_slice t = {(const uint8_t *)m->tenant_id, strlen(m->tenant_id)};
    fx_wire_slice ns = {(const uint8_t *)m->ns, strlen(m->ns)};
    fx_wire_slice st = {(const uint8_t *)m->stream, strlen(m->stream)};
    if (fxb_bidi_resolve(s, FX_BROKER_AUTH_SUBSCRIBE, t, ns, st, &h, &err) != 0) {
        FX_COUNTER_INC(subscribe_req_error);
        fxb_bidi_error(s, err.msg, true);
        return;
    }
    if (fxb_is_draining(c->b)) {
        FX_COUNTER_INC(subscribe_req_error);
        fxb_bidi_error(s, FXB_SHUTDOWN_TEXT, true);
        return;
    }
    if (c->nsubs >= c->b->o.max_subscriptions_per_conn) {
        FX_COUNTER_INC(subscribe_req_error);
        fxb_bidi_error(s, "max subscriptions per connection exceeded", true);
        return;
    }
    fxb_sub *sub = sub_new(s, h);
    if (sub == NULL) {
        fxb_bidi_fail(s, "out of memory for a subscription");
        return;
    }
    parse_start(m, &sub->start);
    sub->next = c->subs;
    c->subs = sub;
    sub->listed = true;
    if (c->nsubs++ == 0)
        FX_GAUGE_ADD(sub_active_connections, 1);
    FX_GAUGE_ADD(sub_subscriptions, 1);
    /* The stream ends with the reply, which the worker's answer decides. */
    s->ended = true;
    s->sub_pending = true;
    s->refs++;
    sub->bidi = s;
    sub_post(sub, sub->w->loop, &sub->reg_task);
}

void fxb_sub_close(fxb_sub *sub, bool reset_stream)
{
    if (!sub->listed)
        return;
    fxb_conn *c = sub->conn;
    for (fxb_sub **pp = &c->subs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == sub) {
            *pp = sub->next;
            break;
        }
    }
    sub->listed = false;
    if (--c->nsubs == 0)
        FX_GAUGE_SUB(sub_active_connections, 1);
    FX_GAUGE_SUB(sub_subscriptions, 1);
    atomic_store_explicit(&sub->closed, true, memory_order_release);
    if (sub->uni_open && c->qc != NULL) {
        fx_quic_stream_set_user(c->qc, sub->uni_sid, NULL);
        if (reset_stream)
            fx_quic_stream_reset(c->qc, sub->uni_sid, FXB_CODE_UNSUBSCRIBE);
    }
    sub->uni_open = false;
    /* Its lists leave the lane now, so its neighbours get their room back:
     * a feeder push that raced the close finds the queue closed and gives
     * its slot back itself, or leaves it to fx_queue_deinit's release. */
    fx_queue_close(&sub->lane);
    lane_unpark(sub);
    if (sub->cur != NULL && sub->cur_charged)
        lane_release(sub->ln);
    list_free(sub->cur);
    sub->cur = NULL;
    sub->cur_charged = false;
    void *item;
    while (fx_queue_pop(&sub->lane, &item) == 0) {
        lane_release(sub->ln);
        list_free(item);
    }
    sub_post(sub, sub->w->loop, &sub->unreg_task);
    fxb_sub_unref(sub); /* the connection's */
}

/* ---- connection writer (conn loop) --------------------------------------------------------- */

/* Released by QUIC when the last frame of a list is acknowledged (or the
 * stream or connection is gone): the list's bytes leave the subscription's
 * unacked count. Runs on the connection's loop. */
typedef struct send_token {
    fxb_sub *sub;
    fx_buf *frame;
    size_t bytes;
} send_token;

static void token_free(void *data, size_t len, void *user)
{
    (void)data;
    (void)len;
    send_token *tk = user;
    fxb_sub *sub = tk->sub;
    size_t cap = (size_t)sub->b->o.subscriber_unacked_bytes;
    bool was_full = sub->inflight >= cap;
    sub->inflight -= tk->bytes;
    if (was_full && sub->inflight < cap && !atomic_load(&sub->closed) && !sub->conn->dead)
        fxb_conn_kick_writer(sub->conn);
    fx_buf_unref(tk->frame);
    fxb_sub_unref(sub);
    free(tk);
}

/* The buffer to send for frame |i| of the current list: the frame itself, or
 * for the last frame a wrapper whose release reports the list acknowledged. */
static int frame_buf(fxb_sub *sub, size_t i, fx_buf **pb)
{
    fx_frame_list *l = sub->cur;
    if (i + 1 < l->n) {
        *pb = fx_buf_ref(l->frames[i]);
        return 0;
    }
    send_token *tk = malloc(sizeof(*tk));
    if (tk == NULL)
        return -ENOMEM;
    *tk = (send_token){.sub = sub, .frame = fx_buf_ref(l->frames[i]), .bytes = l->bytes};
    int rv = fx_buf_wrap(pb, l->iov[i].iov_base, l->iov[i].iov_len, token_free, tk);
    if (rv != 0) {
        fx_buf_unref(tk->frame);
        free(tk);
        return rv;
    }
    sub_ref(sub);
    return 0;
}

/* Writes the rest of the current list. Returns 0 (done), FX_EFULL (the
 * connection's unacked cap: wait for on_writable), or another error. */
static int write_list(fxb_conn *c, fxb_sub *sub)
{
    fx_frame_list *l = sub->cur;
    while (sub->cur_idx < l->n) {
        size_t i = sub->cur_idx;
        fx_buf *b;
        int rv = frame_buf(sub, i, &b);
        if (rv != 0)
            return rv;
        size_t off = (size_t)((const uint8_t *)l->iov[i].iov_base - fx_buf_data(b));
        if (i + 1 == l->n) {
            off = 0; /* the wrapper starts at the frame */
            /* Counted before the send: a refused send releases the wrapper,
             * whose token subtracts the same bytes again. */
            sub->inflight += l->bytes;
        }
        rv = fx_quic_stream_send(c->qc, sub->uni_sid, b, off, l->iov[i].iov_len, false);
        fx_buf_unref(b);
        if (rv != 0)
            return rv;
        sub->cur_idx++;
    }
    sub->delivered += l->events;
    sub->last_write_ns = fx_loop_now(c->loop);
    list_free(l);
    sub->cur = NULL;
    if (sub->cur_charged) {
        sub->cur_charged = false;
        lane_release(sub->ln); /* handed to QUIC: the lane has room again */
    }
    return 0;
}

/* Returns false when the connection cannot take more (stop the round). */
static bool write_sub(fxb_conn *c, fxb_sub *sub)
{
    size_t cap = (size_t)c->b->o.subscriber_unacked_bytes;
    while (sub->uni_open && sub->inflight < cap) {
        if (sub->cur == NULL) {
            /* Read the flag before the lane: set after the last push. */
            bool fin = atomic_load_explicit(&sub->fin_req, memory_order_acquire);
            void *item;
            if (fx_queue_pop(&sub->lane, &item) != 0) {
                if (fin && !sub->fin_sent) {
                    sub->fin_sent = true;
                    fx_quic_stream_shutdown(c->qc, sub->uni_sid);
                }
                return true;
            }
            sub->cur = item;
            sub->cur_idx = 0;
            sub->cur_charged = true; /* its lane slot stays taken until sent */
        }
        int rv = write_list(c, sub);
        if (rv == FX_EFULL) {
            c->want_writable = true;
            return false;
        }
        if (rv != 0) {
            FX_COUNTER_INC(subscriber_disconnect);
            FX_LOG_DEBUG("broker", "subscription %llu: write failed: %s",
                         (unsigned long long)sub->id, fx_strerror(rv));
            fxb_sub_close(sub, true);
            return true;
        }
    }
    return true;
}

void fxb_writer_run(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_conn *c = user;
    if (!c->dead && c->qc != NULL && !c->want_writable) {
        fxb_sub *next;
        for (fxb_sub *sub = c->subs; sub != NULL; sub = next) {
            next = sub->next;
            if (!write_sub(c, sub))
                break;
        }
    }
    fxb_conn_unref(c);
}
