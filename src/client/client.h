/* libfelix internals shared by the client's files: the client, its
 * connections, publish workers and subscriptions. Fields say which thread
 * owns them: "loop" fields are touched only on the client loop; "mu" fields
 * under fx_client.mu; atomics anywhere. */
#ifndef FX_CLIENT_INTERNAL_H
#define FX_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/budget.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/loop.h"
#include "base/queue.h"
#include "felix/felix.h"
#include "quic/quic.h"
#include "wire/binary.h"
#include "wire/frame.h"
#include "wire/message.h"

#define FX_CLIENT_FLAGS 0x803Fu /* 0x8000: FX_FLAG_FELIXC, consumer groups */
#define FX_CLIENT_LEGACY_FLAGS 0x07u
#define FX_PENDING_BUCKETS 64
#define FX_CLIENT_LINGER_MAX_US 1000000u        /* publish_linger_us bound: 1 s */
#define FX_CLIENT_ACK_TIMEOUT_MAX_MS 86400000   /* publish_ack_timeout_ms bound: a day */
#define FX_CLIENT_CACHE_STREAMS_MAX 64u         /* cache_streams bound */
#define FX_CLIENT_CACHE_INFLIGHT_MAX (1u << 20) /* cache_inflight bound */
/* Bytes of unfinished event frames one connection may hold, credited before
 * they complete: this many times max_frame_bytes (beyond it the connection
 * closes with FXC_PARTIAL_CLOSE_CODE). */
#define FXC_PARTIAL_FACTOR 2u
#define FXC_PARTIAL_CLOSE_CODE 0x10d
/* Streams the broker may open before any subscribe; each subscribe request
 * lets it open one more (its event stream), and a stream that ends gives
 * nothing back. */
#define FXC_UNI_STREAMS_FIRST 16u
/* Redirects (route.c): not_leader answers one subscribe attempt follows at
 * most, brokers a client connects to beyond its seed, routes it keeps, and
 * the room of one "ip:port" (an IPv6 literal in brackets). */
#define FXC_REDIRECT_HOPS 3u
#define FXC_PEERS_MAX 64u
#define FXC_ROUTES_MAX 1024u
#define FXC_ADDR_MAX 72u

/* ---- process-wide loops (runtime.c) --------------------------------------- */

/* Takes a reference on the process's client loops, creating and starting
 * them on first use (FELIX_CLIENT_LOOPS of them), and gives out the next one
 * round-robin. Returns 0 and the loop in |*ploop|, or -EINVAL (bad
 * FELIX_CLIENT_LOOPS, error text set), -errno or -ENOMEM. */
int fxc_rt_acquire(fx_loop **ploop);
/* Drops a reference; the last one stops and frees the loops. Not on one. */
void fxc_rt_release(void);
/* True on any client loop's thread. Any thread. */
bool fxc_rt_is_current(void);

/* ---- errors (opts.c) ------------------------------------------------------- */

