/* Tests of the Felix-C consumer-group frames (src/wire/group.c): round trips,
 * the project's own vectors (tests/vectors/felix-c-group), truncation at
 * every byte, limits, counts the bytes cannot hold, and the builder's and
 * encoders' refusals. */
/* fx-test-libs: fx_wire fx_base */
#include "fx_test.h"

#include <errno.h>
#include <stdlib.h>

#include "wire/frame.h"
#include "wire/group.h"

/* ---- helpers ---------------------------------------------------------------------- */

static fx_wire_slice str(const char *s)
{
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

static void assert_slice(fx_wire_slice s, const char *want)
{
    assert_int_equal(s.len, strlen(want));
    assert_memory_equal(s.ptr, want, s.len);
}

/* Checks the header of a group frame and returns its body. */
static const uint8_t *body_of(const uint8_t *frame, size_t frame_len)
{
    fx_frame_header h;
    assert_int_equal(fx_frame_header_decode(frame, FX_WIRE_DEFAULT_MAX_FRAME, &h, NULL), 0);
    assert_int_equal(h.flags, FX_FLAG_FELIXC);
    assert_int_equal(h.length, frame_len - FX_WIRE_HEADER_LEN);
    return frame + FX_WIRE_HEADER_LEN;
}

/* Writes a bare body (no frame header) byte by byte. */
typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
} wbuf;

static void w_bytes(wbuf *w, const void *p, size_t n)
{
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2 + 64;
        w->p = realloc(w->p, w->cap);
        assert_non_null(w->p);
    }
    if (n)
        memcpy(w->p + w->n, p, n);
    w->n += n;
}
static void w8(wbuf *w, uint8_t v)
{
    w_bytes(w, &v, 1);
}
static void w16(wbuf *w, uint16_t v)
{
    uint8_t b[2];
    fx_put16(b, v);
    w_bytes(w, b, 2);
}
static void w32(wbuf *w, uint32_t v)
{
    uint8_t b[4];
    fx_put32(b, v);
    w_bytes(w, b, 4);
}
static void w64(wbuf *w, uint64_t v)
{
    uint8_t b[8];
    fx_put64(b, v);
    w_bytes(w, b, 8);
}

static void w_run(wbuf *w, uint64_t first, uint32_t attempt, uint32_t count, uint64_t skipped)
{
    w64(w, first);
    w32(w, attempt);
    w32(w, count);
    w64(w, skipped);
}

static void w_op(wbuf *w, uint8_t kind, uint64_t first, uint32_t count, uint32_t attempt,
                 uint32_t arg, const void *reason, uint16_t rlen)
{
    w8(w, kind);
    w64(w, first);
    w32(w, count);
    w32(w, attempt);
    w32(w, arg);
    w16(w, rlen);
    w_bytes(w, reason, rlen);
}

static int batch_rv(const wbuf *w)
{
    fx_wire_group_batch b;
    fx_wire_err err = {0};
    int rv = fx_wire_group_batch_decode(w->p, w->n, &b, &err);
    if (rv == 0)
        fx_wire_group_batch_deinit(&b);
    else
        assert_int_equal(err.code, rv);
    return rv;
}

static int acks_rv(const wbuf *w)
{
    fx_wire_group_acks a;
    fx_wire_err err = {0};
    int rv = fx_wire_group_acks_decode(w->p, w->n, &a, &err);
    if (rv == 0)
        fx_wire_group_acks_deinit(&a);
    else
        assert_int_equal(err.code, rv);
    return rv;
}

static int acked_rv(const wbuf *w)
{
    fx_wire_group_acked a;
    fx_wire_err err = {0};
    int rv = fx_wire_group_acked_decode(w->p, w->n, &a, &err);
    if (rv == 0)
        fx_wire_group_acked_deinit(&a);
    else
        assert_int_equal(err.code, rv);
    return rv;
}

/* An ACKS body with one op. */
static int one_op_rv(uint8_t kind, uint64_t first, uint32_t count, const void *reason,
                     uint16_t rlen)
{
    wbuf w = {0};
    w8(&w, FX_GROUP_FRAME_ACKS);
    w64(&w, 1);
    w32(&w, 1);
    w_op(&w, kind, first, count, 1, 0, reason, rlen);
    int rv = acks_rv(&w);
    free(w.p);
    return rv;
}

/* The frames the vectors hold, built with the encoders. */
static ssize_t build_batch(uint8_t *out, size_t cap)
{
    fx_wire_group_builder gb;
    assert_int_equal(fx_wire_group_batch_begin(&gb, out, cap), 0);
    assert_int_equal(fx_wire_group_batch_run(&gb, 100, 1, 0), 0);
    assert_int_equal(fx_wire_group_batch_record(&gb, "a1", 2), 0);
    assert_int_equal(fx_wire_group_batch_record(&gb, "b22", 3), 0);
    assert_int_equal(fx_wire_group_batch_run(&gb, 205, 3, 3), 0);
    assert_int_equal(fx_wire_group_batch_record(&gb, "xyz", 3), 0);
    return fx_wire_group_batch_finish(&gb);
}

static const fx_wire_group_op vec_ops[5] = {
    {.kind = FX_GROUP_OP_ACK, .first = 100, .count = 2},
    {.kind = FX_GROUP_OP_NAK, .first = 205, .count = 1, .attempt = 3, .arg = FX_GROUP_NAK_BACKOFF},
    {.kind = FX_GROUP_OP_IN_PROGRESS, .first = 206, .count = 1, .attempt = 1, .arg = 30000},
    {.kind = FX_GROUP_OP_TERM,
     .first = 207,
     .count = 1,
     .attempt = 2,
     .reason = {(const uint8_t *)"sch\xc3\xa9ma", 7}},
    {.kind = FX_GROUP_OP_RELEASE, .first = 208, .count = 1, .attempt = 1},
};

