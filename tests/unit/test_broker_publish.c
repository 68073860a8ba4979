/* Unit twin of src/broker/publish.c (named test_broker_publish.c beside the
 * client's publish.c): binary and JSON publish requests answered, their
 * refusals (malformed batches, missing request ids, refused streams, tenant
 * mismatch), on the one-thread broker of conn_fixture.h. */
/* fx-test-libs: fx_broker fx_storage fx_wire fx_base */
#include "unit/conn_fixture.h"

/* An acked binary batch (0x0009, per batch) of |count| payloads on |sid|. */
static void publish_acked(cf *f, int64_t sid, const char *tenant, const char *stream,
                          const char *const *pl, uint32_t count, uint64_t request_id)
{
    size_t n;
    uint8_t *p = cf_publish_frame(tenant, stream, pl, count, true, request_id, &n);
    cf_write(f, sid, p, n, false);
    free(p);
}

/* An acked binary batch (0x0009) is answered with a 0x0010 ack for its
 * request id, and its payloads are published. */
static void test_binary_acked_publish_answered(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    cf_auth(f, 0, "t1");
    int64_t uni = cf_subscribed(f, 0, "t1", "s");
    cf_auth(f, 4, "t1");
    const char *pl[] = {"x", "y"};
    publish_acked(f, 4, "t1", "s", pl, 2, 77);
    cf_settle(f);
    cf_expect_ack(f, 4, 77, NULL);
    char ev[3][64];
    assert_int_equal(cf_read_events(f, uni, ev, 3), 2);
    assert_string_equal(ev[0], "x");
    assert_string_equal(ev[1], "y");
    cf_free(f);
}

/* An unacked binary batch (0x0001) gets no answer at all. */
static void test_binary_unacked_publish_not_answered(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    cf_auth(f, 4, "t1");
    cf_publish(f, 4, "t1", "s", "quiet");
    cf_settle(f);
    cf_frame fr;
    assert_false(cf_read_frame(f, 4, &fr));
    assert_false(cf_stream(f, 4)->reset);
    cf_free(f);
}

/* JSON publish and publish_batch are answered publish_ok{request_id}. */
static void test_json_publish_answered(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    cf_auth(f, 0, "t1");
    int64_t uni = cf_subscribed(f, 0, "t1", "s");
    cf_auth(f, 4, "t1");
    cf_publish_json(f, 4, "t1", "s", "one", 5);
    fx_msg_bytes two[] = {{(const uint8_t *)"two", 3}, {(const uint8_t *)"three", 5}};
    fx_msg b = {.type = FX_MSG_PUBLISH_BATCH,
                .tenant_id = "t1",
                .ns = "default",
                .stream = "s",
                .payloads = two,
                .n_payloads = 2,
                .request_id = 6,
                .has_request_id = true};
    cf_write_msg(f, 4, &b);
    cf_settle(f);
    fx_msg m;
    assert_true(cf_read_msg(f, 4, &m));
    assert_int_equal(m.type, FX_MSG_PUBLISH_OK);
    assert_int_equal(m.request_id, 5);
    fx_msg_deinit(&m);
    assert_true(cf_read_msg(f, 4, &m));
    assert_int_equal(m.type, FX_MSG_PUBLISH_OK);
    assert_int_equal(m.request_id, 6);
    fx_msg_deinit(&m);
    char ev[4][64];
    assert_int_equal(cf_read_events(f, uni, ev, 4), 3);
    assert_string_equal(ev[2], "three");
    cf_free(f);
}

/* An acked binary frame whose prefix is valid but whose batch is not is
 * answered with an error ack, and the stream reads on. */
static void test_malformed_acked_batch_answered(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    cf_auth(f, 4, "t1");
    uint8_t fr[FX_WIRE_HEADER_LEN + 9 + 3];
    fx_frame_header_put(fr, FX_FLAG_PUBLISH_BATCH | FX_FLAG_PUBLISH_ACKED, 9 + 3);
    memset(fr + FX_WIRE_HEADER_LEN, 0, 12);
    fr[FX_WIRE_HEADER_LEN + 7] = 42;                    /* request_id */
    fr[FX_WIRE_HEADER_LEN + 8] = FX_WIRE_ACK_PER_BATCH; /* then a truncated batch */
    cf_write(f, 4, fr, sizeof(fr), false);
    cf_settle(f);
    cf_expect_ack(f, 4, 42, "malformed publish batch");
    assert_false(cf_stream(f, 4)->reset);
    const char *pl[] = {"ok"};
    publish_acked(f, 4, "t1", "s", pl, 1, 43);
    cf_settle(f);
    cf_expect_ack(f, 4, 43, NULL);
    cf_free(f);
}

/* A malformed unacked batch has nobody to answer: the stream is reset. */
static void test_malformed_unacked_batch_resets(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    cf_auth(f, 4, "t1");
    uint8_t fr[FX_WIRE_HEADER_LEN + 3] = {0};
    fx_frame_header_put(fr, FX_FLAG_PUBLISH_BATCH, 3);
    cf_write(f, 4, fr, sizeof(fr), false);
    cf_settle(f);
    assert_true(cf_stream(f, 4)->reset);
    assert_int_equal(cf_stream(f, 4)->reset_code, FXB_CODE_MALFORMED);
    cf_free(f);
}

