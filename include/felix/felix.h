/* libfelix: the public client API of Felix-C (publish, subscribe, over QUIC).
 * Objects are opaque. Every function returns 0 or a negative FX_E* / -errno
 * code (fx_strerror names it). Any user thread may call any function unless
 * its comment says otherwise; callbacks run on the client library's own loop
 * threads and must not block: a blocking call made there returns
 * FX_EWOULDBLOCK_LOOP. The process shares FELIX_CLIENT_LOOPS loop threads
 * (default: one per online CPU but one, 1 to 4; read when the first client
 * connects) among its clients; each client and all its callbacks stay on one
 * of them. */
#ifndef FELIX_FELIX_H
#define FELIX_FELIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "felix/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fx_client fx_client;
typedef struct fx_subscription fx_subscription;

/* ---- enums: 0 always means "the default" -------------------------------- */

typedef enum fx_ack {
    FX_ACK_DEFAULT = 0, /* = FX_ACK_NONE */
    FX_ACK_NONE,
    FX_ACK_PER_MESSAGE,
    FX_ACK_PER_BATCH,
} fx_ack;

typedef enum fx_policy {
    FX_POLICY_DEFAULT = 0, /* = FX_POLICY_DROP_NEW for subscription queues */
    FX_POLICY_BLOCK,       /* full queue: stop granting QUIC credit, never drop */
    FX_POLICY_DROP_NEW,    /* full queue: drop the arriving batch, count it */
    FX_POLICY_DROP_OLD,    /* full queue: evict the oldest batch, count it */
} fx_policy;

typedef enum fx_sharding {
    FX_SHARDING_DEFAULT = 0, /* = FX_SHARDING_HASH_STREAM */
    FX_SHARDING_HASH_STREAM, /* hash(tenant, namespace, stream) picks the worker: keeps order */
    FX_SHARDING_RR,          /* round robin over workers: may reorder a stream */
} fx_sharding;

typedef enum fx_start_kind {
    FX_START_LATEST = 0,
    FX_START_EARLIEST,
    FX_START_OFFSET,
} fx_start_kind;

typedef struct fx_start {
    fx_start_kind kind;
    uint64_t offset; /* FX_START_OFFSET: the first offset wanted */
} fx_start;

/* ---- options -------------------------------------------------------------- */

/* Client options. |size| must be sizeof(fx_client_opts) (fx_client_opts_init
 * sets it), so fields can be appended without breaking callers. Strings are
 * borrowed until fx_client_connect returns (the client copies them). A zero
 * numeric field means its default. Set at most one of ca_file, pin_sha256
 * and insecure (two of them: FX_ECONFIG); with none the system trust store
 * verifies the broker. */
