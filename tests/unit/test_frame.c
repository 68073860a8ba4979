/* Tests of the FLX1 frame layer: header codec, flag validation and the
 * streaming decoder under every kind of chunking. */
/* fx-test-libs: fx_wire fx_base */
#include "fx_test.h"

#include <errno.h>
#include <stdlib.h>

#include "wire/frame.h"

#if defined(__SANITIZE_ADDRESS__)
#define FX_HAVE_ASAN_STATS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FX_HAVE_ASAN_STATS 1
#endif
#endif
#ifdef FX_HAVE_ASAN_STATS
/* From ASan's allocator interface (sanitizer/allocator_interface.h, which not
 * every toolchain installs): bytes currently allocated by the program. */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

/* ---- helpers ------------------------------------------------------------------ */

static void put_header(uint8_t *out, uint32_t magic, uint16_t version, uint16_t flags,
                       uint32_t length)
{
    fx_frame_header h = {.magic = magic, .version = version, .flags = flags, .length = length};
    fx_frame_header_encode(&h, out);
}

static int feed_header(uint32_t magic, uint16_t version, uint16_t flags, uint32_t length,
                       uint32_t max, fx_frame_decoder *d)
{
    uint8_t hdr[FX_WIRE_HEADER_LEN];
    put_header(hdr, magic, version, flags, length);
    fx_frame_decoder_init(d, max);
    size_t used;
    fx_frame f;
    fx_wire_err err = {0};
    int rv = fx_frame_decoder_feed(d, hdr, sizeof(hdr), &used, &f, &err);
    if (rv < 0) {
        assert_int_equal(err.code, rv);
        assert_true(strlen(err.msg) > 0);
    }
    return rv;
}

/* Small deterministic PRNG (xorshift64*), so failures reproduce. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* Builds |nframes| back-to-back frames of assorted kinds and sizes (empty
 * bodies included) into a new buffer; stores its length in |*plen|. */
static uint8_t *make_stream(uint64_t seed, size_t nframes, size_t *plen)
{
    static const uint16_t flags[] = {0x0000, 0x0001, 0x0009, 0x0002, 0x0022,
                                     0x0004, 0x0024, 0x0010, 0x0040};
    size_t cap = nframes * (FX_WIRE_HEADER_LEN + 700), n = 0;
    uint8_t *buf = malloc(cap);
    assert_non_null(buf);
    for (size_t i = 0; i < nframes; i++) {
        size_t blen = rng_next(&seed) % 5 == 0 ? 0 : rng_next(&seed) % 700;
        uint8_t *p = fx_frame_header_put(buf + n, flags[rng_next(&seed) % 9], (uint32_t)blen);
        for (size_t k = 0; k < blen; k++)
            p[k] = (uint8_t)rng_next(&seed);
        n += FX_WIRE_HEADER_LEN + blen;
    }
    *plen = n;
    return buf;
}

/* Feeds |in| in chunks chosen by |chunk| (0 = all at once, 1 = one byte, else
 * random sizes 1..chunk from |seed|) and re-encodes every frame that comes out
 * into a new buffer, checking the HEADER/READY protocol on the way. Stores the
 * frame count in |*pframes| and the number of zero-copy frames in |*pzero|. */
