/* Tests of the binary cache frames (src/wire/cache_bin.c): round trips of
 * every op and status, the project's own vectors
 * (tests/vectors/felix-c-cache/cache_bin_*.hex) byte for byte, truncation at
 * every byte, lengths past the body, trailing bytes, and the encoders'
 * refusals. */
/* fx-test-libs: fx_wire fx_base */
#include "fx_test.h"

#include <errno.h>
#include <stdlib.h>

#include "wire/cache_bin.h"
#include "wire/frame.h"

static fx_wire_slice str(const char *s)
{
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

static void assert_slice(fx_wire_slice s, const char *want)
{
    assert_int_equal(s.len, strlen(want));
    if (s.len)
        assert_memory_equal(s.ptr, want, s.len);
}

/* Checks the header of a cache frame and returns its body. */
static const uint8_t *body_of(const uint8_t *frame, size_t frame_len)
{
    fx_frame_header h;
    assert_int_equal(fx_frame_header_decode(frame, FX_WIRE_DEFAULT_MAX_FRAME, &h, NULL), 0);
    assert_int_equal(h.flags, FX_FLAG_FELIXC);
    assert_int_equal(h.length, frame_len - FX_WIRE_HEADER_LEN);
    return frame + FX_WIRE_HEADER_LEN;
}

static const fx_wire_cache_req vec_put = {
    .op = FX_CACHE_BIN_PUT,
    .request_id = 7,
    .ns = {(const uint8_t *)"default", 7},
    .cache = {(const uint8_t *)"primary", 7},
    .key = {(const uint8_t *)"k1", 2},
    .ttl_ms = 60000,
    .value = {(const uint8_t *)"hello", 5},
};

/* ---- round trips ----------------------------------------------------------------------- */

static void test_request_round_trips_every_op(void **state)
{
    (void)state;
    uint8_t frame[256];
    for (uint8_t op = FX_CACHE_BIN_GET; op <= FX_CACHE_BIN_DELETE; op++) {
        fx_wire_cache_req q = vec_put;
        q.op = op;
        q.request_id = UINT64_MAX - op;
        if (op != FX_CACHE_BIN_PUT) {
            q.ttl_ms = 0;
            q.value = (fx_wire_slice){0};
        }
        size_t n = fx_wire_cache_req_frame_size(&q);
        assert_int_equal(n,
                         FX_WIRE_HEADER_LEN + 10 + 6 + 16 + (op == FX_CACHE_BIN_PUT ? 8 + 5 : 0));
        assert_int_equal(fx_wire_cache_req_encode(&q, frame, sizeof(frame)), (ssize_t)n);
        assert_true(fx_wire_cache_bin_is(body_of(frame, n), n - FX_WIRE_HEADER_LEN));
        fx_wire_cache_req d;
        assert_int_equal(fx_wire_cache_req_decode(body_of(frame, n), n - 12, &d, NULL), 0);
        assert_int_equal(d.op, op);
        assert_int_equal(d.request_id, UINT64_MAX - op);
        assert_slice(d.ns, "default");
        assert_slice(d.cache, "primary");
        assert_slice(d.key, "k1");
        assert_int_equal(d.ttl_ms, op == FX_CACHE_BIN_PUT ? 60000 : 0);
        assert_slice(d.value, op == FX_CACHE_BIN_PUT ? "hello" : "");
    }
}

static void test_put_with_empty_value_and_no_ttl_round_trips(void **state)
{
    (void)state;
    uint8_t frame[128];
    fx_wire_cache_req q = vec_put;
    q.ttl_ms = 0;
    q.value = (fx_wire_slice){0};
    ssize_t n = fx_wire_cache_req_encode(&q, frame, sizeof(frame));
    assert_true(n > 0);
    fx_wire_cache_req d;
    assert_int_equal(fx_wire_cache_req_decode(frame + 12, (size_t)n - 12, &d, NULL), 0);
    assert_int_equal(d.op, FX_CACHE_BIN_PUT);
    assert_int_equal(d.ttl_ms, 0);
    assert_int_equal(d.value.len, 0);
}

static void test_answer_round_trips_every_status(void **state)
{
    (void)state;
    uint8_t frame[128];
    fx_wire_cache_ans as[] = {
        {.status = FX_CACHE_BIN_OK, .request_id = 1, .value = str("v")},
        {.status = FX_CACHE_BIN_OK, .request_id = 2},
        {.status = FX_CACHE_BIN_MISS, .request_id = 3},
        {.status = FX_CACHE_BIN_ERROR, .request_id = UINT64_MAX, .text = str("forbidden")},
        {.status = FX_CACHE_BIN_ERROR, .request_id = 5},
    };
    for (size_t i = 0; i < sizeof(as) / sizeof(as[0]); i++) {
        size_t n = fx_wire_cache_ans_frame_size(&as[i]);
        assert_true(n > 0);
        assert_int_equal(fx_wire_cache_ans_encode(&as[i], frame, sizeof(frame)), (ssize_t)n);
        fx_wire_cache_ans d;
        assert_int_equal(fx_wire_cache_ans_decode(body_of(frame, n), n - 12, &d, NULL), 0);
        assert_int_equal(d.status, as[i].status);
        assert_int_equal(d.request_id, as[i].request_id);
        assert_int_equal(d.value.len, as[i].value.len);
        if (d.value.len)
            assert_memory_equal(d.value.ptr, as[i].value.ptr, d.value.len);
        assert_int_equal(d.text.len, as[i].text.len);
        if (d.text.len)
            assert_memory_equal(d.text.ptr, as[i].text.ptr, d.text.len);
    }
}

/* ---- vectors ----------------------------------------------------------------------------- */

/* Reads tests/vectors/felix-c-cache/|name|.hex: hex digits, blanks and '#'
 * comment lines. */
static uint8_t *load_vector(const char *name, size_t *plen)
{
    const char *root = getenv("FX_SOURCE_DIR");
    if (!root)
        fx_test_skip("FX_SOURCE_DIR not set (run through ctest)");
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/vectors/felix-c-cache/%s.hex", root, name);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    uint8_t *out = malloc(4096);
    assert_non_null(out);
    size_t n = 0;
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#')
            continue;
        for (const char *p = line; *p && *p != '\n';) {
            unsigned v;
            if (*p == ' ' || *p == '\r') {
                p++;
                continue;
            }
            assert_int_equal(sscanf(p, "%2x", &v), 1);
            assert_true(n < 4096);
            out[n++] = (uint8_t)v;
            p += 2;
        }
    }
    fclose(f);
    *plen = n;
    return out;
}

