/* Consumer-group frames of Felix-C (flag 0x8000): GROUP_BATCH, GROUP_ACKS and
 * GROUP_ACKED. Decoders walk a bounds-checked cursor and check every count
 * against the bytes left before they allocate; encoders refuse what the
 * decoders refuse. Pure functions; any thread. */
#include "wire/group.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wire/frame.h"
#include "wire/reader.h"

/* Fixed sizes of the pieces of the three bodies. */
#define BATCH_HEAD 5u  /* kind, nruns */
#define RUN_HEAD 24u   /* first, attempt, count, skipped_before */
#define RECORD_MIN 4u  /* a record's length prefix */
#define ACKS_HEAD 13u  /* kind, request_id, nops */
#define OP_MIN 23u     /* kind, first, count, attempt, arg, reason_len */
#define ACKED_HEAD 21u /* kind, request_id, floor, nrefused */
#define REFUSAL 9u     /* offset, why */

/* ---- bounds-checked reader --------------------------------------------------------- */


static int truncated(fx_wire_err *err, const char *what)
{
    return fx_rd_truncated(err, "group", what);
}

static int trailing(const fx_rd *r, fx_wire_err *err)
{
    return fx_rd_trailing(r, err, "group");
}

/* Reads the kind byte and checks it is |want|. */
static int rd_kind(fx_rd *r, unsigned want, fx_wire_err *err)
{
    const uint8_t *p = fx_rd_take(r, 1);
    if (!p)
        return truncated(err, "the frame kind");
    if (p[0] != want)
        return fx_wire_err_set(err, FX_EWIRE_KIND, "group frame kind %u where %u was expected",
                               (unsigned)p[0], want);
    return 0;
}

/* Checks an item count read from the wire: at least |min|, at most |max|, and
 * no more than the |left| bytes can hold when each item takes at least
 * |item_size| bytes, so nothing is allocated for a count the body cannot
 * hold. */
static int check_count(uint32_t n, uint32_t min, uint32_t max, size_t left, size_t item_size,
                       const char *what, fx_wire_err *err)
{
    if (n < min)
        return fx_wire_err_set(err, FX_EWIRE_COUNT, "group frame with %u %s", (unsigned)n, what);
    if (n > max)
        return fx_wire_err_set(err, FX_EWIRE_COUNT, "%u %s exceed the limit of %u", (unsigned)n,
                               what, (unsigned)max);
    if (n > left / item_size)
        return fx_wire_err_set(err, FX_EWIRE_COUNT,
                               "%u %s larger than the %zu bytes that remain allow", (unsigned)n,
                               what, left);
    return 0;
}

/* Reads a u32 item count and checks it as check_count() does. */
static int rd_count(fx_rd *r, uint32_t *pn, uint32_t min, uint32_t max, size_t item_size,
                    const char *what, fx_wire_err *err)
{
    const uint8_t *p = fx_rd_take(r, 4);
    if (!p)
        return truncated(err, what);
    *pn = fx_be32(p);
    return check_count(*pn, min, max, r->left, item_size, what, err);
}

/* True if offsets |first| .. |first| + |count| - 1 and the exclusive end
 * |first| + |count| fit a u64. */
static bool range_fits(uint64_t first, uint32_t count)
{
    return count <= UINT64_MAX - first;
}

int fx_wire_group_kind(const uint8_t *body, size_t len, fx_wire_err *err)
{
    if (len == 0)
        return truncated(err, "the frame kind");
    if (body[0] < FX_GROUP_FRAME_BATCH || body[0] > FX_GROUP_FRAME_ACKED)
        return fx_wire_err_set(err, FX_EWIRE_KIND, "unknown group frame kind %u",
                               (unsigned)body[0]);
    return body[0];
}

/* ---- GROUP_BATCH ------------------------------------------------------------------- */

/* Reads one run header into |run| (checked) and its records; |payloads| is
 * NULL on the first pass, which only validates and counts. |*precords|
 * counts the records of all runs so far. */
