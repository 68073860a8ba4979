/* Unit twin of src/broker/control.c: the admin operations and the drain on
 * the one-thread broker of conn_fixture.h. Their waits for the loops run
 * the fake loops (cf_waits.h), so a list gathers the worker's and the
 * connection loop's answers as it would across threads, and the drain runs
 * to its end in the test's thread. */
/* fx-test-libs: fx_broker fx_storage fx_wire fx_base */
#include "unit/conn_fixture.h"

#include "unit/cf_waits.h"

#include <jansson.h>

#define WAIT_NS (5 * FX_NS_PER_S)

static cf *c_new(void)
{
    cf *f = cf_new(NULL);
    cw_use(f);
    return f;
}

static void c_free(cf *f)
{
    cf_free(f);
    cw_use(NULL);
}

/* The entry of |arr| whose |key| is the string |val|, or NULL. */
static json_t *find_entry(json_t *arr, const char *key, const char *val)
{
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e)
    {
        const char *s = json_string_value(json_object_get(e, key));
        if (s != NULL && strcmp(s, val) == 0)
            return e;
    }
    return NULL;
}

static uint64_t get_u64(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (v == NULL || !json_is_integer(v))
        fail_msg("no integer \"%s\"", key);
    return (uint64_t)json_integer_value(v);
}

static json_t *parse(char *text)
{
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    if (j == NULL)
        fail_msg("not JSON (%s): %s", err.text, text);
    free(text);
    return j;
}

/* ---- lists ----------------------------------------------------------------------------------- */

/* GET /v1/streams: the registry's names with the worker's state of each
 * stream (messages, offsets, subscribers); a stream nobody used has zeros. */
static void test_list_streams_gathers_worker_state(void **state)
{
    (void)state;
    cf *f = c_new();
    cf_auth(f, 0, "t1");
    cf_subscribed(f, 0, "t1", "s");
    cf_auth(f, 4, "t1");
    for (int i = 0; i < 3; i++)
        cf_publish(f, 4, "t1", "s", "x");
    cf_settle(f);
    bool created;
    fx_registry_err err;
    assert_int_equal(fx_broker_create_stream(f->b, "t1", "default", "idle", &created, &err), 0);
    assert_true(created);
    char *text = NULL;
    assert_int_equal(fx_broker_list_streams(f->b, WAIT_NS, &text), 0);
    json_t *j = parse(text);
    json_t *arr = json_object_get(j, "streams");
    assert_int_equal(json_array_size(arr), 2);
    json_t *s = find_entry(arr, "stream", "s");
    assert_non_null(s);
    assert_string_equal(json_string_value(json_object_get(s, "tenant")), "t1");
    assert_string_equal(json_string_value(json_object_get(s, "namespace")), "default");
    assert_int_equal(get_u64(s, "messages"), 3);
    assert_int_equal(get_u64(s, "first_offset"), 0);
    assert_int_equal(get_u64(s, "next_offset"), 3);
    assert_int_equal(get_u64(s, "subscribers"), 1);
    json_t *idle = find_entry(arr, "stream", "idle");
    assert_non_null(idle);
    assert_int_equal(get_u64(idle, "messages"), 0);
    assert_int_equal(get_u64(idle, "subscribers"), 0);
    json_decref(j);
    c_free(f);
}

/* GET /v1/subscriptions: each subscription with the connection side (its
 * connection, lane, what was delivered) and the worker side (its queue)
 * merged into one entry. */
static void test_list_subscriptions_merges_both_sides(void **state)
{
    (void)state;
    cf *f = c_new();
    cf_auth(f, 0, "t1");
    cf_subscribed(f, 0, "t1", "s");
    cf_auth(f, 4, "t1");
    cf_publish(f, 4, "t1", "s", "one");
    cf_publish(f, 4, "t1", "s", "two");
    cf_settle(f);
    char *text = NULL;
    assert_int_equal(fx_broker_list_subscriptions(f->b, WAIT_NS, &text), 0);
    json_t *j = parse(text);
    json_t *arr = json_object_get(j, "subscriptions");
    assert_int_equal(json_array_size(arr), 1);
    json_t *e = json_array_get(arr, 0);
    assert_string_equal(json_string_value(json_object_get(e, "stream")), "s");
    assert_int_equal(get_u64(e, "connection_id"), 1);
    assert_int_equal(get_u64(e, "delivered"), 2);
    assert_true(get_u64(e, "queue_capacity") > 0); /* from the worker */
    assert_int_equal(get_u64(e, "queue_depth"), 0);
    assert_int_equal(get_u64(e, "drops"), 0);
    json_decref(j);
    c_free(f);
}

/* ---- delete ---------------------------------------------------------------------------------- */

