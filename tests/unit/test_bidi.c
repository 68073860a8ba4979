/* Unit twin of src/broker/bidi.c: a client bidi stream's input framing
 * across reads, its credit, the limits that hold before authentication and
 * the resets for malformed input, on the one-thread broker of
 * conn_fixture.h. */
/* fx-test-libs: fx_broker fx_storage fx_wire fx_base */
#include "unit/conn_fixture.h"

/* The stream was reset by the broker with |code|. */
static void assert_reset(cf *f, int64_t sid, uint64_t code)
{
    fq_stream *s = cf_stream(f, sid);
    assert_non_null(s);
    assert_true(s->reset);
    assert_false(s->reset_remote);
    assert_int_equal(s->reset_code, code);
}

/* An auth frame cut in three reads (inside the header, inside the body, the
 * rest) is answered once, after the last byte, and every byte is credited. */
static void test_frame_split_across_reads(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    fx_msg m;
    fx_msg_init_auth(&m, "t1", "token", true, 0);
    size_t n;
    uint8_t *p = cf_msg_frame(&m, &n);
    assert_true(n > FX_WIRE_HEADER_LEN + 4);
    size_t cut1 = 5, cut2 = FX_WIRE_HEADER_LEN + 3;
    cf_write(f, 0, p, cut1, false);
    cf_settle(f);
    cf_frame fr;
    assert_false(cf_read_frame(f, 0, &fr));
    cf_write(f, 0, p + cut1, cut2 - cut1, false);
    cf_settle(f);
    assert_false(cf_read_frame(f, 0, &fr));
    cf_write(f, 0, p + cut2, n - cut2, false);
    cf_settle(f);
    cf_expect_msg(f, 0, FX_MSG_AUTH_OK, NULL);
    assert_false(cf_read_frame(f, 0, &fr));
    fq_stream *s = cf_stream(f, 0);
    assert_int_equal(s->rx_delivered, n);
    assert_int_equal(s->rx_consumed, n);
    assert_false(s->reset);
    free(p);
    cf_free(f);
}

/* Two frames in one read are both handled, in order. */
static void test_two_frames_in_one_read(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    cf_auth(f, 0, "t1");
    fx_msg a, b;
    a = (fx_msg){.type = FX_MSG_PUBLISH,
                 .tenant_id = "t1",
                 .ns = "default",
                 .stream = "s",
                 .payload = {(const uint8_t *)"one", 3},
                 .request_id = 1,
                 .has_request_id = true};
    b = a;
    b.request_id = 2;
    b.payload = (fx_msg_bytes){(const uint8_t *)"two", 3};
    size_t na, nb;
    uint8_t *pa = cf_msg_frame(&a, &na), *pb = cf_msg_frame(&b, &nb);
    uint8_t *both = malloc(na + nb);
    assert_non_null(both);
    memcpy(both, pa, na);
    memcpy(both + na, pb, nb);
    cf_write(f, 0, both, na + nb, false);
    cf_settle(f);
    fx_msg r;
    assert_true(cf_read_msg(f, 0, &r));
    assert_int_equal(r.type, FX_MSG_PUBLISH_OK);
    assert_int_equal(r.request_id, 1);
    fx_msg_deinit(&r);
    assert_true(cf_read_msg(f, 0, &r));
    assert_int_equal(r.type, FX_MSG_PUBLISH_OK);
    assert_int_equal(r.request_id, 2);
    fx_msg_deinit(&r);
    free(pa);
    free(pb);
    free(both);
    cf_free(f);
}

static void small_window(fx_broker_opts *o, fq_config *q)
{
    (void)o;
    q->stream_window = 64;
}

/* A frame larger than the receive window: the bytes of the partial frame are
 * credited as they arrive (its reservation covers them), so the client can
 * send the rest and the publish is answered. */
static void test_partial_frame_is_credited(void **state)
{
    (void)state;
    cf *f = cf_new(small_window);
    cf_auth(f, 0, "t1");
    char payload[300];
    memset(payload, 'p', sizeof(payload) - 1);
    payload[sizeof(payload) - 1] = 0;
    const char *pl[] = {payload};
    size_t n;
    uint8_t *p = cf_publish_frame("t1", "s", pl, 1, true, 9, &n);
    assert_true(n > 4 * 64);
    assert_true(cf_write(f, 0, p, n, false) < n); /* the window holds the rest back */
    for (int i = 0; i < 20; i++)
        cf_settle(f); /* each turn the peer sends what the new credit allows */
    fq_stream *s = cf_stream(f, 0);
    assert_int_equal(s->rx_consumed, s->rx_delivered);
    cf_expect_ack(f, 0, 9, NULL);
    free(p);
    cf_free(f);
}

