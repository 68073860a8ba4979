/* Integration tests of the original's cache requests on a real broker
 * (cache_srv.c, felix-facts-durable-cache.md B2), spoken to in raw frames:
 * the original's vectors byte for byte (a put without request_id answered
 * ok and the stream ended, a get answered with the vector's cache_value),
 * a miss, TTL expiry on read and by the sweep, an oversize value refused,
 * eviction under the byte bound and the tenant cap, a cross-tenant and a
 * permission refusal, many requests in flight answered
 * by request_id in order, and a cache scope not found without auto-create;
 * the later cache_delete, cache_put_if / cache_delete_if (versions, the
 * if_absent race) and cache_value's version to a client offering
 * FEATURE_CACHE_CONDITIONAL only. */
/* fx-test-libs: fx_broker fx_storage fx_quic fx_wire fx_server fx_base */
#include <pthread.h>
#include <time.h>

#include "integ/broker_client.h"
#include "wire_vectors.h"

#include "auth/auth.h"
#include "server/authn.h"

static T *ct(uint32_t workers, bool auto_create)
{
    T *t = t_new();
    t->bo.workers = workers;
    t->bo.auto_create_streams = auto_create;
    t_start(t);
    return t;
}

#define SCOPE "\"tenant_id\":\"t1\",\"namespace\":\"default\",\"cache\":\"primary\""

static void test_the_original_vectors_put_then_get_byte_for_byte(void **state)
{
    (void)state;
    fx_vector put, get, val;
    fx_vec_load(&put, "cache_put");
    fx_vec_load(&get, "cache_get");
    fx_vec_load(&val, "cache_value");
    T *t = ct(2, true);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    send_bytes(s, put.frame, put.frame_len);
    expect_json(t, s, "{\"type\":\"ok\"}"); /* no request_id: ok, then the end */
    expect_end(t, s);
    s = authed_stream(t, c);
    send_bytes(s, get.frame, get.frame_len);
    tframe *f = next_reply(t, s);
    /* The whole frame: the header as the vector's, then its payload. */
    assert_int_equal(f->flags, 0);
    assert_int_equal(FX_WIRE_HEADER_LEN + f->len, val.frame_len);
    assert_memory_equal(f->body, val.frame + FX_WIRE_HEADER_LEN, f->len);
    tframe_free(f);
    expect_end(t, s); /* a get without request_id ends the stream too */
    t_free(t);
    fx_vec_free(&put);
    fx_vec_free(&get);
    fx_vec_free(&val);
}

static void test_a_miss_is_a_null_value_and_the_stream_goes_on(void **state)
{
    (void)state;
    T *t = ct(1, true);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    send_json(s, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"nope\",\"request_id\":3}");
    expect_json(t, s,
                "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"nope\",\"value\":null,"
                "\"request_id\":3}");
    send_json(s, "{\"type\":\"cache_put\"," SCOPE ",\"key\":\"k\",\"value\":\"YQ==\","
                 "\"request_id\":4,\"ttl_ms\":null}");
    expect_json(t, s, "{\"type\":\"cache_ok\",\"request_id\":4}");
    send_json(s, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"k\",\"request_id\":5}");
    expect_json(t, s,
                "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"k\",\"value\":\"YQ==\","
                "\"request_id\":5}");
    assert_false(s->fin || s->closed);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, cache_misses), 1);
    assert_int_equal(DELTA(before, after, cache_hits), 1);
    assert_int_equal(DELTA(before, after, cache_requests_put), 1);
    assert_int_equal(DELTA(before, after, cache_requests_get), 2);
    t_free(t);
}

static void test_an_entry_expires_at_its_ttl_read_or_swept(void **state)
{
    (void)state;
    T *t = ct(1, true);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    /* The conformance case: ttl 100, there at once, gone after 150 ms. */
    send_json(s, "{\"type\":\"cache_put\"," SCOPE ",\"key\":\"a\",\"value\":\"dmFsdWU=\","
                 "\"request_id\":1,\"ttl_ms\":100}");
    expect_json(t, s, "{\"type\":\"cache_ok\",\"request_id\":1}");
    send_json(s, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"a\",\"request_id\":2}");
    expect_json(t, s,
                "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"a\",\"value\":\"dmFsdWU=\","
                "\"request_id\":2}");
    run_for(t, 150);
    send_json(s, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"a\",\"request_id\":3}");
    expect_json(t, s,
                "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"a\",\"value\":null,"
                "\"request_id\":3}");
    /* ttl_ms 0: expired at once. */
    send_json(s, "{\"type\":\"cache_put\"," SCOPE ",\"key\":\"z\",\"value\":\"dmFsdWU=\","
                 "\"request_id\":4,\"ttl_ms\":0}");
    expect_json(t, s, "{\"type\":\"cache_ok\",\"request_id\":4}");
    send_json(s, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"z\",\"request_id\":5}");
    expect_json(t, s,
                "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"z\",\"value\":null,"
                "\"request_id\":5}");
    /* Never read: the sweep frees it. */
    send_json(s, "{\"type\":\"cache_put\"," SCOPE ",\"key\":\"b\",\"value\":\"dmFsdWU=\","
                 "\"request_id\":6,\"ttl_ms\":50}");
    expect_json(t, s, "{\"type\":\"cache_ok\",\"request_id\":6}");
    run_for(t, 200);
    fx_metrics_snapshot_take(&after);
    /* "a" was swept at 100 ms or freed by the read at 150 ms; "b" only swept. */
    assert_int_equal(
        DELTA(before, after, cache_expired_read) + DELTA(before, after, cache_expired_swept), 2);
    assert_true(DELTA(before, after, cache_expired_swept) >= 1);
    assert_int_equal(after.g.cache_entries, before.g.cache_entries);
    assert_int_equal(after.g.cache_bytes, before.g.cache_bytes);
    t_free(t);
}