typedef struct fx_client_opts {
    size_t size;
    /* "host:port", "[v6]:port"; "127.0.0.1:5000". A seed list
     * "host:port,host:port" (at most 16) is tried in order by
     * fx_client_connect: the first to answer auth is the client's server. */
    const char *server;
    const char *server_name; /* certificate name and SNI; NULL: the server's host */
    const char *ca_file;               /* PEM trust anchors, or NULL */
    const char *pin_sha256;            /* hex SHA-256 of the server certificate DER, or NULL */
    bool insecure;                     /* accept any certificate (development only) */
    const char *tenant;                /* "t1" */
    const char *token;                 /* auth token; "" when NULL */
    uint32_t publish_conn_pool;        /* 4 (FELIX_PUB_CONN_POOL) */
    uint32_t publish_streams_per_conn; /* 2 (FELIX_PUB_STREAMS_PER_CONN) */
    uint32_t publish_queue_depth;      /* 64 per worker (FELIX_PUBLISH_QUEUE_DEPTH) */
    size_t publish_inflight_bytes;     /* 4 MiB shared (FELIX_PUBLISH_INFLIGHT_BYTES) */
    fx_sharding publish_sharding;      /* hash_stream (FELIX_PUB_SHARDING) */
    uint32_t event_conn_pool;          /* 1: subscriptions share the first connection; more is
                                          refused (FELIX_EVENT_CONN_POOL, FELIX_SUB_CONNS) */
    uint32_t sub_queue_capacity;       /* 256 batches (FELIX_CLIENT_SUB_QUEUE_CAPACITY) */
    fx_policy sub_queue_policy;        /* drop_new (FELIX_CLIENT_SUB_QUEUE_POLICY) */
    uint32_t max_frame_bytes;          /* 16 MiB (FELIX_MAX_FRAME_BYTES) */
    int connect_timeout_ms;            /* 5000; also bounds fx_subscribe's wait */
    int idle_timeout_ms;               /* 30000 */
    int keepalive_ms;                  /* 10000 */
    bool reconnect; /* true: re-establish a lost connection with backoff and resume subscriptions
                       from their last offset + 1 */
    int reconnect_initial_ms; /* 50 */
    int reconnect_max_ms;     /* 5000 */
    /* Receive window per stream in bytes (0 = the transport's 1 MiB): what
     * a blocked subscription lets the broker send before it stalls. */
    uint32_t stream_window_bytes;
    /* Natural batching: publishes to one stream with one ack mode that queue
     * while the frame before them is still being sent are merged into one
     * batch frame (at most FX_PUBLISH_COALESCE_BYTES of payload entries and
     * 65,536 messages); an idle publisher's message goes out at once. Order
     * and per-publish results are kept. false sends one frame per call. */
    bool publish_coalesce; /* true (FELIX_PUBLISH_COALESCE) */
    /* Wait up to this long after a publish for more to merge with it
     * (0: never wait). */
    uint32_t publish_linger_us; /* 0 (FELIX_PUBLISH_LINGER_US), at most 1,000,000 */
    /* An acked publish not answered this long after the call fails with
     * FX_ETIMEDOUT: the message may or may not have been appended. */
    int publish_ack_timeout_ms; /* 30000 (FELIX_PUBLISH_ACK_TIMEOUT_MS) */
    /* Idempotent producer (docs/client.md "Idempotent publish"): every acked
     * publish goes as an idempotent batch under a producer id and a per-stream
     * sequence; a batch in doubt after a lost connection is re-sent with the
     * same bytes under the same sequence, so it is appended at most once.
     * Needs a broker advertising FEATURE_IDEMPOTENT_PRODUCER (else connect
     * fails with FX_EPROTO). */
    bool idempotent; /* false (FELIX_IDEMPOTENT) */
    /* Cache requests (fx_cache_*): the bidirectional streams of the first
     * connection they share, many requests in flight on each (at most 64);
     * the requests in flight on the whole client (a caller finding them all
     * taken waits, see fx_cache_put); and how long one request waits for its
     * answer before it fails with FX_ETIMEDOUT. */
    uint32_t cache_streams;  /* 4 (FELIX_CACHE_STREAMS) */
    uint32_t cache_inflight; /* 4096 (FELIX_CACHE_INFLIGHT) */
    int cache_timeout_ms;    /* 5000 (FELIX_CACHE_TIMEOUT_MS) */
    /* Do not offer FEATURE_REDIRECT: a cluster broker then serves this
     * client's subscribes to streams other nodes own from a local mirror
     * (docs/cluster.md "Mirror") instead of answering not_leader. For tests
     * and benchmarks of clients that cannot follow redirects. */
    bool no_redirect; /* false */
} fx_client_opts;

/* Payload-entry bytes (4-byte length + payload per message) one merged
 * publish frame holds at most; a single publish larger than this is sent
 * alone. */
#define FX_PUBLISH_COALESCE_BYTES (64u << 10)

/* Fills |o| with the defaults above and sets o->size. */
void fx_client_opts_init(fx_client_opts *o);

/* Overlays the FELIX_* variables named above that are set and non-empty
 * (a value of 0 keeps the current value, as in the original). Strings then
 * point into the environment. Returns 0, or FX_ECONFIG for a bad value: the
 * message (naming the variable) is logged and readable with
 * fx_client_last_error(). |o| is unchanged for that variable. Any thread,
 * but not concurrently with setenv(). */
int fx_client_opts_from_env(fx_client_opts *o);

/* ---- client --------------------------------------------------------------- */