static int rd_run(fx_rd *r, uint32_t i, fx_wire_group_run *run, fx_wire_slice *payloads,
                  uint32_t *precords, fx_wire_err *err)
{
    const uint8_t *p = fx_rd_take(r, RUN_HEAD);
    if (!p)
        return truncated(err, "a run header");
    run->first = fx_be64(p);
    run->attempt = fx_be32(p + 8);
    run->count = fx_be32(p + 12);
    run->skipped_before = fx_be64(p + 16);
    if (run->attempt == 0)
        return fx_wire_err_set(err, FX_EWIRE_FIELD_TYPE, "run %u has attempt 0", (unsigned)i);
    int rv = check_count(run->count, 1, FX_GROUP_MAX_RECORDS - *precords, r->left, RECORD_MIN,
                         "records", err);
    if (rv < 0)
        return rv;
    if (!range_fits(run->first, run->count))
        return fx_wire_err_set(err, FX_EWIRE_COUNT, "run %u passes the last offset", (unsigned)i);
    for (uint32_t k = 0; k < run->count; k++) {
        const uint8_t *lp = fx_rd_take(r, 4);
        const uint8_t *data = lp ? fx_rd_take(r, fx_be32(lp)) : NULL;
        if (!data)
            return truncated(err, "a record");
        if (payloads)
            payloads[*precords + k] = (fx_wire_slice){data, fx_be32(lp)};
    }
    *precords += run->count;
    return 0;
}

/* Walks the whole body; fills |b|'s arrays when they are allocated. */
static int rd_batch(const uint8_t *body, size_t len, fx_wire_group_batch *b, fx_wire_err *err)
{
    fx_rd r = {body, len};
    int rv = rd_kind(&r, FX_GROUP_FRAME_BATCH, err);
    if (rv == 0)
        rv = rd_count(&r, &b->nruns, 1, FX_GROUP_MAX_RUNS, RUN_HEAD + RECORD_MIN, "runs", err);
    uint32_t records = 0;
    for (uint32_t i = 0; rv == 0 && i < b->nruns; i++) {
        fx_wire_group_run run;
        rv = rd_run(&r, i, b->runs ? &b->runs[i] : &run, b->payloads, &records, err);
    }
    if (rv == 0)
        rv = trailing(&r, err);
    b->nrecords = records;
    return rv;
}

int fx_wire_group_batch_decode(const uint8_t *body, size_t len, fx_wire_group_batch *b,
                               fx_wire_err *err)
{
    /* Two passes: the first checks every byte and counts the records, so the
     * arrays are sized exactly and only for a body that is valid. */
    memset(b, 0, sizeof(*b));
    int rv = rd_batch(body, len, b, err);
    if (rv < 0) {
        memset(b, 0, sizeof(*b));
        return rv;
    }
    fx_wire_group_batch full = {
        .runs = malloc((size_t)b->nruns * sizeof(*full.runs)),
        .payloads = malloc((size_t)b->nrecords * sizeof(*full.payloads)),
    };
    if (!full.runs || !full.payloads) {
        fx_wire_group_batch_deinit(&full);
        memset(b, 0, sizeof(*b));
        return fx_wire_err_set(err, -ENOMEM, "out of memory for %u runs", (unsigned)b->nruns);
    }
    rv = rd_batch(body, len, &full, NULL);
    *b = full;
    return rv;
}

void fx_wire_group_batch_deinit(fx_wire_group_batch *b)
{
    free(b->runs);
    free(b->payloads);
    memset(b, 0, sizeof(*b));
}

/* ---- GROUP_BATCH builder ----------------------------------------------------------- */

size_t fx_wire_group_batch_frame_size(uint32_t nruns, uint32_t nrecords, uint64_t payload_bytes)
{
    uint64_t fixed = FX_WIRE_HEADER_LEN + BATCH_HEAD + (uint64_t)RUN_HEAD * nruns +
                     (uint64_t)RECORD_MIN * nrecords;
    if (payload_bytes > SIZE_MAX - fixed)
        return SIZE_MAX;
    return (size_t)(fixed + payload_bytes);
}

/* True if |n| more bytes fit both |gb|'s buffer and the u32 length field. */
static bool builder_room(const fx_wire_group_builder *gb, size_t n)
{
    size_t limit = gb->cap;
    if (limit > FX_WIRE_HEADER_LEN + (size_t)UINT32_MAX)
        limit = FX_WIRE_HEADER_LEN + (size_t)UINT32_MAX;
    return n <= limit - gb->len;
}

