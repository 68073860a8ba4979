/* fx_place: etcd key names and their inverse with hostile names, the node,
 * owner and pin values byte for byte and each bad field refused, and
 * weighted rendezvous hashing with bounded loads (determinism, weights,
 * the cap for 100 to 10,000 streams, a joining node's share, and claims
 * refused above the cap and passed to the next candidate). */
/* fx-test-libs: fx_cluster fx_wire fx_base */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/place.h"
#include "felix/error.h"
#include "fx_test.h"

uint64_t fx_place_siphash(const unsigned char key[16], const void *data, size_t n);

/* ---- keys --------------------------------------------------------------- */

static void expect_key(int rv, const char *got, const char *want)
{
    assert_int_equal(rv, (int)strlen(want));
    assert_string_equal(got, want);
}

static void test_keys_are_named_under_the_cluster(void **state)
{
    char k[FX_PLACE_KEY_MAX];
    expect_key(fx_place_key(k, sizeof k, "felix", FX_PLACE_NODES, "n1", NULL, NULL), k,
               "/felix/felix/nodes/n1");
    expect_key(fx_place_key(k, sizeof k, "felix", FX_PLACE_LOAD, "n1", NULL, NULL), k,
               "/felix/felix/load/n1");
    expect_key(fx_place_key(k, sizeof k, "c1", FX_PLACE_OWNERS, "t", "ns", "s"), k,
               "/felix/c1/owners/t/ns/s");
    expect_key(fx_place_key(k, sizeof k, "c1", FX_PLACE_EPOCHS, "t", "ns", "s"), k,
               "/felix/c1/epochs/t/ns/s");
    expect_key(fx_place_key(k, sizeof k, "c1", FX_PLACE_DURABLE, "t", "ns", "s"), k,
               "/felix/c1/durable/t/ns/s");
    expect_key(fx_place_key(k, sizeof k, "c1", FX_PLACE_HANDOFF, "t", "ns", "s"), k,
               "/felix/c1/handoff/t/ns/s");
    expect_key(fx_place_prefix(k, sizeof k, "c1", FX_PLACE_OWNERS), k, "/felix/c1/owners/");
    expect_key(fx_place_stream_key(k, sizeof k, "a/b", "n s", "x%y"), k, "a%2Fb/n%20s/x%25y");
    assert_string_equal(fx_place_kind_name(FX_PLACE_DURABLE), "durable");
    assert_null(fx_place_kind_name((fx_place_key_kind)99));
}

static void test_components_are_percent_encoded(void **state)
{
    char k[FX_PLACE_KEY_MAX];
    /* '/', '%', a space, UTF-8 (é = C3 A9) and '+' are encoded; "._-" and
     * alphanumerics are not. */
    expect_key(fx_place_key(k, sizeof k, "my/cl", FX_PLACE_OWNERS, "a/b", "100%", "é x+y._-Z9"), k,
               "/felix/my%2Fcl/owners/a%2Fb/100%25/%C3%A9%20x%2By._-Z9");
    expect_key(fx_place_key(k, sizeof k, "c", FX_PLACE_NODES, "node/1", NULL, NULL), k,
               "/felix/c/nodes/node%2F1");
    /* "t/a" + "b" and "t" + "a/b" are different keys, and no stream's owner
     * key is a prefix of another's. */
    char k2[FX_PLACE_KEY_MAX];
    fx_place_key(k, sizeof k, "c", FX_PLACE_OWNERS, "t/a", "b", "s");
    fx_place_key(k2, sizeof k2, "c", FX_PLACE_OWNERS, "t", "a/b", "s");
    assert_string_not_equal(k, k2);
}

