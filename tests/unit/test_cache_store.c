/* Unit tests for fxb_cache_store: put/get/delete, overwrite, TTL expiry on
 * read and by the sweep (exact counts, no reads), CLOCK eviction under the
 * byte bound with its counters and victims, the per-tenant cap shared by
 * two stores, refusals by limit, conditional puts and removes (the versions
 * they report), a cache cleared, a randomized run against
 * a plain reference, the store's own bytes per 1 KiB entry, versions
 * restored by a durable cache's rebuild and the callback for entries freed
 * unasked (evicted, expired). */
/* fx-test-libs: fx_broker fx_wire fx_base */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "broker/cache_store.h"
#include "felix/error.h"
#include "fx_test.h"

#define MS 1000ull

static fxb_cache_store *mk(uint64_t max_bytes, uint32_t max_value, uint32_t max_key)
{
    fxb_cache_limits lim = {.max_bytes = max_bytes,
                            .max_value_bytes = max_value,
                            .max_key_bytes = max_key,
                            .hash_key = {0x1234567u, 0x89abcdefu}};
    fxb_cache_store *s = NULL;
    assert_int_equal(fxb_cache_store_new(&s, &lim), 0);
    return s;
}

static uint32_t scope(fxb_cache_store *s, const char *t, const char *c, fxb_cache_tenant *acct)
{
    uint32_t id = 99;
    assert_int_equal(fxb_cache_scope_open(s, t, "default", c, acct, &id), 0);
    return id;
}

static int put(fxb_cache_store *s, uint32_t sc, const char *k, const char *v, uint64_t ttl_ms,
               uint64_t now)
{
    fxb_cache_put_opts o = {.ttl_ms = ttl_ms};
    return fxb_cache_put(s, sc, k, strlen(k), v, strlen(v), &o, now, NULL);
}

/* The value of |k| as a string, or NULL on a miss (static buffer). */
static const char *get(fxb_cache_store *s, uint32_t sc, const char *k, uint64_t now)
{
    static char buf[4096];
    const void *v;
    size_t n;
    int rv = fxb_cache_get(s, sc, k, strlen(k), now, &v, &n, NULL);
    if (rv == FXB_CACHE_MISS)
        return NULL;
    assert_int_equal(rv, FXB_CACHE_HIT);
    assert_true(n < sizeof(buf));
    memcpy(buf, v, n);
    buf[n] = 0;
    return buf;
}

static fxb_cache_stats stats(fxb_cache_store *s)
{
    fxb_cache_stats st;
    fxb_cache_stats_get(s, &st);
    return st;
}

static void test_put_get_delete_and_scopes_are_apart(void **state)
{
    (void)state;
    fxb_cache_store *s = mk(1 << 20, 0, 0);
    uint32_t a = scope(s, "t1", "primary", NULL), b = scope(s, "t1", "other", NULL);
    uint32_t c = scope(s, "t2", "primary", NULL);
    assert_int_equal(scope(s, "t1", "primary", NULL), a);
    assert_true(a != b && b != c && a != c);
    assert_int_equal(put(s, a, "k", "va", 0, 0), FXB_CACHE_OK);
    assert_int_equal(put(s, b, "k", "vb", 0, 0), FXB_CACHE_OK);
    assert_string_equal(get(s, a, "k", 0), "va");
    assert_string_equal(get(s, b, "k", 0), "vb");
    assert_null(get(s, c, "k", 0));
    assert_null(get(s, a, "missing", 0));
    assert_int_equal(fxb_cache_delete(s, a, "k", 1, 0), FXB_CACHE_OK);
    assert_int_equal(fxb_cache_delete(s, a, "k", 1, 0), FXB_CACHE_MISS);
    assert_null(get(s, a, "k", 0));
    assert_string_equal(get(s, b, "k", 0), "vb");
    /* Empty key and value are entries like any other. */
    assert_int_equal(fxb_cache_put(s, a, NULL, 0, NULL, 0, NULL, 0, NULL), FXB_CACHE_OK);
    assert_string_equal(get(s, a, "", 0), "");
    fxb_cache_stats st = stats(s);
    assert_int_equal(st.entries, 2);
    assert_int_equal(st.bytes, 1 + 2 + 2 * FXB_CACHE_ENTRY_OVERHEAD);
    assert_int_equal(st.hits, 4);
    assert_int_equal(st.misses, 3);
    assert_int_equal(st.deletes, 1);
    assert_int_equal(st.puts, 3);
    uint64_t n, bytes;
    fxb_cache_scope_usage(s, b, &n, &bytes);
    assert_int_equal(n, 1);
    assert_int_equal(bytes, 3 + FXB_CACHE_ENTRY_OVERHEAD);
    fxb_cache_store_free(s);
}

/* The caches a store makes are bounded: one more name past the bound is
 * refused (FX_EFULL), the ones it holds still open. */
static void test_cache_names_are_bounded(void **state)
{
    (void)state;
    fxb_cache_store *s = mk(1 << 20, 1024, 64);
    char name[32];
    for (uint32_t i = 0; i < FXB_CACHE_MAX_SCOPES; i++) {
        snprintf(name, sizeof(name), "c%u", (unsigned)i);
        (void)scope(s, "t1", name, NULL);
    }
    uint32_t id = 99;
    assert_int_equal(fxb_cache_scope_open(s, "t1", "default", "one-more", NULL, &id), FX_EFULL);
    assert_int_equal(fxb_cache_scope_open(s, "t1", "default", "c7", NULL, &id), 0);
    assert_int_equal(id, 7);
    fxb_cache_store_free(s);
}

