/* Unit tests for the consumer-group engine (group_state.c): dispatch in
 * offset order as contiguous runs with fair share, the 5g/5m/5p checkpoints,
 * ack/nak/in_progress/term/release with attempt fencing, lease expiry and
 * backoff on the timer wheel, dead letters, ring eviction, seek, restore,
 * the observer's events, memory, redrive, and a randomized check against a
 * model (redrives included). */
/* fx-test-libs: fx_broker fx_base */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "broker/group_state.h"
#include "fx_test.h"

#define MS 1000ull
#define T0 (1000000ull * MS) /* a clock that does not start at 0 */

/* ---- fixture ------------------------------------------------------------- */

static uint32_t len_of(void *user, uint64_t offset)
{
    (void)offset;
    return user != NULL ? *(uint32_t *)user : 100;
}

static fxb_gs_config base_cfg(void)
{
    fxb_gs_config c;
    fxb_gs_config_default(&c);
    c.ack_wait_ms = 1000;
    c.max_ack_wait_ms = 5000;
    c.max_ack_pending = 1000;
    c.max_parked = 1000;
    c.member_window_max = 1000;
    c.max_run = 64;
    return c;
}

static fxb_gs *gs_new(const fxb_gs_config *c, uint64_t start)
{
    const char *why = NULL;
    assert_int_equal(fxb_gs_config_check(c, &why), 0);
    fxb_gs *g = fxb_gs_new(c, start);
    assert_non_null(g);
    return g;
}

static uint32_t add_member(fxb_gs *g, uint32_t window)
{
    uint32_t id;
    assert_int_equal(fxb_gs_member_add(g, window, 0, &id), 0);
    return id;
}

static fxb_gs_view view(uint64_t low, uint64_t tail)
{
    return (fxb_gs_view){.low = low, .tail = tail, .len = len_of};
}

static size_t pump(fxb_gs *g, uint64_t low, uint64_t tail, uint64_t now, fxb_gs_run *out,
                   size_t cap)
{
    fxb_gs_view v = view(low, tail);
    size_t nd = 0;
    fxb_gs_dead d[4];
    return fxb_gs_pump(g, &v, now, out, cap, d, 4, &nd);
}

static fxb_gs_info info(const fxb_gs *g)
{
    fxb_gs_info i;
    fxb_gs_get_info(g, &i);
    return i;
}

typedef struct evlog {
    fxb_gs_event ev[64];
    size_t n;
} evlog;

static void on_event(void *user, const fxb_gs_event *e)
{
    evlog *l = user;
    if (l->n < 64)
        l->ev[l->n] = *e;
    l->n++;
}

/* ---- dispatch ------------------------------------------------------------- */

static void test_first_deliveries_go_out_in_offset_order_as_contiguous_runs(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.max_run = 4;
    fxb_gs *g = gs_new(&c, 10);
    uint32_t m = add_member(g, 100);
    fxb_gs_run r[8];
    size_t n = pump(g, 0, 20, T0, r, 8);
    assert_int_equal(n, 3);
    uint64_t expect = 10;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(r[i].member, m);
        assert_int_equal(r[i].first, expect);
        assert_int_equal(r[i].attempt, 1);
        expect += r[i].count;
    }
    assert_int_equal(expect, 20);
    assert_int_equal(info(g).next, 20);
    assert_int_equal(info(g).acquired, 10);
    assert_int_equal(fxb_gs_member_held(g, m), 10);
    fxb_gs_free(g);
}

static void test_a_run_is_capped_at_max_run(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.max_run = 5;
    fxb_gs *g = gs_new(&c, 0);
    add_member(g, 100);
    fxb_gs_run r[1];
    assert_int_equal(pump(g, 0, 100, T0, r, 1), 1);
    assert_int_equal(r[0].count, 5);
    assert_int_equal(info(g).next, 5);
    fxb_gs_free(g);
}

static void test_two_members_share_by_held_over_window(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.max_run = 2;
    fxb_gs *g = gs_new(&c, 0);
    uint32_t a = add_member(g, 10), b = add_member(g, 20);
    fxb_gs_run r[64];
    size_t n = pump(g, 0, 12, T0, r, 64);
    assert_true(n >= 6);
    /* 12 records: each turn gives each one run of 2, least loaded first.
     * With windows 10 and 20 both get a share, b at least as much as a. */
    uint32_t ha = fxb_gs_member_held(g, a), hb = fxb_gs_member_held(g, b);
    assert_int_equal(ha + hb, 12);
    assert_true(ha >= 4 && hb >= 4);
    assert_true(hb >= ha);
    /* The first two runs went to different members. */
    assert_int_not_equal(r[0].member, r[1].member);
    fxb_gs_free(g);
}

static void test_full_window_stops_that_member_only_and_counts_member_full(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.max_run = 8;
    fxb_gs *g = gs_new(&c, 0);
    uint32_t a = add_member(g, 2), b = add_member(g, 5);
    fxb_gs_run r[16];
    pump(g, 0, 100, T0, r, 16);
    assert_int_equal(fxb_gs_member_held(g, a), 2);
    assert_int_equal(fxb_gs_member_held(g, b), 5);
    assert_int_equal(fxb_gs_stats_of(g)->member_full, 2);
    /* a acks: only a gets more; b, still full, counted again. */
    fxb_gs_ack(g, 0, 2, T0, NULL);
    pump(g, 0, 100, T0, r, 16);
    assert_int_equal(fxb_gs_member_held(g, a), 2);
    assert_int_equal(fxb_gs_member_held(g, b), 5);
    assert_int_equal(info(g).next, 9);
    assert_int_equal(fxb_gs_stats_of(g)->member_full, 4);
    fxb_gs_free(g);
}

static void test_5g_cap_stops_first_deliveries_but_not_redeliveries_until_an_ack(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.max_ack_pending = 4;
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_run r[8];
    assert_int_equal(pump(g, 0, 100, T0, r, 8), 1);
    assert_int_equal(r[0].count, 4);
    /* The member still had room and records were waiting: capped. */
    assert_int_equal(fxb_gs_stats_of(g)->capped, 1);
    assert_int_equal(info(g).capped_since_us, T0);
    assert_int_equal(pump(g, 0, 100, T0 + 5, r, 8), 0);
    assert_int_equal(fxb_gs_stats_of(g)->capped, 2);
    assert_int_equal(info(g).capped_since_us, T0);
    /* A nak(0) still goes out again while capped. */
    assert_int_equal(fxb_gs_nak(g, m, 1, 1, 0, T0 + 10), FXB_GS_OK);
    assert_int_equal(pump(g, 0, 100, T0 + 10, r, 8), 1);
    assert_int_equal(r[0].first, 1);
    assert_int_equal(r[0].attempt, 2);
    assert_int_equal(info(g).next, 4);
    /* One ack frees one slot: the next turn delivers exactly one. */
    assert_int_equal(fxb_gs_ack(g, 0, 1, T0 + 11, NULL), 1);
    assert_int_equal(info(g).capped_since_us, 0);
    assert_int_equal(pump(g, 0, 100, T0 + 12, r, 8), 1);
    assert_int_equal(r[0].first, 4);
    assert_int_equal(r[0].count, 1);
    fxb_gs_free(g);
}

static void test_5g_byte_cap_stops_first_deliveries(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.max_ack_pending_bytes = 250;
    fxb_gs *g = gs_new(&c, 0);
    add_member(g, 100);
    fxb_gs_run r[8];
    pump(g, 0, 100, T0, r, 8); /* 100 bytes each: the third passes the cap */
    assert_int_equal(info(g).next, 3);
    assert_int_equal(info(g).pending_bytes, 300);
    assert_int_equal(pump(g, 0, 100, T0, r, 8), 0);
    assert_int_equal(fxb_gs_stats_of(g)->capped, 2);
    fxb_gs_free(g);
}

/* ---- acks -------------------------------------------------------------------- */

static void test_ack_out_of_order_keeps_the_floor_until_the_gap_closes(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    add_member(g, 100);
    fxb_gs_run r[4];
    pump(g, 0, 10, T0, r, 4);
    assert_int_equal(fxb_gs_ack(g, 1, 3, T0, NULL), 3);
    assert_int_equal(info(g).floor, 0);
    assert_int_equal(fxb_gs_ack(g, 5, 5, T0, NULL), 5);
    assert_int_equal(info(g).floor, 0);
    assert_int_equal(fxb_gs_ack(g, 0, 1, T0, NULL), 1);
    assert_int_equal(info(g).floor, 4);
    assert_int_equal(fxb_gs_ack(g, 4, 1, T0, NULL), 1);
    assert_int_equal(info(g).floor, 10);
    assert_int_equal(info(g).acquired, 0);
    fxb_gs_free(g);
}

static void test_ack_of_an_offset_never_handed_out_is_invalid(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    add_member(g, 100);
    fxb_gs_run r[4];
    pump(g, 0, 3, T0, r, 4);
    uint32_t bad = 0;
    assert_int_equal(fxb_gs_ack(g, 2, 4, T0, &bad), 1);
    assert_int_equal(bad, 3);
    assert_int_equal(fxb_gs_stats_of(g)->invalid, 3);
    assert_int_equal(fxb_gs_nak(g, 0, 7, 1, 0, T0), FXB_GS_INVALID);
    assert_int_equal(info(g).next, 3);
    fxb_gs_free(g);
}