static void test_key_refuses_bad_arguments(void **state)
{
    char k[FX_PLACE_KEY_MAX];
    char long_id[FX_PLACE_ID_MAX + 2], long_name[FX_PLACE_NAME_MAX + 2];
    memset(long_id, 'i', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = 0;
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = 0;
    assert_int_equal(fx_place_key(k, sizeof k, "c", FX_PLACE_OWNERS, "t", "", "s"), -EINVAL);
    assert_int_equal(fx_place_key(k, sizeof k, "c", FX_PLACE_OWNERS, "t", NULL, "s"), -EINVAL);
    assert_int_equal(fx_place_key(k, sizeof k, "", FX_PLACE_OWNERS, "t", "n", "s"), -EINVAL);
    assert_int_equal(fx_place_key(k, sizeof k, NULL, FX_PLACE_NODES, "n1", NULL, NULL), -EINVAL);
    assert_int_equal(fx_place_key(k, sizeof k, "c", FX_PLACE_NODES, "n1", "x", NULL), -EINVAL);
    assert_int_equal(fx_place_key(k, sizeof k, "c", FX_PLACE_NODES, long_id, NULL, NULL), -EINVAL);
    assert_int_equal(fx_place_key(k, sizeof k, long_id, FX_PLACE_NODES, "n1", NULL, NULL), -EINVAL);
    assert_int_equal(fx_place_key(k, sizeof k, "c", FX_PLACE_OWNERS, "t", "n", long_name), -EINVAL);
    assert_int_equal(fx_place_key(k, sizeof k, "c", (fx_place_key_kind)6, "t", "n", "s"), -EINVAL);
    assert_int_equal(fx_place_prefix(k, sizeof k, "c", (fx_place_key_kind)-1), -EINVAL);
    /* Too small a buffer: refused, and left an empty string. */
    assert_int_equal(fx_place_key(k, 10, "c", FX_PLACE_NODES, "n1", NULL, NULL), -ENAMETOOLONG);
    assert_string_equal(k, "");
    /* The exact fit: "/felix/c/nodes/n1" is 17 bytes and the NUL. */
    assert_int_equal(fx_place_key(k, 18, "c", FX_PLACE_NODES, "n1", NULL, NULL), 17);
    assert_int_equal(fx_place_key(k, 17, "c", FX_PLACE_NODES, "n1", NULL, NULL), -ENAMETOOLONG);
    assert_int_equal(fx_place_key(NULL, 0, "c", FX_PLACE_NODES, "n1", NULL, NULL), -ENAMETOOLONG);
}

static void round_trip(fx_place_key_kind kind, const char *cluster, const char *a, const char *b,
                       const char *c)
{
    char k[FX_PLACE_KEY_MAX];
    int n = fx_place_key(k, sizeof k, cluster, kind, a, b, c);
    assert_true(n > 0);
    fx_place_key_parts p;
    assert_int_equal(fx_place_key_parse(k, (size_t)n, cluster, &p), 0);
    assert_int_equal(p.kind, kind);
    assert_string_equal(p.a, a);
    assert_string_equal(p.b, b == NULL ? "" : b);
    assert_string_equal(p.c, c == NULL ? "" : c);
    /* Another cluster, and every prefix that ends before the last component
     * has a byte, do not parse. */
    assert_int_equal(fx_place_key_parse(k, (size_t)n, "other", &p), -EINVAL);
    int last = (int)(strrchr(k, '/') - k);
    for (int cut = 0; cut <= last + 1; cut++)
        assert_int_equal(fx_place_key_parse(k, (size_t)cut, cluster, &p), -EINVAL);
}

static void test_keys_round_trip_hostile_names(void **state)
{
    char max_name[FX_PLACE_NAME_MAX + 1], all[FX_PLACE_NAME_MAX + 1];
    memset(max_name, '/', FX_PLACE_NAME_MAX); /* 255 bytes, each one encoded */
    max_name[FX_PLACE_NAME_MAX] = 0;
    for (size_t i = 0; i < FX_PLACE_NAME_MAX; i++)
        all[i] = (char)(i + 1); /* every byte but NUL */
    all[FX_PLACE_NAME_MAX] = 0;
    char max_id[FX_PLACE_ID_MAX + 1];
    memset(max_id, '%', FX_PLACE_ID_MAX);
    max_id[FX_PLACE_ID_MAX] = 0;
    for (int kind = FX_PLACE_OWNERS; kind <= FX_PLACE_HANDOFF; kind++) {
        round_trip((fx_place_key_kind)kind, "felix", "t", "ns", "s");
        round_trip((fx_place_key_kind)kind, "c/1", "a/b", "%2F", "x%");
        round_trip((fx_place_key_kind)kind, "c", "日本", "ñs", "流れ 🚀");
        round_trip((fx_place_key_kind)kind, max_id, max_name, all, max_name);
    }
    round_trip(FX_PLACE_NODES, "felix", "n1", NULL, NULL);
    round_trip(FX_PLACE_LOAD, "felix", max_id, NULL, NULL);
    round_trip(FX_PLACE_NODES, max_id, "a/%b", NULL, NULL);
    /* The longest key fits FX_PLACE_KEY_MAX. */
    char k[FX_PLACE_KEY_MAX];
    int n = fx_place_key(k, sizeof k, max_id, FX_PLACE_HANDOFF, max_name, max_name, max_name);
    assert_true(n > 0 && (size_t)n < FX_PLACE_KEY_MAX);
}

static void test_key_parse_refuses_what_the_encoder_never_writes(void **state)
{
    static const char *const bad[] = {
        "",
        "/felix/c",
        "/felix/c/",
        "/felix/c/owners",
        "/felix/c/owners/",
        "/felix/c/owners/t/ns",
        "/felix/c/owners/t/ns/",
        "/felix/c/owners/t/ns/s/",
        "/felix/c/owners/t/ns/s/x",
        "/felix/c/owners/t//s",
        "/felix/c/owners//ns/s",
        "/felix/c/nodes/n1/x",
        "/felix/c/nodes/",
        "/felix/c/streams/t/ns/s",
        "/felix/c/Owners/t/ns/s",
        "/felix/c2/owners/t/ns/s",
        "/felix/co/owners/t/ns/s",
        "/felix/c/owners/t/ns/%2f", /* lower-case hex */
        "/felix/c/owners/t/ns/%41", /* 'A' encoded */
        "/felix/c/owners/t/ns/%2E", /* '.' encoded */
        "/felix/c/owners/t/ns/%00", /* NUL */
        "/felix/c/owners/t/ns/%2",  /* short escape */
        "/felix/c/owners/t/ns/%",   /* short escape */
        "/felix/c/owners/t/ns/%G0", /* not hex */
        "/felix/c/owners/t/ns/a b", /* a byte that must be encoded */
        "/felix/c/owners/t/ns/\xc3\xa9",
        "felix/c/owners/t/ns/s",
        "//felix/c/owners/t/ns/s",
    };
    fx_place_key_parts p;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (fx_place_key_parse(bad[i], strlen(bad[i]), "c", &p) != -EINVAL)
            fail_msg("parsed: \"%s\"", bad[i]);
    }
    /* A NUL inside the key's bytes, and a node id over 64 bytes. */
    assert_int_equal(fx_place_key_parse("/felix/c/nodes/n\0", 17, "c", &p), -EINVAL);
    char k[128] = "/felix/c/nodes/";
    memset(k + strlen(k), 'x', FX_PLACE_ID_MAX + 1);
    assert_int_equal(fx_place_key_parse(k, strlen(k), "c", &p), -EINVAL);
    k[strlen(k) - 1] = 0;
    assert_int_equal(fx_place_key_parse(k, strlen(k), "c", &p), 0);
    /* The good key, not NUL-terminated at |len|. */
    const char *good = "/felix/c/owners/t/ns/s/trailing";
    assert_int_equal(fx_place_key_parse(good, 22, "c", &p), 0);
    assert_string_equal(p.c, "s");
    assert_int_equal(fx_place_key_parse(good, 22, NULL, &p), -EINVAL);
}

