/* QUIC transport for the broker and the client library: endpoints (one UDP
 * socket each) on an fx_loop, connections, streams with explicit credit, and
 * TLS 1.3 through GnuTLS. ngtcp2 and GnuTLS types never leave src/quic.
 * Thread: an endpoint, its connections and its streams belong to the loop the
 * endpoint was created on; every function here is "loop thread only" unless
 * it says otherwise, and every callback runs on that loop. */
#ifndef FX_QUIC_H
#define FX_QUIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/buf.h"
#include "base/loop.h"

typedef struct fx_quic_endpoint fx_quic_endpoint;
typedef struct fx_quic_conn fx_quic_conn;
typedef struct fx_quic_creds fx_quic_creds;

/* ---- options ------------------------------------------------------------ */

/* Every transport setting, with the defaults fx_quic_opts_default() writes.
 * The layer above fills it from its own config; nothing here reads config
 * files. Sizes are bytes, durations nanoseconds. */
typedef struct fx_quic_opts {
    uint64_t idle_timeout_ns;      /* 30 s; 0 disables the idle timeout */
    uint64_t keepalive_ns;         /* 10 s: PING a connection quiet this long; 0 = off */
    uint64_t handshake_timeout_ns; /* 10 s */
    uint64_t stream_window;        /* initial receive window per stream: 1 MiB */
    uint64_t conn_window;          /* initial receive window per connection: 16 MiB */
    uint64_t max_stream_window;    /* auto-tune ceiling per stream: 16 MiB */
    uint64_t max_conn_window;      /* auto-tune ceiling per connection: 64 MiB */
    uint64_t unacked_cap;          /* queued-but-unacked send bytes per conn: 16 MiB */
    uint64_t max_streams_bidi;     /* concurrent peer-opened bidi streams: 1024 */
    uint64_t max_streams_uni;      /* concurrent peer-opened uni streams: 1024 */
    /* false: a peer-opened uni stream that ends gives its credit back (so
     * |max_streams_uni| bounds the concurrent ones). true: it does not; the
     * peer may open |max_streams_uni| in all, plus what
     * fx_quic_conn_grant_uni grants (a client granting one per request
     * that makes the peer open one). */
    bool uni_credit_granted;
    int udp_send_buffer; /* SO_SNDBUF: 8 MiB (FELIX_UDP_SEND_BUFFER) */
    int udp_recv_buffer; /* SO_RCVBUF: 8 MiB (FELIX_UDP_RECV_BUFFER) */
    /* Datagram sizes. |mtu_upper_bound| is the largest UDP payload we send
     * (FELIX_MTU_UPPER_BOUND, default 1452; at most 65507). When
     * |initial_mtu| (FELIX_INITIAL_MTU, default 1200) is at least the upper
     * bound, the size is pinned: every packet uses it from the start and
     * PMTUD is off (loopback, jumbo LANs). Otherwise ngtcp2 starts at 1200
     * and probes upwards. |max_udp_payload| (FELIX_MAX_UDP_PAYLOAD, default
     * 65527) is what we accept and advertise. |loopback_mtu|
     * (FELIX_LOOPBACK_MTU, default 16250) is pinned instead for a peer on
     * this host (127.0.0.0/8, ::1); 0 treats loopback like any other path.
     * 16250 lets four datagrams share one GSO aggregate. */
    size_t initial_mtu;
    size_t mtu_upper_bound;
    size_t max_udp_payload;
    size_t loopback_mtu;
    /* Every |stats_log_ns| (FELIX_CONN_STATS_MS; 0 = off, the default) each
     * established connection logs one INFO line of path statistics: RTT,
     * congestion window, bytes in flight, PTO count, datagram size. */
    uint64_t stats_log_ns;
    bool gso; /* UDP_SEGMENT on send: true (switched off on EIO) */
    bool gro; /* UDP_GRO on receive: true */
    /* Server: concurrent connections still in their handshake: 1024. More
     * Initials are dropped and counted. */
    uint32_t max_half_open;
    /* Server: with this many handshakes in flight (256), an Initial without
     * a valid token is answered with a Retry, so only clients that own
     * their address create state. 0: always; UINT32_MAX: never. */
    uint32_t retry_half_open;
    /* Stateless resets sent per second at most, for short-header datagrams
     * of no known connection (100; 0 = never). */
    uint32_t stateless_reset_rate;
    const char *alpn; /* "felix". Client: NULL or "" offers none. */
    /* Server credentials: both files, or neither and a self-signed
     * certificate is generated once into |state_dir| (default ".") as
     * tls-cert.pem / tls-key.pem and reused. The stateless-reset secret is
     * kept there too (quic-reset.key, 0600), so after a restart the server
     * can tell clients of the previous run that their connection is gone. */
    const char *cert_file;
    const char *key_file;
    const char *state_dir;
    uint8_t loop_id; /* written into the first byte of our connection IDs */
    /* Client: the local address to send from (numeric IPv4 or IPv6, any
     * port); NULL binds the dual-stack wildcard. Tools use it to appear as
     * another host on loopback (127.0.0.2). */
    const char *client_bind_ip;
    /* Test hook: drop this many datagrams per 1000, sent and received. */
    uint32_t test_drop_permille;
    /* Test hook: server groups skip the reuseport BPF steering, so the
     * kernel's hash places datagrams and strays must be forwarded. */
    bool test_no_reuseport_bpf;
} fx_quic_opts;

