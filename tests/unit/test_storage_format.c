/* Unit tests for the on-disk format: the original's golden bytes for a
 * segment header and a record (we write them; we read them), every decode
 * check in its order, the index layout and rule, file and directory names
 * (sanitising and the pinned FNV-1a hashes), and the CRC's speed. */
/* fx-test-libs: fx_storage fx_base */
#include "felix/error.h"
#include "storage/format.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <libdeflate.h>

#include "fx_test.h"

static void unhex(const char *hex, uint8_t *out, size_t *pn)
{
    size_t n = 0;
    for (const char *p = hex; *p != '\0';) {
        if (*p == ' ') {
            p++;
            continue;
        }
        unsigned v;
        assert_int_equal(sscanf(p, "%2x", &v), 1);
        out[n++] = (uint8_t)v;
        p += 2;
    }
    *pn = n;
}

static const char GOLDEN_HEADER[] =
    "464C5347 0002 0000 0000000000000001 0000000000000002 7A09E5B1 00000000";
static const char GOLDEN_RECORD[] =
    "00000002 0000000000000007 0000000000000009 C654DE27 2402152C 6869";

/* ---- golden bytes --------------------------------------------------------- */

static void test_segment_header_golden_bytes_are_written(void **state)
{
    uint8_t want[64], got[FX_SEG_HEADER_LEN];
    size_t n;
    unhex(GOLDEN_HEADER, want, &n);
    assert_int_equal(n, FX_SEG_HEADER_LEN);
    fx_logfmt_seg_header_encode(got, &(fx_seg_header){.base_offset = 1, .created_us = 2});
    assert_memory_equal(got, want, FX_SEG_HEADER_LEN);
}

static void test_segment_header_golden_bytes_are_read(void **state)
{
    uint8_t in[64];
    size_t n;
    unhex(GOLDEN_HEADER, in, &n);
    fx_seg_header h;
    char why[160] = "";
    assert_int_equal(fx_logfmt_seg_header_decode(in, n, &h, why, sizeof(why)), 0);
    assert_int_equal(h.base_offset, 1);
    assert_int_equal(h.created_us, 2);
}

static void test_record_golden_bytes_are_written(void **state)
{
    uint8_t want[64], got[FX_REC_HEADER_LEN];
    size_t n;
    unhex(GOLDEN_RECORD, want, &n);
    assert_int_equal(n, FX_REC_HEADER_LEN + 2);
    fx_logfmt_rec_header_encode(got, 7, 9, "hi", 2);
    assert_memory_equal(got, want, FX_REC_HEADER_LEN);
    assert_memory_equal(want + FX_REC_HEADER_LEN, "hi", 2);
}

static void test_record_golden_bytes_are_read(void **state)
{
    uint8_t in[64];
    size_t n;
    unhex(GOLDEN_RECORD, in, &n);
    fx_rec_header h;
    assert_int_equal(fx_logfmt_rec_header_decode(in, &h), FX_REC_OK);
    assert_int_equal(h.len, 2);
    assert_int_equal(h.offset, 7);
    assert_int_equal(h.ts_us, 9);
    assert_int_equal(h.header_crc, 0xC654DE27u);
    assert_int_equal(h.checksum, 0x2402152Cu);
    assert_int_equal(fx_logfmt_rec_checksum(in, in + FX_REC_HEADER_LEN, h.len), h.checksum);
}

/* ---- format v3: producer marks (facts 2.4) --------------------------------- */

static const char GOLDEN_HEADER_V3[] =
    "464C5347 0003 0000 0000000000000001 0000000000000002 ADEB65E9 00000000";
/* offset 7, ts 9, "hi", opening batch 5 of producer 0x0102030405060708 of 3
 * records: bit 31, then the 20-byte tag between header and body; the
 * checksum covers header bytes 0..24, the tag, the body. */
static const char GOLDEN_OPEN[] = "80000002 0000000000000007 0000000000000009 ADA59E0B 5E4F6115"
                                  " 0102030405060708 0000000000000005 00000003 6869";
/* offset 8, ts 9, "hi", continuing it: bit 30, no tag. */
static const char GOLDEN_CONT[] =
    "40000002 0000000000000008 0000000000000009 2C15B1E0 91B99F1F 6869";
/* A one-record batch (sequence 6): only bit 31, tag len 1. */
static const char GOLDEN_ONE[] = "80000002 0000000000000007 0000000000000009 ADA59E0B 6C23AFE6"
                                 " 0102030405060708 0000000000000006 00000001 6869";