/* ---- values ------------------------------------------------------------- */

static void expect_json(char *got, size_t len, const char *want)
{
    assert_non_null(got);
    assert_string_equal(got, want);
    assert_int_equal(len, strlen(want));
    free(got);
}

/* Encodes |v| with |fn| and expects |want| and its length. */
#define EXPECT_ENC(fn, v, want)                                                                    \
    do {                                                                                           \
        size_t len_ = 0;                                                                           \
        char *s_ = fn(v, &len_);                                                                   \
        expect_json(s_, len_, want);                                                               \
    } while (0)

static const char node_json[] =
    "{\"addr\":\"127.0.0.1:5000\",\"internal\":\"127.0.0.1:5100\",\"server_name\":\"localhost\","
    "\"weight\":100,\"features\":3,\"admin\":\"127.0.0.1:8080\"}";

static void test_values_encode_to_exact_bytes(void **state)
{
    fx_place_node_info n = {.addr = "127.0.0.1:5000",
                            .internal = "127.0.0.1:5100",
                            .server_name = "localhost",
                            .weight = 100,
                            .features = 3,
                            .admin = "127.0.0.1:8080"};
    EXPECT_ENC(fx_place_node_encode, &n, node_json);
    fx_place_node_info bare = {.addr = "[::1]:5000", .internal = "h:1", .weight = 10000};
    EXPECT_ENC(fx_place_node_encode, &bare,
               "{\"addr\":\"[::1]:5000\",\"internal\":\"h:1\",\"weight\":10000,\"features\":0}");
    fx_place_owner o = {.node = "n1", .epoch = 7, .kind = FX_PLACE_MEM};
    EXPECT_ENC(fx_place_owner_encode, &o, "{\"node\":\"n1\",\"epoch\":7,\"kind\":\"mem\"}");
    fx_place_owner d = {.node = "n/é", .epoch = FX_PLACE_EPOCH_MAX, .kind = FX_PLACE_DUR};
    EXPECT_ENC(fx_place_owner_encode, &d,
               "{\"node\":\"n/é\",\"epoch\":16777215,\"kind\":\"durable\"}");
    fx_place_pin p = {.node = "n1"};
    EXPECT_ENC(fx_place_pin_encode, &p, "{\"node\":\"n1\"}");
    char *nolen = fx_place_pin_encode(&p, NULL); /* |plen| may be NULL */
    assert_non_null(nolen);
    free(nolen);

    /* Out of range: refused. */
    fx_place_node_info w0 = n, w1 = n, e0 = n;
    w0.weight = 0;
    w1.weight = FX_PLACE_WEIGHT_MAX + 1;
    e0.addr[0] = 0;
    assert_null(fx_place_node_encode(&w0, NULL));
    assert_null(fx_place_node_encode(&w1, NULL));
    assert_null(fx_place_node_encode(&e0, NULL));
    /* No broker-to-broker listener yet: "internal" is left out. */
    fx_place_node_info ni = n;
    ni.internal[0] = 0;
    char *noint = fx_place_node_encode(&ni, NULL);
    assert_non_null(noint);
    assert_null(strstr(noint, "internal"));
    free(noint);
    fx_place_node_info a0 = n, a1 = n, a2 = n, u8 = n;
    strcpy(a0.addr, "no-port");
    strcpy(a1.internal, "h:0");
    strcpy(a2.admin, "::1:80");
    strcpy(u8.server_name, "\xff");
    assert_null(fx_place_node_encode(&a0, NULL));
    assert_null(fx_place_node_encode(&a1, NULL));
    assert_null(fx_place_node_encode(&a2, NULL));
    assert_null(fx_place_node_encode(&u8, NULL));
    fx_place_owner oe = o, ok = o, on = o;
    oe.epoch = 0;
    ok.kind = (fx_place_owner_kind)2;
    on.node[0] = 0;
    assert_null(fx_place_owner_encode(&oe, NULL));
    assert_null(fx_place_owner_encode(&ok, NULL));
    assert_null(fx_place_owner_encode(&on, NULL));
    oe.epoch = FX_PLACE_EPOCH_MAX + 1;
    assert_null(fx_place_owner_encode(&oe, NULL));
    fx_place_pin pe = {.node = ""};
    assert_null(fx_place_pin_encode(&pe, NULL));
}

