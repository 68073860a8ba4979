/* The storage thread of durable streams (durable_store.c): one per worker
 * (fx_placement_storage_worker), with its sync thread (fx-sync-N) for the
 * fdatasync of a flush in flight and its replay thread (replay.c). It owns
 * the logs of its worker's durable streams (dstream: appends, flush begin
 * and completion, retention, open and close), their entries in the list
 * GET /v1/streams shows, and their deletion from the catalogue. The worker
 * side (durable.c) reaches it only by the tasks below; durable_ops.c and
 * durable_admin.c call the rest. Private to the storage stage. */
#ifndef FX_BROKER_DURABLE_STORE_H
#define FX_BROKER_DURABLE_STORE_H

#include "broker/durable_int.h"

/* ---- tasks the worker side posts to the storage thread ---- */

/* Takes the job of trip |user| (an fxb_stored) for its log: it is appended
 * together with the jobs queued behind it (one write), after them, and
 * comes back by the trip's |back| task (with |rv| set on a failure).
 * Storage thread. */
void fxb_store_on_job(fx_loop *l, fx_task *t, void *user);
/* A subscription's barrier (|user| is the fxb_sub, with the posting
 * reference): the log is open once this ran; writes the sub's durable part
 * (fxb_sub_dur: the answer, the log's base and a replay reader), then posts
 * its feed.reg_task back to the worker (fxb_worker_sub_register). Storage
 * thread. */
void fxb_store_on_sub(fx_loop *l, fx_task *t, void *user);

/* The end of a durable stream, sent by its worker (takes a reference to
 * |h|; fxb_store_on_end frees the message). */
typedef struct end_msg {
    fx_task task;
    fxb_storage *st;
    fx_stream_handle *h;
} end_msg;
/* Closes the log of the stream of |user| (an end_msg) with a flush, once no
 * flush uses it, and deletes its files and catalogue entry (a failure is
 * retried in the background). Storage thread. */
void fxb_store_on_end(fx_loop *l, fx_task *t, void *user);

/* ---- the logs ---- */

/* Wall clock in microseconds (record timestamps, segment creation). Any
 * thread. */
uint64_t fxb_wall_us(void);
/* The log of |h| on storage thread |st|, opened (declared in the catalogue,
 * recovered) on first use; NULL on -ENOMEM, while a deleted stream's log
 * of that name is still open (the next call tries again), or once |h| has
 * ended without a log open here (its log was deleted: never opened again).
 * A dstream whose open failed is returned with |open_rv| set: damage
 * (FX_ESTORAGE_DAMAGED) stays until a repair; any other failure is tried
 * again by a call FXB_OPEN_RETRY_NS or more after it. Storage thread. */
dstream *fxb_dstream_get(fxb_storage *st, fx_stream_handle *h);
/* Closes |s| with a flush and frees it. Storage thread (or teardown). */
void fxb_dstream_close(fxb_storage *st, dstream *s);
/* Appends the jobs |s| has taken and not appended yet, consecutive ones
 * merged into one fx_dlog_append (one write), and hands back those the
 * policy lets be acknowledged. Storage thread. */
void fxb_dstream_append_pending(dstream *s, uint64_t now);
/* Runs one flush of |s| now through its policy, on this thread, after
 * waiting for the flush in flight, if any, to complete (counted; a failure
 * fails the waiting appends and is logged). The drain's flush. Storage
 * thread. */
void fxb_dstream_flush(dstream *s, uint64_t now);
/* Completes the flush in flight of |s|, if its completion has not run,
 * waiting on this thread for its fdatasync (counted). With |answer| the jobs
 * it covered are handed back (acknowledged, or failed with it); without,
 * nothing is handed back (teardown: the loops have stopped and the jobs are
 * freed with the log). Storage thread, or teardown once every loop stopped. */
void fxb_dstream_flight_wait(dstream *s, bool answer);
/* Sets the retention bounds of |s| from the catalogue's overrides |bytes|
 * and |seconds| (0: the broker's durable_retention_*), sweeps at once with
 * the new bounds and rearms the sweep timer. Storage thread. */
void fxb_dstream_set_retention(dstream *s, uint64_t bytes, uint64_t seconds, uint64_t now);
/* Under periodic, a group journal of |s| appended records that no flush
 * covers: the stream's timer flushes the journals one interval from now
 * (if it is not due earlier). Storage thread. */
void fxb_dstream_journal_dirty(dstream *s, uint64_t now);
/* Logs (rate-limited) that |what| failed on |s|'s stream with |rv|. */
void fxb_dstream_log_error(const dstream *s, const char *what, int rv);

/* ---- GET /v1/streams entries and start-up recovery ---- */

/* Lists a "recovering" entry for catalogued stream |h| (GET /v1/streams)
 * that its dstream takes over when it is made. Returns 0 or -ENOMEM. Main
 * thread, before the storage threads start. */
int fxb_dstats_list_recovering(fxb_durable *d, fx_stream_handle *h);
/* Drops the "recovering" entry of |h| if no dstream took it over (its
 * stream ended before its recovery, or the dstream could not be made:
 * |failed|), counting its recovery as ended. Storage thread. */
void fxb_dstats_drop_recovering(fxb_durable *d, const fx_stream_handle *h, bool failed);
/* The recovery of one catalogued stream ended in |state|: counts it and
 * logs the progress ("recovered N of M durable streams", at most every two
 * seconds, and when the last one is done). Storage thread. */
void fxb_durable_recovered(fxb_durable *d, dstate state);

/* ---- deletions the catalogue could not finish ---- */

/* Has storage thread 0 retry the deletions the catalogue could not finish
 * (every 30 s while any is left). Any thread, once the storage threads run. */
void fxb_durable_retry_deletions_soon(fxb_durable *d);
/* Prepares the retry's task and timer. Main thread, at init. */
void fxb_durable_retry_init(fxb_durable *d);

#endif
