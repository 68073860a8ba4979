/* Consumer-group frames (wire/group.h): decoders that check every length
 * against the bytes left and point into the input, and the encoders the
 * broker and the client use. Interim implementation written on the client
 * branch to the contract of group.h; the codec branch's version replaces it.
 * Pure functions; any thread. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wire/frame.h"
#include "wire/group.h"

#define RUN_HDR 24u /* u64 first | u32 attempt | u32 count | u64 skipped_before */
#define OP_HDR 23u  /* u8 kind | u64 first | u32 count | u32 attempt | u32 arg | u16 len */

int fx_wire_group_kind(const uint8_t *body, size_t len, fx_wire_err *err)
{
    if (len == 0)
        return fx_wire_err_set(err, FX_EWIRE_TRUNCATED, "empty group frame");
    if (body[0] < FX_GROUP_FRAME_BATCH || body[0] > FX_GROUP_FRAME_ACKED)
        return fx_wire_err_set(err, FX_EWIRE_KIND, "unknown group frame kind %u", body[0]);
    return body[0];
}

/* ---- GROUP_BATCH ------------------------------------------------------------ */

void fx_wire_group_batch_deinit(fx_wire_group_batch *b)
{
    if (b == NULL)
        return;
    free(b->runs);
    free(b->payloads);
    *b = (fx_wire_group_batch){0};
}

/* Reads the run headers and counts the records; checks every length. */
static int batch_scan(const uint8_t *p, size_t len, fx_wire_group_batch *b, fx_wire_err *err)
{
    size_t at = 5;
    uint64_t total = 0;
    for (uint32_t i = 0; i < b->nruns; i++) {
        if (len - at < RUN_HDR)
            return fx_wire_err_set(err, FX_EWIRE_TRUNCATED, "group batch run %u truncated", i);
        fx_wire_group_run *r = &b->runs[i];
        *r = (fx_wire_group_run){fx_be64(p + at), fx_be32(p + at + 8), fx_be32(p + at + 12),
                                 fx_be64(p + at + 16)};
        at += RUN_HDR;
        if (r->attempt == 0)
            return fx_wire_err_set(err, FX_EWIRE_FIELD_TYPE, "group batch run %u: attempt 0", i);
        if (r->count == 0 || (uint64_t)r->count > (len - at) / 4 ||
            r->first + r->count < r->first)
            return fx_wire_err_set(err, FX_EWIRE_COUNT, "group batch run %u: bad count", i);
        total += r->count;
        if (total > FX_GROUP_MAX_RECORDS)
            return fx_wire_err_set(err, FX_EWIRE_COUNT, "group batch: too many records");
        for (uint32_t k = 0; k < r->count; k++) {
            if (len - at < 4 || fx_be32(p + at) > len - at - 4)
                return fx_wire_err_set(err, FX_EWIRE_TRUNCATED, "group batch record truncated");
            at += 4 + fx_be32(p + at);
        }
    }
    if (at != len)
        return fx_wire_err_set(err, FX_EWIRE_TRAILING, "group batch: trailing bytes");
    b->nrecords = (uint32_t)total;
    return 0;
}

static void batch_slices(const uint8_t *p, fx_wire_group_batch *b)
{
    size_t at = 5;
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->nruns; i++) {
        at += RUN_HDR;
        for (uint32_t k = 0; k < b->runs[i].count; k++) {
            uint32_t l = fx_be32(p + at);
            b->payloads[n++] = (fx_wire_slice){p + at + 4, l};
            at += 4 + l;
        }
    }
}

