/* fx_broker: one running broker instance, the data plane that joins the
 * registry, ingress, streams, feeders and the QUIC transport. It owns the
 * worker loops (stream s runs on worker handle_id % workers), optional io
 * loops, one QUIC server endpoint and the process-wide publish budget.
 * The options are a plain struct (the daemon fills it from fx_config), so this
 * module does not depend on src/server. Control functions: main thread (or a
 * test's thread), never from a broker loop. */
#ifndef FX_BROKER_BROKER_H
#define FX_BROKER_BROKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/queue.h"
#include "broker/registry.h"
#include "quic/quic.h"
#include "storage/syncpol.h"

typedef struct fx_broker fx_broker;

/* One pre-created stream. */
typedef struct fx_broker_stream_name {
    const char *tenant;
    const char *ns;
    const char *stream;
} fx_broker_stream_name;

/* What fx_broker_auth.allows() is asked about. */
typedef enum fx_broker_auth_action {
    FX_BROKER_AUTH_PUBLISH,       /* every publish: JSON, binary, acked or not */
    FX_BROKER_AUTH_SUBSCRIBE,     /* every subscribe */
    FX_BROKER_AUTH_GROUP_CONSUME, /* group_poll/ack/nack/extend/dead_letter(s)/describe */
    FX_BROKER_AUTH_GROUP_MANAGE,  /* group_seek, group_delete */
    FX_BROKER_AUTH_CACHE_READ,    /* cache_get, on the cache's names (tenant, ns, cache) */
    FX_BROKER_AUTH_CACHE_WRITE,   /* cache_put, on the cache's names */
} fx_broker_auth_action;

/* Client authentication, plugged in by the daemon (src/server/authn.h
 * implements it with Ed25519 JWTs) so that this module does not depend on
 * src/server. With |verify| NULL (the default, auth_mode none) any token is
 * accepted, the stream is bound to the tenant its auth message names and
 * every publish and subscribe of that tenant is allowed. Otherwise all three
 * callbacks must be set. They run on the connection loops, several at once,
 * so they must be thread-safe and must not block; |user| is passed back.
 *
 * verify: checks |token| (|len| bytes, NUL-terminated) that a client
 *   presented for |tenant| at |now_s| (Unix seconds). Returns 0 and an
 *   opaque claims object in *|pctx| (owned by the broker, released with
 *   |release|), or non-zero with a one-line reason in |why| (|whylen| bytes)
 *   for the log only: the client learns no more than "auth failed".
 * allows: returns true if the claims |ctx| permit |action| on stream
 *   |tenant|/|ns|/|stream|. Pure: the broker caches the answer per QUIC
 *   stream and stream name.
 * release: frees |ctx| (called once per successful verify; any thread).
 * expiry (optional): the Unix second after which |ctx| no longer holds (the
 *   token's exp plus the leeway), or INT64_MAX. Streams and subscriptions
 *   authenticated with it are ended then.
 * key_valid (optional): false once the key that signed |ctx| is no longer in
 *   the key set (asked after fx_broker_auth_reloaded). */
typedef struct fx_broker_auth {
    int (*verify)(void *user, const char *tenant, const char *token, size_t len, int64_t now_s,
                  void **pctx, char *why, size_t whylen);
    bool (*allows)(void *user, const void *ctx, fx_broker_auth_action action, const char *tenant,
                   const char *ns, const char *stream);
    void (*release)(void *user, void *ctx);
    int64_t (*expiry)(void *user, const void *ctx);
    bool (*key_valid)(void *user, const void *ctx);
    void *user;
} fx_broker_auth;

/* How a subscription picks its writer lane among its connection's lanes
 * (fixed for its life). */
typedef enum fx_broker_lane_shard {
    FX_BROKER_LANE_AUTO = 0,           /* same as SUBSCRIBER_ID_HASH */
    FX_BROKER_LANE_SUBSCRIBER_ID_HASH, /* fx_broker_lane_hash(subscription id) % lanes */
    FX_BROKER_LANE_CONNECTION_ID_HASH, /* fx_broker_lane_hash(connection id) % lanes */
    FX_BROKER_LANE_ROUND_ROBIN_PIN,    /* the connection's n-th subscription: n % lanes */
} fx_broker_lane_shard;

struct fx_sio;

/* Durable storage (docs/durability.md): with |dir| set, streams created
 * durable keep their messages in a log under it. */
