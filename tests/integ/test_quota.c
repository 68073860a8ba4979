/* Integration tests of the broker's retention and isolation limits against a
 * real broker in this process (fixture.h) and libfelix clients: the tenant
 * quota and the process-wide retained-bytes limit evict the oldest messages
 * and count it, auto-created idle streams expire (explicit ones do not),
 * max_tenants refuses one tenant too many, empty payloads are charged their
 * per-message overhead in the ring and at admission, and
 * subscriber_block_timeout_ms disconnects a lossless subscriber that holds
 * its worker, so another tenant's stream on that worker goes on. Timeouts
 * are hang guards unless a comment says otherwise. */
/* fx-test-libs: fx_broker fx_client fx_quic fx_wire fx_base */
#include <jansson.h>
#include <stdatomic.h>

#include "integ/fixture.h"

typedef fix_env E;

static fx_client *client(E *e, const char *tenant)
{
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, tenant, "any-token");
    o.reconnect = false;
    return fix_connect(&o);
}

/* The broker's /v1/streams entry of |tenant|/NS/|stream|, or NULL when the
 * stream does not exist. Fills |*pmsgs| and |*pbytes|. */
static bool stream_state(E *e, const char *tenant, const char *stream, uint64_t *pmsgs,
                         uint64_t *pbytes)
{
    char *js = NULL;
    assert_int_equal(fx_broker_list_streams(e->b, (uint64_t)HANG_MS * FX_NS_PER_MS, &js), 0);
    json_t *root = json_loads(js, 0, NULL);
    free(js);
    assert_non_null(root);
    json_t *arr = json_object_get(root, "streams"), *v;
    size_t i;
    bool found = false;
    json_array_foreach(arr, i, v)
    {
        if (strcmp(json_string_value(json_object_get(v, "tenant")), tenant) == 0 &&
            strcmp(json_string_value(json_object_get(v, "stream")), stream) == 0) {
            found = true;
            if (pmsgs != NULL)
                *pmsgs = (uint64_t)json_integer_value(json_object_get(v, "messages"));
            if (pbytes != NULL)
                *pbytes = (uint64_t)json_integer_value(json_object_get(v, "bytes"));
        }
    }
    json_decref(root);
    return found;
}

static uint64_t stream_bytes(E *e, const char *tenant, const char *stream)
{
    uint64_t bytes = 0;
    assert_true(stream_state(e, tenant, stream, NULL, &bytes));
    return bytes;
}

#define MSG 4096
#define OVH 16 /* FX_STREAM_MSG_OVERHEAD */

static void publish_n(fx_client *c, const char *stream, int n)
{
    static uint8_t pay[MSG];
    for (int i = 0; i < n; i++)
        assert_int_equal(fx_publish(c, NS, stream, pay, sizeof(pay), FX_ACK_PER_MESSAGE), 0);
}

/* ---- retention -------------------------------------------------------------------- */

static void test_tenant_quota_evicts_the_appending_streams_oldest(void **state)
{
    (void)state;
    E e = {0};
    fix_env_init(&e, "quo");
    e.bo.tenant_retained_bytes = 64u << 10;
    e.bo.retained_bytes_limit = 0;
    fix_env_start(&e);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_client *c1 = client(&e, "t1"), *c2 = client(&e, "t2");
    publish_n(c1, "a", 10); /* 40 KiB + overhead: under the quota */
    publish_n(c1, "b", 10); /* pushes t1 over: b evicts its own oldest */
    publish_n(c2, "a", 10); /* another tenant: its own account */
    uint64_t ma = 0, mb = 0, m2 = 0;
    assert_true(stream_state(&e, "t1", "a", &ma, NULL));
    assert_true(stream_state(&e, "t1", "b", &mb, NULL));
    assert_true(stream_state(&e, "t2", "a", &m2, NULL));
    uint64_t t1 = stream_bytes(&e, "t1", "a") + stream_bytes(&e, "t1", "b");
    fprintf(stderr, "t1: a %llu msgs, b %llu msgs, %llu bytes; t2: %llu msgs\n",
            (unsigned long long)ma, (unsigned long long)mb, (unsigned long long)t1,
            (unsigned long long)m2);
    assert_int_equal(ma, 10);
    assert_true(mb < 10 && mb > 0);
    assert_true(t1 <= 64u << 10);
    assert_int_equal(m2, 10);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, stream_evicted_tenant_quota), (int64_t)(10 - mb));
    assert_int_equal(DELTA(a, b, stream_evicted_retained_limit), 0);
    fix_close(c1);
    fix_close(c2);
    fix_env_deinit(&e);
}

