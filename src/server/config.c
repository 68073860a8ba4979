/* Broker configuration: the key registry (every key with its type, default,
 * bounds and help), defaults, load orchestration (file < environment < --set)
 * and the cross-key rules. Main thread only. Every key lives in one static
 * table; defaults are written there as text and parsed by the same code as
 * user input (config_parse.c); config_print.c prints the table back. */
#include "server/config.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/hostport.h"
#include "base/placement.h"
#include "felix/error.h"
#include "server/config_internal.h"
#include "storage/syncpol.h"

_Static_assert(sizeof(fx_config_policy) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(fx_config_lane_shard) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(fx_config_sub_stream_mode) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(fx_config_log_level) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(fx_config_auth_mode) == sizeof(int), "enum fields are stored as int");

/* ---- the registry ------------------------------------------------------ */

#define FIELD(f) .off = offsetof(fx_config, f), .size = sizeof(((fx_config *)0)->f)

static const struct enum_def policy_enum = {
    {"block", "drop_new", "drop_old"}, "block, drop_new or drop_old", NULL, NULL, NULL};
static const struct enum_def lane_shard_enum = {
    {"auto", "subscriber_id_hash", "connection_id_hash", "round_robin_pin"},
    "auto, subscriber_id_hash, connection_id_hash or round_robin_pin",
    NULL,
    NULL,
    NULL};
static const struct enum_def sub_stream_enum = {
    {"per_subscriber"},
    "per_subscriber",
    "hashed_pool",
    "hashed_pool is not supported: use per_subscriber (the original silently fell back to it)",
    NULL};
static const struct enum_def log_level_enum = {{"error", "warn", "info", "debug", "trace"},
                                               "error, warn, info, debug or trace",
                                               NULL,
                                               NULL,
                                               NULL};
static const struct enum_def auth_enum = {{"none", "jwt"}, "none or jwt", NULL, NULL, NULL};

/* The original's other spellings: off, on-commit, commit (any case). */
static int fsync_alias(const char *s)
{
    fx_fsync_mode m;
    if (fx_fsync_mode_parse(s, &m) != 0)
        return -1;
    return (int)m;
}
_Static_assert(FX_FSYNC_NONE == 0 && FX_FSYNC_PERIODIC == 1 && FX_FSYNC_ON_COMMIT == 2,
               "fsync_enum's names are in fx_fsync_mode's order");
static const struct enum_def fsync_enum = {
    {"none", "periodic", "on_commit"}, "none, periodic or on_commit", NULL, NULL, fsync_alias};

