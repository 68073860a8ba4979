/* The shared nouns of the broker data plane: the structs its stages pass
 * between them (fx_broker, fxb_conn, fxb_bidi, fxb_job, fxb_sub) and the
 * FXB_ constants; fxb_worker is worker.h's, fxb_lane lane.h's, fxb_reply
 * reply.h's. A part a shared struct embeds is defined in the header of the
 * stage that owns it (fxb_conn's: conn_auth.h, writer.h, conn_life.h,
 * reply.h;
 * fxb_bidi's: resv.h, admission.h, reply.h, resolve.h; fxb_sub's: feeder.h,
 * lane.h, writer.h, durable.h), and this file includes
 * those headers for the full types. No stage function is declared here: each
 * stage's header (conn.h, bidi.h, publish.h, admission.h, worker.h, feeder.h,
 * lane.h, writer.h, ..., see docs/design.md "Broker stage headers") declares
 * what other stages call, with its thread and the fields it owns. Which
 * thread may touch a field is noted per struct; objects reached from two
 * loops are atomically refcounted, and every task posted to another loop
 * holds a reference until its callback runs. */
#ifndef FX_BROKER_INTERNAL_H
#define FX_BROKER_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/budget.h"
#include "base/buf.h"
#include "base/loop.h"
#include "broker/admission.h"
#include "broker/broker.h"
#include "broker/envelope.h"
#include "broker/idem.h"
#include "broker/ingress.h"
#include "broker/peers.h"
#include "broker/registry.h"
#include "broker/reply.h"
#include "broker/resolve.h"
#include "broker/resv.h"
#include "broker/stream.h"
#include "quic/quic.h"
#include "wire/binary.h"
#include "wire/frame.h"
#include "wire/message.h"

typedef struct fxb_worker fxb_worker;
typedef struct fxb_conn fxb_conn;
typedef struct fxb_bidi fxb_bidi;
typedef struct fxb_sub fxb_sub;
typedef struct fxb_job fxb_job;
typedef struct fxb_reply fxb_reply;
typedef struct fxb_lane fxb_lane;

/* The stage parts fxb_conn and fxb_sub embed, each defined in its stage's
 * header. */
#include "broker/conn_auth.h"
#include "broker/conn_life.h"
#include "broker/durable.h"
#include "broker/feeder.h"
#include "broker/group.h"
#include "broker/lane.h"
#include "broker/writer.h"

/* QUIC application codes we reset streams with. */
#define FXB_CODE_MALFORMED 0x1u
#define FXB_CODE_UNSUBSCRIBE 0x2u
/* QUIC application code of a connection refused by max_connections. */
#define FXB_CODE_TOO_MANY_CONNS 0x3u
/* QUIC application codes of the limits that hold before authentication: a
 * connection that authenticated nothing within auth_timeout_ms, or failed
 * auth_failures_per_conn verifications; a stream or subscription whose token
 * expired or whose signing key was removed. */
#define FXB_CODE_AUTH_TIMEOUT 0x4u
#define FXB_CODE_AUTH_FAILED 0x5u
#define FXB_CODE_AUTH_EXPIRED 0x6u
/* QUIC application code of a connection closed by subscriber_block_timeout. */
#define FXB_CODE_SLOW_SUBSCRIBER 0x7u

/* One server endpoint and the connections it accepted: the broker's only
 * endpoint, or one member of its server group (io_threads >= 2). */
typedef struct fxb_ep {
    fx_loop *loop;
    fx_task auth_task; /* re-checks every stream's credentials (SIGHUP) */
    fx_quic_endpoint *ep;
    int worker;  /* worker index of |loop|, or -1 (an io loop) */
    bool member; /* of the broker's server group */
    /* This endpoint's loop only: its open connections (fxb_conn.cnext). */
    fxb_conn *conns;
    size_t conns_listed;
} fxb_ep;

