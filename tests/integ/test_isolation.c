/* Isolation test against a real broker in this process on 127.0.0.1 port 0
 * (default drop_new subscriber queues): one subscriber sits behind a bad
 * link (its client endpoint's test hooks hold every received datagram for
 * 200 ms and drop 5% both ways) and must not hold back the healthy
 * subscribers of the same stream, which get every message, in order, each
 * well before the injected delay. The victim's losses must all be visible:
 * its gaps, its received count and the broker's drop counter for its
 * subscription agree. The bad link is libfelix's test hook
 * (client/test_hooks.h). Timeouts are hang guards;
 * the only time bound is the correctness bound on healthy deliveries (a
 * healthy message that waited behind the victim would take >= 200 ms). */
/* fx-test-libs: fx_broker fx_client fx_quic fx_wire fx_base */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#define HANG_MS 8000 /* before fixture.h: its hang guard */

#include "client/test_hooks.h"
#include "integ/fixture.h"
#include "quic/quic.h"

#define STREAM "iso"
#define NMSG 2000
#define MSG_LEN 256
#define PACE_EVERY 10 /* messages between 2 ms pauses */
#define BAD_DELAY_NS (200 * FX_NS_PER_MS)
#define BAD_DROP_PERMILLE 50
#define MAX_MARKERS 20
#define NSUB 3
#define VICTIM 2 /* which subscriber sits behind the bad link */

/* ---- broker ------------------------------------------------------------------ */

typedef fix_env E;

static E *e_start(void)
{
    E *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    fix_state_dir_new(e->dir, sizeof(e->dir), "iso");
    fix_broker_opts(&e->bo, e->dir); /* drop_new at checkpoints 5 and 6 */
    /* Ingress never sheds, so every published message is in the ring and
     * offset i is the i-th publish: losses can only be the victim's. */
    e->bo.pub_ingress_wait = true;
    /* A small per-subscription unacked allowance keeps the victim's backlog
     * in the broker's queues, where drop_new sheds and counts it, instead
     * of in its QUIC send buffer (the whole burst would fit in the default
     * 1 MiB, so nothing would be shed). */
    e->bo.subscriber_unacked_bytes = 32u << 10;
    fix_env_start(e);
    return e;
}

static void e_free(E *e)
{
    fix_env_deinit(e);
    free(e);
}

/* Drops the broker counts for subscription |id| into |*drops| and
 * |*found|; drops = queue (checkpoint 5) + lane (checkpoint 6) drops. */
static void broker_sub_drops(E *e, uint64_t id, uint64_t *drops, bool *found)
{
    char *text = NULL;
    assert_int_equal(fx_broker_list_subscriptions(e->b, HANG_MS * FX_NS_PER_MS, &text), 0);
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    free(text);
    assert_non_null(root);
    json_t *arr = json_object_get(root, "subscriptions");
    assert_true(json_is_array(arr));
    *found = false;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *s = json_array_get(arr, i);
        if ((uint64_t)json_integer_value(json_object_get(s, "id")) != id)
            continue;
        json_t *d = json_object_get(s, "drops");
        assert_true(json_is_integer(d));
        *drops = (uint64_t)json_integer_value(d);
        *found = true;
    }
    json_decref(root);
}

/* ---- clients ----------------------------------------------------------------- */

static fx_client *e_client(E *e)
{
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, "t1", "any-token");
    o.sub_queue_policy = FX_POLICY_BLOCK; /* the client sheds nothing: gaps are the broker's */
    return fix_connect(&o);
}

static fx_subscription *sub_latest(fx_client *c)
{
    return fix_subscribe(c, STREAM, NULL);
}

/* The victim's link, through libfelix's test hook (run on the client's loop). */
static void set_link(fx_client *c, uint64_t delay_ns, uint32_t drop_permille)
{
    assert_int_equal(fxc_client_test_link(c, true, delay_ns, drop_permille, NULL), 0);
}

static void link_stats(fx_client *c, fx_quic_stats *st)
{
    assert_int_equal(fxc_client_test_link(c, false, 0, 0, st), 0);
}

/* ---- payloads ------------------------------------------------------------------ */

/* A message: its CLOCK_MONOTONIC send time, its index (= its offset), then
 * bytes derived from the index. */
static void make_msg(uint8_t *p, uint64_t i)
{
    uint64_t now = fx_now_ns();
    memcpy(p, &now, 8);
    memcpy(p + 8, &i, 8);
    for (size_t j = 16; j < MSG_LEN; j++)
        p[j] = (uint8_t)(i * 31 + j);
}

static bool msg_intact(const fx_event *ev)
{
    if (ev->len != MSG_LEN)
        return false;
    uint64_t i;
    memcpy(&i, ev->payload + 8, 8);
    if (i != ev->offset)
        return false;
    for (size_t j = 16; j < MSG_LEN; j++)
        if (ev->payload[j] != (uint8_t)(i * 31 + j))
            return false;
    return true;
}

