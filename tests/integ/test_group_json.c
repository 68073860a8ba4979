/* Integration tests of the original's JSON consumer-group requests on a
 * real broker (group_json.c, group_poll.c), spoken to in raw frames: one
 * request per bidi stream, one answer, then the stream is finished. Poll
 * and ack, a long poll woken by a publish or answered empty at its wait, a
 * nack and a lapse redelivered with the next attempt, a stale extend
 * refused stale_claim, a consumer dead letter listed, describe / seek /
 * delete, the refusals of what is not served or not valid, and auth_ok's
 * feature word. */
/* fx-test-libs: fx_broker fx_storage fx_quic fx_wire fx_server fx_base */
#include <time.h>

#include "integ/broker_client.h"

#include "auth/auth.h"
#include "server/authn.h"

/* What a client of the original's groups offers. */
#define FEATS                                                                                      \
    (FX_FEATURE_CONSUMER_GROUP | FX_FEATURE_GROUP_ADMIN | FX_FEATURE_GROUP_CLAIM_CONTROL |         \
     FX_FEATURE_GROUP_SKIPPED | FX_FEATURE_GROUP_DEAD_LETTERS | FX_FEATURE_ERROR_CODES)
/* What this broker advertises (group_json.h): 0x0940_4218. */
#define SERVED 188760604u

static T *gj_t(void)
{
    T *t = t_new();
    t->size_of = size_small;
    t_start(t);
    return t;
}

/* The token the next streams authenticate with. */
static const char *token = "any-token";

/* A new stream of |c| authenticated offering |features|. */
static tstream *fstream(T *t, tconn *c, uint32_t features)
{
    tstream *s = open_bidi(c);
    fx_msg m;
    fx_msg_init_auth(&m, "t1", token, true, 63);
    m.client_features = features;
    m.has_client_features = true;
    send_msg(s, &m);
    fx_msg r;
    expect_msg(t, s, FX_MSG_AUTH_OK, NULL, &r);
    assert_true(r.has_server_features);
    assert_int_equal(r.server_features, SERVED);
    fx_msg_deinit(&r);
    return s;
}

/* Sends the group request |json| on a new stream, sets |*out| to its one
 * answer (which must be |type|) and checks the stream then ends. */
static void request_as(T *t, tconn *c, uint32_t features, const char *json, fx_msg_type type,
                       fx_msg *out)
{
    tstream *s = fstream(t, c, features);
    send_json(s, json);
    fx_msg m;
    expect_msg(t, s, type, NULL, &m);
    expect_end(t, s);
    if (out != NULL)
        *out = m;
    else
        fx_msg_deinit(&m);
}

static void request(T *t, tconn *c, const char *json, fx_msg_type type, fx_msg *out)
{
    request_as(t, c, FEATS, json, type, out);
}

#define SCOPE(stream, group)                                                                       \
    "\"tenant_id\":\"t1\",\"namespace\":\"default\",\"stream\":\"" stream "\",\"shard\":0,"        \
    "\"group\":\"" group "\",\"request_id\":7"

/* A refusal: an error whose message holds |want| and, when |code| is not
 * NULL, whose code is |code| (NULL: no code field). */
static void refused(T *t, tconn *c, uint32_t features, const char *json, const char *want,
                    const char *code)
{
    fx_msg m;
    request_as(t, c, features, json, FX_MSG_ERROR, &m);
    if (strstr(m.message, want) == NULL)
        fail_msg("refusal '%s' does not say '%s'", m.message, want);
    if (code != NULL) {
        assert_true(m.has_code);
        assert_string_equal(m.code, code);
    } else {
        assert_false(m.has_code);
    }
    fx_msg_deinit(&m);
}

static void poll(T *t, tconn *c, const char *stream, const char *group, uint32_t max,
                 uint64_t wait_ms, const char *extra, fx_msg *out)
{
    char j[512];
    snprintf(j, sizeof(j),
             "{\"type\":\"group_poll\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
             "\"stream\":\"%s\",\"shard\":0,\"group\":\"%s\",\"max_records\":%u,"
             "\"wait_ms\":%llu,\"request_id\":7%s}",
             stream, group, max, (unsigned long long)wait_ms, extra != NULL ? extra : "");
    request(t, c, j, FX_MSG_GROUP_RECORDS, out);
}

