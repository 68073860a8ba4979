/* fx_etcd's codec against the bytes etcd 3.4.23's JSON gateway sent and
 * accepted (design/cluster.md section 1): base64 keys and values, int64
 * strings, omitted zero fields, both error shapes, a lost lease's keepalive,
 * the watch stream split at every byte, and compaction. */
/* fx-test-libs: fx_cluster fx_wire fx_base */
#include <stdlib.h>
#include <string.h>

#include "cluster/etcd.h"
#include "felix/error.h"
#include "fx_test.h"

#define HDR "\"header\":{\"cluster_id\":\"324952591200643719\",\"member_id\":\"3319814642761637952\","
#define HDR_REV(r) HDR "\"revision\":\"" r "\",\"raft_term\":\"2\"}"

static void expect_str(char *got, const char *want)
{
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}

static void test_put_encodes_base64_key_and_value(void **state)
{
    fx_etcd_op op = {.kind = FX_ETCD_PUT, .key = "foo", .value = "bar"};
    expect_str(fx_etcd_encode_op(&op), "{\"key\":\"Zm9v\",\"value\":\"YmFy\"}");
}

static void test_zero_fields_are_left_out(void **state)
{
    /* No value, no lease, no prev_kv: only the key goes. */
    fx_etcd_op put = {.kind = FX_ETCD_PUT, .key = "foo"};
    expect_str(fx_etcd_encode_op(&put), "{\"key\":\"Zm9v\"}");
    fx_etcd_op range = {.kind = FX_ETCD_RANGE, .key = "nosuchkey"};
    expect_str(fx_etcd_encode_op(&range), "{\"key\":\"bm9zdWNoa2V5\"}");
}

static void test_prefix_range_uses_last_byte_plus_one(void **state)
{
    fx_etcd_op op = {.kind = FX_ETCD_RANGE, .key = "/felix/", .prefix = true, .keys_only = true};
    expect_str(fx_etcd_encode_op(&op),
               "{\"key\":\"L2ZlbGl4Lw==\",\"range_end\":\"L2ZlbGl4MA==\",\"keys_only\":true}");
    /* int64 fields go as strings, as the gateway writes them (it takes both). */
    op.limit = 1;
    expect_str(fx_etcd_encode_op(&op), "{\"key\":\"L2ZlbGl4Lw==\",\"range_end\":\"L2ZlbGl4MA==\","
                                       "\"limit\":\"1\",\"keys_only\":true}");
    uint8_t end[4];
    assert_int_equal(fx_etcd_prefix_end("a\xff", 2, end, sizeof(end)), 1);
    assert_int_equal(end[0], 'b');
    assert_int_equal(fx_etcd_prefix_end("\xff\xff", 2, end, sizeof(end)), 1);
    assert_int_equal(end[0], 0);
}

static void test_claim_txn_matches_the_gateway_bytes(void **state)
{
    const char *ow = "/felix/c1/streams/t1/default/s1";
    fx_etcd_cmp cmp = {.key = ow, .target = FX_ETCD_CMP_CREATE, .result = FX_ETCD_EQUAL, .number = 0};
    fx_etcd_op ok = {.kind = FX_ETCD_PUT, .key = ow, .value = "{\"node\":\"n1\",\"epoch\":1}",
                     .lease = 7001};
    fx_etcd_op no = {.kind = FX_ETCD_RANGE, .key = ow};
    fx_etcd_txn_req t = {.cmp = &cmp, .n_cmp = 1, .success = &ok, .n_success = 1, .failure = &no,
                         .n_failure = 1};
    expect_str(fx_etcd_encode_txn(&t),
               "{\"compare\":[{\"key\":\"L2ZlbGl4L2MxL3N0cmVhbXMvdDEvZGVmYXVsdC9zMQ==\",\"target\":"
               "\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}],"
               "\"success\":[{\"request_put\":{\"key\":\"L2ZlbGl4L2MxL3N0cmVhbXMvdDEvZGVmYXVsdC9zMQ==\","
               "\"value\":\"eyJub2RlIjoibjEiLCJlcG9jaCI6MX0=\",\"lease\":\"7001\"}}],"
               "\"failure\":[{\"request_range\":{\"key\":"
               "\"L2ZlbGl4L2MxL3N0cmVhbXMvdDEvZGVmYXVsdC9zMQ==\"}}]}");
    /* The ownership guard: CREATE == R and LEASE == L; a delete op. */
    fx_etcd_cmp guard[2] = {
        {.key = ow, .target = FX_ETCD_CMP_CREATE, .number = 2},
        {.key = ow, .target = FX_ETCD_CMP_LEASE, .number = 6003},
    };
    fx_etcd_op del = {.kind = FX_ETCD_DELETE, .key = ow};
    fx_etcd_txn_req g = {.cmp = guard, .n_cmp = 2, .success = &del, .n_success = 1};
    char *s = fx_etcd_encode_txn(&g);
    assert_non_null(strstr(s, "\"target\":\"LEASE\",\"result\":\"EQUAL\",\"lease\":\"6003\""));
    assert_non_null(strstr(s, "\"success\":[{\"request_delete_range\":{\"key\":"));
    assert_null(strstr(s, "failure"));
    free(s);
    fx_etcd_cmp val = {.key = ow, .target = FX_ETCD_CMP_VALUE, .result = FX_ETCD_NOT_EQUAL,
                       .value = "x"};
    fx_etcd_txn_req v = {.cmp = &val, .n_cmp = 1};
    s = fx_etcd_encode_txn(&v);
    assert_non_null(strstr(s, "\"target\":\"VALUE\",\"result\":\"NOT_EQUAL\",\"value\":\"eA==\""));
    free(s);
}

