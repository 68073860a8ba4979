/* Unit tests for fx_dlog on the in-memory I/O layer (and one on real files):
 * offsets, reads and their bounds, rollover with a batch at the boundary,
 * preallocation, retention (also under a reader), recovery of torn tails,
 * interior corruption (refused, or cut with repair), index rebuilds,
 * unfinished rollovers, ENOSPC and EIO, and a segment laid out by hand in
 * the original's format. */
/* fx-test-libs: fx_storage fx_base */
#include "felix/error.h"
#include "storage/dlog.h"
#include "storage/dlog_int.h"
#include "storage/format.h"
#include "storage/memio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fx_test.h"

#define DIR_ "/d"
#define SEG0 DIR_ "/00000000000000000000.log"
#define SEG1 DIR_ "/00000000000000000001.log"
#define SEG2 DIR_ "/00000000000000000002.log"
#define IDX0 DIR_ "/00000000000000000000.index"

/* ---- helpers ------------------------------------------------------------- */

typedef struct fixture {
    fx_memio *m;
    fx_dlog_config cfg;
    fx_dlog *log;
    fx_dlog_recovery rep;
} fixture;

static void fx_init(fixture *f, uint64_t segment_bytes, uint64_t spacing)
{
    *f = (fixture){0};
    assert_int_equal(fx_memio_new(&f->m), 0);
    fx_dlog_config_default(&f->cfg);
    f->cfg.segment_bytes = segment_bytes;
    f->cfg.index_spacing_bytes = spacing;
    f->cfg.io = fx_memio_sio(f->m);
    f->cfg.label = "t/ns/s/0";
}

/* Closes the fixture's log (|sync|: flushed first, as a clean stop). */
static void close_log(fixture *f, bool sync)
{
    fx_dlog_close(f->log, sync);
    f->log = NULL;
}

static int reopen(fixture *f)
{
    if (f->log != NULL)
        close_log(f, false);
    return fx_dlog_open(&f->log, DIR_, &f->cfg, 1000, &f->rep);
}

static void fx_done(fixture *f)
{
    fx_dlog_close(f->log, false);
    fx_memio_free(f->m);
}

/* Payload of record |off|: "rec-<off>" padded with 'p' to a length that
 * varies with the offset (so records differ in size). */
static size_t payload_of(uint64_t off, char *buf, size_t cap)
{
    size_t len = 8 + (size_t)(off * 7 % 23);
    int n = snprintf(buf, cap, "rec-%llu", (unsigned long long)off);
    for (size_t i = (size_t)n; i < len; i++)
        buf[i] = 'p';
    return len;
}

/* Appends records |first|..|first+n-1| as one batch; returns the result. */
static int append_batch(fx_dlog *log, uint64_t first, size_t n, uint64_t ts)
{
    char bufs[64][64];
    fx_dlog_iov iov[64];
    assert_true(n <= 64);
    for (size_t i = 0; i < n; i++) {
        iov[i].data = bufs[i];
        iov[i].len = (uint32_t)payload_of(first + i, bufs[i], sizeof(bufs[i]));
    }
    uint64_t got = UINT64_MAX;
    int rv = fx_dlog_append(log, iov, n, ts, &got);
    if (rv == 0)
        assert_int_equal(got, first);
    return rv;
}

static void append_n(fx_dlog *log, uint64_t first, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_int_equal(append_batch(log, first + i, 1, 5000 + first + i), 0);
}

/* Reads everything from |from| and checks offsets and payloads up to |end|. */
static void expect_records(fx_dlog *log, uint64_t from, uint64_t end)
{
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    uint64_t at = from;
    while (at < end) {
        assert_int_equal(fx_dlog_read(log, at, 4096, 100, &p), 0);
        assert_true(p.n > 0);
        for (size_t i = 0; i < p.n; i++) {
            char want[64];
            size_t len = payload_of(at, want, sizeof(want));
            assert_int_equal(p.recs[i].offset, at);
            assert_int_equal(p.recs[i].len, len);
            assert_memory_equal(p.recs[i].data, want, len);
            at++;
        }
        assert_int_equal(p.next, at);
    }
    assert_int_equal(fx_dlog_read(log, end, 4096, 100, &p), 0);
    assert_int_equal(p.n, 0);
    fx_dlog_page_deinit(&p);
}

static uint64_t flen(fixture *f, const char *path)
{
    uint64_t n = 0;
    assert_int_equal(fx_memio_file_len(f->m, path, &n), 0);
    return n;
}

/* ---- appends and reads ------------------------------------------------------ */

static void test_append_assigns_contiguous_offsets(void **state)
{
    fixture f;
    fx_init(&f, 1 << 20, 4096);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(fx_dlog_next_offset(f.log), 0);
    assert_int_equal(append_batch(f.log, 0, 2, 10), 0);
    assert_int_equal(append_batch(f.log, 2, 1, 11), 0);
    assert_int_equal(append_batch(f.log, 3, 5, 12), 0);
    assert_int_equal(fx_dlog_next_offset(f.log), 8);
    assert_int_equal(fx_dlog_first_offset(f.log), 0);
    expect_records(f.log, 0, 8);
    expect_records(f.log, 5, 8);
    const fx_dlog_stats *st = fx_dlog_stats_get(f.log);
    assert_int_equal(st->append_batches, 3);
    assert_int_equal(st->append_records, 8);
    fx_done(&f);
}

/* The first offset appended at or after a time: before the first record,
 * inside a segment, at a segment's edge and past the tail; the same after a
 * reopen (sealed segments' times come from the recovery scan) and after
 * retention removed the oldest segments. Batches share their time. */
static void expect_times(fx_dlog *log, uint64_t first)
{
    uint64_t off = UINT64_MAX;
    assert_int_equal(fx_dlog_offset_for_time(log, 0, &off), 0);
    assert_int_equal(off, first);
    for (uint64_t k = first; k < 300; k += 7) {
        /* Records 3j, 3j+1, 3j+2 were appended at 5000 + j. */
        assert_int_equal(fx_dlog_offset_for_time(log, 5000 + k / 3, &off), 0);
        assert_int_equal(off, k / 3 * 3 < first ? first : k / 3 * 3);
    }
    assert_int_equal(fx_dlog_offset_for_time(log, 5000 + 100, &off), 0);
    assert_int_equal(off, 300);
}

static void test_offset_for_time_finds_the_first_record_at_or_after_it(void **state)
{
    (void)state;
    fixture f;
    fx_init(&f, 1024, 128);
    assert_int_equal(reopen(&f), 0);
    for (uint64_t j = 0; j < 100; j++)
        assert_int_equal(append_batch(f.log, 3 * j, 3, 5000 + j), 0);
    assert_true(fx_dlog_segment_count(f.log) > 4);
    expect_times(f.log, 0);
    assert_int_equal(reopen(&f), 0);
    expect_times(f.log, 0);
    fx_dlog_retained r;
    assert_int_equal(fx_dlog_retain(f.log, fx_dlog_bytes_on_disk(f.log) / 2, 0, 0, &r), 0);
    assert_true(r.segments > 0);
    expect_times(f.log, fx_dlog_first_offset(f.log));
    fx_done(&f);
}

static void test_append_rejects_empty_and_oversized_batches(void **state)
{
    fixture f;
    fx_init(&f, 1 << 20, 4096);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(fx_dlog_append(f.log, NULL, 0, 1, NULL), -EINVAL);
    fx_dlog_iov big = {.data = "", .len = FX_REC_MAX_PAYLOAD + 1};
    assert_int_equal(fx_dlog_append(f.log, &big, 1, 1, NULL), FX_ESTORAGE_TOO_LARGE);
    assert_int_equal(fx_dlog_next_offset(f.log), 0);
    fx_dlog_iov empty = {.data = NULL, .len = 0};
    assert_int_equal(fx_dlog_append(f.log, &empty, 1, 1, NULL), 0);
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    assert_int_equal(fx_dlog_read(f.log, 0, 10, 10, &p), 0);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.recs[0].len, 0);
    fx_dlog_page_deinit(&p);
    fx_done(&f);
}

static void test_config_bounds_are_checked(void **state)
{
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    char err[128];
    assert_int_equal(fx_dlog_config_check(&c, err, sizeof(err)), 0);
    c.segment_bytes = 59;
    assert_int_equal(fx_dlog_config_check(&c, err, sizeof(err)), FX_ECONFIG);
    assert_string_equal(err, "segment_bytes is too small to hold a single record");
    c.segment_bytes = 60;
    c.index_spacing_bytes = 0;
    assert_int_equal(fx_dlog_config_check(&c, err, sizeof(err)), FX_ECONFIG);
    fx_dlog *log = NULL;
    fx_dlog_recovery rep;
    assert_int_equal(fx_dlog_open(&log, "/nowhere", &c, 0, &rep), FX_ECONFIG);
    assert_null(log);
}

