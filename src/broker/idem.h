/* Idempotent publish on the stream's worker (idem.c): the check of facts
 * §2.3 that runs before the append (the placement rule: the worker owns the
 * stream, so checks and appends of one stream are ordered), the producer
 * tables of the worker's in-memory streams (storage/producers.h, one per
 * stream, made on the first idempotent batch, freed with the stream) and
 * the answers (publish_ok with the batch's first offset and duplicate, or
 * publish_refused). Durable streams: the check runs on the stream's
 * storage thread against the log's own producer table (fx_dlog_producers,
 * rebuilt from the format v3 marks at open) right before the batch's
 * fx_dlog_append_marked (durable_store.c), so it is ordered with the
 * appends and agrees with the log after a restart by construction (no
 * second table to seed); the job comes back to the worker decided, and the
 * worker appends to the ring only a batch the log took. Worker thread
 * unless noted. Owns struct fxb_job_idem (fxb_job.idem) and
 * the worker's |idem| table. Stands alone (broker_internal.h embeds
 * fxb_job_idem). */
#ifndef FX_BROKER_IDEM_H
#define FX_BROKER_IDEM_H

#include <stdbool.h>
#include <stdint.h>

#include "storage/producers.h"

typedef struct fxb_job fxb_job;
typedef struct fxb_worker fxb_worker;
typedef struct fx_stream fx_stream;
typedef struct fx_stream_handle fx_stream_handle;
typedef struct fx_producers fx_producers;

/* The idempotent part of a publish job: set on the connection loop
 * (publish.c, admission.c) before the job is queued, then the worker's. */
typedef struct fxb_job_idem {
    bool on;
    uint8_t verdict; /* fx_prod_verdict, by fxb_idem_check */
    uint32_t features, features_hi; /* the client's (auth.client_features[_hi]) */
    uint64_t producer_id, sequence;
    uint64_t digest;   /* of the job's payloads (fxb_idem_check) */
    uint64_t first;    /* the batch's first offset: appended, or the original's */
    uint64_t expected; /* sequence_gap: the next expected sequence */
    /* FX_PROD_PARTIAL (durable only: a torn marked batch): the records of
     * the batch the log holds and their digest; |completing| once the
     * storage thread appends the rest (the job then carries only those). */
    uint32_t held, count;
    uint64_t held_digest;
    bool completing;
} fxb_job_idem;

/* Checks |j| (an idempotent job for |h|) against its stream's table.
 * Returns true when the batch is the next one (append it, then call
 * fxb_idem_appended); false when it was decided without an append
 * (duplicate or a refusal, counted, |j->idem| says which): the caller
 * completes |j| with 0 and fxb_idem_answer answers. */
bool fxb_idem_check(fxb_worker *w, fxb_job *j, uint64_t now);
/* The rules of facts §2.3 for |x| (its producer, sequence and digest set)
 * against |tab| (NULL: an empty table) at |now_us| (retired producers'
 * ttl; the worker's tables have none): true for the next batch; else false
 * with |x->verdict| (FX_PROD_DUPLICATE with |x->first|, GAP with
 * |x->expected|, EXPIRED, UNKNOWN or REUSED), counted; FX_PROD_PARTIAL
 * (with |x->first|, |held|, |count|, |held_digest|; not counted: the
 * caller completes the batch or counts it reused) only when |partial_ok|,
 * else it is REUSED. Pure but for the counters. Any thread. */
bool fxb_idem_decide(const fx_producers *tab, fxb_job_idem *x, uint64_t now_us, bool partial_ok);
/* The chained digest of |j|'s payloads (fx_producer_digest_step). Any
 * thread that holds |j|. */
uint64_t fxb_idem_digest(const fxb_job *j);
/* |j|'s batch was appended at |first|: the table notes it. */
void fxb_idem_appended(fxb_worker *w, fxb_job *j, uint64_t first);
/* Answers |j|'s ack (its one commit ack): |rv| 0 with the verdict's
 * answer, else publish_error{|err|}. Posts the reply to its loop. */
void fxb_idem_answer(fxb_job *j, int rv, const char *err);
/* The stream of |h| ends on |w|: its table is freed. */
void fxb_idem_stream_gone(fxb_worker *w, const fx_stream_handle *h);
/* Frees every table of |w| (teardown, loops stopped). */
void fxb_idem_free_all(fxb_worker *w);
/* Producers in the table of the stream whose handle id is |stream_id| on
 * |w| (0: none; a durable stream's are in its log's table instead). Worker
 * thread (GET /v1/streams asks it there). */
uint64_t fxb_idem_producers(fxb_worker *w, uint64_t stream_id);
/* A new producer id: 63 random bits (the JSON codec carries u64 up to
 * 2^63-1), never 0. Any thread. */
uint64_t fxb_idem_new_producer_id(void);

#endif
