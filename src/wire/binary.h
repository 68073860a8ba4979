/* Binary frame bodies of Felix wire v1: publish batch (0x0001), acked publish
 * batch (0x0009), publish ack (0x0010) and event batches (0x0002 per
 * subscriber, 0x0004 shared, each optionally with 0x0020 offsets).
 * Decoders check every length against the bytes that remain before using it
 * and reference the input (no copies); encoders write whole frames, header
 * included. The publish batch builder owns the batch layout for code that
 * builds or merges frames entry by entry. Pure functions; any thread. */
#ifndef FX_WIRE_BINARY_H
#define FX_WIRE_BINARY_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "wire/frame.h"
#include "wire/wire.h"

/* Decoded batches keep up to this many payload slices inline; bigger batches
 * get a heap array, allocated only after count <= remaining/4 was checked. */
#define FX_WIRE_INLINE_PAYLOADS 8

/* Most messages one publish batch frame may carry: the decoder refuses a
 * larger count (FX_EWIRE_COUNT) before reading any payload, and the encoder
 * will not write one. */
#define FX_WIRE_BATCH_MAX_MESSAGES 65536u

/* Longest publish-ack message the encoder writes (longer text is cut at a
 * UTF-8 character boundary), as the original's stream writer does. */
#define FX_WIRE_ACK_MSG_MAX 512u

/* A publish batch, 0x0001 or (|ack| != NONE) 0x0009.
 * Decoded: every slice points into the decoded body; |payloads| points to
 * |inline_payloads| or a heap array: release with fx_wire_publish_batch_deinit().
 * To encode: fill the names, |payloads|/|count|, and for 0x0009 |request_id|
 * and |ack| (PER_MESSAGE or PER_BATCH). */
typedef struct fx_wire_publish_batch {
    uint64_t request_id;
    fx_wire_ack ack; /* NONE for 0x0001 */
    /* 0x0109, an idempotent producer's batch (ack PER_BATCH): the 25-byte
     * prefix u64 request_id, u8 ack mode 2, u64 producer_id, u64 sequence. */
    bool idempotent;
    uint64_t producer_id;
    uint64_t sequence;
    fx_wire_slice tenant;
    fx_wire_slice ns;
    fx_wire_slice stream;
    uint32_t count;
    fx_wire_slice *payloads;
    fx_wire_slice inline_payloads[FX_WIRE_INLINE_PAYLOADS];
} fx_wire_publish_batch;

/* An event batch: per subscriber (0x0002, |shared| false, carries
 * |subscription_id|) or shared (0x0004). |has_offsets| adds 0x0020 and
 * |base_offset|; payload i has offset base_offset + i. Storage as for
 * fx_wire_publish_batch; release a decoded one with fx_wire_event_batch_deinit(). */
typedef struct fx_wire_event_batch {
    bool shared;
    bool has_offsets;
    uint64_t subscription_id;
    uint64_t base_offset;
    uint32_t count;
    fx_wire_slice *payloads;
    fx_wire_slice inline_payloads[FX_WIRE_INLINE_PAYLOADS];
} fx_wire_event_batch;

/* A publish ack (0x0010), the broker's reply to 0x0009. |message| is empty
 * for ok; decoded, it points into the body. */
typedef struct fx_wire_publish_ack {
    bool ok;
    uint64_t request_id;
    fx_wire_slice message;
} fx_wire_publish_ack;

/* ---- publish batch ----------------------------------------------------------- */

/* Reads the 9-byte prefix of an acked batch body (u64 request_id, u8 ack mode)
 * from |body| of |len| bytes: the broker checks it before the rest (a bad
 * prefix is a stream error, a bad batch an error ack). Returns 0,
 * FX_EWIRE_TRUNCATED or FX_EWIRE_ACK_MODE (mode not 1 or 2). */
int fx_wire_publish_acked_prefix_decode(const uint8_t *body, size_t len, uint64_t *prequest_id,
                                        fx_wire_ack *pack, fx_wire_err *err);

/* Reads the 25-byte prefix of an idempotent batch body (0x0109): the acked
 * prefix (ack mode must be 2, else FX_EWIRE_ACK_MODE), u64 producer_id, u64
 * sequence. Returns 0, FX_EWIRE_TRUNCATED or FX_EWIRE_ACK_MODE. */
