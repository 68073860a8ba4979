/* Private state of the broker data plane, shared by its stages: conn.c,
 * bidi.c, reply.c, publish.c, ingress.c and subscribe.c on a connection's
 * loop; worker.c, fanout.c (through stream.h) and feeder.c on a worker;
 * lane.c between them; writer.c back on the connection's loop. Which thread
 * may touch a field is noted per struct; objects reached from two loops are
 * atomically refcounted, and every task posted to another loop holds a
 * reference until its callback runs. */
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
#include "broker/broker.h"
#include "broker/envelope.h"
#include "broker/idtable.h"
#include "broker/ingress.h"
#include "broker/peers.h"
#include "broker/registry.h"
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

/* One queued reply on a bidi stream, in request order. Done replies are sent
 * from the head; a commit ack is completed by its worker through |task|.
 * Refcounted: the stream's FIFO and, for a commit ack, the job. */
struct fxb_reply {
    atomic_int refs;
    fxb_bidi *owner; /* conn loop only; NULL once the stream is gone */
    fx_loop *loop;
    fx_task task;
    fxb_reply *next;
    atomic_bool done;
    atomic_bool claimed;  /* the first fxb_reply_complete wins (worker or timeout) */
    uint64_t deadline_ns; /* a commit ack: answered with a timeout then; else 0 */
    fx_buf *frame;        /* the encoded reply, once done */
    bool binary;          /* 0x0010 ack, else JSON publish_ok / publish_error */
    uint64_t request_id;
};

/* Merging (ingress.c): the complete binary publish frames of one read for
 * the same stream and ack kind become one job. Each frame keeps the bytes its
 * header reserved (summed into |held|) and its own ack slot, queued in
 * request order when the frame is read. Until the job is made, payloads point
 * into the read's input (valid while it is fed) or into |owned|, the body the
 * first frame's decoder had to buffer; the job copies them into one buffer.
 * The arrays are scratch kept by the stream, so a merge allocates nothing per
 * frame. Conn loop. */
typedef struct fxb_merge_part {
    const uint8_t *p; /* the frame's payload region (its payloads, back to back with their
                         length prefixes) */
    size_t len;
    uint32_t first; /* its first slice in |sl| */
} fxb_merge_part;

typedef struct fxb_merge {
    fx_stream_handle *h; /* reference; NULL while nothing is merged */
    bool acked;
    uint32_t nreq; /* frames merged, each one publish request; nreq parts */
    size_t bytes;  /* sum of the parts' lengths */
    size_t payload_bytes;
    fx_permit held; /* the frames' header reservations */
    uint8_t *owned; /* body of the first frame, taken from the decoder (free()), or NULL */
    size_t owned_len;
    fxb_merge_part *parts;
    fx_wire_slice *sl;
    fxb_reply **acks; /* ack slots of acked frames (nreq of them when |acked|) */
    uint32_t nsl;
    uint32_t cap_parts, cap_sl; /* |acks| has cap_parts too */
} fxb_merge;

/* Bounds of one merged job: frames, messages and payload bytes (the event
 * frame a subscriber gets for it stays far below any frame limit). */
