/* Helpers shared by the wire fuzz targets: decode a frame body by its kind and
 * check that whatever decodes re-encodes to the same bytes. A failed check
 * aborts, which libFuzzer reports as a crash with the input saved.
 * Single-threaded (libFuzzer calls the target from one thread). */
#ifndef FX_FUZZ_COMMON_H
#define FX_FUZZ_COMMON_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/binary.h"
#include "wire/frame.h"
#include "wire/group.h"

#if defined(__has_include)
#if __has_include("wire/message.h")
#include "wire/message.h"
#define FX_FUZZ_HAVE_MESSAGE 1
#endif
#endif

#define FX_FUZZ_CHECK(cond)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Every decoder error must be one of the documented codes, with its detail. */
static inline void fx_fuzz_check_err(int rv, const fx_wire_err *err)
{
    if (rv == 0 || rv == -ENOMEM)
        return;
    FX_FUZZ_CHECK(rv <= FX_EWIRE_MAGIC && rv >= FX_EWIRE_KIND);
    FX_FUZZ_CHECK(err->code == rv);
    FX_FUZZ_CHECK(err->msg[0] != 0);
}

/* Re-encodes a decoded frame with |encode_len| bytes into a scratch buffer and
 * compares it with header |flags| + |body|. */
static inline void fx_fuzz_check_reencode(const uint8_t *enc, ssize_t enc_len, uint16_t flags,
                                          const uint8_t *body, size_t len)
{
    FX_FUZZ_CHECK(enc_len == (ssize_t)(FX_WIRE_HEADER_LEN + len));
    FX_FUZZ_CHECK(fx_be16(enc + 6) == flags);
    FX_FUZZ_CHECK(fx_be32(enc + 8) == len);
    FX_FUZZ_CHECK(memcmp(enc + FX_WIRE_HEADER_LEN, body, len) == 0);
}

static inline void fx_fuzz_publish_batch(uint16_t flags, const uint8_t *body, size_t len)
{
    fx_wire_publish_batch b;
    fx_wire_err err = {0};
    int rv = fx_wire_publish_batch_decode(flags, body, len, &b, &err);
    fx_fuzz_check_err(rv, &err);
    if (rv < 0)
        return;
    FX_FUZZ_CHECK(b.count <= len / 4);
    ssize_t size = fx_wire_publish_batch_frame_size(&b);
    FX_FUZZ_CHECK(size == (ssize_t)(FX_WIRE_HEADER_LEN + len));
    uint8_t *enc = malloc((size_t)size);
    FX_FUZZ_CHECK(enc);
    fx_fuzz_check_reencode(enc, fx_wire_publish_batch_encode(&b, enc, (size_t)size), flags, body,
                           len);
    free(enc);
    fx_wire_publish_batch_deinit(&b);
}

static inline void fx_fuzz_event_batch(uint16_t flags, const uint8_t *body, size_t len)
{
    fx_wire_event_batch e;
    fx_wire_err err = {0};
    int rv = fx_wire_event_batch_decode(flags, body, len, &e, &err);
    fx_fuzz_check_err(rv, &err);
    if (rv < 0)
        return;
    ssize_t size = fx_wire_event_batch_frame_size(&e);
    FX_FUZZ_CHECK(size == (ssize_t)(FX_WIRE_HEADER_LEN + len));
    uint8_t *enc = malloc((size_t)size);
    FX_FUZZ_CHECK(enc);
    fx_fuzz_check_reencode(enc, fx_wire_event_batch_encode(&e, enc, (size_t)size), flags, body,
                           len);
    /* The vectored form must describe the same bytes. */
    size_t meta_len = fx_wire_event_batch_meta_size(&e), niov = e.count ? 2 * (size_t)e.count : 1;
    uint8_t *meta = malloc(meta_len);
    struct iovec *iov = malloc(niov * sizeof(*iov));
    FX_FUZZ_CHECK(meta && iov);
    size_t cnt = 0, off = 0;
    FX_FUZZ_CHECK(fx_wire_event_batch_encode_iov(&e, meta, meta_len, iov, niov, &cnt) == size);
    for (size_t i = 0; i < cnt; i++) {
        FX_FUZZ_CHECK(off + iov[i].iov_len <= (size_t)size);
        FX_FUZZ_CHECK(iov[i].iov_len == 0 ||
                      memcmp(enc + off, iov[i].iov_base, iov[i].iov_len) == 0);
        off += iov[i].iov_len;
    }
    FX_FUZZ_CHECK(off == (size_t)size);
    free(iov);
    free(meta);
    free(enc);
    fx_wire_event_batch_deinit(&e);
}

static inline void fx_fuzz_publish_ack(const uint8_t *body, size_t len)
{
    fx_wire_publish_ack a;
    fx_wire_err err = {0};
    int rv = fx_wire_publish_ack_decode(body, len, &a, &err);
    fx_fuzz_check_err(rv, &err);
    if (rv < 0 || a.message.len > FX_WIRE_ACK_MSG_MAX)
        return; /* longer messages are cut by the encoder on purpose */
    uint8_t enc[FX_WIRE_HEADER_LEN + 11 + FX_WIRE_ACK_MSG_MAX];
    fx_fuzz_check_reencode(enc, fx_wire_publish_ack_encode(&a, enc, sizeof(enc)),
                           FX_FLAG_PUBLISH_ACK, body, len);
}

/* Felix-C group frames (0x8000): whatever decodes must re-encode to the same
 * bytes, GROUP_BATCH through the builder. */