int fx_wire_group_batch_decode(const uint8_t *body, size_t len, fx_wire_group_batch *b,
                               fx_wire_err *err)
{
    *b = (fx_wire_group_batch){0};
    if (len < 5)
        return fx_wire_err_set(err, FX_EWIRE_TRUNCATED, "group batch truncated");
    if (body[0] != FX_GROUP_FRAME_BATCH)
        return fx_wire_err_set(err, FX_EWIRE_KIND, "not a group batch");
    uint32_t nruns = fx_be32(body + 1);
    if (nruns == 0 || nruns > FX_GROUP_MAX_RUNS || nruns > (len - 5) / RUN_HDR)
        return fx_wire_err_set(err, FX_EWIRE_COUNT, "group batch: bad run count %u", nruns);
    b->nruns = nruns;
    b->runs = calloc(nruns, sizeof(*b->runs));
    if (b->runs == NULL)
        return -ENOMEM;
    int rv = batch_scan(body, len, b, err);
    if (rv == 0) {
        b->payloads = calloc(b->nrecords, sizeof(*b->payloads));
        rv = b->payloads == NULL ? -ENOMEM : 0;
    }
    if (rv != 0) {
        fx_wire_group_batch_deinit(b);
        return rv;
    }
    batch_slices(body, b);
    return 0;
}

size_t fx_wire_group_batch_frame_size(uint32_t nruns, uint32_t nrecords, uint64_t payload_bytes)
{
    return FX_WIRE_HEADER_LEN + 5 + (size_t)nruns * RUN_HDR + (size_t)nrecords * 4 +
           (size_t)payload_bytes;
}

int fx_wire_group_batch_begin(fx_wire_group_builder *gb, uint8_t *out, size_t cap)
{
    *gb = (fx_wire_group_builder){.out = out, .cap = cap};
    if (cap < FX_WIRE_HEADER_LEN + 5)
        return FX_ETOOBIG;
    gb->out[FX_WIRE_HEADER_LEN] = FX_GROUP_FRAME_BATCH;
    fx_put32(gb->out + FX_WIRE_HEADER_LEN + 1, 0);
    gb->len = FX_WIRE_HEADER_LEN + 5;
    return 0;
}

static void run_close(fx_wire_group_builder *gb)
{
    if (gb->run_at != 0)
        fx_put32(gb->out + gb->run_at + 12, gb->run_count);
    gb->run_at = 0;
}

int fx_wire_group_batch_run(fx_wire_group_builder *gb, uint64_t first, uint32_t attempt,
                            uint64_t skipped_before)
{
    if (attempt == 0 || (gb->run_at != 0 && gb->run_count == 0))
        return -EINVAL;
    if (gb->nruns >= FX_GROUP_MAX_RUNS || gb->cap - gb->len < RUN_HDR)
        return FX_ETOOBIG;
    run_close(gb);
    uint8_t *p = gb->out + gb->len;
    fx_put64(fx_put32(fx_put32(fx_put64(p, first), attempt), 0), skipped_before);
    gb->run_at = gb->len;
    gb->run_count = 0;
    gb->len += RUN_HDR;
    gb->nruns++;
    return 0;
}

int fx_wire_group_batch_record(fx_wire_group_builder *gb, const void *p, uint32_t len)
{
    if (gb->run_at == 0)
        return -EINVAL;
    if (gb->records >= FX_GROUP_MAX_RECORDS || gb->cap - gb->len < 4 ||
        gb->cap - gb->len - 4 < len)
        return FX_ETOOBIG;
    fx_put32(gb->out + gb->len, len);
    if (len > 0)
        memcpy(gb->out + gb->len + 4, p, len);
    gb->len += 4 + (size_t)len;
    gb->run_count++;
    gb->records++;
    return 0;
}

ssize_t fx_wire_group_batch_finish(fx_wire_group_builder *gb)
{
    if (gb->nruns == 0 || gb->run_count == 0)
        return -EINVAL;
    run_close(gb);
    fx_put32(gb->out + FX_WIRE_HEADER_LEN + 1, gb->nruns);
    fx_frame_header_put(gb->out, FX_FLAG_FELIXC, (uint32_t)(gb->len - FX_WIRE_HEADER_LEN));
    return (ssize_t)gb->len;
}

/* ---- GROUP_ACKS --------------------------------------------------------------- */

void fx_wire_group_acks_deinit(fx_wire_group_acks *a)
{
    if (a == NULL)
        return;
    free(a->ops);
    *a = (fx_wire_group_acks){0};
}