#define FX_WIRE_IDEMPOTENT_PREFIX_LEN 25u
int fx_wire_publish_idem_prefix_decode(const uint8_t *body, size_t len, uint64_t *prequest_id,
                                       uint64_t *pproducer_id, uint64_t *psequence,
                                       fx_wire_err *err);

/* Decodes the body of a frame with |flags| 0x0001, 0x0009 or 0x0109 into |b|, whose
 * slices then point into |body|. Returns 0 or: FX_EWIRE_KIND (other flags),
 * FX_EWIRE_TRUNCATED, FX_EWIRE_ACK_MODE, FX_EWIRE_UTF8 (a name),
 * FX_EWIRE_COUNT (count above FX_WIRE_BATCH_MAX_MESSAGES, or > remaining/4,
 * both checked before any allocation),
 * FX_EWIRE_TRAILING (bytes after the last payload), -ENOMEM. On error |b|
 * holds nothing to release; on success call fx_wire_publish_batch_deinit(). */
int fx_wire_publish_batch_decode(uint16_t flags, const uint8_t *body, size_t len,
                                 fx_wire_publish_batch *b, fx_wire_err *err);

/* The names section (tenant, namespace, stream: three u16-length-prefixed
 * names) of the last publish batch body fx_wire_publish_batch_decode_cached()
 * validated, byte for byte. The frames of one publish stream name the same
 * stream again and again: a body whose names section is these bytes is
 * valid where the first one was, so it is checked with one comparison
 * instead of a UTF-8 walk. Caller-embedded; zero-initialized means empty.
 * Used by one thread at a time. */
#define FX_WIRE_NAMES_CACHE_MAX 192u
typedef struct fx_wire_names_cache {
    uint16_t len;                /* bytes in |bytes|; 0: empty */
    uint16_t tenant_len, ns_len; /* the first two names' lengths */
    uint8_t bytes[FX_WIRE_NAMES_CACHE_MAX];
} fx_wire_names_cache;

/* As fx_wire_publish_batch_decode(), with the same results and errors for
 * every input, but a names section equal to the one in |cache| is not
 * validated again; a section that is validated here replaces the cached one
 * (or empties |cache| when longer than FX_WIRE_NAMES_CACHE_MAX). |*psame|
 * (may be NULL) is set to whether the body's names are the bytes |cache|
 * held before the call. */
int fx_wire_publish_batch_decode_cached(uint16_t flags, const uint8_t *body, size_t len,
                                        fx_wire_publish_batch *b, fx_wire_names_cache *cache,
                                        bool *psame, fx_wire_err *err);

/* Frees a heap payload array of a decoded |b| (not the bytes it points to). */
void fx_wire_publish_batch_deinit(fx_wire_publish_batch *b);

/* Frame flags |b| encodes to: 0x0109 when |b|->idempotent, 0x0009 when
 * |b|->ack is not NONE, else 0x0001. */
uint16_t fx_wire_publish_batch_flags(const fx_wire_publish_batch *b);

/* Size of |b|'s whole frame (header included), or FX_EWIRE_NAME (a name over
 * 65535 bytes), FX_EWIRE_ACK_MODE, FX_EWIRE_COUNT (more than
 * FX_WIRE_BATCH_MAX_MESSAGES payloads) or FX_EWIRE_TOO_LARGE (body over
 * UINT32_MAX). */
ssize_t fx_wire_publish_batch_frame_size(const fx_wire_publish_batch *b);

/* Writes |b| as a whole frame to |out| of |cap| bytes. Returns the bytes
 * written, the errors of fx_wire_publish_batch_frame_size(), FX_EWIRE_UTF8 (a name)
 * or -ENOSPC. */
ssize_t fx_wire_publish_batch_encode(const fx_wire_publish_batch *b, uint8_t *out, size_t cap);

/* ---- publish batch builder ------------------------------------------------------ */

/* Where the sections of a publish batch frame start, as the builder that
 * wrote it recorded them. Kept beside the frame (8 bytes), they let the
 * functions below compare two frames' streams and move one frame's payload
 * entries into another without parsing either. Read them only through
 * those functions. */
typedef struct fx_wire_batch_marks {
    uint32_t names;   /* the tenant name's length prefix */
    uint32_t entries; /* the first payload entry (the u32 count just before) */
} fx_wire_batch_marks;

/* Builds one publish batch frame in place, as ngtcp2's packet encoder does
 * (lib/ngtcp2_ppe.h): the builder keeps the offsets of the length field,
 * the count and the first entry, so its callers call begin, append, left
 * and finish and never write an offset. Caller-embedded, initialized by
 * fx_wire_batch_begin() or fx_wire_batch_begin_as(). Pure; any thread. */