/* Checks |o|, resolves the server (a name is resolved on the caller's
 * thread), completes one QUIC handshake and authenticates one control
 * stream, all within o->connect_timeout_ms (with a seed list, each address
 * in turn within its own connect_timeout_ms; on failure of all, the last
 * one's code and a text naming each). The process-wide transport
 * variables the broker also reads (FELIX_LOOPBACK_MTU, FELIX_INITIAL_MTU,
 * FELIX_MTU_UPPER_BOUND, FELIX_MAX_UDP_PAYLOAD, FELIX_UDP_SEND_BUFFER,
 * FELIX_UDP_RECV_BUFFER, FELIX_CONN_STATS_MS) apply to the client's sockets
 * and connections; a bad one is FX_ECONFIG. Returns 0 and a new client in
 * |*pc|; FX_ECONFIG (bad option), FX_ETLS* (certificate refused, with the
 * reason), FX_ETIMEDOUT, -ECONNREFUSED (the server's host answered that
 * nothing listens on that port), FX_EAUTH (auth refused), FX_EWOULDBLOCK_LOOP,
 * -errno, -ENOMEM. The connection used here is the first publish connection
 * and the first event connection; the others open lazily. */
int fx_client_connect(fx_client **pc, const fx_client_opts *o);

/* Closes |c| without losing what was published: new publishes are refused
 * (FX_ECLOSED), queued ones are sent, then each publish stream is finished
 * and the broker's answering FIN awaited (it sends it once every frame before
 * ours was admitted or answered), all within |timeout_ms| (-1: no limit);
 * then every connection is closed and |c| freed. Callers blocked in other
 * calls on |c| return FX_ECLOSED; the memory is released after the last of
 * them has left. Subscriptions of |c| end (FX_ECLOSED) but must still be
 * released with fx_unsubscribe. Returns 0; FX_ETIMEDOUT (the deadline cut
 * the close short: some publishes may not have reached the broker's
 * queues); the error that ended a publish stream early (e.g. FX_ECONNLOST);
 * FX_EWOULDBLOCK_LOOP (called from a callback: nothing done). NULL ok. */
int fx_client_close(fx_client *c, int timeout_ms);

/* Copies the text of the last error a call made on this thread produced
 * (a broker's "publish failed: <msg>", a TLS reason, an option naming its
 * variable) into |buf| of |len| bytes, NUL-terminated; "" if none. Inside an
 * fx_ack_cb it is the text of that callback's failure. |c| may be NULL (the
 * text is per thread). Returns the full length of the text. */
size_t fx_client_last_error(const fx_client *c, char *buf, size_t len);

/* ---- publish -------------------------------------------------------------- */

typedef struct fx_iov {
    const void *data;
    size_t len;
} fx_iov;

/* Completion of an fx_publish_async: |rv| 0 or the error. Runs on the
 * client's loop; must not block. */
typedef void (*fx_ack_cb)(void *user, int rv);

/* Publishes |len| bytes of |data| to |ns|/|stream| of the client's tenant.
 * The payload is copied. Waits while the byte budget (checkpoint 1) or the
 * worker queue (checkpoint 2) is full. FX_ACK_NONE/DEFAULT returns once
 * admitted; FX_ACK_PER_MESSAGE/PER_BATCH returns the broker's answer, or
 * FX_ETIMEDOUT after publish_ack_timeout_ms (then the message may or may
 * not have been appended). A publish may travel in one frame with others
 * (publish_coalesce); its result is still its own.
 * Returns 0; FX_ETOOBIG (larger than publish_inflight_bytes, at once);
 * FX_ENOSTREAM / FX_EFORBIDDEN / FX_EOVERLOAD / FX_EREMOTE (the broker's
 * message via fx_client_last_error); FX_ECLOSED; FX_ECONNLOST or the
 * connection's close reason; FX_EWOULDBLOCK_LOOP; -EINVAL; -ENOMEM. */
int fx_publish(fx_client *c, const char *ns, const char *stream, const void *data, size_t len,
               fx_ack ack);

/* Publishes |n| payloads (at most 65,536) as one batch frame, order kept;
 * an acked batch is answered by one ack. Errors as fx_publish, and -EINVAL
 * for more than 65,536 payloads. */
int fx_publish_batch(fx_client *c, const char *ns, const char *stream, const fx_iov *msgs, size_t n,
                     fx_ack ack);

/* As fx_publish, but returns after admission; |cb(user, rv)| runs on the
 * client's loop when the broker answered (acked), publish_ack_timeout_ms
 * passed without an answer (FX_ETIMEDOUT), QUIC acknowledged the bytes
 * (unacked: loss after sending is not detectable then), or on failure.
 * Acks are paired with requests by request id. If this returns an error,
 * |cb| is not called. */
