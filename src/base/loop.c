/* fx_loop: the event loop every non-main thread runs. One epoll set
 * (level-triggered) holds the caller's fd watches and an eventfd doorbell;
 * timers live in a binary min-heap with nanosecond deadlines waited on with
 * epoll_pwait2; other threads reach the loop through an intrusive lock-free
 * MPSC inbox of fx_task. Only fx_loop_post/call/ask/stop and the stats
 * getters are meant for other threads; everything else runs on the loop's
 * thread. fx_loop_ask is the one place a thread waits for loops' answers. */
#include "base/loop.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "base/grow.h"
#include "base/log.h"
#include "felix/error.h"

/* Tasks run per turn before I/O and timers get their go again. */
#define INBOX_BATCH 256
/* Inbox-and-timer passes per turn at most: the timers of a pass may post
 * tasks, and those tasks arm timers due at once, which the next pass runs
 * without waiting. */
#define TURN_PASSES 4
/* Events taken per epoll wait; the rest stay ready (level-triggered). */
#define MAX_EVENTS 64

struct fx_loop {
    int epfd;
    int evfd;
    char name[16];
    int cpu;
    atomic_int pin_error;
    atomic_int run_error;

    /* Inbox (Vyukov's intrusive MPSC): producers swing |head| with an atomic
     * exchange and then link the previous node; the loop pops from |tail|.
     * |sentinel| keeps the list non-empty so push never touches |tail|. */
    _Atomic(fx_task *) head;
    fx_task *tail;
    fx_task sentinel;
    /* False only while the loop is in (or about to enter) a wait that may
     * block: the first poster to find it false rings, and no other does. It
     * is true while the loop is awake, so posts made then cost no doorbell;
     * see ring_if_needed() and run_turn(). */
    atomic_bool bell;

    atomic_bool stop;
    atomic_bool running;
    atomic_bool joinable;
    pthread_t thread;
    sem_t started;

    uint64_t now;
    fx_timer **heap;
    size_t nheap;
    size_t heap_cap;
    bool firing_timers;
    size_t nwatches;

    /* The events of the turn being dispatched, so fx_loop_unwatch() can drop
     * the not-yet-delivered events of a watch removed mid-turn. */
    struct epoll_event events[MAX_EVENTS];
    int ev_next;
    int ev_count;

    _Atomic uint64_t turns;
    _Atomic uint64_t wakeups;
    _Atomic uint64_t posts;
    _Atomic uint64_t tasks_run;
    _Atomic uint64_t timers_fired;
};

static _Thread_local fx_loop *tl_current;

/* For counters any thread may bump (posts, wakeups). */
static void stat_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* For counters only the loop bumps: no locked read-modify-write needed. */
static void stat_bump(_Atomic uint64_t *c)
{
    uint64_t v = atomic_load_explicit(c, memory_order_relaxed);
    atomic_store_explicit(c, v + 1, memory_order_relaxed);
}

uint64_t fx_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * FX_NS_PER_S + (uint64_t)ts.tv_nsec;
}

int fx_cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    int rv = pthread_condattr_init(&ca);
    if (rv != 0)
        return rv;
    rv = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rv == 0)
        rv = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rv;
}

struct timespec fx_timespec_at(uint64_t ns)
{
    return (struct timespec){.tv_sec = (time_t)(ns / FX_NS_PER_S),
                             .tv_nsec = (long)(ns % FX_NS_PER_S)};
}

/* ---- inbox ------------------------------------------------------------- */

static void inbox_push(fx_loop *l, fx_task *t)
{
    atomic_store_explicit(&t->next, NULL, memory_order_relaxed);
    fx_task *prev = atomic_exchange_explicit(&l->head, t, memory_order_acq_rel);
    /* Between the exchange and this store the list is briefly cut at |prev|;
     * the consumer sees that as "empty for now" and this poster's doorbell
     * check (which comes after this store) covers the gap. */
    atomic_store_explicit(&prev->next, t, memory_order_release);
}

/* Pops the oldest task, or NULL when the inbox is empty or a producer is
 * between its two steps (it will ring or has rung the doorbell). */
