/* A single-threaded stand-in for base/loop.c, linked into fuzz targets and
 * unit tests (tests/unit/conn_fixture.h) that drive the broker's data plane
 * without threads: tasks wait in a FIFO per loop until the harness runs
 * them (fx_fake_loop_run_one), timers fire only when the harness advances
 * the shared fake clock, and no fd is ever touched. Same contracts as
 * loop.h (a pending task is not queued twice, it is cleared before its
 * callback, one-shot timers). It defines every function of loop.h, so in a
 * static link base/loop.c is never pulled in. */
#include "fake_loop.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuzz_common.h"

struct fx_loop {
    char name[16];
    fx_loop *lnext;       /* on |all_loops| */
    fx_task *head, *tail; /* FIFO through fx_task.next */
    fx_timer **timers;    /* armed timers; heap_index is the position here */
    size_t ntimers, cap;
};

static uint64_t fake_now = 1000 * FX_NS_PER_S;
static fx_loop *cur;
static fx_loop *all_loops; /* every live loop, newest first */
static fx_timer_cb fail_arm_cb;
static unsigned fail_arm_n;

uint64_t fx_now_ns(void)
{
    return fake_now;
}

void fx_fake_clock_advance(uint64_t ns)
{
    fake_now += ns;
}

/* The real condition variables and absolute times: a timed wait measures
 * real time, not the fake clock (nothing on the data plane waits). */
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
    (void)ns;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts; /* already due: the fake clock has no real-time meaning */
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
    if (atomic_exchange(&t->pending, true))
        return false;
    atomic_store(&t->next, NULL);
    if (l->tail != NULL)
        atomic_store(&l->tail->next, t);
    else
        l->head = t;
    l->tail = t;
    return true;
}

typedef struct call_task {
    fx_task t;
    void (*cb)(void *user);
    void *user;
} call_task;

static void call_run(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)user;
    call_task *c = (call_task *)t;
    c->cb(c->user);
    free(c);
}

int fx_loop_call(fx_loop *l, void (*cb)(void *user), void *user)
{
    call_task *c = malloc(sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    fx_task_init(&c->t, call_run, NULL);
    c->cb = cb;
    c->user = user;
    fx_loop_post(l, &c->t);
    return 0;
}

bool fx_fake_loop_run_one(fx_loop *l)
{
    fx_task *t = l->head;
    if (t == NULL)
        return false;
    l->head = atomic_load(&t->next);
    if (l->head == NULL)
        l->tail = NULL;
    atomic_store(&t->next, NULL);
    atomic_exchange(&t->pending, false);
    fx_loop *prev = cur;
    cur = l;
    t->cb(l, t, t->user); /* may free |t| */
    cur = prev;
    return true;
}

/* An ask runs on the calling thread: each asked loop first runs what was
 * queued on it (as the real loop would before the part), then the part, on
 * |q->data| itself. No loop is ever busy here, so no ask times out. */
void (*fx_fake_loop_ask_hook)(void);

int fx_loop_ask_all(fx_loop *const *loops, size_t n, const fx_loop_ask_req *q, size_t *pmissing)
{
    if (fx_fake_loop_ask_hook != NULL)
        fx_fake_loop_ask_hook();
    for (size_t i = 0; i < n; i++) {
        while (fx_fake_loop_run_one(loops[i]))
            ;
        fx_loop *prev = cur;
        cur = loops[i];
        if (q->fn != NULL)
            q->fn(i, q->data);
        cur = prev;
    }
    if (pmissing != NULL)
        *pmissing = SIZE_MAX;
    return 0;
}

int fx_loop_ask(fx_loop *l, const fx_loop_ask_req *q)
{
    return fx_loop_ask_all(&l, 1, q, NULL);
}

void fx_loop_barrier(fx_loop *l)
{
    (void)fx_loop_ask(l, &(fx_loop_ask_req){.timeout_ns = FX_LOOP_FOREVER});
}

bool fx_fake_loop_has_tasks(const fx_loop *l)
{
    return l->head != NULL;
}

fx_loop *fx_fake_loop_at(size_t i)
{
    fx_loop *l = all_loops;
    while (l != NULL && i-- > 0)
        l = l->lnext;
    return l;
}

/* ---- timers ------------------------------------------------------------------------------ */

void fx_timer_init(fx_timer *t, fx_timer_cb cb, void *user)
{
    t->deadline_ns = 0;
    t->heap_index = SIZE_MAX;
    t->cb = cb;
    t->user = user;
}

void fx_loop_test_fail_timer_arms(fx_timer_cb cb, unsigned n)
{
    fail_arm_cb = n != 0 ? cb : NULL;
    fail_arm_n = cb != NULL ? n : 0;
}

int fx_loop_timer_arm(fx_loop *l, fx_timer *t, uint64_t deadline_ns)
{
    if (t->heap_index == SIZE_MAX && t->cb != NULL && t->cb == fail_arm_cb && fail_arm_n > 0) {
        fail_arm_n--;
        return -ENOMEM;
    }
    t->deadline_ns = deadline_ns;
    if (t->heap_index != SIZE_MAX) {
        FX_FUZZ_CHECK(t->heap_index < l->ntimers && l->timers[t->heap_index] == t);
        return 0;
    }
    if (l->ntimers == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        fx_timer **p = realloc(l->timers, cap * sizeof(*p));
        if (p == NULL)
            return -ENOMEM;
        l->timers = p;
        l->cap = cap;
    }
    t->heap_index = l->ntimers;
    l->timers[l->ntimers++] = t;
    return 0;
}

void fx_loop_timer_cancel(fx_loop *l, fx_timer *t)
{
    size_t i = t->heap_index;
    if (i == SIZE_MAX)
        return;
    /* A timer armed on another loop, or a stale index, is a caller bug. */
    FX_FUZZ_CHECK(i < l->ntimers && l->timers[i] == t);
    l->timers[i] = l->timers[--l->ntimers];
    l->timers[i]->heap_index = i;
    t->heap_index = SIZE_MAX;
}

bool fx_timer_is_armed(const fx_timer *t)
{
    return t->heap_index != SIZE_MAX;
}

bool fx_fake_loop_fire_one(fx_loop *l)
{
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < l->ntimers; i++)
        if (l->timers[i]->deadline_ns <= fake_now &&
            (best == SIZE_MAX || l->timers[i]->deadline_ns < l->timers[best]->deadline_ns))
            best = i;
    if (best == SIZE_MAX)
        return false;
    fx_timer *t = l->timers[best];
    fx_loop_timer_cancel(l, t);
    fx_loop *prev = cur;
    cur = l;
    t->cb(l, t, t->user);
    cur = prev;
    return true;
}

