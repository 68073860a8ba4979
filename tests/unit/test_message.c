/* Unit tests of the Felix v1 JSON message codec (src/wire/message.c): round
 * trips for every type, golden bytes written from felix-facts.md §2-3, default
 * ack semantics, and every decoder error class. */
/* fx-test-libs: fx_wire fx_base */
#include "fx_test.h"

#include "wire/message.h"

/* ---- helpers ------------------------------------------------------------- */

static int decode_str(fx_msg *m, const char *json, fx_wire_err *err)
{
    return fx_msg_decode(m, (const uint8_t *)json, strlen(json), err);
}

/* Decoding |json| fails with |code|, and the error text contains |needle|. */
static void expect_reject(const char *json, int code, const char *needle)
{
    fx_msg m;
    fx_wire_err err = {0};
    int rv = decode_str(&m, json, &err);
    if (rv != code)
        fail_msg("%s: got %d (%s), want %d", json, rv, err.msg, code);
    assert_int_equal(err.code, code);
    if (needle && !strstr(err.msg, needle))
        fail_msg("error '%s' does not mention '%s'", err.msg, needle);
    assert_int_equal(m.type, FX_MSG_NONE); /* left zeroed */
    fx_msg_deinit(&m);
}

/* Encoding |m| gives exactly |want|. */
static void expect_json(const fx_msg *m, const char *want)
{
    uint8_t *out = NULL;
    size_t len = 0;
    assert_int_equal(fx_msg_encode(m, &out, &len), 0);
    if (len != strlen(want) || memcmp(out, want, len) != 0)
        fail_msg("encoded %.*s\n   want %s", (int)len, (const char *)out, want);
    assert_int_equal(fx_msg_encoded_len(m), (ssize_t)len);
    free(out);
}

/* Encodes |m|, decodes the bytes, checks the fields match and that the decoded
 * copy re-encodes to the same bytes. */
static void expect_round_trip(const fx_msg *m)
{
    uint8_t *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0;
    assert_int_equal(fx_msg_encode(m, &a, &alen), 0);
    fx_msg d;
    fx_wire_err err = {0};
    if (fx_msg_decode(&d, a, alen, &err) != 0)
        fail_msg("%.*s: %s", (int)alen, (const char *)a, err.msg);
    if (!fx_msg_equal(m, &d))
        fail_msg("decoded fields differ for %.*s", (int)alen, (const char *)a);
    assert_int_equal(fx_msg_encode(&d, &b, &blen), 0);
    assert_int_equal(alen, blen);
    assert_memory_equal(a, b, alen);
    fx_msg_deinit(&d);
    free(a);
    free(b);
}

static fx_msg_bytes bytes_of(const char *s)
{
    return (fx_msg_bytes){.p = (const uint8_t *)s, .len = strlen(s)};
}

static void set_triple(fx_msg *m, fx_msg_type t)
{
    memset(m, 0, sizeof(*m));
    m->type = t;
    m->tenant_id = "t1";
    m->ns = "default";
    m->stream = "demo";
    m->cache = "primary";
    m->key = "demo-key";
}

/* One message of type |t| with every optional field set (|full|) or none. */
static void sample(fx_msg *m, fx_msg_type t, bool full)
{
    static const fx_msg_bytes list[] = {
        {(const uint8_t *)"a", 1}, {(const uint8_t *)"\x00\xff\x10", 3}, {NULL, 0}};
    set_triple(m, t);
    m->token = "tok";
    m->message = "boom";
    m->payload = bytes_of("hello");
    m->payloads = list;
    m->n_payloads = 3;
    m->value = bytes_of("cached");
    m->has_value = full || t == FX_MSG_CACHE_PUT;
    m->server_flags = 63;
    m->subscription_id = 42;
    m->reason = FX_MSG_CURSOR_IN_FUTURE;
    m->requested = 100;
    m->available = 7;
    m->request_id = 9;
    m->has_request_id =
        full || t == FX_MSG_PUBLISH_OK || t == FX_MSG_CACHE_OK || t == FX_MSG_PUBLISH_ERROR;
    m->group = "workers";
    m->member = "m-1";
    m->window = 256;
    m->durable = true;
    static const uint64_t offsets[] = {3, 9, FX_MSG_INT_MAX};
    static const fx_msg_group_record records[] = {
        {.offset = 10, .payload = {(const uint8_t *)"ab", 2}, .attempts = 1},
        {.offset = 12,
         .payload = {NULL, 0},
         .attempts = 3,
         .skipped_before = 1,
         .publisher = "p\xc3\xa9",
         .timestamp_micros = 1700000000000000,
         .has_timestamp_micros = true},
    };
    m->shard = 2;
    m->max_records = 100;
    m->wait_ms = full ? 250 : 0;
    m->attempts = 4;
    m->extend_ms = 5000;
    m->visible_ms = 6000;
    m->offset = 77;
    m->moved = true;
    m->tail = 90, m->in_flight = 5, m->owed = 2, m->dead_letters = 1;
    m->offsets = offsets, m->n_offsets = full ? 3 : 0;
    m->records = records, m->n_records = full ? 2 : 0;
    if (t == FX_MSG_GROUP_SEEK)
        m->start = (fx_msg_start){FX_MSG_START_EARLIEST, 0};
    m->condition = full ? (fx_msg_condition){FX_MSG_CONDITION_VERSION, 3}
                        : (fx_msg_condition){FX_MSG_CONDITION_ABSENT, 0};
    m->version = 11;
    m->applied = full;
    m->node_id = "n2";
    m->generation = 7;
    if (!full)
        return;
    m->has_client_flags = true, m->client_flags = 25;
    m->has_client_features = true, m->client_features = 0x80000009u;
    m->has_client_features_hi = true, m->client_features_hi = 1;
    m->has_server_features = true, m->server_features = 0x09400008u;
    m->has_server_features_hi = true, m->server_features_hi = 1;
    m->has_code = true, m->code = "stale_claim";
    m->has_retry = true, m->retry = "retry";
    m->has_ack = true, m->ack = FX_WIRE_ACK_PER_BATCH;
    m->has_subscription_id = true;
    m->start = (fx_msg_start){FX_MSG_START_OFFSET, 1234};
    m->has_offset = true, m->offset = 5;
    m->has_base_offset = true, m->base_offset = 6;
    m->has_ttl_ms = true, m->ttl_ms = 1000;
    m->has_member = true;
    m->has_window = true;
    m->has_ack_wait_ms = true, m->ack_wait_ms = 30000;
    m->create = (fx_msg_create){FX_MSG_CREATE_TIME, 1700000000000000};
    m->has_consumer = true, m->consumer = "c-1";
    m->reclaim = true;
    m->visibility_ms = 45000;
    m->delay_ms = 100;
    m->if_new = true;
    m->existed = true;
    m->has_committed = true, m->committed = 80;
    m->producer_id = 1ull << 62, m->sequence = 64;
    m->refusal = (fx_msg_refusal){FX_MSG_REFUSAL_SEQUENCE_GAP, 12};
    m->duplicate = true;
    m->has_version = true;
    m->has_addr = true, m->addr = "127.0.0.1:5001";
    m->has_epoch = true, m->epoch = 8;
    m->has_prev_epoch_end = true, m->prev_epoch_end = (7ull << 40) | 1234;
}

/* ---- round trips ---------------------------------------------------------- */

static void test_every_type_round_trips_with_all_fields(void **state)
{
    for (int t = FX_MSG_NONE + 1; t < FX_MSG_TYPE_COUNT; t++) {
        fx_msg m;
        sample(&m, (fx_msg_type)t, true);
        expect_round_trip(&m);
    }
}

static void test_every_type_round_trips_without_optional_fields(void **state)
{
    for (int t = FX_MSG_NONE + 1; t < FX_MSG_TYPE_COUNT; t++) {
        fx_msg m;
        sample(&m, (fx_msg_type)t, false);
        expect_round_trip(&m);
    }
}

static void test_decoded_fields_match_input(void **state)
{
    fx_msg m;
    fx_wire_err err = {0};
    const char *json = "{\"type\":\"publish_batch\",\"tenant_id\":\"t1\",\"namespace\":\"ns\","
                       "\"stream\":\"s\",\"payloads\":[\"aGVsbG8=\",\"\",\"AP8=\"],"
                       "\"request_id\":77,\"ack\":\"per_message\"}";
    assert_int_equal(decode_str(&m, json, &err), 0);
    assert_int_equal(m.type, FX_MSG_PUBLISH_BATCH);
    assert_string_equal(m.tenant_id, "t1");
    assert_string_equal(m.ns, "ns");
    assert_string_equal(m.stream, "s");
    assert_int_equal(m.n_payloads, 3);
    assert_int_equal(m.payloads[0].len, 5);
    assert_memory_equal(m.payloads[0].p, "hello", 5);
    assert_int_equal(m.payloads[1].len, 0);
    assert_int_equal(m.payloads[2].len, 2);
    assert_memory_equal(m.payloads[2].p, "\x00\xff", 2);
    assert_true(m.has_request_id);
    assert_int_equal(m.request_id, 77);
    assert_true(m.has_ack);
    assert_int_equal(m.ack, FX_WIRE_ACK_PER_MESSAGE);
    fx_msg_deinit(&m);
}

