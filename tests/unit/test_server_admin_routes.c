/* Unit tests for admin_routes.c: the broker's route table, and its handlers
 * called directly (no HTTP): requests refused before the broker is asked
 * (bad paths, bad bodies, retention without durability, an empty PATCH,
 * malformed consumer group paths and start bodies), then create, list,
 * delete and the error statuses of streams and consumer groups against an
 * in-process broker on 127.0.0.1 port 0. */
/* fx-test-libs: fx_server fx_broker fx_quic fx_wire fx_base */
#define _XOPEN_SOURCE 700
#include "broker/broker.h"
#include "server/admin.h"
#include "server/admin_routes.h"

#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fx_test.h"

enum { LIST_STREAMS, PUT, PATCH, DELETE, LIST_SUBS, GET, POST };

/* Calls route |i| of |b|'s table with |rest| and |body|; returns the status
 * and leaves the answer in |r| (the caller deinits it). */
static unsigned call(fx_broker *b, int i, const char *rest, const char *body, fx_admin_resp *r)
{
    fx_admin_route routes[FX_ADMIN_BROKER_NROUTES];
    fx_admin_broker_routes(b, routes);
    char path[512];
    snprintf(path, sizeof(path), "%s%s", routes[i].path, rest);
    fx_admin_req req = {.method = routes[i].method,
                        .path = path,
                        .rest = rest,
                        .body = body,
                        .body_len = body ? strlen(body) : 0};
    *r = (fx_admin_resp){0};
    routes[i].on_request(&req, r, routes[i].user);
    return r->status;
}

/* The "error" text of a JSON error answer (static copy). */
static const char *error_of(const fx_admin_resp *r)
{
    static char msg[512];
    json_t *j = json_loadb(r->body, r->len, 0, NULL);
    assert_non_null(j);
    snprintf(msg, sizeof(msg), "%s", json_string_value(json_object_get(j, "error")));
    json_decref(j);
    return msg;
}

static void test_route_table_names_methods_paths_and_the_broker(void **state)
{
    fx_broker *fake = (fx_broker *)&fake;
    fx_admin_route r[FX_ADMIN_BROKER_NROUTES];
    fx_admin_broker_routes(fake, r);
    const char *want[][2] = {{"GET", "/v1/streams"},       {"PUT", "/v1/streams/"},
                             {"PATCH", "/v1/streams/"},    {"DELETE", "/v1/streams/"},
                             {"GET", "/v1/subscriptions"}, {"GET", "/v1/streams/"},
                             {"POST", "/v1/streams/"},     {"GET", "/v1/caches"},
                             {"PUT", "/v1/tenants/"},      {"DELETE", "/v1/tenants/"}};
    for (size_t i = 0; i < FX_ADMIN_BROKER_NROUTES; i++) {
        assert_string_equal(r[i].method, want[i][0]);
        assert_string_equal(r[i].path, want[i][1]);
        assert_non_null(r[i].on_request);
        assert_ptr_equal(r[i].user, fake);
    }
}

static void test_paths_without_three_parts_are_400(void **state)
{
    /* Refused before the broker is asked: no broker needed. */
    const char *bad[] = {"", "t", "t/ns", "t/ns/s/extra", "t/ns/s/group/g"};
    for (int route = PUT; route <= DELETE; route++) {
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            fx_admin_resp r;
            assert_int_equal(call(NULL, route, bad[i], "{\"retention_bytes\":1}", &r), 400);
            assert_string_equal(r.content_type, FX_ADMIN_JSON);
            assert_non_null(strstr(error_of(&r), "/v1/streams/{tenant}/{namespace}/{stream}"));
            fx_admin_resp_deinit(&r);
        }
    }
}