/* Checks one op the way the decoder does. */
static int op_check(const fx_wire_group_op *o, fx_wire_err *err)
{
    if (o->kind < FX_GROUP_OP_ACK || o->kind > FX_GROUP_OP_RELEASE)
        return fx_wire_err_set(err, FX_EWIRE_FIELD_TYPE, "unknown group op kind %d", o->kind);
    if (o->count == 0 || (o->kind != FX_GROUP_OP_ACK && o->count != 1) ||
        o->first + o->count < o->first)
        return fx_wire_err_set(err, FX_EWIRE_COUNT, "group op: bad count %u", o->count);
    if (o->reason.len > FX_GROUP_REASON_MAX || !fx_wire_utf8_valid(o->reason.ptr, o->reason.len))
        return fx_wire_err_set(err, FX_EWIRE_UTF8, "group op: bad term reason");
    return 0;
}

static bool nops_ok(uint64_t request_id, uint32_t nops)
{
    /* A request with no ops asks only for a GROUP_ACKED (ack_sync). */
    return nops <= FX_GROUP_MAX_OPS && (nops > 0 || request_id != 0);
}

int fx_wire_group_acks_decode(const uint8_t *body, size_t len, fx_wire_group_acks *a,
                              fx_wire_err *err)
{
    *a = (fx_wire_group_acks){0};
    if (len < 13)
        return fx_wire_err_set(err, FX_EWIRE_TRUNCATED, "group acks truncated");
    if (body[0] != FX_GROUP_FRAME_ACKS)
        return fx_wire_err_set(err, FX_EWIRE_FIELD_TYPE, "not a group acks frame");
    a->request_id = fx_be64(body + 1);
    uint32_t n = fx_be32(body + 9);
    if (!nops_ok(a->request_id, n) || n > (len - 13) / OP_HDR)
        return fx_wire_err_set(err, FX_EWIRE_COUNT, "group acks: bad op count %u", n);
    a->ops = n > 0 ? calloc(n, sizeof(*a->ops)) : NULL;
    if (n > 0 && a->ops == NULL)
        return -ENOMEM;
    size_t at = 13;
    for (uint32_t i = 0; i < n; i++) {
        if (len - at < OP_HDR) {
            fx_wire_group_acks_deinit(a);
            return fx_wire_err_set(err, FX_EWIRE_TRUNCATED, "group op %u truncated", i);
        }
        const uint8_t *p = body + at;
        fx_wire_group_op *o = &a->ops[i];
        *o = (fx_wire_group_op){.kind = (fx_group_op_kind)p[0], .first = fx_be64(p + 1),
                                .count = fx_be32(p + 9), .attempt = fx_be32(p + 13),
                                .arg = fx_be32(p + 17)};
        uint16_t rl = fx_be16(p + 21);
        at += OP_HDR;
        if (len - at < rl) {
            fx_wire_group_acks_deinit(a);
            return fx_wire_err_set(err, FX_EWIRE_TRUNCATED, "group op %u reason truncated", i);
        }
        o->reason = (fx_wire_slice){body + at, rl};
        at += rl;
        a->nops = i + 1;
        int rv = op_check(o, err);
        if (rv != 0) {
            fx_wire_group_acks_deinit(a);
            return rv;
        }
    }
    if (at != len) {
        fx_wire_group_acks_deinit(a);
        return fx_wire_err_set(err, FX_EWIRE_TRAILING, "group acks: trailing bytes");
    }
    return 0;
}

size_t fx_wire_group_acks_frame_size(const fx_wire_group_acks *a)
{
    size_t n = FX_WIRE_HEADER_LEN + 13 + (size_t)a->nops * OP_HDR;
    for (uint32_t i = 0; i < a->nops; i++)
        n += a->ops[i].reason.len;
    return n;
}

