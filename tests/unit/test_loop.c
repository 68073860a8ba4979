/* Unit tests for fx_loop: the MPSC inbox (ordering, coalescing, doorbell
 * economy, exit drain), timers (order, cancel, re-arm, sub-millisecond),
 * fd watches (readiness, unwatch inside callbacks), pinning and stop/free,
 * and asking loops with a deadline (answers, late answers, gathers, the
 * caller's own loop, many askers).
 * Also built against fx_base_tsan. Only the main test thread asserts; loop
 * callbacks record what they saw into atomics that the test checks after. */
/* fx-test-libs: fx_base */
#include "base/loop.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "felix/error.h"
#include "fx_test.h"

/* Hang guard only: a healthy run takes milliseconds. */
#define HANG_NS (20 * FX_NS_PER_S)

static void nap(void)
{
    struct timespec ts = {0, 200 * 1000};
    nanosleep(&ts, NULL);
}

/* Waits (from the test thread) until |*v| >= |want|, failing after HANG_NS. */
static void wait_ge(atomic_int *v, int want)
{
    uint64_t end = fx_now_ns() + HANG_NS;
    while (atomic_load(v) < want) {
        assert_true(fx_now_ns() < end);
        nap();
    }
}

/* Waits (from a loop callback) until |*v| is set; false on hang. */
static bool spin_until(atomic_bool *v)
{
    uint64_t end = fx_now_ns() + HANG_NS;
    while (!atomic_load(v)) {
        if (fx_now_ns() >= end)
            return false;
        nap();
    }
    return true;
}

static fx_loop *new_started(const char *name, int cpu)
{
    fx_loop *l = NULL;
    fx_loop_opts o = {.name = name, .cpu = cpu};
    assert_int_equal(fx_loop_new(&l, &o), 0);
    assert_int_equal(fx_loop_start(l), 0);
    return l;
}

static void stop_free(fx_loop *l)
{
    fx_loop_stop(l);
    assert_int_equal(fx_loop_run_error(l), 0);
    fx_loop_free(l);
}

/* A counting task: |runs| is bumped on every run. */
typedef struct counted {
    fx_task task;
    atomic_int runs;
} counted;

static void counted_cb(fx_loop *l, fx_task *t, void *user)
{
    counted *c = user;
    atomic_fetch_add(&c->runs, 1);
}

/* ---- tasks ------------------------------------------------------------- */

typedef struct where {
    fx_task task;
    atomic_int done;
    atomic_bool is_current;
    atomic_bool current_matches;
    atomic_bool other_thread;
    atomic_bool name_ok;
    atomic_bool now_ok;
    pthread_t main;
} where;

static void where_cb(fx_loop *l, fx_task *t, void *user)
{
    where *w = user;
    char name[16] = "";
    pthread_getname_np(pthread_self(), name, sizeof(name));
    atomic_store(&w->is_current, fx_loop_is_current(l));
    atomic_store(&w->current_matches, fx_loop_current() == l);
    atomic_store(&w->other_thread, !pthread_equal(pthread_self(), w->main));
    atomic_store(&w->name_ok, strcmp(name, "fx-test-loop") == 0);
    atomic_store(&w->now_ok, fx_loop_now(l) <= fx_now_ns());
    atomic_store(&w->done, 1);
}

static void test_post_runs_task_on_loop_thread(void **state)
{
    fx_loop *l = new_started("fx-test-loop", -1);
    assert_int_equal(fx_loop_start(l), -EBUSY);
    assert_false(fx_loop_is_stopping(l));
    assert_string_equal(fx_loop_name(l), "fx-test-loop");
    assert_false(fx_loop_is_current(l));
    assert_null(fx_loop_current());

    where w = {.main = pthread_self()};
    fx_task_init(&w.task, where_cb, &w);
    assert_true(fx_loop_post(l, &w.task));
    wait_ge(&w.done, 1);
    assert_true(atomic_load(&w.is_current));
    assert_true(atomic_load(&w.current_matches));
    assert_true(atomic_load(&w.other_thread));
    assert_true(atomic_load(&w.name_ok));
    assert_true(atomic_load(&w.now_ok));
    stop_free(l);
}

enum { PRODUCERS = 4, PER_PRODUCER = 20000 };

typedef struct many {
    fx_loop *l;
    counted *tasks; /* PER_PRODUCER per producer */
    atomic_int total;
    atomic_int go;
} many;

typedef struct producer {
    many *m;
    int id;
} producer;

static void many_cb(fx_loop *l, fx_task *t, void *user)
{
    counted *c = (counted *)t;
    many *m = user;
    atomic_fetch_add_explicit(&c->runs, 1, memory_order_relaxed);
    atomic_fetch_add(&m->total, 1);
}

static void *many_producer(void *arg)
{
    producer *p = arg;
    while (!atomic_load(&p->m->go))
        sched_yield();
    counted *mine = p->m->tasks + (size_t)p->id * PER_PRODUCER;
    for (int i = 0; i < PER_PRODUCER; i++)
        fx_loop_post(p->m->l, &mine[i].task);
    return NULL;
}

static void test_posts_from_many_threads_all_run_once(void **state)
{
    many m = {.l = new_started("fx-many", -1)};
    m.tasks = calloc((size_t)PRODUCERS * PER_PRODUCER, sizeof(*m.tasks));
    assert_non_null(m.tasks);
    for (int i = 0; i < PRODUCERS * PER_PRODUCER; i++)
        fx_task_init(&m.tasks[i].task, many_cb, &m);

    pthread_t th[PRODUCERS];
    producer p[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++) {
        p[i] = (producer){.m = &m, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, many_producer, &p[i]), 0);
    }
    atomic_store(&m.go, 1);
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(th[i], NULL);
    wait_ge(&m.total, PRODUCERS * PER_PRODUCER);

    fx_loop_stats st;
    fx_loop_get_stats(m.l, &st);
    stop_free(m.l);
    assert_int_equal(atomic_load(&m.total), PRODUCERS * PER_PRODUCER);
    for (int i = 0; i < PRODUCERS * PER_PRODUCER; i++)
        assert_int_equal(atomic_load(&m.tasks[i].runs), 1);
    assert_int_equal(st.posts, PRODUCERS * PER_PRODUCER);
    assert_int_equal(st.tasks_run, PRODUCERS * PER_PRODUCER);
    assert_true(st.wakeups <= st.posts);
    free(m.tasks);
}

enum { ORDER_PRODUCERS = 3, ORDER_PER = 10000 };

typedef struct seq_task {
    fx_task task;
    int producer;
    int seq;
} seq_task;

typedef struct order {
    fx_loop *l;
    seq_task *tasks;
    int last[ORDER_PRODUCERS]; /* loop thread only */
    atomic_int out_of_order;
    atomic_int total;
} order;

static void order_cb(fx_loop *l, fx_task *t, void *user)
{
    seq_task *s = (seq_task *)t;
    order *o = user;
    if (s->seq != o->last[s->producer] + 1)
        atomic_fetch_add(&o->out_of_order, 1);
    o->last[s->producer] = s->seq;
    atomic_fetch_add(&o->total, 1);
}

