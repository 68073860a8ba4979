/* Integration tests of the durable quotas (docs/durability.md, "Quotas"):
 * durable streams per tenant (the admin API answers 429, a publish's
 * auto-creation "storage quota exceeded"), bytes on disk per tenant and for
 * the whole broker (an append past them is refused, counted, and other
 * tenants keep publishing), and the subscribe rule (a subscribe under
 * durable_default creates no durable stream: no catalogue entry, no
 * directory). A real broker, its admin endpoint and libfelix clients in
 * this process (admin_fixture.h). */
/* fx-test-libs: fx_broker fx_client fx_server fx_storage fx_quic fx_wire fx_base */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <stdlib.h>

#include "integ/admin_fixture.h"
#include "integ/durable_fixture.h"
#include "storage/catalog.h"
#include "storage/syncpol.h"

/* ---- helpers ------------------------------------------------------------------ */

/* A broker with its durable root in a fresh temp dir |root|, 64 KiB
 * segments (preallocated) and fsync none. */
static E *q_new(char *root, size_t cap)
{
    E *e = e_new();
    snprintf(root, cap, "/tmp/fxquoXXXXXX");
    assert_non_null(mkdtemp(root));
    e->bo.durable.dir = root;
    e->bo.durable.fsync_mode = FX_FSYNC_NONE;
    e->bo.durable.segment_bytes = 64u << 10;
    return e;
}

static fx_client *client_as(E *e, const char *tenant)
{
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, tenant, "any-token");
    o.reconnect = false;
    return fix_connect(&o);
}

/* Publishes |len| bytes acked to NS/|stream|; the refusal's text in |why|. */
static int pub(fx_client *c, const char *stream, size_t len, char *why, size_t cap)
{
    static char buf[16384];
    assert_true(len <= sizeof(buf));
    memset(buf, 'q', len);
    why[0] = '\0';
    int rv = fx_publish(c, NS, stream, buf, len, FX_ACK_PER_MESSAGE);
    if (rv != 0)
        fx_client_last_error(c, why, cap);
    return rv;
}

static void pub_ok(fx_client *c, const char *stream, size_t len)
{
    char why[512];
    if (pub(c, stream, len, why, sizeof(why)) != 0)
        fail_msg("publish to %s: %s", stream, why);
}

static void pub_refused(fx_client *c, const char *stream, size_t len, const char *want)
{
    char why[512];
    assert_int_not_equal(pub(c, stream, len, why, sizeof(why)), 0);
    if (strstr(why, want) == NULL)
        fail_msg("publish to %s refused with '%s', want '%s'", stream, why, want);
}

static void put(E *e, const char *stream, int status, const char *has)
{
    char path[256];
    http_resp r;
    snprintf(path, sizeof(path), "/v1/streams/" T "/" NS "/%s", stream);
    http_body(e, "PUT", path, "{\"durable\": true}", &r);
    if (r.status != status || strstr(r.body, has) == NULL)
        fail_msg("PUT %s: %d %s (want %d with '%s')", path, r.status, r.body, status, has);
}

/* Publishes |len|-byte messages to |stream| until one is refused; returns
 * how many were acknowledged (the test fails if none is refused). */
static int fill(fx_client *c, const char *stream, size_t len)
{
    char why[512];
    for (int n = 0; n < 200; n++) {
        if (pub(c, stream, len, why, sizeof(why)) == 0)
            continue;
        if (strstr(why, "storage quota exceeded") == NULL)
            fail_msg("publish %d to %s refused with '%s'", n, stream, why);
        return n;
    }
    fail_msg("200 publishes to %s and none refused", stream);
    return 0;
}

/* ---- streams per tenant ---------------------------------------------------------- */

static void test_durable_streams_beyond_the_tenant_quota_are_refused(void **state)
{
    (void)state;
    char root[64];
    E *e = q_new(root, sizeof(root));
    e->bo.durable.durable_default = true;
    e->bo.durable.tenant_streams_max = 2;
    e_start(e);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_client *c = client_as(e, T);
    put(e, "a", 201, "\"durable\":true");
    pub_ok(c, "b", 10); /* auto-created durable: the second */
    put(e, "c", 429,
        "storage quota exceeded: tenant t1 holds tenant_durable_streams_max (2) durable "
        "streams: stream not created");
    pub_refused(c, "d", 10, "storage quota exceeded");
    pub_ok(c, "a", 10); /* the existing ones go on */
    fx_client *c2 = client_as(e, "t2");
    pub_ok(c2, "c", 10); /* another tenant has its own count */
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, storage_quota_streams), 2);
    fix_close(c);
    fix_close(c2);
    e_free(e);

    /* Neither refused stream reached the catalogue. */
    fx_catalog *cat;
    char err[256];
    assert_int_equal(fx_catalog_open(&cat, NULL, root, err, sizeof(err)), 0);
    assert_non_null(fx_catalog_find(cat, T, NS, "b"));
    assert_null(fx_catalog_find(cat, T, NS, "c"));
    assert_null(fx_catalog_find(cat, T, NS, "d"));
    fx_catalog_free(cat);
    fix_rm_dir(root);
}

/* ---- bytes on disk ------------------------------------------------------------------ */

