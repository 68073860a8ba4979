/* The loop callbacks of a publish job parked at admission: the admission's
 * resume and the Wait policy's deadline. They live in bidi.c, beside the
 * input they resume. Connection loop. Registered on fxb_bidi.admit's
 * resume_task and wait_timer by fxb_ingress_bidi_init; named so
 * fx_broker_test_fail_timer_arms can aim at the timer. */
#ifndef FX_BROKER_PARKED_H
#define FX_BROKER_PARKED_H

#include "broker/broker_internal.h"

/* Task callback (|user| is the stream holding the parked job): admission
 * may go on. */
void fxb_parked_resume(fx_loop *l, fx_task *t, void *user);
/* Timer callback (|user| is the stream holding the parked job): the Wait
 * policy's deadline passed. */
void fxb_parked_expired(fx_loop *l, fx_timer *t, void *user);

#endif