static void test_range_answer_decodes(void **state)
{
    const char *b = "{" HDR_REV("2") ",\"kvs\":[{\"key\":\"Zm9v\",\"create_revision\":\"2\","
                    "\"mod_revision\":\"2\",\"version\":\"1\",\"value\":\"YmFy\"}],\"count\":\"1\"}";
    fx_etcd_resp r;
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_RANGE, 200, b, strlen(b), &r), 0);
    assert_int_equal(r.revision, 2);
    assert_int_equal(r.n_kvs, 1);
    assert_int_equal(r.count, 1);
    assert_false(r.more);
    assert_memory_equal(r.kvs[0].key, "foo", 4);
    assert_int_equal(r.kvs[0].key_len, 3);
    assert_memory_equal(r.kvs[0].value, "bar", 4);
    assert_int_equal(r.kvs[0].create_revision, 2);
    assert_int_equal(r.kvs[0].version, 1);
    assert_int_equal(r.kvs[0].lease, 0);
    fx_etcd_resp_clear(&r);
}

static void test_missing_fields_mean_zero(void **state)
{
    /* An empty range: no kvs, no count. */
    const char *b = "{" HDR_REV("2") "}";
    fx_etcd_resp r;
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_RANGE, 200, b, strlen(b), &r), 0);
    assert_int_equal(r.n_kvs, 0);
    assert_int_equal(r.count, 0);
    fx_etcd_resp_clear(&r);
    /* A key whose value is "" has no value field. */
    const char *c = "{" HDR_REV("3") ",\"kvs\":[{\"key\":\"Zm9v\",\"create_revision\":\"3\","
                    "\"mod_revision\":\"3\",\"version\":\"1\"}],\"more\":true,\"count\":\"4\"}";
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_RANGE, 200, c, strlen(c), &r), 0);
    assert_int_equal(r.kvs[0].value_len, 0);
    assert_non_null(r.kvs[0].value);
    assert_true(r.more);
    assert_int_equal(r.count, 4);
    fx_etcd_resp_clear(&r);
}

static void test_int64_fields_are_strings(void **state)
{
    fx_etcd_resp r;
    const char *max = "{" HDR_REV("9223372036854775807") "}";
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_RANGE, 200, max, strlen(max), &r), 0);
    assert_int_equal(r.revision, INT64_MAX);
    fx_etcd_resp_clear(&r);
    const char *num = "{\"header\":{\"revision\":7}}";
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_RANGE, 200, num, strlen(num), &r), 0);
    assert_int_equal(r.revision, 7);
    fx_etcd_resp_clear(&r);
    const char *bad[] = {"{\"header\":{\"revision\":\"12x\"}}", "{\"header\":{\"revision\":\"\"}}",
                         "{\"header\":{\"revision\":\"99999999999999999999\"}}",
                         "{\"header\":{\"revision\":true}}",
                         "{\"kvs\":[{\"key\":\"Zm9v!\"}]}", "{\"kvs\":[{\"key\":\"Zm9\"}]}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_RANGE, 200, bad[i], strlen(bad[i]), &r),
                         FX_EPROTO);
        fx_etcd_resp_clear(&r);
    }
}

