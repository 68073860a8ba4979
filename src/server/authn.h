/* The broker's authenticator for auth_mode jwt: the fx_broker_auth callbacks
 * (src/broker/broker.h) implemented with the Ed25519 JWT code of auth.h, over
 * a JWKS file held in a swappable key slot. The daemon creates it at start
 * (the JWKS must load), hands fx_authn_broker_auth() to fx_broker_new and
 * calls fx_authn_reload() on SIGHUP. The callbacks run on the broker's
 * connection loops, concurrently; the rest is main thread. */
#ifndef FX_SERVER_AUTHN_H
#define FX_SERVER_AUTHN_H

#include <stddef.h>
#include <stdint.h>

#include "broker/broker.h"

typedef struct fx_authn fx_authn;

/* What fx_authn_new() needs. Strings are copied. NULL |issuer| / |audience|
 * mean FX_AUTH_ISSUER_DEFAULT / FX_AUTH_AUDIENCE_DEFAULT. */
typedef struct fx_authn_opts {
    const char *jwks_file; /* required */
    const char *issuer;
    const char *audience;
    int64_t leeway_s; /* >= 0 */
} fx_authn_opts;

/* Loads |o->jwks_file| and creates the authenticator in *|pa| (freed with
 * fx_authn_free()). Returns 0; -EINVAL (no file name, negative leeway);
 * -errno when the file cannot be read and FX_ECONFIG when it is not a usable
 * JWKS, both with |why| (|whylen| bytes, may be NULL) naming the file;
 * -ENOMEM. Main thread (blocking file I/O). */
int fx_authn_new(fx_authn **pa, const fx_authn_opts *o, char *why, size_t whylen);

/* Re-reads the JWKS file (SIGHUP) and installs the new key set for the next
 * auth message; verifications already running finish with the old set.
 * Streams already authenticated keep their claims until
 * fx_broker_auth_reloaded() asks key_valid, which refuses claims whose
 * signing key (by kid and key bytes) is no longer in the set. When the new file is
 * refused the old set stays and |why| says why. Returns 0 or the errors of
 * fx_authn_new()'s load. On success |why| (may be NULL) describes the new
 * set ("jwks /x.json: 2 keys"). Main thread. */
int fx_authn_reload(fx_authn *a, char *why, size_t whylen);

/* Fills |out| with the callbacks to put in fx_broker_opts.auth; |a| must
 * outlive the broker. */
void fx_authn_broker_auth(fx_authn *a, fx_broker_auth *out);

/* The JWKS file name given at creation. */
const char *fx_authn_jwks_file(const fx_authn *a);

/* Frees |a|. The broker using it must be freed first. NULL ok. */
void fx_authn_free(fx_authn *a);

#endif
