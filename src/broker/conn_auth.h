/* A connection's authentication state (conn_auth.c): the end of its
 * pre-auth limits once a stream authenticated, closing it after too many
 * failed verifications, and the lifetime of the credentials its streams and
 * subscriptions hold. Connection loop. Owns fxb_conn's authed,
 * auth_failures, auth_timer (cancelled here), exp_timer and exp_next_s. */
#ifndef FX_BROKER_CONN_AUTH_H
#define FX_BROKER_CONN_AUTH_H

#include "broker/broker_internal.h"

/* Stream |s| of |c| just authenticated: the connection is no longer
 * subject to auth_timeout_ms, and its credentials' expiry is watched. */
void fxb_conn_on_authed(fxb_conn *c, fxb_bidi *s);
/* A verification on |c| failed: closes |c| after auth_failures_per_conn. */
void fxb_conn_on_auth_failed(fxb_conn *c);
/* Timer callback (fxb_conn.exp_timer): ends what holds expired
 * credentials and re-arms at the next expiry. */
void fxb_conn_on_expiry(fx_loop *l, fx_timer *t, void *user);
/* Task callback of fxb_ep.auth_task: re-checks the credentials of every
 * stream and subscription on the endpoint's connections (key removal). */
void fxb_conn_auth_recheck(fx_loop *l, fx_task *t, void *user);

#endif
