/* Unit twin of src/broker/durable_admin.c: the retention overrides of
 * durable streams (checked by the caller, written to the catalogue and
 * applied by the stream's storage thread) and the durable fields of the
 * stream list, on the one-thread broker of conn_fixture.h over the
 * in-memory file system of dur_fixture.h. The caller's wait for the
 * storage thread runs the fake loops (cf_waits.h). */
/* fx-test-libs: fx_broker fx_storage fx_wire fx_base */
#include "unit/conn_fixture.h"

#include "unit/cf_waits.h"
#include "unit/dur_fixture.h"

#include <jansson.h>

#define WAIT_NS (5 * FX_NS_PER_S)

static cf *a_new(void)
{
    df_mem_new();
    cf *f = df_new();
    cw_use(f);
    cf_auth(f, 0, "t1");
    cf_publish_json(f, 0, "t1", "d", "a", 1); /* t1/default/d: durable, its log open */
    cf_settle(f);
    cf_expect_msg(f, 0, FX_MSG_PUBLISH_OK, NULL);
    return f;
}

static void a_free(cf *f)
{
    cf_free(f);
    cw_use(NULL);
    df_mem_free();
}

/* Sets the overrides of t1/default/|stream| (|durable| as the caller
 * states it, -1: not stated). */
static int set_ret(cf *f, const char *stream, fx_broker_retention r, int durable, uint64_t *pbytes,
                   uint64_t *pseconds, fx_registry_err *err)
{
    return fx_broker_set_stream_retention(f->b, "t1", "default", stream, &r, durable, WAIT_NS,
                                          pbytes, pseconds, err);
}

/* The list entry of t1/default/|stream| (json_decref |*proot|). */
static json_t *listed(cf *f, const char *stream, json_t **proot)
{
    char *text = NULL;
    assert_int_equal(fx_broker_list_streams(f->b, WAIT_NS, &text), 0);
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    free(text);
    assert_non_null(j);
    *proot = j;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(j, "streams"), i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "stream")), stream) == 0)
            return e;
    }
    fail_msg("stream %s not listed", stream);
    return NULL;
}

static json_int_t int_of(const json_t *e, const char *key)
{
    json_t *v = json_object_get(e, key);
    if (!json_is_integer(v))
        fail_msg("\"%s\" is not an integer", key);
    return json_integer_value(v);
}

/* Each override changes alone (the other keeps its value), 0 drops one;
 * the list shows them with the open log's figures, and the catalogue keeps
 * them after the broker is gone. */
static void test_retention_set_persists_and_described(void **state)
{
    (void)state;
    cf *f = a_new();
    uint64_t bytes = 1, seconds = 1;
    fx_registry_err err;
    fx_broker_retention r = {.set_bytes = true, .bytes = 1 << 20};
    assert_int_equal(set_ret(f, "d", r, -1, &bytes, &seconds, &err), 0);
    assert_int_equal(bytes, 1 << 20);
    assert_int_equal(seconds, 0);
    r = (fx_broker_retention){.set_seconds = true, .seconds = 3600};
    assert_int_equal(set_ret(f, "d", r, 1, &bytes, &seconds, &err), 0);
    assert_int_equal(bytes, 1 << 20);
    assert_int_equal(seconds, 3600);
    json_t *root;
    json_t *e = listed(f, "d", &root);
    assert_true(json_is_true(json_object_get(e, "durable")));
    assert_string_equal(json_string_value(json_object_get(e, "durable_state")), "open");
    assert_int_equal(int_of(e, "log_first_offset"), 0);
    assert_int_equal(int_of(e, "log_next_offset"), 1);
    assert_int_equal(int_of(e, "retention_bytes"), 1 << 20);
    assert_int_equal(int_of(e, "retention_seconds"), 3600);
    json_decref(root);
    r = (fx_broker_retention){.set_bytes = true, .bytes = 0};
    assert_int_equal(set_ret(f, "d", r, -1, &bytes, &seconds, &err), 0);
    assert_int_equal(bytes, 0);
    assert_int_equal(seconds, 3600);
    e = listed(f, "d", &root);
    assert_true(json_is_null(json_object_get(e, "retention_bytes")));
    assert_int_equal(int_of(e, "retention_seconds"), 3600);
    json_decref(root);
    cf_free(f);
    cw_use(NULL);
    fx_catalog *cat;
    char cerr[256];
    assert_int_equal(fx_catalog_open(&cat, fx_memio_sio(df_mem), DF_ROOT, cerr, sizeof(cerr)), 0);
    const fx_catalog_entry *ce = fx_catalog_find(cat, "t1", "default", "d");
    assert_non_null(ce);
    assert_int_equal(ce->retention_bytes, 0);
    assert_int_equal(ce->retention_seconds, 3600);
    fx_catalog_free(cat);
    df_mem_free();
}

/* Refused before the storage thread is asked, each with its text: a bound
 * over the maximum, a stream that does not exist, a stream kept in memory,
 * and a stated durability that is not the stream's. */
static void test_retention_refusals(void **state)
{
    (void)state;
    cf *f = a_new();
    fx_registry_err err;
    fx_broker_retention r = {.set_bytes = true, .bytes = FX_BROKER_RETENTION_MAX_BYTES + 1};
    assert_int_equal(set_ret(f, "d", r, -1, NULL, NULL, &err), -ERANGE);
    assert_non_null(strstr(err.msg, "retention_bytes must be at most"));
    r = (fx_broker_retention){.set_seconds = true, .seconds = 60};
    assert_int_equal(set_ret(f, "nope", r, -1, NULL, NULL, &err), FX_ENOSTREAM);
    assert_non_null(strstr(err.msg, "stream not found"));
    bool created, durable;
    assert_int_equal(
        fx_broker_create_stream_durable(f->b, "t1", "default", "mem", 0, &created, &durable, &err),
        0);
    assert_true(created);
    assert_false(durable);
    assert_int_equal(set_ret(f, "mem", r, -1, NULL, NULL, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "durable streams only"));
    assert_int_equal(set_ret(f, "d", r, 0, NULL, NULL, &err), -EEXIST);
    assert_non_null(strstr(err.msg, "changing stream durability"));
    json_t *root;
    json_t *e = listed(f, "d", &root);
    assert_true(json_is_null(json_object_get(e, "retention_seconds")));
    json_decref(root);
    a_free(f);
}

/* The catalogue cannot be written: the change is answered with the
 * error, nothing is shown as set, and the next change goes through. */
static void test_retention_catalogue_failure_answered(void **state)
{
    (void)state;
    cf *f = a_new();
    fx_registry_err err;
    fx_broker_retention r = {.set_seconds = true, .seconds = 60};
    fx_memio_fail(df_mem, FX_MEMIO_RENAME, -EIO, 1);
    int rv = set_ret(f, "d", r, -1, NULL, NULL, &err);
    assert_true(rv < 0 && rv != FX_ETIMEDOUT);
    assert_non_null(strstr(err.msg, "cannot change the retention of t1/default/d"));
    json_t *root;
    json_t *e = listed(f, "d", &root);
    assert_true(json_is_null(json_object_get(e, "retention_seconds")));
    json_decref(root);
    uint64_t seconds = 0;
    assert_int_equal(set_ret(f, "d", r, -1, NULL, &seconds, &err), 0);
    assert_int_equal(seconds, 60);
    a_free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_retention_set_persists_and_described),
    cmocka_unit_test(test_retention_refusals),
    cmocka_unit_test(test_retention_catalogue_failure_answered),
};

FX_TEST_MAIN(tests)
