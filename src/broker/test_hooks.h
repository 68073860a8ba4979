/* Test hooks of the broker: failure injection and placement probes that
 * only tests call (never the daemon). Kept apart so the data plane carries
 * no test code: the probes ask the owning loops through posted tasks and
 * read state those loops keep anyway. Main thread (or a test's thread),
 * never from a broker loop. */
#ifndef FX_BROKER_TEST_HOOKS_H
#define FX_BROKER_TEST_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/placement.h"
#include "broker/broker.h"

/* TEST HOOK. Closes connections from the broker's side, as a network cut
 * seen by the client: every open connection, or with |only_subscribers|
 * only those with at least one live subscription. Each is closed with
 * application code 0x7e57 and reason "test hook: connection cut"; their
 * subscriptions are removed as for any closed connection. Waits until the
 * endpoint loop has done it. Returns how many were closed (>= 0), or
 * -ENOMEM, or -EINVAL (broker not started). */
int fx_broker_test_cut_connections(fx_broker *b, bool only_subscribers);

/* TEST HOOK. Makes worker loop |index| sleep |ms| milliseconds (a slow
 * worker: publishes and subscribes for its streams wait). Returns once the
 * worker has started sleeping, so whatever the caller sends it next waits
 * for the end of the stall; 0, -EINVAL (no such worker, broker not started)
 * or -ENOMEM. */
int fx_broker_test_stall_worker(fx_broker *b, uint32_t index, unsigned ms);

/* TEST HOOK. With |hold| true, makes the storage thread of worker |index|
 * wait (a posted task blocks it) until called again with |hold| false:
 * jobs sent to it stay there meanwhile. One hold at a time in the process.
 * Returns 0, -EINVAL (no such worker, no durable storage, broker not
 * started) or -ENOMEM. Release before stopping the broker. */
int fx_broker_test_hold_storage(fx_broker *b, uint32_t index, bool hold);

/* TEST HOOK. With |hold| true, the start-up recovery of the catalogued
 * durable stream named |stream| (any tenant and namespace), in every broker
 * of the process, waits before opening its log until called again with
 * |hold| false; its storage thread waits with it (the other storage threads
 * go on). Set it before fx_broker_start; release before freeing the broker.
 * Any thread. */
void fx_broker_test_hold_recovery(const char *stream, bool hold);

/* TEST HOOK. True while a recovery waits in fx_broker_test_hold_recovery.
 * Any thread. */
bool fx_broker_test_recovery_is_held(void);
/* TEST HOOK. Deletions of durable streams' files, in every broker of the
 * process: after a deleted stream's catalogue entry is marked deleting and
 * its log closed, and before its directory is removed, the storage thread
 * waits while |hold| is true (until this is called again with |hold|
 * false), then fails the next |nfail| removals with |fail_rv| (a negative
 * errno), as a file system refusing them would. (false, 0, 0) clears it.
 * Any thread. */
void fx_broker_test_deletions(bool hold, int fail_rv, unsigned nfail);

/* TEST HOOK. Waits up to |timeout_ms| for a deletion to be held by
 * fx_broker_test_deletions; true once one is. Any thread. */
bool fx_broker_test_deletion_held(unsigned timeout_ms);

/* The broker timers whose arming fx_broker_test_fail_timer_arms can fail. */
typedef enum fx_broker_test_timer {
    FX_BROKER_TEST_TIMER_COMMIT = 0,   /* a stream's commit-ack deadline (reply.c) */
    FX_BROKER_TEST_TIMER_INGRESS_WAIT, /* a parked publish's Wait deadline (fxb_parked_expired) */
    FX_BROKER_TEST_TIMER_DURABLE,      /* a durable log's flush/retention timer */
} fx_broker_test_timer;

/* TEST HOOK. Makes the next |n| arms of |which| timer (not yet armed), in
 * every broker of the process, fail as out of memory
 * (fx_loop_test_fail_timer_arms); |n| 0 clears it. One kind at a time: a
 * call replaces the previous one. Returns 0 or -EINVAL (no such kind). Any
 * thread. */
int fx_broker_test_fail_timer_arms(fx_broker_test_timer which, unsigned n);

/* Where one stream's state lives (fx_broker_test_stream_placement). */
typedef struct fx_broker_test_stream_where {
    uint64_t handle_id;
    /* The worker whose loop holds the stream's registered subscriptions
     * (their feeders run there) and the ring they are attached to; -1 when
     * no worker has a subscription of it, -2 when they are split over
     * several workers (a placement bug). */
    int owner_worker;
    uint32_t subs;     /* registered subscriptions found */
    uint32_t subs_fed; /* of those, how many had their feeder take an envelope */
    uint64_t appended; /* messages appended to that ring (its tail offset) */
    bool in_slot;      /* that ring is the one the worker's table holds for the id */
} fx_broker_test_stream_where;