static void test_decoded_message_owns_its_memory(void **state)
{
    char *json = strdup("{\"type\":\"error\",\"message\":\"auth failed\"}");
    assert_non_null(json);
    fx_msg m;
    assert_int_equal(decode_str(&m, json, NULL), 0);
    memset(json, 'x', strlen(json));
    free(json);
    assert_string_equal(m.message, "auth failed");
    fx_msg_deinit(&m);
    assert_null(m.message);
    fx_msg_deinit(&m); /* a second deinit is harmless */
}

/* ---- golden bytes ---------------------------------------------------------- */

static void test_golden_publish_with_request_id_and_ack(void **state)
{
    fx_msg m;
    set_triple(&m, FX_MSG_PUBLISH);
    m.payload = bytes_of("hello");
    m.has_request_id = true, m.request_id = 7;
    m.has_ack = true, m.ack = FX_WIRE_ACK_NONE;
    expect_json(&m, "{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                    "\"stream\":\"demo\",\"payload\":\"aGVsbG8=\",\"request_id\":7,"
                    "\"ack\":\"none\"}");
}

static void test_golden_publish_batch(void **state)
{
    static const fx_msg_bytes list[] = {{(const uint8_t *)"a", 1}, {(const uint8_t *)"bc", 2}};
    fx_msg m;
    set_triple(&m, FX_MSG_PUBLISH_BATCH);
    m.payloads = list;
    m.n_payloads = 2;
    m.has_ack = true, m.ack = FX_WIRE_ACK_PER_BATCH;
    expect_json(&m, "{\"type\":\"publish_batch\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                    "\"stream\":\"demo\",\"payloads\":[\"YQ==\",\"YmM=\"],\"ack\":\"per_batch\"}");
}

static void test_golden_subscribe_with_offset_start(void **state)
{
    fx_msg m;
    set_triple(&m, FX_MSG_SUBSCRIBE);
    m.start = (fx_msg_start){FX_MSG_START_OFFSET, 42};
    expect_json(&m, "{\"type\":\"subscribe\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                    "\"stream\":\"demo\",\"start\":{\"offset\":42}}");
    m.start.kind = FX_MSG_START_EARLIEST;
    m.has_subscription_id = true, m.subscription_id = 3;
    expect_json(&m, "{\"type\":\"subscribe\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                    "\"stream\":\"demo\",\"subscription_id\":3,\"start\":\"earliest\"}");
}

static void test_golden_constructors(void **state)
{
    fx_msg m;
    fx_msg_init_auth(&m, "t1", "jwt", true, 63);
    expect_json(&m,
                "{\"type\":\"auth\",\"tenant_id\":\"t1\",\"token\":\"jwt\",\"client_flags\":63}");
    fx_msg_init_auth(&m, "t1", "jwt", false, 0);
    expect_json(&m, "{\"type\":\"auth\",\"tenant_id\":\"t1\",\"token\":\"jwt\"}");
    fx_msg_init_auth_ok(&m, 63);
    expect_json(&m, "{\"type\":\"auth_ok\",\"server_flags\":63}");
    fx_msg_init_ok(&m);
    expect_json(&m, "{\"type\":\"ok\"}");
    fx_msg_init_error(&m, "auth required");
    expect_json(&m, "{\"type\":\"error\",\"message\":\"auth required\"}");
    fx_msg_init_publish_ok(&m, 12);
    expect_json(&m, "{\"type\":\"publish_ok\",\"request_id\":12}");
    fx_msg_init_publish_error(&m, 9, "stream not found");
    expect_json(&m,
                "{\"type\":\"publish_error\",\"request_id\":9,\"message\":\"stream not found\"}");
    fx_msg_init_subscribed(&m, 1);
    expect_json(&m, "{\"type\":\"subscribed\",\"subscription_id\":1}");
    fx_msg_init_event_stream_hello(&m, 1);
    expect_json(&m, "{\"type\":\"event_stream_hello\",\"subscription_id\":1}");
    fx_msg_init_subscribe_cursor_error(&m, FX_MSG_CURSOR_TOO_OLD, 3, 10);
    expect_json(&m, "{\"type\":\"subscribe_cursor_error\",\"reason\":\"too_old\","
                    "\"requested\":3,\"available\":10}");
}

static void test_encode_frame_has_flx1_header(void **state)
{
    fx_msg m;
    fx_msg_init_ok(&m);
    uint8_t *out = NULL;
    size_t len = 0;
    assert_int_equal(fx_msg_encode_frame(&m, &out, &len), 0);
    static const uint8_t want[] = {0x46, 0x4c, 0x58, 0x31, 0x00, 0x01, 0x00, 0x00, 0x00,
                                   0x00, 0x00, 0x0d, '{',  '"',  't',  'y',  'p',  'e',
                                   '"',  ':',  '"',  'o',  'k',  '"',  '}'};
    assert_int_equal(len, sizeof(want));
    assert_memory_equal(out, want, sizeof(want));
    free(out);
}

static void test_encode_into_checks_capacity(void **state)
{
    fx_msg m;
    fx_msg_init_publish_ok(&m, 5);
    uint8_t buf[64];
    size_t len = 0;
    const char *want = "{\"type\":\"publish_ok\",\"request_id\":5}";
    assert_int_equal(fx_msg_encode_into(&m, buf, strlen(want) - 1, &len), FX_ETOOBIG);
    assert_int_equal(fx_msg_encode_into(&m, buf, strlen(want), &len), 0);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(buf, want, len);
}

/* ---- semantics of absent fields -------------------------------------------- */

static void test_publish_without_ack_means_per_message(void **state)
{
    fx_msg m;
    assert_int_equal(decode_str(&m,
                                "{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"d\","
                                "\"stream\":\"s\",\"payload\":\"\"}",
                                NULL),
                     0);
    assert_false(m.has_ack);
    assert_int_equal(fx_msg_effective_ack(&m), FX_WIRE_ACK_PER_MESSAGE);
    fx_msg_deinit(&m);
    assert_int_equal(decode_str(&m,
                                "{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"d\","
                                "\"stream\":\"s\",\"payload\":\"\",\"ack\":\"none\"}",
                                NULL),
                     0);
    assert_true(m.has_ack);
    assert_int_equal(fx_msg_effective_ack(&m), FX_WIRE_ACK_NONE);
    fx_msg_deinit(&m);
}

static void test_publish_batch_without_ack_means_per_batch(void **state)
{
    fx_msg m;
    assert_int_equal(decode_str(&m,
                                "{\"type\":\"publish_batch\",\"tenant_id\":\"t1\",\"namespace\":"
                                "\"d\",\"stream\":\"s\",\"payloads\":[]}",
                                NULL),
                     0);
    assert_false(m.has_ack);
    assert_int_equal(m.n_payloads, 0);
    assert_int_equal(fx_msg_effective_ack(&m), FX_WIRE_ACK_PER_BATCH);
    fx_msg_deinit(&m);
}

static void test_auth_without_client_flags_is_distinguishable(void **state)
{
    fx_msg legacy, modern, reply;
    assert_int_equal(
        decode_str(&legacy, "{\"type\":\"auth\",\"tenant_id\":\"t1\",\"token\":\"x\"}", NULL), 0);
    assert_int_equal(decode_str(&modern,
                                "{\"type\":\"auth\",\"tenant_id\":\"t1\",\"token\":\"x\","
                                "\"client_flags\":0}",
                                NULL),
                     0);
    assert_false(legacy.has_client_flags);
    assert_true(modern.has_client_flags);
    assert_int_equal(modern.client_flags, 0);
    fx_msg_init_auth_reply(&reply, &legacy, 63);
    assert_int_equal(reply.type, FX_MSG_OK);
    fx_msg_init_auth_reply(&reply, &modern, 63);
    assert_int_equal(reply.type, FX_MSG_AUTH_OK);
    assert_int_equal(reply.server_flags, 63);
    fx_msg_deinit(&legacy);
    fx_msg_deinit(&modern);
}