static const fx_wire_group_refusal vec_refused[2] = {
    {206, FX_GROUP_WHY_STALE},
    {209, FX_GROUP_WHY_INVALID},
};

static const fx_wire_group_acks vec_acks = {
    .request_id = 42, .nops = 5, .ops = (fx_wire_group_op *)vec_ops};
static const fx_wire_group_acked vec_acked = {
    .request_id = 42, .floor = 205, .nrefused = 2, .refused = (fx_wire_group_refusal *)vec_refused};

/* ---- frame layer -------------------------------------------------------------------- */

static void test_felixc_flag_is_a_body_kind_only_alone(void **state)
{
    fx_body_kind k = FX_BODY_JSON;
    assert_int_equal(fx_frame_kind(FX_FLAG_FELIXC, &k, NULL), 0);
    assert_int_equal(k, FX_BODY_FELIXC);
    assert_string_equal(fx_body_kind_name(k), "felixc_group");
    for (unsigned bit = 0; bit < 15; bit++) {
        fx_wire_err err = {0};
        uint16_t f = (uint16_t)(FX_FLAG_FELIXC | (1u << bit));
        assert_int_equal(fx_frame_check_flags(f, &err), FX_EWIRE_FLAGS);
        assert_int_equal(err.code, FX_EWIRE_FLAGS);
    }
    assert_int_equal(FX_FLAGS_ORIGINAL_V1 & FX_FLAG_FELIXC, 0);
    assert_int_equal(FX_FLAGS_KNOWN & FX_FLAG_FELIXC, 0);
}

static void test_group_frame_passes_the_frame_decoder(void **state)
{
    uint8_t frame[128];
    ssize_t n = build_batch(frame, sizeof(frame));
    assert_true(n > 0);
    fx_frame_decoder d;
    fx_frame_decoder_init(&d, FX_WIRE_DEFAULT_MAX_FRAME);
    fx_frame f;
    size_t used = 0, total = 0;
    int rv = fx_frame_decoder_feed(&d, frame, (size_t)n, &used, &f, NULL);
    assert_int_equal(rv, FX_FRAME_HEADER);
    total += used;
    rv = fx_frame_decoder_feed(&d, frame + total, (size_t)n - total, &used, &f, NULL);
    assert_int_equal(rv, FX_FRAME_READY);
    assert_int_equal(f.flags_rv, 0);
    assert_int_equal(f.kind, FX_BODY_FELIXC);
    assert_int_equal(fx_wire_group_kind(f.body, f.len, NULL), FX_GROUP_FRAME_BATCH);
    assert_int_equal(f.len, (size_t)n - FX_WIRE_HEADER_LEN);
    fx_frame_decoder_deinit(&d);
}

static void test_group_kind_reads_the_kind_byte(void **state)
{
    fx_wire_err err = {0};
    static const uint8_t k[] = {0, 1, 2, 3, 4, 255};
    assert_int_equal(fx_wire_group_kind(k, 0, &err), FX_EWIRE_TRUNCATED);
    assert_int_equal(err.code, FX_EWIRE_TRUNCATED);
    assert_int_equal(fx_wire_group_kind(k, 1, &err), FX_EWIRE_KIND);
    assert_int_equal(fx_wire_group_kind(k + 1, 1, NULL), FX_GROUP_FRAME_BATCH);
    assert_int_equal(fx_wire_group_kind(k + 2, 1, NULL), FX_GROUP_FRAME_ACKS);
    assert_int_equal(fx_wire_group_kind(k + 3, 1, NULL), FX_GROUP_FRAME_ACKED);
    assert_int_equal(fx_wire_group_kind(k + 4, 1, NULL), FX_EWIRE_KIND);
    assert_int_equal(fx_wire_group_kind(k + 5, 1, &err), FX_EWIRE_KIND);
    assert_non_null(strstr(err.msg, "255"));
}

/* ---- round trips ---------------------------------------------------------------------- */

static void test_batch_roundtrips_two_runs(void **state)
{
    uint8_t frame[128];
    ssize_t n = build_batch(frame, sizeof(frame));
    assert_int_equal(n, (ssize_t)fx_wire_group_batch_frame_size(2, 3, 8));
    fx_wire_group_batch b;
    assert_int_equal(fx_wire_group_batch_decode(body_of(frame, (size_t)n),
                                                (size_t)n - FX_WIRE_HEADER_LEN, &b, NULL),
                     0);
    assert_int_equal(b.nruns, 2);
    assert_int_equal(b.nrecords, 3);
    assert_int_equal(b.runs[0].first, 100);
    assert_int_equal(b.runs[0].attempt, 1);
    assert_int_equal(b.runs[0].count, 2);
    assert_int_equal(b.runs[0].skipped_before, 0);
    assert_int_equal(b.runs[1].first, 205);
    assert_int_equal(b.runs[1].attempt, 3);
    assert_int_equal(b.runs[1].count, 1);
    assert_int_equal(b.runs[1].skipped_before, 3);
    assert_slice(b.payloads[0], "a1");
    assert_slice(b.payloads[1], "b22");
    assert_slice(b.payloads[2], "xyz");
    /* Slices point into the input. */
    assert_true(b.payloads[2].ptr > frame && b.payloads[2].ptr < frame + n);
    fx_wire_group_batch_deinit(&b);
    assert_null(b.runs);
    assert_null(b.payloads);
}

