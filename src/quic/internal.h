/* Private to src/quic: the endpoint, connection and stream structures shared
 * by endpoint.c, conn.c, stream.c, tls.c and udp.c. Loop thread only, like
 * everything they describe. */
#ifndef FX_QUIC_INTERNAL_H
#define FX_QUIC_INTERNAL_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include "base/log.h"
#include "quic/quic.h"

/* ---- logging ----------------------------------------------------------- */

#define FX_QLOG_ERROR FX_LOG_ERROR
#define FX_QLOG_WARN FX_LOG_WARN
#define FX_QLOG_INFO FX_LOG_INFO
#define FX_QLOG_DEBUG FX_LOG_DEBUG
#define fx_quic_log(level, ...) FX_LOG((level), "quic", __VA_ARGS__)

/* ---- sizes --------------------------------------------------------------- */

#define FX_QUIC_SCID_LEN 16    /* our CIDs: [loop id][15 random bytes] */
#define FX_QUIC_GSO_MAX 65000  /* bytes in one UDP_SEGMENT aggregate */
#define FX_QUIC_GSO_SEGS 64    /* segments in one aggregate */
#define FX_QUIC_RX_BATCH 4     /* recvmmsg messages per call (then ACK) */
#define FX_QUIC_RX_BUF 65536   /* per message: a whole GRO train */
#define FX_QUIC_RX_BUDGET 1024 /* datagrams read per socket event */
#define FX_QUIC_STREAM_VECS 16 /* chunks handed to one writev_stream */
#define FX_QUIC_MAX_DATAGRAM 65527
#define FX_QUIC_LOOPBACK_MTU 16250           /* four fit one FX_QUIC_GSO_MAX aggregate */
#define FX_QUIC_DRAIN_CODE 0x46444e          /* "FDN": stream refused while draining */
#define FX_QUIC_TEST_DELAY_CAP 4096          /* delay hook: datagrams held at most */
#define FX_QUIC_TEST_DELAY_BYTES (16u << 20) /* delay hook: bytes held at most */

/* ---- streams ------------------------------------------------------------- */

/* One queued send: |len| bytes of |buf| at |data|, ending at stream offset
 * |end|. Holds one reference on |buf| until the bytes are acked. */
typedef struct qchunk {
    struct qchunk *next;
    fx_buf *buf;
    const uint8_t *data;
    size_t len;
    uint64_t end;
} qchunk;

enum { QS_READY = 0, QS_BLOCKED_STREAM, QS_BLOCKED_CONN };

typedef struct qstream {
    int64_t id;
    struct qstream *hnext;         /* hash chain */
    struct qstream *snext, *sprev; /* send list or conn-blocked list */
    int slist;                     /* 0 none, 1 send list, 2 conn-blocked list */
    int blocked;                   /* QS_* */
    qchunk *head, *tail;           /* queued and not yet acked, in order */
    qchunk *wr;                    /* first chunk with unsent bytes */
    size_t wr_off;                 /* bytes of |wr| already handed out */
    uint64_t queued_end;           /* offset after the last queued byte */
    uint64_t sent_end;             /* offset after the last byte handed out */
    uint64_t acked_end;            /* every byte before it is acked */
    bool fin_queued, fin_sent, shut_wr;
    bool reset_seen; /* the peer reset its side */
    bool want_sent;  /* fx_quic_stream_notify_sent said yes: tell once all is written */
    uint64_t reset_code;
    void *user;
} qstream;

/* ---- server credentials ---------------------------------------------------- */

/* A loaded certificate and key. The endpoint holds one reference (used for
 * new handshakes) and every server connection holds one on the credentials
 * its TLS session was created with, so a reload never frees credentials a
 * live session still points at. */
struct fx_quic_creds {
    atomic_uint refs;
    gnutls_certificate_credentials_t cred;
    char fingerprint[65];
};

/* ---- connections --------------------------------------------------------- */

/* A block handed to ngtcp2 by a connection's allocator (conn.c): linked
 * so that whatever ngtcp2 loses track of is freed with the connection. */
