/* End-to-end tests of the data plane: the real client library (libfelix)
 * against a real broker running in this process (fx_broker, its own loop
 * threads) on 127.0.0.1 port 0 with a generated certificate in a temp state
 * dir, pinned by fingerprint. Consumers run on their own threads. Broker
 * counters are checked as differences of fx_metrics_snapshot_take() around a
 * scenario, client counters with fx_subscription_stats(). Timeouts are hang
 * guards only; nothing asserts on speed. */
/* fx-test-libs: fx_broker fx_client fx_quic fx_wire fx_base */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integ/fixture.h"

/* ---- broker ------------------------------------------------------------------ */

typedef fix_env E;

static E *e_new(void)
{
    E *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    fix_env_init(e, "e2e");
    return e;
}

static void e_lossless(E *e)
{
    fix_lossless(&e->bo);
}

static void e_start(E *e)
{
    fix_env_start(e);
}

static void e_free(E *e)
{
    fix_env_deinit(e);
    free(e);
}

/* ---- clients ----------------------------------------------------------------- */

/* These tests count the broker's publish requests
 * (felix_publish_requests_total), one per call, so their clients send one
 * frame per call; test_batching.c covers merged frames end to end. */
static void copts(E *e, fx_client_opts *o)
{
    fix_client_opts(o, e->b, e->server, "t1", "any-token");
    o->publish_coalesce = false;
}

/* A client whose subscriptions use |pol|, with |window| bytes of receive
 * window per stream (0: the default). */
static fx_client *e_client(E *e, fx_policy pol, uint32_t window, uint32_t sub_cap)
{
    fx_client_opts o;
    copts(e, &o);
    o.sub_queue_policy = pol;
    o.stream_window_bytes = window;
    o.sub_queue_capacity = sub_cap;
    return fix_connect(&o);
}

static void close_client(fx_client *c)
{
    fix_close(c);
}

static fx_subscription *sub_from(fx_client *c, const char *stream, fx_start_kind kind, uint64_t off)
{
    fx_start st = {.kind = kind, .offset = off};
    return fix_subscribe(c, stream, &st);
}

static fx_subscription *sub_latest(fx_client *c, const char *stream)
{
    return sub_from(c, stream, FX_START_LATEST, 0);
}

/* ---- payloads ------------------------------------------------------------------ */

static uint8_t pay_byte(uint64_t off, size_t j)
{
    return (uint8_t)(off * 31 + j * 7 + 1);
}

static void fill(uint8_t *p, uint64_t off, size_t n)
{
    for (size_t j = 0; j < n; j++)
        p[j] = pay_byte(off, j);
}

static size_t size_1k(uint64_t off)
{
    (void)off;
    return 1024;
}

static size_t size_16(uint64_t off)
{
    (void)off;
    return 16;
}

static size_t size_0_1k_1m(uint64_t off)
{
    static const size_t sz[] = {0, 1024, 1u << 20};
    return sz[off % 3];
}

/* Publishes the messages for offsets [first, first + n) of |stream|. */
static void publish_range(fx_client *c, const char *stream, uint64_t first, uint64_t n,
                          size_t (*size_of)(uint64_t), fx_ack ack)
{
    uint8_t *p = malloc((1u << 20) + 1);
    assert_non_null(p);
    for (uint64_t i = first; i < first + n; i++) {
        size_t len = size_of(i);
        fill(p, i, len);
        int rv = fx_publish(c, NS, stream, p, len, ack);
        if (rv != 0)
            fail_msg("publish %llu: %s", (unsigned long long)i, fx_errname(rv));
    }
    free(p);
}

/* ---- consumers ----------------------------------------------------------------- */

typedef struct cons cons;
struct cons {
    fx_subscription *s;
    uint64_t stop_off; /* stop after taking this offset */
    size_t (*size_of)(uint64_t off);
    bool (*verify)(cons *k, const fx_event *ev); /* NULL: the offset pattern */
    void *arg;
    atomic_bool hold;              /* stalled: take nothing */
    atomic_uint_fast64_t got;      /* events taken */
    atomic_uint_fast64_t last_off; /* offset of the last event + 1 */
    bool any;
    uint64_t first_off, bad, dups, jumps, gap_flags, gap_sum, no_offset;
    int rv;
    pthread_t th;
};

static bool verify_pattern(cons *k, const fx_event *ev)
{
    size_t want = k->size_of(ev->offset);
    if (ev->len != want)
        return false;
    for (size_t j = 0; j < ev->len; j++)
        if (ev->payload[j] != pay_byte(ev->offset, j))
            return false;
    return true;
}

static void cons_take(cons *k, const fx_event *ev)
{
    if (!ev->has_offset) {
        k->no_offset++;
        return;
    }
    uint64_t next = atomic_load(&k->last_off);
    if (k->any && ev->offset < next)
        k->dups++;
    if (k->any && ev->offset > next)
        k->jumps++;
    if (!k->any)
        k->first_off = ev->offset;
    k->any = true;
    if (ev->flags & FX_EVENT_GAP) {
        k->gap_flags++;
        k->gap_sum += ev->gap;
    }
    bool ok = k->verify != NULL ? k->verify(k, ev) : verify_pattern(k, ev);
    if (!ok)
        k->bad++;
    atomic_store(&k->last_off, ev->offset + 1);
    atomic_fetch_add(&k->got, 1);
}

static void *cons_main(void *arg)
{
    cons *k = arg;
    for (;;) {
        if (atomic_load(&k->hold)) {
            usleep(1000);
            continue;
        }
        fx_event ev;
        int rv = fx_subscription_next(k->s, &ev, HANG_MS);
        if (rv != 0) {
            k->rv = rv;
            break;
        }
        cons_take(k, &ev);
        if (ev.has_offset && ev.offset >= k->stop_off)
            break;
    }
    return NULL;
}