static void test_v3_segment_header_golden_bytes_are_written_and_read(void **state)
{
    uint8_t want[64], got[FX_SEG_HEADER_LEN];
    size_t n;
    unhex(GOLDEN_HEADER_V3, want, &n);
    fx_logfmt_seg_header_encode(
        got, &(fx_seg_header){.version = FX_SEG_VERSION_V3, .base_offset = 1, .created_us = 2});
    assert_memory_equal(got, want, FX_SEG_HEADER_LEN);
    fx_seg_header h;
    char why[160] = "";
    assert_int_equal(fx_logfmt_seg_header_decode(want, n, &h, why, sizeof(why)), 0);
    assert_int_equal(h.version, 3);
    assert_int_equal(h.base_offset, 1);
    /* v2 still reads, and says so. */
    unhex(GOLDEN_HEADER, want, &n);
    assert_int_equal(fx_logfmt_seg_header_decode(want, n, &h, why, sizeof(why)), 0);
    assert_int_equal(h.version, 2);
}

/* Encodes the record of |golden| and compares; then decodes it through a
 * scanner window over a v3 segment and checks header, tag and step. */
static void check_marked_golden(const char *golden, uint64_t offset, uint32_t mark,
                                const fx_rec_tag *tag)
{
    uint8_t want[128], got[128];
    size_t n;
    unhex(golden, want, &n);
    size_t h = fx_logfmt_rec_head_encode(got, offset, 9, mark, tag, "hi", 2);
    memcpy(got + h, "hi", 2);
    assert_int_equal(h + 2, n);
    assert_memory_equal(got, want, n);
    fx_rec_header d;
    assert_int_equal(fx_logfmt_rec_header_decode(want, &d), FX_REC_OK);
    assert_int_equal(d.len, 2);
    assert_int_equal(d.mark, mark);
    assert_int_equal(fx_rec_step(&d), n);
    const uint8_t *t = mark == FX_REC_MARK_OPEN ? want + FX_REC_HEADER_LEN : NULL;
    assert_int_equal(fx_logfmt_rec_checksum_tagged(want, t, want + n - 2, 2), d.checksum);
    if (t != NULL) {
        fx_rec_tag dt;
        fx_logfmt_tag_decode(t, &dt);
        assert_int_equal(dt.producer_id, tag->producer_id);
        assert_int_equal(dt.sequence, tag->sequence);
        assert_int_equal(dt.len, tag->len);
    }
}

static void test_v3_marked_record_golden_bytes_are_written_and_read(void **state)
{
    fx_rec_tag tag = {.producer_id = 0x0102030405060708ull, .sequence = 5, .len = 3};
    check_marked_golden(GOLDEN_OPEN, 7, FX_REC_MARK_OPEN, &tag);
    check_marked_golden(GOLDEN_CONT, 8, FX_REC_MARK_CONT, NULL);
    fx_rec_tag one = {.producer_id = 0x0102030405060708ull, .sequence = 6, .len = 1};
    check_marked_golden(GOLDEN_ONE, 7, FX_REC_MARK_OPEN, &one);
    /* Unmarked: byte-identical to v2. */
    uint8_t want[64], got[64];
    size_t n;
    unhex(GOLDEN_RECORD, want, &n);
    assert_int_equal(fx_logfmt_rec_head_encode(got, 7, 9, 0, NULL, "hi", 2), FX_REC_HEADER_LEN);
    assert_memory_equal(got, want, FX_REC_HEADER_LEN);
}

static void test_both_mark_bits_are_corruption(void **state)
{
    uint8_t h[FX_REC_HEADER_LEN];
    fx_logfmt_rec_header_encode(h, 1, 1, "hi", 2);
    fx_be32_put(h, 0xC0000002u);
    fx_be32_put(h + 20, fx_logfmt_crc(0, h, 20));
    fx_rec_header out;
    assert_int_equal(fx_logfmt_rec_header_decode(h, &out), FX_REC_FLAGS);
    assert_string_equal(fx_logfmt_rec_status_name(FX_REC_FLAGS),
                        "record flags: both producer mark bits set");
}