/* Decodes the request vector |name|, checks it against |want| and encodes
 * it back byte for byte. */
static void check_req_vector(const char *name, const fx_wire_cache_req *want)
{
    size_t len;
    uint8_t out[256];
    uint8_t *v = load_vector(name, &len);
    assert_int_equal(fx_wire_cache_req_encode(want, out, sizeof(out)), (ssize_t)len);
    assert_memory_equal(out, v, len);
    fx_wire_cache_req d;
    assert_int_equal(fx_wire_cache_req_decode(body_of(v, len), len - 12, &d, NULL), 0);
    assert_int_equal(d.op, want->op);
    assert_int_equal(d.request_id, want->request_id);
    assert_int_equal(d.ttl_ms, want->ttl_ms);
    assert_int_equal(d.key.len, want->key.len);
    assert_memory_equal(d.key.ptr, want->key.ptr, d.key.len);
    assert_int_equal(d.value.len, want->value.len);
    assert_int_equal(fx_wire_cache_req_encode(&d, out, sizeof(out)), (ssize_t)len);
    assert_memory_equal(out, v, len);
    free(v);
}

static void check_ans_vector(const char *name, const fx_wire_cache_ans *want)
{
    size_t len;
    uint8_t out[256];
    uint8_t *v = load_vector(name, &len);
    assert_int_equal(fx_wire_cache_ans_encode(want, out, sizeof(out)), (ssize_t)len);
    assert_memory_equal(out, v, len);
    fx_wire_cache_ans d;
    assert_int_equal(fx_wire_cache_ans_decode(body_of(v, len), len - 12, &d, NULL), 0);
    assert_int_equal(d.status, want->status);
    assert_int_equal(d.request_id, want->request_id);
    assert_int_equal(d.value.len, want->value.len);
    assert_int_equal(d.text.len, want->text.len);
    assert_int_equal(fx_wire_cache_ans_encode(&d, out, sizeof(out)), (ssize_t)len);
    assert_memory_equal(out, v, len);
    free(v);
}

