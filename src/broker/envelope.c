/* Envelopes and the feeder's coalescer. The shared frame is cached in an
 * atomic pointer so envelopes stay safe to share across threads, although
 * every feeder of a stream normally runs on that stream's worker loop.
 * Coalescing only chains references to frames that already exist; the only
 * bytes it encodes are per-subscriber frames for partial batches. */
#include "broker/envelope.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/metrics.h"
#include "felix/error.h"
#include "wire/binary.h"

struct fx_envelope {
    atomic_size_t refs;
    uint64_t handle_id;
    uint64_t base_offset;
    uint32_t count;
    size_t payload_bytes;
    fx_buf *backing;
    _Atomic(fx_buf *) shared;
    fx_wire_slice payloads[];
};

int fx_envelope_new(fx_envelope **pe, uint64_t handle_id, uint64_t base_offset, fx_buf *backing,
                    const fx_wire_slice *payloads, uint32_t count)
{
    if (count == 0)
        return -EINVAL;
    fx_envelope *e = malloc(sizeof(*e) + (size_t)count * sizeof(e->payloads[0]));
    if (e == NULL)
        return -ENOMEM;
    atomic_init(&e->refs, 1);
    e->handle_id = handle_id;
    e->base_offset = base_offset;
    e->count = count;
    e->payload_bytes = 0;
    for (uint32_t i = 0; i < count; i++) {
        e->payloads[i] = payloads[i];
        e->payload_bytes += payloads[i].len;
    }
    e->backing = fx_buf_ref(backing);
    atomic_init(&e->shared, NULL);
    *pe = e;
    return 0;
}

fx_envelope *fx_envelope_ref(fx_envelope *e)
{
    if (e != NULL)
        atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
    return e;
}

void fx_envelope_unref(fx_envelope *e)
{
    if (e == NULL || atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1)
        return;
    fx_buf_unref(atomic_load_explicit(&e->shared, memory_order_acquire));
    fx_buf_unref(e->backing);
    free(e);
}

uint64_t fx_envelope_handle_id(const fx_envelope *e)
{
    return e->handle_id;
}

uint64_t fx_envelope_base_offset(const fx_envelope *e)
{
    return e->base_offset;
}

uint32_t fx_envelope_count(const fx_envelope *e)
{
    return e->count;
}

uint64_t fx_envelope_end_offset(const fx_envelope *e)
{
    return e->base_offset + e->count;
}

size_t fx_envelope_payload_bytes(const fx_envelope *e)
{
    return e->payload_bytes;
}

fx_wire_slice fx_envelope_payload(const fx_envelope *e, uint32_t i)
{
    return e->payloads[i];
}

/* ---- encoding -------------------------------------------------------------- */

/* Describes payloads [from, from + n) of |e| as an event batch (borrowing the
 * slice array: nothing to release). */
static fx_wire_event_batch batch_of(const fx_envelope *e, bool shared, uint64_t sub_id,
                                    uint32_t from, uint32_t n)
{
    return (fx_wire_event_batch){
        .shared = shared,
        .has_offsets = true,
        .subscription_id = sub_id,
        .base_offset = e->base_offset + from,
        .count = n,
        .payloads = (fx_wire_slice *)&e->payloads[from],
    };
}

/* Encodes |b| into a new buffer of |size| bytes, its frame size (negative:
 * the error of fx_wire_event_batch_frame_size). */
static int encode(const fx_wire_event_batch *b, ssize_t size, fx_buf **pframe)
{
    if (size < 0)
        return (int)size;
    fx_buf *f;
    int rv = fx_buf_new(&f, (size_t)size);
    if (rv != 0)
        return rv;
    ssize_t w = fx_wire_event_batch_encode(b, fx_buf_data_mut(f), (size_t)size);
    if (w != size) {
        fx_buf_unref(f);
        return w < 0 ? (int)w : FX_EINTERNAL;
    }
    *pframe = f;
    return 0;
}

/* The shared frame's size from the payload total the envelope keeps (no
 * walk over its payloads): header, base offset, count, then a 4-byte length
 * per payload; FX_EWIRE_TOO_LARGE when the body overflows the u32 length, as
 * fx_wire_event_batch_frame_size() says for the same batch. */
static ssize_t shared_size(const fx_envelope *e)
{
    uint64_t body = 8 + 4 + 4 * (uint64_t)e->count + (uint64_t)e->payload_bytes;
    if (body > UINT32_MAX)
        return FX_EWIRE_TOO_LARGE;
    return (ssize_t)(FX_WIRE_HEADER_LEN + body);
}

size_t fx_envelope_shared_frame_size(const fx_envelope *e)
{
    ssize_t size = shared_size(e);
    return size < 0 ? SIZE_MAX : (size_t)size;
}

size_t fx_envelope_sub_frame_size(const fx_envelope *e, uint32_t from, uint32_t n)
{
    fx_wire_event_batch b = batch_of(e, false, 0, from, n);
    ssize_t size = fx_wire_event_batch_frame_size(&b);
    return size < 0 ? SIZE_MAX : (size_t)size;
}

int fx_envelope_shared_frame(fx_envelope *e, fx_buf **pframe)
{
    fx_buf *f = atomic_load_explicit(&e->shared, memory_order_acquire);
    if (f == NULL) {
        fx_wire_event_batch b = batch_of(e, true, 0, 0, e->count);
        int rv = encode(&b, shared_size(e), &f);
        if (rv != 0)
            return rv;
        FX_COUNTER_INC(sub_shared_frame_encodes);
        fx_buf *expected = NULL;
        if (!atomic_compare_exchange_strong_explicit(&e->shared, &expected, f, memory_order_acq_rel,
                                                     memory_order_acquire)) {
            fx_buf_unref(f); /* another thread cached one first: use it */
            f = expected;
        }
    }
    *pframe = fx_buf_ref(f);
    return 0;
}