/* clang-format off */
const struct key fx_config_keys[] = {
    /* listeners and security */
    {.name = "quic_bind", .env = {"FELIX_QUIC_BIND"}, .type = T_ADDR,
     .section = "listeners and security", FIELD(quic_bind), .def = "127.0.0.1:5000",
     .help = "UDP address of the QUIC listener; port 0 picks a free port. The default is "
             "loopback-only under auth_mode none and 0.0.0.0:5000 under auth_mode jwt"},
    {.name = "metrics_bind", .alias = "admin_bind",
     .env = {"FELIX_BROKER_METRICS_BIND", "FELIX_METRICS_BIND"}, .type = T_ADDR,
     FIELD(metrics_bind), .def = "127.0.0.1:8080",
     .help = "admin HTTP address: /metrics, /live, /ready and the stream admin API"},
    {.name = "admin_token", .env = {"FELIX_ADMIN_TOKEN"}, .type = T_STR, FIELD(admin_token),
     .def = "",
     .help = "bearer token that mutating admin calls (PUT, PATCH, DELETE) always need, also on "
             "loopback, and GET /v1/... when metrics_bind is not loopback; empty = mutating "
             "calls are refused everywhere and /v1 reads off loopback (--dev: generated once "
             "into state_dir/admin-token)"},
    {.name = "metrics_stream_labels", .env = {"FELIX_METRICS_STREAM_LABELS"}, .type = T_BOOL,
     FIELD(metrics_stream_labels), .def = "false",
     .help = "GET /metrics carries the per-stream gauges felix_storage_stream_*{tenant,namespace,"
             "stream}, one series per durable stream, and the per-group series "
             "felix_consumer_group_*{tenant,namespace,stream,group}, one per consumer group; "
             "/metrics needs no token, so whoever reaches metrics_bind learns every durable "
             "stream's and group's name. false = those series are not shown"},
    {.name = "admin_allowed_hosts", .env = {"FELIX_ADMIN_ALLOWED_HOSTS"}, .type = T_STR,
     FIELD(admin_allowed_hosts), .def = "",
     .help = "comma-separated host names the admin Host header may carry besides addresses, "
             "localhost and metrics_bind's host (requests naming any other are refused: DNS "
             "rebinding)"},
    {.name = "probe_bind", .env = {"FELIX_PROBE_BIND"}, .type = T_STR, FIELD(probe_bind),
     .def = "auto",
     .help = "second admin HTTP address serving only /live and /ready, with its own connection "
             "slots; auto = metrics_bind's host, port + 1 (0 when metrics_bind's is 0); "
             "empty = none"},
    {.name = "admin_tls_cert_file", .env = {"FELIX_ADMIN_TLS_CERT_FILE"}, .type = T_STR,
     FIELD(admin_tls_cert_file), .def = "",
     .help = "PEM certificate chain: serve metrics_bind over HTTPS (probe_bind stays HTTP); "
             "empty = plain HTTP"},
    {.name = "admin_tls_key_file", .env = {"FELIX_ADMIN_TLS_KEY_FILE"}, .type = T_STR,
     FIELD(admin_tls_key_file), .def = "", .help = "PEM private key of admin_tls_cert_file"},
    {.name = "tls_cert_file", .env = {"FELIX_TLS_CERT_FILE"}, .type = T_STR, FIELD(tls_cert_file),
     .def = "",
     .help = "PEM certificate chain; empty = a self-signed certificate for DNS:localhost and "
             "IP:127.0.0.1, generated once into state_dir (tls-cert.pem, tls-key.pem) and "
             "reused at every start"},
    {.name = "tls_key_file", .env = {"FELIX_TLS_KEY_FILE"}, .type = T_STR, FIELD(tls_key_file),
     .def = "", .help = "PEM private key of tls_cert_file"},
    {.name = "auth_mode", .env = {"FELIX_AUTH_MODE"}, .type = T_ENUM, FIELD(auth_mode),
     .def = "none", .en = &auth_enum,
     .help = "client authentication: none accepts any token, jwt checks Ed25519 JWTs"},
    {.name = "allow_unauthenticated", .env = {"FELIX_ALLOW_UNAUTHENTICATED"}, .type = T_BOOL,
     FIELD(allow_unauthenticated), .def = "false",
     .help = "let auth_mode none listen on a non-loopback quic_bind (any client that reaches "
             "it may act as any tenant); without it such a configuration refuses to start"},
    {.name = "jwks_file", .env = {"FELIX_JWKS_FILE"}, .type = T_STR, FIELD(jwks_file), .def = "",
     .help = "JWKS file of the keys that sign tokens (auth_mode jwt); re-read on SIGHUP"},
    {.name = "jwt_issuer", .env = {"FELIX_JWT_ISSUER"}, .type = T_STR, FIELD(jwt_issuer),
     .def = "felix-auth", .min = 1, .help = "iss a token must carry (auth_mode jwt)"},
    {.name = "jwt_audience", .env = {"FELIX_JWT_AUDIENCE"}, .type = T_STR, FIELD(jwt_audience),
     .def = "felix-broker", .min = 1, .help = "aud a token must carry (auth_mode jwt)"},
    {.name = "jwt_leeway_s", .env = {"FELIX_JWT_LEEWAY_S"}, .type = T_DUR, FIELD(jwt_leeway_ns),
     .def = "60s", .min = 0, .max = HOUR,
     .help = "clock skew allowed on a token's exp and nbf (whole seconds)"},
    {.name = "state_dir", .env = {"FELIX_STATE_DIR"}, .type = T_STR, FIELD(state_dir),
     .def = "/var/lib/felix", .min = 1,
     .help = "directory of the generated TLS certificate and key and of the QUIC stateless-reset "
             "secret (quic-reset.key); created mode 0700 at start; "
             "an existing one must belong to the broker's user and not be writable by group or "
             "others, and one broker at a time uses it (lock file .state.lock); else the broker "
             "refuses to start"},
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
    {.name = "groups", .env = {"FELIX_GROUPS"}, .type = T_GROUPS, .def = "",
     .help = "consumer groups created at start: tenant/namespace/stream/group strings, each "
             "optionally ending @all (default), @new, @last or @<offset>; a stream not in "
             "streams is created in memory"},
    {.name = "log_capacity", .env = {"FELIX_LOG_CAPACITY"}, .type = T_U32, FIELD(log_capacity),
     .def = "1024", .min = 1, .max = 1u << 24, .help = "messages kept per stream for replay"},
    {.name = "log_capacity_bytes", .env = {"FELIX_LOG_CAPACITY_BYTES"}, .type = T_SIZE,
     FIELD(log_capacity_bytes), .def = "64MiB", .min = 1, .max = 64 * GiB,
     .help = "bytes kept per stream (payload plus 16 per message of a retained batch); the "
             "older end is evicted first"},
    {.name = "tenant_retained_bytes", .env = {"FELIX_TENANT_RETAINED_BYTES"}, .type = T_SIZE,
     FIELD(tenant_retained_bytes), .def = "256MiB", .min = 0, .max = TiB,
     .help = "bytes all streams of one tenant keep together; over it an append evicts its "
             "stream's oldest messages (counted); 0 = no limit"},
    {.name = "retained_bytes_limit", .env = {"FELIX_RETAINED_BYTES_LIMIT"}, .type = T_SIZE,
     FIELD(retained_bytes_limit), .def = "1GiB", .min = 0, .max = TiB,
     .help = "bytes all streams keep together; over it an append evicts its stream's oldest "
             "messages (counted); 0 = no limit"},
    {.name = "stream_idle_expiry_s", .env = {"FELIX_STREAM_IDLE_EXPIRY_S"}, .type = T_DUR,
     FIELD(stream_idle_expiry_ns), .def = "1h", .min = 0, .max = 720 * HOUR,
     .help = "an auto-created stream with no publisher, no subscriber and no publish this long "
             "is removed with its messages (whole seconds); streams created explicitly never "
             "expire; 0 = never"},
    {.name = "stream_delete_tombstone_ms", .env = {"FELIX_STREAM_DELETE_TOMBSTONE_MS"},
     .type = T_DUR, FIELD(stream_delete_tombstone_ns), .def = "30s", .min = 0, .max = 24 * HOUR,
     .help = "after an admin DELETE, a publish or subscribe does not auto-create the same stream "
             "again for this long (it gets \"stream not found ... (deleted recently ...)\"); an "
             "explicit create (admin PUT, streams) does; 0 = off"},
    {.name = "max_tenants", .env = {"FELIX_MAX_TENANTS"}, .type = T_U32, FIELD(max_tenants),
     .def = "1024", .min = 0, .max = 1u << 24,
     .help = "tenants holding streams at once (with auth_mode none any name is a tenant); a "
             "stream of one more is refused; 0 = no limit"},
    /* threads */
    {.name = "workers", .alias = "pub_workers_per_conn",
     .env = {"FELIX_WORKERS", "FELIX_BROKER_PUB_WORKERS_PER_CONN"}, .type = T_WORKERS,
     .section = "threads", FIELD(workers), .def = "auto", .min = 1, .max = 1024,
     .help = "worker loops (streams are spread over them); auto = one per online CPU but one (at least 1)"},
    {.name = "core_shards", .env = {"FELIX_CORE_SHARDS"}, .type = T_U32, FIELD(core_shards),
     .def = "0", .min = 0, .max = 1024,
     .help = "N > 0 runs N CPU-pinned workers instead of workers"},
    {.name = "io_threads", .env = {"FELIX_IO_THREADS", "FELIX_IO_RUNTIME_THREADS"}, .type = T_U32,
     FIELD(io_threads), .def = "0", .min = 0, .max = 256,
     .help = "separate QUIC I/O loops; 0 runs QUIC on the worker loops; from 2, connections "
             "spread over all but the last"},
    /* memory */
    {.name = "memory_limit_bytes", .env = {"FELIX_MEMORY_LIMIT_BYTES"}, .type = T_SIZE,
     .section = "memory", FIELD(memory_limit_bytes), .def = "0", .min = 0, .max = 64 * TiB,
     .help = "memory target: the defaults of max_connections and the connection receive "
             "window are derived so the memory bound fits it, and explicit settings whose bound "
             "exceeds it are refused; 0 = the cgroup's memory.max when set, else half of RAM"},
    {.name = "allocator_retain_bytes", .env = {"FELIX_ALLOCATOR_RETAIN_BYTES"}, .type = T_SIZE,
     FIELD(allocator_retain_bytes), .def = "64MiB", .min = 0, .max = 4 * GiB,
     .help = "freed heap the allocator keeps instead of returning it to the OS, so RSS stays at "
             "its high-water mark under load; 0 = the C library's own trimming"},
    {.name = "allocator_idle_trim_ms", .env = {"FELIX_ALLOCATOR_IDLE_TRIM_MS"}, .type = T_DUR,
     FIELD(allocator_idle_trim_ns), .def = "2s", .min = 0, .max = HOUR,
     .help = "after this long with no datagram sent or received, freed heap goes back to the "
             "kernel (malloc_trim) if RSS grew 1 MiB or the free heap 256 KiB since the last trim, and "
             "again whenever the free heap grows 256 KiB or RSS 1 MiB while idle; 0 = never"},
    /* connections and QUIC */
    {.name = "max_connections", .env = {"FELIX_MAX_CONNECTIONS"}, .type = T_U32,
     .section = "connections and QUIC", FIELD(max_connections), .def = "4096", .min = 1,
     .max = 1u << 20,
     .help = "QUIC connections accepted at once; by default at most 4096, fewer when the memory "
             "bound would exceed memory_limit_bytes"},
    {.name = "max_connections_per_ip", .env = {"FELIX_MAX_CONNECTIONS_PER_IP"}, .type = T_U32,
     FIELD(max_connections_per_ip), .def = "256", .min = 0, .max = 1u << 20,
     .help = "connections one source address (IPv6: one /64) may hold; 0 = no limit"},
    {.name = "auth_timeout_ms", .env = {"FELIX_AUTH_TIMEOUT_MS"}, .type = T_DUR,
     FIELD(auth_timeout_ns), .def = "10s", .min = 0, .max = HOUR,
     .help = "a connection none of whose streams authenticated this long after its handshake "
             "is closed, a stream not authenticated by then is reset; 0 = never"},
    {.name = "max_unauth_streams_per_conn", .env = {"FELIX_MAX_UNAUTH_STREAMS_PER_CONN"},
     .type = T_U32, FIELD(max_unauth_streams_per_conn), .def = "16", .min = 1, .max = 1u << 20,
     .help = "streams of one connection that may wait for their auth at once; more are reset"},
    {.name = "auth_failures_per_conn", .env = {"FELIX_AUTH_FAILURES_PER_CONN"}, .type = T_U32,
     FIELD(auth_failures_per_conn), .def = "3", .min = 1, .max = 1u << 20,
     .help = "failed token verifications after which a connection is closed"},
    {.name = "auth_rate_per_ip", .env = {"FELIX_AUTH_RATE_PER_IP"}, .type = T_U32,
     FIELD(auth_rate_per_ip), .def = "1000", .min = 0, .max = 1u << 24,
     .help = "token verifications per second (and burst) one source address may ask for "
             "(auth_mode jwt); more are refused unverified; 0 = no limit"},
    {.name = "preauth_max_bytes", .env = {"FELIX_PREAUTH_MAX_BYTES"}, .type = T_SIZE,
     FIELD(preauth_max_bytes), .def = "128MiB", .min = 64 * KiB, .max = 16 * GiB,
     .help = "frame bytes held for streams that have not authenticated, all connections "
             "together; a frame header that would pass it resets its stream"},
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
     .max = 4 * GiB,
     .help = "auto-tuning ceiling of the connection receive window; by default at most 64MiB, "
             "less (and the initial window with it) when 256 connections would not fit "
             "memory_limit_bytes"},
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
     .help = "ceiling for path MTU discovery (whose probes stop at 1444 here)"},
    {.name = "max_udp_payload", .env = {"FELIX_MAX_UDP_PAYLOAD"}, .type = T_SIZE,
     FIELD(max_udp_payload), .def = "65527", .min = 1200, .max = 65527,
     .help = "max_udp_payload_size transport parameter"},
    {.name = "loopback_mtu", .env = {"FELIX_LOOPBACK_MTU"}, .type = T_SIZE, FIELD(loopback_mtu),
     .def = "16250", .min = 0, .max = 65507,
     .help = "datagram size pinned for peers on this host; 0 = probe as on any path"},
    {.name = "udp_send_buffer", .env = {"FELIX_UDP_SEND_BUFFER"}, .type = T_SIZE,
     FIELD(udp_send_buffer), .def = "8MiB", .min = 64 * KiB, .max = GiB,
     .help = "SO_SNDBUF asked for; the kernel may grant less (logged)"},
    {.name = "udp_recv_buffer", .env = {"FELIX_UDP_RECV_BUFFER"}, .type = T_SIZE,
     FIELD(udp_recv_buffer), .def = "8MiB", .min = 64 * KiB, .max = GiB,
     .help = "SO_RCVBUF asked for; the kernel may grant less (logged)"},
    {.name = "conn_stats_ms", .env = {"FELIX_CONN_STATS_MS"}, .type = T_DUR, FIELD(conn_stats_ns),
     .def = "0", .min = 0, .max = HOUR,
     .help = "log each connection's path statistics this often; 0 = off"},
    /* publish pipeline */
    {.name = "ack_on_commit", .env = {"FELIX_ACK_ON_COMMIT"}, .type = T_BOOL,
     .section = "publish pipeline", FIELD(ack_on_commit), .def = "false",
     .help = "ack a publish after append and fanout, not after enqueue"},
    {.name = "publish_queue_wait_timeout_ms", .env = {"FELIX_PUBLISH_QUEUE_WAIT_MS"}, .type = T_DUR,
     FIELD(publish_queue_wait_timeout_ns), .def = "2s", .min = MS, .max = HOUR,
     .help = "how long a publish under the Wait policy (acked with ack_on_commit, or to a "
             "durable stream) may wait at admission for bytes beyond its frame's reservation "
             "and for worker queue space; the wait at a frame header has no timeout"},
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
    {.name = "frame_read_timeout_ms", .env = {"FELIX_FRAME_READ_TIMEOUT_MS"}, .type = T_DUR,
     FIELD(frame_read_timeout_ns), .def = "10s", .min = MS, .max = HOUR,
     .help = "a frame whose body has not all arrived this long after its bytes were reserved "
             "resets its stream"},
    /* subscribe pipeline */
    {.name = "subscriber_queue_capacity",
     .env = {"FELIX_SUBSCRIBER_QUEUE_CAPACITY", "FELIX_SUB_QUEUE_CAPACITY"}, .type = T_U32,
     .section = "subscribe pipeline", FIELD(subscriber_queue_capacity), .def = "512", .min = 1,
     .max = 1u << 20, .help = "publish batches queued per subscriber"},
    {.name = "subscriber_queue_policy", .env = {"FELIX_SUB_QUEUE_POLICY"}, .type = T_ENUM,
     FIELD(subscriber_queue_policy), .def = "drop_new", .en = &policy_enum,
     .help = "what a full subscriber queue does"},
    {.name = "subscriber_block_timeout_ms", .env = {"FELIX_SUBSCRIBER_BLOCK_TIMEOUT_MS"},
     .type = T_DUR, FIELD(subscriber_block_timeout_ns), .def = "0", .min = 0, .max = HOUR,
     .help = "with subscriber_queue_policy block: a subscriber whose full queue holds its "
             "worker this long has its connection closed (counted), so the streams sharing the "
             "worker go on; 0 = never (lossless waits as long as it takes)"},
    {.name = "max_subscriptions_per_conn", .env = {"FELIX_MAX_SUBSCRIPTIONS_PER_CONN"},
     .type = T_U32, FIELD(max_subscriptions_per_conn), .def = "4096", .min = 1, .max = 1u << 20,
     .help = "subscriptions one connection may hold"},
    {.name = "group_visibility_timeout_ms", .env = {"FELIX_GROUP_VISIBILITY_TIMEOUT_MS"},
     .type = T_U32, FIELD(group_visibility_timeout_ms), .def = "30000", .min = 1,
     .max = 43200000,
     .help = "consumer groups: how long a member holds a delivered record before it is "
             "delivered again (ack wait), unless the member acks, naks or extends it"},
    {.name = "group_max_visibility_ms", .env = {"FELIX_GROUP_MAX_VISIBILITY_MS"}, .type = T_U32,
     FIELD(group_max_visibility_ms), .def = "600000", .min = 1, .max = 43200000,
     .help = "consumer groups: the longest ack wait a member may ask for or extend to (raised "
             "to group_visibility_timeout_ms if lower)"},
    {.name = "group_max_wait_ms", .env = {"FELIX_GROUP_MAX_WAIT_MS"}, .type = T_U32,
     FIELD(group_max_wait_ms), .def = "30000", .min = 1, .max = 43200000,
     .help = "consumer groups: the longest a JSON group_poll waits for records (its wait_ms "
             "is capped here) before it is answered with none"},
    {.name = "group_max_attempts", .env = {"FELIX_GROUP_MAX_ATTEMPTS"}, .type = T_U32,
     FIELD(group_max_attempts), .def = "5", .min = 1, .max = 1000000,
     .help = "consumer groups: deliveries of one record before it is dead-lettered"},
    {.name = "group_max_in_flight", .env = {"FELIX_GROUP_MAX_IN_FLIGHT"}, .type = T_U32,
     FIELD(group_max_in_flight), .def = "1000", .min = 1, .max = 1000000,
     .help = "consumer groups: records a group may hold delivered and unsettled (checkpoint "
             "5g); delivery pauses for every member at the cap, counted"},
    {.name = "group_backoff_ms", .env = {"FELIX_GROUP_BACKOFF_MS"}, .type = T_STR,
     FIELD(group_backoff_ms), .def = "",
     .help = "consumer groups: delays (ms, comma-separated, at most 8, each up to 43200000) "
             "before the k-th redelivery after a lapsed lease or a nak without a delay; the "
             "last repeats; empty: redeliver at once"},
    {.name = "max_groups_per_stream", .env = {"FELIX_MAX_GROUPS_PER_STREAM"}, .type = T_U32,
     FIELD(max_groups_per_stream), .def = "64", .min = 1, .max = 4096,
     .help = "consumer groups one stream may have"},
    {.name = "group_hold_timeout_ms", .env = {"FELIX_GROUP_HOLD_TIMEOUT_MS"}, .type = T_DUR,
     FIELD(group_hold_timeout_ns), .def = "60s", .min = 0, .max = HOUR,
     .help = "consumer groups, with subscriber_queue_policy block: an append to a stream in "
             "memory that would evict a record a group has not settled waits (its worker takes "
             "no input) at most this long, then goes ahead and the group settles the evicted "
             "records as skipped (counted); 0 = never. Not 0 by default, unlike "
             "subscriber_block_timeout_ms: a group outlives its members, and one left without "
             "any would stop its stream's publishers for good; 60 s outlasts the default ack "
             "wait, so a crashed member's records reach another member first"},
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
     .type = T_DUR, FIELD(subscriber_flush_max_delay_ns), .def = "0", .min = 0, .max = SEC,
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
     .help = "bytes per coalesced event write (one larger publish batch still goes alone, "
             "in its shared frame)"},
    {.name = "event_batch_max_delay_us", .env = {"FELIX_EVENT_BATCH_MAX_DELAY_US"}, .type = T_DUR,
     FIELD(event_batch_max_delay_ns), .def = "0us", .min = 0, .max = SEC,
     .help = "longest a feeder waits to coalesce events; 0 = no wait (the default: "
             "batches already coalesce under load, see docs/performance.md)"},
    {.name = "fanout_batch_size", .env = {"FELIX_FANOUT_BATCH"}, .type = T_U32,
     FIELD(fanout_batch_size), .def = "64", .min = 1, .max = 65536,
     .help = "events per frame is min(this, event_batch_max_events); 1 = single-event mode"},
    /* caches */
    {.name = "cache_max_bytes", .env = {"FELIX_CACHE_MAX_BYTES"}, .type = T_SIZE,
     .section = "caches", FIELD(cache_max_bytes), .def = "64MiB", .min = MiB, .max = 64 * TiB,
     .help = "bytes the in-memory caches hold, all tenants (key + value + 104 per entry), split "
             "evenly over the workers; a put over a worker's share evicts its least recently "
             "used entries (CLOCK)"},
    {.name = "cache_tenant_max_bytes", .env = {"FELIX_CACHE_TENANT_MAX_BYTES"}, .type = T_SIZE,
     FIELD(cache_tenant_max_bytes), .def = "0", .min = 0, .max = 64 * TiB,
     .help = "bytes one tenant's caches hold at most, all workers; a put past it is refused, "
             "never evicted for; 0 = no cap"},
    {.name = "cache_max_value_bytes", .env = {"FELIX_CACHE_MAX_VALUE_BYTES"}, .type = T_SIZE,
     FIELD(cache_max_value_bytes), .def = "1MiB", .min = 1, .max = GiB,
     .help = "the largest cache value a put may store; a larger one is refused. The largest "
             "entry (this + cache_max_key_bytes + 104) must fit one worker's share of "
             "cache_max_bytes: the default is lowered to fit, an explicit value is refused"},
    {.name = "cache_max_key_bytes", .env = {"FELIX_CACHE_MAX_KEY_BYTES"}, .type = T_U32,
     FIELD(cache_max_key_bytes), .def = "1024", .min = 1, .max = 65535,
     .help = "the longest cache key a put may store; a longer one is refused"},
    {.name = "caches", .env = {"FELIX_CACHES"}, .type = T_CACHES, .def = "",
     .help = "caches declared at start: tenant/namespace/cache strings, "
             "tenant/namespace/cache@durable for a durable cache (needs durable_storage_dir); "
             "with auto_create_streams off only declared caches are served (others: cache scope "
             "not found), and the admin API declares more"},
    /* durable storage */
    {.name = "durable_storage_dir", .env = {"FELIX_DURABLE_STORAGE_DIR"}, .type = T_STR,
     .section = "durable storage", FIELD(durable_storage_dir), .def = "",
     .help = "root of the durable streams' logs and their catalogue; empty = no durable "
             "streams; created mode 0700; an existing one must belong to the broker's user and "
             "not be writable by group or others, and one broker at a time uses it (lock file "
             ".lock); else the broker refuses to start (docs/durability.md)"},
    {.name = "durable_default", .env = {"FELIX_DURABLE_DEFAULT"}, .type = T_BOOL,
     FIELD(durable_default), .def = "false",
     .help = "streams created by their first publish are durable (needs durable_storage_dir); "
             "a subscribe to a missing stream is then refused, never creates one"},
    {.name = "durable_fsync_mode", .env = {"FELIX_DURABLE_FSYNC_MODE"}, .type = T_ENUM,
     FIELD(durable_fsync_mode), .def = "periodic", .en = &fsync_enum,
     .help = "none: page cache only; periodic: flush every durable_fsync_interval_ms; "
             "on_commit: flush before every acknowledgement (one flush serves every waiting "
             "publish)"},
    {.name = "durable_fsync_interval_ms", .env = {"FELIX_DURABLE_FSYNC_INTERVAL_MS"},
     .type = T_DUR, FIELD(durable_fsync_interval_ns), .def = "250ms", .min = MS, .max = HOUR,
     .help = "flush interval of periodic"},
    {.name = "durable_segment_bytes", .env = {"FELIX_DURABLE_SEGMENT_BYTES"}, .type = T_SIZE,
     FIELD(durable_segment_bytes), .def = "256MiB", .min = 60, .max = 64 * GiB,
     .help = "a log rolls to a new segment file at this size (header included)"},
    {.name = "durable_index_spacing_bytes", .env = {"FELIX_DURABLE_INDEX_SPACING_BYTES"},
     .type = T_SIZE, FIELD(durable_index_spacing_bytes), .def = "4KiB", .min = 1, .max = GiB,
     .help = "log bytes between two sparse index entries"},
    {.name = "durable_max_unsynced_bytes", .env = {"FELIX_DURABLE_MAX_UNSYNCED_BYTES"},
     .type = T_SIZE, FIELD(durable_max_unsynced_bytes), .def = "8MiB", .min = 0,
     .max = 64 * GiB,
     .help = "publish bytes one durable stream may have in storage (queued, or written and "
             "not yet flushed); more wait, holding their publish budget; periodic also flushes "
             "early at this many unflushed bytes; default pub_inflight_bytes / 8, at most "
             "pub_inflight_bytes; 0 = no bound"},
    {.name = "durable_flush_pipeline", .env = {"FELIX_DURABLE_FLUSH_PIPELINE"}, .type = T_BOOL,
     FIELD(durable_flush_pipeline), .def = "false",
     .help = "true: run each flush's fdatasync on a sync thread while the storage thread goes "
             "on appending (the next flush covers those appends); false: the storage thread "
             "flushes and appends nothing meanwhile (one thread fewer; no faster or slower "
             "beyond noise on 2 cores, docs/durability.md)"},
    {.name = "tenant_durable_streams_max", .env = {"FELIX_TENANT_DURABLE_STREAMS_MAX"},
     .type = T_U32, FIELD(tenant_durable_streams_max), .def = "256", .min = 0, .max = 1u << 20,
     .help = "durable streams one tenant may hold (at most max_streams_per_tenant; the "
             "default is lowered to it); more are refused \"storage quota exceeded\"; 0 = no "
             "limit"},
    {.name = "tenant_durable_bytes_max", .env = {"FELIX_TENANT_DURABLE_BYTES_MAX"},
     .type = T_SIZE, FIELD(tenant_durable_bytes_max), .def = "64GiB", .min = 0,
     .max = 1024 * TiB,
     .help = "bytes on disk of one tenant's durable logs, preallocated segments counted; an "
             "append past it is refused \"storage quota exceeded\"; at least twice "
             "durable_segment_bytes; 0 = no limit"},
    {.name = "durable_bytes_max", .env = {"FELIX_DURABLE_BYTES_MAX"}, .type = T_SIZE,
     FIELD(durable_bytes_max), .def = "0", .min = 0, .max = 1024 * TiB,
     .help = "bytes on disk of all durable logs together, counted as tenant_durable_bytes_max; "
             "at least twice durable_segment_bytes; 0 = no limit but the disk"},
    {.name = "durable_retention_bytes", .env = {"FELIX_DURABLE_RETENTION_BYTES"}, .type = T_SIZE,
     FIELD(durable_retention_bytes), .def = "0", .min = 0, .max = 1024 * TiB,
     .help = "delete a stream's oldest sealed segments while its log is larger; 0 = no bound"},
    {.name = "durable_retention_seconds", .env = {"FELIX_DURABLE_RETENTION_SECONDS"},
     .type = T_DUR, FIELD(durable_retention_ns), .def = "0", .min = 0, .max = 100000 * HOUR,
     .help = "delete sealed segments whose newest record is older; 0 = no bound"},
    {.name = "durable_retention_interval_seconds",
     .env = {"FELIX_DURABLE_RETENTION_INTERVAL_SECONDS"}, .type = T_DUR,
     FIELD(durable_retention_interval_ns), .def = "60s", .min = SEC, .max = 24 * HOUR,
     .help = "how often retention sweeps a log when a bound is set (also at each sealed "
             "segment)"},
    {.name = "durable_max_records_per_read", .env = {"FELIX_DURABLE_MAX_RECORDS_PER_READ"},
     .type = T_U32, FIELD(durable_max_records_per_read), .def = "10000", .min = 1,
     .max = 1u << 20, .help = "records per page when a subscriber replays history from disk"},
    {.name = "storage_compaction_bytes_per_sec", .env = {"FELIX_STORAGE_COMPACTION_BYTES_PER_SEC"},
     .type = T_SIZE, FIELD(storage_compaction_bytes_per_sec), .def = "64MiB", .min = 0,
     .max = 64 * GiB,
     .help = "log bytes a second the compaction of each durable cache's log may read (it copies "
             "the live records of its oldest sealed segments to the tail, then deletes them, once "
             "more than half the log is dead; docs/cache.md); 0 = no compaction"},
    {.name = "durable_preallocate", .env = {"FELIX_DURABLE_PREALLOCATE"}, .type = T_BOOL,
     FIELD(durable_preallocate), .def = "true",
     .help = "reserve durable_segment_bytes when a segment is created"},
    {.name = "durable_verify_all_on_open", .env = {"FELIX_DURABLE_VERIFY_ALL_ON_OPEN"},
     .type = T_BOOL, FIELD(durable_verify_all_on_open), .def = "false",
     .help = "check every record of sealed segments when a log is opened"},
    {.name = "durable_repair_checksum_tail", .env = {"FELIX_DURABLE_REPAIR_CHECKSUM_TAIL"},
     .type = T_BOOL, FIELD(durable_repair_checksum_tail), .def = "false",
     .help = "recovery also cuts a damaged last record of the newest segment"},
    /* cluster */
    {.name = "cluster_etcd_endpoints", .env = {"FELIX_CLUSTER_ETCD_ENDPOINTS"}, .type = T_STR,
     .section = "cluster", FIELD(cluster_etcd_endpoints), .def = "",
     .help = "comma-separated etcd client URLs (http:// or https://) of the cluster this broker "
             "joins; empty = a standalone broker (every other cluster_ key is then unused)"},
    {.name = "cluster_name", .env = {"FELIX_CLUSTER_NAME"}, .type = T_STR, FIELD(cluster_name),
     .def = "felix", .min = 1,
     .help = "the cluster's name: its keys live under /felix/<cluster_name>/ in etcd"},
    {.name = "cluster_node_id", .env = {"FELIX_CLUSTER_NODE_ID"}, .type = T_STR,
     FIELD(cluster_node_id), .def = "",
     .help = "this broker's id in the cluster, unique, at most 64 bytes (required with "
             "cluster_etcd_endpoints)"},
    {.name = "cluster_advertise", .env = {"FELIX_CLUSTER_ADVERTISE"}, .type = T_STR,
     FIELD(cluster_advertise), .def = "",
     .help = "host:port clients dial to reach this broker, sent to them in redirects (required "
             "with cluster_etcd_endpoints)"},
    {.name = "cluster_internal_bind", .env = {"FELIX_CLUSTER_INTERNAL_BIND"}, .type = T_STR,
     FIELD(cluster_internal_bind), .def = "",
     .help = "host:port of a second QUIC listener, on the first one's loop, that the other nodes "
             "dial to forward publishes (a fixed port; a wildcard host is advertised with "
             "cluster_advertise's host); empty = they dial cluster_advertise"},
    {.name = "cluster_lease_ttl_s", .env = {"FELIX_CLUSTER_LEASE_TTL_S"}, .type = T_U32,
     FIELD(cluster_lease_ttl_s), .def = "5", .min = 2, .max = 3600,
     .help = "seconds of this broker's etcd lease: when it dies its streams move after about "
             "this long; kept alive every third of it"},
    {.name = "cluster_deadline_margin_ms", .env = {"FELIX_CLUSTER_DEADLINE_MARGIN_MS"},
     .type = T_DUR, FIELD(cluster_deadline_margin_ns), .def = "1000ms", .min = 0, .max = HOUR,
     .help = "the broker stops serving its streams this long before its lease could expire in "
             "etcd (clock drift and the check-to-append span); below 2/3 of the TTL"},
    {.name = "cluster_forward", .env = {"FELIX_CLUSTER_FORWARD"}, .type = T_BOOL,
     FIELD(cluster_forward), .def = "true",
     .help = "a publish for a stream another node owns is forwarded to it (as the publisher, whose "
             "token the owner verifies again; the nodes must serve one certificate), and a "
             "subscribe to it from a client without FEATURE_REDIRECT is served from a local "
             "mirror of the stream; false = both are refused naming the owner"},
    {.name = "cluster_weight", .env = {"FELIX_CLUSTER_WEIGHT"}, .type = T_U32,
     FIELD(cluster_weight), .def = "100", .min = 1, .max = 10000,
     .help = "placement weight: a node of weight 200 is given twice the streams of one of 100"},
    {.name = "cluster_move_rate", .env = {"FELIX_CLUSTER_MOVE_RATE"}, .type = T_U32,
     FIELD(cluster_move_rate), .def = "50", .min = 0, .max = 100000,
     .help = "graceful moves of in-memory streams (rebalance, a node joining) this node starts a "
             "second at most, each gap jittered by +-50%; 0 = no moves"},
    {.name = "cluster_rebalance_on_join", .env = {"FELIX_CLUSTER_REBALANCE_ON_JOIN"},
     .type = T_BOOL, FIELD(cluster_rebalance_on_join), .def = "true",
     .help = "when a node joins, every node plans and runs a rebalance 1 to 3 s later (moves of "
             "its in-memory streams to nodes placement prefers; cluster_move_rate bounds them)"},
    {.name = "cluster_etcd_ca_file", .env = {"FELIX_CLUSTER_ETCD_CA_FILE"}, .type = T_STR,
     FIELD(cluster_etcd_ca_file), .def = "",
     .help = "PEM CA bundle that signs etcd's certificate (https endpoints); empty = the system's"},
    {.name = "cluster_etcd_cert_file", .env = {"FELIX_CLUSTER_ETCD_CERT_FILE"}, .type = T_STR,
     FIELD(cluster_etcd_cert_file), .def = "",
     .help = "PEM client certificate shown to etcd; empty = none"},
    {.name = "cluster_etcd_key_file", .env = {"FELIX_CLUSTER_ETCD_KEY_FILE"}, .type = T_STR,
     FIELD(cluster_etcd_key_file), .def = "", .help = "PEM key of cluster_etcd_cert_file"},
    {.name = "cluster_etcd_user", .env = {"FELIX_CLUSTER_ETCD_USER"}, .type = T_STR,
     FIELD(cluster_etcd_user), .def = "",
     .help = "etcd user (etcd auth enabled); needs cluster_etcd_password_file"},
    {.name = "cluster_etcd_password_file", .env = {"FELIX_CLUSTER_ETCD_PASSWORD_FILE"},
     .type = T_STR, FIELD(cluster_etcd_password_file), .def = "",
     .help = "file holding the etcd user's password (first line)"},
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
             " and the admin API, and auth_mode jwt reads its keys from jwks_file"},
    {.name = "controlplane_sync_interval_ms", .env = {"FELIX_CONTROLPLANE_SYNC_INTERVAL_MS"},
     .type = T_WARN, .help = "Felix-C has no control plane to poll"},
    {.name = "mtu_black_hole_cooldown_ms", .env = {"FELIX_MTU_BLACK_HOLE_COOLDOWN_MS"},
     .type = T_WARN, .help = "a quinn setting; ngtcp2 has no black-hole cooldown knob"},
    {.name = "ack_freq_disable", .env = {"FELIX_ACK_FREQ_DISABLE"}, .type = T_WARN,
     .help = "ngtcp2 0.12 has no ACK frequency extension"},
    {.name = "ack_eliciting_threshold", .env = {"FELIX_ACK_ELICITING_THRESHOLD"}, .type = T_WARN,
     .help = "ngtcp2 0.12 has no ACK frequency extension"},
    {.name = "pump_colocate", .env = {"FELIX_PUMP_COLOCATE"}, .type = T_WARN,
     .help = "a quinn runtime setting; Felix-C always writes on the connection's own loop"},
    {.name = "disable_timings", .env = {"FELIX_DISABLE_TIMINGS"}, .type = T_WARN,
     .help = "Felix-C records no per-request timings, so there is nothing to disable"},
    {.name = "initial_cwnd", .env = {"FELIX_INITIAL_CWND"}, .type = T_REJECT,
     .help = "ngtcp2 0.12 has no initial congestion window setting"},
    {.name = "sub_streams_per_conn", .env = {"FELIX_SUB_STREAMS_PER_CONN"}, .type = T_REJECT,
     .help = "every subscription has its own event stream (sub_stream_mode per_subscriber),"
             " so there is no stream pool to size; remove it"},
    {.name = "publish_chunk_bytes", .type = T_REJECT,
     .help = "a client key that even the original client never used; remove it"},
};
/* clang-format on */

