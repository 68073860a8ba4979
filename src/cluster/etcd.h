/* fx_etcd: an asynchronous etcd v3 client over etcd's JSON gateway (HTTP/1.1,
 * or HTTP/2 over TLS), libcurl's multi interface driven by one fx_loop's fd
 * watches and a timer, and jansson. It speaks range, put, delete, txn, lease
 * grant/keepalive/revoke/timetolive and watch, and handles the gateway's
 * quirks (docs/cluster.md, "The etcd client").
 *
 * Thread: everything here runs on the one loop given to fx_etcd_new (the
 * cluster thread's loop); an fx_etcd, its requests and its watches are owned
 * by that loop. Callbacks run on it too, never inline from the call that
 * submitted the request.
 *
 * Used by its tests only for now: no configuration key creates one yet (the
 * membership work will). */
#ifndef FX_CLUSTER_ETCD_H
#define FX_CLUSTER_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/loop.h"

typedef struct fx_etcd fx_etcd;
typedef struct fx_etcd_watch fx_etcd_watch;

/* ---- options ------------------------------------------------------------ */

typedef struct fx_etcd_opts {
    /* http:// or https:// base URLs ("http://127.0.0.1:2379"), tried in order: a
     * request that cannot connect, or that times out or meets "no leader" where
     * a retry is safe, goes on to the next one; later requests start at the one
     * that last worked. At most FX_ETCD_MAX_ENDPOINTS. */
    const char *const *endpoints;
    size_t n_endpoints;
    uint32_t timeout_ms;         /* per unary request, connect included (0: 2,000) */
    uint32_t connect_timeout_ms; /* per connection attempt (0: 1,000) */
    size_t max_in_flight;        /* requests submitted and not answered (0: 256) */
    size_t max_response_bytes;   /* one unary answer or one watch message (0: 4 MiB) */
    /* TLS toward etcd (https endpoints): CA bundle, client certificate and key
     * (PEM files). NULL: the system CAs, no client certificate. */
    const char *ca_file;
    const char *cert_file;
    const char *key_file;
    /* etcd user/password auth: both set, or both NULL. The token is fetched
     * before the first request and again when etcd calls it invalid. */
    const char *user;
    const char *password;
} fx_etcd_opts;

#define FX_ETCD_MAX_ENDPOINTS 16

/* ---- requests ----------------------------------------------------------- */

/* Keys and values are bytes: |key_len| 0 means strlen(|key|) (etcd keys are
 * never empty). */
typedef enum fx_etcd_op_kind {
    FX_ETCD_RANGE,
    FX_ETCD_PUT,
    FX_ETCD_DELETE,
} fx_etcd_op_kind;

typedef struct fx_etcd_op {
    fx_etcd_op_kind kind;
    const void *key;
    size_t key_len;
    /* The end of the range (exclusive): |prefix| makes it |key| with its last
     * byte plus one (every key starting with |key|); else |range_end| if not
     * NULL (|range_end_len| 0: strlen); else the single key. Range and delete. */
    bool prefix;
    const void *range_end;
    size_t range_end_len;
    const void *value; /* put; NULL with |value_len| 0: the empty value */
    size_t value_len;
    int64_t lease;    /* put: attach to this lease (0: none) */
    bool prev_kv;     /* put, delete: answer the previous key-values */
    int64_t revision; /* range: read at this revision (0: the newest) */
    int64_t limit;    /* range: at most this many keys (0: no limit) */
    bool keys_only;   /* range */
    bool count_only;  /* range */
    bool serializable; /* range: answer from the member's own copy, possibly stale */
} fx_etcd_op;

typedef enum fx_etcd_cmp_target {
    FX_ETCD_CMP_VERSION,
    FX_ETCD_CMP_CREATE,
    FX_ETCD_CMP_MOD,
    FX_ETCD_CMP_VALUE,
    FX_ETCD_CMP_LEASE,
} fx_etcd_cmp_target;

typedef enum fx_etcd_cmp_result {
    FX_ETCD_EQUAL,
    FX_ETCD_GREATER,
    FX_ETCD_LESS,
    FX_ETCD_NOT_EQUAL,
} fx_etcd_cmp_result;

/* One compare of a txn: |target| of |key| |result| |number| (CREATE, MOD,
 * VERSION, LEASE) or |value| (VALUE). A key that does not exist has create
 * revision 0, so CREATE EQUAL 0 is "absent". */
typedef struct fx_etcd_cmp {
    const void *key;
    size_t key_len;
    fx_etcd_cmp_target target;
    fx_etcd_cmp_result result;
    int64_t number;
    const void *value;
    size_t value_len;
} fx_etcd_cmp;

