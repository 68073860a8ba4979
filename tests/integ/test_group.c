/* Integration tests of consumer groups on a real broker (group_req.c,
 * group.c, group_state.c) spoken to in raw frames: the join exchange and its
 * refusals, competing delivery with no record given to two members, acks,
 * leases that lapse and come back with the next attempt, naks (now and
 * delayed), stale operations refused, dead letters after max deliveries,
 * the member window (5m) and the group cap (5g), and a leave that gives a
 * member's records to the others. */
/* fx-test-libs: fx_broker fx_storage fx_quic fx_wire fx_server fx_base */
#include <sys/stat.h>

#include "integ/broker_client.h"
#include "wire/group.h"

/* ---- what members received ---------------------------------------------------------------- */

#define MAX_RECS 20000

typedef struct grec {
    tstream *ev;
    uint64_t offset;
    uint32_t attempt;
    uint64_t skipped;
} grec;

static grec recs[MAX_RECS];
static size_t nrecs;

static void on_group(T *t, tstream *s, const fx_frame *f)
{
    assert_int_equal(f->hdr.flags, FX_FLAG_FELIXC);
    fx_wire_group_batch b;
    assert_int_equal(fx_wire_group_batch_decode(f->body, f->len, &b, NULL), 0);
    uint32_t k = 0;
    for (uint32_t r = 0; r < b.nruns; r++) {
        for (uint32_t i = 0; i < b.runs[r].count; i++, k++) {
            uint64_t off = b.runs[r].first + i;
            assert_true(nrecs < MAX_RECS);
            recs[nrecs++] = (grec){s, off, b.runs[r].attempt, i == 0 ? b.runs[r].skipped_before : 0};
            check_event(t, s, off, b.payloads[k]);
        }
    }
    s->events += k;
    fx_wire_group_batch_deinit(&b);
}

static T *group_t(void)
{
    nrecs = 0;
    T *t = t_new();
    t->size_of = size_small;
    t->on_group_frame = on_group;
    return t;
}

typedef struct member {
    tstream *join, *ev;
    uint64_t sub_id;
    uint32_t window;
} member;

/* auth offering the group frames; the broker must grant them. */
static void auth_groups(T *t, tstream *s)
{
    fx_msg m;
    fx_msg_init_auth(&m, "t1", "any-token", true, 63 | FX_FLAG_FELIXC);
    send_msg(s, &m);
    fx_msg r;
    expect_msg(t, s, FX_MSG_AUTH_OK, NULL, &r);
    assert_int_equal(r.server_flags, 63 | FX_FLAG_FELIXC);
    fx_msg_deinit(&r);
}

/* Joins |group| on |stream| from a new stream of |c|; |extra| is added to
 * the JSON (e.g. ",\"create\":\"all\""). */
static member join(T *t, tconn *c, const char *stream, const char *group, const char *extra)
{
    member mb = {0};
    mb.join = open_bidi(c);
    auth_groups(t, mb.join);
    char json[512];
    snprintf(json, sizeof(json),
             "{\"type\":\"group_join\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
             "\"stream\":\"%s\",\"group\":\"%s\"%s}",
             stream, group, extra != NULL ? extra : "");
    send_json(mb.join, json);
    tframe *f = next_reply(t, mb.join);
    json_error_t je;
    json_t *o = json_loadb((const char *)f->body, f->len, 0, &je);
    assert_non_null(o);
    const char *type = json_string_value(json_object_get(o, "type"));
    if (type == NULL || strcmp(type, "group_joined") != 0)
        fail_msg("join answered: %.*s", (int)f->len, (char *)f->body);
    mb.sub_id = (uint64_t)json_integer_value(json_object_get(o, "subscription_id"));
    mb.window = (uint32_t)json_integer_value(json_object_get(o, "window"));
    json_decref(o);
    tframe_free(f);
    sub_wait w = {c, mb.sub_id};
    assert_true(run_until_arg(t, sub_ready, &w, 3000));
    mb.ev = event_stream_of(c, mb.sub_id);
    return mb;
}

