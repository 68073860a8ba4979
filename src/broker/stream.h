/* fx_stream: one stream's state on its worker loop (checkpoint 5): the replay
 * ring of appended batches (bounded in messages and in payload bytes), the
 * subscriber set, start positions, and the fanout of each batch's envelope to
 * every subscriber queue under the block / drop_new / drop_old policy. Under
 * block a full subscriber queue parks the fanout (the worker stops taking
 * input) until that queue drains. Loop thread only (the stream's worker; no
 * locks), except where a function says otherwise. */
#ifndef FX_BROKER_STREAM_H
#define FX_BROKER_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/queue.h"
#include "broker/envelope.h"
#include "broker/registry.h"
#include "wire/wire.h"

typedef struct fx_stream fx_stream;
typedef struct fx_subscriber fx_subscriber;

/* A subscription's two queues (its subscriber queue and its writer-lane
 * queue) start with this many cells and double on demand up to their
 * configured capacity, so an idle subscription costs a few hundred bytes of
 * queue instead of its whole bound (docs/performance.md, "Memory"). */
#define FX_SUB_QUEUE_INITIAL_CELLS 16

/* Tells the worker that a parked fanout may continue: post to the worker loop
 * and call fx_stream_resume() there. Runs on the thread that drained the
 * subscriber queue (normally the worker itself), or inside
 * fx_stream_unsubscribe() when the subscriber it waited on goes away. */
typedef void (*fx_stream_resume_cb)(fx_stream *s, void *user);

/* Tells a subscriber's feeder that its queue went from empty to non-empty.
 * Runs on the worker, inside fx_stream_publish()/fx_stream_resume(). */
typedef void (*fx_subscriber_wake_cb)(fx_subscriber *sub, void *user);

/* Bytes a ring charges per retained message on top of its payload: the
 * envelope's slice for it. A batch's slices are freed only with its last
 * message, so a partly trimmed batch stays charged for all of them: a batch
 * of millions of empty messages costs what it holds, not 0. */
#define FX_STREAM_MSG_OVERHEAD sizeof(fx_wire_slice)

typedef struct fx_stream_opts {
    uint64_t handle_id;
    uint32_t log_capacity;       /* messages kept for replay, >= 1 */
    uint64_t log_capacity_bytes; /* bytes kept for replay (payload + overhead), >= 1 */
    /* Accounts the ring charges besides its own bound (NULL: none): the
     * process-wide one (borrowed, outlives the stream) and the tenant's (the
     * stream takes a reference). While either is over its limit an append
     * evicts this ring's oldest messages, counted. */
    fx_retained *global;
    fx_retained *tenant;
    size_t sub_queue_capacity;        /* envelopes per subscriber queue, >= 1 */
    fx_queue_policy sub_queue_policy; /* checkpoint 5 */
    fx_stream_resume_cb on_resume;    /* required for FX_QUEUE_BLOCK */
    void *user;
    uint64_t first_offset; /* offset of the first append (a durable log's next offset); 0 */
} fx_stream_opts;

/* Creates a stream in |*ps|. Returns 0, -EINVAL (a bound is 0, or block
 * without on_resume) or -ENOMEM. */
int fx_stream_new(fx_stream **ps, const fx_stream_opts *o);

/* Frees |s|: every subscriber (their queued envelopes are released, not
 * counted as drops), the ring and a parked fanout. NULL does nothing. */
void fx_stream_free(fx_stream *s);

/* ---- ring ------------------------------------------------------------------ */

/* Offset the next appended message gets (messages appended so far). */
uint64_t fx_stream_tail(const fx_stream *s);
/* Offset of the oldest retained message (== tail when the ring is empty). */
uint64_t fx_stream_oldest(const fx_stream *s);
/* Checkpoint 4g: the oldest offset the ring would keep after appending
 * |count| messages of |bytes| payload bytes (fx_stream_oldest() when the
 * append would trim nothing), under log_capacity and log_capacity_bytes as
 * fx_stream_publish() trims; at least the tail when the batch alone does
 * not fit. Not counted: the evictions for tenant_retained_bytes and
 * retained_bytes_limit, which protect the process's memory and evict
 * whatever a group holds (docs/groups.md, "Ring hold"). Pure; O(batches
 * trimmed + the messages of the one where the trim stops). */