static void test_batch_of_many_runs_and_empty_records_roundtrips(void **state)
{
    size_t cap = fx_wire_group_batch_frame_size(FX_GROUP_MAX_RUNS, 2 * FX_GROUP_MAX_RUNS, 0);
    uint8_t *frame = malloc(cap);
    assert_non_null(frame);
    fx_wire_group_builder gb;
    assert_int_equal(fx_wire_group_batch_begin(&gb, frame, cap), 0);
    for (uint32_t i = 0; i < FX_GROUP_MAX_RUNS; i++) {
        assert_int_equal(fx_wire_group_batch_run(&gb, 1000u * i, i + 1, i), 0);
        assert_int_equal(fx_wire_group_batch_record(&gb, NULL, 0), 0);
        assert_int_equal(fx_wire_group_batch_record(&gb, NULL, 0), 0);
    }
    assert_int_equal(fx_wire_group_batch_finish(&gb), (ssize_t)cap);
    fx_wire_group_batch b;
    assert_int_equal(
        fx_wire_group_batch_decode(body_of(frame, cap), cap - FX_WIRE_HEADER_LEN, &b, NULL), 0);
    assert_int_equal(b.nruns, FX_GROUP_MAX_RUNS);
    assert_int_equal(b.nrecords, 2 * FX_GROUP_MAX_RUNS);
    assert_int_equal(b.runs[777].first, 777000);
    assert_int_equal(b.runs[777].attempt, 778);
    assert_int_equal(b.runs[777].skipped_before, 777);
    assert_int_equal(b.payloads[1555].len, 0);
    fx_wire_group_batch_deinit(&b);
    free(frame);
}

static void test_acks_roundtrip_each_op_kind(void **state)
{
    size_t size = fx_wire_group_acks_frame_size(&vec_acks);
    uint8_t frame[256];
    assert_int_equal(fx_wire_group_acks_encode(&vec_acks, frame, sizeof(frame)), (ssize_t)size);
    fx_wire_group_acks a;
    assert_int_equal(
        fx_wire_group_acks_decode(body_of(frame, size), size - FX_WIRE_HEADER_LEN, &a, NULL), 0);
    assert_int_equal(a.request_id, 42);
    assert_int_equal(a.nops, 5);
    for (uint32_t i = 0; i < 5; i++) {
        assert_int_equal(a.ops[i].kind, vec_ops[i].kind);
        assert_int_equal(a.ops[i].first, vec_ops[i].first);
        assert_int_equal(a.ops[i].count, vec_ops[i].count);
        assert_int_equal(a.ops[i].attempt, vec_ops[i].attempt);
        assert_int_equal(a.ops[i].arg, vec_ops[i].arg);
        assert_int_equal(a.ops[i].reason.len, vec_ops[i].reason.len);
    }
    assert_slice(a.ops[3].reason, "sch\xc3\xa9ma");
    fx_wire_group_acks_deinit(&a);
    assert_null(a.ops);
}

static void test_acked_roundtrips_with_and_without_refusals(void **state)
{
    uint8_t frame[128];
    size_t size = fx_wire_group_acked_frame_size(&vec_acked);
    assert_int_equal(fx_wire_group_acked_encode(&vec_acked, frame, sizeof(frame)), (ssize_t)size);
    fx_wire_group_acked a;
    assert_int_equal(
        fx_wire_group_acked_decode(body_of(frame, size), size - FX_WIRE_HEADER_LEN, &a, NULL), 0);
    assert_int_equal(a.request_id, 42);
    assert_int_equal(a.floor, 205);
    assert_int_equal(a.nrefused, 2);
    assert_int_equal(a.refused[0].offset, 206);
    assert_int_equal(a.refused[0].why, FX_GROUP_WHY_STALE);
    assert_int_equal(a.refused[1].offset, 209);
    assert_int_equal(a.refused[1].why, FX_GROUP_WHY_INVALID);
    fx_wire_group_acked_deinit(&a);

    fx_wire_group_acked none = {.request_id = UINT64_MAX, .floor = 7};
    size = fx_wire_group_acked_frame_size(&none);
    assert_int_equal(size, FX_WIRE_HEADER_LEN + 21);
    assert_int_equal(fx_wire_group_acked_encode(&none, frame, sizeof(frame)), (ssize_t)size);
    assert_int_equal(fx_wire_group_acked_decode(frame + FX_WIRE_HEADER_LEN, 21, &a, NULL), 0);
    assert_int_equal(a.request_id, UINT64_MAX);
    assert_int_equal(a.floor, 7);
    assert_int_equal(a.nrefused, 0);
    assert_null(a.refused);
    fx_wire_group_acked_deinit(&a);
}

/* ---- vectors ------------------------------------------------------------------------- */

/* Reads tests/vectors/felix-c-group/|name|.hex: hex digits, blanks and
 * '#' comment lines. */
static uint8_t *load_vector(const char *name, size_t *plen)
{
    const char *root = getenv("FX_SOURCE_DIR");
    if (!root)
        fx_test_skip("FX_SOURCE_DIR not set (run through ctest)");
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/vectors/felix-c-group/%s.hex", root, name);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    uint8_t *out = malloc(4096);
    assert_non_null(out);
    size_t n = 0;
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#')
            continue;
        for (const char *p = line; *p && *p != '\n';) {
            unsigned v;
            if (*p == ' ' || *p == '\r') {
                p++;
                continue;
            }
            assert_int_equal(sscanf(p, "%2x", &v), 1);
            assert_true(n < 4096);
            out[n++] = (uint8_t)v;
            p += 2;
        }
    }
    fclose(f);
    *plen = n;
    return out;
}

