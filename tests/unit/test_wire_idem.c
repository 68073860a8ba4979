/* Tests of the idempotent producer's wire (felix-facts-groups.md §2.2):
 * producer_init / producer_init_ok / publish_idempotent / publish_refused
 * and publish_ok's offset + duplicate (src/wire/message.c), the binary
 * 0x0109 batch (src/wire/binary.c) and its flag rules (src/wire/frame.c),
 * byte for byte against the project's vectors (tests/vectors/felix-c-idem). */
/* fx-test-libs: fx_wire fx_base */
#include "fx_test.h"

#include <stdlib.h>

#include "felix/error.h"
#include "wire/binary.h"
#include "wire/frame.h"
#include "wire/message.h"

#define PID 0x1122334455667788ull

/* Reads tests/vectors/felix-c-idem/|name|: a .hex file (hex digits,
 * blanks, '#' comment lines) as bytes, any other file as its bytes without
 * the final newline. */
static uint8_t *load_vector(const char *name, size_t *plen)
{
    const char *root = getenv("FX_SOURCE_DIR");
    if (!root)
        fx_test_skip("FX_SOURCE_DIR not set (run through ctest)");
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/vectors/felix-c-idem/%s", root, name);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    uint8_t *out = malloc(4096);
    assert_non_null(out);
    size_t n = 0;
    bool hex = strstr(name, ".hex") != NULL;
    if (!hex) {
        n = fread(out, 1, 4096, f);
        while (n > 0 && out[n - 1] == '\n')
            n--;
        fclose(f);
        *plen = n;
        return out;
    }
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

/* |m| encodes to the vector |name| byte for byte, and the vector decodes
 * back to fields equal to |m|'s. */
static void expect_vector(const fx_msg *m, const char *name)
{
    size_t len;
    uint8_t *want = load_vector(name, &len);
    uint8_t *got;
    size_t glen;
    assert_int_equal(fx_msg_encode(m, &got, &glen), 0);
    if (glen != len || memcmp(got, want, len) != 0)
        fail_msg("%s: got %.*s", name, (int)glen, (const char *)got);
    fx_msg d;
    assert_int_equal(fx_msg_decode(&d, want, len, NULL), 0);
    assert_true(fx_msg_equal(m, &d));
    fx_msg_deinit(&d);
    free(got);
    free(want);
}

static void test_producer_init_and_its_answer_match_the_vectors(void **state)
{
    fx_msg m;
    memset(&m, 0, sizeof(m));
    m.type = FX_MSG_PRODUCER_INIT;
    m.request_id = 1;
    expect_vector(&m, "producer_init.json");
    fx_msg_init_producer_init_ok(&m, 1, PID);
    expect_vector(&m, "producer_init_ok.json");
}

static void test_publish_idempotent_matches_the_vector(void **state)
{
    static const fx_msg_bytes hello[] = {{(const uint8_t *)"hello", 5}};
    fx_msg m;
    memset(&m, 0, sizeof(m));
    m.type = FX_MSG_PUBLISH_IDEMPOTENT;
    m.tenant_id = "t1", m.ns = "default", m.stream = "demo";
    m.payloads = hello, m.n_payloads = 1;
    m.request_id = 7, m.producer_id = PID, m.sequence = 3;
    expect_vector(&m, "publish_idempotent.json");
}

static void test_publish_refused_reasons_match_the_vectors(void **state)
{
    fx_msg m;
    fx_msg_init_publish_refused(&m, 7, (fx_msg_refusal){FX_MSG_REFUSAL_SEQUENCE_GAP, 2},
                                "sequence gap: expected 2");
    expect_vector(&m, "publish_refused_gap.json");
    fx_msg_init_publish_refused(
        &m, 7, (fx_msg_refusal){FX_MSG_REFUSAL_UNKNOWN_PRODUCER, 0},
        "unknown producer 1234605616436508552: nothing to check its sequence against");
    expect_vector(&m, "publish_refused_unknown.json");
}

static void test_publish_ok_offset_and_duplicate_match_the_vector(void **state)
{
    fx_msg m;
    fx_msg_init_publish_ok(&m, 7);
    m.has_offset = true, m.offset = 40;
    m.duplicate = true;
    expect_vector(&m, "publish_ok_duplicate.json");
    /* Without them publish_ok is the original's bytes. */
    fx_msg_init_publish_ok(&m, 7);
    uint8_t buf[128];
    size_t n;
    assert_int_equal(fx_msg_encode_into(&m, buf, sizeof(buf), &n), 0);
    assert_int_equal(n, strlen("{\"type\":\"publish_ok\",\"request_id\":7}"));
    assert_memory_equal(buf, "{\"type\":\"publish_ok\",\"request_id\":7}", n);
}

static int decode_str(fx_msg *m, const char *json)
{
    return fx_msg_decode(m, (const uint8_t *)json, strlen(json), NULL);
}

static void test_every_refusal_reason_round_trips(void **state)
{
    static const char *const names[] = {"unknown_producer", "sequence_expired",
                                        "sequence_reused"};
    for (int i = 0; i < 3; i++) {
        char json[256];
        snprintf(json, sizeof(json),
                 "{\"type\":\"publish_refused\",\"request_id\":1,\"reason\":\"%s\","
                 "\"message\":\"x\"}",
                 names[i]);
        fx_msg m;
        assert_int_equal(decode_str(&m, json), 0);
        assert_int_equal(m.refusal.kind, FX_MSG_REFUSAL_UNKNOWN_PRODUCER + i);
        uint8_t buf[256];
        size_t n;
        assert_int_equal(fx_msg_encode_into(&m, buf, sizeof(buf), &n), 0);
        assert_int_equal(n, strlen(json));
        assert_memory_equal(buf, json, n);
        fx_msg_deinit(&m);
    }
}

static void test_bad_refusal_reasons_are_refused(void **state)
{
    static const char *const bad[] = {
        "{\"type\":\"publish_refused\",\"request_id\":1,\"reason\":\"sequence_gap\","
        "\"message\":\"x\"}",
        "{\"type\":\"publish_refused\",\"request_id\":1,\"reason\":{\"sequence_gap\":{}},"
        "\"message\":\"x\"}",
        "{\"type\":\"publish_refused\",\"request_id\":1,\"reason\":{\"sequence_gap\":"
        "{\"expected\":-1}},\"message\":\"x\"}",
        "{\"type\":\"publish_refused\",\"request_id\":1,\"reason\":\"nope\",\"message\":\"x\"}",
        "{\"type\":\"publish_refused\",\"request_id\":1,\"message\":\"x\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fx_msg m;
        assert_true(decode_str(&m, bad[i]) < 0);
    }
    fx_msg m;
    /* publish_idempotent needs producer_id and sequence. */
    assert_int_equal(decode_str(&m, "{\"type\":\"publish_idempotent\",\"tenant_id\":\"t\","
                                    "\"namespace\":\"n\",\"stream\":\"s\",\"payloads\":[],"
                                    "\"request_id\":1,\"producer_id\":2}"),
                     FX_EWIRE_FIELD_MISSING);
}

static void test_binary_idempotent_batch_matches_the_vector(void **state)
{
    size_t len;
    uint8_t *want = load_vector("binary_publish_idempotent.hex", &len);
    assert_int_equal(len, 69);
    fx_wire_slice hello = {(const uint8_t *)"hello", 5};
    fx_wire_publish_batch b = {.request_id = 7,
                               .ack = FX_WIRE_ACK_PER_BATCH,
                               .idempotent = true,
                               .producer_id = PID,
                               .sequence = 3,
                               .tenant = {(const uint8_t *)"t1", 2},
                               .ns = {(const uint8_t *)"default", 7},
                               .stream = {(const uint8_t *)"demo", 4},
                               .count = 1,
                               .payloads = &hello};
    assert_int_equal(fx_wire_publish_batch_flags(&b), 0x0109);
    uint8_t out[128];
    assert_int_equal(fx_wire_publish_batch_encode(&b, out, sizeof(out)), 69);
    assert_memory_equal(out, want, 69);

    fx_frame_header h;
    assert_int_equal(fx_frame_header_decode(want, FX_WIRE_DEFAULT_MAX_FRAME, &h, NULL), 0);
    assert_int_equal(h.flags, 0x0109);
    fx_body_kind k;
    assert_int_equal(fx_frame_kind(h.flags, &k, NULL), 0);
    assert_int_equal(k, FX_BODY_PUBLISH_BATCH_ACKED);
    fx_wire_publish_batch d;
    assert_int_equal(fx_wire_publish_batch_decode(0x0109, want + 12, len - 12, &d, NULL), 0);
    assert_true(d.idempotent);
    assert_int_equal(d.request_id, 7);
    assert_int_equal(d.producer_id, PID);
    assert_int_equal(d.sequence, 3);
    assert_int_equal(d.count, 1);
    assert_int_equal(d.payloads[0].len, 5);
    assert_memory_equal(d.payloads[0].ptr, "hello", 5);
    fx_wire_publish_batch_deinit(&d);

    uint64_t rid, pid, seq;
    assert_int_equal(fx_wire_publish_idem_prefix_decode(want + 12, len - 12, &rid, &pid, &seq,
                                                        NULL),
                     0);
    assert_int_equal(pid, PID);
    /* Every cut inside the prefix is truncated. */
    for (size_t cut = 0; cut < FX_WIRE_IDEMPOTENT_PREFIX_LEN; cut++)
        assert_int_equal(fx_wire_publish_idem_prefix_decode(want + 12, cut, &rid, &pid, &seq,
                                                            NULL),
                         FX_EWIRE_TRUNCATED);
    /* Ack mode 1 is refused in an idempotent batch. */
    want[12 + 8] = 1;
    assert_int_equal(fx_wire_publish_batch_decode(0x0109, want + 12, len - 12, &d, NULL),
                     FX_EWIRE_ACK_MODE);
    free(want);
}

static void test_idempotent_flag_needs_the_acked_flag(void **state)
{
    fx_body_kind k;
    fx_wire_err err;
    assert_int_equal(fx_frame_kind(0x0101, &k, &err), FX_EWIRE_FLAGS);
    assert_non_null(strstr(err.msg, "0x0100"));
    assert_true(fx_frame_kind(0x0100, &k, NULL) < 0);
    assert_true(fx_frame_kind(0x0102, &k, NULL) < 0);
    assert_true(fx_frame_kind(0x0108, &k, NULL) < 0);
    assert_int_equal(fx_frame_kind(0x0109, &k, NULL), 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_producer_init_and_its_answer_match_the_vectors),
    cmocka_unit_test(test_publish_idempotent_matches_the_vector),
    cmocka_unit_test(test_publish_refused_reasons_match_the_vectors),
    cmocka_unit_test(test_publish_ok_offset_and_duplicate_match_the_vector),
    cmocka_unit_test(test_every_refusal_reason_round_trips),
    cmocka_unit_test(test_bad_refusal_reasons_are_refused),
    cmocka_unit_test(test_binary_idempotent_batch_matches_the_vector),
    cmocka_unit_test(test_idempotent_flag_needs_the_acked_flag),
};

FX_TEST_MAIN(tests)