/* A join that must be refused with an error containing |want|. */
static void join_refused(T *t, tconn *c, const char *stream, const char *group, const char *extra,
                         const char *want)
{
    tstream *s = open_bidi(c);
    auth_groups(t, s);
    char json[512];
    snprintf(json, sizeof(json),
             "{\"type\":\"group_join\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
             "\"stream\":\"%s\",\"group\":\"%s\"%s}",
             stream, group, extra != NULL ? extra : "");
    send_json(s, json);
    fx_msg r;
    expect_msg(t, s, FX_MSG_ERROR, NULL, &r);
    if (strstr(r.message, want) == NULL)
        fail_msg("refusal '%s' does not say '%s'", r.message, want);
    fx_msg_deinit(&r);
    expect_end(t, s);
}

/* Sends one GROUP_ACKS of |n| ops with |rid| (0: no answer). */
static void send_ops(member *mb, const fx_wire_group_op *ops, uint32_t n, uint64_t rid)
{
    fx_wire_group_acks a = {.request_id = rid, .nops = n, .ops = (fx_wire_group_op *)ops};
    size_t size = fx_wire_group_acks_frame_size(&a);
    uint8_t *p = malloc(size);
    assert_non_null(p);
    assert_int_equal(fx_wire_group_acks_encode(&a, p, size), (ssize_t)size);
    send_bytes(mb->join, p, size);
    free(p);
}

static void ack(member *mb, uint64_t first, uint32_t count)
{
    fx_wire_group_op op = {.kind = FX_GROUP_OP_ACK, .first = first, .count = count};
    send_ops(mb, &op, 1, 0);
}

/* Waits for the GROUP_ACKED of |rid| on |mb|'s join stream. */
static void expect_acked(T *t, member *mb, uint64_t rid, fx_wire_group_acked *out)
{
    tframe *f = next_reply(t, mb->join);
    assert_int_equal(f->flags, FX_FLAG_FELIXC);
    assert_int_equal(fx_wire_group_acked_decode(f->body, f->len, out, NULL), 0);
    assert_int_equal(out->request_id, rid);
    tframe_free(f);
}

typedef struct count_wait {
    size_t n;
} count_wait;

static bool have_recs(T *t)
{
    count_wait *w = t->arg;
    return nrecs >= w->n;
}

static void wait_recs(T *t, size_t n, uint64_t ms)
{
    count_wait w = {n};
    if (!run_until_arg(t, have_recs, &w, ms))
        fail_msg("%zu deliveries, want %zu", nrecs, n);
}

static size_t recs_of(const member *mb)
{
    size_t n = 0;
    for (size_t i = 0; i < nrecs; i++)
        n += recs[i].ev == mb->ev;
    return n;
}

/* ---- cases -------------------------------------------------------------------------------- */

static void test_two_members_share_the_stream_and_no_record_goes_to_both(void **state)
{
    (void)state;
    T *t = group_t();
    t_start(t);
    tconn *c1 = t_connect(t), *c2 = t_connect(t);
    member a = join(t, c1, "work", "g", ",\"create\":\"all\",\"window\":16");
    member b = join(t, c2, "work", "g", ",\"window\":16");
    tstream *p = authed_stream(t, t_connect(t));
    const uint64_t n = 500;
    publish_range(t, p, "work", 0, n);
    /* Each member acks what it got until every record was handed out. */
    size_t acked = 0;
    uint8_t *seen = calloc(n, 1);
    assert_non_null(seen);
    uint64_t deadline = fx_now_ns() + 20000000000ull;
    while (acked < n && fx_now_ns() < deadline) {
        run_for(t, 5);
        for (; acked < nrecs; acked++) {
            grec *r = &recs[acked];
            assert_true(r->offset < n);
            assert_int_equal(r->attempt, 1);
            assert_int_equal(seen[r->offset], 0); /* never to two members */
            seen[r->offset] = 1;
            ack(r->ev == a.ev ? &a : &b, r->offset, 1);
        }
    }
    assert_int_equal(acked, n);
    assert_true(recs_of(&a) > 0 && recs_of(&b) > 0);
    assert_int_equal(a.ev->bad + b.ev->bad, 0);
    run_for(t, 100);
    assert_int_equal(nrecs, n); /* acked records are not delivered again */
    free(seen);
    t_free(t);
}