static uint8_t *reframe(const uint8_t *in, size_t len, size_t chunk, uint64_t seed, size_t *pframes,
                        size_t *pzero, size_t *pout_len)
{
    uint8_t *out = malloc(len + 1);
    assert_non_null(out);
    size_t out_len = 0, frames = 0, zero = 0, pos = 0;
    uint32_t announced = 0;
    fx_frame_decoder d;
    fx_frame_decoder_init(&d, FX_WIRE_DEFAULT_MAX_FRAME);
    while (pos < len) {
        size_t n = len - pos;
        if (chunk == 1)
            n = 1;
        else if (chunk > 1 && n > 1)
            n = 1 + rng_next(&seed) % (n < chunk ? n : chunk);
        const uint8_t *p = in + pos;
        while (n > 0) {
            size_t used;
            fx_frame f;
            int rv = fx_frame_decoder_feed(&d, p, n, &used, &f, NULL);
            assert_true(rv >= 0);
            assert_true(used <= n);
            p += used;
            n -= used;
            pos += used;
            if (rv == FX_FRAME_HEADER) {
                assert_true(f.hdr.length > 0);
                assert_int_equal(fx_frame_decoder_announced(&d), f.hdr.length);
                assert_int_equal(fx_frame_decoder_expected(&d), f.hdr.length);
                announced = f.hdr.length;
            } else if (rv == FX_FRAME_READY) {
                assert_int_equal(f.len, f.hdr.length);
                assert_int_equal(announced, f.len); /* HEADER came first iff len > 0 */
                announced = 0;
                if (!f.buffered)
                    zero++;
                ssize_t w =
                    fx_frame_encode(f.hdr.flags, f.body, f.len, out + out_len, len + 1 - out_len);
                assert_true(w > 0);
                out_len += (size_t)w;
                frames++;
                assert_true(fx_frame_decoder_at_boundary(&d));
            } else {
                assert_int_equal(n, 0);
            }
        }
    }
    assert_int_equal(fx_frame_decoder_finish(&d, NULL), 0);
    fx_frame_decoder_deinit(&d);
    *pframes = frames;
    *pzero = zero;
    *pout_len = out_len;
    return out;
}

/* ---- header and flags ----------------------------------------------------------- */

static void test_header_roundtrip(void **state)
{
    uint8_t b[FX_WIRE_HEADER_LEN];
    uint8_t *end = fx_frame_header_put(b, 0x0024, 23);
    assert_ptr_equal(end, b + 12);
    static const uint8_t want[] = {0x46, 0x4c, 0x58, 0x31, 0x00, 0x01,
                                   0x00, 0x24, 0x00, 0x00, 0x00, 0x17};
    assert_memory_equal(b, want, sizeof(want));
    fx_frame_header h;
    assert_int_equal(fx_frame_header_decode(b, FX_WIRE_DEFAULT_MAX_FRAME, &h, NULL), 0);
    assert_int_equal(h.magic, FX_WIRE_MAGIC);
    assert_int_equal(h.version, 1);
    assert_int_equal(h.flags, 0x0024);
    assert_int_equal(h.length, 23);
}

static void test_bad_magic(void **state)
{
    fx_frame_decoder d;
    assert_int_equal(feed_header(0x464C5832u, 1, 0, 4, 1024, &d), FX_EWIRE_MAGIC);
    fx_frame_decoder_deinit(&d);
}

static void test_bad_version(void **state)
{
    fx_frame_decoder d;
    assert_int_equal(feed_header(FX_WIRE_MAGIC, 2, 0, 4, 1024, &d), FX_EWIRE_VERSION);
    fx_frame_decoder_deinit(&d);
}

static void test_length_over_max(void **state)
{
    fx_frame_decoder d;
    assert_int_equal(feed_header(FX_WIRE_MAGIC, 1, 0, 1025, 1024, &d), FX_EWIRE_TOO_LARGE);
    fx_frame_decoder_deinit(&d);
    /* Exactly max is fine. */
    assert_int_equal(feed_header(FX_WIRE_MAGIC, 1, 0, 1024, 1024, &d), FX_FRAME_HEADER);
    fx_frame_decoder_deinit(&d);
}

static void test_unknown_flag_bit(void **state)
{
    fx_wire_err err = {0};
    assert_int_equal(fx_frame_check_flags(0x0040, &err), FX_EWIRE_FLAGS);
    assert_int_equal(err.code, FX_EWIRE_FLAGS);
    assert_non_null(strstr(err.msg, "0x0040"));
    assert_int_equal(fx_frame_check_flags(0x8001, NULL), FX_EWIRE_FLAGS);
}

static void test_acked_flag_without_batch(void **state)
{
    assert_int_equal(fx_frame_check_flags(0x0008, NULL), FX_EWIRE_FLAGS_ACKED);
    assert_int_equal(fx_frame_check_flags(0x0018, NULL), FX_EWIRE_FLAGS_ACKED);
}

static void test_offsets_flag_without_events(void **state)
{
    assert_int_equal(fx_frame_check_flags(0x0020, NULL), FX_EWIRE_FLAGS_OFFSETS);
    assert_int_equal(fx_frame_check_flags(0x0021, NULL), FX_EWIRE_FLAGS_OFFSETS);
    assert_int_equal(fx_frame_check_flags(0x0030, NULL), FX_EWIRE_FLAGS_OFFSETS);
}

