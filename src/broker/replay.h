/* Replay of a durable stream's history from disk for a subscription that
 * starts below its ring (earliest, or an older offset). The subscription is
 * registered at the ring's tail T first, then the closed range [from, T) is
 * read from the log's segment files in bounded pages on the worker's replay
 * thread (its own I/O queue: reads never wait behind appends or flushes),
 * each page handed to the feeder before the next is read; once the range is
 * delivered the feeder goes on with the live queue, so there is no gap and
 * no duplicate. Memory per catching-up subscription is one page. Worker
 * side: the subscription's worker loop; reader side: the replay thread. */
#ifndef FX_BROKER_REPLAY_H
#define FX_BROKER_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

#include "broker/broker_internal.h"
#include "storage/sio.h"

typedef struct fxb_replay fxb_replay;

/* Payload bytes of one page (the original's 1 MiB history page). */
#define FXB_REPLAY_PAGE_BYTES (1u << 20)

/* A reader for the log in directory |dir| through |io|, whose oldest offset
 * is |first| now, to be run on |rloop|, with pages of at most
 * |max_records| (durable_max_records_per_read, > 0) records. NULL on
 * -ENOMEM. Storage thread. */
fxb_replay *fxb_replay_new(const char *dir, fx_sio *io, uint64_t first, fx_loop *rloop,
                           uint32_t max_records);

/* Decides, before |sub| registers with its stream |st|, whether it starts
 * below the ring: then its start becomes the tail (the replay covers the
 * rest), or it is refused as too old (|sub->reg_rv| FX_ECURSOR_TOO_OLD,
 * |sub->available| the log's first offset; returns false). Otherwise the
 * reader is dropped. Returns true to register. Worker. */
bool fxb_replay_prepare(fxb_sub *sub, fx_stream *st);

/* After a successful registration at the tail (fxb_replay_prepare): fixes
 * the range's end at the tail, where the subscription's first live message
 * is (it has no backlog there). Worker. */
void fxb_replay_begin(fxb_sub *sub, fx_stream *st);

/* For the feeder, once the backlog array is empty: true while the replay
 * holds the live queue back (a page is being read, or the replay failed: then
 * nothing more is delivered and the event stream ends). When it returns
 * false the range is delivered and the live queue follows. Worker. */
bool fxb_replay_holds(fxb_sub *sub);

/* True while history is still to be delivered (the event stream must not
 * end yet). Worker. */
bool fxb_replay_pending(const fxb_sub *sub);

/* The subscription is unregistered: frees the replay (or leaves that to the
 * page being read). Worker. */
void fxb_replay_drop(fxb_sub *sub);

#endif
