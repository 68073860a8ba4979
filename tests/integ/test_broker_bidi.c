/* Integration tests of a client bidi stream on the broker (bidi.c and
 * reply.c): auth and tenant binding, replies in request order and their
 * bound, JSON and binary publish answers, and malformed input that fails one
 * stream while the connection serves the others. */
/* fx-test-libs: fx_broker fx_quic fx_wire fx_server fx_base */
#include "integ/broker_client.h"

static void test_auth_ok_with_flags_and_ok_without(void **state)
{
    (void)state;
    T *t = t_new();
    t_start(t);
    tconn *c = t_connect(t);
    tstream *a = authed_stream(t, c); /* auth_ok {server_flags 63} checked inside */
    tstream *b = open_bidi(c);
    fx_msg m;
    fx_msg_init_auth(&m, "t1", "tok", false, 0);
    send_msg(b, &m);
    expect_msg(t, b, FX_MSG_OK, NULL, NULL);
    fx_msg_init_auth(&m, "t1", "tok", true, 63);
    send_msg(a, &m);
    expect_msg(t, a, FX_MSG_ERROR, "auth already established", NULL);
    expect_end(t, a);
    t_free(t);
}

static void test_publish_before_auth_is_refused(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = open_bidi(c);
    send_json(s, "{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"x\",\"payload\":\"aGk=\",\"ack\":\"none\"}");
    expect_msg(t, s, FX_MSG_ERROR, "auth required", NULL);
    expect_end(t, s);
    tstream *b = open_bidi(c);
    send_buf(b, binary_publish(t, "x", 0, 1, false, 0));
    expect_msg(t, b, FX_MSG_ERROR, "auth required", NULL);
    expect_end(t, b);
    tstream *u = open_bidi(c);
    send_json(u, "{\"type\":\"subscribe\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"x\"}");
    expect_msg(t, u, FX_MSG_ERROR, "auth required", NULL);
    expect_end(t, u);
    t_free(t);
}

static void test_tenant_mismatch_refused(void **state)
{
    (void)state;
    T *t = t_new();
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    send_json(s, "{\"type\":\"publish\",\"tenant_id\":\"t2\",\"namespace\":\"default\","
                 "\"stream\":\"x\",\"payload\":\"aGk=\",\"request_id\":1}");
    expect_msg(t, s, FX_MSG_ERROR, "tenant mismatch", NULL);
    expect_end(t, s);
    tstream *u = authed_stream(t, c);
    send_json(u, "{\"type\":\"subscribe\",\"tenant_id\":\"t2\",\"namespace\":\"default\","
                 "\"stream\":\"x\"}");
    expect_msg(t, u, FX_MSG_ERROR, "tenant mismatch", NULL);
    expect_end(t, u);
    t_free(t);
}

static void test_acked_binary_publish_gets_0x0010_with_request_id(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    publish_acked(t, s, "acks", 0, 3, 4242);
    publish_acked(t, s, "acks", 3, 1, 7);
    /* Pipelined: three requests in flight answer in request order. */
    for (uint64_t rid = 100; rid < 103; rid++)
        send_buf(s, binary_publish(t, "acks", 4 + rid - 100, 1, true, rid));
    for (uint64_t rid = 100; rid < 103; rid++) {
        tframe *f = next_reply(t, s);
        fx_wire_publish_ack a;
        assert_int_equal(f->flags, FX_FLAG_PUBLISH_ACK);
        assert_int_equal(fx_wire_publish_ack_decode(f->body, f->len, &a, NULL), 0);
        assert_true(a.ok);
        assert_int_equal(a.request_id, rid);
        tframe_free(f);
    }
    t_free(t);
}

/* A client that pipelines requests but does not read the answers: once
 * FXB_REPLIES_HIGH replies wait to be written, the broker stops reading that
 * stream (its QUIC credit is withheld) instead of queueing replies without
 * bound; when the client reads again, every request is answered in order. */