typedef struct fx_broker_durable_opts {
    const char *dir;              /* storage root; NULL or "" = no durable streams */
    bool durable_default;         /* auto-created streams are durable */
    fx_fsync_mode fsync_mode;     /* periodic */
    uint64_t fsync_interval_ns;   /* periodic; 250 ms */
    uint64_t segment_bytes;       /* 256 MiB */
    uint64_t index_spacing_bytes; /* 4096 */
    uint64_t max_unsynced_bytes;  /* bytes in storage per stream; 0 = no bound; 8 MiB */
    /* Run each flush's fdatasync on the storage thread, which then appends
     * nothing meanwhile (the default, durable_flush_pipeline: false); false
     * here: a sync thread runs it while the storage thread goes on
     * appending. */
    bool flush_inline;
    /* Quotas (docs/durability.md, "Quotas"): durable streams per tenant
     * (256), bytes on disk per tenant (64 GiB) and of the whole broker (0 =
     * no bound), preallocation counted. 0 = no limit. */
    uint32_t tenant_streams_max;
    uint64_t tenant_bytes_max;
    uint64_t bytes_max;
    uint64_t retention_bytes;       /* 0 = no bound */
    uint64_t retention_ns;          /* 0 = no bound */
    uint64_t retention_interval_ns; /* sweep period with a bound set; 60 s */
    uint32_t max_records_per_read;  /* records per replay page; 10,000 */
    /* Bytes a second each durable cache's log compaction may read
     * (storage_compaction_bytes_per_sec); 0 = no compaction; 64 MiB. */
    uint64_t compaction_bytes_per_sec;
    bool preallocate;
    bool verify_all_on_open;
    bool repair_checksum_tail;
    /* At start, cut a damaged log at its first bad record (reported) instead
     * of quarantining its stream (felix-broker --repair-durable). */
    bool repair;
    /* Filled by a failed fx_broker_new when durable storage was the cause:
     * the catalogue, or a catalogued stream the registry refused (may be
     * NULL; |error_len| bytes). A damaged log does not fail the start. */
    char *error;
    size_t error_len;
    struct fx_sio *io; /* NULL: the real file system; tests inject faults here */
} fx_broker_durable_opts;

/* Every setting the data plane uses; fx_broker_opts_default() writes the
 * documented defaults (felix-facts.md §4, ARCHITECTURE.md). Sizes in bytes,
 * durations in nanoseconds. Strings are borrowed until fx_broker_new returns,
 * except |quic.*| strings, which must outlive the broker. */
struct fx_cluster;