static void test_crc64_is_xz_and_digest_chains_big_endian(void **state)
{
    assert_true(fx_crc64(0, "123456789", 9) == 0x995DC9BBDF1939FAull);
    assert_true(fx_crc64(fx_crc64(0, "1234", 4), "56789", 5) == 0x995DC9BBDF1939FAull);
    /* Every length and split point against a byte-at-a-time reference. */
    uint8_t buf[64];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 37 + 11);
    for (size_t n = 0; n <= sizeof(buf); n++) {
        uint64_t ref = ~0ull;
        for (size_t i = 0; i < n; i++) {
            ref ^= buf[i];
            for (int k = 0; k < 8; k++)
                ref = ref & 1 ? (ref >> 1) ^ 0xC96C5795D7870F42ull : ref >> 1;
        }
        ref = ~ref;
        assert_true(fx_crc64(0, buf, n) == ref);
        for (size_t cut = 0; cut <= n; cut += 3)
            assert_true(fx_crc64(fx_crc64(0, buf, cut), buf + cut, n - cut) == ref);
    }
    /* d1 = crc64(u64be 0 || u64be crc64(u64be 2 || "hi")), computed apart. */
    uint64_t d1 = fx_producer_digest_step(0, "hi", 2);
    assert_true(d1 == 0x336FC58E77F7F78Dull);
    assert_true(fx_producer_digest_step(d1, "yo", 2) == 0x5950E931116250AEull);
}

/* ---- header checks in order ---------------------------------------------- */

static void expect_header_error(const uint8_t *p, size_t n, const char *want)
{
    fx_seg_header h;
    char why[160] = "";
    assert_int_equal(fx_logfmt_seg_header_decode(p, n, &h, why, sizeof(why)), FX_ESTORAGE_CORRUPT);
    assert_string_equal(why, want);
}

static void test_segment_header_checks_run_in_order(void **state)
{
    uint8_t h[FX_SEG_HEADER_LEN];
    fx_logfmt_seg_header_encode(h, &(fx_seg_header){.base_offset = 1, .created_us = 2});
    expect_header_error(h, 31, "truncated: needed 32 bytes, 31 available");
    uint8_t b[FX_SEG_HEADER_LEN];
    memcpy(b, h, sizeof(b));
    b[0] = 'X', b[5] = 1; /* magic wins over version */
    expect_header_error(b, sizeof(b), "bad segment magic 0x584c5347");
    memcpy(b, h, sizeof(b));
    b[5] = 1, b[7] = 1; /* version wins over flags */
    expect_header_error(b, sizeof(b), "unsupported segment version 1");
    memcpy(b, h, sizeof(b));
    b[7] = 4;
    expect_header_error(b, sizeof(b), "unknown segment flags 0x0004");
    memcpy(b, h, sizeof(b));
    b[9] ^= 1;
    expect_header_error(b, sizeof(b),
                        "segment header checksum mismatch (expected 0xc3f23e59, found 0x7a09e5b1)");
    memcpy(b, h, sizeof(b));
    b[30] = 0xff; /* reserved is not checked */
    fx_seg_header out;
    char why[160];
    assert_int_equal(fx_logfmt_seg_header_decode(b, sizeof(b), &out, why, sizeof(why)), 0);
}

static void test_record_header_checks_crc_before_length_limit(void **state)
{
    uint8_t h[FX_REC_HEADER_LEN];
    fx_logfmt_rec_header_encode(h, 1, 1, NULL, 0);
    fx_rec_header out;
    assert_int_equal(fx_logfmt_rec_header_decode(h, &out), FX_REC_OK);
    assert_int_equal(out.len, 0);
    /* A huge length with a matching header checksum: too large (bits 31 and
     * 30 are producer marks now, so the largest length without them). */
    fx_be32_put(h, 0x3FFFFFFFu);
    fx_be32_put(h + 20, fx_logfmt_crc(0, h, 20));
    assert_int_equal(fx_logfmt_rec_header_decode(h, &out), FX_REC_TOO_LARGE);
    /* Without the matching checksum the header checksum fails first. */
    h[20] ^= 1;
    assert_int_equal(fx_logfmt_rec_header_decode(h, &out), FX_REC_HEADER_CRC);
}

static void test_payload_bit_flip_fails_only_the_record_checksum(void **state)
{
    uint8_t h[FX_REC_HEADER_LEN];
    char payload[] = "hello";
    fx_logfmt_rec_header_encode(h, 3, 4, payload, 5);
    payload[2] ^= 0x10;
    fx_rec_header out;
    assert_int_equal(fx_logfmt_rec_header_decode(h, &out), FX_REC_OK);
    assert_int_not_equal(fx_logfmt_rec_checksum(h, payload, 5), out.checksum);
}