uint64_t fx_stream_evict_end(const fx_stream *s, uint32_t count, uint64_t bytes);
/* Messages retained, and the bytes they charge (payload plus
 * FX_STREAM_MSG_OVERHEAD per message of every batch still held). */
size_t fx_stream_ring_messages(const fx_stream *s);
size_t fx_stream_ring_bytes(const fx_stream *s);
/* Retained payload at |offset| into |*out| (borrowed while the ring holds
 * it). Returns 0 or -ENOENT (not retained). */
int fx_stream_ring_get(const fx_stream *s, uint64_t offset, fx_wire_slice *out);
/* Up to |n| retained payloads from |offset| on, contiguous, into |out|
 * (borrowed while the ring holds them). Returns how many (0: |offset| is
 * not retained). O(log batches + n). */
uint32_t fx_stream_ring_read(const fx_stream *s, uint64_t offset, uint32_t n, fx_wire_slice *out);

/* ---- publish and fanout ---------------------------------------------------- */

/* What one fx_stream_publish()/fx_stream_resume() call did with the envelope. */
typedef struct fx_fanout_result {
    uint64_t base_offset;     /* offset of the batch's first message */
    uint32_t delivered;       /* subscriber queues that took the envelope */
    uint64_t delivered_items; /* messages in those envelopes */
    uint32_t dropped;         /* subscriber queues that shed it (drop_new) */
    uint64_t dropped_items;
} fx_fanout_result;

/* Appends |count| payloads (slices into |backing|, of which the stream takes
 * its own references; NULL for static bytes) as one batch at the tail, trims
 * the ring oldest-first to its bounds, and offers one envelope to every
 * subscriber queue. Returns 0 (fanout complete; |*res| says how it went),
 * -EAGAIN (a block subscriber's queue is full: the batch is appended and the
 * fanout parked; stop taking input until on_resume, then call
 * fx_stream_resume()), -EBUSY (called while parked: nothing done), -EINVAL
 * (|count| 0) or -ENOMEM (nothing appended). |now| is the loop's clock. */
int fx_stream_publish(fx_stream *s, fx_buf *backing, const fx_wire_slice *payloads, uint32_t count,
                      uint64_t now, fx_fanout_result *res);

/* As fx_stream_publish, at |offset| (a cluster mirror appends with the
 * owner's offsets, docs/cluster.md "Mirror"): |offset| equal to the tail
 * appends as fx_stream_publish; above it, the ring is emptied first (its
 * messages trimmed, as an eviction) and numbering restarts at |offset|, so
 * subscribers see the jump as a gap; |*pskipped| (may be NULL) gets the
 * offsets jumped over (0 when none). Below the tail: -ERANGE, nothing
 * done. Other returns as fx_stream_publish. */
int fx_stream_publish_at(fx_stream *s, uint64_t offset, fx_buf *backing,
                         const fx_wire_slice *payloads, uint32_t count, uint64_t now,
                         fx_fanout_result *res, uint64_t *pskipped);

/* Continues a parked fanout where it stopped: subscribers that already took
 * (or shed) the envelope are not offered it again, subscribers registered
 * since get it through their backlog instead. Returns 0 (done, or nothing
 * was parked) or -EAGAIN (parked again, or on_resume has not been called
 * yet: still parked, nothing done). */
int fx_stream_resume(fx_stream *s, uint64_t now, fx_fanout_result *res);

/* True while a fanout is parked. */
bool fx_stream_is_parked(const fx_stream *s);
/* The subscriber whose full block queue the parked fanout waits on, or NULL
 * (not parked, or already woken). */
