/* FLX1 frame header codec and the streaming frame decoder. Pure code on bytes;
 * header functions any thread, a decoder is owned by one loop. */
#include "wire/frame.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define KIND_BITS                                                                                  \
    (FX_FLAG_PUBLISH_BATCH | FX_FLAG_EVENT_BATCH | FX_FLAG_EVENT_BATCH_SHARED | FX_FLAG_PUBLISH_ACK)

enum { ST_HEADER, ST_BODY, ST_FAILED };

/* ---- header ---------------------------------------------------------------- */

uint8_t *fx_frame_header_encode(const fx_frame_header *h, uint8_t *out)
{
    out = fx_put32(out, h->magic);
    out = fx_put16(out, h->version);
    out = fx_put16(out, h->flags);
    return fx_put32(out, h->length);
}

uint8_t *fx_frame_header_put(uint8_t *out, uint16_t flags, uint32_t length)
{
    fx_frame_header h = {
        .magic = FX_WIRE_MAGIC, .version = FX_WIRE_VERSION, .flags = flags, .length = length};
    return fx_frame_header_encode(&h, out);
}

int fx_frame_header_decode(const uint8_t *p, uint32_t max_frame_bytes, fx_frame_header *h,
                           fx_wire_err *err)
{
    h->magic = fx_be32(p);
    h->version = fx_be16(p + 4);
    h->flags = fx_be16(p + 6);
    h->length = fx_be32(p + 8);
    if (h->magic != FX_WIRE_MAGIC)
        return fx_wire_err_set(err, FX_EWIRE_MAGIC, "bad frame magic 0x%08x (expected FLX1)",
                               (unsigned)h->magic);
    if (h->version != FX_WIRE_VERSION)
        return fx_wire_err_set(err, FX_EWIRE_VERSION, "unsupported frame version %u",
                               (unsigned)h->version);
    if (h->length > max_frame_bytes)
        return fx_wire_err_set(err, FX_EWIRE_TOO_LARGE,
                               "frame length %u exceeds max_frame_bytes %u", (unsigned)h->length,
                               (unsigned)max_frame_bytes);
    return 0;
}

int fx_frame_check_flags(uint16_t flags, fx_wire_err *err)
{
    /* Felix-C's group frames carry their kind in the body, so the bit stands
     * alone; the original's flags are checked as before. */
    if (flags == FX_FLAG_FELIXC)
        return 0;
    if (flags & ~FX_FLAGS_KNOWN)
        return fx_wire_err_set(err, FX_EWIRE_FLAGS, "unsupported frame flags 0x%04x",
                               (unsigned)flags);
    unsigned kinds = flags & KIND_BITS;
    if (kinds & (kinds - 1))
        return fx_wire_err_set(err, FX_EWIRE_FLAGS_KINDS,
                               "frame flags 0x%04x name more than one body kind", (unsigned)flags);
    if ((flags & FX_FLAG_PUBLISH_ACKED) && !(flags & FX_FLAG_PUBLISH_BATCH))
        return fx_wire_err_set(err, FX_EWIRE_FLAGS_ACKED,
                               "frame flags 0x%04x: 0x0008 (acked) without 0x0001 (publish batch)",
                               (unsigned)flags);
    if ((flags & FX_FLAG_PUBLISH_IDEMPOTENT) && !(flags & FX_FLAG_PUBLISH_ACKED))
        return fx_wire_err_set(err, FX_EWIRE_FLAGS,
                               "frame flags 0x%04x: 0x0100 (idempotent) without 0x0008 (acked)",
                               (unsigned)flags);
    if ((flags & FX_FLAG_EVENT_OFFSETS) &&
        !(flags & (FX_FLAG_EVENT_BATCH | FX_FLAG_EVENT_BATCH_SHARED)))
        return fx_wire_err_set(err, FX_EWIRE_FLAGS_OFFSETS,
                               "frame flags 0x%04x: 0x0020 (offsets) without an event batch flag",
                               (unsigned)flags);
    return 0;
}

