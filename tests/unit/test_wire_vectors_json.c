/* The original Felix wire vectors for JSON messages (flags 0), from
 * $FX_SHARED_DIR/vectors/felix-wire: decoding each frame gives the fields of
 * its payload_json, and encoding those fields gives frame_hex byte for byte.
 * Skipped when the shared vectors are absent. */
/* fx-test-libs: fx_wire fx_base */
#include "fx_test.h"
#include "wire_vectors.h"

#include <nettle/base64.h>

#include "wire/message.h"

/* Splits the vector's frame: checks the 12-byte header (FLX1, version 1, flags
 * 0, length = rest) and returns the JSON body. */
static const uint8_t *frame_body(const fx_vector *v, size_t *plen)
{
    assert_true(v->frame_len >= FX_WIRE_HEADER_LEN);
    assert_int_equal(fx_be32(v->frame), FX_WIRE_MAGIC);
    assert_int_equal(fx_be16(v->frame + 4), FX_WIRE_VERSION);
    assert_int_equal(fx_be16(v->frame + 6), 0);
    assert_int_equal(fx_be32(v->frame + 8), v->frame_len - FX_WIRE_HEADER_LEN);
    *plen = v->frame_len - FX_WIRE_HEADER_LEN;
    return v->frame + FX_WIRE_HEADER_LEN;
}

/* The vector's payload_json parsed independently of the codec, to read the
 * expected field values from. */
static json_t *expected_fields(const fx_vector *v)
{
    const char *pj = fx_vec_str(v, "payload_json");
    assert_non_null(pj);
    json_error_t je;
    json_t *doc = json_loads(pj, 0, &je);
    if (!doc)
        fail_msg("payload_json: %s", je.text);
    return doc;
}

static const char *want_str(json_t *doc, const char *key)
{
    const char *s = json_string_value(json_object_get(doc, key));
    if (!s)
        fail_msg("payload_json has no string '%s'", key);
    return s;
}

static uint64_t want_int(json_t *doc, const char *key)
{
    json_t *v = json_object_get(doc, key);
    if (!json_is_integer(v))
        fail_msg("payload_json has no integer '%s'", key);
    return (uint64_t)json_integer_value(v);
}

/* Checks decoded bytes |b| against the base64 text the vector carries for
 * |key| and against the plain value the facts name. */
static void expect_bytes(const fx_msg_bytes *b, json_t *doc, const char *key, const char *plain)
{
    char b64[64] = {0};
    assert_true(BASE64_ENCODE_RAW_LENGTH(strlen(plain)) < sizeof(b64));
    base64_encode_raw(b64, strlen(plain), (const uint8_t *)plain);
    assert_string_equal(want_str(doc, key), b64);
    assert_int_equal(b->len, strlen(plain));
    assert_memory_equal(b->p, plain, b->len);
}

/* Loads vector |name|, decodes its frame into |m| (caller deinits) and
 * returns the expected fields (caller decrefs). Checks the type name. */
static json_t *load_and_decode(fx_vector *v, const char *name, fx_msg *m, fx_msg_type type)
{
    fx_vec_load(v, name);
    size_t len = 0;
    const uint8_t *body = frame_body(v, &len);
    fx_wire_err err = {0};
    if (fx_msg_decode(m, body, len, &err) != 0)
        fail_msg("%s: %s", name, err.msg);
    assert_int_equal(m->type, type);
    json_t *doc = expected_fields(v);
    assert_string_equal(fx_msg_type_name(m->type), want_str(doc, "type"));
    return doc;
}

/* Encodes |m| (built by the test from the expected fields) as a frame and
 * compares it with frame_hex byte for byte; also checks it equals |decoded|. */
static void expect_frame(const fx_vector *v, const fx_msg *m, const fx_msg *decoded)
{
    assert_true(fx_msg_equal(m, decoded));
    uint8_t *out = NULL;
    size_t len = 0;
    assert_int_equal(fx_msg_encode_frame(m, &out, &len), 0);
    if (len != v->frame_len || memcmp(out, v->frame, len) != 0)
        fail_msg("encoded %.*s\n   want %.*s", (int)(len - 12), (const char *)out + 12,
                 (int)(v->frame_len - 12), (const char *)v->frame + 12);
    free(out);
}