static void test_txn_answers_decode(void **state)
{
    const char *won = "{" HDR_REV("4") ",\"succeeded\":true,\"responses\":[{\"response_put\":"
                      "{\"header\":{\"revision\":\"4\"}}},{\"response_range\":{\"header\":"
                      "{\"revision\":\"4\"},\"kvs\":[{\"key\":"
                      "\"L2ZlbGl4L2MxL2Vwb2Nocy90MS9kZWZhdWx0L3Mx\",\"create_revision\":\"2\","
                      "\"mod_revision\":\"4\",\"version\":\"2\"}],\"count\":\"1\"}}]}";
    fx_etcd_resp r;
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_TXN, 200, won, strlen(won), &r), 0);
    assert_true(r.succeeded);
    assert_int_equal(r.revision, 4);
    assert_int_equal(r.n_ops, 2);
    assert_int_equal(r.ops[0].kind, FX_ETCD_KIND_PUT);
    assert_int_equal(r.ops[1].kind, FX_ETCD_KIND_RANGE);
    assert_int_equal(r.ops[1].kvs[0].version, 2); /* the epoch */
    assert_string_equal((char *)r.ops[1].kvs[0].key, "/felix/c1/epochs/t1/default/s1");
    fx_etcd_resp_clear(&r);
    /* Lost: no "succeeded"; the failure branch's range shows the owner. */
    const char *lost = "{" HDR_REV("4") ",\"responses\":[{\"response_range\":{\"header\":"
                       "{\"revision\":\"4\"},\"kvs\":[{\"key\":"
                       "\"L2ZlbGl4L2MxL3N0cmVhbXMvdDEvZGVmYXVsdC9zMQ==\",\"create_revision\":\"4\","
                       "\"mod_revision\":\"4\",\"version\":\"1\",\"value\":"
                       "\"eyJub2RlIjoibjEiLCJlcG9jaCI6MX0=\",\"lease\":\"7001\"}],\"count\":\"1\"}}]}";
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_TXN, 200, lost, strlen(lost), &r), 0);
    assert_false(r.succeeded);
    assert_int_equal(r.n_ops, 1);
    assert_int_equal(r.ops[0].kvs[0].lease, 7001);
    assert_string_equal((char *)r.ops[0].kvs[0].value, "{\"node\":\"n1\",\"epoch\":1}");
    fx_etcd_resp_clear(&r);
    /* A failed guard with no failure ops: only the header. */
    const char *bare = "{" HDR_REV("4") "}";
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_TXN, 200, bare, strlen(bare), &r), 0);
    assert_false(r.succeeded);
    assert_int_equal(r.n_ops, 0);
    fx_etcd_resp_clear(&r);
    const char *del = "{" HDR_REV("3") ",\"succeeded\":true,\"responses\":[{\"response_delete_range\":"
                      "{\"header\":{\"revision\":\"3\"},\"deleted\":\"1\"}}]}";
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_TXN, 200, del, strlen(del), &r), 0);
    assert_int_equal(r.ops[0].kind, FX_ETCD_KIND_DELETE);
    assert_int_equal(r.ops[0].deleted, 1);
    fx_etcd_resp_clear(&r);
}

static void test_keepalive_without_ttl_is_a_lost_lease(void **state)
{
    fx_etcd_resp r;
    const char *live = "{\"result\":{" HDR_REV("7") ",\"ID\":\"7002\",\"TTL\":\"5\"}}\n";
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_LEASE_KEEPALIVE, 200, live, strlen(live), &r),
                     0);
    assert_int_equal(r.lease_id, 7002);
    assert_int_equal(r.ttl, 5);
    assert_false(r.lease_lost);
    fx_etcd_resp_clear(&r);
    /* HTTP 200, and no TTL at all: the lease is gone. */
    const char *gone = "{\"result\":{" HDR_REV("7") ",\"ID\":\"999999\"}}\n";
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_LEASE_KEEPALIVE, 200, gone, strlen(gone), &r),
                     0);
    assert_int_equal(r.lease_id, 999999);
    assert_true(r.lease_lost);
    fx_etcd_resp_clear(&r);
    const char *ttl = "{" HDR_REV("7") ",\"ID\":\"7002\",\"TTL\":\"4\",\"grantedTTL\":\"5\","
                      "\"keys\":[\"L2ZlbGl4L2MxL25vZGVzL24y\"]}";
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_LEASE_TTL, 200, ttl, strlen(ttl), &r), 0);
    assert_int_equal(r.ttl, 4);
    assert_int_equal(r.granted_ttl, 5);
    assert_int_equal(r.n_lease_keys, 1);
    assert_string_equal((char *)r.lease_keys[0].key, "/felix/c1/nodes/n2");
    assert_false(r.lease_lost);
    fx_etcd_resp_clear(&r);
    const char *dead = "{" HDR_REV("7") ",\"ID\":\"999999\",\"TTL\":\"-1\"}";
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_LEASE_TTL, 200, dead, strlen(dead), &r), 0);
    assert_true(r.lease_lost);
    fx_etcd_resp_clear(&r);
    const char *grant = "{" HDR_REV("7") ",\"ID\":\"2324035845042882060\",\"TTL\":\"2\"}";
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_LEASE_GRANT, 200, grant, strlen(grant), &r),
                     0);
    assert_int_equal(r.lease_id, 2324035845042882060);
    assert_int_equal(r.ttl, 2);
    fx_etcd_resp_clear(&r);
}

