/* Unit tests for fx_registry: lookup and auto-creation, name rules, the
 * per-tenant limit and max_tenants, deletion and stale handles, lookup by
 * name, idle expiry of auto-created streams, concurrent resolution. */
/* fx-test-libs: fx_broker fx_wire fx_base */
#include "base/loop.h"
#include "base/metrics.h"
#include "broker/registry.h"
#include "felix/error.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fx_test.h"

static fx_wire_slice S(const char *s)
{
    return (fx_wire_slice){.ptr = (const uint8_t *)s, .len = strlen(s)};
}

static fx_registry *mkreg(bool auto_create, uint32_t max_per_tenant)
{
    fx_registry *r = NULL;
    fx_registry_opts o = {.auto_create = auto_create, .max_streams_per_tenant = max_per_tenant};
    assert_int_equal(fx_registry_new(&r, &o), 0);
    return r;
}

static void test_unknown_stream_with_autocreate_off_is_not_found(void **state)
{
    fx_registry *r = mkreg(false, 0);
    fx_stream_handle *h = NULL;
    fx_registry_err err = {0};
    assert_int_equal(fx_registry_resolve(r, S("t1"), S("default"), S("demo"), &h, &err),
                     FX_ENOSTREAM);
    assert_null(h);
    assert_int_equal(err.code, FX_ENOSTREAM);
    assert_string_equal(err.msg, "stream not found: tenant=t1 namespace=default stream=demo");
    assert_int_equal(fx_registry_count(r), 0);

    /* Created by the admin path, the same lookup then succeeds. */
    bool created = false;
    assert_int_equal(fx_registry_create(r, S("t1"), S("default"), S("demo"), NULL, &created, &err),
                     0);
    assert_true(created);
    assert_int_equal(fx_registry_resolve(r, S("t1"), S("default"), S("demo"), &h, &err), 0);
    assert_string_equal(fx_stream_handle_tenant(h), "t1");
    assert_string_equal(fx_stream_handle_namespace(h), "default");
    assert_string_equal(fx_stream_handle_stream(h), "demo");
    fx_stream_handle_unref(h);
    fx_registry_free(r);
}

static void count_cb(fx_stream_handle *h, void *user)
{
    uint64_t *sum = user;
    *sum += fx_stream_handle_id(h);
}

static void test_autocreate_on_first_use_gives_dense_ids_from_one(void **state)
{
    fx_registry *r = mkreg(true, 0);
    fx_stream_handle *a, *b, *a2;
    assert_int_equal(fx_registry_resolve(r, S("t1"), S("ns"), S("a"), &a, NULL), 0);
    assert_int_equal(fx_registry_resolve(r, S("t1"), S("ns"), S("b"), &b, NULL), 0);
    assert_int_equal(fx_registry_resolve(r, S("t1"), S("ns"), S("a"), &a2, NULL), 0);
    assert_int_equal(fx_stream_handle_id(a), 1);
    assert_int_equal(fx_stream_handle_id(b), 2);
    assert_ptr_equal(a, a2);
    assert_int_equal(fx_registry_count(r), 2);
    /* Same stream name under another namespace or tenant is another stream. */
    fx_stream_handle *c, *d;
    assert_int_equal(fx_registry_resolve(r, S("t1"), S("other"), S("a"), &c, NULL), 0);
    assert_int_equal(fx_registry_resolve(r, S("t2"), S("ns"), S("a"), &d, NULL), 0);
    assert_int_equal(fx_stream_handle_id(c), 3);
    assert_int_equal(fx_stream_handle_id(d), 4);
    uint64_t sum = 0;
    fx_registry_foreach(r, count_cb, &sum);
    assert_int_equal(sum, 1 + 2 + 3 + 4);
    bool created = true;
    assert_int_equal(fx_registry_create(r, S("t1"), S("ns"), S("a"), NULL, &created, NULL), 0);
    assert_false(created);
    fx_stream_handle_unref(a);
    fx_stream_handle_unref(a2);
    fx_stream_handle_unref(b);
    fx_stream_handle_unref(c);
    fx_stream_handle_unref(d);
    fx_registry_free(r);
}

