/* Integration tests of idempotent publish on a real broker (idem.c,
 * publish.c), spoken to in raw frames: producer_init, publish_idempotent
 * answered from the window (same offset, nothing appended: the next batch
 * lands right after the original), a gap, a reused sequence (with and
 * without FEATURE_SEQUENCE_REUSED), a sequence older than the window, an
 * unknown producer, 4,097 producers on one stream (the oldest forgotten),
 * the binary 0x0109 batch and its flag rules, auth's advertisement, and a
 * durable stream whose producers are known again after a restart (the
 * check against the log's marks). */
/* fx-test-libs: fx_broker fx_storage fx_quic fx_wire fx_server fx_base */
#include "integ/broker_client.h"

#include <jansson.h>

#include "storage/catalog.h"
#include "storage/dlog.h"
#include "storage/format.h"

/* What an idempotent client of ours offers. */
#define IFEATS (FX_FEATURE_IDEMPOTENT_PRODUCER | FX_FEATURE_SEQUENCE_REUSED | FX_FEATURE_EXTENDED)

static T *it_new(void)
{
    T *t = t_new();
    t->size_of = size_small;
    t_start(t);
    return t;
}

/* A new stream of |c| authenticated offering |features| (|hi|: the
 * second word, with FX_FEATURE_EXTENDED) and client_flags |flags|. */
static tstream *istream_as(T *t, tconn *c, uint16_t flags, uint32_t features, uint32_t hi,
                           fx_msg *pok)
{
    tstream *s = open_bidi(c);
    fx_msg m;
    fx_msg_init_auth(&m, "t1", "any-token", true, flags);
    m.client_features = features;
    m.has_client_features = true;
    if ((features & FX_FEATURE_EXTENDED) != 0) {
        m.client_features_hi = hi;
        m.has_client_features_hi = true;
    }
    send_msg(s, &m);
    fx_msg r;
    expect_msg(t, s, FX_MSG_AUTH_OK, NULL, &r);
    assert_true(r.has_server_features);
    assert_int_equal(r.server_features & FX_FEATURE_IDEMPOTENT_PRODUCER,
                     FX_FEATURE_IDEMPOTENT_PRODUCER);
    if (pok != NULL)
        *pok = r;
    else
        fx_msg_deinit(&r);
    return s;
}

static tstream *istream(T *t, tconn *c)
{
    return istream_as(t, c, 63, IFEATS, FX_FEATURE_HI_PUBLISH_OFFSETS, NULL);
}

static uint64_t producer_init(T *t, tstream *s)
{
    send_json(s, "{\"type\":\"producer_init\",\"request_id\":1}");
    fx_msg r;
    expect_msg(t, s, FX_MSG_PRODUCER_INIT_OK, NULL, &r);
    assert_int_equal(r.request_id, 1);
    uint64_t id = r.producer_id;
    assert_true(id != 0);
    fx_msg_deinit(&r);
    return id;
}

/* Sends publish_idempotent of |payload| (one record, or |n| copies) at
 * |seq| of producer |pid| to |stream|. */
static void send_idem_n(tstream *s, const char *stream, uint64_t pid, uint64_t seq,
                        const char *payload, uint32_t n)
{
    fx_msg_bytes list[8];
    assert_true(n <= 8);
    for (uint32_t i = 0; i < n; i++)
        list[i] = (fx_msg_bytes){(const uint8_t *)payload, strlen(payload)};
    fx_msg m;
    memset(&m, 0, sizeof(m));
    m.type = FX_MSG_PUBLISH_IDEMPOTENT;
    m.tenant_id = "t1", m.ns = "default", m.stream = stream;
    m.payloads = list, m.n_payloads = n;
    m.request_id = seq + 100, m.producer_id = pid, m.sequence = seq;
    send_msg(s, &m);
}

static void send_idem(tstream *s, const char *stream, uint64_t pid, uint64_t seq,
                      const char *payload)
{
    send_idem_n(s, stream, pid, seq, payload, 1);
}

/* The next answer must be publish_ok at |offset| (duplicate |dup|). */
static void expect_ok(T *t, tstream *s, uint64_t seq, uint64_t offset, bool dup)
{
    fx_msg r;
    expect_msg(t, s, FX_MSG_PUBLISH_OK, NULL, &r);
    assert_int_equal(r.request_id, seq + 100);
    assert_true(r.has_offset);
    assert_int_equal(r.offset, offset);
    assert_int_equal(r.duplicate, dup);
    fx_msg_deinit(&r);
}