static void test_values_decode_what_they_encode(void **state)
{
    char err[FX_PLACE_ERR_MAX];
    fx_place_node_info n;
    assert_int_equal(fx_place_node_decode(node_json, strlen(node_json), &n, err, sizeof err), 0);
    assert_string_equal(n.addr, "127.0.0.1:5000");
    assert_string_equal(n.internal, "127.0.0.1:5100");
    assert_string_equal(n.server_name, "localhost");
    assert_int_equal(n.weight, 100);
    assert_int_equal(n.features, 3);
    assert_string_equal(n.admin, "127.0.0.1:8080");
    /* Defaults, and unknown fields ignored. */
    const char *min = "{\"internal\":\"h:2\",\"pin\":true,\"addr\":\"h:1\",\"future\":{\"x\":[1]}}";
    assert_int_equal(fx_place_node_decode(min, strlen(min), &n, err, sizeof err), 0);
    assert_int_equal(n.weight, FX_PLACE_WEIGHT_DEFAULT);
    assert_int_equal(n.features, 0);
    assert_string_equal(n.server_name, "");
    assert_string_equal(n.admin, "");
    size_t len;
    char *s = fx_place_node_encode(&n, &len);
    assert_string_equal(s, "{\"addr\":\"h:1\",\"internal\":\"h:2\",\"weight\":100,\"features\":0}");
    free(s);

    fx_place_owner o;
    const char *oj = "{\"kind\":\"durable\",\"epoch\":3,\"node\":\"n2\",\"extra\":1}";
    assert_int_equal(fx_place_owner_decode(oj, strlen(oj), &o, err, sizeof err), 0);
    assert_string_equal(o.node, "n2");
    assert_int_equal(o.epoch, 3);
    assert_int_equal(o.kind, FX_PLACE_DUR);
    fx_place_pin p;
    const char *pj = "{\"node\":\"n1\"}";
    assert_int_equal(fx_place_pin_decode(pj, strlen(pj), &p, err, sizeof err), 0);
    assert_string_equal(p.node, "n1");
    /* |len| bounds the bytes read, and |err| may be absent. */
    assert_int_equal(fx_place_pin_decode("{\"node\":\"n1\"}xyz", 13, &p, NULL, 0), 0);
}

typedef struct bad_value {
    const char *json;
    const char *err;
} bad_value;

#define NODE_OK "\"addr\":\"h:1\",\"internal\":\"h:2\""

static void test_node_value_refuses_each_bad_field(void **state)
{
    static const bad_value bad[] = {
        {"", "value: not JSON"},
        {"[1]", "value: must be a JSON object"},
        {"{\"internal\":\"h:2\"}", "addr: missing"},
        {"{\"addr\":5,\"internal\":\"h:2\"}", "addr: must be a string"},
        {"{\"addr\":\"\",\"internal\":\"h:2\"}", "addr: must be 1 to 128 bytes without NUL"},
        {"{\"addr\":\"h\",\"internal\":\"h:2\"}", "addr: must be host:port"},
        {"{\"addr\":\"h:0\",\"internal\":\"h:2\"}", "addr: must be host:port"},
        {"{\"addr\":\"h:65536\",\"internal\":\"h:2\"}", "addr: must be host:port"},
        {"{\"addr\":\"::1:5\",\"internal\":\"h:2\"}", "addr: must be host:port"},
        {"{\"addr\":\"h:1\",\"internal\":\"h\"}", "internal: must be host:port"},
        {"{\"addr\":\"h\\u0000:1\",\"internal\":\"h:2\"}", "value: not JSON"},
        {"{" NODE_OK ",\"server_name\":1}", "server_name: must be a string"},
        {"{" NODE_OK ",\"server_name\":\"\"}", "server_name: must be 1 to 255 bytes"},
        {"{" NODE_OK ",\"weight\":0}", "weight: must be an integer from 1 to 10000"},
        {"{" NODE_OK ",\"weight\":10001}", "weight: must be an integer from 1 to 10000"},
        {"{" NODE_OK ",\"weight\":-5}", "weight: must be an integer from 1 to 10000"},
        {"{" NODE_OK ",\"weight\":1.5}", "weight: must be an integer from 1 to 10000"},
        {"{" NODE_OK ",\"weight\":\"100\"}", "weight: must be an integer from 1 to 10000"},
        {"{" NODE_OK ",\"features\":-1}", "features: must be an integer from 0 to 4294967295"},
        {"{" NODE_OK ",\"features\":4294967296}", "features: must be an integer from 0 to"},
        {"{" NODE_OK ",\"features\":null}", "features: must be an integer"},
        {"{" NODE_OK ",\"admin\":\"nope\"}", "admin: must be host:port"},
        {"{" NODE_OK ",\"admin\":[]}", "admin: must be a string"},
        {"{" NODE_OK ",\"addr\":\"h:3\"}", "value: not JSON"}, /* a duplicate key */
        {"{" NODE_OK "} x", "value: not JSON"},
    };
    char err[FX_PLACE_ERR_MAX];
    fx_place_node_info n;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rv = fx_place_node_decode(bad[i].json, strlen(bad[i].json), &n, err, sizeof err);
        if (rv != FX_EPROTO || strncmp(err, bad[i].err, strlen(bad[i].err)) != 0)
            fail_msg("%s: rv %d, err \"%s\", want \"%s\"", bad[i].json, rv, err, bad[i].err);
    }
    /* An address of 129 bytes. */
    char big[300];
    snprintf(big, sizeof big, "{\"addr\":\"%0127d:1\",\"internal\":\"h:2\"}", 0);
    assert_int_equal(fx_place_node_decode(big, strlen(big), &n, err, sizeof err), FX_EPROTO);
    assert_string_equal(err, "addr: must be 1 to 128 bytes without NUL");
    /* A small error buffer is cut, still terminated. */
    char tiny[6];
    assert_int_equal(fx_place_node_decode("{}", 2, &n, tiny, sizeof tiny), FX_EPROTO);
    assert_string_equal(tiny, "addr:");
    assert_int_equal(fx_place_node_decode(NULL, 0, &n, err, sizeof err), FX_EPROTO);
}