bool fx_envelope_has_shared_frame(const fx_envelope *e)
{
    return atomic_load_explicit(&e->shared, memory_order_acquire) != NULL;
}

int fx_envelope_sub_frame(fx_envelope *e, uint64_t subscription_id, uint32_t from, uint32_t n,
                          fx_buf **pframe)
{
    if (n == 0 || from >= e->count || n > e->count - from)
        return -EINVAL;
    fx_wire_event_batch b = batch_of(e, false, subscription_id, from, n);
    int rv = encode(&b, fx_wire_event_batch_frame_size(&b), pframe);
    if (rv == 0)
        FX_COUNTER_INC(sub_frame_encodes);
    return rv;
}

/* ---- coalescing ------------------------------------------------------------ */

void fx_coalescer_init(fx_coalescer *c)
{
    *c = (fx_coalescer){0};
}

void fx_coalescer_deinit(fx_coalescer *c)
{
    if (c->has_carry)
        fx_envelope_unref(c->carry.env);
    *c = (fx_coalescer){0};
}

bool fx_coalescer_has_pending(const fx_coalescer *c)
{
    return c->has_carry;
}

void fx_frame_list_clear(fx_frame_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        fx_buf_unref(l->frames[i]);
    l->n = 0;
    l->bytes = 0;
    l->events = 0;
    l->first_offset = 0;
    l->end_offset = 0;
}

static void list_add(fx_frame_list *l, fx_buf *f, uint64_t first, uint32_t events)
{
    if (l->n == 0)
        l->first_offset = first;
    l->frames[l->n] = f;
    l->iov[l->n] = (struct iovec){.iov_base = (void *)fx_buf_data(f), .iov_len = fx_buf_len(f)};
    l->n++;
    l->bytes += fx_buf_len(f);
    l->events += events;
    l->end_offset = first + events;
}

/* True if |size| more bytes stay within the list's byte limit (overflow-safe:
 * an oversized single frame may already have taken the list past it). */
static bool fits(const fx_frame_list *l, size_t size, const fx_coalesce_opts *o)
{
    return l->bytes <= o->max_bytes && size <= o->max_bytes - l->bytes;
}

/* How many payloads of |it|, from its skip, fit in what |l| has left (at
 * least one when |l| is empty, so an oversized payload still goes out). */
static uint32_t fit_count(const fx_frame_list *l, const fx_env_item *it, const fx_coalesce_opts *o)
{
    const fx_envelope *e = it->env;
    uint32_t avail = e->count - it->skip;
    uint32_t ev_left = o->max_events > l->events ? o->max_events - l->events : 0;
    /* Frame size grows by 4 + len per payload over a fixed header part. */
    size_t size = fx_envelope_sub_frame_size(e, it->skip, 1) - 4 - e->payloads[it->skip].len;
    uint32_t n = 0;
    while (n < avail && n < ev_left) {
        size += 4 + e->payloads[it->skip + n].len;
        if (!fits(l, size, o))
            break;
        n++;
    }
    return (n == 0 && l->n == 0) ? 1 : n;
}

/* Adds as much of |it| as fits. Returns 0 with |*pdone| true when all of it
 * went in, false when the rest must wait for the next list. */
static int add_item(fx_frame_list *l, fx_env_item *it, const fx_coalesce_opts *o, bool *pdone)
{
    fx_envelope *e = it->env;
    uint32_t left = fx_envelope_count(e) - it->skip;
    uint64_t first = fx_envelope_base_offset(e) + it->skip;
    fx_buf *f;
    *pdone = false;
    size_t fs = fx_envelope_shared_frame_size(e);
    /* The cached frame when it fits; and, on an empty list, a whole envelope
     * over the byte cap too: splitting it by bytes would only copy the same
     * payloads into per-subscriber frames, re-encoded for every subscriber,
     * where the shared frame is encoded once for all of them. */
    if (it->skip == 0 && l->events + left <= o->max_events && (fits(l, fs, o) || l->n == 0)) {
        int rv = fx_envelope_shared_frame(e, &f);
        if (rv != 0)
            return rv;
        list_add(l, f, first, left);
        *pdone = true;
        return 0;
    }
    uint32_t n = fit_count(l, it, o);
    if (n == 0)
        return 0;
    int rv = fx_envelope_sub_frame(e, o->subscription_id, it->skip, n, &f);
    if (rv != 0)
        return rv;
    list_add(l, f, first, n);
    it->skip += n;
    *pdone = it->skip == fx_envelope_count(e);
    return 0;
}

int fx_coalesce_next(fx_coalescer *c, fx_coalesce_pull_cb pull, void *user,
                     const fx_coalesce_opts *o, fx_frame_list *out)
{
    fx_frame_list_clear(out);
    while (out->n < FX_COALESCE_MAX_FRAMES && out->events < o->max_events) {
        if (!c->has_carry) {
            if (!pull(user, &c->carry))
                return 0;
            c->has_carry = true;
        }
        fx_env_item *it = &c->carry;
        uint64_t first = fx_envelope_base_offset(it->env) + it->skip;
        if (out->n > 0 && first != out->end_offset)
            return 0; /* a gap: the next list starts at it */
        bool done;
        int rv = add_item(out, it, o, &done);
        if (rv != 0)
            return rv;
        if (!done)
            return 0;
        fx_envelope_unref(it->env);
        c->has_carry = false;
    }
    return 0;
}
