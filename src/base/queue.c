/* Bounded MPMC queue (a Vyukov ring with per-cell sequence numbers) plus the
 * three full-queue policies and the park/resume protocol for BLOCK. Push and
 * pop are lock-free; only the waiter list, touched when producers park, has a
 * mutex. The growable form swaps the ring for a plain circular array under a
 * mutex that can be reallocated; the depth counter, the policies and parking
 * are the same code for both. Any thread. */
#include "base/queue.h"

#include "felix/error.h"

#include <assert.h>
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RELAXED memory_order_relaxed

static void count(atomic_uint_fast64_t *c)
{
    atomic_fetch_add_explicit(c, 1, RELAXED);
}

static size_t round_pow2(size_t n)
{
    size_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

/* ---- init / deinit ------------------------------------------------------ */

static int check_opts(const fx_queue_opts *o)
{
    if (o->capacity == 0 || o->capacity > FX_QUEUE_MAX_CAPACITY)
        return -EINVAL;
    if (o->low_watermark >= o->capacity)
        return -EINVAL;
    if (o->policy != FX_QUEUE_BLOCK && o->policy != FX_QUEUE_DROP_NEW &&
        o->policy != FX_QUEUE_DROP_OLD)
        return -EINVAL;
    return 0;
}

static int ring_init(fx_queue *q, size_t ring)
{
    q->cells = malloc(ring * sizeof(*q->cells));
    if (q->cells == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < ring; i++) {
        atomic_init(&q->cells[i].seq, i);
        q->cells[i].item = NULL;
    }
    q->mask = ring - 1;
    return 0;
}

static int growable_init(fx_queue *q, size_t ring, size_t initial)
{
    q->gmax = ring;
    q->gsize = round_pow2(initial < ring ? initial : ring);
    q->items = malloc(q->gsize * sizeof(*q->items));
    if (q->items == NULL)
        return -ENOMEM;
    int rv = pthread_mutex_init(&q->ring_mu, NULL);
    if (rv != 0) {
        free(q->items);
        q->items = NULL;
        return -rv;
    }
    q->growable = true;
    return 0;
}

static void storage_free(fx_queue *q)
{
    if (q->growable) {
        pthread_mutex_destroy(&q->ring_mu);
        free(q->items);
        q->items = NULL;
    } else {
        free(q->cells);
        q->cells = NULL;
    }
}

int fx_queue_init(fx_queue *q, const fx_queue_opts *o)
{
    int rv = check_opts(o);
    if (rv != 0)
        return rv;
    memset(q, 0, sizeof(*q));
    size_t ring = round_pow2(o->capacity);
    rv = o->initial_cells != 0 ? growable_init(q, ring, o->initial_cells) : ring_init(q, ring);
    if (rv != 0)
        return rv;
    rv = pthread_mutex_init(&q->wait_mu, NULL);
    if (rv != 0) {
        storage_free(q);
        return -rv;
    }
    q->capacity = o->capacity;
    q->low_wm = o->low_watermark != 0 ? o->low_watermark : o->capacity / 2;
    q->policy = o->policy;
    q->on_drop = o->on_drop;
    q->user = o->user;
    return 0;
}

static int take(fx_queue *q, void **pitem);

void fx_queue_deinit(fx_queue *q)
{
    assert(q->whead == NULL);
    void *item;
    while (take(q, &item) == 0) {
        if (q->on_drop != NULL)
            q->on_drop(item, q->user);
    }
    pthread_mutex_destroy(&q->wait_mu);
    storage_free(q);
}

/* ---- the ring ----------------------------------------------------------- */

/* Claims one unit of the logical bound. The depth counter, not the ring size,
 * is what makes the bound exact for any capacity. */
static bool reserve(fx_queue *q)
{
    size_t d = atomic_load(&q->depth);
    do {
        if (d >= q->capacity)
            return false;
    } while (!atomic_compare_exchange_weak(&q->depth, &d, d + 1));
    return true;
}

/* The growable ring. Every access holds ring_mu, so the array can be
 * replaced. The reservation made before put() guarantees gcount < gmax. */

/* Doubles the ring, keeping the items in order. Returns 0 or -ENOMEM. */
static int grow(fx_queue *q)
{
    size_t nsize = q->gsize * 2;
    void **n = malloc(nsize * sizeof(*n));
    if (n == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < q->gcount; i++)
        n[i] = q->items[(q->ghead + i) & (q->gsize - 1)];
    free(q->items);
    q->items = n;
    q->gsize = nsize;
    q->ghead = 0;
    return 0;
}

static int put_growable(fx_queue *q, void *item)
{
    pthread_mutex_lock(&q->ring_mu);
    assert(q->gcount < q->gmax);
    if (q->gcount == q->gsize && grow(q) != 0) {
        pthread_mutex_unlock(&q->ring_mu);
        return -ENOMEM;
    }
    q->items[(q->ghead + q->gcount) & (q->gsize - 1)] = item;
    q->gcount++;
    pthread_mutex_unlock(&q->ring_mu);
    return 0;
}

static int take_growable(fx_queue *q, void **pitem)
{
    pthread_mutex_lock(&q->ring_mu);
    if (q->gcount == 0) {
        pthread_mutex_unlock(&q->ring_mu);
        return -EAGAIN;
    }
    *pitem = q->items[q->ghead];
    q->ghead = (q->ghead + 1) & (q->gsize - 1);
    q->gcount--;
    pthread_mutex_unlock(&q->ring_mu);
    /* seq_cst: pairs with the waiter count in park() (see resume_check). */
    atomic_fetch_sub(&q->depth, 1);
    return 0;
}

/* Writes |item| into the next position. A reservation guarantees the cell is
 * free once every earlier pop has finished; with one consumer that is always
 * already true. With concurrent pops (DROP_OLD evictions) a preempted popper
 * may still hold the cell, so wait for it to publish. Returns 0, or -ENOMEM
 * when a growable ring could not grow. */
static int put(fx_queue *q, void *item)
{
    if (q->growable)
        return put_growable(q, item);
    size_t pos = atomic_fetch_add_explicit(&q->tail, 1, RELAXED);
    fx_queue_cell *c = &q->cells[pos & q->mask];
    while (atomic_load_explicit(&c->seq, memory_order_acquire) != pos)
        sched_yield();
    c->item = item;
    atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
    return 0;
}

/* Claims the head cell if its item is published. Returns 0 or -EAGAIN. */
static int take(fx_queue *q, void **pitem)
{
    if (q->growable)
        return take_growable(q, pitem);
    size_t pos = atomic_load_explicit(&q->head, RELAXED);
    fx_queue_cell *c;
    for (;;) {
        c = &q->cells[pos & q->mask];
        size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        intptr_t diff = (intptr_t)(seq - (pos + 1));
        if (diff < 0)
            return -EAGAIN;
        if (diff > 0) {
            pos = atomic_load_explicit(&q->head, RELAXED);
            continue;
        }
        if (atomic_compare_exchange_weak_explicit(&q->head, &pos, pos + 1, RELAXED, RELAXED))
            break;
    }
    *pitem = c->item;
    atomic_store_explicit(&c->seq, pos + q->mask + 1, memory_order_release);
    /* seq_cst: pairs with the waiter count in park() (see resume_check). */
    atomic_fetch_sub(&q->depth, 1);
    return 0;
}

/* ---- push / pop --------------------------------------------------------- */

static void resume_check(fx_queue *q, size_t depth);

static void drop(fx_queue *q, void *item)
{
    count(&q->dropped);
    if (q->on_drop != NULL)
        q->on_drop(item, q->user);
}

int fx_queue_push(fx_queue *q, void *item)
{
    if (atomic_load_explicit(&q->closed, RELAXED))
        return FX_ECLOSED;
    while (!reserve(q)) {
        if (q->policy == FX_QUEUE_BLOCK)
            return FX_EFULL;
        if (q->policy == FX_QUEUE_DROP_NEW) {
            drop(q, item);
            return FX_EFULL;
        }
        void *old;
        if (take(q, &old) == 0)
            drop(q, old);
        else
            sched_yield(); /* the head is a push still in progress */
    }
    if (put(q, item) != 0) {
        /* Give the reservation back; a producer parked meanwhile is resumed
         * by this same check. */
        resume_check(q, atomic_fetch_sub(&q->depth, 1) - 1);
        return -ENOMEM;
    }
    count(&q->enqueued);
    return 0;
}

int fx_queue_pop(fx_queue *q, void **pitem)
{
    int rv = take(q, pitem);
    if (rv != 0)
        return rv;
    count(&q->dequeued);
    resume_check(q, atomic_load(&q->depth));
    return 0;
}

/* ---- parking ------------------------------------------------------------ */

void fx_queue_waiter_init(fx_queue_waiter *w, fx_queue_resume_cb on_resume, void *user)
{
    w->on_resume = on_resume;
    w->user = user;
    w->next = NULL;
    w->prev = NULL;
    w->parked = false;
}

static void unlink_waiter(fx_queue *q, fx_queue_waiter *w)
{
    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        q->whead = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    else
        q->wtail = w->prev;
    w->next = w->prev = NULL;
    w->parked = false;
    atomic_fetch_sub(&q->nwaiters, 1);
}

/* Resumes the waiters parked when this starts, head first. Each one is taken
 * off the list under the lock and called without it, so on_resume may push,
 * park again or free its waiter. Waiters that park meanwhile are left alone
 * (their own re-check covers them), which bounds the loop. */
static void resume_waiters(fx_queue *q)
{
    pthread_mutex_lock(&q->wait_mu);
    size_t n = atomic_load_explicit(&q->nwaiters, RELAXED);
    pthread_mutex_unlock(&q->wait_mu);
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&q->wait_mu);
        fx_queue_waiter *w = q->whead;
        if (w != NULL)
            unlink_waiter(q, w);
        pthread_mutex_unlock(&q->wait_mu);
        if (w == NULL)
            return;
        w->on_resume(w->user);
    }
}