static void test_late_and_duplicate_acks_are_harmless(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_run r[4];
    pump(g, 0, 4, T0, r, 4);
    assert_int_equal(fxb_gs_ack(g, 2, 1, T0, NULL), 1);
    assert_int_equal(fxb_gs_ack(g, 2, 1, T0, NULL), 0); /* settled above the floor */
    assert_int_equal(fxb_gs_ack(g, 0, 2, T0, NULL), 2);
    assert_int_equal(fxb_gs_ack(g, 0, 3, T0, NULL), 0); /* below the floor */
    assert_int_equal(fxb_gs_stats_of(g)->duplicate_acks, 4);
    assert_int_equal(fxb_gs_stats_of(g)->acked, 3);
    assert_int_equal(fxb_gs_nak(g, m, 2, 1, 0, T0), FXB_GS_DUPLICATE);
    assert_int_equal(info(g).floor, 3);
    assert_int_equal(info(g).acquired, 1);
    assert_int_equal(fxb_gs_member_held(g, m), 1);
    fxb_gs_free(g);
}

/* ---- timers -------------------------------------------------------------------- */

static void test_lapsed_lease_redelivers_with_the_next_attempt_after_the_backoff(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.n_backoff = 2;
    c.backoff_ms[0] = 50;
    c.backoff_ms[1] = 200;
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_run r[4];
    pump(g, 0, 1, T0, r, 4);
    assert_int_equal(fxb_gs_next_deadline(g), T0 + 1000 * MS);
    assert_int_equal(fxb_gs_expire(g, T0 + 999 * MS), 0);
    /* 3 ms late: bucket "<= 5 ms". */
    assert_int_equal(fxb_gs_expire(g, T0 + 1003 * MS), 1);
    assert_int_equal(fxb_gs_stats_of(g)->expired, 1);
    assert_int_equal(fxb_gs_stats_of(g)->late[5], 1);
    assert_int_equal(fxb_gs_stats_of(g)->late_sum_us, 3 * MS);
    assert_int_equal(fxb_gs_member_held(g, m), 0);
    assert_int_equal(info(g).parked, 1);
    assert_int_equal(fxb_gs_next_deadline(g), T0 + 1050 * MS);
    assert_int_equal(pump(g, 0, 1, T0 + 1010 * MS, r, 4), 0);
    assert_int_equal(fxb_gs_expire(g, T0 + 1050 * MS), 1);
    assert_int_equal(pump(g, 0, 1, T0 + 1050 * MS, r, 4), 1);
    assert_int_equal(r[0].first, 0);
    assert_int_equal(r[0].attempt, 2);
    assert_int_equal(fxb_gs_stats_of(g)->redelivered, 1);
    assert_int_equal(fxb_gs_stats_of(g)->delivered, 2);
    fxb_gs_free(g);
}

static void test_nak_zero_is_immediate(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.n_backoff = 1;
    c.backoff_ms[0] = 500;
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_run r[4];
    pump(g, 0, 3, T0, r, 4);
    assert_int_equal(fxb_gs_nak(g, m, 1, 1, 0, T0 + 1), FXB_GS_OK);
    assert_int_equal(info(g).available, 1);
    assert_int_equal(info(g).parked, 0);
    assert_int_equal(pump(g, 0, 3, T0 + 1, r, 4), 1);
    assert_int_equal(r[0].first, 1);
    assert_int_equal(r[0].attempt, 2);
    fxb_gs_free(g);
}

static void test_nak_without_delay_honours_the_backoff(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.n_backoff = 2;
    c.backoff_ms[0] = 30;
    c.backoff_ms[1] = 70;
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_run r[4];
    pump(g, 0, 1, T0, r, 4);
    assert_int_equal(fxb_gs_nak(g, m, 0, 1, FXB_GS_BACKOFF, T0), FXB_GS_OK);
    assert_int_equal(info(g).parked, 1);
    assert_int_equal(fxb_gs_next_deadline(g), T0 + 30 * MS);
    assert_int_equal(fxb_gs_expire(g, T0 + 30 * MS), 1);
    pump(g, 0, 1, T0 + 30 * MS, r, 4);
    assert_int_equal(r[0].attempt, 2);
    assert_int_equal(fxb_gs_nak(g, m, 0, 2, FXB_GS_BACKOFF, T0 + 31 * MS), FXB_GS_OK);
    assert_int_equal(fxb_gs_next_deadline(g), T0 + 101 * MS);
    fxb_gs_free(g);
}

static void test_delayed_nak_parks_and_overflow_of_max_parked_is_immediate(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.max_parked = 2;
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_run r[4];
    pump(g, 0, 3, T0, r, 4);
    assert_int_equal(fxb_gs_nak(g, m, 0, 1, 100, T0), FXB_GS_OK);
    assert_int_equal(fxb_gs_nak(g, m, 1, 1, 100, T0), FXB_GS_OK);
    assert_int_equal(info(g).parked, 2);
    assert_int_equal(fxb_gs_nak(g, m, 2, 1, 100, T0), FXB_GS_OK);
    assert_int_equal(info(g).parked, 2);
    assert_int_equal(info(g).available, 1);
    assert_int_equal(fxb_gs_stats_of(g)->parked_overflow, 1);
    assert_int_equal(pump(g, 0, 3, T0 + 1, r, 4), 1);
    assert_int_equal(r[0].first, 2);
    assert_int_equal(fxb_gs_expire(g, T0 + 100 * MS), 2);
    assert_int_equal(info(g).available, 2);
    fxb_gs_free(g);
}

static void test_in_progress_extends_the_lease_capped_by_max_ack_wait(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_run r[4];
    pump(g, 0, 1, T0, r, 4);
    assert_int_equal(fxb_gs_in_progress(g, m, 0, 1, 3000, T0 + 500 * MS), FXB_GS_OK);
    assert_int_equal(fxb_gs_next_deadline(g), T0 + 3500 * MS);
    assert_int_equal(fxb_gs_expire(g, T0 + 1500 * MS), 0);
    assert_int_equal(fxb_gs_in_progress(g, m, 0, 1, 60000, T0 + 1500 * MS), FXB_GS_OK);
    assert_int_equal(fxb_gs_next_deadline(g), T0 + 6500 * MS); /* capped at 5 s */
    assert_int_equal(fxb_gs_in_progress(g, m, 0, 1, 0, T0 + 2000 * MS), FXB_GS_OK);
    assert_int_equal(fxb_gs_next_deadline(g), T0 + 3000 * MS); /* the member's ack wait */
    assert_int_equal(fxb_gs_stats_of(g)->in_progress, 3);
    assert_int_equal(fxb_gs_expire(g, T0 + 3000 * MS), 1);
    fxb_gs_free(g);
}

/* Waits on every level of the wheel (this epoch, the next 511 epochs, the
 * overflow list) fire at their time, not before, and next_deadline names
 * each in turn. */
static void test_far_deadlines_on_every_wheel_level_fire_on_time(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_run r[8];
    pump(g, 0, 5, T0, r, 8);
    const uint64_t delay_ms[5] = {3, 900, 10000, 2400000, 3 * 3600000};
    for (uint64_t o = 0; o < 5; o++)
        assert_int_equal(fxb_gs_nak(g, m, o, 1, (int64_t)delay_ms[4 - o], T0), FXB_GS_OK);
    uint64_t now = T0;
    for (int k = 0; k < 5; k++) {
        uint64_t due = T0 + delay_ms[k] * MS;
        assert_int_equal(fxb_gs_next_deadline(g), due);
        /* Step up to just before it in uneven strides: nothing fires. */
        while (now + 777 * MS < due) {
            now += 777 * MS;
            assert_int_equal(fxb_gs_expire(g, now), 0);
        }
        assert_int_equal(fxb_gs_expire(g, due - 1), 0);
        assert_int_equal(fxb_gs_expire(g, due), 1);
        assert_int_equal(info(g).available, (uint32_t)k + 1);
        now = due;
    }
    assert_int_equal(fxb_gs_next_deadline(g), UINT64_MAX);
    assert_int_equal(fxb_gs_stats_of(g)->late[0], 5);
    fxb_gs_free(g);
}

/* The timer's wake-up time never passes the earliest deadline, needs no
 * scan (a level-1 slot answers with its epoch's start), and following it
 * reaches each deadline exactly in a few steps. */