#define FXB_MERGE_MAX_FRAMES 64u
#define FXB_MERGE_MAX_MSGS 1024u
#define FXB_MERGE_MAX_BYTES (1u << 20)

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
    /* Checkpoint-3 bytes of the frame being read, reserved from the
     * connection's budget when its header arrived and handed to its publish
     * job (fxb_bidi_adopt_reservation), else released once it is handled.
     * While |resv_wait| the stream reads nothing (its input waits in |pend|,
     * uncredited) until |resv_w| is granted; |resv_task| brings the grant
     * back to this loop. |frame_timer| runs from the reservation to the end
     * of the body (frame_read_timeout). */
    fx_permit resv;
    bool resv_wait;
    int resv_rv;         /* grant result, written before |resv_task| is posted */
    uint16_t resv_flags; /* flags of the frame whose header was read */
    fx_budget_waiter resv_w;
    fx_task resv_task;
    fx_timer frame_timer;
    /* Ingress parking: the job waiting for admission, and input that arrived
     * meanwhile (not credited, so bounded by the receive window). */
    fxb_job *parked;
    /* Frames of the current read being merged, and a job made behind the
     * parked one that waits its turn for admission (the stream reads nothing
     * while one waits). */
    fxb_merge merge;
    fxb_job *deferred;
    uint8_t *pend; /* unread input is pend[pend_off, pend_len) */
    size_t pend_off, pend_len, pend_cap;
    fx_task resume_task;
    bool resume_pending;
    fx_timer wait_timer;
    fx_timer commit_timer; /* the head commit ack's ack_wait_timeout (reply.c) */
    /* Replies in request order. At FXB_REPLIES_HIGH queued the stream stops
     * reading (a client that sends requests but does not read the answers is
     * slowed, not buffered without bound) until they fall to
     * FXB_REPLIES_LOW; |replies_task| then resumes reading. */
    fxb_reply *rhead, *rtail;
    size_t nreplies;
    bool replies_full;
    fx_task replies_task;
    /* Last resolved stream (names resolved once per QUIC stream) and the
     * permission answers for those names: bit (1 << action) of |perm_known|
     * says |perm_ok| holds that action's answer. */
    fx_stream_handle *h;
    char hkey[3 * (FX_REGISTRY_NAME_MAX + 1)];
    size_t hkey_len;
    uint8_t perm_known, perm_ok;
    /* The names section of the last binary publish whose names were
     * validated (publish.c), and whether those exact names passed the tenant
     * check and resolved to |h| with the publish permission: set by the
     * frame that resolved them, cleared whenever |h|, |hkey| or the cached
     * names change. Then a frame with the same names only needs |h| to be
     * still active. */
    fx_wire_names_cache names;
    bool names_ok;
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

/* Bounds of a client stream's reply queue (the original throttles at the
 * same marks). */
#define FXB_REPLIES_HIGH 1536u
#define FXB_REPLIES_LOW 1024u
/* The same bound over all the streams of one connection. */
#define FXB_CONN_REPLIES_HIGH 4096u
#define FXB_CONN_REPLIES_LOW 3072u

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

/* ---- conn.c: connection life (conn loop) ------------------------------------ */
extern const fx_quic_callbacks fxb_quic_callbacks;
void fxb_conn_ref(fxb_conn *c);
void fxb_conn_unref(fxb_conn *c);
/* The connection's endpoint loop: keeps that endpoint's list. */
void fxb_conn_list_add(fx_broker *b, fxb_conn *c);
void fxb_conn_list_remove(fx_broker *b, fxb_conn *c);
/* Stream |s| of |c| just authenticated: the connection is no longer
 * subject to auth_timeout_ms, and its credentials' expiry is watched. */
void fxb_conn_on_authed(fxb_conn *c, fxb_bidi *s);
/* A verification on |c| failed: closes |c| after auth_failures_per_conn. */
void fxb_conn_on_auth_failed(fxb_conn *c);
/* Watches the expiry |exp_s| (Unix seconds) of credentials held on |c|. */
void fxb_conn_watch_expiry(fxb_conn *c, int64_t exp_s);
/* Task callback of fxb_ep.auth_task: re-checks the credentials of every
 * stream and subscription on the endpoint's connections (key removal). */
void fxb_conn_auth_recheck(fx_loop *l, fx_task *t, void *user);

/* ---- bidi.c: client bidi streams, input and credit (conn loop) -------------- */
/* A new bidi stream |sid| of |c|, listed on |c| (one reference: the QUIC
 * stream's). Returns NULL on -ENOMEM. */
fxb_bidi *fxb_bidi_new(fxb_conn *c, int64_t sid);
void fxb_bidi_unref(fxb_bidi *s);
/* Input from QUIC (|fin|: the client finished sending). */
void fxb_bidi_on_data(fxb_bidi *s, const uint8_t *data, size_t len, bool fin);
/* Continues reading input after an ingress park ended. */
void fxb_bidi_continue(fxb_bidi *s);
/* Resets the stream for malformed input (counted). */
void fxb_bidi_fail(fxb_bidi *s, const char *why);
/* The QUIC stream is gone (or its connection): discards what waits, drops
 * the replies and the stream's reference. */
void fxb_bidi_close(fxb_bidi *s);
/* Gives back what |s| holds of its connection's pre-auth allowances. */
void fxb_bidi_preauth_release(fxb_bidi *s);
/* Checks that |s|'s credentials permit |action| on the named stream (before
 * anything is created), then resolves the names (both cached per QUIC
 * stream). Returns 0, FX_EFORBIDDEN with |err| "forbidden" (counted and
 * logged, rate-limited), or a registry error with |err| filled. |*ph| is
 * borrowed from the stream's cache. */
