/* Tests of the binary frame bodies: golden byte layouts from the protocol
 * description, round trips, and one case per decoder error code. */
/* fx-test-libs: fx_wire fx_base */
#include "fx_test.h"

#include <errno.h>
#include <stdlib.h>

#include "wire/binary.h"

/* ---- helpers ---------------------------------------------------------------------- */

/* Decodes a hex string (spaces ignored) into |out|; returns the byte count. */
static size_t unhex(const char *hex, uint8_t *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = hex; *p;) {
        if (*p == ' ') {
            p++;
            continue;
        }
        unsigned v;
        assert_int_equal(sscanf(p, "%2x", &v), 1);
        assert_true(n < cap);
        out[n++] = (uint8_t)v;
        p += 2;
    }
    return n;
}

static fx_wire_slice str(const char *s)
{
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

static void assert_slice(fx_wire_slice s, const char *want)
{
    assert_int_equal(s.len, strlen(want));
    assert_memory_equal(s.ptr, want, s.len);
}

/* Checks the header of |frame| and returns a pointer to its body. */
static const uint8_t *body_of(const uint8_t *frame, size_t frame_len, uint16_t want_flags)
{
    fx_frame_header h;
    assert_int_equal(fx_frame_header_decode(frame, FX_WIRE_DEFAULT_MAX_FRAME, &h, NULL), 0);
    assert_int_equal(h.flags, want_flags);
    assert_int_equal(h.length, frame_len - FX_WIRE_HEADER_LEN);
    return frame + FX_WIRE_HEADER_LEN;
}

#define PUB_T1_BODY "0002 7431 0007 64656661756c74 0004 64656d6f 00000001 00000005 68656c6c6f"

/* ---- golden layouts (felix-facts.md §3) --------------------------------------------- */

static void test_golden_publish_batch_t1_default_demo_hello(void **state)
{
    uint8_t want[64], out[64];
    size_t n = unhex("464c5831 0001 0001 00000020 " PUB_T1_BODY, want, sizeof(want));
    assert_int_equal(n, 44);
    fx_wire_slice hello = str("hello");
    fx_wire_publish_batch b = {.tenant = str("t1"),
                               .ns = str("default"),
                               .stream = str("demo"),
                               .count = 1,
                               .payloads = &hello};
    assert_int_equal(fx_wire_publish_batch_frame_size(&b), 44);
    assert_int_equal(fx_wire_publish_batch_encode(&b, out, sizeof(out)), 44);
    assert_memory_equal(out, want, 44);

    fx_wire_publish_batch d;
    assert_int_equal(fx_wire_publish_batch_decode(0x0001, body_of(want, n, 0x0001), 32, &d, NULL),
                     0);
    assert_int_equal(d.ack, FX_WIRE_ACK_NONE);
    assert_slice(d.tenant, "t1");
    assert_slice(d.ns, "default");
    assert_slice(d.stream, "demo");
    assert_int_equal(d.count, 1);
    assert_slice(d.payloads[0], "hello");
    assert_ptr_equal(d.payloads[0].ptr, want + n - 5); /* references the input */
    fx_wire_publish_batch_deinit(&d);
}

static void test_golden_acked_publish_batch_req7_per_batch(void **state)
{
    uint8_t want[64], out[64];
    size_t n =
        unhex("464c5831 0001 0009 00000029 0000000000000007 02 " PUB_T1_BODY, want, sizeof(want));
    assert_int_equal(n, 53);
    fx_wire_slice hello = str("hello");
    fx_wire_publish_batch b = {.request_id = 7,
                               .ack = FX_WIRE_ACK_PER_BATCH,
                               .tenant = str("t1"),
                               .ns = str("default"),
                               .stream = str("demo"),
                               .count = 1,
                               .payloads = &hello};
    assert_int_equal(fx_wire_publish_batch_flags(&b), 0x0009);
    assert_int_equal(fx_wire_publish_batch_encode(&b, out, sizeof(out)), 53);
    assert_memory_equal(out, want, 53);

    fx_wire_publish_batch d;
    assert_int_equal(fx_wire_publish_batch_decode(0x0009, body_of(want, n, 0x0009), 41, &d, NULL),
                     0);
    assert_int_equal(d.request_id, 7);
    assert_int_equal(d.ack, FX_WIRE_ACK_PER_BATCH);
    assert_slice(d.stream, "demo");
    assert_int_equal(d.count, 1);
    assert_slice(d.payloads[0], "hello");
    fx_wire_publish_batch_deinit(&d);
}

static void test_golden_shared_event_batch_base5(void **state)
{
    uint8_t want[64], out[64];
    size_t n = unhex("464c5831 0001 0024 00000017 0000000000000005 00000002 00000001 61 "
                     "00000002 6263",
                     want, sizeof(want));
    assert_int_equal(n, 35);
    fx_wire_slice p[2] = {str("a"), str("bc")};
    fx_wire_event_batch e = {
        .shared = true, .has_offsets = true, .base_offset = 5, .count = 2, .payloads = p};
    assert_int_equal(fx_wire_event_batch_frame_size(&e), 35);
    assert_int_equal(fx_wire_event_batch_encode(&e, out, sizeof(out)), 35);
    assert_memory_equal(out, want, 35);

    fx_wire_event_batch d;
    assert_int_equal(fx_wire_event_batch_decode(0x0024, body_of(want, n, 0x0024), 23, &d, NULL), 0);
    assert_true(d.shared);
    assert_true(d.has_offsets);
    assert_int_equal(d.base_offset, 5);
    assert_int_equal(d.count, 2);
    assert_slice(d.payloads[0], "a");
    assert_slice(d.payloads[1], "bc");
    fx_wire_event_batch_deinit(&d);
}

static void test_golden_per_subscriber_event_batch(void **state)
{
    /* 0x0022: u64 subscription_id, u64 base_offset, u32 count, entries. */
    uint8_t want[64], out[64];
    size_t n = unhex("464c5831 0001 0022 00000019 000000000000002a 000000000000000a 00000001 "
                     "00000001 78",
                     want, sizeof(want));
    fx_wire_slice x = str("x");
    fx_wire_event_batch e = {
        .subscription_id = 42, .has_offsets = true, .base_offset = 10, .count = 1, .payloads = &x};
    assert_int_equal(fx_wire_event_batch_encode(&e, out, sizeof(out)), n);
    assert_memory_equal(out, want, n);
    fx_wire_event_batch d;
    assert_int_equal(fx_wire_event_batch_decode(0x0022, want + 12, n - 12, &d, NULL), 0);
    assert_false(d.shared);
    assert_int_equal(d.subscription_id, 42);
    assert_int_equal(d.base_offset, 10);
    assert_slice(d.payloads[0], "x");
    fx_wire_event_batch_deinit(&d);

    /* 0x0002 without offsets: no base_offset field. */
    e.has_offsets = false;
    n = unhex("464c5831 0001 0002 00000011 000000000000002a 00000001 00000001 78", want,
              sizeof(want));
    assert_int_equal(fx_wire_event_batch_encode(&e, out, sizeof(out)), n);
    assert_memory_equal(out, want, n);
    assert_int_equal(fx_wire_event_batch_decode(0x0002, want + 12, n - 12, &d, NULL), 0);
    assert_false(d.has_offsets);
    assert_int_equal(d.base_offset, 0);
    fx_wire_event_batch_deinit(&d);
}

static void test_golden_publish_ack_error_req9(void **state)
{
    uint8_t want[64], out[64];
    size_t n = unhex("464c5831 0001 0010 0000001b 01 0000000000000009 0010 "
                     "73747265616d206e6f7420666f756e64",
                     want, sizeof(want));
    fx_wire_publish_ack a = {.ok = false, .request_id = 9, .message = str("stream not found")};
    assert_int_equal(fx_wire_publish_ack_frame_size(&a), n);
    assert_int_equal(fx_wire_publish_ack_encode(&a, out, sizeof(out)), n);
    assert_memory_equal(out, want, n);
    fx_wire_publish_ack d;
    assert_int_equal(fx_wire_publish_ack_decode(body_of(want, n, 0x0010), n - 12, &d, NULL), 0);
    assert_false(d.ok);
    assert_int_equal(d.request_id, 9);
    assert_slice(d.message, "stream not found");
}

static void test_golden_publish_ack_ok_req7(void **state)
{
    uint8_t want[32], out[32];
    size_t n = unhex("464c5831 0001 0010 0000000b 00 0000000000000007 0000", want, sizeof(want));
    fx_wire_publish_ack a = {.ok = true, .request_id = 7};
    assert_int_equal(fx_wire_publish_ack_encode(&a, out, sizeof(out)), n);
    assert_memory_equal(out, want, n);
    fx_wire_publish_ack d;
    assert_int_equal(fx_wire_publish_ack_decode(want + 12, n - 12, &d, NULL), 0);
    assert_true(d.ok);
    assert_int_equal(d.request_id, 7);
    assert_int_equal(d.message.len, 0);
}

/* ---- encoders -------------------------------------------------------------------------- */

static void test_large_batch_roundtrips_through_heap_array(void **state)
{
    enum { N = 100 };
    fx_wire_slice p[N];
    char texts[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(texts[i], sizeof(texts[i]), "m%d", i);
        p[i] = str(texts[i]);
    }
    p[7].len = 0; /* empty payloads are legal */
    fx_wire_publish_batch b = {.request_id = 1ull << 40,
                               .ack = FX_WIRE_ACK_PER_MESSAGE,
                               .tenant = str("tenant-é"),
                               .ns = str("ns"),
                               .stream = str("s"),
                               .count = N,
                               .payloads = p};
    ssize_t size = fx_wire_publish_batch_frame_size(&b);
    assert_true(size > 0);
    uint8_t *out = malloc((size_t)size);
    assert_int_equal(fx_wire_publish_batch_encode(&b, out, (size_t)size - 1), -ENOSPC);
    assert_int_equal(fx_wire_publish_batch_encode(&b, out, (size_t)size), size);
    fx_wire_publish_batch d;
    assert_int_equal(fx_wire_publish_batch_decode(0x0009, out + 12, (size_t)size - 12, &d, NULL),
                     0);
    assert_int_equal(d.request_id, 1ull << 40);
    assert_int_equal(d.ack, FX_WIRE_ACK_PER_MESSAGE);
    assert_slice(d.tenant, "tenant-é");
    assert_int_equal(d.count, N);
    assert_ptr_not_equal(d.payloads, d.inline_payloads);
    for (int i = 0; i < N; i++) {
        assert_int_equal(d.payloads[i].len, p[i].len);
        assert_memory_equal(d.payloads[i].ptr, p[i].ptr, p[i].len);
    }
    fx_wire_publish_batch_deinit(&d);
    free(out);
}

static void test_event_batch_iov_matches_flat_encoding(void **state)
{
    fx_wire_slice p[5] = {str("alpha"), str(""), str("c"), str("delta-delta"), str("e")};
    for (uint32_t count = 0; count <= 5; count++) {
        for (int shared = 0; shared < 2; shared++) {
            fx_wire_event_batch e = {.shared = shared,
                                     .has_offsets = count % 2,
                                     .subscription_id = 3,
                                     .base_offset = 1000 + count,
                                     .count = count,
                                     .payloads = p};
            uint8_t flat[256], meta[128], joined[256];
            struct iovec iov[10];
            size_t iovcnt = 0;
            ssize_t n = fx_wire_event_batch_encode(&e, flat, sizeof(flat));
            assert_true(n > 0);
            assert_true(fx_wire_event_batch_meta_size(&e) <= sizeof(meta));
            assert_int_equal(fx_wire_event_batch_encode_iov(&e, meta, 3, iov, 10, &iovcnt),
                             -ENOSPC);
            assert_int_equal(
                fx_wire_event_batch_encode_iov(&e, meta, sizeof(meta), iov, 10, &iovcnt), n);
            assert_int_equal(iovcnt, count ? 2 * count : 1);
            size_t k = 0;
            for (size_t i = 0; i < iovcnt; i++) {
                memcpy(joined + k, iov[i].iov_base, iov[i].iov_len);
                k += iov[i].iov_len;
            }
            assert_int_equal(k, n);
            assert_memory_equal(joined, flat, k);
        }
    }
}

static void test_publish_ack_message_truncated_at_char_boundary(void **state)
{
    /* 510 ASCII bytes then "é" (2 bytes) then "€" (3 bytes): byte 512 falls
     * inside the euro sign, so the cut keeps 512 bytes ending after "é"... */
    char msg[520];
    memset(msg, 'a', 510);
    memcpy(msg + 510, "\xc3\xa9\xe2\x82\xac", 5);
    fx_wire_publish_ack a = {.ok = false, .request_id = 1, .message = {(const uint8_t *)msg, 515}};
    uint8_t out[600];
    ssize_t n = fx_wire_publish_ack_encode(&a, out, sizeof(out));
    assert_int_equal(n, 12 + 11 + 512);
    fx_wire_publish_ack d;
    assert_int_equal(fx_wire_publish_ack_decode(out + 12, (size_t)n - 12, &d, NULL), 0);
    assert_int_equal(d.message.len, 512);
    /* ... and one byte later the cut backs off to before the euro sign. */
    memset(msg, 'a', 511);
    memcpy(msg + 511, "\xe2\x82\xac", 3);
    a.message.len = 514;
    n = fx_wire_publish_ack_encode(&a, out, sizeof(out));
    assert_int_equal(n, 12 + 11 + 511);
    assert_int_equal(fx_wire_publish_ack_decode(out + 12, (size_t)n - 12, &d, NULL), 0);
    assert_int_equal(fx_be16(out + 12 + 9), 511);
}

static void test_encoder_rejects_bad_input(void **state)
{
    uint8_t out[128];
    static uint8_t longname[70000];
    memset(longname, 'n', sizeof(longname));
    fx_wire_publish_batch b = {.tenant = {longname, 65536}, .ns = str("n"), .stream = str("s")};
    assert_int_equal(fx_wire_publish_batch_encode(&b, out, sizeof(out)), FX_EWIRE_NAME);
    b.tenant = (fx_wire_slice){(const uint8_t *)"\xc0\xaf", 2};
    assert_int_equal(fx_wire_publish_batch_encode(&b, out, sizeof(out)), FX_EWIRE_UTF8);
    b.tenant = str("t");
    b.ack = (fx_wire_ack)3;
    assert_int_equal(fx_wire_publish_batch_encode(&b, out, sizeof(out)), FX_EWIRE_ACK_MODE);
    b.ack = FX_WIRE_ACK_NONE;
    assert_int_equal(fx_wire_publish_batch_encode(&b, out, 12), -ENOSPC);
    assert_int_equal(fx_wire_publish_batch_encode(&b, out, sizeof(out)), 12 + 6 + 3 + 4);
}

/* ---- decoder errors, one code each ------------------------------------------------- */

/* Decodes |hex| as a 0x0001 body and returns the code; checks |err| agrees. */
static int decode_pub(uint16_t flags, const char *hex)
{
    uint8_t body[128];
    size_t n = unhex(hex, body, sizeof(body));
    fx_wire_publish_batch b;
    fx_wire_err err = {0};
    int rv = fx_wire_publish_batch_decode(flags, body, n, &b, &err);
    if (rv == 0) {
        fx_wire_publish_batch_deinit(&b);
    } else {
        assert_int_equal(err.code, rv);
        assert_true(strlen(err.msg) > 10);
    }
    return rv;
}

static void test_truncated_body(void **state)
{
    /* The payload announces 5 bytes, 4 are there. */
    assert_int_equal(decode_pub(0x0001, "0002 7431 0007 64656661756c74 0004 64656d6f 00000001 "
                                        "00000005 68656c6c"),
                     FX_EWIRE_TRUNCATED);
    /* Cut inside a name. */
    assert_int_equal(decode_pub(0x0001, "0002 74"), FX_EWIRE_TRUNCATED);
}

static void test_every_prefix_of_a_valid_body_is_rejected(void **state)
{
    uint8_t body[64];
    size_t n = unhex("0000000000000007 01 " PUB_T1_BODY, body, sizeof(body));
    for (size_t cut = 0; cut < n; cut++) {
        fx_wire_publish_batch b;
        int rv = fx_wire_publish_batch_decode(0x0009, body, cut, &b, NULL);
        /* Cut right after the count, count 1 > 0 remaining / 4. */
        assert_true(rv == FX_EWIRE_TRUNCATED || rv == FX_EWIRE_COUNT);
    }
    fx_wire_publish_batch b;
    assert_int_equal(fx_wire_publish_batch_decode(0x0009, body, n, &b, NULL), 0);
    fx_wire_publish_batch_deinit(&b);
}

static void test_count_larger_than_remaining(void **state)
{
    /* count 0xFFFFFFFF with 8 bytes left: rejected before any allocation. */
    assert_int_equal(decode_pub(0x0001, "0001 74 0001 6e 0001 73 ffffffff 00000000 00000000"),
                     FX_EWIRE_COUNT);
    uint8_t body[16];
    size_t n = unhex("ffffffff 00000000", body, sizeof(body));
    fx_wire_event_batch e;
    assert_int_equal(fx_wire_event_batch_decode(0x0004, body, n, &e, NULL), FX_EWIRE_COUNT);
}

/* A body of |count| empty payloads for t/n/s, into a new buffer. */
static uint8_t *empty_batch_body(uint32_t count, size_t *plen)
{
    size_t len = 9 + 4 + (size_t)count * 4;
    uint8_t *b = calloc(1, len);
    assert_non_null(b);
    uint8_t *p = b;
    for (const char *name = "tns"; *name; name++) {
        p = fx_put16(p, 1);
        *p++ = (uint8_t)*name;
    }
    fx_put32(p, count);
    *plen = len;
    return b;
}

static void test_publish_batch_over_65536_messages_is_refused(void **state)
{
    size_t len;
    uint8_t *ok = empty_batch_body(FX_WIRE_BATCH_MAX_MESSAGES, &len);
    fx_wire_publish_batch d;
    assert_int_equal(fx_wire_publish_batch_decode(0x0001, ok, len, &d, NULL), 0);
    assert_int_equal(d.count, 65536);
    fx_wire_publish_batch_deinit(&d);
    free(ok);
    /* One more: refused on the count alone, whatever follows. */
    uint8_t *big = empty_batch_body(FX_WIRE_BATCH_MAX_MESSAGES + 1, &len);
    fx_wire_err err = {0};
    assert_int_equal(fx_wire_publish_batch_decode(0x0001, big, len, &d, &err), FX_EWIRE_COUNT);
    assert_non_null(strstr(err.msg, "65536"));
    free(big);
    /* The encoder will not write one either. */
    fx_wire_slice *p = calloc(FX_WIRE_BATCH_MAX_MESSAGES + 1, sizeof(*p));
    assert_non_null(p);
    fx_wire_publish_batch b = {.tenant = str("t"),
                               .ns = str("n"),
                               .stream = str("s"),
                               .count = FX_WIRE_BATCH_MAX_MESSAGES + 1,
                               .payloads = p};
    assert_int_equal(fx_wire_publish_batch_frame_size(&b), FX_EWIRE_COUNT);
    b.count = FX_WIRE_BATCH_MAX_MESSAGES;
    assert_true(fx_wire_publish_batch_frame_size(&b) > 0);
    free(p);
}

static void test_invalid_utf8_name(void **state)
{
    /* Overlong '/' in the stream name. */
    assert_int_equal(decode_pub(0x0001, "0001 74 0001 6e 0002 c0af 00000000"), FX_EWIRE_UTF8);
}

static void test_trailing_bytes(void **state)
{
    assert_int_equal(decode_pub(0x0001, "0001 74 0001 6e 0001 73 00000001 00000001 78 00"),
                     FX_EWIRE_TRAILING);
    uint8_t body[32];
    size_t n = unhex("00 0000000000000001 0000 ff", body, sizeof(body));
    fx_wire_publish_ack a;
    assert_int_equal(fx_wire_publish_ack_decode(body, n, &a, NULL), FX_EWIRE_TRAILING);
}

static void test_bad_ack_mode(void **state)
{
    assert_int_equal(decode_pub(0x0009, "0000000000000001 00 0001 74 0001 6e 0001 73 00000000"),
                     FX_EWIRE_ACK_MODE);
    assert_int_equal(decode_pub(0x0009, "0000000000000001 03 0001 74 0001 6e 0001 73 00000000"),
                     FX_EWIRE_ACK_MODE);
    uint64_t id;
    fx_wire_ack ack;
    uint8_t prefix[9] = {0, 0, 0, 0, 0, 0, 0, 9, 1};
    assert_int_equal(fx_wire_publish_acked_prefix_decode(prefix, 9, &id, &ack, NULL), 0);
    assert_int_equal(id, 9);
    assert_int_equal(ack, FX_WIRE_ACK_PER_MESSAGE);
    assert_int_equal(fx_wire_publish_acked_prefix_decode(prefix, 8, &id, &ack, NULL),
                     FX_EWIRE_TRUNCATED);
}

static void test_bad_ack_status(void **state)
{
    uint8_t body[32];
    size_t n = unhex("02 0000000000000001 0000", body, sizeof(body));
    fx_wire_publish_ack a;
    fx_wire_err err = {0};
    assert_int_equal(fx_wire_publish_ack_decode(body, n, &a, &err), FX_EWIRE_STATUS);
    assert_int_equal(err.code, FX_EWIRE_STATUS);
}

static void test_decoders_reject_other_kinds(void **state)
{
    uint8_t body[8] = {0};
    fx_wire_publish_batch b;
    fx_wire_event_batch e;
    assert_int_equal(fx_wire_publish_batch_decode(0x0004, body, 4, &b, NULL), FX_EWIRE_KIND);
    assert_int_equal(fx_wire_event_batch_decode(0x0001, body, 4, &e, NULL), FX_EWIRE_KIND);
    assert_int_equal(fx_wire_event_batch_decode(0x0020, body, 4, &e, NULL), FX_EWIRE_KIND);
    assert_int_equal(fx_wire_event_batch_decode(0x0026, body, 4, &e, NULL), FX_EWIRE_KIND);
    /* A valid empty shared batch, for contrast. */
    assert_int_equal(fx_wire_event_batch_decode(0x0004, body, 4, &e, NULL), 0);
    assert_int_equal(e.count, 0);
}

static void test_utf8_validation_is_strict(void **state)
{
    static const struct {
        const char *s;
        size_t n;
        bool ok;
    } cases[] = {
        {"", 0, true},
        {"plain ascii", 11, true},
        {"\xc3\xa9", 2, true},          /* U+00E9 */
        {"\xe2\x82\xac", 3, true},      /* U+20AC */
        {"\xf0\x9f\x98\x80", 4, true},  /* U+1F600 */
        {"\xf4\x8f\xbf\xbf", 4, true},  /* U+10FFFF */
        {"\xed\x9f\xbf", 3, true},      /* U+D7FF */
        {"\xee\x80\x80", 3, true},      /* U+E000 */
        {"\xc0\xaf", 2, false},         /* overlong '/' */
        {"\xc1\xbf", 2, false},         /* overlong */
        {"\xe0\x9f\xbf", 3, false},     /* overlong 3-byte */
        {"\xf0\x8f\xbf\xbf", 4, false}, /* overlong 4-byte */
        {"\xed\xa0\x80", 3, false},     /* U+D800 surrogate */
        {"\xed\xbf\xbf", 3, false},     /* U+DFFF surrogate */
        {"\xf4\x90\x80\x80", 4, false}, /* U+110000 */
        {"\xf5\x80\x80\x80", 4, false}, /* lead byte beyond range */
        {"\x80", 1, false},             /* lone continuation */
        {"\xe2\x82", 2, false},         /* truncated */
        {"a\xf0\x9f\x98", 4, false},    /* truncated 4-byte at the end */
        {"\xe2\x28\xac", 3, false},     /* bad continuation */
        {"\xff", 1, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (fx_wire_utf8_valid((const uint8_t *)cases[i].s, cases[i].n) != cases[i].ok)
            fail_msg("case %zu: expected %s", i, cases[i].ok ? "valid" : "invalid");
    }
}

/* The eight-bytes-at-a-time ASCII scan must agree with the byte-wise check
 * wherever the non-ASCII bytes fall: each strict case, behind and before
 * ASCII runs of every length around the word size. */
static void test_utf8_validation_word_path_agrees(void **state)
{
    static const struct {
        const char *s;
        size_t n;
        bool ok;
    } cases[] = {
        {"\xc3\xa9", 2, true},          {"\xf0\x9f\x98\x80", 4, true}, {"\xed\x9f\xbf", 3, true},
        {"\xc0\xaf", 2, false},         {"\xed\xa0\x80", 3, false},    {"\x80", 1, false},
        {"\xf4\x90\x80\x80", 4, false}, {"\xe2\x82", 2, false},        {"\xff", 1, false},
    };
    uint8_t buf[64];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (size_t pre = 0; pre <= 17; pre++) {
            for (size_t post = 0; post <= 9; post++) {
                memset(buf, 'a', sizeof(buf));
                memcpy(buf + pre, cases[i].s, cases[i].n);
                size_t n = pre + cases[i].n + post;
                /* ASCII around a case never changes its verdict (a truncated
                 * sequence followed by 'a' has a bad continuation). */
                if (fx_wire_utf8_valid(buf, n) != cases[i].ok)
                    fail_msg("case %zu prefix %zu suffix %zu: expected %s", i, pre, post,
                             cases[i].ok ? "valid" : "invalid");
            }
        }
    }
    memset(buf, 'a', sizeof(buf));
    assert_true(fx_wire_utf8_valid(buf, sizeof(buf)));
    buf[63] = 0x80;
    assert_false(fx_wire_utf8_valid(buf, sizeof(buf)));
}

/* Writes an unacked publish batch frame for |ns|/|stream| with one payload;
 * returns the frame size. */
static size_t pub_frame(const char *ns, const char *stream, const char *payload, uint8_t *out,
                        size_t cap)
{
    fx_wire_slice p = str(payload);
    fx_wire_publish_batch b = {
        .tenant = str("t1"), .ns = str(ns), .stream = str(stream), .count = 1, .payloads = &p};
    ssize_t n = fx_wire_publish_batch_encode(&b, out, cap);
    assert_true(n > 0);
    return (size_t)n;
}

static void test_names_cache_checks_repeated_names_once(void **state)
{
    fx_wire_names_cache cache = {0};
    uint8_t f1[256], f2[256], f3[256];
    size_t n1 = pub_frame("default", "demo", "hello", f1, sizeof(f1));
    size_t n2 = pub_frame("default", "demo", "world!", f2, sizeof(f2));
    size_t n3 = pub_frame("default", "other", "x", f3, sizeof(f3));
    fx_wire_publish_batch d;
    bool same = true;

    /* Empty cache: validated, then cached. */
    assert_int_equal(
        fx_wire_publish_batch_decode_cached(0x0001, f1 + 12, n1 - 12, &d, &cache, &same, NULL), 0);
    assert_false(same);
    assert_int_equal(cache.len, 6 + 2 + 7 + 4);
    fx_wire_publish_batch_deinit(&d);

    /* The same names: taken from the cache, slices into the new body. */
    assert_int_equal(
        fx_wire_publish_batch_decode_cached(0x0001, f2 + 12, n2 - 12, &d, &cache, &same, NULL), 0);
    assert_true(same);
    assert_slice(d.tenant, "t1");
    assert_slice(d.ns, "default");
    assert_slice(d.stream, "demo");
    assert_ptr_equal(d.stream.ptr, f2 + 12 + 2 + 2 + 2 + 7 + 2);
    assert_int_equal(d.count, 1);
    assert_slice(d.payloads[0], "world!");
    fx_wire_publish_batch_deinit(&d);

    /* Other names replace the cached ones. */
    assert_int_equal(
        fx_wire_publish_batch_decode_cached(0x0001, f3 + 12, n3 - 12, &d, &cache, &same, NULL), 0);
    assert_false(same);
    assert_slice(d.stream, "other");
    fx_wire_publish_batch_deinit(&d);
    assert_int_equal(
        fx_wire_publish_batch_decode_cached(0x0001, f1 + 12, n1 - 12, &d, &cache, &same, NULL), 0);
    assert_false(same);
    fx_wire_publish_batch_deinit(&d);

    /* A name that is not UTF-8 is refused even right after valid names of
     * the same length, and leaves the cache as it was. */
    uint8_t bad[256];
    memcpy(bad, f1, n1);
    bad[12 + 2 + 2 + 2 + 7 + 2] = 0xff; /* first byte of "demo" */
    fx_wire_err err = {0};
    assert_int_equal(
        fx_wire_publish_batch_decode_cached(0x0001, bad + 12, n1 - 12, &d, &cache, &same, &err),
        FX_EWIRE_UTF8);
    assert_false(same);
    assert_string_equal(err.msg, "stream is not valid UTF-8");
    assert_int_equal(
        fx_wire_publish_batch_decode_cached(0x0001, f2 + 12, n2 - 12, &d, &cache, &same, NULL), 0);
    assert_true(same);
    fx_wire_publish_batch_deinit(&d);
}

/* Every cut of a body whose names are cached fails exactly as the uncached
 * decoder fails, with the same code and text. */
static void test_names_cache_truncation_matches_uncached(void **state)
{
    uint8_t f[256];
    size_t n = pub_frame("default", "demo", "hello", f, sizeof(f));
    const uint8_t *body = f + 12;
    size_t len = n - 12;
    for (size_t cut = 0; cut <= len; cut++) {
        fx_wire_names_cache cache = {0};
        fx_wire_publish_batch d;
        assert_int_equal(
            fx_wire_publish_batch_decode_cached(0x0001, body, len, &d, &cache, NULL, NULL), 0);
        fx_wire_publish_batch_deinit(&d);
        fx_wire_err e1 = {0}, e2 = {0};
        bool same = false;
        int r1 = fx_wire_publish_batch_decode(0x0001, body, cut, &d, &e1);
        if (r1 == 0)
            fx_wire_publish_batch_deinit(&d);
        int r2 = fx_wire_publish_batch_decode_cached(0x0001, body, cut, &d, &cache, &same, &e2);
        if (r2 == 0)
            fx_wire_publish_batch_deinit(&d);
        assert_int_equal(r1, r2);
        assert_int_equal(r1 == 0, cut == len);
        if (r1 != 0)
            assert_string_equal(e1.msg, e2.msg);
        assert_int_equal(same, cut >= 6 + 2 + 7 + 4);
    }
}

/* Names longer than the cache holds are validated every time. */
static void test_names_cache_long_names_are_not_cached(void **state)
{
    char ns[FX_WIRE_NAMES_CACHE_MAX + 1];
    memset(ns, 'n', sizeof(ns) - 1);
    ns[sizeof(ns) - 1] = '\0';
    uint8_t f[512];
    size_t n = pub_frame(ns, "demo", "hello", f, sizeof(f));
    fx_wire_names_cache cache = {0};
    for (int i = 0; i < 2; i++) {
        fx_wire_publish_batch d;
        bool same = true;
        assert_int_equal(
            fx_wire_publish_batch_decode_cached(0x0001, f + 12, n - 12, &d, &cache, &same, NULL),
            0);
        assert_false(same);
        assert_int_equal(cache.len, 0);
        assert_int_equal(d.ns.len, FX_WIRE_NAMES_CACHE_MAX);
        assert_slice(d.payloads[0], "hello");
        fx_wire_publish_batch_deinit(&d);
    }
}

/* ---- publish batch builder ----------------------------------------------------------- */

/* Encodes |b| with fx_wire_publish_batch_encode() into a fresh buffer. */
static uint8_t *encoded(const fx_wire_publish_batch *b, size_t *plen)
{
    ssize_t size = fx_wire_publish_batch_frame_size(b);
    assert_true(size > 0);
    uint8_t *out = malloc((size_t)size);
    assert_non_null(out);
    assert_int_equal(fx_wire_publish_batch_encode(b, out, (size_t)size), size);
    *plen = (size_t)size;
    return out;
}

/* Builds |b|'s frame with the builder into |out| (|cap| bytes). */
static ssize_t built(const fx_wire_publish_batch *b, uint8_t *out, size_t cap,
                     fx_wire_batch_marks *pmarks)
{
    fx_wire_batch_builder bb;
    int rv = fx_wire_batch_begin(&bb, out, cap, b);
    for (uint32_t i = 0; i < b->count && rv == 0; i++)
        rv = fx_wire_batch_append(&bb, b->payloads[i].ptr, b->payloads[i].len);
    return rv < 0 ? rv : fx_wire_batch_finish(&bb, pmarks);
}

/* A frame built entry by entry is the encoder's frame, byte for byte, for
 * both kinds and for none, one and several payloads (one of them empty);
 * its marks find the names and the entries. */
static void test_builder_frame_equals_encoder(void **state)
{
    fx_wire_slice pl[] = {str("hello"), str(""), str("a third payload")};
    static const fx_wire_ack acks[] = {FX_WIRE_ACK_NONE, FX_WIRE_ACK_PER_MESSAGE,
                                       FX_WIRE_ACK_PER_BATCH};
    for (size_t a = 0; a < 3; a++) {
        for (uint32_t count = 0; count <= 3; count++) {
            fx_wire_publish_batch b = {.request_id = 0x0102030405060708ull * (a != 0),
                                       .ack = acks[a],
                                       .tenant = str("t1"),
                                       .ns = str("default"),
                                       .stream = str("demo"),
                                       .count = count,
                                       .payloads = pl};
            size_t len;
            uint8_t *want = encoded(&b, &len);
            size_t payload_bytes = 0;
            for (uint32_t i = 0; i < count; i++)
                payload_bytes += pl[i].len;
            assert_int_equal(fx_wire_batch_frame_size(&b, count, payload_bytes), len);
            uint8_t out[256];
            fx_wire_batch_marks m;
            assert_int_equal(built(&b, out, sizeof(out), &m), len);
            assert_memory_equal(out, want, len);
            /* The marks: names section, then count, then the entries. */
            fx_wire_slice names = fx_wire_batch_names(out, m);
            assert_int_equal(names.len, 6 + 2 + 7 + 4);
            assert_memory_equal(names.ptr,
                                "\x00\x02t1\x00\x07"
                                "default\x00\x04"
                                "demo",
                                names.len);
            assert_int_equal(fx_wire_batch_entries_len(len, m), 4 * count + payload_bytes);
            assert_int_equal(fx_wire_batch_head_len(m), len - 4 * count - payload_bytes);
            free(want);
        }
    }
}

/* left() counts down by each entry to the bound the frame was begun with;
 * an entry over it, a head over it and a payload past the message limit
 * are refused without changing the frame; bad heads fail as the encoder's. */
static void test_builder_left_and_bound(void **state)
{
    fx_wire_slice pl[] = {str("0123456789"), str("abc")};
    fx_wire_publish_batch b = {
        .tenant = str("t"), .ns = str("n"), .stream = str("s"), .count = 2, .payloads = pl};
    size_t len;
    uint8_t *want = encoded(&b, &len);
    uint8_t out[128];
    memset(out, 0xee, sizeof(out));
    fx_wire_batch_builder bb;
    /* Bound: exactly the frame with both payloads. */
    assert_int_equal(fx_wire_batch_begin(&bb, out, len, &b), 0);
    size_t head = FX_WIRE_HEADER_LEN + 6 + 3 + 4;
    assert_int_equal(fx_wire_batch_left(&bb), len - head);
    assert_int_equal(fx_wire_batch_append(&bb, pl[0].ptr, pl[0].len), 0);
    assert_int_equal(fx_wire_batch_left(&bb), len - head - fx_wire_batch_entry_size(10));
    /* One byte too many for what is left: refused, nothing written. */
    uint8_t big[8] = {0};
    assert_int_equal(fx_wire_batch_left(&bb), fx_wire_batch_entry_size(3));
    assert_int_equal(fx_wire_batch_append(&bb, big, 4), -ENOSPC);
    assert_int_equal(fx_wire_batch_left(&bb), fx_wire_batch_entry_size(3));
    assert_int_equal(out[len - 7], 0xee);
    assert_int_equal(fx_wire_batch_append(&bb, pl[1].ptr, pl[1].len), 0);
    assert_int_equal(fx_wire_batch_left(&bb), 0);
    assert_int_equal(fx_wire_batch_append(&bb, big, 0), -ENOSPC);
    assert_int_equal(fx_wire_batch_finish(&bb, NULL), len);
    assert_memory_equal(out, want, len);
    assert_int_equal(out[len], 0xee);
    /* A bound below the head alone. */
    assert_int_equal(fx_wire_batch_begin(&bb, out, head - 1, &b), -ENOSPC);
    /* The message limit. */
    assert_int_equal(fx_wire_batch_begin(&bb, out, sizeof(out), &b), 0);
    bb.count = FX_WIRE_BATCH_MAX_MESSAGES;
    assert_int_equal(fx_wire_batch_append(&bb, big, 0), FX_EWIRE_COUNT);
    assert_int_equal(fx_wire_batch_frame_size(&b, FX_WIRE_BATCH_MAX_MESSAGES + 1, 0),
                     FX_EWIRE_COUNT);
    assert_int_equal(fx_wire_batch_frame_size(&b, 1, UINT32_MAX), FX_EWIRE_TOO_LARGE);
    /* Bad heads: the encoder's errors. */
    fx_wire_publish_batch bad = b;
    bad.ack = (fx_wire_ack)7;
    assert_int_equal(fx_wire_batch_begin(&bb, out, sizeof(out), &bad), FX_EWIRE_ACK_MODE);
    assert_int_equal(fx_wire_batch_frame_size(&bad, 0, 0), FX_EWIRE_ACK_MODE);
    bad = b;
    bad.stream = (fx_wire_slice){(const uint8_t *)"\xff", 1};
    assert_int_equal(fx_wire_batch_begin(&bb, out, sizeof(out), &bad), FX_EWIRE_UTF8);
    assert_int_equal(fx_wire_publish_batch_encode(&bad, out, sizeof(out)), FX_EWIRE_UTF8);
    bad = b;
    bad.ns.len = UINT16_MAX + 1u;
    assert_int_equal(fx_wire_batch_begin(&bb, out, sizeof(out), &bad), FX_EWIRE_NAME);
    assert_int_equal(fx_wire_batch_frame_size(&bad, 0, 0), FX_EWIRE_NAME);
    free(want);
}

/* Merging: a frame begun as the first of N frames and given each one's
 * entries is the frame of all their messages at once under the first's
 * request id; a bound or message count too small for a part refuses it. */
static void test_builder_merging_frames_equals_one_batch(void **state)
{
    fx_wire_slice pl[] = {str("m0"), str("m1 longer"), str(""), str("m3"), str("m4 x")};
    static const uint32_t split[] = {2, 0, 1, 2}; /* messages per part */
    for (int acked = 0; acked <= 1; acked++) {
        fx_wire_publish_batch all = {.request_id = 40,
                                     .ack = acked ? FX_WIRE_ACK_PER_BATCH : FX_WIRE_ACK_NONE,
                                     .tenant = str("tenant"),
                                     .ns = str("ns"),
                                     .stream = str("orders"),
                                     .count = 5,
                                     .payloads = pl};
        uint8_t parts[4][128];
        size_t lens[4];
        fx_wire_batch_marks marks[4];
        size_t entry_bytes = 0;
        for (uint32_t k = 0, first = 0; k < 4; first += split[k], k++) {
            fx_wire_publish_batch one = all;
            one.request_id = all.request_id + k; /* each its own; the merge keeps the first's */
            one.payloads = pl + first;
            one.count = split[k];
            ssize_t n = built(&one, parts[k], sizeof(parts[k]), &marks[k]);
            assert_true(n > 0);
            lens[k] = (size_t)n;
            entry_bytes += fx_wire_batch_entries_len(lens[k], marks[k]);
        }
        size_t len;
        uint8_t *want = encoded(&all, &len);
        size_t cap = fx_wire_batch_head_len(marks[0]) + entry_bytes;
        assert_int_equal(cap, len);
        uint8_t out[256];
        fx_wire_batch_builder bb;
        assert_int_equal(fx_wire_batch_begin_as(&bb, out, cap, parts[0], marks[0]), 0);
        for (int k = 0; k < 4; k++)
            assert_int_equal(fx_wire_batch_append_frame(&bb, parts[k], lens[k], marks[k]), 0);
        assert_int_equal(fx_wire_batch_left(&bb), 0);
        fx_wire_batch_marks m;
        assert_int_equal(fx_wire_batch_finish(&bb, &m), len);
        assert_memory_equal(out, want, len);
        assert_memory_equal(&m, &marks[0], sizeof(m));
        /* Decoded: the parts' messages in order. */
        fx_wire_publish_batch d;
        uint16_t flags = fx_wire_publish_batch_flags(&all);
        assert_int_equal(fx_wire_publish_batch_decode(flags, body_of(out, len, flags),
                                                      len - FX_WIRE_HEADER_LEN, &d, NULL),
                         0);
        assert_int_equal(d.count, 5);
        assert_int_equal(d.request_id, acked ? 40 : 0);
        for (int i = 0; i < 5; i++)
            assert_memory_equal(d.payloads[i].ptr, pl[i].ptr, pl[i].len);
        fx_wire_publish_batch_deinit(&d);
        /* A bound one byte short refuses the last part; the head alone
         * must fit. */
        assert_int_equal(fx_wire_batch_begin_as(&bb, out, cap - 1, parts[0], marks[0]), 0);
        for (int k = 0; k < 3; k++)
            assert_int_equal(fx_wire_batch_append_frame(&bb, parts[k], lens[k], marks[k]), 0);
        assert_int_equal(fx_wire_batch_append_frame(&bb, parts[3], lens[3], marks[3]), -ENOSPC);
        assert_int_equal(fx_wire_batch_begin_as(&bb, out, fx_wire_batch_head_len(marks[0]) - 1,
                                                parts[0], marks[0]),
                         -ENOSPC);
        /* The message limit over the sum of the parts' counts. */
        assert_int_equal(fx_wire_batch_begin_as(&bb, out, cap, parts[0], marks[0]), 0);
        bb.count = FX_WIRE_BATCH_MAX_MESSAGES - 1;
        assert_int_equal(fx_wire_batch_append_frame(&bb, parts[0], lens[0], marks[0]),
                         FX_EWIRE_COUNT);
        assert_int_equal(fx_wire_batch_append_frame(&bb, parts[2], lens[2], marks[2]), 0);
        free(want);
    }
}

/* The room a merged frame leaves for entries under a body bound. */
static void test_builder_entries_room(void **state)
{
    fx_wire_publish_batch b = {.ack = FX_WIRE_ACK_PER_MESSAGE,
                               .request_id = 3,
                               .tenant = str("t"),
                               .ns = str("n"),
                               .stream = str("s")};
    uint8_t out[64];
    fx_wire_batch_marks m;
    ssize_t len = built(&b, out, sizeof(out), &m);
    size_t body_head = (size_t)len - FX_WIRE_HEADER_LEN; /* 9 + 9 + 4 */
    assert_int_equal(body_head, 22);
    assert_int_equal(fx_wire_batch_entries_room(m, 100), 100 - body_head);
    assert_int_equal(fx_wire_batch_entries_room(m, body_head), 0);
    assert_int_equal(fx_wire_batch_entries_room(m, body_head - 1), 0);
}

static void test_wire_err_set_formats_message(void **state)
{
    fx_wire_err err = {0};
    assert_int_equal(fx_wire_err_set(&err, FX_EWIRE_COUNT, "count %d", 5), FX_EWIRE_COUNT);
    assert_int_equal(err.code, FX_EWIRE_COUNT);
    assert_string_equal(err.msg, "count 5");
    assert_int_equal(fx_wire_err_set(NULL, FX_EWIRE_UTF8, "x"), FX_EWIRE_UTF8);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_golden_publish_batch_t1_default_demo_hello),
    cmocka_unit_test(test_golden_acked_publish_batch_req7_per_batch),
    cmocka_unit_test(test_golden_shared_event_batch_base5),
    cmocka_unit_test(test_golden_per_subscriber_event_batch),
    cmocka_unit_test(test_golden_publish_ack_error_req9),
    cmocka_unit_test(test_golden_publish_ack_ok_req7),
    cmocka_unit_test(test_large_batch_roundtrips_through_heap_array),
    cmocka_unit_test(test_event_batch_iov_matches_flat_encoding),
    cmocka_unit_test(test_publish_ack_message_truncated_at_char_boundary),
    cmocka_unit_test(test_encoder_rejects_bad_input),
    cmocka_unit_test(test_truncated_body),
    cmocka_unit_test(test_every_prefix_of_a_valid_body_is_rejected),
    cmocka_unit_test(test_count_larger_than_remaining),
    cmocka_unit_test(test_publish_batch_over_65536_messages_is_refused),
    cmocka_unit_test(test_invalid_utf8_name),
    cmocka_unit_test(test_trailing_bytes),
    cmocka_unit_test(test_bad_ack_mode),
    cmocka_unit_test(test_bad_ack_status),
    cmocka_unit_test(test_decoders_reject_other_kinds),
    cmocka_unit_test(test_utf8_validation_is_strict),
    cmocka_unit_test(test_utf8_validation_word_path_agrees),
    cmocka_unit_test(test_names_cache_checks_repeated_names_once),
    cmocka_unit_test(test_names_cache_truncation_matches_uncached),
    cmocka_unit_test(test_names_cache_long_names_are_not_cached),
    cmocka_unit_test(test_builder_frame_equals_encoder),
    cmocka_unit_test(test_builder_left_and_bound),
    cmocka_unit_test(test_builder_merging_frames_equals_one_batch),
    cmocka_unit_test(test_builder_entries_room),
    cmocka_unit_test(test_wire_err_set_formats_message),
};

FX_TEST_MAIN(tests)