static void test_an_oversize_value_or_key_is_refused_and_the_stream_goes_on(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.cache_max_value_bytes = 4;
    t->bo.cache_max_key_bytes = 3;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    send_json(s, "{\"type\":\"cache_put\"," SCOPE ",\"key\":\"k\",\"value\":\"YWJjZGU=\","
                 "\"request_id\":1,\"ttl_ms\":null}"); /* 5 bytes */
    expect_msg(t, s, FX_MSG_ERROR, "cache put refused: value too large", NULL);
    send_json(s, "{\"type\":\"cache_put\"," SCOPE ",\"key\":\"long\",\"value\":\"YQ==\","
                 "\"request_id\":2,\"ttl_ms\":null}");
    expect_msg(t, s, FX_MSG_ERROR, "cache put refused: key too long", NULL);
    send_json(s, "{\"type\":\"cache_put\"," SCOPE ",\"key\":\"k\",\"value\":\"YWJjZA==\","
                 "\"request_id\":3,\"ttl_ms\":null}"); /* 4 bytes: fits */
    expect_json(t, s, "{\"type\":\"cache_ok\",\"request_id\":3}");
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, cache_refused_value_too_large), 1);
    assert_int_equal(DELTA(before, after, cache_refused_key_too_long), 1);
    t_free(t);
}

static void test_another_tenants_cache_is_refused_and_ends_the_stream(void **state)
{
    (void)state;
    T *t = ct(1, true);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    send_json(s, "{\"type\":\"cache_put\",\"tenant_id\":\"t2\",\"namespace\":\"default\","
                 "\"cache\":\"primary\",\"key\":\"k\",\"value\":\"YQ==\",\"request_id\":1,"
                 "\"ttl_ms\":null}");
    expect_msg(t, s, FX_MSG_ERROR, "tenant mismatch", NULL);
    expect_end(t, s);
    /* t2's key is not there for t2 either: nothing was stored. */
    s = open_bidi(c);
    auth(t, s, "t2");
    send_json(s, "{\"type\":\"cache_get\",\"tenant_id\":\"t2\",\"namespace\":\"default\","
                 "\"cache\":\"primary\",\"key\":\"k\",\"request_id\":2}");
    expect_json(t, s,
                "{\"type\":\"cache_value\",\"tenant_id\":\"t2\",\"namespace\":\"default\","
                "\"cache\":\"primary\",\"key\":\"k\",\"value\":null,\"request_id\":2}");
    t_free(t);
}

/* Each put on its own cache (spread over the workers), then the gets: the
 * answers come in request order, each with its request_id. */
static void test_many_requests_in_flight_are_answered_by_request_id(void **state)
{
    (void)state;
    T *t = ct(2, true);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    enum { N = 64 };
    char j[256];
    for (int i = 0; i < N; i++) {
        snprintf(j, sizeof(j),
                 "{\"type\":\"cache_put\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"cache\":\"c%d\",\"key\":\"k\",\"value\":\"YQ==\",\"request_id\":%d,"
                 "\"ttl_ms\":null}",
                 i, 1000 + i);
        send_json(s, j);
    }
    for (int i = 0; i < N; i++) {
        snprintf(j, sizeof(j),
                 "{\"type\":\"cache_get\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"cache\":\"c%d\",\"key\":\"k\",\"request_id\":%d}",
                 i, 2000 + i);
        send_json(s, j);
    }
    for (int i = 0; i < N; i++) {
        fx_msg m;
        expect_msg(t, s, FX_MSG_CACHE_OK, NULL, &m);
        assert_int_equal(m.request_id, 1000 + i);
        fx_msg_deinit(&m);
    }
    for (int i = 0; i < N; i++) {
        fx_msg m;
        expect_msg(t, s, FX_MSG_CACHE_VALUE, NULL, &m);
        assert_int_equal(m.request_id, 2000 + i);
        assert_true(m.has_value);
        char want[16];
        snprintf(want, sizeof(want), "c%d", i);
        assert_string_equal(m.cache, want);
        assert_int_equal(m.value.len, 1);
        assert_int_equal(m.value.p[0], 'a');
        fx_msg_deinit(&m);
    }
    assert_false(s->fin || s->closed);
    t_free(t);
}