static void test_reopen_resumes_at_the_next_offset(void **state)
{
    fixture f;
    fx_init(&f, 512, 64);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 50);
    assert_int_equal(fx_dlog_sync(f.log, NULL), 0);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(f.rep.truncated_bytes, 0);
    assert_int_equal(f.rep.index_rebuilds, 0);
    assert_int_equal(fx_dlog_next_offset(f.log), 50);
    assert_int_equal(fx_dlog_durable_offset(f.log), 50);
    append_n(f.log, 50, 10);
    expect_records(f.log, 0, 60);
    fx_done(&f);
}

static void test_read_is_bounded_by_bytes_and_records(void **state)
{
    fixture f;
    fx_init(&f, 300, 64);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 40);
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    assert_int_equal(fx_dlog_read(f.log, 3, 1 << 20, 4, &p), 0);
    assert_int_equal(p.n, 4);
    assert_int_equal(p.next, 7);
    /* Byte budget 30: records of 8..30 bytes, never beyond the budget. */
    assert_int_equal(fx_dlog_read(f.log, 0, 30, 100, &p), 0);
    assert_true(p.n >= 1);
    assert_true(p.bytes <= 30);
    /* A budget below one record still returns that record. */
    assert_int_equal(fx_dlog_read(f.log, 10, 1, 100, &p), 0);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.recs[0].offset, 10);
    /* Pages across segments never skip an offset. */
    uint64_t at = 0;
    while (at < 40) {
        assert_int_equal(fx_dlog_read(f.log, at, 50, 100, &p), 0);
        for (size_t i = 0; i < p.n; i++)
            assert_int_equal(p.recs[i].offset, at + i);
        at = p.next;
    }
    assert_true(fx_dlog_segment_count(f.log) > 3);
    assert_int_equal(fx_dlog_read(f.log, 40, 50, 100, &p), 0);
    assert_int_equal(p.n, 0);
    assert_int_equal(fx_dlog_read(f.log, 1000, 50, 100, &p), 0);
    assert_int_equal(p.n, 0);
    fx_dlog_page_deinit(&p);
    fx_done(&f);
}

/* ---- rollover and preallocation ------------------------------------------------ */

static void test_rollover_keeps_a_batch_at_the_boundary_whole(void **state)
{
    fixture f;
    /* Header 32 + three records of 28+8..: a 4-record batch cannot fit after two. */
    fx_init(&f, 200, 64);
    f.cfg.preallocate = false;
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(append_batch(f.log, 0, 2, 1), 0); /* 32 + 36 + 43 = 111 */
    assert_int_equal(fx_dlog_segment_count(f.log), 1);
    assert_int_equal(append_batch(f.log, 2, 3, 2), 0); /* would exceed 200: new segment */
    assert_int_equal(fx_dlog_segment_count(f.log), 2);
    assert_int_equal(flen(&f, SEG0), 111);
    /* Segment 1 starts at offset 2: its header says so. */
    close_log(&f, true);
    int fd;
    fx_sio *io = fx_memio_sio(f.m);
    assert_int_equal(io->ops->open(io, SEG1, FX_SIO_READ, &fd), 0);
    uint8_t h[FX_SEG_HEADER_LEN];
    assert_int_equal(io->ops->pread(io, fd, h, sizeof(h), 0), sizeof(h));
    io->ops->close(io, fd);
    fx_seg_header sh;
    char why[128];
    assert_int_equal(fx_logfmt_seg_header_decode(h, sizeof(h), &sh, why, sizeof(why)), 0);
    assert_int_equal(sh.base_offset, 2);
    assert_int_equal(reopen(&f), 0);
    expect_records(f.log, 0, 5);
    fx_done(&f);
}

static void test_an_oversized_batch_goes_alone_into_a_segment(void **state)
{
    fixture f;
    fx_init(&f, 100, 64);
    f.cfg.preallocate = false;
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(append_batch(f.log, 0, 1, 1), 0);
    assert_int_equal(append_batch(f.log, 1, 6, 1), 0); /* > 100 bytes: its own segment */
    assert_int_equal(fx_dlog_segment_count(f.log), 2);
    assert_true(flen(&f, SEG1) > 100);
    assert_int_equal(append_batch(f.log, 7, 1, 1), 0); /* rolls again */
    assert_int_equal(fx_dlog_segment_count(f.log), 3);
    expect_records(f.log, 0, 8);
    assert_int_equal(fx_dlog_stats_get(f.log)->rolls, 2);
    fx_done(&f);
}

static void test_preallocation_reserves_and_seal_releases_it(void **state)
{
    fixture f;
    fx_init(&f, 4096, 256);
    assert_int_equal(reopen(&f), 0);
    /* KEEP_SIZE: 4096 bytes held, the file is still just its header. */
    assert_int_equal(flen(&f, SEG0), FX_SEG_HEADER_LEN);
    assert_int_equal(fx_memio_used(f.m), 4096 + flen(&f, IDX0));
    uint64_t n = 0;
    while (fx_dlog_segment_count(f.log) < 2)
        append_n(f.log, n++, 1);
    /* Sealed: segment 0 holds exactly its records; segment 1 holds 4096. */
    uint64_t sealed = flen(&f, SEG0);
    assert_true(sealed <= 4096);
    assert_true(flen(&f, SEG1) < 4096);
    assert_int_equal(fx_memio_used(f.m),
                     sealed + 4096 + flen(&f, IDX0) + flen(&f, DIR_ "/00000000000000000001.index"));
    fx_done(&f);
}

/* ---- sync ---------------------------------------------------------------------- */

static void test_sync_reports_the_durable_offset(void **state)
{
    fixture f;
    fx_init(&f, 1 << 20, 4096);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 3);
    assert_int_equal(fx_dlog_durable_offset(f.log), 0);
    assert_true(fx_dlog_unsynced_bytes(f.log) > 0);
    uint64_t d = 0;
    assert_int_equal(fx_dlog_sync(f.log, &d), 0);
    assert_int_equal(d, 3);
    assert_int_equal(fx_dlog_unsynced_bytes(f.log), 0);
    uint64_t syncs = fx_dlog_stats_get(f.log)->syncs;
    assert_int_equal(fx_dlog_sync(f.log, &d), 0); /* nothing new: no flush */
    assert_int_equal(fx_dlog_stats_get(f.log)->syncs, syncs);
    fx_done(&f);
}

static void test_failed_flush_stops_the_log_until_reopened(void **state)
{
    fixture f;
    fx_init(&f, 1 << 20, 4096);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 3);
    assert_int_equal(fx_dlog_sync(f.log, NULL), 0);
    append_n(f.log, 3, 2);
    fx_memio_fail(f.m, FX_MEMIO_FDATASYNC, -EIO, 1);
    assert_int_equal(fx_dlog_sync(f.log, NULL), -EIO);
    assert_true(fx_dlog_is_failed(f.log));
    assert_int_equal(fx_dlog_stats_get(f.log)->sync_failures, 1);
    assert_int_equal(append_batch(f.log, 5, 1, 1), FX_ESTORAGE_FAILED);
    assert_int_equal(fx_dlog_sync(f.log, NULL), FX_ESTORAGE_FAILED);
    assert_non_null(strstr(fx_dlog_last_error(f.log), "durability sync failed"));
    /* A power cut now loses the unflushed two; reopening finds the three. */
    fx_memio_crash(f.m, 0);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(fx_dlog_next_offset(f.log), 3);
    append_n(f.log, 3, 1);
    expect_records(f.log, 0, 4);
    fx_done(&f);
}

/* ---- disk full ------------------------------------------------------------------ */

static void test_enospc_fails_the_append_and_recovers_when_space_returns(void **state)
{
    fixture f;
    fx_init(&f, 1 << 16, 4096);
    f.cfg.preallocate = false;
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 5);
    assert_int_equal(fx_dlog_sync(f.log, NULL), 0);
    uint64_t before = flen(&f, SEG0);
    fx_memio_set_capacity(f.m, fx_memio_used(f.m) + 50); /* room for about one record */
    int rv = 0;
    uint64_t next = 5;
    for (int i = 0; i < 10 && rv == 0; i++) {
        rv = append_batch(f.log, next, 3, 7);
        if (rv == 0)
            next += 3;
    }
    assert_int_equal(rv, -ENOSPC);
    assert_int_equal(fx_dlog_next_offset(f.log), next);
    assert_true(flen(&f, SEG0) >= before);
    assert_false(fx_dlog_is_failed(f.log));
    assert_true(fx_dlog_stats_get(f.log)->append_failures >= 1);
    /* The partial write was cut back: the file ends at the last whole batch. */
    fx_memio_set_capacity(f.m, 0);
    assert_int_equal(append_batch(f.log, next, 2, 8), 0);
    assert_int_equal(fx_dlog_sync(f.log, NULL), 0);
    next += 2;
    fx_memio_crash(f.m, 0);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(f.rep.truncated_bytes, 0);
    assert_int_equal(fx_dlog_next_offset(f.log), next);
    expect_records(f.log, 0, next);
    fx_done(&f);
}