static void test_two_body_kinds(void **state)
{
    static const uint16_t bad[] = {0x0003, 0x0005, 0x0006, 0x0011, 0x0012, 0x0014, 0x0026};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(fx_frame_check_flags(bad[i], NULL), FX_EWIRE_FLAGS_KINDS);
}

static void test_every_valid_flag_combination_maps_to_one_kind(void **state)
{
    static const struct {
        uint16_t flags;
        fx_body_kind kind;
    } ok[] = {
        {0x0000, FX_BODY_JSON},
        {0x0001, FX_BODY_PUBLISH_BATCH},
        {0x0009, FX_BODY_PUBLISH_BATCH_ACKED},
        {0x0109, FX_BODY_PUBLISH_BATCH_ACKED}, /* idempotent */
        {0x0002, FX_BODY_EVENT_BATCH},
        {0x0022, FX_BODY_EVENT_BATCH},
        {0x0004, FX_BODY_EVENT_BATCH_SHARED},
        {0x0024, FX_BODY_EVENT_BATCH_SHARED},
        {0x0010, FX_BODY_PUBLISH_ACK},
        {0x8000, FX_BODY_FELIXC},
    };
    size_t valid = 0;
    for (unsigned f = 0; f <= 0xFFFF; f++) {
        fx_body_kind k;
        if (fx_frame_kind((uint16_t)f, &k, NULL) == 0)
            valid++;
    }
    assert_int_equal(valid, sizeof(ok) / sizeof(ok[0]));
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        fx_body_kind k = (fx_body_kind)-1;
        assert_int_equal(fx_frame_kind(ok[i].flags, &k, NULL), 0);
        assert_int_equal(k, ok[i].kind);
        assert_string_not_equal(fx_body_kind_name(k), "unknown");
    }
}

static void test_frame_encode_checks_capacity(void **state)
{
    uint8_t out[16];
    static const uint8_t body[] = {1, 2, 3, 4};
    assert_int_equal(fx_frame_encode(0, body, 4, out, 15), -ENOSPC);
    assert_int_equal(fx_frame_encode(0, body, 4, out, 16), 16);
    assert_memory_equal(out + 12, body, 4);
    assert_int_equal(fx_frame_size(4), 16);
}

/* ---- streaming decoder ------------------------------------------------------------- */

static void test_decoder_whole_input_is_zero_copy(void **state)
{
    size_t len, frames, zero, out_len;
    uint8_t *in = make_stream(1, 40, &len);
    uint8_t *out = reframe(in, len, 0, 0, &frames, &zero, &out_len);
    assert_int_equal(frames, 40);
    assert_int_equal(zero, 40);
    assert_int_equal(out_len, len);
    assert_memory_equal(out, in, len);
    free(in);
    free(out);
}

static void test_decoder_one_byte_at_a_time(void **state)
{
    size_t len, frames1, zero1, len1, frames2, zero2, len2;
    uint8_t *in = make_stream(2, 30, &len);
    uint8_t *whole = reframe(in, len, 0, 0, &frames1, &zero1, &len1);
    uint8_t *bytes = reframe(in, len, 1, 0, &frames2, &zero2, &len2);
    assert_int_equal(frames1, 30);
    assert_int_equal(frames2, frames1);
    assert_int_equal(len2, len1);
    assert_memory_equal(bytes, whole, len1);
    assert_memory_equal(bytes, in, len);
    free(in);
    free(whole);
    free(bytes);
}

static void test_decoder_random_chunking(void **state)
{
    size_t len;
    uint8_t *in = make_stream(3, 300, &len);
    static const size_t chunks[] = {2, 7, 13, 64, 1000, 5000};
    for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
        size_t frames, zero, out_len;
        uint8_t *out =
            reframe(in, len, chunks[c], 0x9E3779B97F4A7C15ull + c, &frames, &zero, &out_len);
        assert_int_equal(frames, 300);
        assert_int_equal(out_len, len);
        assert_memory_equal(out, in, len);
        free(out);
    }
    free(in);
}