static void test_vectors_decode_and_encode_byte_for_byte(void **state)
{
    (void)state;
    check_req_vector("cache_bin_put", &vec_put);
    fx_wire_cache_req get = {.op = FX_CACHE_BIN_GET,
                             .request_id = 8,
                             .ns = str("default"),
                             .cache = str("primary"),
                             .key = str("k1")};
    check_req_vector("cache_bin_get", &get);
    fx_wire_cache_req del = {.op = FX_CACHE_BIN_DELETE,
                             .request_id = 9,
                             .ns = str("default"),
                             .cache = str("primary"),
                             .key = str("sch\xc3\xa9ma")};
    check_req_vector("cache_bin_delete", &del);
    fx_wire_cache_ans hit = {.status = FX_CACHE_BIN_OK, .request_id = 8, .value = str("hello")};
    check_ans_vector("cache_bin_answer_hit", &hit);
    fx_wire_cache_ans miss = {.status = FX_CACHE_BIN_MISS, .request_id = 9};
    check_ans_vector("cache_bin_answer_miss", &miss);
    fx_wire_cache_ans error = {
        .status = FX_CACHE_BIN_ERROR, .request_id = 10, .text = str("forbidden")};
    check_ans_vector("cache_bin_answer_error", &error);
}

/* ---- refusals ------------------------------------------------------------------------------ */

static int req_rv(const uint8_t *body, size_t len)
{
    fx_wire_cache_req d;
    fx_wire_err err = {0};
    int rv = fx_wire_cache_req_decode(body, len, &d, &err);
    if (rv != 0)
        assert_int_equal(err.code, rv);
    return rv;
}

static int ans_rv(const uint8_t *body, size_t len)
{
    fx_wire_cache_ans d;
    fx_wire_err err = {0};
    int rv = fx_wire_cache_ans_decode(body, len, &d, &err);
    if (rv != 0)
        assert_int_equal(err.code, rv);
    return rv;
}

/* Every strict prefix of a get / delete request and of a miss or error
 * answer is refused as truncated; a put's prefixes are truncated until the
 * value starts (a shorter value is a valid put). */
static void test_every_truncation_is_rejected(void **state)
{
    (void)state;
    uint8_t frame[256];
    fx_wire_cache_req q = vec_put;
    ssize_t n = fx_wire_cache_req_encode(&q, frame, sizeof(frame));
    size_t body = (size_t)n - 12, value_at = body - vec_put.value.len;
    for (size_t i = 0; i < value_at; i++)
        assert_int_equal(req_rv(frame + 12, i), FX_EWIRE_TRUNCATED);
    for (size_t i = value_at; i <= body; i++)
        assert_int_equal(req_rv(frame + 12, i), 0);

    q.op = FX_CACHE_BIN_GET;
    n = fx_wire_cache_req_encode(&q, frame, sizeof(frame));
    for (size_t i = 0; i < (size_t)n - 12; i++)
        assert_int_equal(req_rv(frame + 12, i), FX_EWIRE_TRUNCATED);
    assert_int_equal(req_rv(frame + 12, (size_t)n - 12), 0);

    fx_wire_cache_ans a = {.status = FX_CACHE_BIN_ERROR, .request_id = 3, .text = str("no")};
    n = fx_wire_cache_ans_encode(&a, frame, sizeof(frame));
    for (size_t i = 0; i < (size_t)n - 12; i++)
        assert_int_equal(ans_rv(frame + 12, i), FX_EWIRE_TRUNCATED);
    assert_int_equal(ans_rv(frame + 12, (size_t)n - 12), 0);

    a = (fx_wire_cache_ans){.status = FX_CACHE_BIN_MISS, .request_id = 3};
    n = fx_wire_cache_ans_encode(&a, frame, sizeof(frame));
    for (size_t i = 0; i < (size_t)n - 12; i++)
        assert_int_equal(ans_rv(frame + 12, i), FX_EWIRE_TRUNCATED);
}

