/* A publish job's end: what it holds (its admission permit, payload,
 * stream and connection references, commit acks) is given back. Any thread:
 * the connection loop frees a job that was never admitted, its worker one
 * that ran, the storage stage one it failed. */
#include "broker/job.h"

#include <stdlib.h>

#include "felix/error.h"

#include "broker/conn_life.h"
#include "broker/reply.h"

void fxb_job_free(fxb_job *j)
{
    if (j == NULL)
        return;
    if (j->mirror_done != NULL) /* a mirror's job never run (the worker's queue freed) */
        j->mirror_done(j->mirror_user, FX_ECLOSED, 0);
    fx_ingress_finish(&j->req);
    fx_buf_unref(j->backing);
    if (j->counted)
        fx_stream_handle_jobs_add(j->h, -1);
    fx_stream_handle_unref(j->h);
    for (uint32_t i = 0; j->commit && i < j->nacks; i++)
        fxb_reply_unref(j->acks[i]);
    if (j->conn != NULL) /* a broker-made job (a dead letter) has none */
        fxb_conn_unref(j->conn);
    free(j->swhy);
    free(j);
}
