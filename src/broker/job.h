/* A publish job's end (job.c). Owns nothing but the freeing of fxb_job,
 * which ingress (admission.c) creates, the worker runs and the storage stage
 * may carry. Any thread. */
#ifndef FX_BROKER_JOB_H
#define FX_BROKER_JOB_H

#include "broker/broker_internal.h"

/* Frees |j| and gives back what it holds; NULL does nothing. Any thread. */
void fxb_job_free(fxb_job *j);

#endif
