/* Tests of felix-bench: its pure logic (bench/bench_lib.c, compiled in):
 * percentiles, loss accounting and the verdict, the run-length guard and the
 * credit window (single-threaded); and its run engine (bench/bench_run.c and
 * bench_sys.c, compiled in) in isolation mode against a broker started in
 * this process, as felix-bench starts one (the engine runs its own reader
 * threads and the client library its loops). */
/* fx-test-libs: fx_client fx_broker fx_quic fx_wire fx_base */
#include "../../bench/bench_acked.c"
#include "../../bench/bench_lib.c"
#include "../../bench/bench_run.c"
#include "../../bench/bench_sys.c"

#include <dirent.h>

#include "base/log.h"
#include "broker/broker.h"
#include "fx_test.h"

/* Feeds sequences |seqs| (stream 0 of 1, batch 1) into |a|. */
static void feed(fx_bench_acct *a, const uint64_t *seqs, size_t n)
{
    uint8_t msg[64];
    for (size_t i = 0; i < n; i++) {
        memset(msg, 0, sizeof(msg));
        fx_bench_stamp(msg, seqs[i], 1000 + i);
        fx_bench_acct_on_msg(a, msg, sizeof(msg), 5000 + i);
    }
}

static void test_percentiles_on_known_samples(void **state)
{
    (void)state;
    /* 1..1000 µs, shuffled: nearest rank gives exact values. */
    uint64_t v[1000];
    for (size_t i = 0; i < 1000; i++)
        v[i] = ((i * 617) % 1000 + 1) * 1000;
    fx_bench_lat l;
    fx_bench_lat_summarize(v, 1000, &l);
    assert_int_equal(l.n, 1000);
    assert_true(l.p50_us == 500.0);
    assert_true(l.p90_us == 900.0);
    assert_true(l.p99_us == 990.0);
    assert_true(l.p999_us == 999.0);
    assert_true(l.max_us == 1000.0);
    assert_true(fabs(l.mean_us - 500.5) < 1e-9);
    /* Small sets: ceil(p * n) rank; one sample is every percentile. */
    uint64_t three[] = {30000, 10000, 20000};
    fx_bench_lat_summarize(three, 3, &l);
    assert_true(l.p50_us == 20.0);
    assert_true(l.p99_us == 30.0);
    uint64_t one[] = {7000};
    fx_bench_lat_summarize(one, 1, &l);
    assert_true(l.p50_us == 7.0 && l.p999_us == 7.0);
    fx_bench_lat_summarize(v, 0, &l);
    assert_true(isnan(l.p50_us) && isnan(l.max_us));
    double m[] = {3.0, NAN, 1.0, 2.0};
    assert_true(fx_bench_median(m, 4) == 2.0);
}

static void test_run_with_loss_is_invalid(void **state)
{
    (void)state;
    /* Warm-up 10; 100 measured sent; sequence 50 and 51 never arrive. */
    uint64_t seqs[110];
    size_t n = 0;
    for (uint64_t s = 0; s < 110; s++)
        if (s != 50 && s != 51)
            seqs[n++] = s;
    fx_bench_acct a;
    fx_bench_acct_init(&a, 0, 1, 1, 10, NULL, 0);
    feed(&a, seqs, n);
    assert_int_equal(a.gaps, 2);
    assert_int_equal(a.recv_meas, 98);
    fx_bench_totals t = {.sent_measured = 100, .expected = 100};
    fx_bench_totals_add(&t, &a);
    fx_bench_totals_finish(&t);
    assert_int_equal(t.lost, 2);
    char why[128];
    assert_false(fx_bench_verdict(&t, why, sizeof(why)));
    assert_non_null(strstr(why, "lost 2"));
    /* The human line says INVALID and carries no throughput figure. */
    char line[256];
    fx_bench_tput r = {.valid = false, .why = why, .msgs_per_s = 123456, .lost = t.lost};
    fx_bench_format_tput(line, sizeof(line), &r);
    assert_non_null(strstr(line, "INVALID"));
    assert_null(strstr(line, "msg/s"));
    assert_null(strstr(line, "123456"));

    /* The test-only drop injects loss the same way; a clean run is valid. */
    fx_bench_acct b;
    fx_bench_acct_init(&b, 0, 1, 1, 0, NULL, 0);
    b.drop_every = 10;
    for (uint64_t s = 0; s < 100; s++)
        seqs[s] = s;
    feed(&b, seqs, 100);
    fx_bench_totals t2 = {.sent_measured = 100, .expected = 100};
    fx_bench_totals_add(&t2, &b);
    fx_bench_totals_finish(&t2);
    assert_int_equal(t2.lost, 10);
    assert_false(fx_bench_verdict(&t2, why, sizeof(why)));
    fx_bench_acct_init(&b, 0, 1, 1, 0, NULL, 0);
    feed(&b, seqs, 100);
    fx_bench_totals t3 = {.sent_measured = 100, .expected = 100};
    fx_bench_totals_add(&t3, &b);
    fx_bench_totals_finish(&t3);
    assert_true(fx_bench_verdict(&t3, why, sizeof(why)));
    /* A duplicate also invalidates. */
    uint64_t again[] = {99};
    feed(&b, again, 1);
    fx_bench_totals t4 = {.sent_measured = 100, .expected = 100};
    fx_bench_totals_add(&t4, &b);
    fx_bench_totals_finish(&t4);
    assert_int_equal(t4.dups, 1);
    assert_false(fx_bench_verdict(&t4, why, sizeof(why)));
}

