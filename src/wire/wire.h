/* Felix wire protocol v1: constants and the error detail shared by the frame,
 * binary-body and JSON-message codecs. Pure functions on bytes; any thread.
 * All integers on the wire are big-endian. */
#ifndef FX_WIRE_H
#define FX_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "felix/error.h"

#define FX_WIRE_MAGIC 0x464C5831u /* "FLX1" */
#define FX_WIRE_VERSION 1u
#define FX_WIRE_HEADER_LEN 12u
#define FX_WIRE_DEFAULT_MAX_FRAME (16u * 1024u * 1024u)

/* Frame flags. 0 = JSON message. */
#define FX_FLAG_PUBLISH_BATCH 0x0001u      /* binary publish batch */
#define FX_FLAG_EVENT_BATCH 0x0002u        /* per-subscriber event batch */
#define FX_FLAG_EVENT_BATCH_SHARED 0x0004u /* shared event batch */
#define FX_FLAG_PUBLISH_ACKED 0x0008u      /* modifier on 0x0001: request_id + ack mode */
#define FX_FLAG_PUBLISH_ACK 0x0010u        /* binary publish ack */
#define FX_FLAG_EVENT_OFFSETS 0x0020u      /* modifier on 0x0002 / 0x0004: base_offset */
/* Modifier on 0x0009: an idempotent producer's batch (u64 producer_id, u64
 * sequence after the acked prefix, whose ack mode must be 2). 0x0100
 * without 0x0008 is refused. */
#define FX_FLAG_PUBLISH_IDEMPOTENT 0x0100u
#define FX_FLAGS_KNOWN 0x013Fu
#define FX_FLAGS_ORIGINAL_V1 0x0007u
/* Felix-C's consumer-group frames (wire/group.h): valid only alone, never
 * combined with the flags above; the original never sets it. Not part of
 * FX_FLAGS_KNOWN, which stays the original's set. */
#define FX_FLAG_FELIXC 0x8000u

/* Ack modes, as on the wire (u8 in 0x0009, strings in JSON). */
typedef enum fx_wire_ack {
    FX_WIRE_ACK_NONE = 0,
    FX_WIRE_ACK_PER_MESSAGE = 1,
    FX_WIRE_ACK_PER_BATCH = 2,
} fx_wire_ack;

/* Error detail filled by decoders: |code| is the FX_EWIRE_* value also
 * returned; |msg| is a complete sentence for logs and error replies
 * ("missing required field 'tenant_id' in publish"). Decoders accept NULL. */
typedef struct fx_wire_err {
    int code;
    char msg[160];
} fx_wire_err;

/* Sets |e| (if not NULL) to |code| with a printf-style message; returns |code|. */
int fx_wire_err_set(fx_wire_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* True if |p|[0..|n|) is well-formed UTF-8 (no overlongs, no surrogates). */
bool fx_wire_utf8_valid(const uint8_t *p, size_t n);

/* A borrowed byte range: decoders point these into the caller's input, encoders
 * read from them. Never owns |ptr|. */
typedef struct fx_wire_slice {
    const uint8_t *ptr;
    size_t len;
} fx_wire_slice;

/* Big-endian helpers. */
static inline uint16_t fx_be16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}
static inline uint32_t fx_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t fx_be64(const uint8_t *p)
{
    return ((uint64_t)fx_be32(p) << 32) | fx_be32(p + 4);
}
static inline uint8_t *fx_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
    return p + 2;
}
static inline uint8_t *fx_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    return p + 4;
}
static inline uint8_t *fx_put64(uint8_t *p, uint64_t v)
{
    fx_put32(p, (uint32_t)(v >> 32));
    return fx_put32(p + 4, (uint32_t)v);
}

#endif