/* Writes the defaults listed above into |o|. */
void fx_quic_opts_default(fx_quic_opts *o);

/* Overrides fields of |o| from FELIX_UDP_SEND_BUFFER, FELIX_UDP_RECV_BUFFER,
 * FELIX_INITIAL_MTU, FELIX_MTU_UPPER_BOUND and FELIX_MAX_UDP_PAYLOAD when
 * they are set. Returns 0, or FX_ECONFIG for an unparsable or out-of-range
 * value (|o| is then unchanged for that variable). Main thread. */
int fx_quic_opts_from_env(fx_quic_opts *o);

/* ---- per-connection client settings ------------------------------------- */

/* How a client verifies the server. Exactly one of |ca_file|, |pin_sha256|
 * or |insecure| should be set; with none, the system trust store is used. */
typedef struct fx_quic_connect_opts {
    const char *server_name; /* name checked in the certificate and sent as SNI
                                (DNS names only); NULL = the host argument */
    const char *ca_file;     /* PEM trust anchors */
    const char *pin_sha256;  /* hex SHA-256 of the leaf certificate DER (64 chars,
                                ':' separators allowed) */
    bool insecure;           /* accept any certificate (development only) */
} fx_quic_connect_opts;

/* ---- events -------------------------------------------------------------- */

/* Why a connection ended. |reason| is an error code: FX_ECLOSED (closed by us
 * or by the peer with an application close; see |remote|, |app| and |code|;
 * a close sent before the handshake was confirmed arrives as app with code
 * 0, because QUIC then carries no application code),
 * FX_EIDLE (idle timeout: the peer went silent), FX_ETIMEDOUT (handshake
 * timeout), FX_ECONNLOST (stateless reset), FX_ETLS_* (certificate refused:
 * by us, or by the peer when |remote|), FX_ETLS (other TLS failure), FX_EQUIC
 * (protocol error), FX_ESHUTDOWN (endpoint freed), -ECONNREFUSED (client:
 * an ICMP port unreachable from the peer's host: nothing listens there any
 * more), -EHOSTUNREACH / -ENETUNREACH (client: an ICMP host or network
 * unreachable for the peer's address while the handshake was still
 * running), or -errno (socket). */
typedef struct fx_quic_close_info {
    int reason;
    bool remote;       /* the peer sent the CONNECTION_CLOSE */
    bool app;          /* |code| is an application error code */
    uint64_t code;     /* application or transport error code */
    uint8_t tls_alert; /* TLS alert carried by a CRYPTO_ERROR, else 0 */
    char text[128];    /* reason phrase (peer's or ours), NUL-terminated */
} fx_quic_close_info;