typedef struct fx_broker_opts {
    /* Cluster membership and stream ownership (src/cluster/cluster.h), or
     * NULL for a standalone broker. Borrowed: it outlives the broker. */
    struct fx_cluster *cluster;
    const char *bind_ip; /* numeric; "127.0.0.1" */
    uint16_t port;       /* 0 picks one (fx_broker_port) */
    /* The broker-to-broker listener of a cluster (cluster_internal_bind):
     * a second QUIC server on the first one's loop that the other nodes'
     * forwarders and mirrors dial, served like the first (the same TLS
     * identity, authentication and limits). NULL: none. */
    const char *internal_ip; /* numeric */
    uint16_t internal_port;  /* 0 picks one (fx_broker_internal_port) */
    fx_quic_opts quic;   /* transport settings (windows, unacked cap, TLS files) */
    uint32_t workers;    /* worker loops, >= 1 */
    bool pin_workers;    /* core_shards: pin worker i to CPU i */
    uint32_t io_threads; /* 0: the endpoint runs on worker 0 (shared mode) */
    /* Connections served at once; a connection beyond it is closed with the
     * reason "too many connections" (counted). 0 = no limit. */
    uint32_t max_connections;
    /* Limits before authentication (docs/auth.md). A connection none of
     * whose streams authenticated within |auth_timeout_ns| is closed (0 =
     * never); a stream not authenticated by then is reset. At most
     * |max_connections_per_ip| connections per source address (an IPv6 /64;
     * 0 = no limit) and |max_unauth_streams_per_conn| streams per connection
     * that have not authenticated yet (more are reset). After
     * |auth_failures_per_conn| failed verifications the connection is closed;
     * each source address may have |auth_rate_per_ip| tokens verified per
     * second (0 = no limit); attempts beyond it are refused unverified.
     * Unauthenticated streams of all connections together hold at most
     * |preauth_max_bytes| frame bytes (> 0); a frame header that would pass
     * it resets its stream. */
    uint64_t auth_timeout_ns;
    uint32_t max_connections_per_ip;
    uint32_t max_unauth_streams_per_conn;
    uint32_t auth_failures_per_conn;
    uint32_t auth_rate_per_ip;
    uint64_t preauth_max_bytes;
    /* Authentication (all NULL: auth_mode none). |auth.user| must outlive
     * the broker. */
    fx_broker_auth auth;
    /* registry */
    bool auto_create_streams;
    uint32_t max_streams_per_tenant;
    const fx_broker_stream_name *streams; /* pre-created; |nstreams| of them */
    size_t nstreams;
    /* Declared caches (docs/cache.md "Declared caches"): with
     * auto_create_streams off, only these and those declared through the
     * admin API are served; borrowed during fx_broker_new. The names of
     * fx_broker_stream_name: |stream| is the cache's name. */
    const fx_broker_stream_name *caches;
    size_t ncaches;
    /* NULL, or |ncaches| flags: caches[i] is durable (its writes go to a
     * log under durable.dir, docs/cache.md "Durable caches"). */
    const bool *caches_durable;
    /* Tenants holding streams at once; a stream of one more is refused
     * (counted). 0 = no limit. */
    uint32_t max_tenants;
    /* An auto-created stream with no publisher, no subscriber and no publish
     * for this long is removed with what it retains (counted); streams from
     * |streams| or the admin API never expire. 0 = never. */
    uint64_t stream_idle_expiry_ns;
    /* With auto_create_streams: after fx_broker_delete_stream, a publish or
     * subscribe does not auto-create the same names again for this long
     * (refused as a missing stream, counted); fx_broker_create_stream and
     * |streams| do. 0 = off. */
    uint64_t stream_delete_tombstone_ns;
    /* stream ring and subscriber queues (checkpoint 5). The ring bounds
     * count payload plus FX_STREAM_MSG_OVERHEAD per message (stream.h). */
    uint32_t log_capacity;
    uint64_t log_capacity_bytes;
    /* Retained bytes of all rings together, and of one tenant's rings: an
     * append over either evicts the appending ring's oldest messages
     * (counted). 0 = no limit. */
    uint64_t retained_bytes_limit;
    uint64_t tenant_retained_bytes;
    /* A subscriber whose full block queue holds the fanout (its worker)
     * this long gets its connection closed with the reason "subscriber
     * blocked longer than subscriber_block_timeout_ms" (counted), so the
     * streams that share the worker go on. 0 = never (lossless waits). */
    uint64_t subscriber_block_timeout_ns;
    uint32_t subscriber_queue_capacity;
    fx_queue_policy subscriber_queue_policy;
    uint32_t max_subscriptions_per_conn;
    /* consumer groups (group.c): broker-wide defaults a group's own
     * settings override; 0 keeps the engine's default (group_state.h) */
    uint32_t group_visibility_timeout_ms; /* a delivery's lease [30,000] */
    uint32_t group_max_visibility_ms;     /* cap of a lease and its extensions [600,000] */
    uint32_t group_max_attempts;          /* deliveries before dead-lettering [5] */
    uint32_t group_max_wait_ms;   /* cap of a JSON group_poll's wait_ms [30,000; 0 here: 30,000] */
    uint32_t group_max_in_flight; /* checkpoint 5g, records held unacked [1,000] */
    uint32_t group_backoff_ms[8]; /* delays before the k-th redelivery after a lapse */
    uint32_t group_nbackoff;      /* or a nak without a delay; 0: at once */
    uint32_t max_groups_per_stream; /* [64] */
    /* caches (cache_srv.c, docs/cache.md): cache_max_bytes is split evenly
     * over the workers' stores; 0 here = 64 MiB. A tenant's caches together
     * hold at most cache_tenant_max_bytes (0 = no cap). Values and keys
     * longer than the last two are refused (0 here = 1 MiB, 1024). */
    uint64_t cache_max_bytes;
    uint64_t cache_tenant_max_bytes;
    uint32_t cache_max_value_bytes;
    uint32_t cache_max_key_bytes;
    /* Checkpoint 4g: in the lossless profile (subscriber_queue_policy
     * block) an append to a stream in memory that would evict a record a
     * group has not settled waits (the worker takes no input meanwhile) at
     * most this long, then goes ahead: the group settles what it evicted as
     * skipped (counted) and holds again once caught up. 0 = never. [60 s] */
    uint64_t group_hold_timeout_ns;
    /* ingress (checkpoints 3-4) */
    uint32_t max_frame_bytes;
    bool ack_on_commit;
    uint64_t publish_queue_wait_timeout_ns;
    uint32_t pub_queue_depth;
    uint64_t pub_inflight_bytes;
    uint64_t pub_conn_inflight_bytes;
    bool pub_ingress_wait;
    /* A frame whose body has not fully arrived this long after its bytes were
     * reserved (at its header) resets its stream; 0 means the default, 10 s. */
    uint64_t frame_read_timeout_ns;
    /* feeder coalescing */
    uint32_t event_batch_max_events;
    uint64_t event_batch_max_bytes;
    uint64_t event_batch_max_delay_ns;
    uint32_t fanout_batch_size; /* <= 1: single-event mode, no waiting */
    /* delivery (checkpoint 6) and the connection writer. Each connection has
     * min(subscriber_writer_lanes, max_subscriber_writer_lanes) lanes (1 with
     * subscriber_single_writer_per_conn), shared by its subscriptions as
     * subscriber_lane_shard says. A lane holds at most
     * subscriber_lane_queue_depth frame lists, counting those its
     * subscriptions have queued and the one the writer is still sending;
     * a full lane applies subscriber_lane_queue_policy to the delivery
     * (drop_old evicts the oldest queued list of the same subscription). */
    uint32_t subscriber_writer_lanes;
    uint32_t max_subscriber_writer_lanes;
    fx_broker_lane_shard subscriber_lane_shard;
    bool subscriber_single_writer_per_conn;
    uint32_t subscriber_lane_queue_depth;
    fx_queue_policy subscriber_lane_queue_policy;
    uint64_t subscriber_max_bytes_per_write;
    /* How long a commit ack (ack_on_commit) waits for its append before the
     * client is answered "publish commit timeout"; the publish itself goes
     * on and may still be appended. 2 s. */
    uint64_t ack_wait_timeout_ns;
    /* In a drain, once every publish job and delivery is done, how long a
     * client stream gets to have its remaining replies written before it is
     * reset (a client that stopped reading its answers must not hold the
     * drain to its deadline). 50 ms. */
    uint64_t control_stream_drain_timeout_ns;
    /* Flush shaping of the connection writer: per turn it hands QUIC at most
     * subscriber_flush_max_items frame lists of one subscription, then lets
     * its loop run other work before going on (a busy subscriber cannot hold
     * the loop). With subscriber_flush_max_delay_ns > 0 a subscription that
     * has fewer lists than that queued waits up to that long for more before
     * they are written (fewer, larger writes for more latency); 0, the
     * default, writes a lone message at once. */
    uint32_t subscriber_flush_max_items;
    uint64_t subscriber_flush_max_delay_ns;
    /* Unacknowledged bytes one subscription may have queued on its QUIC
     * stream before its writer waits (a flow-blocked subscriber stops here, so
     * it never fills the connection's unacked cap for its neighbours). */
    uint64_t subscriber_unacked_bytes;
    /* Durable storage; |durable.dir| is borrowed until fx_broker_new returns. */
    fx_broker_durable_opts durable;
} fx_broker_opts;

