/* The permission check and name resolution of a bidi stream's publish and
 * subscribe requests (resolve.c), cached per QUIC stream. Connection loop.
 * Owns fxb_bidi's h, hkey, hkey_len, perm_known and perm_ok. */
#ifndef FX_BROKER_RESOLVE_H
#define FX_BROKER_RESOLVE_H

#include "broker/broker_internal.h"

/* Checks that |s|'s credentials permit |action| on the named stream (before
 * anything is created), then resolves the names (both cached per QUIC
 * stream). Returns 0, FX_EFORBIDDEN with |err| "forbidden" (counted and
 * logged, rate-limited), or a registry error with |err| filled. |*ph| is
 * borrowed from the stream's cache. */
int fxb_bidi_resolve(fxb_bidi *s, fx_broker_auth_action action, fx_wire_slice tenant,
                     fx_wire_slice ns, fx_wire_slice stream, fx_stream_handle **ph,
                     fx_registry_err *err);

#endif
