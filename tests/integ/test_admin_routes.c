/* Integration tests of the stream admin API on the admin HTTP endpoint:
 * create, list and delete streams, what a deletion does to subscribers and
 * publishers, the subscription list naming a slow subscriber, and the
 * consumer groups of a stream (create, describe, seek, dead letters,
 * delete and their refusals), and the declared caches (PUT, GET
 * /v1/caches, DELETE). A real
 * broker and libfelix clients in this process (admin_fixture.h). */
/* fx-test-libs: fx_broker fx_client fx_server fx_quic fx_wire fx_base */
#include <pthread.h>
#include <stdatomic.h>

#include "integ/admin_fixture.h"

/* The entry of |name| in a GET /v1/streams answer, or NULL. */
static json_t *find_stream(json_t *root, const char *name)
{
    json_t *arr = json_object_get(root, "streams");
    assert_true(json_is_array(arr));
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *e = json_array_get(arr, i);
        if (strcmp(json_string_value(json_object_get(e, "stream")), name) == 0)
            return e;
    }
    return NULL;
}

static void expect_status(E *e, const char *method, const char *path, int status,
                          const char *body_has)
{
    http_resp r;
    http(e, method, path, &r);
    if (r.status != status)
        fail_msg("%s %s: %d %s (want %d)", method, path, r.status, r.body, status);
    if (body_has != NULL && strstr(r.body, body_has) == NULL)
        fail_msg("%s %s: body %s lacks '%s'", method, path, r.body, body_has);
}

static void test_streams_create_list_delete(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.auto_create_streams = false;
    e->bo.max_streams_per_tenant = 2;
    e_start(e);
    expect_status(e, "PUT", "/v1/streams/t1/default/a", 201, "\"created\":true");
    expect_status(e, "PUT", "/v1/streams/t1/default/a", 200, "\"created\":false");
    expect_status(e, "PUT", "/v1/streams/t1/default/", 400, "stream");
    expect_status(e, "PUT", "/v1/streams/t1/default", 400, "want /v1/streams/");
    expect_status(e, "PUT", "/v1/streams/t1/default/b", 201, NULL);
    expect_status(e, "PUT", "/v1/streams/t1/default/c", 429, "max_streams_per_tenant");

    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(fx_publish(c, NS, "a", "xyz", 3, FX_ACK_PER_MESSAGE), 0);
    json_t *j = get_json(e, "/v1/streams");
    json_t *a = find_stream(j, "a"), *b = find_stream(j, "b");
    assert_non_null(a);
    assert_non_null(b);
    assert_null(find_stream(j, "c"));
    assert_string_equal(json_string_value(json_object_get(a, "tenant")), "t1");
    assert_string_equal(json_string_value(json_object_get(a, "namespace")), NS);
    assert_int_equal(ju(a, "messages"), 3);
    assert_int_equal(ju(a, "first_offset"), 0);
    assert_int_equal(ju(a, "next_offset"), 3);
    assert_int_equal(ju(a, "subscribers"), 0);
    assert_int_equal(ju(b, "messages"), 0);
    assert_true(ju(a, "id") != ju(b, "id"));
    json_decref(j);

    expect_status(e, "DELETE", "/v1/streams/t1/default/a", 200, "\"deleted\":true");
    expect_status(e, "DELETE", "/v1/streams/t1/default/a", 404, "stream not found");
    j = get_json(e, "/v1/streams");
    assert_null(find_stream(j, "a"));
    assert_non_null(find_stream(j, "b"));
    json_decref(j);
    /* The tenant's slot is free again. */
    expect_status(e, "PUT", "/v1/streams/t1/default/c", 201, NULL);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
}