static void test_owner_and_pin_values_refuse_each_bad_field(void **state)
{
    static const bad_value bad_owner[] = {
        {"{\"epoch\":1,\"kind\":\"mem\"}", "node: missing"},
        {"{\"node\":\"\",\"epoch\":1,\"kind\":\"mem\"}", "node: must be 1 to 64 bytes without NUL"},
        {"{\"node\":\"n12345678901234567890123456789012345678901234567890123456789012345\","
         "\"epoch\":1,\"kind\":\"mem\"}",
         "node: must be 1 to 64 bytes"},
        {"{\"node\":true,\"epoch\":1,\"kind\":\"mem\"}", "node: must be a string"},
        {"{\"node\":\"n1\",\"kind\":\"mem\"}", "epoch: missing"},
        {"{\"node\":\"n1\",\"epoch\":0,\"kind\":\"mem\"}",
         "epoch: must be an integer from 1 to 16777215"},
        {"{\"node\":\"n1\",\"epoch\":16777216,\"kind\":\"mem\"}",
         "epoch: must be an integer from 1"},
        {"{\"node\":\"n1\",\"epoch\":\"7\",\"kind\":\"mem\"}", "epoch: must be an integer"},
        {"{\"node\":\"n1\",\"epoch\":1}", "kind: missing"},
        {"{\"node\":\"n1\",\"epoch\":1,\"kind\":\"disk\"}", "kind: must be \"mem\" or \"durable\""},
        {"{\"node\":\"n1\",\"epoch\":1,\"kind\":\"MEM\"}", "kind: must be \"mem\" or \"durable\""},
        {"{\"node\":\"n1\",\"epoch\":1,\"kind\":1}", "kind: must be \"mem\" or \"durable\""},
        {"\"n1\"", "value: must be a JSON object"},
    };
    char err[FX_PLACE_ERR_MAX];
    fx_place_owner o;
    for (size_t i = 0; i < sizeof bad_owner / sizeof bad_owner[0]; i++) {
        const bad_value *b = &bad_owner[i];
        int rv = fx_place_owner_decode(b->json, strlen(b->json), &o, err, sizeof err);
        if (rv != FX_EPROTO || strncmp(err, b->err, strlen(b->err)) != 0)
            fail_msg("%s: rv %d, err \"%s\", want \"%s\"", b->json, rv, err, b->err);
    }
    static const bad_value bad_pin[] = {
        {"{}", "node: missing"},
        {"{\"node\":null}", "node: must be a string"},
        {"{\"node\":\"\"}", "node: must be 1 to 64 bytes"},
        {"", "value: not JSON"},
        {"{\"node\":\"n1\",\"node\":\"n2\"}", "value: not JSON"},
    };
    fx_place_pin p;
    for (size_t i = 0; i < sizeof bad_pin / sizeof bad_pin[0]; i++) {
        const bad_value *b = &bad_pin[i];
        int rv = fx_place_pin_decode(b->json, strlen(b->json), &p, err, sizeof err);
        if (rv != FX_EPROTO || strncmp(err, b->err, strlen(b->err)) != 0)
            fail_msg("%s: rv %d, err \"%s\", want \"%s\"", b->json, rv, err, b->err);
    }
}

/* ---- hashing and placement ------------------------------------------------ */

static void test_hash_is_siphash_under_a_fixed_key(void **state)
{
    /* SipHash-2-4's published vectors: key 00..0f, message 00..(n-1). */
    unsigned char key[16], msg[64];
    for (int i = 0; i < 16; i++)
        key[i] = (unsigned char)i;
    for (int i = 0; i < 64; i++)
        msg[i] = (unsigned char)i;
    assert_true(fx_place_siphash(key, msg, 0) == 0x726fdb47dd0e0e31ull);
    assert_true(fx_place_siphash(key, msg, 1) == 0x74f839c593dc67fdull);
    assert_true(fx_place_siphash(key, msg, 7) == 0xab0200f58b01d137ull);
    assert_true(fx_place_siphash(key, msg, 8) == 0x93f5f5799a932462ull);
    assert_true(fx_place_siphash(key, msg, 15) == 0xa129ca6149be45e5ull);
    assert_true(fx_place_siphash(key, msg, 63) == 0x958a324ceb064572ull);
    /* Pinned: a change here moves every stream of every cluster. */
    assert_true(fx_place_hash("n1", "t/ns/s", 6) == 0xac5ff67dc3e11f8cull);
    /* The id's length is hashed, so ("n1", "2x") and ("n12", "x") differ. */
    assert_true(fx_place_hash("n1", "2x", 2) != fx_place_hash("n12", "x", 1));
    double s = fx_place_score("n1", "t/ns/s", 6, 100);
    assert_true(s > 0 && isfinite(s));
    assert_true(fx_place_score("n1", "t/ns/s", 6, 200) == 2 * s);
}

static size_t stream_key(char *k, size_t cap, size_t i)
{
    char name[32];
    snprintf(name, sizeof name, "s%zu", i);
    int n = fx_place_stream_key(k, cap, "t", "ns", name);
    assert_true(n > 0);
    return (size_t)n;
}

static void test_order_is_deterministic_whatever_the_node_order(void **state)
{
    fx_place_node a[5] = {{"n1", 100, 0, true},
                          {"n2", 100, 0, true},
                          {"n3", 300, 0, true},
                          {"down", 100, 0, false},
                          {"n4", 50, 0, true}};
    fx_place_node b[5] = {a[4], a[2], a[3], a[0], a[1]}; /* the same, permuted */
    for (size_t i = 0; i < 2000; i++) {
        char k[FX_PLACE_KEY_MAX];
        size_t kl = stream_key(k, sizeof k, i);
        size_t oa[5], oa2[5], ob[5];
        assert_int_equal(fx_place_order(a, 5, k, kl, oa), 4);
        assert_int_equal(fx_place_order(a, 5, k, kl, oa2), 4);
        assert_int_equal(fx_place_order(b, 5, k, kl, ob), 4);
        for (size_t j = 0; j < 4; j++) {
            assert_int_equal(oa[j], oa2[j]);
            assert_string_equal(a[oa[j]].id, b[ob[j]].id);
            assert_string_not_equal(a[oa[j]].id, "down");
        }
        for (size_t j = 1; j < 4; j++)
            assert_true(fx_place_score(a[oa[j - 1]].id, k, kl, a[oa[j - 1]].weight) >=
                        fx_place_score(a[oa[j]].id, k, kl, a[oa[j]].weight));
        /* With every owned count 0, pick is the head of the order. */
        assert_int_equal(fx_place_pick(a, 5, k, kl, 0, 1.25), (ssize_t)oa[0]);
    }
    size_t o[1];
    fx_place_node none[2] = {{"n1", 100, 0, false}, {"n2", 100, 0, false}};
    assert_int_equal(fx_place_order(none, 2, "k", 1, o), 0);
    assert_int_equal(fx_place_pick(none, 2, "k", 1, 0, 1.25), -1);
    assert_int_equal(fx_place_pick(NULL, 0, "k", 1, 0, 1.25), -1);
    fx_place_node noid[1] = {{NULL, 100, 0, true}};
    assert_int_equal(fx_place_order(noid, 1, "k", 1, o), -EINVAL);
    assert_int_equal(fx_place_pick(noid, 1, "k", 1, 0, 1.25), -EINVAL);
    assert_int_equal(fx_place_order(a, FX_PLACE_MAX_NODES + 1, "k", 1, o), -EINVAL);
}

