/* Tests of the original's subscribe redirect on the wire (design/cluster.md
 * §8.1 "Routing and wire", docs/protocol.md "Redirects"): not_leader
 * (src/wire/message.c) with and without addr, byte for byte against the
 * project's vectors (tests/vectors/felix-c-redirect), and the error a client
 * without FEATURE_REDIRECT gets instead (fx_msg_init_redirect_reply). */
/* fx-test-libs: fx_wire fx_base */
#include "fx_test.h"

#include <stdlib.h>

#include "felix/error.h"
#include "wire/message.h"

#include "own_vectors.h"

/* Its vectors: tests/vectors/felix-c-redirect (own_vectors.h). */
#define expect_vector(m, name) own_vector_expect((m), "felix-c-redirect", (name))

static int decode_str(fx_msg *m, const char *json)
{
    return fx_msg_decode(m, (const uint8_t *)json, strlen(json), NULL);
}

static void test_not_leader_matches_the_vectors(void **state)
{
    fx_msg m;
    fx_msg_init_not_leader(&m, "n2", "127.0.0.1:5001", 7);
    expect_vector(&m, "not_leader.json");
    fx_msg_init_not_leader(&m, "n2", NULL, 7);
    expect_vector(&m, "not_leader_no_addr.json");
}

static void test_not_leader_decodes_its_fields(void **state)
{
    fx_msg m;
    /* Field order does not matter to the decoder; null addr is absent. */
    assert_int_equal(decode_str(&m, "{\"generation\":9223372036854775807,\"addr\":null,"
                                    "\"node_id\":\"broker-b\",\"type\":\"not_leader\"}"),
                     0);
    assert_int_equal(m.type, FX_MSG_NOT_LEADER);
    assert_string_equal(m.node_id, "broker-b");
    assert_false(m.has_addr);
    assert_int_equal(m.generation, FX_MSG_INT_MAX);
    fx_msg_deinit(&m);
    assert_int_equal(decode_str(&m, "{\"type\":\"not_leader\",\"node_id\":\"b\","
                                    "\"addr\":\"10.0.0.5:5000\",\"generation\":0}"),
                     0);
    assert_true(m.has_addr);
    assert_string_equal(m.addr, "10.0.0.5:5000");
    fx_msg_deinit(&m);
}

static void test_bad_not_leaders_are_refused(void **state)
{
    fx_msg m;
    assert_int_equal(decode_str(&m, "{\"type\":\"not_leader\",\"node_id\":\"n2\"}"),
                     FX_EWIRE_FIELD_MISSING);
    assert_int_equal(decode_str(&m, "{\"type\":\"not_leader\",\"generation\":1}"),
                     FX_EWIRE_FIELD_MISSING);
    assert_int_equal(decode_str(&m, "{\"type\":\"not_leader\",\"node_id\":\"n2\","
                                    "\"generation\":-1}"),
                     FX_EWIRE_INT_RANGE);
    assert_int_equal(decode_str(&m, "{\"type\":\"not_leader\",\"node_id\":2,\"generation\":1}"),
                     FX_EWIRE_FIELD_TYPE);
    assert_int_equal(decode_str(&m, "{\"type\":\"not_leader\",\"node_id\":\"n2\",\"addr\":5,"
                                    "\"generation\":1}"),
                     FX_EWIRE_FIELD_TYPE);
    /* The encoder refuses what the decoder would. */
    fx_msg_init_not_leader(&m, NULL, "a:1", 1);
    assert_int_equal(fx_msg_encoded_len(&m), FX_EWIRE_FIELD_MISSING);
    fx_msg_init_not_leader(&m, "n2", "a:1", FX_MSG_INT_MAX + 1);
    assert_int_equal(fx_msg_encoded_len(&m), FX_EWIRE_INT_RANGE);
}

