/* Unit tests for fx_queue: bound, policies, park/resume, close, counters,
 * and a multi-producer run that TSan also checks. */
/* fx-test-libs: fx_base */
#include "base/buf.h"
#include "base/queue.h"
#include "felix/error.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "fx_test.h"

/* ---- helpers ------------------------------------------------------------ */

typedef struct drops {
    int n;
    uintptr_t items[64];
} drops;

static void record_drop(void *item, void *user)
{
    drops *d = user;
    assert_true(d->n < 64);
    d->items[d->n++] = (uintptr_t)item;
}

static void init_q(fx_queue *q, size_t cap, fx_queue_policy policy, drops *d)
{
    fx_queue_opts o = {.capacity = cap, .policy = policy, .on_drop = record_drop, .user = d};
    assert_int_equal(fx_queue_init(q, &o), 0);
}

static int push_val(fx_queue *q, uintptr_t v)
{
    return fx_queue_push(q, (void *)v);
}

static uintptr_t pop_val(fx_queue *q)
{
    void *item = NULL;
    assert_int_equal(fx_queue_pop(q, &item), 0);
    return (uintptr_t)item;
}

static void assert_empty(fx_queue *q)
{
    void *item;
    assert_int_equal(fx_queue_pop(q, &item), -EAGAIN);
}

typedef struct resumes {
    int n;
    int order[8];
} resumes;

typedef struct tagged_waiter {
    fx_queue_waiter w;
    resumes *log;
    int id;
} tagged_waiter;

static void log_resume(void *user)
{
    tagged_waiter *t = user;
    t->log->order[t->log->n++] = t->id;
}

static void park_tagged(fx_queue *q, tagged_waiter *t, resumes *log, int id)
{
    t->log = log;
    t->id = id;
    fx_queue_waiter_init(&t->w, log_resume, t);
    assert_int_equal(fx_queue_park(q, &t->w), 0);
}

/* ---- bound and policies ------------------------------------------------- */

static void test_block_returns_full_without_queueing(void **state)
{
    fx_queue q;
    drops d = {0};
    init_q(&q, 2, FX_QUEUE_BLOCK, &d);
    assert_int_equal(push_val(&q, 1), 0);
    assert_int_equal(push_val(&q, 2), 0);
    assert_int_equal(push_val(&q, 3), FX_EFULL);
    assert_int_equal(fx_queue_depth(&q), 2);
    assert_int_equal(d.n, 0);
    fx_queue_stats st;
    fx_queue_get_stats(&q, &st);
    assert_int_equal(st.dropped, 0);
    assert_int_equal(st.enqueued, 2);
    assert_int_equal(pop_val(&q), 1);
    assert_int_equal(pop_val(&q), 2);
    assert_empty(&q);
    fx_queue_deinit(&q);
}

static void test_bound_is_exact_for_non_power_of_two_capacity(void **state)
{
    fx_queue q;
    drops d = {0};
    init_q(&q, 5, FX_QUEUE_BLOCK, &d);
    for (uintptr_t i = 1; i <= 5; i++)
        assert_int_equal(push_val(&q, i), 0);
    assert_int_equal(push_val(&q, 6), FX_EFULL);
    assert_int_equal(fx_queue_capacity(&q), 5);
    /* Wrap around the ring a few times; the bound stays exact. */
    for (uintptr_t i = 1; i <= 20; i++) {
        assert_int_equal(pop_val(&q), i);
        assert_int_equal(push_val(&q, i + 5), 0);
        assert_int_equal(push_val(&q, 999), FX_EFULL);
    }
    fx_queue_deinit(&q);
}

static void test_init_rejects_bad_options(void **state)
{
    fx_queue q;
    fx_queue_opts o = {.capacity = 0};
    assert_int_equal(fx_queue_init(&q, &o), -EINVAL);
    o = (fx_queue_opts){.capacity = 4, .low_watermark = 4};
    assert_int_equal(fx_queue_init(&q, &o), -EINVAL);
    o = (fx_queue_opts){.capacity = FX_QUEUE_MAX_CAPACITY + 1};
    assert_int_equal(fx_queue_init(&q, &o), -EINVAL);
    o = (fx_queue_opts){.capacity = 4, .policy = (fx_queue_policy)7};
    assert_int_equal(fx_queue_init(&q, &o), -EINVAL);
}