int fx_publish_async(fx_client *c, const char *ns, const char *stream, const void *data, size_t len,
                     fx_ack ack, fx_ack_cb cb, void *user);

/* As fx_publish_async, but never waits: when the client's byte budget
 * (publish_inflight_bytes) or the stream's worker queue is full it returns
 * FX_EFULL at once, nothing sent (|cb| not called). For callers on an
 * event loop of their own, which must not block. */
int fx_publish_try_async(fx_client *c, const char *ns, const char *stream, const void *data,
                         size_t len, fx_ack ack, fx_ack_cb cb, void *user);

/* What the broker answered an acked publish, for fx_publish_ex and
 * fx_publish_async_ex. |has_offset| only for an idempotent client (the
 * broker reports offsets of idempotent batches only): |offset| is the
 * message's own offset. |duplicate|: the broker had already appended this
 * publish (a re-send after a lost answer) and answered from its window
 * without appending it again; |offset| is then the original's. */
typedef struct fx_publish_result {
    uint64_t offset;
    bool has_offset;
    bool duplicate;
} fx_publish_result;

/* As fx_publish; on success (0) |*res| (if not NULL) holds the broker's
 * answer. FX_EREFUSED: the idempotent check refused the batch (the reason
 * via fx_client_last_error: sequence_gap, unknown_producer, ...): not
 * appended by this attempt. */
int fx_publish_ex(fx_client *c, const char *ns, const char *stream, const void *data, size_t len,
                  fx_ack ack, fx_publish_result *res);

/* Completion of an fx_publish_async_ex: |rv| as fx_ack_cb's, |res| the
 * answer (valid during the call; zeroed when rv != 0). */
typedef void (*fx_publish_cb)(void *user, int rv, const fx_publish_result *res);

/* As fx_publish_async with a completion that also gets the result. */
int fx_publish_async_ex(fx_client *c, const char *ns, const char *stream, const void *data,
                        size_t len, fx_ack ack, fx_publish_cb cb, void *user);

/* Waits until every publish in flight is acknowledged by QUIC and, if
 * acked, answered (publishes made meanwhile by other threads count too).
 * Returns 0, FX_ETIMEDOUT, FX_ECLOSED, FX_EWOULDBLOCK_LOOP. */
int fx_flush(fx_client *c, int timeout_ms);

/* ---- subscribe ------------------------------------------------------------ */

#define FX_EVENT_GAP 0x1u /* offsets jumped before this event: |gap| were missed */

/* One delivered message. |payload| stays valid until the next call on the
 * subscription (or the callback's return). |offset| is meaningful when
 * |has_offset|. */
typedef struct fx_event {
    const uint8_t *payload;
    size_t len;
    uint64_t offset;
    bool has_offset;
    uint32_t flags;
    uint64_t gap;
} fx_event;

typedef void (*fx_event_cb)(void *user, const fx_event *ev);

typedef struct fx_sub_stats {
    uint64_t received;        /* events that arrived from the broker */
    uint64_t delivered;       /* events handed to the application */
    uint64_t dropped;         /* events dropped by the client queue */
    uint64_t dropped_batches; /* whole batches dropped (the queue holds batches) */
    uint64_t gaps;            /* offset jumps seen */
    uint64_t missed;          /* messages missed across those jumps */
    uint64_t queue_depth;     /* batches queued now */
    uint64_t reconnects; /* times this subscription was re-established after a lost connection */
    uint64_t subscription_id; /* assigned by the broker */
    uint64_t owner_changes;   /* epoch changes seen (a cluster stream moved or failed over) */
} fx_sub_stats;

/* Why a subscription ended or failed (fx_subscription_error). */
typedef struct fx_sub_error {
    int code;           /* 0 while live; FX_ECURSOR_*, FX_EEOF, FX_ECLOSED, ... */
    char message[256];  /* the broker's or our text */
    uint64_t requested; /* cursor errors */
    uint64_t available; /* cursor errors */
} fx_sub_error;