/* A transaction: when every compare holds the success ops run, else the
 * failure ops; atomically. At most 128 ops per branch (etcd's --max-txn-ops),
 * never two puts of one key. */
typedef struct fx_etcd_txn_req {
    const fx_etcd_cmp *cmp;
    size_t n_cmp;
    const fx_etcd_op *success;
    size_t n_success;
    const fx_etcd_op *failure;
    size_t n_failure;
} fx_etcd_txn_req;

/* ---- answers ------------------------------------------------------------ */

/* One key-value as etcd holds it. |key| and |value| are NUL-terminated copies
 * (the NUL not counted). A field etcd left out (its zero value) is 0. */
typedef struct fx_etcd_kv {
    uint8_t *key;
    size_t key_len;
    uint8_t *value;
    size_t value_len;
    int64_t create_revision;
    int64_t mod_revision;
    int64_t version;
    int64_t lease;
} fx_etcd_kv;

typedef enum fx_etcd_kind {
    FX_ETCD_KIND_RANGE,
    FX_ETCD_KIND_PUT,
    FX_ETCD_KIND_DELETE,
    FX_ETCD_KIND_TXN,
    FX_ETCD_KIND_LEASE_GRANT,
    FX_ETCD_KIND_LEASE_KEEPALIVE,
    FX_ETCD_KIND_LEASE_REVOKE,
    FX_ETCD_KIND_LEASE_TTL,
    FX_ETCD_KIND_AUTH,
    FX_ETCD_KIND_WATCH, /* a watch stream (counted in the stats; never an answer) */
    FX_ETCD_KIND_COUNT_
} fx_etcd_kind;

/* The answer to one request (or, in |ops|, to one op of a txn). Everything
 * is owned by the module and valid only during the callback. */
typedef struct fx_etcd_resp fx_etcd_resp;
struct fx_etcd_resp {
    fx_etcd_kind kind;
    /* 0, or: FX_EREMOTE (etcd answered an error: |http_status|, |grpc_code|,
     * |message|), FX_ETIMEDOUT, FX_ENOTCONN (no endpoint could be reached),
     * FX_ECONNLOST (the connection broke after the request went out), FX_ETLS, FX_ETOOBIG (answer over max_response_bytes), FX_EPROTO (an
     * answer that is not what etcd sends), FX_EAUTH (authentication refused),
     * FX_ECLOSED (the client was freed), -ENOMEM. */
    int rv;
    int http_status;
    int grpc_code; /* etcd's gRPC code: 5 not found, 9 exists, 11 compacted, 14 no leader, 16 token */
    char *message;
    int64_t revision; /* header.revision: the store's revision when it answered */
    /* range (kvs, count, more); put and delete with prev_kv (prev_kvs) */
    fx_etcd_kv *kvs;
    size_t n_kvs;
    int64_t count;
    bool more;
    fx_etcd_kv *prev_kvs;
    size_t n_prev_kvs;
    int64_t deleted;
    /* txn: whether the compares held, and one answer per op run */
    bool succeeded;
    fx_etcd_resp *ops;
    size_t n_ops;
    /* leases: ID, TTL left (seconds), granted TTL; |lease_lost| when a
     * keepalive answered without a TTL or timetolive answered -1: the lease is
     * gone (expired or revoked) and never comes back. */
    int64_t lease_id;
    int64_t ttl;
    int64_t granted_ttl;
    bool lease_lost;
    fx_etcd_kv *lease_keys; /* timetolive with keys: only |key| is set */
    size_t n_lease_keys;
    char *token; /* auth */
};

typedef void (*fx_etcd_cb)(fx_etcd *e, const fx_etcd_resp *r, void *user);

/* ---- the client --------------------------------------------------------- */

/* Creates a client on |l| with options |o| (copied). Returns 0, FX_ECONFIG
 * (no endpoint, too many, an endpoint that is not http(s)://, half of the
 * user/password pair) or -ENOMEM. Loop thread only (or before the loop runs). */
int fx_etcd_new(fx_etcd **pe, fx_loop *l, const fx_etcd_opts *o);

/* Frees |e|: requests still in flight end without their callbacks, watches
 * are stopped. Not from one of |e|'s callbacks. NULL ok. Loop thread only. */
void fx_etcd_free(fx_etcd *e);

/* Each of these queues one request and returns 0: |cb| runs exactly once
 * later with the answer. Or returns FX_EFULL (max_in_flight reached; counted)
 * or -ENOMEM, and |cb| never runs. The op, txn and their bytes are copied.
 *
 * Retries: a request that could not connect, or that a member without a
 * leader refused ("no leader": refused before anything was proposed), is
 * sent to the next endpoint, each endpoint once. Another 503 (etcd's own
 * "request timed out"), a timeout or a cut
 * connection is retried there only for reads, keepalive, timetolive and
 * revoke: a put, delete, txn or grant that timed out answers FX_ETIMEDOUT,
 * since etcd may have applied it, so the caller reads back before it tries
 * again. Loop thread only. */