static void test_overwrite_replaces_value_expiry_and_bumps_the_version(void **state)
{
    (void)state;
    fxb_cache_store *s = mk(1 << 20, 0, 0);
    uint32_t a = scope(s, "t1", "primary", NULL);
    uint64_t v1, v2, gv;
    fxb_cache_put_opts o = {.ttl_ms = 10};
    assert_int_equal(fxb_cache_put(s, a, "k", 1, "one", 3, &o, 0, &v1), FXB_CACHE_OK);
    assert_int_equal(fxb_cache_put(s, a, "k", 1, "three", 5, NULL, 0, &v2), FXB_CACHE_OK);
    assert_int_equal(v1, 1);
    assert_int_equal(v2, 2);
    /* The overwrite had no TTL: it clears the old expiry. */
    assert_int_equal(fxb_cache_next_deadline(s), UINT64_MAX);
    const void *p;
    size_t n;
    assert_int_equal(fxb_cache_get(s, a, "k", 1, 1000 * MS, &p, &n, &gv), FXB_CACHE_HIT);
    assert_int_equal(n, 5);
    assert_memory_equal(p, "three", 5);
    assert_int_equal(gv, 2);
    fxb_cache_stats st = stats(s);
    assert_int_equal(st.entries, 1);
    assert_int_equal(st.bytes, 1 + 5 + FXB_CACHE_ENTRY_OVERHEAD);
    /* Versions are per cache. */
    uint32_t b = scope(s, "t1", "other", NULL);
    assert_int_equal(fxb_cache_put(s, b, "k", 1, "x", 1, NULL, 0, &v1), FXB_CACHE_OK);
    assert_int_equal(v1, 1);
    fxb_cache_store_free(s);
}

static void test_an_expired_entry_is_a_miss_and_freed_on_read(void **state)
{
    (void)state;
    fxb_cache_store *s = mk(1 << 20, 0, 0);
    uint32_t a = scope(s, "t1", "primary", NULL);
    assert_int_equal(put(s, a, "k", "v", 10, 0), FXB_CACHE_OK);
    assert_int_equal(fxb_cache_next_deadline(s), 10 * MS);
    assert_string_equal(get(s, a, "k", 10 * MS - 1), "v");
    assert_null(get(s, a, "k", 10 * MS));
    fxb_cache_stats st = stats(s);
    assert_int_equal(st.expired_read, 1);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(fxb_cache_next_deadline(s), UINT64_MAX);
    /* A delete or a put over an expired entry frees it too. */
    assert_int_equal(put(s, a, "k", "v", 5, 0), FXB_CACHE_OK);
    assert_int_equal(fxb_cache_delete(s, a, "k", 1, 5 * MS), FXB_CACHE_MISS);
    assert_int_equal(put(s, a, "k", "v", 5, 0), FXB_CACHE_OK);
    fxb_cache_put_opts ia = {.if_absent = true};
    assert_int_equal(fxb_cache_put(s, a, "k", 1, "w", 1, &ia, 5 * MS, NULL), FXB_CACHE_OK);
    st = stats(s);
    assert_int_equal(st.expired_read, 3);
    assert_int_equal(st.entries, 1);
    fxb_cache_store_free(s);
}

static void test_sweep_frees_expired_entries_without_reads(void **state)
{
    (void)state;
    fxb_cache_store *s = mk(1 << 24, 0, 0);
    uint32_t a = scope(s, "t1", "primary", NULL);
    char k[16];
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        /* 1..100 ms, every tenth without TTL */
        assert_int_equal(put(s, a, k, "v", i % 10 == 0 ? 0 : (uint64_t)i + 1, 0), FXB_CACHE_OK);
    }
    assert_int_equal(fxb_cache_next_deadline(s), 2 * MS);
    /* Nothing is due before 2 ms. */
    assert_int_equal(fxb_cache_sweep(s, 2 * MS - 1, 1000), 0);
    /* By 50 ms the TTLs 2..50 but 11, 21, 31, 41 (i 10, 20, 30, 40 have
     * none) are due: 45, swept 30 at a time. */
    assert_int_equal(fxb_cache_sweep(s, 50 * MS, 30), 30);
    assert_int_equal(fxb_cache_sweep(s, 50 * MS, 30), 15);
    assert_int_equal(fxb_cache_sweep(s, 50 * MS, 30), 0);
    assert_int_equal(fxb_cache_next_deadline(s), 52 * MS);
    assert_int_equal(fxb_cache_sweep(s, UINT64_MAX, 1000), 45);
    fxb_cache_stats st = stats(s);
    assert_int_equal(st.expired_swept, 90);
    assert_int_equal(st.expired_read, 0);
    assert_int_equal(st.hits + st.misses, 0);
    assert_int_equal(st.entries, 10);
    assert_int_equal(fxb_cache_next_deadline(s), UINT64_MAX);
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        if (i % 10 == 0)
            assert_string_equal(get(s, a, k, UINT64_MAX), "v");
        else
            assert_null(get(s, a, k, 0));
    }
    fxb_cache_store_free(s);
}