static void test_retained_limit_bounds_all_rings_and_counts(void **state)
{
    (void)state;
    E e = {0};
    fix_env_init(&e, "quo");
    e.bo.tenant_retained_bytes = 0;
    e.bo.retained_bytes_limit = 64u << 10;
    fix_env_start(&e);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_client *c1 = client(&e, "t1"), *c2 = client(&e, "t2");
    publish_n(c1, "x", 10);
    publish_n(c2, "y", 10);
    uint64_t total = stream_bytes(&e, "t1", "x") + stream_bytes(&e, "t2", "y");
    fx_metrics_snapshot_take(&b);
    fprintf(stderr, "retained %llu bytes, evicted %lld\n", (unsigned long long)total,
            (long long)DELTA(a, b, stream_evicted_retained_limit));
    assert_true(total <= 64u << 10);
    assert_true(DELTA(a, b, stream_evicted_retained_limit) > 0);
    /* What was evicted is what is missing: 20 messages were appended. */
    uint64_t mx = 0, my = 0;
    stream_state(&e, "t1", "x", &mx, NULL);
    stream_state(&e, "t2", "y", &my, NULL);
    assert_int_equal((int64_t)(mx + my) + DELTA(a, b, stream_evicted_retained_limit), 20);
    assert_int_equal(b.g.stream_retained_bytes - a.g.stream_retained_bytes, (int64_t)total);
    fix_close(c1);
    fix_close(c2);
    fix_env_deinit(&e);
}

/* ---- stream lifetime ---------------------------------------------------------------- */

static void test_idle_auto_created_stream_expires_explicit_and_watched_stay(void **state)
{
    (void)state;
    E e = {0};
    fix_env_init(&e, "quo");
    e.bo.stream_idle_expiry_ns = 1 * FX_NS_PER_S;
    fix_env_start(&e);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    bool created = false;
    assert_int_equal(fx_broker_create_stream(e.b, "t1", NS, "explicit", &created, NULL), 0);
    assert_true(created);
    fx_client *pub = client(&e, "t1"), *sc = client(&e, "t1");
    fx_subscription *s = fix_subscribe(sc, "watched", NULL);
    publish_n(pub, "idle", 2);
    publish_n(pub, "explicit", 2);
    publish_n(pub, "watched", 1);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, HANG_MS), 0);
    /* A connected publisher keeps its QUIC stream and with it the stream. */
    sleep_ms(1600);
    assert_true(stream_state(&e, "t1", "idle", NULL, NULL));
    fix_close(pub);
    /* Expirable from now on: 1 s idle, swept every 250 ms. */
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    while (stream_state(&e, "t1", "idle", NULL, NULL)) {
        assert_true(fx_now_ns() < deadline);
        sleep_ms(50);
    }
    assert_true(stream_state(&e, "t1", "explicit", NULL, NULL));
    assert_true(stream_state(&e, "t1", "watched", NULL, NULL));
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, registry_streams_expired), 1);
    /* The name is free again: a publish creates a new, empty stream. */
    pub = client(&e, "t1");
    publish_n(pub, "idle", 1);
    uint64_t msgs = 0;
    assert_true(stream_state(&e, "t1", "idle", &msgs, NULL));
    assert_int_equal(msgs, 1);
    fx_unsubscribe(s);
    fix_close(pub);
    fix_close(sc);
    fix_env_deinit(&e);
}

static void test_max_tenants_refuses_one_tenant_too_many(void **state)
{
    (void)state;
    E e = {0};
    fix_env_init(&e, "quo");
    e.bo.max_tenants = 2;
    fix_env_start(&e);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_client *c1 = client(&e, "t1"), *c2 = client(&e, "t2"), *c3 = client(&e, "t3");
    publish_n(c1, "s", 1);
    publish_n(c2, "s", 1);
    static const char pay[] = "x";
    assert_true(fx_publish(c3, NS, "s", pay, 1, FX_ACK_PER_MESSAGE) != 0);
    char msg[256];
    fx_client_last_error(c3, msg, sizeof(msg));
    fprintf(stderr, "third tenant: %s\n", msg);
    assert_non_null(strstr(msg, "max_tenants"));
    /* Tenants already there may add streams. */
    publish_n(c1, "s2", 1);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, registry_tenants_refused), 1);
    fix_close(c1);
    fix_close(c2);
    fix_close(c3);
    fix_env_deinit(&e);
}

