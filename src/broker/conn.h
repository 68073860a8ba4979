/* Client connections (conn.c): the QUIC callbacks, a connection from
 * accept to close, the endpoint's connection list, the limits before
 * authentication (deadline, per address, unauthenticated streams).
 * Connection loop. Owns struct fxb_conn's loop fields and fxb_ep's list
 * (its references and lanes part: conn_life.h; its auth part, which the
 * limits before authentication write: conn_auth.h; its writer part:
 * writer.h; its reply count: reply.h). */
#ifndef FX_BROKER_CONN_H
#define FX_BROKER_CONN_H

#include "broker/broker_internal.h"

extern const fx_quic_callbacks fxb_quic_callbacks;

/* The index in b->eps of endpoint |ep| (a connection's; two endpoints may
 * share a loop: the internal listener runs on the first one's). Any thread. */
static inline uint32_t fxb_ep_index(const fx_broker *b, const fx_quic_endpoint *ep)
{
    for (uint32_t i = 0; i < b->neps; i++)
        if (b->eps[i].ep == ep)
            return i;
    return 0; /* unreachable: every connection comes from an endpoint */
}

#endif