static void test_auto_create_respects_max_streams_per_tenant(void **state)
{
    fx_registry *r = mkreg(true, 2);
    fx_registry_err err = {0};
    fx_stream_handle *h;
    assert_int_equal(fx_registry_resolve(r, S("t1"), S("ns"), S("s1"), &h, &err), 0);
    fx_stream_handle_unref(h);
    assert_int_equal(fx_registry_resolve(r, S("t1"), S("ns2"), S("s2"), &h, &err), 0);
    fx_stream_handle_unref(h);
    h = NULL;
    assert_int_equal(fx_registry_resolve(r, S("t1"), S("ns"), S("s3"), &h, &err), FX_EFULL);
    assert_null(h);
    assert_string_equal(err.msg,
                        "tenant t1 has reached max_streams_per_tenant (2): stream not created");
    /* Existing streams still resolve; another tenant has its own allowance. */
    assert_int_equal(fx_registry_resolve(r, S("t1"), S("ns"), S("s1"), &h, &err), 0);
    fx_stream_handle_unref(h);
    assert_int_equal(fx_registry_resolve(r, S("t2"), S("ns"), S("s3"), &h, &err), 0);
    fx_stream_handle_unref(h);
    assert_int_equal(fx_registry_tenant_count(r, S("t1")), 2);
    assert_int_equal(fx_registry_tenant_count(r, S("t2")), 1);
    /* Deleting one frees a slot. */
    assert_true(fx_registry_remove(r, S("t1"), S("ns"), S("s1")));
    assert_int_equal(fx_registry_resolve(r, S("t1"), S("ns"), S("s3"), &h, &err), 0);
    assert_int_equal(fx_stream_handle_id(h), 4);
    fx_stream_handle_unref(h);
    fx_registry_free(r);
}

static void test_deleted_stream_handle_inactive(void **state)
{
    fx_registry *r = mkreg(false, 0);
    fx_stream_handle *h;
    fx_registry_err err = {0};
    assert_int_equal(fx_registry_create(r, S("t1"), S("ns"), S("s"), &h, NULL, &err), 0);
    assert_true(fx_stream_handle_is_active(h));
    assert_int_equal(fx_stream_handle_check(h, &err), 0);

    assert_true(fx_registry_remove(r, S("t1"), S("ns"), S("s")));
    assert_false(fx_registry_remove(r, S("t1"), S("ns"), S("s")));
    assert_false(fx_stream_handle_is_active(h));
    assert_int_equal(fx_stream_handle_check(h, &err), FX_ENOSTREAM);
    assert_string_equal(err.msg, "stream handle inactive: tenant=t1 namespace=ns stream=s");
    assert_int_equal(fx_registry_count(r), 0);
    assert_int_equal(fx_registry_tenant_count(r, S("t1")), 0);
    fx_stream_handle *h2 = NULL;
    assert_int_equal(fx_registry_resolve(r, S("t1"), S("ns"), S("s"), &h2, &err), FX_ENOSTREAM);

    /* Re-created, it is a new stream with a new id; the old handle stays dead. */
    assert_int_equal(fx_registry_create(r, S("t1"), S("ns"), S("s"), &h2, NULL, &err), 0);
    assert_int_equal(fx_stream_handle_id(h2), 2);
    assert_false(fx_stream_handle_is_active(h));
    assert_true(fx_stream_handle_is_active(h2));
    fx_registry_free(r);
    /* Handles outlive the registry, inactive. */
    assert_false(fx_stream_handle_is_active(h2));
    fx_stream_handle_unref(h);
    fx_stream_handle_unref(h2);
}

/* fx_registry_find gives a reference to the active stream of exactly that
 * name: not another tenant's, not a removed one, and creates nothing. */