int fxb_bidi_resolve(fxb_bidi *s, fx_broker_auth_action action, fx_wire_slice tenant,
                     fx_wire_slice ns, fx_wire_slice stream, fx_stream_handle **ph,
                     fx_registry_err *err);

/* ---- reply.c: the reply queue of a bidi stream (conn loop) ------------------ */
/* Sets up |s|'s reply queue (at creation). */
void fxb_reply_bidi_init(fxb_bidi *s);
/* Encodes |m| as a whole frame in a new buffer. Returns 0 or an error. */
int fxb_msg_frame(const fx_msg *m, fx_buf **pframe);
/* An ack slot queued on |s| in request order, completed later
 * (fxb_reply_complete). Returns NULL on -ENOMEM. */
fxb_reply *fxb_reply_new(fxb_bidi *s, bool binary, uint64_t request_id);
/* Fills |r| with its answer (|err| NULL = ok) and marks it done. Any thread;
 * the owner's loop sends it at its next flush. */
void fxb_reply_complete(fxb_reply *r, const char *err);
/* Any thread. */
void fxb_reply_unref(fxb_reply *r);
/* Appends |r| to |s|'s replies, which are written in request order. */
void fxb_reply_push(fxb_bidi *s, fxb_reply *r);
/* Queues a finished reply frame (takes ownership of |frame|) in order. */
void fxb_bidi_reply_frame(fxb_bidi *s, fx_buf *frame);
/* Queues a JSON message reply in order. Returns 0 or -ENOMEM. */
int fxb_bidi_reply_msg(fxb_bidi *s, const fx_msg *m);
/* Replies error{|text|} and, when |end|, ends the stream after it. */
void fxb_bidi_error(fxb_bidi *s, const char *text, bool end);
/* Ends the stream after the queued replies (FIN), ignoring further input. */
void fxb_bidi_end(fxb_bidi *s);
/* Sends the done replies at the head of the FIFO. */
void fxb_bidi_flush(fxb_bidi *s);
/* Drops |s|'s queued replies (the stream is gone). */
void fxb_reply_drop_all(fxb_bidi *s);
/* The commit timer's callback (|user| is the stream): flushes. Named so
 * fx_broker_test_fail_timer_arms can aim at it. Conn loop. */
void fxb_reply_commit_timer_cb(fx_loop *l, fx_timer *t, void *user);
/* ingress.c: the Wait policy's deadline timer callback (|user| is the stream
 * holding the parked job). Conn loop. */
void parked_expired(fx_loop *l, fx_timer *t, void *user);

/* ---- publish.c: publish requests (conn loop) -------------------------------- */
/* Handles one complete publish frame on |s| (binary 0x0001 / 0x0009 or a
 * decoded JSON publish / publish_batch in |m|). Returns 0 to continue, 1 when
 * the stream is parked at ingress (stop reading), or -1 when |s| was failed. */
int fxb_publish_binary(fxb_bidi *s, const fx_frame *f);
int fxb_publish_json(fxb_bidi *s, const fx_msg *m);

/* ---- ingress.c: checkpoints 3 and 4 (conn loop) ----------------------------- */
/* Sets up |s|'s reservation and admission tasks and timers (at creation). */
void fxb_ingress_bidi_init(fxb_bidi *s);
/* Reserves |n| bytes for the frame whose header (|flags|) was just read on
 * |s|; |whole|: the body is already in the input being fed, so no frame read
 * timeout runs. Returns 0 (held: read on), 1 (waiting: stop reading) or -1
 * (|s| failed). */
int fxb_ingress_reserve(fxb_bidi *s, uint16_t flags, size_t n, bool whole);
/* Gives back the reservation of the frame just handled, if no job took it. */
void fxb_ingress_resv_release(fxb_bidi *s);
/* Gives back the reservation, or cancels its wait, as the stream goes away. */
void fxb_ingress_resv_cancel(fxb_bidi *s);
/* Moves the reservation of the frame just read on |s| into |r| (the job's
 * admission). */
void fxb_bidi_adopt_reservation(fxb_bidi *s, fx_ingress_req *r);
/* Queues a publish of |count| payloads in |backing| (taken) to |h| as a job
 * through admission. Returns 0 when settled, 1 when parked (|s| stops
 * reading), -1 when |s| was failed. */