static void finish(fx_vector *v, json_t *doc, fx_msg *m)
{
    json_decref(doc);
    fx_msg_deinit(m);
    fx_vec_free(v);
}

static void set_scope(fx_msg *m, fx_msg_type t, json_t *doc)
{
    memset(m, 0, sizeof(*m));
    m->type = t;
    m->tenant_id = want_str(doc, "tenant_id");
    m->ns = want_str(doc, "namespace");
}

static void test_vector_publish_round_trips(void **state)
{
    fx_vector v;
    fx_msg d, m;
    json_t *doc = load_and_decode(&v, "publish", &d, FX_MSG_PUBLISH);
    assert_string_equal(d.tenant_id, "t1");
    assert_string_equal(d.ns, "default");
    assert_string_equal(d.stream, "demo");
    expect_bytes(&d.payload, doc, "payload", "hello");
    assert_false(d.has_request_id);
    assert_false(d.has_ack);
    assert_int_equal(fx_msg_effective_ack(&d), FX_WIRE_ACK_PER_MESSAGE);
    set_scope(&m, FX_MSG_PUBLISH, doc);
    m.stream = want_str(doc, "stream");
    m.payload = (fx_msg_bytes){(const uint8_t *)"hello", 5};
    expect_frame(&v, &m, &d);
    finish(&v, doc, &d);
}

static void test_vector_subscribe_round_trips(void **state)
{
    fx_vector v;
    fx_msg d, m;
    json_t *doc = load_and_decode(&v, "subscribe", &d, FX_MSG_SUBSCRIBE);
    assert_string_equal(d.tenant_id, "t1");
    assert_string_equal(d.ns, "default");
    assert_string_equal(d.stream, "demo");
    assert_false(d.has_subscription_id);
    assert_int_equal(d.start.kind, FX_MSG_START_NONE);
    set_scope(&m, FX_MSG_SUBSCRIBE, doc);
    m.stream = want_str(doc, "stream");
    expect_frame(&v, &m, &d);
    finish(&v, doc, &d);
}

static void test_vector_event_round_trips(void **state)
{
    fx_vector v;
    fx_msg d, m;
    json_t *doc = load_and_decode(&v, "event", &d, FX_MSG_EVENT);
    assert_string_equal(d.tenant_id, "t1");
    assert_string_equal(d.ns, "default");
    assert_string_equal(d.stream, "demo");
    expect_bytes(&d.payload, doc, "payload", "world");
    assert_false(d.has_offset);
    set_scope(&m, FX_MSG_EVENT, doc);
    m.stream = want_str(doc, "stream");
    m.payload = (fx_msg_bytes){(const uint8_t *)"world", 5};
    expect_frame(&v, &m, &d);
    finish(&v, doc, &d);
}

static void test_vector_cache_put_round_trips(void **state)
{
    fx_vector v;
    fx_msg d, m;
    json_t *doc = load_and_decode(&v, "cache_put", &d, FX_MSG_CACHE_PUT);
    assert_string_equal(d.tenant_id, "t1");
    assert_string_equal(d.cache, "primary");
    assert_string_equal(d.key, "demo-key");
    expect_bytes(&d.value, doc, "value", "cached");
    assert_false(d.has_request_id);
    assert_true(d.has_ttl_ms);
    assert_int_equal(d.ttl_ms, 1000);
    set_scope(&m, FX_MSG_CACHE_PUT, doc);
    m.cache = want_str(doc, "cache");
    m.key = want_str(doc, "key");
    m.value = (fx_msg_bytes){(const uint8_t *)"cached", 6};
    m.has_ttl_ms = true;
    m.ttl_ms = want_int(doc, "ttl_ms");
    expect_frame(&v, &m, &d);
    finish(&v, doc, &d);
}

