/* Binary bodies of Felix wire v1: publish batches, publish acks and event
 * batches. Decoding walks a bounds-checked cursor over the body, so no length
 * read from the wire is used before it is checked against what remains.
 * Pure functions; any thread. */
#include "wire/binary.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- bounds-checked reader ----------------------------------------------------- */

typedef struct rd {
    const uint8_t *p;
    size_t left;
} rd;

static bool rd_take(rd *r, size_t n, const uint8_t **pp)
{
    if (r->left < n)
        return false;
    *pp = r->p;
    r->p += n;
    r->left -= n;
    return true;
}

static int truncated(fx_wire_err *err, const char *what)
{
    return fx_wire_err_set(err, FX_EWIRE_TRUNCATED, "frame body truncated in %s", what);
}

static int rd_u8(rd *r, uint8_t *v, const char *what, fx_wire_err *err)
{
    const uint8_t *p;
    if (!rd_take(r, 1, &p))
        return truncated(err, what);
    *v = p[0];
    return 0;
}

static int rd_u64(rd *r, uint64_t *v, const char *what, fx_wire_err *err)
{
    const uint8_t *p;
    if (!rd_take(r, 8, &p))
        return truncated(err, what);
    *v = fx_be64(p);
    return 0;
}

/* A u16-length-prefixed UTF-8 name. */
static int rd_name(rd *r, fx_wire_slice *s, const char *what, fx_wire_err *err)
{
    const uint8_t *p;
    if (!rd_take(r, 2, &p))
        return truncated(err, what);
    size_t n = fx_be16(p);
    if (!rd_take(r, n, &p))
        return truncated(err, what);
    if (!fx_wire_utf8_valid(p, n))
        return fx_wire_err_set(err, FX_EWIRE_UTF8, "%s is not valid UTF-8", what);
    s->ptr = p;
    s->len = n;
    return 0;
}

/* Reads `u32 count, count x (u32 len, bytes)` which must end the body. The
 * payload array is allocated only after count <= remaining/4 holds, so its
 * size is bounded by the body actually received. */
static int rd_entries(rd *r, uint32_t max, uint32_t *pcount, fx_wire_slice **parr,
                      fx_wire_slice *inl, fx_wire_err *err)
{
    const uint8_t *p;
    if (!rd_take(r, 4, &p))
        return truncated(err, "payload count");
    uint32_t count = fx_be32(p);
    if (count > max)
        return fx_wire_err_set(err, FX_EWIRE_COUNT,
                               "publish batch of %u messages exceeds the limit of %u per frame",
                               (unsigned)count, (unsigned)max);
    if (count > r->left / 4)
        return fx_wire_err_set(err, FX_EWIRE_COUNT,
                               "payload count %u larger than the %zu bytes that remain allow",
                               (unsigned)count, r->left);
    fx_wire_slice *arr = inl;
    if (count > FX_WIRE_INLINE_PAYLOADS) {
        arr = malloc((size_t)count * sizeof(*arr));
        if (!arr)
            return fx_wire_err_set(err, -ENOMEM, "out of memory for %u payloads", (unsigned)count);
    }
    int rv = 0;
    for (uint32_t i = 0; i < count && rv == 0; i++) {
        if (!rd_take(r, 4, &p) || !rd_take(r, fx_be32(p), &arr[i].ptr))
            rv = fx_wire_err_set(err, FX_EWIRE_TRUNCATED, "frame body truncated in payload %u",
                                 (unsigned)i);
        else
            arr[i].len = fx_be32(p);
    }
    if (rv == 0 && r->left > 0)
        rv = fx_wire_err_set(err, FX_EWIRE_TRAILING, "%zu trailing bytes after the last payload",
                             r->left);
    if (rv < 0) {
        if (arr != inl)
            free(arr);
        return rv;
    }
    *pcount = count;
    *parr = arr;
    return 0;
}

