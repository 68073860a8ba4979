/* Broker configuration: one registry of every key (YAML name, FELIX_* env
 * names, type, default, bounds, help), loaded in layers
 * defaults < YAML file < environment < command-line flags, validated key by
 * key and across keys, and printed back with the source of every value.
 * Main thread only (start-up); the loaded fx_config is then read-only and may
 * be read from any thread. docs/configuration.md describes every key. */
#ifndef FX_SERVER_CONFIG_H
#define FX_SERVER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "storage/syncpol.h"

#define FX_CONFIG_PATH_MAX 4096 /* file-name fields, including the NUL */
#define FX_CONFIG_ADDR_MAX 256  /* host:port fields, including the NUL */
#define FX_CONFIG_NAME_MAX 256  /* tenant / namespace / stream, including the NUL */
#define FX_CONFIG_MAX_STREAMS 4096
#define FX_CONFIG_GROUP_MAX 129 /* group name, 1-128 bytes, including the NUL */
#define FX_CONFIG_MAX_GROUPS 4096
/* Most caches the `caches:` list declares. */
#define FX_CONFIG_MAX_CACHES 4096
#define FX_CONFIG_MAX_KEYS 200 /* capacity of the per-key origin table */
#define FX_CONFIG_MAX_WARNINGS 32
#define FX_CONFIG_MAX_FILE_BYTES (1024 * 1024)

/* Queue policy when a bounded queue is full (checkpoints 5 and 6). */
typedef enum fx_config_policy {
    FX_CONFIG_POLICY_BLOCK,
    FX_CONFIG_POLICY_DROP_NEW,
    FX_CONFIG_POLICY_DROP_OLD,
} fx_config_policy;

/* How a subscription picks its writer lane. */
typedef enum fx_config_lane_shard {
    FX_CONFIG_LANE_SHARD_AUTO,
    FX_CONFIG_LANE_SHARD_SUBSCRIBER_ID_HASH,
    FX_CONFIG_LANE_SHARD_CONNECTION_ID_HASH,
    FX_CONFIG_LANE_SHARD_ROUND_ROBIN_PIN,
} fx_config_lane_shard;

typedef enum fx_config_sub_stream_mode {
    FX_CONFIG_SUB_STREAM_PER_SUBSCRIBER, /* one event uni stream per subscription */
} fx_config_sub_stream_mode;

typedef enum fx_config_log_level {
    FX_CONFIG_LOG_ERROR,
    FX_CONFIG_LOG_WARN,
    FX_CONFIG_LOG_INFO,
    FX_CONFIG_LOG_DEBUG,
    FX_CONFIG_LOG_TRACE,
} fx_config_log_level;

typedef enum fx_config_auth_mode {
    FX_CONFIG_AUTH_NONE, /* any tenant, any token */
    FX_CONFIG_AUTH_JWT,  /* Ed25519 JWTs verified against jwks_file */
} fx_config_auth_mode;

/* When a durable stream's log is flushed to the device (docs/durability.md). */

/* Where a value came from. */
typedef enum fx_config_from {
    FX_CONFIG_FROM_DEFAULT,
    FX_CONFIG_FROM_FILE,
    FX_CONFIG_FROM_ENV,
    FX_CONFIG_FROM_FLAG,
} fx_config_from;

/* The source of one key's value. |name| is the env variable (FROM_ENV) or
 * the YAML alias used in the file or flag (NULL when the key's own name was
 * used); it points into the static registry. |note| is a static remark that
 * print-config appends ("raised to quic_conn_recv_window"), or NULL. */
typedef struct fx_config_origin {
    fx_config_from from;
    uint32_t line, col; /* FROM_FILE: 1-based position of the value */
    const char *name;
    const char *note;
} fx_config_origin;

/* One pre-created stream from the `streams:` list. */
typedef struct fx_config_stream {
    char tenant[FX_CONFIG_NAME_MAX];
    char ns[FX_CONFIG_NAME_MAX];
    char stream[FX_CONFIG_NAME_MAX];
    bool durable; /* caches only: "tenant/namespace/cache@durable" */
} fx_config_stream;

