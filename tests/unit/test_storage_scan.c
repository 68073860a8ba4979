/* Unit tests for scan.c: the window reader and the record scanner over
 * crafted record runs on the in-memory file system. Which records count,
 * where a bad one is reported and why (truncated, header checksum, payload
 * limit, record checksum, offset order), records that cross the window,
 * payload copies, the callback's stop and read errors. */
/* fx-test-libs: fx_storage fx_base */
#include "storage/format.h"
#include "storage/memio.h"
#include "storage/scan.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"

typedef struct seg {
    uint8_t buf[64 * 1024];
    size_t len;
    uint64_t pos[64]; /* where each record starts */
    size_t n;
} seg;

/* Appends a record at |offset| with |len| payload bytes of value |fill|. */
static void add(seg *s, uint64_t offset, uint64_t ts, uint32_t len, uint8_t fill)
{
    uint8_t payload[16 * 1024];
    assert_true(len <= sizeof(payload) && s->len + FX_REC_HEADER_LEN + len <= sizeof(s->buf));
    memset(payload, fill, len);
    s->pos[s->n++] = s->len;
    fx_logfmt_rec_header_encode(s->buf + s->len, offset, ts, payload, len);
    memcpy(s->buf + s->len + FX_REC_HEADER_LEN, payload, len);
    s->len += FX_REC_HEADER_LEN + len;
}

typedef struct fixture {
    fx_memio *m;
    fx_sio *io;
    int fd;
    fx_segwin w;
} fixture;

/* Writes |s|'s first |len| bytes to a file and opens a window of |cap|. */
static void load(fixture *f, const seg *s, size_t len, size_t cap)
{
    assert_int_equal(fx_memio_new(&f->m), 0);
    f->io = fx_memio_sio(f->m);
    assert_int_equal(f->io->ops->open(f->io, "/seg", FX_SIO_CREATE, &f->fd), 0);
    if (len > 0)
        assert_int_equal(f->io->ops->pwrite(f->io, f->fd, s->buf, len, 0), 0);
    assert_int_equal(fx_segwin_init(&f->w, f->io, f->fd, len, cap), 0);
}

static void unload(fixture *f)
{
    fx_segwin_deinit(&f->w);
    f->io->ops->close(f->io, f->fd);
    fx_memio_free(f->m);
}

typedef struct seen {
    uint64_t pos[64];
    size_t n;
    size_t stop_at; /* 1-based; 0 = never */
} seen;

static int on_record(void *user, uint64_t pos, const fx_rec_header *h)
{
    seen *v = user;
    v->pos[v->n++] = pos;
    return v->stop_at != 0 && v->n == v->stop_at ? 42 : 0;
}

static void test_scan_of_valid_records_reports_every_one(void **state)
{
    static seg s;
    memset(&s, 0, sizeof(s));
    for (uint32_t i = 0; i < 5; i++)
        add(&s, 100 + i, 1000 + i, 10 * i, (uint8_t)i);
    fixture f;
    load(&f, &s, s.len, 4096);
    seen v = {0};
    fx_scan out;
    assert_int_equal(fx_seg_scan(&f.w, 0, 100, on_record, &v, &out), 0);
    assert_int_equal(out.status, FX_REC_OK);
    assert_int_equal(out.records, 5);
    assert_int_equal(out.end_pos, s.len);
    assert_int_equal(out.next_offset, 105);
    assert_int_equal(out.payload_bytes, 0 + 10 + 20 + 30 + 40);
    assert_int_equal(out.last_ts, 1004);
    assert_int_equal(v.n, 5);
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(v.pos[i], s.pos[i]);
    unload(&f);
}

static void test_empty_range_is_ok_with_nothing_found(void **state)
{
    static seg s;
    memset(&s, 0, sizeof(s));
    fixture f;
    load(&f, &s, 0, 4096);
    fx_scan out;
    assert_int_equal(fx_seg_scan(&f.w, 0, 7, NULL, NULL, &out), 0);
    assert_int_equal(out.status, FX_REC_OK);
    assert_int_equal(out.records, 0);
    assert_int_equal(out.next_offset, 7);
    assert_int_equal(out.last_ts, 0);
    unload(&f);
}

