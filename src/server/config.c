/* Broker configuration: the key registry, value parsers (sizes, durations,
 * policies, addresses), the three loaders (YAML via libyaml's document API,
 * environment, --set flags), the cross-key rules and the printers.
 * Main thread only. Every key lives in one static table; defaults are written
 * there as text and parsed by the same code as user input. */
#include "server/config.h"

#include <arpa/inet.h>
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "felix/error.h"

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)
#define TiB (1024ull * GiB)
#define US 1000ull
#define MS (1000ull * US)
#define SEC (1000ull * MS)
#define HOUR (3600ull * SEC)

_Static_assert(sizeof(fx_config_policy) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(fx_config_lane_shard) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(fx_config_sub_stream_mode) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(fx_config_log_level) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(fx_config_auth_mode) == sizeof(int), "enum fields are stored as int");

/* ---- the registry ------------------------------------------------------ */

enum ktype {
    T_BOOL,
    T_U32,
    T_WORKERS, /* "auto" or a positive count */
    T_SIZE,
    T_DUR,
    T_ENUM,
    T_STR,
    T_ADDR,
    T_STREAMS,
    T_WARN,   /* a feature Felix-C does not have: warn, load anyway */
    T_REJECT, /* meaningless here: refuse to start */
};

struct enum_def {
    const char *names[5]; /* index = enum value */
    const char *expect;   /* "block, drop_new or drop_old" */
    const char *refused;  /* a value the original knows that we refuse, or NULL */
    const char *refused_why;
};

struct key {
    const char *name;
    const char *alias; /* a second YAML name, or NULL */
    const char *env[3];
    enum ktype type;
    const char *section; /* set on the first key of a section */
    size_t off, size;
    const char *def;
    uint64_t min, max; /* numbers: value bounds; strings: minimum length in |min| */
    const struct enum_def *en;
    const char *help; /* T_WARN / T_REJECT: the reason given to the user */
};

#define FIELD(f) .off = offsetof(fx_config, f), .size = sizeof(((fx_config *)0)->f)

static const struct enum_def policy_enum = {
    {"block", "drop_new", "drop_old"}, "block, drop_new or drop_old", NULL, NULL};
static const struct enum_def lane_shard_enum = {
    {"auto", "subscriber_id_hash", "connection_id_hash", "round_robin_pin"},
    "auto, subscriber_id_hash, connection_id_hash or round_robin_pin",
    NULL,
    NULL};
static const struct enum_def sub_stream_enum = {
    {"per_subscriber"},
    "per_subscriber",
    "hashed_pool",
    "hashed_pool is not implemented (the original fell back to per_subscriber)"};
static const struct enum_def log_level_enum = {
    {"error", "warn", "info", "debug", "trace"}, "error, warn, info, debug or trace", NULL, NULL};
static const struct enum_def auth_enum = {
    {"none"}, "none", "jwt", "jwt authentication is not implemented yet; use none"};

