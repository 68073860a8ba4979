/* Integration tests of libfelix's cache requests (src/client/cache.c)
 * against a real broker in this process: a put/get round trip, a miss, a
 * buffer too small, the allocating get, TTL expiry, 1,000 async gets in
 * flight on one client answered with their own values, errors that fail
 * one request and not the client (a value over cache_max_value_bytes, a
 * forbidden cache, whose stream the broker ends), names refused locally,
 * a lost connection, and concurrent put/get from 8 threads (also under
 * TSan). Client internals (client/client.h) are read for the counters. */
/* fx-test-libs: fx_broker fx_client fx_quic fx_wire fx_base */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/test_hooks.h"
#include "client/client.h"
#include "integ/fixture.h"

typedef fix_env E;

static E *e_new(void)
{
    E *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    fix_env_init(e, "cc");
    e->bo.workers = 2;
    return e;
}

static void e_free(E *e)
{
    fix_env_deinit(e);
    free(e);
}

static fx_client *e_client(E *e)
{
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, "t1", "any-token");
    o.reconnect_initial_ms = 50;
    return fix_connect(&o);
}

/* A broker whose endpoint runs apart from the workers (a stalled worker
 * does not stall the connections). */
static E *started_io(void)
{
    E *e = e_new();
    e->bo.io_threads = 1;
    fix_env_start(e);
    return e;
}

static E *started(void)
{
    E *e = e_new();
    fix_env_start(e);
    return e;
}

static void put_ok(fx_client *c, const char *cache, const char *key, const char *v, uint64_t ttl)
{
    int rv = fx_cache_put(c, NS, cache, key, v, strlen(v), ttl);
    if (rv != 0) {
        char msg[256];
        fx_client_last_error(NULL, msg, sizeof(msg));
        fail_msg("put %s/%s: %s (%s)", cache, key, fx_errname(rv), msg);
    }
}

static void get_eq(fx_client *c, const char *cache, const char *key, const char *want)
{
    char buf[256];
    size_t n = 99;
    int rv = fx_cache_get(c, NS, cache, key, buf, sizeof(buf), &n);
    if (rv != 0) {
        char msg[256];
        fx_client_last_error(NULL, msg, sizeof(msg));
        fail_msg("get %s/%s: %s (%s)", cache, key, fx_errname(rv), msg);
    }
    assert_int_equal(n, strlen(want));
    assert_memory_equal(buf, want, n);
}

static void test_put_then_get_round_trip_and_a_miss(void **state)
{
    (void)state;
    E *e = started();
    fx_client *c = e_client(e);
    put_ok(c, "primary", "k1", "hello", 0);
    get_eq(c, "primary", "k1", "hello");
    put_ok(c, "primary", "k1", "again", 0); /* last write wins */
    get_eq(c, "primary", "k1", "again");
    put_ok(c, "primary", "empty", "", 0); /* an empty value is a value, not a miss */
    get_eq(c, "primary", "empty", "");
    char buf[8];
    size_t n = 7;
    assert_int_equal(fx_cache_get(c, NS, "primary", "nope", buf, sizeof(buf), &n), FX_ENOTFOUND);
    assert_int_equal(n, 0);
    /* Another cache, another namespace: other scopes. */
    assert_int_equal(fx_cache_get(c, NS, "other", "k1", buf, sizeof(buf), &n), FX_ENOTFOUND);
    assert_int_equal(fx_cache_get(c, "ns2", "primary", "k1", buf, sizeof(buf), &n), FX_ENOTFOUND);
    fix_close(c);
    e_free(e);
}