/* An op naming |offset| ("group_ack", "group_nack", ...) with |extra| fields. */
static void op(T *t, tconn *c, const char *type, const char *stream, const char *group,
               uint64_t offset, const char *extra, fx_msg_type answer, fx_msg *out)
{
    char j[512];
    snprintf(j, sizeof(j),
             "{\"type\":\"%s\",\"tenant_id\":\"t1\",\"namespace\":\"default\",\"stream\":\"%s\","
             "\"shard\":0,\"group\":\"%s\",\"offset\":%llu,\"request_id\":7%s}",
             type, stream, group, (unsigned long long)offset, extra != NULL ? extra : "");
    request(t, c, j, answer, out);
}

static void ack(T *t, tconn *c, const char *stream, const char *group, uint64_t offset)
{
    op(t, c, "group_ack", stream, group, offset, NULL, FX_MSG_CACHE_OK, NULL);
}

/* Checks record |i| of |m|: |offset|, |attempts| and the payload the
 * harness published at that offset. */
static void check_rec(const fx_msg *m, size_t i, uint64_t offset, uint32_t attempts)
{
    assert_true(i < m->n_records);
    const fx_msg_group_record *r = &m->records[i];
    assert_int_equal(r->offset, offset);
    assert_int_equal(r->attempts, attempts);
    assert_int_equal(r->payload.len, size_small(offset));
    for (size_t j = 0; j < r->payload.len; j++)
        assert_int_equal(r->payload.p[j], pay_byte(offset, j));
}

static void publish(T *t, tconn *c, const char *stream, uint64_t first, uint32_t n)
{
    tstream *p = authed_stream(t, c);
    publish_acked(t, p, stream, first, n, 1);
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_auth_ok_carries_server_features_only_to_a_client_offering_features(void **state)
{
    (void)state;
    T *t = gj_t();
    tconn *c = t_connect(t);
    tstream *s = open_bidi(c);
    send_json(s, "{\"type\":\"auth\",\"tenant_id\":\"t1\",\"token\":\"x\",\"client_flags\":63,"
                 "\"client_features\":2056}");
    tframe *f = next_reply(t, s);
    const char *want = "{\"type\":\"auth_ok\",\"server_flags\":63,\"server_features\":188760604}";
    assert_int_equal(f->len, strlen(want));
    assert_memory_equal(f->body, want, f->len);
    tframe_free(f);
    tstream *o = open_bidi(c);
    send_json(o, "{\"type\":\"auth\",\"tenant_id\":\"t1\",\"token\":\"x\",\"client_flags\":63}");
    f = next_reply(t, o);
    want = "{\"type\":\"auth_ok\",\"server_flags\":63}";
    assert_int_equal(f->len, strlen(want));
    assert_memory_equal(f->body, want, f->len);
    tframe_free(f);
    t_free(t);
}

static void test_a_poll_hands_out_records_and_acks_settle_them(void **state)
{
    (void)state;
    T *t = gj_t();
    tconn *c = t_connect(t);
    publish(t, c, "gj", 0, 5);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    fx_msg m;
    poll(t, c, "gj", "g", 3, 0, NULL, &m);
    assert_int_equal(m.n_records, 3);
    for (size_t i = 0; i < 3; i++)
        check_rec(&m, i, i, 1);
    fx_msg_deinit(&m);
    poll(t, c, "gj", "g", 10, 0, NULL, &m); /* the rest, not what the first holds */
    assert_int_equal(m.n_records, 2);
    check_rec(&m, 0, 3, 1);
    check_rec(&m, 1, 4, 1);
    fx_msg_deinit(&m);
    for (uint64_t o = 0; o < 5; o++)
        ack(t, c, "gj", "g", o);
    ack(t, c, "gj", "g", 2); /* a duplicate is harmless */
    request(t, c, "{\"type\":\"group_describe\"," SCOPE("gj", "g") "}", FX_MSG_GROUP_INFO, &m);
    assert_true(m.has_committed);
    assert_int_equal(m.committed, 5);
    assert_int_equal(m.tail, 5);
    assert_int_equal(m.in_flight, 0);
    assert_int_equal(m.owed, 0);
    assert_int_equal(m.request_id, 7);
    fx_msg_deinit(&m);
    poll(t, c, "gj", "g", 10, 0, NULL, &m);
    assert_int_equal(m.n_records, 0);
    fx_msg_deinit(&m);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, group_json_requests), 10);
    assert_int_equal(DELTA(before, after, group_json_polls_empty), 1);
    t_free(t);
}