/* The next answer must be publish_refused with |kind| and |text|. */
static void expect_refused(T *t, tstream *s, fx_msg_refusal_kind kind, const char *text,
                           fx_msg *out)
{
    fx_msg r;
    expect_msg(t, s, FX_MSG_PUBLISH_REFUSED, NULL, &r);
    assert_int_equal(r.refusal.kind, kind);
    if (strstr(r.message, text) == NULL)
        fail_msg("refusal '%s' does not say '%s'", r.message, text);
    if (out != NULL)
        *out = r;
    else
        fx_msg_deinit(&r);
}

/* The `producers` of t1/default/|stream| in GET /v1/streams (-1: null,
 * -2: no such stream). */
static long long listed_producers(T *t, const char *stream)
{
    char *js = NULL;
    assert_int_equal(fx_broker_list_streams(t->b, 10 * FX_NS_PER_S, &js), 0);
    json_t *root = json_loads(js, 0, NULL);
    free(js);
    assert_non_null(root);
    json_t *v;
    size_t i;
    long long n = -2;
    json_array_foreach(json_object_get(root, "streams"), i, v)
    {
        if (strcmp(json_string_value(json_object_get(v, "stream")), stream) == 0) {
            json_t *p = json_object_get(v, "producers");
            n = json_is_integer(p) ? (long long)json_integer_value(p) : -1;
        }
    }
    json_decref(root);
    return n;
}

static void test_a_resent_batch_is_answered_from_the_window(void **state)
{
    (void)state;
    T *t = it_new();
    tconn *c = t_connect(t);
    tstream *s = istream(t, c);
    uint64_t pid = producer_init(t, s);
    assert_true(pid <= (uint64_t)INT64_MAX);
    send_idem(s, "idem1", pid, 0, "a");
    expect_ok(t, s, 0, 0, false);
    send_idem_n(s, "idem1", pid, 1, "bb", 2);
    expect_ok(t, s, 1, 1, false);
    /* The re-send of 1: the original's offset, nothing appended... */
    send_idem_n(s, "idem1", pid, 1, "bb", 2);
    expect_ok(t, s, 1, 1, true);
    send_idem_n(s, "idem1", pid, 1, "bb", 2);
    expect_ok(t, s, 1, 1, true);
    /* ...so the next batch lands right after the original (the tail). */
    send_idem(s, "idem1", pid, 2, "c");
    expect_ok(t, s, 2, 3, false);
    /* A second producer on the same stream has its own sequence. */
    uint64_t other = producer_init(t, s);
    assert_true(other != pid);
    send_idem(s, "idem1", other, 0, "z");
    expect_ok(t, s, 0, 4, false);
    assert_int_equal(listed_producers(t, "idem1"), 2); /* GET /v1/streams */
    t_free(t);
}

static void test_gap_reused_unknown_and_expired_are_refused(void **state)
{
    (void)state;
    T *t = it_new();
    tconn *c = t_connect(t);
    tstream *s = istream(t, c);
    uint64_t pid = producer_init(t, s);
    send_idem(s, "idem2", pid, 0, "a");
    expect_ok(t, s, 0, 0, false);
    fx_msg r;
    send_idem(s, "idem2", pid, 5, "f");
    expect_refused(t, s, FX_MSG_REFUSAL_SEQUENCE_GAP, "sequence gap: expected 1", &r);
    assert_int_equal(r.refusal.expected, 1);
    assert_int_equal(r.request_id, 105);
    fx_msg_deinit(&r);
    send_idem(s, "idem2", pid, 0, "other");
    expect_refused(t, s, FX_MSG_REFUSAL_SEQUENCE_REUSED,
                   "sequence 0 already holds a batch with different payloads", NULL);
    uint64_t fresh = producer_init(t, s);
    send_idem(s, "idem2", fresh, 3, "x");
    char want[128];
    snprintf(want, sizeof(want), "unknown producer %llu: nothing to check its sequence against",
             (unsigned long long)fresh);
    expect_refused(t, s, FX_MSG_REFUSAL_UNKNOWN_PRODUCER, want, NULL);
    /* 65 batches in all: sequence 0 is out of the 64-batch window. */
    for (uint64_t q = 1; q <= 64; q++)
        send_idem(s, "idem2", pid, q, "w");
    for (uint64_t q = 1; q <= 64; q++)
        expect_ok(t, s, q, q, false);
    send_idem(s, "idem2", pid, 0, "a");
    expect_refused(t, s, FX_MSG_REFUSAL_SEQUENCE_EXPIRED,
                   "sequence 0 is older than the window this broker keeps", NULL);
    send_idem(s, "idem2", pid, 1, "w"); /* still in the window */
    expect_ok(t, s, 1, 1, true);
    t_free(t);
}