static void test_next_wakeup_is_at_or_before_the_deadline_and_reaches_it(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.ack_wait_ms = 30000;
    c.max_ack_wait_ms = 60000;
    fxb_gs *g = gs_new(&c, 0);
    (void)add_member(g, 100);
    fxb_gs_run r[8];
    pump(g, 0, 50, T0, r, 8);
    uint64_t due = fxb_gs_next_deadline(g);
    assert_int_equal(due, T0 + 30000 * MS);
    uint64_t w = fxb_gs_next_wakeup(g);
    assert_true(w <= due);
    assert_true(w + 4096 * MS > due); /* the start of the deadline's epoch */
    int steps = 0;
    uint32_t fired = 0;
    while (fired == 0) {
        w = fxb_gs_next_wakeup(g);
        assert_true(w <= fxb_gs_next_deadline(g));
        fired = fxb_gs_expire(g, w);
        assert_true(fired == 0 || w == due);
        assert_true(++steps <= 3);
    }
    assert_int_equal(fired, 50);
    assert_int_equal(fxb_gs_next_wakeup(g), UINT64_MAX);
    fxb_gs_free(g);
}

/* A clock jump of hours fires everything due, once. */
static void test_expire_after_a_long_jump_fires_everything_due_once(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_run r[8];
    pump(g, 0, 4, T0, r, 8);
    assert_int_equal(fxb_gs_nak(g, m, 0, 1, 3600000, T0), FXB_GS_OK);
    assert_int_equal(fxb_gs_nak(g, m, 1, 1, 60000, T0), FXB_GS_OK);
    assert_int_equal(fxb_gs_expire(g, T0 + 5 * 3600000 * MS), 4);
    assert_int_equal(fxb_gs_expire(g, T0 + 6 * 3600000 * MS), 0);
    assert_int_equal(info(g).available, 4);
    assert_int_equal(fxb_gs_stats_of(g)->expired, 2);
    assert_int_equal(fxb_gs_stats_of(g)->late[FXB_GS_LATE_BUCKETS - 1], 4);
    fxb_gs_free(g);
}

/* ---- fencing ---------------------------------------------------------------------- */

static void test_stale_nak_in_progress_term_release_are_refused_and_counted_per_op(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t a = add_member(g, 100), b = add_member(g, 100);
    fxb_gs_run r[4];
    pump(g, 0, 1, T0, r, 4);
    uint32_t holder = r[0].member, other = holder == a ? b : a;
    assert_int_equal(fxb_gs_nak(g, other, 0, 1, 0, T0), FXB_GS_STALE);
    assert_int_equal(fxb_gs_nak(g, holder, 0, 2, 0, T0), FXB_GS_STALE);
    assert_int_equal(fxb_gs_in_progress(g, other, 0, 1, 0, T0), FXB_GS_STALE);
    assert_int_equal(fxb_gs_term(g, holder, 0, 3, T0), FXB_GS_STALE);
    assert_int_equal(fxb_gs_release(g, other, 0, 1), FXB_GS_STALE);
    const fxb_gs_stats *s = fxb_gs_stats_of(g);
    assert_int_equal(s->stale[0], 2);
    assert_int_equal(s->stale[1], 1);
    assert_int_equal(s->stale[2], 1);
    assert_int_equal(s->stale[3], 1);
    assert_int_equal(info(g).acquired, 1);
    /* After the lease lapses, the old holder's nak is stale too. */
    fxb_gs_expire(g, T0 + 1000 * MS);
    assert_int_equal(fxb_gs_nak(g, holder, 0, 1, 0, T0 + 1000 * MS), FXB_GS_STALE);
    assert_int_equal(s->stale[0], 3);
    /* An ack from anyone still settles. */
    assert_int_equal(fxb_gs_ack(g, 0, 1, T0 + 1000 * MS, NULL), 1);
    fxb_gs_free(g);
}

static void test_release_does_not_count_the_attempt(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_run r[4];
    pump(g, 0, 1, T0, r, 4);
    assert_int_equal(fxb_gs_release(g, m, 0, 1), FXB_GS_OK);
    assert_int_equal(fxb_gs_stats_of(g)->released, 1);
    assert_int_equal(pump(g, 0, 1, T0, r, 4), 1);
    assert_int_equal(r[0].attempt, 1);
    fxb_gs_free(g);
}

/* ---- dead letters ------------------------------------------------------------------- */

static void test_max_deliver_dead_letter_reported_once_settled_by_done_again_after_failed(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.max_deliver = 2;
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_view v = view(0, 2);
    fxb_gs_run r[4];
    fxb_gs_dead d[4];
    size_t nd = 9;
    assert_int_equal(fxb_gs_pump(g, &v, T0, r, 4, d, 4, &nd), 1);
    assert_int_equal(nd, 0);
    assert_int_equal(fxb_gs_nak(g, m, 0, 1, 0, T0), FXB_GS_OK);
    assert_int_equal(fxb_gs_pump(g, &v, T0, r, 4, d, 4, &nd), 1);
    assert_int_equal(r[0].attempt, 2);
    assert_int_equal(fxb_gs_nak(g, m, 0, 2, 0, T0), FXB_GS_OK);
    assert_int_equal(fxb_gs_pump(g, &v, T0, r, 4, d, 4, &nd), 0);
    assert_int_equal(nd, 1);
    assert_int_equal(d[0].offset, 0);
    assert_int_equal(d[0].attempts, 2);
    assert_int_equal(d[0].reason, FXB_GS_DEAD_MAX_DELIVER);
    assert_int_equal(info(g).dead_intents, 1);
    assert_int_equal(fxb_gs_pump(g, &v, T0, r, 4, d, 4, &nd), 0);
    assert_int_equal(nd, 0); /* once */
    fxb_gs_dead_failed(g, 0);
    assert_int_equal(fxb_gs_pump(g, &v, T0, r, 4, d, 4, &nd), 0);
    assert_int_equal(nd, 1);
    assert_int_equal(info(g).floor, 0);
    fxb_gs_dead_done(g, 0);
    assert_int_equal(info(g).dead_intents, 0);
    assert_int_equal(info(g).floor, 1);
    assert_int_equal(fxb_gs_stats_of(g)->dead[FXB_GS_DEAD_MAX_DELIVER], 1);
    fxb_gs_free(g);
}

static void test_term_dead_letters_with_reason_term(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_view v = view(0, 1);
    fxb_gs_run r[4];
    fxb_gs_dead d[4];
    size_t nd;
    fxb_gs_pump(g, &v, T0, r, 4, d, 4, &nd);
    assert_int_equal(fxb_gs_term(g, m, 0, 1, T0), FXB_GS_OK);
    assert_int_equal(fxb_gs_member_held(g, m), 0);
    assert_int_equal(fxb_gs_pump(g, &v, T0, r, 4, d, 4, &nd), 0);
    assert_int_equal(nd, 1);
    assert_int_equal(d[0].reason, FXB_GS_DEAD_TERM);
    assert_int_equal(d[0].attempts, 1);
    fxb_gs_dead_done(g, 0);
    assert_int_equal(fxb_gs_stats_of(g)->dead[FXB_GS_DEAD_TERM], 1);
    assert_int_equal(info(g).floor, 1);
    fxb_gs_free(g);
}

/* Checkpoint 4g: the lowest unsettled offset that is not a dead letter
 * waiting, past settled offsets and dead ones, looked for below a limit. */
static void test_floor_past_dead_skips_dead_letters_waiting_and_settled_offsets(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_view v = view(0, 10);
    fxb_gs_run r[4];
    fxb_gs_dead d[4];
    size_t nd;
    fxb_gs_pump(g, &v, T0, r, 4, d, 4, &nd);             /* 0..9 to m */
    assert_int_equal(fxb_gs_floor_past_dead(g, 100), 0); /* nothing dead: the floor */
    assert_int_equal(fxb_gs_term(g, m, 0, 1, T0), FXB_GS_OK);
    assert_int_equal(fxb_gs_term(g, m, 1, 1, T0), FXB_GS_OK);
    assert_int_equal(fxb_gs_ack(g, 2, 3, T0, NULL), 3); /* 2..4 settled */
    assert_int_equal(fxb_gs_term(g, m, 5, 1, T0), FXB_GS_OK);
    assert_int_equal(info(g).floor, 0);
    assert_int_equal(fxb_gs_floor_past_dead(g, 100), 6); /* 0, 1 dead; 2..4 acked; 5 dead */
    assert_int_equal(fxb_gs_floor_past_dead(g, 4), 4);   /* none below the limit */
    fxb_gs_pump(g, &v, T0, r, 4, d, 4, &nd);             /* reported: still waiting */
    assert_int_equal(nd, 3);
    fxb_gs_dead_failed(g, 0);
    assert_int_equal(fxb_gs_floor_past_dead(g, 100), 6);
    assert_int_equal(fxb_gs_ack(g, 6, 4, T0, NULL), 4);   /* 6..9 settled */
    assert_int_equal(fxb_gs_floor_past_dead(g, 100), 10); /* next: never handed out */
    fxb_gs_dead_done(g, 1);
    fxb_gs_dead_done(g, 5);
    fxb_gs_dead_done(g, 0);
    assert_int_equal(info(g).floor, 10);
    assert_int_equal(fxb_gs_floor_past_dead(g, 100), 10);
    fxb_gs_free(g);
}