static void cons_start(cons *k, fx_subscription *s, uint64_t stop_off, size_t (*size_of)(uint64_t),
                       bool hold)
{
    k->s = s;
    k->stop_off = stop_off;
    k->size_of = size_of;
    atomic_init(&k->hold, hold);
    atomic_init(&k->got, 0);
    atomic_init(&k->last_off, 0);
    assert_int_equal(pthread_create(&k->th, NULL, cons_main, k), 0);
}

static void cons_join(cons *k)
{
    assert_int_equal(pthread_join(k->th, NULL), 0);
    if (k->rv != 0)
        fail_msg("consumer ended with %s after %llu events", fx_errname(k->rv),
                 (unsigned long long)atomic_load(&k->got));
}

/* Joins |k| and checks it got offsets [first, stop_off] once each, intact. */
static void cons_join_complete(cons *k, uint64_t first)
{
    cons_join(k);
    assert_int_equal(k->first_off, first);
    assert_int_equal(atomic_load(&k->got), k->stop_off - first + 1);
    assert_int_equal(k->dups, 0);
    assert_int_equal(k->jumps, 0);
    assert_int_equal(k->gap_flags, 0);
    assert_int_equal(k->bad, 0);
    assert_int_equal(k->no_offset, 0);
}

static void expect_client_stats(fx_subscription *s, uint64_t received, uint64_t dropped,
                                uint64_t missed)
{
    fx_sub_stats st;
    assert_int_equal(fx_subscription_stats(s, &st), 0);
    assert_int_equal(st.received, received);
    assert_int_equal(st.delivered, received);
    assert_int_equal(st.dropped, dropped);
    assert_int_equal(st.missed, missed);
}

/* ---- metrics and waiting ---------------------------------------------------------- */

/* Waits until |counter| (a pointer into a fresh snapshot) stops changing for
 * |quiet_ms|. Returns its value. */
static uint64_t wait_stable(atomic_uint_fast64_t *v, unsigned quiet_ms)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    uint64_t last = atomic_load(v);
    uint64_t since = fx_now_ns();
    while (fx_now_ns() < deadline) {
        sleep_ms(10);
        uint64_t now = atomic_load(v);
        if (now != last) {
            last = now;
            since = fx_now_ns();
        } else if (fx_now_ns() - since >= (uint64_t)quiet_ms * FX_NS_PER_MS) {
            return now;
        }
    }
    fail_msg("value kept changing");
    return 0;
}

/* ---- delivery ---------------------------------------------------------------------- */

static void test_one_publisher_three_subscribers_every_message_once_in_order(void **state)
{
    (void)state;
    E *e = e_new();
    e_start(e);
    fx_client *sc = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_client *pc = e_client(e, FX_POLICY_DEFAULT, 0, 0);
    enum { N = 30 }; /* ten of each size: 0 B, 1 KiB, 1 MiB */
    cons k[3] = {0};
    fx_subscription *s[3];
    for (int i = 0; i < 3; i++) {
        s[i] = sub_latest(sc, "s1");
        cons_start(&k[i], s[i], N - 1, size_0_1k_1m, false);
    }
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    publish_range(pc, "s1", 0, N, size_0_1k_1m, FX_ACK_NONE);
    assert_int_equal(fx_flush(pc, HANG_MS), 0);
    for (int i = 0; i < 3; i++) {
        cons_join_complete(&k[i], 0);
        expect_client_stats(s[i], N, 0, 0);
    }
    fx_metrics_snapshot_take(&b);
    /* felix_publish_requests_total{result=ok}: one per publish, nothing shed. */
    assert_int_equal(DELTA(a, b, publish_ok), N);
    assert_int_equal(DELTA(a, b, ingress_dropped), 0);
    assert_int_equal(DELTA(a, b, sub_queue_dropped), 0);
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped_events), 0);
    for (int i = 0; i < 3; i++)
        fx_unsubscribe(s[i]);
    close_client(pc);
    close_client(sc);
    e_free(e);
}

/* ---- lossless mode --------------------------------------------------------------- */

static void test_lossless_burst_10000_fanout_10_loses_nothing(void **state)
{
    (void)state;
    E *e = e_new();
    e_lossless(e);
    e_start(e);
    fx_client *sc[2] = {e_client(e, FX_POLICY_BLOCK, 0, 0), e_client(e, FX_POLICY_BLOCK, 0, 0)};
    fx_client *pc = e_client(e, FX_POLICY_DEFAULT, 0, 0);
    enum { N = 10000, F = 10 };
    cons k[F] = {0};
    fx_subscription *s[F];
    for (int i = 0; i < F; i++) {
        s[i] = sub_latest(sc[i % 2], "burst");
        cons_start(&k[i], s[i], N - 1, size_16, false);
    }
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    publish_range(pc, "burst", 0, N, size_16, FX_ACK_NONE);
    assert_int_equal(fx_flush(pc, HANG_MS), 0);
    for (int i = 0; i < F; i++) {
        cons_join_complete(&k[i], 0);
        expect_client_stats(s[i], N, 0, 0);
    }
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_ok), N);
    assert_int_equal(DELTA(a, b, ingress_dropped), 0);
    assert_int_equal(DELTA(a, b, publish_dropped), 0);
    assert_int_equal(DELTA(a, b, sub_queue_dropped), 0);
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped_events), 0);
    for (int i = 0; i < F; i++)
        fx_unsubscribe(s[i]);
    close_client(pc);
    close_client(sc[0]);
    close_client(sc[1]);
    e_free(e);
}

typedef struct pubber {
    fx_client *c;
    const char *stream;
    uint64_t first, n;
    size_t (*size_of)(uint64_t off);
    atomic_uint_fast64_t done; /* publishes returned */
    cons **pace;               /* publish at most |window| ahead of these */
    size_t npace;
    uint64_t window;
    int rv;
    pthread_t th;
} pubber;

static uint64_t min_got(cons **k, size_t n)
{
    uint64_t m = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        uint64_t g = atomic_load(&k[i]->got);
        m = g < m ? g : m;
    }
    return m;
}