static void test_drop_new_sheds_new_item_and_counts(void **state)
{
    fx_queue q;
    drops d = {0};
    init_q(&q, 2, FX_QUEUE_DROP_NEW, &d);
    assert_int_equal(push_val(&q, 1), 0);
    assert_int_equal(push_val(&q, 2), 0);
    assert_int_equal(push_val(&q, 3), FX_EFULL);
    assert_int_equal(push_val(&q, 4), FX_EFULL);
    assert_int_equal(d.n, 2);
    assert_int_equal(d.items[0], 3);
    assert_int_equal(d.items[1], 4);
    fx_queue_stats st;
    fx_queue_get_stats(&q, &st);
    assert_int_equal(st.dropped, 2);
    assert_int_equal(st.enqueued, 2);
    assert_int_equal(pop_val(&q), 1);
    assert_int_equal(pop_val(&q), 2);
    assert_empty(&q);
    fx_queue_deinit(&q);
}

static void test_drop_old_evicts_oldest(void **state)
{
    fx_queue q;
    drops d = {0};
    init_q(&q, 3, FX_QUEUE_DROP_OLD, &d);
    for (uintptr_t i = 1; i <= 5; i++)
        assert_int_equal(push_val(&q, i), 0);
    assert_int_equal(pop_val(&q), 3);
    assert_int_equal(pop_val(&q), 4);
    assert_int_equal(pop_val(&q), 5);
    assert_empty(&q);
    assert_int_equal(d.n, 2);
    assert_int_equal(d.items[0], 1);
    assert_int_equal(d.items[1], 2);
    fx_queue_stats st;
    fx_queue_get_stats(&q, &st);
    assert_int_equal(st.dropped, 2);
    fx_queue_deinit(&q);
}

static atomic_int buf_frees;

static void count_buf_free(void *data, size_t len, void *user)
{
    (void)len;
    (void)user;
    atomic_fetch_add(&buf_frees, 1);
    free(data);
}

static fx_buf *counted_buf(void)
{
    void *mem = malloc(16);
    assert_non_null(mem);
    fx_buf *b = NULL;
    assert_int_equal(fx_buf_wrap(&b, mem, 16, count_buf_free, NULL), 0);
    return b;
}

static void unref_item(void *item, void *user)
{
    (void)user;
    fx_buf_unref(item);
}

static void test_drop_old_releases_evicted_item(void **state)
{
    atomic_store(&buf_frees, 0);
    fx_queue q;
    fx_queue_opts o = {.capacity = 2, .policy = FX_QUEUE_DROP_OLD, .on_drop = unref_item};
    assert_int_equal(fx_queue_init(&q, &o), 0);
    fx_buf *kept[2];
    for (int i = 0; i < 5; i++) {
        fx_buf *b = counted_buf();
        if (i >= 3)
            kept[i - 3] = b;
        assert_int_equal(fx_queue_push(&q, b), 0);
    }
    assert_int_equal(atomic_load(&buf_frees), 3);
    for (int i = 0; i < 2; i++) {
        void *item;
        assert_int_equal(fx_queue_pop(&q, &item), 0);
        assert_ptr_equal(item, kept[i]);
        fx_buf_unref(item);
    }
    assert_int_equal(atomic_load(&buf_frees), 5);
    fx_queue_deinit(&q);
}