static void test_enospc_at_rollover_keeps_the_active_segment(void **state)
{
    fixture f;
    fx_init(&f, 200, 64);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 3);
    fx_memio_set_capacity(f.m, fx_memio_used(f.m) + 20); /* the next segment cannot be reserved */
    int rv = 0;
    uint64_t next = 3;
    while (rv == 0 && next < 50) {
        rv = append_batch(f.log, next, 1, 1);
        next += rv == 0;
    }
    assert_int_equal(rv, -ENOSPC);
    assert_int_equal(fx_dlog_segment_count(f.log), 1);
    assert_true(fx_dlog_stats_get(f.log)->roll_failures >= 1 ||
                fx_dlog_stats_get(f.log)->append_failures >= 1);
    fx_memio_set_capacity(f.m, 0);
    assert_int_equal(append_batch(f.log, next, 1, 1), 0);
    expect_records(f.log, 0, next + 1);
    fx_done(&f);
}

/* ---- retention -------------------------------------------------------------------- */

static void test_retention_by_bytes_removes_whole_sealed_segments(void **state)
{
    fixture f;
    fx_init(&f, 300, 64);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 60);
    size_t segs = fx_dlog_segment_count(f.log);
    assert_true(segs >= 5);
    uint64_t bytes = fx_dlog_bytes_on_disk(f.log);
    fx_dlog_retained r;
    assert_int_equal(fx_dlog_retain(f.log, bytes / 2, 0, 0, &r), 0);
    assert_true(r.segments >= 1);
    assert_true(fx_dlog_bytes_on_disk(f.log) <= bytes / 2);
    assert_int_equal(r.first_offset, fx_dlog_first_offset(f.log));
    assert_true(r.first_offset > 0);
    assert_int_equal(fx_memio_file_len(f.m, SEG0, &bytes), -ENOENT);
    /* A bound of one byte still keeps the active segment. */
    assert_int_equal(fx_dlog_retain(f.log, 1, 0, 0, &r), 0);
    assert_int_equal(fx_dlog_segment_count(f.log), 1);
    assert_int_equal(fx_dlog_next_offset(f.log), 60);
    const fx_dlog_stats *st = fx_dlog_stats_get(f.log);
    assert_int_equal(st->retention_segments_deleted, segs - 1);
    assert_true(st->retention_bytes_reclaimed > 0);
    expect_records(f.log, fx_dlog_first_offset(f.log), 60);
    /* Reopen: the log starts at the surviving base. */
    uint64_t first = fx_dlog_first_offset(f.log);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(fx_dlog_first_offset(f.log), first);
    fx_done(&f);
}

/* The bound is met exactly: at the log's size nothing goes; one byte below
 * it, exactly the head segment (not one more). */
static void test_retention_by_bytes_deletes_no_more_than_the_bound_needs(void **state)
{
    fixture f;
    fx_init(&f, 300, 64);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 60);
    assert_true(fx_dlog_segment_count(f.log) >= 4);
    close_log(&f, true);
    assert_int_equal(reopen(&f), 0);
    /* Base of segment 1, from its header. */
    fx_sio *io = fx_memio_sio(f.m);
    int fd;
    uint8_t b[FX_SEG_HEADER_LEN];
    fx_seg_header h;
    char why[128];
    assert_int_equal(io->ops->open(io, SEG1, FX_SIO_READ, &fd), 0);
    assert_int_equal(io->ops->pread(io, fd, b, sizeof(b), 0), sizeof(b));
    io->ops->close(io, fd);
    assert_int_equal(fx_logfmt_seg_header_decode(b, sizeof(b), &h, why, sizeof(why)), 0);
    size_t segs = fx_dlog_segment_count(f.log);
    uint64_t bytes = fx_dlog_bytes_on_disk(f.log);
    fx_dlog_retained r;
    assert_int_equal(fx_dlog_retain(f.log, bytes, 0, 0, &r), 0);
    assert_int_equal(r.segments, 0);
    assert_int_equal(fx_dlog_segment_count(f.log), segs);
    assert_int_equal(fx_dlog_retain(f.log, bytes - 1, 0, 0, &r), 0);
    assert_int_equal(r.segments, 1);
    assert_int_equal(r.first_offset, h.base_offset);
    assert_int_equal(fx_dlog_segment_count(f.log), segs - 1);
    assert_int_equal(fx_dlog_bytes_on_disk(f.log), bytes - r.bytes);
    fx_done(&f);
}

static void test_retention_by_age_uses_the_newest_record(void **state)
{
    fixture f;
    fx_init(&f, 200, 64);
    assert_int_equal(reopen(&f), 0);
    for (uint64_t i = 0; i < 12; i++)
        assert_int_equal(append_batch(f.log, i, 1, 1000 * (i + 1)), 0);
    assert_true(fx_dlog_segment_count(f.log) >= 3);
    /* The head's newest record is ts 3000 or so; at now 3500 with age 1000 nothing goes. */
    fx_dlog_retained r;
    assert_int_equal(fx_dlog_retain(f.log, 0, 100000, 100500, &r), 0);
    assert_int_equal(r.segments, 0);
    /* Far in the future every sealed segment is too old, the active one stays. */
    assert_int_equal(fx_dlog_retain(f.log, 0, 1000, 1000000, &r), 0);
    assert_int_equal(fx_dlog_segment_count(f.log), 1);
    assert_int_equal(fx_dlog_next_offset(f.log), 12);
    fx_done(&f);
}

static void test_reader_in_a_deleted_range_gets_cursor_too_old(void **state)
{
    fixture f;
    fx_init(&f, 300, 64);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 40);
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    assert_int_equal(fx_dlog_read(f.log, 0, 20, 2, &p), 0);
    uint64_t cursor = p.next; /* the reader is inside segment 0 */
    assert_int_equal(fx_dlog_retain(f.log, 1, 0, 0, NULL), 0);
    assert_int_equal(fx_dlog_read(f.log, cursor, 20, 2, &p), FX_ECURSOR_TOO_OLD);
    assert_int_equal(p.n, 0);
    assert_non_null(strstr(fx_dlog_last_error(f.log), "is no longer available; the log starts at"));
    /* From the first retained offset it reads on. */
    assert_int_equal(fx_dlog_read(f.log, fx_dlog_first_offset(f.log), 1000, 100, &p), 0);
    assert_int_equal(p.recs[0].offset, fx_dlog_first_offset(f.log));
    fx_dlog_page_deinit(&p);
    fx_done(&f);
}

/* ---- recovery ---------------------------------------------------------------------- */

/* The last record was appended after the last flush (beyond the durable
 * point): a power cut can leave any prefix of it. */
static void test_torn_tail_is_cut_at_every_byte(void **state)
{
    fixture f;
    fx_init(&f, 1 << 20, 64);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 5);
    assert_int_equal(fx_dlog_sync(f.log, NULL), 0);
    append_n(f.log, 5, 1);
    close_log(&f, false);
    uint64_t full = flen(&f, SEG0);
    char last[64];
    uint64_t last_len = FX_REC_HEADER_LEN + payload_of(5, last, sizeof(last));
    for (uint64_t cut = full - 1; cut > full - last_len; cut--) {
        assert_int_equal(fx_memio_cut(f.m, SEG0, cut), 0);
        assert_int_equal(reopen(&f), 0);
        assert_int_equal(f.rep.truncated_bytes, cut - (full - last_len));
        assert_int_equal(fx_dlog_next_offset(f.log), 5);
        assert_int_equal(flen(&f, SEG0), full - last_len);
        expect_records(f.log, 0, 5);
        /* Put the record back, unflushed, for the next cut. */
        assert_int_equal(append_batch(f.log, 5, 1, 5005), 0);
        close_log(&f, false);
        assert_int_equal(flen(&f, SEG0), full);
    }
    fx_done(&f);
}