static void test_appends_beyond_the_tenant_byte_quota_are_refused_and_counted(void **state)
{
    (void)state;
    char root[64];
    E *e = q_new(root, sizeof(root));
    e->bo.durable.durable_default = true;
    e->bo.durable.tenant_bytes_max = 192u << 10; /* three 64 KiB segments */
    e_start(e);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_client *c = client_as(e, T);
    fx_subscription *s = NULL;
    int n = fill(c, "s", 8192);
    /* Each segment holds 7 messages of 8 KiB; the fourth would pass the
     * bound with its reservation. */
    assert_true(n >= 14 && n <= 24);
    /* Still refused (nothing was written), also to another stream of the
     * tenant (its segment's reservation would pass the bound too). */
    pub_refused(c, "s", 8192, "publish failed: storage quota exceeded");
    pub_refused(c, "s2", 10, "storage quota exceeded");
    fx_client *c2 = client_as(e, "t2");
    pub_ok(c2, "s", 8192); /* another tenant is not held by t1's bound */
    fx_metrics_snapshot_take(&b);
    assert_true(DELTA(a, b, storage_quota_bytes) >= 3);
    assert_int_equal(DELTA(a, b, storage_quota_broker_bytes), 0);
    assert_int_equal(DELTA(a, b, storage_errors), 0);
    /* A subscriber from earliest sees exactly the acknowledged messages. */
    fx_start from = {.kind = FX_START_EARLIEST};
    s = fix_subscribe(c, "s", &from);
    for (int i = 0; i < n; i++) {
        fx_event ev;
        assert_int_equal(fx_subscription_next(s, &ev, HANG_MS), 0);
        assert_int_equal(ev.offset, (uint64_t)i);
    }
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, 100), FX_ETIMEDOUT);
    fx_unsubscribe(s);
    fix_close(c);
    fix_close(c2);
    e_free(e);
    fix_rm_dir(root);
}

static void test_the_broker_wide_byte_bound_holds_every_tenant(void **state)
{
    (void)state;
    char root[64];
    E *e = q_new(root, sizeof(root));
    e->bo.durable.durable_default = true;
    e->bo.durable.tenant_bytes_max = 0;
    e->bo.durable.bytes_max = 192u << 10;
    e_start(e);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_client *c = client_as(e, T);
    int n = fill(c, "s", 8192);
    assert_true(n >= 14 && n <= 24);
    fx_client *c2 = client_as(e, "t2");
    pub_refused(c2, "s", 10, "storage quota exceeded");
    fx_metrics_snapshot_take(&b);
    assert_true(DELTA(a, b, storage_quota_broker_bytes) >= 2);
    assert_int_equal(DELTA(a, b, storage_quota_bytes), 0);
    fix_close(c);
    fix_close(c2);
    e_free(e);
    fix_rm_dir(root);
}

/* ---- the subscribe rule ------------------------------------------------------------ */

/* The names in |dir| but "." and "..", space-separated; returns how many. */
static int dir_entries(const char *dir, char *names, size_t cap)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    names[0] = '\0';
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        size_t len = strlen(names);
        snprintf(names + len, cap - len, "%s ", de->d_name);
        n++;
    }
    closedir(d);
    return n;
}

static void test_a_subscribe_under_durable_default_creates_no_durable_stream(void **state)
{
    (void)state;
    char root[64];
    E *e = q_new(root, sizeof(root));
    e->bo.durable.durable_default = true;
    e_start(e);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_client *c = client_as(e, T);
    fx_subscription *s = NULL;
    assert_int_not_equal(fx_subscribe(&s, c, NS, "ghost", NULL), 0);
    char why[512];
    fx_client_last_error(c, why, sizeof(why));
    if (strstr(why, "stream not found") == NULL || strstr(why, "not by a subscribe") == NULL)
        fail_msg("subscribe refused with '%s'", why);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, registry_subscribe_not_created), 1);
    /* No stream, no catalogue entry, no directory. */
    json_t *j = get_json(e, "/v1/streams");
    assert_int_equal(json_array_size(json_object_get(j, "streams")), 0);
    json_decref(j);
    char names[1024];
    dir_entries(root, names, sizeof(names));
    if (strstr(names, "ghost") != NULL)
        fail_msg("a directory for the subscribe: %s", names);
    fx_catalog *cat;
    char err[256];
    assert_int_equal(fx_catalog_open(&cat, NULL, root, err, sizeof(err)), 0);
    assert_int_equal(fx_catalog_count(cat), 0);
    fx_catalog_free(cat);

    /* The first publish creates it durable; the subscribe then works. */
    pub_ok(c, "ghost", 5);
    fx_start from = {.kind = FX_START_EARLIEST};
    s = fix_subscribe(c, "ghost", &from);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, HANG_MS), 0);
    assert_int_equal(ev.offset, 0);
    fx_unsubscribe(s);
    fix_close(c);
    e_free(e);
    assert_int_equal(fx_catalog_open(&cat, NULL, root, err, sizeof(err)), 0);
    assert_non_null(fx_catalog_find(cat, T, NS, "ghost"));
    fx_catalog_free(cat);
    fix_rm_dir(root);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_durable_streams_beyond_the_tenant_quota_are_refused),
    cmocka_unit_test(test_appends_beyond_the_tenant_byte_quota_are_refused_and_counted),
    cmocka_unit_test(test_the_broker_wide_byte_bound_holds_every_tenant),
    cmocka_unit_test(test_a_subscribe_under_durable_default_creates_no_durable_stream),
};

FX_TEST_MAIN(tests)