static void test_unread_replies_stop_reading_instead_of_queueing(void **state)
{
    (void)state;
    enum { N = 6000 };
    T *t = t_new();
    t->size_of = size_small;
    t->bo.quic.unacked_cap = 8u << 10; /* little room below the reply queue */
    t->co.stream_window = 4u << 10;    /* the client reads 4 KiB of replies */
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    s->stalled = true;
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    for (uint64_t rid = 1; rid <= N; rid++)
        send_buf(s, binary_publish(t, "unread", rid - 1, 1, true, rid));
    run_for(t, 500);
    fx_metrics_snapshot_take(&b);
    uint64_t answered = (b.c.publish_ok - a.c.publish_ok) + (b.c.publish_error - a.c.publish_error);
    /* what fits in the client's window and the unacked cap, plus the queue */
    assert_true(answered < N);
    assert_true(answered >= 1536); /* the queue bound, FXB_REPLIES_HIGH */
    resume_stream(s);
    for (uint64_t rid = 1; rid <= N; rid++) {
        tframe *f = next_reply(t, s);
        fx_wire_publish_ack ack;
        assert_int_equal(f->flags, FX_FLAG_PUBLISH_ACK);
        assert_int_equal(fx_wire_publish_ack_decode(f->body, f->len, &ack, NULL), 0);
        assert_int_equal(ack.request_id, rid);
        tframe_free(f);
    }
    t_free(t);
}

static void test_json_publish_acked_gets_publish_ok(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.ack_on_commit = true; /* the ack waits for append + fanout */
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    for (int i = 1; i <= 3; i++) {
        char json[256];
        snprintf(json, sizeof(json),
                 "{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"j\",\"payload\":\"aGk=\",\"request_id\":%d,"
                 "\"ack\":\"per_message\"}",
                 i);
        send_json(s, json);
    }
    send_json(s, "{\"type\":\"publish_batch\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"j\",\"payloads\":[\"YQ==\",\"Yg==\"],\"request_id\":4}");
    for (uint64_t i = 1; i <= 4; i++) {
        fx_msg m;
        expect_msg(t, s, FX_MSG_PUBLISH_OK, NULL, &m);
        assert_int_equal(m.request_id, i);
        fx_msg_deinit(&m);
    }
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_ok), 4);
    t_free(t);
}

static void test_json_acked_without_request_id_error(void **state)
{
    (void)state;
    T *t = t_new();
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    send_json(s, "{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"x\",\"payload\":\"aGk=\"}");
    expect_msg(t, s, FX_MSG_ERROR, "missing request_id for acked publish", NULL);
    send_json(s, "{\"type\":\"publish_batch\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"x\",\"payloads\":[\"aGk=\"]}");
    expect_msg(t, s, FX_MSG_ERROR, "missing request_id for acked publish batch", NULL);
    send_json(s, "{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"x\",\"payload\":\"aGk=\",\"request_id\":9}");
    fx_msg m;
    expect_msg(t, s, FX_MSG_PUBLISH_OK, NULL, &m);
    assert_int_equal(m.request_id, 9);
    fx_msg_deinit(&m);
    assert_false(s->fin);
    t_free(t);
}

static void test_unknown_flag_gets_error_and_stream_continues(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    uint8_t fr[FX_WIRE_HEADER_LEN + 2];
    fx_frame_header_put(fr, 0x0040, 2);
    fr[12] = fr[13] = 0;
    send_bytes(s, fr, sizeof(fr));
    expect_msg(t, s, FX_MSG_ERROR, "unsupported frame flags", NULL);
    publish_acked(t, s, "f", 0, 1, 11);
    assert_false(s->fin);
    t_free(t);
}

static void test_malformed_json_closes_stream_but_connection_serves_others(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *bad = authed_stream(t, c);
    tstream *good = authed_stream(t, c);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    send_json(bad, "{\"type\":\"publish\",");
    assert_true(run_until_arg(t, stream_finished, bad, 3000));
    assert_true(bad->reset);
    assert_null(bad->head);
    /* A binary batch whose count runs past the end is malformed too. */
    tstream *bad2 = authed_stream(t, c);
    uint8_t fr[FX_WIRE_HEADER_LEN + 2] = {0};
    fx_frame_header_put(fr, FX_FLAG_PUBLISH_BATCH, 2);
    send_bytes(bad2, fr, sizeof(fr));
    assert_true(run_until_arg(t, stream_finished, bad2, 3000));
    assert_true(bad2->reset);
    publish_acked(t, good, "m", 0, 2, 5);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, broker_stream_errors), 2);
    /* Another connection is unaffected too. */
    tconn *c2 = t_connect(t);
    tstream *s2 = authed_stream(t, c2);
    publish_acked(t, s2, "m", 2, 1, 6);
    assert_false(c->closed);
    t_free(t);
}