const size_t fx_config_nkeys = sizeof(fx_config_keys) / sizeof(fx_config_keys[0]);
_Static_assert(sizeof(fx_config_keys) / sizeof(fx_config_keys[0]) <= FX_CONFIG_MAX_KEYS,
               "origin table too small");

const char fx_config_dev_yaml[] = "# felix-broker --dev (make run): local only\n"
                                  "quic_bind: 127.0.0.1:5000\n"
                                  "metrics_bind: 127.0.0.1:8080\n"
                                  "auto_create_streams: true\n"
                                  "state_dir: ./build/run-state\n"
                                  "log_level: debug\n";

const char *const fx_config_prefix_warn[FX_CONFIG_NPREFIX_WARN][2] = {
    {"cache_", "Felix-C has no cache; only the cache_* window keys are read (as QUIC windows)"},
    {"durable_", "not a setting of Felix-C's durable storage (docs/durability.md)"},
};

int fx_config_key_index(const char *name)
{
    for (size_t i = 0; i < fx_config_nkeys; i++) {
        const struct key *k = &fx_config_keys[i];
        if (strcmp(k->name, name) == 0 || (k->alias && strcmp(k->alias, name) == 0))
            return (int)i;
    }
    return -1;
}

const fx_config_origin *fx_config_origin_of(const fx_config *c, const char *name)
{
    int i = fx_config_key_index(name);
    return i < 0 ? NULL : &c->origin[i];
}