static void test_vector_cache_get_round_trips(void **state)
{
    fx_vector v;
    fx_msg d, m;
    json_t *doc = load_and_decode(&v, "cache_get", &d, FX_MSG_CACHE_GET);
    assert_string_equal(d.tenant_id, "t1");
    assert_string_equal(d.ns, "default");
    assert_string_equal(d.cache, "primary");
    assert_string_equal(d.key, "demo-key");
    assert_false(d.has_request_id);
    set_scope(&m, FX_MSG_CACHE_GET, doc);
    m.cache = want_str(doc, "cache");
    m.key = want_str(doc, "key");
    expect_frame(&v, &m, &d);
    finish(&v, doc, &d);
}

static void test_vector_cache_value_round_trips(void **state)
{
    fx_vector v;
    fx_msg d, m;
    json_t *doc = load_and_decode(&v, "cache_value", &d, FX_MSG_CACHE_VALUE);
    assert_string_equal(d.tenant_id, "t1");
    assert_string_equal(d.ns, "default");
    assert_string_equal(d.cache, "primary");
    assert_string_equal(d.key, "demo-key");
    assert_true(d.has_value);
    expect_bytes(&d.value, doc, "value", "cached");
    assert_false(d.has_request_id);
    set_scope(&m, FX_MSG_CACHE_VALUE, doc);
    m.cache = want_str(doc, "cache");
    m.key = want_str(doc, "key");
    m.has_value = true;
    m.value = (fx_msg_bytes){(const uint8_t *)"cached", 6};
    expect_frame(&v, &m, &d);
    finish(&v, doc, &d);
}

static void test_vector_ok_round_trips(void **state)
{
    fx_vector v;
    fx_msg d, m;
    json_t *doc = load_and_decode(&v, "ok", &d, FX_MSG_OK);
    assert_int_equal(json_object_size(doc), 1);
    fx_msg_init_ok(&m);
    expect_frame(&v, &m, &d);
    finish(&v, doc, &d);
}

static void test_vector_error_round_trips(void **state)
{
    fx_vector v;
    fx_msg d, m;
    json_t *doc = load_and_decode(&v, "error", &d, FX_MSG_ERROR);
    assert_string_equal(d.message, "oops");
    assert_string_equal(d.message, want_str(doc, "message"));
    fx_msg_init_error(&m, want_str(doc, "message"));
    expect_frame(&v, &m, &d);
    finish(&v, doc, &d);
}

static void test_vector_auth_with_capabilities_round_trips(void **state)
{
    fx_vector v;
    fx_msg d, m;
    json_t *doc = load_and_decode(&v, "auth_with_capabilities", &d, FX_MSG_AUTH);
    assert_string_equal(d.tenant_id, "t1");
    assert_string_equal(d.token, "demo-token");
    assert_true(d.has_client_flags);
    assert_int_equal(d.client_flags, 25); /* deliberately not KNOWN_FLAGS (63) */
    assert_int_equal(d.client_flags, want_int(doc, "client_flags"));
    fx_msg_init_auth(&m, want_str(doc, "tenant_id"), want_str(doc, "token"), true,
                     (uint16_t)want_int(doc, "client_flags"));
    expect_frame(&v, &m, &d);
    finish(&v, doc, &d);
}

static void test_vector_auth_ok_round_trips(void **state)
{
    fx_vector v;
    fx_msg d, m;
    json_t *doc = load_and_decode(&v, "auth_ok", &d, FX_MSG_AUTH_OK);
    assert_int_equal(d.server_flags, 25);
    assert_int_equal(d.server_flags, want_int(doc, "server_flags"));
    fx_msg_init_auth_ok(&m, (uint16_t)want_int(doc, "server_flags"));
    expect_frame(&v, &m, &d);
    finish(&v, doc, &d);
}

/* ---- the original's later vectors (vectors/felix-wire-new, JSON only) ---- */

/* Loads felix-wire-new/|name|.json, decodes its frame_hex into |m| (the
 * caller deinits) and returns the frame (caller frees, |*plen| bytes). */