/* Where a pre-created group starts (the values of enum
 * fx_broker_group_start, broker.h). */
typedef enum fx_config_group_start {
    FX_CONFIG_GROUP_START_ALL,    /* "@all" (default): the oldest record held */
    FX_CONFIG_GROUP_START_NEW,    /* "@new": the next record appended */
    FX_CONFIG_GROUP_START_LAST,   /* "@last": the last record appended */
    FX_CONFIG_GROUP_START_OFFSET, /* "@<offset>": |offset| */
} fx_config_group_start;

/* One pre-created consumer group from the `groups:` list,
 * "tenant/namespace/stream/group[@start]". */
typedef struct fx_config_group {
    fx_config_stream s;
    char group[FX_CONFIG_GROUP_MAX];
    fx_config_group_start start;
    uint64_t offset; /* FX_CONFIG_GROUP_START_OFFSET only */
} fx_config_group;

/* The effective configuration. Sizes are bytes, durations nanoseconds (the
 * unit of fx_loop timers); a duration field drops the key's unit suffix and
 * ends in _ns (key ack_wait_timeout_ms -> field ack_wait_timeout_ns). */
typedef struct fx_config {
    /* listeners and security */
    char quic_bind[FX_CONFIG_ADDR_MAX];
    char metrics_bind[FX_CONFIG_ADDR_MAX];
    char admin_token[FX_CONFIG_ADDR_MAX]; /* bearer token of mutating admin calls; "" = none */
    bool metrics_stream_labels;           /* /metrics names durable streams (per-stream gauges) */
    char admin_allowed_hosts[FX_CONFIG_ADDR_MAX]; /* extra Host names, comma-separated */
    char probe_bind[FX_CONFIG_ADDR_MAX];          /* /live + /ready listener; "" = none */
    char admin_tls_cert_file[FX_CONFIG_PATH_MAX]; /* "" = plain HTTP */
    char admin_tls_key_file[FX_CONFIG_PATH_MAX];
    char tls_cert_file[FX_CONFIG_PATH_MAX]; /* "" = self-signed for localhost */
    char tls_key_file[FX_CONFIG_PATH_MAX];
    fx_config_auth_mode auth_mode;
    bool allow_unauthenticated;         /* auth_mode none may bind a non-loopback quic_bind */
    char jwks_file[FX_CONFIG_PATH_MAX]; /* required when auth_mode is jwt */
    char jwt_issuer[FX_CONFIG_NAME_MAX];
    char jwt_audience[FX_CONFIG_NAME_MAX];
    uint64_t jwt_leeway_ns; /* clock skew allowed on exp and nbf */
    char state_dir[FX_CONFIG_PATH_MAX];
    fx_config_log_level log_level;
    /* streams */
    bool auto_create_streams;
    uint32_t max_streams_per_tenant;
    fx_config_stream *streams; /* owned; freed by fx_config_deinit() */
    size_t nstreams;
    fx_config_group *groups; /* owned; freed by fx_config_deinit() */
    size_t ngroups;
    /* caches declared at start: |stream| holds the cache's name */
    fx_config_stream *caches; /* owned; freed by fx_config_deinit() */
    size_t ncaches;
    uint32_t log_capacity;
    uint64_t log_capacity_bytes;
    uint64_t tenant_retained_bytes; /* 0 = no limit */
    uint64_t retained_bytes_limit;  /* 0 = no limit */
    uint64_t stream_idle_expiry_ns; /* 0 = never */
    uint32_t max_tenants;           /* 0 = no limit */
    /* auto-creation refused after an admin DELETE; 0 = off */
    uint64_t stream_delete_tombstone_ns;
    /* threads */
    uint32_t workers;  /* effective worker loops: core_shards if > 0 */
    bool workers_auto; /* workers came from "auto" (online CPUs) */
    uint32_t core_shards;
    uint32_t io_threads;
    /* memory */
    uint64_t memory_limit_bytes;     /* the target in effect (detected when the key is 0) */
    uint64_t allocator_retain_bytes; /* malloc trim threshold; 0 = glibc defaults */
    uint64_t allocator_idle_trim_ns; /* idle time before malloc_trim; 0 = never */
    /* connections and QUIC */
    uint32_t max_connections;
    uint32_t max_connections_per_ip;      /* 0 = no limit */
    uint64_t auth_timeout_ns;             /* 0 = never */
    uint32_t max_unauth_streams_per_conn; /* streams waiting for auth */
    uint32_t auth_failures_per_conn;      /* failed verifications before the close */
    uint32_t auth_rate_per_ip;            /* verifications per second; 0 = no limit */
    uint64_t preauth_max_bytes;           /* pre-auth frame bytes, all connections */
    uint64_t idle_timeout_ns;
    uint64_t keepalive_interval_ns; /* 0 = off */
    uint64_t quic_stream_recv_window;
    uint64_t quic_conn_recv_window;
    uint64_t quic_stream_recv_window_max;
    uint64_t quic_conn_recv_window_max;
    uint64_t quic_unacked_send_bytes;
    uint64_t max_frame_bytes;
    /* UDP transport */
    uint64_t initial_mtu;
    uint64_t mtu_upper_bound;
    uint64_t max_udp_payload;
    uint64_t loopback_mtu; /* pinned for peers on this host; 0 = off */
    uint64_t udp_send_buffer;
    uint64_t udp_recv_buffer;
    uint64_t conn_stats_ns; /* 0 = off */
    /* publish pipeline */
    bool ack_on_commit;
    uint64_t publish_queue_wait_timeout_ns;
    uint64_t ack_wait_timeout_ns;
    uint32_t pub_queue_depth;
    uint64_t pub_inflight_bytes;
    uint64_t pub_conn_inflight_bytes;
    bool pub_ingress_wait;
    uint64_t frame_read_timeout_ns;
    /* subscribe pipeline */
    uint32_t subscriber_queue_capacity;
    fx_config_policy subscriber_queue_policy;
    uint64_t subscriber_block_timeout_ns; /* 0 = never */
    uint32_t max_subscriptions_per_conn;
    uint32_t group_visibility_timeout_ms;
    uint32_t group_max_visibility_ms;
    uint32_t group_max_wait_ms;
    uint64_t cache_max_bytes;
    uint64_t cache_tenant_max_bytes;
    uint64_t cache_max_value_bytes;
    uint32_t cache_max_key_bytes;
    uint32_t group_max_attempts;
    uint32_t group_max_in_flight;
    char group_backoff_ms[FX_CONFIG_ADDR_MAX]; /* "1000,5000,30000": checked and parsed into: */
    uint32_t group_backoff[8];
    uint32_t group_nbackoff;
    uint32_t max_groups_per_stream;
    uint64_t group_hold_timeout_ns; /* 0 = never */
    uint32_t subscriber_writer_lanes;
    uint32_t max_subscriber_writer_lanes;
    uint32_t subscriber_lane_queue_depth;
    fx_config_policy subscriber_lane_queue_policy;
    fx_config_lane_shard subscriber_lane_shard;
    bool subscriber_single_writer_per_conn;
    uint32_t subscriber_flush_max_items;
    uint64_t subscriber_flush_max_delay_ns;
    uint64_t subscriber_max_bytes_per_write;
    fx_config_sub_stream_mode sub_stream_mode;
    uint32_t event_batch_max_events;
    uint64_t event_batch_max_bytes;
    uint64_t event_batch_max_delay_ns;
    uint32_t fanout_batch_size;
    /* durable storage */
    char durable_storage_dir[FX_CONFIG_PATH_MAX]; /* "" = no durable streams */
    /* cluster (docs/cluster.md): "" endpoints = a standalone broker */
    char cluster_etcd_endpoints[FX_CONFIG_PATH_MAX];
    char cluster_name[FX_CONFIG_ADDR_MAX];
    char cluster_node_id[FX_CONFIG_ADDR_MAX];
    char cluster_advertise[FX_CONFIG_ADDR_MAX];
    char cluster_internal_bind[FX_CONFIG_ADDR_MAX]; /* "" = nodes dial cluster_advertise */
    uint32_t cluster_lease_ttl_s;
    uint64_t cluster_deadline_margin_ns;
    uint32_t cluster_weight;
    bool cluster_forward;
    char cluster_etcd_ca_file[FX_CONFIG_PATH_MAX];
    char cluster_etcd_cert_file[FX_CONFIG_PATH_MAX];
    char cluster_etcd_key_file[FX_CONFIG_PATH_MAX];
    char cluster_etcd_user[FX_CONFIG_ADDR_MAX];
    char cluster_etcd_password_file[FX_CONFIG_PATH_MAX];
    bool durable_default;                         /* auto-created streams are durable */
    fx_fsync_mode durable_fsync_mode;
    uint64_t durable_fsync_interval_ns;
    uint64_t durable_segment_bytes;
    uint64_t durable_index_spacing_bytes;
    uint64_t durable_max_unsynced_bytes; /* bytes in storage per stream; 0 = no bound */
    bool durable_flush_pipeline;         /* fdatasync off the storage thread */
    uint32_t tenant_durable_streams_max; /* 0 = no limit */
    uint64_t tenant_durable_bytes_max;   /* 0 = no limit */
    uint64_t durable_bytes_max;          /* 0 = no limit */
    uint64_t durable_retention_bytes;    /* 0 = no size bound */
    uint64_t durable_retention_ns;       /* 0 = no age bound */
    uint64_t durable_retention_interval_ns;
    uint32_t durable_max_records_per_read;
    uint64_t storage_compaction_bytes_per_sec; /* 0 = no compaction of durable caches' logs */
    bool durable_preallocate;
    bool durable_verify_all_on_open;
    bool durable_repair_checksum_tail;
    /* shutdown */
    uint64_t control_stream_drain_timeout_ns;
    uint64_t shutdown_drain_timeout_ns;

    /* provenance: the file that was loaded ("" if none) and, per registry
     * key, where its value came from */
    char file[FX_CONFIG_PATH_MAX];
    fx_config_origin origin[FX_CONFIG_MAX_KEYS];
} fx_config;