static void test_unknown_stream_with_autocreate_off_not_found(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t->bo.auto_create_streams = false;
    fx_broker_stream_name known = {"t1", "default", "known"};
    t->bo.streams = &known;
    t->bo.nstreams = 1;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    const char *want = "stream not found: tenant=t1 namespace=default stream=nope";
    send_buf(s, binary_publish(t, "nope", 0, 1, true, 21));
    tframe *f = next_reply(t, s);
    fx_wire_publish_ack a;
    assert_int_equal(f->flags, FX_FLAG_PUBLISH_ACK);
    assert_int_equal(fx_wire_publish_ack_decode(f->body, f->len, &a, NULL), 0);
    assert_false(a.ok);
    assert_int_equal(a.request_id, 21);
    assert_int_equal(a.message.len, strlen(want));
    assert_memory_equal(a.message.ptr, want, strlen(want));
    tframe_free(f);
    send_json(s, "{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"nope\",\"payload\":\"aGk=\",\"request_id\":22}");
    fx_msg m;
    expect_msg(t, s, FX_MSG_PUBLISH_ERROR, want, &m);
    assert_int_equal(m.request_id, 22);
    fx_msg_deinit(&m);
    publish_acked(t, s, "known", 0, 1, 23);
    tstream *u = authed_stream(t, c);
    send_json(u, "{\"type\":\"subscribe\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"nope\"}");
    expect_msg(t, u, FX_MSG_ERROR, want, NULL);
    expect_end(t, u);
    t_free(t);
}

static size_t payload_size;

static size_t size_fixed(uint64_t off)
{
    (void)off;
    return payload_size;
}

/* A binary publish whose frame body is exactly |body| bytes. */
static fx_buf *publish_of_body(T *t, const char *stream, uint64_t off, int64_t body, uint64_t rid)
{
    t->size_of = size_fixed;
    for (payload_size = (size_t)body - 64; payload_size < (size_t)body; payload_size++) {
        fx_buf *f = binary_publish(t, stream, off, 1, true, rid);
        if (body_len(f) == body)
            return f;
        fx_buf_unref(f);
    }
    fail_msg("no payload size gives a %lld-byte body", (long long)body);
    return NULL;
}

/* A frame one byte over max_frame_bytes, on a live connection: the broker
 * resets that stream at the header (nothing reserved, nothing answered) and
 * the connection goes on serving its other streams: a frame of exactly
 * max_frame_bytes on a new stream is published and delivered. */
static void test_frame_of_max_frame_bytes_plus_1_resets_its_stream_only(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.max_frame_bytes = 64u << 10;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *sub = subscribe(t, c, "mf", FX_MSG_START_LATEST, 0);
    tstream *s = authed_stream(t, c);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    int64_t max = (int64_t)t->bo.max_frame_bytes;
    send_buf(s, publish_of_body(t, "mf", 0, max + 1, 1));
    assert_true(run_until_arg(t, stream_finished, s, 5000));
    assert_true(s->reset);
    assert_null(s->head);
    expect_reserved(t, &a, 0);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, broker_stream_errors), 1);
    assert_int_equal(DELTA(a, b, publish_accepted), 0);
    assert_false(c->closed);
    /* The same connection: another stream, a frame of exactly the limit. */
    tstream *s2 = authed_stream(t, c);
    send_buf(s2, publish_of_body(t, "mf", 0, max, 2));
    expect_ack(t, s2, 2);
    wait_events(t, &sub, 1, 1, 5000);
    assert_int_equal(sub->gaps + sub->dups + sub->bad, 0);
    assert_false(c->closed);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, broker_stream_errors), 1);
    assert_int_equal(DELTA(a, b, publish_accepted), 1);
    t_free(t);
}