static bool answered(T *t)
{
    tstream *s = t->arg;
    return s->head != NULL;
}

/* Sends a poll on a new stream without waiting for its answer. */
static tstream *poll_start(T *t, tconn *c, const char *stream, const char *group, uint32_t max,
                           uint64_t wait_ms)
{
    tstream *s = fstream(t, c, FEATS);
    char j[512];
    snprintf(j, sizeof(j),
             "{\"type\":\"group_poll\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
             "\"stream\":\"%s\",\"shard\":0,\"group\":\"%s\",\"max_records\":%u,"
             "\"wait_ms\":%llu,\"request_id\":9}",
             stream, group, max, (unsigned long long)wait_ms);
    send_json(s, j);
    return s;
}

static void test_a_long_poll_is_answered_when_a_record_arrives(void **state)
{
    (void)state;
    T *t = gj_t();
    tconn *c = t_connect(t);
    publish(t, c, "lp", 0, 1);
    fx_msg m;
    request(t, c, "{\"type\":\"group_seek\"," SCOPE("lp", "g") ",\"start\":\"latest\"}",
            FX_MSG_GROUP_POSITION, &m);
    assert_int_equal(m.offset, 1);
    assert_true(m.moved);
    fx_msg_deinit(&m);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    tstream *s = poll_start(t, c, "lp", "g", 10, 10000);
    run_for(t, 200);
    assert_null(s->head); /* nothing yet: it waits */
    fx_metrics_snapshot_take(&after);
    assert_int_equal(after.g.group_json_polls_waiting - before.g.group_json_polls_waiting, 1);
    uint64_t t0 = fx_now_ns();
    publish(t, c, "lp", 1, 2);
    assert_true(run_until_arg(t, answered, s, 3000));
    assert_true(fx_now_ns() - t0 < 2000000000ull); /* at the publish, not at wait_ms */
    expect_msg(t, s, FX_MSG_GROUP_RECORDS, NULL, &m);
    assert_int_equal(m.request_id, 9);
    assert_true(m.n_records >= 1);
    check_rec(&m, 0, 1, 1);
    fx_msg_deinit(&m);
    expect_end(t, s);
    t_free(t);
}

static void test_a_poll_with_nothing_to_hand_out_is_answered_empty_at_its_wait(void **state)
{
    (void)state;
    T *t = gj_t();
    tconn *c = t_connect(t);
    publish(t, c, "to", 0, 1);
    fx_msg m;
    poll(t, c, "to", "g", 10, 0, NULL, &m);
    assert_int_equal(m.n_records, 1);
    fx_msg_deinit(&m);
    uint64_t t0 = fx_now_ns();
    poll(t, c, "to", "g", 10, 300, NULL, &m); /* offset 0 is held by the first poll */
    uint64_t took = fx_now_ns() - t0;
    assert_int_equal(m.n_records, 0);
    assert_true(took >= 250000000ull);
    fx_msg_deinit(&m);
    t_free(t);
}

static void test_a_nack_and_a_lapse_redeliver_with_the_next_attempt(void **state)
{
    (void)state;
    T *t = gj_t();
    tconn *c = t_connect(t);
    publish(t, c, "nk", 0, 2);
    fx_msg m;
    poll(t, c, "nk", "g", 1, 0, NULL, &m);
    check_rec(&m, 0, 0, 1);
    fx_msg_deinit(&m);
    op(t, c, "group_nack", "nk", "g", 0, ",\"attempts\":1", FX_MSG_CACHE_OK, NULL);
    poll(t, c, "nk", "g", 1, 0, NULL, &m);
    check_rec(&m, 0, 0, 2); /* owed records go out before new ones */
    fx_msg_deinit(&m);
    /* A short visibility lapses: the record comes back at attempt 3. */
    poll(t, c, "nk", "g", 1, 0, ",\"visibility_ms\":150", &m);
    check_rec(&m, 0, 1, 1);
    fx_msg_deinit(&m);
    run_for(t, 400);
    poll(t, c, "nk", "g", 1, 0, NULL, &m);
    check_rec(&m, 0, 1, 2);
    fx_msg_deinit(&m);
    /* The nack of the lapsed delivery names a claim that no longer stands. */
    char want[64];
    snprintf(want, sizeof(want), "the claim on offset 1 no longer stands");
    refused(t, c, FEATS,
            "{\"type\":\"group_nack\"," SCOPE("nk", "g") ",\"offset\":1,\"attempts\":1}", want,
            "stale_claim");
    t_free(t);
}