static void test_a_small_buffer_is_too_big_with_the_length_and_get_alloc_copies(void **state)
{
    (void)state;
    E *e = started();
    fx_client *c = e_client(e);
    uint8_t val[1000];
    for (size_t i = 0; i < sizeof(val); i++)
        val[i] = (uint8_t)(i * 7); /* binary, with NULs */
    assert_int_equal(fx_cache_put(c, NS, "bin", "k", val, sizeof(val), 0), 0);
    uint8_t small[10];
    memset(small, 0xAB, sizeof(small));
    size_t n = 0;
    assert_int_equal(fx_cache_get(c, NS, "bin", "k", small, sizeof(small), &n), FX_ETOOBIG);
    assert_int_equal(n, sizeof(val));
    for (size_t i = 0; i < sizeof(small); i++)
        assert_int_equal(small[i], 0xAB); /* nothing copied */
    assert_int_equal(fx_cache_get(c, NS, "bin", "k", NULL, 0, &n), FX_ETOOBIG);
    assert_int_equal(n, sizeof(val));
    void *v = NULL;
    assert_int_equal(fx_cache_get_alloc(c, NS, "bin", "k", &v, &n), 0);
    assert_non_null(v);
    assert_int_equal(n, sizeof(val));
    assert_memory_equal(v, val, n);
    free(v);
    v = (void *)1;
    assert_int_equal(fx_cache_get_alloc(c, NS, "bin", "missing", &v, &n), FX_ENOTFOUND);
    assert_null(v);
    fix_close(c);
    e_free(e);
}

static void test_an_entry_with_a_ttl_is_gone_after_it(void **state)
{
    (void)state;
    E *e = started();
    fx_client *c = e_client(e);
    put_ok(c, "ttl", "long", "w", 60000);
    put_ok(c, "ttl", "none", "x", 0);
    uint64_t t0 = fx_now_ns();
    put_ok(c, "ttl", "short", "v", 50);
    char buf[8];
    size_t n;
    int rv = fx_cache_get(c, NS, "ttl", "short", buf, sizeof(buf), &n);
    /* A hit, unless a slow run (TSan) took the 50 ms already. */
    if (rv != 0)
        assert_true(rv == FX_ENOTFOUND && fx_now_ns() - t0 >= 50 * FX_NS_PER_MS);
    sleep_ms(200);
    assert_int_equal(fx_cache_get(c, NS, "ttl", "short", buf, sizeof(buf), &n), FX_ENOTFOUND);
    get_eq(c, "ttl", "long", "w");
    get_eq(c, "ttl", "none", "x");
    fix_close(c);
    e_free(e);
}

/* ---- many in flight ------------------------------------------------------------- */

#define MANY 1000

typedef struct many {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, ok, wrong;
    int rv_first_bad;
} many;

typedef struct one {
    many *m;
    int i;
} one;

static void count(many *m, bool good, int rv)
{
    pthread_mutex_lock(&m->mu);
    m->done++;
    if (good) {
        m->ok++;
    } else {
        m->wrong++;
        if (m->rv_first_bad == 0)
            m->rv_first_bad = rv != 0 ? rv : -1;
    }
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

static void many_cb(void *user, int rv, const void *value, size_t len)
{
    one *o = user;
    char want[32];
    snprintf(want, sizeof(want), "value-%d", o->i);
    count(o->m, rv == 0 && len == strlen(want) && memcmp(value, want, len) == 0, rv);
}

static void put_cb(void *user, int rv, const void *value, size_t len)
{
    one *o = user;
    count(o->m, rv == 0 && value == NULL && len == 0, rv);
}

static void wait_many(many *m, int n)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    pthread_mutex_lock(&m->mu);
    while (m->done < n && fx_now_ns() < deadline) {
        pthread_mutex_unlock(&m->mu);
        sleep_ms(5);
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
}

static void test_a_thousand_async_gets_in_flight_get_their_own_values(void **state)
{
    (void)state;
    E *e = started();
    fx_client *c = e_client(e);
    one *ones = calloc(MANY, sizeof(*ones));
    assert_non_null(ones);
    many pm = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    /* The puts async too: their callbacks only count (rv checked). */
    for (int i = 0; i < MANY; i++) {
        char key[32], val[32];
        snprintf(key, sizeof(key), "key-%d", i);
        snprintf(val, sizeof(val), "value-%d", i);
        ones[i] = (one){.m = &pm, .i = i};
        assert_int_equal(
            fx_cache_put_async(c, NS, "many", key, val, strlen(val), 0, put_cb, &ones[i]), 0);
    }
    wait_many(&pm, MANY);
    assert_int_equal(pm.done, MANY);
    assert_int_equal(pm.wrong, 0);
    many gm = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    for (int i = 0; i < MANY; i++) {
        char key[32];
        snprintf(key, sizeof(key), "key-%d", i);
        ones[i] = (one){.m = &gm, .i = i};
        assert_int_equal(fx_cache_get_async(c, NS, "many", key, many_cb, &ones[i]), 0);
    }
    wait_many(&gm, MANY);
    if (gm.wrong != 0)
        fail_msg("%d of %d gets wrong (first: %s)", gm.wrong, MANY, fx_errname(gm.rv_first_bad));
    assert_int_equal(gm.ok, MANY);
    fxc_cache_counters k;
    fxc_cache_get_counters(c, &k);
    assert_int_equal(k.requests, 2 * MANY);
    assert_int_equal(k.answered, 2 * MANY);
    assert_int_equal(k.errors, 0);
    assert_true(k.streams_opened >= 1 && k.streams_opened <= 4); /* one pool, no reopen */
    fix_close(c);
    free(ones);
    e_free(e);
}

/* ---- errors that fail one request ------------------------------------------------ */

static void test_a_refused_value_fails_that_request_only(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.cache_max_value_bytes = 16;
    fix_env_start(e);
    fx_client *c = e_client(e);
    put_ok(c, "lim", "a", "small", 0);
    char big[64];
    memset(big, 'x', sizeof(big));
    assert_int_equal(fx_cache_put(c, NS, "lim", "b", big, sizeof(big), 0), FX_EREMOTE);
    char msg[256];
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "value too large"));
    /* The same client, the same streams: the next requests are served. */
    get_eq(c, "lim", "a", "small");
    put_ok(c, "lim", "c", "fine", 0);
    get_eq(c, "lim", "c", "fine");
    fxc_cache_counters k;
    fxc_cache_get_counters(c, &k);
    assert_int_equal(k.errors, 1);
    assert_int_equal(k.streams_ended, 0);
    fix_close(c);
    e_free(e);
}