static void test_old_clients_get_the_original_answers(void **state)
{
    (void)state;
    T *t = it_new();
    tconn *c = t_connect(t);
    /* No FEATURE_SEQUENCE_REUSED, no offsets word. */
    tstream *s = istream_as(t, c, 63, FX_FEATURE_IDEMPOTENT_PRODUCER, 0, NULL);
    uint64_t pid = producer_init(t, s);
    send_idem(s, "idem3", pid, 0, "a");
    fx_msg r;
    expect_msg(t, s, FX_MSG_PUBLISH_OK, NULL, &r);
    assert_false(r.has_offset);
    assert_false(r.duplicate);
    fx_msg_deinit(&r);
    /* Reused: ok, nothing written (the original's fallback). */
    send_idem(s, "idem3", pid, 0, "b");
    expect_msg(t, s, FX_MSG_PUBLISH_OK, NULL, &r);
    assert_false(r.has_offset);
    fx_msg_deinit(&r);
    /* Nothing was written: the next batch of an offsets client is at 1. */
    tstream *o = istream(t, c);
    uint64_t p2 = producer_init(t, o);
    send_idem(o, "idem3", p2, 0, "c");
    expect_ok(t, o, 0, 1, false);
    t_free(t);
}

static void test_the_oldest_of_4097_producers_is_forgotten(void **state)
{
    (void)state;
    T *t = it_new();
    tconn *c = t_connect(t);
    tstream *s = istream(t, c);
    /* Producer ids are the client's to present: any id at sequence 0 is a
     * new producer. */
    const uint64_t n = 4097, chunk = 256;
    for (uint64_t first = 0; first < n; first += chunk) {
        uint64_t end = first + chunk < n ? first + chunk : n;
        for (uint64_t i = first; i < end; i++)
            send_idem(s, "idem4", 1000 + i, 0, "p");
        for (uint64_t i = first; i < end; i++)
            expect_ok(t, s, 0, i, false);
    }
    /* The first producer's newest batch was the oldest: forgotten. */
    send_idem(s, "idem4", 1000, 1, "p");
    expect_refused(t, s, FX_MSG_REFUSAL_UNKNOWN_PRODUCER, "unknown producer 1000", NULL);
    /* The second is still known. */
    send_idem(s, "idem4", 1001, 0, "p");
    expect_ok(t, s, 0, 1, true);
    t_free(t);
}

/* A 0x0109 frame of one payload |p| at |seq| of |pid|. */
static void send_binary_idem(tstream *s, const char *stream, uint64_t pid, uint64_t seq,
                             const char *p)
{
    fx_wire_slice pay = {(const uint8_t *)p, strlen(p)};
    fx_wire_publish_batch b = {.request_id = seq + 100,
                               .ack = FX_WIRE_ACK_PER_BATCH,
                               .idempotent = true,
                               .producer_id = pid,
                               .sequence = seq,
                               .tenant = {(const uint8_t *)"t1", 2},
                               .ns = {(const uint8_t *)"default", 7},
                               .stream = {(const uint8_t *)stream, strlen(stream)},
                               .count = 1,
                               .payloads = &pay};
    uint8_t out[256];
    ssize_t n = fx_wire_publish_batch_encode(&b, out, sizeof(out));
    assert_true(n > 0);
    send_bytes(s, out, (size_t)n);
}