static void test_an_extend_of_a_claim_that_no_longer_stands_is_refused_stale(void **state)
{
    (void)state;
    T *t = gj_t();
    tconn *c = t_connect(t);
    publish(t, c, "ex", 0, 1);
    fx_msg m;
    poll(t, c, "ex", "g", 1, 0, ",\"visibility_ms\":200", &m);
    check_rec(&m, 0, 0, 1);
    fx_msg_deinit(&m);
    op(t, c, "group_extend", "ex", "g", 0, ",\"attempts\":1,\"extend_ms\":1000",
       FX_MSG_GROUP_EXTENDED, &m);
    assert_int_equal(m.visible_ms, 1000);
    fx_msg_deinit(&m);
    run_for(t, 400); /* past the first visibility: the extension holds */
    poll(t, c, "ex", "g", 1, 0, NULL, &m);
    assert_int_equal(m.n_records, 0);
    fx_msg_deinit(&m);
    refused(t, c, FEATS,
            "{\"type\":\"group_extend\"," SCOPE(
                "ex", "g") ",\"offset\":0,\"attempts\":2,\"extend_ms\":1000}",
            "the claim on offset 0 no longer stands", "stale_claim");
    refused(t, c, FEATS,
            "{\"type\":\"group_extend\"," SCOPE(
                "ex", "g") ",\"offset\":0,\"attempts\":1,\"extend_ms\":0}",
            "extend_ms must be above 0", "invalid_request");
    t_free(t);
}

static void test_a_consumer_dead_letter_is_listed_and_finished(void **state)
{
    (void)state;
    T *t = gj_t();
    tconn *c = t_connect(t);
    publish(t, c, "dl", 0, 3);
    fx_msg m;
    poll(t, c, "dl", "g", 3, 0, NULL, &m);
    assert_int_equal(m.n_records, 3);
    fx_msg_deinit(&m);
    op(t, c, "group_dead_letter", "dl", "g", 2, NULL, FX_MSG_CACHE_OK, NULL);
    op(t, c, "group_dead_letter", "dl", "g", 1, NULL, FX_MSG_CACHE_OK, NULL);
    request(t, c, "{\"type\":\"group_dead_letters\"," SCOPE("dl", "g") "}",
            FX_MSG_GROUP_DEAD_LETTER_LIST, &m);
    assert_int_equal(m.n_offsets, 2);
    assert_int_equal(m.offsets[0], 1); /* lowest first */
    assert_int_equal(m.offsets[1], 2);
    fx_msg_deinit(&m);
    refused(t, c, FEATS, "{\"type\":\"group_dead_letter\"," SCOPE("dl", "g") ",\"offset\":1}",
            "already finished", "invalid_request");
    ack(t, c, "dl", "g", 0);
    request(t, c, "{\"type\":\"group_describe\"," SCOPE("dl", "g") "}", FX_MSG_GROUP_INFO, &m);
    assert_int_equal(m.committed, 3);
    assert_int_equal(m.dead_letters, 2);
    fx_msg_deinit(&m);
    t_free(t);
}

/* group_redrive owes a dead letter again (attempts start over, no longer
 * listed); group_discard forgets one; neither takes what is not a dead
 * letter. */