static void test_find_gives_only_the_active_stream_of_that_name(void **state)
{
    fx_registry *r = mkreg(true, 0);
    assert_int_equal(fx_registry_create(r, S("t1"), S("ns"), S("a"), NULL, NULL, NULL), 0);
    assert_int_equal(fx_registry_create(r, S("t2"), S("ns"), S("b"), NULL, NULL, NULL), 0);

    fx_stream_handle *h = fx_registry_find(r, S("t1"), S("ns"), S("a"));
    assert_non_null(h);
    assert_string_equal(fx_stream_handle_tenant(h), "t1");
    assert_string_equal(fx_stream_handle_namespace(h), "ns");
    assert_string_equal(fx_stream_handle_stream(h), "a");
    assert_true(fx_stream_handle_is_active(h));

    assert_null(fx_registry_find(r, S("t1"), S("ns"), S("b"))); /* t2's */
    assert_null(fx_registry_find(r, S("t2"), S("ns"), S("a")));
    assert_null(fx_registry_find(r, S("t1"), S("other"), S("a")));
    assert_null(fx_registry_find(r, S("t1"), S(""), S("a")));
    assert_int_equal(fx_registry_count(r), 2);

    /* Removed, it is not found; the reference find gave keeps the handle. */
    assert_true(fx_registry_remove(r, S("t1"), S("ns"), S("a")));
    assert_null(fx_registry_find(r, S("t1"), S("ns"), S("a")));
    assert_false(fx_stream_handle_is_active(h));
    fx_stream_handle_unref(h);

    fx_stream_handle *b = fx_registry_find(r, S("t2"), S("ns"), S("b"));
    assert_non_null(b);
    assert_string_equal(fx_stream_handle_tenant(b), "t2");
    fx_stream_handle_unref(b);
    fx_registry_free(r);
}

static void expect_bad(fx_registry *r, fx_wire_slice t, fx_wire_slice n, fx_wire_slice s,
                       const char *msg)
{
    fx_registry_err err = {0};
    fx_stream_handle *h = NULL;
    assert_int_equal(fx_registry_resolve(r, t, n, s, &h, &err), FX_EWIRE_NAME);
    assert_null(h);
    assert_string_equal(err.msg, msg);
    assert_int_equal(fx_registry_create(r, t, n, s, NULL, NULL, &err), FX_EWIRE_NAME);
    assert_string_equal(err.msg, msg);
}

static void test_invalid_names_rejected(void **state)
{
    fx_registry *r = mkreg(true, 0);
    char big[257];
    memset(big, 'x', 256);
    big[256] = '\0';
    const uint8_t bad_utf8[] = {'a', 0xC3, 0x28};
    const uint8_t with_nul[] = {'a', 0, 'b'};
    fx_wire_slice u = {bad_utf8, sizeof(bad_utf8)}, z = {with_nul, sizeof(with_nul)};
    expect_bad(r, S(""), S("ns"), S("s"), "invalid tenant name: empty");
    expect_bad(r, S("t"), S(""), S("s"), "invalid namespace name: empty");
    expect_bad(r, S("t"), S("ns"), S(big), "invalid stream name: 256 bytes, more than 255");
    expect_bad(r, S("t"), u, S("s"), "invalid namespace name: not valid UTF-8");
    expect_bad(r, S("t"), S("ns"), S("a/b"), "invalid stream name: contains '/'");
    expect_bad(r, z, S("ns"), S("s"), "invalid tenant name: contains a NUL byte");
    assert_int_equal(fx_registry_count(r), 0);
    assert_false(fx_registry_remove(r, S("t"), S("ns"), S("a/b")));

    /* The limits themselves are fine: 255 bytes, multi-byte UTF-8. */
    big[255] = '\0';
    fx_stream_handle *h;
    assert_int_equal(fx_registry_resolve(r, S(big), S("n\xC3\xA9"), S(big), &h, NULL), 0);
    assert_int_equal(strlen(fx_stream_handle_stream(h)), 255);
    assert_string_equal(fx_stream_handle_namespace(h), "n\xC3\xA9");
    fx_stream_handle_unref(h);
    fx_registry_free(r);
}

typedef struct race_arg {
    fx_registry *r;
    uint64_t ids[64];
} race_arg;

static void *race_resolve(void *p)
{
    race_arg *a = p;
    char name[16];
    for (int i = 0; i < 64; i++) {
        snprintf(name, sizeof(name), "s%d", i);
        fx_stream_handle *h;
        if (fx_registry_resolve(a->r, S("t"), S("ns"), S(name), &h, NULL) != 0)
            return NULL;
        a->ids[i] = fx_stream_handle_id(h);
        fx_stream_handle_unref(h);
    }
    return p;
}

