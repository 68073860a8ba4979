/* A fake QUIC transport for fuzz targets (fake_quic.c implements quic/quic.h
 * without sockets, TLS or ngtcp2). The harness plays the peer: it opens
 * connections, delivers stream bytes within the receive window the layer
 * above has credited, resets streams, acknowledges what was sent and ends
 * connections; every callback runs from one of those calls (or, with
 * |auto_turn|, from a task the fake posts to the endpoint's loop), never
 * from inside a function the layer above called. What the layer above does
 * is checked as it happens: credit for bytes it was never given, sends on
 * finished streams and the like abort the run. */
#ifndef FX_FUZZ_FAKE_QUIC_H
#define FX_FUZZ_FAKE_QUIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quic/quic.h"

/* What the fake knows about one stream (kept until its connection is freed,
 * so late credit for a closed stream is still checked). */
typedef struct fq_stream {
    int64_t sid;
    void *user;
    bool peer_opened;
    bool rx_fin;       /* the peer's FIN was delivered */
    bool tx_fin;       /* our FIN is queued */
    bool tx_fin_acked; /* ... and acknowledged */
    bool reset;        /* reset (by us unless |reset_remote|): closes at the next turn */
    bool reset_remote;
    uint64_t reset_code;
    bool closed; /* on_stream_close was delivered */
    size_t rx_delivered, rx_consumed;
    uint8_t *out; /* the peer's bytes not yet allowed by the window */
    size_t out_len;
    bool out_fin;
    size_t tx_bytes;
    uint8_t *tx; /* what was sent, up to FQ_TX_LOG bytes */
    size_t tx_len;
    bool tx_truncated;
} fq_stream;

#define FQ_TX_LOG (256u * 1024u)

/* Called after every accepted send (on the sending loop, inside
 * fx_quic_stream_send or, for a FIN alone, fx_quic_stream_shutdown): the
 * peer's view of new bytes on |s|. */
typedef void (*fq_send_hook)(fx_quic_conn *c, fq_stream *s, const uint8_t *p, size_t n, bool fin,
                             void *user);

typedef struct fq_config {
    size_t stream_window;   /* receive credit per stream */
    uint64_t unacked_cap;   /* sends beyond it get FX_EFULL */
    uint32_t local_streams; /* streams each side may open; then FX_ESTREAMS */
    bool auto_turn;         /* closes run from a task posted to the endpoint loop */
    fq_send_hook on_send;
    void *hook_user;
} fq_config;

/* Applies to endpoints created from now on. */
void fq_configure(const fq_config *cfg);

/* The endpoint created last (server or client), or NULL. */
fx_quic_endpoint *fq_last_endpoint(void);
/* Server: a client connects (on_conn_new, then on_handshake_done). Returns
 * the connection, or NULL if the layer above closed it at once. */
fx_quic_conn *fq_accept(fx_quic_endpoint *ep);
/* The peer sends |len| bytes (and its FIN when |fin|) on |sid|, opening the
 * stream if it is a new peer stream. What the receive window allows is
 * delivered now (the FIN with the last byte); the rest waits with the peer
 * and goes out at later turns as credit comes back. Returns the bytes
 * delivered now. */
size_t fq_deliver(fx_quic_conn *c, int64_t sid, const uint8_t *data, size_t len, bool fin);
/* The peer resets |sid| (closes at the next turn). */
void fq_peer_reset(fx_quic_conn *c, int64_t sid, uint64_t code);
/* The peer acknowledges everything sent: buffers are released, FINs are
 * acknowledged, and on_writable runs if a send was refused. */
void fq_ack(fx_quic_conn *c);
/* End of a loop turn: streams that are done or reset close
 * (on_stream_close); a closing connection ends (on_conn_closed) and is
 * freed. Returns false once |c| is gone. */
bool fq_turn(fx_quic_conn *c);
/* The peer closes the connection (ends at the next turn). */
void fq_close_remote(fx_quic_conn *c, uint64_t code);
/* Tells whether the layer above closed (or is closing) |c|. */
bool fq_is_closing(const fx_quic_conn *c);
/* The |i|-th live connection of |ep| (newest first), or NULL. */
fx_quic_conn *fq_conn_at(fx_quic_endpoint *ep, size_t i);
/* True while |c| is a live connection of |ep|. */
bool fq_conn_alive(fx_quic_endpoint *ep, const fx_quic_conn *c);
/* Iterates the streams of |c| (NULL past the end). */
fq_stream *fq_stream_at(fx_quic_conn *c, size_t i);
fq_stream *fq_stream_find(fx_quic_conn *c, int64_t sid);
/* Bytes sent and not acknowledged. */
uint64_t fq_unacked(const fx_quic_conn *c);

#endif
