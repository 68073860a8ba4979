/* A bidi stream's life (bidi_life.c), below every stage that works on the
 * stream: its references, its reset, whether all it read is handled, and
 * giving back what it holds (the pre-auth allowance, the frame's
 * reservation or its wait, the merge scratch). Connection loop. Owns
 * fxb_bidi's refs and the freeing of the stream (fxb_bidi_new in bidi.h
 * creates it). */
#ifndef FX_BROKER_BIDI_LIFE_H
#define FX_BROKER_BIDI_LIFE_H

#include "broker/broker_internal.h"

/* Drops a reference; the last frees the stream and what it holds, and
 * drops its connection reference. */
void fxb_bidi_unref(fxb_bidi *s);
/* Resets the stream for malformed input (counted): no more input is
 * processed, the pre-auth charge and the reservation are given back. */
void fxb_bidi_fail(fxb_bidi *s, const char *why);
/* True when every frame |s| read has been handled: no publish parked or
 * deferred at admission, no reservation waited for, no subscribe waiting
 * for its worker, no input kept unread. */
bool fxb_bidi_is_input_handled(const fxb_bidi *s);
/* Gives back the pre-auth frame bytes |s| holds of its connection's and the
 * broker's allowances. */
void fxb_bidi_preauth_uncharge(fxb_bidi *s);
/* Gives back what |s| holds of its connection's pre-auth allowances (the
 * charge, the auth deadline, its place among the unauthenticated streams). */
void fxb_bidi_preauth_release(fxb_bidi *s);
/* Gives back the reservation of the frame just handled, if no job took it.
 * Never while a grant may be filling |s->resv| on another thread. */
void fxb_ingress_resv_release(fxb_bidi *s);
/* Gives back the reservation, or cancels its wait, as the stream goes away. */
void fxb_ingress_resv_cancel(fxb_bidi *s);
/* Empties |s|'s merge (fxb_merge), giving back what it still holds. */
void fxb_merge_reset(fxb_bidi *s);

#endif