static void test_loss_account_sums_every_counter(void **state)
{
    (void)state;
    fx_bench_loss l = {.expected = 1000,
                       .received = 600,
                       .client_dropped = 10,
                       .queue_dropped = 20,
                       .lane_dropped = 300,
                       .upstream = 70};
    assert_int_equal(fx_bench_loss_missed(&l), 400);
    assert_int_equal(fx_bench_loss_counted(&l), 400);
    l.lane_dropped = 299;
    assert_int_equal(fx_bench_loss_counted(&l), 399);
    l.received = 1001; /* more than published: duplicates, not a negative loss */
    assert_int_equal(fx_bench_loss_missed(&l), 0);
}

static void test_subscription_counters_are_read_by_id(void **state)
{
    (void)state;
    const char *json = "{\"subscriptions\":["
                       "{\"id\":7,\"queue_dropped\":3,\"lane_dropped\":40,\"queue_depth\":1,"
                       "\"lane_depth\":2,\"unacked_bytes\":0},"
                       "{\"id\":9,\"queue_dropped\":0,\"lane_dropped\":5,\"queue_depth\":0,"
                       "\"lane_depth\":0,\"unacked_bytes\":0}]}";
    fx_bench_sub_counter sc[2] = {{.id = 9}, {.id = 7}};
    assert_int_equal(fx_bench_sub_counters_parse(json, sc, 2), 0);
    assert_true(sc[0].found && sc[1].found);
    assert_int_equal(sc[0].lane_dropped, 5);
    assert_int_equal(sc[0].held, 0);
    assert_int_equal(sc[1].queue_dropped, 3);
    assert_int_equal(sc[1].lane_dropped, 40);
    assert_int_equal(sc[1].held, 3);
    fx_bench_sub_counter missing = {.id = 8};
    assert_int_equal(fx_bench_sub_counters_parse(json, &missing, 1), -ENOENT);
    assert_int_equal(fx_bench_sub_counters_parse("[1,2]", sc, 2), -EPROTO);
    assert_int_equal(fx_bench_sub_counters_parse("not json", sc, 2), -EPROTO);
}

static void test_loss_is_counted_per_stream(void **state)
{
    (void)state;
    /* Batches of 4 over 3 streams: of 0..29, stream 1 carries 4..7, 16..19,
     * 28..29 and stream 2 carries 8..11, 20..23. */
    assert_int_equal(fx_bench_stream_of(17, 4, 3), 1);
    assert_int_equal(fx_bench_stream_count(30, 4, 3, 1), 10);
    assert_int_equal(fx_bench_stream_count(30, 4, 3, 2), 8);
    assert_int_equal(fx_bench_stream_count(30, 4, 3, 0) + fx_bench_stream_count(30, 4, 3, 1) +
                         fx_bench_stream_count(30, 4, 3, 2),
                     30);
    fx_bench_acct a;
    fx_bench_acct_init(&a, 1, 3, 4, 0, NULL, 0);
    uint64_t seqs[] = {4, 5, 6, 7, 18, 19, 28, 3};
    feed(&a, seqs, 8);
    assert_int_equal(a.gaps, 2); /* 16 and 17 */
    assert_int_equal(a.in_order, 7);
    assert_int_equal(a.bad, 1); /* 3 belongs to stream 0 */
}

