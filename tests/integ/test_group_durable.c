/* Integration tests of consumer groups on a durable stream (group.c,
 * group_page.c) through libfelix (fx_group_*) against an in-process broker
 * whose ring holds only the last 16 records: a group created at `all`
 * reads what is below the ring from the log, one page at a time, and two
 * members drain every offset exactly once with its payload; a record nak'd
 * after its page moved on is read again and redelivered at attempt 2; a
 * record terminated there lands in the dead-letter stream with its
 * payload; records retention deleted, before the group came or while it
 * waited, are skipped and said so, never a silent gap. */
/* fx-test-libs: fx_client fx_broker fx_storage fx_quic fx_wire fx_server fx_base */
#include "fx_test.h"
#include "integ/fixture.h"

#include "base/metrics.h"
#include "felix/felix.h"
#include "storage/syncpol.h"
#include "wire/wire.h"

#define RING 16
#define PAGE 32

/* A broker with durable storage under its state dir, a ring of RING records
 * and log pages of PAGE records; with |retain|, segments of 512 bytes (a
 * dozen records) of which retention keeps about 1 KiB. */
static void env_start_with(fix_env *e, char *root, size_t cap, bool retain)
{
    fix_env_init(e, "grpdur");
    snprintf(root, cap, "%s/durable", e->dir);
    e->bo.durable.dir = root;
    e->bo.durable.fsync_mode = FX_FSYNC_NONE;
    e->bo.durable.max_records_per_read = PAGE;
    if (retain) {
        e->bo.durable.segment_bytes = 512;
        e->bo.durable.retention_bytes = 1024;
    }
    e->bo.log_capacity = RING;
    fix_env_start(e);
}

static void env_start(fix_env *e, char *root, size_t cap)
{
    env_start_with(e, root, cap, false);
}

static fx_client *client(fix_env *e)
{
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, "t1", "tok");
    return fix_connect(&o);
}

/* Makes durable stream |stream| and publishes |n| records "rec-<i>", acked
 * one by one: all but the last RING are below the ring. */
static void durable_n(fix_env *e, fx_client *c, const char *stream, uint64_t n)
{
    bool created = false, durable = false;
    fx_registry_err err;
    assert_int_equal(
        fx_broker_create_stream_durable(e->b, "t1", NS, stream, 1, &created, &durable, &err), 0);
    assert_true(created && durable);
    for (uint64_t i = 0; i < n; i++) {
        char p[32];
        int len = snprintf(p, sizeof(p), "rec-%llu", (unsigned long long)i);
        assert_int_equal(fx_publish(c, NS, stream, p, (size_t)len, FX_ACK_PER_MESSAGE), 0);
    }
}

/* Checks that |m|'s payload is "rec-<its offset>". */
static void check_payload(const fx_group_msg *m)
{
    char want[32];
    int len = snprintf(want, sizeof(want), "rec-%llu", (unsigned long long)m->offset);
    if (m->len != (size_t)len || memcmp(m->payload, want, m->len) != 0)
        fail_msg("offset %llu carries '%.*s'", (unsigned long long)m->offset, (int)m->len,
                 (const char *)m->payload);
}

/* Joins group "g" of |stream|, creating it at |create| (NULL: it exists). */
static fx_group *join_at(fx_client *c, const char *stream, uint32_t window, const fx_start *create)
{
    fx_group_opts o;
    fx_group_opts_init(&o);
    o.ns = NS;
    o.stream = stream;
    o.group = "g";
    o.window = window;
    o.create = create;
    fx_group *g = NULL;
    int rv = fx_group_join(&g, c, &o);
    if (rv != 0) {
        char msg[256];
        fx_client_last_error(NULL, msg, sizeof(msg));
        fail_msg("join %s: %s (%s)", stream, fx_errname(rv), msg);
    }
    return g;
}

static fx_group *join(fx_client *c, const char *stream, uint32_t window, bool create)
{
    fx_start all = {.kind = FX_START_EARLIEST};
    return join_at(c, stream, window, create ? &all : NULL);
}

/* Takes and acks what |g| hands out until |end|, checking that each offset
 * comes once, at attempt 1, with its payload. Returns the first message's
 * offset and its skipped count in |*pskipped|. */
static uint64_t drain_to(fx_group *g, uint64_t end, uint64_t *pskipped)
{
    uint64_t first = UINT64_MAX, next = 0;
    uint64_t deadline = fix_deadline_ns(20000);
    while ((first == UINT64_MAX || next < end) && fx_now_ns() < deadline) {
        fx_group_msg m;
        int rv = fx_group_next(g, &m, 20);
        if (rv == FX_ETIMEDOUT)
            continue;
        assert_int_equal(rv, 0);
        if (first == UINT64_MAX) {
            first = m.offset;
            *pskipped = m.skipped;
        } else {
            assert_int_equal(m.offset, next); /* one member: in offset order */
            assert_int_equal(m.skipped, 0);
        }
        assert_int_equal(m.attempt, 1);
        check_payload(&m);
        assert_int_equal(fx_group_ack(g, m.offset), 0);
        next = m.offset + 1;
    }
    assert_int_equal(next, end);
    return first;
}