static void publish_one(fx_client *pub, uint64_t i)
{
    uint8_t p[MSG_LEN];
    make_msg(p, i);
    int rv = fx_publish(pub, NS, STREAM, p, sizeof(p), FX_ACK_NONE);
    if (rv != 0)
        fail_msg("publish %llu: %s", (unsigned long long)i, fx_errname(rv));
}

/* ---- consumers ----------------------------------------------------------------- */

/* One consumer thread per subscription. Counters other than the atomics are
 * read after the join. */
typedef struct cons {
    fx_subscription *s;
    pthread_t th;
    atomic_bool stop;
    atomic_uint_fast64_t next; /* offset after the last event taken */
    uint64_t got;
    bool have_first;
    uint64_t first_off;
    uint64_t gap_sum;  /* messages missed, from the gap flags */
    uint64_t disorder; /* offsets going back, or jumps without a matching gap flag */
    uint64_t damaged;  /* payload not the one published at that offset */
    uint64_t max_lat;  /* slowest delivery, ns from publish to fx_subscription_next */
    uint64_t late;     /* deliveries at or above BAD_DELAY_NS */
    atomic_int rv;     /* why the thread ended early, or 0 */
} cons;

static void cons_take(cons *k, const fx_event *ev)
{
    uint64_t now = fx_now_ns(), sent;
    if (!ev->has_offset || !msg_intact(ev)) {
        k->damaged++;
        return;
    }
    memcpy(&sent, ev->payload, 8);
    uint64_t lat = now - sent;
    k->max_lat = lat > k->max_lat ? lat : k->max_lat;
    k->late += lat >= BAD_DELAY_NS;
    uint64_t want = atomic_load(&k->next);
    if (!k->have_first) {
        k->have_first = true;
        k->first_off = ev->offset;
    } else if (ev->offset < want) {
        k->disorder++;
    } else if (ev->offset > want) {
        bool flagged = (ev->flags & FX_EVENT_GAP) && ev->gap == ev->offset - want;
        k->disorder += !flagged;
        k->gap_sum += ev->offset - want;
    } else if (ev->flags & FX_EVENT_GAP) {
        k->disorder++;
    }
    k->got++;
    atomic_store(&k->next, ev->offset + 1);
}

static void *cons_main(void *arg)
{
    cons *k = arg;
    while (!atomic_load(&k->stop)) {
        fx_event ev;
        int rv = fx_subscription_next(k->s, &ev, 20);
        if (rv == FX_ETIMEDOUT)
            continue;
        if (rv != 0) {
            atomic_store(&k->rv, rv);
            break;
        }
        cons_take(k, &ev);
    }
    return NULL;
}

static void cons_start(cons *k, fx_subscription *s)
{
    memset(k, 0, sizeof(*k));
    k->s = s;
    atomic_init(&k->stop, false);
    atomic_init(&k->next, 0);
    atomic_init(&k->rv, 0);
    assert_int_equal(pthread_create(&k->th, NULL, cons_main, k), 0);
}

static void cons_join(cons *k)
{
    atomic_store(&k->stop, true);
    assert_int_equal(pthread_join(k->th, NULL), 0);
    if (atomic_load(&k->rv) != 0)
        fail_msg("consumer ended with %s after %llu events", fx_errname(atomic_load(&k->rv)),
                 (unsigned long long)k->got);
}

/* Waits until |k| took offset |off| (or later); false after |ms|. */
static bool cons_wait(cons *k, uint64_t off, unsigned ms)
{
    uint64_t deadline = fix_deadline_ns(ms);
    while (atomic_load(&k->next) <= off) {
        if (fx_now_ns() > deadline || atomic_load(&k->rv) != 0)
            return false;
        usleep(1000);
    }
    return true;
}

/* ---- the test -------------------------------------------------------------------- */

/* After the burst the link is healed and markers are published until the
 * victim takes one, so its every loss is followed by a delivery that
 * reports it. Returns how many messages were published in all. */
static uint64_t heal_and_mark(fx_client *pub, fx_client *victim, cons *v, uint64_t base)
{
    set_link(victim, 0, 0);
    for (uint64_t m = 0; m < MAX_MARKERS; m++) {
        publish_one(pub, base + m);
        if (cons_wait(v, base + m, 1000))
            return base + m + 1;
    }
    fail_msg("the healed victim took none of %d markers (next offset %llu)", MAX_MARKERS,
             (unsigned long long)atomic_load(&v->next));
    return 0;
}

