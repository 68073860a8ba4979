/* The storage stage of durable streams, between the worker's queue and its
 * ring: each worker has one storage thread (fx_placement_storage_worker
 * places them) that owns the durable logs of that worker's streams and does
 * all their disk I/O, so no loop ever blocks on write or fdatasync. A job of
 * a durable stream goes worker -> storage (append: offsets assigned; flush
 * as the fsync policy says) -> worker (ring + fanout, then the ack), in
 * offset order. The worker's drain sees two calls: fxb_durable_route and
 * fxb_durable_next_stored. Worker side: durable.c; storage thread:
 * durable_store.c (durable_store.h); life and drain: durable_ops.c; admin:
 * durable_admin.c. Private to src/broker; thread noted per function. */
/* broker_internal.h embeds fxb_sub_dur in fxb_sub and includes this header
 * back: it comes first, outside the guard. */
#include "broker/broker_internal.h"

#ifndef FX_BROKER_DURABLE_H
#define FX_BROKER_DURABLE_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

struct fxb_replay;

/* A subscription's durable part (fxb_sub.dur): the storage thread's answer
 * about its stream's log. The worker posts |task| to the storage thread,
 * which writes the rest (fxb_store_on_sub) and then posts the registration
 * back; from then on the worker only reads it (fxb_durable_sub_ready). */
typedef struct fxb_sub_dur {
    fx_task task;  /* the trip to the storage thread */
    bool ready;    /* its log answered */
    int rv;        /* the answer: 0, or why the subscription fails */
    uint64_t base; /* the log's next offset when it was opened */
    char *why;     /* NULL or the detail of a storage |rv| (owned) */
    /* A reader of the log for a start below the ring, or NULL; the worker
     * takes it into fxb_feeder.replay, which owns it. */
    struct fxb_replay *replay;
} fxb_sub_dur;

/* Frees what the durable part holds. Any thread, by the last reference. */
void fxb_sub_dur_deinit(fxb_sub_dur *d);

/* Opens the catalogue at |b->o.durable.dir| and creates the storage threads
 * (not started), one per worker. Nothing when no storage dir is set. Returns
 * 0, FX_ESTORAGE_CATALOG or -errno (the reason in opts.durable.error). Main
 * thread, before the workers start. */
int fxb_durable_init(fx_broker *b);
/* Start-up recovery, first part: every stream of the catalogue is created
 * (durable) in the registry, listed as "recovering" and queued for its
 * storage thread, which opens and validates its log after
 * fxb_durable_start (a torn tail is cut, logged and counted; damage
 * quarantines that stream only). Returns 0, or the first failure (the
 * registry refused a stream, -ENOMEM) with the reason in
 * opts.durable.error. Main thread, after fxb_durable_init, before the
 * loops start. */
int fxb_durable_recover(fx_broker *b);
/* Drain: every storage thread flushes every log it has open; waits until
 * they are done or |deadline_ns| (fx_now_ns clock). Returns 0,
 * FX_ETIMEDOUT, FX_ESTORAGE_ERROR (a flush failed; logged), -ENOMEM. Main
 * thread, loops running. */
int fxb_durable_flush_all(fx_broker *b, uint64_t deadline_ns);
/* Starts the storage threads, each then recovering its catalogued logs one
 * task at a time (tasks queued meanwhile run between two). Returns 0 or
 * -errno. Main thread. */
int fxb_durable_start(fx_broker *b);
/* Runs what every storage thread has queued (a barrier). Main thread, while
 * they run. */
void fxb_durable_barrier(fx_broker *b);
/* Calls |cb(l, user)| with each running storage thread's loop and replay
 * loop. Main thread, while they run. */
void fxb_durable_each_loop(fx_broker *b, void (*cb)(fx_loop *l, void *user), void *user);
/* Stops the storage threads (after the workers). Main thread. */
void fxb_durable_stop(fx_broker *b);
/* The broker begins to stop: the storage threads start no further
 * start-up recovery and recover no consumer group (durable_int.h). Before
 * the last fxb_durable_barrier that precedes stopping the workers. */
void fxb_durable_stopping(fx_broker *b);
/* Closes every log with a flush and frees the stage and the catalogue. Main
 * thread, every loop stopped. */
void fxb_durable_free(fx_broker *b);

/* Worker side (the worker loop of |w|): */
/* Routes |j|, popped from |w|'s queue: a job of a durable stream is taken
 * (true): it goes to storage, or waits behind its stream's
 * durable_max_unsynced_bytes bound, and comes back by
 * fxb_durable_next_stored; the stage owns it meanwhile. Otherwise (false)
 * the caller runs it now with |*prv|: 0, or -ENOMEM when a durable job
 * could not be taken (refused, never written). */
bool fxb_durable_route(fxb_worker *w, fxb_job *j, int *prv);
/* The next job back from storage, in its stream's offset order, or NULL;
 * the caller owns it and runs it with |*prv|: 0 to append it to its ring,
 * else the error it fails with (the storage's, FX_ENOSTREAM, or
 * FX_ESTORAGE_ERROR when its log offset is not its ring's tail: counted,
 * logged). The ring of an active stream is made here if it has none. */
fxb_job *fxb_durable_next_stored(fxb_worker *w, int *prv);
/* Jobs taken and not yet completed (held, in storage or ready). */
uint64_t fxb_durable_pending(const fxb_worker *w);
/* The offset the ring of durable stream |h| starts at: its log's next
 * offset when it was opened. Only valid once the stream's storage answered
 * (a stored job, or fxb_durable_sub_ready). */
uint64_t fxb_durable_first_offset(const fxb_worker *w, const fx_stream_handle *h);
/* A subscription to a durable stream registers only once the log is open
 * (the ring starts at its offset): returns true when it may register now;
 * false when |sub->reg_task| was sent to storage and comes back (the caller
 * returns, keeping its reference). On an open failure sets |sub->reg_rv|
 * and returns true with |*pfailed| set. */
bool fxb_durable_sub_ready(fxb_sub *sub, bool *pfailed);
/* The stream |h| ended on |w|: the jobs it still holds back by the bound
 * are refused (FX_ENOSTREAM), and once none of its jobs is in storage its
 * state here is freed and its log closed (flushed) and deleted. */
void fxb_durable_end_stream(fxb_worker *w, fx_stream_handle *h);
/* Frees what |w| holds of the stage (teardown, loops stopped). */
void fxb_durable_worker_deinit(fxb_worker *w);
/* Tests: queues |j| as back from storage with its records at log offset
 * |first|, for the next fxb_durable_next_stored (|w| gets a stage with no
 * storage thread if it has none). Returns 0 or -ENOMEM. */
int fxb_durable_test_stored(fxb_worker *w, fxb_job *j, uint64_t first);

#endif