static inline void fx_fuzz_group_batch(const uint8_t *body, size_t len)
{
    fx_wire_group_batch b;
    fx_wire_err err = {0};
    int rv = fx_wire_group_batch_decode(body, len, &b, &err);
    fx_fuzz_check_err(rv, &err);
    if (rv < 0)
        return;
    FX_FUZZ_CHECK(b.nruns >= 1 && b.nruns <= FX_GROUP_MAX_RUNS);
    FX_FUZZ_CHECK(b.nrecords <= FX_GROUP_MAX_RECORDS && b.nrecords <= len / 4);
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < b.nrecords; i++)
        bytes += b.payloads[i].len;
    size_t size = fx_wire_group_batch_frame_size(b.nruns, b.nrecords, bytes);
    FX_FUZZ_CHECK(size == FX_WIRE_HEADER_LEN + len);
    uint8_t *enc = malloc(size);
    FX_FUZZ_CHECK(enc);
    fx_wire_group_builder gb;
    FX_FUZZ_CHECK(fx_wire_group_batch_begin(&gb, enc, size) == 0);
    uint32_t k = 0;
    for (uint32_t i = 0; i < b.nruns; i++) {
        const fx_wire_group_run *r = &b.runs[i];
        FX_FUZZ_CHECK(fx_wire_group_batch_run(&gb, r->first, r->attempt, r->skipped_before) == 0);
        for (uint32_t j = 0; j < r->count; j++, k++)
            FX_FUZZ_CHECK(fx_wire_group_batch_record(&gb, b.payloads[k].ptr,
                                                     (uint32_t)b.payloads[k].len) == 0);
    }
    FX_FUZZ_CHECK(k == b.nrecords);
    fx_fuzz_check_reencode(enc, fx_wire_group_batch_finish(&gb), FX_FLAG_FELIXC, body, len);
    free(enc);
    fx_wire_group_batch_deinit(&b);
}

static inline void fx_fuzz_group_acks(const uint8_t *body, size_t len)
{
    fx_wire_group_acks a;
    fx_wire_err err = {0};
    int rv = fx_wire_group_acks_decode(body, len, &a, &err);
    fx_fuzz_check_err(rv, &err);
    if (rv < 0)
        return;
    size_t size = fx_wire_group_acks_frame_size(&a);
    FX_FUZZ_CHECK(size == FX_WIRE_HEADER_LEN + len);
    uint8_t *enc = malloc(size);
    FX_FUZZ_CHECK(enc);
    FX_FUZZ_CHECK(fx_wire_group_acks_encode(&a, enc, size - 1) == FX_ETOOBIG);
    fx_fuzz_check_reencode(enc, fx_wire_group_acks_encode(&a, enc, size), FX_FLAG_FELIXC, body,
                           len);
    free(enc);
    fx_wire_group_acks_deinit(&a);
}

static inline void fx_fuzz_group_acked(const uint8_t *body, size_t len)
{
    fx_wire_group_acked a;
    fx_wire_err err = {0};
    int rv = fx_wire_group_acked_decode(body, len, &a, &err);
    fx_fuzz_check_err(rv, &err);
    if (rv < 0)
        return;
    size_t size = fx_wire_group_acked_frame_size(&a);
    FX_FUZZ_CHECK(size == FX_WIRE_HEADER_LEN + len);
    uint8_t *enc = malloc(size);
    FX_FUZZ_CHECK(enc);
    fx_fuzz_check_reencode(enc, fx_wire_group_acked_encode(&a, enc, size), FX_FLAG_FELIXC, body,
                           len);
    free(enc);
    fx_wire_group_acked_deinit(&a);
}

/* A group frame body, decoded as the kind its first byte names; every
 * decoder also sees every body, so a wrong kind is refused cleanly. */
static inline void fx_fuzz_group(const uint8_t *body, size_t len)
{
    fx_wire_err err = {0};
    int kind = fx_wire_group_kind(body, len, &err);
    fx_fuzz_check_err(kind < 0 ? kind : 0, &err);
    fx_fuzz_group_batch(body, len);
    fx_fuzz_group_acks(body, len);
    fx_fuzz_group_acked(body, len);
}

static inline void fx_fuzz_json(const uint8_t *body, size_t len)
{
#ifdef FX_FUZZ_HAVE_MESSAGE
    fx_msg m;
    fx_wire_err err = {0};
    if (fx_msg_decode(&m, body, len, &err) == 0)
        fx_msg_deinit(&m);
#else
    (void)body;
    (void)len;
#endif
}

/* Decodes |body| as the kind its frame |flags| name. */
static inline void fx_fuzz_body(uint16_t flags, const uint8_t *body, size_t len)
{
    fx_body_kind kind;
    if (fx_frame_kind(flags, &kind, NULL) < 0)
        return;
    switch (kind) {
    case FX_BODY_JSON:
        fx_fuzz_json(body, len);
        break;
    case FX_BODY_PUBLISH_BATCH:
    case FX_BODY_PUBLISH_BATCH_ACKED:
        fx_fuzz_publish_batch(flags, body, len);
        break;
    case FX_BODY_EVENT_BATCH:
    case FX_BODY_EVENT_BATCH_SHARED:
        fx_fuzz_event_batch(flags, body, len);
        break;
    case FX_BODY_PUBLISH_ACK:
        fx_fuzz_publish_ack(body, len);
        break;
    case FX_BODY_FELIXC:
        fx_fuzz_group(body, len);
        break;
    }
}

#endif
