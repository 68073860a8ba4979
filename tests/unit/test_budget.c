/* Unit tests for fx_budget: byte budgets with parents, FIFO waiters, the
 * blocking variant, close, and a concurrent run that TSan also checks. */
/* fx-test-libs: fx_base */
#include "base/budget.h"
#include "felix/error.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "fx_test.h"

#define MS 1000000ll

/* ---- helpers ------------------------------------------------------------ */

typedef struct grant_log {
    int n;
    int ids[8];
    int rvs[8];
} grant_log;

typedef struct tagged {
    fx_budget_waiter w;
    fx_permit p;
    grant_log *log;
    int id;
} tagged;

static void log_grant(void *user, int rv)
{
    tagged *t = user;
    t->log->ids[t->log->n] = t->id;
    t->log->rvs[t->log->n] = rv;
    t->log->n++;
}

/* Starts an async acquire that must park. */
static void park(fx_budget *b, tagged *t, grant_log *log, int id, size_t n)
{
    *t = (tagged){.log = log, .id = id};
    t->w.on_granted = log_grant;
    t->w.user = t;
    assert_int_equal(fx_budget_acquire(b, n, &t->w, &t->p), -EAGAIN);
}

static fx_permit take(fx_budget *b, size_t n)
{
    fx_permit p = {0};
    assert_int_equal(fx_budget_try_acquire(b, n, &p), 0);
    assert_ptr_equal(p.budget, b);
    assert_int_equal(p.n, n);
    return p;
}

static void init(fx_budget *b, size_t cap, fx_budget *parent)
{
    assert_int_equal(fx_budget_init(b, cap, parent), 0);
}

/* ---- try_acquire and release -------------------------------------------- */

static void test_try_acquire_fails_when_exhausted(void **state)
{
    fx_budget b;
    init(&b, 100, NULL);
    fx_permit a = take(&b, 60);
    fx_permit p = {0};
    assert_int_equal(fx_budget_try_acquire(&b, 50, &p), FX_EFULL);
    assert_null(p.budget);
    assert_int_equal(fx_budget_in_use(&b), 60);
    fx_permit c = take(&b, 40);
    assert_int_equal(fx_budget_in_use(&b), 100);
    assert_int_equal(fx_budget_try_acquire(&b, 1, &p), FX_EFULL);
    fx_budget_stats st;
    fx_budget_get_stats(&b, &st);
    assert_int_equal(st.refused, 2);
    assert_int_equal(st.acquired, 2);
    fx_permit_release(&a);
    fx_permit_release(&c);
    fx_budget_deinit(&b);
}

static void test_release_makes_bytes_available(void **state)
{
    fx_budget b;
    init(&b, 100, NULL);
    fx_permit a = take(&b, 100);
    fx_permit p = {0};
    assert_int_equal(fx_budget_try_acquire(&b, 30, &p), FX_EFULL);
    fx_permit_release(&a);
    assert_int_equal(fx_budget_in_use(&b), 0);
    fx_permit c = take(&b, 30);
    assert_int_equal(fx_budget_in_use(&b), 30);
    fx_permit_release(&c);
    fx_budget_deinit(&b);
}

static void test_permit_release_is_idempotent(void **state)
{
    fx_budget b;
    init(&b, 100, NULL);
    fx_permit a = take(&b, 40);
    fx_permit c = take(&b, 10);
    fx_permit_release(&a);
    assert_null(a.budget);
    assert_int_equal(a.n, 0);
    fx_permit_release(&a);
    assert_int_equal(fx_budget_in_use(&b), 10);
    fx_permit_release(NULL);
    fx_permit empty = {0};
    fx_permit_release(&empty);
    fx_permit_release(&c);
    assert_int_equal(fx_budget_in_use(&b), 0);
    fx_budget_deinit(&b);
}