/* Callbacks of an endpoint; any may be NULL. |user| is the connection's user
 * pointer (fx_quic_conn_set_user; initially the endpoint's). A callback may
 * call any function of this header on the same connection, including
 * fx_quic_conn_close(); the connection stays valid until on_conn_closed
 * returns and is freed after that. */
typedef struct fx_quic_callbacks {
    /* Server: a connection was accepted (handshake not finished yet). */
    void (*on_conn_new)(fx_quic_conn *c, void *user);
    void (*on_handshake_done)(fx_quic_conn *c, void *user);
    /* The peer opened |stream_id|. */
    void (*on_stream_open)(fx_quic_conn *c, int64_t stream_id, void *user);
    /* Bytes arrived in order on |stream_id|; |fin| marks the end. The bytes
     * are valid only during the call. They hold receive credit until the
     * layer above calls fx_quic_stream_consume() for them. */
    void (*on_stream_data)(fx_quic_conn *c, int64_t stream_id, const uint8_t *data, size_t len,
                           bool fin, void *user, void *stream_user);
    /* |stream_id| is gone (both directions done, or reset; for a stream the
     * peer opened in one direction: its FIN was delivered, or it was reset).
     * |app_code| is the peer's or our reset code when |reset|. Queued send
     * buffers were released, and a peer-opened stream's slot was returned
     * to the peer (MAX_STREAMS), so streams can be opened for ever. */
    void (*on_stream_close)(fx_quic_conn *c, int64_t stream_id, bool reset, uint64_t app_code,
                            void *user, void *stream_user);
    /* Unacked send bytes fell back below half the cap after a send was
     * refused with FX_EFULL (one call per refusal episode), or every byte
     * of a stream fx_quic_stream_notify_sent() reported busy was written
     * (once per such report, after the write). */
    void (*on_writable)(fx_quic_conn *c, void *user);
    /* The connection ended; |c| is freed when this returns. Streams still
     * open end with it (no on_stream_close follows for them) and their
     * queued buffers are released. Runs at the end of a loop turn, never
     * inside another callback of |c|. */
    void (*on_conn_closed)(fx_quic_conn *c, const fx_quic_close_info *info, void *user);
} fx_quic_callbacks;

/* ---- endpoints ----------------------------------------------------------- */

/* Creates a server endpoint bound to |ip|:|port| (numeric IPv4 or IPv6; port
 * 0 picks one, see fx_quic_endpoint_port; "::" is dual-stack: IPv4 clients
 * are served too, as IPv4-mapped addresses) on |loop|, loading or generating
 * the TLS credentials. Copies |o| and |cb| (strings in |o| must outlive the
 * endpoint). Returns 0; -errno (socket, bind, files); FX_ETLS (credentials);
 * FX_ECONFIG (bad address or options); -ENOMEM. Loop thread, or before the
 * loop runs. */
int fx_quic_server_new(fx_quic_endpoint **pep, fx_loop *loop, const char *ip, uint16_t port,
                       const fx_quic_opts *o, const fx_quic_callbacks *cb, void *user);

/* Creates a client endpoint (one unconnected UDP socket on an ephemeral port
 * of the wildcard address) on |loop|. The socket is dual-stack (IPv6 with
 * IPV6_V6ONLY off), so one endpoint reaches IPv4 and IPv6 servers; on a host
 * without IPv6 it is IPv4 only and fx_quic_connect refuses IPv6 targets.
 * The socket stays unconnected (its connections may reach several servers)
 * and has IP_RECVERR / IPV6_RECVERR on: an ICMP error for one of its
 * datagrams ends the connection it proves dead at once (close reasons
 * above; the rules in udp.c, "ICMP errors") instead of that connection
 * waiting out its idle timeout. Server endpoints never read ICMP errors.
 * Same ownership and errors as above. */