/* ---- size arithmetic --------------------------------------------------------------- */

/* Adds |n| to the body size |*acc|, failing once the body cannot fit the u32
 * length field. */
static bool add_size(size_t *acc, size_t n)
{
    if (n > UINT32_MAX || *acc > UINT32_MAX - n)
        return false;
    *acc += n;
    return true;
}

static bool entries_size(size_t *acc, const fx_wire_slice *payloads, uint32_t count)
{
    if (!add_size(acc, 4))
        return false;
    for (uint32_t i = 0; i < count; i++)
        if (!add_size(acc, 4) || !add_size(acc, payloads[i].len))
            return false;
    return true;
}

static uint8_t *put_entries(uint8_t *p, const fx_wire_slice *payloads, uint32_t count)
{
    p = fx_put32(p, count);
    for (uint32_t i = 0; i < count; i++) {
        p = fx_put32(p, (uint32_t)payloads[i].len);
        if (payloads[i].len)
            memcpy(p, payloads[i].ptr, payloads[i].len);
        p += payloads[i].len;
    }
    return p;
}

/* ---- publish batch ----------------------------------------------------------------- */

int fx_wire_publish_acked_prefix_decode(const uint8_t *body, size_t len, uint64_t *prequest_id,
                                        fx_wire_ack *pack, fx_wire_err *err)
{
    rd r = {body, len};
    uint8_t mode = 0;
    int rv = rd_u64(&r, prequest_id, "request_id", err);
    if (rv == 0)
        rv = rd_u8(&r, &mode, "ack mode", err);
    if (rv < 0)
        return rv;
    if (mode != FX_WIRE_ACK_PER_MESSAGE && mode != FX_WIRE_ACK_PER_BATCH)
        return fx_wire_err_set(err, FX_EWIRE_ACK_MODE,
                               "invalid ack mode %u (expected 1 per_message or 2 per_batch)",
                               (unsigned)mode);
    *pack = (fx_wire_ack)mode;
    return 0;
}

int fx_wire_publish_idem_prefix_decode(const uint8_t *body, size_t len, uint64_t *prequest_id,
                                       uint64_t *pproducer_id, uint64_t *psequence,
                                       fx_wire_err *err)
{
    fx_wire_ack ack = FX_WIRE_ACK_NONE; /* set on success; GCC -O2 cannot tell */
    int rv = fx_wire_publish_acked_prefix_decode(body, len, prequest_id, &ack, err);
    if (rv < 0)
        return rv;
    if (ack != FX_WIRE_ACK_PER_BATCH)
        return fx_wire_err_set(err, FX_EWIRE_ACK_MODE,
                               "invalid ack mode %u in an idempotent batch (expected 2 per_batch)",
                               (unsigned)ack);
    rd r = {body + 9, len - 9};
    rv = rd_u64(&r, pproducer_id, "producer_id", err);
    if (rv == 0)
        rv = rd_u64(&r, psequence, "sequence", err);
    return rv;
}

/* The names section at |r| when it is the one |cache| holds: the slices
 * are set and |r| moves past it. */
static bool names_from_cache(rd *r, const fx_wire_names_cache *cache, fx_wire_publish_batch *b)
{
    size_t n = cache->len;
    if (n == 0 || r->left < n || memcmp(r->p, cache->bytes, n) != 0)
        return false;
    size_t tl = cache->tenant_len, nl = cache->ns_len;
    b->tenant = (fx_wire_slice){r->p + 2, tl};
    b->ns = (fx_wire_slice){r->p + 4 + tl, nl};
    b->stream = (fx_wire_slice){r->p + 6 + tl + nl, n - 6 - tl - nl};
    r->p += n;
    r->left -= n;
    return true;
}

