/* Unit tests for the broker configuration (src/server/config.c): defaults,
 * precedence (defaults < file < env < flags), units, rejection of bad values
 * with the key and source named, aliases, warnings and the cross-key rules.
 * YAML fixtures are written to mkstemp files and removed by each case. */
/* fx-test-libs: fx_server fx_wire fx_base */
#include "fx_test.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/broker.h"
#include "felix/error.h"
#include "server/config.h"

#define MiB (1024ull * 1024ull)
#define MS 1000000ull
#define SEC (1000ull * MS)
#define GiB (1024ull * MiB)
/* The memory target of every load() unless a case sets its own: large
 * enough that the defaults are not lowered (docs/configuration.md). */
#define BIG_TARGET (1024ull * GiB)

/* One loaded configuration plus its fixture file. */
struct fixture {
    fx_config c;
    fx_config_diag d;
    char path[64];
};

static void write_yaml(struct fixture *f, const char *text)
{
    snprintf(f->path, sizeof(f->path), "/tmp/fx_test_config_XXXXXX");
    int fd = mkstemp(f->path);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
}

/* Loads |yaml| (NULL = no file), |envp| and |sets| on top of the defaults. */
static int load(struct fixture *f, const char *yaml, char **envp, const char **sets, size_t nsets)
{
    f->path[0] = '\0';
    if (yaml)
        write_yaml(f, yaml);
    fx_config_defaults(&f->c);
    fx_config_src src = {.path = yaml ? f->path : NULL,
                         .envp = envp,
                         .sets = sets,
                         .nsets = nsets,
                         .memory_target_bytes = BIG_TARGET};
    int rv = fx_config_load(&f->c, &src, &f->d);
    if (yaml) /* read once; removed now so a failing assertion leaves nothing behind */
        unlink(f->path);
    return rv;
}

static void done(struct fixture *f)
{
    fx_config_deinit(&f->c);
}

static void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle)) {
        fprintf(stderr, "expected \"%s\" in \"%s\"\n", needle, hay);
        fail();
    }
}

/* Loads and expects FX_ECONFIG with every string of |want| in the message. */
static void expect_error(const char *yaml, char **envp, const char **sets, size_t nsets,
                         const char *const *want)
{
    struct fixture f;
    assert_int_equal(load(&f, yaml, envp, sets, nsets), FX_ECONFIG);
    for (; *want; want++)
        assert_contains(f.d.error, *want);
    done(&f);
}

static bool any_warning_contains(const fx_config_diag *d, const char *needle)
{
    for (size_t i = 0; i < d->nwarnings; i++) {
        if (strstr(d->warnings[i], needle))
            return true;
    }
    return false;
}

static void test_defaults_match_documented_values(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    assert_string_equal(c.quic_bind, "127.0.0.1:5000");
    assert_string_equal(c.metrics_bind, "127.0.0.1:8080");
    assert_int_equal(c.pub_queue_depth, 64);
    assert_int_equal(c.subscriber_queue_capacity, 512);
    assert_int_equal(c.subscriber_queue_policy, FX_CONFIG_POLICY_DROP_NEW);
    assert_int_equal(c.pub_conn_inflight_bytes, 32 * MiB);
    assert_int_equal(c.pub_inflight_bytes, 64 * MiB);
    assert_int_equal(c.max_frame_bytes, 16 * MiB);
    assert_int_equal(c.quic_stream_recv_window, 1 * MiB);
    assert_int_equal(c.quic_conn_recv_window, 16 * MiB);
    assert_int_equal(c.quic_stream_recv_window_max, 16 * MiB);
    assert_int_equal(c.quic_conn_recv_window_max, 64 * MiB);
    assert_int_equal(c.quic_unacked_send_bytes, 16 * MiB);
    assert_int_equal(c.io_threads, 0);
    assert_int_equal(c.core_shards, 0);
    assert_int_equal(c.log_capacity, 1024);
    assert_true(c.auto_create_streams);
    assert_true(c.workers_auto);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    assert_int_equal(c.workers, cpus > 1 ? cpus - 1 : 1);
    assert_int_equal(c.event_batch_max_delay_ns, 0); /* measured: docs/performance.md */
    assert_int_equal(c.loopback_mtu, 16250);         /* measured: docs/performance.md */
    assert_int_equal(c.idle_timeout_ns, 30000 * MS);
    assert_int_equal(c.keepalive_interval_ns, 10000 * MS);
    assert_int_equal(c.shutdown_drain_timeout_ns, 25000 * MS);
    assert_int_equal(c.origin[fx_config_key_index("pub_queue_depth")].from, FX_CONFIG_FROM_DEFAULT);
    fx_config_deinit(&c);
}

static void test_yaml_overrides_default(void **state)
{
    struct fixture f;
    assert_int_equal(load(&f, "pub_queue_depth: 128\nack_on_commit: yes\n", NULL, NULL, 0), 0);
    assert_int_equal(f.c.pub_queue_depth, 128);
    assert_true(f.c.ack_on_commit);
    const fx_config_origin *o = fx_config_origin_of(&f.c, "pub_queue_depth");
    assert_int_equal(o->from, FX_CONFIG_FROM_FILE);
    assert_int_equal(o->line, 1);
    done(&f);
}

static void test_env_overrides_yaml(void **state)
{
    struct fixture f;
    char *env[] = {"FELIX_BROKER_PUB_QUEUE_DEPTH=256", "HOME=/root", NULL};
    assert_int_equal(load(&f, "pub_queue_depth: 128\n", env, NULL, 0), 0);
    assert_int_equal(f.c.pub_queue_depth, 256);
    assert_int_equal(fx_config_origin_of(&f.c, "pub_queue_depth")->from, FX_CONFIG_FROM_ENV);
    done(&f);
}

static void test_flag_overrides_env(void **state)
{
    struct fixture f;
    char *env[] = {"FELIX_BROKER_PUB_QUEUE_DEPTH=256", NULL};
    const char *sets[] = {"pub_queue_depth=512"};
    assert_int_equal(load(&f, "pub_queue_depth: 128\n", env, sets, 1), 0);
    assert_int_equal(f.c.pub_queue_depth, 512);
    assert_int_equal(fx_config_origin_of(&f.c, "pub_queue_depth")->from, FX_CONFIG_FROM_FLAG);
    done(&f);
}