typedef struct fx_wire_batch_builder {
    uint8_t *out;
    size_t cap; /* bytes the frame may take (|out| holds at least this many) */
    size_t len; /* bytes written */
    uint32_t count;
    uint16_t flags;
    fx_wire_batch_marks marks;
} fx_wire_batch_builder;

/* Size of the whole frame of a batch with |head|'s names, ack mode and
 * request id (its payloads are not read) carrying |count| payloads of
 * |payload_bytes| bytes together: what fx_wire_publish_batch_frame_size()
 * says for the same batch, with the same errors (FX_EWIRE_ACK_MODE,
 * FX_EWIRE_NAME, FX_EWIRE_COUNT, FX_EWIRE_TOO_LARGE). */
ssize_t fx_wire_batch_frame_size(const fx_wire_publish_batch *head, size_t count,
                                 size_t payload_bytes);

/* Starts a frame in |out| (at most |cap| bytes) with |head|'s names, ack
 * mode and request id (its payloads are not read) and no payload yet.
 * Returns 0, FX_EWIRE_ACK_MODE, FX_EWIRE_NAME, FX_EWIRE_UTF8 (a name) or
 * -ENOSPC (|cap| cannot hold the frame without payloads). */
int fx_wire_batch_begin(fx_wire_batch_builder *bb, uint8_t *out, size_t cap,
                        const fx_wire_publish_batch *head);

/* Starts a frame in |out| (at most |cap| bytes) that opens as |frame| does
 * (a frame a builder wrote, with its |marks|): same kind, request id, ack
 * mode and names, and no payload yet. For merging frames of one stream.
 * Returns 0 or -ENOSPC. */
int fx_wire_batch_begin_as(fx_wire_batch_builder *bb, uint8_t *out, size_t cap,
                           const uint8_t *frame, fx_wire_batch_marks marks);

/* Bytes that may still be appended before the frame reaches its bound
 * (the |cap| it was begun with). */
static inline size_t fx_wire_batch_left(const fx_wire_batch_builder *bb)
{
    return bb->cap - bb->len;
}

/* Bytes one payload of |len| bytes adds to a frame: its u32 length, then
 * the payload. */
static inline size_t fx_wire_batch_entry_size(size_t len)
{
    return 4 + len;
}

/* Appends one payload of |len| bytes (copied from |p|). Returns 0,
 * FX_EWIRE_COUNT (the frame holds FX_WIRE_BATCH_MAX_MESSAGES already) or
 * -ENOSPC (fewer than fx_wire_batch_entry_size(|len|) bytes left). */
static inline int fx_wire_batch_append(fx_wire_batch_builder *bb, const void *p, size_t len)
{
    if (bb->count >= FX_WIRE_BATCH_MAX_MESSAGES)
        return FX_EWIRE_COUNT;
    if (len > UINT32_MAX || fx_wire_batch_left(bb) < fx_wire_batch_entry_size(len))
        return -ENOSPC;
    uint8_t *q = fx_put32(bb->out + bb->len, (uint32_t)len);
    if (len)
        memcpy(q, p, len);
    bb->len += fx_wire_batch_entry_size(len);
    bb->count++;
    return 0;
}

/* Appends every payload entry of |frame| (|len| bytes, a frame a builder
 * wrote, with its |marks|), in order. Returns 0, FX_EWIRE_COUNT (the sum
 * of the counts would pass FX_WIRE_BATCH_MAX_MESSAGES) or -ENOSPC. */
int fx_wire_batch_append_frame(fx_wire_batch_builder *bb, const uint8_t *frame, size_t len,
                               fx_wire_batch_marks marks);

/* Ends the frame: writes its body length and payload count, and its marks
 * to |*pmarks| (may be NULL). Returns the frame's size or
 * FX_EWIRE_TOO_LARGE (body over UINT32_MAX). */
ssize_t fx_wire_batch_finish(fx_wire_batch_builder *bb, fx_wire_batch_marks *pmarks);

/* The names section (tenant, namespace and stream, each with its u16
 * length) of |frame|: two frames whose sections are equal publish to the
 * same stream. */
static inline fx_wire_slice fx_wire_batch_names(const uint8_t *frame, fx_wire_batch_marks marks)
{
    return (fx_wire_slice){frame + marks.names, marks.entries - 4 - marks.names};
}