static void names_to_cache(const uint8_t *start, const fx_wire_publish_batch *b,
                           fx_wire_names_cache *cache)
{
    size_t n = 6 + b->tenant.len + b->ns.len + b->stream.len;
    if (n > FX_WIRE_NAMES_CACHE_MAX) {
        cache->len = 0;
        return;
    }
    memcpy(cache->bytes, start, n);
    cache->len = (uint16_t)n;
    cache->tenant_len = (uint16_t)b->tenant.len;
    cache->ns_len = (uint16_t)b->ns.len;
}

int fx_wire_publish_batch_decode_cached(uint16_t flags, const uint8_t *body, size_t len,
                                        fx_wire_publish_batch *b, fx_wire_names_cache *cache,
                                        bool *psame, fx_wire_err *err)
{
    /* Field by field: the inline payload array is written only as used. */
    b->request_id = 0;
    b->ack = FX_WIRE_ACK_NONE;
    b->idempotent = false;
    b->producer_id = b->sequence = 0;
    b->count = 0;
    b->payloads = b->inline_payloads;
    b->tenant = b->ns = b->stream = (fx_wire_slice){0};
    if (psame != NULL)
        *psame = false;
    rd r = {body, len};
    if (flags == (FX_FLAG_PUBLISH_BATCH | FX_FLAG_PUBLISH_ACKED)) {
        int rv = fx_wire_publish_acked_prefix_decode(body, len, &b->request_id, &b->ack, err);
        if (rv < 0)
            return rv;
        r.p += 9;
        r.left -= 9;
    } else if (flags == (FX_FLAG_PUBLISH_BATCH | FX_FLAG_PUBLISH_ACKED |
                         FX_FLAG_PUBLISH_IDEMPOTENT)) {
        int rv = fx_wire_publish_idem_prefix_decode(body, len, &b->request_id, &b->producer_id,
                                                    &b->sequence, err);
        if (rv < 0)
            return rv;
        b->ack = FX_WIRE_ACK_PER_BATCH;
        b->idempotent = true;
        r.p += FX_WIRE_IDEMPOTENT_PREFIX_LEN;
        r.left -= FX_WIRE_IDEMPOTENT_PREFIX_LEN;
    } else if (flags != FX_FLAG_PUBLISH_BATCH) {
        return fx_wire_err_set(err, FX_EWIRE_KIND, "frame flags 0x%04x are not a publish batch",
                               (unsigned)flags);
    }
    int rv = 0;
    if (cache != NULL && names_from_cache(&r, cache, b)) {
        if (psame != NULL)
            *psame = true;
    } else {
        const uint8_t *start = r.p;
        rv = rd_name(&r, &b->tenant, "tenant_id", err);
        if (rv == 0)
            rv = rd_name(&r, &b->ns, "namespace", err);
        if (rv == 0)
            rv = rd_name(&r, &b->stream, "stream", err);
        if (rv == 0 && cache != NULL)
            names_to_cache(start, b, cache);
    }
    if (rv == 0)
        rv = rd_entries(&r, FX_WIRE_BATCH_MAX_MESSAGES, &b->count, &b->payloads, b->inline_payloads,
                        err);
    return rv;
}

int fx_wire_publish_batch_decode(uint16_t flags, const uint8_t *body, size_t len,
                                 fx_wire_publish_batch *b, fx_wire_err *err)
{
    return fx_wire_publish_batch_decode_cached(flags, body, len, b, NULL, NULL, err);
}

void fx_wire_publish_batch_deinit(fx_wire_publish_batch *b)
{
    if (b->payloads && b->payloads != b->inline_payloads)
        free(b->payloads);
    b->payloads = b->inline_payloads;
    b->count = 0;
}

uint16_t fx_wire_publish_batch_flags(const fx_wire_publish_batch *b)
{
    if (b->idempotent)
        return FX_FLAG_PUBLISH_BATCH | FX_FLAG_PUBLISH_ACKED | FX_FLAG_PUBLISH_IDEMPOTENT;
    return b->ack == FX_WIRE_ACK_NONE ? FX_FLAG_PUBLISH_BATCH
                                      : (FX_FLAG_PUBLISH_BATCH | FX_FLAG_PUBLISH_ACKED);
}