static void test_a_zero_filled_tail_is_cut_as_torn(void **state)
{
    fixture f;
    fx_init(&f, 1 << 20, 64);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 4);
    close_log(&f, true);
    uint64_t len = flen(&f, SEG0);
    /* The file grew by 100 zero bytes that never got their data. */
    fx_sio *io = fx_memio_sio(f.m);
    int fd;
    assert_int_equal(io->ops->open(io, SEG0, FX_SIO_WRITE, &fd), 0);
    assert_int_equal(io->ops->ftruncate(io, fd, len + 100), 0);
    assert_int_equal(io->ops->fdatasync(io, fd), 0);
    io->ops->close(io, fd);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(f.rep.truncated_bytes, 100);
    assert_int_equal(fx_dlog_next_offset(f.log), 4);
    close_log(&f, false);
    /* Without a durable point (a segment of the original's, which writes
     * the reserved word 0), a non-zero byte in such a tail is damage, not a
     * torn write. */
    assert_int_equal(io->ops->open(io, SEG0, FX_SIO_WRITE, &fd), 0);
    assert_int_equal(io->ops->ftruncate(io, fd, len + 100), 0);
    assert_int_equal(io->ops->pwrite(io, fd, "x", 1, len + 60), 0);
    assert_int_equal(io->ops->pwrite(io, fd, "\0\0\0\0", 4, FX_SEG_POINT_POS), 0);
    io->ops->close(io, fd);
    assert_int_equal(reopen(&f), FX_ESTORAGE_CORRUPT);
    assert_non_null(strstr(f.rep.message, "record header checksum mismatch"));
    fx_done(&f);
}

/* Byte position of record |off| in segment 0 of a log written by append_n. */
static uint64_t pos_of(uint64_t off)
{
    uint64_t pos = FX_SEG_HEADER_LEN;
    for (uint64_t i = 0; i < off; i++) {
        char b[64];
        pos += FX_REC_HEADER_LEN + payload_of(i, b, sizeof(b));
    }
    return pos;
}

/* Appends |n| records of |len| bytes each (record i filled with 'A' + i)
 * as one batch. */
static void append_big(fx_dlog *log, size_t n, uint32_t len)
{
    static uint8_t bufs[4][20000];
    fx_dlog_iov iov[4];
    assert_true(n <= 4 && len <= sizeof(bufs[0]));
    for (size_t i = 0; i < n; i++) {
        memset(bufs[i], 'A' + (int)i, len);
        iov[i] = (fx_dlog_iov){.data = bufs[i], .len = len};
    }
    assert_int_equal(fx_dlog_append(log, iov, n, 7000, NULL), 0);
}

/* Overwrites [from, to) of |path| with zeros and flushes everything: what
 * the disk holds after a power cut that left those blocks unwritten. */
static void zero_range(fixture *f, const char *path, uint64_t from, uint64_t to)
{
    static const uint8_t zeros[4096];
    fx_sio *io = fx_memio_sio(f->m);
    int fd;
    assert_int_equal(io->ops->open(io, path, FX_SIO_WRITE, &fd), 0);
    for (uint64_t at = from; at < to;) {
        size_t k = to - at < sizeof(zeros) ? (size_t)(to - at) : sizeof(zeros);
        assert_int_equal(io->ops->pwrite(io, fd, zeros, k, at), 0);
        at += k;
    }
    assert_int_equal(io->ops->fdatasync(io, fd), 0);
    io->ops->close(io, fd);
}

/* The log reopens at |next| with nothing more to cut, the file ends where
 * the records do, and appends go on from there. */
static void expect_clean_from(fixture *f, uint64_t next, uint64_t file_len)
{
    assert_int_equal(fx_dlog_next_offset(f->log), next);
    assert_int_equal(flen(f, SEG0), file_len);
    assert_int_equal(reopen(f), 0);
    assert_int_equal(f->rep.truncated_bytes, 0);
    assert_int_equal(fx_dlog_next_offset(f->log), next);
    assert_int_equal(append_batch(f->log, next, 1, 9000), 0);
    assert_int_equal(fx_dlog_sync(f->log, NULL), 0);
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    assert_int_equal(fx_dlog_read(f->log, next, 4096, 10, &p), 0);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.recs[0].offset, next);
    fx_dlog_page_deinit(&p);
}

/* A large record appended after the last flush whose later blocks stayed
 * unwritten while the file's length reached the disk (ext4 and XFS with
 * preallocated extents): zeros from a block boundary inside the record to
 * the end, a record checksum mismatch at the last record. Cut and counted,
 * with the durable point and, for a segment of the original's (no point),
 * by the zero-block rule. */
static void test_zero_block_inside_the_last_unsynced_append_is_cut(void **state)
{
    for (int no_point = 0; no_point < 2; no_point++) {
        fixture f;
        fx_init(&f, 1 << 20, 4096);
        assert_int_equal(reopen(&f), 0);
        append_n(f.log, 0, 5);
        assert_int_equal(fx_dlog_sync(f.log, NULL), 0);
        append_big(f.log, 1, 20000);
        close_log(&f, false);
        uint64_t start = pos_of(5), len = flen(&f, SEG0);
        assert_int_equal(len, start + FX_REC_HEADER_LEN + 20000);
        zero_range(&f, SEG0, 3 * 4096, len); /* the length is kept */
        if (no_point)
            zero_range(&f, SEG0, FX_SEG_POINT_POS, FX_SEG_POINT_POS + 4);
        assert_int_equal(reopen(&f), 0);
        assert_int_equal(f.rep.truncated_bytes, len - start);
        assert_false(f.rep.repaired);
        expect_clean_from(&f, 5, start);
        fx_done(&f);
    }
}

/* Blocks of the last append written out of order: a zero block in the
 * middle, valid-looking records after it. Everything from the first record
 * the hole touches is cut (offsets stay contiguous), and counted. */
static void test_hole_then_valid_record_tail_is_cut(void **state)
{
    fixture f;
    fx_init(&f, 1 << 20, 4096);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 5);
    assert_int_equal(fx_dlog_sync(f.log, NULL), 0);
    for (uint64_t i = 5; i < 400; i += 40)
        assert_int_equal(append_batch(f.log, i, 40, 6000), 0); /* one unflushed stretch */
    close_log(&f, false);
    uint64_t len = flen(&f, SEG0);
    assert_true(len > 3 * 4096);
    zero_range(&f, SEG0, 4096, 2 * 4096);
    uint64_t first_hit = 5;
    while (pos_of(first_hit + 1) <= 4096)
        first_hit++;
    /* A record after the hole still decodes: it is not a zero tail. */
    fx_sio *io = fx_memio_sio(f.m);
    int fd;
    uint64_t after = first_hit;
    while (pos_of(after) < 2 * 4096)
        after++;
    uint8_t hdr[FX_REC_HEADER_LEN];
    fx_rec_header h;
    assert_int_equal(io->ops->open(io, SEG0, FX_SIO_READ, &fd), 0);
    assert_int_equal(io->ops->pread(io, fd, hdr, sizeof(hdr), pos_of(after)), sizeof(hdr));
    io->ops->close(io, fd);
    assert_int_equal(fx_logfmt_rec_header_decode(hdr, &h), FX_REC_OK);
    assert_int_equal(h.offset, after);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(f.rep.truncated_bytes, len - pos_of(first_hit));
    expect_records(f.log, 0, first_hit);
    expect_clean_from(&f, first_hit, pos_of(first_hit));
    fx_done(&f);
}

/* Damage before the durable point is corruption, whatever it looks like (a
 * cut inside the last flushed record, zeros over it, a cut at a record
 * boundary): those records were flushed, so acknowledged under on_commit.
 * Repair keeps the valid prefix and lowers the point with it. */
static void test_damage_before_the_durable_point_is_corruption(void **state)
{
    fixture f;
    fx_init(&f, 1 << 20, 4096);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 10);
    assert_int_equal(fx_dlog_sync(f.log, NULL), 0);
    close_log(&f, false);
    uint64_t len = flen(&f, SEG0), last = pos_of(9);
    char want[256];
    /* A partial last record. */
    assert_int_equal(fx_memio_cut(f.m, SEG0, len - 3), 0);
    assert_int_equal(reopen(&f), FX_ESTORAGE_CORRUPT);
    snprintf(want, sizeof(want),
             "corruption detected: truncated (stream=t/ns/s/0, dir=/d, "
             "file=00000000000000000000.log, position=%llu)",
             (unsigned long long)last);
    assert_string_equal(f.rep.message, want);
    /* Zeros over it, the length kept. */
    zero_range(&f, SEG0, last, len);
    assert_int_equal(reopen(&f), FX_ESTORAGE_CORRUPT);
    assert_non_null(strstr(f.rep.message, "record header checksum mismatch"));
    /* Cut at a record boundary: every record decodes, the file is short. */
    assert_int_equal(fx_memio_cut(f.m, SEG0, last), 0);
    assert_int_equal(reopen(&f), FX_ESTORAGE_CORRUPT);
    snprintf(want, sizeof(want), "segment ends before its durable point %llu",
             (unsigned long long)len);
    assert_non_null(strstr(f.rep.message, want));
    /* Repair keeps the nine records; the point comes down, so the next
     * open needs no repair. */
    f.cfg.repair = true;
    assert_int_equal(reopen(&f), 0);
    assert_true(f.rep.repaired);
    assert_int_equal(f.rep.dropped_from, 9);
    f.cfg.repair = false;
    expect_clean_from(&f, 9, last);
    fx_done(&f);
}