static void test_redirect_reply_follows_the_features(void **state)
{
    char text[256];
    fx_msg m;
    fx_msg_init_redirect_reply(&m, FX_FEATURE_REDIRECT, "t1", "default", "demo", "n2",
                               "127.0.0.1:5001", 7, text, sizeof(text));
    expect_vector(&m, "not_leader.json");
    /* The original's clients offer client_features 3. */
    fx_msg_init_redirect_reply(&m, FX_FEATURE_TOPOLOGY | FX_FEATURE_REDIRECT, "t1", "default",
                               "demo", "n2", NULL, 7, text, sizeof(text));
    expect_vector(&m, "not_leader_no_addr.json");
    fx_msg_init_redirect_reply(&m, 0, "t1", "default", "demo", "n2", "127.0.0.1:5001", 7, text,
                               sizeof(text));
    expect_vector(&m, "not_leader_error.json");
    fx_msg_init_redirect_reply(&m, FX_FEATURE_ERROR_CODES, "t1", "default", "demo", "n2",
                               "127.0.0.1:5001", 7, text, sizeof(text));
    expect_vector(&m, "not_leader_error_codes.json");
}

static void test_feature_bits_are_the_originals(void **state)
{
    assert_int_equal(FX_FEATURE_TOPOLOGY, 0x1);
    assert_int_equal(FX_FEATURE_REDIRECT, 0x2);
    assert_int_equal(FX_FEATURE_SHARD_MOVED, 0x1000);
    assert_int_equal(FX_FEATURE_SHARD_OWNERS, 0x40000);
    assert_string_equal(fx_msg_type_name(FX_MSG_NOT_LEADER), "not_leader");
}

static void test_shard_moved_and_its_error_match_the_vectors(void **state)
{
    char text[256];
    fx_msg m;
    fx_msg_init_moved_reply(&m, FX_FEATURE_SHARD_MOVED | FX_FEATURE_REDIRECT, "t1", "default",
                            "demo", "n2", "127.0.0.1:5001", 8, text, sizeof(text));
    assert_int_equal(m.type, FX_MSG_SHARD_MOVED);
    expect_vector(&m, "shard_moved.json");
    /* A client that did not offer 0x1000 learns where it went, as text. */
    fx_msg_init_moved_reply(&m, FX_FEATURE_REDIRECT | FX_FEATURE_ERROR_CODES, "t1", "default",
                            "demo", "n2", "127.0.0.1:5001", 8, text, sizeof(text));
    expect_vector(&m, "shard_moved_error.json");
    assert_string_equal(fx_msg_type_name(FX_MSG_SHARD_MOVED), "shard_moved");
    assert_int_equal(decode_str(&m, "{\"type\":\"shard_moved\",\"node_id\":\"n3\","
                                    "\"generation\":2}"),
                     0);
    assert_int_equal(m.type, FX_MSG_SHARD_MOVED);
    assert_false(m.has_addr);
    assert_int_equal(m.generation, 2);
    fx_msg_deinit(&m);
    assert_int_equal(decode_str(&m, "{\"type\":\"shard_moved\",\"node_id\":\"n3\"}"),
                     FX_EWIRE_FIELD_MISSING);
}

static void test_subscribed_carries_the_epoch_and_the_previous_epochs_end(void **state)
{
    fx_msg m;
    fx_msg_init_subscribed(&m, 42);
    m.has_epoch = true, m.epoch = 8;
    m.has_prev_epoch_end = true, m.prev_epoch_end = (7ull << 40) | 1234;
    expect_vector(&m, "subscribed_epoch.json");
    /* Absent fields are omitted: a standalone broker's bytes are unchanged. */
    fx_msg_init_subscribed(&m, 42);
    uint8_t *out;
    size_t len;
    assert_int_equal(fx_msg_encode(&m, &out, &len), 0);
    assert_int_equal(len, strlen("{\"type\":\"subscribed\",\"subscription_id\":42}"));
    assert_memory_equal(out, "{\"type\":\"subscribed\",\"subscription_id\":42}", len);
    free(out);
    assert_int_equal(decode_str(&m, "{\"type\":\"subscribed\",\"subscription_id\":1,"
                                    "\"epoch\":3}"),
                     0);
    assert_true(m.has_epoch);
    assert_false(m.has_prev_epoch_end);
    fx_msg_deinit(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_not_leader_matches_the_vectors),
    cmocka_unit_test(test_not_leader_decodes_its_fields),
    cmocka_unit_test(test_bad_not_leaders_are_refused),
    cmocka_unit_test(test_redirect_reply_follows_the_features),
    cmocka_unit_test(test_feature_bits_are_the_originals),
    cmocka_unit_test(test_shard_moved_and_its_error_match_the_vectors),
    cmocka_unit_test(test_subscribed_carries_the_epoch_and_the_previous_epochs_end),
};

FX_TEST_MAIN(tests)