static void test_a_record_not_acked_comes_back_after_the_ack_wait_with_the_next_attempt(void **state)
{
    (void)state;
    T *t = group_t();
    t_start(t);
    member a = join(t, t_connect(t), "lease", "g", ",\"create\":\"all\",\"ack_wait_ms\":200");
    tstream *p = authed_stream(t, t_connect(t));
    publish_range(t, p, "lease", 0, 3);
    wait_recs(t, 3, 3000);
    ack(&a, 0, 1);
    ack(&a, 2, 1);
    uint64_t t0 = fx_now_ns();
    wait_recs(t, 4, 3000);
    uint64_t waited_ms = (fx_now_ns() - t0) / 1000000;
    assert_int_equal(recs[3].offset, 1);
    assert_int_equal(recs[3].attempt, 2);
    assert_true(waited_ms >= 150); /* not before its lease lapsed */
    ack(&a, 1, 1);
    run_for(t, 400);
    assert_int_equal(nrecs, 4);
    t_free(t);
}

static void test_nak_now_and_nak_with_a_delay_redeliver_when_asked(void **state)
{
    (void)state;
    T *t = group_t();
    t_start(t);
    member a = join(t, t_connect(t), "nak", "g", ",\"create\":\"all\"");
    tstream *p = authed_stream(t, t_connect(t));
    publish_range(t, p, "nak", 0, 2);
    wait_recs(t, 2, 3000);
    fx_wire_group_op now = {.kind = FX_GROUP_OP_NAK, .first = 0, .count = 1, .attempt = 1, .arg = 0};
    send_ops(&a, &now, 1, 0);
    wait_recs(t, 3, 1000);
    assert_int_equal(recs[2].offset, 0);
    assert_int_equal(recs[2].attempt, 2);
    fx_wire_group_op later = {
        .kind = FX_GROUP_OP_NAK, .first = 1, .count = 1, .attempt = 1, .arg = 300};
    uint64_t t0 = fx_now_ns();
    send_ops(&a, &later, 1, 0);
    wait_recs(t, 4, 3000);
    assert_int_equal(recs[3].offset, 1);
    assert_true((fx_now_ns() - t0) / 1000000 >= 250);
    t_free(t);
}

static void test_a_stale_nak_is_refused_and_a_late_ack_still_settles(void **state)
{
    (void)state;
    T *t = group_t();
    t_start(t);
    member a = join(t, t_connect(t), "stale", "g", ",\"create\":\"all\",\"ack_wait_ms\":100");
    tstream *p = authed_stream(t, t_connect(t));
    publish_range(t, p, "stale", 0, 1);
    wait_recs(t, 1, 3000);
    wait_recs(t, 2, 3000); /* lapsed: attempt 2 */
    assert_int_equal(recs[1].attempt, 2);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    fx_wire_group_op ops[2] = {
        {.kind = FX_GROUP_OP_NAK, .first = 0, .count = 1, .attempt = 1, .arg = 0},
        {.kind = FX_GROUP_OP_ACK, .first = 0, .count = 1, .attempt = 1},
    };
    send_ops(&a, ops, 2, 7);
    fx_wire_group_acked r;
    expect_acked(t, &a, 7, &r);
    assert_int_equal(r.nrefused, 1);
    assert_int_equal(r.refused[0].offset, 0);
    assert_int_equal(r.refused[0].why, FX_GROUP_WHY_STALE);
    assert_int_equal(r.floor, 1); /* the ack from the old attempt settled it */
    fx_wire_group_acked_deinit(&r);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, group_stale_ops), 1);
    run_for(t, 300);
    assert_int_equal(nrecs, 2);
    t_free(t);
}