static void test_vectors_decode_and_encode_byte_for_byte(void **state)
{
    size_t len;
    uint8_t out[512];

    uint8_t *v = load_vector("group_batch_two_runs", &len);
    assert_int_equal(build_batch(out, sizeof(out)), (ssize_t)len);
    assert_memory_equal(out, v, len);
    fx_wire_group_batch b;
    assert_int_equal(fx_wire_group_batch_decode(body_of(v, len), len - 12, &b, NULL), 0);
    assert_int_equal(b.nruns, 2);
    assert_int_equal(b.runs[1].first, 205);
    assert_slice(b.payloads[1], "b22");
    fx_wire_group_batch_deinit(&b);
    free(v);

    v = load_vector("group_acks_each_op", &len);
    assert_int_equal(fx_wire_group_acks_encode(&vec_acks, out, sizeof(out)), (ssize_t)len);
    assert_memory_equal(out, v, len);
    fx_wire_group_acks a;
    assert_int_equal(fx_wire_group_acks_decode(body_of(v, len), len - 12, &a, NULL), 0);
    assert_int_equal(a.nops, 5);
    for (uint32_t i = 0; i < 5; i++)
        assert_int_equal(a.ops[i].kind, i + 1);
    assert_int_equal(a.ops[1].arg, FX_GROUP_NAK_BACKOFF);
    assert_slice(a.ops[3].reason, "sch\xc3\xa9ma");
    assert_int_equal(fx_wire_group_acks_encode(&a, out, sizeof(out)), (ssize_t)len);
    assert_memory_equal(out, v, len);
    fx_wire_group_acks_deinit(&a);
    free(v);

    v = load_vector("group_acked_two_refused", &len);
    assert_int_equal(fx_wire_group_acked_encode(&vec_acked, out, sizeof(out)), (ssize_t)len);
    assert_memory_equal(out, v, len);
    fx_wire_group_acked d;
    assert_int_equal(fx_wire_group_acked_decode(body_of(v, len), len - 12, &d, NULL), 0);
    assert_int_equal(d.floor, 205);
    assert_int_equal(d.refused[1].why, FX_GROUP_WHY_INVALID);
    assert_int_equal(fx_wire_group_acked_encode(&d, out, sizeof(out)), (ssize_t)len);
    assert_memory_equal(out, v, len);
    fx_wire_group_acked_deinit(&d);
    free(v);
}

/* ---- malformed bodies ----------------------------------------------------------------- */

static void test_every_truncation_is_rejected(void **state)
{
    uint8_t frame[3][256];
    size_t len[3];
    len[0] = (size_t)build_batch(frame[0], sizeof(frame[0]));
    len[1] = (size_t)fx_wire_group_acks_encode(&vec_acks, frame[1], sizeof(frame[1]));
    len[2] = (size_t)fx_wire_group_acked_encode(&vec_acked, frame[2], sizeof(frame[2]));
    for (int k = 0; k < 3; k++) {
        const uint8_t *body = frame[k] + FX_WIRE_HEADER_LEN;
        size_t blen = len[k] - FX_WIRE_HEADER_LEN;
        for (size_t cut = 0; cut < blen; cut++) {
            /* A copy of exactly |cut| bytes, so ASan sees any read past it. */
            wbuf w = {0};
            w_bytes(&w, body, cut);
            int rv = k == 0 ? batch_rv(&w) : k == 1 ? acks_rv(&w) : acked_rv(&w);
            if (rv != FX_EWIRE_TRUNCATED && rv != FX_EWIRE_COUNT)
                fail_msg("frame %d cut at %zu of %zu: %d", k, cut, blen, rv);
            free(w.p);
        }
        wbuf w = {0};
        w_bytes(&w, body, blen);
        assert_int_equal(k == 0 ? batch_rv(&w) : k == 1 ? acks_rv(&w) : acked_rv(&w), 0);
        free(w.p);
    }
}

static void test_trailing_bytes_are_rejected(void **state)
{
    uint8_t frame[256];
    wbuf w = {0};
    ssize_t n = build_batch(frame, sizeof(frame));
    w_bytes(&w, frame + 12, (size_t)n - 12);
    w8(&w, 0);
    assert_int_equal(batch_rv(&w), FX_EWIRE_TRAILING);
    w.n = 0;
    n = fx_wire_group_acks_encode(&vec_acks, frame, sizeof(frame));
    w_bytes(&w, frame + 12, (size_t)n - 12);
    w8(&w, 0);
    assert_int_equal(acks_rv(&w), FX_EWIRE_TRAILING);
    w.n = 0;
    n = fx_wire_group_acked_encode(&vec_acked, frame, sizeof(frame));
    w_bytes(&w, frame + 12, (size_t)n - 12);
    w8(&w, 0);
    assert_int_equal(acked_rv(&w), FX_EWIRE_TRAILING);
    free(w.p);
}

