/* Client connections (conn.c): the QUIC callbacks, a connection from
 * accept to close, the endpoint's connection list, the limits before
 * authentication and the lifetime of the credentials its streams hold.
 * Connection loop. Owns struct fxb_conn's loop fields and fxb_ep's list
 * (its references and lanes: conn_life.h). */
#ifndef FX_BROKER_CONN_H
#define FX_BROKER_CONN_H

#include "broker/broker_internal.h"

extern const fx_quic_callbacks fxb_quic_callbacks;
/* The connection's endpoint loop: keeps that endpoint's list. */
void fxb_conn_list_add(fx_broker *b, fxb_conn *c);
void fxb_conn_list_remove(fx_broker *b, fxb_conn *c);
/* Stream |s| of |c| just authenticated: the connection is no longer
 * subject to auth_timeout_ms, and its credentials' expiry is watched. */
void fxb_conn_on_authed(fxb_conn *c, fxb_bidi *s);
/* A verification on |c| failed: closes |c| after auth_failures_per_conn. */
void fxb_conn_on_auth_failed(fxb_conn *c);
/* Watches the expiry |exp_s| (Unix seconds) of credentials held on |c|. */
void fxb_conn_watch_expiry(fxb_conn *c, int64_t exp_s);
/* Task callback of fxb_ep.auth_task: re-checks the credentials of every
 * stream and subscription on the endpoint's connections (key removal). */
void fxb_conn_auth_recheck(fx_loop *l, fx_task *t, void *user);

#endif
