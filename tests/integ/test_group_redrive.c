/* Integration test of dead-letter redrive and discard (docs/groups.md,
 * group_admin.c): a poison record terminated by a member is dead-lettered
 * and listed; a redrive delivers it again at attempt 1 and lists it as
 * redriven until the member acks it, then it is no longer listed; a
 * discard drops another entry; a second redrive or a discard of a record
 * that is not (or no longer) a dead letter is refused. On a durable stream
 * the list and a redriven record delivered but not acked come back after a
 * broker restart on the same storage root (a ring of 4 records: the
 * redriven ones are read from the log); on an in-memory stream a
 * redrive of a record the ring no longer holds is refused. The admin calls
 * are the broker's (fx_broker_redrive_group and friends, what the admin
 * routes call). In-process brokers; timeouts are hang guards only. */
/* fx-test-libs: fx_client fx_broker fx_storage fx_quic fx_wire fx_server fx_base */
#include "fx_test.h"
#include "integ/fixture.h"

#include <errno.h>
#include <jansson.h>

#include "felix/error.h"
#include "felix/felix.h"
#include "storage/syncpol.h"

static fx_client *client(fix_env *e)
{
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, "t1", "tok");
    o.reconnect = false;
    return fix_connect(&o);
}

static fx_group *join(fx_client *c, const char *stream, bool create)
{
    fx_group_opts o;
    fx_group_opts_init(&o);
    o.ns = NS;
    o.stream = stream;
    o.group = "g";
    o.window = 64;
    o.ack_wait_ms = 60000;
    fx_start all = {.kind = FX_START_EARLIEST};
    o.create = create ? &all : NULL;
    fx_group *g = NULL;
    int rv = fx_group_join(&g, c, &o);
    if (rv != 0) {
        char msg[256];
        fx_client_last_error(c, msg, sizeof(msg));
        fail_msg("join %s/g: %s (%s)", stream, fx_errname(rv), msg);
    }
    return g;
}

static void publish(fx_client *c, const char *stream, int first, int n)
{
    for (int i = first; i < first + n; i++) {
        char p[16];
        int len = snprintf(p, sizeof(p), "rec-%d", i);
        assert_int_equal(fx_publish(c, NS, stream, p, (size_t)len, FX_ACK_PER_MESSAGE), 0);
    }
}

/* The next record of |g|: offset |offset| at |attempt|, payload rec-N. */
static void expect_next(fx_group *g, uint64_t offset, uint32_t attempt)
{
    fx_group_msg m;
    assert_int_equal(fx_group_next(g, &m, HANG_MS), 0);
    if (m.offset != offset || m.attempt != attempt)
        fail_msg("got offset %llu attempt %u, want %llu at %u", (unsigned long long)m.offset,
                 m.attempt, (unsigned long long)offset, attempt);
    char want[16];
    int len = snprintf(want, sizeof(want), "rec-%llu", (unsigned long long)offset);
    assert_int_equal(m.len, (size_t)len);
    assert_memory_equal(m.payload, want, m.len);
}

static int cmp_word(const void *a, const void *b)
{
    long long x = atoll(*(char *const *)a), y = atoll(*(char *const *)b);
    return x < y ? -1 : x > y;
}

/* The dead-letter list of group g of |stream| as "offset[r]" words
 * (r: redriven) in offset order (the list is in dead-letter order, which
 * for records given up on in one pump is not the offsets'), e.g. "1 3r",
 * into |out|. */
static void dead_list(fix_env *e, const char *stream, char *out, size_t cap)
{
    char *js = NULL;
    fx_registry_err err = {0};
    assert_int_equal(
        fx_broker_group_dead_letters(e->b, "t1", NS, stream, "g", 5000000000ull, &js, &err), 0);
    json_error_t jerr;
    json_t *j = json_loads(js, 0, &jerr);
    assert_non_null(j);
    size_t i, n = 0, nw = 0;
    json_t *v;
    char words[16][24], *wp[16];
    json_array_foreach(json_object_get(j, "dead_letters"), i, v)
    {
        assert_true(nw < 16);
        snprintf(words[nw], sizeof(words[nw]), "%lld%s",
                 (long long)json_integer_value(json_object_get(v, "offset")),
                 json_is_true(json_object_get(v, "redriven")) ? "r" : "");
        wp[nw] = words[nw];
        nw++;
    }
    json_decref(j);
    qsort(wp, nw, sizeof(wp[0]), cmp_word);
    out[0] = '\0';
    for (i = 0; i < nw; i++) {
        n += (size_t)snprintf(out + n, cap - n, "%s%s", i > 0 ? " " : "", wp[i]);
        assert_true(n < cap);
    }
    free(js);
}