static void test_cut_inside_header_or_payload_is_truncated(void **state)
{
    static seg s;
    memset(&s, 0, sizeof(s));
    add(&s, 0, 1, 50, 'a');
    add(&s, 1, 2, 50, 'b');
    size_t cuts[] = {s.pos[1] + 10, s.len - 1};
    for (size_t i = 0; i < 2; i++) {
        fixture f;
        load(&f, &s, cuts[i], 4096);
        fx_scan out;
        assert_int_equal(fx_seg_scan(&f.w, 0, 0, NULL, NULL, &out), 0);
        assert_int_equal(out.status, FX_REC_TRUNCATED);
        assert_int_equal(out.records, 1);
        assert_int_equal(out.end_pos, s.pos[1]);
        assert_int_equal(out.next_offset, 1);
        assert_int_equal(out.last_ts, 1);
        unload(&f);
    }
}

static void test_bad_bytes_are_named_by_where_they_are(void **state)
{
    static seg s;
    memset(&s, 0, sizeof(s));
    add(&s, 0, 1, 40, 'a');
    add(&s, 1, 2, 40, 'b');
    /* A flipped payload byte fails the record checksum; a flipped length
     * byte the header checksum. */
    struct {
        size_t at;
        fx_rec_status want;
    } cases[] = {{s.pos[1] + FX_REC_HEADER_LEN + 5, FX_REC_CRC}, {s.pos[1] + 3, FX_REC_HEADER_CRC}};
    for (size_t i = 0; i < 2; i++) {
        fixture f;
        load(&f, &s, s.len, 4096);
        assert_int_equal(fx_memio_corrupt(f.m, "/seg", cases[i].at, 0x01), 0);
        fx_scan out;
        assert_int_equal(fx_seg_scan(&f.w, 0, 0, NULL, NULL, &out), 0);
        assert_int_equal(out.status, cases[i].want);
        assert_int_equal(out.records, 1);
        assert_int_equal(out.end_pos, s.pos[1]);
        unload(&f);
    }
}

static void test_payload_limit_is_checked_before_the_payload(void **state)
{
    static seg s;
    memset(&s, 0, sizeof(s));
    add(&s, 0, 1, 8, 'a');
    /* A header with a valid header checksum claiming too large a payload. */
    fx_be32_put(s.buf, FX_REC_MAX_PAYLOAD + 1);
    fx_be32_put(s.buf + 20, fx_logfmt_crc(0, s.buf, 20));
    fixture f;
    load(&f, &s, s.len, 4096);
    fx_scan out;
    assert_int_equal(fx_seg_scan(&f.w, 0, 0, NULL, NULL, &out), 0);
    assert_int_equal(out.status, FX_REC_TOO_LARGE);
    assert_int_equal(out.bad.len, FX_REC_MAX_PAYLOAD + 1);
    assert_int_equal(out.records, 0);
    unload(&f);
}

static void test_offset_gap_is_out_of_order(void **state)
{
    static seg s;
    memset(&s, 0, sizeof(s));
    add(&s, 10, 1, 4, 'a');
    add(&s, 12, 2, 4, 'b');
    fixture f;
    load(&f, &s, s.len, 4096);
    fx_scan out;
    assert_int_equal(fx_seg_scan(&f.w, 0, 10, NULL, NULL, &out), 0);
    assert_int_equal(out.status, FX_REC_OUT_OF_ORDER);
    assert_int_equal(out.bad.offset, 12);
    assert_int_equal(out.next_offset, 11);
    /* The record alone, without the offset check, is fine. */
    fx_rec_header h;
    fx_rec_status st;
    assert_int_equal(fx_segwin_record(&f.w, s.pos[1], 11, false, true, NULL, &h, &st), 0);
    assert_int_equal(st, FX_REC_OK);
    unload(&f);
}

static void test_callback_stop_is_returned(void **state)
{
    static seg s;
    memset(&s, 0, sizeof(s));
    for (uint32_t i = 0; i < 4; i++)
        add(&s, i, i, 4, 'x');
    fixture f;
    load(&f, &s, s.len, 4096);
    seen v = {.stop_at = 2};
    fx_scan out;
    assert_int_equal(fx_seg_scan(&f.w, 0, 0, on_record, &v, &out), 42);
    assert_int_equal(v.n, 2);
    unload(&f);
}