/* Writes the defaults into |o| (workers 1, 127.0.0.1 port 0, QUIC defaults). */
void fx_broker_opts_default(fx_broker_opts *o);

/* Creates the broker: registry (with the pre-created streams), budgets, worker
 * and io loops (not running yet) and the QUIC server endpoint bound to
 * |o->bind_ip|:|o->port|. Returns 0; -EINVAL (a bound is 0); FX_ECONFIG,
 * FX_ETLS, -errno from the endpoint; FX_EWIRE_NAME for a bad stream name;
 * -ENOMEM. The caller frees with fx_broker_free(). Main thread. */
int fx_broker_new(fx_broker **pb, const fx_broker_opts *o);

/* Starts the loop threads. The logs of the catalogued durable streams are
 * then recovered in the background, in parallel on their storage threads:
 * each stream is served once its own log is open (a publish or subscribe
 * that comes first waits for that open). Returns 0 or -errno. Main thread. */
int fx_broker_start(fx_broker *b);

/* How far the start-up recovery of the catalogued durable streams is. */
typedef struct fx_broker_recovery {
    uint64_t total;   /* catalogued durable streams at start */
    uint64_t done;    /* of those, recovered (open, damaged, failed or deleted meanwhile) */
    uint64_t damaged; /* quarantined: their publishes and subscribes get "storage damaged" */
    uint64_t failed;  /* their open failed otherwise; tried again at their next use */
} fx_broker_recovery;

/* Fills |*out| (zeros without durable storage). Any thread. */
void fx_broker_durable_recovery(const fx_broker *b, fx_broker_recovery *out);

/* Stops serving: frees the endpoint on its loop (every connection closes,
 * every subscription is removed), lets the loops finish the work already
 * handed to them, then stops and joins them. Idempotent. Main thread. */
void fx_broker_stop(fx_broker *b);

/* Stops the broker if needed and frees everything. NULL ok. Main thread. */
void fx_broker_free(fx_broker *b);

/* The bound UDP port. Any thread. */
uint16_t fx_broker_port(const fx_broker *b);
/* The internal listener's bound UDP port (0: none). Any thread. */
uint16_t fx_broker_internal_port(const fx_broker *b);
/* Hex SHA-256 of the server certificate new handshakes present (64 chars).
 * It changes only in fx_broker_reload_tls: read it on the thread that calls
 * that (main), or on any thread when no reload runs. */
const char *fx_broker_fingerprint(const fx_broker *b);

/* Re-reads the TLS certificate and key (tls_cert_file / tls_key_file, or the
 * generated pair in state_dir) on the calling thread and hands them to the
 * endpoint's loop: new handshakes present them from now on, connections
 * already open keep theirs and are not interrupted. On failure nothing
 * changes; the reason is logged by the quic module with the file names.
 * Returns 0; -errno (file unreadable); FX_ETLS (not a certificate, key does
 * not match); FX_ECONFIG; FX_ESHUTDOWN (stopped); -ENOMEM. Blocks until the
 * loop has swapped. Main thread. */
int fx_broker_reload_tls(fx_broker *b);
/* The stream registry (any thread; see registry.h). */
fx_registry *fx_broker_registry(fx_broker *b);

/* The options |b| was created with (bounds and policies), for the admin
 * endpoint's pipeline view. Any thread; valid until fx_broker_free. */
const fx_broker_opts *fx_broker_get_opts(const fx_broker *b);

/* Worker loops of |b| (checkpoint 4 has one queue each). Any thread. */
uint32_t fx_broker_worker_count(const fx_broker *b);

/* Bytes of the process-wide publish budget (checkpoint 3) held now: frame
 * headers reserved and jobs not yet processed (relaxed read). Any thread. */
size_t fx_broker_budget_in_use(const fx_broker *b);
/* What fx_broker_run_on_each_loop runs. */
typedef struct fx_broker_loop_call {
    void (*fn)(void);
} fx_broker_loop_call;
/* Runs |c->fn| once on each thread the broker runs (workers, io loops,
 * durable storage and replay loops), each on its own thread, and waits up to
 * |timeout_ns| for all of them. |c| must outlive the broker: a call that
 * misses the timeout still runs later. Returns 0, FX_ETIMEDOUT,
 * FX_ESHUTDOWN (not running) or -ENOMEM. Main thread. */
int fx_broker_run_on_each_loop(fx_broker *b, const fx_broker_loop_call *c, uint64_t timeout_ns);
/* Index of the worker loop the (first) QUIC endpoint runs on, or -1 when it
 * runs on a dedicated io loop (io_threads > 0) or the broker has stopped.
 * Any thread. */
int fx_broker_endpoint_worker(const fx_broker *b);

/* ---- admin operations (control.c) -----------------------------------------
 * Called from the admin endpoint's threads (or a test's): each asks the loops
 * that own the state by posting a task and waits at most |timeout_ns| for the
 * answer; none reads loop-owned data itself. Any thread but a broker loop,
 * while the broker runs (started, not yet stopped). */