static void test_subscribe_without_start_means_latest(void **state)
{
    fx_msg m;
    assert_int_equal(decode_str(&m,
                                "{\"type\":\"subscribe\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                                "\"stream\":\"s\"}",
                                NULL),
                     0);
    assert_int_equal(m.start.kind, FX_MSG_START_NONE);
    assert_int_equal(fx_msg_effective_start(&m), FX_MSG_START_LATEST);
    assert_false(m.has_subscription_id);
    fx_msg_deinit(&m);
}

static void test_null_optional_field_is_absent(void **state)
{
    fx_msg m;
    assert_int_equal(decode_str(&m,
                                "{\"type\":\"publish\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                                "\"stream\":\"s\",\"payload\":\"\",\"request_id\":null,"
                                "\"ack\":null}",
                                NULL),
                     0);
    assert_false(m.has_request_id);
    assert_false(m.has_ack);
    fx_msg_deinit(&m);
}

static void test_cache_put_ttl_null_when_absent(void **state)
{
    fx_msg m;
    set_triple(&m, FX_MSG_CACHE_PUT);
    m.value = bytes_of("cached");
    expect_json(&m, "{\"type\":\"cache_put\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                    "\"cache\":\"primary\",\"key\":\"demo-key\",\"value\":\"Y2FjaGVk\","
                    "\"ttl_ms\":null}");
    /* Both a missing and a null ttl_ms decode as absent. */
    fx_msg d;
    assert_int_equal(decode_str(&d,
                                "{\"type\":\"cache_put\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                                "\"cache\":\"c\",\"key\":\"k\",\"value\":\"\"}",
                                NULL),
                     0);
    assert_false(d.has_ttl_ms);
    fx_msg_deinit(&d);
}

static void test_cache_value_miss_is_null(void **state)
{
    fx_msg m;
    set_triple(&m, FX_MSG_CACHE_VALUE);
    m.has_request_id = true, m.request_id = 4;
    expect_json(&m, "{\"type\":\"cache_value\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                    "\"cache\":\"primary\",\"key\":\"demo-key\",\"value\":null,\"request_id\":4}");
    expect_round_trip(&m);
    /* value is nullable but not optional, as in the original. */
    expect_reject("{\"type\":\"cache_value\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                  "\"cache\":\"c\",\"key\":\"k\"}",
                  FX_EWIRE_FIELD_MISSING, "'value'");
}

/* ---- decoder errors ------------------------------------------------------ */

static void test_missing_field_error_names_field(void **state)
{
    expect_reject("{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"d\","
                  "\"payload\":\"aGVsbG8=\"}",
                  FX_EWIRE_FIELD_MISSING, "missing required field 'stream' in publish");
    expect_reject("{\"type\":\"auth_ok\"}", FX_EWIRE_FIELD_MISSING, "'server_flags' in auth_ok");
    expect_reject("{\"tenant_id\":\"t1\"}", FX_EWIRE_FIELD_MISSING, "'type'");
}

static void test_wrong_field_type(void **state)
{
    expect_reject("{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"d\","
                  "\"stream\":5,\"payload\":\"\"}",
                  FX_EWIRE_FIELD_TYPE, "'stream'");
    expect_reject("{\"type\":\"publish_ok\",\"request_id\":\"7\"}", FX_EWIRE_FIELD_TYPE,
                  "'request_id'");
    expect_reject("{\"type\":\"publish_ok\",\"request_id\":7.0}", FX_EWIRE_FIELD_TYPE,
                  "'request_id'");
    expect_reject("{\"type\":\"publish_ok\",\"request_id\":null}", FX_EWIRE_FIELD_TYPE,
                  "'request_id'");
    expect_reject("{\"type\":\"publish_batch\",\"tenant_id\":\"t\",\"namespace\":\"d\","
                  "\"stream\":\"s\",\"payloads\":\"YQ==\"}",
                  FX_EWIRE_FIELD_TYPE, "'payloads'");
    expect_reject("{\"type\":7}", FX_EWIRE_FIELD_TYPE, "'type'");
}

static void test_unknown_type(void **state)
{
    expect_reject("{\"type\":\"topology\"}", FX_EWIRE_JSON_TYPE, "topology");
    expect_reject("{\"type\":\"ok\\u0000\"}", FX_EWIRE_JSON_TYPE, NULL);
    expect_reject("{\"type\":\"\"}", FX_EWIRE_JSON_TYPE, NULL);
}

static void test_malformed_json(void **state)
{
    expect_reject("{\"type\":\"ok\"", FX_EWIRE_JSON, NULL);
    expect_reject("", FX_EWIRE_JSON, NULL);
    expect_reject("[\"ok\"]", FX_EWIRE_JSON, "not an object");
    expect_reject("{\"type\":\"ok\"} x", FX_EWIRE_JSON, NULL);
    expect_reject("{\"type\":\"ok\",\"type\":\"ok\"}", FX_EWIRE_JSON, "duplicate");
    fx_msg m;
    fx_wire_err err = {0};
    static const uint8_t with_nul[] = "{\"type\":\"ok\"}\0";
    assert_int_equal(fx_msg_decode(&m, with_nul, sizeof(with_nul), &err), FX_EWIRE_JSON);
}

static void test_invalid_utf8_rejected(void **state)
{
    expect_reject("{\"type\":\"error\",\"message\":\"\xc3\x28\"}", FX_EWIRE_UTF8, NULL);
    expect_reject("{\"type\":\"error\",\"message\":\"\xed\xa0\x80\"}", FX_EWIRE_UTF8, NULL);
    expect_reject("{\"type\":\"error\",\"message\":\"\\ud800\"}", FX_EWIRE_JSON, NULL);
}

static void test_deep_nesting_rejected(void **state)
{
    char json[600];
    int n = snprintf(json, sizeof(json), "{\"type\":\"ok\",\"x\":");
    for (int i = 0; i < 200; i++)
        json[n++] = '[';
    for (int i = 0; i < 200; i++)
        json[n++] = ']';
    json[n++] = '}';
    json[n] = 0;
    expect_reject(json, FX_EWIRE_JSON, "nested");
}

/* "{\"type\":\"ok\",\"x\":[<n copies of |elem|, comma-separated>]}" (heap). */
static char *with_list(const char *head, const char *elem, size_t n, size_t *plen)
{
    size_t el = strlen(elem), cap = strlen(head) + n * (el + 1) + 8;
    char *p = malloc(cap);
    assert_non_null(p);
    size_t len = (size_t)snprintf(p, cap, "%s[", head);
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            p[len++] = ',';
        memcpy(p + len, elem, el);
        len += el;
    }
    len += (size_t)snprintf(p + len, cap - len, "]}");
    *plen = len;
    return p;
}

static void expect_limit(const char *head, const char *elem, size_t n)
{
    size_t len;
    char *json = with_list(head, elem, n, &len);
    fx_msg m;
    fx_wire_err err = {0};
    assert_int_equal(fx_msg_decode(&m, (const uint8_t *)json, len, &err), FX_EWIRE_JSON_LIMIT);
    assert_int_equal(err.code, FX_EWIRE_JSON_LIMIT);
    assert_non_null(strstr(err.msg, "elements"));
    assert_int_equal(m.type, FX_MSG_NONE);
    free(json);
}

/* More than 2^20 elements (objects, arrays, comma-separated values) are
 * refused before jansson builds a node for each. */
static void test_element_bomb_rejected_before_parsing(void **state)
{
    expect_limit("{\"type\":\"ok\",\"x\":", "{}", (1u << 20) + 1);
    expect_limit("{\"type\":\"ok\",\"x\":", "1", (1u << 20) + 2);
    expect_limit("{\"type\":\"ok\",\"x\":", "[]", 600000); /* 1.2 M: arrays and commas */
}

/* What legitimate messages hold stays far below the bound: a JSON batch of
 * 500,000 payloads, one payload of 8 MiB, and commas inside strings (which
 * are not elements). */
static void test_element_bound_accepts_large_messages(void **state)
{
    size_t len;
    char *json = with_list("{\"type\":\"publish_batch\",\"tenant_id\":\"t\",\"namespace\":"
                           "\"n\",\"stream\":\"s\",\"payloads\":",
                           "\"QQ==\"", 65536, &len); /* the largest batch */
    fx_msg m;
    assert_int_equal(fx_msg_decode(&m, (const uint8_t *)json, len, NULL), 0);
    assert_int_equal(m.n_payloads, 65536);
    fx_msg_deinit(&m);
    free(json);

    size_t vlen = 8u << 20;
    char *big = malloc(vlen + 200);
    assert_non_null(big);
    len = (size_t)snprintf(big, 200,
                           "{\"type\":\"cache_put\",\"tenant_id\":\"t\",\"namespace\":"
                           "\"n\",\"cache\":\"c\",\"key\":\"k\",\"value\":\"");
    memset(big + len, 'A', vlen);
    len += vlen;
    len += (size_t)snprintf(big + len, 8, "\"}");
    assert_int_equal(fx_msg_decode(&m, (const uint8_t *)big, len, NULL), 0);
    assert_int_equal(m.value.len, vlen / 4 * 3);
    fx_msg_deinit(&m);
    free(big);

    size_t n = 2u << 20;
    char *commas = malloc(n + 64);
    assert_non_null(commas);
    len = (size_t)snprintf(commas, 64, "{\"type\":\"error\",\"message\":\"");
    memset(commas + len, ',', n);
    len += n;
    len += (size_t)snprintf(commas + len, 8, "\"}");
    assert_int_equal(fx_msg_decode(&m, (const uint8_t *)commas, len, NULL), 0);
    fx_msg_deinit(&m);
    free(commas);
}