static void test_eviction_under_the_byte_bound_takes_unreferenced_entries(void **state)
{
    (void)state;
    /* Room for exactly four entries of a 2-byte key and 100-byte value. */
    const uint64_t e = 2 + 100 + FXB_CACHE_ENTRY_OVERHEAD;
    fxb_cache_store *s = mk(4 * e + e / 2, 0, 0);
    uint32_t a = scope(s, "t1", "primary", NULL);
    char v[101];
    memset(v, 'x', 100);
    v[100] = 0;
    const char *keys[] = {"k0", "k1", "k2", "k3", "k4", "k5"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(put(s, a, keys[i], v, 0, 0), FXB_CACHE_OK);
    assert_int_equal(stats(s).evictions, 0);
    /* Read all but k2: the hand clears their bits and takes k2. */
    assert_non_null(get(s, a, "k0", 0));
    assert_non_null(get(s, a, "k1", 0));
    assert_non_null(get(s, a, "k3", 0));
    assert_int_equal(put(s, a, "k4", v, 0, 0), FXB_CACHE_OK);
    fxb_cache_stats st = stats(s);
    assert_int_equal(st.evictions, 1);
    assert_int_equal(st.entries, 4);
    assert_int_equal(st.bytes, 4 * e);
    assert_null(get(s, a, "k2", 0));
    /* k0 k1 read again: the next victim is k3 or k4, whose bits are clear. */
    assert_non_null(get(s, a, "k0", 0));
    assert_non_null(get(s, a, "k1", 0));
    assert_int_equal(put(s, a, "k5", v, 0, 0), FXB_CACHE_OK);
    st = stats(s);
    assert_int_equal(st.evictions, 2);
    assert_int_equal(st.entries, 4);
    assert_non_null(get(s, a, "k0", 0));
    assert_non_null(get(s, a, "k1", 0));
    assert_non_null(get(s, a, "k5", 0));
    int left = (get(s, a, "k3", 0) != NULL) + (get(s, a, "k4", 0) != NULL);
    assert_int_equal(left, 1);
    /* A put of the whole bound evicts everything else. */
    size_t big = (size_t)(4 * e + e / 2) - 2 - FXB_CACHE_ENTRY_OVERHEAD;
    char *bv = malloc(big);
    assert_non_null(bv);
    memset(bv, 'y', big);
    assert_int_equal(fxb_cache_put(s, a, "bb", 2, bv, big, NULL, 0, NULL), FXB_CACHE_OK);
    st = stats(s);
    assert_int_equal(st.evictions, 6);
    assert_int_equal(st.entries, 1);
    /* One byte more than the bound is refused, and nothing is evicted. */
    assert_int_equal(fxb_cache_put(s, a, "bbb", 3, bv, big, NULL, 0, NULL),
                     FXB_CACHE_LARGER_THAN_STORE);
    st = stats(s);
    assert_int_equal(st.evictions, 6);
    assert_int_equal(st.refused[FXB_CACHE_LARGER_THAN_STORE - FXB_CACHE_REFUSAL_FIRST], 1);
    free(bv);
    fxb_cache_store_free(s);
}

static void test_tenant_cap_is_shared_by_stores_and_refuses_puts(void **state)
{
    (void)state;
    const uint64_t e = 1 + 10 + FXB_CACHE_ENTRY_OVERHEAD;
    fxb_cache_tenant t1 = {.max_bytes = (int64_t)(3 * e)};
    fxb_cache_tenant t2 = {.max_bytes = 0};
    fxb_cache_store *w0 = mk(1 << 20, 0, 0), *w1 = mk(1 << 20, 0, 0);
    uint32_t a = scope(w0, "t1", "c0", &t1), b = scope(w1, "t1", "c1", &t1);
    uint32_t o = scope(w1, "t2", "c1", &t2);
    assert_int_equal(put(w0, a, "a", "0123456789", 0, 0), FXB_CACHE_OK);
    assert_int_equal(put(w0, a, "b", "0123456789", 0, 0), FXB_CACHE_OK);
    assert_int_equal(put(w1, b, "a", "0123456789", 0, 0), FXB_CACHE_OK);
    assert_int_equal(t1.bytes, 3 * e);
    assert_int_equal(t1.entries, 3);
    assert_int_equal(put(w1, b, "b", "0123456789", 0, 0), FXB_CACHE_TENANT_OVER_CAP);
    /* An overwrite of the same size fits; a larger one does not. */
    assert_int_equal(put(w1, b, "a", "abcdefghij", 0, 0), FXB_CACHE_OK);
    assert_int_equal(put(w1, b, "a", "abcdefghijk", 0, 0), FXB_CACHE_TENANT_OVER_CAP);
    /* A smaller one gives bytes back. */
    assert_int_equal(put(w1, b, "a", "abc", 0, 0), FXB_CACHE_OK);
    assert_int_equal(t1.bytes, 3 * e - 7);
    /* Another tenant is not bound by t1's cap. */
    for (int i = 0; i < 10; i++)
        assert_int_equal(put(w1, o, (char[]){(char)('a' + i), 0}, "0123456789", 0, 0),
                         FXB_CACHE_OK);
    assert_int_equal(t2.bytes, 10 * e);
    assert_int_equal(stats(w1).refused[FXB_CACHE_TENANT_OVER_CAP - FXB_CACHE_REFUSAL_FIRST], 2);
    assert_string_equal(fxb_cache_status_text(FXB_CACHE_TENANT_OVER_CAP),
                        "tenant over its cache byte cap");
    /* Deletes, expiry and freeing the store give the bytes back. */
    assert_int_equal(fxb_cache_delete(w0, a, "a", 1, 0), FXB_CACHE_OK);
    assert_int_equal(t1.bytes, 2 * e - 7);
    fxb_cache_store_free(w0);
    assert_int_equal(t1.bytes, e - 7);
    assert_int_equal(t1.entries, 1);
    fxb_cache_store_free(w1);
    assert_int_equal(t1.bytes, 0);
    assert_int_equal(t2.bytes, 0);
    assert_int_equal(t2.entries, 0);
}

static void test_oversize_values_and_keys_are_refused_and_counted(void **state)
{
    (void)state;
    fxb_cache_store *s = mk(1 << 20, 16, 4);
    uint32_t a = scope(s, "t1", "primary", NULL);
    assert_int_equal(put(s, a, "abcd", "0123456789abcdef", 0, 0), FXB_CACHE_OK);
    assert_int_equal(put(s, a, "abcde", "v", 0, 0), FXB_CACHE_KEY_TOO_LONG);
    assert_int_equal(put(s, a, "abc", "0123456789abcdefg", 0, 0), FXB_CACHE_VALUE_TOO_LARGE);
    /* Sizes past what a header field holds are refused, not truncated. */
    assert_int_equal(fxb_cache_put(s, a, "k", (size_t)1 << 40, "v", 1, NULL, 0, NULL),
                     FXB_CACHE_KEY_TOO_LONG);
    assert_int_equal(fxb_cache_put(s, a, "k", 1, "v", SIZE_MAX, NULL, 0, NULL),
                     FXB_CACHE_VALUE_TOO_LARGE);
    assert_int_equal(fxb_cache_get(s, a, "k", SIZE_MAX, 0, NULL, NULL, NULL), FXB_CACHE_MISS);
    assert_int_equal(fxb_cache_put(s, 7, "k", 1, "v", 1, NULL, 0, NULL), -EINVAL);
    assert_int_equal(fxb_cache_get(s, 7, "k", 1, 0, NULL, NULL, NULL), FXB_CACHE_MISS);
    fxb_cache_stats st = stats(s);
    assert_int_equal(st.refused[FXB_CACHE_KEY_TOO_LONG - FXB_CACHE_REFUSAL_FIRST], 2);
    assert_int_equal(st.refused[FXB_CACHE_VALUE_TOO_LARGE - FXB_CACHE_REFUSAL_FIRST], 2);
    assert_int_equal(st.entries, 1);
    assert_string_equal(fxb_cache_status_text(FXB_CACHE_VALUE_TOO_LARGE), "value too large");
    assert_string_equal(fxb_cache_status_text(FXB_CACHE_KEY_TOO_LONG), "key too long");
    fxb_cache_store_free(s);
    fxb_cache_limits bad = {.max_bytes = 0};
    assert_int_equal(fxb_cache_store_new(&s, &bad), -EINVAL);
    assert_null(s);
}

static void test_if_absent_lets_exactly_one_of_two_win_and_if_version_checks(void **state)
{
    (void)state;
    fxb_cache_store *s = mk(1 << 20, 0, 0);
    uint32_t a = scope(s, "t1", "primary", NULL);
    fxb_cache_put_opts ia = {.if_absent = true};
    uint64_t v = 0;
    assert_int_equal(fxb_cache_put(s, a, "k", 1, "first", 5, &ia, 0, &v), FXB_CACHE_OK);
    assert_int_equal(fxb_cache_put(s, a, "k", 1, "second", 6, &ia, 0, NULL), FXB_CACHE_EXISTS);
    assert_string_equal(get(s, a, "k", 0), "first");
    fxb_cache_put_opts iv = {.if_version = true, .version = v + 1};
    assert_int_equal(fxb_cache_put(s, a, "k", 1, "x", 1, &iv, 0, NULL), FXB_CACHE_VERSION_CHANGED);
    iv.version = v;
    uint64_t v2 = 0;
    assert_int_equal(fxb_cache_put(s, a, "k", 1, "x", 1, &iv, 0, &v2), FXB_CACHE_OK);
    assert_true(v2 > v);
    /* The same version again lost the race to the put above. */
    assert_int_equal(fxb_cache_put(s, a, "k", 1, "y", 1, &iv, 0, NULL), FXB_CACHE_VERSION_CHANGED);
    /* if_version on no entry fails. */
    assert_int_equal(fxb_cache_put(s, a, "none", 4, "y", 1, &iv, 0, NULL),
                     FXB_CACHE_VERSION_CHANGED);
    assert_string_equal(get(s, a, "k", 0), "x");
    assert_int_equal(stats(s).cond_failed, 4);
    assert_int_equal(stats(s).puts, 2);
    fxb_cache_store_free(s);
}

/* ---- randomized run against a reference ------------------------------------------ */

enum { RK = 24, RS = 3 };

typedef struct ref_ent {
    bool live;
    uint64_t expires; /* 0 none */
    uint64_t version;
    size_t len;
    unsigned char val[64];
} ref_ent;

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void test_random_ops_match_a_reference(void **state)
{
    (void)state;
    fxb_cache_store *s = mk(1 << 24, 64, 8);
    uint32_t sc[RS];
    sc[0] = scope(s, "t1", "a", NULL);
    sc[1] = scope(s, "t1", "b", NULL);
    sc[2] = scope(s, "t2", "a", NULL);
    static ref_ent ref[RS][RK];
    memset(ref, 0, sizeof(ref));
    uint64_t seq[RS] = {0};
    uint64_t x = 0x9e3779b97f4a7c15ull, now = 0, hits = 0;
    for (int op = 0; op < 20000; op++) {
        now += rnd(&x) % 3 * MS;
        int c = (int)(rnd(&x) % RS), k = (int)(rnd(&x) % RK);
        char key[8];
        size_t klen = (size_t)snprintf(key, sizeof(key), "k%d", k);
        ref_ent *r = &ref[c][k];
        if (r->live && r->expires != 0 && now >= r->expires)
            r->live = false;
        switch (rnd(&x) % 6) {
        case 0:
        case 1: { /* put, maybe conditional, maybe with TTL */
            unsigned char v[64];
            size_t vlen = rnd(&x) % 65;
            for (size_t i = 0; i < vlen; i++)
                v[i] = (unsigned char)rnd(&x);
            fxb_cache_put_opts o = {.ttl_ms = rnd(&x) % 2 ? rnd(&x) % 40 : 0};
            int cond = (int)(rnd(&x) % 4);
            o.if_absent = cond == 1;
            o.if_version = cond == 2;
            o.version = rnd(&x) % 2 ? r->version : r->version + 1;
            uint64_t ver = 0;
            int rv = fxb_cache_put(s, sc[c], key, klen, v, vlen, &o, now, &ver);
            bool ok = !(o.if_absent && r->live) &&
                      !(o.if_version && (!r->live || r->version != o.version));
            if (!ok) {
                assert_true(rv == FXB_CACHE_EXISTS || rv == FXB_CACHE_VERSION_CHANGED);
                break;
            }
            assert_int_equal(rv, FXB_CACHE_OK);
            assert_int_equal(ver, ++seq[c]);
            r->live = true;
            r->version = ver;
            r->len = vlen;
            memcpy(r->val, v, vlen);
            r->expires = o.ttl_ms ? now + o.ttl_ms * MS : 0;
            break;
        }
        case 2: /* delete */
            assert_int_equal(fxb_cache_delete(s, sc[c], key, klen, now),
                             r->live ? FXB_CACHE_OK : FXB_CACHE_MISS);
            r->live = false;
            break;
        case 3: /* sweep a little */
            fxb_cache_sweep(s, now, rnd(&x) % 4);
            break;
        default: { /* get */
            const void *p;
            size_t n;
            uint64_t ver;
            int rv = fxb_cache_get(s, sc[c], key, klen, now, &p, &n, &ver);
            if (!r->live) {
                assert_int_equal(rv, FXB_CACHE_MISS);
                break;
            }
            hits++;
            assert_int_equal(rv, FXB_CACHE_HIT);
            assert_int_equal(n, r->len);
            assert_int_equal(ver, r->version);
            if (n)
                assert_memory_equal(p, r->val, n);
        }
        }
    }
    /* Whatever the sweep left, stored entries and bytes add up to the
     * reference's live entries plus the expired ones not yet freed. */
    fxb_cache_stats st = stats(s);
    assert_int_equal(st.hits, hits);
    fxb_cache_sweep(s, now, SIZE_MAX);
    st = stats(s);
    uint64_t live = 0, bytes = 0;
    for (int c = 0; c < RS; c++)
        for (int k = 0; k < RK; k++) {
            ref_ent *r = &ref[c][k];
            if (r->live && !(r->expires != 0 && now >= r->expires)) {
                char key[8];
                live++;
                bytes += (uint64_t)snprintf(key, sizeof(key), "k%d", k) + r->len +
                         FXB_CACHE_ENTRY_OVERHEAD;
            }
        }
    assert_int_equal(st.entries, live);
    assert_int_equal(st.bytes, bytes);
    assert_int_equal(st.evictions, 0);
    fxb_cache_store_free(s);
}

/* Random sizes (some past the limits), random scopes (some unknown), TTLs
 * and a bound that keeps evicting, with two tenants capped: the bytes add
 * up everywhere after every op, never pass a bound, and a hit is the last
 * value put (an entry the reference holds may have been evicted: a miss). */
static void test_random_ops_under_pressure_keep_every_bound_and_sum(void **state)
{
    (void)state;
    const uint64_t max = 40 * (8 + 200 + FXB_CACHE_ENTRY_OVERHEAD);
    fxb_cache_tenant tn[2] = {{.max_bytes = (int64_t)(max / 3)}, {.max_bytes = 0}};
    fxb_cache_store *s = mk(max, 300, 12);
    uint32_t sc[RS];
    sc[0] = scope(s, "t1", "a", &tn[0]);
    sc[1] = scope(s, "t1", "b", &tn[0]);
    sc[2] = scope(s, "t2", "a", &tn[1]);
    enum { K = 30 };
    static struct {
        bool live;
        uint64_t expires;
        size_t len;
        unsigned char fill;
    } ref[RS][K];
    memset(ref, 0, sizeof(ref));
    static unsigned char v[400], key[20];
    uint64_t x = 88172645463325252ull, now = 0, hits = 0;
    for (int op = 0; op < 30000; op++) {
        now += rnd(&x) % 2 * MS;
        int c = (int)(rnd(&x) % RS), k = (int)(rnd(&x) % K);
        /* Key: k's bytes padded to its tracked length, or to a random one (past
         * 12 sometimes). */
        size_t klen = rnd(&x) % 4 == 0 ? 2 + rnd(&x) % 13 : 2 + (size_t)(k % 11);
        memset(key, 'p', sizeof(key));
        key[0] = (unsigned char)k;
        key[1] = (unsigned char)klen;
        uint32_t id = rnd(&x) % 50 == 0 ? 3 + (uint32_t)(rnd(&x) % 5) : sc[c];
        switch (rnd(&x) % 4) {
        case 0:
        case 1: {
            size_t vlen = rnd(&x) % 10 == 0 ? rnd(&x) % 400 : rnd(&x) % 200;
            unsigned char fill = (unsigned char)rnd(&x);
            memset(v, fill, vlen);
            fxb_cache_put_opts o = {.ttl_ms = rnd(&x) % 3 == 0 ? 1 + rnd(&x) % 30 : 0};
            int rv = fxb_cache_put(s, id, key, klen, v, vlen, &o, now, NULL);
            if (id != sc[c]) {
                assert_int_equal(rv, -EINVAL);
                break;
            }
            if (klen > 12) {
                assert_int_equal(rv, FXB_CACHE_KEY_TOO_LONG);
            } else if (vlen > 300) {
                assert_int_equal(rv, FXB_CACHE_VALUE_TOO_LARGE);
            } else if (rv == FXB_CACHE_OK) {
                if (klen == 2 + (size_t)(k % 11)) { /* one key length per k is tracked */
                    ref[c][k].live = true;
                    ref[c][k].len = vlen;
                    ref[c][k].fill = fill;
                    ref[c][k].expires = o.ttl_ms ? now + o.ttl_ms * MS : 0;
                }
            } else {
                assert_int_equal(rv, FXB_CACHE_TENANT_OVER_CAP);
                assert_int_equal(c < 2, 1);
            }
            break;
        }
        case 2:
            if (rnd(&x) % 2) {
                fxb_cache_sweep(s, now, rnd(&x) % 8);
                break;
            }
            (void)fxb_cache_delete(s, id, key, klen, now);
            if (klen == 2 + (size_t)(k % 11) && id == sc[c])
                ref[c][k].live = false;
            break;
        default: {
            const void *p = NULL;
            size_t n = 0;
            int rv = fxb_cache_get(s, id, key, klen, now, &p, &n, NULL);
            if (id != sc[c] || klen != 2 + (size_t)(k % 11))
                break;
            bool live = ref[c][k].live && !(ref[c][k].expires && now >= ref[c][k].expires);
            if (!live) {
                assert_int_equal(rv, FXB_CACHE_MISS);
                break;
            }
            if (rv == FXB_CACHE_MISS) { /* evicted */
                ref[c][k].live = false;
                break;
            }
            hits++;
            assert_int_equal(n, ref[c][k].len);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(((const unsigned char *)p)[i], ref[c][k].fill);
        }
        }
        fxb_cache_stats st = stats(s);
        uint64_t e[RS], b[RS];
        for (int i = 0; i < RS; i++)
            fxb_cache_scope_usage(s, sc[i], &e[i], &b[i]);
        assert_true(st.bytes <= max);
        assert_int_equal(st.bytes, b[0] + b[1] + b[2]);
        assert_int_equal(st.entries, e[0] + e[1] + e[2]);
        assert_int_equal(tn[0].bytes, b[0] + b[1]);
        assert_int_equal(tn[0].entries, e[0] + e[1]);
        assert_int_equal(tn[1].bytes, b[2]);
        assert_true(tn[0].bytes <= tn[0].max_bytes);
    }
    fxb_cache_stats st = stats(s);
    assert_true(st.evictions > 0);
    assert_true(st.refused[FXB_CACHE_TENANT_OVER_CAP - FXB_CACHE_REFUSAL_FIRST] > 0);
    assert_true(st.expired_swept > 0);
    print_message("tracked hits %llu, evictions %llu\n", (unsigned long long)hits,
                  (unsigned long long)st.evictions);
    assert_true(hits > 100);
    fxb_cache_store_free(s);
    assert_int_equal(tn[0].bytes, 0);
    assert_int_equal(tn[1].entries, 0);
}

static void test_kib_entries_cost_under_1_3_kib_and_the_index_shrinks_after(void **state)
{
    (void)state;
    enum { N = 100000 };
    fxb_cache_store *s = mk((uint64_t)2 << 30, 0, 0);
    uint32_t a = scope(s, "t1", "primary", NULL);
    char *v = malloc(1024);
    assert_non_null(v);
    memset(v, 'v', 1024);
    char key[32];
    for (int i = 0; i < N; i++) {
        size_t klen = (size_t)snprintf(key, sizeof(key), "key:%010d", i);
        fxb_cache_put_opts o = {.ttl_ms = i % 2 ? 60000 : 0};
        assert_int_equal(fxb_cache_put(s, a, key, klen, v, 1024, &o, 0, NULL), FXB_CACHE_OK);
    }
    fxb_cache_stats st = stats(s);
    assert_int_equal(st.entries, N);
    assert_int_equal(st.evictions, 0);
    /* The accounting (header, index and heap slots, allocator overhead
     * counted per entry) and the arrays as allocated, per entry. */
    double per = (double)st.bytes / N;
    double index = (double)st.index_bytes / N;
    print_message("bytes per 1 KiB entry: %.1f accounted, index %.1f\n", per, index);
    assert_true(per <= 1.3 * 1024);
    assert_true(index <= 32 + 16);
    /* Deleting (or expiring) them gives the index back. */
    for (int i = 0; i < N; i += 2) {
        size_t klen = (size_t)snprintf(key, sizeof(key), "key:%010d", i);
        assert_int_equal(fxb_cache_delete(s, a, key, klen, 0), FXB_CACHE_OK);
    }
    assert_int_equal(fxb_cache_sweep(s, 60000 * MS, SIZE_MAX), N / 2);
    st = stats(s);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.bytes, 0);
    assert_true(st.index_bytes <= 2 * 16 * sizeof(void *) + 256);
    free(v);
    fxb_cache_store_free(s);
}