/* Writes {"streams":[{tenant, namespace, stream, id, messages, bytes,
 * first_offset, next_offset, subscribers}, ...]} (ordered by id; a stream no
 * one used yet shows zeros; |bytes| is what the ring charges: payload plus
 * FX_STREAM_MSG_OVERHEAD per message of every batch it holds) as a NUL-terminated string in
 * |*pjson| (caller frees with free()). Returns 0, FX_ETIMEDOUT (a worker did not answer in time) or
 * -ENOMEM. */
int fx_broker_list_streams(fx_broker *b, uint64_t timeout_ns, char **pjson);

/* Declares the cache |tenant|/|ns|/|cache|, served from now on even with
 * auto_create_streams off; |*pcreated| (may be NULL) tells whether it was
 * not declared before. Returns 0, FX_EWIRE_NAME (|err| says which name),
 * FX_EFULL (FXB_CACHE_MAX_DECLARED caches declared already), -ENOTSUP (a
 * broker without the cache stage) or -ENOMEM. Any thread. */
int fx_broker_declare_cache(fx_broker *b, const char *tenant, const char *ns, const char *cache,
                            bool *pcreated, fx_registry_err *err);
/* fx_broker_declare_cache asking for durability: |durable| 1 durable (its
 * puts and deletes kept in a log under durable_storage_dir/caches and
 * rebuilt at start; -ENOTSUP without durable_storage_dir,
 * FX_ESTORAGE_ERROR when its directory cannot be made), 0 in memory, -1
 * either (a cache declared already keeps what it is). A declared cache
 * asked to be the other is -EEXIST. |*pdurable| (may be NULL) tells what
 * the declaration is. Any thread. */
int fx_broker_declare_cache_durable(fx_broker *b, const char *tenant, const char *ns,
                                    const char *cache, int durable, bool *pcreated, bool *pdurable,
                                    fx_registry_err *err);

/* Drops the cache's declaration and frees its entries on its worker
 * (counted in felix_cache_dropped_total), |*pentries| (may be NULL) of
 * them. Returns 0, -ENOENT (neither declared nor ever used), FX_EWIRE_NAME,
 * -ENOTSUP (a broker without the cache stage),
 * FX_ETIMEDOUT (the worker did not answer in time: the declaration is gone,
 * the entries are freed when it gets there) or -ENOMEM. A request already
 * on its way to the worker may still be served after. Any thread but a
 * broker loop. */
int fx_broker_drop_cache(fx_broker *b, const char *tenant, const char *ns, const char *cache,
                         uint64_t timeout_ns, uint64_t *pentries, fx_registry_err *err);

/* Writes {"caches":[{tenant, namespace, cache, declared, entries, bytes},
 * ...]} (sorted by names): every cache a worker holds (used since start,
 * declared or auto-created) and every declared one, with its live and
 * not yet swept entries and their accounted bytes (key + value + 104
 * each), gathered from the workers like fx_broker_list_streams. Returns 0,
 * FX_ETIMEDOUT or -ENOMEM. Any thread but a broker loop. */
int fx_broker_list_caches(fx_broker *b, uint64_t timeout_ns, char **pjson);

/* The hash the lane choice uses (a 64-bit mixer; the lane is the hash
 * modulo the connection's lane count). Pure; any thread. */
uint64_t fx_broker_lane_hash(uint64_t key);

/* Writes {"subscriptions":[...]} into |*pjson| (caller frees): per
 * subscription id, tenant, namespace, stream, connection_id, queue_depth and
 * queue_capacity (its subscriber queue, envelopes), lane (index of its
 * writer lane on its connection), lanes (the connection's lane count),
 * lane_depth (frame lists it has queued on the lane), lane_len (all the
 * lane holds, its neighbours' included) and lane_capacity (the lane's bound,
 * frame lists), unacked_bytes, delivered
 * (messages written), queue_dropped, lane_dropped and drops (their sum, in
 * messages) and last_delivery_age_ms (null: never). Ordered most drops
 * first, then deepest queue: the slow subscriber leads. Returns 0,
 * FX_ETIMEDOUT or -ENOMEM. */
int fx_broker_list_subscriptions(fx_broker *b, uint64_t timeout_ns, char **pjson);

/* Creates |tenant|/|ns|/|stream| (NUL-terminated) or finds it; |*pcreated|
 * (may be NULL) says which. Returns 0; FX_EWIRE_NAME (invalid name),
 * FX_EFULL (the tenant holds max_streams_per_tenant streams), FX_ESHUTDOWN
 * (draining), -ENOMEM; |err| (may be NULL) carries the sentence for the
 * caller. Registry only: no loop is asked. */
int fx_broker_create_stream(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                            bool *pcreated, fx_registry_err *err);

/* As fx_broker_create_stream, with durability: |durable| 1 makes a new
 * stream durable (its messages are kept in a log under durable.dir), 0 in
 * memory, -1 either (a new one in memory). Also -EEXIST: the stream exists
 * with the other durability ("changing stream durability requires removal
 * and recreation: ..."); -ENOTSUP: durable without durable.dir ("stream
 * T/NS/S is marked durable but this broker has no durable storage
 * configured"). |*pdurable| (may be NULL) tells whether the stream is
 * durable. */
int fx_broker_create_stream_durable(fx_broker *b, const char *tenant, const char *ns,
                                    const char *stream, int durable, bool *pcreated, bool *pdurable,
                                    fx_registry_err *err);

/* Bounds of a per-stream retention override (those of the broker-wide
 * durable_retention_bytes / durable_retention_seconds). */