static void test_an_unknown_cache_without_auto_create_is_not_found(void **state)
{
    (void)state;
    T *t = ct(1, false);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    send_json(s, "{\"type\":\"cache_put\"," SCOPE ",\"key\":\"k\",\"value\":\"YQ==\","
                 "\"request_id\":1,\"ttl_ms\":null}");
    expect_json(t, s,
                "{\"type\":\"error\",\"message\":\"cache scope not found: "
                "t1/default/primary\"}");
    /* With a request_id the stream goes on; without, it ends. */
    send_json(s, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"k\"}");
    expect_msg(t, s, FX_MSG_ERROR, "cache scope not found: t1/default/primary", NULL);
    expect_end(t, s);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, cache_refused_not_found), 2);
    t_free(t);
}

/* Puts |n| values of 750 bytes under keys k0.. (856 accounted bytes each)
 * on |s| and expects |ok| of them stored, the rest refused with |why|. */
static void put_750s(T *t, tstream *s, int n, int ok, const char *why)
{
    char *j = malloc(2048);
    assert_non_null(j);
    for (int i = 0; i < n; i++) {
        int w =
            snprintf(j, 2048, "{\"type\":\"cache_put\"," SCOPE ",\"key\":\"k%d\",\"value\":\"", i);
        for (int k = 0; k < 250; k++, w += 4)
            memcpy(j + w, "QUFB", 4);
        snprintf(j + w, 2048 - (size_t)w, "\",\"request_id\":%d,\"ttl_ms\":null}", i);
        send_json(s, j);
    }
    for (int i = 0; i < n; i++) {
        fx_msg m;
        expect_msg(t, s, i < ok ? FX_MSG_CACHE_OK : FX_MSG_ERROR, i < ok ? NULL : why, &m);
        fx_msg_deinit(&m);
    }
    free(j);
}

static void test_the_byte_bound_evicts_and_the_tenant_cap_refuses(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.workers = 1;
    t->bo.cache_max_bytes = 4096; /* four entries of 856 bytes */
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    put_750s(t, s, 6, 6, NULL);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, cache_evictions), 2);
    assert_int_equal(after.g.cache_entries - before.g.cache_entries, 4);
    assert_int_equal(after.g.cache_bytes - before.g.cache_bytes, 4 * 856);
    t_free(t);

    t = t_new();
    t->bo.cache_tenant_max_bytes = 2000; /* two entries */
    t_start(t);
    c = t_connect(t);
    s = authed_stream(t, c);
    fx_metrics_snapshot_take(&before);
    put_750s(t, s, 3, 2, "cache put refused: tenant over its cache byte cap");
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, cache_refused_tenant_over_cap), 1);
    assert_int_equal(DELTA(before, after, cache_evictions), 0);
    t_free(t);
}

static char *mint_t1(const uint8_t *priv, const char *const *perms, size_t n)
{
    fx_auth_mint_claims mc = {.sub = "tester",
                              .tid = "t1",
                              .iat = (int64_t)time(NULL),
                              .has_iat = true,
                              .exp = (int64_t)time(NULL) + 3600,
                              .perms = perms,
                              .nperms = n};
    char *tok = NULL;
    assert_int_equal(fx_auth_mint(priv, "k1", &mc, &tok), 0);
    return tok;
}

static tstream *token_stream(T *t, tconn *c, const char *token)
{
    tstream *s = open_bidi(c);
    fx_msg m;
    fx_msg_init_auth(&m, "t1", token, true, 63);
    send_msg(s, &m);
    expect_msg(t, s, FX_MSG_AUTH_OK, NULL, NULL);
    return s;
}