static void test_concurrent_resolve_creates_each_stream_once(void **state)
{
    fx_registry *r = mkreg(true, 0);
    race_arg args[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        args[i].r = r;
        assert_int_equal(pthread_create(&th[i], NULL, race_resolve, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        assert_ptr_equal(ret, &args[i]);
    }
    assert_int_equal(fx_registry_count(r), 64);
    bool seen[65] = {0};
    for (int s = 0; s < 64; s++) {
        for (int i = 1; i < 4; i++)
            assert_int_equal(args[i].ids[s], args[0].ids[s]);
        assert_true(args[0].ids[s] >= 1 && args[0].ids[s] <= 64);
        assert_false(seen[args[0].ids[s]]);
        seen[args[0].ids[s]] = true;
    }
    fx_registry_free(r);
}

static void test_max_tenants_counts_tenants_holding_streams(void **state)
{
    fx_registry *r = NULL;
    fx_registry_opts o = {.auto_create = true, .max_tenants = 2};
    assert_int_equal(fx_registry_new(&r, &o), 0);
    fx_registry_err err = {0};
    assert_int_equal(fx_registry_create(r, S("a"), S("n"), S("s"), NULL, NULL, &err), 0);
    assert_int_equal(fx_registry_create(r, S("b"), S("n"), S("s"), NULL, NULL, &err), 0);
    assert_int_equal(fx_registry_tenants(r), 2);
    fx_stream_handle *h = NULL;
    assert_int_equal(fx_registry_resolve(r, S("c"), S("n"), S("s"), &h, &err), FX_EFULL);
    assert_null(h);
    assert_string_equal(err.msg, "the broker holds max_tenants (2) tenants: stream not created");
    /* A tenant already there may add streams; one that leaves frees its slot. */
    assert_int_equal(fx_registry_create(r, S("a"), S("n"), S("t"), NULL, NULL, &err), 0);
    assert_true(fx_registry_remove(r, S("b"), S("n"), S("s")));
    assert_int_equal(fx_registry_tenants(r), 1);
    assert_int_equal(fx_registry_resolve(r, S("c"), S("n"), S("s"), &h, &err), 0);
    fx_stream_handle_unref(h);
    fx_registry_free(r);
}

typedef struct expired {
    fx_stream_handle *h[4];
    int n;
} expired;

static void on_expired(fx_stream_handle *h, void *user)
{
    expired *x = user;
    assert_true(x->n < 4);
    x->h[x->n++] = h;
}

static void test_expire_idle_takes_only_unused_auto_created_streams(void **state)
{
    fx_registry *r = mkreg(true, 0);
    fx_registry_err err = {0};
    fx_stream_handle *held = NULL, *tmp = NULL;
    assert_int_equal(fx_registry_create(r, S("t"), S("n"), S("explicit"), NULL, NULL, &err), 0);
    assert_int_equal(fx_registry_resolve(r, S("t"), S("n"), S("auto"), &tmp, &err), 0);
    fx_stream_handle_unref(tmp); /* nobody holds it now */
    assert_int_equal(fx_registry_resolve(r, S("t"), S("n"), S("held"), &held, &err), 0);
    uint64_t now = fx_now_ns();
    expired x = {0};
    /* Not idle long enough yet. */
    assert_int_equal(fx_registry_expire_idle(r, now, 3600 * FX_NS_PER_S, on_expired, &x), 0);
    /* An hour later only the unreferenced auto-created stream goes. */
    uint64_t later = now + 2 * 3600 * FX_NS_PER_S;
    assert_int_equal(fx_registry_expire_idle(r, later, 3600 * FX_NS_PER_S, on_expired, &x), 1);
    assert_int_equal(x.n, 1);
    assert_string_equal(fx_stream_handle_stream(x.h[0]), "auto");
    assert_false(fx_stream_handle_is_active(x.h[0]));
    fx_stream_handle_unref(x.h[0]);
    assert_int_equal(fx_registry_count(r), 2);
    /* A touch (an append) restarts the clock; unreferenced, it goes an hour
     * after that, not before. */
    fx_stream_handle_touch(held, later);
    fx_stream_handle_unref(held);
    assert_int_equal(
        fx_registry_expire_idle(r, later + 1800 * FX_NS_PER_S, 3600 * FX_NS_PER_S, on_expired, &x),
        0);
    assert_int_equal(fx_registry_expire_idle(r, later + 2 * 3600 * FX_NS_PER_S, 3600 * FX_NS_PER_S,
                                             on_expired, &x),
                     1);
    assert_string_equal(fx_stream_handle_stream(x.h[1]), "held");
    fx_stream_handle_unref(x.h[1]);
    assert_int_equal(fx_registry_count(r), 1); /* the explicit one never expires */
    fx_registry_free(r);
}

/* Each registry keys its name hash with random bytes of its own: the same
 * key hashes alike twice in one registry and differently in two (a client
 * cannot precompute colliding names), and lookups in both stay correct. */
static void test_hash_is_keyed_per_registry_and_lookups_stay_correct(void **state)
{
    (void)state;
    fx_registry *a = mkreg(true, 0);
    fx_registry *b = mkreg(true, 0);
    static const char key[] = "t1\0default\0demo";
    assert_true(fx_registry_hash(a, key, sizeof(key) - 1) ==
                fx_registry_hash(a, key, sizeof(key) - 1));
    assert_true(fx_registry_hash(a, key, sizeof(key) - 1) !=
                fx_registry_hash(b, key, sizeof(key) - 1));
    enum { N = 300 };
    char name[16];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "s%d", i);
        assert_true(fx_registry_hash(a, name, strlen(name)) !=
                    fx_registry_hash(b, name, strlen(name)));
        fx_stream_handle *h = NULL;
        bool created = false;
        assert_int_equal(fx_registry_create(a, S("t1"), S("default"), S(name), &h, &created, NULL),
                         0);
        assert_true(created);
        assert_int_equal(fx_stream_handle_id(h), (uint64_t)i + 1);
        fx_stream_handle_unref(h);
        /* |b| holds them in the opposite order: other ids, other buckets. */
        snprintf(name, sizeof(name), "s%d", N - 1 - i);
        assert_int_equal(fx_registry_create(b, S("t1"), S("default"), S(name), NULL, NULL, NULL),
                         0);
    }
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "s%d", i);
        fx_stream_handle *ha = NULL, *hb = NULL;
        assert_int_equal(fx_registry_resolve(a, S("t1"), S("default"), S(name), &ha, NULL), 0);
        assert_int_equal(fx_registry_resolve(b, S("t1"), S("default"), S(name), &hb, NULL), 0);
        assert_int_equal(fx_stream_handle_id(ha), (uint64_t)i + 1);
        assert_int_equal(fx_stream_handle_id(hb), (uint64_t)(N - i));
        assert_string_equal(fx_stream_handle_stream(ha), name);
        assert_string_equal(fx_stream_handle_stream(hb), name);
        fx_stream_handle_unref(ha);
        fx_stream_handle_unref(hb);
    }
    assert_int_equal(fx_registry_count(a), N);
    assert_int_equal(fx_registry_count(b), N);
    assert_int_equal(fx_registry_tenant_count(b, S("t1")), N);
    assert_true(fx_registry_remove(a, S("t1"), S("default"), S("s7")));
    assert_int_equal(fx_registry_count(a), N - 1);
    fx_registry_free(a);
    fx_registry_free(b);
}