uint64_t fx_config_get_u64(const fx_config *c, int i)
{
    const struct key *k = &fx_config_keys[i];
    if (k->type == T_U32 || k->type == T_WORKERS)
        return *(const uint32_t *)fx_config_cfield(c, k);
    assert(k->type == T_SIZE || k->type == T_DUR);
    return *(const uint64_t *)fx_config_cfield(c, k);
}

/* ---- diagnostics ------------------------------------------------------- */

int fx_config_fail(fx_config_diag *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->error, sizeof(d->error), fmt, ap);
    va_end(ap);
    return FX_ECONFIG;
}

void fx_config_warn(fx_config_diag *d, const char *fmt, ...)
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

/* ---- defaults ---------------------------------------------------------- */

void fx_config_defaults(fx_config *c)
{
    char why[256];
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < fx_config_nkeys; i++) {
        const struct key *k = &fx_config_keys[i];
        if (k->type == T_WARN || k->type == T_REJECT)
            continue;
        int rv = fx_config_store_text(c, k, k->def, why, sizeof(why));
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
    free(c->groups);
    c->groups = NULL;
    c->ngroups = 0;
    free(c->caches);
    c->caches = NULL;
    c->ncaches = 0;
}

/* ---- cross-key rules --------------------------------------------------- */

/* "pub_conn_inflight_bytes = 8MiB (env FELIX_...)" */
static void describe(const fx_config *c, int i, char *buf, size_t n)
{
    char val[64], where[FX_CONFIG_PATH_MAX + 64];
    fx_config_format_value(c, i, val, sizeof(val));
    fx_config_format_where(c, &c->origin[i], where, sizeof(where));
    snprintf(buf, n, "%s = %s (%s)", fx_config_keys[i].name, val, where);
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
    return fx_config_fail(d, "%s %s %s: %s", da, rel, db, why);
}