/* Sets this thread's last error text (printf) and returns |rv|. */
int fxc_client_set_error(int rv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Maps a broker error text to a code (stream not found, forbidden, ...). */
int fxc_client_map_remote(const char *msg);
/* Validates |o| and fills defaults for zero fields into |out|. */
int fxc_client_opts_check(const fx_client_opts *o, fx_client_opts *out);
/* Writes the host part of |server| ("host:port", "[v6]:port", brackets
 * removed) into |host| (|cap| bytes): the default server_name. Returns 0 or
 * FX_ECONFIG with the error text set. */
int fxc_client_server_host(const char *server, char *host, size_t cap);

/* ---- objects -------------------------------------------------------------- */

typedef struct cconn cconn;
typedef struct pworker pworker;
typedef struct preq preq;
typedef struct evs evs;
typedef struct fxc_cache fxc_cache;
typedef struct cstream cstream;

/* What a stream_user pointer points at: each such struct starts with it. */
enum { SK_WORKER = 1, SK_SUBREQ, SK_EVENTS, SK_GROUP, SK_CACHE };

/* CS_RETRY: lost, a reconnect is scheduled (its backoff timer runs). */
enum { CS_CONNECTING = 0, CS_READY, CS_CLOSED, CS_RETRY };

/* One QUIC connection of a client. A lost one is re-established in place
 * (same object, new |qc|), so workers and subscriptions keep pointing at it.
 * Loop. */
struct cconn {
    fx_client *c;
    fx_quic_conn *qc; /* NULL once closed */
    /* The broker's numeric address: the server's for the pool, a
     * redirect's for a peer. A peer carries only subscriptions, is never
     * re-established in place (its subscriptions go back to conns[0]) and
     * is connected again by the next redirect naming it. */
    char ip[64];
    uint16_t port;
    bool peer;
    char key[FXC_ADDR_MAX]; /* "ip:port" / "[ip]:port": who it is in visited lists */
    int state;
    int close_rv; /* why it closed */
    char close_text[320];
    evs *evlist;         /* every live event stream of this connection */
    size_t partial;      /* bytes of partial event frames credited early (evs.early summed) */
    uint32_t gen;        /* bumped each time the connection is lost */
    bool was_ready;      /* the current or last QUIC connection got ready */
    uint64_t backoff_ms; /* next reconnect delay; 0 = initial */
    fx_timer retry;      /* reconnect backoff */
};

/* A publish request answered by the broker (acked), or an async unacked
 * one. Two references: the caller's (or the async completion's) and the
 * loop's pending table. */
struct preq {
    atomic_int refs;
    uint64_t request_id;
    uint64_t deadline_ns; /* acked: the ack timeout, from the call */
    preq *next;           /* pending-table chain (loop) */
    preq *fnext, *fprev;  /* loop: the worker's pending list in send order */
    preq *grp;            /* loop: the next request whose message shares this frame */
    int rv;               /* mu */
    bool done;            /* mu */
    bool answered;        /* loop: the broker answered (acked publishes) */
    bool sent;            /* loop: frame released by QUIC */
    bool acked;           /* needs an answer */
    fx_ack_cb cb;         /* async completion, run on the loop */
    fx_publish_cb rcb;    /* or the completion that gets the result (fx_publish_async_ex) */
    void *user;
    uint32_t count;  /* messages of this publish (their offsets follow the first's) */
    bool has_offset; /* mu: the broker reported |offset| (idempotent batches) */
    bool duplicate;  /* mu: answered from the broker's window, not appended again */
    uint64_t offset; /* mu: this publish's first message's offset */
    char msg[256];   /* mu: broker text on failure */
};

/* One encoded frame on its way: admitted at checkpoint 1 (|permit|), queued
 * at checkpoint 2, sent by the loop. Wrapped in an fx_buf when it is sent
 * (a publish merged into another frame never is); the release (of the
 * fx_buf, or fxc_pub_job_put before) frees it and gives the permit back. */
typedef struct pjob {
    fx_client *c;
    fx_permit permit;
    preq *req;          /* NULL for a synchronous unacked publish; a chain (grp) once merged */
    struct pjob *gnext; /* loop: next job of the frame being built (coalesce.c) */
    uint64_t enq_ns;    /* admission time when publish_linger_us > 0, else 0 */
    uint32_t count;     /* messages */
    uint32_t calls;     /* publish calls it carries (more than one once merged) */
    fx_wire_batch_marks marks; /* binary: where its sections start (src/wire's builder) */
    uint8_t wack;              /* fx_wire_ack */
    bool merge;                /* a binary batch others may be merged with */
    bool idem;                 /* an idempotent batch (0x0109): frozen at its first send */
    uint64_t rid;              /* loop, idem: its request id (the frame's) */
    uint64_t pid;              /* loop, idem: the producer it was frozen under */
    struct pjob *knext;        /* loop, idem: next kept frame of the worker, in send order */
    cconn *sent_on;            /* loop: the connection QUIC took the frame on, or NULL */
    uint32_t sent_gen;         /* loop: its generation then */
    fx_buf *buf;
    size_t len;
    uint8_t frame[];
} pjob;

/* Close handshake of a publish stream (fx_client_close): FIN_WANT sends our
 * FIN once the queue is drained; the broker FINs its side only after every
 * frame sent before ours was handled and answered (FIN_SENT -> FIN_DONE). */
enum { FIN_NONE = 0, FIN_WANT, FIN_SENT, FIN_DONE };

/* The coalescing group of one publish worker (coalesce.c), loop: the jobs
 * of the next frame, popped from the worker's queue while the previous one
 * is still being sent (chained by pjob.gnext); |next| is a popped job that
 * cannot join them and starts the frame after. */
typedef struct fxc_group {
    pjob *head, *tail, *next;
    size_t jobs, msgs, bytes; /* bytes: payload entries (a job that cannot merge: its frame) */
    size_t max_body;          /* max_frame_bytes: the bound of a merged frame's body */
} fxc_group;

/* Sequence of one stream under the worker's producer (idem.c). */
typedef struct fxc_seq {
    struct fxc_seq *next;
    uint64_t next_seq;
    size_t klen;
    uint8_t key[]; /* the frame's names section: tenant, namespace, stream */
} fxc_seq;

/* The idempotent producer of one publish worker (opts.idempotent), loop.
 * Each worker is its own producer: its stream carries its batches in order,
 * so its per-stream sequences reach the broker in order. Every idempotent
 * frame is frozen at its first send (producer id and sequence written into
 * its bytes) and kept, with its budget bytes, until the broker answers it
 * (|khead|..|ktail|, send order); after a lost connection the kept frames
 * are re-sent, the same bytes, from |resend| on, before anything newer. */
typedef struct fxc_idem {
    uint64_t pid;                /* producer id; 0: none (producer_init needed) */
    uint64_t init_rid;           /* the pending producer_init's request id, or 0 */
    fxc_seq *seqs;               /* next sequence per stream of |pid| */
    pjob *khead, *ktail;         /* frames sent and not answered (their fx_buf ref is the list's) */
    pjob *resend;                /* next kept frame to (re-)send, or NULL */
    uint16_t auth_flags;         /* auth_ok's server_flags, reported once the producer is known */
    atomic_uint_fast64_t inits;  /* producer_init answered (read by tests, any thread) */
    atomic_uint_fast64_t resent; /* frames re-sent after a lost connection (same) */
    atomic_uint_fast64_t commit_resent; /* frames re-sent after "publish commit timeout" */
    atomic_uint_fast64_t duplicates; /* publishes answered duplicate (same) */
    atomic_uint_fast64_t refused;    /* publishes refused by the check (same) */
} fxc_idem;

/* A publish worker: one authed bidi stream, its queue (checkpoint 2). */
struct pworker {
    int kind; /* SK_WORKER */
    fx_client *c;
    size_t index;
    cconn *conn;          /* loop */
    int64_t sid;          /* loop; -1 when not open */
    int state;            /* loop: 0 idle, 1 authing, 2 ready, 3 failed, 4 producer_init (idem.c) */
    atomic_int fail_rv;   /* 0, or why the worker is dead (read by producers) */
    pjob *held;           /* loop: popped job refused by QUIC (FX_EFULL) */
    int fin;              /* loop: close handshake, FIN_* */
    fx_queue q;           /* items: pjob* */
    fx_task drain;        /* posted by producers */
    fx_frame_decoder dec; /* loop: replies */
    preq *pending[FX_PENDING_BUCKETS]; /* loop: by request id */
    size_t npending;                   /* loop */
    preq *fhead, *ftail;               /* loop: pending in send order (ack timeout) */
    fx_timer ack_timer;                /* loop: the oldest pending request's deadline */
    fxc_group group;                   /* loop: natural batching (coalesce.c) */
    fx_timer linger;                   /* loop: publish_linger_us of |group| */
    fxc_idem idem;                     /* loop: the idempotent producer (idem.c) */
};

/* A subscription. */
struct fx_subscription {
    int kind;        /* SK_SUBREQ: its subscribe bidi stream's user pointer */
    atomic_int refs; /* user + loop */
    fx_client *c;
    char *ns, *stream;
    fx_start start;
    /* subscribe stream (loop) */
    cconn *conn;
    int64_t req_sid;
    fx_frame_decoder req_dec;
    bool authed;
    bool loop_gone;      /* loop ref dropped */
    bool resub_need;     /* loop: the connection was lost; subscribe again when ready */
    bool resub_wait;     /* loop: a re-subscribe is waiting for its answer */
    bool resub_earliest; /* loop: it was too old; ask again from earliest */
    bool rx_have;        /* loop: |rx_next| is known */
    uint64_t rx_next;    /* loop: offset after the last batch taken from the broker */
    bool parked;         /* loop: |qw| is parked on the queue */
    /* Redirects of the current attempt (route.c), loop: not_leader answers
     * followed, and the brokers asked so far ("ip:port", the first one
     * included), none of which is asked twice. */
    uint32_t hops;
    uint32_t nvisited;
    cconn *redirect; /* loop: where the not_leader just read sends it (on_req_msg) */
    char visited[FXC_REDIRECT_HOPS + 1][FXC_ADDR_MAX];
    /* state (mu) */
    int state; /* 0 pending, 1 live, 2 ended */
    fx_sub_error err;
    bool closed; /* fx_unsubscribe called */
    atomic_uint_fast64_t id;
    /* events */
    evs *ev;                    /* loop */
    fx_queue q;                 /* items: sbatch* */
    fx_queue_waiter qw;         /* loop: BLOCK producer */
    fx_task resume;             /* loop: after qw resumed */
    fx_task credit;             /* grants credit released by the consumer */
    atomic_size_t credit_bytes; /* released, not yet granted (see release_cur) */
    /* Consumer wait: a futex word bumped by every wake (no mutex on the
     * delivery path; see wake_consumer in subscribe.c). */
    atomic_uint wseq;
    atomic_uint waiting; /* 1: the consumer is in next_batch (checking or asleep) */
    fx_event_cb cb;      /* loop (set via a task) */
    atomic_bool cb_set;  /* fx_subscription_set_callback was called */
    void *cb_user;
    fx_task set_cb;
    fx_event_cb new_cb;
    void *new_cb_user;
    fx_task stop;
    fx_subscription *lnext, *lprev; /* loop: the client's list */
    /* consumer side (the one consumer thread) */
    struct sbatch *cur;
    uint32_t cur_i;
    bool have_last; /* offsets delivered so far (consumer or callback) */
    uint64_t last_off;
    /* stats */
    atomic_uint_fast64_t received, delivered, dropped, dropped_batches, gaps, missed;
    atomic_uint_fast64_t reconnects;
};

/* One received event batch, owned by the subscription queue. */
typedef struct sbatch {
    fx_wire_event_batch eb; /* slices point into |body| */
    size_t credit;          /* frame bytes to grant back when consumed (BLOCK) */
    uint8_t body[];
} sbatch;

/* An event uni stream opened by the broker. Loop. */
struct evs {
    int kind; /* SK_EVENTS */
    cconn *conn;
    int64_t sid;
    fx_frame_decoder dec;
    bool hello;
    uint64_t sub_id;
    fx_subscription *sub;
    fx_group *grp;   /* or the group member it delivers to (group.c) */
    bool left;       /* its member left: read to the broker's FIN, discarding */
    evs *next;       /* cconn.evlist */
    sbatch *stalled; /* BLOCK: batch the queue refused */
    uint8_t *rx;     /* bytes not decoded yet while stalled or orphaned */
    size_t rx_len, rx_cap;
    bool fin;
    bool ended;
    bool gone;          /* the QUIC stream closed while bytes were still buffered */
    int end_rv;         /* != 0: once the buffered bytes are delivered the subscription
                           ends with this (its connection closed without the stream's
                           FIN), not with EOF; end_text says why */
    char end_text[256]; /* fx_sub_error.message's size */
    bool drop;          /* orphan: reset and free once the current callback returns */
    size_t early;       /* bytes of the frame being decoded already credited */
};

struct fx_client {
    atomic_int refs; /* owner + callers inside */
    fx_client_opts o;
    char *strs; /* owned copies of the option strings */
    char ip[64];
    uint16_t port;
    fx_loop *loop;
    fx_quic_endpoint *ep; /* loop */
    fx_quic_opts qo;
    fx_quic_connect_opts qco;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool closed;           /* mu */
    int connect_rv;        /* mu: 1 while connecting */
    char connect_msg[384]; /* mu: why connect failed (set on the loop) */
    bool close_done;       /* mu: the loop finished tearing down */
    uint16_t server_flags;
    fx_budget budget;
    cconn **conns; /* publish conns; conns[0] is the primary */
    size_t nconns;
    pworker *workers;
    size_t nworkers;
    atomic_uint rr;
    atomic_uint_fast64_t next_request_id;
    atomic_size_t outstanding; /* publishes not yet finished (flush) */
    /* Block-policy credit the consumers released but the loop has not
     * granted yet, over all subscriptions (see release_cur). */
    atomic_size_t held_credit;
    atomic_int flushers;
    fx_task connect_task, close_task;
    /* Close handshake (fx_client_close): no new publishes once |pub_closing|;
     * |fin_left| workers (-1: fin_task has not run) still wait for the
     * broker's FIN; |fin_rv| is the first handshake failure. */
    atomic_bool pub_closing;
    fx_task fin_task;
    int fin_left;          /* mu */
    int fin_rv;            /* mu */
    fx_subscription *subs; /* loop */
    fx_group *groups;      /* loop: consumer-group members (group.c) */
    bool closing;          /* loop: fx_client_close started tearing down */
    /* Unacked publishes QUIC had taken on a connection that was lost before
     * the broker acknowledged their bytes: they may be lost. */
    atomic_uint_fast64_t pub_lost;
    atomic_uint_fast64_t reconnects; /* connections re-established */
    fx_ratelimit late_rl;            /* answers for unknown or timed-out request ids (WARN) */
    fxc_cache *cache;                /* cache requests (cache.c) */
    /* Redirects (route.c), loop: connections to brokers a not_leader named
     * (peers), and the route cache, stream -> (owner, generation). */
    cconn **peers;
    size_t npeers;
    struct fxc_route *routes; /* most recently used first */
    size_t nroutes;
    atomic_uint_fast64_t redirects;         /* not_leader answers followed */
    atomic_uint_fast64_t redirects_refused; /* not followed: FX_EREDIRECT */
    atomic_uint_fast64_t route_misses;      /* a cached owner answered not_leader */
    /* Connections ended by an ICMP error for their broker's address (the
     * close reasons fx_quic_client_new names). */
    atomic_uint_fast64_t icmp_errors;
};

/* ---- client.c ------------------------------------------------------------- */
void fxc_client_ref(fx_client *c);
void fxc_client_unref(fx_client *c);
/* Opens (lazily) publish connection |i|. Loop. */
cconn *fxc_client_conn(fx_client *c, size_t i);
/* Sends |len| bytes copied from |p| on |sid| of |cc|. Loop. */
int fxc_client_send_copy(cconn *cc, int64_t sid, const void *p, size_t len, bool fin);
/* Encodes |m| as a frame and sends it. Loop. */
int fxc_client_send_msg(cconn *cc, int64_t sid, const fx_msg *m, bool fin);
/* Sends this client's auth frame on |sid|. Loop. */
int fxc_client_send_auth(cconn *cc, int64_t sid);
/* Worker 0's auth finished during connect: |rv| 0 with |flags|, or the
 * failure and its text. Loop. */
void fxc_client_on_first_auth(fx_client *c, int rv, uint16_t flags, const char *text);
/* Initializes |cv| on CLOCK_MONOTONIC. Returns 0 or -errno. */
int fxc_client_cond_init(pthread_cond_t *cv);
/* Waits on c->cv (mu held) until |deadline_ns| (0 = forever). Returns 0 or
 * FX_ETIMEDOUT. */
int fxc_client_wait(fx_client *c, pthread_cond_t *cv, uint64_t deadline_ns);
/* The same on |mu| (held). */
int fxc_client_wait_on(pthread_mutex_t *mu, pthread_cond_t *cv, uint64_t deadline_ns);
uint64_t fxc_client_deadline(int timeout_ms);
/* Posts |t| to the client loop unless the client is closed (then the loop
 * may be gone). Returns true if posted. User threads. */
bool fxc_client_post(fx_client *c, fx_task *t);

/* The error text of a publish the broker did not answer in time (the loop's
 * timer and a waiting caller's own bound say the same). */
#define FX_PUB_ACK_TIMEOUT_FMT                                                                     \
    "publish not answered within publish_ack_timeout_ms %d: it may or may not have been appended"

/* ---- publish.c (the caller's thread) --------------------------------------- */
/* A job with a frame of |len| bytes (not written) in one block, or NULL
 * without memory. Any thread. */
pjob *fxc_pub_job_alloc(fx_client *c, size_t len);
/* Frees a job that was never queued. Any thread. */
void fxc_pub_job_free(pjob *j);

/* ---- sender.c (the client loop) -------------------------------------------- */
int fxc_pub_init(fx_client *c);
void fxc_pub_deinit(fx_client *c);
/* A publish connection became ready or writable: drain its workers. Loop. */
void fxc_pub_conn_ready(fx_client *c, cconn *cc);
/* A connection closed: fail what its workers had in flight. When |retry|
 * (a reconnect is scheduled), queued publishes wait for it instead of
 * failing. Loop. */
void fxc_pub_conn_closed(fx_client *c, cconn *cc, int rv, const char *text, bool retry);
void fxc_pub_on_data(pworker *w, const uint8_t *data, size_t len, bool fin);
void fxc_pub_on_close(pworker *w, bool reset, uint64_t code);
/* Fails and drains everything (close path). Loop. */
void fxc_pub_shutdown(fx_client *c);
/* Starts the close handshake on every live publish stream (fin_task): each
 * FINs after its queue and counts down c->fin_left when the broker FINs back
 * or the stream fails. Loop. */
void fxc_pub_finish(fx_client *c);
/* Drops the holder's reference on |j| (releases it unless QUIC holds its
 * frame: the release gives the permit back and finishes unacked requests).
 * Any thread for a job never sent; else the loop. */
void fxc_pub_job_put(pjob *j);
/* |m| is the merged frame of |parts| (chained by gnext): it takes their
 * budget permits and their requests (chained by grp, in order) and is
 * counted as outstanding; the parts are released. Loop. */
void fxc_pub_job_absorb(pjob *m, pjob *parts);
/* Drops a reference on |r|; the last frees it. Any thread. */
void fxc_pub_req_unref(preq *r);
/* |n| publishes finished: fx_flush wakes when none is left. Any thread. */
void fxc_pub_outstanding_done(fx_client *c, size_t n);

/* ---- coalesce.c ----------------------------------------------------------- */
/* Natural batching of one worker's queue. Loop. */
/* Empties |g|; merged frames' bodies stay within |max_body| bytes. */
void fxc_coalesce_init(fxc_group *g, size_t max_body);
/* Whether |j| may join the frame being built in |g|. */
bool fxc_coalesce_fits(const fxc_group *g, const pjob *j);
/* Appends |j| (fxc_coalesce_fits, or the group is empty) to the group. */
void fxc_coalesce_add(fxc_group *g, pjob *j);
/* True when nothing more can join the group (bounds reached, |g->next|
 * waiting, or a job that cannot be merged). */
bool fxc_coalesce_full(const fxc_group *g);
/* Takes the group as one frame into |*pj|: its single job as is, or a new
 * merged job (fxc_pub_job_alloc) that takes every part's budget permit and
 * request (fxc_pub_job_absorb, which releases the parts). Never fails:
 * without memory for the merge it takes the first job alone and leaves the
 * rest grouped. */
void fxc_coalesce_take(fxc_group *g, pjob **pj);
/* Calls |fn| on every job the group and |g->next| hold and empties them. */
void fxc_coalesce_drain(fxc_group *g, void (*fn)(pjob *j, void *user), void *user);

/* ---- idem.c: the idempotent producer's bookkeeping ----------------------- */
/* Offset of producer_id / sequence in a 0x0109 frame (header, request id,
 * ack mode). */
#define FXC_IDEM_PID_AT (FX_WIRE_HEADER_LEN + 9u)
#define FXC_IDEM_SEQ_AT (FX_WIRE_HEADER_LEN + 17u)
/* Freezes |j| (an idempotent frame, never sent) under |id|'s producer: the
 * next sequence of its stream and the producer id written into its bytes,
 * appended to the kept list (taking the caller's fx_buf reference, which
 * must exist) and made the next to send if none is. Returns 0 or -ENOMEM
 * (nothing changed). */
int fxc_idem_freeze(fxc_idem *id, pjob *j);
/* Takes the kept frame answered under request id |rid| off the list (NULL
 * if none); the caller drops its fx_buf reference. */
pjob *fxc_idem_take(fxc_idem *id, uint64_t rid);
/* Puts |j| (taken by fxc_idem_take, its fx_buf reference still held)
 * back at the tail of the kept list, to be sent again, the same bytes
 * under the same sequence: after "publish commit timeout" (the broker
 * appended it and did not see it flushed in time), a re-send is answered
 * once the flush covers it, as a duplicate. */
void fxc_idem_requeue(fxc_idem *id, pjob *j);
/* A new producer: forgets the id and every stream's sequence. Kept frames
 * stay (they are answered under the old id). */
void fxc_idem_reset(fxc_idem *id);
/* After a lost connection: every kept frame is to be sent again. */
void fxc_idem_rewind(fxc_idem *id);
/* Takes every kept frame off the list into a chain (knext) for the caller
 * to release, and forgets the producer. */
pjob *fxc_idem_clear(fxc_idem *id);
/* Reads the request id of a 0x0109 frame. */
uint64_t fxc_idem_frame_rid(const pjob *j);

/* Opens a connection to the broker at |ip|:|port| (numeric) with the
 * client's TLS options, server name and credentials, or returns the one the
 * client has: conns[0] when it is the server's address, else a peer (one
 * closed for good is connected again in place). Returns it, or NULL with
 * |*prv| (-ENOMEM; FX_EREDIRECT beyond FXC_PEERS_MAX peers; the connect
 * error). Loop. */
cconn *fxc_client_peer(fx_client *c, const char *ip, uint16_t port, int *prv);

/* ---- route.c: following not_leader --------------------------------------- */
/* Writes the canonical key of |ip|:|port| into |key| (FXC_ADDR_MAX). */
void fxc_route_key(const char *ip, uint16_t port, char *key);
/* Splits a not_leader addr ("host:port", "[v6]:port") whose host is a
 * numeric address into |ip| (64 bytes) and |*pport|. Returns 0 or
 * FX_EREDIRECT (a name: resolving it would block the loop; port 0). */
int fxc_route_parse_addr(const char *addr, char *ip, uint16_t *pport);
/* The connection a new subscribe of |s| goes to, set as s->conn: its
 * stream's cached owner's, else (or when that cannot be opened) conns[0].
 * Starts the subscription's attempt there. */
cconn *fxc_route_first(fx_subscription *s);
/* Starts a new attempt of |s| at its current connection (after a loss). */
void fxc_route_attempt(fx_subscription *s);
/* |s|'s subscribe was answered not_leader |m|: checks it may be followed
 * (an address, a generation not older than the cached one, under
 * FXC_REDIRECT_HOPS hops, a broker not asked yet in this attempt), learns
 * the route and returns the owner's connection. Else NULL with |*prv|
 * (FX_EREDIRECT, counted; or as fxc_client_peer) and the reason in |why|
 * (|cap| bytes). Loop. */
cconn *fxc_route_follow(fx_subscription *s, const fx_msg *m, int *prv, char *why, size_t cap);
/* Forgets the cached owner of |ns|/|stream| (its connection was lost). */
void fxc_route_forget(fx_client *c, const char *ns, const char *stream);
/* Frees the route cache (client_free). */
void fxc_route_free(fx_client *c);

/* ---- subscribe.c ---------------------------------------------------------- */
void fxc_sub_on_req_data(fx_subscription *s, const uint8_t *data, size_t len, bool fin);
void fxc_sub_on_req_close(fx_subscription *s, bool reset, uint64_t code);
void fxc_evs_open(cconn *cc, int64_t sid);
void fxc_evs_on_data(evs *e, const uint8_t *data, size_t len, bool fin);
void fxc_evs_on_close(evs *e, bool reset, uint64_t code);
/* A connection closed: frees its event streams; ends its subscriptions, or
 * when |retry| marks them to subscribe again once it is back. Loop. */
void fxc_sub_conn_closed(fx_client *c, cconn *cc, int rv, const char *text, bool retry);
/* A (re-established) connection is ready: re-subscribe what it lost. Loop. */
void fxc_sub_conn_ready(fx_client *c, cconn *cc);
/* Ends every subscription (close path). Loop. */
void fxc_sub_shutdown(fx_client *c);
void fxc_sub_unref(fx_subscription *s);
/* Attaches the unclaimed event stream |e| to group member |g| and feeds it
 * what it buffered meanwhile. Loop. */
void fxc_evs_attach_group(evs *e, fx_group *g);

/* ---- group.c: consumer-group members ---------------------------------------- */

/* The op queue of one member: ack / nak / in_progress / term / release ops
 * the application made, sent by the loop as one GROUP_ACKS frame per turn.
 * Acks of contiguous offsets merge into one range op, a newer in_progress
 * of an offset replaces the queued one, so the queue grows with the records
 * touched, not the calls; it holds at most |max| ops (FXC_GROUP_OPS_MAX,
 * one frame's worth). Not locked: the member's users hold c->mu. */
#define FXC_GROUP_OPS_MAX 4096u
typedef struct fxc_gop {
    uint8_t kind; /* fx_group_op_kind */
    uint64_t first;
    uint32_t count, attempt, arg;
    char *reason; /* term: owned copy, or NULL */
} fxc_gop;
typedef struct fxc_gops {
    fxc_gop *ops;
    size_t n, cap, max;
} fxc_gops;
void fxc_gops_init(fxc_gops *q, size_t max);
/* Frees the ops and their reasons; the queue is empty and reusable. */
void fxc_gops_clear(fxc_gops *q);
void fxc_gops_deinit(fxc_gops *q);
/* Queues one op (merging as above). |reason| is copied. Returns 0,
 * FX_EFULL (|max| ops queued and it merges with none) or -ENOMEM. */
int fxc_gops_push(fxc_gops *q, int kind, uint64_t offset, uint32_t attempt, uint32_t arg,
                  const char *reason);
/* Encodes the queued ops as one GROUP_ACKS frame with |request_id| (0: no
 * answer wanted) into a new buffer |*pout| of |*plen| bytes (free()).
 * Returns 0, -EINVAL (no ops and request id 0), -ENOMEM. */
int fxc_gops_encode(const fxc_gops *q, uint64_t request_id, uint8_t **pout, size_t *plen);

void fxc_grp_on_req_data(fx_group *g, const uint8_t *data, size_t len, bool fin);
void fxc_grp_on_req_close(fx_group *g, bool reset, uint64_t code);
/* A group frame (flags FX_FLAG_FELIXC) arrived on |g|'s event stream; its
 * credit is already granted. Returns false when the stream must end (|g|
 * has ended). Loop. */
bool fxc_grp_on_events(fx_group *g, const fx_frame *f);
/* |g| reads event stream |e| from now on (NULL: it is gone). Loop. */
void fxc_grp_set_events(fx_group *g, evs *e);
/* |g|'s event stream ended: |rv| FX_EEOF (FIN) or the error. Loop. */
void fxc_grp_on_events_end(fx_group *g, int rv, const char *text);
/* The live member of |cc| whose broker id is |id| and that has no event
 * stream yet, or NULL. Loop. */
fx_group *fxc_grp_find(fx_client *c, cconn *cc, uint64_t id);
/* True while a join on |cc| waits for its answer. Loop. */
bool fxc_grp_waiting(fx_client *c, cconn *cc);
/* The connection closed (|retry|: it will be re-established): members
 * join again once it is ready, else end. Loop. */
void fxc_grp_conn_closed(fx_client *c, cconn *cc, int rv, const char *text, bool retry);
void fxc_grp_conn_ready(fx_client *c, cconn *cc);
/* The connection can take more bytes: send what waited. Loop. */
void fxc_grp_conn_writable(fx_client *c, cconn *cc);
/* Ends every member (close path). Loop. */
void fxc_grp_shutdown(fx_client *c);
/* Records expired in the client so far (fx_member_stats.expired). Any thread. */
uint64_t fxc_grp_expired(fx_group *g);

/* ---- cache.c: cache requests on a pool of streams of the first connection ---- */

/* Counters of a client's cache requests (tests, diagnostics). */
typedef struct fxc_cache_counters {
    uint64_t requests;       /* submitted */
    uint64_t answered;       /* completed with 0 or FX_ENOTFOUND */
    uint64_t errors;         /* completed with an error (timeouts included) */
    uint64_t timeouts;       /* not answered within cache_timeout_ms */
    uint64_t late;           /* answers to requests that had timed out, dropped */
    uint64_t streams_opened; /* cache streams opened (reopened after an end included) */
    uint64_t streams_ended;  /* cache streams ended (by the broker, an error, a lost connection) */
    uint64_t binary;         /* requests sent as binary frames (FX_FEATURE_HI_CACHE_BINARY) */
} fxc_cache_counters;

/* Creates / frees the client's cache state (client_new / client_free). */
int fxc_cache_init(fx_client *c);
void fxc_cache_deinit(fx_client *c);
/* QUIC events of a cache stream, and of the connection. Loop. */
void fxc_cache_on_data(cstream *s, const uint8_t *data, size_t len, bool fin);
void fxc_cache_on_close(cstream *s, bool reset, uint64_t code);
/* Ready (handshake done) or writable again: send what waits. */
void fxc_cache_conn_ready(fx_client *c, cconn *cc);
/* Lost: requests in flight fail; unsent ones wait when |retry|, else fail. */
void fxc_cache_conn_closed(fx_client *c, cconn *cc, int rv, const char *text, bool retry);
/* Fails every request (FX_ECLOSED) and refuses new ones (close path). Loop. */
void fxc_cache_shutdown(fx_client *c);
/* Relaxed reads. Any thread. */
void fxc_cache_get_counters(fx_client *c, fxc_cache_counters *out);

#endif