static void test_both_error_shapes_decode(void **state)
{
    fx_etcd_resp r;
    const char *unary = "{\"error\":\"etcdserver: requested lease not found\",\"message\":"
                        "\"etcdserver: requested lease not found\",\"code\":5}";
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_PUT, 404, unary, strlen(unary), &r),
                     FX_EREMOTE);
    assert_int_equal(r.grpc_code, 5);
    assert_int_equal(r.http_status, 404);
    assert_string_equal(r.message, "etcdserver: requested lease not found");
    fx_etcd_resp_clear(&r);
    const char *stream = "{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":"
                         "\"etcdserver: no leader\",\"http_status\":\"Service Unavailable\"}}\n";
    assert_int_equal(
        fx_etcd_decode_resp(FX_ETCD_KIND_LEASE_KEEPALIVE, 503, stream, strlen(stream), &r),
        FX_EREMOTE);
    assert_int_equal(r.grpc_code, 14);
    assert_string_equal(r.message, "etcdserver: no leader");
    fx_etcd_resp_clear(&r);
    const char *tok = "{\"error\":\"etcdserver: invalid auth token\",\"message\":"
                      "\"etcdserver: invalid auth token\",\"code\":16}";
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_RANGE, 401, tok, strlen(tok), &r),
                     FX_EREMOTE);
    assert_int_equal(r.grpc_code, 16);
    fx_etcd_resp_clear(&r);
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_RANGE, 405, "", 0, &r), FX_EREMOTE);
    fx_etcd_resp_clear(&r);
    assert_int_equal(fx_etcd_decode_resp(FX_ETCD_KIND_RANGE, 200, "{\"hea", 5, &r), FX_EPROTO);
    fx_etcd_resp_clear(&r);
}

/* The watch exchange of design 1.6, as the gateway streamed it. */
static const char watch_stream[] =
    "{\"result\":{" HDR_REV("14") ",\"created\":true}}\n"
    "{\"result\":{" HDR_REV("14") ",\"watch_id\":\"1\",\"created\":true}}\n"
    "{\"result\":{" HDR_REV("14") ",\"watch_id\":\"-1\"}}\n"
    "{\"result\":{" HDR_REV("14") ",\"watch_id\":\"1\",\"events\":["
    "{\"kv\":{\"key\":\"L2ZlbGl4L2MxL3N0cmVhbXMvdDEvZGVmYXVsdC9zMQ==\",\"create_revision\":\"4\","
    "\"mod_revision\":\"4\",\"version\":\"1\",\"value\":\"eyJub2RlIjoibjEiLCJlcG9jaCI6MX0=\","
    "\"lease\":\"7001\"}},"
    "{\"kv\":{\"key\":\"L2ZlbGl4L2MxL3N0cmVhbXMvdDEvZGVmYXVsdC9zMg==\",\"create_revision\":\"5\","
    "\"mod_revision\":\"5\",\"version\":\"1\",\"value\":\"eA==\"}},"
    "{\"kv\":{\"key\":\"L2ZlbGl4L2MxL3N0cmVhbXMvdDEvZGVmYXVsdC9zMw==\",\"create_revision\":\"6\","
    "\"mod_revision\":\"6\",\"version\":\"1\",\"value\":\"eQ==\"}},"
    "{\"type\":\"DELETE\",\"kv\":{\"key\":\"L2ZlbGl4L2MxL3N0cmVhbXMvdDEvZGVmYXVsdC9zMQ==\","
    "\"mod_revision\":\"7\"}}]}}\n"
    "{\"result\":{" HDR_REV("15") ",\"events\":[{\"kv\":{\"key\":\"L2ZlbGl4L2MxL25vZGVzL241\","
    "\"create_revision\":\"15\",\"mod_revision\":\"15\",\"version\":\"1\",\"value\":\"bjU=\"}}]}}\n"
    "{\"result\":{" HDR_REV("15") "}}\n";