static void test_run_length_guard_refuses_short_runs(void **state)
{
    (void)state;
    fx_bench_buffers b = {
        .client_publish_budget = 4u << 20,
        .broker_ingress_bytes = 32u << 20,
        .broker_worker_queue = 64,
        .sub_queue_batches = 512,
        .lane_queue_batches = 64,
        .sub_unacked_bytes = 1u << 20,
        .sub_recv_window = 16u << 20,
        .client_sub_queue_batches = 256,
        .batch_bytes_max = 65536,
    };
    /* 1 KiB x fanout 10: the credit window (4 MiB) caps each subscriber. */
    uint64_t buf = fx_bench_bufferable(&b, 1024, 64, 10);
    assert_int_equal(buf, 10ull * (4u << 20));
    uint64_t need = fx_bench_guard_min_total(buf, 1024, 10);
    assert_int_equal(need, 10ull * 4096);
    char why[256];
    assert_false(fx_bench_guard_ok(need - 1, 5.0, buf, 1024, 10, why, sizeof(why)));
    assert_non_null(strstr(why, "too short"));
    assert_true(fx_bench_guard_ok(need, 5.0, buf, 1024, 10, why, sizeof(why)));
    /* Under 5 s is refused whatever the volume. */
    assert_false(fx_bench_guard_ok(need * 100, 4.9, buf, 1024, 10, why, sizeof(why)));
    assert_non_null(strstr(why, "5 s"));
    /* A small pipeline (tiny queues) is the bound when below the window. */
    fx_bench_buffers small = {.client_publish_budget = 1000, .batch_bytes_max = 16};
    assert_int_equal(fx_bench_bufferable(&small, 16, 1, 2), 2 * 1000);
}

static void test_credit_window_never_exceeds_4mib_or_16384_msgs(void **state)
{
    (void)state;
    for (size_t p = 16; p <= FX_BENCH_PAYLOAD_MAX; p = p * 3 / 2 + 1) {
        uint64_t w = fx_bench_credit_window(p);
        assert_true(w >= 1);
        assert_true(w <= FX_BENCH_WINDOW_MAX_MSGS);
        assert_true(w * p <= FX_BENCH_WINDOW_MAX_BYTES);
    }
    assert_int_equal(fx_bench_credit_window(16), 16384);
    assert_int_equal(fx_bench_credit_window(1024), 4096);
    assert_int_equal(fx_bench_credit_window(FX_BENCH_PAYLOAD_MAX), 1);
}

/* ---- the run engine against an in-process broker ----------------------------- */

typedef struct tbroker {
    fx_broker *b;
    char dir[64];
    char addr[32];
    char pin[72];
} tbroker;

/* Starts a broker on 127.0.0.1 port 0 with the default (shedding)
 * profile, which felix-bench's overload and isolation modes measure, with
 * |tweak| (may be NULL) applied to its options. */
static void tbroker_start_with(tbroker *t, void (*tweak)(fx_broker_opts *))
{
    snprintf(t->dir, sizeof(t->dir), "/tmp/fxbenchXXXXXX");
    assert_non_null(mkdtemp(t->dir));
    fx_broker_opts bo;
    fx_broker_opts_default(&bo);
    bo.quic.state_dir = t->dir;
    if (tweak != NULL)
        tweak(&bo);
    assert_int_equal(fx_broker_new(&t->b, &bo), 0);
    assert_int_equal(fx_broker_start(t->b), 0);
    snprintf(t->addr, sizeof(t->addr), "127.0.0.1:%u", (unsigned)fx_broker_port(t->b));
    snprintf(t->pin, sizeof(t->pin), "%s", fx_broker_fingerprint(t->b));
}

static void tbroker_start(tbroker *t)
{
    tbroker_start_with(t, NULL);
}

/* Frees the broker and removes its state directory (flat: key, cert). */
static void tbroker_stop(tbroker *t)
{
    fx_broker_free(t->b);
    DIR *d = opendir(t->dir);
    assert_non_null(d);
    struct dirent *e;
    char path[320];
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof(path), "%s/%s", t->dir, e->d_name);
            assert_int_equal(unlink(path), 0);
        }
    closedir(d);
    assert_int_equal(rmdir(t->dir), 0);
}