/* ---- index --------------------------------------------------------------- */

static void test_index_header_and_entry_layout(void **state)
{
    uint8_t h[FX_IDX_HEADER_LEN], e[FX_IDX_ENTRY_LEN];
    fx_logfmt_idx_header_encode(h, 0x0102030405060708ull);
    const uint8_t want[FX_IDX_HEADER_LEN] = {0x46, 0x4C, 0x53, 0x49, 0, 2, 0, 0, 1, 2, 3, 4,
                                             5,    6,    7,    8,    0, 0, 0, 0, 0, 0, 0, 0};
    assert_memory_equal(h, want, sizeof(want));
    uint64_t base = 0;
    assert_int_equal(fx_logfmt_idx_header_decode(h, sizeof(h), &base), 0);
    assert_int_equal(base, 0x0102030405060708ull);
    h[5] = 1;
    assert_int_equal(fx_logfmt_idx_header_decode(h, sizeof(h), &base), FX_ESTORAGE_CORRUPT);
    fx_logfmt_idx_entry_encode(e, 9, 32);
    uint64_t off, pos;
    fx_logfmt_idx_entry_decode(e, &off, &pos);
    assert_int_equal(off, 9);
    assert_int_equal(pos, 32);
    assert_int_equal(e[7], 9);
    assert_int_equal(e[15], 32);
}

static void test_index_rule_emits_first_record_then_every_spacing_bytes(void **state)
{
    fx_idx_rule r = {.spacing = 100};
    /* Records of 40 bytes: entries at records 0, 3, 6 (0+40+40+40 >= 100). */
    bool want[] = {true, false, false, true, false, false, true};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        assert_int_equal(fx_idx_rule_next(&r, 40), want[i]);
    /* One record larger than the spacing: the next one gets an entry. */
    fx_idx_rule big = {.spacing = 100};
    assert_true(fx_idx_rule_next(&big, 500));
    assert_true(fx_idx_rule_next(&big, 10));
    assert_false(fx_idx_rule_next(&big, 10));
}

/* ---- names ------------------------------------------------------------------ */

static void test_directory_names_match_the_original(void **state)
{
    char name[FX_LOGFMT_DIR_NAME_MAX];
    fx_logfmt_dir_name(name, "acme", "default", "orders", 0);
    assert_string_equal(name, "acme_default_orders_0-0d3aed4b998d2798");
    fx_logfmt_dir_name(name, "acme", "default", "orders", 3);
    assert_string_equal(name, "acme_default_orders_3-0d3af04b998d2cb1");
}

static void test_directory_names_sanitise_and_cut_components(void **state)
{
    char name[FX_LOGFMT_DIR_NAME_MAX];
    fx_logfmt_dir_name(name, "a.b/c", "", "caf\xc3\xa9-x", 0);
    uint64_t h = fx_logfmt_dir_hash("a.b/c", "", "caf\xc3\xa9-x", 0);
    char want[FX_LOGFMT_DIR_NAME_MAX];
    snprintf(want, sizeof(want), "a_b_c___caf_-x_0-%016llx", (unsigned long long)h);
    assert_string_equal(name, want);
    char longname[80];
    memset(longname, 'z', 70);
    longname[70] = '\0';
    fx_logfmt_dir_name(name, longname, "n", "s", 0);
    assert_int_equal(strchr(name, '_') - name, 32);
    /* Different names that sanitise alike still get different hashes. */
    assert_int_not_equal(fx_logfmt_dir_hash("a.b", "n", "s", 0),
                         fx_logfmt_dir_hash("a_b", "n", "s", 0));
}

static void test_segment_file_names_are_ids_padded_to_twenty_digits(void **state)
{
    char n[FX_LOGFMT_FILE_NAME_MAX];
    fx_logfmt_file_name(n, 12, false);
    assert_string_equal(n, "00000000000000000012.log");
    fx_logfmt_file_name(n, 12, true);
    assert_string_equal(n, "00000000000000000012.index");
    uint64_t id = 0;
    assert_true(fx_logfmt_parse_log_name("00000000000000000012.log", &id));
    assert_int_equal(id, 12);
    assert_true(fx_logfmt_parse_log_name("7.log", &id));
    assert_int_equal(id, 7);
    assert_false(fx_logfmt_parse_log_name("00000000000000000012.index", &id));
    assert_false(fx_logfmt_parse_log_name("x.log", &id));
    assert_false(fx_logfmt_parse_log_name("1.log.tmp", &id));
    assert_false(fx_logfmt_parse_log_name("99999999999999999999999.log", &id));
}