static fx_task *inbox_pop(fx_loop *l)
{
    fx_task *tail = l->tail;
    fx_task *next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (tail == &l->sentinel) {
        if (next == NULL)
            return NULL;
        l->tail = next;
        tail = next;
        next = atomic_load_explicit(&tail->next, memory_order_acquire);
    }
    if (next != NULL) {
        l->tail = next;
        return tail;
    }
    if (tail != atomic_load_explicit(&l->head, memory_order_acquire))
        return NULL;
    /* |tail| is the last node: queue the sentinel behind it so it can leave. */
    inbox_push(l, &l->sentinel);
    next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (next == NULL)
        return NULL;
    l->tail = next;
    return tail;
}

static bool inbox_is_empty(fx_loop *l)
{
    return l->tail == &l->sentinel &&
           atomic_load_explicit(&l->sentinel.next, memory_order_acquire) == NULL &&
           atomic_load_explicit(&l->head, memory_order_acquire) == &l->sentinel;
}

static void run_task(fx_loop *l, fx_task *t)
{
    /* Cleared before the callback so it may re-post |t|. An exchange rather
     * than a store: a poster that found |t| still pending did its writes
     * before its own exchange, and reading that value here makes them visible
     * to the callback that stands in for its post. */
    atomic_exchange_explicit(&t->pending, false, memory_order_acq_rel);
    stat_bump(&l->tasks_run);
    t->cb(l, t, t->user); /* may free |t|: not touched after this */
}

static void ring(fx_loop *l)
{
    uint64_t one = 1;
    ssize_t n;
    do {
        n = write(l->evfd, &one, sizeof(one));
    } while (n < 0 && errno == EINTR);
    /* EAGAIN means the counter is saturated, so the loop is woken anyway;
     * anything else would be a closed or foreign fd, i.e. our bug. */
    assert(n == (ssize_t)sizeof(one) || errno == EAGAIN);
    stat_add(&l->wakeups, 1);
}

/* Coalesced wakeup, skipped while the loop is awake. The poster enqueues
 * first and then exchanges |bell| to true. The loop sets |bell| when it
 * wakes and, before a wait that may block, exchanges it to false and only
 * then checks the inbox (waiting without a timeout when it is not empty).
 * If the poster's exchange comes after the loop's clear in |bell|'s
 * modification order, it reads false (or true from a later poster that read
 * false) and a ring is made after the clear, so the wait returns. If it
 * comes before, the loop's clearing exchange reads a value written by the
 * poster (or by a later poster in the same release sequence), so with
 * acq_rel the enqueue happens-before the inbox check, which sees the task.
 * Either way no task sits in the inbox while the loop sleeps, and a loop that
 * is busy (running tasks, timers or socket events) is never rung. */
static void ring_if_needed(fx_loop *l)
{
    if (!atomic_exchange_explicit(&l->bell, true, memory_order_acq_rel))
        ring(l);
}

void fx_task_init(fx_task *t, fx_task_cb cb, void *user)
{
    atomic_init(&t->next, NULL);
    atomic_init(&t->pending, false);
    t->cb = cb;
    t->user = user;
}

bool fx_loop_post(fx_loop *l, fx_task *t)
{
    if (atomic_exchange_explicit(&t->pending, true, memory_order_acq_rel))
        return false;
    inbox_push(l, t);
    stat_add(&l->posts, 1);
    /* The loop's own thread needs no doorbell: it checks the inbox before
     * every wait, after whatever callback posted. */
    if (!fx_loop_is_current(l))
        ring_if_needed(l);
    return true;
}

/* Drains at most |limit| tasks; returns how many ran. */
static size_t inbox_drain(fx_loop *l, size_t limit)
{
    size_t n = 0;
    while (n < limit) {
        fx_task *t = inbox_pop(l);
        if (t == NULL)
            break;
        run_task(l, t);
        n++;
    }
    return n;
}

/* At exit every posted task runs, including ones its predecessors post and
 * ones whose producer is still between its two push steps. A task that
 * re-posts itself unconditionally would keep us here forever; such tasks
 * check fx_loop_is_stopping(). */