int fx_quic_client_new(fx_quic_endpoint **pep, fx_loop *loop, const fx_quic_opts *o,
                       const fx_quic_callbacks *cb, void *user);

/* Closes every connection (CONNECTION_CLOSE sent, on_conn_closed called with
 * FX_ESHUTDOWN), closes the socket and frees |ep|. NULL ok. Must not be
 * called from inside one of |ep|'s callbacks. Loop thread only. */
void fx_quic_endpoint_free(fx_quic_endpoint *ep);

/* The first half of fx_quic_endpoint_free: stops taking datagrams and
 * connections and closes every connection (on_conn_closed with FX_ESHUTDOWN,
 * before this returns), but keeps |ep| for a later free. For a server group
 * member, whose free must wait until every member's loop has stopped. Same
 * rules as fx_quic_endpoint_free. */
void fx_quic_endpoint_close_all(fx_quic_endpoint *ep);

/* Graceful drain: |ep| accepts no new connections, every connection refuses
 * new peer streams (reset with app code 0x46444e = "FDN"), and each one
 * closes with app code 0 and reason "draining" once everything it queued is
 * acknowledged; whatever is still open at |deadline_ns| (CLOCK_MONOTONIC) is
 * closed then. Progress shows in on_conn_closed and stats.conns_open.
 * Idempotent (a later call may move the deadline). Returns 0 or -ENOMEM. */
int fx_quic_endpoint_drain(fx_quic_endpoint *ep, uint64_t deadline_ns);

/* The bound UDP port. */
uint16_t fx_quic_endpoint_port(const fx_quic_endpoint *ep);

/* Server: hex SHA-256 of the certificate DER (64 chars) new handshakes
 * present, else "". Changes on fx_quic_endpoint_set_credentials. */
const char *fx_quic_endpoint_fingerprint(const fx_quic_endpoint *ep);

/* ---- certificate reload ------------------------------------------------- */

/* Loads the server credentials |o| names (cert_file + key_file, or the
 * generated pair in state_dir, created when missing) into a new
 * refcounted object (*|pcr|, one reference for the caller). The key must
 * match the certificate. Returns 0; -errno (a file cannot be read);
 * FX_ECONFIG (only one of the two files set); FX_ETLS (not PEM, key does
 * not match); -ENOMEM. Failures are logged with the file names. Blocking
 * disk I/O: call it off the loops (main thread), then hand the result to
 * the endpoint's loop. Any thread. */
int fx_quic_creds_load(fx_quic_creds **pcr, const fx_quic_opts *o);

/* Takes / drops a reference on |cr|; the last _unref frees it. The count is
 * atomic, so references may move between threads. NULL ok for _unref.
 * Any thread. */
fx_quic_creds *fx_quic_creds_ref(fx_quic_creds *cr);
void fx_quic_creds_unref(fx_quic_creds *cr);

/* Hex SHA-256 of |cr|'s certificate DER (64 chars). Any thread. */
const char *fx_quic_creds_fingerprint(const fx_quic_creds *cr);

/* Server: new handshakes on |ep| present |cr| from now on (|ep| takes its
 * own reference; the caller keeps its one). Connections already accepted
 * keep the credentials they started with, which stay alive until the last
 * of them is freed; nothing is closed. Returns 0, or FX_ECONFIG for a
 * client endpoint. */
int fx_quic_endpoint_set_credentials(fx_quic_endpoint *ep, fx_quic_creds *cr);

/* Server: re-reads the certificate and key |ep| was created with
 * (fx_quic_creds_load with its options) and, if they load, installs them
 * with fx_quic_endpoint_set_credentials and logs the new fingerprint.
 * On failure the previous credentials stay in use and the reason is
 * logged. Returns 0 or the error of fx_quic_creds_load (FX_ECONFIG for a
 * client endpoint). Does blocking file I/O on the loop (a few KB); the
 * broker loads on its main thread instead (fx_broker_reload_tls). */
int fx_quic_endpoint_reload_credentials(fx_quic_endpoint *ep);