/* Bytes of the body before the names: the acked batch's request id and
 * ack mode. */
static size_t publish_prefix_len(const fx_wire_publish_batch *b)
{
    if (b->idempotent)
        return FX_WIRE_IDEMPOTENT_PREFIX_LEN;
    return b->ack == FX_WIRE_ACK_NONE ? 0 : 9;
}

/* Checks |b|'s ack mode and name lengths; returns the bytes of the body
 * before the payload count, or a negative code. */
static ssize_t publish_names_end(const fx_wire_publish_batch *b)
{
    if (b->ack != FX_WIRE_ACK_NONE && b->ack != FX_WIRE_ACK_PER_MESSAGE &&
        b->ack != FX_WIRE_ACK_PER_BATCH)
        return FX_EWIRE_ACK_MODE;
    if (b->idempotent && b->ack != FX_WIRE_ACK_PER_BATCH)
        return FX_EWIRE_ACK_MODE;
    if (b->tenant.len > UINT16_MAX || b->ns.len > UINT16_MAX || b->stream.len > UINT16_MAX)
        return FX_EWIRE_NAME;
    return (ssize_t)(publish_prefix_len(b) + 6 + b->tenant.len + b->ns.len + b->stream.len);
}

/* Size of the body alone, or a negative code. */
static ssize_t publish_body_size(const fx_wire_publish_batch *b)
{
    ssize_t head = publish_names_end(b);
    if (head < 0)
        return head;
    if (b->count > FX_WIRE_BATCH_MAX_MESSAGES)
        return FX_EWIRE_COUNT;
    size_t n = (size_t)head;
    if (!entries_size(&n, b->payloads, b->count))
        return FX_EWIRE_TOO_LARGE;
    return (ssize_t)n;
}

ssize_t fx_wire_publish_batch_frame_size(const fx_wire_publish_batch *b)
{
    ssize_t n = publish_body_size(b);
    return n < 0 ? n : n + (ssize_t)FX_WIRE_HEADER_LEN;
}

static uint8_t *put_name(uint8_t *p, fx_wire_slice s)
{
    p = fx_put16(p, (uint16_t)s.len);
    if (s.len)
        memcpy(p, s.ptr, s.len);
    return p + s.len;
}

static bool names_valid(const fx_wire_publish_batch *b)
{
    return fx_wire_utf8_valid(b->tenant.ptr, b->tenant.len) &&
           fx_wire_utf8_valid(b->ns.ptr, b->ns.len) &&
           fx_wire_utf8_valid(b->stream.ptr, b->stream.len);
}

/* Writes the header (with body length |body|), the acked batch's request id
 * and ack mode, and the names; returns where the payload count goes. */
static uint8_t *put_publish_head(uint8_t *p, const fx_wire_publish_batch *b, uint32_t body)
{
    p = fx_frame_header_put(p, fx_wire_publish_batch_flags(b), body);
    if (b->ack != FX_WIRE_ACK_NONE) {
        p = fx_put64(p, b->request_id);
        *p++ = (uint8_t)b->ack;
        if (b->idempotent) {
            p = fx_put64(p, b->producer_id);
            p = fx_put64(p, b->sequence);
        }
    }
    p = put_name(p, b->tenant);
    p = put_name(p, b->ns);
    return put_name(p, b->stream);
}

ssize_t fx_wire_publish_batch_encode(const fx_wire_publish_batch *b, uint8_t *out, size_t cap)
{
    ssize_t body = publish_body_size(b);
    if (body < 0)
        return body;
    if (!names_valid(b))
        return FX_EWIRE_UTF8;
    size_t size = FX_WIRE_HEADER_LEN + (size_t)body;
    if (cap < size)
        return -ENOSPC;
    uint8_t *p = put_publish_head(out, b, (uint32_t)body);
    put_entries(p, b->payloads, b->count);
    return (ssize_t)size;
}