/* Bytes of |frame|'s payload entries (lengths and payloads), |len| being
 * the frame's size: what fx_wire_batch_append_frame() copies. */
static inline size_t fx_wire_batch_entries_len(size_t len, fx_wire_batch_marks marks)
{
    return len - marks.entries;
}

/* Bytes of a frame that opens as the one with |marks| before its first
 * payload entry: a frame begun with fx_wire_batch_begin_as() and given E
 * entry bytes takes fx_wire_batch_head_len() + E. */
static inline size_t fx_wire_batch_head_len(fx_wire_batch_marks marks)
{
    return marks.entries;
}

/* Entry bytes a frame that opens as the one with |marks| may carry when its
 * body may take at most |max_body| bytes (0 when its head alone is over). */
static inline size_t fx_wire_batch_entries_room(fx_wire_batch_marks marks, size_t max_body)
{
    size_t head = marks.entries - FX_WIRE_HEADER_LEN;
    return max_body > head ? max_body - head : 0;
}

/* ---- publish ack --------------------------------------------------------------- */

/* Decodes a 0x0010 body. Returns 0 or FX_EWIRE_TRUNCATED, FX_EWIRE_STATUS
 * (status byte not 0 or 1), FX_EWIRE_UTF8 (message), FX_EWIRE_TRAILING. */
int fx_wire_publish_ack_decode(const uint8_t *body, size_t len, fx_wire_publish_ack *a,
                               fx_wire_err *err);

/* Size of |a|'s whole frame, message cut to FX_WIRE_ACK_MSG_MAX bytes. */
size_t fx_wire_publish_ack_frame_size(const fx_wire_publish_ack *a);

/* Writes |a| as a whole frame to |out| of |cap| bytes (message cut at a
 * character boundary to at most FX_WIRE_ACK_MSG_MAX bytes). Returns the bytes
 * written or -ENOSPC. */
ssize_t fx_wire_publish_ack_encode(const fx_wire_publish_ack *a, uint8_t *out, size_t cap);

/* ---- event batches --------------------------------------------------------------- */

/* Decodes the body of a frame with |flags| 0x0002/0x0004 (| 0x0020) into |e|.
 * Returns 0 or FX_EWIRE_KIND, FX_EWIRE_TRUNCATED, FX_EWIRE_COUNT,
 * FX_EWIRE_TRAILING, -ENOMEM. On success call fx_wire_event_batch_deinit(). */
int fx_wire_event_batch_decode(uint16_t flags, const uint8_t *body, size_t len,
                               fx_wire_event_batch *e, fx_wire_err *err);

/* Frees a heap payload array of a decoded |e|. */
void fx_wire_event_batch_deinit(fx_wire_event_batch *e);

/* Frame flags |e| encodes to (0x0002 or 0x0004, | 0x0020 with offsets). */
uint16_t fx_wire_event_batch_flags(const fx_wire_event_batch *e);

/* Size of |e|'s whole frame, or FX_EWIRE_TOO_LARGE. */
ssize_t fx_wire_event_batch_frame_size(const fx_wire_event_batch *e);

/* Writes |e| as a whole frame to |out| of |cap| bytes, gathering the payloads
 * (which may live in separate buffers) into it. Returns the bytes written,
 * FX_EWIRE_TOO_LARGE or -ENOSPC. */
ssize_t fx_wire_event_batch_encode(const fx_wire_event_batch *e, uint8_t *out, size_t cap);

/* Bytes fx_wire_event_batch_encode_iov() writes into |meta| for |e|: header,
 * ids/offset, count and the 4-byte length prefixes. */
size_t fx_wire_event_batch_meta_size(const fx_wire_event_batch *e);

/* Vectored encoding without copying payloads: writes every non-payload byte
 * of |e|'s frame into |meta| (|meta_cap| >= fx_wire_event_batch_meta_size()) and
 * fills |iov| (|iov_cap| >= 2 * count, and >= 1) with alternating meta and
 * payload pieces that concatenate to the frame. The iovecs borrow |meta| and
 * the payload bytes. Stores the number of iovecs in |*piovcnt|. Returns the
 * frame size, FX_EWIRE_TOO_LARGE or -ENOSPC. */
ssize_t fx_wire_event_batch_encode_iov(const fx_wire_event_batch *e, uint8_t *meta, size_t meta_cap,
                                       struct iovec *iov, size_t iov_cap, size_t *piovcnt);

#endif