static void test_decoders_reject_other_frame_kinds(void **state)
{
    uint8_t frame[256];
    ssize_t n = fx_wire_group_acked_encode(&vec_acked, frame, sizeof(frame));
    fx_wire_group_batch b;
    fx_wire_group_acks a;
    fx_wire_group_acked d;
    assert_int_equal(fx_wire_group_batch_decode(frame + 12, (size_t)n - 12, &b, NULL),
                     FX_EWIRE_KIND);
    assert_int_equal(fx_wire_group_acks_decode(frame + 12, (size_t)n - 12, &a, NULL),
                     FX_EWIRE_KIND);
    n = build_batch(frame, sizeof(frame));
    assert_int_equal(fx_wire_group_acked_decode(frame + 12, (size_t)n - 12, &d, NULL),
                     FX_EWIRE_KIND);
    static const uint8_t zero[32];
    assert_int_equal(fx_wire_group_batch_decode(zero, sizeof(zero), &b, NULL), FX_EWIRE_KIND);
    assert_null(b.runs);
}

static void test_counts_the_bytes_cannot_hold_are_refused_before_walking(void **state)
{
    /* Each count is within its limit but larger than the bytes can hold: a
     * decoder that allocated and walked first would say TRUNCATED. */
    wbuf w = {0};
    w8(&w, FX_GROUP_FRAME_BATCH);
    w32(&w, 2);
    w_run(&w, 0, 1, 1, 0);
    w32(&w, 0);
    assert_int_equal(batch_rv(&w), FX_EWIRE_COUNT); /* 2 runs in 1 run's bytes */
    w.n = 0;
    w8(&w, FX_GROUP_FRAME_BATCH);
    w32(&w, 1);
    w_run(&w, 0, 1, 3, 0);
    w32(&w, 0);
    w32(&w, 0);
    assert_int_equal(batch_rv(&w), FX_EWIRE_COUNT); /* 3 records in 8 bytes */
    w.n = 0;
    w8(&w, FX_GROUP_FRAME_ACKS);
    w64(&w, 0);
    w32(&w, FX_GROUP_MAX_OPS);
    w_op(&w, 1, 0, 1, 0, 0, NULL, 0);
    assert_int_equal(acks_rv(&w), FX_EWIRE_COUNT);
    w.n = 0;
    w8(&w, FX_GROUP_FRAME_ACKED);
    w64(&w, 0);
    w64(&w, 0);
    w32(&w, FX_GROUP_MAX_REFUSED);
    w64(&w, 1);
    w8(&w, 1);
    assert_int_equal(acked_rv(&w), FX_EWIRE_COUNT);
    /* Huge counts, far over the limits. */
    w.n = 0;
    w8(&w, FX_GROUP_FRAME_BATCH);
    w32(&w, UINT32_MAX);
    assert_int_equal(batch_rv(&w), FX_EWIRE_COUNT);
    w.n = 0;
    w8(&w, FX_GROUP_FRAME_BATCH);
    w32(&w, 1);
    w_run(&w, 0, 1, UINT32_MAX, 0);
    assert_int_equal(batch_rv(&w), FX_EWIRE_COUNT);
    free(w.p);
}

static void test_zero_counts_are_refused_but_no_refusal_is_fine(void **state)
{
    wbuf w = {0};
    w8(&w, FX_GROUP_FRAME_BATCH);
    w32(&w, 0);
    assert_int_equal(batch_rv(&w), FX_EWIRE_COUNT);
    w.n = 0;
    w8(&w, FX_GROUP_FRAME_BATCH);
    w32(&w, 1);
    w_run(&w, 5, 1, 0, 0);
    w32(&w, 0); /* bytes enough for a record, but the run says 0 */
    assert_int_equal(batch_rv(&w), FX_EWIRE_COUNT);
    w.n = 0;
    w8(&w, FX_GROUP_FRAME_ACKS);
    w64(&w, 0);
    w32(&w, 0);
    assert_int_equal(acks_rv(&w), FX_EWIRE_COUNT);
    w.n = 0;
    w8(&w, FX_GROUP_FRAME_ACKED);
    w64(&w, 0);
    w64(&w, 0);
    w32(&w, 0);
    assert_int_equal(acked_rv(&w), 0);
    free(w.p);
}

static void test_limits_are_enforced_by_decoders(void **state)
{
    wbuf w = {0};
    /* FX_GROUP_MAX_RUNS + 1 one-record runs, each fully present. */
    w8(&w, FX_GROUP_FRAME_BATCH);
    w32(&w, FX_GROUP_MAX_RUNS + 1);
    for (uint32_t i = 0; i <= FX_GROUP_MAX_RUNS; i++) {
        w_run(&w, i, 1, 1, 0);
        w32(&w, 0);
    }
    assert_int_equal(batch_rv(&w), FX_EWIRE_COUNT);
    /* Two runs with FX_GROUP_MAX_RECORDS records between them pass; one more fails. */
    for (uint32_t extra = 0; extra < 2; extra++) {
        w.n = 0;
        w8(&w, FX_GROUP_FRAME_BATCH);
        w32(&w, 2);
        w_run(&w, 0, 1, FX_GROUP_MAX_RECORDS / 2, 0);
        for (uint32_t i = 0; i < FX_GROUP_MAX_RECORDS / 2; i++)
            w32(&w, 0);
        w_run(&w, 1u << 20, 1, FX_GROUP_MAX_RECORDS / 2 + extra, 0);
        for (uint32_t i = 0; i < FX_GROUP_MAX_RECORDS / 2 + extra; i++)
            w32(&w, 0);
        assert_int_equal(batch_rv(&w), extra ? FX_EWIRE_COUNT : 0);
    }
    w.n = 0;
    w8(&w, FX_GROUP_FRAME_ACKS);
    w64(&w, 0);
    w32(&w, FX_GROUP_MAX_OPS + 1);
    for (uint32_t i = 0; i <= FX_GROUP_MAX_OPS; i++)
        w_op(&w, 1, i, 1, 0, 0, NULL, 0);
    assert_int_equal(acks_rv(&w), FX_EWIRE_COUNT);
    w.n = 0;
    w8(&w, FX_GROUP_FRAME_ACKED);
    w64(&w, 0);
    w64(&w, 0);
    w32(&w, FX_GROUP_MAX_REFUSED + 1);
    for (uint32_t i = 0; i <= FX_GROUP_MAX_REFUSED; i++) {
        w64(&w, i);
        w8(&w, 1);
    }
    assert_int_equal(acked_rv(&w), FX_EWIRE_COUNT);
    free(w.p);
}