int fx_etcd_range(fx_etcd *e, const fx_etcd_op *op, fx_etcd_cb cb, void *user);
int fx_etcd_put(fx_etcd *e, const fx_etcd_op *op, fx_etcd_cb cb, void *user);
int fx_etcd_delete(fx_etcd *e, const fx_etcd_op *op, fx_etcd_cb cb, void *user);
int fx_etcd_txn(fx_etcd *e, const fx_etcd_txn_req *t, fx_etcd_cb cb, void *user);
/* Grants a lease of |ttl_s| seconds (etcd raises it to its floor, 2 s by
 * default: the answer's |ttl|), with ID |id| (0: etcd picks). */
int fx_etcd_lease_grant(fx_etcd *e, int64_t ttl_s, int64_t id, fx_etcd_cb cb, void *user);
/* Renews lease |id| once; |lease_lost| in the answer when it is gone. */
int fx_etcd_lease_keepalive(fx_etcd *e, int64_t id, fx_etcd_cb cb, void *user);
int fx_etcd_lease_revoke(fx_etcd *e, int64_t id, fx_etcd_cb cb, void *user);
/* The TTL left of lease |id|, and with |keys| the keys attached to it. */
int fx_etcd_lease_timetolive(fx_etcd *e, int64_t id, bool keys, fx_etcd_cb cb, void *user);

/* ---- watch -------------------------------------------------------------- */

typedef struct fx_etcd_event {
    bool is_delete; /* else a put */
    fx_etcd_kv kv;  /* a delete carries only key and mod_revision */
    bool has_prev;
    fx_etcd_kv prev_kv; /* with prev_kv */
} fx_etcd_event;

typedef struct fx_etcd_watch_opts {
    const void *key;
    size_t key_len;
    bool prefix;
    const void *range_end;
    size_t range_end_len;
    /* First revision to deliver; 0: from now. Always pass the listing's
     * header.revision + 1 so that nothing falls between list and watch. */
    int64_t start_revision;
    bool prev_kv;
    bool progress_notify;
    /* With |progress_notify|: a stream that brings nothing (no event, no
     * progress notification) for this long is taken as dead, cut, and
     * restarted on the next endpoint. Set it to 3 x the etcd's
     * --experimental-watch-progress-notify-interval (etcd sends a
     * notification only after two quiet intervals; its default interval is
     * 10 min). 0: never; a watch without progress_notify is quiet when
     * nothing changes, so it has no such deadline. */
    uint32_t idle_timeout_ms;
} fx_etcd_watch_opts;

typedef struct fx_etcd_watch_cbs {
    /* Events in revision order; |revision| is the answer's header.revision.
     * The arrays are valid during the call only. */
    void (*on_events)(fx_etcd_watch *w, int64_t revision, const fx_etcd_event *ev, size_t n,
                      void *user);
    /* etcd compacted the history past the next revision to deliver: events
     * from there to |compact_revision| - 1 are lost. The watch goes on from
     * |compact_revision|; the caller re-lists to catch up. May be NULL. */
    void (*on_compacted)(fx_etcd_watch *w, int64_t compact_revision, void *user);
    /* The stream ended or failed (|rv|, |message| may be NULL); the watch
     * restarts by itself after a backoff from the next revision. May be NULL. */
    void (*on_restart)(fx_etcd_watch *w, int rv, const char *message, void *user);
} fx_etcd_watch_cbs;

/* Starts a watch (one streaming POST /v3/watch): events from
 * |o->start_revision| on, restarted from the last delivered revision + 1
 * whenever the stream ends. |o| and |cbs| are copied. Returns 0 (|*pw| set),
 * FX_EFULL or -ENOMEM. The watch counts as one request in flight. Loop thread only. */
int fx_etcd_watch_start(fx_etcd *e, const fx_etcd_watch_opts *o, const fx_etcd_watch_cbs *cbs,
                        void *user, fx_etcd_watch **pw);
/* Stops |w| and frees it (later, if inside one of its callbacks); no
 * callback of it runs after this. NULL ok. Loop thread only. */
void fx_etcd_watch_stop(fx_etcd_watch *w);
/* The next revision |w| will deliver (after its last event). Loop thread only. */
int64_t fx_etcd_watch_next_revision(const fx_etcd_watch *w);

/* ---- stats -------------------------------------------------------------- */

/* The client's counters; single writer (the loop), read with
 * fx_etcd_get_stats on the loop. Metrics wiring comes with membership. */