/* Requires value(a) <= value(b); |why| says why the rule exists. */
static int rule_le(const fx_config *c, const char *a, const char *b, const char *why,
                   fx_config_diag *d)
{
    int ia = kidx(a), ib = kidx(b);
    if (fx_config_get_u64(c, ia) <= fx_config_get_u64(c, ib))
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
    uint64_t *pmax = (uint64_t *)fx_config_field(c, &fx_config_keys[im]);
    if (fx_config_get_u64(c, iw) <= *pmax)
        return 0;
    if (c->origin[im].from != FX_CONFIG_FROM_DEFAULT)
        return rule_le(c, win, max, "the window would start above its auto-tuning ceiling", d);
    *pmax = fx_config_get_u64(c, iw);
    c->origin[im].note = note;
    return 0;
}

/* Text keys |a| and |b| are set together or not at all: fails naming the
 * one that is set, its value and where it came from. */
static int rule_pair(const fx_config *c, const char *a, const char *b, fx_config_diag *d)
{
    int ia = kidx(a), ib = kidx(b);
    const char *va = fx_config_cfield(c, &fx_config_keys[ia]);
    const char *vb = fx_config_cfield(c, &fx_config_keys[ib]);
    if (!va[0] == !vb[0])
        return 0;
    char set[FX_CONFIG_PATH_MAX + 160];
    describe(c, va[0] ? ia : ib, set, sizeof(set));
    return fx_config_fail(d, "%s and %s must be set together (%s is empty; %s)", a, b,
                          va[0] ? b : a, set);
}