typedef union qblock {
    struct {
        union qblock *prev, *next;
    } l;
    max_align_t align; /* the caller's part stays aligned like malloc's */
} qblock;

struct fx_quic_conn {
    fx_quic_endpoint *ep;
    struct fx_quic_conn *next, *prev; /* endpoint's list */
    struct fx_quic_conn *wnext;       /* endpoint's wait-for-socket list */
    struct fx_quic_conn *dnext;       /* endpoint's read-this-batch list */
    bool dirty;                       /* on that list */
    ngtcp2_conn *q;
    ngtcp2_mem mem; /* |q|'s allocator; ngtcp2 keeps a pointer to it */
    qblock *blocks; /* every block |q| holds, freed after ngtcp2_conn_del */
    gnutls_session_t tls;
    gnutls_certificate_credentials_t ccred; /* client: per-connection trust */
    fx_quic_creds *screds;                  /* server: what its session uses */
    ngtcp2_crypto_conn_ref ref;
    bool server;
    bool handshake_done, half_open;
    bool closing;    /* close requested or error: no more user sends */
    bool close_sent; /* CONNECTION_CLOSE written (or silent close) */
    bool dead;       /* finished; on_conn_closed pending or done */
    bool waiting;    /* on the endpoint's wait list */
    bool want_writable;
    bool sent_notify; /* a want_sent stream got all its bytes written: on_writable */
    struct sockaddr_storage remote, local; /* path at creation */
    socklen_t remotelen, locallen;
    fx_timer timer;          /* ngtcp2 expiry, or 0 = write at the end of this turn */
    fx_quic_close_info info; /* why it ended, once |closing| */
    uint64_t close_code;     /* our application close */
    /* CIDs registered in the endpoint's map for this connection. */
    ngtcp2_cid *cids;
    size_t ncids, capcids;
    /* Streams by id. */
    qstream **sbuckets;
    size_t nsbuckets, nstreams;
    qstream *sq_head, *sq_tail; /* streams with bytes or a FIN to send */
    qstream *cb_head, *cb_tail; /* streams waiting for connection credit */
    uint64_t unacked;           /* bytes queued and not yet acked/released */
    /* Client verification. */
    char *server_name;
    uint8_t pin[32];
    bool has_pin, insecure, use_ca;
    int tls_reason; /* FX_ETLS_* decided by the verify function, or 0 */
    char alpn[32];
    void *user;
};

/* ---- endpoint ----------------------------------------------------------- */

typedef struct cident {
    struct cident *next;
    ngtcp2_cid cid;
    fx_quic_conn *conn;
} cident;

struct fx_quic_endpoint {
    fx_loop *loop;
    fx_quic_opts o;
    fx_quic_callbacks cb;
    void *user;
    bool server;
    int fd;
    fx_watch watch;
    bool watch_out;
    struct sockaddr_storage local;
    socklen_t locallen;
    uint16_t port;
    /* A server bound to a wildcard address answers from the address each
     * client used (IP_PKTINFO), which |rx_local| holds for the datagram
     * being processed; otherwise |rx_local| is |local|. */
    bool wildcard;
    struct sockaddr_storage rx_local;
    socklen_t rx_locallen;
    fx_quic_creds *creds; /* server: for new handshakes */
    char fingerprint[65];
    uint8_t reset_secret[32];
    uint8_t token_secret[32];
    uint64_t hash_seed;
    cident **cbuckets;
    size_t ncbuckets, ncids;
    fx_quic_conn *conns; /* every live or dying connection */
    fx_quic_conn *dead_head;
    fx_timer reap_timer;
    fx_timer stats_timer; /* stats_log_ns: armed while connections exist */
    bool freeing;
    /* Sending. |tx| holds one aggregate; when the socket refused it with
     * EAGAIN it stays pending (|tx_pending|) and connections that want to
     * write wait on |wait_head| until EPOLLOUT. */
    uint8_t *tx;
    size_t tx_cap;
    bool tx_pending;
    size_t tx_len, tx_seg;
    struct sockaddr_storage tx_to, tx_src;
    socklen_t tx_tolen;
    bool tx_has_src;
    fx_quic_conn *wait_head, *wait_tail;
    fx_quic_conn *dirty_head; /* read in the current receive batch */
    bool gso;
    /* Client endpoints: IP_RECVERR (and IPV6_RECVERR) is on, so ICMP errors
     * for our datagrams wait in the socket's error queue (udp.c). */
    bool recverr;
    /* Receiving. */
    uint8_t *rx;
    uint32_t half_open;
    uint64_t rng; /* test-hook drop decisions */
    /* Test hook (fx_quic_endpoint_set_test_delay): received datagrams wait
     * |test_delay_ns| in a bounded FIFO of copies, released by |tdq_timer|.
     * |tdq| is allocated on first use; NULL means the hook was never on. */
    uint64_t test_delay_ns;
    struct qdelayed **tdq;
    size_t tdq_head, tdq_len, tdq_bytes;
    fx_timer tdq_timer;
    bool draining;
    fx_timer drain_timer;
    uint64_t sr_window_start; /* stateless resets: one-second window */
    uint32_t sr_sent_in_window;
    struct fx_quic_server_group *group; /* NULL unless a group member */
    size_t member;                      /* index in |group| */
    fx_quic_stats st;
};