static void inbox_drain_all(fx_loop *l)
{
    atomic_exchange_explicit(&l->bell, false, memory_order_acq_rel);
    for (;;) {
        l->now = fx_now_ns();
        if (inbox_drain(l, INBOX_BATCH) > 0)
            continue;
        if (inbox_is_empty(l))
            return;
        sched_yield(); /* a producer is mid-push; its link is imminent */
    }
}

typedef struct call_task {
    fx_task task;
    void (*cb)(void *user);
    void *user;
} call_task;

static void call_run(fx_loop *l, fx_task *t, void *user)
{
    call_task *c = user;
    c->cb(c->user);
    free(c);
}

int fx_loop_call(fx_loop *l, void (*cb)(void *user), void *user)
{
    call_task *c = malloc(sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    fx_task_init(&c->task, call_run, c);
    c->cb = cb;
    c->user = user;
    fx_loop_post(l, &c->task);
    return 0;
}

/* ---- asking loops and waiting ------------------------------------------ */

typedef struct ask ask;

/* One loop's part of an ask: the task posted to it. */
typedef struct ask_part {
    fx_task task;
    ask *a;
    size_t i;
    bool done; /* under a->mu */
} ask_part;

/* An ask, shared by the caller and the tasks it posted. On the heap each
 * holds a reference and the last to let go frees it, so an answer that comes
 * after the caller gave up lands in live memory and goes nowhere. On the
 * caller's stack (fx_loop_ask without a deadline) nobody gives up, and a task
 * does not touch the ask after its signal. */
struct ask {
    atomic_size_t refs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t pending; /* parts not answered yet; under mu */
    bool abandoned; /* the caller gave up; under mu */
    bool on_heap;
    fx_loop_ask_fn fn;
    fx_loop_late_fn on_late;
    void *data; /* the copy (after the parts), or the caller's block */
    ask_part *parts;
};

static fx_ratelimit ask_rl = FX_RATELIMIT_INIT;

static void ask_unref(ask *a)
{
    if (atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (a->abandoned && a->on_late != NULL)
        a->on_late(a->data);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static void ask_run(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    ask_part *p = user;
    ask *a = p->a;
    bool on_heap = a->on_heap; /* a stack ask may be gone once signalled */
    if (a->fn != NULL)
        a->fn(p->i, a->data);
    pthread_mutex_lock(&a->mu);
    p->done = true;
    a->pending--;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    if (on_heap)
        ask_unref(a);
}

static void ask_init(ask *a, ask_part *parts, size_t n, const fx_loop_ask_req *q)
{
    pthread_mutex_init(&a->mu, NULL);
    atomic_init(&a->refs, 1);
    a->pending = n;
    a->fn = q->fn;
    a->on_late = q->on_late;
    a->parts = parts;
    for (size_t i = 0; i < n; i++) {
        parts[i] = (ask_part){.a = a, .i = i};
        fx_task_init(&parts[i].task, ask_run, &parts[i]);
    }
}

/* One allocation: the ask, its parts, then the copy of the caller's block. */
static int ask_new(ask **pa, size_t n, const fx_loop_ask_req *q)
{
    size_t al = _Alignof(max_align_t);
    if (n > (SIZE_MAX - sizeof(ask) - q->size - al) / sizeof(ask_part))
        return -ENOMEM;
    size_t off = (sizeof(ask) + n * sizeof(ask_part) + al - 1) / al * al;
    ask *a = calloc(1, off + q->size);
    if (a == NULL)
        return -ENOMEM;
    if (fx_cond_init_monotonic(&a->cv) != 0) {
        free(a);
        return -ENOMEM;
    }
    ask_init(a, (ask_part *)(a + 1), n, q);
    a->on_heap = true;
    a->data = q->data;
    if (q->size > 0) {
        a->data = (char *)a + off;
        memcpy(a->data, q->data, q->size);
    }
    *pa = a;
    return 0;
}

/* Posts every part, then runs inline those whose loop is the caller's. Not
 * specialised by the compiler (noipa): GCC 12 at -O3 clones it for one loop
 * and then warns, wrongly, that fx_loop_post writes past that loop
 * (-Wstringop-overflow); an ask is not on a hot path. */
__attribute__((noipa)) static void ask_post(ask *a, fx_loop *const *loops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
        if (!fx_loop_is_current(loops[i]))
            (void)fx_loop_post(loops[i], &a->parts[i].task); /* a fresh task: never pending */
    }
    for (size_t i = 0; i < n; i++)
        if (fx_loop_is_current(loops[i]))
            ask_run(loops[i], &a->parts[i].task, &a->parts[i]);
}

/* Waits for every answer until |deadline_ns| (0: none); re-checks after every
 * wakeup, spurious ones included. On expiry marks |a| abandoned and returns
 * FX_ETIMEDOUT with the first part not answered in |*pmissing|. */
static int ask_wait(ask *a, size_t n, uint64_t deadline_ns, size_t *pmissing)
{
    struct timespec until = fx_timespec_at(deadline_ns);
    int rv = 0;
    pthread_mutex_lock(&a->mu);
    while (a->pending > 0 && rv == 0)
        if (deadline_ns == 0)
            pthread_cond_wait(&a->cv, &a->mu);
        else if (pthread_cond_timedwait(&a->cv, &a->mu, &until) == ETIMEDOUT && a->pending > 0)
            rv = FX_ETIMEDOUT;
    if (rv != 0) {
        a->abandoned = true;
        size_t i = 0;
        while (i < n && a->parts[i].done)
            i++;
        *pmissing = i;
    }
    pthread_mutex_unlock(&a->mu);
    return rv;
}

int fx_loop_ask_all(fx_loop *const *loops, size_t n, const fx_loop_ask_req *q, size_t *pmissing)
{
    if (n == 0)
        return 0;
    uint64_t deadline = 0;
    if (q->timeout_ns >= 0)
        deadline = fx_now_ns() + (uint64_t)q->timeout_ns + 1; /* never 0 */
    ask *a;
    int rv = ask_new(&a, n, q);
    if (rv != 0)
        return rv;
    ask_post(a, loops, n);
    size_t missing = SIZE_MAX;
    rv = ask_wait(a, n, deadline, &missing);
    if (rv == 0 && q->size > 0)
        memcpy(q->data, a->data, q->size); /* every answer is in: nobody else reads it */
    ask_unref(a);
    if (pmissing != NULL)
        *pmissing = missing;
    if (rv != 0)
        FX_LOG_RATELIMITED(&ask_rl, fx_now_ns(), FX_LOG_WARN, "loop",
                           "loop %s (%zu of %zu asked) did not answer within %lld ms",
                           fx_loop_name(loops[missing]), missing + 1, n,
                           (long long)(q->timeout_ns / (int64_t)FX_NS_PER_MS));
    return rv;
}

int fx_loop_ask(fx_loop *l, const fx_loop_ask_req *q)
{
    if (q->timeout_ns >= 0 || q->size > 0)
        return fx_loop_ask_all(&l, 1, q, NULL);
    /* Nobody gives up: the ask lives here, and a plain condition will do. */
    ask a = {0};
    ask_part p;
    ask_init(&a, &p, 1, q);
    pthread_cond_init(&a.cv, NULL);
    a.data = q->data;
    ask_post(&a, &l, 1);
    (void)ask_wait(&a, 1, 0, &(size_t){0});
    pthread_cond_destroy(&a.cv);
    pthread_mutex_destroy(&a.mu);
    return 0;
}

void fx_loop_barrier(fx_loop *l)
{
    (void)fx_loop_ask(l, &(fx_loop_ask_req){.timeout_ns = FX_LOOP_FOREVER});
}

/* ---- fd watches -------------------------------------------------------- */

/* Debug check for "loop thread only" calls; unused when NDEBUG removes the
 * asserts. */
__attribute__((unused)) static bool owner_ok(const fx_loop *l)
{
    return fx_loop_is_current(l) || !atomic_load_explicit(&l->running, memory_order_relaxed);
}

int fx_loop_watch(fx_loop *l, fx_watch *w, int fd, uint32_t events, fx_watch_cb cb, void *user)
{
    assert(owner_ok(l));
    w->fd = fd;
    w->events = events;
    w->cb = cb;
    w->user = user;
    struct epoll_event ev = {.events = events, .data.ptr = w};
    if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        return -errno;
    l->nwatches++;
    return 0;
}

int fx_loop_watch_mod(fx_loop *l, fx_watch *w, uint32_t events)
{
    assert(owner_ok(l));
    struct epoll_event ev = {.events = events, .data.ptr = w};
    if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, w->fd, &ev) < 0)
        return -errno;
    w->events = events;
    return 0;
}