typedef struct order_producer {
    order *o;
    int id;
} order_producer;

static void *order_post(void *arg)
{
    order_producer *p = arg;
    seq_task *mine = p->o->tasks + (size_t)p->id * ORDER_PER;
    for (int i = 0; i < ORDER_PER; i++)
        fx_loop_post(p->o->l, &mine[i].task);
    return NULL;
}

static void test_per_producer_order_kept(void **state)
{
    order o = {.l = new_started("fx-order", -1)};
    o.tasks = calloc((size_t)ORDER_PRODUCERS * ORDER_PER, sizeof(*o.tasks));
    assert_non_null(o.tasks);
    for (int p = 0; p < ORDER_PRODUCERS; p++) {
        o.last[p] = -1;
        for (int i = 0; i < ORDER_PER; i++) {
            seq_task *s = &o.tasks[(size_t)p * ORDER_PER + i];
            fx_task_init(&s->task, order_cb, &o);
            s->producer = p;
            s->seq = i;
        }
    }
    pthread_t th[ORDER_PRODUCERS];
    order_producer op[ORDER_PRODUCERS];
    for (int p = 0; p < ORDER_PRODUCERS; p++) {
        op[p] = (order_producer){.o = &o, .id = p};
        assert_int_equal(pthread_create(&th[p], NULL, order_post, &op[p]), 0);
    }
    for (int p = 0; p < ORDER_PRODUCERS; p++)
        pthread_join(th[p], NULL);
    wait_ge(&o.total, ORDER_PRODUCERS * ORDER_PER);
    stop_free(o.l);
    assert_int_equal(atomic_load(&o.out_of_order), 0);
    for (int p = 0; p < ORDER_PRODUCERS; p++)
        assert_int_equal(o.last[p], ORDER_PER - 1);
    free(o.tasks);
}

typedef struct reposter {
    fx_task task;
    atomic_int runs;
    atomic_int repost_ok;
} reposter;

static void reposter_cb(fx_loop *l, fx_task *t, void *user)
{
    reposter *r = user;
    /* The pending flag is already clear, so re-posting from here queues. */
    if (atomic_fetch_add(&r->runs, 1) + 1 < 3 && fx_loop_post(l, t))
        atomic_fetch_add(&r->repost_ok, 1);
}

static void test_repost_of_pending_task_is_coalesced(void **state)
{
    fx_loop *l = NULL;
    fx_loop_opts o = {.name = "fx-coalesce", .cpu = -1};
    assert_int_equal(fx_loop_new(&l, &o), 0);

    /* The loop has no thread yet, so the task stays pending. */
    counted c = {0};
    fx_task_init(&c.task, counted_cb, &c);
    assert_true(fx_loop_post(l, &c.task));
    assert_false(fx_loop_post(l, &c.task));
    assert_false(fx_loop_post(l, &c.task));

    assert_int_equal(fx_loop_start(l), 0);
    wait_ge(&c.runs, 1);
    /* Once it ran it can be posted again. */
    assert_true(fx_loop_post(l, &c.task));
    wait_ge(&c.runs, 2);

    reposter r = {0};
    fx_task_init(&r.task, reposter_cb, &r);
    assert_true(fx_loop_post(l, &r.task));
    wait_ge(&r.runs, 3);

    fx_loop_stats st;
    fx_loop_get_stats(l, &st);
    stop_free(l);
    assert_int_equal(atomic_load(&c.runs), 2);
    assert_int_equal(atomic_load(&r.runs), 3);
    assert_int_equal(atomic_load(&r.repost_ok), 2);
    assert_int_equal(st.posts, 2 + 3);
}

/* A task that keeps the loop busy until released. */
typedef struct blocker {
    fx_task task;
    atomic_int busy;
    atomic_bool release;
    atomic_bool hung;
    bool stop_after; /* calls fx_loop_stop() from the loop before returning */
    fx_task after;   /* posted from the loop after that stop request */
    atomic_int after_runs;
    atomic_int after_saw_stopping;
} blocker;

static void after_cb(fx_loop *l, fx_task *t, void *user)
{
    blocker *b = user;
    atomic_store(&b->after_saw_stopping, fx_loop_is_stopping(l));
    atomic_fetch_add(&b->after_runs, 1);
}

static void blocker_cb(fx_loop *l, fx_task *t, void *user)
{
    blocker *b = user;
    atomic_store(&b->busy, 1);
    if (!spin_until(&b->release))
        atomic_store(&b->hung, true);
    if (b->stop_after) {
        fx_loop_stop(l);
        fx_loop_post(l, &b->after);
    }
}

static void blocker_init(blocker *b)
{
    memset(b, 0, sizeof(*b));
    fx_task_init(&b->task, blocker_cb, b);
    fx_task_init(&b->after, after_cb, b);
}

enum { BUSY_POSTS = 1000 };

static void test_no_wakeup_while_busy(void **state)
{
    fx_loop *l = new_started("fx-busy", -1);
    blocker b;
    blocker_init(&b);
    assert_true(fx_loop_post(l, &b.task));
    wait_ge(&b.busy, 1);

    fx_loop_stats before;
    fx_loop_get_stats(l, &before);
    static counted tasks[BUSY_POSTS];
    atomic_int total = 0;
    for (int i = 0; i < BUSY_POSTS; i++) {
        fx_task_init(&tasks[i].task, counted_cb, &tasks[i]);
        atomic_init(&tasks[i].runs, 0);
        assert_true(fx_loop_post(l, &tasks[i].task));
    }
    fx_loop_stats during;
    fx_loop_get_stats(l, &during);
    atomic_store(&b.release, true);
    for (int i = 0; i < BUSY_POSTS; i++)
        wait_ge(&tasks[i].runs, 1);
    for (int i = 0; i < BUSY_POSTS; i++)
        total += atomic_load(&tasks[i].runs);
    stop_free(l);

    assert_false(atomic_load(&b.hung));
    assert_int_equal(atomic_load(&total), BUSY_POSTS);
    /* The loop is awake (running the blocker) the whole time: it checks the
     * inbox again before its next wait, so none of the posts rings. */
    assert_int_equal(during.posts - before.posts, BUSY_POSTS);
    assert_int_equal(during.wakeups - before.wakeups, 0);
}

static void test_stop_runs_pending_tasks(void **state)
{
    fx_loop *l = new_started("fx-stop", -1);
    blocker b;
    blocker_init(&b);
    b.stop_after = true;
    assert_true(fx_loop_post(l, &b.task));
    wait_ge(&b.busy, 1);

    /* More than one batch is queued when the loop sees the stop request. */
    enum { N = 600 };
    static counted tasks[N];
    for (int i = 0; i < N; i++) {
        fx_task_init(&tasks[i].task, counted_cb, &tasks[i]);
        atomic_init(&tasks[i].runs, 0);
        assert_true(fx_loop_post(l, &tasks[i].task));
    }
    atomic_store(&b.release, true);
    fx_loop_stop(l); /* joins: every task has run when this returns */
    assert_false(atomic_load(&b.hung));
    for (int i = 0; i < N; i++)
        assert_int_equal(atomic_load(&tasks[i].runs), 1);
    assert_int_equal(atomic_load(&b.after_runs), 1);
    assert_int_equal(atomic_load(&b.after_saw_stopping), 1);
    assert_false(fx_loop_is_stopping(l));
    fx_loop_free(l);
}