/* Subscribes to |ns|/|stream| from |start| (NULL: latest) and waits for the
 * broker's `subscribed` (bounded by connect_timeout_ms). Returns 0 and
 * |*ps|; FX_ECURSOR_TOO_OLD / FX_ECURSOR_IN_FUTURE (then |*ps| is still set,
 * read the detail with fx_subscription_error, release with fx_unsubscribe);
 * FX_ENOSTREAM / FX_EFORBIDDEN / FX_EREMOTE (message via
 * fx_client_last_error); FX_EREDIRECT (a cluster broker's not_leader was
 * not followed: more than 3 hops, a broker asked twice, a generation older
 * than one seen for the stream, no numeric address; the reason via
 * fx_client_last_error); FX_ETIMEDOUT; FX_ECLOSED; FX_EWOULDBLOCK_LOOP;
 * -ENOMEM. On the other errors |*ps| is NULL. A not_leader answer is
 * followed inside the call: the subscription then lives on a connection
 * to the broker it named (docs/client.md "Redirects"), and later
 * subscribes to the stream go there first. */
int fx_subscribe(fx_subscription **ps, fx_client *c, const char *ns, const char *stream,
                 const fx_start *start);

/* Takes the next event into |ev|, waiting up to |timeout_ms| (-1 forever,
 * 0 no wait). Returns 0; FX_ETIMEDOUT; FX_EEOF (the event stream ended:
 * reason in fx_subscription_error); FX_ECLOSED (client or subscription
 * closed); FX_EPROTO; FX_EWOULDBLOCK_LOOP (on the loop with timeout != 0);
 * -EINVAL (a callback is set). One consumer thread per subscription. */
int fx_subscription_next(fx_subscription *s, fx_event *ev, int timeout_ms);

/* Delivers further events to |cb(user, ev)| on the client's loop instead of
 * the queue (no thread hop, no queueing: the callback is the consumer, so
 * credit is granted when it returns). Events already queued are delivered
 * first. |cb| must not block. Returns 0, FX_ECLOSED, -EINVAL (|cb| NULL). */
int fx_subscription_set_callback(fx_subscription *s, fx_event_cb cb, void *user);

/* Fills |st| (relaxed reads). Returns 0 or -EINVAL. */
int fx_subscription_stats(fx_subscription *s, fx_sub_stats *st);

/* Client-wide counters. */
typedef struct fx_client_stats {
    /* Unacked publishes already handed to QUIC on a connection that was then
     * lost: they may not have reached the broker (acked ones fail with
     * FX_ECONNLOST instead and are not counted here). */
    uint64_t publishes_lost;
    uint64_t reconnects; /* connections re-established after a loss */
    /* Checkpoint 1, the publish byte budget (publish_inflight_bytes): its
     * bound, the bytes of publishes QUIC has not acknowledged yet, and the
     * publishes that had to wait for bytes. */
    uint64_t publish_budget_bytes;
    uint64_t publish_budget_in_use;
    uint64_t publish_budget_waits;
    /* Checkpoint 2, the publish worker queues (the option
     * publish_queue_depth per worker): their bound summed over the workers
     * (publish_queue_capacity), the publishes queued now
     * (publish_queue_depth), and the publishes that had to wait for a slot. */
    uint64_t publish_queue_capacity;
    uint64_t publish_queue_depth;
    uint64_t publish_queue_waits;
    /* Idempotent producer (opts.idempotent): producer_init answered (one
     * per publish stream, and one after each refusal), batch frames re-sent
     * after a lost connection, and publishes the broker answered as
     * duplicates (already appended: not written again) or refused
     * (FX_EREFUSED). */
    uint64_t producer_inits;
    uint64_t idempotent_resent;
    uint64_t idempotent_duplicates;
    uint64_t idempotent_refused;
    /* Redirects (docs/client.md "Redirects"): not_leader answers followed
     * to the broker they named, those not followed (the subscribe failed
     * with FX_EREDIRECT), and subscribes sent to a cached owner that
     * answered not_leader (the route had moved). */
    uint64_t redirects;
    uint64_t redirects_refused;
    uint64_t route_misses;
    /* Connections ended at once by an ICMP error for their broker's address
     * (docs/client.md "A broker that dies"): a port unreachable from the
     * broker's host (nothing listens there any more: the process died;
     * the close reason is -ECONNREFUSED), or a host or network unreachable
     * while the handshake ran (-EHOSTUNREACH, -ENETUNREACH). */
    uint64_t icmp_errors;
} fx_client_stats;