static void test_a_dead_letter_is_redriven_or_discarded(void **state)
{
    (void)state;
    T *t = gj_t();
    tconn *c = t_connect(t);
    publish(t, c, "rd", 0, 3);
    fx_msg m;
    poll(t, c, "rd", "g", 3, 0, NULL, &m);
    assert_int_equal(m.n_records, 3);
    fx_msg_deinit(&m);
    op(t, c, "group_dead_letter", "rd", "g", 1, NULL, FX_MSG_CACHE_OK, NULL);
    op(t, c, "group_dead_letter", "rd", "g", 2, NULL, FX_MSG_CACHE_OK, NULL);
    ack(t, c, "rd", "g", 0);
    op(t, c, "group_redrive", "rd", "g", 1, NULL, FX_MSG_CACHE_OK, NULL);
    refused(t, c, FEATS, "{\"type\":\"group_redrive\"," SCOPE("rd", "g") ",\"offset\":1}",
            "not a dead letter", "invalid_request"); /* redriven already */
    refused(t, c, FEATS, "{\"type\":\"group_discard\"," SCOPE("rd", "g") ",\"offset\":1}",
            "not a dead letter", "invalid_request");
    request(t, c, "{\"type\":\"group_dead_letters\"," SCOPE("rd", "g") "}",
            FX_MSG_GROUP_DEAD_LETTER_LIST, &m);
    assert_int_equal(m.n_offsets, 1); /* 1 is owed again */
    assert_int_equal(m.offsets[0], 2);
    fx_msg_deinit(&m);
    poll(t, c, "rd", "g", 3, 0, NULL, &m);
    assert_int_equal(m.n_records, 1);
    check_rec(&m, 0, 1, 1); /* offset 1, attempt 1 again */
    fx_msg_deinit(&m);
    ack(t, c, "rd", "g", 1);
    op(t, c, "group_discard", "rd", "g", 2, NULL, FX_MSG_CACHE_OK, NULL);
    refused(t, c, FEATS, "{\"type\":\"group_discard\"," SCOPE("rd", "g") ",\"offset\":2}",
            "not a dead letter", "invalid_request");
    request(t, c, "{\"type\":\"group_describe\"," SCOPE("rd", "g") "}", FX_MSG_GROUP_INFO, &m);
    assert_int_equal(m.dead_letters, 0);
    fx_msg_deinit(&m);
    t_free(t);
}

static void test_describe_seek_and_delete_a_group(void **state)
{
    (void)state;
    T *t = gj_t();
    tconn *c = t_connect(t);
    publish(t, c, "sk", 0, 3);
    fx_msg m;
    request(t, c, "{\"type\":\"group_seek\"," SCOPE("sk", "s") ",\"start\":\"earliest\"}",
            FX_MSG_GROUP_POSITION, &m);
    assert_int_equal(m.offset, 0);
    assert_true(m.moved);
    fx_msg_deinit(&m);
    request(
        t, c,
        "{\"type\":\"group_seek\"," SCOPE("sk", "s") ",\"start\":{\"offset\":2},\"if_new\":true}",
        FX_MSG_GROUP_POSITION, &m);
    assert_int_equal(m.offset, 0);
    assert_false(m.moved); /* it exists */
    fx_msg_deinit(&m);
    request(t, c, "{\"type\":\"group_describe\"," SCOPE("sk", "s") "}", FX_MSG_GROUP_INFO, &m);
    assert_int_equal(m.committed, 0);
    assert_int_equal(m.tail, 3);
    fx_msg_deinit(&m);
    request(t, c, "{\"type\":\"group_seek\"," SCOPE("sk", "s") ",\"start\":{\"offset\":2}}",
            FX_MSG_GROUP_POSITION, &m);
    assert_int_equal(m.offset, 2);
    assert_true(m.moved);
    fx_msg_deinit(&m);
    poll(t, c, "sk", "s", 10, 0, NULL, &m);
    assert_int_equal(m.n_records, 1);
    check_rec(&m, 0, 2, 1);
    fx_msg_deinit(&m);
    refused(t, c, FEATS, "{\"type\":\"group_seek\"," SCOPE("sk", "s") ",\"start\":{\"offset\":9}}",
            "outside what the stream holds", "invalid_request");
    request(t, c, "{\"type\":\"group_delete\"," SCOPE("sk", "s") "}", FX_MSG_GROUP_DELETED, &m);
    assert_true(m.existed);
    fx_msg_deinit(&m);
    request(t, c, "{\"type\":\"group_delete\"," SCOPE("sk", "s") "}", FX_MSG_GROUP_DELETED, &m);
    assert_false(m.existed);
    fx_msg_deinit(&m);
    refused(t, c, FEATS, "{\"type\":\"group_describe\"," SCOPE("sk", "s") "}", "not found",
            "not_found");
    t_free(t);
}