static void stop_self_cb(fx_loop *l, fx_task *t, void *user)
{
    atomic_store((atomic_int *)user, fx_loop_current() == l);
    fx_loop_stop(l);
}

static void test_stop_from_loop_thread_then_free_joins(void **state)
{
    fx_loop *l = new_started("fx-selfstop", -1);
    atomic_int seen = -1;
    fx_task t;
    fx_task_init(&t, stop_self_cb, &seen);
    assert_true(fx_loop_post(l, &t));
    wait_ge(&seen, 0);
    fx_loop_free(l); /* joins the thread that stopped itself */
    assert_int_equal(atomic_load(&seen), 1);
}

static void test_run_on_calling_thread_until_stop(void **state)
{
    fx_loop *l = NULL;
    assert_int_equal(fx_loop_new(&l, NULL), 0);
    assert_string_equal(fx_loop_name(l), "fx_loop");
    assert_int_equal(fx_loop_pin_error(l), 0);
    counted c = {0};
    fx_task_init(&c.task, counted_cb, &c);
    atomic_int seen = -1;
    fx_task stop;
    fx_task_init(&stop, stop_self_cb, &seen);
    assert_true(fx_loop_post(l, &c.task));
    assert_true(fx_loop_post(l, &stop));
    assert_int_equal(fx_loop_run(l), 0);
    assert_int_equal(atomic_load(&c.runs), 1);
    assert_int_equal(atomic_load(&seen), 1);
    assert_null(fx_loop_current());
    /* The stop request was consumed: the loop can run again. */
    assert_true(fx_loop_post(l, &stop));
    assert_int_equal(fx_loop_run(l), 0);
    fx_loop_free(l);
}

enum { CALLS = 100 };

static void call_cb(void *user)
{
    atomic_fetch_add((atomic_int *)user, 1);
}

static void test_call_allocates_and_frees(void **state)
{
    fx_loop *l = new_started("fx-call", -1);
    atomic_int n = 0;
    for (int i = 0; i < CALLS; i++)
        assert_int_equal(fx_loop_call(l, call_cb, &n), 0);
    wait_ge(&n, CALLS);
    /* Calls still queued at stop run too; LSan checks that all were freed. */
    for (int i = 0; i < CALLS; i++)
        assert_int_equal(fx_loop_call(l, call_cb, &n), 0);
    stop_free(l);
    assert_int_equal(atomic_load(&n), 2 * CALLS);
}

/* ---- asking loops and waiting ------------------------------------------ */

enum { ASK_LOOPS = 4, ASK_THREADS = 6, ASK_ROUNDS = 200 };

/* The block one ask carries: the loops write their answers into it. */
typedef struct answer {
    int value[ASK_LOOPS];
    bool on_loop[ASK_LOOPS]; /* the part ran on the loop it was asked of */
    char *heap[ASK_LOOPS];   /* allocated by the part; freed by the asker or on_late */
    fx_loop *loops[ASK_LOOPS];
} answer;

static atomic_int ask_allocs, ask_frees, ask_lates;

static void answer_fn(size_t i, void *data)
{
    answer *a = data;
    a->value[i] = 10 * (int)i + 7;
    a->on_loop[i] = fx_loop_is_current(a->loops[i]);
    a->heap[i] = malloc(16);
    if (a->heap[i] != NULL)
        atomic_fetch_add(&ask_allocs, 1);
}

static void answer_free(answer *a)
{
    for (size_t i = 0; i < ASK_LOOPS; i++) {
        if (a->heap[i] != NULL)
            atomic_fetch_add(&ask_frees, 1);
        free(a->heap[i]);
        a->heap[i] = NULL;
    }
}

static void answer_late(void *data)
{
    atomic_fetch_add(&ask_lates, 1);
    answer_free(data);
}

static fx_loop_ask_req answer_req(answer *a, int64_t timeout_ns)
{
    return (fx_loop_ask_req){.fn = answer_fn,
                             .data = a,
                             .size = sizeof(*a),
                             .on_late = answer_late,
                             .timeout_ns = timeout_ns};
}

static void ask_counts_reset(void)
{
    atomic_store(&ask_allocs, 0);
    atomic_store(&ask_frees, 0);
    atomic_store(&ask_lates, 0);
}

static void test_ask_runs_on_loop_and_returns_answer(void **state)
{
    ask_counts_reset();
    fx_loop *l = new_started("fx-ask", -1);
    answer a = {.loops = {l}};
    fx_loop_ask_req q = answer_req(&a, 5 * (int64_t)FX_NS_PER_S);
    assert_int_equal(fx_loop_ask(l, &q), 0);
    assert_int_equal(a.value[0], 7);
    assert_true(a.on_loop[0]);
    assert_non_null(a.heap[0]); /* the answer's allocation came back to the asker */
    answer_free(&a);

    /* No deadline, the caller's block passed as is. */
    answer b = {.loops = {l}};
    q = (fx_loop_ask_req){.fn = answer_fn, .data = &b, .timeout_ns = FX_LOOP_FOREVER};
    assert_int_equal(fx_loop_ask(l, &q), 0);
    assert_int_equal(b.value[0], 7);
    assert_true(b.on_loop[0]);
    answer_free(&b);
    stop_free(l);
    assert_int_equal(atomic_load(&ask_lates), 0);
    assert_int_equal(atomic_load(&ask_allocs), atomic_load(&ask_frees));
}

static void test_ask_timeout_frees_the_late_answer(void **state)
{
    ask_counts_reset();
    fx_loop *l = new_started("fx-ask-late", -1);
    blocker b;
    blocker_init(&b);
    assert_true(fx_loop_post(l, &b.task));
    wait_ge(&b.busy, 1);

    answer a = {.loops = {l}};
    fx_loop_ask_req q = answer_req(&a, 30 * (int64_t)FX_NS_PER_MS);
    uint64_t t0 = fx_now_ns();
    size_t missing = 99;
    assert_int_equal(fx_loop_ask_all(&l, 1, &q, &missing), FX_ETIMEDOUT);
    assert_true(fx_now_ns() - t0 >= 30 * FX_NS_PER_MS);
    assert_int_equal(missing, 0);
    /* The caller's block is untouched: the answer will go elsewhere. */
    assert_int_equal(a.value[0], 0);
    assert_null(a.heap[0]);
    assert_int_equal(atomic_load(&ask_lates), 0);

    /* The late answer lands in the ask's own copy, which on_late frees
     * (ASan/LSan: no use after free, no leak). */
    atomic_store(&b.release, true);
    uint64_t end = fx_now_ns() + HANG_NS;
    while (atomic_load(&ask_lates) == 0 && fx_now_ns() < end)
        nap();
    assert_int_equal(atomic_load(&ask_lates), 1);
    assert_int_equal(atomic_load(&ask_allocs), 1);
    assert_int_equal(atomic_load(&ask_frees), 1);

    /* Given up while the loop stops: stopping runs the late part. */
    blocker_init(&b);
    assert_true(fx_loop_post(l, &b.task));
    wait_ge(&b.busy, 1);
    q.timeout_ns = 0;
    assert_int_equal(fx_loop_ask(l, &q), FX_ETIMEDOUT);
    atomic_store(&b.release, true);
    stop_free(l);
    assert_false(atomic_load(&b.hung));
    assert_int_equal(atomic_load(&ask_lates), 2);
    assert_int_equal(atomic_load(&ask_allocs), atomic_load(&ask_frees));
}

