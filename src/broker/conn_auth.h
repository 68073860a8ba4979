/* A connection's authentication state (conn_auth.c): the end of its
 * pre-auth limits once a stream authenticated, closing it after too many
 * failed verifications, and the lifetime of the credentials its streams and
 * subscriptions hold. Connection loop. Owns a connection's auth part
 * (fxb_conn.auth) and the FXB_PREAUTH_ limits. */
/* broker_internal.h embeds fxb_conn_auth in fxb_conn and includes this
 * header back: it comes first, outside the guard. */
#include "broker/broker_internal.h"

#ifndef FX_BROKER_CONN_AUTH_H
#define FX_BROKER_CONN_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* A connection's auth part (fxb_conn.auth). Connection loop only. Before
 * authentication: the peer's address, counted in b->peers while
 * |peer_counted| (conn.c takes it); |authed| once any stream authenticated
 * (else |timer| closes the connection at auth_timeout_ms; conn.c arms it);
 * failed verifications; streams not yet authenticated (conn.c bounds them,
 * bidi.c and bidi_life.c count them) and the pre-auth frame bytes they hold
 * (bidi.c charges them). Token lifetime: |exp_timer| fires at the earliest
 * expiry (|exp_next_s|, Unix seconds; INT64_MAX = none) of the credentials
 * its streams and subscriptions hold. */
typedef struct fxb_conn_auth {
    fxb_peer_key peer;
    bool peer_counted;
    bool authed;
    uint32_t failures;
    uint32_t unauth_streams;
    size_t preauth_bytes;
    fx_timer timer;
    fx_timer exp_timer;
    int64_t exp_next_s;
} fxb_conn_auth;

/* Sets up |c|'s auth part (at creation; |c->qc| is set): its peer's address,
 * its auth deadline timer (|on_timeout|, |user| is |c|) and its expiry timer. */
void fxb_conn_auth_init(fxb_conn *c, fx_timer_cb on_timeout);
/* Cancels its timers and gives back its place in its address's count (the
 * connection closed). */
void fxb_conn_auth_deinit(fxb_conn *c);

/* Stream |s| of |c| just authenticated: the connection is no longer
 * subject to auth_timeout_ms, and its credentials' expiry is watched. */
void fxb_conn_on_authed(fxb_conn *c, fxb_bidi *s);
/* A verification on |c| failed: closes |c| after auth_failures_per_conn. */
void fxb_conn_on_auth_failed(fxb_conn *c);
/* Timer callback (fxb_conn.auth.exp_timer): ends what holds expired
 * credentials and re-arms at the next expiry. */
void fxb_conn_on_expiry(fx_loop *l, fx_timer *t, void *user);
/* Task callback of fxb_ep.auth_task: re-checks the credentials of every
 * stream and subscription on the endpoint's connections (key removal). */
void fxb_conn_auth_recheck(fx_loop *l, fx_task *t, void *user);

#endif