/* Fills |st| (relaxed reads). Returns 0 or -EINVAL. Any thread. */
int fx_client_get_stats(fx_client *c, fx_client_stats *st);

/* Copies why |s| failed or ended into |e| (code 0 while live). */
int fx_subscription_error(fx_subscription *s, fx_sub_error *e);

/* Stops |s| (the broker sees its event stream reset), wakes a caller blocked
 * in fx_subscription_next with FX_ECLOSED and frees |s| once no caller is
 * inside. Must not race with a new call on |s|. NULL ok. */
void fx_unsubscribe(fx_subscription *s);


/* ---- cache ---------------------------------------------------------------- */

/* The broker's key-value cache (docs/cache.md), scoped (client's tenant,
 * |ns|, |cache|, |key|), on the client's first connection: requests travel
 * on a pool of cache_streams bidirectional streams, many in flight on each,
 * paired with their answers by request id. |ns|, |cache| and |key| must be
 * non-empty UTF-8 (else -EINVAL, nothing sent). An error answer fails only
 * its own request: the client, and the other requests, go on.
 *
 * Waiting: at most cache_inflight requests are in flight on a client; a
 * blocking call, or an async call made off the client's loop, finding them
 * all taken waits for a slot (bounded by cache_timeout_ms: FX_ETIMEDOUT);
 * an async call made on the loop (from a callback) returns FX_EFULL instead.
 * Every request is answered or failed within cache_timeout_ms of being sent
 * (FX_ETIMEDOUT: a put may or may not have been applied).
 *
 * Errors common to every fx_cache_* call: -EINVAL (bad argument, a name not
 * UTF-8 or empty); FX_ETOOBIG (a put's value larger than max_frame_bytes can
 * carry); FX_EFORBIDDEN (no cache.read / cache.write on the cache); FX_EREMOTE
 * (any other error answer, "cache scope not found: T/NS/C" and "cache put
 * refused: value too large" among them: the broker's text via
 * fx_client_last_error); FX_ESHUTDOWN (the broker drains); FX_ETIMEDOUT;
 * FX_ECONNLOST (the connection was lost with the request in flight: a put may
 * or may not have been applied; later requests go on the new connection when
 * opts.reconnect); FX_ECLOSED (client closing); FX_EPROTO (an answer that
 * does not pair with the request); FX_EWOULDBLOCK_LOOP (a blocking call made
 * in a callback); -ENOMEM. */

/* Stores |len| bytes of |value| (copied) under |key|, replacing any entry.
 * |ttl_ms| 0: no expiry; else the entry expires |ttl_ms| after the broker
 * applied the put. Waits for the broker's answer. Returns 0 or an error. */
int fx_cache_put(fx_client *c, const char *ns, const char *cache, const char *key,
                 const void *value, size_t len, uint64_t ttl_ms);

/* Reads |key|: copies the value into |buf| (|cap| bytes) and sets |*len| to
 * its length. Returns 0; FX_ENOTFOUND on a miss or an expired entry (*len
 * 0); FX_ETOOBIG when |cap| is smaller than the value (*len is its length,
 * nothing copied); or an error. |buf| may be NULL when |cap| is 0. */
int fx_cache_get(fx_client *c, const char *ns, const char *cache, const char *key, void *buf,
                 size_t cap, size_t *len);

/* As fx_cache_get, into a buffer it allocates: |*value| (release with
 * free(); one byte at least, so never NULL on success) and |*len|. Returns
 * 0; FX_ENOTFOUND on a miss (*value NULL); or an error. */
int fx_cache_get_alloc(fx_client *c, const char *ns, const char *cache, const char *key,
                       void **value, size_t *len);

/* Removes |key|. |*existed| (may be NULL): whether a live entry was removed.
 * Returns 0 (found or not) or an error; FX_EPROTO when the broker does not
 * serve deletes (no FEATURE_CACHE_DELETE in its auth_ok). */
int fx_cache_delete(fx_client *c, const char *ns, const char *cache, const char *key,
                    bool *existed);

/* Completion of an async cache request: runs once, on the client's loop
 * (must not block). |rv| 0, FX_ENOTFOUND or an error (the broker's text via
 * fx_client_last_error inside the callback). |value|/|len| are valid only
 * during the call: a get's value; a delete's removed value or NULL (nothing
 * removed, rv FX_ENOTFOUND); a put's NULL, 0. */