/* A body that spanned feeds can be taken over: it survives the decoder's
 * next calls and is the caller's to free; a zero-copy body cannot be. */
static void test_decoder_take_hands_over_a_buffered_body(void **state)
{
    uint8_t two[2 * (12 + 6)];
    static const uint8_t body[6] = {10, 11, 12, 13, 14, 15};
    fx_frame_header_put(two, 0x0004, 6);
    memcpy(two + 12, body, 6);
    memcpy(two + 18, two, 18);
    fx_frame_decoder d;
    fx_frame_decoder_init(&d, 1024);
    fx_frame f;
    size_t used;
    /* The header and half the body, then the rest: buffered. */
    assert_int_equal(fx_frame_decoder_feed(&d, two, 15, &used, &f, NULL), FX_FRAME_HEADER);
    assert_int_equal(fx_frame_decoder_feed(&d, two + used, 15 - used, &used, &f, NULL),
                     FX_FRAME_NEED_MORE);
    assert_int_equal(fx_frame_decoder_feed(&d, two + 15, 3, &used, &f, NULL), FX_FRAME_READY);
    assert_true(f.buffered);
    uint8_t *mine = fx_frame_decoder_take(&d, &f);
    assert_ptr_equal(mine, f.body);
    assert_null(fx_frame_decoder_take(&d, &f)); /* only once */
    /* The second frame arrives whole: zero-copy, nothing to take. */
    assert_int_equal(fx_frame_decoder_feed(&d, two + 18, 18, &used, &f, NULL), FX_FRAME_HEADER);
    assert_int_equal(fx_frame_decoder_feed(&d, two + 18 + used, 18 - used, &used, &f, NULL),
                     FX_FRAME_READY);
    assert_false(f.buffered);
    assert_null(fx_frame_decoder_take(&d, &f));
    assert_memory_equal(mine, body, 6); /* still intact after the decoder moved on */
    free(mine);
    fx_frame_decoder_deinit(&d);
}

static void test_decoder_header_announces_length_before_body(void **state)
{
    uint8_t frame[12 + 10];
    fx_frame_header_put(frame, 0x0004, 10);
    memset(frame + 12, 0xAB, 10);
    fx_frame_decoder d;
    fx_frame_decoder_init(&d, 1024);
    fx_frame f;
    size_t used;
    /* 5 header bytes: nothing yet; the rest of the header is what is expected. */
    assert_int_equal(fx_frame_decoder_feed(&d, frame, 5, &used, &f, NULL), FX_FRAME_NEED_MORE);
    assert_int_equal(used, 5);
    assert_int_equal(fx_frame_decoder_expected(&d), 7);
    assert_int_equal(fx_frame_decoder_announced(&d), 0);
    /* Header completes: HEADER event before any body byte is taken. */
    assert_int_equal(fx_frame_decoder_feed(&d, frame + 5, 10, &used, &f, NULL), FX_FRAME_HEADER);
    assert_int_equal(used, 7);
    assert_int_equal(f.hdr.length, 10);
    assert_int_equal(f.kind, FX_BODY_EVENT_BATCH_SHARED);
    assert_null(f.body);
    assert_int_equal(fx_frame_decoder_announced(&d), 10);
    assert_int_equal(fx_frame_decoder_expected(&d), 10);
    assert_int_equal(fx_frame_decoder_feed(&d, frame + 12, 3, &used, &f, NULL), FX_FRAME_NEED_MORE);
    assert_int_equal(fx_frame_decoder_expected(&d), 7);
    assert_int_equal(fx_frame_decoder_buffered(&d), 15);
    assert_int_equal(fx_frame_decoder_feed(&d, frame + 15, 7, &used, &f, NULL), FX_FRAME_READY);
    assert_true(f.buffered);
    assert_int_equal(f.len, 10);
    assert_memory_equal(f.body, frame + 12, 10);
    assert_int_equal(fx_frame_decoder_expected(&d), 0);
    assert_true(fx_frame_decoder_at_boundary(&d));
    fx_frame_decoder_deinit(&d);
}