static void test_max_deliver_unlimited_never_dead_letters(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.max_deliver = -1;
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_view v = view(0, 1);
    fxb_gs_run r[4];
    fxb_gs_dead d[4];
    size_t nd;
    for (uint32_t k = 1; k <= 50; k++) {
        assert_int_equal(fxb_gs_pump(g, &v, T0, r, 4, d, 4, &nd), 1);
        assert_int_equal(nd, 0);
        assert_int_equal(r[0].attempt, k);
        assert_int_equal(fxb_gs_nak(g, m, 0, k, 0, T0), FXB_GS_OK);
    }
    assert_int_equal(info(g).dead_intents, 0);
    fxb_gs_free(g);
}

/* ---- members, ring, seek, restore ------------------------------------------------------- */

static void test_member_remove_makes_its_records_available(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t a = add_member(g, 3);
    fxb_gs_run r[4];
    pump(g, 0, 3, T0, r, 4);
    uint32_t b = add_member(g, 10);
    fxb_gs_member_remove(g, a, T0 + 1);
    assert_int_equal(info(g).members, 1);
    assert_int_equal(info(g).available, 3);
    assert_int_equal(info(g).acquired, 0);
    assert_int_equal(pump(g, 0, 3, T0 + 1, r, 4), 1);
    assert_int_equal(r[0].member, b);
    assert_int_equal(r[0].first, 0);
    assert_int_equal(r[0].count, 3);
    assert_int_equal(r[0].attempt, 2);
    uint32_t a2 = add_member(g, 1);
    assert_int_equal(a2, a); /* ids are reused */
    fxb_gs_free(g);
}

static void test_ring_eviction_settles_skipped_and_reports_skipped_before_once(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    evlog l = {0};
    fxb_gs_set_observer(g, on_event, &l);
    fxb_gs_run r[4];
    pump(g, 0, 6, T0, r, 4);
    fxb_gs_ack(g, 1, 1, T0, NULL);
    /* The ring drops 0..9: 0, 2..5 were pending, 6..9 never handed out. */
    l.n = 0;
    assert_int_equal(pump(g, 10, 12, T0, r, 4), 1);
    assert_int_equal(fxb_gs_stats_of(g)->skipped, 9);
    assert_int_equal(r[0].first, 10);
    assert_int_equal(r[0].skipped_before, 9);
    assert_int_equal(fxb_gs_member_held(g, m), 2);
    assert_int_equal(info(g).floor, 10);
    assert_int_equal(l.ev[0].type, FXB_GS_EV_SKIP);
    assert_int_equal(l.ev[0].first, 0);
    assert_int_equal(l.ev[0].count, 1);
    assert_int_equal(l.ev[1].type, FXB_GS_EV_SKIP);
    assert_int_equal(l.ev[1].first, 2);
    assert_int_equal(l.ev[1].count, 4);
    assert_int_equal(l.ev[2].type, FXB_GS_EV_SKIP);
    assert_int_equal(l.ev[2].first, 6);
    assert_int_equal(l.ev[2].count, 4);
    assert_int_equal(l.ev[3].type, FXB_GS_EV_DELIVER);
    assert_int_equal(fxb_gs_ack(g, 3, 1, T0, NULL), 0); /* skipped: a duplicate now */
    assert_int_equal(pump(g, 10, 14, T0, r, 4), 1);
    assert_int_equal(r[0].skipped_before, 0);
    fxb_gs_free(g);
}

static void test_seek_drops_pending_and_moves_floor_and_next(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_run r[4];
    pump(g, 0, 10, T0, r, 4);
    fxb_gs_seek(g, 50);
    fxb_gs_info i = info(g);
    assert_int_equal(i.floor, 50);
    assert_int_equal(i.next, 50);
    assert_int_equal(i.acquired, 0);
    assert_int_equal(fxb_gs_member_held(g, m), 0);
    assert_int_equal(fxb_gs_next_deadline(g), UINT64_MAX);
    assert_int_equal(fxb_gs_ack(g, 3, 1, T0, NULL), 0);
    assert_int_equal(fxb_gs_stats_of(g)->duplicate_acks, 1);
    assert_int_equal(pump(g, 0, 52, T0, r, 4), 1);
    assert_int_equal(r[0].first, 50);
    assert_int_equal(r[0].count, 2);
    fxb_gs_free(g);
}

static void test_restore_rebuilds_pending_and_settles_the_rest(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    assert_int_equal(fxb_gs_restore(g, 10, 20), 0);
    assert_int_equal(fxb_gs_restore_pending(g, 12, 1, 0), 0);
    assert_int_equal(fxb_gs_restore_pending(g, 15, 3, T0 + 50 * MS), 0);
    assert_int_equal(fxb_gs_restore_pending(g, 14, 1, 0), -EINVAL); /* out of order */
    assert_int_equal(fxb_gs_restore_pending(g, 20, 1, 0), -EINVAL); /* out of range */
    fxb_gs_info i = info(g);
    assert_int_equal(i.floor, 12);
    assert_int_equal(i.next, 20);
    assert_int_equal(i.available, 1);
    assert_int_equal(i.parked, 1);
    uint32_t m = add_member(g, 100);
    fxb_gs_run r[4];
    assert_int_equal(pump(g, 0, 25, T0, r, 4), 2);
    assert_int_equal(r[0].first, 12);
    assert_int_equal(r[0].attempt, 2);
    assert_int_equal(r[1].first, 20);
    assert_int_equal(r[1].attempt, 1);
    assert_int_equal(fxb_gs_ack(g, 13, 1, T0, NULL), 0); /* implicitly settled */
    assert_int_equal(fxb_gs_expire(g, T0 + 50 * MS), 1);
    assert_int_equal(pump(g, 0, 25, T0 + 50 * MS, r, 4), 1);
    assert_int_equal(r[0].first, 15);
    assert_int_equal(r[0].attempt, 4);
    assert_int_equal(fxb_gs_member_held(g, m), 7);
    fxb_gs_ack(g, 12, 13, T0, NULL);
    assert_int_equal(info(g).floor, 25);
    fxb_gs_free(g);
}

/* ---- observer ----------------------------------------------------------------------- */

static void test_observer_sees_deliver_ack_nak_release_dead_in_order(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.max_deliver = 2;
    fxb_gs *g = gs_new(&c, 0);
    evlog l = {0};
    fxb_gs_set_observer(g, on_event, &l);
    uint32_t m = add_member(g, 100);
    fxb_gs_run r[4];
    pump(g, 0, 3, T0, r, 4);        /* DELIVER 0..2 @1 */
    fxb_gs_ack(g, 0, 1, T0, NULL);  /* ACK 0 */
    fxb_gs_nak(g, m, 1, 1, 20, T0); /* NAK 1, not before +20 ms */
    fxb_gs_release(g, m, 2, 1);     /* RELEASE 2, attempt 0 */
    fxb_gs_expire(g, T0 + 20 * MS);
    pump(g, 0, 3, T0 + 20 * MS, r, 4);       /* DELIVER 1 @2, DELIVER 2 @1 */
    fxb_gs_nak(g, m, 1, 2, 0, T0 + 21 * MS); /* NAK 1 now: exhausted */
    pump(g, 0, 3, T0 + 21 * MS, r, 4);
    fxb_gs_dead_done(g, 1); /* DEAD 1 */
    const fxb_gs_event want[] = {
        {.type = FXB_GS_EV_DELIVER, .first = 0, .count = 3, .attempt = 1},
        {.type = FXB_GS_EV_ACK, .first = 0, .count = 1},
        {.type = FXB_GS_EV_NAK,
         .first = 1,
         .count = 1,
         .attempt = 1,
         .not_before_us = T0 + 20 * MS},
        {.type = FXB_GS_EV_RELEASE, .first = 2, .count = 1, .attempt = 0},
        {.type = FXB_GS_EV_DELIVER, .first = 1, .count = 1, .attempt = 2},
        {.type = FXB_GS_EV_DELIVER, .first = 2, .count = 1, .attempt = 1},
        {.type = FXB_GS_EV_NAK, .first = 1, .count = 1, .attempt = 2},
        {.type = FXB_GS_EV_DEAD,
         .first = 1,
         .count = 1,
         .attempt = 2,
         .reason = FXB_GS_DEAD_MAX_DELIVER},
    };
    assert_int_equal(l.n, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < l.n; i++) {
        assert_int_equal(l.ev[i].type, want[i].type);
        assert_int_equal(l.ev[i].first, want[i].first);
        assert_int_equal(l.ev[i].count, want[i].count);
        assert_int_equal(l.ev[i].attempt, want[i].attempt);
        assert_int_equal(l.ev[i].not_before_us, want[i].not_before_us);
        assert_int_equal(l.ev[i].reason, want[i].reason);
    }
    fxb_gs_free(g);
}

/* ---- scale ---------------------------------------------------------------------------- */

#define BIG 10000u

static fxb_gs *big_group(uint32_t *pm)
{
    fxb_gs_config c = base_cfg();
    c.max_ack_pending = BIG;
    c.max_parked = BIG;
    c.member_window_max = BIG;
    c.max_ack_pending_bytes = UINT64_MAX;
    fxb_gs *g = gs_new(&c, 0);
    *pm = add_member(g, BIG);
    return g;
}