ssize_t fx_wire_group_acks_encode(const fx_wire_group_acks *a, uint8_t *out, size_t cap)
{
    if (!nops_ok(a->request_id, a->nops))
        return -EINVAL;
    for (uint32_t i = 0; i < a->nops; i++) {
        if (op_check(&a->ops[i], NULL) != 0)
            return -EINVAL;
    }
    size_t n = fx_wire_group_acks_frame_size(a);
    if (n > cap)
        return FX_ETOOBIG;
    uint8_t *p = fx_frame_header_put(out, FX_FLAG_FELIXC, (uint32_t)(n - FX_WIRE_HEADER_LEN));
    *p++ = FX_GROUP_FRAME_ACKS;
    p = fx_put32(fx_put64(p, a->request_id), a->nops);
    for (uint32_t i = 0; i < a->nops; i++) {
        const fx_wire_group_op *o = &a->ops[i];
        *p++ = (uint8_t)o->kind;
        p = fx_put32(fx_put32(fx_put32(fx_put64(p, o->first), o->count), o->attempt), o->arg);
        p = fx_put16(p, (uint16_t)o->reason.len);
        if (o->reason.len > 0)
            memcpy(p, o->reason.ptr, o->reason.len);
        p += o->reason.len;
    }
    return (ssize_t)n;
}

/* ---- GROUP_ACKED --------------------------------------------------------------- */

void fx_wire_group_acked_deinit(fx_wire_group_acked *a)
{
    if (a == NULL)
        return;
    free(a->refused);
    *a = (fx_wire_group_acked){0};
}

int fx_wire_group_acked_decode(const uint8_t *body, size_t len, fx_wire_group_acked *a,
                               fx_wire_err *err)
{
    *a = (fx_wire_group_acked){0};
    if (len < 21)
        return fx_wire_err_set(err, FX_EWIRE_TRUNCATED, "group acked truncated");
    if (body[0] != FX_GROUP_FRAME_ACKED)
        return fx_wire_err_set(err, FX_EWIRE_KIND, "not a group acked frame");
    a->request_id = fx_be64(body + 1);
    a->floor = fx_be64(body + 9);
    uint32_t n = fx_be32(body + 17);
    if (n > FX_GROUP_MAX_OPS || n > (len - 21) / 9)
        return fx_wire_err_set(err, FX_EWIRE_COUNT, "group acked: bad refusal count %u", n);
    if (21 + (size_t)n * 9 != len)
        return fx_wire_err_set(err, FX_EWIRE_TRAILING, "group acked: trailing bytes");
    a->refused = n > 0 ? calloc(n, sizeof(*a->refused)) : NULL;
    if (n > 0 && a->refused == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *p = body + 21 + (size_t)i * 9;
        if (p[8] != FX_GROUP_WHY_STALE && p[8] != FX_GROUP_WHY_INVALID) {
            fx_wire_group_acked_deinit(a);
            return fx_wire_err_set(err, FX_EWIRE_FIELD_TYPE, "group acked: bad why %u", p[8]);
        }
        a->refused[i] = (fx_wire_group_refusal){fx_be64(p), (fx_group_why)p[8]};
    }
    a->nrefused = n;
    return 0;
}

size_t fx_wire_group_acked_frame_size(const fx_wire_group_acked *a)
{
    return FX_WIRE_HEADER_LEN + 21 + (size_t)a->nrefused * 9;
}

ssize_t fx_wire_group_acked_encode(const fx_wire_group_acked *a, uint8_t *out, size_t cap)
{
    if (a->nrefused > FX_GROUP_MAX_OPS)
        return -EINVAL;
    size_t n = fx_wire_group_acked_frame_size(a);
    if (n > cap)
        return FX_ETOOBIG;
    uint8_t *p = fx_frame_header_put(out, FX_FLAG_FELIXC, (uint32_t)(n - FX_WIRE_HEADER_LEN));
    *p++ = FX_GROUP_FRAME_ACKED;
    p = fx_put32(fx_put64(fx_put64(p, a->request_id), a->floor), a->nrefused);
    for (uint32_t i = 0; i < a->nrefused; i++) {
        p = fx_put64(p, a->refused[i].offset);
        *p++ = (uint8_t)a->refused[i].why;
    }
    return (ssize_t)n;
}