static void test_delete_finishes_subscribers_event_streams(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.auto_create_streams = false;
    e_start(e);
    expect_status(e, "PUT", "/v1/streams/t1/default/d", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_subscription *s1 = subscribe(c, "d");
    fx_subscription *s2 = subscribe(c, "d");
    enum { N = 50 };
    for (int i = 0; i < N; i++)
        assert_int_equal(fx_publish(c, NS, "d", "payload", 7, FX_ACK_PER_MESSAGE), 0);
    expect_status(e, "DELETE", "/v1/streams/t1/default/d", 200, NULL);
    fx_subscription *subs[2] = {s1, s2};
    for (int k = 0; k < 2; k++) {
        /* Everything queued before the deletion arrives, then the end. */
        for (uint64_t i = 0; i < N; i++) {
            fx_event ev;
            assert_int_equal(fx_subscription_next(subs[k], &ev, HANG_MS), 0);
            assert_true(ev.has_offset);
            assert_int_equal(ev.offset, i);
        }
        fx_event ev;
        assert_int_equal(fx_subscription_next(subs[k], &ev, HANG_MS), FX_EEOF);
        fx_sub_error se;
        assert_int_equal(fx_subscription_error(subs[k], &se), 0);
        assert_int_equal(se.code, FX_EEOF);
    }
    fx_unsubscribe(s1);
    fx_unsubscribe(s2);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
}

static void test_publish_after_delete_gets_stream_not_found(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.auto_create_streams = false;
    e_start(e);
    expect_status(e, "PUT", "/v1/streams/t1/default/p", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    assert_int_equal(fx_publish(c, NS, "p", "x", 1, FX_ACK_PER_MESSAGE), 0);
    expect_status(e, "DELETE", "/v1/streams/t1/default/p", 200, NULL);
    /* The same publish stream (its cached handle is now inactive). */
    assert_int_equal(fx_publish(c, NS, "p", "y", 1, FX_ACK_PER_MESSAGE), FX_ENOSTREAM);
    char msg[256];
    fx_client_last_error(c, msg, sizeof(msg));
    assert_non_null(strstr(msg, "stream not found"));
    fx_subscription *s = NULL;
    assert_int_equal(fx_subscribe(&s, c, NS, "p", NULL), FX_ENOSTREAM);
    assert_null(s);
    /* Created again, it is a new, empty stream. */
    expect_status(e, "PUT", "/v1/streams/t1/default/p", 201, NULL);
    assert_int_equal(fx_publish(c, NS, "p", "z", 1, FX_ACK_PER_MESSAGE), 0);
    json_t *j = get_json(e, "/v1/streams");
    assert_int_equal(ju(find_stream(j, "p"), "next_offset"), 1);
    json_decref(j);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
}

static void count_event(void *user, const fx_event *ev)
{
    (void)ev;
    atomic_fetch_add((atomic_uint_fast64_t *)user, 1);
}

static void test_subscriptions_list_names_slow_subscriber(void **state)
{
    (void)state;
    E *e = e_new();
    /* Default mode (drop_new at checkpoints 5 and 6) with small queues. */
    e->bo.subscriber_queue_capacity = 8;
    e->bo.subscriber_lane_queue_depth = 4;
    e->bo.subscriber_unacked_bytes = 64u << 10;
    e_start(e);
    fx_client *stalled = e_client(e, FX_POLICY_BLOCK, 64u << 10, 2);
    fx_client *healthy = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_client *pc = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_subscription *slow = subscribe(stalled, "s"); /* nobody reads it */
    fx_subscription *fast = subscribe(healthy, "s");
    atomic_uint_fast64_t got;
    atomic_init(&got, 0);
    assert_int_equal(fx_subscription_set_callback(fast, count_event, &got), 0);
    enum { BATCHES = 40, PER = 100 };
    static uint8_t pay[1024];
    fx_iov iov[PER];
    for (int i = 0; i < PER; i++)
        iov[i] = (fx_iov){pay, sizeof(pay)};
    /* One envelope per batch; the healthy subscriber takes each before the
     * next, so only the stalled one can shed. */
    uint64_t deadline = fx_now_ns() + (uint64_t)HANG_MS * FX_NS_PER_MS;
    for (int i = 0; i < BATCHES; i++) {
        assert_int_equal(fx_publish_batch(pc, NS, "s", iov, PER, FX_ACK_PER_BATCH), 0);
        while (atomic_load(&got) < (uint64_t)(i + 1) * PER && fx_now_ns() < deadline)
            sleep_ms(1);
    }
    assert_int_equal(atomic_load(&got), BATCHES * PER);

    fx_sub_stats ss, fs;
    assert_int_equal(fx_subscription_stats(slow, &ss), 0);
    assert_int_equal(fx_subscription_stats(fast, &fs), 0);
    json_t *j = get_json(e, "/v1/subscriptions");
    json_t *arr = json_object_get(j, "subscriptions");
    assert_int_equal(json_array_size(arr), 2);
    json_t *first = json_array_get(arr, 0), *second = json_array_get(arr, 1);
    /* The stalled subscription leads the list and is the one shedding. */
    assert_int_equal(ju(first, "id"), ss.subscription_id);
    assert_int_equal(ju(second, "id"), fs.subscription_id);
    assert_true(ju(first, "drops") > 0);
    assert_int_equal(ju(second, "drops"), 0);
    assert_int_equal(ju(first, "drops"), ju(first, "queue_dropped") + ju(first, "lane_dropped"));
    assert_int_equal(ju(second, "delivered"), BATCHES * PER);
    assert_true(ju(first, "delivered") < BATCHES * PER);
    assert_true(ju(first, "connection_id") != ju(second, "connection_id"));
    assert_string_equal(json_string_value(json_object_get(first, "stream")), "s");
    assert_true(json_is_integer(json_object_get(second, "last_delivery_age_ms")));
    json_decref(j);
    fx_unsubscribe(slow);
    fx_unsubscribe(fast);
    assert_int_equal(fx_client_close(pc, HANG_MS), 0);
    assert_int_equal(fx_client_close(stalled, HANG_MS), 0);
    assert_int_equal(fx_client_close(healthy, HANG_MS), 0);
    e_free(e);
}

/* ---- delete tombstone ------------------------------------------------------------- */

/* A publisher that keeps publishing to one auto-created stream on its own
 * thread, counting what each publish gave. */
typedef struct pubber {
    fx_client *c;
    pthread_t thread;
    atomic_bool stop;
    atomic_uint_fast64_t ok, gone, other;
    pthread_mutex_t mu;
    char last_err[512]; /* the last refusal's message */
} pubber;

static void *pubber_run(void *arg)
{
    pubber *p = arg;
    while (!atomic_load(&p->stop)) {
        int rv = fx_publish(p->c, NS, "k", "tick", 4, FX_ACK_PER_MESSAGE);
        if (rv == 0) {
            atomic_fetch_add(&p->ok, 1);
        } else if (rv == FX_ENOSTREAM) {
            pthread_mutex_lock(&p->mu);
            fx_client_last_error(p->c, p->last_err, sizeof(p->last_err));
            pthread_mutex_unlock(&p->mu);
            atomic_fetch_add(&p->gone, 1);
        } else {
            atomic_fetch_add(&p->other, 1);
        }
        usleep(5000);
    }
    return NULL;
}

/* Waits until |*ctr| passes |from| by |n| (a hang guard, not a timing). */
static void wait_more(atomic_uint_fast64_t *ctr, uint64_t from, uint64_t n)
{
    uint64_t deadline = fx_now_ns() + (uint64_t)HANG_MS * FX_NS_PER_MS;
    while (atomic_load(ctr) < from + n && fx_now_ns() < deadline)
        usleep(2000);
    if (atomic_load(ctr) < from + n)
        fail_msg("waited for %llu more than %llu, have %llu", (unsigned long long)n,
                 (unsigned long long)from, (unsigned long long)atomic_load(ctr));
}

static bool stream_listed(E *e, const char *name)
{
    json_t *j = get_json(e, "/v1/streams");
    bool found = find_stream(j, name) != NULL;
    json_decref(j);
    return found;
}

/* With auto-creation on and a publisher running, an admin DELETE stays
 * deleted: the publishes after it are refused with "stream deleted
 * recently" (counted) and the stream is not listed again, until an explicit
 * PUT creates it (publishes succeed at once), or, after a second DELETE,
 * until stream_delete_tombstone_ms has passed. A subscribe is refused too. */
static void test_delete_is_not_undone_by_auto_create_while_publishers_run(void **state)
{
    (void)state;
    enum { TOMB_MS = 1000 };
    E *e = e_new();
    e->bo.auto_create_streams = true;
    e->bo.stream_delete_tombstone_ns = TOMB_MS * FX_NS_PER_MS;
    e_start(e);
    pubber p = {.c = e_client(e, FX_POLICY_BLOCK, 0, 0)};
    assert_int_equal(pthread_mutex_init(&p.mu, NULL), 0);
    assert_int_equal(pthread_create(&p.thread, NULL, pubber_run, &p), 0);
    wait_more(&p.ok, 0, 5); /* auto-created by the first publish */
    assert_true(stream_listed(e, "k"));

    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    expect_status(e, "DELETE", "/v1/streams/t1/default/k", 200, "\"deleted\":true");
    wait_more(&p.gone, 0, 10);
    uint64_t ok_then = atomic_load(&p.ok);
    wait_more(&p.gone, atomic_load(&p.gone), 10); /* it keeps publishing: still refused */
    assert_int_equal(atomic_load(&p.ok), ok_then);
    assert_false(stream_listed(e, "k"));
    pthread_mutex_lock(&p.mu);
    assert_non_null(strstr(p.last_err, "stream not found: tenant=t1 namespace=default stream=k "
                                       "(deleted recently: not auto-created again for"));
    pthread_mutex_unlock(&p.mu);
    fx_metrics_snapshot_take(&m1);
    assert_true(m1.c.registry_tombstone_refused - m0.c.registry_tombstone_refused >= 20);
    fx_client *c2 = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_subscription *s = NULL;
    assert_int_equal(fx_subscribe(&s, c2, NS, "k", NULL), FX_ENOSTREAM);
    assert_null(s);

    /* An explicit create ends the tombstone: the publisher gets through. */
    expect_status(e, "PUT", "/v1/streams/t1/default/k", 201, "\"created\":true");
    wait_more(&p.ok, atomic_load(&p.ok), 5);
    assert_true(stream_listed(e, "k"));

    /* Deleted again: refused until the tombstone ends, then auto-created. */
    expect_status(e, "DELETE", "/v1/streams/t1/default/k", 200, NULL);
    uint64_t deleted_at = fx_now_ns();
    wait_more(&p.gone, atomic_load(&p.gone), 5);
    uint64_t ok_before = atomic_load(&p.ok);
    wait_more(&p.ok, ok_before, 1);
    uint64_t back_after = fx_now_ns() - deleted_at;
    assert_true(back_after >= (TOMB_MS - 100) * FX_NS_PER_MS);
    assert_true(stream_listed(e, "k"));
    assert_int_equal(atomic_load(&p.other), 0);

    atomic_store(&p.stop, true);
    assert_int_equal(pthread_join(p.thread, NULL), 0);
    pthread_mutex_destroy(&p.mu);
    assert_int_equal(fx_client_close(c2, HANG_MS), 0);
    assert_int_equal(fx_client_close(p.c, HANG_MS), 0);
    e_free(e);
}

/* ---- consumer groups ---------------------------------------------------------------- */

/* Sends |method| |path| with |body| and checks the status and a body part. */
static void expect_body(E *e, const char *method, const char *path, const char *body, int status,
                        const char *body_has)
{
    http_resp r;
    http_body(e, method, path, body, &r);
    if (r.status != status)
        fail_msg("%s %s %s: %d %s (want %d)", method, path, body, r.status, r.body, status);
    if (body_has != NULL && strstr(r.body, body_has) == NULL)
        fail_msg("%s %s: body %s lacks '%s'", method, path, r.body, body_has);
}

#define G "/v1/streams/t1/default/orders.eu/groups"

static void test_groups_create_describe_seek_dead_letters_delete(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.auto_create_streams = false;
    e_start(e);
    expect_status(e, "PUT", "/v1/streams/t1/default/orders.eu", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(fx_publish(c, NS, "orders.eu", "xyz", 3, FX_ACK_PER_MESSAGE), 0);

    expect_status(e, "GET", G, 200, "\"groups\":[]");
    expect_body(e, "PUT", G "/billing", "{\"start\":{\"offset\":1}}", 201, "\"created\":true");
    expect_body(e, "PUT", G "/billing", "{\"start\":\"new\"}", 200, "\"created\":false");
    expect_status(e, "PUT", G "/audit", 201, "\"group\":\"audit\"");
    json_t *j = get_json(e, G "/billing");
    assert_string_equal(json_string_value(json_object_get(j, "group")), "billing");
    assert_int_equal(ju(j, "next"), 1); /* where it was created, not moved by the second PUT */
    assert_int_equal(ju(j, "tail"), 3);
    assert_int_equal(ju(j, "lag"), 2);
    assert_int_equal(json_array_size(json_object_get(j, "members")), 0);
    json_decref(j);
    j = get_json(e, G);
    assert_int_equal(json_array_size(json_object_get(j, "groups")), 2);
    json_decref(j);

    expect_body(e, "POST", G "/billing/seek", "{\"start\":\"new\"}", 200, "\"start\":\"new\"");
    j = get_json(e, G "/billing");
    assert_int_equal(ju(j, "next"), 3);
    assert_int_equal(ju(j, "lag"), 0);
    json_decref(j);
    expect_body(e, "POST", G "/billing/seek", "{\"start\":{\"offset\":0}}", 200, NULL);
    j = get_json(e, G "/billing");
    assert_int_equal(ju(j, "next"), 0);
    json_decref(j);
    j = get_json(e, G "/billing/dead-letters");
    assert_int_equal(json_array_size(json_object_get(j, "dead_letters")), 0);
    assert_int_equal(ju(j, "forgotten"), 0);
    json_decref(j);

    expect_status(e, "DELETE", G "/billing", 200, "\"deleted\":true");
    expect_status(e, "DELETE", G "/billing", 404, "consumer group not found");
    expect_status(e, "GET", G "/billing", 404, "consumer group not found");
    j = get_json(e, G);
    assert_int_equal(json_array_size(json_object_get(j, "groups")), 1);
    json_decref(j);
    /* The stream's own routes are untouched. */
    j = get_json(e, "/v1/streams");
    assert_int_equal(ju(find_stream(j, "orders.eu"), "next_offset"), 3);
    json_decref(j);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
}

static void test_groups_refusals_404_409_400_and_the_token(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.auto_create_streams = false;
    e_start(e);
    const char *none = "stream not found: tenant=t1 namespace=default stream=none";
    expect_status(e, "GET", "/v1/streams/t1/default/none/groups", 404, none);
    expect_status(e, "PUT", "/v1/streams/t1/default/none/groups/g", 404, none);
    expect_body(e, "POST", "/v1/streams/t1/default/none/groups/g/seek", "{\"start\":\"all\"}", 404,
                none);
    expect_status(e, "GET", "/v1/streams/t1/default/none/groups/g/dead-letters", 404, none);
    expect_status(e, "DELETE", "/v1/streams/t1/default/none/groups/g", 404, none);

    expect_status(e, "PUT", "/v1/streams/t1/default/orders.eu", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    assert_int_equal(fx_publish(c, NS, "orders.eu", "x", 1, FX_ACK_PER_MESSAGE), 0);
    /* The tail is 1: offset 1 is the next record, 2 is past it. */
    expect_body(e, "PUT", G "/g", "{\"start\":{\"offset\":2}}", 409, "past the stream's tail");
    expect_body(e, "PUT", G "/g", "{\"start\":{\"offset\":1}}", 201, NULL);
    expect_body(e, "POST", G "/g/seek", "{\"start\":{\"offset\":9}}", 409, "past");
    expect_status(e, "GET", G "/nope", 404, "consumer group not found");
    expect_body(e, "POST", G "/nope/seek", "{\"start\":\"all\"}", 404, "consumer group not found");
    expect_body(e, "PUT", G "/g", "{\"start\":\"oldest\"}", 400, "\\\"start\\\" must be");
    expect_body(e, "POST", G "/g/seek", "", 400, "must say where to go");
    expect_status(e, "GET", G "/g/bogus", 400, "want /v1/streams/");
    /* A stream's GET is not served; the methods of the prefix are. */
    expect_status(e, "GET", "/v1/streams/t1/default/orders.eu", 404, "/groups");
    expect_status(e, "PATCH", G "/g", 400, NULL);
    /* Changes need the admin token (reads do not, on loopback). */
    http_resp r;
    http_auth(e, "POST", G "/g/seek", "{\"start\":\"all\"}", NULL, &r);
    assert_int_equal(r.status, 401);
    http_auth(e, "DELETE", G "/g", "", NULL, &r);
    assert_int_equal(r.status, 401);
    http_auth(e, "GET", G "/g", "", NULL, &r);
    assert_int_equal(r.status, 200);
    expect_status(e, "DELETE", G "/g", 200, NULL);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
}

#define CACHE_PATH "/v1/tenants/t1/namespaces/default/caches/"

static void test_caches_declare_list_delete(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.auto_create_streams = false;
    e_start(e);
    expect_status(e, "PUT", CACHE_PATH "sessions", 201, "\"created\":true");
    expect_status(e, "PUT", CACHE_PATH "sessions", 200, "\"created\":false");
    expect_status(e, "PUT", CACHE_PATH "b", 201,
                  "{\"tenant\":\"t1\",\"namespace\":\"default\",\"cache\":\"b\"");
    expect_status(e, "PUT", "/v1/tenants/t1/namespaces/default/caches", 400,
                  "want /v1/tenants/{tenant}/namespaces/{namespace}/caches/{cache}");
    expect_status(e, "PUT", "/v1/tenants/t1/namespaces/default/caches/a/b", 400, "want");
    expect_status(e, "PUT", "/v1/tenants/t1/caches/a", 400, "want");
    expect_status(e, "PUT", "/v1/tenants/t1/namespaces//caches/a", 400,
                  "invalid namespace name: empty");
    json_t *j = get_json(e, "/v1/caches");
    json_t *arr = json_object_get(j, "caches");
    assert_int_equal(json_array_size(arr), 2);
    json_t *b = json_array_get(arr, 0), *ss = json_array_get(arr, 1);
    assert_string_equal(json_string_value(json_object_get(b, "cache")), "b");
    assert_string_equal(json_string_value(json_object_get(ss, "cache")), "sessions");
    assert_string_equal(json_string_value(json_object_get(ss, "tenant")), "t1");
    assert_string_equal(json_string_value(json_object_get(ss, "namespace")), "default");
    assert_true(json_is_true(json_object_get(ss, "declared")));
    assert_int_equal(ju(ss, "entries"), 0);
    assert_int_equal(ju(ss, "bytes"), 0);
    json_decref(j);
    expect_status(e, "DELETE", CACHE_PATH "sessions", 200, "\"deleted\":true,\"entries\":0");
    expect_status(e, "DELETE", CACHE_PATH "sessions", 404, "cache t1/default/sessions not found");
    expect_status(e, "GET", "/v1/tenants/t1/namespaces/default/caches/b", 405, NULL);
    j = get_json(e, "/v1/caches");
    assert_int_equal(json_array_size(json_object_get(j, "caches")), 1);
    json_decref(j);
    /* Mutations need the admin token. */
    http_resp r;
    http_auth(e, "PUT", CACHE_PATH "c", "", "wrong", &r);
    assert_int_equal(r.status, 401);
    e_free(e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_streams_create_list_delete),
    cmocka_unit_test(test_caches_declare_list_delete),
    cmocka_unit_test(test_delete_finishes_subscribers_event_streams),
    cmocka_unit_test(test_publish_after_delete_gets_stream_not_found),
    cmocka_unit_test(test_subscriptions_list_names_slow_subscriber),
    cmocka_unit_test(test_delete_is_not_undone_by_auto_create_while_publishers_run),
    cmocka_unit_test(test_groups_create_describe_seek_dead_letters_delete),
    cmocka_unit_test(test_groups_refusals_404_409_400_and_the_token),
};
FX_TEST_MAIN(tests)