/* clang-format off */
static const struct key keys[] = {
    /* listeners and security */
    {.name = "quic_bind", .env = {"FELIX_QUIC_BIND"}, .type = T_ADDR,
     .section = "listeners and security", FIELD(quic_bind), .def = "0.0.0.0:5000",
     .help = "UDP address of the QUIC listener; port 0 picks a free port"},
    {.name = "metrics_bind", .alias = "admin_bind",
     .env = {"FELIX_BROKER_METRICS_BIND", "FELIX_METRICS_BIND"}, .type = T_ADDR,
     FIELD(metrics_bind), .def = "127.0.0.1:8080",
     .help = "admin HTTP address: /metrics, /live, /ready and the stream admin API"},
    {.name = "tls_cert_file", .env = {"FELIX_TLS_CERT_FILE"}, .type = T_STR, FIELD(tls_cert_file),
     .def = "",
     .help = "PEM certificate chain; empty = a fresh self-signed certificate for localhost"},
    {.name = "tls_key_file", .env = {"FELIX_TLS_KEY_FILE"}, .type = T_STR, FIELD(tls_key_file),
     .def = "", .help = "PEM private key of tls_cert_file"},
    {.name = "auth_mode", .env = {"FELIX_AUTH_MODE"}, .type = T_ENUM, FIELD(auth_mode),
     .def = "none", .en = &auth_enum, .help = "client authentication; none accepts any token"},
    {.name = "state_dir", .env = {"FELIX_STATE_DIR"}, .type = T_STR, FIELD(state_dir),
     .def = "/var/lib/felix", .min = 1,
     .help = "runtime directory (bound ports, pid); created at start"},
    {.name = "log_level", .env = {"FELIX_LOG_LEVEL"}, .type = T_ENUM, FIELD(log_level),
     .def = "info", .en = &log_level_enum, .help = "least severe message logged"},
    /* streams */
    {.name = "auto_create_streams", .env = {"FELIX_AUTO_CREATE_STREAMS"}, .type = T_BOOL,
     .section = "streams", FIELD(auto_create_streams), .def = "true",
     .help = "create a stream on its first publish or subscribe"},
    {.name = "max_streams_per_tenant", .env = {"FELIX_MAX_STREAMS_PER_TENANT"}, .type = T_U32,
     FIELD(max_streams_per_tenant), .def = "1024", .min = 1, .max = 1u << 20,
     .help = "streams one tenant may hold"},
    {.name = "streams", .env = {"FELIX_STREAMS"}, .type = T_STREAMS, .def = "",
     .help = "streams created at start: tenant/namespace/stream strings"},
    {.name = "log_capacity", .env = {"FELIX_LOG_CAPACITY"}, .type = T_U32, FIELD(log_capacity),
     .def = "1024", .min = 1, .max = 1u << 24, .help = "messages kept per stream for replay"},
    {.name = "log_capacity_bytes", .env = {"FELIX_LOG_CAPACITY_BYTES"}, .type = T_SIZE,
     FIELD(log_capacity_bytes), .def = "64MiB", .min = 1, .max = 64 * GiB,
     .help = "payload bytes kept per stream; the older end is evicted first"},
    /* threads */
    {.name = "workers", .alias = "pub_workers_per_conn",
     .env = {"FELIX_WORKERS", "FELIX_BROKER_PUB_WORKERS_PER_CONN"}, .type = T_WORKERS,
     .section = "threads", FIELD(workers), .def = "auto", .min = 1, .max = 1024,
     .help = "worker loops (streams are spread over them); auto = one per online CPU"},
    {.name = "core_shards", .env = {"FELIX_CORE_SHARDS"}, .type = T_U32, FIELD(core_shards),
     .def = "0", .min = 0, .max = 1024,
     .help = "N > 0 runs N CPU-pinned workers instead of workers"},
    {.name = "io_threads", .env = {"FELIX_IO_THREADS", "FELIX_IO_RUNTIME_THREADS"}, .type = T_U32,
     FIELD(io_threads), .def = "0", .min = 0, .max = 256,
     .help = "separate QUIC I/O loops; 0 runs QUIC on the worker loops"},
    /* connections and QUIC */
    {.name = "max_connections", .env = {"FELIX_MAX_CONNECTIONS"}, .type = T_U32,
     .section = "connections and QUIC", FIELD(max_connections), .def = "4096", .min = 1,
     .max = 1u << 20, .help = "QUIC connections accepted at once"},
    {.name = "idle_timeout_ms", .env = {"FELIX_IDLE_TIMEOUT_MS"}, .type = T_DUR,
     FIELD(idle_timeout_ns), .def = "30s", .min = 100 * MS, .max = HOUR,
     .help = "a connection silent this long is closed"},
    {.name = "keepalive_interval_ms", .env = {"FELIX_KEEPALIVE_INTERVAL_MS"}, .type = T_DUR,
     FIELD(keepalive_interval_ns), .def = "10s", .min = 0, .max = HOUR,
     .help = "PING a quiet connection this often; 0 = off"},
    {.name = "quic_stream_recv_window", .alias = "cache_stream_recv_window",
     .env = {"FELIX_QUIC_STREAM_RECV_WINDOW", "FELIX_CACHE_STREAM_RECV_WINDOW"}, .type = T_SIZE,
     FIELD(quic_stream_recv_window), .def = "1MiB", .min = 16 * KiB, .max = GiB,
     .help = "initial receive window per stream"},
    {.name = "quic_conn_recv_window", .alias = "cache_conn_recv_window",
     .env = {"FELIX_QUIC_CONN_RECV_WINDOW", "FELIX_CACHE_CONN_RECV_WINDOW"}, .type = T_SIZE,
     FIELD(quic_conn_recv_window), .def = "16MiB", .min = 16 * KiB, .max = 4 * GiB,
     .help = "initial receive window per connection"},
    {.name = "quic_stream_recv_window_max", .env = {"FELIX_QUIC_STREAM_RECV_WINDOW_MAX"},
     .type = T_SIZE, FIELD(quic_stream_recv_window_max), .def = "16MiB", .min = 16 * KiB,
     .max = GiB, .help = "auto-tuning ceiling of the stream receive window"},
    {.name = "quic_conn_recv_window_max", .env = {"FELIX_QUIC_CONN_RECV_WINDOW_MAX"},
     .type = T_SIZE, FIELD(quic_conn_recv_window_max), .def = "64MiB", .min = 16 * KiB,
     .max = 4 * GiB, .help = "auto-tuning ceiling of the connection receive window"},
    {.name = "quic_unacked_send_bytes", .alias = "cache_send_window",
     .env = {"FELIX_QUIC_UNACKED_SEND_BYTES", "FELIX_CACHE_SEND_WINDOW"}, .type = T_SIZE,
     FIELD(quic_unacked_send_bytes), .def = "16MiB", .min = 64 * KiB, .max = 4 * GiB,
     .help = "bytes sent but not yet acknowledged, per connection"},
    {.name = "max_frame_bytes", .env = {"FELIX_MAX_FRAME_BYTES"}, .type = T_SIZE,
     FIELD(max_frame_bytes), .def = "16MiB", .min = KiB, .max = GiB,
     .help = "largest inbound frame; larger ones close the stream"},
    /* UDP transport */
    {.name = "initial_mtu", .env = {"FELIX_INITIAL_MTU"}, .type = T_SIZE,
     .section = "UDP transport", FIELD(initial_mtu), .def = "1200", .min = 1200, .max = 65527,
     .help = "first datagram size"},
    {.name = "mtu_upper_bound", .env = {"FELIX_MTU_UPPER_BOUND"}, .type = T_SIZE,
     FIELD(mtu_upper_bound), .def = "16384", .min = 1200, .max = 65527,
     .help = "largest datagram path MTU discovery may reach"},
    {.name = "max_udp_payload", .env = {"FELIX_MAX_UDP_PAYLOAD"}, .type = T_SIZE,
     FIELD(max_udp_payload), .def = "65527", .min = 1200, .max = 65527,
     .help = "max_udp_payload_size transport parameter"},
    {.name = "udp_send_buffer", .env = {"FELIX_UDP_SEND_BUFFER"}, .type = T_SIZE,
     FIELD(udp_send_buffer), .def = "8MiB", .min = 64 * KiB, .max = GiB,
     .help = "SO_SNDBUF asked for; the kernel may grant less (logged)"},
    {.name = "udp_recv_buffer", .env = {"FELIX_UDP_RECV_BUFFER"}, .type = T_SIZE,
     FIELD(udp_recv_buffer), .def = "8MiB", .min = 64 * KiB, .max = GiB,
     .help = "SO_RCVBUF asked for; the kernel may grant less (logged)"},
    {.name = "initial_cwnd", .env = {"FELIX_INITIAL_CWND"}, .type = T_SIZE, FIELD(initial_cwnd),
     .def = "0", .min = 0, .max = GiB, .help = "initial congestion window; 0 = ngtcp2's"},
    {.name = "conn_stats_ms", .env = {"FELIX_CONN_STATS_MS"}, .type = T_DUR, FIELD(conn_stats_ns),
     .def = "0", .min = 0, .max = HOUR,
     .help = "log each connection's path statistics this often; 0 = off"},
    /* publish pipeline */
    {.name = "ack_on_commit", .env = {"FELIX_ACK_ON_COMMIT"}, .type = T_BOOL,
     .section = "publish pipeline", FIELD(ack_on_commit), .def = "false",
     .help = "ack a publish after append and fanout, not after enqueue"},
    {.name = "publish_queue_wait_timeout_ms", .env = {"FELIX_PUBLISH_QUEUE_WAIT_MS"}, .type = T_DUR,
     FIELD(publish_queue_wait_timeout_ns), .def = "2s", .min = MS, .max = HOUR,
     .help = "how long an acked publish may wait for budget and queue space"},
    {.name = "ack_wait_timeout_ms", .env = {"FELIX_ACK_WAIT_TIMEOUT_MS"}, .type = T_DUR,
     FIELD(ack_wait_timeout_ns), .def = "2s", .min = MS, .max = HOUR,
     .help = "how long a commit ack is awaited"},
    {.name = "pub_queue_depth", .env = {"FELIX_BROKER_PUB_QUEUE_DEPTH"}, .type = T_U32,
     FIELD(pub_queue_depth), .def = "64", .min = 1, .max = 1u << 20,
     .help = "publish jobs queued per worker"},
    {.name = "pub_inflight_bytes", .env = {"FELIX_BROKER_PUBLISH_INFLIGHT_BYTES"}, .type = T_SIZE,
     FIELD(pub_inflight_bytes), .def = "64MiB", .min = 1, .max = 64 * GiB,
     .help = "publish bytes admitted and not yet processed, whole broker"},
    {.name = "pub_conn_inflight_bytes", .env = {"FELIX_BROKER_PUBLISH_CONN_INFLIGHT_BYTES"},
     .type = T_SIZE, FIELD(pub_conn_inflight_bytes), .def = "32MiB", .min = 1, .max = 64 * GiB,
     .help = "one connection's share of pub_inflight_bytes"},
    {.name = "pub_ingress_wait", .env = {"FELIX_PUB_INGRESS_WAIT"}, .type = T_BOOL,
     FIELD(pub_ingress_wait), .def = "false",
     .help = "unacked publishes wait (stop granting credit) instead of being dropped"},
    /* subscribe pipeline */
    {.name = "subscriber_queue_capacity",
     .env = {"FELIX_SUBSCRIBER_QUEUE_CAPACITY", "FELIX_SUB_QUEUE_CAPACITY"}, .type = T_U32,
     .section = "subscribe pipeline", FIELD(subscriber_queue_capacity), .def = "512", .min = 1,
     .max = 1u << 20, .help = "publish batches queued per subscriber"},
    {.name = "subscriber_queue_policy", .env = {"FELIX_SUB_QUEUE_POLICY"}, .type = T_ENUM,
     FIELD(subscriber_queue_policy), .def = "drop_new", .en = &policy_enum,
     .help = "what a full subscriber queue does"},
    {.name = "max_subscriptions_per_conn", .env = {"FELIX_MAX_SUBSCRIPTIONS_PER_CONN"},
     .type = T_U32, FIELD(max_subscriptions_per_conn), .def = "4096", .min = 1, .max = 1u << 20,
     .help = "subscriptions one connection may hold"},
    {.name = "subscriber_writer_lanes", .env = {"FELIX_SUB_EGRESS_LANES", "FELIX_SUB_WRITER_LANES"},
     .type = T_U32, FIELD(subscriber_writer_lanes), .def = "4", .min = 1, .max = 1024,
     .help = "writer lanes per connection"},
    {.name = "max_subscriber_writer_lanes", .env = {"FELIX_MAX_SUB_WRITER_LANES"}, .type = T_U32,
     FIELD(max_subscriber_writer_lanes), .def = "8", .min = 1, .max = 1024,
     .help = "upper bound of subscriber_writer_lanes"},
    {.name = "subscriber_lane_queue_depth",
     .env = {"FELIX_SUB_QUEUE_BOUND", "FELIX_SUB_LANE_QUEUE_DEPTH"}, .type = T_U32,
     FIELD(subscriber_lane_queue_depth), .def = "64", .min = 1, .max = 1u << 20,
     .help = "commands queued per writer lane"},
    {.name = "subscriber_lane_queue_policy",
     .env = {"FELIX_SUB_QUEUE_MODE", "FELIX_SUB_LANE_QUEUE_POLICY"}, .type = T_ENUM,
     FIELD(subscriber_lane_queue_policy), .def = "drop_new", .en = &policy_enum,
     .help = "what a full lane queue does (drop_old evicts that subscriber's oldest)"},
    {.name = "subscriber_lane_shard", .env = {"FELIX_SUB_LANE_SHARD"}, .type = T_ENUM,
     FIELD(subscriber_lane_shard), .def = "auto", .en = &lane_shard_enum,
     .help = "how a subscription picks its lane"},
    {.name = "subscriber_single_writer_per_conn", .env = {"FELIX_SUB_SINGLE_WRITER_PER_CONN"},
     .type = T_BOOL, FIELD(subscriber_single_writer_per_conn), .def = "false",
     .help = "one lane for all subscriptions of a connection"},
    {.name = "subscriber_flush_max_items", .env = {"FELIX_SUB_FLUSH_MAX_ITEMS"}, .type = T_U32,
     FIELD(subscriber_flush_max_items), .def = "16", .min = 1, .max = 65536,
     .help = "lane commands handed to the writer per wakeup"},
    {.name = "subscriber_flush_max_delay_us", .env = {"FELIX_SUB_FLUSH_MAX_DELAY_US"},
     .type = T_DUR, FIELD(subscriber_flush_max_delay_ns), .def = "50us", .min = 0, .max = SEC,
     .help = "longest a lane waits to fill a flush; 0 = flush at once"},
    {.name = "subscriber_max_bytes_per_write", .env = {"FELIX_SUB_MAX_BYTES_PER_WRITE"},
     .type = T_SIZE, FIELD(subscriber_max_bytes_per_write), .def = "64KiB", .min = 1, .max = GiB,
     .help = "bytes coalesced into one write per subscriber"},
    {.name = "sub_stream_mode", .env = {"FELIX_SUB_STREAM_MODE"}, .type = T_ENUM,
     FIELD(sub_stream_mode), .def = "per_subscriber", .en = &sub_stream_enum,
     .help = "event streams: one per subscription"},
    {.name = "event_batch_max_events", .env = {"FELIX_EVENT_BATCH_MAX_EVENTS"}, .type = T_U32,
     FIELD(event_batch_max_events), .def = "64", .min = 1, .max = 65536,
     .help = "events per event frame"},
    {.name = "event_batch_max_bytes", .env = {"FELIX_EVENT_BATCH_MAX_BYTES"}, .type = T_SIZE,
     FIELD(event_batch_max_bytes), .def = "64KiB", .min = 1, .max = GiB,
     .help = "payload bytes per event frame (a single larger event still goes alone)"},
    {.name = "event_batch_max_delay_us", .env = {"FELIX_EVENT_BATCH_MAX_DELAY_US"}, .type = T_DUR,
     FIELD(event_batch_max_delay_ns), .def = "250us", .min = 0, .max = SEC,
     .help = "longest a feeder waits to coalesce events; 0 = no wait"},
    {.name = "fanout_batch_size", .env = {"FELIX_FANOUT_BATCH"}, .type = T_U32,
     FIELD(fanout_batch_size), .def = "64", .min = 1, .max = 65536,
     .help = "events per frame is min(this, event_batch_max_events); 1 = single-event mode"},
    /* shutdown */
    {.name = "control_stream_drain_timeout_ms", .env = {"FELIX_CONTROL_STREAM_DRAIN_TIMEOUT_MS"},
     .type = T_DUR, .section = "shutdown", FIELD(control_stream_drain_timeout_ns), .def = "50ms",
     .min = MS, .max = HOUR, .help = "time a closing stream gets to flush its replies"},
    {.name = "shutdown_drain_timeout_ms", .env = {"FELIX_SHUTDOWN_DRAIN_TIMEOUT_MS"}, .type = T_DUR,
     FIELD(shutdown_drain_timeout_ns), .def = "25s", .min = MS, .max = HOUR,
     .help = "total drain budget after SIGTERM or SIGINT"},
    /* keys of the original that Felix-C warns about or refuses */
    {.name = "controlplane_url", .env = {"FELIX_CONTROLPLANE_URL"}, .type = T_WARN,
     .help = "Felix-C has no control plane; streams come from streams, auto_create_streams"
             " and the admin API, and auth_mode none needs no JWKS"},
    {.name = "controlplane_sync_interval_ms", .env = {"FELIX_CONTROLPLANE_SYNC_INTERVAL_MS"},
     .type = T_WARN, .help = "Felix-C has no control plane to poll"},
    {.name = "durable_storage_dir", .env = {"FELIX_DURABLE_STORAGE_DIR"}, .type = T_WARN,
     .help = "Felix-C has no durable storage; streams are in memory"},
    {.name = "mtu_black_hole_cooldown_ms", .env = {"FELIX_MTU_BLACK_HOLE_COOLDOWN_MS"},
     .type = T_WARN, .help = "a quinn setting; ngtcp2 has no black-hole cooldown knob"},
    {.name = "ack_freq_disable", .env = {"FELIX_ACK_FREQ_DISABLE"}, .type = T_WARN,
     .help = "ngtcp2 0.12 has no ACK frequency extension"},
    {.name = "ack_eliciting_threshold", .env = {"FELIX_ACK_ELICITING_THRESHOLD"}, .type = T_WARN,
     .help = "ngtcp2 0.12 has no ACK frequency extension"},
    {.name = "pump_colocate", .env = {"FELIX_PUMP_COLOCATE"}, .type = T_WARN,
     .help = "a quinn runtime setting; Felix-C always writes on the connection's own loop"},
    {.name = "disable_timings", .env = {"FELIX_DISABLE_TIMINGS"}, .type = T_REJECT,
     .help = "Felix-C has no per-request timing instrumentation to disable; remove it"},
    {.name = "sub_streams_per_conn", .env = {"FELIX_SUB_STREAMS_PER_CONN"}, .type = T_REJECT,
     .help = "every subscription has its own event stream (sub_stream_mode per_subscriber),"
             " so there is no stream pool to size; remove it"},
    {.name = "publish_chunk_bytes", .type = T_REJECT,
     .help = "a client key that even the original client never used; remove it"},
};
/* clang-format on */

