/* Integration tests of the binary cache frames (cache_srv.c,
 * wire/cache_bin.h) on a real broker, spoken to in raw frames: a client
 * offering FX_FEATURE_HI_CACHE_BINARY puts, gets and deletes in binary,
 * mixed with JSON requests on one stream and answered in request order;
 * errors (a value too large, forbidden) are status 2 answers; a client not
 * offering the bit is refused a binary frame like any unknown flag and its
 * JSON requests are answered byte for byte as before. */
/* fx-test-libs: fx_broker fx_storage fx_quic fx_wire fx_server fx_base */
#include "integ/broker_client.h"

#include "wire/cache_bin.h"

static T *ct(void)
{
    T *t = t_new();
    t->bo.workers = 2;
    t_start(t);
    return t;
}

/* Authenticates |s| as t1 offering the binary cache frames; checks that the
 * broker advertises them. */
static void auth_binary(T *t, tstream *s)
{
    fx_msg m;
    fx_msg_init_auth(&m, "t1", "any-token", true, 63);
    m.client_features = FX_FEATURE_EXTENDED;
    m.has_client_features = true;
    m.client_features_hi = FX_FEATURE_HI_CACHE_BINARY;
    m.has_client_features_hi = true;
    send_msg(s, &m);
    fx_msg r;
    expect_msg(t, s, FX_MSG_AUTH_OK, NULL, &r);
    assert_true(r.has_server_features_hi);
    assert_true((r.server_features & FX_FEATURE_EXTENDED) != 0);
    assert_true((r.server_features_hi & FX_FEATURE_HI_CACHE_BINARY) != 0);
    fx_msg_deinit(&r);
}

static void send_req(tstream *s, uint8_t op, uint64_t rid, const char *cache, const char *key,
                     const void *v, size_t vlen, uint64_t ttl_ms)
{
    fx_wire_cache_req q = {
        .op = op,
        .request_id = rid,
        .ns = {(const uint8_t *)"default", 7},
        .cache = {(const uint8_t *)cache, strlen(cache)},
        .key = {(const uint8_t *)key, strlen(key)},
        .ttl_ms = ttl_ms,
        .value = {v, vlen},
    };
    size_t n = fx_wire_cache_req_frame_size(&q);
    uint8_t *frame = malloc(n);
    assert_non_null(frame);
    assert_int_equal(fx_wire_cache_req_encode(&q, frame, n), (ssize_t)n);
    send_bytes(s, frame, n);
    free(frame);
}

/* Expects the next reply on |s| to be a CACHE_ANSWER with |status| and
 * |rid|, its value (status 0) or text (status 2) |want| (NULL: not
 * checked). */
static void expect_ans(T *t, tstream *s, uint8_t status, uint64_t rid, const char *want)
{
    tframe *f = next_reply(t, s);
    if (f->flags != FX_FLAG_FELIXC)
        fail_msg("want a binary answer, got flags 0x%04x: %.*s", f->flags, (int)f->len,
                 (char *)f->body);
    fx_wire_cache_ans a;
    assert_int_equal(fx_wire_cache_ans_decode(f->body, f->len, &a, NULL), 0);
    assert_int_equal(a.status, status);
    assert_int_equal(a.request_id, rid);
    if (want != NULL) {
        fx_wire_slice got = status == FX_CACHE_BIN_ERROR ? a.text : a.value;
        if (got.len != strlen(want) || (got.len && memcmp(got.ptr, want, got.len) != 0))
            fail_msg("want '%s', got '%.*s'", want, (int)got.len, (const char *)got.ptr);
    }
    tframe_free(f);
}

#define SCOPE "\"tenant_id\":\"t1\",\"namespace\":\"default\",\"cache\":\"primary\""

static void test_put_get_delete_in_binary_mixed_with_json_in_request_order(void **state)
{
    (void)state;
    T *t = ct();
    tconn *c = t_connect(t);
    tstream *s = open_bidi(c);
    auth_binary(t, s);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    uint8_t v[300];
    for (size_t i = 0; i < sizeof(v); i++)
        v[i] = (uint8_t)(i * 13); /* binary, with NULs */
    send_req(s, FX_CACHE_BIN_PUT, 1, "primary", "k", v, sizeof(v), 0);
    send_req(s, FX_CACHE_BIN_GET, 2, "primary", "k", NULL, 0, 0);
    send_json(s, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"nope\",\"request_id\":3}");
    send_req(s, FX_CACHE_BIN_PUT, 4, "primary", "e", NULL, 0, 60000); /* empty value */
    send_req(s, FX_CACHE_BIN_GET, 5, "primary", "e", NULL, 0, 0);
    send_req(s, FX_CACHE_BIN_DELETE, 6, "primary", "e", NULL, 0, 0);
    send_req(s, FX_CACHE_BIN_DELETE, 7, "primary", "e", NULL, 0, 0);
    send_req(s, FX_CACHE_BIN_GET, 8, "primary", "e", NULL, 0, 0);
    expect_ans(t, s, FX_CACHE_BIN_OK, 1, "");
    tframe *f = next_reply(t, s);
    fx_wire_cache_ans a;
    assert_int_equal(f->flags, FX_FLAG_FELIXC);
    assert_int_equal(fx_wire_cache_ans_decode(f->body, f->len, &a, NULL), 0);
    assert_int_equal(a.request_id, 2);
    assert_int_equal(a.status, FX_CACHE_BIN_OK);
    assert_int_equal(a.value.len, sizeof(v));
    assert_memory_equal(a.value.ptr, v, sizeof(v));
    tframe_free(f);
    expect_json(t, s,
                "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"nope\",\"value\":null,"
                "\"request_id\":3}");
    expect_ans(t, s, FX_CACHE_BIN_OK, 4, "");
    expect_ans(t, s, FX_CACHE_BIN_OK, 5, "");     /* a hit with an empty value */
    expect_ans(t, s, FX_CACHE_BIN_OK, 6, "");     /* removed (its value, empty) */
    expect_ans(t, s, FX_CACHE_BIN_MISS, 7, NULL); /* nothing to remove */
    expect_ans(t, s, FX_CACHE_BIN_MISS, 8, NULL);
    assert_false(s->fin || s->closed);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, cache_binary_requests), 7);
    assert_int_equal(DELTA(before, after, cache_binary_refused), 0);
    assert_int_equal(DELTA(before, after, cache_requests_put), 2);
    assert_int_equal(DELTA(before, after, cache_requests_get), 4);
    assert_int_equal(DELTA(before, after, cache_requests_delete), 2);
    assert_int_equal(DELTA(before, after, cache_hits), 2);
    t_free(t);
}