/* TEST HOOK. Asks every worker loop (a posted task each, waited for) which
 * of them holds the subscriptions of |tenant|/|ns|/|stream| and fills |*out|.
 * Creates nothing. Returns 0; FX_ENOSTREAM (no such active stream); -EINVAL
 * (broker not started or stopped); -ENOMEM. */
int fx_broker_test_stream_placement(fx_broker *b, const char *tenant, const char *ns,
                                    const char *stream, fx_broker_test_stream_where *out);

/* What one worker loop's own thread has done so far, read on that thread
 * from its metrics cell (per-thread counters: each is bumped by the thread
 * that did the work, so a difference over a scenario says which loop ran
 * it). Values are cumulative over the thread's cell, which a later thread
 * may reuse: compare differences, never absolute values. */
typedef struct fx_broker_test_worker_activity {
    uint64_t publish_ok; /* publish jobs appended and fanned out here */
    uint64_t enqueued;   /* envelopes this loop's fanouts put in subscriber queues */
    uint64_t dequeued;   /* envelopes this loop's feeders took from subscriber queues */
    int pin_error;       /* fx_loop_pin_error of the loop: 0 pinned as asked (or not asked) */
} fx_broker_test_worker_activity;

/* TEST HOOK. Fills |*out| for worker |index| by a task on its loop (waited
 * for). Returns 0, -EINVAL (no such worker, broker not started or stopped)
 * or -ENOMEM. */
int fx_broker_test_worker_activity_get(fx_broker *b, uint32_t index,
                                       fx_broker_test_worker_activity *out);

/* The per-stream tables of one worker and its storage thread: entries
 * held and slots allocated. Each holds the live streams it has state for
 * and is sized to them, not to the handle ids that create/delete churn used
 * up. */
typedef struct fx_broker_test_stream_tables {
    size_t streams, streams_cap; /* the worker's fx_streams */
    size_t durable, durable_cap; /* its durable streams' storage-stage state */
    size_t logs, logs_cap;       /* its storage thread's open logs (0: no durable storage) */
} fx_broker_test_stream_tables;

/* TEST HOOK. Fills |*out| for worker |index|, each table read by a task on
 * the loop that owns it (waited for). Returns 0, -EINVAL (no such worker,
 * broker not started or stopped) or -ENOMEM. */
int fx_broker_test_stream_tables_get(fx_broker *b, uint32_t index,
                                     fx_broker_test_stream_tables *out);

/* One open connection and the loop it lives on. */
typedef struct fx_broker_test_conn_where {
    uint64_t conn_id;  /* 1, 2, ... in accept order */
    fx_loop_slot loop; /* the loop its QUIC connection runs on */
} fx_broker_test_conn_where;

/* TEST HOOK. Lists the open connections (by a task on the endpoint loop,
 * waited for) in |out| (room for |cap|), ordered by connection id, with the
 * loop each one's QUIC connection runs on (fx_quic_conn_loop) as a worker
 * or io loop index. Returns how many are open (may exceed |cap|: only the
 * first |cap| are written), -EINVAL (broker not started or stopped),
 * FX_EINTERNAL if a connection runs on a loop the broker does not own, or
 * -ENOMEM. */
int fx_broker_test_conn_loops(fx_broker *b, fx_broker_test_conn_where *out, size_t cap);

/* TEST HOOK. Runs the per-stream /metrics collection of |b|'s durable
 * storage (felix_storage_stream_*) with an emit that asks, from another
 * thread, whether the catalogue lock is free while each row is emitted.
 * |*prows| receives the rows emitted, |*pheld| how many of them were
 * emitted with the lock held. Returns 0, -EINVAL (no durable storage) or
 * -errno (a thread could not be started). */
int fx_broker_test_collect_storage_rows(fx_broker *b, size_t *prows, size_t *pheld);

/* TEST HOOK. Makes |b| answer subscribes to |stream| ("tenant/ns/stream")
 * as a cluster broker that does not own it would (docs/protocol.md
 * "Redirects"): not_leader{|node_id|, |addr| (NULL: absent), |generation|}
 * to a client that offered FEATURE_REDIRECT, else error "stream T/NS/S is
 * served by NODE" (code not_leader, retry redirect to FEATURE_ERROR_CODES
 * clients); then the subscribe stream ends. A later call for the same
 * broker and stream replaces the entry; |node_id| NULL removes it. Entries
 * live until removed (remove them before freeing |b|). Returns 0, -EINVAL
 * or -ENOMEM. Any thread (the strings are copied). */
int fx_broker_test_redirect_subscribe(fx_broker *b, const char *stream, const char *node_id,
                                      const char *addr, uint64_t generation);

#endif