static void test_batch_run_checks_attempt_and_offset_range(void **state)
{
    wbuf w = {0};
    w8(&w, FX_GROUP_FRAME_BATCH);
    w32(&w, 1);
    w_run(&w, 9, 0, 1, 0);
    w32(&w, 0);
    assert_int_equal(batch_rv(&w), FX_EWIRE_FIELD_TYPE);
    w.n = 0;
    w8(&w, FX_GROUP_FRAME_BATCH);
    w32(&w, 1);
    w_run(&w, UINT64_MAX - 1, 1, 2, 0);
    w32(&w, 0);
    w32(&w, 0);
    assert_int_equal(batch_rv(&w), FX_EWIRE_COUNT);
    w.n = 0;
    w8(&w, FX_GROUP_FRAME_BATCH);
    w32(&w, 1);
    w_run(&w, UINT64_MAX - 2, 1, 2, 0);
    w32(&w, 0);
    w32(&w, 0);
    assert_int_equal(batch_rv(&w), 0);
    free(w.p);
}

static void test_ack_op_rules(void **state)
{
    assert_int_equal(one_op_rv(FX_GROUP_OP_ACK, 0, 1000, NULL, 0), 0);
    assert_int_equal(one_op_rv(FX_GROUP_OP_ACK, 0, 0, NULL, 0), FX_EWIRE_COUNT);
    assert_int_equal(one_op_rv(FX_GROUP_OP_ACK, UINT64_MAX - 9, 10, NULL, 0), FX_EWIRE_COUNT);
    assert_int_equal(one_op_rv(FX_GROUP_OP_ACK, UINT64_MAX - 10, 10, NULL, 0), 0);
    for (uint8_t k = FX_GROUP_OP_NAK; k <= FX_GROUP_OP_RELEASE; k++) {
        assert_int_equal(one_op_rv(k, 3, 1, NULL, 0), 0);
        assert_int_equal(one_op_rv(k, 3, 2, NULL, 0), FX_EWIRE_COUNT);
        assert_int_equal(one_op_rv(k, 3, 0, NULL, 0), FX_EWIRE_COUNT);
    }
    assert_int_equal(one_op_rv(0, 3, 1, NULL, 0), FX_EWIRE_FIELD_TYPE);
    assert_int_equal(one_op_rv(6, 3, 1, NULL, 0), FX_EWIRE_FIELD_TYPE);
    assert_int_equal(one_op_rv(255, 3, 1, NULL, 0), FX_EWIRE_FIELD_TYPE);
    /* A reason belongs to term only. */
    assert_int_equal(one_op_rv(FX_GROUP_OP_NAK, 3, 1, "x", 1), FX_EWIRE_FIELD_TYPE);
    assert_int_equal(one_op_rv(FX_GROUP_OP_ACK, 3, 1, "x", 1), FX_EWIRE_FIELD_TYPE);
    assert_int_equal(one_op_rv(FX_GROUP_OP_TERM, 3, 1, "x", 1), 0);
}