/* ---- empty payloads -------------------------------------------------------------------- */

#define NEMPTY 2000

/* Publishes |n| empty messages as one acked batch; |ok| says whether the
 * broker must accept it. */
static void publish_empties(fx_client *c, const char *stream, size_t n, bool ok)
{
    fx_iov *v = calloc(n, sizeof(*v));
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = (fx_iov){"", 0};
    int rv = fx_publish_batch(c, NS, stream, v, n, FX_ACK_PER_BATCH);
    free(v);
    if ((rv == 0) != ok) {
        char msg[256];
        fx_client_last_error(c, msg, sizeof(msg));
        fail_msg("batch of %zu empty messages: %s (%s), want %s", n, fx_errname(rv), msg,
                 ok ? "accepted" : "refused");
    }
}

static void test_empty_payloads_are_charged_in_the_ring(void **state)
{
    (void)state;
    E e = {0};
    fix_env_init(&e, "quo");
    e.bo.log_capacity = 1u << 20;
    e.bo.log_capacity_bytes = 64u << 10;
    fix_env_start(&e);
    fx_client *c = client(&e, "t1");
    publish_empties(c, "z", NEMPTY, true);
    uint64_t msgs = 0, bytes = 0;
    assert_true(stream_state(&e, "t1", "z", &msgs, &bytes));
    assert_int_equal(msgs, NEMPTY);
    assert_int_equal(bytes, NEMPTY * OVH);
    /* Three batches charge 96,000 bytes > 64 KiB: the oldest goes whole. */
    publish_empties(c, "z", NEMPTY, true);
    publish_empties(c, "z", NEMPTY, true);
    assert_true(stream_state(&e, "t1", "z", &msgs, &bytes));
    assert_int_equal(msgs, 2 * NEMPTY);
    assert_int_equal(bytes, 2 * NEMPTY * OVH);
    fix_close(c);
    fix_env_deinit(&e);
}

static void test_empty_payloads_are_charged_at_admission(void **state)
{
    (void)state;
    E e = {0};
    fix_env_init(&e, "quo");
    e.bo.pub_conn_inflight_bytes = 256u << 10;
    e.bo.max_frame_bytes = 256u << 10;
    fix_env_start(&e);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_client *c = client(&e, "t1");
    /* 20,000 empty messages: an 80 KB frame holding ~1 MB of slice tables,
     * more than the connection's 256 KiB share. */
    publish_empties(c, "e", 20000, false);
    char msg[256];
    fx_client_last_error(c, msg, sizeof(msg));
    fprintf(stderr, "20,000 empty messages: %s\n", msg);
    assert_non_null(strstr(msg, "larger than the ingress byte budget"));
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_error), 1);
    /* A batch whose tables fit is admitted. */
    publish_empties(c, "e", 1000, true);
    fix_close(c);
    fix_env_deinit(&e);
}

/* ---- subscriber_block_timeout_ms ---------------------------------------------------------- */

typedef struct got {
    atomic_uint_fast64_t n;
} got;

static void on_event(void *user, const fx_event *ev)
{
    (void)ev;
    atomic_fetch_add(&((got *)user)->n, 1);
}

/* One worker, lossless, commit acks: tenant t1's subscriber never reads and
 * parks the worker's fanout; tenant t2 publishes to its own stream on the
 * same worker. Returns t2's publish result; |*pgot| its subscriber's count
 * after that publish, |*perr| how t1's subscription ended (FX_ETIMEDOUT:
 * still live). */
