/* Integration test of a consumer group on a durable stream across a
 * restart (src/broker/group_journal.c): a member acks some records and
 * confirms them with ack_sync, leaves others delivered and not acked; the
 * broker stops and a new one starts on the same storage root; the group is
 * still there, no confirmed record is delivered again, and every other one
 * comes back at attempt 2. Joins on durable streams are refused until
 * groups read below the ring (the gpage work): until then the test reports
 * itself skipped. In-process brokers; timeouts are hang guards only. */
/* fx-test-libs: fx_client fx_broker fx_storage fx_quic fx_wire fx_server fx_base */
#include "fx_test.h"
#include "integ/fixture.h"

#include "felix/felix.h"
#include "storage/syncpol.h"

#define N 20
#define ACKED 5
#define TAKEN 10

static fx_client *client(fix_env *e)
{
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, "t1", "tok");
    o.reconnect = false;
    return fix_connect(&o);
}

/* Joins group |group| of |stream| (created from the start when |create|);
 * NULL when joins on durable streams are not served (the test skips). */
static fx_group *join(fx_client *c, const char *stream, const char *group, bool create)
{
    fx_group_opts o;
    fx_group_opts_init(&o);
    o.ns = NS;
    o.stream = stream;
    o.group = group;
    o.window = 64;
    o.ack_wait_ms = 60000;
    fx_start all = {.kind = FX_START_EARLIEST};
    o.create = create ? &all : NULL;
    fx_group *g = NULL;
    int rv = fx_group_join(&g, c, &o);
    if (rv != 0) {
        char msg[256];
        fx_client_last_error(c, msg, sizeof(msg));
        if (strstr(msg, "not served yet") != NULL)
            return NULL;
        fail_msg("join %s/%s: %s (%s)", stream, group, fx_errname(rv), msg);
    }
    return g;
}

static void start_on(fix_env *e, const char *root)
{
    fix_durable_opts(&e->bo, root);
    fix_env_start(e);
}

/* The first broker: |N| records, |TAKEN| taken, the first |ACKED| acked
 * and confirmed. Returns false when groups on durable streams are not
 * served. */
static bool first_run(const char *root)
{
    fix_env e;
    fix_env_init(&e, "gpers");
    start_on(&e, root);
    fx_client *c = client(&e);
    for (int i = 0; i < N; i++) {
        char p[16];
        int len = snprintf(p, sizeof(p), "rec-%d", i);
        assert_int_equal(fx_publish(c, NS, "jobs", p, (size_t)len, FX_ACK_PER_MESSAGE), 0);
    }
    fx_group *g = join(c, "jobs", "g", true);
    if (g == NULL) {
        fix_close(c);
        fix_env_deinit(&e);
        return false;
    }
    for (uint64_t i = 0; i < TAKEN; i++) {
        fx_group_msg m;
        assert_int_equal(fx_group_next(g, &m, HANG_MS), 0);
        assert_int_equal(m.offset, i);
        assert_int_equal(m.attempt, 1);
        if (i < ACKED)
            assert_int_equal(fx_group_ack(g, m.offset), 0);
    }
    assert_int_equal(fx_group_ack_sync(g, HANG_MS), 0);
    /* The broker stops with the rest held (no leave, which would give back
     * what the application has not taken); the client goes after it. */
    fx_broker_free(e.b);
    e.b = NULL;
    fx_group_leave(g);
    fix_close(c);
    fix_env_deinit(&e);
    return true;
}

static void test_a_group_survives_a_restart_and_confirmed_acks_are_not_delivered_again(void **state)
{
    (void)state;
    char root[64] = "/tmp/fxgpersXXXXXX";
    assert_non_null(mkdtemp(root));
    if (!first_run(root)) {
        fix_rm_dir(root);
        fx_test_skip("consumer groups on durable streams are not served yet");
        return;
    }
    fix_env e;
    fix_env_init(&e, "gpers");
    start_on(&e, root);
    fx_client *c = client(&e);
    fx_group *g = join(c, "jobs", "g", false); /* it must exist */
    assert_non_null(g);
    bool seen[N] = {false};
    for (int k = ACKED; k < N; k++) {
        fx_group_msg m;
        assert_int_equal(fx_group_next(g, &m, HANG_MS), 0);
        if (m.offset < ACKED)
            fail_msg("offset %llu was acked and confirmed before the restart",
                     (unsigned long long)m.offset);
        assert_false(seen[m.offset]);
        seen[m.offset] = true;
        char want[16];
        int len = snprintf(want, sizeof(want), "rec-%llu", (unsigned long long)m.offset);
        if (m.len != (size_t)len || memcmp(m.payload, want, m.len) != 0)
            fail_msg("offset %llu: payload '%.*s'", (unsigned long long)m.offset, (int)m.len,
                     (const char *)m.payload);
        /* Delivered before the restart (all N were, in the member's window). */
        assert_int_equal(m.attempt, 2);
        assert_int_equal(fx_group_ack(g, m.offset), 0);
    }
    assert_int_equal(fx_group_ack_sync(g, HANG_MS), 0);
    fx_group_msg m;
    assert_int_equal(fx_group_next(g, &m, 200), FX_ETIMEDOUT);
    fx_group_leave(g);
    fix_close(c);
    fix_env_deinit(&e);
    fix_rm_dir(root);
}

/* A delayed nak waits out the rest of its delay across a restart (the
 * journal keeps its time on the wall clock), not redelivered at once. */
static void test_a_delayed_nak_waits_out_its_delay_across_a_restart(void **state)
{
    (void)state;
    char root[64] = "/tmp/fxgnakXXXXXX";
    assert_non_null(mkdtemp(root));
    fix_env e;
    fix_env_init(&e, "gnak");
    start_on(&e, root);
    fx_client *c = client(&e);
    assert_int_equal(fx_publish(c, NS, "naks", "r0", 2, FX_ACK_PER_MESSAGE), 0);
    fx_group *g = join(c, "naks", "g", true);
    assert_non_null(g);
    fx_group_msg m;
    assert_int_equal(fx_group_next(g, &m, HANG_MS), 0);
    assert_int_equal(m.offset, 0);
    uint64_t t_nak = fx_now_ns();
    assert_int_equal(fx_group_nak(g, 0, m.attempt, 2500), 0);
    assert_int_equal(fx_group_ack_sync(g, HANG_MS), 0); /* the nak is journaled */
    fx_broker_free(e.b);
    e.b = NULL;
    fx_group_leave(g);
    fix_close(c);
    fix_env_deinit(&e);

    fix_env_init(&e, "gnak");
    start_on(&e, root);
    c = client(&e);
    g = join(c, "naks", "g", false);
    assert_non_null(g);
    assert_int_equal(fx_group_next(g, &m, HANG_MS), 0);
    uint64_t waited_ms = (fx_now_ns() - t_nak) / 1000000;
    if (waited_ms < 2400)
        fail_msg("redelivered %llu ms after a nak of 2500 ms", (unsigned long long)waited_ms);
    assert_int_equal(m.offset, 0);
    assert_int_equal(m.attempt, 2);
    assert_int_equal(fx_group_ack(g, 0), 0);
    assert_int_equal(fx_group_ack_sync(g, HANG_MS), 0);
    fx_group_leave(g);
    fix_close(c);
    fix_env_deinit(&e);
    fix_rm_dir(root);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_a_group_survives_a_restart_and_confirmed_acks_are_not_delivered_again),
    cmocka_unit_test(test_a_delayed_nak_waits_out_its_delay_across_a_restart),
};

FX_TEST_MAIN(tests)