static void test_requests_not_served_or_not_valid_are_refused_clearly(void **state)
{
    (void)state;
    T *t = gj_t();
    tconn *c = t_connect(t);
    publish(t, c, "rf", 0, 3);
    fx_msg m;
    poll(t, c, "rf", "g", 1, 0, NULL, &m); /* next 1, tail 3 */
    fx_msg_deinit(&m);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    refused(t, c, FEATS, "{\"type\":\"group_discard\"," SCOPE("rf", "g") ",\"offset\":0}",
            "not a dead letter", "invalid_request");
    refused(t, c, FEATS,
            "{\"type\":\"group_poll\"," SCOPE("rf", "g") ",\"max_records\":1,\"reclaim\":true}",
            "reclaim is not served", "invalid_request");
    refused(t, c, FEATS,
            "{\"type\":\"group_describe\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
            "\"stream\":\"rf\",\"shard\":3,\"group\":\"g\",\"request_id\":7}",
            "serves shard 0 only", "invalid_request");
    refused(t, c, FEATS, "{\"type\":\"group_describe\"," SCOPE("nosuch", "g") "}",
            "stream not found", "not_found");
    /* Below the tail but never handed out: a stale claim; past it: invalid. */
    refused(t, c, FEATS, "{\"type\":\"group_ack\"," SCOPE("rf", "g") ",\"offset\":2}",
            "offset 2 was not handed out by this group (next is 1); the claim is stale",
            "stale_claim");
    refused(t, c, FEATS, "{\"type\":\"group_ack\"," SCOPE("rf", "g") ",\"offset\":7}",
            "offset 7 was not handed out by this group (next is 1)", "invalid_request");
    /* No code to a client that does not offer FEATURE_ERROR_CODES. */
    refused(t, c, FX_FEATURE_CONSUMER_GROUP,
            "{\"type\":\"group_ack\"," SCOPE("rf", "g") ",\"offset\":7}", "was not handed out",
            NULL);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, group_json_refused_unsupported), 1); /* reclaim */
    assert_int_equal(DELTA(before, after, group_json_refused_invalid), 4);
    assert_int_equal(DELTA(before, after, group_json_refused_not_found), 1);
    assert_int_equal(DELTA(before, after, group_json_refused_stale), 1);
    t_free(t);
}

/* Polls "dur" until the records [0, |want|) came, in order, each once (held,
 * not acked), or 5 s passed. */
static void drain_durable(T *t, tconn *c, uint64_t want)
{
    uint64_t next = 0, deadline = fx_now_ns() + 5000000000ull;
    for (int polls = 1; next < want && fx_now_ns() < deadline; polls++) {
        if (polls % 60 == 0)
            c = t_connect(t); /* 64 streams a connection */
        fx_msg m;
        poll(t, c, "dur", "g", 16, 200, NULL, &m);
        for (size_t i = 0; i < m.n_records; i++) {
            check_rec(&m, i, next, 1);
            next++;
        }
        fx_msg_deinit(&m);
    }
    assert_int_equal(next, want);
}

static void test_a_durable_stream_is_polled_from_its_log_below_the_ring(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    char root[128];
    snprintf(root, sizeof(root), "%s/durable", t->dir);
    t->bo.durable.dir = root;
    t->bo.durable.fsync_mode = FX_FSYNC_NONE;
    t->bo.durable.max_records_per_read = 8;
    t->bo.log_capacity = 16;
    t_start(t);
    bool created = false, durable = false;
    fx_registry_err err;
    assert_int_equal(
        fx_broker_create_stream_durable(t->b, "t1", "default", "dur", 1, &created, &durable, &err),
        0);
    assert_true(durable);
    tconn *c = t_connect(t);
    for (uint32_t k = 0; k < 5; k++)
        publish_acked(t, authed_stream(t, c), "dur", k * 10, 10, 1 + k);
    tconn *c2 = t_connect(t); /* a new connection: 64 streams each */
    drain_durable(t, c2, 50); /* 50 records, a ring of 16: most come from the log */
    tconn *c3 = t_connect(t);
    fx_msg m;
    request(t, c3, "{\"type\":\"group_describe\"," SCOPE("dur", "g") "}", FX_MSG_GROUP_INFO, &m);
    assert_int_equal(m.tail, 50);
    assert_int_equal(m.in_flight, 50);
    fx_msg_deinit(&m);
    for (uint64_t o = 0; o < 50; o += 1) {
        if (o % 40 == 39)
            c3 = t_connect(t);
        ack(t, c3, "dur", "g", o);
    }
    tconn *c4 = t_connect(t);
    request(t, c4, "{\"type\":\"group_describe\"," SCOPE("dur", "g") "}", FX_MSG_GROUP_INFO, &m);
    assert_int_equal(m.committed, 50);
    assert_int_equal(m.in_flight, 0);
    fx_msg_deinit(&m);
    t_free(t);
}