/* ---- cert.c ------------------------------------------------------------- */

int fx_quic_read_file(const char *path, gnutls_datum_t *out);
/* Writes |d| to |path| (mode |mode|) through a temporary file and rename. */
int fx_quic_write_file_atomic(const char *path, const gnutls_datum_t *d, mode_t mode);
/* Server: loads the stateless-reset secret from state_dir/quic-reset.key,
 * creating it (0600) the first time, so tokens survive restarts. */
int fx_quic_load_reset_secret(fx_quic_endpoint *ep);
void fx_quic_hex(const uint8_t *p, size_t n, char *out);
int fx_quic_der_fingerprint(const uint8_t *der, size_t len, char hex[65]);
/* Parses a 64-hex-digit pin (':' allowed). Returns 0 or FX_ECONFIG. */
int fx_quic_pin_parse(const char *text, uint8_t out[32]);

/* ---- tls.c -------------------------------------------------------------- */

/* Loads or generates the server credentials into |ep| (fx_quic_creds_load
 * with |ep|'s options). Returns 0, -errno, FX_ECONFIG or FX_ETLS. */
int fx_quic_tls_server_init(fx_quic_endpoint *ep);
/* Sets up |c->ccred| from |co|. Returns 0, FX_ETLS, FX_ECONFIG, -ENOMEM. */
int fx_quic_tls_client_creds(fx_quic_conn *c, const fx_quic_connect_opts *co);
/* Creates |c->tls| for the conn's role and attaches it to |c->q|. */
int fx_quic_tls_session(fx_quic_conn *c);
/* Records the negotiated ALPN into |c->alpn|. */
void fx_quic_tls_note_alpn(fx_quic_conn *c);

/* ---- udp.c -------------------------------------------------------------- */

/* Opens a non-blocking UDP socket bound to |addr|, with GRO, buffers and
 * (for IPv4) the don't-fragment bit set per |o|; fills |ep|'s fd, local
 * address, port and buffer stats. Returns 0 or -errno. */
int fx_quic_udp_open(fx_quic_endpoint *ep, const struct sockaddr *addr, socklen_t len);
/* Sends |len| bytes as segments of |seg| to |to|, from source address |src|
 * (NULL: the kernel chooses; set for wildcard-bound servers), with GSO when
 * enabled. Returns 0, -EAGAIN (nothing sent), or -errno. */
int fx_quic_udp_send(fx_quic_endpoint *ep, const struct sockaddr *to, socklen_t tolen,
                     const struct sockaddr *src, const uint8_t *data, size_t len, size_t seg);
/* The source address to send from for a path whose local side is |local|:
 * |local| on a wildcard-bound server, else NULL. */