/* ---- two members drain it ---------------------------------------------------------------- */

#define DRAIN_N 600

static void test_two_members_drain_a_durable_stream_below_its_ring_exactly_once(void **state)
{
    (void)state;
    fix_env e;
    char root[128];
    env_start(&e, root, sizeof(root));
    fx_client *pub = client(&e), *ca = client(&e), *cb = client(&e);
    durable_n(&e, pub, "jobs", DRAIN_N);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    fx_group *g[2] = {join(ca, "jobs", 32, true), join(cb, "jobs", 32, false)};
    uint8_t seen[DRAIN_N] = {0};
    uint64_t acked = 0, per[2] = {0};
    uint64_t deadline = fix_deadline_ns(30000);
    while (acked < DRAIN_N && fx_now_ns() < deadline) {
        for (int i = 0; i < 2; i++) {
            fx_group_msg m;
            int rv = fx_group_next(g[i], &m, 5);
            if (rv == FX_ETIMEDOUT)
                continue;
            assert_int_equal(rv, 0);
            assert_true(m.offset < DRAIN_N);
            assert_int_equal(m.attempt, 1);
            assert_int_equal(m.skipped, 0);
            assert_int_equal(seen[m.offset], 0); /* never twice, never to both */
            seen[m.offset] = 1;
            check_payload(&m);
            assert_int_equal(fx_group_ack(g[i], m.offset), 0);
            acked++;
            per[i]++;
        }
    }
    assert_int_equal(acked, DRAIN_N);
    assert_true(per[0] > 0 && per[1] > 0);
    for (int i = 0; i < 2; i++) {
        fx_group_msg m;
        assert_int_equal(fx_group_next(g[i], &m, 200), FX_ETIMEDOUT);
    }
    fx_metrics_snapshot_take(&after);
    /* Most records came from the log, a page of at most PAGE at a time. */
    assert_true(DELTA(before, after, group_log_pages) >= (DRAIN_N - RING) / PAGE);
    assert_int_equal(DELTA(before, after, group_log_read_errors), 0);
    assert_int_equal(DELTA(before, after, group_delivered), DRAIN_N);
    fx_group_leave(g[0]);
    fx_group_leave(g[1]);
    fix_close(ca);
    fix_close(cb);
    fix_close(pub);
    fix_env_deinit(&e);
}

/* ---- a nak and a term below the ring ----------------------------------------------------- */

#define ONE_N 200
#define HELD 3 /* the record kept back until its page moved on */

/* Takes and acks every record but HELD (kept at attempt 1) from |g|. */
static void drain_but_held(fx_group *g)
{
    uint64_t acked = 0;
    bool held = false;
    uint64_t deadline = fix_deadline_ns(20000);
    while ((acked < ONE_N - 1 || !held) && fx_now_ns() < deadline) {
        fx_group_msg m;
        int rv = fx_group_next(g, &m, 20);
        if (rv == FX_ETIMEDOUT)
            continue;
        assert_int_equal(rv, 0);
        assert_int_equal(m.attempt, 1);
        check_payload(&m);
        if (m.offset == HELD) {
            held = true;
            continue;
        }
        assert_int_equal(fx_group_ack(g, m.offset), 0);
        acked++;
    }
    assert_true(held);
    assert_int_equal(acked, ONE_N - 1);
}

static void test_a_nakd_record_below_the_ring_comes_back_from_the_log_at_attempt_2(void **state)
{
    (void)state;
    fix_env e;
    char root[128];
    env_start(&e, root, sizeof(root));
    fx_client *c = client(&e);
    durable_n(&e, c, "nak", ONE_N);
    fx_group *g = join(c, "nak", 8, true);
    drain_but_held(g);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    /* The page holds the last records read by now, not HELD. */
    assert_int_equal(fx_group_nak(g, HELD, 1, 0), 0);
    fx_group_msg m;
    assert_int_equal(fx_group_next(g, &m, 3000), 0);
    assert_int_equal(m.offset, HELD);
    assert_int_equal(m.attempt, 2);
    check_payload(&m);
    assert_int_equal(fx_group_ack(g, m.offset), 0);
    assert_int_equal(fx_group_next(g, &m, 200), FX_ETIMEDOUT);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, group_log_pages), 1);
    assert_int_equal(DELTA(before, after, group_redelivered), 1);
    fx_group_leave(g);
    fix_close(c);
    fix_env_deinit(&e);
}