/* Where fx_config_load() reads from. Every field may be NULL / 0. */
typedef struct fx_config_src {
    /* YAML file; NULL = $FELIX_BROKER_CONFIG from |envp|, else no file. */
    const char *path;
    /* YAML text used instead of a file (e.g. fx_config_dev_yaml), reported
     * in messages as |text_name|. Ignored when NULL. */
    const char *text;
    const char *text_name;
    /* NULL-terminated "NAME=value" array (like environ); NULL = empty. */
    char *const *envp;
    /* "key=value" overrides from --set, applied in order (last wins). */
    const char *const *sets;
    size_t nsets;
    /* The memory target used when memory_limit_bytes is 0, instead of the
     * host's (tests); 0 = detect it (fx_config_host_memory()). */
    uint64_t memory_target_bytes;
} fx_config_src;

/* Messages for the caller: |error| is set ("" otherwise) when loading fails;
 * |warnings| are collected in either case and the caller logs them. At most
 * FX_CONFIG_MAX_WARNINGS are kept; |warnings_dropped| counts the rest. */
typedef struct fx_config_diag {
    char error[1024];
    char warnings[FX_CONFIG_MAX_WARNINGS][320];
    size_t nwarnings;
    size_t warnings_dropped;
} fx_config_diag;

/* A development configuration (QUIC 127.0.0.1:5000, admin 127.0.0.1:8080,
 * auto-created streams, state in ./build/run-state), used by
 * `felix-broker --dev` and `make run`. */