/* A name or text length pointing past the body is truncated, never read. */
static void test_lengths_past_the_body_are_refused(void **state)
{
    (void)state;
    uint8_t frame[256];
    fx_wire_cache_req q = vec_put;
    q.op = FX_CACHE_BIN_GET;
    ssize_t n = fx_wire_cache_req_encode(&q, frame, sizeof(frame));
    uint8_t *b = frame + 12;
    size_t len = (size_t)n - 12;
    /* ns_len at 10, cache_len at 19, key_len at 28 */
    size_t at[3] = {10, 10 + 2 + 7, 10 + 2 + 7 + 2 + 7};
    for (int i = 0; i < 3; i++) {
        uint8_t save[2] = {b[at[i]], b[at[i] + 1]};
        fx_put16(b + at[i], 0xFFFF);
        assert_int_equal(req_rv(b, len), FX_EWIRE_TRUNCATED);
        fx_put16(b + at[i], (uint16_t)(len - at[i] - 2 + 1));
        assert_int_equal(req_rv(b, len), FX_EWIRE_TRUNCATED);
        b[at[i]] = save[0], b[at[i] + 1] = save[1];
    }
    assert_int_equal(req_rv(b, len), 0);

    fx_wire_cache_ans a = {.status = FX_CACHE_BIN_ERROR, .request_id = 3, .text = str("no")};
    n = fx_wire_cache_ans_encode(&a, frame, sizeof(frame));
    fx_put16(frame + 12 + 10, 3);
    assert_int_equal(ans_rv(frame + 12, (size_t)n - 12), FX_EWIRE_TRUNCATED);
}

static void test_trailing_bytes_kinds_ops_and_names_are_checked(void **state)
{
    (void)state;
    uint8_t frame[256];
    fx_wire_cache_req q = vec_put;
    q.op = FX_CACHE_BIN_DELETE;
    ssize_t n = fx_wire_cache_req_encode(&q, frame, sizeof(frame) - 1);
    uint8_t *b = frame + 12;
    size_t len = (size_t)n - 12;
    b[len] = 0;
    assert_int_equal(req_rv(b, len + 1), FX_EWIRE_TRAILING);
    b[1] = 0;
    assert_int_equal(req_rv(b, len), FX_EWIRE_KIND); /* op 0 */
    b[1] = 4;
    assert_int_equal(req_rv(b, len), FX_EWIRE_KIND); /* op 4 */
    b[1] = FX_CACHE_BIN_DELETE;
    b[0] = FX_CACHE_BIN_FRAME_ANSWER;
    assert_int_equal(req_rv(b, len), FX_EWIRE_KIND);
    assert_false(fx_wire_cache_bin_is(b, 0));
    b[0] = 2; /* a group kind */
    assert_false(fx_wire_cache_bin_is(b, len));
    b[0] = FX_CACHE_BIN_FRAME_REQUEST;
    b[12] = 0xFF; /* inside the namespace: not UTF-8 */
    assert_int_equal(req_rv(b, len), FX_EWIRE_UTF8);
    b[12] = 0; /* a NUL in a name */
    assert_int_equal(req_rv(b, len), FX_EWIRE_NAME);

    /* An empty namespace or cache is refused as in JSON; an empty key is fine. */
    fx_wire_cache_req e = {.op = FX_CACHE_BIN_GET, .ns = str("n"), .cache = str("c")};
    n = fx_wire_cache_req_encode(&e, frame, sizeof(frame));
    assert_int_equal(req_rv(frame + 12, (size_t)n - 12), 0);
    e.cache.len = 0;
    n = fx_wire_cache_req_encode(&e, frame, sizeof(frame));
    assert_int_equal(req_rv(frame + 12, (size_t)n - 12), FX_EWIRE_NAME);
    e = (fx_wire_cache_req){.op = FX_CACHE_BIN_GET, .cache = str("c")};
    n = fx_wire_cache_req_encode(&e, frame, sizeof(frame));
    assert_int_equal(req_rv(frame + 12, (size_t)n - 12), FX_EWIRE_NAME);

    fx_wire_cache_ans a = {.status = FX_CACHE_BIN_MISS, .request_id = 3};
    n = fx_wire_cache_ans_encode(&a, frame, sizeof(frame) - 1);
    frame[n] = 'x';
    assert_int_equal(ans_rv(frame + 12, (size_t)n - 12 + 1), FX_EWIRE_TRAILING);
    frame[12 + 1] = 3;
    assert_int_equal(ans_rv(frame + 12, (size_t)n - 12), FX_EWIRE_STATUS);
    frame[12] = FX_CACHE_BIN_FRAME_REQUEST;
    assert_int_equal(ans_rv(frame + 12, (size_t)n - 12), FX_EWIRE_KIND);
}