static void *pubber_main(void *arg)
{
    pubber *p = arg;
    uint8_t buf[1024];
    for (uint64_t i = p->first; i < p->first + p->n && p->rv == 0; i++) {
        while (p->npace > 0 && min_got(p->pace, p->npace) + p->window < i - p->first)
            usleep(100);
        size_t len = p->size_of(i);
        fill(buf, i, len);
        p->rv = fx_publish(p->c, NS, p->stream, buf, len, FX_ACK_NONE);
        atomic_fetch_add(&p->done, 1);
    }
    return NULL;
}

static void pubber_start(pubber *p)
{
    atomic_init(&p->done, 0);
    assert_int_equal(pthread_create(&p->th, NULL, pubber_main, p), 0);
}

static void pubber_join(pubber *p)
{
    assert_int_equal(pthread_join(p->th, NULL), 0);
    assert_int_equal(p->rv, 0);
    assert_int_equal(atomic_load(&p->done), p->n);
}

static void test_lossless_stalled_subscriber_slows_publisher_without_loss(void **state)
{
    (void)state;
    E *e = e_new();
    e_lossless(e);
    /* Small buffers everywhere, so the burst is many times what fits
     * between the publisher and the stalled subscriber. */
    e->bo.quic.stream_window = e->bo.quic.max_stream_window = 256u << 10;
    e->bo.subscriber_queue_capacity = 64;
    e->bo.subscriber_lane_queue_depth = 8;
    e->bo.subscriber_unacked_bytes = 256u << 10;
    e_start(e);
    fx_client *stalled = e_client(e, FX_POLICY_BLOCK, 256u << 10, 4);
    fx_client *healthy = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_client_opts o;
    copts(e, &o);
    o.publish_inflight_bytes = 256u << 10;
    fx_client *pc = fix_connect(&o);
    enum { N = 8000 };
    cons k[3] = {0};
    fx_subscription *s[3] = {sub_latest(stalled, "slow"), sub_latest(healthy, "slow"),
                             sub_latest(healthy, "slow")};
    for (int i = 0; i < 3; i++)
        cons_start(&k[i], s[i], N - 1, size_1k, i == 0);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    pubber p = {.c = pc, .stream = "slow", .n = N, .size_of = size_1k};
    pubber_start(&p);
    /* While the subscriber is stalled the publisher stops: its publishes
     * stop completing well short of the burst. */
    uint64_t while_stalled = wait_stable(&p.done, 300);
    fx_sub_stats st;
    assert_int_equal(fx_subscription_stats(s[0], &st), 0);
    fprintf(stderr, "stalled: %llu of %d publishes completed, stalled sub received %llu\n",
            (unsigned long long)while_stalled, N, (unsigned long long)st.received);
    assert_true(while_stalled < N);
    assert_true(st.received < N);
    atomic_store(&k[0].hold, false);
    pubber_join(&p);
    assert_int_equal(fx_flush(pc, HANG_MS), 0);
    for (int i = 0; i < 3; i++) {
        cons_join_complete(&k[i], 0);
        expect_client_stats(s[i], N, 0, 0);
    }
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_ok), N);
    assert_int_equal(DELTA(a, b, ingress_dropped), 0);
    assert_int_equal(DELTA(a, b, sub_queue_dropped), 0);
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped_events), 0);
    for (int i = 0; i < 3; i++)
        fx_unsubscribe(s[i]);
    close_client(pc);
    close_client(stalled);
    close_client(healthy);
    e_free(e);
}

/* ---- default mode: shedding ------------------------------------------------------------ */

static void test_default_mode_stalled_subscriber_sheds_and_counts(void **state)
{
    (void)state;
    E *e = e_new();
    e_start(e); /* drop_new at checkpoints 5 and 6, Drop at 4 */
    fx_client *stalled = e_client(e, FX_POLICY_BLOCK, 256u << 10, 4);
    fx_client *healthy = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_client *pc = e_client(e, FX_POLICY_DEFAULT, 0, 0);
    enum { N = 10000 };
    cons k[3] = {0};
    fx_subscription *s[3] = {sub_latest(stalled, "shed"), sub_latest(healthy, "shed"),
                             sub_latest(healthy, "shed")};
    /* The last message (offset N) is published after the stall ends, so a
     * shed tail shows up as a gap before it. */
    for (int i = 0; i < 3; i++)
        cons_start(&k[i], s[i], N, size_1k, i == 0);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    /* Paced by the healthy subscribers (32 ahead at most, far below every
     * queue bound), so only the stalled one can overflow. */
    cons *healthy_k[2] = {&k[1], &k[2]};
    pubber p = {.c = pc,
                .stream = "shed",
                .n = N,
                .size_of = size_1k,
                .pace = healthy_k,
                .npace = 2,
                .window = 32};
    pubber_start(&p);
    pubber_join(&p); /* every publish completed while the subscriber is stalled */
    fx_sub_stats st;
    assert_int_equal(fx_subscription_stats(s[0], &st), 0);
    assert_true(st.received < N);
    assert_int_equal(atomic_load(&k[0].got), 0);
    atomic_store(&k[0].hold, false);
    /* Let the stalled subscriber drain what was kept for it. */
    while (min_got(healthy_k, 2) < N)
        sleep_ms(5);
    wait_stable(&k[0].got, 300);
    publish_range(pc, "shed", N, 1, size_1k, FX_ACK_NONE);
    for (int i = 1; i < 3; i++) {
        cons_join_complete(&k[i], 0);
        expect_client_stats(s[i], N + 1, 0, 0);
    }
    cons_join(&k[0]);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(fx_subscription_stats(s[0], &st), 0);
    uint64_t shed =
        (uint64_t)(DELTA(a, b, sub_queue_dropped) + DELTA(a, b, subscriber_lane_dropped_events));
    fprintf(stderr,
            "stalled subscriber: received %llu, missed %llu in %llu gaps; broker shed %llu\n",
            (unsigned long long)st.received, (unsigned long long)st.missed,
            (unsigned long long)st.gaps, (unsigned long long)shed);
    assert_true(st.missed > 0);
    assert_int_equal(st.missed, shed);
    assert_int_equal(st.received + st.missed, N + 1);
    assert_int_equal(st.dropped, 0);
    assert_int_equal(k[0].gap_sum, st.missed);
    assert_int_equal(k[0].gap_flags, st.gaps);
    assert_int_equal(k[0].dups, 0);
    assert_int_equal(k[0].bad, 0);
    assert_int_equal(DELTA(a, b, ingress_dropped), 0);
    assert_int_equal(DELTA(a, b, publish_ok), N + 1);
    assert_int_equal(DELTA(a, b, sub_queue_dropped), DELTA(a, b, subscribe_dropped));
    for (int i = 0; i < 3; i++)
        fx_unsubscribe(s[i]);
    close_client(pc);
    close_client(stalled);
    close_client(healthy);
    e_free(e);
}