/* auth: any token, tenant t1; cache "secret" refused. */
static int a_verify(void *user, const char *tenant, const char *token, size_t len, int64_t now_s,
                    void **pctx, char *why, size_t whylen)
{
    (void)user, (void)tenant, (void)token, (void)len, (void)now_s, (void)why, (void)whylen;
    *pctx = (void *)1;
    return 0;
}

static bool a_allows(void *user, const void *ctx, fx_broker_auth_action action, const char *tenant,
                     const char *ns, const char *name)
{
    (void)user, (void)ctx, (void)tenant, (void)ns;
    if (action == FX_BROKER_AUTH_CACHE_READ || action == FX_BROKER_AUTH_CACHE_WRITE)
        return strcmp(name, "secret") != 0;
    return true;
}

static void a_release(void *user, void *ctx)
{
    (void)user, (void)ctx;
}

static void test_a_forbidden_cache_fails_that_request_and_the_client_goes_on(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.auth = (fx_broker_auth){.verify = a_verify, .allows = a_allows, .release = a_release};
    fix_env_start(e);
    fx_client *c = e_client(e);
    put_ok(c, "open", "k", "v", 0);
    char buf[8];
    size_t n;
    for (int round = 0; round < 3; round++) {
        assert_int_equal(fx_cache_put(c, NS, "secret", "k", "v", 1, 0), FX_EFORBIDDEN);
        assert_int_equal(fx_cache_get(c, NS, "secret", "k", buf, sizeof(buf), &n), FX_EFORBIDDEN);
        /* The broker ended that stream; the next request goes on another. */
        get_eq(c, "open", "k", "v");
    }
    fxc_cache_counters k;
    fxc_cache_get_counters(c, &k);
    assert_int_equal(k.errors, 6);
    assert_true(k.streams_ended >= 1);
    fix_close(c);
    e_free(e);
}

/* Once a cache stream's auth_ok advertised FX_FEATURE_HI_CACHE_BINARY, get,
 * put and delete travel as binary frames (the first requests, sent before
 * it, as JSON); conditional requests stay JSON. */