static void check_healthy(E *e, cons *k, uint64_t total)
{
    fx_sub_stats st;
    assert_int_equal(fx_subscription_stats(k->s, &st), 0);
    if (k->got != total || k->gap_sum != 0 || k->disorder != 0 || k->damaged != 0 || k->late != 0)
        fail_msg("healthy subscriber: got %llu of %llu, missed %llu, disorder %llu, damaged %llu, "
                 "%llu deliveries >= 200 ms (max %.1f ms)",
                 (unsigned long long)k->got, (unsigned long long)total,
                 (unsigned long long)k->gap_sum, (unsigned long long)k->disorder,
                 (unsigned long long)k->damaged, (unsigned long long)k->late, k->max_lat / 1e6);
    assert_int_equal(k->first_off, 0);
    assert_int_equal(st.missed, 0);
    uint64_t drops = 0;
    bool found = false;
    broker_sub_drops(e, st.subscription_id, &drops, &found);
    assert_true(found);
    assert_int_equal(drops, 0);
    print_message("healthy: %llu taken, slowest %.1f ms\n", (unsigned long long)k->got,
                  k->max_lat / 1e6);
}

static void check_victim(E *e, cons *v, fx_client *victim, uint64_t total)
{
    assert_int_equal(v->disorder, 0);
    assert_int_equal(v->damaged, 0);
    assert_int_equal(v->first_off, 0);
    /* Every message is either taken or reported missing, and what is
     * missing is exactly what the broker counted as dropped for it. */
    assert_int_equal(v->got + v->gap_sum, total);
    fx_sub_stats st;
    assert_int_equal(fx_subscription_stats(v->s, &st), 0);
    assert_int_equal(st.received, v->got);
    assert_int_equal(st.missed, v->gap_sum);
    assert_int_equal(st.dropped, 0);
    uint64_t drops = 0;
    bool found = false;
    broker_sub_drops(e, st.subscription_id, &drops, &found);
    assert_true(found);
    assert_int_equal(drops, v->gap_sum);
    /* The bad link was really in the way. */
    fx_quic_stats qs;
    link_stats(victim, &qs);
    assert_true(qs.test_dropped > 0);
    assert_true(v->max_lat >= BAD_DELAY_NS);
    print_message("victim: %llu taken, %llu missed (broker drops %llu), slowest %.0f ms; "
                  "%llu of %llu datagrams lost on its link\n",
                  (unsigned long long)v->got, (unsigned long long)v->gap_sum,
                  (unsigned long long)drops, v->max_lat / 1e6, (unsigned long long)qs.test_dropped,
                  (unsigned long long)(qs.rx_datagrams + qs.tx_datagrams));
}

static void test_subscriber_behind_bad_link_does_not_hold_back_healthy_ones(void **state)
{
    E *e = e_start();
    fx_client *pub = e_client(e);
    fx_client *cl[NSUB];
    fx_subscription *s[NSUB];
    for (int i = 0; i < NSUB; i++) {
        cl[i] = e_client(e); /* each its own endpoint and connection */
        s[i] = sub_latest(cl[i]);
    }
    fix_wait_sub_gauges(NSUB, -1);
    cons k[NSUB];
    for (int i = 0; i < NSUB; i++)
        cons_start(&k[i], s[i]);
    set_link(cl[VICTIM], BAD_DELAY_NS, BAD_DROP_PERMILLE);

    uint64_t t0 = fx_now_ns();
    for (uint64_t i = 0; i < NMSG; i++) {
        publish_one(pub, i);
        if ((i + 1) % PACE_EVERY == 0)
            usleep(2000);
    }
    print_message("burst published in %.0f ms\n", (fx_now_ns() - t0) / 1e6);
    /* The drop hook is random and only some dozens of datagrams cross the
     * lossy link: keep it busy until it has dropped at least one, so the
     * loss accounting below is always exercised. */
    uint64_t sent = NMSG;
    fx_quic_stats ls;
    for (int round = 0; round < 400; round++) {
        link_stats(cl[VICTIM], &ls);
        if (ls.test_dropped > 0)
            break;
        for (int j = 0; j < PACE_EVERY; j++)
            publish_one(pub, sent++);
        usleep(2000);
    }
    for (int i = 0; i < NSUB; i++)
        if (i != VICTIM && !cons_wait(&k[i], sent - 1, HANG_MS))
            fail_msg("healthy subscriber %d stopped at offset %llu of %llu", i,
                     (unsigned long long)atomic_load(&k[i].next), (unsigned long long)sent);

    uint64_t total = heal_and_mark(pub, cl[VICTIM], &k[VICTIM], sent);
    for (int i = 0; i < NSUB; i++)
        assert_true(i == VICTIM || cons_wait(&k[i], total - 1, HANG_MS));
    for (int i = 0; i < NSUB; i++)
        cons_join(&k[i]);
    for (int i = 0; i < NSUB; i++)
        if (i != VICTIM)
            check_healthy(e, &k[i], total);
    check_victim(e, &k[VICTIM], cl[VICTIM], total);

    for (int i = 0; i < NSUB; i++) {
        fx_unsubscribe(s[i]);
        assert_int_equal(fx_client_close(cl[i], HANG_MS), 0);
    }
    assert_int_equal(fx_client_close(pub, HANG_MS), 0);
    e_free(e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_subscriber_behind_bad_link_does_not_hold_back_healthy_ones),
};
FX_TEST_MAIN(tests)
