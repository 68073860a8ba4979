/* The checkpoint-3 reservation of a frame on a bidi stream (resv.c): taken
 * at the frame's header, waited for, timed (frame_read_timeout) and handed
 * to the frame's job. Connection loop. Owns struct fxb_resv (fxb_bidi.resv;
 * its |task| is the resume callback bidi.c registers). Stands alone (no
 * broker_internal.h): that header embeds fxb_resv. */
#ifndef FX_BROKER_RESV_H
#define FX_BROKER_RESV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/budget.h"
#include "base/loop.h"
#include "broker/ingress.h"

typedef struct fxb_bidi fxb_bidi;

/* frame_read_timeout when fx_broker_opts leaves it 0. */
#define FXB_FRAME_READ_TIMEOUT_DEFAULT_NS (10000 * FX_NS_PER_MS)

/* Checkpoint-3 bytes of the frame being read on a bidi stream, reserved
 * from the connection's budget when its header arrived and handed to its
 * publish job (fxb_ingress_resv_adopt), else released once it is handled.
 * While |wait| the stream reads nothing (its input waits, uncredited) until
 * |w| is granted; |task| brings the grant back to the stream's loop.
 * |frame_timer| runs from the reservation to the end of the body
 * (frame_read_timeout). */
typedef struct fxb_resv {
    fx_permit permit;
    bool wait;
    int rv;         /* grant result, written before |task| is posted */
    uint16_t flags; /* flags of the frame whose header was read */
    fx_budget_waiter w;
    fx_task task;
    fx_timer frame_timer;
} fxb_resv;

/* Sets up |s|'s reservation (at creation, from fxb_ingress_bidi_init): its
 * frame read timer, its budget waiter, and |on_granted|, which runs on the
 * stream's loop (|user| is |s|) once a waited-for reservation is granted. */
void fxb_ingress_resv_init(fxb_bidi *s, fx_task_cb on_granted);
/* Reserves |n| bytes for the frame whose header (|flags|) was just read on
 * |s|; |whole|: the body is already in the input being fed, so no frame read
 * timeout runs. Returns 0 (held: read on), 1 (waiting: stop reading) or -1
 * (|s| failed). */
int fxb_ingress_reserve(fxb_bidi *s, uint16_t flags, size_t n, bool whole);
/* The bytes of the frame being read are held: counts them and starts the
 * frame read clock (not when |whole|: a body already in the input cannot
 * trickle). Fails |s| when the timer cannot be armed. */
void fxb_ingress_resv_held(fxb_bidi *s, bool whole);
/* The body of the frame being read on |s| arrived: its read clock stops. */
void fxb_ingress_resv_read(fxb_bidi *s);
/* Settles a waited-for reservation on |s|'s loop (from the |on_granted|
 * task): holds it and starts the frame read clock, or gives it back when
 * |s| ended meanwhile, or fails |s| when the budget closed. Returns false
 * when the wait had been cancelled (nothing to settle). */
bool fxb_ingress_resv_granted(fxb_bidi *s);
/* Moves the reservation of the frame just read on |s| into |r| (the job's
 * admission). */
void fxb_ingress_resv_adopt(fxb_bidi *s, fx_ingress_req *r);

#endif