static void test_gap_reported_to_application_when_subscriber_queue_drops(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.subscriber_queue_capacity = 4; /* drop_new */
    e->bo.subscriber_lane_queue_policy = FX_QUEUE_BLOCK;
    e->bo.subscriber_lane_queue_depth = 2;
    e->bo.subscriber_unacked_bytes = 64u << 10;
    e->bo.pub_ingress_wait = true; /* nothing shed before checkpoint 5 */
    e_start(e);
    fx_client *sc = e_client(e, FX_POLICY_BLOCK, 64u << 10, 1);
    fx_client *pc = e_client(e, FX_POLICY_DEFAULT, 0, 0);
    enum { N = 3000 };
    fx_subscription *s = sub_latest(sc, "gappy");
    cons k = {0};
    cons_start(&k, s, N, size_1k, true);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    publish_range(pc, "gappy", 0, N, size_1k, FX_ACK_NONE);
    assert_int_equal(fx_flush(pc, HANG_MS), 0);
    fx_metrics_snapshot m;
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    do { /* every publish appended (and offered to the subscriber) */
        sleep_ms(5);
        fx_metrics_snapshot_take(&m);
        assert_true(fx_now_ns() < deadline);
    } while (DELTA(a, m, publish_ok) < N);
    atomic_store(&k.hold, false);
    wait_stable(&k.got, 300);
    publish_range(pc, "gappy", N, 1, size_1k, FX_ACK_NONE);
    cons_join(&k);
    fx_metrics_snapshot_take(&b);
    fx_sub_stats st;
    assert_int_equal(fx_subscription_stats(s, &st), 0);
    uint64_t shed = (uint64_t)DELTA(a, b, sub_queue_dropped);
    assert_true(shed > 0);
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped_events), 0);
    assert_int_equal(DELTA(a, b, ingress_dropped), 0);
    /* The application saw FX_EVENT_GAP with the exact count. */
    assert_int_equal(k.gap_sum, shed);
    assert_int_equal(k.gap_flags, st.gaps);
    assert_true(st.gaps > 0);
    assert_int_equal(st.missed, shed);
    assert_int_equal(st.received + shed, N + 1);
    assert_int_equal(atomic_load(&k.got), st.received);
    assert_int_equal(k.bad, 0);
    assert_int_equal(k.dups, 0);
    fx_unsubscribe(s);
    close_client(pc);
    close_client(sc);
    e_free(e);
}

/* ---- acks --------------------------------------------------------------------------- */

static size_t size_64(uint64_t off)
{
    (void)off;
    return 64;
}

static void acks_round(bool ack_on_commit)
{
    E *e = e_new();
    e->bo.ack_on_commit = ack_on_commit;
    e_start(e);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_metrics_snapshot a, m;
    fx_metrics_snapshot_take(&a);
    uint8_t p[64];
    int64_t requests = 0;
    for (uint64_t i = 0; i < 3; i++, requests++) {
        fill(p, i, 64);
        assert_int_equal(fx_publish(c, NS, "acks", p, 64, FX_ACK_PER_MESSAGE), 0);
        fx_metrics_snapshot_take(&m);
        /* The answer came after admission, or after the append when
         * ack_on_commit. */
        assert_int_equal(DELTA(a, m, publish_accepted), requests + 1);
        if (ack_on_commit)
            assert_int_equal(DELTA(a, m, publish_ok), requests + 1);
    }
    uint8_t bp[4][64];
    fx_iov iov[4];
    for (uint64_t i = 0; i < 4; i++) {
        fill(bp[i], 3 + i, 64);
        iov[i] = (fx_iov){bp[i], 64};
    }
    assert_int_equal(fx_publish_batch(c, NS, "acks", iov, 4, FX_ACK_PER_BATCH), 0);
    requests++;
    for (uint64_t i = 0; i < 4; i++)
        fill(bp[i], 7 + i, 64);
    assert_int_equal(fx_publish_batch(c, NS, "acks", iov, 4, FX_ACK_PER_MESSAGE), 0);
    requests++;
    fx_metrics_snapshot_take(&m);
    assert_int_equal(DELTA(a, m, publish_accepted), requests);
    if (ack_on_commit) {
        assert_int_equal(DELTA(a, m, publish_ok), requests);
    } else {
        uint64_t deadline = fix_deadline_ns(HANG_MS);
        while (DELTA(a, m, publish_ok) < requests && fx_now_ns() < deadline) {
            sleep_ms(2);
            fx_metrics_snapshot_take(&m);
        }
        assert_int_equal(DELTA(a, m, publish_ok), requests);
    }
    assert_int_equal(DELTA(a, m, publish_error), 0);
    /* Everything acked is in the log, in order. */
    fx_subscription *s = sub_from(c, "acks", FX_START_EARLIEST, 0);
    cons k = {0};
    cons_start(&k, s, 10, size_64, false);
    cons_join(&k);
    assert_int_equal(atomic_load(&k.got), 11);
    assert_int_equal(k.first_off, 0);
    assert_int_equal(k.jumps + k.dups + k.bad, 0);
    fx_unsubscribe(s);
    close_client(c);
    e_free(e);
}

