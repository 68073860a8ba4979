/* Unit tests for admin_routes.c: the broker's route table, and its handlers
 * called directly (no HTTP): requests refused before the broker is asked
 * (bad paths, bad bodies, retention without durability, an empty PATCH),
 * then create, list, delete and the error statuses against an in-process
 * broker on 127.0.0.1 port 0. */
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

enum { LIST_STREAMS, PUT, PATCH, DELETE, LIST_SUBS };

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
    const char *want[][2] = {{"GET", "/v1/streams"},
                             {"PUT", "/v1/streams/"},
                             {"PATCH", "/v1/streams/"},
                             {"DELETE", "/v1/streams/"},
                             {"GET", "/v1/subscriptions"}};
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
    const char *bad[] = {"", "t", "t/ns", "t/ns/s/extra"};
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

/* ---- with a broker ---------------------------------------------------------- */

static char dir[64];
static fx_broker *broker;

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

static int broker_up(void **state)
{
    snprintf(dir, sizeof(dir), "/tmp/fx-routes-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    fx_broker_opts o;
    fx_broker_opts_default(&o);
    o.quic.state_dir = dir;
    if (fx_broker_new(&broker, &o) != 0)
        return -1;
    return fx_broker_start(broker);
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

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_route_table_names_methods_paths_and_the_broker),
    cmocka_unit_test(test_paths_without_three_parts_are_400),
    cmocka_unit_test(test_bad_bodies_are_400_with_the_reason),
    cmocka_unit_test_setup_teardown(test_put_creates_then_finds_and_list_names_it, broker_up,
                                    broker_down),
    cmocka_unit_test_setup_teardown(test_delete_answers_200_then_404, broker_up, broker_down),
    cmocka_unit_test_setup_teardown(test_broker_refusals_map_to_statuses, broker_up, broker_down),
};

FX_TEST_MAIN(tests)