/* ---- CRC ----------------------------------------------------------------- */

static void test_crc_is_ieee_and_streams(void **state)
{
    assert_int_equal(fx_logfmt_crc(0, "123456789", 9), 0xCBF43926u);
    uint32_t c = fx_logfmt_crc(fx_logfmt_crc(0, "1234", 4), "56789", 5);
    assert_int_equal(c, 0xCBF43926u);
}

/* Continuing over nothing (an empty payload, whose pointer may be NULL)
 * keeps the CRC: the record checksum of an empty record is its header's. */
static void test_crc_over_nothing_keeps_the_value(void **state)
{
    uint32_t c = fx_logfmt_crc(0, "1234", 4);
    assert_int_equal(fx_logfmt_crc(c, NULL, 0), c);
    assert_int_equal(fx_logfmt_crc(c, "x", 0), c);
    uint8_t hdr[FX_REC_HEADER_LEN] = {0};
    assert_int_equal(fx_logfmt_rec_checksum(hdr, NULL, 0), fx_logfmt_crc(0, hdr, 24));
}

/* Prints the CRC's (libdeflate_crc32) speed on a 64 MiB buffer; checks only the value
 * against a chunked computation (the timing is information, not a test). */
static void test_crc_speed_on_64_mib_is_printed(void **state)
{
    size_t n = 64u << 20;
    uint8_t *buf = malloc(n);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)(i * 2654435761u >> 13);
    /* CPU time too: on a loaded machine the wall clock also counts waiting. */
    struct timespec a, b, ca, cb;
    clock_gettime(CLOCK_MONOTONIC, &a);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ca);
    uint32_t whole = fx_logfmt_crc(0, buf, n);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cb);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    double cs = (double)(cb.tv_sec - ca.tv_sec) + (double)(cb.tv_nsec - ca.tv_nsec) / 1e9;
    printf("crc32 (libdeflate %s): 64 MiB in %.4f s wall = %.2f GB/s, %.4f s CPU = %.2f GB/s\n",
           LIBDEFLATE_VERSION_STRING, s, (double)n / s / 1e9, cs, (double)n / cs / 1e9);
    uint32_t chunked = 0;
    for (size_t off = 0; off < n; off += 1u << 20)
        chunked = fx_logfmt_crc(chunked, buf + off, 1u << 20);
    assert_int_equal(whole, chunked);
    clock_gettime(CLOCK_MONOTONIC, &a);
    uint64_t c64 = fx_crc64(0, buf, n);
    clock_gettime(CLOCK_MONOTONIC, &b);
    s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    printf("crc64/xz (slicing-by-8, producer digests): 64 MiB in %.4f s = %.2f GB/s (%016llx)\n",
           s, (double)n / s / 1e9, (unsigned long long)c64);
    free(buf);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_segment_header_golden_bytes_are_written),
    cmocka_unit_test(test_segment_header_golden_bytes_are_read),
    cmocka_unit_test(test_record_golden_bytes_are_written),
    cmocka_unit_test(test_record_golden_bytes_are_read),
    cmocka_unit_test(test_v3_segment_header_golden_bytes_are_written_and_read),
    cmocka_unit_test(test_v3_marked_record_golden_bytes_are_written_and_read),
    cmocka_unit_test(test_both_mark_bits_are_corruption),
    cmocka_unit_test(test_crc64_is_xz_and_digest_chains_big_endian),
    cmocka_unit_test(test_segment_header_checks_run_in_order),
    cmocka_unit_test(test_record_header_checks_crc_before_length_limit),
    cmocka_unit_test(test_payload_bit_flip_fails_only_the_record_checksum),
    cmocka_unit_test(test_index_header_and_entry_layout),
    cmocka_unit_test(test_index_rule_emits_first_record_then_every_spacing_bytes),
    cmocka_unit_test(test_directory_names_match_the_original),
    cmocka_unit_test(test_directory_names_sanitise_and_cut_components),
    cmocka_unit_test(test_segment_file_names_are_ids_padded_to_twenty_digits),
    cmocka_unit_test(test_crc_is_ieee_and_streams),
    cmocka_unit_test(test_crc_over_nothing_keeps_the_value),
    cmocka_unit_test(test_crc_speed_on_64_mib_is_printed),
};
FX_TEST_MAIN(tests)