/* Runs |c| once; fails the test unless the run took place and is valid. */
static void run_valid(const fx_bench_cfg *c, fx_bench_result *r)
{
    int rv = fx_bench_run_once(c, r);
    if (rv != 0)
        fail_msg("run failed: %s", r->errmsg);
    if (!r->valid)
        fail_msg("run invalid: %s", r->why);
}

/* A run of |mode| with |fanout| subscribers against |t|; one stream, readers
 * silent for a second after the end count what they miss as lost. */
static fx_bench_cfg inproc_cfg(const tbroker *t, fx_bench_mode mode, uint32_t fanout)
{
    return (fx_bench_cfg){.mode = mode,
                          .fanout = fanout,
                          .streams = 1,
                          .idle_seconds = 1.0,
                          .server = t->addr,
                          .pin = t->pin,
                          .in_process = true,
                          .ns = "bench"};
}

static void test_isolation_mode_reports_ratios_and_victim_losses(void **state)
{
    (void)state;
    fx_log_set_level(FX_LOG_ERROR); /* the broker warns of every lane drop for the victim */
    tbroker t;
    tbroker_start(&t);
    /* Small sizes: two phases of ~0.3 s measured each, the victim read for
     * at most 1 s after each publisher's end (also how long a healthy
     * reader may fall silent after it before its missing messages count
     * as lost: generous for a loaded host). felix-bench's default
     * payload and batch: their credit window (4096 messages, 64 batches)
     * fits the broker's default per-subscriber queues, so the healthy
     * subscribers are never shed (much smaller batches would be). */
    fx_bench_cfg c = inproc_cfg(&t, FX_BENCH_ISOLATION, 3);
    c.payload = 1024;
    c.batch = 64;
    c.warmup = 256;
    c.total = 4096;
    c.min_seconds = 0.3;
    c.max_seconds = 10;
    c.victim_delay_ms = 200;
    c.victim_drop_permille = 50;
    fx_bench_result r;
    run_valid(&c, &r);
    print_message("healthy: clean %.0f msg/s p99 %.1f us, impaired %.0f msg/s p99 %.1f us; "
                  "victim %llu of %llu, %llu datagrams dropped on its link\n",
                  r.clean_msgs_per_s, r.clean_p99_us, r.impaired_msgs_per_s, r.impaired_p99_us,
                  (unsigned long long)r.victim_received, (unsigned long long)r.victim_expected,
                  (unsigned long long)r.victim_link_dropped);
    /* The healthy subscribers (all but the victim) lost nothing. */
    assert_true(r.t.expected > 0);
    assert_int_equal(r.t.expected, r.t.sent_measured * (c.fanout - 1));
    assert_int_equal(r.t.delivered, r.t.expected);
    assert_int_equal(r.t.lost, 0);
    assert_int_equal(r.healthy_client_dropped, 0);
    /* Both phases gave figures, and the ratios are impaired / clean. */
    assert_true(isfinite(r.isolation_tput_ratio) && r.isolation_tput_ratio > 0);
    assert_true(isfinite(r.isolation_p99_ratio) && r.isolation_p99_ratio > 0);
    assert_true(fabs(r.isolation_tput_ratio - r.impaired_msgs_per_s / r.clean_msgs_per_s) < 1e-9);
    assert_true(fabs(r.isolation_p99_ratio - r.impaired_p99_us / r.clean_p99_us) < 1e-9);
    assert_true(r.impaired_msgs_per_s == r.msgs_per_s && r.impaired_p99_us == r.lat.p99_us);
    /* The victim's figures: how much it lost is random (the drop hook). */
    assert_true(r.victim_expected > 0);
    assert_true(r.victim_received + r.victim_gaps <= r.victim_expected);
    tbroker_stop(&t);
}

/* Queues small enough that the broker sheds at every checkpoint under one
 * publisher: its worker queue (ingress), the subscriber queues and lanes,
 * the healthy subscribers' too. */
static void tiny_queues(fx_broker_opts *o)
{
    o->pub_queue_depth = 1;
    o->subscriber_queue_capacity = 4;
    o->subscriber_lane_queue_depth = 2;
}