typedef void (*fx_cache_cb)(void *user, int rv, const void *value, size_t len);

/* Async variants: return 0 once the request is queued (|cb| then runs
 * exactly once), or an error (|cb| never runs), FX_EFULL among them (on the
 * loop with cache_inflight requests in flight). */
int fx_cache_put_async(fx_client *c, const char *ns, const char *cache, const char *key,
                       const void *value, size_t len, uint64_t ttl_ms, fx_cache_cb cb, void *user);
int fx_cache_get_async(fx_client *c, const char *ns, const char *cache, const char *key,
                       fx_cache_cb cb, void *user);
int fx_cache_delete_async(fx_client *c, const char *ns, const char *cache, const char *key,
                          fx_cache_cb cb, void *user);

/* Conditional put: stores as fx_cache_put only if |if_absent| (no live
 * entry has |key|) or, with |if_version| != 0, if the live entry has
 * exactly that version (set exactly one of them, else -EINVAL). Returns 0
 * whether or not it applied: |*applied| (may be NULL) says which, and
 * |*version| (may be NULL) is the version written when applied, else the
 * key's current version (0: no live entry). FX_EPROTO when the broker does
 * not serve conditional writes (no FEATURE_CACHE_CONDITIONAL). */
int fx_cache_put_if(fx_client *c, const char *ns, const char *cache, const char *key,
                    const void *value, size_t len, uint64_t ttl_ms, bool if_absent,
                    uint64_t if_version, bool *applied, uint64_t *version);

/* As fx_cache_get_alloc, also returning the entry's version (every write of
 * a key gets a new one; use it with fx_cache_put_if). FX_EPROTO when the
 * broker does not serve conditional writes. */
int fx_cache_get_versioned(fx_client *c, const char *ns, const char *cache, const char *key,
                           void **value, size_t *len, uint64_t *version);

/* ---- consumer groups ------------------------------------------------------ */

/* One member of a consumer group (competing consumers): the members of a
 * group share the records of one stream; each record goes to one member at
 * a time and is redelivered (attempt + 1) when that member naks it, lets
 * its ack wait pass, or leaves without acking it. Needs a broker that
 * serves groups (it sets 0x8000 in auth_ok's server_flags). */
typedef struct fx_group fx_group;

/* Options of fx_group_join. |size| must be sizeof(fx_group_opts)
 * (fx_group_opts_init sets it). Strings are copied by fx_group_join. */
typedef struct fx_group_opts {
    size_t size;
    const char *ns, *stream; /* the stream the group reads (the client's tenant) */
    const char *group;       /* the group's name */
    const char *member;      /* this member's name; NULL: a generated unique name. A member
                                that joins again under its name gets what it held back */
    uint32_t window;         /* records this member may hold unacked (0: 256) */
    int ack_wait_ms;         /* a record not acked this long is redelivered (0: the group's) */
    /* Non-NULL: create the group if it does not exist, starting at
     * FX_START_EARLIEST (the broker's "all": every record the stream still
     * holds), FX_START_LATEST ("new": records appended from now on) or
     * FX_START_OFFSET ({"offset": n}). NULL: joining a group that does not
     * exist fails (FX_EREMOTE with the broker's message). */
    const fx_start *create;
} fx_group_opts;

/* Zeroes |o| and sets o->size. */
void fx_group_opts_init(fx_group_opts *o);

/* One record handed to the application. |payload| stays valid until the
 * next call on the member. */
typedef struct fx_group_msg {
    const uint8_t *payload;
    size_t len;
    uint64_t offset;
    uint32_t attempt; /* 1: first delivery; more: redelivered */
    uint64_t skipped; /* offsets the group settled as skipped just before this one */
} fx_group_msg;

/* Counters of one member (fx_group_stats). */
typedef struct fx_member_stats {
    uint64_t received;   /* records that arrived from the broker */
    uint64_t delivered;  /* records handed to the application */
    uint64_t expired;    /* records whose ack wait passed in the client: released, not handed out */
    uint64_t dropped;    /* records dropped locally when the connection was lost (redelivered) */
    uint64_t ops_sent;   /* ack/nak/in_progress/term/release ops sent */
    uint64_t frames_sent; /* GROUP_ACKS frames those ops travelled in */
    uint64_t refused;    /* ops the broker refused as stale or invalid (seen by fx_group_ack_sync) */
    uint64_t reconnects; /* times the member joined again after a lost connection */
} fx_member_stats;

