/* Running a function on another loop and waiting for it (fxb_run_on,
 * broker.c). Any thread but |l|'s. */
#ifndef FX_BROKER_RUN_ON_H
#define FX_BROKER_RUN_ON_H

#include "broker/broker_internal.h"

/* Runs |fn|(|arg|) (NULL: nothing) on loop |l| and waits until it has run,
 * after everything |l| had queued before it. Not on |l| itself. */
void fxb_run_on(fx_loop *l, void (*fn)(void *), void *arg);

#endif