static void test_acks_per_message_and_per_batch_with_and_without_ack_on_commit(void **state)
{
    (void)state;
    acks_round(false);
    acks_round(true);
}

typedef struct ackrec {
    pthread_mutex_t mu;
    int rv[4];
    int order[4]; /* 0: not yet; else completion rank */
    int n;
    char text[4][128];
} ackrec;

typedef struct ackarg {
    ackrec *r;
    int i;
} ackarg;

static void on_ack(void *user, int rv)
{
    ackarg *a = user;
    pthread_mutex_lock(&a->r->mu);
    a->r->rv[a->i] = rv;
    a->r->order[a->i] = ++a->r->n;
    fx_client_last_error(NULL, a->r->text[a->i], sizeof(a->r->text[a->i]));
    pthread_mutex_unlock(&a->r->mu);
}

static int ack_rank(ackrec *r, int i)
{
    pthread_mutex_lock(&r->mu);
    int v = r->order[i];
    pthread_mutex_unlock(&r->mu);
    return v;
}

static void wait_rank(ackrec *r, int i)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    while (ack_rank(r, i) == 0) {
        if (fx_now_ns() > deadline)
            fail_msg("ack %d never completed", i);
        sleep_ms(2);
    }
}

static bool verify_len_1k(cons *k, const fx_event *ev)
{
    (void)k;
    return ev->len == 1024;
}

/* Waits until felix_publish_requests_total{result=ok} stops moving; returns
 * its growth since |a|. */
static int64_t wait_ok_stable(const fx_metrics_snapshot *a, unsigned quiet_ms)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    fx_metrics_snapshot m;
    int64_t last = -1;
    uint64_t since = fx_now_ns();
    while (fx_now_ns() < deadline) {
        fx_metrics_snapshot_take(&m);
        int64_t v = DELTA(*a, m, publish_ok);
        if (v != last) {
            last = v;
            since = fx_now_ns();
        } else if (fx_now_ns() - since >= (uint64_t)quiet_ms * FX_NS_PER_MS) {
            return v;
        }
        sleep_ms(10);
    }
    fail_msg("publishes kept completing");
    return -1;
}

static void test_acks_out_of_order_across_streams_paired_correctly(void **state)
{
    (void)state;
    E *e = e_new();
    e_lossless(e);
    e->bo.workers = 2;
    e->bo.ack_on_commit = true;
    e->bo.publish_queue_wait_timeout_ns = (uint64_t)HANG_MS * 4 * FX_NS_PER_MS;
    e->bo.auto_create_streams = false;
    /* Dense handle ids 1 and 2: the two streams live on different workers. */
    fx_broker_stream_name names[] = {{"t1", NS, "parked"}, {"t1", NS, "free"}};
    e->bo.streams = names;
    e->bo.nstreams = 2;
    e->bo.subscriber_queue_capacity = 4;
    e->bo.subscriber_lane_queue_depth = 2;
    e->bo.subscriber_unacked_bytes = 64u << 10;
    e_start(e);
    /* Park the worker of "parked": a stalled lossless subscriber and a
     * burst far larger than what can buffer in front of it. */
    fx_client *stalled = e_client(e, FX_POLICY_BLOCK, 64u << 10, 1);
    fx_client *filler = e_client(e, FX_POLICY_DEFAULT, 0, 0);
    enum { K = 1000 };
    cons k = {.verify = verify_len_1k};
    fx_subscription *s = sub_latest(stalled, "parked");
    cons_start(&k, s, K + 1, size_1k, true);
    fx_metrics_snapshot a;
    fx_metrics_snapshot_take(&a);
    pubber p = {.c = filler, .stream = "parked", .n = K, .size_of = size_1k};
    pubber_start(&p);
    int64_t committed = wait_ok_stable(&a, 300);
    assert_true(committed < K);
    /* One connection, two publish streams, round robin: requests 0 and 2
     * go on stream 0, 1 and 3 on stream 1. */
    fx_client_opts o;
    copts(e, &o);
    o.publish_conn_pool = 1;
    o.publish_streams_per_conn = 2;
    o.publish_sharding = FX_SHARDING_RR;
    fx_client *c = fix_connect(&o);
    ackrec r = {.mu = PTHREAD_MUTEX_INITIALIZER};
    ackarg args[4] = {{&r, 0}, {&r, 1}, {&r, 2}, {&r, 3}};
    const char *to[4] = {"parked", "free", "parked", "nope"};
    uint8_t pay[1024];
    for (int i = 0; i < 4; i++) {
        fill(pay, 0, sizeof(pay));
        assert_int_equal(
            fx_publish_async(c, NS, to[i], pay, sizeof(pay), FX_ACK_PER_MESSAGE, on_ack, &args[i]),
            0);
    }
    wait_rank(&r, 1);
    wait_rank(&r, 3);
    /* The parked stream's acks have not come: they cannot, before the
     * subscriber takes events again. */
    assert_int_equal(ack_rank(&r, 0), 0);
    assert_int_equal(ack_rank(&r, 2), 0);
    assert_int_equal(r.rv[1], 0);
    assert_int_equal(r.rv[3], FX_ENOSTREAM);
    assert_non_null(strstr(r.text[3], "stream not found"));
    atomic_store(&k.hold, false);
    pubber_join(&p);
    wait_rank(&r, 0);
    wait_rank(&r, 2);
    assert_int_equal(r.rv[0], 0);
    assert_int_equal(r.rv[2], 0);
    assert_true(r.order[0] > r.order[1] && r.order[0] > r.order[3]);
    assert_true(r.order[2] > r.order[0]); /* one QUIC stream keeps its order */
    cons_join(&k);
    assert_int_equal(atomic_load(&k.got), K + 2);
    assert_int_equal(k.jumps + k.dups + k.bad, 0);
    assert_int_equal(fx_flush(c, HANG_MS), 0);
    fx_metrics_snapshot b;
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_ok), K + 3);
    assert_int_equal(DELTA(a, b, publish_error), 1);
    fx_unsubscribe(s);
    close_client(c);
    close_client(filler);
    close_client(stalled);
    e_free(e);
}

