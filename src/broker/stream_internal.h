/* Private to stream.c (the ring) and fanout.c (checkpoint 5): the structs of
 * a stream and its subscribers, and the fanout functions the ring's append,
 * subscribe and free call. Loop thread only (the stream's worker). */
#ifndef FX_BROKER_STREAM_INTERNAL_H
#define FX_BROKER_STREAM_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>

#include "base/queue.h"
#include "broker/stream.h"

typedef struct ring_ent {
    fx_envelope *env;
    uint32_t skip; /* messages trimmed from its front */
} ring_ent;

struct fx_subscriber {
    fx_stream *stream;
    uint64_t id;
    uint64_t next; /* first offset the fanout still owes it */
    fx_queue q;
    bool closing; /* deinit: on_drop releases without counting */
    fx_subscriber_wake_cb on_wake;
    void *user;
    fx_subscriber_stats st;
};

struct fx_stream {
    fx_stream_opts o;
    ring_ent *ring; /* circular */
    size_t ring_cap, ring_head, ring_n;
    size_t msgs, bytes;
    int64_t unposted; /* bytes charged, not yet added to the accounts (stream.c) */
    uint64_t tail;
    fx_subscriber **subs;
    size_t nsubs, subs_cap;
    fx_envelope *pending;     /* envelope of a parked fanout */
    fx_subscriber *parked_on; /* whose queue the fanout waits for */
    uint64_t park_seq;        /* parks so far (fx_stream_park_seq) */
    fx_queue_waiter waiter;
    atomic_bool woken; /* the parked-on queue resumed us (may be set off-loop) */
};

/* Offers the pending envelope |s->pending| to every subscriber still owed
 * it. Returns 0 (done: the envelope is released) or -EAGAIN (parked on a
 * full block queue). */
int fx_fanout_run(fx_stream *s, uint64_t now, fx_fanout_result *res);
/* A new subscriber of |s| starting at the tail, with its queue. Returns 0,
 * -EINVAL or -ENOMEM. */
int fx_fanout_sub_new(fx_stream *s, const fx_subscribe_opts *o, fx_subscriber **psub);
/* Frees |sub| and its queued envelopes (not counted as drops). */
void fx_fanout_sub_free(fx_subscriber *sub);
/* Adds |sub| to |s|'s subscriber set. Returns 0 or -ENOMEM. */
int fx_fanout_subs_add(fx_stream *s, fx_subscriber *sub);
/* Cancels the park on |sub|'s queue, if there is one. True if this call
 * cancelled it (so no resume will come from that queue). */
bool fx_fanout_unpark(fx_stream *s, fx_subscriber *sub);

#endif
