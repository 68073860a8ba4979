/* The shared nouns of the broker data plane: the structs its stages pass
 * between them (fxb_worker, fx_broker, fxb_conn, fxb_bidi, fxb_job, fxb_sub,
 * fxb_lane) and the FXB_ constants. A part a struct embeds is defined in the
 * header of the stage that owns it (fxb_bidi's: resv.h, admission.h,
 * reply.h, resolve.h); those headers stand alone, so this file includes
 * them for the full types. No stage function is declared here: each stage's
 * header (conn.h, bidi.h, publish.h, admission.h, worker.h, feeder.h,
 * lane.h, writer.h, ..., see docs/design.md "Broker stage headers") declares
 * what other stages call, with its thread and the fields it owns. Which
 * thread may touch a field is noted per struct; objects reached from two
 * loops are atomically refcounted, and every task posted to another loop
 * holds a reference until its callback runs. */
#ifndef FX_BROKER_INTERNAL_H
#define FX_BROKER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/budget.h"
#include "base/buf.h"
#include "base/loop.h"
#include "base/queue.h"
#include "broker/admission.h"
#include "broker/broker.h"
#include "broker/envelope.h"
#include "broker/idtable.h"
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

/* Server flags answered to a client that sent client_flags. */
#define FXB_SERVER_FLAGS 0x3Fu
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
/* Largest frame a stream may send before it has authenticated (an auth
 * message with a large token fits many times over), and the bytes of such
 * frames all unauthenticated streams of one connection may hold at once.
 * Neither is taken from the publish byte budget. */
#define FXB_PREAUTH_MAX_FRAME (64u * 1024u)
#define FXB_PREAUTH_CONN_BYTES (4u * FXB_PREAUTH_MAX_FRAME)
/* preauth_max_bytes by default: twice what one address can hold at the
 * default max_connections_per_ip (256 x FXB_PREAUTH_CONN_BYTES), so one
 * address alone cannot keep everyone else from authenticating. */
#define FXB_PREAUTH_MAX_BYTES_DEFAULT (128ull << 20)
/* QUIC application code of a connection closed by subscriber_block_timeout. */
#define FXB_CODE_SLOW_SUBSCRIBER 0x7u
#define FXB_SLOW_SUBSCRIBER_TEXT "subscriber blocked longer than subscriber_block_timeout_ms"
/* frame_read_timeout when fx_broker_opts leaves it 0. */
#define FXB_FRAME_READ_TIMEOUT_DEFAULT_NS (10000 * FX_NS_PER_MS)
/* Jobs one worker turn takes before yielding to other tasks. */
#define FXB_WORKER_BATCH 64
/* Frame lists one feeder turn builds before yielding. */
#define FXB_FEEDER_BATCH 16

/* A worker loop: owns its streams, drains its job queue (checkpoint 4),
 * appends and fans out (checkpoint 5) and runs its streams' feeders. */
struct fxb_worker {
    fx_broker *b;
    uint32_t index;
    fx_loop *loop;
    fx_queue jobs;       /* fxb_job*, policy BLOCK (ingress decides) */
    fx_task doorbell;    /* drains |jobs|; coalesced */
    fx_task resume_task; /* a parked fanout may continue */
    /* Worker thread only: */
    fxb_idtable streams; /* its streams' state (fx_stream *), by handle id */
    fxb_job *parked_job; /* its fanout waits on a full block queue */
    fx_stream *parked_stream;
    fxb_sub *subs;        /* registered subscriptions (wnext / wprev) */
    uint64_t jobs_done;   /* jobs taken from |jobs| and completed */
    struct fxb_end *ends; /* deleted streams waiting for older jobs (worker.c) */
    /* subscriber_block_timeout: runs while the fanout is parked; |block_seq|
     * is the park (fx_stream_park_seq) it was armed for. */
    fx_timer block_timer;
    uint64_t block_seq;
    /* stream_idle_expiry sweeps (worker 0 only). */
    fx_task expiry_start;
    fx_timer expiry_timer;
    struct fxb_dworker *dur; /* durable streams' storage stage (durable.c), or NULL */
};

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
};

/* Error text of everything refused during the drain (also the close reason;
 * the client maps it to FX_ESHUTDOWN's meaning). */