/* The consumer lowers the depth and then reads the waiter count; a parking
 * producer raises the count and then reads the depth. Both are seq_cst, so at
 * least one side sees the other and a wakeup cannot be lost between "full"
 * and "parked". */
static void resume_check(fx_queue *q, size_t depth)
{
    if (depth <= q->low_wm && atomic_load(&q->nwaiters) > 0)
        resume_waiters(q);
}

int fx_queue_park(fx_queue *q, fx_queue_waiter *w)
{
    pthread_mutex_lock(&q->wait_mu);
    /* Checked under the lock close() takes, so a waiter is either refused
     * here or on the list close() drains. */
    if (atomic_load_explicit(&q->closed, RELAXED)) {
        pthread_mutex_unlock(&q->wait_mu);
        return FX_ECLOSED;
    }
    assert(!w->parked);
    w->next = NULL;
    w->prev = q->wtail;
    if (q->wtail != NULL)
        q->wtail->next = w;
    else
        q->whead = w;
    q->wtail = w;
    w->parked = true;
    atomic_fetch_add(&q->nwaiters, 1);
    count(&q->parks);
    pthread_mutex_unlock(&q->wait_mu);
    resume_check(q, atomic_load(&q->depth));
    return 0;
}

bool fx_queue_unpark(fx_queue *q, fx_queue_waiter *w)
{
    pthread_mutex_lock(&q->wait_mu);
    bool was = w->parked;
    if (was)
        unlink_waiter(q, w);
    pthread_mutex_unlock(&q->wait_mu);
    return was;
}