extern const char fx_config_dev_yaml[];

/* Fills |c| with the documented defaults (workers = online CPUs). |c| may be
 * uninitialised; it owns no memory afterwards but must still be released with
 * fx_config_deinit() once loaded. Main thread. */
void fx_config_defaults(fx_config *c);

/* Frees what |c| owns (the streams and groups lists). |c| may then be passed to
 * fx_config_defaults() again. NULL is ignored. */
void fx_config_deinit(fx_config *c);

/* Layers the YAML file (or text), then the environment, then the --set
 * overrides of |src| on top of |c| (initialised by fx_config_defaults()),
 * then checks the cross-key rules. Returns 0, or FX_ECONFIG with a message in
 * |diag|->error naming the key, the value and where it came from; -ENOMEM.
 * Warnings (keys of features Felix-C does not have, unknown FELIX_* variables,
 * replaced settings) go to |diag|->warnings. On failure |c| holds a partial
 * result that must still be released with fx_config_deinit(). |diag| may not
 * be NULL. Main thread (reads the file). */
int fx_config_load(fx_config *c, const fx_config_src *src, fx_config_diag *diag);

/* Writes the effective configuration to |out| as YAML that
 * fx_config_load() accepts, one key per line, each followed by a comment
 * naming its source ("pub_queue_depth: 64  # default"). Returns 0 or -EIO. */
