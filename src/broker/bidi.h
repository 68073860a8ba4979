/* Client bidi streams (bidi.c): creation, input with explicit credit,
 * auth, name resolution and dispatch to publish and subscribe, and close.
 * Connection loop. Owns struct fxb_bidi's life and input fields (refs, dec,
 * auth fields, pend, credit_owed, h and the permission cache) and the loop
 * callbacks that resume its reading. */
#ifndef FX_BROKER_BIDI_H
#define FX_BROKER_BIDI_H

#include "broker/broker_internal.h"

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

#endif