/* True if |sa| is 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104: a peer on this
 * host. Any thread. */
bool fx_quic_addr_is_loopback(const struct sockaddr *sa);

/* Counters (single writer: the loop). */
typedef struct fx_quic_stats {
    uint64_t rx_datagrams;
    uint64_t tx_datagrams;
    uint64_t tx_sendmsg;        /* sendmsg calls (GSO aggregates count once) */
    uint64_t tx_datagram_max;   /* largest UDP payload sent */
    uint64_t rx_dropped;        /* malformed, foreign, unknown connection, refused */
    uint64_t test_dropped;      /* dropped by the test hook */
    uint64_t conns_accepted;    /* server */
    uint64_t conns_open;        /* now */
    uint64_t half_open_refused; /* Initials dropped at max_half_open */
    uint64_t retries_sent;      /* Retry packets sent */
    uint64_t bad_tokens;        /* Initials with an invalid or expired token */
    uint64_t stateless_resets_sent;
    uint64_t gso_disabled;     /* 1 once sendmsg reported EIO */
    uint64_t rx_forwarded_out; /* group: datagrams handed to their owner loop */
    uint64_t rx_forwarded_in;  /* group: datagrams received from a sibling */
    /* Blocks ngtcp2 0.12 lost track of (a STREAM frame pool bug under loss)
     * and that were freed with their connection instead of leaking. */
    uint64_t ngtcp2_orphans_freed;
    /* Client endpoints (IP_RECVERR): errors read from the socket's error
     * queue (ICMP errors, and the kernel's own, such as a datagram over the
     * path MTU), the connections they ended (FX close reason
     * -ECONNREFUSED, -EHOSTUNREACH or -ENETUNREACH), and those that ended
     * nothing (another address, a packet of an earlier connection, a kind
     * that proves nothing, an established connection's host unreachable). */
    uint64_t icmp_errors;
    uint64_t icmp_closes;
    uint64_t icmp_ignored;
    int sndbuf, rcvbuf; /* effective socket buffers (getsockopt) */
} fx_quic_stats;
void fx_quic_endpoint_get_stats(const fx_quic_endpoint *ep, fx_quic_stats *st);

/* Test hook: from now on drop |permille| of the datagrams |ep| sends and
 * receives (0 stops dropping; 1000 drops all, simulating a vanished peer). */
void fx_quic_endpoint_set_test_drop(fx_quic_endpoint *ep, uint32_t permille);

/* Test hook: from now on every datagram |ep| receives (after the drop hook
 * above) is held for |delay_ns| before QUIC sees it, simulating a long
 * one-way path; 0 stops delaying new datagrams (those already held are
 * still released at their time, so packets may then arrive reordered).
 * Held copies are bounded (4096 datagrams, 16 MiB); when full, datagrams
 * are dropped and counted in stats.test_dropped. Costs one branch per
 * datagram while off. Returns 0, or -ENOMEM (hook unchanged). Loop thread
 * only. */
int fx_quic_endpoint_set_test_delay(fx_quic_endpoint *ep, uint64_t delay_ns);

/* ---- connections --------------------------------------------------------- */

/* Starts a client connection to |ip|:|port| (numeric) from |ep|. |co| may be
 * NULL (system trust, name = |ip|). The handshake runs on the loop; the
 * outcome is on_handshake_done or on_conn_closed. |*pc| stays valid until
 * on_conn_closed returns. |ip| is IPv4 or IPv6 (an IPv4 target of a
 * dual-stack endpoint travels as an IPv4-mapped address). Returns 0,
 * FX_ECONFIG (bad address, server endpoint, IPv6 target on an IPv4-only
 * endpoint), FX_ETLS (trust file unreadable, bad pin), -ENOMEM. */
int fx_quic_connect(fx_quic_endpoint *ep, const char *ip, uint16_t port,
                    const fx_quic_connect_opts *co, void *user, fx_quic_conn **pc);

