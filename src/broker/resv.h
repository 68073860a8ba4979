/* The checkpoint-3 reservation of a frame on a bidi stream (resv.c): taken
 * at the frame's header, waited for, timed (frame_read_timeout) and handed
 * to the frame's job. Connection loop. Owns fxb_bidi's resv, resv_wait,
 * resv_rv, resv_flags, resv_w, resv_task and frame_timer. */
#ifndef FX_BROKER_RESV_H
#define FX_BROKER_RESV_H

#include "broker/broker_internal.h"

/* Sets up |s|'s frame read timer and budget waiter (at creation, from
 * fxb_ingress_bidi_init, which also sets |resv_task|). */
void fxb_ingress_resv_init(fxb_bidi *s);
/* Reserves |n| bytes for the frame whose header (|flags|) was just read on
 * |s|; |whole|: the body is already in the input being fed, so no frame read
 * timeout runs. Returns 0 (held: read on), 1 (waiting: stop reading) or -1
 * (|s| failed). */
int fxb_ingress_reserve(fxb_bidi *s, uint16_t flags, size_t n, bool whole);
/* The bytes of the frame being read are held: counts them and starts the
 * frame read clock (not when |whole|: a body already in the input cannot
 * trickle). Fails |s| when the timer cannot be armed. */
void fxb_ingress_resv_held(fxb_bidi *s, bool whole);
/* Moves the reservation of the frame just read on |s| into |r| (the job's
 * admission). */
void fxb_ingress_resv_adopt(fxb_bidi *s, fx_ingress_req *r);

#endif