typedef struct fx_etcd_stats {
    uint64_t requests[FX_ETCD_KIND_COUNT_]; /* requests sent, per kind (retries included) */
    uint64_t ok;
    uint64_t err_connect;   /* could not connect */
    uint64_t err_timeout;   /* per-request timeout */
    uint64_t err_tls;
    uint64_t err_remote;    /* etcd answered an error */
    uint64_t err_no_leader; /* of which "no leader" (code 14) */
    uint64_t err_proto;     /* an answer that could not be decoded */
    uint64_t err_too_big;   /* an answer over max_response_bytes */
    uint64_t refused_full;  /* submissions refused by max_in_flight */
    uint64_t retries;       /* requests sent again (next endpoint, new token) */
    uint64_t failovers;     /* moves to the next endpoint */
    uint64_t auth;          /* authentications made */
    uint64_t leases_lost;   /* keepalives answered without a TTL */
    uint64_t watch_restarts;
    uint64_t watch_compactions;
    uint64_t watch_events;
    uint64_t latency_count;     /* answered unary requests */
    uint64_t latency_ns_sum;
    uint64_t latency_ns_max;
    uint64_t latency_buckets[5]; /* <= 1 ms, 10 ms, 100 ms, 1 s, more */
} fx_etcd_stats;

void fx_etcd_get_stats(const fx_etcd *e, fx_etcd_stats *st);

/* ---- codec (pure functions, exposed for the tests) ---------------------- */

/* Encodes a request body as the gateway wants it: keys and values in padded
 * standard base64, int64 fields as strings, zero fields left out (a compare's
 * number is always written). Return a malloc'd NUL-terminated string the
 * caller frees, or NULL for out of memory. Any thread. */
char *fx_etcd_encode_op(const fx_etcd_op *op);
char *fx_etcd_encode_txn(const fx_etcd_txn_req *t);
char *fx_etcd_encode_watch_create(const fx_etcd_watch_opts *o);

/* Decodes the |n| bytes of a unary answer body of kind |kind| with HTTP
 * status |http_status| into |r| (zeroed first; release it with
 * fx_etcd_resp_clear). Errors of both gateway shapes become FX_EREMOTE with
 * the code and message; a body that is neither answers FX_EPROTO. A keepalive
 * answer may carry its stream's "result" wrapper and newline. Returns r->rv.
 * Any thread. */
int fx_etcd_decode_resp(fx_etcd_kind kind, int http_status, const char *body, size_t n,
                        fx_etcd_resp *r);
void fx_etcd_resp_clear(fx_etcd_resp *r);

/* Splits a streamed answer into lines (one JSON object each): |p| buffers a
 * partial line across feeds, up to |cap| bytes. */
typedef struct fx_etcd_lines {
    char *buf;
    size_t len;
    size_t cap;
    size_t max; /* longest line accepted */
} fx_etcd_lines;

void fx_etcd_lines_init(fx_etcd_lines *p, size_t max);
void fx_etcd_lines_deinit(fx_etcd_lines *p);
/* Feeds |n| bytes; |on_line(line, len, user)| runs for each complete line
 * (without its newline, never empty) and stops the feed by returning
 * non-zero, which is returned. Returns 0, that value, FX_ETOOBIG (a line over
 * |max|) or -ENOMEM. Any thread. */
int fx_etcd_lines_feed(fx_etcd_lines *p, const char *data, size_t n,
                       int (*on_line)(const char *line, size_t len, void *user), void *user);

/* One decoded watch stream message. */
typedef struct fx_etcd_watch_msg {
    int rv;            /* 0, FX_EREMOTE (a stream error object) or FX_EPROTO */
    int grpc_code;
    char *message;     /* the stream error's or cancel_reason */
    int64_t revision;  /* header.revision (absent on a compaction cancel: 0) */
    int64_t watch_id;  /* absent: 0 */
    bool created;
    bool canceled;
    int64_t compact_revision;
    fx_etcd_event *events;
    size_t n_events;
} fx_etcd_watch_msg;

/* Decodes one line of a watch stream into |m| (zeroed first; release with
 * fx_etcd_watch_msg_clear). Returns m->rv. Any thread. */
int fx_etcd_decode_watch_msg(const char *line, size_t n, fx_etcd_watch_msg *m);
void fx_etcd_watch_msg_clear(fx_etcd_watch_msg *m);

/* |*end| gets the prefix end of |key| (its last byte below 0xff plus one,
 * bytes after it dropped; "\0" when every byte is 0xff: the rest of the
 * keyspace): |cap| >= |n| + 1 bytes. Returns its length. Any thread. */
size_t fx_etcd_prefix_end(const void *key, size_t n, uint8_t *end, size_t cap);

#endif