static int resolve_err(fx_registry *r, const char *stream, fx_registry_err *err)
{
    fx_stream_handle *h = NULL;
    int rv = fx_registry_resolve(r, S("t1"), S("default"), S(stream), &h, err);
    fx_stream_handle_unref(h);
    return rv;
}

/* After a removal, a resolve does not auto-create the same names for
 * delete_tombstone_ns (refused as a missing stream, saying why, counted);
 * other names still are; an explicit create ends the wait, and so does its
 * end. */
static void test_removed_stream_is_not_auto_created_again_until_its_tombstone_ends(void **state)
{
    (void)state;
    fx_registry *r = NULL;
    fx_registry_opts o = {.auto_create = true, .delete_tombstone_ns = 300 * FX_NS_PER_MS};
    assert_int_equal(fx_registry_new(&r, &o), 0);
    fx_registry_err err = {0};
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    assert_int_equal(resolve_err(r, "x", &err), 0);
    assert_true(fx_registry_remove(r, S("t1"), S("default"), S("x")));
    assert_int_equal(resolve_err(r, "x", &err), FX_ENOSTREAM);
    assert_int_equal(err.code, FX_ENOSTREAM);
    assert_string_equal(err.msg, "stream not found: tenant=t1 namespace=default stream=x "
                                 "(deleted recently: not auto-created again for 1 s, "
                                 "stream_delete_tombstone_ms, unless created explicitly)");
    assert_int_equal(fx_registry_count(r), 0);
    assert_int_equal(resolve_err(r, "y", &err), 0); /* another name is not affected */
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(m1.c.registry_tombstone_refused - m0.c.registry_tombstone_refused, 1);

    /* An explicit create ends the tombstone at once. */
    bool created = false;
    assert_int_equal(fx_registry_create(r, S("t1"), S("default"), S("x"), NULL, &created, &err), 0);
    assert_true(created);
    assert_true(fx_registry_remove(r, S("t1"), S("default"), S("x")));
    /* Removed again: a new tombstone, which ends by itself. */
    assert_int_equal(resolve_err(r, "x", &err), FX_ENOSTREAM);
    uint64_t t0 = fx_now_ns();
    while (resolve_err(r, "x", &err) == FX_ENOSTREAM) {
        assert_true(fx_now_ns() - t0 < 5 * FX_NS_PER_S);
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
    }
    assert_true(fx_now_ns() - t0 >= 200 * FX_NS_PER_MS);
    assert_int_equal(fx_registry_count(r), 2);
    assert_true(fx_registry_remove(r, S("t1"), S("default"), S("y")));
    fx_registry_free(r); /* frees the tombstone of "y" (ASan: no leak) */

    /* 0 = off: a removed stream comes back on the next resolve. */
    r = mkreg(true, 0);
    assert_int_equal(resolve_err(r, "x", &err), 0);
    assert_true(fx_registry_remove(r, S("t1"), S("default"), S("x")));
    assert_int_equal(resolve_err(r, "x", &err), 0);
    fx_registry_free(r);
}