/* A bidi stream keeps the names of its last binary publish checked and
 * resolved; a JSON publish to another stream in between re-points the
 * stream's resolved handle, so the next binary frame with the first names
 * (byte for byte the cached ones) must resolve them again and land where
 * they say, and the frames after it too. */
static void test_binary_names_resolve_again_after_a_json_publish_elsewhere(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *sa = subscribe(t, c, "na", FX_MSG_START_LATEST, 0);
    tstream *sb = subscribe(t, c, "nb", FX_MSG_START_LATEST, 0);
    tstream *s = authed_stream(t, c);
    publish_acked(t, s, "na", 0, 1, 1);
    send_json(s, "{\"type\":\"publish\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"nb\",\"payload\":\"aGk=\",\"request_id\":2}");
    fx_msg m;
    expect_msg(t, s, FX_MSG_PUBLISH_OK, NULL, &m);
    assert_int_equal(m.request_id, 2);
    fx_msg_deinit(&m);
    publish_acked(t, s, "na", 1, 1, 3);
    publish_acked(t, s, "na", 2, 2, 4);
    publish_range(t, s, "na", 4, 3); /* unacked, one read: merged */
    wait_events(t, &sa, 1, 7, 5000);
    wait_events(t, &sb, 1, 1, 5000);
    run_for(t, 100);
    assert_int_equal(sa->events, 7);
    assert_int_equal(sa->first_off, 0);
    assert_int_equal(sa->gaps, 0);
    assert_int_equal(sa->bad, 0);
    assert_int_equal(sb->events, 1);
    t_free(t);
}

/* Cached names include the tenant: a frame naming another tenant after
 * frames of the stream's own is refused as before. */
static void test_binary_frame_of_another_tenant_refused_after_cached_names(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    t_start(t);
    tconn *c = t_connect(t);
    tstream *s = authed_stream(t, c);
    publish_acked(t, s, "tn", 0, 1, 1);
    publish_acked(t, s, "tn", 1, 1, 2);
    fx_wire_slice p = {(const uint8_t *)"x", 1};
    fx_wire_publish_batch pb = {.tenant = {(const uint8_t *)"t2", 2},
                                .ns = {(const uint8_t *)"default", 7},
                                .stream = {(const uint8_t *)"tn", 2},
                                .count = 1,
                                .payloads = &p};
    ssize_t sz = fx_wire_publish_batch_frame_size(&pb);
    assert_true(sz > 0);
    fx_buf *f;
    assert_int_equal(fx_buf_new(&f, (size_t)sz), 0);
    assert_int_equal(fx_wire_publish_batch_encode(&pb, fx_buf_data_mut(f), (size_t)sz), sz);
    send_buf(s, f);
    expect_msg(t, s, FX_MSG_ERROR, "tenant mismatch", NULL);
    expect_end(t, s);
    t_free(t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_auth_ok_with_flags_and_ok_without),
    cmocka_unit_test(test_publish_before_auth_is_refused),
    cmocka_unit_test(test_tenant_mismatch_refused),
    cmocka_unit_test(test_acked_binary_publish_gets_0x0010_with_request_id),
    cmocka_unit_test(test_unread_replies_stop_reading_instead_of_queueing),
    cmocka_unit_test(test_json_publish_acked_gets_publish_ok),
    cmocka_unit_test(test_json_acked_without_request_id_error),
    cmocka_unit_test(test_unknown_flag_gets_error_and_stream_continues),
    cmocka_unit_test(test_malformed_json_closes_stream_but_connection_serves_others),
    cmocka_unit_test(test_unknown_stream_with_autocreate_off_not_found),
    cmocka_unit_test(test_frame_of_max_frame_bytes_plus_1_resets_its_stream_only),
    cmocka_unit_test(test_binary_names_resolve_again_after_a_json_publish_elsewhere),
    cmocka_unit_test(test_binary_frame_of_another_tenant_refused_after_cached_names),
};

FX_TEST_MAIN(tests)