/* Waits until the list of |stream| reads |want|. */
static void wait_dead(fix_env *e, const char *stream, const char *want)
{
    char got[256] = "";
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    while (fx_now_ns() < deadline) {
        dead_list(e, stream, got, sizeof(got));
        if (strcmp(got, want) == 0)
            return;
        sleep_ms(10);
    }
    fail_msg("dead letters of %s: '%s', want '%s'", stream, got, want);
}

static int redrive(fix_env *e, const char *stream, uint64_t offset, fx_registry_err *err)
{
    *err = (fx_registry_err){0};
    return fx_broker_redrive_group(e->b, "t1", NS, stream, "g", offset, 5000000000ull, err);
}

static int discard(fix_env *e, const char *stream, uint64_t offset, fx_registry_err *err)
{
    *err = (fx_registry_err){0};
    return fx_broker_discard_group(e->b, "t1", NS, stream, "g", offset, 5000000000ull, err);
}

static void start_on(fix_env *e, const char *root)
{
    fix_durable_opts(&e->bo, root);
    e->bo.log_capacity = 4; /* the records below the ring are read from the log */
    fix_env_start(e);
}

/* The first broker: 0..4 taken, 1 and 3 terminated, the rest acked; 1
 * redriven, delivered at attempt 1 and acked; 3 discarded; then 5
 * terminated and redriven, and delivered (attempt 1) but not acked. */
static void first_run(const char *root)
{
    fix_env e;
    fix_env_init(&e, "gredr");
    start_on(&e, root);
    fx_client *c = client(&e);
    fx_registry_err err;
    publish(c, "jobs", 0, 5);
    fx_group *g = join(c, "jobs", true);
    for (uint64_t i = 0; i < 5; i++) {
        expect_next(g, i, 1);
        if (i == 1 || i == 3)
            assert_int_equal(fx_group_term(g, i, 1, "poison"), 0);
        else
            assert_int_equal(fx_group_ack(g, i), 0);
    }
    assert_int_equal(fx_group_ack_sync(g, HANG_MS), 0);
    wait_dead(&e, "jobs", "1 3");

    /* Redrive 1: listed as redriven, delivered again at attempt 1. */
    assert_int_equal(redrive(&e, "jobs", 1, &err), 0);
    wait_dead(&e, "jobs", "1r 3");
    assert_int_equal(redrive(&e, "jobs", 1, &err), -ESRCH);
    assert_string_equal(err.msg, "offset 1 is not a dead letter of g");
    assert_int_equal(discard(&e, "jobs", 1, &err), -ESRCH); /* redriven */
    assert_int_equal(redrive(&e, "jobs", 0, &err), -ESRCH); /* acked, never dead */
    assert_int_equal(redrive(&e, "jobs", 9, &err), -ESRCH); /* never delivered */
    expect_next(g, 1, 1);
    assert_int_equal(fx_group_ack(g, 1), 0);
    assert_int_equal(fx_group_ack_sync(g, HANG_MS), 0);
    wait_dead(&e, "jobs", "3"); /* acked: no longer listed */
    assert_int_equal(redrive(&e, "jobs", 1, &err), -ESRCH);

    /* Discard 3: gone from the list, not delivered again. */
    assert_int_equal(discard(&e, "jobs", 3, &err), 0);
    wait_dead(&e, "jobs", "");
    assert_int_equal(discard(&e, "jobs", 3, &err), -ESRCH);
    assert_int_equal(redrive(&e, "jobs", 3, &err), -ESRCH);

    /* 5 dead, redriven, taken at attempt 1 and left unacked. */
    publish(c, "jobs", 5, 1);
    expect_next(g, 5, 1);
    assert_int_equal(fx_group_term(g, 5, 1, "poison"), 0);
    assert_int_equal(fx_group_ack_sync(g, HANG_MS), 0);
    wait_dead(&e, "jobs", "5");
    assert_int_equal(redrive(&e, "jobs", 5, &err), 0);
    expect_next(g, 5, 1);
    assert_int_equal(fx_group_ack_sync(g, HANG_MS), 0); /* the journal has it all */
    fx_group_msg m;
    assert_int_equal(fx_group_next(g, &m, 200), FX_ETIMEDOUT);
    /* The broker stops with 5 held; the client goes after it. */
    fx_broker_free(e.b);
    e.b = NULL;
    fx_group_leave(g);
    fix_close(c);
    fix_env_deinit(&e);
}