static void test_cache_read_and_cache_write_are_checked_on_the_cache(void **state)
{
    (void)state;
    T *t = t_new();
    uint8_t pub[FX_AUTH_KEY_BYTES], priv[FX_AUTH_KEY_BYTES];
    assert_int_equal(fx_auth_keygen(pub, priv), 0);
    char jwks[128];
    snprintf(jwks, sizeof(jwks), "%s/jwks.json", t->dir);
    FILE *f = fopen(jwks, "w");
    assert_non_null(f);
    assert_int_equal(fx_auth_jwks_write(f, "k1", pub), 0);
    assert_int_equal(fclose(f), 0);
    char why[512];
    fx_authn *an = NULL;
    fx_authn_opts ao = {.jwks_file = jwks, .leeway_s = 60};
    if (fx_authn_new(&an, &ao, why, sizeof(why)) != 0)
        fail_msg("authn: %s", why);
    fx_authn_broker_auth(an, &t->bo.auth);
    t_start(t);
    static const char *const rw[] = {"cache.read:cache:t1/default/*",
                                     "cache.write:cache:t1/default/primary"};
    static const char *const ro[] = {"cache.read:cache:t1/*/*",
                                     "stream.publish:stream:t1/default/primary"};
    char *trw = mint_t1(priv, rw, 2), *tro = mint_t1(priv, ro, 2);
    tconn *c = t_connect(t);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    tstream *s = token_stream(t, c, trw);
    send_json(s, "{\"type\":\"cache_put\"," SCOPE ",\"key\":\"k\",\"value\":\"YQ==\","
                 "\"request_id\":1,\"ttl_ms\":null}");
    expect_json(t, s, "{\"type\":\"cache_ok\",\"request_id\":1}");
    /* cache.write on primary only: another cache is forbidden, the stream ends. */
    send_json(s, "{\"type\":\"cache_put\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"cache\":\"other\",\"key\":\"k\",\"value\":\"YQ==\",\"request_id\":2,"
                 "\"ttl_ms\":null}");
    expect_msg(t, s, FX_MSG_ERROR, "forbidden", NULL);
    expect_end(t, s);
    /* A stream permission on the same names grants no cache write. */
    s = token_stream(t, c, tro);
    send_json(s, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"k\",\"request_id\":3}");
    expect_json(t, s,
                "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"k\",\"value\":\"YQ==\","
                "\"request_id\":3}");
    send_json(s, "{\"type\":\"cache_put\"," SCOPE ",\"key\":\"k\",\"value\":\"YQ==\","
                 "\"request_id\":4,\"ttl_ms\":null}");
    expect_msg(t, s, FX_MSG_ERROR, "forbidden", NULL);
    expect_end(t, s);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, cache_refused_forbidden), 2);
    free(trw);
    free(tro);
    t_free(t);
    fx_authn_free(an);
}

/* A stream authenticated as t1 offering |features| (auth.client_features). */
static tstream *features_stream(T *t, tconn *c, uint32_t features)
{
    tstream *s = open_bidi(c);
    fx_msg m;
    fx_msg_init_auth(&m, "t1", "any-token", true, 63);
    m.has_client_features = true;
    m.client_features = features;
    send_msg(s, &m);
    fx_msg r;
    expect_msg(t, s, FX_MSG_AUTH_OK, NULL, &r);
    assert_true(r.has_server_features);
    assert_int_equal(r.server_features & (FX_FEATURE_CACHE_DELETE | FX_FEATURE_CACHE_CONDITIONAL),
                     FX_FEATURE_CACHE_DELETE | FX_FEATURE_CACHE_CONDITIONAL);
    fx_msg_deinit(&r);
    return s;
}

#define PUT_K(v, id)                                                                               \
    "{\"type\":\"cache_put\"," SCOPE ",\"key\":\"k\",\"value\":\"" v "\",\"request_id\":" #id      \
    ",\"ttl_ms\":null}"

static void test_a_delete_answers_the_removed_value_or_null(void **state)
{
    (void)state;
    T *t = ct(1, true);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    send_json(s, PUT_K("YQ==", 1));
    expect_json(t, s, "{\"type\":\"cache_ok\",\"request_id\":1}");
    /* Present: the removed value (no version: this client offered no bits). */
    send_json(s, "{\"type\":\"cache_delete\"," SCOPE ",\"key\":\"k\",\"request_id\":2}");
    expect_json(t, s,
                "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"k\",\"value\":\"YQ==\","
                "\"request_id\":2}");
    /* Gone: a get misses, a second delete answers null; the stream goes on. */
    send_json(s, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"k\",\"request_id\":3}");
    expect_json(t, s,
                "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"k\",\"value\":null,"
                "\"request_id\":3}");
    send_json(s, "{\"type\":\"cache_delete\"," SCOPE ",\"key\":\"k\",\"request_id\":4}");
    expect_json(t, s,
                "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"k\",\"value\":null,"
                "\"request_id\":4}");
    assert_false(s->fin || s->closed);
    /* Without request_id: the answer, then the end of the stream. */
    send_json(s, "{\"type\":\"cache_delete\"," SCOPE ",\"key\":\"k\"}");
    expect_json(t, s, "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"k\",\"value\":null}");
    expect_end(t, s);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, cache_requests_delete), 3);
    assert_int_equal(DELTA(before, after, cache_deletes), 1);
    assert_int_equal(after.g.cache_entries, before.g.cache_entries);
    t_free(t);
}