static void test_ten_thousand_lapsed_leases_are_each_redelivered_exactly_once(void **state)
{
    (void)state;
    uint32_t m;
    fxb_gs *g = big_group(&m);
    fxb_gs_run r[256];
    /* Spread the deliveries over 10 s of clock so leases span many epochs. */
    for (uint64_t t = 0; info(g).next < BIG; t++)
        pump(g, 0, (t + 1) * 50 > BIG ? BIG : (t + 1) * 50, T0 + t * 50 * MS, r, 256);
    assert_int_equal(info(g).acquired, BIG);
    uint8_t *seen = calloc(BIG, 1);
    assert_non_null(seen);
    uint32_t lapsed = 0, redelivered = 0;
    for (uint64_t t = T0; t <= T0 + 20000 * MS && redelivered < BIG; t += 7 * MS) {
        lapsed += fxb_gs_expire(g, t);
        size_t n;
        while ((n = pump(g, 0, BIG, t, r, 256)) > 0) {
            for (size_t i = 0; i < n; i++) {
                assert_int_equal(r[i].attempt, 2);
                for (uint32_t k = 0; k < r[i].count; k++) {
                    assert_int_equal(seen[r[i].first + k], 0);
                    seen[r[i].first + k] = 1;
                    redelivered++;
                }
                /* Settled at once, so the second attempts never lapse. */
                assert_int_equal(fxb_gs_ack(g, r[i].first, r[i].count, t, NULL), r[i].count);
            }
        }
    }
    assert_int_equal(lapsed, BIG);
    assert_int_equal(redelivered, BIG);
    assert_int_equal(fxb_gs_stats_of(g)->expired, BIG);
    assert_int_equal(info(g).floor, BIG);
    assert_int_equal(fxb_gs_next_deadline(g), UINT64_MAX);
    free(seen);
    fxb_gs_free(g);
}

static void test_memory_stays_within_64_bytes_per_bounded_record_with_ten_thousand_pending(void **state)
{
    (void)state;
    uint32_t m;
    fxb_gs *g = big_group(&m);
    size_t empty = fxb_gs_memory(g);
    fxb_gs_run r[256];
    while (info(g).next < BIG)
        pump(g, 0, BIG, T0, r, 256);
    /* Half of them naked with a delay, a quarter given back: all states. */
    for (uint64_t o = 0; o < BIG / 2; o++)
        assert_int_equal(fxb_gs_nak(g, m, o, 1, 1000, T0), FXB_GS_OK);
    for (uint64_t o = BIG / 2; o < BIG / 2 + BIG / 4; o++)
        assert_int_equal(fxb_gs_nak(g, m, o, 1, 0, T0), FXB_GS_OK);
    fxb_gs_info i = info(g);
    assert_int_equal(i.acquired + i.available + i.parked, BIG);
    size_t mem = fxb_gs_memory(g);
    const fxb_gs_config *c = fxb_gs_config_of(g);
    assert_true(mem - empty <= 64ull * (c->max_ack_pending + c->max_parked));
    assert_true(mem > empty + 40ull * BIG); /* and it does count the entries */
    fxb_gs_free(g);
}

/* ---- randomized model check ------------------------------------------------------------ */

enum { M_NEW = 0, M_HELD, M_WAIT, M_DEAD, M_SETTLED };

typedef struct mrec {
    uint8_t st;
    uint32_t member, attempts;
    uint64_t deadline;
} mrec;

#define MN 65536u /* offsets the model follows */
#define MMEM 4u

typedef struct model {
    fxb_gs *g;
    mrec rec[MN];
    bool live[MMEM];
    uint32_t id[MMEM];
    uint32_t wait_ms[MMEM];
    uint64_t now, low, tail, floor;
    uint32_t held;
    uint64_t rng;
} model;

static uint32_t rnd(model *md, uint32_t n)
{
    md->rng ^= md->rng << 13;
    md->rng ^= md->rng >> 7;
    md->rng ^= md->rng << 17;
    return (uint32_t)(md->rng % n);
}

static void model_settle(model *md, uint64_t o)
{
    if (md->rec[o].st == M_HELD)
        md->held--;
    md->rec[o].st = M_SETTLED;
}

static void model_pump(model *md)
{
    fxb_gs_view v = view(md->low, md->tail);
    fxb_gs_run r[8];
    fxb_gs_dead d[8];
    size_t nd = 0;
    for (uint64_t o = md->floor; o < md->low; o++)
        if (md->rec[o].st != M_SETTLED)
            model_settle(md, o);
    size_t n = fxb_gs_pump(md->g, &v, md->now, r, 8, d, 8, &nd);
    for (size_t i = 0; i < nd; i++) {
        mrec *x = &md->rec[d[i].offset];
        assert_int_equal(x->st, M_WAIT);
        assert_int_equal(d[i].attempts, x->attempts);
        x->st = M_DEAD;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t k = 0;
        while (k < MMEM && !(md->live[k] && md->id[k] == r[i].member))
            k++;
        assert_true(k < MMEM);
        for (uint32_t j = 0; j < r[i].count; j++) {
            mrec *x = &md->rec[r[i].first + j];
            /* Never to two members at once; the attempt follows the count. */
            assert_true(x->st == M_NEW || x->st == M_WAIT);
            assert_int_equal(r[i].attempt, x->attempts + 1);
            x->st = M_HELD;
            x->member = k;
            x->attempts++;
            x->deadline = md->now + md->wait_ms[k] * MS;
            md->held++;
        }
    }
}

static void model_expire(model *md)
{
    fxb_gs_expire(md->g, md->now);
    for (uint64_t o = md->floor; o < info(md->g).next; o++) {
        mrec *x = &md->rec[o];
        if (x->st == M_HELD && x->deadline <= md->now) {
            x->st = M_WAIT;
            md->held--;
        }
    }
}

static fxb_gs_result expect_fenced(const model *md, uint64_t o, uint32_t k, uint32_t attempt)
{
    const mrec *x = &md->rec[o];
    if (x->st == M_NEW)
        return FXB_GS_INVALID;
    if (x->st == M_SETTLED)
        return FXB_GS_DUPLICATE;
    if (x->st == M_HELD && x->member == k && x->attempts == attempt)
        return FXB_GS_OK;
    return FXB_GS_STALE;
}

static void model_op(model *md)
{
    uint64_t span = md->tail - md->floor + 2;
    uint64_t o = md->floor + rnd(md, (uint32_t)span);
    if (o >= MN)
        o = MN - 1;
    uint32_t k = rnd(md, MMEM), op = rnd(md, 100);
    mrec *x = &md->rec[o];
    uint32_t attempt = x->attempts + (rnd(md, 8) == 0 ? 1 : 0);
    if (op < 25) {
        uint32_t bad = 0;
        uint32_t want = (x->st == M_HELD || x->st == M_WAIT || x->st == M_DEAD) ? 1 : 0;
        assert_int_equal(fxb_gs_ack(md->g, o, 1, md->now, &bad), want);
        assert_int_equal(bad, x->st == M_NEW ? 1 : 0);
        if (want)
            model_settle(md, o);
    } else if (op < 40 && md->live[k]) {
        fxb_gs_result want = expect_fenced(md, o, k, attempt);
        int64_t delay = rnd(md, 3) == 0 ? FXB_GS_BACKOFF : (int64_t)rnd(md, 3) * 5;
        assert_int_equal(fxb_gs_nak(md->g, md->id[k], o, attempt, delay, md->now), want);
        if (want == FXB_GS_OK) {
            x->st = M_WAIT;
            md->held--;
        }
    } else if (op < 48 && md->live[k]) {
        fxb_gs_result want = expect_fenced(md, o, k, attempt);
        uint32_t ext = rnd(md, 30);
        assert_int_equal(fxb_gs_in_progress(md->g, md->id[k], o, attempt, ext, md->now), want);
        if (want == FXB_GS_OK)
            x->deadline = md->now + (ext ? ext : md->wait_ms[k]) * MS;
    } else if (op < 52 && md->live[k]) {
        fxb_gs_result want = expect_fenced(md, o, k, attempt);
        assert_int_equal(fxb_gs_term(md->g, md->id[k], o, attempt, md->now), want);
        if (want == FXB_GS_OK) {
            x->st = M_WAIT;
            md->held--;
        }
    } else if (op < 58 && md->live[k]) {
        fxb_gs_result want = expect_fenced(md, o, k, attempt);
        assert_int_equal(fxb_gs_release(md->g, md->id[k], o, attempt), want);
        if (want == FXB_GS_OK) {
            x->st = M_WAIT;
            x->attempts--;
            md->held--;
        }
    } else if (op < 62) {
        if (x->st == M_DEAD) {
            if (rnd(md, 2)) {
                fxb_gs_dead_done(md->g, o);
                model_settle(md, o);
            } else {
                fxb_gs_dead_failed(md->g, o);
                x->st = M_WAIT;
            }
        }
    } else if (op < 64) {
        if (md->live[k]) {
            fxb_gs_member_remove(md->g, md->id[k], md->now);
            md->live[k] = false;
            for (uint64_t p = md->floor; p < md->tail; p++)
                if (md->rec[p].st == M_HELD && md->rec[p].member == k) {
                    md->rec[p].st = M_WAIT;
                    md->held--;
                }
        } else {
            md->wait_ms[k] = 5 + rnd(md, 40);
            uint32_t w = 1 + rnd(md, 12);
            assert_int_equal(fxb_gs_member_add(md->g, w, md->wait_ms[k], &md->id[k]), 0);
            md->live[k] = true;
        }
    } else if (op < 70) {
        md->now += rnd(md, 8) * MS + rnd(md, 1000);
        model_expire(md);
    } else if (op < 75) {
        if (md->tail < MN - 64 && md->tail < md->floor + 80)
            md->tail += rnd(md, 20);
        if (rnd(md, 3) == 0 && md->low + 16 < md->tail)
            md->low += 1 + rnd(md, 12);
    } else if (op < 79) {
        /* A redrive: only a settled record still readable is owed again,
         * at 0 attempts, within the pending set's bound. */
        fxb_gs_info in = info(md->g);
        const fxb_gs_config *c = fxb_gs_config_of(md->g);
        int want = x->st != M_SETTLED || o >= in.next ? -ENOENT
                   : in.acquired + in.available + in.parked + in.dead_intents >=
                           c->max_ack_pending + c->max_parked
                       ? -ENOSPC
                       : 0;
        if (o < md->low)
            return;
        assert_int_equal(fxb_gs_redrive(md->g, o, md->now), want);
        if (want == 0) {
            x->st = M_WAIT;
            x->attempts = 0;
            if (o < md->floor)
                md->floor = o;
        }
    } else {
        model_pump(md);
    }
}