static void test_get_put_delete_go_binary_once_the_broker_offers_it(void **state)
{
    (void)state;
    E *e = started();
    fx_client *c = e_client(e);
    put_ok(c, "primary", "k0", "first", 0); /* learns the broker's features */
    fxc_cache_counters k0;
    fxc_cache_get_counters(c, &k0);
    uint8_t val[200];
    for (size_t i = 0; i < sizeof(val); i++)
        val[i] = (uint8_t)(i * 11); /* with NULs */
    assert_int_equal(fx_cache_put(c, NS, "primary", "b", val, sizeof(val), 60000), 0);
    uint8_t buf[256];
    size_t n = 0;
    assert_int_equal(fx_cache_get(c, NS, "primary", "b", buf, sizeof(buf), &n), 0);
    assert_int_equal(n, sizeof(val));
    assert_memory_equal(buf, val, n);
    get_eq(c, "primary", "k0", "first");
    bool existed = false;
    assert_int_equal(fx_cache_delete(c, NS, "primary", "b", &existed), 0);
    assert_true(existed);
    assert_int_equal(fx_cache_delete(c, NS, "primary", "b", &existed), 0);
    assert_false(existed);
    assert_int_equal(fx_cache_get(c, NS, "primary", "b", buf, sizeof(buf), &n), FX_ENOTFOUND);
    fxc_cache_counters k;
    fxc_cache_get_counters(c, &k);
    assert_int_equal(k.binary - k0.binary, 6);
    assert_int_equal(k.errors, 0);
    fix_close(c);
    e_free(e);
}

static void test_bad_names_are_refused_locally(void **state)
{
    (void)state;
    E *e = started();
    fx_client *c = e_client(e);
    char buf[8];
    size_t n;
    assert_int_equal(fx_cache_put(c, NS, "c", "", "v", 1, 0), -EINVAL);
    assert_int_equal(fx_cache_put(c, "", "c", "k", "v", 1, 0), -EINVAL);
    assert_int_equal(fx_cache_get(c, NS, "", "k", buf, sizeof(buf), &n), -EINVAL);
    assert_int_equal(fx_cache_get(c, NS, "c", "\xff\xfe", buf, sizeof(buf), &n), -EINVAL);
    assert_int_equal(fx_cache_get(c, NS, "c", NULL, buf, sizeof(buf), &n), -EINVAL);
    fxc_cache_counters k;
    fxc_cache_get_counters(c, &k);
    assert_int_equal(k.requests, 0);
    put_ok(c, "c", "k", "v", 0);
    fix_close(c);
    e_free(e);
}

/* ---- many threads ------------------------------------------------------------------ */

#define THREADS 8
#define PER_THREAD 200

typedef struct targ {
    fx_client *c;
    int id;
    int failures;
} targ;

static void *hammer(void *p)
{
    targ *a = p;
    char key[32], val[48], buf[64];
    for (int i = 0; i < PER_THREAD; i++) {
        snprintf(key, sizeof(key), "t%d-%d", a->id, i % 16);
        snprintf(val, sizeof(val), "thread %d round %d", a->id, i);
        if (fx_cache_put(a->c, NS, "hammer", key, val, strlen(val), 0) != 0) {
            a->failures++;
            continue;
        }
        size_t n = 0;
        if (fx_cache_get(a->c, NS, "hammer", key, buf, sizeof(buf), &n) != 0 || n != strlen(val) ||
            memcmp(buf, val, n) != 0)
            a->failures++; /* only this thread writes its keys */
    }
    return NULL;
}

static void test_eight_threads_put_and_get_concurrently(void **state)
{
    (void)state;
    E *e = started();
    fx_client *c = e_client(e);
    pthread_t th[THREADS];
    targ args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i] = (targ){.c = c, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, hammer, &args[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    fxc_cache_counters k;
    fxc_cache_get_counters(c, &k);
    assert_int_equal(k.requests, 2 * THREADS * PER_THREAD);
    assert_int_equal(k.errors, 0);
    fix_close(c);
    e_free(e);
}

/* A small in-flight bound: callers wait for a slot, nothing fails. */
static void test_a_full_inflight_bound_makes_callers_wait(void **state)
{
    (void)state;
    E *e = started();
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, "t1", "any-token");
    o.cache_inflight = 2;
    o.cache_streams = 1;
    fx_client *c = fix_connect(&o);
    one *ones = calloc(200, sizeof(*ones));
    many m = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    for (int i = 0; i < 200; i++) {
        char val[32];
        snprintf(val, sizeof(val), "value-%d", i);
        ones[i] = (one){.m = &m, .i = i};
        assert_int_equal(fx_cache_put_async(c, NS, "b", "k", val, strlen(val), 0, put_cb, &ones[i]),
                         0);
    }
    wait_many(&m, 200);
    assert_int_equal(m.done, 200);
    assert_int_equal(m.wrong, 0);
    get_eq(c, "b", "k", "value-199"); /* one stream: in order, the last put wins */
    fix_close(c);
    free(ones);
    e_free(e);
}

