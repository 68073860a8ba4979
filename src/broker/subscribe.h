/* Subscribe requests (subscribe.c): the subscribe exchange from a bidi
 * stream to the stream's worker and back, ending in the event stream's
 * hello and the answer. Connection loop. Creates struct fxb_sub (its life:
 * sub.h; its parts by their stages' _init) and owns its request fields
 * (reply_task, bidi, listed, auth_ctx, auth_exp_s); opening the event
 * stream writes the writer part (writer.h) on this same loop. */
#ifndef FX_BROKER_SUBSCRIBE_H
#define FX_BROKER_SUBSCRIBE_H

#include "broker/broker_internal.h"

/* Handles a decoded subscribe message on |s| (authenticated, tenant
 * checked). Conn loop. */
void fxb_subscribe(fxb_bidi *s, const fx_msg *m);

#endif