#define FX_BROKER_RETENTION_MAX_BYTES (1024ull << 40)
#define FX_BROKER_RETENTION_MAX_SECONDS (100000ull * 3600ull)

/* A change of the retention overrides of a durable stream: each of the two
 * bounds is changed when its |set_| flag is, to a value in 1..MAX, or 0 to
 * drop the override (the broker's setting applies again). */
typedef struct fx_broker_retention {
    bool set_bytes;
    bool set_seconds;
    uint64_t bytes;
    uint64_t seconds;
} fx_broker_retention;

/* Changes the retention overrides of durable stream |tenant|/|ns|/|stream|
 * as |r| says: written to the storage catalogue (so they survive a restart)
 * and applied to the stream's log at once (a retention sweep runs with the
 * new bounds). |durable| is -1, or what the caller states about the stream's
 * durability (it is checked, never changed). |*pbytes|, |*pseconds| (may be
 * NULL) receive the overrides in force afterwards (0: none). Returns 0;
 * FX_ENOSTREAM; -ERANGE (a bound out of range); -EINVAL (the stream is not
 * durable); -EEXIST (|durable| contradicts the stream's: the durability flip
 * text); FX_ESHUTDOWN (draining); FX_ETIMEDOUT (its storage thread did not
 * answer within |timeout_ns|; the change may still be applied);
 * FX_ESTORAGE_ERROR, -errno (the log could not be opened, the catalogue not
 * written: nothing changed). |err| (may be NULL) carries the sentence. Any
 * thread but a loop. */
int fx_broker_set_stream_retention(fx_broker *b, const char *tenant, const char *ns,
                                   const char *stream, const fx_broker_retention *r, int durable,
                                   uint64_t timeout_ns, uint64_t *pbytes, uint64_t *pseconds,
                                   fx_registry_err *err);

/* The first offset of durable stream (|tenant|, |ns|, |stream|) appended at
 * or after |time_ms| (Unix milliseconds) into |*poffset|: the log's tail
 * when every record is older, its first offset when none is
 * (fx_dlog_offset_for_time, run on the stream's storage thread). For a
 * consumer group that starts or seeks at a time. Returns 0; FX_ENOSTREAM;
 * -ENOTSUP (the stream is kept in memory: its records carry no time);
 * FX_ESHUTDOWN; FX_ETIMEDOUT; FX_ESTORAGE_ERROR or the log's error (not
 * open now: recovering, damaged, failed). |err| (may be NULL) carries the
 * sentence. Any thread but a loop. */
int fx_broker_stream_offset_for_time(fx_broker *b, const char *tenant, const char *ns,
                                     const char *stream, uint64_t time_ms, uint64_t timeout_ns,
                                     uint64_t *poffset, fx_registry_err *err);

/* Deletes the stream: publishes and subscribes to it fail from now on
 * ("stream not found" unless auto-creation makes a new one), jobs already
 * queued for it are fanned out, and each of its subscriptions gets its event
 * stream finished (FIN) after what was queued for it. Returns 0 once the
 * deletion is posted, FX_ENOSTREAM (|err| says which) or -ENOMEM. */
int fx_broker_delete_stream(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                            fx_registry_err *err);

/* A cluster node stopped owning in-memory stream |tenant|/|ns|/|stream|:
 * removes it as fx_broker_delete_stream does (its subscribers' event
 * streams are finished, its ring dropped) but without the tombstone, so a
 * later claim makes it again at its new epoch. A durable stream stays (its
 * log is pinned to this node). Returns 0 or -ENOMEM. Any thread. */
int fx_broker_release_stream(fx_broker *b, const char *tenant, const char *ns, const char *stream);

/* Cluster moves (docs/cluster.md "Moves"). fx_broker_freeze_stream freezes
 * in-memory stream |tenant|/|ns|/|stream|: its worker appends nothing more
 * (publishes are answered FX_EMOVING, not appended) and, once every publish
 * appended before is in the ring, calls |done|(|arg|, 0, tail) on the
 * worker's thread with the offset one past its last message. A stream this
 * broker does not hold calls done(arg, 0, first) at once, |first| the base
 * of its epoch (nothing was appended); a durable one done(arg, FX_ENOSTREAM,
 * 0). fx_broker_unfreeze_stream ends a freeze (the move failed).
 * fx_broker_move_stream removes the stream as fx_broker_release_stream does
 * after its subscribers got what was queued for them and then a last frame
 * naming the new owner: shard_moved {|node_id|, |addr| (NULL: absent),
 * |generation|} to clients that offered FX_FEATURE_SHARD_MOVED, an error
 * "stream T/NS/S moved to N" to others. Returns 0 or -ENOMEM. Any thread. */
void fx_broker_freeze_stream(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                             void (*done)(void *arg, int rv, uint64_t tail), void *arg);
void fx_broker_unfreeze_stream(fx_broker *b, const char *tenant, const char *ns,
                               const char *stream);
int fx_broker_move_stream(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                          const char *node_id, const char *addr, uint64_t generation);

struct fx_forwarder;
/* From now on a publish to a stream another node owns is forwarded through
 * |f| (src/cluster/forward.h) instead of refused (NULL: refused again).
 * Borrowed: it outlives the broker's serving. Any thread. */
void fx_broker_set_forwarder(fx_broker *b, struct fx_forwarder *f);