static void test_print_config_names_sources(void **state)
{
    struct fixture f;
    char *env[] = {"FELIX_SUB_QUEUE_POLICY=block", NULL};
    const char *sets[] = {"fanout_batch_size=8"};
    assert_int_equal(load(&f, "# comment\npub_queue_depth: 128\n", env, sets, 1), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    assert_non_null(out);
    assert_int_equal(fx_config_print(&f.c, out), 0);
    fclose(out);
    char want[128];
    snprintf(want, sizeof(want), "pub_queue_depth: 128  # %s:2\n", f.path);
    assert_contains(buf, want);
    assert_contains(buf, "subscriber_queue_policy: block  # env FELIX_SUB_QUEUE_POLICY\n");
    assert_contains(buf, "fanout_batch_size: 8  # flag --set\n");
    assert_contains(buf, "subscriber_queue_capacity: 512  # default\n");
    assert_contains(buf, "pub_conn_inflight_bytes: 32MiB  # default\n");
    free(buf);
    done(&f);
}

static void test_print_config_output_reloads(void **state)
{
    struct fixture f, g;
    const char *sets[] = {"streams=t1/ns/a,t2/ns/b", "tls_cert_file=/etc/x y/c.pem",
                          "tls_key_file=/k\"ey\n.pem", "quic_bind=[::1]:0",
                          "event_batch_max_delay_us=1ms"};
    assert_int_equal(load(&f, NULL, NULL, sets, 5), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    assert_non_null(out);
    assert_int_equal(fx_config_print(&f.c, out), 0);
    fclose(out);
    assert_int_equal(load(&g, buf, NULL, NULL, 0), 0);
    assert_int_equal(g.c.nstreams, 2);
    assert_string_equal(g.c.streams[1].tenant, "t2");
    assert_string_equal(g.c.tls_cert_file, "/etc/x y/c.pem");
    assert_string_equal(g.c.tls_key_file, "/k\"ey\n.pem");
    assert_string_equal(g.c.quic_bind, "[::1]:0");
    assert_int_equal(g.c.event_batch_max_delay_ns, 1 * MS);
    assert_int_equal(g.c.workers, f.c.workers);
    assert_int_equal(g.c.pub_conn_inflight_bytes, f.c.pub_conn_inflight_bytes);
    free(buf);
    done(&g);
    done(&f);
}

static void test_unknown_key_in_file_rejected_with_line(void **state)
{
    const char *want[] = {":3:1: unknown key \"pub_queue_dpeth\"", NULL};
    expect_error("pub_queue_depth: 1\n\npub_queue_dpeth: 2\n", NULL, NULL, 0, want);
}

static void test_unknown_key_in_flag_rejected(void **state)
{
    const char *sets[] = {"no_such_key=1"};
    const char *want[] = {"unknown key \"no_such_key\"", NULL};
    expect_error(NULL, NULL, sets, 1, want);
}

static void test_bad_policy_rejected_naming_key_and_source(void **state)
{
    const char *want_file[] = {":2:26: subscriber_queue_policy = \"fifo\"", "drop_new", NULL};
    expect_error("ack_on_commit: false\nsubscriber_queue_policy: fifo\n", NULL, NULL, 0, want_file);
    char *env[] = {"FELIX_SUB_QUEUE_MODE=lifo", NULL};
    const char *want_env[] = {"env FELIX_SUB_QUEUE_MODE", "subscriber_lane_queue_policy",
                              "\"lifo\"", NULL};
    expect_error(NULL, env, NULL, 0, want_env);
}

static void test_zero_capacity_rejected(void **state)
{
    const char *want[] = {"subscriber_queue_capacity = \"0\"", "must not be 0", NULL};
    expect_error("subscriber_queue_capacity: 0\n", NULL, NULL, 0, want);
    const char *sets[] = {"pub_queue_depth=0"};
    const char *want_flag[] = {"flag --set", "pub_queue_depth = \"0\"", NULL};
    expect_error(NULL, NULL, sets, 1, want_flag);
}

/* The key's default is the broker's own, and less than one pre-auth frame
 * (64 KiB) would refuse every auth: refused, naming the key. */
static void test_preauth_max_bytes_default_matches_broker_and_minimum_enforced(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    fx_broker_opts bo;
    fx_broker_opts_default(&bo);
    assert_int_equal(c.preauth_max_bytes, 128 * MiB);
    assert_int_equal(c.preauth_max_bytes, bo.preauth_max_bytes);
    fx_config_deinit(&c);
    struct fixture f;
    const char *ok[] = {"preauth_max_bytes=1MiB"};
    assert_int_equal(load(&f, NULL, NULL, ok, 1), 0);
    assert_int_equal(f.c.preauth_max_bytes, MiB);
    done(&f);
    const char *bad[] = {"preauth_max_bytes=1KiB"};
    const char *want[] = {"preauth_max_bytes", NULL};
    expect_error(NULL, NULL, bad, 1, want);
}

static void test_negative_value_rejected(void **state)
{
    char *env[] = {"FELIX_BROKER_PUB_QUEUE_DEPTH=-1", NULL};
    const char *want[] = {"env FELIX_BROKER_PUB_QUEUE_DEPTH", "negative", NULL};
    expect_error(NULL, env, NULL, 0, want);
}

static void test_size_units_parsed(void **state)
{
    struct fixture f;
    const char *sets[] = {"pub_inflight_bytes=1GiB",    "pub_conn_inflight_bytes=64MiB",
                          "event_batch_max_bytes=4096", "subscriber_max_bytes_per_write=512KiB",
                          "udp_send_buffer=16MB",       "udp_recv_buffer=2 MiB"};
    assert_int_equal(load(&f, NULL, NULL, sets, 6), 0);
    assert_int_equal(f.c.pub_inflight_bytes, 1024 * MiB);
    assert_int_equal(f.c.pub_conn_inflight_bytes, 64 * MiB);
    assert_int_equal(f.c.event_batch_max_bytes, 4096);
    assert_int_equal(f.c.subscriber_max_bytes_per_write, 512 * 1024);
    assert_int_equal(f.c.udp_send_buffer, 16000000);
    assert_int_equal(f.c.udp_recv_buffer, 2 * MiB);
    done(&f);
    const char *bad[] = {"max_frame_bytes=16Mb"};
    const char *want[] = {"unknown unit \"Mb\"", NULL};
    expect_error(NULL, NULL, bad, 1, want);
}

static void test_size_overflow_rejected(void **state)
{
    const char *digits[] = {"pub_inflight_bytes=18446744073709551616"};
    const char *want[] = {"pub_inflight_bytes", "overflow", NULL};
    expect_error(NULL, NULL, digits, 1, want);
    const char *scaled[] = {"pub_inflight_bytes=17179869184GiB"};
    expect_error(NULL, NULL, scaled, 1, want);
    const char *range[] = {"pub_inflight_bytes=65GiB"};
    const char *want_range[] = {"out of range", "64GiB", NULL};
    expect_error(NULL, NULL, range, 1, want_range);
}

static void test_duration_units_parsed(void **state)
{
    struct fixture f;
    const char *sets[] = {"event_batch_max_delay_us=250us", "ack_wait_timeout_ms=2s",
                          "idle_timeout_ms=1m", "subscriber_flush_max_delay_us=100ms"};
    assert_int_equal(load(&f, NULL, NULL, sets, 4), 0);
    assert_int_equal(f.c.event_batch_max_delay_ns, 250000);
    assert_int_equal(f.c.ack_wait_timeout_ns, 2000 * MS);
    assert_int_equal(f.c.idle_timeout_ns, 60000 * MS);
    assert_int_equal(f.c.subscriber_flush_max_delay_ns, 100 * MS);
    done(&f);
    const char *bad[] = {"ack_wait_timeout_ms=2 days"};
    const char *want[] = {"ack_wait_timeout_ms", "unknown unit", NULL};
    expect_error(NULL, NULL, bad, 1, want);
}

static void test_ms_suffix_key_plain_number(void **state)
{
    struct fixture f;
    assert_int_equal(load(&f, "publish_queue_wait_timeout_ms: 1500\nevent_batch_max_delay_us: 40\n",
                          NULL, NULL, 0),
                     0);
    assert_int_equal(f.c.publish_queue_wait_timeout_ns, 1500 * MS);
    assert_int_equal(f.c.event_batch_max_delay_ns, 40000);
    done(&f);
}

static void test_env_bool_rejects_garbage(void **state)
{
    struct fixture f;
    char *ok[] = {"FELIX_ACK_ON_COMMIT=on", "FELIX_PUB_INGRESS_WAIT=1",
                  "FELIX_AUTO_CREATE_STREAMS=off", NULL};
    assert_int_equal(load(&f, NULL, ok, NULL, 0), 0);
    assert_true(f.c.ack_on_commit);
    assert_true(f.c.pub_ingress_wait);
    assert_false(f.c.auto_create_streams);
    done(&f);
    char *bad[] = {"FELIX_ACK_ON_COMMIT=maybe", NULL};
    const char *want[] = {"env FELIX_ACK_ON_COMMIT", "ack_on_commit = \"maybe\"", NULL};
    expect_error(NULL, bad, NULL, 0, want);
}

static void test_budget_smaller_than_frame_rejected(void **state)
{
    char *env[] = {"FELIX_MAX_FRAME_BYTES=48MiB", NULL};
    const char *want[] = {"max_frame_bytes = 48MiB (env FELIX_MAX_FRAME_BYTES)",
                          "pub_conn_inflight_bytes = 32MiB (default)", NULL};
    expect_error(NULL, env, NULL, 0, want);
}

static void test_conn_budget_above_global_rejected(void **state)
{
    const char *want[] = {"pub_conn_inflight_bytes = 128MiB", "pub_inflight_bytes = 64MiB",
                          "whole budget", NULL};
    expect_error("pub_conn_inflight_bytes: 128MiB\n", NULL, NULL, 0, want);
}

static void test_lanes_above_max_rejected(void **state)
{
    const char *sets[] = {"subscriber_writer_lanes=9"};
    const char *want[] = {"subscriber_writer_lanes = 9", "max_subscriber_writer_lanes = 8", NULL};
    expect_error(NULL, NULL, sets, 1, want);
}

static void test_loopback_mtu_zero_or_a_quic_datagram_size(void **state)
{
    struct fixture f;
    const char *off[] = {"loopback_mtu=0"};
    assert_int_equal(load(&f, NULL, NULL, off, 1), 0);
    assert_int_equal(f.c.loopback_mtu, 0);
    done(&f);
    const char *tiny[] = {"loopback_mtu=800"};
    const char *want_tiny[] = {"loopback_mtu: 800 is below QUIC's 1200-byte minimum", NULL};
    expect_error(NULL, NULL, tiny, 1, want_tiny);
    const char *big[] = {"loopback_mtu=32000", "max_udp_payload=20000"};
    const char *want_big[] = {"loopback_mtu = 32000", "max_udp_payload = 20000",
                              "loopback datagrams stay within max_udp_payload", NULL};
    expect_error(NULL, NULL, big, 2, want_big);
}

static void test_core_shards_replace_workers(void **state)
{
    struct fixture f;
    const char *sets[] = {"workers=3", "core_shards=2"};
    assert_int_equal(load(&f, NULL, NULL, sets, 2), 0);
    assert_int_equal(f.c.workers, 2);
    assert_true(any_warning_contains(&f.d, "replaced by core_shards"));
    assert_non_null(fx_config_origin_of(&f.c, "workers")->note);
    done(&f);
}

static void test_workers_zero_rejected_auto_accepted(void **state)
{
    const char *want[] = {"workers", "write auto", NULL};
    expect_error("workers: 0\n", NULL, NULL, 0, want);
    struct fixture f;
    assert_int_equal(load(&f, "workers: auto\n", NULL, NULL, 0), 0);
    assert_true(f.c.workers_auto);
    assert_true(f.c.workers >= 1);
    done(&f);
}

static void test_cache_window_aliases_set_quic_windows(void **state)
{
    struct fixture f;
    char *env[] = {"FELIX_CACHE_STREAM_RECV_WINDOW=4MiB", NULL};
    assert_int_equal(
        load(&f, "cache_conn_recv_window: 256MiB\ncache_send_window: 32MiB\n", env, NULL, 0), 0);
    assert_int_equal(f.c.quic_conn_recv_window, 256 * MiB);
    assert_int_equal(f.c.quic_conn_recv_window_max, 256 * MiB); /* default ceiling raised */
    assert_int_equal(f.c.quic_unacked_send_bytes, 32 * MiB);
    assert_int_equal(f.c.quic_stream_recv_window, 4 * MiB);
    assert_string_equal(fx_config_origin_of(&f.c, "quic_conn_recv_window")->name,
                        "cache_conn_recv_window");
    done(&f);
    /* An explicit ceiling below the window is refused, not raised. */
    const char *want[] = {"quic_conn_recv_window = 256MiB", "quic_conn_recv_window_max = 32MiB",
                          NULL};
    expect_error("cache_conn_recv_window: 256MiB\nquic_conn_recv_window_max: 32MiB\n", NULL, NULL,
                 0, want);
}

static void test_controlplane_key_warns_but_loads(void **state)
{
    struct fixture f;
    char *env[] = {"FELIX_CONTROLPLANE_SYNC_INTERVAL_MS=500", NULL};
    assert_int_equal(
        load(&f, "controlplane_url: http://cp:8443\ncache_conn_pool: 8\n", env, NULL, 0), 0);
    assert_true(any_warning_contains(&f.d, ":1:1: controlplane_url is ignored"));
    assert_true(any_warning_contains(&f.d, "env FELIX_CONTROLPLANE_SYNC_INTERVAL_MS is ignored"));
    assert_true(any_warning_contains(&f.d, "cache_conn_pool is ignored"));
    assert_string_equal(f.d.error, "");
    done(&f);
}

static void test_ignored_original_key_rejected(void **state)
{
    const char *want[] = {":1:1: sub_streams_per_conn is not supported", "remove it", NULL};
    expect_error("sub_streams_per_conn: 4\n", NULL, NULL, 0, want);
    char *env[] = {"FELIX_SUB_STREAMS_PER_CONN=4", NULL};
    const char *want_env[] = {"env FELIX_SUB_STREAMS_PER_CONN is not supported", NULL};
    expect_error(NULL, env, NULL, 0, want_env);
}

/* ngtcp2 0.12 cannot set an initial congestion window: the key is refused
 * wherever it comes from, whatever its value, rather than accepted and
 * ignored. */
static void test_initial_cwnd_refused_as_unsupported(void **state)
{
    const char *why = "not supported: ngtcp2 0.12 has no initial congestion window setting";
    const char *want[] = {":2:1: initial_cwnd is ", why, NULL};
    expect_error("pub_queue_depth: 8\ninitial_cwnd: 64KiB\n", NULL, NULL, 0, want);
    char *env[] = {"FELIX_INITIAL_CWND=0", NULL};
    const char *want_env[] = {"env FELIX_INITIAL_CWND is ", why, NULL};
    expect_error(NULL, env, NULL, 0, want_env);
    const char *sets[] = {"initial_cwnd=14720"};
    const char *want_set[] = {"initial_cwnd is ", why, NULL};
    expect_error(NULL, NULL, sets, 1, want_set);
}

/* The original's perf runner exports FELIX_DISABLE_TIMINGS=1: it loads, with
 * a warning that says it changes nothing. */
static void test_disable_timings_env_warns_and_loads(void **state)
{
    struct fixture f;
    char *env[] = {"FELIX_DISABLE_TIMINGS=1", NULL};
    assert_int_equal(load(&f, NULL, env, NULL, 0), 0);
    assert_string_equal(f.d.error, "");
    assert_true(any_warning_contains(&f.d, "env FELIX_DISABLE_TIMINGS is ignored"));
    assert_true(any_warning_contains(&f.d, "nothing to disable"));
    done(&f);
    assert_int_equal(load(&f, "disable_timings: true\n", NULL, NULL, 0), 0);
    assert_true(any_warning_contains(&f.d, ":1:1: disable_timings is ignored"));
    done(&f);
}

static void test_env_alias_names_accepted(void **state)
{
    struct fixture f;
    char *env[] = {"FELIX_SUB_QUEUE_CAPACITY=1000", "FELIX_SUB_WRITER_LANES=2",
                   "FELIX_IO_RUNTIME_THREADS=1", NULL};
    assert_int_equal(load(&f, NULL, env, NULL, 0), 0);
    assert_int_equal(f.c.subscriber_queue_capacity, 1000);
    assert_int_equal(f.c.subscriber_writer_lanes, 2);
    assert_int_equal(f.c.io_threads, 1);
    assert_string_equal(fx_config_origin_of(&f.c, "subscriber_queue_capacity")->name,
                        "FELIX_SUB_QUEUE_CAPACITY");
    done(&f);
}

static void test_env_alias_and_canonical_both_set_rejected(void **state)
{
    char *env[] = {"FELIX_SUB_QUEUE_CAPACITY=1000", "FELIX_SUBSCRIBER_QUEUE_CAPACITY=10", NULL};
    const char *want[] = {"FELIX_SUB_QUEUE_CAPACITY", "FELIX_SUBSCRIBER_QUEUE_CAPACITY",
                          "subscriber_queue_capacity", NULL};
    expect_error(NULL, env, NULL, 0, want);
}

static void test_unknown_felix_env_warns(void **state)
{
    struct fixture f;
    char *env[] = {"FELIX_SUB_QUEUE_CAPACTY=5", "PATH=/bin", NULL};
    assert_int_equal(load(&f, NULL, env, NULL, 0), 0);
    assert_true(any_warning_contains(&f.d, "FELIX_SUB_QUEUE_CAPACTY is not a felix-broker"));
    assert_int_equal(f.d.nwarnings, 1);
    done(&f);
}

static void test_streams_list_parsed(void **state)
{
    struct fixture f;
    assert_int_equal(load(&f, "streams:\n  - t1/orders/eu\n  - t2/ns.a/s-1\n", NULL, NULL, 0), 0);
    assert_int_equal(f.c.nstreams, 2);
    assert_string_equal(f.c.streams[0].tenant, "t1");
    assert_string_equal(f.c.streams[0].ns, "orders");
    assert_string_equal(f.c.streams[0].stream, "eu");
    assert_string_equal(f.c.streams[1].ns, "ns.a");
    done(&f);
    /* The environment replaces the file's whole list. */
    char *env[] = {"FELIX_STREAMS=a/b/c,a/b/d", NULL};
    assert_int_equal(load(&f, "streams: [t/n/s]\n", env, NULL, 0), 0);
    assert_int_equal(f.c.nstreams, 2);
    assert_string_equal(f.c.streams[0].tenant, "a");
    assert_string_equal(f.c.streams[1].stream, "d");
    done(&f);
    const char *want[] = {":3:5: streams:", "t1/orders", NULL};
    expect_error("streams:\n  - t1/orders/eu\n  - t1/orders\n", NULL, NULL, 0, want);
    const char *want_dup[] = {"listed twice", NULL};
    expect_error("streams: [t/n/s, t/n/s]\n", NULL, NULL, 0, want_dup);
}

static void test_groups_list_parsed(void **state)
{
    struct fixture f;
    assert_int_equal(
        load(&f, "groups:\n  - t1/default/orders/billing@new\n  - t1/default/orders/audit\n", NULL,
             NULL, 0),
        0);
    assert_int_equal(f.c.ngroups, 2);
    assert_string_equal(f.c.groups[0].s.stream, "orders");
    assert_string_equal(f.c.groups[0].group, "billing");
    assert_int_equal(f.c.groups[0].start, FX_CONFIG_GROUP_START_NEW);
    assert_int_equal(f.c.groups[1].start, FX_CONFIG_GROUP_START_ALL);
    assert_int_equal(fx_config_origin_of(&f.c, "groups")->line, 2);
    done(&f);
    /* The environment replaces the file's whole list. */
    char *env[] = {"FELIX_GROUPS=a/b/c/g1@last,a/b/c/g2@7", NULL};
    assert_int_equal(load(&f, "groups: [t/n/s/g]\n", env, NULL, 0), 0);
    assert_int_equal(f.c.ngroups, 2);
    assert_string_equal(f.c.groups[1].group, "g2");
    assert_int_equal(f.c.groups[1].offset, 7);
    assert_int_equal(fx_config_origin_of(&f.c, "groups")->from, FX_CONFIG_FROM_ENV);
    done(&f);
    const char *want[] = {":3:5: groups:", "\"t1/orders/eu\" is not tenant/namespace/stream/group",
                          NULL};
    expect_error("groups:\n  - t1/orders/eu/g\n  - t1/orders/eu\n", NULL, NULL, 0, want);
    const char *want_start[] = {":1:10: groups:", "\"@later\" is not @all, @new, @last", NULL};
    expect_error("groups: [t/n/s/g@later]\n", NULL, NULL, 0, want_start);
    const char *want_item[] = {":2:5: groups: an item is a mapping", NULL};
    expect_error("groups:\n  - a: b\n", NULL, NULL, 0, want_item);
    const char *want_seq[] = {":1:9: groups: expected a sequence", NULL};
    expect_error("groups: t/n/s/g\n", NULL, NULL, 0, want_seq);
    const char *want_env[] = {"env FELIX_GROUPS", "group name \"a/b\" contains '/'", NULL};
    char *bad_env[] = {"FELIX_GROUPS=t/n/s/a/b", NULL};
    expect_error(NULL, bad_env, NULL, 0, want_env);
}

static void test_groups_per_stream_rule(void **state)
{
    struct fixture f;
    assert_int_equal(
        load(&f, "max_groups_per_stream: 2\ngroups: [t/n/s/a, t/n/s/b, t/n/u/c]\n", NULL, NULL, 0),
        0);
    done(&f);
    const char *want[] = {"groups lists 3 groups of stream t/n/s",
                          "more than max_groups_per_stream (2)", NULL};
    expect_error("max_groups_per_stream: 2\ngroups: [t/n/s/a, t/n/s/b, t/n/s/c]\n", NULL, NULL, 0,
                 want);
}

static void test_group_backoff_list_parsed_and_bad_lists_refused(void **state)
{
    struct fixture f;
    assert_int_equal(load(&f, "group_backoff_ms: \"100,2000,0\"\n", NULL, NULL, 0), 0);
    assert_int_equal(f.c.group_nbackoff, 3);
    assert_int_equal(f.c.group_backoff[0], 100);
    assert_int_equal(f.c.group_backoff[1], 2000);
    assert_int_equal(f.c.group_backoff[2], 0);
    done(&f);
    assert_int_equal(load(&f, "", NULL, NULL, 0), 0);
    assert_int_equal(f.c.group_nbackoff, 0); /* default: at once */
    done(&f);
    const char *want[] = {"group_backoff_ms", "at most 8 delays", NULL};
    expect_error("group_backoff_ms: \"1,2,3,4,5,6,7,8,9\"\n", NULL, NULL, 0, want);
    expect_error("group_backoff_ms: \"100,,200\"\n", NULL, NULL, 0, want);
    expect_error("group_backoff_ms: \"100ms\"\n", NULL, NULL, 0, want);
    expect_error("group_backoff_ms: \"43200001\"\n", NULL, NULL, 0, want);
}

/* Checkpoint 4g's escape: 60 s by default (a group outlives its members),
 * 0 = never, at most an hour. */
static void test_group_hold_timeout_defaults_to_60s_and_0_means_never(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    assert_int_equal(c.group_hold_timeout_ns, 60 * SEC);
    fx_config_deinit(&c);
    struct fixture f;
    char *env[] = {"FELIX_GROUP_HOLD_TIMEOUT_MS=0", NULL};
    assert_int_equal(load(&f, NULL, env, NULL, 0), 0);
    assert_int_equal(f.c.group_hold_timeout_ns, 0);
    done(&f);
    const char *set[] = {"group_hold_timeout_ms=250"};
    assert_int_equal(load(&f, NULL, NULL, set, 1), 0);
    assert_int_equal(f.c.group_hold_timeout_ns, 250 * MS);
    done(&f);
    const char *bad[] = {"group_hold_timeout_ms=2h"};
    expect_error(NULL, NULL, bad, 1, (const char *const[]){"group_hold_timeout_ms", NULL});
}

static void test_retention_keys_defaults_and_tenant_rule(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    assert_int_equal(c.tenant_retained_bytes, 256 * MiB);
    assert_int_equal(c.retained_bytes_limit, 1 * GiB);
    assert_int_equal(c.stream_idle_expiry_ns, 3600 * SEC);
    assert_int_equal(c.max_tenants, 1024);
    assert_int_equal(c.subscriber_block_timeout_ns, 0);
    fx_config_deinit(&c);
    struct fixture f;
    char *env[] = {"FELIX_SUBSCRIBER_BLOCK_TIMEOUT_MS=5000", "FELIX_STREAM_IDLE_EXPIRY_S=90", NULL};
    assert_int_equal(load(&f, "max_tenants: 2\nstreams: [a/n/s, b/n/s, a/n/t]\n", env, NULL, 0), 0);
    assert_int_equal(f.c.subscriber_block_timeout_ns, 5000 * MS);
    assert_int_equal(f.c.stream_idle_expiry_ns, 90 * SEC);
    done(&f);
    const char *want[] = {"3 tenants", "max_tenants (2)", NULL};
    expect_error("max_tenants: 2\nstreams: [a/n/s, b/n/s, c/n/s]\n", NULL, NULL, 0, want);
}

static void test_yaml_syntax_error_reports_line(void **state)
{
    const char *want[] = {":3:", "YAML syntax error", NULL};
    expect_error("pub_queue_depth: 1\nfanout_batch_size: 2\n  bad: [indent\n", NULL, NULL, 0, want);
}

static void test_wrong_yaml_type_rejected(void **state)
{
    const char *want[] = {":2:3: pub_queue_depth: expected a single value, found a mapping", NULL};
    expect_error("pub_queue_depth:\n  depth: 5\n", NULL, NULL, 0, want);
    const char *want_null[] = {"pub_queue_depth has no value", NULL};
    expect_error("pub_queue_depth:\n", NULL, NULL, 0, want_null);
}

static void test_duplicate_key_rejected(void **state)
{
    const char *want[] = {":3:1: pub_queue_depth is set twice (first at line 1)", NULL};
    expect_error("pub_queue_depth: 1\nack_on_commit: true\npub_queue_depth: 2\n", NULL, NULL, 0,
                 want);
    /* An alias and its key name the same setting. */
    const char *want_alias[] = {"quic_conn_recv_window is set twice", NULL};
    expect_error("quic_conn_recv_window: 1MiB\ncache_conn_recv_window: 2MiB\n", NULL, NULL, 0,
                 want_alias);
}

static void test_config_path_from_env(void **state)
{
    struct fixture f;
    write_yaml(&f, "pub_queue_depth: 77\n");
    char var[96];
    snprintf(var, sizeof(var), "FELIX_BROKER_CONFIG=%s", f.path);
    char *env[] = {var, NULL};
    fx_config_defaults(&f.c);
    fx_config_src src = {.envp = env};
    int rv = fx_config_load(&f.c, &src, &f.d);
    unlink(f.path);
    assert_int_equal(rv, 0);
    assert_int_equal(f.c.pub_queue_depth, 77);
    assert_int_equal(f.d.nwarnings, 0);
    done(&f);
    char *missing[] = {"FELIX_BROKER_CONFIG=/nonexistent/felix.yaml", NULL};
    const char *want[] = {"cannot open config file /nonexistent/felix.yaml", NULL};
    expect_error(NULL, missing, NULL, 0, want);
}

static void test_tls_files_must_come_together(void **state)
{
    const char *sets[] = {"tls_cert_file=/etc/felix/cert.pem"};
    const char *want[] = {"tls_key_file", NULL};
    expect_error(NULL, NULL, sets, 1, want);
}

static void test_dev_config_loads(void **state)
{
    fx_config c;
    fx_config_diag d;
    fx_config_defaults(&c);
    fx_config_src src = {.text = fx_config_dev_yaml, .text_name = "<dev>"};
    assert_int_equal(fx_config_load(&c, &src, &d), 0);
    assert_string_equal(c.quic_bind, "127.0.0.1:5000");
    assert_string_equal(c.metrics_bind, "127.0.0.1:8080");
    assert_true(c.auto_create_streams);
    assert_string_equal(c.state_dir, "./build/run-state");
    assert_int_equal(c.origin[fx_config_key_index("quic_bind")].from, FX_CONFIG_FROM_FILE);
    fx_config_deinit(&c);
}

static void test_jwt_mode_requires_jwks_file(void **state)
{
    (void)state;
    const char *want[] = {"auth_mode = jwt", "needs jwks_file", NULL};
    expect_error("auth_mode: jwt\n", NULL, NULL, 0, want);
}

static void test_jwt_keys_from_file_env_and_flags(void **state)
{
    (void)state;
    struct fixture f;
    char *envp[] = {"FELIX_JWKS_FILE=/etc/felix/jwks.json", "FELIX_JWT_AUDIENCE=aud-env", NULL};
    const char *sets[] = {"jwt_leeway_s=30"};
    assert_int_equal(load(&f, "auth_mode: jwt\njwt_issuer: iss-file\n", envp, sets, 1), 0);
    assert_int_equal(f.c.auth_mode, FX_CONFIG_AUTH_JWT);
    assert_string_equal(f.c.jwks_file, "/etc/felix/jwks.json");
    assert_string_equal(f.c.jwt_issuer, "iss-file");
    assert_string_equal(f.c.jwt_audience, "aud-env");
    assert_int_equal(f.c.jwt_leeway_ns, 30 * 1000 * MS);
    assert_int_equal(fx_config_origin_of(&f.c, "jwks_file")->from, FX_CONFIG_FROM_ENV);
    assert_int_equal(fx_config_origin_of(&f.c, "jwt_leeway_s")->from, FX_CONFIG_FROM_FLAG);
    done(&f);
}

static void test_jwt_defaults_match_auth_module(void **state)
{
    (void)state;
    struct fixture f;
    assert_int_equal(load(&f, NULL, NULL, NULL, 0), 0);
    assert_int_equal(f.c.auth_mode, FX_CONFIG_AUTH_NONE);
    assert_string_equal(f.c.jwks_file, "");
    assert_string_equal(f.c.jwt_issuer, "felix-auth");
    assert_string_equal(f.c.jwt_audience, "felix-broker");
    assert_int_equal(f.c.jwt_leeway_ns, 60 * 1000 * MS);
    done(&f);
}

static void test_jwt_leeway_rejects_fractions_and_empty_issuer(void **state)
{
    (void)state;
    const char *frac[] = {"jwt_leeway_s=1500ms"};
    const char *want_frac[] = {"jwt_leeway_s", "whole seconds", NULL};
    expect_error(NULL, NULL, frac, 1, want_frac);
    const char *empty[] = {"jwt_issuer="};
    const char *want_empty[] = {"jwt_issuer", NULL};
    expect_error(NULL, NULL, empty, 1, want_empty);
}

static void test_jwks_file_without_jwt_warns(void **state)
{
    (void)state;
    struct fixture f;
    assert_int_equal(load(&f, "jwks_file: /etc/felix/jwks.json\n", NULL, NULL, 0), 0);
    assert_true(any_warning_contains(&f.d, "auth_mode is none"));
    done(&f);
}

/* ---- durable storage --------------------------------------------------- */

static void test_durable_keys_default_and_env_names_of_the_original(void **state)
{
    (void)state;
    struct fixture f;
    assert_int_equal(load(&f, NULL, NULL, NULL, 0), 0);
    assert_string_equal(f.c.durable_storage_dir, "");
    assert_int_equal(f.c.durable_fsync_mode, FX_FSYNC_PERIODIC);
    assert_int_equal(f.c.durable_fsync_interval_ns, 250 * MS);
    assert_int_equal(f.c.durable_segment_bytes, 256 * MiB);
    assert_int_equal(f.c.durable_index_spacing_bytes, 4096);
    assert_false(f.c.durable_default);
    done(&f);
    char *env[] = {"FELIX_DURABLE_STORAGE_DIR=/var/lib/felix",
                   "FELIX_DURABLE_FSYNC_MODE=On-Commit",
                   "FELIX_DURABLE_FSYNC_INTERVAL_MS=40",
                   "FELIX_DURABLE_SEGMENT_BYTES=1048576",
                   "FELIX_DURABLE_INDEX_SPACING_BYTES=512",
                   "FELIX_DURABLE_RETENTION_BYTES=1GiB",
                   "FELIX_DURABLE_RETENTION_SECONDS=3600",
                   "FELIX_DURABLE_MAX_UNSYNCED_BYTES=1MiB",
                   "FELIX_DURABLE_DEFAULT=true",
                   "FELIX_DURABLE_RETENTION_INTERVAL_SECONDS=5",
                   "FELIX_DURABLE_MAX_RECORDS_PER_READ=500",
                   NULL};
    assert_int_equal(load(&f, NULL, env, NULL, 0), 0);
    assert_string_equal(f.c.durable_storage_dir, "/var/lib/felix");
    assert_int_equal(f.c.durable_fsync_mode, FX_FSYNC_ON_COMMIT);
    assert_int_equal(f.c.durable_fsync_interval_ns, 40 * MS);
    assert_int_equal(f.c.durable_segment_bytes, MiB);
    assert_int_equal(f.c.durable_index_spacing_bytes, 512);
    assert_int_equal(f.c.durable_retention_bytes, GiB);
    assert_int_equal(f.c.durable_retention_ns, 3600 * 1000 * MS);
    assert_int_equal(f.c.durable_max_unsynced_bytes, MiB);
    assert_true(f.c.durable_default);
    assert_int_equal(f.c.durable_retention_interval_ns, 5 * 1000 * MS);
    assert_int_equal(f.c.durable_max_records_per_read, 500);
    done(&f);
    const char *sets[] = {"durable_fsync_mode=off"};
    assert_int_equal(load(&f, NULL, NULL, sets, 1), 0);
    assert_int_equal(f.c.durable_fsync_mode, FX_FSYNC_NONE);
    done(&f);
}

/* The pipelined flush is off unless durable_flush_pipeline says otherwise
 * (file, environment or --set). */
static void test_durable_flush_pipeline_is_off_by_default_and_can_be_switched_on(void **state)
{
    (void)state;
    struct fixture f;
    assert_int_equal(load(&f, NULL, NULL, NULL, 0), 0);
    assert_false(f.c.durable_flush_pipeline);
    done(&f);
    assert_int_equal(load(&f, "durable_flush_pipeline: true\n", NULL, NULL, 0), 0);
    assert_true(f.c.durable_flush_pipeline);
    done(&f);
    char *env[] = {"FELIX_DURABLE_FLUSH_PIPELINE=true", NULL};
    assert_int_equal(load(&f, NULL, env, NULL, 0), 0);
    assert_true(f.c.durable_flush_pipeline);
    done(&f);
    const char *sets[] = {"durable_flush_pipeline=false"};
    assert_int_equal(load(&f, "durable_flush_pipeline: true\n", NULL, sets, 1), 0);
    assert_false(f.c.durable_flush_pipeline);
    done(&f);
    const char *bad[] = {"durable_flush_pipeline", NULL};
    expect_error("durable_flush_pipeline: sometimes\n", NULL, NULL, 0, bad);
}

static void test_durable_bad_values_are_refused(void **state)
{
    (void)state;
    const char *mode[] = {"durable_fsync_mode", "none, periodic or on_commit", NULL};
    expect_error("durable_fsync_mode: sometimes\n", NULL, NULL, 0, mode);
    const char *seg[] = {"durable_segment_bytes", NULL};
    expect_error("durable_segment_bytes: 59\n", NULL, NULL, 0, seg);
    const char *sp[] = {"durable_index_spacing_bytes", NULL};
    expect_error("durable_index_spacing_bytes: 0\n", NULL, NULL, 0, sp);
    const char *iv[] = {"durable_fsync_interval_ms", NULL};
    expect_error("durable_fsync_interval_ms: 0\n", NULL, NULL, 0, iv);
    const char *mr[] = {"durable_max_records_per_read", NULL};
    expect_error("durable_max_records_per_read: 0\n", NULL, NULL, 0, mr);
    const char *def[] = {"durable_default = true needs durable_storage_dir", NULL};
    expect_error("durable_default: true\n", NULL, NULL, 0, def);
    const char *dc[] = {"cache t1/default/s@durable needs durable_storage_dir", NULL};
    expect_error("caches:\n  - t1/default/m\n  - t1/default/s@durable\n", NULL, NULL, 0, dc);
}

static void test_unknown_durable_key_warns_naming_the_storage(void **state)
{
    (void)state;
    struct fixture f;
    char *env[] = {"FELIX_DURABLE_ROLLOVER_THRESHOLD_PERCENT=90", NULL};
    assert_int_equal(load(&f, "durable_max_overshoot_percent: 100\n", env, NULL, 0), 0);
    assert_true(any_warning_contains(&f.d, "env FELIX_DURABLE_ROLLOVER_THRESHOLD_PERCENT is "
                                           "ignored: not a setting of Felix-C's durable storage"));
    assert_true(any_warning_contains(&f.d, "durable_max_overshoot_percent is ignored"));
    done(&f);
}

/* docs/configuration.md embeds the registry's tables between two markers;
 * they must equal what fx_config_print_markdown() writes today. */
static void test_metrics_stream_labels_default_off_validated_and_warned_off_loopback(void **state)
{
    struct fixture f;
    assert_int_equal(load(&f, NULL, NULL, NULL, 0), 0);
    assert_false(f.c.metrics_stream_labels);
    done(&f);
    const char *on[] = {"metrics_stream_labels=true"};
    assert_int_equal(load(&f, NULL, NULL, on, 1), 0);
    assert_true(f.c.metrics_stream_labels);
    assert_false(any_warning_contains(&f.d, "metrics_stream_labels"));
    done(&f);
    char *env[] = {"FELIX_METRICS_STREAM_LABELS=true", NULL};
    assert_int_equal(load(&f, NULL, env, NULL, 0), 0);
    assert_true(f.c.metrics_stream_labels);
    done(&f);
    const char *bad[] = {"metrics_stream_labels=sometimes"};
    expect_error(NULL, NULL, bad, 1, (const char *const[]){"metrics_stream_labels", NULL});
    /* Off loopback the names reach the network: said at load. */
    const char *remote[] = {"metrics_bind=0.0.0.0:8080", "metrics_stream_labels=true"};
    assert_int_equal(load(&f, NULL, NULL, remote, 2), 0);
    assert_true(any_warning_contains(&f.d, "metrics_stream_labels = true and metrics_bind "
                                           "0.0.0.0:8080 is not loopback"));
    done(&f);
}

static void test_docs_key_table_matches_registry(void **state)
{
    const char *root = getenv("FX_SOURCE_DIR");
    if (!root)
        fx_test_skip("FX_SOURCE_DIR not set (run through ctest)");
    char path[512];
    snprintf(path, sizeof(path), "%s/docs/configuration.md", root);
    FILE *in = fopen(path, "r");
    assert_non_null(in);
    static char doc[256 * 1024];
    size_t n = fread(doc, 1, sizeof(doc) - 1, in);
    fclose(in);
    doc[n] = '\0';
    const char *begin_mark = "<!-- BEGIN GENERATED: felix-broker --print-config --markdown -->\n";
    char *begin = strstr(doc, begin_mark);
    char *end = strstr(doc, "<!-- END GENERATED -->");
    assert_non_null(begin);
    assert_non_null(end);
    begin += strlen(begin_mark);
    *end = '\0';
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    assert_non_null(out);
    assert_int_equal(fx_config_print_markdown(out), 0);
    fclose(out);
    if (strcmp(begin, buf) != 0)
        fprintf(stderr, "docs/configuration.md is stale: regenerate the table with "
                        "felix-broker --print-config --markdown\n");
    assert_string_equal(begin, buf);
    free(buf);
}

/* ---- exposure: auth_mode none stays on loopback ------------------------- */

static void test_quic_bind_defaults_to_loopback_under_auth_none(void **state)
{
    struct fixture f;
    assert_int_equal(load(&f, NULL, NULL, NULL, 0), 0);
    assert_string_equal(f.c.quic_bind, "127.0.0.1:5000");
    assert_false(f.c.allow_unauthenticated);
    done(&f);
}

static void test_quic_bind_default_listens_everywhere_under_jwt(void **state)
{
    struct fixture f;
    const char *sets[] = {"auth_mode=jwt", "jwks_file=/etc/felix/jwks.json"};
    assert_int_equal(load(&f, NULL, NULL, sets, 2), 0);
    assert_string_equal(f.c.quic_bind, "0.0.0.0:5000");
    assert_non_null(fx_config_origin_of(&f.c, "quic_bind")->note);
    done(&f);
    /* An explicit bind under jwt is kept as written. */
    const char *mine[] = {"auth_mode=jwt", "jwks_file=/etc/felix/jwks.json",
                          "quic_bind=127.0.0.1:7000"};
    assert_int_equal(load(&f, NULL, NULL, mine, 3), 0);
    assert_string_equal(f.c.quic_bind, "127.0.0.1:7000");
    done(&f);
}

static void test_non_loopback_bind_without_auth_refused(void **state)
{
    const char *binds[] = {"0.0.0.0:5000", "10.1.2.3:5000", "[::]:5000", "broker.example:5000"};
    for (size_t i = 0; i < sizeof(binds) / sizeof(binds[0]); i++) {
        char set[64];
        snprintf(set, sizeof(set), "quic_bind=%s", binds[i]);
        const char *sets[] = {set};
        const char *want[] = {"quic_bind", binds[i], "auth_mode: jwt",
                              "allow_unauthenticated: true", NULL};
        expect_error(NULL, NULL, sets, 1, want);
    }
    /* The file position is named too. */
    const char *want[] = {"quic_bind = 0.0.0.0:5000", ":1:", NULL};
    expect_error("quic_bind: 0.0.0.0:5000\n", NULL, NULL, 0, want);
}

static void test_allow_unauthenticated_accepts_non_loopback_bind(void **state)
{
    struct fixture f;
    char *env[] = {"FELIX_ALLOW_UNAUTHENTICATED=true", NULL};
    const char *sets[] = {"quic_bind=0.0.0.0:5000"};
    assert_int_equal(load(&f, NULL, env, sets, 1), 0);
    assert_true(f.c.allow_unauthenticated);
    assert_string_equal(f.c.quic_bind, "0.0.0.0:5000");
    assert_int_equal(fx_config_origin_of(&f.c, "allow_unauthenticated")->from, FX_CONFIG_FROM_ENV);
    done(&f);
    assert_int_equal(
        load(&f, "allow_unauthenticated: yes\nquic_bind: '[::]:5000'\n", NULL, NULL, 0), 0);
    done(&f);
}

static void test_loopback_addresses_recognised(void **state)
{
    const char *loop[] = {"127.0.0.1:5000", "127.9.8.7:0",          "[::1]:5000",
                          "localhost:1",    "[::ffff:127.0.0.1]:5", "LocalHost:2"};
    const char *remote[] = {"0.0.0.0:5000",        "10.0.0.1:5000", "[::]:5000",
                            "[2001:db8::1]:1",     "128.0.0.1:1",   "localhost.evil:1",
                            "[::ffff:10.0.0.1]:5", ":5000"};
    for (size_t i = 0; i < sizeof(loop) / sizeof(loop[0]); i++)
        assert_true(fx_config_addr_is_loopback(loop[i]));
    for (size_t i = 0; i < sizeof(remote) / sizeof(remote[0]); i++)
        assert_false(fx_config_addr_is_loopback(remote[i]));
}

/* ---- the memory bound ------------------------------------------------- */

/* Loads |sets| with memory target |target| (as detected on the host). */
static int load_target(struct fixture *f, uint64_t target, const char **sets, size_t nsets)
{
    f->path[0] = '\0';
    fx_config_defaults(&f->c);
    fx_config_src src = {.sets = sets, .nsets = nsets, .memory_target_bytes = target};
    return fx_config_load(&f->c, &src, &f->d);
}

static void assert_bound_fits(const fx_config *c)
{
    fx_config_bound b;
    fx_config_memory_bound(c, &b);
    assert_true(b.total <= c->memory_limit_bytes);
    assert_int_equal(b.total, b.conns + b.ingress + b.retained + b.rings + b.caches);
}

static void test_memory_defaults_kept_on_large_host(void **state)
{
    struct fixture f;
    assert_int_equal(load_target(&f, BIG_TARGET, NULL, 0), 0);
    assert_int_equal(f.c.memory_limit_bytes, BIG_TARGET);
    assert_int_equal(f.c.max_connections, 4096);
    assert_int_equal(f.c.quic_conn_recv_window_max, 64 * MiB);
    assert_int_equal(f.c.quic_conn_recv_window, 16 * MiB);
    assert_null(fx_config_origin_of(&f.c, "max_connections")->note);
    assert_bound_fits(&f.c);
    done(&f);
}

static void test_memory_defaults_derived_from_target(void **state)
{
    struct fixture f;
    /* 8 GiB - 192 MiB (ingress + retained heap + caches) for connections:
     * 256 of them at 64 + 16 MiB do not fit, so the window ceiling drops to
     * the power of two that does (31.25 MiB a connection - 16 MiB unacked ->
     * 8 MiB), and max_connections is what then fits: 7.8125 GiB / 24 MiB. */
    assert_int_equal(load_target(&f, 8 * GiB, NULL, 0), 0);
    assert_int_equal(f.c.quic_conn_recv_window_max, 8 * MiB);
    assert_int_equal(f.c.quic_conn_recv_window, 8 * MiB);
    assert_int_equal(f.c.quic_unacked_send_bytes, 16 * MiB);
    assert_int_equal(f.c.max_connections, (8 * GiB - 192 * MiB) / (24 * MiB));
    assert_string_equal(fx_config_origin_of(&f.c, "max_connections")->note,
                        "derived from memory_limit_bytes");
    assert_int_equal(fx_config_origin_of(&f.c, "max_connections")->from, FX_CONFIG_FROM_DEFAULT);
    assert_bound_fits(&f.c);
    char line[512];
    fx_config_format_bound(&f.c, line, sizeof(line));
    assert_contains(line, "333 connections x (8 MiB receive window + 16 MiB unacked)");
    assert_contains(line, "+ 64 MiB caches +");
    assert_contains(line, "given by the caller");
    done(&f);
}

/* The benchmarks open 11 clients x (4 publish + 8 event) connections from
 * one address: the derived defaults admit them on a 4 GiB target. */
static void test_memory_defaults_fit_benchmark_pools(void **state)
{
    struct fixture f;
    assert_int_equal(load_target(&f, 4 * GiB, NULL, 0), 0);
    assert_true(f.c.max_connections >= 11 * 12);
    assert_true(f.c.quic_conn_recv_window_max >= MiB);
    assert_true(f.c.quic_conn_recv_window <= f.c.quic_conn_recv_window_max);
    assert_bound_fits(&f.c);
    done(&f);
}

static void test_explicit_setting_over_memory_target_refused(void **state)
{
    struct fixture f;
    const char *sets[] = {"max_connections=4096"};
    assert_int_equal(load_target(&f, 8 * GiB, sets, 1), FX_ECONFIG);
    assert_contains(f.d.error, "exceeds");
    assert_contains(f.d.error, "max_connections (flag --set)");
    assert_contains(f.d.error, "memory_limit_bytes");
    done(&f);
    /* The same key within the target loads, with the default windows. */
    const char *fits[] = {"max_connections=90"};
    assert_int_equal(load_target(&f, 8 * GiB, fits, 1), 0);
    assert_int_equal(f.c.max_connections, 90);
    assert_int_equal(f.c.quic_conn_recv_window_max, 64 * MiB);
    assert_bound_fits(&f.c);
    done(&f);
    /* An explicit target below what explicit settings need is refused. */
    const char *small[] = {"memory_limit_bytes=1GiB", "pub_inflight_bytes=2GiB"};
    assert_int_equal(load_target(&f, BIG_TARGET, small, 2), FX_ECONFIG);
    assert_contains(f.d.error, "pub_inflight_bytes");
    done(&f);
}

static void test_memory_limit_bytes_overrides_host(void **state)
{
    struct fixture f;
    const char *sets[] = {"memory_limit_bytes=2GiB"};
    assert_int_equal(load_target(&f, BIG_TARGET, sets, 1), 0);
    assert_int_equal(f.c.memory_limit_bytes, 2 * GiB);
    assert_true(f.c.max_connections < 4096);
    assert_bound_fits(&f.c);
    done(&f);
    char *env[] = {"FELIX_MEMORY_LIMIT_BYTES=512MiB", NULL};
    assert_int_equal(load(&f, NULL, env, NULL, 0), 0);
    assert_int_equal(f.c.memory_limit_bytes, 512 * MiB);
    assert_bound_fits(&f.c);
    done(&f);
}

static void test_defaults_on_tiny_host_warn_not_refuse(void **state)
{
    struct fixture f;
    assert_int_equal(load_target(&f, 64 * MiB, NULL, 0), 0);
    assert_int_equal(f.c.max_connections, 1);
    assert_true(any_warning_contains(&f.d, "do not fit"));
    done(&f);
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    assert_int_equal(fputs(text, fp) >= 0, 1);
    fclose(fp);
}

static void test_host_memory_reads_cgroup_v2_max(void **state)
{
    char dir[] = "/tmp/fx_test_cgroup_XXXXXX", p[256];
    assert_non_null(mkdtemp(dir));
    snprintf(p, sizeof(p), "%s/cgroup", dir);
    write_file(p, "1:name=systemd:/x\n0::/a/b\n");
    snprintf(p, sizeof(p), "%s/a", dir);
    assert_int_equal(mkdir(p, 0700), 0);
    snprintf(p, sizeof(p), "%s/a/b", dir);
    assert_int_equal(mkdir(p, 0700), 0);
    char proc[256], root[256];
    snprintf(proc, sizeof(proc), "%s/cgroup", dir);
    snprintf(root, sizeof(root), "%s", dir);
    const char *src = NULL;
    /* No memory.max anywhere: half of RAM. */
    assert_int_equal(fx_config_host_memory(proc, root, 16 * GiB, &src), 8 * GiB);
    assert_string_equal(src, "half of RAM");
    /* "max" in the own cgroup, a number in the parent: the parent binds. */
    snprintf(p, sizeof(p), "%s/a/b/memory.max", dir);
    write_file(p, "max\n");
    snprintf(p, sizeof(p), "%s/a/memory.max", dir);
    write_file(p, "3221225472\n");
    assert_int_equal(fx_config_host_memory(proc, root, 16 * GiB, &src), 3 * GiB);
    assert_string_equal(src, "cgroup memory.max");
    /* The smaller of the two when both are set. */
    snprintf(p, sizeof(p), "%s/a/b/memory.max", dir);
    write_file(p, "1073741824\n");
    assert_int_equal(fx_config_host_memory(proc, root, 16 * GiB, &src), 1 * GiB);
    /* A limit above RAM does not raise the target past RAM / 2. */
    assert_int_equal(fx_config_host_memory(proc, root, 1 * GiB, &src), GiB / 2);
    assert_string_equal(src, "half of RAM");
    /* No v2 line (cgroup v1 only): half of RAM. */
    write_file(proc, "4:memory:/x\n");
    assert_int_equal(fx_config_host_memory(proc, root, 16 * GiB, &src), 8 * GiB);
    snprintf(p, sizeof(p), "rm -rf %s", dir);
    assert_int_equal(system(p), 0);
}

/* ---- admin endpoint keys ---------------------------------------------- */

static void test_probe_bind_follows_metrics_bind(void **state)
{
    struct fixture f;
    assert_int_equal(load(&f, NULL, NULL, NULL, 0), 0);
    assert_string_equal(f.c.probe_bind, "127.0.0.1:8081");
    assert_non_null(fx_config_origin_of(&f.c, "probe_bind")->note);
    done(&f);
    const char *zero[] = {"metrics_bind=[::1]:0"};
    assert_int_equal(load(&f, NULL, NULL, zero, 1), 0);
    assert_string_equal(f.c.probe_bind, "[::1]:0");
    done(&f);
    const char *off[] = {"probe_bind="};
    assert_int_equal(load(&f, NULL, NULL, off, 1), 0);
    assert_string_equal(f.c.probe_bind, "");
    done(&f);
    char *env[] = {"FELIX_PROBE_BIND=0.0.0.0:9000", NULL};
    assert_int_equal(load(&f, NULL, env, NULL, 0), 0);
    assert_string_equal(f.c.probe_bind, "0.0.0.0:9000");
    done(&f);
    const char *bad[] = {"probe_bind=nowhere"};
    const char *want[] = {"probe_bind", "nowhere", NULL};
    expect_error(NULL, NULL, bad, 1, want);
    const char *top[] = {"metrics_bind=127.0.0.1:65535"};
    const char *want_top[] = {"probe_bind", "65535", NULL};
    expect_error(NULL, NULL, top, 1, want_top);
}

static void test_cluster_keys_need_an_id_and_advertise_and_a_fixed_internal_port(void **state)
{
    (void)state;
    const char *no_id[] = {"cluster_etcd_endpoints=http://127.0.0.1:2379"};
    const char *want_id[] = {"cluster_node_id must name this broker", NULL};
    expect_error(NULL, NULL, no_id, 1, want_id);
    const char *no_adv[] = {"cluster_etcd_endpoints=http://127.0.0.1:2379", "cluster_node_id=n1"};
    const char *want_adv[] = {"cluster_advertise must give", NULL};
    expect_error(NULL, NULL, no_adv, 2, want_adv);
    const char *zero[] = {"cluster_etcd_endpoints=http://127.0.0.1:2379", "cluster_node_id=n1",
                          "cluster_advertise=127.0.0.1:5000",
                          "cluster_internal_bind=127.0.0.1:0"};
    const char *want_zero[] = {"cluster_internal_bind", "give a fixed port", NULL};
    expect_error(NULL, NULL, zero, 4, want_zero);
    const char *same[] = {"cluster_etcd_endpoints=http://127.0.0.1:2379", "cluster_node_id=n1",
                          "cluster_advertise=127.0.0.1:5000", "quic_bind=127.0.0.1:5000",
                          "cluster_internal_bind=127.0.0.1:5000"};
    const char *want_same[] = {"cluster_internal_bind", "is quic_bind", NULL};
    expect_error(NULL, NULL, same, 5, want_same);
    const char *bad[] = {"cluster_etcd_endpoints=http://127.0.0.1:2379", "cluster_node_id=n1",
                         "cluster_advertise=127.0.0.1:5000", "cluster_internal_bind=here"};
    const char *want_bad[] = {"cluster_internal_bind = \"here\"", NULL};
    expect_error(NULL, NULL, bad, 4, want_bad);
    struct fixture f;
    const char *ok[] = {"cluster_etcd_endpoints=http://127.0.0.1:2379", "cluster_node_id=n1",
                        "cluster_advertise=10.0.0.5:5000", "cluster_internal_bind=0.0.0.0:5100"};
    assert_int_equal(load(&f, NULL, NULL, ok, 4), 0);
    assert_string_equal(f.c.cluster_internal_bind, "0.0.0.0:5100");
    done(&f);
}

static void test_admin_tls_files_set_together(void **state)
{
    const char *half[] = {"admin_tls_cert_file=/etc/felix/admin.pem"};
    const char *want[] = {"admin_tls_cert_file and admin_tls_key_file",
                          "admin_tls_key_file is empty", NULL};
    expect_error(NULL, NULL, half, 1, want);
    struct fixture f;
    char *env[] = {"FELIX_ADMIN_TLS_CERT_FILE=/c.pem", "FELIX_ADMIN_TLS_KEY_FILE=/k.pem", NULL};
    assert_int_equal(load(&f, NULL, env, NULL, 0), 0);
    assert_string_equal(f.c.admin_tls_cert_file, "/c.pem");
    assert_string_equal(f.c.admin_tls_key_file, "/k.pem");
    done(&f);
}

static void test_admin_allowed_hosts_loaded(void **state)
{
    struct fixture f;
    assert_int_equal(load(&f, "admin_allowed_hosts: felix.example, ops.example\n", NULL, NULL, 0),
                     0);
    assert_string_equal(f.c.admin_allowed_hosts, "felix.example, ops.example");
    done(&f);
    char *env[] = {"FELIX_ADMIN_ALLOWED_HOSTS=a.example", NULL};
    assert_int_equal(load(&f, NULL, env, NULL, 0), 0);
    assert_string_equal(f.c.admin_allowed_hosts, "a.example");
    done(&f);
}

/* The durable quotas: documented defaults, the per-stream share of the
 * publish budget following pub_inflight_bytes, and values that cannot work
 * refused naming the keys. */
static void test_cache_keys_defaults_and_refusals(void **state)
{
    (void)state;
    struct fixture f;
    assert_int_equal(load(&f, NULL, NULL, NULL, 0), 0);
    assert_int_equal(f.c.cache_max_bytes, 64 * MiB);
    assert_int_equal(f.c.cache_tenant_max_bytes, 0);
    assert_int_equal(f.c.cache_max_value_bytes, MiB);
    assert_int_equal(f.c.cache_max_key_bytes, 1024);
    done(&f);
    char *env[] = {"FELIX_CACHE_MAX_BYTES=1GiB", "FELIX_CACHE_TENANT_MAX_BYTES=256MiB",
                   "FELIX_CACHE_MAX_VALUE_BYTES=4MiB", "FELIX_CACHE_MAX_KEY_BYTES=200", NULL};
    assert_int_equal(load(&f, NULL, env, NULL, 0), 0);
    assert_int_equal(f.c.cache_max_bytes, GiB);
    assert_int_equal(f.c.cache_tenant_max_bytes, 256 * MiB);
    assert_int_equal(f.c.cache_max_value_bytes, 4 * MiB);
    assert_int_equal(f.c.cache_max_key_bytes, 200);
    done(&f);
    /* A default value bound follows a small share; an explicit one is refused. */
    const char *small[] = {"cache_max_bytes=1MiB", "workers=2"};
    assert_int_equal(load(&f, NULL, NULL, small, 2), 0);
    assert_int_equal(f.c.cache_max_value_bytes, MiB / 2 - 1024 - 104);
    done(&f);
    const char *big[] = {"cache_max_bytes=1MiB", "workers=2", "cache_max_value_bytes=1MiB"};
    const char *w1[] = {"cache_max_value_bytes = 1MiB", "cache_max_bytes = 1MiB",
                        "could never be stored", NULL};
    expect_error(NULL, NULL, big, 3, w1);
    const char *tiny[] = {"cache_max_bytes=512KiB"};
    const char *w2[] = {"cache_max_bytes", NULL};
    expect_error(NULL, NULL, tiny, 1, w2);
    const char *key[] = {"cache_max_key_bytes=65536"};
    const char *w3[] = {"cache_max_key_bytes", NULL};
    expect_error(NULL, NULL, key, 1, w3);
    const char *zero[] = {"cache_max_value_bytes=0"};
    const char *w4[] = {"cache_max_value_bytes", NULL};
    expect_error(NULL, NULL, zero, 1, w4);
}

static void test_durable_quota_keys_defaults_and_refusals(void **state)
{
    (void)state;
    struct fixture f;
    assert_int_equal(load(&f, NULL, NULL, NULL, 0), 0);
    assert_int_equal(f.c.tenant_durable_streams_max, 256);
    assert_int_equal(f.c.tenant_durable_bytes_max, 64 * GiB);
    assert_int_equal(f.c.durable_bytes_max, 0);
    assert_int_equal(f.c.durable_max_unsynced_bytes, 8 * MiB); /* pub_inflight_bytes / 8 */
    done(&f);
    const char *share[] = {"pub_inflight_bytes=128MiB", "max_streams_per_tenant=10"};
    assert_int_equal(load(&f, NULL, NULL, share, 2), 0);
    assert_int_equal(f.c.durable_max_unsynced_bytes, 16 * MiB);
    assert_int_equal(f.c.tenant_durable_streams_max, 10); /* the default is lowered */
    done(&f);
    char *env[] = {"FELIX_TENANT_DURABLE_STREAMS_MAX=3", "FELIX_TENANT_DURABLE_BYTES_MAX=1GiB",
                   "FELIX_DURABLE_BYTES_MAX=2GiB", NULL};
    assert_int_equal(load(&f, NULL, env, NULL, 0), 0);
    assert_int_equal(f.c.tenant_durable_streams_max, 3);
    assert_int_equal(f.c.tenant_durable_bytes_max, GiB);
    assert_int_equal(f.c.durable_bytes_max, 2 * GiB);
    done(&f);

    const char *big[] = {"durable_max_unsynced_bytes=128MiB"};
    const char *w1[] = {"durable_max_unsynced_bytes = 128MiB", "pub_inflight_bytes = 64MiB",
                        "whole publish budget", NULL};
    expect_error(NULL, NULL, big, 1, w1);
    const char *small[] = {"tenant_durable_bytes_max=300MiB"};
    const char *w2[] = {"tenant_durable_bytes_max = 300MiB", "durable_segment_bytes = 256MiB",
                        "less than twice", NULL};
    expect_error(NULL, NULL, small, 1, w2);
    const char *bsmall[] = {"durable_bytes_max=1MiB", "durable_segment_bytes=1MiB"};
    const char *w3[] = {"durable_bytes_max = 1MiB", "less than twice", NULL};
    expect_error(NULL, NULL, bsmall, 2, w3);
    const char *many[] = {"tenant_durable_streams_max=2000"};
    const char *w4[] = {"tenant_durable_streams_max = 2000", "max_streams_per_tenant = 1024", NULL};
    expect_error(NULL, NULL, many, 1, w4);
    const char *neg[] = {"tenant_durable_bytes_max=-5"};
    const char *w5[] = {"tenant_durable_bytes_max", NULL};
    expect_error(NULL, NULL, neg, 1, w5);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_defaults_match_documented_values),
    cmocka_unit_test(test_yaml_overrides_default),
    cmocka_unit_test(test_env_overrides_yaml),
    cmocka_unit_test(test_flag_overrides_env),
    cmocka_unit_test(test_print_config_names_sources),
    cmocka_unit_test(test_print_config_output_reloads),
    cmocka_unit_test(test_unknown_key_in_file_rejected_with_line),
    cmocka_unit_test(test_unknown_key_in_flag_rejected),
    cmocka_unit_test(test_bad_policy_rejected_naming_key_and_source),
    cmocka_unit_test(test_zero_capacity_rejected),
    cmocka_unit_test(test_preauth_max_bytes_default_matches_broker_and_minimum_enforced),
    cmocka_unit_test(test_negative_value_rejected),
    cmocka_unit_test(test_size_units_parsed),
    cmocka_unit_test(test_size_overflow_rejected),
    cmocka_unit_test(test_duration_units_parsed),
    cmocka_unit_test(test_ms_suffix_key_plain_number),
    cmocka_unit_test(test_env_bool_rejects_garbage),
    cmocka_unit_test(test_budget_smaller_than_frame_rejected),
    cmocka_unit_test(test_conn_budget_above_global_rejected),
    cmocka_unit_test(test_lanes_above_max_rejected),
    cmocka_unit_test(test_loopback_mtu_zero_or_a_quic_datagram_size),
    cmocka_unit_test(test_core_shards_replace_workers),
    cmocka_unit_test(test_workers_zero_rejected_auto_accepted),
    cmocka_unit_test(test_cache_window_aliases_set_quic_windows),
    cmocka_unit_test(test_controlplane_key_warns_but_loads),
    cmocka_unit_test(test_ignored_original_key_rejected),
    cmocka_unit_test(test_initial_cwnd_refused_as_unsupported),
    cmocka_unit_test(test_disable_timings_env_warns_and_loads),
    cmocka_unit_test(test_env_alias_names_accepted),
    cmocka_unit_test(test_env_alias_and_canonical_both_set_rejected),
    cmocka_unit_test(test_unknown_felix_env_warns),
    cmocka_unit_test(test_streams_list_parsed),
    cmocka_unit_test(test_groups_list_parsed),
    cmocka_unit_test(test_groups_per_stream_rule),
    cmocka_unit_test(test_group_backoff_list_parsed_and_bad_lists_refused),
    cmocka_unit_test(test_retention_keys_defaults_and_tenant_rule),
    cmocka_unit_test(test_group_hold_timeout_defaults_to_60s_and_0_means_never),
    cmocka_unit_test(test_yaml_syntax_error_reports_line),
    cmocka_unit_test(test_wrong_yaml_type_rejected),
    cmocka_unit_test(test_duplicate_key_rejected),
    cmocka_unit_test(test_config_path_from_env),
    cmocka_unit_test(test_tls_files_must_come_together),
    cmocka_unit_test(test_dev_config_loads),
    cmocka_unit_test(test_jwt_mode_requires_jwks_file),
    cmocka_unit_test(test_jwt_keys_from_file_env_and_flags),
    cmocka_unit_test(test_jwt_defaults_match_auth_module),
    cmocka_unit_test(test_jwt_leeway_rejects_fractions_and_empty_issuer),
    cmocka_unit_test(test_jwks_file_without_jwt_warns),
    cmocka_unit_test(test_metrics_stream_labels_default_off_validated_and_warned_off_loopback),
    cmocka_unit_test(test_docs_key_table_matches_registry),
    cmocka_unit_test(test_durable_keys_default_and_env_names_of_the_original),
    cmocka_unit_test(test_durable_flush_pipeline_is_off_by_default_and_can_be_switched_on),
    cmocka_unit_test(test_durable_bad_values_are_refused),
    cmocka_unit_test(test_durable_quota_keys_defaults_and_refusals),
    cmocka_unit_test(test_cache_keys_defaults_and_refusals),
    cmocka_unit_test(test_unknown_durable_key_warns_naming_the_storage),
    cmocka_unit_test(test_probe_bind_follows_metrics_bind),
    cmocka_unit_test(test_cluster_keys_need_an_id_and_advertise_and_a_fixed_internal_port),
    cmocka_unit_test(test_admin_tls_files_set_together),
    cmocka_unit_test(test_admin_allowed_hosts_loaded),
    cmocka_unit_test(test_quic_bind_defaults_to_loopback_under_auth_none),
    cmocka_unit_test(test_quic_bind_default_listens_everywhere_under_jwt),
    cmocka_unit_test(test_non_loopback_bind_without_auth_refused),
    cmocka_unit_test(test_allow_unauthenticated_accepts_non_loopback_bind),
    cmocka_unit_test(test_loopback_addresses_recognised),
    cmocka_unit_test(test_memory_defaults_kept_on_large_host),
    cmocka_unit_test(test_memory_defaults_derived_from_target),
    cmocka_unit_test(test_memory_defaults_fit_benchmark_pools),
    cmocka_unit_test(test_explicit_setting_over_memory_target_refused),
    cmocka_unit_test(test_memory_limit_bytes_overrides_host),
    cmocka_unit_test(test_defaults_on_tiny_host_warn_not_refuse),
    cmocka_unit_test(test_host_memory_reads_cgroup_v2_max),
};

FX_TEST_MAIN(tests)