#define NKEYS (sizeof(keys) / sizeof(keys[0]))
_Static_assert(sizeof(keys) / sizeof(keys[0]) <= FX_CONFIG_MAX_KEYS, "origin table too small");

const char fx_config_dev_yaml[] = "# felix-broker --dev (make run): local only\n"
                                  "quic_bind: 127.0.0.1:5000\n"
                                  "metrics_bind: 127.0.0.1:8080\n"
                                  "auto_create_streams: true\n"
                                  "state_dir: ./build/run-state\n"
                                  "log_level: debug\n";

static const char *const unknown_prefix_warn[][2] = {
    {"cache_", "Felix-C has no cache; only the cache_* window keys are read (as QUIC windows)"},
    {"durable_", "Felix-C has no durable storage"},
};

int fx_config_key_index(const char *name)
{
    for (size_t i = 0; i < NKEYS; i++) {
        if (strcmp(keys[i].name, name) == 0 || (keys[i].alias && strcmp(keys[i].alias, name) == 0))
            return (int)i;
    }
    return -1;
}

/* Returns the index of the key read from environment variable |name| (|n|
 * bytes, not NUL-terminated), and its registry spelling in |*penv|. */
static int env_index(const char *name, size_t n, const char **penv)
{
    for (size_t i = 0; i < NKEYS; i++) {
        for (size_t j = 0; j < 3 && keys[i].env[j]; j++) {
            if (strlen(keys[i].env[j]) == n && memcmp(keys[i].env[j], name, n) == 0) {
                *penv = keys[i].env[j];
                return (int)i;
            }
        }
    }
    return -1;
}

const fx_config_origin *fx_config_origin_of(const fx_config *c, const char *name)
{
    int i = fx_config_key_index(name);
    return i < 0 ? NULL : &c->origin[i];
}

/* ---- diagnostics ------------------------------------------------------- */

static int fail(fx_config_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(fx_config_diag *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->error, sizeof(d->error), fmt, ap);
    va_end(ap);
    return FX_ECONFIG;
}