static void test_of_two_if_absent_puts_exactly_one_is_applied(void **state)
{
    (void)state;
    T *t = ct(2, true);
    tconn *c1 = t_connect(t), *c2 = t_connect(t);
    tstream *a = features_stream(t, c1, FX_FEATURE_CACHE_CONDITIONAL);
    tstream *b = features_stream(t, c2, FX_FEATURE_CACHE_CONDITIONAL);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    /* Both sent before either is answered. */
    send_json(a, "{\"type\":\"cache_put_if\"," SCOPE ",\"key\":\"k\",\"value\":\"YQ==\","
                 "\"ttl_ms\":null,\"condition\":\"absent\",\"request_id\":1}");
    send_json(b, "{\"type\":\"cache_put_if\"," SCOPE ",\"key\":\"k\",\"value\":\"Yg==\","
                 "\"ttl_ms\":null,\"condition\":\"absent\",\"request_id\":1}");
    fx_msg ra, rb;
    expect_msg(t, a, FX_MSG_CACHE_CONDITION_RESULT, NULL, &ra);
    expect_msg(t, b, FX_MSG_CACHE_CONDITION_RESULT, NULL, &rb);
    assert_true(ra.applied != rb.applied);
    const fx_msg *won = ra.applied ? &ra : &rb, *lost = ra.applied ? &rb : &ra;
    /* The loser learns the winner's version. */
    assert_true(won->has_version);
    assert_true(lost->has_version);
    assert_int_equal(lost->version, won->version);
    fx_msg_deinit(&ra);
    fx_msg_deinit(&rb);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, cache_requests_put_if), 2);
    assert_int_equal(DELTA(before, after, cache_condition_refused), 1);
    t_free(t);
}

static void test_put_if_and_delete_if_check_the_version(void **state)
{
    (void)state;
    T *t = ct(1, true);
    tconn *c = t_connect(t);
    tstream *s = features_stream(t, c, FX_FEATURE_CACHE_CONDITIONAL);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    /* Absent key: a version condition is refused without a version. */
    send_json(s, "{\"type\":\"cache_put_if\"," SCOPE ",\"key\":\"k\",\"value\":\"YQ==\","
                 "\"ttl_ms\":null,\"condition\":{\"version\":1},\"request_id\":1}");
    expect_json(t, s, "{\"type\":\"cache_condition_result\",\"applied\":false,\"request_id\":1}");
    send_json(s, PUT_K("YQ==", 2));
    expect_json(t, s, "{\"type\":\"cache_ok\",\"request_id\":2}");
    /* The get reports the version to this client. */
    send_json(s, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"k\",\"request_id\":3}");
    fx_msg g;
    expect_msg(t, s, FX_MSG_CACHE_VALUE, NULL, &g);
    assert_true(g.has_version);
    uint64_t v = g.version;
    fx_msg_deinit(&g);
    char j[512], want[256];
    /* The wrong version: refused with the current one. */
    snprintf(j, sizeof(j),
             "{\"type\":\"cache_put_if\"," SCOPE ",\"key\":\"k\",\"value\":\"Yg==\","
             "\"ttl_ms\":null,\"condition\":{\"version\":%llu},\"request_id\":4}",
             (unsigned long long)(v + 1));
    send_json(s, j);
    snprintf(want, sizeof(want),
             "{\"type\":\"cache_condition_result\",\"applied\":false,\"version\":%llu,"
             "\"request_id\":4}",
             (unsigned long long)v);
    expect_json(t, s, want);
    /* The right version: applied, with a new version. */
    snprintf(j, sizeof(j),
             "{\"type\":\"cache_put_if\"," SCOPE ",\"key\":\"k\",\"value\":\"Yg==\","
             "\"ttl_ms\":null,\"condition\":{\"version\":%llu},\"request_id\":5}",
             (unsigned long long)v);
    send_json(s, j);
    fx_msg r;
    expect_msg(t, s, FX_MSG_CACHE_CONDITION_RESULT, NULL, &r);
    assert_true(r.applied);
    assert_true(r.has_version);
    assert_true(r.version > v);
    uint64_t v2 = r.version;
    fx_msg_deinit(&r);
    /* if_absent on a present key: refused with its version. */
    send_json(s, "{\"type\":\"cache_put_if\"," SCOPE ",\"key\":\"k\",\"value\":\"Yw==\","
                 "\"ttl_ms\":null,\"condition\":\"absent\",\"request_id\":6}");
    snprintf(want, sizeof(want),
             "{\"type\":\"cache_condition_result\",\"applied\":false,\"version\":%llu,"
             "\"request_id\":6}",
             (unsigned long long)v2);
    expect_json(t, s, want);
    /* delete_if: the old version is refused, the current one applied (no version). */
    snprintf(j, sizeof(j),
             "{\"type\":\"cache_delete_if\"," SCOPE ",\"key\":\"k\",\"version\":%llu,"
             "\"request_id\":7}",
             (unsigned long long)v);
    send_json(s, j);
    snprintf(want, sizeof(want),
             "{\"type\":\"cache_condition_result\",\"applied\":false,\"version\":%llu,"
             "\"request_id\":7}",
             (unsigned long long)v2);
    expect_json(t, s, want);
    snprintf(j, sizeof(j),
             "{\"type\":\"cache_delete_if\"," SCOPE ",\"key\":\"k\",\"version\":%llu,"
             "\"request_id\":8}",
             (unsigned long long)v2);
    send_json(s, j);
    expect_json(t, s, "{\"type\":\"cache_condition_result\",\"applied\":true,\"request_id\":8}");
    send_json(s, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"k\",\"request_id\":9}");
    expect_json(t, s,
                "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"k\",\"value\":null,"
                "\"request_id\":9}");
    /* A put_if over a limit gets the error a put gets; the stream goes on. */
    assert_false(s->fin || s->closed);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, cache_condition_refused), 4);
    assert_int_equal(DELTA(before, after, cache_requests_put_if), 4);
    assert_int_equal(DELTA(before, after, cache_requests_delete_if), 2);
    assert_int_equal(DELTA(before, after, cache_deletes), 1);
    t_free(t);
}