int fx_loop_unwatch(fx_loop *l, fx_watch *w)
{
    assert(owner_ok(l));
    if (epoll_ctl(l->epfd, EPOLL_CTL_DEL, w->fd, NULL) < 0)
        return -errno;
    l->nwatches--;
    /* The watch may be freed as soon as we return, so its pending events of
     * this turn are forgotten here rather than marked on |w|. */
    for (int i = l->ev_next; i < l->ev_count; i++) {
        if (l->events[i].data.ptr == w)
            l->events[i].data.ptr = NULL;
    }
    return 0;
}

/* ---- timers ------------------------------------------------------------ */

void fx_timer_init(fx_timer *t, fx_timer_cb cb, void *user)
{
    t->deadline_ns = 0;
    t->heap_index = SIZE_MAX;
    t->cb = cb;
    t->user = user;
}

bool fx_timer_is_armed(const fx_timer *t)
{
    return t->heap_index != SIZE_MAX;
}

static void heap_set(fx_loop *l, size_t i, fx_timer *t)
{
    l->heap[i] = t;
    t->heap_index = i;
}

static void heap_up(fx_loop *l, size_t i)
{
    fx_timer *t = l->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (l->heap[parent]->deadline_ns <= t->deadline_ns)
            break;
        heap_set(l, i, l->heap[parent]);
        i = parent;
    }
    heap_set(l, i, t);
}