bool fx_fake_loop_next_deadline(const fx_loop *l, uint64_t *pdeadline)
{
    bool any = false;
    for (size_t i = 0; i < l->ntimers; i++)
        if (!any || l->timers[i]->deadline_ns < *pdeadline) {
            *pdeadline = l->timers[i]->deadline_ns;
            any = true;
        }
    return any;
}

/* ---- lifecycle and queries ----------------------------------------------------------------- */

int fx_loop_new(fx_loop **pl, const fx_loop_opts *o)
{
    fx_loop *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    snprintf(l->name, sizeof(l->name), "%s", o != NULL && o->name != NULL ? o->name : "fake");
    l->lnext = all_loops;
    all_loops = l;
    *pl = l;
    return 0;
}

int fx_loop_start(fx_loop *l)
{
    (void)l;
    return 0;
}

int fx_loop_run(fx_loop *l)
{
    (void)l;
    return -ENOTSUP;
}

void fx_loop_stop(fx_loop *l)
{
    (void)l;
}

void fx_loop_free(fx_loop *l)
{
    if (l == NULL)
        return;
    /* As base/loop.c asserts: nothing may be left armed or queued on a
     * loop that is freed (the harness drains first). */
    FX_FUZZ_CHECK(l->ntimers == 0);
    FX_FUZZ_CHECK(l->head == NULL);
    for (fx_loop **pp = &all_loops; *pp != NULL; pp = &(*pp)->lnext)
        if (*pp == l) {
            *pp = l->lnext;
            break;
        }
    free(l->timers);
    free(l);
}

uint64_t fx_loop_now(const fx_loop *l)
{
    (void)l;
    return fake_now;
}

bool fx_loop_is_current(const fx_loop *l)
{
    return cur == l;
}

fx_loop *fx_loop_current(void)
{
    return cur;
}

int fx_loop_pin_error(const fx_loop *l)
{
    (void)l;
    return 0;
}

const char *fx_loop_name(const fx_loop *l)
{
    return l->name;
}

bool fx_loop_is_stopping(const fx_loop *l)
{
    (void)l;
    return false;
}

int fx_loop_run_error(const fx_loop *l)
{
    (void)l;
    return 0;
}

void fx_loop_get_stats(const fx_loop *l, fx_loop_stats *st)
{
    (void)l;
    *st = (fx_loop_stats){0};
}

int fx_loop_watch(fx_loop *l, fx_watch *w, int fd, uint32_t events, fx_watch_cb cb, void *user)
{
    (void)l, (void)w, (void)fd, (void)events, (void)cb, (void)user;
    return -ENOTSUP;
}

int fx_loop_watch_mod(fx_loop *l, fx_watch *w, uint32_t events)
{
    (void)l, (void)w, (void)events;
    return -ENOTSUP;
}

int fx_loop_unwatch(fx_loop *l, fx_watch *w)
{
    (void)l, (void)w;
    return -ENOTSUP;
}