#define FXB_SHUTDOWN_TEXT "broker shutting down"
/* A commit ack answered at once because its timer could not be armed. */
#define FXB_COMMIT_TIMER_TEXT "publish commit wait failed: out of memory for its timer"
/* A publish failed at admission because its wait timer could not be armed. */
#define FXB_WAIT_TIMER_TEXT "publish admission wait failed: out of memory for its timer"

/* Kinds of stream user pointers (first field of fxb_bidi and fxb_sub). */
enum { FXB_KIND_BIDI = 1, FXB_KIND_SUB = 2 };

/* A writer lane of a connection (checkpoint 6), shared by the subscriptions
 * the lane choice put on it. Each subscription queues its frame lists in its
 * own queue (fxb_sub.lane, so eviction and order stay per subscriber); the
 * lane is the bound over all of them: |count| is charged by a feeder (any
 * worker thread) before it queues a list and released by the connection
 * writer once the list is handed to QUIC, so a flow-blocked subscription's
 * backlog keeps its lane full until it drains. Feeders parked on a full
 * block lane wait in the list under |mu| (slow path only). */
struct fxb_lane {
    uint32_t index;
    size_t capacity;        /* subscriber_lane_queue_depth */
    atomic_size_t count;    /* frame lists charged: queued or being written */
    atomic_size_t nwaiters; /* parked feeders (read without |mu|) */
    pthread_mutex_t mu;
    fxb_sub *whead, *wtail; /* parked feeders (fxb_sub.lwnext), under |mu| */
};

/* One client connection. Loop fields: its endpoint loop only; the refcount
 * is atomic because jobs (worker threads) hold the connection's budget. */
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
    bool counted;       /* holds one of max_connections (b->nconns) */
    bool want_writable; /* a send hit the unacked cap: wait for on_writable */
    fx_task writer_task;
    bool writer_more;        /* a subscription stopped at its flush limit: go on */
    fx_timer flush_timer;    /* the earliest held flush (flush_max_delay) is due */
    fxb_conn *cnext, *cprev; /* on b->conns */
    /* Writer lanes: fixed at creation, freed with the last reference (the
     * subscriptions, which may outlive the loop's use, hold one). */
    fxb_lane *lanes;
    uint32_t nlanes;
    uint64_t rr_next; /* round_robin_pin: subscriptions placed so far */
    /* Before authentication (conn loop): the peer's address, counted in
     * b->peers while |peer_counted|; |authed| once any stream authenticated
     * (else |auth_timer| closes the connection at auth_timeout_ms); failed
     * verifications; streams not yet authenticated and the pre-auth frame
     * bytes they hold. */
    fxb_peer_key peer;
    bool peer_counted;
    bool authed;
    uint32_t auth_failures;
    uint32_t unauth_streams;
    size_t preauth_bytes;
    fx_timer auth_timer;
    /* Token lifetime: |exp_timer| fires at the earliest expiry (|exp_next_s|,
     * Unix seconds; INT64_MAX = none) of the credentials its streams and
     * subscriptions hold. */
    fx_timer exp_timer;
    int64_t exp_next_s;
    /* Replies queued on all its bidi streams: at FXB_CONN_REPLIES_HIGH every
     * stream of the connection stops reading until they fall to
     * FXB_CONN_REPLIES_LOW. */
    size_t nreplies;
    bool replies_full;
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
    char tenant[FX_REGISTRY_NAME_MAX + 1];
    void *auth_ctx; /* claims from o.auth.verify, released with the stream */
    bool ended;     /* no more input is processed (error, subscribe, reset) */
    bool closed;    /* QUIC stream gone */
    bool peer_fin;  /* the client finished sending */
    bool fin_sent;
    bool sub_pending; /* a subscribe is waiting for its worker: hold the FIN */
    size_t credit_owed;
    /* When the claims lapse (Unix seconds; INT64_MAX = never). Before auth:
     * counted in conn->unauth_streams; |auth_timer| resets the stream at
     * auth_timeout_ms; |preauth_charge| bytes of the frame being read are
     * counted in conn->preauth_bytes. */
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
    /* Durable streams: the storage stage keeps the trip's state apart
     * (fxb_stored, durable_int.h). */
    char *swhy; /* NULL or the storage error's detail (owned; "storage damaged") */
};

/* One subscription. Worker fields: its stream's worker; conn fields: the
 * connection's loop; the lane queue and |closed| are shared. */