struct fx_mirrors;
struct fx_mirror_opts;
/* Fills |o|'s ops (the broker's side of the mirrors, mirror_local.c),
 * lossless (subscriber_queue_policy block) and pin_sha256 (the broker's
 * certificate: every node serves it). Any thread. */
void fx_broker_mirror_opts(fx_broker *b, struct fx_mirror_opts *o);
/* From now on a subscribe without FEATURE_REDIRECT to a stream another
 * node owns is served from a local mirror made by |m| (src/cluster/
 * mirror.h) instead of refused (NULL: refused again). Borrowed: |m| is
 * freed after this is set back to NULL. Any thread. */
void fx_broker_set_mirrors(fx_broker *b, struct fx_mirrors *m);

/* ---- consumer groups (group_admin.c) ----------------------------------------
 * Each asks the stream's worker and waits at most |timeout_ns|. Errors:
 * FX_ENOSTREAM (no such stream, or no such group: |err| says which),
 * FX_ETIMEDOUT, -ENOMEM, and those listed; |err| (may be NULL) carries the
 * sentence. Any thread but a broker loop. */

/* Where a group created or moved starts. */
enum fx_broker_group_start {
    FX_BROKER_GROUP_START_ALL = 0, /* the oldest record the stream holds */
    FX_BROKER_GROUP_START_NEW,     /* the next record appended */
    FX_BROKER_GROUP_START_LAST,    /* the last record appended */
    FX_BROKER_GROUP_START_OFFSET,  /* |offset| (at most the tail) */
};

/* A group's own settings, given at its create (PUT .../groups/{g}, `felix
 * groups create`): each key in |has| (FX_BROKER_GSET_* bits) overrides the
 * broker's default (group_visibility_timeout_ms, ...) for that group only;
 * the others follow the defaults. Bounds (group_settings.c): ack_wait_ms and
 * max_ack_wait_ms 1..43,200,000; max_deliver -1 (unlimited) or
 * 1..1,000,000; max_ack_pending 1..1,000,000; max_ack_pending_bytes
 * 1..2^40; max_parked 0..1,000,000; backoff_ms up to 8 delays of
 * 0..43,200,000. A durable stream's group keeps them beside its files. */
enum {
    FX_BROKER_GSET_ACK_WAIT = 1u << 0,
    FX_BROKER_GSET_MAX_ACK_WAIT = 1u << 1,
    FX_BROKER_GSET_MAX_DELIVER = 1u << 2,
    FX_BROKER_GSET_MAX_ACK_PENDING = 1u << 3,
    FX_BROKER_GSET_MAX_ACK_PENDING_BYTES = 1u << 4,
    FX_BROKER_GSET_MAX_PARKED = 1u << 5,
    FX_BROKER_GSET_BACKOFF = 1u << 6,
};
#define FX_BROKER_GSET_MAX_BACKOFF 8

typedef struct fx_broker_group_settings {
    uint32_t has; /* FX_BROKER_GSET_* of the keys given */
    uint32_t ack_wait_ms;
    uint32_t max_ack_wait_ms;
    int32_t max_deliver;
    uint32_t max_ack_pending;
    uint64_t max_ack_pending_bytes;
    uint32_t max_parked;
    uint32_t backoff_ms[FX_BROKER_GSET_MAX_BACKOFF];
    uint32_t n_backoff;
} fx_broker_group_settings;

/* Reads |key| with JSON value |v| (a json_t) into |s|, bounds checked.
 * Returns 0, or -EINVAL with the reason in |why| (an unknown key included:
 * never ignored). Any thread. */
struct json_t;
int fx_broker_group_setting_parse(fx_broker_group_settings *s, const char *key,
                                  const struct json_t *v, char *why, size_t wl);

/* Writes {"groups":[...]} (every group of the stream), or one group's object
 * when |group| is not NULL, into |*pjson| (caller frees): floor, next, tail,
 * lag, num_pending, num_ack_pending, acquired, available, parked,
 * pending_bytes, capped_for_ms (null: not capped at 5g), config (the
 * effective settings), settings (the group's own, given at create), members
 * [{name, subscription_id, held, window, ack_wait_ms}], the counters
 * (delivered, redelivered, acked, stale{...}, dead_lettered{...}, skipped,
 * capped, member_full, parked_overflow, ...) and redelivery_lateness (a
 * cumulative histogram in seconds). */
int fx_broker_list_groups(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                          const char *group, uint64_t timeout_ns, char **pjson,
                          fx_registry_err *err);
/* Creates |group| on the stream at |start| (enum fx_broker_group_start)
 * with its own settings |set| (NULL: the broker's defaults), or finds it
 * (|*pcreated| false; its position is left alone). Also FX_EWIRE_NAME (1 to
 * 128 bytes), FX_ECURSOR_IN_FUTURE (offset past the tail), FX_EFULL
 * (max_groups_per_stream), -EINVAL (settings that do not fit together, such
 * as max_ack_wait_ms below ack_wait_ms), -EEXIST (the group exists with a
 * key of |set| at another value: |err| names it). */
int fx_broker_create_group(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                           const char *group, int start, uint64_t offset,
                           const fx_broker_group_settings *set, uint64_t timeout_ns, bool *pcreated,
                           fx_registry_err *err);
/* Moves |group| to |start|: everything pending is dropped, deliveries go on
 * from there (acks of earlier deliveries below it are duplicates). */
