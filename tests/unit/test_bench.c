/* Tests of felix-bench: its pure logic (bench/bench_lib.c, compiled in):
 * percentiles, loss accounting and the verdict, the run-length guard and the
 * credit window (single-threaded); and its run engine (bench/bench_run.c and
 * bench_sys.c, compiled in) in isolation mode against a broker started in
 * this process, as felix-bench starts one (the engine runs its own reader
 * threads and the client library its loops). */
/* fx-test-libs: fx_client fx_broker fx_quic fx_wire fx_base */
#include "../../bench/bench_acked.c"
#include "../../bench/bench_cache.c"
#include "../../bench/bench_group.c"
#include "../../bench/bench_lib.c"
#include "../../bench/bench_probe.c"
#include "../../bench/bench_replay.c"
#include "../../bench/bench_run.c"
#include "../../bench/bench_sys.c"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>

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
    fx_bench_lat_summarize(v, 1000, 0, &l);
    assert_int_equal(l.n, 1000);
    assert_true(l.p50_us == 500.0);
    assert_true(l.p90_us == 900.0);
    assert_true(l.p99_us == 990.0);
    assert_true(l.p999_us == 999.0);
    assert_true(l.max_us == 1000.0);
    assert_true(fabs(l.mean_us - 500.5) < 1e-9);
    /* Small sets: ceil(p * n) rank; one sample is every percentile. */
    uint64_t three[] = {30000, 10000, 20000};
    fx_bench_lat_summarize(three, 3, 0, &l);
    assert_true(l.p50_us == 20.0);
    assert_true(l.p99_us == 30.0);
    uint64_t one[] = {7000};
    fx_bench_lat_summarize(one, 1, 0, &l);
    assert_true(l.p50_us == 7.0 && l.p999_us == 7.0);
    fx_bench_lat_summarize(v, 0, 0, &l);
    assert_true(isnan(l.p50_us) && isnan(l.max_us));
    double m[] = {3.0, NAN, 1.0, 2.0};
    assert_true(fx_bench_median(m, 4) == 2.0);
}

/* Measured messages past the sample buffer are counted, not silently
 * dropped, and the report shows how many the figures leave out. */