struct fxb_sub {
    int kind; /* FXB_KIND_SUB */
    atomic_int refs;
    fx_broker *b;
    fxb_worker *w;
    fxb_conn *conn; /* reference */
    uint64_t id;
    fx_stream_handle *h; /* reference */
    fx_start start;
    atomic_bool closed; /* unsubscribed: the feeder stops, the writer drops */
    atomic_bool active; /* the event stream is open: the feeder may run */
    fx_queue lane;      /* fx_frame_list* it queued on its lane (|ln|), oldest first */
    fxb_lane *ln;       /* its writer lane, on |conn| (fixed) */
    fxb_sub *lwnext;    /* on ln's parked list, under ln->mu */
    bool lwaiting;      /* on ln's parked list (under ln->mu) */
    /* worker side */
    fx_task reg_task, unreg_task, feed_task;
    fx_timer delay_timer;
    bool lane_parked;
    atomic_bool lane_resumed; /* the lane woke a parked feeder */
    fx_frame_list *held;      /* built but refused by a full block lane */
    fx_stream *stream;
    fx_subscriber *sub;
    fx_backlog backlog;
    size_t backlog_pos;
    fx_coalescer co;
    bool co_history; /* the delivery |co| carries came from the backlog */
    bool registered;
    int reg_rv;
    uint64_t available;
    fxb_sub *wnext, *wprev;    /* on w->subs while registered */
    bool ending;               /* its stream was deleted: finish after the queue */
    bool block_kicked;         /* subscriber_block_timeout closed its connection */
    fx_task block_task;        /* posted to the connection's loop to close it */
    bool dur_ready;            /* durable stream: its log answered (durable.c) */
    uint64_t dur_base;         /* then: the log's next offset when it was opened */
    char *dur_why;             /* NULL or the detail of a storage |reg_rv| (owned) */
    struct fxb_replay *replay; /* history read from disk first (replay.c), or NULL */
    /* shared */
    atomic_bool fin_req; /* the feeder pushed its last list: FIN after the lane */
    atomic_uint_fast64_t lane_dropped_events;
    /* conn side */
    fx_task reply_task;
    fxb_sub *next;
    fxb_bidi *bidi; /* the subscribe stream, until it got its reply */
    int64_t uni_sid;
    bool uni_open;
    fx_frame_list *cur; /* list being written */
    size_t cur_idx;
    bool cur_charged; /* |cur| came from the lane: release its slot once sent */
    size_t inflight;  /* bytes queued on the uni stream, not yet acked */
    bool listed;      /* on conn->subs */
    bool fin_sent;
    uint64_t delivered;     /* messages written to the event stream */
    uint64_t last_write_ns; /* 0 = never */
    uint64_t flush_since;   /* writer: when it first held a short lane back; 0 = not */
    /* The credentials of the subscribe request (taken over from its stream),
     * released with the subscription; checked for expiry and key removal. */
    void *auth_ctx;
    int64_t auth_exp_s; /* INT64_MAX = never */
};

/* Posted to the deleted stream's worker; holds a handle reference. Jobs
 * queued before the deletion may still be waiting (a publish is acknowledged
 * when admitted unless ack_on_commit), and their events belong to the
 * subscribers: the end waits until the worker has completed as many jobs as
 * were queued or parked when it arrived (the queue is FIFO and a parked job
 * holds the rest back), then the feeders send what is queued and the FIN. */
typedef struct fxb_end {
    fx_task task;
    fxb_worker *w;
    fx_stream_handle *h;
    uint64_t target; /* w->jobs_done once every older job has completed */
    struct fxb_end *next;
} fxb_end;

/* True once the drain started (fx_broker_drain sets |draining| once). Any
 * thread. */
static inline bool fxb_is_draining(const fx_broker *b)
{
    return atomic_load_explicit(&((fx_broker *)b)->draining, memory_order_acquire);
}

/* The index in b->eps of the endpoint running on |loop| (a connection's loop
 * is its endpoint's). Any thread. */
static inline uint32_t fxb_ep_index(const fx_broker *b, const fx_loop *loop)
{
    for (uint32_t i = 0; i < b->neps; i++)
        if (b->eps[i].loop == loop)
            return i;
    return 0; /* unreachable: every connection comes from an endpoint */
}

#endif