static void test_bit_flip_in_a_sealed_segment_refuses_to_open(void **state)
{
    fixture f;
    fx_init(&f, 300, 64);
    f.cfg.verify_all_on_open = true;
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 30);
    assert_int_equal(fx_dlog_sync(f.log, NULL), 0);
    assert_true(fx_dlog_segment_count(f.log) >= 3);
    close_log(&f, false);
    /* Flip a payload byte of the second record of segment 1. */
    uint64_t pos = FX_SEG_HEADER_LEN;
    fx_sio *io = fx_memio_sio(f.m);
    int fd;
    uint8_t h[FX_REC_HEADER_LEN];
    assert_int_equal(io->ops->open(io, SEG1, FX_SIO_READ, &fd), 0);
    assert_int_equal(io->ops->pread(io, fd, h, sizeof(h), pos), sizeof(h));
    io->ops->close(io, fd);
    uint64_t second = pos + FX_REC_HEADER_LEN + fx_be32_get(h);
    assert_int_equal(fx_memio_corrupt(f.m, SEG1, second + FX_REC_HEADER_LEN + 1, 0x04), 0);
    assert_int_equal(reopen(&f), FX_ESTORAGE_CORRUPT);
    assert_null(f.log);
    char want[256];
    snprintf(want, sizeof(want),
             "corruption detected: record checksum mismatch (stream=t/ns/s/0, dir=/d, "
             "file=00000000000000000001.log, position=%llu)",
             (unsigned long long)second);
    assert_string_equal(f.rep.message, want);
    /* Repair cuts at that record and drops every later segment. */
    size_t segs_before = 0;
    for (uint64_t id = 0; id < 100; id++) {
        char p[64];
        uint64_t l;
        snprintf(p, sizeof(p), DIR_ "/%020llu.log", (unsigned long long)id);
        segs_before += fx_memio_file_len(f.m, p, &l) == 0;
    }
    f.cfg.repair = true;
    assert_int_equal(reopen(&f), 0);
    assert_true(f.rep.repaired);
    assert_int_equal(f.rep.dropped_segments, segs_before - 2);
    assert_true(f.rep.dropped_bytes > 0);
    uint64_t first_bad = fx_dlog_next_offset(f.log);
    assert_int_equal(f.rep.dropped_from, first_bad);
    assert_non_null(strstr(f.rep.message, "repair dropped"));
    assert_int_equal(fx_dlog_segment_count(f.log), 2);
    expect_records(f.log, 0, first_bad);
    append_n(f.log, first_bad, 3);
    expect_records(f.log, 0, first_bad + 3);
    fx_done(&f);
}

static void test_bit_flip_found_by_a_read_when_open_checks_only_the_tail(void **state)
{
    fixture f;
    fx_init(&f, 1000, 64);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 60);
    assert_true(fx_dlog_segment_count(f.log) >= 2);
    close_log(&f, true);
    /* Payload of record 0 (before segment 0's last index entry). */
    assert_int_equal(fx_memio_corrupt(f.m, SEG0, FX_SEG_HEADER_LEN + FX_REC_HEADER_LEN, 0x80), 0);
    assert_int_equal(reopen(&f), 0);
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    assert_int_equal(fx_dlog_read(f.log, 0, 100, 10, &p), FX_ESTORAGE_CORRUPT);
    assert_non_null(strstr(fx_dlog_last_error(f.log),
                           "record checksum mismatch (stream=t/ns/s/0, dir=/d, "
                           "file=00000000000000000000.log, position=32)"));
    /* Records behind it still read. */
    assert_int_equal(fx_dlog_read(f.log, 1, 100, 10, &p), 0);
    assert_int_equal(p.recs[0].offset, 1);
    fx_dlog_page_deinit(&p);
    fx_done(&f);
}

static void test_corruption_before_the_active_tail_refuses_unless_repaired(void **state)
{
    fixture f;
    fx_init(&f, 1 << 20, 64);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 10);
    close_log(&f, true);
    /* Damage the header checksum of record 0: records follow, so not a tail. */
    assert_int_equal(fx_memio_corrupt(f.m, SEG0, FX_SEG_HEADER_LEN + 21, 0x01), 0);
    assert_int_equal(reopen(&f), FX_ESTORAGE_CORRUPT);
    assert_non_null(strstr(f.rep.message, "record header checksum mismatch"));
    assert_non_null(strstr(f.rep.message, "position=32)"));
    f.cfg.repair_checksum_tail = true; /* not a tail record: still refused */
    assert_int_equal(reopen(&f), FX_ESTORAGE_CORRUPT);
    f.cfg.repair = true;
    assert_int_equal(reopen(&f), 0);
    assert_true(f.rep.repaired);
    assert_int_equal(f.rep.dropped_from, 0);
    assert_int_equal(fx_dlog_next_offset(f.log), 0);
    assert_int_equal(flen(&f, SEG0), FX_SEG_HEADER_LEN);
    fx_done(&f);
}

static void test_damaged_last_record_is_cut_only_with_repair_checksum_tail(void **state)
{
    fixture f;
    fx_init(&f, 1 << 20, 64);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 4);
    close_log(&f, true);
    uint64_t len = flen(&f, SEG0);
    assert_int_equal(fx_memio_corrupt(f.m, SEG0, len - 1, 0x01), 0); /* last payload byte */
    assert_int_equal(reopen(&f), FX_ESTORAGE_CORRUPT);
    assert_non_null(strstr(f.rep.message, "record checksum mismatch"));
    f.cfg.repair_checksum_tail = true;
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(fx_dlog_next_offset(f.log), 3);
    assert_true(f.rep.truncated_bytes > 0);
    assert_false(f.rep.repaired);
    fx_done(&f);
}

/* One append writes all its index entries with one pwrite (besides the
 * records' own), and what it writes is what a rebuild from the log writes. */
static void test_one_append_writes_its_index_entries_in_one_write(void **state)
{
    fixture f;
    fx_init(&f, 1 << 20, 100);
    f.cfg.preallocate = false;
    assert_int_equal(reopen(&f), 0);
    uint64_t before = fx_memio_op_calls(f.m, FX_MEMIO_PWRITE);
    assert_int_equal(append_batch(f.log, 0, 64, 7), 0);
    assert_int_equal(fx_memio_op_calls(f.m, FX_MEMIO_PWRITE) - before, 2);
    assert_int_equal(append_batch(f.log, 64, 64, 8), 0);
    assert_int_equal(fx_memio_op_calls(f.m, FX_MEMIO_PWRITE) - before, 4);
    fx_sio *io = fx_memio_sio(f.m);
    char *written = NULL, *rebuilt = NULL;
    size_t wlen = 0, rlen = 0;
    assert_int_equal(fx_sio_read_file(io, IDX0, 1 << 20, &written, &wlen), 0);
    assert_true(wlen > FX_IDX_HEADER_LEN + 20 * FX_IDX_ENTRY_LEN); /* many entries per batch */
    close_log(&f, true);
    assert_int_equal(io->ops->unlink(io, IDX0), 0);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(fx_sio_read_file(io, IDX0, 1 << 20, &rebuilt, &rlen), 0);
    assert_int_equal(rlen, wlen);
    assert_memory_equal(rebuilt, written, wlen);
    expect_records(f.log, 0, 128);
    free(written);
    free(rebuilt);
    fx_done(&f);
}

/* Appends |n| records of 10 payload bytes (38 bytes each on disk). */
static int append_tens(fx_dlog *log, size_t n)
{
    fx_dlog_iov iov[8];
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++)
        iov[i] = (fx_dlog_iov){.data = "0123456789", .len = 10};
    return fx_dlog_append(log, iov, n, 1, NULL);
}

/* fx_dlog_room_after predicts the roll rule: what it leaves fits without a
 * roll, a batch that does not fit an empty segment leaves nothing, and after
 * a full segment it answers for the new one. */