void fx_quic_conn_set_user(fx_quic_conn *c, void *user);
void *fx_quic_conn_get_user(const fx_quic_conn *c);
fx_quic_endpoint *fx_quic_conn_endpoint(const fx_quic_conn *c);
bool fx_quic_conn_is_server(const fx_quic_conn *c);
/* The peer's address when the connection was created (|*plen| bytes; |plen|
 * may be NULL). Valid while |c| is. */
const struct sockaddr *fx_quic_conn_remote(const fx_quic_conn *c, socklen_t *plen);
/* The negotiated ALPN ("" when none). */
const char *fx_quic_conn_alpn(const fx_quic_conn *c);

/* Closes |c| with application error |app_code| and |reason| (may be NULL):
 * a CONNECTION_CLOSE is sent, then on_conn_closed (reason FX_ECLOSED) runs
 * at the end of the current loop turn. Idempotent. */
void fx_quic_conn_close(fx_quic_conn *c, uint64_t app_code, const char *reason);

/* Bytes queued on |c| and not yet acknowledged. */
uint64_t fx_quic_conn_unacked(const fx_quic_conn *c);

/* ---- streams ------------------------------------------------------------- */

/* Opens a bidirectional / unidirectional stream. Returns 0 and the id in
 * |*psid|, FX_ESTREAMS when the peer's stream limit is reached (the layer
 * above answers with an error, it does not wait), FX_ECLOSED, -ENOMEM. */
int fx_quic_conn_open_bidi(fx_quic_conn *c, void *stream_user, int64_t *psid);
int fx_quic_conn_open_uni(fx_quic_conn *c, void *stream_user, int64_t *psid);

/* Lets the peer open |n| more unidirectional streams (with
 * uni_credit_granted, the only way it gets more). Loop thread only. */
void fx_quic_conn_grant_uni(fx_quic_conn *c, uint64_t n);

/* Attaches |stream_user| to a peer-opened stream (passed to later
 * on_stream_data / on_stream_close). Returns 0 or FX_ENOSTREAM. */
int fx_quic_stream_set_user(fx_quic_conn *c, int64_t sid, void *stream_user);

/* Queues |len| bytes of |buf| starting at |off| on stream |sid|, and the FIN
 * when |fin| (len may be 0 with fin). Takes a new reference on |buf| (the
 * caller keeps its own): the bytes are never copied, so one frame can be
 * queued on many streams. The reference is dropped when QUIC acknowledges
 * the last of these bytes, or the stream is reset or closed, or the
 * connection is freed. Returns 0; FX_EFULL when the connection's unacked
 * bytes would exceed the cap (nothing queued; on_writable follows later;
 * an empty connection always accepts one send, however large); FX_ENOSTREAM;
 * FX_ECLOSED (stream finished or connection closing); -EINVAL when
 * |off|+|len| exceeds the buffer; -ENOMEM. */
int fx_quic_stream_send(fx_quic_conn *c, int64_t sid, fx_buf *buf, size_t off, size_t len,
                        bool fin);

/* True while bytes queued on |sid| still wait to be written into packets
 * (flow or congestion control, pacing, a blocked socket, or this turn's
 * write not having run yet). False for an unknown stream or a closing
 * connection. Only asks: no callback follows (see
 * fx_quic_stream_notify_sent). Loop thread only. */
bool fx_quic_stream_is_sending(fx_quic_conn *c, int64_t sid);

/* When fx_quic_stream_is_sending(|c|, |sid|) holds, arranges one
 * on_writable for the moment all of those bytes have been written, so a
 * sender can hold what comes next meanwhile and send it as one, and
 * returns true; otherwise returns false and arranges nothing. Loop thread
 * only. */
bool fx_quic_stream_notify_sent(fx_quic_conn *c, int64_t sid);

/* Grants the peer |n| more bytes of credit on |sid| and on the connection,
 * for bytes the layer above has consumed. Credit is never given back on
 * arrival: until this call, delivered bytes hold the window. A stream that
 * is already gone still returns its bytes to the connection window.
 * Returns 0. */