void fx_queue_close(fx_queue *q)
{
    pthread_mutex_lock(&q->wait_mu);
    atomic_store(&q->closed, true);
    pthread_mutex_unlock(&q->wait_mu);
    resume_waiters(q);
}

/* ---- introspection ------------------------------------------------------ */

size_t fx_queue_depth(const fx_queue *q)
{
    return atomic_load_explicit(&q->depth, RELAXED);
}

size_t fx_queue_capacity(const fx_queue *q)
{
    return q->capacity;
}

size_t fx_queue_ring_cells(const fx_queue *q)
{
    if (!q->growable)
        return q->mask + 1;
    fx_queue *mq = (fx_queue *)q; /* the lock is not part of the value */
    pthread_mutex_lock(&mq->ring_mu);
    size_t n = q->gsize;
    pthread_mutex_unlock(&mq->ring_mu);
    return n;
}

bool fx_queue_is_closed(const fx_queue *q)
{
    return atomic_load_explicit(&q->closed, RELAXED);
}

void fx_queue_get_stats(const fx_queue *q, fx_queue_stats *st)
{
    st->enqueued = atomic_load_explicit(&q->enqueued, RELAXED);
    st->dequeued = atomic_load_explicit(&q->dequeued, RELAXED);
    st->dropped = atomic_load_explicit(&q->dropped, RELAXED);
    st->parks = atomic_load_explicit(&q->parks, RELAXED);
    st->depth = atomic_load_explicit(&q->depth, RELAXED);
    st->capacity = q->capacity;
    st->waiters = atomic_load_explicit(&q->nwaiters, RELAXED);
}

static const char *const policy_names[] = {
    [FX_QUEUE_BLOCK] = "block",
    [FX_QUEUE_DROP_NEW] = "drop_new",
    [FX_QUEUE_DROP_OLD] = "drop_old",
};

int fx_queue_policy_parse(const char *s, fx_queue_policy *out)
{
    if (s == NULL)
        return FX_ECONFIG;
    for (size_t i = 0; i < sizeof(policy_names) / sizeof(policy_names[0]); i++) {
        if (strcmp(s, policy_names[i]) == 0) {
            *out = (fx_queue_policy)i;
            return 0;
        }
    }
    return FX_ECONFIG;
}

const char *fx_queue_policy_name(fx_queue_policy p)
{
    if ((unsigned)p >= sizeof(policy_names) / sizeof(policy_names[0]))
        return "?";
    return policy_names[p];
}