static void test_request_larger_than_budget_fails_at_once(void **state)
{
    fx_budget parent, child;
    init(&parent, 50, NULL);
    init(&child, 100, &parent);
    fx_permit p = {0};
    fx_budget_waiter w = {0};
    /* Larger than the child itself. */
    assert_int_equal(fx_budget_try_acquire(&child, 101, &p), FX_ETOOBIG);
    assert_int_equal(fx_budget_acquire(&child, 101, &w, &p), FX_ETOOBIG);
    assert_int_equal(fx_budget_acquire_wait(&child, 101, -1, &p), FX_ETOOBIG);
    /* Fits the child, but never the parent. */
    assert_int_equal(fx_budget_try_acquire(&child, 60, &p), FX_ETOOBIG);
    assert_int_equal(fx_budget_acquire(&child, 60, &w, &p), FX_ETOOBIG);
    assert_int_equal(fx_budget_acquire_wait(&child, 60, -1, &p), FX_ETOOBIG);
    assert_null(p.budget);
    assert_int_equal(fx_budget_in_use(&child), 0);
    assert_int_equal(fx_budget_in_use(&parent), 0);
    /* Exactly the capacity is fine. */
    fx_permit all = take(&parent, 50);
    fx_permit_release(&all);
    fx_budget_deinit(&child);
    fx_budget_deinit(&parent);
}

static void test_init_rejects_zero_capacity(void **state)
{
    fx_budget b;
    assert_int_equal(fx_budget_init(&b, 0, NULL), -EINVAL);
}

/* ---- parents ------------------------------------------------------------ */

static void test_child_share_limits_one_connection(void **state)
{
    fx_budget parent, a, b;
    init(&parent, 100, NULL);
    init(&a, 40, &parent);
    init(&b, 40, &parent);
    fx_permit pa = take(&a, 40);
    assert_int_equal(fx_budget_in_use(&parent), 40);
    fx_permit p = {0};
    assert_int_equal(fx_budget_try_acquire(&a, 1, &p), FX_EFULL);
    grant_log log = {0};
    tagged t;
    park(&a, &t, &log, 1, 10);   /* connection a waits for its own share */
    fx_permit pb = take(&b, 40); /* connection b is not held up by a */
    assert_int_equal(fx_budget_in_use(&parent), 80);
    fx_budget_stats st;
    fx_budget_get_stats(&a, &st);
    assert_int_equal(st.refused, 1);
    fx_budget_get_stats(&parent, &st);
    assert_int_equal(st.refused, 0);
    fx_permit_release(&pa);
    assert_int_equal(log.n, 1);
    assert_int_equal(log.rvs[0], 0);
    assert_int_equal(fx_budget_in_use(&a), 10);
    assert_int_equal(fx_budget_in_use(&parent), 50);
    fx_permit_release(&t.p);
    fx_permit_release(&pb);
    assert_int_equal(fx_budget_in_use(&parent), 0);
    fx_budget_deinit(&a);
    fx_budget_deinit(&b);
    fx_budget_deinit(&parent);
}

static void test_try_acquire_from_names_refusing_budget(void **state)
{
    fx_budget parent, a, b;
    init(&parent, 100, NULL);
    init(&a, 60, &parent);
    init(&b, 60, &parent);
    fx_permit pa = take(&a, 60);
    fx_permit p = {0};
    const fx_budget *refused = NULL;
    /* a's own share is exhausted: the child refuses */
    assert_int_equal(fx_budget_try_acquire_from(&a, 1, &p, &refused), FX_EFULL);
    assert_ptr_equal(refused, &a);
    /* b has share left but the process-wide budget has only 40 */
    refused = NULL;
    assert_int_equal(fx_budget_try_acquire_from(&b, 50, &p, &refused), FX_EFULL);
    assert_ptr_equal(refused, &parent);
    assert_int_equal(fx_budget_in_use(&b), 0);
    fx_permit_release(&pa);
    fx_budget_deinit(&a);
    fx_budget_deinit(&b);
    fx_budget_deinit(&parent);
}