/* Requests made while the broker is gone fail within cache_timeout_ms, and
 * close fails nothing twice. */
static void test_a_gone_broker_times_requests_out(void **state)
{
    (void)state;
    E *e = started();
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, "t1", "any-token");
    o.cache_timeout_ms = 300;
    o.reconnect_initial_ms = 50;
    fx_client *c = fix_connect(&o);
    put_ok(c, "g", "k", "v", 0);
    fx_broker_free(e->b);
    e->b = NULL;
    char buf[8];
    size_t n;
    uint64_t t0 = fx_now_ns();
    int rv = fx_cache_get(c, NS, "g", "k", buf, sizeof(buf), &n);
    uint64_t took_ms = (fx_now_ns() - t0) / FX_NS_PER_MS;
    assert_true(rv == FX_ETIMEDOUT || rv == FX_ECONNLOST);
    assert_true(took_ms < 2000);
    fx_client_close(c, 1000);
    e_free(e);
}

/* ---- stalls and cuts ---------------------------------------------------------------- */

typedef struct slot {
    pthread_mutex_t mu;
    bool done;
    int rv;
} slot;

static void slot_cb(void *user, int rv, const void *value, size_t len)
{
    (void)value, (void)len;
    slot *s = user;
    pthread_mutex_lock(&s->mu);
    s->rv = rv;
    s->done = true;
    pthread_mutex_unlock(&s->mu);
}

static int slot_wait(slot *s)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        bool done = s->done;
        int rv = s->rv;
        pthread_mutex_unlock(&s->mu);
        if (done)
            return rv;
        if (fx_now_ns() > deadline)
            fail_msg("async cache request never completed");
        sleep_ms(5);
    }
}

/* A broker that does not answer in time: the request fails FX_ETIMEDOUT,
 * its late answer is dropped (counted), and the next request on the same
 * client is answered and paired right. */
static void test_an_unanswered_request_times_out_and_its_late_answer_is_dropped(void **state)
{
    (void)state;
    E *e = started_io();
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, "t1", "any-token");
    o.cache_timeout_ms = 200;
    o.cache_streams = 1; /* the late answer arrives on the stream of the next request */
    fx_client *c = fix_connect(&o);
    put_ok(c, "slow", "k", "v", 0);
    for (uint32_t w = 0; w < e->bo.workers; w++)
        assert_int_equal(fx_broker_test_stall_worker(e->b, w, 600), 0);
    char buf[8];
    size_t n;
    assert_int_equal(fx_cache_get(c, NS, "slow", "k", buf, sizeof(buf), &n), FX_ETIMEDOUT);
    sleep_ms(800); /* the stall ends, the broker answers */
    get_eq(c, "slow", "k", "v");
    fxc_cache_counters k;
    fxc_cache_get_counters(c, &k);
    assert_int_equal(k.timeouts, 1);
    assert_int_equal(k.late, 1);
    assert_int_equal(k.streams_ended, 0);
    fix_close(c);
    e_free(e);
}

/* A cut connection fails the request in flight with FX_ECONNLOST; the next
 * goes on the re-established connection. */
static void test_a_cut_connection_fails_the_request_in_flight_and_later_ones_reconnect(void **state)
{
    (void)state;
    E *e = started_io();
    fx_client *c = e_client(e);
    put_ok(c, "cut", "k", "v", 0);
    for (uint32_t w = 0; w < e->bo.workers; w++)
        assert_int_equal(fx_broker_test_stall_worker(e->b, w, 500), 0);
    slot s = {.mu = PTHREAD_MUTEX_INITIALIZER};
    assert_int_equal(fx_cache_get_async(c, NS, "cut", "k", slot_cb, &s), 0);
    sleep_ms(100); /* sent, waiting for the stalled worker */
    assert_true(fx_broker_test_cut_connections(e->b, false) >= 1);
    assert_int_equal(slot_wait(&s), FX_ECONNLOST);
    put_ok(c, "cut", "k", "w", 0); /* waits for the reconnect */
    get_eq(c, "cut", "k", "w");
    assert_true(atomic_load(&c->reconnects) >= 1);
    fix_close(c);
    e_free(e);
}