static void test_room_after_follows_the_rollover_rule(void **state)
{
    fixture f;
    fx_init(&f, FX_SEG_HEADER_LEN + 3 * 38, 4096); /* room for three records */
    f.cfg.preallocate = false;
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(fx_dlog_room_after(f.log, 38), 2 * 38);
    assert_int_equal(fx_dlog_room_after(f.log, 500), 0); /* alone in the empty segment */
    assert_int_equal(append_tens(f.log, 1), 0);
    assert_int_equal(fx_dlog_room_after(f.log, 38), 38);
    /* Two records (the first and the room after it) go in without a roll. */
    assert_int_equal(append_tens(f.log, 2), 0);
    assert_int_equal(fx_dlog_segment_count(f.log), 1);
    /* Full: the next batch rolls and opens the new segment. */
    assert_int_equal(fx_dlog_room_after(f.log, 38), 2 * 38);
    assert_int_equal(append_tens(f.log, 3), 0);
    assert_int_equal(fx_dlog_segment_count(f.log), 2);
    /* Full again: a 1-byte batch would open a third segment and leave the rest. */
    assert_int_equal(fx_dlog_room_after(f.log, 1), 3 * 38 - 1);
    fx_done(&f);
}

/* The offset of the record whose header is at |pos| of |path|. */
static uint64_t offset_at(fixture *f, const char *path, uint64_t pos)
{
    fx_sio *io = fx_memio_sio(f->m);
    int fd;
    uint8_t hdr[FX_REC_HEADER_LEN];
    fx_rec_header h;
    assert_int_equal(io->ops->open(io, path, FX_SIO_READ, &fd), 0);
    assert_int_equal(io->ops->pread(io, fd, hdr, sizeof(hdr), pos), sizeof(hdr));
    io->ops->close(io, fd);
    assert_int_equal(fx_logfmt_rec_header_decode(hdr, &h), FX_REC_OK);
    return h.offset;
}

/* fx_dlog_index_seek on the index files the log wrote: for every offset of
 * every sealed segment, exactly the greatest entry at or below it. */
static void test_index_seek_lands_on_the_greatest_entry_at_or_below_every_offset(void **state)
{
    fixture f;
    fx_init(&f, 2000, 100);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 150);
    size_t segs = fx_dlog_segment_count(f.log);
    assert_true(segs >= 3);
    close_log(&f, true);
    fx_sio *io = fx_memio_sio(f.m);
    uint64_t base = 0;
    for (uint64_t id = 0; id + 1 < segs; id++) {
        char ipath[64], spath[64];
        snprintf(ipath, sizeof(ipath), DIR_ "/%020llu.index", (unsigned long long)id);
        snprintf(spath, sizeof(spath), DIR_ "/%020llu.log", (unsigned long long)id);
        char *buf = NULL;
        size_t len = 0;
        assert_int_equal(fx_sio_read_file(io, ipath, 1 << 20, &buf, &len), 0);
        size_t n = (len - FX_IDX_HEADER_LEN) / FX_IDX_ENTRY_LEN;
        assert_true(n >= 3);
        uint64_t last_off = 0, last_pos = 0, seg_size = flen(&f, spath);
        fx_logfmt_idx_entry_decode((uint8_t *)buf + FX_IDX_HEADER_LEN + (n - 1) * FX_IDX_ENTRY_LEN,
                                   &last_off, &last_pos);
        uint64_t end = last_off + 3; /* records after the last entry too */
        for (uint64_t off = base; off < end; off++) {
            uint64_t eo = base, ep = FX_SEG_HEADER_LEN;
            for (size_t i = 0; i < n; i++) {
                uint64_t o, p;
                fx_logfmt_idx_entry_decode(
                    (uint8_t *)buf + FX_IDX_HEADER_LEN + i * FX_IDX_ENTRY_LEN, &o, &p);
                if (o <= off) {
                    eo = o;
                    ep = p;
                }
            }
            fx_dlog_pos got = fx_dlog_index_seek(io, ipath, base, seg_size, off);
            assert_int_equal(got.offset, eo);
            assert_int_equal(got.pos, ep);
            assert_int_equal(offset_at(&f, spath, got.pos), eo);
        }
        free(buf);
        uint8_t hb[FX_SEG_HEADER_LEN];
        fx_seg_header h;
        char why[128];
        snprintf(spath, sizeof(spath), DIR_ "/%020llu.log", (unsigned long long)id + 1);
        int fd;
        assert_int_equal(io->ops->open(io, spath, FX_SIO_READ, &fd), 0);
        assert_int_equal(io->ops->pread(io, fd, hb, sizeof(hb), 0), sizeof(hb));
        io->ops->close(io, fd);
        assert_int_equal(fx_logfmt_seg_header_decode(hb, sizeof(hb), &h, why, sizeof(why)), 0);
        base = h.base_offset;
    }
    fx_done(&f);
}

static void test_missing_or_garbage_index_is_rebuilt_identically(void **state)
{
    fixture f;
    fx_init(&f, 2000, 100);
    f.cfg.preallocate = false;
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 80);
    assert_true(fx_dlog_segment_count(f.log) >= 2);
    close_log(&f, true);
    char *orig = NULL, *again = NULL;
    size_t olen = 0, alen = 0;
    fx_sio *io = fx_memio_sio(f.m);
    assert_int_equal(fx_sio_read_file(io, IDX0, 1 << 20, &orig, &olen), 0);
    assert_true(olen > FX_IDX_HEADER_LEN + 2 * FX_IDX_ENTRY_LEN);
    /* Missing. */
    assert_int_equal(io->ops->unlink(io, IDX0), 0);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(f.rep.index_rebuilds, 1);
    expect_records(f.log, 0, 80);
    close_log(&f, false);
    assert_int_equal(fx_sio_read_file(io, IDX0, 1 << 20, &again, &alen), 0);
    assert_int_equal(alen, olen);
    assert_memory_equal(again, orig, olen);
    free(again);
    /* Garbage entry (positions not ascending): rebuilt again. */
    assert_int_equal(fx_memio_corrupt(f.m, IDX0, FX_IDX_HEADER_LEN + FX_IDX_ENTRY_LEN + 14, 0xff),
                     0);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(f.rep.index_rebuilds, 1);
    close_log(&f, false);
    assert_int_equal(fx_sio_read_file(io, IDX0, 1 << 20, &again, &alen), 0);
    assert_memory_equal(again, orig, olen);
    free(again);
    /* Incomplete (last entries missing): rebuilt. */
    assert_int_equal(fx_memio_cut(f.m, IDX0, FX_IDX_HEADER_LEN + FX_IDX_ENTRY_LEN + 5), 0);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(f.rep.index_rebuilds, 1);
    /* Intact: not rebuilt. */
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(f.rep.index_rebuilds, 0);
    expect_records(f.log, 0, 80);
    free(orig);
    fx_done(&f);
}

static void test_sealed_reads_search_the_index_file_and_survive_its_loss(void **state)
{
    fixture f;
    fx_init(&f, 2000, 100);
    f.cfg.preallocate = false;
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 120);
    assert_true(fx_dlog_segment_count(f.log) >= 3);
    expect_records(f.log, 0, 120);
    expect_records(f.log, 37, 120);
    /* An index entry that points at the wrong record (a real record start,
     * another offset): the read notices and reads from the segment start. */
    uint64_t o1, p1, o2, p2;
    char *idx = NULL;
    size_t len = 0;
    fx_sio *io = fx_memio_sio(f.m);
    assert_int_equal(fx_sio_read_file(io, IDX0, 1 << 20, &idx, &len), 0);
    assert_true(len >= FX_IDX_HEADER_LEN + 3 * FX_IDX_ENTRY_LEN);
    fx_logfmt_idx_entry_decode((uint8_t *)idx + FX_IDX_HEADER_LEN + FX_IDX_ENTRY_LEN, &o1, &p1);
    fx_logfmt_idx_entry_decode((uint8_t *)idx + FX_IDX_HEADER_LEN + 2 * FX_IDX_ENTRY_LEN, &o2, &p2);
    free(idx);
    for (int i = 0; i < 8; i++) /* entry 1 keeps its offset but gets entry 2's position */
        assert_int_equal(fx_memio_corrupt(f.m, IDX0,
                                          FX_IDX_HEADER_LEN + FX_IDX_ENTRY_LEN + 8 + (uint64_t)i,
                                          (uint8_t)((p1 ^ p2) >> (8 * (7 - i)))),
                         0);
    expect_records(f.log, o1, 120);
    expect_records(f.log, o2 - 1, 120);
    /* No index files at all: every read still finds its records. */
    for (uint64_t id = 0; id + 1 < fx_dlog_segment_count(f.log); id++) {
        char path[64];
        snprintf(path, sizeof(path), DIR_ "/%020llu.index", (unsigned long long)id);
        assert_int_equal(io->ops->unlink(io, path), 0);
    }
    expect_records(f.log, 0, 120);
    expect_records(f.log, 55, 120);
    fx_done(&f);
}