static int neighbour_publish(uint64_t block_timeout_ns, uint64_t *pgot, fx_sub_error *perr,
                             int64_t *pkicked)
{
    E e = {0};
    fix_env_init(&e, "quo");
    fix_lossless(&e.bo);
    e.bo.workers = 1;
    e.bo.ack_on_commit = true;
    e.bo.subscriber_queue_capacity = 4;
    e.bo.subscriber_lane_queue_depth = 2;
    e.bo.subscriber_unacked_bytes = 64u << 10;
    e.bo.subscriber_block_timeout_ns = block_timeout_ns;
    fix_env_start(&e);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_client_opts o;
    fix_client_opts(&o, e.b, e.server, "t1", "any-token");
    o.reconnect = false;
    o.sub_queue_policy = FX_POLICY_BLOCK;
    o.stream_window_bytes = 64u << 10;
    o.sub_queue_capacity = 2;
    fx_client *stalled = fix_connect(&o);
    fx_subscription *ss = fix_subscribe(stalled, "a", NULL);
    fx_client *p1 = client(&e, "t1");
    fx_client *c2 = client(&e, "t2");
    fx_subscription *s2 = fix_subscribe(c2, "b", NULL);
    got g = {0};
    assert_int_equal(fx_subscription_set_callback(s2, on_event, &g), 0);
    /* Enough 16 KiB messages to fill the client's window and queue, the
     * broker's unacked allowance, lane and subscriber queue: the fanout
     * parks. Unacked, so the publisher does not wait for the commit. */
    static uint8_t pay[16384];
    for (int i = 0; i < 64; i++)
        assert_int_equal(fx_publish(p1, NS, "a", pay, sizeof(pay), FX_ACK_NONE), 0);
    sleep_ms(300);
    /* The neighbour's acked publish waits for its commit on that worker. */
    int rv = fx_publish(c2, NS, "b", "n", 1, FX_ACK_PER_MESSAGE);
    uint64_t deadline = fix_deadline_ns(2000);
    while (rv == 0 && atomic_load(&g.n) == 0 && fx_now_ns() < deadline)
        sleep_ms(5);
    *pgot = atomic_load(&g.n);
    /* The stalled subscription: drain what it holds, then see how it ends. */
    fx_event ev;
    int srv;
    uint64_t end = fix_deadline_ns(3000);
    while ((srv = fx_subscription_next(ss, &ev, 500)) == 0 && fx_now_ns() < end)
        ;
    fx_subscription_error(ss, perr);
    if (srv == FX_ETIMEDOUT || srv == 0)
        perr->code = FX_ETIMEDOUT;
    fx_metrics_snapshot_take(&b);
    *pkicked = DELTA(a, b, sub_block_timeouts);
    fx_unsubscribe(ss);
    fx_unsubscribe(s2);
    fx_client_close(stalled, 1000);
    fx_client_close(p1, 1000);
    fx_client_close(c2, 1000);
    fix_env_deinit(&e);
    return rv;
}

static void test_block_timeout_frees_the_worker_for_other_tenants(void **state)
{
    (void)state;
    uint64_t n = 0;
    fx_sub_error se = {0};
    int64_t kicked = 0;
    int rv = neighbour_publish(500 * FX_NS_PER_MS, &n, &se, &kicked);
    fprintf(stderr, "neighbour publish: %s, delivered %llu; stalled subscription: %s (%s)\n",
            rv == 0 ? "ok" : fx_errname(rv), (unsigned long long)n, fx_errname(se.code),
            se.message);
    assert_int_equal(rv, 0);
    assert_int_equal(n, 1);
    assert_true(se.code != FX_ETIMEDOUT && se.code != 0);
    assert_non_null(strstr(se.message, "subscriber_block_timeout_ms"));
    assert_int_equal(kicked, 1);
}

static void test_block_timeout_zero_keeps_lossless_waiting(void **state)
{
    (void)state;
    uint64_t n = 0;
    fx_sub_error se = {0};
    int64_t kicked = 0;
    int rv = neighbour_publish(0, &n, &se, &kicked);
    fprintf(stderr, "neighbour publish without the timeout: %s, delivered %llu\n", fx_errname(rv),
            (unsigned long long)n);
    /* The default: the neighbour waits behind the stalled subscriber (its
     * commit ack times out) and the stalled subscription stays live. */
    assert_true(rv != 0);
    assert_int_equal(se.code, FX_ETIMEDOUT);
    assert_int_equal(kicked, 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_tenant_quota_evicts_the_appending_streams_oldest),
    cmocka_unit_test(test_retained_limit_bounds_all_rings_and_counts),
    cmocka_unit_test(test_idle_auto_created_stream_expires_explicit_and_watched_stay),
    cmocka_unit_test(test_max_tenants_refuses_one_tenant_too_many),
    cmocka_unit_test(test_empty_payloads_are_charged_in_the_ring),
    cmocka_unit_test(test_empty_payloads_are_charged_at_admission),
    cmocka_unit_test(test_block_timeout_frees_the_worker_for_other_tenants),
    cmocka_unit_test(test_block_timeout_zero_keeps_lossless_waiting),
};
FX_TEST_MAIN(tests)
