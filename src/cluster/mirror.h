/* fx_mirrors: local mirrors of streams other nodes own, for subscribers
 * that cannot follow a redirect (docs/cluster.md "Mirror"). A mirror is one
 * upstream libfelix subscription to the owner per stream, feeding a local
 * in-memory stream (the broker's, marked as a mirror) with the owner's
 * offsets; local subscribers attach to that stream as to any other, with
 * their own queues and policies.
 *
 * Threads: each mirror runs one mirror thread, made by fx_mirror_attach,
 * which owns the mirror's libfelix client and subscription: it takes the
 * upstream events in order and hands them, batched, to the stream's worker
 * through ops.append (the worker appends and fans out). The mirror thread
 * stops taking events while max_inflight_bytes are handed over and not yet
 * appended: under the lossless profile it waits (its client's queue fills,
 * so QUIC flow control stops the owner), otherwise it sheds the batch
 * (counted; the local subscribers see the jump as a gap). fx_mirror_attach
 * and the stats are any thread; the ops run on the mirror thread (append,
 * in_use, route, stopped) or on the worker (the append's completion).
 *
 * Life: a mirror starts with its first local subscriber and stops
 * linger_ms after the last one left (ops.in_use false all that time), when
 * its local stream is gone, when this node owns the stream (ops.route says
 * so), or with fx_mirrors_free; it then hands its stream to ops.stopped. An
 * upstream subscription that ends is made again (routed anew) from the
 * next offset, counted as an upstream restart. Bounds: at most max_mirrors
 * mirrors (fx_mirror_attach answers FX_EFULL past it). */
#ifndef FX_CLUSTER_MIRROR_H
#define FX_CLUSTER_MIRROR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/forward.h"

typedef struct fx_mirrors fx_mirrors;

/* The completion of an append: |rv| 0 (appended and fanned out; |skipped|
 * offsets were jumped over before it, a gap) or the error (FX_ENOSTREAM:
 * the local stream is gone). Once per accepted append, any thread. */
typedef void (*fx_mirror_done_cb)(void *done_user, int rv, uint64_t skipped);

typedef struct fx_mirror_ops {
    /* Appends the |n| payloads |msgs| (copied) at the owner's |offset| to
     * the local stream |stream| (the reference given to fx_mirror_attach).
     * Returns 0 (|done| runs once later), FX_EFULL (the worker's queue is
     * full: try again later), FX_ENOSTREAM (the stream is gone) or -ENOMEM. */
    int (*append)(void *user, void *stream, uint64_t offset, const fx_forward_iov *msgs, size_t n,
                  fx_mirror_done_cb done, void *done_user);
    /* 1: local subscribers use |stream|; 0: nobody does; -1: the stream
     * was removed. |appends| of the mirror's are in flight (each holds the
     * stream too). */
    int (*in_use)(void *user, void *stream, size_t appends);
    /* The owner of the stream now: 0 with its "host:port" in |addr|; 1: this
     * node owns it (the mirror stops); negative: nobody can be named now
     * (|addr| holds why). May claim the stream for this node. */
    int (*route)(void *user, const char *tenant, const char *ns, const char *stream, char *addr,
                 size_t cap);
    /* The mirror stopped: the local stream |stream| is removed (its
     * subscribers' event streams end) and the reference dropped. |why| is a
     * sentence for the log. */
    void (*stopped)(void *user, void *stream, const char *why);
    void *user;
} fx_mirror_ops;

typedef struct fx_mirror_opts {
    /* How the owners' certificates are verified (as fx_forward_opts). */
    const char *pin_sha256;
    const char *ca_file;
    const char *server_name;
    fx_mirror_ops ops;
    bool lossless;             /* subscriber_queue_policy block: wait, never shed */
    uint32_t linger_ms;        /* 0: 10,000 */
    size_t max_mirrors;        /* 0: 256 */
    size_t max_inflight_bytes; /* per mirror (checkpoint 4m); 0: 4 MiB */
    uint32_t batch_messages;   /* per append, at most; 0: 256 */
    int connect_timeout_ms;    /* 0: 2,000 */
} fx_mirror_opts;

/* Makes the mirror set (no thread yet). Returns 0, FX_ECONFIG or -ENOMEM. */
int fx_mirrors_new(fx_mirrors **pm, const fx_mirror_opts *o);
/* Stops every mirror (ops.stopped runs for each), joins their threads and
 * frees. NULL ok. Not from a mirror thread. */
void fx_mirrors_free(fx_mirrors *m);

typedef enum fx_mirror_start {
    FX_MIRROR_START_LATEST = 0,
    FX_MIRROR_START_EARLIEST,
    FX_MIRROR_START_OFFSET,
} fx_mirror_start;

/* Serves |tenant|/|ns|/|stream| from a mirror: the running one, or a new
 * one subscribing upstream to the owner at |addr| as |tenant| with |token|
 * from |start| (|offset|). |stream_ref| is the local stream (a reference
 * the mirror takes over when it is new: *pnew true; else the caller keeps
 * it). Returns 0, FX_EFULL (max_mirrors), -errno (no thread) or -ENOMEM.
 * Any thread; never waits for the network. */
int fx_mirror_attach(fx_mirrors *m, const char *tenant, const char *ns, const char *stream,
                     const char *addr, const char *token, fx_mirror_start start, uint64_t offset,
                     void *stream_ref, bool *pnew);

/* Stops the mirror of |tenant|/|ns|/|stream| if there is one (this node
 * claimed the stream): it hands its stream to ops.stopped with |why| from
 * its thread soon after. Returns whether there was one. Any thread. */
bool fx_mirror_stop(fx_mirrors *m, const char *tenant, const char *ns, const char *stream,
                    const char *why);

/* Runs |cb(arg)| on the mirror thread of |tenant|/|ns|/|stream| once it has
 * subscribed upstream (or stops), so a first local subscriber starting at
 * the latest message registers only when nothing published since can be
 * missed. Returns true when |cb| will run (exactly once), false when it
 * will not (the mirror is up already, there is none, or no memory): the
 * caller goes on itself. Any thread. */
bool fx_mirror_when_up(fx_mirrors *m, const char *tenant, const char *ns, const char *stream,
                       void (*cb)(void *arg), void *arg);

typedef struct fx_mirror_stats {
    uint64_t mirrors;          /* running now */
    uint64_t started;          /* mirrors made */
    uint64_t messages;         /* taken from upstream and appended */
    uint64_t gaps;             /* jumps of the owner's offsets seen */
    uint64_t missed;           /* offsets across those jumps */
    uint64_t dropped;          /* messages shed (not lossless): the bound, the upstream queue */
    uint64_t upstream_restarts;
    uint64_t refused;          /* attaches refused by max_mirrors */
} fx_mirror_stats;

/* Any thread. */
void fx_mirrors_get_stats(fx_mirrors *m, fx_mirror_stats *st);

/* The mirrors as a JSON array (GET /v1/cluster "mirrors"): per mirror its
 * stream, owner address, next offset, queued messages and counters. A
 * malloc'd string, or NULL for out of memory. Any thread. */
char *fx_mirrors_json(fx_mirrors *m);

#endif
