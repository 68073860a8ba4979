/* FLX1 frame layer: the 12-byte header, flag validation, and a streaming
 * decoder that turns bytes arriving in any chunking into whole frames.
 * Pure code on bytes (no I/O). Header functions: any thread. A decoder belongs
 * to one thread (the loop that owns the stream it reads). */
#ifndef FX_WIRE_FRAME_H
#define FX_WIRE_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire/wire.h"

/* What a frame's body holds, as named by its flags. */
typedef enum fx_body_kind {
    FX_BODY_JSON = 0,            /* flags 0: JSON message */
    FX_BODY_PUBLISH_BATCH,       /* 0x0001 */
    FX_BODY_PUBLISH_BATCH_ACKED, /* 0x0009 */
    FX_BODY_EVENT_BATCH,         /* 0x0002, optionally | 0x0020 */
    FX_BODY_EVENT_BATCH_SHARED,  /* 0x0004, optionally | 0x0020 */
    FX_BODY_PUBLISH_ACK,         /* 0x0010 */
    FX_BODY_FELIXC,              /* 0x8000 alone: a consumer-group frame (wire/group.h) */
} fx_body_kind;

/* The 12-byte header as on the wire. |length| counts the body only. */
typedef struct fx_frame_header {
    uint32_t magic;
    uint16_t version;
    uint16_t flags;
    uint32_t length;
} fx_frame_header;

/* Writes |h| as 12 big-endian bytes to |out| (which must hold
 * FX_WIRE_HEADER_LEN bytes), fields as given (no validation, so tests can
 * write bad headers). Returns |out| + 12. */
uint8_t *fx_frame_header_encode(const fx_frame_header *h, uint8_t *out);

/* Writes a valid v1 header (FLX1, version 1) with |flags| and body |length| to
 * |out| (12 bytes). Returns |out| + 12. */
uint8_t *fx_frame_header_put(uint8_t *out, uint16_t flags, uint32_t length);

/* Parses the 12 bytes at |p| into |h| and checks magic, version and
 * |h|->length <= |max_frame_bytes|. Flags are NOT checked here (an unknown flag
 * is an error reply on the control stream, not a stream error): use
 * fx_frame_check_flags(). Returns 0, FX_EWIRE_MAGIC, FX_EWIRE_VERSION or
 * FX_EWIRE_TOO_LARGE (detail in |err|, may be NULL). |h| is filled even on
 * error. */
int fx_frame_header_decode(const uint8_t *p, uint32_t max_frame_bytes, fx_frame_header *h,
                           fx_wire_err *err);

/* Checks that |flags| name at most one body kind and only valid modifiers.
 * 0x8000 (FX_FLAG_FELIXC) is valid alone and FX_EWIRE_FLAGS with any other
 * bit. Returns 0 or, checked in this order: FX_EWIRE_FLAGS (a bit outside
 * 0x3F other than 0x8000 alone),
 * FX_EWIRE_FLAGS_KINDS (two of 0x0001/0x0002/0x0004/0x0010),
 * FX_EWIRE_FLAGS_ACKED (0x0008 without 0x0001), FX_EWIRE_FLAGS_OFFSETS (0x0020
 * without 0x0002 or 0x0004). |err| may be NULL. */
int fx_frame_check_flags(uint16_t flags, fx_wire_err *err);

/* Checks |flags| as fx_frame_check_flags() and stores the body kind in
 * |*pkind|. Returns 0 or the same codes. */
int fx_frame_kind(uint16_t flags, fx_body_kind *pkind, fx_wire_err *err);

/* Name of |kind| for logs ("publish_batch"). Static string. */
const char *fx_body_kind_name(fx_body_kind kind);

/* Total frame size for a body of |body_len| bytes, or 0 if the body does not
 * fit the u32 length field. */
size_t fx_frame_size(size_t body_len);

/* Writes a complete frame (header with |flags| + |body_len| bytes of |body|)
 * to |out| of |cap| bytes. Returns the frame size, -ENOSPC if |cap| is too
 * small, or FX_EWIRE_TOO_LARGE if |body_len| exceeds UINT32_MAX. Does not
 * check |flags| or any max_frame_bytes: callers enforce their own limit. */
ssize_t fx_frame_encode(uint16_t flags, const uint8_t *body, size_t body_len, uint8_t *out,
                        size_t cap);

/* ---- streaming decoder ------------------------------------------------- */

/* One frame handed out by the decoder. |body| points either into the input of
 * the fx_frame_decoder_feed() call that completed it (zero-copy: the whole body
 * was contiguous there) or, when the body spanned feeds, into the decoder's own
 * buffer (|buffered| true); either way it is valid until the next call on the
 * decoder or until the caller's input goes away, whichever comes first.
 * |flags_rv| is fx_frame_check_flags(hdr.flags): the decoder does not fail the
 * stream for bad flags, so the caller can reply an error and continue; |kind|
 * is meaningful only when |flags_rv| is 0. */