typedef struct seen {
    char log[1024];
    size_t n;
} seen;

static int note_line(const char *line, size_t len, void *user)
{
    seen *s = user;
    fx_etcd_watch_msg m;
    int rv = fx_etcd_decode_watch_msg(line, len, &m);
    char *p = s->log + strlen(s->log);
    size_t room = sizeof(s->log) - strlen(s->log);
    if (rv != 0) {
        snprintf(p, room, "ERR%d;", rv);
    } else {
        int k = snprintf(p, room, "r%lld w%lld%s:", (long long)m.revision, (long long)m.watch_id,
                         m.created ? " created" : "");
        for (size_t i = 0; i < m.n_events; i++)
            k += snprintf(p + k, room - (size_t)k, "%s%s@%lld,", m.events[i].is_delete ? "D" : "P",
                          (char *)m.events[i].kv.key + 10, (long long)m.events[i].kv.mod_revision);
        snprintf(p + k, room - (size_t)k, ";");
    }
    fx_etcd_watch_msg_clear(&m);
    s->n++;
    return 0;
}

static const char *const watch_expect =
    "r14 w0 created:;r14 w1 created:;r14 w-1:;"
    "r14 w1:Pstreams/t1/default/s1@4,Pstreams/t1/default/s2@5,Pstreams/t1/default/s3@6,"
    "Dstreams/t1/default/s1@7,;"
    "r15 w0:Pnodes/n5@15,;r15 w0:;";

static void test_watch_stream_parses_at_every_split(void **state)
{
    size_t n = strlen(watch_stream);
    /* Two pieces, split at every byte. */
    for (size_t cut = 0; cut <= n; cut++) {
        fx_etcd_lines p;
        fx_etcd_lines_init(&p, 4096);
        seen s = {{0}, 0};
        assert_int_equal(fx_etcd_lines_feed(&p, watch_stream, cut, note_line, &s), 0);
        assert_int_equal(fx_etcd_lines_feed(&p, watch_stream + cut, n - cut, note_line, &s), 0);
        assert_string_equal(s.log, watch_expect);
        assert_int_equal(p.len, 0);
        fx_etcd_lines_deinit(&p);
    }
    /* Byte by byte, then pseudo-random chunk sizes. */
    for (size_t step = 1; step < 64; step += (step < 8 ? 1 : 13)) {
        fx_etcd_lines p;
        fx_etcd_lines_init(&p, 4096);
        seen s = {{0}, 0};
        uint32_t x = (uint32_t)step * 2654435761u;
        for (size_t off = 0; off < n;) {
            size_t k = step == 1 ? 1 : 1 + (x >> 16) % step;
            x = x * 1103515245u + 12345u;
            if (k > n - off)
                k = n - off;
            assert_int_equal(fx_etcd_lines_feed(&p, watch_stream + off, k, note_line, &s), 0);
            off += k;
        }
        assert_string_equal(s.log, watch_expect);
        fx_etcd_lines_deinit(&p);
    }
}

static void test_watch_line_over_the_cap_is_refused(void **state)
{
    fx_etcd_lines p;
    fx_etcd_lines_init(&p, 16);
    seen s = {{0}, 0};
    assert_int_equal(fx_etcd_lines_feed(&p, "0123456789", 10, note_line, &s), 0);
    assert_int_equal(fx_etcd_lines_feed(&p, "0123456789\n", 11, note_line, &s), FX_ETOOBIG);
    fx_etcd_lines_deinit(&p);
    fx_etcd_lines_init(&p, 16);
    assert_int_equal(fx_etcd_lines_feed(&p, "01234567890123456789\n", 21, note_line, &s),
                     FX_ETOOBIG);
    assert_int_equal(s.n, 0);
    fx_etcd_lines_deinit(&p);
}