static void test_a_record_delivered_max_attempts_times_is_dead_lettered(void **state)
{
    (void)state;
    T *t = group_t();
    t->bo.group_max_attempts = 2;
    t_start(t);
    member a = join(t, t_connect(t), "poison", "g", ",\"create\":\"all\"");
    tstream *p = authed_stream(t, t_connect(t));
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    publish_range(t, p, "poison", 0, 1);
    for (uint32_t attempt = 1; attempt <= 2; attempt++) {
        wait_recs(t, attempt, 3000);
        assert_int_equal(recs[attempt - 1].attempt, attempt);
        fx_wire_group_op nak = {
            .kind = FX_GROUP_OP_NAK, .first = 0, .count = 1, .attempt = attempt, .arg = 0};
        send_ops(&a, &nak, 1, attempt);
        fx_wire_group_acked r;
        expect_acked(t, &a, attempt, &r);
        assert_int_equal(r.nrefused, 0);
        fx_wire_group_acked_deinit(&r);
    }
    run_for(t, 300);
    assert_int_equal(nrecs, 2); /* no third delivery */
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, group_dead_max_deliver), 1);
    /* Settled: the floor moved past it. */
    fx_wire_group_op none = {.kind = FX_GROUP_OP_ACK, .first = 0, .count = 1};
    send_ops(&a, &none, 1, 9);
    fx_wire_group_acked r;
    expect_acked(t, &a, 9, &r);
    assert_int_equal(r.floor, 1);
    fx_wire_group_acked_deinit(&r);
    t_free(t);
}

static void test_a_member_holds_at_most_its_window_until_it_acks(void **state)
{
    (void)state;
    T *t = group_t();
    t_start(t);
    member a = join(t, t_connect(t), "win", "g", ",\"create\":\"all\",\"window\":4");
    assert_int_equal(a.window, 4);
    tstream *p = authed_stream(t, t_connect(t));
    publish_range(t, p, "win", 0, 20);
    wait_recs(t, 4, 3000);
    run_for(t, 200);
    assert_int_equal(nrecs, 4);
    ack(&a, 0, 2);
    wait_recs(t, 6, 3000);
    run_for(t, 100);
    assert_int_equal(nrecs, 6);
    t_free(t);
}

static void test_the_group_cap_pauses_every_member_and_resumes_on_an_ack(void **state)
{
    (void)state;
    T *t = group_t();
    t->bo.group_max_in_flight = 6;
    t_start(t);
    member a = join(t, t_connect(t), "cap", "g", ",\"create\":\"all\",\"window\":3");
    member b = join(t, t_connect(t), "cap", "g", ",\"window\":3");
    member c = join(t, t_connect(t), "cap", "g", ",\"window\":3");
    tstream *p = authed_stream(t, t_connect(t));
    publish_range(t, p, "cap", 0, 30);
    wait_recs(t, 6, 3000);
    run_for(t, 200);
    assert_int_equal(nrecs, 6); /* 5g: 6 in flight, whoever has room */
    (void)c;
    grec first = recs[0];
    ack(first.ev == a.ev ? &a : first.ev == b.ev ? &b : &c, first.offset, 1);
    wait_recs(t, 7, 3000);
    run_for(t, 100);
    assert_int_equal(nrecs, 7);
    t_free(t);
}

static void test_a_leaving_member_gives_its_records_to_the_others(void **state)
{
    (void)state;
    T *t = group_t();
    t_start(t);
    member a = join(t, t_connect(t), "leave", "g", ",\"create\":\"all\",\"window\":8");
    tstream *p = authed_stream(t, t_connect(t));
    publish_range(t, p, "leave", 0, 8);
    wait_recs(t, 8, 3000);
    member b = join(t, t_connect(t), "leave", "g", ",\"window\":8");
    run_for(t, 100);
    assert_int_equal(recs_of(&b), 0); /* a holds them all */
    fx_quic_stream_shutdown(a.join->tc->qc, a.join->sid); /* FIN: a leaves */
    wait_recs(t, 16, 3000);
    assert_int_equal(recs_of(&b), 8);
    for (size_t i = 8; i < 16; i++)
        assert_int_equal(recs[i].attempt, 2); /* a's delivery counted */
    t_free(t);
}

static void test_joins_that_cannot_be_served_are_refused_with_the_reason(void **state)
{
    (void)state;
    T *t = group_t();
    t_start(t);
    tconn *c = t_connect(t);
    tstream *p = authed_stream(t, c);
    publish_range(t, p, "ref", 0, 1);
    join_refused(t, c, "ref", "nope", "", "consumer group not found");
    char longname[130];
    memset(longname, 'g', 129);
    longname[129] = '\0';
    join_refused(t, c, "ref", longname, ",\"create\":\"all\"", "names must be 1 to 128 bytes");
    join_refused(t, c, "ref", "g", ",\"create\":{\"time_us\":1}", "a join does not create a group at a time");
    /* A group frame on a stream that joined nothing. */
    tstream *s = authed_stream(t, c);
    fx_wire_group_op op = {.kind = FX_GROUP_OP_ACK, .first = 0, .count = 1};
    member fake = {.join = s};
    send_ops(&fake, &op, 1, 0);
    fx_msg r;
    expect_msg(t, s, FX_MSG_ERROR, "group frame on a stream that joined no consumer group", &r);
    fx_msg_deinit(&r);
    expect_end(t, s);
    t_free(t);
}