static void test_a_record_terminated_below_the_ring_is_dead_lettered_with_its_payload(void **state)
{
    (void)state;
    fix_env e;
    char root[128];
    env_start(&e, root, sizeof(root));
    fx_client *c = client(&e);
    durable_n(&e, c, "term", ONE_N);
    fx_group *g = join(c, "term", 8, true);
    drain_but_held(g);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    assert_int_equal(fx_group_term(g, HELD, 1, "poison"), 0);
    assert_int_equal(fx_group_ack_sync(g, 3000), 0);
    fx_start from0 = {.kind = FX_START_EARLIEST};
    fx_subscription *dlq = fix_subscribe(c, "term.g.dlq", &from0);
    fx_event ev;
    assert_int_equal(fx_subscription_next(dlq, &ev, 3000), 0);
    assert_true(ev.len >= 29);
    assert_memory_equal(ev.payload, "FXDL", 4);
    assert_int_equal(fx_be64(ev.payload + 6), HELD); /* source offset */
    assert_int_equal(fx_be32(ev.payload + 14), 1);   /* attempts */
    assert_int_equal(ev.payload[18], 2);             /* term */
    uint16_t glen = fx_be16(ev.payload + 27);
    assert_int_equal(glen, 1);
    assert_int_equal(ev.len - 29 - glen, 5);
    assert_memory_equal(ev.payload + 29 + glen, "rec-3", 5);
    fx_unsubscribe(dlq);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, group_dead_term), 1);
    assert_true(DELTA(before, after, group_log_pages) >= 1);
    fx_group_msg m;
    assert_int_equal(fx_group_next(g, &m, 200), FX_ETIMEDOUT);
    fx_group_leave(g);
    fix_close(c);
    fix_env_deinit(&e);
}

/* ---- retention outranks a group --------------------------------------------------------- */

static void test_records_retention_deleted_before_the_group_came_are_skipped(void **state)
{
    (void)state;
    fix_env e;
    char root[128];
    env_start_with(&e, root, sizeof(root), true);
    fx_client *c = client(&e);
    durable_n(&e, c, "ret", ONE_N);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    fx_start at0 = {.kind = FX_START_OFFSET, .offset = 0};
    fx_group *g = join_at(c, "ret", 8, &at0);
    uint64_t skipped = 0, first = drain_to(g, ONE_N, &skipped);
    /* The log lost its head: the group starts at its first offset and says
     * how many it skipped; everything the log holds comes, once. */
    assert_true(first > 0 && first < ONE_N - RING);
    assert_int_equal(skipped, first);
    fx_metrics_snapshot_take(&after);
    assert_true(DELTA(before, after, group_log_pages) >= 1);
    assert_int_equal(DELTA(before, after, group_log_read_errors), 0);
    fx_group_leave(g);
    fix_close(c);
    fix_env_deinit(&e);
}

static void test_records_retention_deletes_while_a_group_waits_are_skipped_when_read(void **state)
{
    (void)state;
    fix_env e;
    char root[128];
    env_start_with(&e, root, sizeof(root), true);
    fx_client *c = client(&e);
    durable_n(&e, c, "late", 1);
    fx_group *g = join(c, "late", 1, true);
    /* The member takes offset 0 and holds it while the log moves on. */
    fx_group_msg m;
    assert_int_equal(fx_group_next(g, &m, 3000), 0);
    assert_int_equal(m.offset, 0);
    for (uint64_t i = 1; i < ONE_N; i++) {
        char p[32];
        int len = snprintf(p, sizeof(p), "rec-%llu", (unsigned long long)i);
        assert_int_equal(fx_publish(c, NS, "late", p, (size_t)len, FX_ACK_PER_MESSAGE), 0);
    }
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    assert_int_equal(fx_group_ack(g, 0), 0);
    /* Offset 1 was in the log when the group came and is gone now: the read
     * at 1 finds the log's first offset, what is below it is skipped. */
    uint64_t skipped = 0, first = drain_to(g, ONE_N, &skipped);
    assert_true(first > 1 && first < ONE_N - RING);
    assert_int_equal(skipped, first - 1);
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, group_log_read_errors), 0);
    fx_group_leave(g);
    fix_close(c);
    fix_env_deinit(&e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_two_members_drain_a_durable_stream_below_its_ring_exactly_once),
    cmocka_unit_test(test_a_nakd_record_below_the_ring_comes_back_from_the_log_at_attempt_2),
    cmocka_unit_test(test_a_record_terminated_below_the_ring_is_dead_lettered_with_its_payload),
    cmocka_unit_test(test_records_retention_deleted_before_the_group_came_are_skipped),
    cmocka_unit_test(test_records_retention_deletes_while_a_group_waits_are_skipped_when_read),
};

FX_TEST_MAIN(tests)