/* Two workers' stores share one tenant account from two threads: the cap
 * is never passed, even by overwrites that shrink and grow, and the
 * account ends equal to what the stores hold. */
typedef struct racer {
    fxb_cache_tenant *acct;
    fxb_cache_store *s; /* made and freed on the test's thread: no cmocka asserts in threads */
    uint32_t sc;
    int seed;
    uint64_t over; /* times the account was seen over its cap */
    uint64_t stored, refused;
    pthread_barrier_t *go; /* both start together */
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    fxb_cache_store *s = r->s;
    uint32_t sc = r->sc;
    uint64_t x = 0x9e3779b97f4a7c15ull + (uint64_t)r->seed;
    static const unsigned char v[64];
    pthread_barrier_wait(r->go);
    for (int i = 0; i < 20000; i++) {
        char key[8];
        size_t klen = (size_t)snprintf(key, sizeof(key), "k%d", (int)(rnd(&x) % 32));
        int rv = rnd(&x) % 4 == 0 ? fxb_cache_delete(s, sc, key, klen, 0)
                                  : fxb_cache_put(s, sc, key, klen, v, rnd(&x) % 64, NULL, 0, NULL);
        if (rv == FXB_CACHE_TENANT_OVER_CAP)
            r->refused++;
        else if (rv == FXB_CACHE_OK)
            r->stored++;
        if (atomic_load(&r->acct->bytes) > r->acct->max_bytes)
            r->over++;
    }
    return NULL;
}