static void test_the_group_bit_is_granted_only_to_a_client_that_offers_it(void **state)
{
    (void)state;
    T *t = group_t();
    t_start(t);
    tconn *c = t_connect(t);
    tstream *plain = authed_stream(t, c); /* auth() asserts server_flags 63 exactly */
    (void)plain;
    tstream *g = open_bidi(c);
    auth_groups(t, g); /* asserts 63 | 0x8000 */
    t_free(t);
}

static void test_the_backoff_delays_a_redelivery_after_a_lapse(void **state)
{
    (void)state;
    T *t = group_t();
    t->bo.group_backoff_ms[0] = 400;
    t->bo.group_nbackoff = 1;
    t_start(t);
    member a = join(t, t_connect(t), "bo", "g", ",\"create\":\"all\",\"ack_wait_ms\":100");
    (void)a;
    tstream *p = authed_stream(t, t_connect(t));
    publish_range(t, p, "bo", 0, 1);
    wait_recs(t, 1, 3000);
    uint64_t t0 = fx_now_ns();
    wait_recs(t, 2, 3000);
    uint64_t ms = (fx_now_ns() - t0) / 1000000;
    assert_int_equal(recs[1].attempt, 2);
    assert_true(ms >= 450); /* the 100 ms lease, then the 400 ms backoff */
    t_free(t);
}

static bool ev_finished(T *t)
{
    tstream *s = t->arg;
    return s->fin || s->closed;
}

static void test_deleting_the_stream_finishes_every_members_event_stream(void **state)
{
    (void)state;
    T *t = group_t();
    t_start(t);
    member a = join(t, t_connect(t), "gone", "g", ",\"create\":\"all\",\"window\":4");
    member b = join(t, t_connect(t), "gone", "g", ",\"window\":4");
    tstream *p = authed_stream(t, t_connect(t));
    publish_range(t, p, "gone", 0, 6);
    wait_recs(t, 6, 3000);
    fx_registry_err err;
    assert_int_equal(fx_broker_delete_stream(t->b, "t1", "default", "gone", &err), 0);
    assert_true(run_until_arg(t, ev_finished, a.ev, 3000));
    assert_true(run_until_arg(t, ev_finished, b.ev, 3000));
    char *js = NULL;
    assert_int_not_equal(fx_broker_list_groups(t->b, "t1", "default", "gone", "g", 1000000000ull,
                                               &js, &err),
                         0); /* gone with its stream */
    free(js);
    t_free(t);
}

static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deleting_the_stream_finishes_every_members_event_stream),
        cmocka_unit_test(test_the_backoff_delays_a_redelivery_after_a_lapse),
        cmocka_unit_test(test_two_members_share_the_stream_and_no_record_goes_to_both),
        cmocka_unit_test(test_a_record_not_acked_comes_back_after_the_ack_wait_with_the_next_attempt),
        cmocka_unit_test(test_nak_now_and_nak_with_a_delay_redeliver_when_asked),
        cmocka_unit_test(test_a_stale_nak_is_refused_and_a_late_ack_still_settles),
        cmocka_unit_test(test_a_record_delivered_max_attempts_times_is_dead_lettered),
        cmocka_unit_test(test_a_member_holds_at_most_its_window_until_it_acks),
        cmocka_unit_test(test_the_group_cap_pauses_every_member_and_resumes_on_an_ack),
        cmocka_unit_test(test_a_leaving_member_gives_its_records_to_the_others),
        cmocka_unit_test(test_joins_that_cannot_be_served_are_refused_with_the_reason),
        cmocka_unit_test(test_the_group_bit_is_granted_only_to_a_client_that_offers_it),
};

FX_TEST_MAIN(tests)