static void test_child_rolls_back_when_parent_full(void **state)
{
    fx_budget parent, a, b;
    init(&parent, 50, NULL);
    init(&a, 40, &parent);
    init(&b, 40, &parent);
    fx_permit pb = take(&b, 30);
    fx_permit p = {0};
    assert_int_equal(fx_budget_try_acquire(&a, 30, &p), FX_EFULL);
    assert_null(p.budget);
    assert_int_equal(fx_budget_in_use(&a), 0);
    assert_int_equal(fx_budget_in_use(&parent), 30);
    fx_budget_stats st;
    fx_budget_get_stats(&parent, &st);
    assert_int_equal(st.refused, 1);
    fx_budget_get_stats(&a, &st);
    assert_int_equal(st.refused, 0);
    fx_permit pa = take(&a, 20);
    assert_int_equal(fx_budget_in_use(&parent), 50);
    fx_permit_release(&pa);
    fx_permit_release(&pb);
    fx_budget_deinit(&a);
    fx_budget_deinit(&b);
    fx_budget_deinit(&parent);
}

static void test_child_waiter_holds_share_while_parent_is_full(void **state)
{
    fx_budget parent, a, b;
    init(&parent, 100, NULL);
    init(&a, 60, &parent);
    init(&b, 60, &parent);
    fx_permit pb = take(&b, 60);
    grant_log log = {0};
    tagged t;
    park(&a, &t, &log, 1, 50);
    assert_int_equal(fx_budget_in_use(&a), 50); /* its share, held */
    assert_int_equal(fx_budget_in_use(&parent), 60);
    fx_budget_stats st;
    fx_budget_get_stats(&parent, &st);
    assert_int_equal(st.waiters, 1);
    fx_permit_release(&pb);
    assert_int_equal(log.n, 1);
    assert_int_equal(log.rvs[0], 0);
    assert_ptr_equal(t.p.budget, &a);
    assert_int_equal(fx_budget_in_use(&parent), 50);
    fx_permit_release(&t.p);
    assert_int_equal(fx_budget_in_use(&a), 0);
    assert_int_equal(fx_budget_in_use(&parent), 0);
    fx_budget_deinit(&a);
    fx_budget_deinit(&b);
    fx_budget_deinit(&parent);
}

/* ---- async waiters ------------------------------------------------------ */

static void test_async_waiter_granted_on_release(void **state)
{
    fx_budget b;
    init(&b, 100, NULL);
    fx_permit held = take(&b, 80);
    grant_log log = {0};
    tagged t;
    park(&b, &t, &log, 7, 50);
    assert_int_equal(log.n, 0);
    assert_null(t.p.budget);
    fx_permit_release(&held);
    assert_int_equal(log.n, 1);
    assert_int_equal(log.ids[0], 7);
    assert_int_equal(log.rvs[0], 0);
    assert_ptr_equal(t.p.budget, &b);
    assert_int_equal(t.p.n, 50);
    assert_int_equal(fx_budget_in_use(&b), 50);
    fx_budget_stats st;
    fx_budget_get_stats(&b, &st);
    assert_int_equal(st.waited, 1);
    assert_int_equal(st.acquired, 2);
    assert_int_equal(st.waiters, 0);
    /* With room and nobody waiting the async form grants at once. */
    fx_budget_waiter w = {.on_granted = log_grant, .user = &t};
    fx_permit now = {0};
    assert_int_equal(fx_budget_acquire(&b, 50, &w, &now), 0);
    assert_int_equal(now.n, 50);
    assert_int_equal(log.n, 1);
    fx_permit_release(&now);
    fx_permit_release(&t.p);
    fx_budget_deinit(&b);
}

static void test_async_waiters_served_fifo(void **state)
{
    fx_budget b;
    init(&b, 100, NULL);
    fx_permit big = take(&b, 90);
    fx_permit small = take(&b, 10);
    grant_log log = {0};
    tagged t[3];
    park(&b, &t[0], &log, 1, 80);
    park(&b, &t[1], &log, 2, 10);
    park(&b, &t[2], &log, 3, 10);
    /* Newcomers do not jump the queue, even when they would fit. */
    fx_permit p = {0};
    fx_permit_release(&small);
    assert_int_equal(fx_budget_try_acquire(&b, 10, &p), FX_EFULL);
    /* 10 bytes free: the small waiters fit but the large head does not, and
     * it must not be starved by them. */
    assert_int_equal(log.n, 0);
    fx_permit_release(&big);
    assert_int_equal(log.n, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(log.ids[i], i + 1);
        assert_int_equal(log.rvs[i], 0);
        fx_permit_release(&t[i].p);
    }
    assert_int_equal(fx_budget_in_use(&b), 0);
    fx_budget_deinit(&b);
}