static void test_two_threads_share_a_tenant_cap_without_passing_it(void **state)
{
    (void)state;
    fxb_cache_tenant acct = {.max_bytes = 20 * (3 + 32 + FXB_CACHE_ENTRY_OVERHEAD)};
    pthread_barrier_t go;
    assert_int_equal(pthread_barrier_init(&go, NULL, 2), 0);
    racer r[2] = {{.acct = &acct, .seed = 0, .go = &go}, {.acct = &acct, .seed = 1, .go = &go}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        r[i].s = mk(1 << 20, 0, 0);
        r[i].sc = scope(r[i].s, "t1", i ? "b" : "a", &acct);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, race, &r[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(r[0].over + r[1].over, 0);
    fxb_cache_stats a, b;
    fxb_cache_stats_get(r[0].s, &a);
    fxb_cache_stats_get(r[1].s, &b);
    assert_int_equal(atomic_load(&acct.bytes), a.bytes + b.bytes);
    assert_int_equal(atomic_load(&acct.entries), a.entries + b.entries);
    for (int i = 0; i < 2; i++)
        fxb_cache_store_free(r[i].s);
    pthread_barrier_destroy(&go);
    /* The cap was reached (refusals) and writes went in; which thread got
     * how many is the scheduler's business (one may run alone on a loaded
     * host), so only the sum is asserted. */
    assert_true(r[0].refused + r[1].refused > 0);
    assert_true(r[0].stored + r[1].stored > 0);
    assert_int_equal(atomic_load(&acct.bytes), 0);
    assert_int_equal(atomic_load(&acct.entries), 0);
}

static void test_the_key_hash_is_siphash_2_4(void **state)
{
    (void)state;
    /* The reference vectors: key 00..0f, messages 00..(n-1). */
    const uint64_t k[2] = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
    unsigned char m[16];
    for (int i = 0; i < 16; i++)
        m[i] = (unsigned char)i;
    assert_int_equal(fxb_cache_hash(k, m, 0), 0x726fdb47dd0e0e31ull);
    assert_int_equal(fxb_cache_hash(k, m, 15), 0xa129ca6149be45e5ull);
}

static void test_remove_hands_back_the_value_and_its_version(void **state)
{
    (void)state;
    fxb_cache_tenant acct = {.max_bytes = 0};
    fxb_cache_store *s = mk(1 << 20, 0, 0);
    uint32_t a = scope(s, "t1", "primary", &acct);
    uint64_t v1 = 0, ver = 99;
    assert_int_equal(fxb_cache_put(s, a, "k", 1, "one", 3, NULL, 0, &v1), FXB_CACHE_OK);
    const void *p = NULL;
    size_t n = 0;
    assert_int_equal(fxb_cache_remove(s, a, "k", 1, NULL, 0, &p, &n, &ver), FXB_CACHE_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(p, "one", 3);
    assert_int_equal(ver, v1);
    fxb_cache_stats st = stats(s);
    assert_int_equal(st.deletes, 1);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(atomic_load(&acct.bytes), 0);
    assert_int_equal(atomic_load(&acct.entries), 0);
    /* Gone: a second remove misses, with version 0. */
    assert_int_equal(fxb_cache_remove(s, a, "k", 1, NULL, 0, &p, &n, &ver), FXB_CACHE_MISS);
    assert_int_equal(ver, 0);
    /* A new write of the key takes the next version: never reused. */
    uint64_t v2 = 0;
    assert_int_equal(fxb_cache_put(s, a, "k", 1, "two", 3, NULL, 0, &v2), FXB_CACHE_OK);
    assert_true(v2 > v1);
    /* if_version: another version is left, counted, and the current one told. */
    fxb_cache_remove_opts ro = {.if_version = true, .version = v1};
    assert_int_equal(fxb_cache_remove(s, a, "k", 1, &ro, 0, NULL, NULL, &ver),
                     FXB_CACHE_VERSION_CHANGED);
    assert_int_equal(ver, v2);
    assert_string_equal(get(s, a, "k", 0), "two");
    ro.version = v2;
    assert_int_equal(fxb_cache_remove(s, a, "k", 1, &ro, 0, NULL, NULL, NULL), FXB_CACHE_OK);
    assert_null(get(s, a, "k", 0));
    /* if_version on no entry: refused, version 0. */
    assert_int_equal(fxb_cache_remove(s, a, "k", 1, &ro, 0, NULL, NULL, &ver),
                     FXB_CACHE_VERSION_CHANGED);
    assert_int_equal(ver, 0);
    st = stats(s);
    assert_int_equal(st.cond_failed, 2);
    assert_int_equal(st.deletes, 2);
    /* An expired entry is not removed but freed as expired: a miss. */
    assert_int_equal(put(s, a, "e", "v", 10, 0), FXB_CACHE_OK);
    assert_int_equal(fxb_cache_remove(s, a, "e", 1, NULL, 20 * MS, &p, &n, &ver), FXB_CACHE_MISS);
    assert_int_equal(stats(s).expired_read, 1);
    fxb_cache_store_free(s);
}

static void test_a_refused_conditional_put_tells_the_current_version(void **state)
{
    (void)state;
    fxb_cache_store *s = mk(1 << 20, 0, 0);
    uint32_t a = scope(s, "t1", "primary", NULL);
    uint64_t v = 0, cur = 99;
    fxb_cache_put_opts ia = {.if_absent = true};
    assert_int_equal(fxb_cache_put(s, a, "k", 1, "x", 1, &ia, 0, &v), FXB_CACHE_OK);
    assert_int_equal(fxb_cache_put(s, a, "k", 1, "y", 1, &ia, 0, &cur), FXB_CACHE_EXISTS);
    assert_int_equal(cur, v);
    fxb_cache_put_opts iv = {.if_version = true, .version = v + 7};
    assert_int_equal(fxb_cache_put(s, a, "k", 1, "y", 1, &iv, 0, &cur), FXB_CACHE_VERSION_CHANGED);
    assert_int_equal(cur, v);
    assert_int_equal(fxb_cache_put(s, a, "none", 4, "y", 1, &iv, 0, &cur),
                     FXB_CACHE_VERSION_CHANGED);
    assert_int_equal(cur, 0);
    fxb_cache_store_free(s);
}

static void test_clearing_a_cache_frees_only_its_entries(void **state)
{
    (void)state;
    fxb_cache_tenant acct = {.max_bytes = 0};
    fxb_cache_store *s = mk(1 << 22, 0, 0);
    uint32_t a = scope(s, "t1", "a", &acct), b = scope(s, "t1", "b", &acct);
    char k[16];
    for (int i = 0; i < 500; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        assert_int_equal(put(s, a, k, "va", i % 3 ? 0 : 1000, 0), FXB_CACHE_OK);
        assert_int_equal(put(s, b, k, "vb", 0, 0), FXB_CACHE_OK);
    }
    uint64_t vlast = 0;
    assert_int_equal(fxb_cache_put(s, a, "last", 4, "v", 1, NULL, 0, &vlast), FXB_CACHE_OK);
    assert_int_equal(fxb_cache_scope_clear(s, a), 501);
    uint64_t e, by;
    fxb_cache_scope_usage(s, a, &e, &by);
    assert_int_equal(e, 0);
    assert_int_equal(by, 0);
    fxb_cache_stats st = stats(s);
    assert_int_equal(st.dropped, 501);
    assert_int_equal(st.entries, 500);
    assert_int_equal(atomic_load(&acct.entries), 500);
    assert_int_equal(fxb_cache_next_deadline(s), UINT64_MAX);
    for (int i = 0; i < 500; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        assert_null(get(s, a, k, 0));
        assert_string_equal(get(s, b, k, 0), "vb");
    }
    /* The cache stays usable and its versions go on. */
    uint64_t v = 0;
    assert_int_equal(fxb_cache_put(s, a, "last", 4, "v", 1, NULL, 0, &v), FXB_CACHE_OK);
    assert_true(v > vlast);
    assert_int_equal(fxb_cache_scope_count(s), 2);
    const char *tn, *ns, *cn;
    assert_true(fxb_cache_scope_names(s, b, &tn, &ns, &cn));
    assert_string_equal(tn, "t1");
    assert_string_equal(ns, "default");
    assert_string_equal(cn, "b");
    assert_false(fxb_cache_scope_names(s, 2, &tn, &ns, &cn));
    fxb_cache_store_free(s);
    assert_int_equal(atomic_load(&acct.bytes), 0);
}

static uint64_t version_of(fxb_cache_store *s, uint32_t sc, const char *k)
{
    uint64_t v = 0;
    assert_int_equal(fxb_cache_get(s, sc, k, strlen(k), 0, NULL, NULL, &v), FXB_CACHE_HIT);
    return v;
}

static void test_restored_versions_are_kept_and_later_ones_go_past_them(void **state)
{
    (void)state;
    fxb_cache_store *s = mk(1 << 20, 0, 0);
    uint32_t a = scope(s, "t", "a", NULL);
    fxb_cache_put_opts r = {.restore = true, .restore_version = 40};
    assert_int_equal(fxb_cache_put(s, a, "x", 1, "1", 1, &r, 0, NULL), FXB_CACHE_OK);
    r.restore_version = 7; /* an older record of another key, read later */
    assert_int_equal(fxb_cache_put(s, a, "y", 1, "2", 1, &r, 0, NULL), FXB_CACHE_OK);
    r.restore_version = 0; /* a version 1 record: unknown */
    assert_int_equal(fxb_cache_put(s, a, "z", 1, "3", 1, &r, 0, NULL), FXB_CACHE_OK);
    assert_int_equal(fxb_cache_scope_version(s, a), 40);
    /* A delete's record carried 55: nothing below or at it is given again. */
    assert_int_equal(fxb_cache_scope_restore_done(s, a, 55), 1);
    assert_int_equal(version_of(s, a, "x"), 40);
    assert_int_equal(version_of(s, a, "y"), 7);
    assert_int_equal(version_of(s, a, "z"), 56);
    uint64_t v = 0;
    assert_int_equal(fxb_cache_put(s, a, "w", 1, "4", 1, NULL, 0, &v), FXB_CACHE_OK);
    assert_int_equal(v, 57);
    assert_int_equal(fxb_cache_scope_version(s, a), 57);
    /* A conditional put with the version read before the restart applies. */
    fxb_cache_put_opts c = {.if_version = true, .version = 40};
    assert_int_equal(fxb_cache_put(s, a, "x", 1, "5", 1, &c, 0, &v), FXB_CACHE_OK);
    assert_int_equal(v, 58);
    fxb_cache_store_free(s);
}

typedef struct dropped_log {
    int evicted, expired;
    char last[16];
} dropped_log;

static void on_dropped(void *user, uint32_t sc, const void *key, size_t klen, bool evicted)
{
    (void)sc;
    dropped_log *d = user;
    if (evicted)
        d->evicted++;
    else
        d->expired++;
    snprintf(d->last, sizeof(d->last), "%.*s", (int)klen, (const char *)key);
}

static void test_entries_freed_unasked_are_reported_and_deletes_are_not(void **state)
{
    (void)state;
    fxb_cache_store *s = mk(4 * (FXB_CACHE_ENTRY_OVERHEAD + 2), 0, 0);
    dropped_log d = {0};
    fxb_cache_store_on_dropped(s, on_dropped, &d);
    uint32_t a = scope(s, "t", "a", NULL);
    assert_int_equal(put(s, a, "k1", "", 0, 0), FXB_CACHE_OK);
    assert_int_equal(put(s, a, "k2", "", 5, 0), FXB_CACHE_OK);
    assert_int_equal(fxb_cache_delete(s, a, "k1", 2, 0), FXB_CACHE_OK);
    assert_int_equal(put(s, a, "k1", "", 0, 0), FXB_CACHE_OK); /* a replace: not reported */
    assert_int_equal(d.evicted + d.expired, 0);
    assert_null(get(s, a, "k2", 6 * MS)); /* expired on read */
    assert_int_equal(d.expired, 1);
    assert_string_equal(d.last, "k2");
    for (int i = 0; i < 6; i++) {
        char k[3] = {'e', (char)('0' + i), 0};
        assert_int_equal(put(s, a, k, "", 0, 7 * MS), FXB_CACHE_OK);
    }
    assert_int_equal((uint64_t)d.evicted, stats(s).evictions);
    assert_true(d.evicted >= 3);
    assert_int_equal(put(s, a, "s", "", 1, 7 * MS), FXB_CACHE_OK);
    assert_int_equal(fxb_cache_sweep(s, 9 * MS, 10), 1);
    assert_int_equal(d.expired, 2);
    assert_string_equal(d.last, "s");
    (void)fxb_cache_scope_clear(s, a); /* a cache dropped: its log goes whole */
    assert_int_equal(d.expired, 2);
    assert_int_equal((uint64_t)d.evicted, stats(s).evictions);
    fxb_cache_store_free(s);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_put_get_delete_and_scopes_are_apart),
    cmocka_unit_test(test_cache_names_are_bounded),
    cmocka_unit_test(test_overwrite_replaces_value_expiry_and_bumps_the_version),
    cmocka_unit_test(test_an_expired_entry_is_a_miss_and_freed_on_read),
    cmocka_unit_test(test_sweep_frees_expired_entries_without_reads),
    cmocka_unit_test(test_eviction_under_the_byte_bound_takes_unreferenced_entries),
    cmocka_unit_test(test_tenant_cap_is_shared_by_stores_and_refuses_puts),
    cmocka_unit_test(test_oversize_values_and_keys_are_refused_and_counted),
    cmocka_unit_test(test_if_absent_lets_exactly_one_of_two_win_and_if_version_checks),
    cmocka_unit_test(test_random_ops_match_a_reference),
    cmocka_unit_test(test_random_ops_under_pressure_keep_every_bound_and_sum),
    cmocka_unit_test(test_kib_entries_cost_under_1_3_kib_and_the_index_shrinks_after),
    cmocka_unit_test(test_two_threads_share_a_tenant_cap_without_passing_it),
    cmocka_unit_test(test_the_key_hash_is_siphash_2_4),
    cmocka_unit_test(test_remove_hands_back_the_value_and_its_version),
    cmocka_unit_test(test_a_refused_conditional_put_tells_the_current_version),
    cmocka_unit_test(test_clearing_a_cache_frees_only_its_entries),
    cmocka_unit_test(test_restored_versions_are_kept_and_later_ones_go_past_them),
    cmocka_unit_test(test_entries_freed_unasked_are_reported_and_deletes_are_not),
};
FX_TEST_MAIN(tests)