/* ---- durable streams ---------------------------------------------------------------- */

static int create_d(fx_registry *r, const char *tenant, const char *stream, int durable,
                    fx_registry_err *err)
{
    return fx_registry_create_durable(r, S(tenant), S("default"), S(stream), durable, NULL, NULL,
                                      err);
}

/* tenant_durable_streams_max refuses a tenant's next durable stream, by the
 * admin path or a publish's auto-creation, with "storage quota exceeded"
 * (counted); streams in memory, other tenants and streams adopted from the
 * catalogue at start are not refused, and a removal frees a place. */
static void test_durable_streams_per_tenant_are_bounded(void **state)
{
    (void)state;
    fx_registry *r = NULL;
    fx_registry_opts o = {.auto_create = true,
                          .durable_storage = true,
                          .durable_default = true,
                          .tenant_durable_streams_max = 2};
    assert_int_equal(fx_registry_new(&r, &o), 0);
    fx_registry_err err = {0};
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    assert_int_equal(create_d(r, "t1", "a", 1, &err), 0);
    assert_int_equal(resolve_err(r, "b", &err), 0); /* durable by durable_default */
    assert_int_equal(create_d(r, "t1", "c", 1, &err), FX_ESTORAGE_QUOTA);
    assert_string_equal(err.msg, "storage quota exceeded: tenant t1 holds "
                                 "tenant_durable_streams_max (2) durable streams: stream not "
                                 "created");
    assert_int_equal(resolve_err(r, "d", &err), FX_ESTORAGE_QUOTA);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(m1.c.storage_quota_streams - m0.c.storage_quota_streams, 2);
    assert_int_equal(fx_registry_count(r), 2);
    /* Existing ones are found; memory, another tenant, adoption pass. */
    assert_int_equal(create_d(r, "t1", "a", 1, &err), 0);
    assert_int_equal(create_d(r, "t1", "m", 0, &err), 0);
    assert_int_equal(create_d(r, "t2", "a", 1, &err), 0);
    assert_int_equal(create_d(r, "t1", "old", FX_REGISTRY_DURABLE_ADOPT, &err), 0);
    fx_stream_handle *h = NULL;
    assert_int_equal(fx_registry_resolve(r, S("t1"), S("default"), S("old"), &h, &err), 0);
    assert_true(fx_stream_handle_is_durable(h));
    assert_non_null(fx_stream_handle_durable_bytes(h));
    fx_stream_handle_unref(h);
    /* Three durable now (one adopted): a removal leaves two, still full. */
    assert_true(fx_registry_remove(r, S("t1"), S("default"), S("a")));
    assert_int_equal(create_d(r, "t1", "c", 1, &err), FX_ESTORAGE_QUOTA);
    assert_true(fx_registry_remove(r, S("t1"), S("default"), S("b")));
    assert_int_equal(create_d(r, "t1", "c", 1, &err), 0);
    fx_registry_free(r);
}