int fxb_ingress_submit(fxb_bidi *s, fx_stream_handle *h, fx_buf *backing,
                       const fx_wire_slice *payloads, uint32_t count, bool acked, bool binary,
                       uint64_t request_id);
/* Merges the binary publish frame |f| just read on |s| (decoded in |pb|, at
 * least one payload, stream |h| resolved) into the job of the read's frames;
 * a frame that cannot join (another stream or ack kind, a full merge) first
 * sends the merged ones to admission. |pb|'s slices must point into |f|'s
 * body, which must stay valid until fxb_ingress_flush(). Returns 0 (merged),
 * 1 (the merge before it parked: this frame waits as |s->deferred|, stop
 * reading) or -1 (|s| failed). */
int fxb_ingress_add(fxb_bidi *s, fx_stream_handle *h, const fx_frame *f,
                    const fx_wire_publish_batch *pb, bool acked, uint64_t request_id);
/* Sends the merged frames of |s| as one job to admission (nothing merged:
 * nothing to do). Returns 0 when settled, 1 when parked, -1 when |s| failed. */
int fxb_ingress_flush(fxb_bidi *s);
/* The parked job settled: admits the deferred one. Returns 0 or 1 (parked). */
int fxb_ingress_run_deferred(fxb_bidi *s);
/* Ends a parked admission because |s| is going away. */
void fxb_ingress_cancel_parked(fxb_bidi *s);
/* |s| is going away: drops what is merged and the deferred job (whole
 * requests never admitted: counted as cancelled). */
void fxb_ingress_discard(fxb_bidi *s);
/* Frees |s|'s merge scratch (last reference). */
void fxb_ingress_bidi_deinit(fxb_bidi *s);
/* Any thread. */
void fxb_job_free(fxb_job *j);

/* ---- worker.c: the worker loop ---------------------------------------------- */
/* The worker that owns |h|. Any thread. */
fxb_worker *fxb_worker_for(fx_broker *b, const fx_stream_handle *h);
/* Rings |w|'s doorbell (jobs were queued). Any thread. */
void fxb_worker_kick(fxb_worker *w);
/* The fx_stream of |h| on worker |w|, created on first use. Worker thread.
 * Returns NULL on -ENOMEM. */
fx_stream *fxb_worker_stream(fxb_worker *w, fx_stream_handle *h);
/* The worker's state for |h| if it has any; never creates it. Worker thread. */
fx_stream *fxb_worker_stream_if_any(fxb_worker *w, const fx_stream_handle *h);
/* Slots of the worker's stream table: at most eight times the streams it
 * holds, or 16. Worker thread. */
size_t fxb_worker_stream_capacity(const fxb_worker *w);
/* Creates worker |i| of |b| (its loop, not started, and its job queue).
 * Returns 0 or -errno. Main thread. */
int fxb_worker_init(fx_broker *b, fxb_worker *w, uint32_t i);
/* Frees what fxb_worker_init made and the worker's streams (loop stopped). */
void fxb_worker_deinit(fxb_worker *w);
/* Task callbacks: drain the job queue; continue a parked fanout. */
void fxb_worker_drain(fx_loop *l, fx_task *t, void *user);
void fxb_worker_resume(fx_loop *l, fx_task *t, void *user);
/* Task callbacks of a subscription (fxb_sub.reg_task / unreg_task): register
 * it with its stream (then answer on the connection's loop) or remove it. */
void fxb_worker_sub_register(fx_loop *l, fx_task *t, void *user);
void fxb_worker_sub_unregister(fx_loop *l, fx_task *t, void *user);
/* The stream of |h| was deleted: its subscriptions on |w| finish their event
 * streams after what is queued (FIN), and the worker's fx_stream is freed
 * once nobody uses it. Worker thread. */
void fxb_worker_end_stream(fxb_worker *w, fx_stream_handle *h);
/* Task callback of a posted fxb_end (fx_broker_delete_stream). */
void fxb_worker_end_task(fx_loop *l, fx_task *t, void *user);
/* Ends the deleted streams whose older jobs have all completed. Worker
 * thread; called after each completed job while |w->ends| is set. */
void fxb_worker_run_due_ends(fxb_worker *w);
/* Drops the ends still waiting (teardown). */
void fxb_worker_free_ends(fxb_worker *w);