static void test_latency_samples_past_the_buffer_are_counted_and_reported(void **state)
{
    (void)state;
    uint64_t lat[2];
    fx_bench_acct a;
    fx_bench_acct_init(&a, 0, 1, 1, 1, lat, 2);
    uint8_t p[FX_BENCH_HDR];
    for (uint64_t seq = 0; seq < 6; seq++) { /* seq 0 is the warm-up */
        fx_bench_stamp(p, seq, 1000);
        assert_int_equal(fx_bench_acct_on_msg(&a, p, sizeof(p), 1000 + (seq + 1) * 1000), seq);
    }
    assert_int_equal(a.recv_meas, 5);
    assert_int_equal(a.nlat, 2);
    assert_int_equal(a.lat_unkept, 3);
    fx_bench_lat l;
    fx_bench_lat_summarize(lat, a.nlat, a.lat_unkept, &l);
    assert_int_equal(l.n, 2);
    assert_int_equal(l.unkept, 3);
    char buf[96];
    fx_bench_format_samples(buf, sizeof(buf), &l);
    assert_string_equal(buf, " (2 samples, 3 not kept: buffer full)");
    l.unkept = 0;
    fx_bench_format_samples(buf, sizeof(buf), &l);
    assert_string_equal(buf, " (2 samples)");
    /* No buffer at all (throughput mode): nothing is counted as unkept. */
    fx_bench_acct t;
    fx_bench_acct_init(&t, 0, 1, 1, 0, NULL, 0);
    fx_bench_stamp(p, 0, 1000);
    fx_bench_acct_on_msg(&t, p, sizeof(p), 2000);
    assert_int_equal(t.recv_meas, 1);
    assert_int_equal(t.lat_unkept, 0);
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
 * profile, which felix-bench's overload and isolation modes measure; with
 * |durable_dir|, every stream is durable under it and the profile is the
 * lossless one (block at checkpoints 5 and 6, pub_ingress_wait); then
 * |tweak| (may be NULL) is applied to its options. */
static void tbroker_start_profile(tbroker *t, const char *durable_dir, bool lossless,
                                  void (*tweak)(fx_broker_opts *))
{
    snprintf(t->dir, sizeof(t->dir), "/tmp/fxbenchXXXXXX");
    assert_non_null(mkdtemp(t->dir));
    fx_broker_opts bo;
    fx_broker_opts_default(&bo);
    bo.quic.state_dir = t->dir;
    bo.durable.dir = durable_dir;
    bo.durable.durable_default = durable_dir != NULL;
    if (lossless) { /* felix-bench's lossless profile, as replay measures it */
        bo.subscriber_queue_policy = FX_QUEUE_BLOCK;
        bo.subscriber_lane_queue_policy = FX_QUEUE_BLOCK;
        bo.pub_ingress_wait = true;
    }
    if (tweak != NULL)
        tweak(&bo);
    assert_int_equal(fx_broker_new(&t->b, &bo), 0);
    assert_int_equal(fx_broker_start(t->b), 0);
    snprintf(t->addr, sizeof(t->addr), "127.0.0.1:%u", (unsigned)fx_broker_port(t->b));
    snprintf(t->pin, sizeof(t->pin), "%s", fx_broker_fingerprint(t->b));
}

static void tbroker_start_durable(tbroker *t, const char *durable_dir)
{
    tbroker_start_profile(t, durable_dir, durable_dir != NULL, NULL);
}

static void tbroker_start(tbroker *t)
{
    tbroker_start_durable(t, NULL);
}

static void tbroker_start_with(tbroker *t, void (*tweak)(fx_broker_opts *))
{
    tbroker_start_profile(t, NULL, false, tweak);
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
    /* The stalled subscriber (the last) loses messages: at its own queue or
     * lane, or before the ring (a loaded host sheds at the worker queue
     * first; which one is timing), and each term above covers them. The
     * process-wide counters, read when the readers ended (before the
     * stalled one's backlog was read and the broker settled), hold every
     * subscriber's drops up to then; the ingress one counts publishes
     * (libfelix merges one-message publishes into frames). */
    assert_true(r.loss_subs[2].expected > r.loss_subs[2].received);
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
/* Acks come at admission, so a publisher can run ahead of a worker the
 * host starves (a loaded machine): the publishes wait at the worker queue
 * instead of failing there, which this test is not about. */
static void ingress_waits(fx_broker_opts *o)
{
    o->pub_ingress_wait = true;
}

static void test_acked_mode_blocking_publishers_report_rate_and_latency(void **state)
{
    (void)state;
    fx_log_set_level(FX_LOG_ERROR);
    tbroker t;
    tbroker_start_with(&t, ingress_waits);
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

/* ---- fsync-probe and replay ------------------------------------------------------- */

/* A fresh directory on the build tree's disk (FX_BINARY_DIR; else the
 * working directory), for files whose fdatasync must reach a disk. */
static void disk_tmpdir(char *out, size_t cap, const char *tag)
{
    const char *base = getenv("FX_BINARY_DIR");
    snprintf(out, cap, "%s/%s-XXXXXX", base ? base : ".", tag);
    assert_non_null(mkdtemp(out));
}

static void rm_rf(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static size_t dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static fx_bench_cfg probe_cfg(const char *dir, uint64_t records, uint32_t every)
{
    return (fx_bench_cfg){.mode = FX_BENCH_FSYNC_PROBE,
                          .payload = 1024,
                          .dir = dir,
                          .probe_records = records,
                          .sync_every = every,
                          .min_seconds = 0,
                          .max_seconds = 60};
}

/* 3,000 records, 64 per fdatasync: whole groups (47 of them, 3,008
 * records), one latency sample per fdatasync, then 300 single-record
 * fdatasyncs; the rate is records over the window; the files are gone. */
static void test_fsync_probe_counts_groups_and_fdatasync_latencies(void **state)
{
    (void)state;
    char dir[512];
    disk_tmpdir(dir, sizeof(dir), "fxprobe");
    fx_bench_cfg c = probe_cfg(dir, 3000, 64);
    c.probe_single = 300;
    fx_bench_result r;
    int rv = fx_bench_probe_run(&c, &r);
    if (rv != 0)
        fail_msg("probe failed: %s", r.errmsg);
    print_message("%.0f records/s, fdatasync p50 %.1f us, single p50 %.1f us\n", r.msgs_per_s,
                  r.lat.p50_us, r.single_lat.p50_us);
    assert_int_equal(r.probe_records, 3008);
    assert_int_equal(r.probe_syncs, 47);
    assert_int_equal(r.lat.n, 47);
    assert_int_equal(r.single_lat.n, 300);
    assert_true(r.lat.p50_us > 0 && r.lat.p50_us <= r.lat.p99_us);
    assert_true(r.single_lat.p50_us > 0 && r.single_lat.p50_us <= r.single_lat.p99_us);
    assert_true(r.window_s > 0);
    assert_true(fabs(r.msgs_per_s - 3008.0 / r.window_s) < 1e-6 * r.msgs_per_s);
    assert_true(fabs(r.mb_per_s - r.msgs_per_s * 1052.0 / 1e6) < 1e-6 * r.mb_per_s);
    assert_int_equal(r.valid, !on_memory_fs(r.fs_magic));
    assert_int_equal(dir_entries(dir), 0);
    rm_rf(dir);
}

/* Probe files of 64 KiB hold 62 records of 1,052 bytes: 640 records in
 * groups of 16 (16,832 bytes, three groups a file) roll over to a new
 * file every 48 records, and none is left behind. */
static void test_fsync_probe_rolls_over_to_new_files(void **state)
{
    (void)state;
    char dir[512];
    disk_tmpdir(dir, sizeof(dir), "fxprobe");
    fx_bench_cfg c = probe_cfg(dir, 640, 16);
    c.probe_file_bytes = 64u << 10;
    c.probe_single = 100;
    fx_bench_result r;
    int rv = fx_bench_probe_run(&c, &r);
    if (rv != 0)
        fail_msg("probe failed: %s", r.errmsg);
    assert_int_equal(r.probe_syncs, 40);
    assert_int_equal(r.probe_records, 640);
    assert_int_equal(r.single_lat.n, 100);
    assert_int_equal(dir_entries(dir), 0);
    /* A group larger than a file is refused before anything is written. */
    c.sync_every = 64;
    assert_int_equal(fx_bench_probe_run(&c, &r), -EINVAL);
    assert_non_null(strstr(r.errmsg, "passes the 65536-byte probe file"));
    rm_rf(dir);
}

/* On tmpfs fdatasync does nothing: the figures come, marked invalid. */
static void test_fsync_probe_on_tmpfs_is_invalid(void **state)
{
    (void)state;
    struct statfs sf;
    if (statfs("/dev/shm", &sf) != 0 || sf.f_type != TMPFS_MAGIC)
        fx_test_skip("/dev/shm is not a tmpfs here");
    char dir[64] = "/dev/shm/fxprobe-XXXXXX";
    assert_non_null(mkdtemp(dir));
    fx_bench_cfg c = probe_cfg(dir, 128, 64);
    fx_bench_result r;
    assert_int_equal(fx_bench_probe_run(&c, &r), 0);
    assert_false(r.valid);
    assert_non_null(strstr(r.why, "memory file system"));
    assert_int_equal(r.probe_records, 128);
    rm_rf(dir);
}

/* A directory that does not exist: the error names it. */
static void test_fsync_probe_reports_a_missing_directory(void **state)
{
    (void)state;
    fx_bench_cfg c = probe_cfg("/nonexistent-fxprobe-dir", 128, 64);
    fx_bench_result r;
    assert_int_equal(fx_bench_probe_run(&c, &r), -ENOENT);
    assert_non_null(strstr(r.errmsg, "/nonexistent-fxprobe-dir"));
}

/* Replay against a broker whose streams are durable: the live phase is
 * valid, then everything it published (warm-up too) comes back from
 * earliest, in order, once each, mostly read from disk (the ring holds
 * 1,024 messages). */
static void test_replay_mode_reads_the_history_from_disk_in_order(void **state)
{
    (void)state;
    fx_log_set_level(FX_LOG_ERROR);
    char dir[512];
    disk_tmpdir(dir, sizeof(dir), "fxreplay");
    tbroker t;
    tbroker_start_durable(&t, dir);
    fx_bench_cfg c = inproc_cfg(&t, FX_BENCH_REPLAY, 1);
    c.payload = 1024;
    c.batch = 1;
    c.warmup = 500;
    c.total = 5000;
    c.min_seconds = 0.3;
    c.guard_min_seconds = 0.2;
    c.max_seconds = 20;
    c.lossless = true;
    fx_bench_result r;
    run_valid(&c, &r);
    print_message("live %.0f msg/s, replay %llu in %.3f s: %.0f msg/s, %llu from disk\n",
                  r.msgs_per_s, (unsigned long long)r.replay_msgs, r.replay_s, r.replay_msgs_per_s,
                  (unsigned long long)r.replay_disk_records);
    uint64_t total = c.warmup + r.t.sent_measured;
    assert_true(r.t.sent_measured >= c.total);
    assert_int_equal(r.replay_msgs, total);
    assert_int_equal(r.replay_gaps, 0);
    assert_int_equal(r.replay_dups, 0);
    assert_int_equal(r.replay_offset_gaps, 0);
    assert_true(r.replay_disk_records >= total - 1024 && r.replay_disk_records <= total);
    assert_true(isfinite(r.replay_msgs_per_s) && r.replay_msgs_per_s > 0);
    assert_true(fabs(r.replay_msgs_per_s - (double)total / r.replay_s) <
                1e-6 * r.replay_msgs_per_s);
    assert_true(fabs(r.replay_vs_live - r.replay_msgs_per_s / r.msgs_per_s) < 1e-9);
    assert_true(r.replay_first_ms > 0 && r.replay_first_ms <= r.replay_s * 1000.0);
    tbroker_stop(&t);
    rm_rf(dir);
}

/* The same run on a broker without durable storage: the ring keeps the
 * newest 1,024 messages only, so the replay is not whole: invalid. */
static void test_replay_mode_without_durable_storage_is_invalid(void **state)
{
    (void)state;
    fx_log_set_level(FX_LOG_ERROR);
    tbroker t;
    /* Lossless, so the live phase is valid and only the replay is judged. */
    tbroker_start_profile(&t, NULL, true, NULL);
    fx_bench_cfg c = inproc_cfg(&t, FX_BENCH_REPLAY, 1);
    c.payload = 1024;
    c.batch = 1;
    c.warmup = 500;
    c.total = 5000;
    c.min_seconds = 0.3;
    c.guard_min_seconds = 0.2;
    c.max_seconds = 20;
    c.lossless = true;
    fx_bench_result r;
    int rv = fx_bench_run_once(&c, &r);
    print_message("rv %d (%s), valid %d (%s)\n", rv, r.errmsg, r.valid, r.why);
    assert_int_equal(rv, 0);
    assert_false(r.valid);
    assert_true(r.replay_msgs < c.warmup + r.t.sent_measured);
    assert_non_null(strstr(r.why, "replay:"));
    tbroker_stop(&t);
}

/* ---- felix-bench's command line for the new modes (the built binary) ---------------- */

/* Runs felix-bench with |args| (stdout and stderr into |out|); returns its
 * exit status. Skips the case when the binary is not built. */
static int bench_cli(const char *args, char *out, size_t cap)
{
    const char *bin = getenv("FX_BINARY_DIR");
    if (bin == NULL)
        fx_test_skip("FX_BINARY_DIR is not set (run through ctest)");
    char exe[400], cmd[2048];
    snprintf(exe, sizeof(exe), "%s/felix-bench", bin);
    if (access(exe, X_OK) != 0)
        fx_test_skip("felix-bench is not built in FX_BINARY_DIR");
    snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1", exe, args);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs |args| and expects exit 2 with |text| in the output. */
static void cli_refused(const char *args, const char *text)
{
    char out[4096];
    int st = bench_cli(args, out, sizeof(out));
    if (st != 2 || strstr(out, text) == NULL)
        fail_msg("felix-bench %s: exit %d, output: %s (wanted exit 2 and '%s')", args, st, out,
                 text);
}

static void test_cli_fsync_probe_refuses_bad_arguments(void **state)
{
    (void)state;
    cli_refused("--mode fsync-probe", "fsync-probe needs --dir DIR");
    cli_refused("--mode fsync-probe --dir /nonexistent-fxprobe-dir",
                "--dir /nonexistent-fxprobe-dir: No such file or directory");
    char file_arg[600];
    snprintf(file_arg, sizeof(file_arg), "--mode fsync-probe --dir '%s/CMakeCache.txt'",
             getenv("FX_BINARY_DIR") ? getenv("FX_BINARY_DIR") : ".");
    cli_refused(file_arg, "not a directory");
    cli_refused("--mode fsync-probe --dir /tmp --fanout 2", "--fanout does not apply");
    cli_refused("--mode fsync-probe --dir /tmp --server 127.0.0.1:1 --insecure",
                "--server does not apply");
    cli_refused("--mode fsync-probe --dir /tmp --ack", "--ack does not apply");
    cli_refused("--mode fsync-probe --dir /tmp --sync-every 0", "bad value for --sync-every");
    cli_refused("--mode fsync-probe --dir /tmp --records 0", "bad value for --records");
    cli_refused("--mode fsync-probe --dir /tmp --payload 4194304 --sync-every 65536",
                "do not fit one 256 MiB probe file");
    cli_refused("--mode fsync-probe --dir /tmp --min-seconds 9 --max-seconds 3",
                "--max-seconds is below --min-seconds");
    cli_refused("--mode throughput --records 5", "--records and --sync-every need --mode "
                                                 "fsync-probe");
    cli_refused("--mode latency --sync-every 8", "need --mode fsync-probe");
}

static void test_cli_replay_refuses_bad_arguments(void **state)
{
    (void)state;
    cli_refused("--mode replay", "replay needs a durable stream");
    cli_refused("--mode replay --dir /tmp --fanout 2", "replay measures one subscriber");
    cli_refused("--mode replay --dir /tmp --streams 2", "replay measures one subscriber");
    cli_refused("--mode replay --dir /tmp --callback", "replay measures one subscriber");
    cli_refused("--mode replay --dir /tmp --ack", "--ack applies to the latency and throughput");
    cli_refused("--mode replay --server 127.0.0.1:1 --insecure --dir /tmp",
                "--dir configures the in-process broker");
    cli_refused("--mode throughput --server 127.0.0.1:1 --insecure --dir /tmp",
                "--dir configures the in-process broker");
    cli_refused("--mode replay --dir /tmp --min-seconds 1", "run too short");
}

/* A small probe through the binary: one JSON line with the figures. */
static void test_cli_fsync_probe_prints_one_json_line(void **state)
{
    (void)state;
    char dir[512], args[700], out[4096];
    disk_tmpdir(dir, sizeof(dir), "fxprobe");
    snprintf(args, sizeof(args),
             "--mode fsync-probe --dir '%s' --records 100 --sync-every 10 "
             "--json --label p",
             dir);
    int st = bench_cli(args, out, sizeof(out));
    if (st != 0)
        fail_msg("exit %d: %s", st, out);
    assert_non_null(strstr(out, "{\"tool\":\"felix-bench\",\"label\":\"p\",\"backend\":\"disk\","
                                "\"mode\":\"fsync-probe\""));
    assert_non_null(strstr(out, "\"record_bytes\":1052,\"sync_every\":10,\"records\":100,"
                                "\"syncs\":10,"));
    assert_non_null(strstr(out, "\"records_per_s\":"));
    assert_non_null(strstr(out, "\"single_samples\":100,"));
    assert_non_null(strstr(out, "\"single_fdatasync_p50_us\":"));
    assert_null(strchr(strchr(out, '\n') + 1, '{')); /* one line */
    assert_int_equal(dir_entries(dir), 0);
    rm_rf(dir);
}

/* ---- group mode: option parsing and the per-sequence verification ------------------- */

static void test_cli_group_refuses_bad_arguments(void **state)
{
    (void)state;
    cli_refused("--mode group --group-cell nope", "bad value for --group-cell: 'nope'");
    cli_refused("--mode group --consumers 0", "bad value for --consumers");
    cli_refused("--mode group --consumers 65", "bad value for --consumers");
    cli_refused("--mode group --count 0", "bad value for --count");
    cli_refused("--mode group --count 16777217", "bad value for --count");
    cli_refused("--mode group --ack-wait-ms 0", "bad value for --ack-wait-ms");
    cli_refused("--mode group --window 0", "--window must be at least 1");
    cli_refused("--mode group --fanout 2", "group mode: --fanout does not apply");
    cli_refused("--mode group --streams 2", "group mode: --streams does not apply");
    cli_refused("--mode group --ack", "group mode: --ack does not apply");
    cli_refused("--mode group --publishers 2", "group mode: --publishers does not apply");
    cli_refused("--mode group --total 5", "group mode: --total does not apply");
    cli_refused("--mode group --group-cell live --count 5", "group live: --count");
    cli_refused("--mode group --group-cell live --batch 8", "group live: --batch");
    cli_refused("--mode group --group-cell backlog --rate 5", "group backlog: --rate");
    cli_refused("--mode group --group-cell redelivery --consumers 3",
                "group redelivery: --consumers");
    cli_refused("--mode group --server 127.0.0.1:1", "--server needs --pin HEX");
    cli_refused("--mode throughput --consumers 2", "need --mode group");
    cli_refused("--mode latency --group-cell live", "need --mode group");
    cli_refused("--mode throughput --count 9", "need --mode group");
    cli_refused("--mode throughput --window 4", "--publishers and --window need --mode "
                                                "throughput --ack");
    char out[16384]; /* the whole --help: a pipe closed early kills felix-bench */
    assert_int_equal(bench_cli("--help", out, sizeof(out)), 0);
    assert_non_null(strstr(out, "fsync-probe|replay|group|cache]"));
    assert_non_null(strstr(out, "--group-cell CELL"));
    assert_non_null(strstr(out, "--ack-wait-ms MS"));
}

/* ---- cache mode: option parsing, a small run, its JSON line ---------------------------- */

static void test_cli_cache_refuses_bad_arguments(void **state)
{
    (void)state;
    cli_refused("--mode cache --op nope", "bad value for --op: 'nope'");
    cli_refused("--mode cache --clients 0", "bad value for --clients");
    cli_refused("--mode cache --pipeline 0", "bad value for --pipeline");
    cli_refused("--mode cache --pipeline 1025", "bad value for --pipeline");
    cli_refused("--mode cache --connections 0", "bad value for --connections");
    cli_refused("--mode cache --keys 0", "bad value for --keys");
    cli_refused("--mode cache --fanout 2", "cache mode: --fanout does not apply");
    cli_refused("--mode cache --ack", "cache mode: --ack does not apply");
    cli_refused("--mode cache --total 5", "cache mode: --total does not apply");
    cli_refused("--mode cache --streams 2", "cache mode: --streams does not apply");
    cli_refused("--mode cache --group-cell live", "cache mode: --group-cell does not apply");
    cli_refused("--mode cache --clients 2 --connections 3",
                "--connections 3 is more than --clients 2");
    cli_refused("--mode cache --op fill", "cache fill measures an external broker's RSS");
    cli_refused("--mode cache --op fill --server 127.0.0.1:1 --insecure",
                "cache fill measures an external broker's RSS");
    cli_refused("--mode cache --op fill --server 127.0.0.1:1 --insecure --broker-pid 1 "
                "--pipeline 4",
                "--pipeline, --min-seconds and --warmup do not apply");
    cli_refused("--mode cache --op fill --server 127.0.0.1:1 --insecure --broker-pid 1 "
                "--min-seconds 3",
                "--pipeline, --min-seconds and --warmup do not apply");
    cli_refused("--mode cache --server 127.0.0.1:1", "--server needs --pin HEX");
    cli_refused("--mode cache --min-seconds 9 --max-seconds 3",
                "--max-seconds is below --min-seconds");
    cli_refused("--mode throughput --clients 5", "need --mode cache");
    cli_refused("--mode latency --op get", "need --mode cache");
    cli_refused("--mode group --keys 5", "need --mode cache");
    char out[16384];
    assert_int_equal(bench_cli("--help", out, sizeof(out)), 0);
    assert_non_null(strstr(out, "--op get|set|fill"));
    assert_non_null(strstr(out, "--connections N"));
    assert_non_null(strstr(out, "key:%012u"));
}

/* A small get run (and a set run) against an in-process broker: every
 * request answered, with its value, and the figures filled. */
static void test_cache_mode_get_and_set_runs_are_valid(void **state)
{
    (void)state;
    fx_log_set_level(FX_LOG_ERROR);
    tbroker t;
    tbroker_start(&t);
    fx_bench_cfg c = inproc_cfg(&t, FX_BENCH_CACHE, 0);
    c.cache_op = FX_BENCH_CACHE_GET;
    c.payload = 100;
    c.clients = 5;
    c.pipeline = 4;
    c.connections = 2;
    c.keys = 300;
    c.warmup = 50;
    c.min_seconds = 0.5;
    c.max_seconds = 20;
    fx_bench_result r;
    run_valid(&c, &r);
    assert_int_equal(r.connections, 2);
    assert_int_equal(r.t.errors, 0);
    assert_int_equal(r.cache_misses, 0);
    assert_int_equal(r.cache_bad_len, 0);
    assert_true(r.cache_ops > 0 && r.msgs_per_s > 0);
    assert_true(r.lat.n > 0 && r.lat.p50_us > 0 && r.lat.p50_us <= r.lat.p99_us);
    assert_true(r.fill_s > 0);
    c.cache_op = FX_BENCH_CACHE_SET;
    c.pipeline = 1;
    run_valid(&c, &r);
    assert_true(r.cache_ops > 0 && r.lat.n > 0);
    assert_true(isnan(r.fill_s));
    tbroker_stop(&t);
}

/* A cache too small for the keys: the fill evicts, the gets miss, and
 * the run is invalid and says why. */
static void small_cache(fx_broker_opts *bo)
{
    bo->cache_max_bytes = 64u << 10;
    bo->cache_max_value_bytes = 4096;
}

static void test_cache_mode_misses_make_the_run_invalid(void **state)
{
    (void)state;
    fx_log_set_level(FX_LOG_ERROR);
    tbroker t;
    tbroker_start_with(&t, small_cache);
    fx_bench_cfg c = inproc_cfg(&t, FX_BENCH_CACHE, 0);
    c.cache_op = FX_BENCH_CACHE_GET;
    c.payload = 100;
    c.clients = 2;
    c.pipeline = 2;
    c.connections = 1;
    c.keys = 2000; /* 2000 x (100 + 16 + 104) bytes: over 64 KiB */
    c.warmup = 10;
    c.min_seconds = 0.3;
    c.max_seconds = 20;
    fx_bench_result r;
    assert_int_equal(fx_bench_cache_run(&c, &r), 0);
    print_message("valid %d (%s)\n", r.valid, r.why);
    assert_false(r.valid);
    assert_true(r.cache_misses > 0);
    assert_non_null(strstr(r.why, "gets missed"));
    tbroker_stop(&t);
}

/* The binary against its in-process broker: one JSON line with the cache
 * fields. */
static void test_cli_cache_prints_one_json_line(void **state)
{
    (void)state;
    char out[8192];
    int st = bench_cli("--mode cache --op get --clients 3 --pipeline 2 --keys 100 --payload 64 "
                       "--warmup 20 --min-seconds 0.5 --json --label c",
                       out, sizeof(out));
    if (st != 0)
        fail_msg("exit %d: %s", st, out);
    assert_non_null(strstr(out, "{\"tool\":\"felix-bench\",\"label\":\"c\""));
    assert_non_null(strstr(out, "\"mode\":\"cache\""));
    assert_non_null(strstr(out, "\"op\":\"get\",\"clients\":3,\"pipeline\":2,"
                                "\"connections\":3,\"keys\":100,"));
    assert_non_null(strstr(out, "\"errors\":0,\"valid\":true,"));
    assert_non_null(strstr(out, "\"ops_per_s\":"));
    assert_non_null(strstr(out, "\"p50_us\":"));
    assert_non_null(strstr(out, "\"p99_us\":"));
    assert_null(strchr(strchr(out, '\n') + 1, '{')); /* one line */
}

/* Delivers sequence |seq| once into |t| (a 32-byte stamped payload). */
static uint8_t gdeliver(fx_bench_gtrack *t, uint64_t seq)
{
    uint8_t msg[32] = {0}, prev = 0xff;
    fx_bench_stamp(msg, seq, 1);
    assert_int_equal(fx_bench_gtrack_deliver(t, msg, sizeof(msg), &prev), seq);
    return prev;
}

static void test_group_tracking_counts_dups_missing_and_acks(void **state)
{
    (void)state;
    fx_bench_gcell cell;
    assert_int_equal(fx_bench_gcell_parse("redelivery", &cell), 0);
    assert_int_equal(cell, FX_BENCH_GCELL_REDELIVERY);
    assert_int_equal(fx_bench_gcell_parse("Backlog", &cell), -1);
    assert_string_equal(fx_bench_gcell_name(FX_BENCH_GCELL_LIVE), "live");

    fx_bench_gtrack t;
    assert_int_equal(fx_bench_gtrack_init(&t, 8), 0);
    /* 0..5 once, 2 twice more, 6 and 7 never; a short payload and one out of range are bad. */
    for (uint64_t s = 0; s < 6; s++)
        assert_int_equal(gdeliver(&t, s), 0);
    assert_int_equal(gdeliver(&t, 2), 1);
    assert_int_equal(gdeliver(&t, 2), 2);
    uint8_t msg[32] = {0}, prev;
    assert_int_equal(fx_bench_gtrack_deliver(&t, msg, 8, &prev), UINT64_MAX);
    fx_bench_stamp(msg, 8, 1);
    assert_int_equal(fx_bench_gtrack_deliver(&t, msg, sizeof(msg), &prev), UINT64_MAX);
    for (uint64_t s = 0; s < 6; s++)
        assert_int_equal(fx_bench_gtrack_ack(&t, s), s + 1);
    assert_int_equal(fx_bench_gtrack_ack(&t, 2), 0); /* a repeated ack counts once */
    assert_int_equal(fx_bench_gtrack_ack(&t, 99), 0);

    fx_bench_gcount k = {0};
    fx_bench_gtrack_tally(&t, 8, 1, NULL, &k);
    assert_int_equal(k.expected, 8);
    assert_int_equal(k.distinct, 6);
    assert_int_equal(k.dups, 1);
    assert_int_equal(k.extra, 2);
    assert_int_equal(k.missing, 2);
    assert_int_equal(k.acked, 6);
    char why[192];
    assert_false(fx_bench_group_verdict(&k, why, sizeof(why)));
    assert_non_null(strstr(why, "2 missing, 1 duplicated (2 extra deliveries), 6 of 8 acked"));

    /* Redelivery: two deliveries each are expected; missing means B never got it again. */
    uint64_t again[8] = {5, 5, 5, 5, 5, 5, 0, 0};
    fx_bench_gtrack_tally(&t, 6, 2, again, &k);
    assert_int_equal(k.dups, 1); /* sequence 2: three deliveries */
    assert_int_equal(k.extra, 1);
    assert_int_equal(k.missing, 0);

    /* A clean run is valid; an error, a skipped record or the deadline is not. */
    fx_bench_gcount ok = {.expected = 6, .distinct = 6, .acked = 6};
    assert_true(fx_bench_group_verdict(&ok, why, sizeof(why)));
    ok.skipped = 1;
    assert_false(fx_bench_group_verdict(&ok, why, sizeof(why)));
    ok.skipped = 0;
    ok.ack_errors = 1;
    assert_false(fx_bench_group_verdict(&ok, why, sizeof(why)));
    assert_non_null(strstr(why, "1 ack errors"));
    ok.ack_errors = 0;
    ok.hit_deadline = true;
    assert_false(fx_bench_group_verdict(&ok, why, sizeof(why)));
    fx_bench_gtrack_deinit(&t);

    int64_t late[] = {-2000000, 1000000, 3000000, 250000000};
    assert_true(isnan(fx_bench_pct_i64_ms(late, 0, 0.5)));
    assert_true(fx_bench_pct_i64_ms(late, 4, 0.5) == 1.0);
    assert_true(fx_bench_pct_i64_ms(late, 4, 0.99) == 250.0);
    assert_true(fx_bench_pct_i64_ms(late, 4, 0.0) == -2.0);
}

static void test_stream_counts_are_read_by_namespace_and_stream(void **state)
{
    (void)state;
    const char *json = "{\"streams\":[{\"tenant\":\"t\",\"namespace\":\"bench\",\"stream\":\"a\","
                       "\"messages\":3,\"first_offset\":1,\"next_offset\":4},"
                       "{\"tenant\":\"t\",\"namespace\":\"bench\",\"stream\":\"g1\","
                       "\"messages\":1000,\"first_offset\":0,\"next_offset\":1000}]}";
    fx_bench_stream_info sc = {0};
    assert_int_equal(fx_bench_stream_counts_parse(json, "bench", "g1", &sc), 0);
    assert_int_equal(sc.messages, 1000);
    assert_int_equal(sc.first_offset, 0);
    assert_int_equal(sc.next_offset, 1000);
    assert_false(sc.durable);
    const char *dj =
        "{\"streams\":[{\"tenant\":\"t\",\"namespace\":\"bench\",\"stream\":\"d\","
        "\"durable\":true,\"messages\":10,\"first_offset\":990,\"next_offset\":1000}]}";
    assert_int_equal(fx_bench_stream_counts_parse(dj, "bench", "d", &sc), 0);
    assert_true(sc.durable);
    assert_int_equal(sc.messages, 10);
    assert_int_equal(fx_bench_stream_counts_parse(json, "other", "g1", &sc), -ENOENT);
    assert_int_equal(fx_bench_stream_counts_parse("{\"x\":1}", "bench", "g1", &sc), -EPROTO);
    assert_int_equal(fx_bench_stream_counts_parse("not json", "bench", "g1", &sc), -EPROTO);
}

static void test_group_lateness_quantiles_are_the_bucket_bounds_that_hold_them(void **state)
{
    (void)state;
    /* Cumulative buckets as GET .../groups/G gives them: 100 redeliveries,
     * 60 within 1 ms, 99 within 2.5 ms, 1 later than 250 ms. */
    const char *json = "{\"name\":\"g\",\"redelivery_lateness\":{\"buckets\":{"
                       "\"0.0001\":0,\"0.00025\":0,\"0.0005\":10,\"0.001\":60,"
                       "\"0.0025\":99,\"0.005\":99,\"0.01\":99,\"0.025\":99,\"0.05\":99,"
                       "\"0.1\":99,\"0.25\":99,\"+Inf\":100},\"count\":100,\"sum_us\":1}}";
    double p50 = 0, p99 = 0;
    uint64_t n = 0;
    assert_int_equal(fx_bench_group_lateness_parse(json, &p50, &p99, &n), 0);
    assert_int_equal(n, 100);
    assert_true(p50 > 0.999 && p50 < 1.001);
    assert_true(p99 > 2.499 && p99 < 2.501);
    const char *tail = "{\"redelivery_lateness\":{\"buckets\":{\"0.001\":1,\"+Inf\":10},"
                       "\"count\":10}}";
    assert_int_equal(fx_bench_group_lateness_parse(tail, &p50, &p99, &n), 0);
    assert_true(isinf(p99));
    assert_int_equal(fx_bench_group_lateness_parse("{\"x\":1}", &p50, &p99, &n), -EPROTO);
    assert_int_equal(fx_bench_group_lateness_parse("not json", &p50, &p99, &n), -EPROTO);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_fsync_probe_counts_groups_and_fdatasync_latencies),
    cmocka_unit_test(test_fsync_probe_rolls_over_to_new_files),
    cmocka_unit_test(test_fsync_probe_on_tmpfs_is_invalid),
    cmocka_unit_test(test_fsync_probe_reports_a_missing_directory),
    cmocka_unit_test(test_replay_mode_reads_the_history_from_disk_in_order),
    cmocka_unit_test(test_replay_mode_without_durable_storage_is_invalid),
    cmocka_unit_test(test_cli_fsync_probe_refuses_bad_arguments),
    cmocka_unit_test(test_cli_replay_refuses_bad_arguments),
    cmocka_unit_test(test_cli_fsync_probe_prints_one_json_line),
    cmocka_unit_test(test_cli_group_refuses_bad_arguments),
    cmocka_unit_test(test_cli_cache_refuses_bad_arguments),
    cmocka_unit_test(test_cache_mode_get_and_set_runs_are_valid),
    cmocka_unit_test(test_cache_mode_misses_make_the_run_invalid),
    cmocka_unit_test(test_cli_cache_prints_one_json_line),
    cmocka_unit_test(test_group_tracking_counts_dups_missing_and_acks),
    cmocka_unit_test(test_stream_counts_are_read_by_namespace_and_stream),
    cmocka_unit_test(test_group_lateness_quantiles_are_the_bucket_bounds_that_hold_them),
    cmocka_unit_test(test_acked_mode_blocking_publishers_report_rate_and_latency),
    cmocka_unit_test(test_acked_mode_async_window_is_valid_and_drains),
    cmocka_unit_test(test_latency_rate_paces_round_trips),
    cmocka_unit_test(test_percentiles_on_known_samples),
    cmocka_unit_test(test_latency_samples_past_the_buffer_are_counted_and_reported),
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
