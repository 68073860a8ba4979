/* The connection loop's side of publish admission (admission.c): publish
 * jobs made from a bidi stream's frames, merged per read, admitted through
 * the ingress machine (ingress.h) to their worker's queue or parked.
 * Connection loop. Creates struct fxb_job (freed by job.h) and owns
 * fxb_bidi's parked, merge, deferred (the park's resume and deadline
 * callbacks, which read on, are in bidi.c: parked.h). */
#ifndef FX_BROKER_ADMISSION_H
#define FX_BROKER_ADMISSION_H

#include "broker/broker_internal.h"

/* Queues a publish of |count| payloads in |backing| (taken) to |h| as a job
 * through admission. Returns 0 when settled, 1 when parked (|s| stops
 * reading), -1 when |s| was failed. */
int fxb_ingress_submit(fxb_bidi *s, fx_stream_handle *h, fx_buf *backing,
                       const fx_wire_slice *payloads, uint32_t count, bool acked, bool binary,
                       uint64_t request_id);
/* Merges the binary publish frame |f| just read on |s| (decoded in |pb|, at
 * least one payload, stream |h| resolved) into the job of the read's frames;
 * a frame that cannot join (another stream or ack kind, a full merge) first
 * sends the merged ones to admission. |pb|'s slices must point into |f|'s
 * body, which must stay valid until fxb_ingress_flush(). Returns 0 (merged),
 * 1 (the merge before it parked: this frame waits as |s->deferred|, stop
 * reading) or -1 (|s| failed). */
int fxb_ingress_add(fxb_bidi *s, fx_stream_handle *h, const fx_frame *f,
                    const fx_wire_publish_batch *pb, bool acked, uint64_t request_id);
/* Sends the merged frames of |s| as one job to admission (nothing merged:
 * nothing to do). Returns 0 when settled, 1 when parked, -1 when |s| failed. */
int fxb_ingress_flush(fxb_bidi *s);
/* The parked job settled: admits the deferred one. Returns 0 or 1 (parked). */
int fxb_ingress_run_deferred(fxb_bidi *s);
/* Ends a parked admission because |s| is going away. */
void fxb_ingress_cancel_parked(fxb_bidi *s);
/* |s| is going away: drops what is merged and the deferred job (whole
 * requests never admitted: counted as cancelled). */
void fxb_ingress_discard(fxb_bidi *s);
/* Runs admission for |j| of |s|. Returns 0 when its requests are settled,
 * 1 when parked (|s| stops reading, holding a reference for the resume). */
int fxb_ingress_job_admit(fxb_bidi *s, fxb_job *j);
/* The budgets and the queue |j| is admitted to. */
fx_ingress_target fxb_ingress_job_target(fxb_job *j);
/* Settles |s|'s parked job after its admission ended with |o| and drops
 * the park's reference. */
void fxb_ingress_unpark(fxb_bidi *s, fx_ingress_outcome o);

#endif