static void test_weight_200_gets_twice_the_keys_of_weight_100(void **state)
{
    fx_place_node nodes[3] = {{"heavy", 200, 0, true}, {"n2", 100, 0, true}, {"n3", 100, 0, true}};
    size_t got[3] = {0};
    for (size_t i = 0; i < 30000; i++) {
        char k[FX_PLACE_KEY_MAX];
        size_t kl = stream_key(k, sizeof k, i), o[3];
        assert_int_equal(fx_place_order(nodes, 3, k, kl, o), 3);
        got[o[0]]++;
    }
    /* Expected 15,000 / 7,500 / 7,500. */
    for (int j = 1; j < 3; j++) {
        double r = (double)got[0] / (double)got[j];
        print_message("heavy/%s = %zu/%zu = %.3f\n", nodes[j].id, got[0], got[j], r);
        assert_true(r > 1.8 && r < 2.2);
    }
}

static void test_cap_is_ceil_of_factor_times_average(void **state)
{
    assert_int_equal(fx_place_cap(0, 3, 1.25), 1);  /* ceil(1.25 / 3) */
    assert_int_equal(fx_place_cap(2, 3, 1.25), 2);  /* ceil(3.75 / 3) */
    assert_int_equal(fx_place_cap(11, 3, 1.25), 5); /* 15 / 3, exactly */
    assert_int_equal(fx_place_cap(12, 3, 1.25), 6); /* ceil(16.25 / 3) */
    assert_int_equal(fx_place_cap(99, 3, 1.25), 42);
    assert_int_equal(fx_place_cap(9999, 3, 1.25), 4167);
    assert_int_equal(fx_place_cap(9, 10, 1.0), 1);
    assert_int_equal(fx_place_cap(9, 10, 0.5), 1); /* below 1 counts as 1 */
    assert_int_equal(fx_place_cap(9, 10, NAN), 1);
    assert_int_equal(fx_place_cap(5, 0, 1.25), 0);
    assert_int_equal(fx_place_cap(1000, 1, 2.0), 2002);
    assert_true(fx_place_cap(SIZE_MAX - 1, 1, 1e9) == SIZE_MAX);
}

/* Places |n| streams over |nodes| with fx_place_pick, counting as it goes;
 * returns the largest count. */
static size_t place_all(fx_place_node *nodes, size_t nn, size_t n, double factor)
{
    for (size_t j = 0; j < nn; j++)
        nodes[j].owned = 0;
    for (size_t i = 0; i < n; i++) {
        char k[FX_PLACE_KEY_MAX];
        size_t kl = stream_key(k, sizeof k, i);
        ssize_t p = fx_place_pick(nodes, nn, k, kl, i, factor);
        assert_true(p >= 0 && (size_t)p < nn);
        assert_true(nodes[p].up);
        nodes[p].owned++;
    }
    size_t max = 0;
    for (size_t j = 0; j < nn; j++)
        max = nodes[j].owned > max ? nodes[j].owned : max;
    return max;
}

static void test_bounded_pick_keeps_every_node_under_the_cap(void **state)
{
    static const size_t ns[] = {100, 1000, 10000};
    fx_place_node nodes[3] = {{"n1", 100, 0, true}, {"n2", 100, 0, true}, {"n3", 100, 0, true}};
    for (size_t t = 0; t < 3; t++) {
        size_t n = ns[t];
        size_t bound = (size_t)ceil(1.25 * (double)n / 3.0);
        size_t max = place_all(nodes, 3, n, 1.25);
        print_message("N=%zu: %zu/%zu/%zu, max %zu <= %zu\n", n, nodes[0].owned, nodes[1].owned,
                      nodes[2].owned, max, bound);
        assert_true(max <= bound);
        assert_int_equal(nodes[0].owned + nodes[1].owned + nodes[2].owned, n);
    }
    /* Weights still bias the pick, under the same cap. */
    nodes[0].weight = 1000;
    size_t max = place_all(nodes, 3, 1000, 1.25);
    assert_true(max <= 417);
    assert_int_equal(nodes[0].owned, max);
    /* A node down owns nothing new; the others share under the cap of 2. */
    nodes[0].weight = 100;
    nodes[1].up = false;
    max = place_all(nodes, 3, 1000, 1.25);
    assert_int_equal(nodes[1].owned, 0);
    assert_true(max <= 625);
}

