/* Byte budgets with optional parents. The fast path is a CAS on the bytes in
 * use; waiters queue FIFO per budget under a mutex. A waiter acquiring on a
 * child first takes the child's bytes, then the parent's, parking on whichever
 * refuses; locks are always taken child before parent. Callbacks run after
 * every lock is dropped. Any thread. */
#include "base/budget.h"

#include "felix/error.h"

#include <assert.h>
#include <errno.h>
#include <string.h>
#include <time.h>

#define RELAXED memory_order_relaxed

static void count(atomic_uint_fast64_t *c)
{
    atomic_fetch_add_explicit(c, 1, RELAXED);
}

/* Waiters whose outcome is decided, to be told once the locks are dropped. */
typedef struct done_list {
    fx_budget_waiter *head;
    fx_budget_waiter *tail;
} done_list;

/* ---- init / deinit ------------------------------------------------------ */

int fx_budget_init(fx_budget *b, size_t capacity, fx_budget *parent)
{
    if (capacity == 0 || parent == b)
        return -EINVAL;
    memset(b, 0, sizeof(*b));
    int rv = pthread_mutex_init(&b->mu, NULL);
    if (rv != 0)
        return -rv;
    b->capacity = capacity;
    b->parent = parent;
    return 0;
}

void fx_budget_deinit(fx_budget *b)
{
    assert(b->head == NULL);
    assert(atomic_load(&b->in_use) == 0);
    pthread_mutex_destroy(&b->mu);
}

/* ---- bytes -------------------------------------------------------------- */

static bool take(fx_budget *b, size_t n)
{
    size_t cur = atomic_load(&b->in_use);
    do {
        if (n > b->capacity - cur)
            return false;
    } while (!atomic_compare_exchange_weak(&b->in_use, &cur, cur + n));
    return true;
}

static void kick(fx_budget *b);

/* Returns |n| bytes to |b|. The seq_cst decrement followed by the seq_cst
 * read of the waiter count pairs with a parker's increment-then-take, so
 * either the releaser sees the waiter or the parker sees the bytes. */
static void give(fx_budget *b, size_t n)
{
    size_t old = atomic_fetch_sub(&b->in_use, n);
    assert(old >= n);
    (void)old;
    if (atomic_load(&b->nwaiters) > 0)
        kick(b);
}

/* Gives |n| back to every budget from |from| up to, not including, |stop|:
 * the bytes a waiter holds while it waits on |stop|. */
static void give_range(fx_budget *from, fx_budget *stop, size_t n)
{
    for (fx_budget *c = from; c != stop; c = c->parent)
        give(c, n);
}

static int check(const fx_budget *b, size_t n)
{
    for (const fx_budget *c = b; c != NULL; c = c->parent) {
        if (n > c->capacity)
            return FX_ETOOBIG;
        if (atomic_load_explicit(&c->closed, RELAXED))
            return FX_ECLOSED;
    }
    return 0;
}

/* ---- waiter lists (under the budget's lock) ----------------------------- */

static void append(fx_budget *b, fx_budget_waiter *w)
{
    w->next = NULL;
    w->prev = b->tail;
    if (b->tail != NULL)
        b->tail->next = w;
    else
        b->head = w;
    b->tail = w;
    w->stage = b;
    w->parked = true;
    atomic_fetch_add(&b->nwaiters, 1);
}

static void unlink_waiter(fx_budget *b, fx_budget_waiter *w)
{
    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        b->head = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    else
        b->tail = w->prev;
    w->next = w->prev = NULL;
    w->parked = false;
    atomic_fetch_sub(&b->nwaiters, 1);
}

static void done_push(done_list *d, fx_budget_waiter *w, int rv, fx_budget *stage)
{
    w->rv = rv;
    w->stage = stage;
    w->next = w->prev = NULL;
    if (d->tail != NULL)
        d->tail->next = w;
    else
        d->head = w;
    d->tail = w;
}

/* Takes |w| out of |d| if it is there; compares pointers only, since a |w|
 * that is not in |d| may already belong to another thread. */
static bool done_remove(done_list *d, fx_budget_waiter *w)
{
    fx_budget_waiter *prev = NULL;
    for (fx_budget_waiter *c = d->head; c != NULL; prev = c, c = c->next) {
        if (c != w)
            continue;
        if (prev != NULL)
            prev->next = c->next;
        else
            d->head = c->next;
        if (d->tail == c)
            d->tail = prev;
        return true;
    }
    return false;
}

/* ---- serving ------------------------------------------------------------ */

static void serve_locked(fx_budget *b, done_list *d);

/* |w| holds its bytes on every budget below |c| and the caller holds their
 * locks. Takes |c|'s bytes and moves on up, or parks |w| on |c|. */