struct fx_broker {
    fx_broker_opts o;
    fx_registry *reg;
    fx_retained retained; /* all rings (retained_bytes_limit); not refcounted */
    fx_budget budget;     /* process-wide publish bytes (checkpoint 3) */
    uint32_t nworkers;
    fxb_worker *workers;
    uint32_t nio;
    fx_loop **io; /* dedicated io loops (io_threads), or NULL */
    /* Server endpoints, placed by fx_placement_endpoint: one, or with
     * io_threads >= 2 one per io loop but the last, as members of |grp|
     * (connections go to a member by the transport's connection-ID rule). */
    fxb_ep *eps;
    uint32_t neps;
    fx_quic_server_group *grp; /* NULL with one endpoint */
    uint16_t port;
    /* The internal listener (internal_ip): the last of |eps|, on the loop
     * of the first; its bound port, or 0. */
    uint16_t internal_port;
    char fingerprint[65];
    bool started, stopped;
    atomic_uint_fast64_t next_sub_id;  /* subscription ids, from 1 */
    atomic_uint_fast64_t next_conn_id; /* connection ids, from 1 */
    atomic_uint_fast32_t nconns;       /* connections served (max_connections) */
    /* Graceful drain (control.c): set once by fx_broker_drain; read by every
     * loop. Publishes, subscribes, stream creation and new connections are
     * refused from then on. */
    atomic_bool draining;
    atomic_uint_fast64_t drain_refused; /* publishes answered "broker shutting down" */
    /* Per source address: connections (max_connections_per_ip) and the auth
     * rate (auth_rate_per_ip). Any thread. */
    fxb_peers peers;
    /* Frame bytes held for unauthenticated streams, all connections
     * (preauth_max_bytes). Any thread. */
    atomic_uint_fast64_t preauth_bytes;
    struct fxb_durable *dur; /* durable storage (durable.c), or NULL without a storage dir */
    /* The tenant accounts of the caches (cache_srv.c). */
    struct fxb_caches *caches;
    /* Forwards publishes for streams other nodes own (fx_broker_set_forwarder),
     * or NULL. */
    _Atomic(struct fx_forwarder *) forwarder;
    /* Serves subscribers without FEATURE_REDIRECT from local mirrors of
     * streams other nodes own (fx_broker_set_mirrors), or NULL. */
    _Atomic(struct fx_mirrors *) mirrors;
};

/* Error text of everything refused during the drain (also the close reason;
 * the client maps it to FX_ESHUTDOWN's meaning). */
#define FXB_SHUTDOWN_TEXT "broker shutting down"

/* Kinds of stream user pointers (first field of fxb_bidi and fxb_sub). */
enum { FXB_KIND_BIDI = 1, FXB_KIND_SUB = 2 };

/* One client connection. Loop fields: its endpoint loop only; the refcount
 * is atomic because jobs (worker threads) hold the connection's budget. Its
 * parts: |auth| (conn_auth.h), |writer| (writer.h), |lanes| (conn_life.h),
 * |replies| (reply.h), each set up by its stage's _init where it has one. */
struct fxb_conn {
    atomic_int refs;
    fx_broker *b;
    fx_quic_conn *qc; /* NULL once closed */
    fx_loop *loop;
    uint32_t epi; /* index of its endpoint in b->eps */
    uint64_t id;
    fx_budget budget; /* this connection's share of b->budget */
    fxb_bidi *bidis;  /* open client bidi streams (list) */
    fxb_sub *subs;    /* live subscriptions (list) */
    uint32_t nsubs;
    bool dead;
    bool counted;             /* holds one of max_connections (b->nconns) */
    fxb_conn *cnext, *cprev;  /* on b->conns */
    fxb_conn_auth auth;       /* pre-auth limits and token lifetime (conn_auth.h) */
    fxb_conn_writer writer;   /* the writer's wait, wake-up and flush timer (writer.h) */
    fxb_conn_lanes lanes;     /* its writer lanes (conn_life.h) */
    fxb_conn_replies replies; /* replies queued on all its streams (reply.h) */
    /* Drain (control.c): what the connection's progress looked like at the
     * last stall check. */
    uint64_t drain_sig[3];
    bool drain_sampled;
};

/* A client-opened bidi stream: auth, then publishes or one subscribe. Conn
 * loop only; refcounted (plain int) because tasks may be pending on it. */
struct fxb_bidi {
    int kind; /* FXB_KIND_BIDI */
    int refs;
    fxb_conn *conn;
    int64_t sid;
    fxb_bidi *next;
    fx_frame_decoder dec;
    bool authed;
    uint32_t client_features; /* auth.client_features (0: none offered) */
    uint32_t client_features_hi; /* auth.client_features_hi (0: none offered) */
    char tenant[FX_REGISTRY_NAME_MAX + 1];
    /* In a cluster that forwards publishes: the token this stream
     * authenticated with (the owner verifies it again), else NULL. */
    char *fwd_token;
    void *auth_ctx; /* claims from o.auth.verify, released with the stream */
    bool ended;     /* no more input is processed (error, subscribe, reset) */
    bool closed;    /* QUIC stream gone */
    bool peer_fin;  /* the client finished sending */
    bool fin_sent;
    /* |tenant|'s cache byte account (cache_srv.c), found at its first cache
     * request; the broker's, never freed before it. */
    struct fxb_cache_tenant *cache_acct;
    bool sub_pending; /* a subscribe is waiting for its worker: hold the FIN */
    size_t credit_owed;
    /* When the claims lapse (Unix seconds; INT64_MAX = never). Before auth:
     * counted in conn->auth.unauth_streams; |auth_timer| resets the stream at
     * auth_timeout_ms; |preauth_charge| bytes of the frame being read are
     * counted in conn->auth.preauth_bytes. */
    int64_t auth_exp_s;
    bool unauth_counted;
    size_t preauth_charge;
    fx_timer auth_timer;
    fxb_resv resv;   /* the frame's checkpoint-3 reservation (resv.h) */
    fxb_admit admit; /* its parked, merged and deferred publish jobs (admission.h) */
    /* Input that arrived while the stream waits (not credited, so bounded by
     * the receive window): pend[pend_off, pend_len). */
    uint8_t *pend;
    size_t pend_off, pend_len, pend_cap;
    fxb_replyq replies;    /* replies in request order and their bounds (reply.h) */
    fxb_resolved resolved; /* names, stream and permissions of its requests (resolve.h) */
    fxb_sub *member;       /* a group member's join stream: its member (group_req.c) */
    /* Its member's op inbox is at its bound (checkpoint 5a): the stream reads
     * nothing until the worker made room (group_req.c sets and clears it). */
    bool member_full;
};