static void test_pick_falls_back_to_the_least_loaded_when_all_are_full(void **state)
{
    /* Counts that add up to more than |placed| (a stale view): no node is
     * below the cap, so the least loaded is picked rather than none. */
    fx_place_node nodes[3] = {{"n1", 100, 50, true}, {"n2", 100, 7, true}, {"n3", 100, 30, true}};
    assert_int_equal(fx_place_pick(nodes, 3, "t/ns/s", 6, 0, 1.25), 1);
}

static void test_fourth_node_takes_a_quarter_with_plain_hrw(void **state)
{
    fx_place_node nodes[4] = {
        {"n1", 100, 0, true}, {"n2", 100, 0, true}, {"n3", 100, 0, true}, {"n4", 100, 0, true}};
    const size_t n = 10000;
    size_t moved = 0;
    for (size_t i = 0; i < n; i++) {
        char k[FX_PLACE_KEY_MAX];
        size_t kl = stream_key(k, sizeof k, i), o3[4], o4[4];
        assert_int_equal(fx_place_order(nodes, 3, k, kl, o3), 3);
        assert_int_equal(fx_place_order(nodes, 4, k, kl, o4), 4);
        if (o3[0] != o4[0]) {
            assert_int_equal(o4[0], 3); /* a key only ever moves to the new node */
            moved++;
        }
    }
    double share = (double)moved / (double)n;
    print_message("4th node joining moves %.2f %% of %zu keys\n", 100 * share, n);
    assert_true(share <= 1.1 * 0.25);
    assert_true(share >= 0.9 * 0.25);
}

/* Three nodes claim concurrently: each picker computes the candidate from its
 * own, possibly stale, view of the counts; the candidate node knows its own
 * count exactly and refuses a claim that would pass its cap, and the picker
 * passes the claim to the next in the order. The bound holds whatever the
 * interleaving. */
static void test_concurrent_pickers_respect_the_cap_by_refusing(void **state)
{
    static const size_t ns[] = {100, 1000, 10000};
    /* Equal weights, and n1 ten times heavier: plain HRW would give it 5/6
     * of the streams, so its refusals do the bounding. */
    static const uint32_t weights[2][3] = {{100, 100, 100}, {1000, 100, 100}};
    const char *ids[3] = {"n1", "n2", "n3"};
    for (size_t w = 0; w < 2; w++) {
        for (size_t t = 0; t < 3; t++) {
            const size_t n = ns[t];
            size_t owned[3] = {0};    /* the truth: each node knows its own */
            fx_place_node view[3][3]; /* each picker's view, refreshed now and then */
            for (int p = 0; p < 3; p++)
                for (int j = 0; j < 3; j++)
                    view[p][j] = (fx_place_node){ids[j], weights[w][j], 0, true};
            size_t placed = 0, refused = 0;
            uint64_t rng = 0x9e3779b97f4a7c15ull;
            for (size_t i = 0; i < n; i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                int p = (int)((rng >> 33) % 3); /* the node the client asked */
                if ((rng >> 40) % 16 == 0)      /* the watch lags */
                    for (int j = 0; j < 3; j++)
                        view[p][j].owned = owned[j];
                char k[FX_PLACE_KEY_MAX];
                size_t kl = stream_key(k, sizeof k, i), order[3];
                assert_int_equal(fx_place_order(view[p], 3, k, kl, order), 3);
                /* The picker's candidate comes from its stale view; each
                 * claimant checks its true count against the cap of the true
                 * placed count (which the claim reads from etcd). */
                size_t vplaced = view[p][0].owned + view[p][1].owned + view[p][2].owned;
                ssize_t first = fx_place_pick(view[p], 3, k, kl, vplaced, 1.25);
                assert_true(first >= 0);
                int c0 = 0;
                while (order[c0] != (size_t)first)
                    c0++;
                size_t cap = fx_place_cap(placed, 3, 1.25);
                bool won = false;
                for (int c = 0; c < 3 && !won; c++) {
                    size_t j = order[(c0 + c) % 3];
                    if (owned[j] >= cap) {
                        refused++; /* "refused_cap": the picker tries the next */
                        continue;
                    }
                    owned[j]++;
                    won = true;
                }
                assert_true(won);
                placed++;
            }
            size_t bound = (size_t)ceil(1.25 * (double)n / 3.0);
            size_t max = owned[0] > owned[1] ? owned[0] : owned[1];
            max = owned[2] > max ? owned[2] : max;
            print_message("weights %u/%u/%u N=%zu concurrent: %zu/%zu/%zu (max %zu <= %zu), "
                          "%zu refusals\n",
                          weights[w][0], weights[w][1], weights[w][2], n, owned[0], owned[1],
                          owned[2], max, bound, refused);
            assert_true(max <= bound);
            if (w == 1) { /* the heavy node is the fullest, held back by refusals */
                assert_int_equal(owned[0], max);
                assert_true(refused > 0);
            }
        }
    }
}

static void test_handoff_value_round_trips_and_refuses_bad_fields(void **state)
{
    (void)state;
    fx_place_handoff h = {.to = "n2", .epoch = 7, .final_tail = (7ull << 40) | 1234};
    EXPECT_ENC(fx_place_handoff_encode, &h,
               "{\"to\":\"n2\",\"epoch\":7,\"final_tail\":7696581395666}");
    fx_place_handoff d;
    char err[FX_PLACE_ERR_MAX];
    const char *j = "{\"final_tail\":5,\"to\":\"n3\",\"epoch\":1,\"later\":true}";
    assert_int_equal(fx_place_handoff_decode(j, strlen(j), &d, err, sizeof err), 0);
    assert_string_equal(d.to, "n3");
    assert_int_equal(d.epoch, 1);
    assert_int_equal(d.final_tail, 5);
    const char *bad[] = {"{\"to\":\"n3\",\"epoch\":1}", "{\"to\":\"n3\",\"epoch\":0,\"final_tail\":1}",
                         "{\"epoch\":1,\"final_tail\":1}",
                         "{\"to\":\"n3\",\"epoch\":1,\"final_tail\":-1}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(fx_place_handoff_decode(bad[i], strlen(bad[i]), &d, err, sizeof err),
                         FX_EPROTO);
    fx_place_handoff z = {.to = "", .epoch = 1};
    assert_null(fx_place_handoff_encode(&z, NULL));
}