static void test_cancel_removes_waiter(void **state)
{
    fx_budget b;
    init(&b, 10, NULL);
    fx_permit held = take(&b, 6);
    grant_log log = {0};
    tagged t[2];
    park(&b, &t[0], &log, 1, 8);
    park(&b, &t[1], &log, 2, 4); /* fits, but waits behind the head */
    assert_int_equal(log.n, 0);
    assert_true(fx_budget_cancel(&b, &t[0].w));
    assert_false(fx_budget_cancel(&b, &t[0].w));
    /* Removing the head let the next one through at once. */
    assert_int_equal(log.n, 1);
    assert_int_equal(log.ids[0], 2);
    assert_false(fx_budget_cancel(&b, &t[1].w)); /* already granted */
    fx_permit_release(&held);
    assert_int_equal(log.n, 1); /* the cancelled waiter never hears back */
    assert_null(t[0].p.budget);
    fx_permit_release(&t[1].p);
    assert_int_equal(fx_budget_in_use(&b), 0);
    fx_budget_deinit(&b);
}

static void test_cancel_returns_child_share_held_while_waiting(void **state)
{
    fx_budget parent, a;
    init(&parent, 10, NULL);
    init(&a, 10, &parent);
    fx_permit held = take(&parent, 10);
    grant_log log = {0};
    tagged t;
    park(&a, &t, &log, 1, 5);
    assert_int_equal(fx_budget_in_use(&a), 5);
    assert_true(fx_budget_cancel(&a, &t.w));
    assert_int_equal(fx_budget_in_use(&a), 0);
    fx_permit_release(&held);
    assert_int_equal(log.n, 0);
    fx_budget_deinit(&a);
    fx_budget_deinit(&parent);
}

/* ---- blocking acquire --------------------------------------------------- */

static void test_acquire_wait_times_out(void **state)
{
    fx_budget b;
    init(&b, 10, NULL);
    fx_permit held = take(&b, 10);
    fx_permit p = {0};
    assert_int_equal(fx_budget_acquire_wait(&b, 5, 20 * MS, &p), FX_ETIMEDOUT);
    assert_int_equal(fx_budget_acquire_wait(&b, 5, 0, &p), FX_ETIMEDOUT);
    assert_null(p.budget);
    fx_budget_stats st;
    fx_budget_get_stats(&b, &st);
    assert_int_equal(st.timeouts, 1);
    assert_int_equal(st.waiters, 0);
    assert_int_equal(st.in_use, 10);
    fx_permit_release(&held);
    assert_int_equal(fx_budget_acquire_wait(&b, 5, 20 * MS, &p), 0);
    fx_permit_release(&p);
    fx_budget_deinit(&b);
}