int fx_config_print(const fx_config *c, FILE *out);

/* Writes the reference tables of docs/configuration.md (every key with its
 * env names, type, default and meaning; the warned and rejected keys) as
 * Markdown. Generated from the registry, so the docs cannot drift. Returns 0
 * or -EIO. */
int fx_config_print_markdown(FILE *out);

/* quic_bind when auth_mode is jwt and quic_bind is not set (under auth_mode
 * none the default is 127.0.0.1:5000). */
#define FX_CONFIG_QUIC_BIND_JWT "0.0.0.0:5000"

/* True if |addr| ("host:port" or "[v6]:port", as quic_bind) names a loopback
 * address: 127.0.0.0/8, ::1, ::ffff:127.x.y.z or the name localhost. Any
 * other name is treated as reachable from the network. */
bool fx_config_addr_is_loopback(const char *addr);

/* The memory bound of a configuration (docs/configuration.md, "Memory
 * bound"), in bytes. */
typedef struct fx_config_bound {
    uint64_t per_conn; /* quic_conn_recv_window_max + quic_unacked_send_bytes */
    uint64_t conns;    /* max_connections x per_conn */
    uint64_t ingress;  /* pub_inflight_bytes */
    uint64_t retained; /* allocator_retain_bytes */
    /* pre-created streams (those of streams and those groups name that
     * streams does not) x (log_capacity_bytes + max_frame_bytes) */
    uint64_t rings;
    /* With durable_storage_dir: workers x (one append's encoding copy and
     * iov, max_frame_bytes + 65,536 x 44, and one replay page being read,
     * max(1 MiB, max_frame_bytes) + durable_max_records_per_read x 16), the
     * buffers storage and replay threads hold only while they work. */
    uint64_t durable;
    uint64_t caches; /* cache_max_bytes: the in-memory caches' entries */
    uint64_t total;
} fx_config_bound;

/* Computes the bound of |c| into |b|. */
void fx_config_memory_bound(const fx_config *c, fx_config_bound *b);

/* Writes one line describing the bound of |c|, its terms and the memory
 * target with its source, into |buf| (|n| bytes). */
void fx_config_format_bound(const fx_config *c, char *buf, size_t n);

/* The default memory target: the smallest cgroup v2 memory.max from this
 * process's cgroup (read from |proc_cgroup|, e.g. "/proc/self/cgroup") up to
 * the root of the hierarchy mounted at |cgroup_root| ("/sys/fs/cgroup") when
 * one is set and below |ram|, else half of |ram|. |*psource| gets a static
 * description ("cgroup memory.max" or "half of RAM"). Returns bytes (0 when
 * nothing is known). */
uint64_t fx_config_host_memory(const char *proc_cgroup, const char *cgroup_root, uint64_t ram,
                               const char **psource);

/* Returns the registry index of YAML key (or alias) |name|, or -1. */
int fx_config_key_index(const char *name);

/* Returns the origin of key |name| in |c|, or NULL if there is no such key. */
const fx_config_origin *fx_config_origin_of(const fx_config *c, const char *name);

#endif