/* ---- stream names and cursors ----------------------------------------------------------- */

static void test_unknown_stream_autocreate_off_gives_stream_not_found(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.auto_create_streams = false;
    fx_broker_stream_name names[] = {{"t1", NS, "known"}};
    e->bo.streams = names;
    e->bo.nstreams = 1;
    e_start(e);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    char msg[256];
    assert_int_equal(fx_publish(c, NS, "nope", "x", 1, FX_ACK_PER_MESSAGE), FX_ENOSTREAM);
    fx_client_last_error(c, msg, sizeof(msg));
    assert_non_null(strstr(msg, "stream not found: tenant=t1 namespace=default stream=nope"));
    fx_iov one = {"y", 1};
    assert_int_equal(fx_publish_batch(c, NS, "nope", &one, 1, FX_ACK_PER_BATCH), FX_ENOSTREAM);
    fx_subscription *s = NULL;
    assert_int_equal(fx_subscribe(&s, c, NS, "nope", NULL), FX_ENOSTREAM);
    assert_null(s);
    fx_client_last_error(c, msg, sizeof(msg));
    assert_non_null(strstr(msg, "stream not found: tenant=t1 namespace=default stream=nope"));
    /* The same publish stream still serves a known stream. */
    assert_int_equal(fx_publish(c, NS, "known", "z", 1, FX_ACK_PER_MESSAGE), 0);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_error), 2);
    assert_int_equal(DELTA(a, b, publish_accepted), 1);
    assert_int_equal(DELTA(a, b, subscribe_req_error), 1);
    close_client(c);
    e_free(e);
}

static void expect_cursor_error(fx_client *c, uint64_t off, int code, uint64_t requested,
                                uint64_t available)
{
    fx_subscription *s = NULL;
    fx_start st = {.kind = FX_START_OFFSET, .offset = off};
    assert_int_equal(fx_subscribe(&s, c, NS, "cur", &st), code);
    assert_non_null(s);
    fx_sub_error err;
    assert_int_equal(fx_subscription_error(s, &err), 0);
    assert_int_equal(err.code, code);
    assert_int_equal(err.requested, requested);
    assert_int_equal(err.available, available);
    fx_unsubscribe(s);
}

static void expect_from(fx_client *c, fx_start_kind kind, uint64_t off, uint64_t first,
                        uint64_t last)
{
    fx_subscription *s = sub_from(c, "cur", kind, off);
    cons k = {0};
    cons_start(&k, s, last, size_64, false);
    cons_join_complete(&k, first);
    fx_unsubscribe(s);
}

static void test_subscribe_earliest_offset_too_old_in_future(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.log_capacity = 8;
    e->bo.ack_on_commit = true;
    e_start(e);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    publish_range(c, "cur", 0, 20, size_64, FX_ACK_PER_MESSAGE); /* the ring keeps 12..19 */
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    expect_from(c, FX_START_EARLIEST, 0, 12, 19);
    expect_from(c, FX_START_OFFSET, 15, 15, 19);
    expect_cursor_error(c, 3, FX_ECURSOR_TOO_OLD, 3, 12);
    expect_cursor_error(c, 25, FX_ECURSOR_IN_FUTURE, 25, 20);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, subscribe_req_ok), 2);
    assert_int_equal(DELTA(a, b, subscribe_req_error), 2);
    close_client(c);
    e_free(e);
}

static void test_backlog_then_live_without_gap_or_duplicate(void **state)
{
    (void)state;
    E *e = e_new();
    e_lossless(e);
    e->bo.ack_on_commit = true;
    e_start(e);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_client *pc = e_client(e, FX_POLICY_DEFAULT, 0, 0);
    enum { B = 600, L = 600 };
    publish_range(pc, "bl", 0, B, size_1k, FX_ACK_PER_MESSAGE);
    fx_subscription *s = sub_from(c, "bl", FX_START_EARLIEST, 0);
    cons k = {0};
    cons_start(&k, s, B + L - 1, size_1k, false);
    /* Live publishes race with the backlog replay. */
    publish_range(pc, "bl", B, L, size_1k, FX_ACK_NONE);
    cons_join_complete(&k, 0);
    fx_sub_stats st;
    assert_int_equal(fx_subscription_stats(s, &st), 0);
    assert_int_equal(st.received, B + L);
    assert_int_equal(st.gaps, 0);
    assert_int_equal(st.missed, 0);
    fx_unsubscribe(s);
    close_client(pc);
    close_client(c);
    e_free(e);
}

/* ---- subscription lifetime ------------------------------------------------------------ */

static void test_unsubscribe_removes_subscriber_and_gauges_return_to_zero(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.ack_on_commit = true;
    e_start(e);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_client *gone = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fix_wait_sub_gauges(0, 0);
    fx_subscription *s[3] = {sub_latest(c, "u"), sub_latest(c, "u"), sub_latest(c, "u")};
    fx_subscription *g = sub_latest(gone, "u");
    fix_wait_sub_gauges(4, 2);
    fx_unsubscribe(s[0]);
    fix_wait_sub_gauges(3, 2);
    /* A client that vanishes without unsubscribing. */
    close_client(gone);
    fix_wait_sub_gauges(2, 1);
    fx_event ev;
    assert_int_equal(fx_subscription_next(g, &ev, 0), FX_ECLOSED);
    fx_unsubscribe(g);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    publish_range(c, "u", 0, 10, size_64, FX_ACK_PER_MESSAGE);
    for (int i = 1; i < 3; i++) {
        cons k = {0};
        cons_start(&k, s[i], 9, size_64, false);
        cons_join_complete(&k, 0);
    }
    fx_metrics_snapshot_take(&b);
    /* Ten envelopes to each of the two left, none to the removed ones. */
    assert_int_equal(DELTA(a, b, sub_queue_enqueued), 20);
    fx_unsubscribe(s[1]);
    fx_unsubscribe(s[2]);
    fix_wait_sub_gauges(0, 0);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(b.g.sub_queue_len, 0);
    close_client(c);
    e_free(e);
}