/* ---- publish batch builder ----------------------------------------------------------- */

ssize_t fx_wire_batch_frame_size(const fx_wire_publish_batch *head, size_t count,
                                 size_t payload_bytes)
{
    ssize_t names_end = publish_names_end(head);
    if (names_end < 0)
        return names_end;
    if (count > FX_WIRE_BATCH_MAX_MESSAGES)
        return FX_EWIRE_COUNT;
    size_t n = (size_t)names_end;
    if (!add_size(&n, 4) || !add_size(&n, 4 * count) || !add_size(&n, payload_bytes))
        return FX_EWIRE_TOO_LARGE;
    return (ssize_t)(FX_WIRE_HEADER_LEN + n);
}

int fx_wire_batch_begin(fx_wire_batch_builder *bb, uint8_t *out, size_t cap,
                        const fx_wire_publish_batch *head)
{
    ssize_t names_end = publish_names_end(head);
    if (names_end < 0)
        return (int)names_end;
    if (!names_valid(head))
        return FX_EWIRE_UTF8;
    size_t head_len = FX_WIRE_HEADER_LEN + (size_t)names_end + 4;
    if (cap < head_len)
        return -ENOSPC;
    /* The length is written again by finish, once it is known. */
    uint8_t *p = put_publish_head(out, head, 0);
    fx_put32(p, 0);
    *bb = (fx_wire_batch_builder){
        .out = out,
        .cap = cap,
        .len = head_len,
        .flags = fx_wire_publish_batch_flags(head),
        .marks = {.names = (uint32_t)(FX_WIRE_HEADER_LEN + publish_prefix_len(head)),
                  .entries = (uint32_t)head_len},
    };
    return 0;
}

int fx_wire_batch_begin_as(fx_wire_batch_builder *bb, uint8_t *out, size_t cap,
                           const uint8_t *frame, fx_wire_batch_marks marks)
{
    size_t head_len = marks.entries;
    if (cap < head_len)
        return -ENOSPC;
    fx_frame_header h;
    fx_frame_header_decode(frame, UINT32_MAX, &h, NULL); /* our own frame: valid */
    memcpy(out, frame, head_len);
    fx_put32(out + head_len - 4, 0);
    *bb = (fx_wire_batch_builder){
        .out = out, .cap = cap, .len = head_len, .flags = h.flags, .marks = marks};
    return 0;
}

int fx_wire_batch_append_frame(fx_wire_batch_builder *bb, const uint8_t *frame, size_t len,
                               fx_wire_batch_marks marks)
{
    uint32_t count = fx_be32(frame + marks.entries - 4);
    size_t n = fx_wire_batch_entries_len(len, marks);
    if (count > FX_WIRE_BATCH_MAX_MESSAGES - bb->count)
        return FX_EWIRE_COUNT;
    if (fx_wire_batch_left(bb) < n)
        return -ENOSPC;
    memcpy(bb->out + bb->len, frame + marks.entries, n);
    bb->len += n;
    bb->count += count;
    return 0;
}

ssize_t fx_wire_batch_finish(fx_wire_batch_builder *bb, fx_wire_batch_marks *pmarks)
{
    size_t body = bb->len - FX_WIRE_HEADER_LEN;
    if (body > UINT32_MAX)
        return FX_EWIRE_TOO_LARGE;
    fx_frame_header_put(bb->out, bb->flags, (uint32_t)body);
    fx_put32(bb->out + bb->marks.entries - 4, bb->count);
    if (pmarks != NULL)
        *pmarks = bb->marks;
    return (ssize_t)bb->len;
}

/* ---- publish ack ------------------------------------------------------------------- */

