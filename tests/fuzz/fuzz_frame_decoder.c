/* libFuzzer target: the streaming frame decoder. The input is
 * [chunking seed][max_frame selector][stream bytes]. The stream is decoded once
 * in a single feed (reference) and again in pseudo-random chunks: both must
 * yield the same frames and end the same way. Each frame's body is then
 * decoded by its kind, and bodies that decode must re-encode byte for byte. */
#include "fuzz_common.h"

typedef struct seen {
    size_t off; /* body offset in the stream */
    size_t len;
    uint16_t flags;
    int flags_rv;
} seen;

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* Feeds |p|[0..|n|) in chunks (all at once when |seed| is 0) and calls back
 * per frame; returns the final code: the decoder's error or finish(). */
typedef void (*frame_fn)(void *user, const fx_frame *f);

static int run(uint32_t max, const uint8_t *p, size_t n, uint64_t seed, frame_fn fn, void *user)
{
    fx_frame_decoder d;
    fx_frame_decoder_init(&d, max);
    size_t pos = 0;
    int rv = 0;
    while (pos < n && rv >= 0) {
        size_t chunk = n - pos;
        if (seed) {
            uint64_t r = rng_next(&seed);
            size_t lim = (r & 1) ? 16 : 4096;
            chunk = 1 + (size_t)(r >> 8) % lim;
            if (chunk > n - pos)
                chunk = n - pos;
        }
        size_t end = pos + chunk;
        while (pos < end) {
            size_t used;
            fx_frame f;
            fx_wire_err err = {0};
            rv = fx_frame_decoder_feed(&d, p + pos, end - pos, &used, &f, &err);
            FX_FUZZ_CHECK(used <= end - pos);
            pos += used;
            if (rv < 0) {
                fx_fuzz_check_err(rv, &err);
                break;
            }
            if (rv == FX_FRAME_HEADER) {
                FX_FUZZ_CHECK(f.hdr.length > 0 && f.hdr.length <= max);
                FX_FUZZ_CHECK(fx_frame_decoder_expected(&d) == f.hdr.length);
            } else if (rv == FX_FRAME_READY) {
                FX_FUZZ_CHECK(f.len == f.hdr.length);
                FX_FUZZ_CHECK(fx_frame_decoder_at_boundary(&d));
                fn(user, &f);
            } else {
                FX_FUZZ_CHECK(pos == end);
            }
            FX_FUZZ_CHECK(fx_frame_decoder_buffered(&d) <= FX_WIRE_HEADER_LEN + (size_t)max);
        }
    }
    if (rv >= 0)
        rv = fx_frame_decoder_finish(&d, NULL);
    fx_frame_decoder_deinit(&d);
    return rv;
}

typedef struct ref {
    const uint8_t *base;
    seen *frames;
    size_t n, cap;
} ref;

static void record(void *user, const fx_frame *f)
{
    ref *r = user;
    FX_FUZZ_CHECK(!f->buffered); /* a single feed never needs to copy */
    FX_FUZZ_CHECK(r->n < r->cap);
    r->frames[r->n++] = (seen){(size_t)(f->body - r->base), f->len, f->hdr.flags, f->flags_rv};
    if (f->flags_rv == 0)
        fx_fuzz_body(f->hdr.flags, f->body, f->len);
}

typedef struct cmp {
    const ref *want;
    size_t i;
} cmp;

static void compare(void *user, const fx_frame *f)
{
    cmp *c = user;
    FX_FUZZ_CHECK(c->i < c->want->n);
    const seen *s = &c->want->frames[c->i++];
    FX_FUZZ_CHECK(f->hdr.flags == s->flags && f->flags_rv == s->flags_rv);
    FX_FUZZ_CHECK(f->len == s->len);
    FX_FUZZ_CHECK(f->len == 0 || memcmp(f->body, c->want->base + s->off, f->len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint64_t seed = ((uint64_t)data[0] << 32) | 0x9E3779B9u;
    /* Small limits exercise FX_EWIRE_TOO_LARGE; 0x80+ is the real 16 MiB. */
    uint32_t max = data[1] & 0x80 ? FX_WIRE_DEFAULT_MAX_FRAME : (uint32_t)data[1] * 64;
    data += 2;
    size -= 2;
    ref want = {.base = data, .cap = size / FX_WIRE_HEADER_LEN + 1};
    want.frames = malloc(want.cap * sizeof(*want.frames));
    FX_FUZZ_CHECK(want.frames);
    int rv1 = run(max, data, size, 0, record, &want);
    cmp c = {.want = &want};
    int rv2 = run(max, data, size, seed, compare, &c);
    FX_FUZZ_CHECK(rv1 == rv2);
    FX_FUZZ_CHECK(c.i == want.n);
    free(want.frames);
    return 0;
}