/* ---- client behaviour ------------------------------------------------------------------ */

static void test_client_close_flushes_pending_unacked_publishes(void **state)
{
    (void)state;
    E *e = e_new();
    e_lossless(e);
    /* The whole burst fits the broker's receive window, so QUIC acknowledges
     * every byte while the held consumer keeps most frames parked at the
     * broker's ingress (not yet admitted): close must still deliver them. */
    e->bo.quic.stream_window = 8u << 20;
    e->bo.pub_queue_depth = 4;
    e->bo.subscriber_queue_capacity = 16;
    e->bo.subscriber_lane_queue_depth = 2;
    e_start(e);
    fx_client *sc = e_client(e, FX_POLICY_BLOCK, 64u << 10, 16);
    fx_client *pc = e_client(e, FX_POLICY_DEFAULT, 0, 0);
    enum { N = 3000 };
    fx_subscription *s = sub_latest(sc, "fl");
    cons k = {0};
    cons_start(&k, s, N - 1, size_1k, true);
    publish_range(pc, "fl", 0, N, size_1k, FX_ACK_NONE);
    atomic_store(&k.hold, false);
    assert_int_equal(fx_client_close(pc, HANG_MS), 0); /* no flush before it */
    cons_join_complete(&k, 0);
    expect_client_stats(s, N, 0, 0);
    fx_unsubscribe(s);
    close_client(sc);
    e_free(e);
}

typedef struct cbstate {
    atomic_uint_fast64_t n;
    uint64_t next, bad;
} cbstate;

static void on_event(void *user, const fx_event *ev)
{
    cbstate *st = user;
    bool ok = ev->has_offset && ev->offset == st->next && ev->len == 64;
    for (size_t j = 0; ok && j < ev->len; j++)
        ok = ev->payload[j] == pay_byte(ev->offset, j);
    if (!ok)
        st->bad++;
    st->next = ev->offset + 1;
    atomic_fetch_add(&st->n, 1);
}

static void test_callback_subscription_receives_all(void **state)
{
    (void)state;
    E *e = e_new();
    e_lossless(e);
    e_start(e);
    fx_client *sc = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_client *pc = e_client(e, FX_POLICY_DEFAULT, 0, 0);
    enum { N = 2000 };
    fx_subscription *s = sub_latest(sc, "cb");
    cbstate st = {0};
    assert_int_equal(fx_subscription_set_callback(s, on_event, &st), 0);
    publish_range(pc, "cb", 0, N, size_64, FX_ACK_NONE);
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    while (atomic_load(&st.n) < N && fx_now_ns() < deadline)
        sleep_ms(2);
    wait_stable(&st.n, 100); /* and no more than N */
    assert_int_equal(atomic_load(&st.n), N);
    assert_int_equal(st.bad, 0);
    expect_client_stats(s, N, 0, 0);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, 0), -EINVAL);
    fx_unsubscribe(s);
    close_client(pc);
    close_client(sc);
    e_free(e);
}

/* ---- client loops ------------------------------------------------------------ */

/* What one callback saw: its thread's name, and what a blocking publish on a
 * client of another loop returned there. */
typedef struct loop_seen {
    fx_client *other;
    char name[16];
    int publish_rv;
    atomic_bool got;
} loop_seen;

static void on_loop_event(void *user, const fx_event *ev)
{
    (void)ev;
    loop_seen *ls = user;
    if (atomic_load(&ls->got))
        return;
    pthread_getname_np(pthread_self(), ls->name, sizeof(ls->name));
    ls->publish_rv = fx_publish(ls->other, NS, "lpx", "x", 1, FX_ACK_PER_MESSAGE);
    atomic_store(&ls->got, true);
}

/* FELIX_CLIENT_LOOPS=2: clients are dealt to the two loops round-robin (their
 * callbacks run there), and a callback may not block on a client of the
 * other loop either. */
static void test_clients_are_dealt_over_client_loops(void **state)
{
    (void)state;
    assert_int_equal(setenv("FELIX_CLIENT_LOOPS", "2", 1), 0);
    E *e = e_new();
    e_start(e);
    enum { N = 3 };
    static const char *const streams[N] = {"lp0", "lp1", "lp2"};
    static const char *const want[N] = {"felix-client", "felix-client1", "felix-client"};
    fx_client *c[N];
    fx_subscription *s[N];
    loop_seen seen[N];
    for (int i = 0; i < N; i++)
        c[i] = e_client(e, FX_POLICY_DEFAULT, 0, 0);
    for (int i = 0; i < N; i++) {
        seen[i] = (loop_seen){.other = c[(i + 1) % N]};
        s[i] = sub_latest(c[i], streams[i]);
        assert_int_equal(fx_subscription_set_callback(s[i], on_loop_event, &seen[i]), 0);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(fx_publish(c[0], NS, streams[i], "m", 1, FX_ACK_PER_MESSAGE), 0);
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    for (int i = 0; i < N; i++) {
        while (!atomic_load(&seen[i].got) && fx_now_ns() < deadline)
            sleep_ms(2);
        assert_true(atomic_load(&seen[i].got));
        assert_string_equal(seen[i].name, want[i]);
        assert_int_equal(seen[i].publish_rv, FX_EWOULDBLOCK_LOOP);
    }
    for (int i = 0; i < N; i++) {
        fx_unsubscribe(s[i]);
        close_client(c[i]);
    }
    e_free(e);
}

static void test_bad_client_loops_setting_fails_connect_with_reason(void **state)
{
    (void)state;
    E *e = e_new();
    e_start(e);
    assert_int_equal(setenv("FELIX_CLIENT_LOOPS", "0", 1), 0);
    fx_client_opts o;
    copts(e, &o);
    fx_client *c = NULL;
    assert_int_equal(fx_client_connect(&c, &o), -EINVAL);
    assert_null(c);
    char msg[256];
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "FELIX_CLIENT_LOOPS='0'"));
    assert_int_equal(setenv("FELIX_CLIENT_LOOPS", "1", 1), 0); /* read again: works now */
    c = e_client(e, FX_POLICY_DEFAULT, 0, 0);
    close_client(c);
    e_free(e);
}