static void test_unknown_fields_ignored(void **state)
{
    fx_msg m;
    fx_wire_err err = {0};
    assert_int_equal(decode_str(&m,
                                "{\"extra\":{\"a\":[1,2,{\"b\":null}]},\"type\":\"auth_ok\","
                                "\"server_flags\":25,\"publish_window\":3}",
                                &err),
                     0);
    assert_int_equal(m.type, FX_MSG_AUTH_OK);
    assert_int_equal(m.server_flags, 25);
    expect_json(&m, "{\"type\":\"auth_ok\",\"server_flags\":25}");
    fx_msg_deinit(&m);
}

static void test_request_id_beyond_int64_rejected(void **state)
{
    expect_reject("{\"type\":\"publish_ok\",\"request_id\":18446744073709551615}",
                  FX_EWIRE_INT_RANGE, "'request_id'");
    expect_reject("{\"type\":\"publish_ok\", \"request_id\" : 9223372036854775808 }",
                  FX_EWIRE_INT_RANGE, "'request_id'");
    fx_msg m;
    assert_int_equal(
        decode_str(&m, "{\"type\":\"publish_ok\",\"request_id\":9223372036854775807}", NULL), 0);
    assert_true(m.request_id == FX_MSG_INT_MAX);
    fx_msg_deinit(&m);
}

static void test_negative_request_id_rejected(void **state)
{
    expect_reject("{\"type\":\"publish_ok\",\"request_id\":-1}", FX_EWIRE_INT_RANGE,
                  "'request_id'");
    expect_reject("{\"type\":\"subscribe_cursor_error\",\"reason\":\"too_old\","
                  "\"requested\":-5,\"available\":0}",
                  FX_EWIRE_INT_RANGE, "'requested'");
}

static void test_client_flags_over_u16_rejected(void **state)
{
    expect_reject("{\"type\":\"auth\",\"tenant_id\":\"t\",\"token\":\"x\",\"client_flags\":65536}",
                  FX_EWIRE_INT_RANGE, "'client_flags'");
    expect_reject("{\"type\":\"auth_ok\",\"server_flags\":70000}", FX_EWIRE_INT_RANGE,
                  "'server_flags'");
    fx_msg m;
    assert_int_equal(decode_str(&m, "{\"type\":\"auth_ok\",\"server_flags\":65535}", NULL), 0);
    assert_int_equal(m.server_flags, 65535);
    fx_msg_deinit(&m);
}

static void test_invalid_base64_rejected(void **state)
{
    static const char *const bad[] = {"aGVsbG8",   "aGVsbG8==", "aGVs*G8=",     "aGVsbG9=",
                                      "aGVs bG8=", "=aGV",      "aGVsbG8=aGVs", "YR=="};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char json[200];
        snprintf(json, sizeof(json),
                 "{\"type\":\"publish\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                 "\"stream\":\"s\",\"payload\":\"%s\"}",
                 bad[i]);
        expect_reject(json, FX_EWIRE_BASE64, "'payload'");
    }
    expect_reject("{\"type\":\"publish_batch\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                  "\"stream\":\"s\",\"payloads\":[\"YQ==\",\"Y\"]}",
                  FX_EWIRE_BASE64, "'payloads[1]'");
}

static void test_empty_stream_name_rejected(void **state)
{
    expect_reject("{\"type\":\"subscribe\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                  "\"stream\":\"\"}",
                  FX_EWIRE_NAME, "'stream'");
    expect_reject("{\"type\":\"cache_get\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                  "\"cache\":\"\",\"key\":\"k\"}",
                  FX_EWIRE_NAME, "'cache'");
    expect_reject("{\"type\":\"auth\",\"tenant_id\":\"\",\"token\":\"x\"}", FX_EWIRE_NAME,
                  "'tenant_id'");
}

static void test_nul_inside_string_rejected(void **state)
{
    expect_reject("{\"type\":\"subscribe\",\"tenant_id\":\"t\",\"namespace\":\"n\\u0000x\","
                  "\"stream\":\"s\"}",
                  FX_EWIRE_NAME, "'namespace'");
    expect_reject("{\"type\":\"error\",\"message\":\"a\\u0000b\"}", FX_EWIRE_FIELD_TYPE,
                  "'message'");
}

static void test_start_offset_parsed(void **state)
{
    static const struct {
        const char *start;
        fx_msg_start_kind kind;
        uint64_t offset;
    } ok[] = {{"\"latest\"", FX_MSG_START_LATEST, 0},
              {"\"earliest\"", FX_MSG_START_EARLIEST, 0},
              {"{\"offset\":0}", FX_MSG_START_OFFSET, 0},
              {"{ \"offset\" : 9223372036854775807 }", FX_MSG_START_OFFSET, FX_MSG_INT_MAX}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char json[200];
        snprintf(json, sizeof(json),
                 "{\"type\":\"subscribe\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                 "\"stream\":\"s\",\"start\":%s}",
                 ok[i].start);
        fx_msg m;
        fx_wire_err err = {0};
        if (decode_str(&m, json, &err) != 0)
            fail_msg("%s: %s", json, err.msg);
        assert_int_equal(m.start.kind, ok[i].kind);
        assert_true(m.start.offset == ok[i].offset);
        assert_int_equal(fx_msg_effective_start(&m), ok[i].kind);
        fx_msg_deinit(&m);
    }
}

static void test_bad_start_rejected(void **state)
{
    static const char *const bad[] = {
        "\"LATEST\"",       "\"tail\"", "5", "{}", "{\"offset\":\"1\"}", "{\"offset\":1,\"x\":2}",
        "{\"position\":1}", "[1]"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char json[200];
        snprintf(json, sizeof(json),
                 "{\"type\":\"subscribe\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                 "\"stream\":\"s\",\"start\":%s}",
                 bad[i]);
        expect_reject(json, FX_EWIRE_FIELD_TYPE, "start");
    }
    expect_reject("{\"type\":\"subscribe\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                  "\"stream\":\"s\",\"start\":{\"offset\":-1}}",
                  FX_EWIRE_INT_RANGE, "start.offset");
}

static void test_invalid_ack_mode_rejected(void **state)
{
    expect_reject("{\"type\":\"publish\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                  "\"stream\":\"s\",\"payload\":\"\",\"ack\":\"always\"}",
                  FX_EWIRE_ACK_MODE, "'ack'");
    expect_reject("{\"type\":\"publish\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                  "\"stream\":\"s\",\"payload\":\"\",\"ack\":1}",
                  FX_EWIRE_FIELD_TYPE, "'ack'");
}

static void test_invalid_cursor_reason_rejected(void **state)
{
    expect_reject("{\"type\":\"subscribe_cursor_error\",\"reason\":\"gone\","
                  "\"requested\":1,\"available\":2}",
                  FX_EWIRE_FIELD_TYPE, "'reason'");
}

/* ---- strings ----------------------------------------------------------------- */

static void test_non_ascii_string_encoded_as_utf8(void **state)
{
    fx_msg m;
    fx_msg_init_error(&m, "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80");
    expect_json(&m, "{\"type\":\"error\",\"message\":\"caf\xc3\xa9 \xe6\x97\xa5 "
                    "\xf0\x9f\x98\x80\"}");
    expect_round_trip(&m);
    /* An escaped code point decodes to the same UTF-8 bytes. */
    fx_msg d;
    assert_int_equal(
        decode_str(&d, "{\"type\":\"error\",\"message\":\"caf\\u00e9 \\ud83d\\ude00\"}", NULL), 0);
    assert_string_equal(d.message, "caf\xc3\xa9 \xf0\x9f\x98\x80");
    fx_msg_deinit(&d);
}

static void test_control_characters_escaped_like_serde(void **state)
{
    fx_msg m;
    fx_msg_init_error(&m, "q\"b\\n\n\t\r\b\f\x01\x1f\x7f/");
    expect_json(&m, "{\"type\":\"error\",\"message\":\"q\\\"b\\\\n\\n\\t\\r\\b\\f\\u0001\\u001f"
                    "\x7f/\"}");
    expect_round_trip(&m);
}