/* From a callback (the client's loop): a blocking call is refused, an async
 * one is taken; the broker's text of a failed request is readable there. */
typedef struct inner {
    fx_client *c;
    pthread_mutex_t mu;
    int phase; /* 0 waiting, 1 outer ran, 2 inner ran */
    int sync_rv, async_rv, inner_rv;
    char text[256];
} inner;

static void inner_cb(void *user, int rv, const void *value, size_t len)
{
    (void)value, (void)len;
    inner *x = user;
    pthread_mutex_lock(&x->mu);
    x->inner_rv = rv;
    x->phase = 2;
    pthread_mutex_unlock(&x->mu);
}

static void outer_cb(void *user, int rv, const void *value, size_t len)
{
    (void)value, (void)len;
    inner *x = user;
    char text[256];
    fx_client_last_error(NULL, text, sizeof(text));
    char buf[8];
    size_t n;
    int srv = fx_cache_get(x->c, NS, "lim", "a", buf, sizeof(buf), &n);
    int arv = fx_cache_get_async(x->c, NS, "lim", "a", inner_cb, x);
    pthread_mutex_lock(&x->mu);
    snprintf(x->text, sizeof(x->text), "%s", rv == FX_EREMOTE ? text : "(not refused)");
    x->sync_rv = srv;
    x->async_rv = arv;
    if (x->phase == 0)
        x->phase = 1;
    pthread_mutex_unlock(&x->mu);
}

static void test_a_callback_may_queue_requests_but_not_block(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.cache_max_value_bytes = 16;
    fix_env_start(e);
    fx_client *c = e_client(e);
    put_ok(c, "lim", "a", "small", 0);
    inner x = {.c = c, .mu = PTHREAD_MUTEX_INITIALIZER};
    char big[64];
    memset(big, 'x', sizeof(big));
    assert_int_equal(fx_cache_put_async(c, NS, "lim", "b", big, sizeof(big), 0, outer_cb, &x), 0);
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    for (;;) {
        pthread_mutex_lock(&x.mu);
        int phase = x.phase;
        pthread_mutex_unlock(&x.mu);
        if (phase == 2)
            break;
        if (fx_now_ns() > deadline)
            fail_msg("callbacks did not run (phase %d)", phase);
        sleep_ms(5);
    }
    assert_int_equal(x.sync_rv, FX_EWOULDBLOCK_LOOP);
    assert_int_equal(x.async_rv, 0);
    assert_int_equal(x.inner_rv, 0);
    assert_non_null(strstr(x.text, "value too large"));
    fix_close(c);
    e_free(e);
}

/* ---- deletes and conditional puts ---------------------------------------------------- */

/* Skips the case when the broker does not serve |rv|'s request yet. */
static void skip_unserved(int rv)
{
    if (rv == FX_EPROTO)
        fx_test_skip("the broker does not serve cache deletes / conditional writes");
}

static void test_delete_says_whether_a_live_entry_was_removed(void **state)
{
    (void)state;
    E *e = started();
    fx_client *c = e_client(e);
    put_ok(c, "d", "k", "v", 0); /* the cache streams' auth_ok is known from here on */
    bool existed = false;
    int rv = fx_cache_delete(c, NS, "d", "k", &existed);
    if (rv == FX_EPROTO) {
        fix_close(c);
        e_free(e);
        skip_unserved(rv);
    }
    assert_int_equal(rv, 0);
    assert_true(existed);
    char buf[8];
    size_t n;
    assert_int_equal(fx_cache_get(c, NS, "d", "k", buf, sizeof(buf), &n), FX_ENOTFOUND);
    assert_int_equal(fx_cache_delete(c, NS, "d", "k", &existed), 0);
    assert_false(existed);
    assert_int_equal(fx_cache_delete(c, NS, "d", "never", NULL), 0);
    /* An expired entry is not live: nothing removed. */
    put_ok(c, "d", "short", "v", 30);
    sleep_ms(150);
    assert_int_equal(fx_cache_delete(c, NS, "d", "short", &existed), 0);
    assert_false(existed);
    fix_close(c);
    e_free(e);
}

typedef struct race {
    fx_client *c;
    pthread_barrier_t *go;
    const char *key;
    bool applied;
    uint64_t version;
    int rv;
} race;