static void heap_down(fx_loop *l, size_t i)
{
    fx_timer *t = l->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= l->nheap)
            break;
        if (c + 1 < l->nheap && l->heap[c + 1]->deadline_ns < l->heap[c]->deadline_ns)
            c++;
        if (t->deadline_ns <= l->heap[c]->deadline_ns)
            break;
        heap_set(l, i, l->heap[c]);
        i = c;
    }
    heap_set(l, i, t);
}

static int heap_reserve(fx_loop *l)
{
    fx_timer **h = fx_grow(l->heap, &l->heap_cap, l->nheap + 1, sizeof(*h), 16);
    if (h == NULL)
        return -ENOMEM;
    l->heap = h;
    return 0;
}

/* The fault hook of fx_loop_test_fail_timer_arms: one relaxed load per arm
 * of a timer not yet armed when no test set it. */
static _Atomic(fx_timer_cb) fail_arm_cb;
static atomic_uint fail_arm_n;

void fx_loop_test_fail_timer_arms(fx_timer_cb cb, unsigned n)
{
    atomic_store_explicit(&fail_arm_n, cb != NULL ? n : 0, memory_order_relaxed);
    atomic_store_explicit(&fail_arm_cb, n != 0 ? cb : NULL, memory_order_release);
}

static bool arm_fault(const fx_timer *t)
{
    if (atomic_load_explicit(&fail_arm_cb, memory_order_acquire) != t->cb || t->cb == NULL)
        return false;
    unsigned n = atomic_load_explicit(&fail_arm_n, memory_order_relaxed);
    while (n > 0 && !atomic_compare_exchange_weak_explicit(
                        &fail_arm_n, &n, n - 1, memory_order_relaxed, memory_order_relaxed))
        ;
    return n > 0;
}

int fx_loop_timer_arm(fx_loop *l, fx_timer *t, uint64_t deadline_ns)
{
    assert(owner_ok(l));
    /* A timer armed for "now" from a timer callback must wait for the next
     * turn, or a callback re-arming itself for the past would spin forever in
     * this turn's firing pass (which fires deadlines <= now). */
    if (l->firing_timers && deadline_ns <= l->now)
        deadline_ns = l->now + 1;
    if (fx_timer_is_armed(t)) {
        uint64_t old = t->deadline_ns;
        t->deadline_ns = deadline_ns;
        if (deadline_ns < old)
            heap_up(l, t->heap_index);
        else
            heap_down(l, t->heap_index);
        return 0;
    }
    if (arm_fault(t) || heap_reserve(l) < 0)
        return -ENOMEM;
    t->deadline_ns = deadline_ns;
    l->heap[l->nheap] = t;
    t->heap_index = l->nheap++;
    heap_up(l, t->heap_index);
    return 0;
}