int fx_wire_group_batch_begin(fx_wire_group_builder *gb, uint8_t *out, size_t cap)
{
    if (cap < FX_WIRE_HEADER_LEN + BATCH_HEAD)
        return FX_ETOOBIG;
    /* The length and the run count are written again by finish. */
    uint8_t *p = fx_frame_header_put(out, FX_FLAG_FELIXC, 0);
    *p++ = FX_GROUP_FRAME_BATCH;
    fx_put32(p, 0);
    *gb = (fx_wire_group_builder){.out = out, .cap = cap, .len = FX_WIRE_HEADER_LEN + BATCH_HEAD};
    return 0;
}

/* Writes the open run's record count into its header. */
static void close_run(fx_wire_group_builder *gb)
{
    if (gb->run_at != 0)
        fx_put32(gb->out + gb->run_at + 12, gb->run_count);
}

int fx_wire_group_batch_run(fx_wire_group_builder *gb, uint64_t first, uint32_t attempt,
                            uint64_t skipped_before)
{
    if (attempt == 0 || (gb->run_at != 0 && gb->run_count == 0))
        return -EINVAL;
    if (gb->nruns >= FX_GROUP_MAX_RUNS)
        return FX_EWIRE_COUNT;
    if (!builder_room(gb, RUN_HEAD))
        return FX_ETOOBIG;
    close_run(gb);
    uint8_t *p = gb->out + gb->len;
    p = fx_put64(p, first);
    p = fx_put32(p, attempt);
    p = fx_put32(p, 0);
    fx_put64(p, skipped_before);
    gb->run_at = gb->len;
    gb->run_count = 0;
    gb->len += RUN_HEAD;
    gb->nruns++;
    return 0;
}

int fx_wire_group_batch_record(fx_wire_group_builder *gb, const void *p, uint32_t len)
{
    if (gb->run_at == 0)
        return -EINVAL;
    if (gb->records >= FX_GROUP_MAX_RECORDS ||
        !range_fits(fx_be64(gb->out + gb->run_at), gb->run_count + 1))
        return FX_EWIRE_COUNT;
    if (!builder_room(gb, (size_t)RECORD_MIN + len))
        return FX_ETOOBIG;
    uint8_t *q = fx_put32(gb->out + gb->len, len);
    if (len)
        memcpy(q, p, len);
    gb->len += (size_t)RECORD_MIN + len;
    gb->run_count++;
    gb->records++;
    return 0;
}

ssize_t fx_wire_group_batch_finish(fx_wire_group_builder *gb)
{
    if (gb->nruns == 0 || gb->run_count == 0)
        return -EINVAL;
    close_run(gb);
    fx_frame_header_put(gb->out, FX_FLAG_FELIXC, (uint32_t)(gb->len - FX_WIRE_HEADER_LEN));
    fx_put32(gb->out + FX_WIRE_HEADER_LEN + 1, gb->nruns);
    return (ssize_t)gb->len;
}

/* ---- GROUP_ACKS -------------------------------------------------------------------- */

/* The checks the decoder and the encoder share: 0, or the FX_EWIRE_* code and
 * its message. */
static int op_check(const fx_wire_group_op *op, uint32_t i, fx_wire_err *err)
{
    if (op->kind < FX_GROUP_OP_ACK || op->kind > FX_GROUP_OP_LEAVE)
        return fx_wire_err_set(err, FX_EWIRE_FIELD_TYPE, "op %u has unknown kind %u", (unsigned)i,
                               (unsigned)op->kind);
    if (op->count == 0 || (op->kind != FX_GROUP_OP_ACK && op->count != 1))
        return fx_wire_err_set(err, FX_EWIRE_COUNT, "op %u (kind %u) covers %u records",
                               (unsigned)i, (unsigned)op->kind, (unsigned)op->count);
    if (!range_fits(op->first, op->count))
        return fx_wire_err_set(err, FX_EWIRE_COUNT, "op %u passes the last offset", (unsigned)i);
    if (op->reason.len > 0 && op->kind != FX_GROUP_OP_TERM)
        return fx_wire_err_set(err, FX_EWIRE_FIELD_TYPE, "op %u (kind %u) carries a reason",
                               (unsigned)i, (unsigned)op->kind);
    if (op->reason.len > FX_GROUP_REASON_MAX)
        return fx_wire_err_set(err, FX_EWIRE_COUNT, "op %u reason of %zu bytes exceeds %u",
                               (unsigned)i, op->reason.len, FX_GROUP_REASON_MAX);
    if (!fx_wire_utf8_valid(op->reason.ptr, op->reason.len))
        return fx_wire_err_set(err, FX_EWIRE_UTF8, "op %u reason is not valid UTF-8", (unsigned)i);
    return 0;
}