static void model_check(model *md)
{
    fxb_gs_info i = info(md->g);
    assert_true(i.floor <= i.next);
    /* Every offset below the floor is settled; the floor is the lowest
     * unsettled one. */
    for (uint64_t o = md->floor; o < i.floor; o++)
        assert_int_equal(md->rec[o].st, M_SETTLED);
    md->floor = i.floor;
    if (i.floor < i.next)
        assert_int_not_equal(md->rec[i.floor].st, M_SETTLED);
    uint32_t sum = 0;
    for (uint32_t k = 0; k < MMEM; k++)
        if (md->live[k])
            sum += fxb_gs_member_held(md->g, md->id[k]);
    assert_int_equal(sum, i.acquired);
    assert_int_equal(i.acquired, md->held);
    const fxb_gs_config *c = fxb_gs_config_of(md->g);
    assert_true(i.acquired + i.available + i.parked <=
                c->max_ack_pending + c->max_parked + i.dead_intents);
}

static void test_random_operations_keep_the_invariants_of_a_reference_model(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.max_ack_pending = 24;
    c.max_parked = 6;
    c.member_window_max = 16;
    c.max_run = 5;
    c.max_deliver = 4;
    c.ack_wait_ms = 5;
    c.max_ack_wait_ms = 50;
    c.n_backoff = 2;
    c.backoff_ms[0] = 2;
    c.backoff_ms[1] = 9;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        model *md = calloc(1, sizeof(*md));
        assert_non_null(md);
        md->g = gs_new(&c, 0);
        md->rng = seed * 0x9e3779b97f4a7c15ull;
        md->now = T0;
        for (uint32_t step = 0; step < 50000; step++) {
            model_op(md);
            model_check(md);
        }
        assert_true(md->tail < MN - 64); /* the model never ran out of offsets */
        /* Every path was taken. */
        const fxb_gs_stats *s = fxb_gs_stats_of(md->g);
        assert_true(s->delivered > 5000 && s->redelivered > 100 && s->acked > 1000);
        assert_true(s->expired > 100 && s->naked > 100 && s->released > 20);
        assert_true(s->dead[1] > 10 && s->dead[2] > 2 && s->skipped > 100);
        assert_true(s->stale[0] > 10 && s->capped > 10 && s->member_full > 10);
        assert_true(s->parked_overflow > 0);
        if (s->redriven < 20)
            fail_msg("seed %llu: %llu redrives", (unsigned long long)seed,
                     (unsigned long long)s->redriven);
        fxb_gs_free(md->g);
        free(md);
    }
}

static void test_config_check_refuses_out_of_range_values(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    const char *why = NULL;
    assert_int_equal(fxb_gs_config_check(&c, &why), 0);
    c.max_deliver = 0;
    assert_int_equal(fxb_gs_config_check(&c, &why), -EINVAL);
    assert_non_null(why);
    c = base_cfg();
    c.max_ack_wait_ms = c.ack_wait_ms - 1;
    assert_int_equal(fxb_gs_config_check(&c, &why), -EINVAL);
    c = base_cfg();
    c.n_backoff = FXB_GS_MAX_BACKOFF + 1;
    assert_int_equal(fxb_gs_config_check(&c, &why), -EINVAL);
}

/* ---- records not loaded (durable streams below the ring) -------------------- */

/* A view whose payloads are in memory only in [lo, hi): the rest of [low,
 * tail) is readable but not loaded (FXB_GS_LEN_WAIT). */
typedef struct loaded {
    uint64_t lo, hi;
    uint32_t calls;
} loaded;

static uint32_t loaded_len(void *user, uint64_t offset)
{
    loaded *l = user;
    l->calls++;
    return offset >= l->lo && offset < l->hi ? 100 : FXB_GS_LEN_WAIT;
}

static size_t pump_loaded(fxb_gs *g, loaded *l, uint64_t low, uint64_t tail, uint64_t now,
                          fxb_gs_run *out, size_t cap, uint64_t *pwant)
{
    fxb_gs_view v = {.low = low, .tail = tail, .len = loaded_len, .user = l};
    size_t nd = 0;
    fxb_gs_dead d[4];
    size_t n = fxb_gs_pump(g, &v, now, out, cap, d, 4, &nd);
    *pwant = v.want;
    return n;
}

static void test_a_record_not_loaded_waits_without_being_skipped_and_is_wanted(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    loaded l = {.lo = 5, .hi = 5}; /* nothing loaded */
    fxb_gs_run r[8];
    uint64_t want = 0;
    assert_int_equal(pump_loaded(g, &l, 0, 10, T0, r, 8, &want), 0);
    assert_int_equal(want, 0);
    assert_int_equal(info(g).next, 0);
    assert_int_equal(info(g).floor, 0);
    assert_int_equal(fxb_gs_stats_of(g)->skipped, 0);
    assert_true(fxb_gs_stats_of(g)->waits >= 1);
    assert_int_equal(fxb_gs_member_held(g, m), 0);
    /* [0, 3) loaded: the run stops at 3, which is wanted next. */
    l = (loaded){.lo = 0, .hi = 3};
    assert_int_equal(pump_loaded(g, &l, 0, 10, T0, r, 8, &want), 1);
    assert_int_equal(r[0].first, 0);
    assert_int_equal(r[0].count, 3);
    assert_int_equal(r[0].skipped_before, 0);
    assert_int_equal(want, 3);
    assert_int_equal(info(g).next, 3);
    fxb_gs_free(g);
}

static void test_a_waiting_group_resumes_when_the_records_are_loaded(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    (void)add_member(g, 100);
    loaded l = {.lo = 8, .hi = 10}; /* only the ring's part */
    fxb_gs_run r[8];
    uint64_t want = 0;
    assert_int_equal(pump_loaded(g, &l, 0, 10, T0, r, 8, &want), 0);
    assert_int_equal(want, 0);
    l.lo = 0; /* the page [0, 8) came */
    assert_int_equal(pump_loaded(g, &l, 0, 10, T0, r, 8, &want), 1);
    assert_int_equal(r[0].first, 0);
    assert_int_equal(r[0].count, 10);
    assert_int_equal(want, UINT64_MAX);
    assert_int_equal(fxb_gs_ack(g, 0, 10, T0, NULL), 10);
    assert_int_equal(info(g).floor, 10);
    assert_int_equal(fxb_gs_stats_of(g)->skipped, 0);
    fxb_gs_free(g);
}

static void test_want_is_the_lowest_offset_that_waited(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    loaded l = {.lo = 0, .hi = 20};
    fxb_gs_run r[8];
    uint64_t want = 0;
    assert_int_equal(pump_loaded(g, &l, 0, 20, T0, r, 8, &want), 1);
    assert_int_equal(info(g).next, 20);
    /* 4 comes back; then only [10, 30) is loaded and the tail moves to 40:
     * first deliveries [20, 30) go out, the redelivery of 4 and 30 wait. */
    assert_int_equal(fxb_gs_nak(g, m, 4, 1, 0, T0), FXB_GS_OK);
    l = (loaded){.lo = 10, .hi = 30};
    size_t n = pump_loaded(g, &l, 0, 40, T0, r, 8, &want);
    assert_true(n >= 1);
    for (size_t i = 0; i < n; i++)
        assert_true(r[i].first >= 20 && r[i].first + r[i].count <= 30);
    assert_int_equal(info(g).next, 30);
    assert_int_equal(want, 4); /* lower than 30, the first delivery that waited too */
    fxb_gs_free(g);
}