static int rule_tenants(const fx_config *c, fx_config_diag *d)
{
    for (size_t i = 0; i < c->nstreams; i++) {
        uint32_t n = 0;
        for (size_t j = 0; j < c->nstreams; j++)
            n += strcmp(c->streams[i].tenant, c->streams[j].tenant) == 0;
        if (n > c->max_streams_per_tenant)
            return fx_config_fail(
                d,
                "streams lists %u streams of tenant %s, more than max_streams_per_tenant "
                "(%u)",
                n, c->streams[i].tenant, c->max_streams_per_tenant);
    }
    uint32_t tenants = 0;
    for (size_t i = 0; i < c->nstreams; i++) {
        size_t j = 0;
        while (j < i && strcmp(c->streams[i].tenant, c->streams[j].tenant) != 0)
            j++;
        tenants += j == i; /* the first stream of its tenant */
    }
    if (c->max_tenants != 0 && tenants > c->max_tenants) {
        char ws[FX_CONFIG_PATH_MAX + 64], wm[FX_CONFIG_PATH_MAX + 64];
        fx_config_format_where(c, &c->origin[kidx("streams")], ws, sizeof(ws));
        fx_config_format_where(c, &c->origin[kidx("max_tenants")], wm, sizeof(wm));
        return fx_config_fail(d, "streams (%s) lists %u tenants, more than max_tenants (%u) (%s)",
                              ws, tenants, c->max_tenants, wm);
    }
    return 0;
}

/* A stream can hold max_groups_per_stream groups: more would fail at start. */
static int rule_groups(const fx_config *c, fx_config_diag *d)
{
    for (size_t i = 0; i < c->ngroups; i++) {
        const fx_config_stream *a = &c->groups[i].s;
        uint32_t n = 0;
        for (size_t j = 0; j < c->ngroups; j++) {
            const fx_config_stream *b = &c->groups[j].s;
            n += !strcmp(a->tenant, b->tenant) && !strcmp(a->ns, b->ns) &&
                 !strcmp(a->stream, b->stream);
        }
        if (n > c->max_groups_per_stream)
            return fx_config_fail(
                d,
                "groups lists %u groups of stream %s/%s/%s, more than max_groups_per_stream (%u)",
                n, a->tenant, a->ns, a->stream, c->max_groups_per_stream);
    }
    return 0;
}

/* auth_mode jwt needs keys; keys without jwt would silently check nothing. */
static int rule_auth(const fx_config *c, fx_config_diag *d)
{
    char where[FX_CONFIG_PATH_MAX + 64];
    int im = kidx("auth_mode");
    if (c->auth_mode == FX_CONFIG_AUTH_JWT && !c->jwks_file[0]) {
        fx_config_format_where(c, &c->origin[im], where, sizeof(where));
        return fx_config_fail(d,
                              "auth_mode = jwt (%s) needs jwks_file, the JWKS of the keys "
                              "that sign tokens",
                              where);
    }
    if (c->auth_mode == FX_CONFIG_AUTH_NONE && c->jwks_file[0])
        fx_config_warn(d, "jwks_file is set but auth_mode is none: tokens are not checked");
    if (c->jwt_leeway_ns % SEC != 0)
        return fx_config_fail(d, "jwt_leeway_s must be whole seconds");
    return 0;
}