static void warn(fx_config_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(fx_config_diag *d, const char *fmt, ...)
{
    if (d->nwarnings == FX_CONFIG_MAX_WARNINGS) {
        d->warnings_dropped++;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->warnings[d->nwarnings++], sizeof(d->warnings[0]), fmt, ap);
    va_end(ap);
}

/* ---- value parsers ----------------------------------------------------- */
/* Each returns 0, or -1 with the reason written to |why|. */

struct unit {
    const char *name;
    uint64_t mult;
};

static const struct unit size_units[] = {
    {"B", 1},
    {"KiB", KiB},
    {"MiB", MiB},
    {"GiB", GiB},
    {"TiB", TiB},
    {"KB", 1000},
    {"MB", 1000 * 1000},
    {"GB", 1000 * 1000 * 1000},
    {"TB", 1000ull * 1000 * 1000 * 1000},
};
static const struct unit dur_units[] = {
    {"ns", 1}, {"us", US}, {"ms", MS}, {"s", SEC}, {"m", 60 * SEC}, {"h", HOUR},
};

/* Parses leading decimal digits of |s| into |*v|; |*end| gets the rest. */
static int parse_digits(const char *s, uint64_t *v, const char **end, char *why, size_t n)
{
    if (*s == '-') {
        snprintf(why, n, "negative values are not allowed");
        return -1;
    }
    if (!isdigit((unsigned char)*s)) {
        snprintf(why, n, "not a number");
        return -1;
    }
    uint64_t x = 0;
    for (; isdigit((unsigned char)*s); s++) {
        unsigned dg = (unsigned)(*s - '0');
        if (x > (UINT64_MAX - dg) / 10) {
            snprintf(why, n, "number too large (overflow)");
            return -1;
        }
        x = x * 10 + dg;
    }
    *v = x;
    *end = s;
    return 0;
}

/* Parses "<digits>[ ]<unit>" where |units| lists the accepted suffixes and
 * |bare| is the multiplier of a plain number (0 = a unit is required). */
static int parse_scaled(const char *s, const struct unit *units, size_t nunits, uint64_t bare,
                        uint64_t *out, char *why, size_t n)
{
    uint64_t v;
    const char *u;
    if (parse_digits(s, &v, &u, why, n) < 0)
        return -1;
    uint64_t mult = bare;
    if (*u == ' ')
        u++;
    if (*u) {
        mult = 0;
        for (size_t i = 0; i < nunits; i++) {
            if (strcmp(u, units[i].name) == 0)
                mult = units[i].mult;
        }
        if (!mult) {
            snprintf(why, n, "unknown unit \"%.16s\"", u);
            return -1;
        }
    } else if (!mult) {
        snprintf(why, n, "needs a unit");
        return -1;
    }
    if (v && mult > UINT64_MAX / v) {
        snprintf(why, n, "number too large (overflow)");
        return -1;
    }
    *out = v * mult;
    return 0;
}

/* The multiplier of a plain number for duration key |name|: its suffix. */
static uint64_t dur_bare_unit(const char *name)
{
    size_t n = strlen(name);
    if (n > 3 && strcmp(name + n - 3, "_ms") == 0)
        return MS;
    if (n > 3 && strcmp(name + n - 3, "_us") == 0)
        return US;
    return 0;
}

static int parse_bool(const char *s, bool *out, char *why, size_t n)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    snprintf(why, n, "not a boolean (expected true/false, yes/no, on/off or 1/0)");
    return -1;
}

static int parse_enum(const struct enum_def *en, const char *s, int *out, char *why, size_t n)
{
    for (int i = 0; i < 5 && en->names[i]; i++) {
        if (strcmp(s, en->names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    if (en->refused && strcmp(s, en->refused) == 0)
        snprintf(why, n, "%s", en->refused_why);
    else
        snprintf(why, n, "unknown value; expected %s", en->expect);
    return -1;
}

static bool host_char_ok(char ch)
{
    return isalnum((unsigned char)ch) || ch == '.' || ch == '-' || ch == '_';
}

/* Accepts "host:port" (host a name or IPv4 address) and "[v6addr]:port". No
 * name is resolved here: start-up does that when it binds. */
static int parse_addr(const char *s, char *why, size_t n)
{
    const char *colon;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        char v6[64];
        struct in6_addr a;
        size_t len = close ? (size_t)(close - s - 1) : 0;
        if (!close || close[1] != ':' || len == 0 || len >= sizeof(v6)) {
            snprintf(why, n, "expected host:port or [ipv6]:port");
            return -1;
        }
        memcpy(v6, s + 1, len);
        v6[len] = '\0';
        if (inet_pton(AF_INET6, v6, &a) != 1) {
            snprintf(why, n, "not an IPv6 address inside [ ]");
            return -1;
        }
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || colon == s) {
            snprintf(why, n, "expected host:port (e.g. 0.0.0.0:5000)");
            return -1;
        }
        for (const char *p = s; p < colon; p++) {
            if (!host_char_ok(*p)) {
                snprintf(why, n, "invalid character in host (IPv6 addresses go in [ ])");
                return -1;
            }
        }
    }
    uint64_t port;
    const char *end;
    if (parse_digits(colon + 1, &port, &end, why, n) < 0 || *end || port > 65535) {
        snprintf(why, n, "port must be a number from 0 to 65535");
        return -1;
    }
    return 0;
}

static bool name_char_ok(char ch)
{
    return isalnum((unsigned char)ch) || ch == '.' || ch == '_' || ch == '-';
}

/* Copies the |len|-byte name at |s| into |dst| if it is 1..255 of
 * [A-Za-z0-9._-]. */
static int copy_name(char *dst, const char *s, size_t len)
{
    if (len == 0 || len >= FX_CONFIG_NAME_MAX)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (!name_char_ok(s[i]))
            return -1;
    }
    memcpy(dst, s, len);
    dst[len] = '\0';
    return 0;
}

/* Parses one "tenant/namespace/stream" item of |len| bytes. */
static int parse_stream(const char *s, size_t len, fx_config_stream *st, char *why, size_t n)
{
    const char *a = memchr(s, '/', len);
    const char *b = a ? memchr(a + 1, '/', len - (size_t)(a + 1 - s)) : NULL;
    if (!b || copy_name(st->tenant, s, (size_t)(a - s)) < 0 ||
        copy_name(st->ns, a + 1, (size_t)(b - a - 1)) < 0 ||
        copy_name(st->stream, b + 1, len - (size_t)(b + 1 - s)) < 0) {
        snprintf(why, n,
                 "\"%.*s\" is not tenant/namespace/stream (each 1-255 of A-Z a-z 0-9 . _ -)",
                 (int)(len > 80 ? 80 : len), s);
        return -1;
    }
    return 0;
}

/* A list under construction; |items| is owned until stored in a config. */
struct slist {
    fx_config_stream *items;
    size_t n, cap;
};

static int slist_add(struct slist *l, const char *s, size_t len, char *why, size_t n)
{
    if (l->n == FX_CONFIG_MAX_STREAMS) {
        snprintf(why, n, "more than %d streams", FX_CONFIG_MAX_STREAMS);
        return -1;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        fx_config_stream *p = realloc(l->items, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        l->items = p;
        l->cap = cap;
    }
    fx_config_stream *st = &l->items[l->n];
    if (parse_stream(s, len, st, why, n) < 0)
        return -1;
    for (size_t i = 0; i < l->n; i++) {
        if (!strcmp(l->items[i].tenant, st->tenant) && !strcmp(l->items[i].ns, st->ns) &&
            !strcmp(l->items[i].stream, st->stream)) {
            snprintf(why, n, "stream %s/%s/%s is listed twice", st->tenant, st->ns, st->stream);
            return -1;
        }
    }
    l->n++;
    return 0;
}

/* Parses a comma-separated list (environment and --set form). */
static int parse_stream_csv(const char *s, struct slist *l, char *why, size_t n)
{
    while (*s) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        int rv = slist_add(l, s, len, why, n);
        if (rv)
            return rv;
        s += len + (comma ? 1 : 0);
    }
    return 0;
}

/* ---- storing values ---------------------------------------------------- */

static void *field(fx_config *c, const struct key *k)
{
    return (char *)c + k->off;
}

static const void *cfield(const fx_config *c, const struct key *k)
{
    return (const char *)c + k->off;
}

/* The value of a numeric key (count, size or duration) as uint64_t. */
static uint64_t get_u64(const fx_config *c, int i)
{
    const struct key *k = &keys[i];
    if (k->type == T_U32 || k->type == T_WORKERS)
        return *(const uint32_t *)cfield(c, k);
    assert(k->type == T_SIZE || k->type == T_DUR);
    return *(const uint64_t *)cfield(c, k);
}

static int online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > 1024 ? 1024 : (int)n);
}

static void format_number(const struct key *k, uint64_t v, char *buf, size_t n);