static void test_index_write_failure_does_not_fail_appends(void **state)
{
    fixture f;
    fx_init(&f, 400, 40);
    assert_int_equal(reopen(&f), 0);
    fx_memio_fail_only(f.m, ".index");
    fx_memio_fail(f.m, FX_MEMIO_PWRITE, -EIO, 1);
    append_n(f.log, 0, 3); /* the first one's index entry write fails */
    assert_int_equal(fx_dlog_stats_get(f.log)->index_write_failures, 1);
    fx_memio_fail_only(f.m, NULL);
    append_n(f.log, 3, 30); /* rolls: the seal rewrites the broken index whole */
    assert_true(fx_dlog_segment_count(f.log) >= 2);
    close_log(&f, true);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(f.rep.index_rebuilds, 0);
    expect_records(f.log, 0, 33);
    fx_done(&f);
}

static void test_a_missing_middle_segment_refuses_unless_repaired(void **state)
{
    fixture f;
    fx_init(&f, 200, 64);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 12);
    assert_true(fx_dlog_segment_count(f.log) >= 4);
    close_log(&f, true);
    fx_sio *io = fx_memio_sio(f.m);
    assert_int_equal(io->ops->unlink(io, SEG1), 0);
    assert_int_equal(reopen(&f), FX_ESTORAGE_CORRUPT);
    assert_non_null(strstr(f.rep.message, "offset out of order"));
    assert_non_null(strstr(f.rep.message, "file=00000000000000000002.log, position=0)"));
    f.cfg.repair = true;
    assert_int_equal(reopen(&f), 0);
    assert_true(f.rep.repaired);
    assert_int_equal(fx_dlog_segment_count(f.log), 1);
    /* Cut where segment 1 started: segments 1 (gone) and on are dropped. */
    uint64_t seg1_base = fx_dlog_next_offset(f.log);
    assert_int_equal(f.rep.dropped_from, seg1_base);
    assert_true(f.rep.dropped_segments >= 2);
    expect_records(f.log, 0, seg1_base);
    append_n(f.log, seg1_base, 2);
    expect_records(f.log, 0, seg1_base + 2);
    fx_done(&f);
}

static void test_unfinished_rollover_leftovers_are_discarded(void **state)
{
    fixture f;
    fx_init(&f, 200, 64);
    assert_int_equal(reopen(&f), 0);
    append_n(f.log, 0, 8);
    size_t segs = fx_dlog_segment_count(f.log);
    close_log(&f, true);
    fx_sio *io = fx_memio_sio(f.m);
    /* A headerless newest segment. */
    char path[64];
    snprintf(path, sizeof(path), DIR_ "/%020zu.log", segs);
    int fd;
    assert_int_equal(io->ops->open(io, path, FX_SIO_CREATE, &fd), 0);
    assert_int_equal(io->ops->pwrite(io, fd, "FLS", 3, 0), 0);
    io->ops->close(io, fd);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(f.rep.abandoned_segments, 1);
    assert_int_equal(fx_dlog_segment_count(f.log), segs);
    assert_int_equal(fx_dlog_next_offset(f.log), 8);
    close_log(&f, false);
    /* An empty newest segment whose base does not continue the log. */
    assert_int_equal(io->ops->open(io, path, FX_SIO_CREATE, &fd), 0);
    uint8_t h[FX_SEG_HEADER_LEN];
    fx_logfmt_seg_header_encode(h, &(fx_seg_header){.base_offset = 99, .created_us = 1});
    assert_int_equal(io->ops->pwrite(io, fd, h, sizeof(h), 0), 0);
    io->ops->close(io, fd);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(f.rep.abandoned_segments, 1);
    append_n(f.log, 8, 2);
    expect_records(f.log, 0, 10);
    fx_done(&f);
}

static void test_a_hand_laid_segment_in_the_original_format_is_read(void **state)
{
    fixture f;
    fx_init(&f, 1 << 20, 4096);
    fx_sio *io = fx_memio_sio(f.m);
    assert_int_equal(fx_sio_mkdirs(io, DIR_), 0);
    /* Header base 7, the golden record (offset 7, ts 9, "hi"), no index. */
    uint8_t b[FX_SEG_HEADER_LEN + FX_REC_HEADER_LEN + 2];
    fx_logfmt_seg_header_encode(b, &(fx_seg_header){.base_offset = 7, .created_us = 2});
    const uint8_t rec[] = {0x00, 0x00, 0x00, 0x02, 0,    0,    0,    0,    0,   0,
                           0,    7,    0,    0,    0,    0,    0,    0,    0,   9,
                           0xC6, 0x54, 0xDE, 0x27, 0x24, 0x02, 0x15, 0x2C, 'h', 'i'};
    memcpy(b + FX_SEG_HEADER_LEN, rec, sizeof(rec));
    int fd;
    assert_int_equal(io->ops->open(io, SEG0, FX_SIO_CREATE, &fd), 0);
    assert_int_equal(io->ops->pwrite(io, fd, b, sizeof(b), 0), 0);
    io->ops->close(io, fd);
    assert_int_equal(reopen(&f), 0);
    assert_int_equal(fx_dlog_first_offset(f.log), 7);
    assert_int_equal(fx_dlog_next_offset(f.log), 8);
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    assert_int_equal(fx_dlog_read(f.log, 7, 100, 10, &p), 0);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.recs[0].ts_us, 9);
    assert_memory_equal(p.recs[0].data, "hi", 2);
    fx_dlog_page_deinit(&p);
    fx_done(&f);
}

/* ---- real files ------------------------------------------------------------------- */

static void test_posix_files_round_trip(void **state)
{
    char tmpl[] = "/tmp/fx-dlog-XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    char dir[256];
    snprintf(dir, sizeof(dir), "%s/stream", tmpl);
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    c.segment_bytes = 4096;
    c.index_spacing_bytes = 256;
    fx_dlog *log = NULL;
    fx_dlog_recovery rep;
    assert_int_equal(fx_dlog_open(&log, dir, &c, 42, &rep), 0);
    append_n(log, 0, 200);
    assert_int_equal(fx_dlog_sync(log, NULL), 0);
    assert_true(fx_dlog_segment_count(log) > 1);
    assert_int_equal(fx_dlog_close(log, true), 0);
    assert_int_equal(fx_dlog_open(&log, dir, &c, 43, &rep), 0);
    assert_int_equal(rep.index_rebuilds, 0);
    assert_int_equal(fx_dlog_next_offset(log), 200);
    expect_records(log, 0, 200);
    /* The first file starts with the FLSG header of base 0, created at 42. */
    char path[300];
    snprintf(path, sizeof(path), "%s/00000000000000000000.log", dir);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    uint8_t h[FX_SEG_HEADER_LEN];
    assert_int_equal(read(fd, h, sizeof(h)), sizeof(h));
    close(fd);
    uint8_t want[FX_SEG_HEADER_LEN];
    fx_logfmt_seg_header_encode(want, &(fx_seg_header){.base_offset = 0, .created_us = 42});
    assert_memory_equal(h, want, FX_SEG_POINT_POS);
    /* Its reserved word holds the durable point: the whole sealed segment. */
    uint64_t point = 0;
    assert_true(fx_logfmt_point_decode(fx_be32_get(h + FX_SEG_POINT_POS), &point));
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(point, (uint64_t)sb.st_size);
    fx_dlog_close(log, false);
    assert_int_equal(fx_sio_remove_dir(fx_sio_posix(), dir), 0);
    assert_int_equal(rmdir(tmpl), 0);
}

/* ---- memory and disk accounting ----------------------------------------------------- */

/* One 16 MiB record to each of a few logs: each log's encoding buffer is
 * given back after its append, down to what a small append keeps (the
 * log would otherwise hold 16 MiB until it is closed). */