static void test_a_put_if_over_a_limit_is_refused_as_a_put(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.cache_max_value_bytes = 4;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = features_stream(t, c, FX_FEATURE_CACHE_CONDITIONAL);
    send_json(s, "{\"type\":\"cache_put_if\"," SCOPE ",\"key\":\"k\",\"value\":\"YWJjZGU=\","
                 "\"ttl_ms\":null,\"condition\":\"absent\",\"request_id\":1}");
    expect_msg(t, s, FX_MSG_ERROR, "cache put refused: value too large", NULL);
    send_json(s, "{\"type\":\"cache_put_if\"," SCOPE ",\"key\":\"k\",\"value\":\"YWJjZA==\","
                 "\"ttl_ms\":null,\"condition\":\"absent\",\"request_id\":2}");
    fx_msg r;
    expect_msg(t, s, FX_MSG_CACHE_CONDITION_RESULT, NULL, &r);
    assert_true(r.applied);
    assert_int_equal(r.request_id, 2);
    fx_msg_deinit(&r);
    t_free(t);
}

static void test_cache_value_carries_the_version_only_to_a_client_offering_it(void **state)
{
    (void)state;
    T *t = ct(1, true);
    tconn *c = t_connect(t);
    tstream *plain = features_stream(t, c, FX_FEATURE_CONSUMER_GROUP);
    tstream *cond = features_stream(t, c, FX_FEATURE_CACHE_CONDITIONAL);
    tstream *old = authed_stream(t, c);
    send_json(plain, PUT_K("YQ==", 1));
    expect_json(t, plain, "{\"type\":\"cache_ok\",\"request_id\":1}");
    const char *orig = "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"k\",\"value\":\"YQ==\","
                       "\"request_id\":2}";
    send_json(plain, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"k\",\"request_id\":2}");
    expect_json(t, plain, orig);
    send_json(old, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"k\",\"request_id\":2}");
    expect_json(t, old, orig);
    send_json(cond, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"k\",\"request_id\":2}");
    expect_json(t, cond,
                "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"k\",\"value\":\"YQ==\","
                "\"version\":1,\"request_id\":2}");
    /* A miss carries none, to anyone. */
    send_json(cond, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"x\",\"request_id\":3}");
    expect_json(t, cond,
                "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"x\",\"value\":null,"
                "\"request_id\":3}");
    /* The delete's answer carries the removed entry's version. */
    send_json(cond, "{\"type\":\"cache_delete\"," SCOPE ",\"key\":\"k\",\"request_id\":4}");
    expect_json(t, cond,
                "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"k\",\"value\":\"YQ==\","
                "\"version\":1,\"request_id\":4}");
    t_free(t);
}