static int check_bounds(const struct key *k, uint64_t v, char *why, size_t n)
{
    if (v >= k->min && v <= k->max)
        return 0;
    char lo[32], hi[32];
    format_number(k, k->min, lo, sizeof(lo));
    format_number(k, k->max, hi, sizeof(hi));
    if (v == 0 && k->min > 0)
        snprintf(why, n, "must not be 0 (allowed: %s to %s)", lo, hi);
    else
        snprintf(why, n, "out of range (allowed: %s to %s)", lo, hi);
    return -1;
}

static int parse_number(const struct key *k, const char *s, uint64_t *v, char *why, size_t n)
{
    const char *end;
    switch (k->type) {
    case T_SIZE:
        if (parse_scaled(s, size_units, sizeof(size_units) / sizeof(size_units[0]), 1, v, why, n) <
            0)
            return -1;
        break;
    case T_DUR:
        if (parse_scaled(s, dur_units, sizeof(dur_units) / sizeof(dur_units[0]),
                         dur_bare_unit(k->name), v, why, n) < 0)
            return -1;
        break;
    default:
        if (parse_digits(s, v, &end, why, n) < 0)
            return -1;
        if (*end) {
            snprintf(why, n, "not a whole number");
            return -1;
        }
    }
    return check_bounds(k, *v, why, n);
}

static int store_workers(fx_config *c, const struct key *k, const char *s, char *why, size_t n)
{
    uint64_t v;
    if (strcmp(s, "auto") == 0) {
        c->workers = (uint32_t)online_cpus();
        c->workers_auto = true;
        return 0;
    }
    if (strcmp(s, "0") == 0) {
        snprintf(why, n, "0 workers is not allowed; write auto for one per online CPU");
        return -1;
    }
    if (parse_number(k, s, &v, why, n) < 0)
        return -1;
    c->workers = (uint32_t)v;
    c->workers_auto = false;
    return 0;
}

static int store_string(fx_config *c, const struct key *k, const char *s, char *why, size_t n)
{
    size_t len = strlen(s);
    if (len >= k->size) {
        snprintf(why, n, "longer than %zu bytes", k->size - 1);
        return -1;
    }
    if (len < k->min) {
        snprintf(why, n, "must not be empty");
        return -1;
    }
    if (k->type == T_ADDR && parse_addr(s, why, n) < 0)
        return -1;
    memcpy(field(c, k), s, len + 1);
    return 0;
}

static void store_streams(fx_config *c, struct slist *l)
{
    free(c->streams);
    c->streams = l->items;
    c->nstreams = l->n;
    l->items = NULL;
    l->n = l->cap = 0;
}

/* Parses text |s| for key |k| and stores it in |c|. Returns 0, -1 (reason in
 * |why|) or -ENOMEM. T_WARN / T_REJECT keys are handled by the callers. */
static int store_text(fx_config *c, const struct key *k, const char *s, char *why, size_t n)
{
    uint64_t v;
    int e, rv;
    bool b;
    struct slist l = {0};
    switch (k->type) {
    case T_BOOL:
        if (parse_bool(s, &b, why, n) < 0)
            return -1;
        *(bool *)field(c, k) = b;
        return 0;
    case T_U32:
    case T_SIZE:
    case T_DUR:
        if (parse_number(k, s, &v, why, n) < 0)
            return -1;
        if (k->type == T_U32)
            *(uint32_t *)field(c, k) = (uint32_t)v;
        else
            *(uint64_t *)field(c, k) = v;
        return 0;
    case T_WORKERS:
        return store_workers(c, k, s, why, n);
    case T_ENUM:
        if (parse_enum(k->en, s, &e, why, n) < 0)
            return -1;
        memcpy(field(c, k), &e, sizeof(e));
        return 0;
    case T_STR:
    case T_ADDR:
        return store_string(c, k, s, why, n);
    case T_STREAMS:
        rv = parse_stream_csv(s, &l, why, n);
        if (rv == 0)
            store_streams(c, &l);
        free(l.items);
        return rv;
    case T_WARN:
    case T_REJECT:
        break;
    }
    assert(!"unreachable key type");
    return -1;
}

/* ---- defaults ---------------------------------------------------------- */

void fx_config_defaults(fx_config *c)
{
    char why[256];
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < NKEYS; i++) {
        if (keys[i].type == T_WARN || keys[i].type == T_REJECT)
            continue;
        int rv = store_text(c, &keys[i], keys[i].def, why, sizeof(why));
        assert(rv == 0 && "registry default does not parse");
        (void)rv; /* checked above; a bad default is our bug, caught by the unit tests */
        c->origin[i].from = FX_CONFIG_FROM_DEFAULT;
    }
}

void fx_config_deinit(fx_config *c)
{
    if (!c)
        return;
    free(c->streams);
    c->streams = NULL;
    c->nstreams = 0;
}

/* ---- applying one value ------------------------------------------------ */

/* Where a value came from, for messages: "x.yaml:3:7", "env FELIX_X", ... */
static void format_where(const fx_config *c, const fx_config_origin *o, char *buf, size_t n)
{
    switch (o->from) {
    case FX_CONFIG_FROM_DEFAULT:
        snprintf(buf, n, "default");
        break;
    case FX_CONFIG_FROM_FILE:
        snprintf(buf, n, "%s:%u:%u", c->file, o->line, o->col);
        break;
    case FX_CONFIG_FROM_ENV:
        snprintf(buf, n, "env %s", o->name);
        break;
    case FX_CONFIG_FROM_FLAG:
        snprintf(buf, n, "flag --set");
        break;
    }
}

/* Applies text |s| to key |i| from origin |o|: warns for T_WARN keys, fails
 * for T_REJECT keys and bad values, records the origin otherwise. */
static int apply(fx_config *c, int i, const char *s, const fx_config_origin *o, fx_config_diag *d)
{
    const struct key *k = &keys[i];
    const char *spelled = o->from == FX_CONFIG_FROM_ENV ? o->name : (o->name ? o->name : k->name);
    char where[FX_CONFIG_PATH_MAX + 64], why[256];
    format_where(c, o, where, sizeof(where));
    /* "env FELIX_X is ignored" reads better than repeating the name. */
    if (o->from == FX_CONFIG_FROM_ENV)
        spelled = "";
    const char *sep = *spelled ? ": " : "";
    if (k->type == T_WARN) {
        warn(d, "%s%s%s is ignored: %s", where, sep, spelled, k->help);
        return 0;
    }
    if (k->type == T_REJECT)
        return fail(d, "%s%s%s is not supported: %s", where, sep, spelled, k->help);
    int rv = store_text(c, k, s, why, sizeof(why));
    if (rv == -ENOMEM)
        return rv;
    if (rv < 0)
        return fail(d, "%s: %s = \"%.80s\": %s", where, k->name, s, why);
    c->origin[i] = *o;
    return 0;
}

/* ---- YAML -------------------------------------------------------------- */

static bool scalar_is_null(const yaml_node_t *nd)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    if (nd->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    for (size_t i = 0; i < 5; i++) {
        if (strcmp((const char *)nd->data.scalar.value, nulls[i]) == 0)
            return true;
    }
    return false;
}

static const char *node_kind(const yaml_node_t *nd)
{
    return nd->type == YAML_MAPPING_NODE ? "a mapping" : "a sequence";
}

static void set_file_origin(fx_config_origin *o, const yaml_node_t *nd, const char *alias)
{
    *o = (fx_config_origin){.from = FX_CONFIG_FROM_FILE,
                            .line = (uint32_t)nd->start_mark.line + 1,
                            .col = (uint32_t)nd->start_mark.column + 1,
                            .name = alias};
}

static int yaml_streams(fx_config *c, int i, yaml_document_t *doc, yaml_node_t *val,
                        const fx_config_origin *o, fx_config_diag *d)
{
    struct slist l = {0};
    char why[256];
    int rv = 0;
    if (val->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = val->data.sequence.items.start;
             rv == 0 && it < val->data.sequence.items.top; it++) {
            yaml_node_t *item = yaml_document_get_node(doc, *it);
            if (item->type != YAML_SCALAR_NODE) {
                rv = fail(d, "%s:%zu:%zu: streams: an item is %s; expected \"tenant/ns/stream\"",
                          c->file, item->start_mark.line + 1, item->start_mark.column + 1,
                          node_kind(item));
                break;
            }
            rv = slist_add(&l, (const char *)item->data.scalar.value, item->data.scalar.length, why,
                           sizeof(why));
            if (rv == -1)
                rv = fail(d, "%s:%zu:%zu: streams: %s", c->file, item->start_mark.line + 1,
                          item->start_mark.column + 1, why);
        }
    } else if (!(val->type == YAML_SCALAR_NODE && scalar_is_null(val))) {
        rv =
            fail(d, "%s:%u:%u: streams: expected a sequence of \"tenant/namespace/stream\" strings",
                 c->file, o->line, o->col);
    }
    if (rv == 0) {
        store_streams(c, &l);
        c->origin[i] = *o;
    }
    free(l.items);
    return rv;
}