static int rd_op(fx_rd *r, uint32_t i, fx_wire_group_op *op, fx_wire_err *err)
{
    const uint8_t *p = fx_rd_take(r, OP_MIN);
    if (!p)
        return truncated(err, "an op");
    op->kind = (fx_group_op_kind)p[0];
    op->first = fx_be64(p + 1);
    op->count = fx_be32(p + 9);
    op->attempt = fx_be32(p + 13);
    op->arg = fx_be32(p + 17);
    op->reason.len = fx_be16(p + 21);
    op->reason.ptr = fx_rd_take(r, op->reason.len);
    if (!op->reason.ptr)
        return truncated(err, "an op's reason");
    return op_check(op, i, err);
}

int fx_wire_group_acks_decode(const uint8_t *body, size_t len, fx_wire_group_acks *a,
                              fx_wire_err *err)
{
    memset(a, 0, sizeof(*a));
    fx_rd r = {body, len};
    int rv = rd_kind(&r, FX_GROUP_FRAME_ACKS, err);
    const uint8_t *p = NULL;
    if (rv == 0 && !(p = fx_rd_take(&r, 8)))
        rv = truncated(err, "request_id");
    uint32_t nops = 0;
    /* No op at all is a sync barrier: only with a request id to answer. */
    if (rv == 0)
        rv = rd_count(&r, &nops, fx_be64(p) != 0 ? 0 : 1, FX_GROUP_MAX_OPS, OP_MIN, "ops", err);
    if (rv < 0)
        return rv;
    fx_wire_group_op *ops = malloc((size_t)(nops > 0 ? nops : 1) * sizeof(*ops));
    if (!ops)
        return fx_wire_err_set(err, -ENOMEM, "out of memory for %u ops", (unsigned)nops);
    for (uint32_t i = 0; rv == 0 && i < nops; i++)
        rv = rd_op(&r, i, &ops[i], err);
    if (rv == 0)
        rv = trailing(&r, err);
    if (rv < 0) {
        free(ops);
        return rv;
    }
    *a = (fx_wire_group_acks){.request_id = fx_be64(p), .nops = nops, .ops = ops};
    return 0;
}

void fx_wire_group_acks_deinit(fx_wire_group_acks *a)
{
    free(a->ops);
    memset(a, 0, sizeof(*a));
}

size_t fx_wire_group_acks_frame_size(const fx_wire_group_acks *a)
{
    size_t n = FX_WIRE_HEADER_LEN + ACKS_HEAD;
    for (uint32_t i = 0; i < a->nops; i++)
        n += OP_MIN + a->ops[i].reason.len;
    return n;
}

ssize_t fx_wire_group_acks_encode(const fx_wire_group_acks *a, uint8_t *out, size_t cap)
{
    if ((a->nops == 0 && a->request_id == 0) || a->nops > FX_GROUP_MAX_OPS ||
        (a->nops > 0 && !a->ops))
        return -EINVAL;
    for (uint32_t i = 0; i < a->nops; i++)
        if (op_check(&a->ops[i], i, NULL) < 0)
            return -EINVAL;
    size_t size = fx_wire_group_acks_frame_size(a);
    if (cap < size)
        return FX_ETOOBIG;
    uint8_t *p = fx_frame_header_put(out, FX_FLAG_FELIXC, (uint32_t)(size - FX_WIRE_HEADER_LEN));
    *p++ = FX_GROUP_FRAME_ACKS;
    p = fx_put64(p, a->request_id);
    p = fx_put32(p, a->nops);
    for (uint32_t i = 0; i < a->nops; i++) {
        const fx_wire_group_op *op = &a->ops[i];
        *p++ = (uint8_t)op->kind;
        p = fx_put64(p, op->first);
        p = fx_put32(p, op->count);
        p = fx_put32(p, op->attempt);
        p = fx_put32(p, op->arg);
        p = fx_put16(p, (uint16_t)op->reason.len);
        if (op->reason.len)
            memcpy(p, op->reason.ptr, op->reason.len);
        p += op->reason.len;
    }
    return (ssize_t)size;
}

