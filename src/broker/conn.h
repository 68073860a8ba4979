/* Client connections (conn.c): the QUIC callbacks, a connection from
 * accept to close, the endpoint's connection list, the limits before
 * authentication (deadline, per address, unauthenticated streams).
 * Connection loop. Owns struct fxb_conn's loop fields and fxb_ep's list
 * (its references and lanes: conn_life.h; its authentication state:
 * conn_auth.h). */
#ifndef FX_BROKER_CONN_H
#define FX_BROKER_CONN_H

#include "broker/broker_internal.h"

extern const fx_quic_callbacks fxb_quic_callbacks;

#endif