/* Applies one `key: value` pair of the root mapping. |seen| holds, per key,
 * the line where the file first set it (0 = not yet). */
static int yaml_pair(fx_config *c, yaml_document_t *doc, yaml_node_pair_t *pair, uint32_t *seen,
                     fx_config_diag *d)
{
    yaml_node_t *kn = yaml_document_get_node(doc, pair->key);
    yaml_node_t *vn = yaml_document_get_node(doc, pair->value);
    size_t kl = kn->start_mark.line + 1, kc = kn->start_mark.column + 1;
    if (kn->type != YAML_SCALAR_NODE)
        return fail(d, "%s:%zu:%zu: a key is %s; keys must be plain names", c->file, kl, kc,
                    node_kind(kn));
    const char *name = (const char *)kn->data.scalar.value;
    int i = fx_config_key_index(name);
    if (i < 0) {
        for (size_t p = 0; p < sizeof(unknown_prefix_warn) / sizeof(unknown_prefix_warn[0]); p++) {
            if (strncmp(name, unknown_prefix_warn[p][0], strlen(unknown_prefix_warn[p][0])) == 0) {
                warn(d, "%s:%zu:%zu: %s is ignored: %s", c->file, kl, kc, name,
                     unknown_prefix_warn[p][1]);
                return 0;
            }
        }
        return fail(d, "%s:%zu:%zu: unknown key \"%.80s\" (see docs/configuration.md)", c->file, kl,
                    kc, name);
    }
    if (seen[i])
        return fail(d, "%s:%zu:%zu: %s is set twice (first at line %u)", c->file, kl, kc,
                    keys[i].name, seen[i]);
    seen[i] = (uint32_t)kl;
    fx_config_origin o;
    const char *alias = strcmp(name, keys[i].name) ? keys[i].alias : NULL;
    if (keys[i].type == T_WARN || keys[i].type == T_REJECT) {
        set_file_origin(&o, kn, alias); /* the key itself is the problem */
        return apply(c, i, "", &o, d);
    }
    set_file_origin(&o, vn, alias);
    if (keys[i].type == T_STREAMS)
        return yaml_streams(c, i, doc, vn, &o, d);
    if (vn->type != YAML_SCALAR_NODE)
        return fail(d, "%s:%u:%u: %s: expected a single value, found %s", c->file, o.line, o.col,
                    keys[i].name, node_kind(vn));
    const char *s = (const char *)vn->data.scalar.value;
    if (memchr(s, '\0', vn->data.scalar.length))
        return fail(d, "%s:%u:%u: %s: value contains a NUL byte", c->file, o.line, o.col,
                    keys[i].name);
    if (scalar_is_null(vn)) {
        if (keys[i].type != T_STR)
            return fail(d, "%s:%u:%u: %s has no value", c->file, o.line, o.col, keys[i].name);
        s = "";
    }
    return apply(c, i, s, &o, d);
}

static int yaml_parse_error(fx_config *c, yaml_parser_t *p, fx_config_diag *d)
{
    if (p->error == YAML_MEMORY_ERROR)
        return -ENOMEM;
    const char *problem = p->problem ? p->problem : "unknown problem";
    if (!p->context)
        return fail(d, "%s:%zu:%zu: YAML syntax error: %s", c->file, p->problem_mark.line + 1,
                    p->problem_mark.column + 1, problem);
    return fail(d, "%s:%zu:%zu: YAML syntax error: %s %s (started at %zu:%zu)", c->file,
                p->problem_mark.line + 1, p->problem_mark.column + 1, problem, p->context,
                p->context_mark.line + 1, p->context_mark.column + 1);
}

static int yaml_root(fx_config *c, yaml_document_t *doc, fx_config_diag *d)
{
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root)
        return 0; /* an empty file sets nothing */
    if (root->type == YAML_SCALAR_NODE && scalar_is_null(root))
        return 0;
    if (root->type != YAML_MAPPING_NODE)
        return fail(d, "%s:%zu:%zu: the file must be a mapping of key: value lines", c->file,
                    root->start_mark.line + 1, root->start_mark.column + 1);
    uint32_t seen[NKEYS] = {0};
    for (yaml_node_pair_t *pr = root->data.mapping.pairs.start; pr < root->data.mapping.pairs.top;
         pr++) {
        int rv = yaml_pair(c, doc, pr, seen, d);
        if (rv)
            return rv;
    }
    return 0;
}

static int load_yaml_text(fx_config *c, const unsigned char *text, size_t len, fx_config_diag *d)
{
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p))
        return -ENOMEM;
    yaml_parser_set_input_string(&p, text, len);
    int rv;
    if (!yaml_parser_load(&p, &doc)) {
        rv = yaml_parse_error(c, &p, d);
        goto err_parser;
    }
    rv = yaml_root(c, &doc, d);
    yaml_document_delete(&doc);
    if (rv)
        goto err_parser;
    /* A second document is refused: which one wins would be a guess. */
    if (!yaml_parser_load(&p, &doc)) {
        rv = yaml_parse_error(c, &p, d);
        goto err_parser;
    }
    if (yaml_document_get_root_node(&doc))
        rv = fail(d, "%s: more than one YAML document (---); put every key in one", c->file);
    yaml_document_delete(&doc);
err_parser:
    yaml_parser_delete(&p);
    return rv;
}

/* Reads the whole file at |path| (at most FX_CONFIG_MAX_FILE_BYTES). */
static int read_file(const char *path, unsigned char **pbuf, size_t *plen, fx_config_diag *d)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(d, "cannot open config file %s: %s", path, strerror(errno));
    struct stat st;
    int rv = 0;
    unsigned char *buf = NULL;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > FX_CONFIG_MAX_FILE_BYTES) {
        rv = fail(d, "config file %s is not a regular file of at most %d bytes", path,
                  FX_CONFIG_MAX_FILE_BYTES);
        goto err_close;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        rv = -ENOMEM;
        goto err_close;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rv = fail(d, "cannot read config file %s: %s", path, r ? strerror(errno) : "truncated");
            free(buf);
            goto err_close;
        }
        got += (size_t)r;
    }
    *pbuf = buf;
    *plen = got;
err_close:
    close(fd);
    return rv;
}

static int load_file_layer(fx_config *c, const fx_config_src *src, const char *path,
                           fx_config_diag *d)
{
    if (src->text) {
        snprintf(c->file, sizeof(c->file), "%s", src->text_name ? src->text_name : "<text>");
        return load_yaml_text(c, (const unsigned char *)src->text, strlen(src->text), d);
    }
    if (!path)
        return 0;
    if (strlen(path) >= sizeof(c->file))
        return fail(d, "config file name longer than %d bytes", FX_CONFIG_PATH_MAX - 1);
    snprintf(c->file, sizeof(c->file), "%s", path);
    unsigned char *buf;
    size_t len;
    int rv = read_file(path, &buf, &len, d);
    if (rv)
        return rv;
    rv = load_yaml_text(c, buf, len, d);
    free(buf);
    return rv;
}

/* ---- environment and flags --------------------------------------------- */

static int env_var(fx_config *c, const char *e, const char **set_by, fx_config_diag *d)
{
    const char *eq = strchr(e, '=');
    if (!eq)
        return 0;
    size_t n = (size_t)(eq - e);
    const char *env;
    int i = env_index(e, n, &env);
    if (i < 0) {
        if (n == strlen("FELIX_BROKER_CONFIG") && memcmp(e, "FELIX_BROKER_CONFIG", n) == 0)
            return 0;
        if (strncmp(e, "FELIX_CACHE_", 12) == 0 || strncmp(e, "FELIX_DURABLE_", 14) == 0)
            warn(d, "env %.*s is ignored: Felix-C has no %s", (int)n, e,
                 e[6] == 'C' ? "cache" : "durable storage");
        else
            warn(d, "env %.*s is not a felix-broker setting; ignored", (int)n, e);
        return 0;
    }
    if (set_by[i])
        return fail(d, "env %s and env %s are both set; they are the same setting (%s): unset one",
                    set_by[i], env, keys[i].name);
    set_by[i] = env;
    fx_config_origin o = {.from = FX_CONFIG_FROM_ENV, .name = env};
    return apply(c, i, eq + 1, &o, d);
}