static void test_ask_all_gathers_every_loop(void **state)
{
    ask_counts_reset();
    fx_loop *loops[ASK_LOOPS];
    for (size_t i = 0; i < ASK_LOOPS; i++)
        loops[i] = new_started("fx-gather", -1);
    answer a;
    memset(&a, 0, sizeof(a));
    memcpy(a.loops, loops, sizeof(loops));
    fx_loop_ask_req q = answer_req(&a, 5 * (int64_t)FX_NS_PER_S);
    size_t missing = 99;
    assert_int_equal(fx_loop_ask_all(loops, ASK_LOOPS, &q, &missing), 0);
    assert_int_equal(missing, SIZE_MAX);
    for (size_t i = 0; i < ASK_LOOPS; i++) {
        assert_int_equal(a.value[i], 10 * (int)i + 7);
        assert_true(a.on_loop[i]);
    }
    answer_free(&a);

    /* One loop busy: the ask names it, the others' answers are freed late
     * with it. */
    blocker b;
    blocker_init(&b);
    assert_true(fx_loop_post(loops[2], &b.task));
    wait_ge(&b.busy, 1);
    memset(&a, 0, sizeof(a));
    memcpy(a.loops, loops, sizeof(loops));
    q.timeout_ns = 30 * (int64_t)FX_NS_PER_MS;
    assert_int_equal(fx_loop_ask_all(loops, ASK_LOOPS, &q, &missing), FX_ETIMEDOUT);
    assert_int_equal(missing, 2);
    assert_int_equal(a.value[0], 0);
    atomic_store(&b.release, true);
    for (size_t i = 0; i < ASK_LOOPS; i++)
        stop_free(loops[i]);
    assert_int_equal(atomic_load(&ask_lates), 1);
    assert_int_equal(atomic_load(&ask_allocs), 2 * ASK_LOOPS);
    assert_int_equal(atomic_load(&ask_frees), 2 * ASK_LOOPS);
}

/* What a task on loop 0 saw when it asked its own loop (and loop 1). */
typedef struct own_ask {
    fx_loop *loops[2];
    atomic_int rv_timed, rv_forever, rv_all;
    atomic_int inline_value; /* the answer was there when the ask returned */
    atomic_int done;
} own_ask;

static void own_ask_cb(void *user)
{
    own_ask *o = user;
    answer a = {.loops = {o->loops[0]}};
    fx_loop_ask_req q = answer_req(&a, 2 * (int64_t)FX_NS_PER_S);
    atomic_store(&o->rv_timed, fx_loop_ask(o->loops[0], &q));
    bool ok = a.value[0] == 7 && a.on_loop[0];
    answer_free(&a);

    answer b = {.loops = {o->loops[0], o->loops[1]}};
    q = answer_req(&b, 2 * (int64_t)FX_NS_PER_S);
    atomic_store(&o->rv_all, fx_loop_ask_all(o->loops, 2, &q, NULL));
    ok = ok && b.value[0] == 7 && b.on_loop[0] && b.value[1] == 17 && b.on_loop[1];
    answer_free(&b);

    answer c = {.loops = {o->loops[0]}};
    q = (fx_loop_ask_req){.fn = answer_fn, .data = &c, .timeout_ns = FX_LOOP_FOREVER};
    atomic_store(&o->rv_forever, fx_loop_ask(o->loops[0], &q));
    ok = ok && c.value[0] == 7 && c.on_loop[0];
    answer_free(&c);
    atomic_store(&o->inline_value, ok);
    atomic_store(&o->done, 1);
}

static void test_ask_on_own_loop_runs_inline(void **state)
{
    ask_counts_reset();
    own_ask o = {.loops = {new_started("fx-own", -1), new_started("fx-other", -1)}};
    atomic_init(&o.rv_timed, 1);
    atomic_init(&o.rv_forever, 1);
    atomic_init(&o.rv_all, 1);
    assert_int_equal(fx_loop_call(o.loops[0], own_ask_cb, &o), 0);
    wait_ge(&o.done, 1);
    assert_int_equal(atomic_load(&o.rv_timed), 0);
    assert_int_equal(atomic_load(&o.rv_all), 0);
    assert_int_equal(atomic_load(&o.rv_forever), 0);
    assert_true(atomic_load(&o.inline_value));
    stop_free(o.loops[0]);
    stop_free(o.loops[1]);
    assert_int_equal(atomic_load(&ask_lates), 0);
    assert_int_equal(atomic_load(&ask_allocs), atomic_load(&ask_frees));
}

typedef struct asker {
    pthread_t th;
    fx_loop **loops;
    int ok, timed_out, bad;
} asker;

/* Asks every loop, in turn with a deadline long enough, none, and one that
 * expires at once (its answers then come late, racing the give-up). */
static void *asker_main(void *arg)
{
    asker *k = arg;
    for (int r = 0; r < ASK_ROUNDS; r++) {
        answer a;
        memset(&a, 0, sizeof(a));
        memcpy(a.loops, k->loops, sizeof(a.loops));
        int64_t timeouts[3] = {(int64_t)HANG_NS, FX_LOOP_FOREVER, 0};
        fx_loop_ask_req q = answer_req(&a, timeouts[r % 3]);
        int rv = fx_loop_ask_all(k->loops, ASK_LOOPS, &q, NULL);
        bool right = true;
        for (size_t i = 0; i < ASK_LOOPS; i++)
            right = right && a.value[i] == 10 * (int)i + 7 && a.on_loop[i];
        if (rv == 0 && right)
            k->ok++;
        else if (rv == FX_ETIMEDOUT && a.value[0] == 0 && a.heap[0] == NULL)
            k->timed_out++;
        else
            k->bad++;
        answer_free(&a);
    }
    return NULL;
}

static void test_ask_from_many_threads(void **state)
{
    ask_counts_reset();
    fx_loop *loops[ASK_LOOPS];
    for (size_t i = 0; i < ASK_LOOPS; i++)
        loops[i] = new_started("fx-askers", -1);
    asker k[ASK_THREADS];
    memset(k, 0, sizeof(k));
    for (int t = 0; t < ASK_THREADS; t++) {
        k[t].loops = loops;
        assert_int_equal(pthread_create(&k[t].th, NULL, asker_main, &k[t]), 0);
    }
    int ok = 0, timed_out = 0;
    for (int t = 0; t < ASK_THREADS; t++) {
        assert_int_equal(pthread_join(k[t].th, NULL), 0);
        assert_int_equal(k[t].bad, 0);
        ok += k[t].ok;
        timed_out += k[t].timed_out;
    }
    for (size_t i = 0; i < ASK_LOOPS; i++)
        stop_free(loops[i]);
    assert_int_equal(ok + timed_out, ASK_THREADS * ASK_ROUNDS);
    assert_true(ok >= ASK_THREADS * (2 * ASK_ROUNDS / 3)); /* every ask that may wait */
    /* Every ask given up was freed once, with every part's allocation. */
    assert_int_equal(atomic_load(&ask_lates), timed_out);
    assert_int_equal(atomic_load(&ask_allocs), ASK_THREADS * ASK_ROUNDS * ASK_LOOPS);
    assert_int_equal(atomic_load(&ask_frees), atomic_load(&ask_allocs));
}

