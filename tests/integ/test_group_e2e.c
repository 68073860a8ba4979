/* End-to-end tests of consumer groups through libfelix (fx_group_*) against
 * an in-process broker: four members draining a backlog with one ack per
 * record and a ledger (every offset acked once, nothing delivered twice), a
 * poison record dead-lettered into the dead-letter stream with its payload,
 * a frozen member whose records come back to the others at its ack wait,
 * ack_sync, and a leave that gives untaken records back without counting an
 * attempt. */
/* fx-test-libs: fx_client fx_broker fx_storage fx_quic fx_wire fx_server fx_base */
#include <pthread.h>
#include <stdatomic.h>

#include "fx_test.h"
#include "integ/fixture.h"

#include "base/metrics.h"
#include "felix/felix.h"
#include "wire/wire.h"



static fx_client *client(fix_env *e)
{
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, "t1", "tok");
    return fix_connect(&o);
}

static fx_group *join(fx_client *c, const char *stream, const char *group, uint32_t window,
                      int ack_wait_ms, bool create)
{
    fx_group_opts o;
    fx_group_opts_init(&o);
    o.ns = NS;
    o.stream = stream;
    o.group = group;
    o.window = window;
    o.ack_wait_ms = ack_wait_ms;
    fx_start all = {.kind = FX_START_EARLIEST};
    o.create = create ? &all : NULL;
    fx_group *g = NULL;
    int rv = fx_group_join(&g, c, &o);
    if (rv != 0) {
        char msg[256];
        fx_client_last_error(NULL, msg, sizeof(msg));
        fail_msg("join %s/%s: %s (%s)", stream, group, fx_errname(rv), msg);
    }
    return g;
}

/* Publishes |n| records "rec-<i>" (i from |first|), acked, one per call. */
static void publish_n(fx_client *c, const char *stream, uint64_t first, uint64_t n)
{
    for (uint64_t i = first; i < first + n; i++) {
        char p[32];
        int len = snprintf(p, sizeof(p), "rec-%llu", (unsigned long long)i);
        assert_int_equal(fx_publish(c, NS, stream, p, (size_t)len, FX_ACK_PER_MESSAGE), 0);
    }
}

static uint64_t payload_index(const fx_group_msg *m)
{
    char buf[32];
    size_t n = m->len < sizeof(buf) - 1 ? m->len : sizeof(buf) - 1;
    memcpy(buf, m->payload, n);
    buf[n] = '\0';
    assert_true(strncmp(buf, "rec-", 4) == 0);
    return strtoull(buf + 4, NULL, 10);
}

/* ---- four members and a ledger ---------------------------------------------------------- */

#define LEDGER_N 4000

typedef struct worker {
    fx_group *g;
    _Atomic uint8_t *acked; /* per offset: times acked by the application */
    _Atomic uint64_t *done;
    uint64_t taken, redelivered;
    pthread_t th;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    while (atomic_load(w->done) < LEDGER_N) {
        fx_group_msg m;
        int rv = fx_group_next(w->g, &m, 50);
        if (rv == FX_ETIMEDOUT)
            continue;
        if (rv != 0)
            break;
        assert_true(m.offset < LEDGER_N);
        assert_int_equal(payload_index(&m), m.offset); /* the record's own payload */
        w->taken++;
        if (m.attempt > 1)
            w->redelivered++;
        atomic_fetch_add(&w->acked[m.offset], 1);
        assert_int_equal(fx_group_ack(w->g, m.offset), 0);
        atomic_fetch_add(w->done, 1);
    }
    return NULL;
}