static void test_encode_buffer_is_given_back_after_a_16_mib_append(void **state)
{
    (void)state;
    enum { LOGS = 3 };
    size_t big = 16u << 20;
    uint8_t *payload = malloc(big);
    assert_non_null(payload);
    memset(payload, 'x', big);
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    c.segment_bytes = 64u << 20;
    c.preallocate = false;
    c.io = fx_memio_sio(m);
    fx_dlog *logs[LOGS];
    for (int i = 0; i < LOGS; i++) {
        char dir[16];
        snprintf(dir, sizeof(dir), "/l%d", i);
        assert_int_equal(fx_dlog_open(&logs[i], dir, &c, 1, NULL), 0);
        fx_dlog_iov iov = {.data = payload, .len = (uint32_t)big};
        assert_int_equal(fx_dlog_append(logs[i], &iov, 1, 2, NULL), 0);
        /* 256 KiB: FX_DLOG_ENC_KEEP_BYTES. */
        assert_true(logs[i]->enc_cap <= (256u << 10));
        assert_true(fx_dlog_buffer_bytes(logs[i]) <= (256u << 10) + 4096);
        /* A small append after it keeps a small buffer and reads back. */
        fx_dlog_iov small = {.data = "after", .len = 5};
        assert_int_equal(fx_dlog_append(logs[i], &small, 1, 3, NULL), 0);
        assert_true(logs[i]->enc_cap > 0 && logs[i]->enc_cap <= (256u << 10));
    }
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    assert_int_equal(fx_dlog_read(logs[LOGS - 1], 0, 1u << 20, 10, &p), 0);
    assert_int_equal(p.n, 1); /* the large record alone, whole */
    assert_int_equal(p.recs[0].len, big);
    assert_int_equal(fx_dlog_read(logs[LOGS - 1], 1, 1u << 20, 10, &p), 0);
    assert_int_equal(p.n, 1);
    assert_memory_equal(p.recs[0].data, "after", 5);
    fx_dlog_page_deinit(&p);
    for (int i = 0; i < LOGS; i++)
        fx_dlog_close(logs[i], false);
    fx_memio_free(m);
    free(payload);
}

/* The quotas' view of a log: its files plus the unwritten preallocation of
 * the active segment; the prediction of an append matches what the log
 * takes after it, a rollover (the old segment cut, a new one reserved)
 * included. */
static void test_disk_bytes_count_preallocation_and_predict_appends(void **state)
{
    (void)state;
    fixture f;
    fx_init(&f, 4096, 1 << 20);
    assert_int_equal(reopen(&f), 0);
    /* Empty: a header, an index header and the rest of the reservation. */
    assert_int_equal(fx_dlog_bytes_on_disk(f.log), FX_SEG_HEADER_LEN + FX_IDX_HEADER_LEN);
    assert_int_equal(fx_dlog_disk_bytes(f.log), 4096 + FX_IDX_HEADER_LEN);
    for (uint64_t off = 0; off < 200; off++) {
        char buf[64];
        size_t len = payload_of(off, buf, sizeof(buf));
        uint64_t want = fx_dlog_disk_bytes_after(f.log, FX_REC_HEADER_LEN + len);
        size_t segs = fx_dlog_segment_count(f.log);
        assert_int_equal(append_batch(f.log, off, 1, 10 + off), 0);
        /* Index entries come on top (one per segment here: its first). */
        uint64_t idx = fx_dlog_segment_count(f.log) > segs ? FX_IDX_ENTRY_LEN : 0;
        if (off == 0)
            idx = FX_IDX_ENTRY_LEN;
        assert_int_equal(fx_dlog_disk_bytes(f.log), want + idx);
    }
    assert_true(fx_dlog_segment_count(f.log) > 2);
    /* Without preallocation it is the files alone. */
    f.cfg.preallocate = false;
    assert_int_equal(reopen(&f), 0);
    uint64_t files = fx_dlog_bytes_on_disk(f.log);
    assert_int_equal(fx_dlog_disk_bytes_after(f.log, 100), files + 100);
    fx_done(&f);
}

/* A directory whose files' paths would pass PATH_MAX is refused at open:
 * before, every file name was cut short silently, so the segment and its
 * index could land on one truncated name. One that just fits works. */
static void test_a_directory_too_long_for_its_file_names_is_refused(void **state)
{
    fixture f;
    fx_init(&f, 4096, 64);
    char dir[PATH_MAX + 8];
    size_t fits = PATH_MAX - 1 - FX_LOGFMT_FILE_NAME_MAX;
    dir[0] = '/';
    memset(dir + 1, 'd', fits);
    dir[fits + 1] = '\0';
    uint64_t calls = fx_memio_calls(f.m);
    assert_int_equal(fx_dlog_open(&f.log, dir, &f.cfg, 1, &f.rep), -ENAMETOOLONG);
    assert_non_null(strstr(f.rep.message, "too long"));
    assert_int_equal(fx_memio_calls(f.m), calls); /* nothing touched */
    dir[fits] = '\0';
    assert_int_equal(fx_dlog_open(&f.log, dir, &f.cfg, 1, &f.rep), 0);
    uint64_t first = 9;
    fx_dlog_iov iov = {.data = "rec", .len = 3};
    assert_int_equal(fx_dlog_append(f.log, &iov, 1, 1, &first), 0);
    assert_int_equal(first, 0);
    assert_int_equal(fx_dlog_sync(f.log, NULL), 0);
    close_log(&f, true);
    assert_int_equal(fx_dlog_open(&f.log, dir, &f.cfg, 2, &f.rep), 0);
    assert_int_equal(fx_dlog_next_offset(f.log), 1);
    close_log(&f, false);
    fx_memio_free(f.m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_append_assigns_contiguous_offsets),
    cmocka_unit_test(test_offset_for_time_finds_the_first_record_at_or_after_it),
    cmocka_unit_test(test_append_rejects_empty_and_oversized_batches),
    cmocka_unit_test(test_config_bounds_are_checked),
    cmocka_unit_test(test_reopen_resumes_at_the_next_offset),
    cmocka_unit_test(test_read_is_bounded_by_bytes_and_records),
    cmocka_unit_test(test_rollover_keeps_a_batch_at_the_boundary_whole),
    cmocka_unit_test(test_an_oversized_batch_goes_alone_into_a_segment),
    cmocka_unit_test(test_preallocation_reserves_and_seal_releases_it),
    cmocka_unit_test(test_sync_reports_the_durable_offset),
    cmocka_unit_test(test_failed_flush_stops_the_log_until_reopened),
    cmocka_unit_test(test_enospc_fails_the_append_and_recovers_when_space_returns),
    cmocka_unit_test(test_enospc_at_rollover_keeps_the_active_segment),
    cmocka_unit_test(test_retention_by_bytes_removes_whole_sealed_segments),
    cmocka_unit_test(test_retention_by_bytes_deletes_no_more_than_the_bound_needs),
    cmocka_unit_test(test_retention_by_age_uses_the_newest_record),
    cmocka_unit_test(test_reader_in_a_deleted_range_gets_cursor_too_old),
    cmocka_unit_test(test_torn_tail_is_cut_at_every_byte),
    cmocka_unit_test(test_a_zero_filled_tail_is_cut_as_torn),
    cmocka_unit_test(test_zero_block_inside_the_last_unsynced_append_is_cut),
    cmocka_unit_test(test_hole_then_valid_record_tail_is_cut),
    cmocka_unit_test(test_damage_before_the_durable_point_is_corruption),
    cmocka_unit_test(test_bit_flip_in_a_sealed_segment_refuses_to_open),
    cmocka_unit_test(test_bit_flip_found_by_a_read_when_open_checks_only_the_tail),
    cmocka_unit_test(test_corruption_before_the_active_tail_refuses_unless_repaired),
    cmocka_unit_test(test_damaged_last_record_is_cut_only_with_repair_checksum_tail),
    cmocka_unit_test(test_one_append_writes_its_index_entries_in_one_write),
    cmocka_unit_test(test_room_after_follows_the_rollover_rule),
    cmocka_unit_test(test_index_seek_lands_on_the_greatest_entry_at_or_below_every_offset),
    cmocka_unit_test(test_missing_or_garbage_index_is_rebuilt_identically),
    cmocka_unit_test(test_sealed_reads_search_the_index_file_and_survive_its_loss),
    cmocka_unit_test(test_index_write_failure_does_not_fail_appends),
    cmocka_unit_test(test_a_missing_middle_segment_refuses_unless_repaired),
    cmocka_unit_test(test_unfinished_rollover_leftovers_are_discarded),
    cmocka_unit_test(test_a_hand_laid_segment_in_the_original_format_is_read),
    cmocka_unit_test(test_posix_files_round_trip),
    cmocka_unit_test(test_encode_buffer_is_given_back_after_a_16_mib_append),
    cmocka_unit_test(test_disk_bytes_count_preallocation_and_predict_appends),
    cmocka_unit_test(test_a_directory_too_long_for_its_file_names_is_refused),
};
FX_TEST_MAIN(tests)