static void test_the_binary_idempotent_batch(void **state)
{
    (void)state;
    T *t = it_new();
    tconn *c = t_connect(t);
    fx_msg ok;
    /* The flag is advertised to a client that offers it. */
    tstream *s = istream_as(t, c, 63 | FX_FLAG_PUBLISH_IDEMPOTENT, IFEATS,
                            FX_FEATURE_HI_PUBLISH_OFFSETS, &ok);
    assert_int_equal(ok.server_flags, 63 | FX_FLAG_PUBLISH_IDEMPOTENT);
    assert_true(ok.has_server_features_hi);
    assert_int_equal(ok.server_features_hi & FX_FEATURE_HI_PUBLISH_OFFSETS,
                     FX_FEATURE_HI_PUBLISH_OFFSETS);
    fx_msg_deinit(&ok);
    uint64_t pid = producer_init(t, s);
    send_binary_idem(s, "idem5", pid, 0, "hello");
    expect_ok(t, s, 0, 0, false);
    send_binary_idem(s, "idem5", pid, 0, "hello");
    expect_ok(t, s, 0, 0, true);
    send_binary_idem(s, "idem5", pid, 2, "hello");
    expect_refused(t, s, FX_MSG_REFUSAL_SEQUENCE_GAP, "sequence gap: expected 1", NULL);
    /* JSON and binary batches share the producer's sequence. */
    send_idem(s, "idem5", pid, 1, "json");
    expect_ok(t, s, 1, 1, false);
    /* 0x0100 without 0x0008 is refused; the stream goes on. */
    uint8_t body[32] = {0};
    send_frame(s, 0x0101, body, sizeof(body));
    expect_msg(t, s, FX_MSG_ERROR, "unsupported frame flags", NULL);
    send_binary_idem(s, "idem5", pid, 2, "x");
    expect_ok(t, s, 2, 2, false);
    /* A client that did not offer the flag is told nothing about it. */
    tstream *o = istream_as(t, c, 63, IFEATS, 0, &ok);
    assert_int_equal(ok.server_flags, 63);
    fx_msg_deinit(&ok);
    (void)o;
    t_free(t);
}

/* A broker whose durable root is |root| (outside its state dir, so it
 * outlives it), with t1/default/dur durable. */
static T *durable_broker(const char *root)
{
    T *t = t_new();
    t->size_of = size_small;
    t->bo.durable.dir = root;
    t->bo.durable.fsync_mode = FX_FSYNC_ON_COMMIT;
    t_start(t);
    bool created = false, durable = false;
    fx_registry_err err;
    assert_int_equal(
        fx_broker_create_stream_durable(t->b, "t1", "default", "dur", 1, &created, &durable, &err),
        0);
    assert_true(durable);
    return t;
}

static void test_a_durable_stream_knows_its_producers_after_a_restart(void **state)
{
    (void)state;
    char root[256];
    fix_state_dir_new(root, sizeof(root), "idem-durable");
    const uint64_t pid = 4242;
    T *t = durable_broker(root);
    tconn *c = t_connect(t);
    tstream *s = istream(t, c);
    send_idem(s, "dur", pid, 0, "a");
    expect_ok(t, s, 0, 0, false);
    send_idem_n(s, "dur", pid, 1, "bb", 2);
    expect_ok(t, s, 1, 1, false);
    send_idem_n(s, "dur", pid, 1, "bb", 2); /* answered from the log's table */
    expect_ok(t, s, 1, 1, true);
    send_idem(s, "dur", pid, 3, "gap");
    expect_refused(t, s, FX_MSG_REFUSAL_SEQUENCE_GAP, "sequence gap: expected 2", NULL);
    t_free(t);

    /* A new broker over the same log: the producer is known from the marks. */
    t = durable_broker(root);
    c = t_connect(t);
    s = istream(t, c);
    send_idem_n(s, "dur", pid, 1, "bb", 2);
    expect_ok(t, s, 1, 1, true);
    send_idem(s, "dur", pid, 0, "a");
    expect_ok(t, s, 0, 0, true);
    send_idem(s, "dur", pid, 1, "other");
    expect_refused(t, s, FX_MSG_REFUSAL_SEQUENCE_REUSED, "different payloads", NULL);
    /* Nothing was appended twice: the next batch lands at 3. */
    send_idem(s, "dur", pid, 2, "c");
    expect_ok(t, s, 2, 3, false);
    send_idem(s, "dur", 99, 5, "x");
    expect_refused(t, s, FX_MSG_REFUSAL_UNKNOWN_PRODUCER, "unknown producer 99", NULL);
    assert_int_equal(listed_producers(t, "dur"), 1); /* the log's table, in GET /v1/streams */
    t_free(t);
    fix_rm_dir(root);
}