static void test_four_members_drain_a_backlog_each_record_acked_exactly_once(void **state)
{
    (void)state;
    fix_env e;
    fix_env_init(&e, "grpe2e");
    e.bo.log_capacity = LEDGER_N * 2;
    fix_env_start(&e);
    fx_client *pub = client(&e);
    publish_n(pub, "ledger", 0, LEDGER_N);
    _Atomic uint8_t *acked = calloc(LEDGER_N, 1);
    _Atomic uint64_t done = 0;
    worker w[4];
    fx_client *cs[4];
    for (int i = 0; i < 4; i++) {
        cs[i] = client(&e);
        w[i] = (worker){.g = join(cs[i], "ledger", "g", 64, 30000, i == 0), .acked = acked,
                        .done = &done};
    }
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&w[i].th, NULL, work, &w[i]), 0);
    uint64_t deadline = fix_deadline_ns(20000);
    while (atomic_load(&done) < LEDGER_N && fx_now_ns() < deadline)
        sleep_ms(10);
    for (int i = 0; i < 4; i++)
        pthread_join(w[i].th, NULL);
    assert_int_equal(atomic_load(&done), LEDGER_N);
    uint64_t taken = 0;
    for (int i = 0; i < 4; i++) {
        taken += w[i].taken;
        assert_int_equal(w[i].redelivered, 0);
        assert_true(w[i].taken > 0); /* every member got work */
        assert_int_equal(fx_group_ack_sync(w[i].g, 5000), 0);
    }
    assert_int_equal(taken, LEDGER_N);
    for (uint64_t o = 0; o < LEDGER_N; o++)
        assert_int_equal(atomic_load(&acked[o]), 1);
    for (int i = 0; i < 4; i++) {
        fx_group_leave(w[i].g);
        fix_close(cs[i]);
    }
    fix_close(pub);
    free((void *)acked);
    fix_env_deinit(&e);
}

/* ---- poison ------------------------------------------------------------------------------ */

static void test_a_poison_record_is_dead_lettered_with_its_payload_and_the_rest_flows(void **state)
{
    (void)state;
    fix_env e;
    fix_env_init(&e, "grpe2e");
    e.bo.group_max_attempts = 3;
    fix_env_start(&e);
    fx_client *c = client(&e);
    publish_n(c, "jobs", 0, 50);
    fx_group *g = join(c, "jobs", "g", 16, 30000, true);
    uint32_t poison_deliveries = 0;
    uint64_t acked = 0;
    uint64_t deadline = fix_deadline_ns(10000);
    while (acked < 49 && fx_now_ns() < deadline) {
        fx_group_msg m;
        int rv = fx_group_next(g, &m, 100);
        if (rv == FX_ETIMEDOUT)
            continue;
        assert_int_equal(rv, 0);
        if (m.offset == 7) {
            poison_deliveries++;
            assert_int_equal(m.attempt, poison_deliveries);
            assert_int_equal(fx_group_nak(g, m.offset, m.attempt, 0), 0);
        } else {
            assert_int_equal(fx_group_ack(g, m.offset), 0);
            acked++;
        }
    }
    assert_int_equal(acked, 49);
    /* No fourth delivery of the poison record. */
    fx_group_msg m;
    assert_int_equal(fx_group_next(g, &m, 300), FX_ETIMEDOUT);
    assert_int_equal(poison_deliveries, 3);
    /* Its dead letter carries the source offset, the attempts and the payload. */
    fx_start from0 = {.kind = FX_START_EARLIEST};
    fx_subscription *dlq = fix_subscribe(c, "jobs.g.dlq", &from0);
    fx_event ev;
    assert_int_equal(fx_subscription_next(dlq, &ev, 3000), 0);
    assert_true(ev.len >= 29);
    assert_memory_equal(ev.payload, "FXDL", 4);
    assert_int_equal(fx_be64(ev.payload + 6), 7);  /* source offset */
    assert_int_equal(fx_be32(ev.payload + 14), 3); /* attempts */
    assert_int_equal(ev.payload[18], 1);           /* max_deliver */
    uint16_t glen = fx_be16(ev.payload + 27);
    assert_int_equal(glen, 1);
    assert_memory_equal(ev.payload + 29, "g", 1);
    assert_int_equal(ev.len - 29 - glen, 5);
    assert_memory_equal(ev.payload + 29 + glen, "rec-7", 5);
    fx_unsubscribe(dlq);
    fx_group_leave(g);
    fix_close(c);
    fix_env_deinit(&e);
}

/* ---- a frozen member -------------------------------------------------------------------- */

