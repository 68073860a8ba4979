/* Unit tests for the broker configuration (src/server/config.c): defaults,
 * precedence (defaults < file < env < flags), units, rejection of bad values
 * with the key and source named, aliases, warnings and the cross-key rules.
 * YAML fixtures are written to mkstemp files and removed by each case. */
/* fx-test-libs: fx_server fx_wire fx_base */
#include "fx_test.h"

#include <errno.h>
#include <unistd.h>

#include "felix/error.h"
#include "server/config.h"

#define MiB (1024ull * 1024ull)
#define MS 1000000ull
#define SEC (1000ull * MS)
#define GiB (1024ull * MiB)

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
    fx_config_src src = {.path = yaml ? f->path : NULL, .envp = envp, .sets = sets, .nsets = nsets};
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
    assert_string_equal(c.quic_bind, "0.0.0.0:5000");
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
    const char *want[] = {":1:1: disable_timings is not supported", "remove it", NULL};
    expect_error("disable_timings: true\n", NULL, NULL, 0, want);
    char *env[] = {"FELIX_SUB_STREAMS_PER_CONN=4", NULL};
    const char *want_env[] = {"env FELIX_SUB_STREAMS_PER_CONN is not supported", NULL};
    expect_error(NULL, env, NULL, 0, want_env);
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

/* docs/configuration.md embeds the registry's tables between two markers;
 * they must equal what fx_config_print_markdown() writes today. */
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
    cmocka_unit_test(test_env_alias_names_accepted),
    cmocka_unit_test(test_env_alias_and_canonical_both_set_rejected),
    cmocka_unit_test(test_unknown_felix_env_warns),
    cmocka_unit_test(test_streams_list_parsed),
    cmocka_unit_test(test_retention_keys_defaults_and_tenant_rule),
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
    cmocka_unit_test(test_docs_key_table_matches_registry),
};

FX_TEST_MAIN(tests)
