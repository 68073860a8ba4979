/* fx_ingress: the broker's publish admission, checkpoints 3 and 4. A publish
 * job takes its bytes from its connection's share (a child budget) and the
 * process-wide budget (the parent), then a slot in its worker's queue; when
 * either is full the enqueue policy decides: Drop (unacked, counted), Fail
 * (acked: an error text for the reply), Wait (acked with ack_on_commit: one
 * deadline over both stages) or Backpressure (unacked with pub_ingress_wait:
 * park until space, never shed). Parking never blocks a thread: the request
 * registers a waiter and the caller calls fx_ingress_admit() again when told.
 * The permit travels with the job and is released by fx_ingress_finish().
 * Bytes reserved earlier (when the frame header announced its length) are
 * handed over with fx_ingress_req_adopt(): admission then takes only what the
 * job needs beyond them, under the same policy.
 * One request is driven by one thread (its connection's I/O loop); the
 * budgets and the queue are shared. */
#ifndef FX_BROKER_INGRESS_H
#define FX_BROKER_INGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/budget.h"
#include "base/queue.h"

typedef enum fx_ingress_policy {
    FX_INGRESS_DROP = 0,     /* unacked, pub_ingress_wait off */
    FX_INGRESS_BACKPRESSURE, /* unacked, pub_ingress_wait on */
    FX_INGRESS_FAIL,         /* acked, ack_on_commit off */
    FX_INGRESS_WAIT,         /* acked, ack_on_commit on */
} fx_ingress_policy;

/* The policy for a request: the table of felix-facts.md §4. */
fx_ingress_policy fx_ingress_policy_for(bool acked, bool ack_on_commit, bool pub_ingress_wait);

typedef enum fx_ingress_outcome {
    FX_INGRESS_ADMITTED = 0, /* job queued; the worker owns it now */
    FX_INGRESS_DROPPED,      /* shed and counted; the caller frees the job, no reply */
    FX_INGRESS_FAILED,       /* refused; reply with |req->error|, free the job */
    FX_INGRESS_PARKED,       /* waiting; call fx_ingress_admit() again after on_resume */
} fx_ingress_outcome;

/* Exact reply texts (the Rust original's). */
#define FX_INGRESS_MSG_QUEUE_FULL "publish queue full"
#define FX_INGRESS_MSG_BYTES "publish ingress byte budget exhausted"
#define FX_INGRESS_MSG_CONN_BYTES "publish ingress per-connection byte budget exhausted"
#define FX_INGRESS_MSG_ADMISSION_TIMEOUT "publish admission timed out"
#define FX_INGRESS_MSG_ENQUEUE_TIMEOUT "publish enqueue timed out"
#define FX_INGRESS_MSG_CANCELLED "publish cancelled: connection closed"
#define FX_INGRESS_MSG_CLOSED "publish worker queue closed"
#define FX_INGRESS_MSG_TOO_BIG "publish larger than the ingress byte budget"

/* Tells the owner of a parked request that it may call fx_ingress_admit()
 * again: post to the request's loop. Runs on whatever thread freed the bytes
 * or the queue slot, or inside fx_ingress_cancel(). */
typedef void (*fx_ingress_resume_cb)(void *user);

/* Where a request goes: the worker queue (policy BLOCK: it only refuses; the
 * ingress policy decides) and the connection's budget, whose parent is the
 * process-wide budget. Shared by many requests; borrowed. */
typedef struct fx_ingress_target {
    fx_budget *conn_budget;
    fx_queue *queue;
} fx_ingress_target;

typedef enum fx_ingress_stage {
    FX_INGRESS_STAGE_BYTES = 0,
    FX_INGRESS_STAGE_QUEUE,
    FX_INGRESS_STAGE_DONE,
} fx_ingress_stage;

/* One publish job's admission state, embedded in the job (the queue item is
 * |job|, which must contain this struct so the worker can finish it).
 * Initialize with fx_ingress_req_init(); fields marked private are ours. */
typedef struct fx_ingress_req {
    void *job;     /* the item pushed to the worker queue */
    size_t nbytes; /* bytes the job holds in memory */
    fx_ingress_policy policy;
    uint64_t timeout_ns; /* WAIT only: publish_queue_wait_timeout */
    fx_ingress_resume_cb on_resume;
    void *user;
    const char *error;      /* set with FX_INGRESS_FAILED */
    uint64_t deadline_ns;   /* WAIT: set by the first admit; arm a timer for it */
    fx_permit held;         /* private: adopted reservation, travels with the job */
    fx_permit permit;       /* private: bytes the bytes stage took; travels too */
    fx_ingress_stage stage; /* private */
    bool started, waited, cancelled, queued_gauge; /* private */
    bool budget_parked, queue_parked;              /* private */
    int grant_rv;                                  /* private: budget grant result */
    fx_budget_waiter bw;                           /* private */
    fx_queue_waiter qw;                            /* private */
    /* Publish requests the job carries (1 unless set after init): the
     * per-request counters count each. */
    uint32_t requests;
} fx_ingress_req;

/* Prepares |r| for |job| (one publish request) of |nbytes| bytes under |policy|. |timeout_ns| is
 * used by FX_INGRESS_WAIT; |on_resume| (with |user|) is required for WAIT and
 * BACKPRESSURE. */
void fx_ingress_req_init(fx_ingress_req *r, void *job, size_t nbytes, fx_ingress_policy policy,
                         uint64_t timeout_ns, fx_ingress_resume_cb on_resume, void *user);

/* Hands |r| the bytes of |*held|, reserved from the target's connection
 * budget before the job existed (at the frame header). Takes ownership: |*held|
 * is emptied, and the bytes are released with the job (fx_ingress_finish) or
 * when admission drops or fails it. Call after fx_ingress_req_init() and
 * before the first fx_ingress_admit(). The request's loop thread. */
void fx_ingress_req_adopt(fx_ingress_req *r, fx_permit *held);

/* Runs the admission from where |r| stands at time |now| (the loop clock):
 * bytes (connection share, then process-wide), then the queue. Returns the
 * outcome; FAILED sets |r->error| to one of the FX_INGRESS_MSG_* texts.
 * Counts felix_broker_ingress_{dropped,rejected,queue_full,bytes_full,
 * conn_bytes_full,waited,backpressure_cancelled}_total. On ADMITTED the
 * job is in the queue and may already be running on the worker: do not touch
 * |r| any more. On DROPPED/FAILED nothing is held. Call it first, then only
 * after on_resume (never while |r| is parked). The request's loop thread. */
fx_ingress_outcome fx_ingress_admit(const fx_ingress_target *t, fx_ingress_req *r, uint64_t now);

/* Ends a parked request: its WAIT deadline passed (the caller's timer) or its
 * connection went away. Returns FAILED (|r->error| says "timed out" for
 * WAIT, "cancelled" otherwise; nothing held), or PARKED when a grant or
 * resume was already on its way: wait for on_resume, then fx_ingress_admit()
 * returns FAILED. */
fx_ingress_outcome fx_ingress_cancel(const fx_ingress_target *t, fx_ingress_req *r);

/* Called by the worker when it has processed the job: releases the bytes
 * (which may admit parked requests, on this thread). Any thread. */
void fx_ingress_finish(fx_ingress_req *r);

#endif