static void *release_later(void *arg)
{
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    atomic_store(&((blocker *)arg)->release, true);
    return NULL;
}

static void test_barrier_waits_for_what_was_posted_before(void **state)
{
    fx_loop *l = new_started("fx-barrier", -1);
    blocker b;
    blocker_init(&b);
    assert_true(fx_loop_post(l, &b.task));
    wait_ge(&b.busy, 1);
    static counted tasks[CALLS];
    for (int i = 0; i < CALLS; i++) {
        fx_task_init(&tasks[i].task, counted_cb, &tasks[i]);
        atomic_init(&tasks[i].runs, 0);
        assert_true(fx_loop_post(l, &tasks[i].task));
    }
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, release_later, &b), 0);
    fx_loop_barrier(l); /* the loop is busy for a while yet */
    for (int i = 0; i < CALLS; i++)
        assert_int_equal(atomic_load(&tasks[i].runs), 1);
    assert_int_equal(pthread_join(th, NULL), 0);
    stop_free(l);
    assert_false(atomic_load(&b.hung));
}

/* ---- timers ------------------------------------------------------------ */

enum { ORDER_TIMERS = 64 };

typedef struct tstate {
    fx_timer timers[ORDER_TIMERS];
    uint64_t fired_deadline[ORDER_TIMERS]; /* loop thread, read after stop */
    int nfired;
    atomic_int order_bad;
    atomic_int early;
    atomic_int done;
} tstate;

static void order_timer_cb(fx_loop *l, fx_timer *t, void *user)
{
    tstate *s = user;
    if (s->nfired > 0 && t->deadline_ns < s->fired_deadline[s->nfired - 1])
        atomic_fetch_add(&s->order_bad, 1);
    if (fx_loop_now(l) < t->deadline_ns)
        atomic_fetch_add(&s->early, 1);
    s->fired_deadline[s->nfired++] = t->deadline_ns;
    atomic_fetch_add(&s->done, 1);
}

static void test_timers_fire_in_deadline_order(void **state)
{
    fx_loop *l = NULL;
    assert_int_equal(fx_loop_new(&l, NULL), 0);
    static tstate s;
    memset(&s, 0, sizeof(s));
    /* Distinct deadlines 10 us apart in a scrambled arming order (37 is
     * coprime with 64), some in the past, the rest up to ~0.5 ms ahead. */
    uint64_t base = fx_now_ns() - 100 * FX_NS_PER_US;
    for (int i = 0; i < ORDER_TIMERS; i++) {
        int k = (i * 37) % ORDER_TIMERS;
        fx_timer_init(&s.timers[i], order_timer_cb, &s);
        assert_false(fx_timer_is_armed(&s.timers[i]));
        assert_int_equal(fx_loop_timer_arm(l, &s.timers[i], base + (uint64_t)k * 10000), 0);
        assert_true(fx_timer_is_armed(&s.timers[i]));
    }
    /* Re-arming an armed timer moves it instead of adding it twice. */
    assert_int_equal(fx_loop_timer_arm(l, &s.timers[3], base + 5), 0);
    assert_int_equal(fx_loop_timer_arm(l, &s.timers[5], base + 7 * FX_NS_PER_US), 0);
    /* Cancelling from the middle of the heap keeps it ordered. */
    int cancelled = 0;
    for (int i = 1; i < ORDER_TIMERS; i += 3) {
        fx_loop_timer_cancel(l, &s.timers[i]);
        assert_false(fx_timer_is_armed(&s.timers[i]));
        cancelled++;
    }
    assert_int_equal(fx_loop_start(l), 0);
    wait_ge(&s.done, ORDER_TIMERS - cancelled);
    fx_loop_stats st;
    fx_loop_get_stats(l, &st);
    stop_free(l);
    assert_int_equal(s.nfired, ORDER_TIMERS - cancelled);
    assert_int_equal(atomic_load(&s.order_bad), 0);
    assert_int_equal(atomic_load(&s.early), 0);
    assert_int_equal(st.timers_fired, ORDER_TIMERS - cancelled);
    for (int i = 0; i < ORDER_TIMERS; i++)
        assert_false(fx_timer_is_armed(&s.timers[i]));
}

static void test_timer_cancel_mid_heap_keeps_order(void **state)
{
    fx_loop *l = NULL;
    assert_int_equal(fx_loop_new(&l, NULL), 0);
    static tstate s;
    memset(&s, 0, sizeof(s));
    /* Arming in this order lays the heap out as written: the left subtree
     * holds late deadlines, the right one early ones. Cancelling the 11
     * moves the last leaf (4) under the 10, so it must sift up. */
    static const uint64_t at[] = {1, 10, 2, 11, 12, 3, 4};
    enum { N = sizeof(at) / sizeof(at[0]) };
    uint64_t base = fx_now_ns() - FX_NS_PER_MS;
    for (int i = 0; i < N; i++) {
        fx_timer_init(&s.timers[i], order_timer_cb, &s);
        assert_int_equal(fx_loop_timer_arm(l, &s.timers[i], base + at[i]), 0);
        assert_int_equal(s.timers[i].heap_index, i);
    }
    fx_loop_timer_cancel(l, &s.timers[3]);
    assert_int_equal(s.timers[6].heap_index, 1);
    assert_int_equal(fx_loop_start(l), 0);
    wait_ge(&s.done, N - 1);
    stop_free(l);
    assert_int_equal(s.nfired, N - 1);
    assert_int_equal(atomic_load(&s.order_bad), 0);
}

typedef struct cancel_state {
    fx_timer a, b, victim, end;
    atomic_int a_runs, b_runs, victim_runs, end_runs;
} cancel_state;

static void cancel_a_cb(fx_loop *l, fx_timer *t, void *user)
{
    atomic_fetch_add(&((cancel_state *)user)->a_runs, 1);
}

static void cancel_b_cb(fx_loop *l, fx_timer *t, void *user)
{
    cancel_state *s = user;
    atomic_fetch_add(&s->b_runs, 1);
    /* |victim| is due later than |b|, possibly in this very turn. */
    fx_loop_timer_cancel(l, &s->victim);
}

static void cancel_victim_cb(fx_loop *l, fx_timer *t, void *user)
{
    atomic_fetch_add(&((cancel_state *)user)->victim_runs, 1);
}

static void cancel_end_cb(fx_loop *l, fx_timer *t, void *user)
{
    atomic_fetch_add(&((cancel_state *)user)->end_runs, 1);
}

