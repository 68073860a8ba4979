/* The admin endpoint's pipeline document (src/server/pipeline.c) against an
 * in-process broker: checkpoints 3-6 with the broker's bounds and policies,
 * streams and slowest subscribers from the loops, a snapshot rebuilt at most
 * once a second, and a broker with no streams at all. */
#include <jansson.h>
#include <string.h>

#include "fixture.h"
#include "server/pipeline.h"

typedef fix_env E;

static json_t *doc_at(fx_pipeline *p, uint64_t now)
{
    char *s = NULL;
    assert_int_equal(fx_pipeline_json(p, now, &s), 0);
    json_t *j = json_loads(s, 0, NULL);
    free(s);
    assert_non_null(j);
    return j;
}

static json_t *checkpoint(json_t *doc, const char *id)
{
    size_t i;
    json_t *cp;
    json_array_foreach(json_object_get(doc, "checkpoints"), i, cp)
    {
        if (strcmp(json_string_value(json_object_get(cp, "id")), id) == 0)
            return cp;
    }
    fail_msg("no checkpoint %s", id);
    return NULL;
}

static long long num(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    assert_true(json_is_integer(v));
    return (long long)json_integer_value(v);
}

static void test_empty_broker_document_has_every_checkpoint_and_no_streams(void **state)
{
    (void)state;
    E e;
    fix_env_init(&e, "pipe");
    fix_env_start(&e);
    fx_pipeline *p;
    assert_int_equal(fx_pipeline_new(&p, e.b), 0);
    json_t *d = doc_at(p, fx_now_ns());
    static const char *const ids[] = {"3", "4", "5", "6", "quic"};
    for (size_t i = 0; i < 5; i++)
        assert_non_null(checkpoint(d, ids[i]));
    assert_int_equal(num(checkpoint(d, "3"), "bound"), (long long)e.bo.pub_inflight_bytes);
    assert_int_equal(num(checkpoint(d, "4"), "per_queue_bound"), (long long)e.bo.pub_queue_depth);
    assert_string_equal(json_string_value(json_object_get(checkpoint(d, "5"), "policy")),
                        fx_queue_policy_name(e.bo.subscriber_queue_policy));
    assert_int_equal(json_array_size(json_object_get(d, "streams")), 0);
    assert_int_equal(json_array_size(json_object_get(d, "slowest_subscribers")), 0);
    assert_non_null(
        strstr(json_string_value(json_object_get(json_object_get(d, "client_side"), "note")),
               "fx_client_get_stats"));
    json_decref(d);
    fx_pipeline_free(p);
    fix_env_deinit(&e);
}

/* A request within a second of the last rebuild gets the same snapshot; a
 * later one sees the subscription that arrived meanwhile. */
static void test_snapshot_rebuilt_at_most_once_a_second(void **state)
{
    (void)state;
    E e;
    fix_env_init(&e, "pipe");
    fix_env_start(&e);
    fx_pipeline *p;
    assert_int_equal(fx_pipeline_new(&p, e.b), 0);
    uint64_t t0 = fx_now_ns();
    json_t *a = doc_at(p, t0);
    fx_client_opts o;
    fix_client_opts(&o, e.b, e.server, "t1", "tok");
    fx_client *c = fix_connect(&o);
    fx_subscription *s = fix_subscribe(c, "seen", NULL);
    fix_wait_sub_gauges(1, -1);
    json_t *b = doc_at(p, t0 + 500 * FX_NS_PER_MS);
    assert_int_equal(num(a, "taken_at_unix_ms"), num(b, "taken_at_unix_ms"));
    assert_int_equal(json_array_size(json_object_get(b, "slowest_subscribers")), 0);
    json_t *d = doc_at(p, t0 + 1000 * FX_NS_PER_MS);
    json_t *subs = json_object_get(d, "slowest_subscribers");
    assert_int_equal(json_array_size(subs), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(subs, 0), "stream")),
                        "seen");
    assert_int_equal(num(checkpoint(d, "5"), "queues"), 1);
    json_t *streams = json_object_get(d, "streams");
    assert_int_equal(json_array_size(streams), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(streams, 0), "name")),
                        "t1/" NS "/seen");
    json_decref(a);
    json_decref(b);
    json_decref(d);
    fx_unsubscribe(s);
    fix_close(c);
    fx_pipeline_free(p);
    fix_env_deinit(&e);
}

/* Checkpoints 1 and 2 live in the client: fx_client_get_stats reports their
 * bounds, what they hold and the publishes that waited. A 2 KiB budget makes
 * a stream of 1 KiB publishes wait for QUIC's acknowledgements. */
static void test_client_stats_report_checkpoints_1_and_2(void **state)
{
    (void)state;
    E e;
    fix_env_init(&e, "pipe");
    fix_env_start(&e);
    fx_client_opts o;
    fix_client_opts(&o, e.b, e.server, "t1", "tok");
    o.publish_inflight_bytes = 2048;
    fx_client *c = fix_connect(&o);
    static uint8_t kb[1024];
    for (int i = 0; i < 200; i++)
        assert_int_equal(fx_publish(c, NS, "cs", kb, sizeof(kb), FX_ACK_NONE), 0);
    assert_int_equal(fx_flush(c, HANG_MS), 0);
    fx_client_stats st;
    assert_int_equal(fx_client_get_stats(c, &st), 0);
    assert_int_equal(st.publish_budget_bytes, 2048);
    assert_int_equal(st.publish_budget_in_use, 0); /* everything acknowledged */
    assert_true(st.publish_budget_waits > 0);
    assert_true(st.publish_queue_capacity > 0);
    assert_true(st.publish_queue_depth <= st.publish_queue_capacity);
    fix_close(c);
    fix_env_deinit(&e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_client_stats_report_checkpoints_1_and_2),
    cmocka_unit_test(test_empty_broker_document_has_every_checkpoint_and_no_streams),
    cmocka_unit_test(test_snapshot_rebuilt_at_most_once_a_second),
};
FX_TEST_MAIN(tests)