int fx_wire_publish_ack_decode(const uint8_t *body, size_t len, fx_wire_publish_ack *a,
                               fx_wire_err *err)
{
    memset(a, 0, sizeof(*a));
    rd r = {body, len};
    uint8_t status = 0;
    const uint8_t *p;
    int rv = rd_u8(&r, &status, "ack status", err);
    if (rv < 0)
        return rv;
    if (status > 1)
        return fx_wire_err_set(err, FX_EWIRE_STATUS,
                               "invalid ack status %u (expected 0 ok or 1 error)",
                               (unsigned)status);
    a->ok = status == 0;
    if ((rv = rd_u64(&r, &a->request_id, "request_id", err)) < 0)
        return rv;
    if (!rd_take(&r, 2, &p) || !rd_take(&r, fx_be16(p), &a->message.ptr))
        return truncated(err, "ack message");
    a->message.len = fx_be16(p);
    if (!fx_wire_utf8_valid(a->message.ptr, a->message.len))
        return fx_wire_err_set(err, FX_EWIRE_UTF8, "ack message is not valid UTF-8");
    if (r.left > 0)
        return fx_wire_err_set(err, FX_EWIRE_TRAILING, "%zu trailing bytes after the ack message",
                               r.left);
    return 0;
}

/* Length of |s| cut to FX_WIRE_ACK_MSG_MAX bytes without splitting a
 * character: back up over continuation bytes to the start of the character
 * that would straddle the limit. */
static size_t ack_msg_len(fx_wire_slice s)
{
    if (s.len <= FX_WIRE_ACK_MSG_MAX)
        return s.len;
    size_t n = FX_WIRE_ACK_MSG_MAX;
    while (n > 0 && (s.ptr[n] & 0xC0u) == 0x80u)
        n--;
    return n;
}

size_t fx_wire_publish_ack_frame_size(const fx_wire_publish_ack *a)
{
    return FX_WIRE_HEADER_LEN + 11 + ack_msg_len(a->message);
}

ssize_t fx_wire_publish_ack_encode(const fx_wire_publish_ack *a, uint8_t *out, size_t cap)
{
    size_t mlen = ack_msg_len(a->message);
    size_t size = FX_WIRE_HEADER_LEN + 11 + mlen;
    if (cap < size)
        return -ENOSPC;
    uint8_t *p = fx_frame_header_put(out, FX_FLAG_PUBLISH_ACK, (uint32_t)(11 + mlen));
    *p++ = a->ok ? 0 : 1;
    p = fx_put64(p, a->request_id);
    p = fx_put16(p, (uint16_t)mlen);
    if (mlen)
        memcpy(p, a->message.ptr, mlen);
    return (ssize_t)size;
}

/* ---- event batches ----------------------------------------------------------------- */

int fx_wire_event_batch_decode(uint16_t flags, const uint8_t *body, size_t len,
                               fx_wire_event_batch *e, fx_wire_err *err)
{
    memset(e, 0, sizeof(*e));
    e->payloads = e->inline_payloads;
    uint16_t kind = flags & (uint16_t)~FX_FLAG_EVENT_OFFSETS;
    if (kind != FX_FLAG_EVENT_BATCH && kind != FX_FLAG_EVENT_BATCH_SHARED)
        return fx_wire_err_set(err, FX_EWIRE_KIND, "frame flags 0x%04x are not an event batch",
                               (unsigned)flags);
    e->shared = kind == FX_FLAG_EVENT_BATCH_SHARED;
    e->has_offsets = (flags & FX_FLAG_EVENT_OFFSETS) != 0;
    rd r = {body, len};
    int rv = 0;
    if (!e->shared)
        rv = rd_u64(&r, &e->subscription_id, "subscription_id", err);
    if (rv == 0 && e->has_offsets)
        rv = rd_u64(&r, &e->base_offset, "base_offset", err);
    if (rv == 0)
        rv = rd_entries(&r, UINT32_MAX, &e->count, &e->payloads, e->inline_payloads, err);
    return rv;
}