static void test_decoder_empty_body_is_ready_without_header_event(void **state)
{
    uint8_t frame[12];
    fx_frame_header_put(frame, 0x0000, 0);
    fx_frame_decoder d;
    fx_frame_decoder_init(&d, 1024);
    fx_frame f;
    size_t used;
    assert_int_equal(fx_frame_decoder_feed(&d, frame, 12, &used, &f, NULL), FX_FRAME_READY);
    assert_int_equal(used, 12);
    assert_int_equal(f.len, 0);
    assert_int_equal(f.kind, FX_BODY_JSON);
    assert_true(fx_frame_decoder_at_boundary(&d));
    fx_frame_decoder_deinit(&d);
}

static void test_decoder_hands_bad_flags_to_caller(void **state)
{
    uint8_t frames[2 * 14];
    fx_frame_header_put(frames, 0x0040, 2);
    frames[12] = 'h';
    frames[13] = 'i';
    fx_frame_header_put(frames + 14, 0x0000, 2);
    frames[26] = '{';
    frames[27] = '}';
    fx_frame_decoder d;
    fx_frame_decoder_init(&d, 1024);
    fx_frame f;
    size_t used, pos = 0;
    int rv;
    while ((rv = fx_frame_decoder_feed(&d, frames + pos, 28 - pos, &used, &f, NULL)) ==
           FX_FRAME_HEADER)
        pos += used;
    pos += used;
    assert_int_equal(rv, FX_FRAME_READY);
    assert_int_equal(f.flags_rv, FX_EWIRE_FLAGS);
    assert_int_equal(f.len, 2);
    /* The stream goes on with the next frame. */
    while ((rv = fx_frame_decoder_feed(&d, frames + pos, 28 - pos, &used, &f, NULL)) ==
           FX_FRAME_HEADER)
        pos += used;
    assert_int_equal(rv, FX_FRAME_READY);
    assert_int_equal(f.flags_rv, 0);
    assert_memory_equal(f.body, "{}", 2);
    fx_frame_decoder_deinit(&d);
}

static void test_decoder_fin_mid_frame_is_truncated(void **state)
{
    uint8_t frame[12 + 8];
    fx_frame_header_put(frame, 0x0000, 8);
    memset(frame + 12, 'x', 8);
    /* FIN inside the header and inside the body. */
    static const size_t cuts[] = {1, 11, 12, 19};
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
        fx_frame_decoder d;
        fx_frame_decoder_init(&d, 1024);
        size_t pos = 0, used;
        fx_frame f;
        while (pos < cuts[i]) {
            assert_true(fx_frame_decoder_feed(&d, frame + pos, cuts[i] - pos, &used, &f, NULL) >=
                        0);
            pos += used;
        }
        assert_false(fx_frame_decoder_at_boundary(&d));
        fx_wire_err err = {0};
        assert_int_equal(fx_frame_decoder_finish(&d, &err), FX_EWIRE_TRUNCATED);
        assert_int_equal(err.code, FX_EWIRE_TRUNCATED);
        /* Failed for good. */
        assert_int_equal(fx_frame_decoder_feed(&d, frame, 1, &used, &f, NULL), FX_EWIRE_TRUNCATED);
        fx_frame_decoder_deinit(&d);
    }
}

static void test_decoder_fin_at_boundary_is_clean(void **state)
{
    fx_frame_decoder d;
    fx_frame_decoder_init(&d, 1024);
    assert_true(fx_frame_decoder_at_boundary(&d));
    assert_int_equal(fx_frame_decoder_finish(&d, NULL), 0);
    uint8_t frame[12 + 1];
    fx_frame_header_put(frame, 0x0000, 1);
    frame[12] = '1';
    fx_frame f;
    size_t used;
    assert_int_equal(fx_frame_decoder_feed(&d, frame, 13, &used, &f, NULL), FX_FRAME_HEADER);
    assert_int_equal(fx_frame_decoder_feed(&d, frame + used, 13 - used, &used, &f, NULL),
                     FX_FRAME_READY);
    assert_int_equal(fx_frame_decoder_finish(&d, NULL), 0);
    fx_frame_decoder_deinit(&d);
}