/* A publish job: one batch for one stream, from ingress to its worker: one
 * publish request, or the requests of one read merged (fxb_merge). */
struct fxb_job {
    fx_ingress_req req;
    fxb_conn *conn; /* reference (its budget holds the permit) */
    fxb_worker *w;
    fx_stream_handle *h; /* reference */
    fx_buf *backing;     /* the payload bytes */
    fx_wire_slice *payloads;
    uint32_t count;
    uint32_t nreq;        /* publish requests in the job (counters count each) */
    size_t payload_bytes; /* felix_publish_bytes_total */
    uint64_t arrived_ns;
    /* Ack slots of its acked requests, in request order. With |commit| they
     * are answered after append + fanout and the job holds a reference to
     * each; else at admission, and the job holds none. */
    fxb_reply **acks;
    uint32_t nacks;
    bool commit;
    bool counted; /* in its handle's jobs in flight (a cluster's in-memory stream) */
    /* Durable streams: the storage stage keeps the trip's state apart
     * (fxb_stored, durable_int.h). */
    char *swhy; /* NULL or the storage error's detail (owned; "storage damaged") */
    fxb_job_idem idem; /* an idempotent producer's batch (idem.h); |on| false otherwise */
    /* A cluster mirror's batch (mirror_local.c): appended at |mirror_offset|
     * (the owner's), bypassing the owner-only checks; |mirror_done| runs
     * once on the worker when it is appended and fanned out (0), or failed
     * (-ERANGE: below the ring's tail; FX_ENOSTREAM: the stream is gone;
     * FX_ECLOSED: freed unrun, the broker stopping). */
    bool mirror;
    uint64_t mirror_offset;
    uint64_t mirror_skipped; /* offsets the append jumped over (a gap) */
    void (*mirror_done)(void *user, int rv, uint64_t skipped);
    void *mirror_user;
};

/* One subscription: its identity and life here, and one part per stage,
 * each written on its owner's thread only (the atomics of the lane part are
 * the shared fields): |feed| on its stream's worker loop (feeder.h), |lane|
 * between the feeder and the writer (lane.h), |writer| on the connection's
 * loop (writer.h), |dur| by the storage thread of a durable stream
 * (durable.h). The constructor (sub_new, subscribe.c) fills them before the
 * subscription is shared; the last reference frees them. */
struct fxb_sub {
    int kind; /* FXB_KIND_SUB */
    atomic_int refs;
    fx_broker *b;
    fxb_worker *w;
    fxb_conn *conn; /* reference */
    uint64_t id;
    fx_stream_handle *h; /* reference */
    fx_start start;      /* set by the request; the worker's once posted to it */
    uint32_t client_features; /* its subscribe stream's auth.client_features */
    atomic_bool closed;  /* unsubscribed: the feeder stops, the writer drops */
    atomic_bool active;  /* the event stream is open: the feeder may run */
    /* The subscribe exchange and the connection's list (connection loop). */
    fx_task reply_task;
    fxb_sub *next;
    fxb_bidi *bidi; /* the subscribe stream, until it got its reply */
    bool listed;    /* on conn->subs */
    /* The credentials of the subscribe request (taken over from its stream,
     * connection loop), released with the subscription; checked for expiry
     * and key removal. */
    void *auth_ctx;
    int64_t auth_exp_s; /* INT64_MAX = never */
    /* Frees the stage parts below, set by the constructor (subscribe.c,
     * which sits above every stage it built them with): the last
     * fxb_sub_unref, on any thread, calls it without naming those stages. */
    void (*free_parts)(fxb_sub *sub);
    fxb_feeder feed;
    fxb_sub_lane lane;
    fxb_sub_writer writer;
    fxb_sub_dur dur;
    fxb_sub_group grp; /* a consumer-group member's part (group.h) */
};

/* True once the drain started (fx_broker_drain sets |draining| once). Any
 * thread. */
static inline bool fxb_is_draining(const fx_broker *b)
{
    return atomic_load_explicit(&((fx_broker *)b)->draining, memory_order_acquire);
}

/* TEST HOOK (test_hooks.c, fx_broker_test_redirect_subscribe), asked by
 * fxb_subscribe once the stream of subscribe |m| on |s| is resolved: true
 * when a redirect set for it answered it (not_leader or error) and ended
 * the stream. With none set it costs one atomic load. Connection loop. */
bool fxb_test_subscribe_redirected(fxb_bidi *s, const fx_msg *m);

#endif