/* A JWT for t1 signed with |priv| granting |perms|. */
static char *mint_t1(const uint8_t *priv, const char *const *perms, size_t n)
{
    fx_auth_mint_claims mc = {.sub = "tester",
                              .tid = "t1",
                              .iat = (int64_t)time(NULL),
                              .has_iat = true,
                              .exp = (int64_t)time(NULL) + 3600,
                              .perms = perms,
                              .nperms = n};
    char *tok = NULL;
    assert_int_equal(fx_auth_mint(priv, "k1", &mc, &tok), 0);
    return tok;
}

static void test_group_requests_need_group_consume_or_group_manage(void **state)
{
    (void)state;
    T *t = t_new();
    t->size_of = size_small;
    uint8_t pub[FX_AUTH_KEY_BYTES], priv[FX_AUTH_KEY_BYTES];
    assert_int_equal(fx_auth_keygen(pub, priv), 0);
    char jwks[128];
    snprintf(jwks, sizeof(jwks), "%s/jwks.json", t->dir);
    FILE *f = fopen(jwks, "w");
    assert_non_null(f);
    assert_int_equal(fx_auth_jwks_write(f, "k1", pub), 0);
    assert_int_equal(fclose(f), 0);
    char why[512];
    fx_authn *an = NULL;
    fx_authn_opts ao = {.jwks_file = jwks, .leeway_s = 60};
    if (fx_authn_new(&an, &ao, why, sizeof(why)) != 0)
        fail_msg("authn: %s", why);
    fx_authn_broker_auth(an, &t->bo.auth);
    t_start(t);
    static const char *const consume[] = {"stream.publish:stream:t1/*/*",
                                          "group.consume:stream:t1/default/*"};
    static const char *const publish_only[] = {"stream.publish:stream:t1/*/*"};
    char *tc = mint_t1(priv, consume, 2), *tp = mint_t1(priv, publish_only, 1);
    tconn *c = t_connect(t);
    token = tc;
    tstream *p = fstream(t, c, 0);
    publish_acked(t, p, "au", 0, 2, 1);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    fx_msg m;
    poll(t, c, "au", "g", 5, 0, NULL, &m); /* group.consume */
    assert_int_equal(m.n_records, 2);
    fx_msg_deinit(&m);
    refused(t, c, FEATS, "{\"type\":\"group_seek\"," SCOPE("au", "g") ",\"start\":\"latest\"}",
            "needs group.manage", "forbidden");
    refused(t, c, FEATS, "{\"type\":\"group_delete\"," SCOPE("au", "g") "}", "needs group.manage",
            "forbidden");
    token = tp;
    refused(t, c, FEATS, "{\"type\":\"group_describe\"," SCOPE("au", "g") "}",
            "needs group.consume", "forbidden");
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, group_json_refused_forbidden), 3);
    token = "any-token";
    free(tc);
    free(tp);
    t_free(t);
    fx_authn_free(an);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_auth_ok_carries_server_features_only_to_a_client_offering_features),
    cmocka_unit_test(test_a_poll_hands_out_records_and_acks_settle_them),
    cmocka_unit_test(test_a_long_poll_is_answered_when_a_record_arrives),
    cmocka_unit_test(test_a_poll_with_nothing_to_hand_out_is_answered_empty_at_its_wait),
    cmocka_unit_test(test_a_nack_and_a_lapse_redeliver_with_the_next_attempt),
    cmocka_unit_test(test_an_extend_of_a_claim_that_no_longer_stands_is_refused_stale),
    cmocka_unit_test(test_a_consumer_dead_letter_is_listed_and_finished),
    cmocka_unit_test(test_a_dead_letter_is_redriven_or_discarded),
    cmocka_unit_test(test_describe_seek_and_delete_a_group),
    cmocka_unit_test(test_requests_not_served_or_not_valid_are_refused_clearly),
    cmocka_unit_test(test_a_durable_stream_is_polled_from_its_log_below_the_ring),
    cmocka_unit_test(test_group_requests_need_group_consume_or_group_manage),
};

FX_TEST_MAIN(tests)