static void test_term_reason_is_checked_utf8_up_to_256_bytes(void **state)
{
    static const char *bad[] = {"\x80", "\xc0\x80", "\xed\xa0\x80", "ok\xff", "\xe2\x82"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(one_op_rv(FX_GROUP_OP_TERM, 1, 1, bad[i], (uint16_t)strlen(bad[i])),
                         FX_EWIRE_UTF8);
    assert_int_equal(one_op_rv(FX_GROUP_OP_TERM, 1, 1, "\xe2\x82\xac \xf0\x9f\x98\x80", 8), 0);
    char big[FX_GROUP_REASON_MAX + 1];
    memset(big, 'r', sizeof(big));
    assert_int_equal(one_op_rv(FX_GROUP_OP_TERM, 1, 1, big, FX_GROUP_REASON_MAX), 0);
    assert_int_equal(one_op_rv(FX_GROUP_OP_TERM, 1, 1, big, FX_GROUP_REASON_MAX + 1),
                     FX_EWIRE_COUNT);
    /* The encoder refuses an invalid reason too. */
    fx_wire_group_op op = {.kind = FX_GROUP_OP_TERM,
                           .first = 1,
                           .count = 1,
                           .reason = {(const uint8_t *)"\xc0\x80", 2}};
    fx_wire_group_acks a = {.nops = 1, .ops = &op};
    uint8_t out[128];
    assert_int_equal(fx_wire_group_acks_encode(&a, out, sizeof(out)), -EINVAL);
}

static void test_acked_refusal_why_is_checked(void **state)
{
    for (unsigned why = 0; why < 256; why++) {
        wbuf w = {0};
        w8(&w, FX_GROUP_FRAME_ACKED);
        w64(&w, 1);
        w64(&w, 2);
        w32(&w, 1);
        w64(&w, 3);
        w8(&w, (uint8_t)why);
        assert_int_equal(acked_rv(&w), why == 1 || why == 2 ? 0 : FX_EWIRE_FIELD_TYPE);
        free(w.p);
    }
}

/* ---- builder and encoders ---------------------------------------------------------------- */

static void test_builder_too_small_changes_nothing(void **state)
{
    /* Every step of the vector batch, given one byte fewer than it needs,
     * returns FX_ETOOBIG and leaves the builder and the buffer as they were. */
    uint8_t full[128];
    ssize_t need = build_batch(full, sizeof(full));
    for (size_t cap = 0; cap < (size_t)need; cap++) {
        uint8_t out[128];
        memset(out, 0xAB, sizeof(out));
        fx_wire_group_builder gb, before;
        memset(&gb, 0x5A, sizeof(gb));
        before = gb;
        int rv = fx_wire_group_batch_begin(&gb, out, cap);
        if (rv == FX_ETOOBIG) {
            assert_memory_equal(&gb, &before, sizeof(gb));
            for (size_t i = 0; i < sizeof(out); i++)
                assert_int_equal(out[i], 0xAB);
            continue;
        }
        assert_int_equal(rv, 0);
        int steps[] = {0, 1, 1, 0, 1};
        const char *rec[] = {NULL, "a1", "b22", NULL, "xyz"};
        uint64_t first[] = {100, 0, 0, 205, 0};
        uint32_t att[] = {1, 0, 0, 3, 0};
        uint64_t skip[] = {0, 0, 0, 3, 0};
        bool refused = false;
        for (int s = 0; s < 5 && !refused; s++) {
            uint8_t snap[128];
            memcpy(snap, out, sizeof(out));
            before = gb;
            rv = steps[s] ? fx_wire_group_batch_record(&gb, rec[s], (uint32_t)strlen(rec[s]))
                          : fx_wire_group_batch_run(&gb, first[s], att[s], skip[s]);
            if (rv == FX_ETOOBIG) {
                assert_memory_equal(&gb, &before, sizeof(gb));
                assert_memory_equal(out, snap, sizeof(out));
                refused = true;
            } else {
                assert_int_equal(rv, 0);
            }
        }
        assert_true(refused);
    }
}

static void test_encoders_too_small_write_nothing(void **state)
{
    uint8_t out[256];
    size_t size = fx_wire_group_acks_frame_size(&vec_acks);
    memset(out, 0xAB, sizeof(out));
    assert_int_equal(fx_wire_group_acks_encode(&vec_acks, out, size - 1), FX_ETOOBIG);
    for (size_t i = 0; i < sizeof(out); i++)
        assert_int_equal(out[i], 0xAB);
    assert_int_equal(fx_wire_group_acks_encode(&vec_acks, out, size), (ssize_t)size);
    size = fx_wire_group_acked_frame_size(&vec_acked);
    memset(out, 0xAB, sizeof(out));
    assert_int_equal(fx_wire_group_acked_encode(&vec_acked, out, size - 1), FX_ETOOBIG);
    for (size_t i = 0; i < sizeof(out); i++)
        assert_int_equal(out[i], 0xAB);
    assert_int_equal(fx_wire_group_acked_encode(&vec_acked, out, size), (ssize_t)size);
}

static void test_builder_misuse_is_einval(void **state)
{
    uint8_t out[256];
    fx_wire_group_builder gb;
    assert_int_equal(fx_wire_group_batch_begin(&gb, out, sizeof(out)), 0);
    assert_int_equal(fx_wire_group_batch_record(&gb, "x", 1), -EINVAL); /* no run open */
    assert_int_equal(fx_wire_group_batch_finish(&gb), -EINVAL);         /* no run */
    assert_int_equal(fx_wire_group_batch_run(&gb, 1, 0, 0), -EINVAL);   /* attempt 0 */
    assert_int_equal(fx_wire_group_batch_run(&gb, 1, 1, 0), 0);
    assert_int_equal(fx_wire_group_batch_finish(&gb), -EINVAL);       /* empty run */
    assert_int_equal(fx_wire_group_batch_run(&gb, 9, 1, 0), -EINVAL); /* after an empty run */
    assert_int_equal(fx_wire_group_batch_record(&gb, "x", 1), 0);
    ssize_t n = fx_wire_group_batch_finish(&gb);
    assert_int_equal(n, (ssize_t)fx_wire_group_batch_frame_size(1, 1, 1));
    fx_wire_group_batch b;
    assert_int_equal(fx_wire_group_batch_decode(out + 12, (size_t)n - 12, &b, NULL), 0);
    assert_int_equal(b.runs[0].first, 1);
    fx_wire_group_batch_deinit(&b);
}

static void test_builder_enforces_the_limits(void **state)
{
    size_t cap = fx_wire_group_batch_frame_size(FX_GROUP_MAX_RUNS + 1, FX_GROUP_MAX_RECORDS + 1, 0);
    uint8_t *out = malloc(cap);
    assert_non_null(out);
    fx_wire_group_builder gb;
    assert_int_equal(fx_wire_group_batch_begin(&gb, out, cap), 0);
    for (uint32_t i = 0; i < FX_GROUP_MAX_RUNS; i++) {
        assert_int_equal(fx_wire_group_batch_run(&gb, (uint64_t)i << 32, 1, 0), 0);
        assert_int_equal(fx_wire_group_batch_record(&gb, NULL, 0), 0);
    }
    assert_int_equal(fx_wire_group_batch_run(&gb, 0, 1, 0), FX_EWIRE_COUNT);
    for (uint32_t i = FX_GROUP_MAX_RUNS; i < FX_GROUP_MAX_RECORDS; i++)
        assert_int_equal(fx_wire_group_batch_record(&gb, NULL, 0), 0);
    assert_int_equal(fx_wire_group_batch_record(&gb, NULL, 0), FX_EWIRE_COUNT);
    ssize_t n = fx_wire_group_batch_finish(&gb);
    assert_true(n > 0);
    fx_wire_group_batch b;
    assert_int_equal(fx_wire_group_batch_decode(out + 12, (size_t)n - 12, &b, NULL), 0);
    assert_int_equal(b.nrecords, FX_GROUP_MAX_RECORDS);
    fx_wire_group_batch_deinit(&b);
    /* A run whose next offset would pass 2^64. */
    assert_int_equal(fx_wire_group_batch_begin(&gb, out, cap), 0);
    assert_int_equal(fx_wire_group_batch_run(&gb, UINT64_MAX - 1, 1, 0), 0);
    assert_int_equal(fx_wire_group_batch_record(&gb, NULL, 0), 0);
    assert_int_equal(fx_wire_group_batch_record(&gb, NULL, 0), FX_EWIRE_COUNT);
    free(out);
}

static void test_encoders_refuse_what_decoders_refuse(void **state)
{
    uint8_t out[256];
    fx_wire_group_op op = {.kind = FX_GROUP_OP_NAK, .first = 1, .count = 1};
    fx_wire_group_acks a = {.nops = 1, .ops = &op};
    assert_true(fx_wire_group_acks_encode(&a, out, sizeof(out)) > 0);
    op.count = 2;
    assert_int_equal(fx_wire_group_acks_encode(&a, out, sizeof(out)), -EINVAL);
    op.count = 1;
    op.kind = (fx_group_op_kind)6;
    assert_int_equal(fx_wire_group_acks_encode(&a, out, sizeof(out)), -EINVAL);
    op.kind = FX_GROUP_OP_ACK;
    op.count = 0;
    assert_int_equal(fx_wire_group_acks_encode(&a, out, sizeof(out)), -EINVAL);
    op.count = 1;
    op.reason = str("why");
    assert_int_equal(fx_wire_group_acks_encode(&a, out, sizeof(out)), -EINVAL);
    op.reason = (fx_wire_slice){0};
    a.nops = 0;
    assert_int_equal(fx_wire_group_acks_encode(&a, out, sizeof(out)), -EINVAL);
    a.nops = FX_GROUP_MAX_OPS + 1;
    assert_int_equal(fx_wire_group_acks_encode(&a, out, sizeof(out)), -EINVAL);

    fx_wire_group_refusal r = {5, (fx_group_why)0};
    fx_wire_group_acked d = {.nrefused = 1, .refused = &r};
    assert_int_equal(fx_wire_group_acked_encode(&d, out, sizeof(out)), -EINVAL);
    r.why = (fx_group_why)3;
    assert_int_equal(fx_wire_group_acked_encode(&d, out, sizeof(out)), -EINVAL);
    r.why = FX_GROUP_WHY_STALE;
    assert_true(fx_wire_group_acked_encode(&d, out, sizeof(out)) > 0);
    d.nrefused = FX_GROUP_MAX_REFUSED + 1;
    assert_int_equal(fx_wire_group_acked_encode(&d, out, sizeof(out)), -EINVAL);
}

static void test_batch_frame_size_saturates(void **state)
{
    assert_int_equal(fx_wire_group_batch_frame_size(0, 0, 0), FX_WIRE_HEADER_LEN + 5);
    assert_int_equal(fx_wire_group_batch_frame_size(1, 2, 10),
                     FX_WIRE_HEADER_LEN + 5 + 24 + 8 + 10);
    assert_int_equal(fx_wire_group_batch_frame_size(UINT32_MAX, UINT32_MAX, UINT64_MAX), SIZE_MAX);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_felixc_flag_is_a_body_kind_only_alone),
    cmocka_unit_test(test_group_frame_passes_the_frame_decoder),
    cmocka_unit_test(test_group_kind_reads_the_kind_byte),
    cmocka_unit_test(test_batch_roundtrips_two_runs),
    cmocka_unit_test(test_batch_of_many_runs_and_empty_records_roundtrips),
    cmocka_unit_test(test_acks_roundtrip_each_op_kind),
    cmocka_unit_test(test_acked_roundtrips_with_and_without_refusals),
    cmocka_unit_test(test_vectors_decode_and_encode_byte_for_byte),
    cmocka_unit_test(test_every_truncation_is_rejected),
    cmocka_unit_test(test_trailing_bytes_are_rejected),
    cmocka_unit_test(test_decoders_reject_other_frame_kinds),
    cmocka_unit_test(test_counts_the_bytes_cannot_hold_are_refused_before_walking),
    cmocka_unit_test(test_zero_counts_are_refused_but_no_refusal_is_fine),
    cmocka_unit_test(test_limits_are_enforced_by_decoders),
    cmocka_unit_test(test_batch_run_checks_attempt_and_offset_range),
    cmocka_unit_test(test_ack_op_rules),
    cmocka_unit_test(test_term_reason_is_checked_utf8_up_to_256_bytes),
    cmocka_unit_test(test_acked_refusal_why_is_checked),
    cmocka_unit_test(test_builder_too_small_changes_nothing),
    cmocka_unit_test(test_encoders_too_small_write_nothing),
    cmocka_unit_test(test_builder_misuse_is_einval),
    cmocka_unit_test(test_builder_enforces_the_limits),
    cmocka_unit_test(test_encoders_refuse_what_decoders_refuse),
    cmocka_unit_test(test_batch_frame_size_saturates),
};

FX_TEST_MAIN(tests)