/* Payload of a many-threads publish: producer, its sequence on the stream. */
typedef struct mt_pub {
    fx_client *c;
    uint32_t id;
    int rv;
    pthread_t th;
} mt_pub;

enum { MT_THREADS = 4, MT_STREAMS = 4, MT_PER_THREAD = 2000 };
static const char *const MT_NAMES[MT_STREAMS] = {"mt0", "mt1", "mt2", "mt3"};

static void *mt_main(void *arg)
{
    mt_pub *p = arg;
    for (uint32_t i = 0; i < MT_PER_THREAD && p->rv == 0; i++) {
        uint32_t seq = i / MT_STREAMS;
        uint8_t buf[16];
        memcpy(buf, &p->id, 4);
        memcpy(buf + 4, &seq, 4);
        fill(buf + 8, p->id * 100000u + seq, 8);
        p->rv = fx_publish(p->c, NS, MT_NAMES[i % MT_STREAMS], buf, sizeof(buf), FX_ACK_NONE);
    }
    return NULL;
}

typedef struct mt_check {
    uint32_t next[MT_THREADS];
} mt_check;

static bool verify_mt(cons *k, const fx_event *ev)
{
    mt_check *m = k->arg;
    uint32_t id, seq;
    if (ev->len != 16)
        return false;
    memcpy(&id, ev->payload, 4);
    memcpy(&seq, ev->payload + 4, 4);
    if (id >= MT_THREADS || seq != m->next[id])
        return false; /* per-producer order on the stream */
    m->next[id]++;
    for (size_t j = 0; j < 8; j++)
        if (ev->payload[8 + j] != pay_byte(id * 100000u + seq, j))
            return false;
    return true;
}

static void test_many_threads_publishing_concurrently(void **state)
{
    (void)state;
    E *e = e_new();
    e_lossless(e);
    e->bo.workers = 2;
    e_start(e);
    fx_client *sc = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_client *pc = e_client(e, FX_POLICY_DEFAULT, 0, 0);
    enum { PER_STREAM = MT_THREADS * MT_PER_THREAD / MT_STREAMS };
    cons k[MT_STREAMS] = {0};
    mt_check chk[MT_STREAMS] = {0};
    fx_subscription *s[MT_STREAMS];
    for (int i = 0; i < MT_STREAMS; i++) {
        s[i] = sub_latest(sc, MT_NAMES[i]);
        k[i].verify = verify_mt;
        k[i].arg = &chk[i];
        cons_start(&k[i], s[i], PER_STREAM - 1, NULL, false);
    }
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    mt_pub p[MT_THREADS];
    for (uint32_t i = 0; i < MT_THREADS; i++) {
        p[i] = (mt_pub){.c = pc, .id = i};
        assert_int_equal(pthread_create(&p[i].th, NULL, mt_main, &p[i]), 0);
    }
    for (int i = 0; i < MT_THREADS; i++) {
        assert_int_equal(pthread_join(p[i].th, NULL), 0);
        assert_int_equal(p[i].rv, 0);
    }
    assert_int_equal(fx_flush(pc, HANG_MS), 0);
    for (int i = 0; i < MT_STREAMS; i++) {
        cons_join_complete(&k[i], 0);
        for (int t = 0; t < MT_THREADS; t++)
            assert_int_equal(chk[i].next[t], MT_PER_THREAD / MT_STREAMS);
        expect_client_stats(s[i], PER_STREAM, 0, 0);
    }
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, publish_ok), MT_THREADS * MT_PER_THREAD);
    assert_int_equal(DELTA(a, b, ingress_dropped), 0);
    for (int i = 0; i < MT_STREAMS; i++)
        fx_unsubscribe(s[i]);
    close_client(pc);
    close_client(sc);
    e_free(e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_one_publisher_three_subscribers_every_message_once_in_order),
    cmocka_unit_test(test_lossless_burst_10000_fanout_10_loses_nothing),
    cmocka_unit_test(test_lossless_stalled_subscriber_slows_publisher_without_loss),
    cmocka_unit_test(test_default_mode_stalled_subscriber_sheds_and_counts),
    cmocka_unit_test(test_acks_per_message_and_per_batch_with_and_without_ack_on_commit),
    cmocka_unit_test(test_acks_out_of_order_across_streams_paired_correctly),
    cmocka_unit_test(test_unknown_stream_autocreate_off_gives_stream_not_found),
    cmocka_unit_test(test_subscribe_earliest_offset_too_old_in_future),
    cmocka_unit_test(test_backlog_then_live_without_gap_or_duplicate),
    cmocka_unit_test(test_gap_reported_to_application_when_subscriber_queue_drops),
    cmocka_unit_test(test_unsubscribe_removes_subscriber_and_gauges_return_to_zero),
    cmocka_unit_test(test_client_close_flushes_pending_unacked_publishes),
    cmocka_unit_test(test_callback_subscription_receives_all),
    cmocka_unit_test(test_clients_are_dealt_over_client_loops),
    cmocka_unit_test(test_bad_client_loops_setting_fails_connect_with_reason),
    cmocka_unit_test(test_many_threads_publishing_concurrently),
};
FX_TEST_MAIN(tests)
