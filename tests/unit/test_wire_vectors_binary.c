/* Checks the binary codecs against the Felix wire test vectors (shared
 * reference material): each vector's fields encode to its frame_hex byte for
 * byte, and its frame decodes back to the same fields. Skipped when the
 * vectors are not beside the checkout. */
/* fx-test-libs: fx_wire fx_base */
#include "fx_test.h"

#include "wire/binary.h"
#include "wire_vectors.h"

static int64_t vec_int(const fx_vector *v, const char *key)
{
    json_t *j = json_object_get(v->doc, key);
    assert_true(json_is_integer(j));
    return (int64_t)json_integer_value(j);
}

static fx_wire_slice vec_slice(const fx_vector *v, const char *key)
{
    const char *s = fx_vec_str(v, key);
    assert_non_null(s);
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

static void assert_slice_eq(fx_wire_slice a, fx_wire_slice b)
{
    assert_int_equal(a.len, b.len);
    if (a.len)
        assert_memory_equal(a.ptr, b.ptr, a.len);
}

/* Runs the frame through the streaming decoder in one feed and returns it. */
static fx_frame decode_frame(const fx_vector *v)
{
    fx_frame_decoder d;
    fx_frame_decoder_init(&d, FX_WIRE_DEFAULT_MAX_FRAME);
    fx_frame f;
    size_t used, pos = 0;
    int rv;
    while ((rv = fx_frame_decoder_feed(&d, v->frame + pos, v->frame_len - pos, &used, &f, NULL)) ==
           FX_FRAME_HEADER)
        pos += used;
    pos += used;
    assert_int_equal(rv, FX_FRAME_READY);
    assert_int_equal(pos, v->frame_len);
    assert_false(f.buffered);
    assert_int_equal(f.flags_rv, 0);
    assert_int_equal(f.hdr.flags, vec_int(v, "flags"));
    assert_int_equal(fx_frame_decoder_finish(&d, NULL), 0);
    fx_frame_decoder_deinit(&d);
    /* The payload_hex field is the body alone. */
    size_t blen;
    uint8_t *body = fx_vec_unhex(fx_vec_str(v, "payload_hex"), &blen);
    assert_int_equal(blen, f.len);
    assert_memory_equal(body, f.body, blen);
    free(body);
    return f;
}

static void test_binary_publish_acked(void **state)
{
    fx_vector v;
    fx_vec_load(&v, "binary_publish_acked");
    assert_string_equal(fx_vec_str(&v, "kind"), "binary_acked_publish_batch");
    assert_string_equal(fx_vec_str(&v, "ack_mode"), "per_batch");
    json_t *arr = json_object_get(v.doc, "payloads_utf8");
    assert_true(json_is_array(arr));
    size_t n = json_array_size(arr);
    fx_wire_slice *payloads = calloc(n ? n : 1, sizeof(*payloads));
    assert_non_null(payloads);
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(arr, i));
        assert_non_null(s);
        payloads[i] = (fx_wire_slice){(const uint8_t *)s, strlen(s)};
    }
    fx_wire_publish_batch b = {.request_id = (uint64_t)vec_int(&v, "request_id"),
                               .ack = FX_WIRE_ACK_PER_BATCH,
                               .tenant = vec_slice(&v, "tenant_id"),
                               .ns = vec_slice(&v, "namespace"),
                               .stream = vec_slice(&v, "stream"),
                               .count = (uint32_t)n,
                               .payloads = payloads};
    assert_int_equal(fx_wire_publish_batch_frame_size(&b), v.frame_len);
    uint8_t *out = malloc(v.frame_len);
    assert_int_equal(fx_wire_publish_batch_encode(&b, out, v.frame_len), v.frame_len);
    assert_memory_equal(out, v.frame, v.frame_len);
    free(out);

    fx_frame f = decode_frame(&v);
    assert_int_equal(f.kind, FX_BODY_PUBLISH_BATCH_ACKED);
    fx_wire_publish_batch d;
    assert_int_equal(fx_wire_publish_batch_decode(f.hdr.flags, f.body, f.len, &d, NULL), 0);
    assert_int_equal(d.request_id, b.request_id);
    assert_int_equal(d.ack, FX_WIRE_ACK_PER_BATCH);
    assert_slice_eq(d.tenant, b.tenant);
    assert_slice_eq(d.ns, b.ns);
    assert_slice_eq(d.stream, b.stream);
    assert_int_equal(d.count, n);
    for (size_t i = 0; i < n; i++)
        assert_slice_eq(d.payloads[i], payloads[i]);
    fx_wire_publish_batch_deinit(&d);
    free(payloads);
    fx_vec_free(&v);
}

/* Shared body of the two ack vectors. */
static void check_ack_vector(const char *name)
{
    fx_vector v;
    fx_vec_load(&v, name);
    assert_string_equal(fx_vec_str(&v, "kind"), "binary_publish_ack");
    const char *status = fx_vec_str(&v, "status");
    assert_non_null(status);
    json_t *msg = json_object_get(v.doc, "message");
    fx_wire_publish_ack a = {.ok = strcmp(status, "ok") == 0,
                             .request_id = (uint64_t)vec_int(&v, "request_id")};
    if (!a.ok)
        assert_string_equal(status, "error");
    if (json_is_string(msg))
        a.message = vec_slice(&v, "message");
    else
        assert_true(json_is_null(msg));
    uint8_t out[1024];
    assert_int_equal(fx_wire_publish_ack_frame_size(&a), v.frame_len);
    assert_int_equal(fx_wire_publish_ack_encode(&a, out, sizeof(out)), v.frame_len);
    assert_memory_equal(out, v.frame, v.frame_len);

    fx_frame f = decode_frame(&v);
    assert_int_equal(f.kind, FX_BODY_PUBLISH_ACK);
    fx_wire_publish_ack d;
    assert_int_equal(fx_wire_publish_ack_decode(f.body, f.len, &d, NULL), 0);
    assert_int_equal(d.ok, a.ok);
    assert_int_equal(d.request_id, a.request_id);
    assert_slice_eq(d.message, a.message);
    fx_vec_free(&v);
}

static void test_binary_publish_ack_ok(void **state)
{
    check_ack_vector("binary_publish_ack_ok");
}

static void test_binary_publish_ack_error(void **state)
{
    check_ack_vector("binary_publish_ack_error");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_binary_publish_acked),
    cmocka_unit_test(test_binary_publish_ack_ok),
    cmocka_unit_test(test_binary_publish_ack_error),
};

FX_TEST_MAIN(tests)