/* Before auth a frame may announce at most FXB_PREAUTH_MAX_FRAME bytes: one
 * byte more resets the stream (FXB_CODE_MALFORMED); after auth the same
 * header is read on. */
static void test_preauth_frame_limit(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    uint8_t hdr[FX_WIRE_HEADER_LEN];
    fx_frame_header_put(hdr, 0, FXB_PREAUTH_MAX_FRAME + 1);
    cf_write(f, 0, hdr, sizeof(hdr), false);
    cf_settle(f);
    assert_reset(f, 0, FXB_CODE_MALFORMED);

    cf_auth(f, 4, "t1");
    cf_write(f, 4, hdr, sizeof(hdr), false);
    cf_settle(f);
    assert_false(cf_stream(f, 4)->reset);
    assert_true(cf_is_open(f));
    cf_free(f);
}

/* The unauthenticated streams of one connection may hold
 * FXB_PREAUTH_CONN_BYTES of announced frame bytes: four streams with a
 * header of FXB_PREAUTH_MAX_FRAME each fill it, the fifth is reset. */
static void test_preauth_conn_bytes_limit(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    uint8_t hdr[FX_WIRE_HEADER_LEN];
    fx_frame_header_put(hdr, 0, FXB_PREAUTH_MAX_FRAME);
    unsigned fit = FXB_PREAUTH_CONN_BYTES / FXB_PREAUTH_MAX_FRAME;
    for (unsigned i = 0; i < fit; i++)
        cf_write(f, 4 * (int64_t)i, hdr, sizeof(hdr), false);
    cf_settle(f);
    for (unsigned i = 0; i < fit; i++)
        assert_false(cf_stream(f, 4 * (int64_t)i)->reset);
    int64_t last = 4 * (int64_t)fit;
    cf_write(f, last, hdr, sizeof(hdr), false);
    cf_settle(f);
    assert_reset(f, last, FXB_CODE_MALFORMED);
    /* Once a holder goes, its bytes are free again. */
    fq_peer_reset(f->qc, 0, 0x99);
    cf_settle(f);
    cf_write(f, last + 4, hdr, sizeof(hdr), false);
    cf_settle(f);
    assert_false(cf_stream(f, last + 4)->reset);
    cf_free(f);
}

/* A header with a bad magic resets the stream with FXB_CODE_MALFORMED; the
 * connection and its other streams go on. */
static void test_malformed_frame_resets(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    cf_auth(f, 0, "t1");
    uint8_t bad[FX_WIRE_HEADER_LEN + 2];
    fx_frame_header_encode(&(fx_frame_header){.magic = 0x12345678, .version = 1, .length = 2}, bad);
    bad[FX_WIRE_HEADER_LEN] = '{';
    bad[FX_WIRE_HEADER_LEN + 1] = '}';
    cf_write(f, 0, bad, sizeof(bad), false);
    cf_settle(f);
    assert_reset(f, 0, FXB_CODE_MALFORMED);
    /* Discarded input still frees the window. */
    assert_int_equal(cf_stream(f, 0)->rx_consumed, cf_stream(f, 0)->rx_delivered);
    assert_true(cf_is_open(f));
    cf_auth(f, 4, "t1");
    cf_free(f);
}

/* A JSON body that is no message resets the stream too. */
static void test_bad_json_resets(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    uint8_t fr[FX_WIRE_HEADER_LEN + 5];
    fx_frame_header_put(fr, 0, 5);
    memcpy(fr + FX_WIRE_HEADER_LEN, "nope!", 5);
    cf_write(f, 0, fr, sizeof(fr), false);
    cf_settle(f);
    assert_reset(f, 0, FXB_CODE_MALFORMED);
    cf_free(f);
}

/* The client's FIN inside a frame is malformed. */
static void test_fin_inside_frame_resets(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    fx_msg m;
    fx_msg_init_auth(&m, "t1", "token", true, 0);
    size_t n;
    uint8_t *p = cf_msg_frame(&m, &n);
    cf_write(f, 0, p, n - 1, true);
    cf_settle(f);
    assert_reset(f, 0, FXB_CODE_MALFORMED);
    free(p);
    cf_free(f);
}