static void test_encoders_refuse_what_decoders_refuse(void **state)
{
    (void)state;
    uint8_t frame[256];
    fx_wire_cache_req q = vec_put;
    q.op = 0;
    assert_int_equal(fx_wire_cache_req_frame_size(&q), 0);
    assert_int_equal(fx_wire_cache_req_encode(&q, frame, sizeof(frame)), FX_EWIRE_KIND);
    q = vec_put;
    q.key.len = 65536;
    assert_int_equal(fx_wire_cache_req_frame_size(&q), 0);
    assert_int_equal(fx_wire_cache_req_encode(&q, frame, sizeof(frame)), FX_EWIRE_TOO_LARGE);
    q = vec_put;
    size_t n = fx_wire_cache_req_frame_size(&q);
    assert_int_equal(fx_wire_cache_req_encode(&q, frame, n - 1), -ENOSPC);

    fx_wire_cache_ans a = {.status = 3};
    assert_int_equal(fx_wire_cache_ans_encode(&a, frame, sizeof(frame)), FX_EWIRE_STATUS);
    a = (fx_wire_cache_ans){.status = FX_CACHE_BIN_MISS, .value = str("x")};
    assert_int_equal(fx_wire_cache_ans_encode(&a, frame, sizeof(frame)), FX_EWIRE_STATUS);
    a = (fx_wire_cache_ans){.status = FX_CACHE_BIN_ERROR, .value = str("x")};
    assert_int_equal(fx_wire_cache_ans_encode(&a, frame, sizeof(frame)), FX_EWIRE_STATUS);
    a = (fx_wire_cache_ans){.status = FX_CACHE_BIN_ERROR, .text = {(const uint8_t *)"", 65536}};
    assert_int_equal(fx_wire_cache_ans_encode(&a, frame, sizeof(frame)), FX_EWIRE_TOO_LARGE);
    a = (fx_wire_cache_ans){.status = FX_CACHE_BIN_OK, .value = str("hello")};
    n = fx_wire_cache_ans_frame_size(&a);
    assert_int_equal(fx_wire_cache_ans_encode(&a, frame, n - 1), -ENOSPC);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_request_round_trips_every_op),
    cmocka_unit_test(test_put_with_empty_value_and_no_ttl_round_trips),
    cmocka_unit_test(test_answer_round_trips_every_status),
    cmocka_unit_test(test_vectors_decode_and_encode_byte_for_byte),
    cmocka_unit_test(test_every_truncation_is_rejected),
    cmocka_unit_test(test_lengths_past_the_body_are_refused),
    cmocka_unit_test(test_trailing_bytes_kinds_ops_and_names_are_checked),
    cmocka_unit_test(test_encoders_refuse_what_decoders_refuse),
};

FX_TEST_MAIN(tests)