static void *race_put(void *p)
{
    race *r = p;
    pthread_barrier_wait(r->go);
    r->rv =
        fx_cache_put_if(r->c, NS, "cond", r->key, "mine", 4, 0, true, 0, &r->applied, &r->version);
    return NULL;
}

static void test_two_clients_put_if_absent_on_one_key_exactly_one_applies(void **state)
{
    (void)state;
    E *e = started();
    fx_client *a = e_client(e), *b = e_client(e);
    put_ok(a, "cond", "warm", "v", 0);
    put_ok(b, "cond", "warm", "v", 0);
    bool applied = false;
    uint64_t v = 0;
    int rv = fx_cache_put_if(a, NS, "cond", "probe", "x", 1, 0, true, 0, &applied, &v);
    if (rv == FX_EPROTO) {
        fix_close(a);
        fix_close(b);
        e_free(e);
        skip_unserved(rv);
    }
    assert_int_equal(rv, 0);
    assert_true(applied);
    assert_true(v > 0);
    for (int round = 0; round < 20; round++) {
        char key[32];
        snprintf(key, sizeof(key), "race-%d", round);
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        race ra = {.c = a, .go = &go, .key = key}, rb = {.c = b, .go = &go, .key = key};
        pthread_t ta, tb;
        assert_int_equal(pthread_create(&ta, NULL, race_put, &ra), 0);
        assert_int_equal(pthread_create(&tb, NULL, race_put, &rb), 0);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        pthread_barrier_destroy(&go);
        assert_int_equal(ra.rv, 0);
        assert_int_equal(rb.rv, 0);
        assert_true(ra.applied != rb.applied); /* exactly one */
        /* The loser is told the winner's version. */
        assert_int_equal(ra.version, rb.version);
    }
    /* if_version: a put on the current version applies, on an old one not. */
    void *val = NULL;
    size_t n = 0;
    uint64_t cur = 0;
    assert_int_equal(fx_cache_get_versioned(a, NS, "cond", "probe", &val, &n, &cur), 0);
    free(val);
    assert_int_equal(cur, v);
    uint64_t v2 = 0;
    assert_int_equal(fx_cache_put_if(a, NS, "cond", "probe", "y", 1, 0, false, cur, &applied, &v2),
                     0);
    assert_true(applied);
    assert_true(v2 > cur);
    assert_int_equal(fx_cache_put_if(b, NS, "cond", "probe", "z", 1, 0, false, cur, &applied, &v),
                     0);
    assert_false(applied);
    assert_int_equal(v, v2);
    get_eq(b, "cond", "probe", "y");
    assert_int_equal(fx_cache_put_if(a, NS, "cond", "probe", "y", 1, 0, true, 5, NULL, NULL),
                     -EINVAL);
    fix_close(a);
    fix_close(b);
    e_free(e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_put_then_get_round_trip_and_a_miss),
    cmocka_unit_test(test_a_small_buffer_is_too_big_with_the_length_and_get_alloc_copies),
    cmocka_unit_test(test_an_entry_with_a_ttl_is_gone_after_it),
    cmocka_unit_test(test_a_thousand_async_gets_in_flight_get_their_own_values),
    cmocka_unit_test(test_a_refused_value_fails_that_request_only),
    cmocka_unit_test(test_a_forbidden_cache_fails_that_request_and_the_client_goes_on),
    cmocka_unit_test(test_get_put_delete_go_binary_once_the_broker_offers_it),
    cmocka_unit_test(test_bad_names_are_refused_locally),
    cmocka_unit_test(test_eight_threads_put_and_get_concurrently),
    cmocka_unit_test(test_a_full_inflight_bound_makes_callers_wait),
    cmocka_unit_test(test_a_gone_broker_times_requests_out),
    cmocka_unit_test(test_an_unanswered_request_times_out_and_its_late_answer_is_dropped),
    cmocka_unit_test(test_a_cut_connection_fails_the_request_in_flight_and_later_ones_reconnect),
    cmocka_unit_test(test_a_callback_may_queue_requests_but_not_block),
    cmocka_unit_test(test_delete_says_whether_a_live_entry_was_removed),
    cmocka_unit_test(test_two_clients_put_if_absent_on_one_key_exactly_one_applies),
};

FX_TEST_MAIN(tests)