/* Under durable_default a subscribe to a missing stream creates nothing
 * (not found, counted); a publish's resolve then creates it durable and
 * the subscribe finds it. Without durable_default a subscribe auto-creates
 * a stream in memory, as before. */
static void test_subscribe_never_creates_a_durable_stream(void **state)
{
    (void)state;
    fx_registry *r = NULL;
    fx_registry_opts o = {.auto_create = true, .durable_storage = true, .durable_default = true};
    assert_int_equal(fx_registry_new(&r, &o), 0);
    fx_registry_err err = {0};
    fx_stream_handle *h = NULL;
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    assert_int_equal(fx_registry_resolve_subscribe(r, S("t1"), S("default"), S("s"), &h, &err),
                     FX_ENOSTREAM);
    assert_null(h);
    assert_string_equal(err.msg, "stream not found: tenant=t1 namespace=default stream=s "
                                 "(durable_default: a durable stream is created by its first "
                                 "publish or the admin API, not by a subscribe)");
    assert_int_equal(fx_registry_count(r), 0);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(m1.c.registry_subscribe_not_created - m0.c.registry_subscribe_not_created, 1);
    assert_int_equal(resolve_err(r, "s", &err), 0);
    assert_int_equal(fx_registry_resolve_subscribe(r, S("t1"), S("default"), S("s"), &h, &err), 0);
    assert_true(fx_stream_handle_is_durable(h));
    fx_stream_handle_unref(h);
    fx_registry_free(r);

    o.durable_default = false;
    assert_int_equal(fx_registry_new(&r, &o), 0);
    assert_int_equal(fx_registry_resolve_subscribe(r, S("t1"), S("default"), S("s"), &h, &err), 0);
    assert_false(fx_stream_handle_is_durable(h));
    assert_null(fx_stream_handle_durable_bytes(h));
    fx_stream_handle_unref(h);
    fx_registry_free(r);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_unknown_stream_with_autocreate_off_is_not_found),
    cmocka_unit_test(test_autocreate_on_first_use_gives_dense_ids_from_one),
    cmocka_unit_test(test_auto_create_respects_max_streams_per_tenant),
    cmocka_unit_test(test_deleted_stream_handle_inactive),
    cmocka_unit_test(test_find_gives_only_the_active_stream_of_that_name),
    cmocka_unit_test(test_invalid_names_rejected),
    cmocka_unit_test(test_concurrent_resolve_creates_each_stream_once),
    cmocka_unit_test(test_max_tenants_counts_tenants_holding_streams),
    cmocka_unit_test(test_expire_idle_takes_only_unused_auto_created_streams),
    cmocka_unit_test(test_hash_is_keyed_per_registry_and_lookups_stay_correct),
    cmocka_unit_test(test_removed_stream_is_not_auto_created_again_until_its_tombstone_ends),
    cmocka_unit_test(test_durable_streams_per_tenant_are_bounded),
    cmocka_unit_test(test_subscribe_never_creates_a_durable_stream),
};
FX_TEST_MAIN(tests)