/* auth: any token; cache "secret" refused. */
static int a_verify(void *user, const char *tenant, const char *token, size_t len, int64_t now_s,
                    void **pctx, char *why, size_t whylen)
{
    (void)user, (void)tenant, (void)token, (void)len, (void)now_s, (void)why, (void)whylen;
    *pctx = (void *)1;
    return 0;
}

static bool a_allows(void *user, const void *ctx, fx_broker_auth_action action, const char *tenant,
                     const char *ns, const char *name)
{
    (void)user, (void)ctx, (void)tenant, (void)ns;
    if (action == FX_BROKER_AUTH_CACHE_READ || action == FX_BROKER_AUTH_CACHE_WRITE)
        return strcmp(name, "secret") != 0;
    return true;
}

static void a_release(void *user, void *ctx)
{
    (void)user, (void)ctx;
}

static void test_errors_are_status_2_with_the_json_texts(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.workers = 1;
    t->bo.cache_max_value_bytes = 4;
    t->bo.auth = (fx_broker_auth){.verify = a_verify, .allows = a_allows, .release = a_release};
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = open_bidi(c);
    auth_binary(t, s);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    send_req(s, FX_CACHE_BIN_PUT, 1, "primary", "k", "too long", 8, 0);
    expect_ans(t, s, FX_CACHE_BIN_ERROR, 1, "cache put refused: value too large");
    /* The stream goes on. */
    send_req(s, FX_CACHE_BIN_PUT, 2, "primary", "k", "ok", 2, 0);
    expect_ans(t, s, FX_CACHE_BIN_OK, 2, "");
    /* forbidden: status 2, then the stream ends as for JSON. */
    send_req(s, FX_CACHE_BIN_GET, 3, "secret", "k", NULL, 0, 0);
    expect_ans(t, s, FX_CACHE_BIN_ERROR, 3, "forbidden");
    expect_end(t, s);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, cache_refused_forbidden), 1);
    assert_int_equal(DELTA(before, after, cache_binary_requests), 3);
    /* A malformed request resets the stream and is counted. */
    s = open_bidi(c);
    auth_binary(t, s);
    uint8_t bad[] = {FX_CACHE_BIN_FRAME_REQUEST, 9, 0, 0, 0, 0, 0, 0, 0, 1};
    send_frame(s, FX_FLAG_FELIXC, bad, sizeof(bad));
    expect_end(t, s);
    fx_metrics_snapshot_take(&before);
    assert_int_equal(DELTA(after, before, cache_binary_refused), 1);
    t_free(t);
}

static void test_a_client_without_the_bit_is_refused_binary_and_stays_json(void **state)
{
    (void)state;
    T *t = ct();
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c); /* no feature words */
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    send_req(s, FX_CACHE_BIN_GET, 1, "primary", "k", NULL, 0, 0);
    expect_msg(t, s, FX_MSG_ERROR, "unsupported frame flags", NULL);
    /* The stream goes on, in JSON, byte for byte as before. */
    send_json(s, "{\"type\":\"cache_put\"," SCOPE ",\"key\":\"k\",\"value\":\"YQ==\","
                 "\"request_id\":4,\"ttl_ms\":null}");
    expect_json(t, s, "{\"type\":\"cache_ok\",\"request_id\":4}");
    send_json(s, "{\"type\":\"cache_get\"," SCOPE ",\"key\":\"k\",\"request_id\":5}");
    expect_json(t, s,
                "{\"type\":\"cache_value\"," SCOPE ",\"key\":\"k\",\"value\":\"YQ==\","
                "\"request_id\":5}");
    assert_false(s->fin || s->closed);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, cache_binary_refused), 1);
    assert_int_equal(DELTA(before, after, cache_binary_requests), 0);
    t_free(t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_put_get_delete_in_binary_mixed_with_json_in_request_order),
    cmocka_unit_test(test_errors_are_status_2_with_the_json_texts),
    cmocka_unit_test(test_a_client_without_the_bit_is_refused_binary_and_stays_json),
};

FX_TEST_MAIN(tests)