static void wait_for_waiters(fx_budget *b, size_t n)
{
    fx_budget_stats st;
    for (;;) {
        fx_budget_get_stats(b, &st);
        if (st.waiters >= n)
            return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

typedef struct blocked {
    fx_budget *b;
    size_t n;
    fx_permit p;
    int rv;
} blocked;

static void *acquire_blocking(void *arg)
{
    blocked *x = arg;
    x->rv = fx_budget_acquire_wait(x->b, x->n, -1, &x->p);
    return NULL;
}

static void test_acquire_wait_wakes_on_release(void **state)
{
    fx_budget b;
    init(&b, 10, NULL);
    fx_permit held = take(&b, 10);
    blocked x = {.b = &b, .n = 5, .rv = 1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, acquire_blocking, &x), 0);
    wait_for_waiters(&b, 1);
    fx_permit_release(&held);
    pthread_join(t, NULL);
    assert_int_equal(x.rv, 0);
    assert_ptr_equal(x.p.budget, &b);
    assert_int_equal(fx_budget_in_use(&b), 5);
    fx_permit_release(&x.p);
    fx_budget_deinit(&b);
}

static void test_close_wakes_waiters_with_closed(void **state)
{
    fx_budget parent, a;
    init(&parent, 10, NULL);
    init(&a, 10, &parent);
    fx_permit held = take(&parent, 10);
    grant_log log = {0};
    tagged t[2];
    park(&parent, &t[0], &log, 1, 5);
    park(&a, &t[1], &log, 2, 5); /* holds 5 of a while it waits on parent */
    blocked x = {.b = &parent, .n = 5, .rv = 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, acquire_blocking, &x), 0);
    wait_for_waiters(&parent, 3);
    fx_budget_close(&parent);
    pthread_join(th, NULL);
    assert_int_equal(x.rv, FX_ECLOSED);
    assert_int_equal(log.n, 2);
    assert_int_equal(log.ids[0], 1);
    assert_int_equal(log.rvs[0], FX_ECLOSED);
    assert_int_equal(log.ids[1], 2);
    assert_int_equal(log.rvs[1], FX_ECLOSED);
    assert_null(t[1].p.budget);
    assert_int_equal(fx_budget_in_use(&a), 0); /* its held share came back */
    fx_permit p = {0};
    assert_int_equal(fx_budget_try_acquire(&parent, 1, &p), FX_ECLOSED);
    assert_int_equal(fx_budget_try_acquire(&a, 1, &p), FX_ECLOSED);
    fx_budget_waiter w = {.on_granted = log_grant, .user = &t[0]};
    assert_int_equal(fx_budget_acquire(&a, 1, &w, &p), FX_ECLOSED);
    assert_int_equal(fx_budget_acquire_wait(&parent, 1, -1, &p), FX_ECLOSED);
    fx_permit_release(&held); /* permits outlive the close */
    assert_int_equal(fx_budget_in_use(&parent), 0);
    fx_budget_close(&parent);
    fx_budget_deinit(&a);
    fx_budget_deinit(&parent);
}

static void test_closing_child_fails_its_waiters_parked_on_parent(void **state)
{
    fx_budget parent, a, b;
    init(&parent, 10, NULL);
    init(&a, 10, &parent);
    init(&b, 10, &parent);
    fx_permit held = take(&parent, 10);
    grant_log log = {0};
    tagged t[2];
    park(&a, &t[0], &log, 1, 5);
    park(&b, &t[1], &log, 2, 5);
    fx_budget_close(&a);
    assert_int_equal(log.n, 1);
    assert_int_equal(log.ids[0], 1);
    assert_int_equal(log.rvs[0], FX_ECLOSED);
    assert_int_equal(fx_budget_in_use(&a), 0);
    fx_permit_release(&held);
    assert_int_equal(log.n, 2); /* b's waiter is still served */
    assert_int_equal(log.ids[1], 2);
    assert_int_equal(log.rvs[1], 0);
    fx_permit_release(&t[1].p);
    fx_budget_deinit(&a);
    fx_budget_deinit(&b);
    fx_budget_deinit(&parent);
}

/* ---- concurrency -------------------------------------------------------- */

enum { WORKERS = 4, ROUNDS = 20000, PARENT_CAP = 1000, CHILD_CAP = 600 };

typedef struct hammer {
    fx_budget parent;
    fx_budget child[2];
    atomic_long held[3]; /* bytes the workers believe they hold: parent, children */
    atomic_long high[3];
    atomic_int errors;
} hammer;

static void note_high(atomic_long *high, long v)
{
    long h = atomic_load(high);
    while (v > h && !atomic_compare_exchange_weak(high, &h, v)) {
    }
}

static void hold(hammer *h, int c, long n)
{
    note_high(&h->high[0], atomic_fetch_add(&h->held[0], n) + n);
    note_high(&h->high[1 + c], atomic_fetch_add(&h->held[1 + c], n) + n);
}

static void unhold(hammer *h, int c, long n)
{
    atomic_fetch_sub(&h->held[0], n);
    atomic_fetch_sub(&h->held[1 + c], n);
}