int fx_quic_stream_consume(fx_quic_conn *c, int64_t sid, size_t n);

/* Ends the sending side after the queued bytes (a FIN). Returns 0,
 * FX_ENOSTREAM, FX_ECLOSED. */
int fx_quic_stream_shutdown(fx_quic_conn *c, int64_t sid);

/* Abandons |sid| in both directions with |app_code| (RESET_STREAM and
 * STOP_SENDING). Queued bytes never written into a packet are released at
 * once; bytes already sent stay referenced until acked or the stream
 * closes (on_stream_close, or the connection's end), because ngtcp2 may
 * resend them until then. Returns 0 or FX_ENOSTREAM. */
int fx_quic_stream_reset(fx_quic_conn *c, int64_t sid, uint64_t app_code);

/* ---- loops and placement ------------------------------------------------ */

/* The loop |c| lives on. The layer above runs a connection's writer (pump)
 * on this loop so that writer and connection talk by function call; other
 * threads reach it with fx_loop_post(). Any thread (the value never
 * changes). */
fx_loop *fx_quic_conn_loop(const fx_quic_conn *c);
fx_loop *fx_quic_endpoint_loop(const fx_quic_endpoint *ep);

/* A server listening on one port from several loops: one endpoint per loop
 * in |loops| (|n| of them, at most 256), sharing the port with SO_REUSEPORT.
 * Which loop owns a connection is a stated rule: member (first byte of the
 * client's first Destination Connection ID) mod n; that member's index is the
 * first byte of every connection ID it issues, a reuseport BPF program
 * steers datagrams by it, and a datagram that reaches another member anyway
 * is forwarded to the owner's loop (counted, never reset). A port already in
 * use by anyone is refused with -EADDRINUSE before anything binds. Port 0
 * picks a port for all. Same |o|, |cb|, |user| and errors as
 * fx_quic_server_new. Call before the loops run (or from a thread while they
 * are stopped). */
typedef struct fx_quic_server_group fx_quic_server_group;
int fx_quic_server_group_new(fx_quic_server_group **pg, fx_loop **loops, size_t n, const char *ip,
                             uint16_t port, const fx_quic_opts *o, const fx_quic_callbacks *cb,
                             void *user);
/* Frees every member. Only after all member loops have stopped; tasks
 * still queued on those loops (a forward posted to a loop that stopped
 * first) are run, then the endpoints are freed. NULL ok. */
void fx_quic_server_group_free(fx_quic_server_group *g);
size_t fx_quic_server_group_size(const fx_quic_server_group *g);
fx_quic_endpoint *fx_quic_server_group_member(const fx_quic_server_group *g, size_t i);
uint16_t fx_quic_server_group_port(const fx_quic_server_group *g);

/* ---- certificates (usable without an endpoint) ------------------------- */

typedef struct fx_quic_cert_spec {
    int64_t not_before; /* unix seconds */
    int64_t not_after;
    const char *dns_name;   /* e.g. "localhost" (also the CN) */
    const char *ip_address; /* numeric IPv4/IPv6 or NULL */
} fx_quic_cert_spec;

/* Generates a self-signed ECDSA P-256 certificate for |spec| (NULL: DNS
 * localhost + IP 127.0.0.1, valid from one hour ago for ten years) and writes
 * it as PEM to |cert_path| and the key to |key_path| (mode 0600), each
 * through a temporary file and rename. Returns 0, -errno, FX_ETLS. Blocking
 * disk I/O: main thread or tests. */
int fx_quic_cert_generate(const char *cert_path, const char *key_path,
                          const fx_quic_cert_spec *spec);

/* Writes the lowercase hex SHA-256 of the DER of the first certificate in
 * the PEM file |cert_path| into |hex| (65 bytes with the NUL). Returns 0,
 * -errno, FX_ETLS. Blocking disk I/O. */
int fx_quic_cert_fingerprint(const char *cert_path, char hex[65]);

#endif