static void test_deinit_releases_queued_items(void **state)
{
    atomic_store(&buf_frees, 0);
    fx_queue q;
    fx_queue_opts o = {.capacity = 8, .policy = FX_QUEUE_BLOCK, .on_drop = unref_item};
    assert_int_equal(fx_queue_init(&q, &o), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(fx_queue_push(&q, counted_buf()), 0);
    assert_int_equal(atomic_load(&buf_frees), 0);
    fx_queue_deinit(&q);
    assert_int_equal(atomic_load(&buf_frees), 3);
}

/* ---- parking ------------------------------------------------------------ */

static void fill(fx_queue *q, size_t n)
{
    for (uintptr_t i = 1; i <= n; i++)
        assert_int_equal(push_val(q, i), 0);
    assert_int_equal(push_val(q, n + 1), FX_EFULL);
}

static void test_parked_producer_resumes_at_low_watermark(void **state)
{
    fx_queue q;
    drops d = {0};
    init_q(&q, 8, FX_QUEUE_BLOCK, &d); /* low watermark defaults to 4 */
    fill(&q, 8);
    resumes log = {0};
    tagged_waiter t;
    park_tagged(&q, &t, &log, 1);
    for (int i = 0; i < 3; i++) {
        pop_val(&q);
        assert_int_equal(log.n, 0); /* depth 7, 6, 5: still above */
    }
    pop_val(&q);
    assert_int_equal(fx_queue_depth(&q), 4);
    assert_int_equal(log.n, 1);
    pop_val(&q);
    assert_int_equal(log.n, 1); /* resumed once, not per freed slot */
    fx_queue_stats st;
    fx_queue_get_stats(&q, &st);
    assert_int_equal(st.waiters, 0);
    assert_int_equal(st.parks, 1);
    fx_queue_deinit(&q);
}

static void test_custom_low_watermark_is_used(void **state)
{
    fx_queue q;
    fx_queue_opts o = {.capacity = 8, .policy = FX_QUEUE_BLOCK, .low_watermark = 6};
    assert_int_equal(fx_queue_init(&q, &o), 0);
    fill(&q, 8);
    resumes log = {0};
    tagged_waiter t;
    park_tagged(&q, &t, &log, 1);
    pop_val(&q);
    assert_int_equal(log.n, 0);
    pop_val(&q);
    assert_int_equal(log.n, 1);
    fx_queue_deinit(&q);
}

static void test_parked_producers_resume_in_order(void **state)
{
    fx_queue q;
    drops d = {0};
    init_q(&q, 4, FX_QUEUE_BLOCK, &d);
    fill(&q, 4);
    resumes log = {0};
    tagged_waiter t[3];
    park_tagged(&q, &t[0], &log, 10);
    park_tagged(&q, &t[1], &log, 20);
    park_tagged(&q, &t[2], &log, 30);
    pop_val(&q);
    assert_int_equal(log.n, 0);
    pop_val(&q);
    assert_int_equal(log.n, 3);
    assert_int_equal(log.order[0], 10);
    assert_int_equal(log.order[1], 20);
    assert_int_equal(log.order[2], 30);
    fx_queue_deinit(&q);
}

static void test_park_rechecks_to_avoid_lost_wakeup(void **state)
{
    fx_queue q;
    drops d = {0};
    init_q(&q, 4, FX_QUEUE_BLOCK, &d);
    fill(&q, 4);
    /* The consumer drains to the watermark after the producer saw "full" but
     * before it parked: the pops find no waiter to resume. */
    pop_val(&q);
    pop_val(&q);
    assert_int_equal(fx_queue_depth(&q), 2);
    resumes log = {0};
    tagged_waiter t;
    park_tagged(&q, &t, &log, 1);
    /* The re-check after registering resumed it at once. */
    assert_int_equal(log.n, 1);
    fx_queue_stats st;
    fx_queue_get_stats(&q, &st);
    assert_int_equal(st.waiters, 0);
    assert_int_equal(push_val(&q, 5), 0);
    fx_queue_deinit(&q);
}

static void test_unpark_cancels_waiter(void **state)
{
    fx_queue q;
    drops d = {0};
    init_q(&q, 4, FX_QUEUE_BLOCK, &d);
    fill(&q, 4);
    resumes log = {0};
    tagged_waiter t[2];
    park_tagged(&q, &t[0], &log, 1);
    park_tagged(&q, &t[1], &log, 2);
    assert_true(fx_queue_unpark(&q, &t[0].w));
    assert_false(fx_queue_unpark(&q, &t[0].w));
    for (int i = 0; i < 4; i++)
        pop_val(&q);
    assert_int_equal(log.n, 1);
    assert_int_equal(log.order[0], 2);
    assert_false(fx_queue_unpark(&q, &t[1].w)); /* already resumed */
    fx_queue_deinit(&q);
}

static void test_close_fails_pushes_and_resumes_waiters(void **state)
{
    fx_queue q;
    drops d = {0};
    init_q(&q, 2, FX_QUEUE_BLOCK, &d);
    fill(&q, 2);
    resumes log = {0};
    tagged_waiter t[2];
    park_tagged(&q, &t[0], &log, 1);
    park_tagged(&q, &t[1], &log, 2);
    fx_queue_close(&q);
    assert_true(fx_queue_is_closed(&q));
    assert_int_equal(log.n, 2);
    assert_int_equal(log.order[0], 1);
    assert_int_equal(log.order[1], 2);
    assert_int_equal(push_val(&q, 9), FX_ECLOSED);
    assert_int_equal(fx_queue_park(&q, &t[0].w), FX_ECLOSED);
    /* What was queued before the close can still be taken. */
    assert_int_equal(pop_val(&q), 1);
    assert_int_equal(pop_val(&q), 2);
    assert_empty(&q);
    assert_int_equal(d.n, 0);
    fx_queue_close(&q);
    fx_queue_deinit(&q);
}

/* ---- counters ----------------------------------------------------------- */

static void test_counters_and_depth_track_traffic(void **state)
{
    fx_queue q;
    drops d = {0};
    init_q(&q, 4, FX_QUEUE_DROP_OLD, &d);
    for (uintptr_t i = 1; i <= 6; i++)
        assert_int_equal(push_val(&q, i), 0);
    pop_val(&q);
    fx_queue_stats st;
    fx_queue_get_stats(&q, &st);
    assert_int_equal(st.enqueued, 6);
    assert_int_equal(st.dropped, 2);
    assert_int_equal(st.dequeued, 1);
    assert_int_equal(st.depth, 3);
    assert_int_equal(fx_queue_depth(&q), 3);
    assert_int_equal(st.capacity, 4);
    assert_int_equal(st.enqueued - st.dropped - st.dequeued, st.depth);
    assert_int_equal(d.n, 2);
    fx_queue_deinit(&q);
    assert_int_equal(d.n, 5); /* deinit released the 3 left, without counting them */
}

static void test_policy_parse_accepts_config_names_and_rejects_others(void **state)
{
    fx_queue_policy p = FX_QUEUE_DROP_OLD;
    assert_int_equal(fx_queue_policy_parse("block", &p), 0);
    assert_int_equal(p, FX_QUEUE_BLOCK);
    assert_int_equal(fx_queue_policy_parse("drop_new", &p), 0);
    assert_int_equal(p, FX_QUEUE_DROP_NEW);
    assert_int_equal(fx_queue_policy_parse("drop_old", &p), 0);
    assert_int_equal(p, FX_QUEUE_DROP_OLD);
    const char *bad[] = {"", "Block", "dropnew", "drop-new", "drop_new ", "drop", NULL};
    for (int i = 0; bad[i] != NULL; i++) {
        p = FX_QUEUE_BLOCK;
        assert_int_equal(fx_queue_policy_parse(bad[i], &p), FX_ECONFIG);
        assert_int_equal(p, FX_QUEUE_BLOCK);
    }
    assert_int_equal(fx_queue_policy_parse(NULL, &p), FX_ECONFIG);
    for (int i = FX_QUEUE_BLOCK; i <= FX_QUEUE_DROP_OLD; i++) {
        assert_int_equal(fx_queue_policy_parse(fx_queue_policy_name(i), &p), 0);
        assert_int_equal(p, i);
    }
    assert_string_equal(fx_queue_policy_name((fx_queue_policy)9), "?");
}

/* ---- growable ring ------------------------------------------------------ */

static void init_growable(fx_queue *q, size_t cap, size_t initial, fx_queue_policy policy, drops *d)
{
    fx_queue_opts o = {.capacity = cap,
                       .policy = policy,
                       .on_drop = record_drop,
                       .user = d,
                       .initial_cells = initial};
    assert_int_equal(fx_queue_init(q, &o), 0);
}

static void test_growable_ring_starts_small_and_doubles_to_the_bound(void **state)
{
    fx_queue q;
    drops d = {0};
    init_growable(&q, 100, 3, FX_QUEUE_BLOCK, &d);
    assert_int_equal(fx_queue_ring_cells(&q), 4); /* 3 rounded up */
    for (uintptr_t i = 0; i < 100; i++) {
        assert_int_equal(push_val(&q, i), 0);
        assert_true(fx_queue_ring_cells(&q) >= i + 1);
    }
    assert_int_equal(fx_queue_ring_cells(&q), 128);
    assert_int_equal(push_val(&q, 100), FX_EFULL); /* the bound, not the ring */
    for (uintptr_t i = 0; i < 100; i++) {
        void *item;
        assert_int_equal(fx_queue_pop(&q, &item), 0);
        assert_int_equal((uintptr_t)item, i);
    }
    void *item;
    assert_int_equal(fx_queue_pop(&q, &item), -EAGAIN);
    assert_int_equal(fx_queue_ring_cells(&q), 128); /* keeps its high-water size */
    assert_int_equal(d.n, 0);
    fx_queue_deinit(&q);
}

/* Growth while the items wrap around the end of the array keeps their order. */
static void test_growable_ring_keeps_order_when_growing_wrapped(void **state)
{
    fx_queue q;
    drops d = {0};
    init_growable(&q, 64, 4, FX_QUEUE_BLOCK, &d);
    uintptr_t next_in = 0, next_out = 0;
    for (int round = 0; round < 50; round++) {
        int pushes = 1 + round % 7, pops = round % 5;
        for (int i = 0; i < pushes && fx_queue_depth(&q) < 64; i++)
            assert_int_equal(push_val(&q, next_in++), 0);
        for (int i = 0; i < pops; i++) {
            void *item;
            if (fx_queue_pop(&q, &item) != 0)
                break;
            assert_int_equal((uintptr_t)item, next_out++);
        }
    }
    void *item;
    while (fx_queue_pop(&q, &item) == 0)
        assert_int_equal((uintptr_t)item, next_out++);
    assert_int_equal(next_out, next_in);
    assert_true(fx_queue_ring_cells(&q) > 4);
    fx_queue_deinit(&q);
}

static void test_growable_ring_applies_drop_policies(void **state)
{
    fx_queue q;
    drops d = {0};
    init_growable(&q, 5, 2, FX_QUEUE_DROP_OLD, &d);
    for (uintptr_t i = 0; i < 8; i++)
        assert_int_equal(push_val(&q, i), 0);
    assert_int_equal(d.n, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(d.items[i], (uintptr_t)i);
    for (uintptr_t i = 3; i < 8; i++) {
        void *item;
        assert_int_equal(fx_queue_pop(&q, &item), 0);
        assert_int_equal((uintptr_t)item, i);
    }
    fx_queue_deinit(&q);

    drops d2 = {0};
    init_growable(&q, 5, 2, FX_QUEUE_DROP_NEW, &d2);
    for (uintptr_t i = 0; i < 8; i++)
        assert_int_equal(push_val(&q, i), i < 5 ? 0 : FX_EFULL);
    assert_int_equal(d2.n, 3);
    assert_int_equal(d2.items[0], 5);
    fx_queue_stats st;
    fx_queue_get_stats(&q, &st);
    assert_int_equal(st.dropped, 3);
    assert_int_equal(st.depth, 5);
    fx_queue_deinit(&q); /* releases the 5 queued items through on_drop */
    assert_int_equal(d2.n, 8);
}

static void test_growable_ring_parks_and_resumes_like_fixed(void **state)
{
    fx_queue q;
    drops d = {0};
    init_growable(&q, 8, 2, FX_QUEUE_BLOCK, &d);
    for (uintptr_t i = 0; i < 8; i++)
        assert_int_equal(push_val(&q, i), 0);
    assert_int_equal(push_val(&q, 8), FX_EFULL);
    resumes log = {0};
    tagged_waiter t;
    park_tagged(&q, &t, &log, 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pop_val(&q), (uintptr_t)i);
    assert_int_equal(log.n, 0); /* depth 5 > low watermark 4 */
    assert_int_equal(pop_val(&q), 3);
    assert_int_equal(log.n, 1);
    fx_queue_deinit(&q);
}

/* ---- threads ------------------------------------------------------------ */

enum { PRODUCERS = 4, PER_PRODUCER = 50000 };

typedef struct producer {
    fx_queue *q;
    uintptr_t id;
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool resumed;
    fx_queue_waiter w;
    bool block; /* park on FX_EFULL (BLOCK) or move on (the item was shed) */
    atomic_int *left;
    int failures;
} producer;

static void producer_resume(void *user)
{
    producer *p = user;
    pthread_mutex_lock(&p->mu);
    p->resumed = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Parks and sleeps until resumed: what a loop does with a task, done here
 * with a condition variable. Returns false if the park itself failed. */
static bool park_and_wait(producer *p)
{
    pthread_mutex_lock(&p->mu);
    p->resumed = false;
    pthread_mutex_unlock(&p->mu);
    if (fx_queue_park(p->q, &p->w) != 0)
        return false;
    pthread_mutex_lock(&p->mu);
    while (!p->resumed)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return true;
}

/* Items carry (producer id << 24 | sequence + 1). */
static void *produce(void *arg)
{
    producer *p = arg;
    for (uintptr_t i = 0; i < (uintptr_t)p->n; i++) {
        void *item = (void *)(p->id << 24 | (i + 1));
        int rv;
        while ((rv = fx_queue_push(p->q, item)) == FX_EFULL) {
            if (!p->block)
                break;
            if (!park_and_wait(p)) {
                p->failures++;
                return NULL;
            }
        }
        if (rv != 0 && rv != FX_EFULL)
            p->failures++;
    }
    atomic_fetch_sub(p->left, 1);
    return NULL;
}

typedef struct consumer {
    fx_queue *q;
    atomic_int *producers_left;
    uintptr_t next[PRODUCERS]; /* next sequence expected, as a lower bound */
    int got[PRODUCERS];
    int total;
    int errors;
} consumer;

static void consume_one(consumer *c, uintptr_t v)
{
    uintptr_t id = v >> 24, seq = v & 0xffffff;
    if (id >= PRODUCERS || seq < c->next[id]) {
        c->errors++; /* duplicate, reordered or garbage */
        return;
    }
    c->next[id] = seq + 1;
    c->got[id]++;
    c->total++;
}

static void *consume(void *arg)
{
    consumer *c = arg;
    for (;;) {
        void *item;
        if (fx_queue_pop(c->q, &item) == 0) {
            consume_one(c, (uintptr_t)item);
            continue;
        }
        /* Empty: done once every producer has finished and nothing is left. */
        if (atomic_load(c->producers_left) == 0 && fx_queue_depth(c->q) == 0)
            return NULL;
        sched_yield();
    }
}

typedef struct run {
    fx_queue q;
    producer p[PRODUCERS];
    consumer c;
    atomic_int left;
} run;

static void run_threads(run *r, int per_producer, bool block)
{
    pthread_t tp[PRODUCERS], tc;
    atomic_init(&r->left, PRODUCERS);
    r->c = (consumer){.q = &r->q, .producers_left = &r->left};
    for (int i = 0; i < PRODUCERS; i++) {
        producer *p = &r->p[i];
        *p = (producer){
            .q = &r->q, .id = (uintptr_t)i, .n = per_producer, .block = block, .left = &r->left};
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->cv, NULL);
        fx_queue_waiter_init(&p->w, producer_resume, p);
    }
    assert_int_equal(pthread_create(&tc, NULL, consume, &r->c), 0);
    for (int i = 0; i < PRODUCERS; i++)
        assert_int_equal(pthread_create(&tp[i], NULL, produce, &r->p[i]), 0);
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(tp[i], NULL);
    pthread_join(tc, NULL);
    for (int i = 0; i < PRODUCERS; i++) {
        assert_int_equal(r->p[i].failures, 0);
        pthread_mutex_destroy(&r->p[i].mu);
        pthread_cond_destroy(&r->p[i].cv);
    }
    assert_int_equal(r->c.errors, 0);
}

/* Four producers into one consumer under BLOCK: each producer's items all
 * arrive, in order, none dropped, no waiter left. |initial_cells| 0 is the
 * lock-free ring, else the growable one (which never outgrows the bound). */
static void many_producers_one_consumer(size_t initial_cells, int per_producer)
{
    static run r;
    fx_queue_opts o = {.capacity = 64, .policy = FX_QUEUE_BLOCK, .initial_cells = initial_cells};
    assert_int_equal(fx_queue_init(&r.q, &o), 0);
    run_threads(&r, per_producer, true);
    for (int i = 0; i < PRODUCERS; i++)
        assert_int_equal(r.c.got[i], per_producer);
    fx_queue_stats st;
    fx_queue_get_stats(&r.q, &st);
    assert_int_equal(st.enqueued, (uint64_t)PRODUCERS * (uint64_t)per_producer);
    assert_int_equal(st.dequeued, st.enqueued);
    assert_int_equal(st.dropped, 0);
    assert_int_equal(st.waiters, 0);
    assert_true(fx_queue_ring_cells(&r.q) <= 64);
    fx_queue_deinit(&r.q);
}

static void test_many_producers_one_consumer(void **state)
{
    many_producers_one_consumer(0, PER_PRODUCER);
}

static void test_growable_ring_many_producers_one_consumer(void **state)
{
    many_producers_one_consumer(2, PER_PRODUCER / 5);
}

static atomic_int concurrent_drops;

static void count_drop(void *item, void *user)
{
    (void)item;
    (void)user;
    atomic_fetch_add(&concurrent_drops, 1);
}

/* Producers evict while the consumer pops: every item is either received
 * once, in order per producer, or dropped once. |initial_cells| 0 is the
 * lock-free ring, else the growable one. */
static void drop_old_under_concurrency(size_t initial_cells)
{
    static run r;
    atomic_store(&concurrent_drops, 0);
    fx_queue_opts o = {.capacity = 8,
                       .policy = FX_QUEUE_DROP_OLD,
                       .on_drop = count_drop,
                       .initial_cells = initial_cells};
    assert_int_equal(fx_queue_init(&r.q, &o), 0);
    run_threads(&r, 10000, false);
    fx_queue_stats st;
    fx_queue_get_stats(&r.q, &st);
    assert_int_equal(st.enqueued, (uint64_t)PRODUCERS * 10000);
    assert_int_equal((uint64_t)r.c.total + atomic_load(&concurrent_drops), st.enqueued);
    assert_int_equal(st.dropped, (uint64_t)atomic_load(&concurrent_drops));
    fx_queue_deinit(&r.q);
}

static void test_drop_old_under_concurrency_accounts_every_item(void **state)
{
    drop_old_under_concurrency(0);
}

static void test_growable_drop_old_under_concurrency_accounts_every_item(void **state)
{
    drop_old_under_concurrency(1);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_block_returns_full_without_queueing),
    cmocka_unit_test(test_bound_is_exact_for_non_power_of_two_capacity),
    cmocka_unit_test(test_init_rejects_bad_options),
    cmocka_unit_test(test_drop_new_sheds_new_item_and_counts),
    cmocka_unit_test(test_drop_old_evicts_oldest),
    cmocka_unit_test(test_drop_old_releases_evicted_item),
    cmocka_unit_test(test_deinit_releases_queued_items),
    cmocka_unit_test(test_parked_producer_resumes_at_low_watermark),
    cmocka_unit_test(test_custom_low_watermark_is_used),
    cmocka_unit_test(test_parked_producers_resume_in_order),
    cmocka_unit_test(test_park_rechecks_to_avoid_lost_wakeup),
    cmocka_unit_test(test_unpark_cancels_waiter),
    cmocka_unit_test(test_close_fails_pushes_and_resumes_waiters),
    cmocka_unit_test(test_counters_and_depth_track_traffic),
    cmocka_unit_test(test_policy_parse_accepts_config_names_and_rejects_others),
    cmocka_unit_test(test_growable_ring_starts_small_and_doubles_to_the_bound),
    cmocka_unit_test(test_growable_ring_keeps_order_when_growing_wrapped),
    cmocka_unit_test(test_growable_ring_applies_drop_policies),
    cmocka_unit_test(test_growable_ring_parks_and_resumes_like_fixed),
    cmocka_unit_test(test_many_producers_one_consumer),
    cmocka_unit_test(test_growable_ring_many_producers_one_consumer),
    cmocka_unit_test(test_drop_old_under_concurrency_accounts_every_item),
    cmocka_unit_test(test_growable_drop_old_under_concurrency_accounts_every_item),
};
FX_TEST_MAIN(tests)