static void advance(fx_budget *c, fx_budget_waiter *w, done_list *d)
{
    if (c == NULL) {
        done_push(d, w, 0, NULL);
        return;
    }
    pthread_mutex_lock(&c->mu);
    if (atomic_load_explicit(&c->closed, RELAXED)) {
        done_push(d, w, FX_ECLOSED, c);
    } else if (atomic_load(&c->nwaiters) == 0 && take(c, w->n)) {
        advance(c->parent, w, d);
    } else {
        /* Re-serve after registering: bytes released between the failed
         * take and the append would otherwise wake nobody. */
        append(c, w);
        serve_locked(c, d);
    }
    pthread_mutex_unlock(&c->mu);
}

/* Grants from the head while the head fits; a large head blocks the small
 * requests behind it, so nobody starves. Caller holds |b->mu|. */
static void serve_locked(fx_budget *b, done_list *d)
{
    fx_budget_waiter *w;
    while ((w = b->head) != NULL && take(b, w->n)) {
        unlink_waiter(b, w);
        advance(b->parent, w, d);
    }
}

/* Fills the permit (or gives back what a failed waiter held) and tells the
 * owner. Reads |next| first: on_granted may free its waiter. */
static void notify(done_list *d)
{
    fx_budget_waiter *next;
    for (fx_budget_waiter *w = d->head; w != NULL; w = next) {
        next = w->next;
        if (w->rv == 0) {
            *w->out = (fx_permit){.budget = w->origin, .n = w->n};
            count(&w->origin->acquired);
        } else {
            give_range(w->origin, w->stage, w->n);
        }
        w->on_granted(w->user, w->rv);
    }
}

static void kick(fx_budget *b)
{
    done_list d = {0};
    pthread_mutex_lock(&b->mu);
    serve_locked(b, &d);
    pthread_mutex_unlock(&b->mu);
    notify(&d);
}

static void lock_chain(fx_budget *b)
{
    for (fx_budget *c = b; c != NULL; c = c->parent)
        pthread_mutex_lock(&c->mu);
}

static void unlock_chain(fx_budget *b)
{
    for (fx_budget *c = b; c != NULL; c = c->parent)
        pthread_mutex_unlock(&c->mu);
}

/* ---- acquire ------------------------------------------------------------ */

int fx_budget_try_acquire(fx_budget *b, size_t n, fx_permit *p)
{
    return fx_budget_try_acquire_from(b, n, p, NULL);
}

int fx_budget_try_acquire_from(fx_budget *b, size_t n, fx_permit *p, const fx_budget **refused)
{
    int rv = check(b, n);
    if (rv != 0)
        return rv;
    for (fx_budget *c = b; c != NULL; c = c->parent) {
        if (atomic_load(&c->nwaiters) > 0 || !take(c, n)) {
            count(&c->refused);
            give_range(b, c, n);
            if (refused)
                *refused = c;
            return FX_EFULL;
        }
    }
    count(&b->acquired);
    *p = (fx_permit){.budget = b, .n = n};
    return 0;
}

int fx_budget_acquire(fx_budget *b, size_t n, fx_budget_waiter *w, fx_permit *p)
{
    int rv = check(b, n);
    if (rv != 0)
        return rv;
    w->origin = b;
    w->stage = NULL;
    w->out = p;
    w->n = n;
    w->rv = 0;
    w->parked = false;
    done_list d = {0};
    advance(b, w, &d);
    bool now = done_remove(&d, w);
    notify(&d);
    if (!now) {
        count(&b->waited);
        return -EAGAIN;
    }
    if (w->rv != 0) {
        give_range(b, w->stage, n);
        return w->rv;
    }
    count(&b->acquired);
    *p = (fx_permit){.budget = b, .n = n};
    return 0;
}

bool fx_budget_cancel(fx_budget *b, fx_budget_waiter *w)
{
    lock_chain(b);
    assert(w->origin == b);
    bool was = w->parked;
    fx_budget *stage = w->stage;
    if (was)
        unlink_waiter(stage, w);
    unlock_chain(b);
    if (!was)
        return false;
    give_range(b, stage, w->n);
    /* |w| may have been the head that blocked smaller requests. */
    if (atomic_load(&stage->nwaiters) > 0)
        kick(stage);
    return true;
}

void fx_permit_release(fx_permit *p)
{
    if (p == NULL || p->budget == NULL)
        return;
    fx_budget *b = p->budget;
    size_t n = p->n;
    p->budget = NULL;
    p->n = 0;
    give_range(b, NULL, n);
}

/* ---- blocking acquire (user threads) ------------------------------------ */

typedef struct sync_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int rv;
} sync_wait;