/* ---- GROUP_ACKED ------------------------------------------------------------------- */

static bool why_valid(unsigned why)
{
    return why == FX_GROUP_WHY_STALE || why == FX_GROUP_WHY_INVALID;
}

int fx_wire_group_acked_decode(const uint8_t *body, size_t len, fx_wire_group_acked *a,
                               fx_wire_err *err)
{
    memset(a, 0, sizeof(*a));
    fx_rd r = {body, len};
    int rv = rd_kind(&r, FX_GROUP_FRAME_ACKED, err);
    const uint8_t *p = NULL;
    if (rv == 0 && !(p = fx_rd_take(&r, 16)))
        rv = truncated(err, "request_id and floor");
    uint32_t n = 0;
    if (rv == 0)
        rv = rd_count(&r, &n, 0, FX_GROUP_MAX_REFUSED, REFUSAL, "refusals", err);
    if (rv < 0)
        return rv;
    fx_wire_group_refusal *refused = NULL;
    if (n > 0 && !(refused = malloc((size_t)n * sizeof(*refused))))
        return fx_wire_err_set(err, -ENOMEM, "out of memory for %u refusals", (unsigned)n);
    for (uint32_t i = 0; rv == 0 && i < n; i++) {
        const uint8_t *q = fx_rd_take(&r, REFUSAL); /* cannot fail: n <= left / 9 */
        refused[i] = (fx_wire_group_refusal){fx_be64(q), (fx_group_why)q[8]};
        if (!why_valid(q[8]))
            rv = fx_wire_err_set(err, FX_EWIRE_FIELD_TYPE, "refusal %u has unknown why %u",
                                 (unsigned)i, (unsigned)q[8]);
    }
    if (rv == 0)
        rv = trailing(&r, err);
    if (rv < 0) {
        free(refused);
        return rv;
    }
    *a = (fx_wire_group_acked){
        .request_id = fx_be64(p), .floor = fx_be64(p + 8), .nrefused = n, .refused = refused};
    return 0;
}

void fx_wire_group_acked_deinit(fx_wire_group_acked *a)
{
    free(a->refused);
    memset(a, 0, sizeof(*a));
}

size_t fx_wire_group_acked_frame_size(const fx_wire_group_acked *a)
{
    return FX_WIRE_HEADER_LEN + ACKED_HEAD + (size_t)REFUSAL * a->nrefused;
}

ssize_t fx_wire_group_acked_encode(const fx_wire_group_acked *a, uint8_t *out, size_t cap)
{
    if (a->nrefused > FX_GROUP_MAX_REFUSED || (a->nrefused > 0 && !a->refused))
        return -EINVAL;
    for (uint32_t i = 0; i < a->nrefused; i++)
        if (!why_valid(a->refused[i].why))
            return -EINVAL;
    size_t size = fx_wire_group_acked_frame_size(a);
    if (cap < size)
        return FX_ETOOBIG;
    uint8_t *p = fx_frame_header_put(out, FX_FLAG_FELIXC, (uint32_t)(size - FX_WIRE_HEADER_LEN));
    *p++ = FX_GROUP_FRAME_ACKED;
    p = fx_put64(p, a->request_id);
    p = fx_put64(p, a->floor);
    p = fx_put32(p, a->nrefused);
    for (uint32_t i = 0; i < a->nrefused; i++) {
        p = fx_put64(p, a->refused[i].offset);
        *p++ = (uint8_t)a->refused[i].why;
    }
    return (ssize_t)size;
}