fx_subscriber *fx_stream_parked_on(const fx_stream *s);
/* Counts the fanout's parks (each time it finds a block queue full), so a
 * caller can tell a new park from the one it saw. */
uint64_t fx_stream_park_seq(const fx_stream *s);

/* ---- subscribers ------------------------------------------------------------ */

typedef enum fx_start_kind {
    FX_START_LATEST = 0, /* only what is published from now on */
    FX_START_EARLIEST,   /* the oldest retained message on */
    FX_START_OFFSET,     /* the first unseen offset (checkpoint + 1) */
} fx_start_kind;

typedef struct fx_start {
    fx_start_kind kind;
    uint64_t offset; /* FX_START_OFFSET only */
} fx_start;

typedef struct fx_subscribe_opts {
    uint64_t subscription_id;
    fx_subscriber_wake_cb on_wake; /* may be NULL */
    void *user;
} fx_subscribe_opts;

/* The retained messages a new subscriber gets before its live queue, as
 * envelope references with a skip (the start may fall inside a batch). */
typedef struct fx_backlog {
    size_t n;
    fx_env_item *items;
} fx_backlog;

/* Releases the references in |b| and its array. */
void fx_backlog_free(fx_backlog *b);

/* Registers a subscriber from |start| and, in the same step, snapshots the
 * backlog [start, tail) into |*backlog|: everything appended later reaches
 * the subscriber queue, so backlog then live has no gap and no duplicate.
 * Stores the subscriber (owned by the stream) in |*psub|. Returns 0,
 * FX_ECURSOR_IN_FUTURE (offset > tail; |*pavailable| = tail),
 * FX_ECURSOR_TOO_OLD (offset < oldest retained; |*pavailable| = oldest) or
 * -ENOMEM. */
int fx_stream_subscribe(fx_stream *s, const fx_start *start, const fx_subscribe_opts *o,
                        fx_subscriber **psub, fx_backlog *backlog, uint64_t *pavailable);

/* Removes |sub| and frees it with its queued envelopes (not counted as
 * drops). If the fanout was parked on it, the fanout is resumed (on_resume). */
void fx_stream_unsubscribe(fx_stream *s, fx_subscriber *sub);

size_t fx_stream_subscriber_count(const fx_stream *s);

/* Takes the oldest queued envelope of |sub| into |*pe| (the caller now owns
 * that reference) and records |now| as its last delivery. Returns 0 or
 * -EAGAIN (empty). May resume a parked fanout (on_resume). */
int fx_subscriber_pop(fx_subscriber *sub, uint64_t now, fx_envelope **pe);

/* An fx_coalesce_pull_cb over a subscriber queue: |user| points to this. */
typedef struct fx_subscriber_puller {
    fx_subscriber *sub;
    uint64_t now;
} fx_subscriber_puller;
bool fx_subscriber_pull(void *user, fx_env_item *out);

/* Per-subscription state for an operator (/v1/subscriptions). */
typedef struct fx_subscriber_stats {
    uint64_t subscription_id;
    size_t depth;              /* envelopes queued */
    uint64_t queued_items;     /* messages in the envelopes queued now */
    size_t capacity;           /* envelopes */
    uint64_t enqueued;         /* envelopes taken by the queue */
    uint64_t enqueued_items;   /* messages in them */
    uint64_t dropped;          /* envelopes shed (drop_new refusals, drop_old evictions) */
    uint64_t dropped_items;    /* messages in them */
    uint64_t dequeued;         /* envelopes taken by the feeder */
    uint64_t last_enqueue_ns;  /* 0 = never */
    uint64_t last_delivery_ns; /* last pop by the feeder; 0 = never */
} fx_subscriber_stats;

void fx_subscriber_get_stats(const fx_subscriber *sub, fx_subscriber_stats *st);
uint64_t fx_subscriber_id(const fx_subscriber *sub);
/* The |user| of its fx_subscribe_opts. */
void *fx_subscriber_user(const fx_subscriber *sub);

#endif