/* ---- feeder.c: subscription feeders (worker loop) --------------------------- */
/* on_wake of the subscription's subscriber queue (fx_subscribe_opts). */
void fxb_feeder_wake(fx_subscriber *s, void *user);
/* Task (fxb_sub.feed_task) and timer (fxb_sub.delay_timer) callbacks. */
void fxb_feeder_run(fx_loop *l, fx_task *t, void *user);
void fxb_feeder_delay(fx_loop *l, fx_timer *t, void *user);

/* ---- lane.c: writer lanes (checkpoint 6) ------------------------------------ */
/* Creates |c|'s writer lanes from the options (before any subscription).
 * Returns 0 or -errno (-ENOMEM). Conn loop. */
int fxb_conn_lanes_init(fxb_conn *c);
/* Frees them (last reference of |c|: no subscription is left). */
void fxb_conn_lanes_deinit(fxb_conn *c);
/* The lane of a new subscription |sub| of |c|, by subscriber_lane_shard.
 * Conn loop. */
fxb_lane *fxb_lane_choose(fxb_conn *c, const fxb_sub *sub);
/* What a push did with the frame list. */
typedef enum fxb_lane_result {
    FXB_LANE_QUEUED = 0, /* on the subscription's queue under a lane slot (drop_old may have
                            shed an older list of the same subscription for it) */
    FXB_LANE_SHED,       /* dropped by the lane policy (drop_new, or drop_old with nothing of
                            its own queued) or for lack of memory: counted and freed */
    FXB_LANE_PARKED,     /* block lane full: the feeder is parked with the list held in
                            |sub->held|; the lane resumes it when a slot is released */
    FXB_LANE_CLOSED,     /* the subscription closed: the list is freed */
} fxb_lane_result;
/* Queues |l| (taken) on |sub|'s own queue under a slot of its lane, applying
 * the lane policy (subscriber_lane_queue_policy) when the lane is full. A
 * |history| list (one holding the subscription's catch-up backlog: the ring
 * snapshot or pages replayed from disk) is never shed: a full lane parks it
 * as under block. The feeder goes on after QUEUED or SHED and stops after
 * PARKED or CLOSED. Worker. */
fxb_lane_result fxb_lane_push(fxb_sub *sub, fx_frame_list *l, bool history);
/* Runs |fn|(|arg|) (NULL: nothing) on loop |l| and waits until it has run,
 * after everything |l| had queued before it. Not on |l| itself. */
void fxb_run_on(fx_loop *l, void (*fn)(void *), void *arg);
/* Gives back one slot of |ln| (a list was sent, or discarded with its closed
 * subscription); resumes parked feeders. Any thread. */
void fxb_lane_release(fxb_lane *ln);
/* Takes a closed |sub| off its lane's parked list. Any thread. */
void fxb_lane_unpark(fxb_sub *sub);
/* on_drop of a subscription's own lane queue (user: the fxb_sub). */
void fxb_lane_on_leftover(void *item, void *user);

/* ---- writer.c: the connection writer (conn loop) ---------------------------- */
/* Schedules the writer of |c|. Any thread. */
void fxb_conn_kick_writer(fxb_conn *c);
/* Timer callback (fxb_conn.flush_timer): a held flush is due; runs the
 * writer. Connection loop. */
void fxb_writer_flush_due(fx_loop *l, fx_timer *t, void *user);
/* Task callback (fxb_conn.writer_task). */
void fxb_writer_run(fx_loop *l, fx_task *t, void *user);

/* ---- subscribe.c: subscribe requests (conn loop) ---------------------------- */
/* Handles a decoded subscribe message on |s| (authenticated, tenant checked). */
void fxb_subscribe(fxb_bidi *s, const fx_msg *m);
/* Removes |sub| (uni stream gone, write error, connection closed). Conn loop. */
void fxb_sub_close(fxb_sub *sub, bool reset_stream);
/* References (any thread). */
void fxb_sub_ref(fxb_sub *sub);
void fxb_sub_unref(fxb_sub *sub);
/* Posts |t| (embedded in |sub|) to |l|, holding a reference until it ran.
 * Any thread. */
void fxb_sub_post(fxb_sub *sub, fx_loop *l, fx_task *t);
/* Frees a frame list and its frame references; NULL does nothing. */
void fxb_frame_list_free(fx_frame_list *l);

/* ---- control.c -------------------------------------------------------------- */
/* True once the drain started. Any thread. */
bool fxb_is_draining(const fx_broker *b);
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
