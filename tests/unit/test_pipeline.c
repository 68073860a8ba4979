/* Unit tests for pipeline.c against an in-process broker on 127.0.0.1 port
 * 0: the document's shape (checkpoints 3-6 and the QUIC side in order, the
 * client side, the refresh), the snapshot kept for a second and rebuilt
 * after, the top-streams bound, and the two routes called directly. */
/* fx-test-libs: fx_server fx_broker fx_quic fx_wire fx_base */
#define _XOPEN_SOURCE 700
#include "broker/broker.h"
#include "server/admin.h"
#include "server/pipeline.h"

#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fx_test.h"

#define SEC_NS 1000000000ull

static char dir[64];
static fx_broker *broker;
static fx_pipeline *pipe_;

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

static int up(void **state)
{
    snprintf(dir, sizeof(dir), "/tmp/fx-pipeline-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    fx_broker_opts o;
    fx_broker_opts_default(&o);
    o.quic.state_dir = dir;
    if (fx_broker_new(&broker, &o) != 0 || fx_broker_start(broker) != 0)
        return -1;
    return fx_pipeline_new(&pipe_, broker);
}

static int down(void **state)
{
    fx_pipeline_free(pipe_);
    pipe_ = NULL;
    fx_broker_free(broker);
    broker = NULL;
    return nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void create(const char *stream)
{
    fx_registry_err err = {0};
    bool created = false;
    assert_int_equal(
        fx_broker_create_stream_durable(broker, "t1", "ns", stream, 0, &created, NULL, &err), 0);
    assert_true(created);
}

static json_t *doc_at(uint64_t now_ns)
{
    char *s = NULL;
    assert_int_equal(fx_pipeline_json(pipe_, now_ns, &s), 0);
    json_t *j = json_loads(s, 0, NULL);
    assert_non_null(j);
    free(s);
    return j;
}

static void test_document_lists_checkpoints_in_order(void **state)
{
    json_t *j = doc_at(SEC_NS);
    assert_int_equal(json_integer_value(json_object_get(j, "refresh_ms")), 1000);
    assert_true(json_integer_value(json_object_get(j, "taken_at_unix_ms")) > 0);
    json_t *cps = json_object_get(j, "checkpoints");
    assert_int_equal(json_array_size(cps), 5);
    const char *ids[] = {"3", "4", "5", "6", "quic"};
    for (size_t i = 0; i < 5; i++) {
        json_t *cp = json_array_get(cps, i);
        assert_string_equal(json_string_value(json_object_get(cp, "id")), ids[i]);
        assert_true(json_is_string(json_object_get(cp, "name")));
    }
    json_t *client = json_object_get(json_object_get(j, "client_side"), "checkpoints");
    assert_int_equal(json_array_size(client), 2);
    assert_string_equal(json_string_value(json_array_get(client, 0)), "1");
    assert_true(json_is_array(json_object_get(j, "streams")));
    assert_true(json_is_array(json_object_get(j, "slowest_subscribers")));
    json_decref(j);
}

static void test_consumer_groups_list_4g_5a_5g_5m_5p_with_the_ack_inbox_and_ring_hold(void **state)
{
    json_t *j = doc_at(SEC_NS);
    json_t *cg = json_object_get(j, "consumer_groups");
    json_t *cps = json_object_get(cg, "checkpoints");
    const char *ids[] = {"4g", "5a", "5g", "5m", "5p"};
    assert_int_equal(json_array_size(cps), 5);
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(json_string_value(json_array_get(cps, i)), ids[i]);
    json_t *inbox = json_object_get(cg, "ack_inbox");
    assert_int_equal(json_integer_value(json_object_get(inbox, "bound_bytes_per_member")),
                     256 * 1024);
    assert_int_equal(json_integer_value(json_object_get(inbox, "queued_bytes")), 0);
    assert_true(json_is_integer(json_object_get(inbox, "paused")));
    assert_true(json_is_integer(json_object_get(cg, "skipped")));
    json_t *hold = json_object_get(cg, "ring_hold");
    assert_true(json_is_false(json_object_get(hold, "applies"))); /* drop_new: shedding */
    assert_int_equal(json_integer_value(json_object_get(hold, "timeout_ms")), 60000);
    assert_int_equal(json_integer_value(json_object_get(hold, "held")), 0);
    assert_true(json_is_integer(json_object_get(hold, "waits")));
    assert_true(json_is_integer(json_object_get(hold, "timeouts")));
    assert_true(json_is_integer(json_object_get(hold, "dead_letter_yields")));
    json_decref(j);
}

static void test_snapshot_is_kept_for_a_second_then_rebuilt(void **state)
{
    json_t *j = doc_at(10 * SEC_NS);
    assert_int_equal(json_array_size(json_object_get(j, "streams")), 0);
    json_decref(j);
    create("s1");
    j = doc_at(10 * SEC_NS + SEC_NS - 1);
    assert_int_equal(json_array_size(json_object_get(j, "streams")), 0);
    json_decref(j);
    j = doc_at(11 * SEC_NS);
    json_t *streams = json_object_get(j, "streams");
    assert_int_equal(json_array_size(streams), 1);
    json_t *e = json_array_get(streams, 0);
    assert_string_equal(json_string_value(json_object_get(e, "name")), "t1/ns/s1");
    assert_int_equal(json_integer_value(json_object_get(e, "subscribers")), 0);
    json_decref(j);
}

static void test_top_streams_are_bounded(void **state)
{
    char name[16];
    for (unsigned i = 0; i < FX_PIPELINE_TOP + 3; i++) {
        snprintf(name, sizeof(name), "s%u", i);
        create(name);
    }
    json_t *j = doc_at(SEC_NS);
    assert_int_equal(json_array_size(json_object_get(j, "streams")), FX_PIPELINE_TOP);
    json_decref(j);
}

static void test_routes_serve_the_document_and_the_page(void **state)
{
    fx_admin_route r[FX_PIPELINE_NROUTES];
    fx_pipeline_routes(pipe_, r);
    assert_string_equal(r[0].method, "GET");
    assert_string_equal(r[0].path, "/v1/pipeline");
    assert_string_equal(r[1].path, "/ui");
    assert_ptr_equal(r[0].user, pipe_);
    fx_admin_req req = {.method = "GET", .path = "/v1/pipeline", .rest = ""};
    fx_admin_resp resp = {0};
    r[0].on_request(&req, &resp, r[0].user);
    assert_int_equal(resp.status, 200);
    assert_string_equal(resp.content_type, FX_ADMIN_JSON);
    json_t *j = json_loadb(resp.body, resp.len, 0, NULL);
    assert_non_null(json_object_get(j, "checkpoints"));
    json_decref(j);
    fx_admin_resp_deinit(&resp);
    req.path = "/ui";
    r[1].on_request(&req, &resp, r[1].user);
    assert_int_equal(resp.status, 200);
    assert_non_null(strstr(resp.content_type, "text/html"));
    assert_int_equal(resp.len, fx_pipeline_ui_html_len);
    assert_true(fx_pipeline_ui_html_len > 0);
    assert_memory_equal(resp.body, fx_pipeline_ui_html, resp.len);
    fx_admin_resp_deinit(&resp);
    fx_pipeline_free(NULL);
}

#define T(name) cmocka_unit_test_setup_teardown(name, up, down)
static const struct CMUnitTest tests[] = {
    T(test_document_lists_checkpoints_in_order),
    T(test_consumer_groups_list_4g_5a_5g_5m_5p_with_the_ack_inbox_and_ring_hold),
    T(test_snapshot_is_kept_for_a_second_then_rebuilt),
    T(test_top_streams_are_bounded),
    T(test_routes_serve_the_document_and_the_page),
};

FX_TEST_MAIN(tests)