/* ---- encoder refusals -------------------------------------------------------- */

static void test_encode_refuses_what_decode_rejects(void **state)
{
    fx_msg m;
    uint8_t *out = NULL;
    size_t len = 0;
    set_triple(&m, FX_MSG_SUBSCRIBE);
    m.stream = "";
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_NAME);
    m.stream = NULL;
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_FIELD_MISSING);
    m.stream = "\xc3";
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_UTF8);
    m.stream = "s";
    m.has_subscription_id = true, m.subscription_id = FX_MSG_INT_MAX + 1;
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_INT_RANGE);
    m.subscription_id = 1;
    m.start = (fx_msg_start){FX_MSG_START_OFFSET, UINT64_MAX};
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_INT_RANGE);
    m.type = FX_MSG_NONE;
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_JSON_TYPE);
    m.type = FX_MSG_TYPE_COUNT;
    assert_int_equal(fx_msg_encoded_len(&m), FX_EWIRE_JSON_TYPE);
    assert_null(out);
}

/* A JSON publish_batch is capped at FX_WIRE_BATCH_MAX_MESSAGES payloads, as
 * a binary one is: 65,536 decode, 65,537 are refused with FX_EWIRE_COUNT. */
static void test_json_batch_above_65536_payloads_is_refused(void **state)
{
    (void)state;
    const char *head = "{\"type\":\"publish_batch\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                       "\"stream\":\"s\",\"payloads\":[";
    for (size_t n = 65536; n <= 65537; n++) {
        size_t cap = strlen(head) + 3 * n + 8;
        char *json = malloc(cap);
        assert_non_null(json);
        size_t len = (size_t)snprintf(json, cap, "%s", head);
        for (size_t i = 0; i < n; i++)
            len += (size_t)snprintf(json + len, cap - len, i ? ",\"\"" : "\"\"");
        snprintf(json + len, cap - len, "]}");
        fx_msg m;
        fx_wire_err err = {0};
        int rv = decode_str(&m, json, &err);
        if (n == 65536) {
            assert_int_equal(rv, 0);
            assert_int_equal(m.n_payloads, 65536);
        } else {
            assert_int_equal(rv, FX_EWIRE_COUNT);
            if (strstr(err.msg, "'payloads' in publish_batch has 65537 elements, more than "
                                "65536") == NULL)
                fail_msg("error '%s'", err.msg);
        }
        fx_msg_deinit(&m);
        free(json);
    }
}

/* ---- consumer groups (Felix-C) ------------------------------------------------ */

#define JOIN_HEAD                                                                                  \
    "{\"type\":\"group_join\",\"tenant_id\":\"t1\",\"namespace\":\"default\",\"stream\":\"demo\"," \
    "\"group\":\"workers\""

static void test_golden_group_join_and_joined(void **state)
{
    fx_msg m;
    fx_msg_init_group_join(&m, "t1", "default", "demo", "workers");
    expect_json(&m, JOIN_HEAD "}");
    expect_round_trip(&m);
    m.has_member = true, m.member = "host-1";
    m.has_window = true, m.window = 512;
    m.has_ack_wait_ms = true, m.ack_wait_ms = 30000;
    m.create = (fx_msg_create){FX_MSG_CREATE_OFFSET, 42};
    m.has_request_id = true, m.request_id = 7;
    expect_json(&m, JOIN_HEAD ",\"member\":\"host-1\",\"window\":512,\"ack_wait_ms\":30000,"
                              "\"create\":{\"offset\":42},\"request_id\":7}");
    expect_round_trip(&m);
    fx_msg_init_group_joined(&m, 9, "host-1", 512, true);
    expect_json(&m, "{\"type\":\"group_joined\",\"subscription_id\":9,\"member\":\"host-1\","
                    "\"window\":512,\"durable\":true}");
    m.durable = false;
    m.has_request_id = true, m.request_id = 7;
    expect_json(&m, "{\"type\":\"group_joined\",\"subscription_id\":9,\"member\":\"host-1\","
                    "\"window\":512,\"durable\":false,\"request_id\":7}");
    expect_round_trip(&m);
}

static void test_group_join_create_values_round_trip(void **state)
{
    static const struct {
        const char *json;
        fx_msg_create_kind kind;
        uint64_t value;
    } ok[] = {
        {"\"all\"", FX_MSG_CREATE_ALL, 0},
        {"\"new\"", FX_MSG_CREATE_NEW, 0},
        {"\"last\"", FX_MSG_CREATE_LAST, 0},
        {"{\"offset\":0}", FX_MSG_CREATE_OFFSET, 0},
        {"{\"offset\":9223372036854775807}", FX_MSG_CREATE_OFFSET, FX_MSG_INT_MAX},
        {"{\"time_us\":1700000000000000}", FX_MSG_CREATE_TIME, 1700000000000000},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char json[256];
        snprintf(json, sizeof(json), JOIN_HEAD ",\"create\":%s}", ok[i].json);
        fx_msg m;
        fx_wire_err err = {0};
        if (decode_str(&m, json, &err) != 0)
            fail_msg("%s: %s", json, err.msg);
        assert_int_equal(m.type, FX_MSG_GROUP_JOIN);
        assert_int_equal(m.create.kind, ok[i].kind);
        assert_true(m.create.value == ok[i].value);
        expect_json(&m, json);
        fx_msg_deinit(&m);
    }
    /* Absent and null both mean absent. */
    fx_msg m;
    assert_int_equal(decode_str(&m, JOIN_HEAD ",\"create\":null}", NULL), 0);
    assert_int_equal(m.create.kind, FX_MSG_CREATE_NONE);
    expect_json(&m, JOIN_HEAD "}");
    fx_msg_deinit(&m);
}

static void test_group_join_bad_create_rejected(void **state)
{
    static const char *const bad[] = {"\"ALL\"",
                                      "\"latest\"",
                                      "\"earliest\"",
                                      "1",
                                      "{}",
                                      "{\"offset\":\"1\"}",
                                      "[\"all\"]",
                                      "{\"offset\":1,\"time_us\":2}",
                                      "{\"position\":1}",
                                      "{\"time_us\":true}",
                                      "true"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char json[256];
        snprintf(json, sizeof(json), JOIN_HEAD ",\"create\":%s}", bad[i]);
        expect_reject(json, FX_EWIRE_FIELD_TYPE, "create");
    }
    expect_reject(JOIN_HEAD ",\"create\":{\"offset\":-1}}", FX_EWIRE_INT_RANGE, "create.offset");
    expect_reject(JOIN_HEAD ",\"create\":{\"time_us\":9223372036854775808}}", FX_EWIRE_INT_RANGE,
                  NULL);
    /* The encoder refuses what the decoder would. */
    fx_msg m;
    uint8_t *out = NULL;
    size_t len = 0;
    fx_msg_init_group_join(&m, "t", "n", "s", "g");
    m.create = (fx_msg_create){(fx_msg_create_kind)(FX_MSG_CREATE_TIME + 1), 0};
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_ACK_MODE);
    m.create = (fx_msg_create){FX_MSG_CREATE_OFFSET, FX_MSG_INT_MAX + 1};
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_INT_RANGE);
    assert_null(out);
}

static void test_group_join_missing_required_fields(void **state)
{
    expect_reject("{\"type\":\"group_join\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                  "\"stream\":\"s\"}",
                  FX_EWIRE_FIELD_MISSING, "'group' in group_join");
    expect_reject("{\"type\":\"group_join\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                  "\"group\":\"g\"}",
                  FX_EWIRE_FIELD_MISSING, "'stream' in group_join");
    expect_reject("{\"type\":\"group_join\",\"namespace\":\"n\",\"stream\":\"s\",\"group\":\"g\"}",
                  FX_EWIRE_FIELD_MISSING, "'tenant_id' in group_join");
    expect_reject("{\"type\":\"group_join\",\"tenant_id\":\"t\",\"stream\":\"s\",\"group\":\"g\"}",
                  FX_EWIRE_FIELD_MISSING, "'namespace' in group_join");
    expect_reject("{\"type\":\"group_join\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                  "\"stream\":\"s\",\"group\":null}",
                  FX_EWIRE_FIELD_TYPE, "'group'");
    expect_reject("{\"type\":\"group_joined\",\"member\":\"m\",\"window\":1,\"durable\":true}",
                  FX_EWIRE_FIELD_MISSING, "'subscription_id' in group_joined");
    expect_reject("{\"type\":\"group_joined\",\"subscription_id\":1,\"window\":1,"
                  "\"durable\":true}",
                  FX_EWIRE_FIELD_MISSING, "'member' in group_joined");
    expect_reject("{\"type\":\"group_joined\",\"subscription_id\":1,\"member\":\"m\","
                  "\"durable\":true}",
                  FX_EWIRE_FIELD_MISSING, "'window' in group_joined");
    expect_reject("{\"type\":\"group_joined\",\"subscription_id\":1,\"member\":\"m\","
                  "\"window\":1}",
                  FX_EWIRE_FIELD_MISSING, "'durable' in group_joined");
    fx_msg m;
    uint8_t *out = NULL;
    size_t len = 0;
    fx_msg_init_group_join(&m, "t", "n", "s", NULL);
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_FIELD_MISSING);
    fx_msg_init_group_joined(&m, 1, NULL, 1, true);
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_FIELD_MISSING);
    assert_null(out);
}