static void test_a_redelivery_not_loaded_waits_without_counting_an_attempt(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.max_deliver = 2;
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    loaded l = {.lo = 0, .hi = 4};
    fxb_gs_run r[8];
    uint64_t want = 0;
    assert_int_equal(pump_loaded(g, &l, 0, 4, T0, r, 8, &want), 1);
    assert_int_equal(fxb_gs_nak(g, m, 2, 1, 0, T0), FXB_GS_OK);
    l = (loaded){.lo = 3, .hi = 4}; /* 2 left memory */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pump_loaded(g, &l, 0, 4, T0, r, 8, &want), 0);
        assert_int_equal(want, 2);
    }
    assert_int_equal(info(g).available, 1);
    assert_int_equal(fxb_gs_stats_of(g)->redelivered, 0);
    assert_int_equal(fxb_gs_stats_of(g)->skipped, 0);
    /* Loaded again: redelivered at attempt 2 (not 3, not dead-lettered). */
    l = (loaded){.lo = 0, .hi = 4};
    size_t nd = 0;
    fxb_gs_dead d[4];
    fxb_gs_view v = {.low = 0, .tail = 4, .len = loaded_len, .user = &l};
    assert_int_equal(fxb_gs_pump(g, &v, T0, r, 8, d, 4, &nd), 1);
    assert_int_equal(nd, 0);
    assert_int_equal(r[0].first, 2);
    assert_int_equal(r[0].count, 1);
    assert_int_equal(r[0].attempt, 2);
    assert_int_equal(v.want, UINT64_MAX);
    fxb_gs_free(g);
}

static void test_records_below_low_are_still_skipped_when_not_loaded(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    (void)add_member(g, 100);
    loaded l = {.lo = 6, .hi = 10};
    fxb_gs_run r[8];
    uint64_t want = 0;
    /* Retention moved the log's start to 6: [0, 6) are gone, not waited on. */
    assert_int_equal(pump_loaded(g, &l, 6, 10, T0, r, 8, &want), 1);
    assert_int_equal(r[0].first, 6);
    assert_int_equal(r[0].count, 4);
    assert_int_equal(r[0].skipped_before, 6);
    assert_int_equal(want, UINT64_MAX);
    assert_int_equal(fxb_gs_stats_of(g)->skipped, 6);
    fxb_gs_free(g);
}

/* ---- poll members (group_poll.c): a window opened and shut ---------------- */

static void test_a_closed_window_gets_nothing_and_is_not_counted_full(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t p = add_member(g, 8);
    fxb_gs_member_set_window(g, p, 0);
    fxb_gs_run r[4];
    assert_int_equal(pump(g, 0, 10, T0, r, 4), 0);
    assert_int_equal(fxb_gs_stats_of(g)->member_full, 0);
    assert_int_equal(info(g).next, 0);
    /* Opened for 3: it gets 3, holds them once shut again. */
    fxb_gs_member_set_window(g, p, 3);
    assert_int_equal(pump(g, 0, 10, T0, r, 4), 1);
    assert_int_equal(r[0].count, 3);
    fxb_gs_member_set_window(g, p, 0);
    assert_int_equal(fxb_gs_member_held(g, p), 3);
    assert_int_equal(pump(g, 0, 10, T0, r, 4), 0);
    /* The window is capped at member_window_max (checkpoint 5m). */
    fxb_gs_member_set_window(g, p, 5000);
    assert_int_equal(fxb_gs_member_window(g, p), c.member_window_max);
    fxb_gs_free(g);
}

static void test_a_member_lease_set_later_applies_to_its_next_deliveries(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t p = add_member(g, 1);
    fxb_gs_member_set_lease(g, p, 200);
    fxb_gs_run r[4];
    assert_int_equal(pump(g, 0, 10, T0, r, 4), 1);
    assert_int_equal(fxb_gs_next_deadline(g), T0 + 200 * MS);
    fxb_gs_member_set_lease(g, p, 999999); /* capped at max_ack_wait_ms */
    fxb_gs_member_set_window(g, p, 2);
    assert_int_equal(pump(g, 0, 10, T0, r, 4), 1);
    fxb_gs_expire(g, T0 + 300 * MS); /* the first lapses, the second holds */
    assert_int_equal(fxb_gs_next_deadline(g), T0 + c.max_ack_wait_ms * MS);
    fxb_gs_member_set_lease(g, p, 0); /* 0: the group's */
    fxb_gs_member_set_window(g, p, 3);
    assert_true(pump(g, 0, 10, T0 + 300 * MS, r, 4) >= 1);
    assert_int_equal(r[0].first, 0); /* the lapsed one first, attempt 2 */
    assert_int_equal(r[0].attempt, 2);
    fxb_gs_free(g);
}

static void test_lookup_tells_where_an_offset_stands_and_who_holds_it(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t a = add_member(g, 2), b = add_member(g, 2);
    fxb_gs_run r[4];
    pump(g, 0, 10, T0, r, 4);
    uint32_t m = 99, att = 99;
    assert_int_equal(fxb_gs_lookup(g, 9, &m, &att), FXB_GS_NEVER);
    assert_int_equal(fxb_gs_lookup(g, 0, &m, &att), FXB_GS_HELD);
    assert_true(m == a || m == b);
    assert_int_equal(att, 1);
    assert_int_equal(fxb_gs_nak(g, m, 0, 1, 0, T0), FXB_GS_OK);
    assert_int_equal(fxb_gs_lookup(g, 0, NULL, &att), FXB_GS_OWED);
    assert_int_equal(att, 1);
    fxb_gs_ack(g, 1, 1, T0, NULL);
    assert_int_equal(fxb_gs_lookup(g, 1, NULL, NULL), FXB_GS_SETTLED);
    assert_int_equal(fxb_gs_lookup(g, 2, &m, &att), FXB_GS_HELD);
    assert_int_equal(fxb_gs_term(g, m, 2, att, T0), FXB_GS_OK);
    assert_int_equal(fxb_gs_lookup(g, 2, NULL, NULL), FXB_GS_DYING);
    fxb_gs_free(g);
}

/* ---- redrive --------------------------------------------------------------- */

/* Delivers [0, n) to |m| and acks it all: everything settled, floor = n. */
static void deliver_and_ack(fxb_gs *g, uint64_t n)
{
    fxb_gs_run r[8];
    assert_true(pump(g, 0, n, T0, r, 8) >= 1);
    assert_int_equal(fxb_gs_ack(g, 0, (uint32_t)n, T0, NULL), n);
    assert_int_equal(info(g).floor, n);
}

static void test_redrive_owes_a_settled_record_again_at_attempt_1_before_new_records(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    evlog log = {0};
    fxb_gs_set_observer(g, on_event, &log);
    deliver_and_ack(g, 5);
    log.n = 0;
    assert_int_equal(fxb_gs_redrive(g, 2, T0), 0);
    assert_int_equal(log.n, 1);
    assert_int_equal(log.ev[0].type, FXB_GS_EV_REDRIVE);
    assert_int_equal(log.ev[0].first, 2);
    assert_int_equal(log.ev[0].attempt, 0);
    assert_int_equal(info(g).floor, 2); /* the floor lowers to the redriven record */
    assert_int_equal(info(g).available, 1);
    assert_false(fxb_gs_is_settled(g, 2));
    /* Owed already, or never handed out: not a settled record. */
    assert_int_equal(fxb_gs_redrive(g, 2, T0), -ENOENT);
    assert_int_equal(fxb_gs_redrive(g, 5, T0), -ENOENT);
    fxb_gs_run r[8];
    size_t n = pump(g, 0, 10, T0, r, 8);
    assert_int_equal(n, 2);
    assert_int_equal(r[0].member, m);
    assert_int_equal(r[0].first, 2);
    assert_int_equal(r[0].count, 1);
    assert_int_equal(r[0].attempt, 1);
    assert_int_equal(r[1].first, 5);
    assert_int_equal(r[1].count, 5);
    assert_int_equal(fxb_gs_stats_of(g)->redriven, 1);
    assert_int_equal(fxb_gs_stats_of(g)->redelivered, 0);
    fxb_gs_free(g);
}

static void test_redriven_record_acked_is_settled_and_the_floor_moves_on(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    fxb_gs *g = gs_new(&c, 0);
    (void)add_member(g, 100);
    deliver_and_ack(g, 5);
    assert_int_equal(fxb_gs_redrive(g, 1, T0), 0);
    fxb_gs_run r[8];
    assert_int_equal(pump(g, 0, 5, T0, r, 8), 1);
    assert_int_equal(info(g).floor, 1);
    assert_int_equal(fxb_gs_ack(g, 1, 1, T0, NULL), 1);
    assert_true(fxb_gs_is_settled(g, 1));
    assert_int_equal(info(g).floor, 5);
    assert_int_equal(info(g).acquired + info(g).available, 0);
    /* A late ack of it is a duplicate, as for any settled record. */
    assert_int_equal(fxb_gs_ack(g, 1, 1, T0, NULL), 0);
    fxb_gs_free(g);
}