static uint8_t *load_new(const char *name, fx_msg *m, size_t *plen)
{
    const char *shared = getenv("FX_SHARED_DIR");
    if (!shared)
        fx_test_skip("FX_SHARED_DIR not set; the Felix wire vectors are not available");
    char path[4096];
    snprintf(path, sizeof(path), "%s/vectors/felix-wire-new/%s.json", shared, name);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (doc == NULL)
        fx_test_skip("shared wire vectors not found beside the checkout (felix-wire-new)");
    uint8_t *frame = fx_vec_unhex(json_string_value(json_object_get(doc, "frame_hex")), plen);
    json_decref(doc);
    assert_non_null(frame);
    assert_true(*plen > FX_WIRE_HEADER_LEN);
    assert_int_equal(fx_msg_decode(m, frame + FX_WIRE_HEADER_LEN, *plen - FX_WIRE_HEADER_LEN, NULL),
                     0);
    return frame;
}

static void expect_same_frame(const fx_msg *m, const uint8_t *frame, size_t len)
{
    uint8_t *out = NULL;
    size_t n = 0;
    assert_int_equal(fx_msg_encode_frame(m, &out, &n), 0);
    if (n != len || memcmp(out, frame, len) != 0)
        fail_msg("encoded %.*s\n   want %.*s", (int)(n - 12), (const char *)out + 12,
                 (int)(len - 12), (const char *)frame + 12);
    free(out);
}

static void test_vector_auth_ok_extended_features_round_trips(void **state)
{
    (void)state;
    fx_msg d, m;
    size_t len;
    uint8_t *frame = load_new("auth_ok_extended_features", &d, &len);
    assert_int_equal(d.type, FX_MSG_AUTH_OK);
    assert_int_equal(d.server_flags, 25);
    assert_true(d.has_server_features && d.has_server_features_hi);
    assert_int_equal(d.server_features, 0x80000001u);
    assert_int_equal(d.server_features_hi, 1);
    fx_msg_init_auth_ok(&m, 25);
    m.has_server_features = true, m.server_features = 0x80000001u;
    m.has_server_features_hi = true, m.server_features_hi = 1;
    assert_true(fx_msg_equal(&m, &d));
    expect_same_frame(&m, frame, len);
    free(frame);
    fx_msg_deinit(&d);
}

static void test_vector_auth_extended_features_round_trips(void **state)
{
    (void)state;
    fx_msg d, m;
    size_t len;
    uint8_t *frame = load_new("auth_extended_features", &d, &len);
    assert_int_equal(d.type, FX_MSG_AUTH);
    assert_true(d.has_client_features && d.has_client_features_hi);
    assert_int_equal(d.client_features, 0x80000001u);
    assert_int_equal(d.client_features_hi, 1);
    fx_msg_init_auth(&m, "t1", "demo-token", true, 25);
    m.has_client_features = true, m.client_features = 0x80000001u;
    m.has_client_features_hi = true, m.client_features_hi = 1;
    assert_true(fx_msg_equal(&m, &d));
    expect_same_frame(&m, frame, len);
    free(frame);
    fx_msg_deinit(&d);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_vector_publish_round_trips),
    cmocka_unit_test(test_vector_subscribe_round_trips),
    cmocka_unit_test(test_vector_event_round_trips),
    cmocka_unit_test(test_vector_cache_put_round_trips),
    cmocka_unit_test(test_vector_cache_get_round_trips),
    cmocka_unit_test(test_vector_cache_value_round_trips),
    cmocka_unit_test(test_vector_ok_round_trips),
    cmocka_unit_test(test_vector_error_round_trips),
    cmocka_unit_test(test_vector_auth_with_capabilities_round_trips),
    cmocka_unit_test(test_vector_auth_ok_round_trips),
    cmocka_unit_test(test_vector_auth_ok_extended_features_round_trips),
    cmocka_unit_test(test_vector_auth_extended_features_round_trips),
};

FX_TEST_MAIN(tests)