static void short_auth_timeout(fx_broker_opts *o, fq_config *q)
{
    (void)q;
    o->auth_timeout_ns = 50 * FX_NS_PER_MS;
}

/* A connection that authenticated nothing within auth_timeout is closed
 * with FXB_CODE_AUTH_TIMEOUT, on the fake clock; one that did stays. */
static void test_auth_timeout_closes_connection(void **state)
{
    (void)state;
    cf *f = cf_new(short_auth_timeout);
    cf_write(f, 0, "F", 1, false); /* a stream, no auth */
    cf_settle(f);
    cf_advance(f, 49 * FX_NS_PER_MS);
    assert_true(cf_is_open(f));
    cf_advance(f, 2 * FX_NS_PER_MS);
    assert_true(cf_closed_with(f, FXB_CODE_AUTH_TIMEOUT));
    cf_free(f);

    f = cf_new(short_auth_timeout);
    cf_auth(f, 0, "t1");
    cf_advance(f, 200 * FX_NS_PER_MS);
    cf_settle(f);
    assert_true(cf_is_open(f));
    cf_free(f);
}

/* On a connection that did authenticate, a stream that sends no auth
 * within auth_timeout is reset (FXB_CODE_MALFORMED); the connection stays. */
static void test_auth_timeout_resets_idle_stream(void **state)
{
    (void)state;
    cf *f = cf_new(short_auth_timeout);
    cf_auth(f, 0, "t1");
    cf_write(f, 4, "F", 1, false); /* a second stream, no auth */
    cf_settle(f);
    cf_advance(f, 49 * FX_NS_PER_MS);
    cf_settle(f);
    assert_false(cf_stream(f, 4)->reset);
    cf_advance(f, 2 * FX_NS_PER_MS);
    cf_settle(f);
    assert_reset(f, 4, FXB_CODE_MALFORMED);
    assert_true(cf_is_open(f));
    cf_free(f);
}

static int refuse_bad(void *user, const char *tenant, const char *token, size_t len, int64_t now_s,
                      void **pctx, char *why, size_t whylen)
{
    (void)user, (void)tenant, (void)len, (void)now_s;
    if (strcmp(token, "bad") == 0) {
        snprintf(why, whylen, "bad token");
        return -1;
    }
    *pctx = NULL;
    return 0;
}

static void verifying(fx_broker_opts *o, fq_config *q)
{
    (void)q;
    o->auth = (fx_broker_auth){.verify = refuse_bad};
    o->auth_failures_per_conn = 2;
    o->auth_rate_per_ip = 1000;
}

/* A refused token answers "auth failed" and ends the stream; the
 * auth_failures_per_conn-th failure closes the connection with
 * FXB_CODE_AUTH_FAILED. */
static void test_auth_failures_close_connection(void **state)
{
    (void)state;
    cf *f = cf_new(verifying);
    fx_msg m;
    fx_msg_init_auth(&m, "t1", "bad", true, 0);
    cf_write_msg(f, 0, &m);
    cf_settle(f);
    cf_expect_msg(f, 0, FX_MSG_ERROR, "auth failed");
    assert_true(cf_stream(f, 0)->tx_fin);
    assert_true(cf_is_open(f));
    cf_write_msg(f, 4, &m);
    cf_settle(f);
    assert_true(cf_closed_with(f, FXB_CODE_AUTH_FAILED));
    cf_free(f);
}

/* A publish before auth is answered "auth required" and ends the stream. */
static void test_publish_before_auth_refused(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    cf_publish_json(f, 0, "t1", "s", "x", 1);
    cf_settle(f);
    cf_expect_msg(f, 0, FX_MSG_ERROR, "auth required");
    assert_true(cf_stream(f, 0)->tx_fin);
    cf_free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_frame_split_across_reads),
    cmocka_unit_test(test_two_frames_in_one_read),
    cmocka_unit_test(test_partial_frame_is_credited),
    cmocka_unit_test(test_preauth_frame_limit),
    cmocka_unit_test(test_preauth_conn_bytes_limit),
    cmocka_unit_test(test_malformed_frame_resets),
    cmocka_unit_test(test_bad_json_resets),
    cmocka_unit_test(test_fin_inside_frame_resets),
    cmocka_unit_test(test_auth_timeout_closes_connection),
    cmocka_unit_test(test_auth_timeout_resets_idle_stream),
    cmocka_unit_test(test_auth_failures_close_connection),
    cmocka_unit_test(test_publish_before_auth_refused),
};

FX_TEST_MAIN(tests)