static int sync_init(sync_wait *s)
{
    pthread_condattr_t ca;
    int rv = pthread_condattr_init(&ca);
    if (rv != 0)
        return -rv;
    rv = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rv == 0)
        rv = pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rv != 0)
        return -rv;
    rv = pthread_mutex_init(&s->mu, NULL);
    if (rv != 0) {
        pthread_cond_destroy(&s->cv);
        return -rv;
    }
    s->done = false;
    s->rv = 0;
    return 0;
}

static void sync_destroy(sync_wait *s)
{
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
}

static void sync_granted(void *user, int rv)
{
    sync_wait *s = user;
    pthread_mutex_lock(&s->mu);
    s->rv = rv;
    s->done = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static struct timespec deadline_after(int64_t timeout_ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(timeout_ns / 1000000000);
    ts.tv_nsec += (long)(timeout_ns % 1000000000);
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

/* Sleeps until |s| is done or the deadline passes. Returns whether done. */
static bool sync_sleep(sync_wait *s, int64_t timeout_ns)
{
    struct timespec dl = deadline_after(timeout_ns < 0 ? 0 : timeout_ns);
    int e = 0;
    pthread_mutex_lock(&s->mu);
    while (!s->done && e != ETIMEDOUT)
        e = timeout_ns < 0 ? pthread_cond_wait(&s->cv, &s->mu)
                           : pthread_cond_timedwait(&s->cv, &s->mu, &dl);
    bool done = s->done;
    pthread_mutex_unlock(&s->mu);
    return done;
}

static int sync_block(fx_budget *b, fx_budget_waiter *w, sync_wait *s, int64_t timeout_ns)
{
    if (sync_sleep(s, timeout_ns))
        return s->rv;
    if (fx_budget_cancel(b, w)) {
        count(&b->timeouts);
        return FX_ETIMEDOUT;
    }
    /* Lost the race with a grant that is being delivered: wait for it. */
    sync_sleep(s, -1);
    return s->rv;
}

int fx_budget_acquire_wait(fx_budget *b, size_t n, int64_t timeout_ns, fx_permit *p)
{
    if (timeout_ns == 0) {
        int rv = fx_budget_try_acquire(b, n, p);
        return rv == FX_EFULL ? FX_ETIMEDOUT : rv;
    }
    sync_wait s;
    int rv = sync_init(&s);
    if (rv != 0)
        return rv;
    fx_budget_waiter w = {.on_granted = sync_granted, .user = &s};
    rv = fx_budget_acquire(b, n, &w, p);
    if (rv == -EAGAIN)
        rv = sync_block(b, &w, &s, timeout_ns);
    sync_destroy(&s);
    return rv;
}

/* ---- close and introspection -------------------------------------------- */

static bool passes_through(const fx_budget *origin, const fx_budget *b)
{
    for (const fx_budget *c = origin; c != NULL; c = c->parent) {
        if (c == b)
            return true;
    }
    return false;
}

/* Fails the waiters parked on |c| whose acquire went through |closed|. */
static void fail_from(fx_budget *c, const fx_budget *closed, done_list *d)
{
    fx_budget_waiter *next;
    for (fx_budget_waiter *w = c->head; w != NULL; w = next) {
        next = w->next;
        if (!passes_through(w->origin, closed))
            continue;
        unlink_waiter(c, w);
        done_push(d, w, FX_ECLOSED, c);
    }
}

void fx_budget_close(fx_budget *b)
{
    done_list d = {0};
    lock_chain(b);
    atomic_store(&b->closed, true);
    while (b->head != NULL) {
        fx_budget_waiter *w = b->head;
        unlink_waiter(b, w);
        done_push(&d, w, FX_ECLOSED, b);
    }
    for (fx_budget *c = b->parent; c != NULL; c = c->parent)
        fail_from(c, b, &d);
    unlock_chain(b);
    notify(&d);
}

size_t fx_budget_in_use(const fx_budget *b)
{
    return atomic_load_explicit(&b->in_use, RELAXED);
}

size_t fx_budget_capacity(const fx_budget *b)
{
    return b->capacity;
}

void fx_budget_get_stats(const fx_budget *b, fx_budget_stats *st)
{
    st->acquired = atomic_load_explicit(&b->acquired, RELAXED);
    st->refused = atomic_load_explicit(&b->refused, RELAXED);
    st->waited = atomic_load_explicit(&b->waited, RELAXED);
    st->timeouts = atomic_load_explicit(&b->timeouts, RELAXED);
    st->in_use = atomic_load_explicit(&b->in_use, RELAXED);
    st->capacity = b->capacity;
    st->waiters = atomic_load_explicit(&b->nwaiters, RELAXED);
}
