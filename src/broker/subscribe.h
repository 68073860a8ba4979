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
/* A new subscription of |c| on |h| (one reference, the connection's): its id,
 * its lane part with a queue of |lane_capacity| lists (0: the lane depth),
 * its connection and stream references, and |free_parts|, which frees the
 * stage parts its caller adds. NULL on no memory. Conn loop. */
fxb_sub *fxb_sub_alloc(fxb_conn *c, fx_stream_handle *h, size_t lane_capacity,
                       void (*free_parts)(fxb_sub *sub));
/* Opens |sub|'s event stream and queues event_stream_hello as its first
 * write (the writer sends it before any delivery). Returns 0 or an error.
 * Conn loop; also for a consumer group's member (group_req.c). */
int fxb_sub_open_events(fxb_sub *sub);
/* Puts |sub| on its connection's list of live subscriptions (counted). Conn
 * loop. */
void fxb_sub_list_add(fxb_conn *c, fxb_sub *sub);

#endif
