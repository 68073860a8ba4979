/* The connection loop's side of publish admission (admission.c): publish
 * jobs made from a bidi stream's frames, merged per read, admitted through
 * the ingress machine (ingress.h) to their worker's queue or parked.
 * Connection loop. Creates struct fxb_job (freed by job.h) and owns struct
 * fxb_merge and struct fxb_admit (fxb_bidi.admit; the park's resume and
 * deadline callbacks, which read on, are in bidi.c: parked.h). Stands alone
 * (no broker_internal.h): that header embeds fxb_admit. */
#ifndef FX_BROKER_ADMISSION_H
#define FX_BROKER_ADMISSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/budget.h"
#include "base/buf.h"
#include "base/loop.h"
#include "broker/idem.h"
#include "broker/ingress.h"
#include "broker/stream.h"
#include "wire/binary.h"
#include "wire/frame.h"

typedef struct fxb_bidi fxb_bidi;
typedef struct fxb_job fxb_job;
typedef struct fxb_reply fxb_reply;

/* Merging (admission.c): the complete binary publish frames of one read for
 * the same stream and ack kind become one job. Each frame keeps the bytes its
 * header reserved (summed into |held|) and its own ack slot, queued in
 * request order when the frame is read. Until the job is made, payloads point
 * into the read's input (valid while it is fed) or into |owned|, the body the
 * first frame's decoder had to buffer; the job copies them into one buffer.
 * The arrays are scratch kept by the stream, so a merge allocates nothing per
 * frame. Conn loop. */
typedef struct fxb_merge_part {
    const uint8_t *p; /* the frame's payload region (its payloads, back to back with their
                         length prefixes) */
    size_t len;
    uint32_t first; /* its first slice in |sl| */
} fxb_merge_part;

typedef struct fxb_merge {
    fx_stream_handle *h; /* reference; NULL while nothing is merged */
    bool acked;
    uint32_t nreq; /* frames merged, each one publish request; nreq parts */
    size_t bytes;  /* sum of the parts' lengths */
    size_t payload_bytes;
    fx_permit held; /* the frames' header reservations */
    uint8_t *owned; /* body of the first frame, taken from the decoder (free()), or NULL */
    size_t owned_len;
    fxb_merge_part *parts;
    fx_wire_slice *sl;
    fxb_reply **acks; /* ack slots of acked frames (nreq of them when |acked|) */
    uint32_t nsl;
    uint32_t cap_parts, cap_sl; /* |acks| has cap_parts too */
} fxb_merge;

/* Bounds of one merged job: frames, messages and payload bytes (the event
 * frame a subscriber gets for it stays far below any frame limit). */
#define FXB_MERGE_MAX_FRAMES 64u
#define FXB_MERGE_MAX_MSGS 1024u
#define FXB_MERGE_MAX_BYTES (1u << 20)
/* A publish failed at admission because its wait timer could not be armed. */
#define FXB_WAIT_TIMER_TEXT "publish admission wait failed: out of memory for its timer"

/* A bidi stream's publish jobs at admission: the job parked there (the
 * stream reads nothing while it waits), the frames of the current read being
 * merged, and a job made behind the parked one that waits its turn.
 * |resume_task| and |wait_timer| run the park's callbacks (parked.h). */
typedef struct fxb_admit {
    fxb_job *parked;
    fxb_merge merge;
    fxb_job *deferred;
    fx_task resume_task;
    fx_timer wait_timer;
} fxb_admit;

/* Sets up |s|'s admission part (at creation, from fxb_ingress_bidi_init):
 * |on_resume| runs on the stream's loop when its parked job may go on,
 * |on_expired| when the Wait policy's deadline passed (|user| is |s|). */
void fxb_admit_init(fxb_bidi *s, fx_task_cb on_resume, fx_timer_cb on_expired);
/* Queues a publish of |count| payloads in |backing| (taken) to |h| as a job
 * through admission. Returns 0 when settled, 1 when parked (|s| stops
 * reading), -1 when |s| was failed. */
int fxb_ingress_submit(fxb_bidi *s, fx_stream_handle *h, fx_buf *backing,
                       const fx_wire_slice *payloads, uint32_t count, bool acked, bool binary,
                       uint64_t request_id);
/* As fxb_ingress_submit for an idempotent producer's acked batch (|idem|,
 * copied into the job): never merged, its ack a JSON commit ack answered by
 * the worker after the check (idem.c), whatever ack_on_commit says. */
int fxb_ingress_submit_idem(fxb_bidi *s, fx_stream_handle *h, fx_buf *backing,
                            const fx_wire_slice *payloads, uint32_t count, uint64_t request_id,
                            const fxb_job_idem *idem);
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