static void test_timer_cancel_prevents_fire(void **state)
{
    fx_loop *l = NULL;
    assert_int_equal(fx_loop_new(&l, NULL), 0);
    cancel_state s = {0};
    fx_timer_init(&s.a, cancel_a_cb, &s);
    fx_timer_init(&s.b, cancel_b_cb, &s);
    fx_timer_init(&s.victim, cancel_victim_cb, &s);
    fx_timer_init(&s.end, cancel_end_cb, &s);
    uint64_t now = fx_now_ns();
    assert_int_equal(fx_loop_timer_arm(l, &s.a, now + 1 * FX_NS_PER_MS), 0);
    assert_int_equal(fx_loop_timer_arm(l, &s.b, now + 2 * FX_NS_PER_MS), 0);
    assert_int_equal(fx_loop_timer_arm(l, &s.victim, now + 3 * FX_NS_PER_MS), 0);
    assert_int_equal(fx_loop_timer_arm(l, &s.end, now + 20 * FX_NS_PER_MS), 0);
    fx_loop_timer_cancel(l, &s.a);
    assert_false(fx_timer_is_armed(&s.a));
    fx_loop_timer_cancel(l, &s.a); /* cancelling a disarmed timer is a no-op */
    assert_int_equal(fx_loop_start(l), 0);
    wait_ge(&s.end_runs, 1);
    stop_free(l);
    assert_int_equal(atomic_load(&s.a_runs), 0);
    assert_int_equal(atomic_load(&s.b_runs), 1);
    assert_int_equal(atomic_load(&s.victim_runs), 0);
    assert_false(fx_timer_is_armed(&s.victim));
}

static void fault_a_cb(fx_loop *l, fx_timer *t, void *user)
{
}
static void fault_b_cb(fx_loop *l, fx_timer *t, void *user)
{
}

/* The fault hook fails exactly the next |n| first arms of timers with the
 * named callback; other timers and re-arms of an armed timer still work. */
static void test_timer_arm_fault_hook_fails_next_arms_of_one_callback(void **state)
{
    fx_loop *l = NULL;
    assert_int_equal(fx_loop_new(&l, NULL), 0);
    fx_timer a, b;
    fx_timer_init(&a, fault_a_cb, NULL);
    fx_timer_init(&b, fault_b_cb, NULL);
    uint64_t at = fx_now_ns() + 60 * FX_NS_PER_S;
    fx_loop_test_fail_timer_arms(fault_a_cb, 2);
    assert_int_equal(fx_loop_timer_arm(l, &b, at), 0);
    assert_int_equal(fx_loop_timer_arm(l, &a, at), -ENOMEM);
    assert_false(fx_timer_is_armed(&a));
    assert_int_equal(fx_loop_timer_arm(l, &a, at), -ENOMEM);
    assert_int_equal(fx_loop_timer_arm(l, &a, at), 0);
    assert_true(fx_timer_is_armed(&a));
    fx_loop_test_fail_timer_arms(fault_a_cb, 5);
    assert_int_equal(fx_loop_timer_arm(l, &a, at + 1), 0); /* armed: moved, cannot fail */
    fx_loop_timer_cancel(l, &a);
    assert_int_equal(fx_loop_timer_arm(l, &a, at), -ENOMEM);
    fx_loop_test_fail_timer_arms(NULL, 0);
    assert_int_equal(fx_loop_timer_arm(l, &a, at), 0);
    fx_loop_timer_cancel(l, &a);
    fx_loop_timer_cancel(l, &b);
    fx_loop_free(l);
}

typedef struct rearm {
    fx_timer t;
    fx_timer late; /* armed far ahead, then moved earlier */
    uint64_t last_turn;
    atomic_int runs;
    atomic_int same_turn;
    atomic_int late_runs;
} rearm;

static void rearm_cb(fx_loop *l, fx_timer *t, void *user)
{
    rearm *r = user;
    fx_loop_stats st;
    fx_loop_get_stats(l, &st);
    int n = atomic_fetch_add(&r->runs, 1) + 1;
    if (n > 1 && st.turns == r->last_turn)
        atomic_fetch_add(&r->same_turn, 1);
    r->last_turn = st.turns;
    if (n >= 6)
        return;
    /* Alternate a deadline in the past (must wait for the next turn, not
     * spin in this one) with a short one ahead. */
    uint64_t d = n % 2 ? fx_loop_now(l) - 1 : fx_loop_now(l) + 100 * FX_NS_PER_US;
    if (fx_loop_timer_arm(l, t, d) != 0)
        atomic_fetch_add(&r->same_turn, 1000);
}

static void late_cb(fx_loop *l, fx_timer *t, void *user)
{
    atomic_fetch_add(&((rearm *)user)->late_runs, 1);
}

static void test_timer_rearm_from_callback(void **state)
{
    fx_loop *l = NULL;
    assert_int_equal(fx_loop_new(&l, NULL), 0);
    rearm r = {0};
    fx_timer_init(&r.t, rearm_cb, &r);
    fx_timer_init(&r.late, late_cb, &r);
    uint64_t now = fx_now_ns();
    assert_int_equal(fx_loop_timer_arm(l, &r.t, now), 0);
    assert_int_equal(fx_loop_timer_arm(l, &r.late, now + 3600 * FX_NS_PER_S), 0);
    assert_int_equal(fx_loop_timer_arm(l, &r.late, now + FX_NS_PER_MS), 0);
    assert_int_equal(fx_loop_start(l), 0);
    wait_ge(&r.runs, 6);
    wait_ge(&r.late_runs, 1);
    stop_free(l);
    assert_int_equal(atomic_load(&r.runs), 6);
    assert_int_equal(atomic_load(&r.same_turn), 0);
    assert_int_equal(atomic_load(&r.late_runs), 1);
    assert_false(fx_timer_is_armed(&r.t));
}

typedef struct subms {
    fx_task arm;
    fx_timer t;
    uint64_t deadline; /* loop thread */
    atomic_int runs;
    atomic_int early;
} subms;

enum { SUBMS_ROUNDS = 5 };

static void subms_fire(fx_loop *l, fx_timer *t, void *user)
{
    subms *s = user;
    if (fx_now_ns() < s->deadline || fx_loop_now(l) < s->deadline)
        atomic_fetch_add(&s->early, 1);
    if (atomic_fetch_add(&s->runs, 1) + 1 < SUBMS_ROUNDS)
        fx_loop_post(l, &s->arm);
}

static void subms_arm(fx_loop *l, fx_task *task, void *user)
{
    subms *s = user;
    s->deadline = fx_now_ns() + 200 * FX_NS_PER_US;
    if (fx_loop_timer_arm(l, &s->t, s->deadline) != 0)
        atomic_fetch_add(&s->early, 1000);
}

static void test_submillisecond_timer_fires(void **state)
{
    fx_loop *l = new_started("fx-subms", -1);
    subms s = {0};
    fx_task_init(&s.arm, subms_arm, &s);
    fx_timer_init(&s.t, subms_fire, &s);
    assert_true(fx_loop_post(l, &s.arm));
    wait_ge(&s.runs, SUBMS_ROUNDS);
    stop_free(l);
    assert_int_equal(atomic_load(&s.early), 0);
}

