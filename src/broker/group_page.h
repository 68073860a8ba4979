/* Consumer groups' pages from disk (group_page.c): a group on a durable
 * stream hands out, redelivers and dead-letters records below the stream's
 * ring too; their payloads come from one page per group read from the
 * stream's log. Threads: the worker loop (the group stage, group.c: it owns
 * the fxb_gpage, looks records up in its page, asks for a page and takes
 * the answer) and the worker's replay thread (the durable stage's reader
 * loop, as for replay.c: it reads the page from the log's segment files,
 * read-only, never through the storage thread). Owns struct fxb_gpage: the
 * page (copies of at most FXB_REPLAY_PAGE_BYTES of payloads, one record
 * more if a single one is larger, and durable_max_records_per_read
 * records), the read in flight (at most one per group), the log's first
 * offset as last seen (retention moves it: below it records are settled as
 * skipped) and the retry timer after a failed read. A group freed while a
 * read is in flight leaves the fxb_gpage to the answer, which frees it. */
#ifndef FX_BROKER_GROUP_PAGE_H
#define FX_BROKER_GROUP_PAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "broker/broker_internal.h"

typedef struct fxb_gpage fxb_gpage;

/* Called on the worker loop when a page came back (or a retry is due):
 * the group pumps again. */
typedef void (*fxb_gpage_cb)(void *user);

/* A failed read is tried again this long after (counted, logged). */
#define FXB_GPAGE_RETRY_NS (100ull * 1000 * 1000)

/* The pages of durable stream |h| on worker |w| (its storage stage's
 * reader loop and I/O layer, its log's directory), calling |cb(user)| on
 * |w|'s loop when an answer is in. NULL on no memory, or -ENOTSUP when |w|
 * has no storage stage (|*prv|). Worker loop. */
fxb_gpage *fxb_gpage_new(fxb_worker *w, const fx_stream_handle *h, fxb_gpage_cb cb, void *user,
                         int *prv);
/* Frees |p| now, or when its read in flight comes back. Worker loop. */
void fxb_gpage_free(fxb_gpage *p);
/* Frees |p| now, a read in flight too: teardown, once the worker's loop
 * and its replay thread have stopped (an answer posted to the stopped
 * worker never runs; the loop's free does not touch its tasks). */
void fxb_gpage_free_stopped(fxb_gpage *p);

/* The first offset and the next offset of |h|'s log as its storage thread
 * last published them. 0; -EAGAIN when its log is listed but not open
 * (recovering, damaged, failed); -ENOENT when it has no log open (none yet
 * in this run: it opens at the first publish or subscribe). Any thread
 * (under the durable stage's catalogue mutex). */
int fxb_gpage_log_span(fxb_worker *w, const fx_stream_handle *h, uint64_t *pfirst, uint64_t *pnext);

/* The log's first offset as last seen (0 until known). Worker loop. */
uint64_t fxb_gpage_low(const fxb_gpage *p);
/* Up to |n| payloads from |offset| on held by the page, into |out|
 * (borrowed until the next page). Returns how many (0: not in it). */
uint32_t fxb_gpage_read(const fxb_gpage *p, uint64_t offset, uint32_t n, fx_wire_slice *out);
/* Asks for the page that starts at |want| and ends before |to| (the ring's
 * oldest offset): read on the replay thread unless a read is in flight or a
 * retry is due later, or the page holds |want| already. Worker loop. */
void fxb_gpage_want(fxb_gpage *p, uint64_t want, uint64_t to);

#endif