static void test_group_names_and_member_rules(void **state)
{
    expect_reject(JOIN_HEAD ",\"member\":\"\"}", FX_EWIRE_NAME, "'member'");
    expect_reject("{\"type\":\"group_join\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                  "\"stream\":\"s\",\"group\":\"\"}",
                  FX_EWIRE_NAME, "'group'");
    expect_reject("{\"type\":\"group_join\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                  "\"stream\":\"s\",\"group\":\"a\\u0000b\"}",
                  FX_EWIRE_NAME, "'group'");
    expect_reject(JOIN_HEAD ",\"member\":\"a\\u0000b\"}", FX_EWIRE_NAME, "'member'");
    expect_reject(JOIN_HEAD ",\"member\":7}", FX_EWIRE_FIELD_TYPE, "'member'");
    char member[FX_MSG_MEMBER_MAX + 2], json[400];
    memset(member, 'm', sizeof(member));
    member[FX_MSG_MEMBER_MAX] = 0;
    snprintf(json, sizeof(json), JOIN_HEAD ",\"member\":\"%s\"}", member);
    fx_msg m;
    assert_int_equal(decode_str(&m, json, NULL), 0);
    assert_true(m.has_member);
    assert_int_equal(strlen(m.member), FX_MSG_MEMBER_MAX);
    fx_msg_deinit(&m);
    member[FX_MSG_MEMBER_MAX] = 'm', member[FX_MSG_MEMBER_MAX + 1] = 0;
    snprintf(json, sizeof(json), JOIN_HEAD ",\"member\":\"%s\"}", member);
    expect_reject(json, FX_EWIRE_NAME, "128");
    snprintf(json, sizeof(json),
             "{\"type\":\"group_joined\",\"subscription_id\":1,\"member\":\"%s\",\"window\":1,"
             "\"durable\":true}",
             member);
    expect_reject(json, FX_EWIRE_NAME, "'member'");
    /* The encoder applies the same rules. */
    uint8_t *out = NULL;
    size_t len = 0;
    fx_msg_init_group_joined(&m, 1, member, 1, true);
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_NAME);
    fx_msg_init_group_joined(&m, 1, "", 1, true);
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_NAME);
    fx_msg_init_group_join(&m, "t", "n", "s", "");
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_NAME);
    assert_null(out);
}

static void test_group_window_and_durable_types(void **state)
{
    expect_reject(JOIN_HEAD ",\"window\":4294967296}", FX_EWIRE_INT_RANGE, "'window'");
    expect_reject(JOIN_HEAD ",\"window\":-1}", FX_EWIRE_INT_RANGE, "'window'");
    expect_reject(JOIN_HEAD ",\"window\":\"8\"}", FX_EWIRE_FIELD_TYPE, "'window'");
    expect_reject(JOIN_HEAD ",\"ack_wait_ms\":1.5}", FX_EWIRE_FIELD_TYPE, "'ack_wait_ms'");
    expect_reject("{\"type\":\"group_joined\",\"subscription_id\":1,\"member\":\"m\","
                  "\"window\":1,\"durable\":1}",
                  FX_EWIRE_FIELD_TYPE, "'durable'");
    expect_reject("{\"type\":\"group_joined\",\"subscription_id\":1,\"member\":\"m\","
                  "\"window\":1,\"durable\":null}",
                  FX_EWIRE_FIELD_TYPE, "'durable'");
    fx_msg m;
    assert_int_equal(decode_str(&m, JOIN_HEAD ",\"window\":4294967295}", NULL), 0);
    assert_true(m.has_window);
    assert_int_equal(m.window, UINT32_MAX);
    fx_msg_deinit(&m);
    assert_int_equal(decode_str(&m,
                                "{\"type\":\"group_joined\",\"subscription_id\":3,"
                                "\"member\":\"m\",\"window\":0,\"durable\":false}",
                                NULL),
                     0);
    assert_int_equal(m.subscription_id, 3);
    assert_string_equal(m.member, "m");
    assert_false(m.durable);
    fx_msg_deinit(&m);
}

/* ---- the original's group requests (felix-facts-groups.md §1.3) ------------------- */

#define GSCOPE_JSON                                                                                \
    "\"tenant_id\":\"t1\",\"namespace\":\"default\",\"stream\":\"demo\",\"shard\":2,"              \
    "\"group\":\"workers\""

static void gscope(fx_msg *m, fx_msg_type t)
{
    memset(m, 0, sizeof(*m));
    m->type = t;
    m->tenant_id = "t1";
    m->ns = "default";
    m->stream = "demo";
    m->shard = 2;
    m->group = "workers";
    m->request_id = 5;
}

static void test_golden_group_requests(void **state)
{
    fx_msg m;
    gscope(&m, FX_MSG_GROUP_POLL);
    m.max_records = 10;
    expect_json(&m, "{\"type\":\"group_poll\"," GSCOPE_JSON
                    ",\"max_records\":10,\"wait_ms\":0,\"request_id\":5}");
    m.wait_ms = 1000;
    m.has_consumer = true, m.consumer = "host-1";
    m.reclaim = true;
    m.visibility_ms = 30000;
    expect_json(&m, "{\"type\":\"group_poll\"," GSCOPE_JSON
                    ",\"max_records\":10,\"wait_ms\":1000,\"request_id\":5,"
                    "\"consumer\":\"host-1\",\"reclaim\":true,\"visibility_ms\":30000}");
    expect_round_trip(&m);
    static const struct {
        fx_msg_type t;
        const char *name;
    } with_offset[] = {{FX_MSG_GROUP_ACK, "group_ack"},
                       {FX_MSG_GROUP_DEAD_LETTER, "group_dead_letter"},
                       {FX_MSG_GROUP_DISCARD, "group_discard"},
                       {FX_MSG_GROUP_REDRIVE, "group_redrive"},
                       {FX_MSG_GROUP_NACK, "group_nack"}};
    for (size_t i = 0; i < sizeof(with_offset) / sizeof(with_offset[0]); i++) {
        char want[256];
        gscope(&m, with_offset[i].t);
        m.offset = 41;
        snprintf(want, sizeof(want),
                 "{\"type\":\"%s\"," GSCOPE_JSON ",\"offset\":41,\"request_id\":5}",
                 with_offset[i].name);
        expect_json(&m, want);
    }
    m.delay_ms = 250, m.attempts = 3;
    expect_json(&m, "{\"type\":\"group_nack\"," GSCOPE_JSON
                    ",\"offset\":41,\"request_id\":5,\"delay_ms\":250,\"attempts\":3}");
    expect_round_trip(&m);
    gscope(&m, FX_MSG_GROUP_EXTEND);
    m.offset = 41, m.attempts = 2, m.extend_ms = 10000;
    expect_json(&m, "{\"type\":\"group_extend\"," GSCOPE_JSON
                    ",\"offset\":41,\"attempts\":2,\"extend_ms\":10000,\"request_id\":5}");
    gscope(&m, FX_MSG_GROUP_SEEK);
    m.start = (fx_msg_start){FX_MSG_START_OFFSET, 7};
    expect_json(&m, "{\"type\":\"group_seek\"," GSCOPE_JSON
                    ",\"start\":{\"offset\":7},\"request_id\":5}");
    m.if_new = true, m.start.kind = FX_MSG_START_LATEST;
    expect_json(&m, "{\"type\":\"group_seek\"," GSCOPE_JSON
                    ",\"start\":\"latest\",\"if_new\":true,\"request_id\":5}");
    expect_round_trip(&m);
    static const struct {
        fx_msg_type t;
        const char *name;
    } scope_only[] = {{FX_MSG_GROUP_DEAD_LETTERS, "group_dead_letters"},
                      {FX_MSG_GROUP_DESCRIBE, "group_describe"},
                      {FX_MSG_GROUP_DELETE, "group_delete"}};
    for (size_t i = 0; i < sizeof(scope_only) / sizeof(scope_only[0]); i++) {
        char want[256];
        gscope(&m, scope_only[i].t);
        snprintf(want, sizeof(want), "{\"type\":\"%s\"," GSCOPE_JSON ",\"request_id\":5}",
                 scope_only[i].name);
        expect_json(&m, want);
    }
}