/* ---- fd watches -------------------------------------------------------- */

typedef struct piped {
    fx_watch w;
    int fds[2];
    atomic_int runs;
    atomic_uint events;
    atomic_int got; /* byte read, or -1 */
} piped;

static void piped_read_cb(fx_loop *l, fx_watch *w, uint32_t events)
{
    piped *p = w->user;
    atomic_store(&p->events, events);
    unsigned char c;
    if (read(w->fd, &c, 1) == 1)
        atomic_store(&p->got, c);
    atomic_fetch_add(&p->runs, 1);
}

static void test_watch_reports_readable_fd(void **state)
{
    fx_loop *l = NULL;
    assert_int_equal(fx_loop_new(&l, NULL), 0);
    piped p = {.got = -1};
    assert_int_equal(pipe(p.fds), 0);
    assert_int_equal(fx_loop_watch(l, &p.w, p.fds[0], EPOLLIN, piped_read_cb, &p), 0);
    assert_int_equal(p.w.fd, p.fds[0]);
    assert_int_equal(fx_loop_start(l), 0);
    assert_int_equal(write(p.fds[1], "x", 1), 1);
    wait_ge(&p.runs, 1);
    fx_loop_stop(l);
    assert_true(atomic_load(&p.events) & EPOLLIN);
    assert_int_equal(atomic_load(&p.got), 'x');
    /* Watching a bad fd reports the errno. */
    fx_watch bad;
    assert_int_equal(fx_loop_watch(l, &bad, -1, EPOLLIN, piped_read_cb, &p), -EBADF);
    assert_int_equal(fx_loop_unwatch(l, &p.w), 0);
    fx_loop_free(l);
    close(p.fds[0]);
    close(p.fds[1]);
}

static void writable_cb(fx_loop *l, fx_watch *w, uint32_t events)
{
    piped *p = w->user;
    atomic_store(&p->events, events);
    atomic_fetch_add(&p->runs, 1);
    fx_loop_unwatch(l, w);
}

static void switch_to_out(fx_loop *l, fx_task *t, void *user)
{
    piped *p = user;
    p->w.cb = writable_cb;
    if (fx_loop_watch_mod(l, &p->w, EPOLLOUT) != 0)
        atomic_store(&p->got, -2);
}

static void test_watch_mod_switches_to_writable(void **state)
{
    fx_loop *l = NULL;
    assert_int_equal(fx_loop_new(&l, NULL), 0);
    piped p = {.got = -1};
    assert_int_equal(pipe(p.fds), 0);
    fx_task t;
    fx_task_init(&t, switch_to_out, &p);
    /* The write end never becomes readable; watch it for EPOLLIN first. */
    assert_int_equal(fx_loop_watch(l, &p.w, p.fds[1], EPOLLIN, piped_read_cb, &p), 0);
    assert_int_equal(fx_loop_start(l), 0);
    assert_true(fx_loop_post(l, &t));
    wait_ge(&p.runs, 1);
    stop_free(l);
    assert_int_equal(atomic_load(&p.got), -1);
    assert_int_equal(atomic_load(&p.runs), 1);
    assert_true(atomic_load(&p.events) & EPOLLOUT);
    close(p.fds[0]);
    close(p.fds[1]);
}

/* Two always-readable pipes reported in the same turn; whichever callback
 * runs first unwatches itself and frees the other's watch. */
typedef struct duo {
    fx_watch *w[2];
    int fds[2][2];
    fx_timer done_timer;
    atomic_int runs;
    atomic_int done;
    atomic_int unwatch_err;
} duo;

static void duo_done(fx_loop *l, fx_timer *t, void *user)
{
    atomic_store(&((duo *)user)->done, 1);
}

static void duo_cb(fx_loop *l, fx_watch *w, uint32_t events)
{
    duo *d = w->user;
    atomic_fetch_add(&d->runs, 1);
    int me = d->w[0] == w ? 0 : 1;
    fx_watch *other = d->w[1 - me];
    if (fx_loop_unwatch(l, w) != 0 || fx_loop_unwatch(l, other) != 0)
        atomic_fetch_add(&d->unwatch_err, 1);
    free(other); /* ASan flags any later delivery to it */
    d->w[1 - me] = NULL;
    /* Let a few more turns pass with both fds still readable. */
    if (fx_loop_timer_arm(l, &d->done_timer, fx_loop_now(l) + 5 * FX_NS_PER_MS) != 0)
        atomic_fetch_add(&d->unwatch_err, 1);
}

static void test_unwatch_inside_callback(void **state)
{
    fx_loop *l = NULL;
    assert_int_equal(fx_loop_new(&l, NULL), 0);
    duo d = {0};
    fx_timer_init(&d.done_timer, duo_done, &d);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pipe(d.fds[i]), 0);
        assert_int_equal(write(d.fds[i][1], "y", 1), 1);
        d.w[i] = calloc(1, sizeof(fx_watch));
        assert_non_null(d.w[i]);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(fx_loop_watch(l, d.w[i], d.fds[i][0], EPOLLIN, duo_cb, &d), 0);
    assert_int_equal(fx_loop_start(l), 0);
    wait_ge(&d.done, 1);
    fx_loop_stats st;
    fx_loop_get_stats(l, &st);
    stop_free(l);
    assert_int_equal(atomic_load(&d.runs), 1);
    assert_int_equal(atomic_load(&d.unwatch_err), 0);
    assert_true(st.turns >= 2);
    free(d.w[0] ? d.w[0] : d.w[1]);
    for (int i = 0; i < 2; i++) {
        close(d.fds[i][0]);
        close(d.fds[i][1]);
    }
}

/* ---- timers armed by tasks --------------------------------------------- */

typedef struct sameturn {
    fx_task task;
    fx_timer t;
    uint64_t task_turn;
    atomic_int fired;
    atomic_int turn_delta; /* turns between the task and its timer */
} sameturn;

static void sameturn_timer(fx_loop *l, fx_timer *t, void *user)
{
    sameturn *s = user;
    fx_loop_stats st;
    fx_loop_get_stats(l, &st);
    atomic_store(&s->turn_delta, (int)(st.turns - s->task_turn));
    atomic_fetch_add(&s->fired, 1);
}

static void sameturn_task(fx_loop *l, fx_task *t, void *user)
{
    sameturn *s = user;
    fx_loop_stats st;
    fx_loop_get_stats(l, &st);
    s->task_turn = st.turns;
    if (fx_loop_timer_arm(l, &s->t, fx_loop_now(l)) != 0)
        atomic_store(&s->turn_delta, -1000);
}

/* A task arming a timer for "now" (a connection's write after the data it
 * queued) sees it fire in the same turn, not after another wait. */
static void test_timer_armed_by_task_fires_in_same_turn(void **state)
{
    fx_loop *l = new_started("fx-sameturn", -1);
    sameturn s = {0};
    fx_task_init(&s.task, sameturn_task, &s);
    fx_timer_init(&s.t, sameturn_timer, &s);
    for (int i = 1; i <= 3; i++) {
        assert_true(fx_loop_post(l, &s.task));
        wait_ge(&s.fired, i);
        assert_int_equal(atomic_load(&s.turn_delta), 0);
    }
    stop_free(l);
}