static void test_redriven_record_that_fails_again_is_dead_again(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.max_deliver = 2;
    fxb_gs *g = gs_new(&c, 0);
    uint32_t m = add_member(g, 100);
    fxb_gs_view v = view(0, 3);
    fxb_gs_run r[4];
    fxb_gs_dead d[4];
    size_t nd = 0;
    assert_int_equal(fxb_gs_pump(g, &v, T0, r, 4, d, 4, &nd), 1);
    assert_int_equal(fxb_gs_ack(g, 0, 1, T0, NULL), 1);
    assert_int_equal(fxb_gs_ack(g, 2, 1, T0, NULL), 1);
    assert_int_equal(fxb_gs_term(g, m, 1, 1, T0), FXB_GS_OK);
    assert_int_equal(fxb_gs_pump(g, &v, T0, r, 4, d, 4, &nd), 0);
    assert_int_equal(nd, 1);
    fxb_gs_dead_done(g, 1);
    assert_true(fxb_gs_is_settled(g, 1));
    assert_int_equal(info(g).floor, 3);
    /* Redriven: delivered at attempt 1, then 2, then dead again. */
    assert_int_equal(fxb_gs_redrive(g, 1, T0), 0);
    assert_int_equal(fxb_gs_pump(g, &v, T0, r, 4, d, 4, &nd), 1);
    assert_int_equal(r[0].first, 1);
    assert_int_equal(r[0].attempt, 1);
    assert_int_equal(fxb_gs_nak(g, m, 1, 1, 0, T0), FXB_GS_OK);
    assert_int_equal(fxb_gs_pump(g, &v, T0, r, 4, d, 4, &nd), 1);
    assert_int_equal(r[0].attempt, 2);
    assert_int_equal(fxb_gs_nak(g, m, 1, 2, 0, T0), FXB_GS_OK);
    assert_int_equal(fxb_gs_pump(g, &v, T0, r, 4, d, 4, &nd), 0);
    assert_int_equal(nd, 1);
    assert_int_equal(d[0].offset, 1);
    assert_int_equal(d[0].attempts, 2);
    assert_int_equal(d[0].reason, FXB_GS_DEAD_MAX_DELIVER);
    assert_int_equal(info(g).floor, 1); /* a dead intent is unsettled */
    fxb_gs_dead_done(g, 1);
    assert_int_equal(info(g).floor, 3);
    assert_int_equal(fxb_gs_stats_of(g)->dead[FXB_GS_DEAD_TERM], 1);
    assert_int_equal(fxb_gs_stats_of(g)->dead[FXB_GS_DEAD_MAX_DELIVER], 1);
    fxb_gs_free(g);
}

static void test_redrive_far_below_keeps_the_floor_at_the_lowest_unsettled_offset(void **state)
{
    (void)state;
    fxb_gs_config c = base_cfg();
    c.max_ack_pending = 4;
    c.max_parked = 1;
    c.member_window_max = 4;
    fxb_gs *g = gs_new(&c, 0);
    (void)add_member(g, 4);
    fxb_gs_run r[8];
    /* 100,000 records handed out and acked four at a time. */
    for (uint64_t o = 0; o < 100000; o += 4) {
        assert_int_equal(pump(g, 0, o + 4, T0, r, 8), 1);
        assert_int_equal(fxb_gs_ack(g, o, 4, T0, NULL), 4);
    }
    assert_int_equal(fxb_gs_redrive(g, 7, T0), 0);
    assert_int_equal(fxb_gs_redrive(g, 50000, T0), 0);
    assert_int_equal(info(g).floor, 7);
    /* Both redriven records go out first (the window of 4 takes the rest
     * from 100,000). */
    assert_int_equal(pump(g, 0, 100010, T0, r, 8), 3);
    assert_int_equal(r[0].first, 7);
    assert_int_equal(r[1].first, 50000);
    assert_int_equal(r[2].first, 100000);
    assert_int_equal(r[2].count, 2);
    assert_int_equal(fxb_gs_ack(g, 100000, 2, T0, NULL), 2);
    assert_int_equal(info(g).floor, 7); /* never above an unsettled offset */
    assert_int_equal(fxb_gs_ack(g, 7, 1, T0, NULL), 1);
    assert_int_equal(info(g).floor, 50000);
    /* 5g counts the redriven records; the pending set's bound refuses a
     * redrive past max_ack_pending + max_parked. */
    assert_int_equal(pump(g, 0, 100010, T0, r, 8), 1);
    assert_int_equal(info(g).acquired, 4);
    assert_int_equal(fxb_gs_redrive(g, 8, T0), 0);
    assert_int_equal(info(g).floor, 8);
    assert_int_equal(fxb_gs_redrive(g, 9, T0), -ENOSPC);
    assert_int_equal(fxb_gs_ack(g, 50000, 1, T0, NULL), 1);
    assert_int_equal(info(g).floor, 8);
    fxb_gs_free(g);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_first_deliveries_go_out_in_offset_order_as_contiguous_runs),
    cmocka_unit_test(test_a_run_is_capped_at_max_run),
    cmocka_unit_test(test_two_members_share_by_held_over_window),
    cmocka_unit_test(test_full_window_stops_that_member_only_and_counts_member_full),
    cmocka_unit_test(test_5g_cap_stops_first_deliveries_but_not_redeliveries_until_an_ack),
    cmocka_unit_test(test_5g_byte_cap_stops_first_deliveries),
    cmocka_unit_test(test_ack_out_of_order_keeps_the_floor_until_the_gap_closes),
    cmocka_unit_test(test_ack_of_an_offset_never_handed_out_is_invalid),
    cmocka_unit_test(test_late_and_duplicate_acks_are_harmless),
    cmocka_unit_test(test_lapsed_lease_redelivers_with_the_next_attempt_after_the_backoff),
    cmocka_unit_test(test_nak_zero_is_immediate),
    cmocka_unit_test(test_nak_without_delay_honours_the_backoff),
    cmocka_unit_test(test_delayed_nak_parks_and_overflow_of_max_parked_is_immediate),
    cmocka_unit_test(test_in_progress_extends_the_lease_capped_by_max_ack_wait),
    cmocka_unit_test(test_far_deadlines_on_every_wheel_level_fire_on_time),
    cmocka_unit_test(test_next_wakeup_is_at_or_before_the_deadline_and_reaches_it),
    cmocka_unit_test(test_expire_after_a_long_jump_fires_everything_due_once),
    cmocka_unit_test(test_stale_nak_in_progress_term_release_are_refused_and_counted_per_op),
    cmocka_unit_test(test_release_does_not_count_the_attempt),
    cmocka_unit_test(test_max_deliver_dead_letter_reported_once_settled_by_done_again_after_failed),
    cmocka_unit_test(test_term_dead_letters_with_reason_term),
    cmocka_unit_test(test_floor_past_dead_skips_dead_letters_waiting_and_settled_offsets),
    cmocka_unit_test(test_max_deliver_unlimited_never_dead_letters),
    cmocka_unit_test(test_member_remove_makes_its_records_available),
    cmocka_unit_test(test_ring_eviction_settles_skipped_and_reports_skipped_before_once),
    cmocka_unit_test(test_seek_drops_pending_and_moves_floor_and_next),
    cmocka_unit_test(test_restore_rebuilds_pending_and_settles_the_rest),
    cmocka_unit_test(test_observer_sees_deliver_ack_nak_release_dead_in_order),
    cmocka_unit_test(test_ten_thousand_lapsed_leases_are_each_redelivered_exactly_once),
    cmocka_unit_test(
        test_memory_stays_within_64_bytes_per_bounded_record_with_ten_thousand_pending),
    cmocka_unit_test(test_random_operations_keep_the_invariants_of_a_reference_model),
    cmocka_unit_test(test_config_check_refuses_out_of_range_values),
    cmocka_unit_test(test_a_record_not_loaded_waits_without_being_skipped_and_is_wanted),
    cmocka_unit_test(test_a_waiting_group_resumes_when_the_records_are_loaded),
    cmocka_unit_test(test_want_is_the_lowest_offset_that_waited),
    cmocka_unit_test(test_a_redelivery_not_loaded_waits_without_counting_an_attempt),
    cmocka_unit_test(test_records_below_low_are_still_skipped_when_not_loaded),
    cmocka_unit_test(test_a_closed_window_gets_nothing_and_is_not_counted_full),
    cmocka_unit_test(test_a_member_lease_set_later_applies_to_its_next_deliveries),
    cmocka_unit_test(test_lookup_tells_where_an_offset_stands_and_who_holds_it),
    cmocka_unit_test(test_redrive_owes_a_settled_record_again_at_attempt_1_before_new_records),
    cmocka_unit_test(test_redriven_record_acked_is_settled_and_the_floor_moves_on),
    cmocka_unit_test(test_redriven_record_that_fails_again_is_dead_again),
    cmocka_unit_test(test_redrive_far_below_keeps_the_floor_at_the_lowest_unsettled_offset),
};

FX_TEST_MAIN(tests)