/* Overload mode on tiny queues: the broker sheds at ingress (every
 * subscriber misses those) and for the stalled subscriber, and the healthy
 * ones may be shed too; each subscriber's loss (published - received)
 * equals the sum of the counters that cover it: its client queue, the
 * broker's drops on its own subscriptions and the ingress drops in
 * messages. */
static void test_overload_mode_accounts_every_subscribers_losses(void **state)
{
    (void)state;
    fx_log_set_level(FX_LOG_ERROR); /* the broker warns of every drop */
    tbroker t;
    tbroker_start_with(&t, tiny_queues);
    fx_bench_cfg c = inproc_cfg(&t, FX_BENCH_OVERLOAD, 3);
    c.broker = t.b;
    c.payload = 1024;
    c.batch = 1;
    c.warmup = 256;
    c.total = 20000;
    c.min_seconds = 0.5;
    c.max_seconds = 10;
    fx_bench_result r;
    assert_int_equal(fx_bench_run_once(&c, &r), 0);
    print_message("missed %llu counted %llu (ingress %llu messages in %llu publishes)\n",
                  (unsigned long long)r.loss_missed, (unsigned long long)r.loss_counted,
                  (unsigned long long)r.loss_ingress_messages,
                  (unsigned long long)r.drops.ingress_dropped);
    if (!r.loss_accounted)
        fail_msg("not accounted: %s", r.loss_why);
    assert_int_equal(r.loss_nsubs, 3);
    uint64_t missed = 0, counted = 0, lane = 0, queue = 0;
    for (uint32_t i = 0; i < 3; i++) {
        const fx_bench_loss *l = &r.loss_subs[i];
        print_message("sub %u: expected %llu received %llu client %llu queue %llu lane %llu "
                      "upstream %llu\n",
                      i, (unsigned long long)l->expected, (unsigned long long)l->received,
                      (unsigned long long)l->client_dropped, (unsigned long long)l->queue_dropped,
                      (unsigned long long)l->lane_dropped, (unsigned long long)l->upstream);
        assert_int_equal(l->expected, r.stalled_expected);
        assert_int_equal(fx_bench_loss_missed(l), fx_bench_loss_counted(l));
        assert_int_equal(l->upstream, r.loss_ingress_messages);
        missed += fx_bench_loss_missed(l);
        counted += fx_bench_loss_counted(l);
        lane += l->lane_dropped;
        queue += l->queue_dropped;
    }
    assert_true(r.loss_exact);
    assert_int_equal(r.loss_missed, missed);
    assert_int_equal(r.loss_counted, counted);
    /* The stalled subscriber (the last) is shed in the broker. The
     * process-wide counters, read when the readers ended (before the
     * stalled one's backlog was read and the broker settled), hold every
     * subscriber's drops up to then; the ingress one counts publishes
     * (libfelix merges one-message publishes into frames). */
    assert_true(r.loss_subs[2].expected > r.loss_subs[2].received);
    assert_true(r.loss_subs[2].queue_dropped + r.loss_subs[2].lane_dropped > 0);
    assert_true(r.drops.lane_dropped_events <= lane);
    assert_true(r.drops.subscribe_dropped <= queue);
    assert_true(r.drops.ingress_dropped_messages <= r.loss_ingress_messages);
    assert_true(r.loss_ingress_messages >= r.drops.ingress_dropped);
    assert_int_equal(r.stalled_dropped, fx_bench_loss_missed(&r.loss_subs[2]));
    tbroker_stop(&t);
}

/* Latency mode, one message in flight: every reader sleeps until its
 * delivery arrives, so the client side counts at least one voluntary
 * context switch per reader per round trip, although the readers have
 * exited (and left /proc/self/task) before the closing probe. */
static void test_latency_mode_counts_every_readers_wakeups(void **state)
{
    (void)state;
    fx_log_set_level(FX_LOG_ERROR);
    tbroker t;
    tbroker_start(&t);
    fx_bench_cfg c = inproc_cfg(&t, FX_BENCH_LATENCY, 8);
    c.payload = 64;
    c.batch = 1;
    c.warmup = 50;
    c.total = 500;
    c.max_seconds = 20;
    fx_bench_result r;
    run_valid(&c, &r);
    print_message("client voluntary switches per round trip: %.2f\n", r.client_vcsw_per_msg);
    assert_true(r.client_vcsw_per_msg >= (double)c.fanout);
    tbroker_stop(&t);
}