typedef struct pingpong {
    fx_task task;
    fx_timer t;
    fx_watch w;
    int fds[2];
    atomic_bool stop;
    atomic_int rounds;
    atomic_int read_seen;
} pingpong;

static void pingpong_timer(fx_loop *l, fx_timer *t, void *user)
{
    pingpong *p = user;
    if (!atomic_load(&p->stop))
        fx_loop_post(l, &p->task);
}

static void pingpong_task(fx_loop *l, fx_task *t, void *user)
{
    pingpong *p = user;
    atomic_fetch_add(&p->rounds, 1);
    if (!atomic_load(&p->stop) && !fx_loop_is_stopping(l))
        (void)fx_loop_timer_arm(l, &p->t, fx_loop_now(l));
}

static void pingpong_read(fx_loop *l, fx_watch *w, uint32_t events)
{
    pingpong *p = w->user;
    char c;
    if (read(p->fds[0], &c, 1) == 1)
        atomic_fetch_add(&p->read_seen, 1);
    atomic_store(&p->stop, true);
    fx_loop_unwatch(l, w);
}

/* A task and a timer that keep re-arming each other for "now" run a few
 * passes per turn, not forever: a readable fd is still served. */
static void test_task_timer_ping_pong_leaves_room_for_io(void **state)
{
    fx_loop *l = NULL;
    assert_int_equal(fx_loop_new(&l, NULL), 0);
    pingpong p = {0};
    assert_int_equal(pipe(p.fds), 0);
    fx_task_init(&p.task, pingpong_task, &p);
    fx_timer_init(&p.t, pingpong_timer, &p);
    assert_int_equal(fx_loop_watch(l, &p.w, p.fds[0], EPOLLIN, pingpong_read, &p), 0);
    assert_int_equal(fx_loop_start(l), 0);
    assert_true(fx_loop_post(l, &p.task));
    wait_ge(&p.rounds, 100);
    assert_int_equal(write(p.fds[1], "x", 1), 1);
    wait_ge(&p.read_seen, 1);
    stop_free(l);
    assert_int_equal(atomic_load(&p.read_seen), 1);
    close(p.fds[0]);
    close(p.fds[1]);
}

/* ---- pinning ----------------------------------------------------------- */

typedef struct pin_probe {
    fx_task task;
    atomic_int done;
    atomic_int only_cpu0;
} pin_probe;

static void pin_probe_cb(fx_loop *l, fx_task *t, void *user)
{
    pin_probe *p = user;
    cpu_set_t set;
    CPU_ZERO(&set);
    int ok = pthread_getaffinity_np(pthread_self(), sizeof(set), &set) == 0 &&
             CPU_COUNT(&set) == 1 && CPU_ISSET(0, &set) && sched_getcpu() == 0;
    atomic_store(&p->only_cpu0, ok);
    atomic_store(&p->done, 1);
}

static void test_pin_to_cpu0_succeeds(void **state)
{
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    assert_int_equal(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
    if (!CPU_ISSET(0, &allowed))
        fx_test_skip("CPU 0 is not in this process's affinity set");
    fx_loop *l = new_started("fx-pin0", 0);
    assert_int_equal(fx_loop_pin_error(l), 0);
    pin_probe p = {0};
    fx_task_init(&p.task, pin_probe_cb, &p);
    assert_true(fx_loop_post(l, &p.task));
    wait_ge(&p.done, 1);
    stop_free(l);
    assert_int_equal(atomic_load(&p.only_cpu0), 1);
}

static void test_pin_to_missing_cpu_reports_error(void **state)
{
    fx_loop *l = new_started("fx-pin4096", 4096);
    assert_true(fx_loop_pin_error(l) < 0);
    counted c = {0};
    fx_task_init(&c.task, counted_cb, &c);
    assert_true(fx_loop_post(l, &c.task));
    wait_ge(&c.runs, 1); /* the loop runs unpinned */
    stop_free(l);
}

/* A condition from fx_cond_init_monotonic times out at an fx_now_ns()
 * instant: with the wall clock's condition the same timespec (seconds since
 * boot) lies decades in the past and the wait returns at once. */
static void test_monotonic_condition_times_out_at_an_fx_now_ns_instant(void **state)
{
    (void)state;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv;
    assert_int_equal(fx_cond_init_monotonic(&cv), 0);
    uint64_t t0 = fx_now_ns();
    struct timespec until = fx_timespec_at(t0 + 30 * FX_NS_PER_MS);
    pthread_mutex_lock(&mu);
    int rv = 0;
    while (rv == 0)
        rv = pthread_cond_timedwait(&cv, &mu, &until);
    pthread_mutex_unlock(&mu);
    uint64_t waited = fx_now_ns() - t0;
    assert_int_equal(rv, ETIMEDOUT);
    assert_true(waited >= 30 * FX_NS_PER_MS);
    assert_true(waited < 10 * FX_NS_PER_S);
    pthread_cond_destroy(&cv);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_monotonic_condition_times_out_at_an_fx_now_ns_instant),
    cmocka_unit_test(test_post_runs_task_on_loop_thread),
    cmocka_unit_test(test_posts_from_many_threads_all_run_once),
    cmocka_unit_test(test_per_producer_order_kept),
    cmocka_unit_test(test_repost_of_pending_task_is_coalesced),
    cmocka_unit_test(test_no_wakeup_while_busy),
    cmocka_unit_test(test_stop_runs_pending_tasks),
    cmocka_unit_test(test_stop_from_loop_thread_then_free_joins),
    cmocka_unit_test(test_run_on_calling_thread_until_stop),
    cmocka_unit_test(test_call_allocates_and_frees),
    cmocka_unit_test(test_ask_runs_on_loop_and_returns_answer),
    cmocka_unit_test(test_ask_timeout_frees_the_late_answer),
    cmocka_unit_test(test_ask_all_gathers_every_loop),
    cmocka_unit_test(test_ask_on_own_loop_runs_inline),
    cmocka_unit_test(test_ask_from_many_threads),
    cmocka_unit_test(test_barrier_waits_for_what_was_posted_before),
    cmocka_unit_test(test_timers_fire_in_deadline_order),
    cmocka_unit_test(test_timer_cancel_prevents_fire),
    cmocka_unit_test(test_timer_cancel_mid_heap_keeps_order),
    cmocka_unit_test(test_timer_rearm_from_callback),
    cmocka_unit_test(test_timer_arm_fault_hook_fails_next_arms_of_one_callback),
    cmocka_unit_test(test_submillisecond_timer_fires),
    cmocka_unit_test(test_timer_armed_by_task_fires_in_same_turn),
    cmocka_unit_test(test_task_timer_ping_pong_leaves_room_for_io),
    cmocka_unit_test(test_watch_reports_readable_fd),
    cmocka_unit_test(test_watch_mod_switches_to_writable),
    cmocka_unit_test(test_unwatch_inside_callback),
    cmocka_unit_test(test_pin_to_cpu0_succeeds),
    cmocka_unit_test(test_pin_to_missing_cpu_reports_error),
};

FX_TEST_MAIN(tests)