static int load_env_layer(fx_config *c, char *const *envp, fx_config_diag *d)
{
    const char *set_by[NKEYS] = {0};
    for (size_t j = 0; envp && envp[j]; j++) {
        if (strncmp(envp[j], "FELIX_", 6) != 0)
            continue;
        int rv = env_var(c, envp[j], set_by, d);
        if (rv)
            return rv;
    }
    return 0;
}

static int load_flag(fx_config *c, const char *set, fx_config_diag *d)
{
    const char *eq = strchr(set, '=');
    char name[128];
    if (!eq || eq == set)
        return fail(d, "flag --set %.80s: expected key=value", set);
    if ((size_t)(eq - set) >= sizeof(name))
        return fail(d, "flag --set %.80s...: unknown key", set);
    memcpy(name, set, (size_t)(eq - set));
    name[eq - set] = '\0';
    int i = fx_config_key_index(name);
    if (i < 0)
        return fail(d, "flag --set %.80s: unknown key \"%s\"", set, name);
    fx_config_origin o = {.from = FX_CONFIG_FROM_FLAG,
                          .name = strcmp(name, keys[i].name) ? keys[i].alias : NULL};
    return apply(c, i, eq + 1, &o, d);
}

static const char *env_lookup(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (size_t j = 0; envp && envp[j]; j++) {
        if (strncmp(envp[j], name, n) == 0 && envp[j][n] == '=')
            return envp[j] + n + 1;
    }
    return NULL;
}

/* ---- cross-key rules --------------------------------------------------- */

static void format_value(const fx_config *c, int i, char *buf, size_t n);

/* "pub_conn_inflight_bytes = 8MiB (env FELIX_...)" */
static void describe(const fx_config *c, int i, char *buf, size_t n)
{
    char val[64], where[FX_CONFIG_PATH_MAX + 64];
    format_value(c, i, val, sizeof(val));
    format_where(c, &c->origin[i], where, sizeof(where));
    snprintf(buf, n, "%s = %s (%s)", keys[i].name, val, where);
}

static int kidx(const char *name)
{
    int i = fx_config_key_index(name);
    assert(i >= 0 && "cross rule names an unknown key");
    return i;
}

/* Fails naming keys |ia| and |ib| with their values and sources. */
static int fail2(const fx_config *c, int ia, const char *rel, int ib, const char *why,
                 fx_config_diag *d)
{
    char da[FX_CONFIG_PATH_MAX + 160], db[FX_CONFIG_PATH_MAX + 160];
    describe(c, ia, da, sizeof(da));
    describe(c, ib, db, sizeof(db));
    return fail(d, "%s %s %s: %s", da, rel, db, why);
}

/* Requires value(a) <= value(b); |why| says why the rule exists. */
static int rule_le(const fx_config *c, const char *a, const char *b, const char *why,
                   fx_config_diag *d)
{
    int ia = kidx(a), ib = kidx(b);
    if (get_u64(c, ia) <= get_u64(c, ib))
        return 0;
    return fail2(c, ia, "is larger than", ib, why, d);
}

/* A receive window above its auto-tuning ceiling raises a default ceiling
 * (so the cache_* aliases of old configs keep working) but refuses an
 * explicit one. */
static int rule_window(fx_config *c, const char *win, const char *max, const char *note,
                       fx_config_diag *d)
{
    int iw = kidx(win), im = kidx(max);
    uint64_t *pmax = (uint64_t *)field(c, &keys[im]);
    if (get_u64(c, iw) <= *pmax)
        return 0;
    if (c->origin[im].from != FX_CONFIG_FROM_DEFAULT)
        return rule_le(c, win, max, "the window would start above its auto-tuning ceiling", d);
    *pmax = get_u64(c, iw);
    c->origin[im].note = note;
    return 0;
}

static int rule_tenants(const fx_config *c, fx_config_diag *d)
{
    for (size_t i = 0; i < c->nstreams; i++) {
        uint32_t n = 0;
        for (size_t j = 0; j < c->nstreams; j++)
            n += strcmp(c->streams[i].tenant, c->streams[j].tenant) == 0;
        if (n > c->max_streams_per_tenant)
            return fail(d,
                        "streams lists %u streams of tenant %s, more than max_streams_per_tenant "
                        "(%u)",
                        n, c->streams[i].tenant, c->max_streams_per_tenant);
    }
    return 0;
}

static void rule_shards(fx_config *c, fx_config_diag *d)
{
    if (c->core_shards == 0)
        return;
    int iw = kidx("workers");
    if (c->origin[iw].from != FX_CONFIG_FROM_DEFAULT && c->workers != c->core_shards) {
        char dw[FX_CONFIG_PATH_MAX + 160];
        describe(c, iw, dw, sizeof(dw));
        warn(d, "%s is replaced by core_shards = %u (pinned workers)", dw, c->core_shards);
    }
    c->workers = c->core_shards;
    c->workers_auto = false;
    c->origin[iw].note = "replaced by core_shards: one pinned worker per shard";
}

static int check_rules(fx_config *c, fx_config_diag *d)
{
    static const char *const le[][3] = {
        {"max_frame_bytes", "pub_conn_inflight_bytes",
         "a connection's byte budget must hold the largest frame, or that frame is never admitted"},
        {"max_frame_bytes", "pub_inflight_bytes",
         "the broker's byte budget must hold the largest frame, or that frame is never admitted"},
        {"pub_conn_inflight_bytes", "pub_inflight_bytes",
         "one connection's share cannot exceed the whole budget"},
        {"subscriber_writer_lanes", "max_subscriber_writer_lanes", "the lane count is capped"},
        {"event_batch_max_bytes", "max_frame_bytes", "an event frame must fit in a frame"},
        {"max_frame_bytes", "log_capacity_bytes", "a stream's log must hold the largest frame"},
        {"max_frame_bytes", "quic_unacked_send_bytes",
         "the unacked-send cap must hold the largest frame, or it is never sent"},
        {"initial_mtu", "mtu_upper_bound", "the first datagram size is within the MTU bound"},
        {"mtu_upper_bound", "max_udp_payload", "MTU discovery stays within max_udp_payload"},
        {"control_stream_drain_timeout_ms", "shutdown_drain_timeout_ms",
         "a stream's drain is part of the whole shutdown drain"},
    };
    int rv;
    for (size_t i = 0; i < sizeof(le) / sizeof(le[0]); i++) {
        if ((rv = rule_le(c, le[i][0], le[i][1], le[i][2], d)))
            return rv;
    }
    if ((rv = rule_window(c, "quic_stream_recv_window", "quic_stream_recv_window_max",
                          "raised to quic_stream_recv_window", d)) ||
        (rv = rule_window(c, "quic_conn_recv_window", "quic_conn_recv_window_max",
                          "raised to quic_conn_recv_window", d)))
        return rv;
    if (c->keepalive_interval_ns && c->keepalive_interval_ns >= c->idle_timeout_ns)
        return fail2(c, kidx("keepalive_interval_ms"), "is not below", kidx("idle_timeout_ms"),
                     "keep-alives must come more often than the idle timeout", d);
    if (!c->tls_cert_file[0] != !c->tls_key_file[0])
        return fail(d, "tls_cert_file and tls_key_file must be set together (%s is empty)",
                    c->tls_cert_file[0] ? "tls_key_file" : "tls_cert_file");
    if ((rv = rule_tenants(c, d)))
        return rv;
    rule_shards(c, d);
    return 0;
}

/* ---- load -------------------------------------------------------------- */

int fx_config_load(fx_config *c, const fx_config_src *src, fx_config_diag *d)
{
    memset(d, 0, sizeof(*d));
    const char *path = src->path;
    if (!path && !src->text) {
        path = env_lookup(src->envp, "FELIX_BROKER_CONFIG");
        if (path && !*path)
            return fail(d, "env FELIX_BROKER_CONFIG is set but empty");
    }
    int rv = load_file_layer(c, src, path, d);
    if (rv)
        return rv;
    if ((rv = load_env_layer(c, src->envp, d)))
        return rv;
    for (size_t i = 0; i < src->nsets; i++) {
        if ((rv = load_flag(c, src->sets[i], d)))
            return rv;
    }
    return check_rules(c, d);
}