static void test_a_declared_cache_is_served_without_auto_create(void **state)
{
    (void)state;
    static const fx_broker_stream_name decl[] = {{"t1", "default", "primary"}};
    T *t = t_new();
    t->bo.workers = 2;
    t->bo.auto_create_streams = false;
    t->bo.caches = decl;
    t->bo.ncaches = 1;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    /* Declared in the options (the YAML's caches): served. */
    send_json(s, PUT_K("YQ==", 1));
    expect_json(t, s, "{\"type\":\"cache_ok\",\"request_id\":1}");
    /* Another cache is not declared: refused, the stream goes on. */
    send_json(s, "{\"type\":\"cache_get\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"cache\":\"other\",\"key\":\"k\",\"request_id\":2}");
    expect_json(t, s,
                "{\"type\":\"error\",\"message\":\"cache scope not found: t1/default/other\"}");
    /* Declared through the admin API's call: served from now on. */
    bool created = false;
    fx_registry_err err = {0};
    assert_int_equal(fx_broker_declare_cache(t->b, "t1", "default", "other", &created, &err), 0);
    assert_true(created);
    assert_int_equal(fx_broker_declare_cache(t->b, "t1", "default", "other", &created, &err), 0);
    assert_false(created);
    assert_int_equal(fx_broker_declare_cache(t->b, "t1", "", "x", &created, &err), FX_EWIRE_NAME);
    assert_non_null(strstr(err.msg, "namespace"));
    send_json(s, "{\"type\":\"cache_put\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"cache\":\"other\",\"key\":\"k\",\"value\":\"Yg==\",\"request_id\":3,"
                 "\"ttl_ms\":null}");
    expect_json(t, s, "{\"type\":\"cache_ok\",\"request_id\":3}");
    send_json(s, "{\"type\":\"cache_put\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"cache\":\"other\",\"key\":\"k2\",\"value\":\"Yg==\",\"request_id\":4,"
                 "\"ttl_ms\":null}");
    expect_json(t, s, "{\"type\":\"cache_ok\",\"request_id\":4}");
    /* GET /v1/caches: both, with their figures; a declared unused one too. */
    assert_int_equal(fx_broker_declare_cache(t->b, "t1", "ns2", "idle", NULL, &err), 0);
    char *json = NULL;
    assert_int_equal(fx_broker_list_caches(t->b, 2000000000ull, &json), 0);
    const char *want = "{\"caches\":["
                       "{\"tenant\":\"t1\",\"namespace\":\"default\",\"cache\":\"other\","
                       "\"declared\":true,\"entries\":2,\"bytes\":213},"
                       "{\"tenant\":\"t1\",\"namespace\":\"default\",\"cache\":\"primary\","
                       "\"declared\":true,\"entries\":1,\"bytes\":106},"
                       "{\"tenant\":\"t1\",\"namespace\":\"ns2\",\"cache\":\"idle\","
                       "\"declared\":true,\"entries\":0,\"bytes\":0}]}";
    if (strcmp(json, want) != 0)
        fail_msg("got %s", json);
    free(json);
    /* Dropped: the declaration goes and the entries are freed, counted. */
    uint64_t n = 99;
    assert_int_equal(fx_broker_drop_cache(t->b, "t1", "default", "other", 2000000000ull, &n, &err),
                     0);
    assert_int_equal(n, 2);
    assert_int_equal(fx_broker_drop_cache(t->b, "t1", "default", "nope", 2000000000ull, &n, &err),
                     -ENOENT);
    send_json(s, "{\"type\":\"cache_get\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"cache\":\"other\",\"key\":\"k\",\"request_id\":5}");
    expect_json(t, s,
                "{\"type\":\"error\",\"message\":\"cache scope not found: t1/default/other\"}");
    /* Declared again: empty. */
    assert_int_equal(fx_broker_declare_cache(t->b, "t1", "default", "other", NULL, &err), 0);
    send_json(s, "{\"type\":\"cache_get\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"cache\":\"other\",\"key\":\"k\",\"request_id\":6}");
    expect_json(t, s,
                "{\"type\":\"cache_value\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                "\"cache\":\"other\",\"key\":\"k\",\"value\":null,\"request_id\":6}");
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, cache_dropped), 2);
    assert_int_equal(DELTA(before, after, cache_refused_not_found), 2);
    assert_int_equal(after.g.cache_entries - before.g.cache_entries, 1);
    t_free(t);
}

static uint64_t hist_count(const fx_hist *h)
{
    uint64_t n = 0;
    for (size_t i = 0; i <= FX_HIST_NBUCKETS; i++)
        n += atomic_load(&h->buckets[i]);
    return n;
}