const struct sockaddr *fx_quic_src_for(const fx_quic_endpoint *ep, const void *local);
/* Reads up to a budget of datagrams and hands each (GRO trains split) to
 * fx_quic_ep_on_datagram(); on a client endpoint, first reads the ICMP
 * errors queued for the socket and ends the connections they prove dead
 * (see "ICMP errors" in udp.c). */
void fx_quic_udp_read(fx_quic_endpoint *ep);
/* Writes for every connection that read datagrams in this batch, so ACKs
 * and the data they unblock leave before the next batch is read. */
void fx_quic_ep_flush_dirty(fx_quic_endpoint *ep);
/* True when the test hook says to drop this datagram. */
bool fx_quic_test_drop(fx_quic_endpoint *ep);
/* Test hook: keeps a copy of a received datagram (with the local address in
 * ep->rx_local) until ep->test_delay_ns from now, then hands it to
 * fx_quic_ep_on_datagram(). A full FIFO drops it (counted in test_dropped). */
void fx_quic_test_delay_hold(fx_quic_endpoint *ep, const struct sockaddr *from, socklen_t fromlen,
                             const uint8_t *data, size_t len);
/* Frees the datagrams the delay hook still holds (endpoint free). */
void fx_quic_test_delay_free(fx_quic_endpoint *ep);

/* ---- endpoint.c ---------------------------------------------------------- */

void fx_quic_ep_on_datagram(fx_quic_endpoint *ep, const struct sockaddr *from, socklen_t fromlen,
                            const uint8_t *data, size_t len);
int fx_quic_ep_cid_add(fx_quic_endpoint *ep, const ngtcp2_cid *cid, fx_quic_conn *c);
void fx_quic_ep_cid_remove(fx_quic_endpoint *ep, const ngtcp2_cid *cid);
/* Fresh CID of our shape ([loop id][random]). */
void fx_quic_ep_new_cid(fx_quic_endpoint *ep, ngtcp2_cid *cid);
/* Queues |c| until the socket is writable again. */
void fx_quic_ep_wait_writable(fx_quic_endpoint *ep, fx_quic_conn *c);
/* Hands |c| (already |dead|) to the reaper: on_conn_closed, then free. */
void fx_quic_ep_reap(fx_quic_endpoint *ep, fx_quic_conn *c);
int fx_quic_parse_addr(const char *ip, uint16_t port, struct sockaddr_storage *ss, socklen_t *len);
/* Rewrites the target |ss| for |ep|'s socket family: an IPv4 address becomes
 * IPv4-mapped on a dual-stack (AF_INET6) socket. Returns 0, or FX_ECONFIG
 * for an IPv6 target on an IPv4 socket. */
int fx_quic_addr_for_socket(const fx_quic_endpoint *ep, struct sockaddr_storage *ss,
                            socklen_t *len);
void fx_quic_ep_path(fx_quic_endpoint *ep, fx_quic_conn *c, ngtcp2_path *path);

/* ---- accept.c ------------------------------------------------------------ */

/* A datagram for no known connection reached a server endpoint: accept it
 * if it is a well-formed Initial and policy allows (draining, half-open cap,
 * Retry under load). */
void fx_quic_accept_initial(fx_quic_endpoint *ep, const struct sockaddr *from, socklen_t fromlen,
                            const uint8_t *data, size_t len);

/* Answers an unknown short-header datagram with a rate-limited stateless
 * reset. Returns true if one was sent. */
bool fx_quic_stateless_reset(fx_quic_endpoint *ep, const struct sockaddr *from, socklen_t fromlen,
                             const uint8_t *dcid, size_t dcidlen, size_t len);

/* ---- group.c ------------------------------------------------------------- */

/* Member owning a datagram by its DCID (see fx_quic_server_group_new). */
size_t fx_quic_owner_of(const uint8_t *dcid, size_t dcidlen, size_t n);
/* Copies the datagram to member |to|'s loop. False when refused (cap, OOM). */
bool fx_quic_group_forward(fx_quic_endpoint *ep, size_t to, const struct sockaddr *from,
                           socklen_t fromlen, const uint8_t *data, size_t len);