int fx_broker_seek_group(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                         const char *group, int start, uint64_t offset, uint64_t timeout_ns,
                         fx_registry_err *err);
/* Deletes |group| (|*pexisted| says whether there was one). -EBUSY while
 * members are joined. */
int fx_broker_delete_group(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                           const char *group, uint64_t timeout_ns, bool *pexisted,
                           fx_registry_err *err);
/* Writes {"dead_letters":[{offset, attempts, reason, redriven}],
 * "forgotten": n} (the last 10,000 given up on, oldest first; a redriven
 * one is listed until it is acked) into |*pjson|. */
int fx_broker_group_dead_letters(fx_broker *b, const char *tenant, const char *ns,
                                 const char *stream, const char *group, uint64_t timeout_ns,
                                 char **pjson, fx_registry_err *err);
/* Redrives dead letter |offset| of |group| (docs/groups.md): its entry is
 * marked redriven (journaled on a durable stream) and the record is owed
 * again, its next delivery attempt 1, before new records. Also -ESRCH
 * (|offset| is not a dead letter of the group: not listed, or redriven
 * already), FX_ECURSOR_TOO_OLD (the record is no longer in the stream: an
 * in-memory stream's ring or a durable stream's log dropped it), -ENOSPC
 * (the group's pending set is at max_ack_pending + max_parked: later). On
 * a durable stream it returns once the group's journal wrote the change
 * (flushed as the stream's fsync policy asks), so an answered redrive or
 * discard survives a crash; FX_ETIMEDOUT when it did not in |timeout_ns|
 * (the change stands and will be written), FX_ESTORAGE_ERROR when the
 * journal failed. */
int fx_broker_redrive_group(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                            const char *group, uint64_t offset, uint64_t timeout_ns,
                            fx_registry_err *err);
/* Discards dead letter |offset| of |group|: its entry is removed (journaled
 * on a durable stream); the record stays in the stream and in the
 * dead-letter stream. Also -ESRCH (not a dead letter of the group: not
 * listed, or redriven). On a durable stream it returns once journaled, as
 * fx_broker_redrive_group. */
int fx_broker_discard_group(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                            const char *group, uint64_t offset, uint64_t timeout_ns,
                            fx_registry_err *err);

/* ---- graceful drain (control.c) --------------------------------------------- */

/* What a drain did, and what it left when the deadline cut it short. */
typedef struct fx_broker_drain_report {
    bool timed_out;
    uint64_t elapsed_ns;
    /* Left at the deadline (all 0 after a clean drain): */
    uint64_t jobs_queued;       /* publish jobs not yet appended and fanned out */
    uint64_t deliveries_queued; /* envelopes and frame lists not yet written */
    uint64_t replies_pending;   /* replies not yet written on client streams */
    uint64_t unacked_bytes;     /* written but not acknowledged by the peers */
    /* Connections open when the work ended (closed then). */
    uint64_t connections;
    /* Connections closed from half the deadline on because they had work
     * left and made no progress (a frozen receive window): the drain goes
     * on without them. What they held is lost: */
    uint64_t stalled_closed;
    uint64_t stalled_deliveries; /* frame lists queued for them */
    uint64_t stalled_unacked;    /* bytes written to them, never acknowledged */
    uint64_t publishes_refused;  /* answered "broker shutting down" or dropped */
    /* Client streams reset because their replies were still unwritten
     * control_stream_drain_timeout after every job and delivery was done
     * (the client does not read them), and the replies they held. */
    uint64_t reply_streams_reset;
    uint64_t replies_abandoned;
    /* The flush of every durable stream at the end of the drain: 0, or
     * FX_ETIMEDOUT / FX_ESTORAGE_ERROR (logged; the logs are flushed again
     * when the broker stops). */
    int durable_flush_rv;
} fx_broker_drain_report;

/* Drains the broker: from the call on, new connections are closed at once,
 * new publishes are refused (acked ones answered "broker shutting down",
 * unacked ones dropped and counted in publish_dropped), subscribes and
 * stream creation are refused. Then it waits until every accepted publish
 * job is appended and fanned out, every queued delivery and reply is
 * written and QUIC has every byte acknowledged, or until |deadline_ns|
 * (CLOCK_MONOTONIC, fx_now_ns()). From half the time to the deadline on, a
 * connection that still has work (unacknowledged bytes, queued deliveries
 * or replies) and made no progress over the last quarter of it is closed
 * ("broker shutting down: no progress"), so one stalled client cannot hold
 * the drain to the deadline; |*r| counts them and what they held. Either
 * way every connection is then closed
 * with application code 0 and reason "broker shutting down". Fills |*r|.
 * Returns 0 (clean), FX_ETIMEDOUT (the deadline cut work short: |*r| says
 * what was left) or -EINVAL (not running). Blocks the caller (main thread);
 * call fx_broker_stop/free afterwards. */
int fx_broker_drain(fx_broker *b, uint64_t deadline_ns, fx_broker_drain_report *r);

/* The authenticator's key set changed (SIGHUP): every stream and
 * subscription whose credentials were signed by a key no longer present
 * (o.auth.key_valid) is ended, asynchronously on its loop. Main thread,
 * while the broker runs. */
void fx_broker_auth_reloaded(fx_broker *b);

/* True once fx_broker_drain was called. Any thread. */
bool fx_broker_is_draining(const fx_broker *b);

#endif