/* Throughput --ack, blocking: three publisher threads, one acked message
 * at a time each: every answer in the window counted, one latency sample
 * per measured publish, none failed. */
static void test_acked_mode_blocking_publishers_report_rate_and_latency(void **state)
{
    (void)state;
    fx_log_set_level(FX_LOG_ERROR);
    tbroker t;
    tbroker_start(&t);
    fx_bench_cfg c = inproc_cfg(&t, FX_BENCH_THROUGHPUT, 0);
    c.ack = true;
    c.payload = 64;
    c.publishers = 3;
    c.warmup = 30;
    c.min_seconds = 0.5;
    c.max_seconds = 20;
    fx_bench_result r;
    run_valid(&c, &r);
    assert_int_equal(r.pub_errors, 0);
    assert_true(r.acked > 0 && r.lat.n > 0);
    assert_int_equal(r.t.sent_measured, r.lat.n);
    /* Blocking: each thread has one publish in flight, so the window's
     * answers are at most the measured publishes plus one per thread. */
    assert_true(r.acked <= r.lat.n + c.publishers);
    assert_true(isfinite(r.msgs_per_s) && r.msgs_per_s > 0);
    assert_true(fabs(r.msgs_per_s - (double)r.acked / r.window_s) < 1e-6 * r.msgs_per_s);
    assert_true(r.lat.p50_us > 0 && r.lat.p50_us <= r.lat.p99_us);
    tbroker_stop(&t);
}

/* Throughput --ack --window 8: fx_publish_async keeps up to 8 in flight
 * per thread; every callback ran before the run ended (the window drained)
 * and all succeeded. */
static void test_acked_mode_async_window_is_valid_and_drains(void **state)
{
    (void)state;
    fx_log_set_level(FX_LOG_ERROR);
    tbroker t;
    tbroker_start(&t);
    fx_bench_cfg c = inproc_cfg(&t, FX_BENCH_THROUGHPUT, 0);
    c.ack = true;
    c.payload = 64;
    c.publishers = 2;
    c.window = 8;
    c.warmup = 40;
    c.min_seconds = 0.5;
    c.max_seconds = 20;
    fx_bench_result r;
    run_valid(&c, &r);
    assert_int_equal(r.pub_errors, 0);
    assert_true(r.acked > 0 && r.lat.n > 0);
    assert_true(r.lat.p50_us > 0 && r.lat.p50_us <= r.lat.p99_us);
    tbroker_stop(&t);
}

/* Latency --rate 200: round trips start at most 200 a second (back to
 * back they would run at thousands a second here). */
static void test_latency_rate_paces_round_trips(void **state)
{
    (void)state;
    fx_log_set_level(FX_LOG_ERROR);
    tbroker t;
    tbroker_start(&t);
    fx_bench_cfg c = inproc_cfg(&t, FX_BENCH_LATENCY, 1);
    c.payload = 64;
    c.batch = 1;
    c.warmup = 10;
    c.total = 100;
    c.rate = 200;
    c.max_seconds = 20;
    fx_bench_result r;
    run_valid(&c, &r);
    assert_int_equal(r.lat.n, 100);
    assert_true(r.round_trips_per_s > 0 && r.round_trips_per_s <= 200 * 1.05);
    tbroker_stop(&t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_acked_mode_blocking_publishers_report_rate_and_latency),
    cmocka_unit_test(test_acked_mode_async_window_is_valid_and_drains),
    cmocka_unit_test(test_latency_rate_paces_round_trips),
    cmocka_unit_test(test_percentiles_on_known_samples),
    cmocka_unit_test(test_run_with_loss_is_invalid),
    cmocka_unit_test(test_loss_account_sums_every_counter),
    cmocka_unit_test(test_subscription_counters_are_read_by_id),
    cmocka_unit_test(test_loss_is_counted_per_stream),
    cmocka_unit_test(test_run_length_guard_refuses_short_runs),
    cmocka_unit_test(test_credit_window_never_exceeds_4mib_or_16384_msgs),
    cmocka_unit_test(test_isolation_mode_reports_ratios_and_victim_losses),
    cmocka_unit_test(test_latency_mode_counts_every_readers_wakeups),
    cmocka_unit_test(test_overload_mode_accounts_every_subscribers_losses),
};
FX_TEST_MAIN(tests)
