/* The groups of the broker YAML's `groups:` key (src/server/pregroups.c)
 * created on an in-process broker the way felix-broker creates them at
 * start: the configuration loaded from YAML text, the broker started with
 * the configured streams, then fx_pregroups_create. A group on a stream the
 * configuration does not list gets that stream in memory; a group on a
 * durable stream is created; one whose start is past the tail fails with a
 * sentence naming the entry. */
/* fx-test-libs: fx_server fx_broker fx_storage fx_quic fx_wire fx_base */
#include "integ/fixture.h"

#include <errno.h>
#include <jansson.h>

#include "server/config.h"
#include "server/pregroups.h"

#define WAIT_NS (5ull * 1000000000ull)

typedef struct gfix {
    char dir[64], durable[96];
    fx_config c;
    fx_broker_stream_name names[8];
    fx_broker *b;
} gfix;

/* Loads |yaml| into |f|->c, then starts a broker with its streams (and
 * durable storage under the state dir when |durable|). */
static void gfix_start(gfix *f, const char *yaml, bool durable)
{
    fix_state_dir_new(f->dir, sizeof(f->dir), "pgrp");
    snprintf(f->durable, sizeof(f->durable), "%s/durable", f->dir);
    fx_config_defaults(&f->c);
    fx_config_diag d = {0};
    fx_config_src src = {
        .text = yaml, .text_name = "groups.yaml", .memory_target_bytes = 1ull << 40};
    if (fx_config_load(&f->c, &src, &d) != 0)
        fail_msg("config: %s", d.error);
    assert_true(f->c.nstreams <= 8);
    for (size_t i = 0; i < f->c.nstreams; i++)
        f->names[i] = (fx_broker_stream_name){f->c.streams[i].tenant, f->c.streams[i].ns,
                                              f->c.streams[i].stream};
    fx_broker_opts bo;
    fix_broker_opts(&bo, f->dir);
    bo.port = 0;
    bo.workers = 2;
    bo.streams = f->names;
    bo.nstreams = f->c.nstreams;
    bo.durable.dir = durable ? f->durable : NULL;
    assert_int_equal(fx_broker_new(&f->b, &bo), 0);
    assert_int_equal(fx_broker_start(f->b), 0);
}

static void gfix_stop(gfix *f)
{
    fx_broker_free(f->b);
    fx_config_deinit(&f->c);
    fix_rm_dir(f->dir);
}

/* The broker's JSON for |group| of |stream| (tenant t1, namespace default),
 * or NULL when it has no such group. */
static json_t *group_json(gfix *f, const char *stream, const char *group)
{
    char *s = NULL;
    fx_registry_err err = {0};
    int rv = fx_broker_list_groups(f->b, "t1", "default", stream, group, WAIT_NS, &s, &err);
    if (rv == FX_ENOSTREAM)
        return NULL;
    assert_int_equal(rv, 0);
    json_t *j = json_loads(s, 0, NULL);
    free(s);
    assert_non_null(j);
    return j;
}

static void test_configured_groups_exist_after_start(void **state)
{
    (void)state;
    gfix f;
    gfix_start(&f,
               "streams: [t1/default/orders]\n"
               "groups:\n"
               "  - t1/default/orders/billing@new\n"
               "  - t1/default/orders/audit\n"
               "  - t1/default/fresh/shipping@last\n",
               false);
    char why[512] = "";
    if (fx_pregroups_create(f.b, &f.c, WAIT_NS, why, sizeof(why)) != 0)
        fail_msg("%s", why);
    const char *want[][2] = {{"orders", "billing"}, {"orders", "audit"}, {"fresh", "shipping"}};
    for (size_t i = 0; i < 3; i++) {
        json_t *j = group_json(&f, want[i][0], want[i][1]);
        if (j == NULL)
            fail_msg("no group %s on stream %s", want[i][1], want[i][0]);
        json_decref(j);
    }
    json_t *none = group_json(&f, "orders", "nobody");
    assert_null(none);
    /* A second pass finds them all: creating is idempotent. */
    assert_int_equal(fx_pregroups_create(f.b, &f.c, WAIT_NS, why, sizeof(why)), 0);
    gfix_stop(&f);
}

static void test_group_on_a_durable_stream_is_created(void **state)
{
    (void)state;
    gfix f;
    gfix_start(&f, "groups: [t1/default/kept/billing]\n", true);
    bool created = false;
    fx_registry_err err = {0};
    assert_int_equal(
        fx_broker_create_stream_durable(f.b, "t1", "default", "kept", 1, &created, NULL, &err), 0);
    assert_true(created);
    char why[512] = "";
    assert_int_equal(fx_pregroups_create(f.b, &f.c, WAIT_NS, why, sizeof(why)), 0);
    json_t *j = group_json(&f, "kept", "billing");
    assert_non_null(j);
    assert_true(json_is_true(json_object_get(j, "durable")));
    assert_int_equal(json_integer_value(json_object_get(j, "next")), 0);
    json_decref(j);
    gfix_stop(&f);
}

static void test_start_past_the_tail_fails_naming_the_entry(void **state)
{
    (void)state;
    gfix f;
    gfix_start(&f, "groups: [t1/default/orders/a, t1/default/orders/b@5]\n", false);
    char why[512] = "";
    assert_int_equal(fx_pregroups_create(f.b, &f.c, WAIT_NS, why, sizeof(why)),
                     FX_ECURSOR_IN_FUTURE);
    if (!strstr(why, "groups entry t1/default/orders/b: "))
        fail_msg("unexpected reason: %s", why);
    json_t *a = group_json(&f, "orders", "a"); /* the entries before stay */
    assert_non_null(a);
    json_decref(a);
    gfix_stop(&f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_configured_groups_exist_after_start),
    cmocka_unit_test(test_group_on_a_durable_stream_is_created),
    cmocka_unit_test(test_start_past_the_tail_fails_naming_the_entry),
};

FX_TEST_MAIN(tests)