int fx_frame_kind(uint16_t flags, fx_body_kind *pkind, fx_wire_err *err)
{
    int rv = fx_frame_check_flags(flags, err);
    if (rv < 0)
        return rv;
    if (flags & FX_FLAG_PUBLISH_BATCH)
        *pkind =
            (flags & FX_FLAG_PUBLISH_ACKED) ? FX_BODY_PUBLISH_BATCH_ACKED : FX_BODY_PUBLISH_BATCH;
    else if (flags & FX_FLAG_EVENT_BATCH)
        *pkind = FX_BODY_EVENT_BATCH;
    else if (flags & FX_FLAG_EVENT_BATCH_SHARED)
        *pkind = FX_BODY_EVENT_BATCH_SHARED;
    else if (flags & FX_FLAG_PUBLISH_ACK)
        *pkind = FX_BODY_PUBLISH_ACK;
    else if (flags == FX_FLAG_FELIXC)
        *pkind = FX_BODY_FELIXC;
    else
        *pkind = FX_BODY_JSON;
    return 0;
}

const char *fx_body_kind_name(fx_body_kind kind)
{
    switch (kind) {
    case FX_BODY_JSON:
        return "json";
    case FX_BODY_PUBLISH_BATCH:
        return "publish_batch";
    case FX_BODY_PUBLISH_BATCH_ACKED:
        return "acked_publish_batch";
    case FX_BODY_EVENT_BATCH:
        return "event_batch";
    case FX_BODY_EVENT_BATCH_SHARED:
        return "shared_event_batch";
    case FX_BODY_PUBLISH_ACK:
        return "publish_ack";
    case FX_BODY_FELIXC:
        return "felixc_group";
    }
    return "unknown";
}

size_t fx_frame_size(size_t body_len)
{
    if (body_len > UINT32_MAX)
        return 0;
    return FX_WIRE_HEADER_LEN + body_len;
}

ssize_t fx_frame_encode(uint16_t flags, const uint8_t *body, size_t body_len, uint8_t *out,
                        size_t cap)
{
    size_t size = fx_frame_size(body_len);
    if (size == 0)
        return FX_EWIRE_TOO_LARGE;
    if (cap < size)
        return -ENOSPC;
    uint8_t *p = fx_frame_header_put(out, flags, (uint32_t)body_len);
    if (body_len)
        memcpy(p, body, body_len);
    return (ssize_t)size;
}

/* ---- streaming decoder ----------------------------------------------------- */

void fx_frame_decoder_init(fx_frame_decoder *d, uint32_t max_frame_bytes)
{
    memset(d, 0, sizeof(*d));
    d->max_frame = max_frame_bytes;
    d->state = ST_HEADER;
}

void fx_frame_decoder_deinit(fx_frame_decoder *d)
{
    free(d->buf);
    d->buf = NULL;
    d->release = false;
}

static int fail(fx_frame_decoder *d, int code)
{
    d->state = ST_FAILED;
    d->err = code;
    free(d->buf);
    d->buf = NULL;
    d->release = false;
    return code;
}

/* Fills |out| with the current frame's header and kind; the caller sets the body. */
static void describe(const fx_frame_decoder *d, fx_frame *out)
{
    out->hdr = d->cur;
    out->kind = d->cur_kind;
    out->flags_rv = d->cur_flags_rv;
    out->body = NULL;
    out->len = 0;
    out->buffered = false;
}

/* Gathers and checks a header. Reads it straight from |p| when the whole
 * header is there, which is the common case and copies nothing. */
static int read_header(fx_frame_decoder *d, const uint8_t *p, size_t n, size_t *used, fx_frame *out,
                       fx_wire_err *err)
{
    const uint8_t *h = p;
    if (d->hdr_have > 0 || n < FX_WIRE_HEADER_LEN) {
        size_t k = FX_WIRE_HEADER_LEN - d->hdr_have;
        if (k > n)
            k = n;
        memcpy(d->hdr + d->hdr_have, p, k);
        d->hdr_have += k;
        *used = k;
        if (d->hdr_have < FX_WIRE_HEADER_LEN)
            return FX_FRAME_NEED_MORE;
        h = d->hdr;
    } else {
        *used = FX_WIRE_HEADER_LEN;
    }
    d->hdr_have = 0;
    int rv = fx_frame_header_decode(h, d->max_frame, &d->cur, err);
    if (rv < 0)
        return fail(d, rv);
    d->cur_kind = FX_BODY_JSON;
    d->cur_flags_rv = fx_frame_kind(d->cur.flags, &d->cur_kind, NULL);
    describe(d, out);
    if (d->cur.length == 0) {
        out->body = p + *used; /* never read: len is 0 */
        return FX_FRAME_READY;
    }
    d->state = ST_BODY;
    d->body_have = 0;
    return FX_FRAME_HEADER;
}