bool fx_config_addr_is_loopback(const char *addr)
{
    fx_hostport hp;
    if (fx_hostport_split(addr, &hp, NULL) != 0)
        return false;
    const char *host = hp.host;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return strcasecmp(host, "localhost") == 0;
}

/* Under auth_mode none any client may act as any tenant, so the data plane
 * stays on loopback unless the operator says otherwise (allow_unauthenticated).
 * Under auth_mode jwt an untouched quic_bind listens on every interface. */
static int rule_exposure(fx_config *c, fx_config_diag *d)
{
    int ib = kidx("quic_bind");
    if (c->auth_mode == FX_CONFIG_AUTH_JWT) {
        if (c->origin[ib].from == FX_CONFIG_FROM_DEFAULT) {
            snprintf(c->quic_bind, sizeof(c->quic_bind), "%s", FX_CONFIG_QUIC_BIND_JWT);
            c->origin[ib].note = "auth_mode jwt: every interface";
        }
        return 0;
    }
    if (c->allow_unauthenticated || fx_config_addr_is_loopback(c->quic_bind))
        return 0;
    char db[FX_CONFIG_PATH_MAX + 160];
    describe(c, ib, db, sizeof(db));
    return fx_config_fail(d,
                          "%s is not a loopback address and auth_mode is none, so any client "
                          "that reaches it could act as any tenant. Set auth_mode: jwt "
                          "(docs/auth.md), bind 127.0.0.1, or set allow_unauthenticated: true "
                          "to serve unauthenticated clients on this address",
                          db);
}

/* probe_bind "auto" follows metrics_bind (port + 1, or 0 with it); anything
 * else is an address like metrics_bind, or empty for none. */
static int rule_probe(fx_config *c, fx_config_diag *d)
{
    int ip = kidx("probe_bind");
    char why[256], where[FX_CONFIG_PATH_MAX + 64];
    if (strcmp(c->probe_bind, "auto") == 0) {
        fx_hostport hp;
        if (fx_hostport_split(c->metrics_bind, &hp, NULL) != 0)
            return fx_config_fail(d, "metrics_bind '%s' is not host:port", c->metrics_bind);
        unsigned port = hp.port;
        if (port == 65535) {
            char dm[FX_CONFIG_PATH_MAX + 160];
            describe(c, kidx("metrics_bind"), dm, sizeof(dm));
            fx_config_format_where(c, &c->origin[ip], where, sizeof(where));
            return fx_config_fail(
                d, "%s: probe_bind auto would use port 65536 (%s): set probe_bind", where, dm);
        }
        fx_hostport_format(&hp, (uint16_t)(port ? port + 1 : 0), c->probe_bind,
                           sizeof(c->probe_bind));
        c->origin[ip].note = "auto: metrics_bind's host, port + 1";
        return 0;
    }
    if (!c->probe_bind[0] || fx_config_check_addr(c->probe_bind, why, sizeof(why)) == 0)
        return 0;
    fx_config_format_where(c, &c->origin[ip], where, sizeof(where));
    return fx_config_fail(d, "%s: probe_bind = \"%.80s\": %s", where, c->probe_bind, why);
}

/* Stream names in /metrics are the operator's choice; off loopback that
 * choice publishes them to the network, which deserves a line at start. */
static void rule_stream_labels(const fx_config *c, fx_config_diag *d)
{
    if (!c->metrics_stream_labels || fx_config_addr_is_loopback(c->metrics_bind))
        return;
    char where[FX_CONFIG_PATH_MAX + 64];
    fx_config_format_where(c, &c->origin[kidx("metrics_stream_labels")], where, sizeof(where));
    fx_config_warn(d,
                   "%s: metrics_stream_labels = true and metrics_bind %s is not loopback: "
                   "/metrics (no token) names every durable stream and consumer group to "
                   "whoever reaches it",
                   where, c->metrics_bind);
}

static void rule_shards(fx_config *c, fx_config_diag *d)
{
    if (c->core_shards == 0)
        return;
    int iw = kidx("workers");
    if (c->origin[iw].from != FX_CONFIG_FROM_DEFAULT && c->workers != c->core_shards) {
        char dw[FX_CONFIG_PATH_MAX + 160];
        describe(c, iw, dw, sizeof(dw));
        fx_config_warn(d, "%s is replaced by core_shards = %u (pinned workers)", dw,
                       c->core_shards);
    }
    c->workers = c->core_shards;
    c->workers_auto = false;
    c->origin[iw].note = "replaced by core_shards: one pinned worker per shard";
}

/* Pairs {a, b, why} that must hold value(a) <= value(b). */
static const char *const le_rules[][3] = {
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
    {"loopback_mtu", "max_udp_payload", "loopback datagrams stay within max_udp_payload"},
    {"control_stream_drain_timeout_ms", "shutdown_drain_timeout_ms",
     "a stream's drain is part of the whole shutdown drain"},
};

/* A byte quota must hold a full segment and the next one's reservation,
 * or no stream under it could ever roll over. */
static int rule_quota_bytes(const fx_config *c, const char *key, fx_config_diag *d)
{
    int i = kidx(key), is = kidx("durable_segment_bytes");
    uint64_t v = fx_config_get_u64(c, i), seg = fx_config_get_u64(c, is);
    if (v == 0 || v / 2 >= seg)
        return 0;
    char dv[FX_CONFIG_PATH_MAX + 160], ds[FX_CONFIG_PATH_MAX + 160];
    describe(c, i, dv, sizeof(dv));
    describe(c, is, ds, sizeof(ds));
    return fx_config_fail(d,
                          "%s is less than twice %s: a log under it could never roll to its "
                          "next segment (0 turns the bound off)",
                          dv, ds);
}

/* The durable quotas and the per-stream share of the publish budget: a
 * default follows the key it depends on, an explicit value that cannot
 * work is refused. */
static int rule_durable(fx_config *c, fx_config_diag *d)
{
    int iu = kidx("durable_max_unsynced_bytes"), it = kidx("tenant_durable_streams_max");
    if (c->origin[iu].from == FX_CONFIG_FROM_DEFAULT) {
        c->durable_max_unsynced_bytes = c->pub_inflight_bytes / 8;
        c->origin[iu].note = "pub_inflight_bytes / 8: one durable stream's share of the budget";
    } else if (c->durable_max_unsynced_bytes > c->pub_inflight_bytes) {
        return fail2(c, iu, "is larger than", kidx("pub_inflight_bytes"),
                     "one durable stream's share cannot exceed the whole publish budget", d);
    }
    if (c->tenant_durable_streams_max > c->max_streams_per_tenant) {
        if (c->origin[it].from != FX_CONFIG_FROM_DEFAULT)
            return fail2(c, it, "is larger than", kidx("max_streams_per_tenant"),
                         "a tenant's durable streams are among its streams", d);
        c->tenant_durable_streams_max = c->max_streams_per_tenant;
        c->origin[it].note = "lowered to max_streams_per_tenant";
    }
    int rv = rule_quota_bytes(c, "tenant_durable_bytes_max", d);
    return rv != 0 ? rv : rule_quota_bytes(c, "durable_bytes_max", d);
}

/* The largest cache entry (cache_max_value_bytes + cache_max_key_bytes +
 * the entry overhead, 104) must fit one worker's share of cache_max_bytes,
 * or no put of that size could ever be stored: a default value bound is
 * lowered to fit, an explicit one is refused. After rule_shards (workers). */
static int rule_caches(fx_config *c, fx_config_diag *d)
{
    uint64_t share = fx_placement_worker_share(c->cache_max_bytes, c->workers);
    uint64_t fixed = (uint64_t)c->cache_max_key_bytes + 104;
    if (c->cache_max_value_bytes + fixed <= share)
        return 0;
    int iv = kidx("cache_max_value_bytes");
    if (c->origin[iv].from == FX_CONFIG_FROM_DEFAULT && share > fixed) {
        c->cache_max_value_bytes = share - fixed;
        c->origin[iv].note = "lowered to fit one worker's share of cache_max_bytes";
        return 0;
    }
    char dv[FX_CONFIG_PATH_MAX + 160], db[FX_CONFIG_PATH_MAX + 160];
    describe(c, iv, dv, sizeof(dv));
    describe(c, kidx("cache_max_bytes"), db, sizeof(db));
    return fx_config_fail(d,
                          "%s plus cache_max_key_bytes (%u) and 104 bytes of overhead does not "
                          "fit one worker's share of %s (%llu bytes over %u workers): a put that "
                          "large could never be stored",
                          dv, (unsigned)c->cache_max_key_bytes, db, (unsigned long long)share,
                          (unsigned)c->workers);
}