/* Writes the first record "x1" of a 3-record batch |seq| of |pid| into
 * t1/default/dur's log under |root| (its broker stopped): the torn batch a
 * power cut in the middle of a marked append leaves. */
static void tear_batch(const char *root, uint64_t pid, uint64_t seq)
{
    fx_catalog *cat;
    char err[512], dir[1024];
    if (fx_catalog_open(&cat, NULL, root, err, sizeof(err)) != 0)
        fail_msg("the catalogue under %s: %s", root, err);
    const fx_catalog_entry *ce = fx_catalog_find(cat, "t1", "default", "dur");
    assert_non_null(ce);
    assert_int_equal(fx_catalog_dir_path(cat, ce, dir, sizeof(dir)), 0);
    fx_catalog_free(cat);
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    fx_dlog *log;
    assert_int_equal(fx_dlog_open(&log, dir, &c, 1, NULL), 0);
    fx_dlog_iov rec = {"x1", 2};
    fx_dlog_mark mk = {.producer_id = pid,
                       .sequence = seq,
                       .count = 3,
                       .held = 0,
                       .digest = fx_producer_digest_step(0, "x1", 2)};
    uint64_t off = 0;
    assert_int_equal(fx_dlog_append_marked(log, &rec, 1, 2, &mk, &off), 0);
    assert_int_equal(off, 1);
    assert_int_equal(fx_dlog_close(log, true), 0);
}

static void test_a_torn_durable_batch_is_completed_by_its_resend(void **state)
{
    (void)state;
    char root[256];
    fix_state_dir_new(root, sizeof(root), "idem-torn");
    const uint64_t pid = 77;
    T *t = durable_broker(root);
    tconn *c = t_connect(t);
    tstream *s = istream(t, c);
    send_idem(s, "dur", pid, 0, "a");
    expect_ok(t, s, 0, 0, false);
    t_free(t);
    tear_batch(root, pid, 1);

    t = durable_broker(root);
    c = t_connect(t);
    s = istream(t, c);
    /* Another first record under the sequence is another batch. */
    static const fx_msg_bytes other[] = {{(const uint8_t *)"y1", 2},
                                         {(const uint8_t *)"x2", 2},
                                         {(const uint8_t *)"x3", 2}};
    static const fx_msg_bytes whole[] = {{(const uint8_t *)"x1", 2},
                                         {(const uint8_t *)"x2", 2},
                                         {(const uint8_t *)"x3", 2}};
    fx_msg m;
    memset(&m, 0, sizeof(m));
    m.type = FX_MSG_PUBLISH_IDEMPOTENT;
    m.tenant_id = "t1", m.ns = "default", m.stream = "dur";
    m.payloads = other, m.n_payloads = 3;
    m.request_id = 101, m.producer_id = pid, m.sequence = 1;
    send_msg(s, &m);
    expect_refused(t, s, FX_MSG_REFUSAL_SEQUENCE_REUSED, "different payloads", NULL);
    /* The re-send completes it: the batch's first offset, its rest appended. */
    m.payloads = whole;
    send_msg(s, &m);
    expect_ok(t, s, 1, 1, false);
    send_msg(s, &m);
    expect_ok(t, s, 1, 1, true);
    send_idem(s, "dur", pid, 2, "c");
    expect_ok(t, s, 2, 4, false);
    t_free(t);
    fix_rm_dir(root);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_a_resent_batch_is_answered_from_the_window),
    cmocka_unit_test(test_gap_reused_unknown_and_expired_are_refused),
    cmocka_unit_test(test_old_clients_get_the_original_answers),
    cmocka_unit_test(test_the_oldest_of_4097_producers_is_forgotten),
    cmocka_unit_test(test_the_binary_idempotent_batch),
    cmocka_unit_test(test_a_durable_stream_knows_its_producers_after_a_restart),
    cmocka_unit_test(test_a_torn_durable_batch_is_completed_by_its_resend),
};

FX_TEST_MAIN(tests)
