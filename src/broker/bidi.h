/* Client bidi streams (bidi.c): creation, input with explicit credit, auth
 * and tenant binding, dispatch to publish and subscribe, close, and the
 * loop callbacks that resume reading after a wait (fxb_parked_*: parked.h).
 * The top of the connection loop's request side: only conn.c calls it.
 * Connection loop. Creates struct fxb_bidi (its life: bidi_life.h) and owns
 * its input fields (dec, authed, tenant, auth fields, ended, closed,
 * peer_fin, pend, credit_owed). */
#ifndef FX_BROKER_BIDI_H
#define FX_BROKER_BIDI_H

#include "broker/broker_internal.h"

/* Server flags answered to a client that sent client_flags. */
#define FXB_SERVER_FLAGS 0x3Fu

/* A new bidi stream |sid| of |c|, listed on |c| (one reference: the QUIC
 * stream's). Returns NULL on -ENOMEM. */
fxb_bidi *fxb_bidi_new(fxb_conn *c, int64_t sid);
/* Input from QUIC (|fin|: the client finished sending). */
void fxb_bidi_on_data(fxb_bidi *s, const uint8_t *data, size_t len, bool fin);
/* The QUIC stream is gone (or its connection): discards what waits, drops
 * the replies and the stream's reference. */
void fxb_bidi_close(fxb_bidi *s);
/* Sets up |s|'s admission and reservation parts with the loop callbacks
 * that resume its reading after an admission park or a reservation wait (at
 * creation). */
void fxb_ingress_bidi_init(fxb_bidi *s);

#endif