void fx_loop_timer_cancel(fx_loop *l, fx_timer *t)
{
    assert(owner_ok(l));
    if (!fx_timer_is_armed(t))
        return;
    size_t i = t->heap_index;
    assert(i < l->nheap && l->heap[i] == t);
    t->heap_index = SIZE_MAX;
    fx_timer *last = l->heap[--l->nheap];
    if (last == t)
        return;
    heap_set(l, i, last);
    if (i > 0 && l->heap[(i - 1) / 2]->deadline_ns > last->deadline_ns)
        heap_up(l, i);
    else
        heap_down(l, i);
}

static void fire_timers(fx_loop *l)
{
    l->firing_timers = true;
    while (l->nheap > 0 && l->heap[0]->deadline_ns <= l->now) {
        fx_timer *t = l->heap[0];
        fx_loop_timer_cancel(l, t);
        stat_bump(&l->timers_fired);
        t->cb(l, t, t->user); /* may re-arm, cancel others or free |t| */
    }
    l->firing_timers = false;
}

/* ---- the turn ---------------------------------------------------------- */

/* Builds the epoll_pwait2 timeout: zero when work is already waiting, until
 * the earliest deadline when a timer is armed, else NULL (sleep until an fd
 * or the doorbell wakes us). */
static const struct timespec *wait_timeout(fx_loop *l, struct timespec *ts)
{
    *ts = (struct timespec){0};
    if (!inbox_is_empty(l) || atomic_load_explicit(&l->stop, memory_order_acquire))
        return ts;
    if (l->nheap == 0)
        return NULL;
    uint64_t now = fx_now_ns();
    uint64_t d = l->heap[0]->deadline_ns;
    if (d > now) {
        ts->tv_sec = (time_t)((d - now) / FX_NS_PER_S);
        ts->tv_nsec = (long)((d - now) % FX_NS_PER_S);
    }
    return ts;
}

/* epoll_pwait2 needs Linux 5.11; on older kernels fall back to epoll_wait
 * with the timeout rounded up to whole milliseconds (late, never early). */
static atomic_bool no_pwait2;

static int wait_events(fx_loop *l, const struct timespec *tmo)
{
    if (!atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
        int n = epoll_pwait2(l->epfd, l->events, MAX_EVENTS, tmo, NULL);
        if (n >= 0 || errno != ENOSYS)
            return n;
        atomic_store_explicit(&no_pwait2, true, memory_order_relaxed);
    }
    int ms = -1;
    if (tmo != NULL) {
        uint64_t ns = (uint64_t)tmo->tv_sec * FX_NS_PER_S + (uint64_t)tmo->tv_nsec;
        uint64_t up = (ns + FX_NS_PER_MS - 1) / FX_NS_PER_MS;
        ms = up > INT_MAX ? INT_MAX : (int)up;
    }
    return epoll_wait(l->epfd, l->events, MAX_EVENTS, ms);
}

static void consume_doorbell(fx_loop *l)
{
    uint64_t v;
    ssize_t n;
    do {
        n = read(l->evfd, &v, sizeof(v));
    } while (n < 0 && errno == EINTR);
    /* EAGAIN: another turn already took it; nothing else can fail on our
     * own non-blocking eventfd. */
    assert(n == (ssize_t)sizeof(v) || errno == EAGAIN);
}

static void dispatch_events(fx_loop *l, int n)
{
    l->ev_count = n;
    for (l->ev_next = 0; l->ev_next < n;) {
        struct epoll_event ev = l->events[l->ev_next++];
        if (ev.data.ptr == NULL)
            continue; /* unwatched earlier in this turn */
        if (ev.data.ptr == (void *)l) {
            consume_doorbell(l);
            continue;
        }
        fx_watch *w = ev.data.ptr;
        w->cb(l, w, ev.events);
    }
    l->ev_count = 0;
    l->ev_next = 0;
}