typedef struct fx_frame {
    fx_frame_header hdr;
    int flags_rv;
    fx_body_kind kind;
    const uint8_t *body;
    size_t len;
    bool buffered;
} fx_frame;

/* Results of fx_frame_decoder_feed() besides errors. */
enum {
    FX_FRAME_NEED_MORE = 0, /* every input byte consumed, no frame complete */
    FX_FRAME_HEADER = 1,    /* a header with a non-empty body just passed its checks */
    FX_FRAME_READY = 2,     /* a whole frame is in |*out| */
};

/* Caller-embedded streaming decoder. States: reading a header, reading a body,
 * failed (sticky). It allocates at most one buffer, of exactly the announced
 * body length, only after the header passed its checks, and only when a body
 * spans feeds. */
typedef struct fx_frame_decoder {
    uint32_t max_frame;
    int state;
    int err; /* sticky error code once failed */
    uint8_t hdr[FX_WIRE_HEADER_LEN];
    size_t hdr_have;       /* header bytes gathered so far */
    fx_frame_header cur;   /* header of the frame being read */
    fx_body_kind cur_kind; /* its kind and the fx_frame_kind() result, */
    int cur_flags_rv;      /* worked out once per header */
    size_t body_have;      /* body bytes received for |cur| */
    uint8_t *buf;          /* body buffer when the body spans feeds */
    bool release;          /* |buf| was handed out; free it on the next call */
} fx_frame_decoder;

/* Prepares |d| to read frames whose body is at most |max_frame_bytes|. */
void fx_frame_decoder_init(fx_frame_decoder *d, uint32_t max_frame_bytes);

/* Frees the body buffer if any. |d| may be reinitialised afterwards. */
void fx_frame_decoder_deinit(fx_frame_decoder *d);

/* Consumes bytes from |p|[0..|n|) and stops at the first event. Stores in
 * |*consumed| how many bytes it took; the caller feeds the rest (|p| +
 * |*consumed|) on its next call. Returns:
 *  - FX_FRAME_READY: |*out| holds a whole frame (see fx_frame for lifetime).
 *    A frame with an empty body is reported READY directly, without HEADER.
 *  - FX_FRAME_HEADER: a header passed its checks and announces |out->hdr.length|
 *    (> 0) body bytes, none of them consumed yet: reserve the byte budget now
 *    (see fx_frame_decoder_expected()), then feed on; READY follows for the
 *    same frame. |out->body| is NULL.
 *  - FX_FRAME_NEED_MORE: all |n| bytes were consumed.
 *  - FX_EWIRE_MAGIC / FX_EWIRE_VERSION / FX_EWIRE_TOO_LARGE from the header,
 *    or -ENOMEM: the decoder is failed; every later call returns the same code.
 * |err| (may be NULL) gets the detail of an error. Loop thread only. */
int fx_frame_decoder_feed(fx_frame_decoder *d, const uint8_t *p, size_t n, size_t *consumed,
                          fx_frame *out, fx_wire_err *err);

/* Hands the body buffer of |f|, a buffered frame this decoder just returned
 * (f->buffered), to the caller, who frees it with free(); the decoder forgets
 * it, so the body outlives the next call. Returns NULL (and changes nothing)
 * for a frame that was not buffered: copy its body if it must outlive the
 * input. Loop thread only. */
uint8_t *fx_frame_decoder_take(fx_frame_decoder *d, const fx_frame *f);

/* Bytes still expected to finish the current frame: the rest of a partly read
 * header (body length still unknown), or the rest of the body once the header
 * was read. 0 at a frame boundary or after an error. */
size_t fx_frame_decoder_expected(const fx_frame_decoder *d);

/* Body length announced by the header being read (0 if no header has been
 * read for the current frame). */
uint32_t fx_frame_decoder_announced(const fx_frame_decoder *d);

/* Bytes of a partial frame the decoder holds in memory (header bytes plus
 * buffered body bytes): what a per-connection partial-frame cap counts. */
size_t fx_frame_decoder_buffered(const fx_frame_decoder *d);

/* True if the decoder is between frames and not failed: FIN here is a clean
 * close. */
bool fx_frame_decoder_at_boundary(const fx_frame_decoder *d);

/* Call at FIN. Returns 0 for a clean close, FX_EWIRE_TRUNCATED if FIN came
 * inside a frame (the decoder is then failed), or the sticky error. */
int fx_frame_decoder_finish(fx_frame_decoder *d, fx_wire_err *err);

#endif