static void test_golden_group_answers(void **state)
{
    static const fx_msg_group_record recs[] = {
        {.offset = 10, .payload = {(const uint8_t *)"hi", 2}, .attempts = 1},
        {.offset = 11,
         .payload = {NULL, 0},
         .attempts = 2,
         .skipped_before = 4,
         .publisher = "svc",
         .timestamp_micros = 99,
         .has_timestamp_micros = true},
    };
    static const uint64_t dl[] = {3, 8};
    fx_msg m;
    memset(&m, 0, sizeof(m));
    m.type = FX_MSG_GROUP_RECORDS, m.request_id = 5;
    expect_json(&m, "{\"type\":\"group_records\",\"records\":[],\"request_id\":5}");
    m.records = recs, m.n_records = 2;
    expect_json(&m, "{\"type\":\"group_records\",\"records\":["
                    "{\"offset\":10,\"payload\":\"aGk=\",\"attempts\":1},"
                    "{\"offset\":11,\"payload\":\"\",\"attempts\":2,\"skipped_before\":4,"
                    "\"publisher\":\"svc\",\"timestamp_micros\":99}],\"request_id\":5}");
    expect_round_trip(&m);
    memset(&m, 0, sizeof(m));
    m.type = FX_MSG_GROUP_DEAD_LETTER_LIST, m.request_id = 5;
    m.offsets = dl, m.n_offsets = 2;
    expect_json(&m, "{\"type\":\"group_dead_letter_list\",\"offsets\":[3,8],\"request_id\":5}");
    expect_round_trip(&m);
    memset(&m, 0, sizeof(m));
    m.type = FX_MSG_GROUP_INFO, m.request_id = 5;
    m.tail = 100, m.in_flight = 3, m.owed = 1, m.dead_letters = 2;
    expect_json(&m, "{\"type\":\"group_info\",\"tail\":100,\"in_flight\":3,\"owed\":1,"
                    "\"dead_letters\":2,\"request_id\":5}");
    m.has_committed = true, m.committed = 90;
    expect_json(&m, "{\"type\":\"group_info\",\"committed\":90,\"tail\":100,\"in_flight\":3,"
                    "\"owed\":1,\"dead_letters\":2,\"request_id\":5}");
    memset(&m, 0, sizeof(m));
    m.type = FX_MSG_GROUP_POSITION, m.request_id = 5, m.offset = 7;
    expect_json(&m, "{\"type\":\"group_position\",\"offset\":7,\"moved\":false,\"request_id\":5}");
    m.type = FX_MSG_GROUP_DELETED, m.existed = true;
    expect_json(&m, "{\"type\":\"group_deleted\",\"existed\":true,\"request_id\":5}");
    m.type = FX_MSG_GROUP_EXTENDED, m.visible_ms = 30000;
    expect_json(&m, "{\"type\":\"group_extended\",\"visible_ms\":30000,\"request_id\":5}");
}

static void test_group_defaults_decode_as_zero(void **state)
{
    fx_msg m;
    /* wait_ms absent is 0 and is written back; a 0 delay_ms / attempts and
     * a false reclaim / if_new decode and are left out when written. */
    assert_int_equal(decode_str(&m,
                                "{\"type\":\"group_poll\"," GSCOPE_JSON
                                ",\"max_records\":1,\"request_id\":5,\"reclaim\":false}",
                                NULL),
                     0);
    assert_int_equal(m.wait_ms, 0);
    assert_false(m.reclaim);
    assert_false(m.has_consumer);
    expect_json(&m, "{\"type\":\"group_poll\"," GSCOPE_JSON
                    ",\"max_records\":1,\"wait_ms\":0,\"request_id\":5}");
    fx_msg_deinit(&m);
    assert_int_equal(decode_str(&m,
                                "{\"type\":\"group_nack\"," GSCOPE_JSON
                                ",\"offset\":1,\"request_id\":5,\"delay_ms\":0,\"attempts\":null}",
                                NULL),
                     0);
    expect_json(&m, "{\"type\":\"group_nack\"," GSCOPE_JSON ",\"offset\":1,\"request_id\":5}");
    fx_msg_deinit(&m);
    /* A record without attempts: 0, "not reported", written as 0. */
    assert_int_equal(decode_str(&m,
                                "{\"type\":\"group_records\",\"records\":[{\"offset\":4,"
                                "\"payload\":\"AP8=\",\"skipped_before\":0,\"publisher\":null}],"
                                "\"request_id\":5}",
                                NULL),
                     0);
    assert_int_equal(m.n_records, 1);
    assert_int_equal(m.records[0].offset, 4);
    assert_int_equal(m.records[0].attempts, 0);
    assert_int_equal(m.records[0].payload.len, 2);
    assert_memory_equal(m.records[0].payload.p, "\x00\xff", 2);
    assert_null(m.records[0].publisher);
    assert_false(m.records[0].has_timestamp_micros);
    expect_json(&m, "{\"type\":\"group_records\",\"records\":[{\"offset\":4,"
                    "\"payload\":\"AP8=\",\"attempts\":0}],\"request_id\":5}");
    fx_msg_deinit(&m);
}

static void test_group_requests_missing_required_fields(void **state)
{
    expect_reject("{\"type\":\"group_ack\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                  "\"stream\":\"s\",\"group\":\"g\",\"offset\":1,\"request_id\":5}",
                  FX_EWIRE_FIELD_MISSING, "'shard' in group_ack");
    expect_reject("{\"type\":\"group_ack\"," GSCOPE_JSON ",\"offset\":1}", FX_EWIRE_FIELD_MISSING,
                  "'request_id' in group_ack");
    expect_reject("{\"type\":\"group_ack\"," GSCOPE_JSON ",\"request_id\":1}",
                  FX_EWIRE_FIELD_MISSING, "'offset' in group_ack");
    expect_reject("{\"type\":\"group_poll\"," GSCOPE_JSON ",\"request_id\":1}",
                  FX_EWIRE_FIELD_MISSING, "'max_records' in group_poll");
    expect_reject("{\"type\":\"group_seek\"," GSCOPE_JSON ",\"request_id\":1}",
                  FX_EWIRE_FIELD_MISSING, "'start' in group_seek");
    expect_reject("{\"type\":\"group_extend\"," GSCOPE_JSON ",\"offset\":1,\"attempts\":1,"
                  "\"request_id\":1}",
                  FX_EWIRE_FIELD_MISSING, "'extend_ms' in group_extend");
    expect_reject("{\"type\":\"group_records\",\"request_id\":1}", FX_EWIRE_FIELD_MISSING,
                  "'records' in group_records");
    expect_reject("{\"type\":\"group_dead_letter_list\",\"request_id\":1}", FX_EWIRE_FIELD_MISSING,
                  "'offsets'");
    expect_reject("{\"type\":\"group_info\",\"tail\":1,\"in_flight\":1,\"owed\":1,"
                  "\"request_id\":1}",
                  FX_EWIRE_FIELD_MISSING, "'dead_letters' in group_info");
    expect_reject("{\"type\":\"group_position\",\"offset\":1,\"request_id\":1}",
                  FX_EWIRE_FIELD_MISSING, "'moved' in group_position");
    expect_reject("{\"type\":\"group_records\",\"records\":[{\"payload\":\"\"}],"
                  "\"request_id\":1}",
                  FX_EWIRE_FIELD_MISSING, "'records[0].offset'");
    expect_reject("{\"type\":\"group_records\",\"records\":[{\"offset\":1},{\"offset\":2}],"
                  "\"request_id\":1}",
                  FX_EWIRE_FIELD_MISSING, "'records[0].payload'");
    /* The encoder refuses a group_seek without start. */
    fx_msg m;
    uint8_t *out = NULL;
    size_t len = 0;
    gscope(&m, FX_MSG_GROUP_SEEK);
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_FIELD_MISSING);
    gscope(&m, FX_MSG_GROUP_RECORDS);
    m.n_records = 1;
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_FIELD_MISSING);
    gscope(&m, FX_MSG_GROUP_DEAD_LETTER_LIST);
    m.n_offsets = 1;
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_FIELD_MISSING);
    assert_null(out);
}