static bool timer_due(const fx_loop *l)
{
    return l->nheap > 0 && l->heap[0]->deadline_ns <= l->now;
}

static int run_turn(fx_loop *l)
{
    struct timespec ts;
    const struct timespec *tmo = wait_timeout(l, &ts);
    if (tmo == NULL || tmo->tv_sec != 0 || tmo->tv_nsec != 0) {
        /* This wait may block: posters must ring from now on. Cleared before
         * the inbox is checked again; see ring_if_needed(). */
        atomic_exchange_explicit(&l->bell, false, memory_order_acq_rel);
        if (!inbox_is_empty(l)) {
            ts = (struct timespec){0};
            tmo = &ts;
        }
    }
    int n = wait_events(l, tmo);
    /* Awake: posts made while this turn runs find the inbox checked again
     * before the next wait, so they need no doorbell. */
    atomic_store_explicit(&l->bell, true, memory_order_relaxed);
    if (n < 0 && errno != EINTR)
        return -errno;
    stat_bump(&l->turns);
    l->now = fx_now_ns();
    if (n > 0)
        dispatch_events(l, n);
    /* Tasks first, then timers: a task often arms a timer for "now" (a
     * connection's write after the data it queued), and that deadline sorts
     * before the timers already due (an ACK's delay, a retransmission), so
     * the data goes out first. Timers and tasks the other posts or arms run
     * in this turn too, instead of after a zero-timeout wait, which also
     * answers this turn's input before the next input is read. Bounded (in
     * passes and in tasks, INBOX_BATCH a turn as before), so timers and
     * tasks that keep re-arming each other cannot keep the sockets waiting;
     * anything left runs after the next (non-blocking) wait. */
    size_t budget = INBOX_BATCH;
    for (int pass = 0;; pass++) {
        budget -= inbox_drain(l, budget);
        fire_timers(l);
        if (pass + 1 >= TURN_PASSES || (!timer_due(l) && (budget == 0 || inbox_is_empty(l))))
            break;
    }
    return 0;
}

int fx_loop_run(fx_loop *l)
{
    fx_loop *prev = tl_current;
    tl_current = l;
    atomic_store_explicit(&l->running, true, memory_order_relaxed);
    int rv = 0;
    while (!atomic_load_explicit(&l->stop, memory_order_acquire)) {
        rv = run_turn(l);
        if (rv < 0)
            break;
    }
    inbox_drain_all(l);
    atomic_store_explicit(&l->run_error, rv, memory_order_relaxed);
    /* The stop request is consumed, so the loop can be run again. */
    atomic_store_explicit(&l->stop, false, memory_order_relaxed);
    atomic_store_explicit(&l->running, false, memory_order_relaxed);
    tl_current = prev;
    return rv;
}

void fx_loop_stop(fx_loop *l)
{
    atomic_store_explicit(&l->stop, true, memory_order_release);
    if (fx_loop_is_current(l))
        return; /* the loop checks |stop| before its next wait */
    ring(l);
    if (atomic_exchange_explicit(&l->joinable, false, memory_order_acq_rel)) {
        pthread_join(l->thread, NULL);
        /* The thread has ended, so this request is consumed too: had the
         * loop stopped itself first, its exit cleared |stop| before this
         * call set it again. */
        atomic_store_explicit(&l->stop, false, memory_order_relaxed);
    }
}

/* ---- lifecycle --------------------------------------------------------- */

static int pin_self(int cpu)
{
    size_t ncpu = (size_t)cpu + 1;
    cpu_set_t *set = CPU_ALLOC(ncpu);
    if (set == NULL)
        return -ENOMEM;
    size_t size = CPU_ALLOC_SIZE(ncpu);
    CPU_ZERO_S(size, set);
    CPU_SET_S((size_t)cpu, size, set);
    int rv = -pthread_setaffinity_np(pthread_self(), size, set);
    CPU_FREE(set);
    return rv;
}