/* The plan of one node's moves: each stream goes to the first node before
 * this one in its order that is under the cap, counting planned moves. */
static void test_rebalance_plan_moves_up_the_order_within_the_cap(void **state)
{
    (void)state;
    enum { N = 60 };
    char keys[N][FX_PLACE_KEY_MAX];
    const void *kp[N];
    size_t kl[N];
    for (size_t i = 0; i < N; i++) {
        kl[i] = stream_key(keys[i], sizeof keys[i], i);
        kp[i] = keys[i];
    }
    /* n1 owns all 60 (the others joined later). */
    fx_place_node nodes[3] = {{"n1", 100, N, true}, {"n2", 100, 0, true}, {"n3", 100, 0, true}};
    ssize_t to[N], again[N];
    ssize_t moves = fx_place_plan_moves(nodes, 3, 0, kp, kl, N, N, 1.25, to);
    assert_true(moves > 0);
    size_t cap = fx_place_cap(N - 1, 3, 1.25), got[3] = {N, 0, 0};
    for (size_t i = 0; i < N; i++) {
        size_t order[3];
        assert_int_equal(fx_place_order(nodes, 3, kp[i], kl[i], order), 3);
        if (to[i] < 0) {
            /* It stays: every node before n1 in its order was full. */
            for (size_t k = 0; order[k] != 0; k++)
                assert_true(got[order[k]] >= cap);
            continue;
        }
        assert_true(to[i] != 0);
        /* up the order: the destination comes before n1 */
        size_t pos_to = 0, pos_self = 0;
        for (size_t k = 0; k < 3; k++) {
            pos_to = order[k] == (size_t)to[i] ? k : pos_to;
            pos_self = order[k] == 0 ? k : pos_self;
        }
        assert_true(pos_to < pos_self);
        got[to[i]]++;
        got[0]--;
    }
    assert_true(got[1] <= cap && got[2] <= cap);
    /* Plain HRW would give n2 and n3 about a third each: the plan moves
     * about two thirds. */
    assert_true(got[1] + got[2] == (size_t)moves);
    assert_true(moves >= N / 2 && moves <= N);
    /* Deterministic, and no ping-pong: after the moves neither n2 nor n3
     * plans any of its new streams back to n1 (n1 comes after them). */
    assert_int_equal(fx_place_plan_moves(nodes, 3, 0, kp, kl, N, N, 1.25, again), moves);
    assert_memory_equal(again, to, sizeof to);
    fx_place_node after[3] = {{"n1", 100, got[0], true}, {"n2", 100, got[1], true},
                              {"n3", 100, got[2], true}};
    for (size_t self = 1; self < 3; self++) {
        const void *mine[N];
        size_t ml[N], nm = 0;
        for (size_t i = 0; i < N; i++)
            if (to[i] == (ssize_t)self) {
                mine[nm] = kp[i];
                ml[nm++] = kl[i];
            }
        ssize_t back[N];
        assert_true(fx_place_plan_moves(after, 3, self, mine, ml, nm, N, 1.25, back) >= 0);
        for (size_t i = 0; i < nm; i++)
            assert_true(back[i] != 0);
    }
    /* A node at its cap takes nothing; a down node nothing either. */
    size_t cap2 = fx_place_cap(N - 1, 2, 1.25); /* two nodes up */
    fx_place_node full[3] = {{"n1", 100, N, true}, {"n2", 100, cap2, true}, {"n3", 100, 0, false}};
    assert_int_equal(fx_place_plan_moves(full, 3, 0, kp, kl, N, N, 1.25, to), 0);
    assert_int_equal(fx_place_plan_moves(full, 3, 2, kp, kl, N, N, 1.25, to), -EINVAL);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_keys_are_named_under_the_cluster),
    cmocka_unit_test(test_components_are_percent_encoded),
    cmocka_unit_test(test_key_refuses_bad_arguments),
    cmocka_unit_test(test_keys_round_trip_hostile_names),
    cmocka_unit_test(test_key_parse_refuses_what_the_encoder_never_writes),
    cmocka_unit_test(test_values_encode_to_exact_bytes),
    cmocka_unit_test(test_values_decode_what_they_encode),
    cmocka_unit_test(test_node_value_refuses_each_bad_field),
    cmocka_unit_test(test_owner_and_pin_values_refuse_each_bad_field),
    cmocka_unit_test(test_hash_is_siphash_under_a_fixed_key),
    cmocka_unit_test(test_order_is_deterministic_whatever_the_node_order),
    cmocka_unit_test(test_weight_200_gets_twice_the_keys_of_weight_100),
    cmocka_unit_test(test_cap_is_ceil_of_factor_times_average),
    cmocka_unit_test(test_bounded_pick_keeps_every_node_under_the_cap),
    cmocka_unit_test(test_pick_falls_back_to_the_least_loaded_when_all_are_full),
    cmocka_unit_test(test_fourth_node_takes_a_quarter_with_plain_hrw),
    cmocka_unit_test(test_concurrent_pickers_respect_the_cap_by_refusing),
    cmocka_unit_test(test_handoff_value_round_trips_and_refuses_bad_fields),
    cmocka_unit_test(test_rebalance_plan_moves_up_the_order_within_the_cap),
};

FX_TEST_MAIN(tests)