static void test_bad_bodies_are_400_with_the_reason(void **state)
{
    struct {
        int route;
        const char *body;
        const char *why;
    } cases[] = {
        {PUT, "[1]", "must be a JSON object"},
        {PUT, "{not json", "must be a JSON object"},
        {PUT, "{\"durable\":1}", "\"durable\" must be true or false"},
        {PUT, "{\"colour\":\"red\"}", "unknown field"},
        {PUT, "{\"retention_bytes\":5}", "need \"durable\": true"},
        {PUT, "{\"durable\":true,\"retention_bytes\":0}", "whole number from 1"},
        {PUT, "{\"durable\":true,\"retention_seconds\":1.5}", "whole number from 1"},
        {PATCH, "", "nothing to change"},
        {PATCH, "{\"durable\":true}", "nothing to change"},
        {PATCH, "{\"retention_seconds\":-3}", "whole number from 1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fx_admin_resp r;
        assert_int_equal(call(NULL, cases[i].route, "t/ns/s", cases[i].body, &r), 400);
        assert_non_null(strstr(error_of(&r), cases[i].why));
        fx_admin_resp_deinit(&r);
    }
}

/* ---- consumer group paths and bodies (no broker) ------------------------------ */

#define GROUP_HELP "/v1/streams/{tenant}/{namespace}/{stream}/groups[/{group}"

static void test_group_paths_that_are_malformed_are_400_with_the_group_help(void **state)
{
    struct {
        int route;
        const char *rest;
    } cases[] = {
        {PUT, "t/ns/s/groups"},         /* the list is not created */
        {PUT, "t/ns/s/groups/"},        /* an empty group name */
        {PUT, "t/ns/s/groups/g/seek"},  /* seek is POST */
        {DELETE, "t/ns/s/groups"},      /* the list is not deleted */
        {DELETE, "t/ns/s/groups/g/dead-letters"},
        {GET, "t/ns/s/groups/g/x"},     /* an unknown action */
        {GET, "t/ns/s/groups/g/seek/x"}, /* parts past the action */
        {GET, "t/ns/s/groups//dead-letters"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fx_admin_resp r;
        if (call(NULL, cases[i].route, cases[i].rest, NULL, &r) != 400)
            fail_msg("%s: %u", cases[i].rest, r.status);
        assert_string_equal(r.content_type, FX_ADMIN_JSON);
        assert_non_null(strstr(error_of(&r), GROUP_HELP));
        fx_admin_resp_deinit(&r);
    }
    /* POST serves only seek, redrive and discard; GET of one says it is a POST. */
    const char *post_bad[] = {"t/ns/s", "t/ns/s/groups", "t/ns/s/groups/g", "t/ns/s/groups/g/x"};
    for (size_t i = 0; i < sizeof(post_bad) / sizeof(post_bad[0]); i++) {
        fx_admin_resp r;
        assert_int_equal(call(NULL, POST, post_bad[i], "{\"start\":\"all\"}", &r), 400);
        assert_non_null(strstr(error_of(&r), "groups/{group}/seek"));
        fx_admin_resp_deinit(&r);
    }
    fx_admin_resp r;
    assert_int_equal(call(NULL, GET, "t/ns/s/groups/g/seek", NULL, &r), 400);
    assert_non_null(strstr(error_of(&r), "POST"));
    fx_admin_resp_deinit(&r);
    assert_int_equal(call(NULL, GET, "t/ns/s/groups/g/redrive", NULL, &r), 400);
    assert_non_null(strstr(error_of(&r), "POST .../groups/{group}/redrive"));
    fx_admin_resp_deinit(&r);
    assert_int_equal(call(NULL, GET, "t/ns/s/groups/g/discard", NULL, &r), 400);
    assert_non_null(strstr(error_of(&r), "POST .../groups/{group}/discard"));
    fx_admin_resp_deinit(&r);
}

static void test_stream_paths_named_groups_stay_stream_paths(void **state)
{
    /* A stream (or namespace) called "groups" is a stream path: the stream
     * body parser answers, not the group one. */
    const char *rests[] = {"t/ns/groups", "t/groups/s", "groups/ns/s.with.dots"};
    for (size_t i = 0; i < sizeof(rests) / sizeof(rests[0]); i++) {
        fx_admin_resp r;
        assert_int_equal(call(NULL, PUT, rests[i], "{\"start\":\"all\"}", &r), 400);
        assert_non_null(strstr(error_of(&r), "unknown field in the body: only \"durable\""));
        fx_admin_resp_deinit(&r);
    }
    /* A GET of one stream is not served: it points at the list and groups. */
    fx_admin_resp r;
    assert_int_equal(call(NULL, GET, "t/ns/s", NULL, &r), 404);
    assert_non_null(strstr(error_of(&r), "/groups"));
    fx_admin_resp_deinit(&r);
}

static void test_group_start_bodies_that_are_bad_are_400_with_the_reason(void **state)
{
    struct {
        int route;
        const char *rest, *body, *why;
    } cases[] = {
        {PUT, "t/ns/s/groups/g", "[1]", "must be a JSON object"},
        {PUT, "t/ns/s/groups/g", "{not json", "must be a JSON object"},
        {PUT, "t/ns/s/groups/g", "{\"from\":\"all\"}", "unknown field \"from\""},
        {PUT, "t/ns/s/groups/g", "{\"max_deliver\":0}", "\"max_deliver\" must be -1"},
        {PUT, "t/ns/s/groups/g", "{\"max_deliver\":-2}", "\"max_deliver\" must be -1"},
        {PUT, "t/ns/s/groups/g", "{\"ack_wait_ms\":0}", "\"ack_wait_ms\" must be a whole"},
        {PUT, "t/ns/s/groups/g", "{\"ack_wait_ms\":\"5s\"}", "\"ack_wait_ms\" must be"},
        {PUT, "t/ns/s/groups/g", "{\"max_ack_pending\":1.5}", "\"max_ack_pending\" must be"},
        {PUT, "t/ns/s/groups/g", "{\"backoff_ms\":[1,2,3,4,5,6,7,8,9]}", "at most 8"},
        {PUT, "t/ns/s/groups/g", "{\"backoff_ms\":[-1]}", "\"backoff_ms\" delays"},
        {PUT, "t/ns/s/groups/g", "{\"max_deliver\":2,\"max_deliver\":3}", "JSON object"},
        {POST, "t/ns/s/groups/g/seek", "{\"start\":\"all\",\"max_deliver\":2}",
         "only \"start\" is accepted"},
        {PUT, "t/ns/s/groups/g", "{\"start\":\"oldest\"}", "\"start\" must be"},
        {PUT, "t/ns/s/groups/g", "{\"start\":5}", "\"start\" must be"},
        {PUT, "t/ns/s/groups/g", "{\"start\":{\"offset\":-1}}", "\"start\" must be"},
        {PUT, "t/ns/s/groups/g", "{\"start\":{\"offset\":1.5}}", "\"start\" must be"},
        {PUT, "t/ns/s/groups/g", "{\"start\":{\"offset\":1,\"x\":2}}", "\"start\" must be"},
        {PUT, "t/ns/s/groups/g", "{\"start\":{}}", "\"start\" must be"},
        {POST, "t/ns/s/groups/g/seek", "", "must say where to go"},
        {POST, "t/ns/s/groups/g/seek", "{}", "must say where to go"},
        {POST, "t/ns/s/groups/g/seek", "{\"start\":null}", "\"start\" must be"},
        {POST, "t/ns/s/groups/g/redrive", "", "{\"offset\": N}"},
        {POST, "t/ns/s/groups/g/redrive", "{\"offset\":-1}", "{\"offset\": N}"},
        {POST, "t/ns/s/groups/g/redrive", "{\"offset\":1,\"x\":2}", "{\"offset\": N}"},
        {POST, "t/ns/s/groups/g/discard", "{\"offset\":\"1\"}", "{\"offset\": N}"},
        {POST, "t/ns/s/groups/g/discard", "[1]", "{\"offset\": N}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fx_admin_resp r;
        if (call(NULL, cases[i].route, cases[i].rest, cases[i].body, &r) != 400)
            fail_msg("%s: %u", cases[i].body, r.status);
        if (strstr(error_of(&r), cases[i].why) == NULL)
            fail_msg("%s: '%s' lacks '%s'", cases[i].body, error_of(&r), cases[i].why);
        fx_admin_resp_deinit(&r);
    }
}

/* ---- with a broker ---------------------------------------------------------- */

static char dir[64];
static fx_broker *broker;

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

/* Starts |broker| with |max_groups| groups per stream (0: the default) and,
 * when |durable|, durable storage under the state directory. */
static int broker_up_with(uint32_t max_groups, bool durable)
{
    snprintf(dir, sizeof(dir), "/tmp/fx-routes-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    fx_broker_opts o;
    fx_broker_opts_default(&o);
    o.quic.state_dir = dir;
    if (max_groups > 0)
        o.max_groups_per_stream = max_groups;
    if (durable)
        o.durable.dir = dir;
    if (fx_broker_new(&broker, &o) != 0)
        return -1;
    return fx_broker_start(broker);
}

static int broker_up(void **state)
{
    return broker_up_with(0, false);
}

static int broker_up_two_groups(void **state)
{
    return broker_up_with(2, false);
}

static int broker_up_durable(void **state)
{
    return broker_up_with(0, true);
}

static int broker_down(void **state)
{
    fx_broker_free(broker);
    broker = NULL;
    return nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void test_put_creates_then_finds_and_list_names_it(void **state)
{
    fx_admin_resp r;
    assert_int_equal(call(broker, PUT, "t1/ns/s1", NULL, &r), 201);
    json_t *j = json_loadb(r.body, r.len, 0, NULL);
    assert_true(json_is_true(json_object_get(j, "created")));
    assert_true(json_is_false(json_object_get(j, "durable")));
    assert_string_equal(json_string_value(json_object_get(j, "stream")), "s1");
    json_decref(j);
    fx_admin_resp_deinit(&r);
    assert_int_equal(call(broker, PUT, "t1/ns/s1", "", &r), 200);
    j = json_loadb(r.body, r.len, 0, NULL);
    assert_true(json_is_false(json_object_get(j, "created")));
    json_decref(j);
    fx_admin_resp_deinit(&r);
    assert_int_equal(call(broker, LIST_STREAMS, "", NULL, &r), 200);
    assert_string_equal(r.content_type, FX_ADMIN_JSON);
    assert_non_null(memmem(r.body, r.len, "\"s1\"", 4));
    fx_admin_resp_deinit(&r);
    assert_int_equal(call(broker, LIST_SUBS, "", NULL, &r), 200);
    fx_admin_resp_deinit(&r);
}

static void test_delete_answers_200_then_404(void **state)
{
    fx_admin_resp r;
    assert_int_equal(call(broker, PUT, "t1/ns/gone", NULL, &r), 201);
    fx_admin_resp_deinit(&r);
    assert_int_equal(call(broker, DELETE, "t1/ns/gone", NULL, &r), 200);
    json_t *j = json_loadb(r.body, r.len, 0, NULL);
    assert_true(json_is_true(json_object_get(j, "deleted")));
    json_decref(j);
    fx_admin_resp_deinit(&r);
    assert_int_equal(call(broker, DELETE, "t1/ns/gone", NULL, &r), 404);
    fx_admin_resp_deinit(&r);
}

static void test_broker_refusals_map_to_statuses(void **state)
{
    fx_admin_resp r;
    /* An invalid name is the broker's 400, with its reason. */
    assert_int_equal(call(broker, PUT, "t1//s", NULL, &r), 400);
    assert_true(strlen(error_of(&r)) > 0);
    fx_admin_resp_deinit(&r);
    /* PATCH of a stream that does not exist. */
    assert_int_equal(call(broker, PATCH, "t1/ns/none", "{\"retention_bytes\":10}", &r), 404);
    fx_admin_resp_deinit(&r);
    /* PATCH of a stream in memory: retention is for durable streams. */
    assert_int_equal(call(broker, PUT, "t1/ns/mem", NULL, &r), 201);
    fx_admin_resp_deinit(&r);
    assert_int_equal(call(broker, PATCH, "t1/ns/mem", "{\"retention_bytes\":10}", &r), 400);
    fx_admin_resp_deinit(&r);
}

/* ---- consumer groups with a broker ------------------------------------------------ */

/* Parses the JSON answer in |r| (the caller decrefs). */
static json_t *answer_of(const fx_admin_resp *r)
{
    json_t *j = json_loadb(r->body, r->len, 0, NULL);
    assert_non_null(j);
    return j;
}

/* Asserts route |route| on |rest| answers |status| with |has| in its body. */
static void expect(int route, const char *rest, const char *body, unsigned status, const char *has)
{
    fx_admin_resp r;
    unsigned got = call(broker, route, rest, body, &r);
    if (got != status || (has != NULL && memmem(r.body, r.len, has, strlen(has)) == NULL))
        fail_msg("%s %s: %u %.*s (want %u with '%s')", route == GET ? "GET" : "call", rest, got,
                 (int)r.len, r.body ? r.body : "", status, has ? has : "");
    fx_admin_resp_deinit(&r);
}

static void test_group_put_get_seek_dead_letters_delete(void **state)
{
    expect(PUT, "t1/ns/s.a", NULL, 201, NULL);
    fx_admin_resp r;
    assert_int_equal(call(broker, PUT, "t1/ns/s.a/groups/g1", NULL, &r), 201);
    json_t *j = answer_of(&r);
    assert_true(json_is_true(json_object_get(j, "created")));
    assert_string_equal(json_string_value(json_object_get(j, "stream")), "s.a");
    assert_string_equal(json_string_value(json_object_get(j, "group")), "g1");
    json_decref(j);
    fx_admin_resp_deinit(&r);
    /* Again: found, 200, whatever start the body asks. */
    expect(PUT, "t1/ns/s.a/groups/g1", "{\"start\":\"new\"}", 200, "\"created\":false");
    expect(PUT, "t1/ns/s.a/groups/g2", "{\"start\":\"last\"}", 201, NULL);
    expect(PUT, "t1/ns/s.a/groups/g3", "{\"start\":{\"offset\":0}}", 201, NULL);

    assert_int_equal(call(broker, GET, "t1/ns/s.a/groups", NULL, &r), 200);
    assert_string_equal(r.content_type, FX_ADMIN_JSON);
    j = answer_of(&r);
    assert_int_equal(json_array_size(json_object_get(j, "groups")), 3);
    json_decref(j);
    fx_admin_resp_deinit(&r);
    assert_int_equal(call(broker, GET, "t1/ns/s.a/groups/g1", NULL, &r), 200);
    j = answer_of(&r);
    assert_string_equal(json_string_value(json_object_get(j, "group")), "g1");
    assert_int_equal(json_integer_value(json_object_get(j, "next")), 0);
    assert_true(json_is_array(json_object_get(j, "members")));
    json_decref(j);
    fx_admin_resp_deinit(&r);

    expect(POST, "t1/ns/s.a/groups/g1/seek", "{\"start\":\"new\"}", 200, "\"start\":\"new\"");
    expect(POST, "t1/ns/s.a/groups/g1/seek", "{\"start\":{\"offset\":0}}", 200,
           "\"start\":{\"offset\":0}");
    expect(GET, "t1/ns/s.a/groups/g1/dead-letters", NULL, 200, "\"dead_letters\":[]");
    expect(POST, "t1/ns/s.a/groups/g1/redrive", "{\"offset\":0}", 409,
           "offset 0 is not a dead letter of g1");
    expect(POST, "t1/ns/s.a/groups/g1/discard", "{\"offset\":3}", 409,
           "offset 3 is not a dead letter of g1");
    expect(DELETE, "t1/ns/s.a/groups/g1", NULL, 200, "\"deleted\":true");
    expect(DELETE, "t1/ns/s.a/groups/g1", NULL, 404, "consumer group not found: g1");
    expect(GET, "t1/ns/s.a/groups/g1", NULL, 404, "consumer group not found");
    expect(GET, "t1/ns/s.a/groups/g1/dead-letters", NULL, 404, "consumer group not found");
    expect(POST, "t1/ns/s.a/groups/g1/seek", "{\"start\":\"all\"}", 404, "not found");
    expect(POST, "t1/ns/s.a/groups/g1/redrive", "{\"offset\":0}", 404, "not found");
    expect(POST, "t1/ns/s.a/groups/g1/discard", "{\"offset\":0}", 404, "not found");
    /* The stream itself is untouched by its groups' routes. */
    expect(PUT, "t1/ns/s.a", NULL, 200, "\"created\":false");
}

static void test_group_calls_on_a_missing_stream_are_404(void **state)
{
    const char *want = "stream not found: tenant=t1 namespace=ns stream=none";
    expect(GET, "t1/ns/none/groups", NULL, 404, want);
    expect(GET, "t1/ns/none/groups/g", NULL, 404, want);
    expect(PUT, "t1/ns/none/groups/g", NULL, 404, want);
    expect(POST, "t1/ns/none/groups/g/seek", "{\"start\":\"new\"}", 404, want);
    expect(DELETE, "t1/ns/none/groups/g", NULL, 404, want);
    expect(GET, "t1/ns/none/groups/g/dead-letters", NULL, 404, want);
    expect(POST, "t1/ns/none/groups/g/redrive", "{\"offset\":1}", 404, want);
    expect(POST, "t1/ns/none/groups/g/discard", "{\"offset\":1}", 404, want);
}

static void test_group_refusals_map_to_statuses(void **state)
{
    expect(PUT, "t1/ns/s", NULL, 201, NULL);
    /* An offset past the tail (the stream is empty: its tail is 0). */
    expect(PUT, "t1/ns/s/groups/g", "{\"start\":{\"offset\":1}}", 409, "past the stream's tail");
    expect(PUT, "t1/ns/s/groups/g", "{\"start\":{\"offset\":0}}", 201, NULL);
    expect(POST, "t1/ns/s/groups/g/seek", "{\"start\":{\"offset\":7}}", 409, "past");
    /* A name over 128 bytes is the broker's 400. */
    char rest[256];
    snprintf(rest, sizeof(rest), "t1/ns/s/groups/%0129d", 0);
    expect(PUT, rest, NULL, 400, "1 to 128 bytes");
    /* The setup allows two groups per stream. */
    expect(PUT, "t1/ns/s/groups/h", NULL, 201, NULL);
    expect(PUT, "t1/ns/s/groups/i", NULL, 429, "max_groups_per_stream");
    expect(DELETE, "t1/ns/s/groups/h", NULL, 200, NULL);
    expect(PUT, "t1/ns/s/groups/i", NULL, 201, NULL);
}

static void test_group_on_a_durable_stream_is_created(void **state)
{
    expect(PUT, "t1/ns/d", "{\"durable\":true}", 201, "\"durable\":true");
    expect(PUT, "t1/ns/d/groups/g", NULL, 201, NULL);
    expect(GET, "t1/ns/d/groups/g", NULL, 200, "\"durable\":true");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_route_table_names_methods_paths_and_the_broker),
    cmocka_unit_test(test_paths_without_three_parts_are_400),
    cmocka_unit_test(test_bad_bodies_are_400_with_the_reason),
    cmocka_unit_test_setup_teardown(test_put_creates_then_finds_and_list_names_it, broker_up,
                                    broker_down),
    cmocka_unit_test_setup_teardown(test_delete_answers_200_then_404, broker_up, broker_down),
    cmocka_unit_test_setup_teardown(test_broker_refusals_map_to_statuses, broker_up, broker_down),
    cmocka_unit_test(test_group_paths_that_are_malformed_are_400_with_the_group_help),
    cmocka_unit_test(test_stream_paths_named_groups_stay_stream_paths),
    cmocka_unit_test(test_group_start_bodies_that_are_bad_are_400_with_the_reason),
    cmocka_unit_test_setup_teardown(test_group_put_get_seek_dead_letters_delete, broker_up,
                                    broker_down),
    cmocka_unit_test_setup_teardown(test_group_calls_on_a_missing_stream_are_404, broker_up,
                                    broker_down),
    cmocka_unit_test_setup_teardown(test_group_refusals_map_to_statuses, broker_up_two_groups,
                                    broker_down),
    cmocka_unit_test_setup_teardown(test_group_on_a_durable_stream_is_created, broker_up_durable,
                                    broker_down),
};

FX_TEST_MAIN(tests)