/* Deleting a stream whose subscriber has events still queued: the events
 * are delivered, then the event stream ends with a FIN; the stream is gone
 * from the list. An unknown stream is refused with FX_ENOSTREAM. */
static void test_delete_ends_subscribers_after_queued_events(void **state)
{
    (void)state;
    cf *f = c_new();
    cf_auth(f, 0, "t1");
    int64_t uni = cf_subscribed(f, 0, "t1", "s");
    cf_auth(f, 4, "t1");
    cf_publish(f, 4, "t1", "s", "a");
    cf_publish(f, 4, "t1", "s", "b");
    cf_pump(f); /* published, not acknowledged: queued */
    fx_registry_err err;
    assert_int_equal(fx_broker_delete_stream(f->b, "t1", "default", "s", &err), 0);
    cf_settle(f);
    char ev[4][64];
    assert_int_equal(cf_read_events(f, uni, ev, 4), 2);
    assert_string_equal(ev[0], "a");
    assert_string_equal(ev[1], "b");
    assert_true(cf_stream(f, uni)->tx_fin);
    assert_false(cf_stream(f, uni)->reset);
    char *text = NULL;
    assert_int_equal(fx_broker_list_streams(f->b, WAIT_NS, &text), 0);
    json_t *j = parse(text);
    assert_null(find_entry(json_object_get(j, "streams"), "stream", "s"));
    json_decref(j);
    assert_int_equal(fx_broker_delete_stream(f->b, "t1", "default", "nope", &err), FX_ENOSTREAM);
    assert_non_null(strstr(err.msg, "stream not found"));
    c_free(f);
}

/* ---- drain ----------------------------------------------------------------------------------- */

static bool drain_seen;

/* Inside the drain: a publish and a subscribe on open, authenticated
 * streams are refused with the drain's text, and a new connection is
 * closed at once with it. */
static void during_drain(cf *f)
{
    drain_seen = true;
    assert_true(fx_broker_is_draining(f->b));
    cf_publish_json(f, 4, "t1", "s", "late", 7);
    cf_subscribe(f, 8, "t1", "s");
    cf_settle(f);
    fx_msg m;
    assert_true(cf_read_msg(f, 4, &m));
    assert_int_equal(m.type, FX_MSG_PUBLISH_ERROR);
    assert_int_equal(m.request_id, 7);
    assert_non_null(m.message);
    assert_non_null(strstr(m.message, FXB_SHUTDOWN_TEXT));
    fx_msg_deinit(&m);
    cf_expect_msg(f, 8, FX_MSG_ERROR, FXB_SHUTDOWN_TEXT);
    fx_quic_conn *late = fq_accept(f->ep);
    assert_true(fq_is_closing(late));
    assert_string_equal(late->info.text, FXB_SHUTDOWN_TEXT);
    assert_false(fq_turn(late));
}

/* fx_broker_drain: publishes and subscribes that arrive during it are
 * refused with "broker shutting down" (the publishes counted in the
 * report), what was accepted before is delivered, the connections are
 * closed at its end, and stream creation is refused afterwards. */
static void test_drain_refuses_publish_and_subscribe(void **state)
{
    (void)state;
    cf *f = c_new();
    assert_int_equal(fx_broker_start(f->b), 0);
    cf_auth(f, 0, "t1");
    int64_t uni = cf_subscribed(f, 0, "t1", "s");
    cf_auth(f, 4, "t1");
    cf_auth(f, 8, "t1");
    cf_publish(f, 4, "t1", "s", "before");
    cf_settle(f);
    char ev[2][64];
    assert_int_equal(cf_read_events(f, uni, ev, 2), 1);
    drain_seen = false;
    cw_at_next_wait(during_drain);
    fx_broker_drain_report r;
    assert_int_equal(fx_broker_drain(f->b, fx_now_ns() + 10 * FX_NS_PER_S, &r), 0);
    assert_true(drain_seen);
    assert_false(r.timed_out);
    assert_int_equal(r.publishes_refused, 1);
    assert_true(f->ended); /* closed by the drain */
    assert_int_equal(f->why.code, 0);
    bool created;
    fx_registry_err err;
    assert_int_equal(fx_broker_create_stream(f->b, "t1", "default", "n", &created, &err),
                     FX_ESHUTDOWN);
    assert_string_equal(err.msg, FXB_SHUTDOWN_TEXT);
    c_free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_list_streams_gathers_worker_state),
    cmocka_unit_test(test_list_subscriptions_merges_both_sides),
    cmocka_unit_test(test_delete_ends_subscribers_after_queued_events),
    cmocka_unit_test(test_drain_refuses_publish_and_subscribe),
};

FX_TEST_MAIN(tests)