static void test_group_request_values_checked(void **state)
{
    expect_reject("{\"type\":\"group_ack\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                  "\"stream\":\"s\",\"shard\":4294967296,\"group\":\"g\",\"offset\":1,"
                  "\"request_id\":5}",
                  FX_EWIRE_INT_RANGE, "'shard'");
    expect_reject("{\"type\":\"group_ack\",\"tenant_id\":\"t\",\"namespace\":\"n\","
                  "\"stream\":\"s\",\"shard\":0,\"group\":\"\",\"offset\":1,\"request_id\":5}",
                  FX_EWIRE_NAME, "'group'");
    expect_reject("{\"type\":\"group_poll\"," GSCOPE_JSON
                  ",\"max_records\":1,\"request_id\":5,\"consumer\":\"\"}",
                  FX_EWIRE_NAME, "'consumer'");
    expect_reject("{\"type\":\"group_poll\"," GSCOPE_JSON
                  ",\"max_records\":1,\"request_id\":5,\"reclaim\":1}",
                  FX_EWIRE_FIELD_TYPE, "'reclaim'");
    expect_reject("{\"type\":\"group_nack\"," GSCOPE_JSON
                  ",\"offset\":1,\"request_id\":5,\"attempts\":-1}",
                  FX_EWIRE_INT_RANGE, "'attempts'");
    expect_reject("{\"type\":\"group_seek\"," GSCOPE_JSON ",\"start\":\"all\",\"request_id\":5}",
                  FX_EWIRE_FIELD_TYPE, "'start'");
    expect_reject("{\"type\":\"group_dead_letter_list\",\"offsets\":[1,-2],\"request_id\":5}",
                  FX_EWIRE_INT_RANGE, "'offsets[1]'");
    expect_reject("{\"type\":\"group_dead_letter_list\",\"offsets\":[1,\"2\"],\"request_id\":5}",
                  FX_EWIRE_FIELD_TYPE, "'offsets[1]'");
    expect_reject("{\"type\":\"group_dead_letter_list\",\"offsets\":{},\"request_id\":5}",
                  FX_EWIRE_FIELD_TYPE, "'offsets'");
    expect_reject("{\"type\":\"group_records\",\"records\":[7],\"request_id\":5}",
                  FX_EWIRE_FIELD_TYPE, "'records[0]'");
    expect_reject("{\"type\":\"group_records\",\"records\":[{\"offset\":1,\"payload\":\"a\"}],"
                  "\"request_id\":5}",
                  FX_EWIRE_BASE64, "'records[0].payload'");
    expect_reject("{\"type\":\"group_records\",\"records\":[{\"offset\":1,\"payload\":\"\","
                  "\"attempts\":4294967296}],\"request_id\":5}",
                  FX_EWIRE_INT_RANGE, "'records[0].attempts'");
    expect_reject("{\"type\":\"group_records\",\"records\":[{\"offset\":1,\"payload\":\"\","
                  "\"publisher\":\"a\\u0000\"}],\"request_id\":5}",
                  FX_EWIRE_FIELD_TYPE, "'records[0].publisher'");
    expect_reject("{\"type\":\"group_records\",\"records\":[{\"offset\":1,\"payload\":\"\","
                  "\"timestamp_micros\":true}],\"request_id\":5}",
                  FX_EWIRE_FIELD_TYPE, "'records[0].timestamp_micros'");
    /* The encoder refuses the same. */
    static const uint64_t big[] = {FX_MSG_INT_MAX + 1};
    fx_msg_group_record bad = {.offset = FX_MSG_INT_MAX + 1};
    fx_msg m;
    uint8_t *out = NULL;
    size_t len = 0;
    memset(&m, 0, sizeof(m));
    m.type = FX_MSG_GROUP_DEAD_LETTER_LIST, m.offsets = big, m.n_offsets = 1;
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_INT_RANGE);
    m.type = FX_MSG_GROUP_RECORDS, m.records = &bad, m.n_records = 1;
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_INT_RANGE);
    bad.offset = 1, bad.publisher = "\xc3";
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_UTF8);
    bad.publisher = NULL, bad.payload = (fx_msg_bytes){NULL, 3};
    assert_int_equal(fx_msg_encode(&m, &out, &len), FX_EWIRE_FIELD_MISSING);
    assert_null(out);
}

static void test_golden_auth_ok_with_server_features_and_error_with_code(void **state)
{
    (void)state;
    fx_msg m;
    fx_msg_init_auth_ok(&m, 63);
    m.has_server_features = true;
    m.server_features = 0x09400008u;
    uint8_t *p;
    size_t n;
    assert_int_equal(fx_msg_encode(&m, &p, &n), 0);
    const char *want = "{\"type\":\"auth_ok\",\"server_flags\":63,\"server_features\":155189256}";
    assert_int_equal(n, strlen(want));
    assert_memory_equal(p, want, n);
    free(p);
    fx_msg_init_error(&m, "the claim on offset 3 no longer stands");
    m.has_code = true, m.code = "stale_claim";
    m.has_retry = true, m.retry = "fatal";
    assert_int_equal(fx_msg_encode(&m, &p, &n), 0);
    want = "{\"type\":\"error\",\"message\":\"the claim on offset 3 no longer stands\","
           "\"code\":\"stale_claim\",\"retry\":\"fatal\"}";
    assert_int_equal(n, strlen(want));
    assert_memory_equal(p, want, n);
    free(p);
    /* A client_features word above a u32 is refused. */
    const char *big = "{\"type\":\"auth\",\"tenant_id\":\"t1\",\"token\":\"x\","
                      "\"client_features\":4294967296}";
    fx_msg d;
    assert_int_equal(fx_msg_decode(&d, (const uint8_t *)big, strlen(big), NULL),
                     FX_EWIRE_INT_RANGE);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_golden_auth_ok_with_server_features_and_error_with_code),
    cmocka_unit_test(test_every_type_round_trips_with_all_fields),
    cmocka_unit_test(test_every_type_round_trips_without_optional_fields),
    cmocka_unit_test(test_decoded_fields_match_input),
    cmocka_unit_test(test_decoded_message_owns_its_memory),
    cmocka_unit_test(test_golden_publish_with_request_id_and_ack),
    cmocka_unit_test(test_golden_publish_batch),
    cmocka_unit_test(test_golden_subscribe_with_offset_start),
    cmocka_unit_test(test_golden_constructors),
    cmocka_unit_test(test_encode_frame_has_flx1_header),
    cmocka_unit_test(test_encode_into_checks_capacity),
    cmocka_unit_test(test_publish_without_ack_means_per_message),
    cmocka_unit_test(test_publish_batch_without_ack_means_per_batch),
    cmocka_unit_test(test_auth_without_client_flags_is_distinguishable),
    cmocka_unit_test(test_subscribe_without_start_means_latest),
    cmocka_unit_test(test_null_optional_field_is_absent),
    cmocka_unit_test(test_cache_put_ttl_null_when_absent),
    cmocka_unit_test(test_cache_value_miss_is_null),
    cmocka_unit_test(test_missing_field_error_names_field),
    cmocka_unit_test(test_wrong_field_type),
    cmocka_unit_test(test_unknown_type),
    cmocka_unit_test(test_malformed_json),
    cmocka_unit_test(test_invalid_utf8_rejected),
    cmocka_unit_test(test_deep_nesting_rejected),
    cmocka_unit_test(test_element_bomb_rejected_before_parsing),
    cmocka_unit_test(test_element_bound_accepts_large_messages),
    cmocka_unit_test(test_unknown_fields_ignored),
    cmocka_unit_test(test_request_id_beyond_int64_rejected),
    cmocka_unit_test(test_negative_request_id_rejected),
    cmocka_unit_test(test_client_flags_over_u16_rejected),
    cmocka_unit_test(test_invalid_base64_rejected),
    cmocka_unit_test(test_empty_stream_name_rejected),
    cmocka_unit_test(test_nul_inside_string_rejected),
    cmocka_unit_test(test_start_offset_parsed),
    cmocka_unit_test(test_bad_start_rejected),
    cmocka_unit_test(test_invalid_ack_mode_rejected),
    cmocka_unit_test(test_invalid_cursor_reason_rejected),
    cmocka_unit_test(test_non_ascii_string_encoded_as_utf8),
    cmocka_unit_test(test_control_characters_escaped_like_serde),
    cmocka_unit_test(test_encode_refuses_what_decode_rejects),
    cmocka_unit_test(test_json_batch_above_65536_payloads_is_refused),
    cmocka_unit_test(test_golden_group_join_and_joined),
    cmocka_unit_test(test_group_join_create_values_round_trip),
    cmocka_unit_test(test_group_join_bad_create_rejected),
    cmocka_unit_test(test_group_join_missing_required_fields),
    cmocka_unit_test(test_group_names_and_member_rules),
    cmocka_unit_test(test_group_window_and_durable_types),
    cmocka_unit_test(test_golden_group_requests),
    cmocka_unit_test(test_golden_group_answers),
    cmocka_unit_test(test_group_defaults_decode_as_zero),
    cmocka_unit_test(test_group_requests_missing_required_fields),
    cmocka_unit_test(test_group_request_values_checked),
};

FX_TEST_MAIN(tests)