/* Mixes the three ways in: mostly try, sometimes a wait without limit, and
 * sometimes a short wait whose timeout races the grant (cancel vs notify). */
static int acquire_some(fx_budget *b, size_t n, int i, fx_permit *p)
{
    if (i % 8 == 0)
        return fx_budget_acquire_wait(b, n, -1, p);
    if (i % 8 == 4)
        return fx_budget_acquire_wait(b, n, 50000, p);
    return fx_budget_try_acquire(b, n, p);
}

static void *hammer_worker(void *arg)
{
    hammer *h = ((void **)arg)[0];
    uintptr_t id = (uintptr_t)((void **)arg)[1];
    int c = (int)(id % 2);
    unsigned x = (unsigned)id * 2654435761u + 1;
    for (int i = 0; i < ROUNDS; i++) {
        x = x * 1103515245u + 12345u;
        size_t n = 1 + (x >> 8) % 300;
        fx_permit p = {0};
        int rv = acquire_some(&h->child[c], n, i, &p);
        if (rv == FX_EFULL || rv == FX_ETIMEDOUT)
            continue;
        if (rv != 0) {
            atomic_fetch_add(&h->errors, 1);
            continue;
        }
        hold(h, c, (long)n);
        if (i % 64 == 0)
            sched_yield();
        unhold(h, c, (long)n);
        fx_permit_release(&p);
    }
    return NULL;
}

static void test_concurrent_acquire_release_never_exceeds_capacity(void **state)
{
    static hammer h;
    memset(&h, 0, sizeof(h));
    init(&h.parent, PARENT_CAP, NULL);
    init(&h.child[0], CHILD_CAP, &h.parent);
    init(&h.child[1], CHILD_CAP, &h.parent);
    pthread_t t[WORKERS];
    void *args[WORKERS][2];
    for (uintptr_t i = 0; i < WORKERS; i++) {
        args[i][0] = &h;
        args[i][1] = (void *)i;
        assert_int_equal(pthread_create(&t[i], NULL, hammer_worker, args[i]), 0);
    }
    for (int i = 0; i < WORKERS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&h.errors), 0);
    assert_true(atomic_load(&h.high[0]) <= PARENT_CAP);
    assert_true(atomic_load(&h.high[1]) <= CHILD_CAP);
    assert_true(atomic_load(&h.high[2]) <= CHILD_CAP);
    assert_true(atomic_load(&h.high[0]) > 0);
    assert_int_equal(fx_budget_in_use(&h.parent), 0);
    assert_int_equal(fx_budget_in_use(&h.child[0]), 0);
    assert_int_equal(fx_budget_in_use(&h.child[1]), 0);
    fx_budget_deinit(&h.child[0]);
    fx_budget_deinit(&h.child[1]);
    fx_budget_deinit(&h.parent);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_try_acquire_fails_when_exhausted),
    cmocka_unit_test(test_release_makes_bytes_available),
    cmocka_unit_test(test_permit_release_is_idempotent),
    cmocka_unit_test(test_request_larger_than_budget_fails_at_once),
    cmocka_unit_test(test_init_rejects_zero_capacity),
    cmocka_unit_test(test_child_share_limits_one_connection),
    cmocka_unit_test(test_try_acquire_from_names_refusing_budget),
    cmocka_unit_test(test_child_rolls_back_when_parent_full),
    cmocka_unit_test(test_child_waiter_holds_share_while_parent_is_full),
    cmocka_unit_test(test_async_waiter_granted_on_release),
    cmocka_unit_test(test_async_waiters_served_fifo),
    cmocka_unit_test(test_cancel_removes_waiter),
    cmocka_unit_test(test_cancel_returns_child_share_held_while_waiting),
    cmocka_unit_test(test_acquire_wait_times_out),
    cmocka_unit_test(test_acquire_wait_wakes_on_release),
    cmocka_unit_test(test_close_wakes_waiters_with_closed),
    cmocka_unit_test(test_closing_child_fails_its_waiters_parked_on_parent),
    cmocka_unit_test(test_concurrent_acquire_release_never_exceeds_capacity),
};
FX_TEST_MAIN(tests)