void fx_wire_event_batch_deinit(fx_wire_event_batch *e)
{
    if (e->payloads && e->payloads != e->inline_payloads)
        free(e->payloads);
    e->payloads = e->inline_payloads;
    e->count = 0;
}

uint16_t fx_wire_event_batch_flags(const fx_wire_event_batch *e)
{
    uint16_t f = e->shared ? FX_FLAG_EVENT_BATCH_SHARED : FX_FLAG_EVENT_BATCH;
    return e->has_offsets ? (uint16_t)(f | FX_FLAG_EVENT_OFFSETS) : f;
}

/* Bytes between the frame header and the count. */
static size_t event_prefix_len(const fx_wire_event_batch *e)
{
    return (e->shared ? 0 : 8) + (e->has_offsets ? 8 : 0);
}

static ssize_t event_body_size(const fx_wire_event_batch *e)
{
    size_t n = event_prefix_len(e);
    if (!entries_size(&n, e->payloads, e->count))
        return FX_EWIRE_TOO_LARGE;
    return (ssize_t)n;
}

ssize_t fx_wire_event_batch_frame_size(const fx_wire_event_batch *e)
{
    ssize_t n = event_body_size(e);
    return n < 0 ? n : n + (ssize_t)FX_WIRE_HEADER_LEN;
}

/* Writes header, subscription id / base offset and count; returns the end. */
static uint8_t *put_event_head(const fx_wire_event_batch *e, uint8_t *p, size_t body)
{
    p = fx_frame_header_put(p, fx_wire_event_batch_flags(e), (uint32_t)body);
    if (!e->shared)
        p = fx_put64(p, e->subscription_id);
    if (e->has_offsets)
        p = fx_put64(p, e->base_offset);
    return p;
}

ssize_t fx_wire_event_batch_encode(const fx_wire_event_batch *e, uint8_t *out, size_t cap)
{
    ssize_t body = event_body_size(e);
    if (body < 0)
        return body;
    size_t size = FX_WIRE_HEADER_LEN + (size_t)body;
    if (cap < size)
        return -ENOSPC;
    uint8_t *p = put_event_head(e, out, (size_t)body);
    put_entries(p, e->payloads, e->count);
    return (ssize_t)size;
}

size_t fx_wire_event_batch_meta_size(const fx_wire_event_batch *e)
{
    return FX_WIRE_HEADER_LEN + event_prefix_len(e) + 4 + 4 * (size_t)e->count;
}

ssize_t fx_wire_event_batch_encode_iov(const fx_wire_event_batch *e, uint8_t *meta, size_t meta_cap,
                                       struct iovec *iov, size_t iov_cap, size_t *piovcnt)
{
    ssize_t body = event_body_size(e);
    if (body < 0)
        return body;
    size_t need_iov = e->count ? 2 * (size_t)e->count : 1;
    if (meta_cap < fx_wire_event_batch_meta_size(e) || iov_cap < need_iov)
        return -ENOSPC;
    /* Piece 0 is the head plus the first length prefix; then each payload is
     * followed by the next prefix, so the pieces alternate meta, payload. */
    uint8_t *start = meta;
    uint8_t *p = fx_put32(put_event_head(e, meta, (size_t)body), e->count);
    size_t k = 0;
    for (uint32_t i = 0; i < e->count; i++) {
        p = fx_put32(p, (uint32_t)e->payloads[i].len);
        iov[k].iov_base = start;
        iov[k].iov_len = (size_t)(p - start);
        k++;
        iov[k].iov_base = (void *)e->payloads[i].ptr;
        iov[k].iov_len = e->payloads[i].len;
        k++;
        start = p;
    }
    if (e->count == 0) {
        iov[k].iov_base = start;
        iov[k].iov_len = (size_t)(p - start);
        k++;
    }
    *piovcnt = k;
    return (ssize_t)FX_WIRE_HEADER_LEN + body;
}