/* ---- printing ---------------------------------------------------------- */

/* Writes |v| in the largest unit of |k|'s type that divides it exactly. */
static void format_number(const struct key *k, uint64_t v, char *buf, size_t n)
{
    const struct unit *units = NULL;
    size_t nu = 0;
    if (k->type == T_SIZE) {
        static const struct unit bin[] = {{"KiB", KiB}, {"MiB", MiB}, {"GiB", GiB}, {"TiB", TiB}};
        units = bin;
        nu = 4;
    } else if (k->type == T_DUR) {
        units = dur_units;
        nu = sizeof(dur_units) / sizeof(dur_units[0]);
    }
    for (size_t i = nu; i-- > 0;) {
        if (v && v % units[i].mult == 0) {
            snprintf(buf, n, "%llu%s", (unsigned long long)(v / units[i].mult), units[i].name);
            return;
        }
    }
    snprintf(buf, n, "%llu", (unsigned long long)v);
}

static bool plain_ok(const char *s)
{
    if (!*s || strchr("[{&*!|>'\"%@`-?:,#~ ", *s))
        return false;
    for (; *s; s++) {
        if (!isalnum((unsigned char)*s) && !strchr("._/-:", *s))
            return false;
    }
    return true;
}

/* Writes |s| as a YAML scalar: plain when that is unambiguous, else double-
 * quoted with escapes. |n| must be at least 4 * strlen(s) + 3. */
static void format_string(const char *s, char *buf, size_t n)
{
    if (plain_ok(s) && strcasecmp(s, "null") != 0) {
        snprintf(buf, n, "%s", s);
        return;
    }
    size_t o = 0;
    buf[o++] = '"';
    for (; *s && o + 6 < n; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            o += (size_t)snprintf(buf + o, n - o, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            o += (size_t)snprintf(buf + o, n - o, "\\x%02x", ch);
        else
            buf[o++] = (char)ch;
    }
    buf[o++] = '"';
    buf[o] = '\0';
}

static void format_value(const fx_config *c, int i, char *buf, size_t n)
{
    const struct key *k = &keys[i];
    int e;
    switch (k->type) {
    case T_BOOL:
        snprintf(buf, n, "%s", *(const bool *)cfield(c, k) ? "true" : "false");
        break;
    case T_WORKERS:
        if (c->workers_auto) {
            snprintf(buf, n, "auto");
            break;
        }
        /* fall through */
    case T_U32:
    case T_SIZE:
    case T_DUR:
        format_number(k, get_u64(c, i), buf, n);
        break;
    case T_ENUM:
        memcpy(&e, cfield(c, k), sizeof(e));
        snprintf(buf, n, "%s", k->en->names[e]);
        break;
    case T_STR:
    case T_ADDR:
        format_string((const char *)cfield(c, k), buf, n);
        break;
    case T_STREAMS:
        snprintf(buf, n, "[%zu streams]", c->nstreams);
        break;
    case T_WARN:
    case T_REJECT:
        buf[0] = '\0';
        break;
    }
}

static void print_streams(const fx_config *c, FILE *out)
{
    fprintf(out, "streams: [");
    for (size_t i = 0; i < c->nstreams; i++)
        fprintf(out, "%s%s/%s/%s", i ? ", " : "", c->streams[i].tenant, c->streams[i].ns,
                c->streams[i].stream);
    fprintf(out, "]");
}

static void print_origin(const fx_config *c, int i, FILE *out)
{
    const fx_config_origin *o = &c->origin[i];
    char where[FX_CONFIG_PATH_MAX + 64];
    format_where(c, o, where, sizeof(where));
    if (o->from == FX_CONFIG_FROM_FILE)
        snprintf(where, sizeof(where), "%s:%u", c->file, o->line);
    fprintf(out, "  # %s", where);
    if (o->name && o->from != FX_CONFIG_FROM_ENV)
        fprintf(out, " (as %s)", o->name);
    if (keys[i].type == T_WORKERS && c->workers_auto)
        fprintf(out, " (%u online CPUs)", c->workers);
    if (o->note)
        fprintf(out, "; %s", o->note);
    fputc('\n', out);
}

int fx_config_print(const fx_config *c, FILE *out)
{
    char val[4 * FX_CONFIG_PATH_MAX + 8];
    fprintf(out, "# felix-broker effective configuration (file: %s)\n",
            c->file[0] ? c->file : "none");
    for (size_t i = 0; i < NKEYS; i++) {
        const struct key *k = &keys[i];
        if (k->type == T_WARN || k->type == T_REJECT)
            continue;
        if (k->section)
            fprintf(out, "\n# --- %s ---\n", k->section);
        if (k->type == T_STREAMS) {
            print_streams(c, out);
        } else {
            format_value(c, (int)i, val, sizeof(val));
            fprintf(out, "%s: %s", k->name, val);
        }
        print_origin(c, (int)i, out);
    }
    return ferror(out) ? -EIO : 0;
}

static void md_type(const struct key *k, char *buf, size_t n)
{
    char lo[32], hi[32];
    format_number(k, k->min, lo, sizeof(lo));
    format_number(k, k->max, hi, sizeof(hi));
    switch (k->type) {
    case T_BOOL:
        snprintf(buf, n, "bool");
        break;
    case T_U32:
        snprintf(buf, n, "integer %s..%s", lo, hi);
        break;
    case T_WORKERS:
        snprintf(buf, n, "`auto` or integer %s..%s", lo, hi);
        break;
    case T_SIZE:
        snprintf(buf, n, "size %s..%s", lo, hi);
        break;
    case T_DUR:
        snprintf(buf, n, "duration %s..%s", lo, hi);
        break;
    case T_ENUM:
        snprintf(buf, n, "%s", k->en->expect);
        break;
    case T_STR:
        snprintf(buf, n, "%s", k->min ? "path" : "path or empty");
        break;
    case T_ADDR:
        snprintf(buf, n, "host:port");
        break;
    case T_STREAMS:
        snprintf(buf, n, "list of tenant/namespace/stream");
        break;
    case T_WARN:
    case T_REJECT:
        buf[0] = '\0';
        break;
    }
}

static void md_names(const struct key *k, FILE *out)
{
    fprintf(out, "| `%s`", k->name);
    if (k->alias)
        fprintf(out, " (alias `%s`)", k->alias);
    fprintf(out, " | ");
    for (size_t j = 0; j < 3 && k->env[j]; j++)
        fprintf(out, "%s`%s`%s", j ? ", " : "", k->env[j], j ? " (alias)" : "");
    if (!k->env[0])
        fprintf(out, "-");
}

int fx_config_print_markdown(FILE *out)
{
    char type[128];
    fprintf(out, "| Key | Environment | Type | Default | Meaning |\n|---|---|---|---|---|\n");
    for (size_t i = 0; i < NKEYS; i++) {
        const struct key *k = &keys[i];
        if (k->type == T_WARN || k->type == T_REJECT)
            continue;
        if (k->section)
            fprintf(out, "| **%s** | | | | |\n", k->section);
        md_type(k, type, sizeof(type));
        md_names(k, out);
        fprintf(out, " | %s | `%s` | %s |\n", type,
                k->type == T_STREAMS ? "[]" : (k->def[0] ? k->def : "\"\""), k->help);
    }
    fprintf(out, "\nKeys of the original that load with a warning:\n\n"
                 "| Key | Environment | Why |\n|---|---|---|\n");
    for (size_t i = 0; i < NKEYS; i++) {
        if (keys[i].type != T_WARN)
            continue;
        md_names(&keys[i], out);
        fprintf(out, " | %s |\n", keys[i].help);
    }
    fprintf(out,
            "| `cache_*` (other keys) | `FELIX_CACHE_*` | %s |\n"
            "| `durable_*` | `FELIX_DURABLE_*` | %s |\n",
            unknown_prefix_warn[0][1], unknown_prefix_warn[1][1]);
    fprintf(out, "\nKeys of the original that stop start-up:\n\n"
                 "| Key | Environment | Why |\n|---|---|---|\n");
    for (size_t i = 0; i < NKEYS; i++) {
        if (keys[i].type != T_REJECT)
            continue;
        md_names(&keys[i], out);
        fprintf(out, " | %s |\n", keys[i].help);
    }
    return ferror(out) ? -EIO : 0;
}