/* fx_quic_server_new for a group member (SO_REUSEPORT, |group|, |member|). */
int fx_quic_server_new_member(fx_quic_endpoint **pep, fx_loop *loop, const char *ip, uint16_t port,
                              const fx_quic_opts *o, const fx_quic_callbacks *cb, void *user,
                              struct fx_quic_server_group *group, size_t member);

/* ---- conn.c ------------------------------------------------------------- */

/* Creates a server connection for an acceptable Initial |hd|; |odcid| is
 * the client's original DCID recovered from a Retry token, or NULL. */
int fx_quic_conn_accept(fx_quic_endpoint *ep, const ngtcp2_pkt_hd *hd, const ngtcp2_cid *odcid,
                        const struct sockaddr *from, socklen_t fromlen, fx_quic_conn **pc);
/* Feeds one datagram from |from| to |c|. */
void fx_quic_conn_read(fx_quic_conn *c, const struct sockaddr *from, socklen_t fromlen,
                       const uint8_t *data, size_t len);
/* Writes what |c| has to send now (at the end of the loop turn). */
void fx_quic_conn_schedule(fx_quic_conn *c);
void fx_quic_conn_flush(fx_quic_conn *c);
/* Ends |c| with |info|: no more callbacks except on_conn_closed. */
void fx_quic_conn_finish(fx_quic_conn *c, int reason);
void fx_quic_conn_destroy(fx_quic_conn *c);
/* Logs |c|'s path statistics (RTT, window, bytes in flight) at INFO. */
void fx_quic_conn_log_stats(fx_quic_conn *c);
/* Arms the endpoint's statistics timer if stats_log_ns asks for it. Loop. */
void fx_quic_ep_stats_arm(fx_quic_endpoint *ep);
void fx_quic_conn_cid_forget(fx_quic_conn *c, const ngtcp2_cid *cid);
int fx_quic_conn_cid_remember(fx_quic_conn *c, const ngtcp2_cid *cid);

/* ---- stream.c ------------------------------------------------------------ */

qstream *fx_quic_stream_find(fx_quic_conn *c, int64_t id);
int fx_quic_stream_create(fx_quic_conn *c, int64_t id, void *user, qstream **ps);
/* Releases everything of |s| and unlinks it. */
void fx_quic_stream_destroy(fx_quic_conn *c, qstream *s);
void fx_quic_streams_destroy_all(fx_quic_conn *c);
/* Bytes acked up to |end| (exclusive). */
void fx_quic_stream_acked(fx_quic_conn *c, qstream *s, uint64_t end);
/* No more bytes of ours go on |s| (our reset, or the peer's STOP_SENDING):
 * releases the queued bytes ngtcp2 never saw; the ones it sent stay
 * referenced until acked or the stream closes, since ngtcp2 may resend
 * them until then. */
void fx_quic_stream_stop_writing(fx_quic_conn *c, qstream *s);
/* Fills |v| (|cap| entries) with unsent bytes of |s|, stopping once |want|
 * bytes are covered; returns the count, sets |*pfin| when the vectors end
 * with the stream's FIN. */
size_t fx_quic_stream_vecs(qstream *s, ngtcp2_vec *v, size_t cap, size_t want, bool *pfin);
/* ngtcp2 took |n| bytes (and the FIN if |fin| was offered and all fit). */
void fx_quic_stream_sent(fx_quic_conn *c, qstream *s, size_t n, bool fin_offered, size_t offered);
void fx_quic_sendq_push(fx_quic_conn *c, qstream *s);
void fx_quic_sendq_remove(fx_quic_conn *c, qstream *s);
void fx_quic_connblocked_push(fx_quic_conn *c, qstream *s);
/* Moves connection-blocked streams back to the send list if credit came. */
void fx_quic_connblocked_release(fx_quic_conn *c);
bool fx_quic_stream_has_pending(const qstream *s);

#endif
