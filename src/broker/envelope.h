/* fx_envelope: one appended publish batch, immutable and atomically
 * refcounted: stream handle id, base offset and the payloads (slices into one
 * refcounted backing buffer). Its shared wire frame (0x0004 | 0x0020) is
 * encoded by the first feeder that needs it and cached, so fanout costs one
 * encode whatever the number of subscribers. Also the feeder's coalescer,
 * which chains cached frames into one vectored write. Envelopes: any thread;
 * a coalescer belongs to one feeder (its stream's worker loop). */
#ifndef FX_BROKER_ENVELOPE_H
#define FX_BROKER_ENVELOPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "base/buf.h"
#include "wire/wire.h"

typedef struct fx_envelope fx_envelope;

/* Creates an envelope of |count| payloads in |*pe| with one reference.
 * |payloads| (copied as slices, not bytes) must point into |backing|, of which
 * the envelope takes its own reference (NULL when the bytes are static, as in
 * tests). Returns 0, -EINVAL (|count| is 0) or -ENOMEM. Any thread. */
int fx_envelope_new(fx_envelope **pe, uint64_t handle_id, uint64_t base_offset, fx_buf *backing,
                    const fx_wire_slice *payloads, uint32_t count);

/* Adds a reference and returns |e| (NULL gives NULL). Any thread. */
fx_envelope *fx_envelope_ref(fx_envelope *e);
/* Drops a reference; the last releases the backing buffer and the cached
 * frame. NULL does nothing. Any thread. */
void fx_envelope_unref(fx_envelope *e);

uint64_t fx_envelope_handle_id(const fx_envelope *e);
/* Offset of payload 0; payload i has offset base + i. */
uint64_t fx_envelope_base_offset(const fx_envelope *e);
uint32_t fx_envelope_count(const fx_envelope *e);
/* Offset one past the last payload (base + count). */
uint64_t fx_envelope_end_offset(const fx_envelope *e);
/* Sum of the payload lengths. */
size_t fx_envelope_payload_bytes(const fx_envelope *e);
/* Payload |i| (< count), borrowed from the envelope. */
fx_wire_slice fx_envelope_payload(const fx_envelope *e, uint32_t i);

/* Size of the shared frame, header included, without encoding it. */
size_t fx_envelope_shared_frame_size(const fx_envelope *e);

/* Returns the shared event frame (flags 0x0024, base_offset, every payload)
 * in |*pframe| as a new reference (the caller unrefs). The first call
 * encodes and caches it and counts felix_sub_shared_frame_encodes_total;
 * later calls return the same buffer. Returns 0, FX_EWIRE_TOO_LARGE or
 * -ENOMEM. Any thread (racing first calls may both encode; one result is
 * kept and both are counted). */
int fx_envelope_shared_frame(fx_envelope *e, fx_buf **pframe);

/* True once the shared frame has been encoded. Any thread. */
bool fx_envelope_has_shared_frame(const fx_envelope *e);

/* Size of a per-subscriber frame holding payloads [from, from + n). */
size_t fx_envelope_sub_frame_size(const fx_envelope *e, uint32_t from, uint32_t n);

/* Encodes a per-subscriber event frame (flags 0x0022: |subscription_id|,
 * base_offset = base + |from|, payloads [from, from + n)) into a new buffer
 * in |*pframe| (caller unrefs); counts felix_sub_frame_encodes_total. Used
 * when a replay starts inside a batch or a batch exceeds the write limits.
 * Returns 0, -EINVAL (range outside the envelope or empty), FX_EWIRE_TOO_LARGE
 * or -ENOMEM. Any thread. */
int fx_envelope_sub_frame(fx_envelope *e, uint64_t subscription_id, uint32_t from, uint32_t n,
                          fx_buf **pframe);

/* ---- coalescing for a feeder ---------------------------------------------- */

/* One queued delivery: |env| (a reference, owned by whoever holds the item)
 * and |skip|, the payloads at its front the subscriber must not get (a
 * replay that starts inside the batch). */
typedef struct fx_env_item {
    fx_envelope *env;
    uint32_t skip;
} fx_env_item;

/* Gives the coalescer the next delivery: returns true and fills |*out|,
 * passing ownership of the reference, or false when there is none now. */
typedef bool (*fx_coalesce_pull_cb)(void *user, fx_env_item *out);

/* Most frames one fx_frame_list holds (each carries at least one event). */
#define FX_COALESCE_MAX_FRAMES 64

/* Frames for one vectored write. Each |frames[i]| is a reference owned by the
 * list, and |iov[i]| points at its bytes. */
typedef struct fx_frame_list {
    size_t n;
    size_t bytes;          /* total frame bytes */
    uint32_t events;       /* total payloads */
    uint64_t first_offset; /* offset of the first payload */
    uint64_t end_offset;   /* offset one past the last payload */
    fx_buf *frames[FX_COALESCE_MAX_FRAMES];
    struct iovec iov[FX_COALESCE_MAX_FRAMES];
} fx_frame_list;

typedef struct fx_coalesce_opts {
    uint64_t subscription_id; /* for per-subscriber (0x0002) frames */
    uint32_t max_events;      /* payloads per list, >= 1 */
    size_t max_bytes;         /* frame bytes per list; one payload always goes */
} fx_coalesce_opts;

/* A feeder's coalescing state: the delivery that did not fit in the last list
 * (it starts the next one). Zero-initialize (or fx_coalescer_init). */
typedef struct fx_coalescer {
    fx_env_item carry;
    bool has_carry;
} fx_coalescer;

void fx_coalescer_init(fx_coalescer *c);
/* Drops the carried delivery, if any. */
void fx_coalescer_deinit(fx_coalescer *c);
/* True if a delivery is carried over to the next list. */
bool fx_coalescer_has_pending(const fx_coalescer *c);

/* Builds the next write into |out| (emptied first): pulls deliveries from
 * |pull| while they continue the offsets of the list and fit |o|'s limits. A
 * whole envelope (skip 0) that fits contributes its cached shared frame (a
 * reference, never a re-encode); one that starts mid-batch, or alone exceeds
 * the limits, contributes a per-subscriber frame for as many payloads as fit.
 * A delivery that does not continue the offsets or does not fit is carried
 * to the next call, so a list never spans a gap. Returns 0 (|out|->n may be
 * 0: nothing to send), or an encoding error (FX_EWIRE_TOO_LARGE, -ENOMEM);
 * frames already in |out| stay valid, the failed delivery stays carried.
 * Loop thread of the feeder. */
int fx_coalesce_next(fx_coalescer *c, fx_coalesce_pull_cb pull, void *user,
                     const fx_coalesce_opts *o, fx_frame_list *out);

/* Drops the list's frame references and empties it. */
void fx_frame_list_clear(fx_frame_list *l);

#endif