static void test_records_crossing_the_window_are_read_whole(void **state)
{
    static seg s;
    memset(&s, 0, sizeof(s));
    /* 3000-byte payloads in a 4 KiB window: most cross a refill; one of
     * 10000 bytes is larger than the window. */
    for (uint32_t i = 0; i < 8; i++)
        add(&s, i, i, i == 5 ? 10000 : 3000, (uint8_t)('a' + i));
    fixture f;
    load(&f, &s, s.len, 100); /* raised to 4096 */
    assert_int_equal(f.w.cap, 4096);
    fx_scan out;
    assert_int_equal(fx_seg_scan(&f.w, 0, 0, NULL, NULL, &out), 0);
    assert_int_equal(out.status, FX_REC_OK);
    assert_int_equal(out.records, 8);
    /* Copies, small (through the window) and large (straight to |dst|). */
    static uint8_t dst[10000];
    fx_rec_header h;
    fx_rec_status st;
    for (size_t r = 4; r <= 5; r++) {
        memset(dst, 0, sizeof(dst));
        assert_int_equal(fx_segwin_record(&f.w, s.pos[r], r, true, false, dst, &h, &st), 0);
        assert_int_equal(st, FX_REC_OK);
        assert_int_equal(dst[0], 'a' + r);
        assert_int_equal(dst[h.len - 1], 'a' + r);
    }
    unload(&f);
}

static void test_no_verify_skips_the_payload_checksum(void **state)
{
    static seg s;
    memset(&s, 0, sizeof(s));
    add(&s, 0, 1, 64, 'a');
    fixture f;
    load(&f, &s, s.len, 4096);
    assert_int_equal(fx_memio_corrupt(f.m, "/seg", FX_REC_HEADER_LEN + 1, 0x80), 0);
    fx_rec_header h;
    fx_rec_status st;
    assert_int_equal(fx_segwin_record(&f.w, 0, 0, true, false, NULL, &h, &st), 0);
    assert_int_equal(st, FX_REC_OK);
    assert_int_equal(h.len, 64);
    assert_int_equal(fx_segwin_record(&f.w, 0, 0, true, true, NULL, &h, &st), 0);
    assert_int_equal(st, FX_REC_CRC);
    /* A position past the end is truncated, not an error. */
    assert_int_equal(fx_segwin_record(&f.w, s.len + 5, 1, true, true, NULL, &h, &st), 0);
    assert_int_equal(st, FX_REC_TRUNCATED);
    unload(&f);
}

static void test_read_error_is_returned(void **state)
{
    static seg s;
    memset(&s, 0, sizeof(s));
    add(&s, 0, 1, 16, 'a');
    fixture f;
    load(&f, &s, s.len, 4096);
    fx_memio_fail(f.m, FX_MEMIO_PREAD, -EIO, 1);
    fx_scan out;
    assert_int_equal(fx_seg_scan(&f.w, 0, 0, NULL, NULL, &out), -EIO);
    /* A file shorter than |file_len| claims is an I/O error too. */
    fx_segwin_deinit(&f.w);
    assert_int_equal(fx_segwin_init(&f.w, f.io, f.fd, s.len + 100, 4096), 0);
    fx_rec_header h;
    fx_rec_status st;
    assert_int_equal(fx_segwin_record(&f.w, s.len, 1, true, true, NULL, &h, &st), -EIO);
    unload(&f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_scan_of_valid_records_reports_every_one),
    cmocka_unit_test(test_empty_range_is_ok_with_nothing_found),
    cmocka_unit_test(test_cut_inside_header_or_payload_is_truncated),
    cmocka_unit_test(test_bad_bytes_are_named_by_where_they_are),
    cmocka_unit_test(test_payload_limit_is_checked_before_the_payload),
    cmocka_unit_test(test_offset_gap_is_out_of_order),
    cmocka_unit_test(test_callback_stop_is_returned),
    cmocka_unit_test(test_records_crossing_the_window_are_read_whole),
    cmocka_unit_test(test_no_verify_skips_the_payload_checksum),
    cmocka_unit_test(test_read_error_is_returned),
};

FX_TEST_MAIN(tests)