static void test_redrive_and_discard_on_a_durable_stream_survive_a_restart(void **state)
{
    (void)state;
    char root[64] = "/tmp/fxgredrXXXXXX";
    assert_non_null(mkdtemp(root));
    first_run(root);
    fix_env e;
    fix_env_init(&e, "gredr");
    start_on(&e, root);
    fx_client *c = client(&e);
    fx_group *g = join(c, "jobs", false); /* it must exist */
    wait_dead(&e, "jobs", "5r");
    /* Delivered once before the restart: attempt 2 now, nothing else; read
     * from the log (this broker's ring holds no record). */
    expect_next(g, 5, 2);
    char *js = NULL;
    fx_registry_err err = {0};
    assert_int_equal(fx_broker_list_groups(e.b, "t1", NS, "jobs", "g", 5000000000ull, &js, &err),
                     0);
    json_error_t jerr;
    json_t *j = json_loads(js, 0, &jerr);
    assert_true(json_integer_value(json_object_get(j, "log_waits")) >= 1);
    json_decref(j);
    free(js);
    assert_int_equal(fx_group_ack(g, 5), 0);
    assert_int_equal(fx_group_ack_sync(g, HANG_MS), 0);
    wait_dead(&e, "jobs", "");
    fx_group_msg m;
    assert_int_equal(fx_group_next(g, &m, 200), FX_ETIMEDOUT);
    fx_group_leave(g);
    fix_close(c);
    fix_env_deinit(&e);

    /* And the ack of the redriven record removed its entry on disk. */
    fix_env_init(&e, "gredr");
    start_on(&e, root);
    c = client(&e);
    g = join(c, "jobs", false);
    char got[64];
    dead_list(&e, "jobs", got, sizeof(got));
    assert_string_equal(got, "");
    fx_group_leave(g);
    fix_close(c);
    fix_env_deinit(&e);
    fix_rm_dir(root);
}

static void test_redrive_of_a_record_the_ring_no_longer_holds_is_refused(void **state)
{
    (void)state;
    fix_env e;
    fix_env_init(&e, "gredr");
    e.bo.log_capacity = 8;
    fix_env_start(&e);
    fx_client *c = client(&e);
    fx_registry_err err;
    publish(c, "mem", 0, 2);
    fx_group *g = join(c, "mem", true);
    expect_next(g, 0, 1);
    assert_int_equal(fx_group_term(g, 0, 1, NULL), 0);
    expect_next(g, 1, 1);
    assert_int_equal(fx_group_term(g, 1, 1, NULL), 0);
    assert_int_equal(fx_group_ack_sync(g, HANG_MS), 0);
    wait_dead(&e, "mem", "0 1");
    /* Still in the ring: 1 can be redriven (and is acked). */
    assert_int_equal(redrive(&e, "mem", 1, &err), 0);
    expect_next(g, 1, 1);
    assert_int_equal(fx_group_ack(g, 1), 0);
    /* 20 more, each acked: the ring of 8 lets 0 go. */
    for (int i = 2; i < 22; i++) {
        publish(c, "mem", i, 1);
        expect_next(g, (uint64_t)i, 1);
        assert_int_equal(fx_group_ack(g, (uint64_t)i), 0);
    }
    assert_int_equal(fx_group_ack_sync(g, HANG_MS), 0);
    wait_dead(&e, "mem", "0");
    assert_int_equal(redrive(&e, "mem", 0, &err), FX_ECURSOR_TOO_OLD);
    assert_string_equal(err.msg, "offset 0 is no longer in the stream");
    /* It can still be discarded. */
    assert_int_equal(discard(&e, "mem", 0, &err), 0);
    wait_dead(&e, "mem", "");
    fx_group_leave(g);
    fix_close(c);
    fix_env_deinit(&e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_redrive_and_discard_on_a_durable_stream_survive_a_restart),
    cmocka_unit_test(test_redrive_of_a_record_the_ring_no_longer_holds_is_refused),
};

FX_TEST_MAIN(tests)