/* group_backoff_ms: "d1,d2,...": up to 8 delays of 0..43200000 ms. */
static int rule_backoff(fx_config *c, fx_config_diag *d)
{
    const char *s = c->group_backoff_ms;
    c->group_nbackoff = 0;
    while (*s != '\0') {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (end == s || errno != 0 || v > 43200000ull || (*end != ',' && *end != '\0') ||
            c->group_nbackoff == 8) {
            char where[FX_CONFIG_PATH_MAX + 64];
            fx_config_format_where(c, &c->origin[kidx("group_backoff_ms")], where, sizeof(where));
            return fx_config_fail(d,
                                  "%s: group_backoff_ms = \"%s\": expected at most 8 delays in "
                                  "ms (0..43200000) separated by commas, like \"1000,5000,30000\"",
                                  where, c->group_backoff_ms);
        }
        c->group_backoff[c->group_nbackoff++] = (uint32_t)v;
        s = *end == ',' ? end + 1 : end;
    }
    return 0;
}

/* With cluster_etcd_endpoints: an id and an address for redirects, and a
 * margin that one late keep-alive cannot cross. */
static int rule_cluster(fx_config *c, fx_config_diag *d)
{
    if (!c->cluster_etcd_endpoints[0])
        return 0;
    if (!c->cluster_node_id[0] || strlen(c->cluster_node_id) > 64)
        return fx_config_fail(d, "cluster_etcd_endpoints is set: cluster_node_id must name this "
                                 "broker (1 to 64 bytes, unique in the cluster)");
    if (!c->cluster_advertise[0])
        return fx_config_fail(d, "cluster_etcd_endpoints is set: cluster_advertise must give the "
                                 "host:port clients dial to reach this broker");
    char why[256];
    if (fx_config_check_addr(c->cluster_advertise, why, sizeof(why)) != 0)
        return fx_config_fail(d, "cluster_advertise = \"%s\": %s", c->cluster_advertise, why);
    if (c->cluster_internal_bind[0]) {
        fx_hostport hp;
        if (fx_config_check_addr(c->cluster_internal_bind, why, sizeof(why)) != 0)
            return fx_config_fail(d, "cluster_internal_bind = \"%s\": %s", c->cluster_internal_bind,
                                  why);
        if (fx_hostport_split(c->cluster_internal_bind, &hp, NULL) != 0 || hp.port == 0)
            return fx_config_fail(d, "cluster_internal_bind = \"%s\": give a fixed port (the "
                                     "other nodes learn it from etcd before this broker binds it)",
                                  c->cluster_internal_bind);
        if (strcmp(c->cluster_internal_bind, c->quic_bind) == 0)
            return fx_config_fail(d, "cluster_internal_bind = \"%s\" is quic_bind: give the "
                                     "internal listener its own port",
                                  c->cluster_internal_bind);
    }
    if (c->cluster_deadline_margin_ns * 3 >= (uint64_t)c->cluster_lease_ttl_s * 2 * SEC)
        return fail2(c, kidx("cluster_deadline_margin_ms"), "is not below 2/3 of",
                     kidx("cluster_lease_ttl_s"),
                     "one late keep-alive would suspend a healthy broker", d);
    if ((c->cluster_etcd_user[0] != 0) != (c->cluster_etcd_password_file[0] != 0))
        return fx_config_fail(d, "cluster_etcd_user and cluster_etcd_password_file go together");
    return rule_pair(c, "cluster_etcd_cert_file", "cluster_etcd_key_file", d);
}

static int check_rules(fx_config *c, fx_config_diag *d)
{
    int rv;
    for (size_t i = 0; i < sizeof(le_rules) / sizeof(le_rules[0]); i++) {
        if ((rv = rule_le(c, le_rules[i][0], le_rules[i][1], le_rules[i][2], d)))
            return rv;
    }
    if ((rv = rule_window(c, "quic_stream_recv_window", "quic_stream_recv_window_max",
                          "raised to quic_stream_recv_window", d)) ||
        (rv = rule_window(c, "quic_conn_recv_window", "quic_conn_recv_window_max",
                          "raised to quic_conn_recv_window", d)))
        return rv;
    fx_config_derive_memory(c); /* after the windows: it keeps a raised ceiling */
    if (c->loopback_mtu != 0 && c->loopback_mtu < 1200)
        return fx_config_fail(d,
                              "loopback_mtu: %llu is below QUIC's 1200-byte minimum "
                              "(0 turns the loopback rule off)",
                              (unsigned long long)c->loopback_mtu);
    if (c->keepalive_interval_ns && c->keepalive_interval_ns >= c->idle_timeout_ns)
        return fail2(c, kidx("keepalive_interval_ms"), "is not below", kidx("idle_timeout_ms"),
                     "keep-alives must come more often than the idle timeout", d);
    if ((rv = rule_pair(c, "tls_cert_file", "tls_key_file", d)) ||
        (rv = rule_pair(c, "admin_tls_cert_file", "admin_tls_key_file", d)))
        return rv;
    if (c->durable_default && !c->durable_storage_dir[0]) {
        char where[FX_CONFIG_PATH_MAX + 64];
        fx_config_format_where(c, &c->origin[kidx("durable_default")], where, sizeof(where));
        return fx_config_fail(d,
                              "%s: durable_default = true needs durable_storage_dir: a durable "
                              "stream needs somewhere to keep its log",
                              where);
    }
    for (size_t i = 0; i < c->ncaches && !c->durable_storage_dir[0]; i++) {
        if (!c->caches[i].durable)
            continue;
        char where[FX_CONFIG_PATH_MAX + 64];
        fx_config_format_where(c, &c->origin[kidx("caches")], where, sizeof(where));
        return fx_config_fail(d,
                              "%s: cache %s/%s/%s@durable needs durable_storage_dir: a durable "
                              "cache needs somewhere to keep its log",
                              where, c->caches[i].tenant, c->caches[i].ns, c->caches[i].stream);
    }
    if ((rv = rule_durable(c, d)) || (rv = rule_tenants(c, d)) || (rv = rule_groups(c, d)) ||
        (rv = rule_backoff(c, d)) || (rv = rule_auth(c, d)) || (rv = rule_exposure(c, d)) ||
        (rv = rule_probe(c, d)) || (rv = rule_cluster(c, d)))
        return rv;
    rule_shards(c, d);
    if ((rv = rule_caches(c, d)))
        return rv;
    rule_stream_labels(c, d);
    return fx_config_check_memory(c, d);
}

/* ---- load -------------------------------------------------------------- */

static const char *env_lookup(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (size_t j = 0; envp && envp[j]; j++) {
        if (strncmp(envp[j], name, n) == 0 && envp[j][n] == '=')
            return envp[j] + n + 1;
    }
    return NULL;
}

int fx_config_load(fx_config *c, const fx_config_src *src, fx_config_diag *d)
{
    memset(d, 0, sizeof(*d));
    const char *path = src->path;
    if (!path && !src->text) {
        path = env_lookup(src->envp, "FELIX_BROKER_CONFIG");
        if (path && !*path)
            return fx_config_fail(d, "env FELIX_BROKER_CONFIG is set but empty");
    }
    int rv = fx_config_load_file_layer(c, src, path, d);
    if (rv)
        return rv;
    if ((rv = fx_config_load_env_layer(c, src->envp, d)))
        return rv;
    for (size_t i = 0; i < src->nsets; i++) {
        if ((rv = fx_config_load_flag(c, src->sets[i], d)))
            return rv;
    }
    if ((rv = fx_config_resolve_memory_target(c, src->memory_target_bytes, d)))
        return rv;
    return check_rules(c, d);
}