/* An acked JSON publish without request_id is answered with an error and
 * the stream reads on. */
static void test_json_missing_request_id(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    cf_auth(f, 4, "t1");
    fx_msg m = {.type = FX_MSG_PUBLISH,
                .tenant_id = "t1",
                .ns = "default",
                .stream = "s",
                .payload = {(const uint8_t *)"p", 1}};
    cf_write_msg(f, 4, &m);
    cf_settle(f);
    cf_expect_msg(f, 4, FX_MSG_ERROR, "missing request_id for acked publish");
    assert_false(cf_stream(f, 4)->tx_fin);
    cf_publish_json(f, 4, "t1", "s", "then", 8);
    cf_settle(f);
    cf_expect_msg(f, 4, FX_MSG_PUBLISH_OK, NULL);
    cf_free(f);
}

static void no_auto_create(fx_broker_opts *o, fq_config *q)
{
    (void)q;
    o->auto_create_streams = false;
}

/* A publish to a stream the registry refuses (none, auto-creation off) is
 * answered with the registry's error: an error ack (binary), publish_error
 * (acked JSON) or error (unacked JSON). */
static void test_publish_to_refused_stream(void **state)
{
    (void)state;
    cf *f = cf_new(no_auto_create);
    cf_auth(f, 4, "t1");
    const char *pl[] = {"p"};
    publish_acked(f, 4, "t1", "nope", pl, 1, 11);
    cf_settle(f);
    cf_expect_ack(f, 4, 11, "stream not found");
    cf_publish_json(f, 4, "t1", "nope", "p", 12);
    cf_settle(f);
    fx_msg m;
    assert_true(cf_read_msg(f, 4, &m));
    assert_int_equal(m.type, FX_MSG_PUBLISH_ERROR);
    assert_int_equal(m.request_id, 12);
    assert_non_null(strstr(m.message, "stream not found"));
    fx_msg_deinit(&m);
    cf_publish_json(f, 4, "t1", "nope", "p", 0);
    cf_settle(f);
    cf_expect_msg(f, 4, FX_MSG_ERROR, "stream not found");
    assert_false(cf_stream(f, 4)->reset);
    cf_free(f);
}

/* A binary publish naming another tenant than the stream's auth ends the
 * stream with "tenant mismatch". */
static void test_binary_tenant_mismatch(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    cf_auth(f, 4, "t1");
    const char *pl[] = {"p"};
    publish_acked(f, 4, "t2", "s", pl, 1, 3);
    cf_settle(f);
    cf_expect_msg(f, 4, FX_MSG_ERROR, "tenant mismatch");
    assert_true(cf_stream(f, 4)->tx_fin);
    cf_free(f);
}

static bool deny_secret(void *user, const void *ctx, fx_broker_auth_action action,
                        const char *tenant, const char *ns, const char *stream)
{
    (void)user, (void)ctx, (void)action, (void)tenant, (void)ns;
    return strcmp(stream, "secret") != 0;
}

static int accept_all(void *user, const char *tenant, const char *token, size_t len, int64_t now_s,
                      void **pctx, char *why, size_t whylen)
{
    (void)user, (void)tenant, (void)token, (void)len, (void)now_s, (void)why, (void)whylen;
    static char claims[] = "claims"; /* the permission check needs claims */
    *pctx = claims;
    return 0;
}

static void with_allows(fx_broker_opts *o, fq_config *q)
{
    (void)q;
    o->auth = (fx_broker_auth){.verify = accept_all, .allows = deny_secret};
}

/* A publish the authenticator does not allow is answered "forbidden"; the
 * same stream publishes elsewhere. */
static void test_forbidden_publish_answered(void **state)
{
    (void)state;
    cf *f = cf_new(with_allows);
    cf_auth(f, 4, "t1");
    const char *pl[] = {"p"};
    publish_acked(f, 4, "t1", "secret", pl, 1, 21);
    publish_acked(f, 4, "t1", "open", pl, 1, 22);
    cf_settle(f);
    cf_expect_ack(f, 4, 21, "forbidden");
    cf_expect_ack(f, 4, 22, NULL);
    cf_free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_binary_acked_publish_answered),
    cmocka_unit_test(test_binary_unacked_publish_not_answered),
    cmocka_unit_test(test_json_publish_answered),
    cmocka_unit_test(test_malformed_acked_batch_answered),
    cmocka_unit_test(test_malformed_unacked_batch_resets),
    cmocka_unit_test(test_json_missing_request_id),
    cmocka_unit_test(test_publish_to_refused_stream),
    cmocka_unit_test(test_binary_tenant_mismatch),
    cmocka_unit_test(test_forbidden_publish_answered),
};

FX_TEST_MAIN(tests)