static void test_decoder_error_is_sticky(void **state)
{
    fx_frame_decoder d;
    assert_int_equal(feed_header(FX_WIRE_MAGIC, 7, 0, 0, 1024, &d), FX_EWIRE_VERSION);
    uint8_t good[12];
    fx_frame_header_put(good, 0, 0);
    fx_frame f;
    size_t used = 99;
    fx_wire_err err = {0};
    assert_int_equal(fx_frame_decoder_feed(&d, good, 12, &used, &f, &err), FX_EWIRE_VERSION);
    assert_int_equal(used, 0);
    assert_int_equal(err.code, FX_EWIRE_VERSION);
    assert_false(fx_frame_decoder_at_boundary(&d));
    assert_int_equal(fx_frame_decoder_finish(&d, NULL), FX_EWIRE_VERSION);
    fx_frame_decoder_deinit(&d);
}

static size_t allocated_bytes(void)
{
#ifdef FX_HAVE_ASAN_STATS
    return __sanitizer_get_current_allocated_bytes();
#else
    return 0;
#endif
}

static void test_decoder_does_not_allocate_before_header_checks(void **state)
{
    /* A header announcing 4 GiB - 1 against a 16 MiB limit fails, having
     * allocated nothing, even when body bytes follow it. */
    uint8_t in[12 + 64];
    fx_frame_header_put(in, 0x0001, 0xFFFFFFFFu);
    memset(in + 12, 0, 64);
    fx_frame_decoder d;
    fx_frame_decoder_init(&d, FX_WIRE_DEFAULT_MAX_FRAME);
    size_t before = allocated_bytes(), used;
    fx_frame f;
    for (size_t i = 0; i < sizeof(in); i++) { /* byte by byte: the worst case */
        int rv = fx_frame_decoder_feed(&d, in + i, 1, &used, &f, NULL);
        if (i < 11) {
            assert_int_equal(rv, FX_FRAME_NEED_MORE);
            continue;
        }
        assert_int_equal(rv, FX_EWIRE_TOO_LARGE);
    }
    assert_null(d.buf);
    assert_int_equal(allocated_bytes(), before);
    fx_frame_decoder_deinit(&d);

    /* A legal header whose body spans feeds allocates exactly its length,
     * and only once body bytes arrive. */
    fx_frame_header_put(in, 0x0000, 1000);
    fx_frame_decoder_init(&d, FX_WIRE_DEFAULT_MAX_FRAME);
    before = allocated_bytes();
    assert_int_equal(fx_frame_decoder_feed(&d, in, 12, &used, &f, NULL), FX_FRAME_HEADER);
    assert_null(d.buf);
    assert_int_equal(fx_frame_decoder_feed(&d, in + 12, 64, &used, &f, NULL), FX_FRAME_NEED_MORE);
    assert_non_null(d.buf);
#ifdef FX_HAVE_ASAN_STATS
    assert_int_equal(allocated_bytes() - before, 1000);
#endif
    fx_frame_decoder_deinit(&d);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_header_roundtrip),
    cmocka_unit_test(test_bad_magic),
    cmocka_unit_test(test_bad_version),
    cmocka_unit_test(test_length_over_max),
    cmocka_unit_test(test_unknown_flag_bit),
    cmocka_unit_test(test_acked_flag_without_batch),
    cmocka_unit_test(test_offsets_flag_without_events),
    cmocka_unit_test(test_two_body_kinds),
    cmocka_unit_test(test_every_valid_flag_combination_maps_to_one_kind),
    cmocka_unit_test(test_frame_encode_checks_capacity),
    cmocka_unit_test(test_decoder_whole_input_is_zero_copy),
    cmocka_unit_test(test_decoder_one_byte_at_a_time),
    cmocka_unit_test(test_decoder_random_chunking),
    cmocka_unit_test(test_decoder_take_hands_over_a_buffered_body),
    cmocka_unit_test(test_decoder_header_announces_length_before_body),
    cmocka_unit_test(test_decoder_empty_body_is_ready_without_header_event),
    cmocka_unit_test(test_decoder_hands_bad_flags_to_caller),
    cmocka_unit_test(test_decoder_fin_mid_frame_is_truncated),
    cmocka_unit_test(test_decoder_fin_at_boundary_is_clean),
    cmocka_unit_test(test_decoder_error_is_sticky),
    cmocka_unit_test(test_decoder_does_not_allocate_before_header_checks),
};

FX_TEST_MAIN(tests)