static void test_per_tenant_series_and_the_latency_histogram(void **state)
{
    (void)state;
    T *t = ct(2, true);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    send_json(s, PUT_K("YQ==", 1));
    expect_json(t, s, "{\"type\":\"cache_ok\",\"request_id\":1}");
    send_json(s, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"k\",\"request_id\":2}");
    expect_msg(t, s, FX_MSG_CACHE_VALUE, NULL, NULL);
    send_json(s, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"x\",\"request_id\":3}");
    expect_msg(t, s, FX_MSG_CACHE_VALUE, NULL, NULL);
    send_json(s, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"y\",\"request_id\":4}");
    expect_msg(t, s, FX_MSG_CACHE_VALUE, NULL, NULL);
    send_json(s, "{\"type\":\"cache_delete\"," SCOPE ",\"key\":\"y\",\"request_id\":5}");
    expect_msg(t, s, FX_MSG_CACHE_VALUE, NULL, NULL);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(
        hist_count(&after.h.cache_latency_get_ns) - hist_count(&before.h.cache_latency_get_ns), 3);
    assert_int_equal(
        hist_count(&after.h.cache_latency_put_ns) - hist_count(&before.h.cache_latency_put_ns), 1);
    assert_int_equal(hist_count(&after.h.cache_latency_delete_ns) -
                         hist_count(&before.h.cache_latency_delete_ns),
                     1);
    /* The per-tenant series: only with the per-stream labels on. */
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(fx_metrics_render(&text, &len, true), 0);
    const char *want[] = {"felix_cache_tenant_entries{tenant=\"t1\"} 1\n",
                          "felix_cache_tenant_bytes{tenant=\"t1\"} 106\n",
                          "felix_cache_tenant_hits_total{tenant=\"t1\"} 1\n",
                          "felix_cache_tenant_misses_total{tenant=\"t1\"} 2\n"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (strstr(text, want[i]) == NULL)
            fail_msg("/metrics lacks %s", want[i]);
    free(text);
    assert_int_equal(fx_metrics_render(&text, &len, false), 0);
    assert_null(strstr(text, "felix_cache_tenant_entries{"));
    assert_non_null(strstr(text, "# TYPE felix_cache_tenant_entries gauge"));
    free(text);
    t_free(t);
}

typedef struct drainer {
    fx_broker *b;
    fx_broker_drain_report r;
    int rv;
} drainer;

static void *drain_thread(void *arg)
{
    drainer *d = arg;
    d->rv = fx_broker_drain(d->b, fx_now_ns() + 5ull * 1000000000ull, &d->r);
    return NULL;
}

/* A drain started with cache requests in flight answers every accepted
 * one (each request holds its reply slot from its acceptance, which the
 * drain waits for) before the connection closes; requests that arrive
 * after it began are refused "broker shutting down", never lost. */
static void test_a_drain_answers_the_cache_requests_in_flight(void **state)
{
    (void)state;
    T *t = ct(2, true);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    enum { N = 200 };
    char j[256];
    for (int i = 0; i < N; i++) {
        snprintf(j, sizeof(j),
                 "{\"type\":\"cache_put\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"cache\":\"c%d\",\"key\":\"k\",\"value\":\"YQ==\",\"request_id\":%d,"
                 "\"ttl_ms\":null}",
                 i % 8, i);
        send_json(s, j);
    }
    /* The first answer: the broker is reading the stream. */
    fx_msg m;
    expect_msg(t, s, FX_MSG_CACHE_OK, NULL, &m);
    assert_int_equal(m.request_id, 0);
    fx_msg_deinit(&m);
    drainer d = {.b = t->b};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, drain_thread, &d), 0);
    int ok = 1, refused = 0;
    for (int i = 1; i < N; i++) {
        tframe *f = next_reply(t, s);
        assert_int_equal(fx_msg_decode(&m, f->body, f->len, NULL), 0);
        tframe_free(f);
        if (m.type == FX_MSG_CACHE_OK) {
            /* In request order: no accepted put is answered after a refusal. */
            assert_int_equal(refused, 0);
            assert_int_equal(m.request_id, i);
            ok++;
        } else {
            assert_int_equal(m.type, FX_MSG_ERROR);
            assert_string_equal(m.message, "broker shutting down");
            refused++;
        }
        fx_msg_deinit(&m);
    }
    assert_int_equal(ok + refused, N);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(d.rv, 0);
    assert_false(d.r.timed_out);
    assert_int_equal(d.r.replies_pending, 0);
    t_free(t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_the_original_vectors_put_then_get_byte_for_byte),
    cmocka_unit_test(test_a_miss_is_a_null_value_and_the_stream_goes_on),
    cmocka_unit_test(test_an_entry_expires_at_its_ttl_read_or_swept),
    cmocka_unit_test(test_an_oversize_value_or_key_is_refused_and_the_stream_goes_on),
    cmocka_unit_test(test_another_tenants_cache_is_refused_and_ends_the_stream),
    cmocka_unit_test(test_many_requests_in_flight_are_answered_by_request_id),
    cmocka_unit_test(test_an_unknown_cache_without_auto_create_is_not_found),
    cmocka_unit_test(test_the_byte_bound_evicts_and_the_tenant_cap_refuses),
    cmocka_unit_test(test_cache_read_and_cache_write_are_checked_on_the_cache),
    cmocka_unit_test(test_a_delete_answers_the_removed_value_or_null),
    cmocka_unit_test(test_of_two_if_absent_puts_exactly_one_is_applied),
    cmocka_unit_test(test_put_if_and_delete_if_check_the_version),
    cmocka_unit_test(test_a_put_if_over_a_limit_is_refused_as_a_put),
    cmocka_unit_test(test_cache_value_carries_the_version_only_to_a_client_offering_it),
    cmocka_unit_test(test_a_declared_cache_is_served_without_auto_create),
    cmocka_unit_test(test_per_tenant_series_and_the_latency_histogram),
    cmocka_unit_test(test_a_drain_answers_the_cache_requests_in_flight),
};

FX_TEST_MAIN(tests)