static void *loop_main(void *arg)
{
    fx_loop *l = arg;
    /* Naming is cosmetic (ps, perf); a failure only affects diagnostics. */
    (void)pthread_setname_np(pthread_self(), l->name);
    if (l->cpu != -1) {
        int rv = l->cpu < 0 ? -EINVAL : pin_self(l->cpu);
        atomic_store_explicit(&l->pin_error, rv, memory_order_relaxed);
    }
    atomic_store_explicit(&l->running, true, memory_order_relaxed);
    sem_post(&l->started);
    fx_loop_run(l); /* its error is kept for fx_loop_run_error() */
    return NULL;
}

int fx_loop_new(fx_loop **pl, const fx_loop_opts *o)
{
    fx_loop *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    int rv;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0) {
        rv = -errno;
        goto err_free;
    }
    l->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->evfd < 0) {
        rv = -errno;
        goto err_close_epfd;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
    if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->evfd, &ev) < 0) {
        rv = -errno;
        goto err_close_evfd;
    }
    if (sem_init(&l->started, 0, 0) < 0) {
        rv = -errno;
        goto err_close_evfd;
    }
    snprintf(l->name, sizeof(l->name), "%s", o && o->name ? o->name : "fx_loop");
    l->cpu = o ? o->cpu : -1;
    fx_task_init(&l->sentinel, NULL, NULL);
    atomic_init(&l->head, &l->sentinel);
    l->tail = &l->sentinel;
    l->now = fx_now_ns();
    *pl = l;
    return 0;

err_close_evfd:
    close(l->evfd);
err_close_epfd:
    close(l->epfd);
err_free:
    free(l);
    return rv;
}

int fx_loop_start(fx_loop *l)
{
    assert(!fx_loop_is_current(l));
    if (atomic_load_explicit(&l->joinable, memory_order_acquire) ||
        atomic_load_explicit(&l->running, memory_order_relaxed))
        return -EBUSY;
    int rv = pthread_create(&l->thread, NULL, loop_main, l);
    if (rv != 0)
        return -rv;
    atomic_store_explicit(&l->joinable, true, memory_order_release);
    /* Wait until naming and pinning are done, so fx_loop_pin_error() is
     * meaningful as soon as we return. */
    while (sem_wait(&l->started) < 0 && errno == EINTR)
        ;
    return 0;
}

void fx_loop_free(fx_loop *l)
{
    if (l == NULL)
        return;
    /* A loop stopped from its own thread leaves the thread to be joined. */
    if (atomic_exchange_explicit(&l->joinable, false, memory_order_acq_rel))
        pthread_join(l->thread, NULL);
    if (l->nheap != 0 || l->nwatches != 0) /* a bug of the loop's owner: say whose */
        fprintf(stderr, "fx_loop_free: loop %s freed with %zu timers and %zu watches\n",
                l->name[0] ? l->name : "(unnamed)", l->nheap, l->nwatches);
    assert(l->nheap == 0 && l->nwatches == 0);
    sem_destroy(&l->started);
    close(l->evfd);
    close(l->epfd);
    free(l->heap);
    free(l);
}

/* ---- accessors --------------------------------------------------------- */

uint64_t fx_loop_now(const fx_loop *l)
{
    return l->now;
}

bool fx_loop_is_current(const fx_loop *l)
{
    return l != NULL && tl_current == l;
}

fx_loop *fx_loop_current(void)
{
    return tl_current;
}

int fx_loop_pin_error(const fx_loop *l)
{
    return atomic_load_explicit(&l->pin_error, memory_order_relaxed);
}

bool fx_loop_is_stopping(const fx_loop *l)
{
    return atomic_load_explicit(&l->stop, memory_order_acquire);
}

int fx_loop_run_error(const fx_loop *l)
{
    return atomic_load_explicit(&l->run_error, memory_order_relaxed);
}

const char *fx_loop_name(const fx_loop *l)
{
    return l->name;
}

void fx_loop_get_stats(const fx_loop *l, fx_loop_stats *st)
{
    st->turns = atomic_load_explicit(&l->turns, memory_order_relaxed);
    st->wakeups = atomic_load_explicit(&l->wakeups, memory_order_relaxed);
    st->posts = atomic_load_explicit(&l->posts, memory_order_relaxed);
    st->tasks_run = atomic_load_explicit(&l->tasks_run, memory_order_relaxed);
    st->timers_fired = atomic_load_explicit(&l->timers_fired, memory_order_relaxed);
}
