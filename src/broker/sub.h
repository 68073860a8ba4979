/* A subscription's life, below the stages that pass it around (feeder,
 * lane, writer, replay, worker): its references, tasks posted with a
 * reference, the frame lists it queues, and its close. Owns the fxb_sub
 * refcount. References and posts: any thread; close: connection loop. */
#ifndef FX_BROKER_SUB_H
#define FX_BROKER_SUB_H

#include "broker/broker_internal.h"

/* References (any thread). The last unref frees what the subscription
 * still holds and drops its connection reference. */
void fxb_sub_ref(fxb_sub *sub);
void fxb_sub_unref(fxb_sub *sub);
/* Posts |t| (embedded in |sub|) to |l|, holding a reference until it ran.
 * Any thread. */
void fxb_sub_post(fxb_sub *sub, fx_loop *l, fx_task *t);
/* Frees a frame list and its frame references; NULL does nothing. Any
 * thread. */
void fxb_frame_list_free(fx_frame_list *l);
/* Removes |sub| (uni stream gone, write error, connection closed): takes it
 * off its connection, gives back its lane slots and asks its worker to
 * unregister it. Conn loop. */
void fxb_sub_close(fxb_sub *sub, bool reset_stream);

#endif