static void test_a_frozen_members_records_go_to_the_others_at_its_ack_wait(void **state)
{
    (void)state;
    fix_env e;
    fix_env_init(&e, "grpe2e");
    fix_env_start(&e);
    fx_client *pub = client(&e), *cf = client(&e), *cw = client(&e);
    /* The frozen member joins first and takes its window, then never reads. */
    fx_group *frozen = join(cf, "frz", "g", 8, 400, true);
    /* Its records are handed out after this instant, so their leases end
     * at least 400 ms after it (the second join below may take long on a
     * loaded machine: time is not counted from it). */
    uint64_t t0 = fx_now_ns();
    publish_n(pub, "frz", 0, 100);
    sleep_ms(100);
    fx_group *worker_g = join(cw, "frz", "g", 64, 30000, false);
    uint8_t seen[100] = {0};
    uint64_t got = 0, again = 0;
    uint64_t last_again_ns = 0;
    uint64_t deadline = fix_deadline_ns(10000);
    while (got < 100 && fx_now_ns() < deadline) {
        fx_group_msg m;
        int rv = fx_group_next(worker_g, &m, 100);
        if (rv == FX_ETIMEDOUT)
            continue;
        assert_int_equal(rv, 0);
        assert_true(m.offset < 100);
        assert_int_equal(seen[m.offset], 0);
        seen[m.offset] = 1;
        got++;
        if (m.attempt == 2) {
            again++;
            last_again_ns = fx_now_ns();
        }
        assert_int_equal(fx_group_ack(worker_g, m.offset), 0);
    }
    if (got != 100) { /* say where the missing records are */
        char *js = NULL;
        fx_broker_list_groups(e.b, "t1", NS, "frz", "g", 1000000000ull, &js, NULL);
        fprintf(stderr, "got %llu again %llu: %s\n", (unsigned long long)got,
                (unsigned long long)again, js);
        for (int i = 0; i < 100; i++)
            if (!seen[i])
                fprintf(stderr, "missing %d\n", i);
        free(js);
    }
    assert_int_equal(got, 100);
    assert_int_equal(again, 8); /* the frozen member's window, redelivered */
    assert_true((last_again_ns - t0) / 1000000 >= 399); /* after its ack wait, not before */
    fx_group_leave(worker_g);
    fx_group_leave(frozen);
    fix_close(cw);
    fix_close(cf);
    fix_close(pub);
    fix_env_deinit(&e);
}

/* ---- leave -------------------------------------------------------------------------------- */

static void test_leave_gives_untaken_records_back_without_counting_an_attempt(void **state)
{
    (void)state;
    fix_env e;
    fix_env_init(&e, "grpe2e");
    fix_env_start(&e);
    fx_client *ca = client(&e), *cb = client(&e);
    publish_n(ca, "lv", 0, 20);
    fx_group *a = join(ca, "lv", "g", 16, 30000, true);
    fx_group_msg m;
    assert_int_equal(fx_group_next(a, &m, 3000), 0);
    assert_int_equal(m.offset, 0);
    assert_int_equal(fx_group_ack(a, 0), 0);
    assert_int_equal(fx_group_ack_sync(a, 3000), 0);
    sleep_ms(100); /* a holds its window */
    fx_group_leave(a);
    fx_group *b = join(cb, "lv", "g", 32, 30000, false);
    uint64_t got = 0;
    uint64_t deadline = fix_deadline_ns(5000);
    while (got < 19 && fx_now_ns() < deadline) {
        int rv = fx_group_next(b, &m, 100);
        if (rv == FX_ETIMEDOUT)
            continue;
        assert_int_equal(rv, 0);
        assert_true(m.offset >= 1);
        assert_int_equal(m.attempt, 1); /* released, not counted */
        assert_int_equal(fx_group_ack(b, m.offset), 0);
        got++;
    }
    assert_int_equal(got, 19);
    fx_group_leave(b);
    fix_close(cb);
    fix_close(ca);
    fix_env_deinit(&e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_four_members_drain_a_backlog_each_record_acked_exactly_once),
    cmocka_unit_test(test_a_poison_record_is_dead_lettered_with_its_payload_and_the_rest_flows),
    cmocka_unit_test(test_a_frozen_members_records_go_to_the_others_at_its_ack_wait),
    cmocka_unit_test(test_leave_gives_untaken_records_back_without_counting_an_attempt),
};

FX_TEST_MAIN(tests)