/* Takes body bytes. Hands out a pointer into |p| when the whole body is there;
 * otherwise buffers, allocating exactly the announced length (already checked
 * against max_frame) on the first partial chunk. */
static int read_body(fx_frame_decoder *d, const uint8_t *p, size_t n, size_t *used, fx_frame *out,
                     fx_wire_err *err)
{
    size_t want = d->cur.length - d->body_have;
    if (d->body_have == 0 && n >= want) {
        *used = want;
        d->state = ST_HEADER;
        describe(d, out);
        out->body = p;
        out->len = want;
        return FX_FRAME_READY;
    }
    if (!d->buf) {
        d->buf = malloc(d->cur.length);
        if (!d->buf)
            return fail(d, fx_wire_err_set(err, -ENOMEM, "out of memory buffering a %u-byte frame",
                                           (unsigned)d->cur.length));
    }
    size_t k = n < want ? n : want;
    memcpy(d->buf + d->body_have, p, k);
    d->body_have += k;
    *used = k;
    if (d->body_have < d->cur.length)
        return FX_FRAME_NEED_MORE;
    d->state = ST_HEADER;
    d->body_have = 0;
    d->release = true;
    describe(d, out);
    out->body = d->buf;
    out->len = d->cur.length;
    out->buffered = true;
    return FX_FRAME_READY;
}

uint8_t *fx_frame_decoder_take(fx_frame_decoder *d, const fx_frame *f)
{
    if (!f->buffered || !d->release || d->buf != f->body)
        return NULL;
    uint8_t *b = d->buf;
    d->buf = NULL;
    d->release = false;
    return b;
}

int fx_frame_decoder_feed(fx_frame_decoder *d, const uint8_t *p, size_t n, size_t *consumed,
                          fx_frame *out, fx_wire_err *err)
{
    *consumed = 0;
    if (d->state == ST_FAILED)
        return fx_wire_err_set(err, d->err, "frame decoder already failed: %s",
                               fx_strerror(d->err));
    if (d->release) {
        /* The previous call handed out |buf|; the caller is done with it now. */
        free(d->buf);
        d->buf = NULL;
        d->release = false;
    }
    size_t total = 0;
    while (total < n) {
        size_t used = 0;
        int rv = d->state == ST_HEADER ? read_header(d, p + total, n - total, &used, out, err)
                                       : read_body(d, p + total, n - total, &used, out, err);
        total += used;
        if (rv != FX_FRAME_NEED_MORE) {
            *consumed = total;
            return rv;
        }
    }
    *consumed = total;
    return FX_FRAME_NEED_MORE;
}

size_t fx_frame_decoder_expected(const fx_frame_decoder *d)
{
    if (d->state == ST_BODY)
        return d->cur.length - d->body_have;
    if (d->state == ST_HEADER && d->hdr_have > 0)
        return FX_WIRE_HEADER_LEN - d->hdr_have;
    return 0;
}

uint32_t fx_frame_decoder_announced(const fx_frame_decoder *d)
{
    return d->state == ST_BODY ? d->cur.length : 0;
}

size_t fx_frame_decoder_buffered(const fx_frame_decoder *d)
{
    if (d->state == ST_BODY)
        return FX_WIRE_HEADER_LEN + d->body_have;
    if (d->state == ST_HEADER)
        return d->hdr_have;
    return 0;
}

bool fx_frame_decoder_at_boundary(const fx_frame_decoder *d)
{
    return d->state == ST_HEADER && d->hdr_have == 0;
}

int fx_frame_decoder_finish(fx_frame_decoder *d, fx_wire_err *err)
{
    if (d->state == ST_FAILED)
        return fx_wire_err_set(err, d->err, "frame decoder already failed: %s",
                               fx_strerror(d->err));
    if (fx_frame_decoder_at_boundary(d))
        return 0;
    size_t have = d->state == ST_BODY ? FX_WIRE_HEADER_LEN + d->body_have : d->hdr_have;
    size_t want = d->state == ST_BODY ? FX_WIRE_HEADER_LEN + (size_t)d->cur.length
                                      : (size_t)FX_WIRE_HEADER_LEN;
    return fail(d, fx_wire_err_set(err, FX_EWIRE_TRUNCATED,
                                   "stream ended %zu bytes into a frame of at least %zu bytes",
                                   have, want));
}