/* Joins |o->group| on |o->ns|/|o->stream| as one member and waits for the
 * broker's answer (bounded by the client's connect_timeout_ms). Returns 0
 * and |*pg|; FX_EPROTO (the broker does not serve consumer groups);
 * FX_ENOSTREAM / FX_EFORBIDDEN / FX_EREMOTE (the broker's message via
 * fx_client_last_error: no such group without |create|, ...);
 * FX_ETIMEDOUT; FX_ECLOSED; FX_EWOULDBLOCK_LOOP; -EINVAL; -ENOMEM. On
 * error |*pg| is NULL. After a lost connection the member joins again
 * under the same name: records that had arrived but were not taken by
 * fx_group_next are dropped (the broker redelivers them). */
int fx_group_join(fx_group **pg, fx_client *c, const fx_group_opts *o);

/* Takes the next record into |m|, waiting up to |timeout_ms| (-1 forever,
 * 0 no wait). Records come in the order of the broker's deliveries. A
 * record whose ack wait (its arrival + ack_wait_ms) passed while it waited
 * in the client is released to the group instead of handed out (counted in
 * fx_member_stats.expired). Returns 0; FX_ETIMEDOUT; FX_EEOF (the broker
 * ended the member); FX_ECLOSED (client or member closed); FX_EPROTO;
 * FX_EWOULDBLOCK_LOOP (on a loop thread with timeout != 0). One consumer
 * thread per member. */
int fx_group_next(fx_group *g, fx_group_msg *m, int timeout_ms);

/* Settling records. Each queues one op and returns: ops are sent by the
 * client's loop, all those queued in one loop turn in one frame, acks of
 * contiguous offsets as one range. The queue holds at most 4,096 ops (one
 * frame's worth; a range counts once); a caller finding it full waits until
 * the loop has sent it (only while the member is joined again after a lost
 * connection can that take long). Any thread. Each returns 0; FX_ECLOSED;
 * FX_EFULL (full, on a loop thread: no wait there); -EINVAL; -ENOMEM. */
/* Acknowledges |offset|: processed, never redelivered. */
int fx_group_ack(fx_group *g, uint64_t offset);
/* Gives |offset| (delivery |attempt|) back for redelivery after |delay_ms|
 * (0: at once; -1: the group's backoff). */
int fx_group_nak(fx_group *g, uint64_t offset, uint32_t attempt, int delay_ms);
/* Still working on |offset|: its ack wait starts again. */
int fx_group_in_progress(fx_group *g, uint64_t offset, uint32_t attempt);
/* Never redeliver |offset|: settled as failed with |reason| (NULL: none;
 * at most 256 bytes of UTF-8, longer is -EINVAL). */
int fx_group_term(fx_group *g, uint64_t offset, uint32_t attempt, const char *reason);

/* Sends the ops queued so far (none is fine) with a request id and waits,
 * up to |timeout_ms| (-1 forever), for the broker's answer, which comes
 * once they are durable. Returns 0 (ops the broker refused as stale, i.e.
 * already redelivered, or invalid, are counted in fx_member_stats.refused);
 * FX_ETIMEDOUT; FX_ECONNLOST (the connection was lost before the answer:
 * the ops may not have arrived); FX_EEOF; FX_ECLOSED; FX_EWOULDBLOCK_LOOP.
 * Any thread. */
int fx_group_ack_sync(fx_group *g, int timeout_ms);

/* Fills |st| (relaxed reads). Returns 0 or -EINVAL. Any thread. */
int fx_group_stats(fx_group *g, fx_member_stats *st);

/* Leaves the group: the records that arrived but were not taken by
 * fx_group_next are released (redelivered to other members at once), the
 * ops queued are sent, and the member's stream is finished; the broker then
 * ends the delivery stream. Records taken but not settled wait for their
 * ack wait. Wakes a caller blocked on |g| with FX_ECLOSED and frees |g|
 * once no caller is inside. Must not race with a new call on |g|. NULL ok. */
void fx_group_leave(fx_group *g);

#ifdef __cplusplus
}
#endif
#endif