static void test_watch_compaction_and_errors_decode(void **state)
{
    fx_etcd_watch_msg m;
    /* A compaction cancel has no header.revision. */
    const char *c = "{\"result\":{\"header\":{\"cluster_id\":\"324952591200643719\",\"member_id\":"
                    "\"3319814642761637952\",\"raft_term\":\"2\"},\"canceled\":true,"
                    "\"compact_revision\":\"10\"}}";
    assert_int_equal(fx_etcd_decode_watch_msg(c, strlen(c), &m), 0);
    assert_true(m.canceled);
    assert_int_equal(m.compact_revision, 10);
    assert_int_equal(m.revision, 0);
    fx_etcd_watch_msg_clear(&m);
    const char *e = "{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":"
                    "\"etcdserver: no leader\",\"http_status\":\"Service Unavailable\"}}";
    assert_int_equal(fx_etcd_decode_watch_msg(e, strlen(e), &m), FX_EREMOTE);
    assert_int_equal(m.grpc_code, 14);
    assert_string_equal(m.message, "etcdserver: no leader");
    fx_etcd_watch_msg_clear(&m);
    const char *d = "{\"result\":{\"header\":{\"revision\":\"5\"},\"watch_id\":\"-1\","
                    "\"created\":true,\"canceled\":true,\"cancel_reason\":\"rpc error: code = "
                    "PermissionDenied desc = etcdserver: permission denied\"}}";
    assert_int_equal(fx_etcd_decode_watch_msg(d, strlen(d), &m), 0);
    assert_true(m.canceled);
    assert_int_equal(m.compact_revision, 0);
    assert_non_null(strstr(m.message, "permission denied"));
    fx_etcd_watch_msg_clear(&m);
    const char *p = "{\"result\":{\"header\":{\"revision\":\"12\"},\"events\":[{\"type\":\"DELETE\","
                    "\"kv\":{\"key\":\"Zm9v\",\"mod_revision\":\"12\"},\"prev_kv\":{\"key\":\"Zm9v\","
                    "\"create_revision\":\"9\",\"mod_revision\":\"9\",\"version\":\"1\","
                    "\"lease\":\"7001\"}}]}}";
    assert_int_equal(fx_etcd_decode_watch_msg(p, strlen(p), &m), 0);
    assert_true(m.events[0].is_delete);
    assert_true(m.events[0].has_prev);
    assert_int_equal(m.events[0].prev_kv.lease, 7001);
    fx_etcd_watch_msg_clear(&m);
    const char *bad = "{\"result\":{\"events\":[{\"type\":\"BOGUS\",\"kv\":{\"key\":\"Zm9v\"}}]}}";
    assert_int_equal(fx_etcd_decode_watch_msg(bad, strlen(bad), &m), FX_EPROTO);
    fx_etcd_watch_msg_clear(&m);
    fx_etcd_watch_opts o = {.key = "/felix/c1/nodes/", .prefix = true, .progress_notify = true};
    expect_str(fx_etcd_encode_watch_create(&o),
               "{\"create_request\":{\"key\":\"L2ZlbGl4L2MxL25vZGVzLw==\",\"range_end\":"
               "\"L2ZlbGl4L2MxL25vZGVzMA==\",\"progress_notify\":true}}");
    fx_etcd_watch_opts s = {.key = "/felix/c1/streams/", .prefix = true, .start_revision = 4};
    expect_str(fx_etcd_encode_watch_create(&s),
               "{\"create_request\":{\"key\":\"L2ZlbGl4L2MxL3N0cmVhbXMv\",\"range_end\":"
               "\"L2ZlbGl4L2MxL3N0cmVhbXMw\",\"start_revision\":\"4\"}}");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_put_encodes_base64_key_and_value),
    cmocka_unit_test(test_zero_fields_are_left_out),
    cmocka_unit_test(test_prefix_range_uses_last_byte_plus_one),
    cmocka_unit_test(test_claim_txn_matches_the_gateway_bytes),
    cmocka_unit_test(test_range_answer_decodes),
    cmocka_unit_test(test_missing_fields_mean_zero),
    cmocka_unit_test(test_int64_fields_are_strings),
    cmocka_unit_test(test_txn_answers_decode),
    cmocka_unit_test(test_keepalive_without_ttl_is_a_lost_lease),
    cmocka_unit_test(test_both_error_shapes_decode),
    cmocka_unit_test(test_watch_stream_parses_at_every_split),
    cmocka_unit_test(test_watch_line_over_the_cap_is_refused),
    cmocka_unit_test(test_watch_compaction_and_errors_decode),
};

FX_TEST_MAIN(tests)
